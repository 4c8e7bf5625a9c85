//! The agent runtime (`agentdeck agent`), the process in every pool pod.
//!
//! - Deployment mode ([`pool`]): watches its pool's AgentTasks, claims
//!   Pending ones with an optimistic-concurrency status write, runs them as
//!   child processes ([`process`]), heartbeats and reports.
//! - Job mode ([`job`], `--task NAME`): the worker container of a task's
//!   Job; hands the task to the runner container through `/shared/task`.
//!
//! Both serve `/healthz` ([`state`]) and follow the pool's and their pod's
//! debug and drain switches live. Decisions live in [`plan`].

pub mod job;
pub mod plan;
pub mod pool;
pub mod process;
pub mod secrets;
pub mod state;
pub mod status;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::{AgentArgs, GlobalArgs};
use crate::config::AgentConfig;
use crate::telemetry::TelemetryGuard;

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A variable the controller injects is missing (run outside a pool pod?).
    #[error(
        "{name} is not set: the agent needs {what}; the controller injects it into pool pods \
         (outside a pod, set {name} yourself)"
    )]
    MissingEnv {
        /// The variable.
        name: &'static str,
        /// What it is for.
        what: &'static str,
    },
    /// No Kubernetes client.
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    /// `/healthz` could not be served.
    #[error("cannot serve /healthz on {addr}: {source}")]
    HealthBind {
        /// Address tried.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// An API call the agent cannot do without failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The job-mode hand-over directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    SharedDir {
        /// File or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl AgentError {
    /// A mistake in how the agent was started (exit code 2).
    pub fn is_user_error(&self) -> bool {
        match self {
            AgentError::MissingEnv { .. } => true,
            AgentError::Cluster(e) => e.is_user_error(),
            _ => false,
        }
    }
}

/// Who and where this agent is, from the variables the controller injects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `POOL_NAME`.
    pub pool: String,
    /// `POOL_ID` (the pool's uid), for logs.
    pub pool_id: Option<String>,
    /// `IAC_AGENT_NAME` (the pod name), else `HOSTNAME`.
    pub agent: String,
    /// `POD_NAMESPACE`, else the kubeconfig's.
    pub namespace: Option<String>,
    /// `POD_IP`: where `/healthz` binds.
    pub pod_ip: Option<String>,
}

impl Identity {
    /// Reads the identity from `env`.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Identity, AgentError> {
        let get = |k: &str| {
            env.get(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        Ok(Identity {
            pool: get("POOL_NAME").ok_or(AgentError::MissingEnv {
                name: "POOL_NAME",
                what: "the name of the AgentPool whose tasks it runs",
            })?,
            pool_id: get("POOL_ID"),
            agent: get("IAC_AGENT_NAME").or_else(|| get("HOSTNAME")).ok_or(
                AgentError::MissingEnv {
                    name: "IAC_AGENT_NAME",
                    what: "its pod's name, which it writes into the tasks it claims",
                },
            )?,
            namespace: get("POD_NAMESPACE"),
            pod_ip: get("POD_IP"),
        })
    }
}

/// Everything a running agent shares between its parts.
pub struct Agent {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Namespace of the pool and its tasks.
    pub namespace: String,
    /// Who it is.
    pub id: Identity,
    /// Settings.
    pub config: AgentConfig,
    /// Exit after one task.
    pub single_run: bool,
    /// The process environment, read once.
    pub env: BTreeMap<String, String>,
    /// Health and activity.
    pub state: Arc<state::AgentState>,
    /// Live log level switching (None when logging was set up elsewhere).
    pub telemetry: Option<Arc<TelemetryGuard>>,
}

impl Agent {
    /// The agent's token, read only so that it is never forwarded to tasks.
    pub fn token(&self) -> Option<String> {
        std::fs::read_to_string(&self.config.token_file).ok()
    }
}

/// Runs `agentdeck agent` until it is told to stop (or, with
/// `--single-run`, after one task).
pub async fn run(
    args: AgentArgs,
    global: &GlobalArgs,
    config: AgentConfig,
    telemetry: Option<TelemetryGuard>,
) -> Result<(), AgentError> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let id = Identity::from_env(&env)?;
    let namespace = global.namespace.clone().or_else(|| id.namespace.clone());
    let conn = crate::cluster::connect(global.context.as_deref(), namespace.as_deref()).await?;
    tracing::info!(
        pool = %id.pool,
        pool_id = id.pool_id.as_deref().unwrap_or("-"),
        agent = %id.agent,
        namespace = %conn.namespace,
        mode = if args.task.is_some() { "job" } else { "deployment" },
        "agent starting"
    );
    let agent = Arc::new(Agent {
        client: conn.client,
        namespace: conn.namespace,
        single_run: args.single_run || config.single_run,
        id,
        config,
        env,
        state: Arc::new(state::AgentState::default()),
        telemetry: telemetry.map(Arc::new),
    });
    match args.task {
        Some(task) => job::run_worker(agent, &task).await,
        None => pool::run_pool_agent(agent).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn identity_comes_from_the_injected_variables() {
        let id = Identity::from_env(&env(&[
            ("POOL_NAME", "prod"),
            ("POOL_ID", "uid-1"),
            ("IAC_AGENT_NAME", "iac-agent-prod-abc"),
            ("HOSTNAME", "other"),
            ("POD_NAMESPACE", "ops"),
            ("POD_IP", "10.0.0.5"),
        ]))
        .expect("identity");
        assert_eq!(id.pool, "prod");
        assert_eq!(id.agent, "iac-agent-prod-abc");
        assert_eq!(id.namespace.as_deref(), Some("ops"));
        assert_eq!(id.pod_ip.as_deref(), Some("10.0.0.5"));
        let id = Identity::from_env(&env(&[("POOL_NAME", "p"), ("HOSTNAME", "h")])).expect("id");
        assert_eq!(id.agent, "h");
        assert_eq!(id.namespace, None);
    }

    #[test]
    fn a_missing_pool_name_says_what_to_set_and_is_a_usage_error() {
        let err = Identity::from_env(&env(&[("HOSTNAME", "h"), ("POOL_NAME", " ")]))
            .expect_err("no pool");
        assert!(err.to_string().contains("POOL_NAME is not set"), "{err}");
        assert!(err.is_user_error());
    }
}
