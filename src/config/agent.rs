//! `agentdeck-agent.yaml`: settings of the agent runtime in a pool's pods.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::load::{self, ConfigFile};
use super::validate::{self as check, InvalidField, quoted};
use super::{AGENT_CONFIG_FILE_NAME, AGENT_ENV_PREFIX, ConfigError, ConfigSources};
use crate::crd::StopMode;
use crate::telemetry::LogFormat;

/// Agent runtime configuration (`agentdeck-agent.yaml`).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct AgentConfig {
    /// File holding the token the agent authenticates with.
    pub token_file: PathBuf,
    /// URL of the IaC service the agent reports to; unset means none.
    pub service_url: Option<String>,
    /// Run one task and exit.
    pub single_run: bool,
    /// Names of environment variables passed on to the tasks the agent runs.
    pub env_forward_allowlist: Vec<String>,
    /// Volume shared between the worker and the runner container.
    pub shared_dir: PathBuf,
    /// Working directory of tasks.
    pub work_dir: PathBuf,
    /// Seconds between looks for Pending tasks.
    #[schemars(range(min = 1))]
    pub poll_interval_seconds: u64,
    /// Seconds between heartbeats on the running task.
    #[schemars(range(min = 1))]
    pub heartbeat_seconds: u64,
    /// Tasks run at once.
    #[schemars(range(min = 1))]
    pub concurrency: u32,
    /// Port of `/healthz`.
    #[schemars(range(min = 1))]
    pub health_port: u16,
    /// What the agent does with its task when asked to stop.
    pub stop_mode: StopMode,
    /// Seconds a draining agent may take to finish its task.
    pub drain_timeout_seconds: u64,
    /// Seconds a task gets between SIGTERM and SIGKILL.
    pub grace_shutdown_seconds: u64,
    /// Logging.
    pub log: AgentLogConfig,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            token_file: PathBuf::from("/var/run/agentdeck/token"),
            service_url: None,
            single_run: false,
            env_forward_allowlist: Vec::new(),
            shared_dir: PathBuf::from("/shared"),
            work_dir: PathBuf::from("/shared/work"),
            poll_interval_seconds: 30,
            heartbeat_seconds: 5,
            concurrency: 1,
            health_port: 8080,
            stop_mode: StopMode::Drain,
            drain_timeout_seconds: 3600,
            grace_shutdown_seconds: 60,
            log: AgentLogConfig::default(),
        }
    }
}

/// Logging of the agent runtime (to stderr; the pod's log).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct AgentLogConfig {
    /// Line format.
    pub format: LogFormat,
    /// Level or filter directives; `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for AgentLogConfig {
    fn default() -> Self {
        AgentLogConfig {
            format: LogFormat::default(),
            level: "info".to_owned(),
        }
    }
}

impl AgentConfig {
    /// Loads `agentdeck-agent.yaml` from the first place `sources` finds it
    /// (or the defaults), applies `AGENTDECK_AGENT_*` variables and
    /// validates. Returns the file used, if any.
    ///
    /// Variables that name no key are ignored; each is reported once on
    /// stderr (see [`AgentConfig::load_with_warnings`] to get them instead).
    pub fn load(sources: &ConfigSources) -> Result<(AgentConfig, Option<PathBuf>), ConfigError> {
        let (config, file, warnings) = Self::load_with_warnings(sources)?;
        for warning in warnings {
            eprintln!("agentdeck: warning: {warning}");
        }
        Ok((config, file))
    }

    /// As [`AgentConfig::load`], returning the warnings (ignored variables, each
    /// naming the closest valid one) instead of printing them.
    pub fn load_with_warnings(
        sources: &ConfigSources,
    ) -> Result<(AgentConfig, Option<PathBuf>, Vec<String>), ConfigError> {
        let loaded = load::load::<AgentConfig>(sources)?;
        Ok((loaded.config, loaded.file, loaded.warnings))
    }

    /// Every settable key and its variable, as `(key path, variable)`.
    pub fn env_vars() -> Vec<(String, String)> {
        load::env_vars::<AgentConfig>()
    }

    /// Range and consistency checks; [`AgentConfig::load`] runs them.
    pub fn validate(&self) -> Result<(), InvalidField> {
        for (field, path) in [
            ("tokenFile", &self.token_file),
            ("sharedDir", &self.shared_dir),
            ("workDir", &self.work_dir),
        ] {
            check::not_blank(field, &path.to_string_lossy())?;
        }
        if let Some(url) = &self.service_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(InvalidField::new(
                "serviceUrl",
                quoted(url),
                "an http:// or https:// URL, or null for none",
            ));
        }
        for (index, name) in self.env_forward_allowlist.iter().enumerate() {
            check::not_blank(&format!("envForwardAllowlist[{index}]"), name)?;
        }
        check::positive("pollIntervalSeconds", self.poll_interval_seconds)?;
        check::positive("heartbeatSeconds", self.heartbeat_seconds)?;
        check::positive("concurrency", u64::from(self.concurrency))?;
        check::port("healthPort", self.health_port)?;
        check::log_level("log.level", &self.log.level)?;
        Ok(())
    }

    /// Time between looks for Pending tasks.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_secs(self.poll_interval_seconds)
    }

    /// Time between heartbeats.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs(self.heartbeat_seconds)
    }

    /// Longest wait for a task to finish when draining.
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_secs(self.drain_timeout_seconds)
    }

    /// Time between SIGTERM and SIGKILL of a task.
    pub fn grace_shutdown(&self) -> Duration {
        Duration::from_secs(self.grace_shutdown_seconds)
    }
}

impl ConfigFile for AgentConfig {
    const FILE_NAME: &'static str = AGENT_CONFIG_FILE_NAME;
    const ENV_PREFIX: &'static str = AGENT_ENV_PREFIX;
    const FOREIGN_ENV_PREFIXES: &'static [&'static str] = &[];

    fn validate(&self) -> Result<(), InvalidField> {
        AgentConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CONFIG_FILE_NAME, Origin};
    use std::path::Path;

    const EXAMPLE: &str = include_str!("../../config/agentdeck-agent.yaml");

    fn load_with(yaml: Option<&str>, env: &[(&str, &str)]) -> Result<AgentConfig, ConfigError> {
        let dir = tempfile::tempdir().expect("temp dir");
        if let Some(yaml) = yaml {
            std::fs::write(dir.path().join(AGENT_CONFIG_FILE_NAME), yaml).expect("write");
        }
        let sources = ConfigSources {
            cwd: Some(dir.path().to_owned()),
            env: env
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            ..ConfigSources::none()
        };
        AgentConfig::load(&sources).map(|(config, _)| config)
    }

    fn invalid_field(yaml: &str) -> String {
        match load_with(Some(yaml), &[]) {
            Err(ConfigError::InvalidValue { field, .. }) => field,
            other => panic!("expected InvalidValue for {yaml:?}, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_documented_values() {
        let config = AgentConfig::default();
        assert_eq!(config.token_file, Path::new("/var/run/agentdeck/token"));
        assert_eq!(config.service_url, None);
        assert!(!config.single_run);
        assert!(config.env_forward_allowlist.is_empty());
        assert_eq!(config.shared_dir, Path::new("/shared"));
        assert_eq!(config.work_dir, Path::new("/shared/work"));
        assert_eq!(config.poll_interval(), Duration::from_secs(30));
        assert_eq!(config.heartbeat(), Duration::from_secs(5));
        assert_eq!(config.concurrency, 1);
        assert_eq!(config.health_port, 8080);
        assert_eq!(config.stop_mode, StopMode::Drain);
        assert_eq!(config.drain_timeout(), Duration::from_secs(3600));
        assert_eq!(config.grace_shutdown(), Duration::from_secs(60));
        assert_eq!(config.log.format, LogFormat::Plain);
        assert_eq!(config.log.level, "info");
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn the_agent_file_is_found_in_the_working_directory() {
        let config = load_with(Some("concurrency: 3\nsingleRun: true\n"), &[]).expect("loads");
        assert_eq!(config.concurrency, 3);
        assert!(config.single_run);
    }

    #[test]
    fn the_controller_file_is_not_mistaken_for_the_agent_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(CONFIG_FILE_NAME), "theme: light\n").expect("write");
        let sources = ConfigSources {
            cwd: Some(dir.path().to_owned()),
            ..ConfigSources::none()
        };
        let (config, file) = AgentConfig::load(&sources).expect("loads defaults");
        assert_eq!(file, None);
        assert_eq!(config, AgentConfig::default());
    }

    #[test]
    fn stop_modes_parse_from_their_kebab_case_names() {
        for (name, mode) in [
            ("drain", StopMode::Drain),
            ("grace-shutdown", StopMode::GraceShutdown),
            ("force-shutdown", StopMode::ForceShutdown),
        ] {
            let config = load_with(Some(&format!("stopMode: {name}")), &[]).expect(name);
            assert_eq!(config.stop_mode, mode);
        }
    }

    #[test]
    fn a_bad_stop_mode_lists_the_valid_modes() {
        let err = load_with(Some("stopMode: graceful\n"), &[]).expect_err("bad mode");
        let text = err.to_string();
        assert!(text.contains("stopMode = \"graceful\""), "{text}");
        assert!(
            text.contains("drain, grace-shutdown, force-shutdown"),
            "{text}"
        );
        assert!(err.is_user_error());
    }

    #[test]
    fn agent_variables_override_the_file() {
        let config = load_with(
            Some("concurrency: 3\n"),
            &[
                ("AGENTDECK_AGENT_CONCURRENCY", "4"),
                ("AGENTDECK_AGENT_STOP_MODE", "force-shutdown"),
                ("AGENTDECK_AGENT_SINGLE_RUN", "true"),
                (
                    "AGENTDECK_AGENT_ENV_FORWARD_ALLOWLIST",
                    "TF_VAR_region,AWS_REGION",
                ),
                ("AGENTDECK_AGENT_SERVICE_URL", "https://iac.example.com"),
                ("AGENTDECK_AGENT_LOG__LEVEL", "debug"),
            ],
        )
        .expect("loads");
        assert_eq!(config.concurrency, 4);
        assert_eq!(config.stop_mode, StopMode::ForceShutdown);
        assert!(config.single_run);
        assert_eq!(
            config.env_forward_allowlist,
            ["TF_VAR_region", "AWS_REGION"]
        );
        assert_eq!(
            config.service_url.as_deref(),
            Some("https://iac.example.com")
        );
        assert_eq!(config.log.level, "debug");
    }

    #[test]
    fn a_bad_stop_mode_variable_names_the_variable_and_the_valid_modes() {
        let err = load_with(None, &[("AGENTDECK_AGENT_STOP_MODE", "now")]).expect_err("bad");
        let ConfigError::InvalidValue {
            origin, expected, ..
        } = &err
        else {
            panic!("expected InvalidValue, got {err}");
        };
        assert_eq!(origin, &Origin::Env("AGENTDECK_AGENT_STOP_MODE".to_owned()));
        assert!(
            expected.contains("drain, grace-shutdown, force-shutdown"),
            "{expected}"
        );
    }

    #[test]
    fn controller_variables_are_not_agent_settings() {
        let config = load_with(
            None,
            &[
                ("AGENTDECK_THEME", "light"),
                ("AGENTDECK_AGENT_CONFIG", "/x"),
            ],
        )
        .expect("loads");
        assert_eq!(config, AgentConfig::default());
        let sources = ConfigSources {
            env: vec![("AGENTDECK_AGENT_CONCURENCY".into(), "2".into())],
            ..ConfigSources::none()
        };
        let (config, _, warnings) = AgentConfig::load_with_warnings(&sources).expect("loads");
        assert_eq!(config, AgentConfig::default());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("did you mean AGENTDECK_AGENT_CONCURRENCY?"),
            "{warnings:?}"
        );
    }

    #[test]
    fn service_links_of_services_named_agentdeck_agent_are_ignored_silently() {
        let sources = ConfigSources {
            env: vec![
                ("AGENTDECK_AGENT_X_SERVICE_HOST".into(), "10.0.0.3".into()),
                (
                    "AGENTDECK_AGENT_X_PORT".into(),
                    "tcp://10.0.0.3:8080".into(),
                ),
            ],
            ..ConfigSources::none()
        };
        let (_, _, warnings) = AgentConfig::load_with_warnings(&sources).expect("loads");
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn agent_validation_rules_name_the_field() {
        assert_eq!(
            invalid_field("pollIntervalSeconds: 0"),
            "pollIntervalSeconds"
        );
        assert_eq!(invalid_field("heartbeatSeconds: 0"), "heartbeatSeconds");
        assert_eq!(invalid_field("concurrency: 0"), "concurrency");
        assert_eq!(invalid_field("healthPort: 0"), "healthPort");
        assert_eq!(invalid_field("tokenFile: ''"), "tokenFile");
        assert_eq!(invalid_field("serviceUrl: iac.example.com"), "serviceUrl");
        assert_eq!(
            invalid_field("envForwardAllowlist: [A, '']"),
            "envForwardAllowlist[1]"
        );
        assert_eq!(invalid_field("log: {level: loud}"), "log.level");
        assert_eq!(
            invalid_field("drainTimeoutSeconds: -1"),
            "drainTimeoutSeconds"
        );
    }

    #[test]
    fn the_example_file_parses_to_exactly_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config")
            .join(AGENT_CONFIG_FILE_NAME);
        let sources = ConfigSources {
            explicit: Some(path),
            ..ConfigSources::none()
        };
        let (config, _) = AgentConfig::load(&sources).expect("example loads");
        assert_eq!(config, AgentConfig::default());
    }

    #[test]
    fn the_example_file_sets_and_documents_every_key() {
        for (key, var) in AgentConfig::env_vars() {
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
