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

mod context;
pub mod debugpods;
pub mod gate;
pub mod leader;
pub mod metrics;
pub mod orphans;
pub mod prober;
pub mod reachability;
mod reconcile;
pub mod retention;
pub mod tails;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cluster::deployment::CachedDeployment;
use crate::cluster::pod::CachedPod;
use crate::cluster::reflect::{
    FirstListAs, Subscriber, WatchHealth, WatchSignal, keep_all, shared_watch,
};
use crate::cluster::view::STRIPPED_TASK_FIELDS;
use crate::cluster::{
    ByPool, Changes, ClusterView, Connection, Feeds, HealthSamples, WatchBoard, feed,
    slim_finished_task, strip_task, watches,
};
use crate::config::Config;
use crate::crd::{AgentPool, AgentTask, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY};
use crate::health::{HealthReport, HealthStatus};
pub(crate) use context::Context;
use context::{Diagnostics, PoolMemories};
pub use leader::LeaderState;
pub use metrics::Metrics;
pub use prober::thresholds;

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

/// Watches the controller runs; `synced` once all have listed.
const WATCHES: usize = 5;

/// Result of this layer.
pub type Result<T, E = ControllerError> = std::result::Result<T, E>;

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
    /// Cache finished tasks slimmed (see [`crate::cluster::slim_finished_task`]):
    /// for the headless daemon, which decides nothing on what is dropped.
    /// The console shows every task whole and keeps them so.
    pub slim_finished_tasks: bool,
}

/// A running controller. Dropping it does not stop it: cancel the token
/// given to [`start`], then [`ControllerHandle::join`].
pub struct ControllerHandle {
    shared: Arc<Context>,
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
            .diagnostics
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
                .diagnostics
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
    let cell: Arc<std::sync::OnceLock<std::sync::Weak<Context>>> = Arc::default();
    let synced = Arc::new(AtomicBool::new(false));
    let changes = Changes::default();
    let report = watch_reporter(cell.clone(), synced.clone(), changes.clone());
    let metrics = Metrics::default();
    let watches = start_watches(
        &client,
        &namespaces,
        options.slim_finished_tasks,
        &report,
        &changes,
        &metrics,
        &cancel,
        &mut tasks,
    );
    let view = watches.view.clone();
    let shared = Arc::new(Context {
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
        synced,
        memory: PoolMemories::default(),
        diagnostics: Diagnostics::default(),
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
    shared: &Arc<Context>,
    view: &ClusterView,
    config: &Config,
    tail_pods: Subscriber<CachedPod>,
    offline_tx: tokio::sync::mpsc::Sender<ObjectRef<AgentPool>>,
    cancel: &CancellationToken,
    tasks: &mut JoinSet<()>,
) {
    // One idle connection per agent probed (see `prober::Connections`).
    let files = prober::raise_open_file_limit();
    tracing::debug!(open_files = ?files, "open-file limit");
    let leader = shared.leader.clone();
    tasks.spawn(prober::run(
        view.pods.clone(),
        view.health.clone(),
        config.health_probe.clone(),
        offline_tx,
        pool_ref_of_pod,
        move || leader.is_leader(),
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
///
/// At most [`RECONCILE_CONCURRENCY`] pools reconcile at once.
async fn reconciler(
    shared: Arc<Context>,
    all: tokio::sync::mpsc::Receiver<()>,
    gated: tokio::sync::mpsc::Receiver<ObjectRef<AgentPool>>,
    cancel: CancellationToken,
) {
    Controller::for_shared_stream(futures::stream::pending(), shared.view.pools.clone())
        .reconcile_all_on(tokio_stream_from(all))
        .reconcile_on(tokio_stream_from(gated))
        .with_config(
            kube::runtime::controller::Config::default().concurrency(RECONCILE_CONCURRENCY),
        )
        .graceful_shutdown_on(async move { cancel.cancelled().await })
        .run(reconcile::reconcile, reconcile::error_policy, shared)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile outcome");
            }
        })
        .await;
}

/// Pools reconciled at once. Unbounded (kube-runtime's default), the
/// first pass over 1,000 pools had a thousand reconciles in flight, each
/// with its own requests: the HTTP/1.1 client opened a connection for each
/// request in flight (3,200, each TLS, with its buffers on both ends) and
/// kept them all idle afterwards. A reconcile is a few milliseconds of
/// work and a request or two, so this many keeps the API busy without
/// queueing a pool that needs one behind more than a handful of others.
pub const RECONCILE_CONCURRENCY: u16 = 16;

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
    cell: Arc<std::sync::OnceLock<std::sync::Weak<Context>>>,
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
    deployments: Subscriber<CachedDeployment>,
    jobs: Subscriber<Job>,
}

/// One watch per kind the controller reads: pools and tasks, and the pods,
/// Deployments and Jobs it manages (by label).
#[allow(clippy::too_many_arguments)]
fn start_watches(
    client: &Client,
    namespaces: &BTreeSet<String>,
    slim_finished_tasks: bool,
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
        (keep_all, &[], FirstListAs::ArrivingReady),
        1,
        [feeds.pools, by_pool.pools]
    );
    let strip_tasks: fn(&mut AgentTask) = if slim_finished_tasks {
        slim_finished_task
    } else {
        strip_task
    };
    let (task_store, task_subs) = watch!(
        AgentTask,
        "AgentTask",
        watcher::Config::default(),
        (strip_tasks, STRIPPED_TASK_FIELDS, FirstListAs::Arriving),
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
    let (deployments, deployment_subs) =
        watch!(CachedDeployment, "Deployment", managed.clone(), 1, []);
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
    shared: Arc<Context>,
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
                .diagnostics
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
            .map(move |d: Arc<CachedDeployment>| background(pool_ref_from_label(&*d)))
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
pub(crate) fn resync(shared: &Context) -> Action {
    Action::requeue(shared.config.resync_interval().max(Duration::from_secs(1)))
}
