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
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::context::RenderInput;
use super::{Context, ControllerError, Result, resync as resync_action};
use crate::cluster::pod::CachedPod;
use crate::crd::{
    AgentPool, AgentPoolStatus, AgentTask, AgentTaskStatus, CapacityStatus, ExecutionMode,
    HealthCounts, HoldStatus, LABEL_COMPONENT, LABEL_TASK, TaskPhase, k8s_time,
};
use crate::health::Freshness;
use crate::plan::autoscale::{
    AutoscaleInput, HoldInput, Recommendations, ScaleDecision, ScaleDirection, decide,
};
use crate::plan::capacity::{self, Bounds};
use crate::plan::freeze;
use crate::plan::manifests::{self, COMPONENT_AGENT, COMPONENT_TASK, label_value};
use crate::plan::pool::{
    AgentCounts, AgentPod, ClaimOutlook, PoolConditionFacts, Recovery, TaskCounts, UNCLAIMED,
    condition, count_agents, count_tasks, deletion_costs, offline_recheck, recovery,
    requeued_condition, same_conditions, unclaimed, valid_pool_conditions,
};
use crate::plan::validate::{summary, validate_pool};

/// An applied object is sent again after this long even when unchanged, so
/// drift (someone deleted the Service) is repaired without a watch on it.
const REAPPLY_AFTER: Duration = Duration::from_secs(600);
/// How long a replica count we wrote wins over the Deployment store's.
const STORE_LAG: Duration = Duration::from_secs(5);
/// How long after a burst's first scaling decision its follow-up counts as
/// part of the same decision (see `gate`: the follow-up comes once the pool
/// has been quiet for `DEBOUNCE`).
const BURST: Duration = Duration::from_secs(2);

pub(super) async fn reconcile(pool: Arc<AgentPool>, shared: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile_pool(&pool, &shared).await;
    shared
        .metrics
        .reconciled(started.elapsed().as_secs_f64(), result.is_err());
    match &result {
        Ok(_) => {
            *shared
                .diagnostics
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
    shared: Arc<Context>,
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

async fn reconcile_pool(pool: &AgentPool, shared: &Context) -> Result<Action> {
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
    // Context with the store: a task is copied only when a write replaces it.
    // One pool's objects by the index kept beside the stores: a reconcile
    // costs its own pool, not every pool's tasks and pods.
    let mut tasks: Vec<Arc<AgentTask>> = shared.view.pool_tasks(&ns, &name);
    observe_task_metrics(shared, &ns, &name, &tasks);
    let pool_pods: Vec<Arc<CachedPod>> = shared.view.pool_pods(&ns, &label_value(&name));
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
    shared: &'a Context,
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
        let api = self.tasks_api();
        // A status built on the cached copy carries its stripped output:
        // the API's is written back, not the empty string.
        let mut next = match crate::cluster::with_kept_output(&api, task).await {
            Ok(Some(next)) => next,
            Ok(None) => {
                self.retry_soon = true;
                return Ok(false);
            }
            Err(source) => {
                return Err(ControllerError::TaskStatusFailed {
                    task: task.name_any(),
                    source,
                });
            }
        };
        let mut status = status;
        if status.output_tail.as_deref() == Some("") {
            status.output_tail = next.status.as_ref().and_then(|s| s.output_tail.clone());
        }
        status.message = status.message.map(|m| crate::text::sanitize_line(&m));
        for c in &mut status.conditions {
            c.message = crate::text::sanitize_line(&c.message);
        }
        next.status = Some(status);
        match api
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
    shared: &Context,
    reference: k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    publish(shared, reference, type_, reason, action, note).await;
}

async fn publish(
    shared: &Context,
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

fn observe_task_metrics(shared: &Context, ns: &str, pool: &str, tasks: &[Arc<AgentTask>]) {
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
            shared.metrics.task_started(
                ns,
                pool,
                uid,
                start.0.duration_since(created.0).as_secs_f64(),
            );
        }
        // Ended since this controller started (one that ended before was
        // counted by its predecessor); a task that never started (Errored
        // before scheduling, Cancelled while Pending) counts without a
        // duration.
        if let Some(end) = status.finished_at.as_ref()
            && status.phase.is_finished()
            && end.0 > shared.started
        {
            let ran = start.map(|start| end.0.duration_since(start.0).as_secs_f64());
            shared
                .metrics
                .task_finished(ns, pool, uid, status.phase.as_str(), ran);
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
    shared: &Context,
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

/// The pool's verdict on `status` (as `agentdeck status` would tell it
/// once written), its freeze and aims, as metrics.
fn record_pool_state(pool: &AgentPool, shared: &Context, status: &AgentPoolStatus) {
    let (Some(ns), name) = (pool.namespace(), pool.name_any()) else {
        return;
    };
    let mut seen = pool.clone();
    seen.status = Some(status.clone());
    let unclaimed = crate::plan::verdict::unclaimed_tasks(
        &name,
        shared.view.pool_tasks(&ns, &name).iter().map(AsRef::as_ref),
    );
    let verdict = crate::plan::verdict::verdict(&seen, unclaimed, Timestamp::now());
    shared.metrics.set_pool_state(
        &ns,
        &name,
        super::metrics::PoolState {
            verdict: verdict.level.as_str(),
            frozen: status.frozen,
            queue_wait_target_seconds: pool
                .spec
                .slo
                .and_then(|slo| slo.queue_wait_seconds)
                .map(|s| s as f64),
        },
    );
}

async fn write_pool_status(
    pool: &AgentPool,
    shared: &Context,
    old: &AgentPoolStatus,
    status: AgentPoolStatus,
) -> Result<()> {
    record_pool_state(pool, shared, &status);
    if pool.status.is_some() && status_equal(old, &status) {
        return Ok(());
    }
    let api: Api<AgentPool> = Api::namespaced(
        shared.client.clone(),
        pool.namespace().as_deref().unwrap_or_default(),
    );
    let patch = status_patch(old, &status);
    tracing::debug!(
        pool = %pool.name_any(),
        changed = %changed_fields(old, &patch),
        health = %format_args!(
            "{}/{}/{} -> {}/{}/{}",
            old.health.fresh,
            old.health.stale,
            old.health.offline,
            status.health.fresh,
            status.health.stale,
            status.health.offline
        ),
        "pool status written"
    );
    match api
        .patch_status(
            &pool.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
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

/// The status fields a [`status_patch`] changes, by name (`health`,
/// `conditions` …), for the debug line of a write.
fn changed_fields(old: &AgentPoolStatus, patch: &serde_json::Value) -> String {
    let before = serde_json::to_value(old).unwrap_or_default();
    let Some(after) = patch["status"].as_object() else {
        return String::new();
    };
    let changed: Vec<&str> = after
        .iter()
        .filter(|(k, v)| before.get(k.as_str()).unwrap_or(&serde_json::Value::Null) != *v)
        .map(|(k, _)| k.as_str())
        .collect();
    changed.join(",")
}

fn default_tz(shared: &Context) -> TimeZone {
    TimeZone::get(&shared.config.default_timezone).unwrap_or(TimeZone::UTC)
}

/// Whether a pod's health counts: not going, and not finished (a job-mode
/// task pod that ran stops answering, and is no stale agent).
fn answers_for_health(p: &CachedPod) -> bool {
    let finished = p
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| matches!(phase, "Succeeded" | "Failed"));
    p.metadata.deletion_timestamp.is_none() && !finished
}

fn health_counts(
    shared: &Context,
    ns: &str,
    pods: &[Arc<CachedPod>],
    now: Timestamp,
) -> (HealthCounts, BTreeSet<String>) {
    let thresholds = super::prober::thresholds(&shared.config.health_probe);
    let mut counts = HealthCounts::default();
    let mut offline = BTreeSet::new();
    for pod in pods.iter().filter(|p| answers_for_health(p)) {
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
        let pool_key = format!("{}/{}", ctx.ns, ctx.name);
        let key = object_key(&object);
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            object.to_string().hash(&mut h);
            h.finish()
        };
        let fresh_in_cache = ctx.shared.memory.read(&pool_key, |m| {
            m.applied
                .get(&key)
                .is_some_and(|(h, at)| *h == hash && at.elapsed() < REAPPLY_AFTER)
        });
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
                    .memory
                    .write(&pool_key, |m| m.applied.insert(key, (hash, Instant::now())));
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

/// The pool's objects rendered at `replicas` and applied where they
/// changed (see [`apply_objects`]). Rendering is most of a quiet resync's
/// work (the Deployment's pod template built, merged and serialized for
/// every pool every resync), and its output depends on the pool object and
/// `replicas` alone: when both are as at the last render and every object
/// it made was applied within [`REAPPLY_AFTER`], there is nothing to send
/// and nothing is rendered. The pool's resourceVersion stands for the pool
/// (any change to it, status included, renders again).
async fn render_and_apply(
    ctx: &mut PoolCtx<'_>,
    replicas: i32,
    deployment_exists: bool,
) -> Result<()> {
    let pool_key = format!("{}/{}", ctx.ns, ctx.name);
    let input = RenderInput {
        uid: ctx.pool.metadata.uid.clone(),
        resource_version: ctx.pool.metadata.resource_version.clone(),
        replicas,
    };
    let unchanged = deployment_exists
        && input.resource_version.is_some()
        && ctx
            .shared
            .memory
            .read(&pool_key, |m| m.rendered_fresh(&input, REAPPLY_AFTER));
    if unchanged {
        return Ok(());
    }
    let objects = pool_objects(ctx, replicas)?;
    let keys: Vec<String> = objects.iter().map(object_key).collect();
    apply_objects(ctx, objects, deployment_exists).await?;
    ctx.shared
        .memory
        .write(&pool_key, |m| m.rendered = Some((input, keys)));
    Ok(())
}

/// `kind/name` of a rendered object: its key in [`PoolMemory::applied`].
///
/// [`PoolMemory::applied`]: super::context::PoolMemory
fn object_key(object: &serde_json::Value) -> String {
    format!(
        "{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
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

/// A deployment-mode pool, in the steps of a reconcile: recover the tasks
/// whose agent is gone, count tasks and agents, decide the replicas, apply
/// the pool's objects at that count, mark what cannot be claimed, report
/// the status, and say when to look again.
async fn deployment_mode(
    ctx: &mut PoolCtx<'_>,
    tasks: &mut [Arc<AgentTask>],
    pool_pods: &[Arc<CachedPod>],
) -> Result<Action> {
    let agent_pods = agent_pods_of(pool_pods);
    let (health, offline) = health_counts(ctx.shared, &ctx.ns, &agent_pods, ctx.now);
    // Recovery first, so the autoscaler counts requeued tasks as pending.
    let offline_check = recover_tasks(ctx, tasks, &agent_pods, &offline).await?;
    let counted = Counted::of(tasks, &agent_pods);
    let replicas = ReplicasNow::of(ctx);
    let plan = decide_scale(ctx, &counted, &replicas);
    let last_scale_time = apply_scale(ctx, &counted, &replicas, &plan).await?;
    let outlook = ClaimOutlook {
        ready_agents: counted.agents.ready,
        idle_agents: counted.agents.idle,
        replicas: clamp_u32(plan.desired),
        max_replicas: plan.max_now,
        frozen: plan.frozen.clone(),
        draining: ctx.pool.spec.drain,
    };
    let unclaimed_check = mark_unclaimed(ctx, tasks, &outlook).await?;
    report_deployment(ctx, &counted, &replicas, &plan, health, last_scale_time).await?;
    let checks = [
        offline_check,
        unclaimed_check,
        plan.frozen_until
            .and_then(|until| Duration::try_from(until.duration_since(ctx.now)).ok()),
        // A window's bounds apply when it opens or closes, not at the next
        // task or resync.
        plan.capacity_change.map(|at| capacity::until(ctx.now, at)),
    ];
    Ok(Action::requeue(next_look(
        ctx.shared.config.resync_interval(),
        &plan.decision,
        ctx.retry_soon,
        checks.into_iter().flatten(),
    )))
}

/// The agent pods among a pool's pods (not its task or debug pods).
fn agent_pods_of(pool_pods: &[Arc<CachedPod>]) -> Vec<Arc<CachedPod>> {
    pool_pods
        .iter()
        .filter(|p| p.labels().get(LABEL_COMPONENT).map(String::as_str) == Some(COMPONENT_AGENT))
        .cloned()
        .collect()
}

/// Step 1, recover: tasks whose agent pod is gone (or offline past its
/// heartbeat) are requeued or failed. A terminating agent still finishes
/// its task (onStop: drain), so only pods gone from the store or ended
/// count as gone. Returns when to look again at an offline agent whose
/// task still heartbeats.
async fn recover_tasks(
    ctx: &mut PoolCtx<'_>,
    tasks: &mut [Arc<AgentTask>],
    agent_pods: &[Arc<CachedPod>],
    offline: &BTreeSet<String>,
) -> Result<Option<Duration>> {
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
    let max_attempts = max_attempts(ctx);
    let offline_after = ctx.shared.config.health_probe.offline_after();
    let actions = recovery(
        tasks.iter().map(AsRef::as_ref),
        &present,
        offline,
        ctx.now,
        offline_after,
    );
    let actions = at_tasks(tasks, actions, |a| match a {
        Recovery::Requeue { task, .. } | Recovery::Cancelled { task, .. } => task,
    });
    for (i, action) in actions {
        recover(ctx, &mut tasks[i], action, max_attempts).await?;
    }
    Ok(offline_recheck(
        tasks.iter().map(AsRef::as_ref),
        offline,
        ctx.now,
        offline_after,
    ))
}

/// Attempts a task gets: the controller's limit and the pool's, whichever
/// is lower (at least one).
fn max_attempts(ctx: &PoolCtx<'_>) -> i32 {
    i32::try_from(ctx.shared.config.task_recovery.max_attempts)
        .unwrap_or(i32::MAX)
        .min(ctx.pool.spec.task_defaults.max_attempts.max(1))
}

/// Step 2, count: the pool's tasks and agents.
struct Counted {
    tasks: TaskCounts,
    pods: Vec<AgentPod>,
    agents: AgentCounts,
}

impl Counted {
    fn of(tasks: &[Arc<AgentTask>], agent_pods: &[Arc<CachedPod>]) -> Counted {
        let counts = count_tasks(tasks.iter().map(AsRef::as_ref));
        let pods: Vec<AgentPod> = agent_pods.iter().map(|p| AgentPod::of(p)).collect();
        let agents = count_agents(&pods, &counts.busy_agents);
        Counted {
            tasks: counts,
            pods,
            agents,
        }
    }
}

/// The replicas the pool's Deployment has now, as far as the controller
/// knows.
struct ReplicasNow {
    /// Whether the Deployment exists (in the store).
    exists: bool,
    /// Its replicas, or what this controller last wrote while the store may
    /// not show it yet.
    current: i32,
    ready: i32,
    /// What this controller last wrote, within `STORE_LAG`: (replicas,
    /// when, when as a timestamp).
    remembered: Option<(i32, Instant, Timestamp)>,
    /// `namespace/pool`, the key of the controller's memories of it.
    key: String,
}

impl ReplicasNow {
    fn of(ctx: &PoolCtx<'_>) -> ReplicasNow {
        let shared = ctx.shared;
        let pool = ctx.pool;
        // One lookup by name, however many pools there are.
        let deployment = shared
            .view
            .deployments
            .get(&ObjectRef::new(&pool.deployment_name()).within(&ctx.ns));
        let stored = deployment
            .as_ref()
            .and_then(|d| d.spec.as_ref()?.replicas)
            .unwrap_or(pool.spec.min_replicas);
        // The Deployment store may not show our last scale yet: trust what we
        // wrote for a short while so one burst is one decision.
        let key = format!("{}/{}", ctx.ns, ctx.name);
        let remembered = shared
            .memory
            .read(&key, |m| m.scaled)
            .filter(|(_, at, _)| at.elapsed() < STORE_LAG);
        let current = match remembered {
            Some((replicas, _, _)) if deployment.is_some() => replicas,
            _ => stored,
        };
        ReplicasNow {
            exists: deployment.is_some(),
            current,
            ready: deployment
                .as_ref()
                .and_then(|d| d.status.as_ref()?.ready_replicas)
                .unwrap_or(0),
            remembered,
            key,
        }
    }
}

/// Step 3's outcome: the replicas decided, and what decided them.
struct ScalePlan {
    decision: ScaleDecision,
    desired: i32,
    /// The freeze in force: its reason, and when it ends.
    frozen: Option<String>,
    frozen_until: Option<Timestamp>,
    /// The capacity windows as the status tells them, and when their
    /// bounds next change.
    capacity: Option<CapacityStatus>,
    capacity_change: Option<Timestamp>,
    /// The maximum in force: an open capacity window's, else the pool's.
    max_now: u32,
    /// The start of the burst this decision follows up, if it does.
    burst: Option<(Instant, Option<Timestamp>)>,
    /// The last scale, as the pool's status or our memory has it.
    last_scale: Option<Timestamp>,
}

/// Step 3, decide: the autoscaler's input from the counts, the freeze, the
/// hold and the stabilization history, then its decision (recorded in the
/// history).
fn decide_scale(ctx: &PoolCtx<'_>, counted: &Counted, replicas: &ReplicasNow) -> ScalePlan {
    let shared = ctx.shared;
    let pool = ctx.pool;
    let now = ctx.now;
    let windows =
        freeze::parse_all(&pool.spec.freeze_schedules, &default_tz(shared)).unwrap_or_default();
    let frozen = freeze::active_freeze(&windows, now);
    let capacity_windows = capacity::parse_all(
        &pool.spec.capacity_schedules,
        pool.spec.max_replicas,
        &default_tz(shared),
    )
    .unwrap_or_default();
    let pool_bounds = Bounds {
        min: clamp_u32(pool.spec.min_replicas),
        max: clamp_u32(pool.spec.max_replicas),
    };
    let open = capacity::open_at(&capacity_windows, pool_bounds.max, now);
    let old = pool.status.clone().unwrap_or_default();
    let last_scale = old
        .last_scale_time
        .as_ref()
        .map(|t| t.0)
        .max(replicas.remembered.map(|(_, _, t)| t));
    let window = seconds(pool.spec.scale_down_stabilization_seconds);
    // A leading controller decides at least once a resync; a history older
    // than a few resyncs was not recorded by a leader and is seeded again.
    let stale_after = shared.config.resync_interval().max(Duration::from_secs(1)) * 3;
    let recommendations = Recommendations::fresh_or_seeded(
        shared
            .memory
            .read(&replicas.key, |m| m.recommendations.clone()),
        clamp_u32(replicas.current),
        now,
        stale_after,
    );
    let input = AutoscaleInput {
        capacity: open.clone(),
        ..autoscale_input(
            pool,
            counted,
            replicas.current,
            recommendations,
            frozen.as_ref().map(|f| f.reason.clone()),
            last_scale,
            now,
        )
    };
    // A burst's follow-up finishes the burst's scale-up: the up cooldown
    // counts from before the burst's first decision, so 100 tasks are one
    // or two decisions reaching the target, not a partial one that sticks.
    let burst = shared
        .memory
        .read(&replicas.key, |m| m.burst)
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
        replicas.key.clone(),
        input.recommendations,
        now,
        decision.need,
        window,
        stale_after,
    );
    ScalePlan {
        desired: to_i32(decision.desired),
        decision,
        frozen: frozen.as_ref().map(|f| f.reason.clone()),
        frozen_until: frozen.map(|f| f.until),
        capacity: capacity::status(&capacity_windows, pool_bounds, now),
        capacity_change: capacity::next_change(&capacity_windows, pool_bounds, now).map(|c| c.at),
        max_now: open.map_or(pool_bounds.max, |o| o.bounds.max),
        burst,
        last_scale,
    }
}

/// Whole seconds of a spec field as a duration (negative is zero).
fn seconds(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s.max(0)).unwrap_or(0))
}

/// What the autoscaler is asked, from a pool's spec and counts.
fn autoscale_input(
    pool: &AgentPool,
    counted: &Counted,
    current: i32,
    recommendations: Recommendations,
    frozen: Option<String>,
    last_scale_time: Option<Timestamp>,
    now: Timestamp,
) -> AutoscaleInput {
    let spec = &pool.spec;
    AutoscaleInput {
        pending_tasks: counted.tasks.pending,
        running_tasks: counted.tasks.running,
        busy_agents: counted.agents.busy,
        idle_agents: counted.agents.idle,
        starting_agents: counted.agents.starting,
        current_replicas: clamp_u32(current),
        concurrency: clamp_u32(spec.concurrency),
        min_replicas: clamp_u32(spec.min_replicas),
        max_replicas: clamp_u32(spec.max_replicas),
        scale_up_step: spec.scale_up_step.map(clamp_u32),
        cooldown_up: seconds(spec.cooldown_seconds.up),
        cooldown_down: seconds(spec.cooldown_seconds.down),
        scale_down_window: seconds(spec.scale_down_stabilization_seconds),
        recommendations,
        frozen,
        capacity: None,
        draining: spec.drain,
        hold: spec.hold.as_ref().map(|h| HoldInput {
            replicas: clamp_u32(h.replicas),
            until: h.until.as_ref().map(|t| t.0),
            set_by: h.set_by.clone(),
        }),
        last_scale_time,
        now,
    }
}

/// Step 4, apply: busy agents are made costlier to delete before a scale
/// down, the pool's objects are applied at the decided replicas, and a
/// scale is recorded (memory, metric, Event). Returns the pool's
/// `lastScaleTime`.
async fn apply_scale(
    ctx: &mut PoolCtx<'_>,
    counted: &Counted,
    replicas: &ReplicasNow,
    plan: &ScalePlan,
) -> Result<Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>> {
    let shared = ctx.shared;
    let (current, desired) = (replicas.current, plan.desired);
    if desired < current {
        // Busy agents must outlive idle ones when the ReplicaSet picks.
        for (pod, cost) in deletion_costs(&counted.pods, &counted.tasks.busy_agents) {
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
    render_and_apply(ctx, desired, replicas.exists).await?;

    let old = ctx.pool.status.as_ref();
    let mut last_scale_time = old.and_then(|s| s.last_scale_time.clone());
    if replicas.exists && desired != current {
        let (dir, reason) = if desired > current {
            ("up", "ScaledUp")
        } else {
            ("down", "ScaledDown")
        };
        last_scale_time = Some(k8s_time(ctx.now));
        shared.memory.write(&replicas.key, |m| {
            if plan.burst.is_none() {
                m.burst = Some((Instant::now(), plan.last_scale));
            }
            m.scaled = Some((desired, Instant::now(), ctx.now));
        });
        shared.metrics.scaled(&ctx.ns, &ctx.name, dir);
        tracing::info!(pool = %ctx.name, namespace = %ctx.ns, from = current, to = desired, reason = %plan.decision.reason, "scaled");
        ctx.event(
            EventType::Normal,
            reason,
            "Scale",
            plan.decision.reason.clone(),
        )
        .await;
    }
    Ok(last_scale_time)
}

/// Step 5, report: Events for a freeze that began and a hold that ended,
/// the pool's status and its metrics.
async fn report_deployment(
    ctx: &PoolCtx<'_>,
    counted: &Counted,
    replicas: &ReplicasNow,
    plan: &ScalePlan,
    health: HealthCounts,
    last_scale_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> Result<()> {
    let shared = ctx.shared;
    let pool = ctx.pool;
    let now = ctx.now;
    let old = pool.status.clone().unwrap_or_default();
    if plan.frozen.is_some() && !old.frozen {
        ctx.event(
            EventType::Normal,
            "Frozen",
            "Freeze",
            plan.frozen.clone().unwrap_or_default(),
        )
        .await;
    }
    capacity_events(ctx, old.capacity.as_ref(), plan.capacity.as_ref()).await;
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
    let mut notes = ctx.notes.clone();
    if health.offline > 0 {
        notes.push(format!("{} agent(s) offline", health.offline));
    }
    let status = deployment_status(
        pool,
        &old,
        &DeploymentFacts {
            counted,
            ready: replicas.ready,
            desired: plan.desired,
            frozen: plan.frozen.as_deref(),
            hold,
            capacity: plan.capacity.clone(),
            health,
            last_scale_time,
            reason: &plan.decision.reason,
            degraded: &notes.join("; "),
        },
        now,
    );
    shared.metrics.set_pool(
        &ctx.ns,
        &ctx.name,
        super::metrics::PoolGauges {
            desired: i64::from(plan.desired),
            current: i64::from(counted.agents.live),
            ready: i64::from(replicas.ready),
            pending: i64::from(counted.tasks.pending),
            running: i64::from(counted.tasks.running),
            busy: i64::from(counted.agents.busy),
            idle: i64::from(counted.agents.idle),
            fresh: i64::from(health.fresh),
            stale: i64::from(health.stale),
            offline: i64::from(health.offline),
        },
    );
    write_pool_status(pool, shared, &old, status).await
}

/// Events for the capacity windows that opened or closed since the status
/// was written (`CapacityWindowOpened`, `CapacityWindowClosed`), marked on
/// the pool's last hour in the console.
async fn capacity_events(
    ctx: &PoolCtx<'_>,
    old: Option<&CapacityStatus>,
    new: Option<&CapacityStatus>,
) {
    let open = |s: Option<&CapacityStatus>| s.map(|s| s.open.clone()).unwrap_or_default();
    let (before, after) = (open(old), open(new));
    let summary = new.map(|s| s.summary.clone()).unwrap_or_default();
    for label in before.iter().filter(|l| !after.contains(l)) {
        ctx.event(
            EventType::Normal,
            "CapacityWindowClosed",
            "Scale",
            format!("capacity window {label} closed; {summary}"),
        )
        .await;
    }
    for label in after.iter().filter(|l| !before.contains(l)) {
        ctx.event(
            EventType::Normal,
            "CapacityWindowOpened",
            "Scale",
            format!("capacity window {label} opened; {summary}"),
        )
        .await;
    }
}

/// What a deployment-mode pool's status is made of.
struct DeploymentFacts<'a> {
    counted: &'a Counted,
    ready: i32,
    desired: i32,
    frozen: Option<&'a str>,
    hold: Option<HoldStatus>,
    capacity: Option<CapacityStatus>,
    health: HealthCounts,
    last_scale_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    reason: &'a str,
    /// Problems worth a Degraded condition, joined.
    degraded: &'a str,
}

/// A deployment-mode pool's status, its conditions moved on from `old`'s.
fn deployment_status(
    pool: &AgentPool,
    old: &AgentPoolStatus,
    f: &DeploymentFacts<'_>,
    now: Timestamp,
) -> AgentPoolStatus {
    let generation = pool.metadata.generation;
    let (ready, desired) = (f.ready, f.desired);
    let ready_ok = ready >= desired;
    AgentPoolStatus {
        replicas: to_i32(f.counted.agents.live),
        ready_replicas: ready,
        desired_replicas: desired,
        pending_tasks: to_i32(f.counted.tasks.pending),
        running_tasks: to_i32(f.counted.tasks.running),
        frozen: f.frozen.is_some(),
        frozen_reason: f.frozen.map(str::to_owned),
        draining: pool.spec.drain,
        hold: f.hold.clone(),
        capacity: f.capacity.clone(),
        health: f.health,
        last_scale_time: f.last_scale_time.clone(),
        scale_reason: Some(f.reason.to_owned()),
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
                frozen: f.frozen,
                draining: pool
                    .spec
                    .drain
                    .then_some("no new work is handed out; scaling to zero once idle"),
                degraded: f.degraded,
            },
            generation,
            now,
        ),
        observed_generation: generation,
    }
}

/// Step 6, when to look again: at the resync at the latest; sooner when a
/// cooldown, hold or stabilization window ends, a scale may need another
/// step, a write lost a race, or one of `checks` (an offline agent's task,
/// an unclaimed task, a freeze's end) comes due.
fn next_look(
    resync: Duration,
    decision: &ScaleDecision,
    retry_soon: bool,
    checks: impl IntoIterator<Item = Duration>,
) -> Duration {
    let mut next = resync.max(Duration::from_secs(1));
    let soon = Duration::from_millis(50);
    if let Some(left) = decision
        .cooldown_left
        .into_iter()
        .chain(decision.hold_left)
        .chain(decision.stabilization_left)
        .min()
    {
        next = next.min(left + soon);
    }
    if decision.direction != ScaleDirection::Hold || retry_soon {
        // Look again soon: the scale may need a second step (scaleUpStep).
        next = next.min(Duration::from_secs(1));
    }
    if retry_soon {
        next = next.min(Duration::from_millis(300));
    }
    for left in checks {
        next = next.min(left + soon);
    }
    next
}

/// Records `need` in the history a decision used, and drops the histories
/// no decision recorded within `stale_after` (they would be seeded again).
fn record_recommendation(
    shared: &Context,
    key: String,
    mut history: Recommendations,
    now: Timestamp,
    need: u32,
    window: Duration,
    stale_after: Duration,
) {
    history.record(now, need, window);
    let stale_after =
        jiff::SignedDuration::try_from(stale_after).unwrap_or(jiff::SignedDuration::MAX);
    shared.memory.record_recommendations(&key, history, |h| {
        h.newest()
            .is_some_and(|t| now.duration_since(t) < stale_after)
    });
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

/// A job-mode pool, in the steps of a reconcile: each unfinished task, oldest
/// first, is moved on (cancelled, given its Job within `maxInFlight`,
/// followed to its end or its scheduling timeout); then the pool's objects
/// are applied, its status reported, and when to look again said.
async fn job_mode(
    ctx: &mut PoolCtx<'_>,
    tasks: &mut [Arc<AgentTask>],
    pool_pods: &[Arc<CachedPod>],
) -> Result<Action> {
    let task_pods: Vec<&Arc<CachedPod>> = pool_pods
        .iter()
        .filter(|p| p.labels().get(LABEL_COMPONENT).map(String::as_str) == Some(COMPONENT_TASK))
        .collect();
    let max_in_flight = max_in_flight(ctx.pool);
    let mut in_flight = tasks
        .iter()
        .filter(|t| {
            !t.phase().is_finished()
                && (matches!(t.phase(), TaskPhase::Scheduled | TaskPhase::Running)
                    || task_job(ctx, t).is_some())
        })
        .count();
    // Oldest first, so the queue is fair.
    tasks.sort_by_key(|t| t.metadata.creation_timestamp.clone().map(|t| t.0));
    let mut soonest: Option<Duration> = None;
    for task in tasks.iter_mut() {
        if task.phase().is_finished() || manifests::job_name(task).is_err() {
            continue;
        }
        let pod = pod_of_task(&task_pods, task);
        let due = if task.spec.cancel {
            cancel_job_task(ctx, task, pod).await?
        } else {
            match task.phase() {
                TaskPhase::Pending => {
                    start_job_task(ctx, task, max_in_flight, &mut in_flight).await?
                }
                TaskPhase::Scheduled | TaskPhase::Running => {
                    follow_job_task(ctx, task, pod).await?
                }
                _ => None,
            }
        };
        soonest = match (soonest, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    render_and_apply(ctx, 0, true).await?;
    report_jobs(ctx, tasks, pool_pods, max_in_flight).await?;
    let resync = ctx
        .shared
        .config
        .resync_interval()
        .max(Duration::from_secs(1));
    Ok(if ctx.retry_soon {
        Action::requeue(Duration::from_millis(300))
    } else if let Some(s) = soonest {
        Action::requeue(s.min(resync))
    } else {
        resync_action(ctx.shared)
    })
}

/// Task Jobs a job-mode pool runs at once: `maxInFlight`, else `maxReplicas`.
fn max_in_flight(pool: &AgentPool) -> i32 {
    pool.spec
        .max_in_flight
        .unwrap_or(pool.spec.max_replicas)
        .max(0)
}

/// A task's Job, looked up by its name (one lookup, however many Jobs).
fn task_job(ctx: &PoolCtx<'_>, task: &AgentTask) -> Option<(String, Arc<Job>)> {
    let name = manifests::job_name(task).ok()?;
    let job = ctx
        .shared
        .view
        .jobs
        .get(&ObjectRef::new(&name).within(&ctx.ns))?;
    Some((name, job))
}

/// The newest pod of a task's Job.
fn pod_of_task<'a>(task_pods: &[&'a Arc<CachedPod>], task: &AgentTask) -> Option<&'a CachedPod> {
    let label = label_value(&task.name_any());
    task_pods
        .iter()
        .filter(|p| p.labels().get(LABEL_TASK) == Some(&label))
        .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0))
        .map(|p: &&'a Arc<CachedPod>| -> &'a CachedPod { p })
}

/// How long until a task is looked at again, at the soonest.
const LOOK_SOON: Duration = Duration::from_secs(1);

/// A cancelled task: its running worker stops the runner itself (TERM,
/// then KILL after the grace) and reports Cancelled; otherwise its Job is
/// deleted and the task marked Cancelled here.
async fn cancel_job_task(
    ctx: &mut PoolCtx<'_>,
    task: &mut Arc<AgentTask>,
    pod: Option<&CachedPod>,
) -> Result<Option<Duration>> {
    let job = task_job(ctx, task);
    let worker_live = task.phase() == TaskPhase::Running
        && pod.is_some_and(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        });
    if worker_live && job.is_some() {
        // Deleting the Job now would cut the worker's stop short. Look
        // again soon in case it dies.
        return Ok(Some(LOOK_SOON));
    }
    if let Some((name, _)) = &job {
        delete_job(&jobs_api(ctx), name, task).await?;
    }
    let next = AgentTaskStatus {
        phase: TaskPhase::Cancelled,
        finished_at: Some(k8s_time(ctx.now)),
        message: Some("cancelled".into()),
        ..task.status.clone().unwrap_or_default()
    };
    ctx.set_task_status(task, next).await?;
    Ok(None)
}

fn jobs_api(ctx: &PoolCtx<'_>) -> Api<Job> {
    Api::namespaced(ctx.shared.client.clone(), &ctx.ns)
}

/// A Pending task gets its Job while fewer than `max_in_flight` run (a Job
/// a restarted controller made before is taken as is), and is Scheduled.
async fn start_job_task(
    ctx: &mut PoolCtx<'_>,
    task: &mut Arc<AgentTask>,
    max_in_flight: i32,
    in_flight: &mut usize,
) -> Result<Option<Duration>> {
    let Ok(job_name) = manifests::job_name(task) else {
        return Ok(None);
    };
    let status = task.status.clone().unwrap_or_default();
    if task_job(ctx, task).is_none() {
        if *in_flight >= usize::try_from(max_in_flight).unwrap_or(0) {
            return Ok(None);
        }
        let manifest = match manifests::task_job(ctx.pool, task) {
            Ok(m) => m,
            Err(e) => {
                let next = AgentTaskStatus {
                    phase: TaskPhase::Errored,
                    finished_at: Some(k8s_time(ctx.now)),
                    message: Some(e.to_string()),
                    ..status
                };
                if ctx.set_task_status(task, next).await? {
                    ctx.task_event(task, EventType::Warning, "Errored", e.to_string())
                        .await;
                }
                return Ok(None);
            }
        };
        match jobs_api(ctx)
            .create(&PostParams::default(), &manifest)
            .await
        {
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
        *in_flight += 1;
    }
    let next = AgentTaskStatus {
        phase: TaskPhase::Scheduled,
        job: Some(job_name.clone()),
        claimed_at: Some(k8s_time(ctx.now)),
        attempts: status.attempts + 1,
        message: Some(format!("Job {job_name} created")),
        ..status
    };
    ctx.set_task_status(task, next).await?;
    Ok(Some(LOOK_SOON))
}

/// A Scheduled or Running task follows its Job: requeued when the Job is
/// gone, finished with it, Running once its pod runs, Errored (its Job
/// deleted) past the scheduling timeout.
async fn follow_job_task(
    ctx: &mut PoolCtx<'_>,
    task: &mut Arc<AgentTask>,
    pod: Option<&CachedPod>,
) -> Result<Option<Duration>> {
    let Ok(job_name) = manifests::job_name(task) else {
        return Ok(None);
    };
    let now = ctx.now;
    let phase = task.phase();
    let status = task.status.clone().unwrap_or_default();
    let since_claimed = status
        .claimed_at
        .as_ref()
        .map(|t| now.duration_since(t.0).as_secs());
    let Some((_, job)) = task_job(ctx, task) else {
        // Give the job store a moment after we created it.
        if since_claimed.unwrap_or(i64::MAX) > 10 {
            let why = format!("Job {job_name} is gone");
            let next = status.requeued(&why, max_attempts(ctx), now);
            if ctx.set_task_status(task, next).await? {
                ctx.task_event(task, EventType::Warning, "Requeued", why)
                    .await;
            }
        }
        return Ok(None);
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
        return Ok(None);
    }
    if phase != TaskPhase::Scheduled {
        return Ok(None);
    }
    let pod_running = pod
        .and_then(|p| p.status.as_ref()?.phase.as_deref())
        .is_some_and(|p| p == "Running");
    if pod_running {
        let next = AgentTaskStatus {
            phase: TaskPhase::Running,
            agent: pod.map(|p| p.name_any()),
            started_at: Some(k8s_time(now)),
            last_heartbeat: Some(k8s_time(now)),
            message: Some(format!("running in Job {job_name}")),
            ..status
        };
        ctx.set_task_status(task, next).await?;
        return Ok(None);
    }
    let timeout = ctx
        .pool
        .spec
        .task_defaults
        .scheduling_timeout_seconds
        .max(1);
    let since = since_claimed.unwrap_or(0);
    if since < timeout {
        return Ok(Some(Duration::from_secs(
            u64::try_from(timeout - since).unwrap_or(1),
        )));
    }
    let why = format!(
        "not running {timeout}s after Job {job_name} was created ({})",
        waiting_reason(pod)
    );
    delete_job(&jobs_api(ctx), &job_name, task).await?;
    let next = AgentTaskStatus {
        phase: TaskPhase::Errored,
        finished_at: Some(k8s_time(now)),
        message: Some(why.clone()),
        ..status
    };
    if ctx.set_task_status(task, next).await? {
        ctx.task_event(task, EventType::Warning, "SchedulingTimeout", why.clone())
            .await;
        ctx.event(
            EventType::Warning,
            "SchedulingTimeout",
            "Schedule",
            format!("task {}: {why}", task.name_any()),
        )
        .await;
    }
    Ok(None)
}

/// A job-mode pool's status and metrics: Jobs in flight against
/// `maxInFlight`, and the health of its task pods.
async fn report_jobs(
    ctx: &PoolCtx<'_>,
    tasks: &[Arc<AgentTask>],
    pool_pods: &[Arc<CachedPod>],
    max_in_flight: i32,
) -> Result<()> {
    let shared = ctx.shared;
    let pool = ctx.pool;
    let counts = count_tasks(tasks.iter().map(AsRef::as_ref));
    let active = tasks
        .iter()
        .filter(|t| matches!(t.phase(), TaskPhase::Scheduled | TaskPhase::Running))
        .count();
    let (health, _) = health_counts(shared, &ctx.ns, pool_pods, ctx.now);
    let old = pool.status.clone().unwrap_or_default();
    let status = job_status(
        pool,
        &old,
        &counts,
        active,
        max_in_flight,
        health,
        &ctx.notes.join("; "),
        ctx.now,
    );
    shared.metrics.set_pool(
        &ctx.ns,
        &ctx.name,
        super::metrics::PoolGauges {
            desired: i64::from(status.desired_replicas),
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
    write_pool_status(pool, shared, &old, status).await
}

/// A job-mode pool's status: `active` Jobs running or scheduled, and as
/// many more wanted as tasks wait, up to `max_in_flight`.
#[allow(clippy::too_many_arguments)]
fn job_status(
    pool: &AgentPool,
    old: &AgentPoolStatus,
    counts: &TaskCounts,
    active: usize,
    max_in_flight: i32,
    health: HealthCounts,
    degraded: &str,
    now: Timestamp,
) -> AgentPoolStatus {
    let generation = pool.metadata.generation;
    let active_i32 = to_i32(u32::try_from(active).unwrap_or(u32::MAX));
    AgentPoolStatus {
        replicas: active_i32,
        ready_replicas: to_i32(counts.running),
        desired_replicas: active_i32
            .saturating_add(to_i32(counts.pending))
            .min(max_in_flight),
        pending_tasks: to_i32(counts.pending),
        running_tasks: to_i32(counts.running),
        frozen: false,
        frozen_reason: None,
        draining: pool.spec.drain,
        hold: None,
        capacity: None,
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
                degraded,
            },
            generation,
            now,
        ),
        observed_generation: generation,
    }
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
    fn a_status_write_names_the_fields_it_changes() {
        let old: AgentPoolStatus = serde_json::from_value(json!({
            "frozen": true, "frozenReason": "freeze", "scaleReason": "3 pending", "replicas": 2
        }))
        .expect("status");
        let new: AgentPoolStatus = serde_json::from_value(json!({
            "frozen": true, "scaleReason": "3 pending", "replicas": 3
        }))
        .expect("status");
        let patch = status_patch(&old, &new);
        assert_eq!(changed_fields(&old, &patch), "frozenReason,replicas");
        assert_eq!(changed_fields(&old, &status_patch(&old, &old)), "");
    }

    #[test]
    fn a_finished_or_going_pod_is_not_counted_as_an_agent_that_stopped_answering() {
        let pod = |phase: &str, going: bool| -> CachedPod {
            let mut meta = json!({"name": "p", "namespace": "ns"});
            if going {
                meta["deletionTimestamp"] = json!("2026-11-24T10:00:00Z");
            }
            serde_json::from_value(json!({"metadata": meta, "status": {"phase": phase}}))
                .expect("pod")
        };
        assert!(answers_for_health(&pod("Running", false)));
        assert!(
            answers_for_health(&pod("Pending", false)),
            "a new agent is judged"
        );
        assert!(!answers_for_health(&pod("Running", true)));
        assert!(
            !answers_for_health(&pod("Succeeded", false)),
            "a job-mode task pod that ran"
        );
        assert!(!answers_for_health(&pod("Failed", false)));
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

    fn pool(spec: serde_json::Value) -> AgentPool {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "generation": 4}, "spec": spec
        }))
        .expect("pool")
    }

    fn task(name: &str, status: serde_json::Value) -> Arc<AgentTask> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name}, "spec": {"pool": "p", "command": ["true"]},
                "status": status
            }))
            .expect("task"),
        )
    }

    fn pod(name: &str, phase: &str) -> Arc<CachedPod> {
        Arc::new(CachedPod::of(
            &serde_json::from_value::<Pod>(json!({
                "metadata": {"name": name, "labels": {LABEL_COMPONENT: COMPONENT_AGENT}},
                "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .expect("pod"),
        ))
    }

    fn decision(direction: ScaleDirection) -> ScaleDecision {
        ScaleDecision {
            desired: 2,
            direction,
            need: 2,
            reason: "r".into(),
            cooldown_left: None,
            hold_left: None,
            stabilization_left: None,
        }
    }

    #[test]
    fn the_next_look_is_the_resync_unless_something_comes_due_sooner() {
        let resync = Duration::from_secs(30);
        let hold = decision(ScaleDirection::Hold);
        assert_eq!(next_look(resync, &hold, false, []), resync);
        // A resync under a second is a second.
        assert_eq!(
            next_look(Duration::ZERO, &hold, false, []),
            Duration::from_secs(1)
        );
        // A window that ends, a check that comes due: just after.
        let ending = ScaleDecision {
            stabilization_left: Some(Duration::from_secs(7)),
            cooldown_left: Some(Duration::from_secs(9)),
            ..hold.clone()
        };
        assert_eq!(
            next_look(resync, &ending, false, []),
            Duration::from_millis(7050)
        );
        assert_eq!(
            next_look(
                resync,
                &hold,
                false,
                [Duration::from_secs(4), Duration::from_secs(12)]
            ),
            Duration::from_millis(4050)
        );
        // A scale may need a second step; a lost race is tried again soon.
        assert_eq!(
            next_look(resync, &decision(ScaleDirection::Up), false, []),
            Duration::from_secs(1)
        );
        assert_eq!(
            next_look(resync, &hold, true, []),
            Duration::from_millis(300)
        );
    }

    #[test]
    fn counting_sees_pending_and_running_tasks_and_busy_and_idle_agents() {
        let tasks = vec![
            task("a", json!({"phase": "Pending"})),
            task("b", json!({"phase": "Running", "agent": "agent-1"})),
            task("c", json!({"phase": "Succeeded", "agent": "agent-2"})),
        ];
        let pods = vec![pod("agent-1", "Running"), pod("agent-2", "Running")];
        let c = Counted::of(&tasks, &pods);
        assert_eq!((c.tasks.pending, c.tasks.running), (1, 1));
        assert_eq!((c.agents.busy, c.agents.idle, c.agents.live), (1, 1, 2));
        assert_eq!(c.pods.len(), 2);
    }

    #[test]
    fn the_autoscalers_input_reads_the_pools_spec_and_counts() {
        let p = pool(json!({
            "image": "i", "minReplicas": 1, "maxReplicas": 5, "concurrency": 2,
            "cooldownSeconds": {"up": 10, "down": -3}, "scaleDownStabilizationSeconds": 60,
            "drain": true, "hold": {"replicas": 3}
        }));
        let counted = Counted::of(&[task("a", json!({"phase": "Pending"}))], &[]);
        let now: Timestamp = "2026-11-27T12:00:00Z".parse().expect("time");
        let input = autoscale_input(&p, &counted, 2, Recommendations::default(), None, None, now);
        assert_eq!(input.pending_tasks, 1);
        assert_eq!((input.min_replicas, input.max_replicas), (1, 5));
        assert_eq!(input.current_replicas, 2);
        assert_eq!(input.concurrency, 2);
        assert_eq!(input.cooldown_up, Duration::from_secs(10));
        assert_eq!(input.cooldown_down, Duration::ZERO, "negative is zero");
        assert_eq!(input.scale_down_window, Duration::from_secs(60));
        assert!(input.draining);
        assert_eq!(input.hold.map(|h| h.replicas), Some(3));
    }

    #[test]
    fn a_deployment_pools_status_says_its_counts_reason_and_conditions() {
        let p = pool(json!({"image": "i", "minReplicas": 0, "maxReplicas": 4}));
        let counted = Counted::of(
            &[task("a", json!({"phase": "Pending"}))],
            &[pod("agent-1", "Running")],
        );
        let now: Timestamp = "2026-11-27T12:00:00Z".parse().expect("time");
        let facts = DeploymentFacts {
            counted: &counted,
            ready: 1,
            desired: 2,
            frozen: Some("release freeze"),
            hold: None,
            capacity: None,
            health: HealthCounts::default(),
            last_scale_time: None,
            reason: "1 pending task needs 2 agents",
            degraded: "",
        };
        let s = deployment_status(&p, &AgentPoolStatus::default(), &facts, now);
        assert_eq!(
            (s.replicas, s.ready_replicas, s.desired_replicas),
            (1, 1, 2)
        );
        assert_eq!(s.pending_tasks, 1);
        assert!(s.frozen);
        assert_eq!(s.frozen_reason.as_deref(), Some("release freeze"));
        assert_eq!(
            s.scale_reason.as_deref(),
            Some("1 pending task needs 2 agents")
        );
        assert_eq!(s.observed_generation, Some(4));
        let ready = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "AgentsStarting");
        assert_eq!(ready.message, "1 of 2 agents ready");
    }

    #[test]
    fn a_job_pools_status_wants_a_job_per_waiting_task_up_to_max_in_flight() {
        let p = pool(json!({"image": "i", "executionMode": "job", "maxReplicas": 3}));
        assert_eq!(max_in_flight(&p), 3);
        let capped = pool(json!({"image": "i", "maxReplicas": 3, "maxInFlight": 2}));
        assert_eq!(max_in_flight(&capped), 2);
        let tasks = [
            task("a", json!({"phase": "Pending"})),
            task("b", json!({"phase": "Pending"})),
            task("c", json!({"phase": "Running", "agent": "c-pod"})),
        ];
        let counts = count_tasks(tasks.iter().map(AsRef::as_ref));
        let now: Timestamp = "2026-11-27T12:00:00Z".parse().expect("time");
        let s = job_status(
            &p,
            &AgentPoolStatus::default(),
            &counts,
            1,
            3,
            HealthCounts::default(),
            "",
            now,
        );
        assert_eq!((s.replicas, s.ready_replicas), (1, 1));
        // One running and two waiting, but at most three in flight.
        assert_eq!(s.desired_replicas, 3);
        assert_eq!(
            s.scale_reason.as_deref(),
            Some("job mode: 1 of at most 3 task Jobs in flight")
        );
        let s = job_status(
            &p,
            &AgentPoolStatus::default(),
            &counts,
            1,
            2,
            HealthCounts::default(),
            "",
            now,
        );
        assert_eq!(s.desired_replicas, 2);
    }

    #[test]
    fn a_tasks_pod_is_its_newest_by_the_task_label() {
        let mk = |name: &str, task: &str, created: &str| {
            Arc::new(CachedPod::of(
                &serde_json::from_value::<Pod>(json!({
                    "metadata": {"name": name, "creationTimestamp": created,
                                 "labels": {LABEL_COMPONENT: COMPONENT_TASK, LABEL_TASK: task}},
                }))
                .expect("pod"),
            ))
        };
        let pods = [
            mk("a-1", "a", "2026-11-27T10:00:00Z"),
            mk("a-2", "a", "2026-11-27T11:00:00Z"),
            mk("b-1", "b", "2026-11-27T12:00:00Z"),
        ];
        let refs: Vec<&Arc<CachedPod>> = pods.iter().collect();
        let found = pod_of_task(&refs, &task("a", json!({})));
        assert_eq!(found.map(|p| p.name_any()).as_deref(), Some("a-2"));
        assert!(pod_of_task(&refs, &task("c", json!({}))).is_none());
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
    fn a_closed_capacity_window_is_cleared_from_the_status_by_the_patch() {
        let open = AgentPoolStatus {
            capacity: Some(CapacityStatus {
                open: vec!["standup".into()],
                min_replicas: Some(2),
                max_replicas: Some(5),
                summary: "standup: min 2 until 20:33, then 0".into(),
            }),
            ..AgentPoolStatus::default()
        };
        let closed = AgentPoolStatus {
            capacity: Some(CapacityStatus {
                summary: "none open; standup from Wed 20:31: min 2".into(),
                ..CapacityStatus::default()
            }),
            ..AgentPoolStatus::default()
        };
        let patch = status_patch(&open, &closed);
        assert_eq!(
            patch["status"]["capacity"],
            json!({"open": [], "minReplicas": null, "maxReplicas": null,
                   "summary": "none open; standup from Wed 20:31: min 2"})
        );
        let gone = status_patch(&closed, &AgentPoolStatus::default());
        assert_eq!(gone["status"]["capacity"], serde_json::Value::Null);
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
