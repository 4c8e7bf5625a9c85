//! What the controller's parts share: the [`Context`] (clients,
//! configuration, the cluster view, recorder, metrics, leadership), what
//! it remembers of each pool between reconciles ([`PoolMemory`]) and its
//! own health ([`Diagnostics`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use jiff::Timestamp;
use kube::Client;
use kube::runtime::events::Recorder;

use super::{LeaderState, Metrics, reachability};
use crate::cluster::ClusterView;
use crate::config::Config;
use crate::plan::autoscale::Recommendations;

/// What the reconciler, the prober, the elector, the sweeps and the server
/// share: handles and configuration, plus the per-pool memory and the
/// diagnostics (each behind its own lock).
pub(crate) struct Context {
    pub client: Client,
    /// For long-lived streams (followed logs): see `cluster::StreamClients`.
    pub streams: crate::cluster::StreamClients,
    pub config: Config,
    pub namespaces: BTreeSet<String>,
    pub view: ClusterView,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub leader: LeaderState,
    /// Every store has finished its first list.
    pub synced: Arc<AtomicBool>,
    pub started: Timestamp,
    pub identity: String,
    /// What the controller remembers of each pool.
    pub memory: PoolMemories,
    /// The controller's own health: the API's reachability, the last
    /// reconcile.
    pub diagnostics: Diagnostics,
}

/// What the controller remembers of one pool (`namespace/pool`) between
/// reconciles: none of it is in the cluster, all of it bridges a lag.
#[derive(Clone, Debug, Default)]
pub(crate) struct PoolMemory {
    /// Hash of the last object applied per `kind/name`, and when, so an
    /// unchanged object is not sent again.
    pub applied: HashMap<String, (u64, Instant)>,
    /// What the pool's objects were last rendered from, and their
    /// `kind/name` keys in `applied` (see `reconcile::render_and_apply`).
    pub rendered: Option<(RenderInput, Vec<String>)>,
    /// The last replica count written, when (monotonic and wall clock), to
    /// bridge the Deployment store's lag.
    pub scaled: Option<(i32, Instant, Timestamp)>,
    /// When a burst's first scaling decision was made, and the pool's last
    /// scale time before it (see `gate`).
    pub burst: Option<(Instant, Option<Timestamp>)>,
    /// The pool's recent needs, for the scale-down stabilization window.
    /// Bounded twice: a history holds at most one entry per distinct need
    /// (see [`Recommendations`]), and one not recorded for a few resyncs
    /// (a deleted pool, a spell as follower) is dropped at the next record
    /// and seeded again.
    pub recommendations: Option<Recommendations>,
}

/// What a pool's objects are rendered from: the pool as its uid and
/// resourceVersion name it, and the replica count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RenderInput {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub replicas: i32,
}

impl PoolMemory {
    /// Whether the objects rendered from `input` were rendered last and
    /// each applied less than `reapply_after` ago (so rendering them again
    /// would send nothing).
    pub fn rendered_fresh(&self, input: &RenderInput, reapply_after: std::time::Duration) -> bool {
        let Some((last, keys)) = &self.rendered else {
            return false;
        };
        last == input
            && keys.iter().all(|k| {
                self.applied
                    .get(k)
                    .is_some_and(|(_, at)| at.elapsed() < reapply_after)
            })
    }
}

/// Every pool's [`PoolMemory`], by `namespace/pool`, behind one lock.
#[derive(Debug, Default)]
pub(crate) struct PoolMemories(Mutex<HashMap<String, PoolMemory>>);

impl PoolMemories {
    /// `read` of pool `key`'s memory (an empty one when nothing is kept).
    pub fn read<T>(&self, key: &str, read: impl FnOnce(&PoolMemory) -> T) -> T {
        let pools = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match pools.get(key) {
            Some(memory) => read(memory),
            None => read(&PoolMemory::default()),
        }
    }

    /// `write` to pool `key`'s memory (made when there was none).
    pub fn write<T>(&self, key: &str, write: impl FnOnce(&mut PoolMemory) -> T) -> T {
        let mut pools = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        write(pools.entry(key.to_owned()).or_default())
    }

    /// Keeps `history` as pool `key`'s recommendations, and drops every
    /// pool's history that `fresh` says is stale.
    pub fn record_recommendations(
        &self,
        key: &str,
        history: Recommendations,
        fresh: impl Fn(&Recommendations) -> bool,
    ) {
        let mut pools = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for memory in pools.values_mut() {
            if memory.recommendations.as_ref().is_some_and(|h| !fresh(h)) {
                memory.recommendations = None;
            }
        }
        pools.entry(key.to_owned()).or_default().recommendations = Some(history);
    }
}

/// The controller's own health, as `/healthz` reports it.
#[derive(Debug, Default)]
pub(crate) struct Diagnostics {
    /// When the last reconcile succeeded.
    pub last_reconcile: Mutex<Option<Timestamp>>,
    /// Since when no request got an answer (`None` while the API answers).
    pub api_unreachable_since: Mutex<Option<Instant>>,
    /// One line when the API goes, reminders with back-off, one when back.
    pub reachability: Mutex<reachability::Reachability>,
}

impl Context {
    /// Resolves once every store has finished its initial list. The sync
    /// is announced as a change after the flag is set, and the receiver is
    /// taken before the flag is read, so the announcement cannot be missed.
    pub(super) async fn wait_synced(&self) {
        let mut changes = self.view.changes.subscribe();
        while !self.synced.load(Ordering::SeqCst) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// The API answered: it is reachable (said once when it was not).
    pub fn api_ok(&self) {
        *self
            .diagnostics
            .api_unreachable_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        let back = self
            .diagnostics
            .reachability
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .answered(Instant::now());
        if let Some(reachability::Report::Back(after)) = back {
            tracing::info!(
                "the Kubernetes API at {} answers again after {}s",
                crate::cluster::server_label(),
                after.as_secs()
            );
        }
    }

    /// A request failed: counted, and when no answer came, the API is
    /// unreachable since now (said once, then reminded with back-off).
    pub fn api_failed(&self, e: &kube::Error) {
        match e {
            kube::Error::Api(s) => {
                self.metrics.api_error(Some(s.code));
                // The API answered, so it is reachable.
                self.api_ok();
            }
            _ => {
                self.metrics.api_error(None);
                self.diagnostics
                    .api_unreachable_since
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert_with(Instant::now);
                let report = self
                    .diagnostics
                    .reachability
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .failed(Instant::now());
                let server = crate::cluster::server_label();
                let cause = reachability::causes(e);
                match report {
                    Some(reachability::Report::Lost) => tracing::warn!(
                        "cannot reach the Kubernetes API at {server}: {cause}; retrying with back-off"
                    ),
                    Some(reachability::Report::StillLost(since)) => tracing::warn!(
                        "the Kubernetes API at {server} is still unreachable after {}s: {cause}",
                        since.as_secs()
                    ),
                    _ => tracing::debug!(%server, %cause, "API request failed"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn input(rv: &str, replicas: i32) -> RenderInput {
        RenderInput {
            uid: Some("u1".into()),
            resource_version: Some(rv.into()),
            replicas,
        }
    }

    #[test]
    fn a_render_is_skipped_only_for_the_same_pool_and_replicas_all_applied_lately() {
        let hour = Duration::from_secs(3600);
        let mut m = PoolMemory::default();
        assert!(
            !m.rendered_fresh(&input("5", 3), hour),
            "nothing rendered yet"
        );
        let keys = vec!["Deployment/a".to_owned(), "ServiceAccount/a".to_owned()];
        m.rendered = Some((input("5", 3), keys.clone()));
        // Rendered, but one object was never applied (its apply failed).
        m.applied.insert(keys[0].clone(), (1, Instant::now()));
        assert!(!m.rendered_fresh(&input("5", 3), hour));
        m.applied.insert(keys[1].clone(), (2, Instant::now()));
        assert!(m.rendered_fresh(&input("5", 3), hour));
        // The pool changed, or the replicas did: rendered again.
        assert!(!m.rendered_fresh(&input("6", 3), hour));
        assert!(!m.rendered_fresh(&input("5", 4), hour));
        let other_pool = RenderInput {
            uid: Some("u2".into()),
            ..input("5", 3)
        };
        assert!(!m.rendered_fresh(&other_pool, hour));
        // Due to be sent again (drift repair): rendered again.
        assert!(!m.rendered_fresh(&input("5", 3), Duration::ZERO));
    }
}
