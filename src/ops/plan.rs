//! Planning an action: from the objects as they are now to the objects as
//! they should be, the bounds checks that refuse it, and its impact in
//! words. Pure (time is an input); [`super::exec`] reads and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::action::{Action, TaskSelection};
use super::diff;
use super::error::{OpsError, Result};
use crate::crd::{
    ANNOTATION_DEBUG, ANNOTATION_DRAIN, AgentPool, AgentTask, ExecutionMode, HoldStatus,
    MAX_REPLICAS, ReplicaHold, TaskPhase, k8s_time,
};
use crate::plan::capacity::{self, CapacityWindow, OpenCapacity};
use crate::units::format_duration;

/// Kinds an action writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Kind {
    AgentPool,
    Pod,
    AgentTask,
    Job,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::AgentPool => "AgentPool",
            Kind::Pod => "Pod",
            Kind::AgentTask => "AgentTask",
            Kind::Job => "Job",
        }
    }
}

/// One object write.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub kind: Kind,
    pub name: String,
    /// Write the status subresource.
    pub status: bool,
    /// Delete the object (then `after` is `before`).
    pub delete: bool,
    /// The object as read (with its resourceVersion).
    pub before: Value,
    /// The object as it should be.
    pub after: Value,
}

impl Change {
    /// `AgentPool/alpha`.
    pub fn object(&self) -> String {
        format!("{}/{}", self.kind.as_str(), self.name)
    }

    /// The merge patch to send: what changed, with the resourceVersion read
    /// as a precondition (a 409 means someone wrote in between).
    pub fn patch(&self) -> Value {
        let mut patch = diff::merge_patch(&self.before, &self.after);
        if !patch.is_object() {
            patch = json!({});
        }
        patch["metadata"]["resourceVersion"] = self.before["metadata"]["resourceVersion"].clone();
        patch
    }

    /// `path: before → after` lines of this change as planned.
    pub fn diff(&self) -> Vec<String> {
        if self.delete {
            vec!["(deleted)".into()]
        } else {
            diff::lines(&self.before, &self.after)
        }
    }
}

/// What an action will do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// `drain pool alpha`.
    pub summary: String,
    pub changes: Vec<Change>,
    /// What it means for agents and tasks, in words.
    pub impact: Vec<String>,
    /// Targets left alone because they are already as asked.
    pub unchanged: Vec<String>,
}

/// What the planner reads: the objects an action touches.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub namespace: String,
    /// The pool named by a pool action, if it exists.
    pub pool: Option<AgentPool>,
    /// Every pool in the namespace, for "no such pool; pools there: …".
    pub pool_names: Vec<String>,
    /// The pool's agent pods.
    pub agents: Vec<Pod>,
    /// The pool's tasks.
    pub pool_tasks: Vec<AgentTask>,
    /// Tasks selected by a task action.
    pub tasks: Vec<AgentTask>,
    /// Names given that match no task.
    pub missing_tasks: Vec<String>,
    /// Job (as JSON) of a selected task that has one, by task name.
    pub jobs: BTreeMap<String, Value>,
}

/// Plans `action` on `state`, or refuses it naming the flag and what is valid.
pub fn plan(action: &Action, state: &State, actor: &str, now: Timestamp) -> Result<Plan> {
    match action {
        Action::ScalePool { pool, min, max } => scale_bounds(state, pool, *min, *max, now),
        Action::HoldReplicas {
            pool,
            replicas,
            duration,
            force,
        } => hold(state, pool, *replicas, *duration, *force, actor, now),
        Action::ClearHold { pool } => clear_hold(state, pool, now),
        Action::DrainPool { pool, undo } => drain_pool(state, pool, *undo, now),
        Action::DrainAgent { pool, agent, undo } => drain_agent(state, pool, agent, *undo),
        Action::DebugLogs { pool, agent, on } => debug_logs(state, pool, agent.as_deref(), *on),
        Action::CancelTasks(sel) => cancel(state, sel),
        Action::RetryTasks(sel) => retry(state, sel, actor, now),
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn require_pool<'a>(state: &'a State, name: &str) -> Result<&'a AgentPool> {
    state.pool.as_ref().ok_or_else(|| OpsError::UnknownPool {
        pool: name.to_owned(),
        namespace: state.namespace.clone(),
        known: state.pool_names.clone(),
    })
}

/// `1 busy agent will finish its task first` / `2 busy agents will finish their task first`.
fn busy_first(n: usize) -> String {
    if n == 1 {
        "1 busy agent will finish its task first".into()
    } else {
        format!("{n} busy agents will finish their task first")
    }
}

/// `one` for 1, `many` otherwise (verbs that agree with a count).
fn agree<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Agent pod name → the task it runs.
fn busy_agents(state: &State) -> BTreeMap<String, String> {
    state
        .pool_tasks
        .iter()
        .filter(|t| t.phase() == TaskPhase::Running)
        .filter_map(|t| Some((t.status.as_ref()?.agent.clone()?, t.name_any())))
        .collect()
}

fn live_agents(state: &State) -> Vec<&Pod> {
    state
        .agents
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn count_phase(state: &State, phase: TaskPhase) -> usize {
    state
        .pool_tasks
        .iter()
        .filter(|t| t.phase() == phase && !(phase == TaskPhase::Pending && t.spec.cancel))
        .count()
}

/// `until Sat 02:00 UTC` out of the controller's frozen reason.
fn frozen_until(pool: &AgentPool) -> Option<String> {
    let status = pool.status.as_ref().filter(|s| s.frozen)?;
    let reason = status.frozen_reason.as_deref().unwrap_or_default();
    Some(match reason.find("until ") {
        Some(i) => reason[i..].to_owned(),
        None => "until its freeze window ends".to_owned(),
    })
}

/// What the autoscaler decides for `pool` (with its new bounds) on the
/// work `state` holds, without the history only the leader has: the
/// stabilization window and the cooldowns say when, not where to.
fn autoscale_with(
    state: &State,
    pool: &AgentPool,
    current: i32,
    capacity: Option<OpenCapacity>,
    now: Timestamp,
) -> crate::plan::autoscale::ScaleDecision {
    use crate::plan::autoscale::{AutoscaleInput, Recommendations, decide};
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let whole = |n: i32| u32::try_from(n.max(0)).unwrap_or(0);
    let busy = count(busy_agents(state).len());
    let live = count(live_agents(state).len());
    decide(&AutoscaleInput {
        pending_tasks: count(count_phase(state, TaskPhase::Pending)),
        running_tasks: count(count_phase(state, TaskPhase::Running)),
        busy_agents: busy,
        idle_agents: live.saturating_sub(busy),
        starting_agents: 0,
        current_replicas: whole(current),
        concurrency: whole(pool.spec.concurrency),
        min_replicas: whole(pool.spec.min_replicas),
        max_replicas: whole(pool.spec.max_replicas),
        scale_up_step: pool.spec.scale_up_step.map(whole),
        cooldown_up: Duration::ZERO,
        cooldown_down: Duration::ZERO,
        scale_down_window: Duration::ZERO,
        recommendations: Recommendations::default(),
        frozen: None,
        capacity,
        draining: false,
        hold: None,
        last_scale_time: None,
        now,
    })
}

fn current_replicas(pool: &AgentPool) -> i32 {
    pool.status.as_ref().map_or(0, |s| s.desired_replicas)
}

fn replicas_flag(flag: &'static str, n: i32) -> Result<()> {
    if n < 0 {
        return Err(OpsError::Refused {
            flag,
            message: format!("{n} is negative; replica counts are 0 or more"),
        });
    }
    if n > MAX_REPLICAS {
        return Err(OpsError::Refused {
            flag,
            message: format!("{n} is above the limit of {MAX_REPLICAS}"),
        });
    }
    Ok(())
}

fn pool_change(pool: &AgentPool, after: &AgentPool) -> Change {
    Change {
        kind: Kind::AgentPool,
        name: pool.name_any(),
        status: false,
        delete: false,
        before: to_value(pool),
        after: to_value(after),
    }
}

fn scale_bounds(
    state: &State,
    name: &str,
    min: Option<i32>,
    max: Option<i32>,
    now: Timestamp,
) -> Result<Plan> {
    let pool = require_pool(state, name)?;
    if min.is_none() && max.is_none() {
        return Err(OpsError::Refused {
            flag: "--min/--max",
            message: "give --min, --max, --replicas or --clear".into(),
        });
    }
    if let Some(n) = min {
        replicas_flag("--min", n)?;
    }
    if let Some(n) = max {
        replicas_flag("--max", n)?;
    }
    let (old_min, old_max) = (pool.spec.min_replicas, pool.spec.max_replicas);
    let new_min = min.unwrap_or(old_min);
    let new_max = max.unwrap_or(old_max);
    if new_min > new_max {
        let (flag, message) = match (min, max) {
            (Some(_), None) => (
                "--min",
                format!("{new_min} is above the pool's maxReplicas {old_max}; give --max too"),
            ),
            (None, Some(_)) => (
                "--max",
                format!("{new_max} is below the pool's minReplicas {old_min}; give --min too"),
            ),
            _ => ("--min", format!("{new_min} is above --max {new_max}")),
        };
        return Err(OpsError::Refused { flag, message });
    }
    let mut plan = Plan {
        summary: format!("scale pool {name}"),
        ..Plan::default()
    };
    if (new_min, new_max) == (old_min, old_max) {
        plan.unchanged.push(format!(
            "pool {name} already has minReplicas {old_min} and maxReplicas {old_max}"
        ));
        return Ok(plan);
    }
    let mut after = pool.clone();
    after.spec.min_replicas = new_min;
    after.spec.max_replicas = new_max;
    let windows = capacity_windows(pool, &after)?;
    plan.changes.push(pool_change(pool, &after));
    let (open_window, next_window) =
        overridden_by_window(&windows, new_min, new_max, min, max, now);

    let current = current_replicas(pool);
    let busy = busy_agents(state).len();
    let which = match (new_min != old_min, new_max != old_max) {
        (true, false) => "the new minimum applies",
        (false, true) => "the new maximum applies",
        _ => "the new bounds apply",
    };
    let hold = pool.status.as_ref().and_then(|s| s.hold.clone());
    if pool.spec.drain {
        plan.impact.push(format!(
            "pool is draining; {which} after `agentdeck drain {name} --undo`"
        ));
    } else if let Some(h) = hold {
        plan.impact.push(format!(
            "a hold is in force ({}); {which} when it ends (the hold itself stays within the bounds)",
            h.summary
        ));
    } else if let Some(until) = frozen_until(pool) {
        plan.impact
            .push(format!("pool is frozen {until}, {which} then"));
    } else if let Some(open) = open_window {
        plan.impact.push(open);
    } else if new_min > current {
        plan.impact.push(format!(
            "the pool grows from {current} to at least {new_min} agents"
        ));
    } else if new_max < current {
        plan.impact.push(format!(
            "the pool shrinks from {current} to at most {new_max} agents; idle agents go first"
        ));
        if busy > usize::try_from(new_max).unwrap_or(0) {
            plan.impact.push(busy_first(busy));
        }
    } else {
        // Inside the bounds the autoscaler still decides again with them:
        // a lower minimum lets an idle pool shrink.
        let open = capacity::open_at(&windows, u32::try_from(new_max.max(0)).unwrap_or(0), now);
        plan.impact.push(autoscaler_impact(
            state,
            &after,
            (current, open),
            (new_min, new_max),
            now,
        ));
    }
    plan.impact.extend(next_window);
    if pool.spec.execution_mode == ExecutionMode::Job && new_max != old_max {
        plan.impact.push(format!(
            "job mode: at most {} task Jobs run at once",
            pool.spec.max_in_flight.unwrap_or(new_max)
        ));
    }
    Ok(plan)
}

/// What the autoscaler does with new bounds it is inside of: grow,
/// shrink (within its stabilization window) or leave the pool.
fn autoscaler_impact(
    state: &State,
    after: &AgentPool,
    (current, open): (i32, Option<OpenCapacity>),
    (new_min, new_max): (i32, i32),
    now: Timestamp,
) -> String {
    let decision = autoscale_with(state, after, current, open, now);
    let desired = i32::try_from(decision.desired).unwrap_or(current);
    let window = after.spec.scale_down_stabilization_seconds;
    if desired < current {
        let when = if window > 0 {
            format!(
                " within the scale-down stabilization window of {}",
                format_duration(Duration::from_secs(window.unsigned_abs()))
            )
        } else {
            " at once".to_owned()
        };
        format!(
            "the autoscaler shrinks the pool from {current} to {desired} agents{when} ({}); idle agents go first",
            decision.reason
        )
    } else if desired > current {
        format!(
            "the autoscaler grows the pool from {current} to {desired} agents ({})",
            decision.reason
        )
    } else {
        format!(
            "no agent changes now ({current} agents); the autoscaler stays between {new_min} and {new_max}"
        )
    }
}

/// The pool's capacity windows with its new maximum. A new maximum below
/// the minimum of a window without a maximum of its own is refused (it
/// would leave the pool invalid); windows already invalid say nothing.
fn capacity_windows(pool: &AgentPool, after: &AgentPool) -> Result<Vec<CapacityWindow>> {
    let parse = |p: &AgentPool| {
        capacity::parse_all(
            &p.spec.capacity_schedules,
            p.spec.max_replicas,
            &jiff::tz::TimeZone::UTC,
        )
    };
    match (parse(pool), parse(after)) {
        (_, Ok(windows)) => Ok(windows),
        (Ok(_), Err(errors)) => Err(OpsError::Refused {
            flag: "--max",
            message: format!(
                "{} would leave the pool invalid: {}",
                after.spec.max_replicas, errors[0]
            ),
        }),
        (Err(_), Err(_)) => Ok(Vec::new()),
    }
}

/// `the hold overrides capacity window office-hours (min 4, max 5)`, when
/// one is open.
fn window_under_hold(pool: &AgentPool, now: Timestamp) -> Option<String> {
    let windows = capacity::parse_all(
        &pool.spec.capacity_schedules,
        pool.spec.max_replicas,
        &jiff::tz::TimeZone::UTC,
    )
    .ok()?;
    let max = u32::try_from(pool.spec.max_replicas.max(0)).unwrap_or(0);
    let open = capacity::open_at(&windows, max, now)?;
    Some(format!(
        "the hold overrides capacity window {} (min {}, max {}) while it lasts",
        open.open.join("+"),
        open.bounds.min,
        open.bounds.max
    ))
}

/// What the scale preview says of bounds a capacity window replaces: now,
/// when one is open (the pool keeps the window's bounds), else when the
/// next one opens. A window replaces the minimum always and the maximum
/// when it sets one.
fn overridden_by_window(
    windows: &[CapacityWindow],
    new_min: i32,
    new_max: i32,
    min: Option<i32>,
    max: Option<i32>,
    now: Timestamp,
) -> (Option<String>, Option<String>) {
    let whole = |n: i32| u32::try_from(n.max(0)).unwrap_or(0);
    let bounds = capacity::Bounds {
        min: whole(new_min),
        max: whole(new_max),
    };
    let typed =
        |open: &OpenCapacity| match (min.is_some(), max.is_some() && open.max_from.is_some()) {
            (true, true) => Some(("--min and --max", "apply")),
            (true, false) => Some(("--min", "applies")),
            (false, true) => Some(("--max", "applies")),
            (false, false) => None,
        };
    if let Some(open) = capacity::open_at(windows, bounds.max, now) {
        let line = typed(&open).map(|(typed, applies)| {
            format!(
                "capacity window {} is open: {typed} {applies} only once it closes; until then min {}, max {} ({})",
                open.open.join("+"),
                open.bounds.min,
                open.bounds.max,
                capacity::summary(windows, bounds, now).unwrap_or_default()
            )
        });
        return (line, None);
    }
    let next = capacity::next_change(windows, bounds, now).and_then(|change| {
        let next = change.then_open.as_ref()?;
        let (typed, _) = typed(next)?;
        Some(format!(
            "capacity window {} replaces {typed} while it is open, from {}: min {}, max {}",
            next.open.join("+"),
            change.at,
            change.then.min,
            change.then.max
        ))
    });
    (None, next)
}

fn hold(
    state: &State,
    name: &str,
    replicas: i32,
    for_: Option<Duration>,
    force: bool,
    actor: &str,
    now: Timestamp,
) -> Result<Plan> {
    let pool = require_pool(state, name)?;
    replicas_flag("--replicas", replicas)?;
    if pool.spec.execution_mode == ExecutionMode::Job {
        return Err(OpsError::Refused {
            flag: "--replicas",
            message: format!(
                "pool {name} runs in job mode (one Job per task), which has no replicas to hold; \
                 limit the tasks in flight with --max"
            ),
        });
    }
    let (min, max) = (pool.spec.min_replicas, pool.spec.max_replicas);
    let mut after = pool.clone();
    let mut impact = Vec::new();
    if replicas < min || replicas > max {
        if !force {
            let (side, bound) = if replicas > max {
                ("above the pool's maxReplicas", max)
            } else {
                ("below the pool's minReplicas", min)
            };
            return Err(OpsError::Refused {
                flag: "--replicas",
                message: format!(
                    "{replicas} is {side} {bound} (bounds {min}..{max}); choose {min}..{max}, \
                     or add --force to widen the bounds to {replicas}"
                ),
            });
        }
        if replicas > max {
            after.spec.max_replicas = replicas;
            impact.push(format!(
                "--force widens maxReplicas {max} → {replicas}; it stays so after the hold ends"
            ));
        } else {
            after.spec.min_replicas = replicas;
            impact.push(format!(
                "--force lowers minReplicas {min} → {replicas}; it stays so after the hold ends"
            ));
        }
    }
    let until = for_.map(|d| hold_until(now, d)).transpose()?;
    let new_hold = ReplicaHold {
        replicas,
        until: until.map(k8s_time),
        set_by: actor.to_owned(),
        set_at: Some(k8s_time(now)),
    };
    if let Some(old) = pool.spec.hold.as_ref().filter(|h| h.active_at(now)) {
        impact.push(format!("replaces the hold {}", old.summary()));
    }
    after.spec.hold = Some(new_hold);
    let current = current_replicas(pool);
    let busy = busy_agents(state).len();
    let when = match (until, for_) {
        (Some(u), Some(d)) => format!(
            "until {} (for {}), then decides again from pending work",
            u.strftime("%Y-%m-%d %H:%M UTC"),
            format_duration(d)
        ),
        _ => format!("until `agentdeck scale {name} --clear`"),
    };
    impact.push(format!(
        "the autoscaler keeps {} {when}",
        plural(usize::try_from(replicas).unwrap_or(0), "agent", "agents")
    ));
    if pool.spec.drain {
        impact.push(format!(
            "pool is draining; the hold applies after `agentdeck drain {name} --undo`"
        ));
    } else {
        if replicas != current {
            impact.push(format!(
                "the pool goes from {current} to {replicas} agents now"
            ));
        }
        if busy > usize::try_from(replicas).unwrap_or(0) {
            impact.push(busy_first(busy));
        }
        if let Some(until) = frozen_until(pool) {
            impact.push(format!(
                "pool is frozen {until}; the hold overrides the freeze window"
            ));
        }
        if let Some(line) = window_under_hold(&after, now) {
            impact.push(line);
        }
        let pending = count_phase(state, TaskPhase::Pending);
        if pending > 0 && replicas < current {
            impact.push(format!(
                "{} {} queued longer",
                plural(pending, "pending task", "pending tasks"),
                agree(pending, "stays", "stay")
            ));
        }
    }
    Ok(Plan {
        summary: format!("hold pool {name} at {replicas}"),
        changes: vec![pool_change(pool, &after)],
        impact,
        unchanged: Vec::new(),
    })
}

/// When a hold `for` `d` from `now` ends; a span past the calendar is
/// refused.
fn hold_until(now: Timestamp, d: Duration) -> Result<Timestamp> {
    let too_long = || OpsError::Refused {
        flag: "--for",
        message: format!("{} is too long", format_duration(d)),
    };
    let span = jiff::SignedDuration::try_from(d).map_err(|_| too_long())?;
    now.checked_add(span).map_err(|_| too_long())
}

fn clear_hold(state: &State, name: &str, now: Timestamp) -> Result<Plan> {
    let pool = require_pool(state, name)?;
    let mut plan = Plan {
        summary: format!("clear the hold of pool {name}"),
        ..Plan::default()
    };
    let Some(old) = &pool.spec.hold else {
        plan.unchanged.push(format!("pool {name} has no hold"));
        return Ok(plan);
    };
    let mut after = pool.clone();
    after.spec.hold = None;
    plan.changes.push(pool_change(pool, &after));
    if !old.active_at(now) {
        plan.impact
            .push(format!("the hold {} had ended already", old.summary()));
    }
    let work = count_phase(state, TaskPhase::Pending) + count_phase(state, TaskPhase::Running);
    let concurrency = usize::try_from(pool.spec.concurrency.max(1)).unwrap_or(1);
    let need = i32::try_from(work.div_ceil(concurrency))
        .unwrap_or(i32::MAX)
        .clamp(
            pool.spec.min_replicas,
            pool.spec.max_replicas.max(pool.spec.min_replicas),
        );
    plan.impact.push(format!(
        "the autoscaler decides again: {} pending, {} running → about {need} agents (now {})",
        count_phase(state, TaskPhase::Pending),
        count_phase(state, TaskPhase::Running),
        current_replicas(pool)
    ));
    Ok(plan)
}

fn drain_pool(state: &State, name: &str, undo: bool, now: Timestamp) -> Result<Plan> {
    let pool = require_pool(state, name)?;
    let mut plan = Plan {
        summary: format!("{} pool {name}", if undo { "undrain" } else { "drain" }),
        ..Plan::default()
    };
    if pool.spec.drain != undo {
        plan.unchanged.push(format!(
            "pool {name} is {} already",
            if undo { "not draining" } else { "draining" }
        ));
        return Ok(plan);
    }
    let mut after = pool.clone();
    after.spec.drain = !undo;
    plan.changes.push(pool_change(pool, &after));
    let busy = busy_agents(state);
    let live = live_agents(state);
    let pending = count_phase(state, TaskPhase::Pending);
    if undo {
        plan.impact
            .push("agents claim work again; the autoscaler scales on pending work".into());
        if pending > 0 {
            plan.impact.push(format!(
                "{} can start",
                plural(pending, "pending task", "pending tasks")
            ));
        }
        let own: Vec<String> = live
            .iter()
            .filter(|p| annotation(p, ANNOTATION_DRAIN))
            .map(|p| p.name_any())
            .collect();
        if !own.is_empty() {
            plan.impact.push(format!(
                "{} stay drained by their own annotation (undo with `agentdeck drain {name} AGENT --undo`)",
                own.join(", ")
            ));
        }
        return Ok(plan);
    }
    if !busy.is_empty() {
        let tasks: Vec<&str> = busy.values().map(String::as_str).collect();
        plan.impact
            .push(format!("{} ({})", busy_first(busy.len()), tasks.join(", ")));
    }
    let idle = live
        .iter()
        .filter(|p| !busy.contains_key(&p.name_any()))
        .count();
    if idle > 0 {
        plan.impact.push(format!(
            "{} {}",
            plural(idle, "idle agent", "idle agents"),
            agree(
                idle,
                "claims nothing new and goes now",
                "claim nothing new and go now"
            )
        ));
    }
    if pool.spec.execution_mode == ExecutionMode::Deployment {
        plan.impact
            .push("the pool scales to 0 once every agent is idle".into());
    }
    if pending > 0 {
        plan.impact.push(format!(
            "{} {} until `agentdeck drain {name} --undo`",
            plural(pending, "pending task", "pending tasks"),
            agree(pending, "waits", "wait")
        ));
    }
    if let Some(h) = HoldStatus::of(pool.spec.hold.as_ref(), now) {
        plan.impact.push(format!(
            "the hold ({}) is ignored while draining",
            h.summary
        ));
    }
    Ok(plan)
}

fn annotation(pod: &Pod, key: &str) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .is_some_and(|v| v == "true")
}

fn require_agent<'a>(state: &'a State, pool: &str, agent: &str) -> Result<&'a Pod> {
    state
        .agents
        .iter()
        .find(|p| p.name_any() == agent)
        .ok_or_else(|| OpsError::UnknownAgent {
            pool: pool.to_owned(),
            agent: agent.to_owned(),
            known: live_agents(state).iter().map(|p| p.name_any()).collect(),
        })
}

fn annotate(pod: &Pod, key: &str, on: bool) -> Change {
    let mut after = pod.clone();
    let annotations = after
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if on {
        annotations.insert(key.to_owned(), "true".to_owned());
    } else {
        annotations.remove(key);
    }
    Change {
        kind: Kind::Pod,
        name: pod.name_any(),
        status: false,
        delete: false,
        before: to_value(pod),
        after: to_value(&after),
    }
}

fn drain_agent(state: &State, pool_name: &str, agent: &str, undo: bool) -> Result<Plan> {
    let pool = require_pool(state, pool_name)?;
    let pod = require_agent(state, pool_name, agent)?;
    let mut plan = Plan {
        summary: format!(
            "{} agent {agent} of pool {pool_name}",
            if undo { "undrain" } else { "drain" }
        ),
        ..Plan::default()
    };
    if annotation(pod, ANNOTATION_DRAIN) != undo {
        plan.unchanged.push(format!(
            "agent {agent} is {} already",
            if undo { "not drained" } else { "drained" }
        ));
        return Ok(plan);
    }
    plan.changes.push(annotate(pod, ANNOTATION_DRAIN, !undo));
    let busy = busy_agents(state);
    if undo {
        plan.impact.push(format!("agent {agent} claims work again"));
        if pool.spec.drain {
            plan.impact.push(format!(
                "pool {pool_name} itself is draining, so {agent} still claims nothing until it is undone"
            ));
        }
    } else {
        match busy.get(agent) {
            Some(task) => plan.impact.push(format!(
                "agent {agent} is busy with task {task} and will finish it first, then claim nothing new"
            )),
            None => plan.impact.push(format!(
                "agent {agent} is idle and claims nothing new"
            )),
        }
        plan.impact.push(
            "it keeps running (the pool's replica count is unchanged); delete the pod to replace it"
                .into(),
        );
    }
    Ok(plan)
}

fn debug_logs(state: &State, pool_name: &str, agent: Option<&str>, on: bool) -> Result<Plan> {
    let pool = require_pool(state, pool_name)?;
    let word = if on { "on" } else { "off" };
    let mut plan = Plan {
        summary: match agent {
            Some(a) => format!("debug logs {word} for agent {a} of pool {pool_name}"),
            None => format!("debug logs {word} for pool {pool_name}"),
        },
        ..Plan::default()
    };
    let switched = if on {
        "switch to debug logs within a second, no restart"
    } else {
        "go back to their configured log level within a second"
    };
    match agent {
        Some(a) => {
            let pod = require_agent(state, pool_name, a)?;
            if annotation(pod, ANNOTATION_DEBUG) == on {
                plan.unchanged
                    .push(format!("agent {a} has debug logs {word} already"));
                return Ok(plan);
            }
            plan.changes.push(annotate(pod, ANNOTATION_DEBUG, on));
            plan.impact.push(format!("agent {a}: {switched}"));
            if !on && pool.spec.debug {
                plan.impact.push(format!(
                    "pool {pool_name} has debug logs on for every agent, so {a} keeps them"
                ));
            }
        }
        None => {
            if pool.spec.debug == on {
                plan.unchanged
                    .push(format!("pool {pool_name} has debug logs {word} already"));
                return Ok(plan);
            }
            let mut after = pool.clone();
            after.spec.debug = on;
            plan.changes.push(pool_change(pool, &after));
            let n = live_agents(state).len();
            plan.impact
                .push(format!("{}: {switched}", plural(n, "agent", "agents")));
            let own: Vec<String> = live_agents(state)
                .iter()
                .filter(|p| annotation(p, ANNOTATION_DEBUG))
                .map(|p| p.name_any())
                .collect();
            if !on && !own.is_empty() {
                plan.impact.push(format!(
                    "{} keep debug logs by their own annotation",
                    own.join(", ")
                ));
            }
        }
    }
    Ok(plan)
}

fn selected<'a>(state: &'a State, sel: &TaskSelection) -> Result<&'a [AgentTask]> {
    if !state.missing_tasks.is_empty() {
        return Err(OpsError::UnknownTasks {
            missing: state.missing_tasks.clone(),
            namespace: state.namespace.clone(),
        });
    }
    if state.tasks.is_empty() {
        return Err(OpsError::NothingSelected(match &sel.selector {
            Some(s) => format!(
                "-l {s} matched no AgentTask in namespace {}",
                state.namespace
            ),
            None => "name at least one task, or select some with -l".into(),
        }));
    }
    Ok(&state.tasks)
}

fn task_change(task: &AgentTask, after: &AgentTask, status: bool) -> Change {
    Change {
        kind: Kind::AgentTask,
        name: task.name_any(),
        status,
        delete: false,
        before: to_value(task),
        after: to_value(after),
    }
}

fn cancel(state: &State, sel: &TaskSelection) -> Result<Plan> {
    let tasks = selected(state, sel)?;
    let mut plan = Plan {
        summary: format!("cancel {}", plural(tasks.len(), "task", "tasks")),
        ..Plan::default()
    };
    let mut phases: Vec<TaskPhase> = Vec::new();
    for task in tasks {
        let phase = task.phase();
        if phase.is_finished() {
            plan.unchanged.push(format!(
                "task {} is {} already",
                task.name_any(),
                phase.as_str()
            ));
            continue;
        }
        if task.spec.cancel {
            plan.unchanged.push(format!(
                "task {} is being cancelled already",
                task.name_any()
            ));
            continue;
        }
        let mut after = task.clone();
        after.spec.cancel = true;
        plan.changes.push(task_change(task, &after, false));
        phases.push(phase);
    }
    for phase in TaskPhase::ALL {
        let n = phases.iter().filter(|p| **p == phase).count();
        if n == 0 {
            continue;
        }
        let tasks = plural(n, "task", "tasks");
        plan.impact.push(match phase {
            TaskPhase::Running => format!(
                "{tasks} Running will be cancelled: SIGTERM, then SIGKILL after the pool's graceShutdownSeconds"
            ),
            TaskPhase::Scheduled => format!("{tasks} Scheduled will be cancelled; their Jobs stop"),
            _ => format!("{tasks} {} will never start", phase.as_str()),
        });
    }
    Ok(plan)
}

fn retry(state: &State, sel: &TaskSelection, actor: &str, now: Timestamp) -> Result<Plan> {
    let tasks = selected(state, sel)?;
    let wrong: Vec<String> = tasks
        .iter()
        .filter(|t| !matches!(t.phase(), TaskPhase::Failed | TaskPhase::Errored))
        .map(|t| format!("{} is {}", t.name_any(), t.phase().as_str()))
        .collect();
    if !wrong.is_empty() {
        return Err(OpsError::Refused {
            flag: "NAME",
            message: format!(
                "only Failed or Errored tasks can be retried, and {}; nothing was retried",
                wrong.join(", ")
            ),
        });
    }
    let mut plan = Plan {
        summary: format!("retry {}", plural(tasks.len(), "task", "tasks")),
        ..Plan::default()
    };
    let mut with_jobs = BTreeSet::new();
    for task in tasks {
        let name = task.name_any();
        if let Some(job) = state.jobs.get(&name) {
            let job_name = job["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            plan.changes.push(Change {
                kind: Kind::Job,
                name: job_name.clone(),
                status: false,
                delete: true,
                before: job.clone(),
                after: job.clone(),
            });
            with_jobs.insert(format!("{job_name} (task {name})"));
        }
        let status = task.status.clone().unwrap_or_default();
        let mut after = task.clone();
        after.status = Some(status.retried(actor, now));
        plan.changes.push(task_change(task, &after, true));
    }
    let attempts: BTreeSet<i32> = tasks
        .iter()
        .map(|t| t.status.as_ref().map_or(0, |s| s.attempts) + 1)
        .collect();
    let next: Vec<String> = attempts.iter().map(i32::to_string).collect();
    plan.impact.push(format!(
        "{} run again as Pending (attempt {} next); the earlier runs stay in status.history",
        plural(tasks.len(), "task", "tasks"),
        next.join("/")
    ));
    if !with_jobs.is_empty() {
        plan.impact.push(format!(
            "their finished Jobs are deleted first so new ones can start: {}",
            with_jobs.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-24T10:00:00Z".parse().expect("ts")
    }

    fn pool(spec: Value, status: Value) -> AgentPool {
        let mut full = json!({"image": "i", "minReplicas": 1, "maxReplicas": 4});
        for (k, v) in spec.as_object().expect("object") {
            full[k] = v.clone();
        }
        let mut st = json!({"replicas": 2, "readyReplicas": 2, "desiredReplicas": 2});
        for (k, v) in status.as_object().expect("object") {
            st[k] = v.clone();
        }
        serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "alpha", "namespace": "default", "resourceVersion": "7"},
            "spec": full, "status": st
        }))
        .expect("pool")
    }

    fn agent(name: &str, annotations: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "3",
                         "annotations": annotations}
        }))
        .expect("pod")
    }

    fn task(name: &str, phase: &str, agent: Option<&str>) -> AgentTask {
        serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "5"},
            "spec": {"pool": "alpha"},
            "status": {"phase": phase, "agent": agent, "attempts": 1, "exitCode": 2}
        }))
        .expect("task")
    }

    /// Pool alpha (min 1, max 4, 2 agents): a-0 busy with t-run, a-1 idle,
    /// one task pending.
    fn state(pool: AgentPool) -> State {
        State {
            namespace: "default".into(),
            pool: Some(pool),
            pool_names: vec!["alpha".into(), "beta".into()],
            agents: vec![agent("a-0", json!({})), agent("a-1", json!({}))],
            pool_tasks: vec![
                task("t-run", "Running", Some("a-0")),
                task("t-wait", "Pending", None),
            ],
            ..State::default()
        }
    }

    fn base() -> State {
        state(pool(json!({}), json!({})))
    }

    fn scale(min: Option<i32>, max: Option<i32>) -> Action {
        Action::ScalePool {
            pool: "alpha".into(),
            min,
            max,
        }
    }

    fn hold_for(replicas: i32, mins: Option<u64>, force: bool) -> Action {
        Action::HoldReplicas {
            pool: "alpha".into(),
            replicas,
            duration: mins.map(|m| Duration::from_secs(m * 60)),
            force,
        }
    }

    fn tasks(names: &[&str]) -> Action {
        Action::CancelTasks(TaskSelection {
            names: names.iter().map(|s| s.to_string()).collect(),
            selector: None,
        })
    }

    #[test]
    fn bad_input_is_refused_naming_the_flag_and_what_is_valid() {
        let job_pool = state(pool(json!({"executionMode": "job"}), json!({})));
        let no_pool = State {
            pool: None,
            ..base()
        };
        let missing = State {
            missing_tasks: vec!["nope".into()],
            ..base()
        };
        let b = base();
        let retry_state = State {
            tasks: vec![
                task("t-run", "Running", Some("a-0")),
                task("t-f", "Failed", None),
            ],
            ..base()
        };
        let cases: Vec<(&str, Action, &State, &str)> = vec![
            (
                "unknown pool lists the pools there",
                scale(Some(1), None),
                &no_pool,
                "no AgentPool \"alpha\" in namespace default; pools there: alpha, beta",
            ),
            (
                "unknown agent lists the pool's agents",
                Action::DrainAgent {
                    pool: "alpha".into(),
                    agent: "ghost".into(),
                    undo: false,
                },
                &b,
                "no agent \"ghost\" in pool alpha; its agents: a-0, a-1",
            ),
            (
                "negative min",
                scale(Some(-1), None),
                &b,
                "--min: -1 is negative; replica counts are 0 or more",
            ),
            (
                "huge max",
                scale(None, Some(20_000)),
                &b,
                "--max: 20000 is above the limit of 10000",
            ),
            (
                "min above the pool's max",
                scale(Some(5), None),
                &b,
                "--min: 5 is above the pool's maxReplicas 4; give --max too",
            ),
            (
                "max below the pool's min",
                scale(None, Some(0)),
                &b,
                "--max: 0 is below the pool's minReplicas 1; give --min too",
            ),
            (
                "min above max",
                scale(Some(3), Some(2)),
                &b,
                "--min: 3 is above --max 2",
            ),
            (
                "no bounds at all",
                scale(None, None),
                &b,
                "--min/--max: give --min, --max, --replicas or --clear",
            ),
            (
                "a hold above max",
                hold_for(6, None, false),
                &b,
                "--replicas: 6 is above the pool's maxReplicas 4 (bounds 1..4); choose 1..4, or add --force to widen the bounds to 6",
            ),
            (
                "a hold below min",
                hold_for(0, None, false),
                &b,
                "--replicas: 0 is below the pool's minReplicas 1 (bounds 1..4); choose 1..4, or add --force to widen the bounds to 0",
            ),
            (
                "a negative hold",
                hold_for(-2, None, true),
                &b,
                "--replicas: -2 is negative; replica counts are 0 or more",
            ),
            (
                "a hold on a job-mode pool",
                hold_for(2, None, false),
                &job_pool,
                "--replicas: pool alpha runs in job mode (one Job per task), which has no replicas to hold; limit the tasks in flight with --max",
            ),
            (
                "unknown tasks",
                tasks(&["nope"]),
                &missing,
                "no AgentTask \"nope\" in namespace default",
            ),
            (
                "no task named",
                tasks(&[]),
                &b,
                "name at least one task, or select some with -l",
            ),
            (
                "retrying a task that did not fail",
                Action::RetryTasks(TaskSelection {
                    names: vec!["t-run".into()],
                    selector: None,
                }),
                &retry_state,
                "NAME: only Failed or Errored tasks can be retried, and t-run is Running; nothing was retried",
            ),
        ];
        for (name, action, st, want) in cases {
            let err = plan(&action, st, "alice", now()).expect_err(name);
            assert!(err.is_user_error(), "{name}: {err}");
            assert_eq!(err.to_string(), want, "{name}");
        }
    }

    #[test]
    fn each_action_says_what_it_will_do_in_words() {
        let frozen = state(pool(
            json!({}),
            json!({"frozen": true, "frozenReason": "frozen by window \"night\" (22:00–02:00 UTC) until Wed 02:00 UTC"}),
        ));
        let draining = state(pool(json!({"drain": true}), json!({})));
        let held = state(pool(
            json!({"hold": {"replicas": 3, "setBy": "bob"}}),
            json!({"hold": {"replicas": 3, "setBy": "bob", "summary": "3 by bob until cleared"}}),
        ));
        let cases: Vec<(&str, Action, State, Vec<&str>)> = vec![
            (
                "min raised",
                scale(Some(3), None),
                base(),
                vec!["the pool grows from 2 to at least 3 agents"],
            ),
            (
                "min lowered below an idle pool's agents",
                scale(Some(2), None),
                State {
                    pool_tasks: vec![],
                    ..state(pool(
                        json!({"minReplicas": 3}),
                        json!({"replicas": 3, "desiredReplicas": 3}),
                    ))
                },
                vec![
                    "the autoscaler shrinks the pool from 3 to 2 agents within the scale-down stabilization window of 5m (scale down 3→2: 0 pending, 0 running, need 0 agents, raised to min 2); idle agents go first",
                ],
            ),
            (
                "min lowered on a pool whose work needs its agents",
                scale(Some(1), None),
                state(pool(json!({"minReplicas": 2}), json!({}))),
                vec!["no agent changes now (2 agents); the autoscaler stays between 1 and 4"],
            ),
            (
                "min raised while frozen",
                scale(Some(3), None),
                frozen,
                vec!["pool is frozen until Wed 02:00 UTC, the new minimum applies then"],
            ),
            (
                "max lowered below the busy agents",
                scale(Some(0), Some(0)),
                base(),
                vec![
                    "the pool shrinks from 2 to at most 0 agents; idle agents go first",
                    "1 busy agent will finish its task first",
                ],
            ),
            (
                "bounds while draining",
                scale(None, Some(3)),
                draining.clone(),
                vec![
                    "pool is draining; the new maximum applies after `agentdeck drain alpha --undo`",
                ],
            ),
            (
                "bounds while held",
                scale(Some(2), None),
                held.clone(),
                vec![
                    "a hold is in force (3 by bob until cleared); the new minimum applies when it ends (the hold itself stays within the bounds)",
                ],
            ),
            (
                "a hold for 30 minutes",
                hold_for(3, Some(30), false),
                base(),
                vec![
                    "the autoscaler keeps 3 agents until 2026-11-24 10:30 UTC (for 30m), then decides again from pending work",
                    "the pool goes from 2 to 3 agents now",
                ],
            ),
            (
                "a hold below the busy agents",
                hold_for(0, None, true),
                base(),
                vec![
                    "--force lowers minReplicas 1 → 0; it stays so after the hold ends",
                    "the autoscaler keeps 0 agents until `agentdeck scale alpha --clear`",
                    "the pool goes from 2 to 0 agents now",
                    "1 busy agent will finish its task first",
                    "1 pending task stays queued longer",
                ],
            ),
            (
                "a hold replacing another",
                hold_for(2, None, false),
                held.clone(),
                vec![
                    "replaces the hold 3 by bob until cleared",
                    "the autoscaler keeps 2 agents until `agentdeck scale alpha --clear`",
                ],
            ),
            (
                "clearing a hold",
                Action::ClearHold {
                    pool: "alpha".into(),
                },
                held,
                vec!["the autoscaler decides again: 1 pending, 1 running → about 2 agents (now 2)"],
            ),
            (
                "draining a pool with a busy agent",
                Action::DrainPool {
                    pool: "alpha".into(),
                    undo: false,
                },
                base(),
                vec![
                    "1 busy agent will finish its task first (t-run)",
                    "1 idle agent claims nothing new and goes now",
                    "the pool scales to 0 once every agent is idle",
                    "1 pending task waits until `agentdeck drain alpha --undo`",
                ],
            ),
            (
                "undraining",
                Action::DrainPool {
                    pool: "alpha".into(),
                    undo: true,
                },
                draining,
                vec![
                    "agents claim work again; the autoscaler scales on pending work",
                    "1 pending task can start",
                ],
            ),
            (
                "draining a busy agent",
                Action::DrainAgent {
                    pool: "alpha".into(),
                    agent: "a-0".into(),
                    undo: false,
                },
                base(),
                vec![
                    "agent a-0 is busy with task t-run and will finish it first, then claim nothing new",
                    "it keeps running (the pool's replica count is unchanged); delete the pod to replace it",
                ],
            ),
            (
                "debug logs for the pool",
                Action::DebugLogs {
                    pool: "alpha".into(),
                    agent: None,
                    on: true,
                },
                base(),
                vec!["2 agents: switch to debug logs within a second, no restart"],
            ),
            (
                "cancelling by phase",
                tasks(&[]),
                State {
                    tasks: vec![
                        task("r1", "Running", Some("a-0")),
                        task("r2", "Running", Some("a-1")),
                        task("r3", "Running", Some("a-2")),
                        task("p1", "Pending", None),
                        task("s1", "Succeeded", None),
                    ],
                    ..base()
                },
                vec![
                    "1 task Pending will never start",
                    "3 tasks Running will be cancelled: SIGTERM, then SIGKILL after the pool's graceShutdownSeconds",
                ],
            ),
        ];
        for (name, action, st, want) in cases {
            let p = plan(&action, &st, "alice", now()).expect(name);
            assert_eq!(p.impact, want, "{name}");
            assert!(!p.changes.is_empty(), "{name}: something changes");
        }
    }

    #[test]
    fn the_planned_change_is_the_object_as_asked_with_its_resource_version() {
        let b = base();
        let p = plan(&hold_for(3, Some(30), false), &b, "alice", now()).expect("plan");
        assert_eq!(p.changes.len(), 1);
        let c = &p.changes[0];
        assert_eq!(c.object(), "AgentPool/alpha");
        assert_eq!(
            c.patch(),
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"hold": {
                "replicas": 3, "until": "2026-11-24T10:30:00Z", "setBy": "alice",
                "setAt": "2026-11-24T10:00:00Z"}}})
        );
        let d = plan(
            &Action::DrainAgent {
                pool: "alpha".into(),
                agent: "a-1".into(),
                undo: false,
            },
            &b,
            "alice",
            now(),
        )
        .expect("plan");
        assert_eq!(
            d.changes[0].patch(),
            json!({"metadata": {"resourceVersion": "3", "annotations": {"agentdeck.dev/drain": "true"}}})
        );
        assert_eq!(
            d.changes[0].diff(),
            vec!["metadata.annotations[\"agentdeck.dev/drain\"]: (none) → \"true\""]
        );
    }

    #[test]
    fn asking_for_what_already_is_changes_nothing() {
        let draining = state(pool(json!({"drain": true, "debug": true}), json!({})));
        let marked = State {
            agents: vec![agent("a-0", json!({"agentdeck.dev/drain": "true"}))],
            ..base()
        };
        let b = base();
        let cases: Vec<(Action, &State, &str)> = vec![
            (
                scale(Some(1), Some(4)),
                &b,
                "pool alpha already has minReplicas 1 and maxReplicas 4",
            ),
            (
                Action::DrainPool {
                    pool: "alpha".into(),
                    undo: false,
                },
                &draining,
                "pool alpha is draining already",
            ),
            (
                Action::DrainPool {
                    pool: "alpha".into(),
                    undo: true,
                },
                &b,
                "pool alpha is not draining already",
            ),
            (
                Action::DrainAgent {
                    pool: "alpha".into(),
                    agent: "a-0".into(),
                    undo: false,
                },
                &marked,
                "agent a-0 is drained already",
            ),
            (
                Action::DebugLogs {
                    pool: "alpha".into(),
                    agent: None,
                    on: true,
                },
                &draining,
                "pool alpha has debug logs on already",
            ),
            (
                Action::ClearHold {
                    pool: "alpha".into(),
                },
                &b,
                "pool alpha has no hold",
            ),
        ];
        for (action, st, want) in cases {
            let p = plan(&action, st, "alice", now()).expect("plan");
            assert!(p.changes.is_empty(), "{action:?}");
            assert_eq!(p.unchanged, vec![want.to_string()]);
        }
    }

    #[test]
    fn a_retry_deletes_the_old_job_first_and_keeps_the_history() {
        let st = State {
            tasks: vec![task("t-f", "Failed", Some("a-0"))],
            jobs: BTreeMap::from([(
                "t-f".to_string(),
                json!({"metadata": {"name": "t-f-1234", "resourceVersion": "9"}}),
            )]),
            ..base()
        };
        let action = Action::RetryTasks(TaskSelection {
            names: vec!["t-f".into()],
            selector: None,
        });
        let p = plan(&action, &st, "alice", now()).expect("plan");
        let kinds: Vec<(Kind, bool, bool)> = p
            .changes
            .iter()
            .map(|c| (c.kind, c.delete, c.status))
            .collect();
        assert_eq!(
            kinds,
            vec![(Kind::Job, true, false), (Kind::AgentTask, false, true)]
        );
        let status = &p.changes[1].after["status"];
        assert_eq!(status["phase"], "Pending");
        assert_eq!(status["attempts"], 1);
        assert_eq!(status["history"][0]["phase"], "Failed");
        assert_eq!(status["history"][0]["retriedBy"], "alice");
        let patch = p.changes[1].patch();
        assert_eq!(patch["status"]["exitCode"], Value::Null, "cleared: {patch}");
        assert!(
            patch["status"]
                .as_object()
                .expect("obj")
                .contains_key("exitCode")
        );
    }

    #[test]
    fn the_scale_preview_says_when_a_capacity_window_replaces_a_typed_bound() {
        // now() is 10:00 UTC.
        let windowed = |from: &str, to: &str, max: Option<i32>| {
            state(pool(
                json!({"capacitySchedules": [{"name": "office-hours", "from": from, "to": to,
                                              "minReplicas": 3, "maxReplicas": max}]}),
                json!({}),
            ))
        };
        let open = windowed("09:00", "18:00", None);
        let p = plan(&scale(Some(2), None), &open, "me", now()).expect("plan");
        assert_eq!(
            p.impact,
            vec![
                "capacity window office-hours is open: --min applies only once it closes; \
                 until then min 3, max 4 (office-hours: min 3 until 18:00, then 2)"
            ],
        );
        // A window without a maximum of its own leaves --max to apply now.
        let p = plan(&scale(None, Some(6)), &open, "me", now()).expect("plan");
        assert!(
            p.impact.iter().all(|l| !l.contains("only once it closes")),
            "{:?}",
            p.impact
        );
        // One with its own maximum replaces it.
        let capped = windowed("09:00", "18:00", Some(5));
        let p = plan(&scale(None, Some(6)), &capped, "me", now()).expect("plan");
        assert!(
            p.impact[0].starts_with(
                "capacity window office-hours is open: --max applies only once it closes"
            ),
            "{:?}",
            p.impact
        );
        // A window ahead: the bound applies now, and the window then.
        let ahead = windowed("12:00", "18:00", None);
        let p = plan(&scale(Some(2), None), &ahead, "me", now()).expect("plan");
        assert_eq!(
            p.impact.last().map(String::as_str),
            Some(
                "capacity window office-hours replaces --min while it is open, \
                 from 2026-11-24T12:00:00Z: min 3, max 4"
            ),
        );
        // A hold overrides the open window, and says so.
        let p = plan(&hold_for(1, Some(30), false), &open, "me", now()).expect("plan");
        assert!(
            p.impact.iter().any(|l| l
                == "the hold overrides capacity window office-hours (min 3, max 4) while it lasts"),
            "{:?}",
            p.impact
        );
        // A maximum below a window's minimum would leave the pool invalid.
        let err = plan(&scale(None, Some(2)), &open, "me", now()).expect_err("refused");
        assert!(
            err.to_string().contains(
                "--max: 2 would leave the pool invalid: spec.capacitySchedules[0].minReplicas"
            ),
            "{err}"
        );
    }
}
