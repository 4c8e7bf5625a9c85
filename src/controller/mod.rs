//! The controller: keeps every AgentPool's workload the way the pool asks.
//!
//! One kube-rs runtime `Controller` over AgentPools, triggered by its owned
//! Deployments and by the tasks, pods and Jobs of each pool, all read from
//! shared watch-fed stores (the *cluster view*, which the console embeds).
//! A reconcile reads the stores, asks the pure planners in [`crate::plan`],
//! writes only differences (server-side apply with field manager
//! `agentdeck`, status updates carrying the resourceVersion read) and
//! records an Event for each decision a human would want to see.
//!
//! Around it run the health prober, the leader elector (only the leader
//! writes; followers keep warm stores for a quick takeover) and, in the
//! daemon, the `/healthz` / `/metrics` server ([`crate::server`]).

// kube::Error is large and every variant carries one; boxing them would
// only move the allocation to the error path's callers.
#![allow(clippy::result_large_err)]

pub mod debugpods;
pub mod feed;
pub mod gate;
pub mod leader;
pub mod listwatch;
pub mod metrics;
pub mod orphans;
pub mod pod;
pub mod prober;
pub mod reachability;
mod reconcile;
pub mod retention;
pub mod slim;
pub mod tails;
pub mod watches;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cluster::Connection;
use crate::config::Config;
use crate::crd::{AgentPool, AgentTask, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY};
use crate::health::{HealthReport, HealthStatus};
pub use leader::LeaderState;
pub use metrics::Metrics;
use pod::CachedPod;
pub use prober::{AgentSample, HealthSamples};
pub use watches::{WatchBoard, WatchCell};

/// Field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "agentdeck";
/// Name the controller reports Events as.
pub const REPORTER: &str = "agentdeck-controller";
/// A pool is reconciled on the first event of a burst at once; the rest of
/// the burst (100 tasks created at once) is one follow-up reconcile once
/// the pool has seen no event for this long (see [`gate`]).
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// An owned object could not be applied.
    #[error("cannot apply {kind} {name} of AgentPool {pool}: {source}")]
    ApplyFailed {
        pool: String,
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The manifests of a pool could not be built.
    #[error("cannot build the objects of AgentPool {pool}: {source}")]
    ManifestFailed {
        pool: String,
        #[source]
        source: crate::plan::manifests::ManifestError,
    },
    /// The pool's status could not be written.
    #[error("cannot update the status of AgentPool {pool}: {source}")]
    PoolStatusFailed {
        pool: String,
        #[source]
        source: kube::Error,
    },
    /// A task's status could not be written.
    #[error("cannot update the status of AgentTask {task}: {source}")]
    TaskStatusFailed {
        task: String,
        #[source]
        source: kube::Error,
    },
    /// A pod's deletion cost could not be written.
    #[error("cannot mark pod {pod} with its deletion cost: {source}")]
    DeletionCostFailed {
        pod: String,
        #[source]
        source: kube::Error,
    },
    /// A task's Job could not be created or deleted.
    #[error("cannot {action} Job {job} of AgentTask {task}: {source}")]
    JobFailed {
        action: &'static str,
        task: String,
        job: String,
        #[source]
        source: kube::Error,
    },
    /// The object came without a namespace (the pool CRD is namespaced).
    #[error("AgentPool {0} has no namespace")]
    NoNamespace(String),
}

impl ControllerError {
    fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            ControllerError::ApplyFailed { source, .. }
            | ControllerError::PoolStatusFailed { source, .. }
            | ControllerError::TaskStatusFailed { source, .. }
            | ControllerError::DeletionCostFailed { source, .. }
            | ControllerError::JobFailed { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reports each watch outcome (`None` = fine) to the API health tracker.
type WatchHealth = Arc<dyn Fn(WatchSignal<'_>) + Send + Sync>;

/// What one watch stream reports.
enum WatchSignal<'a> {
    /// An event arrived.
    Event,
    /// The initial list is in the store.
    Listed,
    /// The watch failed (it retries with backoff).
    Failed(&'a watcher::Error),
}

/// Watches the controller runs; `synced` once all have listed.
const WATCHES: usize = 5;

/// Result of this layer.
pub type Result<T, E = ControllerError> = std::result::Result<T, E>;

/// What the controller sees: watch-fed stores and the latest health sample
/// per agent. Cheap to clone; reading a store never calls the API.
#[derive(Clone)]
pub struct ClusterView {
    pub pools: Store<AgentPool>,
    pub tasks: Store<AgentTask>,
    pub pods: Store<CachedPod>,
    pub deployments: Store<Deployment>,
    pub jobs: Store<Job>,
    pub health: HealthSamples,
    /// Bumped on every watch event and health sample, so a reader (the
    /// console) rebuilds what it shows on change rather than on a timer.
    pub changes: Changes,
    /// What each watch behind the stores is doing: a store is current only
    /// while its watch watches.
    pub watches: WatchBoard,
    /// What changed in each store since its reader last looked.
    pub feeds: Feeds,
    /// Each pool's tasks and pods, by (namespace, pool).
    pub by_pool: ByPool,
}

/// What changed in each store since its reader (the console's rows) last
/// looked; the health samples keep their own ([`HealthSamples::feed`]).
#[derive(Clone, Default)]
pub struct Feeds {
    pub pools: feed::ChangeFeed,
    pub tasks: feed::ChangeFeed,
    pub pods: feed::ChangeFeed,
    pub jobs: feed::ChangeFeed,
}

impl Feeds {
    /// Starts recording in every feed (the next take of each reads its
    /// whole store).
    pub fn subscribe(&self) {
        for f in [&self.pools, &self.tasks, &self.pods, &self.jobs] {
            f.subscribe();
        }
    }
}

/// The names of each pool's tasks (by `spec.pool`) and pods (by pool
/// label), so a reconcile reads one pool's objects, not every one.
#[derive(Clone)]
pub struct ByPool {
    pub tasks: feed::PoolIndex<AgentTask>,
    pub pods: feed::PoolIndex<CachedPod>,
    /// Changes to the pools (their specs are what the retention and
    /// orphan looks read beside each pool's tasks).
    pub pools: feed::Generation,
}

impl Default for ByPool {
    fn default() -> Self {
        ByPool {
            tasks: feed::PoolIndex::new(|t: &AgentTask| Some(t.spec.pool.as_str())),
            pods: feed::PoolIndex::new(|p: &CachedPod| {
                p.metadata
                    .labels
                    .as_ref()?
                    .get(LABEL_POOL)
                    .map(String::as_str)
            }),
            pools: feed::Generation::default(),
        }
    }
}

impl ClusterView {
    /// The tasks of pool `name` in `ns`, as the store holds them.
    pub fn pool_tasks(&self, ns: &str, name: &str) -> Vec<Arc<AgentTask>> {
        self.by_pool.tasks.objects(&self.tasks, ns, name)
    }

    /// The pods labelled with pool `label` (the label's value for the
    /// pool's name) in `ns`, as the store holds them.
    pub fn pool_pods(&self, ns: &str, label: &str) -> Vec<Arc<CachedPod>> {
        self.by_pool.pods.objects(&self.pods, ns, label)
    }
}

/// A cheap change signal: a counter that every store event and health
/// sample bumps. Readers [`Changes::subscribe`] and await `changed()`;
/// a burst of bumps wakes a reader once.
#[derive(Clone, Debug)]
pub struct Changes(
    Arc<tokio::sync::watch::Sender<u64>>,
    /// Watch failures so far (each is retried with backoff and relists).
    Arc<std::sync::atomic::AtomicU64>,
);

impl Default for Changes {
    fn default() -> Self {
        Changes(Arc::new(tokio::sync::watch::Sender::new(0)), Arc::default())
    }
}

impl Changes {
    /// Records a failed watch (it retries and lists again).
    pub fn watch_failed(&self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }

    /// Watch failures recorded so far.
    pub fn watch_failures(&self) -> u64 {
        self.1.load(Ordering::SeqCst)
    }

    /// Records one change.
    pub fn bump(&self) {
        self.0.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver whose `changed()` resolves after the next bump.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.subscribe()
    }

    /// Changes recorded so far.
    pub fn count(&self) -> u64 {
        *self.0.borrow()
    }
}

/// How [`start_with`] runs the controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// Watch and probe only: never compete for the Lease, so nothing is
    /// ever written (the console's `--read-only`, and `-A`).
    pub watch_only: bool,
    /// Watch every namespace the user can list instead of the configured ones.
    pub all_namespaces: bool,
    /// The cluster is a snapshot (a support bundle): watch only, and run
    /// nothing that reaches past the API — no probes of the agents (their
    /// health is as recorded: [`prober::HealthSamples::load`]), no log
    /// tails, retention or sweeps. Implies `watch_only`.
    pub replay: bool,
}

/// State shared by the reconciler, the prober, the elector and the server.
pub(crate) struct Shared {
    pub client: Client,
    /// For long-lived streams (followed logs): see `cluster::StreamClients`.
    pub streams: crate::cluster::StreamClients,
    pub config: Config,
    pub namespaces: BTreeSet<String>,
    pub view: ClusterView,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub leader: LeaderState,
    /// Hash of the last object applied per `kind/namespace/name`, so an
    /// unchanged object is not sent again.
    pub applied: Mutex<HashMap<String, (u64, Instant)>>,
    /// Last replica count written per `namespace/pool`, when (monotonic and
    /// wall clock), to bridge the Deployment store's lag.
    pub scaled: Mutex<HashMap<String, (i32, Instant, Timestamp)>>,
    /// Per `namespace/pool`: when a burst's first scaling decision was made
    /// and the pool's last scale time before it (see `gate`).
    pub burst_scaled: Mutex<HashMap<String, (Instant, Option<Timestamp>)>>,
    /// Each pool's recent needs (`namespace/pool`), for the scale-down
    /// stabilization window. Bounded twice: a history holds at most one
    /// entry per distinct need (see [`crate::plan::autoscale::Recommendations`]),
    /// and one not recorded for a few resyncs (a deleted pool, a spell as
    /// follower) is dropped at the next record and seeded again.
    pub recommendations:
        Mutex<std::collections::BTreeMap<String, crate::plan::autoscale::Recommendations>>,
    pub last_reconcile: Mutex<Option<Timestamp>>,
    pub synced: Arc<AtomicBool>,
    pub api_unreachable_since: Mutex<Option<Instant>>,
    /// One line when the API goes, reminders with back-off, one when back.
    pub reachability: Mutex<reachability::Reachability>,
    pub started: Timestamp,
    pub identity: String,
}

impl Shared {
    /// Resolves once every store has finished its initial list. The sync
    /// is announced as a change after the flag is set, and the receiver is
    /// taken before the flag is read, so the announcement cannot be missed.
    async fn wait_synced(&self) {
        let mut changes = self.view.changes.subscribe();
        while !self.synced.load(Ordering::SeqCst) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }
    pub fn api_ok(&self) {
        *self
            .api_unreachable_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        let back = self
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

    pub fn api_failed(&self, e: &kube::Error) {
        match e {
            kube::Error::Api(s) => {
                self.metrics.api_error(Some(s.code));
                // The API answered, so it is reachable.
                self.api_ok();
            }
            _ => {
                self.metrics.api_error(None);
                self.api_unreachable_since
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert_with(Instant::now);
                let report = self
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

/// A running controller. Dropping it does not stop it: cancel the token
/// given to [`start`], then [`ControllerHandle::join`].
pub struct ControllerHandle {
    shared: Arc<Shared>,
    tasks: tokio::sync::Mutex<JoinSet<()>>,
}

impl ControllerHandle {
    /// The stores and health samples (a cheap clone).
    pub fn view(&self) -> ClusterView {
        self.shared.view.clone()
    }

    /// Leadership, shared with the elector.
    pub fn leader(&self) -> LeaderState {
        self.shared.leader.clone()
    }

    /// The identity this controller holds the Lease as.
    pub fn identity(&self) -> &str {
        &self.shared.identity
    }

    /// Every store has finished its initial list.
    pub fn is_synced(&self) -> bool {
        self.shared.synced.load(Ordering::SeqCst)
    }

    /// Waits until the watches have synced (at once when they have).
    pub async fn synced(&self) {
        self.shared.wait_synced().await;
    }

    /// Reconciles run so far, and how many failed.
    pub fn reconcile_counts(&self) -> (u64, u64) {
        self.shared.metrics.reconcile_counts()
    }

    /// The daemon's own `/healthz` report: unhealthy until the watches are
    /// synced, and when the API has been unreachable past
    /// `server.apiUnreachableSeconds`; `lastActivity` is the last successful
    /// reconcile (start time before the first).
    pub fn health(&self) -> HealthReport {
        let s = &self.shared;
        let unreachable = s
            .api_unreachable_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|t| t.elapsed() >= s.config.server.api_unreachable_after());
        // A watch failing as long as the API may be unreachable leaves a
        // store nobody should act on: say so (a liveness probe restarts
        // the daemon, which lists afresh).
        let watch_failing = s.view.watches.summary().worst.is_some_and(|(_, w)| {
            w.phase == watches::Phase::Failing
                && w.since.elapsed() >= s.config.server.api_unreachable_after()
        });
        let status = if !self.is_synced() || unreachable || watch_failing {
            HealthStatus::Unhealthy
        } else {
            HealthStatus::Healthy
        };
        HealthReport {
            status,
            current_time: Timestamp::now(),
            last_activity: s
                .last_reconcile
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .unwrap_or(s.started),
        }
    }

    /// `/metrics` in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.shared.metrics.render(self.shared.leader.is_leader())
    }

    /// Stops every task at once without releasing the Lease, as a killed
    /// process would (failover tests and benches).
    pub fn abort(&self) {
        if let Ok(mut tasks) = self.tasks.try_lock() {
            tasks.abort_all();
        }
        self.shared.leader.clear();
    }

    /// Waits until every task of the controller ended (after cancel).
    pub async fn join(&self) {
        let mut tasks = self.tasks.lock().await;
        while tasks.join_next().await.is_some() {}
    }
}

fn namespaced_or_all<K>(client: &Client, namespaces: &BTreeSet<String>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespaces.iter().next() {
        Some(ns) if namespaces.len() == 1 => Api::namespaced(client.clone(), ns),
        _ => Api::all(client.clone()),
    }
}

/// Keeps an object as listed (managedFields aside).
fn keep_all<K>(_: &mut K) {}

/// The `status` fields of a task [`strip_task`] empties, as list pages
/// are read (their text never copied).
const STRIPPED_TASK_FIELDS: slim::Emptied = &["outputTail"];

/// Drops a cached task's `status.outputTail` (up to 4 KiB each, kept by
/// every finished task until its pool's history lets it go: at 100,000
/// tasks most of the task store). What is left is the empty string, so
/// "it has a kept output" still reads as `Some`; nothing decides on its
/// text, and whoever shows or keeps it reads the task from the API
/// ([`task_output_stripped`] says when, [`with_kept_output`] does it).
pub fn strip_task(task: &mut AgentTask) {
    if let Some(tail) = task.status.as_mut().and_then(|s| s.output_tail.as_mut()) {
        *tail = String::new();
    }
}

/// Whether this copy of a task may have lost its `status.outputTail` to
/// [`strip_task`] (a task whose output was really empty reads the same).
pub fn task_output_stripped(task: &AgentTask) -> bool {
    task.status
        .as_ref()
        .and_then(|s| s.output_tail.as_deref())
        .is_some_and(str::is_empty)
}

/// `task` with its `status.outputTail` as the API has it, when the cached
/// copy was stripped of it; `None` when the API has moved on from this
/// copy (another resourceVersion, or gone), which a write with this copy's
/// resourceVersion would have met as a conflict anyway.
pub(crate) async fn with_kept_output(
    api: &Api<AgentTask>,
    task: &AgentTask,
) -> std::result::Result<Option<AgentTask>, kube::Error> {
    if !task_output_stripped(task) {
        return Ok(Some(task.clone()));
    }
    let name = task.name_any();
    let Some(fresh) = api.get_opt(&name).await? else {
        return Ok(None);
    };
    if fresh.metadata.resource_version != task.metadata.resource_version {
        return Ok(None);
    }
    Ok(Some(fresh))
}

/// Drops what nothing reads from a pod the debug-pod sweep caches:
/// volumes, mounts, env, probes, resources, security contexts, scheduling
/// constraints (most of a pod's size on a cluster). The managed pods are
/// cached as [`CachedPod`], which keeps less still.
pub(crate) fn strip_pod(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.volumes = None;
    spec.tolerations = None;
    spec.affinity = None;
    spec.security_context = None;
    spec.topology_spread_constraints = None;
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        c.env = None;
        c.env_from = None;
        c.volume_mounts = None;
        c.volume_devices = None;
        c.liveness_probe = None;
        c.readiness_probe = None;
        c.startup_probe = None;
        c.lifecycle = None;
        c.security_context = None;
        c.resources = None;
        c.resize_policy = None;
    }
}

/// A reflector over `api`: its store, `subscribers` streams of the objects
/// it applies (for the Controller's triggers and the log tails), and the
/// task driving it (which also feeds API health and the watch board).
///
/// kube-runtime's shared reflector is not used: its subscriber
/// (`ReflectHandle`) looks each object up when it is read and, when the
/// object was deleted in between, answers `Pending` without asking to be
/// woken again. A subscriber polled only on its own wake-ups (one stream of
/// a `select_all`, as the Controller's triggers are) then never reads again,
/// its buffer fills, and the reflector waits for it forever: the store
/// freezes while everything says it is synced. [`Subscriber`] skips an
/// object that is gone and reads on.
#[allow(clippy::too_many_arguments)]
fn shared_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    (strip, emptied, first_list): (fn(&mut K), slim::Emptied, FirstListAs),
    shared_api: WatchHealth,
    changes: Changes,
    cell: WatchCell,
    subscribers: usize,
    followers: Vec<Arc<dyn feed::Follower<K>>>,
    cancel: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> (Store<K>, Vec<Subscriber<K>>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store::<K>();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..subscribers)
        .map(|_| tokio::sync::mpsc::channel::<ObjectRef<K>>(SUBSCRIBER_BUFFER))
        .unzip();
    let subscribers = receivers
        .into_iter()
        .map(|rx| Subscriber {
            rx,
            store: reader.clone(),
        })
        .collect();
    let stream = listwatch::watcher_emptying(api, config, cell, emptied)
        .default_backoff()
        .modify(move |o| {
            // managedFields are never read here and are most of an object's size.
            o.meta_mut().managed_fields = None;
            strip(o);
        });
    let store = reader.clone();
    let mut writer = writer;
    tasks.spawn(async move {
        tokio::pin!(stream);
        let mut senders = senders;
        let mut listed = false;
        let mut first = FirstList::new(first_list);
        let mut last_bump: Option<tokio::time::Instant> = None;
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return,
                n = stream.next() => n,
            };
            // Into the store (as kube-runtime's `reflect`), the first list
            // as it arrives (see `FirstList`).
            let (next, fill) = match next {
                Some(Ok(event)) => {
                    let (event, fill) = first.write(&mut writer, event);
                    (Some(Ok(event)), fill)
                }
                other => (other, Fill::No),
            };
            // What the subscribers are told (kube-runtime's dispatch: an
            // applied object; after a list, every object), and the
            // followers (every change).
            let told: Vec<ObjectRef<K>> = match &next {
                // The first list's objects, each in the store as it came:
                // the subscribers hear of them all once it has ended.
                Some(Ok(watcher::Event::InitApply(o))) if fill == Fill::Object => {
                    followers.iter().for_each(|f| f.applied(o));
                    Vec::new()
                }
                Some(Ok(watcher::Event::Apply(o))) => {
                    followers.iter().for_each(|f| f.applied(o));
                    vec![ObjectRef::from_obj(o)]
                }
                Some(Ok(watcher::Event::Delete(o))) => {
                    followers.iter().for_each(|f| f.deleted(o));
                    Vec::new()
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    let all = store.state();
                    // After a first list filled as it came, the followers
                    // were told of each object already (a relist would
                    // rebuild each index and make the console rebuild
                    // every row, for nothing new).
                    if fill != Fill::End {
                        followers.iter().for_each(|f| f.relisted(&all));
                    }
                    all.iter().map(|o| ObjectRef::from_obj(&**o)).collect()
                }
                _ => Vec::new(),
            };
            // Said after the followers were told, so a reader woken by it
            // finds the change in the feeds. A first list's objects are
            // said at most every FILL_BUMP_GAP (each bump wakes every
            // reader: 100,000 of them were a tenth of a console's first
            // list), the list's end at once.
            let said_lately =
                fill == Fill::Object && last_bump.is_some_and(|at| at.elapsed() < FILL_BUMP_GAP);
            if matches!(next, Some(Ok(_))) && !said_lately {
                changes.bump();
                last_bump = Some(tokio::time::Instant::now());
            }
            match next {
                Some(Ok(watcher::Event::InitDone)) if !listed => {
                    listed = true;
                    tracing::debug!(kind = %K::kind(&K::DynamicType::default()), "watch listed");
                    shared_api(WatchSignal::Listed);
                }
                // `Init` starts a relist before anything was answered.
                Some(Ok(watcher::Event::Init)) => {}
                Some(Ok(_)) => shared_api(WatchSignal::Event),
                Some(Err(e)) => {
                    changes.watch_failed();
                    // An unreachable API is said once for every watch (see
                    // `reachability`); an answer such as 403 is worth a line.
                    let kind = K::kind(&K::DynamicType::default()).to_string();
                    if watch_error_is_transport(&e) {
                        tracing::debug!(%kind, error = %e, "watch failed; retrying with backoff");
                    } else {
                        tracing::warn!(%kind, error = %e, "watch failed; retrying with backoff");
                    }
                    shared_api(WatchSignal::Failed(&e));
                }
                None => return,
            }
            if !tell(&mut senders, told, &cancel).await {
                return;
            }
        }
    });
    (reader, subscribers)
}

/// Tells each subscriber of each of `told`, waiting for one whose buffer
/// is full; a subscriber that went away is not waited for again. `false`
/// once cancelled.
async fn tell<K>(
    senders: &mut Vec<tokio::sync::mpsc::Sender<ObjectRef<K>>>,
    told: Vec<ObjectRef<K>>,
    cancel: &CancellationToken,
) -> bool
where
    K: Resource + 'static,
    K::DynamicType: Clone,
{
    for object in told {
        let mut gone = Vec::new();
        for (i, tx) in senders.iter().enumerate() {
            let sent = tokio::select! {
                _ = cancel.cancelled() => return false,
                sent = tx.send(object.clone()) => sent,
            };
            if sent.is_err() {
                gone.push(i);
            }
        }
        for i in gone.into_iter().rev() {
            senders.swap_remove(i);
        }
    }
    true
}

/// How a watch's first list goes into its store: as it arrives.
///
/// kube-runtime's reflector keeps a list's objects aside until the list
/// has ended, then swaps them in, so that a relist never shows a mix of
/// old and new. On the first list there is nothing old to mix with: the
/// store is empty. So each object of the first list goes into the store
/// as its page arrives, and a console shows the first page of 100,000
/// tasks while the rest streams in (the watch still counts as listing
/// until the end, so nothing acts on a partial store: see `gate`). A first
/// list that fails part way and starts again is taken as every relist is
/// (aside, then swapped in), so that nothing it brought stays if the
/// second list has it no more.
struct FirstList {
    /// Lists started.
    lists: u32,
    /// The first list has ended (or is taken whole).
    done: bool,
}

/// A first list's objects arriving are said on the change signal at most
/// this often (see `shared_watch`).
const FILL_BUMP_GAP: Duration = Duration::from_millis(5);

/// What [`FirstList::write`] did with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fill {
    /// Nothing special: as kube-runtime's reflector would.
    No,
    /// An object of the first list, in the store at once.
    Object,
    /// The end of a first list whose objects went in as they came.
    End,
}

/// How a watch's first list goes into its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirstListAs {
    /// As it arrives (see [`FirstList`]).
    Arriving,
    /// Whole at its end, as every relist: for the store a kube
    /// `Controller` runs on (the pools'), whose runner waits for the
    /// reflector's ready signal, which only that swap gives.
    Whole,
}

impl FirstList {
    fn new(first_list: FirstListAs) -> Self {
        FirstList {
            lists: 0,
            done: first_list == FirstListAs::Whole,
        }
    }

    /// Writes `event` to the store behind `writer`, and gives it back with
    /// what was done ([`Fill`]).
    fn write<K>(
        &mut self,
        writer: &mut reflector::store::Writer<K>,
        event: watcher::Event<K>,
    ) -> (watcher::Event<K>, Fill)
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        let filling = !self.done && self.lists == 1;
        match event {
            watcher::Event::InitApply(o) if filling => {
                // Moved, not copied, into the event the store applies.
                let apply = watcher::Event::Apply(o);
                writer.apply_watcher_event(&apply);
                let watcher::Event::Apply(o) = apply else {
                    unreachable!("built as Apply just above")
                };
                return (watcher::Event::InitApply(o), Fill::Object);
            }
            watcher::Event::Init => self.lists += 1,
            // The store holds the whole list already: the swap would put
            // the empty set aside in its place.
            watcher::Event::InitDone if filling => {
                self.done = true;
                return (event, Fill::End);
            }
            watcher::Event::InitDone => self.done = true,
            _ => {}
        }
        writer.apply_watcher_event(&event);
        (event, Fill::No)
    }
}

/// Objects told to a subscriber and not yet read, per subscriber (as the
/// shared reflector's buffer was): the watch waits for a subscriber that
/// has this many unread.
const SUBSCRIBER_BUFFER: usize = 1024;

/// The objects a watch applies, read from its store when taken: an object
/// deleted before it was read is skipped (see [`shared_watch`]).
pub(crate) struct Subscriber<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    rx: tokio::sync::mpsc::Receiver<ObjectRef<K>>,
    store: Store<K>,
}

impl<K> Stream for Subscriber<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    type Item = Arc<K>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Arc<K>>> {
        loop {
            match std::task::ready!(self.rx.poll_recv(cx)) {
                None => return std::task::Poll::Ready(None),
                Some(object) => {
                    if let Some(found) = self.store.get(&object) {
                        return std::task::Poll::Ready(Some(found));
                    }
                    // Deleted since: read on (a `Pending` here would ask
                    // nobody to wake this stream again).
                }
            }
        }
    }
}

/// A watch failure with no answer from the API behind it (connect, TLS,
/// timeout), as opposed to an error answer.
fn watch_error_is_transport(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => !matches!(e, kube::Error::Api(_)),
        _ => false,
    }
}

fn pool_ref_from_label<K: Resource>(obj: &K) -> Option<ObjectRef<AgentPool>> {
    let meta = obj.meta();
    let pool = meta.labels.as_ref()?.get(LABEL_POOL)?;
    Some(ObjectRef::new(pool).within(meta.namespace.as_deref()?))
}

/// The pool of an agent pod.
fn pool_ref_of_pod(pod: &CachedPod) -> Option<ObjectRef<AgentPool>> {
    pool_ref_from_label(pod)
}

/// A host-unique identity for the Lease: hostname (the pod name in a
/// cluster) and a random suffix, so two controllers in one process differ.
fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "agentdeck".to_owned());
    format!("{host}-{:08x}", fastrand::u32(..))
}

/// Starts the controller on `conn` with `config` until `cancel`: watches
/// the namespaces of `config.namespaces` (or the connection's namespace),
/// competes for the leader Lease when enabled, probes agents and reconciles
/// every pool. Must be called inside a tokio runtime.
pub fn start(conn: Connection, config: &Config, cancel: CancellationToken) -> ControllerHandle {
    start_with(conn, config, StartOptions::default(), cancel)
}

/// [`start`] with options: `watch_only` runs the watches and the prober but
/// never the leader election, so this controller never leads and never
/// writes; `all_namespaces` watches every namespace.
pub fn start_with(
    conn: Connection,
    config: &Config,
    options: StartOptions,
    cancel: CancellationToken,
) -> ControllerHandle {
    let client = conn.client.clone();
    let namespaces = watched_namespaces(&conn, config, options);
    let mut tasks = JoinSet::new();
    let identity = identity();
    let watch_only = options.watch_only || options.replay;
    let elect = config.leader_election.enabled && !watch_only;
    let leader = if watch_only || elect {
        LeaderState::default()
    } else {
        LeaderState::always()
    };

    // Stores need the shared state to report API health, and the shared
    // state holds the stores: break the cycle with a late-bound cell.
    let cell: Arc<std::sync::OnceLock<std::sync::Weak<Shared>>> = Arc::default();
    let synced = Arc::new(AtomicBool::new(false));
    let changes = Changes::default();
    let report = watch_reporter(cell.clone(), synced.clone(), changes.clone());
    let metrics = Metrics::default();
    let watches = start_watches(
        &client,
        &namespaces,
        &report,
        &changes,
        &metrics,
        &cancel,
        &mut tasks,
    );
    let view = watches.view.clone();
    let shared = Arc::new(Shared {
        client: client.clone(),
        streams: conn
            .streams
            .clone()
            .unwrap_or_else(|| crate::cluster::StreamClients::shared(client.clone())),
        config: config.clone(),
        namespaces,
        view: view.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.to_owned(),
                instance: Some(identity.clone()),
            },
        ),
        metrics,
        leader: leader.clone(),
        applied: Mutex::default(),
        scaled: Mutex::default(),
        burst_scaled: Mutex::default(),
        recommendations: Mutex::default(),
        last_reconcile: Mutex::default(),
        synced,
        api_unreachable_since: Mutex::default(),
        reachability: Mutex::default(),
        started: Timestamp::now(),
        identity: identity.clone(),
    });
    let _ = cell.set(Arc::downgrade(&shared));

    if elect {
        let api: Api<Lease> = Api::namespaced(client.clone(), &config.controller_namespace);
        tasks.spawn(leader::run(
            api,
            config.controller_namespace.clone(),
            config.leader_election.lease_name.clone(),
            identity,
            (&config.leader_election).into(),
            leader.clone(),
            cancel.clone(),
        ));
    }
    tasks.spawn(reachability_probe(shared.clone(), config, cancel.clone()));

    // An agent turning offline reconciles its pool at once, so its task is
    // requeued within a probe interval of the threshold, not at the resync.
    let (offline_tx, offline_rx) = tokio::sync::mpsc::channel::<ObjectRef<AgentPool>>(64);
    if !options.replay {
        spawn_helpers(
            &shared,
            &view,
            config,
            watches.tail_pods,
            offline_tx,
            &cancel,
            &mut tasks,
        );
    }

    // A new leader reconciles everything at once rather than at the next resync.
    let (all_tx, all_rx) = tokio::sync::mpsc::channel::<()>(1);
    tasks.spawn(on_leading(leader, all_tx, cancel.clone()));

    let triggers = pool_triggers(watches.triggers, offline_rx);
    let (gated_tx, gated_rx) = tokio::sync::mpsc::channel::<ObjectRef<AgentPool>>(1024);
    tasks.spawn(gate::run(triggers, gated_tx, DEBOUNCE, cancel.clone()));

    tasks.spawn(reconciler(shared.clone(), all_rx, gated_rx, cancel));
    ControllerHandle {
        shared,
        tasks: tokio::sync::Mutex::new(tasks),
    }
}

/// What runs beside the watches and the reconciler, each reaching past the
/// API (agents' health ports, logs) or writing on a timer: not on a
/// snapshot.
fn spawn_helpers(
    shared: &Arc<Shared>,
    view: &ClusterView,
    config: &Config,
    tail_pods: Subscriber<CachedPod>,
    offline_tx: tokio::sync::mpsc::Sender<ObjectRef<AgentPool>>,
    cancel: &CancellationToken,
    tasks: &mut JoinSet<()>,
) {
    tasks.spawn(prober::run(
        view.pods.clone(),
        view.health.clone(),
        config.health_probe.clone(),
        offline_tx,
        pool_ref_of_pod,
        cancel.clone(),
    ));

    // Tasks naming no pool are outside every pool's reconcile.
    tasks.spawn(orphans::run(shared.clone(), cancel.clone()));
    // The final log lines of pods that terminate, for support bundles.
    tasks.spawn(tails::run(shared.clone(), tail_pods, cancel.clone()));
    // Debug pods past their TTL.
    tasks.spawn(debugpods::run(shared.clone(), cancel.clone()));
    // Finished tasks past their pool's taskHistory.
    tasks.spawn(retention::run(shared.clone(), cancel.clone()));
}

/// kube-runtime's Controller over the pools, reconciling each pool the gate
/// lets through and every pool when this controller starts leading (the
/// pool stream itself goes through the gate).
async fn reconciler(
    shared: Arc<Shared>,
    all: tokio::sync::mpsc::Receiver<()>,
    gated: tokio::sync::mpsc::Receiver<ObjectRef<AgentPool>>,
    cancel: CancellationToken,
) {
    Controller::for_shared_stream(futures::stream::pending(), shared.view.pools.clone())
        .reconcile_all_on(tokio_stream_from(all))
        .reconcile_on(tokio_stream_from(gated))
        .graceful_shutdown_on(async move { cancel.cancelled().await })
        .run(reconcile::reconcile, reconcile::error_policy, shared)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile outcome");
            }
        })
        .await;
}

/// The namespaces watched: every one (`all_namespaces`, an empty set), the
/// configured ones, else the connection's.
fn watched_namespaces(
    conn: &Connection,
    config: &Config,
    options: StartOptions,
) -> BTreeSet<String> {
    if options.all_namespaces {
        BTreeSet::new()
    } else if config.namespaces.is_empty() {
        BTreeSet::from([conn.namespace.clone()])
    } else {
        config.namespaces.iter().cloned().collect()
    }
}

/// What every watch reports to: once all have listed the controller is
/// synced; events and failures move the API's health in the shared state
/// (bound later through `cell`).
fn watch_reporter(
    cell: Arc<std::sync::OnceLock<std::sync::Weak<Shared>>>,
    synced: Arc<AtomicBool>,
    changes: Changes,
) -> WatchHealth {
    let listed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    Arc::new(move |signal| {
        // Counted outside the shared state, which may not exist yet.
        if let WatchSignal::Listed = signal
            && listed.fetch_add(1, Ordering::SeqCst) + 1 == WATCHES
        {
            synced.store(true, Ordering::SeqCst);
            // Said to whoever waits for it (after the store above).
            changes.bump();
            tracing::info!("watches synced");
        }
        let Some(shared) = cell.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        match signal {
            WatchSignal::Event | WatchSignal::Listed => shared.api_ok(),
            WatchSignal::Failed(
                watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e),
            ) => shared.api_failed(e),
            WatchSignal::Failed(_) => shared.metrics.api_error(None),
        }
    })
}

/// The watches' stores, as the view, and what their subscribers are told.
struct Watches {
    view: ClusterView,
    triggers: Triggers,
    /// Pods, for the log tails.
    tail_pods: Subscriber<CachedPod>,
}

/// The subscribers whose objects trigger a pool's reconcile.
struct Triggers {
    pools: Subscriber<AgentPool>,
    tasks: Subscriber<AgentTask>,
    pods: Subscriber<CachedPod>,
    deployments: Subscriber<Deployment>,
    jobs: Subscriber<Job>,
}

/// One watch per kind the controller reads: pools and tasks, and the pods,
/// Deployments and Jobs it manages (by label).
fn start_watches(
    client: &Client,
    namespaces: &BTreeSet<String>,
    report: &WatchHealth,
    changes: &Changes,
    metrics: &Metrics,
    cancel: &CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Watches {
    let managed = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    let board = WatchBoard::with_metrics(metrics.watch_metrics());
    let feeds = Feeds::default();
    let by_pool = ByPool::default();
    macro_rules! watch {
        ($kind:ty, $name:literal, $config:expr, $subscribers:expr, [$($follower:expr),*]) => {
            watch!($kind, $name, $config, (keep_all, &[], FirstListAs::Arriving), $subscribers, [$($follower),*])
        };
        ($kind:ty, $name:literal, $config:expr, $how:expr, $subscribers:expr, [$($follower:expr),*]) => {
            shared_watch(
                namespaced_or_all::<$kind>(client, namespaces),
                $config,
                $how,
                report.clone(),
                changes.clone(),
                board.cell($name),
                $subscribers,
                vec![$(Arc::new($follower.clone()) as Arc<dyn feed::Follower<$kind>>),*],
                cancel.clone(),
                tasks,
            )
        };
    }
    let (pools, pool_subs) = watch!(
        AgentPool,
        "AgentPool",
        watcher::Config::default(),
        (keep_all, &[], FirstListAs::Whole),
        1,
        [feeds.pools, by_pool.pools]
    );
    let (task_store, task_subs) = watch!(
        AgentTask,
        "AgentTask",
        watcher::Config::default(),
        (strip_task, STRIPPED_TASK_FIELDS, FirstListAs::Arriving),
        1,
        [feeds.tasks, by_pool.tasks]
    );
    // The log tails follow the same pods as the triggers (see `tails::run`).
    let (pods, pod_subs) = watch!(
        CachedPod,
        "Pod",
        managed.clone(),
        2,
        [feeds.pods, by_pool.pods]
    );
    let (deployments, deployment_subs) = watch!(Deployment, "Deployment", managed.clone(), 1, []);
    let (jobs, job_subs) = watch!(Job, "Job", managed, 1, [feeds.jobs]);
    let only = "the subscribers asked for";
    let mut pod_subs = pod_subs.into_iter();
    let triggers = Triggers {
        pools: pool_subs.into_iter().next().expect(only),
        tasks: task_subs.into_iter().next().expect(only),
        pods: pod_subs.next().expect(only),
        deployments: deployment_subs.into_iter().next().expect(only),
        jobs: job_subs.into_iter().next().expect(only),
    };
    let tail_pods = pod_subs.next().expect("two pod subscribers asked for");
    Watches {
        view: ClusterView {
            pools,
            tasks: task_store,
            pods,
            deployments,
            jobs,
            health: HealthSamples::with_changes(changes.clone()),
            changes: changes.clone(),
            watches: board,
            feeds,
            by_pool,
        },
        triggers,
        tail_pods,
    }
}

/// A watch that reconnects to a quiet cluster delivers no event, so nothing
/// would say the API is back: while it is marked unreachable, ask it for
/// its version now and then.
fn reachability_probe(
    shared: Arc<Shared>,
    config: &Config,
    cancel: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let every = (config.server.api_unreachable_after() / 4)
        .clamp(Duration::from_millis(250), Duration::from_secs(5));
    async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let unreachable = shared
                .api_unreachable_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some();
            if unreachable {
                match shared.client.apiserver_version().await {
                    Ok(_) => shared.api_ok(),
                    Err(e) => shared.api_failed(&e),
                }
            }
        }
    }
}

/// Says on `all` each time this controller becomes the leader.
async fn on_leading(
    leader: LeaderState,
    all: tokio::sync::mpsc::Sender<()>,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = leader.changed() => {
                if leader.is_leader() {
                    let _ = all.try_send(());
                }
            }
        }
    }
}

/// Every trigger of a pool — its own changes, its Deployment, tasks, pods,
/// Jobs, an agent turning offline — as (pool, urgent), for one gate: the
/// first event of a burst reconciles at once, the rest become one
/// follow-up. Task events are urgent (work arrived or left); the rest is
/// the pool's own objects moving, often in the wake of our own writes.
fn pool_triggers(
    t: Triggers,
    offline: tokio::sync::mpsc::Receiver<ObjectRef<AgentPool>>,
) -> impl Stream<Item = (ObjectRef<AgentPool>, bool)> + Send + 'static {
    let background = |pool: Option<ObjectRef<AgentPool>>| pool.map(|p| (p, false));
    futures::stream::select_all([
        t.pools
            .map(move |pool: Arc<AgentPool>| background(Some(ObjectRef::from_obj(&*pool))))
            .boxed(),
        t.deployments
            .map(move |d: Arc<Deployment>| background(pool_ref_from_label(&*d)))
            .boxed(),
        t.tasks
            .map(|task: Arc<AgentTask>| {
                task.namespace().map(|ns| {
                    (
                        ObjectRef::<AgentPool>::new(&task.spec.pool).within(&ns),
                        true,
                    )
                })
            })
            .boxed(),
        t.pods
            .map(move |pod: Arc<CachedPod>| background(pool_ref_from_label(&*pod)))
            .boxed(),
        t.jobs
            .map(move |job: Arc<Job>| background(pool_ref_from_label(&*job)))
            .boxed(),
        tokio_stream_from(offline)
            .map(move |pool| background(Some(pool)))
            .boxed(),
    ])
    .filter_map(|pool| async move { pool })
}

fn tokio_stream_from<T: Send>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Requeue interval when nothing else asks for sooner.
pub(crate) fn resync(shared: &Shared) -> Action {
    Action::requeue(shared.config.resync_interval().max(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::TaskPhase;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(store: &Store<ConfigMap>) -> Vec<String> {
        let mut n: Vec<String> = store.state().iter().map(|c| c.name_any()).collect();
        n.sort();
        n
    }

    #[test]
    fn the_first_list_fills_the_store_as_it_arrives_and_a_relist_swaps_whole() {
        use watcher::Event::{Init, InitApply, InitDone};
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let mut first = FirstList::new(FirstListAs::Arriving);
        let mut write = |e| first.write(&mut writer, e).1;
        assert_eq!(write(Init), Fill::No);
        assert_eq!(write(InitApply(cm("a"))), Fill::Object, "applied at once");
        assert_eq!(names(&reader), ["a"], "seen before the list ends");
        assert_eq!(write(InitApply(cm("b"))), Fill::Object);
        assert_eq!(
            write(InitDone),
            Fill::End,
            "its end: the followers saw it all"
        );
        assert_eq!(names(&reader), ["a", "b"], "the end does not empty it");
        // A relist (410): aside until its end, then swapped in whole.
        write(Init);
        assert_eq!(write(InitApply(cm("b"))), Fill::No);
        assert_eq!(names(&reader), ["a", "b"]);
        assert_eq!(
            write(InitDone),
            Fill::No,
            "the followers are told of the relist"
        );
        assert_eq!(names(&reader), ["b"], "what the relist lacks goes");
    }

    #[test]
    fn a_first_list_started_again_is_taken_whole_so_nothing_stale_stays() {
        use watcher::Event::{Init, InitApply, InitDone};
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let mut first = FirstList::new(FirstListAs::Arriving);
        let mut write = |e| first.write(&mut writer, e).1;
        write(Init);
        write(InitApply(cm("gone")));
        // The list failed part way; the watcher lists again.
        write(Init);
        assert_eq!(write(InitApply(cm("kept"))), Fill::No);
        assert_eq!(write(InitDone), Fill::No);
        assert_eq!(names(&reader), ["kept"]);
    }

    #[tokio::test]
    async fn a_store_listed_whole_is_ready_for_a_controller_after_its_first_list() {
        use watcher::Event::{Init, InitApply, InitDone};
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let mut first = FirstList::new(FirstListAs::Whole);
        first.write(&mut writer, Init);
        first.write(&mut writer, InitApply(cm("a")));
        assert!(names(&reader).is_empty(), "aside until the end");
        first.write(&mut writer, InitDone);
        assert_eq!(names(&reader), ["a"]);
        tokio::time::timeout(Duration::from_secs(1), reader.wait_until_ready())
            .await
            .expect("ready")
            .expect("writer alive");
    }

    #[test]
    fn a_cached_task_keeps_no_output_but_says_it_had_one() {
        let task = |status: serde_json::Value| -> AgentTask {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": "t", "namespace": "ns"},
                "spec": {"pool": "p"},
                "status": status,
            }))
            .expect("task")
        };
        let mut kept = task(serde_json::json!({"phase": "Failed", "outputTail": "x".repeat(4000)}));
        strip_task(&mut kept);
        let tail = kept.status.as_ref().and_then(|s| s.output_tail.as_ref());
        assert_eq!(tail.map(String::as_str), Some(""));
        assert_eq!(tail.map(String::capacity), Some(0), "its bytes are freed");
        assert!(task_output_stripped(&kept));
        // Everything else is as listed.
        assert_eq!(kept.phase(), TaskPhase::Failed);
        let mut none = task(serde_json::json!({"phase": "Running"}));
        strip_task(&mut none);
        assert_eq!(
            none.status.as_ref().and_then(|s| s.output_tail.clone()),
            None
        );
        assert!(!task_output_stripped(&none));
    }

    /// A client answering a list of `a` (version 10) and, from version 10,
    /// a watch that adds `x`, deletes it, adds `y0`..`y{ys-1}`, then stays
    /// open saying nothing (later watches too).
    fn churning_client(ys: usize) -> Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let uri = request.uri().to_string();
            let map = |name: &str, version: usize| {
                format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{version}"}}}}"#
                )
            };
            let lines: Vec<String> = if !uri.contains("watch=") {
                vec![format!(
                    r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"10"}},"items":[{}]}}"#,
                    map("a", 3)
                )]
            } else if uri.contains("resourceVersion=10&") || uri.ends_with("resourceVersion=10") {
                let mut lines = vec![
                    format!(r#"{{"type":"ADDED","object":{}}}"#, map("x", 11)),
                    format!(r#"{{"type":"DELETED","object":{}}}"#, map("x", 12)),
                ];
                lines.extend((0..ys).map(|i| {
                    format!(
                        r#"{{"type":"ADDED","object":{}}}"#,
                        map(&format!("y{i}"), 13 + i)
                    )
                }));
                lines.into_iter().map(|l| l + "\n").collect()
            } else {
                Vec::new()
            };
            let watch = uri.contains("watch=");
            let chunks = futures::stream::iter(
                lines
                    .into_iter()
                    .map(|l| Ok::<_, std::io::Error>(axum::body::Bytes::from(l))),
            );
            let body = if watch {
                axum::body::Body::from_stream(chunks.chain(futures::stream::pending()))
            } else {
                axum::body::Body::from_stream(chunks)
            };
            let response = http::Response::builder()
                .status(200)
                .body(body)
                .expect("a valid response");
            async move { Ok::<_, std::convert::Infallible>(response) }
        });
        Client::new(service, "default")
    }

    /// The freeze of issue 27: an object applied and deleted before a
    /// subscriber read it stalled kube-runtime's shared subscriber for good
    /// (polled inside `select_all`, as the Controller's triggers are), and
    /// once its buffer was full the watch itself stopped: the store kept
    /// what it had while everything said synced.
    #[tokio::test]
    async fn a_subscriber_reads_on_past_an_object_deleted_before_it_was_read() {
        use k8s_openapi::api::core::v1::ConfigMap;
        const YS: usize = 3 * SUBSCRIBER_BUFFER;
        let api: Api<ConfigMap> = Api::namespaced(churning_client(YS), "default");
        let mut tasks = JoinSet::new();
        let cancel = CancellationToken::new();
        let report: WatchHealth = Arc::new(|_| {});
        let (store, subscribers) = shared_watch(
            api,
            watcher::Config::default(),
            (keep_all, &[], FirstListAs::Arriving),
            report,
            Changes::default(),
            WatchCell::detached("ConfigMap"),
            1,
            Vec::new(),
            cancel.clone(),
            &mut tasks,
        );
        let named = |name: &str| ObjectRef::<ConfigMap>::new(name).within("default");
        // Nobody reads until `x` is gone from the store (a busy reader).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while store.get(&named("y0")).is_none() {
            assert!(tokio::time::Instant::now() < deadline, "y0 never arrived");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(store.get(&named("x")).is_none());
        let mut triggers =
            futures::stream::select_all(subscribers.into_iter().map(StreamExt::boxed));
        let mut read = Vec::new();
        let last = format!("y{}", YS - 1);
        while read.last() != Some(&last) {
            let next = tokio::time::timeout(Duration::from_secs(30), triggers.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "the subscriber stopped after {} objects (last {:?}); the store holds {}",
                        read.len(),
                        read.last(),
                        store.state().len()
                    )
                })
                .expect("the subscriber never ends");
            read.push(next.name_any());
        }
        assert_eq!(read.first().map(String::as_str), Some("a"));
        assert!(
            !read.contains(&"x".to_owned()),
            "x was deleted before it was read"
        );
        assert_eq!(store.state().len(), YS + 1, "a and every y");
        cancel.cancel();
    }

    #[test]
    fn a_cached_pod_keeps_what_is_read_and_drops_the_bulk() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a-1", "labels": {"agentdeck.dev/pool": "a"}},
            "spec": {
                "nodeName": "node-1",
                "containers": [{
                    "name": "agent", "image": "img:1", "command": ["agentdeck", "agent"],
                    "ports": [{"name": "health", "containerPort": 8081}],
                    "env": [{"name": "X", "value": "1"}],
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8081}}
                }],
                "volumes": [{"name": "tmp", "emptyDir": {}}],
                "tolerations": [{"key": "k", "operator": "Exists"}]
            },
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "containerStatuses": [{"name": "agent", "ready": true, "restartCount": 2,
                                              "image": "img:1", "imageID": ""}]}
        }))
        .expect("pod");
        let before = pod.clone();
        strip_pod(&mut pod);
        let spec = pod.spec.as_ref().expect("spec");
        let c = &spec.containers[0];
        assert_eq!(spec.node_name.as_deref(), Some("node-1"));
        assert_eq!(
            (c.name.as_str(), c.image.as_deref()),
            ("agent", Some("img:1"))
        );
        assert_eq!(c.ports, before.spec.as_ref().unwrap().containers[0].ports);
        assert_eq!(
            c.command,
            before.spec.as_ref().unwrap().containers[0].command
        );
        assert_eq!(pod.status, before.status);
        assert_eq!(pod.metadata, before.metadata);
        assert!(spec.volumes.is_none() && spec.tolerations.is_none());
        assert!(c.env.is_none() && c.volume_mounts.is_none() && c.readiness_probe.is_none());
    }
}
