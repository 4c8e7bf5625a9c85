//! The README's quickstart, step by step, as a user types it: the real
//! `kubectl` and the `agentdeck` binary against a sandbox, with the
//! controller running as `agentdeck --daemon` and real agent processes.

mod common;

use common::{TestSandbox, eventually_blocking as poll, out};
use serde_json::Value;

#[test]
fn the_quickstart_runs_every_task_once_on_a_pool_the_daemon_scales() {
    // SAFETY: set before the sandbox (and any other thread) starts.
    unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    let sb = TestSandbox::start();

    sb.install();
    let home = tempfile::tempdir().expect("temp dir");
    let (mut daemon, _) = sb.daemon(home.path());

    let applied = sb.kubectl_ok(&["apply", "-f", "config/pool-quickstart.yaml"]);
    assert!(
        applied.contains("agentpool.agentdeck.dev/quickstart created"),
        "{applied}"
    );
    let created = sb.kubectl_ok(&["create", "-f", "config/tasks/quickstart.yaml"]);
    assert_eq!(
        created.matches("agenttask.agentdeck.dev/plan-").count(),
        8,
        "{created}"
    );

    // The pool grows past its minimum while work is pending.
    let grew = poll("the pool to scale above one agent", || {
        let d = sb.kubectl(&[
            "get",
            "ap",
            "quickstart",
            "-o",
            "jsonpath={.status.desiredReplicas}",
        ]);
        out(&d).trim().parse::<i32>().ok().filter(|n| *n > 1)
    });
    assert!(grew <= 4, "never above maxReplicas: {grew}");

    let tasks = poll("every task to finish", || {
        let o = sb.kubectl(&["get", "at", "-o", "json"]);
        let list: Value = serde_json::from_slice(&o.stdout).ok()?;
        let items = list["items"].as_array()?.clone();
        let done = items
            .iter()
            .all(|t| matches!(t["status"]["phase"].as_str(), Some("Succeeded" | "Failed")));
        (items.len() == 8 && done).then_some(items)
    });
    for t in &tasks {
        let name = t["metadata"]["name"].as_str().unwrap_or("?");
        assert_eq!(t["status"]["phase"], "Succeeded", "{name}: {}", t["status"]);
        assert_eq!(t["status"]["exitCode"], 0, "{name}");
        assert_eq!(t["status"]["attempts"], 1, "{name} ran once");
        assert!(
            t["status"]["agent"]
                .as_str()
                .is_some_and(|a| a.starts_with("iac-agent-quickstart-")),
            "{name}: {}",
            t["status"]
        );
    }

    // The printer columns a user watches.
    let table = sb.kubectl_ok(&["get", "ap"]);
    assert!(
        table.contains("quickstart") && table.contains("deployment"),
        "{table}"
    );

    // The controller stops cleanly.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(daemon.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = poll("the daemon to exit", || daemon.try_wait().ok().flatten());
    let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap_or_default();
    assert!(status.success(), "daemon exit {status:?}: {log}");
}
