//! Which finished AgentTasks a pool's `spec.taskHistory` lets go, and the
//! record kept of each: as a Job's `ttlSecondsAfterFinished` and a
//! CronJob's `successfulJobsHistoryLimit` / `failedJobsHistoryLimit`.
//!
//! Pure: the tasks and the clock come in, the names to delete (oldest
//! first, each with why) and when to look again go out.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::crd::{AgentTask, TaskHistory, TaskPhase};

/// A finished task to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    pub name: String,
    /// Why, in words ("ended 61s ago, past the 60s to keep").
    pub why: String,
}

/// What the pool's history lets go now, and when the next kept task
/// expires by age (`None`: none will).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub expired: Vec<Expired>,
    pub next_due: Option<Duration>,
}

/// When a finished task ended: its `finishedAt`, else its last heartbeat,
/// else its creation (a task failed by the controller may carry no end).
pub fn ended_at(task: &AgentTask) -> Option<Timestamp> {
    let st = task.status.as_ref()?;
    st.finished_at
        .as_ref()
        .or(st.last_heartbeat.as_ref())
        .map(|t| t.0)
        .or_else(|| task.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The finished tasks of one pool that `history` lets go at `now`. Tasks
/// already being deleted are left alone.
pub fn plan<'a>(
    tasks: impl IntoIterator<Item = &'a AgentTask>,
    history: &TaskHistory,
    now: Timestamp,
) -> Retention {
    let mut succeeded = Vec::new();
    let mut unsuccessful = Vec::new();
    for task in tasks {
        if task.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let phase = task.status.as_ref().map_or(TaskPhase::Pending, |s| s.phase);
        if !phase.is_finished() {
            continue;
        }
        let Some(ended) = ended_at(task) else {
            continue;
        };
        let entry = (ended, task.name_any());
        if phase == TaskPhase::Succeeded {
            succeeded.push(entry);
        } else {
            unsuccessful.push(entry);
        }
    }
    let ttl = Duration::from_secs(history.ttl_seconds_after_finished.unsigned_abs());
    let mut out = Retention::default();
    for (mut group, limit, what) in [
        (succeeded, history.succeeded_limit, "succeeded"),
        (unsuccessful, history.failed_limit, "unsuccessful"),
    ] {
        // Newest first; the same end broken by name, so the plan is stable.
        group.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let limit = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        for (i, (ended, name)) in group.into_iter().enumerate() {
            // A clock behind the task's end counts as no age.
            let age = if now >= ended {
                now.duration_since(ended).unsigned_abs()
            } else {
                Duration::ZERO
            };
            if i >= limit {
                out.expired.push(Expired {
                    name,
                    why: format!("{limit} newer {what} tasks are kept"),
                });
            } else if age >= ttl {
                out.expired.push(Expired {
                    name,
                    why: format!(
                        "ended {}s ago, past the {}s to keep",
                        age.as_secs(),
                        ttl.as_secs()
                    ),
                });
            } else {
                let left = ttl - age;
                out.next_due = Some(out.next_due.map_or(left, |d| d.min(left)));
            }
        }
    }
    out
}

/// What is kept of a deleted task (in the pool's history ConfigMap): its
/// summary and the end of its output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub name: String,
    pub pool: String,
    pub phase: TaskPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default)]
    pub attempts: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// When and why it was deleted.
    pub deleted_at: String,
    pub deleted_because: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
}

impl TaskRecord {
    /// The record of `task`, deleted at `now` because `why`.
    pub fn of(task: &AgentTask, why: &str, now: Timestamp) -> TaskRecord {
        let st = task.status.clone().unwrap_or_default();
        let at = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
            t.map(|t| t.0.to_string())
        };
        TaskRecord {
            name: task.name_any(),
            pool: task.spec.pool.clone(),
            phase: st.phase,
            agent: st.agent.clone(),
            attempts: st.attempts,
            exit_code: st.exit_code,
            message: st.message.clone(),
            created_at: at(task.metadata.creation_timestamp.as_ref()),
            started_at: at(st.started_at.as_ref().or(st.claimed_at.as_ref())),
            finished_at: at(st.finished_at.as_ref()),
            deleted_at: now.to_string(),
            deleted_because: why.to_owned(),
            output_tail: st.output_tail.clone(),
        }
    }
}

/// Records kept per pool.
pub const MAX_RECORDS: usize = 200;
/// Bytes of records kept per pool (well under the 1 MiB an object holds).
pub const MAX_RECORD_BYTES: usize = 512 * 1024;

/// The history's `data` key of a task (task names are DNS subdomains:
/// `[-.a-z0-9]`, all valid in a ConfigMap key).
pub fn record_key(task: &str) -> String {
    format!("{task}.json")
}

/// Label of the history ConfigMaps.
pub const LABEL_TASK_HISTORY: &str = "agentdeck.dev/task-history";

/// The record of `task` in a history ConfigMap.
pub fn record_in(cm: &k8s_openapi::api::core::v1::ConfigMap, task: &str) -> Option<TaskRecord> {
    let text = cm.data.as_ref()?.get(&record_key(task))?;
    serde_json::from_str(text).ok()
}

/// Adds `new` records to a history's `data`, then drops the records that
/// were deleted longest ago until at most [`MAX_RECORDS`] and
/// [`MAX_RECORD_BYTES`] remain.
pub fn merge_records(data: &mut BTreeMap<String, String>, new: &[TaskRecord]) {
    for record in new {
        if let Ok(text) = serde_json::to_string(record) {
            data.insert(record_key(&record.name), text);
        }
    }
    let mut by_age: Vec<(String, String, usize)> = data
        .iter()
        .map(|(key, text)| {
            let deleted = serde_json::from_str::<TaskRecord>(text)
                .map(|r| r.deleted_at)
                .unwrap_or_default();
            (deleted, key.clone(), key.len() + text.len())
        })
        .collect();
    // Oldest first.
    by_age.sort();
    let mut total: usize = by_age.iter().map(|(_, _, n)| n).sum();
    let mut count = by_age.len();
    for (_, key, n) in by_age {
        if count <= MAX_RECORDS && total <= MAX_RECORD_BYTES {
            break;
        }
        data.remove(&key);
        count -= 1;
        total -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{AgentTaskSpec, AgentTaskStatus, k8s_time};

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn task(name: &str, phase: TaskPhase, ended: Option<&str>) -> AgentTask {
        let mut t = AgentTask::new(
            name,
            AgentTaskSpec {
                pool: "p".into(),
                operation: None,
                command: vec![],
                args: vec![],
                image: None,
                env: vec![],
                timeout_seconds: None,
                cancel: false,
            },
        );
        t.metadata.creation_timestamp = Some(k8s_time(ts("2026-01-01T00:00:00Z")));
        t.status = Some(AgentTaskStatus {
            phase,
            finished_at: ended.map(|e| k8s_time(ts(e))),
            ..AgentTaskStatus::default()
        });
        t
    }

    fn history(ttl: i64, succeeded: i32, failed: i32) -> TaskHistory {
        TaskHistory {
            ttl_seconds_after_finished: ttl,
            succeeded_limit: succeeded,
            failed_limit: failed,
        }
    }

    fn names(r: &Retention) -> Vec<&str> {
        r.expired.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn a_finished_task_goes_exactly_at_its_ttl_and_unfinished_ones_never() {
        let now = ts("2026-01-01T01:00:00Z");
        let tasks = [
            task("at-ttl", TaskPhase::Succeeded, Some("2026-01-01T00:59:00Z")),
            task("young", TaskPhase::Failed, Some("2026-01-01T00:59:30Z")),
            task("running", TaskPhase::Running, None),
            task("pending", TaskPhase::Pending, None),
            task(
                "old-errored",
                TaskPhase::Errored,
                Some("2026-01-01T00:10:00Z"),
            ),
        ];
        let r = plan(&tasks, &history(60, 100, 100), now);
        assert_eq!(names(&r), ["at-ttl", "old-errored"]);
        assert_eq!(r.expired[0].why, "ended 60s ago, past the 60s to keep");
        assert_eq!(r.next_due, Some(Duration::from_secs(30)));
    }

    #[test]
    fn limits_keep_the_newest_of_each_kind() {
        let now = ts("2026-01-01T00:10:00Z");
        let mut tasks = Vec::new();
        for i in 0..5 {
            let at = format!("2026-01-01T00:0{i}:00Z");
            tasks.push(task(&format!("ok-{i}"), TaskPhase::Succeeded, Some(&at)));
            tasks.push(task(&format!("bad-{i}"), TaskPhase::Cancelled, Some(&at)));
        }
        let r = plan(&tasks, &history(86_400, 2, 3), now);
        assert_eq!(names(&r), ["ok-2", "ok-1", "ok-0", "bad-1", "bad-0"]);
        assert_eq!(r.expired[0].why, "2 newer succeeded tasks are kept");
        // A limit of 0 keeps none; being deleted already is left alone.
        let mut deleting = task(
            "deleting",
            TaskPhase::Succeeded,
            Some("2026-01-01T00:00:00Z"),
        );
        deleting.metadata.deletion_timestamp = Some(k8s_time(now));
        let r = plan(
            &[
                deleting,
                task("x", TaskPhase::Succeeded, Some("2026-01-01T00:09:00Z")),
            ],
            &history(86_400, 0, 0),
            now,
        );
        assert_eq!(names(&r), ["x"]);
    }

    #[test]
    fn a_task_with_no_end_counts_from_its_last_heartbeat_or_creation() {
        let now = ts("2026-01-01T00:02:00Z");
        let mut t = task("errored", TaskPhase::Errored, None);
        assert_eq!(ended_at(&t), Some(ts("2026-01-01T00:00:00Z")));
        assert_eq!(names(&plan([&t], &history(60, 9, 9), now)), ["errored"]);
        t.status.as_mut().unwrap().last_heartbeat = Some(k8s_time(ts("2026-01-01T00:01:30Z")));
        let r = plan([&t], &history(60, 9, 9), now);
        assert!(r.expired.is_empty());
        assert_eq!(r.next_due, Some(Duration::from_secs(30)));
    }

    #[test]
    fn records_keep_the_most_recently_deleted_within_their_bounds() {
        let mut data = BTreeMap::new();
        let mut t = task("t", TaskPhase::Failed, Some("2026-01-01T00:00:00Z"));
        t.status.as_mut().unwrap().output_tail = Some("x".repeat(3000));
        for i in 0..(MAX_RECORDS + 50) {
            t.metadata.name = Some(format!("t-{i:04}"));
            let at = ts("2026-01-02T00:00:00Z") + jiff::SignedDuration::from_secs(i as i64);
            merge_records(&mut data, &[TaskRecord::of(&t, "ttl", at)]);
        }
        let total: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(
            data.len() <= MAX_RECORDS && total <= MAX_RECORD_BYTES,
            "{} {total}",
            data.len()
        );
        let last = format!("t-{:04}.json", MAX_RECORDS + 49);
        assert!(data.contains_key(&last));
        assert!(!data.contains_key("t-0000.json"));
        let back: TaskRecord = serde_json::from_str(&data[&last]).expect("a record");
        assert_eq!(back.phase, TaskPhase::Failed);
        assert_eq!(back.output_tail.as_deref().map(str::len), Some(3000));
    }
}
