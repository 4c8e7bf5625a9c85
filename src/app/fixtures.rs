//! A deterministic cluster for console tests, snapshots and benchmarks:
//! three pools (one healthy, one with a stuck queue, one job-mode), agents
//! with each freshness, tasks in every phase and Events — any number of
//! tasks, all times relative to a given `now`.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::event::CachedEvent as Event;
use jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::rows::Sources;
use crate::cluster::AgentSample;
use crate::cluster::pod::CachedPod;
use crate::crd::{AgentPool, AgentTask};
use crate::health::{HealthReport, HealthStatus};

/// The namespace of every fixture object.
pub const NS: &str = "ops";

fn at(now: Timestamp, secs_ago: i64) -> String {
    (now - SignedDuration::from_secs(secs_ago)).to_string()
}

fn pool(
    now: Timestamp,
    name: &str,
    spec: serde_json::Value,
    status: serde_json::Value,
) -> Arc<AgentPool> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": at(now, 86_400 * 3),
                         "labels": {"team": if name == "batch" { "data" } else { "platform" }}},
            "spec": spec, "status": status
        }))
        .expect("fixture pool"),
    )
}

/// Phases cycle through this list; every seventh task is Pending.
const PHASES: &[&str] = &[
    "Succeeded",
    "Running",
    "Succeeded",
    "Failed",
    "Succeeded",
    "Running",
    "Pending",
    "Succeeded",
    "Errored",
    "Cancelled",
    "Scheduled",
];

fn task(now: Timestamp, i: usize) -> Arc<AgentTask> {
    let phase = PHASES[i % PHASES.len()];
    let pool = match i % 3 {
        0 => "platform",
        1 => "legacy",
        _ => "batch",
    };
    // Pending tasks are young (the queue moves) except in the frozen pool.
    let created = if phase == "Pending" && pool != "legacy" {
        5 + (i as i64) % 20
    } else {
        30 + (i as i64 * 7) % 5000
    };
    let agent = match pool {
        "platform" => format!("iac-agent-platform-7d9f-{}", ["a1", "b2", "c3"][i % 3]),
        "legacy" => "iac-agent-legacy-55c-x9".to_owned(),
        _ => format!("plan-{i:05}-job-pod"),
    };
    let mut status = json!({"phase": phase, "attempts": 1});
    if phase != "Pending" {
        status["agent"] = json!(agent);
        status["claimedAt"] = json!(at(now, created - 3));
        status["startedAt"] = json!(at(now, created - 4));
    }
    if matches!(phase, "Succeeded" | "Failed" | "Errored" | "Cancelled") {
        status["finishedAt"] = json!(at(now, created / 2));
    }
    status["message"] = json!(match phase {
        "Failed" => "exited with code 3 after 12s: Error: credentials expired".to_owned(),
        "Errored" => "pod not running 300s after Job creation: Unschedulable".to_owned(),
        "Succeeded" => "succeeded in 12.0s".to_owned(),
        "Running" => format!("claimed by {agent}"),
        _ => String::new(),
    });
    if pool == "batch" {
        status["job"] = json!(format!("plan-{i:05}-job"));
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": format!("plan-{i:05}"), "namespace": NS,
                         "creationTimestamp": at(now, created),
                         "labels": {"kind": if i.is_multiple_of(2) { "plan" } else { "apply" }}},
            "spec": {"pool": pool, "command": ["tofu", "plan"]},
            "status": status
        }))
        .expect("fixture task"),
    )
}

fn agent_pod(
    now: Timestamp,
    name: &str,
    pool: &str,
    component: &str,
    phase: &str,
    restarts: i32,
) -> Arc<CachedPod> {
    let mut labels = json!({"agentdeck.dev/pool": pool, "app.kubernetes.io/component": component,
                            "app.kubernetes.io/managed-by": "agentdeck"});
    if component == "task" {
        labels["agentdeck.dev/task"] = json!(name.trim_end_matches("-job-pod"));
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": at(now, 7200), "labels": labels},
            "spec": {"nodeName": "node-1", "containers": [{"name": "agent", "image": "agentdeck:0.1"}]},
            "status": {"phase": phase,
                       "conditions": [{"type": "Ready", "status": if phase == "Running" { "True" } else { "False" }}],
                       "containerStatuses": [{"name": "agent", "ready": true, "restartCount": restarts,
                                              "image": "agentdeck:0.1", "imageID": ""}]}
        }))
        .expect("fixture pod"),
    )
}

/// A health sample: the agent last answered `answered_secs` ago, idle for
/// `idle_secs` then, its clock `skew_secs` ahead.
fn sample(
    now: Timestamp,
    pod: &str,
    pool: &str,
    answered_secs: i64,
    idle_secs: i64,
    skew_secs: i64,
) -> AgentSample {
    let received = now - SignedDuration::from_secs(answered_secs);
    AgentSample {
        namespace: NS.into(),
        pod: pod.into(),
        pool: Some(pool.into()),
        first_seen: now - SignedDuration::from_secs(7200),
        last_probe: Some(received),
        last_report: Some((
            HealthReport {
                status: HealthStatus::Healthy,
                current_time: received + SignedDuration::from_secs(skew_secs),
                last_activity: received - SignedDuration::from_secs(idle_secs)
                    + SignedDuration::from_secs(skew_secs),
            },
            received,
        )),
        http_status: Some(200),
        latency: Some(Duration::from_millis(3)),
        error: None,
    }
}

fn event(
    now: Timestamp,
    i: usize,
    kind: &str,
    name: &str,
    reason: &str,
    warning: bool,
    msg: &str,
) -> Arc<Event> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("ev-{i}"), "namespace": NS},
            "involvedObject": {"kind": kind, "name": name, "namespace": NS},
            "reason": reason, "message": msg, "type": if warning { "Warning" } else { "Normal" },
            "count": 1, "lastTimestamp": at(now, 10 + i as i64 * 40)
        }))
        .expect("fixture event"),
    )
}

/// The fixture cluster with `tasks` tasks, as seen at `now`.
pub fn sources(now: Timestamp, tasks: usize) -> Sources {
    let tasks: Vec<_> = (0..tasks).map(|i| task(now, i)).collect();
    Sources {
        pools: fixture_pools(now),
        pods: fixture_pods(now, tasks.len()),
        tasks,
        jobs: Vec::new(),
        events: fixture_events(now),
        samples: fixture_samples(now),
    }
}

/// The three pools: one healthy, one frozen with debug logs, one in job mode.
fn fixture_pools(now: Timestamp) -> Vec<Arc<AgentPool>> {
    vec![
        pool(
            now,
            "platform",
            json!({"image": "agentdeck:0.1", "minReplicas": 1, "maxReplicas": 6}),
            json!({"replicas": 3, "readyReplicas": 3, "desiredReplicas": 3,
                   "scaleReason": "3 pending tasks need 3 agents", "lastScaleTime": at(now, 300)}),
        ),
        pool(
            now,
            "legacy",
            json!({"image": "agentdeck:0.1", "minReplicas": 1, "maxReplicas": 1, "debug": true}),
            json!({"replicas": 1, "readyReplicas": 0, "desiredReplicas": 1, "frozen": true,
                   "frozenReason": "release-freeze until Mon 09:00"}),
        ),
        pool(
            now,
            "batch",
            json!({"image": "agentdeck:0.1", "executionMode": "job", "minReplicas": 0, "maxReplicas": 20,
                   "taskDefaults": {"runnerImage": "tofu:1.8"}}),
            json!({}),
        ),
    ]
}

/// The agent pods of the pools, and a task pod for every third task of the first twelve.
fn fixture_pods(now: Timestamp, tasks: usize) -> Vec<Arc<CachedPod>> {
    let mut pods = vec![
        agent_pod(
            now,
            "iac-agent-platform-7d9f-a1",
            "platform",
            "agent",
            "Running",
            0,
        ),
        agent_pod(
            now,
            "iac-agent-platform-7d9f-b2",
            "platform",
            "agent",
            "Running",
            2,
        ),
        agent_pod(
            now,
            "iac-agent-platform-7d9f-c3",
            "platform",
            "agent",
            "Running",
            0,
        ),
        agent_pod(
            now,
            "iac-agent-legacy-55c-x9",
            "legacy",
            "agent",
            "Running",
            7,
        ),
    ];
    for i in (2..tasks.min(12)).step_by(3) {
        pods.push(agent_pod(
            now,
            &format!("plan-{i:05}-job-pod"),
            "batch",
            "task",
            "Running",
            0,
        ));
    }
    pods
}

/// One health sample per agent: fresh, stale, busy, long-idle.
fn fixture_samples(now: Timestamp) -> Vec<AgentSample> {
    vec![
        sample(now, "iac-agent-platform-7d9f-a1", "platform", 1, 2, 0),
        // Its answers stopped coming 25 s ago: stale.
        sample(now, "iac-agent-platform-7d9f-b2", "platform", 25, 6, 0),
        sample(now, "iac-agent-platform-7d9f-c3", "platform", 1, 3, 45),
        sample(now, "iac-agent-legacy-55c-x9", "legacy", 1, 400, 0),
    ]
}

/// Events of the fixture objects, and one of an object that is not ours.
fn fixture_events(now: Timestamp) -> Vec<Arc<Event>> {
    vec![
        event(
            now,
            0,
            "AgentPool",
            "platform",
            "ScaledUp",
            false,
            "3 pending tasks need 3 agents: 1 → 3",
        ),
        event(
            now,
            1,
            "AgentTask",
            "plan-00003",
            "TaskFailed",
            true,
            "exited with code 3: \u{1b}[31mcredentials expired\u{1b}[0m",
        ),
        event(
            now,
            2,
            "AgentPool",
            "legacy",
            "Unclaimed",
            true,
            "task plan-00001 waits: PoolFrozen",
        ),
        event(
            now,
            3,
            "Pod",
            "iac-agent-platform-7d9f-b2",
            "BackOff",
            true,
            "Back-off restarting failed container",
        ),
        event(
            now,
            4,
            "Pod",
            "someone-elses-pod",
            "Pulled",
            false,
            "not ours: left out",
        ),
    ]
}

/// A fixed instant for tests and snapshots.
pub fn now() -> Timestamp {
    "2026-11-24T10:00:00Z".parse().expect("a valid timestamp")
}

/// An hour of snapshots of `base` (a snapshot of [`sources`]), one every
/// 30 s, the last built at [`now`], for the pool history: `platform`'s
/// queue is empty for 20 minutes, rises to 12 by -20m and drains by -8m;
/// its replicas follow two minutes behind (ScaledUp 1 → 3 at -35m, 3 → 5
/// at -25m) and it scales down (ScaledDown 5 → 1) at -3m. Its fresh agents
/// are its ready ones.
pub fn an_hour(base: &super::rows::Snapshot) -> Vec<super::rows::Snapshot> {
    use super::rows::{EventRow, Labels, PoolRow};
    let end = now();
    // Minutes since the start of the hour.
    let queue = |t: f64| -> i32 {
        if t < 20.0 {
            0
        } else if t < 40.0 {
            ((t - 20.0) * 12.0 / 20.0).round() as i32
        } else {
            (12.0 - (t - 40.0)).max(0.0).round() as i32
        }
    };
    let desired = |t: f64| -> i32 {
        match t {
            t if t < 25.0 => 1,
            t if t < 35.0 => 3,
            t if t < 57.0 => 5,
            _ => 1,
        }
    };
    let ready = |t: f64| desired(t).min(desired(t - 2.0));
    let at = |t: f64| end - SignedDuration::from_secs(((60.0 - t) * 60.0).round() as i64);
    let decision = |t: f64, reason: &str, message: &str| {
        Arc::new(EventRow {
            key: format!("{NS}/platform.{reason}.{t}"),
            context: Arc::default(),
            namespace: NS.into(),
            warning: false,
            reason: reason.into(),
            object: "agentpool/platform".into(),
            pool: Some("platform".into()),
            message: message.into(),
            count: 1,
            last: Some(at(t)),
            labels: Labels::new(),
            search: format!(
                "normal {} agentpool/platform {message}",
                reason.to_lowercase()
            ),
            name_lc: None,
        })
    };
    let decisions = [
        (25.0, "ScaledUp", "2 pending tasks need 3 agents: 1 → 3"),
        (35.0, "ScaledUp", "9 pending tasks need 5 agents: 3 → 5"),
        (57.0, "ScaledDown", "no pending task for 5m: 5 → 1"),
    ];
    (0..=120)
        .map(|half| {
            let t = f64::from(half) / 2.0;
            let mut s = base.clone();
            s.built = Some(at(t));
            s.pools = s
                .pools
                .iter()
                .map(|p| {
                    if p.name != "platform" {
                        return p.clone();
                    }
                    Arc::new(PoolRow {
                        pending: queue(t),
                        desired: desired(t),
                        ready: ready(t),
                        replicas: desired(t).max(ready(t)),
                        fresh: ready(t),
                        ..(**p).clone()
                    })
                })
                .collect();
            s.events
                .retain(|e| !(e.object == "agentpool/platform" && e.reason.starts_with("Scaled")));
            s.events.extend(
                decisions
                    .iter()
                    .filter(|(d, _, _)| *d <= t)
                    .map(|(d, r, m)| decision(*d, r, m)),
            );
            s
        })
        .collect()
}
