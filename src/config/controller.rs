//! `agentdeck.yaml`: settings of the controller (`--daemon`) and the console.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::load::{self, ConfigFile};
use super::validate::{self as check, InvalidField, quoted};
use super::{AGENT_ENV_PREFIX, CONFIG_FILE_NAME, ConfigError, ConfigSources, ENV_PREFIX};
use crate::telemetry::LogFormat;

/// Controller and console configuration (`agentdeck.yaml`).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Config {
    /// Namespaces watched; empty means the current (or `--namespace`) one.
    pub namespaces: Vec<String>,
    /// Console: kube contexts opened together, as `--context a --context b`
    /// (empty: the one `--context` names, else the current one).
    pub contexts: Vec<String>,
    /// Namespace holding the leader Lease.
    pub controller_namespace: String,
    /// Seconds between full reconciles of every pool, on top of watch events.
    #[schemars(range(min = 1))]
    pub resync_interval_seconds: u64,
    /// Probing of the agents' `/healthz`.
    pub health_probe: HealthProbeConfig,
    /// The Lease that lets one controller lead.
    pub leader_election: LeaderElectionConfig,
    /// The daemon's `/healthz`, `/readyz` and `/metrics` server.
    pub server: ServerConfig,
    /// Requeueing tasks whose agent went offline.
    pub task_recovery: TaskRecoveryConfig,
    /// Logging.
    pub log: LogConfig,
    /// Console colour theme, by name.
    pub theme: String,
    /// Console key overrides: action name to key (`scale: s`).
    pub keymap: BTreeMap<String, String>,
    /// Time zone of freeze windows that do not name one.
    pub default_timezone: String,
    /// Console: a Running task is flagged in its row, and counted in its
    /// pool's verdict, once it has run this many seconds (0: never).
    pub long_running_task_seconds: u64,
    /// Thresholds of the alert rules `agentdeck monitoring rules` renders.
    pub monitoring: super::MonitoringConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespaces: Vec::new(),
            contexts: Vec::new(),
            controller_namespace: "agentdeck-system".to_owned(),
            resync_interval_seconds: 30,
            health_probe: HealthProbeConfig::default(),
            leader_election: LeaderElectionConfig::default(),
            server: ServerConfig::default(),
            task_recovery: TaskRecoveryConfig::default(),
            log: LogConfig::default(),
            theme: "default".to_owned(),
            keymap: BTreeMap::new(),
            default_timezone: "UTC".to_owned(),
            long_running_task_seconds: 3600,
            monitoring: super::MonitoringConfig::default(),
        }
    }
}

/// How the controller probes agents and classifies their freshness.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HealthProbeConfig {
    /// Seconds between two probes of the same agent.
    #[schemars(range(min = 1))]
    pub interval_seconds: u64,
    /// Seconds a probe may take before it counts as no answer.
    #[schemars(range(min = 1))]
    pub timeout_seconds: u64,
    /// Probes in flight at once.
    #[schemars(range(min = 1))]
    pub concurrency: u32,
    /// Seconds without activity after which an agent is stale; unset means
    /// twice the interval (see [`HealthProbeConfig::stale_after`]).
    #[schemars(range(min = 1))]
    pub stale_after_seconds: Option<u64>,
    /// Seconds without an answer or activity after which an agent is offline.
    #[schemars(range(min = 1))]
    pub offline_after_seconds: u64,
}

impl Default for HealthProbeConfig {
    fn default() -> Self {
        HealthProbeConfig {
            interval_seconds: 10,
            timeout_seconds: 2,
            concurrency: 32,
            stale_after_seconds: None,
            offline_after_seconds: 60,
        }
    }
}

impl HealthProbeConfig {
    /// Time between two probes of the same agent.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(self.interval_seconds)
    }

    /// Time a probe may take.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds)
    }

    /// `staleAfterSeconds`, or twice the interval when unset.
    pub fn stale_after_seconds(&self) -> u64 {
        self.stale_after_seconds
            .unwrap_or(self.interval_seconds.saturating_mul(2))
    }

    /// Inactivity after which an agent is stale.
    pub fn stale_after(&self) -> Duration {
        Duration::from_secs(self.stale_after_seconds())
    }

    /// Silence after which an agent is offline.
    pub fn offline_after(&self) -> Duration {
        Duration::from_secs(self.offline_after_seconds)
    }
}

/// The `coordination.k8s.io/v1` Lease one controller holds to lead.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LeaderElectionConfig {
    /// Compete for the Lease; off means always act as leader (one replica only).
    pub enabled: bool,
    /// Name of the Lease in `controllerNamespace`.
    pub lease_name: String,
    /// Seconds a Lease is valid without renewal.
    #[schemars(range(min = 1))]
    pub lease_duration_seconds: u64,
    /// Seconds the leader keeps trying to renew before it steps down.
    #[schemars(range(min = 1))]
    pub renew_deadline_seconds: u64,
    /// Seconds between attempts to acquire or renew.
    #[schemars(range(min = 1))]
    pub retry_period_seconds: u64,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            enabled: true,
            lease_name: "agentdeck-controller".to_owned(),
            lease_duration_seconds: 15,
            renew_deadline_seconds: 10,
            retry_period_seconds: 2,
        }
    }
}

impl LeaderElectionConfig {
    /// How long a Lease is valid without renewal.
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(self.lease_duration_seconds)
    }

    /// How long the leader tries to renew before stepping down.
    pub fn renew_deadline(&self) -> Duration {
        Duration::from_secs(self.renew_deadline_seconds)
    }

    /// Time between attempts to acquire or renew.
    pub fn retry_period(&self) -> Duration {
        Duration::from_secs(self.retry_period_seconds)
    }
}

/// The daemon's health and metrics server.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ServerConfig {
    /// IP address to bind; unset means all addresses in a cluster and
    /// 127.0.0.1 outside one.
    pub bind: Option<String>,
    /// TCP port.
    #[schemars(range(min = 1))]
    pub port: u16,
    /// `/healthz` answers 503 once the Kubernetes API has been unreachable
    /// (no answer at all, as opposed to an error answer) this many seconds.
    #[schemars(range(min = 1))]
    pub api_unreachable_seconds: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: None,
            port: 8080,
            api_unreachable_seconds: 30,
        }
    }
}

impl ServerConfig {
    /// `bind` as an address; `None` when unset (validation rejects values
    /// that do not parse).
    pub fn bind_ip(&self) -> Option<IpAddr> {
        self.bind.as_deref().and_then(|bind| bind.parse().ok())
    }

    /// How long the API may be unreachable before `/healthz` says so.
    pub fn api_unreachable_after(&self) -> Duration {
        Duration::from_secs(self.api_unreachable_seconds)
    }
}

/// Recovery of tasks whose agent went offline.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct TaskRecoveryConfig {
    /// Attempts a task gets before it is failed instead of requeued.
    #[schemars(range(min = 1))]
    pub max_attempts: u32,
}

impl Default for TaskRecoveryConfig {
    fn default() -> Self {
        TaskRecoveryConfig { max_attempts: 3 }
    }
}

/// Logging of the controller and the console.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LogConfig {
    /// Line format.
    pub format: LogFormat,
    /// Level or filter directives; `RUST_LOG` wins when set.
    pub level: String,
    /// Also write daily-rolling `agentdeck.log` files here.
    pub dir: Option<PathBuf>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::default(),
            level: "info".to_owned(),
            dir: None,
        }
    }
}

impl Config {
    /// Loads `agentdeck.yaml` from the first place `sources` finds it (or
    /// the defaults), applies `AGENTDECK_*` variables and validates. Returns
    /// the file used, if any.
    ///
    /// Variables that name no key are ignored; each is reported once on
    /// stderr (see [`Config::load_with_warnings`] to get them instead).
    pub fn load(sources: &ConfigSources) -> Result<(Config, Option<PathBuf>), ConfigError> {
        let (config, file, warnings) = Self::load_with_warnings(sources)?;
        for warning in warnings {
            eprintln!("agentdeck: warning: {warning}");
        }
        Ok((config, file))
    }

    /// As [`Config::load`], returning the warnings (ignored variables, each
    /// naming the closest valid one) instead of printing them.
    pub fn load_with_warnings(
        sources: &ConfigSources,
    ) -> Result<(Config, Option<PathBuf>, Vec<String>), ConfigError> {
        let loaded = load::load::<Config>(sources)?;
        Ok((loaded.config, loaded.file, loaded.warnings))
    }

    /// Every settable key and its variable, as `(key path, variable)`.
    pub fn env_vars() -> Vec<(String, String)> {
        load::env_vars::<Config>()
    }

    /// Range and consistency checks; [`Config::load`] runs them.
    pub fn validate(&self) -> Result<(), InvalidField> {
        for (index, context) in self.contexts.iter().enumerate() {
            if context.trim().is_empty() {
                return Err(InvalidField::new(
                    format!("contexts[{index}]"),
                    quoted(context),
                    "a kube context's name (see `kubectl config get-contexts`)",
                ));
            }
        }
        for (index, namespace) in self.namespaces.iter().enumerate() {
            check::namespace(&format!("namespaces[{index}]"), namespace)?;
        }
        check::namespace("controllerNamespace", &self.controller_namespace)?;
        check::positive("resyncIntervalSeconds", self.resync_interval_seconds)?;

        validate_probe(&self.health_probe)?;
        validate_lease(&self.leader_election)?;

        if let Some(bind) = &self.server.bind
            && bind.parse::<IpAddr>().is_err()
        {
            return Err(InvalidField::new(
                "server.bind",
                quoted(bind),
                "an IP address such as 0.0.0.0, 127.0.0.1 or ::, or null to choose automatically",
            ));
        }
        check::port("server.port", self.server.port)?;
        check::positive(
            "server.apiUnreachableSeconds",
            self.server.api_unreachable_seconds,
        )?;
        check::positive(
            "taskRecovery.maxAttempts",
            u64::from(self.task_recovery.max_attempts),
        )?;

        check::log_level("log.level", &self.log.level)?;
        if let Some(dir) = &self.log.dir
            && dir.as_os_str().is_empty()
        {
            return Err(InvalidField::new(
                "log.dir",
                "\"\"",
                "a directory path, or null to log to stderr only",
            ));
        }
        if !super::THEMES.contains(&self.theme.as_str()) {
            return Err(InvalidField::new(
                "theme",
                quoted(&self.theme),
                format!("one of {}", super::THEMES.join(", ")),
            ));
        }
        for (action, key) in &self.keymap {
            check::not_blank("keymap (action name)", action)?;
            check::not_blank(&format!("keymap.{action}"), key)?;
        }
        if jiff::tz::TimeZone::get(&self.default_timezone).is_err() {
            return Err(InvalidField::new(
                "defaultTimezone",
                quoted(&self.default_timezone),
                "a time zone name from the tz database, such as UTC or Europe/Berlin",
            ));
        }
        self.monitoring.validate()
    }

    /// Time between full reconciles.
    pub fn resync_interval(&self) -> Duration {
        Duration::from_secs(self.resync_interval_seconds)
    }

    /// How long a task runs before the console flags it (zero: never).
    pub fn long_running_task(&self) -> Duration {
        Duration::from_secs(self.long_running_task_seconds)
    }
}

impl ConfigFile for Config {
    const FILE_NAME: &'static str = CONFIG_FILE_NAME;
    const ENV_PREFIX: &'static str = ENV_PREFIX;
    const FOREIGN_ENV_PREFIXES: &'static [&'static str] = &[AGENT_ENV_PREFIX];

    fn validate(&self) -> Result<(), InvalidField> {
        Config::validate(self)
    }
}

/// The health prober's timings: positive, stale before offline.
fn validate_probe(probe: &HealthProbeConfig) -> Result<(), InvalidField> {
    check::positive("healthProbe.intervalSeconds", probe.interval_seconds)?;
    check::positive("healthProbe.timeoutSeconds", probe.timeout_seconds)?;
    check::positive("healthProbe.concurrency", u64::from(probe.concurrency))?;
    if let Some(stale) = probe.stale_after_seconds {
        check::positive("healthProbe.staleAfterSeconds", stale)?;
    }
    check::positive(
        "healthProbe.offlineAfterSeconds",
        probe.offline_after_seconds,
    )?;
    if probe.stale_after_seconds() >= probe.offline_after_seconds {
        let value = match probe.stale_after_seconds {
            Some(stale) => stale.to_string(),
            None => format!(
                "{} (unset: 2 × healthProbe.intervalSeconds)",
                probe.stale_after_seconds()
            ),
        };
        return Err(InvalidField::new(
            "healthProbe.staleAfterSeconds",
            value,
            format!(
                "less than healthProbe.offlineAfterSeconds ({})",
                probe.offline_after_seconds
            ),
        )
        .related_to("healthProbe.offlineAfterSeconds"));
    }
    Ok(())
}

/// The Lease's timings: positive, each shorter than the one it serves.
fn validate_lease(lease: &LeaderElectionConfig) -> Result<(), InvalidField> {
    check::object_name("leaderElection.leaseName", &lease.lease_name)?;
    check::positive(
        "leaderElection.leaseDurationSeconds",
        lease.lease_duration_seconds,
    )?;
    check::positive(
        "leaderElection.renewDeadlineSeconds",
        lease.renew_deadline_seconds,
    )?;
    check::positive(
        "leaderElection.retryPeriodSeconds",
        lease.retry_period_seconds,
    )?;
    check::less_than(
        "leaderElection.renewDeadlineSeconds",
        lease.renew_deadline_seconds,
        "leaderElection.leaseDurationSeconds",
        lease.lease_duration_seconds,
    )?;
    check::less_than(
        "leaderElection.retryPeriodSeconds",
        lease.retry_period_seconds,
        "leaderElection.renewDeadlineSeconds",
        lease.renew_deadline_seconds,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Origin;
    use std::path::Path;

    const EXAMPLE: &str = include_str!("../../config/agentdeck.yaml");

    /// Sources finding `yaml` (when given) as the explicit file, plus `env`.
    struct Fixture {
        _dir: tempfile::TempDir,
        sources: ConfigSources,
    }

    fn fixture(yaml: Option<&str>, env: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let explicit = yaml.map(|yaml| {
            let path = dir.path().join(CONFIG_FILE_NAME);
            std::fs::write(&path, yaml).expect("write config");
            path
        });
        let sources = ConfigSources {
            explicit,
            env: env
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            ..ConfigSources::none()
        };
        Fixture { _dir: dir, sources }
    }

    fn load_with(yaml: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::load(&fixture(yaml, env).sources).map(|(config, _)| config)
    }

    fn load_err(yaml: Option<&str>, env: &[(&str, &str)]) -> ConfigError {
        match load_with(yaml, env) {
            Ok(config) => panic!("expected an error, loaded {config:#?}"),
            Err(err) => err,
        }
    }

    /// The message of a validation failure caused by `yaml`.
    fn invalid(yaml: &str) -> (String, String) {
        match load_err(Some(yaml), &[]) {
            ConfigError::InvalidValue {
                field, expected, ..
            } => (field, expected),
            other => panic!("expected InvalidValue, got {other}"),
        }
    }

    #[test]
    fn defaults_match_the_documented_values() {
        let config = Config::default();
        assert!(config.namespaces.is_empty());
        assert_eq!(config.controller_namespace, "agentdeck-system");
        assert_eq!(config.resync_interval(), Duration::from_secs(30));
        assert_eq!(config.health_probe.interval(), Duration::from_secs(10));
        assert_eq!(config.health_probe.timeout(), Duration::from_secs(2));
        assert_eq!(config.health_probe.concurrency, 32);
        assert_eq!(config.health_probe.stale_after(), Duration::from_secs(20));
        assert_eq!(config.health_probe.offline_after(), Duration::from_secs(60));
        assert!(config.leader_election.enabled);
        assert_eq!(config.leader_election.lease_name, "agentdeck-controller");
        assert_eq!(
            config.leader_election.lease_duration(),
            Duration::from_secs(15)
        );
        assert_eq!(
            config.leader_election.renew_deadline(),
            Duration::from_secs(10)
        );
        assert_eq!(
            config.leader_election.retry_period(),
            Duration::from_secs(2)
        );
        assert_eq!(config.server.bind_ip(), None);
        assert_eq!(config.server.port, 8080);
        assert_eq!(config.server.api_unreachable_seconds, 30);
        assert_eq!(config.task_recovery.max_attempts, 3);
        assert_eq!(config.log.format, LogFormat::Plain);
        assert_eq!(config.log.level, "info");
        assert_eq!(config.log.dir, None);
        assert_eq!(config.theme, "default");
        assert!(config.keymap.is_empty());
        assert_eq!(config.default_timezone, "UTC");
        assert_eq!(config.long_running_task(), Duration::from_secs(3600));
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn no_file_and_no_variables_load_the_defaults() {
        let (config, file) = Config::load(&ConfigSources::none()).expect("defaults load");
        assert_eq!(config, Config::default());
        assert_eq!(file, None);
    }

    #[test]
    fn a_file_overrides_only_the_keys_it_sets() {
        let (config, file) = Config::load(
            &fixture(
                Some("healthProbe:\n  intervalSeconds: 5\ntheme: light\n"),
                &[],
            )
            .sources,
        )
        .map(|(config, file)| (config, file.is_some()))
        .expect("loads");
        assert!(file);
        assert_eq!(config.health_probe.interval_seconds, 5);
        assert_eq!(config.health_probe.timeout_seconds, 2);
        assert_eq!(config.theme, "light");
        assert_eq!(config.controller_namespace, "agentdeck-system");
    }

    #[test]
    fn stale_after_defaults_to_twice_the_interval_that_was_set() {
        let config = load_with(Some("healthProbe: {intervalSeconds: 7}"), &[]).expect("loads");
        assert_eq!(config.health_probe.stale_after_seconds(), 14);
        let config = load_with(Some("healthProbe: {staleAfterSeconds: 9}"), &[]).expect("loads");
        assert_eq!(config.health_probe.stale_after_seconds(), 9);
    }

    #[test]
    fn the_file_found_in_a_search_location_is_loaded_and_reported() {
        let dir = tempfile::tempdir().expect("temp dir");
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).expect("mkdir");
        std::fs::write(etc.join(CONFIG_FILE_NAME), "theme: high-contrast\n").expect("write");
        let sources = ConfigSources {
            cwd: Some(dir.path().join("cwd-without-file")),
            etc: Some(etc.clone()),
            ..ConfigSources::none()
        };
        let (config, file) = Config::load(&sources).expect("loads");
        assert_eq!(config.theme, "high-contrast");
        assert_eq!(file, Some(etc.join(CONFIG_FILE_NAME)));
    }

    #[test]
    fn the_agent_file_is_not_mistaken_for_the_controller_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("agentdeck-agent.yaml"), "concurrency: 2\n").expect("write");
        let sources = ConfigSources {
            cwd: Some(dir.path().to_owned()),
            ..ConfigSources::none()
        };
        let (config, file) = Config::load(&sources).expect("loads defaults");
        assert_eq!(file, None);
        assert_eq!(config, Config::default());
    }

    #[test]
    fn a_missing_explicit_file_is_a_user_error() {
        let sources = ConfigSources {
            explicit: Some(PathBuf::from("/nonexistent/agentdeck.yaml")),
            ..ConfigSources::none()
        };
        let err = Config::load(&sources).expect_err("missing file");
        assert!(err.is_user_error());
        assert!(
            err.to_string().contains("/nonexistent/agentdeck.yaml"),
            "{err}"
        );
        assert!(err.to_string().contains("--config"), "{err}");
    }

    #[test]
    fn empty_and_comment_only_files_mean_defaults() {
        for yaml in ["", "# nothing set\n", "---\n"] {
            assert_eq!(
                load_with(Some(yaml), &[]).expect(yaml),
                Config::default(),
                "{yaml:?}"
            );
        }
    }

    #[test]
    fn a_section_with_every_key_commented_out_means_defaults() {
        let yaml = "healthProbe:\n  # intervalSeconds: 5\nleaderElection:\ntheme: light\n";
        let config = load_with(Some(yaml), &[]).expect("loads");
        assert_eq!(config.health_probe, HealthProbeConfig::default());
        assert_eq!(config.leader_election, LeaderElectionConfig::default());
        assert_eq!(config.theme, "light");
    }

    #[test]
    fn env_overrides_a_nested_integer() {
        let config = load_with(
            Some("healthProbe: {intervalSeconds: 5}"),
            &[("AGENTDECK_HEALTH_PROBE__INTERVAL_SECONDS", "3")],
        )
        .expect("loads");
        assert_eq!(config.health_probe.interval_seconds, 3);
    }

    #[test]
    fn env_overrides_top_level_integer_bool_list_string_and_map() {
        let config = load_with(
            None,
            &[
                ("AGENTDECK_RESYNC_INTERVAL_SECONDS", "10"),
                ("AGENTDECK_LEADER_ELECTION__ENABLED", "false"),
                ("AGENTDECK_NAMESPACES", "team-a, team-b"),
                ("AGENTDECK_THEME", "high-contrast"),
                ("AGENTDECK_KEYMAP", "scale=S,drain=D"),
                ("AGENTDECK_LOG__FORMAT", "json"),
                ("AGENTDECK_LOG__DIR", "/var/log/agentdeck"),
                ("AGENTDECK_SERVER__BIND", "0.0.0.0"),
            ],
        )
        .expect("loads");
        assert_eq!(config.resync_interval_seconds, 10);
        assert!(!config.leader_election.enabled);
        assert_eq!(config.namespaces, ["team-a", "team-b"]);
        assert_eq!(config.theme, "high-contrast");
        assert_eq!(
            config.keymap,
            BTreeMap::from([
                ("drain".to_owned(), "D".to_owned()),
                ("scale".to_owned(), "S".to_owned())
            ])
        );
        assert_eq!(config.log.format, LogFormat::Json);
        assert_eq!(config.log.dir, Some(PathBuf::from("/var/log/agentdeck")));
        assert_eq!(config.server.bind_ip(), Some(IpAddr::from([0, 0, 0, 0])));
    }

    #[test]
    fn an_empty_env_value_unsets_a_nullable_key() {
        let config = load_with(
            Some("server: {bind: 127.0.0.1}\nnamespaces: [a]"),
            &[("AGENTDECK_SERVER__BIND", ""), ("AGENTDECK_NAMESPACES", "")],
        )
        .expect("loads");
        assert_eq!(config.server.bind, None);
        assert!(config.namespaces.is_empty());
    }

    #[test]
    fn a_non_numeric_env_value_names_the_variable_and_key() {
        let err = load_err(None, &[("AGENTDECK_HEALTH_PROBE__INTERVAL_SECONDS", "abc")]);
        let ConfigError::InvalidValue {
            origin,
            field,
            value,
            expected,
        } = &err
        else {
            panic!("expected InvalidValue, got {err}");
        };
        assert_eq!(
            origin,
            &Origin::Env("AGENTDECK_HEALTH_PROBE__INTERVAL_SECONDS".to_owned())
        );
        assert_eq!(field, "healthProbe.intervalSeconds");
        assert_eq!(value, "\"abc\"");
        assert!(expected.contains("whole number"), "{expected}");
        assert!(err.is_user_error());
        assert!(
            err.to_string()
                .contains("AGENTDECK_HEALTH_PROBE__INTERVAL_SECONDS"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_bool_or_enum_env_value_lists_what_is_valid() {
        let err = load_err(None, &[("AGENTDECK_LEADER_ELECTION__ENABLED", "maybe")]);
        assert!(err.to_string().contains("true or false"), "{err}");
        let err = load_err(None, &[("AGENTDECK_LOG__FORMAT", "xml")]);
        assert!(err.to_string().contains("one of plain, json, dev"), "{err}");
    }

    #[test]
    fn an_out_of_range_env_port_is_rejected() {
        let err = load_err(None, &[("AGENTDECK_SERVER__PORT", "70000")]);
        assert!(err.to_string().contains("from 1 to 65535"), "{err}");
    }

    /// Every value refused for one key gets the same description of what is
    /// valid, and that description holds: the bound it names is accepted.
    #[test]
    fn range_messages_name_exactly_what_is_accepted() {
        let cases: &[(&str, &[&str], &str, &str)] = &[
            (
                "AGENTDECK_SERVER__PORT",
                &["0", "-1", "70000"],
                "a whole number from 1 to 65535",
                "1",
            ),
            (
                "AGENTDECK_RESYNC_INTERVAL_SECONDS",
                &["0", "-5"],
                "a whole number, 1 or more",
                "1",
            ),
            (
                "AGENTDECK_HEALTH_PROBE__TIMEOUT_SECONDS",
                &["0", "-1"],
                "a whole number, 1 or more",
                "1",
            ),
            (
                "AGENTDECK_TASK_RECOVERY__MAX_ATTEMPTS",
                &["0", "-1"],
                "a whole number, 1 or more",
                "1",
            ),
        ];
        for (var, bad, expected, good) in cases {
            for value in *bad {
                let err = load_err(None, &[(var, value)]);
                assert!(err.is_user_error());
                assert!(
                    err.to_string().ends_with(&format!("expected {expected}")),
                    "{var}={value}: {err}"
                );
            }
            assert!(load_with(None, &[(var, good)]).is_ok(), "{var}={good}");
        }
        for (yaml, expected) in [
            ("server: {port: 0}", "a whole number from 1 to 65535"),
            ("server: {port: 70000}", "a whole number from 1 to 65535"),
            ("resyncIntervalSeconds: 0", "a whole number, 1 or more"),
            ("resyncIntervalSeconds: -3", "a whole number, 1 or more"),
        ] {
            let err = load_err(Some(yaml), &[]);
            assert!(
                err.to_string().ends_with(&format!("expected {expected}")),
                "{yaml}: {err}"
            );
        }
    }

    fn warnings_for(env: &[(&str, &str)]) -> Vec<String> {
        let (config, _, warnings) =
            Config::load_with_warnings(&fixture(None, env).sources).expect("loads");
        assert_eq!(
            config,
            Config::default(),
            "an ignored variable changed nothing"
        );
        warnings
    }

    #[test]
    fn an_unknown_env_variable_is_one_warning_naming_the_closest_valid_one() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "AGENTDECK_HEALTH_PROBE__INTERVAL",
                "5",
                "AGENTDECK_HEALTH_PROBE__INTERVAL_SECONDS",
            ),
            (
                "AGENTDECK_RESYNC_INTERVAL",
                "5",
                "AGENTDECK_RESYNC_INTERVAL_SECONDS",
            ),
            ("AGENTDECK_HEALTH_PROBE", "5", "AGENTDECK_HEALTH_PROBE__"),
            ("AGENTDECK_THEM", "light", "AGENTDECK_THEME"),
            // A typo that looks like a port, with a value no service link has.
            ("AGENTDECK_SERVER_PORT", "9090", "AGENTDECK_SERVER__PORT"),
        ];
        for (var, value, closest) in cases {
            let warnings = warnings_for(&[(var, value)]);
            assert_eq!(warnings.len(), 1, "{var}: {warnings:?}");
            assert!(warnings[0].contains(var), "{warnings:?}");
            assert!(
                warnings[0].contains(&format!("did you mean {closest}")),
                "{var}: {warnings:?}"
            );
        }
    }

    #[test]
    fn service_link_variables_are_never_an_error_nor_a_warning() {
        // What Kubernetes injects for a Service `agentdeck-controller` with
        // port `http` 8080, into every pod started after it.
        let links: &[(&str, &str)] = &[
            ("AGENTDECK_CONTROLLER_SERVICE_HOST", "10.96.0.5"),
            ("AGENTDECK_CONTROLLER_SERVICE_PORT", "8080"),
            ("AGENTDECK_CONTROLLER_SERVICE_PORT_HTTP", "8080"),
            ("AGENTDECK_CONTROLLER_PORT", "tcp://10.96.0.5:8080"),
            ("AGENTDECK_CONTROLLER_PORT_8080_TCP", "tcp://10.96.0.5:8080"),
            ("AGENTDECK_CONTROLLER_PORT_8080_TCP_PROTO", "tcp"),
            ("AGENTDECK_CONTROLLER_PORT_8080_TCP_PORT", "8080"),
            ("AGENTDECK_CONTROLLER_PORT_8080_TCP_ADDR", "10.96.0.5"),
            ("AGENTDECK_METRICS_PORT_9090_UDP", "udp://fd00::1:9090"),
            ("AGENTDECK_METRICS_SERVICE_HOST", "fd00::1"),
        ];
        assert_eq!(warnings_for(links), Vec::<String>::new());
    }

    #[test]
    fn a_typo_in_a_file_key_stays_an_error() {
        let err = load_err(Some("them: light\n"), &[]);
        assert!(matches!(err, ConfigError::UnknownKey { .. }), "{err}");
        assert!(err.is_user_error());
    }

    #[test]
    fn agent_and_reserved_variables_are_left_alone() {
        let config = load_with(
            None,
            &[
                ("AGENTDECK_AGENT_CONCURRENCY", "4"),
                ("AGENTDECK_AGENT_WHATEVER", "x"),
                ("AGENTDECK_CONFIG", "/somewhere.yaml"),
                ("AGENTDECK_NAMESPACE", "team-a"),
            ],
        )
        .expect("loads");
        assert_eq!(config, Config::default());
    }

    #[test]
    fn an_unknown_key_in_the_file_names_it_and_lists_the_valid_keys() {
        let err = load_err(Some("healthProbe:\n  intervalSecond: 5\n"), &[]);
        let ConfigError::UnknownKey {
            origin,
            key,
            section,
            valid,
        } = &err
        else {
            panic!("expected UnknownKey, got {err}");
        };
        assert!(matches!(origin, Origin::File(path) if path.ends_with(CONFIG_FILE_NAME)));
        assert_eq!(key, "healthProbe.intervalSecond");
        assert_eq!(section, "healthProbe");
        assert_eq!(
            valid,
            &[
                "concurrency",
                "intervalSeconds",
                "offlineAfterSeconds",
                "staleAfterSeconds",
                "timeoutSeconds",
            ]
        );
        assert!(err.is_user_error());
        let text = err.to_string();
        assert!(text.contains(CONFIG_FILE_NAME), "{text}");
        assert!(text.contains("`healthProbe.intervalSecond`"), "{text}");
    }

    #[test]
    fn an_unknown_top_level_key_lists_the_top_level_keys() {
        let err = load_err(Some("namespace: team-a\n"), &[]);
        let text = err.to_string();
        assert!(text.contains("unknown key `namespace`"), "{text}");
        assert!(text.contains("at the top level"), "{text}");
        assert!(text.contains("namespaces"), "{text}");
    }

    #[test]
    fn a_value_of_the_wrong_type_in_the_file_names_key_and_value() {
        let err = load_err(Some("healthProbe: {intervalSeconds: soon}\n"), &[]);
        let text = err.to_string();
        assert!(
            text.contains("healthProbe.intervalSeconds = \"soon\""),
            "{text}"
        );
        assert!(text.contains("whole number"), "{text}");
        let err = load_err(Some("namespaces: [ok, 3]\n"), &[]);
        assert!(err.to_string().contains("namespaces[1] = 3"), "{err}");
        let err = load_err(Some("healthProbe: 5\n"), &[]);
        assert!(err.to_string().contains("a mapping with the keys"), "{err}");
        let err = load_err(Some("- a\n- b\n"), &[]);
        assert!(err.to_string().contains("(top level)"), "{err}");
    }

    #[test]
    fn a_yaml_syntax_error_reports_the_line() {
        let err = load_err(
            Some("theme: light\nhealthProbe:\n  intervalSeconds: [5\n"),
            &[],
        );
        let ConfigError::Syntax { line, .. } = &err else {
            panic!("expected Syntax, got {err}");
        };
        assert_eq!(*line, Some(3), "{err}");
        assert!(err.is_user_error());
        assert!(
            err.to_string().contains(&format!("{CONFIG_FILE_NAME}:")),
            "{err}"
        );
    }

    #[test]
    fn zero_intervals_are_rejected() {
        for (yaml, field) in [
            ("resyncIntervalSeconds: 0", "resyncIntervalSeconds"),
            (
                "healthProbe: {intervalSeconds: 0}",
                "healthProbe.intervalSeconds",
            ),
            (
                "healthProbe: {timeoutSeconds: 0}",
                "healthProbe.timeoutSeconds",
            ),
            ("healthProbe: {concurrency: 0}", "healthProbe.concurrency"),
            (
                "healthProbe: {staleAfterSeconds: 0}",
                "healthProbe.staleAfterSeconds",
            ),
            (
                "leaderElection: {retryPeriodSeconds: 0}",
                "leaderElection.retryPeriodSeconds",
            ),
            ("taskRecovery: {maxAttempts: 0}", "taskRecovery.maxAttempts"),
        ] {
            let (got, expected) = invalid(yaml);
            assert_eq!(got, field, "{yaml}");
            assert!(expected.contains("1 or more"), "{yaml}: {expected}");
        }
    }

    #[test]
    fn stale_after_must_be_below_offline_after() {
        let (field, expected) =
            invalid("healthProbe: {staleAfterSeconds: 60, offlineAfterSeconds: 60}");
        assert_eq!(field, "healthProbe.staleAfterSeconds");
        assert!(
            expected.contains("healthProbe.offlineAfterSeconds (60)"),
            "{expected}"
        );
        let (field, _) = invalid("healthProbe: {intervalSeconds: 30, offlineAfterSeconds: 60}");
        assert_eq!(field, "healthProbe.staleAfterSeconds");
        assert!(load_with(Some("healthProbe: {staleAfterSeconds: 59}"), &[]).is_ok());
    }

    #[test]
    fn renew_deadline_must_be_below_lease_duration() {
        let (field, expected) = invalid("leaderElection: {renewDeadlineSeconds: 15}");
        assert_eq!(field, "leaderElection.renewDeadlineSeconds");
        assert!(
            expected.contains("leaderElection.leaseDurationSeconds (15)"),
            "{expected}"
        );
    }

    #[test]
    fn retry_period_must_be_below_renew_deadline() {
        let (field, expected) = invalid("leaderElection: {retryPeriodSeconds: 10}");
        assert_eq!(field, "leaderElection.retryPeriodSeconds");
        assert!(
            expected.contains("leaderElection.renewDeadlineSeconds (10)"),
            "{expected}"
        );
    }

    #[test]
    fn port_zero_and_bad_bind_addresses_are_rejected() {
        assert_eq!(invalid("server: {port: 0}").0, "server.port");
        assert_eq!(invalid("server: {bind: localhost}").0, "server.bind");
        let config = load_with(Some("server: {bind: '::1', port: 9090}"), &[]).expect("loads");
        assert_eq!(config.server.bind_ip(), Some("::1".parse().expect("ip")));
    }

    #[test]
    fn names_that_kubernetes_would_reject_are_rejected() {
        assert_eq!(invalid("namespaces: [ok, Not_OK]").0, "namespaces[1]");
        assert_eq!(invalid("controllerNamespace: ''").0, "controllerNamespace");
        assert_eq!(
            invalid("leaderElection: {leaseName: Lease}").0,
            "leaderElection.leaseName"
        );
    }

    #[test]
    fn unknown_log_levels_and_blank_strings_are_rejected() {
        assert_eq!(invalid("log: {level: verbose}").0, "log.level");
        assert!(load_with(Some("log: {level: 'info,kube=warn'}"), &[]).is_ok());
        assert_eq!(invalid("theme: ' '").0, "theme");
    }

    #[test]
    fn an_unknown_theme_is_refused_listing_the_valid_ones() {
        for name in crate::config::THEMES {
            assert!(
                load_with(None, &[("AGENTDECK_THEME", name)]).is_ok(),
                "{name}"
            );
        }
        let err = load_err(None, &[("AGENTDECK_THEME", "nosuchtheme")]);
        assert!(err.is_user_error());
        assert_eq!(
            err.to_string(),
            "environment variable AGENTDECK_THEME: theme = \"nosuchtheme\": \
             expected one of default, light, high-contrast"
        );
        let err = load_err(Some("theme: Dark\n"), &[]);
        assert!(err.to_string().contains("one of default, light"), "{err}");
        assert_eq!(invalid("keymap: {scale: ''}").0, "keymap.scale");
    }

    #[test]
    fn unknown_time_zones_are_rejected() {
        let (field, expected) = invalid("defaultTimezone: Mars/Olympus_Mons");
        assert_eq!(field, "defaultTimezone");
        assert!(expected.contains("tz database"), "{expected}");
        assert!(load_with(Some("defaultTimezone: utc"), &[]).is_ok());
    }

    #[test]
    fn a_validation_error_blames_the_variable_that_set_the_value() {
        let err = load_err(
            Some("theme: light\n"),
            &[("AGENTDECK_LEADER_ELECTION__RENEW_DEADLINE_SECONDS", "20")],
        );
        let ConfigError::InvalidValue { origin, .. } = &err else {
            panic!("expected InvalidValue, got {err}");
        };
        assert_eq!(
            origin,
            &Origin::Env("AGENTDECK_LEADER_ELECTION__RENEW_DEADLINE_SECONDS".to_owned())
        );
        let err = load_err(Some("leaderElection: {renewDeadlineSeconds: 20}\n"), &[]);
        assert!(
            matches!(
                &err,
                ConfigError::InvalidValue {
                    origin: Origin::File(_),
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn the_example_file_parses_to_exactly_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config")
            .join(CONFIG_FILE_NAME);
        let sources = ConfigSources {
            explicit: Some(path),
            ..ConfigSources::none()
        };
        let (config, _) = Config::load(&sources).expect("example loads");
        assert_eq!(config, Config::default());
    }

    #[test]
    fn the_example_file_sets_and_documents_every_key() {
        for (key, var) in Config::env_vars() {
            let leaf = key.rsplit('.').next().unwrap_or(&key);
            assert!(
                EXAMPLE
                    .lines()
                    .any(|line| line.trim_start().starts_with(&format!("{leaf}:"))),
                "example does not set {key}"
            );
            assert!(EXAMPLE.contains(&var), "example does not mention {var}");
        }
    }
}
