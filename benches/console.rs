//! Console figures (prints them; asserts nothing):
//!
//! - frame build + render at 160×48 with 1k / 10k / 100k tasks (TestBackend);
//! - a filter keystroke (regex and fuzzy) over 10k and 100k rows, through
//!   `App::update` as the user types, and the snapshot build behind it;
//! - the real binary under tmux against a sandbox in this process holding
//!   10k tasks and 1k agent pods: start → first populated list and key
//!   press → screen changed (p50/p99), each read both through `capture-pane`
//!   and through a tmux control-mode client (no process per poll), the key
//!   press with 2 s of API latency and dropped watches, RSS, and the API
//!   requests it makes while idle; the same key presses answered by a shell
//!   loop that draws the console's own screens at once, for the
//!   measurement's own floor (both ways);
//! - `--demo` start → first full screen;
//! - three contexts in one console (three sandboxes of 10k tasks and 1k
//!   agent pods each): start → first populated list, RSS and key press →
//!   screen changed, beside one context of the same; then key press →
//!   screen changed with one of the three stopped;
//! - the initial list of those 10k tasks into a store, by agentdeck's
//!   watcher (next page asked for while one decodes) and kube-runtime's.
//!
//! ```text
//! cargo bench --bench console
//! AGENTDECK_BENCH_QUICK=1 cargo bench --bench console   # in-process figures only
//! AGENTDECK_BENCH_BINARY_ONLY=1 cargo bench --bench console   # the real binary only
//! AGENTDECK_BENCH_STARTS=5 cargo bench --bench console   # fresh starts measured (3)
//! AGENTDECK_BENCH_BIN=/path/to/agentdeck cargo bench --bench console   # another build
//! AGENTDECK_BENCH_BINARY_ONLY=1 AGENTDECK_BENCH_VS=/a/agentdeck:/b/agentdeck cargo bench --bench console   # start figures of builds taking turns
//! AGENTDECK_BENCH_BINARY_ONLY=1 AGENTDECK_BENCH_LIST_ONLY=1 cargo bench --bench console   # the list only
//! AGENTDECK_BENCH_BINARY_ONLY=1 AGENTDECK_BENCH_FLEET_ONLY=1 cargo bench --bench console   # three contexts only
//! ```

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentdeck::app::rows::{self, Snapshot};
use agentdeck::app::{App, AppOptions, Msg, fixtures};
use agentdeck::crd::{AgentPool, AgentTask};
use agentdeck::health::FreshnessThresholds;
use agentdeck::sandbox::Sandbox;
use agentdeck::ui::{self, Theme};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::{Client, CustomResourceExt};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::json;

use common::{Control, Tmux, binary, ms, percentile, report_latency, rss_mib, rss_split};

fn thresholds() -> FreshnessThresholds {
    FreshnessThresholds {
        stale_after: Duration::from_secs(20),
        offline_after: Duration::from_secs(60),
    }
}

/// Key presses timed per key-latency figure. Of 60 (as until 27 Nov), the
/// p99 was the second slowest press: one stray time slice of the machine
/// moved it by milliseconds. Of 300 (until `bf27bb1`) it was the fourth
/// slowest, and still moved by 2–3 ms from run to run; of 600 it is the
/// seventh.
const KEY_PRESSES: usize = 600;

/// A terminal program that answers each key at once with the console's own
/// screens (`$P` and `$T` hold them, captured with their colours): what
/// tmux and the polling take by themselves for frames of that size.
const FLOOR_LOOP: &str = r#"bash -c 'p=$(<"$P"); t=$(<"$T"); printf "%s" "$p"; while IFS= read -rsn1 k; do if [ "$k" = 3 ]; then printf "%s" "$t"; else printf "%s" "$p"; fi; done'"#;

/// A captured screen (`capture-pane -e`) as one frame to replay: each row
/// placed and cleared first, so no text of the other screen is left over.
fn frame(captured: &str) -> String {
    captured
        .lines()
        .enumerate()
        .map(|(i, l)| format!("\x1b[{};1H\x1b[2K{l}", i + 1))
        .collect()
}

/// CPU time of this thread: what a frame costs, without the time slices
/// other processes get while it runs (the machine is shared).
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

fn key(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}

fn snapshot(tasks: usize) -> (Snapshot, Duration) {
    let now = fixtures::now();
    let src = fixtures::sources(now, tasks);
    let started = Instant::now();
    let snap = rows::build(&src, now, &thresholds());
    (snap, started.elapsed())
}

/// A full build, then the rebuild after one task changed, told as the
/// console's watch feeds tell it (one object in a [`rows::Delta`]), p50
/// over `rounds`.
fn incremental(tasks: usize, rounds: usize) -> (Duration, Duration, usize) {
    let now = fixtures::now();
    let mut src = fixtures::sources(now, tasks);
    let mut builder = rows::RowBuilder::default();
    let started = Instant::now();
    let _ = builder.build(&src, now, &thresholds());
    let full = started.elapsed();
    let mut times = Vec::new();
    let mut rebuilt = 0;
    for round in 0..rounds {
        let t = common::change_a_task(&mut src, round);
        let delta = rows::Delta {
            tasks: rows::Changes::Some(vec![(rows::Keyed::key(&*t), Some(t))]),
            ..rows::Delta::default()
        };
        let started = Instant::now();
        let snap = builder.update(delta, now, &thresholds());
        times.push(started.elapsed());
        rebuilt = builder.rebuilt;
        drop(snap);
    }
    (full, percentile(&mut times, 0.5), rebuilt)
}

/// The rebuild after one agent pod changed (no task did), told as the
/// console's feeds tell it, p50.
fn incremental_agent(tasks: usize, rounds: usize) -> Duration {
    let now = fixtures::now();
    let mut src = fixtures::sources(now, tasks);
    let mut builder = rows::RowBuilder::default();
    let _ = builder.build(&src, now, &thresholds());
    let mut times = Vec::new();
    for round in 0..rounds {
        let mut p = agentdeck::cluster::pod::CachedPod::clone(&src.pods[0]);
        p.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("round".into(), round.to_string());
        let p = Arc::new(p);
        src.pods[0] = p.clone();
        let delta = rows::Delta {
            pods: rows::Changes::Some(vec![(rows::Keyed::key(&*p), Some(p))]),
            ..rows::Delta::default()
        };
        let started = Instant::now();
        let snap = builder.update(delta, now, &thresholds());
        times.push(started.elapsed());
        drop(snap);
    }
    percentile(&mut times, 0.5)
}

/// Three contexts' snapshots merged (`app::fleet::Merger`) after one
/// task of one of them changed, p50 over `rounds`: the work a console over
/// several contexts adds per snapshot.
fn fleet_merge(tasks: usize, rounds: usize) -> (Duration, Duration) {
    let now = fixtures::now();
    let mut src = fixtures::sources(now, tasks);
    let mut builder = rows::RowBuilder::default();
    let first = Arc::new(builder.build(&src, now, &thresholds()));
    let contexts: Vec<String> = (0..3).map(|i| format!("ctx-{i}")).collect();
    let mut merger = agentdeck::app::fleet::Merger::new(&contexts);
    let started = Instant::now();
    for i in 0..3 {
        merger.take(i, first.clone());
    }
    drop(merger.merged());
    let whole = started.elapsed();
    let mut times = Vec::new();
    for round in 0..rounds {
        let t = common::change_a_task(&mut src, round);
        let delta = rows::Delta {
            tasks: rows::Changes::Some(vec![(rows::Keyed::key(&*t), Some(t))]),
            ..rows::Delta::default()
        };
        let snap = Arc::new(builder.update(delta, now, &thresholds()));
        let started = Instant::now();
        merger.take(round % 3, snap);
        let merged = merger.merged();
        times.push(started.elapsed());
        drop(merged);
    }
    (whole, percentile(&mut times, 0.5))
}

fn in_process() {
    println!("== in process (TestBackend, fixture cluster) ==");
    for n in [1_000, 10_000, 100_000] {
        let (whole, one) = fleet_merge(n, 20);
        println!(
            "{n:>7} tasks × 3 contexts: merge of the first three snapshots {} | merge after one task of one context changed p50 {}",
            ms(whole),
            ms(one),
        );
    }
    for n in [1_000, 10_000, 100_000] {
        let (full, one, rebuilt) = incremental(n, 20);
        println!(
            "{n:>7} tasks: snapshot full build {} | rebuild after one task changed p50 {} ({rebuilt} row(s) rebuilt) | after one agent pod changed p50 {}",
            ms(full),
            ms(one),
            ms(incremental_agent(n, 20)),
        );
    }
    let theme = Theme::default();
    for n in [1_000, 10_000, 100_000] {
        let (snap, built) = snapshot(n);
        let mut app = App::new(AppOptions::default(), fixtures::now());
        app.update(Msg::Resize(160, 48));
        let started = Instant::now();
        app.update(Msg::Snapshot(Arc::new(snap)));
        let applied = started.elapsed();
        app.update(key('3'));
        let mut term = Terminal::new(TestBackend::new(160, 48)).expect("terminal");
        let mut frames = Vec::new();
        let mut cpu = Vec::new();
        for i in 0..400 {
            // Move the selection so each frame differs.
            app.update(key(if i % 2 == 0 { 'j' } else { 'k' }));
            let (t, c) = (Instant::now(), thread_cpu());
            term.draw(|f| ui::draw(f, &app, &theme)).expect("draw");
            frames.push(t.elapsed());
            cpu.push(thread_cpu().saturating_sub(c));
        }
        println!(
            "{n:>7} tasks: frame build+render 160x48 wall p50 {} p99 {}, CPU p50 {} p99 {} | snapshot build {} | snapshot applied (sort+filter) {}",
            ms(percentile(&mut frames, 0.5)),
            ms(percentile(&mut frames, 0.99)),
            ms(percentile(&mut cpu, 0.5)),
            ms(percentile(&mut cpu, 0.99)),
            ms(built),
            ms(applied),
        );
    }
    for n in [10_000, 100_000] {
        let (snap, _) = snapshot(n);
        let snap = Arc::new(snap);
        for (label, text) in [("regex", "plan-0[0-9]*1 "), ("fuzzy", "-f pln9")] {
            let mut app = App::new(AppOptions::default(), fixtures::now());
            app.update(Msg::Resize(160, 48));
            app.update(Msg::Snapshot(snap.clone()));
            app.update(key('3'));
            app.update(key('/'));
            let mut per_key = Vec::new();
            for round in 0..5 {
                for c in text.chars() {
                    let t = Instant::now();
                    app.update(key(c));
                    per_key.push(t.elapsed());
                }
                // Clear the input for the next round.
                for _ in 0..text.len() {
                    app.update(Msg::Key(KeyEvent::new(
                        KeyCode::Backspace,
                        KeyModifiers::NONE,
                    )));
                }
                let _ = round;
            }
            println!(
                "{n:>7} rows: filter keystroke ({label}, as typed) p50 {} p99 {} max {}",
                ms(percentile(&mut per_key, 0.5)),
                ms(percentile(&mut per_key, 0.99)),
                ms(per_key.iter().copied().max().unwrap_or_default()),
            );
        }
    }
}

/// The first populated list is on the screen: every task counted, every
/// pool listed, and the header saying the watches have synced (a console
/// whose controller never syncs has not started).
fn first_list_shown(has: impl Fn(&str) -> bool) -> bool {
    has("3:tasks 10000") && has("Pools [10/10]") && has("watch synced")
}

/// Start → first populated list read through a control-mode client: the
/// pane starts idle, the client respawns it with `cmd` and polls the
/// screen over its pipe. `capture-pane` in a loop spawns a process per
/// poll, which takes most of a core from the console and the API while
/// they start; this reading leaves them the machine.
/// Start → first populated list of several builds on the same sandbox,
/// their starts taking turns (each build once a round,
/// `AGENTDECK_BENCH_STARTS` rounds), so the machine's load moves all alike.
fn starts_side_by_side(bins: &[&str], command: &dyn Fn(&str) -> String) {
    let rounds: usize = std::env::var("AGENTDECK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut firsts = vec![Vec::new(); bins.len()];
    let mut rsss = vec![Vec::new(); bins.len()];
    for round in 0..rounds {
        for (i, bin) in bins.iter().enumerate() {
            let t = Tmux::start(&command(bin), 160, 48);
            let first = t.until(Duration::from_secs(60), |s| {
                first_list_shown(|x| s.contains(x))
            });
            std::thread::sleep(Duration::from_secs(5));
            let rss = t.pid().and_then(rss_mib);
            println!(
                "  round {}/{rounds}, {bin}: first populated list {}, RSS 5 s later {} ({})",
                round + 1,
                first.map_or_else(|| "not reached in 60 s".into(), ms),
                rss.map_or_else(|| "unknown".into(), |r| format!("{r:.1} MiB")),
                t.pid().map_or_else(String::new, rss_split)
            );
            firsts[i].extend(first);
            rsss[i].extend(rss);
            drop(t);
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    for (i, bin) in bins.iter().enumerate() {
        let f = &mut firsts[i];
        if f.is_empty() {
            println!("start → first populated list (10k tasks), {bin}: not reached in 60 s");
            continue;
        }
        let r = &mut rsss[i];
        r.sort_by(f64::total_cmp);
        println!(
            "start → first populated list (10k tasks), {bin}, {} starts taking turns: median {} (min {}, max {}); RSS median {:.1} MiB",
            f.len(),
            ms(percentile(f, 0.5)),
            ms(f[0]),
            ms(f[f.len() - 1]),
            r.get(r.len() / 2).copied().unwrap_or(f64::NAN),
        );
    }
}

fn control_first_list(cmd: &str, starts: usize) {
    let mut firsts = Vec::new();
    for _ in 0..starts {
        let t = Tmux::start("sleep 600", 160, 48);
        let Some(mut c) = Control::attach(&t) else {
            println!("(tmux control mode unavailable: no control-mode figure)");
            return;
        };
        let started = Instant::now();
        let _ = c.command(&format!("respawn-pane -k -t b '{cmd}'"));
        if c.until(Duration::from_secs(60), |has| first_list_shown(has))
            .is_some()
        {
            firsts.push(started.elapsed());
        }
        drop(c);
        drop(t);
        std::thread::sleep(Duration::from_secs(1));
    }
    if firsts.is_empty() {
        println!(
            "start → first populated list (10k tasks), tmux control mode: not reached in 60 s"
        );
        return;
    }
    let median = percentile(&mut firsts, 0.5);
    println!(
        "start → first populated list (10k tasks, tmux control mode, no process per poll), {} fresh starts: median {} (min {}, max {})",
        firsts.len(),
        ms(median),
        ms(firsts[0]),
        ms(firsts[firsts.len() - 1]),
    );
}

/// Key latency through a control-mode client attached for the measurement
/// alone: tmux stops reading a pane whose output an attached control client
/// has not read, so a client left attached would freeze the console's
/// terminal in the phases that do not read it (and tmux cuts such a client
/// loose after 5 minutes).
fn control_latency(t: &Tmux, what: &str) {
    match Control::attach(t) {
        Some(mut c) => {
            report_latency(what, c.key_latency(KEY_PRESSES));
        }
        None => println!("(tmux control mode unavailable: no control-mode figure)"),
    }
}

async fn fill(client: &Client, tasks: usize, agents: usize) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [AgentPool::crd(), AgentTask::crd()] {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd");
    }
    let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
    for i in 0..10 {
        let p: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": format!("pool-{i}")},
            "spec": {"image": "example.com/sim:1", "minReplicas": 0, "maxReplicas": 0}
        }))
        .expect("pool");
        pools
            .create(&PostParams::default(), &p)
            .await
            .expect("pool");
    }
    let task_api: Api<AgentTask> = Api::namespaced(client.clone(), "default");
    futures::stream::iter(0..tasks)
        .map(|i| {
            let api = task_api.clone();
            async move {
                let t: AgentTask = serde_json::from_value(json!({
                    "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                    "metadata": {"name": format!("task-{i:06}")},
                    "spec": {"pool": format!("pool-{}", i % 10), "command": ["true"]}
                }))
                .expect("task");
                api.create(&PostParams::default(), &t).await.expect("task");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    futures::stream::iter(0..agents)
        .map(|i| {
            let api = pod_api.clone();
            async move {
                let p: Pod = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("iac-agent-pool-{}-{i:04}", i % 10), "labels": {
                        "app.kubernetes.io/managed-by": "agentdeck",
                        "app.kubernetes.io/component": "agent",
                        "agentdeck.dev/pool": format!("pool-{}", i % 10)},
                        "annotations": {"sandbox.agentdeck.dev/simulate": "true"}},
                    "spec": {"containers": [{"name": "agent", "image": "example.com/sim:1"}]}
                }))
                .expect("pod");
                api.create(&PostParams::default(), &p).await.expect("pod");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// The initial list of the 10k tasks into a store, as the console's watch
/// does it (pages asked for one ahead) and as kube-runtime's watcher does
/// (one after another), alternately, from a runtime of its own (two
/// workers, as the console's) beside the sandbox's.
fn initial_list(sb: &Sandbox) {
    use agentdeck::cluster::listwatch;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let api: Api<AgentTask> = {
        let _g = rt.enter();
        Api::namespaced(sb.client().expect("client"), "default")
    };
    let list = |pipelined: bool| -> Duration {
        let api = api.clone();
        // Spawned, as the console's watches are: polled by a worker.
        let listed = rt.spawn(async move {
            let started = Instant::now();
            let (reader, writer) = reflector::store();
            let events = if pipelined {
                listwatch::watcher(api, watcher::Config::default()).boxed()
            } else {
                watcher(api, watcher::Config::default()).boxed()
            };
            let mut events = events.reflect(writer);
            while let Some(e) = events.next().await {
                if matches!(e, Ok(watcher::Event::InitDone)) {
                    break;
                }
            }
            let took = started.elapsed();
            assert_eq!(reader.state().len(), 10_000, "all tasks listed");
            took
        });
        rt.block_on(listed).expect("the list ran")
    };
    let (mut kube, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        kube.push(list(false));
        ours.push(list(true));
    }
    let figure = |name: &str, samples: &mut Vec<Duration>| {
        samples.sort();
        println!(
            "  {name}: median {} (min {}, max {})",
            ms(percentile(samples, 0.5)),
            ms(samples[0]),
            ms(samples[samples.len() - 1])
        );
    };
    println!("initial list of 10k tasks into a store (500 a page), 10 lists each, alternating:");
    figure("kube-runtime watcher, pages one after another", &mut kube);
    figure(
        "agentdeck's watcher, next page asked for while one decodes",
        &mut ours,
    );
}

fn real_binary() {
    let bin = binary();
    if !std::path::Path::new(&bin).exists() {
        println!("(skipping the real-binary figures: build {bin} first: cargo build --release)");
        return;
    }
    println!("== the real binary under tmux ({bin}) ==");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sb = rt.block_on(Sandbox::start(0, 3)).expect("sandbox");
    let client = {
        let _g = rt.enter();
        sb.client().expect("client")
    };
    let filled = Instant::now();
    rt.block_on(fill(&client, 10_000, 1_000));
    println!(
        "(sandbox filled with 10,000 tasks and 1,000 agent pods in {:.1} s)",
        filled.elapsed().as_secs_f64()
    );
    initial_list(&sb);
    if std::env::var_os("AGENTDECK_BENCH_LIST_ONLY").is_some() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, sb.kubeconfig("default")).expect("kubeconfig");
    let command = |bin: &str| {
        format!(
            "env HOME={d} XDG_CONFIG_HOME={d} KUBECONFIG={k} AGENTDECK_LEADER_ELECTION__ENABLED=false {bin}",
            d = dir.path().display(),
            k = kc.display()
        )
    };
    let cmd = command(&bin);
    if let Ok(others) = std::env::var("AGENTDECK_BENCH_VS") {
        let mut bins = vec![bin.as_str()];
        bins.extend(others.split(':').filter(|b| !b.is_empty()));
        starts_side_by_side(&bins, &command);
        return;
    }
    // Fresh starts, each measured alone: both figures move with the
    // machine's load, so one run says little.
    let starts: usize = std::env::var("AGENTDECK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut firsts = Vec::new();
    let mut rsss = Vec::new();
    for i in 0..starts {
        let t = Tmux::start(&cmd, 160, 48);
        let first = t.until(Duration::from_secs(60), |s| {
            first_list_shown(|x| s.contains(x))
        });
        // What it holds once the initial reconciles settled.
        std::thread::sleep(Duration::from_secs(5));
        let rss = t.pid().and_then(rss_mib);
        println!(
            "  start {}/{starts}: first populated list {}, RSS 5 s later {} ({})",
            i + 1,
            first.map_or_else(|| "not reached in 60 s".into(), ms),
            rss.map_or_else(|| "unknown".into(), |r| format!("{r:.1} MiB")),
            t.pid().map_or_else(String::new, rss_split)
        );
        firsts.extend(first);
        rsss.extend(rss);
        drop(t);
        std::thread::sleep(Duration::from_secs(1));
    }
    if !firsts.is_empty() {
        rsss.sort_by(f64::total_cmp);
        println!(
            "start → first populated list (10k tasks), {} fresh starts: median {} (min {}, max {}); RSS median {:.1} MiB (min {:.1}, max {:.1})",
            firsts.len(),
            ms(percentile(&mut firsts, 0.5)),
            ms(firsts[0]),
            ms(firsts[firsts.len() - 1]),
            rsss.get(rsss.len() / 2).copied().unwrap_or(f64::NAN),
            rsss.first().copied().unwrap_or(f64::NAN),
            rsss.last().copied().unwrap_or(f64::NAN),
        );
    }
    control_first_list(&cmd, starts);
    sb.api().faults.reset_requests();
    let t = Tmux::start(&cmd, 160, 48);
    let first = t.until(Duration::from_secs(60), |s| {
        first_list_shown(|x| s.contains(x))
    });
    println!(
        "start → first populated list (10k tasks): {}",
        first.map_or_else(|| "not reached in 60 s".into(), ms)
    );
    // What it took from the API meanwhile: list pages and log streams.
    let reqs = sb.api().faults.requests();
    let count = |f: &dyn Fn(&str) -> bool| -> u64 {
        reqs.iter().filter(|(k, _)| f(k)).map(|(_, v)| v).sum()
    };
    println!(
        "  requests until then: {} in all; AgentTask list pages {}, pod list pages {}, log streams {}",
        count(&|_| true),
        count(&|k| k.starts_with("GET ") && k.ends_with("/agenttasks")),
        count(&|k| k.starts_with("GET ") && k.ends_with("/pods")),
        count(&|k| k.starts_with("GET ") && k.ends_with("/log")),
    );
    // Let the initial reconciles settle.
    std::thread::sleep(Duration::from_secs(3));
    t.send("3");
    t.until(Duration::from_secs(10), |s| {
        s.contains("Tasks [10000/10000]")
    });
    t.send("1");
    report_latency(
        "key press → screen changed (10k tasks, tmux capture-pane)",
        t.key_latency(KEY_PRESSES),
    );
    control_latency(
        &t,
        "key press → screen changed (10k tasks, tmux control mode, no process per poll)",
    );
    if let Some(pid) = t.pid() {
        println!(
            "console RSS with 10k tasks and 1k agent pods: {:.1} MiB",
            rss_mib(pid).unwrap_or(f64::NAN)
        );
    }
    // Idle traffic: what the console asks while nothing changes.
    sb.api().faults.reset_requests();
    std::thread::sleep(Duration::from_secs(15));
    let reqs = sb.api().faults.requests();
    let lists: u64 = reqs
        .iter()
        .filter(|(k, _)| k.starts_with("GET ") && !k.contains("/version"))
        .map(|(_, v)| v)
        .sum();
    let total: u64 = reqs.values().sum();
    println!(
        "idle API requests over 15 s: {total} in all, {lists} lists/gets besides /version; by kind: {reqs:?}"
    );
    // Slow API: 2 s on every request, watches dropped.
    sb.api().faults.set_latency(Duration::from_secs(2));
    sb.api().faults.drop_watches();
    report_latency(
        "key press → screen changed with 2 s API latency and dropped watches",
        t.key_latency(KEY_PRESSES),
    );
    control_latency(&t, "same, tmux control mode");
    sb.api().faults.set_latency(Duration::ZERO);
    // The console's two screens, for the floor below to replay.
    let mut screens = Vec::new();
    for (k, want) in [("1", "Pools ["), ("3", "Tasks [")] {
        t.send(k);
        t.until(Duration::from_secs(10), |s| s.contains(want));
        let path = dir.path().join(format!("screen-{k}"));
        std::fs::write(&path, frame(&t.capture(true))).expect("screen");
        screens.push(path);
    }
    drop(t);
    // The server on the same socket must be gone before the next starts.
    std::thread::sleep(Duration::from_secs(1));
    // The measurement's own floor: the same presses answered by a shell
    // loop that draws the console's screens at once (builtins only), the
    // sandbox still running.
    let floor = Tmux::start(
        &format!(
            "env P={} T={} {FLOOR_LOOP}",
            screens[0].display(),
            screens[1].display()
        ),
        160,
        48,
    );
    floor.until(Duration::from_secs(10), |s| s.contains("Pools ["));
    report_latency(
        "key press → screen changed, a shell loop drawing the console's screens in its place (the measurement's floor)",
        floor.key_latency(KEY_PRESSES),
    );
    control_latency(&floor, "same floor, tmux control mode");
    drop(floor);
    rt.block_on(sb.stop());

    let cmd = format!(
        "env HOME={d} XDG_CONFIG_HOME={d} {bin} --demo",
        d = dir.path().display()
    );
    let t = Tmux::start(&cmd, 120, 35);
    let full = t.until(Duration::from_secs(60), |s| {
        s.contains("Pools [3/3]")
            && s.contains("watch synced")
            && !s.contains("2:agents 0")
            && !s.contains("3:tasks 0")
    });
    println!(
        "--demo start → first full screen (pools, agents, tasks, synced): {}",
        full.map_or_else(|| "not reached in 60 s".into(), ms)
    );
    t.send("q");
    std::thread::sleep(Duration::from_secs(2));
}

/// A console's start → first populated list (`has` says when) and its RSS
/// 5 s later.
fn first_list(cmd: &str, has: &dyn Fn(&str) -> bool) -> (Tmux, Option<Duration>, Option<f64>) {
    let t = Tmux::start(cmd, 160, 48);
    let first = t.until(Duration::from_secs(120), has);
    std::thread::sleep(Duration::from_secs(5));
    let rss = t.pid().and_then(rss_mib);
    (t, first, rss)
}

/// Three contexts in one console against one of the same size.
fn fleet() {
    let bin = binary();
    if !std::path::Path::new(&bin).exists() {
        println!("(skipping the three-context figures: build {bin} first: cargo build --release)");
        return;
    }
    println!(
        "== three contexts in one console: three sandboxes of 10k tasks and 1k agent pods each ({bin}) =="
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sandboxes = Vec::new();
    let mut paths = Vec::new();
    let filled = Instant::now();
    for i in 0..3 {
        let sb = rt.block_on(Sandbox::start(0, 3)).expect("sandbox");
        let client = {
            let _g = rt.enter();
            sb.client().expect("client")
        };
        rt.block_on(fill(&client, 10_000, 1_000));
        let path = dir.path().join(format!("ctx-{i}"));
        std::fs::write(&path, sb.kubeconfig_named("default", &format!("ctx-{i}")))
            .expect("kubeconfig");
        paths.push(path.display().to_string());
        sandboxes.push(sb);
    }
    println!(
        "(three sandboxes filled in {:.1} s)",
        filled.elapsed().as_secs_f64()
    );
    let base = format!(
        "env HOME={d} XDG_CONFIG_HOME={d} KUBECONFIG={k} AGENTDECK_LEADER_ELECTION__ENABLED=false {bin}",
        d = dir.path().display(),
        k = paths.join(":")
    );
    // One context alone, for the comparison.
    let (t, first, rss) = first_list(&format!("{base} --context ctx-0"), &|s| {
        first_list_shown(|x| s.contains(x))
    });
    println!(
        "one context: start → first populated list {}, RSS 5 s later {}",
        first.map_or_else(|| "not reached in 120 s".into(), ms),
        rss.map_or_else(|| "unknown".into(), |r| format!("{r:.1} MiB")),
    );
    t.send("1");
    report_latency(
        "one context: key press → screen changed (tmux capture-pane)",
        t.key_latency(KEY_PRESSES),
    );
    control_latency(&t, "one context: same, tmux control mode");
    drop(t);
    std::thread::sleep(Duration::from_secs(1));
    let three = format!("{base} --context ctx-0 --context ctx-1 --context ctx-2");
    let (t, first, rss) = first_list(&three, &|s| {
        s.contains("3:tasks 30000")
            && s.contains("Pools [30/30]")
            && (0..3).all(|i| s.contains(&format!("ctx-{i} leader synced")))
    });
    println!(
        "three contexts: start → first populated list (30 pools, 30k tasks, each context synced) {}, RSS 5 s later {}",
        first.map_or_else(|| "not reached in 120 s".into(), ms),
        rss.map_or_else(|| "unknown".into(), |r| format!("{r:.1} MiB")),
    );
    t.send("1");
    report_latency(
        "three contexts: key press → screen changed (tmux capture-pane)",
        t.key_latency(KEY_PRESSES),
    );
    control_latency(&t, "three contexts: same, tmux control mode");
    // One of them goes away.
    let gone = sandboxes.pop().expect("a sandbox");
    rt.block_on(gone.stop());
    let down = t.until(Duration::from_secs(60), |s| {
        s.contains("ctx-2 disconnected")
    });
    println!(
        "ctx-2 stopped: shown disconnected after {}",
        down.map_or_else(|| "not within 60 s".into(), ms)
    );
    report_latency(
        "three contexts, one unreachable: key press → screen changed (tmux capture-pane)",
        t.key_latency(KEY_PRESSES),
    );
    control_latency(
        &t,
        "three contexts, one unreachable: same, tmux control mode",
    );
    drop(t);
    for sb in sandboxes {
        rt.block_on(sb.stop());
    }
}

fn main() {
    // The sandbox's containers start through agentdeck's own entry point,
    // never through this harness. Set before any thread exists.
    // SAFETY: single-threaded here; nothing reads the environment concurrently.
    unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    if std::env::var_os("AGENTDECK_BENCH_BINARY_ONLY").is_none() {
        in_process();
    }
    if std::env::var_os("AGENTDECK_BENCH_QUICK").is_none() {
        if std::env::var_os("AGENTDECK_BENCH_FLEET_ONLY").is_none() {
            real_binary();
        }
        if std::env::var_os("AGENTDECK_BENCH_VS").is_none() {
            fleet();
        }
    }
}
