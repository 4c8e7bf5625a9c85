//! What the daemon says while the Kubernetes API cannot be reached: one
//! line when it goes, naming the server and the cause; reminders with
//! back-off (10 s, 20 s, 40 s … at most every 5 minutes) while it stays
//! away; one line when it is back. Every watch, the elector and the
//! reconciler fail at once when the API goes, and each retries on its own:
//! their failures are counted here instead of each logging its own line.

use std::time::{Duration, Instant};

/// First reminder after the API went away.
const FIRST_REMINDER: Duration = Duration::from_secs(10);
/// Longest time between two reminders.
const MAX_REMINDER: Duration = Duration::from_secs(300);

/// What to say, when something should be said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The API just stopped answering.
    Lost,
    /// Still unreachable, this long after it went.
    StillLost(Duration),
    /// It answers again after this long.
    Back(Duration),
}

/// The reachability of the API as this process sees it.
#[derive(Debug, Default)]
pub struct Reachability {
    lost_at: Option<Instant>,
    next_reminder: Option<Instant>,
    gap: Duration,
}

impl Reachability {
    /// A request got no answer at `now`.
    pub fn failed(&mut self, now: Instant) -> Option<Report> {
        let Some(lost_at) = self.lost_at else {
            self.lost_at = Some(now);
            self.gap = FIRST_REMINDER;
            self.next_reminder = Some(now + FIRST_REMINDER);
            return Some(Report::Lost);
        };
        match self.next_reminder {
            Some(due) if now >= due => {
                self.gap = (self.gap * 2).min(MAX_REMINDER);
                self.next_reminder = Some(now + self.gap);
                Some(Report::StillLost(now.duration_since(lost_at)))
            }
            _ => None,
        }
    }

    /// A request was answered at `now` (any HTTP answer counts).
    pub fn answered(&mut self, now: Instant) -> Option<Report> {
        let lost_at = self.lost_at.take()?;
        self.next_reminder = None;
        Some(Report::Back(now.duration_since(lost_at)))
    }
}

/// `e` and its causes as one line (`client error (Connect): tcp connect
/// error: Connection refused (os error 111)`), each distinct cause once.
pub fn causes(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_when_lost_then_reminders_backing_off_then_one_when_back() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut r = Reachability::default();
        let mut said = Vec::new();
        // Ten failures a second for ten minutes, as five watches, the
        // elector and the reconciler retrying would produce.
        for ms in (0..600_000).step_by(100) {
            if let Some(report) = r.failed(at(ms)) {
                said.push((ms / 1000, report));
            }
        }
        let secs = |s: u64| Duration::from_secs(s);
        assert_eq!(
            said,
            vec![
                (0, Report::Lost),
                (10, Report::StillLost(secs(10))),
                (30, Report::StillLost(secs(30))),
                (70, Report::StillLost(secs(70))),
                (150, Report::StillLost(secs(150))),
                // Then every 5 minutes at most.
                (310, Report::StillLost(secs(310))),
            ]
        );
        assert_eq!(r.answered(at(600_000)), Some(Report::Back(secs(600))));
        assert_eq!(r.answered(at(600_100)), None, "said once");
        assert_eq!(r.failed(at(700_000)), Some(Report::Lost), "a new outage");
    }

    #[test]
    fn causes_are_joined_once_each() {
        let inner =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let outer = std::io::Error::other(inner);
        assert_eq!(causes(&outer), "connection refused");
        #[derive(Debug)]
        struct Wrap(std::io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Wrap(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "tcp connect error: Connection refused (os error 111)",
        ));
        assert_eq!(
            causes(&e),
            "client error (Connect): tcp connect error: Connection refused (os error 111)"
        );
    }
}
