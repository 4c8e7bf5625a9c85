//! Operator actions from the console: what a key asks for
//! ([`ActionRequest`]), on which rows (the marked ones, else the selected
//! one), and the confirmation dialog that shows the API's dry-run preview
//! before anything is changed. The ops layer carries them out.

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent};

use super::fleet::routed;
use super::keymap::Action;
use super::rows::{AgentRow, PoolRow, TaskRow};
use super::{App, Command, Field, ViewKind};
use crate::crd::TaskPhase;

/// How long a debug pod made from the console lives.
pub const DEBUG_POD_TTL: Duration = Duration::from_secs(3600);

/// Something the user asked the cluster to do (carried out by the ops
/// layer; the console only asks and shows the outcome).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionRequest {
    ScalePool {
        namespace: String,
        pool: String,
        min: i32,
        max: i32,
    },
    /// Pin the replicas (for `for_secs`, or until cleared).
    HoldReplicas {
        namespace: String,
        pool: String,
        replicas: i32,
        for_secs: Option<u64>,
        force: bool,
    },
    ClearHold {
        namespace: String,
        pool: String,
    },
    DrainPool {
        namespace: String,
        pool: String,
        undo: bool,
    },
    /// Drain one agent of a pool (or undo it).
    DrainAgent {
        namespace: String,
        pool: String,
        agent: String,
        undo: bool,
    },
    /// Debug logs for a pool, or one of its agents.
    SetDebugLogs {
        namespace: String,
        pool: String,
        agent: Option<String>,
        on: bool,
    },
    CancelTasks {
        namespace: String,
        tasks: Vec<String>,
    },
    /// Run Failed or Errored tasks again.
    RetryTasks {
        namespace: String,
        tasks: Vec<String>,
    },
    /// A copy-mode debug pod of an agent pod (made by the console's jobs,
    /// not an object change: no dry-run preview).
    DebugPod {
        namespace: String,
        pod: String,
    },
    /// Several of the above, from marked rows: previewed and applied one
    /// after the other.
    Bulk(Vec<ActionRequest>),
}

impl ActionRequest {
    /// In words, for toasts.
    pub fn describe(&self) -> String {
        let tasks = |verb: &str, tasks: &[String]| match tasks {
            [one] => format!("{verb} task {one}"),
            many => format!("{verb} {} tasks", many.len()),
        };
        match self {
            ActionRequest::ScalePool { pool, min, max, .. } => {
                format!("scale pool {pool} to {min}–{max}")
            }
            ActionRequest::HoldReplicas {
                pool,
                replicas,
                for_secs,
                force,
                ..
            } => format!(
                "hold pool {pool} at {replicas}{}{}",
                match for_secs {
                    Some(s) => format!(
                        " for {}",
                        crate::units::format_duration(Duration::from_secs(*s))
                    ),
                    None => " until cleared".into(),
                },
                if *force { " (bounds widened)" } else { "" }
            ),
            ActionRequest::ClearHold { pool, .. } => format!("clear the hold of pool {pool}"),
            ActionRequest::DrainPool { pool, undo, .. } => {
                format!("{} pool {pool}", if *undo { "resume" } else { "drain" })
            }
            ActionRequest::DrainAgent { agent, undo, .. } => {
                format!("{} agent {agent}", if *undo { "resume" } else { "drain" })
            }
            ActionRequest::SetDebugLogs {
                pool, agent, on, ..
            } => {
                let on = if *on { "on" } else { "off" };
                match agent {
                    Some(a) => format!("debug logs {on} for agent {a}"),
                    None => format!("debug logs {on} for pool {pool}"),
                }
            }
            ActionRequest::CancelTasks { tasks: t, .. } => tasks("cancel", t),
            ActionRequest::RetryTasks { tasks: t, .. } => tasks("retry", t),
            ActionRequest::DebugPod { pod, .. } => format!("debug pod of {pod}"),
            ActionRequest::Bulk(all) => match all.as_slice() {
                [one] => one.describe(),
                many => {
                    let first = many.first().map(ActionRequest::describe);
                    let verb = first
                        .as_deref()
                        .and_then(|d| d.split(" pool ").next())
                        .and_then(|d| d.split(" agent ").next())
                        .unwrap_or("act");
                    let what = if many
                        .iter()
                        .all(|r| matches!(r, ActionRequest::DrainAgent { .. }))
                        || many.iter().all(|r| {
                            matches!(r, ActionRequest::SetDebugLogs { agent: Some(_), .. })
                        }) {
                        "agents"
                    } else if many.iter().all(|r| {
                        matches!(
                            r,
                            ActionRequest::CancelTasks { .. } | ActionRequest::RetryTasks { .. }
                        )
                    }) {
                        return many
                            .iter()
                            .map(ActionRequest::describe)
                            .collect::<Vec<_>>()
                            .join(", ");
                    } else {
                        "pools"
                    };
                    format!("{verb} {} {what}", many.len())
                }
            },
        }
    }

    /// The namespace acted in (of the first request, for a bulk one).
    pub fn namespace(&self) -> &str {
        match self {
            ActionRequest::ScalePool { namespace, .. }
            | ActionRequest::HoldReplicas { namespace, .. }
            | ActionRequest::ClearHold { namespace, .. }
            | ActionRequest::DrainPool { namespace, .. }
            | ActionRequest::DrainAgent { namespace, .. }
            | ActionRequest::SetDebugLogs { namespace, .. }
            | ActionRequest::CancelTasks { namespace, .. }
            | ActionRequest::RetryTasks { namespace, .. }
            | ActionRequest::DebugPod { namespace, .. } => namespace,
            ActionRequest::Bulk(all) => all.first().map_or("", ActionRequest::namespace),
        }
    }

    /// The single requests this one stands for.
    pub fn parts(&self) -> Vec<&ActionRequest> {
        match self {
            ActionRequest::Bulk(all) => all.iter().flat_map(ActionRequest::parts).collect(),
            one => vec![one],
        }
    }

    /// One request for one target, a bulk one for several.
    pub fn of(mut all: Vec<ActionRequest>) -> Option<ActionRequest> {
        match all.len() {
            0 => None,
            1 => all.pop(),
            _ => Some(ActionRequest::Bulk(all)),
        }
    }
}

/// A question before an action.
#[derive(Debug, Clone)]
pub struct Dialog {
    pub title: String,
    /// What will happen, in words.
    pub body: Vec<String>,
    /// Typed value (scale: `min-max`, `=N 30m`, `clear`); once it is
    /// accepted the dialog asks for the preview and a yes.
    pub input: Option<Field>,
    pub request: ActionRequest,
    /// The kube context the request goes to (empty: the console's only one).
    pub context: String,
    /// Error shown under the input.
    pub error: Option<String>,
    /// What the API's dry run says the action changes.
    pub preview: PreviewState,
    /// Lines of the dialog's text scrolled past (the keys stay shown).
    pub scroll: usize,
}

/// The dry-run preview shown in a dialog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PreviewState {
    /// Not asked for yet (the dialog still takes an input).
    #[default]
    None,
    /// Asked; the worker has not answered yet.
    Loading,
    /// The impact, in words.
    Lines(Vec<String>),
    /// Why no preview could be had.
    Failed(String),
}

/// What the scale dialog accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleInput {
    /// New bounds (one number pins both).
    Bounds(i32, i32),
    /// A hold of `replicas`, for a while or until cleared; `force` widens
    /// the bounds when it is outside them.
    Hold {
        replicas: i32,
        for_secs: Option<u64>,
        force: bool,
    },
    /// Remove the hold.
    Clear,
}

/// The scale dialog's grammar, in its own words.
pub const SCALE_HELP: &str =
    "min-max bounds (one number pins both) · =N hold N replicas · =N 30m for a while · clear";

/// Parses what was typed in the scale dialog: `1-4`, `3`, `=6`, `=6 30m`,
/// `hold 6 for 30m force`, `clear`.
pub fn parse_scale(s: &str) -> Result<ScaleInput, String> {
    let t = s.trim();
    if matches!(t, "clear" | "-" | "=") {
        return Ok(ScaleInput::Clear);
    }
    let hold = t
        .strip_prefix('=')
        .or_else(|| t.strip_prefix("hold "))
        .map(str::trim);
    let Some(rest) = hold else {
        let (lo, hi) = parse_bounds(t)?;
        return Ok(ScaleInput::Bounds(lo, hi));
    };
    let mut words = rest.split_whitespace().peekable();
    let replicas = words
        .next()
        .and_then(|n| n.trim_end_matches('!').parse::<i32>().ok())
        .filter(|n| *n >= 0)
        .ok_or_else(|| format!("{t:?}: a hold is =N (N replicas, 0 or more), e.g. =6 or =6 30m"))?;
    let mut force = rest
        .split_whitespace()
        .next()
        .is_some_and(|w| w.ends_with('!'));
    let mut for_secs = None;
    for w in words {
        match w {
            "for" => {}
            "force" | "!" => force = true,
            d => {
                let d = crate::units::parse_positive_duration(d)?;
                for_secs = Some(d.as_secs());
            }
        }
    }
    Ok(ScaleInput::Hold {
        replicas,
        for_secs,
        force,
    })
}

/// `min-max` or `n` (pinned).
pub fn parse_bounds(s: &str) -> Result<(i32, i32), String> {
    let bad = || format!("{s:?}: expected min-max (e.g. 1-4) or one number, 0 or more");
    let num = |t: &str| t.trim().parse::<i32>().ok().filter(|n| *n >= 0);
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (num(a).ok_or_else(bad)?, num(b).ok_or_else(bad)?),
        None => {
            let n = num(s).ok_or_else(bad)?;
            (n, n)
        }
    };
    if lo > hi {
        return Err(format!("min {lo} is above max {hi}"));
    }
    Ok((lo, hi))
}

/// The scale template (`ScalePool` for each target) with what was typed.
fn with_scale(template: &ActionRequest, input: &ScaleInput) -> ActionRequest {
    match template {
        ActionRequest::Bulk(all) => {
            ActionRequest::Bulk(all.iter().map(|r| with_scale(r, input)).collect())
        }
        ActionRequest::ScalePool {
            namespace, pool, ..
        } => {
            let (namespace, pool) = (namespace.clone(), pool.clone());
            match *input {
                ScaleInput::Bounds(min, max) => ActionRequest::ScalePool {
                    namespace,
                    pool,
                    min,
                    max,
                },
                ScaleInput::Hold {
                    replicas,
                    for_secs,
                    force,
                } => ActionRequest::HoldReplicas {
                    namespace,
                    pool,
                    replicas,
                    for_secs,
                    force,
                },
                ScaleInput::Clear => ActionRequest::ClearHold { namespace, pool },
            }
        }
        other => other.clone(),
    }
}

/// A hold within the bounds of every pool it is for, unless it widens
/// them (`=N!`): the console says what is allowed rather than offering an
/// action the API will refuse.
fn within_bounds(template: &ActionRequest, input: ScaleInput) -> Result<ScaleInput, String> {
    let ScaleInput::Hold {
        replicas,
        force: false,
        ..
    } = input
    else {
        return Ok(input);
    };
    for part in template.parts() {
        if let ActionRequest::ScalePool { pool, min, max, .. } = part {
            let (min, max) = (*min, *max);
            let side = if replicas > max {
                format!("above pool {pool}'s maximum {max}")
            } else if replicas < min {
                format!("below pool {pool}'s minimum {min}")
            } else {
                continue;
            };
            return Err(format!(
                "={replicas} is {side}: hold {min}–{max} (e.g. ={}), or type ={replicas}! to widen the bounds to {replicas}",
                replicas.clamp(min, max)
            ));
        }
    }
    Ok(input)
}

impl Dialog {
    /// The API refused the dry run: there is nothing to apply.
    pub fn refused(&self) -> bool {
        matches!(self.preview, PreviewState::Failed(_))
    }

    /// The keys the dialog takes now, as its last line says them.
    pub fn keys_line(&self) -> &'static str {
        if self.input.is_some() {
            "enter preview · esc cancel"
        } else if self.refused() {
            "n/esc close (nothing to apply)"
        } else {
            "y/enter apply · n/esc cancel"
        }
    }

    /// The most lines its text scrolls by in a terminal of `size`.
    fn max_scroll(&self, size: (u16, u16)) -> usize {
        let lines = dialog_lines(self, dialog_inner(size.0)).len();
        lines.saturating_sub(dialog_rows(size.1))
    }
}

/// What a line of a dialog's text is, for its colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DialogLine {
    Text,
    /// `> typed`.
    Input,
    Error,
    Muted,
    Heading,
}

/// The dialog box's width in a terminal `width` columns wide.
pub fn dialog_width(width: u16) -> u16 {
    width.saturating_sub(4).clamp(20, 80).min(width)
}

/// Columns inside the dialog box's borders.
pub fn dialog_inner(width: u16) -> usize {
    usize::from(dialog_width(width).saturating_sub(2))
}

/// Lines of text shown at once in a terminal `height` lines high: the
/// rest is borders, a blank line and the keys line, and a line of margin
/// above and below.
pub fn dialog_rows(height: u16) -> usize {
    usize::from(height.saturating_sub(6)).max(1)
}

/// The dialog's text wrapped to `inner` columns: body, what is typed, the
/// error, the preview (`status.history` as runs, each object's changes a
/// line each).
pub fn dialog_lines(d: &Dialog, inner: usize) -> Vec<(String, DialogLine)> {
    let mut lines = Vec::new();
    let mut add = |text: &str, kind: DialogLine| {
        for l in super::text::wrap(text, inner) {
            lines.push((l, kind));
        }
    };
    for b in &d.body {
        add(b, DialogLine::Text);
    }
    if let Some(input) = &d.input {
        lines.push((format!("> {}", input.value()), DialogLine::Input));
    }
    let mut add = |text: &str, kind: DialogLine| {
        for l in super::text::wrap(text, inner) {
            lines.push((l, kind));
        }
    };
    if let Some(e) = &d.error {
        add(e, DialogLine::Error);
    }
    match &d.preview {
        PreviewState::None => {}
        PreviewState::Loading => {
            add("", DialogLine::Text);
            add("Preview (dry run): asking the API…", DialogLine::Muted);
        }
        PreviewState::Lines(impact) => {
            add("", DialogLine::Text);
            add(
                if matches!(d.request, ActionRequest::DebugPod { .. }) {
                    "What it does:"
                } else {
                    "Preview (dry run):"
                },
                DialogLine::Heading,
            );
            for l in impact {
                for (n, part) in readable_preview(l).iter().enumerate() {
                    let indent = part.len() - part.trim_start().len();
                    let bullet = if n == 0 && indent == 0 {
                        "• ".to_owned()
                    } else {
                        " ".repeat(2 + indent)
                    };
                    let lead = super::text::width(&bullet);
                    let pieces = super::text::wrap_parts(part, inner.saturating_sub(lead));
                    for (m, piece) in pieces.into_iter().enumerate() {
                        let head = if m == 0 {
                            bullet.clone()
                        } else {
                            " ".repeat(lead)
                        };
                        lines.push((format!("{head}{piece}"), DialogLine::Text));
                    }
                }
            }
        }
        PreviewState::Failed(why) => {
            add("", DialogLine::Text);
            add(&format!("Refused by the API: {why}"), DialogLine::Error);
        }
    }
    lines
}

/// A preview line as the dialog shows it: `status.history` (JSON the
/// API sends whole) as one readable line per run it gains:
/// `attempt 1: Failed on iac-agent-…-9lz6q, exit 3 (why), 09:58:12Z → 09:58:24Z`.
pub fn readable_preview(line: &str) -> Vec<String> {
    const KEY: &str = "status.history: ";
    let Some(at) = line.find(KEY) else {
        return vec![line.to_owned()];
    };
    let rest = &line[at + KEY.len()..];
    let value = |s: &str| -> Option<(serde_json::Value, usize)> {
        if let Some(after) = s.strip_prefix("(none)") {
            return Some((serde_json::Value::Null, s.len() - after.len()));
        }
        let mut it = serde_json::Deserializer::from_str(s).into_iter::<serde_json::Value>();
        let v = it.next()?.ok()?;
        Some((v, it.byte_offset()))
    };
    let Some((before, used)) = value(rest) else {
        return vec![line.to_owned()];
    };
    let Some(tail) = rest[used..].strip_prefix(" → ") else {
        return vec![line.to_owned()];
    };
    let Some((after, used2)) = value(tail) else {
        return vec![line.to_owned()];
    };
    let known = before.as_array().map_or(0, Vec::len);
    let runs: Vec<String> = after
        .as_array()
        .map(|a| a.iter().skip(known).map(attempt_line).collect())
        .unwrap_or_default();
    let kept = match known {
        0 => String::new(),
        n => format!(" after the {n} it has"),
    };
    let mut out = vec![format!("{}status.history gains{kept}:", &line[..at])];
    out.extend(runs.into_iter().map(|r| format!("  {r}")));
    let more = tail[used2..].trim_start_matches("; ");
    if !more.is_empty() {
        out.push(more.to_owned());
    }
    out
}

/// One run of `status.history` in words.
fn attempt_line(run: &serde_json::Value) -> String {
    let s = |k: &str| run.get(k).and_then(serde_json::Value::as_str);
    let mut out = format!(
        "attempt {}: {}",
        run.get("attempts")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0),
        s("phase").unwrap_or("?")
    );
    if let Some(a) = s("agent") {
        out.push_str(&format!(" on {a}"));
    }
    if let Some(c) = run.get("exitCode").and_then(serde_json::Value::as_i64) {
        out.push_str(&format!(", exit {c}"));
    }
    if let Some(m) = s("message") {
        out.push_str(&format!(" ({})", super::text::clean(m)));
    }
    match (s("startedAt"), s("finishedAt")) {
        (Some(a), Some(b)) => out.push_str(&format!(", {a} → {b}")),
        (Some(a), None) => out.push_str(&format!(", started {a}")),
        (None, Some(b)) => out.push_str(&format!(", ended {b}")),
        (None, None) => {}
    }
    if let Some(by) = s("retriedBy") {
        out.push_str(&format!(", retried by {by}"));
    }
    out
}

fn names<'a>(list: impl IntoIterator<Item = &'a str>) -> String {
    let all: Vec<&str> = list.into_iter().collect();
    let mut s = all.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    if all.len() > 5 {
        s.push_str(&format!(" and {} more", all.len() - 5));
    }
    s
}

/// Tasks grouped into one request per namespace.
fn per_namespace(
    rows: &[&TaskRow],
    make: impl Fn(String, Vec<String>) -> ActionRequest,
) -> Option<ActionRequest> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in rows {
        match groups.iter_mut().find(|(ns, _)| *ns == r.namespace) {
            Some((_, names)) => names.push(r.name.clone()),
            None => groups.push((r.namespace.clone(), vec![r.name.clone()])),
        }
    }
    ActionRequest::of(groups.into_iter().map(|(ns, t)| make(ns, t)).collect())
}

impl App {
    /// The rows an action applies to: the marked ones when any are
    /// marked (and still there), else the selected one.
    fn targets<'a, R: super::rows::Row>(&self, kind: ViewKind, rows: &'a [R]) -> Vec<&'a R> {
        let t = self.table(kind);
        // Only marked rows on screen: never one hidden by a filter.
        let marked: Vec<&R> = if t.marks.is_empty() {
            Vec::new()
        } else {
            t.visible
                .iter()
                .filter_map(|&i| rows.get(i as usize))
                .filter(|r| t.marks.contains(r.key()))
                .collect()
        };
        if !marked.is_empty() {
            return marked;
        }
        self.selected_index(kind)
            .and_then(|i| rows.get(i))
            .into_iter()
            .collect()
    }

    /// Opens the confirmation of `action` on the marked rows (else the
    /// selected one) and asks the worker for the API's dry-run preview;
    /// the scale dialog first takes what to do.
    pub(super) fn ask(&mut self, action: Action) -> Vec<Command> {
        let Some((kind, _)) = self.table_kind() else {
            return Vec::new();
        };
        let s = self.snapshot.clone();
        let (mut dialog, context) = match (action, kind) {
            (Action::Scale | Action::Drain | Action::DebugLogs, ViewKind::Pools) => {
                let pools: Vec<&PoolRow> = self
                    .targets(kind, &s.pools)
                    .into_iter()
                    .map(|p| &**p)
                    .collect();
                if pools.is_empty() {
                    return Vec::new();
                }
                let Some(context) = self.one_context(&pools) else {
                    return Vec::new();
                };
                (pool_dialog(action, &pools), context.to_owned())
            }
            (Action::Drain | Action::DebugLogs, ViewKind::Agents) => {
                let agents: Vec<&AgentRow> = self
                    .targets(kind, &s.agents)
                    .into_iter()
                    .map(|a| &**a)
                    .filter(|a| a.component == "agent")
                    .collect();
                if agents.is_empty() {
                    self.toast(
                        "no agent selected or marked (task pods run one task and end)".into(),
                        true,
                    );
                    return Vec::new();
                }
                let Some(context) = self.one_context(&agents) else {
                    return Vec::new();
                };
                (agent_dialog(action, &agents), context.to_owned())
            }
            (Action::CancelTask | Action::RetryTask, ViewKind::Tasks) => {
                let cancel = action == Action::CancelTask;
                let tasks: Vec<&TaskRow> = self
                    .targets(kind, &s.tasks)
                    .into_iter()
                    .map(|t| &**t)
                    .filter(|r| {
                        if cancel {
                            !r.phase.is_finished()
                        } else {
                            matches!(r.phase, TaskPhase::Failed | TaskPhase::Errored)
                        }
                    })
                    .collect();
                if tasks.is_empty() {
                    self.toast(
                        if cancel {
                            "no unfinished task selected or marked".into()
                        } else {
                            "no Failed or Errored task selected or marked".into()
                        },
                        true,
                    );
                    return Vec::new();
                }
                let Some(context) = self.one_context(&tasks) else {
                    return Vec::new();
                };
                (task_dialog(cancel, &tasks), context.to_owned())
            }
            _ => {
                let on = match action {
                    Action::CancelTask | Action::RetryTask => "tasks",
                    Action::Drain | Action::DebugLogs => "pools and agents",
                    _ => "pools",
                };
                self.toast(format!("{} works on {on}", action.name()), true);
                return Vec::new();
            }
        };
        if !context.is_empty() {
            dialog.title = format!("{} in {context}", dialog.title);
        }
        dialog.context = context;
        let cmds = if dialog.preview == PreviewState::Loading {
            vec![routed(
                &dialog.context,
                Command::PreviewAction(dialog.request.clone()),
            )]
        } else {
            Vec::new()
        };
        self.dialog = Some(dialog);
        cmds
    }

    pub(super) fn dialog_key(&mut self, k: KeyEvent) -> Vec<Command> {
        let size = self.size;
        let Some(d) = &mut self.dialog else {
            return Vec::new();
        };
        match k.code {
            KeyCode::Esc => {
                self.dialog = None;
                Vec::new()
            }
            KeyCode::Char('n') | KeyCode::Char('N') if d.input.is_none() => {
                self.dialog = None;
                Vec::new()
            }
            // The text scrolls; the keys line stays.
            KeyCode::Down | KeyCode::PageDown => {
                let step = if k.code == KeyCode::Down { 1 } else { 10 };
                d.scroll = (d.scroll + step).min(d.max_scroll(size));
                Vec::new()
            }
            KeyCode::Up | KeyCode::PageUp => {
                let step = if k.code == KeyCode::Up { 1 } else { 10 };
                d.scroll = d.scroll.saturating_sub(step);
                Vec::new()
            }
            KeyCode::Char('j') if d.input.is_none() => {
                d.scroll = (d.scroll + 1).min(d.max_scroll(size));
                Vec::new()
            }
            KeyCode::Char('k') if d.input.is_none() => {
                d.scroll = d.scroll.saturating_sub(1);
                Vec::new()
            }
            // What was typed is read, then previewed: a second yes applies.
            KeyCode::Enter if d.input.is_some() => {
                let typed = d.input.as_ref().map(|i| i.value().to_owned());
                match parse_scale(typed.as_deref().unwrap_or_default())
                    .and_then(|input| within_bounds(&d.request, input))
                {
                    Ok(input) => {
                        d.request = with_scale(&d.request, &input);
                        d.input = None;
                        d.error = None;
                        d.body.truncate(1);
                        d.body.push(format!("→ {}", d.request.describe()));
                        d.preview = PreviewState::Loading;
                        vec![routed(
                            &d.context,
                            Command::PreviewAction(d.request.clone()),
                        )]
                    }
                    Err(e) => {
                        d.error = Some(e);
                        Vec::new()
                    }
                }
            }
            // A preview the API refused is not offered to apply.
            KeyCode::Enter | KeyCode::Char('y') | KeyCode::Char('Y')
                if d.input.is_none() && !d.refused() =>
            {
                let request = d.request.clone();
                let context = std::mem::take(&mut d.context);
                self.dialog = None;
                self.toast(format!("{}…", request.describe()), false);
                let command = match request {
                    ActionRequest::DebugPod { namespace, pod } => {
                        Command::CreateDebugPod { namespace, pod }
                    }
                    request => Command::Action(request),
                };
                vec![routed(&context, command)]
            }
            _ => {
                if let Some(input) = &mut d.input {
                    input.key(k);
                    d.error = None;
                }
                Vec::new()
            }
        }
    }
}

fn pool_dialog(action: Action, pools: &[&PoolRow]) -> Dialog {
    match action {
        Action::Scale => scale_dialog(pools),
        Action::Drain => drain_dialog(pools),
        _ => debug_logs_dialog(pools),
    }
}

/// One request per pool in `which` (at least one).
fn pool_requests(make: &dyn Fn(&PoolRow) -> ActionRequest, which: &[&PoolRow]) -> ActionRequest {
    ActionRequest::of(which.iter().map(|p| make(p)).collect()).expect("at least one pool")
}

/// "`what` pool `name`" for one pool, "`what` `n` pools" for several.
fn pools_title(what: &str, which: &[&PoolRow]) -> String {
    if which.len() == 1 {
        format!("{what} pool {}", which[0].name)
    } else {
        format!("{what} {} pools", which.len())
    }
}

/// Scale: one pool's current bounds prefilled, several pools' left empty.
fn scale_dialog(pools: &[&PoolRow]) -> Dialog {
    let many = pools.len() > 1;
    let first = pools[0];
    let now = if many {
        format!("Pools: {}.", names(pools.iter().map(|p| p.name.as_str())))
    } else {
        format!(
            "Now {}–{} agents ({} ready, {} busy); hold: {}.",
            first.min,
            first.max,
            first.ready,
            first.running,
            first.hold.as_deref().unwrap_or("none")
        )
    };
    Dialog {
        context: String::new(),
        title: pools_title("Scale", pools),
        body: vec![now, format!("{SCALE_HELP}:")],
        input: Some(Field::prefilled(if many {
            String::new()
        } else {
            format!("{}-{}", first.min, first.max)
        })),
        request: pool_requests(
            &|p| ActionRequest::ScalePool {
                namespace: p.namespace.clone(),
                pool: p.name.clone(),
                min: p.min,
                max: p.max,
            },
            pools,
        ),
        error: None,
        preview: PreviewState::None,
        scroll: 0,
    }
}

/// Drain the pools not draining yet; when all are, resume them.
fn drain_dialog(pools: &[&PoolRow]) -> Dialog {
    let undo = pools.iter().all(|p| p.draining);
    let which: Vec<&PoolRow> = pools
        .iter()
        .copied()
        .filter(|p| undo || !p.draining)
        .collect();
    let busy: i32 = which.iter().map(|p| p.running).sum();
    let pending: i32 = which.iter().map(|p| p.pending).sum();
    Dialog {
        context: String::new(),
        title: pools_title(if undo { "Resume" } else { "Drain" }, &which),
        body: if undo {
            vec![
                names(which.iter().map(|p| p.name.as_str())),
                "Agents claim new tasks again.".into(),
            ]
        } else {
            vec![
                names(which.iter().map(|p| p.name.as_str())),
                "No new tasks are claimed; the pool scales to zero once idle.".into(),
                format!(
                    "{busy} busy agent(s) finish their task first; {pending} pending task(s) wait."
                ),
            ]
        },
        input: None,
        request: pool_requests(
            &|p| ActionRequest::DrainPool {
                namespace: p.namespace.clone(),
                pool: p.name.clone(),
                undo,
            },
            &which,
        ),
        error: None,
        preview: PreviewState::Loading,
        scroll: 0,
    }
}

/// Debug logs on for the pools without them; when all have them, off.
fn debug_logs_dialog(pools: &[&PoolRow]) -> Dialog {
    let on = !pools.iter().all(|p| p.debug);
    let which: Vec<&PoolRow> = pools.iter().copied().filter(|p| !on || !p.debug).collect();
    let ready: i32 = which.iter().map(|p| p.ready).sum();
    Dialog {
        context: String::new(),
        title: pools_title(
            if on {
                "Debug logs on for"
            } else {
                "Debug logs off for"
            },
            &which,
        ),
        body: vec![
            names(which.iter().map(|p| p.name.as_str())),
            format!("{ready} agent(s) switch within a second, without a restart."),
        ],
        input: None,
        request: pool_requests(
            &|p| ActionRequest::SetDebugLogs {
                namespace: p.namespace.clone(),
                pool: p.name.clone(),
                agent: None,
                on,
            },
            &which,
        ),
        error: None,
        preview: PreviewState::Loading,
        scroll: 0,
    }
}

fn agent_dialog(action: Action, agents: &[&AgentRow]) -> Dialog {
    let title_of = |what: &str, which: &[&AgentRow]| {
        if which.len() == 1 {
            format!("{what} agent {}", which[0].name)
        } else {
            format!("{what} {} agents", which.len())
        }
    };
    if action == Action::Drain {
        let undo = agents.iter().all(|a| a.draining);
        let which: Vec<&AgentRow> = agents
            .iter()
            .copied()
            .filter(|a| undo || !a.draining)
            .collect();
        let busy = which.iter().filter(|a| a.task.is_some()).count();
        Dialog {
            context: String::new(),
            title: title_of(if undo { "Resume" } else { "Drain" }, &which),
            body: if undo {
                vec![
                    names(which.iter().map(|a| a.name.as_str())),
                    "They claim new tasks again.".into(),
                ]
            } else {
                vec![
                    names(which.iter().map(|a| a.name.as_str())),
                    format!("They claim nothing new; {busy} busy one(s) finish their task first."),
                ]
            },
            input: None,
            request: ActionRequest::of(
                which
                    .iter()
                    .map(|a| ActionRequest::DrainAgent {
                        namespace: a.namespace.clone(),
                        pool: a.pool.clone(),
                        agent: a.name.clone(),
                        undo,
                    })
                    .collect(),
            )
            .expect("at least one agent"),
            error: None,
            preview: PreviewState::Loading,
            scroll: 0,
        }
    } else {
        let on = !agents.iter().all(|a| a.debug);
        let which: Vec<&AgentRow> = agents.iter().copied().filter(|a| !on || !a.debug).collect();
        Dialog {
            context: String::new(),
            title: title_of(
                if on {
                    "Debug logs on for"
                } else {
                    "Debug logs off for"
                },
                &which,
            ),
            body: vec![
                names(which.iter().map(|a| a.name.as_str())),
                "Switches within a second, without a restart.".into(),
            ],
            input: None,
            request: ActionRequest::of(
                which
                    .iter()
                    .map(|a| ActionRequest::SetDebugLogs {
                        namespace: a.namespace.clone(),
                        pool: a.pool.clone(),
                        agent: Some(a.name.clone()),
                        on,
                    })
                    .collect(),
            )
            .expect("at least one agent"),
            error: None,
            preview: PreviewState::Loading,
            scroll: 0,
        }
    }
}

fn task_dialog(cancel: bool, tasks: &[&TaskRow]) -> Dialog {
    let list = names(tasks.iter().map(|t| t.name.as_str()));
    if cancel {
        let running = tasks
            .iter()
            .filter(|r| r.phase == TaskPhase::Running)
            .count();
        Dialog {
            context: String::new(),
            title: format!("Cancel {} task(s)", tasks.len()),
            body: vec![
                list,
                format!("{running} running: their command gets SIGTERM, then SIGKILL."),
            ],
            input: None,
            request: per_namespace(tasks, |namespace, tasks| ActionRequest::CancelTasks {
                namespace,
                tasks,
            })
            .expect("at least one task"),
            error: None,
            preview: PreviewState::Loading,
            scroll: 0,
        }
    } else {
        Dialog {
            context: String::new(),
            title: format!("Retry {} task(s)", tasks.len()),
            body: vec![
                list,
                "Each runs again from Pending; earlier attempts stay in its history.".into(),
            ],
            input: None,
            request: per_namespace(tasks, |namespace, tasks| ActionRequest::RetryTasks {
                namespace,
                tasks,
            })
            .expect("at least one task"),
            error: None,
            preview: PreviewState::Loading,
            scroll: 0,
        }
    }
}

/// How long a toast naming a zip path or a debug pod stays.
pub const LONG_TOAST_FOR: Duration = Duration::from_secs(20);

/// A support bundle on its way, for the console's gauge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleGauge {
    /// `namespace team` or `pool alpha`.
    pub scope: String,
    /// `starting`, `listing`, `collecting`, `finishing`, `done`.
    pub phase: String,
    pub files_done: u64,
    pub files_expected: u64,
    /// Uncompressed bytes written.
    pub bytes: u64,
}

impl BundleGauge {
    /// Done so far, 0 to 1 (files planned grow while listing).
    pub fn ratio(&self) -> f64 {
        if self.phase == "done" {
            return 1.0;
        }
        let expected = self.files_expected.max(self.files_done);
        if expected == 0 {
            0.0
        } else {
            (self.files_done as f64 / expected as f64).clamp(0.0, 1.0)
        }
    }
}

impl App {
    /// Messages from the bundle, debug-pod, audit and action workers.
    pub(super) fn job_msg(&mut self, msg: super::Msg) -> Vec<Command> {
        use super::Msg;
        match msg {
            Msg::ActionQueued { request, ahead } => self.toast(
                format!(
                    "{}: queued behind {ahead} action(s) still running",
                    request.describe()
                ),
                false,
            ),
            Msg::AuditLoaded(result) => self.audit_loaded(result),
            // A report after the end does not bring the gauge back.
            Msg::BundleProgress(g) if self.bundle.is_some() => self.bundle = Some(g),
            Msg::BundleWritten(result) => {
                self.bundle = None;
                match result {
                    Ok(path) => self.toast(format!("bundle written: {path}"), false),
                    Err(why) => self.toast(format!("bundle failed: {why}"), true),
                }
                self.keep_toast();
            }
            Msg::DebugPodCreated(result) => {
                match result {
                    Ok(what) => self.toast(what, false),
                    Err(why) => self.toast(format!("debug pod failed: {why}"), true),
                }
                self.keep_toast();
            }
            _ => {}
        }
        Vec::new()
    }

    /// A toast that names something to copy (a path, a pod) stays longer.
    fn keep_toast(&mut self) {
        if let Some(t) = &mut self.toast {
            t.until = self.now.checked_add(LONG_TOAST_FOR).unwrap_or(t.until);
        }
    }

    /// `b`: a bundle of the pool in view (the selected one in Pools, the
    /// one a view is narrowed to), else of the namespace.
    pub(super) fn bundle_key(&mut self) -> Vec<Command> {
        let pool = match self.table_kind() {
            Some((ViewKind::Pools, _)) => self.selected_pool_name(),
            Some((_, Some(p))) => Some(p.to_owned()),
            _ => None,
        };
        self.take_bundle(pool)
    }

    /// `:bundle [POOL]`.
    pub(super) fn take_bundle(&mut self, pool: Option<String>) -> Vec<Command> {
        if let Some(g) = &self.bundle {
            let text = format!(
                "a bundle of {} is being written ({}/{} files)",
                g.scope, g.files_done, g.files_expected
            );
            self.toast(text, true);
            return Vec::new();
        }
        let s = self.snapshot.clone();
        let (namespace, context) = match &pool {
            Some(p) => {
                let found: Vec<&PoolRow> = s
                    .pools
                    .iter()
                    .filter(|r| super::fleet::in_pool(&***r, p))
                    .map(|r| &**r)
                    .collect();
                match found[..] {
                    [r] => (r.namespace.clone(), r.context.to_string()),
                    [] => {
                        let known = names(s.pools.iter().map(|r| r.name.as_str()));
                        self.toast(format!("no pool {p}; pools: {known}"), true);
                        return Vec::new();
                    }
                    _ => {
                        let ctx = names(found.iter().map(|r| &*r.context));
                        self.toast(
                            format!("pool {p} is in contexts {ctx}: :bundle CONTEXT/{p} names one"),
                            true,
                        );
                        return Vec::new();
                    }
                }
            }
            None if self.is_fleet() => match &self.narrow {
                Some(c) => {
                    let ns = s
                        .pools
                        .iter()
                        .find(|r| &*r.context == c)
                        .map_or_else(|| self.opts.namespace.clone(), |r| r.namespace.clone());
                    (ns, c.clone())
                }
                None => {
                    self.toast(
                        "a bundle is of one context's namespace: :ctx NAME first, or :bundle POOL"
                            .into(),
                        true,
                    );
                    return Vec::new();
                }
            },
            None => (self.opts.namespace.clone(), String::new()),
        };
        // The pool's own name (a view narrowed to a pool of one context
        // names it `context/name`).
        let pool = pool.map(|p| super::fleet::name_of_key(&p).to_owned());
        if namespace.is_empty() {
            self.toast(
                "a bundle is of one namespace: start with -n NS, or :bundle POOL".into(),
                true,
            );
            return Vec::new();
        }
        let scope = match &pool {
            Some(p) => format!("pool {}", super::fleet::key_in(&context, p)),
            None => format!("namespace {}", super::fleet::key_in(&context, &namespace)),
        };
        self.bundle = Some(BundleGauge {
            scope,
            phase: "starting".into(),
            files_done: 0,
            files_expected: 0,
            bytes: 0,
        });
        // The pools' last hour as this console saw it goes in the bundle.
        let history = Some(self.pool_history.export(&namespace, pool.as_deref()));
        vec![routed(
            &context,
            Command::TakeBundle {
                namespace,
                pool,
                history,
            },
        )]
    }

    /// `D` on an agent: a copy-mode debug pod of it.
    pub(super) fn debug_pod_key(&mut self) -> Vec<Command> {
        let agent = match self.table_kind() {
            Some((ViewKind::Agents, _)) => self
                .selected_index(ViewKind::Agents)
                .and_then(|i| self.snapshot.agents.get(i))
                .map(|a| (a.namespace.clone(), a.name.clone(), a.context.to_string())),
            _ => None,
        };
        let Some((namespace, pod, context)) = agent else {
            self.toast("debug-pod works on an agent (2 or :agents)".into(), true);
            return Vec::new();
        };
        let ttl = crate::units::format_duration(DEBUG_POD_TTL);
        self.dialog = Some(Dialog {
            title: if context.is_empty() {
                format!("Debug pod of {pod}")
            } else {
                format!("Debug pod of {pod} in {context}")
            },
            context,
            body: vec![
                format!(
                    "A copy of {pod} with a shell (copy mode, general profile) in namespace {namespace}."
                ),
                "The agent keeps running; the copy takes no tasks.".into(),
            ],
            input: None,
            preview: PreviewState::Lines(vec![
                format!("creates a Pod debug-{pod}-…, labelled as a debug pod"),
                format!("deleted after {ttl} (agentdeck debug --cleanup deletes it sooner)"),
                "recorded in the audit trail (:audit)".into(),
            ]),
            request: ActionRequest::DebugPod { namespace, pod },
            error: None,
            scroll: 0,
        });
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_dialog_reads_bounds_holds_and_clear() {
        let ok = [
            ("1-4", ScaleInput::Bounds(1, 4)),
            (" 3 ", ScaleInput::Bounds(3, 3)),
            ("clear", ScaleInput::Clear),
            ("-", ScaleInput::Clear),
            (
                "=6",
                ScaleInput::Hold {
                    replicas: 6,
                    for_secs: None,
                    force: false,
                },
            ),
            (
                "=6 30m",
                ScaleInput::Hold {
                    replicas: 6,
                    for_secs: Some(1800),
                    force: false,
                },
            ),
            (
                "hold 0 for 1h30m force",
                ScaleInput::Hold {
                    replicas: 0,
                    for_secs: Some(5400),
                    force: true,
                },
            ),
            (
                "=9! 2h",
                ScaleInput::Hold {
                    replicas: 9,
                    for_secs: Some(7200),
                    force: true,
                },
            ),
        ];
        for (typed, want) in ok {
            assert_eq!(parse_scale(typed), Ok(want), "{typed}");
        }
        for bad in ["", "4-1", "=-2", "=x", "=3 soon", "=3 0s", "a-b"] {
            assert!(parse_scale(bad).is_err(), "{bad}");
        }
        assert!(parse_scale("=3 soon").is_err_and(|e| e.contains("30m")));
        assert!(parse_scale("4-1").is_err_and(|e| e.contains("above max")));
    }

    #[test]
    fn a_bulk_request_reads_as_one_sentence() {
        let drain = |p: &str| ActionRequest::DrainPool {
            namespace: "ns".into(),
            pool: p.into(),
            undo: false,
        };
        assert_eq!(
            ActionRequest::Bulk(vec![drain("a"), drain("b"), drain("c")]).describe(),
            "drain 3 pools"
        );
        let agent = |a: &str| ActionRequest::DrainAgent {
            namespace: "ns".into(),
            pool: "p".into(),
            agent: a.into(),
            undo: true,
        };
        assert_eq!(
            ActionRequest::Bulk(vec![agent("x"), agent("y")]).describe(),
            "resume 2 agents"
        );
        assert_eq!(ActionRequest::of(vec![drain("a")]), Some(drain("a")));
        assert_eq!(ActionRequest::of(vec![]), None);
        let bulk = ActionRequest::Bulk(vec![drain("a"), drain("b")]);
        assert_eq!(bulk.parts().len(), 2);
        assert_eq!(bulk.namespace(), "ns");
    }

    #[test]
    fn status_history_in_a_preview_reads_as_the_runs_it_gains() {
        let plain = "AgentPool/platform: spec.drain: false → true";
        assert_eq!(readable_preview(plain), [plain]);
        let broken = "AgentTask/t: status.history: [{\"attempts\": → oops";
        assert_eq!(readable_preview(broken), [broken]);
        let line = concat!(
            "AgentTask/t: status.attempts: 2 → 2; ",
            r#"status.history: [{"attempts":1,"phase":"Failed"}] → "#,
            r#"[{"attempts":1,"phase":"Failed"},{"attempts":2,"phase":"Errored","agent":"a-9lz6q","exitCode":1,"message":"bad; worse","startedAt":"s","finishedAt":"f","retriedBy":"bob"}]; "#,
            r#"status.phase: "Errored" → "Pending""#
        );
        assert_eq!(
            readable_preview(line),
            [
                "AgentTask/t: status.attempts: 2 → 2; status.history gains after the 1 it has:",
                "  attempt 2: Errored on a-9lz6q, exit 1 (bad; worse), s → f, retried by bob",
                "status.phase: \"Errored\" → \"Pending\"",
            ]
        );
    }
}
