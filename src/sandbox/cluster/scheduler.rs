//! kube-scheduler's default profile, reduced to what the sandbox's pods
//! need: pods with no node, for `default-scheduler`, not being deleted, are
//! bound to a node that passes the filters, in the default plugin order
//! (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit), and
//! among those to the one running the fewest pods (ties by name).
//!
//! A pod no node fits gets condition PodScheduled=False, reason
//! Unschedulable, with the scheduler's own message
//! (`0/3 nodes are available: 3 node(s) didn't match Pod's node
//! affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is
//! not helpful for scheduling.`) and a FailedScheduling event. Nodes whose
//! Ready condition is not True carry the `node.kubernetes.io/not-ready` (or
//! `unreachable`) NoSchedule taint, as the node lifecycle controller would
//! add. Preemption is reported but never performed.
//!
//! Binding is an update of `spec.nodeName` followed by condition
//! PodScheduled=True through the status subresource: the sandbox API has no
//! `pods/binding` handler that would do both at once.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::meta::{self, NODES, PODS, Writer};
use super::pods;
use super::{Controller, Pass};
use crate::sandbox::api::Api;
use crate::sandbox::store::{Change, EventType};

const COMPONENT: &str = "default-scheduler";

/// Requests or capacity in the units the scheduler compares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
}

/// Parses a Kubernetes quantity (`100m`, `1.5`, `512Mi`, `2G`, `1e3`).
pub(crate) fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let suffixes: [(&str, f64); 14] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    for (suffix, factor) in suffixes {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|x| x * factor);
        }
    }
    if let Some(n) = s.strip_suffix('E')
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        return n.parse::<f64>().ok().map(|x| x * 1e18);
    }
    s.parse::<f64>().ok()
}

fn quantity_of(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::String(s) => parse_quantity(s),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

/// One container's request for a resource (its limit when no request is
/// given, as the apiserver defaults it).
fn container_request(c: &Value, resource: &str) -> f64 {
    quantity_of(c.pointer(&format!("/resources/requests/{resource}")))
        .or_else(|| quantity_of(c.pointer(&format!("/resources/limits/{resource}"))))
        .unwrap_or(0.0)
}

/// `PodRequests`: the sum over containers, at least the largest init
/// container, plus the pod overhead.
pub(crate) fn pod_requests(pod: &Value) -> Resources {
    let total = |resource: &str| -> f64 {
        let sum: f64 = meta::array_at(pod, "/spec/containers")
            .iter()
            .map(|c| container_request(c, resource))
            .sum();
        let init = meta::array_at(pod, "/spec/initContainers")
            .iter()
            .map(|c| container_request(c, resource))
            .fold(0.0, f64::max);
        sum.max(init)
            + quantity_of(pod.pointer(&format!("/spec/overhead/{resource}"))).unwrap_or(0.0)
    };
    Resources {
        milli_cpu: (total("cpu") * 1000.0).ceil() as i64,
        memory: total("memory").ceil() as i64,
    }
}

/// What the scheduler knows of a node.
#[derive(Debug, Clone)]
pub(crate) struct NodeInfo {
    pub name: String,
    pub labels: Value,
    /// Effective taints, including the not-ready one.
    pub taints: Vec<Value>,
    pub unschedulable: bool,
    pub allocatable: Resources,
    pub max_pods: i64,
    pub requested: Resources,
    pub pods: i64,
    /// Priorities of the pods on it (for the preemption message).
    pub priorities: Vec<i64>,
}

impl NodeInfo {
    pub fn of(node: &Value) -> NodeInfo {
        let mut taints: Vec<Value> = meta::array_at(node, "/spec/taints").to_vec();
        let ready = meta::condition(node, "Ready").map(|c| meta::str_at(c, "/status"));
        let implied = match ready {
            Some("True") => None,
            Some("Unknown") => Some("node.kubernetes.io/unreachable"),
            _ => Some("node.kubernetes.io/not-ready"),
        };
        if let Some(key) = implied
            && !taints.iter().any(|t| t["key"] == key)
        {
            taints.push(json!({"key": key, "effect": "NoSchedule"}));
        }
        let alloc = |r: &str| {
            quantity_of(node.pointer(&format!("/status/allocatable/{r}")))
                .or_else(|| quantity_of(node.pointer(&format!("/status/capacity/{r}"))))
        };
        NodeInfo {
            name: meta::name(node).to_string(),
            labels: node
                .pointer("/metadata/labels")
                .cloned()
                .unwrap_or_else(|| json!({})),
            taints,
            unschedulable: meta::bool_at(node, "/spec/unschedulable"),
            allocatable: Resources {
                milli_cpu: alloc("cpu").map_or(i64::MAX, |c| (c * 1000.0).floor() as i64),
                memory: alloc("memory").map_or(i64::MAX, |m| m.floor() as i64),
            },
            max_pods: alloc("pods").map_or(110, |p| p as i64),
            requested: Resources::default(),
            pods: 0,
            priorities: Vec::new(),
        }
    }

    /// Accounts for a pod bound to this node.
    pub fn add(&mut self, pod: &Value) {
        let r = pod_requests(pod);
        self.requested.milli_cpu += r.milli_cpu;
        self.requested.memory += r.memory;
        self.pods += 1;
        self.priorities
            .push(meta::int_at(pod, "/spec/priority").unwrap_or(0));
    }
}

/// Why a node does not fit a pod (`framework.Status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unfit {
    /// Preemption cannot help (`UnschedulableAndUnresolvable`).
    Unresolvable(Vec<String>),
    /// Freeing resources could help (`Unschedulable`).
    Resolvable(Vec<String>),
}

impl Unfit {
    fn reasons(&self) -> &[String] {
        match self {
            Unfit::Unresolvable(r) | Unfit::Resolvable(r) => r,
        }
    }
}

/// `ToleratesTaint`.
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = meta::str_at(toleration, "/effect");
    if !effect.is_empty() && effect != meta::str_at(taint, "/effect") {
        return false;
    }
    let key = meta::str_at(toleration, "/key");
    if !key.is_empty() && key != meta::str_at(taint, "/key") {
        return false;
    }
    match meta::str_at(toleration, "/operator") {
        "" | "Equal" => meta::str_at(toleration, "/value") == meta::str_at(taint, "/value"),
        "Exists" => true,
        _ => false,
    }
}

pub(crate) fn tolerated(pod: &Value, taint: &Value) -> bool {
    meta::array_at(pod, "/spec/tolerations")
        .iter()
        .any(|t| tolerates(t, taint))
}

/// `NodeSelectorRequirement` against a node's labels (or, for match
/// fields, its name).
fn requirement_matches(req: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = meta::array_at(req, "/values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let int = |s: &str| s.parse::<i64>().ok();
    match meta::str_at(req, "/operator") {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => !value.is_some_and(|v| values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(int), values.first().and_then(|v| int(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(int), values.first().and_then(|v| int(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

/// `nodeSelector` and required node affinity (terms ORed, requirements ANDed).
pub(crate) fn affinity_matches(pod: &Value, node: &NodeInfo) -> bool {
    let label = |k: &str| node.labels.get(k).and_then(Value::as_str);
    let selector_ok = pod
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    if !selector_ok {
        return false;
    }
    let Some(required) = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
        .filter(|v| !v.is_null())
    else {
        return true;
    };
    meta::array_at(required, "/nodeSelectorTerms")
        .iter()
        .any(|term| {
            let exprs = meta::array_at(term, "/matchExpressions");
            let fields = meta::array_at(term, "/matchFields");
            (!exprs.is_empty() || !fields.is_empty())
                && exprs
                    .iter()
                    .all(|r| requirement_matches(r, label(meta::str_at(r, "/key"))))
                && fields.iter().all(|r| {
                    meta::str_at(r, "/key") == "metadata.name"
                        && requirement_matches(r, Some(&node.name))
                })
        })
}

/// The filters in the default profile's order; the first failure decides.
pub(crate) fn filter(pod: &Value, node: &NodeInfo) -> Result<(), Unfit> {
    if node.unschedulable
        && !tolerated(
            pod,
            &json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}),
        )
    {
        return Err(Unfit::Unresolvable(vec![
            "node(s) were unschedulable".into(),
        ]));
    }
    if let Some(t) = node.taints.iter().find(|t| {
        matches!(meta::str_at(t, "/effect"), "NoSchedule" | "NoExecute") && !tolerated(pod, t)
    }) {
        return Err(Unfit::Unresolvable(vec![format!(
            "node(s) had untolerated taint {{{}: {}}}",
            meta::str_at(t, "/key"),
            meta::str_at(t, "/value")
        )]));
    }
    if !affinity_matches(pod, node) {
        return Err(Unfit::Unresolvable(vec![
            "node(s) didn't match Pod's node affinity/selector".into(),
        ]));
    }
    let want = pod_requests(pod);
    let mut short = Vec::new();
    if node.pods + 1 > node.max_pods {
        short.push("Too many pods".to_string());
    }
    if want.milli_cpu > 0
        && want.milli_cpu
            > node
                .allocatable
                .milli_cpu
                .saturating_sub(node.requested.milli_cpu)
    {
        short.push("Insufficient cpu".to_string());
    }
    if want.memory > 0
        && want.memory
            > node
                .allocatable
                .memory
                .saturating_sub(node.requested.memory)
    {
        short.push("Insufficient memory".to_string());
    }
    if short.is_empty() {
        Ok(())
    } else {
        Err(Unfit::Resolvable(short))
    }
}

/// `reason → count` joined as the scheduler prints it: "2 x, 1 y", sorted
/// as strings.
fn histogram<'a>(reasons: impl Iterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r).or_default() += 1;
    }
    let mut parts: Vec<String> = counts
        .into_iter()
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    parts.sort();
    parts.join(", ")
}

/// `FitError.Error()` with the default preemption plugin's message.
pub(crate) fn fit_error(pod: &Value, nodes: &[NodeInfo], unfit: &[Unfit]) -> String {
    let n = nodes.len();
    if n == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let filters = histogram(
        unfit
            .iter()
            .flat_map(|u| u.reasons().iter().map(String::as_str)),
    );
    let preemption = if meta::str_at(pod, "/spec/preemptionPolicy") == "Never" {
        "not eligible due to preemptionPolicy=Never.".to_string()
    } else {
        let priority = meta::int_at(pod, "/spec/priority").unwrap_or(0);
        let per_node = unfit.iter().zip(nodes).map(|(u, node)| match u {
            Unfit::Unresolvable(_) => "Preemption is not helpful for scheduling",
            Unfit::Resolvable(_) if node.priorities.iter().all(|&p| p >= priority) => {
                "No preemption victims found for incoming pod"
            }
            // Victims exist, but the sandbox does not preempt.
            Unfit::Resolvable(_) => "Insufficient resources after preemption",
        });
        format!("0/{n} nodes are available: {}.", histogram(per_node))
    };
    format!("0/{n} nodes are available: {filters}. preemption: {preemption}")
}

/// Picks the node for `pod`: among those that pass the filters, the one with
/// the fewest pods, then by name. `Err` carries the scheduler's message.
pub(crate) fn schedule(pod: &Value, nodes: &[NodeInfo]) -> Result<usize, String> {
    let mut unfit = Vec::with_capacity(nodes.len());
    let mut best: Option<usize> = None;
    for (i, node) in nodes.iter().enumerate() {
        match filter(pod, node) {
            Ok(()) => {
                if best.is_none_or(|b| (node.pods, &node.name) < (nodes[b].pods, &nodes[b].name)) {
                    best = Some(i);
                }
            }
            Err(u) => unfit.push(u),
        }
    }
    best.ok_or_else(|| fit_error(pod, nodes, &unfit))
}

/// Should the scheduler place this pod?
fn wants_scheduling(pod: &Value) -> bool {
    let scheduler = meta::str_at(pod, "/spec/schedulerName");
    meta::str_at(pod, "/spec/nodeName").is_empty()
        && (scheduler.is_empty() || scheduler == COMPONENT)
        && !meta::is_deleting(pod)
        && !pods::is_terminal(pod)
}

/// The pod's conditions with PodScheduled set (lastTransitionTime kept when
/// the status does not change); `None` when nothing changes.
fn with_scheduled_condition(
    pod: &Value,
    status: &str,
    reason: &str,
    message: &str,
    now: i64,
) -> Option<Vec<Value>> {
    let mut conds = meta::array_at(pod, "/status/conditions").to_vec();
    let mut c = json!({"type": "PodScheduled", "status": status, "lastProbeTime": null,
                       "lastTransitionTime": meta::format_time(now)});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
        c["message"] = json!(message);
    }
    match conds.iter_mut().find(|x| x["type"] == "PodScheduled") {
        Some(cur) => {
            if cur["status"] == status
                && meta::str_at(cur, "/reason") == reason
                && meta::str_at(cur, "/message") == message
            {
                return None;
            }
            if cur["status"] == status {
                c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
            }
            *cur = c;
        }
        None => conds.insert(0, c),
    }
    Some(conds)
}

/// The default scheduler. Like the real one, a pod it could not place is
/// parked (its unschedulable queue) and tried again only when the cluster
/// changes in a way that could make room — a node added or changed, a pod
/// deleted or finished — when the pod itself changes, or after
/// [`PARK_FLUSH_SECS`]; so thousands of pending pods cost nothing per pass.
#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    /// Unschedulable pods by uid, with the generation that was tried.
    parked: HashMap<String, i64>,
    /// Something that could make room happened since the last pass.
    cluster_changed: bool,
    /// When parked pods were last all retried (Unix seconds).
    last_flush: i64,
}

/// Parked pods are retried at least this often (the real scheduler: 5 min).
const PARK_FLUSH_SECS: i64 = 60;

impl Controller for Scheduler {
    const NAME: &'static str = "scheduler";

    fn watches(&self) -> &'static [&'static str] {
        &["pods", "nodes"]
    }

    fn wants(&self, change: &Change) -> bool {
        // Unbound live pods to place, and anything that could make room.
        change.resource != "pods"
            || change.kind == EventType::Deleted
            || pods::is_terminal(&change.object)
            || (meta::str_at(&change.object, "/spec/nodeName").is_empty()
                && !meta::is_deleting(&change.object))
    }

    fn observe(&mut self, change: &Change) {
        let frees_room = match change.resource.as_str() {
            "nodes" => true,
            "pods" => {
                change.kind == EventType::Deleted
                    || (pods::is_terminal(&change.object)
                        && !change.previous.as_deref().is_some_and(pods::is_terminal))
            }
            _ => false,
        };
        self.cluster_changed |= frees_room;
    }

    fn reconcile(&mut self, api: &Api, now: i64) -> Pass {
        if self.cluster_changed || now - self.last_flush >= PARK_FLUSH_SECS {
            self.parked.clear();
            self.cluster_changed = false;
            self.last_flush = now;
        }
        let (nodes, _) = api.store.list(&NODES.key(), None);
        let (all_pods, _) = api.store.list(&PODS.key(), None);
        let mut infos: Vec<NodeInfo> = nodes.iter().map(|n| NodeInfo::of(n)).collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        let index: HashMap<String, usize> = infos
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let mut pending = Vec::new();
        for p in &all_pods {
            let node = meta::str_at(p, "/spec/nodeName");
            if node.is_empty() {
                if wants_scheduling(p) {
                    pending.push(p);
                }
            } else if !pods::is_terminal(p)
                && let Some(&i) = index.get(node)
            {
                infos[i].add(p);
            }
        }
        // Parked pods wait unless they changed since they were tried.
        pending.retain(|p| {
            self.parked.get(meta::uid(p))
                != Some(&meta::int_at(p, "/metadata/generation").unwrap_or(0))
        });
        // PrioritySort: higher priority first, then older first.
        pending.sort_by_cached_key(|p| {
            (
                -meta::int_at(p, "/spec/priority").unwrap_or(0),
                meta::created(p),
                meta::name(p).to_string(),
            )
        });

        let mut w = Writer::new(api, COMPONENT);
        for pod in pending {
            if !meta::array_at(pod, "/spec/schedulingGates").is_empty() {
                set_condition(
                    &mut w,
                    pod,
                    "False",
                    "SchedulingGated",
                    "Scheduling is blocked due to non-empty scheduling gates",
                    now,
                );
                continue;
            }
            match schedule(pod, &infos) {
                Ok(i) => {
                    if bind(&mut w, pod, &infos[i].name, now) {
                        infos[i].add(pod);
                    }
                }
                Err(message) => {
                    if set_condition(&mut w, pod, "False", "Unschedulable", &message, now) {
                        w.event(pod, "Warning", "FailedScheduling", &message);
                    }
                    self.parked.insert(
                        meta::uid(pod).to_string(),
                        meta::int_at(pod, "/metadata/generation").unwrap_or(0),
                    );
                }
            }
        }
        Pass { retry: w.retry }
    }
}

/// Writes condition PodScheduled; true when it changed.
fn set_condition(
    w: &mut Writer<'_>,
    pod: &Value,
    status: &str,
    reason: &str,
    message: &str,
    now: i64,
) -> bool {
    let Some(conds) = with_scheduled_condition(pod, status, reason, message, now) else {
        return false;
    };
    let mut new = pod.clone();
    new["status"]["conditions"] = Value::Array(conds);
    w.update_status(PODS, new).is_some()
}

/// Sets `spec.nodeName`, then PodScheduled=True.
fn bind(w: &mut Writer<'_>, pod: &Value, node: &str, now: i64) -> bool {
    let mut new = pod.clone();
    new["spec"]["nodeName"] = json!(node);
    let Some(bound) = w.update(PODS, new) else {
        return false;
    };
    let message = format!(
        "Successfully assigned {}/{} to {node}",
        meta::namespace(pod),
        meta::name(pod)
    );
    w.event(&bound, "Normal", "Scheduled", &message);
    // The kubelet may have written status in between: retry on conflict
    // with a fresh read.
    for _ in 0..3 {
        let current = w
            .api
            .store
            .get(&PODS.key(), meta::namespace(pod), meta::name(pod))
            .map(|p| (*p).clone());
        let Some(current) = current else {
            break;
        };
        let Some(conds) = with_scheduled_condition(&current, "True", "", "", now) else {
            break;
        };
        let mut with = current;
        with["status"]["conditions"] = Value::Array(conds);
        let retry_before = w.retry;
        if w.update_status(PODS, with).is_some() {
            w.retry = retry_before;
            break;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "disk": "ssd"}},
               "spec": {},
               "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "3"},
                          "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn pod(spec: Value) -> Value {
        let mut p = json!({"metadata": {"name": "web-1", "namespace": "apps"},
                           "spec": {"containers": [{"name": "c", "image": "nginx"}], "priority": 0}});
        if let (Some(s), Some(extra)) = (p["spec"].as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                s.insert(k.clone(), v.clone());
            }
        }
        p
    }

    fn infos(nodes: Vec<Value>) -> Vec<NodeInfo> {
        nodes.iter().map(NodeInfo::of).collect()
    }

    #[test]
    fn quantities_parse_in_every_notation() {
        let cases = [
            ("100m", 0.1),
            ("1", 1.0),
            ("1.5", 1.5),
            ("512Mi", 512.0 * 1024.0 * 1024.0),
            ("1Gi", 1024f64.powi(3)),
            ("2G", 2e9),
            ("1k", 1000.0),
            ("1e3", 1000.0),
            ("3E", 3e18),
        ];
        for (q, want) in cases {
            assert_eq!(parse_quantity(q), Some(want), "{q}");
        }
        assert_eq!(parse_quantity("lots"), None);
    }

    #[test]
    fn requests_sum_containers_and_fall_back_to_limits() {
        let p = pod(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
        }));
        let r = pod_requests(&p);
        assert_eq!(
            r.milli_cpu, 2000,
            "the init container needs more than the sum"
        );
        assert_eq!(r.memory, 64 * 1024 * 1024 + 1024 * 1024 * 1024);
    }

    #[test]
    fn the_least_busy_fitting_node_wins_and_ties_go_by_name() {
        let mut nodes = infos(vec![node("n0"), node("n1"), node("n2")]);
        let p = pod(json!({}));
        assert_eq!(schedule(&p, &nodes), Ok(0));
        nodes[0].add(&p);
        assert_eq!(schedule(&p, &nodes), Ok(1));
        nodes[1].add(&p);
        nodes[2].add(&p);
        nodes[2].add(&p);
        assert_eq!(schedule(&p, &nodes), Ok(0));
    }

    #[test]
    fn node_selectors_and_affinity_must_match_the_node_labels() {
        let nodes = infos(vec![node("n0"), node("n1")]);
        let cases = [
            (json!({"nodeSelector": {"disk": "ssd"}}), Ok(0)),
            (json!({"nodeSelector": {"kubernetes.io/hostname": "n1"}}), Ok(1)),
            (json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n0"]}]}]}}}}), Ok(1)),
            (json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}), Ok(1)),
            (json!({"nodeSelector": {"disk": "hdd"}}), Err(
                "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.".to_string())),
        ];
        for (spec, want) in cases {
            assert_eq!(schedule(&pod(spec.clone()), &nodes), want, "{spec}");
        }
    }

    #[test]
    fn tolerations_match_taints_by_key_value_and_effect() {
        let taint = json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"});
        let cases = [
            (
                json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
                true,
            ),
            (
                json!({"key": "dedicated", "operator": "Equal", "value": "gpu"}),
                true,
            ),
            (json!({"key": "dedicated", "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (json!({"key": "dedicated", "value": "cpu"}), false),
            (
                json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
                false,
            ),
            (json!({"key": "other", "operator": "Exists"}), false),
        ];
        for (toleration, want) in cases {
            assert_eq!(tolerates(&toleration, &taint), want, "{toleration}");
        }
    }

    #[test]
    fn unschedulable_tainted_and_unready_nodes_are_reported_like_the_scheduler() {
        let mut cordoned = node("a");
        cordoned["spec"]["unschedulable"] = json!(true);
        let mut tainted = node("b");
        tainted["spec"]["taints"] =
            json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
        let mut unready = node("c");
        unready["status"]["conditions"][0]["status"] = json!("False");
        let mut soft = node("d");
        soft["spec"]["taints"] =
            json!([{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]);
        soft["metadata"]["labels"]["disk"] = json!("hdd");
        let nodes = infos(vec![cordoned, tainted, unready, soft]);
        let got = schedule(&pod(json!({"nodeSelector": {"disk": "ssd"}})), &nodes);
        assert_eq!(
            got,
            Err("0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.".to_string())
        );
        // Tolerating the not-ready taint makes that node usable.
        let tolerant = pod(
            json!({"tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]}),
        );
        assert_eq!(schedule(&tolerant, &nodes), Ok(2));
    }

    #[test]
    fn full_nodes_report_each_missing_resource_and_no_preemption_victims() {
        let mut nodes = infos(vec![node("n0")]);
        let small = pod(json!({}));
        for _ in 0..3 {
            nodes[0].add(&small);
        }
        let big = pod(
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "3", "memory": "8Gi"}}}]}),
        );
        assert_eq!(
            schedule(&big, &nodes),
            Err("0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 Too many pods. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.".to_string())
        );
        let never = pod(json!({"preemptionPolicy": "Never", "nodeSelector": {"x": "y"}}));
        assert_eq!(
            schedule(&never, &nodes),
            Err("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: not eligible due to preemptionPolicy=Never.".to_string())
        );
    }

    #[test]
    fn without_nodes_the_message_says_so() {
        assert_eq!(
            schedule(&pod(json!({})), &[]),
            Err("no nodes available to schedule pods".to_string())
        );
    }

    #[test]
    fn only_unbound_live_pods_for_the_default_scheduler_are_scheduled() {
        assert!(wants_scheduling(&pod(
            json!({"schedulerName": "default-scheduler"})
        )));
        assert!(wants_scheduling(&pod(json!({}))));
        assert!(!wants_scheduling(&pod(json!({"schedulerName": "volcano"}))));
        assert!(!wants_scheduling(&pod(json!({"nodeName": "n0"}))));
        let mut deleting = pod(json!({}));
        deleting["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert!(!wants_scheduling(&deleting));
    }

    #[test]
    fn the_pod_scheduled_condition_is_written_only_when_it_changes() {
        let p = pod(json!({}));
        let conds = with_scheduled_condition(&p, "False", "Unschedulable", "m1", 100).expect("new");
        let mut p2 = p.clone();
        p2["status"] = json!({"conditions": conds});
        assert_eq!(
            with_scheduled_condition(&p2, "False", "Unschedulable", "m1", 200),
            None
        );
        let changed = with_scheduled_condition(&p2, "False", "Unschedulable", "m2", 200)
            .expect("new message");
        assert_eq!(
            changed[0]["lastTransitionTime"],
            meta::format_time(100),
            "same status keeps its transition time"
        );
        let bound = with_scheduled_condition(&p2, "True", "", "", 300).expect("bound");
        assert_eq!(
            bound[0],
            json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                                    "lastTransitionTime": meta::format_time(300)})
        );
    }
}
