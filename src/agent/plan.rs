//! The agent's pure decisions: which task to claim next, what to do with a
//! running task when asked to stop, which environment a task gets, the files
//! handed to a job's runner, the status a finished task gets, and the log
//! level and health to show. No I/O, so every rule is unit-tested here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::EnvVar;

use crate::crd::{AgentTask, AgentTaskStatus, StopMode, TaskPhase, k8s_time};
use crate::health::HealthStatus;

/// Attempts a task gets before a stopping agent's requeue fails it instead,
/// until the pool's `taskDefaults.maxAttempts` (the bound the controller's
/// recovery uses too) has been read.
pub const MAX_ATTEMPTS: i32 = 3;

/// Variables a task never receives from the agent, even when allowlisted:
/// they would hand it the agent's API credentials.
const NEVER_FORWARDED: [&str; 3] = ["KUBECONFIG", "AGENTDECK_AGENT_TOKEN_FILE", "TOKEN_FILE"];

/// Tasks the store shows Running on this agent (`me`, its pod's name) that
/// this process does not run: claims of an earlier process of the same pod,
/// whose container restarted and whose runs died with it. Nobody else
/// gives them back: the controller sees the pod alive and answering. Each
/// with the attempt it was.
pub fn orphaned_claims(
    tasks: &[Arc<AgentTask>],
    me: &str,
    running: &HashSet<String>,
) -> Vec<(String, i32)> {
    let mut out: Vec<(String, i32)> = tasks
        .iter()
        .filter_map(|t| {
            let s = t.status.as_ref()?;
            let name = t.metadata.name.clone()?;
            (s.phase == TaskPhase::Running
                && s.agent.as_deref() == Some(me)
                && !running.contains(&name))
            .then_some((name, s.attempts))
        })
        .collect();
    out.sort();
    out
}

/// The Pending tasks of `pool` this agent may try to claim, oldest first
/// (creation time, then name, so every agent tries them in the same order
/// and a lost race moves on to the next one). Skips tasks already running
/// here, tasks asked to cancel or being deleted, and tasks whose
/// resourceVersion is one a claim already lost on (`lost`: name → version).
pub fn claim_candidates(
    tasks: &[Arc<AgentTask>],
    pool: &str,
    running: &HashSet<String>,
    lost: &HashMap<String, String>,
) -> Vec<Arc<AgentTask>> {
    let mut candidates: Vec<Arc<AgentTask>> = tasks
        .iter()
        .filter(|t| t.spec.pool == pool)
        .filter(|t| t.phase() == TaskPhase::Pending && !t.spec.cancel)
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .filter(|t| {
            let name = t.metadata.name.as_deref().unwrap_or_default();
            !running.contains(name)
                && lost
                    .get(name)
                    .is_none_or(|rv| t.metadata.resource_version.as_deref() != Some(rv))
        })
        .cloned()
        .collect();
    candidates.sort_by(|a, b| {
        let key = |t: &AgentTask| {
            (
                t.metadata.creation_timestamp.as_ref().map(|c| c.0),
                t.metadata.name.clone().unwrap_or_default(),
            )
        };
        key(a).cmp(&key(b))
    });
    candidates
}

/// How many of the oldest candidates an agent spreads its first try over.
pub const SPREAD_WINDOW: usize = 16;

/// `candidates` (oldest first) with the oldest `window` rotated by an
/// offset derived from the agent's name, so racing agents first try
/// different tasks instead of all colliding on the oldest one. Order stays
/// first-come-first-served within the window and beyond it.
pub fn spread<T: Clone>(candidates: &[T], agent: &str, window: usize) -> Vec<T> {
    let window = window.min(candidates.len());
    if window < 2 {
        return candidates.to_vec();
    }
    // FNV-1a: stable across processes and versions, unlike the std hasher.
    let hash = agent.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let offset = usize::try_from(hash % window as u64).unwrap_or(0);
    let mut out: Vec<T> = candidates[..window].to_vec();
    out.rotate_left(offset);
    out.extend_from_slice(&candidates[window..]);
    out
}

/// What a stopping agent does with the tasks it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopPlan {
    /// Claim nothing new and let the tasks finish for up to `timeout`, then
    /// stop them as [`StopPlan::Grace`] does.
    Drain {
        /// Longest wait for the tasks.
        timeout: Duration,
        /// SIGTERM-to-SIGKILL time once the wait is over.
        grace: Duration,
    },
    /// SIGTERM the tasks, SIGKILL after `grace`, requeue them.
    Grace {
        /// SIGTERM-to-SIGKILL time.
        grace: Duration,
    },
    /// SIGKILL the tasks at once and requeue them.
    Force,
}

/// The plan for `mode` with the configured timeouts.
pub fn stop_plan(mode: StopMode, drain_timeout: Duration, grace: Duration) -> StopPlan {
    match mode {
        StopMode::Drain => StopPlan::Drain {
            timeout: drain_timeout,
            grace,
        },
        StopMode::GraceShutdown => StopPlan::Grace { grace },
        StopMode::ForceShutdown => StopPlan::Force,
    }
}

/// Why a task's environment cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvProblem(pub String);

/// The environment of a task's process, as ordered pairs:
/// `PATH` (a task needs one to find its tools), `HOME` = its working
/// directory, `AGENTDECK_TASK`/`AGENTDECK_TASK_ATTEMPT`, then the agent's
/// variables named in `allowlist` (never credentials: see
/// [`NEVER_FORWARDED`], and never one whose value is the agent's `token`),
/// then the task's own `env` (which wins). `valueFrom` in a task's env is
/// refused: an agent cannot read Secrets on the task's behalf.
pub fn task_env(
    agent_env: &BTreeMap<String, String>,
    allowlist: &[String],
    token: Option<&str>,
    task: &AgentTask,
    home: &str,
) -> Result<Vec<(String, String)>, EnvProblem> {
    let bad_names = crate::plan::validate::env_errors("spec.env", &task.spec.env);
    if !bad_names.is_empty() {
        return Err(EnvProblem(crate::plan::validate::summary(&bad_names)));
    }
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    if let Some(path) = agent_env.get("PATH") {
        env.insert("PATH".into(), path.clone());
    }
    env.insert("HOME".into(), home.to_owned());
    env.insert(
        "AGENTDECK_TASK".into(),
        task.metadata.name.clone().unwrap_or_default(),
    );
    env.insert(
        "AGENTDECK_TASK_ATTEMPT".into(),
        task.status.as_ref().map_or(0, |s| s.attempts).to_string(),
    );
    let token = token.map(str::trim).filter(|t| !t.is_empty());
    for name in allowlist {
        if NEVER_FORWARDED.contains(&name.as_str()) {
            continue;
        }
        if let Some(value) = agent_env.get(name)
            && token.is_none_or(|t| value.trim() != t)
        {
            env.insert(name.clone(), value.clone());
        }
    }
    for EnvVar {
        name,
        value,
        value_from,
    } in &task.spec.env
    {
        if value_from.is_some() {
            return Err(EnvProblem(format!(
                "env {name} uses valueFrom, which agents do not resolve; give a value"
            )));
        }
        env.insert(name.clone(), value.clone().unwrap_or_default());
    }
    Ok(env.into_iter().collect())
}

/// The argv of a task: `command` then `args`, like a container.
pub fn task_argv(task: &AgentTask) -> Result<Vec<String>, String> {
    if task.spec.command.is_empty() {
        return Err(match &task.spec.operation {
            Some(op) => format!(
                "operation {op:?} has no built-in runner in this agent; give the task a command"
            ),
            None => "the task has no command to run".to_owned(),
        });
    }
    Ok(task
        .spec
        .command
        .iter()
        .chain(&task.spec.args)
        .cloned()
        .collect())
}

/// `value` quoted for POSIX `sh`: single quotes, with embedded single
/// quotes closed, escaped and reopened, so nothing in it is expanded.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Whether `name` can be assigned in `sh` (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_shell_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The runner's `run.sh`: the task's argv, each word quoted, run with
/// `exec` so signals reach the task itself.
pub fn run_script(argv: &[String]) -> String {
    let words: Vec<String> = argv.iter().map(|w| shell_quote(w)).collect();
    format!("exec {}\n", words.join(" "))
}

/// The runner's `env` file: one quoted assignment per line. Names `sh`
/// cannot assign are an error rather than a silently missing variable.
/// `PATH` and `HOME` are left to the runner image, whose tools live there.
pub fn env_file(env: &[(String, String)]) -> Result<String, EnvProblem> {
    let mut out = String::new();
    for (name, value) in env {
        if name == "PATH" || name == "HOME" {
            continue;
        }
        if !is_shell_name(name) {
            return Err(EnvProblem(format!(
                "env name {name:?} cannot be set in a shell"
            )));
        }
        out.push_str(&format!("{name}={}\n", shell_quote(value)));
    }
    Ok(out)
}

/// How a task's run ended, as the agent saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The process exited with this code (a signal `n` counts as `128 + n`).
    Exited(i32),
    /// `spec.cancel` stopped it.
    Cancelled,
    /// `spec.timeoutSeconds` ran out.
    TimedOut(i64),
    /// The agent stopped it and gives it back (`reason`).
    Requeue(String),
    /// It could not be run at all (bad spec, spawn failure).
    Invalid(String),
}

/// The status to write when a run ends (`duration` is how long it ran); a
/// requeue fails the task once it has had `max_attempts`.
pub fn finished_status(
    current: &AgentTaskStatus,
    ending: &Ending,
    duration: Duration,
    max_attempts: i32,
    now: jiff::Timestamp,
) -> AgentTaskStatus {
    let took = format_duration(duration);
    let done = |phase: TaskPhase, exit_code: Option<i32>, message: String| AgentTaskStatus {
        phase,
        exit_code,
        finished_at: Some(k8s_time(now)),
        last_heartbeat: Some(k8s_time(now)),
        // Quotes the task's own command and names: shown in kubectl and the console.
        message: Some(crate::text::sanitize_line(&message)),
        ..current.clone()
    };
    match ending {
        Ending::Exited(0) => done(
            TaskPhase::Succeeded,
            Some(0),
            format!("succeeded in {took}"),
        ),
        Ending::Exited(code) => done(
            TaskPhase::Failed,
            Some(*code),
            format!("exited with code {code} after {took}"),
        ),
        Ending::Cancelled => done(
            TaskPhase::Cancelled,
            None,
            format!("cancelled after {took}"),
        ),
        Ending::TimedOut(seconds) => done(
            TaskPhase::Failed,
            None,
            format!("timed out after {seconds}s"),
        ),
        Ending::Invalid(why) => done(TaskPhase::Errored, None, why.clone()),
        Ending::Requeue(reason) => current.requeued(reason, max_attempts, now),
    }
}

/// What `status.outputTail` keeps of a run's output `log` (the end of the
/// file, as the agent wrote it): its last whole lines, at most
/// [`OUTPUT_TAIL_LINES`] and [`OUTPUT_TAIL_BYTES`], redacted by `redactor`
/// (the Secret values the agent knows, and the bundle's secret patterns)
/// and with anything not printable sanitised. `None` when it printed
/// nothing.
pub fn output_tail(log: &[u8], redactor: &crate::redact::Redactor) -> Option<String> {
    use crate::crd::{OUTPUT_TAIL_BYTES, OUTPUT_TAIL_LINES};
    // Redacted before it is cut, so a secret is never cut in two and missed.
    let start = log.len().saturating_sub(OUTPUT_TAIL_BYTES * 4);
    let mut window = &log[start..];
    if start > 0 {
        // Drop the line the cut fell in.
        match window.iter().position(|b| *b == b'\n') {
            Some(i) => window = &window[i + 1..],
            None => window = &[],
        }
    }
    let mut counts = crate::redact::RedactionCounts::default();
    let redacted = redactor.redact_bytes(window, &mut counts);
    let text = String::from_utf8_lossy(&redacted);
    let lines: Vec<String> = text
        .lines()
        .map(crate::text::sanitize_line)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut bytes = 0;
    for line in lines.iter().rev().take(OUTPUT_TAIL_LINES) {
        if bytes + line.len() + 1 > OUTPUT_TAIL_BYTES {
            break;
        }
        bytes += line.len() + 1;
        kept.push(line);
    }
    if kept.is_empty() {
        return None;
    }
    kept.reverse();
    Some(kept.join("\n"))
}

/// `1m05s`-style text for messages.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The log level to run at: debug when the pool's `spec.debug` or the
/// pod's debug annotation asks for it, else the configured one.
pub fn log_level(pool_debug: bool, pod_debug: bool, configured: &str) -> String {
    if pool_debug || pod_debug {
        "debug".to_owned()
    } else {
        configured.to_owned()
    }
}

/// Whether an annotation value switches something on.
pub fn annotation_on(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// What `/healthz` says: unhealthy while the API is unreachable (work can
/// neither be claimed nor reported), draining while taking no new work.
pub fn health_status(api_reachable: bool, draining: bool) -> HealthStatus {
    match (api_reachable, draining) {
        (false, _) => HealthStatus::Unhealthy,
        (true, true) => HealthStatus::Draining,
        (true, false) => HealthStatus::Healthy,
    }
}

/// Exit code of a process as a shell reports it (signal `n` → `128 + n`).
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_output_tail_is_the_last_whole_lines_redacted_within_its_bounds() {
        use crate::crd::{OUTPUT_TAIL_BYTES, OUTPUT_TAIL_LINES};
        use crate::redact::Redactor;
        let none = Redactor::new(&[]);
        assert_eq!(output_tail(b"", &none), None);
        assert_eq!(output_tail(b"\n  \n", &none), None);
        let secret = b"s3cr3t-planted-value".to_vec();
        let log = b"plan: 3 to add\npassword is s3cr3t-planted-value\ndone\n";
        let tail = output_tail(log, &Redactor::new(&[secret])).expect("a tail");
        assert!(!tail.contains("s3cr3t-planted-value"), "{tail}");
        assert!(tail.starts_with("plan: 3 to add\npassword is "), "{tail}");
        assert!(tail.ends_with("\ndone"), "{tail}");
        // Many lines: the last OUTPUT_TAIL_LINES, whole.
        let many: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let tail = output_tail(many.as_bytes(), &none).expect("a tail");
        let lines: Vec<&str> = tail.lines().collect();
        assert_eq!(lines.len(), OUTPUT_TAIL_LINES);
        assert_eq!(lines.last(), Some(&"line 499"));
        assert_eq!(
            lines.first().map(|l| l.to_string()),
            Some(format!("line {}", 500 - OUTPUT_TAIL_LINES))
        );
        // Long lines: the bytes bound holds and no line is cut.
        let long: String = (0..100)
            .map(|i| format!("{i:03} {}\n", "x".repeat(300)))
            .collect();
        let tail = output_tail(long.as_bytes(), &none).expect("a tail");
        assert!(tail.len() <= OUTPUT_TAIL_BYTES, "{}", tail.len());
        assert!(tail.lines().all(|l| l.len() == 304), "{tail}");
        assert!(tail.ends_with(&format!("099 {}", "x".repeat(300))));
        // Invalid UTF-8 and control characters come out printable.
        let tail = output_tail(b"ok \xff\x1b[31mred\n", &none).expect("a tail");
        assert!(!tail.contains('\x1b'), "{tail:?}");
    }

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn task(name: &str, created: &str, pool: &str, phase: Option<&str>) -> Arc<AgentTask> {
        let mut v = json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": name, "creationTimestamp": created, "resourceVersion": "7"},
            "spec": {"pool": pool, "command": ["true"]}
        });
        if let Some(p) = phase {
            v["status"] = json!({"phase": p});
        }
        Arc::new(serde_json::from_value(v).expect("task"))
    }

    fn names(v: &[Arc<AgentTask>]) -> Vec<String> {
        v.iter()
            .map(|t| t.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:00:00Z".parse().expect("ts")
    }

    #[test]
    fn orphaned_claims_are_this_agents_running_tasks_it_does_not_run() {
        let on = |name: &str, phase: TaskPhase, agent: &str, attempts: i32| {
            let mut t = (*task(name, "2026-01-01T00:00:00Z", "p", None)).clone();
            t.status = Some(AgentTaskStatus {
                phase,
                agent: Some(agent.into()),
                attempts,
                ..AgentTaskStatus::default()
            });
            Arc::new(t)
        };
        let tasks = vec![
            on("orphan-b", TaskPhase::Running, "me", 2),
            on("orphan-a", TaskPhase::Running, "me", 1),
            on("live", TaskPhase::Running, "me", 1),
            on("theirs", TaskPhase::Running, "other", 1),
            on("done", TaskPhase::Succeeded, "me", 1),
            task("pending", "2026-01-01T00:00:00Z", "p", None),
        ];
        let running: HashSet<String> = ["live".to_string()].into();
        assert_eq!(
            orphaned_claims(&tasks, "me", &running),
            [("orphan-a".to_string(), 1), ("orphan-b".to_string(), 2)]
        );
    }

    #[test]
    fn candidates_are_pending_tasks_of_the_pool_oldest_first() {
        let mut cancelled = (*task("c", "2026-01-01T00:00:00Z", "p", None)).clone();
        cancelled.spec.cancel = true;
        let mut deleting = (*task("d", "2026-01-01T00:00:00Z", "p", None)).clone();
        deleting.metadata.deletion_timestamp = Some(Time(now()));
        let tasks = vec![
            task("late", "2026-01-01T00:00:09Z", "p", Some("Pending")),
            task("b", "2026-01-01T00:00:01Z", "p", None),
            task("a", "2026-01-01T00:00:01Z", "p", None),
            task("other-pool", "2026-01-01T00:00:00Z", "q", None),
            task("running", "2026-01-01T00:00:00Z", "p", Some("Running")),
            task("done", "2026-01-01T00:00:00Z", "p", Some("Succeeded")),
            task("scheduled", "2026-01-01T00:00:00Z", "p", Some("Scheduled")),
            Arc::new(cancelled),
            Arc::new(deleting),
            task("mine", "2026-01-01T00:00:00Z", "p", None),
            task("lost", "2026-01-01T00:00:00Z", "p", None),
        ];
        let running = HashSet::from(["mine".to_owned()]);
        let lost = HashMap::from([("lost".to_owned(), "7".to_owned())]);
        assert_eq!(
            names(&claim_candidates(&tasks, "p", &running, &lost)),
            ["a", "b", "late"]
        );
        // A lost race on an older version does not hide a newer one.
        let lost = HashMap::from([("lost".to_owned(), "6".to_owned())]);
        assert_eq!(
            names(&claim_candidates(&tasks, "p", &running, &lost)),
            ["lost", "a", "b", "late"]
        );
    }

    #[test]
    fn racing_agents_start_at_different_places_among_the_oldest() {
        let c: Vec<u32> = (0..20).collect();
        let a = spread(&c, "iac-agent-p-aaaaa", 4);
        assert_eq!(a.len(), 20);
        assert_eq!(a[4..], c[4..], "beyond the window the order is kept");
        let mut head = a[..4].to_vec();
        head.sort();
        assert_eq!(head, c[..4], "the window holds the four oldest");
        let starts: HashSet<u32> = (0..10)
            .map(|i| spread(&c, &format!("iac-agent-p-{i}"), 16)[0])
            .collect();
        assert!(starts.len() >= 4, "ten agents start at {starts:?}");
        assert_eq!(spread(&c, "x", 16), spread(&c, "x", 16), "stable");
        assert_eq!(spread(&c[..1], "x", 16), [0]);
        assert!(spread::<u32>(&[], "x", 16).is_empty());
    }

    #[test]
    fn stop_modes_map_to_plans() {
        let (d, g) = (Duration::from_secs(60), Duration::from_secs(5));
        assert_eq!(
            stop_plan(StopMode::Drain, d, g),
            StopPlan::Drain {
                timeout: d,
                grace: g
            }
        );
        assert_eq!(
            stop_plan(StopMode::GraceShutdown, d, g),
            StopPlan::Grace { grace: g }
        );
        assert_eq!(stop_plan(StopMode::ForceShutdown, d, g), StopPlan::Force);
    }

    fn env_task(env: serde_json::Value) -> AgentTask {
        serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "t1"},
            "spec": {"pool": "p", "command": ["env"], "env": env},
            "status": {"phase": "Running", "attempts": 2}
        }))
        .expect("task")
    }

    #[test]
    fn only_allowlisted_variables_and_the_tasks_own_reach_a_task() {
        let agent: BTreeMap<String, String> = [
            ("PATH", "/usr/bin"),
            ("AWS_REGION", "eu-west-1"),
            ("SECRET_KEY", "hunter2"),
            ("KUBECONFIG", "/k"),
            ("LEAKY", "tok-123"),
            ("TF_LOG", "info"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let allow: Vec<String> = ["AWS_REGION", "KUBECONFIG", "LEAKY", "TF_LOG", "ABSENT"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        let t = env_task(json!([{"name": "TF_LOG", "value": "debug"}, {"name": "EMPTY"}]));
        let env = task_env(&agent, &allow, Some("tok-123\n"), &t, "/work/t1").expect("env");
        let map: BTreeMap<_, _> = env.into_iter().collect();
        let expected: BTreeMap<String, String> = [
            ("AGENTDECK_TASK", "t1"),
            ("AGENTDECK_TASK_ATTEMPT", "2"),
            ("AWS_REGION", "eu-west-1"),
            ("EMPTY", ""),
            ("HOME", "/work/t1"),
            ("PATH", "/usr/bin"),
            ("TF_LOG", "debug"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(map, expected);
    }

    #[test]
    fn a_task_env_name_a_process_cannot_have_is_refused_naming_the_field() {
        for (name, fragment) in [
            ("A=B", "spec.env[0].name: \"A=B\" is not valid"),
            ("", "spec.env[0].name: \"\" is not valid"),
            ("9LIVES", "spec.env[0].name: \"9LIVES\" is not valid"),
        ] {
            let t = env_task(json!([{"name": name, "value": "x"}]));
            let err = task_env(&BTreeMap::new(), &[], None, &t, "/h").expect_err(name);
            assert!(err.0.starts_with(fragment), "{name:?}: {err:?}");
            assert!(err.0.contains("environment variable name"), "{err:?}");
        }
    }

    #[test]
    fn a_final_message_quoting_hostile_text_is_sanitised() {
        let current = AgentTaskStatus::default();
        let ending = Ending::Invalid("cannot start \"\u{1b}]0;pwned\u{7}x\u{1b}[2J\ny\"".into());
        let status = finished_status(
            &current,
            &ending,
            Duration::ZERO,
            3,
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(status.message.as_deref(), Some("cannot start \"x y\""));
    }

    #[test]
    fn a_task_env_value_from_is_refused_with_its_name() {
        let t = env_task(
            json!([{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
        );
        let err = task_env(&BTreeMap::new(), &[], None, &t, "/h").expect_err("refused");
        assert!(err.0.contains("PW"), "{err:?}");
    }

    #[test]
    fn argv_is_command_then_args_and_operation_alone_is_explained() {
        let mut t = env_task(json!([]));
        t.spec.command = vec!["sh".into(), "-c".into()];
        t.spec.args = vec!["echo hi".into()];
        assert_eq!(task_argv(&t).expect("argv"), ["sh", "-c", "echo hi"]);
        t.spec.command.clear();
        t.spec.operation = Some("plan".into());
        let why = task_argv(&t).expect_err("no command");
        assert!(why.contains("\"plan\"") && why.contains("command"), "{why}");
    }

    #[test]
    fn shell_quoting_keeps_every_character_literal() {
        let cases = [
            ("plain", "'plain'"),
            ("", "''"),
            ("it's", r"'it'\''s'"),
            ("$(rm -rf /) `x` \"q\" \\", "'$(rm -rf /) `x` \"q\" \\'"),
            ("a\nb", "'a\nb'"),
        ];
        for (raw, quoted) in cases {
            assert_eq!(shell_quote(raw), quoted, "{raw:?}");
        }
    }

    #[test]
    fn quoted_files_round_trip_through_a_real_shell() {
        let nasty = "it's $HOME `id` \"x\" \\ \n;|&";
        let env = vec![
            ("PATH".to_owned(), "/nope".to_owned()),
            ("NASTY".to_owned(), nasty.to_owned()),
        ];
        let file = env_file(&env).expect("file");
        assert!(!file.contains("PATH="), "{file}");
        let script = format!(
            "{file}{}",
            run_script(&[
                "printf".into(),
                "%s|%s".into(),
                nasty.into(),
                "$NASTY".into()
            ])
        );
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .output()
            .expect("sh runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{nasty}|$NASTY")
        );
    }

    #[test]
    fn env_names_a_shell_cannot_assign_are_refused() {
        for (name, ok) in [
            ("A_1", true),
            ("_x", true),
            ("1A", false),
            ("A-B", false),
            ("", false),
        ] {
            assert_eq!(is_shell_name(name), ok, "{name:?}");
        }
        assert!(env_file(&[("A-B".into(), "v".into())]).is_err());
    }

    #[test]
    fn endings_give_phase_exit_code_and_message() {
        let running = AgentTaskStatus::default().claimed("agent-0", now());
        let d = Duration::from_millis(1500);
        let cases: [(Ending, TaskPhase, Option<i32>, &str); 6] = [
            (
                Ending::Exited(0),
                TaskPhase::Succeeded,
                Some(0),
                "succeeded in 1.5s",
            ),
            (
                Ending::Exited(3),
                TaskPhase::Failed,
                Some(3),
                "exited with code 3 after 1.5s",
            ),
            (
                Ending::Cancelled,
                TaskPhase::Cancelled,
                None,
                "cancelled after 1.5s",
            ),
            (
                Ending::TimedOut(30),
                TaskPhase::Failed,
                None,
                "timed out after 30s",
            ),
            (
                Ending::Invalid("no command".into()),
                TaskPhase::Errored,
                None,
                "no command",
            ),
            (
                Ending::Requeue("agent stopping".into()),
                TaskPhase::Pending,
                None,
                "agent stopping; requeued (attempt 2 of 3 next)",
            ),
        ];
        for (ending, phase, code, message) in cases {
            let s = finished_status(&running, &ending, d, MAX_ATTEMPTS, now());
            assert_eq!(s.phase, phase, "{ending:?}");
            assert_eq!(s.exit_code, code, "{ending:?}");
            assert_eq!(s.message.as_deref(), Some(message), "{ending:?}");
            assert_eq!(s.attempts, 1, "{ending:?}");
            assert_eq!(s.finished_at.is_some(), phase.is_finished(), "{ending:?}");
        }
    }

    #[test]
    fn a_requeue_past_the_attempt_limit_fails_the_task() {
        let mut s = AgentTaskStatus::default();
        for _ in 0..MAX_ATTEMPTS {
            s = s.claimed("a", now());
        }
        let requeue = Ending::Requeue("stopping".into());
        let end = finished_status(&s, &requeue, Duration::ZERO, MAX_ATTEMPTS, now());
        assert_eq!(end.phase, TaskPhase::Failed);
        let end = finished_status(&s, &requeue, Duration::ZERO, MAX_ATTEMPTS + 1, now());
        assert_eq!(end.phase, TaskPhase::Pending, "a pool may allow more");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(250)), "0.2s");
        assert_eq!(format_duration(Duration::from_secs(65)), "1m05s");
    }

    #[test]
    fn debug_follows_pool_or_pod_and_falls_back_to_the_configured_level() {
        for (pool, pod, want) in [
            (false, false, "warn"),
            (true, false, "debug"),
            (false, true, "debug"),
            (true, true, "debug"),
        ] {
            assert_eq!(log_level(pool, pod, "warn"), want, "{pool} {pod}");
        }
        for (v, on) in [
            (Some("true"), true),
            (Some(" TRUE "), true),
            (Some("1"), false),
            (None, false),
        ] {
            assert_eq!(annotation_on(v), on, "{v:?}");
        }
    }

    #[test]
    fn health_is_unhealthy_without_the_api_and_draining_when_draining() {
        assert_eq!(health_status(true, false), HealthStatus::Healthy);
        assert_eq!(health_status(true, true), HealthStatus::Draining);
        assert_eq!(health_status(false, true), HealthStatus::Unhealthy);
        assert_eq!(health_status(false, false), HealthStatus::Unhealthy);
    }
}
