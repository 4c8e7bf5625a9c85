//! The command line: one binary, four faces (console, daemon, agent, sandbox)
//! plus one-shot commands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::telemetry::LogFormat;

/// Operations console, controller, agent runtime and API sandbox for
/// self-hosted deployment-agent pools on Kubernetes.
#[derive(Debug, Parser)]
#[command(
    name = "agentdeck",
    version,
    about,
    long_about = "Operations console, controller, agent runtime and API sandbox for self-hosted \
                  deployment-agent pools on Kubernetes.\n\n\
                  With no subcommand agentdeck opens the console (which embeds the controller).",
    after_help = "Modes:\n  agentdeck            the terminal console (embeds the controller)\n  \
                  agentdeck --daemon   the controller, headless (serves /healthz, /readyz, /metrics)\n  \
                  agentdeck --demo     a sandbox cluster with live agents, and the console on it\n  \
                  agentdeck sandbox    a Kubernetes-API-compatible server on loopback\n  \
                  agentdeck agent      the agent runtime inside a pool's pods"
)]
pub struct Cli {
    /// Run the controller headless instead of opening the console.
    #[arg(long, conflicts_with_all = ["demo"])]
    pub daemon: bool,
    /// Start an in-process sandbox with live agents and open the console on it.
    #[arg(long)]
    pub demo: bool,
    /// Console: watch only — the embedded controller never writes and no
    /// action keys are bound (for production contexts).
    #[arg(long, conflicts_with = "daemon")]
    pub read_only: bool,
    /// Console: every namespace the user can list (the embedded controller
    /// then only watches).
    #[arg(long, short = 'A', conflicts_with = "daemon")]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Flags every mode understands.
#[derive(Debug, Args, Clone, Default)]
pub struct GlobalArgs {
    /// kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace to work in (default: the context's namespace).
    #[arg(long, short = 'n', global = true, value_name = "NS")]
    pub namespace: Option<String>,
    /// Configuration file (default: search ./agentdeck.yaml, $XDG_CONFIG_HOME/agentdeck/, /etc/agentdeck/).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Console colour theme (default, light, high-contrast …).
    #[arg(long, global = true, value_name = "NAME")]
    pub theme: Option<String>,
    /// Log line format.
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Also write rolling log files to this directory.
    #[arg(long, global = true, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
}

/// One-shot commands and the non-console faces.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve a Kubernetes-API-compatible sandbox cluster on loopback.
    Sandbox(SandboxArgs),
    /// Run the agent runtime (inside a pool's pod).
    Agent(AgentArgs),
    /// Zip a namespace's (or one pool's) logs, events and objects into a redacted support bundle.
    Bundle(BundleArgs),
    /// Launch a debug pod: a copy of an agent pod, cleaned up after a TTL.
    Debug(DebugArgs),
    /// Set a pool's replica bounds (or pin its replicas).
    Scale(ScaleArgs),
    /// Drain a pool: no new work, scale to zero once agents are idle (--undo to resume).
    Drain(DrainArgs),
    /// Switch a pool's agents' debug logs on or off, live, without a restart.
    DebugLogs(DebugLogsArgs),
    /// Print the AgentPool and AgentTask CustomResourceDefinitions as YAML.
    Crds,
    /// Print everything needed to install the daemon (and given pools) as YAML for `kubectl apply -f -`.
    Manifests(ManifestsArgs),
    /// Print a shell completion script.
    Completions {
        /// Shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `agentdeck sandbox`.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Write a kubeconfig pointing at the sandbox here.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
}

/// `agentdeck agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Job mode: run only this AgentTask (the worker container of its Job).
    #[arg(long, value_name = "NAME")]
    pub task: Option<String>,
    /// Exit after one task.
    #[arg(long)]
    pub single_run: bool,
}

/// `agentdeck bundle`.
#[derive(Debug, Args)]
pub struct BundleArgs {
    /// Only this pool's objects and pods.
    #[arg(long)]
    pub pool: Option<String>,
    /// Zip file to write (default: agentdeck-bundle-<namespace>-<time>.zip).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Profiles of `kubectl debug`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DebugProfile {
    /// Default privileges.
    General,
    /// Pod Security baseline.
    Baseline,
    /// Pod Security restricted.
    Restricted,
    /// NET_ADMIN and NET_RAW.
    Netadmin,
    /// Privileged.
    Sysadmin,
}

/// `agentdeck debug`.
#[derive(Debug, Args)]
pub struct DebugArgs {
    /// Agent pod to copy.
    pub pod: String,
    /// Security profile of the debug container.
    #[arg(long, value_enum, default_value = "general")]
    pub profile: DebugProfile,
    /// Delete the debug pod after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub ttl_seconds: u64,
    /// Image of the debug container (default: the agent's image).
    #[arg(long)]
    pub image: Option<String>,
}

/// `agentdeck scale`.
#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Pool to scale.
    pub pool: String,
    /// New minReplicas.
    #[arg(long)]
    pub min: Option<i32>,
    /// New maxReplicas.
    #[arg(long)]
    pub max: Option<i32>,
    /// Pin the pool: min = max = N.
    #[arg(long, conflicts_with_all = ["min", "max"])]
    pub replicas: Option<i32>,
}

/// `agentdeck drain`.
#[derive(Debug, Args)]
pub struct DrainArgs {
    /// Pool to drain.
    pub pool: String,
    /// Resume the pool instead.
    #[arg(long)]
    pub undo: bool,
}

/// `on` / `off`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Switch {
    /// Turn on.
    On,
    /// Turn off.
    Off,
}

/// `agentdeck debug-logs`.
#[derive(Debug, Args)]
pub struct DebugLogsArgs {
    /// Pool whose agents to switch.
    pub pool: String,
    /// Debug logs on or off.
    #[arg(value_enum)]
    pub state: Switch,
}

/// `agentdeck manifests`.
#[derive(Debug, Args)]
pub struct ManifestsArgs {
    /// Directory (or single file) of AgentPool YAML to include.
    #[arg(long, value_name = "PATH")]
    pub pools: Option<PathBuf>,
    /// Image of the daemon (default: the release image of this version).
    #[arg(long)]
    pub image: Option<String>,
    /// Namespace the daemon is installed in (default: config controllerNamespace).
    #[arg(long)]
    pub install_namespace: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_work_after_a_subcommand() {
        let cli = Cli::try_parse_from(["agentdeck", "crds", "-n", "ops", "--context", "kind"])
            .expect("parses");
        assert_eq!(cli.global.namespace.as_deref(), Some("ops"));
        assert_eq!(cli.global.context.as_deref(), Some("kind"));
        assert!(matches!(cli.command, Some(Command::Crds)));
    }

    #[test]
    fn daemon_and_demo_cannot_be_combined() {
        assert!(Cli::try_parse_from(["agentdeck", "--daemon", "--demo"]).is_err());
    }

    #[test]
    fn an_unknown_log_format_is_rejected_with_the_valid_ones() {
        let err = Cli::try_parse_from(["agentdeck", "--log-format", "xml"]).expect_err("rejected");
        let msg = err.to_string();
        assert!(
            msg.contains("plain") && msg.contains("json") && msg.contains("dev"),
            "{msg}"
        );
    }

    #[test]
    fn scale_replicas_conflicts_with_min_and_max() {
        assert!(
            Cli::try_parse_from(["agentdeck", "scale", "p", "--replicas", "2", "--min", "1"])
                .is_err()
        );
        let cli = Cli::try_parse_from(["agentdeck", "scale", "p", "--min", "1", "--max", "4"])
            .expect("parses");
        assert!(matches!(
            cli.command,
            Some(Command::Scale(ScaleArgs {
                min: Some(1),
                max: Some(4),
                ..
            }))
        ));
    }
}
