//! Figures at ten times the console and controller benches' size (issue
//! #32): 1,000 AgentPools, 100,000 AgentTasks and 10,000 agent pods on an
//! in-process sandbox, all in namespace `default` (the namespace the
//! daemon controls and the console's kubeconfig names). Prints, each as
//! `name: value (context)`, and asserts nothing:
//!
//! - `rows after one task changed` / `rows after one agent pod changed`:
//!   the console's row builder in process, 100k tasks and 10k agent pods;
//! - `controller RSS` and `controller CPU` of the real `agentdeck --daemon`
//!   over a quiet minute, once it has synced, every agent pod runs and the
//!   writes of its first reconciles have stopped (the API requests of the
//!   minute are printed too);
//! - `console first populated list` (first rows on screen), `console
//!   complete list` (the header counts every task, watch synced),
//!   `console RSS` (5 s after), `console RSS, events open` (5 s after
//!   `4` listed the Events, which are not watched until a view reads
//!   them) and `console key → screen` p50/p99: the real binary under tmux (socket
//!   `-L scale-bench`), observing while the daemon leads;
//! - `task created → replicas` p50/p99: a task created in a pool at its
//!   minimum (0, maximum 500) → its Deployment's `spec.replicas` one higher,
//!   both read from the sandbox's change stream (the API's view, without a
//!   client watch's lag in this busy process), while 20 writes a second go
//!   to other tasks (labels of finished tasks of the other pools, through
//!   the sandbox's API from a thread of their own).
//!
//! How the size is made:
//! - The 100,000 tasks (100 a pool: 2 Pending, 2 Running, 10 Failed, 86
//!   Succeeded, ended within the last hour, each finished one with the 40
//!   lines of output an agent keeps, about 2.8 KB, in a ConfigMap of its
//!   own summarized in `status.output`, as agents write it) are written through the
//!   sandbox's own `Api` in this process (create, then the status
//!   subresource), the path every HTTP request takes after decoding: no
//!   TLS and no JSON over the wire, so seeding takes seconds, not minutes.
//! - The 10,000 agent pods are the daemon's own: each pool asks for
//!   `minReplicas = maxReplicas = 10`, so the daemon scales its Deployment
//!   to 10 and the sandbox's Deployment, ReplicaSet and scheduler make the
//!   pods (on 100 simulated nodes of 110 pods). No pod runs a process: the
//!   sandbox's kubelet runs every container's command for real unless the
//!   pod asks for a simulation (`src/sandbox/kubelet/policy.rs`); the pools'
//!   image is `example.com/sim-agent:1` and their `podTemplate` replaces
//!   the agent command with `sim-agent` and annotates the pods
//!   `sandbox.agentdeck.dev/simulate: "true"`, so every container is
//!   simulated (a task in the sandbox's process), as the console bench's
//!   1,000 pods are. Min = max keeps the daemon from scaling anything but
//!   the latency pool, whose pods are simulated too.
//! - The agents answer their health probes: every pod IP is a loopback
//!   address, so one listener on `0.0.0.0:PORT` (the pools' `healthPort`),
//!   in a process of its own, answers every pod's `/healthz` as an idle agent does.
//!   The daemon probes 10,000 agents as it would in a cluster, they are
//!   fresh, and the Running tasks (set Running once their pools' pods
//!   exist, each on one of them) are not requeued.
//! - `taskDefaults.acquireTimeoutSeconds` is a day, so the Pending tasks
//!   get no `Unclaimed` condition while the bench runs (they would, after
//!   the default 10 minutes, in the middle of a figure).
//!
//! The daemon and the console run as their own processes (`RSS` and `CPU`
//! are theirs alone); the sandbox runs in this process. Everything started
//! is killed on drop: the daemon, the tmux server, the sandbox.
//!
//! ```text
//! cargo bench --bench scale
//! AGENTDECK_BENCH_QUICK=1 cargo bench --bench scale   # 100 pools, 10k tasks, 1k pods, short windows
//! AGENTDECK_BENCH_POOLS=500 AGENTDECK_BENCH_TASKS=50000 cargo bench --bench scale
//! AGENTDECK_BENCH_PODS=5        # agent pods per pool (10)
//! AGENTDECK_BENCH_IDLE_SECS=20  # the quiet window (60; quick 10)
//! AGENTDECK_BENCH_SAMPLES=50    # task created → replicas samples (30; quick 10)
//! AGENTDECK_BENCH_PRESSES=100   # console key presses timed (200; quick 50)
//! AGENTDECK_BENCH_BIN=/path/to/agentdeck cargo bench --bench scale   # another build
//! AGENTDECK_BENCH_OUTPUT_IN_STATUS=1 # tasks keep their output in status.outputTail, as
//!                               # agents wrote it before crd::output (not in ConfigMaps)
//! AGENTDECK_BENCH_TRACE=1       # task → replicas: each sample's stamps (Unix µs, to
//!                               # match the daemon's log) and this process's runtime
//!                               # waking a 5 ms timer over 10 ms late (a stalled sandbox)
//! AGENTDECK_BENCH_HOLD_SECS=600 # seed, print a kubeconfig, hold the sandbox (no figures)
//! AGENTDECK_BENCH_HOLD_DAEMON=1 # … after the daemon has settled (the agent pods made)
//! ```

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentdeck::app::{fixtures, rows};
use agentdeck::crd::{AgentPool, AgentTask, LABEL_COMPONENT, LABEL_POOL};
use agentdeck::health::{FreshnessThresholds, HealthReport, HealthStatus};
use agentdeck::sandbox::Sandbox;
use agentdeck::sandbox::api::{Api as SandboxApi, Query, Target};
use kube::CustomResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use common::{Tmux, binary, clock_ticks, ms, percentile, proc_stats, rss_mib};

/// The sandbox in this process allocates as `agentdeck sandbox` does, with
/// jemalloc: on glibc's malloc, with the history of 10,000 pods' writes
/// (several GiB), its runtime's timers woke up to 64 ms late while the
/// replicas were measured, and each late wake was a stalled API.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const NS: &str = "default";
const GROUP: &str = "agentdeck.dev";
const VERSION: &str = "v1alpha1";
/// The latency pool, besides the sized ones.
const LAT_POOL: &str = "lat";
/// Writes a second to other objects while task → replicas is timed.
const CHURN_PER_SEC: u64 = 20;

/// What the bench is sized by.
#[derive(Clone)]
struct Size {
    pools: usize,
    tasks: usize,
    pods_per_pool: usize,
    idle: Duration,
    samples: usize,
    presses: usize,
    quick: bool,
    /// Seed, then hold the sandbox this long for measuring by hand.
    hold: Option<Duration>,
    /// With `hold`: start the daemon and let it settle first.
    hold_daemon: bool,
}

fn knob(name: &str, default: usize) -> usize {
    std::env::var(format!("AGENTDECK_BENCH_{name}"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Size {
    fn from_env() -> Size {
        let quick = std::env::var_os("AGENTDECK_BENCH_QUICK").is_some();
        let q = |full: usize, small: usize| if quick { small } else { full };
        Size {
            pools: knob("POOLS", q(1_000, 100)),
            tasks: knob("TASKS", q(100_000, 10_000)),
            pods_per_pool: knob("PODS", 10),
            idle: Duration::from_secs(knob("IDLE_SECS", q(60, 10)) as u64),
            samples: knob("SAMPLES", q(30, 10)),
            presses: knob("PRESSES", q(200, 50)),
            quick,
            hold: std::env::var("AGENTDECK_BENCH_HOLD_SECS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_secs),
            hold_daemon: std::env::var_os("AGENTDECK_BENCH_HOLD_DAEMON").is_some(),
        }
    }

    fn pods(&self) -> usize {
        self.pools * self.pods_per_pool
    }

    fn context(&self) -> String {
        format!(
            "{} pools, {} tasks, {} agent pods, output in {}",
            self.pools,
            self.tasks,
            self.pods(),
            if output_in_status() {
                "status.outputTail"
            } else {
                "ConfigMaps"
            }
        )
    }
}

fn thresholds() -> FreshnessThresholds {
    FreshnessThresholds {
        stale_after: Duration::from_secs(20),
        offline_after: Duration::from_secs(60),
    }
}

// rows figure: the change path the console takes (`RowBuilder::update`)
/// The console's rows after one task changed and after one agent pod
/// changed (no task did), as `cargo bench --bench console` measures them,
/// at `tasks` fixture tasks and `pods` agent pods (the fixture's first
/// agent repeated under new names): full build, then p50 and max of each.
fn rows_after_one_change(tasks: usize, pods: usize, rounds: usize) {
    let now = fixtures::now();
    let mut src = fixtures::sources(now, tasks);
    let agent = src.pods[0].clone();
    for i in src.pods.len()..pods {
        let mut p = agentdeck::cluster::pod::CachedPod::clone(&agent);
        p.metadata.name = Some(format!("iac-agent-platform-scale-{i:05}"));
        src.pods.push(Arc::new(p));
    }
    // The events an API server keeps for an hour after these pods
    // started: the kubelet's and scheduler's four a pod (Scheduled,
    // Pulled, Created, Started), as the sandbox writes them.
    for p in src.pods.clone() {
        let name = p.metadata.name.clone().unwrap_or_default();
        for (n, (reason, message)) in [
            (
                "Scheduled",
                format!("Successfully assigned default/{name} to node-1"),
            ),
            (
                "Pulled",
                "Container image \"example.com/sim-agent:1\" already present on machine".into(),
            ),
            ("Created", "Created container: agent".into()),
            ("Started", "Started container agent".into()),
        ]
        .into_iter()
        .enumerate()
        {
            let e: agentdeck::cluster::event::CachedEvent = serde_json::from_value(json!({
                "metadata": {"name": format!("{name}.{n:x}"), "namespace": "default",
                    "creationTimestamp": now.to_string()},
                "involvedObject": {"kind": "Pod", "name": name, "namespace": "default"},
                "reason": reason, "message": message, "type": "Normal", "count": 1,
                "lastTimestamp": now.to_string(), "source": {"component": "kubelet"},
            }))
            .expect("event");
            src.events.push(Arc::new(e));
        }
    }
    let mut builder = rows::RowBuilder::default();
    let started = Instant::now();
    drop(builder.build(&src, now, &thresholds()));
    let full = started.elapsed();
    let (mut task_times, mut pod_times) = (Vec::new(), Vec::new());
    // Each change told as the console's watch feeds tell it: one object
    // in a delta (see `tui::ViewChanges`).
    let one = |tasks: Vec<(rows::Key, Option<Arc<AgentTask>>)>,
               pods: Vec<(rows::Key, Option<Arc<agentdeck::cluster::pod::CachedPod>>)>,
               events| rows::Delta {
        tasks: rows::Changes::Some(tasks),
        pods: rows::Changes::Some(pods),
        events,
        ..rows::Delta::default()
    };
    for round in 0..rounds {
        let t = common::change_a_task(&mut src, round);
        let delta = one(
            vec![(rows::Keyed::key(&*t), Some(t))],
            Vec::new(),
            rows::Changes::default(),
        );
        let started = Instant::now();
        drop(builder.update(delta, now, &thresholds()));
        task_times.push(started.elapsed());

        let j = (round * 104_729) % src.pods.len();
        let mut p = agentdeck::cluster::pod::CachedPod::clone(&src.pods[j]);
        p.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("round".into(), round.to_string());
        let p = Arc::new(p);
        src.pods[j] = p.clone();
        let delta = one(
            Vec::new(),
            vec![(rows::Keyed::key(&*p), Some(p))],
            rows::Changes::default(),
        );
        let started = Instant::now();
        drop(builder.update(delta, now, &thresholds()));
        pod_times.push(started.elapsed());
    }
    let context = format!(
        "{tasks} tasks, {} pods, {} events, {rounds} changes, full build {}",
        src.pods.len(),
        src.events.len(),
        ms(full)
    );
    for (what, times) in [
        ("rows after one task changed", &mut task_times),
        ("rows after one agent pod changed", &mut pod_times),
    ] {
        println!(
            "{what}: p50 {} (max {}; {context}; aim ≤ 5 ms)",
            ms(percentile(times, 0.5)),
            ms(times.last().copied().unwrap_or_default()),
        );
    }
}

fn pool_name(i: usize) -> String {
    format!("pool-{i:04}")
}

/// A pool whose pods are simulated and answer health on `health_port`.
fn pool(name: &str, min: usize, max: usize, health_port: u16) -> Value {
    json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
        "metadata": {"name": name},
        "spec": {
            "image": "example.com/sim-agent:1",
            "podTemplate": {
                "metadata": {"annotations": {"sandbox.agentdeck.dev/simulate": "true"}},
                "spec": {"containers": [{"name": "agent", "command": ["sim-agent"]}]}
            },
            "minReplicas": min, "maxReplicas": max,
            "cooldownSeconds": {"up": 0, "down": 3600},
            "healthPort": health_port,
            "taskDefaults": {"acquireTimeoutSeconds": 86_400},
        }
    })
}

/// The agents' health process holds the daemon's connection to every
/// agent (the leader keeps one each, see `controller::prober`): 10,000
/// open sockets, past a soft limit of 1,024. The soft limit goes to the
/// hard one, and the hard one to 65,536 where this process may raise it
/// (as root); what it got is printed when `say`.
fn raise_open_file_limit(say: bool) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let want = 65_536;
    let now = getrlimit(Resource::Nofile);
    let hard = now.maximum.map(|h| h.max(want));
    let raised = Rlimit {
        current: hard,
        maximum: hard,
    };
    if setrlimit(Resource::Nofile, raised).is_err() {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: now.maximum,
                maximum: now.maximum,
            },
        );
    }
    let got = getrlimit(Resource::Nofile).current;
    if say {
        println!(
            "open-file limit: {} (the agents' health process holds the daemon's connection to each agent)",
            got.map_or("unlimited".to_owned(), |n| n.to_string())
        );
    }
}

fn rfc3339(secs_ago: i64) -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - secs_ago)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Task `i`: in pool `i % pools`, the `i / pools`-th of its pool. Its
/// status: None (Pending) for 4 in 100 (2 of them set Running later).
fn task(i: usize, pools: usize) -> (Value, Option<Value>) {
    let name = format!("task-{i:06}");
    let obj = json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": name},
        "spec": {"pool": pool_name(i % pools), "command": ["terraform", "plan"]}
    });
    let nth = i / pools;
    if nth % 50 < 2 {
        return (obj, None);
    }
    let failed = nth % 10 == 3;
    let ended = i64::try_from(i % 3_600).unwrap_or(0);
    let status = json!({
        "phase": if failed { "Failed" } else { "Succeeded" },
        "agent": format!("iac-agent-{}-gone-{}", pool_name(i % pools), nth % 7),
        "attempts": 1,
        "claimedAt": rfc3339(ended + 95),
        "startedAt": rfc3339(ended + 94),
        "finishedAt": rfc3339(ended),
        "lastHeartbeat": rfc3339(ended + 4),
        "exitCode": if failed { 1 } else { 0 },
        "message": if failed { "terraform plan exited with 1" } else { "terraform plan exited with 0" },
        "outputTail": output_tail(i, failed),
    });
    (obj, Some(status))
}

/// The last 40 lines a `terraform plan` prints, as an agent keeps them in
/// `status.outputTail` when the task ends (about 2.8 KB; the agent keeps
/// at most 40 lines and 4 KiB): a finished task carries it until its pool's
/// history lets the task go.
fn output_tail(i: usize, failed: bool) -> String {
    let mut lines: Vec<String> = (0..37)
        .map(|n| {
            format!("  # module.stack_{i}.aws_security_group_rule.ingress[{n}] will be created")
        })
        .collect();
    lines.push(String::new());
    lines.push("Plan: 37 to add, 0 to change, 0 to destroy.".into());
    lines.push(if failed {
        "Error: error acquiring the state lock: ConditionalCheckFailedException".into()
    } else {
        "Saved the plan to: tfplan".into()
    });
    lines.join("\n")
}

fn status_target(name: &str) -> Target {
    Target {
        namespace: Some(NS.to_owned()),
        name: Some(name.to_owned()),
        subresource: Some("status".into()),
    }
}

/// Whether finished tasks keep their output in `status.outputTail`, as
/// agents wrote it before `crd::output` (`AGENTDECK_BENCH_OUTPUT_IN_STATUS=1`,
/// to measure what the move saves), rather than in a ConfigMap of their own.
fn output_in_status() -> bool {
    std::env::var_os("AGENTDECK_BENCH_OUTPUT_IN_STATUS").is_some()
}

/// Moves a finished task's output from `status.outputTail` into its own
/// ConfigMap, summarized in `status.output`, as an agent writes it.
fn keep_output_apart(api: &SandboxApi, created: &Value, status: &mut Value) {
    let Some(text) = status
        .as_object_mut()
        .and_then(|s| s.remove("outputTail"))
        .and_then(|t| t.as_str().map(str::to_owned))
    else {
        return;
    };
    let Ok(task) = serde_json::from_value::<AgentTask>(created.clone()) else {
        return;
    };
    let Some(cm) = agentdeck::crd::output::config_map(&task, 1, &text) else {
        return;
    };
    let name = cm.metadata.name.clone().unwrap_or_default();
    let cm = serde_json::to_value(cm).expect("ConfigMap as JSON");
    if api
        .create("", "v1", "configmaps", Some(NS), cm, &Query::default())
        .is_ok()
    {
        let summary = agentdeck::crd::output::TaskOutput::of(name, &text);
        status["output"] = serde_json::to_value(summary).expect("summary as JSON");
    }
}

/// Creates tasks `range` through the sandbox's API, each with its status.
fn seed_tasks(api: &SandboxApi, range: std::ops::Range<usize>, pools: usize) {
    let q = Query::default();
    for i in range {
        let (obj, status) = task(i, pools);
        let Ok(mut created) = api.create(GROUP, VERSION, "agenttasks", Some(NS), obj, &q) else {
            continue;
        };
        if let Some(mut status) = status {
            let name = created["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !output_in_status() {
                keep_output_apart(api, &created, &mut status);
            }
            created["status"] = status;
            let _ = api.update(
                GROUP,
                VERSION,
                "agenttasks",
                &status_target(&name),
                created,
                &q,
            );
        }
    }
}

/// Seeds the CRDs, the pools and the tasks; the time it took.
async fn seed(sb: &Sandbox, size: &Size, health_port: u16) -> Duration {
    let started = Instant::now();
    let api = sb.api().clone();
    let q = Query::default();
    for crd in [AgentPool::crd(), AgentTask::crd()] {
        let crd = serde_json::to_value(crd).expect("crd as JSON");
        api.create(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            None,
            crd,
            &q,
        )
        .expect("crd");
    }
    while api.served(GROUP, VERSION, "agenttasks").is_err()
        || api.served(GROUP, VERSION, "agentpools").is_err()
    {
        assert!(started.elapsed() < Duration::from_secs(30), "CRDs served");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let per = size.pods_per_pool;
    for p in 0..size.pools {
        api.create(
            GROUP,
            VERSION,
            "agentpools",
            Some(NS),
            pool(&pool_name(p), per, per, health_port),
            &q,
        )
        .expect("pool");
    }
    api.create(
        GROUP,
        VERSION,
        "agentpools",
        Some(NS),
        pool(LAT_POOL, 0, 500, health_port),
        &q,
    )
    .expect("latency pool");
    // Two threads (the machine's cores): the store serialises writes, but
    // building each object does not need its lock.
    let (tasks, pools) = (size.tasks, size.pools);
    tokio::task::spawn_blocking(move || {
        std::thread::scope(|s| {
            let half = tasks / 2;
            let api = &api;
            s.spawn(move || seed_tasks(api, 0..half, pools));
            s.spawn(move || seed_tasks(api, half..tasks, pools));
        });
    })
    .await
    .expect("seeding ran");
    started.elapsed()
}

/// Set in the child that answers the agents' health (see [`AgentHealth`]).
const SERVE_HEALTH_ENV: &str = "AGENTDECK_BENCH_SERVE_HEALTH";

/// One listener answering every agent pod's `/healthz` (pod IPs are
/// loopback addresses) as an idle, healthy agent does, in a process of its
/// own (this bench re-run with [`SERVE_HEALTH_ENV`]): the daemon keeps a
/// connection to each of the 10,000 agents, and 10,000 sockets open in
/// this process made each `tmux` it starts (the console's screen is read
/// by `tmux capture-pane`) slower to spawn, which the key → screen figure
/// then counted. Ends when this process does (its stdin closes).
struct AgentHealth {
    child: std::process::Child,
    port: u16,
}

impl AgentHealth {
    fn start() -> AgentHealth {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().expect("this bench"))
            .env(SERVE_HEALTH_ENV, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the agents' health process");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("its stdout"))
            .read_line(&mut line)
            .expect("its port");
        let port = line.trim().parse().expect("a port");
        AgentHealth { child, port }
    }
}

impl Drop for AgentHealth {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agents' health process: prints its port, answers until stdin ends.
fn serve_agent_health() {
    async fn healthz() -> impl axum::response::IntoResponse {
        let now = jiff::Timestamp::now();
        let report = HealthReport {
            status: HealthStatus::Healthy,
            current_time: now,
            last_activity: now,
        };
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            serde_json::to_string(&report).unwrap_or_default(),
        )
    }
    std::thread::spawn(|| {
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
            .await
            .expect("health listener");
        println!("{}", listener.local_addr().expect("address").port());
        let app = axum::Router::new().route("/healthz", axum::routing::get(healthz));
        let _ = axum::serve(listener, app).await;
    });
}

/// Agent pods Running (not being deleted), by pool.
fn running_agents(api: &SandboxApi) -> BTreeMap<String, Vec<String>> {
    let (pods, _) = api.store.list("pods", Some(NS));
    let mut by_pool: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in pods {
        let labels = &p["metadata"]["labels"];
        if labels[LABEL_COMPONENT] != "agent"
            || p["metadata"].get("deletionTimestamp").is_some()
            || p["status"]["phase"] != "Running"
        {
            continue;
        }
        if let (Some(pool), Some(name)) =
            (labels[LABEL_POOL].as_str(), p["metadata"]["name"].as_str())
        {
            by_pool
                .entry(pool.to_owned())
                .or_default()
                .push(name.to_owned());
        }
    }
    by_pool
}

/// Sets the 2 tasks of each pool seeded for it Running, on its agents.
fn start_running_tasks(api: &SandboxApi, size: &Size, agents: &BTreeMap<String, Vec<String>>) {
    let q = Query::default();
    let mut set = 0;
    for i in 0..size.tasks {
        let nth = i / size.pools;
        if nth % 50 != 1 {
            continue;
        }
        let Some(pods) = agents.get(&pool_name(i % size.pools)) else {
            continue;
        };
        let name = format!("task-{i:06}");
        let Ok(current) = api.get(GROUP, VERSION, "agenttasks", Some(NS), &name) else {
            continue;
        };
        let mut obj = Value::clone(&current);
        obj["status"] = json!({
            "phase": "Running",
            "agent": pods[nth / 50 % pods.len()],
            "attempts": 1,
            "claimedAt": rfc3339(2),
            "startedAt": rfc3339(1),
            "lastHeartbeat": rfc3339(0),
        });
        if api
            .update(GROUP, VERSION, "agenttasks", &status_target(&name), obj, &q)
            .is_ok()
        {
            set += 1;
        }
    }
    println!("({set} tasks set Running on their pools' agents)");
}

/// Sockets among `pid`'s open files: its connections to the API and its
/// listeners (a connection opened for each request in flight, and kept
/// idle, shows here).
fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

/// Polls `f` every 5 ms until it holds: the time it took, or None after
/// `limit`.
async fn within(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while !f() {
        if started.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Some(started.elapsed())
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Requests that write (any verb but GET), Lease renewals left out.
fn writes(requests: &BTreeMap<String, u64>) -> u64 {
    requests
        .iter()
        .filter(|(k, _)| !k.starts_with("GET ") && !k.contains("/leases"))
        .map(|(_, n)| n)
        .sum()
}

/// Waits until the daemon is ready, every agent pod runs and the API has
/// seen no write but Lease renewals for 10 s; false if one did not happen.
async fn settle(sb: &Sandbox, size: &Size, daemon: &common::Daemon, began: Instant) -> bool {
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/readyz", daemon.port);
    let limit = Duration::from_secs(if size.quick { 120 } else { 1200 });
    let started = Instant::now();
    loop {
        let ready = http.get(&url).send().await.is_ok_and(|r| r.status() == 200);
        if ready {
            break;
        }
        if started.elapsed() > limit {
            println!(
                "daemon ready (/readyz): did not happen within {}",
                secs(limit)
            );
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "daemon ready (/readyz, its watches synced): {} after its start",
        secs(began.elapsed())
    );
    let want = size.pods();
    let started = Instant::now();
    loop {
        // Once a second: a list of every pod is no free poll at this size.
        let running: usize = running_agents(sb.api()).values().map(Vec::len).sum();
        if running >= want {
            println!(
                "{want} agent pods Running: {} after the daemon's start",
                secs(began.elapsed())
            );
            break;
        }
        if started.elapsed() > limit {
            // Measured anyway: a figure with a few pods short says more
            // than none.
            println!(
                "{want} agent pods Running: did not happen within {} ({running} running); measuring anyway",
                secs(limit)
            );
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    start_running_tasks(sb.api(), size, &running_agents(sb.api()));
    // Quiet: 10 s with no write but Lease renewals.
    let started = Instant::now();
    loop {
        sb.api().faults.reset_requests();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let n = writes(&sb.api().faults.requests());
        if n == 0 {
            println!(
                "quiet (10 s without a write but Lease renewals): {} after the daemon's start",
                secs(began.elapsed())
            );
            return true;
        }
        if started.elapsed() > limit {
            println!(
                "quiet: did not happen within {} ({n} writes in the last 10 s); measuring anyway",
                secs(limit)
            );
            return true;
        }
    }
}

/// The daemon's RSS and CPU over `size.idle`.
async fn quiet_window(
    sb: &Sandbox,
    size: &Size,
    daemon: &mut common::Daemon,
    log: &std::path::Path,
) {
    let pid = daemon.child.id();
    sb.api().faults.reset_requests();
    let log_from = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    let (rss0, _, ticks0) = proc_stats(pid);
    let mut max = rss0;
    let started = Instant::now();
    while started.elapsed() < size.idle {
        tokio::time::sleep(Duration::from_secs(1)).await;
        max = max.max(proc_stats(pid).0);
    }
    let window = started.elapsed();
    let (rss, hwm, ticks1) = proc_stats(pid);
    if let Ok(Some(status)) = daemon.child.try_wait() {
        println!("(the daemon ended during the window: {status})");
    }
    let cpu = ticks1.saturating_sub(ticks0) as f64 / clock_ticks() / window.as_secs_f64() * 100.0;
    let requests = sb.api().faults.requests();
    let mut by_verb: BTreeMap<&str, u64> = BTreeMap::new();
    for (k, n) in &requests {
        *by_verb
            .entry(k.split_whitespace().next().unwrap_or(""))
            .or_default() += n;
    }
    let context = format!("{}, {}s quiet", size.context(), window.as_secs());
    println!(
        "controller RSS: {:.1} MiB at the end (max {:.1} MiB in the window, peak ever {:.1} MiB; {context}; aim ≤ 256 MiB)",
        rss as f64 / 1024.0,
        max as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    println!("controller CPU: {cpu:.1} % of one core ({context})");
    println!(
        "  the daemon's open sockets at the end: {} (its connections to the API and its listener)",
        open_sockets(pid)
    );
    println!(
        "  API requests in the window: {} ({} writes besides Lease renewals); by verb {by_verb:?}",
        requests.values().sum::<u64>(),
        writes(&requests)
    );
    // Which writes they were, by resource (the path without its names).
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for (k, n) in requests
        .iter()
        .filter(|(k, _)| !k.starts_with("GET ") && !k.contains("/leases"))
    {
        *by_kind.entry(write_kind(k)).or_default() += n;
    }
    if !by_kind.is_empty() {
        println!("  writes by resource: {by_kind:?}");
    }
    let (changed, examples) = status_fields_written(log, log_from);
    if !changed.is_empty() {
        println!(
            "  pool status writes by the fields they changed (daemon's debug log): {changed:?}"
        );
        for line in examples {
            println!("    {line}");
        }
    }
}

/// The daemon's `pool status written` debug lines after byte `from` of its
/// log, counted by their `changed` field lists; and, to print, the first
/// six `probe round` lines and three status writes.
fn status_fields_written(log: &std::path::Path, from: u64) -> (BTreeMap<String, u64>, Vec<String>) {
    let text = std::fs::read(log).unwrap_or_default();
    let tail = String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default());
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    let mut examples = Vec::new();
    for line in tail.lines().filter(|l| l.contains("probe round")) {
        if examples.len() < 6 {
            examples.push(line.to_owned());
        }
    }
    for line in tail.lines().filter(|l| l.contains("pool status written")) {
        if examples.len() < 9 {
            examples.push(line.to_owned());
        }
        let Some(at) = line.find("changed") else {
            continue;
        };
        let rest = line[at + "changed".len()..].trim_start_matches(['"', ':', '=']);
        let fields: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == ',')
            .collect();
        *by.entry(fields).or_default() += 1;
    }
    (by, examples)
}

/// `PATCH /apis/g/v/namespaces/ns/res/name/status` as `PATCH res/status`.
fn write_kind(key: &str) -> String {
    let (verb, path) = key.split_once(' ').unwrap_or((key, ""));
    let parts: Vec<&str> = path.split(['/', '?']).filter(|s| !s.is_empty()).collect();
    let after_ns = match parts.iter().position(|p| *p == "namespaces") {
        Some(i) if parts.len() > i + 2 => &parts[i + 2..],
        _ => &parts[parts.len().saturating_sub(2)..],
    };
    let mut out = after_ns.first().copied().unwrap_or("").to_string();
    if let Some(sub) = after_ns.get(2) {
        out = format!("{out}/{sub}");
    }
    format!("{verb} {out}")
}

/// The console (observing; the daemon leads) under tmux: first populated
/// list, RSS 5 s later, key press → screen changed.
fn console(size: &Size, dir: &std::path::Path, kubeconfig: &std::path::Path) {
    let bin = binary();
    let cmd = format!(
        "env HOME={d} XDG_CONFIG_HOME={d} KUBECONFIG={k} {bin}",
        d = dir.display(),
        k = kubeconfig.display()
    );
    let pools = size.pools + 1;
    let (tasks_shown, pools_shown) = (
        format!("3:tasks {} ", size.tasks),
        format!("Pools [{pools}/{pools}]"),
    );
    let t = Tmux::start_on("scale-bench", &cmd, 160, 48);
    let limit = Duration::from_secs(if size.quick { 60 } else { 180 });
    let context = format!("{}, 160x48", size.context());
    // First rows: the pools table (the first view) shows some, whatever
    // is still loading behind it.
    let rows = t.until(limit, |s| shown_rows(s, "Pools [").is_some_and(|n| n > 0));
    let Some(rows) = rows else {
        println!(
            "console first populated list: did not happen within {} ({context}); the screen:\n{}",
            secs(limit),
            t.screen()
        );
        return;
    };
    let screen = t.screen();
    let tab = screen
        .split("  ")
        .find(|w| w.trim_start().starts_with("3:tasks"))
        .unwrap_or("3:tasks ?")
        .trim()
        .to_owned();
    println!(
        "console first populated list: {} (first rows on screen, the tasks tab then `{tab}`; {context}; aim ≤ 500 ms)",
        ms(rows)
    );
    let complete = t.until(limit, |s| {
        s.contains(&tasks_shown) && s.contains(&pools_shown) && s.contains("watch synced")
    });
    let Some(complete) = complete else {
        println!(
            "console complete list: did not happen within {} ({context}); the screen:\n{}",
            secs(limit),
            t.screen()
        );
        return;
    };
    println!(
        "console complete list: {} (the header counts all {} tasks and {pools} pools, watch synced; {context}; aim ≤ 2 s)",
        ms(complete),
        size.tasks
    );
    std::thread::sleep(Duration::from_secs(5));
    let rss = t.pid().and_then(rss_mib);
    println!(
        "console RSS: {} (5 s after the complete list; {context}; aim ≤ 400 MiB)",
        rss.map_or_else(|| "unknown".into(), |r| format!("{r:.1} MiB")),
    );
    // The Events are watched once a view reads them: what they cost.
    t.send("4");
    match t.until(limit, |s| events_counted(s).is_some_and(|n| n > 0)) {
        Some(listed) => {
            let n = events_counted(&t.screen()).unwrap_or(0);
            std::thread::sleep(Duration::from_secs(5));
            let rss = t.pid().and_then(rss_mib);
            println!(
                "console RSS, events open: {} (5 s after `4` listed {n} events in {}; {context})",
                rss.map_or_else(|| "unknown".into(), |r| format!("{r:.1} MiB")),
                ms(listed)
            );
        }
        None => println!(
            "console RSS, events open: the events were not listed within {}; the screen:\n{}",
            secs(limit),
            t.screen()
        ),
    }
    t.send("3");
    t.until(Duration::from_secs(10), |s| s.contains("Tasks ["));
    t.send("1");
    t.until(Duration::from_secs(10), |s| s.contains("Pools ["));
    let mut keys = t.key_latency(size.presses);
    println!(
        "console key → screen: p50 {} p99 {} ({} presses of 3/1 alternating, tmux capture-pane; {context})",
        ms(percentile(&mut keys, 0.5)),
        ms(percentile(&mut keys, 0.99)),
        keys.len()
    );
}

/// The events the tab counts once listed whole (`4:events N`, not the
/// `N/M…` of a list under way nor the bare tab of events not watched).
fn events_counted(screen: &str) -> Option<usize> {
    let rest = &screen[screen.find("4:events ")? + "4:events ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    rest[digits.len()..]
        .starts_with(' ')
        .then(|| digits.parse().ok())
        .flatten()
}

/// The rows a table titled `title` (`Pools [`) says it shows: the `N` of
/// `Pools [N/M]`.
fn shown_rows(screen: &str, title: &str) -> Option<usize> {
    let rest = &screen[screen.find(title)? + title.len()..];
    rest[..rest.find('/')?].trim().parse().ok()
}

/// Task created in the latency pool → its Deployment's replicas one higher,
/// while 20 writes a second go to other tasks.
///
/// Both ends are read from the sandbox's own change stream: the task's
/// ADDED and the Deployment's MODIFIED with the replicas asked for, each
/// stamped when this bench's reader takes it from the stream. A reader
/// late by a moment is late for both, so the difference is the API's
/// view: the task written → the Deployment written. (Through a client's
/// watch, as before, the figure also held that watch's lag in this busy
/// process.) The writes elsewhere go through the sandbox's API in process
/// from a thread of their own, paced by the clock: from a task on this
/// process's two busy runtime threads, with a skipped tick dropping a
/// write, they reached 7 a second of the 20 asked.
async fn task_to_replicas(sb: &Sandbox, size: &Size) {
    let deployment = format!("iac-agent-{LAT_POOL}");
    // (what, when): ("task", lat-i ADDED) and ("replicas", n).
    let seen: Arc<std::sync::Mutex<Vec<(String, i64, Instant)>>> = Arc::default();
    let reader = {
        let mut rx = sb.api().store.subscribe();
        let seen = seen.clone();
        let deployment = deployment.clone();
        tokio::spawn(async move {
            loop {
                let change = match rx.recv().await {
                    Ok(c) => c,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return,
                };
                let now = Instant::now();
                let name = change.object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default();
                let what = match (change.resource.as_str(), change.kind) {
                    ("agenttasks.agentdeck.dev", agentdeck::sandbox::store::EventType::Added)
                        if name.starts_with("lat-") =>
                    {
                        (
                            "task",
                            name.trim_start_matches("lat-").parse().unwrap_or(-1),
                        )
                    }
                    ("deployments.apps", _) if name == deployment => (
                        "replicas",
                        change.object["spec"]["replicas"].as_i64().unwrap_or(-1),
                    ),
                    _ => continue,
                };
                seen.lock()
                    .expect("lock")
                    .push((what.0.to_owned(), what.1, now));
            }
        })
    };
    let replicas_now = || {
        sb.api()
            .store
            .get("deployments.apps", NS, &deployment)
            .and_then(|d| d["spec"]["replicas"].as_i64())
    };
    if within(Duration::from_secs(60), || replicas_now() == Some(0))
        .await
        .is_none()
    {
        println!("task created → replicas: the latency pool's Deployment was not at 0 within 60 s");
        reader.abort();
        return;
    }
    // Labels of finished tasks of the other pools, 20 a second, each at its
    // time whatever the one before cost.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let churn = {
        let (api, stop, done, tasks) = (sb.api().clone(), stop.clone(), done.clone(), size.tasks);
        std::thread::spawn(move || {
            let q = Query::default();
            let every = Duration::from_millis(1000 / CHURN_PER_SEC);
            let started = Instant::now();
            let mut n: u32 = 0;
            while !stop.load(Ordering::Relaxed) {
                let due = started + every * n;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let i = (n as usize * 7_919 + 500) % tasks.max(1);
                n += 1;
                let name = format!("task-{i:06}");
                let Ok(current) = api.get(GROUP, VERSION, "agenttasks", Some(NS), &name) else {
                    continue;
                };
                let mut obj = Value::clone(&current);
                obj["metadata"]["labels"]["bench-churn"] = json!(n.to_string());
                let target = Target {
                    namespace: Some(NS.to_owned()),
                    name: Some(name),
                    subresource: None,
                };
                if api
                    .update(GROUP, VERSION, "agenttasks", &target, obj, &q)
                    .is_ok()
                {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // With AGENTDECK_BENCH_TRACE: how late a 5 ms timer of this process's
    // runtime (the sandbox's) wakes; a late one is a stalled API and watch.
    let lag = std::env::var_os("AGENTDECK_BENCH_TRACE").map(|_| {
        tokio::spawn(async move {
            loop {
                let t0 = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let late = t0.elapsed().saturating_sub(Duration::from_millis(5));
                if late > Duration::from_millis(10) {
                    let us = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_micros())
                        .unwrap_or(0);
                    println!("  trace bench runtime late {} at {us}", ms(late));
                }
            }
        })
    });
    let client = sb.client().expect("client");
    let tasks: Api<AgentTask> = Api::namespaced(client.clone(), NS);
    let churn_started = Instant::now();
    let limit = Duration::from_secs(10);
    let mut times = Vec::new();
    let mut missed = 0;
    let stamp = |what: &str, n: i64| {
        seen.lock()
            .expect("lock")
            .iter()
            .find(|(w, v, _)| w == what && *v == n)
            .map(|(_, _, at)| *at)
    };
    for i in 0..size.samples {
        let t: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": format!("lat-{i}")},
            "spec": {"pool": LAT_POOL, "command": ["terraform", "plan"]}
        }))
        .expect("task");
        if tasks.create(&PostParams::default(), &t).await.is_err() {
            missed += 1;
            continue;
        }
        let want = i64::try_from(i + 1 - missed).unwrap_or(i64::MAX);
        let index = i64::try_from(i).unwrap_or(-1);
        let both = within(limit, || {
            stamp("task", index).is_some() && stamp("replicas", want).is_some()
        })
        .await;
        match (both, stamp("task", index), stamp("replicas", want)) {
            (Some(_), Some(created), Some(scaled)) => {
                times.push(scaled.saturating_duration_since(created));
                if std::env::var_os("AGENTDECK_BENCH_TRACE").is_some() {
                    let wall = |at: Instant| {
                        let ago = Instant::now().saturating_duration_since(at);
                        (std::time::SystemTime::now() - ago)
                            .duration_since(std::time::UNIX_EPOCH)
                            .map(|d| d.as_micros())
                            .unwrap_or(0)
                    };
                    println!(
                        "  trace sample {i}: task {} replicas {} ({})",
                        wall(created),
                        wall(scaled),
                        ms(scaled.saturating_duration_since(created))
                    );
                }
            }
            _ => {
                println!(
                    "  sample {i}: replicas {want}: did not happen within {}",
                    secs(limit)
                );
                break;
            }
        }
        // Spread samples over the resync period, as real task arrivals are.
        tokio::time::sleep(Duration::from_millis(150 + fastrand::u64(0..250))).await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || churn.join()).await;
    reader.abort();
    if let Some(lag) = lag {
        lag.abort();
    }
    let rate = done.load(Ordering::Relaxed) as f64 / churn_started.elapsed().as_secs_f64();
    if times.is_empty() {
        println!("task created → replicas: no sample");
        return;
    }
    println!(
        "task created → replicas: p50 {} p99 {} (max {}; {} samples; task written → Deployment written, from the sandbox's change stream; {:.1} writes/s to other tasks meanwhile; {}; aim p99 ≤ 50 ms)",
        ms(percentile(&mut times, 0.5)),
        ms(percentile(&mut times, 0.99)),
        ms(times.last().copied().unwrap_or_default()),
        times.len(),
        rate,
        size.context()
    );
}

/// Holds the seeded sandbox (and the daemon, when it was started) for
/// `hold`, for measuring by hand: `kubectl`, a console, a profiler.
async fn hold_for_hand(sb: &Sandbox, kubeconfig: &std::path::Path, hold: Duration) {
    let kept = std::env::temp_dir().join("agentdeck-scale-hold.kubeconfig");
    let _ = std::fs::copy(kubeconfig, &kept);
    println!(
        "holding for {}: KUBECONFIG={} (sandbox at {})",
        secs(hold),
        kept.display(),
        sb.url()
    );
    tokio::time::sleep(hold).await;
}

async fn run(size: &Size) {
    let began = Instant::now();
    // 110 pods a node: room for every agent and the latency pool's.
    let nodes = u32::try_from(size.pods() / 100 + 2).unwrap_or(u32::MAX);
    // The history a cluster of this size keeps: etcd holds five minutes
    // of writes (the sandbox compacts every five minutes too), where the
    // sandbox's laptop bounds (10,000 changes, 64 MiB) are passed within
    // seconds by 10,000 pods' status writes, and a 100,000-task list's
    // continue token or a watch's resourceVersion expires mid-list, again
    // and again ("continue parameter is too old", 410 Expired).
    let retention = agentdeck::sandbox::retention::Retention {
        history: agentdeck::sandbox::store::HistoryLimits {
            max_changes: 2_000_000,
            max_bytes: 4 << 30,
        },
        ..agentdeck::sandbox::retention::Retention::from_env()
    };
    let sb = Sandbox::start_retaining(
        0,
        nodes,
        agentdeck::sandbox::auth::Security::generate().expect("credentials"),
        // Each simulated pod's status looked at every 10 s, as the real
        // kubelet's status manager syncs (a change is written at once
        // either way): every second, 10,000 pods' looks took a third of
        // this process's two cores with nothing changing.
        agentdeck::sandbox::kubelet::KubeletConfig {
            resync: Duration::from_secs(10),
            ..agentdeck::sandbox::kubelet::KubeletConfig::from_env()
        },
        retention,
    )
    .await
    .expect("sandbox");
    let health = AgentHealth::start();
    let health_port = health.port;
    let seeded = seed(&sb, size, health_port).await;
    println!(
        "seeded {} pools (+ the latency pool) and {} tasks through the sandbox's API in {} ({nodes} simulated nodes)",
        size.pools,
        size.tasks,
        secs(seeded)
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sb.kubeconfig(NS)).expect("kubeconfig");
    let log = dir.path().join("daemon.log");
    if let Some(hold) = size.hold
        && !size.hold_daemon
    {
        hold_for_hand(&sb, &kubeconfig, hold).await;
        return;
    }
    let daemon_started = Instant::now();
    // Debug lines of the reconciler (each pool status write names the
    // fields it changes) and of the prober (each round's time), read back
    // after the quiet window.
    let mut daemon = common::start_daemon_filtered(
        &binary(),
        &kubeconfig,
        NS,
        &log,
        "info,agentdeck::controller::reconcile=debug,agentdeck::controller::prober=debug",
    );
    println!("daemon pid {}, log {}", daemon.child.id(), log.display());
    let settled = settle(&sb, size, &daemon, daemon_started).await;
    if let Some(hold) = size.hold {
        hold_for_hand(&sb, &kubeconfig, hold).await;
        drop(daemon);
        return;
    }
    if settled {
        quiet_window(&sb, size, &mut daemon, &log).await;
        let (dir_path, kc) = (dir.path().to_owned(), kubeconfig.clone());
        let size_ref = size.clone();
        tokio::task::spawn_blocking(move || console(&size_ref, &dir_path, &kc))
            .await
            .expect("console figures");
        task_to_replicas(&sb, size).await;
    } else {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        println!("the daemon's last log lines:");
        for line in text.lines().rev().take(10).collect::<Vec<_>>().iter().rev() {
            println!("  {line}");
        }
    }
    drop(daemon);
    println!(
        "(bench ran {}; the sandbox held {} pods at the end)",
        secs(began.elapsed()),
        sb.api().store.list("pods", None).0.len()
    );
    // Ten thousand simulated pods end with the kubelet; no process to kill.
    let _ = tokio::time::timeout(Duration::from_secs(20), sb.stop()).await;
}

fn main() {
    if std::env::var_os(SERVE_HEALTH_ENV).is_some() {
        raise_open_file_limit(false);
        serve_agent_health();
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    raise_open_file_limit(true);
    // The sandbox's containers start through agentdeck's own entry point,
    // never through this harness. Set before any thread exists.
    // SAFETY: single-threaded here; nothing reads the environment concurrently.
    unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    let size = Size::from_env();
    println!("== agentdeck at scale: {} ==", size.context());
    if size.hold.is_none() {
        rows_after_one_change(size.tasks, size.pods(), 20);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(&size));
    rt.shutdown_timeout(Duration::from_secs(1));
}
