//! The cluster view: the watch-fed stores (the cluster's cache), the
//! health samples, the change signal and the per-pool indexes that the
//! controller, the console and the bundle viewer read. Reading it never
//! calls the API.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};

use super::deployment::CachedDeployment;
use super::pod::CachedPod;
use super::{HealthSamples, WatchBoard, feed, slim};
use crate::crd::{AgentPool, AgentTask, LABEL_POOL};

/// What the controller sees: watch-fed stores and the latest health sample
/// per agent. Cheap to clone; reading a store never calls the API.
#[derive(Clone)]
pub struct ClusterView {
    pub pools: Store<AgentPool>,
    pub tasks: Store<AgentTask>,
    pub pods: Store<CachedPod>,
    /// The agent Deployments, as much as is read of them (see
    /// [`CachedDeployment`]).
    pub deployments: Store<CachedDeployment>,
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

/// The `status` fields of a task [`strip_task`] empties, as list pages
/// are read (their text never copied).
pub(crate) const STRIPPED_TASK_FIELDS: slim::Emptied = &["outputTail"];

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

/// [`strip_task`], and a finished task slimmed to what the headless daemon
/// decides on: its name, uid and resourceVersion (the metadata is kept
/// whole), pool, cancel mark, phase, attempts, exit code and times (what
/// retention orders by and the finished-task metrics read). Its command,
/// args, env, image and operation, its agent, Job, message, output
/// reference, conditions and attempt history go: at 100,000 tasks, 98,000
/// of them finished, about 20 MiB of the daemon's 274 (benches/README.md).
/// Nothing of the controller writes a finished task's status, and whoever
/// keeps its record reads it from the API first: the slimmed copy reads as
/// stripped ([`task_output_stripped`]), as [`strip_task`] leaves one whose
/// output was dropped, even when it had none. A task that runs again
/// (retried) comes whole in its next event.
pub fn slim_finished_task(task: &mut AgentTask) {
    strip_task(task);
    let Some(status) = task.status.as_mut() else {
        return;
    };
    if !status.phase.is_finished() {
        return;
    }
    let spec = &mut task.spec;
    spec.operation = None;
    spec.command = Vec::new();
    spec.args = Vec::new();
    spec.image = None;
    spec.env = Vec::new();
    status.agent = None;
    status.job = None;
    status.message = None;
    status.conditions = Vec::new();
    status.history = Vec::new();
    status.output = None;
    status.output_tail = Some(String::new());
}

/// Whether this copy of a task may have lost its `status.outputTail` to
/// [`strip_task`] (a task whose output was really empty reads the same),
/// or more to [`slim_finished_task`].
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
pub async fn with_kept_output(
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
pub fn strip_pod(pod: &mut Pod) {
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
