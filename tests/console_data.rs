//! What the console reads: the controller's cluster view with its change
//! signal, started watch-only for observers and `--read-only`.

mod common;

use std::time::Duration;

use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::controller::{self, StartOptions};
use agentdeck::crd::{AgentPool, AgentTask};
use agentdeck::sandbox::Sandbox;
use common::eventually;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, CustomResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn sandbox() -> (Sandbox, kube::Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sb = Sandbox::start(0, 1).await.expect("sandbox");
    let client = sb.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [AgentPool::crd(), AgentTask::crd()] {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd");
    }
    (sb, client)
}

async fn create_pool(client: &kube::Client, name: &str) {
    let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
    let pool: AgentPool = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
        "metadata": {"name": name},
        "spec": {"image": "example.com/sim:1", "minReplicas": 1, "maxReplicas": 2}
    }))
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("pool created");
}

/// A watch-only controller (the console's, observing) on `client`.
fn watch_only(
    client: &kube::Client,
    cfg: &Config,
) -> (controller::ControllerHandle, CancellationToken) {
    let cancel = CancellationToken::new();
    let conn = Connection {
        client: client.clone(),
        namespace: "default".into(),
        streams: None,
    };
    let options = StartOptions {
        watch_only: true,
        all_namespaces: false,
        ..StartOptions::default()
    };
    (
        controller::start_with(conn, cfg, options, cancel.clone()),
        cancel,
    )
}

fn config() -> Config {
    let mut c = Config {
        controller_namespace: "default".into(),
        ..Config::default()
    };
    c.leader_election.retry_period_seconds = 1;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_only_controller_sees_changes_signals_them_and_never_writes() {
    let (sb, client) = sandbox().await;
    let (handle, cancel) = watch_only(&client, &config());
    let view = handle.view();
    let mut changes = view.changes.subscribe();
    eventually("the watches synced", || async {
        handle.is_synced().then_some(())
    })
    .await;
    let before = view.changes.count();
    changes.borrow_and_update();
    create_pool(&client, "watched").await;
    // The signal wakes a reader, and the store has the pool by then or soon.
    tokio::time::timeout(common::POLL_DEADLINE, changes.changed())
        .await
        .expect("a change is signalled")
        .expect("the signal is alive");
    eventually("the pool in the view", || async {
        view.pools
            .state()
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("watched"))
            .then_some(())
    })
    .await;
    assert!(view.changes.count() > before);

    // A leading controller on the same cluster writes within a moment: it
    // takes the Lease and applies the pool's Deployment.
    let leader_cancel = CancellationToken::new();
    let leader = controller::start(
        Connection {
            client: client.clone(),
            namespace: "default".into(),
            streams: None,
        },
        &config(),
        leader_cancel.clone(),
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    eventually("the leader applied the Deployment", || async {
        deployments
            .get_opt("iac-agent-watched")
            .await
            .expect("get")
            .map(|_| ())
    })
    .await;
    // Then it stops and releases the Lease; the watch-only one never takes
    // it, and a second pool gets no Deployment from it.
    leader_cancel.cancel();
    leader.join().await;
    create_pool(&client, "unattended").await;
    eventually("the second pool in the view", || async {
        view.pools
            .state()
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("unattended"))
            .then_some(())
    })
    .await;
    // Several election retry periods (1 s) pass.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!handle.leader().is_leader());
    let lease = Api::<Lease>::namespaced(client.clone(), "default")
        .get_opt("agentdeck-controller")
        .await
        .expect("get lease");
    let holder = lease
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert_ne!(
        holder,
        handle.identity(),
        "the watch-only controller took the Lease"
    );
    assert!(
        deployments
            .get_opt("iac-agent-unattended")
            .await
            .expect("get")
            .is_none(),
        "the watch-only controller wrote a Deployment"
    );
    // A watch that fails is counted (the console shows "resyncing").
    let failures = view.changes.watch_failures();
    sb.api().faults.fail(agentdeck::sandbox::faults::FailRule {
        path_prefix: "/apis/agentdeck.dev".into(),
        method: Some("GET".into()),
        code: 500,
        count: 3,
    });
    sb.api().faults.drop_watches();
    eventually("a watch failure counted", || async {
        (view.changes.watch_failures() > failures).then_some(())
    })
    .await;
    cancel.cancel();
    handle.join().await;
    sb.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rows_built_from_a_live_view_show_the_pools_and_their_tasks() {
    let (sb, client) = sandbox().await;
    create_pool(&client, "live").await;
    let tasks: Api<AgentTask> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        let t: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": format!("t-{i}"), "labels": {"n": i.to_string()}},
            "spec": {"pool": "live", "command": ["true"]}
        }))
        .expect("task");
        tasks
            .create(&PostParams::default(), &t)
            .await
            .expect("task");
    }
    let (handle, cancel) = watch_only(&client, &config());
    let view = handle.view();
    let thresholds = controller::prober::thresholds(&config().health_probe);
    let snap = eventually("a snapshot with the pool and its 3 tasks", || async {
        let events = kube::runtime::reflector::store::<agentdeck::cluster::event::CachedEvent>().0;
        let src = agentdeck::tui::sources(&view, &events);
        let snap = agentdeck::app::rows::build(&src, jiff::Timestamp::now(), &thresholds);
        (snap.pools.len() == 1 && snap.tasks.len() == 3).then_some(snap)
    })
    .await;
    let pool = &snap.pools[0];
    assert_eq!((pool.name.as_str(), pool.pending), ("live", 3));
    assert!(
        snap.tasks
            .iter()
            .all(|t| t.pool == "live" && t.labels.contains_key("n"))
    );
    cancel.cancel();
    handle.join().await;
    sb.stop().await;
}

/// A task's output once its pod is gone: its own kept tail, then its
/// record once deleted, then the pod's final log tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_outlives_its_pod_and_its_task() {
    use agentdeck::ops::kept;
    use k8s_openapi::api::core::v1::ConfigMap;
    let (_sb, client) = sandbox().await;
    create_pool(&client, "p").await;
    let tasks: Api<AgentTask> = Api::namespaced(client.clone(), "default");
    let task: AgentTask = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": "t1"}, "spec": {"pool": "p", "command": ["true"]}
    }))
    .expect("task");
    tasks
        .create(&PostParams::default(), &task)
        .await
        .expect("task created");
    assert_eq!(
        kept::task_output(&client, "default", "t1")
            .await
            .expect("read"),
        None,
        "nothing kept yet"
    );
    tasks
        .patch_status(
            "t1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"phase": "Failed", "agent": "gone-pod",
                "outputTail": "Plan: 1 to add\nError: lock held"}})),
        )
        .await
        .expect("status");
    let live = kept::task_output(&client, "default", "t1")
        .await
        .expect("read")
        .expect("the status's tail");
    assert_eq!(live.lines, ["Plan: 1 to add", "Error: lock held"]);
    assert!(live.from.contains("outputTail"), "{}", live.from);

    // Deleted, with its record in the pool's history.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let record = json!({"name": "t1", "pool": "p", "phase": "Failed", "attempts": 1,
        "deletedAt": "2026-01-01T00:00:00Z", "deletedBecause": "ended 90s ago, past the 60s to keep",
        "outputTail": "Error: lock held"});
    let history: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "agentdeck-task-history-p",
                     "labels": {"agentdeck.dev/task-history": "true"}},
        "data": {"t1.json": record.to_string()}
    }))
    .expect("cm");
    cms.create(&PostParams::default(), &history)
        .await
        .expect("history");
    tasks
        .delete("t1", &Default::default())
        .await
        .expect("deleted");
    let gone = kept::task_output(&client, "default", "t1")
        .await
        .expect("read")
        .expect("the record's tail");
    assert_eq!(gone.lines, ["Error: lock held"]);
    assert!(
        gone.from.contains("was deleted") && gone.from.contains("past the 60s"),
        "{}",
        gone.from
    );
    match kept::find_task(&client, "default", "t1")
        .await
        .expect("read")
    {
        Some(kept::TaskNow::Deleted(r)) => assert_eq!(r.deleted_at, "2026-01-01T00:00:00Z"),
        other => panic!("expected the record, got {other:?}"),
    }
    assert!(
        kept::find_task(&client, "default", "never")
            .await
            .expect("read")
            .is_none()
    );
    // `agentdeck task show` answers for the deleted task, and refuses a
    // name that never was.
    let conn = Connection {
        client: client.clone(),
        namespace: "default".into(),
        streams: None,
    };
    let mut shown = Vec::new();
    agentdeck::ops::cli::print_task(&conn, "t1", &mut shown)
        .await
        .expect("shown");
    let shown = String::from_utf8(shown).expect("utf-8");
    for want in [
        "Phase:     Failed",
        "Deleted:   2026-01-01T00:00:00Z (ended 90s ago, past the 60s to keep)",
        "Output (last lines, from agentdeck-task-history-p):\n  Error: lock held",
    ] {
        assert!(shown.contains(want), "{want:?} in\n{shown}");
    }
    let mut none = Vec::new();
    let refused = agentdeck::ops::cli::print_task(&conn, "never", &mut none)
        .await
        .expect_err("no such task");
    assert!(refused.to_string().contains("never"), "{refused}");

    // A pod's final tail, by container.
    let index = json!([{"pod": "agent-1", "container": "agent", "key": "agent-1__agent.log",
                         "capturedAt": "2026-01-01T00:00:00Z", "reason": "Terminated"}]);
    let tails: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "agentdeck-log-tails-p",
                     "labels": {"agentdeck.dev/log-tails": "true"},
                     "annotations": {"agentdeck.dev/log-tails-index": index.to_string()}},
        "data": {"agent-1__agent.log": "[t2] line one\n[t2] line two\n"}
    }))
    .expect("cm");
    cms.create(&PostParams::default(), &tails)
        .await
        .expect("tails");
    let tail = kept::pod_tail(&client, "default", "agent-1", None)
        .await
        .expect("read")
        .expect("the pod's tail");
    assert_eq!(tail.lines, ["[t2] line one", "[t2] line two"]);
    assert!(tail.from.contains("agentdeck-log-tails-p"), "{}", tail.from);
    assert!(
        kept::pod_tail(&client, "default", "agent-1", Some("other"))
            .await
            .expect("read")
            .is_none()
    );
}

/// The console's rows, built incrementally from the view's change feeds
/// while watch events flow, stay equal to a fresh build of the same
/// stores, and each pool's index equals a filter over its store: through
/// tasks created, advanced and deleted across three pools (one in Job
/// mode), agent and task pods coming and going, health samples changing
/// (every pod is probed and fails), and the watches relisting after the
/// API compacted its history (410 Gone). Runs ~40 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_rows_equal_a_fresh_build_through_churn_and_a_relist() {
    use agentdeck::app::rows::{Changes, RowBuilder, Snapshot};
    use agentdeck::cluster::pod::CachedPod;
    use agentdeck::crd::{LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_POOL, LABEL_TASK, MANAGED_BY};
    use agentdeck::plan::manifests::label_value;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::{DeleteParams, Patch, PatchParams};
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;
    use tokio::sync::Mutex;

    const POOLS: [&str; 3] = ["alpha", "beta", "gamma"];
    let churn_for = Duration::from_secs(
        std::env::var("CONSOLE_CHURN_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(36),
    );
    let (sb, client) = sandbox().await;
    let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
    for (i, name) in POOLS.iter().enumerate() {
        let mode = if i == 2 { "job" } else { "deployment" };
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name},
            "spec": {"image": "example.com/sim:1", "minReplicas": 1, "maxReplicas": 3,
                     "executionMode": mode}
        }))
        .expect("pool");
        pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
    }
    let mut cfg = config();
    cfg.health_probe.interval_seconds = 1;
    cfg.health_probe.timeout_seconds = 1;
    let (handle, cancel) = watch_only(&client, &cfg);
    let view = handle.view();
    eventually("the watches synced", || async {
        handle.is_synced().then_some(())
    })
    .await;
    let thresholds = controller::prober::thresholds(&cfg.health_probe);
    // Running tasks are flagged after 3 s: the rows follow the clock too.
    let long = Duration::from_secs(3);
    let events = kube::runtime::reflector::store::<agentdeck::cluster::event::CachedEvent>().0;

    // The console's side: takes what changed every 100 ms and updates.
    struct Console {
        told: agentdeck::tui::ViewChanges,
        builder: RowBuilder,
        updates: u64,
        /// Deltas that read the tasks' store whole (the first, a relist).
        task_relists: u64,
    }
    impl Console {
        fn update(
            &mut self,
            now: jiff::Timestamp,
            t: &agentdeck::health::FreshnessThresholds,
        ) -> Snapshot {
            let delta = self.told.take();
            if matches!(delta.tasks, Changes::All(_)) {
                self.task_relists += 1;
            }
            self.updates += 1;
            self.builder.update(delta, now, t)
        }
    }
    let console = Arc::new(Mutex::new(Console {
        told: agentdeck::tui::ViewChanges::new(view.clone(), events.clone(), Default::default()),
        builder: RowBuilder::flagging_long_running(long),
        updates: 0,
        task_relists: 0,
    }));
    let ticking = {
        let console = console.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            while !cancel.is_cancelled() {
                console
                    .lock()
                    .await
                    .update(jiff::Timestamp::now(), &thresholds);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    /// What the test wrote: tasks (pool, phase) and pods by name.
    #[derive(Default)]
    struct Model {
        tasks: BTreeMap<String, (String, &'static str)>,
        pods: BTreeMap<String, String>,
        next: u32,
    }
    let tasks: Api<AgentTask> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut model = Model::default();
    let mut rng = fastrand::Rng::with_seed(
        std::env::var("CONSOLE_CHURN_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(7),
    );
    let status = |v: serde_json::Value| Patch::Merge(json!({ "status": v }));
    let pp = PatchParams::default();

    async fn create_pod(pods: &Api<Pod>, name: &str, pool: &str, task: Option<&str>) {
        let mut labels = BTreeMap::from([
            (LABEL_POOL.to_owned(), label_value(pool)),
            (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
            (
                LABEL_COMPONENT.to_owned(),
                if task.is_some() { "task" } else { "agent" }.to_owned(),
            ),
        ]);
        if let Some(t) = task {
            labels.insert(LABEL_TASK.to_owned(), label_value(t));
        }
        // On no node of the sandbox: its kubelet leaves it alone, and the
        // test writes its status. Port 9 on loopback answers nothing, so
        // each probe fails and the pod's sample changes every round.
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": "elsewhere", "containers": [{"name": "agent",
                "image": "example.com/sim:1",
                "ports": [{"name": "health", "containerPort": 9}]}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("pod created");
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "127.0.0.1",
                "startTime": jiff::Timestamp::now().to_string()}})),
        )
        .await
        .expect("pod status");
    }

    // One step of churn.
    macro_rules! step {
        () => {{
            let live_agents = |m: &Model, pool: &str| -> Vec<String> {
                m.pods
                    .iter()
                    .filter(|(n, p)| p.as_str() == pool && n.starts_with("agent-"))
                    .map(|(n, _)| n.clone())
                    .collect()
            };
            match rng.u32(0..100) {
                0..30 if model.tasks.len() < 40 => {
                    model.next += 1;
                    let name = format!("t-{}", model.next);
                    let pool = POOLS[rng.usize(0..3)];
                    let t: AgentTask = serde_json::from_value(json!({
                        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                        "metadata": {"name": name, "labels": {"n": model.next.to_string()}},
                        "spec": {"pool": pool, "command": ["true"]}
                    }))
                    .expect("task");
                    tasks.create(&PostParams::default(), &t).await.expect("task");
                    model.tasks.insert(name, (pool.to_owned(), "Pending"));
                }
                0..70 if !model.tasks.is_empty() => {
                    let i = rng.usize(0..model.tasks.len());
                    let (name, (pool, phase)) = model
                        .tasks
                        .iter()
                        .nth(i)
                        .map(|(n, v)| (n.clone(), v.clone()))
                        .expect("task");
                    let agents = live_agents(&model, &pool);
                    let now = jiff::Timestamp::now().to_string();
                    let (next, body) = match phase {
                        "Pending" => {
                            // On a live agent, a gone one, or in Job mode a Job's pod.
                            let agent = if pool == "gamma" {
                                let pod = format!("job-{name}");
                                if !model.pods.contains_key(&pod) {
                                    create_pod(&pods, &pod, &pool, Some(&name)).await;
                                    model.pods.insert(pod.clone(), pool.clone());
                                }
                                pod
                            } else if !agents.is_empty() && rng.bool() {
                                agents[rng.usize(0..agents.len())].clone()
                            } else {
                                "agent-gone".to_owned()
                            };
                            ("Running", json!({"phase": "Running", "agent": agent,
                                "claimedAt": now, "startedAt": now, "attempts": 1,
                                "message": "claimed"}))
                        }
                        "Running" if rng.u32(0..3) == 0 => {
                            ("Running", json!({"message": format!("step {}", rng.u32(..)),
                                "lastHeartbeat": now}))
                        }
                        "Running" => {
                            let ok = rng.bool();
                            let ph = if ok { "Succeeded" } else { "Failed" };
                            (ph, json!({"phase": ph, "finishedAt": now,
                                "exitCode": if ok { 0 } else { 1 },
                                "message": if ok { "done" } else { "lock held" }}))
                        }
                        _ => {
                            // Finished: retried, back to the queue.
                            ("Pending", json!({"phase": "Pending", "agent": null,
                                "message": "retrying"}))
                        }
                    };
                    tasks.patch_status(&name, &pp, &status(body)).await.expect("status");
                    model.tasks.insert(name, (pool, next));
                }
                0..85 if !model.tasks.is_empty() => {
                    let i = rng.usize(0..model.tasks.len());
                    let name = model.tasks.keys().nth(i).cloned().expect("task");
                    tasks.delete(&name, &DeleteParams::default()).await.expect("delete");
                    model.tasks.remove(&name);
                    let pod = format!("job-{name}");
                    if model.pods.remove(&pod).is_some() {
                        pods.delete(&pod, &DeleteParams::default()).await.expect("delete");
                    }
                }
                0..93 if model.pods.len() < 8 => {
                    model.next += 1;
                    let pool = POOLS[rng.usize(0..2)];
                    let name = format!("agent-{pool}-{}", model.next);
                    create_pod(&pods, &name, pool, None).await;
                    model.pods.insert(name, pool.to_owned());
                }
                _ => {
                    let agents: Vec<String> = model
                        .pods
                        .keys()
                        .filter(|n| n.starts_with("agent-"))
                        .cloned()
                        .collect();
                    if !agents.is_empty() {
                        let name = agents[rng.usize(0..agents.len())].clone();
                        pods.delete(&name, &DeleteParams::default()).await.expect("delete");
                        model.pods.remove(&name);
                    }
                }
            }
        }};
    }

    // A checkpoint: the churn is paused; once the stores hold what was
    // written and the view is quiet, the delta and the stores are read
    // back to back (again if the view moved meanwhile) and compared.
    let mut checks = 0u32;
    let mut retried = 0u32;
    macro_rules! checkpoint {
        ($why:expr) => {{
            eventually("the stores caught up with the writes", || async {
                let t: BTreeMap<String, (String, &'static str)> = view
                    .tasks
                    .state()
                    .iter()
                    .map(|t| {
                        let ph = match t.phase() {
                            agentdeck::crd::TaskPhase::Pending => "Pending",
                            agentdeck::crd::TaskPhase::Running => "Running",
                            agentdeck::crd::TaskPhase::Succeeded => "Succeeded",
                            _ => "Failed",
                        };
                        (
                            t.metadata.name.clone().unwrap_or_default(),
                            (t.spec.pool.clone(), ph),
                        )
                    })
                    .collect();
                let p: BTreeSet<String> = view
                    .pods
                    .state()
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                (t == model.tasks && p == model.pods.keys().cloned().collect()).then_some(())
            })
            .await;
            let mut attempt = 0;
            loop {
                // Quiet: no watch event nor sample for 150 ms.
                loop {
                    let c = view.changes.count();
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    if view.changes.count() == c {
                        break;
                    }
                }
                let mut c = console.lock().await;
                let before = view.changes.count();
                let now = jiff::Timestamp::now();
                let incremental = c.update(now, &thresholds);
                let src = agentdeck::tui::sources(&view, &events);
                let mut by_index = Vec::new();
                let mut by_filter = Vec::new();
                let mut by_objects = Vec::new();
                for pool in POOLS.iter().copied().chain(["none"]) {
                    let names = |v: Vec<Arc<AgentTask>>| -> Vec<String> {
                        v.iter().filter_map(|o| o.metadata.name.clone()).collect()
                    };
                    let pnames = |v: Vec<Arc<CachedPod>>| -> Vec<String> {
                        v.iter().filter_map(|o| o.metadata.name.clone()).collect()
                    };
                    // The index's names (a name left behind by a relist
                    // shows here), and the objects it reads through them.
                    by_index.push((
                        pool,
                        view.by_pool.tasks.names("default", pool),
                        view.by_pool.pods.names("default", &label_value(pool)),
                    ));
                    by_objects.push((
                        pool,
                        names(view.pool_tasks("default", pool)),
                        pnames(view.pool_pods("default", &label_value(pool))),
                    ));
                    let mut t = names(
                        src.tasks
                            .iter()
                            .filter(|t| t.spec.pool == pool)
                            .cloned()
                            .collect(),
                    );
                    t.sort();
                    let mut p = pnames(
                        src.pods
                            .iter()
                            .filter(|p| {
                                p.metadata.labels.as_ref().and_then(|l| l.get(LABEL_POOL))
                                    == Some(&label_value(pool))
                            })
                            .cloned()
                            .collect(),
                    );
                    p.sort();
                    by_filter.push((pool, t, p));
                }
                let moved = view.changes.count() != before;
                drop(c);
                let fresh = RowBuilder::flagging_long_running(long).build(&src, now, &thresholds);
                if moved {
                    // Read while the view moved (a probe round): again.
                    retried += 1;
                    continue;
                }
                if (incremental != fresh || by_index != by_filter || by_objects != by_filter)
                    && attempt < 2
                {
                    // Once more after a quiet moment before calling it a
                    // difference (a change signalled a moment after its write).
                    attempt += 1;
                    retried += 1;
                    continue;
                }
                checks += 1;
                assert_eq!(
                    by_objects, by_filter,
                    "{}: the pool's objects differ from a filter",
                    $why
                );
                assert_eq!(
                    by_index, by_filter,
                    "{}: the pool index differs from a filter",
                    $why
                );
                if incremental != fresh {
                    panic!(
                        "{}: the incremental rows differ from a fresh build at {now}: {}",
                        $why,
                        first_difference(&incremental, &fresh)
                    );
                }
                break incremental;
            }
        }};
    }

    let started = tokio::time::Instant::now();
    let mut next_check = started + Duration::from_secs(2);
    let mut relists_forced = 0;
    let relist_at = [churn_for * 2 / 5, churn_for * 4 / 5];
    let mut largest = (0, 0, 0);
    while started.elapsed() < churn_for {
        step!();
        if relists_forced < relist_at.len() && started.elapsed() >= relist_at[relists_forced] {
            relists_forced += 1;
            // A write the task and pod watches never see, then the whole
            // history forgotten, then every watch dropped: each resumes
            // from a resourceVersion now compacted away, gets 410 Gone and
            // lists again, while the churn goes on.
            let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("marker-{relists_forced}")}
            }))
            .expect("cm");
            cms.create(&PostParams::default(), &cm).await.expect("cm");
            sb.api().store.compact();
            sb.api().faults.drop_watches();
            for _ in 0..6 {
                step!();
            }
        }
        if tokio::time::Instant::now() >= next_check {
            let snap = checkpoint!(format!("at {:?}", started.elapsed()));
            largest = largest.max((snap.tasks.len(), snap.agents.len(), snap.pools.len()));
            next_check = tokio::time::Instant::now() + Duration::from_secs(2);
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(5..40))).await;
    }
    // Stopped: the rows settle to a fresh build, past every task's
    // long-running threshold too.
    checkpoint!("after the churn".to_owned());
    tokio::time::sleep(long + Duration::from_secs(1)).await;
    let last = checkpoint!("after the churn, past the thresholds".to_owned());
    let (updates, task_relists) = {
        let c = console.lock().await;
        (c.updates, c.task_relists)
    };
    eprintln!(
        "incremental rows vs fresh build: {checks} checks, 0 differed ({retried} re-read as the view moved; \
         {updates} updates, {task_relists} whole task lists, largest {largest:?}, last {} tasks {} agents)",
        last.tasks.len(),
        last.agents.len()
    );
    assert!(checks >= 10, "{checks} checks");
    assert!(
        task_relists >= 2,
        "the task watch relisted after the compaction ({task_relists} whole lists seen)"
    );
    assert!(largest.0 >= 10 && largest.1 >= 2, "{largest:?}");
    cancel.cancel();
    ticking.await.expect("console loop");
    handle.join().await;
    sb.stop().await;
}

/// The first row (or sum) where `a` and `b` differ, both shown.
fn first_difference(
    a: &agentdeck::app::rows::Snapshot,
    b: &agentdeck::app::rows::Snapshot,
) -> String {
    fn rows<R: std::fmt::Debug + PartialEq>(
        what: &str,
        a: &[std::sync::Arc<R>],
        b: &[std::sync::Arc<R>],
    ) -> Option<String> {
        if a.len() != b.len() {
            return Some(format!(
                "{what}: {} rows incrementally, {} fresh",
                a.len(),
                b.len()
            ));
        }
        a.iter().zip(b).position(|(x, y)| x != y).map(|i| {
            format!(
                "{what} row {i}:\n incremental {:?}\n fresh       {:?}",
                a[i], b[i]
            )
        })
    }
    rows("pools", &a.pools, &b.pools)
        .or_else(|| rows("agents", &a.agents, &b.agents))
        .or_else(|| rows("tasks", &a.tasks, &b.tasks))
        .or_else(|| rows("events", &a.events, &b.events))
        .unwrap_or_else(|| format!("task counts {:?} vs {:?}", a.task_counts, b.task_counts))
}

/// The view's tasks keep no output (a finished task's `status.outputTail`,
/// up to 4 KiB each, is most of a large task store), yet say they have
/// one; the YAML view reads the whole task from the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_keeps_no_task_output_and_the_yaml_view_shows_it_whole() {
    let (_sb, client) = sandbox().await;
    let (handle, cancel) = watch_only(&client, &config());
    let view = handle.view();
    let tasks: Api<AgentTask> = Api::namespaced(client.clone(), "default");
    let task: AgentTask = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": "done"}, "spec": {"pool": "p"}
    }))
    .expect("task");
    tasks
        .create(&PostParams::default(), &task)
        .await
        .expect("task created");
    let output = "Plan: 3 to add, 0 to change\nApply complete!";
    tasks
        .patch_status(
            "done",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"status": {"phase": "Succeeded", "outputTail": output}}),
            ),
        )
        .await
        .expect("status");
    let cached = eventually("the finished task in the view", || async {
        view.tasks
            .state()
            .into_iter()
            .find(|t| t.phase() == agentdeck::crd::TaskPhase::Succeeded)
    })
    .await;
    let tail = cached.status.as_ref().and_then(|s| s.output_tail.clone());
    assert_eq!(
        tail.as_deref(),
        Some(""),
        "the view keeps none of the output"
    );
    assert!(agentdeck::cluster::task_output_stripped(&cached));

    let events = kube::runtime::reflector::store::<agentdeck::cluster::event::CachedEvent>().0;
    let key = agentdeck::app::ObjectKey {
        context: String::new(),
        kind: "AgentTask",
        namespace: "default".into(),
        name: "done".into(),
    };
    let yaml = agentdeck::tui::object_yaml(&client, &view, &events, &key).await;
    assert!(yaml.contains("Apply complete!"), "{yaml}");
    assert!(yaml.contains("kind: AgentTask"), "{yaml}");

    // The cached events keep only what the rows read; the YAML view shows
    // the whole Event from the API (its source, here), not the cached one.
    let event_api: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let event = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "done.1"},
        "involvedObject": {"kind": "AgentTask", "namespace": "default", "name": "done",
            "apiVersion": "agentdeck.dev/v1alpha1"},
        "reason": "Finished", "message": "the task finished", "type": "Normal",
        "source": {"component": "agentdeck-agent"},
        "reportingComponent": "agentdeck-agent"
    }))
    .expect("event");
    event_api
        .create(&PostParams::default(), &event)
        .await
        .expect("event created");
    let key = agentdeck::app::ObjectKey {
        kind: "Event",
        name: "done.1".into(),
        ..key
    };
    let yaml = agentdeck::tui::object_yaml(&client, &view, &events, &key).await;
    assert!(yaml.contains("kind: Event"), "{yaml}");
    assert!(yaml.contains("component: agentdeck-agent"), "{yaml}");
    assert!(
        yaml.contains("reportingComponent: agentdeck-agent"),
        "{yaml}"
    );
    cancel.cancel();
}
