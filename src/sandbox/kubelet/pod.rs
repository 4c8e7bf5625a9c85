//! One pod on a simulated node: its sandbox (directory, volumes, IP), its
//! containers run to the pod's restart policy, its status kept in the API,
//! and its end (graceful termination, or a kill when it vanished).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Kubelet;
use super::credentials;
use super::env::{self, PodFields};
use super::exec::ExecContext;
use super::logs::ContainerLogs;
use super::runtime::{self, Launch, Program};
use super::status::{ContainerStatus, PodSnapshot, State, Terminated};
use super::volumes::{self, ContainerMount};
use super::{fallback, mountns, policy};
use crate::sandbox::api::now_rfc3339;

/// What has been asked of a pod's containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// Keep running.
    None,
    /// SIGTERM now, SIGKILL at `deadline` (a deletion the kubelet completes).
    Graceful { deadline: Instant },
    /// SIGKILL now: the pod is gone from the API, or the node is stopping.
    Kill,
}

/// One container of the pod: its spec, logs and current status.
pub(super) struct ContainerSlot {
    pub name: String,
    pub init: bool,
    pub spec: Value,
    pub logs: Arc<ContainerLogs>,
    status: Mutex<ContainerStatus>,
    /// How its current instance was started, for exec.
    exec: Mutex<Option<Arc<ExecContext>>>,
    process: Mutex<Option<ContainerProcess>>,
    /// The running process's standard streams, for attach.
    attach: Mutex<Option<Arc<runtime::Attach>>>,
}

/// The running process of a real-process container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ContainerProcess {
    /// Its pid (also its process group and session): with a mount
    /// namespace, the supervisor of [`mountns`], a process of the container.
    pub pid: i32,
    /// It runs in a mount namespace of its own: a process meant to see
    /// the container's files joins it with [`mountns::join_args`].
    pub mount_namespace: bool,
}

impl ContainerSlot {
    pub fn status(&self) -> MutexGuard<'_, ContainerStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How its current instance was started (None before the first).
    pub fn exec_context(&self) -> Option<Arc<ExecContext>> {
        self.exec.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The container's running process, if it has one now.
    pub fn process(&self) -> Option<ContainerProcess> {
        *self.process.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_process(&self, p: Option<ContainerProcess>) {
        *self.process.lock().unwrap_or_else(|p| p.into_inner()) = p;
    }

    /// The running process's standard streams, when it keeps its input
    /// open (`stdin: true`).
    pub fn attach(&self) -> Option<Arc<runtime::Attach>> {
        self.attach
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_attach(&self, a: Option<Arc<runtime::Attach>>) {
        *self.attach.lock().unwrap_or_else(|p| p.into_inner()) = a;
    }
}

#[derive(Debug, Default)]
struct PodState {
    sandbox_ready: bool,
    terminal: bool,
}

/// A pod the node runs.
pub(super) struct PodRuntime {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub pod_ip: String,
    pub host_ip: String,
    /// The id of its sandbox, as a CRI runtime names it (port-forward errors).
    pub sandbox_id: String,
    pub dir: PathBuf,
    pub start_time: String,
    pub restart_policy: String,
    pub slots: Vec<Arc<ContainerSlot>>,
    state: Mutex<PodState>,
    pub stop: watch::Sender<Stop>,
    /// Status changed: write it.
    pub dirty: Notify,
    /// The runtime is being dropped: its status writer ends.
    pub gone: CancellationToken,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl PodRuntime {
    pub fn new(pod: &Value, pod_ip: String, host_ip: &str, dir: PathBuf, log_limit: usize) -> Self {
        let spec = &pod["spec"];
        let has_init = spec["initContainers"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        let mut slots = Vec::new();
        for (key, init) in [("initContainers", true), ("containers", false)] {
            for c in spec[key].as_array().into_iter().flatten() {
                let name = c["name"].as_str().unwrap_or_default().to_string();
                let image = c["image"].as_str().unwrap_or_default();
                let waiting = if init || has_init {
                    "PodInitializing"
                } else {
                    "ContainerCreating"
                };
                slots.push(Arc::new(ContainerSlot {
                    status: Mutex::new(ContainerStatus::new(&name, image, waiting)),
                    name,
                    init,
                    spec: c.clone(),
                    logs: Arc::new(ContainerLogs::new(log_limit)),
                    exec: Mutex::new(None),
                    process: Mutex::new(None),
                    attach: Mutex::new(None),
                }));
            }
        }
        let meta = &pod["metadata"];
        PodRuntime {
            uid: meta["uid"].as_str().unwrap_or_default().to_string(),
            namespace: meta["namespace"].as_str().unwrap_or_default().to_string(),
            name: meta["name"].as_str().unwrap_or_default().to_string(),
            pod_ip,
            host_ip: host_ip.to_string(),
            sandbox_id: (0..32)
                .map(|_| format!("{:02x}", fastrand::u8(..)))
                .collect(),
            dir,
            start_time: now_rfc3339(),
            restart_policy: spec["restartPolicy"]
                .as_str()
                .unwrap_or("Always")
                .to_string(),
            slots,
            state: Mutex::new(PodState::default()),
            stop: watch::Sender::new(Stop::None),
            dirty: Notify::new(),
            gone: CancellationToken::new(),
        }
    }

    /// Whether its sandbox (IP, volumes) is set up: its ports can be dialled.
    pub fn sandbox_ready(&self) -> bool {
        self.state().sandbox_ready && !self.state().terminal
    }

    fn state(&self) -> MutexGuard<'_, PodState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn changed(&self) {
        self.dirty.notify_one();
    }

    pub fn slot(&self, name: &str) -> Option<&Arc<ContainerSlot>> {
        self.slots.iter().find(|s| s.name == name)
    }

    /// Everything the status is computed from.
    pub fn snapshot(&self) -> PodSnapshot {
        let st = self.state();
        let (init, containers): (Vec<_>, Vec<_>) = self.slots.iter().partition(|s| s.init);
        PodSnapshot {
            host_ip: self.host_ip.clone(),
            pod_ip: st.sandbox_ready.then(|| self.pod_ip.clone()),
            start_time: self.start_time.clone(),
            sandbox_ready: st.sandbox_ready,
            terminal: st.terminal,
            restart_policy: self.restart_policy.clone(),
            init: init.iter().map(|s| s.status().clone()).collect(),
            containers: containers.iter().map(|s| s.status().clone()).collect(),
        }
    }

    /// Asks for a graceful stop within `grace` (a shorter grace given later
    /// wins, as with a second `kubectl delete --grace-period`).
    /// True the first time (the pod was running until now).
    pub fn terminate(&self, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        let mut first = false;
        self.stop.send_if_modified(|s| match *s {
            Stop::None => {
                *s = Stop::Graceful { deadline };
                first = true;
                true
            }
            Stop::Graceful { deadline: d } if deadline < d => {
                *s = Stop::Graceful { deadline };
                true
            }
            _ => false,
        });
        first
    }

    /// Kills every process at once.
    pub fn kill(&self) {
        self.stop.send_replace(Stop::Kill);
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow() != Stop::None
    }
}

/// Waits `d`, or less if a stop is asked; true when stopping.
async fn wait_or_stop(rx: &mut watch::Receiver<Stop>, d: Duration) -> bool {
    let sleep = tokio::time::sleep(d);
    tokio::pin!(sleep);
    loop {
        if *rx.borrow_and_update() != Stop::None {
            return true;
        }
        tokio::select! {
            () = &mut sleep => return *rx.borrow() != Stop::None,
            r = rx.changed() => if r.is_err() { return true },
        }
    }
}

fn new_container_id() -> String {
    let hex: String = (0..32)
        .map(|_| format!("{:02x}", fastrand::u8(..)))
        .collect();
    format!("agentdeck://{hex}")
}

/// The restart policy a container follows: an init container's is never
/// Always (it restarts on failure unless the pod's is Never).
fn restart_policy(slot: &ContainerSlot, rt: &PodRuntime) -> &'static str {
    match (slot.init, rt.restart_policy.as_str()) {
        (true, "Never") | (false, "Never") => "Never",
        (true, _) | (false, "OnFailure") => "OnFailure",
        _ => "Always",
    }
}

/// The image the pod's spec names for the container.
fn container_image(pod: &Value, slot: &ContainerSlot) -> String {
    pod["spec"][if slot.init {
        "initContainers"
    } else {
        "containers"
    }]
    .as_array()
    .and_then(|cs| cs.iter().find(|c| c["name"] == slot.name.as_str()))
    .and_then(|c| c["image"].as_str())
    .unwrap_or_default()
    .to_string()
}

/// How the container's new instance is started, for exec.
fn set_exec_context(
    rt: &PodRuntime,
    slot: &ContainerSlot,
    vols: &BTreeMap<String, PathBuf>,
    prepared: &Prepared,
) {
    *slot.exec.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(ExecContext {
        real: matches!(prepared.program, Program::Exec { .. }),
        env: prepared.env.clone(),
        dir: rt.dir.clone(),
        mounts: volumes::container_mounts(&slot.spec, vols),
        working_dir: slot.spec["workingDir"]
            .as_str()
            .filter(|d| d.starts_with('/'))
            .map_or_else(|| PathBuf::from("/"), PathBuf::from),
        process: None,
    }));
}

/// The container's status once instance `id` has started: Running, after
/// `previous`, restarted `runs` times.
fn mark_running(
    slot: &ContainerSlot,
    id: &str,
    started_at: &str,
    previous: &Option<Terminated>,
    runs: u32,
) {
    let mut s = slot.status();
    s.state = State::Running {
        container_id: id.to_string(),
        started_at: started_at.to_string(),
    };
    s.last = previous.clone();
    s.restart_count = runs;
    s.ready = false;
}

/// The container's status when its instance cannot be prepared (its
/// environment names what is not there): Waiting,
/// `CreateContainerConfigError` with `message`.
fn config_error(rt: &PodRuntime, slot: &ContainerSlot, message: String) {
    slot.status().state = State::Waiting {
        reason: "CreateContainerConfigError".into(),
        message: Some(message),
    };
    rt.changed();
}

/// The container's status once instance `id`, started at `started_at`,
/// has exited with `code` (its logs closed). Returns its end.
fn mark_exited(
    rt: &PodRuntime,
    slot: &ContainerSlot,
    id: &str,
    code: i32,
    started_at: &str,
) -> Terminated {
    slot.logs.close(id);
    let term = Terminated::exited(id, code, started_at, &now_rfc3339());
    {
        let mut s = slot.status();
        s.state = State::Terminated(term.clone());
        s.ready = false;
    }
    rt.changed();
    term
}

/// Go's `time.Duration` printing for whole seconds (`10s`, `2m40s`, `5m0s`).
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m{}s", s / 3600, (s % 3600) / 60, s % 60)
    }
}

/// Back-off before the `n`th restart (0-based): the first is immediate,
/// then `base`, doubling, at most 5 minutes (the kubelet's crash-loop
/// back-off).
pub(super) fn restart_delay(base: Duration, n: u32) -> Duration {
    if n == 0 {
        return Duration::ZERO;
    }
    let max = Duration::from_secs(300);
    base.checked_mul(1 << (n - 1).min(16))
        .unwrap_or(max)
        .min(max)
}

/// A container's run of the kubelet has after this long resets the back-off.
const BACKOFF_RESET: Duration = Duration::from_secs(600);

/// The namespaces a pod's real-process containers get (see
/// [`super::Namespaces`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Isolation {
    /// A mount namespace: volumes at their mount paths.
    pub at_paths: bool,
    /// A PID namespace: the command is PID 1 and sees only its processes.
    pub pid: bool,
}

/// What a container instance starts with.
struct Prepared {
    program: Program,
    env: Vec<(String, String)>,
    /// Its program is not in its file tree: the runtime's message.
    missing: Option<String>,
    /// What stands in for its image (for the pod's status).
    stand_in: String,
}

/// The program, arguments and shell flag of a real-process container, as
/// its mount namespace rewrites them.
struct ExecTarget<'a> {
    exe: &'a mut PathBuf,
    args: &'a mut Vec<String>,
    shell: &'a mut bool,
}

impl Kubelet {
    /// The pod's directory, volumes and kubeconfig; an error is a mount failure.
    /// Records an Event about `pod` from the kubelet.
    pub(super) fn event(&self, pod: &Value, kind: &str, reason: &str, message: &str) {
        crate::sandbox::cluster::events::record(&self.api, pod, kind, reason, message, "kubelet");
    }

    fn setup_sandbox(
        &self,
        rt: &PodRuntime,
        pod: &Value,
    ) -> Result<BTreeMap<String, PathBuf>, String> {
        std::fs::create_dir_all(rt.dir.join("tmp"))
            .map_err(|e| format!("cannot create {}: {e}", rt.dir.display()))?;
        let fields = PodFields {
            pod,
            pod_ip: &rt.pod_ip,
            host_ip: &rt.host_ip,
        };
        let vols = volumes::prepare_volumes(&fields, &rt.dir, &|res: &str, name: &str| {
            self.api.store.get(res, &rt.namespace, name)
        })?;
        credentials::project(&self.api, pod, &vols)?;
        // For containers that cannot see their volumes at their paths (no
        // mount namespaces): the in-cluster configuration as a kubeconfig
        // naming the service-account volume's files where they are on the
        // host.
        let url = self.api.server_url();
        if !url.is_empty() {
            let sa_dir = credentials::service_account_dir(pod, &vols);
            let kubeconfig = credentials::kubeconfig(&url, &rt.namespace, sa_dir.as_deref());
            std::fs::write(rt.dir.join("kubeconfig"), kubeconfig)
                .map_err(|e| format!("cannot write the pod's kubeconfig: {e}"))?;
        }
        Ok(vols)
    }

    /// The environment and program of the next instance of `slot`.
    fn prepare(
        &self,
        rt: &PodRuntime,
        slot: &ContainerSlot,
        pod: &Value,
        vols: &BTreeMap<String, PathBuf>,
        iso: Isolation,
    ) -> Result<Prepared, String> {
        let mounts = volumes::container_mounts(&slot.spec, vols);
        let root = rt.dir.display().to_string();
        let base = self.base_env(rt, pod, &mounts, &root, iso.at_paths);
        let fields = PodFields {
            pod,
            pod_ip: &rt.pod_ip,
            host_ip: &rt.host_ip,
        };
        let lookup = |res: &str, name: &str| self.api.store.get(res, &rt.namespace, name);
        let mut env = env::container_env(&fields, &slot.spec, base, &lookup)?;
        let command: Vec<String> = strings(&slot.spec["command"])
            .iter()
            .map(|s| env::expand(s, &env))
            .collect();
        let args: Vec<String> = strings(&slot.spec["args"])
            .iter()
            .map(|s| env::expand(s, &env))
            .collect();
        let mut program = runtime::plan(pod, &slot.spec, &command, &args, &self.config.exe);
        let working_dir = slot.spec["workingDir"]
            .as_str()
            .filter(|d| d.starts_with('/'))
            .map(PathBuf::from);
        let image = slot.spec["image"].as_str().unwrap_or_default();
        let (missing, stand_in) =
            self.stand_in(&program, image, &env, &mounts, working_dir.as_deref(), iso);
        if let Program::Exec {
            program: exe,
            args,
            shell,
        } = &mut program
        {
            if iso.at_paths {
                let cwd = working_dir.unwrap_or_else(|| PathBuf::from("/"));
                let target = ExecTarget { exe, args, shell };
                self.in_mount_namespace(rt, &mounts, target, &mut env, &root, &cwd, iso.pid);
            } else {
                fallback::host_paths(&rt.dir, &mounts, args, &mut env, *shell);
            }
        }
        Ok(Prepared {
            program,
            env,
            missing,
            stand_in,
        })
    }

    /// The environment below what a container declares: PATH, HOSTNAME,
    /// HOME (the pod directory `root`), TMPDIR, how to reach the API
    /// server, POD_IP and the service links.
    fn base_env(
        &self,
        rt: &PodRuntime,
        pod: &Value,
        mounts: &[ContainerMount],
        root: &str,
        mounts_at_paths: bool,
    ) -> Vec<(String, String)> {
        let tmp_mount = mounts
            .iter()
            .find(|m| m.path.trim_end_matches('/') == "/tmp");
        let tmp = match tmp_mount {
            Some(_) if mounts_at_paths => PathBuf::from("/tmp"),
            Some(m) => m.host.clone(),
            None => rt.dir.join("tmp"),
        };
        let mut base: Vec<(String, String)> = Vec::new();
        if let Some(path) = std::env::var_os("PATH") {
            base.push(("PATH".into(), path.to_string_lossy().into_owned()));
        }
        let hostname = pod["spec"]["hostname"].as_str().unwrap_or(&rt.name);
        base.extend([
            ("HOSTNAME".to_string(), hostname.to_string()),
            ("HOME".to_string(), root.to_string()),
            ("TMPDIR".to_string(), tmp.display().to_string()),
        ]);
        let url = self.api.server_url();
        if let Some(hostport) = url.strip_prefix("https://")
            && let Some((host, port)) = hostport.trim_end_matches('/').rsplit_once(':')
        {
            base.extend([
                ("KUBERNETES_SERVICE_HOST".to_string(), host.to_string()),
                ("KUBERNETES_SERVICE_PORT".to_string(), port.to_string()),
            ]);
            // Containers that see the service-account volume at its path
            // connect with the in-cluster configuration, as in a cluster;
            // only where they cannot (no mount namespaces) a kubeconfig
            // names the same server, CA file and token file on the host.
            if !mounts_at_paths {
                base.push((
                    "KUBECONFIG".to_string(),
                    rt.dir.join("kubeconfig").display().to_string(),
                ));
            }
        }
        base.push(("POD_IP".into(), rt.pod_ip.clone()));
        // Service links: below what the container declares, as the
        // kubelet's; `$(VAR)` references may name them.
        let (services, _) = self.api.store.list("services", None);
        let links = pod["spec"]["enableServiceLinks"].as_bool() != Some(false);
        for (k, v) in env::service_env(&services, &rt.namespace, links) {
            match base.iter_mut().find(|(name, _)| *name == k) {
                Some(slot) => slot.1 = v,
                None => base.push((k, v)),
            }
        }
        base
    }

    /// What stands in for `image` when `program` runs (for the pod's
    /// status), and the runtime's message when the program is not in the
    /// container's file tree.
    fn stand_in(
        &self,
        program: &Program,
        image: &str,
        env: &[(String, String)],
        mounts: &[ContainerMount],
        working_dir: Option<&Path>,
        iso: Isolation,
    ) -> (Option<String>, String) {
        match program {
            Program::Exec { program: p, .. } if *p == self.config.exe => (
                None,
                format!("agentdeck's own binary runs for image {image}"),
            ),
            Program::Exec { program: p, .. } => {
                let cwd = working_dir.map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
                let found = runtime::program_exists(p, env, mounts, &cwd);
                let name = p.display().to_string();
                if found {
                    let how = match (iso.at_paths, iso.pid) {
                        (true, true) => "in mount and PID namespaces of its own",
                        (true, false) => "in a mount namespace of its own, with the host's PIDs",
                        (false, _) => "without namespaces: host paths and PIDs",
                    };
                    (
                        None,
                        format!("the host's {name} runs for image {image}, {how}"),
                    )
                } else {
                    (
                        Some(policy::missing_program(&name)),
                        format!("image {image}'s {name} is not on this machine"),
                    )
                }
            }
            Program::Simulated { .. } => (None, format!("image {image} is simulated")),
            Program::Pause => (
                None,
                format!("image {image}'s /pause is played (it sleeps until stopped)"),
            ),
            Program::Unpullable { .. } => (
                None,
                format!("image {image} cannot run here without a command"),
            ),
        }
    }

    /// Makes `target` run in a mount namespace of its own (and a PID
    /// namespace with `pid`): our own binary sets it up, with the volumes
    /// at their paths, then becomes the command (see `mountns`).
    #[allow(clippy::too_many_arguments)]
    fn in_mount_namespace(
        &self,
        rt: &PodRuntime,
        mounts: &[ContainerMount],
        target: ExecTarget<'_>,
        env: &mut [(String, String)],
        root: &str,
        cwd: &Path,
        pid: bool,
    ) {
        let ExecTarget { exe, args, shell } = target;
        let mut ns_mounts: Vec<mountns::Mount> = mounts
            .iter()
            .map(|m| mountns::Mount {
                source: m.host.clone(),
                target: PathBuf::from(&m.path),
                read_only: m.read_only,
            })
            .collect();
        // The binary at a path of its own, as the agentdeck image
        // has it: where it really is may be hidden in the
        // container (a checkout under `/tmp`, below an emptyDir).
        let host_exe = mountns::host_executable(&self.config.exe);
        if let Some(host) = &host_exe {
            ns_mounts.push(mountns::Mount {
                source: host.clone(),
                target: PathBuf::from(policy::CONTAINER_EXE),
                read_only: true,
            });
            if *exe == self.config.exe {
                *exe = PathBuf::from(policy::CONTAINER_EXE);
            }
        }
        // The pod directory may be hidden in the container (a volume
        // on `/tmp`): HOME is `/` there.
        for (k, v) in env.iter_mut() {
            if k == "HOME" && *v == root {
                *v = "/".into();
            }
        }
        let mut command: Vec<OsString> = vec![exe.clone().into_os_string()];
        command.extend(args.iter().map(OsString::from));
        let wrapped =
            mountns::create_args(&rt.dir.join("rootfs"), Some(cwd), &ns_mounts, pid, &command);
        *exe = self.config.exe.clone();
        *args = wrapped
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        *shell = false;
    }

    /// Runs one container to the pod's restart policy; returns the last
    /// exit code (None when it never ran).
    async fn run_container(
        &self,
        rt: &Arc<PodRuntime>,
        slot: &Arc<ContainerSlot>,
        pod: &Value,
        vols: &BTreeMap<String, PathBuf>,
        iso: Isolation,
    ) -> Option<i32> {
        let mut stop_rx = rt.stop.subscribe();
        let policy = restart_policy(slot, rt);
        let mut previous: Option<Terminated> = None;
        let mut runs: u32 = 0;
        let mut restarts_since_reset: u32 = 0;
        loop {
            if rt.stopping() {
                return previous.map(|t| t.exit_code);
            }
            let prepared = match self.prepare(rt, slot, pod, vols, iso) {
                Ok(p) => p,
                Err(message) => {
                    config_error(rt, slot, message);
                    if wait_or_stop(&mut stop_rx, Duration::from_secs(1)).await {
                        return previous.map(|t| t.exit_code);
                    }
                    continue;
                }
            };
            let image = container_image(pod, slot);
            if let Program::Unpullable { message } = &prepared.program {
                slot.status().stand_in = Some(prepared.stand_in.clone());
                self.pull_back_off(rt, slot, pod, &image, message, &mut stop_rx)
                    .await;
                return previous.map(|t| t.exit_code);
            }
            self.announce(pod, slot, &image, &prepared);
            slot.status().stand_in = Some(prepared.stand_in.clone());
            set_exec_context(rt, slot, vols, &prepared);
            let id = new_container_id();
            slot.logs.start_instance(&id);
            let started_at = now_rfc3339();
            let started = Instant::now();
            let code = if let Some(message) = &prepared.missing {
                let term = self.start_error(rt, slot, pod, &id, message, &previous, runs);
                runs += 1;
                previous = Some(term);
                128
            } else {
                mark_running(slot, &id, &started_at, &previous, runs);
                runs += 1;
                rt.changed();
                let Some(code) = self
                    .run_instance(rt, slot, &prepared, &id, stop_rx.clone())
                    .await
                else {
                    // Waited out before the container was created.
                    return previous.map(|t| t.exit_code);
                };
                previous = Some(mark_exited(rt, slot, &id, code, &started_at));
                code
            };
            if let Some(code) = self
                .after_exit(
                    rt,
                    slot,
                    pod,
                    policy,
                    code,
                    started,
                    &mut restarts_since_reset,
                    &previous,
                    &mut stop_rx,
                )
                .await
            {
                return Some(code);
            }
        }
    }

    /// What the kubelet reports for each (re)start, as `kubectl describe
    /// pod` and `kubectl events` show it.
    fn announce(&self, pod: &Value, slot: &ContainerSlot, image: &str, prepared: &Prepared) {
        self.event(
            pod,
            "Normal",
            "Pulled",
            &format!("Container image \"{image}\" already present on machine"),
        );
        self.event(
            pod,
            "Normal",
            "Created",
            &format!("Created container: {}", slot.name),
        );
        if prepared.missing.is_none() {
            self.event(
                pod,
                "Normal",
                "Started",
                &format!("Started container: {}", slot.name),
            );
        }
    }

    /// As containerd reports a program it cannot exec: never running,
    /// `StartError` with exit code 128 and runc's `message`, a `Failed`
    /// Warning. Returns the instance's end (the restart policy follows).
    #[allow(clippy::too_many_arguments)]
    fn start_error(
        &self,
        rt: &PodRuntime,
        slot: &ContainerSlot,
        pod: &Value,
        id: &str,
        message: &str,
        previous: &Option<Terminated>,
        runs: u32,
    ) -> Terminated {
        self.event(pod, "Warning", "Failed", &format!("Error: {message}"));
        let term = Terminated {
            container_id: id.to_string(),
            exit_code: 128,
            reason: "StartError".into(),
            message: Some(message.to_string()),
            started_at: "1970-01-01T00:00:00Z".into(),
            finished_at: now_rfc3339(),
        };
        slot.logs.close(id);
        {
            let mut s = slot.status();
            s.state = State::Terminated(term.clone());
            s.last = previous.clone();
            s.restart_count = runs;
            s.ready = false;
        }
        rt.changed();
        term
    }

    /// Runs one instance of the container's program to its end: its exit
    /// code (None for an image that cannot run, which never gets here).
    async fn run_instance(
        &self,
        rt: &Arc<PodRuntime>,
        slot: &Arc<ContainerSlot>,
        prepared: &Prepared,
        id: &str,
        stop_rx: watch::Receiver<Stop>,
    ) -> Option<i32> {
        let code = match &prepared.program {
            Program::Exec { program, args, .. } => {
                let launch = Launch {
                    program,
                    args,
                    env: &prepared.env,
                    cwd: &rt.dir,
                };
                self.run_process(rt, slot, &launch, id, stop_rx).await
            }
            Program::Simulated {
                exit_after,
                exit_code,
                ready,
            } => {
                let play = Play::Simulated {
                    exit_after: *exit_after,
                    exit_code: *exit_code,
                    ready: *ready,
                };
                run_simulated(rt, slot, id, play, stop_rx).await
            }
            Program::Pause => run_simulated(rt, slot, id, Play::Pause, stop_rx).await,
            Program::Unpullable { .. } => return None,
        };
        Some(code)
    }

    /// A container whose image cannot be run ([`Program::Unpullable`]),
    /// until the pod stops: `Waiting` as the kubelet leaves a container
    /// whose image it cannot pull, `ErrImagePull` after each attempt and
    /// `ImagePullBackOff` between them (the back-off doubling to 5 minutes),
    /// with the kubelet's events.
    async fn pull_back_off(
        &self,
        rt: &Arc<PodRuntime>,
        slot: &Arc<ContainerSlot>,
        pod: &Value,
        image: &str,
        message: &str,
        stop_rx: &mut watch::Receiver<Stop>,
    ) {
        let base = self.config.restart_backoff;
        let mut attempts: u32 = 0;
        loop {
            self.event(
                pod,
                "Normal",
                "Pulling",
                &format!("Pulling image \"{image}\""),
            );
            self.event(
                pod,
                "Warning",
                "Failed",
                &format!("Failed to pull image \"{image}\": {message}"),
            );
            self.event(pod, "Warning", "Failed", "Error: ErrImagePull");
            slot.status().state = State::Waiting {
                reason: "ErrImagePull".into(),
                message: Some(message.to_string()),
            };
            rt.changed();
            // The pod's next sync finds the pull backing off.
            if wait_or_stop(stop_rx, base).await {
                return;
            }
            attempts += 1;
            self.event(
                pod,
                "Normal",
                "BackOff",
                &format!("Back-off pulling image \"{image}\""),
            );
            self.event(pod, "Warning", "Failed", "Error: ImagePullBackOff");
            slot.status().state = State::Waiting {
                reason: "ImagePullBackOff".into(),
                message: Some(format!(
                    "Back-off pulling image \"{image}\": ErrImagePull: {message}"
                )),
            };
            rt.changed();
            if wait_or_stop(stop_rx, restart_delay(base, attempts)).await {
                return;
            }
        }
    }

    /// What follows an instance's end, by the restart policy: Some(its
    /// code) when the container is done, None to start it again (after
    /// the crash-loop back-off, shown as `CrashLoopBackOff`).
    #[allow(clippy::too_many_arguments)]
    async fn after_exit(
        &self,
        rt: &Arc<PodRuntime>,
        slot: &Arc<ContainerSlot>,
        pod: &Value,
        policy: &str,
        code: i32,
        started: Instant,
        restarts_since_reset: &mut u32,
        previous: &Option<Terminated>,
        stop_rx: &mut watch::Receiver<Stop>,
    ) -> Option<i32> {
        {
            let restart = match policy {
                "Always" => true,
                "OnFailure" => code != 0,
                _ => false,
            };
            if !restart || rt.stopping() {
                return Some(code);
            }
            if started.elapsed() >= BACKOFF_RESET {
                *restarts_since_reset = 0;
            }
            let delay = restart_delay(self.config.restart_backoff, *restarts_since_reset);
            *restarts_since_reset += 1;
            if !delay.is_zero() {
                self.event(
                    pod,
                    "Warning",
                    "BackOff",
                    &format!(
                        "Back-off restarting failed container {} in pod {}_{}({})",
                        slot.name, rt.name, rt.namespace, rt.uid
                    ),
                );
                {
                    let mut s = slot.status();
                    s.state = State::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: Some(format!(
                            "back-off {} restarting failed container={} pod={}_{}({})",
                            go_duration(delay),
                            slot.name,
                            rt.name,
                            rt.namespace,
                            rt.uid
                        )),
                    };
                    s.last = previous.clone();
                }
                rt.changed();
                if wait_or_stop(stop_rx, delay).await {
                    return Some(code);
                }
            }
        }
        None
    }

    /// Runs one process instance until it exits, signalling its group when
    /// a stop is asked; returns its exit code.
    async fn run_process(
        &self,
        rt: &Arc<PodRuntime>,
        slot: &Arc<ContainerSlot>,
        launch: &Launch<'_>,
        id: &str,
        mut stop_rx: watch::Receiver<Stop>,
    ) -> i32 {
        let stdio = runtime::Stdio3 {
            stdin: slot.spec["stdin"].as_bool() == Some(true),
            tty: slot.spec["tty"].as_bool() == Some(true),
        };
        let mut process = match runtime::spawn(launch, &slot.logs, id, stdio) {
            Ok(p) => p,
            Err(e) => {
                // As a runtime that cannot exec the entrypoint: exit 128, reason Error.
                slot.logs.append(
                    id,
                    jiff::Timestamp::now(),
                    format!("exec {}: {e}\n", launch.program.display()).into_bytes(),
                );
                return 128;
            }
        };
        slot.set_attach(process.attach.clone());
        slot.set_process(Some(ContainerProcess {
            pid: process.pgid.as_raw(),
            mount_namespace: launch.args.first().map(String::as_str) == Some(mountns::SUBCOMMAND),
        }));
        let probe_stop = CancellationToken::new();
        let _probe_guard = probe_stop.clone().drop_guard();
        match slot.spec.get("readinessProbe").filter(|p| p.is_object()) {
            Some(probe) => {
                tokio::spawn(readiness(
                    rt.clone(),
                    slot.clone(),
                    probe.clone(),
                    probe_stop.clone(),
                ));
            }
            None => {
                slot.status().ready = true;
                rt.changed();
            }
        }
        let mut deadline: Option<Instant> = None;
        let mut termed = false;
        let status = loop {
            match *stop_rx.borrow_and_update() {
                Stop::None => {}
                Stop::Graceful { deadline: d } => {
                    if !termed {
                        runtime::signal_group(process.pgid, Signal::SIGTERM);
                        termed = true;
                    }
                    deadline = Some(d);
                }
                Stop::Kill => runtime::kill_container(process.pgid),
            }
            let kill_at =
                deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
            tokio::select! {
                status = process.child.wait() => break status,
                r = stop_rx.changed() => if r.is_err() {
                    runtime::kill_container(process.pgid);
                },
                () = tokio::time::sleep_until(kill_at), if deadline.is_some() => {
                    runtime::kill_container(process.pgid);
                    deadline = None;
                }
            }
        };
        // The container's main process is gone: like a runtime tearing down
        // the container, end whatever else it started.
        slot.set_process(None);
        slot.set_attach(None);
        runtime::kill_container(process.pgid);
        for r in process.readers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
        }
        let code = match status {
            Ok(s) => runtime::exit_code(s),
            Err(_) => 255,
        };
        if let Some(a) = &process.attach {
            a.exited.send_replace(Some(code));
        }
        code
    }

    /// The pod's whole life on the node.
    pub(super) async fn run_pod(self: Arc<Self>, rt: Arc<PodRuntime>, pod: Value) {
        let writer = tokio::spawn(self.clone().status_loop(rt.clone()));
        let mut stop_rx = rt.stop.subscribe();
        rt.changed();
        let mut attempts = 0u32;
        let vols = loop {
            match self.setup_sandbox(&rt, &pod) {
                Ok(v) => break Some(v),
                Err(message) => {
                    // The kubelet reports this as a FailedMount Warning (the
                    // recorder folds repeats into a count; it is written on
                    // attempts 1, 2, 4, 8 … as the kubelet's retries back
                    // off); the containers stay ContainerCreating.
                    attempts += 1;
                    if attempts.is_power_of_two() {
                        self.event(&pod, "Warning", "FailedMount", &message);
                    }
                    tracing::debug!(pod = %rt.name, namespace = %rt.namespace, %message, "pod sandbox not ready");
                    if wait_or_stop(&mut stop_rx, Duration::from_secs(1)).await {
                        break None;
                    }
                }
            }
        };
        if let Some(vols) = vols {
            let iso = match self.mount_mode().await {
                Ok(ns) => Isolation {
                    at_paths: true,
                    pid: ns.pid.is_ok(),
                },
                Err(why) => {
                    let mounted = rt.slots.iter().any(|s| {
                        s.spec["volumeMounts"]
                            .as_array()
                            .is_some_and(|m| !m.is_empty())
                    });
                    if mounted {
                        self.event(
                            &pod,
                            "Warning",
                            "MountsNotAtPaths",
                            &format!(
                                "volumes are not at their mount paths ({why}): processes are given host paths"
                            ),
                        );
                    }
                    Isolation {
                        at_paths: false,
                        pid: false,
                    }
                }
            };
            rt.state().sandbox_ready = true;
            rt.changed();
            let mut initialized = true;
            for slot in rt.slots.iter().filter(|s| s.init) {
                if self.run_container(&rt, slot, &pod, &vols, iso).await != Some(0) {
                    initialized = false;
                    break;
                }
            }
            if initialized && !rt.stopping() {
                let main: Vec<_> = rt.slots.iter().filter(|s| !s.init).collect();
                for slot in &main {
                    slot.status().state = State::waiting("ContainerCreating");
                }
                rt.changed();
                futures::future::join_all(
                    main.iter()
                        .map(|slot| self.run_container(&rt, slot, &pod, &vols, iso)),
                )
                .await;
            }
        }
        // Nothing runs any more: the pod is done on this node.
        rt.state().terminal = true;
        rt.changed();
        let stop = loop {
            let s = *stop_rx.borrow_and_update();
            if s != Stop::None {
                break s;
            }
            if stop_rx.changed().await.is_err() {
                break Stop::Kill;
            }
        };
        let graceful = matches!(stop, Stop::Graceful { .. });
        if graceful {
            for slot in &rt.slots {
                let mut s = slot.status();
                if matches!(s.state, State::Waiting { .. }) && s.last.is_none() {
                    // What the kubelet reports for containers a deleted pod never ran.
                    s.state = State::Terminated(Terminated {
                        container_id: String::new(),
                        exit_code: 137,
                        reason: "ContainerStatusUnknown".into(),
                        message: Some(
                            "The container could not be located when the pod was terminated".into(),
                        ),
                        started_at: String::new(),
                        finished_at: now_rfc3339(),
                    });
                }
            }
            self.sync_status(&rt);
        }
        rt.gone.cancel();
        let _ = writer.await;
        let dir = rt.dir.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        self.release(&rt);
        if graceful && *rt.stop.borrow() != Stop::Kill {
            self.api.finish_pod_deletion(&rt.namespace, &rt.name);
        }
    }

    async fn status_loop(self: Arc<Self>, rt: Arc<PodRuntime>) {
        loop {
            tokio::select! {
                () = rt.dirty.notified() => {}
                () = tokio::time::sleep(self.config.resync) => {}
                () = rt.gone.cancelled() => return,
            }
            // While it terminates only the final status is written: the API
            // removes a pod marked for deletion on any write once it has no
            // finalizers, which must not happen before the grace period is over.
            if *rt.stop.borrow() != Stop::None {
                continue;
            }
            self.sync_status(&rt);
        }
    }

    /// Writes the pod's status through the status subresource when it
    /// changed, re-reading on conflict.
    /// Ephemeral containers (`kubectl debug`) are played, not run: each one
    /// added to the spec shows as running from the next status write on.
    fn ephemeral_statuses(&self, pod: &Value, old: &Value, new: &mut Value) {
        let Some(spec) = pod["spec"]["ephemeralContainers"].as_array() else {
            return;
        };
        let before = old["ephemeralContainerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let statuses: Vec<Value> = spec
            .iter()
            .map(|c| {
                let name = c["name"].as_str().unwrap_or_default();
                if let Some(s) = before.iter().find(|s| s["name"] == name) {
                    return s.clone();
                }
                let image = c["image"].as_str().unwrap_or_default();
                for (reason, message) in [
                    (
                        "Pulled",
                        format!("Container image \"{image}\" already present on machine"),
                    ),
                    ("Created", format!("Created container: {name}")),
                    ("Started", format!("Started container: {name}")),
                ] {
                    self.event(pod, "Normal", reason, &message);
                }
                serde_json::json!({
                    "name": name,
                    "image": image,
                    "imageID": format!("docker.io/library/{image}"),
                    "containerID": new_container_id(),
                    "ready": false,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now_rfc3339()}},
                    "lastState": {},
                })
            })
            .collect();
        if !statuses.is_empty() {
            new["ephemeralContainerStatuses"] = Value::Array(statuses);
        }
    }

    pub(super) fn sync_status(&self, rt: &PodRuntime) {
        let q = crate::sandbox::api::Query::default();
        let target = crate::sandbox::api::Target {
            namespace: Some(rt.namespace.clone()),
            name: Some(rt.name.clone()),
            subresource: Some("status".into()),
        };
        for _ in 0..5 {
            let Some(pod) = self.api.store.get("pods", &rt.namespace, &rt.name) else {
                return;
            };
            if pod["metadata"]["uid"].as_str() != Some(rt.uid.as_str()) {
                return;
            }
            let old = pod.get("status").cloned().unwrap_or(Value::Null);
            let mut new = super::status::pod_status(&old, &rt.snapshot(), &now_rfc3339());
            self.ephemeral_statuses(&pod, &old, &mut new);
            if old == new {
                return;
            }
            let mut obj = (*pod).clone();
            obj["status"] = new;
            match self.api.update("", "v1", "pods", &target, obj, &q) {
                Ok(_) => return,
                Err(e) if e.code == 409 => continue,
                Err(e) => {
                    tracing::debug!(pod = %rt.name, namespace = %rt.namespace, error = %e.message, "pod status not written");
                    return;
                }
            }
        }
    }
}

/// How a played container behaves.
#[derive(Debug, Clone, Copy)]
enum Play {
    /// The simulation annotations' (or their defaults'): it says that it
    /// started, runs until stopped or `exit_after`, then exits `exit_code`.
    Simulated {
        exit_after: Option<Duration>,
        exit_code: i32,
        ready: bool,
    },
    /// The pause image's `/pause`: silent until SIGTERM, then psignal's
    /// line on its standard error and exit 0.
    Pause,
}

/// A played container: logs, waits, exits.
async fn run_simulated(
    rt: &Arc<PodRuntime>,
    slot: &Arc<ContainerSlot>,
    id: &str,
    play: Play,
    mut stop_rx: watch::Receiver<Stop>,
) -> i32 {
    let image = slot.spec["image"].as_str().unwrap_or_default();
    let log = |line: String| {
        slot.logs
            .append(id, jiff::Timestamp::now(), format!("{line}\n").into_bytes())
    };
    let (exit_after, exit_code, ready) = match play {
        Play::Simulated {
            exit_after,
            exit_code,
            ready,
        } => {
            log(format!(
                "simulated container {} (image {image}) started",
                slot.name
            ));
            (exit_after, exit_code, ready)
        }
        Play::Pause => (None, 0, true),
    };
    if ready {
        slot.status().ready = true;
        rt.changed();
    }
    let exit_at = exit_after.map(|d| Instant::now() + d);
    loop {
        match *stop_rx.borrow_and_update() {
            Stop::None => {}
            Stop::Graceful { .. } => {
                log(match play {
                    Play::Simulated { .. } => format!(
                        "simulated container {} received SIGTERM, exiting",
                        slot.name
                    ),
                    Play::Pause => "Shutting down, got signal: Terminated".to_string(),
                });
                return 0;
            }
            Stop::Kill => return 137,
        }
        let at = exit_at.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        tokio::select! {
            () = tokio::time::sleep_until(at), if exit_at.is_some() => {
                log(format!("simulated container {} exiting with code {exit_code}", slot.name));
                return exit_code;
            }
            r = stop_rx.changed() => if r.is_err() { return 137 },
        }
    }
}

/// Probes until `stop`; the container is Ready after `successThreshold`
/// passes and unready after `failureThreshold` failures. Until it is first
/// Ready it is probed every second at most, so pods come up quickly.
async fn readiness(
    rt: Arc<PodRuntime>,
    slot: Arc<ContainerSlot>,
    probe: Value,
    stop: CancellationToken,
) {
    let secs = |k: &str, d: u64| probe[k].as_u64().unwrap_or(d);
    let initial = Duration::from_secs(secs("initialDelaySeconds", 0));
    let period = Duration::from_secs(secs("periodSeconds", 10).max(1));
    let success_needed = secs("successThreshold", 1).max(1);
    let failure_needed = secs("failureThreshold", 3).max(1);
    tokio::select! {
        () = tokio::time::sleep(initial) => {}
        () = stop.cancelled() => return,
    }
    let (mut ok_run, mut fail_run) = (0u64, 0u64);
    let mut ever_ready = false;
    loop {
        let passed = tokio::select! {
            p = runtime::probe(&probe, &slot.spec, &rt.pod_ip) => p,
            () = stop.cancelled() => return,
        };
        if passed {
            ok_run += 1;
            fail_run = 0;
        } else {
            fail_run += 1;
            ok_run = 0;
        }
        let ready = slot.status().ready;
        let now_ready = if passed && ok_run >= success_needed {
            true
        } else if !passed && fail_run >= failure_needed {
            false
        } else {
            ready
        };
        if now_ready != ready {
            slot.status().ready = now_ready;
            rt.changed();
        }
        ever_ready |= now_ready;
        let wait = if ever_ready {
            period
        } else {
            period.min(Duration::from_secs(1))
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_like_the_kubelet() {
        let base = Duration::from_secs(10);
        let delays: Vec<u64> = (0..8).map(|n| restart_delay(base, n).as_secs()).collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn back_off_durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(160)), "2m40s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }
}
