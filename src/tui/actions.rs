//! The console's actions, carried out by the ops layer: the same preview
//! (server-side dry run), apply (optimistic concurrency, Events) and audit
//! line as the CLI's, with `via: console`.

use std::sync::Arc;

use kube::Client;
use tokio::sync::OnceCell;

use super::{ActionFuture, ActionMode, ActionRunner};
use crate::app::ActionRequest;
use crate::cluster::Connection;
use crate::ops::{self, Action, Actor, TaskSelection, audit};

/// Lines of a preview the dialog shows at most.
pub const PREVIEW_LINES: usize = 8;

/// The ops actions a console request stands for, each with its namespace
/// (a bulk request is one per marked row).
pub fn to_actions(req: &ActionRequest) -> Vec<(String, Action)> {
    req.parts()
        .into_iter()
        .filter_map(|r| Some((r.namespace().to_owned(), to_action(r)?)))
        .collect()
}

/// The ops action of one (not bulk) request.
pub fn to_action(req: &ActionRequest) -> Option<Action> {
    let tasks = |tasks: &Vec<String>| TaskSelection {
        names: tasks.clone(),
        selector: None,
    };
    Some(match req {
        ActionRequest::ScalePool { pool, min, max, .. } => Action::ScalePool {
            pool: pool.clone(),
            min: Some(*min),
            max: Some(*max),
        },
        ActionRequest::HoldReplicas {
            pool,
            replicas,
            for_secs,
            force,
            ..
        } => Action::HoldReplicas {
            pool: pool.clone(),
            replicas: *replicas,
            duration: for_secs.map(std::time::Duration::from_secs),
            force: *force,
        },
        ActionRequest::ClearHold { pool, .. } => Action::ClearHold { pool: pool.clone() },
        ActionRequest::DrainPool { pool, undo, .. } => Action::DrainPool {
            pool: pool.clone(),
            undo: *undo,
        },
        ActionRequest::DrainAgent {
            pool, agent, undo, ..
        } => Action::DrainAgent {
            pool: pool.clone(),
            agent: agent.clone(),
            undo: *undo,
        },
        ActionRequest::SetDebugLogs {
            pool, agent, on, ..
        } => Action::DebugLogs {
            pool: pool.clone(),
            agent: agent.clone(),
            on: *on,
        },
        ActionRequest::CancelTasks { tasks: t, .. } => Action::CancelTasks(tasks(t)),
        ActionRequest::RetryTasks { tasks: t, .. } => Action::RetryTasks(tasks(t)),
        ActionRequest::Bulk(_) | ActionRequest::DebugPod { .. } => return None,
    })
}

/// The runner the console uses: previews and applies through
/// [`ops::preview`] / [`ops::apply`] as the user of `context`, and appends
/// each applied (or failed) action to the audit file.
pub fn ops_runner(context: Option<String>) -> ActionRunner {
    let actor: Arc<OnceCell<Actor>> = Arc::new(OnceCell::new());
    Arc::new(
        move |client: Client, req: ActionRequest, mode: ActionMode| {
            let actor = actor.clone();
            let context = context.clone();
            let fut: ActionFuture = Box::pin(async move {
                let actor = actor
                    .get_or_init(|| Actor::of(&client, context.as_deref(), "console"))
                    .await
                    .clone();
                let parts = req.parts();
                let many = parts.len() > 1;
                let mut said = Vec::new();
                let mut failed = Vec::new();
                for part in parts {
                    let Some(action) = to_action(part) else {
                        continue;
                    };
                    let conn = Connection {
                        client: client.clone(),
                        namespace: part.namespace().to_owned(),
                        streams: None,
                    };
                    let r = match mode {
                        ActionMode::Preview => preview(&conn, &action, &actor).await,
                        ActionMode::Apply => apply(&conn, &action, &actor).await,
                    };
                    // One marked row failing does not stop the others;
                    // each is its own action with its own audit line.
                    match r {
                        Ok(text) => said.push(text),
                        Err(e) if many => failed.push(format!("{}: {e}", part.describe())),
                        Err(e) => failed.push(e),
                    }
                }
                if mode == ActionMode::Preview {
                    if said.is_empty() {
                        return Err(failed.join("; "));
                    }
                    // Refusals first, so a cut never hides one.
                    let mut all: Vec<String> =
                        failed.iter().map(|f| format!("refused: {f}")).collect();
                    all.extend(said.iter().flat_map(|t| t.lines().map(str::to_owned)));
                    return Ok(cut(all).join("\n"));
                }
                match (said.is_empty(), failed.is_empty()) {
                    (_, true) => Ok(said.join("; ")),
                    (true, false) => Err(failed.join("; ")),
                    (false, false) => Err(format!(
                        "{} done ({}); failed: {}",
                        said.len(),
                        said.join("; "),
                        failed.join("; ")
                    )),
                }
            });
            fut
        },
    )
}

async fn preview(conn: &Connection, action: &Action, actor: &Actor) -> Result<String, String> {
    let p = ops::preview(conn, action, actor)
        .await
        .map_err(|e| e.to_string())?;
    Ok(preview_lines(&p).join("\n"))
}

/// The preview as the dialog shows it: the impact in words, then what each
/// object's change is, at most [`PREVIEW_LINES`].
pub fn preview_lines(p: &ops::Preview) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    if p.changes_nothing() {
        lines.push("nothing to change".into());
    }
    lines.extend(p.impact.iter().cloned());
    for o in &p.objects {
        lines.push(format!("{}: {}", o.object, o.lines.join("; ")));
    }
    for u in &p.unchanged {
        lines.push(format!("unchanged: {u}"));
    }
    cut(lines)
}

/// At most [`PREVIEW_LINES`], the last saying how many more there were.
fn cut(mut lines: Vec<String>) -> Vec<String> {
    if lines.len() > PREVIEW_LINES {
        let more = lines.len() - (PREVIEW_LINES - 1);
        lines.truncate(PREVIEW_LINES - 1);
        lines.push(format!("… and {more} more"));
    }
    lines
}

async fn apply(conn: &Connection, action: &Action, actor: &Actor) -> Result<String, String> {
    let path = audit::default_path().map_err(|e| e.to_string())?;
    match ops::apply(conn, action, actor).await {
        Ok(outcome) => {
            let said = outcome.render().lines().collect::<Vec<_>>().join("; ");
            audit::append(&path, &outcome.record)
                .map_err(|e| format!("done ({said}), but not audited: {e}"))?;
            Ok(if said.is_empty() {
                "nothing to change".into()
            } else {
                said
            })
        }
        Err(e) => {
            let record = audit::AuditRecord::failed(actor, &conn.namespace, action, &e);
            if let Err(a) = audit::append(&path, &record) {
                tracing::warn!(error = %a, "cannot record the failed action");
            }
            Err(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_requests_map_to_ops_actions() {
        let ns = "team".to_owned();
        let cases = [
            (
                ActionRequest::DrainPool {
                    namespace: ns.clone(),
                    pool: "alpha".into(),
                    undo: false,
                },
                Action::DrainPool {
                    pool: "alpha".into(),
                    undo: false,
                },
            ),
            (
                ActionRequest::ScalePool {
                    namespace: ns.clone(),
                    pool: "alpha".into(),
                    min: 2,
                    max: 8,
                },
                Action::ScalePool {
                    pool: "alpha".into(),
                    min: Some(2),
                    max: Some(8),
                },
            ),
            (
                ActionRequest::HoldReplicas {
                    namespace: ns.clone(),
                    pool: "alpha".into(),
                    replicas: 6,
                    for_secs: Some(1800),
                    force: true,
                },
                Action::HoldReplicas {
                    pool: "alpha".into(),
                    replicas: 6,
                    duration: Some(std::time::Duration::from_secs(1800)),
                    force: true,
                },
            ),
            (
                ActionRequest::ClearHold {
                    namespace: ns.clone(),
                    pool: "alpha".into(),
                },
                Action::ClearHold {
                    pool: "alpha".into(),
                },
            ),
            (
                ActionRequest::DrainAgent {
                    namespace: ns.clone(),
                    pool: "alpha".into(),
                    agent: "alpha-0".into(),
                    undo: true,
                },
                Action::DrainAgent {
                    pool: "alpha".into(),
                    agent: "alpha-0".into(),
                    undo: true,
                },
            ),
            (
                ActionRequest::SetDebugLogs {
                    namespace: ns.clone(),
                    pool: "alpha".into(),
                    agent: Some("alpha-0".into()),
                    on: true,
                },
                Action::DebugLogs {
                    pool: "alpha".into(),
                    agent: Some("alpha-0".into()),
                    on: true,
                },
            ),
            (
                ActionRequest::RetryTasks {
                    namespace: ns.clone(),
                    tasks: vec!["t1".into()],
                },
                Action::RetryTasks(TaskSelection {
                    names: vec!["t1".into()],
                    selector: None,
                }),
            ),
        ];
        for (req, want) in cases {
            assert_eq!(to_action(&req), Some(want), "{req:?}");
        }
        let cancel = |ns: &str, t: &str| ActionRequest::CancelTasks {
            namespace: ns.into(),
            tasks: vec![t.into()],
        };
        // A bulk request is one ops action per part, each in its namespace.
        let bulk = ActionRequest::Bulk(vec![cancel("team", "t1"), cancel("other", "t2")]);
        assert_eq!(to_action(&bulk), None);
        let got = to_actions(&bulk);
        assert_eq!(
            got.iter().map(|(ns, _)| ns.as_str()).collect::<Vec<_>>(),
            ["team", "other"]
        );
        assert_eq!(
            got[1].1,
            Action::CancelTasks(TaskSelection {
                names: vec!["t2".into()],
                selector: None
            })
        );
    }

    #[test]
    fn long_previews_are_cut_with_a_count() {
        let p = ops::Preview {
            summary: "cancel 20 tasks".into(),
            objects: Vec::new(),
            impact: (0..20).map(|i| format!("task t{i} stops")).collect(),
            unchanged: Vec::new(),
        };
        let lines = preview_lines(&p);
        assert_eq!(lines.len(), PREVIEW_LINES);
        assert_eq!(lines[0], "nothing to change");
        assert_eq!(lines.last().map(String::as_str), Some("… and 14 more"));
    }
}
