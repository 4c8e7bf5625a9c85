//! The controller's Prometheus metrics, rendered in the text exposition
//! format. Hand-written rather than a client library: a dozen families, no
//! label churn beyond pools, and no extra dependency to build.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};

/// Buckets (seconds) of the reconcile duration histogram.
const RECONCILE_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
/// Buckets (seconds) of the task duration and queue-to-start histograms.
const TASK_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// A cumulative histogram.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        for (i, b) in self.bounds.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

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

/// Name, help and getter of one per-pool gauge.
type Gauge = (&'static str, &'static str, fn(&PoolGauges) -> i64);

#[derive(Debug)]
struct Inner {
    pools: BTreeMap<(String, String), PoolGauges>,
    scale_events: BTreeMap<(String, String, &'static str), u64>,
    task_duration: Histogram,
    queue_to_start: Histogram,
    seen_started: HashSet<String>,
    seen_finished: HashSet<String>,
    reconciles: u64,
    reconcile_errors: u64,
    reconcile_duration: Histogram,
    api_errors: BTreeMap<String, u64>,
}

/// Every metric the controller exports.
#[derive(Debug)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            inner: Mutex::new(Inner {
                pools: BTreeMap::new(),
                scale_events: BTreeMap::new(),
                task_duration: Histogram::new(TASK_BUCKETS),
                queue_to_start: Histogram::new(TASK_BUCKETS),
                seen_started: HashSet::new(),
                seen_finished: HashSet::new(),
                reconciles: 0,
                reconcile_errors: 0,
                reconcile_duration: Histogram::new(RECONCILE_BUCKETS),
                api_errors: BTreeMap::new(),
            }),
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a pool's state after a reconcile.
    pub fn set_pool(&self, namespace: &str, pool: &str, gauges: PoolGauges) {
        self.lock()
            .pools
            .insert((namespace.to_owned(), pool.to_owned()), gauges);
    }

    /// Forgets a deleted pool: every series labelled with it goes.
    pub fn remove_pool(&self, namespace: &str, pool: &str) {
        let mut inner = self.lock();
        inner.pools.remove(&(namespace.to_owned(), pool.to_owned()));
        inner
            .scale_events
            .retain(|(ns, name, _), _| (ns.as_str(), name.as_str()) != (namespace, pool));
    }

    /// Forgets every pool not in `live` (`(namespace, name)`): a pool
    /// deleted while no reconcile saw it go leaves no series behind.
    pub fn retain_pools(&self, live: &HashSet<(String, String)>) {
        let mut inner = self.lock();
        inner.pools.retain(|key, _| live.contains(key));
        inner
            .scale_events
            .retain(|(ns, name, _), _| live.contains(&(ns.clone(), name.clone())));
    }

    /// Counts one replica change (`up` or `down`).
    pub fn scaled(&self, namespace: &str, pool: &str, direction: &'static str) {
        *self
            .lock()
            .scale_events
            .entry((namespace.to_owned(), pool.to_owned(), direction))
            .or_default() += 1;
    }

    /// Observes a task's queue-to-start latency once per task uid.
    pub fn task_started(&self, uid: &str, latency_seconds: f64) {
        let mut inner = self.lock();
        if inner.seen_started.insert(uid.to_owned()) {
            inner.queue_to_start.observe(latency_seconds.max(0.0));
        }
    }

    /// Observes a task's run duration once per task uid.
    pub fn task_finished(&self, uid: &str, duration_seconds: f64) {
        let mut inner = self.lock();
        if inner.seen_finished.insert(uid.to_owned()) {
            inner.task_duration.observe(duration_seconds.max(0.0));
        }
    }

    /// Counts a reconcile and its duration.
    pub fn reconciled(&self, seconds: f64, failed: bool) {
        let mut inner = self.lock();
        inner.reconciles += 1;
        if failed {
            inner.reconcile_errors += 1;
        }
        inner.reconcile_duration.observe(seconds);
    }

    /// Counts an API error by HTTP code (`transport` when none).
    pub fn api_error(&self, code: Option<u16>) {
        let code = code.map_or_else(|| "transport".to_owned(), |c| c.to_string());
        *self.lock().api_errors.entry(code).or_default() += 1;
    }

    /// Reconciles so far, and how many failed.
    pub fn reconcile_counts(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.reconciles, inner.reconcile_errors)
    }

    /// The text exposition.
    pub fn render(&self, leader: bool) -> String {
        let inner = self.lock();
        let mut out = String::with_capacity(4096);
        let pool_gauges: [Gauge; 7] = [
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
        for (name, help, get) in pool_gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for ((ns, pool), g) in &inner.pools {
                let _ = writeln!(
                    out,
                    "{name}{{namespace=\"{}\",pool=\"{}\"}} {}",
                    escape(ns),
                    escape(pool),
                    get(g)
                );
            }
        }
        let name = "agentdeck_pool_agents_health";
        let _ = writeln!(
            out,
            "# HELP {name} Agents by /healthz freshness.\n# TYPE {name} gauge"
        );
        for ((ns, pool), g) in &inner.pools {
            for (class, v) in [
                ("fresh", g.fresh),
                ("stale", g.stale),
                ("offline", g.offline),
            ] {
                let _ = writeln!(
                    out,
                    "{name}{{namespace=\"{}\",pool=\"{}\",freshness=\"{class}\"}} {v}",
                    escape(ns),
                    escape(pool)
                );
            }
        }
        let name = "agentdeck_scale_events_total";
        let _ = writeln!(
            out,
            "# HELP {name} Replica changes made by the autoscaler.\n# TYPE {name} counter"
        );
        for ((ns, pool, dir), v) in &inner.scale_events {
            let _ = writeln!(
                out,
                "{name}{{namespace=\"{}\",pool=\"{}\",direction=\"{dir}\"}} {v}",
                escape(ns),
                escape(pool)
            );
        }
        for (name, help, h) in [
            (
                "agentdeck_task_duration_seconds",
                "Time from a task's start to its end.",
                &inner.task_duration,
            ),
            (
                "agentdeck_task_queue_to_start_seconds",
                "Time from a task's creation to its start (claim).",
                &inner.queue_to_start,
            ),
            (
                "agentdeck_reconcile_duration_seconds",
                "Time one pool reconcile takes.",
                &inner.reconcile_duration,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            h.render(&mut out, name, "");
        }
        for (name, help, v) in [
            (
                "agentdeck_reconciles_total",
                "Pool reconciles run.",
                inner.reconciles,
            ),
            (
                "agentdeck_reconcile_errors_total",
                "Pool reconciles that failed.",
                inner.reconcile_errors,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
        let name = "agentdeck_api_errors_total";
        let _ = writeln!(
            out,
            "# HELP {name} Kubernetes API errors by HTTP code.\n# TYPE {name} counter"
        );
        for (code, v) in &inner.api_errors {
            let _ = writeln!(out, "{name}{{code=\"{code}\"}} {v}");
        }
        let name = "agentdeck_leader";
        let _ = writeln!(
            out,
            "# HELP {name} 1 when this controller holds the leader Lease.\n# TYPE {name} gauge\n{name} {}",
            u8::from(leader)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_tasks_are_observed_once() {
        let m = Metrics::default();
        m.task_started("u1", 2.0);
        m.task_started("u1", 2.0);
        m.task_started("u2", 40.0);
        let text = m.render(true);
        assert!(text.contains("agentdeck_task_queue_to_start_seconds_bucket{le=\"5\"} 1"));
        assert!(text.contains("agentdeck_task_queue_to_start_seconds_bucket{le=\"60\"} 2"));
        assert!(text.contains("agentdeck_task_queue_to_start_seconds_count 2"));
        assert!(text.contains("agentdeck_leader 1"));
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
    fn a_gone_pool_leaves_no_series_behind() {
        let m = Metrics::default();
        for pool in ["kept", "gone"] {
            m.set_pool("ns", pool, PoolGauges::default());
            m.scaled("ns", pool, "up");
        }
        m.retain_pools(&HashSet::from([("ns".to_owned(), "kept".to_owned())]));
        let text = m.render(false);
        assert!(text.contains("pool=\"kept\""), "{text}");
        assert!(!text.contains("pool=\"gone\""), "{text}");
        m.remove_pool("ns", "kept");
        assert!(!m.render(false).contains("pool=\""));
    }
}
