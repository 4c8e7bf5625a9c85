//! Agent freshness as the controller reports it: alive and responsive, not
//! busy. Idle real agents (`agentdeck agent` processes in the sandbox) that
//! answer their probes are counted fresh — in the pool's status and its
//! metrics — as soon as the prober has heard them, not at the next resync
//! (set here far beyond the test's deadline), and they stay fresh while
//! they do nothing for longer than the stale threshold.

mod common;

use common::{TestSandbox, eventually};

use std::sync::Once;
use std::time::{Duration, Instant};

use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::controller;
use agentdeck::crd::{AgentPool, HealthCounts, crds};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

fn start_sandbox() -> TestSandbox {
    static EXE: Once = Once::new();
    EXE.call_once(|| {
        // SAFETY: set once, before any sandbox (and so any thread reading
        // the variable) exists.
        unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    TestSandbox::start()
}

#[test]
fn idle_agents_that_answer_are_fresh_at_once_and_stay_fresh() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crds() {
            crd_api
                .create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        let mut config = Config {
            // Longer than the test's deadline: only the prober's own
            // trigger can bring the counts in time.
            resync_interval_seconds: 3_600,
            controller_namespace: NS.into(),
            ..Config::default()
        };
        config.leader_election.enabled = false;
        config.health_probe.interval_seconds = 1;
        config.health_probe.offline_after_seconds = 60;
        let stale_after = config.health_probe.stale_after();
        let cancel = CancellationToken::new();
        let conn = Connection {
            client: client.clone(),
            namespace: NS.into(),
            streams: None,
        };
        let handle = controller::start(conn, &config, cancel.clone());
        // Agents that poll every 30 s: idle, they show activity far less
        // often than the 2 s stale threshold, yet they answer every probe.
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "idle", "namespace": NS},
            "spec": {"image": "agentdeck:dev", "minReplicas": 2, "maxReplicas": 2,
                     "env": [{"name": "AGENTDECK_AGENT_POLL_INTERVAL_SECONDS", "value": "30"}]}
        }))
        .expect("pool");
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), NS);
        pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        let health = || async {
            pools
                .get("idle")
                .await
                .ok()
                .and_then(|p| p.status)
                .map(|s| s.health)
        };
        let fresh = HealthCounts {
            fresh: 2,
            stale: 0,
            offline: 0,
        };
        eventually("both idle agents counted fresh in the pool's status", || async {
            health().await.filter(|h| *h == fresh)
        })
        .await;
        eventually("the metrics to say the same", || async {
            let text = handle.metrics_text();
            text.contains(
                "agentdeck_pool_agents_health{namespace=\"default\",pool=\"idle\",freshness=\"fresh\"} 2",
            )
            .then_some(())
        })
        .await;
        // Idle for several stale thresholds: still fresh every time we look.
        let watched = Instant::now();
        while watched.elapsed() < stale_after * 3 {
            assert_eq!(health().await, Some(fresh));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), handle.join()).await;
    });
}
