//! The controllers together, over a real [`Api`], with a stand-in kubelet
//! that moves bound pods along (the real one is another module's concern).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::meta::{self, DEPLOYMENTS, JOBS, NODES, PODS, REPLICA_SETS};
use crate::sandbox::api::{Api, Query, Target};
use crate::sandbox::builtin::builtin_resources;

/// What the stand-in kubelet does with a pod bound to a node.
#[derive(Clone, Copy)]
enum Kubelet {
    /// Runs it and reports it ready.
    Run,
    /// Runs it to completion with this exit code.
    Exit(i64),
}

struct Cluster {
    api: Arc<Api>,
    cancel: CancellationToken,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn q() -> Query {
    Query::default()
}

fn target(ns: &str, name: &str, sub: Option<&str>) -> Target {
    meta::target(ns, name, sub)
}

/// An API with `nodes` Ready nodes, the control plane, and a kubelet
/// stand-in behaving as told.
fn cluster(nodes: usize, kubelet: Kubelet) -> Cluster {
    let api = Arc::new(Api::new(builtin_resources()));
    for i in 0..nodes {
        let name = format!("node-{i}");
        let mut created = api
            .create("", "v1", "nodes", None, json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {}}), &q())
            .expect("node created");
        created["status"] = json!({"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                                   "conditions": [{"type": "Ready", "status": "True"}]});
        api.update(
            "",
            "v1",
            "nodes",
            &target("", &name, Some("status")),
            created,
            &q(),
        )
        .expect("node ready");
    }
    let cancel = CancellationToken::new();
    super::start(api.clone(), cancel.clone());
    tokio::spawn(kubelet_loop(api.clone(), cancel.clone(), kubelet));
    Cluster { api, cancel }
}

async fn kubelet_loop(api: Arc<Api>, cancel: CancellationToken, mode: Kubelet) {
    while !cancel.is_cancelled() {
        let (pods, _) = api.store.list("pods", None);
        for p in pods {
            if meta::str_at(&p, "/spec/nodeName").is_empty()
                || meta::is_deleting(&p)
                || meta::str_at(&p, "/status/phase") != "Pending"
            {
                continue;
            }
            let now = meta::format_time(meta::now_secs());
            let mut conds: Vec<Value> = meta::array_at(&p, "/status/conditions").to_vec();
            let mut new = (*p).clone();
            match mode {
                Kubelet::Run => {
                    conds.push(
                        json!({"type": "Ready", "status": "True", "lastTransitionTime": now}),
                    );
                    new["status"]["phase"] = json!("Running");
                    new["status"]["containerStatuses"] = json!([{"name": "main", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": now}}}]);
                }
                Kubelet::Exit(code) => {
                    new["status"]["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
                    new["status"]["containerStatuses"] = json!([{"name": "main", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": code}}}]);
                }
            }
            new["status"]["conditions"] = Value::Array(conds);
            let _ = api.update(
                "",
                "v1",
                "pods",
                &target(meta::namespace(&p), meta::name(&p), Some("status")),
                new,
                &q(),
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `probe` until it answers, failing the test after 10 seconds.
async fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn get(api: &Api, gvr: meta::Gvr, ns: &str, name: &str) -> Option<Value> {
    api.store.get(&gvr.key(), ns, name).map(|v| (*v).clone())
}

fn list(api: &Api, gvr: meta::Gvr) -> Vec<Value> {
    api.store
        .list(&gvr.key(), Some("default"))
        .0
        .iter()
        .map(|v| (**v).clone())
        .collect()
}

fn deployment(image: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "main", "image": image}]}}}})
}

/// The rollout-status verdict of `kubectl rollout status`.
fn rolled_out(d: &Value) -> bool {
    let replicas = meta::int_at(d, "/spec/replicas").unwrap_or(1);
    let n = |k: &str| meta::int_at(d, &format!("/status/{k}")).unwrap_or(0);
    meta::int_at(d, "/metadata/generation") <= meta::int_at(d, "/status/observedGeneration")
        && n("updatedReplicas") == replicas
        && n("replicas") == n("updatedReplicas")
        && n("availableReplicas") == n("updatedReplicas")
}

#[tokio::test]
async fn a_deployment_rolls_out_through_a_replica_set_to_pods_spread_over_nodes() {
    let c = cluster(3, Kubelet::Run);
    c.api
        .create(
            "apps",
            "v1",
            "deployments",
            Some("default"),
            deployment("nginx:1", 3),
            &q(),
        )
        .expect("created");
    let d = eventually("the rollout", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(rolled_out)
    })
    .await;

    let progressing = meta::condition(&d, "Progressing").expect("progressing");
    assert_eq!(progressing["reason"], "NewReplicaSetAvailable");
    assert_eq!(
        meta::condition(&d, "Available").expect("available")["status"],
        "True"
    );
    assert_eq!(
        d["metadata"]["annotations"][super::deployment::REVISION],
        "1"
    );

    let sets = list(&c.api, REPLICA_SETS);
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let hash = meta::str_at(rs, "/metadata/labels/pod-template-hash");
    assert_eq!(meta::name(rs), format!("web-{hash}"));
    assert_eq!(
        hash,
        super::deployment::pod_template_hash(&d["spec"]["template"], None)
    );
    assert_eq!(meta::controller_uid(rs), Some(meta::uid(&d)));

    let pods = list(&c.api, PODS);
    assert_eq!(pods.len(), 3);
    let mut nodes: Vec<&str> = pods
        .iter()
        .map(|p| meta::str_at(p, "/spec/nodeName"))
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["node-0", "node-1", "node-2"], "one pod per node");
    for p in &pods {
        let suffix = meta::name(p)
            .strip_prefix(&format!("{}-", meta::name(rs)))
            .expect("named after the ReplicaSet");
        assert_eq!(suffix.len(), 5);
        assert_eq!(meta::str_at(p, "/metadata/labels/pod-template-hash"), hash);
        assert_eq!(meta::controller_uid(p), Some(meta::uid(rs)));
        assert!(meta::condition_true(p, "PodScheduled"));
    }
    let events = list(&c.api, meta::EVENTS);
    assert!(events.iter().any(|e| e["reason"] == "ScalingReplicaSet"
        && e["message"] == format!("Scaled up replica set {} from 0 to 3", meta::name(rs))));
    assert!(events.iter().any(|e| e["reason"] == "Scheduled"));
}

#[tokio::test]
async fn a_template_change_rolls_over_to_a_new_replica_set_and_back() {
    let c = cluster(2, Kubelet::Run);
    c.api
        .create(
            "apps",
            "v1",
            "deployments",
            Some("default"),
            deployment("nginx:1", 2),
            &q(),
        )
        .expect("created");
    let first = eventually("rollout 1", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(rolled_out)
    })
    .await;

    let mut changed = first.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    c.api
        .update(
            "apps",
            "v1",
            "deployments",
            &target("default", "web", None),
            changed,
            &q(),
        )
        .expect("updated");
    let second = eventually("rollout 2", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(|d| {
            rolled_out(d) && d["metadata"]["annotations"][super::deployment::REVISION] == "2"
        })
    })
    .await;
    let sets = list(&c.api, REPLICA_SETS);
    assert_eq!(sets.len(), 2);
    let (old, new): (Vec<&Value>, Vec<&Value>) = sets
        .iter()
        .partition(|s| s["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1");
    assert_eq!(old[0]["spec"]["replicas"], 0);
    assert_eq!(new[0]["spec"]["replicas"], 2);
    assert_eq!(
        new[0]["metadata"]["annotations"][super::deployment::REVISION],
        "2"
    );
    let pods = eventually("old pods gone", || {
        let pods = list(&c.api, PODS);
        (pods.len() == 2).then_some(pods)
    })
    .await;
    assert!(
        pods.iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "nginx:2")
    );

    // Rolling back to the first template reuses its ReplicaSet with revision 3.
    let mut back = second.clone();
    back["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1");
    c.api
        .update(
            "apps",
            "v1",
            "deployments",
            &target("default", "web", None),
            back,
            &q(),
        )
        .expect("updated");
    eventually("rollback", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(|d| {
            rolled_out(d) && d["metadata"]["annotations"][super::deployment::REVISION] == "3"
        })
    })
    .await;
    let reused = get(&c.api, REPLICA_SETS, "default", meta::name(old[0])).expect("same ReplicaSet");
    assert_eq!(
        reused["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"],
        "1"
    );
    assert_eq!(list(&c.api, REPLICA_SETS).len(), 2);
}

#[tokio::test]
async fn a_recreate_rollout_starts_new_pods_only_once_the_old_ones_are_gone() {
    let c = cluster(2, Kubelet::Run);
    let mut d = deployment("nginx:1", 2);
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    c.api
        .create("apps", "v1", "deployments", Some("default"), d, &q())
        .expect("created");
    let first = eventually("rollout 1", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(rolled_out)
    })
    .await;
    let old_rs = list(&c.api, REPLICA_SETS).remove(0);

    let mut changed = first.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    c.api
        .update(
            "apps",
            "v1",
            "deployments",
            &target("default", "web", None),
            changed,
            &q(),
        )
        .expect("updated");
    eventually("rollout 2", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(|d| {
            rolled_out(d) && d["metadata"]["annotations"][super::deployment::REVISION] == "2"
        })
    })
    .await;
    let new_rs = list(&c.api, REPLICA_SETS)
        .into_iter()
        .find(|r| meta::name(r) != meta::name(&old_rs))
        .expect("new set");
    // Created at full size, which the controller only does once no old pod
    // is left; the old set went to zero first.
    let events = list(&c.api, meta::EVENTS);
    let pos = |msg: String| events.iter().position(|e| e["message"] == msg.as_str());
    let down = pos(format!(
        "Scaled down replica set {} from 2 to 0",
        meta::name(&old_rs)
    ))
    .expect("scaled down");
    let up = pos(format!(
        "Scaled up replica set {} from 0 to 2",
        meta::name(&new_rs)
    ))
    .expect("scaled up");
    assert!(down < up, "old pods go before new ones start");
}

#[tokio::test]
async fn a_paused_deployment_scales_but_does_not_roll_out_until_resumed() {
    let c = cluster(2, Kubelet::Run);
    c.api
        .create(
            "apps",
            "v1",
            "deployments",
            Some("default"),
            deployment("nginx:1", 2),
            &q(),
        )
        .expect("created");
    let d = eventually("rollout", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(rolled_out)
    })
    .await;

    let mut paused = d.clone();
    paused["spec"]["paused"] = json!(true);
    paused["spec"]["replicas"] = json!(3);
    paused["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    c.api
        .update(
            "apps",
            "v1",
            "deployments",
            &target("default", "web", None),
            paused,
            &q(),
        )
        .expect("paused");
    let d = eventually("paused and scaled", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(|d| {
            meta::condition(d, "Progressing").is_some_and(|c| c["reason"] == "DeploymentPaused")
                && d["status"]["availableReplicas"] == 3
        })
    })
    .await;
    let sets = list(&c.api, REPLICA_SETS);
    assert_eq!(sets.len(), 1, "no new ReplicaSet while paused");
    assert_eq!(
        sets[0]["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"],
        "3"
    );
    assert_eq!(
        d["status"].get("updatedReplicas"),
        None,
        "the running pods are not of the new template"
    );

    let mut resumed = d.clone();
    resumed["spec"]["paused"] = json!(false);
    c.api
        .update(
            "apps",
            "v1",
            "deployments",
            &target("default", "web", None),
            resumed,
            &q(),
        )
        .expect("resumed");
    eventually("rollout after resume", || {
        get(&c.api, DEPLOYMENTS, "default", "web").filter(|d| {
            rolled_out(d) && d["metadata"]["annotations"][super::deployment::REVISION] == "2"
        })
    })
    .await;
}

#[tokio::test]
async fn scaling_a_replica_set_down_removes_the_cheapest_pod_first() {
    let c = cluster(1, Kubelet::Run);
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "agents", "namespace": "default"},
                    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "agent"}},
                             "template": {"metadata": {"labels": {"app": "agent"}},
                                          "spec": {"containers": [{"name": "main", "image": "agent"}]}}}});
    c.api
        .create("apps", "v1", "replicasets", Some("default"), rs, &q())
        .expect("created");
    let pods = eventually("three ready pods", || {
        let pods = list(&c.api, PODS);
        (pods.len() == 3 && pods.iter().all(super::pods::is_ready)).then_some(pods)
    })
    .await;
    // The idle agent advertises a low deletion cost; busy ones a high one.
    for (i, p) in pods.iter().enumerate() {
        let mut p = p.clone();
        let cost = if i == 1 { "-100" } else { "100" };
        p["metadata"]["annotations"] = json!({super::pods::DELETION_COST: cost});
        c.api
            .update(
                "",
                "v1",
                "pods",
                &target("default", meta::name(&p), None),
                p,
                &q(),
            )
            .expect("annotated");
    }
    let idle = meta::name(&pods[1]).to_string();
    let mut set = get(&c.api, REPLICA_SETS, "default", "agents").expect("rs");
    set["spec"]["replicas"] = json!(2);
    c.api
        .update(
            "apps",
            "v1",
            "replicasets",
            &target("default", "agents", None),
            set,
            &q(),
        )
        .expect("scaled");
    let left = eventually("two pods", || {
        let pods = list(&c.api, PODS);
        (pods.len() == 2).then_some(pods)
    })
    .await;
    assert!(
        left.iter().all(|p| meta::name(p) != idle),
        "the idle pod went"
    );
    let rs = eventually("status", || {
        get(&c.api, REPLICA_SETS, "default", "agents")
            .filter(|r| r["status"]["replicas"] == 2 && r["status"]["readyReplicas"] == 2)
    })
    .await;
    assert_eq!(
        rs["status"]["observedGeneration"],
        rs["metadata"]["generation"]
    );
}

#[tokio::test]
async fn a_replica_set_releases_a_relabelled_pod_and_replaces_it() {
    let c = cluster(1, Kubelet::Run);
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "agents", "namespace": "default"},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "agent"}},
                             "template": {"metadata": {"labels": {"app": "agent"}},
                                          "spec": {"containers": [{"name": "main", "image": "agent"}]}}}});
    c.api
        .create("apps", "v1", "replicasets", Some("default"), rs, &q())
        .expect("created");
    let first = eventually("a pod", || list(&c.api, PODS).into_iter().next()).await;
    let mut quarantined = first.clone();
    quarantined["metadata"]["labels"] = json!({"app": "debug"});
    c.api
        .update(
            "",
            "v1",
            "pods",
            &target("default", meta::name(&first), None),
            quarantined,
            &q(),
        )
        .expect("relabelled");
    eventually("a replacement", || {
        (list(&c.api, PODS).len() == 2).then_some(())
    })
    .await;
    let released = get(&c.api, PODS, "default", meta::name(&first)).expect("kept");
    assert_eq!(meta::controller_of(&released), None, "no longer owned");
}

fn job(spec: Value) -> Value {
    let mut j = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": "default"},
                       "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                      "containers": [{"name": "main", "image": "busybox"}]}}}});
    if let (Some(s), Some(extra)) = (j["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    j
}

#[tokio::test]
async fn a_job_runs_its_completions_and_reports_complete() {
    let c = cluster(2, Kubelet::Exit(0));
    c.api
        .create(
            "batch",
            "v1",
            "jobs",
            Some("default"),
            job(json!({"completions": 3, "parallelism": 2})),
            &q(),
        )
        .expect("created");
    let j = eventually("completion", || {
        get(&c.api, JOBS, "default", "migrate").filter(|j| meta::condition_true(j, "Complete"))
    })
    .await;
    assert_eq!(j["status"]["succeeded"], 3);
    assert_eq!(j["status"].get("failed"), None);
    assert!(meta::condition_true(&j, "SuccessCriteriaMet"));
    assert_eq!(
        meta::condition(&j, "Complete").expect("complete")["reason"],
        "CompletionsReached"
    );
    assert!(j["status"]["completionTime"].is_string() && j["status"]["startTime"].is_string());
    let pods = list(&c.api, PODS);
    assert_eq!(pods.len(), 3, "no pod beyond the completions");
    for p in &pods {
        assert!(meta::name(p).starts_with("migrate-"));
        assert_eq!(p["metadata"]["labels"]["job-name"], "migrate");
        assert_eq!(
            p["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
            meta::uid(&j)
        );
        assert_eq!(meta::controller_uid(p), Some(meta::uid(&j)));
    }
}

#[tokio::test]
async fn a_job_whose_pods_keep_failing_fails_at_the_backoff_limit() {
    let c = cluster(1, Kubelet::Exit(1));
    c.api
        .create(
            "batch",
            "v1",
            "jobs",
            Some("default"),
            job(json!({"backoffLimit": 1})),
            &q(),
        )
        .expect("created");
    let j = eventually("failure", || {
        get(&c.api, JOBS, "default", "migrate").filter(|j| meta::condition_true(j, "Failed"))
    })
    .await;
    assert_eq!(j["status"]["failed"], 2);
    assert_eq!(
        meta::condition(&j, "Failed").expect("failed")["reason"],
        "BackoffLimitExceeded"
    );
    assert!(meta::condition_true(&j, "FailureTarget"));
    assert_eq!(list(&c.api, PODS).len(), 2);
}

#[tokio::test]
async fn a_fail_job_rule_ends_the_job_on_the_first_matching_exit_code() {
    let c = cluster(1, Kubelet::Exit(42));
    let policy = json!({"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]});
    c.api
        .create(
            "batch",
            "v1",
            "jobs",
            Some("default"),
            job(json!({"backoffLimit": 5, "podFailurePolicy": policy})),
            &q(),
        )
        .expect("created");
    let j = eventually("failure", || {
        get(&c.api, JOBS, "default", "migrate").filter(|j| meta::condition_true(j, "Failed"))
    })
    .await;
    let failed = meta::condition(&j, "Failed").expect("failed");
    assert_eq!(failed["reason"], "PodFailurePolicy");
    assert!(
        meta::str_at(failed, "/message").starts_with("Container main for pod default/migrate-")
    );
    assert_eq!(list(&c.api, PODS).len(), 1);
}

#[tokio::test]
async fn a_finished_job_with_a_ttl_is_deleted_with_its_pods() {
    let c = cluster(1, Kubelet::Exit(0));
    c.api
        .create(
            "batch",
            "v1",
            "jobs",
            Some("default"),
            job(json!({"ttlSecondsAfterFinished": 0})),
            &q(),
        )
        .expect("created");
    eventually("the job to go", || {
        get(&c.api, JOBS, "default", "migrate")
            .is_none()
            .then_some(())
    })
    .await;
    eventually("its pods to go", || {
        list(&c.api, PODS).is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_pod_no_node_fits_stays_pending_with_the_schedulers_reason() {
    let c = cluster(2, Kubelet::Run);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "picky", "namespace": "default"},
                     "spec": {"nodeSelector": {"gpu": "true"}, "containers": [{"name": "main", "image": "x"}]}});
    c.api
        .create("", "v1", "pods", Some("default"), pod, &q())
        .expect("created");
    let p = eventually("the verdict", || {
        get(&c.api, PODS, "default", "picky")
            .filter(|p| meta::condition(p, "PodScheduled").is_some())
    })
    .await;
    let cond = meta::condition(&p, "PodScheduled").expect("condition");
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("False"), Some("Unschedulable"))
    );
    assert_eq!(
        cond["message"],
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    assert_eq!(meta::str_at(&p, "/spec/nodeName"), "");
    eventually("a FailedScheduling event", || {
        list(&c.api, meta::EVENTS)
            .into_iter()
            .find(|e| e["reason"] == "FailedScheduling" && e["involvedObject"]["name"] == "picky")
    })
    .await;

    // Labelling a node makes room: the pod is bound on a later pass.
    let mut n = get(&c.api, NODES, "", "node-1").expect("node");
    n["metadata"]["labels"]["gpu"] = json!("true");
    c.api
        .update("", "v1", "nodes", &target("", "node-1", None), n, &q())
        .expect("labelled");
    let bound = eventually("binding", || {
        get(&c.api, PODS, "default", "picky").filter(|p| meta::condition_true(p, "PodScheduled"))
    })
    .await;
    assert_eq!(meta::str_at(&bound, "/spec/nodeName"), "node-1");
}

#[tokio::test]
async fn the_control_plane_stops_when_cancelled() {
    let api = Arc::new(Api::new(builtin_resources()));
    let cancel = CancellationToken::new();
    let task = super::start(api, cancel.clone());
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("ends promptly")
        .expect("no panic");
}

#[tokio::test]
async fn a_parked_pod_is_bound_once_a_deleted_pod_frees_its_node() {
    let c = cluster(1, Kubelet::Run);
    let big = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
               "spec": {"terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "6"}}}]}})
    };
    c.api
        .create("", "v1", "pods", Some("default"), big("first"), &q())
        .expect("created");
    eventually("first bound", || {
        get(&c.api, PODS, "default", "first").filter(|p| meta::condition_true(p, "PodScheduled"))
    })
    .await;
    c.api
        .create("", "v1", "pods", Some("default"), big("second"), &q())
        .expect("created");
    eventually("second unschedulable", || {
        get(&c.api, PODS, "default", "second").filter(|p| {
            meta::condition(p, "PodScheduled").is_some_and(|c| c["reason"] == "Unschedulable")
        })
    })
    .await;
    // Passes go on (resyncs, other pods) while it is parked; it stays pending.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        meta::str_at(
            &get(&c.api, PODS, "default", "second").expect("pod"),
            "/spec/nodeName"
        ),
        ""
    );
    c.api
        .delete(
            "",
            "v1",
            "pods",
            &target("default", "first", None),
            &json!({"gracePeriodSeconds": 0}),
            &q(),
        )
        .expect("deleted");
    let bound = eventually("second bound after the delete", || {
        get(&c.api, PODS, "default", "second").filter(|p| meta::condition_true(p, "PodScheduled"))
    })
    .await;
    assert_eq!(meta::str_at(&bound, "/spec/nodeName"), "node-0");
}

#[test]
fn a_quick_pass_is_resynced_every_second_and_a_slow_one_after_fifty_times_its_length() {
    assert_eq!(
        super::resync_after(Duration::from_millis(10)),
        Duration::from_secs(1)
    );
    assert_eq!(
        super::resync_after(Duration::from_millis(20)),
        Duration::from_secs(1)
    );
    assert_eq!(
        super::resync_after(Duration::from_millis(200)),
        Duration::from_secs(10)
    );
}

/// A controller whose pass holds its thread until told to go on (at most
/// two seconds), saying when it started.
struct HeldPass {
    started: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    go_on: std::sync::mpsc::Receiver<()>,
}

impl super::Controller for HeldPass {
    const NAME: &'static str = "held";

    fn watches(&self) -> &'static [&'static str] {
        &[]
    }

    fn reconcile(&mut self, _api: &Api, _now: i64) -> super::Pass {
        *self.started.lock().expect("lock") = Some(std::time::Instant::now());
        let _ = self.go_on.recv_timeout(Duration::from_secs(2));
        super::Pass::default()
    }
}

/// Issue 32: a pass over a big store (a good part of a second at 10,000
/// pods) ran on the runtime's own threads, and every API request and watch
/// of the sandbox waited for it. A pass runs beside the runtime: here, on
/// a runtime of one thread, this test goes on while the pass is held.
#[tokio::test]
async fn a_long_pass_leaves_the_runtime_to_the_api() {
    let api = Arc::new(Api::new(builtin_resources()));
    let cancel = CancellationToken::new();
    let started = Arc::new(std::sync::Mutex::new(None));
    let (go_on, held) = std::sync::mpsc::channel();
    let ctrl = HeldPass {
        started: started.clone(),
        go_on: held,
    };
    let task = tokio::spawn(super::run(api, cancel.clone(), ctrl));
    let pass_started = loop {
        if let Some(at) = *started.lock().expect("lock") {
            break at;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let seen_after = pass_started.elapsed();
    let _ = go_on.send(());
    cancel.cancel();
    let _ = task.await;
    assert!(
        seen_after < Duration::from_millis(500),
        "this runtime waited {seen_after:?} for the pass"
    );
}
