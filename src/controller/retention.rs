//! Finished AgentTasks go once their pool's `spec.taskHistory` lets them
//! (see [`crate::plan::retention`]); what each was stays readable.
//!
//! **Record first, then delete.** Before a task is deleted its summary and
//! `status.outputTail` are written to the pool's history ConfigMap,
//! `agentdeck-task-history-<pool>` (labelled `agentdeck.dev/task-history`,
//! owned by the pool, at most [`MAX_RECORDS`] records and
//! [`MAX_RECORD_BYTES`]); the delete then carries the uid and
//! resourceVersion recorded, so a task retried in between is not deleted.
//! A crash between the two leaves a record of a task that still exists,
//! never a deleted task without a record.
//!
//! **When.** The leader looks when the stores change (at most every
//! [`MIN_GAP`]) and when the next kept task's time is up, and only while
//! every watch is current: a task missing from a stale store is not
//! "finished long ago".

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::crd::{AgentPool, AgentTask, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY};
pub use crate::plan::retention::{LABEL_TASK_HISTORY, MAX_RECORD_BYTES, MAX_RECORDS, record_in};
use crate::plan::retention::{TaskRecord, merge_records, plan};

/// Shortest time between two looks.
pub const MIN_GAP: Duration = Duration::from_secs(2);
/// Longest time between two looks.
const MAX_GAP: Duration = Duration::from_secs(60);
/// Tasks deleted per pool per look (the rest go at the next).
const PER_LOOK: usize = 100;

/// Name of the pool's history ConfigMap.
pub fn configmap_name(pool: &str) -> String {
    format!("agentdeck-task-history-{pool}")
}

/// Runs until `cancel`.
pub(super) async fn run(shared: Arc<Context>, cancel: CancellationToken) {
    let mut changes = shared.view.changes.subscribe();
    let mut memory = Memory::default();
    let mut due = MAX_GAP;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(due) => {}
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(MIN_GAP) => {}
                }
                changes.borrow_and_update();
            }
        }
        due = MAX_GAP;
        let ready = shared.synced.load(std::sync::atomic::Ordering::SeqCst)
            && shared.leader.is_leader()
            && shared.view.watches.all_watching();
        if !ready {
            // Whatever happened meanwhile, the next look reads every pool.
            memory = Memory::default();
            continue;
        }
        look(&shared, &mut memory).await;
        due = memory
            .next_due(Timestamp::now())
            .map_or(MAX_GAP, |d| d.clamp(MIN_GAP, MAX_GAP));
    }
}

/// A pool, by (namespace, name).
type PoolKey = (String, String);

/// What the looks remember between them, so that a look reads the pools
/// whose tasks changed or whose next kept task is due, not every task
/// (100,000 at the scale bench's size, every two seconds while anything
/// changed).
#[derive(Default)]
struct Memory {
    /// The task index's clock at the last look (0: every pool).
    seen: u64,
    /// The pools' generation at the last look (`None`: never looked): a
    /// pool that came or whose `taskHistory` changed may let tasks go.
    pools_seen: Option<u64>,
    /// When the last look at every pool was.
    last_full: Option<std::time::Instant>,
    /// When each pool with kept tasks is next due (its next kept task's
    /// time, or a retry).
    due: HashMap<PoolKey, Timestamp>,
}

/// Every pool is looked at this often all the same.
const FULL_EVERY: Duration = Duration::from_secs(600);

impl Memory {
    /// The pools to look at now: those whose tasks came, changed or went
    /// since the last look, and those due; every pool after a change of
    /// the pools (or at the first look, or [`FULL_EVERY`]).
    fn pools_to_look_at(&mut self, shared: &Context, now: Timestamp) -> Vec<PoolKey> {
        let pools = shared.view.by_pool.pools.get();
        let full = self.pools_seen != Some(pools)
            || self.last_full.is_none_or(|at| at.elapsed() >= FULL_EVERY);
        let since = if full { 0 } else { self.seen };
        let (touched, clock) = shared.view.by_pool.tasks.touched_since(since);
        self.seen = clock;
        self.pools_seen = Some(pools);
        if full {
            self.last_full = Some(std::time::Instant::now());
        }
        let mut looking: std::collections::HashSet<PoolKey> = touched.into_iter().collect();
        looking.extend(
            self.due
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(pool, _)| pool.clone()),
        );
        looking.into_iter().collect()
    }

    /// `pool` is due again after `after` (replacing what it was).
    fn due_in(&mut self, pool: &PoolKey, now: Timestamp, after: Option<Duration>) {
        match after.and_then(|d| now.checked_add(d).ok()) {
            Some(at) => {
                self.due.insert(pool.clone(), at);
            }
            None => {
                self.due.remove(pool);
            }
        }
    }

    /// `pool` is due again within `after` at the latest.
    fn due_within(&mut self, pool: &PoolKey, now: Timestamp, after: Duration) {
        let Ok(at) = now.checked_add(after) else {
            return;
        };
        let entry = self.due.entry(pool.clone()).or_insert(at);
        *entry = (*entry).min(at);
    }

    /// How long until the first pool is due.
    fn next_due(&self, now: Timestamp) -> Option<Duration> {
        let first = self.due.values().min()?;
        Some(
            first
                .duration_since(now)
                .try_into()
                .unwrap_or(Duration::ZERO),
        )
    }
}

/// The deciding part of [`look`]: for each of `pools`, what goes now, and
/// when its next kept task is due.
fn decide(
    shared: &Context,
    pools: Vec<PoolKey>,
    now: Timestamp,
) -> (Vec<PoolLook>, Vec<(PoolKey, Option<Duration>)>) {
    let mut looks = Vec::new();
    let mut dues = Vec::new();
    for (ns, pool_name) in pools {
        if !shared.namespaces.contains(&ns) {
            continue;
        }
        let pool_ref =
            kube::runtime::reflector::ObjectRef::<AgentPool>::new(&pool_name).within(&ns);
        // Tasks of a pool that does not exist are the orphan sweep's.
        let Some(pool) = shared.view.pools.get(&pool_ref) else {
            dues.push(((ns, pool_name), None));
            continue;
        };
        let tasks: Vec<Arc<AgentTask>> = shared
            .view
            .pool_tasks(&ns, &pool_name)
            .into_iter()
            .filter(|t| t.status.as_ref().is_some_and(|s| s.phase.is_finished()))
            .collect();
        let retention = plan(tasks.iter().map(|t| &**t), &pool.spec.task_history, now);
        let mut next = retention.next_due;
        if retention.expired.len() > PER_LOOK {
            next = Some(Duration::ZERO);
        }
        if retention.expired.is_empty() {
            dues.push(((ns, pool_name), next));
            continue;
        }
        let by_name: HashMap<String, &Arc<AgentTask>> =
            tasks.iter().map(|t| (t.name_any(), t)).collect();
        let going: Vec<(Arc<AgentTask>, TaskRecord)> = retention
            .expired
            .iter()
            .take(PER_LOOK)
            .filter_map(|e| {
                let task = by_name.get(&e.name)?;
                Some((Arc::clone(task), TaskRecord::of(task, &e.why, now)))
            })
            .collect();
        dues.push(((ns.clone(), pool_name.clone()), next));
        looks.push(PoolLook {
            ns,
            pool_name,
            pool,
            going,
        });
    }
    (looks, dues)
}

/// What one look decided for one pool: the tasks to delete now, each with
/// its record.
struct PoolLook {
    ns: String,
    pool_name: String,
    pool: Arc<AgentPool>,
    going: Vec<(Arc<AgentTask>, TaskRecord)>,
}

/// One look at the pools [`Memory`] names: records and deletes what each
/// one's history lets go, and notes when each is due next.
///
/// The deciding reads every task of those pools (all 100,000 at the scale
/// bench's size at the first look): it runs on the blocking pool, so the
/// runtime's threads go on carrying watch events to the reconciler
/// meanwhile (issue 32).
async fn look(shared: &Arc<Context>, memory: &mut Memory) {
    let now = Timestamp::now();
    let pools = memory.pools_to_look_at(shared, now);
    if pools.is_empty() {
        return;
    }
    let deciding = shared.clone();
    let Ok((looks, dues)) =
        tokio::task::spawn_blocking(move || decide(&deciding, pools, now)).await
    else {
        // The runtime is going away.
        return;
    };
    for (pool, after) in &dues {
        memory.due_in(pool, now, *after);
    }
    for PoolLook {
        ns,
        pool_name,
        pool,
        going,
    } in looks
    {
        let key = (ns.clone(), pool_name.clone());
        let pool = &*pool;
        let api: Api<AgentTask> = Api::namespaced(shared.client.clone(), &ns);
        // The cached copies have no output (see `strip_task`), and the
        // daemon's keep little else of a finished task (see
        // `slim_finished_task`): each record is the API's copy. A task
        // that cannot be read now is not deleted now (nothing goes
        // without its record).
        let mut kept = Vec::with_capacity(going.len());
        for (task, mut record) in going {
            let name = record.name.clone();
            let unreadable = |err: kube::Error| {
                tracing::debug!(namespace = %ns, task = %name, error = %err, "cannot read a finished task's output to keep; not deleting it now");
            };
            let fresh = if crate::cluster::task_output_stripped(&task) {
                match api.get_opt(&name).await {
                    // Changed since it was cached (retried, say): the
                    // next look decides on the change.
                    Ok(Some(fresh)) if fresh.resource_version() != task.resource_version() => {
                        memory.due_within(&key, now, MIN_GAP);
                        continue;
                    }
                    Ok(Some(fresh)) => {
                        record = TaskRecord::of(&fresh, &record.deleted_because, now);
                        fresh
                    }
                    Ok(None) => continue,
                    Err(err) => {
                        unreadable(err);
                        memory.due_within(&key, now, MIN_GAP);
                        continue;
                    }
                }
            } else {
                (*task).clone()
            };
            // Its output: in the status (older agents) or its ConfigMap,
            // which goes with the task (its owner).
            if crate::crd::output::has_output(&fresh) {
                match crate::crd::output::read(&shared.client, &fresh).await {
                    Ok(found) => record.output_tail = found.map(|f| f.text().to_owned()),
                    Err(err) => {
                        unreadable(err);
                        memory.due_within(&key, now, MIN_GAP);
                        continue;
                    }
                }
            }
            kept.push((task, record));
        }
        let going = kept;
        if going.is_empty() {
            continue;
        }
        let records: Vec<TaskRecord> = going.iter().map(|(_, r)| r.clone()).collect();
        if let Err(e) = keep_records(shared, &ns, pool, &records).await {
            // Nothing is deleted whose record could not be kept.
            tracing::warn!(namespace = %ns, pool = %pool_name, error = %e, "cannot keep the records of finished tasks; not deleting them");
            memory.due_within(&key, now, MIN_GAP.max(Duration::from_secs(10)));
            continue;
        }
        let mut deleted = 0u64;
        for (task, record) in going {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: task.uid(),
                    resource_version: task.resource_version(),
                }),
                ..DeleteParams::background()
            };
            match api.delete(&record.name, &params).await {
                Ok(_) => {
                    deleted += 1;
                    tracing::debug!(namespace = %ns, task = %record.name, why = %record.deleted_because, "finished task deleted");
                }
                // Gone already, or changed since it was read (retried):
                // the next look decides again.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => {
                    tracing::warn!(namespace = %ns, task = %record.name, error = %e, "cannot delete a finished task");
                    shared.metrics.api_error(match &e {
                        kube::Error::Api(s) => Some(s.code),
                        _ => None,
                    });
                    break;
                }
            }
        }
        shared.metrics.tasks_deleted(&ns, &pool_name, deleted);
    }
}

/// Adds `records` to the pool's history ConfigMap (created on first use).
async fn keep_records(
    shared: &Context,
    namespace: &str,
    pool: &AgentPool,
    records: &[TaskRecord],
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(shared.client.clone(), namespace);
    let pool_name = pool.name_any();
    let name = configmap_name(&pool_name);
    let mut last = None;
    for _attempt in 0..5 {
        let existing = api.get_opt(&name).await?;
        let mut cm = existing.clone().unwrap_or_else(|| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([
                    (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
                    (LABEL_POOL.to_owned(), pool_name.clone()),
                    (LABEL_TASK_HISTORY.to_owned(), "true".to_owned()),
                ])),
                owner_references: pool.controller_owner_ref(&()).map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        });
        let mut data = cm.data.take().unwrap_or_default();
        merge_records(&mut data, records);
        cm.data = Some(data);
        let result = if existing.is_some() {
            api.replace(&name, &PostParams::default(), &cm).await
        } else {
            api.create(&PostParams::default(), &cm).await
        };
        match result {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => last = Some(kube::Error::Api(s)),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("five conflicts"))
}

/// The record of a deleted task in its pool's history, if one is kept.
pub async fn find_record(
    client: &kube::Client,
    namespace: &str,
    pool: &str,
    task: &str,
) -> Result<Option<TaskRecord>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Some(cm) = api.get_opt(&configmap_name(pool)).await? else {
        return Ok(None);
    };
    Ok(record_in(&cm, task))
}
