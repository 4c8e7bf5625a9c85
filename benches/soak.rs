//! The soak: everything that runs long, run long. A sandbox process that
//! compacts its history every `SOAK_COMPACT_SECONDS`, the real daemon, one
//! pool of real `agentdeck agent` pods (min 1, max 4, finished tasks kept
//! 60 s), a console under tmux as observer, and a trickle of tasks (one
//! every `SOAK_TASK_EVERY_MS`, each printing 300 lines, sleeping 1–5 s,
//! every fifth failing) for `SOAK_MINUTES`.
//!
//! Prints, and asserts nothing: each process's RSS at the start and end and
//! its growth per minute (from minute 3 on, past start-up), the pool's
//! replica changes per 10 minutes, tasks lost or run twice, finished tasks
//! left past their time, whether the pool's health counts match the API's
//! running agent pods, and whether the console's agent rows match the API.
//!
//! ```text
//! cargo bench --bench soak                      # 11 minutes, compaction every 60 s
//! SOAK_MINUTES=4 SOAK_COMPACT_SECONDS=30 cargo bench --bench soak
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentdeck::crd::{AgentPool, AgentTask, TaskPhase};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::json;

const NS: &str = "default";
const POOL: &str = "soak";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn binary() -> String {
    std::env::var("AGENTDECK_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentdeck").to_owned())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process stopped when dropped: SIGTERM, so that the sandbox
/// stops its containers (the agents are its children; a SIGKILL would
/// leave them running), then SIGKILL if it has not ended within 15 s.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let asked = Instant::now();
        while asked.elapsed() < Duration::from_secs(15) {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Tmux(String);

impl Tmux {
    fn start(cmd: &str) -> Tmux {
        let socket = format!("agentdeck-soak-{}", std::process::id());
        let ok = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "s",
            ])
            .args(["-x", "250", "-y", "60", cmd])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tmux starts");
        Tmux(socket)
    }
    fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.0, "capture-pane", "-p", "-t", "s"])
            .output()
            .expect("capture");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    fn send(&self, k: &str) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "send-keys", "-t", "s", k])
            .status();
    }
    fn pid(&self) -> Option<u32> {
        let o = Command::new("tmux")
            .args(["-L", &self.0, "list-panes", "-t", "s", "-F", "#{pane_pid}"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .status();
    }
}

fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Pids of the `agentdeck agent` processes (the pool's agents).
fn agent_pids() -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        if args.len() >= 2 && args[0].ends_with(b"agentdeck") && args[1] == b"agent" {
            out.push(pid);
        }
    }
    out
}

/// RSS samples of one process: (minute, MiB).
#[derive(Default)]
struct Samples(Vec<(f64, f64)>);

impl Samples {
    fn report(&self, what: &str) {
        let (Some(first), Some(last)) = (self.0.first(), self.0.last()) else {
            println!("{what:<22} no samples");
            return;
        };
        // Growth per minute from minute 3 on (start-up excluded): a least
        // squares slope over those samples.
        let later: Vec<&(f64, f64)> = self.0.iter().filter(|(m, _)| *m >= 3.0).collect();
        let slope = if later.len() >= 2 {
            let n = later.len() as f64;
            let mx = later.iter().map(|(m, _)| m).sum::<f64>() / n;
            let my = later.iter().map(|(_, r)| r).sum::<f64>() / n;
            let num: f64 = later.iter().map(|(m, r)| (m - mx) * (r - my)).sum();
            let den: f64 = later.iter().map(|(m, _)| (m - mx).powi(2)).sum();
            format!("{:+.2} MiB/min", num / den.max(f64::EPSILON))
        } else {
            "-".to_owned()
        };
        let from3 = later
            .first()
            .map_or("-".to_owned(), |(_, r)| format!("{:+.1} MiB", last.1 - r));
        println!(
            "{what:<22} start {:7.1} MiB  end {:7.1} MiB  from minute 3 {from3:>11}  slope {slope}",
            first.1, last.1
        );
    }
}

fn task(name: &str, i: u64) -> AgentTask {
    let sleep = 1 + (i * 7) % 5;
    let code = if i % 5 == 4 { 1 } else { 0 };
    let script = format!(
        "i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo \"{name} line $i\"; done; sleep {sleep}; exit {code}"
    );
    serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": name},
        "spec": {"pool": POOL, "command": ["sh", "-c", script]}
    }))
    .expect("task")
}

fn main() {
    let minutes: f64 = env_or("SOAK_MINUTES", 11.0);
    let compact: u64 = env_or("SOAK_COMPACT_SECONDS", 60);
    let every = Duration::from_millis(env_or("SOAK_TASK_EVERY_MS", 2000));
    let bin = binary();
    let dir = tempfile::tempdir().expect("temp dir");
    let kc = dir.path().join("kubeconfig");
    let port = free_port();
    println!(
        "== soak: {minutes} min, a task every {} ms, sandbox compacting every {compact} s ==",
        every.as_millis()
    );
    let sandbox = Proc(
        Command::new(&bin)
            .args(["sandbox", "--port", &port.to_string()])
            .arg("--kubeconfig-out")
            .arg(&kc)
            .args(["--compaction-interval", &format!("{compact}s")])
            .env("AGENTDECK_SANDBOX_EXE", &bin)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("sandbox.log")).expect("log"))
            .spawn()
            .expect("the sandbox starts"),
    );
    let started = Instant::now();
    while !kc.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the sandbox wrote no kubeconfig"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client: Client = rt.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kc).expect("kubeconfig"),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("client config");
        Client::try_from(config).expect("client")
    });
    rt.block_on(async {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd).await.expect("crd");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), NS);
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": POOL},
            "spec": {"image": "ghcr.io/agentdeck/agentdeck:0.1.0", "minReplicas": 1, "maxReplicas": 4,
                     "taskHistory": {"ttlSecondsAfterFinished": 60}}
        }))
        .expect("pool");
        pools.create(&PostParams::default(), &pool).await.expect("pool");
    });
    let daemon = Proc(
        Command::new(&bin)
            .arg("--daemon")
            .env("KUBECONFIG", &kc)
            .env("AGENTDECK_CONTROLLER_NAMESPACE", NS)
            .env("AGENTDECK_SERVER__PORT", free_port().to_string())
            .env("AGENTDECK_LOG__LEVEL", "info")
            .env_remove("AGENTDECK_SANDBOX_EXE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("daemon.log")).expect("log"))
            .spawn()
            .expect("the daemon starts"),
    );
    let console = Tmux::start(&format!(
        "env HOME={d} XDG_CONFIG_HOME={d} KUBECONFIG={k} {bin}",
        d = dir.path().display(),
        k = kc.display()
    ));

    // What is watched from here: replica changes and every task's end.
    let changes: Arc<Mutex<Vec<(Instant, i32)>>> = Arc::default();
    let ends: Arc<Mutex<BTreeMap<String, (TaskPhase, i32)>>> = Arc::default();
    {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let changes = changes.clone();
        rt.spawn(async move {
            let stream = watcher(
                deployments,
                watcher::Config::default().fields(&format!("metadata.name=iac-agent-{POOL}")),
            )
            .applied_objects();
            futures::pin_mut!(stream);
            while let Some(d) = stream.next().await {
                if let Ok(d) = d {
                    let r = d.spec.and_then(|s| s.replicas).unwrap_or(0);
                    let mut c = changes.lock().unwrap();
                    if c.last().map(|(_, last)| *last) != Some(r) {
                        c.push((Instant::now(), r));
                    }
                }
            }
        });
        let tasks: Api<AgentTask> = Api::namespaced(client.clone(), NS);
        let ends = ends.clone();
        rt.spawn(async move {
            let stream = watcher(tasks, watcher::Config::default()).applied_objects();
            futures::pin_mut!(stream);
            while let Some(t) = stream.next().await {
                if let Ok(t) = t
                    && let Some(s) = &t.status
                    && s.phase.is_finished()
                {
                    ends.lock()
                        .unwrap()
                        .insert(t.name_any(), (s.phase, s.attempts));
                }
            }
        });
    }

    // An observer of its own: a watch-only controller's view, the rows
    // built from its change feeds as the console builds them, compared
    // every 10 s with a fresh build of the same stores, and each pool's
    // index with a filter over its store.
    let observer_cancel = tokio_util::sync::CancellationToken::new();
    let observed: Arc<Mutex<Observed>> = Arc::default();
    rt.spawn(observe(
        client.clone(),
        observed.clone(),
        observer_cancel.clone(),
    ));

    let mut rss: BTreeMap<&str, Samples> = BTreeMap::new();
    let mut agents_rss = Samples::default();
    let mut sample = |at: f64| {
        for (what, pid) in [
            ("sandbox", Some(sandbox.0.id())),
            ("daemon", Some(daemon.0.id())),
            ("console", console.pid()),
        ] {
            if let Some(mib) = pid.and_then(rss_mib) {
                rss.entry(what).or_default().0.push((at, mib));
            }
        }
        let agents: Vec<f64> = agent_pids().into_iter().filter_map(rss_mib).collect();
        if !agents.is_empty() {
            agents_rss
                .0
                .push((at, agents.iter().sum::<f64>() / agents.len() as f64));
        }
    };
    let tasks: Api<AgentTask> = Api::namespaced(client.clone(), NS);
    let soak_started = Instant::now();
    let total = Duration::from_secs_f64(minutes * 60.0);
    let mut created = Vec::new();
    let mut next_sample = Duration::ZERO;
    let mut i = 0u64;
    let mut relists = 0;
    while soak_started.elapsed() < total {
        let at = soak_started.elapsed();
        if relists < 2 && at >= total * (relists + 1) / 3 {
            // Twice: a write the task and pod watches never see, then in
            // one request every watch dropped and the history compacted to
            // now: a watch resumes from a resourceVersion compacted away,
            // gets 410 Gone and lists again (the daemon's, the console's
            // and the observer's). A watch that stays connected never
            // relists however often the sandbox compacts.
            relists += 1;
            let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
                Api::namespaced(client.clone(), NS);
            let marker: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": format!("soak-marker-{relists}")}}),
            )
            .expect("cm");
            let _ = rt.block_on(cms.create(&PostParams::default(), &marker));
            let req = http::Request::post("/sandbox/faults")
                .header("content-type", "application/json")
                .body(
                    serde_json::to_vec(&json!({"dropWatches": true, "compact": true}))
                        .expect("json"),
                )
                .expect("request");
            match rt.block_on(client.request_text(req)) {
                Ok(_) => println!(
                    "(at {:.1} min: history compacted and every watch dropped)",
                    at.as_secs_f64() / 60.0
                ),
                Err(e) => println!("(faults not applied: {e})"),
            }
        }
        if at >= next_sample {
            sample(at.as_secs_f64() / 60.0);
            next_sample += Duration::from_secs(60);
        }
        let name = format!("soak-{i:05}");
        match rt.block_on(tasks.create(&PostParams::default(), &task(&name, i))) {
            Ok(_) => created.push(name),
            Err(e) => println!("(task {name} not created: {e})"),
        }
        i += 1;
        std::thread::sleep(every.saturating_sub(soak_started.elapsed() - at));
    }
    sample(minutes);
    // Let the last tasks finish.
    let drain_started = Instant::now();
    while drain_started.elapsed() < Duration::from_secs(60) {
        let ends = ends.lock().unwrap();
        if created.iter().all(|n| ends.contains_key(n)) {
            break;
        }
        drop(ends);
        std::thread::sleep(Duration::from_millis(500));
    }

    println!("-- memory (RSS) --");
    for (what, s) in &rss {
        s.report(what);
    }
    agents_rss.report("agent (mean of pods)");

    println!("-- scaling --");
    let changes = changes.lock().unwrap().clone();
    let after_first = changes
        .iter()
        .filter(|(t, _)| t.duration_since(soak_started) > Duration::from_secs(60))
        .count();
    let per10 = after_first as f64 / ((minutes - 1.0).max(0.1) / 10.0);
    println!(
        "replica changes after minute 1: {after_first} ({per10:.1} per 10 min); replicas went {:?}",
        changes.iter().map(|(_, r)| *r).collect::<Vec<_>>()
    );

    println!("-- tasks --");
    let ends = ends.lock().unwrap().clone();
    // A task deleted before this watch saw it end is found in the pool's
    // history (its record says how it ended).
    let history = rt.block_on(async {
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), NS);
        cms.get_opt(&format!("agentdeck-task-history-{POOL}"))
            .await
            .ok()
            .flatten()
    });
    let mut lost = Vec::new();
    let mut twice = Vec::new();
    let (mut ok, mut failed) = (0, 0);
    for name in &created {
        let end = ends.get(name).copied().or_else(|| {
            history
                .as_ref()
                .and_then(|h| agentdeck::controller::retention::record_in(h, name))
                .map(|r| (r.phase, r.attempts))
        });
        match end {
            None => lost.push(name.clone()),
            Some((phase, attempts)) => {
                if attempts > 1 {
                    twice.push(format!("{name} ({attempts} attempts)"));
                }
                if phase == TaskPhase::Succeeded {
                    ok += 1;
                } else {
                    failed += 1;
                }
            }
        }
    }
    println!(
        "created {}; seen finished {} ({ok} succeeded, {failed} not); lost {} {:?}; run more than once {} {:?}",
        created.len(),
        ok + failed,
        lost.len(),
        lost.iter().take(5).collect::<Vec<_>>(),
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>()
    );
    let (left_old, left) = rt.block_on(async {
        let all = tasks
            .list(&ListParams::default())
            .await
            .expect("tasks")
            .items;
        let now = jiff::Timestamp::now();
        let old = all
            .iter()
            .filter(|t| {
                agentdeck::plan::retention::ended_at(t).is_some_and(|e| {
                    t.status.as_ref().is_some_and(|s| s.phase.is_finished())
                        && now.duration_since(e).as_secs() > 100
                })
            })
            .count();
        (old, all.len())
    });
    println!("tasks left in the API: {left}; finished more than 100 s ago: {left_old}");

    println!("-- the view against the API --");
    let (running, health) = rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let running: BTreeSet<String> = pods
            .list(&ListParams::default().labels(&format!("agentdeck.dev/pool={POOL}")))
            .await
            .expect("pods")
            .items
            .into_iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .map(|p| p.name_any())
            .collect();
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), NS);
        let health = pools
            .get(POOL)
            .await
            .ok()
            .and_then(|p| p.status)
            .map(|s| serde_json::to_value(&s).unwrap_or_default());
        (running, health)
    });
    println!(
        "API: {} running agent pods; pool status health: {}",
        running.len(),
        health
            .as_ref()
            .map(|h| format!(
                "fresh {} stale {} offline {}",
                h.pointer("/health/fresh").cloned().unwrap_or_default(),
                h.pointer("/health/stale").cloned().unwrap_or_default(),
                h.pointer("/health/offline").cloned().unwrap_or_default()
            ))
            .unwrap_or_else(|| "-".into())
    );
    console.send("2");
    std::thread::sleep(Duration::from_secs(3));
    let screen = console.screen();
    let shown: BTreeSet<String> = screen
        .split_whitespace()
        // A row's first cell sits against the table's border.
        .map(|w| w.trim_matches(|c| c == '│' || c == '…'))
        .filter(|w| w.starts_with(&format!("iac-agent-{POOL}-")))
        .map(str::to_owned)
        .collect();
    let unmatched_api: Vec<&String> = running
        .iter()
        .filter(|p| !shown.iter().any(|s| p.starts_with(s.as_str())))
        .collect();
    let unmatched_view: Vec<&String> = shown
        .iter()
        .filter(|s| !running.iter().any(|p| p.starts_with(s.as_str())))
        .collect();
    let header = screen.lines().next().unwrap_or_default().trim().to_owned();
    println!(
        "console: {} agent rows; API pods not shown {:?}; rows not in the API {:?}; header: {header}",
        shown.len(),
        unmatched_api,
        unmatched_view
    );
    observer_cancel.cancel();
    let o = observed.lock().unwrap();
    println!(
        "incremental rows vs fresh build: {} checks, {} differed ({} not compared: the view never held still; {} re-read as it moved; {} whole task lists taken; largest {} tasks, {} agents)",
        o.checks, o.differed, o.skipped, o.reread, o.task_lists, o.largest.0, o.largest.1
    );
    println!(
        "pool index vs a filter over the store: {} checks, {} differed",
        o.checks, o.index_differed
    );
    if let Some(first) = &o.first {
        println!("first difference: {first}");
    }
    drop(o);
    println!(
        "(logs in {}; kept while this process runs)",
        dir.path().display()
    );
    drop(console);
    drop(daemon);
    drop(sandbox);
}

/// What the in-process observer found.
#[derive(Default)]
struct Observed {
    checks: u32,
    differed: u32,
    index_differed: u32,
    skipped: u32,
    reread: u32,
    task_lists: u32,
    largest: (usize, usize),
    first: Option<String>,
}

/// Every ~10 s until `cancel`: the rows built incrementally (updated every
/// 200 ms from the view's change feeds, as the console does) against a
/// fresh build of the same stores at the same instant, and each pool's
/// index against a filter over its store. The delta and the stores are
/// read back to back, again if the view moved meanwhile (the change
/// count); a difference is counted once it stays over three reads.
async fn observe(
    client: Client,
    out: Arc<Mutex<Observed>>,
    cancel: tokio_util::sync::CancellationToken,
) {
    use agentdeck::app::rows::{Changes, RowBuilder, Snapshot};
    use agentdeck::controller::{self, StartOptions};
    let config = agentdeck::config::Config {
        controller_namespace: NS.into(),
        ..agentdeck::config::Config::default()
    };
    let handle = controller::start_with(
        agentdeck::cluster::Connection {
            client,
            namespace: NS.into(),
            streams: None,
        },
        &config,
        StartOptions {
            watch_only: true,
            all_namespaces: false,
            ..StartOptions::default()
        },
        cancel.clone(),
    );
    let view = handle.view();
    let thresholds = controller::prober::thresholds(&config.health_probe);
    // Short, so that tasks pass it (the rows follow the clock too).
    let long = Duration::from_secs(4);
    let events = kube::runtime::reflector::store::<agentdeck::cluster::event::CachedEvent>().0;
    let told = agentdeck::tui::ViewChanges::new(view.clone(), events.clone(), Default::default());
    let mut builder = RowBuilder::flagging_long_running(long);
    let update = |builder: &mut RowBuilder, now| -> Snapshot {
        let delta = told.take();
        if matches!(delta.tasks, Changes::All(_)) {
            out.lock().unwrap().task_lists += 1;
        }
        builder.update(delta, now, &thresholds)
    };
    let mut next_check = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cancel.is_cancelled() {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if !handle.is_synced() || tokio::time::Instant::now() < next_check {
            update(&mut builder, jiff::Timestamp::now());
            continue;
        }
        next_check = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut mismatches = 0;
        let mut done = false;
        for _ in 0..100 {
            let before = view.changes.count();
            let now = jiff::Timestamp::now();
            let incremental = update(&mut builder, now);
            let src = agentdeck::tui::sources(&view, &events);
            let (by_index, by_filter) = pool_indexes(&view, &src);
            if view.changes.count() != before {
                out.lock().unwrap().reread += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let fresh = RowBuilder::flagging_long_running(long).build(&src, now, &thresholds);
            let same = incremental == fresh && by_index == by_filter;
            if !same && mismatches < 2 {
                mismatches += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let mut o = out.lock().unwrap();
            o.checks += 1;
            o.largest = o.largest.max((fresh.tasks.len(), fresh.agents.len()));
            if incremental != fresh {
                o.differed += 1;
                if o.first.is_none() {
                    o.first = Some(format!(
                        "rows at {now}: {}",
                        first_difference(&incremental, &fresh)
                    ));
                }
            }
            if by_index != by_filter {
                o.index_differed += 1;
                if o.first.is_none() {
                    o.first = Some(format!("pool index {by_index:?} vs filter {by_filter:?}"));
                }
            }
            done = true;
            break;
        }
        if !done {
            out.lock().unwrap().skipped += 1;
        }
    }
    handle.join().await;
}

/// A pool, its tasks and pods, then its tasks and pods again (the index's
/// names, then the objects read through them; twice the filter's).
type PoolNames = (String, Vec<String>, Vec<String>, Vec<String>, Vec<String>);

/// Each pool's (tasks, pods) by the view's pool index and by a filter
/// over the stores read in `src`.
fn pool_indexes(
    view: &agentdeck::cluster::ClusterView,
    src: &agentdeck::app::rows::Sources,
) -> (Vec<PoolNames>, Vec<PoolNames>) {
    use agentdeck::crd::LABEL_POOL;
    use agentdeck::plan::manifests::label_value;
    let mut pools: Vec<String> = src
        .pools
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .chain(src.tasks.iter().map(|t| t.spec.pool.clone()))
        .collect();
    pools.sort();
    pools.dedup();
    let mut by_index = Vec::new();
    let mut by_filter = Vec::new();
    for pool in pools {
        let label = label_value(&pool);
        by_index.push((
            pool.clone(),
            // The index's names (one left behind by a relist shows here),
            // then the objects `pool_tasks`/`pool_pods` read through them.
            view.by_pool.tasks.names(NS, &pool),
            view.by_pool.pods.names(NS, &label),
            view.pool_tasks(NS, &pool)
                .iter()
                .map(|t| t.name_any())
                .collect(),
            view.pool_pods(NS, &label)
                .iter()
                .map(|p| p.name_any())
                .collect(),
        ));
        let mut tasks: Vec<String> = src
            .tasks
            .iter()
            .filter(|t| t.spec.pool == pool && t.namespace().as_deref() == Some(NS))
            .map(|t| t.name_any())
            .collect();
        tasks.sort();
        let mut pods: Vec<String> = src
            .pods
            .iter()
            .filter(|p| {
                p.metadata.labels.as_ref().and_then(|l| l.get(LABEL_POOL)) == Some(&label)
                    && p.namespace().as_deref() == Some(NS)
            })
            .map(|p| p.name_any())
            .collect();
        pods.sort();
        by_filter.push((pool, tasks.clone(), pods.clone(), tasks, pods));
    }
    (by_index, by_filter)
}

/// The first row (or sum) where `a` and `b` differ, both shown.
fn first_difference(
    a: &agentdeck::app::rows::Snapshot,
    b: &agentdeck::app::rows::Snapshot,
) -> String {
    fn rows<R: std::fmt::Debug + PartialEq>(
        what: &str,
        a: &[Arc<R>],
        b: &[Arc<R>],
    ) -> Option<String> {
        if a.len() != b.len() {
            return Some(format!(
                "{what}: {} rows incrementally, {} fresh",
                a.len(),
                b.len()
            ));
        }
        a.iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .map(|i| format!("{what} row {i}: incremental {:?} / fresh {:?}", a[i], b[i]))
    }
    rows("pools", &a.pools, &b.pools)
        .or_else(|| rows("agents", &a.agents, &b.agents))
        .or_else(|| rows("tasks", &a.tasks, &b.tasks))
        .or_else(|| rows("events", &a.events, &b.events))
        .unwrap_or_else(|| format!("task counts {:?} vs {:?}", a.task_counts, b.task_counts))
}
