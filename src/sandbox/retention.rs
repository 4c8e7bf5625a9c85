//! What the sandbox forgets, and when, as kube-apiserver over etcd does:
//! the watch history is compacted every `--etcd-compaction-interval`
//! (5 minutes; each compaction removes what came before the revision the
//! previous one saw, so a watch from older than that gets 410 Gone), the
//! history is capped by count and bytes whatever its age, and Events are
//! deleted `--event-ttl` (1 hour) after their last write.
//!
//! The same settings come from `agentdeck sandbox --compaction-interval
//! --event-ttl`, or for any sandbox (`agentdeck --demo`, tests that start
//! one in-process) from [`COMPACTION_INTERVAL_ENV`] and [`EVENT_TTL_ENV`].

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::api::Api;
use super::store::HistoryLimits;

/// kube-apiserver's default `--etcd-compaction-interval`.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(60 * 60);

/// Environment variable read for the compaction interval (`60s`, `5m`, `0`
/// for never).
pub const COMPACTION_INTERVAL_ENV: &str = "AGENTDECK_SANDBOX_COMPACTION_INTERVAL";

/// Environment variable read for the Events' time to live (`10m`, `1h`, `0`
/// for never).
pub const EVENT_TTL_ENV: &str = "AGENTDECK_SANDBOX_EVENT_TTL";

/// How often expired Events are looked for (etcd looks for expired leases
/// twice a second; a second is as good for a test server).
const EXPIRY_SWEEP: Duration = Duration::from_secs(1);

/// How often state kept about objects (server-side apply configurations)
/// is dropped for objects that are gone.
const HOUSEKEEPING: Duration = Duration::from_secs(60);

/// The store key Events of both API groups are kept under.
const EVENTS: &str = "events";

/// How long the sandbox remembers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Time between two compactions of the watch history; zero never
    /// compacts on a timer (the history bounds and the fault switch still do).
    pub compaction_interval: Duration,
    /// Events are deleted this long after their last write; zero keeps them.
    pub event_ttl: Duration,
    /// Bounds of the history whatever its age.
    pub history: HistoryLimits,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            compaction_interval: DEFAULT_COMPACTION_INTERVAL,
            event_ttl: DEFAULT_EVENT_TTL,
            history: HistoryLimits::default(),
        }
    }
}

impl Retention {
    /// The defaults, with [`COMPACTION_INTERVAL_ENV`] and [`EVENT_TTL_ENV`]
    /// applied when set (a value that is not a duration is warned about and
    /// ignored).
    pub fn from_env() -> Self {
        Retention::from_env_over(Retention::default())
    }

    /// `d`, with [`COMPACTION_INTERVAL_ENV`] and [`EVENT_TTL_ENV`] applied
    /// when set.
    pub fn from_env_over(d: Retention) -> Self {
        let read = |name: &str, default: Duration| {
            let Ok(text) = std::env::var(name) else {
                return default;
            };
            crate::units::parse_duration(&text).unwrap_or_else(|e| {
                tracing::warn!(variable = name, "{e}; using {default:?}");
                default
            })
        };
        Retention {
            compaction_interval: read(COMPACTION_INTERVAL_ENV, d.compaction_interval),
            event_ttl: read(EVENT_TTL_ENV, d.event_ttl),
            ..d
        }
    }

    /// Sets the store's bounds and the Events' time to live.
    pub(crate) fn configure(&self, api: &Api) {
        api.store.set_limits(self.history);
        api.store.set_ttl(
            EVENTS,
            (!self.event_ttl.is_zero()).then_some(self.event_ttl),
        );
    }

    /// Compacts on the interval and deletes expired Events until `cancel`.
    pub(crate) fn spawn(self, api: Arc<Api>, cancel: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(async move {
            let every = self.compaction_interval;
            let mut compaction = (!every.is_zero()).then(|| {
                let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                t
            });
            let mut sweep = tokio::time::interval(EXPIRY_SWEEP);
            sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
            housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = async { compaction.as_mut().expect("guarded").tick().await }, if compaction.is_some() => {
                        if let Some(rv) = api.store.compaction_tick() {
                            tracing::debug!(rv, "sandbox: history compacted");
                        }
                    }
                    _ = housekeeping.tick() => api.forget_applied_of_gone(),
                    _ = sweep.tick(), if !self.event_ttl.is_zero() => {
                        let gone = api.store.expire();
                        if gone > 0 {
                            tracing::debug!(gone, "sandbox: expired events deleted");
                        }
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::api::Query;
    use crate::sandbox::store::EventType;
    use serde_json::json;

    #[test]
    fn events_of_both_groups_expire_as_deletions_and_other_objects_stay() {
        let api = Api::new(crate::sandbox::builtin::builtin_resources());
        let ttl = Duration::from_millis(50);
        Retention {
            event_ttl: ttl,
            ..Retention::default()
        }
        .configure(&api);
        let q = Query::default();
        let core = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "p.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Started", "message": "started", "type": "Normal"});
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "p.2", "namespace": "default"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "stuck",
            "reason": "Invalid", "type": "Warning", "action": "Reconcile",
            "reportingController": "agentdeck", "reportingInstance": "agentdeck-0",
            "eventTime": "2026-01-01T00:00:00.000000Z"});
        api.create("", "v1", "events", Some("default"), core, &q)
            .expect("core event created");
        api.create("events.k8s.io", "v1", "events", Some("default"), v1, &q)
            .expect("events.k8s.io event created");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kept", "namespace": "default"}});
        api.create("", "v1", "configmaps", Some("default"), cm, &q)
            .expect("configmap created");
        let mut rx = api.store.subscribe();
        assert_eq!(api.store.expire(), 0, "not yet");
        std::thread::sleep(ttl * 2);
        assert_eq!(api.store.expire(), 2);
        assert_eq!(api.store.count("events"), 0);
        assert!(api.store.get("configmaps", "default", "kept").is_some());
        for _ in 0..2 {
            let c = rx.try_recv().expect("a change");
            assert_eq!(
                (c.resource.as_str(), c.kind),
                ("events", EventType::Deleted)
            );
        }
    }

    #[test]
    fn a_zero_event_ttl_keeps_events() {
        let api = Api::new(crate::sandbox::builtin::builtin_resources());
        Retention {
            event_ttl: Duration::ZERO,
            ..Retention::default()
        }
        .configure(&api);
        let ev = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "p.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}});
        api.create("", "v1", "events", Some("default"), ev, &Query::default())
            .expect("created");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(api.store.expire(), 0);
        assert_eq!(api.store.count("events"), 1);
    }

    #[test]
    fn the_defaults_are_kube_apiservers() {
        let d = Retention::default();
        assert_eq!(d.compaction_interval, Duration::from_secs(300));
        assert_eq!(d.event_ttl, Duration::from_secs(3600));
    }
}
