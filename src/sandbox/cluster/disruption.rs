//! The disruption controller (PodDisruptionBudget status) and the checks
//! of the `pods/eviction` subresource, as `kubectl drain` meets them.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::meta::{self, Gvr, PODS, Writer};
use super::{Controller, Pass, pods};
use crate::sandbox::api::{Api, ApiError};

const COMPONENT: &str = "controllermanager";

pub(crate) const PDBS: Gvr = Gvr {
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
    kind: "PodDisruptionBudget",
};

/// Keeps every PodDisruptionBudget's status in step with its pods.
#[derive(Debug, Default)]
pub(crate) struct DisruptionController;

impl Controller for DisruptionController {
    const NAME: &'static str = "disruption";

    fn watches(&self) -> &'static [&'static str] {
        &["pods", "poddisruptionbudgets.policy"]
    }

    fn reconcile(&mut self, api: &Api, _now: i64) -> Pass {
        let (budgets, _) = api.store.list(&PDBS.key(), None);
        let mut w = Writer::new(api, COMPONENT);
        // Each namespace's pods listed once a pass, not once a budget.
        let mut pods_of: HashMap<&str, PodIndex> = HashMap::new();
        for pdb in &budgets {
            let ns = meta::namespace(pdb);
            let index = pods_of
                .entry(ns)
                .or_insert_with(|| PodIndex::new(api.store.list(&PODS.key(), Some(ns)).0));
            let status = budget_status(pdb, &index.candidates(pdb));
            if pdb.get("status") != Some(&status) {
                let mut updated = (**pdb).clone();
                updated["status"] = status;
                w.update_status(PDBS, updated);
            }
        }
        Pass { retry: w.retry }
    }
}

/// A namespace's pods, and those with each value of a label, indexed the
/// first time a budget's selector pins that label: a pass over N budgets
/// of M pods matches each budget's selector against its own pods (a pool's
/// budget against the pool's pods), not against all M (1,000 budgets of
/// 10,000 pods: ten million matches a pass, and a pass follows every pod
/// status write).
struct PodIndex {
    pods: Vec<Arc<Value>>,
    /// Label key → label value → positions in `pods`.
    by_label: HashMap<String, HashMap<String, Vec<usize>>>,
}

impl PodIndex {
    fn new(pods: Vec<Arc<Value>>) -> Self {
        PodIndex {
            pods,
            by_label: HashMap::new(),
        }
    }

    /// The pods that can match `pdb`'s selector: those with the label value
    /// it pins (`key=value`, `key in (value)`), or every pod when it pins
    /// none. [`budget_status`] still applies the whole selector.
    fn candidates(&mut self, pdb: &Value) -> Vec<Arc<Value>> {
        let pinned = meta::selector(pdb).and_then(|s| {
            s.requirements().iter().find_map(|r| {
                s.requires_exact_match(r.key())
                    .map(|v| (r.key().to_owned(), v.to_owned()))
            })
        });
        let Some((key, value)) = pinned else {
            return self.pods.clone();
        };
        let pods = &self.pods;
        let by_value = self.by_label.entry(key).or_insert_with_key(|key| {
            let mut m: HashMap<String, Vec<usize>> = HashMap::new();
            for (i, p) in pods.iter().enumerate() {
                if let Some(v) = p["metadata"]["labels"][key.as_str()].as_str() {
                    m.entry(v.to_owned()).or_default().push(i);
                }
            }
            m
        });
        by_value
            .get(&value)
            .map(|at| at.iter().map(|&i| pods[i].clone()).collect())
            .unwrap_or_default()
    }
}

/// `intstr.GetScaledValueFromIntOrPercent`, rounding up.
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * total + 99) / 100)
        }
        _ => None,
    }
}

/// The pods a budget covers: those its selector picks, not yet finished.
fn covered<'a>(pdb: &Value, pods: &'a [Arc<Value>]) -> Vec<&'a Value> {
    let Some(selector) = meta::selector(pdb) else {
        return Vec::new();
    };
    pods.iter()
        .map(|p| p.as_ref())
        .filter(|p| !pods::is_terminal(p) && selector.matches_object(p))
        .collect()
}

/// The status the disruption controller writes: expected and healthy pods,
/// how many must stay healthy, and how many may go now.
pub(crate) fn budget_status(pdb: &Value, ns_pods: &[Arc<Value>]) -> Value {
    let pods = covered(pdb, ns_pods);
    let expected = pods.len() as i64;
    let healthy = pods
        .iter()
        .filter(|p| pods::is_ready(p) && !meta::is_deleting(p))
        .count() as i64;
    let spec = &pdb["spec"];
    let desired = if let Some(min) = spec.get("minAvailable") {
        scaled(min, expected).unwrap_or(0)
    } else if let Some(max) = spec.get("maxUnavailable") {
        (expected - scaled(max, expected).unwrap_or(0)).max(0)
    } else {
        0
    };
    let allowed = (healthy - desired).max(0);
    let (cond_status, reason, message) = if allowed > 0 {
        ("True", "SufficientPods", "")
    } else {
        ("False", "InsufficientPods", "")
    };
    let transition = pdb["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionAllowed"))
        .filter(|c| c["status"] == cond_status)
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
        .unwrap_or_else(|| meta::format_time(meta::now_secs()));
    json!({
        "observedGeneration": pdb["metadata"]["generation"].as_i64().unwrap_or(1),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": cond_status,
            "reason": reason,
            "message": message,
            "observedGeneration": pdb["metadata"]["generation"].as_i64().unwrap_or(1),
            "lastTransitionTime": transition,
        }],
    })
}

/// Whether evicting `pod` keeps every budget that covers it, as the
/// eviction REST handler decides: finished, pending or deleting pods may
/// always go; a pod under two budgets cannot be evicted; otherwise the
/// budget must allow a disruption.
pub(crate) fn check_eviction(api: &Api, pod: &Value) -> Result<(), ApiError> {
    let phase = meta::str_at(pod, "/status/phase");
    if matches!(phase, "Succeeded" | "Failed" | "Pending" | "") || meta::is_deleting(pod) {
        return Ok(());
    }
    let ns = meta::namespace(pod);
    let (budgets, _) = api.store.list(&PDBS.key(), Some(ns));
    let matching: Vec<_> = budgets
        .iter()
        .filter(|b| meta::selector(b).is_some_and(|s| !s.is_empty() && s.matches_object(pod)))
        .collect();
    match matching.as_slice() {
        [] => Ok(()),
        [pdb] => {
            let (ns_pods, _) = api.store.list(&PODS.key(), Some(ns));
            let status = budget_status(pdb, &ns_pods);
            let healthy = status["currentHealthy"].as_i64().unwrap_or(0);
            let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
            // An unready pod does not count as healthy: evicting it costs
            // the budget nothing while the budget is met.
            if status["disruptionsAllowed"].as_i64().unwrap_or(0) > 0
                || (!pods::is_ready(pod) && healthy >= desired)
            {
                return Ok(());
            }
            let mut e = ApiError::new_status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            );
            e.details = Some(json!({"causes": [{
                "reason": "DisruptionBudget",
                "message": format!(
                    "The disruption budget {} needs {desired} healthy pods and has {healthy} currently",
                    meta::name(pdb)
                ),
            }]}));
            Err(e)
        }
        _ => Err(ApiError::new_status(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
    }

    fn pdb(spec: Value) -> Value {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "web"}});
        json!({"metadata": {"name": "web", "namespace": "default", "generation": 1}, "spec": spec})
    }

    #[test]
    fn a_budget_is_counted_from_the_pods_of_the_label_it_pins_as_from_all_pods() {
        let labelled = |name: &str, app: &str| {
            let mut p = Value::clone(&pod(name, true));
            p["metadata"]["labels"]["app"] = json!(app);
            Arc::new(p)
        };
        let all = vec![
            labelled("w1", "web"),
            labelled("d1", "db"),
            labelled("w2", "web"),
            Arc::new(json!({"metadata": {"name": "bare", "namespace": "default"}})),
            labelled("d2", "db"),
        ];
        let mut index = PodIndex::new(all.clone());
        // The counts (the condition's time is the clock's).
        let counts = |pdb: &Value, pods: &[Arc<Value>]| -> Vec<Value> {
            let s = budget_status(pdb, pods);
            [
                "expectedPods",
                "currentHealthy",
                "desiredHealthy",
                "disruptionsAllowed",
            ]
            .iter()
            .map(|k| s[*k].clone())
            .collect()
        };
        let names = |pods: &[Arc<Value>]| -> Vec<String> {
            pods.iter().map(|p| meta::name(p).to_owned()).collect()
        };
        let web = pdb(json!({"minAvailable": 1}));
        assert_eq!(names(&index.candidates(&web)), ["w1", "w2"]);
        assert_eq!(counts(&web, &index.candidates(&web)), counts(&web, &all));
        // A selector pinning no value: every pod is a candidate.
        let mut not_db = pdb(json!({"maxUnavailable": 1}));
        not_db["spec"]["selector"] =
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]});
        assert_eq!(index.candidates(&not_db).len(), all.len());
        assert_eq!(
            counts(&not_db, &index.candidates(&not_db)),
            counts(&not_db, &all)
        );
        // A value no pod has: none.
        let mut cache = pdb(json!({"minAvailable": 1}));
        cache["spec"]["selector"] = json!({"matchLabels": {"app": "cache"}});
        assert!(index.candidates(&cache).is_empty());
        assert_eq!(
            counts(&cache, &index.candidates(&cache)),
            counts(&cache, &all)
        );
    }

    #[test]
    fn budgets_count_healthy_pods_against_min_available_or_max_unavailable() {
        let pods = [pod("a", true), pod("b", true), pod("c", false)];
        let s = budget_status(&pdb(json!({"minAvailable": 1})), &pods);
        assert_eq!(
            (
                &s["expectedPods"],
                &s["currentHealthy"],
                &s["desiredHealthy"],
                &s["disruptionsAllowed"]
            ),
            (&json!(3), &json!(2), &json!(1), &json!(1))
        );
        let s = budget_status(&pdb(json!({"maxUnavailable": "34%"})), &pods);
        // 34% of 3 rounds up to 2 unavailable: 1 must stay healthy.
        assert_eq!(s["desiredHealthy"], 1);
        let s = budget_status(&pdb(json!({"minAvailable": "100%"})), &pods);
        assert_eq!(s["disruptionsAllowed"], 0);
        assert_eq!(s["conditions"][0]["reason"], "InsufficientPods");
    }
}
