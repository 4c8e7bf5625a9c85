//! Every write the agent makes to an AgentTask's status: the claim (with
//! the resourceVersion read, so a 409 means another agent won), heartbeats,
//! and the final phase (only while the task is still this agent's), with
//! the run's output in a ConfigMap of the task's own
//! ([`crate::crd::output`]).

use std::sync::Arc;

use jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::state::AgentState;
use k8s_openapi::api::core::v1::ConfigMap;

use crate::crd::output::{self, TaskOutput};
use crate::crd::{AgentTask, AgentTaskStatus, TaskPhase, k8s_time};

/// Conflicts tolerated in a row on a final write before giving up.
const FINAL_WRITE_TRIES: usize = 8;

/// Writes task status as one agent.
#[derive(Clone)]
pub struct StatusWriter {
    api: Api<AgentTask>,
    me: String,
    state: Arc<AgentState>,
}

/// Whether `status`, as last seen, shows that the task is no longer this
/// agent's attempt `attempts`: another agent has it, or it was requeued or
/// finished behind our back. A view older than our claim (Pending with
/// fewer attempts) is not a loss.
pub fn ownership_lost(status: Option<&AgentTaskStatus>, me: &str, attempts: i32) -> bool {
    let Some(s) = status else { return false };
    if s.agent.as_deref().is_some_and(|a| a != me) {
        return true;
    }
    s.phase != TaskPhase::Running && s.attempts >= attempts
}

/// The status of a claim by `me`. A claim starts an attempt, except of a
/// Scheduled task: in job mode the controller counted the attempt when it
/// created the Job this worker runs in, and counting it again would make
/// every job-mode task look retried (and run out of attempts early).
pub fn claim_status(before: &AgentTaskStatus, me: &str, now: Timestamp) -> AgentTaskStatus {
    let mut status = before.claimed(me, now);
    if before.phase == TaskPhase::Scheduled {
        status.attempts = before.attempts.max(1);
    }
    status
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl StatusWriter {
    /// A writer for agent `me`.
    pub fn new(api: Api<AgentTask>, me: String, state: Arc<AgentState>) -> Self {
        StatusWriter { api, me, state }
    }

    /// This agent's name (its pod's).
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The task API.
    pub fn api(&self) -> &Api<AgentTask> {
        &self.api
    }

    fn note<T>(&self, r: &Result<T, kube::Error>) {
        match r {
            Ok(_) => self.state.api_ok(),
            Err(kube::Error::Api(_)) => self.state.api_ok(),
            Err(_) => self.state.api_failed(),
        }
    }

    /// Claims `task` as read: `Ok(None)` when another agent won (409) or it
    /// is gone.
    pub async fn claim(&self, task: &AgentTask) -> Result<Option<AgentTask>, kube::Error> {
        let mut claimed = task.clone();
        claimed.metadata.managed_fields = None;
        let before = task.status.clone().unwrap_or_default();
        claimed.status = Some(claim_status(&before, &self.me, Timestamp::now()));
        let name = task.metadata.name.clone().unwrap_or_default();
        let r = self
            .api
            .replace_status(&name, &PostParams::default(), &claimed)
            .await;
        self.note(&r);
        match r {
            Ok(t) => Ok(Some(t)),
            Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets `lastHeartbeat` (and `startedAt` when given). A merge patch of
    /// the status alone, so it never touches `spec.cancel`.
    pub async fn heartbeat(
        &self,
        name: &str,
        started: Option<Timestamp>,
    ) -> Result<AgentTask, kube::Error> {
        let now = k8s_time(Timestamp::now());
        let mut status = json!({ "lastHeartbeat": now });
        if let Some(t) = started {
            status["startedAt"] = json!(k8s_time(t));
        }
        let r = self
            .api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await;
        self.note(&r);
        r
    }

    /// Writes the status `next(current)` if the task is still this agent's
    /// attempt `attempts`, retrying on conflicts. Returns whether it was
    /// written (false: the task is gone or no longer ours).
    pub async fn finish(
        &self,
        name: &str,
        attempts: i32,
        output: Option<&str>,
        next: impl Fn(&AgentTaskStatus) -> AgentTaskStatus,
    ) -> Result<bool, kube::Error> {
        let mut tries = 0;
        // Where the output went, once written (a conflict on the status
        // does not write it again).
        let mut kept: Option<KeptOutput> = None;
        loop {
            tries += 1;
            let r = self.api.get_opt(name).await;
            self.note(&r);
            let Some(mut task) = r? else { return Ok(false) };
            let current = task.status.clone().unwrap_or_default();
            if ownership_lost(Some(&current), &self.me, attempts) || current.phase.is_finished() {
                tracing::warn!(task = name, "task is no longer this agent's; not reporting");
                return Ok(false);
            }
            let mut status = next(&current);
            if let Some(text) = output.filter(|_| status.phase.is_finished()) {
                if kept.is_none() {
                    kept = Some(self.keep_output(&task, attempts, text).await);
                }
                match &kept {
                    Some(KeptOutput::ConfigMap(summary)) => {
                        status.output = Some(Box::new(summary.clone()))
                    }
                    _ => status.output_tail = Some(text.to_owned()),
                }
            }
            task.status = Some(status);
            task.metadata.managed_fields = None;
            let r = self
                .api
                .replace_status(name, &PostParams::default(), &task)
                .await;
            self.note(&r);
            match r {
                Ok(_) => return Ok(true),
                Err(e) if is_conflict(&e) && tries < FINAL_WRITE_TRIES => continue,
                Err(e) if is_not_found(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes a finished run's output into the task's own ConfigMap (see
    /// [`crate::crd::output`]); when that cannot be done (a Role from
    /// before the change has no `create` on ConfigMaps, the API refused
    /// it), the output goes into the status as it did before, and why is
    /// logged.
    async fn keep_output(&self, task: &AgentTask, attempts: i32, text: &str) -> KeptOutput {
        let name = task.metadata.name.clone().unwrap_or_default();
        let Some(cm) = output::config_map(task, attempts, text) else {
            return KeptOutput::Status;
        };
        let cm_name = cm.metadata.name.clone().unwrap_or_default();
        let ns = self.api.namespace().unwrap_or("default").to_owned();
        let api: Api<ConfigMap> = Api::namespaced(self.api.clone().into_client(), &ns);
        let r = api.create(&PostParams::default(), &cm).await;
        self.note(&r);
        match r {
            Ok(_) => KeptOutput::ConfigMap(TaskOutput::of(cm_name, text)),
            // Most likely this agent's own, written before it restarted;
            // but the Role grants `create` alone (no agent reads or
            // changes another's ConfigMaps), so it cannot be checked: the
            // output goes into the status.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::warn!(task = %name, configmap = %cm_name, "the task's output ConfigMap exists already; keeping the output in the task's status");
                KeptOutput::Status
            }
            Err(e) => {
                tracing::warn!(task = %name, configmap = %cm_name, error = %e, "cannot keep the task's output in its ConfigMap (does the agent's Role allow creating ConfigMaps? `agentdeck manifests` renders it); keeping it in the task's status");
                KeptOutput::Status
            }
        }
    }
}

/// Where a run's output was kept.
enum KeptOutput {
    /// In the task's ConfigMap, summarized in `status.output`.
    ConfigMap(TaskOutput),
    /// In `status.outputTail`, as before.
    Status,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().expect("ts")
    }

    #[test]
    fn a_claim_counts_an_attempt_unless_the_controller_scheduled_it_already() {
        let pending = AgentTaskStatus::default();
        let requeued = pending.claimed("a", now()).requeued("gone", 3, now());
        let scheduled = |attempts| AgentTaskStatus {
            phase: TaskPhase::Scheduled,
            attempts,
            ..AgentTaskStatus::default()
        };
        let cases = [
            (pending, 1),
            (requeued, 2),
            (scheduled(1), 1),
            (scheduled(2), 2),
            // A Scheduled task nobody counted yet still counts once.
            (scheduled(0), 1),
        ];
        for (before, want) in cases {
            let claimed = claim_status(&before, "me", now());
            assert_eq!(claimed.attempts, want, "{before:?}");
            assert_eq!(claimed.phase, TaskPhase::Running);
            assert_eq!(claimed.agent.as_deref(), Some("me"));
        }
    }

    #[test]
    fn ownership_is_lost_only_to_another_agent_or_a_later_transition() {
        let mine = AgentTaskStatus::default().claimed("me", now());
        let other = AgentTaskStatus::default().claimed("other", now());
        let requeued = mine.requeued("offline", 3, now());
        let stale_view = AgentTaskStatus::default();
        let mut cancelled = mine.clone();
        cancelled.phase = TaskPhase::Cancelled;
        let cases = [
            (None, false),
            (Some(&stale_view), false),
            (Some(&mine), false),
            (Some(&other), true),
            (Some(&requeued), true),
            (Some(&cancelled), true),
        ];
        for (status, lost) in cases {
            assert_eq!(ownership_lost(status, "me", 1), lost, "{status:?}");
        }
    }
}
