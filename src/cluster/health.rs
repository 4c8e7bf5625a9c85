//! The latest health sample of every agent, as the prober
//! ([`crate::controller::prober`]) or a support bundle's record left it:
//! part of the cluster view the console and the controller read.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use jiff::Timestamp;

use crate::health::{Freshness, FreshnessThresholds, HealthReport, ProbeFacts, classify};

use super::Changes;
use super::feed;

/// What the prober last learnt about one agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSample {
    pub namespace: String,
    pub pod: String,
    /// Value of the pod's pool label.
    pub pool: Option<String>,
    /// When the prober first saw the pod (a new pod is not offline at once).
    pub first_seen: Timestamp,
    /// When the last probe ended.
    pub last_probe: Option<Timestamp>,
    /// The last report answered, and when (local clock) it arrived.
    pub last_report: Option<(HealthReport, Timestamp)>,
    /// HTTP status of the last answer.
    pub http_status: Option<u16>,
    /// How long the last probe took.
    pub latency: Option<Duration>,
    /// Why the last probe got no report.
    pub error: Option<String>,
}

impl AgentSample {
    /// A probe as a support bundle records it (`health/agents.json`:
    /// `{pod, at, latencyMs, status, body, error}`), in `namespace`; the
    /// pool is the pod's, found by the caller. `None` for a record without
    /// a pod or a time.
    pub fn from_record(
        namespace: &str,
        pool: Option<String>,
        r: &serde_json::Value,
    ) -> Option<AgentSample> {
        let at: Timestamp = r["at"].as_str()?.parse().ok()?;
        let report = serde_json::from_value::<HealthReport>(r["body"].clone()).ok();
        Some(AgentSample {
            namespace: namespace.to_owned(),
            pod: r["pod"].as_str()?.to_owned(),
            pool,
            first_seen: at,
            last_probe: Some(at),
            last_report: report.map(|rep| (rep, at)),
            http_status: r["status"].as_u64().and_then(|c| u16::try_from(c).ok()),
            latency: r["latencyMs"].as_u64().map(Duration::from_millis),
            error: r["error"].as_str().map(str::to_owned),
        })
    }

    /// Fresh, stale or offline at `now`.
    pub fn freshness(&self, now: Timestamp, thresholds: &FreshnessThresholds) -> Freshness {
        classify(
            &ProbeFacts {
                last_report: self.last_report,
                first_seen: self.first_seen,
            },
            now,
            thresholds,
        )
    }

    /// Agent clock minus local clock at the last answer.
    pub fn clock_skew(&self) -> Option<jiff::SignedDuration> {
        self.last_report
            .map(|(r, at)| crate::health::clock_skew(&r, at))
    }
}

/// The last sample of every agent, by (namespace, pod); cheap to clone.
/// Every update bumps the cluster view's change signal.
#[derive(Debug, Clone, Default)]
pub struct HealthSamples(
    Arc<RwLock<HashMap<(String, String), AgentSample>>>,
    Changes,
    feed::ChangeFeed,
);

impl HealthSamples {
    /// Samples whose updates bump `changes`.
    pub fn with_changes(changes: Changes) -> HealthSamples {
        HealthSamples(Arc::default(), changes, Default::default())
    }

    /// The pods whose sample changed or went since the reader last looked.
    pub fn feed(&self) -> &feed::ChangeFeed {
        &self.2
    }

    /// A copy of every sample.
    pub fn snapshot(&self) -> Vec<AgentSample> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The sample of one pod.
    pub fn get(&self, namespace: &str, pod: &str) -> Option<AgentSample> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(namespace.to_owned(), pod.to_owned()))
            .cloned()
    }

    /// Puts `samples` in place of the prober's (a snapshot's recorded
    /// health, with no prober running).
    pub fn load(&self, samples: Vec<AgentSample>) {
        for s in samples {
            self.update(s);
        }
    }

    pub(crate) fn update(&self, sample: AgentSample) {
        let key = (sample.namespace.clone(), sample.pod.clone());
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), sample);
        self.2.touch(key);
        self.1.bump();
    }

    /// Keeps samples of `live` pods only, adding a first sighting for new ones.
    pub(crate) fn retain_and_register(
        &self,
        live: &[(String, String, Option<String>)],
        now: Timestamp,
    ) {
        let mut map = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let keys: std::collections::HashSet<(String, String)> = live
            .iter()
            .map(|(ns, p, _)| (ns.clone(), p.clone()))
            .collect();
        map.retain(|k, _| {
            let keep = keys.contains(k);
            if !keep {
                self.2.touch(k.clone());
            }
            keep
        });
        for (ns, pod, pool) in live {
            map.entry((ns.clone(), pod.clone())).or_insert_with(|| {
                self.2.touch((ns.clone(), pod.clone()));
                AgentSample {
                    namespace: ns.clone(),
                    pod: pod.clone(),
                    pool: pool.clone(),
                    first_seen: now,
                    last_probe: None,
                    last_report: None,
                    http_status: None,
                    latency: None,
                    error: None,
                }
            });
        }
    }
}
