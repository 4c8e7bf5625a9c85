//! One health verdict per pool, joining its queue, its replicas and its
//! agents' `/healthz` freshness: OK, Degraded or Stuck, with the reason in
//! words. Pure, so every case is a table row in the tests.

use std::time::Duration;

/// How a pool is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Work flows.
    Ok,
    /// Work flows, but something needs a look.
    Degraded,
    /// Work waits and nothing will move it without a human.
    Stuck,
}

impl Level {
    /// The word shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Degraded => "Degraded",
            Level::Stuck => "Stuck",
        }
    }
}

/// A verdict and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub level: Level,
    pub reason: String,
}

/// What the verdict is decided from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolFacts {
    /// Job mode: one pod per task, no long-running agents.
    pub job_mode: bool,
    /// The pool's spec is invalid (the controller leaves it alone): why.
    pub invalid: Option<String>,
    pub desired: i32,
    pub ready: i32,
    pub max: i32,
    pub pending: i32,
    pub running: i32,
    /// How long the oldest Pending task has waited.
    pub oldest_pending: Option<Duration>,
    pub fresh: i32,
    pub stale: i32,
    pub offline: i32,
    /// Frozen now: the window's reason.
    pub frozen: Option<String>,
    pub draining: bool,
    /// Tasks that failed or errored among the recent ones, and how many finished.
    pub recent_failed: usize,
    pub recent_finished: usize,
}

/// A Pending task older than this means the queue is not moving.
pub const QUEUE_STUCK_AFTER: Duration = Duration::from_secs(120);
/// Replicas may lag the desired count this long after a scale-up before it matters.
pub const QUEUE_SLOW_AFTER: Duration = Duration::from_secs(30);

fn plural(n: impl Into<i64>, one: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

fn waited(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// The verdict for one pool. The first matching rule wins, most severe first.
pub fn verdict(f: &PoolFacts) -> Verdict {
    let v = |level, reason: String| Verdict { level, reason };
    if let Some(why) = &f.invalid {
        return v(Level::Stuck, format!("invalid spec: {why}"));
    }
    let oldest = f.oldest_pending.unwrap_or_default();
    let queue_stuck = f.pending > 0 && oldest >= QUEUE_STUCK_AFTER;
    let alive = f.fresh + f.stale;
    if queue_stuck {
        let tasks = plural(f.pending, "task");
        let why = if f.draining {
            "pool is draining".to_owned()
        } else if let Some(reason) = &f.frozen {
            format!("frozen ({reason})")
        } else if !f.job_mode && f.ready == 0 {
            "no ready agent".to_owned()
        } else if !f.job_mode && alive == 0 && f.offline > 0 {
            "every agent is offline".to_owned()
        } else if f.running == 0 {
            "nothing is running".to_owned()
        } else if !f.job_mode && f.desired >= f.max && f.running >= f.ready {
            format!("at max replicas ({}), all busy", f.max)
        } else {
            "queue is not moving".to_owned()
        };
        return v(
            Level::Stuck,
            format!("{tasks} waiting {}; {why}", waited(oldest)),
        );
    }
    if !f.job_mode && f.offline > 0 {
        return v(
            Level::Degraded,
            format!("{} offline", plural(f.offline, "agent")),
        );
    }
    if !f.job_mode && f.stale > 0 {
        return v(
            Level::Degraded,
            format!("{} stale", plural(f.stale, "agent")),
        );
    }
    if f.pending > 0 && oldest >= QUEUE_SLOW_AFTER {
        let why = if f.frozen.is_some() {
            "frozen"
        } else if f.draining {
            "draining"
        } else if !f.job_mode && f.ready < f.desired {
            "agents starting"
        } else {
            "queue is slow"
        };
        return v(
            Level::Degraded,
            format!(
                "{} waiting {}; {why}",
                plural(f.pending, "task"),
                waited(oldest)
            ),
        );
    }
    if !f.job_mode && f.ready < f.desired && f.pending == 0 && f.running == 0 && f.desired > 0 {
        return v(
            Level::Degraded,
            format!("{}/{} agents ready", f.ready, f.desired),
        );
    }
    if f.recent_finished >= 4 && f.recent_failed * 2 > f.recent_finished {
        return v(
            Level::Degraded,
            format!(
                "{} of the last {} tasks failed",
                f.recent_failed, f.recent_finished
            ),
        );
    }
    let reason = if f.draining {
        "draining".to_owned()
    } else if let Some(r) = &f.frozen {
        format!("frozen ({r})")
    } else if f.running > 0 || f.pending > 0 {
        format!("{} running, {} pending", f.running, f.pending)
    } else if f.job_mode {
        "idle".to_owned()
    } else if f.fresh > 0 {
        format!("{} fresh, idle", plural(f.fresh, "agent"))
    } else {
        "idle, no agents".to_owned()
    };
    v(Level::Ok, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    fn base() -> PoolFacts {
        PoolFacts {
            desired: 2,
            ready: 2,
            max: 4,
            fresh: 2,
            ..PoolFacts::default()
        }
    }

    #[test]
    fn verdicts_join_queue_replicas_and_freshness() {
        let cases: Vec<(&str, PoolFacts, Level, &str)> = vec![
            (
                "healthy idle pool",
                base(),
                Level::Ok,
                "2 agents fresh, idle",
            ),
            (
                "busy pool with a young queue",
                PoolFacts {
                    pending: 3,
                    running: 2,
                    oldest_pending: secs(5),
                    ..base()
                },
                Level::Ok,
                "2 running, 3 pending",
            ),
            (
                "invalid spec",
                PoolFacts {
                    invalid: Some("spec.maxReplicas: must be >= 0".into()),
                    ..base()
                },
                Level::Stuck,
                "invalid spec: spec.maxReplicas: must be >= 0",
            ),
            (
                "old queue, no ready agent",
                PoolFacts {
                    pending: 2,
                    ready: 0,
                    fresh: 0,
                    oldest_pending: secs(300),
                    ..base()
                },
                Level::Stuck,
                "2 tasks waiting 5m0s; no ready agent",
            ),
            (
                "old queue while frozen",
                PoolFacts {
                    pending: 1,
                    ready: 0,
                    fresh: 0,
                    oldest_pending: secs(7200),
                    frozen: Some("release-freeze".into()),
                    ..base()
                },
                Level::Stuck,
                "1 task waiting 2h0m; frozen (release-freeze)",
            ),
            (
                "old queue while draining",
                PoolFacts {
                    pending: 1,
                    oldest_pending: secs(130),
                    draining: true,
                    ..base()
                },
                Level::Stuck,
                "1 task waiting 2m10s; pool is draining",
            ),
            (
                "old queue, every agent offline",
                PoolFacts {
                    pending: 1,
                    fresh: 0,
                    offline: 2,
                    oldest_pending: secs(200),
                    ..base()
                },
                Level::Stuck,
                "1 task waiting 3m20s; every agent is offline",
            ),
            (
                "old queue at max, all busy",
                PoolFacts {
                    pending: 5,
                    desired: 4,
                    ready: 4,
                    running: 4,
                    fresh: 4,
                    oldest_pending: secs(600),
                    ..base()
                },
                Level::Stuck,
                "5 tasks waiting 10m0s; at max replicas (4), all busy",
            ),
            (
                "job mode, old queue, nothing running",
                PoolFacts {
                    job_mode: true,
                    pending: 2,
                    oldest_pending: secs(400),
                    ..PoolFacts::default()
                },
                Level::Stuck,
                "2 tasks waiting 6m40s; nothing is running",
            ),
            (
                "an offline agent",
                PoolFacts {
                    fresh: 1,
                    offline: 1,
                    ..base()
                },
                Level::Degraded,
                "1 agent offline",
            ),
            (
                "stale agents",
                PoolFacts {
                    fresh: 0,
                    stale: 2,
                    ..base()
                },
                Level::Degraded,
                "2 agents stale",
            ),
            (
                "queue slow while agents start",
                PoolFacts {
                    pending: 4,
                    desired: 4,
                    ready: 2,
                    running: 2,
                    oldest_pending: secs(45),
                    ..base()
                },
                Level::Degraded,
                "4 tasks waiting 45s; agents starting",
            ),
            (
                "replicas missing on a quiet pool",
                PoolFacts {
                    ready: 1,
                    fresh: 1,
                    ..base()
                },
                Level::Degraded,
                "1/2 agents ready",
            ),
            (
                "most recent tasks failed",
                PoolFacts {
                    recent_failed: 3,
                    recent_finished: 4,
                    ..base()
                },
                Level::Degraded,
                "3 of the last 4 tasks failed",
            ),
            (
                "half failed is not degraded",
                PoolFacts {
                    recent_failed: 2,
                    recent_finished: 4,
                    ..base()
                },
                Level::Ok,
                "2 agents fresh, idle",
            ),
            (
                "scale to zero at rest",
                PoolFacts::default(),
                Level::Ok,
                "idle, no agents",
            ),
            (
                "job mode idle ignores agents",
                PoolFacts {
                    job_mode: true,
                    offline: 3,
                    ..PoolFacts::default()
                },
                Level::Ok,
                "idle",
            ),
            (
                "frozen but fine",
                PoolFacts {
                    frozen: Some("weekend".into()),
                    ..base()
                },
                Level::Ok,
                "frozen (weekend)",
            ),
        ];
        for (name, facts, level, reason) in cases {
            let got = verdict(&facts);
            assert_eq!((got.level, got.reason.as_str()), (level, reason), "{name}");
        }
    }
}
