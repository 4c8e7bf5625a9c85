//! Operator actions: confirmed → effect visible in the cluster, p50/p99.
//!
//! - drain one agent → that agent's `/healthz` says `draining` (and undo →
//!   `healthy` again), with real `agentdeck agent` processes;
//! - hold the pool's replicas → the Deployment's replicas follow.
//!
//! Measured with the controller leading in this process (the console
//! leading), and with `agentdeck --daemon` leading in its own process while
//! this one only acts (the console as observer, or the CLI). The clock
//! starts when `ops::apply` is called (the user confirmed) and stops when
//! the effect is seen through the API or the agent. A third run goes the
//! console's whole way with its controller leading: `y` pressed in the
//! confirmation dialog → `App::update` → the action queue → the ops runner
//! (audit line included) → the effect; a fourth the same way with the
//! console as observer while the daemon leads. Prints what it measured;
//! asserts nothing.
//!
//! ```text
//! cargo bench --bench ops
//! AGENTDECK_BENCH_SAMPLES=50 cargo bench --bench ops
//! ```

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentdeck::app::{
    ActionRequest, App, AppOptions, Command as AppCommand, Dialog, Msg, PreviewState,
};
use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::crd::{AgentPool, AgentTask};
use agentdeck::health::{HealthReport, HealthStatus};
use agentdeck::ops::{self, Action, Actor};
use agentdeck::sandbox::Sandbox;
use agentdeck::tui::queue::ActionQueue;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
const DEADLINE: Duration = Duration::from_secs(60);

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn samples() -> usize {
    std::env::var("AGENTDECK_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn report(what: &str, mut d: Vec<Duration>) {
    d.sort();
    println!(
        "{what:<78} p50 {:>7.1} ms   p99 {:>7.1} ms   (n={})",
        percentile(&d, 50.0).as_secs_f64() * 1000.0,
        percentile(&d, 99.0).as_secs_f64() * 1000.0,
        d.len()
    );
}

async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "never saw {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn health(http: &reqwest::Client, ip: &str) -> Option<HealthStatus> {
    let r = http
        .get(format!("http://{ip}:8080/healthz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    Some(r.json::<HealthReport>().await.ok()?.status)
}

async fn replicas(client: &Client, pool: &str) -> Option<i32> {
    Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt(&format!("iac-agent-{pool}"))
        .await
        .ok()??
        .spec?
        .replicas
}

/// Running agent pods of `pool` with their IPs, once `n` answer healthy.
async fn healthy_agents(
    client: &Client,
    http: &reqwest::Client,
    pool: &str,
    n: usize,
) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    until("healthy agents", || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("agentdeck.dev/pool={pool}")))
            .await
            .ok()?;
        let mut out = Vec::new();
        for p in &list.items {
            if p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                continue;
            };
            if health(http, &ip).await == Some(HealthStatus::Healthy) {
                out.push((p.name_any(), ip));
            }
        }
        (out.len() >= n).then_some(out)
    })
    .await
}

async fn create_pool(client: &Client, name: &str) {
    let pool: AgentPool = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
        "metadata": {"name": name},
        "spec": {"image": "agentdeck:dev", "minReplicas": 2, "maxReplicas": 4,
                 "cooldownSeconds": {"up": 0, "down": 0}}
    }))
    .expect("pool");
    Api::<AgentPool>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pool)
        .await
        .expect("pool created");
}

/// Drain and undrain one agent `n` times; hold the pool at 3 and 2 in turn.
async fn measure(label: &str, conn: &Connection, pool: &str, n: usize) {
    let http = reqwest::Client::new();
    let actor = Actor {
        user: "bench".into(),
        via: "console".into(),
        context: "bench".into(),
    };
    let agents = healthy_agents(&conn.client, &http, pool, 2).await;
    let (agent, ip) = agents[0].clone();
    let (mut drained, mut undrained) = (Vec::new(), Vec::new());
    for _ in 0..n {
        for (undo, want, into) in [
            (false, HealthStatus::Draining, &mut drained),
            (true, HealthStatus::Healthy, &mut undrained),
        ] {
            let action = Action::DrainAgent {
                pool: pool.into(),
                agent: agent.clone(),
                undo,
            };
            let start = Instant::now();
            ops::apply(conn, &action, &actor)
                .await
                .expect("drain applied");
            until("the agent's health", || async {
                (health(&http, &ip).await == Some(want)).then_some(())
            })
            .await;
            into.push(start.elapsed());
        }
    }
    report(
        &format!("{label}: drain agent → /healthz draining"),
        drained,
    );
    report(
        &format!("{label}: undrain agent → /healthz healthy"),
        undrained,
    );

    let mut held = Vec::new();
    for i in 0..n {
        let target = if i % 2 == 0 { 3 } else { 2 };
        let action = Action::HoldReplicas {
            pool: pool.into(),
            replicas: target,
            duration: Some(Duration::from_secs(3600)),
            force: false,
        };
        let start = Instant::now();
        ops::apply(conn, &action, &actor)
            .await
            .expect("hold applied");
        until("the Deployment's replicas", || async {
            (replicas(&conn.client, pool).await == Some(target)).then_some(())
        })
        .await;
        held.push(start.elapsed());
    }
    report(
        &format!("{label}: hold replicas → Deployment replicas"),
        held,
    );
    ops::apply(conn, &Action::ClearHold { pool: pool.into() }, &actor)
        .await
        .expect("cleared");
}

/// The console's way: a confirmation dialog open on `request`, `y`
/// pressed, the command handed to the action queue as the event loop
/// does; returns when the queue has taken it.
async fn confirm_in_console(app: &mut App, queue: &ActionQueue, request: ActionRequest) -> Instant {
    app.dialog = Some(Dialog {
        context: String::new(),
        title: "bench".into(),
        body: Vec::new(),
        input: None,
        request,
        error: None,
        preview: PreviewState::Lines(Vec::new()),
        scroll: 0,
    });
    let start = Instant::now();
    for cmd in app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('y'),
        KeyModifiers::NONE,
    ))) {
        if let AppCommand::Action(req) = cmd {
            queue.apply(req);
        }
    }
    start
}

/// Drain one agent and hold the pool, confirmed in the console.
async fn measure_console(label: &str, conn: &Connection, pool: &str, n: usize) {
    let http = reqwest::Client::new();
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let cancel = CancellationToken::new();
    let queue = ActionQueue::start(
        conn.client.clone(),
        Some(agentdeck::tui::actions::ops_runner(None)),
        tx,
        cancel.clone(),
    );
    // Outcomes come back to the app as messages; drain them.
    let done = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let mut app = App::new(AppOptions::default(), jiff::Timestamp::now());
    let agents = healthy_agents(&conn.client, &http, pool, 2).await;
    let (agent, ip) = agents[0].clone();
    let (mut drained, mut held) = (Vec::new(), Vec::new());
    for i in 0..n {
        for (undo, want) in [
            (false, HealthStatus::Draining),
            (true, HealthStatus::Healthy),
        ] {
            let req = ActionRequest::DrainAgent {
                namespace: NS.into(),
                pool: pool.into(),
                agent: agent.clone(),
                undo,
            };
            let start = confirm_in_console(&mut app, &queue, req).await;
            until("the agent's health", || async {
                (health(&http, &ip).await == Some(want)).then_some(())
            })
            .await;
            if !undo {
                drained.push(start.elapsed());
            }
        }
        let target = if i % 2 == 0 { 3 } else { 2 };
        let req = ActionRequest::HoldReplicas {
            namespace: NS.into(),
            pool: pool.into(),
            replicas: target,
            for_secs: Some(3600),
            force: false,
        };
        let start = confirm_in_console(&mut app, &queue, req).await;
        until("the Deployment's replicas", || async {
            (replicas(&conn.client, pool).await == Some(target)).then_some(())
        })
        .await;
        held.push(start.elapsed());
    }
    report(
        &format!("{label}: `y` → drain agent → /healthz draining"),
        drained,
    );
    report(
        &format!("{label}: `y` → hold replicas → Deployment replicas"),
        held,
    );
    cancel.cancel();
    done.abort();
}

fn main() {
    // The console's runner appends audit lines: keep them out of $HOME.
    let state = tempfile::tempdir().expect("state dir");
    // SAFETY: set before the sandbox (and any other thread) starts.
    unsafe {
        std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck"));
        std::env::set_var("XDG_STATE_HOME", state.path());
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let n = samples();
    rt.block_on(async {
        let sandbox = Sandbox::start(0, 2).await.expect("sandbox");
        let client = sandbox.client().expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("crd");
        }
        let conn = Connection {
            client: client.clone(),
            namespace: NS.into(),
            streams: None,
        };

        // The controller leads in this process (the console leading).
        let mut cfg = Config {
            controller_namespace: NS.into(),
            ..Config::default()
        };
        cfg.leader_election.enabled = false;
        let cancel = CancellationToken::new();
        let handle = agentdeck::controller::start(conn.clone(), &cfg, cancel.clone());
        create_pool(&client, "leading").await;
        measure("leader in this process", &conn, "leading", n).await;
        ops::apply(
            &conn,
            &Action::ClearHold {
                pool: "leading".into(),
            },
            &Actor {
                user: "bench".into(),
                via: "console".into(),
                context: "bench".into(),
            },
        )
        .await
        .expect("cleared");
        measure_console("console leading", &conn, "leading", n).await;
        cancel.cancel();
        handle.join().await;

        // `agentdeck --daemon` leads in its own process; this one only acts.
        let ns: Api<Namespace> = Api::all(client.clone());
        let _ = ns
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "agentdeck-system"}}))
                    .expect("ns"),
            )
            .await;
        let dir = tempfile::tempdir().expect("dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, sandbox.kubeconfig(NS)).expect("kubeconfig");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let _daemon = Daemon(
            Command::new(env!("CARGO_BIN_EXE_agentdeck"))
                .arg("--daemon")
                .env_remove("AGENTDECK_SANDBOX_EXE")
                .env("KUBECONFIG", &kubeconfig)
                .env("HOME", dir.path())
                .env("XDG_CONFIG_HOME", dir.path())
                .env("AGENTDECK_SERVER__PORT", port.to_string())
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("daemon starts"),
        );
        create_pool(&client, "observed").await;
        measure(
            "daemon leads, action from another process",
            &conn,
            "observed",
            n,
        )
        .await;
        // The console's whole way again, now as an observer: its actions
        // are object changes the daemon carries out.
        measure_console("console observing, daemon leading", &conn, "observed", n).await;
        drop(_daemon);
        sandbox.stop().await;
    });
}
