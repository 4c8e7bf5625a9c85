//! A support bundle served as a cluster, for whoever receives it: the
//! bundle's objects and logs behind a read-only Kubernetes API on loopback
//! (the sandbox's snapshot server). `agentdeck sandbox --from-bundle`
//! serves it to any client; `agentdeck --bundle` opens the console on it,
//! so the console reads a bundle through the same code as a live cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::CustomResourceExt;
use tokio_util::sync::CancellationToken;

use crate::cluster::Connection;
use crate::crd::{AgentPool, AgentTask};
use crate::ops::bundle::open::{OpenError, OpenedBundle};
use crate::sandbox::snapshot::Snapshot;
use crate::sandbox::{Sandbox, SandboxError};

/// Why a bundle cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Not a bundle that opens (exit 2: the user's to fix).
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("cannot connect to the bundle's server: {0}")]
    Client(#[from] kube::Error),
    #[error("cannot write the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ReplayError {
    /// A mistake in what the user gave (a damaged or foreign zip, a busy
    /// port, an unwritable path).
    pub fn is_user_error(&self) -> bool {
        match self {
            ReplayError::Open(_) | ReplayError::Kubeconfig { .. } => true,
            ReplayError::Sandbox(e) => e.is_user_error(),
            ReplayError::Client(_) => false,
        }
    }
}

/// A bundle being served.
pub struct Replay {
    pub sandbox: Sandbox,
    pub bundle: Arc<OpenedBundle>,
    /// A client of it, in the bundle's namespace.
    pub conn: Connection,
    /// Objects that could not be served, in words.
    pub skipped: Vec<String>,
    /// Each pod's namespace and pool label, for the recorded health.
    pods: BTreeMap<String, (String, Option<String>)>,
}

impl Replay {
    /// Opens `path` and serves it on 127.0.0.1:`port` (0: a free one).
    pub async fn start(path: &Path, port: u16) -> Result<Replay, ReplayError> {
        let opened = {
            let path = path.to_path_buf();
            tokio::task::spawn_blocking(move || OpenedBundle::open(&path))
                .await
                .map_err(|e| SandboxError::Serve(std::io::Error::other(e)))??
        };
        let bundle = Arc::new(opened);
        let objects = {
            let b = bundle.clone();
            tokio::task::spawn_blocking(move || b.objects())
                .await
                .map_err(|e| SandboxError::Serve(std::io::Error::other(e)))?
        };
        let pods = objects
            .iter()
            .filter(|o| o["kind"] == "Pod")
            .filter_map(|o| {
                let m = &o["metadata"];
                Some((
                    m["name"].as_str()?.to_owned(),
                    (
                        m["namespace"].as_str()?.to_owned(),
                        m["labels"][crate::crd::LABEL_POOL]
                            .as_str()
                            .map(str::to_owned),
                    ),
                ))
            })
            .collect();
        let logs = {
            let b = bundle.clone();
            Arc::new(
                move |_ns: &str, pod: &str, container: &str, previous: bool| {
                    b.log(pod, container, previous)
                },
            )
        };
        let crds = [AgentPool::crd(), AgentTask::crd()]
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        let snapshot = Snapshot {
            objects,
            crds,
            logs,
            what: format!("the support bundle {}", bundle.info.file),
        };
        let (sandbox, skipped) = Sandbox::start_snapshot(port, snapshot).await?;
        let client = sandbox.client()?;
        let namespace = bundle
            .info
            .namespaces
            .first()
            .cloned()
            .unwrap_or_else(|| "default".to_owned());
        Ok(Replay {
            sandbox,
            bundle,
            conn: Connection {
                client,
                streams: None,
                namespace,
            },
            skipped,
            pods,
        })
    }

    /// The agents' health as the bundle recorded it, for the console's
    /// view (nothing is probed on a bundle).
    pub fn health_samples(&self) -> Vec<crate::cluster::AgentSample> {
        self.bundle
            .health()
            .iter()
            .filter_map(|r| {
                let (ns, pool) = self.pods.get(r["pod"].as_str()?)?;
                crate::cluster::AgentSample::from_record(ns, pool.clone(), r)
            })
            .collect()
    }

    /// The bundle's audit trail in a file of its own (removed when the
    /// returned path is dropped), for the console's audit view: empty when
    /// the bundle has none, never the receiver's own trail.
    pub fn audit_file(&self) -> Option<tempfile::TempPath> {
        use std::io::Write;
        let records = self.bundle.audit();
        let mut f = tempfile::NamedTempFile::new().ok()?;
        for r in &records {
            let line = serde_json::to_string(r).ok()?;
            writeln!(f, "{line}").ok()?;
        }
        Some(f.into_temp_path())
    }

    /// The kube context name the bundle was taken in (`bundle` when it
    /// does not say), as the console and kubeconfig call it.
    pub fn context(&self) -> String {
        self.bundle
            .info
            .context
            .clone()
            .unwrap_or_else(|| "bundle".to_owned())
    }

    /// Everything the bundle could not give, in words (what the console's
    /// header notes and `sandbox --from-bundle` prints).
    pub fn notes(&self) -> Vec<String> {
        let mut out = self.bundle.notes();
        if !self.skipped.is_empty() {
            out.push(format!(
                "{} object(s) not served: {}",
                self.skipped.len(),
                self.skipped
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        out
    }
}

/// `agentdeck sandbox --from-bundle`: serve the bundle, write a kubeconfig,
/// say how to use it, run until Ctrl-C or SIGTERM.
pub async fn run_cli(
    path: &Path,
    port: u16,
    kubeconfig_out: Option<PathBuf>,
) -> Result<(), ReplayError> {
    let replay = Replay::start(path, port).await?;
    let info = replay.bundle.info.clone();
    let namespace = replay.conn.namespace.clone();
    let kubeconfig = kubeconfig_out.unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "agentdeck-bundle-{}.kubeconfig",
            replay.sandbox.addr().port()
        ))
    });
    let text = replay
        .sandbox
        .kubeconfig_named(&namespace, &replay.context());
    crate::demo::write_private(&kubeconfig, &text).map_err(|source| ReplayError::Kubeconfig {
        path: kubeconfig.clone(),
        source,
    })?;
    println!(
        "agentdeck sandbox: the support bundle {} on {}, read-only",
        path.display(),
        replay.sandbox.url()
    );
    println!(
        "taken {} in context {}, namespace {} (agentdeck {}, bundle format {})",
        info.taken_at,
        info.context.as_deref().unwrap_or("(not recorded)"),
        info.namespaces.join(", "),
        info.tool_version,
        info.format
    );
    for note in replay.notes() {
        println!("note: {note}");
    }
    println!("kubeconfig written to {}", kubeconfig.display());
    println!();
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  kubectl get agentpools,agenttasks,pods");
    println!("  kubectl logs POD [-c CONTAINER] [--previous]");
    println!("  kubectl get events --sort-by=.lastTimestamp");
    println!();
    println!("Writes answer 405 MethodNotAllowed. Ctrl-C stops it.");
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        crate::signal::terminated().await;
        c.cancel();
    });
    replay.sandbox.run_until(cancel).await?;
    Ok(())
}
