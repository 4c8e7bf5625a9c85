//! The action subcommands on the command line: build the [`Action`] from
//! the flags, preview it, ask (unless `--yes`), apply, audit, print.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::action::{Action, Actor, TaskSelection};
use super::audit;
use super::error::{OpsError, Result};
use super::exec;
use super::status;
use crate::cli::{
    AuditArgs, AuditOutput, ConfirmArgs, DebugLogsArgs, DrainArgs, ScaleArgs, StatusArgs,
    StatusOutput, Switch, TaskCommand,
};
use crate::cluster::Connection;

/// `agentdeck scale` as an action.
pub fn scale_action(args: &ScaleArgs) -> Action {
    let pool = args.pool.clone();
    if args.clear {
        Action::ClearHold { pool }
    } else if let Some(replicas) = args.replicas {
        Action::HoldReplicas {
            pool,
            replicas,
            duration: args.hold_for,
            force: args.force,
        }
    } else {
        Action::ScalePool {
            pool,
            min: args.min,
            max: args.max,
        }
    }
}

/// `agentdeck drain` as an action.
pub fn drain_action(args: &DrainArgs) -> Action {
    match &args.agent {
        Some(agent) => Action::DrainAgent {
            pool: args.pool.clone(),
            agent: agent.clone(),
            undo: args.undo,
        },
        None => Action::DrainPool {
            pool: args.pool.clone(),
            undo: args.undo,
        },
    }
}

/// `agentdeck debug-logs` as an action.
pub fn debug_logs_action(args: &DebugLogsArgs) -> Result<Action> {
    let (agent, switch) = args.target().map_err(|message| OpsError::Refused {
        flag: "debug-logs",
        message,
    })?;
    Ok(Action::DebugLogs {
        pool: args.pool.clone(),
        agent,
        on: switch == Switch::On,
    })
}

/// `agentdeck task cancel|retry` as an action, with its confirmation flags.
/// The action of `agentdeck task cancel|retry` (`None` for `show`).
pub fn task_action(command: &TaskCommand) -> Option<(Action, ConfirmArgs)> {
    let (args, cancel) = match command {
        TaskCommand::Cancel(a) => (a, true),
        TaskCommand::Retry(a) => (a, false),
        TaskCommand::Show(_) => return None,
    };
    let sel = TaskSelection {
        names: args.names.clone(),
        selector: args.selector.clone(),
    };
    let action = if cancel {
        Action::CancelTasks(sel)
    } else {
        Action::RetryTasks(sel)
    };
    Some((action, args.confirm))
}

/// `agentdeck task show NAME`: the task as it is, or as its pool's history
/// keeps it once deleted, with the last lines it printed.
pub async fn print_task(conn: &Connection, name: &str, out: &mut impl Write) -> Result<()> {
    use super::kept::{TaskNow, find_task};
    let found = find_task(&conn.client, &conn.namespace, name)
        .await
        .map_err(OpsError::api(format!("read task {name}")))?;
    let text = match found {
        None => {
            return Err(OpsError::UnknownTasks {
                missing: vec![name.to_owned()],
                namespace: conn.namespace.clone(),
            });
        }
        Some(TaskNow::Live(task)) => {
            let st = task.status.clone().unwrap_or_default();
            let output = crate::crd::output::read(&conn.client, &task)
                .await
                .map_err(OpsError::api(format!("read the output of task {name}")))?;
            let output_from = output.as_ref().map(|f| f.source()).unwrap_or_default();
            let at = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                t.map_or_else(|| "-".to_owned(), |t| t.0.to_string())
            };
            task_text(&TaskText {
                name,
                pool: &task.spec.pool,
                phase: st.phase.as_str(),
                agent: st.agent.as_deref(),
                attempts: st.attempts,
                exit_code: st.exit_code,
                message: st.message.as_deref(),
                times: [
                    ("created", at(task.metadata.creation_timestamp.as_ref())),
                    (
                        "started",
                        at(st.started_at.as_ref().or(st.claimed_at.as_ref())),
                    ),
                    ("finished", at(st.finished_at.as_ref())),
                ],
                deleted: None,
                output: output.as_ref().map(|f| f.text()),
                output_from: &output_from,
            })
        }
        Some(TaskNow::Deleted(r)) => {
            let t = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
            let deleted = format!("{} ({})", r.deleted_at, r.deleted_because);
            let from = format!("agentdeck-task-history-{}", r.pool);
            task_text(&TaskText {
                name,
                pool: &r.pool,
                phase: r.phase.as_str(),
                agent: r.agent.as_deref(),
                attempts: r.attempts,
                exit_code: r.exit_code,
                message: r.message.as_deref(),
                times: [
                    ("created", t(&r.created_at)),
                    ("started", t(&r.started_at)),
                    ("finished", t(&r.finished_at)),
                ],
                deleted: Some(&deleted),
                output: r.output_tail.as_deref(),
                output_from: &from,
            })
        }
    };
    out.write_all(text.as_bytes()).map_err(OpsError::Output)?;
    Ok(())
}

struct TaskText<'a> {
    name: &'a str,
    pool: &'a str,
    phase: &'a str,
    agent: Option<&'a str>,
    attempts: i32,
    exit_code: Option<i32>,
    message: Option<&'a str>,
    times: [(&'static str, String); 3],
    deleted: Option<&'a str>,
    output: Option<&'a str>,
    output_from: &'a str,
}

fn task_text(t: &TaskText<'_>) -> String {
    use std::fmt::Write as _;
    let clean = crate::text::sanitize_line;
    let mut s = String::new();
    let _ = writeln!(s, "Task:      {}", clean(t.name));
    let _ = writeln!(s, "Pool:      {}", clean(t.pool));
    let _ = writeln!(s, "Phase:     {}", t.phase);
    let _ = writeln!(s, "Agent:     {}", clean(t.agent.unwrap_or("-")));
    let _ = writeln!(s, "Attempts:  {}", t.attempts);
    let code = t
        .exit_code
        .map_or_else(|| "-".to_owned(), |c| c.to_string());
    let _ = writeln!(s, "Exit code: {code}");
    let _ = writeln!(s, "Message:   {}", clean(t.message.unwrap_or("-")));
    for (what, when) in &t.times {
        let _ = writeln!(s, "{:<10} {when}", format!("{}:", capitalised(what)));
    }
    if let Some(d) = t.deleted {
        let _ = writeln!(s, "Deleted:   {}", clean(d));
    }
    match t.output {
        Some(output) => {
            let _ = writeln!(s, "Output (last lines, from {}):", t.output_from);
            for line in output.lines() {
                let _ = writeln!(s, "  {}", clean(line));
            }
        }
        None => {
            let _ = writeln!(s, "Output:    none kept");
        }
    }
    s
}

fn capitalised(word: &str) -> String {
    let mut c = word.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// Previews `action`, asks on `input` unless `--yes` (or stops after the
/// preview with `--dry-run`), applies it and appends it to the audit file.
/// Returns whether anything was applied.
pub async fn run(
    conn: &Connection,
    context: Option<&str>,
    action: &Action,
    confirm: ConfirmArgs,
    out: &mut impl Write,
    input: &mut impl BufRead,
) -> Result<bool> {
    let actor = Actor::of(&conn.client, context, "cli").await;
    let preview = exec::preview(conn, action, &actor).await?;
    say(out, &preview.render())?;
    if preview.changes_nothing() {
        say(out, "nothing to change\n")?;
        return Ok(false);
    }
    if confirm.dry_run {
        say(out, "dry run: nothing was changed\n")?;
        return Ok(false);
    }
    if !confirm.yes {
        eprint!("Apply as {}? [y/N] ", actor.user);
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = input.read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            return Err(OpsError::NotConfirmed);
        }
    }
    let path = audit::default_path()?;
    match exec::apply(conn, action, &actor).await {
        Ok(outcome) => {
            audit::append(&path, &outcome.record)?;
            say(out, &outcome.render())?;
            Ok(true)
        }
        Err(e) => {
            let record = audit::AuditRecord::failed(&actor, &conn.namespace, action, &e);
            if let Err(a) = audit::append(&path, &record) {
                tracing::warn!(error = %a, "cannot record the failed action");
            }
            Err(e)
        }
    }
}

fn say(out: &mut impl Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(OpsError::Output)
}

/// `drain --wait`: prints progress on each change until every drained
/// agent is idle, or fails after `timeout`.
pub async fn wait_drained(conn: &Connection, args: &DrainArgs, out: &mut impl Write) -> Result<()> {
    let started = Instant::now();
    let mut last = String::new();
    let mut total = 0;
    loop {
        let progress = exec::drain_progress(conn, &args.pool, args.agent.as_deref()).await?;
        total = total.max(progress.agents.len());
        let line = progress.line(total);
        if line != last {
            say(out, &format!("{line}\n"))?;
            last = line;
        }
        if progress.done() {
            return Ok(());
        }
        if let Some(t) = args.timeout
            && started.elapsed() >= t
        {
            return Err(OpsError::DrainTimeout {
                after: crate::units::format_duration(t),
                left: last,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `agentdeck status`.
pub async fn print_status(
    conn: &Connection,
    args: &StatusArgs,
    long_after: Duration,
    out: &mut impl Write,
) -> Result<()> {
    let rows = status::load(conn, args.pool.as_deref(), long_after).await?;
    let text = match args.output {
        None => status::table(&rows, false),
        Some(StatusOutput::Wide) => status::table(&rows, true),
        Some(StatusOutput::Json) => {
            let mut s = serde_json::to_string_pretty(&serde_json::json!({ "items": rows }))
                .unwrap_or_default();
            s.push('\n');
            s
        }
        Some(StatusOutput::Yaml) => {
            serde_saphyr::to_string(&serde_json::json!({ "items": rows })).unwrap_or_default()
        }
    };
    say(out, &text)
}

/// `agentdeck audit`: every namespace's actions, or only `namespace`'s.
pub fn print_audit(args: &AuditArgs, namespace: Option<&str>, out: &mut impl Write) -> Result<()> {
    let since = match args.since {
        Some(d) => {
            let span = jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX);
            Some(Timestamp::now().checked_sub(span).unwrap_or(Timestamp::MIN))
        }
        None => None,
    };
    let path = audit::default_path()?;
    let mut records = audit::read(&path, since)?;
    if let Some(ns) = namespace {
        records.retain(|r| r.namespace == ns);
    }
    let text = match args.output {
        Some(AuditOutput::Json) => records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap_or_default() + "\n")
            .collect(),
        None if records.is_empty() => match namespace {
            Some(ns) => format!(
                "no actions in namespace {ns} recorded in {}\n",
                path.display()
            ),
            None => format!("no actions recorded in {}\n", path.display()),
        },
        None => audit::table(&records),
    };
    say(out, &text)
}
