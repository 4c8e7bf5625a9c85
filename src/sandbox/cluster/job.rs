//! The Job controller (kubernetes/pkg/controller/job, NonIndexed mode) and
//! the TTL-after-finished controller, as in 1.33:
//!
//! - pods `<job>-<5 chars>` from the template (whose labels the apiserver
//!   fills with `job-name` and `controller-uid`, both plain and
//!   `batch.kubernetes.io/`-prefixed), up to `parallelism` and the
//!   remaining `completions`;
//! - succeeded and failed pods counted once; `backoffLimit`,
//!   `activeDeadlineSeconds` and `podFailurePolicy` (FailJob, Ignore,
//!   Count on exit codes or pod conditions) end the Job; with
//!   `podReplacementPolicy: Failed` (implied by a pod failure policy) a
//!   replacement waits until the old pod has failed or gone;
//! - the interim conditions SuccessCriteriaMet / FailureTarget come first and
//!   Complete / Failed (same reason and message) only once no pod is
//!   terminating, as 1.31+ controllers do;
//! - `suspend` deletes active pods and sets condition Suspended;
//! - `ttlSecondsAfterFinished` deletes the finished Job (foreground
//!   propagation with a UID precondition, as the TTL controller does).
//!
//! Counting: the real controller puts the `batch.kubernetes.io/job-tracking`
//! finalizer on its pods so none can vanish uncounted. Here a ledger in
//! memory remembers which pods are accounted for, and a pod that disappears
//! before being counted counts by its last known state (failed unless it
//! had succeeded). Pods are thus deleted as soon as the kubelet is done with
//! them, and no finalizer is shown on them. A controller started over a
//! store that already holds Jobs with counts treats their finished pods as
//! already counted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::meta::{self, JOBS, PODS, Writer};
use super::pods;
use super::replicaset::pod_from_template;
use super::{Controller, Pass};
use crate::sandbox::api::Api;
use crate::sandbox::store::{Change, EventType};

/// Most pods created or deleted for one Job in a pass (`MaxPodCreateDeletePerSync`).
const MAX_PER_PASS: usize = 500;

const COMPONENT: &str = "job-controller";

/// What the pod failure policy says about one failed pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Counts towards `backoffLimit` (no rule matched, or action Count).
    Count,
    /// Does not count (action Ignore); the pod is still replaced.
    Ignore,
    /// Fails the Job at once with this message (action FailJob).
    FailJob(String),
}

/// `matchPodFailurePolicy`: the first rule that matches decides.
pub(crate) fn match_pod_failure_policy(policy: Option<&Value>, pod: &Value) -> Verdict {
    let Some(policy) = policy else {
        return Verdict::Count;
    };
    for (index, rule) in meta::array_at(policy, "/rules").iter().enumerate() {
        let action = meta::str_at(rule, "/action");
        let matched = if let Some(req) = rule.get("onExitCodes").filter(|v| !v.is_null()) {
            matching_exit_code(pod, req).map(|(container, code)| {
                format!(
                    "Container {container} for pod {}/{} failed with exit code {code} matching {action} rule at index {index}",
                    meta::namespace(pod),
                    meta::name(pod)
                )
            })
        } else if let Some(patterns) = rule.get("onPodConditions").and_then(Value::as_array) {
            matching_condition(pod, patterns).map(|kind| {
                format!(
                    "Pod {}/{} has condition {kind} matching {action} rule at index {index}",
                    meta::namespace(pod),
                    meta::name(pod)
                )
            })
        } else {
            None
        };
        let Some(message) = matched else {
            continue;
        };
        return match action {
            "Ignore" => Verdict::Ignore,
            "FailJob" => Verdict::FailJob(message),
            // Count, and FailIndex (which counts for a NonIndexed Job).
            _ => Verdict::Count,
        };
    }
    Verdict::Count
}

/// `matchOnExitCodes`: a terminated container (regular, then init) with a
/// non-zero exit code the operator accepts. Returns its name and code.
fn matching_exit_code(pod: &Value, req: &Value) -> Option<(String, i64)> {
    let wanted_name = req.get("containerName").and_then(Value::as_str);
    let values: Vec<i64> = meta::array_at(req, "/values")
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    let operator = meta::str_at(req, "/operator");
    ["/status/containerStatuses", "/status/initContainerStatuses"]
        .iter()
        .flat_map(|ptr| meta::array_at(pod, ptr))
        .find_map(|cs| {
            let code = cs.pointer("/state/terminated/exitCode")?.as_i64()?;
            let name = cs.get("name").and_then(Value::as_str).unwrap_or_default();
            if code == 0 || wanted_name.is_some_and(|w| w != name) {
                return None;
            }
            let hit = match operator {
                "In" => values.contains(&code),
                "NotIn" => !values.contains(&code),
                _ => false,
            };
            hit.then(|| (name.to_string(), code))
        })
}

/// `matchOnPodConditions`: a pod condition with a listed type and status
/// (status defaults to True).
fn matching_condition(pod: &Value, patterns: &[Value]) -> Option<String> {
    meta::array_at(pod, "/status/conditions")
        .iter()
        .find_map(|c| {
            let kind = c.get("type").and_then(Value::as_str)?;
            let status = c.get("status").and_then(Value::as_str).unwrap_or_default();
            patterns
                .iter()
                .any(|p| {
                    p.get("type").and_then(Value::as_str) == Some(kind)
                        && p.get("status").and_then(Value::as_str).unwrap_or("True") == status
                })
                .then(|| kind.to_string())
        })
}

/// The parts of a Job's spec the controller acts on.
#[derive(Debug, Clone)]
pub(crate) struct JobSpec {
    pub completions: Option<i64>,
    pub parallelism: i64,
    pub backoff_limit: i64,
    pub suspend: bool,
    pub active_deadline: Option<i64>,
    /// `onlyReplaceFailedPods`: `podReplacementPolicy: Failed`, or any pod
    /// failure policy (which defaults it so).
    pub only_replace_failed: bool,
    pub policy: Option<Value>,
    pub restart_on_failure: bool,
}

impl JobSpec {
    pub fn of(job: &Value) -> JobSpec {
        let policy = job
            .pointer("/spec/podFailurePolicy")
            .filter(|v| !v.is_null())
            .cloned();
        JobSpec {
            completions: meta::int_at(job, "/spec/completions"),
            parallelism: meta::int_at(job, "/spec/parallelism").unwrap_or(1),
            backoff_limit: meta::int_at(job, "/spec/backoffLimit").unwrap_or(6),
            suspend: meta::bool_at(job, "/spec/suspend"),
            active_deadline: meta::int_at(job, "/spec/activeDeadlineSeconds"),
            only_replace_failed: meta::str_at(job, "/spec/podReplacementPolicy") == "Failed"
                || policy.is_some(),
            policy,
            restart_on_failure: meta::str_at(job, "/spec/template/spec/restartPolicy")
                == "OnFailure",
        }
    }
}

/// `isPodFailed`: Failed phase, or (unless only failed pods are replaced)
/// being deleted before succeeding.
pub(crate) fn is_pod_failed(pod: &Value, only_replace_failed: bool) -> bool {
    if pods::phase(pod) == "Failed" {
        return true;
    }
    !only_replace_failed && meta::is_deleting(pod) && pods::phase(pod) != "Succeeded"
}

/// `pastBackoffLimitOnFailure`: with `restartPolicy: OnFailure` container
/// restarts of running pods count against the backoff limit.
fn past_backoff_limit_on_failure(spec: &JobSpec, pods: &[&Value]) -> bool {
    if !spec.restart_on_failure {
        return false;
    }
    let restarts: i64 = pods
        .iter()
        .filter(|p| matches!(pods::phase(p), "Running" | "Pending"))
        .flat_map(|p| {
            meta::array_at(p, "/status/containerStatuses")
                .iter()
                .chain(meta::array_at(p, "/status/initContainerStatuses"))
        })
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .sum();
    if spec.backoff_limit == 0 {
        restarts > 0
    } else {
        restarts >= spec.backoff_limit
    }
}

/// Is the Job done (condition Complete or Failed is True)?
pub(crate) fn is_finished(job: &Value) -> bool {
    meta::condition_true(job, "Complete") || meta::condition_true(job, "Failed")
}

fn new_condition(kind: &str, status: &str, reason: &str, message: &str, now: i64) -> Value {
    let t = meta::format_time(now);
    json!({"type": kind, "status": status, "lastProbeTime": t, "lastTransitionTime": t,
           "reason": reason, "message": message})
}

/// `ensureJobConditionStatus`: replaces a condition whose status, reason or
/// message differ; adds a missing one unless it would be False. True when
/// the list changed.
fn ensure_condition(
    conds: &mut Vec<Value>,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: i64,
) -> bool {
    if let Some(c) = conds.iter_mut().find(|c| c["type"] == kind) {
        if c["status"] != status || c["reason"] != reason || c["message"] != message {
            *c = new_condition(kind, status, reason, message, now);
            return true;
        }
        return false;
    }
    if status != "False" {
        conds.push(new_condition(kind, status, reason, message, now));
        return true;
    }
    false
}

/// How a Job ends.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Finish {
    success: bool,
    reason: String,
    message: String,
    /// The interim condition is already in status.
    recorded: bool,
}

/// What one pass does for one Job.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JobPlan {
    /// Pods to create.
    pub create: usize,
    /// Pods to delete without counting them (surplus, suspended): name, uid.
    pub remove: Vec<(String, String)>,
    /// Active pods to delete because the Job is finishing.
    pub terminate: Vec<String>,
    /// Pod UIDs the new status accounts for (counted or ignored).
    pub settle: Vec<String>,
    /// The status to write.
    pub status: Map<String, Value>,
    /// Events about the Job: type, reason, message.
    pub events: Vec<(&'static str, String, String)>,
}

/// One `syncJob` for a NonIndexed Job, without I/O. `pods` are the Job's
/// pods now, `vanished` the last state of pods gone before being counted,
/// `settled` the UIDs already accounted for. `None` for a finished Job.
pub(crate) fn plan_job(
    job: &Value,
    pods: &[&Value],
    vanished: &[&Value],
    settled: &HashSet<String>,
    now: i64,
) -> Option<JobPlan> {
    if is_finished(job) {
        return None;
    }
    let spec = JobSpec::of(job);
    let old = meta::status_map(job);
    let mut plan = JobPlan::default();
    let active_pods: Vec<&Value> = pods
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    let mut t = Tally::of(&old, &spec, pods, &active_pods, now);
    let fail_job = count_fresh(&spec, pods, vanished, settled, &mut t, &mut plan);
    let mut finish =
        recorded_finish(&t.conds, fail_job).or_else(|| limit_finish(&spec, pods, &t, now));
    if let Some(f) = &finish {
        end_active(f, &active_pods, pods, settled, &mut t, &mut plan);
    } else if !meta::is_deleting(job) {
        finish = reconcile(&spec, &active_pods, &mut t, &mut plan, now);
    }
    if let Some(f) = &finish {
        record_finish(f, &spec, &mut t, &mut plan, now);
    }
    plan.status = t.into_status(old);
    Some(plan)
}

/// The counts and conditions one pass takes from the old status and
/// writes into the new.
struct Tally {
    succeeded: i64,
    failed: i64,
    active: usize,
    ready: usize,
    terminating: usize,
    start_time: Option<i64>,
    completion_time: Option<Value>,
    conds: Vec<Value>,
}

impl Tally {
    /// The old status's counts, and the pods' as they are now.
    fn of(
        old: &Map<String, Value>,
        spec: &JobSpec,
        pods: &[&Value],
        active_pods: &[&Value],
        now: i64,
    ) -> Tally {
        let mut start_time = old
            .get("startTime")
            .and_then(Value::as_str)
            .and_then(meta::parse_time);
        if start_time.is_none() && !spec.suspend {
            start_time = Some(now);
        }
        Tally {
            succeeded: old.get("succeeded").and_then(Value::as_i64).unwrap_or(0),
            failed: old.get("failed").and_then(Value::as_i64).unwrap_or(0),
            active: active_pods.len(),
            ready: active_pods.iter().filter(|p| pods::is_ready(p)).count(),
            terminating: pods.iter().filter(|p| pods::is_terminating(p)).count(),
            start_time,
            completion_time: old.get("completionTime").cloned(),
            conds: old
                .get("conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// The new status: the old one with these counts and conditions.
    fn into_status(self, old: Map<String, Value>) -> Map<String, Value> {
        let mut status = old;
        if self.conds.is_empty() {
            status.remove("conditions");
        } else {
            status.insert("conditions".into(), Value::Array(self.conds));
        }
        match self.start_time {
            Some(t) => status.insert("startTime".into(), json!(meta::format_time(t))),
            None => status.remove("startTime"),
        };
        if let Some(t) = self.completion_time {
            status.insert("completionTime".into(), t);
        }
        meta::set_omitempty(&mut status, "active", self.active as i64);
        status.insert("ready".into(), json!(self.ready));
        meta::set_omitempty(&mut status, "succeeded", self.succeeded);
        meta::set_omitempty(&mut status, "failed", self.failed);
        status.insert("terminating".into(), json!(self.terminating));
        status.insert("uncountedTerminatedPods".into(), json!({}));
        status
    }
}

/// Counts the newly finished pods, then the pods gone before they were
/// counted, settling each. Returns the message of a pod failure policy's
/// FailJob, if one matched.
fn count_fresh(
    spec: &JobSpec,
    pods: &[&Value],
    vanished: &[&Value],
    settled: &HashSet<String>,
    t: &mut Tally,
    plan: &mut JobPlan,
) -> Option<String> {
    let mut fail_job: Option<String> = None;
    let fresh = pods
        .iter()
        .filter(|p| !settled.contains(meta::uid(p)))
        .map(|p| (*p, is_pod_failed(p, spec.only_replace_failed)))
        .chain(vanished.iter().map(|p| (*p, pods::phase(p) != "Succeeded")));
    for (p, failed_now) in fresh {
        if pods::phase(p) == "Succeeded" {
            t.succeeded += 1;
        } else if failed_now {
            match match_pod_failure_policy(spec.policy.as_ref(), p) {
                Verdict::Ignore => {}
                Verdict::Count => t.failed += 1,
                Verdict::FailJob(m) => {
                    t.failed += 1;
                    fail_job.get_or_insert(m);
                }
            }
        } else {
            continue;
        }
        plan.settle.push(meta::uid(p).to_string());
    }
    fail_job
}

/// The reason and message of condition `kind` when it is True.
fn true_condition(conds: &[Value], kind: &str) -> Option<(String, String)> {
    conds
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
        .map(|c| {
            (
                meta::str_at(c, "/reason").to_string(),
                meta::str_at(c, "/message").to_string(),
            )
        })
}

/// The end an interim condition already records, else the one a pod
/// failure policy's FailJob (`fail_job`) asks for.
fn recorded_finish(conds: &[Value], fail_job: Option<String>) -> Option<Finish> {
    if let Some((reason, message)) = true_condition(conds, "SuccessCriteriaMet") {
        Some(Finish {
            success: true,
            reason,
            message,
            recorded: true,
        })
    } else if let Some((reason, message)) = true_condition(conds, "FailureTarget") {
        Some(Finish {
            success: false,
            reason,
            message,
            recorded: true,
        })
    } else {
        fail_job.map(|message| Finish {
            success: false,
            reason: "PodFailurePolicy".into(),
            message,
            recorded: false,
        })
    }
}

/// A failure by `backoffLimit` or `activeDeadlineSeconds`.
fn limit_finish(spec: &JobSpec, pods: &[&Value], t: &Tally, now: i64) -> Option<Finish> {
    let failure = |reason: &str, message: &str| Finish {
        success: false,
        reason: reason.into(),
        message: message.into(),
        recorded: false,
    };
    if t.failed > spec.backoff_limit || past_backoff_limit_on_failure(spec, pods) {
        return Some(failure(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ));
    }
    if let (Some(deadline), Some(start)) = (spec.active_deadline, t.start_time)
        && !spec.suspend
        && now - start >= deadline
    {
        return Some(failure(
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ));
    }
    None
}

/// A finishing Job's active pods are terminated (`deleteActivePods`); a
/// failing Job counts its unsettled, unsucceeded pods as failed.
fn end_active(
    f: &Finish,
    active_pods: &[&Value],
    pods: &[&Value],
    settled: &HashSet<String>,
    t: &mut Tally,
    plan: &mut JobPlan,
) {
    plan.terminate = active_pods
        .iter()
        .map(|p| meta::name(p).to_string())
        .collect();
    t.terminating += t.active;
    t.active = 0;
    t.ready = 0;
    if f.success {
        return;
    }
    for p in pods
        .iter()
        .filter(|p| !settled.contains(meta::uid(p)) && pods::phase(p) != "Succeeded")
    {
        let uid = meta::uid(p).to_string();
        if !plan.settle.contains(&uid) {
            t.failed += 1;
            plan.settle.push(uid);
        }
    }
}

/// A running Job's pass: pods removed (suspended, surplus) or created,
/// then completion or the Suspended condition. Returns the Job's end when
/// it has reached its completions.
fn reconcile(
    spec: &JobSpec,
    active_pods: &[&Value],
    t: &mut Tally,
    plan: &mut JobPlan,
    now: i64,
) -> Option<Finish> {
    let removed: Vec<&Value> = if spec.suspend {
        active_pods.to_vec()
    } else {
        scale(spec, active_pods, t, plan)
    };
    t.ready -= removed.iter().filter(|p| pods::is_ready(p)).count();
    t.active -= removed.len();
    t.terminating += removed.len();
    plan.remove = removed
        .iter()
        .map(|p| (meta::name(p).to_string(), meta::uid(p).to_string()))
        .collect();

    let complete = match spec.completions {
        None => t.succeeded > 0 && t.active == 0,
        Some(c) => t.succeeded >= c && t.active == 0,
    };
    if complete {
        return Some(Finish {
            success: true,
            reason: "CompletionsReached".into(),
            message: "Reached expected number of succeeded pods".into(),
            recorded: false,
        });
    }
    if spec.suspend {
        if ensure_condition(
            &mut t.conds,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now,
        ) {
            plan.events
                .push(("Normal", "Suspended".into(), "Job suspended".into()));
        }
    } else if ensure_condition(
        &mut t.conds,
        "Suspended",
        "False",
        "JobResumed",
        "Job resumed",
        now,
    ) {
        plan.events
            .push(("Normal", "Resumed".into(), "Job resumed".into()));
        // ActiveDeadlineSeconds counts from the (last) resume.
        t.start_time = Some(now);
    }
    None
}

/// Scales a running, unsuspended Job towards `parallelism` and the
/// remaining completions: returns the surplus pods to remove, or plans the
/// pods to create.
fn scale<'a>(
    spec: &JobSpec,
    active_pods: &[&'a Value],
    t: &mut Tally,
    plan: &mut JobPlan,
) -> Vec<&'a Value> {
    let want = match spec.completions {
        None if t.succeeded > 0 => t.active as i64,
        None => spec.parallelism,
        Some(c) => (c - t.succeeded).min(spec.parallelism).max(0),
    };
    let surplus = t.active as i64 - want;
    if surplus > 0 {
        let n = usize::try_from(surplus).unwrap_or(0).min(MAX_PER_PASS);
        return pods::active_pods_order(active_pods)
            .into_iter()
            .take(n)
            .collect();
    }
    let waiting = if spec.only_replace_failed {
        t.terminating as i64
    } else {
        0
    };
    let diff = want - waiting - t.active as i64;
    if diff > 0 {
        plan.create = usize::try_from(diff).unwrap_or(0).min(MAX_PER_PASS);
        t.active += plan.create;
    }
    Vec::new()
}

/// Records how the Job ends: its interim condition, and once no pod is
/// terminating the terminal one, the completion time and the events.
fn record_finish(f: &Finish, spec: &JobSpec, t: &mut Tally, plan: &mut JobPlan, now: i64) {
    let interim = if f.success {
        "SuccessCriteriaMet"
    } else {
        "FailureTarget"
    };
    if !f.recorded {
        t.conds
            .push(new_condition(interim, "True", &f.reason, &f.message, now));
    }
    if t.terminating != 0 {
        return;
    }
    let terminal = if f.success { "Complete" } else { "Failed" };
    ensure_condition(&mut t.conds, terminal, "True", &f.reason, &f.message, now);
    if !f.success {
        plan.events
            .push(("Warning", f.reason.clone(), f.message.clone()));
        return;
    }
    t.completion_time = Some(json!(meta::format_time(now)));
    if spec.completions.is_some_and(|c| t.succeeded > c) {
        plan.events.push((
            "Warning",
            "TooManySucceededPods".into(),
            "Too many succeeded pods running after completion count reached".into(),
        ));
    }
    plan.events
        .push(("Normal", "Completed".into(), "Job completed".into()));
}

/// When a finished Job with `ttlSecondsAfterFinished` is due for deletion
/// (`timeLeft`): the finishing condition's transition time plus the TTL.
pub(crate) fn ttl_expiry(job: &Value) -> Option<i64> {
    let ttl = meta::int_at(job, "/spec/ttlSecondsAfterFinished")?;
    let finished = meta::array_at(job, "/status/conditions")
        .iter()
        .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")?;
    Some(meta::time_at(finished, "/lastTransitionTime")? + ttl)
}

/// What the controller remembers of one Job's pods.
#[derive(Debug, Default)]
struct Ledger {
    /// Pods counted in status or deliberately not counted.
    settled: HashSet<String>,
    /// Pods not yet settled, as last seen, to count if they vanish.
    alive: HashMap<String, Arc<Value>>,
}

#[derive(Default)]
pub(crate) struct JobController {
    ledgers: HashMap<String, Ledger>,
    /// Final state of Job pods deleted since the last pass.
    gone: HashMap<String, Arc<Value>>,
}

impl Controller for JobController {
    const NAME: &'static str = "job";

    fn watches(&self) -> &'static [&'static str] {
        &["jobs.batch", "pods"]
    }

    fn wants(&self, change: &Change) -> bool {
        super::pod_of_kind(change, "Job")
    }

    fn observe(&mut self, change: &Change) {
        if change.resource == "pods"
            && change.kind == EventType::Deleted
            && meta::controller_of(&change.object).is_some_and(|r| r["kind"] == "Job")
        {
            self.gone
                .insert(meta::uid(&change.object).to_string(), change.object.clone());
        }
    }

    fn reconcile(&mut self, api: &Api, now: i64) -> Pass {
        let (jobs, _) = api.store.list(&JOBS.key(), None);
        let (all_pods, _) = api.store.list(&PODS.key(), None);
        let mut owned: HashMap<&str, Vec<&Arc<Value>>> = HashMap::new();
        for p in &all_pods {
            if let Some(u) = meta::controller_uid(p) {
                owned.entry(u).or_default().push(p);
            }
        }
        let mut w = Writer::new(api, COMPONENT);
        let mut seen: HashSet<String> = HashSet::new();
        for job in &jobs {
            let uid = meta::uid(job).to_string();
            let job_pods = owned.get(uid.as_str()).cloned().unwrap_or_default();
            if is_finished(job) {
                self.ledgers.remove(&uid);
                expire(&mut w, job, now);
                continue;
            }
            seen.insert(uid.clone());
            let ledger = self
                .ledgers
                .entry(uid)
                .or_insert_with(|| seed(job, &job_pods));
            sync_job(&mut w, job, &job_pods, ledger, &self.gone, now);
        }
        self.ledgers.retain(|uid, _| seen.contains(uid));
        self.gone.clear();
        Pass { retry: w.retry }
    }
}

/// A ledger for a Job first seen by this controller: if its status already
/// counts pods, its finished pods are taken as counted.
fn seed(job: &Value, job_pods: &[&Arc<Value>]) -> Ledger {
    let counted = meta::int_at(job, "/status/succeeded").unwrap_or(0)
        + meta::int_at(job, "/status/failed").unwrap_or(0);
    let mut ledger = Ledger::default();
    if counted > 0 {
        ledger.settled = job_pods
            .iter()
            .filter(|p| pods::is_terminal(p))
            .map(|p| meta::uid(p).to_string())
            .collect();
    }
    ledger
}

fn sync_job(
    w: &mut Writer<'_>,
    job: &Value,
    job_pods: &[&Arc<Value>],
    ledger: &mut Ledger,
    gone: &HashMap<String, Arc<Value>>,
    now: i64,
) {
    let present: HashSet<&str> = job_pods.iter().map(|p| meta::uid(p)).collect();
    let vanished: Vec<Arc<Value>> = ledger
        .alive
        .iter()
        .filter(|(uid, _)| !present.contains(uid.as_str()) && !ledger.settled.contains(*uid))
        .map(|(uid, last)| gone.get(uid).cloned().unwrap_or_else(|| last.clone()))
        .collect();
    let pod_refs: Vec<&Value> = job_pods.iter().map(|p| p.as_ref()).collect();
    let vanished_refs: Vec<&Value> = vanished.iter().map(Arc::as_ref).collect();
    let Some(plan) = plan_job(job, &pod_refs, &vanished_refs, &ledger.settled, now) else {
        return;
    };
    let ns = meta::namespace(job);

    for (name, uid) in &plan.remove {
        if w.delete(PODS, ns, name, &json!({})) {
            ledger.settled.insert(uid.clone());
            w.event(
                job,
                "Normal",
                "SuccessfulDelete",
                &format!("Deleted pod: {name}"),
            );
        }
    }
    let mut all_terminated = true;
    for name in &plan.terminate {
        if w.delete(PODS, ns, name, &json!({})) {
            w.event(
                job,
                "Normal",
                "SuccessfulDelete",
                &format!("Deleted pod: {name}"),
            );
        } else if w.api.store.get(&PODS.key(), ns, name).is_some() {
            all_terminated = false;
        }
    }
    if plan.create > 0 {
        let template = job
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(Value::Null);
        let labels = template
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or(Value::Null);
        // The apiserver refuses a selector that misses the template; pods
        // it would not select would never be counted.
        if meta::selector(job).is_some_and(|s| s.matches(&labels)) {
            for _ in 0..plan.create {
                match w.create(PODS, ns, pod_from_template(job, JOBS, &template)) {
                    Ok(p) => w.event(
                        job,
                        "Normal",
                        "SuccessfulCreate",
                        &format!("Created pod: {}", meta::name(&p)),
                    ),
                    Err(e) => {
                        w.event(
                            job,
                            "Warning",
                            "FailedCreate",
                            &format!("Error creating: {}", e.message),
                        );
                        break;
                    }
                }
            }
        }
    }
    // A Job is not declared finished while some pod could not be deleted.
    if !all_terminated {
        w.retry = true;
        return;
    }
    let unchanged = job.get("status").and_then(Value::as_object) == Some(&plan.status);
    if unchanged
        || w.update_status(JOBS, meta::with_status(job, plan.status))
            .is_some()
    {
        ledger.settled.extend(plan.settle);
        for (kind, reason, message) in &plan.events {
            w.event(job, kind, reason, message);
        }
    }
    ledger.alive = job_pods
        .iter()
        .filter(|p| !ledger.settled.contains(meta::uid(p)))
        .map(|p| (meta::uid(p).to_string(), Arc::clone(p)))
        .collect();
    for v in &vanished {
        if !ledger.settled.contains(meta::uid(v)) {
            ledger.alive.insert(meta::uid(v).to_string(), v.clone());
        }
    }
}

/// The TTL-after-finished controller's part.
fn expire(w: &mut Writer<'_>, job: &Value, now: i64) {
    if meta::is_deleting(job) {
        return;
    }
    if ttl_expiry(job).is_some_and(|at| now >= at) {
        let options =
            json!({"propagationPolicy": "Foreground", "preconditions": {"uid": meta::uid(job)}});
        w.delete(JOBS, meta::namespace(job), meta::name(job), &options);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn job(spec: Value) -> Value {
        let mut j = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "namespace": "ops", "uid": "job-uid"},
            "spec": {"completions": 1, "parallelism": 1, "backoffLimit": 6,
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
                     "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
                                  "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}},
        });
        if let (Some(s), Some(extra)) = (j["spec"].as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                s.insert(k.clone(), v.clone());
            }
        }
        j
    }

    fn with_status(mut j: Value, status: Value) -> Value {
        j["status"] = status;
        j
    }

    fn pod(name: &str, phase: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ops", "uid": format!("u-{name}"),
                            "creationTimestamp": meta::format_time(NOW - 60)},
               "spec": {"nodeName": "n0"}, "status": {"phase": phase}})
    }

    fn failed_with(name: &str, container: &str, code: i64) -> Value {
        let mut p = pod(name, "Failed");
        p["status"]["containerStatuses"] =
            json!([{"name": container, "state": {"terminated": {"exitCode": code}}}]);
        p
    }

    fn plan(j: &Value, pods: &[&Value]) -> JobPlan {
        plan_job(j, pods, &[], &HashSet::new(), NOW).expect("not finished")
    }

    fn cond<'a>(status: &'a Map<String, Value>, kind: &str) -> Option<&'a Value> {
        status
            .get("conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
    }

    #[test]
    fn a_new_job_starts_one_pod_per_parallel_slot_within_the_completions_left() {
        let cases = [
            (json!({"completions": 1, "parallelism": 1}), 1),
            (json!({"completions": 5, "parallelism": 2}), 2),
            (json!({"completions": 2, "parallelism": 8}), 2),
            (json!({"completions": null, "parallelism": 3}), 3),
            (json!({"completions": 0, "parallelism": 3}), 0),
        ];
        for (spec, want) in cases {
            let p = plan(&job(spec.clone()), &[]);
            assert_eq!(p.create, want, "{spec}");
        }
    }

    #[test]
    fn a_new_job_records_its_start_and_zero_counts() {
        let p = plan(&job(json!({})), &[]);
        assert_eq!(p.status["startTime"], meta::format_time(NOW));
        assert_eq!(p.status["active"], 1);
        assert_eq!(p.status["ready"], 0);
        assert_eq!(p.status["terminating"], 0);
        assert_eq!(p.status["uncountedTerminatedPods"], json!({}));
        assert_eq!(p.status.get("succeeded"), None);
    }

    #[test]
    fn success_sets_success_criteria_met_then_complete_with_the_same_reason() {
        let done = pod("a", "Succeeded");
        let p = plan(&job(json!({})), &[&done]);
        assert_eq!(p.create, 0);
        assert_eq!(p.status["succeeded"], 1);
        let interim = cond(&p.status, "SuccessCriteriaMet").expect("interim");
        let complete = cond(&p.status, "Complete").expect("complete");
        for c in [interim, complete] {
            assert_eq!(
                (c["status"].as_str(), c["reason"].as_str()),
                (Some("True"), Some("CompletionsReached"))
            );
            assert_eq!(c["message"], "Reached expected number of succeeded pods");
        }
        assert_eq!(p.status["completionTime"], meta::format_time(NOW));
        assert_eq!(p.settle, vec!["u-a".to_string()]);
        assert!(p.events.iter().any(|(_, r, _)| r == "Completed"));
    }

    #[test]
    fn counted_pods_are_not_counted_twice() {
        let failed = pod("a", "Failed");
        let j = with_status(
            job(json!({})),
            json!({"failed": 1, "startTime": meta::format_time(NOW - 10)}),
        );
        let settled: HashSet<String> = ["u-a".to_string()].into();
        let p = plan_job(&j, &[&failed], &[], &settled, NOW).expect("running");
        assert_eq!(p.status["failed"], 1);
        assert!(p.settle.is_empty());
        assert_eq!(p.create, 1, "the failed pod is replaced");
    }

    #[test]
    fn failures_past_the_backoff_limit_fail_the_job() {
        let j = job(json!({"backoffLimit": 1}));
        let (a, b) = (pod("a", "Failed"), pod("b", "Failed"));
        let p = plan(&j, &[&a]);
        assert_eq!(
            (p.status["failed"].as_i64(), p.create),
            (Some(1), 1),
            "one failure is within the limit"
        );
        let p = plan(&j, &[&a, &b]);
        assert_eq!(p.create, 0);
        for kind in ["FailureTarget", "Failed"] {
            let c = cond(&p.status, kind).expect(kind);
            assert_eq!(c["reason"], "BackoffLimitExceeded");
            assert_eq!(c["message"], "Job has reached the specified backoff limit");
        }
        assert_eq!(p.status.get("completionTime"), None);
    }

    #[test]
    fn a_failing_job_stops_its_running_pods_and_waits_for_them_before_failed() {
        let j = job(json!({"backoffLimit": 0, "parallelism": 2, "completions": 2}));
        let (bad, running) = (pod("a", "Failed"), pod("b", "Running"));
        let p = plan(&j, &[&bad, &running]);
        assert_eq!(p.terminate, vec!["b".to_string()]);
        assert_eq!(p.status["failed"], 2, "the stopped pod counts as failed");
        assert_eq!(p.status["terminating"], 1);
        assert!(cond(&p.status, "FailureTarget").is_some());
        assert!(
            cond(&p.status, "Failed").is_none(),
            "not while a pod terminates"
        );
        // Next pass: the pod is gone and was already counted.
        let j2 = with_status(j.clone(), Value::Object(p.status.clone()));
        let settled: HashSet<String> = p.settle.iter().cloned().collect();
        let p2 = plan_job(&j2, &[&bad], &[], &settled, NOW + 1).expect("not yet finished");
        assert_eq!(p2.status["failed"], 2);
        assert_eq!(
            cond(&p2.status, "Failed").expect("failed")["reason"],
            "BackoffLimitExceeded"
        );
    }

    #[test]
    fn the_active_deadline_fails_the_job_counting_from_its_start() {
        let j = with_status(
            job(json!({"activeDeadlineSeconds": 30})),
            json!({"startTime": meta::format_time(NOW - 30)}),
        );
        let running = pod("a", "Running");
        let p = plan(&j, &[&running]);
        assert_eq!(
            cond(&p.status, "FailureTarget").expect("target")["reason"],
            "DeadlineExceeded"
        );
        assert_eq!(
            cond(&p.status, "FailureTarget").expect("target")["message"],
            "Job was active longer than specified deadline"
        );
        let j = with_status(
            job(json!({"activeDeadlineSeconds": 31})),
            json!({"startTime": meta::format_time(NOW - 30)}),
        );
        assert!(cond(&plan(&j, &[&running]).status, "FailureTarget").is_none());
    }

    #[test]
    fn pod_failure_policy_rules_match_like_the_job_controller() {
        let policy = json!({"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}},
        ]});
        let mut disrupted = failed_with("d", "main", 42);
        disrupted["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = json!(137);
        disrupted["status"]["conditions"] = json!([{"type": "DisruptionTarget", "status": "True"}]);
        let cases = [
            (failed_with("a", "main", 42), Verdict::FailJob("Container main for pod ops/a failed with exit code 42 matching FailJob rule at index 0".into())),
            (failed_with("b", "sidecar", 42), Verdict::Count),
            (disrupted, Verdict::Ignore),
            (failed_with("c", "main", 1), Verdict::FailJob("Container main for pod ops/c failed with exit code 1 matching FailJob rule at index 3".into())),
            (failed_with("e", "main", 0), Verdict::Count),
        ];
        for (p, want) in cases {
            assert_eq!(
                match_pod_failure_policy(Some(&policy), &p),
                want,
                "{}",
                meta::name(&p)
            );
        }
        assert_eq!(
            match_pod_failure_policy(None, &failed_with("f", "main", 42)),
            Verdict::Count
        );
    }

    #[test]
    fn a_fail_job_rule_fails_the_job_with_reason_pod_failure_policy() {
        let policy = json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]});
        let j = job(json!({"podFailurePolicy": policy}));
        let bad = failed_with("a", "main", 3);
        let p = plan(&j, &[&bad]);
        let c = cond(&p.status, "Failed").expect("failed at once");
        assert_eq!(c["reason"], "PodFailurePolicy");
        assert_eq!(
            c["message"],
            "Container main for pod ops/a failed with exit code 3 matching FailJob rule at index 0"
        );
    }

    #[test]
    fn ignored_failures_do_not_count_but_are_replaced() {
        let policy = json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]});
        let j = job(json!({"podFailurePolicy": policy, "backoffLimit": 0}));
        let mut evicted = pod("a", "Failed");
        evicted["status"]["conditions"] = json!([{"type": "DisruptionTarget", "status": "True"}]);
        let p = plan(&j, &[&evicted]);
        assert_eq!(p.status.get("failed"), None);
        assert_eq!(p.create, 1);
        assert_eq!(p.settle, vec!["u-a".to_string()]);
    }

    #[test]
    fn terminating_pods_are_replaced_at_once_unless_only_failed_pods_may_be() {
        let mut going = pod("a", "Running");
        going["metadata"]["deletionTimestamp"] = json!(meta::format_time(NOW));
        let p = plan(&job(json!({"backoffLimit": 3})), &[&going]);
        assert_eq!(
            (p.create, p.status["failed"].as_i64()),
            (1, Some(1)),
            "deleted counts as failed"
        );
        let p = plan(&job(json!({"podReplacementPolicy": "Failed"})), &[&going]);
        assert_eq!(
            (p.create, p.status.get("failed")),
            (0, None),
            "waits for the pod to fail or go"
        );
        assert_eq!(p.status["terminating"], 1);
    }

    #[test]
    fn a_pod_that_vanished_uncounted_counts_by_its_last_state() {
        let j = job(json!({"completions": 2, "parallelism": 2}));
        let (ok, lost) = (pod("a", "Succeeded"), pod("b", "Running"));
        let p = plan_job(&j, &[], &[&ok, &lost], &HashSet::new(), NOW).expect("running");
        assert_eq!(
            (p.status["succeeded"].as_i64(), p.status["failed"].as_i64()),
            (Some(1), Some(1))
        );
        assert_eq!(p.create, 1);
    }

    #[test]
    fn suspending_removes_active_pods_uncounted_and_resuming_restarts_the_clock() {
        let running = pod("a", "Running");
        let j = with_status(
            job(json!({"suspend": true})),
            json!({"startTime": meta::format_time(NOW - 100)}),
        );
        let p = plan(&j, &[&running]);
        assert_eq!(p.remove, vec![("a".to_string(), "u-a".to_string())]);
        assert_eq!(p.status.get("failed"), None);
        assert_eq!(
            cond(&p.status, "Suspended").expect("suspended")["reason"],
            "JobSuspended"
        );
        let resumed = with_status(
            job(json!({"suspend": false})),
            Value::Object(p.status.clone()),
        );
        let p = plan(&resumed, &[]);
        let c = cond(&p.status, "Suspended").expect("kept");
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some("JobResumed"))
        );
        assert_eq!(p.status["startTime"], meta::format_time(NOW));
        assert_eq!(p.create, 1);
    }

    #[test]
    fn a_job_created_suspended_has_no_start_time_and_no_pods() {
        let p = plan(&job(json!({"suspend": true})), &[]);
        assert_eq!(p.status.get("startTime"), None);
        assert_eq!(p.create, 0);
    }

    #[test]
    fn lowering_parallelism_removes_the_least_advanced_pods() {
        let pending = pod("pending", "Pending");
        let mut ready = pod("ready", "Running");
        ready["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "lastTransitionTime": meta::format_time(NOW - 5)}]);
        let p = plan(
            &job(json!({"completions": 5, "parallelism": 1})),
            &[&ready, &pending],
        );
        assert_eq!(
            p.remove,
            vec![("pending".to_string(), "u-pending".to_string())]
        );
        assert_eq!(p.status["active"], 1);
        assert_eq!(p.status["ready"], 1);
    }

    #[test]
    fn a_work_queue_job_completes_when_one_pod_succeeded_and_none_run() {
        let (done, running) = (pod("a", "Succeeded"), pod("b", "Running"));
        let j = job(json!({"completions": null, "parallelism": 2}));
        let p = plan(&j, &[&done, &running]);
        assert_eq!(p.create, 0, "no new pods after a success");
        assert!(cond(&p.status, "Complete").is_none());
        let p = plan(&j, &[&done]);
        assert!(cond(&p.status, "Complete").is_some());
    }

    #[test]
    fn restarts_under_on_failure_count_against_the_backoff_limit() {
        let mut j = job(json!({"backoffLimit": 2}));
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
        let mut crashing = pod("a", "Running");
        crashing["status"]["containerStatuses"] = json!([{"name": "main", "restartCount": 2}]);
        assert_eq!(
            cond(&plan(&j, &[&crashing]).status, "FailureTarget").expect("target")["reason"],
            "BackoffLimitExceeded"
        );
    }

    #[test]
    fn finished_jobs_are_left_alone_and_expire_after_their_ttl() {
        let done = with_status(
            job(json!({"ttlSecondsAfterFinished": 100})),
            json!({"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": meta::format_time(NOW - 50)}]}),
        );
        assert!(plan_job(&done, &[], &[], &HashSet::new(), NOW).is_none());
        assert_eq!(ttl_expiry(&done), Some(NOW + 50));
        let mut no_ttl = done.clone();
        if let Some(spec) = no_ttl["spec"].as_object_mut() {
            spec.remove("ttlSecondsAfterFinished");
        }
        assert_eq!(ttl_expiry(&no_ttl), None);
    }

    #[test]
    fn a_settled_plan_writes_nothing_new() {
        let j = job(json!({}));
        let running = pod("a", "Running");
        let first = plan(&j, &[]);
        let j2 = with_status(j, Value::Object(first.status.clone()));
        let second = plan(&j2, &[&running]);
        assert_eq!(second.create, 0);
        assert_eq!(
            second.status, first.status,
            "a steady Job needs no status write"
        );
    }
}
