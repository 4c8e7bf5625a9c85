//! The two configuration files: `agentdeck.yaml` for the controller and the
//! console ([`Config`]) and `agentdeck-agent.yaml` for the agent runtime in the
//! pool's pods ([`AgentConfig`]).
//!
//! Both load the same way ([`Config::load`], [`AgentConfig::load`]):
//!
//! 1. **Defaults** are compiled in; every key has one, so no file is needed.
//! 2. **One file**, the first found of: the `--config FILE` given (must
//!    exist), `./<name>`, `$XDG_CONFIG_HOME/agentdeck/<name>` (or
//!    `~/.config/agentdeck/<name>` when `XDG_CONFIG_HOME` is unset),
//!    `/etc/agentdeck/<name>`, and `<name>` next to the running binary. It
//!    only overrides the keys it sets; an unknown key is an error.
//! 3. **Environment variables** override single keys. The name is the prefix
//!    (`AGENTDECK_` for `agentdeck.yaml`, `AGENTDECK_AGENT_` for
//!    `agentdeck-agent.yaml`) followed by the key path, each camelCase key
//!    written in UPPER_SNAKE_CASE and nested keys joined by a double
//!    underscore:
//!
//!    | key                            | variable                                    |
//!    |--------------------------------|---------------------------------------------|
//!    | `resyncIntervalSeconds`        | `AGENTDECK_RESYNC_INTERVAL_SECONDS=10`      |
//!    | `healthProbe.intervalSeconds`  | `AGENTDECK_HEALTH_PROBE__INTERVAL_SECONDS=5`|
//!    | `namespaces`                   | `AGENTDECK_NAMESPACES=team-a,team-b`        |
//!    | `keymap`                       | `AGENTDECK_KEYMAP=scale=s,drain=d`          |
//!    | `stopMode` (agent)             | `AGENTDECK_AGENT_STOP_MODE=grace-shutdown`  |
//!
//!    Values are converted to the key's type: integers, `true`/`false`
//!    (also `1`/`0`, `yes`/`no`, `on`/`off`), lists as comma-separated items,
//!    maps as comma-separated `name=value` pairs (lists and maps may also be
//!    given as JSON, starting with `[` or `{`). An empty value unsets a key
//!    whose default is `null`, and gives an empty list or map. A variable
//!    with the prefix that names no key is not an error, since Kubernetes
//!    injects service-link variables (`AGENTDECK_CONTROLLER_PORT=tcp://…`)
//!    for Services named `agentdeck-…`: those are ignored silently, any
//!    other is ignored with one warning naming the closest valid variable
//!    (a typo in a *file* key stays an error). The controller's loader leaves
//!    `AGENTDECK_AGENT_*` to the agent's, and the names in
//!    [`RESERVED_ENV_VARS`] (command-line flags) to the command line.
//! 4. **Validation** ([`Config::validate`], [`AgentConfig::validate`]) checks
//!    ranges and relations between keys.
//!
//! Every mistake is a [`ConfigError`] naming the file or variable, the key
//! path (`healthProbe.intervalSeconds`), the bad value and what is valid.

mod agent;
mod controller;
mod load;
mod monitoring;
mod sources;
mod validate;

use std::fmt;
use std::path::PathBuf;

pub use agent::{AgentConfig, AgentLogConfig};
pub use controller::{
    Config, HealthProbeConfig, LeaderElectionConfig, LogConfig, ServerConfig, TaskRecoveryConfig,
};
pub use monitoring::MonitoringConfig;
pub use sources::ConfigSources;
pub use validate::InvalidField;
pub(crate) use validate::namespace as check_namespace;

/// File name of the controller and console configuration.
pub const CONFIG_FILE_NAME: &str = "agentdeck.yaml";
/// File name of the agent runtime configuration.
pub const AGENT_CONFIG_FILE_NAME: &str = "agentdeck-agent.yaml";
/// Prefix of the variables overriding [`Config`] keys.
pub const ENV_PREFIX: &str = "AGENTDECK_";
/// Prefix of the variables overriding [`AgentConfig`] keys.
pub const AGENT_ENV_PREFIX: &str = "AGENTDECK_AGENT_";

/// The console's colour themes, by name: the one list `theme` (file,
/// `AGENTDECK_THEME`) is checked against. A theme added under `themes/`
/// is added here too.
pub const THEMES: &[&str] = &["default", "light", "high-contrast"];

/// Variables with a config prefix that belong to command-line flags (clap
/// `env = …`) rather than to a key; the loaders skip them.
pub const RESERVED_ENV_VARS: &[&str] = &[
    "AGENTDECK_CONFIG",
    "AGENTDECK_NAMESPACE",
    "AGENTDECK_CONTEXT",
    "AGENTDECK_KUBECONFIG",
    "AGENTDECK_AGENT_CONFIG",
    "AGENTDECK_AGENT_TASK",
];

/// Where a setting came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A configuration file.
    File(PathBuf),
    /// An environment variable, by name.
    Env(String),
    /// The compiled-in defaults (only wrong in combination with other keys).
    Defaults,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Env(name) => write!(f, "environment variable {name}"),
            Origin::Defaults => f.write_str("built-in defaults"),
        }
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--config FILE` names a file that is not there.
    #[error("config file {} (given with --config) does not exist", path.display())]
    ExplicitFileMissing {
        /// The path as given.
        path: PathBuf,
    },
    /// `--config PATH` names a directory (or something else that is not a file).
    #[error("--config {}: not a file (give the path of an {} file)", path.display(), CONFIG_FILE_NAME)]
    ExplicitNotAFile {
        /// The path as given.
        path: PathBuf,
    },
    /// A config file is not text (a binary or a file in another encoding).
    #[error("config file {}: not a UTF-8 text file; expected YAML such as config/{}", path.display(), CONFIG_FILE_NAME)]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// A config file exists but cannot be read.
    #[error("cannot read config file {}: {source}", path.display())]
    ReadFailed {
        /// The file.
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A config file is not valid YAML.
    #[error("{}{}: invalid YAML: {message}", path.display(), location(*line, *column))]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error, when known.
        line: Option<u64>,
        /// 1-based column of the error, when known.
        column: Option<u64>,
        /// The parser's message.
        message: String,
    },
    /// A key in a file that the configuration does not have.
    #[error("{origin}: unknown key `{key}`; valid keys{}: {}", section_suffix(section), valid.join(", "))]
    UnknownKey {
        /// The file.
        origin: Origin,
        /// Full path of the unknown key (`healthProbe.intervalSecond`).
        key: String,
        /// Path of the mapping it is in; empty at the top level.
        section: String,
        /// The keys that mapping accepts.
        valid: Vec<String>,
    },
    /// A variable with the config prefix that names no key.
    #[error("environment variable {var} does not name a configuration key; valid variables{}: {}", prefix_suffix(prefix), valid.join(", "))]
    UnknownEnvVar {
        /// The variable.
        var: String,
        /// The longest valid prefix of it, e.g. `AGENTDECK_HEALTH_PROBE__`.
        prefix: String,
        /// Valid variables below that prefix (`…__*` for sections).
        valid: Vec<String>,
    },
    /// A key with a value of the wrong type or out of range.
    #[error("{origin}: {field} = {value}: expected {expected}")]
    InvalidValue {
        /// The file or variable that set it.
        origin: Origin,
        /// Key path (`healthProbe.intervalSeconds`, `namespaces[1]`).
        field: String,
        /// The value as written (JSON-quoted).
        value: String,
        /// What would be valid.
        expected: String,
    },
    /// The settings could not be turned into the configuration type; the
    /// checks above should catch every such case first.
    #[error("{origin}: {message}")]
    Rejected {
        /// The file, or the variables when there is no file.
        origin: Origin,
        /// The deserializer's message.
        message: String,
    },
    /// A defect in the configuration types themselves.
    #[error("internal configuration error: {0}")]
    Internal(String),
}

impl ConfigError {
    /// Whether the user caused this with a file, flag or variable (exit
    /// code 2). A file that exists but cannot be read, and internal defects,
    /// are not.
    pub fn is_user_error(&self) -> bool {
        !matches!(
            self,
            ConfigError::ReadFailed { .. } | ConfigError::Internal(_)
        )
    }
}

fn location(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(":{line}:{column}"),
        (Some(line), None) => format!(":{line}"),
        _ => String::new(),
    }
}

fn section_suffix(section: &str) -> String {
    if section.is_empty() {
        " at the top level".to_owned()
    } else {
        format!(" in `{section}`")
    }
}

fn prefix_suffix(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!(" starting with {prefix}")
    }
}
