//! Port-forward that forwards (issue 43, item 5): `kubectl port-forward`
//! to an agent pod's 8080 answers `/healthz` with the agent's JSON, over
//! kubectl's WebSocket tunnel and its SPDY fallback; kube-rs forwards over
//! the kubelet's WebSocket channels; a port nothing listens on is reported
//! as a real kubelet (containerd) reports it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use agentdeck::crd::{AgentPool, crds};
use agentdeck::plan::manifests::agent_deployment;
use common::{TestSandbox, eventually_blocking};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The kubelet must run this test build's binary for `agentdeck` containers.
fn start_sandbox() -> TestSandbox {
    static EXE: Once = Once::new();
    EXE.call_once(|| {
        // SAFETY: set once, before any sandbox (and so any thread reading
        // the variable) exists; other tests wait on the Once.
        unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    });
    TestSandbox::start()
}

/// One agent of pool `pf`, running; its pod's name.
fn agent_pod(sb: &TestSandbox) -> String {
    let client = sb.client();
    sb.rt.block_on(async {
        let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crds() {
            crd_api
                .create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "pf", "namespace": "default"},
            "spec": {"image": "agentdeck:dev"}
        }))
        .expect("pool");
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
        let pool = pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        common::install_agent_rbac(&client, &pool).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        deployments
            .create(
                &PostParams::default(),
                &agent_deployment(&pool, 1).expect("deployment builds"),
            )
            .await
            .expect("deployment created");
    });
    eventually_blocking("the agent pod to be ready", || {
        let name = sb.kubectl_ok(&[
            "get",
            "pods",
            "-l",
            "agentdeck.dev/pool=pf",
            "-o",
            "jsonpath={.items[?(@.status.containerStatuses[0].ready==true)].metadata.name}",
        ]);
        let name = name.split_whitespace().next()?.to_string();
        Some(name)
    })
}

/// A local port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// `kubectl port-forward` in the background, once it says it forwards.
fn port_forward(sb: &TestSandbox, pod: &str, ports: &str, websockets: bool) -> Child {
    let mut child = Command::new("kubectl")
        .args(["port-forward", &format!("pod/{pod}"), ports])
        .env("KUBECONFIG", &sb.kubeconfig)
        .env(
            "KUBECTL_PORT_FORWARD_WEBSOCKETS",
            if websockets { "true" } else { "false" },
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("kubectl says something");
    assert!(line.starts_with("Forwarding from"), "{line}");
    child
}

/// A plain HTTP/1.1 GET of `path` on a local port: the whole response.
fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut response = String::new();
    let _ = s.read_to_string(&mut response);
    response
}

fn health_json(response: &str) -> Value {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {response}"))
}

#[test]
fn kubectl_port_forward_answers_an_agents_healthz_over_websocket_and_spdy() {
    let sb = start_sandbox();
    let pod = agent_pod(&sb);
    for websockets in [true, false] {
        let local = free_port();
        let mut child = port_forward(&sb, &pod, &format!("{local}:8080"), websockets);
        // Two connections through one forward.
        for _ in 0..2 {
            let response = http_get(local, "/healthz");
            assert!(response.starts_with("HTTP/1.1 200"), "{response}");
            let health = health_json(&response);
            assert_eq!(health["status"], "healthy", "{health}");
            assert!(health["currentTime"].is_string(), "{health}");
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn kube_rs_forwards_over_the_kubelets_websocket_channels() {
    let sb = start_sandbox();
    let pod = agent_pod(&sb);
    let client = sb.client();
    let response = sb.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let mut pf = pods.portforward(&pod, &[8080]).await.expect("portforward");
        let mut stream = pf.take_stream(8080).expect("stream");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .expect("request");
        let mut response = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response))
            .await
            .expect("in time")
            .expect("response");
        drop(stream);
        let _ = tokio::time::timeout(Duration::from_secs(10), pf.join()).await;
        String::from_utf8_lossy(&response).into_owned()
    });
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(health_json(&response)["status"], "healthy");
}

#[test]
fn a_port_nothing_listens_on_is_reported_as_the_kubelet_reports_it() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&["run", "sl", "--image=busybox", "--", "sleep", "3600"]);
    sb.kubectl_ok(&["wait", "--for=condition=Ready", "pod/sl", "--timeout=120s"]);
    let ip = sb.kubectl_ok(&["get", "pod", "sl", "-o", "jsonpath={.status.podIP}"]);
    for websockets in [true, false] {
        let local = free_port();
        let mut child = port_forward(&sb, "sl", &format!("{local}:9"), websockets);
        let response = http_get(local, "/");
        assert!(response.is_empty(), "{response}");
        // kubectl reports the error stream and gives up on the pod.
        let started = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            assert!(
                started.elapsed() < common::POLL_DEADLINE,
                "kubectl port-forward kept going"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("stderr read");
        assert!(!status.success(), "{stderr}");
        assert!(
            stderr.contains("an error occurred forwarding")
                && stderr.contains("failed to connect to localhost:9 inside namespace")
                && stderr.contains(&format!(
                    "dial tcp4 {}:9: connect: connection refused",
                    ip.trim()
                ))
                && stderr.contains("lost connection to pod"),
            "{stderr}"
        );
    }
}
