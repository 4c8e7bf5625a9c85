//! The command line: one binary, four faces (console, daemon, agent, sandbox)
//! plus one-shot commands.

use std::path::PathBuf;
use std::time::Duration;

use crate::units::{format_duration, parse_duration, parse_positive_duration};

use clap::{ArgAction, ArgGroup, Args, Parser, Subcommand, ValueEnum};

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
                  agentdeck --bundle B.zip  the console on a support bundle, read-only\n  \
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
    /// Console: open a support bundle (`agentdeck bundle`, `b`) as it was
    /// when taken: the same views and keys, read-only, ages as of then.
    #[arg(long, value_name = "FILE.zip", conflicts_with_all = ["daemon", "demo", "all_contexts", "all_namespaces"])]
    pub bundle: Option<PathBuf>,
    /// Console: watch only — the embedded controller never writes and no
    /// action keys are bound (for production contexts).
    #[arg(long, conflicts_with = "daemon")]
    pub read_only: bool,
    /// Console: every namespace the user can list (the embedded controller
    /// then only watches).
    #[arg(long, short = 'A', conflicts_with = "daemon")]
    pub all_namespaces: bool,
    /// Console: every context of the kubeconfig, each with its rows, its
    /// controller and its connection state.
    #[arg(long, conflicts_with_all = ["daemon", "demo"])]
    pub all_contexts: bool,
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// Checks what the parser cannot: only the console opens several
    /// contexts. Sets [`GlobalArgs::context`] to the one context of a
    /// command.
    pub fn settle(mut self) -> Result<Cli, String> {
        let console = self.command.is_none() && !self.daemon;
        if self.global.contexts.len() > 1 && !console {
            return Err(format!(
                "--context was given {} times ({}); only the console (agentdeck with no subcommand) opens several contexts",
                self.global.contexts.len(),
                self.global.contexts.join(", ")
            ));
        }
        if self.demo && !self.global.contexts.is_empty() {
            return Err(
                "--demo makes its own cluster and context; --context is for a kubeconfig's".into(),
            );
        }
        if self.bundle.is_some() && (!self.global.contexts.is_empty() || self.command.is_some()) {
            return Err(
                "--bundle opens the console on a bundle, which names its own context; it takes no --context or subcommand (agentdeck sandbox --from-bundle serves one to kubectl)".into(),
            );
        }
        if self.all_contexts && !self.global.contexts.is_empty() {
            return Err("--all-contexts opens every context of the kubeconfig; --context names some: give one or the other".into());
        }
        self.global.context = self.global.contexts.first().cloned();
        Ok(self)
    }
}

/// Flags every mode understands.
#[derive(Debug, Args, Clone, Default)]
pub struct GlobalArgs {
    /// kubeconfig context to use (default: the current context); the
    /// console takes several (`--context a --context b`).
    #[arg(long = "context", global = true, value_name = "NAME", action = ArgAction::Append)]
    pub contexts: Vec<String>,
    /// The context of a command: the one `--context` (see [`Cli::settle`]).
    #[arg(skip)]
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
    /// Zip a namespace's (or one pool's) logs, events and objects into a redacted support bundle
    /// (`bundle redact` hides more in one already taken).
    Bundle(BundleArgs),
    /// Launch a debug pod: a copy of an agent pod, cleaned up after a TTL.
    Debug(DebugArgs),
    /// Set a pool's replica bounds, or hold its replicas for a while (previewed, confirmed, audited).
    Scale(ScaleArgs),
    /// Drain a pool or one agent: finish the current task, claim nothing new (--undo to resume).
    Drain(DrainArgs),
    /// Switch debug logs of a pool's agents (or one agent) on or off, live, without a restart.
    DebugLogs(DebugLogsArgs),
    /// Cancel or retry AgentTasks by name or label selector.
    Task(TaskArgs),
    /// Each pool's health verdict (OK, Degraded, Stuck), replicas, queue and hold.
    Status(StatusArgs),
    /// The actions taken from this machine, from the local audit file.
    Audit(AuditArgs),
    /// What this identity (or, with --as, another) may do with agentdeck here: one row per feature, and for each "no" the missing verb and resource.
    Access(AccessArgs),
    /// Print the AgentPool and AgentTask CustomResourceDefinitions as YAML.
    Crds,
    /// Print everything needed to install the daemon (and given pools) as YAML for `kubectl apply -f -`.
    Manifests(ManifestsArgs),
    /// Print the alert rules (a Prometheus rule file) or the Grafana dashboard.
    Monitoring(MonitoringArgs),
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
    /// Serve this support bundle, read-only, instead of an empty cluster:
    /// `kubectl get`, `describe`, `logs` (and `--previous`) as when it was
    /// taken; writes answer 405.
    #[arg(long, value_name = "FILE.zip")]
    pub from_bundle: Option<PathBuf>,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Write a kubeconfig pointing at the sandbox here.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// Name of the kubeconfig's cluster, user and context: two sandboxes of
    /// different names merge into one kubeconfig (`KUBECONFIG=a:b`), for
    /// `agentdeck --context a --context b`.
    #[arg(long, value_name = "NAME", default_value = "agentdeck-sandbox")]
    pub name: String,
    /// Compact the watch history this often, as kube-apiserver's
    /// --etcd-compaction-interval: watches and lists from before the
    /// previous compaction get 410 Gone (0 = never).
    #[arg(long, value_name = "DUR", default_value = "5m", value_parser = parse_duration,
          env = "AGENTDECK_SANDBOX_COMPACTION_INTERVAL")]
    pub compaction_interval: Duration,
    /// Delete Events this long after their last write, as kube-apiserver's
    /// --event-ttl (0 = never).
    #[arg(long, value_name = "DUR", default_value = "1h", value_parser = parse_duration,
          env = "AGENTDECK_SANDBOX_EVENT_TTL")]
    pub event_ttl: Duration,
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
#[command(args_conflicts_with_subcommands = true)]
pub struct BundleArgs {
    /// Work on a bundle already taken instead of taking one.
    #[command(subcommand)]
    pub command: Option<BundleCommand>,
    /// Only this pool's objects and pods.
    #[arg(long)]
    pub pool: Option<String>,
    /// Zip file to write (default: agentdeck-bundle-<namespace>[-<pool>]-<time>.zip).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Only log lines newer than this (30s, 15m, 2h, 1d).
    #[arg(long, value_name = "DUR", allow_hyphen_values = true,
          value_parser = duration_within(SECOND, 365 * DAY))]
    pub since: Option<std::time::Duration>,
    /// Keep at most this much of each log, its end (bytes; K, M, G suffixes).
    #[arg(long, value_name = "N", default_value = "10M", value_parser = parse_bytes)]
    pub max_bytes_per_log: u64,
    /// Write secrets as they are (redaction is on by default).
    #[arg(long)]
    pub no_redact: bool,
    /// Stop collecting after this long and write what was collected.
    #[arg(long, value_name = "DUR", default_value = "5m", allow_hyphen_values = true,
          value_parser = duration_within(SECOND, DAY))]
    pub deadline: std::time::Duration,
    /// Timeout of each API request (and of each read of a log stream).
    #[arg(long, value_name = "DUR", default_value = "15s", allow_hyphen_values = true,
          value_parser = duration_within(SECOND, HOUR))]
    pub request_timeout: std::time::Duration,
    /// Requests in flight at once.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
    /// The controller's base URL, to add its /healthz and /metrics (e.g. http://127.0.0.1:8080).
    #[arg(long, value_name = "URL")]
    pub controller_url: Option<String>,
}

/// What `agentdeck bundle` does to a bundle already taken.
#[derive(Debug, Subcommand)]
pub enum BundleCommand {
    /// Re-redact a bundle: keep the rules already applied and hide more (literal values, patterns)
    /// in a new zip; redactions.json records the pass.
    Redact(BundleRedactArgs),
}

/// `agentdeck bundle redact`.
#[derive(Debug, Args)]
pub struct BundleRedactArgs {
    /// The bundle to read (never written to).
    #[arg(value_name = "IN.zip")]
    pub input: PathBuf,
    /// The bundle to write; not the input (nor a link to it).
    #[arg(long, short = 'o', value_name = "OUT.zip")]
    pub output: PathBuf,
    /// Values to hide (rule `literal`), one per line: a trailing newline and
    /// CR are stripped, empty and blank lines ignored, other spaces kept;
    /// at least 6 bytes each; ASCII letters match in either case.
    /// Repeatable.
    #[arg(long = "literal-file", value_name = "FILE")]
    pub literal_files: Vec<PathBuf>,
    /// A regular expression to hide (rule `regex`; Rust regex syntax,
    /// matched within a line, case-sensitive unless it starts with (?i)).
    /// Repeatable.
    #[arg(long = "regex", value_name = "RE", allow_hyphen_values = true,
          value_parser = parse_regex)]
    pub regexes: Vec<regex::bytes::Regex>,
}

/// A `--regex`, compiled (so that a bad one is refused before anything is
/// read).
pub fn parse_regex(s: &str) -> Result<regex::bytes::Regex, String> {
    if s.is_empty() {
        return Err("an empty pattern matches nothing worth hiding".into());
    }
    regex::bytes::Regex::new(s).map_err(|e| {
        format!("not a regular expression in Rust's syntax (https://docs.rs/regex/#syntax): {e}")
    })
}

/// Profiles of `kubectl debug`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
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

/// How a debug container reaches the pod.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum DebugMode {
    /// A new pod copied from the target, its agent container waiting in a shell.
    #[default]
    Copy,
    /// An ephemeral container added to the running pod.
    Ephemeral,
}

/// `agentdeck debug`.
#[derive(Debug, Args)]
pub struct DebugArgs {
    /// Agent pod to debug.
    #[arg(required_unless_present_any = ["list", "cleanup"])]
    pub pod: Option<String>,
    /// Copy the pod (default) or add an ephemeral container to it.
    #[arg(long, value_enum, default_value = "copy")]
    pub mode: DebugMode,
    /// Security profile of the debug container.
    #[arg(long, value_enum, default_value = "general")]
    pub profile: DebugProfile,
    /// Delete the debug pod after this long (30m, 2h).
    #[arg(long, value_name = "DUR", default_value = "1h", allow_hyphen_values = true,
          value_parser = duration_within(MINUTE, 7 * DAY))]
    pub ttl: std::time::Duration,
    /// Image of the debug container (default: the agent's image).
    #[arg(long)]
    pub image: Option<String>,
    /// Open a shell in it once it runs.
    #[arg(long)]
    pub attach: bool,
    /// List debug pods and their expiry.
    #[arg(long, conflicts_with_all = ["pod", "cleanup", "attach"])]
    pub list: bool,
    /// Delete debug pods now (all of them, or those of POD).
    #[arg(long, conflicts_with_all = ["attach"])]
    pub cleanup: bool,
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// A duration flag's parser: [`parse_duration`] (which answers a negative
/// value as such), refusing values outside `min..=max`.
pub fn duration_within(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text: &str| {
        let d = parse_duration(text)?;
        if d < min || d > max {
            return Err(format!(
                "{text} is out of range; expected from {} to {}",
                format_duration(min),
                format_duration(max)
            ));
        }
        Ok(d)
    }
}

/// Parses a byte count: `1048576`, `512K`, `10M`, `1G` (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a size; use bytes or K, M, G (e.g. 512K, 10M)");
    let t = s.trim();
    let (digits, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some((i, _)) => {
            let unit = t[i..].trim_end_matches(['i', 'B', 'b']);
            let mult = match unit {
                "K" | "k" => 1 << 10,
                "M" | "m" => 1 << 20,
                "G" | "g" => 1 << 30,
                "" => 1,
                _ => return Err(bad()),
            };
            (&t[..i], mult)
        }
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let v = n.checked_mul(mult).ok_or_else(bad)?;
    if v == 0 {
        return Err(format!("{s:?}: the size must be at least 1 byte"));
    }
    Ok(v)
}

/// A replica count: 0 or more (negative numbers reach this parser, so
/// the message names the flag instead of clap mistaking `-1` for a flag).
fn replica_count(text: &str) -> Result<i32, String> {
    let wide: i128 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    let limit = crate::crd::MAX_REPLICAS;
    let n = i32::try_from(wide).map_err(|_| {
        format!("{text} is out of range; expected a whole number from 0 to {limit}")
    })?;
    if n < 0 {
        return Err(format!("{n} is negative; replica counts are 0 or more"));
    }
    if n > crate::crd::MAX_REPLICAS {
        return Err(format!(
            "{n} is above the limit of {}",
            crate::crd::MAX_REPLICAS
        ));
    }
    Ok(n)
}

/// Preview and confirmation, shared by every action.
#[derive(Debug, Args, Clone, Copy, Default)]
pub struct ConfirmArgs {
    /// Print the change (the API's server-side dry run) and its impact; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Apply without asking for confirmation (for scripts).
    #[arg(long, short = 'y', conflicts_with = "dry_run")]
    pub yes: bool,
}

/// `agentdeck scale`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("change").required(true).multiple(true).args(["min", "max", "replicas", "clear"])))]
pub struct ScaleArgs {
    /// Pool to scale.
    pub pool: String,
    /// New minReplicas.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = replica_count)]
    pub min: Option<i32>,
    /// New maxReplicas.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = replica_count)]
    pub max: Option<i32>,
    /// Hold the pool at N replicas: the autoscaler keeps N until the hold ends or is cleared.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = replica_count,
          conflicts_with_all = ["min", "max"])]
    pub replicas: Option<i32>,
    /// How long the hold lasts (90s, 30m, 2h, 1h30m); default: until --clear.
    #[arg(long = "for", value_name = "DURATION", allow_hyphen_values = true, value_parser = parse_positive_duration,
          conflicts_with_all = ["min", "max", "clear"])]
    pub hold_for: Option<Duration>,
    /// Remove the hold: the autoscaler decides again.
    #[arg(long, conflicts_with_all = ["min", "max", "replicas"])]
    pub clear: bool,
    /// With --replicas outside the pool's bounds: widen the bounds to fit (said in the preview).
    #[arg(long, conflicts_with_all = ["min", "max", "clear"])]
    pub force: bool,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
}

/// `agentdeck drain`.
#[derive(Debug, Args)]
pub struct DrainArgs {
    /// Pool to drain.
    pub pool: String,
    /// Drain only this agent (pod) of the pool.
    pub agent: Option<String>,
    /// Resume instead: claim work again.
    #[arg(long)]
    pub undo: bool,
    /// Show progress until every drained agent is idle.
    #[arg(long, conflicts_with_all = ["undo", "dry_run"])]
    pub wait: bool,
    /// With --wait: give up after this long (exit 1).
    #[arg(long, value_name = "DURATION", requires = "wait", allow_hyphen_values = true,
          value_parser = parse_positive_duration)]
    pub timeout: Option<Duration>,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
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
    /// `[AGENT] on|off`: one agent (pod) of the pool, or all of them.
    #[arg(value_name = "[AGENT] on|off", num_args = 1..=2, required = true)]
    pub rest: Vec<String>,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
}

impl DebugLogsArgs {
    /// The agent named, if any, and the switch; the error names what was typed.
    pub fn target(&self) -> Result<(Option<String>, Switch), String> {
        let (agent, state) = match self.rest.as_slice() {
            [state] => (None, state),
            [agent, state] => (Some(agent.clone()), state),
            _ => return Err("give [AGENT] on|off".into()),
        };
        let switch = Switch::from_str(state, true)
            .map_err(|_| format!("on|off: expected on or off, got {state:?}"))?;
        Ok((agent, switch))
    }
}

/// `agentdeck task`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    #[command(subcommand)]
    pub command: TaskCommand,
}

/// What to do with the tasks.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Stop tasks: Running ones get SIGTERM, then SIGKILL; Pending ones never start.
    Cancel(TaskSelectArgs),
    /// Run Failed or Errored tasks again; their earlier runs stay in status.history.
    Retry(TaskSelectArgs),
    /// Show a task: phase, agent, times, message and the last lines it
    /// printed, also after its pod is gone or the task itself was deleted
    /// by its pool's taskHistory (then from the pool's history record).
    Show(TaskShowArgs),
}

/// `agentdeck task show`.
#[derive(Debug, Args)]
pub struct TaskShowArgs {
    /// Task name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// Tasks by name and/or label selector.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).multiple(true).args(["names", "selector"])))]
pub struct TaskSelectArgs {
    /// Task names.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Label selector (e.g. `run=nightly`).
    #[arg(long, short = 'l', value_name = "SELECTOR")]
    pub selector: Option<String>,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
}

/// Output of `status`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum StatusOutput {
    /// More columns: mode, bounds, health, switches.
    Wide,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// `agentdeck status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this pool.
    pub pool: Option<String>,
    /// Output format (default: a table).
    #[arg(long, short = 'o', value_enum)]
    pub output: Option<StatusOutput>,
}

/// Output of `audit`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum AuditOutput {
    /// One JSON record per line, as stored.
    Json,
}

/// `agentdeck audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only actions within this long (90s, 30m, 2h, 1d).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = parse_positive_duration)]
    pub since: Option<Duration>,
    /// Output format (default: a table).
    #[arg(long, short = 'o', value_enum)]
    pub output: Option<AuditOutput>,
}

/// Output of `access`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum AccessOutput {
    /// JSON.
    Json,
}

/// `agentdeck access`.
#[derive(Debug, Args)]
pub struct AccessArgs {
    /// Answer for this user or service account (system:serviceaccount:NS:NAME)
    /// instead, through impersonation (as `kubectl --as`).
    #[arg(long = "as", value_name = "USER", value_parser = impersonated_user)]
    pub as_user: Option<String>,
    /// With --as: a group to act in as well (repeatable).
    #[arg(long = "as-group", value_name = "GROUP", requires = "as_user", action = ArgAction::Append)]
    pub as_groups: Vec<String>,
    /// Every namespace, as the console's -A watches them.
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
    /// Output format (default: a table).
    #[arg(long, short = 'o', value_enum)]
    pub output: Option<AccessOutput>,
}

/// `--as`: a user name, or a service account as
/// `system:serviceaccount:NAMESPACE:NAME`.
fn impersonated_user(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("expected a user name or system:serviceaccount:NAMESPACE:NAME".into());
    }
    if let Some(rest) = text.strip_prefix("system:serviceaccount:") {
        let ok = rest.split_once(':').is_some_and(|(ns, name)| {
            crate::config::check_namespace("namespace", ns).is_ok()
                && !name.is_empty()
                && !name.contains(':')
        });
        if !ok {
            return Err(format!(
                "{text:?} is not a service account; expected system:serviceaccount:NAMESPACE:NAME"
            ));
        }
    }
    Ok(text.to_owned())
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
    /// Grant the controller its rules in every namespace (one ClusterRole and
    /// ClusterRoleBinding) instead of a Role in each namespace it watches:
    /// for clusters whose watched namespaces change without re-rendering.
    #[arg(long)]
    pub cluster_wide_rbac: bool,
    /// Also the monitoring: a ServiceMonitor for the daemon, the alert
    /// rules as a PrometheusRule and the dashboard as a ConfigMap for
    /// Grafana's sidecar (needs the prometheus-operator CRDs).
    #[arg(long)]
    pub monitoring: bool,
    #[command(flatten)]
    pub thresholds: ThresholdArgs,
}

/// `agentdeck monitoring`.
#[derive(Debug, Args)]
pub struct MonitoringArgs {
    #[command(subcommand)]
    pub command: MonitoringCommand,
}

/// What `agentdeck monitoring` prints.
#[derive(Debug, Subcommand)]
pub enum MonitoringCommand {
    /// The alert rules, as a Prometheus rule file (`promtool check rules`).
    Rules(Box<ThresholdArgs>),
    /// The Grafana dashboard, as JSON.
    Dashboard,
}

/// The alert rules' thresholds; each overrides its `monitoring.*` key of
/// the configuration file.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Alert thresholds (monitoring.* keys)")]
pub struct ThresholdArgs {
    /// AgentdeckPoolStuck: how long a pool is Stuck first.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub stuck_for: Option<Duration>,
    /// AgentdeckQueueWaitHigh: the p95 wait of pools without spec.slo.queueWaitSeconds.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub queue_wait: Option<Duration>,
    /// AgentdeckQueueWaitHigh: how long the wait is over target first.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub queue_wait_for: Option<Duration>,
    /// AgentdeckAgentsStale: how long agents are stale or offline first.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub agents_stale_for: Option<Duration>,
    /// AgentdeckNoLeader: how long no daemon leads first.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub no_leader_for: Option<Duration>,
    /// AgentdeckWatchStale: how long a watch is not current first.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub watch_stale_for: Option<Duration>,
    /// AgentdeckWatchStale: failed restarts within the rate window that count as restarting.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub watch_failed_restarts: Option<u64>,
    /// AgentdeckTaskFailuresHigh: percent of ended tasks Failed or Errored.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u64).range(1..=100))]
    pub task_failure_percent: Option<u64>,
    /// AgentdeckTaskFailuresHigh: tasks that must have ended within the window.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub task_failure_min_tasks: Option<u64>,
    /// AgentdeckReconcileErrors: percent of reconciles failing.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u64).range(1..=100))]
    pub reconcile_error_percent: Option<u64>,
    /// AgentdeckTaskFailuresHigh, AgentdeckReconcileErrors: how long the ratio is high first.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub errors_for: Option<Duration>,
    /// AgentdeckPoolFrozenQueueGrowing: how long a frozen pool's queue grows first.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub frozen_queue_for: Option<Duration>,
    /// The window of the rates and ratios.
    #[arg(long, value_name = "DUR", value_parser = threshold)]
    pub rate_window: Option<Duration>,
    /// The runbook's URL; each alert links to its section.
    #[arg(long, value_name = "URL")]
    pub runbook_url: Option<String>,
}

impl ThresholdArgs {
    /// `monitoring` with the flags given put over its keys.
    pub fn apply(&self, monitoring: &mut crate::config::MonitoringConfig) {
        let secs = |d: Option<Duration>, key: &mut u64| {
            if let Some(d) = d {
                *key = d.as_secs();
            }
        };
        secs(self.stuck_for, &mut monitoring.stuck_for_seconds);
        secs(self.queue_wait, &mut monitoring.queue_wait_seconds);
        secs(self.queue_wait_for, &mut monitoring.queue_wait_for_seconds);
        secs(
            self.agents_stale_for,
            &mut monitoring.agents_stale_for_seconds,
        );
        secs(self.no_leader_for, &mut monitoring.no_leader_for_seconds);
        secs(
            self.watch_stale_for,
            &mut monitoring.watch_stale_for_seconds,
        );
        secs(self.errors_for, &mut monitoring.errors_for_seconds);
        secs(
            self.frozen_queue_for,
            &mut monitoring.frozen_queue_for_seconds,
        );
        secs(self.rate_window, &mut monitoring.rate_window_seconds);
        let count = |n: Option<u64>, key: &mut u64| {
            if let Some(n) = n {
                *key = n;
            }
        };
        count(
            self.watch_failed_restarts,
            &mut monitoring.watch_failed_restarts,
        );
        count(
            self.task_failure_percent,
            &mut monitoring.task_failure_percent,
        );
        count(
            self.task_failure_min_tasks,
            &mut monitoring.task_failure_min_tasks,
        );
        count(
            self.reconcile_error_percent,
            &mut monitoring.reconcile_error_percent,
        );
        if let Some(url) = &self.runbook_url {
            monitoring.runbook_url.clone_from(url);
        }
    }
}

/// A threshold: a whole number of seconds, 1 or more (`90s`, `5m`, `1h`).
fn threshold(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.as_secs() == 0 || d.subsec_nanos() != 0 {
        return Err(format!(
            "{text}: expected whole seconds, 1s or more (30s, 5m, 1h)"
        ));
    }
    Ok(d)
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
            .expect("parses")
            .settle()
            .expect("one context");
        assert_eq!(cli.global.namespace.as_deref(), Some("ops"));
        assert_eq!(cli.global.context.as_deref(), Some("kind"));
        assert!(matches!(cli.command, Some(Command::Crds)));
    }

    #[test]
    fn only_the_console_takes_several_contexts() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).expect("parses").settle();
        let cli = parse(&["agentdeck", "--context", "a", "--context", "b"]).expect("the console");
        assert_eq!(cli.global.contexts, ["a", "b"]);
        assert_eq!(cli.global.context.as_deref(), Some("a"));
        let e = parse(&["agentdeck", "status", "--context", "a", "--context", "b"])
            .expect_err("a command has one context");
        assert!(e.contains("only the console"), "{e}");
        assert!(parse(&["agentdeck", "--daemon", "--context", "a", "--context", "b"]).is_err());
        assert!(parse(&["agentdeck", "--all-contexts", "--context", "a"]).is_err());
        assert!(parse(&["agentdeck", "--demo", "--context", "a"]).is_err());
        assert!(parse(&["agentdeck", "--all-contexts"]).is_ok());
    }

    #[test]
    fn the_sandbox_forgets_as_its_flags_say() {
        let sandbox = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Some(Command::Sandbox(a))) => (a.compaction_interval, a.event_ttl),
            other => panic!("not a sandbox command: {other:?}"),
        };
        assert_eq!(
            sandbox(&["agentdeck", "sandbox"]),
            (Duration::from_secs(300), Duration::from_secs(3600))
        );
        assert_eq!(
            sandbox(&[
                "agentdeck",
                "sandbox",
                "--compaction-interval",
                "60s",
                "--event-ttl",
                "0"
            ]),
            (Duration::from_secs(60), Duration::ZERO)
        );
        assert!(
            Cli::try_parse_from(["agentdeck", "sandbox", "--compaction-interval", "soon"]).is_err()
        );
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
    fn durations_and_sizes_parse_and_bad_ones_name_the_valid_forms() {
        use std::time::Duration;
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        for bad in ["", "5x", "m", "1h30"] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains("30s, 15m"), "{e}");
        }
        assert_eq!(parse_bytes("10M"), Ok(10 << 20));
        assert_eq!(parse_bytes("512KiB"), Ok(512 << 10));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("3T").expect_err("T").contains("K, M, G"));
    }

    #[test]
    fn bundle_redact_takes_literal_files_and_patterns_and_refuses_a_bad_pattern() {
        let cli = Cli::try_parse_from([
            "agentdeck",
            "bundle",
            "redact",
            "b.zip",
            "-o",
            "c.zip",
            "--literal-file",
            "names.txt",
            "--literal-file",
            "more.txt",
            "--regex",
            r"order-\d+",
            "--regex",
            "-starts-with-a-dash",
        ])
        .expect("parses");
        let Some(Command::Bundle(BundleArgs {
            command: Some(BundleCommand::Redact(r)),
            ..
        })) = cli.command
        else {
            panic!("bundle redact expected");
        };
        assert_eq!(r.input, PathBuf::from("b.zip"));
        assert_eq!(r.output, PathBuf::from("c.zip"));
        assert_eq!(r.literal_files.len(), 2);
        assert_eq!(r.regexes.len(), 2);
        let e = Cli::try_parse_from([
            "agentdeck",
            "bundle",
            "redact",
            "b.zip",
            "-o",
            "c.zip",
            "--regex",
            "(unclosed",
        ])
        .expect_err("a bad pattern");
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(e.to_string().contains("not a regular expression"), "{e}");
        // -o is required; the bundle's own flags are not redact's.
        assert!(Cli::try_parse_from(["agentdeck", "bundle", "redact", "b.zip"]).is_err());
        assert!(
            Cli::try_parse_from([
                "agentdeck",
                "bundle",
                "--pool",
                "p",
                "redact",
                "b.zip",
                "-o",
                "c.zip"
            ])
            .is_err()
        );
    }

    #[test]
    fn bundle_and_debug_flags_parse() {
        let cli = Cli::try_parse_from([
            "agentdeck",
            "bundle",
            "-n",
            "ops",
            "--pool",
            "p",
            "-o",
            "b.zip",
            "--since",
            "1h",
            "--max-bytes-per-log",
            "1M",
            "--no-redact",
        ])
        .expect("parses");
        let Some(Command::Bundle(b)) = cli.command else {
            panic!("bundle expected");
        };
        assert_eq!(b.max_bytes_per_log, 1 << 20);
        assert!(b.no_redact);
        assert_eq!(b.since, Some(std::time::Duration::from_secs(3600)));
        assert!(b.command.is_none());
        assert!(Cli::try_parse_from(["agentdeck", "debug"]).is_err());
        assert!(Cli::try_parse_from(["agentdeck", "debug", "--list"]).is_ok());
        assert!(
            Cli::try_parse_from([
                "agentdeck",
                "debug",
                "p",
                "--mode",
                "ephemeral",
                "--ttl",
                "30m"
            ])
            .is_ok()
        );
        assert!(Cli::try_parse_from(["agentdeck", "debug", "--list", "--attach"]).is_err());
    }

    #[test]
    fn action_flags_that_cannot_go_together_are_refused_naming_them() {
        let cases: [(&[&str], &str); 12] = [
            (&["scale", "p"], "--min"),
            (&["scale", "p", "--min", "-1"], "--min"),
            (&["scale", "p", "--max=-3"], "-3 is negative"),
            (&["scale", "p", "--replicas", "x"], "--replicas"),
            (&["scale", "p", "--min", "1", "--for", "30m"], "--for"),
            (
                &["scale", "p", "--replicas", "2", "--for", "30x"],
                "is not a duration",
            ),
            (&["scale", "p", "--replicas", "2", "--clear"], "--clear"),
            (&["scale", "p", "--min", "1", "--force"], "--force"),
            (&["drain", "p", "--wait", "--dry-run"], "--dry-run"),
            (&["drain", "p", "--undo", "--wait"], "--wait"),
            (&["task", "retry"], "NAME"),
            (
                &["scale", "p", "--min", "1", "--yes", "--dry-run"],
                "--dry-run",
            ),
        ];
        for (args, needle) in cases {
            let mut argv = vec!["agentdeck"];
            argv.extend_from_slice(args);
            let err = Cli::try_parse_from(&argv).expect_err(&format!("{args:?} refused"));
            assert_eq!(err.exit_code(), 2, "{args:?}");
            assert!(err.to_string().contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn debug_logs_takes_an_optional_agent_before_on_or_off() {
        let parse = |args: &[&str]| {
            let mut argv = vec!["agentdeck", "debug-logs"];
            argv.extend_from_slice(args);
            match Cli::try_parse_from(&argv).expect("parses").command {
                Some(Command::DebugLogs(a)) => a.target(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(parse(&["p", "on"]), Ok((None, Switch::On)));
        assert_eq!(
            parse(&["p", "a-0", "off"]),
            Ok((Some("a-0".into()), Switch::Off))
        );
        assert_eq!(
            parse(&["p", "maybe"]),
            Err("on|off: expected on or off, got \"maybe\"".into())
        );
    }

    #[test]
    fn access_takes_a_user_or_a_service_account_to_act_as() {
        let parse = |args: &[&str]| {
            let mut argv = vec!["agentdeck", "access"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(&argv).map(|c| match c.command {
                Some(Command::Access(a)) => (a.as_user, a.as_groups, a.output),
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(
            parse(&["--as", "system:serviceaccount:team-a:viewer", "-o", "json"]).expect("parses"),
            (
                Some("system:serviceaccount:team-a:viewer".into()),
                Vec::new(),
                Some(AccessOutput::Json)
            )
        );
        assert_eq!(
            parse(&["--as", "jane", "--as-group", "ops", "--as-group", "dev"])
                .expect("parses")
                .1,
            ["ops", "dev"]
        );
        for (bad, needle) in [
            (
                &["--as", "system:serviceaccount:team-a"][..],
                "NAMESPACE:NAME",
            ),
            (
                &["--as", "system:serviceaccount:Team_A:v"][..],
                "NAMESPACE:NAME",
            ),
            (&["--as", ""][..], "user name"),
            (&["--as-group", "ops"][..], "--as"),
        ] {
            let e = parse(bad).expect_err(&format!("{bad:?}"));
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(needle), "{bad:?}: {e}");
        }
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
