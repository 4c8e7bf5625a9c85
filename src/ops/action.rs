//! What an operator asks for, as data: the CLI builds one from flags, the
//! console from keys; both hand it to [`super::exec`].

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

/// The user's intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum Action {
    /// Change a pool's replica bounds.
    ScalePool {
        pool: String,
        min: Option<i32>,
        max: Option<i32>,
    },
    /// Pin a pool's replicas (for a while, or until cleared); `force`
    /// widens the bounds when `replicas` is outside them.
    HoldReplicas {
        pool: String,
        replicas: i32,
        #[serde(rename = "forSeconds", with = "secs")]
        duration: Option<Duration>,
        force: bool,
    },
    /// Remove a pool's hold: the autoscaler decides again.
    ClearHold { pool: String },
    /// Drain a pool (or undo it).
    DrainPool { pool: String, undo: bool },
    /// Drain one agent (pod) of a pool (or undo it).
    DrainAgent {
        pool: String,
        agent: String,
        undo: bool,
    },
    /// Debug logs on or off, for a pool or one of its agents.
    DebugLogs {
        pool: String,
        agent: Option<String>,
        on: bool,
    },
    /// Stop tasks (Running ones get SIGTERM, then SIGKILL).
    CancelTasks(TaskSelection),
    /// Run finished Failed or Errored tasks again, keeping their history.
    RetryTasks(TaskSelection),
}

mod secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs()),
            None => s.serialize_none(),
        }
    }
}

/// Tasks named, or matched by a label selector, or both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TaskSelection {
    pub names: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

impl Action {
    /// The verb, as on the command line and in the audit file.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::ScalePool { .. } => "scale",
            Action::HoldReplicas { .. } => "hold",
            Action::ClearHold { .. } => "clear-hold",
            Action::DrainPool { undo: false, .. } | Action::DrainAgent { undo: false, .. } => {
                "drain"
            }
            Action::DrainPool { undo: true, .. } | Action::DrainAgent { undo: true, .. } => {
                "undrain"
            }
            Action::DebugLogs { on: true, .. } => "debug-logs-on",
            Action::DebugLogs { on: false, .. } => "debug-logs-off",
            Action::CancelTasks(_) => "cancel",
            Action::RetryTasks(_) => "retry",
        }
    }

    /// Reason of the Kubernetes Event recorded on each changed object.
    pub fn event_reason(&self) -> &'static str {
        match self {
            Action::ScalePool { .. } => "OperatorScaled",
            Action::HoldReplicas { .. } => "OperatorHeld",
            Action::ClearHold { .. } => "OperatorHoldCleared",
            Action::DrainPool { undo: false, .. } | Action::DrainAgent { undo: false, .. } => {
                "OperatorDrained"
            }
            Action::DrainPool { undo: true, .. } | Action::DrainAgent { undo: true, .. } => {
                "OperatorUndrained"
            }
            Action::DebugLogs { .. } => "OperatorDebugLogs",
            Action::CancelTasks(_) => "OperatorCancelled",
            Action::RetryTasks(_) => "OperatorRetried",
        }
    }

    /// The pool acted on, for pool and agent actions.
    pub fn pool(&self) -> Option<&str> {
        match self {
            Action::ScalePool { pool, .. }
            | Action::HoldReplicas { pool, .. }
            | Action::ClearHold { pool }
            | Action::DrainPool { pool, .. }
            | Action::DrainAgent { pool, .. }
            | Action::DebugLogs { pool, .. } => Some(pool),
            Action::CancelTasks(_) | Action::RetryTasks(_) => None,
        }
    }

    /// Changes nothing running: undo-style and switch actions need no
    /// confirmation in the console (the CLI still previews them).
    pub fn is_destructive(&self) -> bool {
        !matches!(
            self,
            Action::DebugLogs { .. }
                | Action::DrainPool { undo: true, .. }
                | Action::DrainAgent { undo: true, .. }
                | Action::ClearHold { .. }
        )
    }

    /// The same action without the tasks in `done` (after a partial apply,
    /// the rest is planned again on fresh data).
    pub(crate) fn without_tasks(&self, done: &BTreeSet<String>) -> Action {
        let narrow = |sel: &TaskSelection| TaskSelection {
            names: sel
                .names
                .iter()
                .filter(|n| !done.contains(*n))
                .cloned()
                .collect(),
            selector: sel.selector.clone(),
        };
        match self {
            Action::CancelTasks(sel) => Action::CancelTasks(narrow(sel)),
            Action::RetryTasks(sel) => Action::RetryTasks(narrow(sel)),
            other => other.clone(),
        }
    }
}

/// Who acts: the kube user of the context (recorded in the audit trail,
/// on holds and on retried tasks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Actor {
    /// User name as the API knows it, else as the kubeconfig names it.
    pub user: String,
    /// Where the action came from: `cli` or `console`.
    pub via: String,
    /// The kubeconfig context acted in (the audit of one context is not
    /// another's).
    pub context: String,
}

impl Actor {
    /// Asks the API who we are (SelfSubjectReview, as `kubectl auth
    /// whoami`); falls back to the user of the kubeconfig context, then to
    /// `$USER`.
    pub async fn of(client: &kube::Client, context: Option<&str>, via: &str) -> Actor {
        let user = match whoami(client).await {
            Some(u) => u,
            None => kubeconfig_user(context)
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "unknown".into()),
        };
        Actor {
            user,
            via: via.to_owned(),
            context: context_name(context),
        }
    }
}

async fn whoami(client: &kube::Client) -> Option<String> {
    let body = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"
    });
    let req = axum::http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).ok()?)
        .ok()?;
    let review: serde_json::Value =
        tokio::time::timeout(Duration::from_secs(5), client.request(req))
            .await
            .ok()?
            .ok()?;
    review["status"]["userInfo"]["username"]
        .as_str()
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
}

/// The context's name: the one asked for, else the kubeconfig's current
/// one, else `in-cluster` (a service account's token, no kubeconfig).
pub fn context_name(context: Option<&str>) -> String {
    context
        .map(str::to_owned)
        .or_else(crate::cluster::current_context)
        .unwrap_or_else(|| "in-cluster".to_owned())
}

fn kubeconfig_user(context: Option<&str>) -> Option<String> {
    let kc = kube::config::Kubeconfig::read().ok()?;
    let name = context
        .map(str::to_owned)
        .or_else(|| kc.current_context.clone())?;
    kc.contexts
        .iter()
        .find(|c| c.name == name)?
        .context
        .as_ref()?
        .user
        .clone()
}
