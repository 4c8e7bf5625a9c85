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
pub fn task_action(command: &TaskCommand) -> (Action, ConfirmArgs) {
    let (args, cancel) = match command {
        TaskCommand::Cancel(a) => (a, true),
        TaskCommand::Retry(a) => (a, false),
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
    (action, args.confirm)
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
                after: super::duration::format(t),
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
    out: &mut impl Write,
) -> Result<()> {
    let rows = status::load(conn, args.pool.as_deref()).await?;
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

/// `agentdeck audit`.
pub fn print_audit(args: &AuditArgs, out: &mut impl Write) -> Result<()> {
    let since = match args.since {
        Some(d) => {
            let span = jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX);
            Some(Timestamp::now().checked_sub(span).unwrap_or(Timestamp::MIN))
        }
        None => None,
    };
    let path = audit::default_path()?;
    let records = audit::read(&path, since)?;
    let text = match args.output {
        Some(AuditOutput::Json) => records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap_or_default() + "\n")
            .collect(),
        None if records.is_empty() => format!("no actions recorded in {}\n", path.display()),
        None => audit::table(&records),
    };
    say(out, &text)
}
