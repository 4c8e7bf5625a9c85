//! A task's output in the console, end to end: real agents (this build's
//! binary) on a sandbox, the console leading under tmux at 80×24, its log
//! view read with `capture-pane`. Bytes that are not UTF-8 do not end the
//! view, a finished task's output ends with its own line while its agent
//! lives on, and the output is still there once the agent pod is gone.

mod common;

use std::process::Command;

use agentdeck::crd::{AgentPool, AgentTask, TaskPhase};
use common::{TestSandbox, eventually_blocking};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, CustomResourceExt};
use serde_json::json;

/// The console under tmux (its own server, killed on drop).
struct Tmux {
    socket: String,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn start(env: &[(&str, &str)], w: u16, h: u16) -> Tmux {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = format!("agentdeck-out-{}-{}", std::process::id(), fastrand::u32(..));
        let mut line = format!("env HOME={d} XDG_CONFIG_HOME={d}", d = dir.path().display());
        for (k, v) in env {
            line.push_str(&format!(" {k}={v}"));
        }
        line.push_str(&format!(
            " {}; echo EXIT=$?; sleep 600",
            env!("CARGO_BIN_EXE_agentdeck")
        ));
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-s", "t", "-x", &w.to_string(), "-y", &h.to_string()])
            .arg(line)
            .current_dir(dir.path())
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux new-session failed");
        Tmux { socket, _dir: dir }
    }

    fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "t"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn send(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "t"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    fn type_text(&self, text: &str) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-l", "-t", "t", text])
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// Waits until the screen satisfies `ok`; the last screen is in the panic.
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            eventually_blocking(what, || {
                let s = self.screen();
                let hit = ok(&s);
                assert!(hit || !s.contains("EXIT="), "the console exited:\n{s}");
                last = s.clone();
                hit.then_some(s)
            })
        }));
        match found {
            Ok(s) => s,
            Err(_) => panic!("timed out waiting for {what}; screen:\n{last}"),
        }
    }

    /// Opens the log of task `name` from the tasks view (filtered to it).
    fn open_task_log(&self, name: &str) -> String {
        // Out of a log view first; a key sent right after Escape would read
        // as alt-key.
        self.send(&["Escape"]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        self.send(&["3"]);
        self.wait("the tasks view", |s| s.contains("Tasks ["));
        self.send(&["/"]);
        self.send(&["C-u"]);
        self.type_text(name);
        self.send(&["Enter"]);
        self.wait(&format!("tasks narrowed to {name}"), |s| {
            s.contains("Tasks [1/") && s.contains(name)
        });
        self.send(&["Enter"]);
        self.wait(&format!("the log of {name}"), |s| {
            s.contains(&format!("Logs: task {name}"))
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// A sandbox whose `agentdeck` containers run this build, with the CRDs
/// and a pool `out` in `mode` (deployment: one agent).
fn sandbox_with_agents(mode: &str) -> TestSandbox {
    let sb = TestSandbox::start_with(agentdeck::sandbox::kubelet::KubeletConfig {
        exe: env!("CARGO_BIN_EXE_agentdeck").into(),
        ..agentdeck::sandbox::kubelet::KubeletConfig::from_env()
    });
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
            "metadata": {"name": "out", "namespace": "default"},
            "spec": {
                "image": "agentdeck:dev", "executionMode": mode,
                "minReplicas": i32::from(mode == "deployment"), "maxReplicas": 1,
                "graceShutdownSeconds": 1,
                "taskDefaults": {"runnerImage": "runner:1"},
                "env": [
                    {"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"},
                    {"name": "AGENTDECK_AGENT_POLL_INTERVAL_SECONDS", "value": "2"}
                ]
            }
        }))
        .expect("pool");
        let pool = pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        common::install_agent_rbac(&client, &pool).await;
    });
    sb
}

fn create_task(sb: &TestSandbox, name: &str, script: &str) {
    let tasks: Api<AgentTask> = Api::namespaced(sb.client(), "default");
    let task: AgentTask = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": name},
        "spec": {"pool": "out", "command": ["sh", "-c", script]}
    }))
    .expect("task");
    sb.rt
        .block_on(tasks.create(&PostParams::default(), &task))
        .expect("task created");
}

/// The task's phase and agent, once `ok` holds.
fn wait_task(sb: &TestSandbox, name: &str, ok: impl Fn(TaskPhase) -> bool) -> String {
    let tasks: Api<AgentTask> = Api::namespaced(sb.client(), "default");
    eventually_blocking(&format!("task {name}"), || {
        let st = sb.rt.block_on(tasks.get(name)).ok()?.status?;
        ok(st.phase).then_some(st.agent?)
    })
}

/// The console on `sb` at 80×24, its own controller leading (with its
/// state directory, kept while it runs).
fn console_leading(sb: &TestSandbox) -> (Tmux, tempfile::TempDir) {
    let kubeconfig = sb.kubeconfig.display().to_string();
    let state = tempfile::tempdir().expect("state dir");
    let state_dir = state.path().display().to_string();
    let t = Tmux::start(
        &[
            ("KUBECONFIG", &kubeconfig),
            ("XDG_STATE_HOME", &state_dir),
            ("AGENTDECK_CONTROLLER_NAMESPACE", "default"),
        ],
        80,
        24,
    );
    t.wait("the pools view", |s| s.contains("Pools [1/1]"));
    (t, state)
}

#[test]
fn a_tasks_output_survives_bad_bytes_and_its_agent_pod() {
    let sb = sandbox_with_agents("deployment");
    let (t, _state) = console_leading(&sb);
    // Bytes that are not UTF-8, then a line after them; then a zero-width
    // joiner, which must not reach the terminal.
    create_task(
        &sb,
        "bad-bytes",
        r"printf 'before\n\377\376\nafter-bad-bytes\nzero\342\200\215width\n'",
    );
    let agent = wait_task(&sb, "bad-bytes", |p| p == TaskPhase::Succeeded);

    // Read from the live agent's log: every line, the bad bytes shown as
    // U+FFFD, and the task's own end line (the agent lives on).
    t.open_task_log("bad-bytes");
    let s = t.wait("the lines after the bad bytes and the task's end", |s| {
        s.contains("after-bad-bytes") && s.contains("task bad-bytes Succeeded at")
    });
    assert!(s.contains("before"), "{s}");
    assert!(s.contains("zerowidth"), "the joiner is removed: {s}");
    assert!(!s.contains("\u{200d}"), "{s}");
    assert!(!s.contains("the container ended"), "{s}");
    assert!(!s.contains("valid UTF-8"), "{s}");

    // Opened while it runs, on the agent that lives on: its lines as they
    // come, then its own end line once it is finished.
    create_task(&sb, "steps", "echo step-one; sleep 3; echo step-two");
    wait_task(&sb, "steps", |p| p == TaskPhase::Running);
    t.open_task_log("steps");
    let s = t.wait("the first step while it runs", |s| s.contains("step-one"));
    assert!(!s.contains("step-two"), "{s}");
    let s = t.wait("the second step and the task's end", |s| {
        s.contains("step-two") && s.contains("task steps Succeeded at")
    });
    assert!(!s.contains("the container ended"), "{s}");

    // A running task's log is open when its agent pod is deleted: its
    // lines stay, and the view says the pod went.
    create_task(&sb, "slow", "echo slow-started; sleep 600");
    let slow_agent = wait_task(&sb, "slow", |p| p == TaskPhase::Running);
    assert_eq!(slow_agent, agent, "one agent runs both");
    t.open_task_log("slow");
    t.wait("the slow task's first line", |s| s.contains("slow-started"));
    let pods: Api<Pod> = Api::namespaced(sb.client(), "default");
    sb.rt
        .block_on(pods.delete(&agent, &DeleteParams::default().grace_period(0)))
        .expect("agent pod deleted");
    eventually_blocking("the agent pod gone from the API", || {
        let list = sb
            .rt
            .block_on(pods.list(&ListParams::default().labels("agentdeck.dev/pool=out")))
            .ok()?;
        (!list
            .items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(&agent)))
        .then_some(())
    });
    let s = t.wait("the view says the pod went, its lines still there", |s| {
        s.contains(&format!("pod {}", &agent[..agent.len().min(20)])) && s.contains("is gone")
    });
    assert!(s.contains("slow-started"), "{s}");

    // Opened after the pod is gone: the kept output, said to be so.
    let s = t.open_task_log("bad-bytes");
    let s = if s.contains("after-bad-bytes") {
        s
    } else {
        t.wait("the kept output", |s| s.contains("after-bad-bytes"))
    };
    assert!(s.contains("from the kept output (the pod is gone)"), "{s}");
    assert!(!s.contains("cannot read the log"), "{s}");
    t.send(&["q"]);
    t.wait("the console quit", |s| s.contains("EXIT=0"));
}

#[test]
fn a_job_mode_tasks_output_survives_bad_bytes_and_its_job_pod() {
    let sb = sandbox_with_agents("job");
    let (t, _state) = console_leading(&sb);
    create_task(
        &sb,
        "job-bytes",
        r"printf 'job-before\n\377\376\nafter-bad-bytes-job\n'",
    );
    wait_task(&sb, "job-bytes", |p| p == TaskPhase::Succeeded);
    // From the Job's pod (its worker): the line after the bad bytes, and
    // the task's end.
    t.open_task_log("job-bytes");
    let s = t.wait("the job pod's lines and the task's end", |s| {
        s.contains("after-bad-bytes-job") && s.contains("task job-bytes Succeeded at")
    });
    assert!(s.contains("job-before"), "{s}");
    assert!(!s.contains("valid UTF-8"), "{s}");

    // The Job's pod deleted (as its TTL would): the kept output, said so.
    let pods: Api<Pod> = Api::namespaced(sb.client(), "default");
    let of_task = ListParams::default().labels("agentdeck.dev/task=job-bytes");
    let pod = eventually_blocking("the job's pod", || {
        let list = sb.rt.block_on(pods.list(&of_task)).ok()?;
        list.items.first()?.metadata.name.clone()
    });
    sb.rt
        .block_on(pods.delete(&pod, &DeleteParams::default().grace_period(0)))
        .expect("job pod deleted");
    eventually_blocking("the job pod gone from the API", || {
        let list = sb.rt.block_on(pods.list(&of_task)).ok()?;
        list.items.is_empty().then_some(())
    });
    t.open_task_log("job-bytes");
    let s = t.wait("the kept output", |s| {
        s.contains("after-bad-bytes-job") && s.contains("from the kept output (the pod is gone)")
    });
    assert!(!s.contains("cannot read the log"), "{s}");
    assert!(!s.contains("no pod to read"), "{s}");
    t.send(&["q"]);
    t.wait("the console quit", |s| s.contains("EXIT=0"));
}
