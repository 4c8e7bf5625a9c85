//! The controller's Prometheus metrics, through `prometheus-client` (the
//! Prometheus project's Rust client), exposed in the OpenMetrics text format
//! (`application/openmetrics-text; version=1.0.0`), which Prometheus
//! scrapes natively. Counters are registered without their `_total` suffix:
//! OpenMetrics names the family `agentdeck_reconciles` and its sample
//! `agentdeck_reconciles_total`, so the series names stay what they were.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Buckets (seconds) of the reconcile duration histogram.
const RECONCILE_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
/// Buckets (seconds) of the task duration and queue-to-start histograms.
const TASK_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Gauges of one pool, as of its last reconcile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolGauges {
    pub desired: i64,
    pub current: i64,
    pub ready: i64,
    pub pending: i64,
    pub running: i64,
    pub busy: i64,
    pub idle: i64,
    pub fresh: i64,
    pub stale: i64,
    pub offline: i64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PoolLabels {
    namespace: String,
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HealthLabels {
    namespace: String,
    pool: String,
    freshness: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScaleLabels {
    namespace: String,
    pool: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    namespace: String,
    pool: String,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    namespace: String,
    pool: String,
    phase: &'static str,
}

/// What a pool's verdict and spec say, as of its last status write: the
/// series the alert rules join on (see `crate::monitoring`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolState {
    /// The verdict's level (`OK`, `Degraded`, `Stuck`).
    pub verdict: &'static str,
    /// The freeze window holds the replica count.
    pub frozen: bool,
    /// `spec.slo.queueWaitSeconds`, when the pool sets one.
    pub queue_wait_target_seconds: Option<f64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

/// A histogram family per pool, each made with the same buckets.
type PoolHistograms = Family<PoolLabels, Histogram, fn() -> Histogram>;

/// Reads one per-pool gauge out of [`PoolGauges`].
type GetGauge = fn(&PoolGauges) -> i64;
/// One per-pool gauge family and what it reads.
type PoolGauge = (Family<PoolLabels, Gauge>, GetGauge);

/// Task uids already observed, so that each task counts once.
#[derive(Debug, Default)]
struct Seen {
    started: HashSet<String>,
    finished: HashSet<String>,
    /// Pools with series, to forget them when they go.
    pools: BTreeSet<PoolLabels>,
}

/// Every metric the controller exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pool_gauges: Vec<PoolGauge>,
    health: Family<HealthLabels, Gauge>,
    scale_events: Family<ScaleLabels, Counter>,
    task_duration: PoolHistograms,
    queue_to_start: PoolHistograms,
    verdict: Family<VerdictLabels, Gauge>,
    frozen: Family<PoolLabels, Gauge>,
    queue_wait_target: Family<PoolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    tasks_finished: Family<OutcomeLabels, Counter>,
    reconciles: Counter,
    reconcile_errors: Counter,
    reconcile_duration: Histogram,
    api_errors: Family<CodeLabels, Counter>,
    leader: Gauge,
    tasks_deleted: Family<PoolLabels, Counter>,
    watches: crate::cluster::watches::WatchMetrics,
    seen: Mutex<Seen>,
}

/// `metric`, registered in `registry` as `name` with `help`.
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// Registers the per-pool gauges, each with the field of [`PoolGauges`] it shows.
fn register_pool_gauges(registry: &mut Registry) -> Vec<PoolGauge> {
    let gauges: [(&str, &str, GetGauge); 7] = [
        (
            "agentdeck_pool_desired_replicas",
            "Replicas the autoscaler wants.",
            |g| g.desired,
        ),
        (
            "agentdeck_pool_current_replicas",
            "Agent pods that exist (not terminating).",
            |g| g.current,
        ),
        (
            "agentdeck_pool_ready_replicas",
            "Agent pods that are ready.",
            |g| g.ready,
        ),
        (
            "agentdeck_pool_pending_tasks",
            "Tasks waiting for an agent.",
            |g| g.pending,
        ),
        ("agentdeck_pool_running_tasks", "Tasks being run.", |g| {
            g.running
        }),
        (
            "agentdeck_pool_busy_agents",
            "Agents running a task.",
            |g| g.busy,
        ),
        (
            "agentdeck_pool_idle_agents",
            "Ready agents running nothing.",
            |g| g.idle,
        ),
    ];
    gauges
        .into_iter()
        .map(|(name, help, get)| {
            let family = Family::<PoolLabels, Gauge>::default();
            registry.register(name, help, family.clone());
            (family, get)
        })
        .collect()
}

/// The task series: duration, queue-to-start and tasks finished, in that
/// order.
type TaskFamilies = (
    PoolHistograms,
    PoolHistograms,
    Family<OutcomeLabels, Counter>,
);

/// Registers the task histograms and the finished-task counter.
fn register_task_metrics(r: &mut Registry) -> TaskFamilies {
    let task_histograms = || -> PoolHistograms {
        Family::new_with_constructor(|| Histogram::new(TASK_BUCKETS.iter().copied()))
    };
    let task_duration = registered(
        r,
        "agentdeck_task_duration_seconds",
        "Time from a task's start to its end, by pool.",
        task_histograms(),
    );
    let queue_to_start = registered(
        r,
        "agentdeck_task_queue_to_start_seconds",
        "Time from a task's creation to its start (claim), by pool.",
        task_histograms(),
    );
    let tasks_finished = registered(
        r,
        "agentdeck_tasks_finished",
        "Tasks that ended, by pool and phase (Succeeded, Failed, Errored, Cancelled).",
        Family::<OutcomeLabels, Counter>::default(),
    );
    (task_duration, queue_to_start, tasks_finished)
}

/// The series of a pool's verdict and spec: verdict, frozen and queue-wait
/// target, in that order.
type PoolStateFamilies = (
    Family<VerdictLabels, Gauge>,
    Family<PoolLabels, Gauge>,
    Family<PoolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
);

/// Registers the series of a pool's verdict and spec ([`PoolState`]).
fn register_pool_state(r: &mut Registry) -> PoolStateFamilies {
    let verdict = registered(
        r,
        "agentdeck_pool_verdict",
        "1 for the pool's verdict (OK, Degraded, Stuck; as `agentdeck status`), 0 for the others.",
        Family::<VerdictLabels, Gauge>::default(),
    );
    let frozen = registered(
        r,
        "agentdeck_pool_frozen",
        "1 while a freeze window holds the pool's replica count.",
        Family::<PoolLabels, Gauge>::default(),
    );
    let queue_wait_target = registered(
        r,
        "agentdeck_pool_queue_wait_target_seconds",
        "The pool's spec.slo.queueWaitSeconds: the p95 created-to-claimed wait it aims for.",
        Family::<PoolLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default(),
    );
    (verdict, frozen, queue_wait_target)
}

/// Registers the reconcile metrics: duration, reconciles and reconcile
/// errors, in that order.
fn register_reconcile_metrics(r: &mut Registry) -> (Histogram, Counter, Counter) {
    let reconcile_duration = registered(
        r,
        "agentdeck_reconcile_duration_seconds",
        "Time one pool reconcile takes.",
        Histogram::new(RECONCILE_BUCKETS.iter().copied()),
    );
    let reconciles = registered(
        r,
        "agentdeck_reconciles",
        "Pool reconciles run.",
        Counter::default(),
    );
    let reconcile_errors = registered(
        r,
        "agentdeck_reconcile_errors",
        "Pool reconciles that failed.",
        Counter::default(),
    );
    (reconcile_duration, reconciles, reconcile_errors)
}

/// Registers the API error counter, with the codes the runbook tells
/// apart at zero from the start (an error's first occurrence is then seen
/// by `rate()`).
fn register_api_errors(r: &mut Registry) -> Family<CodeLabels, Counter> {
    let api_errors = registered(
        r,
        "agentdeck_api_errors",
        "Kubernetes API errors by HTTP code.",
        Family::<CodeLabels, Counter>::default(),
    );
    for code in ["403", "409", "429", "500", "503", "transport"] {
        drop(api_errors.get_or_create(&CodeLabels {
            code: code.to_owned(),
        }));
    }
    api_errors
}

/// Registers the watch metrics (see `super::watches`).
fn register_watches(r: &mut Registry) -> crate::cluster::watches::WatchMetrics {
    let watches = crate::cluster::watches::WatchMetrics::default();
    registered(
        r,
        "agentdeck_watch_current",
        "1 while the watch behind a store is following changes (listed, not failing).",
        watches.current.clone(),
    );
    registered(
        r,
        "agentdeck_watch_restarts",
        "Watches started over, by kind and reason (ended, idle, gone, list_failed, start_failed, stream_failed).",
        watches.restarts.clone(),
    );
    watches
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let pool_gauges = register_pool_gauges(&mut registry);
        let r = &mut registry;
        let health = registered(
            r,
            "agentdeck_pool_agents_health",
            "Agents by /healthz freshness.",
            Family::<HealthLabels, Gauge>::default(),
        );
        let scale_events = registered(
            r,
            "agentdeck_scale_events",
            "Replica changes made by the autoscaler.",
            Family::<ScaleLabels, Counter>::default(),
        );
        let (task_duration, queue_to_start, tasks_finished) = register_task_metrics(r);
        let (verdict, frozen, queue_wait_target) = register_pool_state(r);
        let (reconcile_duration, reconciles, reconcile_errors) = register_reconcile_metrics(r);
        let api_errors = register_api_errors(r);
        let leader = registered(
            r,
            "agentdeck_leader",
            "1 when this controller holds the leader Lease.",
            Gauge::default(),
        );
        let tasks_deleted = registered(
            r,
            "agentdeck_tasks_deleted",
            "Finished AgentTasks deleted by their pool's taskHistory.",
            Family::<PoolLabels, Counter>::default(),
        );
        let watches = register_watches(r);
        Metrics {
            registry,
            tasks_deleted,
            watches,
            pool_gauges,
            health,
            scale_events,
            task_duration,
            queue_to_start,
            verdict,
            frozen,
            queue_wait_target,
            tasks_finished,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            api_errors,
            leader,
            seen: Mutex::new(Seen::default()),
        }
    }
}

const FRESHNESS: [&str; 3] = ["fresh", "stale", "offline"];
/// The verdict levels, as `VerdictLevel::as_str` names them.
const VERDICTS: [&str; 3] = ["OK", "Degraded", "Stuck"];
/// The phases a task ends in.
const OUTCOMES: [&str; 4] = ["Succeeded", "Failed", "Errored", "Cancelled"];
const DIRECTIONS: [&str; 2] = ["up", "down"];

impl Metrics {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a pool's state after a reconcile.
    pub fn set_pool(&self, namespace: &str, pool: &str, gauges: PoolGauges) {
        let labels = PoolLabels {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        };
        for (family, get) in &self.pool_gauges {
            family.get_or_create(&labels).set(get(&gauges));
        }
        for (freshness, v) in
            FRESHNESS
                .into_iter()
                .zip([gauges.fresh, gauges.stale, gauges.offline])
        {
            self.health
                .get_or_create(&HealthLabels {
                    namespace: namespace.to_owned(),
                    pool: pool.to_owned(),
                    freshness,
                })
                .set(v);
        }
        self.seen().pools.insert(labels);
    }

    /// Records a pool's verdict, freeze and targets after its status is
    /// computed. Also makes its task histograms and outcome counters
    /// exist at zero, so that rates over them start with the pool.
    pub fn set_pool_state(&self, namespace: &str, pool: &str, state: PoolState) {
        let labels = PoolLabels {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        };
        for verdict in VERDICTS {
            self.verdict
                .get_or_create(&VerdictLabels {
                    namespace: namespace.to_owned(),
                    pool: pool.to_owned(),
                    verdict,
                })
                .set(i64::from(verdict == state.verdict));
        }
        self.frozen
            .get_or_create(&labels)
            .set(i64::from(state.frozen));
        match state.queue_wait_target_seconds {
            Some(target) => {
                self.queue_wait_target.get_or_create(&labels).set(target);
            }
            None => {
                self.queue_wait_target.remove(&labels);
            }
        }
        drop(self.queue_to_start.get_or_create(&labels));
        drop(self.task_duration.get_or_create(&labels));
        for phase in OUTCOMES {
            self.outcome(namespace, pool, phase);
        }
        self.seen().pools.insert(labels);
    }

    fn outcome(&self, namespace: &str, pool: &str, phase: &'static str) -> Counter {
        self.tasks_finished
            .get_or_create(&OutcomeLabels {
                namespace: namespace.to_owned(),
                pool: pool.to_owned(),
                phase,
            })
            .clone()
    }

    /// Forgets a deleted pool: every series labelled with it goes.
    pub fn remove_pool(&self, namespace: &str, pool: &str) {
        let labels = PoolLabels {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        };
        self.forget(&labels);
        self.seen().pools.remove(&labels);
    }

    fn forget(&self, labels: &PoolLabels) {
        for (family, _) in &self.pool_gauges {
            family.remove(labels);
        }
        for freshness in FRESHNESS {
            self.health.remove(&HealthLabels {
                namespace: labels.namespace.clone(),
                pool: labels.pool.clone(),
                freshness,
            });
        }
        self.tasks_deleted.remove(labels);
        self.frozen.remove(labels);
        self.queue_wait_target.remove(labels);
        self.queue_to_start.remove(labels);
        self.task_duration.remove(labels);
        for verdict in VERDICTS {
            self.verdict.remove(&VerdictLabels {
                namespace: labels.namespace.clone(),
                pool: labels.pool.clone(),
                verdict,
            });
        }
        for phase in OUTCOMES {
            self.tasks_finished.remove(&OutcomeLabels {
                namespace: labels.namespace.clone(),
                pool: labels.pool.clone(),
                phase,
            });
        }
        for direction in DIRECTIONS {
            self.scale_events.remove(&ScaleLabels {
                namespace: labels.namespace.clone(),
                pool: labels.pool.clone(),
                direction,
            });
        }
    }

    /// Forgets every pool not in `live` (`(namespace, name)`): a pool
    /// deleted while no reconcile saw it go leaves no series behind.
    pub fn retain_pools(&self, live: &HashSet<(String, String)>) {
        let mut seen = self.seen();
        let gone: Vec<PoolLabels> = seen
            .pools
            .iter()
            .filter(|l| !live.contains(&(l.namespace.clone(), l.pool.clone())))
            .cloned()
            .collect();
        for labels in gone {
            self.forget(&labels);
            seen.pools.remove(&labels);
        }
    }

    /// Counts one replica change (`up` or `down`).
    pub fn scaled(&self, namespace: &str, pool: &str, direction: &'static str) {
        self.scale_events
            .get_or_create(&ScaleLabels {
                namespace: namespace.to_owned(),
                pool: pool.to_owned(),
                direction,
            })
            .inc();
        self.seen().pools.insert(PoolLabels {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        });
    }

    /// Counts finished tasks deleted for a pool's taskHistory.
    pub fn tasks_deleted(&self, namespace: &str, pool: &str, n: u64) {
        if n == 0 {
            return;
        }
        let labels = PoolLabels {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        };
        self.tasks_deleted.get_or_create(&labels).inc_by(n);
        self.seen().pools.insert(labels);
    }

    /// Observes a task's queue-to-start latency once per task uid.
    pub fn task_started(&self, namespace: &str, pool: &str, uid: &str, latency_seconds: f64) {
        if self.seen().started.insert(uid.to_owned()) {
            self.queue_to_start
                .get_or_create(&PoolLabels {
                    namespace: namespace.to_owned(),
                    pool: pool.to_owned(),
                })
                .observe(latency_seconds.max(0.0));
        }
    }

    /// Counts a task's end once per task uid, by the phase it ended in
    /// (`TaskPhase::as_str`), with its run duration when it ran.
    pub fn task_finished(
        &self,
        namespace: &str,
        pool: &str,
        uid: &str,
        phase: &'static str,
        duration_seconds: Option<f64>,
    ) {
        if !self.seen().finished.insert(uid.to_owned()) {
            return;
        }
        if let Some(phase) = OUTCOMES.into_iter().find(|p| *p == phase) {
            self.outcome(namespace, pool, phase).inc();
        }
        if let Some(seconds) = duration_seconds {
            self.task_duration
                .get_or_create(&PoolLabels {
                    namespace: namespace.to_owned(),
                    pool: pool.to_owned(),
                })
                .observe(seconds.max(0.0));
        }
    }

    /// Counts a reconcile and its duration.
    pub fn reconciled(&self, seconds: f64, failed: bool) {
        self.reconciles.inc();
        if failed {
            self.reconcile_errors.inc();
        }
        self.reconcile_duration.observe(seconds);
    }

    /// Counts an API error by HTTP code (`transport` when none).
    pub fn api_error(&self, code: Option<u16>) {
        let code = code.map_or_else(|| "transport".to_owned(), |c| c.to_string());
        self.api_errors.get_or_create(&CodeLabels { code }).inc();
    }

    /// The families the watch board writes.
    pub(crate) fn watch_metrics(&self) -> crate::cluster::watches::WatchMetrics {
        self.watches.clone()
    }

    /// Reconciles so far, and how many failed.
    pub fn reconcile_counts(&self) -> (u64, u64) {
        (self.reconciles.get(), self.reconcile_errors.get())
    }

    /// The OpenMetrics text exposition (see [`CONTENT_TYPE`]).
    pub fn render(&self, leader: bool) -> String {
        self.leader.set(i64::from(leader));
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_tasks_are_observed_once() {
        let m = Metrics::default();
        m.task_started("ns", "p", "u1", 2.0);
        m.task_started("ns", "p", "u1", 2.0);
        m.task_started("ns", "p", "u2", 40.0);
        m.task_finished("ns", "p", "u1", "Failed", Some(3.0));
        m.task_finished("ns", "p", "u1", "Failed", Some(3.0));
        m.task_finished("ns", "p", "u3", "Errored", None);
        let text = m.render(true);
        let q = "agentdeck_task_queue_to_start_seconds";
        let pool = "namespace=\"ns\",pool=\"p\"";
        assert!(
            text.contains(&format!("{q}_bucket{{le=\"5.0\",{pool}}} 1")),
            "{text}"
        );
        assert!(text.contains(&format!("{q}_bucket{{le=\"60.0\",{pool}}} 2")));
        assert!(text.contains(&format!("{q}_count{{{pool}}} 2")));
        assert!(text.contains(&format!(
            "agentdeck_task_duration_seconds_count{{{pool}}} 1"
        )));
        assert!(text.contains(&format!(
            "agentdeck_tasks_finished_total{{{pool},phase=\"Failed\"}} 1"
        )));
        assert!(text.contains(&format!(
            "agentdeck_tasks_finished_total{{{pool},phase=\"Errored\"}} 1"
        )));
        assert!(text.contains("agentdeck_leader 1"));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn pool_gauges_carry_namespace_and_pool_labels() {
        let m = Metrics::default();
        m.set_pool(
            "ns",
            "p",
            PoolGauges {
                desired: 3,
                offline: 1,
                ..PoolGauges::default()
            },
        );
        m.scaled("ns", "p", "up");
        m.api_error(Some(409));
        let text = m.render(false);
        assert!(text.contains("agentdeck_pool_desired_replicas{namespace=\"ns\",pool=\"p\"} 3"));
        assert!(text.contains(
            "agentdeck_pool_agents_health{namespace=\"ns\",pool=\"p\",freshness=\"offline\"} 1"
        ));
        assert!(text.contains(
            "agentdeck_scale_events_total{namespace=\"ns\",pool=\"p\",direction=\"up\"} 1"
        ));
        assert!(text.contains("agentdeck_api_errors_total{code=\"409\"} 1"));
    }

    #[test]
    fn a_pool_state_is_one_verdict_series_at_1_and_its_targets() {
        let m = Metrics::default();
        let state = PoolState {
            verdict: "Stuck",
            frozen: true,
            queue_wait_target_seconds: Some(90.0),
        };
        m.set_pool_state("ns", "p", state);
        let text = m.render(false);
        let pool = "namespace=\"ns\",pool=\"p\"";
        for (verdict, v) in [("OK", 0), ("Degraded", 0), ("Stuck", 1)] {
            let line = format!("agentdeck_pool_verdict{{{pool},verdict=\"{verdict}\"}} {v}\n");
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(text.contains(&format!("agentdeck_pool_frozen{{{pool}}} 1\n")));
        assert!(
            text.contains(&format!(
                "agentdeck_pool_queue_wait_target_seconds{{{pool}}} 90.0\n"
            )),
            "{text}"
        );
        assert!(text.contains(&format!(
            "agentdeck_tasks_finished_total{{{pool},phase=\"Succeeded\"}} 0\n"
        )));
        assert!(text.contains(&format!(
            "agentdeck_task_queue_to_start_seconds_count{{{pool}}} 0\n"
        )));
        // A target taken out of the spec takes its series with it.
        m.set_pool_state(
            "ns",
            "p",
            PoolState {
                verdict: "OK",
                frozen: false,
                queue_wait_target_seconds: None,
            },
        );
        let text = m.render(false);
        assert!(
            !text.contains("agentdeck_pool_queue_wait_target_seconds{"),
            "{text}"
        );
        assert!(text.contains(&format!(
            "agentdeck_pool_verdict{{{pool},verdict=\"OK\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "agentdeck_pool_verdict{{{pool},verdict=\"Stuck\"}} 0\n"
        )));
    }

    #[test]
    fn a_gone_pool_leaves_no_series_behind() {
        let m = Metrics::default();
        for pool in ["kept", "gone"] {
            m.set_pool("ns", pool, PoolGauges::default());
            m.set_pool_state(
                "ns",
                pool,
                PoolState {
                    verdict: "OK",
                    frozen: false,
                    queue_wait_target_seconds: Some(60.0),
                },
            );
            m.task_started("ns", pool, pool, 1.0);
            m.scaled("ns", pool, "up");
        }
        m.retain_pools(&HashSet::from([("ns".to_owned(), "kept".to_owned())]));
        let text = m.render(false);
        assert!(text.contains("pool=\"kept\""), "{text}");
        assert!(!text.contains("pool=\"gone\""), "{text}");
        m.remove_pool("ns", "kept");
        assert!(!m.render(false).contains("pool=\""));
    }

    #[test]
    fn counters_are_openmetrics_families_whose_samples_end_in_total() {
        let m = Metrics::default();
        m.reconciled(0.02, true);
        let text = m.render(false);
        assert!(
            text.contains("# TYPE agentdeck_reconciles counter\n"),
            "{text}"
        );
        assert!(text.contains("\nagentdeck_reconciles_total 1\n"), "{text}");
        assert!(
            text.contains("\nagentdeck_reconcile_errors_total 1\n"),
            "{text}"
        );
        assert!(text.contains("agentdeck_reconcile_duration_seconds_bucket{le=\"0.025\"} 1"));
        assert!(text.contains("agentdeck_leader 0"));
        assert_eq!(m.reconcile_counts(), (1, 1));
    }
}
