//! Operator actions end to end: the real `agentdeck` binary (scale, drain,
//! debug-logs, task cancel|retry, status, audit) against an in-process
//! sandbox through a kubeconfig, with the real controller leading in this
//! process — and once with the action issued while another controller
//! instance leads (the console's observer case, through the library).
//!
//! Agents are simulated by the sandbox (the pool's podTemplate runs a
//! command it plays), and the tests play the agents' side by writing task
//! status as an agent would. Everything is observed through the API.

mod common;

use common::eventually;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Once};
use std::time::Duration;

use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::controller::{self, ControllerHandle};
use agentdeck::crd::{AgentPool, AgentTask, TaskPhase};
use agentdeck::sandbox::Sandbox;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
/// The user the sandbox says every client is (SelfSubjectReview).
const SANDBOX_USER: &str = "agentdeck-sandbox-admin";

static EXE: Once = Once::new();

struct Harness {
    sandbox: Option<Sandbox>,
    client: Client,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Harness {
    async fn start() -> Harness {
        EXE.call_once(|| {
            // SAFETY: set once, before any sandbox of this binary starts a
            // kubelet that reads it; no other thread writes the environment.
            unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
        });
        let _ = rustls::crypto::ring::default_provider().install_default();
        let sandbox = Sandbox::start(0, 2).await.expect("sandbox starts");
        let client = sandbox.client().expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, sandbox.kubeconfig(NS)).expect("kubeconfig");
        Harness {
            sandbox: Some(sandbox),
            client,
            dir,
            kubeconfig,
        }
    }

    fn controller(&self, config: &Config) -> (Arc<ControllerHandle>, CancellationToken) {
        let cancel = CancellationToken::new();
        let conn = self.conn();
        let handle = Arc::new(controller::start(conn, config, cancel.clone()));
        (handle, cancel)
    }

    fn conn(&self) -> Connection {
        Connection {
            client: self.client.clone(),
            namespace: NS.into(),
            streams: None,
        }
    }

    fn pools(&self) -> Api<AgentPool> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn tasks(&self) -> Api<AgentTask> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn audit_file(&self) -> PathBuf {
        self.dir
            .path()
            .join("state")
            .join("agentdeck")
            .join("audit.jsonl")
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentdeck"));
        cmd.args(args)
            .env_remove("AGENTDECK_SANDBOX_EXE")
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs the binary to its end.
    async fn agentdeck(&self, args: &[&str]) -> Output {
        self.command(args).output().await.expect("agentdeck runs")
    }

    /// Runs the binary, which must succeed; its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let o = self.agentdeck(args).await;
        assert!(
            o.status.success(),
            "agentdeck {args:?} failed ({:?}):\n{}\n{}",
            o.status.code(),
            out(&o),
            err(&o)
        );
        out(&o)
    }

    async fn create_pool(&self, name: &str, spec: Value) -> AgentPool {
        let mut full = json!({
            "image": "agentdeck:dev",
            "minReplicas": 1,
            "maxReplicas": 4,
            "cooldownSeconds": {"up": 0, "down": 0},
            "podTemplate": {"spec": {"containers": [{"name": "agent", "command": ["sim-agent"]}]}},
        });
        for (k, v) in spec.as_object().expect("spec object") {
            full[k] = v.clone();
        }
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name}, "spec": full
        }))
        .expect("pool");
        self.pools()
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created")
    }

    async fn create_task(&self, pool: &str, name: &str, labels: Value) {
        let task: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": name, "labels": labels},
            "spec": {"pool": pool, "command": ["terraform", "plan"]}
        }))
        .expect("task");
        self.tasks()
            .create(&PostParams::default(), &task)
            .await
            .expect("task created");
    }

    async fn set_task_status(&self, task: &str, status: Value) {
        self.tasks()
            .patch_status(
                task,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .expect("task status written");
    }

    async fn replicas(&self, pool: &str) -> Option<i32> {
        Api::<Deployment>::namespaced(self.client.clone(), NS)
            .get_opt(&format!("iac-agent-{pool}"))
            .await
            .expect("get deployment")
            .and_then(|d| d.spec?.replicas)
    }

    async fn wait_replicas(&self, pool: &str, n: i32) {
        eventually(&format!("Deployment of {pool} at {n} replicas"), || async {
            (self.replicas(pool).await == Some(n)).then_some(())
        })
        .await;
    }

    /// The pool's agent pods that are not terminating, by name.
    async fn live_agents(&self, pool: &str, n: usize) -> Vec<String> {
        eventually(&format!("{n} live agents of {pool}"), || async {
            let mut names: Vec<String> = self
                .pods()
                .list(&ListParams::default().labels(&format!("agentdeck.dev/pool={pool}")))
                .await
                .expect("pods")
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| p.name_any())
                .collect();
            names.sort();
            (names.len() == n).then_some(names)
        })
        .await
    }

    async fn events(&self, object: &str, reason: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
            })
            .collect()
    }

    async fn pool(&self, name: &str) -> AgentPool {
        self.pools().get(name).await.expect("pool")
    }

    /// resourceVersion of every pool and task, by kind/name; for pods, their
    /// labels, annotations and spec (what an action could change): the
    /// sandbox's kubelet keeps writing a running pod's status, which moves its
    /// resourceVersion whatever the tool does.
    async fn versions(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for p in self
            .pools()
            .list(&ListParams::default())
            .await
            .expect("pools")
            .items
        {
            out.push((
                format!("pool/{}", p.name_any()),
                p.resource_version().unwrap_or_default(),
            ));
        }
        for p in self
            .pods()
            .list(&ListParams::default())
            .await
            .expect("pods")
            .items
        {
            let written = json!({
                "labels": p.metadata.labels,
                "annotations": p.metadata.annotations,
                "spec": p.spec,
            });
            out.push((format!("pod/{}", p.name_any()), written.to_string()));
        }
        for t in self
            .tasks()
            .list(&ListParams::default())
            .await
            .expect("tasks")
            .items
        {
            out.push((
                format!("task/{}", t.name_any()),
                t.resource_version().unwrap_or_default(),
            ));
        }
        out.sort();
        out
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(sb) = self.sandbox.take() {
            sb.api().faults.drop_watches();
        }
    }
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fast settings, no election.
fn config() -> Config {
    let mut c = Config {
        resync_interval_seconds: 2,
        controller_namespace: NS.into(),
        ..Config::default()
    };
    c.leader_election.enabled = false;
    c.health_probe.interval_seconds = 1;
    c.health_probe.offline_after_seconds = 600;
    c
}

fn running_on(agent: &str) -> Value {
    json!({"phase": "Running", "agent": agent, "attempts": 1,
           "claimedAt": jiff::Timestamp::now().to_string()})
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each audit line is JSON"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_bounds_and_a_hold_from_the_cli_reach_the_deployment_status_events_and_audit() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool("alpha", json!({})).await;
    h.wait_replicas("alpha", 1).await;

    let said = h.ok(&["scale", "alpha", "--min", "2", "--yes"]).await;
    assert!(said.contains("spec.minReplicas: 1 → 2"), "{said}");
    assert!(
        said.contains("the pool grows from 1 to at least 2 agents"),
        "{said}"
    );
    h.wait_replicas("alpha", 2).await;

    let said = h
        .ok(&["scale", "alpha", "--replicas", "4", "--for", "30m", "--yes"])
        .await;
    assert!(
        said.contains("the autoscaler keeps 4 agents until"),
        "{said}"
    );
    h.wait_replicas("alpha", 4).await;
    let hold = eventually("the hold in the pool's status", || async {
        h.pool("alpha").await.status?.hold
    })
    .await;
    assert_eq!((hold.replicas, hold.set_by.as_str()), (4, SANDBOX_USER));
    assert!(hold.until.is_some(), "a hold --for has an end");

    // What `kubectl get ap` shows, through the printer column.
    let kubectl = tokio::process::Command::new("kubectl")
        .args(["get", "ap", "alpha"])
        .env("KUBECONFIG", &h.kubeconfig)
        .env("HOME", h.dir.path())
        .output()
        .await
        .expect("kubectl runs");
    let table = out(&kubectl);
    assert!(table.contains("HOLD"), "{table}{}", err(&kubectl));
    assert!(
        table.contains(&format!("4 by {SANDBOX_USER} until")),
        "{table}"
    );

    let status = h.ok(&["status", "alpha", "-o", "json"]).await;
    let status: Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(status["items"][0]["name"], "alpha");
    assert_eq!(
        (
            status["items"][0]["min"].as_i64(),
            status["items"][0]["max"].as_i64()
        ),
        (Some(2), Some(4))
    );
    // Simulated agents serve no /healthz, so the verdict may name them stale.
    assert!(
        matches!(
            status["items"][0]["verdict"].as_str(),
            Some("OK" | "Degraded")
        ),
        "{status}"
    );
    assert!(
        status["items"][0]["hold"]
            .as_str()
            .is_some_and(|s| s.starts_with("4 by")),
        "{status}"
    );

    h.ok(&["scale", "alpha", "--clear", "--yes"]).await;
    h.wait_replicas("alpha", 2).await;

    // The trail: an Event on the pool for each, and one audit line each.
    assert_eq!(h.events("alpha", "OperatorScaled").await.len(), 1);
    assert_eq!(h.events("alpha", "OperatorHeld").await.len(), 1);
    let cleared = h.events("alpha", "OperatorHoldCleared").await;
    assert_eq!(cleared.len(), 1);
    assert!(
        cleared[0].note.as_deref().is_some_and(
            |n| n.contains(SANDBOX_USER) && n.contains("spec.hold.replicas: 4 → (none)")
        ),
        "{:?}",
        cleared[0].note
    );
    let lines = audit_lines(&h.audit_file());
    let actions: Vec<&str> = lines.iter().filter_map(|l| l["action"].as_str()).collect();
    assert_eq!(actions, ["scale", "hold", "clear-hold"]);
    let first = &lines[0];
    assert_eq!(first["user"], SANDBOX_USER);
    assert_eq!(first["outcome"], "applied");
    assert_eq!(first["objects"][0]["object"], "AgentPool/alpha");
    assert_eq!(first["objects"][0]["before"]["spec"]["minReplicas"], 1);
    assert_eq!(first["objects"][0]["after"]["spec"]["minReplicas"], 2);
    let listed = h.ok(&["audit", "--since", "1h"]).await;
    assert_eq!(
        listed.lines().count(),
        4,
        "a header and three actions:\n{listed}"
    );
    assert!(listed.contains("clear-hold"), "{listed}");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_expires_and_the_autoscaler_decides_again() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool("brief", json!({})).await;
    h.wait_replicas("brief", 1).await;
    h.ok(&["scale", "brief", "--replicas", "3", "--for", "4s", "--yes"])
        .await;
    h.wait_replicas("brief", 3).await;
    // Back at min once it ends, with no other write to the pool.
    h.wait_replicas("brief", 1).await;
    let pool = eventually("the hold gone from the status", || async {
        let p = h.pool("brief").await;
        p.status.as_ref()?.hold.is_none().then_some(p)
    })
    .await;
    assert!(
        pool.spec.hold.is_some(),
        "the expired hold stays in the spec, inert"
    );
    eventually("a HoldEnded Event", || async {
        (!h.events("brief", "HoldEnded").await.is_empty()).then_some(())
    })
    .await;
    let status = h.ok(&["status", "brief"]).await;
    assert!(
        status.lines().nth(1).is_some_and(|l| l.contains(" - ")),
        "no hold shown:\n{status}"
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_wait_shows_progress_until_the_busy_agent_is_idle() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool("busy", json!({"minReplicas": 2})).await;
    let agents = h.live_agents("busy", 2).await;
    h.create_task("busy", "long", json!({})).await;
    h.set_task_status("long", running_on(&agents[0])).await;

    let child = h
        .command(&["drain", "busy", "--wait", "--yes"])
        .spawn()
        .expect("drain starts");
    let pool = eventually("the pool draining", || async {
        let p = h.pool("busy").await;
        p.spec.drain.then_some(p)
    })
    .await;
    assert!(pool.spec.drain);
    // The idle agent goes; the busy one stays until its task ends.
    eventually("only the busy agent left", || async {
        (h.replicas("busy").await == Some(1)).then_some(())
    })
    .await;
    h.set_task_status("long", json!({"phase": "Succeeded", "attempts": 1}))
        .await;
    let o = tokio::time::timeout(common::POLL_DEADLINE, child.wait_with_output())
        .await
        .expect("drain --wait ends once the agent is idle")
        .expect("wait");
    let said = out(&o);
    assert!(o.status.success(), "{said}{}", err(&o));
    assert!(
        said.contains("1 busy agent will finish its task first (long)"),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "drained agents still busy: {} (task long)",
            agents[0]
        )),
        "{said}"
    );
    assert!(
        said.trim_end()
            .ends_with("drained: no drained agent is busy"),
        "{said}"
    );
    h.wait_replicas("busy", 0).await;

    h.ok(&["drain", "busy", "--undo", "--yes"]).await;
    h.wait_replicas("busy", 2).await;
    assert_eq!(h.events("busy", "OperatorDrained").await.len(), 1);
    assert_eq!(h.events("busy", "OperatorUndrained").await.len(), 1);
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_drain_and_debug_logs_switch_the_pod_annotations_and_the_pool() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool("switches", json!({"minReplicas": 2})).await;
    let agents = h.live_agents("switches", 2).await;
    let annotation = |pod: &Pod, key: &str| pod.annotations().get(key).cloned();

    h.ok(&["drain", "switches", &agents[1], "--yes"]).await;
    h.ok(&["debug-logs", "switches", &agents[0], "on", "--yes"])
        .await;
    let a0 = h.pods().get(&agents[0]).await.expect("pod");
    let a1 = h.pods().get(&agents[1]).await.expect("pod");
    assert_eq!(
        annotation(&a1, "agentdeck.dev/drain").as_deref(),
        Some("true")
    );
    assert_eq!(
        annotation(&a0, "agentdeck.dev/debug").as_deref(),
        Some("true")
    );
    assert_eq!(
        annotation(&a0, "agentdeck.dev/drain"),
        None,
        "only the agent named"
    );
    assert_eq!(h.events(&agents[1], "OperatorDrained").await.len(), 1);
    assert!(
        !h.pool("switches").await.spec.drain,
        "the pool itself is not drained"
    );

    h.ok(&["debug-logs", "switches", "on", "--yes"]).await;
    assert!(h.pool("switches").await.spec.debug);
    h.ok(&["debug-logs", "switches", "off", "--yes"]).await;
    assert!(!h.pool("switches").await.spec.debug);

    h.ok(&["drain", "switches", &agents[1], "--undo", "--yes"])
        .await;
    h.ok(&["debug-logs", "switches", &agents[0], "off", "--yes"])
        .await;
    let a0 = h.pods().get(&agents[0]).await.expect("pod");
    let a1 = h.pods().get(&agents[1]).await.expect("pod");
    assert_eq!(annotation(&a1, "agentdeck.dev/drain"), None);
    assert_eq!(annotation(&a0, "agentdeck.dev/debug"), None);

    // Asking for what already is changes nothing and says so.
    let again = h.ok(&["debug-logs", "switches", "off", "--yes"]).await;
    assert!(again.contains("nothing to change"), "{again}");
    let actions: Vec<String> = audit_lines(&h.audit_file())
        .iter()
        .filter_map(|l| l["action"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        actions,
        [
            "drain",
            "debug-logs-on",
            "debug-logs-on",
            "debug-logs-off",
            "undrain",
            "debug-logs-off"
        ]
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_cancelled_by_selector_and_a_failed_one_is_retried_with_its_history() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool("work", json!({"minReplicas": 1})).await;
    let agents = h.live_agents("work", 1).await;
    h.create_task("work", "run-a", json!({"batch": "nightly"}))
        .await;
    h.create_task("work", "wait-b", json!({"batch": "nightly"}))
        .await;
    h.create_task("work", "broken", json!({})).await;
    h.set_task_status("run-a", running_on(&agents[0])).await;
    h.set_task_status(
        "broken",
        json!({"phase": "Failed", "attempts": 2, "agent": agents[0], "exitCode": 3,
               "message": "exit 3", "finishedAt": jiff::Timestamp::now().to_string()}),
    )
    .await;

    let said = h
        .ok(&["task", "cancel", "-l", "batch=nightly", "--yes"])
        .await;
    assert!(said.contains("1 task Running will be cancelled"), "{said}");
    assert!(said.contains("1 task Pending will never start"), "{said}");
    for name in ["run-a", "wait-b"] {
        assert!(
            h.tasks().get(name).await.expect("task").spec.cancel,
            "{name}"
        );
    }
    // The controller ends the one that never started.
    common::wait_task(&h.tasks(), "wait-b", "Cancelled", |t| {
        t.phase() == TaskPhase::Cancelled
    })
    .await;

    let said = h.ok(&["task", "retry", "broken", "--yes"]).await;
    assert!(said.contains("attempt 3 next"), "{said}");
    let t = h.tasks().get("broken").await.expect("task");
    let s = t.status.expect("status");
    assert_eq!(
        (s.phase, s.attempts, s.exit_code),
        (TaskPhase::Pending, 2, None)
    );
    assert_eq!(s.history.len(), 1);
    assert_eq!(
        (
            s.history[0].phase,
            s.history[0].exit_code,
            s.history[0].retried_by.as_str()
        ),
        (TaskPhase::Failed, Some(3), SANDBOX_USER)
    );
    assert_eq!(h.events("broken", "OperatorRetried").await.len(), 1);
    assert_eq!(h.events("run-a", "OperatorCancelled").await.len(), 1);

    // A task that did not fail is not retried, and nothing else is either.
    let o = h
        .agentdeck(&["task", "retry", "run-a", "broken", "--yes"])
        .await;
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("run-a is Running"), "{}", err(&o));
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_prints_the_diff_and_impact_and_changes_nothing() {
    let h = Harness::start().await;
    let (c, cancel) = h.controller(&config());
    h.create_pool("still", json!({"minReplicas": 2})).await;
    let agents = h.live_agents("still", 2).await;
    h.create_task("still", "t-run", json!({})).await;
    h.set_task_status("t-run", running_on(&agents[0])).await;
    h.create_task("still", "t-fail", json!({})).await;
    h.set_task_status("t-fail", json!({"phase": "Errored", "attempts": 1}))
        .await;
    eventually("the pool's status current", || async {
        let p = h.pool("still").await;
        (p.status.as_ref()?.running_tasks == 1).then_some(())
    })
    .await;
    // Stop the controller (its status writes move versions too), so only
    // the dry runs could; a preview needs no controller.
    cancel.cancel();
    c.join().await;
    let before = h.versions().await;

    let agent = agents[1].as_str();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["scale", "still", "--max", "3"],
            "spec.maxReplicas: 4 → 3",
        ),
        (
            vec!["scale", "still", "--replicas", "3", "--for", "1h"],
            "spec.hold.replicas: (none) → 3",
        ),
        (
            vec!["scale", "still", "--replicas", "6", "--force"],
            "--force widens maxReplicas 4 → 6",
        ),
        (
            vec!["drain", "still"],
            "1 busy agent will finish its task first (t-run)",
        ),
        (
            vec!["drain", "still", agent],
            "metadata.annotations[\"agentdeck.dev/drain\"]: (none) → \"true\"",
        ),
        (
            vec!["debug-logs", "still", "on"],
            "spec.debug: false → true",
        ),
        (
            vec!["task", "cancel", "t-run"],
            "1 task Running will be cancelled",
        ),
        (
            vec!["task", "retry", "t-fail"],
            "status.phase: \"Errored\" → \"Pending\"",
        ),
    ];
    for (mut args, needle) in cases {
        args.push("--dry-run");
        let said = h.ok(&args).await;
        assert!(said.contains(needle), "{args:?}:\n{said}");
        assert!(
            said.contains("dry run: nothing was changed"),
            "{args:?}:\n{said}"
        );
    }
    assert_eq!(
        h.versions().await,
        before,
        "nothing was written: pools and tasks keep their resourceVersion, pods their labels, annotations and spec"
    );
    assert!(!h.audit_file().exists(), "a dry run is not an action");
    for reason in [
        "OperatorScaled",
        "OperatorHeld",
        "OperatorDrained",
        "OperatorDebugLogs",
    ] {
        assert!(h.events("still", reason).await.is_empty(), "{reason}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_exits_2_naming_the_flag_or_what_exists_and_changes_nothing() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool("gamma", json!({"minReplicas": 1, "maxReplicas": 3}))
        .await;
    h.create_pool("delta", json!({"executionMode": "job"}))
        .await;
    let agents = h.live_agents("gamma", 1).await;
    h.create_task("gamma", "t-1", json!({})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pool_rv = || async {
        let mut v: Vec<String> = Vec::new();
        for p in ["gamma", "delta"] {
            let p = h.pool(p).await;
            v.push(format!(
                "{}:{:?}",
                p.metadata.generation.unwrap_or(0),
                p.spec
            ));
        }
        v
    };
    let before = pool_rv().await;
    let agent_list = format!("its agents: {}", agents[0]);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["scale", "nope", "--min", "1", "--yes"],
            "no AgentPool \"nope\" in namespace default; pools there: delta, gamma",
        ),
        (vec!["drain", "nope", "--yes"], "pools there: delta, gamma"),
        (vec!["drain", "gamma", "ghost", "--yes"], &agent_list),
        (
            vec!["debug-logs", "gamma", "ghost", "on", "--yes"],
            "no agent \"ghost\" in pool gamma",
        ),
        (
            vec!["debug-logs", "gamma", "loud"],
            "expected on or off, got \"loud\"",
        ),
        (
            vec!["scale", "gamma", "--replicas", "5", "--yes"],
            "--replicas: 5 is above the pool's maxReplicas 3 (bounds 1..3)",
        ),
        (
            vec!["scale", "gamma", "--replicas", "0", "--yes"],
            "or add --force to widen the bounds to 0",
        ),
        (
            vec!["scale", "delta", "--replicas", "1", "--yes"],
            "pool delta runs in job mode",
        ),
        (
            vec!["scale", "gamma", "--min", "-1", "--yes"],
            "-1 is negative",
        ),
        (
            vec!["scale", "gamma", "--max", "0", "--yes"],
            "--max: 0 is below the pool's minReplicas 1; give --min too",
        ),
        (
            vec![
                "scale",
                "gamma",
                "--replicas",
                "2",
                "--for",
                "soon",
                "--yes",
            ],
            "\"soon\" is not a duration",
        ),
        (
            vec!["scale", "gamma", "--replicas", "2", "--for", "0s", "--yes"],
            "\"0s\" is zero",
        ),
        (
            vec!["scale", "gamma", "--replicas", "2", "--min", "1"],
            "--min",
        ),
        (
            vec!["scale", "gamma", "--clear", "--replicas", "2"],
            "--clear",
        ),
        (vec!["scale", "gamma"], "--min"),
        (vec!["drain", "gamma", "--wait", "--dry-run"], "--dry-run"),
        (
            vec!["task", "cancel", "ghost-task", "--yes"],
            "no AgentTask \"ghost-task\" in namespace default",
        ),
        (
            vec!["task", "cancel", "-l", "x in (", "--yes"],
            "-l: the API refused \"x in (\"",
        ),
        (vec!["task", "retry", "t-1", "--yes"], "t-1 is Pending"),
        (
            vec!["audit", "--since", "yesterday"],
            "\"yesterday\" is not a duration",
        ),
        (vec!["status", "nope"], "pools there: delta, gamma"),
        (
            vec!["scale", "gamma", "--min", "2"],
            "not confirmed; nothing was changed (pass --yes",
        ),
    ];
    for (args, needle) in cases {
        let o = h.agentdeck(&args).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}{}", out(&o), err(&o));
        assert!(err(&o).contains(needle), "{args:?}: {}", err(&o));
        assert!(!err(&o).contains("panicked"), "{args:?}");
    }
    assert_eq!(pool_rv().await, before, "no pool changed");
    let a0 = h.pods().get(&agents[0]).await.expect("pod");
    assert!(a0.annotations().get("agentdeck.dev/drain").is_none());
    assert!(!h.tasks().get("t-1").await.expect("task").spec.cancel);
    assert!(
        !h.audit_file().exists(),
        "refused actions are not in the audit trail"
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_issued_while_another_controller_leads_is_carried_out_by_the_leader() {
    let h = Harness::start().await;
    let mut cfg = config();
    cfg.leader_election.enabled = true;
    cfg.leader_election.lease_duration_seconds = 4;
    cfg.leader_election.renew_deadline_seconds = 3;
    cfg.leader_election.retry_period_seconds = 1;
    let (a, cancel_a) = h.controller(&cfg);
    let (b, cancel_b) = h.controller(&cfg);
    let (leader, observer) = eventually("one leader", || async {
        match (a.leader().is_leader(), b.leader().is_leader()) {
            (true, false) => Some((a.clone(), b.clone())),
            (false, true) => Some((b.clone(), a.clone())),
            _ => None,
        }
    })
    .await;
    h.create_pool("shared", json!({})).await;
    h.wait_replicas("shared", 1).await;

    // The console in observer mode acts through the library: an object
    // change, which the leader carries out.
    let conn = h.conn();
    let actor = agentdeck::ops::Actor {
        user: "console-user".into(),
        via: "console".into(),
        context: "test".into(),
    };
    let hold = agentdeck::ops::Action::HoldReplicas {
        pool: "shared".into(),
        replicas: 3,
        duration: None,
        force: false,
    };
    let preview = agentdeck::ops::preview(&conn, &hold, &actor)
        .await
        .expect("preview");
    assert_eq!(preview.objects.len(), 1);
    assert!(
        preview.impact.iter().any(|i| i.contains("keeps 3 agents")),
        "{preview:?}"
    );
    let outcome = agentdeck::ops::apply(&conn, &hold, &actor)
        .await
        .expect("applied");
    assert_eq!(outcome.record.user, "console-user");
    assert_eq!(outcome.record.via, "console");
    h.wait_replicas("shared", 3).await;
    assert!(
        !observer.leader().is_leader(),
        "the observer wrote no Deployment"
    );
    assert!(leader.leader().is_leader());

    // And from the CLI with no controller in its own process at all.
    h.ok(&["drain", "shared", "--yes"]).await;
    h.wait_replicas("shared", 0).await;
    let pool = h.pool("shared").await;
    assert_eq!(
        pool.spec.hold.map(|h| h.set_by),
        Some("console-user".into())
    );
    cancel_a.cancel();
    cancel_b.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_planned_on_data_that_moved_is_refused_by_the_api_never_applied_blindly() {
    use agentdeck::ops::{exec, plan};
    let h = Harness::start().await;
    h.create_pool("raced", json!({})).await;
    let conn = h.conn();
    let action = agentdeck::ops::Action::ScalePool {
        pool: "raced".into(),
        min: Some(3),
        max: None,
    };
    let state = exec::load(&conn, &action).await.expect("loaded");
    let planned = plan::plan(&action, &state, "alice", jiff::Timestamp::now()).expect("planned");
    // Another writer changes the pool in between.
    h.pools()
        .patch(
            "raced",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxReplicas": 6}})),
        )
        .await
        .expect("other write");
    let e = exec::send(&conn, &planned.changes[0], false)
        .await
        .expect_err("stale resourceVersion refused");
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 409), "{e}");
    let pool = h.pool("raced").await;
    assert_eq!((pool.spec.min_replicas, pool.spec.max_replicas), (1, 6));
    // apply plans again on fresh data and keeps the other writer's change.
    let actor = agentdeck::ops::Actor {
        user: "alice".into(),
        via: "cli".into(),
        context: "test".into(),
    };
    agentdeck::ops::apply(&conn, &action, &actor)
        .await
        .expect("applied");
    let pool = h.pool("raced").await;
    assert_eq!((pool.spec.min_replicas, pool.spec.max_replicas), (3, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_actions_on_one_pool_each_apply_on_what_the_last_one_wrote() {
    let h = Harness::start().await;
    h.create_pool("contended", json!({"minReplicas": 0, "maxReplicas": 10}))
        .await;
    let conn = h.conn();
    // Four writers: each can lose to each of the three others at most
    // once, within apply's attempts.
    let applies = (1..=4).map(|i| {
        let conn = conn.clone();
        async move {
            let actor = agentdeck::ops::Actor {
                user: format!("user-{i}"),
                via: "cli".into(),
                context: "test".into(),
            };
            let action = agentdeck::ops::Action::ScalePool {
                pool: "contended".into(),
                min: Some(i),
                max: None,
            };
            agentdeck::ops::apply(&conn, &action, &actor).await
        }
    });
    let outcomes = futures::future::join_all(applies).await;
    let mut befores = Vec::new();
    let mut afters = Vec::new();
    for o in outcomes {
        let o = o.expect("every writer succeeds");
        let obj = &o.record.objects[0];
        befores.push(obj.before["spec"]["minReplicas"].as_i64().expect("before"));
        afters.push(obj.after["spec"]["minReplicas"].as_i64().expect("after"));
    }
    // No lost update: each write started from a different state, the
    // initial one or another writer's result, so they form one chain.
    let mut sorted = befores.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 4, "befores {befores:?}");
    for b in &befores {
        assert!(
            *b == 0 || afters.contains(b),
            "before {b} was never written: {befores:?} {afters:?}"
        );
    }
    let last = afters
        .iter()
        .find(|a| !befores.contains(a))
        .expect("a last write");
    assert_eq!(
        i64::from(h.pool("contended").await.spec.min_replicas),
        *last
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_mode_task_retried_runs_in_a_new_job_and_keeps_its_history() {
    use k8s_openapi::api::batch::v1::Job;
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    // Worker and runner simulated: the first run exits 1 after a second.
    let template = |code: &str| {
        json!({
            "metadata": {"annotations": {"sandbox.agentdeck.dev/exit-after": "1",
                                         "sandbox.agentdeck.dev/exit-code": code}},
            "spec": {"containers": [
                {"name": "worker", "image": "example.com/worker-sim:1", "command": ["sim-worker"]},
                {"name": "runner", "command": ["sim-runner"]}
            ]}
        })
    };
    h.create_pool(
        "jobs",
        json!({"executionMode": "job", "minReplicas": 0, "maxReplicas": 2,
               "podTemplate": template("1"),
               "taskDefaults": {"runnerImage": "hashicorp/terraform:1.9"}}),
    )
    .await;
    h.create_task("jobs", "flaky", json!({})).await;
    common::wait_task(&h.tasks(), "flaky", "Failed", |t| {
        t.phase() == TaskPhase::Failed
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(h.client.clone(), NS);
    let first = jobs.list(&ListParams::default()).await.expect("jobs").items;
    assert_eq!(first.len(), 1, "the failed run's Job is still there");
    let first_uid = first[0].uid();

    // The cause is fixed; the task is retried.
    h.pools()
        .patch(
            "jobs",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"podTemplate": template("0")}})),
        )
        .await
        .expect("pool fixed");
    let said = h.ok(&["task", "retry", "flaky", "--yes"]).await;
    assert!(
        said.contains("their finished Jobs are deleted first"),
        "{said}"
    );
    let t = common::wait_task(&h.tasks(), "flaky", "Succeeded", |t| {
        t.phase() == TaskPhase::Succeeded
    })
    .await;
    let s = t.status.expect("status");
    assert_eq!(s.attempts, 2, "the retry is the second attempt");
    assert_eq!(s.history.len(), 1);
    assert_eq!(s.history[0].phase, TaskPhase::Failed);
    let now = jobs.list(&ListParams::default()).await.expect("jobs").items;
    assert_eq!(now.len(), 1, "one Job: the new run's");
    assert_ne!(now[0].uid(), first_uid, "a new Job ran it");
    cancel.cancel();
}
