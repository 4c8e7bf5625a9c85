//! A sandbox started in-process on an ephemeral port, with a kubeconfig for
//! the real `kubectl` and a kube client for the real kube-rs code paths.

#![allow(dead_code)]

pub mod tmux;

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentdeck::sandbox::Sandbox;
use agentdeck::sandbox::retention::Retention;

/// How often a test's sandbox compacts its watch history: far shorter than
/// a real apiserver's 5 minutes, so that every test longer than 20 s
/// crosses a compaction (watches and lists from before it get 410 Gone)
/// and the client code under test has to recover as against a cluster.
pub const TEST_COMPACTION_INTERVAL: Duration = Duration::from_secs(10);

pub struct TestSandbox {
    pub rt: tokio::runtime::Runtime,
    sandbox: Option<Sandbox>,
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestSandbox {
    pub fn start() -> Self {
        Self::start_with(agentdeck::sandbox::kubelet::KubeletConfig::from_env())
    }

    /// A sandbox whose kubelet runs as configured (say, this build's
    /// binary for `agentdeck` containers), compacting its history every
    /// [`TEST_COMPACTION_INTERVAL`] unless the environment says otherwise.
    pub fn start_with(kubelet: agentdeck::sandbox::kubelet::KubeletConfig) -> Self {
        let mut retention = Retention::from_env();
        if std::env::var_os(agentdeck::sandbox::retention::COMPACTION_INTERVAL_ENV).is_none() {
            retention.compaction_interval = TEST_COMPACTION_INTERVAL;
        }
        Self::start_retaining(kubelet, retention)
    }

    /// A sandbox that forgets as `retention` says.
    pub fn start_retaining(
        kubelet: agentdeck::sandbox::kubelet::KubeletConfig,
        retention: Retention,
    ) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let sandbox = rt
            .block_on(async {
                let security =
                    agentdeck::sandbox::auth::Security::generate().map_err(|e| e.to_string())?;
                Sandbox::start_retaining(0, 2, security, kubelet, retention)
                    .await
                    .map_err(|e| e.to_string())
            })
            .expect("sandbox starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, sandbox.kubeconfig("default")).expect("kubeconfig written");
        TestSandbox {
            rt,
            sandbox: Some(sandbox),
            kubeconfig,
            _dir: dir,
        }
    }

    pub fn sandbox(&self) -> &Sandbox {
        self.sandbox.as_ref().expect("running")
    }

    /// The sandbox itself, to stop it by hand (dropping the rest is then
    /// a no-op for it).
    pub fn take(&mut self) -> Sandbox {
        self.sandbox.take().expect("running")
    }

    pub fn client(&self) -> kube::Client {
        let _g = self.rt.enter();
        self.sandbox().client().expect("client")
    }

    fn run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self._dir.path())
            .env("XDG_CONFIG_HOME", self._dir.path())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{program} starts: {e}"));
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("stdin written");
        }
        child.wait_with_output().expect("finishes")
    }

    /// Runs the machine's kubectl against the sandbox.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.run("kubectl", args, None)
    }

    /// kubectl with text on stdin.
    pub fn kubectl_in(&self, args: &[&str], stdin: &str) -> Output {
        self.run("kubectl", args, Some(stdin))
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args);
        assert!(
            o.status.success(),
            "kubectl {args:?} failed:\n{}\n{}",
            out(&o),
            err(&o)
        );
        out(&o)
    }

    /// kubectl with stdin that must succeed; its stdout.
    pub fn kubectl_in_ok(&self, args: &[&str], stdin: &str) -> String {
        let o = self.kubectl_in(args, stdin);
        assert!(
            o.status.success(),
            "kubectl {args:?} failed:\n{}\n{}",
            out(&o),
            err(&o)
        );
        out(&o)
    }

    /// The README's install on this sandbox: the CRDs and the
    /// controller's namespace.
    pub fn install(&self) {
        let crds = out(&self.agentdeck(&["crds"]));
        self.kubectl_in_ok(&["apply", "-f", "-"], &crds);
        self.kubectl_ok(&["create", "namespace", "agentdeck-system"]);
    }

    /// `agentdeck --daemon` against this sandbox as a user starts it: in
    /// `home` (its HOME and working directory), serving on a free port,
    /// its log in `home/daemon.log`. Returns the process and the port.
    pub fn daemon(&self, home: &std::path::Path) -> (std::process::Child, u16) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = std::fs::File::create(home.join("daemon.log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .arg("--daemon")
            .env_remove("AGENTDECK_SANDBOX_EXE")
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home)
            .env("AGENTDECK_SERVER__PORT", port.to_string())
            .current_dir(home)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("daemon starts");
        (child, port)
    }

    /// Runs our own binary.
    pub fn agentdeck(&self, args: &[&str]) -> Output {
        self.run(env!("CARGO_BIN_EXE_agentdeck"), args, None)
    }
}

impl Drop for TestSandbox {
    fn drop(&mut self) {
        if let Some(sb) = self.sandbox.take() {
            self.rt.block_on(sb.stop());
        }
    }
}

pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// How long a polled condition may take before the test fails: generous,
/// because the machine is shared and a cold sandbox is slow.
pub const POLL_DEADLINE: Duration = Duration::from_secs(120);

/// Polls `check` until it gives `Some`, or fails naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(POLL_DEADLINE, what, check).await
}

/// [`eventually`] with a deadline of its own: for behaviour that must come
/// well before some slower alternative (say, a 300 s resync), give a
/// deadline generous for a busy machine yet far below that alternative.
pub async fn eventually_within<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            started.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`eventually`] for blocking tests (kubectl runs).
pub fn eventually_blocking<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            started.elapsed() < POLL_DEADLINE,
            "timed out after {POLL_DEADLINE:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Polls the AgentTask `name` until `f` holds; the last status seen is in
/// the panic.
pub async fn wait_task(
    tasks: &kube::Api<agentdeck::crd::AgentTask>,
    name: &str,
    what: &str,
    f: impl Fn(&agentdeck::crd::AgentTask) -> bool,
) -> agentdeck::crd::AgentTask {
    let started = Instant::now();
    loop {
        let t = tasks.get(name).await.expect("task exists");
        if f(&t) {
            return t;
        }
        assert!(
            started.elapsed() < POLL_DEADLINE,
            "task {name} never became {what}: {:?}",
            t.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates what `agent_rbac` renders for `pool` (its ServiceAccount, Role
/// and RoleBinding), as the controller would: agent pods run as that account
/// and may do exactly what the Role grants.
pub async fn install_agent_rbac(client: &kube::Client, pool: &agentdeck::crd::AgentPool) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::{Api, PostParams};
    let ns = pool.metadata.namespace.as_deref().unwrap_or("default");
    let (account, role, binding) =
        agentdeck::plan::manifests::agent_rbac(pool).expect("the pool's RBAC renders");
    let pp = PostParams::default();
    if let Some(account) = account {
        Api::<ServiceAccount>::namespaced(client.clone(), ns)
            .create(&pp, &account)
            .await
            .expect("service account created");
    }
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&pp, &role)
        .await
        .expect("role created");
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&pp, &binding)
        .await
        .expect("role binding created");
}
