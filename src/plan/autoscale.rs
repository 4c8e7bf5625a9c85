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
//!    over a freeze window: an operator asked for it explicitly, while a
//!    freeze is a standing schedule.
//! 3. **Hold** (`hold`, an operator's `agentdeck scale --replicas N`): until
//!    it ends, desired = N clamped to `[min, max]`, without cooldown, but
//!    never below the busy agents (they follow as they become idle). A hold
//!    wins over a freeze window for the same reason drain does; drain wins
//!    over a hold. A hold whose end has passed is ignored.
//! 4. **Freeze** (`frozen`): hold the current count, whatever else is true;
//!    the reason says what the autoscaler would otherwise do. This includes
//!    the bound corrections of rule 5, which wait for the window to end.
//! 5. **Out of bounds**: a count below `min` or above `max` is corrected at
//!    once, without cooldown. Below `min` it goes to `min`, or further if
//!    rule 6 would (without waiting); above `max` it goes to `max`, but not
//!    below the busy agents (those follow as they become idle).
//! 6. **Scale up** when need > current: to need, or by at most `scale_up_step`
//!    when set; held while `cooldown_up` since `last_scale_time` has not
//!    passed (the boundary itself is outside the cooldown).
//! 7. **Scale down** when need < current: to max(need, busy), never removing
//!    a busy agent; held while `cooldown_down` since `last_scale_time` has not
//!    passed. When the busy agents keep the count where it is, hold.
//! 8. Otherwise **steady**.
//!
//! Reasons are one human line with concrete numbers, shown in the console and
//! in Kubernetes Events, e.g.
//! `scale up 2→10: 100 pending, 0 running, need 100 agents, capped at max 10`.
//! A `last_scale_time` in the future (clock skew) counts as "just scaled".

use std::time::Duration;

use jiff::Timestamp;

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
    /// Reason from the freeze planner when inside a freeze window.
    pub frozen: Option<String>,
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
            ScaleDecision {
                desired: current,
                direction: ScaleDirection::Hold,
                need: need.clamped,
                reason: format!("frozen: {freeze}; {otherwise}"),
                cooldown_left: None,
                hold_left: None,
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
    pending: u32,
    running: u32,
}

impl Need {
    fn of(input: &AutoscaleInput) -> Need {
        let min = input.min_replicas;
        let max = input.max_replicas.max(min);
        let work = u64::from(input.pending_tasks) + u64::from(input.running_tasks);
        let raw = work.div_ceil(u64::from(input.concurrency.max(1)));
        let clamped = u32::try_from(raw.clamp(u64::from(min), u64::from(max))).unwrap_or(max);
        Need {
            raw,
            clamped,
            min,
            max,
            pending: input.pending_tasks,
            running: input.running_tasks,
        }
    }

    /// `100 pending, 0 running, need 100 agents, capped at max 10`.
    fn describe(&self) -> String {
        let mut text = format!(
            "{} pending, {} running, need {}",
            self.pending,
            self.running,
            agents(self.raw)
        );
        if self.raw > u64::from(self.max) {
            text.push_str(&format!(", capped at max {}", self.max));
        } else if self.raw < u64::from(self.min) {
            text.push_str(&format!(", raised to min {}", self.min));
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
    let target = hold.replicas.clamp(need.min, need.max);
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
            hold.replicas, need.min, need.max
        ));
    }
    if desired > target {
        notes.push(format!("keeping {}", busy_agents(u64::from(busy))));
    }
    if input.frozen.is_some() {
        notes.push("freeze window ignored while held".to_string());
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
    ScaleDecision {
        desired,
        direction: direction(current, desired),
        need: need.clamped,
        reason,
        cooldown_left: None,
        hold_left: None,
    }
}

/// Rules 5 to 8, as if no freeze applied.
fn plan(input: &AutoscaleInput, need: &Need) -> ScaleDecision {
    let current = input.current_replicas;
    let busy = input.busy_agents;
    let step = input.scale_up_step.map(|step| step.max(1));
    let up_to = match step {
        Some(step) => current.saturating_add(step).min(need.clamped),
        None => need.clamped,
    };
    let stepped = |target: u32| match step {
        Some(step) if target < need.clamped => format!(" (step {step})"),
        _ => String::new(),
    };
    let decision = |desired: u32, reason: String, cooldown_left: Option<Duration>| ScaleDecision {
        desired,
        direction: direction(current, desired),
        need: need.clamped,
        reason,
        cooldown_left,
        hold_left: None,
    };
    let work = need.describe();

    if current < need.min {
        let desired = up_to.max(need.min);
        // Name the step only when it, not min, set the target.
        let step_note = if up_to > need.min {
            stepped(desired)
        } else {
            String::new()
        };
        return decision(
            desired,
            format!(
                "scale up {current}→{desired}{step_note}: below min {}; {work}",
                need.min
            ),
            None,
        );
    }
    if current > need.max {
        let desired = need.max.max(busy.min(current));
        let kept = if desired > need.max {
            format!(", keeping {}", busy_agents(u64::from(busy)))
        } else {
            String::new()
        };
        let reason = if desired == current {
            format!("hold at {current}: above max {}{kept}; {work}", need.max)
        } else {
            format!(
                "scale down {current}→{desired}: above max {}{kept}; {work}",
                need.max
            )
        };
        return decision(desired, reason, None);
    }
    if need.clamped > current {
        let desired = up_to;
        let change = format!("scale up {current}→{desired}{}", stepped(desired));
        return match cooldown_left(input.last_scale_time, input.now, input.cooldown_up) {
            Some(left) => decision(
                current,
                format!("cooldown: {change} in {}s; {work}", whole_seconds(left)),
                Some(left),
            ),
            None => decision(desired, format!("{change}: {work}"), None),
        };
    }
    if need.clamped < current {
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
        let kept = if busy > need.clamped {
            format!(", keeping {}", busy_agents(u64::from(busy)))
        } else {
            String::new()
        };
        let change = format!("scale down {current}→{desired}");
        return match cooldown_left(input.last_scale_time, input.now, input.cooldown_down) {
            Some(left) => decision(
                current,
                format!(
                    "cooldown: {change} in {}s; {work}{kept}",
                    whole_seconds(left)
                ),
                Some(left),
            ),
            None => decision(desired, format!("{change}: {work}{kept}"), None),
        };
    }

    let bound = if need.raw > u64::from(need.max) {
        format!(" (max {})", need.max)
    } else if need.raw < u64::from(need.min) {
        format!(" (min {})", need.min)
    } else {
        String::new()
    };
    decision(
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
            frozen: None,
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
}
