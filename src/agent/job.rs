//! Job mode: the worker container of a task's Job (`agentdeck agent --task
//! NAME`). It claims the task, hands it to the runner container through
//! the files of [`TASK_DIR`] (`task/` of `sharedDir`; see [`RUNNER_SCRIPT`] for the protocol), waits
//! for the runner's exit code while heartbeating, and reports the end.
//!
//! [`RUNNER_SCRIPT`]: crate::plan::manifests::RUNNER_SCRIPT
//! [`TASK_DIR`]: crate::plan::manifests::TASK_DIR

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::plan::{self, Ending};
use super::pool::{spawn_reachability_probe, spawn_switch_watchers, spawn_task_reflector};
use super::state;
use super::status::StatusWriter;
use super::{Agent, AgentError};
use crate::crd::{AgentTask, AgentTaskStatus, TaskPhase};

/// How often the runner's `exit-code` file and the task are looked at.
const CHECK_EVERY: Duration = Duration::from_millis(200);
/// Beyond the stop grace: the runner looks for `stop` once a second and
/// needs a moment to write its exit code.
const STOP_SLACK: Duration = Duration::from_secs(3);
/// Claim attempts (each after a conflict) before giving up.
const CLAIM_TRIES: usize = 5;

/// What the worker does with the task as it finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStart {
    /// Claim it and hand it over.
    Claim,
    /// It is already this pod's (the worker restarted): wait for the runner.
    Resume,
    /// Do not run it; tell the runner to exit (`why` for the log).
    Abort(String),
}

/// Decides from the task's status (pure).
pub fn job_start(status: Option<&AgentTaskStatus>, me: &str) -> JobStart {
    let Some(s) = status else {
        return JobStart::Claim;
    };
    match s.phase {
        TaskPhase::Pending | TaskPhase::Scheduled => JobStart::Claim,
        TaskPhase::Running if s.agent.as_deref() == Some(me) => JobStart::Resume,
        TaskPhase::Running => JobStart::Abort(format!(
            "already claimed by {}",
            s.agent.as_deref().unwrap_or("another agent")
        )),
        phase => JobStart::Abort(format!("already {}", phase.as_str())),
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), AgentError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| AgentError::SharedDir {
            path: path.to_owned(),
            source,
        })
}

/// Runs the worker for task `name`.
pub async fn run_worker(agent: Arc<Agent>, name: &str) -> Result<(), AgentError> {
    let cancel = CancellationToken::new();
    let _stop_server = cancel.clone().drop_guard();
    let addr = state::bind_addr(agent.id.pod_ip.as_deref(), agent.config.health_port);
    state::serve_health(addr, agent.state.clone(), cancel.clone()).await?;
    let wake = Arc::new(Notify::new());
    spawn_switch_watchers(&agent, wake.clone());

    // `TASK_DIR` is `task/` of the shared volume, at `sharedDir` (its
    // mount path, unless configured otherwise).
    let dir: PathBuf = agent.config.shared_dir.join("task");
    std::fs::create_dir_all(&dir).map_err(|source| AgentError::SharedDir {
        path: dir.clone(),
        source,
    })?;
    let api: Api<AgentTask> = Api::namespaced(agent.client.clone(), &agent.namespace);
    let writer = StatusWriter::new(api.clone(), agent.id.agent.clone(), agent.state.clone());
    let abort = |why: &str| -> Result<(), AgentError> {
        tracing::info!(task = name, "not running the task: {why}");
        write_file(&dir.join("abort"), &format!("{why}\n"))
    };

    // Claim (or find it already ours).
    let (task, resumed) = match claim(&agent, &api, &writer, name).await? {
        Ok(found) => found,
        Err(why) => return abort(&why),
    };
    let attempts = task.status.as_ref().map_or(0, |s| s.attempts);
    tracing::info!(task = name, attempt = attempts, resumed, "claimed");
    let started = Instant::now();
    let report = |ending: Ending, tail: Option<String>| {
        report_end(
            &writer,
            &agent.state,
            (name, attempts, started),
            ending,
            tail,
        )
    };

    if !resumed || !dir.join("ready").exists() {
        let (script, env) = match prepare(&agent, &task) {
            Ok(x) => x,
            Err(e) => {
                abort(&e.0)?;
                return report(Ending::Invalid(e.0), None).await;
            }
        };
        write_file(&dir.join("env"), &env)?;
        write_file(&dir.join("run.sh"), &script)?;
        write_file(&dir.join("ready"), "")?;
        if let Err(e) = writer.heartbeat(name, Some(Timestamp::now())).await {
            tracing::warn!(task = name, error = %e, "cannot record the start");
        }
    }

    // Wait for the runner, following cancel and the timeout.
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    spawn_reachability_probe(api.clone(), agent.state.clone());
    let store = spawn_task_reflector(api, cfg, agent.state.clone(), wake);
    let key = ObjectRef::<AgentTask>::new(name).within(&agent.namespace);
    let deadline = task.spec.timeout_seconds.filter(|s| *s > 0).map(|s| {
        (
            s,
            tokio::time::Instant::now() + Duration::from_secs(s.unsigned_abs()),
        )
    });
    let mut heartbeat = tokio::time::interval(agent.config.heartbeat());
    heartbeat.tick().await;
    let mut check = tokio::time::interval(CHECK_EVERY);
    let terminated = crate::signal::terminated();
    tokio::pin!(terminated);
    let exit_file = dir.join("exit-code");
    let redactor = Arc::new(worker_redactor(&agent).await);
    let mut output = super::process::OutputRelay::new(dir.join("output"), name, redactor.clone());
    let ending = loop {
        tokio::select! {
            _ = check.tick() => {
                output.pump(false);
                if let Some(code) = read_exit_code(&exit_file) {
                    break Ending::Exited(code);
                }
                if store.get(&key).is_some_and(|t| t.spec.cancel) {
                    stop_runner(&dir, agent.config.grace_shutdown(), name).await?;
                    break Ending::Cancelled;
                }
            }
            _ = heartbeat.tick() => {
                match writer.heartbeat(name, None).await {
                    Ok(_) => agent.state.touch(),
                    Err(e) => tracing::warn!(task = name, error = %e, "heartbeat failed"),
                }
            }
            _ = sleep_until(deadline.map(|(_, d)| d)) => {
                stop_runner(&dir, agent.config.grace_shutdown(), name).await?;
                break Ending::TimedOut(deadline.map_or(0, |(s, _)| s));
            }
            _ = &mut terminated => {
                agent.state.set_stopping();
                // The runner got the same signal and forwards it to the task;
                // its exit code decides, unless it is the stop itself.
                break stopped_within(&exit_file, agent.config.grace_shutdown()).await;
            }
        }
    };
    output.pump(true);
    // The end of the runner's output goes with the status, redacted as
    // it was printed.
    let tail = super::process::read_end(&dir.join("output"))
        .and_then(|end| plan::output_tail(&end, &redactor));
    report(ending, tail).await
}

/// Writes the end of task `name` (its output `tail` with it once finished).
async fn report_end(
    writer: &StatusWriter,
    state: &state::AgentState,
    (name, attempts, started): (&str, i32, Instant),
    ending: Ending,
    tail: Option<String>,
) -> Result<(), AgentError> {
    let duration = started.elapsed();
    let now = Timestamp::now();
    let max_attempts = state.max_attempts();
    tracing::info!(task = name, ?ending, "task ended");
    match writer
        .finish(name, attempts, tail.as_deref(), |s| {
            plan::finished_status(s, &ending, duration, max_attempts, now)
        })
        .await
    {
        Ok(_) => {
            state.touch();
            Ok(())
        }
        Err(source) => Err(AgentError::Api {
            what: format!("cannot report the end of task {name}"),
            source,
        }),
    }
}

/// Claims task `name` for this agent, or finds it ours already (`true`:
/// resumed after a restart). `Err` inside: why the task is not run.
async fn claim(
    agent: &Agent,
    api: &Api<AgentTask>,
    writer: &StatusWriter,
    name: &str,
) -> Result<Result<(AgentTask, bool), String>, AgentError> {
    for _ in 0..CLAIM_TRIES {
        let found = read_task(api, name)
            .await
            .map_err(|source| AgentError::Api {
                what: format!("cannot read task {name}"),
                source,
            })?;
        agent.state.api_ok();
        let Some(found) = found else {
            return Ok(Err("the task no longer exists".into()));
        };
        match job_start(found.status.as_ref(), &agent.id.agent) {
            JobStart::Abort(why) => return Ok(Err(why)),
            JobStart::Resume => return Ok(Ok((found, true))),
            JobStart::Claim => match writer.claim(&found).await {
                Ok(Some(mine)) => return Ok(Ok((mine, false))),
                Ok(None) => continue,
                Err(source) => {
                    return Err(AgentError::Api {
                        what: format!("cannot claim task {name}"),
                        source,
                    });
                }
            },
        }
    }
    Ok(Err("lost every claim race".into()))
}

/// The runner's script and environment file for `task`.
fn prepare(agent: &Agent, task: &AgentTask) -> Result<(String, String), plan::EnvProblem> {
    plan::task_argv(task)
        .map_err(plan::EnvProblem)
        .and_then(|argv| {
            let env = plan::task_env(
                &agent.env,
                &agent.config.env_forward_allowlist,
                agent.token().as_deref(),
                task,
                "",
            )?;
            Ok((plan::run_script(&argv), plan::env_file(&env)?))
        })
}

/// The end of a task whose pod is stopping: the runner got the same
/// signal and forwards it to the task, so its exit code within `grace`
/// decides, unless it is the stop itself.
async fn stopped_within(exit_file: &Path, grace: Duration) -> Ending {
    let waited = tokio::time::timeout(grace, async {
        loop {
            if let Some(code) = read_exit_code(exit_file) {
                return code;
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    })
    .await;
    match waited {
        Ok(0) => Ending::Exited(0),
        _ => Ending::Requeue("task pod stopped".into()),
    }
}

/// The redactor of the worker's output: the secrets it was given.
async fn worker_redactor(agent: &Agent) -> crate::redact::Redactor {
    let token = agent.token();
    super::secrets::redactor_for(
        agent.client.clone(),
        &agent.namespace,
        Some(&agent.id.agent),
        crate::plan::manifests::WORKER_CONTAINER,
        token.as_deref(),
        &agent.env,
    )
    .await
}

/// Asks the runner to stop the task (SIGTERM, SIGKILL after `grace`; see
/// [`RUNNER_SCRIPT`]) and waits until it has, so that the task is reported
/// ended only once it no longer runs. A runner that does not answer within
/// the grace and [`STOP_SLACK`] is left to the Job's deadline.
///
/// [`RUNNER_SCRIPT`]: crate::plan::manifests::RUNNER_SCRIPT
/// How long a worker waits for its account's rights: its pod can start
/// while the pool's Role and RoleBinding are still being created (they are
/// applied alongside the Job), so 401/403 first means "not yet".
const RIGHTS_GRACE: Duration = Duration::from_secs(30);

/// The task, read as soon as the account may read it.
async fn read_task(api: &Api<AgentTask>, name: &str) -> Result<Option<AgentTask>, kube::Error> {
    let since = Instant::now();
    loop {
        match api.get_opt(name).await {
            Err(kube::Error::Api(s))
                if matches!(s.code, 401 | 403) && since.elapsed() < RIGHTS_GRACE =>
            {
                tracing::info!(task = name, reason = %s.message, "no rights yet; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => return other,
        }
    }
}

async fn stop_runner(dir: &Path, grace: Duration, name: &str) -> Result<(), AgentError> {
    write_file(&dir.join("stop"), &format!("{}\n", grace.as_secs()))?;
    let exit_file = dir.join("exit-code");
    let stopped = tokio::time::timeout(grace + STOP_SLACK, async {
        loop {
            if let Some(code) = read_exit_code(&exit_file) {
                return code;
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    })
    .await;
    match stopped {
        Ok(code) => tracing::info!(task = name, code, "runner stopped the task"),
        Err(_) => tracing::warn!(task = name, ?grace, "runner did not stop the task in time"),
    }
    Ok(())
}

fn read_exit_code(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().expect("ts")
    }

    #[test]
    fn a_worker_claims_only_unclaimed_tasks_and_resumes_its_own() {
        let pending = AgentTaskStatus::default();
        let scheduled = AgentTaskStatus {
            phase: TaskPhase::Scheduled,
            ..AgentTaskStatus::default()
        };
        let mine = pending.claimed("pod-a", now());
        let theirs = pending.claimed("pod-b", now());
        let mut done = mine.clone();
        done.phase = TaskPhase::Succeeded;
        let cases = [
            (None, JobStart::Claim),
            (Some(&pending), JobStart::Claim),
            (Some(&scheduled), JobStart::Claim),
            (Some(&mine), JobStart::Resume),
            (
                Some(&theirs),
                JobStart::Abort("already claimed by pod-b".into()),
            ),
            (Some(&done), JobStart::Abort("already Succeeded".into())),
        ];
        for (status, want) in cases {
            assert_eq!(job_start(status, "pod-a"), want, "{status:?}");
        }
    }
}
