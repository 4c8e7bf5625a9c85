//! The errors that reach `main`, and the exit codes they map to.

use crate::config::ConfigError;
use crate::install::InstallError;

/// Exit code for a user mistake (bad flag, bad config, invalid pool); nothing was changed.
pub const EXIT_USAGE: i32 = 2;
/// Exit code for a fault (API unreachable, I/O error).
pub const EXIT_FAILURE: i32 = 1;

/// What can stop a command.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file or environment is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Install manifests could not be rendered.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// No Kubernetes client could be made.
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    /// The daemon's health and metrics server could not run.
    #[error(transparent)]
    Server(#[from] crate::server::ServerError),
    /// The sandbox could not start or failed.
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    /// Logging could not be set up.
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    /// The agent runtime stopped with an error.
    #[error(transparent)]
    Agent(#[from] crate::agent::AgentError),
    /// A support bundle could not be written.
    #[error(transparent)]
    Bundle(#[from] crate::ops::bundle::BundleError),
    /// A debug pod could not be made, listed or removed.
    #[error(transparent)]
    Debug(#[from] crate::ops::debug::DebugError),
    /// What this identity may do could not be asked (`agentdeck access`).
    #[error(transparent)]
    Access(#[from] crate::ops::access::AccessError),
    /// An operator action was refused or failed.
    #[error(transparent)]
    Ops(#[from] crate::ops::OpsError),
    /// The async runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The console's theme does not exist or is invalid.
    #[error(transparent)]
    Theme(#[from] crate::ui::theme::ThemeError),
    /// The console's keymap in the configuration is invalid.
    #[error("{file}: {source}")]
    Keymap {
        /// The configuration file (or "configuration").
        file: String,
        #[source]
        source: crate::app::keymap::KeymapError,
    },
    /// The demo cluster could not be set up.
    #[error(transparent)]
    Demo(#[from] crate::demo::DemoError),
    /// A support bundle could not be opened or served.
    #[error(transparent)]
    Replay(#[from] crate::replay::ReplayError),
    /// The terminal could not be used.
    #[error("terminal: {0}")]
    Terminal(#[source] std::io::Error),
    /// Writing to stdout failed.
    #[error("cannot write output: {0}")]
    Output(#[source] std::io::Error),
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(e) if e.is_user_error() => EXIT_USAGE,
            Error::Install(e) if e.is_user_error() => EXIT_USAGE,
            Error::Sandbox(e) if e.is_user_error() => EXIT_USAGE,
            Error::Cluster(e) if e.is_user_error() => EXIT_USAGE,
            Error::Telemetry(e) if e.is_user_error() => EXIT_USAGE,
            Error::Agent(e) if e.is_user_error() => EXIT_USAGE,
            Error::Ops(e) if e.is_user_error() => EXIT_USAGE,
            Error::Server(crate::server::ServerError::Bind { .. }) => EXIT_USAGE,
            Error::Theme(_) | Error::Keymap { .. } => EXIT_USAGE,
            Error::Bundle(e) if e.is_user_error() => EXIT_USAGE,
            Error::Replay(e) if e.is_user_error() => EXIT_USAGE,
            Error::Debug(crate::ops::debug::DebugError::ShellExited(code)) => *code,
            Error::Debug(e) if e.is_user_error() => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }
}

/// Result with this layer's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
