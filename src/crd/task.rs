use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One unit of work (a plan, an apply …) for a pool's agents.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "agentdeck.dev",
    version = "v1alpha1",
    kind = "AgentTask",
    plural = "agenttasks",
    singular = "agenttask",
    shortname = "atask",
    shortname = "at",
    shortname = "atasks",
    category = "agentdeck",
    namespaced,
    status = "AgentTaskStatus",
    derive = "PartialEq",
    doc = "A unit of infrastructure work (plan, apply …) run once by an agent of its pool.",
    selectable = ".spec.pool",
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.pool"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Agent", type_ = "string", json_path = ".status.agent"),
    printcolumn(name = "Attempts", type_ = "integer", json_path = ".status.attempts"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AgentTaskSpec {
    /// Name of the AgentPool (same namespace) whose agents run this task.
    #[schemars(length(min = 1, max = 253))]
    pub pool: String,
    /// A named operation (`plan`, `apply`, `destroy` …) for agents that know it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// Program to run; with `args`, like a container's command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Arguments to `command`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Runner image (job mode); default from the pool's taskDefaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Environment of the task's process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// The task is stopped and `Failed` after this long running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604800))]
    pub timeout_seconds: Option<i64>,
    /// Set to stop the task (SIGTERM, then SIGKILL) and mark it `Cancelled`.
    #[serde(default)]
    pub cancel: bool,
}

/// Where a task is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaskPhase {
    /// Waiting for an agent.
    #[default]
    Pending,
    /// Job mode: a Job exists, its pod has not started the task yet.
    Scheduled,
    /// An agent is running it.
    Running,
    /// Finished with exit code 0.
    Succeeded,
    /// Finished with a non-zero exit code, timed out, or ran out of attempts.
    Failed,
    /// Could not be run (scheduling timeout, bad spec, image pull failure).
    Errored,
    /// Stopped on request.
    Cancelled,
}

impl TaskPhase {
    /// Every phase, in life order.
    pub const ALL: [TaskPhase; 7] = [
        TaskPhase::Pending,
        TaskPhase::Scheduled,
        TaskPhase::Running,
        TaskPhase::Succeeded,
        TaskPhase::Failed,
        TaskPhase::Errored,
        TaskPhase::Cancelled,
    ];

    /// The name as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskPhase::Pending => "Pending",
            TaskPhase::Scheduled => "Scheduled",
            TaskPhase::Running => "Running",
            TaskPhase::Succeeded => "Succeeded",
            TaskPhase::Failed => "Failed",
            TaskPhase::Errored => "Errored",
            TaskPhase::Cancelled => "Cancelled",
        }
    }

    /// No further transition happens from this phase.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TaskPhase::Succeeded | TaskPhase::Failed | TaskPhase::Errored | TaskPhase::Cancelled
        )
    }
}

/// What happened to a task so far.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentTaskStatus {
    /// Pending → Scheduled → Running → Succeeded | Failed | Errored | Cancelled.
    #[serde(default)]
    pub phase: TaskPhase,
    /// Pod name of the agent that claimed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Times it was claimed (requeues add one).
    #[serde(default)]
    pub attempts: i32,
    /// Job running it (job mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// When an agent claimed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<Time>,
    /// When its process started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it reached a final phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Last sign of life from the agent running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Time>,
    /// Exit code of the task's process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// One line on why it is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Invalid, Claimed, Requeued …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl AgentTask {
    /// Phase, counting a task with no status yet as Pending.
    pub fn phase(&self) -> TaskPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }
}
