//! Agent figures: claim latency (task created → Running, seen through a
//! watch) with an idle agent waiting, claims per second with 10 agents
//! racing for the same tasks, and agent RSS idle and busy.
//!
//! Starts a sandbox in-process; its kubelet runs the real `agentdeck agent`
//! binary as child processes of this bench, so their RSS is read from
//! `/proc/<pid>/status`. Prints what it measured; asserts nothing.
//!
//! ```text
//! cargo bench --bench agent
//! AGENTDECK_BENCH_TASKS=200 cargo bench --bench agent   # a quicker race
//! AGENTDECK_BENCH_TASKS=0 cargo bench --bench agent     # no race at all
//! ```

use std::time::{Duration, Instant};

use agentdeck::crd::{AgentPool, AgentTask, TaskPhase, crds};
use agentdeck::health::HealthReport;
use agentdeck::plan::manifests::agent_deployment;
use agentdeck::sandbox::Sandbox;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const NS: &str = "default";
const LATENCY_SAMPLES: usize = 100;
const RACERS: i32 = 10;

fn main() {
    // Set before any thread exists: the in-process kubelet reads it.
    // SAFETY: single-threaded here; nothing reads the environment concurrently.
    unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let sandbox = Sandbox::start(0, 3).await.expect("sandbox starts");
    let client = sandbox.client().expect("client");
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds() {
        crd_api
            .create(&PostParams::default(), &crd)
            .await
            .expect("crd created");
    }
    let tasks: Api<AgentTask> = Api::namespaced(client.clone(), NS);
    println!("agent bench (sandbox in-process, agents as real processes)");

    // Claim latency with one idle agent.
    pool(&client, "lat", json!({}), 1).await;
    let (lat_pod, lat_ip) = agents(&client, "lat", 1).await.remove(0);
    wait_healthy(&lat_ip).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = rss_of(std::slice::from_ref(&lat_pod));
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    for i in 0..LATENCY_SAMPLES {
        let name = format!("lat-{i:04}");
        samples.push(claim_latency(&tasks, &name, "lat").await);
        wait_phase(&tasks, &name, |p| p.is_finished()).await;
    }
    samples.sort();
    println!(
        "claim latency, idle agent, {} tasks: p50 {}  p99 {}  max {}",
        samples.len(),
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(samples[samples.len() - 1]),
    );
    // Busy: one task running.
    create_task(&tasks, "lat-busy", "lat", &["sleep", "3"]).await;
    wait_phase(&tasks, "lat-busy", |p| p == TaskPhase::Running).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let busy_rss = rss_of(std::slice::from_ref(&lat_pod));
    println!(
        "agent RSS: idle {} MiB, busy (1 task running) {} MiB",
        mib(idle_rss.first().copied()),
        mib(busy_rss.first().copied())
    );

    // A task printing one 100 MB line without a newline: the agent cuts it
    // into bounded pieces, so its memory must stay where it was.
    wait_phase(&tasks, "lat-busy", |p| p.is_finished()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_of(std::slice::from_ref(&lat_pod));
    let started = Instant::now();
    create_task(
        &tasks,
        "lat-long-line",
        "lat",
        &["sh", "-c", "head -c 100000000 /dev/zero | tr '\\0' x"],
    )
    .await;
    wait_phase(&tasks, "lat-long-line", |p| p.is_finished()).await;
    let took = started.elapsed();
    let after = rss_of(std::slice::from_ref(&lat_pod));
    let peak = status_field_of(std::slice::from_ref(&lat_pod), "VmHWM:");
    println!(
        "agent RSS around a task printing one 100 MB line: before {} MiB, after {} MiB, \
         peak over the agent's life {} MiB (task took {:.1} s)",
        mib(before.first().copied()),
        mib(after.first().copied()),
        mib(peak.first().copied()),
        took.as_secs_f64()
    );

    // Claims per second: RACERS agents, tasks created while the pool drains,
    // then the drain is lifted and every agent races for them.
    let n: usize = std::env::var("AGENTDECK_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    if n == 0 {
        return;
    }
    let per_agent = n.div_ceil(RACERS as usize).clamp(1, 64);
    pool(
        &client,
        "race",
        json!({"drain": true, "concurrency": per_agent}),
        RACERS,
    )
    .await;
    let racers = agents(&client, "race", RACERS as usize).await;
    for (_, ip) in &racers {
        wait_healthy(ip).await;
    }
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let tasks = tasks.clone();
            async move {
                create_task(&tasks, &format!("race-{i:05}"), "race", &["sleep", "5"]).await;
            }
        })
        .await;
    let pools: Api<AgentPool> = Api::namespaced(client.clone(), NS);
    sandbox.api().faults.reset_requests();
    let started = Instant::now();
    pools
        .patch(
            "race",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"drain": false}})),
        )
        .await
        .expect("drain lifted");
    loop {
        let list = tasks
            .list(&ListParams::default().fields("spec.pool=race"))
            .await
            .expect("list");
        let claimed = list
            .items
            .iter()
            .filter(|t| t.phase() != TaskPhase::Pending)
            .count();
        if claimed == n {
            break;
        }
        if started.elapsed() > Duration::from_secs(300) {
            println!("race: only {claimed} of {n} claimed after 300 s");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    let names: Vec<String> = racers.iter().map(|(p, _)| p.clone()).collect();
    let race_rss = rss_of(&names);
    let puts: u64 = sandbox
        .api()
        .faults
        .requests()
        .iter()
        .filter(|(k, _)| k.starts_with("PUT") && k.contains("agenttasks") && k.ends_with("/status"))
        .map(|(_, v)| *v)
        .sum();
    println!(
        "claims: {n} tasks by {RACERS} racing agents (concurrency {per_agent}) in {:.2} s = {:.0} claims/s; \
         {puts} claim writes ({} lost races)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        puts.saturating_sub(n as u64),
    );
    let max = race_rss.iter().copied().fold(0.0_f64, f64::max);
    println!(
        "agent RSS busy ({per_agent} tasks running each): max {} MiB over {} agents",
        mib(Some(max)),
        race_rss.len()
    );
    sandbox.stop().await;
}

async fn pool(client: &kube::Client, name: &str, spec: serde_json::Value, replicas: i32) {
    let mut full =
        json!({"image": "agentdeck:dev", "graceShutdownSeconds": 1, "drainTimeoutSeconds": 1});
    if let (Some(f), Some(s)) = (full.as_object_mut(), spec.as_object()) {
        for (k, v) in s {
            f.insert(k.clone(), v.clone());
        }
    }
    let pool: AgentPool = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
        "metadata": {"name": name, "namespace": NS}, "spec": full
    }))
    .expect("pool");
    let pools: Api<AgentPool> = Api::namespaced(client.clone(), NS);
    let pool = pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("pool created");
    // The agents run as the pool's account with the Role the controller
    // renders for it.
    let (account, role, binding) = agentdeck::plan::manifests::agent_rbac(&pool).expect("rbac");
    let pp = PostParams::default();
    if let Some(account) = account {
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), NS)
            .create(&pp, &account)
            .await
            .expect("service account created");
    }
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), NS)
        .create(&pp, &role)
        .await
        .expect("role created");
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), NS)
        .create(&pp, &binding)
        .await
        .expect("role binding created");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments
        .create(
            &PostParams::default(),
            &agent_deployment(&pool, replicas).expect("deployment"),
        )
        .await
        .expect("deployment created");
}

async fn agents(client: &kube::Client, pool: &str, count: usize) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    loop {
        let list = pods
            .list(&ListParams::default().labels(&format!("agentdeck.dev/pool={pool}")))
            .await
            .expect("pods");
        let running: Vec<(String, String)> = list
            .items
            .iter()
            .filter_map(|p| {
                let s = p.status.as_ref()?;
                (s.phase.as_deref() == Some("Running")).then_some(())?;
                Some((p.metadata.name.clone()?, s.pod_ip.clone()?))
            })
            .collect();
        if running.len() >= count {
            return running;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_healthy(ip: &str) {
    let http = reqwest::Client::new();
    for _ in 0..600 {
        if let Ok(r) = http.get(format!("http://{ip}:8080/healthz")).send().await
            && r.json::<HealthReport>().await.is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("agent at {ip} never answered /healthz");
}

async fn create_task(tasks: &Api<AgentTask>, name: &str, pool: &str, command: &[&str]) {
    let task: AgentTask = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"pool": pool, "command": command}
    }))
    .expect("task");
    tasks
        .create(&PostParams::default(), &task)
        .await
        .expect("task created");
}

/// Creates a task and waits for the watch event that shows it Running.
async fn claim_latency(tasks: &Api<AgentTask>, name: &str, pool: &str) -> Duration {
    let rv = tasks
        .list(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .unwrap_or_default();
    let wp = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(60);
    let mut stream = tasks.watch(&wp, &rv).await.expect("watch").boxed();
    let started = Instant::now();
    create_task(tasks, name, pool, &["true"]).await;
    while let Some(ev) = stream.next().await {
        if let Ok(WatchEvent::Added(t) | WatchEvent::Modified(t)) = ev
            && t.phase() != TaskPhase::Pending
        {
            return started.elapsed();
        }
    }
    panic!("watch on {name} ended before it ran");
}

async fn wait_phase(tasks: &Api<AgentTask>, name: &str, f: impl Fn(TaskPhase) -> bool) {
    for _ in 0..6000 {
        if tasks.get(name).await.map(|t| f(t.phase())).unwrap_or(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} never reached the phase");
}

/// VmRSS (MiB) of the agent processes serving `pods`, found by the
/// `IAC_AGENT_NAME` in their environment.
fn rss_of(pods: &[String]) -> Vec<f64> {
    status_field_of(pods, "VmRSS:")
}

/// A `/proc/<pid>/status` field in kB (VmRSS, VmHWM …) as MiB, per agent.
fn status_field_of(pods: &[String], field: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(env) = std::fs::read(path.join("environ")) else {
            continue;
        };
        let env = String::from_utf8_lossy(&env);
        let is_agent = std::fs::read(path.join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).split('\0').nth(1) == Some("agent"))
            .unwrap_or(false);
        if !is_agent {
            continue;
        }
        let named = env
            .split('\0')
            .filter_map(|kv| kv.strip_prefix("IAC_AGENT_NAME="))
            .any(|n| pods.iter().any(|p| p == n));
        if !named {
            continue;
        }
        let rss = std::fs::read_to_string(path.join("status"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0);
        out.extend(rss);
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn mib(v: Option<f64>) -> String {
    v.map_or_else(|| "?".to_owned(), |m| format!("{m:.1}"))
}
