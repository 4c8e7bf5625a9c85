//! Controller figures: task created → Deployment replicas updated (p50/p99),
//! 100 tasks at once → replicas at target, the daemon's RSS and CPU with 50
//! pools / 5,000 tasks / 1,000 agent pods, and API requests per minute when
//! idle.
//!
//! Runs the real `agentdeck --daemon` binary as its own process (so RSS and
//! CPU are the controller's alone) against a sandbox started in this
//! process, whose request counters say what the daemon asked for. Agent
//! containers are simulated by the sandbox (the pools' `podTemplate`
//! replaces the agent command). Prints what it measured; asserts nothing.
//!
//! ```text
//! cargo bench --bench controller
//! AGENTDECK_BENCH_IDLE_SECS=20 cargo bench --bench controller   # shorter idle window
//! ```

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentdeck::crd::{AgentPool, AgentTask};
use agentdeck::sandbox::Sandbox;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use common::{percentile, proc_stats, record_replicas, start_daemon};

const NS: &str = "default";
const IN_FLIGHT: usize = 32;
const POOLS: usize = 50;
const AGENTS_PER_POOL: i32 = 20;
const TASKS_PER_POOL: usize = 100;
const LATENCY_SAMPLES: usize = 40;

fn pool(name: &str, spec: Value) -> AgentPool {
    let mut full = json!({
        "image": "agentdeck:dev",
        "podTemplate": {"spec": {"containers": [{"name": "agent", "command": ["sim-agent"]}]}},
    });
    for (k, v) in spec.as_object().expect("object") {
        full[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
        "metadata": {"name": name}, "spec": full
    }))
    .expect("pool")
}

fn task(pool: &str, name: &str) -> AgentTask {
    serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": name},
        "spec": {"pool": pool, "command": ["terraform", "plan"]}
    }))
    .expect("task")
}

async fn create_tasks(api: &Api<AgentTask>, pool: &str, prefix: &str, n: usize) {
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let t = task(pool, &format!("{prefix}-{i}"));
            async move {
                api.create(&PostParams::default(), &t)
                    .await
                    .expect("task created")
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .for_each(|_| async {})
        .await;
}

async fn wait_for<F: FnMut() -> bool>(what: &str, limit: Duration, mut f: F) -> Duration {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

async fn reconciles(port: u16) -> u64 {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix("agentdeck_reconciles_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // SAFETY: set before any thread of this process starts.
    unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    let idle_secs: u64 = std::env::var("AGENTDECK_BENCH_IDLE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(idle_secs));
    // No simulated pod runs a process, so nothing is left behind.
    rt.shutdown_timeout(Duration::from_millis(100));
}

async fn run(idle_secs: u64) {
    // Enough simulated nodes (110 pods each) for every agent to run.
    let sandbox = Sandbox::start(0, 12).await.expect("sandbox");
    let client = sandbox.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [AgentPool::crd(), AgentTask::crd()] {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sandbox.kubeconfig(NS)).expect("kubeconfig");
    let log = dir.path().join("daemon.log");
    let mut daemon = start_daemon(env!("CARGO_BIN_EXE_agentdeck"), &kubeconfig, NS, &log);
    let pools: Api<AgentPool> = Api::namespaced(client.clone(), NS);
    let tasks: Api<AgentTask> = Api::namespaced(client.clone(), NS);
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let ready = http
            .get(format!("http://127.0.0.1:{}/readyz", daemon.port))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if ready {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "daemon not ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("daemon ready after {:?}", started.elapsed());
    println!(
        "agentdeck controller bench (daemon pid {})",
        daemon.child.id()
    );

    // 1. Task created → replicas updated.
    pools
        .create(
            &PostParams::default(),
            &pool(
                "lat",
                json!({"minReplicas": 0, "maxReplicas": 500,
                       "cooldownSeconds": {"up": 0, "down": 3600}}),
            ),
        )
        .await
        .expect("pool");
    let seen = record_replicas(&client, NS, "lat");
    wait_for("the Deployment at 0", Duration::from_secs(60), || {
        seen.lock().expect("lock").last().map(|(v, _)| *v) == Some(0)
    })
    .await;
    let mut latencies = Vec::new();
    for i in 0..LATENCY_SAMPLES {
        let t0 = Instant::now();
        tasks
            .create(&PostParams::default(), &task("lat", &format!("lat-{i}")))
            .await
            .expect("task");
        let want = i32::try_from(i + 1).expect("small");
        wait_for("replicas to follow", Duration::from_secs(60), || {
            seen.lock().expect("lock").last().map(|(v, _)| *v) == Some(want)
        })
        .await;
        latencies.push(t0.elapsed());
        // Spread samples over the resync period, as real task arrivals are.
        tokio::time::sleep(Duration::from_millis(150 + fastrand::u64(0..250))).await;
    }
    latencies.sort();
    println!(
        "task created → Deployment replicas updated: p50 {:?}, p99 {:?}, max {:?} ({} samples; debounce {:?})",
        percentile(&mut latencies, 0.5),
        percentile(&mut latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
        latencies.len(),
        agentdeck::controller::DEBOUNCE,
    );

    // 2. 100 tasks at once.
    pools
        .create(
            &PostParams::default(),
            &pool(
                "burst",
                json!({"minReplicas": 1, "maxReplicas": 100,
                       "cooldownSeconds": {"up": 0, "down": 3600}}),
            ),
        )
        .await
        .expect("pool");
    let seen = record_replicas(&client, NS, "burst");
    wait_for("the burst Deployment at 1", Duration::from_secs(60), || {
        seen.lock().expect("lock").last().map(|(v, _)| *v) == Some(1)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = reconciles(daemon.port).await;
    let t0 = Instant::now();
    create_tasks(&tasks, "burst", "burst", 100).await;
    let created = t0.elapsed();
    wait_for("replicas at 100", Duration::from_secs(60), || {
        seen.lock().expect("lock").last().map(|(v, _)| *v) == Some(100)
    })
    .await;
    let at_target = t0.elapsed();
    let after = reconciles(daemon.port).await;
    let steps: Vec<i32> = seen.lock().expect("lock").iter().map(|(v, _)| *v).collect();
    println!(
        "100 tasks at once: created in {created:?}, replicas at 100 after {at_target:?}; \
         replica values {steps:?}; {} reconciles of all pools meanwhile",
        after.saturating_sub(before)
    );

    // 3. 50 pools, 5,000 tasks, 1,000 agent pods.
    let dp = DeleteParams::default();
    let _ = pools.delete("lat", &dp).await;
    let _ = pools.delete("burst", &dp).await;
    let t0 = Instant::now();
    for p in 0..POOLS {
        pools
            .create(
                &PostParams::default(),
                &pool(
                    &format!("p{p:02}"),
                    json!({"minReplicas": AGENTS_PER_POOL, "maxReplicas": AGENTS_PER_POOL}),
                ),
            )
            .await
            .expect("pool");
    }
    for p in 0..POOLS {
        create_tasks(
            &tasks,
            &format!("p{p:02}"),
            &format!("p{p:02}-t"),
            TASKS_PER_POOL,
        )
        .await;
    }
    println!(
        "created {POOLS} pools and {} tasks in {:?}",
        POOLS * TASKS_PER_POOL,
        t0.elapsed()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let want = POOLS * usize::try_from(AGENTS_PER_POOL).expect("positive");
    let started = Instant::now();
    loop {
        let running = pods
            .list(&ListParams::default().labels("app.kubernetes.io/component=agent"))
            .await
            .expect("pods")
            .items
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .count();
        if running >= want {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "only {running} of {want} agent pods running"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!("{want} agent pods running after {:?}", t0.elapsed());
    // Let the pools settle (status, first probes of every agent).
    tokio::time::sleep(Duration::from_secs(15)).await;
    let pid = daemon.child.id();
    let (rss0, _, ticks0) = proc_stats(pid);
    let window = Duration::from_secs(30);
    let mut peak_steady = rss0;
    let t0 = Instant::now();
    while t0.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(2)).await;
        peak_steady = peak_steady.max(proc_stats(pid).0);
    }
    let (rss1, hwm, ticks1) = proc_stats(pid);
    let tck = common::clock_ticks();
    if let Ok(Some(status)) = daemon.child.try_wait() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(10).collect();
        println!("the daemon ended during the measurement ({status}); its last log lines:");
        for line in tail.iter().rev() {
            println!("  {line}");
        }
    }
    let cpu = (ticks1.saturating_sub(ticks0)) as f64 / tck / window.as_secs_f64() * 100.0;
    println!(
        "daemon with {POOLS} pools, {} tasks, {want} agent pods: RSS {:.1} MiB steady (max {:.1} MiB over {window:?}, peak ever {:.1} MiB), CPU {cpu:.1}% of one core",
        POOLS * TASKS_PER_POOL,
        rss1 as f64 / 1024.0,
        peak_steady as f64 / 1024.0,
        hwm as f64 / 1024.0,
    );

    // 4. API requests when idle.
    sandbox.api().faults.reset_requests();
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let requests = sandbox.api().faults.requests();
    let per_min = 60.0 / idle_secs as f64;
    let mut by_verb: BTreeMap<String, u64> = BTreeMap::new();
    let mut lists = 0;
    for (key, n) in &requests {
        let verb = key.split_whitespace().next().unwrap_or("").to_owned();
        *by_verb.entry(verb.clone()).or_default() += n;
        let path = key.split_whitespace().nth(1).unwrap_or("");
        let segments = path.trim_matches('/').split('/').count();
        // A collection path: /api/v1/namespaces/ns/pods (5) or
        // /apis/group/version/namespaces/ns/plural (6).
        let collection = (path.starts_with("/api/") && segments == 5)
            || (path.starts_with("/apis/") && segments == 6);
        if verb == "GET" && collection {
            lists += n;
        }
    }
    println!(
        "idle for {idle_secs}s: {:.0} requests/min in all, lists {:.0}/min; by verb {:?}",
        requests.values().sum::<u64>() as f64 * per_min,
        lists as f64 * per_min,
        by_verb
    );
    for (key, n) in &requests {
        println!("  {:>6.1}/min  {key}", *n as f64 * per_min);
    }
    drop(daemon);
    // Tearing down a thousand simulated pods takes longer than the whole
    // measurement and measures nothing: stop serving and leave.
    sandbox.api().faults.drop_watches();
}
