//! Pure decisions of the pool reconciler, over what the watch-fed stores
//! hold: who is busy, which pods go first on scale-down, which tasks lost
//! their agent, which tasks nobody claims, and the pool's conditions. No
//! I/O; time is an input.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::cluster::pod::CachedPod;
use crate::crd::{ANNOTATION_POD_DELETION_COST, AgentTask, TaskPhase};

/// Deletion cost of an agent running a task: the ReplicaSet removes it last.
pub const COST_BUSY: i32 = 1000;
/// Deletion cost of an idle agent: the ReplicaSet removes it first.
pub const COST_IDLE: i32 = -1000;

/// The tasks of one pool, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskCounts {
    /// Waiting for an agent (cancelled ones excluded).
    pub pending: u32,
    /// Job mode: a Job exists, the task has not started.
    pub scheduled: u32,
    /// Being run.
    pub running: u32,
    /// Pod names that are the agent of a Running task.
    pub busy_agents: BTreeSet<String>,
}

/// Counts `tasks` by phase and collects the agents running them.
pub fn count_tasks<'a>(tasks: impl IntoIterator<Item = &'a AgentTask>) -> TaskCounts {
    let mut counts = TaskCounts::default();
    for task in tasks {
        match task.phase() {
            TaskPhase::Pending if !task.spec.cancel => counts.pending += 1,
            TaskPhase::Scheduled => counts.scheduled += 1,
            TaskPhase::Running => {
                counts.running += 1;
                if let Some(agent) = task.status.as_ref().and_then(|s| s.agent.as_deref()) {
                    counts.busy_agents.insert(agent.to_owned());
                }
            }
            _ => {}
        }
    }
    counts
}

/// An agent pod as the reconciler needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPod {
    pub name: String,
    /// Being deleted: no longer counts as a live agent.
    pub terminating: bool,
    /// Ready condition true.
    pub ready: bool,
    /// `controller.kubernetes.io/pod-deletion-cost` as written, if any.
    pub deletion_cost: Option<String>,
}

impl AgentPod {
    /// The facts of `pod`.
    pub fn of(pod: &CachedPod) -> AgentPod {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let terminal = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        AgentPod {
            name: pod.metadata.name.clone().unwrap_or_default(),
            terminating: pod.metadata.deletion_timestamp.is_some() || terminal,
            ready,
            deletion_cost: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_POD_DELETION_COST).cloned()),
        }
    }
}

/// Agents of a pool by what they are doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentCounts {
    /// Live pods running a task.
    pub busy: u32,
    /// Ready live pods running nothing.
    pub idle: u32,
    /// Live pods not ready yet (and not busy).
    pub starting: u32,
    /// Live pods.
    pub live: u32,
    /// Live ready pods.
    pub ready: u32,
}

/// Counts live agents as busy, idle or starting.
pub fn count_agents(pods: &[AgentPod], busy: &BTreeSet<String>) -> AgentCounts {
    let mut c = AgentCounts::default();
    for pod in pods.iter().filter(|p| !p.terminating) {
        c.live += 1;
        if pod.ready {
            c.ready += 1;
        }
        if busy.contains(&pod.name) {
            c.busy += 1;
        } else if pod.ready {
            c.idle += 1;
        } else {
            c.starting += 1;
        }
    }
    c
}

/// The deletion-cost annotations to write before lowering replicas: busy
/// pods [`COST_BUSY`], every other live pod [`COST_IDLE`], so the ReplicaSet
/// removes idle (and starting) agents first. Only pods whose annotation
/// differs are returned, as `(pod, cost)`.
pub fn deletion_costs(pods: &[AgentPod], busy: &BTreeSet<String>) -> Vec<(String, String)> {
    pods.iter()
        .filter(|p| !p.terminating)
        .filter_map(|p| {
            let want = if busy.contains(&p.name) {
                COST_BUSY
            } else {
                COST_IDLE
            }
            .to_string();
            (p.deletion_cost.as_deref() != Some(want.as_str())).then(|| (p.name.clone(), want))
        })
        .collect()
}

/// What to do with one task whose agent cannot finish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Give it back (requeue, or fail once attempts run out) with this reason.
    Requeue { task: String, reason: String },
    /// Cancelled and no live agent will stop it: mark it Cancelled.
    Cancelled { task: String, reason: String },
}

/// Deployment mode: Running tasks whose agent pod is gone (or terminating
/// after the task outlived it) or offline are requeued; Pending tasks asked
/// to cancel, and Running ones whose agent is gone, become Cancelled.
/// `offline` are pod names the prober classifies offline. A task whose agent
/// looks offline but which heartbeated (or was claimed) within
/// `offline_after` is left alone: its agent is working, only its health
/// server is slow to answer, and the probe's verdict lags by an interval.
pub fn recovery<'a>(
    tasks: impl IntoIterator<Item = &'a AgentTask>,
    live_pods: &BTreeSet<String>,
    offline: &BTreeSet<String>,
    now: jiff::Timestamp,
    offline_after: Duration,
) -> Vec<Recovery> {
    let mut out = Vec::new();
    for task in tasks {
        let name = task.metadata.name.clone().unwrap_or_default();
        let phase = task.phase();
        if phase.is_finished() {
            continue;
        }
        let agent = task.status.as_ref().and_then(|s| s.agent.clone());
        if task.spec.cancel {
            let stoppable = phase == TaskPhase::Running
                && agent
                    .as_ref()
                    .is_some_and(|a| live_pods.contains(a) && !offline.contains(a));
            if !stoppable && phase != TaskPhase::Scheduled {
                out.push(Recovery::Cancelled {
                    task: name,
                    reason: match phase {
                        TaskPhase::Running => "cancelled; its agent is gone".into(),
                        _ => "cancelled before it started".into(),
                    },
                });
            }
            continue;
        }
        if phase != TaskPhase::Running {
            continue;
        }
        match agent {
            None => out.push(Recovery::Requeue {
                task: name,
                reason: "running with no agent".into(),
            }),
            Some(agent) if !live_pods.contains(&agent) => out.push(Recovery::Requeue {
                task: name,
                reason: format!("agent pod {agent} is gone"),
            }),
            Some(agent)
                if offline.contains(&agent)
                    && heartbeat_protection(task, now, offline_after).is_none() =>
            {
                out.push(Recovery::Requeue {
                    task: name,
                    reason: format!("agent {agent} is offline"),
                })
            }
            Some(_) => {}
        }
    }
    out
}

/// How much longer a Running task's own signs of life (`lastHeartbeat`, else
/// `claimedAt`) keep it from being requeued for an offline agent; None once
/// they are older than `offline_after` (or there are none).
pub fn heartbeat_protection(
    task: &AgentTask,
    now: jiff::Timestamp,
    offline_after: Duration,
) -> Option<Duration> {
    let status = task.status.as_ref()?;
    let last = [&status.last_heartbeat, &status.claimed_at]
        .into_iter()
        .flatten()
        .map(|t| t.0)
        .max()?;
    let age = now.duration_since(last);
    let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
    offline_after.checked_sub(age).filter(|d| !d.is_zero())
}

/// When to look again at Running tasks whose agent is offline but which
/// are still protected by a recent heartbeat (see [`recovery`]).
pub fn offline_recheck<'a>(
    tasks: impl IntoIterator<Item = &'a AgentTask>,
    offline: &BTreeSet<String>,
    now: jiff::Timestamp,
    offline_after: Duration,
) -> Option<Duration> {
    tasks
        .into_iter()
        .filter(|t| t.phase() == TaskPhase::Running && !t.spec.cancel)
        .filter(|t| {
            t.status
                .as_ref()
                .and_then(|s| s.agent.as_ref())
                .is_some_and(|a| offline.contains(a))
        })
        .filter_map(|t| heartbeat_protection(t, now, offline_after))
        .min()
}

// The task conditions the pool planner sets, owned by the task resource.
pub use crate::crd::{POOL_NOT_FOUND, UNCLAIMED};

/// What the pool looks like to a task waiting for an agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimOutlook {
    /// Ready live agents.
    pub ready_agents: u32,
    /// Ready agents running nothing.
    pub idle_agents: u32,
    /// Replicas the pool is at (or going to).
    pub replicas: u32,
    pub max_replicas: u32,
    /// Why the pool is frozen, when it is.
    pub frozen: Option<String>,
    pub draining: bool,
}

/// The Unclaimed conditions to write, and when to look again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnclaimedPlan {
    /// `(task, condition)`: the task's Unclaimed condition becomes this.
    pub changes: Vec<(String, Condition)>,
    /// The next Pending task crosses the timeout in this long.
    pub next_check: Option<Duration>,
}

/// Why nobody claims work in `outlook`, as a condition reason and the end
/// of a sentence.
fn unclaimed_because(outlook: &ClaimOutlook) -> (&'static str, String) {
    if outlook.draining {
        (
            "PoolDraining",
            "the pool is draining and hands out no new work".into(),
        )
    } else if let Some(why) = &outlook.frozen {
        ("PoolFrozen", format!("the pool is frozen ({why})"))
    } else if outlook.ready_agents == 0 {
        ("NoReadyAgents", "the pool has no ready agents".into())
    } else if outlook.idle_agents == 0 && outlook.replicas >= outlook.max_replicas {
        (
            "PoolAtMax",
            format!(
                "every agent is busy and the pool is at maxReplicas ({})",
                outlook.max_replicas
            ),
        )
    } else {
        (
            "NotClaimed",
            "ready agents have not claimed it (are they offline or failing?)".into(),
        )
    }
}

/// The Unclaimed condition a task gets when it is requeued: False as of
/// `now`, so its wait for an agent counts from the requeue.
pub fn requeued_condition(now: jiff::Timestamp) -> Condition {
    Condition {
        type_: UNCLAIMED.to_owned(),
        status: "False".to_owned(),
        reason: "Requeued".to_owned(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: Time(now),
    }
}

/// Deployment mode: Pending tasks waiting longer than `timeout` get an
/// Unclaimed condition saying why (draining, frozen, no ready agents, at
/// max); tasks an agent took since get it back to False. Only changes are
/// returned, so a steady state writes nothing. The wait counts from the
/// task's creation, or from its requeue.
pub fn unclaimed<'a>(
    tasks: impl IntoIterator<Item = &'a AgentTask>,
    outlook: &ClaimOutlook,
    timeout: Duration,
    now: jiff::Timestamp,
) -> UnclaimedPlan {
    let mut plan = UnclaimedPlan::default();
    let (reason, because) = unclaimed_because(outlook);
    for task in tasks {
        let phase = task.phase();
        if phase.is_finished() {
            continue;
        }
        let name = task.metadata.name.clone().unwrap_or_default();
        let previous: &[Condition] = task
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let current = previous.iter().find(|c| c.type_ == UNCLAIMED);
        let want = match phase {
            TaskPhase::Pending if !task.spec.cancel => {
                let Some(created) = task.metadata.creation_timestamp.as_ref() else {
                    continue;
                };
                // A requeued task waits anew from its requeue (see
                // [`requeued_condition`]), not from its creation.
                let since = current
                    .filter(|c| c.status == "False")
                    .map_or(created.0, |c| c.last_transition_time.0.max(created.0));
                let age = now.duration_since(since);
                let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
                if age < timeout {
                    let left = timeout - age;
                    plan.next_check = Some(plan.next_check.map_or(left, |n| n.min(left)));
                    continue;
                }
                condition(
                    previous,
                    UNCLAIMED,
                    true,
                    reason,
                    &format!(
                        "no agent claimed it within {}s: {because}",
                        timeout.as_secs()
                    ),
                    task.metadata.generation,
                    now,
                )
            }
            TaskPhase::Pending => continue,
            _ if current.is_some_and(|c| c.status == "True") => condition(
                previous,
                UNCLAIMED,
                false,
                "Claimed",
                "",
                task.metadata.generation,
                now,
            ),
            _ => continue,
        };
        let same = current.is_some_and(|c| {
            (&c.status, &c.reason, &c.message) == (&want.status, &want.reason, &want.message)
        });
        if !same {
            plan.changes.push((name, want));
        }
    }
    plan
}

/// A condition `type_` with `status`, keeping the transition time of the
/// previous one when the status did not change (so a steady pool's status
/// patch is a no-op).
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_owned();
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message: crate::text::sanitize_line(message),
        observed_generation: generation,
        last_transition_time,
    }
}

/// What a valid pool's conditions say, as the reconciler found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConditionFacts<'a> {
    /// Ready: status, reason, message.
    pub ready: (bool, &'a str, String),
    /// The freeze window's reason when frozen.
    pub frozen: Option<&'a str>,
    /// Message of a True Draining condition.
    pub draining: Option<&'a str>,
    /// Why the pool is degraded; empty when healthy.
    pub degraded: &'a str,
}

/// The five conditions of a valid pool (Ready, Invalid, Frozen, Draining,
/// Degraded), keeping each one's transition time while its status holds.
pub fn valid_pool_conditions(
    previous: &[Condition],
    facts: &PoolConditionFacts<'_>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Vec<Condition> {
    let c = |type_: &str, status: bool, reason: &str, message: &str| {
        condition(previous, type_, status, reason, message, generation, now)
    };
    let (ready, ready_reason, ready_message) = &facts.ready;
    vec![
        c("Ready", *ready, ready_reason, ready_message),
        c("Invalid", false, "Valid", ""),
        match facts.frozen {
            Some(why) => c("Frozen", true, "InFreezeWindow", why),
            None => c("Frozen", false, "NotFrozen", ""),
        },
        match facts.draining {
            Some(why) => c("Draining", true, "DrainRequested", why),
            None => c("Draining", false, "NotDraining", ""),
        },
        if facts.degraded.is_empty() {
            c("Degraded", false, "Healthy", "")
        } else {
            c("Degraded", true, "Degraded", facts.degraded)
        },
    ]
}

/// Whether the pool's conditions (by type) say the same in both lists,
/// ignoring transition times.
pub fn same_conditions(a: &[Condition], b: &[Condition]) -> bool {
    let key = |c: &[Condition]| -> BTreeMap<String, (String, String, String, Option<i64>)> {
        c.iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    (
                        c.status.clone(),
                        c.reason.clone(),
                        c.message.clone(),
                        c.observed_generation,
                    ),
                )
            })
            .collect()
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{AgentTaskSpec, AgentTaskStatus};

    fn task(name: &str, phase: TaskPhase, agent: Option<&str>, cancel: bool) -> AgentTask {
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
                cancel,
            },
        );
        t.status = Some(AgentTaskStatus {
            phase,
            agent: agent.map(str::to_owned),
            ..AgentTaskStatus::default()
        });
        t
    }

    fn pod(name: &str, ready: bool, terminating: bool, cost: Option<&str>) -> AgentPod {
        AgentPod {
            name: name.into(),
            ready,
            terminating,
            deletion_cost: cost.map(str::to_owned),
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tasks_are_counted_by_phase_and_running_ones_make_their_agent_busy() {
        let tasks = [
            task("a", TaskPhase::Pending, None, false),
            task("b", TaskPhase::Pending, None, true),
            task("c", TaskPhase::Running, Some("p-1"), false),
            task("d", TaskPhase::Running, Some("p-1"), false),
            task("e", TaskPhase::Scheduled, None, false),
            task("f", TaskPhase::Succeeded, Some("p-2"), false),
        ];
        let c = count_tasks(&tasks);
        assert_eq!((c.pending, c.scheduled, c.running), (1, 1, 2));
        assert_eq!(c.busy_agents, set(&["p-1"]));
    }

    #[test]
    fn agents_are_busy_idle_or_starting_and_terminating_pods_do_not_count() {
        let pods = [
            pod("a", true, false, None),
            pod("b", true, false, None),
            pod("c", false, false, None),
            pod("d", true, true, None),
        ];
        let c = count_agents(&pods, &set(&["a", "d"]));
        assert_eq!(
            c,
            AgentCounts {
                busy: 1,
                idle: 1,
                starting: 1,
                live: 3,
                ready: 2
            }
        );
    }

    #[test]
    fn idle_pods_get_a_lower_deletion_cost_than_busy_ones_and_only_changes_are_written() {
        type Case<'a> = (&'a [AgentPod], &'a [&'a str], &'a [(&'a str, &'a str)]);
        let cases: &[Case] = &[
            (
                &[pod("a", true, false, None), pod("b", true, false, None)],
                &["a"],
                &[("a", "1000"), ("b", "-1000")],
            ),
            (
                &[
                    pod("a", true, false, Some("1000")),
                    pod("b", true, false, Some("-1000")),
                ],
                &["a"],
                &[],
            ),
            (
                &[pod("a", true, false, Some("1000"))],
                &[],
                &[("a", "-1000")],
            ),
            (&[pod("a", true, true, None)], &["a"], &[]),
        ];
        for (pods, busy, want) in cases {
            let got = deletion_costs(pods, &set(busy));
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
            assert_eq!(got, want, "pods {pods:?} busy {busy:?}");
        }
        const { assert!(COST_IDLE < COST_BUSY) };
    }

    #[test]
    fn a_valid_pool_has_five_conditions_that_keep_their_transition_time() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let t1: jiff::Timestamp = "2026-01-01T00:05:00Z".parse().expect("ts");
        let calm = PoolConditionFacts {
            ready: (true, "AgentsReady", "2 of 2 agents ready".into()),
            frozen: None,
            draining: None,
            degraded: "",
        };
        let first = valid_pool_conditions(&[], &calm, Some(1), t0);
        let summary = |cs: &[Condition]| -> Vec<(String, String, String)> {
            cs.iter()
                .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
                .collect()
        };
        assert_eq!(
            summary(&first),
            [
                ("Ready", "True", "AgentsReady"),
                ("Invalid", "False", "Valid"),
                ("Frozen", "False", "NotFrozen"),
                ("Draining", "False", "NotDraining"),
                ("Degraded", "False", "Healthy"),
            ]
            .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
        );
        let busy = PoolConditionFacts {
            frozen: Some("release-freeze until 09:00"),
            draining: Some("draining"),
            degraded: "1 agent(s) offline",
            ..calm.clone()
        };
        let second = valid_pool_conditions(&first, &busy, Some(2), t1);
        for c in &second {
            let changed = c.type_ != "Ready" && c.type_ != "Invalid";
            assert_eq!(c.status == "True", changed || c.type_ == "Ready", "{c:?}");
            let since = if changed { t1 } else { t0 };
            assert_eq!(c.last_transition_time, Time(since), "{c:?}");
            assert_eq!(c.observed_generation, Some(2));
        }
        assert_eq!(second[2].message, "release-freeze until 09:00");
        assert_eq!(second[4].message, "1 agent(s) offline");
    }

    #[test]
    fn a_task_that_heartbeats_is_not_requeued_for_an_agent_that_looks_offline() {
        let now: jiff::Timestamp = "2026-01-01T00:10:00Z".parse().expect("ts");
        let at = |s: &str| Some(Time(s.parse().expect("ts")));
        let offline_after = Duration::from_secs(60);
        // (lastHeartbeat, claimedAt, requeued?, recheck after)
        let cases = [
            (at("2026-01-01T00:09:50Z"), None, false, Some(50)),
            (None, at("2026-01-01T00:09:30Z"), false, Some(30)),
            (
                at("2026-01-01T00:08:00Z"),
                at("2026-01-01T00:09:45Z"),
                false,
                Some(45),
            ),
            (at("2026-01-01T00:08:59Z"), None, true, None),
            (at("2026-01-01T00:09:00Z"), None, true, None),
            (None, None, true, None),
        ];
        for (heartbeat, claimed, requeued, recheck) in cases {
            let mut t = task("t", TaskPhase::Running, Some("silent"), false);
            if let Some(s) = t.status.as_mut() {
                s.last_heartbeat = heartbeat.clone();
                s.claimed_at = claimed.clone();
            }
            let got = recovery(
                [&t],
                &set(&["silent"]),
                &set(&["silent"]),
                now,
                offline_after,
            );
            assert_eq!(!got.is_empty(), requeued, "{heartbeat:?} {claimed:?}");
            assert_eq!(
                offline_recheck([&t], &set(&["silent"]), now, offline_after),
                recheck.map(Duration::from_secs),
                "{heartbeat:?} {claimed:?}"
            );
            // A gone pod is requeued whatever the heartbeat says.
            let gone = recovery([&t], &set(&[]), &set(&[]), now, offline_after);
            assert_eq!(gone.len(), 1);
        }
    }

    #[test]
    fn running_tasks_without_a_live_agent_are_requeued_and_cancels_are_carried_out() {
        let tasks = [
            task("ok", TaskPhase::Running, Some("live"), false),
            task("gone", TaskPhase::Running, Some("dead"), false),
            task("off", TaskPhase::Running, Some("silent"), false),
            task("none", TaskPhase::Running, None, false),
            task("wait", TaskPhase::Pending, None, false),
            task("done", TaskPhase::Succeeded, Some("dead"), false),
            task("cancel-pending", TaskPhase::Pending, None, true),
            task("cancel-live", TaskPhase::Running, Some("live"), true),
            task("cancel-dead", TaskPhase::Running, Some("dead"), true),
        ];
        let now: jiff::Timestamp = "2026-01-01T00:10:00Z".parse().expect("ts");
        let long_ago = Time("2026-01-01T00:00:00Z".parse().expect("ts"));
        let mut tasks = tasks;
        for t in &mut tasks {
            if let Some(s) = t.status.as_mut() {
                s.last_heartbeat = Some(long_ago.clone());
            }
        }
        let got = recovery(
            &tasks,
            &set(&["live", "silent"]),
            &set(&["silent"]),
            now,
            Duration::from_secs(60),
        );
        let names: Vec<(&str, bool)> = got
            .iter()
            .map(|r| match r {
                Recovery::Requeue { task, .. } => (task.as_str(), true),
                Recovery::Cancelled { task, .. } => (task.as_str(), false),
            })
            .collect();
        assert_eq!(
            names,
            vec![
                ("gone", true),
                ("off", true),
                ("none", true),
                ("cancel-pending", false),
                ("cancel-dead", false)
            ]
        );
        match &got[0] {
            Recovery::Requeue { reason, .. } => assert_eq!(reason, "agent pod dead is gone"),
            other => panic!("{other:?}"),
        }
    }

    fn aged(mut t: AgentTask, created: jiff::Timestamp) -> AgentTask {
        t.metadata.creation_timestamp = Some(Time(created));
        t
    }

    #[test]
    fn a_pending_task_past_the_acquire_timeout_is_unclaimed_and_the_pool_state_says_why() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let now = t0 + jiff::SignedDuration::from_secs(120);
        let open = ClaimOutlook {
            ready_agents: 2,
            idle_agents: 1,
            replicas: 2,
            max_replicas: 5,
            frozen: None,
            draining: false,
        };
        let cases = [
            (
                ClaimOutlook {
                    draining: true,
                    frozen: Some("x".into()),
                    ..open.clone()
                },
                "PoolDraining",
                "draining",
            ),
            (
                ClaimOutlook {
                    frozen: Some("release freeze".into()),
                    ..open.clone()
                },
                "PoolFrozen",
                "frozen (release freeze)",
            ),
            (
                ClaimOutlook {
                    ready_agents: 0,
                    idle_agents: 0,
                    ..open.clone()
                },
                "NoReadyAgents",
                "no ready agents",
            ),
            (
                ClaimOutlook {
                    idle_agents: 0,
                    replicas: 5,
                    ..open.clone()
                },
                "PoolAtMax",
                "maxReplicas (5)",
            ),
            (open.clone(), "NotClaimed", "have not claimed it"),
        ];
        for (outlook, reason, says) in cases {
            let tasks = [aged(task("old", TaskPhase::Pending, None, false), t0)];
            let plan = unclaimed(&tasks, &outlook, Duration::from_secs(60), now);
            assert_eq!(plan.changes.len(), 1, "{outlook:?}");
            let (name, c) = &plan.changes[0];
            assert_eq!(name, "old");
            assert_eq!((c.type_.as_str(), c.status.as_str()), (UNCLAIMED, "True"));
            assert_eq!(c.reason, reason);
            assert!(c.message.contains(says), "{}", c.message);
            assert!(
                c.message.starts_with("no agent claimed it within 60s"),
                "{}",
                c.message
            );
        }
    }

    #[test]
    fn only_changes_to_the_unclaimed_condition_are_planned() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let at = |s: i64| t0 + jiff::SignedDuration::from_secs(s);
        let outlook = ClaimOutlook {
            max_replicas: 3,
            ..ClaimOutlook::default()
        };
        let timeout = Duration::from_secs(60);
        let young = aged(task("young", TaskPhase::Pending, None, false), at(50));
        let cancelled = aged(task("cancelled", TaskPhase::Pending, None, true), t0);
        let done = aged(task("done", TaskPhase::Succeeded, None, false), t0);
        let mut marked = aged(task("marked", TaskPhase::Pending, None, false), t0);
        let first = unclaimed([&marked], &outlook, timeout, at(100));
        marked.status.as_mut().expect("status").conditions = vec![first.changes[0].1.clone()];
        // Already says so: nothing to write.
        let plan = unclaimed(
            [&young, &cancelled, &done, &marked],
            &outlook,
            timeout,
            at(100),
        );
        assert_eq!(plan.changes, vec![]);
        assert_eq!(
            plan.next_check,
            Some(Duration::from_secs(10)),
            "young crosses at 110 s"
        );
        // The pool changed: the reason follows.
        let frozen = ClaimOutlook {
            frozen: Some("f".into()),
            ..outlook.clone()
        };
        let plan = unclaimed([&marked], &frozen, timeout, at(100));
        assert_eq!(plan.changes[0].1.reason, "PoolFrozen");
        // Claimed since: back to False, once.
        let mut claimed = marked.clone();
        claimed.status.as_mut().expect("status").phase = TaskPhase::Running;
        let plan = unclaimed([&claimed], &outlook, timeout, at(100));
        assert_eq!(
            (
                plan.changes[0].1.status.as_str(),
                plan.changes[0].1.reason.as_str()
            ),
            ("False", "Claimed")
        );
        claimed.status.as_mut().expect("status").conditions = vec![plan.changes[0].1.clone()];
        assert_eq!(
            unclaimed([&claimed], &outlook, timeout, at(101)).changes,
            vec![]
        );
        // Requeued just now: the wait starts again.
        let mut requeued = aged(task("requeued", TaskPhase::Pending, None, false), t0);
        requeued.status.as_mut().expect("status").conditions = vec![requeued_condition(at(90))];
        let plan = unclaimed([&requeued], &outlook, timeout, at(100));
        assert_eq!(plan.changes, vec![]);
        assert_eq!(plan.next_check, Some(Duration::from_secs(50)));
        let plan = unclaimed([&requeued], &outlook, timeout, at(150));
        assert_eq!(plan.changes[0].1.reason, "NoReadyAgents");
        // A running task that never waited long gets nothing.
        let quick = aged(task("quick", TaskPhase::Running, Some("a"), false), t0);
        assert_eq!(
            unclaimed([&quick], &outlook, timeout, at(100)).changes,
            vec![]
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let t1: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().expect("ts");
        let first = condition(&[], "Frozen", true, "InWindow", "m", Some(1), t0);
        let again = condition(
            std::slice::from_ref(&first),
            "Frozen",
            true,
            "InWindow",
            "m2",
            Some(1),
            t1,
        );
        assert_eq!(again.last_transition_time, Time(t0));
        let flipped = condition(
            std::slice::from_ref(&first),
            "Frozen",
            false,
            "Open",
            "",
            Some(1),
            t1,
        );
        assert_eq!(flipped.last_transition_time, Time(t1));
        assert!(same_conditions(
            std::slice::from_ref(&first),
            std::slice::from_ref(&first)
        ));
        assert!(!same_conditions(&[first], &[again]));
    }

    #[test]
    fn condition_messages_carry_no_terminal_control() {
        let c = condition(
            &[],
            "Unclaimed",
            true,
            "NotClaimed",
            "pod x: \u{1b}[2Jwaiting\nImagePullBackOff",
            None,
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(c.message, "pod x: waiting ImagePullBackOff");
    }
}
