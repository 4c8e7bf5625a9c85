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

/// The ops action as the console asks for it.
pub fn to_action(req: &ActionRequest) -> Action {
    match req {
        ActionRequest::ScalePool { pool, min, max, .. } => Action::ScalePool {
            pool: pool.clone(),
            min: Some(*min),
            max: Some(*max),
        },
        ActionRequest::DrainPool { pool, undo, .. } => Action::DrainPool {
            pool: pool.clone(),
            undo: *undo,
        },
        ActionRequest::SetDebugLogs { pool, on, .. } => Action::DebugLogs {
            pool: pool.clone(),
            agent: None,
            on: *on,
        },
        ActionRequest::CancelTasks { tasks, .. } => Action::CancelTasks(TaskSelection {
            names: tasks.clone(),
            selector: None,
        }),
    }
}

fn namespace(req: &ActionRequest) -> &str {
    match req {
        ActionRequest::ScalePool { namespace, .. }
        | ActionRequest::DrainPool { namespace, .. }
        | ActionRequest::SetDebugLogs { namespace, .. }
        | ActionRequest::CancelTasks { namespace, .. } => namespace,
    }
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
                let conn = Connection {
                    client,
                    namespace: namespace(&req).to_owned(),
                };
                let action = to_action(&req);
                match mode {
                    ActionMode::Preview => preview(&conn, &action, &actor).await,
                    ActionMode::Apply => apply(&conn, &action, &actor).await,
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
        assert_eq!(
            to_action(&ActionRequest::DrainPool {
                namespace: ns.clone(),
                pool: "alpha".into(),
                undo: false,
            }),
            Action::DrainPool {
                pool: "alpha".into(),
                undo: false
            }
        );
        assert_eq!(
            to_action(&ActionRequest::ScalePool {
                namespace: ns.clone(),
                pool: "alpha".into(),
                min: 2,
                max: 8,
            }),
            Action::ScalePool {
                pool: "alpha".into(),
                min: Some(2),
                max: Some(8)
            }
        );
        assert_eq!(
            to_action(&ActionRequest::SetDebugLogs {
                namespace: ns.clone(),
                pool: "alpha".into(),
                on: true,
            }),
            Action::DebugLogs {
                pool: "alpha".into(),
                agent: None,
                on: true
            }
        );
        let cancel = ActionRequest::CancelTasks {
            namespace: ns,
            tasks: vec!["t1".into(), "t2".into()],
        };
        assert_eq!(
            to_action(&cancel),
            Action::CancelTasks(TaskSelection {
                names: vec!["t1".into(), "t2".into()],
                selector: None
            })
        );
        assert_eq!(namespace(&cancel), "team");
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
