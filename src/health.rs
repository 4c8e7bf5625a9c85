//! The health contract between agents (and the daemon), which serve
//! `GET /healthz`, and the controller's prober, which classifies what it
//! hears. The shape is shared so both ends agree by construction.

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// What an agent says about itself.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Working and able to reach the API.
    Healthy,
    /// Running but cannot do its job (API unreachable, watches not synced).
    Unhealthy,
    /// Finishing its current work, taking no new work.
    Draining,
}

impl HealthStatus {
    /// The name as served.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "healthy",
            HealthStatus::Unhealthy => "unhealthy",
            HealthStatus::Draining => "draining",
        }
    }
}

/// The body of `GET /healthz`:
/// `{"status":"healthy","currentTime":"<RFC3339>","lastActivity":"<RFC3339>"}`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    /// Healthy, unhealthy or draining.
    pub status: HealthStatus,
    /// The server's clock when it answered (clock skew is measured from it).
    pub current_time: Timestamp,
    /// Last sign of work: a watch event, claim, heartbeat or finish (agents);
    /// the last successful reconcile (daemon).
    pub last_activity: Timestamp,
}

impl HealthReport {
    /// HTTP status to answer with: 200 unless unhealthy (503).
    pub fn http_status(&self) -> u16 {
        match self.status {
            HealthStatus::Unhealthy => 503,
            HealthStatus::Healthy | HealthStatus::Draining => 200,
        }
    }
}

/// Whether an agent is alive and responsive — not whether it is busy: an
/// idle agent that answers its probes is fresh.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Freshness {
    /// Answered within the stale threshold, not unhealthy, and its loops
    /// showed activity within the offline threshold.
    Fresh,
    /// Not answering for longer than the stale threshold, answering
    /// `unhealthy`, or not probed yet.
    Stale,
    /// No answer for longer than the offline threshold, or answering with no
    /// activity for that long (its work loop is stuck).
    Offline,
}

impl Freshness {
    /// The name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Stale => "stale",
            Freshness::Offline => "offline",
        }
    }
}

/// Thresholds of [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshnessThresholds {
    /// No answer for longer than this: stale (default 2 × probe interval).
    pub stale_after: Duration,
    /// No answer or no activity for longer than this: offline.
    pub offline_after: Duration,
}

/// What the prober knows about one agent at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeFacts {
    /// The last report the agent answered with, and when (local clock) it arrived.
    pub last_report: Option<(HealthReport, Timestamp)>,
    /// When the prober first saw the agent (so a new pod is not offline at once).
    pub first_seen: Timestamp,
}

/// Classifies an agent (see [`Freshness`]). Activity is judged on the
/// agent's own clock corrected by the skew measured at the last answer, so
/// a skewed clock does not make an agent look stuck.
pub fn classify(facts: &ProbeFacts, now: Timestamp, t: &FreshnessThresholds) -> Freshness {
    let since = |then: Timestamp| -> Duration {
        let d = now.duration_since(then);
        if d.is_negative() {
            Duration::ZERO
        } else {
            d.unsigned_abs()
        }
    };
    match &facts.last_report {
        None => {
            if since(facts.first_seen) > t.offline_after {
                Freshness::Offline
            } else {
                Freshness::Stale
            }
        }
        Some((report, received)) => {
            if since(*received) > t.offline_after {
                return Freshness::Offline;
            }
            // Agent clock minus local clock at the probe.
            let skew = report.current_time.duration_since(*received);
            let activity_local = report
                .last_activity
                .checked_sub(skew)
                .unwrap_or(report.last_activity);
            let idle = since(activity_local);
            if idle > t.offline_after {
                Freshness::Offline
            } else if since(*received) > t.stale_after || report.status == HealthStatus::Unhealthy {
                Freshness::Stale
            } else {
                Freshness::Fresh
            }
        }
    }
}

/// The agent's clock minus the local clock, from one report received at `received`.
pub fn clock_skew(report: &HealthReport, received: Timestamp) -> jiff::SignedDuration {
    report.current_time.duration_since(received)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn thresholds() -> FreshnessThresholds {
        FreshnessThresholds {
            stale_after: Duration::from_secs(20),
            offline_after: Duration::from_secs(60),
        }
    }

    fn report(current: &str, activity: &str) -> HealthReport {
        HealthReport {
            status: HealthStatus::Healthy,
            current_time: ts(current),
            last_activity: ts(activity),
        }
    }

    #[test]
    fn the_report_serializes_in_the_documented_shape() {
        let r = report("2026-01-01T00:00:10Z", "2026-01-01T00:00:05Z");
        let json = serde_json::to_value(r).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"status":"healthy","currentTime":"2026-01-01T00:00:10Z","lastActivity":"2026-01-01T00:00:05Z"})
        );
        let back: HealthReport = serde_json::from_value(json).expect("parses");
        assert_eq!(back, r);
    }

    #[test]
    fn unhealthy_answers_503_and_draining_200() {
        let mut r = report("2026-01-01T00:00:10Z", "2026-01-01T00:00:05Z");
        assert_eq!(r.http_status(), 200);
        r.status = HealthStatus::Unhealthy;
        assert_eq!(r.http_status(), 503);
        r.status = HealthStatus::Draining;
        assert_eq!(r.http_status(), 200);
    }

    #[test]
    fn classification_by_activity_age_answer_age_and_skew() {
        let first = ts("2026-01-01T00:00:00Z");
        let cases = [
            // (last report (current, activity, received), now, expected)
            (None, "2026-01-01T00:00:30Z", Freshness::Stale),
            (None, "2026-01-01T00:01:01Z", Freshness::Offline),
            (
                Some((
                    "2026-01-01T00:01:00Z",
                    "2026-01-01T00:00:55Z",
                    "2026-01-01T00:01:00Z",
                )),
                "2026-01-01T00:01:01Z",
                Freshness::Fresh,
            ),
            // Idle for 30 s but answering now: alive and responsive.
            (
                Some((
                    "2026-01-01T00:01:00Z",
                    "2026-01-01T00:00:30Z",
                    "2026-01-01T00:01:00Z",
                )),
                "2026-01-01T00:01:01Z",
                Freshness::Fresh,
            ),
            // Its last answer is 30 s old: probes go unanswered.
            (
                Some((
                    "2026-01-01T00:01:00Z",
                    "2026-01-01T00:01:00Z",
                    "2026-01-01T00:01:00Z",
                )),
                "2026-01-01T00:01:30Z",
                Freshness::Stale,
            ),
            // Answers, but has done nothing for 2 minutes.
            (
                Some((
                    "2026-01-01T00:03:00Z",
                    "2026-01-01T00:01:00Z",
                    "2026-01-01T00:03:00Z",
                )),
                "2026-01-01T00:03:01Z",
                Freshness::Offline,
            ),
            // Last answer is 61 s old.
            (
                Some((
                    "2026-01-01T00:01:00Z",
                    "2026-01-01T00:01:00Z",
                    "2026-01-01T00:01:00Z",
                )),
                "2026-01-01T00:02:01Z",
                Freshness::Offline,
            ),
            // Agent clock 5 minutes ahead: activity 5 s ago on its clock is fresh.
            (
                Some((
                    "2026-01-01T00:06:00Z",
                    "2026-01-01T00:05:55Z",
                    "2026-01-01T00:01:00Z",
                )),
                "2026-01-01T00:01:01Z",
                Freshness::Fresh,
            ),
            // Agent clock 5 minutes behind: activity 5 s ago on its clock is fresh.
            (
                Some((
                    "2026-01-01T00:00:00Z",
                    "2025-12-31T23:59:55Z",
                    "2026-01-01T00:05:00Z",
                )),
                "2026-01-01T00:05:01Z",
                Freshness::Fresh,
            ),
        ];
        for (last, now, expected) in cases {
            let facts = ProbeFacts {
                last_report: last.map(|(c, a, r)| (report(c, a), ts(r))),
                first_seen: first,
            };
            assert_eq!(
                classify(&facts, ts(now), &thresholds()),
                expected,
                "{last:?} at {now}"
            );
        }
    }

    #[test]
    fn an_agent_answering_unhealthy_is_stale_and_draining_stays_fresh() {
        let at = ts("2026-01-01T00:01:00Z");
        for (status, expected) in [
            (HealthStatus::Healthy, Freshness::Fresh),
            (HealthStatus::Draining, Freshness::Fresh),
            (HealthStatus::Unhealthy, Freshness::Stale),
        ] {
            let facts = ProbeFacts {
                last_report: Some((
                    HealthReport {
                        status,
                        current_time: at,
                        last_activity: at,
                    },
                    at,
                )),
                first_seen: at,
            };
            assert_eq!(classify(&facts, at, &thresholds()), expected, "{status:?}");
        }
    }

    #[test]
    fn skew_is_agent_clock_minus_local_clock() {
        let r = report("2026-01-01T00:00:10Z", "2026-01-01T00:00:05Z");
        assert_eq!(
            clock_skew(&r, ts("2026-01-01T00:00:07Z")),
            jiff::SignedDuration::from_secs(3)
        );
    }
}
