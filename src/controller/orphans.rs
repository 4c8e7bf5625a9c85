//! Tasks whose `spec.pool` names no AgentPool (and the metric series of
//! pools that are gone). The pool reconciler never
//! sees them (there is no pool to reconcile), so this small loop does: such
//! a task gets the condition `PoolNotFound=True` and a Warning Event where
//! the user looks (`kubectl describe at …`), and the condition turns False
//! as soon as the pool exists — whose own reconcile, triggered by the pool's
//! creation, then scales for the task at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::PostParams;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::crd::{AgentPool, AgentTask};
use crate::plan::pool::{POOL_NOT_FOUND, condition};

/// How often the stores are looked at: an in-memory scan, no API call.
const EVERY: Duration = Duration::from_millis(500);

/// One condition to write on one task.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolNotFoundChange {
    pub namespace: String,
    pub task: String,
    pub condition: Condition,
}

/// Which unfinished tasks must get (or lose) `PoolNotFound`: True when
/// their pool is not among `pools` (`(namespace, name)`), False when it is
/// and the task still says True. Tasks already saying the right thing are
/// left out, so a steady cluster writes nothing.
pub fn pool_not_found(
    tasks: &[Arc<AgentTask>],
    pools: &HashSet<(String, String)>,
    now: jiff::Timestamp,
) -> Vec<PoolNotFoundChange> {
    // Looked up by borrowed names: no two strings cloned per task.
    let pools: HashSet<(&str, &str)> = pools
        .iter()
        .map(|(ns, name)| (ns.as_str(), name.as_str()))
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        if task.phase().is_finished() || task.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(namespace) = task.metadata.namespace.as_deref() else {
            continue;
        };
        let previous: &[Condition] = task
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let current = previous.iter().find(|c| c.type_ == POOL_NOT_FOUND);
        let exists = pools.contains(&(namespace, task.spec.pool.as_str()));
        let want = match (exists, current.map(|c| c.status.as_str())) {
            (false, Some("True")) | (true, None | Some("False")) => continue,
            (false, _) => condition(
                previous,
                POOL_NOT_FOUND,
                true,
                POOL_NOT_FOUND,
                &format!(
                    "AgentPool {:?} does not exist in namespace {namespace:?}; \
                     the task waits until it does",
                    task.spec.pool
                ),
                task.metadata.generation,
                now,
            ),
            (true, _) => condition(
                previous,
                POOL_NOT_FOUND,
                false,
                "PoolFound",
                &format!("AgentPool {:?} exists", task.spec.pool),
                task.metadata.generation,
                now,
            ),
        };
        out.push(PoolNotFoundChange {
            namespace: namespace.to_owned(),
            task: task.name_any(),
            condition: want,
        });
    }
    out
}

/// Runs until `cancel`: while leading and synced, writes the changes
/// [`pool_not_found`] asks for, with a Warning Event when one turns True.
pub(super) async fn run(shared: Arc<Context>, cancel: CancellationToken) {
    // What was last written per task uid, so a store that lags behind our
    // own write does not make us write (and warn) twice.
    let mut written: HashMap<String, String> = HashMap::new();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What the last look saw: the task index's clock, the pools'
    // generation and the role. Only the pools whose tasks changed since
    // are looked at; every pool when the pools or the role changed, or a
    // write failed (a steady cluster is looked at once: 100,000 tasks read
    // twice a second were most of a quiet controller's CPU).
    let mut seen: Option<(u64, u64, bool)> = None;
    let mut failed = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !shared.synced.load(std::sync::atomic::Ordering::SeqCst)
            || !shared.view.watches.all_watching()
        {
            seen = None;
            continue;
        }
        let (pools, leading) = (shared.view.by_pool.pools.get(), shared.leader.is_leader());
        let every = failed || seen.is_none_or(|(_, p, l)| (p, l) != (pools, leading));
        let since = match seen {
            Some((clock, ..)) if !every => clock,
            _ => 0,
        };
        let (groups, clock) = shared.view.by_pool.tasks.touched_since(since);
        seen = Some((clock, pools, leading));
        failed = false;
        if groups.is_empty() && !every {
            continue;
        }
        // At the first look, every task in the store (100,000 at the
        // scale bench's size): on the blocking pool, so the runtime's
        // threads go on carrying watch events to the reconciler meanwhile
        // (issue 32).
        let looking = shared.clone();
        let Ok((found, back)) = tokio::task::spawn_blocking(move || {
            let found = look(&looking, &mut written, &groups, every);
            (found, written)
        })
        .await
        else {
            // The runtime is going away.
            return;
        };
        written = back;
        for (task, change) in found {
            let uid = task.uid().unwrap_or_default();
            if write(&shared, &task, &change).await {
                written.insert(uid, change.condition.status.clone());
            } else {
                // Every pool is looked at again next tick.
                failed = true;
            }
        }
    }
}

/// One look at the tasks of `groups` (namespace, pool): when `every`
/// group is looked at, the metrics of deleted pools go too; and while
/// leading, the [`pool_not_found`] changes to write, each with its task
/// (those `written` already said are left out).
fn look(
    shared: &Context,
    written: &mut HashMap<String, String>,
    groups: &[(String, String)],
    every: bool,
) -> Vec<(Arc<AgentTask>, PoolNotFoundChange)> {
    let pools: HashSet<(String, String)> = shared
        .view
        .pools
        .state()
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p: &Arc<AgentPool>| Some((p.namespace()?, p.name_any())))
        .collect();
    if every {
        // A deleted pool's series go with it.
        shared.metrics.retain_pools(&pools);
    }
    if !shared.leader.is_leader() {
        return Vec::new();
    }
    let tasks: Vec<Arc<AgentTask>> = groups
        .iter()
        .filter(|(ns, _)| shared.namespaces.contains(ns))
        .flat_map(|(ns, pool)| shared.view.pool_tasks(ns, pool))
        .collect();
    if every && !written.is_empty() {
        let live: HashSet<&str> = tasks
            .iter()
            .filter_map(|t| t.metadata.uid.as_deref())
            .collect();
        written.retain(|uid, _| live.contains(uid.as_str()));
    }
    let changes = pool_not_found(&tasks, &pools, jiff::Timestamp::now());
    if changes.is_empty() {
        return Vec::new();
    }
    // One look-up table, not a search per change (10,000 orphans).
    let at: HashMap<(&str, &str), &Arc<AgentTask>> = tasks
        .iter()
        .filter_map(|t| {
            let m = &t.metadata;
            Some(((m.namespace.as_deref()?, m.name.as_deref()?), t))
        })
        .collect();
    changes
        .into_iter()
        .filter_map(|change| {
            let task = at.get(&(change.namespace.as_str(), change.task.as_str()))?;
            let uid = task.uid().unwrap_or_default();
            if written.get(&uid) == Some(&change.condition.status) {
                return None;
            }
            Some((Arc::clone(task), change))
        })
        .collect()
}

async fn write(shared: &Context, task: &AgentTask, change: &PoolNotFoundChange) -> bool {
    let api: Api<AgentTask> = Api::namespaced(shared.client.clone(), &change.namespace);
    // The cached copy has no output (see `strip_task`): the API's is kept.
    let mut next = match crate::cluster::with_kept_output(&api, task).await {
        Ok(Some(next)) => next,
        Ok(None) => return false,
        Err(e) => {
            shared.api_failed(&e);
            return false;
        }
    };
    let mut status = next.status.take().unwrap_or_default();
    status.conditions.retain(|c| c.type_ != POOL_NOT_FOUND);
    status.conditions.push(change.condition.clone());
    next.status = Some(status);
    // With the resourceVersion read: a 409 means an agent or the
    // reconciler wrote first; the next look decides again.
    match api
        .replace_status(&change.task, &PostParams::default(), &next)
        .await
    {
        Ok(_) => shared.api_ok(),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return false,
        Err(e) => {
            shared.api_failed(&e);
            tracing::debug!(task = %change.task, error = %e, "cannot write PoolNotFound");
            return false;
        }
    }
    if change.condition.status == "True" {
        tracing::warn!(task = %change.task, namespace = %change.namespace, pool = %task.spec.pool, "task names no existing pool");
        super::reconcile::publish_event(
            shared,
            task.object_ref(&()),
            EventType::Warning,
            POOL_NOT_FOUND,
            "Validate",
            change.condition.message.clone(),
        )
        .await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task(name: &str, pool: &str, status: serde_json::Value) -> Arc<AgentTask> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": name, "namespace": "ns", "uid": name},
                "spec": {"pool": pool, "command": ["true"]},
                "status": status,
            }))
            .expect("task"),
        )
    }

    fn flagged(status: &str) -> serde_json::Value {
        json!({"phase": "Pending", "conditions": [{
            "type": "PoolNotFound", "status": status, "reason": "x", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    }

    #[test]
    fn tasks_of_missing_pools_are_flagged_once_and_cleared_when_the_pool_exists() {
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().expect("ts");
        let pools: HashSet<(String, String)> = [("ns".to_owned(), "real".to_owned())].into();
        let tasks = vec![
            task("new-missing", "nosuch", json!({"phase": "Pending"})),
            task("known-missing", "nosuch", flagged("True")),
            task("found-again", "real", flagged("True")),
            task("fine", "real", json!({"phase": "Pending"})),
            task("fine-cleared", "real", flagged("False")),
            task("done-missing", "nosuch", json!({"phase": "Succeeded"})),
            task("no-status", "gone", serde_json::Value::Null),
        ];
        let changes: Vec<(String, String, String)> = pool_not_found(&tasks, &pools, now)
            .into_iter()
            .map(|c| (c.task, c.condition.status, c.condition.reason))
            .collect();
        let want = [
            ("new-missing", "True", "PoolNotFound"),
            ("found-again", "False", "PoolFound"),
            ("no-status", "True", "PoolNotFound"),
        ]
        .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()));
        assert_eq!(changes, want);
        let message = pool_not_found(&tasks[..1], &pools, now)[0]
            .condition
            .message
            .clone();
        assert_eq!(
            message,
            "AgentPool \"nosuch\" does not exist in namespace \"ns\"; the task waits until it does"
        );
    }
}
