//! One pool reconcile: read the stores, ask the planners, write the
//! difference, record Events. Kept thin; the deciding is in `crate::plan`.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::pod::CachedPod;
use super::{ControllerError, Result, Shared, resync};
use crate::crd::validate::{summary, validate_pool};
use crate::crd::{
    AgentPool, AgentPoolStatus, AgentTask, AgentTaskStatus, ExecutionMode, HealthCounts,
    HoldStatus, LABEL_COMPONENT, LABEL_POOL, LABEL_TASK, TaskPhase, k8s_time,
};
use crate::health::Freshness;
use crate::plan::autoscale::{AutoscaleInput, HoldInput, Recommendations, ScaleDirection, decide};
use crate::plan::freeze;
use crate::plan::manifests::{self, COMPONENT_AGENT, COMPONENT_TASK, label_value};
use crate::plan::pool::{
    AgentPod, ClaimOutlook, PoolConditionFacts, Recovery, UNCLAIMED, condition, count_agents,
    count_tasks, deletion_costs, offline_recheck, recovery, requeued_condition, same_conditions,
    unclaimed, valid_pool_conditions,
};

/// An applied object is sent again after this long even when unchanged, so
/// drift (someone deleted the Service) is repaired without a watch on it.
const REAPPLY_AFTER: Duration = Duration::from_secs(600);
/// How long a replica count we wrote wins over the Deployment store's.
const STORE_LAG: Duration = Duration::from_secs(5);
/// How long after a burst's first scaling decision its follow-up counts as
/// part of the same decision (see `gate`: the follow-up comes once the pool
/// has been quiet for `DEBOUNCE`).
const BURST: Duration = Duration::from_secs(2);

pub(super) async fn reconcile(pool: Arc<AgentPool>, shared: Arc<Shared>) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile_pool(&pool, &shared).await;
    shared
        .metrics
        .reconciled(started.elapsed().as_secs_f64(), result.is_err());
    match &result {
        Ok(_) => {
            *shared
                .last_reconcile
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Timestamp::now());
        }
        Err(e) => {
            if let Some(k) = e.kube_error() {
                shared.api_failed(k);
            }
        }
    }
    result
}

pub(super) fn error_policy(
    pool: Arc<AgentPool>,
    error: &ControllerError,
    shared: Arc<Shared>,
) -> Action {
    // An API that does not answer is reported once, by `reachability`.
    if matches!(error.kube_error(), Some(e) if !matches!(e, kube::Error::Api(_))) {
        tracing::debug!(pool = %pool.name_any(), namespace = ?pool.namespace(), %error, "reconcile failed; retrying");
    } else {
        tracing::warn!(pool = %pool.name_any(), namespace = ?pool.namespace(), %error, "reconcile failed; retrying");
    }
    let conflict = matches!(error.kube_error(), Some(kube::Error::Api(s)) if s.code == 409);
    if conflict {
        Action::requeue(Duration::from_millis(200))
    } else {
        Action::requeue(
            Duration::from_secs(5).min(shared.config.resync_interval().max(Duration::from_secs(1))),
        )
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

async fn reconcile_pool(pool: &AgentPool, shared: &Shared) -> Result<Action> {
    if !shared.leader.is_leader() {
        return Ok(Action::await_change());
    }
    if !shared.synced.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(Action::requeue(Duration::from_millis(300)));
    }
    // A store whose watch is failing or listing again may be missing what
    // happened since: nothing is decided on it (a task's agent pod looks
    // gone when the pod watch stopped, not the pod).
    if !shared.view.watches.all_watching() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let name = pool.name_any();
    let ns = pool
        .namespace()
        .ok_or_else(|| ControllerError::NoNamespace(name.clone()))?;
    if !shared.namespaces.contains(&ns) {
        return Ok(Action::await_change());
    }
    if pool.metadata.deletion_timestamp.is_some() {
        // Owned objects go with the pool through garbage collection.
        shared.metrics.remove_pool(&ns, &name);
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let errors = validate_pool(pool);
    if !errors.is_empty() {
        return invalid(pool, shared, &summary(&errors), now).await;
    }
    // Shared with the store: a task is copied only when a write replaces it.
    let mut tasks: Vec<Arc<AgentTask>> = shared
        .view
        .tasks
        .state()
        .into_iter()
        .filter(|t| t.namespace().as_deref() == Some(ns.as_str()) && t.spec.pool == name)
        .collect();
    observe_task_metrics(shared, &tasks);
    let pool_label = label_value(&name);
    let pool_pods: Vec<Arc<CachedPod>> = shared
        .view
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.labels().get(LABEL_POOL) == Some(&pool_label)
        })
        .collect();
    let mut ctx = PoolCtx {
        pool,
        shared,
        ns: ns.clone(),
        name: name.clone(),
        now,
        retry_soon: false,
        notes: Vec::new(),
    };
    check_token_secret(&mut ctx, &pool_pods).await;
    match pool.spec.execution_mode {
        ExecutionMode::Deployment => deployment_mode(&mut ctx, &mut tasks, &pool_pods).await,
        ExecutionMode::Job => job_mode(&mut ctx, &mut tasks, &pool_pods).await,
    }
}

struct PoolCtx<'a> {
    pool: &'a AgentPool,
    shared: &'a Shared,
    ns: String,
    name: String,
    now: Timestamp,
    /// A write lost a race (409): look again shortly.
    retry_soon: bool,
    /// Problems worth a Degraded condition.
    notes: Vec<String>,
}

impl PoolCtx<'_> {
    async fn event(&self, type_: EventType, reason: &str, action: &str, note: String) {
        publish(
            self.shared,
            self.pool.object_ref(&()),
            type_,
            reason,
            action,
            note,
        )
        .await;
    }

    fn tasks_api(&self) -> Api<AgentTask> {
        Api::namespaced(self.shared.client.clone(), &self.ns)
    }

    /// Writes `status` on `task` with the resourceVersion read; a 409 means
    /// an agent wrote first, and the next reconcile sees what it wrote.
    async fn set_task_status(
        &mut self,
        task: &mut Arc<AgentTask>,
        status: AgentTaskStatus,
    ) -> Result<bool> {
        let mut next = AgentTask::clone(task);
        let mut status = status;
        status.message = status.message.map(|m| crate::text::sanitize_line(&m));
        for c in &mut status.conditions {
            c.message = crate::text::sanitize_line(&c.message);
        }
        next.status = Some(status);
        match self
            .tasks_api()
            .replace_status(&task.name_any(), &PostParams::default(), &next)
            .await
        {
            Ok(updated) => {
                self.shared.api_ok();
                *task = Arc::new(updated);
                Ok(true)
            }
            Err(e) if is_conflict(&e) || matches!(&e, kube::Error::Api(s) if s.code == 404) => {
                self.retry_soon = true;
                Ok(false)
            }
            Err(source) => Err(ControllerError::TaskStatusFailed {
                task: task.name_any(),
                source,
            }),
        }
    }

    async fn task_event(&self, task: &AgentTask, type_: EventType, reason: &str, note: String) {
        publish(
            self.shared,
            task.object_ref(&()),
            type_,
            reason,
            "Recover",
            note,
        )
        .await;
    }
}

/// Records an Event as the controller (sanitised note); failures are only
/// logged, an Event is never worth failing a reconcile for.
pub(super) async fn publish_event(
    shared: &Shared,
    reference: k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    publish(shared, reference, type_, reason, action, note).await;
}

async fn publish(
    shared: &Shared,
    reference: k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.to_owned(),
        // Notes quote pod reasons, names and messages others wrote.
        note: Some(crate::text::sanitize_line(&note)),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(e) = shared.recorder.publish(&ev, &reference).await {
        tracing::debug!(error = %e, reason, "cannot record event");
    }
}

fn observe_task_metrics(shared: &Shared, tasks: &[Arc<AgentTask>]) {
    for task in tasks {
        let (Some(uid), Some(created), Some(status)) = (
            task.metadata.uid.as_deref(),
            task.metadata.creation_timestamp.as_ref(),
            task.status.as_ref(),
        ) else {
            continue;
        };
        let start = status.claimed_at.as_ref().or(status.started_at.as_ref());
        if let Some(start) = start
            && start.0 > shared.started
        {
            shared
                .metrics
                .task_started(uid, start.0.duration_since(created.0).as_secs_f64());
        }
        if let (Some(start), Some(end)) = (start, status.finished_at.as_ref())
            && status.phase.is_finished()
            && end.0 > shared.started
        {
            shared
                .metrics
                .task_finished(uid, end.0.duration_since(start.0).as_secs_f64());
        }
    }
}

/// The Degraded note of a pool whose `spec.tokenSecretRef` names a Secret
/// that does not exist (its pods wait in ContainerCreating for the volume).
pub(crate) fn token_secret_missing_note(secret: &str, namespace: &str) -> String {
    format!(
        "Secret {secret:?} named in spec.tokenSecretRef does not exist in namespace \
         {namespace:?}; the pool's pods cannot start until it does"
    )
}

/// Whether the kubelet said of one of `pods` that it cannot mount `secret`
/// because it does not exist: a `FailedMount` Event whose message names
/// `secret "<name>" not found`, as kubelets word it. Pure.
pub(crate) fn mount_says_secret_missing(
    events: &[k8s_openapi::api::core::v1::Event],
    pods: &[(&str, Option<&str>)],
    secret: &str,
) -> bool {
    let words = format!("secret \"{secret}\" not found");
    events.iter().any(|e| {
        let about = &e.involved_object;
        e.reason.as_deref() == Some("FailedMount")
            && about.kind.as_deref() == Some("Pod")
            && pods.iter().any(|(name, uid)| {
                about.name.as_deref() == Some(*name)
                    && (uid.is_none() || about.uid.is_none() || about.uid.as_deref() == *uid)
            })
            && e.message.as_deref().is_some_and(|m| m.contains(&words))
    })
}

/// Says so (Degraded note, and a Warning Event when it starts) when the
/// pool's token Secret is missing. The Secret itself is never read (the
/// controller may not read Secrets): the pods of the pool that wait to
/// start and the kubelet's `FailedMount` Events about them tell it. Asked
/// only while some pod of the pool waits to start, so a steady pool costs
/// no request.
async fn check_token_secret(ctx: &mut PoolCtx<'_>, pool_pods: &[Arc<CachedPod>]) {
    let Some(secret) = ctx
        .pool
        .spec
        .token_secret_ref
        .as_ref()
        .map(|r| r.name.clone())
    else {
        return;
    };
    let note = token_secret_missing_note(&secret, &ctx.ns);
    let said_before = ctx.pool.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.message.contains(&note))
    });
    let waiting: Vec<(String, Option<String>)> = pool_pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or("Pending")
                    == "Pending"
        })
        .map(|p| (p.name_any(), p.metadata.uid.clone()))
        .collect();
    if waiting.is_empty() {
        return;
    }
    let api: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(ctx.shared.client.clone(), &ctx.ns);
    let lp = kube::api::ListParams::default().fields("involvedObject.kind=Pod,reason=FailedMount");
    match api.list(&lp).await {
        Ok(list) => {
            ctx.shared.api_ok();
            let pods: Vec<(&str, Option<&str>)> = waiting
                .iter()
                .map(|(n, u)| (n.as_str(), u.as_deref()))
                .collect();
            if !mount_says_secret_missing(&list.items, &pods, &secret) {
                return;
            }
            if !said_before {
                tracing::warn!(pool = %ctx.name, namespace = %ctx.ns, %secret, "token Secret missing");
                ctx.event(
                    EventType::Warning,
                    "TokenSecretMissing",
                    "Validate",
                    note.clone(),
                )
                .await;
            }
            ctx.notes.push(note);
        }
        // Forbidden or a fault: say nothing rather than something wrong.
        Err(e) => {
            tracing::debug!(pool = %ctx.name, %secret, error = %e, "cannot list the pods' mount Events");
            if said_before {
                ctx.notes.push(note);
            }
        }
    }
}

/// Invalid pools get a condition and an Event (once per message) and are
/// otherwise left alone: nothing is applied from a spec we cannot trust.
async fn invalid(
    pool: &AgentPool,
    shared: &Shared,
    message: &str,
    now: Timestamp,
) -> Result<Action> {
    let old = pool.status.clone().unwrap_or_default();
    let generation = pool.metadata.generation;
    let previously = old
        .conditions
        .iter()
        .find(|c| c.type_ == "Invalid")
        .map(|c| (c.status.clone(), c.message.clone()));
    let mut status = old.clone();
    status.conditions = vec![
        condition(
            &old.conditions,
            "Ready",
            false,
            "Invalid",
            "the spec is invalid",
            generation,
            now,
        ),
        condition(
            &old.conditions,
            "Invalid",
            true,
            "SpecInvalid",
            message,
            generation,
            now,
        ),
    ];
    status.observed_generation = generation;
    if previously != Some(("True".into(), message.to_owned())) {
        tracing::warn!(pool = %pool.name_any(), %message, "pool is invalid");
        publish(
            shared,
            pool.object_ref(&()),
            EventType::Warning,
            "InvalidSpec",
            "Validate",
            message.to_owned(),
        )
        .await;
    }
    write_pool_status(pool, shared, &old, status).await?;
    Ok(Action::await_change())
}

fn status_equal(a: &AgentPoolStatus, b: &AgentPoolStatus) -> bool {
    let strip = |s: &AgentPoolStatus| AgentPoolStatus {
        conditions: Vec::new(),
        ..s.clone()
    };
    strip(a) == strip(b) && same_conditions(&a.conditions, &b.conditions)
}

async fn write_pool_status(
    pool: &AgentPool,
    shared: &Shared,
    old: &AgentPoolStatus,
    status: AgentPoolStatus,
) -> Result<()> {
    if pool.status.is_some() && status_equal(old, &status) {
        return Ok(());
    }
    let api: Api<AgentPool> = Api::namespaced(
        shared.client.clone(),
        pool.namespace().as_deref().unwrap_or_default(),
    );
    match api
        .patch_status(
            &pool.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status_patch(old, &status)),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if matches!(&e, kube::Error::Api(s) if s.code == 404) => Ok(()),
        Err(source) => Err(ControllerError::PoolStatusFailed {
            pool: pool.name_any(),
            source,
        }),
    }
}

/// The merge patch turning the status `old` into `new`. A field `new`
/// leaves out (a freeze's `frozenReason` once it ends, a `scaleReason`,
/// the last condition) is written as `null`: a merge patch keeps whatever
/// it does not name, so the stale value would stay in `kubectl get -o yaml`.
fn status_patch(old: &AgentPoolStatus, new: &AgentPoolStatus) -> serde_json::Value {
    let mut patch = serde_json::to_value(new).expect("a pool status serialises");
    if let (Ok(serde_json::Value::Object(before)), serde_json::Value::Object(after)) =
        (serde_json::to_value(old), &mut patch)
    {
        for key in before.keys() {
            after.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    json!({ "status": patch })
}

fn default_tz(shared: &Shared) -> TimeZone {
    TimeZone::get(&shared.config.default_timezone).unwrap_or(TimeZone::UTC)
}

fn health_counts(
    shared: &Shared,
    ns: &str,
    pods: &[Arc<CachedPod>],
    now: Timestamp,
) -> (HealthCounts, BTreeSet<String>) {
    let thresholds = super::prober::thresholds(&shared.config.health_probe);
    let mut counts = HealthCounts::default();
    let mut offline = BTreeSet::new();
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let name = pod.name_any();
        let Some(sample) = shared.view.health.get(ns, &name) else {
            continue;
        };
        match sample.freshness(now, &thresholds) {
            Freshness::Fresh => counts.fresh += 1,
            Freshness::Stale => counts.stale += 1,
            Freshness::Offline => {
                counts.offline += 1;
                offline.insert(name);
            }
        }
    }
    (counts, offline)
}

/// Applies every object of the pool whose content changed since the last
/// apply (server-side apply, one field manager, forced).
async fn apply_objects(
    ctx: &mut PoolCtx<'_>,
    objects: Vec<serde_json::Value>,
    deployment_exists: bool,
) -> Result<()> {
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        let obj_name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let key = format!("{kind}/{}/{obj_name}", ctx.ns);
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            object.to_string().hash(&mut h);
            h.finish()
        };
        let fresh_in_cache = ctx
            .shared
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .is_some_and(|(h, at)| *h == hash && at.elapsed() < REAPPLY_AFTER);
        let must_exist = kind == "Deployment" && !deployment_exists;
        if fresh_in_cache && !must_exist {
            continue;
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), api_version.clone()),
        };
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, &kind));
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.shared.client.clone(), &ctx.ns, &ar);
        match api
            .patch(
                &obj_name,
                &PatchParams::apply(super::FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
        {
            Ok(_) => {
                ctx.shared.api_ok();
                ctx.shared
                    .applied
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key, (hash, Instant::now()));
            }
            Err(kube::Error::Api(s)) if s.code == 404 && kind == "ServiceMonitor" => {
                ctx.notes.push(
                    "spec.serviceMonitor is set but the ServiceMonitor CRD (prometheus-operator) is not installed".into(),
                );
            }
            Err(source) => {
                return Err(ControllerError::ApplyFailed {
                    pool: ctx.name.clone(),
                    kind,
                    name: obj_name,
                    source,
                });
            }
        }
    }
    Ok(())
}

fn pool_objects(ctx: &PoolCtx<'_>, replicas: i32) -> Result<Vec<serde_json::Value>> {
    manifests::pool_objects(ctx.pool, replicas).map_err(|source| ControllerError::ManifestFailed {
        pool: ctx.name.clone(),
        source,
    })
}

fn clamp_u32(v: i32) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(0)
}

fn to_i32(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

async fn deployment_mode(
    ctx: &mut PoolCtx<'_>,
    tasks: &mut [Arc<AgentTask>],
    pool_pods: &[Arc<CachedPod>],
) -> Result<Action> {
    let shared = ctx.shared;
    let pool = ctx.pool;
    let now = ctx.now;
    let agent_pods: Vec<Arc<CachedPod>> = pool_pods
        .iter()
        .filter(|p| p.labels().get(LABEL_COMPONENT).map(String::as_str) == Some(COMPONENT_AGENT))
        .cloned()
        .collect();
    let (health, offline) = health_counts(shared, &ctx.ns, &agent_pods, now);

    // Recovery first, so the autoscaler counts requeued tasks as pending.
    // A terminating agent still finishes its task (onStop: drain), so only
    // pods gone from the store or ended count as gone.
    let present: BTreeSet<String> = agent_pods
        .iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .map(|p| p.name_any())
        .collect();
    let max_attempts = i32::try_from(shared.config.task_recovery.max_attempts)
        .unwrap_or(i32::MAX)
        .min(pool.spec.task_defaults.max_attempts.max(1));
    let offline_after = shared.config.health_probe.offline_after();
    let actions = recovery(
        tasks.iter().map(AsRef::as_ref),
        &present,
        &offline,
        now,
        offline_after,
    );
    let actions = at_tasks(tasks, actions, |a| match a {
        Recovery::Requeue { task, .. } | Recovery::Cancelled { task, .. } => task,
    });
    for (i, action) in actions {
        recover(ctx, &mut tasks[i], action, max_attempts).await?;
    }
    // An offline agent whose task still heartbeats is looked at again once
    // the heartbeat is old enough to tell.
    let offline_check = offline_recheck(
        tasks.iter().map(AsRef::as_ref),
        &offline,
        now,
        offline_after,
    );

    let counts = count_tasks(tasks.iter().map(AsRef::as_ref));
    let pods: Vec<AgentPod> = agent_pods.iter().map(|p| AgentPod::of(p)).collect();
    let agents = count_agents(&pods, &counts.busy_agents);

    let deployment_name = pool.deployment_name();
    let deployment = shared.view.deployments.state().into_iter().find(|d| {
        d.namespace().as_deref() == Some(ctx.ns.as_str()) && d.name_any() == deployment_name
    });
    let stored = deployment
        .as_ref()
        .and_then(|d| d.spec.as_ref()?.replicas)
        .unwrap_or(pool.spec.min_replicas);
    // The Deployment store may not show our last scale yet: trust what we
    // wrote for a short while so one burst is one decision.
    let key = format!("{}/{}", ctx.ns, ctx.name);
    let remembered = shared
        .scaled
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
        .copied()
        .filter(|(_, at, _)| at.elapsed() < STORE_LAG);
    let current = match remembered {
        Some((replicas, _, _)) if deployment.is_some() => replicas,
        _ => stored,
    };
    let ready = deployment
        .as_ref()
        .and_then(|d| d.status.as_ref()?.ready_replicas)
        .unwrap_or(0);

    let windows =
        freeze::parse_all(&pool.spec.freeze_schedules, &default_tz(shared)).unwrap_or_default();
    let frozen = freeze::active_freeze(&windows, now);
    let old = pool.status.clone().unwrap_or_default();
    let last_scale = old
        .last_scale_time
        .as_ref()
        .map(|t| t.0)
        .max(remembered.map(|(_, _, t)| t));
    let window = Duration::from_secs(
        u64::try_from(pool.spec.scale_down_stabilization_seconds.max(0)).unwrap_or(0),
    );
    // A leading controller decides at least once a resync; a history older
    // than a few resyncs was not recorded by a leader and is seeded again.
    let stale_after = shared.config.resync_interval().max(Duration::from_secs(1)) * 3;
    let history_key = key.clone();
    let recommendations = {
        let histories = shared
            .recommendations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Recommendations::fresh_or_seeded(
            histories.get(&history_key).cloned(),
            clamp_u32(current),
            now,
            stale_after,
        )
    };
    let input = AutoscaleInput {
        pending_tasks: counts.pending,
        running_tasks: counts.running,
        busy_agents: agents.busy,
        idle_agents: agents.idle,
        starting_agents: agents.starting,
        current_replicas: clamp_u32(current),
        concurrency: clamp_u32(pool.spec.concurrency),
        min_replicas: clamp_u32(pool.spec.min_replicas),
        max_replicas: clamp_u32(pool.spec.max_replicas),
        scale_up_step: pool.spec.scale_up_step.map(clamp_u32),
        cooldown_up: Duration::from_secs(
            u64::try_from(pool.spec.cooldown_seconds.up.max(0)).unwrap_or(0),
        ),
        cooldown_down: Duration::from_secs(
            u64::try_from(pool.spec.cooldown_seconds.down.max(0)).unwrap_or(0),
        ),
        scale_down_window: window,
        recommendations,
        frozen: frozen.as_ref().map(|f| f.reason.clone()),
        draining: pool.spec.drain,
        hold: pool.spec.hold.as_ref().map(|h| HoldInput {
            replicas: clamp_u32(h.replicas),
            until: h.until.as_ref().map(|t| t.0),
            set_by: h.set_by.clone(),
        }),
        last_scale_time: last_scale,
        now,
    };
    // A burst's follow-up finishes the burst's scale-up: the up cooldown
    // counts from before the burst's first decision, so 100 tasks are one
    // or two decisions reaching the target, not a partial one that sticks.
    let burst = shared
        .burst_scaled
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
        .copied()
        .filter(|(at, _)| at.elapsed() < BURST);
    let decision = match burst {
        Some((_, before_burst)) => {
            let bridged = decide(&AutoscaleInput {
                last_scale_time: before_burst,
                ..input.clone()
            });
            if bridged.direction == ScaleDirection::Up {
                bridged
            } else {
                decide(&input)
            }
        }
        None => decide(&input),
    };
    record_recommendation(
        shared,
        history_key,
        input.recommendations,
        now,
        decision.need,
        window,
        stale_after,
    );
    let desired = to_i32(decision.desired);

    if desired < current {
        // Busy agents must outlive idle ones when the ReplicaSet picks.
        for (pod, cost) in deletion_costs(&pods, &counts.busy_agents) {
            let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ctx.ns);
            let patch = json!({"metadata": {"annotations": {crate::crd::ANNOTATION_POD_DELETION_COST: cost}}});
            match api
                .patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => return Err(ControllerError::DeletionCostFailed { pod, source }),
            }
        }
    }

    let objects = pool_objects(ctx, desired)?;
    apply_objects(ctx, objects, deployment.is_some()).await?;

    let mut last_scale_time = old.last_scale_time.clone();
    if deployment.is_some() && desired != current {
        let (dir, reason) = if desired > current {
            ("up", "ScaledUp")
        } else {
            ("down", "ScaledDown")
        };
        last_scale_time = Some(k8s_time(now));
        if burst.is_none() {
            shared
                .burst_scaled
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key.clone(), (Instant::now(), last_scale));
        }
        shared
            .scaled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), (desired, Instant::now(), now));
        shared.metrics.scaled(&ctx.ns, &ctx.name, dir);
        tracing::info!(pool = %ctx.name, namespace = %ctx.ns, from = current, to = desired, reason = %decision.reason, "scaled");
        ctx.event(EventType::Normal, reason, "Scale", decision.reason.clone())
            .await;
    }

    let outlook = ClaimOutlook {
        ready_agents: agents.ready,
        idle_agents: agents.idle,
        replicas: clamp_u32(desired),
        max_replicas: clamp_u32(pool.spec.max_replicas),
        frozen: frozen.as_ref().map(|f| f.reason.clone()),
        draining: pool.spec.drain,
    };
    let unclaimed_check = mark_unclaimed(ctx, tasks, &outlook).await?;

    let generation = pool.metadata.generation;
    let frozen_reason = frozen.as_ref().map(|f| f.reason.clone());
    if frozen.is_some() && !old.frozen {
        ctx.event(
            EventType::Normal,
            "Frozen",
            "Freeze",
            frozen_reason.clone().unwrap_or_default(),
        )
        .await;
    }
    let degraded_msg = {
        let mut notes = ctx.notes.clone();
        if health.offline > 0 {
            notes.push(format!("{} agent(s) offline", health.offline));
        }
        notes.join("; ")
    };
    let hold = HoldStatus::of(pool.spec.hold.as_ref(), now);
    if let (Some(ended), None) = (&old.hold, &hold) {
        ctx.event(
            EventType::Normal,
            "HoldEnded",
            "Scale",
            format!("the replica hold ({}) ended", ended.summary),
        )
        .await;
    }
    let ready_ok = ready >= desired;
    let status = AgentPoolStatus {
        replicas: to_i32(agents.live),
        ready_replicas: ready,
        desired_replicas: desired,
        pending_tasks: to_i32(counts.pending),
        running_tasks: to_i32(counts.running),
        frozen: frozen.is_some(),
        frozen_reason: frozen_reason.clone(),
        draining: pool.spec.drain,
        hold,
        health,
        last_scale_time,
        scale_reason: Some(decision.reason.clone()),
        conditions: valid_pool_conditions(
            &old.conditions,
            &PoolConditionFacts {
                ready: (
                    ready_ok,
                    if ready_ok {
                        "AgentsReady"
                    } else {
                        "AgentsStarting"
                    },
                    format!("{ready} of {desired} agents ready"),
                ),
                frozen: frozen
                    .is_some()
                    .then(|| frozen_reason.as_deref().unwrap_or("")),
                draining: pool
                    .spec
                    .drain
                    .then_some("no new work is handed out; scaling to zero once idle"),
                degraded: &degraded_msg,
            },
            generation,
            now,
        ),
        observed_generation: generation,
    };
    shared.metrics.set_pool(
        &ctx.ns,
        &ctx.name,
        super::metrics::PoolGauges {
            desired: i64::from(desired),
            current: i64::from(agents.live),
            ready: i64::from(ready),
            pending: i64::from(counts.pending),
            running: i64::from(counts.running),
            busy: i64::from(agents.busy),
            idle: i64::from(agents.idle),
            fresh: i64::from(health.fresh),
            stale: i64::from(health.stale),
            offline: i64::from(health.offline),
        },
    );
    write_pool_status(pool, shared, &old, status).await?;

    let mut next = shared.config.resync_interval().max(Duration::from_secs(1));
    if let Some(left) = decision
        .cooldown_left
        .into_iter()
        .chain(decision.hold_left)
        .chain(decision.stabilization_left)
        .min()
    {
        next = next.min(left + Duration::from_millis(50));
    }
    if decision.direction != ScaleDirection::Hold || ctx.retry_soon {
        // Look again soon: the scale may need a second step (scaleUpStep).
        next = next.min(Duration::from_secs(1));
    }
    if ctx.retry_soon {
        next = next.min(Duration::from_millis(300));
    }
    if let Some(f) = &frozen
        && let Ok(left) = Duration::try_from(f.until.duration_since(now))
    {
        next = next.min(left + Duration::from_millis(50));
    }
    if let Some(left) = unclaimed_check {
        next = next.min(left + Duration::from_millis(50));
    }
    if let Some(left) = offline_check {
        next = next.min(left + Duration::from_millis(50));
    }
    Ok(Action::requeue(next))
}

/// Records `need` in the history a decision used, and drops the histories
/// no decision recorded within `stale_after` (they would be seeded again).
fn record_recommendation(
    shared: &Shared,
    key: String,
    mut history: Recommendations,
    now: Timestamp,
    need: u32,
    window: Duration,
    stale_after: Duration,
) {
    history.record(now, need, window);
    let mut histories = shared
        .recommendations
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    histories.retain(|_, h| {
        h.newest().is_some_and(|t| {
            now.duration_since(t)
                < jiff::SignedDuration::try_from(stale_after).unwrap_or(jiff::SignedDuration::MAX)
        })
    });
    histories.insert(key, history);
}

/// Writes the Unclaimed condition of tasks no agent took within the pool's
/// acquire timeout (with a Warning Event when it turns true), and clears it
/// on tasks claimed since. Returns when the next Pending task crosses the
/// timeout.
async fn mark_unclaimed(
    ctx: &mut PoolCtx<'_>,
    tasks: &mut [Arc<AgentTask>],
    outlook: &ClaimOutlook,
) -> Result<Option<Duration>> {
    let timeout = ctx.pool.spec.task_defaults.acquire_timeout_seconds;
    let Ok(timeout) = u64::try_from(timeout) else {
        return Ok(None);
    };
    if timeout == 0 {
        return Ok(None);
    }
    let plan = unclaimed(
        tasks.iter().map(AsRef::as_ref),
        outlook,
        Duration::from_secs(timeout),
        ctx.now,
    );
    for (i, (task_name, cond)) in at_tasks(tasks, plan.changes, |(name, _)| name) {
        let task = &mut tasks[i];
        let mut status = task.status.clone().unwrap_or_default();
        status.conditions.retain(|c| c.type_ != UNCLAIMED);
        let warn = cond.status == "True";
        let note = format!("task {task_name}: {}", cond.message);
        let message = cond.message.clone();
        status.conditions.push(cond);
        // A 409 means an agent claimed it meanwhile: the next look sees that.
        if ctx.set_task_status(task, status).await? && warn {
            tracing::warn!(task = %task_name, pool = %ctx.name, %message, "task unclaimed");
            publish(
                ctx.shared,
                task.object_ref(&()),
                EventType::Warning,
                UNCLAIMED,
                "Claim",
                message,
            )
            .await;
            ctx.event(EventType::Warning, UNCLAIMED, "Claim", note)
                .await;
        }
    }
    Ok(plan.next_check)
}

/// Each of `changes` with the position in `tasks` of the task it names
/// (by `name`); those naming no task are left out. One look-up table for
/// all: finding each in turn made a reconcile with thousands of changes
/// (10,000 tasks past their acquire timeout) quadratic.
fn at_tasks<C>(
    tasks: &[Arc<AgentTask>],
    changes: Vec<C>,
    name: impl Fn(&C) -> &String,
) -> Vec<(usize, C)> {
    if changes.is_empty() {
        return Vec::new();
    }
    let at: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((t.metadata.name.as_deref()?, i)))
        .collect();
    changes
        .into_iter()
        .filter_map(|c| Some((*at.get(name(&c).as_str())?, c)))
        .collect()
}

async fn recover(
    ctx: &mut PoolCtx<'_>,
    task: &mut Arc<AgentTask>,
    action: Recovery,
    max_attempts: i32,
) -> Result<()> {
    let (task_name, reason, cancel) = match action {
        Recovery::Requeue { task, reason } => (task, reason, false),
        Recovery::Cancelled { task, reason } => (task, reason, true),
    };
    let status = task.status.clone().unwrap_or_default();
    let next = if cancel {
        AgentTaskStatus {
            phase: TaskPhase::Cancelled,
            finished_at: Some(k8s_time(ctx.now)),
            message: Some(reason.clone()),
            ..status
        }
    } else {
        let mut next = status.requeued(&reason, max_attempts, ctx.now);
        if next.phase == TaskPhase::Pending {
            next.conditions.retain(|c| c.type_ != UNCLAIMED);
            next.conditions.push(requeued_condition(ctx.now));
        }
        next
    };
    let phase = next.phase;
    if ctx.set_task_status(task, next).await? {
        let (reason_code, type_) = match phase {
            TaskPhase::Pending => ("Requeued", EventType::Warning),
            TaskPhase::Cancelled => ("Cancelled", EventType::Normal),
            _ => ("GaveUp", EventType::Warning),
        };
        tracing::info!(task = %task_name, pool = %ctx.name, phase = phase.as_str(), %reason, "task recovered");
        let note = task
            .status
            .as_ref()
            .and_then(|s| s.message.clone())
            .unwrap_or(reason);
        ctx.task_event(task, type_, reason_code, note.clone()).await;
        ctx.event(
            type_,
            reason_code,
            "Recover",
            format!("task {task_name}: {note}"),
        )
        .await;
    }
    Ok(())
}

/// Job outcome: `Some(true)` succeeded, `Some(false)` failed, `None` not finished.
fn job_outcome(job: &Job) -> Option<bool> {
    let status = job.status.as_ref()?;
    let conds = status.conditions.as_deref().unwrap_or_default();
    let has = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
    if has("Complete") || status.succeeded.unwrap_or(0) > 0 {
        Some(true)
    } else if has("Failed") {
        Some(false)
    } else {
        None
    }
}

/// Why a task's pod has not started, from its container states.
fn waiting_reason(pod: Option<&CachedPod>) -> String {
    let Some(pod) = pod else {
        return "no pod yet".into();
    };
    let waiting = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let w = c.state.as_ref()?.waiting.as_ref()?;
            Some(format!(
                "{} {}",
                c.name,
                w.reason.clone().unwrap_or_default()
            ))
        })
        .collect::<Vec<_>>();
    if waiting.is_empty() {
        format!(
            "pod {} is {}",
            pod.name_any(),
            pod.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into())
        )
    } else {
        format!("pod {}: {}", pod.name_any(), waiting.join(", "))
    }
}

async fn job_mode(
    ctx: &mut PoolCtx<'_>,
    tasks: &mut [Arc<AgentTask>],
    pool_pods: &[Arc<CachedPod>],
) -> Result<Action> {
    let shared = ctx.shared;
    let pool = ctx.pool;
    let now = ctx.now;
    let jobs: HashMap<String, Arc<Job>> = shared
        .view
        .jobs
        .state()
        .into_iter()
        .filter(|j| j.namespace().as_deref() == Some(ctx.ns.as_str()))
        .map(|j| (j.name_any(), j))
        .collect();
    let task_pods: Vec<&Arc<CachedPod>> = pool_pods
        .iter()
        .filter(|p| p.labels().get(LABEL_COMPONENT).map(String::as_str) == Some(COMPONENT_TASK))
        .collect();
    let pod_of = |task: &AgentTask| -> Option<&CachedPod> {
        let label = label_value(&task.name_any());
        task_pods
            .iter()
            .filter(|p| p.labels().get(LABEL_TASK) == Some(&label))
            .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0))
            .map(|p| p.as_ref())
    };
    let jobs_api: Api<Job> = Api::namespaced(shared.client.clone(), &ctx.ns);
    let max_in_flight = pool
        .spec
        .max_in_flight
        .unwrap_or(pool.spec.max_replicas)
        .max(0);
    let mut in_flight = tasks
        .iter()
        .filter(|t| {
            !t.phase().is_finished()
                && (matches!(t.phase(), TaskPhase::Scheduled | TaskPhase::Running)
                    || manifests::job_name(t).is_ok_and(|j| jobs.contains_key(&j)))
        })
        .count();
    let max_attempts = i32::try_from(shared.config.task_recovery.max_attempts)
        .unwrap_or(i32::MAX)
        .min(pool.spec.task_defaults.max_attempts.max(1));
    let sched_timeout = pool.spec.task_defaults.scheduling_timeout_seconds.max(1);
    let mut soonest: Option<Duration> = None;
    // Oldest first, so the queue is fair.
    tasks.sort_by_key(|t| t.metadata.creation_timestamp.clone().map(|t| t.0));
    for task in tasks.iter_mut() {
        let phase = task.phase();
        if phase.is_finished() {
            continue;
        }
        let Ok(job_name) = manifests::job_name(task) else {
            continue;
        };
        let job = jobs.get(&job_name).cloned();
        let status = task.status.clone().unwrap_or_default();
        if task.spec.cancel {
            let worker_live = phase == TaskPhase::Running
                && pod_of(task).is_some_and(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                });
            if worker_live && job.is_some() {
                // The worker stops the runner (TERM, then KILL after the
                // grace) and reports Cancelled itself; deleting the Job now
                // would cut that short. Look again soon in case it dies.
                soonest =
                    Some(soonest.map_or(Duration::from_secs(1), |s| s.min(Duration::from_secs(1))));
                continue;
            }
            if job.is_some() {
                delete_job(&jobs_api, &job_name, task).await?;
            }
            let next = AgentTaskStatus {
                phase: TaskPhase::Cancelled,
                finished_at: Some(k8s_time(now)),
                message: Some("cancelled".into()),
                ..status
            };
            ctx.set_task_status(task, next).await?;
            continue;
        }
        match phase {
            TaskPhase::Pending => {
                if job.is_none() {
                    if in_flight >= usize::try_from(max_in_flight).unwrap_or(0) {
                        continue;
                    }
                    let manifest = match manifests::task_job(pool, task) {
                        Ok(m) => m,
                        Err(e) => {
                            let next = AgentTaskStatus {
                                phase: TaskPhase::Errored,
                                finished_at: Some(k8s_time(now)),
                                message: Some(e.to_string()),
                                ..status
                            };
                            if ctx.set_task_status(task, next).await? {
                                ctx.task_event(task, EventType::Warning, "Errored", e.to_string())
                                    .await;
                            }
                            continue;
                        }
                    };
                    match jobs_api.create(&PostParams::default(), &manifest).await {
                        Ok(_) => {}
                        // A restarted controller finds the Job it made before.
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(source) => {
                            return Err(ControllerError::JobFailed {
                                action: "create",
                                task: task.name_any(),
                                job: job_name,
                                source,
                            });
                        }
                    }
                    in_flight += 1;
                }
                let next = AgentTaskStatus {
                    phase: TaskPhase::Scheduled,
                    job: Some(job_name.clone()),
                    claimed_at: Some(k8s_time(now)),
                    attempts: status.attempts + 1,
                    message: Some(format!("Job {job_name} created")),
                    ..status
                };
                ctx.set_task_status(task, next).await?;
                soonest =
                    Some(soonest.map_or(Duration::from_secs(1), |s| s.min(Duration::from_secs(1))));
            }
            TaskPhase::Scheduled | TaskPhase::Running => {
                let Some(job) = job else {
                    // Give the job store a moment after we created it.
                    let since = status
                        .claimed_at
                        .as_ref()
                        .map(|t| now.duration_since(t.0).as_secs())
                        .unwrap_or(i64::MAX);
                    if since > 10 {
                        let next =
                            status.requeued(&format!("Job {job_name} is gone"), max_attempts, now);
                        if ctx.set_task_status(task, next).await? {
                            ctx.task_event(
                                task,
                                EventType::Warning,
                                "Requeued",
                                format!("Job {job_name} is gone"),
                            )
                            .await;
                        }
                    }
                    continue;
                };
                if let Some(ok) = job_outcome(&job) {
                    let next = AgentTaskStatus {
                        phase: if ok {
                            TaskPhase::Succeeded
                        } else {
                            TaskPhase::Failed
                        },
                        finished_at: Some(k8s_time(now)),
                        started_at: status.started_at.clone().or(Some(k8s_time(now))),
                        message: Some(if ok {
                            format!("Job {job_name} succeeded")
                        } else {
                            format!("Job {job_name} failed")
                        }),
                        ..status
                    };
                    ctx.set_task_status(task, next).await?;
                    continue;
                }
                let pod = pod_of(task);
                let pod_running = pod
                    .and_then(|p| p.status.as_ref()?.phase.as_deref())
                    .is_some_and(|p| p == "Running");
                if phase == TaskPhase::Scheduled && pod_running {
                    let next = AgentTaskStatus {
                        phase: TaskPhase::Running,
                        agent: pod.map(|p| p.name_any()),
                        started_at: Some(k8s_time(now)),
                        last_heartbeat: Some(k8s_time(now)),
                        message: Some(format!("running in Job {job_name}")),
                        ..status
                    };
                    ctx.set_task_status(task, next).await?;
                } else if phase == TaskPhase::Scheduled {
                    let since = status
                        .claimed_at
                        .as_ref()
                        .map(|t| now.duration_since(t.0).as_secs())
                        .unwrap_or(0);
                    if since >= sched_timeout {
                        let why = format!(
                            "not running {sched_timeout}s after Job {job_name} was created ({})",
                            waiting_reason(pod)
                        );
                        delete_job(&jobs_api, &job_name, task).await?;
                        let next = AgentTaskStatus {
                            phase: TaskPhase::Errored,
                            finished_at: Some(k8s_time(now)),
                            message: Some(why.clone()),
                            ..status
                        };
                        if ctx.set_task_status(task, next).await? {
                            ctx.task_event(
                                task,
                                EventType::Warning,
                                "SchedulingTimeout",
                                why.clone(),
                            )
                            .await;
                            ctx.event(
                                EventType::Warning,
                                "SchedulingTimeout",
                                "Schedule",
                                format!("task {}: {why}", task.name_any()),
                            )
                            .await;
                        }
                    } else {
                        let left =
                            Duration::from_secs(u64::try_from(sched_timeout - since).unwrap_or(1));
                        soonest = Some(soonest.map_or(left, |s| s.min(left)));
                    }
                }
            }
            _ => {}
        }
    }

    let objects = pool_objects(ctx, 0)?;
    apply_objects(ctx, objects, true).await?;

    let counts = count_tasks(tasks.iter().map(AsRef::as_ref));
    let active = tasks
        .iter()
        .filter(|t| matches!(t.phase(), TaskPhase::Scheduled | TaskPhase::Running))
        .count();
    let (health, _) = health_counts(shared, &ctx.ns, pool_pods, now);
    let old = pool.status.clone().unwrap_or_default();
    let generation = pool.metadata.generation;
    let desired = to_i32(u32::try_from(active).unwrap_or(u32::MAX))
        .saturating_add(to_i32(counts.pending))
        .min(max_in_flight);
    let status = AgentPoolStatus {
        replicas: to_i32(u32::try_from(active).unwrap_or(u32::MAX)),
        ready_replicas: to_i32(counts.running),
        desired_replicas: desired,
        pending_tasks: to_i32(counts.pending),
        running_tasks: to_i32(counts.running),
        frozen: false,
        frozen_reason: None,
        draining: pool.spec.drain,
        hold: None,
        health,
        last_scale_time: old.last_scale_time.clone(),
        scale_reason: Some(format!(
            "job mode: {active} of at most {max_in_flight} task Jobs in flight"
        )),
        conditions: valid_pool_conditions(
            &old.conditions,
            &PoolConditionFacts {
                ready: (true, "JobMode", "tasks run as Jobs".into()),
                frozen: None,
                draining: pool.spec.drain.then_some(""),
                degraded: &ctx.notes.join("; "),
            },
            generation,
            now,
        ),
        observed_generation: generation,
    };
    shared.metrics.set_pool(
        &ctx.ns,
        &ctx.name,
        super::metrics::PoolGauges {
            desired: i64::from(desired),
            current: i64::try_from(active).unwrap_or(i64::MAX),
            ready: i64::from(counts.running),
            pending: i64::from(counts.pending),
            running: i64::from(counts.running),
            busy: i64::from(counts.running),
            idle: 0,
            fresh: i64::from(health.fresh),
            stale: i64::from(health.stale),
            offline: i64::from(health.offline),
        },
    );
    write_pool_status(pool, shared, &old, status).await?;
    let mut next = resync(shared);
    if ctx.retry_soon {
        next = Action::requeue(Duration::from_millis(300));
    } else if let Some(s) = soonest {
        next = Action::requeue(s.min(shared.config.resync_interval().max(Duration::from_secs(1))));
    }
    Ok(next)
}

async fn delete_job(api: &Api<Job>, job: &str, task: &AgentTask) -> Result<()> {
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(job, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(ControllerError::JobFailed {
            action: "delete",
            task: task.name_any(),
            job: job.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_field_that_ends_is_removed_by_the_patch_not_kept() {
        let old: AgentPoolStatus = serde_json::from_value(json!({
            "frozen": true, "frozenReason": "freeze 22:00-06:00", "scaleReason": "3 pending",
            "replicas": 2
        }))
        .expect("status");
        let new: AgentPoolStatus =
            serde_json::from_value(json!({"replicas": 1, "scaleReason": "idle"})).expect("status");
        let patch = status_patch(&old, &new);
        assert_eq!(patch["status"]["frozenReason"], serde_json::Value::Null);
        assert_eq!(patch["status"]["frozen"], false);
        assert_eq!(patch["status"]["scaleReason"], "idle");
        assert_eq!(patch["status"]["replicas"], 1);
        // Applied as a merge patch, the stale reason is gone.
        let mut doc = json!({"status": serde_json::to_value(&old).expect("old")});
        json_patch::merge(&mut doc, &patch);
        assert!(doc["status"].get("frozenReason").is_none(), "{doc}");
        assert_eq!(doc["status"]["scaleReason"], "idle");
    }

    #[test]
    fn changes_are_matched_to_their_tasks_by_name_in_order() {
        let tasks: Vec<Arc<AgentTask>> = ["a", "b", "c"]
            .iter()
            .map(|n| {
                Arc::new(
                    serde_json::from_value(json!({
                        "metadata": {"name": n}, "spec": {"pool": "p", "command": ["true"]}
                    }))
                    .expect("task"),
                )
            })
            .collect();
        let changes = vec![
            ("c".to_owned(), 1),
            ("gone".to_owned(), 2),
            ("a".to_owned(), 3),
            ("c".to_owned(), 4),
        ];
        let at = at_tasks(&tasks, changes, |(name, _)| name);
        let got: Vec<(usize, i32)> = at.iter().map(|(i, (_, n))| (*i, *n)).collect();
        assert_eq!(got, [(2, 1), (0, 3), (2, 4)]);
        assert!(at_tasks(&tasks, Vec::<(String, i32)>::new(), |(n, _)| n).is_empty());
    }

    fn job(status: serde_json::Value) -> Job {
        serde_json::from_value(json!({"metadata": {"name": "j"}, "status": status})).expect("job")
    }

    #[test]
    fn a_job_is_finished_by_its_conditions_or_succeeded_count() {
        let cases = [
            (json!({}), None),
            (json!({"active": 1}), None),
            (json!({"succeeded": 1}), Some(true)),
            (
                json!({"conditions": [{"type": "Complete", "status": "True"}]}),
                Some(true),
            ),
            (
                json!({"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]}),
                Some(false),
            ),
            (
                json!({"failed": 1, "conditions": [{"type": "Failed", "status": "False"}]}),
                None,
            ),
        ];
        for (status, want) in cases {
            assert_eq!(job_outcome(&job(status.clone())), want, "{status}");
        }
    }

    #[test]
    fn status_comparison_ignores_condition_transition_times_only() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().expect("ts");
        let a = AgentPoolStatus {
            desired_replicas: 2,
            conditions: vec![condition(&[], "Ready", true, "R", "m", Some(1), t0)],
            ..AgentPoolStatus::default()
        };
        let mut b = a.clone();
        b.conditions = vec![condition(&[], "Ready", true, "R", "m", Some(1), t1)];
        assert!(status_equal(&a, &b));
        b.desired_replicas = 3;
        assert!(!status_equal(&a, &b));
    }

    #[test]
    fn a_pod_that_has_not_started_is_explained_by_its_waiting_containers() {
        let pod: CachedPod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "runner", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ImagePullBackOff"}}}
            ]}
        }))
        .expect("pod");
        assert_eq!(waiting_reason(Some(&pod)), "pod p: runner ImagePullBackOff");
        assert_eq!(waiting_reason(None), "no pod yet");
    }

    #[test]
    fn only_a_failed_mount_of_a_waiting_pod_naming_the_secret_says_it_is_missing() {
        let event = |reason: &str, pod: &str, uid: &str, message: &str| {
            serde_json::from_value::<k8s_openapi::api::core::v1::Event>(json!({
                "metadata": {"name": "e"},
                "reason": reason,
                "message": message,
                "involvedObject": {"kind": "Pod", "name": pod, "uid": uid}
            }))
            .expect("event")
        };
        let missing =
            "MountVolume.SetUp failed for volume \"token\" : secret \"agent-token\" not found";
        let pods = [("agent-0", Some("u0"))];
        for (events, want) in [
            (vec![event("FailedMount", "agent-0", "u0", missing)], true),
            (vec![event("FailedMount", "agent-1", "u1", missing)], false),
            (vec![event("FailedMount", "agent-0", "old", missing)], false),
            (vec![event("Scheduled", "agent-0", "u0", missing)], false),
            (
                vec![event(
                    "FailedMount",
                    "agent-0",
                    "u0",
                    "MountVolume.SetUp failed for volume \"ca\" : configmap \"agent-token\" not found",
                )],
                false,
            ),
            (vec![], false),
        ] {
            assert_eq!(
                mount_says_secret_missing(&events, &pods, "agent-token"),
                want,
                "{events:?}"
            );
        }
    }
}
