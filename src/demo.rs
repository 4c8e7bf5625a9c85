//! `agentdeck --demo`: a sandbox cluster in this process with the CRDs,
//! three example pools (deployment mode with a freeze window, job mode,
//! scale to zero), real agents, and a steady trickle of varied tasks —
//! quick, slow, failing, one that hangs, one that prints a lot — so the
//! console opens on a living system.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, CustomResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cluster::Connection;
use crate::crd::{AgentPool, AgentTask};
use crate::sandbox::{Sandbox, SandboxError};

/// Namespace the demo's pools and tasks live in.
pub const NAMESPACE: &str = "demo";

/// Why the demo could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("cannot set up the demo cluster: {0}")]
    Setup(#[from] kube::Error),
    #[error("cannot write the demo's kubeconfig {path}: {source}")]
    Kubeconfig {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// The demo's cluster, running until [`Demo::stop`].
pub struct Demo {
    pub sandbox: Sandbox,
    pub conn: Connection,
    /// A kubeconfig for `kubectl` beside the console (removed at stop).
    pub kubeconfig: std::path::PathBuf,
    /// Its context's name, one per demo (so is its audit trail).
    pub context: String,
    stop: CancellationToken,
}

/// The three pools.
pub fn pools() -> Vec<serde_json::Value> {
    let pool = |name: &str, spec: serde_json::Value| {
        json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
               "metadata": {"name": name, "labels": {"team": "platform"}}, "spec": spec})
    };
    vec![
        pool(
            "platform",
            json!({
                "image": "ghcr.io/agentdeck/agentdeck:0.1.0",
                "executionMode": "deployment",
                "minReplicas": 1, "maxReplicas": 4,
                "cooldownSeconds": {"up": 0, "down": 20},
                "scaleDownStabilizationSeconds": 60,
                "taskHistory": {"ttlSecondsAfterFinished": 900},
                "envForwardAllowlist": ["TF_LOG"],
                "env": [{"name": "TF_LOG", "value": "info"}],
                "freezeSchedules": [{"name": "release-freeze", "from": "16:00", "to": "09:00",
                                     "weekdays": [5], "timezone": "UTC"}],
                "onStop": "drain"
            }),
        ),
        pool(
            "batch",
            json!({
                "image": "ghcr.io/agentdeck/agentdeck:0.1.0",
                "executionMode": "job",
                "minReplicas": 0, "maxReplicas": 6, "maxInFlight": 3,
                "scaleDownStabilizationSeconds": 60,
                "taskHistory": {"ttlSecondsAfterFinished": 900},
                "taskDefaults": {"runnerImage": "ghcr.io/opentofu/opentofu:1.8",
                                 "ttlSecondsAfterFinished": 120},
                "onStop": "grace-shutdown", "graceShutdownSeconds": 5
            }),
        ),
        pool(
            "sandbox-envs",
            json!({
                "image": "ghcr.io/agentdeck/agentdeck:0.1.0",
                "minReplicas": 0, "maxReplicas": 2, "scaleUpStep": 1,
                "cooldownSeconds": {"up": 5, "down": 15},
                "scaleDownStabilizationSeconds": 60,
                "taskHistory": {"ttlSecondsAfterFinished": 900},
                "onStop": "force-shutdown"
            }),
        ),
    ]
}

/// One kind of demo task: (name prefix, pool, shell script, timeout).
const KINDS: &[(&str, &str, &str, Option<i64>)] = &[
    (
        "plan",
        "platform",
        r#"echo "tofu plan: refreshing state"; sleep 1; echo "Plan: 2 to add, 0 to change, 0 to destroy.""#,
        None,
    ),
    (
        "apply",
        "platform",
        r#"for i in 1 2 3 4 5 6; do echo "aws_instance.web[$i]: Creating..."; sleep 2; done; echo "Apply complete! Resources: 6 added.""#,
        None,
    ),
    (
        "validate",
        "batch",
        r#"echo '{"level":"info","msg":"validating","module":"network"}'; sleep 1; echo '{"level":"info","msg":"configuration is valid","module":"network"}'"#,
        None,
    ),
    (
        "drift",
        "platform",
        r#"echo "checking drift"; sleep 2; echo "Error: provider registry.opentofu.org/hashicorp/aws: credentials expired" >&2; exit 3"#,
        None,
    ),
    (
        "plan",
        "batch",
        r#"echo "tofu init"; sleep 2; echo "tofu plan"; sleep 3; echo "No changes. Your infrastructure matches the configuration.""#,
        None,
    ),
    (
        "env-up",
        "sandbox-envs",
        r#"echo "creating ephemeral environment"; sleep 6; echo "environment ready""#,
        None,
    ),
    (
        "report",
        "batch",
        r#"i=0; while [ $i -lt 3000 ]; do echo "resource $i: aws_s3_object.asset[$i] unchanged"; i=$((i+1)); done; echo "3000 resources checked""#,
        None,
    ),
    (
        "destroy",
        "sandbox-envs",
        r#"echo "tofu destroy -target=module.legacy"; sleep 3; echo "Error: state lock held by another run" >&2; exit 1"#,
        None,
    ),
];

/// The task that hangs until its timeout cancels it.
const HANG: (&str, &str, &str, Option<i64>) = (
    "hang",
    "platform",
    r#"echo "waiting for the state lock..."; sleep 100000"#,
    Some(600),
);

fn task(n: usize, (prefix, pool, script, timeout): (&str, &str, &str, Option<i64>)) -> AgentTask {
    let mut spec = json!({"pool": pool, "command": ["sh", "-c", script]});
    if let Some(t) = timeout {
        spec["timeoutSeconds"] = json!(t);
    }
    serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": format!("{prefix}-{n:04}"), "labels": {"kind": prefix}},
        "spec": spec
    }))
    .expect("demo tasks are valid AgentTasks")
}

/// How long the demo's cluster remembers: its watch history is compacted
/// every minute rather than kube-apiserver's five (what a watch can resume
/// from is then about what a real apiserver's watch cache holds, 75 s),
/// so a demo left open stays the size of its objects. It writes about
/// 4 MB of JSON a minute; with five minutes the history held five to ten
/// minutes of that, and the demo grew 112 → 136 MiB from minute 5 to 10
/// (102 → 112 with one). `AGENTDECK_SANDBOX_COMPACTION_INTERVAL` still
/// sets it.
fn demo_retention() -> crate::sandbox::retention::Retention {
    crate::sandbox::retention::Retention {
        compaction_interval: Duration::from_secs(60),
        ..Default::default()
    }
}

/// Finished tasks kept; older ones are deleted so the demo stays readable.
const KEEP_FINISHED: usize = 60;

impl Demo {
    /// Starts the sandbox and fills it.
    pub async fn start() -> Result<Demo, DemoError> {
        let security = crate::sandbox::auth::Security::generate().map_err(SandboxError::Tls)?;
        let sandbox = Sandbox::start_retaining(
            0,
            3,
            security,
            crate::sandbox::kubelet::KubeletConfig::from_env(),
            crate::sandbox::retention::Retention::from_env_over(demo_retention()),
        )
        .await?;
        let context = format!("agentdeck-demo-{}", sandbox.addr().port());
        let kubeconfig = std::env::temp_dir().join(format!("{context}.kubeconfig"));
        let text = sandbox
            .kubeconfig(NAMESPACE)
            .replace("agentdeck-sandbox", &context);
        write_private(&kubeconfig, &text).map_err(|source| DemoError::Kubeconfig {
            path: kubeconfig.clone(),
            source,
        })?;
        let client = sandbox.client()?;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd).await?;
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for ns in ["agentdeck-system", NAMESPACE] {
            let obj: Namespace =
                serde_json::from_value(json!({"metadata": {"name": ns}})).expect("a namespace");
            namespaces.create(&PostParams::default(), &obj).await?;
        }
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), NAMESPACE);
        for p in self::pools() {
            let p: AgentPool = serde_json::from_value(p).expect("demo pools are valid AgentPools");
            pools.create(&PostParams::default(), &p).await?;
        }
        let tasks: Api<AgentTask> = Api::namespaced(client.clone(), NAMESPACE);
        // A first batch so every view has something at once.
        for (n, k) in KINDS.iter().enumerate() {
            tasks.create(&PostParams::default(), &task(n, *k)).await?;
        }
        tasks
            .create(&PostParams::default(), &task(KINDS.len(), HANG))
            .await?;
        let stop = CancellationToken::new();
        tokio::spawn(trickle(client.clone(), KINDS.len() + 1, stop.clone()));
        Ok(Demo {
            sandbox,
            conn: Connection {
                client,
                namespace: NAMESPACE.to_owned(),
                streams: None,
            },
            kubeconfig,
            context,
            stop,
        })
    }

    /// Stops the task trickle and the sandbox (its agents with it), and
    /// removes the kubeconfig.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.kubeconfig);
        self.sandbox.stop().await;
    }
}

/// Writes `text` readable by its owner only (it holds an admin token).
pub(crate) fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(text.as_bytes())
}

/// A new task every couple of seconds, cycling through the kinds; old
/// finished tasks are deleted.
async fn trickle(client: Client, mut n: usize, stop: CancellationToken) {
    let tasks: Api<AgentTask> = Api::namespaced(client, NAMESPACE);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(2500)) => {}
        }
        let kind = KINDS[n % KINDS.len()];
        if let Err(e) = tasks.create(&PostParams::default(), &task(n, kind)).await {
            tracing::debug!(error = %e, "demo task not created");
        }
        n += 1;
        if n.is_multiple_of(10)
            && let Ok(list) = tasks.list(&ListParams::default()).await
        {
            let mut done: Vec<_> = list
                .items
                .into_iter()
                .filter(|t| t.status.as_ref().is_some_and(|s| s.phase.is_finished()))
                .collect();
            done.sort_by_key(|t| t.metadata.creation_timestamp.as_ref().map(|c| c.0));
            let extra = done.len().saturating_sub(KEEP_FINISHED);
            for t in done.into_iter().take(extra) {
                if let Some(name) = t.metadata.name {
                    let _ = tasks.delete(&name, &DeleteParams::default()).await;
                }
            }
        }
    }
}
