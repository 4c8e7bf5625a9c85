//! The DaemonSet controller (kubernetes/pkg/controller/daemon): one pod
//! per node that should run one, pods replaced when they go, surplus and
//! misplaced pods deleted, a rolling update bounded by `maxUnavailable`,
//! and the status counts.
//!
//! As the real one since 1.12, it does not bind pods itself: each pod gets
//! a required node affinity on its node's name (`matchFields
//! metadata.name`) and the DaemonSet tolerations, and the scheduler binds
//! it. Whether a node should run the pod is `nodeShouldRunDaemonPod`: the
//! template's node selector and affinity, and the node's NoSchedule and
//! NoExecute taints against the pod's tolerations (so a cordoned node still
//! runs daemons, as on a cluster). Which pods are current is told by a hash
//! of the template in `controller-revision-hash` (the sandbox keeps no
//! ControllerRevisions).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::meta::{self, Claimable, Gvr, NODES, PODS, Writer};
use super::pods;
use super::replicaset::pod_from_template;
use super::scheduler::{self, NodeInfo};
use super::{Controller, Pass};
use crate::sandbox::api::Api;

pub(crate) const DAEMON_SETS: Gvr = Gvr {
    group: "apps",
    version: "v1",
    plural: "daemonsets",
    kind: "DaemonSet",
};

const COMPONENT: &str = "daemonset-controller";

/// The tolerations every daemon pod gets (`AddOrUpdateDaemonPodTolerations`).
fn daemon_tolerations(host_network: bool) -> Vec<Value> {
    let mut t = vec![
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
    ];
    if host_network {
        t.push(json!({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}));
    }
    t
}

/// The hash of a DaemonSet's template, as its pods' `controller-revision-hash`.
pub(crate) fn template_hash(ds: &Value) -> String {
    let text = meta::canonical_json(ds.pointer("/spec/template").unwrap_or(&Value::Null));
    // FNV-1a, 32 bits: stable across runs and builds.
    let mut h: u32 = 0x811c_9dc5;
    for b in text.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:x}")
}

/// The pod the DaemonSet runs on `node`.
pub(crate) fn daemon_pod(ds: &Value, node: &str, hash: &str) -> Value {
    let template = ds.pointer("/spec/template").cloned().unwrap_or(Value::Null);
    let mut pod = pod_from_template(ds, DAEMON_SETS, &template);
    let labels = pod["metadata"]
        .as_object_mut()
        .map(|m| m.entry("labels").or_insert_with(|| json!({})));
    if let Some(Value::Object(labels)) = labels {
        labels.insert("controller-revision-hash".into(), json!(hash));
        labels.insert(
            "pod-template-generation".into(),
            json!(
                meta::int_at(ds, "/metadata/generation")
                    .unwrap_or(1)
                    .to_string()
            ),
        );
    }
    let host_network = meta::bool_at(&pod, "/spec/hostNetwork");
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return pod;
    };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = tolerations.as_array_mut() {
        for t in daemon_tolerations(host_network) {
            if !list
                .iter()
                .any(|have| have["key"] == t["key"] && have["effect"] == t["effect"])
            {
                list.push(t);
            }
        }
    }
    // `ReplaceDaemonSetPodNodeNameNodeAffinity`: the node's name, as the
    // one required term.
    let term =
        json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]});
    let affinity = spec.entry("affinity").or_insert_with(|| json!({}));
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
        json!({"nodeSelectorTerms": [term]});
    pod
}

/// `nodeShouldRunDaemonPod`: the template's selector and affinity match
/// the node, and its NoSchedule/NoExecute taints are tolerated.
pub(crate) fn should_run(ds: &Value, node: &Value) -> bool {
    let info = NodeInfo::of(node);
    let pod = daemon_pod(ds, &info.name, "");
    // The template's own affinity, without the node-name term just added.
    let mut template_pod = pod.clone();
    template_pod["spec"]["affinity"] = ds
        .pointer("/spec/template/spec/affinity")
        .cloned()
        .unwrap_or(Value::Null);
    if !scheduler::affinity_matches(&template_pod, &info) {
        return false;
    }
    meta::array_at(node, "/spec/taints").iter().all(|t| {
        !matches!(meta::str_at(t, "/effect"), "NoSchedule" | "NoExecute")
            || scheduler::tolerated(&pod, t)
    })
}

/// The node a daemon pod is for: where it is bound, or its affinity's name.
fn node_of(pod: &Value) -> &str {
    let bound = meta::str_at(pod, "/spec/nodeName");
    if !bound.is_empty() {
        return bound;
    }
    pod.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// What one pass does for one DaemonSet.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct DaemonPlan {
    /// Nodes to create a pod on.
    pub create: Vec<String>,
    /// Pods to delete (names).
    pub delete: Vec<String>,
}

/// `manage` and `rollingUpdate`: one pod on each node that should run one
/// (the oldest kept where there are more), none elsewhere; then old pods
/// deleted while fewer than `maxUnavailable` nodes are without an available
/// pod. `should_run` is per node name; `pods` are the active owned pods.
pub(crate) fn plan(
    ds: &Value,
    nodes: &BTreeMap<String, bool>,
    pods: &[&Value],
    hash: &str,
    now: i64,
) -> DaemonPlan {
    let mut by_node: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for p in pods {
        by_node.entry(node_of(p)).or_default().push(p);
    }
    let mut out = DaemonPlan::default();
    for (node, run) in nodes {
        let on = by_node.get(node.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        if !run {
            out.delete
                .extend(on.iter().map(|p| meta::name(p).to_owned()));
        } else if on.is_empty() {
            out.create.push(node.clone());
        } else if on.len() > 1 {
            let mut by_age = on.to_vec();
            by_age.sort_by_key(|p| (meta::created(p), meta::name(p).to_owned()));
            out.delete
                .extend(by_age[1..].iter().map(|p| meta::name(p).to_owned()));
        }
    }
    // Pods for nodes that are gone.
    for (node, on) in &by_node {
        if !nodes.contains_key(*node) {
            out.delete
                .extend(on.iter().map(|p| meta::name(p).to_owned()));
        }
    }
    if meta::str_at(ds, "/spec/updateStrategy/type") == "OnDelete" {
        return out;
    }
    // Rolling update: old pods go, at most maxUnavailable nodes at a time
    // without an available pod.
    let min_ready = meta::int_at(ds, "/spec/minReadySeconds").unwrap_or(0);
    let desired = nodes.values().filter(|r| **r).count();
    let max_unavailable = max_unavailable(ds, desired);
    let mut unavailable = 0;
    let mut old_available = Vec::new();
    for (node, run) in nodes {
        if !run {
            continue;
        }
        let on = by_node.get(node.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        match on.iter().find(|p| pods::is_available(p, min_ready, now)) {
            None => {
                unavailable += 1;
                // An old pod that is not available yet goes at once.
                out.delete.extend(
                    on.iter()
                        .filter(|p| pod_hash(p) != hash)
                        .map(|p| meta::name(p).to_owned()),
                );
            }
            Some(p) if pod_hash(p) != hash => old_available.push(meta::name(p).to_owned()),
            Some(_) => {}
        }
    }
    let budget = max_unavailable.saturating_sub(unavailable);
    out.delete.extend(old_available.into_iter().take(budget));
    out.delete.sort();
    out.delete.dedup();
    out
}

fn pod_hash(pod: &Value) -> &str {
    meta::str_at(pod, "/metadata/labels/controller-revision-hash")
}

/// `spec.updateStrategy.rollingUpdate.maxUnavailable` (default 1) against
/// the desired count; a percentage rounds up, and at least one.
fn max_unavailable(ds: &Value, desired: usize) -> usize {
    let v = ds.pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable");
    let n = match v {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(1) as usize,
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<usize>().ok()) {
            Some(pct) => (desired * pct).div_ceil(100),
            None => s.parse().unwrap_or(1),
        },
        _ => 1,
    };
    n.max(1)
}

/// `updateDaemonSetStatus`: the counts by node.
pub(crate) fn daemon_status(
    ds: &Value,
    nodes: &BTreeMap<String, bool>,
    pods: &[&Value],
    hash: &str,
    now: i64,
) -> Map<String, Value> {
    let min_ready = meta::int_at(ds, "/spec/minReadySeconds").unwrap_or(0);
    let mut by_node: HashMap<&str, Vec<&Value>> = HashMap::new();
    for p in pods {
        by_node.entry(node_of(p)).or_default().push(p);
    }
    let (mut desired, mut current, mut misscheduled, mut ready) = (0, 0, 0, 0);
    let (mut updated, mut available) = (0, 0);
    for (node, run) in nodes {
        let on = by_node.get(node.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        if !run {
            misscheduled += i64::from(!on.is_empty());
            continue;
        }
        desired += 1;
        if on.is_empty() {
            continue;
        }
        current += 1;
        ready += i64::from(on.iter().any(|p| pods::is_ready(p)));
        available += i64::from(on.iter().any(|p| pods::is_available(p, min_ready, now)));
        updated += i64::from(on.iter().any(|p| pod_hash(p) == hash));
    }
    let mut status = meta::status_map(ds);
    status.insert("currentNumberScheduled".into(), json!(current));
    status.insert("numberMisscheduled".into(), json!(misscheduled));
    status.insert("desiredNumberScheduled".into(), json!(desired));
    status.insert("numberReady".into(), json!(ready));
    meta::set_omitempty(
        &mut status,
        "observedGeneration",
        meta::int_at(ds, "/metadata/generation").unwrap_or(0),
    );
    meta::set_omitempty(&mut status, "updatedNumberScheduled", updated);
    meta::set_omitempty(&mut status, "numberAvailable", available);
    meta::set_omitempty(&mut status, "numberUnavailable", desired - available);
    status
}

pub(crate) struct DaemonSetController;

impl Controller for DaemonSetController {
    const NAME: &'static str = "daemonset";

    fn watches(&self) -> &'static [&'static str] {
        &["daemonsets.apps", "pods", "nodes"]
    }

    fn wants(&self, change: &crate::sandbox::store::Change) -> bool {
        super::pod_of_kind(change, "DaemonSet")
    }

    fn reconcile(&mut self, api: &Api, now: i64) -> Pass {
        let (sets, _) = api.store.list(&DAEMON_SETS.key(), None);
        if sets.is_empty() {
            return Pass::default();
        }
        let (nodes, _) = api.store.list(&NODES.key(), None);
        let (all_pods, _) = api.store.list(&PODS.key(), None);
        let by_ns = Claimable::by_namespace(&all_pods);
        let none = Claimable::new(Vec::new());
        let mut w = Writer::new(api, COMPONENT);
        for ds in &sets {
            let ns_pods = by_ns.get(meta::namespace(ds)).unwrap_or(&none);
            sync_one(&mut w, ds, &nodes, ns_pods, now);
        }
        Pass { retry: w.retry }
    }
}

fn sync_one(
    w: &mut Writer<'_>,
    ds: &Value,
    nodes: &[Arc<Value>],
    ns_pods: &Claimable<'_>,
    now: i64,
) {
    let Some(selector) = meta::selector(ds) else {
        return;
    };
    let mut adopted: Vec<Value> = Vec::new();
    let active = meta::claim_all(
        w,
        (ds, DAEMON_SETS),
        (PODS, &selector),
        ns_pods
            .candidates(ds)
            .into_iter()
            .filter(|p| pods::is_active(p)),
        &mut adopted,
    );
    let runs: BTreeMap<String, bool> = nodes
        .iter()
        .filter(|n| !meta::is_deleting(n))
        .map(|n| (meta::name(n).to_owned(), should_run(ds, n)))
        .collect();
    let hash = template_hash(ds);
    if !meta::is_deleting(ds) {
        let todo = plan(ds, &runs, &active, &hash, now);
        for node in &todo.create {
            match w.create(PODS, meta::namespace(ds), daemon_pod(ds, node, &hash)) {
                Ok(created) => w.event(
                    ds,
                    "Normal",
                    "SuccessfulCreate",
                    &format!("Created pod: {}", meta::name(&created)),
                ),
                Err(e) => {
                    w.event(
                        ds,
                        "Warning",
                        "FailedCreate",
                        &format!("Error creating: {}", e.message),
                    );
                    break;
                }
            }
        }
        for name in &todo.delete {
            if w.delete(PODS, meta::namespace(ds), name, &json!({})) {
                w.event(
                    ds,
                    "Normal",
                    "SuccessfulDelete",
                    &format!("Deleted pod: {name}"),
                );
            }
        }
    }
    let status = daemon_status(ds, &runs, &active, &hash, now);
    if ds.get("status").and_then(Value::as_object) != Some(&status) {
        let _ = w.update_status(DAEMON_SETS, meta::with_status(ds, status));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn ds() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "logs", "namespace": "ops", "uid": "ds-uid", "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": "logs"}},
                     "template": {"metadata": {"labels": {"app": "logs"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}})
    }

    fn node(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {}})
    }

    fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Value {
        let mut p = json!({"metadata": {"name": name, "creationTimestamp": meta::format_time(NOW - 100),
                               "labels": {"app": "logs", "controller-revision-hash": hash}},
                           "spec": {"nodeName": node}, "status": {"phase": "Running"}});
        if ready {
            p["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
                "lastTransitionTime": meta::format_time(NOW - 60)}]);
        }
        p
    }

    fn runs(nodes: &[(&str, bool)]) -> BTreeMap<String, bool> {
        nodes.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect()
    }

    #[test]
    fn a_pod_is_made_for_each_node_without_one() {
        let a = pod("logs-a", "a", "h", true);
        let p = plan(
            &ds(),
            &runs(&[("a", true), ("b", true), ("c", false)]),
            &[&a],
            "h",
            NOW,
        );
        assert_eq!(
            p,
            DaemonPlan {
                create: vec!["b".into()],
                delete: vec![]
            }
        );
    }

    #[test]
    fn extra_misplaced_and_orphaned_pods_are_deleted() {
        let mut old = pod("logs-1", "a", "h", true);
        old["metadata"]["creationTimestamp"] = json!(meta::format_time(NOW - 500));
        let dup = pod("logs-2", "a", "h", true);
        let wrong = pod("logs-3", "c", "h", true);
        let gone = pod("logs-4", "zz", "h", true);
        let p = plan(
            &ds(),
            &runs(&[("a", true), ("c", false)]),
            &[&old, &dup, &wrong, &gone],
            "h",
            NOW,
        );
        assert_eq!(p.create, Vec::<String>::new());
        assert_eq!(p.delete, ["logs-2", "logs-3", "logs-4"]);
    }

    #[test]
    fn a_rolling_update_replaces_at_most_max_unavailable_old_pods_at_a_time() {
        let pods: Vec<Value> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| pod(&format!("logs-{n}"), n, "old", true))
            .collect();
        let refs: Vec<&Value> = pods.iter().collect();
        let nodes = runs(&[("a", true), ("b", true), ("c", true), ("d", true)]);
        assert_eq!(plan(&ds(), &nodes, &refs, "new", NOW).delete, ["logs-a"]);
        let mut two = ds();
        two["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}});
        assert_eq!(
            plan(&two, &nodes, &refs, "new", NOW).delete,
            ["logs-a", "logs-b"]
        );
        // One node already without an available pod uses the budget.
        let mut refs = refs;
        let fresh = pod("logs-a2", "a", "new", false);
        refs[0] = &fresh;
        assert_eq!(
            plan(&ds(), &nodes, &refs, "new", NOW).delete,
            Vec::<String>::new()
        );
        let mut on_delete = ds();
        on_delete["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        assert!(
            plan(&on_delete, &nodes, &refs, "new", NOW)
                .delete
                .is_empty()
        );
    }

    #[test]
    fn status_counts_are_by_node() {
        let a = pod("logs-a", "a", "h", true);
        let b = pod("logs-b", "b", "old", false);
        let c = pod("logs-c", "c", "h", true);
        let s = daemon_status(
            &ds(),
            &runs(&[("a", true), ("b", true), ("c", false), ("d", true)]),
            &[&a, &b, &c],
            "h",
            NOW,
        );
        assert_eq!(
            Value::Object(s),
            json!({"currentNumberScheduled": 2, "numberMisscheduled": 1, "desiredNumberScheduled": 3,
                   "numberReady": 1, "observedGeneration": 2, "updatedNumberScheduled": 1,
                   "numberAvailable": 1, "numberUnavailable": 2})
        );
    }

    #[test]
    fn taints_and_selectors_decide_where_a_daemon_runs() {
        let mut cordoned = node("a");
        cordoned["spec"]["unschedulable"] = json!(true);
        assert!(
            should_run(&ds(), &cordoned),
            "daemons tolerate unschedulable"
        );
        let mut tainted = node("b");
        tainted["spec"]["taints"] =
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
        assert!(!should_run(&ds(), &tainted));
        let mut tolerant = ds();
        tolerant["spec"]["template"]["spec"]["tolerations"] =
            json!([{"key": "dedicated", "operator": "Exists"}]);
        assert!(should_run(&tolerant, &tainted));
        let mut picky = ds();
        picky["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "c"});
        assert!(!should_run(&picky, &node("a")));
        assert!(should_run(&picky, &node("c")));
    }

    #[test]
    fn a_daemon_pod_is_pinned_to_its_node_by_affinity_and_tolerates_node_conditions() {
        let p = daemon_pod(&ds(), "n1", "abc");
        assert_eq!(
            p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchFields"][0]["values"],
            json!(["n1"])
        );
        assert_eq!(p["metadata"]["labels"]["controller-revision-hash"], "abc");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
        assert!(
            p["spec"]["tolerations"]
                .as_array()
                .is_some_and(|t| t.len() == 6)
        );
        assert_eq!(node_of(&p), "n1");
    }
}
