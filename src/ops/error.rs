//! Why an action was refused or failed.

/// What can stop an action. User mistakes (exit 2) are refused before
/// anything is written.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// No such pool in the namespace.
    #[error(
        "no AgentPool {pool:?} in namespace {namespace}; {}",
        listing("pools there", known)
    )]
    UnknownPool {
        pool: String,
        namespace: String,
        known: Vec<String>,
    },
    /// No such agent (pod) in the pool.
    #[error("no agent {agent:?} in pool {pool}; {}", listing("its agents", known))]
    UnknownAgent {
        pool: String,
        agent: String,
        known: Vec<String>,
    },
    /// Some named tasks do not exist.
    #[error("no AgentTask {} in namespace {namespace}", quoted(missing))]
    UnknownTasks {
        missing: Vec<String>,
        namespace: String,
    },
    /// A flag's value cannot be used with the pool as it is.
    #[error("{flag}: {message}")]
    Refused {
        /// The flag (or argument) at fault, as typed.
        flag: &'static str,
        message: String,
    },
    /// The selector matched nothing, or no task was named.
    #[error("{0}")]
    NothingSelected(String),
    /// The API refused a value we sent (e.g. a bad label selector).
    #[error("{flag}: the API refused {value:?}: {message}")]
    BadValue {
        flag: &'static str,
        value: String,
        message: String,
    },
    /// Other writers kept changing the object; nothing more was written.
    #[error("{object} kept changing while this action was applied ({attempts} attempts); {done}")]
    Conflict {
        object: String,
        attempts: u32,
        done: String,
    },
    /// An API call failed: the server, the operation and the cause.
    #[error("{}", crate::cluster::api_fault(what, source))]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The audit file could not be written or read.
    #[error("audit file {path}: {source}")]
    AuditFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// No place for the audit file (neither XDG_STATE_HOME nor HOME is set).
    #[error("no place for the audit file: set XDG_STATE_HOME or HOME")]
    NoStateDir,
    /// `drain --wait --timeout` ran out.
    #[error("--timeout {after}: the drain has not finished: {left}")]
    DrainTimeout { after: String, left: String },
    /// Writing to stdout failed.
    #[error("cannot write output: {0}")]
    Output(#[source] std::io::Error),
    /// The user did not confirm.
    #[error("not confirmed; nothing was changed (pass --yes to skip the prompt)")]
    NotConfirmed,
}

impl OpsError {
    /// A mistake in what the user asked for (exit 2); nothing was changed.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            OpsError::UnknownPool { .. }
                | OpsError::UnknownAgent { .. }
                | OpsError::UnknownTasks { .. }
                | OpsError::Refused { .. }
                | OpsError::NothingSelected(_)
                | OpsError::BadValue { .. }
                | OpsError::NotConfirmed
        )
    }

    pub(crate) fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> OpsError {
        let what = what.into();
        move |source| OpsError::Api { what, source }
    }
}

fn listing(what: &str, known: &[String]) -> String {
    if known.is_empty() {
        format!("{what}: none")
    } else {
        format!("{what}: {}", known.join(", "))
    }
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Result of the ops layer.
pub type Result<T, E = OpsError> = std::result::Result<T, E>;
