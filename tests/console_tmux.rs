//! The real binary's console under tmux: keys sent with `send-keys`, the
//! screen read with `capture-pane`, every expectation awaited with a
//! deadline. Each test runs its own tmux server (`-L`), killed on drop.

mod common;

use std::process::Command;
use std::time::Duration;

use agentdeck::crd::{AgentPool, AgentTask};
use common::tmux::Tmux;
use common::{TestSandbox, eventually_blocking};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, CustomResourceExt};
use serde_json::json;

#[test]
fn the_demo_opens_on_live_pools_and_a_tasks_logs_are_one_drill_down_away() {
    let t = Tmux::start(&["--demo"], &[], 120, 35);
    let s = t.wait("three pools with agents, synced", |s| {
        s.contains("Pools [3/3]")
            && s.contains("platform")
            && s.contains("batch")
            && s.contains("sandbox-envs")
            && s.contains("watch synced")
            && s.contains("role leader")
    });
    // The demo writes a kubeconfig of its own context, for kubectl beside it.
    let context = s
        .split_whitespace()
        .find(|w| w.starts_with("agentdeck-demo-"))
        .unwrap_or_else(|| panic!("the demo's context in the header: {s}"))
        .to_owned();
    let kubeconfig = std::env::temp_dir().join(format!("{context}.kubeconfig"));
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "agentpools", "-o", "name"])
        .output()
        .expect("kubectl runs");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("agentpool.agentdeck.dev/platform"),
        "{out:?}"
    );
    // Tasks arrive and run.
    t.send(&["3"]);
    t.wait("running and finished tasks", |s| {
        s.contains("Tasks [") && s.contains("Running") && s.contains("Succeeded")
    });
    // Filter as you type: only report tasks stay.
    t.send(&["/"]);
    t.type_text("report");
    let s = t.wait("the filter applied while typing", |s| {
        s.contains("/report")
            && s.lines()
                .filter(|l| l.starts_with('│') && l.contains("-00"))
                .all(|l| l.contains("report-"))
    });
    assert!(s.contains("report-0006"), "{s}");
    t.send(&["Enter"]);
    // The job-mode report task prints 3,000 lines: once it started, Enter
    // opens its Job pod's worker log (the worker prints the runner's
    // output, redacted, with the task's prefix, which the view strips).
    t.wait("report-0006 started", |s| {
        Tmux::row_with(s, "report-0006")
            .is_some_and(|r| r.contains("Running") || r.contains("Succeeded"))
    });
    t.send(&["Enter"]);
    let s = t.wait("the task's log with its lines", |s| {
        s.contains("Logs: task report-0006") && s.contains("aws_s3_object.asset[")
    });
    assert!(s.contains("job report-0006"), "{s}");
    assert!(s.contains("(worker)"), "{s}");
    assert!(
        !s.contains("[report-0006] "),
        "the task's prefix is stripped: {s}"
    );
    // Back to the filtered tasks, then the filter cleared.
    t.send(&["Escape"]);
    t.wait("back in the tasks", |s| {
        s.contains("Tasks [") && s.contains("/report")
    });
    t.send(&["Escape"]);
    t.wait("the filter cleared", |s| {
        s.contains("Tasks [") && !s.contains("/report")
    });
    // Drill from a pool: its tasks only.
    t.send(&["1"]);
    t.wait_for("Pools [3/3]");
    t.send(&["Enter"]);
    let s = t.wait_for("Tasks of pool batch");
    assert!(
        s.lines()
            .filter(|l| l.starts_with('│') && l.contains("-00"))
            .all(|l| l.contains("batch")),
        "{s}"
    );
    // The command bar completes.
    t.send(&[":"]);
    t.type_text("ev");
    t.send(&["Tab", "Enter"]);
    t.wait_for("Events [");
    // An agent pod's YAML is the whole pod, read from the API: the
    // console's cache keeps pods without volumes, env and probes.
    t.send(&["2"]);
    t.wait("agent pods", |s| {
        s.contains("Agents [") && s.contains("Running")
    });
    t.send(&["y"]);
    t.wait_for("apiVersion: v1");
    let mut seen = false;
    for _ in 0..12 {
        let s = t.screen();
        if s.contains("volumeMounts:") {
            seen = true;
            break;
        }
        t.send(&["PageDown"]);
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    assert!(seen, "no volumeMounts in the pod's YAML: {}", t.screen());
    t.send(&["Escape"]);
    t.wait_for("Agents [");
    t.send(&["q"]);
    t.wait_for("EXIT=0");
    assert!(
        !kubeconfig.exists(),
        "the demo's kubeconfig is removed at exit"
    );
}

/// Every process below `pid`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let o = Command::new("pgrep")
            .args(["-P", &p.to_string()])
            .output()
            .expect("pgrep runs");
        for c in String::from_utf8_lossy(&o.stdout).split_whitespace() {
            if let Ok(c) = c.parse() {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

#[test]
fn closing_the_terminal_stops_the_demos_agents_and_removes_its_kubeconfig() {
    let t = Tmux::start(&["--demo"], &[], 100, 30);
    let s = t.wait("the demo's agents", |s| {
        s.contains("watch synced") && s.contains("Pools [3/3]")
    });
    let context = s
        .split_whitespace()
        .find(|w| w.starts_with("agentdeck-demo-"))
        .expect("the demo's context")
        .to_owned();
    let kubeconfig = std::env::temp_dir().join(format!("{context}.kubeconfig"));
    assert!(kubeconfig.exists());
    let o = Command::new("tmux")
        .args(["-L", &t.socket, "list-panes", "-F", "#{pane_pid}"])
        .output()
        .expect("tmux list-panes");
    let shell: u32 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("a pane pid");
    let started = eventually_blocking("the demo's agent processes", || {
        let all = descendants(shell);
        (all.len() >= 3).then_some(all)
    });
    // The window closes: SIGHUP, and a terminal that answers EIO.
    let _ = Command::new("tmux")
        .args(["-L", &t.socket, "kill-server"])
        .status();
    eventually_blocking("every process the demo started gone", || {
        let alive: Vec<u32> = started
            .iter()
            .copied()
            .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
            .filter(|p| {
                // A zombie waits for its parent, it does not run.
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| !s.contains(") Z "))
            })
            .collect();
        alive.is_empty().then_some(())
    });
    assert!(!kubeconfig.exists(), "the demo's kubeconfig is removed");
}

fn sandbox_with_a_pool() -> TestSandbox {
    let sb = TestSandbox::start();
    let client = sb.client();
    sb.rt.block_on(async {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("crd");
        }
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "quiet"},
            "spec": {"image": "example.com/no-agent:1", "minReplicas": 0, "maxReplicas": 2}
        }))
        .expect("pool");
        pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        let tasks: Api<AgentTask> = Api::namespaced(client.clone(), "default");
        for i in 0..5 {
            let task: AgentTask = serde_json::from_value(json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": format!("job-{i}")},
                "spec": {"pool": "quiet", "command": ["true"]}
            }))
            .expect("task");
            tasks
                .create(&PostParams::default(), &task)
                .await
                .expect("task created");
        }
    });
    sb
}

#[test]
fn keys_are_answered_while_the_api_is_slow_and_drops_its_watches() {
    let sb = sandbox_with_a_pool();
    let kubeconfig = sb.kubeconfig.display().to_string();
    let t = Tmux::start(
        &[],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("AGENTDECK_LEADER_ELECTION__ENABLED", "false"),
        ],
        100,
        30,
    );
    t.wait("the pool, synced", |s| {
        s.contains("Pools [1/1]") && s.contains("quiet") && s.contains("watch synced")
    });
    let faults = &sb.sandbox().api().faults;
    faults.set_latency(Duration::from_secs(2));
    faults.drop_watches();
    // Every key is answered from what the console holds.
    for _ in 0..3 {
        t.send(&["3"]);
        t.wait_for("Tasks [5/5]");
        t.send(&["2"]);
        t.wait_for("Agents [");
        t.send(&["1"]);
        t.wait_for("Pools [1/1]");
    }
    t.send(&["3", "/"]);
    t.type_text("job-[0-2]");
    t.wait_for("Tasks [3/5] /job-[0-2]");
    // Slow is not down: the header shows the latency, not a disconnection.
    t.wait("the slow API's latency", |s| {
        s.lines()
            .next()
            .is_some_and(|h| h.contains("api 2") && h.contains("watch synced"))
    });
    faults.set_latency(Duration::ZERO);
    t.send(&["Enter", "q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn with_no_api_the_console_opens_disconnected_and_recovers_when_it_comes_up() {
    // A port nobody listens on (yet).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    // The sandbox's credentials are made now, so the kubeconfig (its CA
    // and token) can name the server before it listens.
    let security = agentdeck::sandbox::auth::Security::generate().expect("credentials");
    std::fs::write(
        &kubeconfig,
        agentdeck::sandbox::kubeconfig_for(
            &format!("https://127.0.0.1:{port}"),
            &security,
            "default",
        )
        .replace(
            "name: agentdeck-sandbox\n  context",
            "name: later\n  context",
        )
        .replace(
            "current-context: agentdeck-sandbox",
            "current-context: later",
        ),
    )
    .expect("kubeconfig");
    let kc = kubeconfig.display().to_string();
    let t = Tmux::start(
        &[],
        &[
            ("KUBECONFIG", &kc),
            ("AGENTDECK_LEADER_ELECTION__ENABLED", "false"),
        ],
        100,
        30,
    );
    let s = t.wait("disconnected with the reason", |s| {
        s.lines()
            .next()
            .is_some_and(|h| h.contains("ctx later") && h.contains("disconnected:"))
    });
    assert!(s.to_lowercase().contains("refused"), "{s}");
    // Keys still work.
    t.send(&["3"]);
    t.wait_for("Tasks [0/0]");
    t.send(&["1"]);
    t.wait_for("Pools [0/0]");
    // The API comes up on that port, with a pool: the console finds it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sandbox = rt
        .block_on(agentdeck::sandbox::Sandbox::start_with(port, 1, security))
        .expect("sandbox on the port");
    let client = {
        let _g = rt.enter();
        sandbox.client().expect("client")
    };
    rt.block_on(async {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("crd");
        }
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), "default");
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "arrived"},
            "spec": {"image": "example.com/no-agent:1", "minReplicas": 0, "maxReplicas": 1}
        }))
        .expect("pool");
        pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
    });
    t.wait("recovered: synced, with the pool", |s| {
        s.contains("watch synced") && s.contains("Pools [1/1]") && s.contains("arrived")
    });
    t.send(&["q"]);
    t.wait_for("EXIT=0");
    rt.block_on(sandbox.stop());
}

#[test]
fn read_only_says_so_and_offers_no_actions() {
    let sb = sandbox_with_a_pool();
    let kubeconfig = sb.kubeconfig.display().to_string();
    let t = Tmux::start(&["--read-only"], &[("KUBECONFIG", &kubeconfig)], 100, 30);
    t.wait("read-only, synced", |s| {
        s.contains("role read-only") && s.contains("watch synced") && s.contains("quiet")
    });
    // `s` (scale) and `d` (drain) are unbound: no dialog opens.
    t.send(&["s", "d", "?"]);
    let s = t.wait_for("Help");
    assert!(!s.contains("scale the pool") && !s.contains("drain"), "{s}");
    t.send(&["x", "q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn a_bad_theme_or_keymap_exits_2_naming_what_is_valid() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .args(args)
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .current_dir(dir.path())
            .output()
            .expect("runs")
    };
    let o = run(&["--theme", "solarized"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("solarized") && err.contains("high-contrast"),
        "{err}"
    );
    let cfg = dir.path().join("agentdeck.yaml");
    std::fs::write(&cfg, "keymap:\n  qiut: x\n").expect("config");
    let o = run(&["--config", cfg.to_str().expect("utf-8 path")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("keymap.qiut") && err.contains("quit"), "{err}");
}

#[test]
fn next_to_a_leading_daemon_the_console_is_an_observer() {
    let sb = sandbox_with_a_pool();
    let client = sb.client();
    let cancel = tokio_util::sync::CancellationToken::new();
    let config = agentdeck::config::Config {
        controller_namespace: "default".into(),
        ..agentdeck::config::Config::default()
    };
    let daemon = {
        let _g = sb.rt.enter();
        agentdeck::controller::start(
            agentdeck::cluster::Connection {
                client,
                namespace: "default".into(),
                streams: None,
            },
            &config,
            cancel.clone(),
        )
    };
    sb.rt
        .block_on(common::eventually("the daemon leads", || async {
            daemon.leader().is_leader().then_some(())
        }));
    let kubeconfig = sb.kubeconfig.display().to_string();
    let t = Tmux::start(
        &[],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("AGENTDECK_CONTROLLER_NAMESPACE", "default"),
        ],
        100,
        30,
    );
    t.wait("observer, synced", |s| {
        s.contains("role observer") && s.contains("watch synced") && s.contains("quiet")
    });
    // The daemon keeps the Lease; the console stays an observer.
    assert!(sb.rt.block_on(async { daemon.leader().is_leader() }));
    t.send(&["q"]);
    t.wait_for("EXIT=0");
    cancel.cancel();
    sb.rt.block_on(daemon.join());
}

#[test]
fn drain_from_the_console_previews_then_reaches_the_api_and_the_audit_trail() {
    let sb = sandbox_with_a_pool();
    let kubeconfig = sb.kubeconfig.display().to_string();
    let state = tempfile::tempdir().expect("state dir");
    let state_dir = state.path().display().to_string();
    let t = Tmux::start(
        &[],
        &[("KUBECONFIG", &kubeconfig), ("XDG_STATE_HOME", &state_dir)],
        110,
        32,
    );
    // Leader or observer alike: an action is an object change.
    t.wait("synced", |s| {
        s.contains("watch synced") && s.contains("quiet")
    });
    // The only pool is selected: `d` asks, and the dialog shows what the
    // API's dry run says once the worker has it.
    t.send(&["d"]);
    t.wait_for("Drain pool quiet");
    let s = t.wait("the preview", |s| {
        s.contains("Preview (dry run):") && !s.contains("asking the API")
    });
    assert!(s.contains("AgentPool/quiet"), "{s}");
    // Nothing is changed by the preview.
    let pools: Api<AgentPool> = Api::namespaced(sb.client(), "default");
    let before = sb.rt.block_on(pools.get("quiet")).expect("pool readable");
    assert!(!before.spec.drain);
    t.send(&["y"]);
    sb.rt.block_on(common::eventually(
        "the pool is drained in the API",
        || async {
            let p = pools.get("quiet").await.ok()?;
            p.spec.drain.then_some(())
        },
    ));
    // An Event on the pool names the operator's drain, as from the CLI.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(sb.client(), "default");
    sb.rt
        .block_on(common::eventually("an OperatorDrained Event", || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("OperatorDrained")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("quiet")
                })
                .then_some(())
        }));
    let audit = state.path().join("agentdeck").join("audit.jsonl");
    let line = eventually_blocking("an audit line for the drain", || {
        let text = std::fs::read_to_string(&audit).ok()?;
        text.lines()
            .find(|l| l.contains("\"action\":\"drain\""))
            .map(str::to_owned)
    });
    let record: serde_json::Value = serde_json::from_str(&line).expect("audit JSON");
    assert_eq!(record["via"], "console", "{line}");
    assert_eq!(record["outcome"], "applied", "{line}");
    assert_eq!(record["namespace"], "default", "{line}");
    // The outcome comes back as a toast naming the change.
    t.wait_for("drain pool quiet: AgentPool/quiet changed");
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}

/// The replicas of the pool's Deployment, once it exists.
fn deployment_replicas(sb: &TestSandbox, pool: &str) -> Option<i32> {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(sb.client(), "default");
    let d = sb
        .rt
        .block_on(deployments.get_opt(&format!("iac-agent-{pool}")))
        .ok()??;
    d.spec?.replicas
}

fn audit_line(path: &std::path::Path, action: &str) -> serde_json::Value {
    let needle = format!("\"action\":\"{action}\"");
    let line = eventually_blocking(&format!("an audit line for {action}"), || {
        let text = std::fs::read_to_string(path).ok()?;
        text.lines()
            .find(|l| l.contains(&needle))
            .map(str::to_owned)
    });
    serde_json::from_str(&line).expect("audit JSON")
}

/// The console on `sb`, its own controller leading, with its audit file
/// under a state directory of its own (returned, with the audit path);
/// returns once the quiet pool's five waiting tasks have had the console's
/// controller scale it to its maximum, 2.
fn console_leading(sb: &TestSandbox, w: u16) -> (Tmux, tempfile::TempDir, std::path::PathBuf) {
    let kubeconfig = sb.kubeconfig.display().to_string();
    let state = tempfile::tempdir().expect("state dir");
    let state_dir = state.path().display().to_string();
    let t = Tmux::start(
        &[],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("XDG_STATE_HOME", &state_dir),
            // The Lease lives where the sandbox has a namespace: the
            // console's own controller leads.
            ("AGENTDECK_CONTROLLER_NAMESPACE", "default"),
        ],
        w,
        32,
    );
    t.wait("leader, synced", |s| {
        s.contains("role leader") && s.contains("watch synced") && s.contains("quiet")
    });
    eventually_blocking("the pool scaled to 2 by the console", || {
        (deployment_replicas(sb, "quiet") == Some(2)).then_some(())
    });
    let audit = state.path().join("agentdeck").join("audit.jsonl");
    (t, state, audit)
}

#[test]
fn as_leader_the_console_drains_and_holds_a_pool_and_carries_both_out() {
    let sb = sandbox_with_a_pool();
    let (t, _state, audit) = console_leading(&sb, 110);
    let pools: Api<AgentPool> = Api::namespaced(sb.client(), "default");

    // Drain: preview, confirm, the pool's spec changes and the console
    // (leading) scales it to zero and says so in the status.
    t.send(&["d"]);
    t.wait_for("Drain pool quiet");
    t.wait("the drain preview", |s| {
        s.contains("Preview (dry run):") && !s.contains("asking the API")
    });
    t.send(&["y"]);
    sb.rt.block_on(common::eventually(
        "the pool drained in spec and status",
        || async {
            let p = pools.get("quiet").await.ok()?;
            (p.spec.drain && p.status?.draining).then_some(())
        },
    ));
    eventually_blocking("the drained pool at 0 replicas", || {
        (deployment_replicas(&sb, "quiet") == Some(0)).then_some(())
    });
    let drain = audit_line(&audit, "drain");
    assert_eq!(drain["via"], "console");
    assert_eq!(drain["outcome"], "applied");

    // Resume, then hold at 1 for 30 minutes through the scale dialog:
    // the hold wins over the 5 pending tasks that want 2.
    t.send(&["d"]);
    t.wait_for("Resume pool quiet");
    t.send(&["y"]);
    eventually_blocking("the resumed pool back at 2", || {
        (deployment_replicas(&sb, "quiet") == Some(2)).then_some(())
    });
    scale_dialog(&t, "quiet", "=1 30m");
    let s = t.wait("the hold's preview", |s| {
        s.contains("hold pool quiet at 1 for 30m")
            && s.contains("Preview (dry run):")
            && !s.contains("asking the API")
    });
    assert!(s.contains("AgentPool/quiet"), "{s}");
    // The preview changed nothing.
    let before = sb.rt.block_on(pools.get("quiet")).expect("pool");
    assert!(before.spec.hold.is_none());
    t.send(&["y"]);
    let held = sb.rt.block_on(common::eventually(
        "the hold in spec and status",
        || async {
            let p = pools.get("quiet").await.ok()?;
            let status = p.status?.hold?;
            (p.spec.hold?.replicas == 1 && status.replicas == 1).then_some(status)
        },
    ));
    assert!(held.until.is_some(), "{held:?}");
    eventually_blocking("the Deployment held at 1", || {
        (deployment_replicas(&sb, "quiet") == Some(1)).then_some(())
    });
    let hold = audit_line(&audit, "hold");
    assert_eq!(hold["via"], "console");
    assert_eq!(hold["outcome"], "applied");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(sb.client(), "default");
    sb.rt
        .block_on(common::eventually("an OperatorHeld Event", || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("OperatorHeld"))
                .then_some(())
        }));

    // The console's audit view lists both, newest first.
    t.send(&[":"]);
    t.type_text("audit");
    t.send(&["Enter"]);
    let s = t.wait("the audit view", |s| {
        s.contains("Audit [") && s.contains("hold") && s.contains("undrain")
    });
    let hold_at = s.find(" hold ").expect("hold row");
    let drain_at = s.find(" drain ").expect("drain row");
    assert!(hold_at < drain_at, "newest first:\n{s}");
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}

/// Narrows the table to the row named `name` with the `/` filter (and
/// waits until it is the only one shown under `title`).
/// Opens the scale dialog on the selected pool, replaces its input with
/// `input` and submits it.
fn scale_dialog(t: &Tmux, pool: &str, input: &str) {
    t.send(&["s"]);
    t.wait_for(&format!("Scale pool {pool}"));
    t.send(&["C-u"]);
    t.type_text(input);
    t.send(&["Enter"]);
}

fn select_only(t: &Tmux, title: &str, name: &str) {
    // `/` opens the filter with the current text: ctrl-u clears it.
    t.send(&["/"]);
    t.send(&["C-u"]);
    t.type_text(name);
    t.send(&["Enter"]);
    t.wait(&format!("{title} narrowed to {name}"), |s| {
        s.contains(&format!("{title} [1/")) && s.contains(name)
    });
}

#[test]
fn as_leader_the_console_sets_bounds_debug_logs_cancels_retries_and_drains_an_agent() {
    let sb = sandbox_with_a_pool();
    let tasks: Api<AgentTask> = Api::namespaced(sb.client(), "default");
    // One task failed earlier: the one to retry.
    sb.rt
        .block_on(tasks.patch_status(
            "job-4",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {
                "phase": "Failed", "attempts": 1, "exitCode": 1, "message": "exit code 1"
            }})),
        ))
        .expect("job-4 failed");
    let (t, _state, audit) = console_leading(&sb, 120);
    let pools: Api<AgentPool> = Api::namespaced(sb.client(), "default");

    // Bounds through the scale dialog: 1-3, previewed, then carried out by
    // the console's controller (4 pending tasks want 3 now).
    scale_dialog(&t, "quiet", "1-3");
    t.wait("the bounds' preview", |s| {
        s.contains("scale pool quiet to 1–3")
            && s.contains("Preview (dry run):")
            && !s.contains("asking the API")
    });
    let before = sb.rt.block_on(pools.get("quiet")).expect("pool");
    assert_eq!(
        (before.spec.min_replicas, before.spec.max_replicas),
        (0, 2),
        "the preview changed nothing"
    );
    t.send(&["y"]);
    sb.rt
        .block_on(common::eventually("bounds 1-3 in the spec", || async {
            let p = pools.get("quiet").await.ok()?;
            (p.spec.min_replicas == 1 && p.spec.max_replicas == 3).then_some(())
        }));
    eventually_blocking("the Deployment at the new maximum, 3", || {
        (deployment_replicas(&sb, "quiet") == Some(3)).then_some(())
    });
    assert_eq!(audit_line(&audit, "scale")["via"], "console");

    // Debug logs of the pool, on.
    t.send(&["C-g"]);
    t.wait_for("Debug logs on for pool quiet");
    t.wait("the debug-logs preview", |s| {
        s.contains("Preview (dry run):") && !s.contains("asking the API")
    });
    t.send(&["y"]);
    sb.rt
        .block_on(common::eventually("spec.debug on", || async {
            pools.get("quiet").await.ok()?.spec.debug.then_some(())
        }));
    assert_eq!(audit_line(&audit, "debug-logs-on")["outcome"], "applied");

    // Cancel one pending task from the tasks view: the leader ends it.
    t.send(&["3"]);
    t.wait_for("Tasks [");
    select_only(&t, "Tasks", "job-1");
    t.send(&["C-k"]);
    t.wait_for("Cancel 1 task(s)");
    t.wait("the cancel preview", |s| {
        s.contains("AgentTask/job-1") && !s.contains("asking the API")
    });
    t.send(&["y"]);
    sb.rt
        .block_on(common::eventually("job-1 Cancelled", || async {
            let task = tasks.get("job-1").await.ok()?;
            let phase = task.status?.phase;
            (task.spec.cancel && phase == agentdeck::crd::TaskPhase::Cancelled).then_some(())
        }));
    assert_eq!(audit_line(&audit, "cancel")["via"], "console");

    // Retry the failed one: Pending again, its first run kept in history.
    select_only(&t, "Tasks", "job-4");
    t.send(&["r"]);
    t.wait_for("Retry 1 task(s)");
    t.wait("the retry preview", |s| {
        s.contains("AgentTask/job-4") && !s.contains("asking the API")
    });
    t.send(&["y"]);
    sb.rt
        .block_on(common::eventually("job-4 Pending with history", || async {
            let status = tasks.get("job-4").await.ok()?.status?;
            (status.phase == agentdeck::crd::TaskPhase::Pending && status.history.len() == 1)
                .then_some(())
        }));
    assert_eq!(audit_line(&audit, "retry")["outcome"], "applied");

    // Drain one agent from the agents view: its pod carries the annotation.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(sb.client(), "default");
    let agent = sb
        .rt
        .block_on(pods.list(&kube::api::ListParams::default().labels("agentdeck.dev/pool=quiet")))
        .expect("agent pods")
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .min()
        .expect("an agent pod");
    t.send(&["2"]);
    t.wait_for(&agent);
    select_only(&t, "Agents", &agent);
    t.send(&["d"]);
    t.wait_for(&format!("Drain agent {agent}"));
    t.wait("the agent drain preview", |s| {
        s.contains(&format!("Pod/{agent}")) && !s.contains("asking the API")
    });
    t.send(&["y"]);
    sb.rt.block_on(common::eventually(
        "the agent's drain annotation",
        || async {
            let pod = pods.get(&agent).await.ok()?;
            let value = pod
                .metadata
                .annotations?
                .get(agentdeck::crd::ANNOTATION_DRAIN)?
                .clone();
            (value == "true").then_some(())
        },
    ));
    let drain = audit_line(&audit, "drain");
    assert_eq!(drain["via"], "console");
    assert!(drain.to_string().contains(&agent), "{drain}");
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn b_writes_a_bundle_of_the_pool_and_shift_d_makes_a_debug_pod() {
    let sb = sandbox_with_a_pool();
    let kubeconfig = sb.kubeconfig.display().to_string();
    let t = Tmux::start(
        &[],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("AGENTDECK_CONTROLLER_NAMESPACE", "default"),
        ],
        160,
        32,
    );
    t.wait("leader, synced", |s| {
        s.contains("role leader") && s.contains("watch synced") && s.contains("quiet")
    });
    // The pool's agents run (simulated): a debug pod copies one.
    t.send(&["2"]);
    let s = t.wait("an agent running", |s| {
        s.lines()
            .any(|l| l.contains("iac-agent-quiet") && l.contains("Running"))
    });
    assert!(s.contains("Agents ["), "{s}");
    t.send(&["D"]);
    t.wait_for("Debug pod of iac-agent-quiet");
    t.send(&["y"]);
    let s = t.wait_for("debug pod debug-iac-agent-quiet");
    assert!(s.contains("kubectl exec -it"), "{s}");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(sb.client(), "default");
    let made = sb
        .rt
        .block_on(common::eventually("the debug pod in the API", || async {
            let list = agentdeck::ops::debug::list(&sb.client(), "default")
                .await
                .ok()?;
            list.into_iter().next()
        }));
    assert!(made.expires_at.is_some(), "{made:?}");
    assert!(
        sb.rt
            .block_on(pods.get_opt(&made.name))
            .expect("get")
            .is_some()
    );

    // `b` in the pools view: a bundle of the selected pool, its gauge fed
    // by the collector's progress, and the zip's path in a toast; its
    // name says the pool, as the CLI's does.
    t.send(&["1", "b"]);
    t.wait_for("bundle written:");
    let dir = t._dir.path().to_owned();
    let zip = eventually_blocking("the zip in the console's directory", || {
        std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.extension().is_some_and(|x| x == "zip")
                    && p.file_name().is_some_and(|n| {
                        n.to_string_lossy()
                            .starts_with("agentdeck-bundle-default-quiet-")
                    })
            })
    });
    let file = std::fs::File::open(&zip).expect("zip");
    let mut archive = zip::ZipArchive::new(file).expect("a complete zip");
    let manifest = archive.by_name("manifest.json").expect("manifest");
    let manifest: serde_json::Value = serde_json::from_reader(manifest).expect("json");
    assert_eq!(manifest["pool"], "quiet", "{manifest}");
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn as_observer_the_console_holds_a_pool_and_the_leading_daemon_carries_it_out() {
    let sb = sandbox_with_a_pool();
    let cancel = tokio_util::sync::CancellationToken::new();
    let config = agentdeck::config::Config {
        controller_namespace: "default".into(),
        ..agentdeck::config::Config::default()
    };
    let daemon = {
        let _g = sb.rt.enter();
        agentdeck::controller::start(
            agentdeck::cluster::Connection {
                client: sb.client(),
                namespace: "default".into(),
                streams: None,
            },
            &config,
            cancel.clone(),
        )
    };
    sb.rt
        .block_on(common::eventually("the daemon leads", || async {
            daemon.leader().is_leader().then_some(())
        }));
    eventually_blocking("the daemon scales the pool to 2", || {
        (deployment_replicas(&sb, "quiet") == Some(2)).then_some(())
    });
    let kubeconfig = sb.kubeconfig.display().to_string();
    let state = tempfile::tempdir().expect("state dir");
    let state_dir = state.path().display().to_string();
    let t = Tmux::start(
        &[],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("XDG_STATE_HOME", &state_dir),
            ("AGENTDECK_CONTROLLER_NAMESPACE", "default"),
        ],
        110,
        32,
    );
    t.wait("observer, synced", |s| {
        s.contains("role observer") && s.contains("watch synced") && s.contains("quiet")
    });
    scale_dialog(&t, "quiet", "=1");
    t.wait("the hold's preview", |s| {
        s.contains("hold pool quiet at 1 until cleared")
            && s.contains("Preview (dry run):")
            && !s.contains("asking the API")
    });
    t.send(&["y"]);
    eventually_blocking("the daemon holds the Deployment at 1", || {
        (deployment_replicas(&sb, "quiet") == Some(1)).then_some(())
    });
    let hold = audit_line(&state.path().join("agentdeck").join("audit.jsonl"), "hold");
    assert_eq!(hold["via"], "console");
    // Cleared from the same dialog: the autoscaler decides again (5
    // pending tasks want 2).
    scale_dialog(&t, "quiet", "clear");
    t.wait("the clear's preview", |s| {
        s.contains("clear the hold of pool quiet") && !s.contains("asking the API")
    });
    t.send(&["y"]);
    eventually_blocking("back to 2 once the hold is cleared", || {
        (deployment_replicas(&sb, "quiet") == Some(2)).then_some(())
    });
    assert!(sb.rt.block_on(async { daemon.leader().is_leader() }));
    t.send(&["q"]);
    t.wait_for("EXIT=0");
    cancel.cancel();
    sb.rt.block_on(daemon.join());
}

#[test]
fn all_namespaces_shows_the_objects_of_every_namespace_with_a_namespace_column() {
    let sb = sandbox_with_a_pool();
    let client = sb.client();
    sb.rt.block_on(async {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": "team-b"}})).expect("namespace");
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace created");
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), "team-b");
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "elsewhere"},
            "spec": {"image": "example.com/no-agent:1", "minReplicas": 0, "maxReplicas": 1}
        }))
        .expect("pool");
        pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        let tasks: Api<AgentTask> = Api::namespaced(client.clone(), "team-b");
        let task: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "far-job"},
            "spec": {"pool": "elsewhere", "command": ["true"]}
        }))
        .expect("task");
        tasks
            .create(&PostParams::default(), &task)
            .await
            .expect("task created");
    });
    let kubeconfig = sb.kubeconfig.display().to_string();
    let t = Tmux::start(&["-A"], &[("KUBECONFIG", &kubeconfig)], 100, 30);
    let s = t.wait("both namespaces' pools, synced", |s| {
        s.contains("Pools [2/2]") && s.contains("watch synced")
    });
    assert!(s.contains("ns (all)"), "{s}");
    assert!(s.contains("NAMESPACE"), "{s}");
    let quiet = Tmux::row_with(&s, "quiet").expect("the default namespace's pool");
    assert!(quiet.contains("default"), "{quiet}");
    let far = Tmux::row_with(&s, "elsewhere").expect("team-b's pool");
    assert!(far.contains("team-b"), "{far}");
    // Tasks too: five in default, one in team-b, each with its namespace.
    t.send(&["3"]);
    let s = t.wait_for("Tasks [6/6]");
    let far = Tmux::row_with(&s, "far-job").expect("team-b's task");
    assert!(far.contains("team-b") && far.contains("elsewhere"), "{far}");
    assert!(
        Tmux::row_with(&s, "job-3").is_some_and(|r| r.contains("default")),
        "{s}"
    );
    // The filter sees both namespaces.
    t.send(&["/"]);
    t.type_text("far|job-1");
    t.wait_for("Tasks [2/6]");
    t.send(&["Enter", "q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn at_80x24_the_selection_stays_on_its_task_marks_go_with_a_new_filter_and_typed_bounds_replace() {
    let sb = sandbox_with_a_pool();
    let kubeconfig = sb.kubeconfig.display().to_string();
    let state = tempfile::tempdir().expect("state dir");
    let state_dir = state.path().display().to_string();
    let t = Tmux::start(
        &[],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("XDG_STATE_HOME", &state_dir),
            ("AGENTDECK_CONTROLLER_NAMESPACE", "default"),
        ],
        80,
        24,
    );
    t.wait_for("quiet");
    t.send(&["3"]);
    t.wait_for("Tasks [5/5]");
    // The task on the third row, as the YAML view names it.
    t.send(&["j", "j", "y"]);
    let s = t.wait_for("AgentTask default/job-");
    let picked = s
        .split_whitespace()
        .find_map(|w| w.strip_prefix("default/job-"))
        .map(|n| format!("job-{}", n.trim_end_matches(|c: char| !c.is_ascii_digit())))
        .expect("a task name in the YAML title");
    t.send(&["Escape"]);
    t.wait_for("Tasks [5/5]");
    // Five new tasks arrive (newest first: above the selection).
    sb.rt.block_on(async {
        let tasks: Api<AgentTask> = Api::namespaced(sb.client(), "default");
        for i in 0..5 {
            let task: AgentTask = serde_json::from_value(json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": format!("new-{i}")},
                "spec": {"pool": "quiet", "command": ["true"]}
            }))
            .expect("task");
            tasks
                .create(&PostParams::default(), &task)
                .await
                .expect("task created");
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    });
    t.wait_for("Tasks [10/10]");
    t.send(&["y"]);
    let s = t.wait_for("AgentTask default/");
    assert!(
        s.contains(&format!("AgentTask default/{picked}")),
        "the selection moved off {picked}:\n{s}"
    );
    t.send(&["Escape"]);
    t.wait_for("Tasks [10/10]");
    // A mark, then a new filter: no marks remain.
    t.send(&["Space"]);
    t.wait_for("1 marked");
    t.send(&["/"]);
    t.type_text("new");
    t.send(&["Enter"]);
    let s = t.wait_for("Tasks [5/10]");
    assert!(!s.contains("marked"), "{s}");
    // The scale prompt's prefilled bounds are replaced by what is typed.
    t.send(&["1"]);
    t.wait_for("Pools [1/1]");
    t.send(&["s"]);
    t.wait_for("Scale pool quiet");
    t.type_text("1-2");
    let s = t.wait_for("1-2");
    assert!(!s.contains("0-21-2"), "{s}");
    t.send(&["Enter"]);
    let s = t.wait_for("scale pool quiet to 1–2");
    assert!(s.contains("scale pool quiet to 1–2"), "{s}");
    t.send(&["Escape"]);
    t.wait("the dialog closed", |s| !s.contains("Scale pool quiet"));
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn i_draws_a_pools_last_hour_on_one_axis_and_esc_goes_back() {
    let t = Tmux::start(&["--demo"], &[], 100, 30);
    t.wait("the demo's pools, synced", |s| {
        s.contains("Pools [3/3]") && s.contains("watch synced")
    });
    select_only(&t, "Pools", "platform");
    t.send(&["i"]);
    let s = t.wait("platform's last hour", |s| {
        s.contains("Pool platform: the last hour") && s.contains("-60m") && s.contains("now")
    });
    for part in [
        "queue (pending tasks)",
        "replicas: ready",
        "fresh agents",
        "└",
        "scaling decisions",
    ] {
        assert!(s.contains(part), "{part}:\n{s}");
    }
    // Esc and the next key go in separate calls (together: alt-q).
    t.send(&["Escape"]);
    t.wait("back on the pools", |s| {
        s.contains("Pools [1/3]") && !s.contains("the last hour")
    });
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}

/// Two sandboxes, each with pool `quiet` and five tasks waiting for it, as
/// contexts `sb-a` and `sb-b` of one kubeconfig (two files on
/// `KUBECONFIG`, as kubectl merges them); returns that `KUBECONFIG`.
fn two_contexts() -> (TestSandbox, TestSandbox, tempfile::TempDir, String) {
    let (a, b) = (sandbox_with_a_pool(), sandbox_with_a_pool());
    let dir = tempfile::tempdir().expect("temp dir");
    let mut paths = Vec::new();
    for (sb, name) in [(&a, "sb-a"), (&b, "sb-b")] {
        // As `agentdeck sandbox --name sb-a` writes it.
        let path = dir.path().join(name);
        std::fs::write(&path, sb.sandbox().kubeconfig_named("default", name)).expect("written");
        paths.push(path.display().to_string());
    }
    (a, b, dir, paths.join(":"))
}

fn pool_bounds(sb: &TestSandbox, pool: &str) -> (i32, i32) {
    let pools: Api<AgentPool> = Api::namespaced(sb.client(), "default");
    let p = sb.rt.block_on(pools.get(pool)).expect("pool");
    (p.spec.min_replicas, p.spec.max_replicas)
}

#[test]
fn two_contexts_in_one_console_act_each_on_its_own_and_one_gone_leaves_the_other_live() {
    let (a, b, _dir, kubeconfig) = two_contexts();
    let state = tempfile::tempdir().expect("state dir");
    let state_dir = state.path().display().to_string();
    let t = Tmux::start(
        &["--context", "sb-a", "--context", "sb-b"],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("XDG_STATE_HOME", &state_dir),
            // Each context's embedded controller leads its own cluster.
            ("AGENTDECK_CONTROLLER_NAMESPACE", "default"),
        ],
        120,
        32,
    );
    // Rows of each, with their context; each context's role and state.
    let s = t.wait("both contexts' pools, each leading", |s| {
        s.contains("sb-a leader synced")
            && s.contains("sb-b leader synced")
            && Tmux::row_with(s, "│sb-a").is_some_and(|r| r.contains("quiet"))
            && Tmux::row_with(s, "│sb-b").is_some_and(|r| r.contains("quiet"))
    });
    assert!(s.contains("CONTEXT"), "{s}");
    eventually_blocking("each pool scaled to 2 by its own controller", || {
        (deployment_replicas(&a, "quiet") == Some(2) && deployment_replicas(&b, "quiet") == Some(2))
            .then_some(())
    });

    // The second row is b's pool: scaling it changes b, not a.
    t.send(&["j"]);
    t.send(&["s"]);
    t.wait_for("Scale pool quiet in sb-b");
    t.send(&["C-u"]);
    t.type_text("0-1");
    t.send(&["Enter"]);
    t.wait("the scale preview", |s| {
        s.contains("Preview (dry run):") && !s.contains("asking the API")
    });
    t.send(&["y"]);
    eventually_blocking("b's pool at 0-1", || {
        (pool_bounds(&b, "quiet") == (0, 1)).then_some(())
    });
    eventually_blocking("b's Deployment at 1", || {
        (deployment_replicas(&b, "quiet") == Some(1)).then_some(())
    });
    assert_eq!(pool_bounds(&a, "quiet"), (0, 2), "a's pool is untouched");
    assert_eq!(deployment_replicas(&a, "quiet"), Some(2));
    let audit = state.path().join("agentdeck").join("audit.jsonl");
    let scale = audit_line(&audit, "scale");
    assert_eq!(scale["context"], "sb-b", "{scale}");
    t.wait("b's row with its new bounds", |s| {
        Tmux::row_with(s, "│sb-b").is_some_and(|r| r.contains("0-1"))
    });

    // a goes away: it shows as disconnected, b's rows still follow b and
    // the keys are answered.
    drop(a);
    t.wait("a disconnected", |s| s.contains("sb-a disconnected"));
    let tasks: Api<AgentTask> = Api::namespaced(b.client(), "default");
    let task: AgentTask = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": "after-a-went"},
        "spec": {"pool": "quiet", "command": ["true"]}
    }))
    .expect("task");
    b.rt.block_on(tasks.create(&PostParams::default(), &task))
        .expect("task created");
    t.send(&["3"]);
    t.wait("b's new task in the tasks view", |s| {
        s.contains("Tasks [")
            && Tmux::row_with(s, "after-a-went").is_some_and(|r| r.contains("sb-b"))
    });
    t.send(&[":"]);
    t.type_text("ctx sb-b");
    t.send(&["Enter"]);
    t.wait("narrowed to b", |s| {
        s.contains("ctx:sb-b") && !s.contains("│sb-a")
    });
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn all_contexts_opens_every_context_and_two_on_one_cluster_lead_once() {
    // Each sandbox's kubeconfig has two contexts on the same cluster (a
    // token and a client certificate): four contexts, two clusters.
    let (_a, _b, _dir, kubeconfig) = two_contexts();
    let t = Tmux::start(
        &["--all-contexts"],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("AGENTDECK_CONTROLLER_NAMESPACE", "default"),
        ],
        200,
        32,
    );
    let s = t.wait("a row from each of the four contexts", |s| {
        ["│sb-a ", "│sb-a-cert", "│sb-b ", "│sb-b-cert"]
            .iter()
            .all(|c| Tmux::row_with(s, c).is_some_and(|r| r.contains("quiet")))
    });
    assert!(s.contains("Pools [4/4]"), "{s}");
    // Of two contexts on one cluster, one holds its Lease and leads; the
    // other observes.
    let header = t.wait("each cluster led once", |s| {
        let h = s.lines().next().unwrap_or_default();
        h.matches("leader synced").count() == 2 && h.matches("observer synced").count() == 2
    });
    assert!(header.contains("sb-a"), "{header}");
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn a_context_that_cannot_be_loaded_shows_why_and_the_others_open() {
    let (_a, _b, dir, kubeconfig) = two_contexts();
    let broken = dir.path().join("broken");
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:1\n\
         contexts:\n- name: broken\n  context:\n    cluster: gone\n    user: gone\n\
         users:\n- name: gone\n  user:\n    client-certificate: /nonexistent/cert.pem\n    client-key: /nonexistent/key.pem\n",
    )
    .expect("written");
    let kubeconfig = format!("{kubeconfig}:{}", broken.display());
    let t = Tmux::start(
        &["--context", "broken", "--context", "sb-b"],
        &[("KUBECONFIG", &kubeconfig)],
        160,
        30,
    );
    let s = t.wait("b's rows beside the broken context's reason", |s| {
        s.contains("broken disconnected: cannot create a Kubernet")
            && Tmux::row_with(s, "│sb-b").is_some_and(|r| r.contains("quiet"))
    });
    assert!(!s.contains("│broken"), "{s}");
    t.send(&["q"]);
    t.wait_for("EXIT=0");
    // Alone, the console does not open: the reason, and exit 1.
    let alone = Tmux::start(
        &["--context", "broken"],
        &[("KUBECONFIG", &kubeconfig)],
        160,
        30,
    );
    let s = alone.wait_for("EXIT=");
    // (The message wraps at the pane's width.)
    assert!(
        s.replace('\n', "").contains("/nonexistent/cert.pem") && s.contains("EXIT=1"),
        "{s}"
    );
}

#[test]
fn contexts_in_the_configuration_open_together_and_flags_win() {
    let (_a, _b, dir, kubeconfig) = two_contexts();
    let config = dir.path().join("agentdeck.yaml");
    std::fs::write(&config, "contexts: [sb-a, sb-b]\n").expect("config");
    let config = config.display().to_string();
    let t = Tmux::start(
        &["--config", &config],
        &[("KUBECONFIG", &kubeconfig)],
        160,
        30,
    );
    t.wait("rows of both configured contexts", |s| {
        Tmux::row_with(s, "│sb-a").is_some() && Tmux::row_with(s, "│sb-b").is_some()
    });
    t.send(&["q"]);
    t.wait_for("EXIT=0");
    // --context names the one to open instead.
    let t = Tmux::start(
        &["--config", &config, "--context", "sb-b"],
        &[("KUBECONFIG", &kubeconfig)],
        160,
        30,
    );
    let s = t.wait("b alone, as one context", |s| {
        s.contains("ctx sb-b") && s.contains("quiet") && s.contains("watch synced")
    });
    assert!(!s.contains("CONTEXT"), "{s}");
    t.send(&["q"]);
    t.wait_for("EXIT=0");
}
