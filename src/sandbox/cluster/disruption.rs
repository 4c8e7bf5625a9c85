//! The disruption controller (PodDisruptionBudget status) and the checks
//! of the `pods/eviction` subresource, as `kubectl drain` meets them.

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
        for pdb in &budgets {
            let (ns_pods, _) = api.store.list(&PODS.key(), Some(meta::namespace(pdb)));
            let status = budget_status(pdb, &ns_pods);
            if pdb.get("status") != Some(&status) {
                let mut updated = (**pdb).clone();
                updated["status"] = status;
                w.update_status(PDBS, updated);
            }
        }
        Pass { retry: w.retry }
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
