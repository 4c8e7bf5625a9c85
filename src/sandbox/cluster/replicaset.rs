//! The ReplicaSet controller (kubernetes/pkg/controller/replicaset): keeps
//! `spec.replicas` active pods from the template, ranks surplus pods for
//! deletion, and reports replicas/fullyLabeled/ready/available in status.
//!
//! Like the real one it adopts orphan pods that match its selector and
//! releases pods it owns whose labels no longer match (the classic
//! "relabel a pod to take it out of service"); pods being deleted or
//! already terminal are neither counted nor adopted.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::meta::{self, Claimable, PODS, REPLICA_SETS, Writer};
use super::pods;
use super::{Controller, Pass};
use crate::sandbox::api::Api;
use crate::sandbox::selector::LabelSelector;

/// Most pods created or deleted for one ReplicaSet in a pass (`burstReplicas`).
const BURST: usize = 500;

const COMPONENT: &str = "replicaset-controller";

pub(crate) struct ReplicaSetController;

/// What a pass should do about one ReplicaSet's pod count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReplicaPlan {
    /// The count is right.
    Keep,
    /// Create this many pods.
    Create(usize),
    /// Delete these pods (names, in deletion order).
    Delete(Vec<String>),
}

/// `manageReplicas`: compares active owned pods with `spec.replicas`.
pub(crate) fn plan_replicas(
    want: i64,
    active: &[&Value],
    related: &[&Value],
    now: i64,
) -> ReplicaPlan {
    let have = active.len() as i64;
    if have < want {
        ReplicaPlan::Create(usize::try_from(want - have).unwrap_or(0).min(BURST))
    } else if have > want {
        let diff = usize::try_from(have - want).unwrap_or(0).min(BURST);
        ReplicaPlan::Delete(
            pods::pods_to_delete(active, related, diff, now)
                .into_iter()
                .map(|p| meta::name(p).to_string())
                .collect(),
        )
    } else {
        ReplicaPlan::Keep
    }
}

/// `calculateStatus` + `updateReplicaSetStatus`: the status a ReplicaSet
/// should have given its active owned pods. `create_error` is the message
/// of a failed pod creation this pass (condition ReplicaFailure).
pub(crate) fn replica_set_status(
    rs: &Value,
    active: &[&Value],
    create_error: Option<&str>,
    now: i64,
) -> Map<String, Value> {
    let template_labels = rs
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .unwrap_or(Value::Null);
    let template = LabelSelector::from_set(&template_labels);
    let min_ready = meta::int_at(rs, "/spec/minReadySeconds").unwrap_or(0);
    let fully_labeled = active.iter().filter(|p| template.matches_object(p)).count() as i64;
    let ready = active.iter().filter(|p| pods::is_ready(p)).count() as i64;
    let available = active
        .iter()
        .filter(|p| pods::is_available(p, min_ready, now))
        .count() as i64;

    let mut status = meta::status_map(rs);
    status.insert("replicas".into(), json!(active.len()));
    meta::set_omitempty(&mut status, "fullyLabeledReplicas", fully_labeled);
    meta::set_omitempty(&mut status, "readyReplicas", ready);
    meta::set_omitempty(&mut status, "availableReplicas", available);
    meta::set_omitempty(
        &mut status,
        "observedGeneration",
        meta::int_at(rs, "/metadata/generation").unwrap_or(0),
    );
    let mut conditions: Vec<Value> = meta::array_at(rs, "/status/conditions").to_vec();
    let has_failure = conditions.iter().any(|c| c["type"] == "ReplicaFailure");
    match create_error {
        Some(msg) if !has_failure => conditions.push(json!({
            "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
            "message": msg, "lastTransitionTime": meta::format_time(now),
        })),
        None if has_failure => conditions.retain(|c| c["type"] != "ReplicaFailure"),
        _ => {}
    }
    if conditions.is_empty() {
        status.remove("conditions");
    } else {
        status.insert("conditions".into(), Value::Array(conditions));
    }
    status
}

/// A pod for `owner` from `template` (`controller.GetPodFromTemplate`):
/// the template's labels, annotations, finalizers and spec, a controller
/// reference, and a name the API generates from `<owner>-`.
pub(crate) fn pod_from_template(owner: &Value, owner_gvr: meta::Gvr, template: &Value) -> Value {
    let mut metadata = Map::new();
    metadata.insert(
        "generateName".into(),
        json!(format!("{}-", meta::name(owner))),
    );
    metadata.insert("namespace".into(), json!(meta::namespace(owner)));
    for key in ["labels", "annotations", "finalizers"] {
        if let Some(v) = template
            .pointer(&format!("/metadata/{key}"))
            .filter(|v| !v.is_null())
        {
            metadata.insert(key.into(), v.clone());
        }
    }
    metadata.insert(
        "ownerReferences".into(),
        json!([meta::controller_ref(owner, owner_gvr)]),
    );
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

impl Controller for ReplicaSetController {
    const NAME: &'static str = "replicaset";

    fn watches(&self) -> &'static [&'static str] {
        &["replicasets.apps", "pods"]
    }

    fn wants(&self, change: &crate::sandbox::store::Change) -> bool {
        super::pod_of_kind(change, "ReplicaSet")
    }

    fn reconcile(&mut self, api: &Api, now: i64) -> Pass {
        let (sets, _) = api.store.list(&REPLICA_SETS.key(), None);
        let (all_pods, _) = api.store.list(&PODS.key(), None);
        let by_ns = Claimable::by_namespace(&all_pods);
        let none = Claimable::new(Vec::new());
        let mut w = Writer::new(api, COMPONENT);
        for rs in &sets {
            let ns_pods = by_ns.get(meta::namespace(rs)).unwrap_or(&none);
            sync_one(&mut w, rs, &sets, ns_pods, now);
        }
        Pass { retry: w.retry }
    }
}

fn sync_one(
    w: &mut Writer<'_>,
    rs: &Value,
    sets: &[Arc<Value>],
    ns_pods: &Claimable<'_>,
    now: i64,
) {
    let Some(selector) = meta::selector(rs) else {
        return;
    };
    let mut adopted: Vec<Value> = Vec::new();
    let active = meta::claim_all(
        w,
        (rs, REPLICA_SETS),
        (PODS, &selector),
        ns_pods
            .candidates(rs)
            .into_iter()
            .filter(|p| pods::is_active(p)),
        &mut adopted,
    );

    let mut create_error = None;
    if !meta::is_deleting(rs) {
        let want = meta::int_at(rs, "/spec/replicas").unwrap_or(1);
        // Only a scale-down ranks pods against their siblings': a look at
        // every pod of the namespace, not to be paid on every pass.
        let related = if (active.len() as i64) > want {
            related_pods(rs, sets, ns_pods.all())
        } else {
            Vec::new()
        };
        match plan_replicas(want, &active, &related, now) {
            ReplicaPlan::Keep => {}
            ReplicaPlan::Create(n) => {
                let template = rs.pointer("/spec/template").cloned().unwrap_or(Value::Null);
                // The apiserver refuses such a ReplicaSet; should one slip
                // through, its pods would be released as soon as created.
                let own_pods_match =
                    selector.matches(template.pointer("/metadata/labels").unwrap_or(&Value::Null));
                for _ in 0..if own_pods_match { n } else { 0 } {
                    match w.create(
                        PODS,
                        meta::namespace(rs),
                        pod_from_template(rs, REPLICA_SETS, &template),
                    ) {
                        Ok(created) => w.event(
                            rs,
                            "Normal",
                            "SuccessfulCreate",
                            &format!("Created pod: {}", meta::name(&created)),
                        ),
                        Err(e) => {
                            w.event(
                                rs,
                                "Warning",
                                "FailedCreate",
                                &format!("Error creating: {}", e.message),
                            );
                            create_error = Some(e.message);
                            // Like the slow-start batches: stop at the first failure.
                            break;
                        }
                    }
                }
            }
            ReplicaPlan::Delete(names) => {
                for name in names {
                    if w.delete(PODS, meta::namespace(rs), &name, &json!({})) {
                        w.event(
                            rs,
                            "Normal",
                            "SuccessfulDelete",
                            &format!("Deleted pod: {name}"),
                        );
                    }
                }
            }
        }
    }

    let status = replica_set_status(rs, &active, create_error.as_deref(), now);
    if rs.get("status").and_then(Value::as_object) != Some(&status) {
        let _ = w.update_status(REPLICA_SETS, meta::with_status(rs, status));
    }
}

/// `getIndirectlyRelatedPods`: pods selected by any ReplicaSet that has the
/// same controller as `rs` (or by `rs` alone when it has none).
fn related_pods<'a>(rs: &Value, sets: &[Arc<Value>], ns_pods: &[&'a Value]) -> Vec<&'a Value> {
    let siblings: Vec<&Value> = match meta::controller_uid(rs) {
        None => vec![rs],
        Some(owner) => sets
            .iter()
            .map(|s| s.as_ref())
            .filter(|s| {
                meta::namespace(s) == meta::namespace(rs) && meta::controller_uid(s) == Some(owner)
            })
            .collect(),
    };
    let selectors: Vec<LabelSelector> = siblings.iter().filter_map(|s| meta::selector(s)).collect();
    ns_pods
        .iter()
        .filter(|p| selectors.iter().any(|s| s.matches_object(p)))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn rs(replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-5d4f8", "namespace": "apps", "uid": "rs-uid", "generation": 3},
            "spec": {"replicas": replicas, "minReadySeconds": 0,
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web", "tier": "front"},
                                               "annotations": {"a": "b"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        })
    }

    fn pod(name: &str, labels: Value, ready: bool) -> Value {
        let mut p = json!({"metadata": {"name": name, "namespace": "apps", "uid": format!("u-{name}"),
                                        "labels": labels, "creationTimestamp": meta::format_time(NOW - 50)},
                           "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        if ready {
            p["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "lastTransitionTime": meta::format_time(NOW - 30)}]);
        }
        p
    }

    #[test]
    fn too_few_pods_are_topped_up_and_too_many_trimmed_unready_first() {
        let a = pod("a", json!({"app": "web"}), true);
        let b = pod("b", json!({"app": "web"}), false);
        let active = [&a, &b];
        assert_eq!(
            plan_replicas(5, &active, &active, NOW),
            ReplicaPlan::Create(3)
        );
        assert_eq!(plan_replicas(2, &active, &active, NOW), ReplicaPlan::Keep);
        assert_eq!(
            plan_replicas(1, &active, &active, NOW),
            ReplicaPlan::Delete(vec!["b".into()])
        );
        assert_eq!(
            plan_replicas(0, &active, &active, NOW),
            ReplicaPlan::Delete(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn creations_per_pass_are_capped_at_the_burst_size() {
        assert_eq!(
            plan_replicas(10_000, &[], &[], NOW),
            ReplicaPlan::Create(BURST)
        );
    }

    #[test]
    fn status_counts_fully_labeled_ready_and_available_pods() {
        let a = pod("a", json!({"app": "web", "tier": "front"}), true);
        let b = pod("b", json!({"app": "web"}), true);
        let c = pod("c", json!({"app": "web", "tier": "front"}), false);
        let mut set = rs(3);
        let status = replica_set_status(&set, &[&a, &b, &c], None, NOW);
        assert_eq!(
            Value::Object(status),
            json!({"replicas": 3, "fullyLabeledReplicas": 2, "readyReplicas": 2,
                                                 "availableReplicas": 2, "observedGeneration": 3})
        );
        set["spec"]["minReadySeconds"] = json!(60);
        let status = replica_set_status(&set, &[&a, &b, &c], None, NOW);
        assert_eq!(
            status.get("availableReplicas"),
            None,
            "ready 30 s ago is not yet available"
        );
    }

    #[test]
    fn an_empty_replica_set_reports_zero_replicas_but_omits_the_other_counts() {
        let status = replica_set_status(&rs(0), &[], None, NOW);
        assert_eq!(
            Value::Object(status),
            json!({"replicas": 0, "observedGeneration": 3})
        );
    }

    #[test]
    fn a_failed_creation_sets_replica_failure_until_creations_work_again() {
        let mut set = rs(1);
        let status = replica_set_status(&set, &[], Some("pods \"web-\" is forbidden"), NOW);
        let cond = &status["conditions"][0];
        assert_eq!(
            (cond["type"].as_str(), cond["reason"].as_str()),
            (Some("ReplicaFailure"), Some("FailedCreate"))
        );
        set["status"] = Value::Object(status);
        let healed = replica_set_status(&set, &[], None, NOW);
        assert_eq!(healed.get("conditions"), None);
    }

    #[test]
    fn pods_from_the_template_carry_its_metadata_and_a_controller_reference() {
        let set = rs(1);
        let p = pod_from_template(&set, REPLICA_SETS, &set["spec"]["template"]);
        assert_eq!(p["metadata"]["generateName"], "web-5d4f8-");
        assert_eq!(p["metadata"]["namespace"], "apps");
        assert_eq!(
            p["metadata"]["labels"],
            json!({"app": "web", "tier": "front"})
        );
        assert_eq!(p["metadata"]["annotations"], json!({"a": "b"}));
        assert_eq!(
            p["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f8", "uid": "rs-uid",
                    "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(p["spec"]["containers"][0]["image"], "nginx");
    }

    #[test]
    fn related_pods_span_every_replica_set_of_the_same_deployment() {
        let owner = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d", "controller": true}]);
        let mut old = rs(1);
        old["metadata"]["ownerReferences"] = owner.clone();
        let mut new = rs(1);
        new["metadata"]["name"] = json!("web-new");
        new["metadata"]["uid"] = json!("rs-new");
        new["metadata"]["ownerReferences"] = owner;
        new["spec"]["selector"] = json!({"matchLabels": {"app": "web", "v": "2"}});
        let lone = rs(1);
        let sets = vec![Arc::new(old.clone()), Arc::new(new)];
        let p1 = pod("p1", json!({"app": "web"}), true);
        let p2 = pod("p2", json!({"app": "web", "v": "2"}), true);
        let p3 = pod("p3", json!({"app": "db"}), true);
        let in_ns = [&p1, &p2, &p3];
        assert_eq!(related_pods(&old, &sets, &in_ns).len(), 2);
        assert_eq!(
            related_pods(&lone, &sets, &in_ns).len(),
            2,
            "no owner: its own selector only"
        );
    }
}
