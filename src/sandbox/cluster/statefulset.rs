//! The StatefulSet controller (kubernetes/pkg/controller/statefulset): pods
//! `NAME-0 … NAME-(N-1)` with stable names, hostnames and claims; with the
//! default `OrderedReady` policy created in order, each once the ones
//! before it are Running and Ready, and removed from the highest ordinal
//! down; with `Parallel`, all at once. A rolling update replaces pods from
//! the highest ordinal down to `partition`, one at a time once all are
//! ready. Failed pods are deleted and made again.
//!
//! The revision is a hash of the template (`controller-revision-hash`
//! `NAME-<hash>`); the sandbox keeps no ControllerRevisions.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::daemonset::template_hash;
use super::meta::{self, Claimable, Gvr, PODS, Writer};
use super::pods;
use super::replicaset::pod_from_template;
use super::{Controller, Pass};
use crate::sandbox::api::Api;

pub(crate) const STATEFUL_SETS: Gvr = Gvr {
    group: "apps",
    version: "v1",
    plural: "statefulsets",
    kind: "StatefulSet",
};

const CLAIMS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "persistentvolumeclaims",
    kind: "PersistentVolumeClaim",
};

const COMPONENT: &str = "statefulset-controller";

/// The ordinal of a pod of `set` (`web-3` → 3).
fn ordinal(set: &str, pod: &Value) -> Option<i64> {
    meta::name(pod)
        .strip_prefix(set)?
        .strip_prefix('-')?
        .parse()
        .ok()
        .filter(|n: &i64| *n >= 0)
}

/// The revision name of the set's template.
pub(crate) fn revision(sts: &Value) -> String {
    format!("{}-{}", meta::name(sts), template_hash(sts))
}

fn pod_revision(pod: &Value) -> &str {
    meta::str_at(pod, "/metadata/labels/controller-revision-hash")
}

/// The claim of template `tpl` for pod `ordinal` (`<tpl>-<set>-<i>`).
fn claim_name(sts: &Value, tpl: &Value, ordinal: i64) -> String {
    format!("{}-{}-{ordinal}", meta::name(tpl), meta::name(sts))
}

/// Pod `ordinal` of the set (`newVersionedStatefulSetPod`).
pub(crate) fn set_pod(sts: &Value, ordinal: i64) -> Value {
    let template = sts
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    let mut pod = pod_from_template(sts, STATEFUL_SETS, &template);
    let name = format!("{}-{ordinal}", meta::name(sts));
    if let Some(m) = pod["metadata"].as_object_mut() {
        m.remove("generateName");
        m.insert("name".into(), json!(name));
        let labels = m.entry("labels").or_insert_with(|| json!({}));
        labels["statefulset.kubernetes.io/pod-name"] = json!(name);
        labels["apps.kubernetes.io/pod-index"] = json!(ordinal.to_string());
        labels["controller-revision-hash"] = json!(revision(sts));
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return pod;
    };
    spec.insert("hostname".into(), json!(name));
    let service = meta::str_at(sts, "/spec/serviceName");
    if !service.is_empty() {
        spec.insert("subdomain".into(), json!(service));
    }
    let claims = meta::array_at(sts, "/spec/volumeClaimTemplates");
    if !claims.is_empty() {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(volumes) = volumes.as_array_mut() {
            for tpl in claims {
                volumes.retain(|v| v["name"] != tpl["metadata"]["name"]);
                volumes.push(json!({"name": meta::name(tpl),
                    "persistentVolumeClaim": {"claimName": claim_name(sts, tpl, ordinal)}}));
            }
        }
    }
    pod
}

/// What one pass does for one StatefulSet.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SetPlan {
    /// Ordinals to create, in order.
    pub create: Vec<i64>,
    /// Pods to delete (names).
    pub delete: Vec<String>,
}

/// `updateStatefulSet`'s decisions over the set's pods by ordinal.
pub(crate) fn plan(sts: &Value, pods: &BTreeMap<i64, &Value>, rev: &str) -> SetPlan {
    let replicas = meta::int_at(sts, "/spec/replicas").unwrap_or(1).max(0);
    let ordered = meta::str_at(sts, "/spec/podManagementPolicy") != "Parallel";
    let healthy =
        |p: &Value| pods::phase(p) == "Running" && pods::is_ready(p) && !meta::is_deleting(p);
    let mut out = SetPlan::default();
    // Pods that must be there: missing ones made, failed ones removed.
    for i in 0..replicas {
        match pods.get(&i) {
            None => {
                out.create.push(i);
                if ordered {
                    return out;
                }
            }
            Some(p) if pods::is_terminal(p) => {
                out.delete.push(meta::name(p).to_owned());
                if ordered {
                    return out;
                }
            }
            Some(p) if ordered && !healthy(p) => return out,
            Some(_) => {}
        }
    }
    // Pods past the count: the highest first.
    let condemned: Vec<&Value> = pods.range(replicas..).rev().map(|(_, p)| *p).collect();
    if let Some(first) = condemned.first() {
        if ordered {
            if !meta::is_deleting(first) {
                out.delete.push(meta::name(first).to_owned());
            }
        } else {
            out.delete.extend(
                condemned
                    .iter()
                    .filter(|p| !meta::is_deleting(p))
                    .map(|p| meta::name(p).to_owned()),
            );
        }
        return out;
    }
    if meta::str_at(sts, "/spec/updateStrategy/type") == "OnDelete" {
        return out;
    }
    // Rolling update: one pod at a time, from the top down to the partition,
    // once every pod is ready.
    if !pods.values().all(|p| healthy(p)) {
        return out;
    }
    let partition = meta::int_at(sts, "/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0);
    if let Some((_, p)) = pods
        .range(partition.max(0)..replicas)
        .rev()
        .find(|(_, p)| pod_revision(p) != rev)
    {
        out.delete.push(meta::name(p).to_owned());
    }
    out
}

/// The set's status from its pods.
pub(crate) fn set_status(
    sts: &Value,
    pods: &BTreeMap<i64, &Value>,
    rev: &str,
    now: i64,
) -> Map<String, Value> {
    let min_ready = meta::int_at(sts, "/spec/minReadySeconds").unwrap_or(0);
    let live: Vec<&Value> = pods
        .values()
        .copied()
        .filter(|p| !meta::is_deleting(p) && !pods::is_terminal(p))
        .collect();
    let count = |f: &dyn Fn(&Value) -> bool| live.iter().filter(|p| f(p)).count() as i64;
    let updated = count(&|p| pod_revision(p) == rev);
    let mut status = meta::status_map(sts);
    let current_rev = match status.get("currentRevision").and_then(Value::as_str) {
        Some(c) if updated < live.len() as i64 => c.to_owned(),
        _ => rev.to_owned(),
    };
    let current = count(&|p| pod_revision(p) == current_rev);
    meta::set_omitempty(
        &mut status,
        "observedGeneration",
        meta::int_at(sts, "/metadata/generation").unwrap_or(0),
    );
    status.insert("replicas".into(), json!(live.len()));
    meta::set_omitempty(&mut status, "readyReplicas", count(&|p| pods::is_ready(p)));
    meta::set_omitempty(&mut status, "currentReplicas", current);
    meta::set_omitempty(&mut status, "updatedReplicas", updated);
    status.insert("currentRevision".into(), json!(current_rev));
    status.insert("updateRevision".into(), json!(rev));
    status.insert("collisionCount".into(), json!(0));
    status.insert(
        "availableReplicas".into(),
        json!(count(&|p| pods::is_available(p, min_ready, now))),
    );
    status
}

pub(crate) struct StatefulSetController;

impl Controller for StatefulSetController {
    const NAME: &'static str = "statefulset";

    fn watches(&self) -> &'static [&'static str] {
        &["statefulsets.apps", "pods"]
    }

    fn wants(&self, change: &crate::sandbox::store::Change) -> bool {
        super::pod_of_kind(change, "StatefulSet")
    }

    fn reconcile(&mut self, api: &Api, now: i64) -> Pass {
        let (sets, _) = api.store.list(&STATEFUL_SETS.key(), None);
        if sets.is_empty() {
            return Pass::default();
        }
        let (all_pods, _) = api.store.list(&PODS.key(), None);
        let by_ns = Claimable::by_namespace(&all_pods);
        let none = Claimable::new(Vec::new());
        let mut w = Writer::new(api, COMPONENT);
        for sts in &sets {
            let ns_pods = by_ns.get(meta::namespace(sts)).unwrap_or(&none);
            sync_one(&mut w, api, sts, ns_pods, now);
        }
        Pass { retry: w.retry }
    }
}

fn sync_one(w: &mut Writer<'_>, api: &Api, sts: &Value, ns_pods: &Claimable<'_>, now: i64) {
    let Some(selector) = meta::selector(sts) else {
        return;
    };
    let set = meta::name(sts);
    let mut adopted: Vec<Value> = Vec::new();
    let owned = meta::claim_all(
        w,
        (sts, STATEFUL_SETS),
        (PODS, &selector),
        ns_pods
            .candidates(sts)
            .into_iter()
            .filter(|p| ordinal(set, p).is_some()),
        &mut adopted,
    );
    let by_ordinal: BTreeMap<i64, &Value> = owned
        .into_iter()
        .filter_map(|p| ordinal(set, p).map(|i| (i, p)))
        .collect();
    let rev = revision(sts);
    if !meta::is_deleting(sts) {
        let todo = plan(sts, &by_ordinal, &rev);
        for i in todo.create {
            create_claims(w, api, sts, i);
            let pod = set_pod(sts, i);
            let name = meta::name(&pod).to_owned();
            match w.create(PODS, meta::namespace(sts), pod) {
                Ok(_) => w.event(
                    sts,
                    "Normal",
                    "SuccessfulCreate",
                    &format!("create Pod {name} in StatefulSet {set} successful"),
                ),
                Err(e) => {
                    w.event(
                        sts,
                        "Warning",
                        "FailedCreate",
                        &format!(
                            "create Pod {name} in StatefulSet {set} failed error: {}",
                            e.message
                        ),
                    );
                    break;
                }
            }
        }
        for name in todo.delete {
            if w.delete(PODS, meta::namespace(sts), &name, &json!({})) {
                w.event(
                    sts,
                    "Normal",
                    "SuccessfulDelete",
                    &format!("delete Pod {name} in StatefulSet {set} successful"),
                );
            }
        }
    }
    let status = set_status(sts, &by_ordinal, &rev, now);
    if sts.get("status").and_then(Value::as_object) != Some(&status) {
        let _ = w.update_status(STATEFUL_SETS, meta::with_status(sts, status));
    }
}

/// The claims of pod `ordinal` from the set's volumeClaimTemplates, made
/// once and kept (the default retention policy).
fn create_claims(w: &mut Writer<'_>, api: &Api, sts: &Value, ordinal: i64) {
    let ns = meta::namespace(sts);
    for tpl in meta::array_at(sts, "/spec/volumeClaimTemplates") {
        let name = claim_name(sts, tpl, ordinal);
        if api.store.get(&CLAIMS.key(), ns, &name).is_some() {
            continue;
        }
        let mut labels = tpl["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        if let Some(l) = sts
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
        {
            for (k, v) in l {
                labels[k] = v.clone();
            }
        }
        let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": tpl.get("spec").cloned().unwrap_or_else(|| json!({}))});
        let _ = w.create(CLAIMS, ns, claim);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn sts(replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "apps", "uid": "sts-uid", "generation": 1},
            "spec": {"replicas": replicas, "serviceName": "web",
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    }

    fn pod(i: i64, rev: &str, ready: bool) -> Value {
        let mut p = json!({"metadata": {"name": format!("web-{i}"),
                               "labels": {"app": "web", "controller-revision-hash": rev}},
                           "spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
        if ready {
            p["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
                "lastTransitionTime": meta::format_time(NOW - 60)}]);
        }
        p
    }

    fn by_ordinal(pods: &[Value]) -> BTreeMap<i64, &Value> {
        pods.iter()
            .filter_map(|p| ordinal("web", p).map(|i| (i, p)))
            .collect()
    }

    #[test]
    fn ordered_pods_are_made_one_at_a_time_once_the_ones_before_are_ready() {
        let set = sts(3);
        assert_eq!(plan(&set, &BTreeMap::new(), "r").create, [0]);
        let pods = [pod(0, "r", false)];
        assert_eq!(plan(&set, &by_ordinal(&pods), "r"), SetPlan::default());
        let pods = [pod(0, "r", true)];
        assert_eq!(plan(&set, &by_ordinal(&pods), "r").create, [1]);
        let mut parallel = sts(3);
        parallel["spec"]["podManagementPolicy"] = json!("Parallel");
        assert_eq!(plan(&parallel, &BTreeMap::new(), "r").create, [0, 1, 2]);
    }

    #[test]
    fn scaling_down_removes_the_highest_ordinal_first() {
        let pods: Vec<Value> = (0..4).map(|i| pod(i, "r", true)).collect();
        assert_eq!(plan(&sts(2), &by_ordinal(&pods), "r").delete, ["web-3"]);
    }

    #[test]
    fn a_rolling_update_replaces_from_the_top_down_to_the_partition() {
        let pods: Vec<Value> = (0..3).map(|i| pod(i, "old", true)).collect();
        assert_eq!(plan(&sts(3), &by_ordinal(&pods), "new").delete, ["web-2"]);
        let mut part = sts(3);
        part["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}});
        let pods = [
            pod(0, "old", true),
            pod(1, "old", true),
            pod(2, "new", true),
        ];
        assert!(plan(&part, &by_ordinal(&pods), "new").delete.is_empty());
        // Nothing is replaced while a pod is not ready.
        let pods = [
            pod(0, "old", true),
            pod(1, "old", false),
            pod(2, "old", true),
        ];
        assert!(plan(&sts(3), &by_ordinal(&pods), "new").delete.is_empty());
    }

    #[test]
    fn status_counts_ready_updated_and_available_pods_with_revisions() {
        let pods = [
            pod(0, "web-new", true),
            pod(1, "web-old", true),
            pod(2, "web-old", false),
        ];
        let mut set = sts(3);
        set["status"] = json!({"currentRevision": "web-old"});
        let s = set_status(&set, &by_ordinal(&pods), "web-new", NOW);
        assert_eq!(
            Value::Object(s),
            json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 2, "currentReplicas": 2,
                   "updatedReplicas": 1, "currentRevision": "web-old", "updateRevision": "web-new",
                   "collisionCount": 0, "availableReplicas": 2})
        );
    }

    #[test]
    fn a_set_pod_has_its_stable_name_hostname_and_claims() {
        let mut set = sts(1);
        set["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"}, "spec": {}}]);
        let p = set_pod(&set, 0);
        assert_eq!(p["metadata"]["name"], "web-0");
        assert!(p["metadata"].get("generateName").is_none());
        assert_eq!(p["spec"]["hostname"], "web-0");
        assert_eq!(p["spec"]["subdomain"], "web");
        assert_eq!(
            p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            "web-0"
        );
        assert_eq!(
            p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "data-web-0"
        );
    }
}
