//! What the controller tells the user, where the user looks, when something
//! is missing: each case is input (objects created) → condition and Event
//! on the object (or a metric series gone). Real controller, in-process
//! sandbox, real kube client; agents are simulated (no process runs).

mod common;

use common::eventually;

use std::sync::Arc;

use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::controller::{self, ControllerHandle};
use agentdeck::crd::{AgentPool, AgentTask};
use agentdeck::sandbox::Sandbox;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

struct Harness {
    sandbox: Option<Sandbox>,
    client: Client,
    handle: Arc<ControllerHandle>,
    cancel: CancellationToken,
}

impl Harness {
    async fn start() -> Harness {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let sandbox = Sandbox::start(0, 2).await.expect("sandbox starts");
        let client = sandbox.client().expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        let mut config = Config {
            resync_interval_seconds: 2,
            controller_namespace: NS.into(),
            ..Config::default()
        };
        config.leader_election.enabled = false;
        config.health_probe.interval_seconds = 1;
        config.health_probe.offline_after_seconds = 600;
        let cancel = CancellationToken::new();
        let conn = Connection {
            client: client.clone(),
            namespace: NS.into(),
            streams: None,
        };
        let handle = Arc::new(controller::start(conn, &config, cancel.clone()));
        Harness {
            sandbox: Some(sandbox),
            client,
            handle,
            cancel,
        }
    }

    async fn create_pool(&self, name: &str, spec: Value) {
        let mut full = json!({
            "image": "agentdeck:dev",
            "minReplicas": 0,
            "maxReplicas": 3,
            // Simulated by the sandbox: runs until deleted.
            "podTemplate": {"spec": {"containers": [{"name": "agent", "command": ["sim-agent"]}]}},
        });
        for (k, v) in spec.as_object().expect("spec object") {
            full[k] = v.clone();
        }
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name}, "spec": full
        }))
        .expect("pool");
        Api::<AgentPool>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
    }

    async fn create_task(&self, name: &str, pool: &str) {
        let task: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": name},
            "spec": {"pool": pool, "command": ["terraform", "plan"]}
        }))
        .expect("task");
        Api::<AgentTask>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &task)
            .await
            .expect("task created");
    }

    async fn task_condition(&self, task: &str, type_: &str) -> Option<(String, String, String)> {
        let t = Api::<AgentTask>::namespaced(self.client.clone(), NS)
            .get(task)
            .await
            .expect("task");
        t.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason, c.message))
    }

    async fn pool_condition(&self, pool: &str, type_: &str) -> Option<(String, String)> {
        let p = Api::<AgentPool>::namespaced(self.client.clone(), NS)
            .get(pool)
            .await
            .expect("pool");
        p.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.message))
    }

    async fn warnings(&self, object: &str, reason: &str) -> Vec<String> {
        Api::<Event>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
            })
            .map(|e| e.note.unwrap_or_default())
            .collect()
    }

    async fn replicas(&self, pool: &str) -> Option<i32> {
        Api::<Deployment>::namespaced(self.client.clone(), NS)
            .get_opt(&format!("iac-agent-{pool}"))
            .await
            .expect("get deployment")
            .and_then(|d| d.spec?.replicas)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(sb) = self.sandbox.take() {
            sb.api().faults.drop_watches();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_naming_no_pool_says_so_and_is_picked_up_when_the_pool_appears() {
    let h = Harness::start().await;
    h.create_task("orphan", "later").await;
    let (_, reason, message) = eventually("PoolNotFound=True on the task", || async {
        h.task_condition("orphan", "PoolNotFound")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(reason, "PoolNotFound");
    assert_eq!(
        message,
        "AgentPool \"later\" does not exist in namespace \"default\"; the task waits until it does"
    );
    let notes = eventually("a Warning Event on the task", || async {
        Some(h.warnings("orphan", "PoolNotFound").await).filter(|w| !w.is_empty())
    })
    .await;
    assert_eq!(notes, [message], "one Warning, saying the same");

    // The pool appears: its reconcile scales for the waiting task at once,
    // and the condition says the pool is there.
    h.create_pool("later", json!({})).await;
    eventually("the pool scaled up for the waiting task", || async {
        h.replicas("later").await.filter(|r| *r >= 1)
    })
    .await;
    let (_, reason, _) = eventually("PoolNotFound=False", || async {
        h.task_condition("orphan", "PoolNotFound")
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(reason, "PoolFound");
    assert_eq!(
        h.warnings("orphan", "PoolNotFound").await.len(),
        1,
        "no second warning"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_token_secret_is_named_in_a_condition_and_a_warning_until_it_exists() {
    let h = Harness::start().await;
    h.create_pool(
        "tokened",
        json!({"minReplicas": 1, "tokenSecretRef": {"name": "agent-token", "key": "token"}}),
    )
    .await;
    let (_, message) = eventually("Degraded=True naming the Secret", || async {
        h.pool_condition("tokened", "Degraded")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    assert!(
        message.contains("Secret \"agent-token\" named in spec.tokenSecretRef does not exist"),
        "{message}"
    );
    let notes = eventually("a Warning Event on the pool", || async {
        Some(h.warnings("tokened", "TokenSecretMissing").await).filter(|w| !w.is_empty())
    })
    .await;
    assert!(notes[0].contains("\"agent-token\""), "{notes:?}");

    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "agent-token"}, "stringData": {"token": "t"}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(h.client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret created");
    eventually("Degraded=False once the Secret exists", || async {
        h.pool_condition("tokened", "Degraded")
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pool_takes_its_metric_series_with_it() {
    let h = Harness::start().await;
    h.create_pool("measured", json!({"minReplicas": 1})).await;
    h.create_pool("other", json!({"minReplicas": 1})).await;
    eventually("both pools' series", || async {
        let text = h.handle.metrics_text();
        (text.contains("pool=\"measured\"") && text.contains("pool=\"other\"")).then_some(())
    })
    .await;
    Api::<AgentPool>::namespaced(h.client.clone(), NS)
        .delete("measured", &DeleteParams::default())
        .await
        .expect("pool deleted");
    eventually("the deleted pool's series gone", || async {
        let text = h.handle.metrics_text();
        (!text.contains("pool=\"measured\"")).then_some(())
    })
    .await;
    assert!(h.handle.metrics_text().contains("pool=\"other\""));
}
