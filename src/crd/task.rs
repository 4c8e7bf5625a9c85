use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition type on a Pending task no agent claimed within the pool's
/// `taskDefaults.acquireTimeoutSeconds`.
pub const UNCLAIMED: &str = "Unclaimed";
/// Condition of a task whose `spec.pool` names no AgentPool (yet).
pub const POOL_NOT_FOUND: &str = "PoolNotFound";

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
    /// Earlier runs that ended before an operator retried the task, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<AttemptRecord>,
    /// The last lines the task printed (at most [`OUTPUT_TAIL_LINES`] lines
    /// and [`OUTPUT_TAIL_BYTES`] bytes, Secret values the agent was handed
    /// redacted), as agents before `output` wrote them, and as an agent
    /// whose Role cannot create ConfigMaps still does. Read, never written
    /// otherwise (see [`super::output`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// Where the last lines the task printed are kept, and a summary: a
    /// ConfigMap of the task's own (see [`super::output`]), in place of
    /// `outputTail`, which every watcher of every task paid for. Boxed:
    /// every cached task has room for it inline (48 bytes of 100,000
    /// tasks' stores), and only finished tasks have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Box<super::output::TaskOutput>>,
}

/// Lines kept in `status.outputTail`.
pub const OUTPUT_TAIL_LINES: usize = 40;
/// Bytes kept in `status.outputTail`.
pub const OUTPUT_TAIL_BYTES: usize = 4096;

/// How one run of a task ended, kept when the task is retried.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    /// Attempts counted when this run ended.
    #[serde(default)]
    pub attempts: i32,
    /// Final phase of that run.
    pub phase: TaskPhase,
    /// Agent (pod) that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Exit code of its process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Who asked for the retry that closed this record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub retried_by: String,
}

impl AgentTask {
    /// Phase, counting a task with no status yet as Pending.
    pub fn phase(&self) -> TaskPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }
}

/// `Time` from a jiff timestamp (k8s-openapi's `Time` wraps one).
pub fn k8s_time(t: jiff::Timestamp) -> Time {
    Time(t)
}

impl AgentTaskStatus {
    /// The status an agent writes to claim a Pending task: Running on
    /// `agent`, one more attempt. Sent with the resourceVersion read, so a
    /// 409 means another agent won.
    ///
    /// A claim answers every "nobody runs this" condition: `Unclaimed` and
    /// `PoolNotFound` that were True turn False (`Claimed`), so no stale
    /// warning outlives it whatever the controller gets to see.
    pub fn claimed(&self, agent: &str, now: jiff::Timestamp) -> AgentTaskStatus {
        let mut conditions = self.conditions.clone();
        for c in &mut conditions {
            let waiting = [UNCLAIMED, POOL_NOT_FOUND];
            if waiting.contains(&c.type_.as_str()) && c.status == "True" {
                c.status = "False".to_owned();
                c.reason = "Claimed".to_owned();
                c.message = format!("claimed by {agent}");
                c.last_transition_time = k8s_time(now);
            }
        }
        AgentTaskStatus {
            conditions,
            phase: TaskPhase::Running,
            agent: Some(agent.to_owned()),
            attempts: self.attempts + 1,
            claimed_at: Some(k8s_time(now)),
            started_at: None,
            finished_at: None,
            last_heartbeat: Some(k8s_time(now)),
            exit_code: None,
            message: Some(format!("claimed by {agent}")),
            ..self.clone()
        }
    }

    /// The status of a task taken back from its agent (agent gone, offline
    /// or stopping): Pending again for another claim, or `Failed` once it
    /// has had `max_attempts` attempts. `attempts` already counts the
    /// attempt that ended (claims add one), so the next claim is attempt
    /// `attempts + 1`.
    pub fn requeued(
        &self,
        reason: &str,
        max_attempts: i32,
        now: jiff::Timestamp,
    ) -> AgentTaskStatus {
        if self.attempts >= max_attempts {
            return AgentTaskStatus {
                phase: TaskPhase::Failed,
                finished_at: Some(k8s_time(now)),
                message: Some(format!(
                    "{reason}; gave up after {} of {max_attempts} attempts",
                    self.attempts
                )),
                ..self.clone()
            };
        }
        AgentTaskStatus {
            phase: TaskPhase::Pending,
            agent: None,
            claimed_at: None,
            started_at: None,
            last_heartbeat: None,
            exit_code: None,
            message: Some(format!(
                "{reason}; requeued (attempt {} of {max_attempts} next)",
                self.attempts + 1
            )),
            ..self.clone()
        }
    }
}

impl AgentTaskStatus {
    /// The status of a finished task an operator runs again: Pending, with
    /// the ended run appended to `history` and `attempts` kept (the next
    /// claim counts one more), so nothing of what happened is lost.
    pub fn retried(&self, by: &str, now: jiff::Timestamp) -> AgentTaskStatus {
        let mut history = self.history.clone();
        history.push(AttemptRecord {
            attempts: self.attempts,
            phase: self.phase,
            agent: self.agent.clone(),
            exit_code: self.exit_code,
            message: self.message.clone(),
            started_at: self.started_at.clone().or(self.claimed_at.clone()),
            finished_at: self.finished_at.clone(),
            retried_by: by.to_owned(),
        });
        AgentTaskStatus {
            phase: TaskPhase::Pending,
            agent: None,
            attempts: self.attempts,
            job: None,
            claimed_at: None,
            started_at: None,
            finished_at: None,
            last_heartbeat: None,
            exit_code: None,
            message: Some(format!("retried by {by} at {now}")),
            conditions: Vec::new(),
            history,
            output_tail: None,
            output: None,
        }
    }
}

#[cfg(test)]
mod transition_tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:00:00Z".parse().expect("ts")
    }

    #[test]
    fn a_claim_clears_a_stale_unclaimed_or_pool_not_found_condition() {
        let cond = |type_: &str, status: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "Was".into(),
            message: "before".into(),
            observed_generation: None,
            last_transition_time: Time("2025-01-01T00:00:00Z".parse().expect("ts")),
        };
        let before = AgentTaskStatus {
            conditions: vec![
                cond("Unclaimed", "True"),
                cond("PoolNotFound", "True"),
                cond("Other", "True"),
            ],
            ..AgentTaskStatus::default()
        };
        let after = before.claimed("agent-0", now());
        let seen: Vec<(&str, &str, &str)> = after
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("Unclaimed", "False", "Claimed"),
                ("PoolNotFound", "False", "Claimed"),
                ("Other", "True", "Was"),
            ]
        );
        assert_eq!(after.conditions[0].last_transition_time, Time(now()));
    }

    #[test]
    fn a_claim_runs_the_task_on_the_agent_and_counts_an_attempt() {
        let s = AgentTaskStatus::default().claimed("agent-0", now());
        assert_eq!(s.phase, TaskPhase::Running);
        assert_eq!(s.agent.as_deref(), Some("agent-0"));
        assert_eq!(s.attempts, 1);
        assert_eq!(s.claimed_at, Some(Time(now())));
    }

    #[test]
    fn a_requeued_task_is_pending_again_until_attempts_run_out() {
        let running = AgentTaskStatus::default().claimed("agent-0", now());
        let back = running.requeued("agent agent-0 went offline", 3, now());
        assert_eq!(back.phase, TaskPhase::Pending);
        assert_eq!(back.agent, None);
        assert_eq!(back.attempts, 1);
        assert!(
            back.message
                .as_deref()
                .unwrap_or("")
                .contains("attempt 2 of 3")
        );
        let third = back
            .claimed("agent-1", now())
            .requeued("x", 3, now())
            .claimed("agent-2", now());
        assert_eq!(third.attempts, 3);
        let failed = third.requeued("agent agent-2 went offline", 3, now());
        assert_eq!(failed.phase, TaskPhase::Failed);
        assert!(
            failed
                .message
                .as_deref()
                .unwrap_or("")
                .contains("gave up after 3 of 3")
        );
    }

    #[test]
    fn a_retried_task_is_pending_again_with_its_earlier_run_in_history() {
        let failed = AgentTaskStatus {
            phase: TaskPhase::Failed,
            exit_code: Some(2),
            finished_at: Some(Time(now())),
            message: Some("exit 2".into()),
            ..AgentTaskStatus::default().claimed("agent-0", now())
        };
        let again = failed.retried("alice", now());
        assert_eq!(again.phase, TaskPhase::Pending);
        assert_eq!(again.attempts, 1, "attempts kept");
        assert_eq!((again.agent.clone(), again.exit_code), (None, None));
        assert_eq!(again.history.len(), 1);
        let h = &again.history[0];
        assert_eq!(
            (
                h.phase,
                h.exit_code,
                h.agent.as_deref(),
                h.retried_by.as_str()
            ),
            (TaskPhase::Failed, Some(2), Some("agent-0"), "alice")
        );
        let twice = AgentTaskStatus {
            phase: TaskPhase::Errored,
            ..again.claimed("agent-1", now())
        }
        .retried("bob", now());
        assert_eq!(twice.attempts, 2);
        assert_eq!(
            twice.history.iter().map(|h| h.phase).collect::<Vec<_>>(),
            [TaskPhase::Failed, TaskPhase::Errored]
        );
    }
}
