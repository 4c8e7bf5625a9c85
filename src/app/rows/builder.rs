//! The row builder: keeps every row, the per-pool and per-agent sums the
//! rows show, and indexes from each object to the rows that read it, so
//! that one change costs the rows it touches and not a pass over every
//! task. What changed comes as a [`Delta`]: from the watch feeds in the
//! console (see `cluster::feed`), or worked out from whole lists by
//! [`RowBuilder::build`].
//!
//! What a row reads from other objects, and what marks it to rebuild:
//! - a task row: its pool's execution mode (the pool changed), its Job's
//!   pod (a pod labelled with the task changed), its place in its pool's
//!   queue (a task joined or left that queue), whether it runs past the
//!   long-running threshold (the clock, by a deadline kept per task);
//! - an agent row: its health sample (the sample changed, or the clock
//!   reached the sample's next freshness change), the task running on it
//!   (a task's agent or phase changed);
//! - a pool row: its queue and task counts, its agents' health counts (any
//!   of those changed), the clock when its verdict reads it (a hold, a
//!   Ready=False condition);
//! - an event row: its pool (looked up by name in the kept objects).

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::event::CachedEvent as Event;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::Resource;

use super::{
    AgentRow, AgentStamp, DEFAULT_LONG_RUNNING, EventRow, PARALLEL_ROWS, Place, PoolRow,
    SKEW_SHOWN, Snapshot, Sources, TaskCounts, TaskRow, ToBuild, agent_row, event_row, pool_row,
    running_past, task_row,
};
use crate::cluster::AgentSample;
use crate::cluster::pod::CachedPod;
use crate::crd::UNCLAIMED;
use crate::crd::{
    AgentPool, AgentTask, ExecutionMode, LABEL_COMPONENT, LABEL_POOL, LABEL_TASK, TaskPhase,
};
use crate::health::{Freshness, FreshnessThresholds};
use crate::plan::manifests::{COMPONENT_AGENT, COMPONENT_TASK};
use crate::plan::verdict::with_long_running;

/// An object's (namespace, name).
pub type Key = (String, String);

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<K> = HashSet<K, foldhash::fast::RandomState>;

/// What changed of one kind since the last build.
pub enum Changes<K> {
    /// These objects changed (`Some`) or went (`None`).
    Some(Vec<(Key, Option<Arc<K>>)>),
    /// Every object there is now (after a list): what is not here went.
    All(Vec<Arc<K>>),
}

impl<K> Default for Changes<K> {
    fn default() -> Self {
        Changes::Some(Vec::new())
    }
}

/// What changed since the last build.
#[derive(Default)]
pub struct Delta {
    pub pools: Changes<AgentPool>,
    pub tasks: Changes<AgentTask>,
    pub pods: Changes<CachedPod>,
    pub jobs: Changes<Job>,
    pub samples: Changes<AgentSample>,
    /// The events (an API server keeps them for an hour: tens of
    /// thousands after a large scale-up): a row is built when its event
    /// changed, or when the object it is about came, went or moved pool.
    pub events: Changes<Event>,
}

/// Something kept by (namespace, name).
pub trait Keyed {
    fn key(&self) -> Key;
}

macro_rules! keyed_by_meta {
    ($($t:ty),*) => {$(
        impl Keyed for $t {
            fn key(&self) -> Key {
                let m = self.meta();
                (
                    m.namespace.clone().unwrap_or_default(),
                    m.name.clone().unwrap_or_default(),
                )
            }
        }
    )*};
}
keyed_by_meta!(AgentPool, AgentTask, CachedPod, Job, Event);

impl Keyed for AgentSample {
    fn key(&self) -> Key {
        (self.namespace.clone(), self.pod.clone())
    }
}

/// The changes among `changes` of what `have` holds: objects not the very
/// ones kept, and (for a whole list) the kept ones not listed.
fn changed<K: Keyed, E>(
    changes: Changes<K>,
    have: &Map<Key, E>,
    object: impl Fn(&E) -> &Arc<K>,
) -> Vec<(Key, Option<Arc<K>>)> {
    match changes {
        Changes::Some(list) => list
            .into_iter()
            .filter(|(k, o)| match (have.get(k), o) {
                (Some(e), Some(o)) => !Arc::ptr_eq(object(e), o),
                (None, None) => false,
                _ => true,
            })
            .collect(),
        Changes::All(all) if have.is_empty() => {
            all.into_iter().map(|o| (o.key(), Some(o))).collect()
        }
        Changes::All(all) => {
            let mut out = Vec::new();
            let mut listed: Set<Key> = Set::with_capacity_and_hasher(all.len(), Default::default());
            for o in all {
                let k = o.key();
                match have.get(&k) {
                    Some(e) if Arc::ptr_eq(object(e), &o) => {}
                    _ => out.push((k.clone(), Some(o))),
                }
                listed.insert(k);
            }
            out.extend(
                have.keys()
                    .filter(|k| !listed.contains(*k))
                    .map(|k| (k.clone(), None)),
            );
            out
        }
    }
}

/// Rows kept in the order a table shows them, updated in place when few
/// change and merged in one pass when many do.
struct Sorted<R> {
    rows: Vec<Arc<R>>,
    cmp: fn(&R, &R) -> Ordering,
    gone: Vec<Arc<R>>,
    new: Vec<Arc<R>>,
    /// The rows in `new`, by address ([`addr`]).
    pending: HashSet<usize>,
}

impl<R> Sorted<R> {
    fn new(cmp: fn(&R, &R) -> Ordering) -> Self {
        Sorted {
            rows: Vec::new(),
            cmp,
            gone: Vec::new(),
            new: Vec::new(),
            pending: HashSet::new(),
        }
    }

    /// `old` (if any) is replaced by `new` (if any) at the next `settle`.
    /// A row added since the last `settle` and replaced again is not
    /// added at all.
    fn replace(&mut self, old: Option<Arc<R>>, new: Option<Arc<R>>) {
        if let Some(old) = old {
            if self.pending.remove(&addr(&old)) {
                self.new.retain(|r| !Arc::ptr_eq(r, &old));
            } else {
                self.gone.push(old);
            }
        }
        if let Some(new) = new {
            self.pending.insert(addr(&new));
            self.new.push(new);
        }
    }

    /// Applies the replacements: one by one (a binary search and a move
    /// each) when they are few, else in one pass: the gone dropped, the
    /// new sorted among themselves and merged in. A list's pages bring
    /// hundreds of rows a build into a table of up to 100,000: inserted one
    /// by one each moved the table's tail, and sorting the whole table
    /// afresh (as this did past a sixteenth of it) took a tenth of the
    /// console's time to its first complete list.
    fn settle(&mut self) {
        let cmp = self.cmp;
        let changes = self.gone.len() + self.new.len();
        if changes == 0 {
            return;
        }
        self.pending.clear();
        if changes > FEW_CHANGES {
            let gone: HashSet<usize> = self.gone.drain(..).map(|r| addr(&r)).collect();
            if !gone.is_empty() {
                self.rows.retain(|r| !gone.contains(&addr(r)));
            }
            let mut new = std::mem::take(&mut self.new);
            new.sort_unstable_by(|a, b| cmp(a, b));
            self.rows = merge(std::mem::take(&mut self.rows), new, cmp);
            return;
        }
        for old in std::mem::take(&mut self.gone) {
            if let Ok(i) = self.rows.binary_search_by(|r| cmp(r, &old))
                && Arc::ptr_eq(&self.rows[i], &old)
            {
                self.rows.remove(i);
            }
        }
        for new in std::mem::take(&mut self.new) {
            let i = self
                .rows
                .binary_search_by(|r| cmp(r, &new))
                .unwrap_or_else(|i| i);
            self.rows.insert(i, new);
        }
    }
}

/// A row's address: which row it is, whatever it holds (the rows of a
/// table are held by it, so no address is reused while it is there).
fn addr<R>(row: &Arc<R>) -> usize {
    Arc::as_ptr(row) as usize
}

/// Replacements past this many are settled in one pass (see
/// [`Sorted::settle`]).
const FEW_CHANGES: usize = 16;

/// `a` and `b`, each sorted by `cmp`, as one sorted table (of equal rows,
/// `a`'s first).
fn merge<R>(a: Vec<Arc<R>>, b: Vec<Arc<R>>, cmp: fn(&R, &R) -> Ordering) -> Vec<Arc<R>> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => cmp(x, y) != Ordering::Greater,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
}

fn by_key<R: super::Row>(a: &R, b: &R) -> Ordering {
    a.key().cmp(b.key())
}

fn newest_first(a: &TaskRow, b: &TaskRow) -> Ordering {
    b.created.cmp(&a.created).then_with(|| a.key.cmp(&b.key))
}

fn latest_event_first(a: &EventRow, b: &EventRow) -> Ordering {
    b.last.cmp(&a.last).then_with(|| a.key.cmp(&b.key))
}

/// What an event's pool is read from (see [`RowBuilder::pool_of_event`]):
/// its task, pod or Job by (namespace, name), or (for a Deployment's or
/// ReplicaSet's) the pools of its namespace, as `(namespace, "")`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum About {
    Task,
    Pod,
    Job,
    Owned,
}

fn about(e: &Event) -> Option<(About, Key)> {
    let ns = e.metadata.namespace.clone().unwrap_or_default();
    let o = &e.involved_object;
    let name = || o.name.clone().unwrap_or_default();
    match o.kind.as_deref().unwrap_or_default() {
        "AgentTask" => Some((About::Task, (ns, name()))),
        "Pod" => Some((About::Pod, (ns, name()))),
        "Job" => Some((About::Job, (ns, name()))),
        "Deployment" | "ReplicaSet" => Some((About::Owned, (ns, String::new()))),
        _ => None,
    }
}

/// Whose events may have changed pool in a delta: objects that came,
/// went or moved pool (`all` after a relist of any of them).
#[derive(Default)]
struct Moved {
    all: bool,
    objects: Vec<(About, Key)>,
}

/// An object's pool label.
fn pool_label(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<&str> {
    meta.labels.as_ref()?.get(LABEL_POOL).map(String::as_str)
}

struct EventEntry {
    object: Arc<Event>,
    pool: Option<String>,
    row: Option<Arc<EventRow>>,
}

/// What a task adds to the sums and indexes; taken away when it changes.
#[derive(Clone, PartialEq)]
struct TaskPart {
    pool: Key,
    phase: TaskPhase,
    unclaimed: bool,
    /// Its place-holder in its pool's queue, while it waits.
    waiting: Option<(Option<Timestamp>, String)>,
    /// The agent it runs on, while it runs.
    agent: Option<Key>,
    /// The value of its pods' task label, when that is not its name (a
    /// long or unusual name; most are their own label).
    label: Option<String>,
}

impl TaskPart {
    fn of(key: &Key, t: &AgentTask) -> TaskPart {
        let phase = t.phase();
        let st = t.status.as_ref();
        TaskPart {
            pool: (key.0.clone(), t.spec.pool.clone()),
            phase,
            unclaimed: !phase.is_finished()
                && st.is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == UNCLAIMED && c.status == "True")
                }),
            waiting: (phase == TaskPhase::Pending
                && !t.spec.cancel
                && t.metadata.deletion_timestamp.is_none())
            .then(|| {
                (
                    t.metadata.creation_timestamp.as_ref().map(|c| c.0),
                    key.1.clone(),
                )
            }),
            agent: st
                .filter(|s| s.phase == TaskPhase::Running)
                .and_then(|s| s.agent.clone())
                .map(|a| (key.0.clone(), a)),
            label: Some(crate::plan::manifests::label_value(&key.1)).filter(|l| *l != key.1),
        }
    }
}

/// What a task row was built from, besides its object.
#[derive(Clone, Copy, PartialEq)]
struct TaskStamp {
    job_mode: bool,
    queue: Option<Place>,
    long: bool,
}

struct TaskEntry {
    object: Arc<AgentTask>,
    part: TaskPart,
    row: Option<Arc<TaskRow>>,
    /// What the row was built from, `None` when its object changed since.
    stamp: Option<(TaskStamp, Option<String>)>,
    /// Its place in its pool's queue now.
    place: Option<Place>,
    /// Counted as long-running in its pool's sums.
    long: bool,
    /// When it runs past the threshold (a key of the task clock).
    due: Option<Timestamp>,
}

/// A pool's sums, by (namespace, pool name) for tasks.
#[derive(Default)]
struct Queue {
    pending: i32,
    running: i32,
    unclaimed: u32,
    long_running: u32,
    /// Its waiting tasks in the order agents claim them.
    waiting: BTreeSet<(Option<Timestamp>, String)>,
    /// Its tasks (a change of the pool's mode rebuilds their rows).
    tasks: usize,
}

struct PodEntry {
    object: Arc<CachedPod>,
    /// `agent` or `task` for the pods the agents table shows.
    component: Option<&'static str>,
    row: Option<Arc<AgentRow>>,
    stamp: Option<AgentStamp>,
    /// Counted in its pool's health sums: (namespace, pool label), health.
    counted: Option<(Key, Freshness)>,
    /// When its freshness changes next (a key of the agent clock).
    due: Option<Timestamp>,
    /// Its pool and task labels.
    pool: Option<String>,
    task: Option<String>,
}

struct PoolEntry {
    object: Arc<AgentPool>,
    row: Option<Arc<PoolRow>>,
    /// Its verdict reads the clock (a hold, a Ready=False condition).
    clocked: bool,
}

/// Builds snapshots incrementally (see the module's notes).
#[derive(Default)]
pub struct RowBuilder {
    /// Running tasks are flagged past this (`None`: the default, zero: never).
    long_running: Option<Duration>,
    pools: Map<Key, PoolEntry>,
    /// Boxed: a table of 100,000 has room for a third more, and an entry
    /// is 272 bytes.
    tasks: Map<Key, Box<TaskEntry>>,
    pods: Map<Key, PodEntry>,
    samples: Map<Key, Arc<AgentSample>>,
    /// A Job's pool label, for its events.
    jobs: Map<Key, (Arc<Job>, Option<String>)>,
    queues: Map<Key, Queue>,
    /// Agents' health sums by (namespace, pool label): fresh, stale,
    /// offline, and how many are counted.
    health: Map<Key, (i32, i32, i32, u32)>,
    /// (namespace, agent pod) → the tasks running on it (its row shows
    /// the last by name: one, unless a status is behind).
    running_on: Map<Key, BTreeSet<String>>,
    /// (namespace, task label) → the task, for a task whose label is not
    /// its name; and the pods labelled with each task label.
    task_by_label: Map<Key, String>,
    /// (A Job's retries each have a pod: its row reads the newest.)
    pod_by_task_label: Map<Key, BTreeSet<String>>,
    /// (namespace, pool label) → pool name.
    pool_by_label: Map<Key, String>,
    counts: TaskCounts,
    task_clock: BTreeSet<(Timestamp, Key)>,
    agent_clock: BTreeSet<(Timestamp, Key)>,
    sorted_tasks: Option<Sorted<TaskRow>>,
    sorted_agents: Option<Sorted<AgentRow>>,
    sorted_pools: Option<Sorted<PoolRow>>,
    events: Map<Key, EventEntry>,
    /// The events read by each object's pool (see [`About`]).
    events_about: Map<(About, Key), Set<Key>>,
    sorted_events: Option<Sorted<EventRow>>,
    /// Rows to look at again in this build.
    dirty_tasks: Set<Key>,
    dirty_pods: Set<Key>,
    dirty_pools: Set<Key>,
    /// Pools whose queue changed (the places of its waiting tasks).
    dirty_queues: Set<Key>,
    /// Rows built (not reused) by the last build: tasks, agents, events.
    pub rebuilt: usize,
}

impl RowBuilder {
    /// A builder that flags Running tasks past `after` (zero: never).
    pub fn flagging_long_running(after: Duration) -> RowBuilder {
        RowBuilder {
            long_running: Some(after),
            ..RowBuilder::default()
        }
    }

    /// The threshold in force, `None` when flagging is off.
    fn long_after(&self) -> Option<Duration> {
        Some(self.long_running.unwrap_or(DEFAULT_LONG_RUNNING)).filter(|d| !d.is_zero())
    }

    /// The snapshot of `src` at `now`, reusing the rows of unchanged
    /// objects (recognised by address: a watch store hands out the same
    /// `Arc` until the object changes). A pass over every object, to find
    /// what changed; the console tells [`RowBuilder::update`] instead.
    pub fn build(
        &mut self,
        src: &Sources,
        now: Timestamp,
        thresholds: &FreshnessThresholds,
    ) -> Snapshot {
        let delta = Delta {
            pools: Changes::All(src.pools.clone()),
            tasks: Changes::All(src.tasks.clone()),
            pods: Changes::All(src.pods.clone()),
            jobs: Changes::All(src.jobs.clone()),
            samples: Changes::All(src.samples.iter().cloned().map(Arc::new).collect()),
            events: Changes::All(src.events.clone()),
        };
        self.update(delta, now, thresholds)
    }

    /// The snapshot after `delta` at `now`: only the rows that read what
    /// changed (or whose clock came) are built again.
    pub fn update(
        &mut self,
        delta: Delta,
        now: Timestamp,
        thresholds: &FreshnessThresholds,
    ) -> Snapshot {
        self.rebuilt = 0;
        let moved = self.moved(&delta);
        self.apply_pools(delta.pools);
        self.apply_tasks(delta.tasks);
        self.apply_pods(delta.pods);
        self.apply_samples(delta.samples);
        self.apply_jobs(delta.jobs);
        self.clock(now);
        self.places();
        self.task_rows(now);
        self.agent_rows(now, thresholds);
        self.pool_rows(now);
        self.apply_events(delta.events, moved);
        self.settle();
        Snapshot {
            pools: self
                .sorted_pools
                .as_ref()
                .map(|s| s.rows.clone())
                .unwrap_or_default(),
            agents: self
                .sorted_agents
                .as_ref()
                .map(|s| s.rows.clone())
                .unwrap_or_default(),
            tasks: self
                .sorted_tasks
                .as_ref()
                .map(|s| s.rows.clone())
                .unwrap_or_default(),
            events: self
                .sorted_events
                .as_ref()
                .map(|s| s.rows.clone())
                .unwrap_or_default(),
            task_counts: self.counts,
            built: Some(now),
            contexts: Vec::new(),
        }
    }

    fn apply_pools(&mut self, changes: Changes<AgentPool>) {
        for (key, object) in changed(changes, &self.pools, |e| &e.object) {
            let old = self.pools.remove(&key);
            let old_mode = old.as_ref().map(|e| e.object.spec.execution_mode);
            if let Some(old) = old {
                self.pool_by_label
                    .remove(&(key.0.clone(), crate::plan::manifests::label_value(&key.1)));
                self.sorted_pools().replace(old.row, None);
            }
            let mode = object.as_ref().map(|p| p.spec.execution_mode);
            if let Some(p) = object {
                self.pool_by_label.insert(
                    (key.0.clone(), crate::plan::manifests::label_value(&key.1)),
                    key.1.clone(),
                );
                self.pools.insert(
                    key.clone(),
                    PoolEntry {
                        clocked: reads_the_clock(&p),
                        object: p,
                        row: None,
                    },
                );
            }
            // Its tasks' rows say whether they run as Jobs (a rare change:
            // a pass over the tasks, rather than a name kept per task).
            if old_mode != mode && self.queues.get(&key).is_some_and(|q| q.tasks > 0) {
                for (k, t) in &self.tasks {
                    if t.part.pool == key {
                        self.dirty_tasks.insert(k.clone());
                    }
                }
            }
            self.dirty_pools.insert(key);
        }
    }

    fn apply_tasks(&mut self, changes: Changes<AgentTask>) {
        for (key, object) in changed(changes, &self.tasks, |e| &e.object) {
            let mut kept = self.tasks.remove(&key);
            if let Some(old) = kept.as_mut() {
                self.take_part(&key, old);
            }
            match (object, kept) {
                (None, Some(old)) => {
                    self.sorted_tasks().replace(old.row, None);
                    if let Some(due) = old.due {
                        self.task_clock.remove(&(due, key.clone()));
                    }
                }
                (None, None) => {}
                (Some(t), kept) => {
                    let part = TaskPart::of(&key, &t);
                    let mut entry = match kept {
                        Some(mut entry) => {
                            entry.object = t;
                            entry.part = part;
                            entry.stamp = None;
                            entry
                        }
                        None => Box::new(TaskEntry {
                            object: t,
                            part,
                            row: None,
                            stamp: None,
                            place: None,
                            long: false,
                            due: None,
                        }),
                    };
                    self.add_part(&key, &mut entry);
                    self.tasks.insert(key.clone(), entry);
                    self.dirty_tasks.insert(key);
                }
            }
        }
    }

    /// Takes what `entry` added to the sums and indexes away.
    fn take_part(&mut self, key: &Key, entry: &mut TaskEntry) {
        let part = &entry.part;
        count(&mut self.counts, part.phase, -1);
        if let Some(q) = self.queues.get_mut(&part.pool) {
            queue_count(q, part, -1);
            if entry.long {
                q.long_running -= 1;
            }
            if let Some(w) = &part.waiting {
                q.waiting.remove(w);
                self.dirty_queues.insert(part.pool.clone());
            }
            q.tasks -= 1;
            if q.tasks == 0 {
                self.queues.remove(&part.pool);
            }
        }
        entry.long = false;
        if let Some(agent) = &part.agent
            && let Some(on) = self.running_on.get_mut(agent)
        {
            on.remove(&key.1);
            if on.is_empty() {
                self.running_on.remove(agent);
            }
            self.dirty_pods.insert(agent.clone());
        }
        if let Some(label) = &part.label {
            let label = (key.0.clone(), label.clone());
            if self.task_by_label.get(&label) == Some(&key.1) {
                self.task_by_label.remove(&label);
            }
        }
        self.dirty_pools.insert(part.pool.clone());
    }

    /// Adds what `entry` (its part just set) adds to the sums and indexes.
    fn add_part(&mut self, key: &Key, entry: &mut TaskEntry) {
        let part = &entry.part;
        count(&mut self.counts, part.phase, 1);
        let q = self.queues.entry(part.pool.clone()).or_default();
        queue_count(q, part, 1);
        q.tasks += 1;
        if let Some(w) = &part.waiting {
            q.waiting.insert(w.clone());
            self.dirty_queues.insert(part.pool.clone());
        } else {
            entry.place = None;
        }
        if let Some(agent) = &part.agent {
            self.running_on
                .entry(agent.clone())
                .or_default()
                .insert(key.1.clone());
            self.dirty_pods.insert(agent.clone());
        }
        if let Some(label) = &part.label {
            self.task_by_label
                .insert((key.0.clone(), label.clone()), key.1.clone());
        }
        self.dirty_pools.insert(part.pool.clone());
    }

    fn apply_pods(&mut self, changes: Changes<CachedPod>) {
        for (key, object) in changed(changes, &self.pods, |e| &e.object) {
            let kept = self.pods.remove(&key);
            if let Some(old) = &kept {
                if let Some(label) = &old.task {
                    let by = (key.0.clone(), label.clone());
                    if let Some(pods) = self.pod_by_task_label.get_mut(&by) {
                        pods.remove(&key.1);
                        if pods.is_empty() {
                            self.pod_by_task_label.remove(&by);
                        }
                    }
                    self.task_for_label_dirty(&by);
                }
                if let Some(due) = old.due {
                    self.agent_clock.remove(&(due, key.clone()));
                }
            }
            let Some(p) = object else {
                if let Some(mut old) = kept {
                    self.uncount(&mut old);
                    self.sorted_agents().replace(old.row, None);
                }
                continue;
            };
            let labels = p.metadata.labels.clone().unwrap_or_default();
            let label = |k: &str| labels.get(k).cloned();
            let component = match label(LABEL_COMPONENT).as_deref() {
                Some(COMPONENT_AGENT) => Some(COMPONENT_AGENT),
                Some(COMPONENT_TASK) => Some(COMPONENT_TASK),
                _ => None,
            };
            let task = label(LABEL_TASK);
            if let Some(t) = &task {
                let by = (key.0.clone(), t.clone());
                self.pod_by_task_label
                    .entry(by.clone())
                    .or_default()
                    .insert(key.1.clone());
                self.task_for_label_dirty(&by);
            }
            let mut entry = kept.unwrap_or(PodEntry {
                object: p.clone(),
                component,
                row: None,
                stamp: None,
                counted: None,
                due: None,
                pool: None,
                task: None,
            });
            entry.object = p;
            entry.stamp = None;
            entry.due = None;
            entry.pool = label(LABEL_POOL);
            entry.task = task;
            if entry.component != component {
                self.uncount(&mut entry);
                let old = entry.row.take();
                self.sorted_agents().replace(old, None);
                entry.component = component;
            }
            self.pods.insert(key.clone(), entry);
            self.dirty_pods.insert(key);
        }
    }

    /// Marks the task whose pods carry `label` (its name, or a label
    /// kept for it).
    fn task_for_label_dirty(&mut self, label: &Key) {
        if let Some(t) = self.task_by_label.get(label) {
            self.dirty_tasks.insert((label.0.clone(), t.clone()));
        } else if self
            .tasks
            .get(label)
            .is_some_and(|t| t.part.label.is_none())
        {
            self.dirty_tasks.insert(label.clone());
        }
    }

    /// Takes a pod's health away from its pool's sums.
    fn uncount(&mut self, entry: &mut PodEntry) {
        if let Some((pool, h)) = entry.counted.take() {
            if let Some(c) = self.health.get_mut(&pool) {
                health_count(c, h, -1);
                if c.3 == 0 {
                    self.health.remove(&pool);
                }
            }
            self.pool_of_label_dirty(&pool);
        }
    }

    fn pool_of_label_dirty(&mut self, label: &Key) {
        if let Some(name) = self.pool_by_label.get(label) {
            self.dirty_pools.insert((label.0.clone(), name.clone()));
        }
    }

    fn apply_samples(&mut self, changes: Changes<AgentSample>) {
        for (key, sample) in changed(changes, &self.samples, |s| s) {
            match sample {
                Some(s) => self.samples.insert(key.clone(), s),
                None => self.samples.remove(&key),
            };
            self.dirty_pods.insert(key);
        }
    }

    fn apply_jobs(&mut self, changes: Changes<Job>) {
        for (key, job) in changed(changes, &self.jobs, |j| &j.0) {
            match job {
                Some(j) => {
                    let pool = j
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_POOL))
                        .cloned();
                    self.jobs.insert(key, (j, pool));
                }
                None => {
                    self.jobs.remove(&key);
                }
            }
        }
    }

    /// Marks what the clock changed by `now`: tasks past the threshold,
    /// agents whose freshness changes, pools whose verdict reads the clock.
    fn clock(&mut self, now: Timestamp) {
        while let Some((due, _)) = self.task_clock.first()
            && *due <= now
        {
            if let Some((_, key)) = self.task_clock.pop_first() {
                if let Some(e) = self.tasks.get_mut(&key) {
                    e.due = None;
                }
                self.dirty_tasks.insert(key);
            }
        }
        while let Some((due, _)) = self.agent_clock.first()
            && *due <= now
        {
            if let Some((_, key)) = self.agent_clock.pop_first() {
                if let Some(e) = self.pods.get_mut(&key) {
                    e.due = None;
                }
                self.dirty_pods.insert(key);
            }
        }
        for (key, p) in &self.pools {
            if p.clocked {
                self.dirty_pools.insert(key.clone());
            }
        }
    }

    /// Each waiting task's place in the queues that changed.
    fn places(&mut self) {
        for pool in std::mem::take(&mut self.dirty_queues) {
            let Some(q) = self.queues.get(&pool) else {
                continue;
            };
            let of = u32::try_from(q.waiting.len()).unwrap_or(u32::MAX);
            for (i, (_, name)) in q.waiting.iter().enumerate() {
                let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
                let key = (pool.0.clone(), name.clone());
                if let Some(e) = self.tasks.get_mut(&key) {
                    let place = Some(Place { n, of });
                    if e.place != place {
                        e.place = place;
                        self.dirty_tasks.insert(key);
                    }
                }
            }
        }
    }

    /// Builds the task rows marked, when what they read changed.
    fn task_rows(&mut self, now: Timestamp) {
        let long_after = self.long_after();
        let mut todo: Vec<(Key, ToBuild, Option<String>)> = Vec::new();
        for key in std::mem::take(&mut self.dirty_tasks) {
            let Some(e) = self.tasks.get(&key) else {
                continue;
            };
            let t = &e.object;
            let job_mode = self
                .pools
                .get(&e.part.pool)
                .is_some_and(|p| p.object.spec.execution_mode == ExecutionMode::Job);
            let job_pod = if job_mode {
                self.pod_by_task_label
                    .get(&(
                        key.0.clone(),
                        e.part.label.clone().unwrap_or_else(|| key.1.clone()),
                    ))
                    .and_then(|names| {
                        names
                            .iter()
                            .filter_map(|n| self.pods.get(&(key.0.clone(), n.clone())))
                            .max_by_key(|p| {
                                (
                                    p.object.metadata.creation_timestamp.clone(),
                                    p.object.metadata.name.clone(),
                                )
                            })
                            .and_then(|p| p.object.metadata.name.clone())
                    })
            } else {
                None
            };
            let queue = (t.phase() == TaskPhase::Pending)
                .then_some(e.place)
                .flatten();
            let long = long_after.filter(|after| running_past(t, now, *after));
            let stamp = TaskStamp {
                job_mode,
                queue,
                long: long.is_some(),
            };
            if e.stamp.as_ref() == Some(&(stamp, job_pod.clone())) {
                continue;
            }
            todo.push((
                key,
                ToBuild {
                    job_mode,
                    job_pod: None,
                    queue,
                    long,
                },
                job_pod,
            ));
        }
        let rows = self.build_tasks(&todo);
        self.rebuilt += rows.iter().flatten().count();
        let sorted = self
            .sorted_tasks
            .get_or_insert_with(|| Sorted::new(newest_first));
        for ((key, b, job_pod), row) in todo.into_iter().zip(rows) {
            let (Some(e), Some(row)) = (self.tasks.get_mut(&key), row) else {
                continue;
            };
            let old = e.row.replace(row.clone());
            sorted.replace(old, Some(row));
            let long = b.long.is_some();
            e.stamp = Some((
                TaskStamp {
                    job_mode: b.job_mode,
                    queue: b.queue,
                    long,
                },
                job_pod,
            ));
            // Its pool counts it as long-running, or not.
            if e.long != long {
                if let Some(q) = self.queues.get_mut(&e.part.pool) {
                    if long {
                        q.long_running += 1;
                    } else {
                        q.long_running -= 1;
                    }
                }
                e.long = long;
                self.dirty_pools.insert(e.part.pool.clone());
            }
            // When it will run past the threshold.
            if let Some(due) = e.due.take() {
                self.task_clock.remove(&(due, key.clone()));
            }
            if let Some(after) = long_after
                && !long
                && let Some(from) = running_since(&e.object)
                && let Ok(due) = from.checked_add(after)
            {
                e.due = Some(due);
                self.task_clock.insert((due, key));
            }
        }
    }

    /// The rows of `todo`, in order; many are built on two threads.
    fn build_tasks(&self, todo: &[(Key, ToBuild, Option<String>)]) -> Vec<Option<Arc<TaskRow>>> {
        let build = |part: &[(Key, ToBuild, Option<String>)]| -> Vec<Option<Arc<TaskRow>>> {
            part.iter()
                .map(|(key, b, job_pod)| {
                    let e = self.tasks.get(key)?;
                    let pod = job_pod
                        .as_ref()
                        .and_then(|p| self.pods.get(&(key.0.clone(), p.clone())))
                        .map(|p| &*p.object);
                    let b = ToBuild { job_pod: pod, ..*b };
                    Some(Arc::new(task_row(&e.object, &b)))
                })
                .collect()
        };
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if todo.len() < PARALLEL_ROWS || cores < 2 {
            return build(todo);
        }
        let (first, second) = todo.split_at(todo.len() / 2);
        std::thread::scope(|scope| {
            let later = std::thread::Builder::new()
                .name("agentdeck-rows".into())
                .spawn_scoped(scope, || build(second));
            let mut rows = build(first);
            match later {
                Ok(later) => match later.join() {
                    Ok(more) => rows.extend(more),
                    Err(panic) => std::panic::resume_unwind(panic),
                },
                // No thread to be had: this one builds the rest too.
                Err(_) => rows.extend(build(second)),
            }
            rows
        })
    }

    /// Builds the agent rows marked, when what they read changed, and
    /// keeps their pools' health sums.
    fn agent_rows(&mut self, now: Timestamp, thresholds: &FreshnessThresholds) {
        for key in std::mem::take(&mut self.dirty_pods) {
            let Some(mut e) = self.pods.remove(&key) else {
                continue;
            };
            let Some(component) = e.component else {
                self.pods.insert(key, e);
                continue;
            };
            let sample = self.samples.get(&key);
            let health = (component == COMPONENT_AGENT)
                .then(|| sample.map(|s| s.freshness(now, thresholds)))
                .flatten();
            let stamp = AgentStamp {
                health,
                last_activity: sample.and_then(|s| s.last_report.map(|(r, _)| r.last_activity)),
                skew: sample
                    .and_then(|s| s.clock_skew())
                    .map(|d| d.as_secs())
                    .filter(|s| s.abs() >= SKEW_SHOWN),
                task: self.running_on.get(&key).and_then(|on| on.last()).cloned(),
            };
            if let Some(due) = e.due.take() {
                self.agent_clock.remove(&(due, key.clone()));
            }
            if let Some(s) = sample.filter(|_| health.is_some())
                && let Some(due) = next_freshness_change(s, now, thresholds)
            {
                e.due = Some(due);
                self.agent_clock.insert((due, key.clone()));
            }
            if e.stamp.as_ref() != Some(&stamp) || e.row.is_none() {
                let row = Arc::new(agent_row(&e.object, component, &stamp));
                self.rebuilt += 1;
                let old = e.row.replace(row.clone());
                self.sorted_agents().replace(old, Some(row));
                e.stamp = Some(stamp);
            }
            // Its pool's health sums.
            let counted = e.row.as_ref().and_then(|r| {
                let h = r.health.filter(|_| r.phase == "Running")?;
                Some(((key.0.clone(), e.pool.clone().unwrap_or_default()), h))
            });
            if counted != e.counted {
                self.uncount(&mut e);
                if let Some((pool, h)) = &counted {
                    health_count(self.health.entry(pool.clone()).or_default(), *h, 1);
                    self.pool_of_label_dirty(pool);
                }
                e.counted = counted;
            }
            self.pods.insert(key, e);
        }
    }

    /// Builds the pool rows marked.
    fn pool_rows(&mut self, now: Timestamp) {
        let long_after = self.long_after();
        for key in std::mem::take(&mut self.dirty_pools) {
            let Some(e) = self.pools.get(&key) else {
                continue;
            };
            let queue = self.queues.get(&key);
            let label = (key.0.clone(), crate::plan::manifests::label_value(&key.1));
            let health = self
                .health
                .get(&label)
                .map(|&(fresh, stale, offline, _)| (fresh, stale, offline));
            let mut row = pool_row(
                &e.object,
                now,
                health,
                queue.map_or(0, |q| q.pending),
                queue.map_or(0, |q| q.running),
                queue.map_or(0, |q| q.unclaimed),
            );
            if let Some(after) = long_after {
                let long = queue.map_or(0, |q| q.long_running);
                if long > 0 {
                    row.verdict = with_long_running(row.verdict, long, after);
                    row.search = super::lc(&[&row.search, &row.verdict.reason]);
                }
            }
            if e.row.as_deref() == Some(&row) {
                continue;
            }
            let row = Arc::new(row);
            let old = self
                .pools
                .get_mut(&key)
                .and_then(|e| e.row.replace(row.clone()));
            self.sorted_pools().replace(old, Some(row));
        }
    }

    /// The objects of `delta` whose events may read another pool now:
    /// added, removed, or (tasks, pods, Jobs) moved to another pool.
    fn moved(&self, delta: &Delta) -> Moved {
        let mut m = Moved::default();
        let mut one = |about: About, key: &Key, before: Option<&str>, after: Option<&str>| {
            if before != after {
                m.objects.push((about, key.clone()));
            }
        };
        match &delta.tasks {
            Changes::All(_) => m.all = true,
            Changes::Some(list) => {
                for (k, t) in list {
                    let before = self.tasks.get(k).map(|e| e.object.spec.pool.as_str());
                    one(
                        About::Task,
                        k,
                        before,
                        t.as_ref().map(|t| t.spec.pool.as_str()),
                    );
                }
            }
        }
        match &delta.pods {
            Changes::All(_) => m.all = true,
            Changes::Some(list) => {
                for (k, p) in list {
                    let before = self.pods.get(k).and_then(|e| e.pool.as_deref());
                    let after = p.as_ref().and_then(|p| pool_label(&p.metadata));
                    one(About::Pod, k, before, after);
                }
            }
        }
        match &delta.jobs {
            Changes::All(_) => m.all = true,
            Changes::Some(list) => {
                for (k, j) in list {
                    let before = self.jobs.get(k).and_then(|e| e.1.as_deref());
                    let after = j.as_ref().and_then(|j| pool_label(&j.metadata));
                    one(About::Job, k, before, after);
                }
            }
        }
        match &delta.pools {
            Changes::All(_) => m.all = true,
            Changes::Some(list) => {
                for (k, p) in list {
                    if self.pools.contains_key(k) != p.is_some() {
                        m.objects.push((About::Owned, (k.0.clone(), String::new())));
                    }
                }
            }
        }
        m
    }

    /// Events about our objects: pools, tasks, and the managed pods, Jobs,
    /// Deployments and ReplicaSets (named after their pool or task). An
    /// event's row is built when it changes, and again when its pool
    /// does (the object it is about came, went or moved).
    fn apply_events(&mut self, changes: Changes<Event>, moved: Moved) {
        for (key, event) in changed(changes, &self.events, |e| &e.object) {
            if let Some(old) = self.events.remove(&key) {
                if let Some(about) = about(&old.object)
                    && let Some(waiting) = self.events_about.get_mut(&about)
                {
                    waiting.remove(&key);
                    if waiting.is_empty() {
                        self.events_about.remove(&about);
                    }
                }
                self.sorted_events().replace(old.row, None);
            }
            let Some(e) = event else {
                continue;
            };
            if let Some(about) = about(&e) {
                self.events_about
                    .entry(about)
                    .or_default()
                    .insert(key.clone());
            }
            let pool = self.pool_of_event(&e);
            let row = pool.as_deref().map(|p| {
                self.rebuilt += 1;
                Arc::new(event_row(&e, p))
            });
            self.sorted_events().replace(None, row.clone());
            self.events.insert(
                key,
                EventEntry {
                    object: e,
                    pool,
                    row,
                },
            );
        }
        let again: Vec<Key> = if moved.all {
            self.events.keys().cloned().collect()
        } else {
            moved
                .objects
                .iter()
                .filter_map(|about| self.events_about.get(about))
                .flatten()
                .cloned()
                .collect()
        };
        for key in again {
            let Some(e) = self.events.get(&key).map(|e| e.object.clone()) else {
                continue;
            };
            let pool = self.pool_of_event(&e);
            let Some(entry) = self.events.get_mut(&key) else {
                continue;
            };
            if entry.pool == pool {
                continue;
            }
            let row = pool.as_deref().map(|p| Arc::new(event_row(&e, p)));
            self.rebuilt += usize::from(row.is_some());
            entry.pool = pool;
            let old = std::mem::replace(&mut entry.row, row.clone());
            self.sorted_events().replace(old, row);
        }
    }

    /// The pool an event is about, when it is about one of ours.
    fn pool_of_event(&self, e: &Event) -> Option<String> {
        let ns = e.metadata.namespace.as_deref().unwrap_or_default();
        let o = &e.involved_object;
        let oname = o.name.as_deref().unwrap_or_default();
        let key = || (ns.to_owned(), oname.to_owned());
        match o.kind.as_deref().unwrap_or_default() {
            "AgentPool" => Some(oname.to_owned()),
            "AgentTask" => self.tasks.get(&key()).map(|t| t.object.spec.pool.clone()),
            "Pod" => self.pods.get(&key()).and_then(|p| p.pool.clone()),
            "Job" => self.jobs.get(&key()).and_then(|j| j.1.clone()),
            "Deployment" | "ReplicaSet" => {
                // The longest pool name the object's name starts with.
                let mut rest = oname.strip_prefix("iac-agent-")?;
                loop {
                    if self.pools.contains_key(&(ns.to_owned(), rest.to_owned())) {
                        return Some(rest.to_owned());
                    }
                    rest = &rest[..rest.rfind('-')?];
                }
            }
            _ => None,
        }
    }

    /// Applies the rows replaced in this build to the sorted tables.
    fn settle(&mut self) {
        if let Some(s) = self.sorted_tasks.as_mut() {
            s.settle();
        }
        if let Some(s) = self.sorted_agents.as_mut() {
            s.settle();
        }
        if let Some(s) = self.sorted_pools.as_mut() {
            s.settle();
        }
        if let Some(s) = self.sorted_events.as_mut() {
            s.settle();
        }
    }

    fn sorted_tasks(&mut self) -> &mut Sorted<TaskRow> {
        self.sorted_tasks
            .get_or_insert_with(|| Sorted::new(newest_first))
    }

    fn sorted_agents(&mut self) -> &mut Sorted<AgentRow> {
        self.sorted_agents
            .get_or_insert_with(|| Sorted::new(by_key))
    }

    fn sorted_pools(&mut self) -> &mut Sorted<PoolRow> {
        self.sorted_pools.get_or_insert_with(|| Sorted::new(by_key))
    }

    fn sorted_events(&mut self) -> &mut Sorted<EventRow> {
        self.sorted_events
            .get_or_insert_with(|| Sorted::new(latest_event_first))
    }
}

/// Adds `by` to the header's count of `phase`.
fn count(c: &mut TaskCounts, phase: TaskPhase, by: isize) {
    let n = match phase {
        TaskPhase::Pending | TaskPhase::Scheduled => &mut c.pending,
        TaskPhase::Running => &mut c.running,
        TaskPhase::Failed | TaskPhase::Errored => &mut c.failed,
        TaskPhase::Succeeded | TaskPhase::Cancelled => return,
    };
    *n = n.saturating_add_signed(by);
}

/// Adds `by` of a task to its pool's queue sums.
fn queue_count(q: &mut Queue, part: &TaskPart, by: i32) {
    match part.phase {
        TaskPhase::Pending => q.pending += by,
        TaskPhase::Running | TaskPhase::Scheduled => q.running += by,
        _ => {}
    }
    if part.unclaimed {
        q.unclaimed = q.unclaimed.saturating_add_signed(by);
    }
}

fn health_count(c: &mut (i32, i32, i32, u32), h: Freshness, by: i32) {
    match h {
        Freshness::Fresh => c.0 += by,
        Freshness::Stale => c.1 += by,
        Freshness::Offline => c.2 += by,
    }
    c.3 = c.3.saturating_add_signed(by);
}

/// When a Running task started running (or was claimed).
fn running_since(t: &AgentTask) -> Option<Timestamp> {
    let st = t
        .status
        .as_ref()
        .filter(|s| s.phase == TaskPhase::Running)?;
    super::ts(st.started_at.as_ref()).or(super::ts(st.claimed_at.as_ref()))
}

/// Whether a pool's verdict reads the clock: a hold (it ends), a Ready
/// condition that is False (it turns Degraded after a grace period).
fn reads_the_clock(p: &AgentPool) -> bool {
    p.spec.hold.is_some()
        || p.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "False")
        })
}

/// The first moment after `now` at which `s`'s freshness can change (it
/// only worsens with time: fresh → stale → offline), just past each
/// threshold, as `health::classify` compares with `>`.
fn next_freshness_change(
    s: &AgentSample,
    now: Timestamp,
    t: &FreshnessThresholds,
) -> Option<Timestamp> {
    let past = |from: Timestamp, after: Duration| {
        from.checked_add(after)
            .and_then(|d| d.checked_add(Duration::from_millis(1)))
            .ok()
    };
    let mut candidates = Vec::with_capacity(3);
    match &s.last_report {
        None => candidates.push(past(s.first_seen, t.offline_after)),
        Some((report, received)) => {
            candidates.push(past(*received, t.stale_after));
            candidates.push(past(*received, t.offline_after));
            let skew = report.current_time.duration_since(*received);
            let activity = report
                .last_activity
                .checked_sub(skew)
                .unwrap_or(report.last_activity);
            candidates.push(past(activity, t.offline_after));
        }
    }
    candidates.into_iter().flatten().filter(|c| *c > now).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::fixtures;
    use crate::crd::AgentTaskStatus;
    use jiff::SignedDuration;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn thresholds() -> FreshnessThresholds {
        FreshnessThresholds {
            stale_after: Duration::from_secs(20),
            offline_after: Duration::from_secs(60),
        }
    }

    /// xorshift: the same run every time, no dependency.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Changes made to `src`, told as the feeds would tell them.
    #[derive(Default)]
    struct Told {
        pools: Vec<Key>,
        tasks: Vec<Key>,
        pods: Vec<Key>,
        samples: Vec<Key>,
    }

    fn find<K: Keyed>(all: &[Arc<K>], key: &Key) -> Option<Arc<K>> {
        all.iter().find(|o| o.key() == *key).cloned()
    }

    fn delta(src: &Sources, told: Told) -> Delta {
        Delta {
            pools: Changes::Some(
                told.pools
                    .into_iter()
                    .map(|k| (k.clone(), find(&src.pools, &k)))
                    .collect(),
            ),
            tasks: Changes::Some(
                told.tasks
                    .into_iter()
                    .map(|k| (k.clone(), find(&src.tasks, &k)))
                    .collect(),
            ),
            pods: Changes::Some(
                told.pods
                    .into_iter()
                    .map(|k| (k.clone(), find(&src.pods, &k)))
                    .collect(),
            ),
            samples: Changes::Some(
                told.samples
                    .into_iter()
                    .map(|k| {
                        let s = src
                            .samples
                            .iter()
                            .find(|s| s.key() == k)
                            .cloned()
                            .map(Arc::new);
                        (k, s)
                    })
                    .collect(),
            ),
            jobs: Changes::default(),
            events: Changes::default(),
        }
    }

    fn status(t: &mut AgentTask) -> &mut AgentTaskStatus {
        t.status.get_or_insert_with(Default::default)
    }

    /// One random change to `src`: a task claimed, finished, waiting,
    /// unclaimed, added or deleted; a pod terminating, gone or added; a
    /// pool's mode flipped; a sample renewed.
    fn change(src: &mut Sources, rng: &mut Rng, now: Timestamp, step: usize, told: &mut Told) {
        let agents: Vec<String> = src
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let pick = rng.below(11);
        if pick <= 5 && !src.tasks.is_empty() {
            let i = rng.below(src.tasks.len());
            let mut t = AgentTask::clone(&src.tasks[i]);
            match pick {
                0 => {
                    let st = status(&mut t);
                    st.phase = TaskPhase::Running;
                    st.agent = Some(if agents.is_empty() {
                        "nobody".into()
                    } else {
                        agents[rng.below(agents.len())].clone()
                    });
                    st.started_at =
                        Some(Time(now - SignedDuration::from_secs(rng.below(120) as i64)));
                }
                1 => status(&mut t).phase = TaskPhase::Succeeded,
                2 => t.status = None,
                3 => status(&mut t).conditions.push(Condition {
                    type_: UNCLAIMED.into(),
                    status: "True".into(),
                    reason: "NoAgent".into(),
                    message: String::new(),
                    last_transition_time: Time(now),
                    observed_generation: None,
                }),
                4 => {
                    told.tasks.push(t.key());
                    src.tasks.remove(i);
                    return;
                }
                _ => {
                    // Some names too long to be their own label value.
                    t.metadata.name = Some(if rng.below(3) == 0 {
                        format!("{}-{step:05}", "a-very-long-task-name".repeat(4))
                    } else {
                        format!("new-{step:05}")
                    });
                    t.metadata.creation_timestamp =
                        Some(Time(now - SignedDuration::from_secs(rng.below(50) as i64)));
                    t.spec.pool = ["platform", "legacy", "batch", "gone"][rng.below(4)].into();
                    t.status = None;
                    told.tasks.push(t.key());
                    src.tasks.push(Arc::new(t));
                    return;
                }
            }
            told.tasks.push(t.key());
            src.tasks[i] = Arc::new(t);
        } else if pick <= 8 && !src.pods.is_empty() {
            let i = rng.below(src.pods.len());
            let mut p = CachedPod::clone(&src.pods[i]);
            told.pods.push(p.key());
            match pick {
                6 => p.metadata.deletion_timestamp = Some(Time(now)),
                7 => {
                    src.pods.remove(i);
                    return;
                }
                _ => {
                    // A new pod, in a pool, maybe a task's Job pod.
                    let name = format!("pod-{step:05}");
                    p.metadata.name = Some(name.clone());
                    p.metadata.deletion_timestamp = None;
                    let labels = p.metadata.labels.get_or_insert_with(Default::default);
                    if let Some(t) = src.tasks.get(rng.below(src.tasks.len().max(1))) {
                        labels.insert(
                            LABEL_TASK.into(),
                            crate::plan::manifests::label_value(
                                t.metadata.name.as_deref().unwrap_or_default(),
                            ),
                        );
                    }
                    told.pods.pop();
                    told.pods.push(p.key());
                    if rng.below(2) == 0 {
                        let mut s = src.samples[0].clone();
                        s.pod = name;
                        if let Some(r) = s.last_report.as_mut() {
                            r.1 = now;
                        }
                        told.samples.push(s.key());
                        src.samples.push(s);
                    }
                    src.pods.push(Arc::new(p));
                    return;
                }
            }
            src.pods[i] = Arc::new(p);
        } else if pick == 9 {
            let i = rng.below(src.pools.len());
            let mut p = AgentPool::clone(&src.pools[i]);
            p.spec.execution_mode = match p.spec.execution_mode {
                ExecutionMode::Job => ExecutionMode::Deployment,
                ExecutionMode::Deployment => ExecutionMode::Job,
            };
            told.pools.push(p.key());
            src.pools[i] = Arc::new(p);
        } else if !src.samples.is_empty() {
            let i = rng.below(src.samples.len());
            if let Some(r) = src.samples[i].last_report.as_mut() {
                r.1 = now;
                r.0.current_time = now;
                r.0.last_activity = now;
            }
            told.samples.push(src.samples[i].key());
        }
    }

    /// Events told one by one, and the objects they are about coming and
    /// going, give the rows a fresh build gives; an event whose object is
    /// unknown waits for it, and its row goes with it.
    #[test]
    fn events_change_incrementally_as_a_fresh_build_has_them() {
        use kube::ResourceExt;
        let now = fixtures::now();
        let mut src = fixtures::sources(now, 50);
        let mut b = RowBuilder::default();
        b.build(&src, now, &thresholds());
        let ns = src.tasks[0].namespace();
        let ev = |name: &str, kind: &str, about: &str, msg: &str| -> Arc<Event> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": ns},
                    "involvedObject": {"kind": kind, "name": about},
                    "reason": "R", "message": msg, "type": "Normal", "count": 1,
                    "lastTimestamp": now.to_string(),
                }))
                .expect("event"),
            )
        };
        let check = |b: &mut RowBuilder, src: &Sources, delta: Delta, what: &str| {
            let told = b.update(delta, now, &thresholds());
            let fresh = RowBuilder::default().build(src, now, &thresholds());
            assert_eq!(told.events, fresh.events, "{what}");
            told
        };
        let events = |list: Vec<(Key, Option<Arc<Event>>)>| Delta {
            events: Changes::Some(list),
            ..Delta::default()
        };
        // About a task nobody has yet: kept, not shown.
        let early = ev("early", "AgentTask", "late-task", "claimed");
        src.events.push(early.clone());
        let snap = check(
            &mut b,
            &src,
            events(vec![(early.key(), Some(early.clone()))]),
            "early",
        );
        assert!(!snap.events.iter().any(|r| r.message == "claimed"));
        // The task comes: the event shows, in its pool.
        let mut t = AgentTask::clone(&src.tasks[3]);
        t.metadata.name = Some("late-task".into());
        let t = Arc::new(t);
        src.tasks.push(t.clone());
        let snap = check(
            &mut b,
            &src,
            Delta {
                tasks: Changes::Some(vec![(t.key(), Some(t.clone()))]),
                ..Delta::default()
            },
            "task came",
        );
        assert!(snap.events.iter().any(|r| r.message == "claimed"));
        // The event changes; another about a pod comes; one goes.
        let changed = ev("early", "AgentTask", "late-task", "finished");
        let i = src.events.len() - 1;
        src.events[i] = changed.clone();
        let pod = src.pods[0].name_any();
        let about_pod = ev("pod-ev", "Pod", &pod, "started");
        src.events.push(about_pod.clone());
        let gone = src.events.remove(0);
        check(
            &mut b,
            &src,
            events(vec![
                (changed.key(), Some(changed)),
                (about_pod.key(), Some(about_pod)),
                (gone.key(), None),
            ]),
            "events changed",
        );
        // The task goes: its event's row goes too.
        src.tasks.retain(|x| x.name_any() != "late-task");
        let snap = check(
            &mut b,
            &src,
            Delta {
                tasks: Changes::Some(vec![(t.key(), None)]),
                ..Delta::default()
            },
            "task went",
        );
        assert!(!snap.events.iter().any(|r| r.message == "finished"));
        // Nothing changed: the rows are the very same.
        let again = b.update(Delta::default(), now, &thresholds());
        assert!(
            again
                .events
                .iter()
                .zip(&snap.events)
                .all(|(a, b)| Arc::ptr_eq(a, b))
        );
        assert_eq!(b.rebuilt, 0);
    }

    #[test]
    fn rows_told_random_changes_as_time_passes_always_equal_a_fresh_build() {
        for seed in [0x9e37_79b9_7f4a_7c15, 7, 0xdead_beef] {
            random_changes(seed, 400);
        }
    }

    fn random_changes(seed: u64, steps: usize) {
        let mut now = fixtures::now();
        let mut src = fixtures::sources(now, 120);
        let long = Duration::from_secs(60);
        let mut told_builder = RowBuilder::flagging_long_running(long);
        told_builder.build(&src, now, &thresholds());
        let mut rng = Rng(seed);
        for step in 0..steps {
            let mut told = Told::default();
            for j in 0..=rng.below(3) {
                change(&mut src, &mut rng, now, step * 10 + j, &mut told);
            }
            if rng.below(3) == 0 {
                now += SignedDuration::from_secs(rng.below(25) as i64);
            }
            let got = told_builder.update(delta(&src, told), now, &thresholds());
            let want = RowBuilder::flagging_long_running(long).build(&src, now, &thresholds());
            assert_eq!(
                got.task_counts, want.task_counts,
                "seed {seed} step {step}: counts"
            );
            assert_eq!(got.pools, want.pools, "step {step}: pools");
            assert_eq!(got.agents, want.agents, "step {step}: agents");
            assert_eq!(got.tasks.len(), want.tasks.len(), "step {step}: tasks");
            for (g, w) in got.tasks.iter().zip(&want.tasks) {
                assert_eq!(g, w, "step {step}: a task");
            }
            assert_eq!(got, want, "step {step}");
        }
    }

    #[test]
    fn one_task_changed_among_many_rebuilds_its_row_and_its_pool_only() {
        let now = fixtures::now();
        let src = fixtures::sources(now, 5000);
        let mut b = RowBuilder::default();
        let first = b.build(&src, now, &thresholds());
        let mut t = AgentTask::clone(&src.tasks[17]);
        status(&mut t).message = Some("exit 9".into());
        let key = t.key();
        let next = b.update(
            Delta {
                tasks: Changes::Some(vec![(key, Some(Arc::new(t)))]),
                ..Delta::default()
            },
            now,
            &thresholds(),
        );
        assert_eq!(b.rebuilt, 1, "one task row");
        assert!(next.tasks.iter().any(|r| r.message.contains("exit 9")));
        let shared = next
            .tasks
            .iter()
            .zip(&first.tasks)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, first.tasks.len() - 1);
        let same_agents = next
            .agents
            .iter()
            .zip(&first.agents)
            .all(|(a, b)| Arc::ptr_eq(a, b));
        assert!(same_agents, "no agent row rebuilt");
    }

    #[test]
    fn a_sorted_table_replaced_in_batches_of_every_size_equals_the_rows_sorted_afresh() {
        // (order, id): ordered by the first, ties kept apart by the second.
        fn by_first(a: &(u32, u32), b: &(u32, u32)) -> Ordering {
            a.0.cmp(&b.0).then(a.1.cmp(&b.1))
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut table = Sorted::new(by_first);
        let mut live: Vec<Arc<(u32, u32)>> = Vec::new();
        let mut id = 0;
        for batch in [1, 3, FEW_CHANGES, FEW_CHANGES + 1, 200, 5, 1000, 2, 40] {
            for _ in 0..batch {
                let gone = (!live.is_empty() && rng.below(3) == 0)
                    .then(|| live.swap_remove(rng.below(live.len())));
                // Few distinct orders: many ties, as tasks created in the
                // same second have.
                id += 1;
                let new = Arc::new((rng.below(50) as u32, id));
                live.push(new.clone());
                table.replace(gone, Some(new));
            }
            table.settle();
            let mut want = live.clone();
            want.sort_by(|a, b| by_first(a, b));
            assert_eq!(table.rows, want, "after a batch of {batch}");
            let same = table.rows.iter().zip(&want).all(|(a, b)| Arc::ptr_eq(a, b));
            assert!(same, "the very rows, after a batch of {batch}");
        }
    }

    #[test]
    fn an_agents_next_freshness_change_is_just_past_each_threshold() {
        let now = fixtures::now();
        let src = fixtures::sources(now, 0);
        // Answered 1 s ago, idle 2 s: stale in 19 s.
        let s = &src.samples[0];
        let next = next_freshness_change(s, now, &thresholds()).expect("a change to come");
        assert_eq!(next, now + SignedDuration::from_millis(19_001));
        assert_eq!(
            s.freshness(next - SignedDuration::from_millis(2), &thresholds()),
            Freshness::Fresh
        );
        assert_eq!(s.freshness(next, &thresholds()), Freshness::Stale);
        // Offline already: nothing more to come.
        let later = now + SignedDuration::from_secs(3600);
        assert_eq!(next_freshness_change(s, later, &thresholds()), None);
    }
}
