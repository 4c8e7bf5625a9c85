//! The kubelet of every simulated node: runs the pods bound to a node
//! (`spec.nodeName` set), as in-process tasks calling the [`Api`] directly.
//!
//! - Pods get a loopback IP of their own (127.1.x.y upwards, never
//!   127.0.0.1, which is every node's `hostIP`), a directory with their
//!   volumes, and a status kept as a kubelet keeps it (phase, conditions,
//!   container states, restarts with back-off), written through the status
//!   subresource.
//! - Containers run as real child processes, the host's userland standing
//!   in for their images (agentdeck's own binary for agentdeck's); the
//!   pause image and those with the simulation annotations are played, and
//!   a commandless one of an image the sandbox does not know fails as an
//!   image that cannot be pulled ([`policy`] has the rules, [`runtime`]
//!   applies them).
//! - Output is kept per container instance and served by the API's
//!   `GET …/pods/NAME/log` through [`Hooks::pod_logs`]; port-forward dials
//!   the pod's IP ([`Hooks::pod_port_forward`]).
//! - Graceful deletion is carried out (SIGTERM, the grace period, SIGKILL,
//!   final status, then removal); pods removed from the store otherwise are
//!   killed at once, and every process is killed when the kubelet stops.
//!
//! - Processes see their volumes at their mount paths and only their own
//!   processes, each container in a private mount namespace and a PID
//!   namespace (its command PID 1) set up by our own binary before it
//!   becomes the container's command ([`mountns`]; joined by `kubectl
//!   exec`). Where the machine allows no namespaces (found out once, by a
//!   probe) or `AGENTDECK_SANDBOX_MOUNT_NAMESPACES=0` says so, they get
//!   host paths instead ([`fallback`]) and the pod a `MountsNotAtPaths`
//!   Warning Event; where it allows no PID namespace, they see the host's
//!   processes.
//! - Their environment is the kubelet's: service links for the Services of
//!   the pod's namespace (unless `enableServiceLinks: false`) and always
//!   `KUBERNETES_*` for `default/kubernetes`, which points at the sandbox,
//!   and the service-account volume admission adds (a token bound to the
//!   pod, the CA, the namespace; see [`credentials`]), so they connect with
//!   the in-cluster configuration as in a cluster.

mod credentials;
mod env;
mod exec;
pub mod fallback;
mod logs;
pub mod mountns;
mod pod;
pub mod policy;
mod root;
pub mod runtime;
mod status;
pub mod volumes;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::api::{Api, ApiError, ApiResult, Hooks, LogOptions, LogStream};
use super::store::EventType;
use pod::PodRuntime;
use status::{State, go_list};

/// Every node's address, and so every pod's `hostIP`.
pub const HOST_IP: &str = "127.0.0.1";

/// Environment variable naming the executable that agentdeck containers run
/// (default: this process's own executable when it is `agentdeck`, else
/// `agentdeck` from `PATH`).
pub const EXE_ENV: &str = "AGENTDECK_SANDBOX_EXE";

/// Environment variable: `0` (or `false`, `off`) runs containers without
/// mount namespaces, with host paths (see [`fallback`]).
pub const MOUNT_NAMESPACES_ENV: &str = "AGENTDECK_SANDBOX_MOUNT_NAMESPACES";

/// Whether `exe` is the agentdeck binary, whose `main` serves the hidden
/// container entry point ([`policy::is_agentdeck_exe`]). Another program
/// embedding the sandbox (a test or bench harness) would take
/// `__sandbox-container …` as its own arguments and, with no harness to
/// refuse them, start a sandbox again at each pod's probe: such a process
/// names its agentdeck with [`EXE_ENV`].
fn is_agentdeck(exe: &std::path::Path) -> bool {
    policy::is_agentdeck_exe(exe)
}

/// How the kubelet runs.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// The agentdeck executable containers run.
    pub exe: PathBuf,
    /// Where pod directories go; None = a new temporary directory, removed
    /// when the kubelet stops.
    pub root: Option<PathBuf>,
    /// Back-off before the second restart (doubling after, at most 5 min);
    /// the first restart is immediate. 10 s, as the real kubelet.
    pub restart_backoff: Duration,
    /// Log bytes kept per container (current and previous instance).
    pub log_limit: usize,
    /// How often every pod is looked at again, besides watching changes.
    pub resync: Duration,
    /// Run real-process containers in mount namespaces (with `exe`'s
    /// hidden entry point) where the machine allows it; false always
    /// passes host paths instead.
    pub mount_namespaces: bool,
}

impl KubeletConfig {
    /// Defaults, with the executable from [`EXE_ENV`] or this process.
    pub fn from_env() -> Self {
        let exe = std::env::var_os(EXE_ENV)
            .map(PathBuf::from)
            .or_else(|| std::env::current_exe().ok().filter(|p| is_agentdeck(p)))
            .unwrap_or_else(policy::default_exe);
        KubeletConfig {
            exe,
            root: None,
            restart_backoff: Duration::from_secs(10),
            log_limit: logs::DEFAULT_LOG_LIMIT,
            resync: Duration::from_secs(1),
            mount_namespaces: !std::env::var(MOUNT_NAMESPACES_ENV)
                .is_ok_and(|v| matches!(v.trim(), "0" | "false" | "off" | "no")),
        }
    }
}

/// Starts the kubelet of every node and installs it as the API's [`Hooks`];
/// it runs until `cancel`, then kills every process it started.
pub fn start(api: Arc<Api>, cancel: CancellationToken) -> JoinHandle<()> {
    start_with(api, cancel, KubeletConfig::from_env())
}

/// [`start`] with a given configuration.
pub fn start_with(
    api: Arc<Api>,
    cancel: CancellationToken,
    config: KubeletConfig,
) -> JoinHandle<()> {
    let (own_root, root) = match &config.root {
        Some(r) => (false, r.clone()),
        None => {
            // Sandboxes killed outright (SIGKILL) left theirs behind.
            root::remove_stale(&std::env::temp_dir(), root::pid_alive);
            (true, root::fresh_root(&std::env::temp_dir()))
        }
    };
    // Removes our own root however the kubelet's task ends (dropped with
    // its runtime included), not only after a clean stop.
    let guard = own_root.then(|| root::RootGuard(root.clone()));
    let shared = Arc::new(Shared::default());
    let (tx, rx) = mpsc::unbounded_channel();
    api.set_hooks(Arc::new(KubeletHooks {
        api: Arc::downgrade(&api),
        shared: shared.clone(),
        deletions: tx,
        exe: config.exe.clone(),
    }));
    let kubelet = Arc::new(Kubelet {
        api,
        config,
        shared,
        root,
        own_root,
        // A random start: sandboxes running side by side on one machine
        // (parallel tests, several users) would otherwise hand out the same
        // pod IPs, and their agents' health ports would collide.
        ips: Mutex::new(IpPool {
            next: fastrand::u32(..254 * 256 * 256),
            ..IpPool::default()
        }),
        mount_mode: tokio::sync::OnceCell::new(),
    });
    tokio::spawn(async move {
        let _guard = guard;
        kubelet.run(rx, cancel).await;
    })
}

/// The pods the node runs, by uid (shared with the API hooks).
#[derive(Default)]
struct Shared {
    pods: Mutex<HashMap<String, Arc<PodRuntime>>>,
}

impl Shared {
    fn pods(&self) -> MutexGuard<'_, HashMap<String, Arc<PodRuntime>>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, uid: &str) -> Option<Arc<PodRuntime>> {
        self.pods().get(uid).cloned()
    }

    fn all(&self) -> Vec<Arc<PodRuntime>> {
        self.pods().values().cloned().collect()
    }
}

/// Loopback addresses for pods, never handing out one in use and not
/// reusing freed ones before the range wraps.
#[derive(Default)]
struct IpPool {
    next: u32,
    used: HashSet<Ipv4Addr>,
}

impl IpPool {
    /// 127.1.0.1 … 127.254.255.254, skipping .0 and .255 last octets.
    fn allocate(&mut self) -> Option<Ipv4Addr> {
        const SPAN: u32 = 254 * 256 * 256;
        for _ in 0..SPAN {
            let n = self.next % SPAN;
            self.next = self.next.wrapping_add(1);
            let ip = Ipv4Addr::new(
                127,
                (1 + n / 65_536) as u8,
                (n / 256 % 256) as u8,
                (n % 256) as u8,
            );
            let last = ip.octets()[3];
            if last == 0 || last == 255 || self.used.contains(&ip) {
                continue;
            }
            self.used.insert(ip);
            return Some(ip);
        }
        None
    }

    fn release(&mut self, ip: &str) {
        if let Ok(ip) = ip.parse() {
            self.used.remove(&ip);
        }
    }
}

/// The kubelet shared by all simulated nodes.
pub(crate) struct Kubelet {
    api: Arc<Api>,
    config: KubeletConfig,
    shared: Arc<Shared>,
    root: PathBuf,
    own_root: bool,
    ips: Mutex<IpPool>,
    /// Whether containers get mount namespaces, or why not (probed once).
    mount_mode: tokio::sync::OnceCell<Result<Namespaces, String>>,
}

/// The namespaces containers get besides their mount namespace (found by
/// the probe).
#[derive(Debug, Clone)]
pub(super) struct Namespaces {
    /// A PID namespace of their own (`sh -c 'echo $$'` prints 1), or why
    /// not: without one they see the host's processes and PIDs.
    pub pid: Result<(), String>,
}

fn meta<'a>(pod: &'a Value, key: &str) -> &'a str {
    pod["metadata"][key].as_str().unwrap_or_default()
}

impl Kubelet {
    /// Ok when containers run in mount namespaces, with the others they
    /// get; else why not (decided on first use: off by configuration, or a
    /// probe of `exe` that failed).
    pub(super) async fn mount_mode(&self) -> Result<Namespaces, String> {
        self.mount_mode
            .get_or_init(|| async {
                if !self.config.mount_namespaces {
                    return Err(format!("turned off ({MOUNT_NAMESPACES_ENV})"));
                }
                let scratch = self.root.join(".probe");
                let mut cmd = tokio::process::Command::new(&self.config.exe);
                cmd.args(mountns::probe_args(&scratch))
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .kill_on_drop(true);
                let outcome =
                    match tokio::time::timeout(Duration::from_secs(30), cmd.output()).await {
                        Ok(Ok(o)) if o.status.success() => Ok(Namespaces {
                            pid: mountns::probed_pid_namespace(&String::from_utf8_lossy(
                                &o.stdout,
                            )),
                        }),
                        Ok(Ok(o)) => Err(format!(
                            "{} {} failed ({}): {}",
                            self.config.exe.display(),
                            mountns::SUBCOMMAND,
                            o.status,
                            String::from_utf8_lossy(&o.stderr).trim()
                        )),
                        Ok(Err(e)) => Err(format!("cannot run {}: {e}", self.config.exe.display())),
                        Err(_) => Err("the mount namespace probe did not finish".to_string()),
                    };
                let _ = std::fs::remove_dir(&scratch);
                match &outcome {
                    Ok(Namespaces { pid: Ok(()) }) => tracing::debug!(
                        "containers see their volumes at their mount paths, in PID namespaces of their own"
                    ),
                    Ok(Namespaces { pid: Err(why) }) => tracing::warn!(
                        reason = %why,
                        "no PID namespaces: containers see the host's processes"
                    ),
                    Err(why) => tracing::warn!(
                        reason = %why,
                        "no mount namespaces: containers get host paths for their volumes"
                    ),
                }
                outcome
            })
            .await
            .clone()
    }

    async fn run(
        self: Arc<Self>,
        mut deletions: mpsc::UnboundedReceiver<(String, String)>,
        cancel: CancellationToken,
    ) {
        let mut changes = self.api.store.subscribe();
        let mut workers: HashMap<String, JoinHandle<()>> = HashMap::new();
        let mut tick = tokio::time::interval(self.config.resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => self.resync(&mut workers),
                Some((ns, name)) = deletions.recv() => {
                    if let Some(pod) = self.api.store.get("pods", &ns, &name) {
                        self.sync_pod(&pod, &mut workers);
                    }
                }
                change = changes.recv() => match change {
                    Ok(c) if c.resource == "pods" => {
                        if c.kind == EventType::Deleted {
                            if let Some(rt) = self.shared.get(meta(&c.object, "uid")) {
                                rt.kill();
                            }
                        } else {
                            self.sync_pod(&c.object, &mut workers);
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => self.resync(&mut workers),
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            }
        }
        deletions.close();
        for rt in self.shared.all() {
            rt.kill();
        }
        let all = futures::future::join_all(workers.into_values());
        let _ = tokio::time::timeout(Duration::from_secs(10), all).await;
        if self.own_root {
            let root = self.root.clone();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(root)).await;
        }
    }

    /// Looks at every pod: starts new ones, finishes deletions, kills the
    /// processes of pods that are gone.
    fn resync(self: &Arc<Self>, workers: &mut HashMap<String, JoinHandle<()>>) {
        let (pods, _) = self.api.store.list("pods", None);
        let uids: HashSet<&str> = pods.iter().map(|p| meta(p, "uid")).collect();
        for rt in self.shared.all() {
            if !uids.contains(rt.uid.as_str()) {
                rt.kill();
            }
        }
        for pod in &pods {
            self.sync_pod(pod, workers);
        }
        workers.retain(|_, h| !h.is_finished());
    }

    fn sync_pod(self: &Arc<Self>, pod: &Value, workers: &mut HashMap<String, JoinHandle<()>>) {
        if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            return;
        }
        let uid = meta(pod, "uid");
        let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
        if let Some(rt) = self.shared.get(uid) {
            if deleting {
                let grace = pod["metadata"]["deletionGracePeriodSeconds"]
                    .as_i64()
                    .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
                    .unwrap_or(30);
                if rt.terminate(Duration::from_secs(u64::try_from(grace).unwrap_or(0))) {
                    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
                        let name = c["name"].as_str().unwrap_or_default();
                        self.event(
                            pod,
                            "Normal",
                            "Killing",
                            &format!("Stopping container {name}"),
                        );
                    }
                }
            }
            return;
        }
        if deleting {
            // Nothing of it runs here (finished, or never started).
            if !workers.contains_key(uid) {
                self.api
                    .finish_pod_deletion(meta(pod, "namespace"), meta(pod, "name"));
            }
            return;
        }
        if workers.contains_key(uid)
            || matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        {
            return;
        }
        let pod_ip = if pod["spec"]["hostNetwork"].as_bool() == Some(true) {
            HOST_IP.to_string()
        } else {
            let ip = self
                .ips
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .allocate();
            match ip {
                Some(ip) => ip.to_string(),
                None => {
                    tracing::warn!(
                        pod = meta(pod, "name"),
                        "no loopback address left for the pod"
                    );
                    return;
                }
            }
        };
        let short_uid: String = uid
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(8)
            .collect();
        let dir = self.root.join(format!(
            "{}_{}_{short_uid}",
            meta(pod, "namespace"),
            meta(pod, "name")
        ));
        let rt = Arc::new(PodRuntime::new(
            pod,
            pod_ip,
            HOST_IP,
            dir,
            self.config.log_limit,
        ));
        self.shared.pods().insert(uid.to_string(), rt.clone());
        let handle = tokio::spawn(self.clone().run_pod(rt, pod.clone()));
        workers.insert(uid.to_string(), handle);
    }

    /// Forgets a pod that has ended on the node.
    fn release(&self, rt: &PodRuntime) {
        self.shared.pods().remove(&rt.uid);
        if rt.pod_ip != HOST_IP {
            self.ips
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(&rt.pod_ip);
        }
    }
}

/// What the API calls into: deletions go to the kubelet's loop, logs are
/// read from the node's pods.
struct KubeletHooks {
    api: Weak<Api>,
    shared: Arc<Shared>,
    deletions: mpsc::UnboundedSender<(String, String)>,
    exe: PathBuf,
}

impl Hooks for KubeletHooks {
    fn pod_deletion_requested(&self, namespace: &str, name: &str) -> bool {
        self.deletions
            .send((namespace.to_string(), name.to_string()))
            .is_ok()
    }

    fn pod_logs(&self, namespace: &str, name: &str, opts: &LogOptions) -> ApiResult<LogStream> {
        let api = self
            .api
            .upgrade()
            .ok_or_else(|| ApiError::internal("the sandbox is stopping"))?;
        let pod = api.pod(namespace, name)?;
        let container = choose_container(&pod, opts.container.as_deref())?;
        if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            // As the apiserver does for a pod with no host: an empty log.
            return Ok(LogStream::Done(Vec::new()));
        }
        let Some(rt) = self.shared.get(meta(&pod, "uid")) else {
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
            )));
        };
        let Some(slot) = rt.slot(&container) else {
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is not available"
            )));
        };
        let status = slot.status().clone();
        let id = log_instance(&status, name, opts.previous).map_err(ApiError::bad_request)?;
        Ok(slot.logs.read(&id, opts, jiff::Timestamp::now()))
    }

    fn pod_stream(
        &self,
        req: &crate::sandbox::exec::StreamRequest,
    ) -> ApiResult<crate::sandbox::exec::Launcher> {
        let api = self
            .api
            .upgrade()
            .ok_or_else(|| ApiError::internal("the sandbox is stopping"))?;
        let pod = api.pod(&req.namespace, &req.pod)?;
        let container = choose_container(&pod, req.container.as_deref())?;
        let rt = self.shared.get(meta(&pod, "uid"));
        exec::launcher(&pod, rt, &container, &self.exe, req)
    }

    fn pod_port_forward(
        &self,
        namespace: &str,
        name: &str,
    ) -> ApiResult<crate::sandbox::portforward::Target> {
        let api = self
            .api
            .upgrade()
            .ok_or_else(|| ApiError::internal("the sandbox is stopping"))?;
        let pod = api.pod(namespace, name)?;
        // As the kubelet answers for a pod it does not run (any more).
        let rt = self
            .shared
            .get(meta(&pod, "uid"))
            .filter(|rt| rt.sandbox_ready())
            .ok_or_else(|| ApiError::new_status(404, "NotFound", "pod does not exist"))?;
        Ok(crate::sandbox::portforward::Target {
            ip: rt.pod_ip.clone(),
            sandbox_id: rt.sandbox_id.clone(),
        })
    }
}

/// The apiserver's `validateContainer`: the named container must exist; with
/// none named, the pod must have exactly one.
pub(crate) fn choose_container(pod: &Value, asked: Option<&str>) -> ApiResult<String> {
    let name = meta(pod, "name");
    let spec = &pod["spec"];
    let names_in = |key: &str| -> Vec<String> {
        spec[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    };
    let mut all = names_in("initContainers");
    let regular = names_in("containers");
    all.extend(regular.iter().cloned());
    all.extend(names_in("ephemeralContainers"));
    match asked {
        Some(c) if all.iter().any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => match regular.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => {
                let names: Vec<&str> = all.iter().map(String::as_str).collect();
                Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: {}",
                    go_list(&names)
                )))
            }
        },
    }
}

/// The kubelet's `validateContainerLogStatus`: which instance's log a
/// request reads, or why there is none.
fn log_instance(
    status: &status::ContainerStatus,
    pod: &str,
    previous: bool,
) -> Result<String, String> {
    let c = &status.name;
    let last = status.last.as_ref().filter(|t| !t.container_id.is_empty());
    if previous {
        return last.map(|t| t.container_id.clone()).ok_or_else(|| {
            format!("previous terminated container \"{c}\" in pod \"{pod}\" not found")
        });
    }
    match &status.state {
        State::Running { container_id, .. } => Ok(container_id.clone()),
        State::Terminated(t) if !t.container_id.is_empty() => Ok(t.container_id.clone()),
        State::Terminated(_) => last
            .map(|t| t.container_id.clone())
            .ok_or_else(|| format!("container \"{c}\" in pod \"{pod}\" is terminated")),
        State::Waiting { reason, .. } => match last {
            Some(t) => Ok(t.container_id.clone()),
            None => Err(format!(
                "container \"{c}\" in pod \"{pod}\" is waiting to start: {reason}"
            )),
        },
    }
}
