use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// One pool of deployment agents and how its workload should look.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agentdeck.dev",
    version = "v1alpha1",
    kind = "AgentPool",
    plural = "agentpools",
    singular = "agentpool",
    shortname = "ap",
    category = "agentdeck",
    namespaced,
    status = "AgentPoolStatus",
    derive = "PartialEq",
    doc = "A pool of self-hosted deployment agents that agentdeck keeps running and scales on pending AgentTasks.",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.executionMode"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".status.desiredReplicas"
    ),
    printcolumn(name = "Min", type_ = "integer", json_path = ".spec.minReplicas"),
    printcolumn(name = "Max", type_ = "integer", json_path = ".spec.maxReplicas"),
    printcolumn(name = "Hold", type_ = "string", json_path = ".status.hold.summary"),
    printcolumn(
        name = "Pending",
        type_ = "integer",
        json_path = ".status.pendingTasks"
    ),
    printcolumn(
        name = "Running",
        type_ = "integer",
        json_path = ".status.runningTasks"
    ),
    printcolumn(name = "Frozen", type_ = "boolean", json_path = ".status.frozen"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.minReplicas <= self.maxReplicas").message("minReplicas must be less than or equal to maxReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct AgentPoolSpec {
    /// Agent container image (runs `agentdeck agent` or a compatible agent).
    pub image: String,
    /// `deployment`: long-running agents in one Deployment; `job`: one Job per task.
    #[serde(default)]
    pub execution_mode: ExecutionMode,
    /// Fewest agents kept running (0 allows scale to zero).
    #[serde(default)]
    #[schemars(range(min = 0, max = 10000))]
    pub min_replicas: i32,
    /// Most agents (deployment mode) or tasks in flight (job mode).
    #[serde(default = "default_max_replicas")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_replicas: i32,
    /// Replicas added per scale-up; omit to jump straight to what pending work needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub scale_up_step: Option<i32>,
    /// Tasks one agent runs at once; the autoscaler divides pending work by it.
    #[serde(default = "default_concurrency")]
    #[schemars(range(min = 1, max = 64))]
    pub concurrency: i32,
    /// Minimum time between scaling decisions, per direction.
    #[serde(default)]
    pub cooldown_seconds: CooldownSeconds,
    /// Scale down no lower than the most agents the work needed within this
    /// many seconds (the HorizontalPodAutoscaler's
    /// `behavior.scaleDown.stabilizationWindowSeconds`); 0 turns it off.
    /// Scale-up is never delayed by it.
    ///
    /// Default 300, the HPA's: a trickle (a 1–5 s task every 2 s) dips to
    /// zero work between tasks many times a minute, so a window must span
    /// many arrivals to see the pool's real peak (simulated for 11 minutes:
    /// 30 s still flaps, 13 changes; 60 s changes once; 120 s and 300 s
    /// never), and holds the pool at that peak instead of scaling it down
    /// into every dip and up again a second later. It is also the default
    /// `cooldownSeconds.down`, so a pool left idle shrinks about as late as
    /// it did without a window. At most 3600 (as the HPA), so a scale-to-zero
    /// pool always reaches zero within an hour of its last task. Deployment
    /// mode only (job mode runs one Job per task).
    #[serde(default = "default_scale_down_stabilization")]
    #[schemars(range(min = 0, max = 3600))]
    pub scale_down_stabilization_seconds: i64,
    /// Job mode: most task Jobs in flight at once (defaults to maxReplicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_in_flight: Option<i32>,
    /// Compute resources of the agent container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Service account the agent pods run as (default: `agentdeck-agent-<pool>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Extra environment for the agent container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Secret key holding the agent's service token, mounted as a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<SecretKeyRef>,
    /// URL of the platform service the agent talks to (`API_ENDPOINT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<String>,
    /// Names of agent environment variables that may reach a task's process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_forward_allowlist: Vec<String>,
    /// Partial pod template merged over the generated one with strategic-merge semantics
    /// (containers, env, volumes, volumeMounts, tolerations … merged by name/key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::crd::pool::free_form_object")]
    pub pod_template: Option<serde_json::Value>,
    /// Windows in which the autoscaler leaves the replica count alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freeze_schedules: Vec<FreezeSchedule>,
    /// Windows in which the pool's replica bounds are the window's own
    /// (warm agents in working hours, none at night). Where several are
    /// open, the highest minimum and the highest maximum apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_schedules: Vec<CapacitySchedule>,
    /// Debug logging on the agents, switched live without a restart.
    #[serde(default)]
    pub debug: bool,
    /// Stop handing out new work and scale to zero once the agents are idle.
    #[serde(default)]
    pub drain: bool,
    /// An operator's pin on the replica count (`agentdeck scale --replicas`),
    /// respected by the autoscaler until `until` passes or it is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<ReplicaHold>,
    /// Port the agents serve `/healthz` and `/metrics` on.
    #[serde(default = "default_health_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub health_port: i32,
    /// What an agent does with its current task when its pod is stopped.
    #[serde(default)]
    pub on_stop: StopMode,
    /// How long a stopping agent may take to finish its task (`onStop: drain`).
    #[serde(default = "default_drain_timeout")]
    #[schemars(range(min = 0, max = 86400))]
    pub drain_timeout_seconds: i64,
    /// Time a task gets between SIGTERM and SIGKILL when an agent stops.
    #[serde(default = "default_grace_shutdown")]
    #[schemars(range(min = 0, max = 3600))]
    pub grace_shutdown_seconds: i64,
    /// Deny agent and task pods egress to the cloud metadata service (169.254.169.254).
    #[serde(default)]
    pub restrict_metadata_service: bool,
    /// Create a prometheus-operator ServiceMonitor for the pool's agents.
    #[serde(default)]
    pub service_monitor: bool,
    /// HTTP(S) proxy settings passed to agents and tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxySettings>,
    /// Extra CA certificates trusted by agents and tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    /// Defaults for the tasks this pool runs.
    #[serde(default)]
    pub task_defaults: TaskDefaults,
    /// How long finished AgentTasks are kept (as a Job's TTL and a
    /// CronJob's history limits); older ones are deleted by the controller.
    #[serde(default)]
    pub task_history: TaskHistory,
    /// What the pool aims for, exported as metrics so that one alert rule
    /// serves pools with different aims (`agentdeck monitoring rules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<PoolSlo>,
}

/// A pool's service-level aims.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSlo {
    /// The p95 wait from a task's creation to its claim by an agent, in
    /// seconds; `AgentdeckQueueWaitHigh` fires above it (pools without
    /// one: the rule's default, `monitoring.queueWaitSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub queue_wait_seconds: Option<i64>,
}

/// Retention of finished AgentTasks (`Succeeded`, `Failed`, `Errored`,
/// `Cancelled`). A finished task is deleted once it ended longer than
/// `ttlSecondsAfterFinished` ago, or when more than the limit of its kind
/// ended after it. The defaults keep a day, and at most 200 succeeded and
/// 200 unsuccessful tasks per pool: a pool running a task a minute keeps
/// under 2 MiB of tasks in etcd instead of growing by 40,000 a month, and
/// an incident of the last day is still in `kubectl get atasks`. A deleted
/// task's summary and output tail stay readable (`agentdeck task show`,
/// the console and the bundle) in the pool's history ConfigMap.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskHistory {
    /// Seconds a finished task is kept after it ended.
    #[serde(default = "default_history_ttl")]
    #[schemars(range(min = 0, max = 31536000))]
    pub ttl_seconds_after_finished: i64,
    /// Succeeded tasks kept per pool, newest first.
    #[serde(default = "default_history_limit")]
    #[schemars(range(min = 0, max = 100000))]
    pub succeeded_limit: i32,
    /// Failed, Errored and Cancelled tasks kept per pool, newest first.
    #[serde(default = "default_history_limit")]
    #[schemars(range(min = 0, max = 100000))]
    pub failed_limit: i32,
}

fn default_history_ttl() -> i64 {
    86_400
}
fn default_history_limit() -> i32 {
    200
}

impl Default for TaskHistory {
    fn default() -> Self {
        TaskHistory {
            ttl_seconds_after_finished: default_history_ttl(),
            succeeded_limit: default_history_limit(),
            failed_limit: default_history_limit(),
        }
    }
}

fn default_max_replicas() -> i32 {
    1
}
fn default_concurrency() -> i32 {
    1
}
fn default_scale_down_stabilization() -> i64 {
    300
}
fn default_health_port() -> i32 {
    8080
}
fn default_drain_timeout() -> i64 {
    3600
}
fn default_grace_shutdown() -> i64 {
    60
}

/// An object of any shape, kept as written (the API server must not prune it).
pub(crate) fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// How a pool runs its agents.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionMode {
    /// Long-running agents in one Deployment that claim tasks themselves.
    #[default]
    Deployment,
    /// One Job (worker + runner containers) per task.
    Job,
}

impl ExecutionMode {
    /// The name as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Deployment => "deployment",
            ExecutionMode::Job => "job",
        }
    }
}

/// What an agent does with its task when asked to stop.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum StopMode {
    /// Finish the current task (up to the drain timeout), claim nothing new.
    #[default]
    Drain,
    /// SIGTERM the task, wait the grace period, requeue it.
    GraceShutdown,
    /// Kill the task at once and requeue it.
    ForceShutdown,
}

impl StopMode {
    /// The name as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            StopMode::Drain => "drain",
            StopMode::GraceShutdown => "grace-shutdown",
            StopMode::ForceShutdown => "force-shutdown",
        }
    }
}

/// Minimum seconds between two scaling decisions in each direction.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CooldownSeconds {
    /// After any scale, wait this long before scaling up again.
    #[serde(default)]
    #[schemars(range(min = 0, max = 86400))]
    pub up: i64,
    /// After any scale, wait this long before scaling down.
    #[serde(default = "default_cooldown_down")]
    #[schemars(range(min = 0, max = 86400))]
    pub down: i64,
}

fn default_cooldown_down() -> i64 {
    300
}

impl Default for CooldownSeconds {
    fn default() -> Self {
        CooldownSeconds {
            up: 0,
            down: default_cooldown_down(),
        }
    }
}

/// A recurring window in which the autoscaler does not change the replica count.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FreezeSchedule {
    /// Shown in the console and in the Frozen condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Start, `HH:MM` (24 h) in the window's time zone.
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub from: String,
    /// End, `HH:MM`; earlier than `from` means the window crosses midnight.
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub to: String,
    /// Days the window starts on, 0 = Sunday … 6 = Saturday; empty means every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(range(min = 0, max = 6)))]
    pub weekdays: Vec<i32>,
    /// IANA time zone (e.g. `Europe/Berlin`); default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// A recurring window whose replica bounds replace the pool's while it is open.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySchedule {
    /// Shown in scale reasons, Events, `agentdeck status` and the console.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Start, `HH:MM` (24 h) in the window's time zone.
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub from: String,
    /// End, `HH:MM`; earlier than `from` means the window crosses midnight.
    /// Must differ from `from`.
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub to: String,
    /// Days the window starts on, 0 = Sunday … 6 = Saturday; empty means every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(range(min = 0, max = 6)))]
    pub weekdays: Vec<i32>,
    /// IANA time zone (e.g. `Europe/Berlin`); default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Fewest agents while the window is open, in place of `spec.minReplicas`.
    #[schemars(range(min = 0, max = 10000))]
    pub min_replicas: i32,
    /// Most agents while the window is open, in place of `spec.maxReplicas`;
    /// omit to keep the pool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_replicas: Option<i32>,
}

impl CapacitySchedule {
    /// The window's times alone, in the shape freeze windows are read in.
    pub fn times(&self) -> FreezeSchedule {
        FreezeSchedule {
            name: self.name.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            weekdays: self.weekdays.clone(),
            timezone: self.timezone.clone(),
        }
    }
}

/// A key of a Secret in the pool's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key within the Secret.
    #[serde(default = "default_token_key")]
    pub key: String,
}

fn default_token_key() -> String {
    "token".to_string()
}

/// Proxy settings exported as `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxySettings {
    /// Proxy for http:// URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    /// Proxy for https:// URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
    /// Hosts reached directly, comma separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_proxy: Option<String>,
}

/// A CA bundle from a ConfigMap key, mounted and exported as `SSL_CERT_FILE`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaBundle {
    /// ConfigMap holding the PEM bundle.
    pub config_map_name: String,
    /// Key within the ConfigMap.
    #[serde(default = "default_ca_key")]
    pub key: String,
}

fn default_ca_key() -> String {
    "ca.crt".to_string()
}

/// Defaults for tasks run by the pool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskDefaults {
    /// Image of the runner container (the IaC toolchain) in job mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_image: Option<String>,
    /// A task not running this long after its Job was created is `Errored`.
    #[serde(default = "default_scheduling_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub scheduling_timeout_seconds: i64,
    /// A Pending task no agent claims within this long gets a warning condition.
    #[serde(default = "default_acquire_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub acquire_timeout_seconds: i64,
    /// Finished task Jobs are deleted this long after they end.
    #[serde(default = "default_ttl_after_finished")]
    #[schemars(range(min = 0, max = 604800))]
    pub ttl_seconds_after_finished: i32,
    /// Attempts before a task whose agent keeps disappearing is `Failed`.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 100))]
    pub max_attempts: i32,
    /// Compute resources of the runner container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

fn default_scheduling_timeout() -> i64 {
    300
}
fn default_acquire_timeout() -> i64 {
    600
}
fn default_ttl_after_finished() -> i32 {
    60
}
fn default_max_attempts() -> i32 {
    3
}

impl Default for TaskDefaults {
    fn default() -> Self {
        TaskDefaults {
            runner_image: None,
            scheduling_timeout_seconds: default_scheduling_timeout(),
            acquire_timeout_seconds: default_acquire_timeout(),
            ttl_seconds_after_finished: default_ttl_after_finished(),
            max_attempts: default_max_attempts(),
            resources: None,
        }
    }
}

/// An operator's pin on a pool's replica count.
///
/// Kept in the spec, not in an annotation: it is the operator's intent (like
/// `drain`), so it is schema-validated, shows in `kubectl get -o yaml` and
/// `kubectl explain`, bumps the generation, and any controller that leads
/// (or takes over later) carries it out. The status says whether it is in
/// force.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaHold {
    /// Replicas to keep, whatever the pending work (busy agents are never removed).
    #[schemars(range(min = 0, max = 10000))]
    pub replicas: i32,
    /// When the hold ends; absent means until it is cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
    /// Who set it (the kube user of the context).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub set_by: String,
    /// When it was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_at: Option<Time>,
}

impl ReplicaHold {
    /// In force at `now`: no end, or an end still ahead.
    pub fn active_at(&self, now: jiff::Timestamp) -> bool {
        self.until.as_ref().is_none_or(|u| u.0 > now)
    }

    /// `3 by alice until 2026-11-24T10:30:00Z` (or `… until cleared`).
    pub fn summary(&self) -> String {
        let by = if self.set_by.is_empty() {
            String::new()
        } else {
            format!(" by {}", self.set_by)
        };
        match &self.until {
            Some(u) => format!("{}{by} until {}", self.replicas, u.0),
            None => format!("{}{by} until cleared", self.replicas),
        }
    }
}

/// The hold in force, as the controller reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HoldStatus {
    /// Replicas held.
    pub replicas: i32,
    /// When it ends; absent means until cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
    /// Who set it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub set_by: String,
    /// One line for `kubectl get ap` and the console.
    #[serde(default)]
    pub summary: String,
}

impl HoldStatus {
    /// The status of `hold` when it is in force at `now`.
    pub fn of(hold: Option<&ReplicaHold>, now: jiff::Timestamp) -> Option<HoldStatus> {
        let hold = hold.filter(|h| h.active_at(now))?;
        Some(HoldStatus {
            replicas: hold.replicas,
            until: hold.until.clone(),
            set_by: hold.set_by.clone(),
            summary: hold.summary(),
        })
    }
}

/// The capacity windows as the controller reports them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityStatus {
    /// Names of the windows open now (their field path when unnamed).
    /// Written even when empty, and the bounds as `null` when no window is
    /// open, so the controller's merge patch of the status clears them.
    #[serde(default)]
    pub open: Vec<String>,
    /// The minimum in force while a window is open.
    #[serde(default)]
    pub min_replicas: Option<i32>,
    /// The maximum in force while a window is open.
    #[serde(default)]
    pub max_replicas: Option<i32>,
    /// One line: the open window and the next change
    /// (`office-hours: min 4 until 18:00, then 0`), or the next window to
    /// open (`none open; office-hours from Mon 09:00: min 4`).
    #[serde(default)]
    pub summary: String,
}

/// What the controller last saw of a pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentPoolStatus {
    /// Agent pods that exist.
    #[serde(default)]
    pub replicas: i32,
    /// Agent pods that are ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Replicas the autoscaler wants.
    #[serde(default)]
    pub desired_replicas: i32,
    /// Tasks waiting for an agent.
    #[serde(default)]
    pub pending_tasks: i32,
    /// Tasks being run.
    #[serde(default)]
    pub running_tasks: i32,
    /// Inside a freeze window.
    #[serde(default)]
    pub frozen: bool,
    /// Which window froze the pool and until when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen_reason: Option<String>,
    /// Draining: no new work is handed out.
    #[serde(default)]
    pub draining: bool,
    /// The operator's replica hold in force, if any (an expired one is absent).
    /// Written as `null` when there is none, so the controller's merge patch
    /// of the status removes an ended hold.
    #[serde(default)]
    pub hold: Option<HoldStatus>,
    /// Agents by health freshness.
    #[serde(default)]
    pub health: HealthCounts,
    /// When the replica count last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// Why the autoscaler chose the current desired count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_reason: Option<String>,
    /// The capacity windows open now, the bounds they set and the next
    /// change; absent for a pool without `capacitySchedules`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityStatus>,
    /// Ready, Invalid, Frozen, Draining, Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Agents of a pool by how recently they answered `/healthz` with activity.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct HealthCounts {
    /// Alive and responsive: answered its last probes, not unhealthy.
    #[serde(default)]
    pub fresh: i32,
    /// Probes unanswered past the stale threshold, answering unhealthy, or
    /// not probed yet.
    #[serde(default)]
    pub stale: i32,
    /// Not answering, or no activity, past the offline threshold.
    #[serde(default)]
    pub offline: i32,
}

impl AgentPool {
    /// Name of the pool's Deployment in deployment mode.
    pub fn deployment_name(&self) -> String {
        crate::crd::names::bounded_name("iac-agent-", &kube::ResourceExt::name_any(self))
    }
}
