//! The sandbox through the real kube-rs client: the same code path the
//! controller and console use against a real cluster.

mod common;

use std::time::Duration;

use agentdeck::crd::{AgentPool, AgentTask};
use common::TestSandbox;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{CustomResourceExt, ResourceExt};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("configmap")
}

#[test]
fn create_get_list_update_and_conflict() {
    let sb = TestSandbox::start();
    let client = sb.client();
    sb.rt.block_on(async {
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let created = api
            .create(&PostParams::default(), &cm("a"))
            .await
            .expect("created");
        assert!(created.metadata.uid.is_some());
        let rv = created.resource_version().expect("rv");
        let mut stale = created.clone();
        let mut fresh = created.clone();
        fresh
            .data
            .get_or_insert_default()
            .insert("k".into(), "v2".into());
        let updated = api
            .replace("a", &PostParams::default(), &fresh)
            .await
            .expect("replaced");
        assert_ne!(updated.resource_version().expect("rv"), rv);
        stale
            .data
            .get_or_insert_default()
            .insert("k".into(), "v3".into());
        match api.replace("a", &PostParams::default(), &stale).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 409);
                assert_eq!(s.reason, "Conflict");
            }
            other => panic!("expected 409, got {other:?}"),
        }
        match api.create(&PostParams::default(), &cm("a")).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"))
            }
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        match api.get("missing").await {
            Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (404, "NotFound")),
            other => panic!("expected NotFound, got {other:?}"),
        }
        for i in 0..7 {
            api.create(&PostParams::default(), &cm(&format!("page-{i}")))
                .await
                .expect("created");
        }
        let mut names = Vec::new();
        let mut lp = ListParams::default().limit(3);
        loop {
            let page = api.list(&lp).await.expect("page");
            names.extend(page.items.iter().map(|c| c.name_any()));
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => break,
            }
        }
        // Every namespace also holds kube-root-ca.crt, as in a cluster.
        names.retain(|n| n != "kube-root-ca.crt");
        assert_eq!(names.len(), 8, "{names:?}");
    });
}

#[test]
fn crds_installed_through_kube_serve_typed_custom_resources() {
    let sb = TestSandbox::start();
    let client = sb.client();
    sb.rt.block_on(async {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "p"}, "spec": {"image": "agentdeck:dev", "maxReplicas": 3}
        }))
        .expect("pool");
        let created = pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        assert_eq!(created.spec.health_port, 8080, "schema defaults applied");
        assert_eq!(created.metadata.generation, Some(1));
        // Status goes through /status and does not bump generation.
        let st = json!({"status": {"replicas": 2, "pendingTasks": 4}});
        let after = pools
            .patch_status("p", &PatchParams::default(), &Patch::Merge(&st))
            .await
            .expect("status");
        assert_eq!(after.status.as_ref().map(|s| s.pending_tasks), Some(4));
        assert_eq!(after.metadata.generation, Some(1));
        // A spec change through the main resource bumps it and keeps status.
        let sp = json!({"spec": {"maxReplicas": 5}, "status": {"replicas": 99}});
        let after = pools
            .patch("p", &PatchParams::default(), &Patch::Merge(&sp))
            .await
            .expect("spec");
        assert_eq!(after.metadata.generation, Some(2));
        assert_eq!(after.status.as_ref().map(|s| s.replicas), Some(2));
        // Strategic merge is refused for custom resources, as by a real apiserver.
        match pools
            .patch(
                "p",
                &PatchParams::default(),
                &Patch::Strategic(&json!({"spec": {"debug": true}})),
            )
            .await
        {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 415),
            other => panic!("expected 415, got {other:?}"),
        }
        // Server-side apply with a field manager.
        let applied = json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
                             "metadata": {"name": "q"}, "spec": {"image": "agentdeck:dev"}});
        let q = pools
            .patch(
                "q",
                &PatchParams::apply("agentdeck").force(),
                &Patch::Apply(&applied),
            )
            .await
            .expect("applied");
        assert_eq!(q.spec.image, "agentdeck:dev");
        // Deleting the CRD removes its objects.
        crds.delete("agentpools.agentdeck.dev", &DeleteParams::default())
            .await
            .expect("crd deleted");
        assert!(pools.list(&ListParams::default()).await.is_err());
    });
}

#[test]
fn a_kube_watcher_sees_changes_and_recovers_from_dropped_watches_and_compaction() {
    let sb = TestSandbox::start();
    let client = sb.client();
    let api_handle = sb.sandbox().api().clone();
    sb.rt.block_on(async {
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        // Leaves out kube-root-ca.crt, which the root CA publisher writes.
        let cfg = watcher::Config::default().fields("metadata.name!=kube-root-ca.crt");
        let stream = watcher(api.clone(), cfg).applied_objects();
        let mut stream = Box::pin(stream);
        api.create(&PostParams::default(), &cm("w1"))
            .await
            .expect("created");
        let first = tokio::time::timeout(Duration::from_secs(60), stream.try_next())
            .await
            .expect("in time");
        assert_eq!(first.expect("ok").expect("item").name_any(), "w1");
        // Drop every watch and compact the history: the watcher must re-list.
        api_handle.faults.drop_watches();
        api_handle.store.compact();
        api.create(&PostParams::default(), &cm("w2"))
            .await
            .expect("created");
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !seen.contains(&"w2".to_string()) && tokio::time::Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
                Ok(Some(Ok(o))) => seen.push(o.name_any()),
                Ok(Some(Err(_))) => continue,
                _ => break,
            }
        }
        assert!(seen.contains(&"w2".to_string()), "{seen:?}");
    });
}

#[test]
fn injected_429s_are_retried_after_retry_after_and_500s_reach_the_caller() {
    let sb = TestSandbox::start();
    let client = sb.client();
    let api = sb.sandbox().api().clone();
    sb.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        // kube-rs retries 429 by default and honours Retry-After (1 s here).
        api.faults.fail(agentdeck::sandbox::faults::FailRule {
            path_prefix: "/api/v1/namespaces/default/pods".into(),
            method: Some("GET".into()),
            code: 429,
            count: 1,
        });
        let started = std::time::Instant::now();
        pods.list(&ListParams::default())
            .await
            .expect("a single 429 is retried");
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "the retry waited for Retry-After: {:?}",
            started.elapsed()
        );
        // A 500 is not retried: the caller sees the Status.
        api.faults.fail(agentdeck::sandbox::faults::FailRule {
            path_prefix: "/api/v1/namespaces/default/pods".into(),
            method: None,
            code: 500,
            count: 1,
        });
        match pods.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 500),
            other => panic!("expected 500, got {other:?}"),
        }
        assert!(
            pods.list(&ListParams::default()).await.is_ok(),
            "the rule is used up"
        );
    });
}

/// Creates pods `names` of a simulated image (the simulation annotation:
/// running until deleted, a log to follow) and waits until each runs.
async fn running_sim_pods(pods: &Api<Pod>, names: &[String]) {
    for name in names {
        let p: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"sandbox.agentdeck.dev/simulate": "true"}},
            "spec": {"containers": [{"name": "main", "image": "example.com/sim:1"}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    common::eventually("the pods running", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        names
            .iter()
            .all(|n| {
                list.items.iter().any(|p| {
                    p.metadata.name.as_ref() == Some(n)
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
            })
            .then_some(())
    })
    .await;
}

/// Established TCP connections from this process to 127.0.0.1:`port` (the
/// client ends: their remote port is the sandbox's).
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/self/net/tcp").expect("/proc/self/net/tcp");
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(2) == Some(&remote.as_str()) && f.get(3) == Some(&"01")
        })
        .count()
}

#[test]
fn followed_logs_share_http2_connections_at_most_64_streams_each() {
    use agentdeck::cluster::{STREAMS_PER_CONNECTION, StreamClients};
    let sb = TestSandbox::start();
    let client = sb.client();
    let port: u16 = sb
        .sandbox()
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("sandbox port");
    sb.rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&sb.kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("config");
        let streams = StreamClients::new(&config).expect("stream clients");
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let n = STREAMS_PER_CONNECTION + 6;
        let names: Vec<String> = (0..n).map(|i| format!("talker-{i}")).collect();
        running_sim_pods(&pods, &names).await;
        let before = connections_to(port);
        let mut open = Vec::new();
        for i in 0..n {
            let lease = streams.lease().expect("lease");
            let logs: Api<Pod> = Api::namespaced(lease.client.clone(), "default");
            let follow = kube::api::LogParams {
                follow: true,
                ..Default::default()
            };
            let stream = logs
                .log_stream(&format!("talker-{i}"), &follow)
                .await
                .expect("log stream opened");
            open.push((lease, stream));
        }
        assert_eq!(
            streams.clients(),
            2,
            "{n} streams, {STREAMS_PER_CONNECTION} a connection"
        );
        // Over HTTP/1.1 each of the n streams would hold a connection.
        let during = connections_to(port);
        assert!(
            during <= before + 2,
            "{n} followed logs took {} connections (before {before}, during {during})",
            during.saturating_sub(before)
        );
        // A stream that ends makes room on its connection for the next.
        open.truncate(n - 10);
        let lease = streams.lease().expect("lease");
        drop(lease);
        assert_eq!(streams.clients(), 2);
    });
}

/// A running simulated pod `talker`, and a follow of its log (which never
/// ends by itself).
async fn follow_a_running_pod(pods: &Api<Pod>) -> impl futures::AsyncBufRead + use<> {
    running_sim_pods(pods, &["talker".to_owned()]).await;
    let follow = kube::api::LogParams {
        follow: true,
        ..Default::default()
    };
    pods.log_stream("talker", &follow)
        .await
        .expect("log stream opened")
}

#[test]
fn a_stop_cuts_what_is_still_open_after_a_moment() {
    let mut sb = TestSandbox::start();
    let client = sb.client();
    let sandbox = sb.take();
    sb.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let _stream = follow_a_running_pod(&pods).await;
        // A request still being answered when the stop comes (here one the
        // API is slow to answer; a watch a client opened again after the
        // stop ended its watches is another): the server's graceful
        // shutdown waited for it without end.
        sandbox.api().faults.set_latency(Duration::from_secs(600));
        let slow = tokio::spawn({
            let pods = pods.clone();
            async move { pods.get("talker").await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let began = std::time::Instant::now();
        let stopped = tokio::time::timeout(Duration::from_secs(30), sandbox.stop()).await;
        assert!(
            stopped.is_ok(),
            "the sandbox did not stop in 30 s with a request in flight"
        );
        let answered = tokio::time::timeout(Duration::from_secs(10), slow).await;
        assert!(
            matches!(answered, Ok(Ok(Err(_)))),
            "the request in flight was not cut: {answered:?}"
        );
        println!("stopped in {:?}", began.elapsed());
    });
}

#[test]
fn a_restart_cuts_every_connection_log_follows_included() {
    let sb = TestSandbox::start();
    let client = sb.client();
    sb.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let mut stream = follow_a_running_pod(&pods).await;
        sb.sandbox()
            .api()
            .faults
            .restart_server(Duration::from_secs(2));
        // A follow of a running container never ends by itself: only the
        // restart can end it (after the 2 s the server gives streams).
        let ended = tokio::time::timeout(Duration::from_secs(60), async {
            use futures::AsyncBufReadExt;
            let mut line = String::new();
            while matches!(stream.read_line(&mut line).await, Ok(n) if n > 0) {
                line.clear();
            }
        })
        .await;
        assert!(ended.is_ok(), "a log follow outlived the server's restart");
    });
}
