//! Rows: what the console shows, built from the cluster view once per
//! change (off the UI thread), with strings sanitised and a lower-cased
//! search text prepared so filtering never touches the objects.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::event::CachedEvent as Event;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

mod builder;

pub use builder::{Changes, Delta, Key, Keyed, RowBuilder};

use super::text::clean;
use crate::cluster::AgentSample;
use crate::cluster::pod::CachedPod;
use crate::crd::{AgentPool, AgentTask, LABEL_POOL, LABEL_TASK, TaskPhase};
use crate::crd::{POOL_NOT_FOUND, UNCLAIMED};
use crate::health::{Freshness, FreshnessThresholds};
use crate::plan::manifests::COMPONENT_TASK;
use crate::plan::verdict::{Verdict, verdict};

/// Labels of a row, for `-l` selectors and the wide LABELS column: the
/// pairs sorted by key, in one allocation. A `BTreeMap` costs a node of
/// about 540 bytes even for one label, on every labelled row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// No labels.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// Whether `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pairs, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

/// An object's labels (a `BTreeMap` is sorted already).
impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Self {
        Self(
            map.iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                .collect(),
        )
    }
}

impl<const N: usize> From<[(String, String); N]> for Labels {
    fn from(pairs: [(String, String); N]) -> Self {
        Self::from(&BTreeMap::from(pairs))
    }
}

/// `name` lower-cased, or `None` when it already is, as every valid
/// Kubernetes name is: a copy per row saved.
pub fn lower_if_needed(name: &str) -> Option<Box<str>> {
    name.chars()
        .any(char::is_uppercase)
        .then(|| name.to_lowercase().into_boxed_str())
}

/// What every row offers the table machinery.
pub trait Row {
    /// Unique within its view (namespace/name).
    fn key(&self) -> &str;
    /// The name as shown.
    fn name(&self) -> &str;
    /// Lower-cased text of the visible columns, for regex filters.
    fn search(&self) -> &str;
    /// Lower-cased name, for fuzzy filters.
    fn name_lc(&self) -> &str;
    fn labels(&self) -> &Labels;
    /// The pool this row belongs to, for drill-down scopes.
    fn pool(&self) -> Option<&str>;
    /// When it was created (or last seen, for events), for the age sort.
    fn when(&self) -> Option<Timestamp>;
    /// Its status word, for the status sort.
    fn status(&self) -> &str;
    /// Its namespace (shown with `-A`).
    fn namespace(&self) -> &str {
        ""
    }
    /// Its kube context (shown when the console has several).
    fn context(&self) -> &str {
        ""
    }
}

/// One AgentPool.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolRow {
    pub key: String,
    /// The kube context it is from, in a console over several (else empty).
    pub context: Arc<str>,
    pub namespace: String,
    pub name: String,
    pub mode: &'static str,
    pub ready: i32,
    pub replicas: i32,
    pub desired: i32,
    pub min: i32,
    pub max: i32,
    pub pending: i32,
    pub running: i32,
    pub frozen: Option<String>,
    pub draining: bool,
    pub debug: bool,
    /// The operator's replica hold in force (`6 until 14:30 by alice`).
    pub hold: Option<String>,
    /// The capacity window open and the next change, or the next window
    /// to open (`office-hours: min 4 until 18:00, then 0`).
    pub capacity: Option<String>,
    pub fresh: i32,
    pub stale: i32,
    pub offline: i32,
    pub scale_reason: String,
    pub last_scale: Option<Timestamp>,
    pub verdict: Verdict,
    pub created: Option<Timestamp>,
    pub labels: Labels,
    pub search: String,
    /// The name lower-cased, when that differs (see [`lower_if_needed`]).
    pub name_lc: Option<Box<str>>,
}

/// One agent pod (deployment mode) or task pod (job mode).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentRow {
    pub key: String,
    /// The kube context it is from, in a console over several (else empty).
    pub context: Arc<str>,
    pub namespace: String,
    pub name: String,
    pub pool: String,
    pub phase: String,
    pub ready: bool,
    pub node: String,
    pub health: Option<Freshness>,
    pub last_activity: Option<Timestamp>,
    /// Agent clock minus ours, when it is large enough to matter.
    pub skew: Option<i64>,
    pub task: Option<String>,
    pub restarts: i32,
    pub created: Option<Timestamp>,
    /// `agent` or `task`.
    pub component: &'static str,
    /// Drained by its own annotation (an operator's per-agent drain).
    pub draining: bool,
    /// Debug logs on by its own annotation.
    pub debug: bool,
    pub labels: Labels,
    pub search: String,
    /// The name lower-cased, when that differs (see [`lower_if_needed`]).
    pub name_lc: Option<Box<str>>,
}

/// One AgentTask.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRow {
    pub key: String,
    /// The kube context it is from, in a console over several (else empty).
    pub context: Arc<str>,
    pub namespace: String,
    pub name: String,
    pub pool: String,
    pub phase: TaskPhase,
    pub agent: String,
    pub attempts: i32,
    pub created: Option<Timestamp>,
    pub started: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    /// Created → claimed (or now, still waiting: `None` here).
    pub waited: Option<Duration>,
    /// Its status message; for a Pending task, why it waits (its
    /// `Unclaimed`/`PoolNotFound` condition, else its place in the queue);
    /// for one running past the threshold, that first.
    pub message: String,
    /// Running for longer than the console's `longRunningTaskSeconds`.
    pub long_running: bool,
    pub job: Option<String>,
    /// Which pod has its output ([`TaskRow::log`] says where to read it).
    pub log_at: Option<LogAt>,
    pub labels: Labels,
    pub search: String,
    /// The name lower-cased, when that differs (see [`lower_if_needed`]).
    pub name_lc: Option<Box<str>>,
}

/// Which pod has a task's output: what a [`TaskRow`] keeps, so that a row
/// of 100,000 does not carry a [`LogSource`] of its own (four strings,
/// each a copy of one the row holds, most of them never opened).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LogAt {
    /// The agent it ran on (its `agent` field), its lines `[task] `-prefixed
    /// in the agent's log.
    Agent,
    /// Its Job's pod, or the Job's name once the pod is gone (its kept
    /// output is read then): the `worker` container.
    Worker(String),
}

impl TaskRow {
    /// Where to read its output, in its context.
    pub fn log(&self) -> Option<LogSource> {
        let (pod, container) = match self.log_at.as_ref()? {
            LogAt::Agent => (self.agent.clone(), None),
            LogAt::Worker(pod) => (pod.clone(), Some("worker".to_owned())),
        };
        Some(LogSource {
            context: self.context.to_string(),
            namespace: self.namespace.clone(),
            pod,
            container,
            prefix: Some(format!("[{}] ", self.name)),
            task: Some(self.name.clone()),
        })
    }
}

/// Where to read a task's or pod's output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LogSource {
    /// The kube context of the pod (empty: the console's only one).
    pub context: String,
    pub namespace: String,
    pub pod: String,
    pub container: Option<String>,
    /// Keep only lines starting with this (an agent's `[task] ` prefix), stripped.
    pub prefix: Option<String>,
    /// The task whose output this is: once the pod is gone, its kept
    /// output (`status.outputTail`) is shown instead.
    pub task: Option<String>,
}

/// One Event about our objects.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRow {
    pub key: String,
    /// The kube context it is from, in a console over several (else empty).
    pub context: Arc<str>,
    pub namespace: String,
    pub warning: bool,
    pub reason: String,
    pub object: String,
    pub pool: Option<String>,
    pub message: String,
    pub count: i32,
    pub last: Option<Timestamp>,
    pub labels: Labels,
    pub search: String,
    /// The name lower-cased, when that differs (see [`lower_if_needed`]).
    pub name_lc: Option<Box<str>>,
}

macro_rules! impl_row {
    ($t:ty, $name:ident, $pool:expr, $when:expr, $status:expr) => {
        impl Row for $t {
            fn key(&self) -> &str {
                &self.key
            }
            fn name(&self) -> &str {
                &self.$name
            }
            fn search(&self) -> &str {
                &self.search
            }
            fn name_lc(&self) -> &str {
                self.name_lc.as_deref().unwrap_or(&self.$name)
            }
            fn labels(&self) -> &Labels {
                &self.labels
            }
            fn pool(&self) -> Option<&str> {
                let f: fn(&Self) -> Option<&str> = $pool;
                f(self)
            }
            fn when(&self) -> Option<Timestamp> {
                let f: fn(&Self) -> Option<Timestamp> = $when;
                f(self)
            }
            fn status(&self) -> &str {
                let f: fn(&Self) -> &str = $status;
                f(self)
            }
            fn namespace(&self) -> &str {
                &self.namespace
            }
            fn context(&self) -> &str {
                &self.context
            }
        }
    };
}
impl_row!(
    PoolRow,
    name,
    |r| Some(r.name.as_str()),
    |r| r.created,
    |r| r.verdict.level.as_str()
);
impl_row!(
    AgentRow,
    name,
    |r| Some(r.pool.as_str()),
    |r| r.created,
    |r| match r.health {
        Some(h) => h.as_str(),
        None => r.phase.as_str(),
    }
);
impl_row!(
    TaskRow,
    name,
    |r| Some(r.pool.as_str()),
    |r| r.created,
    |r| r.phase.as_str()
);
impl_row!(EventRow, object, |r| r.pool.as_deref(), |r| r.last, |r| r
    .reason
    .as_str());

/// Rows are shared between snapshots (see [`RowBuilder`]).
impl<R: Row> Row for Arc<R> {
    fn key(&self) -> &str {
        R::key(self)
    }
    fn name(&self) -> &str {
        R::name(self)
    }
    fn search(&self) -> &str {
        R::search(self)
    }
    fn name_lc(&self) -> &str {
        R::name_lc(self)
    }
    fn labels(&self) -> &Labels {
        R::labels(self)
    }
    fn pool(&self) -> Option<&str> {
        R::pool(self)
    }
    fn when(&self) -> Option<Timestamp> {
        R::when(self)
    }
    fn status(&self) -> &str {
        R::status(self)
    }
    fn namespace(&self) -> &str {
        R::namespace(self)
    }
    fn context(&self) -> &str {
        R::context(self)
    }
}

/// Everything the console shows at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub pools: Vec<Arc<PoolRow>>,
    pub agents: Vec<Arc<AgentRow>>,
    pub tasks: Vec<Arc<TaskRow>>,
    pub events: Vec<Arc<EventRow>>,
    /// Tasks pending (or scheduled), running, and failed (or errored).
    pub task_counts: TaskCounts,
    /// When it was built.
    pub built: Option<Timestamp>,
    /// With several contexts: each one's counts, for the header while the
    /// tables show one (`:ctx`).
    pub contexts: Vec<ContextCounts>,
}

/// One context's rows counted, in a snapshot of several.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContextCounts {
    pub context: Arc<str>,
    pub pools: usize,
    pub agents: usize,
    pub tasks: usize,
    pub events: usize,
    pub task_counts: TaskCounts,
}

/// Tasks by broad phase, for the header (counted once per snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskCounts {
    pub pending: usize,
    pub running: usize,
    pub failed: usize,
}

/// The objects a snapshot is built from.
#[derive(Default)]
pub struct Sources {
    pub pools: Vec<Arc<AgentPool>>,
    pub tasks: Vec<Arc<AgentTask>>,
    pub pods: Vec<Arc<CachedPod>>,
    pub jobs: Vec<Arc<Job>>,
    pub events: Vec<Arc<Event>>,
    pub samples: Vec<AgentSample>,
}

fn ts(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

fn lc(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for p in parts {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(p);
    }
    s.to_lowercase()
}

fn since(now: Timestamp, then: Timestamp) -> Duration {
    let d = now.duration_since(then);
    if d.is_negative() {
        Duration::ZERO
    } else {
        d.unsigned_abs()
    }
}

/// Clock skew shown from this many seconds on.
const SKEW_SHOWN: i64 = 2;

/// Builds the rows from `src` at `now` (from scratch; the console keeps a
/// [`RowBuilder`] so that a change costs only the rows it touches).
pub fn build(src: &Sources, now: Timestamp, thresholds: &FreshnessThresholds) -> Snapshot {
    RowBuilder::default().build(src, now, thresholds)
}

/// A Pending task's place in its pool's queue: `n`th of `of`, in the
/// order agents claim (oldest first, then by name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub n: u32,
    pub of: u32,
}

/// A Running task is flagged past this long, unless the console's
/// `longRunningTaskSeconds` says otherwise.
pub const DEFAULT_LONG_RUNNING: Duration = Duration::from_secs(3600);

/// What an agent row takes from the health sample, the tasks and the clock.
#[derive(PartialEq)]
struct AgentStamp {
    health: Option<Freshness>,
    last_activity: Option<Timestamp>,
    skew: Option<i64>,
    task: Option<String>,
}

/// A task row to build: whether its pool runs tasks as Jobs, and its Job's
/// pod.
#[derive(Clone, Copy)]
struct ToBuild<'a> {
    job_mode: bool,
    job_pod: Option<&'a CachedPod>,
    /// Its place in the queue, when it is Pending.
    queue: Option<Place>,
    /// The threshold it is running past, when it is.
    long: Option<Duration>,
}

/// Whether `t` is Running and has been for `after` or longer at `now`.
fn running_past(t: &AgentTask, now: Timestamp, after: Duration) -> bool {
    let Some(st) = t.status.as_ref().filter(|s| s.phase == TaskPhase::Running) else {
        return false;
    };
    ts(st.started_at.as_ref())
        .or(ts(st.claimed_at.as_ref()))
        .is_some_and(|from| since(now, from) >= after)
}

/// `1st`, `2nd`, `3rd`, `11th` …
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Why a Pending task waits: the controller's `Unclaimed` or
/// `PoolNotFound` condition when one is true, else its place in the queue;
/// its own status message after that.
fn waiting_message(t: &AgentTask, queue: Option<Place>, own: &str) -> String {
    let condition = t.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| (c.type_ == POOL_NOT_FOUND || c.type_ == UNCLAIMED) && c.status == "True")
    });
    let why = match (condition, queue) {
        (Some(c), _) if !c.message.is_empty() => clean(&c.message),
        (Some(c), _) => clean(&c.reason),
        (None, Some(p)) => format!(
            "queued: {} of {} in {}",
            ordinal(p.n),
            p.of,
            clean(&t.spec.pool)
        ),
        (None, None) => String::new(),
    };
    match (why.is_empty(), own.is_empty()) {
        (_, true) => why,
        (true, false) => own.to_owned(),
        (false, false) => format!("{why}; {own}"),
    }
}

/// Task rows built at once past this many are built in two halves, the
/// second on a thread of its own: the first build after a (re)list is all
/// 10,000 rows of a big namespace at a few µs each, between the list and
/// the first screen.
const PARALLEL_ROWS: usize = 2048;

fn task_row(t: &AgentTask, b: &ToBuild) -> TaskRow {
    let (job_mode, job_pod) = (b.job_mode, b.job_pod);
    let no_status = crate::crd::AgentTaskStatus::default();
    let ns = t.namespace().unwrap_or_default();
    let name = t.name_any();
    let st = t.status.as_ref().unwrap_or(&no_status);
    let created = t.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let claimed = ts(st.claimed_at.as_ref()).or(ts(st.started_at.as_ref()));
    let waited = match (created, claimed) {
        (Some(c), Some(s)) => Some(since(s, c)),
        _ => None,
    };
    // The worker prints the task's output, redacted (the runner's own log
    // has none of it), `[task] `-prefixed as an agent does. Once the Job's
    // pod is gone (its TTL, a deletion), what was kept of its output is
    // read instead, so a task that ran keeps a log.
    let log_at = if let Some(pod) = job_pod {
        Some(LogAt::Worker(pod.name_any()))
    } else if job_mode {
        let ran = !matches!(st.phase, TaskPhase::Pending | TaskPhase::Scheduled);
        (ran && (st.job.is_some() || st.output_tail.is_some() || st.output.is_some()))
            .then(|| LogAt::Worker(st.job.clone().unwrap_or_else(|| name.clone())))
    } else {
        st.agent.as_ref().map(|_| LogAt::Agent)
    };
    let agent = clean(st.agent.as_deref().unwrap_or_default());
    let own = clean(st.message.as_deref().unwrap_or_default());
    let message = match (st.phase, b.long) {
        (TaskPhase::Pending, _) if !t.spec.cancel => waiting_message(t, b.queue, &own),
        (_, Some(after)) if own.is_empty() => {
            format!("running over {}", crate::units::format_duration(after))
        }
        (_, Some(after)) => format!(
            "running over {}; {own}",
            crate::units::format_duration(after)
        ),
        _ => own,
    };
    let name = clean(&name);
    let pool = clean(&t.spec.pool);
    let search = lc(&[&name, &pool, st.phase.as_str(), &agent, &message]);
    TaskRow {
        key: format!("{ns}/{name}"),
        context: Arc::default(),
        name_lc: lower_if_needed(&name),
        namespace: ns,
        name,
        pool,
        phase: st.phase,
        agent,
        attempts: st.attempts,
        created,
        started: ts(st.started_at.as_ref()),
        finished: ts(st.finished_at.as_ref()),
        waited,
        message,
        long_running: b.long.is_some(),
        job: st.job.as_deref().map(clean),
        log_at,
        labels: Labels::from(t.labels()),
        search,
    }
}

fn agent_row(p: &CachedPod, component: &'static str, stamp: &AgentStamp) -> AgentRow {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let labels = p.labels();
    let pool = labels.get(LABEL_POOL).cloned().unwrap_or_default();
    let status = p.status.as_ref();
    let phase = if p.metadata.deletion_timestamp.is_some() {
        "Terminating".to_owned()
    } else {
        status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into())
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let restarts = status
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum());
    let task = stamp.task.as_deref().map(clean).or_else(|| {
        (component == COMPONENT_TASK)
            .then(|| labels.get(LABEL_TASK).map(|t| clean(t)))
            .flatten()
    });
    let node = clean(
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default(),
    );
    let name = clean(&name);
    let pool = clean(&pool);
    let search = lc(&[
        &name,
        &pool,
        &phase,
        &node,
        stamp.health.map_or("", Freshness::as_str),
        task.as_deref().unwrap_or_default(),
    ]);
    AgentRow {
        key: format!("{ns}/{name}"),
        context: Arc::default(),
        name_lc: lower_if_needed(&name),
        namespace: ns,
        name,
        pool,
        phase,
        ready,
        node,
        health: stamp.health,
        last_activity: stamp.last_activity,
        skew: stamp.skew,
        task,
        restarts,
        created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
        component,
        draining: annotated(p, crate::crd::ANNOTATION_DRAIN),
        debug: annotated(p, crate::crd::ANNOTATION_DEBUG),
        labels: Labels::from(labels),
        search,
    }
}

fn pool_row(
    p: &AgentPool,
    now: Timestamp,
    health: Option<(i32, i32, i32)>,
    pending: i32,
    running: i32,
    unclaimed: u32,
) -> PoolRow {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let st = p.status.clone().unwrap_or_default();
    let (fresh, stale, offline) =
        health.unwrap_or((st.health.fresh, st.health.stale, st.health.offline));
    let frozen = st
        .frozen
        .then(|| clean(st.frozen_reason.as_deref().unwrap_or("frozen")));
    // The one verdict (`agentdeck status` shows it too), on the pool
    // as the console sees it live: its queue from the tasks, its
    // agents' freshness from the health samples.
    let mut live = AgentPool::clone(p);
    if let Some(ls) = live.status.as_mut() {
        ls.pending_tasks = pending;
        ls.running_tasks = running;
        ls.health.fresh = fresh;
        ls.health.stale = stale;
        ls.health.offline = offline;
    }
    let verdict = verdict(&live, unclaimed, now);
    let name = clean(&name);
    let scale_reason = clean(st.scale_reason.as_deref().unwrap_or_default());
    let search = lc(&[
        &name,
        p.spec.execution_mode.as_str(),
        verdict.level.as_str(),
        &verdict.reason,
        &scale_reason,
    ]);
    PoolRow {
        key: format!("{ns}/{name}"),
        context: Arc::default(),
        name_lc: lower_if_needed(&name),
        namespace: ns,
        name,
        mode: p.spec.execution_mode.as_str(),
        ready: st.ready_replicas,
        replicas: st.replicas,
        desired: st.desired_replicas,
        min: p.spec.min_replicas,
        max: p.spec.max_replicas,
        pending,
        running,
        frozen,
        draining: st.draining || p.spec.drain,
        debug: p.spec.debug,
        hold: st
            .hold
            .as_ref()
            .map(|h| clean(&h.summary))
            .filter(|s| !s.is_empty()),
        capacity: st
            .capacity
            .as_ref()
            .map(|c| clean(&c.summary))
            .filter(|s| !s.is_empty()),
        fresh,
        stale,
        offline,
        scale_reason,
        last_scale: ts(st.last_scale_time.as_ref()),
        verdict,
        created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
        labels: Labels::from(p.labels()),
        search,
    }
}

fn event_row(e: &Event, pool: &str) -> EventRow {
    let ns = e.metadata.namespace.clone().unwrap_or_default();
    let o = &e.involved_object;
    let kind = o.kind.as_deref().unwrap_or_default();
    let oname = o.name.as_deref().unwrap_or_default();
    let object = clean(&format!("{}/{}", kind.to_lowercase(), oname));
    let reason = clean(e.reason.as_deref().unwrap_or_default());
    let message = clean(e.message.as_deref().unwrap_or_default());
    let last = e
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let warning = e.type_.as_deref() == Some("Warning");
    let search = lc(&[
        if warning { "warning" } else { "normal" },
        &reason,
        &object,
        &message,
    ]);
    EventRow {
        key: format!("{ns}/{}", e.metadata.name.as_deref().unwrap_or_default()),
        context: Arc::default(),
        name_lc: lower_if_needed(&object),
        namespace: ns,
        warning,
        reason,
        object,
        pool: Some(clean(pool)),
        message,
        count: e.count.unwrap_or(1),
        last,
        labels: Labels::new(),
        search,
    }
}

/// Whether `key` is set to `true` on the pod.
fn annotated(p: &CachedPod, key: &str) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::fixtures;
    use crate::crd::TaskPhase;

    fn thresholds() -> FreshnessThresholds {
        FreshnessThresholds {
            stale_after: Duration::from_secs(20),
            offline_after: Duration::from_secs(60),
        }
    }

    /// Rows of `b` that are the very rows of `a` (shared, not rebuilt).
    fn shared<R>(a: &[Arc<R>], b: &[Arc<R>]) -> usize {
        b.iter()
            .filter(|r| a.iter().any(|o| Arc::ptr_eq(o, r)))
            .count()
    }

    #[test]
    fn labels_are_found_by_key_in_their_compact_form() {
        let map = BTreeMap::from([
            ("b".to_owned(), "2".to_owned()),
            ("a".to_owned(), "1".to_owned()),
            ("c".to_owned(), String::new()),
        ]);
        let labels = Labels::from(&map);
        assert_eq!(labels.get("a"), Some("1"));
        assert_eq!(labels.get("c"), Some(""));
        assert_eq!(labels.get("d"), None);
        assert!(labels.contains_key("b") && !labels.contains_key("B"));
        let pairs: Vec<_> = labels.iter().collect();
        assert_eq!(pairs, [("a", "1"), ("b", "2"), ("c", "")]);
        assert!(Labels::new().is_empty());
    }

    #[test]
    fn a_lower_case_name_is_not_copied_and_another_is_lowered() {
        assert_eq!(lower_if_needed("task-000123"), None);
        assert_eq!(lower_if_needed("Pod/Api-0").as_deref(), Some("pod/api-0"));
    }

    #[test]
    fn a_rebuild_after_one_change_rebuilds_only_the_rows_it_touches_and_equals_a_fresh_build() {
        let now = fixtures::now();
        let mut src = fixtures::sources(now, 60);
        let mut builder = RowBuilder::default();
        let first = builder.build(&src, now, &thresholds());
        assert_eq!(
            builder.rebuilt,
            60 + first.agents.len() + first.events.len()
        );

        // Nothing changed: every row is shared.
        let again = builder.build(&src, now, &thresholds());
        assert_eq!(builder.rebuilt, 0);
        assert_eq!(shared(&first.tasks, &again.tasks), 60);
        assert_eq!(again, first);

        // One task's status changes (a watch event replaces its object).
        let i = src
            .tasks
            .iter()
            .position(|t| t.phase() == TaskPhase::Failed)
            .expect("a failed task");
        let mut t = AgentTask::clone(&src.tasks[i]);
        t.status.get_or_insert_with(Default::default).message = Some("exit 7".into());
        src.tasks[i] = Arc::new(t);
        let next = builder.build(&src, now, &thresholds());
        assert_eq!(builder.rebuilt, 1);
        assert_eq!(shared(&first.tasks, &next.tasks), 59);
        assert!(next.tasks.iter().any(|r| r.message == "exit 7"));
        assert_eq!(next, build(&src, now, &thresholds()));

        // One agent pod restarts: only its row.
        let p = src
            .pods
            .iter()
            .position(|p| p.metadata.name.as_deref() == Some("iac-agent-legacy-55c-x9"))
            .expect("the legacy agent");
        let mut pod = CachedPod::clone(&src.pods[p]);
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        src.pods[p] = Arc::new(pod);
        let next = builder.build(&src, now, &thresholds());
        assert_eq!(builder.rebuilt, 1);
        assert_eq!(shared(&first.agents, &next.agents), first.agents.len() - 1);
        assert!(next.agents.iter().any(|a| a.phase == "Terminating"));
        assert_eq!(next, build(&src, now, &thresholds()));

        // A task deleted, one added: gone and there.
        let gone = src.tasks.remove(0);
        let mut added = AgentTask::clone(&gone);
        added.metadata.name = Some("plan-new".into());
        src.tasks.push(Arc::new(added));
        let last = builder.build(&src, now, &thresholds());
        assert_eq!(builder.rebuilt, 1);
        assert!(last.tasks.iter().any(|r| r.name == "plan-new"));
        assert!(
            !last
                .tasks
                .iter()
                .any(|r| Some(r.name.as_str()) == gone.metadata.name.as_deref())
        );
        assert_eq!(last, build(&src, now, &thresholds()));
    }

    #[test]
    fn many_rows_built_at_once_on_two_threads_equal_the_same_rows_told_a_few_at_a_time() {
        let now = fixtures::now();
        let src = fixtures::sources(now, PARALLEL_ROWS * 2 + 7);
        let mut at_once = RowBuilder::default();
        let whole = at_once.build(&src, now, &thresholds());
        assert_eq!(whole.tasks.len(), src.tasks.len());

        // The same objects told as changes, 500 tasks at a time (each
        // batch built on one thread; the queues' places move as they come).
        let mut told = RowBuilder::default();
        let rest = Sources {
            tasks: Vec::new(),
            pools: src.pools.clone(),
            pods: src.pods.clone(),
            jobs: src.jobs.clone(),
            events: src.events.clone(),
            samples: src.samples.clone(),
        };
        told.build(&rest, now, &thresholds());
        let mut last = Snapshot::default();
        for batch in src.tasks.chunks(500) {
            let delta = Delta {
                tasks: Changes::Some(batch.iter().map(|t| (t.key(), Some(t.clone()))).collect()),
                ..Delta::default()
            };
            last = told.update(delta, now, &thresholds());
        }
        assert_eq!(last, whole);
        // And taken away again, a few at a time: nothing is left over.
        for batch in src.tasks.chunks(700) {
            let delta = Delta {
                tasks: Changes::Some(batch.iter().map(|t| (t.key(), None)).collect()),
                ..Delta::default()
            };
            last = told.update(delta, now, &thresholds());
        }
        let none = RowBuilder::default().build(&rest, now, &thresholds());
        assert_eq!(last, none);
        assert_eq!(last.task_counts, TaskCounts::default());
    }

    fn task_at(
        now: Timestamp,
        name: &str,
        pool: &str,
        created_ago: i64,
        status: serde_json::Value,
    ) -> Arc<AgentTask> {
        let created = now - jiff::SignedDuration::from_secs(created_ago);
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": name, "namespace": "q",
                             "creationTimestamp": created.to_string()},
                "spec": {"pool": pool, "command": ["true"]},
                "status": status
            }))
            .expect("task"),
        )
    }

    fn message_of<'a>(s: &'a Snapshot, name: &str) -> &'a str {
        s.tasks
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.message.as_str())
            .expect("the task's row")
    }

    #[test]
    fn a_pending_task_says_why_it_waits_its_condition_else_its_place_in_the_queue() {
        let now = fixtures::now();
        let pending = serde_json::json!({"phase": "Pending"});
        let unclaimed = serde_json::json!({"phase": "Pending", "conditions": [{
            "type": "Unclaimed", "status": "True", "reason": "PoolAtMax",
            "message": "no agent claimed it within 300s: every agent is busy",
            "lastTransitionTime": now.to_string()}]});
        let not_found = serde_json::json!({"phase": "Pending", "conditions": [{
            "type": "PoolNotFound", "status": "True", "reason": "PoolNotFound",
            "message": "", "lastTransitionTime": now.to_string()}]});
        let claimed_before = serde_json::json!({"phase": "Pending",
            "message": "requeued: its agent went offline", "conditions": [{
            "type": "Unclaimed", "status": "False", "reason": "Requeued",
            "message": "", "lastTransitionTime": now.to_string()}]});
        let src = Sources {
            tasks: vec![
                // Oldest first; equal times by name.
                task_at(now, "c-third", "p", 100, pending.clone()),
                task_at(now, "a-first", "p", 300, pending.clone()),
                task_at(now, "b-second", "p", 100, claimed_before),
                task_at(now, "d-stuck", "p", 50, unclaimed),
                task_at(now, "other", "o", 10, pending.clone()),
                task_at(now, "lost", "gone", 10, not_found),
                task_at(
                    now,
                    "running",
                    "p",
                    500,
                    serde_json::json!({"phase": "Running"}),
                ),
                {
                    let mut t = AgentTask::clone(&task_at(now, "cancelled", "p", 400, pending));
                    t.spec.cancel = true;
                    Arc::new(t)
                },
            ],
            ..Sources::default()
        };
        let snap = build(&src, now, &thresholds());
        assert_eq!(message_of(&snap, "a-first"), "queued: 1st of 4 in p");
        assert_eq!(
            message_of(&snap, "b-second"),
            "queued: 2nd of 4 in p; requeued: its agent went offline"
        );
        assert_eq!(message_of(&snap, "c-third"), "queued: 3rd of 4 in p");
        assert_eq!(
            message_of(&snap, "d-stuck"),
            "no agent claimed it within 300s: every agent is busy"
        );
        assert_eq!(message_of(&snap, "other"), "queued: 1st of 1 in o");
        assert_eq!(message_of(&snap, "lost"), "PoolNotFound");
        assert_eq!(message_of(&snap, "running"), "");
        assert_eq!(message_of(&snap, "cancelled"), "");
        assert_eq!(
            [1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111].map(ordinal),
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd",
                "101st", "111th"
            ]
        );
    }

    #[test]
    fn a_claimed_task_moves_the_queue_up_and_only_the_waiting_rows_are_rebuilt() {
        let now = fixtures::now();
        let pending = serde_json::json!({"phase": "Pending"});
        let mut src = Sources {
            tasks: vec![
                task_at(now, "t1", "p", 30, pending.clone()),
                task_at(now, "t2", "p", 20, pending.clone()),
                task_at(now, "t3", "p", 10, pending),
                task_at(
                    now,
                    "done",
                    "p",
                    90,
                    serde_json::json!({"phase": "Succeeded"}),
                ),
            ],
            ..Sources::default()
        };
        let mut builder = RowBuilder::default();
        let first = builder.build(&src, now, &thresholds());
        assert_eq!(message_of(&first, "t3"), "queued: 3rd of 3 in p");
        src.tasks[0] = task_at(now, "t1", "p", 30, serde_json::json!({"phase": "Running"}));
        let next = builder.build(&src, now, &thresholds());
        // t1 changed; t2 and t3 moved up; the finished one is shared.
        assert_eq!(builder.rebuilt, 3);
        assert_eq!(message_of(&next, "t2"), "queued: 1st of 2 in p");
        assert_eq!(message_of(&next, "t3"), "queued: 2nd of 2 in p");
        assert_eq!(next, build(&src, now, &thresholds()));
    }

    #[test]
    fn a_task_running_past_the_threshold_is_flagged_and_counted_in_its_pools_verdict() {
        let now = fixtures::now();
        let started = |ago: i64| {
            serde_json::json!({"phase": "Running", "agent": "a-1",
                "startedAt": (now - jiff::SignedDuration::from_secs(ago)).to_string()})
        };
        let pool: Arc<AgentPool> = Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
                "metadata": {"name": "p", "namespace": "q"},
                "spec": {"image": "i", "minReplicas": 1, "maxReplicas": 2},
                "status": {"replicas": 2, "readyReplicas": 2, "desiredReplicas": 2}
            }))
            .expect("pool"),
        );
        let src = Sources {
            pools: vec![pool],
            tasks: vec![
                task_at(now, "hung", "p", 4000, started(3700)),
                task_at(now, "young", "p", 600, started(590)),
            ],
            ..Sources::default()
        };
        let mut builder = RowBuilder::default();
        let snap = builder.build(&src, now, &thresholds());
        let row = |s: &Snapshot, name: &str| {
            s.tasks
                .iter()
                .find(|t| t.name == name)
                .cloned()
                .expect("row")
        };
        assert!(row(&snap, "hung").long_running);
        assert_eq!(row(&snap, "hung").message, "running over 1h");
        assert!(!row(&snap, "young").long_running);
        assert_eq!(snap.pools[0].verdict.level.as_str(), "Degraded");
        assert!(
            snap.pools[0]
                .verdict
                .reason
                .starts_with("1 task running over 1h; "),
            "{:?}",
            snap.pools[0].verdict
        );
        assert!(snap.pools[0].search.contains("running over 1h"));

        // Time passes with no change to the objects: the young one crosses
        // the threshold and its row is rebuilt.
        let later = now + jiff::SignedDuration::from_secs(3100);
        let snap = builder.build(&src, later, &thresholds());
        assert_eq!(builder.rebuilt, 1);
        assert!(row(&snap, "young").long_running);
        assert!(
            snap.pools[0]
                .verdict
                .reason
                .starts_with("2 tasks running over 1h")
        );

        // A threshold of its own; zero never flags.
        let snap = RowBuilder::flagging_long_running(Duration::from_secs(300)).build(
            &src,
            now,
            &thresholds(),
        );
        assert_eq!(row(&snap, "young").message, "running over 5m");
        let snap =
            RowBuilder::flagging_long_running(Duration::ZERO).build(&src, now, &thresholds());
        assert!(
            snap.tasks
                .iter()
                .all(|t| !t.long_running && t.message.is_empty())
        );
        assert_eq!(snap.pools[0].verdict.level.as_str(), "OK");
    }

    #[test]
    fn a_job_mode_task_whose_pod_is_gone_still_has_a_log_of_what_was_kept() {
        let now = fixtures::now();
        let pool: Arc<AgentPool> = Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
                "metadata": {"name": "b", "namespace": "q"},
                "spec": {"image": "i", "executionMode": "job", "minReplicas": 0, "maxReplicas": 2}
            }))
            .expect("pool"),
        );
        let src = Sources {
            pools: vec![pool],
            tasks: vec![
                task_at(
                    now,
                    "ran",
                    "b",
                    90,
                    serde_json::json!({"phase": "Succeeded",
                    "job": "ran-job", "outputTail": "done\n"}),
                ),
                task_at(
                    now,
                    "waits",
                    "b",
                    10,
                    serde_json::json!({"phase": "Scheduled",
                    "job": "waits-job"}),
                ),
            ],
            ..Sources::default()
        };
        let snap = build(&src, now, &thresholds());
        let log = |name: &str| {
            snap.tasks
                .iter()
                .find(|t| t.name == name)
                .and_then(|t| t.log())
        };
        assert_eq!(
            log("ran"),
            Some(LogSource {
                context: String::new(),
                namespace: "q".into(),
                pod: "ran-job".into(),
                container: Some("worker".into()),
                prefix: Some("[ran] ".into()),
                task: Some("ran".into()),
            })
        );
        // Not started: no pod yet, nothing kept, no log to open.
        assert_eq!(log("waits"), None);
    }

    #[test]
    fn an_agent_row_follows_its_health_as_time_passes_without_a_change() {
        let now = fixtures::now();
        let src = fixtures::sources(now, 10);
        let mut builder = RowBuilder::default();
        let health = |s: &Snapshot| {
            s.agents
                .iter()
                .find(|a| a.name == "iac-agent-platform-7d9f-a1")
                .and_then(|a| a.health)
        };
        let before = builder.build(&src, now, &thresholds());
        assert_eq!(health(&before), Some(Freshness::Fresh));
        // No new sample for two minutes: the same objects, another verdict.
        let later = now + jiff::SignedDuration::from_secs(120);
        let after = builder.build(&src, later, &thresholds());
        assert_eq!(health(&after), Some(Freshness::Offline));
        assert_eq!(after, build(&src, later, &thresholds()));
    }
}
