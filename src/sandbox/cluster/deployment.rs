//! The Deployment controller (kubernetes/pkg/controller/deployment): one
//! ReplicaSet per pod template, named `<deployment>-<pod-template-hash>`,
//! rolled out with the RollingUpdate or Recreate strategy, scaled
//! proportionally when the Deployment is resized mid-rollout, paused when
//! `spec.paused`, and with the status `kubectl rollout status` reads.
//!
//! The pod-template-hash is computed as Kubernetes does (FNV-32a, then
//! `rand.SafeEncodeString` of the decimal sum, with the collision count
//! appended as 8 little-endian bytes), but over the template's canonical
//! JSON rather than Go's `spew` dump of the typed struct: names have the
//! same shape and stability, not the same value as on a real cluster.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::meta::{self, Claim, Claimable, DEPLOYMENTS, PODS, REPLICA_SETS, Writer};
use super::pods;
use super::{Controller, Pass};
use crate::crd::names::fnv1a32;
use crate::sandbox::api::Api;

pub(crate) const REVISION: &str = "deployment.kubernetes.io/revision";
const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
pub(crate) const HASH_LABEL: &str = "pod-template-hash";
const MAX_REV_HISTORY_CHARS: usize = 2000;
const COMPONENT: &str = "deployment-controller";

/// The alphabet of `rand.String` and `SafeEncodeString` (no vowels, no
/// look-alikes).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `rand.SafeEncodeString`.
pub(crate) fn safe_encode(s: &str) -> String {
    s.chars()
        .map(|c| ALPHANUMS[(c as usize) % ALPHANUMS.len()] as char)
        .collect()
}

/// `controller.ComputeHash(template, collisionCount)`.
pub(crate) fn pod_template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut bytes = meta::canonical_json(template).into_bytes();
    if let Some(c) = collision_count {
        let mut le = [0u8; 8];
        le[..4].copy_from_slice(&(c as u32).to_le_bytes());
        bytes.extend_from_slice(&le);
    }
    safe_encode(&fnv1a32(&bytes).to_string())
}

/// `intstr.GetScaledValueFromIntOrPercent`; a missing value is the API's
/// default of 25%, a malformed one 0 (the apiserver would have refused it).
fn scaled_value(v: Option<&Value>, total: i64, round_up: bool) -> i64 {
    match v {
        None | Some(Value::Null) => scaled_value(Some(&json!("25%")), total, round_up),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(pct) => {
                let x = pct * total;
                if round_up {
                    (x + 99).div_euclid(100)
                } else {
                    x.div_euclid(100)
                }
            }
            None => 0,
        },
        Some(_) => 0,
    }
}

/// The resolved strategy of a Deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Strategy {
    pub replicas: i64,
    pub recreate: bool,
    /// `MaxSurge` (0 for Recreate).
    pub max_surge: i64,
    /// `MaxUnavailable` (0 for Recreate or zero replicas, at most replicas).
    pub max_unavailable: i64,
}

impl Strategy {
    pub fn of(d: &Value) -> Strategy {
        let replicas = meta::int_at(d, "/spec/replicas").unwrap_or(1);
        let recreate = meta::str_at(d, "/spec/strategy/type") == "Recreate";
        if recreate {
            return Strategy {
                replicas,
                recreate,
                max_surge: 0,
                max_unavailable: 0,
            };
        }
        let ru = d.pointer("/spec/strategy/rollingUpdate");
        let (surge, unavailable) = resolve_fenceposts(
            ru.and_then(|r| r.get("maxSurge")),
            ru.and_then(|r| r.get("maxUnavailable")),
            replicas,
        );
        Strategy {
            replicas,
            recreate,
            max_surge: surge,
            max_unavailable: if replicas == 0 {
                0
            } else {
                unavailable.min(replicas)
            },
        }
    }

    /// The `max-replicas` annotation value.
    fn max_replicas(&self) -> i64 {
        self.replicas + self.max_surge
    }
}

/// `ResolveFenceposts`: surge rounds up, unavailability down, and both
/// zero would deadlock so unavailability becomes 1.
pub(crate) fn resolve_fenceposts(
    surge: Option<&Value>,
    unavailable: Option<&Value>,
    desired: i64,
) -> (i64, i64) {
    let s = scaled_value(surge, desired, true);
    let u = scaled_value(unavailable, desired, false);
    if s == 0 && u == 0 { (0, 1) } else { (s, u) }
}

/// What the controller reads of a ReplicaSet.
#[derive(Debug, Clone)]
pub(crate) struct RsView {
    pub obj: Value,
    pub name: String,
    pub replicas: i64,
    pub status_replicas: i64,
    pub ready: i64,
    pub available: i64,
    pub created: i64,
}

impl RsView {
    pub fn of(obj: &Value) -> RsView {
        RsView {
            obj: obj.clone(),
            name: meta::name(obj).to_string(),
            replicas: meta::int_at(obj, "/spec/replicas").unwrap_or(1),
            status_replicas: meta::int_at(obj, "/status/replicas").unwrap_or(0),
            ready: meta::int_at(obj, "/status/readyReplicas").unwrap_or(0),
            available: meta::int_at(obj, "/status/availableReplicas").unwrap_or(0),
            created: meta::created(obj),
        }
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    }

    fn annotation_int(&self, key: &str) -> Option<i64> {
        self.annotation(key).and_then(|s| s.parse().ok())
    }

    /// The `deployment.kubernetes.io/revision` annotation (0 when absent).
    pub fn revision(&self) -> i64 {
        self.annotation_int(REVISION).unwrap_or(0)
    }
}

/// Creation time, then name (`ReplicaSetsByCreationTimestamp`).
fn by_creation(a: &RsView, b: &RsView) -> std::cmp::Ordering {
    a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name))
}

/// `NewRSNewReplicas`: how far the new ReplicaSet may grow now. `all`
/// includes `new`.
pub(crate) fn new_rs_replicas(s: &Strategy, all: &[RsView], new: &RsView) -> i64 {
    if s.recreate {
        return s.replicas;
    }
    let current: i64 = all.iter().map(|r| r.replicas).sum();
    let max_total = s.replicas + s.max_surge;
    if current >= max_total {
        return new.replicas;
    }
    let up = (max_total - current).min(s.replicas - new.replicas);
    new.replicas + up
}

/// `reconcileNewReplicaSet`: the new ReplicaSet's next size, if it changes.
pub(crate) fn reconcile_new(s: &Strategy, all: &[RsView], new: &RsView) -> Option<i64> {
    let target = if new.replicas == s.replicas {
        return None;
    } else if new.replicas > s.replicas {
        s.replicas
    } else {
        new_rs_replicas(s, all, new)
    };
    (target != new.replicas).then_some(target)
}

/// `reconcileOldReplicaSets`: new sizes for old ReplicaSets (indices into
/// `old`), first taking out unhealthy replicas, then as many available ones
/// as `maxUnavailable` allows.
pub(crate) fn reconcile_old(s: &Strategy, old: &[RsView], new: &RsView) -> Vec<(usize, i64)> {
    let old_pods: i64 = old.iter().map(|r| r.replicas).sum();
    if old_pods == 0 {
        return Vec::new();
    }
    let all_pods = old_pods + new.replicas;
    let min_available = s.replicas - s.max_unavailable;
    let new_unavailable = new.replicas - new.available;
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..old.len()).collect();
    order.sort_by(|&a, &b| by_creation(&old[a], &old[b]));
    let mut sizes: Vec<i64> = old.iter().map(|r| r.replicas).collect();

    // cleanupUnhealthyReplicas
    let mut cleaned = 0;
    for &i in &order {
        if cleaned >= max_scaled_down {
            break;
        }
        if sizes[i] == 0 || sizes[i] == old[i].available {
            continue;
        }
        let n = (max_scaled_down - cleaned).min(sizes[i] - old[i].available);
        sizes[i] -= n;
        cleaned += n;
    }

    // scaleDownOldReplicaSetsForRollingUpdate
    let available: i64 = old.iter().map(|r| r.available).sum::<i64>() + new.available;
    if available > min_available {
        let total = available - min_available;
        let mut done = 0;
        for &i in &order {
            if done >= total {
                break;
            }
            if sizes[i] == 0 {
                continue;
            }
            let n = sizes[i].min(total - done);
            sizes[i] -= n;
            done += n;
        }
    }
    (0..old.len())
        .filter(|&i| sizes[i] != old[i].replicas)
        .map(|i| (i, sizes[i]))
        .collect()
}

/// `isScalingEvent`: an active ReplicaSet was sized for another replica count.
pub(crate) fn is_scaling_event(s: &Strategy, all: &[RsView]) -> bool {
    all.iter().filter(|r| r.replicas > 0).any(|r| {
        r.annotation_int(DESIRED_REPLICAS)
            .is_some_and(|d| d != s.replicas)
    })
}

/// `DeploymentController.scale`: resizes ReplicaSets when `spec.replicas`
/// changed. Returns (index into `all`, new size, whether annotations must
/// be refreshed even at the same size).
pub(crate) fn proportional_scale(
    s: &Strategy,
    all: &[RsView],
    new: Option<usize>,
    status_replicas: i64,
) -> Vec<(usize, i64, bool)> {
    let active: Vec<usize> = (0..all.len()).filter(|&i| all[i].replicas > 0).collect();
    // FindActiveOrLatest
    let single = match active.len() {
        0 => new.or_else(|| {
            (0..all.len())
                .filter(|&i| Some(i) != new)
                .max_by(|&a, &b| by_creation(&all[a], &all[b]))
        }),
        1 => Some(active[0]),
        _ => None,
    };
    if active.len() <= 1 {
        return match single {
            Some(i) if all[i].replicas != s.replicas => vec![(i, s.replicas, false)],
            _ => Vec::new(),
        };
    }
    // IsSaturated: the new ReplicaSet alone serves the Deployment.
    if let Some(n) = new {
        let r = &all[n];
        if r.replicas == s.replicas
            && r.annotation_int(DESIRED_REPLICAS) == Some(s.replicas)
            && r.available == s.replicas
        {
            return active
                .into_iter()
                .filter(|&i| i != n)
                .map(|i| (i, 0, false))
                .collect();
        }
    }
    if s.recreate {
        return Vec::new();
    }
    let allowed = if s.replicas > 0 {
        s.replicas + s.max_surge
    } else {
        0
    };
    let total: i64 = active.iter().map(|&i| all[i].replicas).sum();
    let to_add = allowed - total;
    let mut order = active;
    if to_add > 0 {
        // ReplicaSetsBySizeNewer
        order.sort_by(|&a, &b| {
            all[b]
                .replicas
                .cmp(&all[a].replicas)
                .then_with(|| by_creation(&all[b], &all[a]))
        });
    } else if to_add < 0 {
        // ReplicaSetsBySizeOlder
        order.sort_by(|&a, &b| {
            all[b]
                .replicas
                .cmp(&all[a].replicas)
                .then_with(|| by_creation(&all[a], &all[b]))
        });
    }
    let mut added = 0;
    let mut sizes: Vec<i64> = Vec::with_capacity(order.len());
    for &i in &order {
        let r = &all[i];
        if to_add != 0 {
            let p = proportion(s, r, to_add, added, status_replicas);
            sizes.push(r.replicas + p);
            added += p;
        } else {
            sizes.push(r.replicas);
        }
    }
    if to_add != 0
        && let Some(first) = sizes.first_mut()
    {
        *first = (*first + to_add - added).max(0);
    }
    order
        .into_iter()
        .zip(sizes)
        .map(|(i, size)| (i, size, true))
        .collect()
}

/// `GetProportion` with `getReplicaSetFraction`.
fn proportion(s: &Strategy, r: &RsView, to_add: i64, added: i64, status_replicas: i64) -> i64 {
    if r.replicas == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = if s.replicas == 0 {
        -r.replicas
    } else {
        let annotated = r.annotation_int(MAX_REPLICAS).unwrap_or(status_replicas);
        if annotated <= 0 {
            0
        } else {
            let size = (r.replicas * s.max_replicas()) as f64 / annotated as f64;
            size.round() as i64 - r.replicas
        }
    };
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// A template without the pod-template-hash label, with empty maps and
/// nulls dropped (Go's semantic equality treats them as absent).
fn normalized_template(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(labels) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH_LABEL);
    }
    prune(&mut t);
    t
}

fn prune(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                prune(x);
            }
            m.retain(|_, x| {
                !(x.is_null()
                    || x.as_object().is_some_and(Map::is_empty)
                    || x.as_array().is_some_and(Vec::is_empty))
            });
        }
        Value::Array(a) => a.iter_mut().for_each(prune),
        _ => {}
    }
}

/// `EqualIgnoreHash`.
pub(crate) fn equal_ignore_hash(a: &Value, b: &Value) -> bool {
    normalized_template(a) == normalized_template(b)
}

fn new_condition(kind: &str, status: &str, reason: &str, message: &str, now: i64) -> Value {
    let t = meta::format_time(now);
    json!({"type": kind, "status": status, "lastUpdateTime": t, "lastTransitionTime": t,
           "reason": reason, "message": message})
}

/// `SetDeploymentCondition`: no change for the same status and reason; the
/// transition time survives a change of reason at the same status.
fn set_condition(conds: &mut Vec<Value>, mut c: Value) {
    let kind = c["type"].clone();
    if let Some(cur) = conds.iter().find(|x| x["type"] == kind) {
        if cur["status"] == c["status"] && cur["reason"] == c["reason"] {
            return;
        }
        if cur["status"] == c["status"] {
            c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
    }
    conds.retain(|x| x["type"] != kind);
    conds.push(c);
}

fn conditions_of(status: &Map<String, Value>) -> Vec<Value> {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn put_conditions(status: &mut Map<String, Value>, conds: Vec<Value>) {
    if conds.is_empty() {
        status.remove("conditions");
    } else {
        status.insert("conditions".into(), Value::Array(conds));
    }
}

fn find_condition<'a>(status: &'a Map<String, Value>, kind: &str) -> Option<&'a Value> {
    status
        .get("conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == kind)
}

fn count(status: &Map<String, Value>, key: &str) -> i64 {
    status.get(key).and_then(Value::as_i64).unwrap_or(0)
}

/// `calculateStatus`: counts summed over the ReplicaSets, and condition
/// Available. Other conditions are kept from `working`.
pub(crate) fn calculate_status(
    d: &Value,
    s: &Strategy,
    all: &[RsView],
    new: Option<&RsView>,
    working: &Map<String, Value>,
    now: i64,
) -> Map<String, Value> {
    let available: i64 = all.iter().map(|r| r.available).sum();
    let total: i64 = all.iter().map(|r| r.replicas).sum();
    let mut status = working.clone();
    meta::set_omitempty(
        &mut status,
        "observedGeneration",
        meta::int_at(d, "/metadata/generation").unwrap_or(0),
    );
    meta::set_omitempty(
        &mut status,
        "replicas",
        all.iter().map(|r| r.status_replicas).sum(),
    );
    meta::set_omitempty(
        &mut status,
        "updatedReplicas",
        new.map_or(0, |r| r.status_replicas),
    );
    meta::set_omitempty(
        &mut status,
        "readyReplicas",
        all.iter().map(|r| r.ready).sum(),
    );
    meta::set_omitempty(&mut status, "availableReplicas", available);
    meta::set_omitempty(
        &mut status,
        "unavailableReplicas",
        (total - available).max(0),
    );
    let mut conds = conditions_of(&status);
    let c = if available >= s.replicas - s.max_unavailable {
        new_condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    } else {
        new_condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    };
    set_condition(&mut conds, c);
    put_conditions(&mut status, conds);
    status
}

/// `HasProgressDeadline`.
fn has_progress_deadline(d: &Value) -> bool {
    meta::int_at(d, "/spec/progressDeadlineSeconds").is_some_and(|s| s != i64::from(i32::MAX))
}

/// `DeploymentComplete`.
pub(crate) fn deployment_complete(d: &Value, s: &Strategy, status: &Map<String, Value>) -> bool {
    count(status, "updatedReplicas") == s.replicas
        && count(status, "replicas") == s.replicas
        && count(status, "availableReplicas") == s.replicas
        && count(status, "observedGeneration")
            >= meta::int_at(d, "/metadata/generation").unwrap_or(0)
}

/// `DeploymentProgressing`: any count moved the right way since `old`.
fn deployment_progressing(old: &Map<String, Value>, new: &Map<String, Value>) -> bool {
    let old_old = count(old, "replicas") - count(old, "updatedReplicas");
    let new_old = count(new, "replicas") - count(new, "updatedReplicas");
    count(new, "updatedReplicas") > count(old, "updatedReplicas")
        || new_old < old_old
        || count(new, "readyReplicas") > count(old, "readyReplicas")
        || count(new, "availableReplicas") > count(old, "availableReplicas")
}

/// `syncRolloutStatus` minus the write: condition Progressing (and
/// ReplicaFailure copied from the ReplicaSets) on top of `calculate_status`.
/// `stored` is the status as read, `working` the one this pass built so far.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rollout_status(
    d: &Value,
    s: &Strategy,
    all: &[RsView],
    new: Option<&RsView>,
    stored: &Map<String, Value>,
    working: &Map<String, Value>,
    now: i64,
) -> Map<String, Value> {
    let mut status = calculate_status(d, s, all, new, working, now);
    let mut conds = conditions_of(&status);
    let deadline = has_progress_deadline(d);
    if !deadline {
        conds.retain(|c| c["type"] != "Progressing");
    }
    let current = find_condition(working, "Progressing").cloned();
    let complete_before = count(&status, "replicas") == count(&status, "updatedReplicas")
        && current
            .as_ref()
            .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
    if deadline && !complete_before {
        let subject = |what: &str| match new {
            Some(r) => format!("ReplicaSet \"{}\" {what}", r.name),
            None => format!("Deployment \"{}\" {what}", meta::name(d)),
        };
        if deployment_complete(d, s, &status) {
            set_condition(
                &mut conds,
                new_condition(
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    &subject("has successfully progressed."),
                    now,
                ),
            );
        } else if deployment_progressing(stored, &status) {
            let mut c = new_condition(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                &subject("is progressing."),
                now,
            );
            if let Some(cur) = &current {
                if cur["status"] == "True" {
                    c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
                }
                conds.retain(|x| x["type"] != "Progressing");
            }
            set_condition(&mut conds, c);
        } else if timed_out(d, &conds, now) {
            set_condition(
                &mut conds,
                new_condition(
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    &subject("has timed out progressing."),
                    now,
                ),
            );
        }
    }
    match replica_failure(all, new) {
        Some(c) => set_condition(&mut conds, c),
        None => conds.retain(|c| c["type"] != "ReplicaFailure"),
    }
    put_conditions(&mut status, conds);
    status
}

/// `DeploymentTimedOut`.
fn timed_out(d: &Value, conds: &[Value], now: i64) -> bool {
    let Some(c) = conds.iter().find(|c| c["type"] == "Progressing") else {
        return false;
    };
    match c["reason"].as_str() {
        Some("NewReplicaSetAvailable") => false,
        Some("ProgressDeadlineExceeded") => true,
        _ => {
            let deadline = meta::int_at(d, "/spec/progressDeadlineSeconds").unwrap_or(600);
            meta::time_at(c, "/lastUpdateTime").is_some_and(|t| t + deadline < now)
        }
    }
}

/// `getReplicaFailures`: the new ReplicaSet's ReplicaFailure condition, else
/// an old one's, as a Deployment condition.
fn replica_failure(all: &[RsView], new: Option<&RsView>) -> Option<Value> {
    let from = |r: &RsView| {
        meta::condition(&r.obj, "ReplicaFailure").map(|c| {
            json!({"type": "ReplicaFailure", "status": c["status"], "reason": c["reason"], "message": c["message"],
                   "lastUpdateTime": c["lastTransitionTime"], "lastTransitionTime": c["lastTransitionTime"]})
        })
    };
    new.and_then(from).or_else(|| {
        all.iter()
            .filter(|r| new.is_none_or(|n| n.name != r.name))
            .find_map(from)
    })
}

/// `SetNewReplicaSetAnnotations`: copies the Deployment's annotations,
/// raises the revision (keeping the old one in revision-history when a
/// ReplicaSet is brought back), and for a new ReplicaSet sets the replica
/// annotations. Returns whether anything changed.
pub(crate) fn set_new_rs_annotations(
    d: &Value,
    s: &Strategy,
    rs: &mut Value,
    new_revision: i64,
    exists: bool,
) -> bool {
    let mut changed = false;
    let d_ann = d
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let Some(meta_obj) = rs.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let ann = meta_obj.entry("annotations").or_insert_with(|| json!({}));
    if !ann.is_object() {
        *ann = json!({});
    }
    let Some(ann) = ann.as_object_mut() else {
        return false;
    };
    for (k, v) in &d_ann {
        let skip = matches!(
            k.as_str(),
            LAST_APPLIED
                | REVISION
                | REVISION_HISTORY
                | DESIRED_REPLICAS
                | MAX_REPLICAS
                | ROLLBACK_TO
        );
        if !skip && ann.get(k) != Some(v) {
            ann.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    let old = ann
        .get(REVISION)
        .and_then(Value::as_str)
        .map(str::to_string);
    let old_n = match &old {
        Some(o) => match o.parse::<i64>() {
            Ok(n) => n,
            Err(_) => return changed,
        },
        None => 0,
    };
    if old_n < new_revision {
        ann.insert(REVISION.into(), json!(new_revision.to_string()));
        changed = true;
        if let Some(old) = old {
            let history = ann
                .get(REVISION_HISTORY)
                .and_then(Value::as_str)
                .unwrap_or_default();
            let mut revisions: Vec<&str> = if history.is_empty() {
                Vec::new()
            } else {
                history.split(',').collect()
            };
            let mut total = history.len() + old.len() + 1;
            let mut start = 0;
            while total > MAX_REV_HISTORY_CHARS && start < revisions.len() {
                total -= revisions[start].len() + 1;
                start += 1;
            }
            if total <= MAX_REV_HISTORY_CHARS {
                let mut kept: Vec<&str> = revisions.split_off(start);
                kept.push(&old);
                let joined = kept.join(",");
                ann.insert(REVISION_HISTORY.into(), json!(joined));
            }
        }
    }
    if !exists {
        changed |= set_replicas_annotations(ann, s);
    }
    changed
}

/// `SetReplicasAnnotations`.
fn set_replicas_annotations(ann: &mut Map<String, Value>, s: &Strategy) -> bool {
    let desired = json!(s.replicas.to_string());
    let max = json!(s.max_replicas().to_string());
    let changed =
        ann.get(DESIRED_REPLICAS) != Some(&desired) || ann.get(MAX_REPLICAS) != Some(&max);
    ann.insert(DESIRED_REPLICAS.into(), desired);
    ann.insert(MAX_REPLICAS.into(), max);
    changed
}

/// The ReplicaSet a Deployment's template becomes (`getNewReplicaSet`).
pub(crate) fn new_replica_set(
    d: &Value,
    s: &Strategy,
    hash: &str,
    replicas: i64,
    revision: i64,
) -> Value {
    let mut template = d
        .pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    if !template["metadata"]["labels"].is_object() {
        template["metadata"]["labels"] = json!({});
    }
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let mut selector = d
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !selector["matchLabels"].is_object() {
        selector["matchLabels"] = json!({});
    }
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    let mut rs = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{}-{hash}", meta::name(d)),
            "namespace": meta::namespace(d),
            "labels": template["metadata"]["labels"].clone(),
            "ownerReferences": [meta::controller_ref(d, DEPLOYMENTS)],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": meta::int_at(d, "/spec/minReadySeconds").unwrap_or(0),
            "selector": selector,
            "template": template,
        },
    });
    set_new_rs_annotations(d, s, &mut rs, revision, false);
    rs
}

pub(crate) struct DeploymentController;

impl Controller for DeploymentController {
    const NAME: &'static str = "deployment";

    fn watches(&self) -> &'static [&'static str] {
        &["deployments.apps", "replicasets.apps", "pods"]
    }

    fn wants(&self, change: &crate::sandbox::store::Change) -> bool {
        super::pod_of_kind(change, "ReplicaSet")
    }

    fn reconcile(&mut self, api: &Api, now: i64) -> Pass {
        let (deployments, _) = api.store.list(&DEPLOYMENTS.key(), None);
        let (sets, _) = api.store.list(&REPLICA_SETS.key(), None);
        let (all_pods, _) = api.store.list(&PODS.key(), None);
        // Grouped once a pass, not filtered again for every Deployment.
        let sets_by_ns: HashMap<&str, Claimable<'_>> =
            meta::by_namespace(sets.iter().map(Arc::as_ref))
                .into_iter()
                .map(|(ns, sets)| (ns, Claimable::new(sets)))
                .collect();
        let pods_by_ns = meta::by_namespace(all_pods.iter().map(Arc::as_ref));
        let no_sets = Claimable::new(Vec::new());
        let mut w = Writer::new(api, COMPONENT);
        for d in &deployments {
            let ns = meta::namespace(d);
            let ns_sets = sets_by_ns.get(ns).unwrap_or(&no_sets);
            let ns_pods = pods_by_ns.get(ns).map(Vec::as_slice).unwrap_or_default();
            let mut sync = DeploymentSync::new(&mut w, d, now);
            sync.run(ns_sets, ns_pods);
        }
        Pass { retry: w.retry }
    }
}

/// One Deployment's pass.
struct DeploymentSync<'w, 'a> {
    w: &'w mut Writer<'a>,
    d: Value,
    s: Strategy,
    stored: Map<String, Value>,
    working: Map<String, Value>,
    /// Claimed ReplicaSets, oldest first.
    rss: Vec<RsView>,
    now: i64,
}

impl<'w, 'a> DeploymentSync<'w, 'a> {
    fn new(w: &'w mut Writer<'a>, d: &Value, now: i64) -> Self {
        let stored = meta::status_map(d);
        DeploymentSync {
            w,
            d: d.clone(),
            s: Strategy::of(d),
            working: stored.clone(),
            stored,
            rss: Vec::new(),
            now,
        }
    }

    fn run(&mut self, ns_sets: &Claimable<'_>, ns_pods: &[&Value]) {
        let Some(selector) = meta::selector(&self.d) else {
            return;
        };
        // A selector matching everything would adopt every ReplicaSet in
        // the namespace; the real controller refuses to act on it.
        if selector.is_empty() {
            return;
        }
        let d = self.d.clone();
        for rs in ns_sets.candidates(&d) {
            match meta::claim(&d, &selector, rs) {
                Claim::Owned => self.rss.push(RsView::of(rs)),
                Claim::Adopt => {
                    if let Some(v) = self.w.adopt(REPLICA_SETS, rs, &d, DEPLOYMENTS) {
                        self.rss.push(RsView::of(&v));
                    }
                }
                Claim::Release => {
                    let _ = self.w.release(REPLICA_SETS, rs, meta::uid(&d));
                }
                Claim::Ignore => {}
            }
        }
        self.rss.sort_by(by_creation);

        if meta::is_deleting(&d) {
            let new = self.find_new();
            self.write_status(calculate_status(
                &d,
                &self.s,
                &self.rss,
                new.map(|i| &self.rss[i]),
                &self.working,
                self.now,
            ));
            return;
        }
        self.check_paused_conditions();
        let paused = meta::bool_at(&d, "/spec/paused");
        if paused || is_scaling_event(&self.s, &self.rss) {
            self.sync_scale(paused);
        } else if self.s.recreate {
            self.rollout_recreate(ns_pods);
        } else {
            self.rollout_rolling();
        }
    }

    /// `FindNewReplicaSet`: the oldest ReplicaSet with the current template.
    fn find_new(&self) -> Option<usize> {
        let template = self.d.pointer("/spec/template").unwrap_or(&Value::Null);
        self.rss.iter().position(|r| {
            equal_ignore_hash(
                r.obj.pointer("/spec/template").unwrap_or(&Value::Null),
                template,
            )
        })
    }

    fn old_indices(&self, new: Option<usize>) -> Vec<usize> {
        (0..self.rss.len()).filter(|&i| Some(i) != new).collect()
    }

    /// `checkPausedConditions`.
    fn check_paused_conditions(&mut self) {
        if !has_progress_deadline(&self.d) {
            return;
        }
        let cur = find_condition(&self.working, "Progressing");
        if cur.is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
            return;
        }
        let paused_cond = cur.is_some_and(|c| c["reason"] == "DeploymentPaused");
        let paused = meta::bool_at(&self.d, "/spec/paused");
        let c = if paused && !paused_cond {
            new_condition(
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused",
                self.now,
            )
        } else if !paused && paused_cond {
            new_condition(
                "Progressing",
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed",
                self.now,
            )
        } else {
            return;
        };
        let mut conds = conditions_of(&self.working);
        set_condition(&mut conds, c);
        put_conditions(&mut self.working, conds);
    }

    /// `getNewReplicaSet`: syncs the existing new ReplicaSet's revision, or
    /// creates it when `create`. Returns its index.
    fn get_new(&mut self, create: bool) -> Option<usize> {
        let existing = self.find_new();
        let max_old = self
            .old_indices(existing)
            .iter()
            .map(|&i| self.rss[i].revision())
            .max()
            .unwrap_or(0);
        let new_revision = max_old + 1;
        if let Some(i) = existing {
            let mut obj = self.rss[i].obj.clone();
            let changed = set_new_rs_annotations(&self.d, &self.s, &mut obj, new_revision, true);
            let min_ready = meta::int_at(&self.d, "/spec/minReadySeconds").unwrap_or(0);
            let min_ready_changed =
                meta::int_at(&obj, "/spec/minReadySeconds").unwrap_or(0) != min_ready;
            if changed || min_ready_changed {
                obj["spec"]["minReadySeconds"] = json!(min_ready);
                if let Some(v) = self.w.update(REPLICA_SETS, obj) {
                    self.rss[i] = RsView::of(&v);
                }
                return Some(i);
            }
            let revision = self.rss[i].revision();
            self.set_deployment_revision(revision);
            if has_progress_deadline(&self.d)
                && find_condition(&self.working, "Progressing").is_none()
            {
                let msg = format!("Found new replica set \"{}\"", self.rss[i].name);
                let mut conds = conditions_of(&self.working);
                set_condition(
                    &mut conds,
                    new_condition("Progressing", "True", "FoundNewReplicaSet", &msg, self.now),
                );
                put_conditions(&mut self.working, conds);
            }
            return Some(i);
        }
        if !create {
            return None;
        }
        let collisions = self.working.get("collisionCount").and_then(Value::as_i64);
        let hash = pod_template_hash(
            self.d.pointer("/spec/template").unwrap_or(&Value::Null),
            collisions,
        );
        let mut draft = RsView::of(&new_replica_set(&self.d, &self.s, &hash, 0, new_revision));
        draft.replicas = 0;
        let mut all = self.rss.clone();
        all.push(draft.clone());
        let replicas = new_rs_replicas(&self.s, &all, &draft);
        let rs = new_replica_set(&self.d, &self.s, &hash, replicas, new_revision);
        let rs_name = meta::name(&rs).to_string();
        let ns = meta::namespace(&self.d).to_string();
        let created = match self.w.create(REPLICA_SETS, &ns, rs) {
            Ok(v) => v,
            Err(e) if e.reason == "AlreadyExists" => {
                let theirs = self.w.api.store.get(&REPLICA_SETS.key(), &ns, &rs_name);
                let same = theirs.as_ref().is_some_and(|t| {
                    meta::controller_uid(t) == Some(meta::uid(&self.d))
                        && equal_ignore_hash(
                            t.pointer("/spec/template").unwrap_or(&Value::Null),
                            self.d.pointer("/spec/template").unwrap_or(&Value::Null),
                        )
                });
                if !same {
                    // A hash collision: bump collisionCount; the next pass
                    // computes another name.
                    self.working
                        .insert("collisionCount".into(), json!(collisions.unwrap_or(0) + 1));
                    let status = self.working.clone();
                    self.write_status(status);
                }
                return None;
            }
            Err(_) => return None,
        };
        if replicas > 0 {
            let msg = format!("Scaled up replica set {rs_name} from 0 to {replicas}");
            let d = self.d.clone();
            self.w.event(&d, "Normal", "ScalingReplicaSet", &msg);
        }
        self.rss.push(RsView::of(&created));
        self.set_deployment_revision(new_revision);
        if has_progress_deadline(&self.d) {
            let msg = format!("Created new replica set \"{rs_name}\"");
            let mut conds = conditions_of(&self.working);
            set_condition(
                &mut conds,
                new_condition(
                    "Progressing",
                    "True",
                    "NewReplicaSetCreated",
                    &msg,
                    self.now,
                ),
            );
            put_conditions(&mut self.working, conds);
        }
        Some(self.rss.len() - 1)
    }

    /// `SetDeploymentRevision`, written at once (through the object, since
    /// a status write keeps metadata here).
    fn set_deployment_revision(&mut self, revision: i64) {
        let want = revision.to_string();
        let current = self
            .d
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(REVISION))
            .and_then(Value::as_str);
        if current == Some(want.as_str()) {
            return;
        }
        let mut d = self.d.clone();
        if !d["metadata"]["annotations"].is_object() {
            d["metadata"]["annotations"] = json!({});
        }
        d["metadata"]["annotations"][REVISION] = json!(want);
        if let Some(v) = self.w.update(DEPLOYMENTS, d) {
            self.d = v;
        }
    }

    /// Scales one ReplicaSet, refreshing its replica annotations; with
    /// `only_if_resized` the write is skipped when the size is unchanged
    /// (`scaleReplicaSetAndRecordEvent`). True when the size changed.
    fn scale(&mut self, i: usize, to: i64, only_if_resized: bool) -> bool {
        let from = self.rss[i].replicas;
        if only_if_resized && from == to {
            return false;
        }
        let mut obj = self.rss[i].obj.clone();
        let mut ann = obj
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let ann_changed = set_replicas_annotations(&mut ann, &self.s);
        if from == to && !ann_changed {
            return false;
        }
        obj["metadata"]["annotations"] = Value::Object(ann);
        obj["spec"]["replicas"] = json!(to);
        let Some(v) = self.w.update(REPLICA_SETS, obj) else {
            return false;
        };
        self.rss[i] = RsView::of(&v);
        if from != to {
            let op = if from < to { "up" } else { "down" };
            let msg = format!(
                "Scaled {op} replica set {} from {from} to {to}",
                self.rss[i].name
            );
            let d = self.d.clone();
            self.w.event(&d, "Normal", "ScalingReplicaSet", &msg);
        }
        from != to
    }

    /// `sync`: scaling (and, paused, clean-up) without rolling out.
    fn sync_scale(&mut self, paused: bool) {
        let new = self.get_new(false);
        let status_replicas = count(&self.working, "replicas");
        for (i, to, refresh) in proportional_scale(&self.s, &self.rss, new, status_replicas) {
            self.scale(i, to, !refresh);
        }
        if paused {
            let old = self.old_indices(new);
            self.cleanup(&old);
        }
        let status = calculate_status(
            &self.d,
            &self.s,
            &self.rss,
            new.map(|i| &self.rss[i]),
            &self.working,
            self.now,
        );
        self.write_status(status);
    }

    fn rollout_rolling(&mut self) {
        let Some(new) = self.get_new(true) else {
            self.sync_rollout_status(None);
            return;
        };
        if let Some(to) = reconcile_new(&self.s, &self.rss, &self.rss[new])
            && self.scale(new, to, true)
        {
            self.sync_rollout_status(Some(new));
            return;
        }
        let old = self.old_indices(Some(new));
        let old_views: Vec<RsView> = old.iter().map(|&i| self.rss[i].clone()).collect();
        let mut scaled = false;
        for (k, to) in reconcile_old(&self.s, &old_views, &self.rss[new]) {
            scaled |= self.scale(old[k], to, true);
        }
        if scaled {
            self.sync_rollout_status(Some(new));
            return;
        }
        if deployment_complete(&self.d, &self.s, &self.stored) {
            self.cleanup(&old);
        }
        self.sync_rollout_status(Some(new));
    }

    fn rollout_recreate(&mut self, ns_pods: &[&Value]) {
        let new = self.get_new(false);
        let old = self.old_indices(new);
        let mut scaled = false;
        for &i in &old {
            if self.rss[i].replicas > 0 {
                scaled |= self.scale(i, 0, true);
            }
        }
        if scaled || self.old_pods_running(new, ns_pods) {
            self.sync_rollout_status(new);
            return;
        }
        let Some(new) = new.or_else(|| self.get_new(true)) else {
            self.sync_rollout_status(None);
            return;
        };
        let replicas = self.s.replicas;
        self.scale(new, replicas, true);
        if deployment_complete(&self.d, &self.s, &self.stored) {
            let old = self.old_indices(Some(new));
            self.cleanup(&old);
        }
        self.sync_rollout_status(Some(new));
    }

    /// `oldPodsRunning`: old ReplicaSets still report pods, or pods of theirs
    /// have not reached a terminal phase (terminating ones included).
    fn old_pods_running(&self, new: Option<usize>, ns_pods: &[&Value]) -> bool {
        let old = self.old_indices(new);
        if old
            .iter()
            .map(|&i| self.rss[i].status_replicas)
            .sum::<i64>()
            > 0
        {
            return true;
        }
        let old_uids: HashSet<&str> = old.iter().map(|&i| meta::uid(&self.rss[i].obj)).collect();
        ns_pods.iter().any(|p| {
            meta::controller_uid(p).is_some_and(|u| old_uids.contains(u)) && !pods::is_terminal(p)
        })
    }

    /// `cleanupDeployment`: deletes the oldest idle ReplicaSets beyond
    /// `revisionHistoryLimit`.
    fn cleanup(&mut self, old: &[usize]) {
        let Some(limit) = meta::int_at(&self.d, "/spec/revisionHistoryLimit") else {
            return;
        };
        let mut alive: Vec<usize> = old
            .iter()
            .copied()
            .filter(|&i| !meta::is_deleting(&self.rss[i].obj))
            .collect();
        let diff = alive.len() as i64 - limit;
        if diff <= 0 {
            return;
        }
        alive.sort_by(|&a, &b| {
            let (ra, rb) = (&self.rss[a], &self.rss[b]);
            match (ra.revision(), rb.revision()) {
                (x, y) if x != y && x > 0 && y > 0 => x.cmp(&y),
                _ => by_creation(ra, rb),
            }
        });
        for &i in alive.iter().take(usize::try_from(diff).unwrap_or(0)) {
            let r = &self.rss[i];
            let generation = meta::int_at(&r.obj, "/metadata/generation").unwrap_or(0);
            let observed = meta::int_at(&r.obj, "/status/observedGeneration").unwrap_or(0);
            if r.status_replicas != 0 || r.replicas != 0 || generation > observed {
                continue;
            }
            let (ns, name) = (meta::namespace(&r.obj).to_string(), r.name.clone());
            self.w.delete(REPLICA_SETS, &ns, &name, &json!({}));
        }
    }

    fn sync_rollout_status(&mut self, new: Option<usize>) {
        let status = rollout_status(
            &self.d,
            &self.s,
            &self.rss,
            new.map(|i| &self.rss[i]),
            &self.stored,
            &self.working,
            self.now,
        );
        self.write_status(status);
    }

    fn write_status(&mut self, status: Map<String, Value>) {
        self.working = status.clone();
        if status != self.stored {
            let obj = meta::with_status(&self.d, status);
            if let Some(v) = self.w.update_status(DEPLOYMENTS, obj) {
                self.stored = meta::status_map(&v);
                self.d = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn deploy(replicas: i64, strategy: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "apps", "uid": "d-uid", "generation": 2,
                         "annotations": {"team": "blue", LAST_APPLIED: "{}"}},
            "spec": {"replicas": replicas, "strategy": strategy, "progressDeadlineSeconds": 600,
                     "revisionHistoryLimit": 10,
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}},
        })
    }

    fn rolling(surge: Value, unavailable: Value) -> Value {
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
    }

    fn view(name: &str, replicas: i64, available: i64, created: i64) -> RsView {
        RsView::of(&json!({
            "metadata": {"name": name, "creationTimestamp": meta::format_time(created)},
            "spec": {"replicas": replicas},
            "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available},
        }))
    }

    fn with_annotations(mut r: RsView, desired: i64, max: i64) -> RsView {
        r.obj["metadata"]["annotations"] =
            json!({DESIRED_REPLICAS: desired.to_string(), MAX_REPLICAS: max.to_string()});
        r
    }

    #[test]
    fn safe_encoding_maps_each_digit_into_the_consonant_alphabet() {
        // '0' is byte 48: 48 % 27 = 21 → '4'; '9' is 57 % 27 = 3 → 'f'. Hence
        // real hashes such as "5d4f8b9c7" only use these ten characters.
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
    }

    #[test]
    fn the_template_hash_is_stable_and_changes_with_the_template_or_collisions() {
        let d = deploy(3, rolling(json!("25%"), json!("25%")));
        let t = &d["spec"]["template"];
        let h = pod_template_hash(t, None);
        assert_eq!(h, pod_template_hash(t, None));
        assert!(
            h.len() <= 10 && h.bytes().all(|b| ALPHANUMS.contains(&b)),
            "{h}"
        );
        let mut other = t.clone();
        other["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert_ne!(pod_template_hash(&other, None), h);
        assert_ne!(pod_template_hash(t, Some(1)), h);
        assert_ne!(pod_template_hash(t, Some(1)), pod_template_hash(t, Some(2)));
        // Key order does not matter.
        let reordered: Value = serde_json::from_str(
            r#"{"spec": {"containers": [{"image": "nginx:1", "name": "c"}]}, "metadata": {"labels": {"app": "web"}}}"#,
        )
        .expect("json");
        assert_eq!(pod_template_hash(&reordered, None), h);
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailability_down() {
        let cases = [
            (json!("25%"), json!("25%"), 10, (3, 2)),
            (json!("25%"), json!("25%"), 1, (1, 0)),
            (json!(0), json!(0), 5, (0, 1)),
            (json!(2), json!("50%"), 3, (2, 1)),
            (json!("0%"), json!(1), 4, (0, 1)),
            (Value::Null, Value::Null, 4, (1, 1)),
        ];
        for (surge, unavailable, desired, want) in cases {
            assert_eq!(
                resolve_fenceposts(Some(&surge), Some(&unavailable), desired),
                want,
                "{surge} {unavailable} of {desired}"
            );
        }
    }

    #[test]
    fn max_unavailable_is_zero_for_recreate_and_capped_at_replicas() {
        assert_eq!(
            Strategy::of(&deploy(4, json!({"type": "Recreate"}))).max_unavailable,
            0
        );
        assert_eq!(
            Strategy::of(&deploy(2, rolling(json!(0), json!(5)))).max_unavailable,
            2
        );
        assert_eq!(
            Strategy::of(&deploy(0, rolling(json!(1), json!(1)))).max_unavailable,
            0
        );
    }

    #[test]
    fn the_new_replica_set_grows_up_to_the_surge() {
        let s = Strategy::of(&deploy(4, rolling(json!(1), json!(1))));
        let old = view("old", 4, 4, NOW - 100);
        let new = view("new", 0, 0, NOW);
        assert_eq!(
            reconcile_new(&s, &[old.clone(), new.clone()], &new),
            Some(1)
        );
        // Surge used up: wait for old pods to go.
        let new1 = view("new", 1, 0, NOW);
        assert_eq!(reconcile_new(&s, &[old, new1.clone()], &new1), None);
        // Recreate and oversize cases.
        let r = Strategy::of(&deploy(4, json!({"type": "Recreate"})));
        assert_eq!(reconcile_new(&r, std::slice::from_ref(&new), &new), Some(4));
        assert_eq!(
            reconcile_new(&s, &[view("new", 6, 6, NOW)], &view("new", 6, 6, NOW)),
            Some(4)
        );
    }

    #[test]
    fn old_replica_sets_shrink_within_max_unavailable() {
        let s = Strategy::of(&deploy(4, rolling(json!(1), json!(1))));
        // 4 old available, new has 1 pod not yet available: 5 pods, min 3
        // available, so one old pod may go.
        let old = [view("old", 4, 4, NOW - 100)];
        assert_eq!(
            reconcile_old(&s, &old, &view("new", 1, 0, NOW)),
            vec![(0, 3)]
        );
        // Nothing can go while the new one is unavailable and old is at min.
        let old = [view("old", 3, 3, NOW - 100)];
        assert_eq!(reconcile_old(&s, &old, &view("new", 2, 0, NOW)), vec![]);
        // Unhealthy old replicas are cleaned up first (oldest set first), then
        // one available pod more, as 4 are available against a minimum of 3.
        let old = [view("older", 2, 0, NOW - 200), view("old", 3, 3, NOW - 100)];
        assert_eq!(
            reconcile_old(&s, &old, &view("new", 1, 1, NOW)),
            vec![(0, 0), (1, 2)]
        );
    }

    #[test]
    fn a_rolling_update_converges_step_by_step() {
        // Simulate passes where every pod becomes available at once.
        let s = Strategy::of(&deploy(4, rolling(json!("25%"), json!("25%"))));
        let mut old = view("old", 4, 4, NOW - 100);
        let mut new = view("new", 0, 0, NOW);
        for _ in 0..20 {
            if let Some(n) = reconcile_new(&s, &[old.clone(), new.clone()], &new) {
                new = view("new", n, n, NOW);
                continue;
            }
            for (_, n) in reconcile_old(&s, std::slice::from_ref(&old), &new) {
                old = view("old", n, n, NOW - 100);
            }
            assert!(old.replicas + new.replicas <= 4 + s.max_surge);
        }
        assert_eq!((old.replicas, new.replicas), (0, 4));
    }

    #[test]
    fn a_resize_goes_to_the_only_active_replica_set() {
        let s = Strategy::of(&deploy(5, rolling(json!(1), json!(1))));
        let all = [view("old", 0, 0, NOW - 100), view("new", 3, 3, NOW)];
        assert_eq!(
            proportional_scale(&s, &all, Some(1), 3),
            vec![(1, 5, false)]
        );
        let none_active = [view("old", 0, 0, NOW - 100), view("older", 0, 0, NOW - 200)];
        assert_eq!(
            proportional_scale(&s, &none_active, None, 0),
            vec![(0, 5, false)],
            "newest old one"
        );
    }

    #[test]
    fn a_resize_mid_rollout_is_shared_in_proportion() {
        // 10 replicas, surge 3: sets of 8 and 5 (max-replicas 13) scaled to
        // 20 replicas (surge 5, max 25): 25 - 13 = 12 to add.
        let s = Strategy::of(&deploy(20, rolling(json!("25%"), json!("25%"))));
        let all = [
            with_annotations(view("old", 8, 8, NOW - 100), 10, 13),
            with_annotations(view("new", 5, 0, NOW), 10, 13),
        ];
        let got = proportional_scale(&s, &all, Some(1), 13);
        let total: i64 = got.iter().map(|(_, n, _)| n).sum();
        assert_eq!(total, 25);
        assert_eq!(got, vec![(0, 15, true), (1, 10, true)]);
    }

    #[test]
    fn scaling_events_are_told_by_the_desired_replicas_annotation() {
        let s = Strategy::of(&deploy(5, rolling(json!(1), json!(1))));
        assert!(is_scaling_event(
            &s,
            &[with_annotations(view("a", 3, 3, NOW), 3, 4)]
        ));
        assert!(!is_scaling_event(
            &s,
            &[with_annotations(view("a", 3, 3, NOW), 5, 6)]
        ));
        assert!(
            !is_scaling_event(&s, &[with_annotations(view("a", 0, 0, NOW), 3, 4)]),
            "inactive sets do not count"
        );
    }

    #[test]
    fn templates_compare_equal_without_the_hash_label_and_empty_fields() {
        let a = json!({"metadata": {"labels": {"app": "web", HASH_LABEL: "abc"}}, "spec": {"containers": [{"name": "c", "resources": {}}]}});
        let b = json!({"metadata": {"labels": {"app": "web"}, "annotations": null}, "spec": {"containers": [{"name": "c"}]}});
        assert!(equal_ignore_hash(&a, &b));
        let c = json!({"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "c"}]}});
        assert!(!equal_ignore_hash(&a, &c));
    }

    #[test]
    fn a_new_replica_set_gets_the_hash_owner_and_annotations() {
        let d = deploy(3, rolling(json!("25%"), json!("25%")));
        let s = Strategy::of(&d);
        let rs = new_replica_set(&d, &s, "5d4f8b9c7", 1, 2);
        assert_eq!(rs["metadata"]["name"], "web-5d4f8b9c7");
        assert_eq!(
            rs["metadata"]["labels"],
            json!({"app": "web", HASH_LABEL: "5d4f8b9c7"})
        );
        assert_eq!(
            rs["spec"]["selector"]["matchLabels"],
            json!({"app": "web", HASH_LABEL: "5d4f8b9c7"})
        );
        assert_eq!(
            rs["spec"]["template"]["metadata"]["labels"][HASH_LABEL],
            "5d4f8b9c7"
        );
        assert_eq!(rs["spec"]["replicas"], 1);
        let owner = &rs["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["apiVersion"].as_str()),
            (Some("Deployment"), Some("apps/v1"))
        );
        assert_eq!(
            (
                owner["controller"].as_bool(),
                owner["blockOwnerDeletion"].as_bool()
            ),
            (Some(true), Some(true))
        );
        assert_eq!(
            rs["metadata"]["annotations"],
            json!({"team": "blue", REVISION: "2", DESIRED_REPLICAS: "3", MAX_REPLICAS: "4"})
        );
    }

    #[test]
    fn bringing_an_old_template_back_raises_its_revision_and_keeps_history() {
        let d = deploy(3, rolling(json!("25%"), json!("25%")));
        let s = Strategy::of(&d);
        let mut rs = json!({"metadata": {"annotations": {REVISION: "1", "team": "blue"}}});
        assert!(set_new_rs_annotations(&d, &s, &mut rs, 3, true));
        assert_eq!(rs["metadata"]["annotations"][REVISION], "3");
        assert_eq!(rs["metadata"]["annotations"][REVISION_HISTORY], "1");
        assert!(set_new_rs_annotations(&d, &s, &mut rs, 5, true));
        assert_eq!(rs["metadata"]["annotations"][REVISION_HISTORY], "1,3");
        assert!(
            !set_new_rs_annotations(&d, &s, &mut rs, 5, true),
            "nothing left to change"
        );
    }

    fn status_of(
        d: &Value,
        all: &[RsView],
        new: Option<usize>,
        stored: &Map<String, Value>,
    ) -> Map<String, Value> {
        let s = Strategy::of(d);
        rollout_status(d, &s, all, new.map(|i| &all[i]), stored, stored, NOW)
    }

    #[test]
    fn a_finished_rollout_reports_complete_counts_and_conditions() {
        let d = deploy(3, rolling(json!("25%"), json!("25%")));
        let all = [view("web-new", 3, 3, NOW)];
        let status = status_of(&d, &all, Some(0), &Map::new());
        assert_eq!(status["observedGeneration"], 2);
        assert_eq!(
            (
                status["replicas"].as_i64(),
                status["updatedReplicas"].as_i64()
            ),
            (Some(3), Some(3))
        );
        assert_eq!(
            (
                status["readyReplicas"].as_i64(),
                status["availableReplicas"].as_i64()
            ),
            (Some(3), Some(3))
        );
        assert_eq!(status.get("unavailableReplicas"), None);
        let conds = status["conditions"].as_array().expect("conditions");
        assert_eq!(conds[0]["type"], "Available");
        assert_eq!(conds[0]["reason"], "MinimumReplicasAvailable");
        assert_eq!(conds[1]["type"], "Progressing");
        assert_eq!(conds[1]["reason"], "NewReplicaSetAvailable");
        assert_eq!(
            conds[1]["message"],
            "ReplicaSet \"web-new\" has successfully progressed."
        );
        // A second pass changes nothing, so nothing is written.
        assert_eq!(status_of(&d, &all, Some(0), &status), status);
    }

    #[test]
    fn a_rollout_in_flight_is_progressing_and_may_lack_availability() {
        let d = deploy(4, rolling(json!(1), json!(1)));
        let all = [view("web-old", 2, 2, NOW - 100), view("web-new", 3, 1, NOW)];
        let mut stored = Map::new();
        stored.insert("updatedReplicas".into(), json!(1));
        let status = status_of(&d, &all, Some(1), &stored);
        assert_eq!(status["unavailableReplicas"], 2);
        let avail = find_condition(&status, "Available").expect("available");
        assert_eq!(avail["status"], "True", "3 available >= 4 - 1");
        let prog = find_condition(&status, "Progressing").expect("progressing");
        assert_eq!(
            (prog["status"].as_str(), prog["reason"].as_str()),
            (Some("True"), Some("ReplicaSetUpdated"))
        );
        let starved = [view("web-old", 2, 1, NOW - 100), view("web-new", 3, 1, NOW)];
        let status = status_of(&d, &starved, Some(1), &stored);
        assert_eq!(
            find_condition(&status, "Available").expect("available")["reason"],
            "MinimumReplicasUnavailable"
        );
    }

    #[test]
    fn no_progress_past_the_deadline_times_the_rollout_out() {
        let d = deploy(2, rolling(json!(1), json!(0)));
        let all = [view("web-new", 2, 0, NOW)];
        let mut stored = Map::new();
        stored.insert("replicas".into(), json!(2));
        stored.insert("updatedReplicas".into(), json!(2));
        let old = meta::format_time(NOW - 601);
        stored.insert(
            "conditions".into(),
            json!([{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                    "lastUpdateTime": old, "lastTransitionTime": old, "message": ""}]),
        );
        let status = status_of(&d, &all, Some(0), &stored);
        let prog = find_condition(&status, "Progressing").expect("progressing");
        assert_eq!(
            (prog["status"].as_str(), prog["reason"].as_str()),
            (Some("False"), Some("ProgressDeadlineExceeded"))
        );
        assert_eq!(
            prog["message"],
            "ReplicaSet \"web-new\" has timed out progressing."
        );
    }

    #[test]
    fn a_replica_set_that_cannot_create_pods_surfaces_on_the_deployment() {
        let d = deploy(1, rolling(json!(1), json!(0)));
        let mut new = view("web-new", 1, 0, NOW);
        new.obj["status"]["conditions"] = json!([{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                                  "message": "quota", "lastTransitionTime": meta::format_time(NOW)}]);
        let status = status_of(&d, &[new], Some(0), &Map::new());
        let c = find_condition(&status, "ReplicaFailure").expect("copied");
        assert_eq!(
            (c["reason"].as_str(), c["message"].as_str()),
            (Some("FailedCreate"), Some("quota"))
        );
    }

    #[test]
    fn conditions_keep_their_transition_time_when_only_the_reason_changes() {
        let mut conds = vec![
            json!({"type": "Progressing", "status": "True", "reason": "A", "lastTransitionTime": "t0", "lastUpdateTime": "t0"}),
        ];
        set_condition(
            &mut conds,
            json!({"type": "Progressing", "status": "True", "reason": "B", "lastTransitionTime": "t1", "lastUpdateTime": "t1"}),
        );
        assert_eq!(
            (
                conds[0]["reason"].as_str(),
                conds[0]["lastTransitionTime"].as_str()
            ),
            (Some("B"), Some("t0"))
        );
        set_condition(
            &mut conds,
            json!({"type": "Progressing", "status": "False", "reason": "C", "lastTransitionTime": "t2", "lastUpdateTime": "t2"}),
        );
        assert_eq!(conds[0]["lastTransitionTime"], "t2");
    }
}
