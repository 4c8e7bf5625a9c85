//! The agent runtime end to end: the sandbox's kubelet runs `agentdeck
//! agent` as real processes (from a Deployment or Job built by the real
//! manifest builders), and the tests watch what they do to AgentTasks.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use agentdeck::crd::{AgentPool, AgentTask, LABEL_POOL, TaskPhase, crds};
use agentdeck::health::{HealthReport, HealthStatus};
use agentdeck::plan::manifests::{agent_deployment, task_job};
use common::TestSandbox;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "default";
/// Generous: the machine running the tests may be loaded.
const DEADLINE: Duration = Duration::from_secs(90);

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

struct Cluster {
    client: kube::Client,
    tasks: Api<AgentTask>,
    pools: Api<AgentPool>,
    pods: Api<Pod>,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn new(client: kube::Client) -> Cluster {
        let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crds() {
            crd_api
                .create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        Cluster {
            tasks: Api::namespaced(client.clone(), NS),
            pools: Api::namespaced(client.clone(), NS),
            pods: Api::namespaced(client.clone(), NS),
            client,
            // Outside /tmp: agent containers have a volume of their own there.
            dir: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir"),
        }
    }

    /// A pool (fast heartbeats, 2 s grace) with `spec` laid over, and its
    /// agent Deployment with `replicas`.
    async fn pool(&self, name: &str, spec: serde_json::Value, replicas: i32) -> AgentPool {
        let mut full = json!({
            "image": "agentdeck:dev",
            "graceShutdownSeconds": 2,
            "drainTimeoutSeconds": 30,
            "env": [
                {"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"},
                {"name": "AGENTDECK_AGENT_POLL_INTERVAL_SECONDS", "value": "5"}
            ]
        });
        merge(&mut full, spec);
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name, "namespace": NS}, "spec": full
        }))
        .expect("pool");
        let pool = self
            .pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        common::install_agent_rbac(&self.client, &pool).await;
        if replicas > 0 {
            let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), NS);
            deployments
                .create(
                    &PostParams::default(),
                    &agent_deployment(&pool, replicas).expect("deployment builds"),
                )
                .await
                .expect("deployment created");
        }
        pool
    }

    /// A file the tasks append to (the count of their executions).
    fn marker(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    async fn task(&self, name: &str, pool: &str, script: &str) -> AgentTask {
        let task: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"pool": pool, "command": ["sh", "-c", script]}
        }))
        .expect("task");
        self.tasks
            .create(&PostParams::default(), &task)
            .await
            .expect("task created")
    }

    async fn get(&self, name: &str) -> AgentTask {
        self.tasks.get(name).await.expect("task exists")
    }

    async fn wait_task(&self, name: &str, what: &str, f: impl Fn(&AgentTask) -> bool) -> AgentTask {
        common::wait_task(&self.tasks, name, what, f).await
    }

    /// The running agent pods of `pool` with their IPs.
    async fn agents(&self, pool: &str, count: usize) -> Vec<(String, String)> {
        let start = Instant::now();
        loop {
            let pods = self
                .pods
                .list(&ListParams::default().labels(&format!("{LABEL_POOL}={pool}")))
                .await
                .expect("pods");
            let running: Vec<(String, String)> = pods
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| {
                    let s = p.status.as_ref()?;
                    (s.phase.as_deref() == Some("Running")).then_some(())?;
                    Some((p.metadata.name.clone()?, s.pod_ip.clone()?))
                })
                .collect();
            if running.len() >= count {
                return running;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{count} agents of {pool} never ran"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn logs(&self, pod: &str) -> String {
        self.pods
            .logs(pod, &LogParams::default())
            .await
            .unwrap_or_default()
    }
}

fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn healthz(ip: &str) -> Option<HealthReport> {
    let r = reqwest::Client::new()
        .get(format!("http://{ip}:8080/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    r.json().await.ok()
}

async fn wait_health(ip: &str, want: HealthStatus) -> HealthReport {
    let start = Instant::now();
    loop {
        let got = healthz(ip).await;
        if let Some(r) = got
            && r.status == want
        {
            return r;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{ip} never said {want:?}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn phase_is(p: TaskPhase) -> impl Fn(&AgentTask) -> bool {
    move |t| t.phase() == p
}

#[test]
fn two_agents_run_each_of_200_tasks_exactly_once() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        c.pool("busy", json!({}), 2).await;
        let agents = c.agents("busy", 2).await;
        for (_, ip) in &agents {
            let r = wait_health(ip, HealthStatus::Healthy).await;
            assert!(r.last_activity <= r.current_time);
        }
        let runs = c.marker("runs");
        let names: Vec<String> = (0..200).map(|i| format!("t{i:03}")).collect();
        futures::stream::iter(names.iter())
            .for_each_concurrent(16, |n| {
                let script = format!("echo {n} >> '{}'; echo out-{n}", runs.display());
                let c = &c;
                async move {
                    c.task(n, "busy", &script).await;
                }
            })
            .await;
        let start = Instant::now();
        let done = loop {
            let list = c.tasks.list(&ListParams::default()).await.expect("list");
            let finished = list
                .items
                .iter()
                .filter(|t| t.phase().is_finished())
                .count();
            if finished == names.len() {
                break list.items;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "only {finished} of 200 tasks finished"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let mut per_agent: BTreeMap<String, usize> = BTreeMap::new();
        for t in &done {
            let s = t.status.as_ref().expect("status");
            assert_eq!(s.phase, TaskPhase::Succeeded, "{:?}", t.metadata.name);
            assert_eq!(s.attempts, 1, "{:?}", t.metadata.name);
            assert_eq!(s.exit_code, Some(0));
            assert!(s.started_at.is_some() && s.finished_at.is_some());
            *per_agent
                .entry(s.agent.clone().unwrap_or_default())
                .or_default() += 1;
        }
        let agent_names: Vec<String> = agents.iter().map(|(n, _)| n.clone()).collect();
        assert!(
            per_agent.keys().all(|a| agent_names.contains(a)),
            "{per_agent:?} vs {agent_names:?}"
        );
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for l in lines(&runs) {
            *counts.entry(l).or_default() += 1;
        }
        for n in &names {
            assert_eq!(counts.get(n), Some(&1), "{n} ran {:?} times", counts.get(n));
        }
        assert_eq!(counts.len(), 200, "unexpected runs: {counts:?}");
        // Output reaches the pod log prefixed with the task name.
        let ran_on_first = done
            .iter()
            .find(|t| t.status.as_ref().and_then(|s| s.agent.as_deref()) == Some(&agent_names[0]))
            .and_then(|t| t.metadata.name.clone())
            .expect("the first agent ran a task");
        // The kubelet copies the agent's output into the pod log on its
        // own schedule: wait for the line.
        let line = format!("[{ran_on_first}] out-{ran_on_first}");
        common::eventually(&format!("{line:?} in the agent's log"), || async {
            c.logs(&agent_names[0]).await.contains(&line).then_some(())
        })
        .await;
    });
}

#[test]
fn a_task_sees_allowlisted_agent_variables_and_never_the_others() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        c.pool(
            "env",
            json!({
                "envForwardAllowlist": ["VISIBLE_SETTING", "KUBECONFIG"],
                // Debug logs on: even they must not carry a secret value.
                "debug": true,
                "env": [
                    {"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"},
                    {"name": "SECRET_API_KEY", "value": "s3cr3t-value"},
                    {"name": "VISIBLE_SETTING", "value": "visible-value"}
                ]
            }),
            1,
        )
        .await;
        let agents = c.agents("env", 1).await;
        let task: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "print-env", "namespace": NS},
            "spec": {"pool": "env", "command": ["env"], "env": [{"name": "OWN", "value": "own-value"}]}
        }))
        .expect("task");
        c.tasks
            .create(&PostParams::default(), &task)
            .await
            .expect("created");
        c.wait_task("print-env", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        let start = Instant::now();
        let log = loop {
            let log = c.logs(&agents[0].0).await;
            if log.contains("[print-env] OWN=own-value") {
                break log;
            }
            assert!(start.elapsed() < DEADLINE, "task output never in the log: {log}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let task_lines: Vec<&str> = log
            .lines()
            .filter(|l| l.starts_with("[print-env] "))
            .collect();
        assert!(
            task_lines.contains(&"[print-env] VISIBLE_SETTING=visible-value"),
            "{task_lines:?}"
        );
        assert!(
            task_lines.contains(&"[print-env] AGENTDECK_TASK=print-env"),
            "{task_lines:?}"
        );
        for secret in ["s3cr3t-value", "SECRET_API_KEY", "KUBECONFIG", "POOL_ID", "AGENTDECK_AGENT_"] {
            assert!(
                !task_lines.iter().any(|l| l.contains(secret)),
                "{secret} reached the task: {task_lines:?}"
            );
        }
        // Nor did the agent's own (debug) log lines print it.
        let agent_lines: Vec<&str> = log
            .lines()
            .filter(|l| !l.starts_with("[print-env] "))
            .collect();
        assert!(
            agent_lines.iter().any(|l| l.contains("DEBUG")),
            "debug logs were on: {agent_lines:?}"
        );
        assert!(
            !agent_lines.iter().any(|l| l.contains("s3cr3t-value")),
            "a secret value reached the agent's log: {agent_lines:?}"
        );
    });
}

#[test]
fn a_draining_agent_finishes_its_task_and_claims_nothing_new() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        c.pool("drain", json!({}), 1).await;
        let agents = c.agents("drain", 1).await;
        let ip = agents[0].1.clone();
        wait_health(&ip, HealthStatus::Healthy).await;
        let out = c.marker("drain");
        c.task(
            "first",
            "drain",
            &format!("sleep 2; echo first >> '{}'", out.display()),
        )
        .await;
        c.wait_task("first", "Running", phase_is(TaskPhase::Running))
            .await;
        c.pools
            .patch(
                "drain",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"drain": true}})),
            )
            .await
            .expect("drain");
        wait_health(&ip, HealthStatus::Draining).await;
        c.task(
            "second",
            "drain",
            &format!("echo second >> '{}'", out.display()),
        )
        .await;
        let first = c
            .wait_task("first", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        assert_eq!(first.status.and_then(|s| s.attempts.into()), Some(1));
        // Several poll and heartbeat periods pass without a claim.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(c.get("second").await.phase(), TaskPhase::Pending);
        assert_eq!(lines(&out), ["first"]);
        // The same agent claims again once the drain is lifted.
        c.pools
            .patch(
                "drain",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"drain": false}})),
            )
            .await
            .expect("undrain");
        c.wait_task("second", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        wait_health(&ip, HealthStatus::Healthy).await;
        assert_eq!(lines(&out), ["first", "second"]);
    });
}

/// A task that records its start, a SIGTERM and its end.
fn interruptible(out: &Path) -> String {
    let f = out.display();
    format!(
        "trap 'echo term >> \"{f}\"; exit 143' TERM; echo start >> '{f}'; \
         sleep 4 & wait $!; echo end >> '{f}'"
    )
}

#[test]
fn each_stop_mode_finishes_or_requeues_the_running_task() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        // `drain-timeout` drains, but its task outlasts the drain timeout.
        let modes = ["drain", "grace-shutdown", "force-shutdown", "drain-timeout"];
        for mode in modes {
            let spec = match mode {
                "drain-timeout" => json!({"onStop": "drain", "drainTimeoutSeconds": 1}),
                _ => json!({"onStop": mode}),
            };
            c.pool(mode, spec, 1).await;
        }
        let mut victims = Vec::new();
        for mode in modes {
            let agent = c.agents(mode, 1).await.remove(0).0;
            c.task(
                &format!("{mode}-task"),
                mode,
                &interruptible(&c.marker(mode)),
            )
            .await;
            victims.push(agent);
        }
        for (mode, agent) in modes.iter().zip(&victims) {
            let t = c
                .wait_task(&format!("{mode}-task"), "Running", |t| {
                    t.phase() == TaskPhase::Running && c.marker(mode).exists()
                })
                .await;
            assert_eq!(
                t.status.and_then(|s| s.agent).as_deref(),
                Some(agent.as_str())
            );
            // Graceful deletion: SIGTERM to the agent.
            c.pods
                .delete(agent, &DeleteParams::default())
                .await
                .expect("pod deleted");
        }
        for (mode, agent) in modes.iter().zip(&victims) {
            let name = format!("{mode}-task");
            let t = c
                .wait_task(&name, "Succeeded", phase_is(TaskPhase::Succeeded))
                .await;
            let s = t.status.expect("status");
            let runs = lines(&c.marker(mode));
            match *mode {
                "drain" => {
                    assert_eq!(s.attempts, 1, "{mode}: {s:?}");
                    assert_eq!(s.agent.as_deref(), Some(agent.as_str()));
                    assert_eq!(runs, ["start", "end"], "{mode}");
                }
                "grace-shutdown" | "drain-timeout" => {
                    assert_eq!(s.attempts, 2, "{mode}: {s:?}");
                    assert_ne!(s.agent.as_deref(), Some(agent.as_str()));
                    assert_eq!(runs, ["start", "term", "start", "end"], "{mode}");
                }
                _ => {
                    assert_eq!(s.attempts, 2, "{mode}: {s:?}");
                    assert_ne!(s.agent.as_deref(), Some(agent.as_str()));
                    assert_eq!(runs, ["start", "start", "end"], "{mode}");
                }
            }
        }
    });
}

#[test]
fn an_agent_killed_mid_task_leaves_it_running_with_a_stopped_heartbeat() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        // No replacement agent: this is the controller's recovery to do.
        c.pool("killed", json!({}), 1).await;
        let agent = c.agents("killed", 1).await.remove(0).0;
        c.task("long", "killed", "sleep 30").await;
        c.wait_task("long", "heartbeating", |t| {
            let s = t.status.clone().unwrap_or_default();
            s.phase == TaskPhase::Running && s.started_at.is_some()
        })
        .await;
        let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), NS);
        deployments
            .patch(
                "iac-agent-killed",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 0}})),
            )
            .await
            .expect("scaled down");
        c.pods
            .delete(agent.as_str(), &DeleteParams::default().grace_period(0))
            .await
            .expect("killed");
        // The kill lands on the kubelet's schedule: once a whole heartbeat
        // period (5 s) passes without one, the agent is gone.
        let after = common::eventually("the heartbeat to stop", || async {
            let before = c.get("long").await.status.expect("status");
            tokio::time::sleep(Duration::from_secs(6)).await;
            let after = c.get("long").await.status.expect("status");
            (after.last_heartbeat == before.last_heartbeat).then_some(after)
        })
        .await;
        assert_eq!(after.phase, TaskPhase::Running);
        assert_eq!(after.agent.as_deref(), Some(agent.as_str()));
    });
}

#[test]
fn debug_logs_switch_on_and_off_live_within_a_second() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        c.pool("dbg", json!({}), 1).await;
        let (pod, ip) = c.agents("dbg", 1).await.remove(0);
        wait_health(&ip, HealthStatus::Healthy).await;
        for (debug, level) in [(true, "debug"), (false, "info")] {
            let asked = jiff::Timestamp::now();
            c.pools
                .patch(
                    "dbg",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"debug": debug}})),
                )
                .await
                .expect("toggle");
            let needle = format!("log level switched to {level}");
            let start = Instant::now();
            let line = loop {
                let log = c.logs(&pod).await;
                if let Some(l) = log.lines().find(|l| l.contains(&needle)) {
                    break l.to_owned();
                }
                assert!(
                    start.elapsed() < DEADLINE,
                    "never switched to {level}: {log}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            // The agent's own timestamp on the line says when it switched.
            let at: jiff::Timestamp = line
                .split_whitespace()
                .next()
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| panic!("no timestamp in {line:?}"));
            let took = at.duration_since(asked);
            assert!(
                took < jiff::SignedDuration::from_secs(1),
                "switching to {level} took {took:?}"
            );
        }
        // The per-pod annotation switches it too.
        c.pods
            .patch(
                &pod,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"agentdeck.dev/debug": "true"}}}),
                ),
            )
            .await
            .expect("annotated");
        let start = Instant::now();
        while c
            .logs(&pod)
            .await
            .matches("log level switched to debug")
            .count()
            < 2
        {
            assert!(
                start.elapsed() < DEADLINE,
                "annotation did not switch debug on"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[test]
fn a_job_worker_hands_the_task_to_its_runner_and_reports_it_unless_already_claimed() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        let pool = c
            .pool(
                "jobs",
                json!({"executionMode": "job", "taskDefaults": {"runnerImage": "runner:1"}}),
                0,
            )
            .await;
        let jobs: Api<Job> = Api::namespaced(c.client.clone(), NS);
        let out = c.marker("job");
        let task = c
            .task(
                "via-job",
                "jobs",
                &format!(
                    "echo \"ran $AGENTDECK_TASK\" >> '{}'; exit 3",
                    out.display()
                ),
            )
            .await;
        jobs.create(
            &PostParams::default(),
            &task_job(&pool, &task).expect("job builds"),
        )
        .await
        .expect("job created");
        let t = c
            .wait_task("via-job", "Failed", phase_is(TaskPhase::Failed))
            .await;
        let s = t.status.expect("status");
        assert_eq!(s.exit_code, Some(3), "{s:?}");
        assert_eq!(s.attempts, 1);
        assert_eq!(lines(&out), ["ran via-job"]);

        // A task another pod already runs is left alone.
        let taken = c
            .task(
                "taken",
                "jobs",
                &format!("echo taken >> '{}'", out.display()),
            )
            .await;
        c.tasks
            .patch_status(
                "taken",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"phase": "Running", "agent": "someone-else", "attempts": 1}}),
                ),
            )
            .await
            .expect("claimed by another");
        let job = task_job(&pool, &taken).expect("job builds");
        let job_name = job.metadata.name.clone().expect("named");
        jobs.create(&PostParams::default(), &job)
            .await
            .expect("job created");
        let start = Instant::now();
        loop {
            let j = jobs.get(&job_name).await.expect("job");
            let st = j.status.unwrap_or_default();
            if st.succeeded.unwrap_or(0) > 0 || st.failed.unwrap_or(0) > 0 {
                assert_eq!(st.succeeded, Some(1), "{st:?}");
                break;
            }
            assert!(start.elapsed() < DEADLINE, "job never finished: {st:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let s = c.get("taken").await.status.expect("status");
        assert_eq!(s.agent.as_deref(), Some("someone-else"));
        assert_eq!(s.phase, TaskPhase::Running);
        assert_eq!(lines(&out), ["ran via-job"], "the taken task ran");
    });
}

#[test]
fn cancel_timeout_and_a_task_without_command_end_with_their_reasons() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        c.pool("ends", json!({"concurrency": 3}), 1).await;
        c.agents("ends", 1).await;
        let out = c.marker("ends");
        let f = out.display();
        c.task(
            "to-cancel",
            "ends",
            &format!("trap 'echo cancel-term >> \"{f}\"; exit 143' TERM; sleep 600 & wait $!"),
        )
        .await;
        let slow: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "too-slow", "namespace": NS},
            "spec": {"pool": "ends", "command": ["sleep", "600"], "timeoutSeconds": 1}
        }))
        .expect("task");
        c.tasks
            .create(&PostParams::default(), &slow)
            .await
            .expect("created");
        let op: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "op-only", "namespace": NS},
            "spec": {"pool": "ends", "operation": "plan"}
        }))
        .expect("task");
        c.tasks
            .create(&PostParams::default(), &op)
            .await
            .expect("created");

        c.wait_task("to-cancel", "started", |t| {
            t.status.as_ref().is_some_and(|s| s.started_at.is_some())
        })
        .await;
        c.tasks
            .patch(
                "to-cancel",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await
            .expect("cancel");
        // The task would sleep 600 s: ending within wait_task's deadline
        // (a fifth of that) with the trap's line shows the cancel stopped it.
        let t = c
            .wait_task("to-cancel", "Cancelled", phase_is(TaskPhase::Cancelled))
            .await;
        assert_eq!(lines(&out), ["cancel-term"], "SIGTERM reached the task");
        assert!(
            t.status
                .and_then(|s| s.message)
                .is_some_and(|m| m.starts_with("cancelled after"))
        );

        let t = c
            .wait_task("too-slow", "Failed", phase_is(TaskPhase::Failed))
            .await;
        let s = t.status.expect("status");
        assert_eq!(s.message.as_deref(), Some("timed out after 1s"));
        let ran = s
            .finished_at
            .expect("finished")
            .0
            .duration_since(s.claimed_at.expect("claimed").0);
        // Generous for a busy machine, far below the 600 s the command asks.
        assert!(ran < jiff::SignedDuration::from_secs(120), "ran {ran:?}");

        let t = c
            .wait_task("op-only", "Errored", phase_is(TaskPhase::Errored))
            .await;
        let msg = t.status.and_then(|s| s.message).unwrap_or_default();
        assert!(msg.contains("\"plan\"") && msg.contains("command"), "{msg}");
    });
}

#[test]
fn a_single_run_agent_exits_cleanly_after_one_task() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        c.pool(
            "once",
            json!({"env": [
                {"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"},
                {"name": "AGENTDECK_AGENT_SINGLE_RUN", "value": "true"}
            ]}),
            1,
        )
        .await;
        let (pod, _) = c.agents("once", 1).await.remove(0);
        let out = c.marker("once");
        for name in ["one", "two"] {
            c.task(name, "once", &format!("echo {name} >> '{}'", out.display()))
                .await;
        }
        // The container exits 0 after its task and is restarted (restart
        // policy Always), so the same pod runs the second task.
        for name in ["one", "two"] {
            let t = c
                .wait_task(name, "Succeeded", phase_is(TaskPhase::Succeeded))
                .await;
            assert_eq!(
                t.status.and_then(|s| s.agent).as_deref(),
                Some(pod.as_str())
            );
        }
        let p = c.pods.get(&pod).await.expect("pod");
        let cs = p
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|v| v.into_iter().next())
            .expect("container status");
        assert!(cs.restart_count >= 1, "{cs:?}");
        let last = cs
            .last_state
            .and_then(|s| s.terminated)
            .expect("a terminated instance");
        assert_eq!(last.exit_code, 0, "{last:?}");
        let mut ran = lines(&out);
        ran.sort();
        assert_eq!(ran, ["one", "two"]);
    });
}

#[test]
fn an_agent_outside_a_pool_pod_says_what_to_set_and_exits_2() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .arg("agent")
        .env_clear()
        .env("HOSTNAME", "somewhere")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("POOL_NAME is not set"), "{err}");
}

#[test]
fn an_agent_that_cannot_reach_the_api_reports_unhealthy_until_it_can() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client).await;
        c.pool("flaky", json!({}), 1).await;
        let (_, ip) = c.agents("flaky", 1).await.remove(0);
        let healthy = wait_health(&ip, HealthStatus::Healthy).await;
        let faults = &sb.sandbox().api().faults;
        faults.fail(agentdeck::sandbox::faults::FailRule {
            path_prefix: "/apis/agentdeck.dev".into(),
            method: None,
            // Not 503: kube's client retries those itself before failing.
            code: 500,
            count: 100_000,
        });
        faults.drop_watches();
        wait_health(&ip, HealthStatus::Unhealthy).await;
        let code = reqwest::get(format!("http://{ip}:8080/healthz"))
            .await
            .expect("answers")
            .status();
        assert_eq!(code.as_u16(), 503, "unhealthy answers 503");
        faults.clear();
        wait_health(&ip, HealthStatus::Healthy).await;
        // And it works again: a new task is claimed and run.
        c.task("after-outage", "flaky", "true").await;
        c.wait_task("after-outage", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        let now = healthz(&ip).await.expect("answers");
        assert!(
            now.last_activity > healthy.last_activity,
            "the run is activity"
        );
    });
}

/// A finished run's output goes into a ConfigMap of the task's own, not the
/// task (whose every watcher would pay for it), summarized in
/// `status.output`, and goes with the task; an agent whose Role predates
/// that (no `create` on ConfigMaps) keeps it in `status.outputTail`.
#[test]
fn a_tasks_output_is_kept_in_its_own_config_map_or_with_an_old_role_in_its_status() {
    use agentdeck::crd::output;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::Role;
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let c = Cluster::new(client.clone()).await;
        let old = c.pool("old-role", json!({}), 0).await;
        // The Role as agentdeck rendered it before the output moved.
        let (_, role, _) = agentdeck::plan::manifests::agent_rbac(&old).expect("rbac");
        let roles: Api<Role> = Api::namespaced(client.clone(), NS);
        let mut before = roles
            .get(&role.metadata.name.clone().unwrap_or_default())
            .await
            .expect("role");
        before.rules.as_mut().expect("rules").retain(|r| {
            !r.resources
                .as_ref()
                .is_some_and(|rs| rs.iter().any(|x| x == "configmaps"))
        });
        roles
            .replace(
                &before.metadata.name.clone().unwrap_or_default(),
                &PostParams::default(),
                &before,
            )
            .await
            .expect("role replaced");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
        deployments
            .create(
                &PostParams::default(),
                &agent_deployment(&old, 1).expect("deployment"),
            )
            .await
            .expect("deployment");
        c.pool("new-role", json!({}), 1).await;
        let script = "for i in 1 2 3; do echo line $i; done; echo 'Plan: 1 to add'";
        c.task("kept-apart", "new-role", script).await;
        c.task("kept-inside", "old-role", script).await;
        let want = "line 1\nline 2\nline 3\nPlan: 1 to add";

        let t = c
            .wait_task("kept-apart", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        let st = t.status.clone().expect("status");
        assert_eq!(st.output_tail, None, "the output is not in the task");
        let summary = st.output.clone().expect("status.output");
        assert_eq!(summary.config_map, "kept-apart-output-1");
        assert_eq!(
            (summary.lines, summary.last_line.as_str()),
            (4, "Plan: 1 to add")
        );
        let found = output::read(&client, &t)
            .await
            .expect("read")
            .expect("kept");
        assert_eq!(
            found,
            output::Found::ConfigMap(summary.config_map.clone(), want.to_owned())
        );

        let t = c
            .wait_task("kept-inside", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        let st = t.status.clone().expect("status");
        assert_eq!(
            (st.output_tail.as_deref(), st.output.as_ref()),
            (Some(want), None)
        );
        let found = output::read(&client, &t)
            .await
            .expect("read")
            .expect("kept");
        assert_eq!(found, output::Found::Status(want.to_owned()));

        // The ConfigMap goes with its task (the garbage collector, by owner).
        c.tasks
            .delete("kept-apart", &DeleteParams::default())
            .await
            .expect("task deleted");
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
        let start = Instant::now();
        while cms
            .get_opt(&summary.config_map)
            .await
            .expect("get")
            .is_some()
        {
            assert!(
                start.elapsed() < DEADLINE,
                "the output ConfigMap outlived its task"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}
