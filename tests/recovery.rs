//! The controller and real agents together: the controller runs in-process
//! (the library API the daemon uses), the sandbox's kubelet runs the pods
//! of the controller's Deployments and Jobs as real `agentdeck agent`
//! processes, and job-mode runners as the real runner script in `sh`.
//! Tasks append to a marker file on the host, so "exactly once" is counted,
//! not inferred from status.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::controller;
use agentdeck::crd::{AgentPool, AgentTask, LABEL_POOL, LABEL_TASK, TaskPhase, crds};
use common::{TestSandbox, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

fn start_sandbox() -> TestSandbox {
    static EXE: Once = Once::new();
    EXE.call_once(|| {
        // SAFETY: set once, before any sandbox (and so any thread reading
        // the variable) exists; other tests wait on the Once.
        unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    TestSandbox::start()
}

/// Fast probes and a short offline threshold, so recovery takes seconds;
/// the threshold still leaves a loaded machine's slow answers some room.
fn config() -> Config {
    let mut c = Config {
        resync_interval_seconds: 2,
        controller_namespace: NS.into(),
        ..Config::default()
    };
    c.leader_election.enabled = false;
    c.health_probe.interval_seconds = 1;
    c.health_probe.offline_after_seconds = 8;
    c
}

struct World {
    client: kube::Client,
    cancel: CancellationToken,
    controller: controller::ControllerHandle,
    dir: tempfile::TempDir,
}

impl World {
    async fn start(client: kube::Client) -> World {
        let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crds() {
            crd_api
                .create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        let cancel = CancellationToken::new();
        let conn = Connection {
            client: client.clone(),
            namespace: NS.into(),
            streams: None,
        };
        let controller = controller::start(conn, &config(), cancel.clone());
        World {
            client,
            cancel,
            controller,
            // Outside /tmp: agent containers have a volume of their own there.
            dir: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir"),
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.controller.join()).await;
    }

    fn tasks(&self) -> Api<AgentTask> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// A file the tasks append to, on the host (the sandbox's processes
    /// share its file system).
    fn marker(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A pool of real agents: 1 s heartbeats and polls, 2 s stop grace.
    async fn pool(&self, name: &str, spec: Value) {
        let mut full = json!({
            "image": "agentdeck:dev",
            "graceShutdownSeconds": 2,
            "env": [
                {"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"},
                {"name": "AGENTDECK_AGENT_POLL_INTERVAL_SECONDS", "value": "1"}
            ]
        });
        for (k, v) in spec.as_object().expect("spec object") {
            full[k] = v.clone();
        }
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name, "namespace": NS}, "spec": full
        }))
        .expect("pool");
        Api::<AgentPool>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
    }

    async fn task(&self, name: &str, pool: &str, script: &str, extra: Value) {
        let mut spec = json!({"pool": pool, "command": ["sh", "-c", script]});
        for (k, v) in extra.as_object().expect("extra object") {
            spec[k] = v.clone();
        }
        let task: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": name, "namespace": NS}, "spec": spec
        }))
        .expect("task");
        self.tasks()
            .create(&PostParams::default(), &task)
            .await
            .expect("task created");
    }

    async fn get(&self, name: &str) -> AgentTask {
        self.tasks().get(name).await.expect("task exists")
    }

    async fn wait_task(&self, name: &str, what: &str, f: impl Fn(&AgentTask) -> bool) -> AgentTask {
        common::wait_task(&self.tasks(), name, what, f).await
    }

    /// The Running, not terminating agent pods of `pool` (name → IP).
    async fn agents(&self, pool: &str) -> BTreeMap<String, String> {
        let pods = self
            .pods()
            .list(&ListParams::default().labels(&format!("{LABEL_POOL}={pool}")))
            .await
            .expect("pods");
        pods.items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                let s = p.status.as_ref()?;
                (s.phase.as_deref() == Some("Running")).then_some(())?;
                Some((p.metadata.name.clone()?, s.pod_ip.clone()?))
            })
            .collect()
    }

    async fn events(&self, object: &str, reason: &str) -> Vec<String> {
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
            .map(|e| e.note.unwrap_or_default())
            .collect()
    }

    /// The pod of a job-mode task (it carries the task's label).
    async fn task_pods(&self, task: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels(&format!("{LABEL_TASK}={task}")))
            .await
            .expect("pods")
            .items
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn status(t: &AgentTask) -> agentdeck::crd::AgentTaskStatus {
    t.status.clone().unwrap_or_default()
}

fn phase_is(p: TaskPhase) -> impl Fn(&AgentTask) -> bool {
    move |t| t.status.as_ref().is_some_and(|s| s.phase == p)
}

/// The container `name`'s terminated exit code, once it has one.
fn exit_code(pod: &Pod, name: &str) -> Option<i32> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)?
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

#[test]
fn a_task_whose_agent_is_killed_mid_run_is_requeued_and_finished_once_by_another() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let w = World::start(client).await;
        w.pool("rescue", json!({"minReplicas": 2, "maxReplicas": 2}))
            .await;
        eventually("two agents running", || async {
            (w.agents("rescue").await.len() == 2).then_some(())
        })
        .await;
        let marker = w.marker("rescue");
        let m = marker.display();
        w.task(
            "long",
            "rescue",
            &format!("echo start-$AGENTDECK_TASK_ATTEMPT >> '{m}'; sleep 5; echo end >> '{m}'"),
            json!({}),
        )
        .await;
        let first = w
            .wait_task("long", "started", |t| {
                let s = status(t);
                s.phase == TaskPhase::Running && s.started_at.is_some()
            })
            .await;
        let victim = status(&first).agent.expect("an agent runs it");
        eventually("the first attempt to start", || async {
            (lines(&marker) == ["start-1"]).then_some(())
        })
        .await;

        // No grace: as `kubectl delete pod --grace-period=0 --force`.
        w.pods()
            .delete(&victim, &DeleteParams::default().grace_period(0))
            .await
            .expect("agent pod deleted");

        let done = w
            .wait_task("long", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        let s = status(&done);
        assert_eq!(s.attempts, 2, "{s:?}");
        assert_eq!(s.exit_code, Some(0), "{s:?}");
        let finisher = s.agent.clone().expect("finished by an agent");
        assert_ne!(finisher, victim, "the killed agent cannot have finished it");
        eventually(
            &format!("a Requeued event naming the gone agent {victim}"),
            || async {
                let requeued = w.events("long", "Requeued").await;
                requeued.iter().any(|n| n.contains(&victim)).then_some(())
            },
        )
        .await;
        // The second attempt ran for 5 s after the first started, so a
        // first attempt that outlived its agent would have ended by now.
        assert_eq!(lines(&marker), ["start-1", "start-2", "end"]);
        w.stop().await;
    });
}

/// The pid of the `agentdeck agent` process of pod `pod` (the sandbox runs
/// it on this machine with the pod's environment).
fn agent_pid(pod: &str) -> Option<i32> {
    let want = format!("IAC_AGENT_NAME={pod}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        (args.get(1) == Some(&b"agent".as_slice())).then_some(())?;
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        environ
            .split(|b| *b == 0)
            .any(|kv| kv == want.as_bytes())
            .then_some(pid)
    })
}

#[test]
fn a_task_whose_agent_process_dies_mid_run_is_not_left_running_by_the_restarted_agent() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let w = World::start(client).await;
        w.pool("crash", json!({"minReplicas": 1, "maxReplicas": 1}))
            .await;
        eventually("an agent running", || async {
            (w.agents("crash").await.len() == 1).then_some(())
        })
        .await;
        let marker = w.marker("crash");
        let m = marker.display();
        w.task(
            "long",
            "crash",
            &format!("echo start-$AGENTDECK_TASK_ATTEMPT >> '{m}'; sleep 4; echo end >> '{m}'"),
            json!({}),
        )
        .await;
        let first = w
            .wait_task("long", "started", |t| status(t).started_at.is_some())
            .await;
        let agent = status(&first).agent.expect("an agent runs it");
        eventually("the first attempt to start", || async {
            (lines(&marker) == ["start-1"]).then_some(())
        })
        .await;
        let pid = agent_pid(&agent).expect("the agent's process");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("SIGKILL");

        // The pod stays; its container restarts with the same agent name.
        let done = w
            .wait_task("long", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        let s = status(&done);
        assert_eq!(s.attempts, 2, "{s:?}");
        assert_eq!(lines(&marker), ["start-1", "start-2", "end"]);
        w.stop().await;
    });
}

#[test]
fn an_idle_agent_stays_fresh_past_the_offline_threshold() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let w = World::start(client).await;
        w.pool("idle", json!({"minReplicas": 1, "maxReplicas": 1}))
            .await;
        let ip = eventually("an agent running", || async {
            w.agents("idle").await.into_values().next()
        })
        .await;
        eventually("the agent to answer", || healthz(&ip)).await;
        // No task, and once the pool's status settles no watch event
        // either: only its polls show the agent is alive. Watched for
        // longer than the offline threshold (8 s) after settling.
        let watched = Instant::now();
        while watched.elapsed() < Duration::from_secs(20) {
            if let Some(r) = healthz(&ip).await {
                let idle_for = r.current_time.duration_since(r.last_activity);
                assert!(
                    idle_for < jiff::SignedDuration::from_secs(6),
                    "idle for {idle_for:?} after {:?}: near the 8 s offline threshold",
                    watched.elapsed()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let pools = Api::<AgentPool>::namespaced(w.client.clone(), NS);
        eventually("the pool's status counting the agent fresh", || async {
            let health = pools.get("idle").await.expect("pool").status?.health;
            ((health.fresh, health.offline) == (1, 0)).then_some(())
        })
        .await;
        w.stop().await;
    });
}

async fn healthz(ip: &str) -> Option<agentdeck::health::HealthReport> {
    reqwest::Client::new()
        .get(format!("http://{ip}:8080/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

/// An agent the prober cannot reach, but which keeps heartbeating its task
/// through the API, keeps the task: `plan::pool::recovery` only requeues for
/// an offline agent once the task's own heartbeat is older than the offline
/// threshold (the probe's verdict lags by an interval, and a requeue would
/// kill the run and burn the attempts in seconds). Here the agent serves its
/// health on another port than the pool's `healthPort`, as a network policy
/// or a wedged health server would make it look.
#[test]
fn a_heartbeating_task_is_not_requeued_because_its_agent_misses_health_probes() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let w = World::start(client).await;
        w.pool(
            "deaf",
            json!({
                "minReplicas": 1,
                "maxReplicas": 1,
                "env": [
                    {"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"},
                    {"name": "AGENTDECK_AGENT_POLL_INTERVAL_SECONDS", "value": "1"},
                    {"name": "AGENTDECK_AGENT_HEALTH_PORT", "value": "8089"}
                ]
            }),
        )
        .await;
        let marker = w.marker("deaf");
        let m = marker.display();
        w.task(
            "long",
            "deaf",
            &format!("echo start >> '{m}'; sleep 14; echo end >> '{m}'"),
            json!({}),
        )
        .await;
        let done = w
            .wait_task("long", "finished", |t| status(t).phase.is_finished())
            .await;
        let s = status(&done);
        assert_eq!((s.phase, s.attempts), (TaskPhase::Succeeded, 1), "{s:?}");
        assert_eq!(lines(&marker), ["start", "end"]);
        w.stop().await;
    });
}

#[test]
fn forty_tasks_on_an_autoscaled_pool_run_once_each_and_the_pool_returns_to_min() {
    const TASKS: usize = 40;
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let w = World::start(client).await;
        // A short window, so the return to min comes within the test.
        w.pool(
            "burst",
            json!({"minReplicas": 1, "maxReplicas": 4, "cooldownSeconds": {"up": 0, "down": 3},
                   "scaleDownStabilizationSeconds": 3}),
        )
        .await;
        eventually("the first agent running", || async {
            (!w.agents("burst").await.is_empty()).then_some(())
        })
        .await;
        let marker = w.marker("burst");
        let m = marker.display();
        for i in 0..TASKS {
            w.task(
                &format!("t-{i:02}"),
                "burst",
                &format!("echo $AGENTDECK_TASK >> '{m}'; sleep 0.5"),
                json!({}),
            )
            .await;
        }

        let deployments: Api<Deployment> = Api::namespaced(w.client.clone(), NS);
        let most = std::cell::Cell::new(0);
        let tasks = eventually("every task to finish", || {
            let deployments = deployments.clone();
            let tasks = w.tasks();
            let most = &most;
            async move {
                if let Ok(d) = deployments.get("iac-agent-burst").await {
                    let r = d.spec.and_then(|s| s.replicas).unwrap_or(0);
                    most.set(most.get().max(r));
                }
                let list = tasks.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .all(|t| status(t).phase.is_finished())
                    .then_some(list.items)
            }
        })
        .await;
        let most = most.get();
        assert_eq!(tasks.len(), TASKS);
        assert!(most > 1, "the pool never scaled up (most {most} replicas)");
        assert!(most <= 4, "above maxReplicas: {most}");
        for t in &tasks {
            let s = status(t);
            let name = t.metadata.name.as_deref().unwrap_or("?");
            assert_eq!(s.phase, TaskPhase::Succeeded, "{name}: {s:?}");
            assert_eq!(s.attempts, 1, "{name} was requeued: {s:?}");
        }
        let mut ran = lines(&marker);
        ran.sort();
        let want: Vec<String> = (0..TASKS).map(|i| format!("t-{i:02}")).collect();
        assert_eq!(ran, want, "each task ran exactly once");

        eventually("the pool back at one agent", || async {
            let d = deployments.get("iac-agent-burst").await.ok()?;
            let replicas = d.spec.and_then(|s| s.replicas)?;
            (replicas == 1 && w.agents("burst").await.len() == 1).then_some(())
        })
        .await;
        for t in &tasks {
            let name = t.metadata.name.as_deref().unwrap_or("?");
            assert_eq!(
                w.events(name, "Requeued").await,
                Vec::<String>::new(),
                "scale-down took {name} from a busy agent"
            );
        }
        assert_eq!(lines(&marker).len(), TASKS, "nothing ran again");
        w.stop().await;
    });
}

#[test]
fn job_mode_runs_each_task_in_one_job_with_the_real_worker_and_runner() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let w = World::start(client).await;
        w.pool(
            "jobs",
            json!({
                "executionMode": "job",
                "minReplicas": 0,
                "maxReplicas": 4,
                // Long, so that what the worker's SIGTERM does at once is far
                // from what SIGKILL after the grace, or the Job's deadline
                // (timeout + grace), would do.
                "graceShutdownSeconds": 120,
                "taskDefaults": {"runnerImage": "runner:1", "ttlSecondsAfterFinished": 600}
            }),
        )
        .await;
        let marker = w.marker("jobs");
        let m = marker.display();
        w.task(
            "ok",
            "jobs",
            &format!("echo out-of-ok; echo ok >> '{m}'"),
            json!({}),
        )
        .await;
        w.task(
            "bad",
            "jobs",
            &format!("echo out-of-bad; echo bad >> '{m}'; exit 3"),
            json!({}),
        )
        .await;
        // Stopped by its worker at the timeout: SIGTERM, well before the
        // Job's own deadline (timeout + the 120 s grace) would end the pod.
        w.task(
            "slow",
            "jobs",
            &format!("echo slow >> '{m}'; exec sleep 300"),
            json!({"timeoutSeconds": 2}),
        )
        .await;
        w.task("to-cancel", "jobs", "exec sleep 300", json!({}))
            .await;

        let ok = w
            .wait_task("ok", "Succeeded", phase_is(TaskPhase::Succeeded))
            .await;
        assert_eq!(status(&ok).exit_code, Some(0), "{:?}", ok.status);
        let bad = w
            .wait_task("bad", "Failed", phase_is(TaskPhase::Failed))
            .await;
        assert_eq!(status(&bad).exit_code, Some(3), "{:?}", bad.status);
        for (task, out) in [("ok", "out-of-ok"), ("bad", "out-of-bad")] {
            let pods = w.task_pods(task).await;
            assert_eq!(pods.len(), 1, "{task}: one pod");
            let pod = pods[0].metadata.name.clone().expect("named");
            let logs = w
                .pods()
                .logs(
                    &pod,
                    &LogParams {
                        // The worker prints the task's output (redacted);
                        // the runner's own log has none.
                        container: Some("worker".into()),
                        ..LogParams::default()
                    },
                )
                .await
                .expect("worker logs");
            assert!(logs.contains(out), "{task} worker log: {logs:?}");
        }

        let started = Instant::now();
        let slow = w
            .wait_task("slow", "Failed", phase_is(TaskPhase::Failed))
            .await;
        let s = status(&slow);
        assert_eq!(s.message.as_deref(), Some("timed out after 2s"), "{s:?}");
        let runner_code = eventually("the slow task's pod to finish", || async {
            let pods = w.task_pods("slow").await;
            let pod = pods.first()?;
            assert!(
                pod.metadata.deletion_timestamp.is_none(),
                "the pod was deleted instead of its runner stopping"
            );
            exit_code(pod, "runner")
        })
        .await;
        assert_eq!(runner_code, 128 + 15, "the runner's task got SIGTERM");
        // Generous for a busy machine, half the Job's deadline.
        assert!(
            started.elapsed() < Duration::from_secs(61),
            "the runner outlived the timeout towards the Job deadline: {:?}",
            started.elapsed()
        );

        w.wait_task("to-cancel", "started", |t| status(t).started_at.is_some())
            .await;
        let pods = w.task_pods("to-cancel").await;
        let pod = pods
            .first()
            .and_then(|p| p.metadata.name.clone())
            .expect("the task's pod");
        w.tasks()
            .patch(
                "to-cancel",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await
            .expect("cancel");
        let asked = Instant::now();
        let cancelled = w
            .wait_task("to-cancel", "Cancelled", phase_is(TaskPhase::Cancelled))
            .await;
        // The worker, which stopped the runner, reports it (not the
        // controller cutting the Job away underneath it).
        let message = status(&cancelled).message.clone().unwrap_or_default();
        assert!(message.starts_with("cancelled after"), "{message}");
        eventually("the cancelled task's pod to finish", || async {
            match w.pods().get_opt(&pod).await.expect("pod read") {
                None => Some(()),
                Some(p) => exit_code(&p, "runner").map(|_| ()),
            }
        })
        .await;
        // SIGTERM ends `sleep` at once; only SIGKILL after the 120 s grace
        // (or the sleep's 300 s) would take longer than this generous bound.
        assert!(
            asked.elapsed() < Duration::from_secs(60),
            "the runner ran on for {:?} after the cancel",
            asked.elapsed()
        );

        for task in ["ok", "bad", "slow", "to-cancel"] {
            let jobs = w
                .jobs()
                .list(&ListParams::default().labels(&format!("{LABEL_TASK}={task}")))
                .await
                .expect("jobs");
            // The controller deletes a cancelled task's Job.
            let want = if task == "to-cancel" { 0..=1 } else { 1..=1 };
            assert!(
                want.contains(&jobs.items.len()),
                "{task}: {} Jobs",
                jobs.items.len()
            );
            let t = w.get(task).await;
            assert_eq!(status(&t).attempts, 1, "{task}: {:?}", t.status);
        }
        let mut ran = lines(&marker);
        ran.sort();
        assert_eq!(ran, ["bad", "ok", "slow"], "each task ran once");
        w.stop().await;
    });
}
