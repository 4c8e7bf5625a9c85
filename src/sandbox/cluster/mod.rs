//! The sandbox's control plane: what kube-controller-manager (Deployment,
//! ReplicaSet, DaemonSet, StatefulSet, Job and TTL-after-finished controllers) and kube-scheduler do,
//! as in-process tasks that call the [`Api`] directly, with no HTTP between.
//!
//! Every controller is level-triggered: a pass reads the whole store, decides
//! with pure functions (the modules' `plan`/`status` functions, unit-tested
//! on their own) and writes only the difference. A pass runs when a relevant
//! resource changes, after a missed (lagged) broadcast, and once a second as
//! a safety net and to let time-based rules fire (minReadySeconds,
//! activeDeadlineSeconds, progress deadlines, TTLs). A write refused with 409
//! Conflict is not retried in place: the next pass (due at once) re-reads.
//!
//! The store is read directly rather than through informer caches, so the
//! controllers need none of client-go's "expectations": what a pass created
//! is in the store when the next pass looks.

pub(crate) mod clusterroles;
mod daemonset;
mod deployment;
pub(crate) mod disruption;
pub(crate) mod events;
mod job;
mod meta;
mod pods;
mod replicaset;
pub(crate) mod rootca;
mod scheduler;
mod serviceaccounts;
mod statefulset;
#[cfg(test)]
mod tests;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::api::Api;
use super::store::Change;

/// How often every controller runs a full pass even when nothing changed.
const RESYNC: Duration = Duration::from_secs(1);

/// How soon a pass runs again after one of its writes hit a conflict.
const RETRY: Duration = Duration::from_millis(50);

/// Starts the Deployment, ReplicaSet and Job controllers and the scheduler;
/// the task ends when `cancel` fires.
pub fn start(api: Arc<Api>, cancel: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let tasks = [
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                deployment::DeploymentController,
            )),
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                replicaset::ReplicaSetController,
            )),
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                job::JobController::default(),
            )),
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                daemonset::DaemonSetController,
            )),
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                statefulset::StatefulSetController,
            )),
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                scheduler::Scheduler::default(),
            )),
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                disruption::DisruptionController,
            )),
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                serviceaccounts::ServiceAccountController,
            )),
            tokio::spawn(run(api.clone(), cancel.clone(), rootca::RootCaPublisher)),
            tokio::spawn(run(
                api.clone(),
                cancel.clone(),
                clusterroles::ClusterRoleAggregator,
            )),
        ];
        for task in tasks {
            let _ = task.await;
        }
    })
}

/// What a pass reports back to its loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// A write conflicted (or failed in a way worth retrying soon).
    pub retry: bool,
}

/// One control loop.
pub(crate) trait Controller: Send + 'static {
    /// For logs.
    const NAME: &'static str;

    /// Store resource keys (`pods`, `deployments.apps` …) whose changes wake it.
    fn watches(&self) -> &'static [&'static str];

    /// Sees every change of a watched resource before the pass it triggers.
    fn observe(&mut self, _change: &Change) {}

    /// Whether this change of a watched resource calls for a pass at once
    /// (default: every one). Others wait for the next resync, so thousands
    /// of unrelated pods do not make each write cost a full pass.
    fn wants(&self, _change: &Change) -> bool {
        true
    }

    /// One level-triggered pass over every object it owns. `now` is Unix
    /// seconds.
    fn reconcile(&mut self, api: &Api, now: i64) -> Pass;
}

async fn run<C: Controller>(api: Arc<Api>, cancel: CancellationToken, mut ctrl: C) {
    let mut rx = api.store.subscribe();
    let mut resync_at = Instant::now() + RESYNC;
    let mut due = true;
    let mut retry_at: Option<Instant> = None;
    loop {
        if due {
            due = false;
            let now = meta::now_secs();
            let started = Instant::now();
            // A pass reads the whole store: at 10,000 pods it takes a good
            // part of a second of one core. Run on the runtime's own
            // threads it held them that long, and every API request and
            // watch of the sandbox waited for it (the API answered in tens
            // of milliseconds, then in half a second). On a thread of the
            // blocking pool, the passes share the cores with the requests.
            let (back, pass) = {
                let api = api.clone();
                let passed = tokio::task::spawn_blocking(move || {
                    // A bug in one pass must not stop the control plane for good.
                    let pass =
                        std::panic::catch_unwind(AssertUnwindSafe(|| ctrl.reconcile(&api, now)));
                    (ctrl, pass)
                });
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return,
                    passed = passed => match passed {
                        Ok(passed) => passed,
                        // The runtime is going away.
                        Err(_) => return,
                    },
                }
            };
            ctrl = back;
            resync_at = Instant::now() + resync_after(started.elapsed());
            retry_at = match pass {
                Ok(p) if p.retry => Some(Instant::now() + RETRY),
                Ok(_) => None,
                Err(_) => {
                    tracing::error!(controller = C::NAME, "sandbox controller pass panicked");
                    None
                }
            };
        }
        let retry_sleep = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now));
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            r = rx.recv() => match r {
                Ok(change) => due |= wake(&mut ctrl, &change),
                Err(RecvError::Lagged(_)) => due = true,
                Err(RecvError::Closed) => return,
            },
            () = tokio::time::sleep_until(resync_at) => due = true,
            () = retry_sleep, if retry_at.is_some() => due = true,
        }
        // Coalesce a burst of changes (often our own writes) into one pass.
        loop {
            match rx.try_recv() {
                Ok(change) => due |= wake(&mut ctrl, &change),
                Err(TryRecvError::Lagged(_)) => due = true,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
    }
}

/// When to look again after a pass that took `took`, with no change
/// asking sooner: [`RESYNC`], or fifty times the pass when that is longer,
/// so that a controller's resyncs take at most a fiftieth of a core. At
/// 10,000 pods and 1,000 Deployments the Deployment controller's pass took
/// about a fifth of a second: resynced every second, it and the others
/// held half of a core of a two-core machine with nothing changing; at
/// twenty times the pass, the ReplicaSet, Job, PDB controllers and the
/// scheduler still held a fifth of a core between them (`perf`, the scale
/// bench's sandbox, quiet), which the clients measured beside it went
/// without. (kube-controller-manager's controllers do not resync on a
/// timer at all: they are woken by changes, as these are, and requeue
/// what waits on the clock.)
fn resync_after(took: Duration) -> Duration {
    RESYNC.max(took * 50)
}

fn wake<C: Controller>(ctrl: &mut C, change: &Change) -> bool {
    if ctrl.watches().contains(&change.resource.as_str()) {
        ctrl.observe(change);
        ctrl.wants(change)
    } else {
        false
    }
}

/// A pod change that concerns the controller of `kind` (the pod is, or
/// was, controlled by one); other resources' changes always do.
pub(crate) fn pod_of_kind(change: &Change, kind: &str) -> bool {
    if change.resource != "pods" {
        return true;
    }
    let owned = |o: &serde_json::Value| meta::controller_of(o).is_some_and(|r| r["kind"] == kind);
    owned(&change.object) || change.previous.as_deref().is_some_and(owned)
}
