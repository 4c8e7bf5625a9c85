//! A Kubernetes-API-compatible server on loopback, backed by an in-memory
//! store, so that agentdeck runs and is tested with no cluster. Its yardstick
//! is what `kubectl` and kube-rs see from a real kube-apiserver.

pub mod api;
pub mod auth;
pub mod bootstrap;
pub mod builtin;
pub mod cluster;
pub mod convert;
pub mod discovery;
pub mod exec;
pub mod faults;
pub mod gnostic;
pub mod gotypes;
pub mod jsonpath;
pub mod kubelet;
pub mod managed;
pub mod namespaces;
pub mod openapi_schemas;
pub mod portforward;
pub mod protobuf;
pub mod registry;
pub mod retention;
pub mod schema;
pub mod selector;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod table;
pub mod tls;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use api::Api;

/// Why the sandbox could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The port could not be bound.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        /// Port asked for.
        port: u16,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig file could not be written.
    #[error("cannot write kubeconfig {path}: {source}")]
    Kubeconfig {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The CA or serving certificate could not be made.
    #[error("{0}")]
    Tls(#[source] tls::TlsError),
    /// The server stopped with an error.
    #[error("sandbox server failed: {0}")]
    Serve(#[source] std::io::Error),
}

impl SandboxError {
    /// A mistake in what the user asked (a busy port, an unwritable path).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            SandboxError::Bind { .. } | SandboxError::Kubeconfig { .. }
        )
    }
}

/// A running sandbox.
pub struct Sandbox {
    addr: SocketAddr,
    api: Arc<Api>,
    cancel: CancellationToken,
    /// Ends the simulated control plane and kubelets (kept across restarts).
    cluster: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
    /// The kubelet: once `cluster` is cancelled it kills its processes and
    /// removes its directory; a stop waits for that.
    kubelet: Option<JoinHandle<()>>,
}

/// How long a stop waits for the kubelet to kill its processes (they get
/// SIGKILL at once) and remove its directory.
const KUBELET_STOP: std::time::Duration = std::time::Duration::from_secs(12);

async fn wait_kubelet(kubelet: Option<JoinHandle<()>>) {
    if let Some(kubelet) = kubelet {
        let _ = tokio::time::timeout(KUBELET_STOP, kubelet).await;
    }
}

impl Sandbox {
    /// Starts a sandbox on 127.0.0.1:`port` (0 = a free port) with `nodes`
    /// simulated nodes.
    pub async fn start(port: u16, nodes: u32) -> Result<Sandbox, SandboxError> {
        let security = auth::Security::generate().map_err(SandboxError::Tls)?;
        Sandbox::start_full(port, nodes, security, kubelet::KubeletConfig::from_env()).await
    }

    /// [`Sandbox::start`] with credentials made beforehand (so a kubeconfig
    /// can be written before the server listens; see [`kubeconfig_for`]).
    pub async fn start_with(
        port: u16,
        nodes: u32,
        security: auth::Security,
    ) -> Result<Sandbox, SandboxError> {
        Sandbox::start_full(port, nodes, security, kubelet::KubeletConfig::from_env()).await
    }

    /// [`Sandbox::start`] with the kubelet configured as given (the
    /// executable containers run, mount namespaces or host paths …).
    pub async fn start_with_kubelet(
        port: u16,
        nodes: u32,
        kubelet: kubelet::KubeletConfig,
    ) -> Result<Sandbox, SandboxError> {
        let security = auth::Security::generate().map_err(SandboxError::Tls)?;
        Sandbox::start_full(port, nodes, security, kubelet).await
    }

    /// [`Sandbox::start`] with both the credentials and the kubelet given.
    pub async fn start_full(
        port: u16,
        nodes: u32,
        security: auth::Security,
        kubelet: kubelet::KubeletConfig,
    ) -> Result<Sandbox, SandboxError> {
        Sandbox::start_retaining(
            port,
            nodes,
            security,
            kubelet,
            retention::Retention::from_env(),
        )
        .await
    }

    /// [`Sandbox::start_full`] forgetting as `retention` says (compaction
    /// interval, Events' time to live, history bounds) rather than as the
    /// environment does.
    pub async fn start_retaining(
        port: u16,
        nodes: u32,
        security: auth::Security,
        kubelet: kubelet::KubeletConfig,
        retention: retention::Retention,
    ) -> Result<Sandbox, SandboxError> {
        let mut api = Api::new(builtin::builtin_resources());
        api.security = security;
        retention.configure(&api);
        let api = Arc::new(api);
        openapi_schemas::warm_up();
        let q = api::Query::default();
        for i in 0..nodes {
            // Like a kubelet: register the node, then post its status.
            let desired = node(i);
            if let Ok(mut created) = api.create("", "v1", "nodes", None, desired.clone(), &q) {
                created["status"] = desired["status"].clone();
                let target = api::Target {
                    namespace: None,
                    name: Some(format!("sandbox-node-{i}")),
                    subresource: Some("status".into()),
                };
                let _ = api.update("", "v1", "nodes", &target, created, &q);
            }
        }
        let cluster_token = CancellationToken::new();
        let mut sb = Sandbox::serve(api.clone(), port, cluster_token.clone()).await?;
        api.set_server_url(&sb.url());
        // What the apiserver creates at start to be found from pods.
        for (group, plural, obj) in bootstrap::kubernetes_service(sb.addr()) {
            let _ = api.create(group, "v1", plural, Some("default"), obj, &q);
        }
        cluster::start(api.clone(), cluster_token.clone());
        retention.spawn(api.clone(), cluster_token.clone());
        sb.kubelet = Some(kubelet::start_with(api, cluster_token, kubelet));
        Ok(sb)
    }

    async fn serve(
        api: Arc<Api>,
        port: u16,
        cluster: CancellationToken,
    ) -> Result<Sandbox, SandboxError> {
        let (listener, addr) = server::bind(port)
            .await
            .map_err(|source| SandboxError::Bind { port, source })?;
        let cancel = CancellationToken::new();
        let task = tokio::spawn(server::serve(api.clone(), listener, cancel.clone()));
        Ok(Sandbox {
            addr,
            api,
            cancel,
            cluster,
            task,
            kubelet: None,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The cluster CA (PEM) that signs the serving certificate.
    pub fn ca_pem(&self) -> &str {
        self.api.security.pki().ca_pem()
    }

    /// The bearer token of the kubeconfig's user (cluster-admin).
    pub fn admin_token(&self) -> &str {
        self.api.security.admin_token()
    }

    /// The API behind the server (store, faults), for in-process tests.
    pub fn api(&self) -> &Arc<Api> {
        &self.api
    }

    /// A kubeconfig pointing at this sandbox, context `agentdeck-sandbox`:
    /// its CA and the admin user's token.
    pub fn kubeconfig(&self, namespace: &str) -> String {
        kubeconfig_for(&self.url(), &self.api.security, namespace)
    }

    /// The same kubeconfig with its cluster, user and context named `name`
    /// (and the certificate context `name-cert`).
    pub fn kubeconfig_named(&self, namespace: &str, name: &str) -> String {
        kubeconfig_named(&self.url(), &self.api.security, namespace, name)
    }

    /// A kube client for this sandbox, as its kubeconfig's user.
    pub fn client(&self) -> Result<kube::Client, kube::Error> {
        self.client_with_token(self.admin_token())
    }

    /// A kube client for this sandbox presenting `token` (a service
    /// account's, say).
    pub fn client_with_token(&self, token: &str) -> Result<kube::Client, kube::Error> {
        let url = self
            .url()
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| kube::Error::Service(e.into()))?;
        let mut config = kube::Config::new(url);
        config.root_cert = Some(tls::ca_ders(self.ca_pem()));
        config.auth_info.token = Some(token.to_owned().into());
        kube::Client::try_from(config)
    }

    /// An HTTP client that trusts this sandbox's CA and sends the admin
    /// token, for raw requests (`/sandbox/faults`, wire-level tests).
    pub fn http_client(&self) -> Result<reqwest::Client, reqwest::Error> {
        let mut auth = axum::http::HeaderMap::new();
        if let Ok(v) = format!("Bearer {}", self.admin_token()).parse() {
            auth.insert(axum::http::header::AUTHORIZATION, v);
        }
        let mut builder = reqwest::Client::builder().default_headers(auth);
        if let Ok(tls) = self.api.security.pki().client_config() {
            builder = builder.tls_backend_preconfigured(tls);
        }
        builder.build()
    }

    /// Stops serving and starts again on the same port with the same store,
    /// as a restarted apiserver over the same etcd would: clients see their
    /// connections drop and must recover.
    pub async fn restart(self) -> Result<Sandbox, SandboxError> {
        let api = self.api.clone();
        let port = self.addr.port();
        let cluster = self.cluster.clone();
        self.api.faults.drop_watches();
        self.cancel.cancel();
        let _ = self.task.await;
        let mut sb = Sandbox::serve(api, port, cluster).await?;
        sb.kubelet = self.kubelet;
        Ok(sb)
    }

    /// Stops serving; returns once the kubelet has killed its processes and
    /// removed its directory (or after a few seconds).
    pub async fn stop(self) {
        self.cluster.cancel();
        self.cancel.cancel();
        self.api.faults.drop_watches();
        let _ = self.task.await;
        wait_kubelet(self.kubelet).await;
    }

    /// Serves until `cancel` fires.
    pub async fn run_until(self, cancel: CancellationToken) -> Result<(), SandboxError> {
        let Sandbox {
            api,
            cancel: own,
            cluster,
            mut task,
            kubelet,
            ..
        } = self;
        let result = tokio::select! {
            _ = cancel.cancelled() => None,
            r = &mut task => Some(r),
        };
        match result {
            None => {
                cluster.cancel();
                own.cancel();
                api.faults.drop_watches();
                let _ = task.await;
                wait_kubelet(kubelet).await;
                Ok(())
            }
            Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(SandboxError::Serve(e)),
            Some(Err(e)) => Err(SandboxError::Serve(std::io::Error::other(e))),
        }
    }
}

/// The kubeconfig context (and user) that authenticates the same admin with
/// a client certificate (CN the admin, O `system:masters`) instead of the
/// bearer token of the default context, for clients that build their own
/// TLS stack.
pub const CERT_CONTEXT: &str = "agentdeck-sandbox-cert";

/// A kubeconfig for a sandbox at `server` (`https://127.0.0.1:PORT`) with
/// these credentials: the current context and user `agentdeck-sandbox`
/// (cluster-admin, a bearer token: what every client sends), and
/// [`CERT_CONTEXT`], the same admin with a client certificate only.
pub fn kubeconfig_for(server: &str, security: &auth::Security, namespace: &str) -> String {
    kubeconfig_named(server, security, namespace, "agentdeck-sandbox")
}

/// [`kubeconfig_for`] with the cluster, user and context named `name`,
/// and the certificate context `name-cert`.
pub fn kubeconfig_named(
    server: &str,
    security: &auth::Security,
    namespace: &str,
    name: &str,
) -> String {
    use base64::Engine;
    let cert_context = if name == "agentdeck-sandbox" {
        CERT_CONTEXT.to_owned()
    } else {
        format!("{name}-cert")
    };
    // A name of other characters than these is quoted (JSON is YAML).
    let q = |s: &str| {
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            s.to_owned()
        } else {
            serde_json::Value::from(s).to_string()
        }
    };
    let (name, cert) = (q(name), q(&cert_context));
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: {namespace}\n\
         - name: {cert}\n  context:\n    cluster: {name}\n    user: {cert}\n    namespace: {namespace}\n\
         current-context: {name}\nusers:\n- name: {name}\n  user:\n    token: {token}\n\
         - name: {cert}\n  user:\n    client-certificate-data: {cert_pem}\n    client-key-data: {key}\n\
         preferences: {{}}\n",
        ca = b64(security.pki().ca_pem()),
        token = security.admin_token(),
        cert_pem = b64(security.pki().admin_cert_pem()),
        key = b64(security.pki().admin_key_pem()),
    )
}

/// `agentdeck sandbox`: serve, write the kubeconfig, say how to use it, run
/// until Ctrl-C or SIGTERM.
pub async fn run_cli(
    port: u16,
    nodes: u32,
    kubeconfig_out: Option<PathBuf>,
    namespace: &str,
    name: &str,
    retention: retention::Retention,
) -> Result<(), SandboxError> {
    let security = auth::Security::generate().map_err(SandboxError::Tls)?;
    let sb = Sandbox::start_retaining(
        port,
        nodes,
        security,
        kubelet::KubeletConfig::from_env(),
        retention,
    )
    .await?;
    let path = kubeconfig_out.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("agentdeck-sandbox-{}.kubeconfig", sb.addr().port()))
    });
    std::fs::write(&path, sb.kubeconfig_named(namespace, name)).map_err(|source| {
        SandboxError::Kubeconfig {
            path: path.clone(),
            source,
        }
    })?;
    println!("agentdeck sandbox: Kubernetes API on {}", sb.url());
    println!("kubeconfig written to {}", path.display());
    println!();
    print!("{}", next_steps(&path, &own_exe()));
    println!();
    println!("Ctrl-C stops it (the store lives in memory and is gone then).");
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        crate::signal::terminated().await;
        c.cancel();
    });
    sb.run_until(cancel).await
}

/// This executable as the user should type it: plain `agentdeck` when that is
/// what `PATH` finds, else the full path (e.g. `target/release/agentdeck`).
fn own_exe() -> String {
    let exe = std::env::current_exe().ok();
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let candidate = dir.join("agentdeck");
            exe.as_ref().is_some_and(|e| {
                candidate.canonicalize().ok().as_ref() == e.canonicalize().ok().as_ref()
            })
        })
    });
    match exe {
        Some(e) if !on_path => e.display().to_string(),
        _ => "agentdeck".to_owned(),
    }
}

/// What to type next: point kubectl at the sandbox, install the CRDs, run the
/// controller and give it a pool and some work.
pub fn next_steps(kubeconfig: &std::path::Path, exe: &str) -> String {
    let kc = kubeconfig.display();
    format!(
        "In another terminal, from the agentdeck checkout:\n\n  \
         export KUBECONFIG={kc}\n  \
         {exe} crds | kubectl apply -f -\n  \
         kubectl create namespace agentdeck-system\n  \
         {exe} --daemon &\n  \
         kubectl apply -f config/pool-quickstart.yaml\n  \
         kubectl create -f config/tasks/quickstart.yaml\n  \
         kubectl get agentpools,agenttasks -w\n"
    )
}

/// A Ready node named `sandbox-node-<i>`.
fn node(i: u32) -> serde_json::Value {
    let now = api::now_rfc3339();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": format!("sandbox-node-{i}"), "labels": {
            "kubernetes.io/hostname": format!("sandbox-node-{i}"),
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": discovery::go_arch(),
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": discovery::go_arch(),
        }},
        "spec": {},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "agentdeck sandbox kubelet is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": format!("sandbox-node-{i}")}],
            "nodeInfo": {"kubeletVersion": "v1.33.0-agentdeck", "containerRuntimeVersion": "agentdeck://0",
                         "operatingSystem": "linux", "architecture": discovery::go_arch(),
                         "osImage": "agentdeck sandbox", "kernelVersion": "", "kubeProxyVersion": "",
                         "machineID": "", "systemUUID": "", "bootID": ""}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_named_sandbox_kubeconfigs_merge_into_two_contexts_of_their_own() {
        let security = auth::Security::generate().expect("credentials");
        let a = kubeconfig_named("https://127.0.0.1:6001", &security, "default", "a");
        let b = kubeconfig_named("https://127.0.0.1:6002", &security, "ops", "east/b");
        let parse = |t: &str| kube::config::Kubeconfig::from_yaml(t).expect("a kubeconfig");
        let merged = parse(&a).merge(parse(&b)).expect("merges");
        let server = |context: &str| {
            let c = merged
                .contexts
                .iter()
                .find(|c| c.name == context)
                .and_then(|c| c.context.clone())
                .expect("the context");
            let cluster = merged
                .clusters
                .iter()
                .find(|x| x.name == c.cluster)
                .and_then(|x| x.cluster.clone())
                .expect("its cluster");
            (cluster.server, c.namespace)
        };
        assert_eq!(
            server("a"),
            (
                Some("https://127.0.0.1:6001".into()),
                Some("default".into())
            )
        );
        assert_eq!(
            server("east/b"),
            (Some("https://127.0.0.1:6002".into()), Some("ops".into()))
        );
        assert!(merged.contexts.iter().any(|c| c.name == "east/b-cert"));
        // Unnamed, as before.
        let plain = kubeconfig_for("https://127.0.0.1:6001", &security, "default");
        assert_eq!(
            parse(&plain).current_context.as_deref(),
            Some("agentdeck-sandbox")
        );
    }
}
