//! The autoscale decision: how many agents a pool should ask for now.
//!
//! Pure: everything, the current time included, comes in [`AutoscaleInput`].
//!
//! # Rules, in the order they apply
//!
//! 1. **Need** = ⌈(pending + running) / concurrency⌉ agents, clamped to
//!    `[min, max]`. A concurrency of 0 counts as 1, a step of 0 as 1, and
//!    `min > max` as a fixed size of `min` (validation rejects both elsewhere;
//!    the planner must still never panic).
//! 2. **Drain** (`draining`): desired = the busy agents, so idle agents go now
//!    and busy ones finish their task; 0 once every agent is idle. `min` is
//!    ignored, and a drain never adds agents (desired ≤ current). Drain wins
//!    over a freeze window and a capacity window: an operator asked for it
//!    explicitly, while a window is a standing schedule.
//! 3. **Hold** (`hold`, an operator's `agentdeck scale --replicas N`): until
//!    it ends, desired = N clamped to `[min, max]`, without cooldown, but
//!    never below the busy agents (they follow as they become idle). A hold
//!    wins over a freeze window and a capacity window for the same reason
//!    drain does (it is clamped to the pool's own bounds, not a window's);
//!    drain wins over a hold. A hold whose end has passed is ignored.
//! 4. **Freeze** (`frozen`): hold the current count, whatever else is true;
//!    the reason says what the autoscaler would otherwise do. This includes
//!    the bound corrections of rule 5, which wait for the window to end: a
//!    capacity window that opens inside a freeze raises the pool when the
//!    freeze ends, as a `minReplicas` changed inside one would.
//! 5. **Out of bounds**: `min` and `max` are the open capacity windows'
//!    (`capacity`, see [`crate::plan::capacity`]) when one is open, else the
//!    pool's. A count below `min` or above `max` is corrected at
//!    once, without cooldown. Below `min` it goes to `min`, or further if
//!    rule 6 would (without waiting); above `max` it goes to `max`, but not
//!    below the busy agents (those follow as they become idle).
//! 6. **Scale up** when need > current: to need, or by at most `scale_up_step`
//!    when set; held while `cooldown_up` since `last_scale_time` has not
//!    passed (the boundary itself is outside the cooldown).
//! 7. **Scale down** when need < current: to max(need, busy), never removing
//!    a busy agent. When the busy agents keep the count where it is, hold.
//!    Never while a task is pending (an idle agent may be about to claim
//!    it). Then the **stabilization window** (`scale_down_window`, the
//!    HorizontalPodAutoscaler's `behavior.scaleDown.stabilizationWindowSeconds`):
//!    the count goes no lower than the highest need recommended within the
//!    window, this decision's included, so a dip between two tasks of a
//!    steady trickle scales nothing away. A recommendation made exactly one
//!    window ago has left it (as the HPA's cutoff, and the cooldowns'
//!    boundary). Last, held while `cooldown_down` since `last_scale_time` has
//!    not passed: the window says how far down, the cooldown how soon after
//!    the previous change.
//! 8. Otherwise **steady**.
//!
//! A capacity window's minimum counts as need while it is open, and is
//! recorded as such: when the window closes, rule 7's stabilization window
//! keeps its agents for a window's length before they go, and agents busy
//! at the close are never removed (they finish their task first).
//!
//! The window needs the needs of earlier decisions: the caller keeps a
//! [`Recommendations`] per pool, passes it in, and records each decision's
//! [`ScaleDecision::need`] in it afterwards. A caller with no history (a
//! restart, a new leader) starts one with [`Recommendations::fresh_or_seeded`],
//! which counts the current replicas as needed now, as the HPA does: an
//! empty history would otherwise scale a busy-looking pool down at once.
//!
//! Reasons are one human line with concrete numbers, shown in the console and
//! in Kubernetes Events, e.g.
//! `scale up 2→10: 100 pending, 0 running, need 100 agents, capped at max 10`.
//! A `last_scale_time` in the future (clock skew) counts as "just scaled".

use std::collections::VecDeque;
use std::time::Duration;

use jiff::Timestamp;

use super::capacity::OpenCapacity;

/// What the autoscaler knows about a pool at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoscaleInput {
    /// AgentTasks waiting for an agent.
    pub pending_tasks: u32,
    /// AgentTasks an agent is running.
    pub running_tasks: u32,
    /// Agents running at least one task.
    pub busy_agents: u32,
    /// Ready agents running nothing. Informational: the rules only need busy.
    pub idle_agents: u32,
    /// Agents not ready yet. Informational: they are in `current_replicas`.
    pub starting_agents: u32,
    /// Replicas the Deployment asks for now.
    pub current_replicas: u32,
    /// Tasks one agent runs at once; 0 counts as 1.
    pub concurrency: u32,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Most agents one decision adds; `None` jumps straight to the need.
    pub scale_up_step: Option<u32>,
    pub cooldown_up: Duration,
    pub cooldown_down: Duration,
    /// Scale down no lower than the highest need within this long (rule 7);
    /// zero turns the window off.
    pub scale_down_window: Duration,
    /// Needs recommended by earlier decisions, for the window.
    pub recommendations: Recommendations,
    /// Reason from the freeze planner when inside a freeze window.
    pub frozen: Option<String>,
    /// The capacity windows open now; their bounds replace `min_replicas`
    /// and `max_replicas` (but not for a hold).
    pub capacity: Option<OpenCapacity>,
    pub draining: bool,
    /// An operator's replica hold, if one is set (expired or not).
    pub hold: Option<HoldInput>,
    /// When the replica count last changed.
    pub last_scale_time: Option<Timestamp>,
    pub now: Timestamp,
}

/// An operator's replica hold as the autoscaler needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldInput {
    pub replicas: u32,
    /// End of the hold; `None` holds until cleared.
    pub until: Option<Timestamp>,
    /// Who set it, for the reason line.
    pub set_by: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleDirection {
    Up,
    Down,
    Hold,
}

/// What the pool should ask for, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleDecision {
    /// Replicas to set on the Deployment.
    pub desired: u32,
    pub direction: ScaleDirection,
    /// Agents the work needs, clamped to `[min, max]`.
    pub need: u32,
    /// One line for the console and Kubernetes Events.
    pub reason: String,
    /// Set when holding only because of a cooldown: how long until it ends,
    /// so the caller can decide again then instead of polling.
    pub cooldown_left: Option<Duration>,
    /// Set while a hold with an end is in force: how long until it ends,
    /// so the caller decides again right then.
    pub hold_left: Option<Duration>,
    /// Set while the stabilization window keeps agents that the work no
    /// longer needs: how long until the need that keeps them leaves the
    /// window, so the caller decides again right then.
    pub stabilization_left: Option<Duration>,
}

/// The needs one pool's recent decisions recommended, for the scale-down
/// stabilization window (rule 7), as a sliding-window maximum.
///
/// The HPA keeps every recommendation of the window; a recommendation that
/// a later one at least as high outlasts can never be the window's highest,
/// so only the others are kept: oldest first, needs strictly decreasing. At
/// most one entry per distinct need, so the history stays within
/// `maxReplicas + 1` entries however long the window and however often the
/// pool is reconciled, and entries older than the window go at each record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recommendations {
    entries: VecDeque<(Timestamp, u32)>,
}

impl Recommendations {
    /// A history that counts `replicas` as needed at `at`.
    pub fn seeded(replicas: u32, at: Timestamp) -> Recommendations {
        Recommendations {
            entries: VecDeque::from([(at, replicas)]),
        }
    }

    /// The history a decision at `now` uses: `kept` while its newest
    /// recommendation is younger than `stale_after`, otherwise one seeded
    /// with the `current` replicas. A history that stopped being recorded
    /// (this controller restarted, lost the lead, or could not reach the API)
    /// says nothing of what another leader saw meanwhile; the current count
    /// is the one safe guess, and it only delays a scale-down by a window.
    pub fn fresh_or_seeded(
        kept: Option<Recommendations>,
        current: u32,
        now: Timestamp,
        stale_after: Duration,
    ) -> Recommendations {
        match kept {
            Some(kept)
                if kept.newest().is_some_and(|newest| {
                    cooldown_left(Some(newest), now, stale_after).is_some()
                }) =>
            {
                kept
            }
            _ => Recommendations::seeded(current, now),
        }
    }

    /// Records that a decision at `at` recommended `need`, and forgets what
    /// left the `window`. A time before the newest entry (the clock stepped
    /// back) counts as the newest entry's time, so entries stay in order.
    pub fn record(&mut self, at: Timestamp, need: u32, window: Duration) {
        let at = self.newest().map_or(at, |newest| newest.max(at));
        while self.entries.back().is_some_and(|&(_, n)| n <= need) {
            self.entries.pop_back();
        }
        self.entries.push_back((at, need));
        let cutoff = before(at, window);
        while self.entries.front().is_some_and(|&(t, _)| t <= cutoff) {
            self.entries.pop_front();
        }
    }

    /// When the last recommendation was recorded.
    pub fn newest(&self) -> Option<Timestamp> {
        self.entries.back().map(|&(t, _)| t)
    }

    /// Entries kept (see the type's doc for the bound).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The highest need recommended after `cutoff`.
    fn highest_after(&self, cutoff: Timestamp) -> Option<u32> {
        self.entries
            .iter()
            .find(|&&(t, _)| t > cutoff)
            .map(|&(_, n)| n)
    }

    /// The last time after `cutoff` a need of at least `need` was recommended.
    fn last_at_least(&self, need: u32, cutoff: Timestamp) -> Option<Timestamp> {
        self.entries
            .iter()
            .rev()
            .find(|&&(t, n)| t > cutoff && n >= need)
            .map(|&(t, _)| t)
    }
}

/// Decides the replica count for one pool (rules in the module doc).
pub fn decide(input: &AutoscaleInput) -> ScaleDecision {
    let need = Need::of(input);
    if input.draining {
        return drain(input, &need);
    }
    if let Some(hold) = &input.hold
        && let Some(left) = hold_left(hold, input.now)
    {
        return held(input, &need, hold, left);
    }
    let plan = plan(input, &need);
    match &input.frozen {
        Some(freeze) => {
            let current = input.current_replicas;
            let otherwise = if plan.desired == current {
                format!("would hold at {current}")
            } else {
                format!("would scale to {}", plan.desired)
            };
            let waits = match &input.capacity {
                Some(open) if plan.desired != current => format!(
                    "; capacity window {} waits for the freeze to end",
                    open.open.join("+")
                ),
                _ => String::new(),
            };
            ScaleDecision {
                desired: current,
                direction: ScaleDirection::Hold,
                need: need.clamped,
                reason: format!("frozen: {freeze}; {otherwise}{waits}"),
                cooldown_left: None,
                hold_left: None,
                stabilization_left: None,
            }
        }
        None => plan,
    }
}

/// The work and the bounds, sanitised.
struct Need {
    /// Agents the work needs before clamping.
    raw: u64,
    /// `raw` clamped to `[min, max]`.
    clamped: u32,
    min: u32,
    max: u32,
    /// The pool's own bounds (a hold is clamped to them).
    pool_min: u32,
    pool_max: u32,
    /// The capacity window that sets `min`, when one does.
    min_from: Option<String>,
    /// The capacity window that sets `max`, when one does with a maximum
    /// of its own.
    max_from: Option<String>,
    pending: u32,
    running: u32,
}

impl Need {
    fn of(input: &AutoscaleInput) -> Need {
        let pool_min = input.min_replicas;
        let pool_max = input.max_replicas.max(pool_min);
        let (min, max) = match &input.capacity {
            Some(open) => (open.bounds.min, open.bounds.max.max(open.bounds.min)),
            None => (pool_min, pool_max),
        };
        let work = u64::from(input.pending_tasks) + u64::from(input.running_tasks);
        let raw = work.div_ceil(u64::from(input.concurrency.max(1)));
        let clamped = u32::try_from(raw.clamp(u64::from(min), u64::from(max))).unwrap_or(max);
        Need {
            raw,
            clamped,
            min,
            max,
            pool_min,
            pool_max,
            min_from: input.capacity.as_ref().map(|c| c.min_from.clone()),
            max_from: input.capacity.as_ref().and_then(|c| c.max_from.clone()),
            pending: input.pending_tasks,
            running: input.running_tasks,
        }
    }

    /// `min 3`, or `min 3 from capacity window all-day (until 23:59 UTC)`.
    fn min_label(&self) -> String {
        match &self.min_from {
            Some(from) => format!("min {} from {from}", self.min),
            None => format!("min {}", self.min),
        }
    }

    /// `max 10`, or `max 8 from capacity window release (until 02:00 UTC)`.
    fn max_label(&self) -> String {
        match &self.max_from {
            Some(from) => format!("max {} from {from}", self.max),
            None => format!("max {}", self.max),
        }
    }

    /// `100 pending, 0 running, need 100 agents, capped at max 10`.
    fn describe(&self) -> String {
        self.describe_work(true)
    }

    /// As [`Need::describe`]; with `sources` false the bound is not said to
    /// come from a window (the line already says so).
    fn describe_work(&self, sources: bool) -> String {
        let mut text = format!(
            "{} pending, {} running, need {}",
            self.pending,
            self.running,
            agents(self.raw)
        );
        let (min, max) = if sources {
            (self.min_label(), self.max_label())
        } else {
            (format!("min {}", self.min), format!("max {}", self.max))
        };
        if self.raw > u64::from(self.max) {
            text.push_str(&format!(", capped at {max}"));
        } else if self.raw < u64::from(self.min) {
            text.push_str(&format!(", raised to {min}"));
        }
        text
    }
}

/// Time a hold still has: `Some(None)` when it has no end, `None` once
/// its end has passed (at exactly `until` it has).
fn hold_left(hold: &HoldInput, now: Timestamp) -> Option<Option<Duration>> {
    match hold.until {
        None => Some(None),
        Some(until) if until > now => Some(Some(
            Duration::try_from(until.duration_since(now)).unwrap_or(Duration::ZERO),
        )),
        Some(_) => None,
    }
}

/// Rule 3.
fn held(
    input: &AutoscaleInput,
    need: &Need,
    hold: &HoldInput,
    left: Option<Duration>,
) -> ScaleDecision {
    let current = input.current_replicas;
    let busy = input.busy_agents;
    let target = hold.replicas.clamp(need.pool_min, need.pool_max);
    let desired = target.max(busy.min(current));
    let by = if hold.set_by.is_empty() {
        String::new()
    } else {
        format!(" by {}", hold.set_by)
    };
    let until = match hold.until {
        Some(u) => format!(" until {u}"),
        None => " until cleared".to_string(),
    };
    let mut notes = Vec::new();
    if target != hold.replicas {
        notes.push(format!(
            "{} is outside min {} / max {}, holding {target}",
            hold.replicas, need.pool_min, need.pool_max
        ));
    }
    if desired > target {
        notes.push(format!("keeping {}", busy_agents(u64::from(busy))));
    }
    if input.frozen.is_some() {
        notes.push("freeze window ignored while held".to_string());
    }
    if let Some(open) = &input.capacity {
        notes.push(format!(
            "capacity window {} ignored while held",
            open.open.join("+")
        ));
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!("; {}", notes.join("; "))
    };
    let change = if desired == current {
        format!("hold at {current}")
    } else {
        format!("scale {current}→{desired}")
    };
    ScaleDecision {
        desired,
        direction: direction(current, desired),
        need: need.clamped,
        reason: format!("held: {change}, {} held{by}{until}{notes}", hold.replicas),
        cooldown_left: None,
        hold_left: left,
        stabilization_left: None,
    }
}

/// Rule 2.
fn drain(input: &AutoscaleInput, need: &Need) -> ScaleDecision {
    let current = input.current_replicas;
    let busy = input.busy_agents;
    let desired = busy.min(current);
    let mut reason = if current == 0 {
        "draining: no agents left".to_string()
    } else if desired == current {
        format!(
            "draining: waiting for {} to finish",
            busy_agents(u64::from(busy))
        )
    } else if desired == 0 {
        format!("draining: scale down {current}→0, no agent is busy")
    } else {
        format!(
            "draining: scale down {current}→{desired}, waiting for {} to finish",
            busy_agents(u64::from(busy))
        )
    };
    if input.frozen.is_some() {
        reason.push_str("; freeze window ignored while draining");
    }
    if let Some(open) = &input.capacity {
        reason.push_str(&format!(
            "; capacity window {} ignored while draining",
            open.open.join("+")
        ));
    }
    ScaleDecision {
        desired,
        direction: direction(current, desired),
        need: need.clamped,
        reason,
        cooldown_left: None,
        hold_left: None,
        stabilization_left: None,
    }
}

/// Rules 5 to 8, as if no freeze applied.
fn plan(input: &AutoscaleInput, need: &Need) -> ScaleDecision {
    let current = input.current_replicas;
    if current < need.min {
        return below_min(input, need);
    }
    if current > need.max {
        return above_max(input, need);
    }
    if need.clamped > current {
        return scale_up(input, need);
    }
    if need.clamped < current {
        return scale_down(input, need);
    }
    steady(current, need)
}

/// A decision of `desired` replicas from `current` (no hold, no
/// stabilization said).
fn decided(
    current: u32,
    need: &Need,
    desired: u32,
    reason: String,
    cooldown_left: Option<Duration>,
) -> ScaleDecision {
    ScaleDecision {
        desired,
        direction: direction(current, desired),
        need: need.clamped,
        reason,
        cooldown_left,
        hold_left: None,
        stabilization_left: None,
    }
}

/// How far a scale-up goes now: to the need, or one `scaleUpStep`; and the
/// note that names the step when it, not the need, set `target`.
fn up_to(input: &AutoscaleInput, need: &Need) -> (u32, impl Fn(u32) -> String) {
    let step = input.scale_up_step.map(|step| step.max(1));
    let up_to = match step {
        Some(step) => input
            .current_replicas
            .saturating_add(step)
            .min(need.clamped),
        None => need.clamped,
    };
    let clamped = need.clamped;
    let stepped = move |target: u32| match step {
        Some(step) if target < clamped => format!(" (step {step})"),
        _ => String::new(),
    };
    (up_to, stepped)
}

/// Rule 5, below the minimum: up to it at once.
fn below_min(input: &AutoscaleInput, need: &Need) -> ScaleDecision {
    let current = input.current_replicas;
    let decision = |desired: u32, reason: String, cooldown_left: Option<Duration>| {
        decided(current, need, desired, reason, cooldown_left)
    };
    let (up_to, stepped) = up_to(input, need);
    let work = need.describe_work(false);
    let desired = up_to.max(need.min);
    // Name the step only when it, not min, set the target.
    let step_note = if up_to > need.min {
        stepped(desired)
    } else {
        String::new()
    };
    decision(
        desired,
        format!(
            "scale up {current}→{desired}{step_note}: below {}; {work}",
            need.min_label()
        ),
        None,
    )
}

/// Rule 5, above the maximum: down to it, keeping the busy agents.
fn above_max(input: &AutoscaleInput, need: &Need) -> ScaleDecision {
    let current = input.current_replicas;
    let decision = |desired: u32, reason: String, cooldown_left: Option<Duration>| {
        decided(current, need, desired, reason, cooldown_left)
    };
    let busy = input.busy_agents;
    let work = need.describe_work(false);
    let desired = need.max.max(busy.min(current));
    let kept = if desired > need.max {
        format!(", keeping {}", busy_agents(u64::from(busy)))
    } else {
        String::new()
    };
    let reason = if desired == current {
        format!(
            "hold at {current}: above {}{kept}; {work}",
            need.max_label()
        )
    } else {
        format!(
            "scale down {current}→{desired}: above {}{kept}; {work}",
            need.max_label()
        )
    };
    decision(desired, reason, None)
}

/// Rule 6, more work than agents: up (after the up cooldown).
fn scale_up(input: &AutoscaleInput, need: &Need) -> ScaleDecision {
    let current = input.current_replicas;
    let decision = |desired: u32, reason: String, cooldown_left: Option<Duration>| {
        decided(current, need, desired, reason, cooldown_left)
    };
    let (up_to, stepped) = up_to(input, need);
    let work = need.describe();
    let desired = up_to;
    let change = format!("scale up {current}→{desired}{}", stepped(desired));
    match cooldown_left(input.last_scale_time, input.now, input.cooldown_up) {
        Some(left) => decision(
            current,
            format!("cooldown: {change} in {}s; {work}", whole_seconds(left)),
            Some(left),
        ),
        None => decision(desired, format!("{change}: {work}"), None),
    }
}

/// Rule 7, less work than agents: down, keeping the busy agents and
/// nothing while tasks are pending, after the stabilization window and
/// the down cooldown.
fn scale_down(input: &AutoscaleInput, need: &Need) -> ScaleDecision {
    let current = input.current_replicas;
    let decision = |desired: u32, reason: String, cooldown_left: Option<Duration>| {
        decided(current, need, desired, reason, cooldown_left)
    };
    let busy = input.busy_agents;
    let work = need.describe();
    let desired = need.clamped.max(busy.min(current));
    if desired == current {
        return decision(
            current,
            format!(
                "hold at {current}: keeping {}; {work}",
                busy_agents(u64::from(busy))
            ),
            None,
        );
    }
    if need.pending > 0 {
        return decision(
            current,
            format!(
                "hold at {current}: no scale-down while {} pending; {work}",
                tasks(need.pending)
            ),
            None,
        );
    }
    let stable = stabilized(input, desired);
    // Busy agents set the count only when the window does not.
    let kept = if stable.is_none() && busy > need.clamped {
        format!(", keeping {}", busy_agents(u64::from(busy)))
    } else {
        String::new()
    };
    let stabilization_left = stable.as_ref().map(|s| s.left);
    let with_left = |d: ScaleDecision| ScaleDecision {
        stabilization_left,
        ..d
    };
    let (desired, note) = match &stable {
        Some(s) if s.target == current => {
            return with_left(decision(
                current,
                format!(
                    "stabilizing: hold at {current} until {}; {work}{kept}",
                    s.note
                ),
                None,
            ));
        }
        Some(s) => (s.target, format!(" (stabilizing until {})", s.note)),
        None => (desired, String::new()),
    };
    let change = format!("scale down {current}→{desired}{note}");
    with_left(
        match cooldown_left(input.last_scale_time, input.now, input.cooldown_down) {
            Some(left) => decision(
                current,
                format!(
                    "cooldown: {change} in {}s; {work}{kept}",
                    whole_seconds(left)
                ),
                Some(left),
            ),
            None => decision(desired, format!("{change}: {work}{kept}"), None),
        },
    )
}

/// Rule 8, steady: the counts, and the bound that set the target.
fn steady(current: u32, need: &Need) -> ScaleDecision {
    let bound = if need.raw > u64::from(need.max) {
        format!(" ({})", need.max_label())
    } else if need.raw < u64::from(need.min) {
        format!(" ({})", need.min_label())
    } else {
        String::new()
    };
    decided(
        current,
        need,
        current,
        format!(
            "steady: {} pending, {} running, {}{bound}",
            need.pending,
            need.running,
            agents(u64::from(current))
        ),
        None,
    )
}

/// What the stabilization window keeps of a scale-down.
struct Stabilized {
    /// The count to go down to at most: above the work's target, at most
    /// the current count.
    target: u32,
    /// Until the need that sets `target` leaves the window.
    left: Duration,
    /// `<when>, <n> needed within the last <window>s` for the reason.
    note: String,
}

/// Rule 7's window for a scale-down from `input.current_replicas` to
/// `desired`; `None` when it keeps nothing.
fn stabilized(input: &AutoscaleInput, desired: u32) -> Option<Stabilized> {
    let window = input.scale_down_window;
    if window.is_zero() {
        return None;
    }
    let cutoff = before(input.now, window);
    let highest = input.recommendations.highest_after(cutoff)?;
    let target = highest.min(input.current_replicas);
    if target <= desired {
        return None;
    }
    let last = input.recommendations.last_at_least(target, cutoff)?;
    let until = after(last, window);
    let left = Duration::try_from(until.duration_since(input.now)).unwrap_or(Duration::ZERO);
    Some(Stabilized {
        target,
        left,
        note: format!(
            "{}, {highest} needed within the last {}s",
            whole_second_after(until),
            whole_seconds(window)
        ),
    })
}

/// `at` minus `d`, or the earliest time there is.
fn before(at: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| at.checked_sub(d).ok())
        .unwrap_or(Timestamp::MIN)
}

/// `at` plus `d`, or the latest time there is.
fn after(at: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| at.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// `at` rounded up to a whole second, so a reason never names a time
/// before the one it means and never shows nanoseconds.
fn whole_second_after(at: Timestamp) -> Timestamp {
    at.round(
        jiff::TimestampRound::new()
            .smallest(jiff::Unit::Second)
            .mode(jiff::RoundMode::Ceil),
    )
    .unwrap_or(at)
}

fn direction(current: u32, desired: u32) -> ScaleDirection {
    match desired.cmp(&current) {
        std::cmp::Ordering::Greater => ScaleDirection::Up,
        std::cmp::Ordering::Less => ScaleDirection::Down,
        std::cmp::Ordering::Equal => ScaleDirection::Hold,
    }
}

/// Time left of `cooldown` after `last`, or `None` when it has passed (at
/// exactly `last + cooldown` it has).
fn cooldown_left(last: Option<Timestamp>, now: Timestamp, cooldown: Duration) -> Option<Duration> {
    let elapsed = now.duration_since(last?);
    // Negative when `last` is in the future: treat as "just scaled".
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    let left = cooldown.saturating_sub(elapsed);
    (!left.is_zero()).then_some(left)
}

/// Seconds rounded up, so a hold never claims "0s" left.
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn agents(n: u64) -> String {
    if n == 1 {
        "1 agent".to_string()
    } else {
        format!("{n} agents")
    }
}

fn tasks(n: u32) -> String {
    if n == 1 {
        "1 task".to_string()
    } else {
        format!("{n} tasks")
    }
}

fn busy_agents(n: u64) -> String {
    if n == 1 {
        "1 busy agent".to_string()
    } else {
        format!("{n} busy agents")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScaleDirection::{Down, Hold, Up};

    fn t0() -> Timestamp {
        "2025-01-10T12:00:00Z"
            .parse()
            .expect("test timestamp parses")
    }

    fn secs(n: i64) -> Timestamp {
        t0().checked_add(jiff::SignedDuration::from_secs(n))
            .expect("in range")
    }

    /// A pool of 1 agent, min 0, max 10, no work, cooldowns 60 s up and 300 s
    /// down, never scaled before.
    fn base() -> AutoscaleInput {
        AutoscaleInput {
            pending_tasks: 0,
            running_tasks: 0,
            busy_agents: 0,
            idle_agents: 1,
            starting_agents: 0,
            current_replicas: 1,
            concurrency: 1,
            min_replicas: 0,
            max_replicas: 10,
            scale_up_step: None,
            cooldown_up: Duration::from_secs(60),
            cooldown_down: Duration::from_secs(300),
            scale_down_window: Duration::ZERO,
            recommendations: Recommendations::default(),
            frozen: None,
            capacity: None,
            draining: false,
            hold: None,
            last_scale_time: None,
            now: t0(),
        }
    }

    /// 2 agents that need to become 4, last scaled at `t0`.
    fn scaled_up_at_t0_with_more_work() -> AutoscaleInput {
        AutoscaleInput {
            pending_tasks: 4,
            current_replicas: 2,
            last_scale_time: Some(t0()),
            ..base()
        }
    }

    struct Case {
        name: &'static str,
        input: AutoscaleInput,
        desired: u32,
        direction: ScaleDirection,
        need: u32,
        reason: &'static str,
    }

    fn check(cases: Vec<Case>) {
        for case in cases {
            let decision = decide(&case.input);
            assert_eq!(
                decision.desired, case.desired,
                "{}: {decision:?}",
                case.name
            );
            assert_eq!(
                decision.direction, case.direction,
                "{}: {decision:?}",
                case.name
            );
            assert_eq!(decision.need, case.need, "{}: {decision:?}", case.name);
            assert_eq!(decision.reason, case.reason, "{}", case.name);
        }
    }

    #[test]
    fn pending_work_scales_the_pool_up() {
        check(vec![
            Case {
                name: "an idle pool at min stays there",
                input: AutoscaleInput {
                    min_replicas: 1,
                    ..base()
                },
                desired: 1,
                direction: Hold,
                need: 1,
                reason: "steady: 0 pending, 0 running, 1 agent (min 1)",
            },
            Case {
                name: "100 pending tasks reach max 10 in one decision",
                input: AutoscaleInput {
                    pending_tasks: 100,
                    current_replicas: 2,
                    ..base()
                },
                desired: 10,
                direction: Up,
                need: 10,
                reason: "scale up 2→10: 100 pending, 0 running, need 100 agents, capped at max 10",
            },
            Case {
                name: "pending and running both count",
                input: AutoscaleInput {
                    pending_tasks: 3,
                    running_tasks: 2,
                    current_replicas: 2,
                    ..base()
                },
                desired: 5,
                direction: Up,
                need: 5,
                reason: "scale up 2→5: 3 pending, 2 running, need 5 agents",
            },
            Case {
                name: "a step limits how many agents one decision adds",
                input: AutoscaleInput {
                    pending_tasks: 8,
                    current_replicas: 2,
                    scale_up_step: Some(3),
                    ..base()
                },
                desired: 5,
                direction: Up,
                need: 8,
                reason: "scale up 2→5 (step 3): 8 pending, 0 running, need 8 agents",
            },
            Case {
                name: "a step larger than the gap stops at the need",
                input: AutoscaleInput {
                    pending_tasks: 4,
                    current_replicas: 2,
                    scale_up_step: Some(5),
                    ..base()
                },
                desired: 4,
                direction: Up,
                need: 4,
                reason: "scale up 2→4: 4 pending, 0 running, need 4 agents",
            },
            Case {
                name: "a step of zero counts as one",
                input: AutoscaleInput {
                    pending_tasks: 4,
                    current_replicas: 2,
                    scale_up_step: Some(0),
                    ..base()
                },
                desired: 3,
                direction: Up,
                need: 4,
                reason: "scale up 2→3 (step 1): 4 pending, 0 running, need 4 agents",
            },
            Case {
                name: "work exactly matching the agents is steady",
                input: AutoscaleInput {
                    pending_tasks: 3,
                    running_tasks: 2,
                    busy_agents: 2,
                    current_replicas: 5,
                    ..base()
                },
                desired: 5,
                direction: Hold,
                need: 5,
                reason: "steady: 3 pending, 2 running, 5 agents",
            },
            Case {
                name: "a pool at max with more work is steady",
                input: AutoscaleInput {
                    pending_tasks: 50,
                    current_replicas: 10,
                    ..base()
                },
                desired: 10,
                direction: Hold,
                need: 10,
                reason: "steady: 50 pending, 0 running, 10 agents (max 10)",
            },
            Case {
                name: "a pool at zero wakes up for one task",
                input: AutoscaleInput {
                    pending_tasks: 1,
                    current_replicas: 0,
                    idle_agents: 0,
                    ..base()
                },
                desired: 1,
                direction: Up,
                need: 1,
                reason: "scale up 0→1: 1 pending, 0 running, need 1 agent",
            },
        ]);
    }

    #[test]
    fn idle_agents_scale_the_pool_down_but_busy_ones_stay() {
        check(vec![
            Case {
                name: "an idle pool with min 0 scales to zero",
                input: AutoscaleInput {
                    current_replicas: 3,
                    ..base()
                },
                desired: 0,
                direction: Down,
                need: 0,
                reason: "scale down 3→0: 0 pending, 0 running, need 0 agents",
            },
            Case {
                name: "an idle pool scales down to min",
                input: AutoscaleInput {
                    current_replicas: 5,
                    min_replicas: 2,
                    ..base()
                },
                desired: 2,
                direction: Down,
                need: 2,
                reason: "scale down 5→2: 0 pending, 0 running, need 0 agents, raised to min 2",
            },
            Case {
                name: "busy agents above the need are kept",
                input: AutoscaleInput {
                    running_tasks: 3,
                    busy_agents: 3,
                    current_replicas: 5,
                    concurrency: 3,
                    ..base()
                },
                desired: 3,
                direction: Down,
                need: 1,
                reason: "scale down 5→3: 0 pending, 3 running, need 1 agent, keeping 3 busy agents",
            },
            Case {
                name: "when every agent is busy the count holds",
                input: AutoscaleInput {
                    running_tasks: 4,
                    busy_agents: 4,
                    current_replicas: 4,
                    concurrency: 2,
                    ..base()
                },
                desired: 4,
                direction: Hold,
                need: 2,
                reason: "hold at 4: keeping 4 busy agents; 0 pending, 4 running, need 2 agents",
            },
            Case {
                name: "more busy agents than replicas never scales up",
                input: AutoscaleInput {
                    running_tasks: 2,
                    busy_agents: 6,
                    current_replicas: 4,
                    concurrency: 2,
                    ..base()
                },
                desired: 4,
                direction: Hold,
                need: 1,
                reason: "hold at 4: keeping 6 busy agents; 0 pending, 2 running, need 1 agent",
            },
        ]);
    }

    #[test]
    fn concurrency_divides_the_work_rounding_up() {
        let need_for = |work: u32, concurrency: u32| {
            decide(&AutoscaleInput {
                pending_tasks: work,
                concurrency,
                current_replicas: 0,
                max_replicas: 100,
                ..base()
            })
            .need
        };
        let cases = [
            // (tasks, concurrency, need)
            (0, 2, 0),
            (1, 2, 1),
            (2, 2, 1),
            (3, 2, 2),
            (4, 2, 2),
            (1, 3, 1),
            (3, 3, 1),
            (4, 3, 2),
            (7, 3, 3),
            (9, 3, 3),
            (10, 3, 4),
            (5, 0, 5),
            (5, 1, 5),
        ];
        for (work, concurrency, need) in cases {
            assert_eq!(
                need_for(work, concurrency),
                need,
                "{work} tasks, concurrency {concurrency}"
            );
        }
    }

    #[test]
    fn a_cooldown_holds_until_exactly_its_end() {
        let up = |now| AutoscaleInput {
            pending_tasks: 4,
            current_replicas: 2,
            last_scale_time: Some(t0()),
            now,
            ..base()
        };
        let down = |now| AutoscaleInput {
            current_replicas: 4,
            last_scale_time: Some(t0()),
            now,
            ..base()
        };
        check(vec![
            Case {
                name: "scale up inside the up cooldown holds",
                input: up(secs(30)),
                desired: 2,
                direction: Hold,
                need: 4,
                reason: "cooldown: scale up 2→4 in 30s; 4 pending, 0 running, need 4 agents",
            },
            Case {
                name: "scale up a moment before the end rounds the wait up",
                input: up(secs(59)
                    .checked_add(jiff::SignedDuration::from_millis(500))
                    .expect("in range")),
                desired: 2,
                direction: Hold,
                need: 4,
                reason: "cooldown: scale up 2→4 in 1s; 4 pending, 0 running, need 4 agents",
            },
            Case {
                name: "scale up exactly at the end of the up cooldown goes ahead",
                input: up(secs(60)),
                desired: 4,
                direction: Up,
                need: 4,
                reason: "scale up 2→4: 4 pending, 0 running, need 4 agents",
            },
            Case {
                name: "scale up after the up cooldown goes ahead",
                input: up(secs(3600)),
                desired: 4,
                direction: Up,
                need: 4,
                reason: "scale up 2→4: 4 pending, 0 running, need 4 agents",
            },
            Case {
                name: "scale down past the up cooldown still waits for the down cooldown",
                input: down(secs(60)),
                desired: 4,
                direction: Hold,
                need: 0,
                reason: "cooldown: scale down 4→0 in 240s; 0 pending, 0 running, need 0 agents",
            },
            Case {
                name: "scale down exactly at the end of the down cooldown goes ahead",
                input: down(secs(300)),
                desired: 0,
                direction: Down,
                need: 0,
                reason: "scale down 4→0: 0 pending, 0 running, need 0 agents",
            },
            Case {
                name: "scale down after the down cooldown goes ahead",
                input: down(secs(301)),
                desired: 0,
                direction: Down,
                need: 0,
                reason: "scale down 4→0: 0 pending, 0 running, need 0 agents",
            },
            Case {
                name: "a last scale in the future counts as just scaled",
                input: down(secs(-10)),
                desired: 4,
                direction: Hold,
                need: 0,
                reason: "cooldown: scale down 4→0 in 300s; 0 pending, 0 running, need 0 agents",
            },
            Case {
                name: "no last scale time means no cooldown",
                input: AutoscaleInput {
                    last_scale_time: None,
                    ..down(t0())
                },
                desired: 0,
                direction: Down,
                need: 0,
                reason: "scale down 4→0: 0 pending, 0 running, need 0 agents",
            },
            Case {
                name: "a zero cooldown never holds",
                input: AutoscaleInput {
                    cooldown_up: Duration::ZERO,
                    ..up(t0())
                },
                desired: 4,
                direction: Up,
                need: 4,
                reason: "scale up 2→4: 4 pending, 0 running, need 4 agents",
            },
            Case {
                name: "a scale down held by cooldown still names the busy agents it keeps",
                input: AutoscaleInput {
                    running_tasks: 2,
                    busy_agents: 2,
                    concurrency: 2,
                    ..down(secs(100))
                },
                desired: 4,
                direction: Hold,
                need: 1,
                reason: "cooldown: scale down 4→2 in 200s; 0 pending, 2 running, need 1 agent, keeping 2 busy agents",
            },
        ]);
    }

    #[test]
    fn a_cooldown_hold_says_how_long_is_left() {
        let at = |now| {
            decide(&AutoscaleInput {
                now,
                ..scaled_up_at_t0_with_more_work()
            })
        };
        assert_eq!(at(secs(45)).cooldown_left, Some(Duration::from_secs(15)));
        assert_eq!(at(secs(60)).cooldown_left, None);
    }

    #[test]
    fn step_one_adds_one_agent_per_decision_after_each_cooldown() {
        let mut input = AutoscaleInput {
            pending_tasks: 5,
            current_replicas: 1,
            scale_up_step: Some(1),
            ..base()
        };
        let mut seen = Vec::new();
        for tick in 0..12 {
            // A decision every 30 s with a 60 s up cooldown: every other one acts.
            input.now = secs(tick * 30);
            let decision = decide(&input);
            if decision.desired != input.current_replicas {
                input.last_scale_time = Some(input.now);
                input.current_replicas = decision.desired;
            }
            seen.push((decision.desired, decision.direction));
        }
        assert_eq!(
            seen,
            [
                (2, Up),
                (2, Hold),
                (3, Up),
                (3, Hold),
                (4, Up),
                (4, Hold),
                (5, Up),
                (5, Hold),
                (5, Hold),
                (5, Hold),
                (5, Hold),
                (5, Hold),
            ]
        );
    }

    #[test]
    fn out_of_bounds_counts_are_corrected_at_once() {
        let cooling = Some(t0());
        check(vec![
            Case {
                name: "below min goes to min despite the cooldown",
                input: AutoscaleInput {
                    current_replicas: 0,
                    min_replicas: 2,
                    last_scale_time: cooling,
                    ..base()
                },
                desired: 2,
                direction: Up,
                need: 2,
                reason: "scale up 0→2: below min 2; 0 pending, 0 running, need 0 agents, raised to min 2",
            },
            Case {
                name: "below min with more work goes straight to the need",
                input: AutoscaleInput {
                    pending_tasks: 6,
                    current_replicas: 1,
                    min_replicas: 2,
                    last_scale_time: cooling,
                    ..base()
                },
                desired: 6,
                direction: Up,
                need: 6,
                reason: "scale up 1→6: below min 2; 6 pending, 0 running, need 6 agents",
            },
            Case {
                name: "below min with a step still reaches min",
                input: AutoscaleInput {
                    pending_tasks: 6,
                    current_replicas: 0,
                    min_replicas: 3,
                    scale_up_step: Some(1),
                    ..base()
                },
                desired: 3,
                direction: Up,
                need: 6,
                reason: "scale up 0→3: below min 3; 6 pending, 0 running, need 6 agents",
            },
            Case {
                name: "above max goes to max despite the cooldown",
                input: AutoscaleInput {
                    pending_tasks: 20,
                    current_replicas: 15,
                    last_scale_time: cooling,
                    ..base()
                },
                desired: 10,
                direction: Down,
                need: 10,
                reason: "scale down 15→10: above max 10; 20 pending, 0 running, need 20 agents, capped at max 10",
            },
            Case {
                name: "above max keeps busy agents beyond max",
                input: AutoscaleInput {
                    running_tasks: 12,
                    busy_agents: 12,
                    current_replicas: 15,
                    ..base()
                },
                desired: 12,
                direction: Down,
                need: 10,
                reason: "scale down 15→12: above max 10, keeping 12 busy agents; 0 pending, 12 running, need 12 agents, capped at max 10",
            },
            Case {
                name: "above max with every agent busy holds",
                input: AutoscaleInput {
                    running_tasks: 15,
                    busy_agents: 15,
                    current_replicas: 15,
                    ..base()
                },
                desired: 15,
                direction: Hold,
                need: 10,
                reason: "hold at 15: above max 10, keeping 15 busy agents; 0 pending, 15 running, need 15 agents, capped at max 10",
            },
        ]);
    }

    #[test]
    fn degenerate_bounds_never_panic() {
        check(vec![
            Case {
                name: "min equal to max fixes the size",
                input: AutoscaleInput {
                    pending_tasks: 9,
                    current_replicas: 3,
                    min_replicas: 3,
                    max_replicas: 3,
                    ..base()
                },
                desired: 3,
                direction: Hold,
                need: 3,
                reason: "steady: 9 pending, 0 running, 3 agents (max 3)",
            },
            Case {
                name: "min equal to max corrects a smaller count",
                input: AutoscaleInput {
                    current_replicas: 1,
                    min_replicas: 3,
                    max_replicas: 3,
                    ..base()
                },
                desired: 3,
                direction: Up,
                need: 3,
                reason: "scale up 1→3: below min 3; 0 pending, 0 running, need 0 agents, raised to min 3",
            },
            Case {
                name: "max zero scales to zero whatever the work",
                input: AutoscaleInput {
                    pending_tasks: 7,
                    current_replicas: 2,
                    max_replicas: 0,
                    ..base()
                },
                desired: 0,
                direction: Down,
                need: 0,
                reason: "scale down 2→0: above max 0; 7 pending, 0 running, need 7 agents, capped at max 0",
            },
            Case {
                name: "max zero at zero holds",
                input: AutoscaleInput {
                    pending_tasks: 7,
                    current_replicas: 0,
                    max_replicas: 0,
                    ..base()
                },
                desired: 0,
                direction: Hold,
                need: 0,
                reason: "steady: 7 pending, 0 running, 0 agents (max 0)",
            },
            Case {
                name: "min above max counts as a fixed size of min",
                input: AutoscaleInput {
                    current_replicas: 2,
                    min_replicas: 4,
                    max_replicas: 1,
                    ..base()
                },
                desired: 4,
                direction: Up,
                need: 4,
                reason: "scale up 2→4: below min 4; 0 pending, 0 running, need 0 agents, raised to min 4",
            },
            Case {
                name: "counts at the limit of u32 do not overflow",
                input: AutoscaleInput {
                    pending_tasks: u32::MAX,
                    running_tasks: u32::MAX,
                    current_replicas: u32::MAX - 1,
                    max_replicas: u32::MAX,
                    scale_up_step: Some(u32::MAX),
                    ..base()
                },
                desired: u32::MAX,
                direction: Up,
                need: u32::MAX,
                reason: "scale up 4294967294→4294967295: 4294967295 pending, 4294967295 running, need 8589934590 agents, capped at max 4294967295",
            },
        ]);
    }

    #[test]
    fn draining_waits_only_for_busy_agents() {
        check(vec![
            Case {
                name: "a draining pool with busy agents keeps exactly those",
                input: AutoscaleInput {
                    draining: true,
                    running_tasks: 2,
                    busy_agents: 2,
                    current_replicas: 5,
                    min_replicas: 3,
                    ..base()
                },
                desired: 2,
                direction: Down,
                need: 3,
                reason: "draining: scale down 5→2, waiting for 2 busy agents to finish",
            },
            Case {
                name: "a draining pool whose agents are all busy holds",
                input: AutoscaleInput {
                    draining: true,
                    running_tasks: 1,
                    busy_agents: 1,
                    current_replicas: 1,
                    ..base()
                },
                desired: 1,
                direction: Hold,
                need: 1,
                reason: "draining: waiting for 1 busy agent to finish",
            },
            Case {
                name: "a drain never adds agents even when more are busy than asked for",
                input: AutoscaleInput {
                    draining: true,
                    running_tasks: 3,
                    busy_agents: 3,
                    current_replicas: 2,
                    ..base()
                },
                desired: 2,
                direction: Hold,
                need: 3,
                reason: "draining: waiting for 3 busy agents to finish",
            },
            Case {
                name: "a draining pool with no busy agent goes to zero below min",
                input: AutoscaleInput {
                    draining: true,
                    pending_tasks: 4,
                    current_replicas: 3,
                    min_replicas: 2,
                    ..base()
                },
                desired: 0,
                direction: Down,
                need: 4,
                reason: "draining: scale down 3→0, no agent is busy",
            },
            Case {
                name: "a drained pool stays at zero",
                input: AutoscaleInput {
                    draining: true,
                    pending_tasks: 4,
                    current_replicas: 0,
                    ..base()
                },
                desired: 0,
                direction: Hold,
                need: 4,
                reason: "draining: no agents left",
            },
            Case {
                name: "a drain ignores the cooldown",
                input: AutoscaleInput {
                    draining: true,
                    current_replicas: 3,
                    last_scale_time: Some(t0()),
                    ..base()
                },
                desired: 0,
                direction: Down,
                need: 0,
                reason: "draining: scale down 3→0, no agent is busy",
            },
            Case {
                name: "a drain wins over a freeze and says so",
                input: AutoscaleInput {
                    draining: true,
                    frozen: Some("frozen by window \"x\"".to_string()),
                    running_tasks: 1,
                    busy_agents: 1,
                    current_replicas: 4,
                    ..base()
                },
                desired: 1,
                direction: Down,
                need: 1,
                reason: "draining: scale down 4→1, waiting for 1 busy agent to finish; freeze window ignored while draining",
            },
        ]);
    }

    #[test]
    fn a_freeze_holds_the_count_and_says_what_would_happen() {
        let frozen = || {
            Some(
                "frozen by window \"release\" (Fri 23:00–02:00 UTC) until Sat 02:00 UTC"
                    .to_string(),
            )
        };
        check(vec![
            Case {
                name: "a freeze holds against pending work",
                input: AutoscaleInput {
                    frozen: frozen(),
                    pending_tasks: 100,
                    current_replicas: 2,
                    ..base()
                },
                desired: 2,
                direction: Hold,
                need: 10,
                reason: "frozen: frozen by window \"release\" (Fri 23:00–02:00 UTC) until Sat 02:00 UTC; would scale to 10",
            },
            Case {
                name: "a freeze holds an idle pool up",
                input: AutoscaleInput {
                    frozen: frozen(),
                    current_replicas: 4,
                    ..base()
                },
                desired: 4,
                direction: Hold,
                need: 0,
                reason: "frozen: frozen by window \"release\" (Fri 23:00–02:00 UTC) until Sat 02:00 UTC; would scale to 0",
            },
            Case {
                name: "a freeze holds a count below min",
                input: AutoscaleInput {
                    frozen: frozen(),
                    current_replicas: 0,
                    min_replicas: 2,
                    ..base()
                },
                desired: 0,
                direction: Hold,
                need: 2,
                reason: "frozen: frozen by window \"release\" (Fri 23:00–02:00 UTC) until Sat 02:00 UTC; would scale to 2",
            },
            Case {
                name: "a freeze on a steady pool would hold anyway",
                input: AutoscaleInput {
                    frozen: frozen(),
                    pending_tasks: 1,
                    ..base()
                },
                desired: 1,
                direction: Hold,
                need: 1,
                reason: "frozen: frozen by window \"release\" (Fri 23:00–02:00 UTC) until Sat 02:00 UTC; would hold at 1",
            },
        ]);
    }

    #[test]
    fn a_frozen_decision_never_reports_a_cooldown() {
        let decision = decide(&AutoscaleInput {
            frozen: Some("f".to_string()),
            ..scaled_up_at_t0_with_more_work()
        });
        assert_eq!(decision.cooldown_left, None);
        assert_eq!(decision.reason, "frozen: f; would hold at 2");
    }

    fn hold(replicas: u32, until: Option<i64>) -> Option<HoldInput> {
        Some(HoldInput {
            replicas,
            until: until.map(secs),
            set_by: "alice".to_string(),
        })
    }

    #[test]
    fn an_operator_hold_pins_the_replicas_until_it_ends() {
        check(vec![
            Case {
                name: "a hold scales up at once, ignoring the cooldown and the work",
                input: AutoscaleInput {
                    hold: hold(5, Some(1800)),
                    last_scale_time: Some(t0()),
                    ..base()
                },
                desired: 5,
                direction: Up,
                need: 0,
                reason: "held: scale 1→5, 5 held by alice until 2025-01-10T12:30:00Z",
            },
            Case {
                name: "a hold keeps the count down although work is pending",
                input: AutoscaleInput {
                    hold: hold(2, None),
                    pending_tasks: 20,
                    current_replicas: 2,
                    ..base()
                },
                desired: 2,
                direction: Hold,
                need: 10,
                reason: "held: hold at 2, 2 held by alice until cleared",
            },
            Case {
                name: "a hold below the busy agents keeps them",
                input: AutoscaleInput {
                    hold: hold(1, None),
                    running_tasks: 3,
                    busy_agents: 3,
                    current_replicas: 4,
                    ..base()
                },
                desired: 3,
                direction: Down,
                need: 3,
                reason: "held: scale 4→3, 1 held by alice until cleared; keeping 3 busy agents",
            },
            Case {
                name: "a hold outside bounds changed since is clamped and says so",
                input: AutoscaleInput {
                    hold: hold(8, None),
                    max_replicas: 4,
                    current_replicas: 2,
                    ..base()
                },
                desired: 4,
                direction: Up,
                need: 0,
                reason: "held: scale 2→4, 8 held by alice until cleared; 8 is outside min 0 / max 4, holding 4",
            },
            Case {
                name: "a hold wins over a freeze window",
                input: AutoscaleInput {
                    hold: hold(3, None),
                    frozen: Some("release".to_string()),
                    ..base()
                },
                desired: 3,
                direction: Up,
                need: 0,
                reason: "held: scale 1→3, 3 held by alice until cleared; freeze window ignored while held",
            },
            Case {
                name: "drain wins over a hold",
                input: AutoscaleInput {
                    hold: hold(3, None),
                    draining: true,
                    ..base()
                },
                desired: 0,
                direction: Down,
                need: 0,
                reason: "draining: scale down 1→0, no agent is busy",
            },
            Case {
                name: "an expired hold is ignored: the autoscaler decides again",
                input: AutoscaleInput {
                    hold: hold(5, Some(-1)),
                    pending_tasks: 2,
                    ..base()
                },
                desired: 2,
                direction: Up,
                need: 2,
                reason: "scale up 1→2: 2 pending, 0 running, need 2 agents",
            },
            Case {
                name: "a hold ending exactly now has ended",
                input: AutoscaleInput {
                    hold: hold(5, Some(0)),
                    ..base()
                },
                desired: 0,
                direction: Down,
                need: 0,
                reason: "scale down 1→0: 0 pending, 0 running, need 0 agents",
            },
        ]);
    }

    #[test]
    fn a_hold_with_an_end_says_when_to_decide_again() {
        let d = decide(&AutoscaleInput {
            hold: hold(5, Some(90)),
            ..base()
        });
        assert_eq!(d.hold_left, Some(Duration::from_secs(90)));
        let forever = decide(&AutoscaleInput {
            hold: hold(5, None),
            ..base()
        });
        assert_eq!(forever.hold_left, None);
        let ended = decide(&AutoscaleInput {
            hold: hold(5, Some(-5)),
            ..base()
        });
        assert_eq!(ended.hold_left, None);
    }

    /// A history recommending `need` at each `(seconds from t0, need)`.
    fn history(points: &[(i64, u32)]) -> Recommendations {
        let mut h = Recommendations::default();
        for &(at, need) in points {
            h.record(secs(at), need, Duration::from_secs(3600));
        }
        h
    }

    /// 3 agents, 1 of them busy, a window of 300 s, last needed 3 at
    /// `needed_3_at` seconds from t0 (`now` is t0).
    fn dipped(needed_3_at: i64) -> AutoscaleInput {
        AutoscaleInput {
            running_tasks: 1,
            busy_agents: 1,
            idle_agents: 2,
            current_replicas: 3,
            min_replicas: 1,
            cooldown_down: Duration::ZERO,
            scale_down_window: Duration::from_secs(300),
            recommendations: history(&[(needed_3_at, 3)]),
            ..base()
        }
    }

    #[test]
    fn a_scale_down_waits_for_the_highest_need_of_the_window() {
        check(vec![
            Case {
                name: "a need of 3 within the window holds 3",
                input: dipped(-100),
                desired: 3,
                direction: Hold,
                need: 1,
                reason: "stabilizing: hold at 3 until 2025-01-10T12:03:20Z, 3 needed within the last 300s; 0 pending, 1 running, need 1 agent",
            },
            Case {
                name: "a need a moment younger than the window still holds, its end rounded up",
                input: AutoscaleInput {
                    recommendations: Recommendations::seeded(
                        3,
                        secs(-300)
                            .checked_add(jiff::SignedDuration::from_millis(1))
                            .expect("in range"),
                    ),
                    ..dipped(0)
                },
                desired: 3,
                direction: Hold,
                need: 1,
                reason: "stabilizing: hold at 3 until 2025-01-10T12:00:01Z, 3 needed within the last 300s; 0 pending, 1 running, need 1 agent",
            },
            Case {
                name: "a need exactly one window old has left it",
                input: dipped(-300),
                desired: 1,
                direction: Down,
                need: 1,
                reason: "scale down 3→1: 0 pending, 1 running, need 1 agent",
            },
            Case {
                name: "a lower need later in the window lets the pool down that far",
                input: AutoscaleInput {
                    recommendations: history(&[(-350, 3), (-100, 2), (-50, 1)]),
                    ..dipped(0)
                },
                desired: 2,
                direction: Down,
                need: 1,
                reason: "scale down 3→2 (stabilizing until 2025-01-10T12:03:20Z, 2 needed within the last 300s): 0 pending, 1 running, need 1 agent",
            },
            Case {
                name: "a need above the current count holds the current count",
                input: AutoscaleInput {
                    recommendations: history(&[(-10, 6)]),
                    ..dipped(0)
                },
                desired: 3,
                direction: Hold,
                need: 1,
                reason: "stabilizing: hold at 3 until 2025-01-10T12:04:50Z, 6 needed within the last 300s; 0 pending, 1 running, need 1 agent",
            },
            Case {
                name: "a window of zero ignores the history",
                input: AutoscaleInput {
                    scale_down_window: Duration::ZERO,
                    ..dipped(-1)
                },
                desired: 1,
                direction: Down,
                need: 1,
                reason: "scale down 3→1: 0 pending, 1 running, need 1 agent",
            },
            Case {
                name: "an empty history holds nothing back",
                input: AutoscaleInput {
                    recommendations: Recommendations::default(),
                    ..dipped(0)
                },
                desired: 1,
                direction: Down,
                need: 1,
                reason: "scale down 3→1: 0 pending, 1 running, need 1 agent",
            },
            Case {
                name: "the down cooldown still paces what the window lets go",
                input: AutoscaleInput {
                    recommendations: history(&[(-350, 3), (-100, 2)]),
                    cooldown_down: Duration::from_secs(60),
                    last_scale_time: Some(secs(-20)),
                    ..dipped(0)
                },
                desired: 3,
                direction: Hold,
                need: 1,
                reason: "cooldown: scale down 3→2 (stabilizing until 2025-01-10T12:03:20Z, 2 needed within the last 300s) in 40s; 0 pending, 1 running, need 1 agent",
            },
            Case {
                name: "a window above the busy agents sets the count",
                input: AutoscaleInput {
                    running_tasks: 2,
                    busy_agents: 2,
                    current_replicas: 4,
                    concurrency: 2,
                    recommendations: history(&[(-100, 3), (-50, 2)]),
                    ..dipped(0)
                },
                desired: 3,
                direction: Down,
                need: 1,
                reason: "scale down 4→3 (stabilizing until 2025-01-10T12:03:20Z, 3 needed within the last 300s): 0 pending, 2 running, need 1 agent",
            },
            Case {
                name: "busy agents above the window's need are still kept",
                input: AutoscaleInput {
                    running_tasks: 3,
                    busy_agents: 3,
                    current_replicas: 5,
                    concurrency: 3,
                    recommendations: history(&[(-100, 2)]),
                    ..dipped(0)
                },
                desired: 3,
                direction: Down,
                need: 1,
                reason: "scale down 5→3: 0 pending, 3 running, need 1 agent, keeping 3 busy agents",
            },
            Case {
                name: "a freeze says what the window would do",
                input: AutoscaleInput {
                    frozen: Some("f".to_string()),
                    recommendations: history(&[(-350, 3), (-100, 2)]),
                    ..dipped(0)
                },
                desired: 3,
                direction: Hold,
                need: 1,
                reason: "frozen: f; would scale to 2",
            },
        ]);
    }

    #[test]
    fn a_held_scale_down_says_when_to_decide_again() {
        assert_eq!(
            decide(&dipped(-100)).stabilization_left,
            Some(Duration::from_secs(200))
        );
        let partly = decide(&AutoscaleInput {
            recommendations: history(&[(-350, 3), (-100, 2)]),
            ..dipped(0)
        });
        assert_eq!(partly.stabilization_left, Some(Duration::from_secs(200)));
        assert_eq!(decide(&dipped(-300)).stabilization_left, None);
        let up = decide(&AutoscaleInput {
            pending_tasks: 5,
            ..dipped(-100)
        });
        assert_eq!(up.stabilization_left, None);
    }

    #[test]
    fn the_window_never_delays_a_scale_up() {
        check(vec![
            Case {
                name: "more work scales up at once whatever the window holds",
                input: AutoscaleInput {
                    pending_tasks: 4,
                    running_tasks: 1,
                    ..dipped(-1)
                },
                desired: 5,
                direction: Up,
                need: 5,
                reason: "scale up 3→5: 4 pending, 1 running, need 5 agents",
            },
            Case {
                name: "the step and the up cooldown apply as before",
                input: AutoscaleInput {
                    pending_tasks: 4,
                    running_tasks: 1,
                    scale_up_step: Some(1),
                    cooldown_up: Duration::from_secs(60),
                    last_scale_time: Some(secs(-30)),
                    ..dipped(-1)
                },
                desired: 3,
                direction: Hold,
                need: 5,
                reason: "cooldown: scale up 3→4 (step 1) in 30s; 4 pending, 1 running, need 5 agents",
            },
        ]);
    }

    #[test]
    fn pending_tasks_block_every_scale_down_of_the_autoscaler() {
        check(vec![
            Case {
                name: "a pending task keeps idle agents that could claim it",
                input: AutoscaleInput {
                    pending_tasks: 1,
                    scale_down_window: Duration::ZERO,
                    ..dipped(-400)
                },
                desired: 3,
                direction: Hold,
                need: 2,
                reason: "hold at 3: no scale-down while 1 task pending; 1 pending, 1 running, need 2 agents",
            },
            Case {
                name: "pending tasks beyond the window and the cooldown still hold",
                input: AutoscaleInput {
                    pending_tasks: 2,
                    running_tasks: 0,
                    busy_agents: 0,
                    current_replicas: 6,
                    concurrency: 4,
                    ..dipped(-400)
                },
                desired: 6,
                direction: Hold,
                need: 1,
                reason: "hold at 6: no scale-down while 2 tasks pending; 2 pending, 0 running, need 1 agent",
            },
            Case {
                name: "pending tasks do not stop a correction above max",
                input: AutoscaleInput {
                    pending_tasks: 1,
                    current_replicas: 12,
                    ..base()
                },
                desired: 10,
                direction: Down,
                need: 1,
                reason: "scale down 12→10: above max 10; 1 pending, 0 running, need 1 agent",
            },
            Case {
                name: "pending tasks do not stop a drain",
                input: AutoscaleInput {
                    pending_tasks: 1,
                    draining: true,
                    current_replicas: 3,
                    ..base()
                },
                desired: 0,
                direction: Down,
                need: 1,
                reason: "draining: scale down 3→0, no agent is busy",
            },
        ]);
    }

    #[test]
    fn recommendations_keep_only_what_can_be_the_window_highest() {
        let window = Duration::from_secs(300);
        let mut h = Recommendations::default();
        h.record(secs(0), 2, window);
        h.record(secs(1), 4, window);
        h.record(secs(2), 1, window);
        h.record(secs(3), 3, window);
        // 2 is outlasted by the later 4, 1 by the later 3.
        assert_eq!(h.len(), 2);
        assert_eq!(h.highest_after(secs(0)), Some(4));
        assert_eq!(h.highest_after(secs(1)), Some(3));
        assert_eq!(h.last_at_least(3, secs(-1)), Some(secs(3)));
        assert_eq!(h.last_at_least(4, secs(-1)), Some(secs(1)));
        // Exactly one window after the 4, it is forgotten.
        h.record(secs(301), 0, window);
        assert_eq!(h.highest_after(secs(1)), Some(3));
        assert_eq!(h.len(), 2);
        h.record(secs(303), 0, window);
        assert_eq!(h.len(), 1);
        assert_eq!(h.newest(), Some(secs(303)));
    }

    #[test]
    fn recommendations_stay_bounded_by_the_distinct_needs() {
        let mut h = Recommendations::default();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for i in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let need = u32::try_from(x % 5).expect("small");
            h.record(
                t0().checked_add(jiff::SignedDuration::from_millis(i * 10))
                    .expect("in range"),
                need,
                Duration::from_secs(3600),
            );
            assert!(h.len() <= 5, "{} entries after {i} records", h.len());
        }
    }

    #[test]
    fn a_clock_stepping_back_keeps_the_history_in_order() {
        let window = Duration::from_secs(300);
        let mut h = Recommendations::seeded(3, secs(100));
        h.record(secs(50), 2, window);
        assert_eq!(h.newest(), Some(secs(100)));
        assert_eq!(h.last_at_least(2, secs(0)), Some(secs(100)));
        assert_eq!(h.highest_after(secs(0)), Some(3));
    }

    #[test]
    fn a_missing_or_stale_history_is_seeded_with_the_current_replicas() {
        let stale_after = Duration::from_secs(90);
        let kept = history(&[(-30, 2)]);
        assert_eq!(
            Recommendations::fresh_or_seeded(Some(kept.clone()), 4, t0(), stale_after),
            kept,
            "a history recorded 30 s ago is kept"
        );
        assert_eq!(
            Recommendations::fresh_or_seeded(None, 4, t0(), stale_after),
            Recommendations::seeded(4, t0()),
            "a restarted controller or a new leader seeds"
        );
        assert_eq!(
            Recommendations::fresh_or_seeded(Some(history(&[(-90, 2)])), 4, t0(), stale_after),
            Recommendations::seeded(4, t0()),
            "a history not recorded for the whole bound (a lost lead) seeds"
        );
        assert_eq!(
            Recommendations::fresh_or_seeded(
                Some(Recommendations::default()),
                4,
                t0(),
                stale_after
            ),
            Recommendations::seeded(4, t0())
        );
    }

    #[test]
    fn after_a_restart_a_busy_looking_pool_is_held_a_window_not_scaled_down() {
        let input = AutoscaleInput {
            recommendations: Recommendations::fresh_or_seeded(
                None,
                4,
                t0(),
                Duration::from_secs(90),
            ),
            current_replicas: 4,
            ..dipped(0)
        };
        let d = decide(&input);
        assert_eq!((d.desired, d.direction), (4, Hold), "{}", d.reason);
        assert_eq!(d.stabilization_left, Some(Duration::from_secs(300)));
        let later = decide(&AutoscaleInput {
            now: secs(300),
            ..input
        });
        assert_eq!(
            (later.desired, later.direction),
            (1, Down),
            "{}",
            later.reason
        );
    }

    /// What happened to a pool in a simulated trickle.
    #[derive(Debug)]
    struct Trickle {
        /// Replica changes after the first minute.
        changes_after_warmup: usize,
        /// Agent pods started over the whole run.
        pods_started: usize,
        /// Replicas at the end.
        last: u32,
    }

    /// A pool with min 1, max 4 and `cooldownSeconds` 0 up / 30 down (the
    /// quickstart's) under a trickle for 11 simulated minutes: one task
    /// every 2 s, each 1–5 s long (deterministic pseudo-random), every fifth
    /// failing halfway. The decision runs every 100 ms, as often as task
    /// changes reconcile a busy pool; a new agent is ready 3 s after it is
    /// asked for; a scale-down removes starting agents, then idle ones.
    fn trickle(window: Duration) -> Trickle {
        const TICK_MS: i64 = 100;
        const TICKS: i64 = 11 * 60 * 1000 / TICK_MS;
        const WARMUP: i64 = 60 * 1000 / TICK_MS;
        const START_TICKS: i64 = 3000 / TICK_MS;
        let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next_len = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // 1 s to 5 s, in ticks.
            10 + i64::try_from(rng % 41).expect("small")
        };
        // Per agent: ready at tick, running a task until tick.
        let mut agents: Vec<(i64, Option<i64>)> = vec![(0, None)];
        let mut pending: std::collections::VecDeque<i64> = Default::default();
        let mut history = Recommendations::default();
        let mut last_scale_time = None;
        let mut arrived = 0u32;
        let mut changes_after_warmup = 0;
        let mut pods_started = 1;
        for tick in 0..TICKS {
            let now = t0()
                .checked_add(jiff::SignedDuration::from_millis(tick * TICK_MS))
                .expect("in range");
            for agent in &mut agents {
                if agent.1.is_some_and(|end| end <= tick) {
                    agent.1 = None;
                }
            }
            if tick % (2000 / TICK_MS) == 0 {
                arrived += 1;
                let len = next_len();
                pending.push_back(if arrived.is_multiple_of(5) {
                    len / 2
                } else {
                    len
                });
            }
            for agent in &mut agents {
                if agent.0 <= tick && agent.1.is_none() {
                    match pending.pop_front() {
                        Some(len) => agent.1 = Some(tick + len),
                        None => break,
                    }
                }
            }
            let busy = agents.iter().filter(|a| a.1.is_some()).count();
            let starting = agents.iter().filter(|a| a.0 > tick).count();
            let current = u32::try_from(agents.len()).expect("small");
            let input = AutoscaleInput {
                pending_tasks: u32::try_from(pending.len()).expect("small"),
                running_tasks: u32::try_from(busy).expect("small"),
                busy_agents: u32::try_from(busy).expect("small"),
                idle_agents: u32::try_from(agents.len() - busy - starting).expect("small"),
                starting_agents: u32::try_from(starting).expect("small"),
                current_replicas: current,
                concurrency: 1,
                min_replicas: 1,
                max_replicas: 4,
                scale_up_step: None,
                cooldown_up: Duration::ZERO,
                cooldown_down: Duration::from_secs(30),
                scale_down_window: window,
                recommendations: history.clone(),
                frozen: None,
                capacity: None,
                draining: false,
                hold: None,
                last_scale_time,
                now,
            };
            let d = decide(&input);
            history.record(now, d.need, window);
            if d.desired == current {
                continue;
            }
            last_scale_time = Some(now);
            if tick >= WARMUP {
                changes_after_warmup += 1;
            }
            if d.desired > current {
                for _ in current..d.desired {
                    agents.push((tick + START_TICKS, None));
                    pods_started += 1;
                }
            } else {
                let mut remove = usize::try_from(current - d.desired).expect("small");
                // The ReplicaSet takes pods not ready first, then the
                // lowest deletion cost (idle); never a busy one here.
                for starting_first in [true, false] {
                    agents.retain(|a| {
                        let goes = remove > 0 && a.1.is_none() && (a.0 > tick) == starting_first;
                        remove -= usize::from(goes);
                        !goes
                    });
                }
                assert_eq!(remove, 0, "the decision removed a busy agent: {d:?}");
            }
        }
        Trickle {
            changes_after_warmup,
            pods_started,
            last: u32::try_from(agents.len()).expect("small"),
        }
    }

    #[test]
    fn a_steady_trickle_settles_instead_of_flapping() {
        let stable = trickle(Duration::from_secs(300));
        let flapping = trickle(Duration::ZERO);
        // The figures for choosing the default (benches/README.md).
        for window in [0, 30, 60, 120, 300] {
            let run = trickle(Duration::from_secs(window));
            eprintln!("window {window:>3} s: {run:?}");
        }
        assert!(
            stable.changes_after_warmup <= 8,
            "with the window: {stable:?}"
        );
        assert!(
            (2..=4).contains(&stable.last),
            "the settled pool carries the trickle: {stable:?}"
        );
        // The same trickle without the window flaps: the test can fail.
        assert!(
            flapping.changes_after_warmup > 8,
            "without the window: {flapping:?}"
        );
        assert!(stable.pods_started < flapping.pods_started);
    }

    /// The open capacity windows at `now` among `schedules` (UTC), over a
    /// pool whose own maximum is 10, as the controller computes them.
    fn capacity_at(
        schedules: &[(&str, &str, &str, i32, Option<i32>)],
        now: Timestamp,
    ) -> Option<OpenCapacity> {
        let schedules: Vec<crate::crd::CapacitySchedule> = schedules
            .iter()
            .map(|&(name, from, to, min, max)| crate::crd::CapacitySchedule {
                name: Some(name.to_string()),
                from: from.to_string(),
                to: to.to_string(),
                weekdays: Vec::new(),
                timezone: None,
                min_replicas: min,
                max_replicas: max,
            })
            .collect();
        let windows = crate::plan::capacity::parse_all(&schedules, 10, &jiff::tz::TimeZone::UTC)
            .expect("test schedules are valid");
        crate::plan::capacity::open_at(&windows, 10, now)
    }

    /// An idle, empty pool (min 0, max 10) inside the `all-day` window
    /// (00:00–23:59 UTC, min 3) at t0.
    fn in_all_day_window(current: u32) -> AutoscaleInput {
        AutoscaleInput {
            current_replicas: current,
            idle_agents: current,
            capacity: capacity_at(&[("all-day", "00:00", "23:59", 3, None)], t0()),
            ..base()
        }
    }

    #[test]
    fn an_open_capacity_window_raises_an_empty_pool_to_its_minimum_without_a_task() {
        check(vec![
            Case {
                name: "the window opens on an empty pool",
                input: AutoscaleInput {
                    // Just scaled: a bound correction does not wait for the cooldown.
                    last_scale_time: Some(t0()),
                    ..in_all_day_window(0)
                },
                desired: 3,
                direction: Up,
                need: 3,
                reason: "scale up 0→3: below min 3 from capacity window all-day (until 23:59 UTC); \
                         0 pending, 0 running, need 0 agents, raised to min 3",
            },
            Case {
                name: "inside the window the pool stays at its minimum",
                input: in_all_day_window(3),
                desired: 3,
                direction: Hold,
                need: 3,
                reason: "steady: 0 pending, 0 running, 3 agents \
                         (min 3 from capacity window all-day (until 23:59 UTC))",
            },
            Case {
                name: "work beyond the window's minimum still scales up",
                input: AutoscaleInput {
                    pending_tasks: 5,
                    ..in_all_day_window(3)
                },
                desired: 5,
                direction: Up,
                need: 5,
                reason: "scale up 3→5: 5 pending, 0 running, need 5 agents",
            },
            Case {
                name: "a window that lowers the max caps the work",
                input: AutoscaleInput {
                    pending_tasks: 9,
                    capacity: capacity_at(&[("night", "00:00", "23:59", 0, Some(2))], t0()),
                    ..in_all_day_window(1)
                },
                desired: 2,
                direction: Up,
                need: 2,
                reason: "scale up 1→2: 9 pending, 0 running, need 9 agents, \
                         capped at max 2 from capacity window night (until 23:59 UTC)",
            },
            Case {
                name: "a window that lowers the max removes idle agents at once, not busy ones",
                input: AutoscaleInput {
                    running_tasks: 3,
                    busy_agents: 3,
                    idle_agents: 2,
                    capacity: capacity_at(&[("night", "00:00", "23:59", 0, Some(2))], t0()),
                    ..in_all_day_window(5)
                },
                desired: 3,
                direction: Down,
                need: 2,
                reason: "scale down 5→3: above max 2 from capacity window night (until 23:59 UTC), \
                         keeping 3 busy agents; 0 pending, 3 running, need 3 agents, capped at max 2",
            },
        ]);
    }

    #[test]
    fn overlapping_capacity_windows_scale_to_the_highest_minimum() {
        let capacity = capacity_at(
            &[
                ("office-hours", "09:00", "18:00", 2, None),
                ("release", "11:00", "13:00", 4, Some(12)),
            ],
            t0(),
        );
        let decision = decide(&AutoscaleInput {
            capacity,
            pending_tasks: 11,
            ..in_all_day_window(0)
        });
        assert_eq!(decision.desired, 11, "{decision:?}");
        assert_eq!(
            decision.reason,
            "scale up 0→11: below min 4 from capacity window release (until 13:00 UTC); \
             11 pending, 0 running, need 11 agents"
        );
    }

    #[test]
    fn a_closing_capacity_window_keeps_its_agents_for_the_stabilization_window() {
        // The morning window (min 3) closes at t0 = 12:00; one agent is busy
        // across the close. Decisions every 10 s from 11:58 to 12:08.
        let schedules = [("morning", "09:00", "12:00", 3, None)];
        let mut history = Recommendations::default();
        let mut current = 3;
        let mut last_scale = Some(secs(-3600));
        let mut seen = Vec::new();
        for step in -12..=48 {
            let now = secs(step * 10);
            let input = AutoscaleInput {
                running_tasks: 1,
                busy_agents: 1,
                idle_agents: current - 1,
                current_replicas: current,
                scale_down_window: Duration::from_secs(300),
                recommendations: history.clone(),
                capacity: capacity_at(&schedules, now),
                last_scale_time: last_scale,
                now,
                ..base()
            };
            let decision = decide(&input);
            history.record(now, decision.need, Duration::from_secs(300));
            if decision.desired != current {
                last_scale = Some(now);
                seen.push((
                    step * 10,
                    current,
                    decision.desired,
                    decision.reason.clone(),
                ));
                current = decision.desired;
            }
            if (0..290).contains(&(step * 10)) {
                assert_eq!(current, 3, "at {now}: {decision:?}");
                assert!(
                    decision
                        .reason
                        .starts_with("stabilizing: hold at 3 until 2025-01-10T12:04:50Z"),
                    "at {now}: {decision:?}"
                );
            }
        }
        // Down once, at the end of the window counted from the last decision
        // inside the capacity window, to the busy agent, never below it.
        assert_eq!(seen.len(), 1, "{seen:?}");
        let (at, from, to, reason) = &seen[0];
        assert_eq!((*at, *from, *to), (290, 3, 1), "{reason}");
        assert_eq!(reason, "scale down 3→1: 0 pending, 1 running, need 1 agent");
    }

    #[test]
    fn a_freeze_holds_the_count_while_a_capacity_window_opens() {
        let decision = decide(&AutoscaleInput {
            frozen: Some("frozen by window \"release-freeze\"".to_string()),
            ..in_all_day_window(0)
        });
        assert_eq!(decision.desired, 0);
        assert_eq!(decision.direction, Hold);
        assert_eq!(
            decision.reason,
            "frozen: frozen by window \"release-freeze\"; would scale to 3; \
             capacity window all-day waits for the freeze to end"
        );
        // Once the freeze ends, the window's minimum applies at once.
        assert_eq!(decide(&in_all_day_window(0)).desired, 3);
    }

    #[test]
    fn a_hold_wins_over_a_capacity_window_within_the_pool_bounds() {
        let hold = |replicas| HoldInput {
            replicas,
            until: Some(secs(1800)),
            set_by: "alice".to_string(),
        };
        let below = decide(&AutoscaleInput {
            hold: Some(hold(1)),
            ..in_all_day_window(3)
        });
        assert_eq!(below.desired, 1, "{below:?}");
        assert_eq!(
            below.reason,
            "held: scale 3→1, 1 held by alice until 2025-01-10T12:30:00Z; \
             capacity window all-day ignored while held"
        );
        // A window's larger maximum does not widen the hold's bounds.
        let above = decide(&AutoscaleInput {
            hold: Some(hold(12)),
            capacity: capacity_at(&[("release", "00:00", "23:59", 3, Some(20))], t0()),
            ..in_all_day_window(3)
        });
        assert_eq!(above.desired, 10, "{above:?}");
        assert!(
            above
                .reason
                .contains("12 is outside min 0 / max 10, holding 10"),
            "{above:?}"
        );
        // The hold ended: the window applies again.
        let ended = decide(&AutoscaleInput {
            hold: Some(HoldInput {
                until: Some(secs(-1)),
                ..hold(1)
            }),
            ..in_all_day_window(1)
        });
        assert_eq!(ended.desired, 3, "{ended:?}");
    }

    #[test]
    fn a_drain_wins_over_a_capacity_window() {
        let decision = decide(&AutoscaleInput {
            draining: true,
            running_tasks: 1,
            busy_agents: 1,
            idle_agents: 2,
            ..in_all_day_window(3)
        });
        assert_eq!(decision.desired, 1);
        assert_eq!(
            decision.reason,
            "draining: scale down 3→1, waiting for 1 busy agent to finish; \
             capacity window all-day ignored while draining"
        );
        let empty = decide(&AutoscaleInput {
            draining: true,
            ..in_all_day_window(0)
        });
        assert_eq!(empty.desired, 0, "{empty:?}");
    }
}
