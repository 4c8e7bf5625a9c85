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
    let cancel = CancellationToken::new();
    let conn = Connection {
        client: client.clone(),
        namespace: "default".into(),
        streams: None,
    };
    let handle = controller::start_with(
        conn,
        &config(),
        StartOptions {
            watch_only: true,
            all_namespaces: false,
        },
        cancel.clone(),
    );
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
    let cancel = CancellationToken::new();
    let handle = controller::start_with(
        Connection {
            client: client.clone(),
            namespace: "default".into(),
            streams: None,
        },
        &config(),
        StartOptions {
            watch_only: true,
            all_namespaces: false,
        },
        cancel.clone(),
    );
    let view = handle.view();
    let thresholds = controller::prober::thresholds(&config().health_probe);
    let snap = eventually("a snapshot with the pool and its 3 tasks", || async {
        let events = kube::runtime::reflector::store::<k8s_openapi::api::core::v1::Event>().0;
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
