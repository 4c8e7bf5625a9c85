//! One health verdict per pool — OK, Degraded or Stuck, with the reason —
//! joining its status (queue, replicas, agent health freshness, conditions)
//! and its tasks. Shown by `agentdeck status` and the console; pure, time
//! is an input.

use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use crate::crd::UNCLAIMED;
use crate::crd::{AgentPool, AgentPoolStatus, AgentTask, HoldStatus};

/// How long agents may be short of the desired count before it counts
/// as degraded (a scale-up in progress is not a problem).
pub const STARTING_GRACE: Duration = Duration::from_secs(120);

/// The verdict's level, worst last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum VerdictLevel {
    /// Work flows.
    #[serde(rename = "OK")]
    Ok,
    /// Work flows, but something needs a look (agents offline or stale, not ready).
    Degraded,
    /// Work waits and will not move on its own.
    Stuck,
}

impl VerdictLevel {
    /// `OK`, `Degraded`, `Stuck`.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictLevel::Ok => "OK",
            VerdictLevel::Degraded => "Degraded",
            VerdictLevel::Stuck => "Stuck",
        }
    }
}

/// A pool's verdict and why, in one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub level: VerdictLevel,
    pub reason: String,
}

/// The reason of a pool no controller has written a status for. Whoever
/// knows why no controller did (the console knows why it does not lead)
/// says so in its place.
pub const NO_STATUS_YET: &str = "no status yet: is a controller running?";

/// Tasks of `pool` (in its namespace) whose Unclaimed condition is true.
pub fn unclaimed_tasks<'a>(pool: &str, tasks: impl IntoIterator<Item = &'a AgentTask>) -> u32 {
    let n = tasks
        .into_iter()
        .filter(|t| t.spec.pool == pool && !t.phase().is_finished())
        .filter(|t| {
            t.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == UNCLAIMED && c.status == "True")
            })
        })
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn tasks(n: i64) -> String {
    if n == 1 {
        "1 task".into()
    } else {
        format!("{n} tasks")
    }
}

fn agents(n: i64) -> String {
    if n == 1 {
        "1 agent".into()
    } else {
        format!("{n} agents")
    }
}

fn condition<'a>(
    pool: &'a AgentPool,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    pool.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// The verdict on `pool` at `now`, given how many of its tasks nobody
/// claimed within the acquire timeout (see [`unclaimed_tasks`]). The first
/// rule that matches decides, worst first.
pub fn verdict(pool: &AgentPool, unclaimed: u32, now: Timestamp) -> Verdict {
    let stuck = |reason: String| Verdict {
        level: VerdictLevel::Stuck,
        reason,
    };
    let degraded = |reason: String| Verdict {
        level: VerdictLevel::Degraded,
        reason,
    };
    if let Some(c) = condition(pool, "Invalid") {
        return stuck(format!("the spec is invalid: {}", c.message));
    }
    let Some(status) = pool.status.as_ref() else {
        return degraded(NO_STATUS_YET.into());
    };
    let pending = i64::from(status.pending_tasks);
    let ready = i64::from(status.ready_replicas);
    let desired = i64::from(status.desired_replicas);
    let job_mode = pool.spec.execution_mode == crate::crd::ExecutionMode::Job;
    if pending > 0
        && let Some(why) = stuck_with_pending(pool, status, unclaimed, now)
    {
        return stuck(why);
    }
    if status.health.offline > 0 {
        return degraded(format!(
            "{} offline",
            agents(i64::from(status.health.offline))
        ));
    }
    if let Some(c) = condition(pool, "Degraded") {
        return degraded(c.message.clone());
    }
    if !job_mode && ready < desired {
        let since = pool
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .filter(|c| c.status == "False")
            .map(|c| c.last_transition_time.0);
        let long = since.is_some_and(|t| {
            Duration::try_from(now.duration_since(t)).is_ok_and(|d| d >= STARTING_GRACE)
        });
        if long {
            return degraded(format!(
                "only {ready} of {desired} agents ready for over {}s",
                STARTING_GRACE.as_secs()
            ));
        }
    }
    if status.health.stale > 0 {
        return degraded(format!(
            "{} stale (answering, no recent activity)",
            agents(i64::from(status.health.stale))
        ));
    }
    let mut notes = vec![format!(
        "{ready}/{desired} ready, {pending} pending, {} running",
        status.running_tasks
    )];
    if pool.spec.drain {
        notes.push("draining".into());
    }
    if let Some(h) = &status.hold {
        notes.push(format!("held at {}", h.summary));
    }
    if status.frozen {
        notes.push(
            status
                .frozen_reason
                .clone()
                .unwrap_or_else(|| "frozen".into()),
        );
    }
    Verdict {
        level: VerdictLevel::Ok,
        reason: notes.join("; "),
    }
}

/// Why a pool with pending tasks is stuck, if it is: draining, a maximum
/// of 0 in force, held at 0, frozen with no agent ready, or tasks nobody
/// claimed in time.
fn stuck_with_pending(
    pool: &AgentPool,
    status: &AgentPoolStatus,
    unclaimed: u32,
    now: Timestamp,
) -> Option<String> {
    let pending = i64::from(status.pending_tasks);
    let ready = i64::from(status.ready_replicas);
    let job_mode = pool.spec.execution_mode == crate::crd::ExecutionMode::Job;
    if pool.spec.drain {
        return Some(format!(
            "{} pending while the pool drains (undo with `agentdeck drain {} --undo`)",
            tasks(pending),
            pool.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    // An open capacity window's maximum is the one in force.
    let window = status
        .capacity
        .as_ref()
        .filter(|c| !c.open.is_empty() && !job_mode);
    match window.and_then(|c| Some((c.max_replicas?, c))) {
        Some((0, c)) => {
            return Some(format!(
                "{} pending with maxReplicas 0 from capacity window {} ({})",
                tasks(pending),
                c.open.join("+"),
                c.summary
            ));
        }
        Some(_) => {}
        None if pool.spec.max_replicas == 0 => {
            return Some(format!("{} pending and maxReplicas is 0", tasks(pending)));
        }
        None => {}
    }
    if let Some(h) = HoldStatus::of(pool.spec.hold.as_ref(), now).filter(|h| h.replicas == 0)
        && !job_mode
    {
        return Some(format!(
            "{} pending and the pool is held at 0 ({})",
            tasks(pending),
            h.summary
        ));
    }
    if status.frozen && ready == 0 && !job_mode {
        return Some(format!(
            "{} pending, no agent ready, and the pool is frozen ({})",
            tasks(pending),
            status.frozen_reason.as_deref().unwrap_or("freeze window")
        ));
    }
    if unclaimed > 0 {
        return Some(format!(
            "{} unclaimed past the acquire timeout",
            tasks(i64::from(unclaimed))
        ));
    }
    None
}

/// `v` with the pool's tasks running longer than `after` counted in: a
/// task that runs far past the usual may hang, and holds an agent while
/// it does. An OK pool becomes Degraded saying how many; a worse verdict
/// keeps its level and reason, with the count added.
pub fn with_long_running(v: Verdict, long_running: u32, after: Duration) -> Verdict {
    if long_running == 0 {
        return v;
    }
    let note = format!(
        "{} running over {}",
        tasks(i64::from(long_running)),
        crate::units::format_duration(after)
    );
    match v.level {
        VerdictLevel::Ok => Verdict {
            level: VerdictLevel::Degraded,
            reason: format!("{note}; {}", v.reason),
        },
        _ => Verdict {
            level: v.level,
            reason: format!("{}; {note}", v.reason),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t0() -> Timestamp {
        "2026-01-01T12:00:00Z".parse().expect("ts")
    }

    fn pool(spec: serde_json::Value, status: serde_json::Value) -> AgentPool {
        let mut full = json!({"image": "i", "minReplicas": 1, "maxReplicas": 5});
        for (k, v) in spec.as_object().expect("object") {
            full[k] = v.clone();
        }
        let mut obj = json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "p", "namespace": "default"}, "spec": full});
        if !status.is_null() {
            let mut st = json!({"replicas": 2, "readyReplicas": 2, "desiredReplicas": 2});
            for (k, v) in status.as_object().expect("object") {
                st[k] = v.clone();
            }
            obj["status"] = st;
        }
        serde_json::from_value(obj).expect("pool")
    }

    fn cond(type_: &str, status: &str, message: &str, at: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": "R", "message": message,
               "lastTransitionTime": at})
    }

    #[test]
    fn tasks_running_past_the_threshold_are_counted_in_the_verdict() {
        let hour = Duration::from_secs(3600);
        let ok = Verdict {
            level: VerdictLevel::Ok,
            reason: "1/1 ready, 0 pending, 2 running".into(),
        };
        assert_eq!(with_long_running(ok.clone(), 0, hour), ok);
        assert_eq!(
            with_long_running(ok, 2, hour),
            Verdict {
                level: VerdictLevel::Degraded,
                reason: "2 tasks running over 1h; 1/1 ready, 0 pending, 2 running".into(),
            }
        );
        let stuck = Verdict {
            level: VerdictLevel::Stuck,
            reason: "3 tasks pending and maxReplicas is 0".into(),
        };
        assert_eq!(
            with_long_running(stuck, 1, Duration::from_secs(5400)),
            Verdict {
                level: VerdictLevel::Stuck,
                reason: "3 tasks pending and maxReplicas is 0; 1 task running over 1h30m".into(),
            }
        );
    }

    #[test]
    fn each_rule_gives_its_level_and_reason() {
        use VerdictLevel::*;
        let cases: Vec<(&str, AgentPool, u32, VerdictLevel, &str)> = vec![
            (
                "a healthy pool",
                pool(json!({}), json!({"pendingTasks": 0, "runningTasks": 1})),
                0,
                Ok,
                "2/2 ready, 0 pending, 1 running",
            ),
            (
                "an invalid spec",
                pool(
                    json!({}),
                    json!({"conditions": [cond("Invalid", "True", "spec.image: empty", "2026-01-01T11:00:00Z")]}),
                ),
                0,
                Stuck,
                "the spec is invalid: spec.image: empty",
            ),
            (
                "no controller yet",
                pool(json!({}), serde_json::Value::Null),
                0,
                Degraded,
                "no status yet: is a controller running?",
            ),
            (
                "pending work on a draining pool",
                pool(json!({"drain": true}), json!({"pendingTasks": 3})),
                0,
                Stuck,
                "3 tasks pending while the pool drains (undo with `agentdeck drain p --undo`)",
            ),
            (
                "pending work and max 0",
                pool(
                    json!({"minReplicas": 0, "maxReplicas": 0}),
                    json!({"pendingTasks": 1}),
                ),
                0,
                Stuck,
                "1 task pending and maxReplicas is 0",
            ),
            (
                "pending work in a capacity window of max 0",
                pool(
                    json!({}),
                    json!({"pendingTasks": 1, "readyReplicas": 0, "desiredReplicas": 0,
                           "capacity": {"open": ["night"], "minReplicas": 0, "maxReplicas": 0,
                                        "summary": "night: min 0, max 0 until 06:00, then min 1, max 5"}}),
                ),
                0,
                Stuck,
                "1 task pending with maxReplicas 0 from capacity window night \
                 (night: min 0, max 0 until 06:00, then min 1, max 5)",
            ),
            (
                "pending work and max 0 but a capacity window opens it",
                pool(
                    json!({"minReplicas": 0, "maxReplicas": 0}),
                    json!({"pendingTasks": 1, "runningTasks": 0,
                           "capacity": {"open": ["day"], "minReplicas": 2, "maxReplicas": 4,
                                        "summary": "day: min 2, max 4 until 18:00, then min 0, max 0"}}),
                ),
                0,
                Ok,
                "2/2 ready, 1 pending, 0 running",
            ),
            (
                "pending work on a pool held at zero",
                pool(
                    json!({"hold": {"replicas": 0, "setBy": "bob"}}),
                    json!({"pendingTasks": 2}),
                ),
                0,
                Stuck,
                "2 tasks pending and the pool is held at 0 (0 by bob until cleared)",
            ),
            (
                "an expired hold at zero is no reason",
                pool(
                    json!({"hold": {"replicas": 0, "until": "2026-01-01T11:00:00Z"}}),
                    json!({"pendingTasks": 2}),
                ),
                0,
                Ok,
                "2/2 ready, 2 pending, 0 running",
            ),
            (
                "frozen with no agent and work waiting",
                pool(
                    json!({}),
                    json!({"pendingTasks": 1, "readyReplicas": 0, "frozen": true,
                           "frozenReason": "window nightly until 02:00"}),
                ),
                0,
                Stuck,
                "1 task pending, no agent ready, and the pool is frozen (window nightly until 02:00)",
            ),
            (
                "unclaimed tasks",
                pool(json!({}), json!({"pendingTasks": 4})),
                4,
                Stuck,
                "4 tasks unclaimed past the acquire timeout",
            ),
            (
                "offline agents",
                pool(json!({}), json!({"health": {"fresh": 1, "offline": 1}})),
                0,
                Degraded,
                "1 agent offline",
            ),
            (
                "a degraded condition",
                pool(
                    json!({}),
                    json!({"conditions": [cond("Degraded", "True", "ServiceMonitor CRD missing", "2026-01-01T11:00:00Z")]}),
                ),
                0,
                Degraded,
                "ServiceMonitor CRD missing",
            ),
            (
                "agents short for long",
                pool(
                    json!({}),
                    json!({"readyReplicas": 1, "desiredReplicas": 3,
                           "conditions": [cond("Ready", "False", "", "2026-01-01T11:55:00Z")]}),
                ),
                0,
                Degraded,
                "only 1 of 3 agents ready for over 120s",
            ),
            (
                "agents short during a scale-up",
                pool(
                    json!({}),
                    json!({"readyReplicas": 1, "desiredReplicas": 3,
                           "conditions": [cond("Ready", "False", "", "2026-01-01T11:59:30Z")]}),
                ),
                0,
                Ok,
                "1/3 ready, 0 pending, 0 running",
            ),
            (
                "stale agents",
                pool(json!({}), json!({"health": {"fresh": 1, "stale": 2}})),
                0,
                Degraded,
                "2 agents stale (answering, no recent activity)",
            ),
            (
                "an OK pool names its drain, hold and freeze",
                pool(
                    json!({"drain": true}),
                    json!({"frozen": true, "frozenReason": "window w",
                           "hold": {"replicas": 2, "summary": "2 by bob until cleared"}}),
                ),
                0,
                Ok,
                "2/2 ready, 0 pending, 0 running; draining; held at 2 by bob until cleared; window w",
            ),
        ];
        for (name, pool, unclaimed, level, reason) in cases {
            let v = verdict(&pool, unclaimed, t0());
            assert_eq!((v.level, v.reason.as_str()), (level, reason), "{name}");
        }
    }

    #[test]
    fn only_unfinished_tasks_of_the_pool_with_unclaimed_true_count() {
        let task = |pool: &str, phase: &str, unclaimed: &str| -> AgentTask {
            serde_json::from_value(json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": "t"}, "spec": {"pool": pool},
                "status": {"phase": phase, "conditions": [
                    cond(UNCLAIMED, unclaimed, "", "2026-01-01T11:00:00Z")]}
            }))
            .expect("task")
        };
        let tasks = [
            task("p", "Pending", "True"),
            task("p", "Pending", "False"),
            task("q", "Pending", "True"),
            task("p", "Cancelled", "True"),
        ];
        assert_eq!(unclaimed_tasks("p", tasks.iter()), 1);
    }
}
