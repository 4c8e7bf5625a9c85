//! What this identity may do, per context, as the API said when asked
//! (SelfSubjectAccessReviews, see [`crate::ops::access`]): an action the
//! user may not take answers at once, naming what is missing, and opens
//! no dialog; help shows it dimmed with the reason.

use crate::ops::access::{AccessTable, Feature, Need, action_needs, needs};
use crate::ops::action::{Action as Op, TaskSelection};

use super::keymap::Action;
use super::{App, ViewKind};

/// What `action` needs when taken in `view`, in `namespace`: the needs of
/// the operation the console would carry out (a representative one: the
/// object's name does not change what RBAC asks).
pub fn action_view_needs(action: Action, view: ViewKind, namespace: &str) -> Vec<Need> {
    let some = String::new;
    let tasks = || TaskSelection {
        names: vec![some()],
        selector: None,
    };
    let op = match (action, view) {
        (Action::Scale, ViewKind::Pools) => Op::ScalePool {
            pool: some(),
            min: None,
            max: None,
        },
        (Action::Drain, ViewKind::Pools) => Op::DrainPool {
            pool: some(),
            undo: false,
        },
        (Action::DebugLogs, ViewKind::Pools) => Op::DebugLogs {
            pool: some(),
            agent: None,
            on: true,
        },
        (Action::Drain, ViewKind::Agents) => Op::DrainAgent {
            pool: some(),
            agent: some(),
            undo: false,
        },
        (Action::DebugLogs, ViewKind::Agents) => Op::DebugLogs {
            pool: some(),
            agent: Some(some()),
            on: true,
        },
        (Action::CancelTask, ViewKind::Tasks) => Op::CancelTasks(tasks()),
        (Action::RetryTask, ViewKind::Tasks) => Op::RetryTasks(tasks()),
        // `s` on an agent is a shell in it.
        (Action::Scale, ViewKind::Agents) => return needs(Feature::Exec, Some(namespace), ""),
        (Action::DebugPod, ViewKind::Agents) => {
            return needs(Feature::DebugPod, Some(namespace), "")
                .into_iter()
                .filter(|n| n.part.is_none())
                .collect();
        }
        _ => return Vec::new(),
    };
    action_needs(&op, namespace)
}

/// The same permission, whatever part of a feature it was asked for.
fn same(a: &Need, b: &Need) -> bool {
    a.verb == b.verb
        && a.group == b.group
        && a.resource == b.resource
        && a.subresource == b.subresource
        && a.namespace == b.namespace
}

/// Of `wanted`, the needs the API refused in `table` (a need it was not
/// asked about is let through: the API has the last word).
pub fn refused_in(table: &AccessTable, wanted: Vec<Need>) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::new();
    for n in wanted {
        let refused = table
            .rows
            .iter()
            .any(|r| r.missing.iter().any(|m| same(m, &n)));
        if refused && !out.iter().any(|o| same(o, &n)) {
            out.push(n);
        }
    }
    // What the action itself would change first, then what it reads.
    out.sort_by_key(|n| matches!(n.verb, "get" | "list" | "watch"));
    out
}

/// `you may not patch agentpools in team-a` (and the rest, if more).
pub fn refusal_words(refused: &[Need]) -> String {
    format!("you may not {}", crate::ops::access::missing_text(refused))
}

impl App {
    /// The rights of `context` (the only ones, in a console of one).
    pub(super) fn rights_of(&self, context: &str) -> Option<&AccessTable> {
        self.rights.get(context).or_else(|| {
            (self.rights.len() == 1)
                .then(|| self.rights.values().next())
                .flatten()
        })
    }

    /// Why `action` in the current table may not be taken, if the API
    /// said it may not.
    pub(super) fn action_refused(&self, action: Action) -> Option<String> {
        let (view, _) = self.table_kind()?;
        let context = self
            .selected_object()
            .map(|o| o.context)
            .unwrap_or_default();
        let table = self.rights_of(&context)?;
        let namespace = table.namespace.as_deref()?;
        let refused = refused_in(table, action_view_needs(action, view, namespace));
        (!refused.is_empty()).then(|| refusal_words(&refused))
    }

    /// Why `action` may not be taken in `view`, for help.
    pub fn help_refusal(&self, action: Action, view: ViewKind) -> Option<String> {
        let table = self.rights_of("")?;
        let namespace = table.namespace.as_deref()?;
        let refused = refused_in(table, action_view_needs(action, view, namespace));
        (!refused.is_empty()).then(|| refusal_words(&refused))
    }
}
