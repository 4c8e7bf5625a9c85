//! Drawing: pure functions of the app state and the theme. No clock (ages
//! come from `app.now`), no I/O; only the rows and log lines on screen are
//! built into widgets. Table columns are declared as data.

pub mod audit;
pub mod empty_view;
pub mod history;
pub mod theme;

use std::borrow::Cow;

use jiff::Timestamp;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row as TableRow, Table, Wrap};

use crate::app::keymap::Action;
use crate::app::logs::wrapped_rows;
use crate::app::rows::{AgentRow, EventRow, PoolRow, Row, TaskRow};
use crate::app::text;
use crate::app::{
    App, FOOTER_LINES, HEADER_LINES, Prompt, Role as AppRole, Screen, ViewKind, WatchState,
};
use crate::crd::TaskPhase;
use crate::health::Freshness;
use crate::plan::verdict::VerdictLevel as Level;
pub use theme::{Role, Theme};

/// How a column gives way when the screen is narrow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Whole or not at all: numbers, ages, phases, short words. The
    /// column is as wide as its widest cell on screen.
    Whole,
    /// A name: shortened in the middle, keeping the suffix that tells
    /// pods apart (`iac-agent-pla…-9lz6q`).
    Name,
    /// Long text: gets the width left over last, cut at the end with `…`.
    Long,
}

/// A table column: title, width, which columns go first when space is
/// short (lower first), how it gives way, and how to get a cell.
pub struct Column<R> {
    pub title: &'static str,
    /// `Whole`: the least width (so the column does not jump as rows
    /// change); `Name` and `Long`: the width it has before the space left
    /// over is shared out.
    pub width: u16,
    /// Takes the width left over at the end (at most one per table).
    pub fill: bool,
    pub priority: u8,
    pub right: bool,
    /// Shown only in wide mode (`ctrl-w`).
    pub wide: bool,
    pub fit: Fit,
    pub cell: fn(&R, Timestamp) -> (Cow<'_, str>, Role),
}

type CellFn<R> = fn(&R, Timestamp) -> (Cow<'_, str>, Role);

/// A column whose cells are shown whole or not at all.
const fn col<R>(title: &'static str, width: u16, priority: u8, cell: CellFn<R>) -> Column<R> {
    Column {
        title,
        width,
        fill: false,
        priority,
        right: false,
        wide: false,
        fit: Fit::Whole,
        cell,
    }
}

/// A column of names, shortened in the middle.
const fn name<R>(title: &'static str, width: u16, priority: u8, cell: CellFn<R>) -> Column<R> {
    Column {
        fit: Fit::Name,
        ..col(title, width, priority, cell)
    }
}

/// A column of long text, cut at the end with `…`.
const fn long<R>(title: &'static str, width: u16, priority: u8, cell: CellFn<R>) -> Column<R> {
    Column {
        fit: Fit::Long,
        ..col(title, width, priority, cell)
    }
}

/// A column of wide mode only.
const fn wide<R>(title: &'static str, width: u16, fit: Fit, cell: CellFn<R>) -> Column<R> {
    Column {
        wide: true,
        fit,
        ..col(title, width, 1, cell)
    }
}

/// Labels as `k=v,k2=v2`, sanitised.
fn labels_cell(labels: &crate::app::rows::Labels) -> (Cow<'_, str>, Role) {
    if labels.is_empty() {
        return (Cow::Borrowed("-"), Role::Muted);
    }
    let text = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    (Cow::Owned(crate::app::text::clean(&text)), Role::Muted)
}

/// The long-text column that takes the width left over.
const fn fill<R>(title: &'static str, width: u16, priority: u8, cell: CellFn<R>) -> Column<R> {
    Column {
        fill: true,
        ..long(title, width, priority, cell)
    }
}

/// A number (or age), right-aligned and never cut.
const fn num<R>(title: &'static str, width: u16, priority: u8, cell: CellFn<R>) -> Column<R> {
    Column {
        right: true,
        ..col(title, width, priority, cell)
    }
}

/// `5s`, `3m`, `2h`, `4d`, as kubectl shows ages.
pub fn age(now: Timestamp, then: Option<Timestamp>) -> String {
    let Some(then) = then else {
        return "-".into();
    };
    let s = now.duration_since(then).as_secs().max(0);
    duration(s)
}

/// Seconds in the same short form.
pub fn duration(s: i64) -> String {
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60)
            .trim_end_matches("00s")
            .to_owned(),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
            .trim_end_matches("00m")
            .to_owned(),
        s => format!("{}d", s / 86_400),
    }
}

fn t<'a>(s: &'a str) -> (Cow<'a, str>, Role) {
    (Cow::Borrowed(s), Role::Text)
}

fn o<'a>(s: String, r: Role) -> (Cow<'a, str>, Role) {
    (Cow::Owned(s), r)
}

fn dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

fn phase_role(p: TaskPhase) -> Role {
    match p {
        TaskPhase::Pending | TaskPhase::Scheduled => Role::Pending,
        TaskPhase::Running => Role::Running,
        TaskPhase::Succeeded => Role::Succeeded,
        TaskPhase::Failed | TaskPhase::Errored => Role::Failed,
        TaskPhase::Cancelled => Role::Muted,
    }
}

fn freshness_role(f: Option<Freshness>) -> Role {
    match f {
        Some(Freshness::Fresh) => Role::Fresh,
        Some(Freshness::Stale) => Role::Stale,
        Some(Freshness::Offline) => Role::Offline,
        None => Role::Muted,
    }
}

fn level_role(l: Level) -> Role {
    match l {
        Level::Ok => Role::Ok,
        Level::Degraded => Role::Warn,
        Level::Stuck => Role::Danger,
    }
}

/// Columns of the Pools view.
pub fn pool_columns() -> Vec<Column<PoolRow>> {
    vec![
        name("NAME", 14, 0, |r, _| t(&r.name)),
        col("VERDICT", 9, 0, |r, _| {
            (
                Cow::Borrowed(r.verdict.level.as_str()),
                level_role(r.verdict.level),
            )
        }),
        col("MODE", 10, 5, |r, _| t(r.mode)),
        col("READY", 8, 1, |r, _| {
            let role = if r.ready < r.desired {
                Role::Warn
            } else {
                Role::Text
            };
            o(format!("{}/{}/{}", r.ready, r.replicas, r.desired), role)
        }),
        col("MIN-MAX", 7, 4, |r, _| {
            o(format!("{}-{}", r.min, r.max), Role::Text)
        }),
        num("PEND", 4, 1, |r, _| {
            let role = if r.pending > 0 {
                Role::Pending
            } else {
                Role::Muted
            };
            o(r.pending.to_string(), role)
        }),
        num("RUN", 3, 1, |r, _| {
            let role = if r.running > 0 {
                Role::Running
            } else {
                Role::Muted
            };
            o(r.running.to_string(), role)
        }),
        col("HEALTH", 8, 2, |r, _| {
            let role = if r.offline > 0 {
                Role::Offline
            } else if r.stale > 0 {
                Role::Stale
            } else if r.fresh > 0 {
                Role::Fresh
            } else {
                Role::Muted
            };
            o(format!("{}/{}/{}", r.fresh, r.stale, r.offline), role)
        }),
        long("FROZEN", 9, 3, |r, _| match &r.frozen {
            Some(why) => (Cow::Borrowed(why.as_str()), Role::Warn),
            None => (Cow::Borrowed("-"), Role::Muted),
        }),
        col("DRAIN", 5, 6, |r, _| {
            if r.draining {
                (Cow::Borrowed("yes"), Role::Warn)
            } else {
                (Cow::Borrowed("-"), Role::Muted)
            }
        }),
        col("DEBUG", 5, 7, |r, _| {
            if r.debug {
                (Cow::Borrowed("on"), Role::Warn)
            } else {
                (Cow::Borrowed("-"), Role::Muted)
            }
        }),
        long("HOLD", 16, 5, |r, _| match &r.hold {
            Some(h) => (Cow::Borrowed(h.as_str()), Role::Warn),
            None => (Cow::Borrowed("-"), Role::Muted),
        }),
        // Of the pools with capacity windows only, the last column to come
        // in when the width is short.
        long("CAPACITY", 20, 10, |r, _| match &r.capacity {
            Some(c) => (Cow::Borrowed(c.as_str()), Role::Text),
            None => (Cow::Borrowed("-"), Role::Muted),
        }),
        fill("REASON", 24, 1, |r, _| {
            (
                Cow::Borrowed(r.verdict.reason.as_str()),
                level_role(r.verdict.level),
            )
        }),
        long("LAST SCALE", 24, 8, |r, now| {
            match (r.scale_reason.is_empty(), r.last_scale) {
                (true, _) => (Cow::Borrowed("-"), Role::Muted),
                // A reason without a scaling yet (job mode, a hold): no age.
                (false, None) => (Cow::Borrowed(r.scale_reason.as_str()), Role::Muted),
                (false, Some(at)) => o(
                    format!("{} ago: {}", age(now, Some(at)), r.scale_reason),
                    Role::Muted,
                ),
            }
        }),
        num("AGE", 6, 3, |r, now| o(age(now, r.created), Role::Muted)),
        // Drawn from the history in `table` (a cell sees only its row);
        // the first column to go when the width is short.
        col(history::SPARK_TITLE, history::SPARK_WIDTH, 9, |_, _| {
            (Cow::Borrowed(history::SPARK_BLANK), Role::Pending)
        }),
        wide("LABELS", 24, Fit::Long, |r, _| labels_cell(&r.labels)),
    ]
}

/// Columns of the Agents view.
pub fn agent_columns() -> Vec<Column<AgentRow>> {
    vec![
        name("NAME", 24, 0, |r, _| t(&r.name)),
        name("POOL", 12, 2, |r, _| t(&r.pool)),
        col("PHASE", 9, 1, |r, _| {
            let role = match r.phase.as_str() {
                "Running" if r.ready => Role::Ok,
                "Running" | "Pending" => Role::Pending,
                "Succeeded" => Role::Succeeded,
                "Failed" => Role::Failed,
                _ => Role::Muted,
            };
            (Cow::Borrowed(r.phase.as_str()), role)
        }),
        col("HEALTH", 7, 0, |r, _| {
            let s = match (r.health, r.component) {
                (Some(h), _) => h.as_str(),
                (None, "task") => "job",
                (None, _) => "-",
            };
            (Cow::Borrowed(s), freshness_role(r.health))
        }),
        num("ACTIVE", 6, 1, |r, now| {
            o(
                r.last_activity
                    .map_or_else(|| "-".into(), |t| age(now, Some(t))),
                freshness_role(r.health),
            )
        }),
        num("SKEW", 5, 5, |r, _| match r.skew {
            Some(s) => o(format!("{s:+}s"), Role::Warn),
            None => (Cow::Borrowed("-"), Role::Muted),
        }),
        name("TASK", 20, 1, |r, _| {
            // An operator's per-agent drain or debug logs show beside it.
            let flags = match (r.draining, r.debug) {
                (false, false) => "",
                (true, false) => " (drain)",
                (false, true) => " (debug)",
                (true, true) => " (drain, debug)",
            };
            match (&r.task, flags) {
                (Some(task), "") => (Cow::Borrowed(task.as_str()), Role::Running),
                (Some(task), f) => o(format!("{task}{f}"), Role::Warn),
                (None, "") => (Cow::Borrowed("idle"), Role::Muted),
                (None, f) => o(format!("idle{f}"), Role::Warn),
            }
        }),
        name("NODE", 14, 6, |r, _| t(dash(&r.node))),
        num("RST", 3, 4, |r, _| {
            let role = if r.restarts > 0 {
                Role::Warn
            } else {
                Role::Muted
            };
            o(r.restarts.to_string(), role)
        }),
        num("AGE", 6, 3, |r, now| o(age(now, r.created), Role::Muted)),
        wide("LABELS", 24, Fit::Long, |r, _| labels_cell(&r.labels)),
    ]
}

/// Columns of the Tasks view.
pub fn task_columns() -> Vec<Column<TaskRow>> {
    vec![
        name("NAME", 22, 0, |r, _| t(&r.name)),
        name("POOL", 12, 2, |r, _| t(&r.pool)),
        col("PHASE", 9, 0, |r, _| {
            (Cow::Borrowed(r.phase.as_str()), phase_role(r.phase))
        }),
        name("AGENT", 20, 4, |r, _| t(dash(&r.agent))),
        wide("JOB", 20, Fit::Name, |r, _| {
            t(dash(r.job.as_deref().unwrap_or_default()))
        }),
        num("ATT", 3, 5, |r, _| o(r.attempts.to_string(), Role::Muted)),
        num("WAIT", 6, 3, |r, now| {
            let s = match r.waited {
                Some(d) => duration(d.as_secs() as i64),
                None if r.phase == TaskPhase::Pending => age(now, r.created),
                None => "-".into(),
            };
            o(s, Role::Muted)
        }),
        num("RUN", 6, 1, |r, now| {
            let s = match (r.started, r.finished) {
                (Some(s), Some(f)) => duration(f.duration_since(s).as_secs().max(0)),
                (Some(s), None) if r.phase == TaskPhase::Running => age(now, Some(s)),
                _ => "-".into(),
            };
            o(s, Role::Muted)
        }),
        num("AGE", 6, 2, |r, now| o(age(now, r.created), Role::Muted)),
        fill("MESSAGE", 20, 1, |r, _| {
            let role = if matches!(r.phase, TaskPhase::Failed | TaskPhase::Errored) {
                Role::Failed
            } else if r.long_running {
                Role::Warn
            } else {
                Role::Muted
            };
            (Cow::Borrowed(r.message.as_str()), role)
        }),
        wide("LABELS", 24, Fit::Long, |r, _| labels_cell(&r.labels)),
    ]
}

/// Columns of the Events view.
pub fn event_columns() -> Vec<Column<EventRow>> {
    vec![
        num("LAST", 6, 0, |r, now| o(age(now, r.last), Role::Muted)),
        col("TYPE", 7, 2, |r, _| {
            if r.warning {
                (Cow::Borrowed("Warning"), Role::Warn)
            } else {
                (Cow::Borrowed("Normal"), Role::Muted)
            }
        }),
        long("REASON", 16, 0, |r, _| t(&r.reason)),
        name("OBJECT", 28, 1, |r, _| t(&r.object)),
        num("#", 3, 3, |r, _| o(r.count.to_string(), Role::Muted)),
        fill("MESSAGE", 20, 0, |r, _| t(&r.message)),
    ]
}

/// The least width column `c` is shown in, given the widest of its cells
/// on screen (`natural`).
fn least_width<R>(c: &Column<R>, natural: u16) -> u16 {
    let title = text::width(c.title) as u16;
    match c.fit {
        Fit::Whole => title.max(natural).max(c.width),
        Fit::Name | Fit::Long => title.max(natural.min(c.width)),
    }
}

/// The columns shown in `width` and how wide each is, in declared order.
/// Columns are taken by priority while their least width fits (so every
/// number and age is whole or its column is gone); the width left over
/// goes to names up to their full length, then to long text, and what is
/// still left to the `fill` column. `natural` is the widest cell of each
/// column on screen; wide-mode columns only when `wide`.
pub fn layout<R>(cols: &[Column<R>], natural: &[u16], width: u16, wide: bool) -> Vec<(usize, u16)> {
    let mut by_priority: Vec<usize> = (0..cols.len()).filter(|&i| wide || !cols[i].wide).collect();
    by_priority.sort_by_key(|&i| (cols[i].priority, i));
    let natural_of = |i: usize| natural.get(i).copied().unwrap_or(0);
    let mut used = 0u16;
    let mut keep: Vec<(usize, u16)> = Vec::new();
    for i in by_priority {
        let w = least_width(&cols[i], natural_of(i));
        let gap = u16::from(!keep.is_empty());
        if used + gap + w <= width {
            used += gap + w;
            keep.push((i, w));
        }
    }
    let mut spare = width - used;
    // Names first, then long text; within each, a column at a time so
    // the short ones end up whole.
    for fit in [Fit::Name, Fit::Long] {
        loop {
            let mut grew = false;
            for (i, w) in &mut keep {
                let c = &cols[*i];
                if spare > 0 && c.fit == fit && *w < natural_of(*i) {
                    *w += 1;
                    spare -= 1;
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
    }
    if let Some((_, w)) = keep.iter_mut().find(|(i, _)| cols[*i].fill) {
        *w += spare;
    }
    keep.sort_unstable();
    keep
}

/// A cell's text in `w` columns, as its column gives way.
fn fitted(text: Cow<'_, str>, w: u16, fit: Fit) -> String {
    match fit {
        Fit::Whole => text.into_owned(),
        Fit::Name => text::shorten_middle(&text, w.into()).into_owned(),
        Fit::Long => text::ellipsize(&text, w.into()).into_owned(),
    }
}

/// The columns shown and, for each row, its cells fitted to them.
type LaidOut = (Vec<(usize, u16)>, Vec<Vec<(String, Role)>>);

/// Lays `rows` (the ones on screen) out in `width`.
fn lay_out<'r, R: 'r>(
    cols: &[Column<R>],
    rows: impl Iterator<Item = &'r R>,
    now: Timestamp,
    width: u16,
    wide: bool,
) -> LaidOut {
    let shown = |c: &Column<R>| wide || !c.wide;
    let cells: Vec<Vec<(Cow<'r, str>, Role)>> = rows
        .map(|r| {
            cols.iter()
                .map(|c| {
                    if shown(c) {
                        (c.cell)(r, now)
                    } else {
                        (Cow::Borrowed(""), Role::Text)
                    }
                })
                .collect()
        })
        .collect();
    let natural: Vec<u16> = (0..cols.len())
        .map(|i| {
            cells
                .iter()
                .map(|row| text::width(&row[i].0))
                .max()
                .unwrap_or(0)
                .try_into()
                .unwrap_or(u16::MAX)
        })
        .collect();
    let keep = layout(cols, &natural, width, wide);
    let fitted_rows = cells
        .into_iter()
        .map(|mut row| {
            keep.iter()
                .map(|&(i, w)| {
                    let (text, role) =
                        std::mem::replace(&mut row[i], (Cow::Borrowed(""), Role::Text));
                    (fitted(text, w, cols[i].fit), role)
                })
                .collect()
        })
        .collect();
    (keep, fitted_rows)
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, app: &App, theme: &Theme) {
    let area = frame.area();
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(HEADER_LINES),
        Constraint::Min(1),
        Constraint::Length(FOOTER_LINES),
    ])
    .areas(area);
    draw_header(frame, header, app, theme);
    match app.screen() {
        Screen::Table { kind, pool } => draw_table(frame, body, app, theme, *kind, pool.as_deref()),
        Screen::Logs { title, .. } => draw_logs(frame, body, app, theme, title),
        Screen::Yaml { object } => draw_yaml(
            frame,
            body,
            app,
            theme,
            &if object.context.is_empty() {
                format!("{} {}/{}", object.kind, object.namespace, object.name)
            } else {
                format!(
                    "{} {}/{} in {}",
                    object.kind, object.namespace, object.name, object.context
                )
            },
        ),
        Screen::Audit => audit::draw_audit(frame, body, app, theme),
        Screen::PoolHistory {
            context,
            namespace,
            name,
        } => history::draw_pool_history(frame, body, app, theme, context, namespace, name),
    }
    audit::draw_bundle_gauge(frame, body, app, theme);
    draw_footer(frame, footer, app, theme);
    if app.help {
        draw_help(frame, area, app, theme);
    }
    if app.dialog.is_some() {
        draw_dialog(frame, area, app, theme);
    }
}

fn draw_header(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let width = usize::from(area.width);
    let first = header_status(app, theme, width);
    let second = header_tabs(app, theme, width);
    frame.render_widget(Paragraph::new(vec![first, second]), area);
}

/// The header's first line: context, namespace, role, API latency, the
/// watches' state and the clock (a bundle's name and time in their place).
fn header_status<'a>(app: &'a App, theme: &Theme, width: usize) -> Line<'a> {
    let h = |s: &'static str| Span::styled(s, theme.style(Role::Header));
    let v = |s: String, r: Role| Span::styled(s, theme.style(r));
    let role = app.status.role;
    let role_style = match role {
        AppRole::Leader => Role::Ok,
        AppRole::Observer => Role::Warn,
        AppRole::ReadOnly => Role::Warn,
    };
    let (watch, watch_role) = watch_words(&app.status.watch);
    let latency = match app.status.latency {
        Some(d) if d.as_millis() >= 1 => format!("{}ms", d.as_millis()),
        Some(d) => format!("{:.1}ms", d.as_secs_f64() * 1000.0),
        None => "-".into(),
    };
    let clock = app.now.strftime("%H:%M:%S").to_string();
    // The watch state stays whatever the width; the other parts go, least
    // useful first, when they do not fit. A long reason is shortened so
    // that the context and the role stay beside it down to 24 columns of
    // it; narrower, they go too.
    let ctx = text::shorten_middle(&app.opts.context, 28).into_owned();
    let beside = text::width(" ctx ")
        + text::width(&ctx)
        + text::width("  role ")
        + text::width(role.as_str())
        + text::width("  watch ");
    let budget = width
        .saturating_sub(beside)
        .max(24)
        .min(width.saturating_sub(text::width("  watch ")));
    let watch = text::ellipsize(&watch, budget).into_owned();
    let parts: Vec<(u8, Vec<Span>)> = vec![
        (
            6,
            vec![Span::styled(" agentdeck ", theme.style(Role::Title))],
        ),
        (2, vec![h(" ctx "), v(ctx, Role::HeaderValue)]),
        (
            3,
            vec![h("  ns "), v(app.opts.namespace.clone(), Role::HeaderValue)],
        ),
        (
            1,
            vec![h("  role "), v(role.as_str().to_owned(), role_style)],
        ),
        (
            5,
            app.status
                .role_reason
                .as_ref()
                .map(|why| {
                    let why = text::ellipsize(why, 60).into_owned();
                    vec![v(format!(": {why}"), Role::Muted)]
                })
                .unwrap_or_default(),
        ),
        (5, vec![h("  api "), v(latency, Role::HeaderValue)]),
        (0, vec![h("  watch "), v(watch, watch_role)]),
        (4, vec![h("  "), v(format!("{clock}Z"), Role::HeaderValue)]),
    ];
    let mut parts = parts;
    // On a bundle: which, and when it was taken (the clock stands there),
    // in place of the clock; the API latency is the zip's, so it goes.
    if let Some(b) = &app.opts.bundle {
        // The API latency (index 5) and the clock (the last).
        parts.truncate(7);
        parts.remove(5);
        // Whole on a wide terminal (a default name is 45 characters).
        let room = if width >= 140 { 64 } else { 40 };
        let file = text::shorten_middle(&b.file, room).into_owned();
        parts.insert(1, (0, vec![h(" bundle "), v(file, Role::Warn)]));
        parts.push((
            2,
            vec![
                h("  taken "),
                v(
                    b.taken_at.strftime("%Y-%m-%d %H:%M:%SZ").to_string(),
                    Role::HeaderValue,
                ),
            ],
        ));
    }
    // `--demo`'s kubeconfig, for kubectl beside the console: the first to
    // go when the line is full (help shows it too).
    if let Some(path) = &app.opts.kubeconfig {
        parts.push((
            7,
            vec![h("  KUBECONFIG="), v(path.clone(), Role::HeaderValue)],
        ));
    }
    let parts = if app.is_fleet() {
        fleet_header(parts, app, theme, width)
    } else {
        parts
    };
    by_priority(parts, width)
}

/// The header's second line: the views, the current one highlighted, with
/// their counts, and the tasks' counts.
fn header_tabs<'a>(app: &'a App, theme: &Theme, width: usize) -> Line<'a> {
    // Second line: the views, the current one highlighted, with counts.
    let mut tabs: Vec<(u8, Vec<Span>)> = vec![(0, vec![Span::raw(" ")])];
    let current = app.table_kind().map(|(k, _)| k);
    let s = &app.snapshot;
    // Narrowed to one context (`:ctx`): that context's counts.
    let one = app
        .narrow
        .as_deref()
        .and_then(|n| s.contexts.iter().find(|c| &*c.context == n));
    for (i, kind) in ViewKind::ALL.iter().enumerate() {
        let n = match (kind, one) {
            (ViewKind::Pools, Some(c)) => c.pools,
            (ViewKind::Agents, Some(c)) => c.agents,
            (ViewKind::Tasks, Some(c)) => c.tasks,
            (ViewKind::Events, Some(c)) => c.events,
            (ViewKind::Pools, None) => s.pools.len(),
            (ViewKind::Agents, None) => s.agents.len(),
            (ViewKind::Tasks, None) => s.tasks.len(),
            (ViewKind::Events, None) => s.events.len(),
        };
        let style = if current == Some(*kind) {
            theme.style(Role::Selection)
        } else {
            theme.style(Role::Muted)
        };
        // While the first list streams in: what is here of what will be.
        let n = match loading_kind(*kind).and_then(|k| app.status.expected(k)) {
            // Not watched until a view reads them: no count to give.
            _ if *kind == ViewKind::Events && !app.events_watched => String::new(),
            Some(all) if one.is_none() && (n as u64) < all => format!(" {n}/{all}…"),
            _ => format!(" {n}"),
        };
        tabs.push((
            0,
            vec![
                Span::styled(format!("{}:{}{n}", i + 1, kind.as_str()), style),
                Span::raw("  "),
            ],
        ));
    }
    tabs.push((
        0,
        vec![
            Span::styled(
                "5:audit",
                if *app.screen() == Screen::Audit {
                    theme.style(Role::Selection)
                } else {
                    theme.style(Role::Muted)
                },
            ),
            Span::raw("  "),
        ],
    ));
    let c = one.map_or(s.task_counts, |c| c.task_counts);
    let (pend, run, fail) = (c.pending, c.running, c.failed);
    tabs.push((
        1,
        vec![Span::styled(
            format!("{pend} pending "),
            theme.style(Role::Pending),
        )],
    ));
    tabs.push((
        2,
        vec![Span::styled(
            format!("{run} running "),
            theme.style(Role::Running),
        )],
    ));
    tabs.push((
        1,
        vec![Span::styled(
            format!("{fail} failed"),
            theme.style(Role::Failed),
        )],
    ));
    by_priority(tabs, width)
}

/// The kind whose list fills a view's rows (a tab's count).
fn loading_kind(view: ViewKind) -> Option<&'static str> {
    match view {
        ViewKind::Pools => Some("AgentPool"),
        ViewKind::Agents => Some("Pod"),
        ViewKind::Tasks => Some("AgentTask"),
        ViewKind::Events => None,
    }
}

/// The header's first line with several contexts: each context's name,
/// role and connection state in place of the one context's, the one the
/// tables are narrowed to (`:ctx`) highlighted.
fn fleet_header<'a>(
    parts: Vec<(u8, Vec<Span<'a>>)>,
    app: &App,
    theme: &Theme,
    width: usize,
) -> Vec<(u8, Vec<Span<'a>>)> {
    // Keep the title, the namespace and the clock; the rest is per context.
    let mut out: Vec<(u8, Vec<Span>)> = Vec::new();
    let mut rest = parts.into_iter();
    if let Some(title) = rest.next() {
        out.push(title);
    }
    let n = app.contexts.len().max(1);
    // A reason is shortened so that every context's state fits beside the others.
    let each = (width.saturating_sub(12) / n).clamp(14, 48);
    for c in &app.contexts {
        let (state, role) = watch_words(&c.status.watch);
        let who = match c.status.watch {
            WatchState::Disconnected(_) => String::new(),
            _ => format!("{} ", c.status.role.as_str()),
        };
        let narrowed = app.narrow.as_deref() == Some(c.name.as_str());
        let name_style = if narrowed {
            theme.style(Role::Selection)
        } else {
            theme.style(Role::HeaderValue)
        };
        let name = text::shorten_middle(&c.name, 24).into_owned();
        let room = each.saturating_sub(text::width(&name) + text::width(&who) + 3);
        out.push((
            0,
            vec![
                Span::styled("  ", theme.style(Role::Header)),
                Span::styled(name, name_style),
                Span::styled(" ", theme.style(Role::Header)),
                Span::styled(who, theme.style(Role::Muted)),
                Span::styled(
                    text::ellipsize(&state, room.max(8)).into_owned(),
                    theme.style(role),
                ),
            ],
        ));
    }
    // The namespace and the clock, as with one context (after the title:
    // ctx, ns, role, its reason, api, watch, clock).
    for (i, part) in rest.enumerate() {
        if i == 1 || i == 6 {
            out.push(part);
        }
    }
    out
}

/// The parts that fit in `width`, in their order: the ones of the highest
/// priority number are left out first (priority 0 is always kept).
fn by_priority(mut parts: Vec<(u8, Vec<Span<'_>>)>, width: usize) -> Line<'_> {
    let w = |p: &[(u8, Vec<Span>)]| -> usize {
        p.iter()
            .flat_map(|(_, spans)| spans.iter())
            .map(Span::width)
            .sum()
    };
    while w(&parts) > width {
        let Some(drop) = parts
            .iter()
            .enumerate()
            .filter(|(_, (p, _))| *p > 0)
            .max_by_key(|(i, (p, _))| (*p, *i))
            .map(|(i, _)| i)
        else {
            break;
        };
        parts.remove(drop);
    }
    Line::from(parts.into_iter().flat_map(|(_, s)| s).collect::<Vec<_>>())
}

fn draw_table(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    theme: &Theme,
    kind: ViewKind,
    pool: Option<&str>,
) {
    let s = &app.snapshot;
    match kind {
        ViewKind::Pools => table(
            frame,
            area,
            app,
            theme,
            (kind, pool),
            &pools_saying_why(app),
            &pool_columns(),
            Some(&|r: &PoolRow| history::queue_sparkline(app, r)),
        ),
        ViewKind::Agents => table(
            frame,
            area,
            app,
            theme,
            (kind, pool),
            &s.agents,
            &agent_columns(),
            None,
        ),
        ViewKind::Tasks => table(
            frame,
            area,
            app,
            theme,
            (kind, pool),
            &s.tasks,
            &task_columns(),
            None,
        ),
        ViewKind::Events => table(
            frame,
            area,
            app,
            theme,
            (kind, pool),
            &s.events,
            &event_columns(),
            None,
        ),
    }
}

/// The pools' rows, where a pool has no status yet saying why no
/// controller wrote one when this console knows (it does not lead, and
/// why) instead of asking whether one runs. Only such rows are copied.
fn pools_saying_why(app: &App) -> std::borrow::Cow<'_, [std::sync::Arc<PoolRow>]> {
    let pools = &app.snapshot.pools;
    let Some(why) = app.status.role_reason.as_deref() else {
        return std::borrow::Cow::Borrowed(&pools[..]);
    };
    let asks = |r: &PoolRow| r.verdict.reason == crate::plan::verdict::NO_STATUS_YET;
    if !pools.iter().any(|r| asks(r)) {
        return std::borrow::Cow::Borrowed(&pools[..]);
    }
    let reason = format!(
        "no status yet: this console is {} ({why})",
        app.status.role.as_str()
    );
    std::borrow::Cow::Owned(
        pools
            .iter()
            .map(|r| {
                if asks(r) {
                    let mut row = PoolRow::clone(r);
                    row.verdict.reason = reason.clone();
                    std::sync::Arc::new(row)
                } else {
                    r.clone()
                }
            })
            .collect(),
    )
}

/// Cells drawn from outside the row: the pools' QUEUE 1h sparkline.
type SparkFn<'a, R> = Option<&'a dyn Fn(&R) -> String>;

#[allow(clippy::too_many_arguments)]
fn table<R: Row>(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    theme: &Theme,
    (kind, pool): (ViewKind, Option<&str>),
    rows: &[std::sync::Arc<R>],
    cols: &[Column<R>],
    spark: SparkFn<'_, R>,
) {
    let st = app.table(kind);
    let title = table_title(app, theme, (kind, pool), rows.len(), area.width);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(title);
    let inner_width = area.width.saturating_sub(2);
    // `-A`: the namespace first, as kubectl and k9s show it; with several
    // contexts, the context before it.
    let with_ns;
    let cols = if app.opts.all_namespaces || app.is_fleet() {
        let context = app
            .is_fleet()
            .then(|| name("CONTEXT", 12, 0, |r: &R, _| t(r.context())));
        let namespace = app
            .opts
            .all_namespaces
            .then(|| name("NAMESPACE", 12, 0, |r: &R, _| t(r.namespace())));
        with_ns = context
            .into_iter()
            .chain(namespace)
            .chain(cols.iter().map(|c| Column { ..*c }))
            .collect::<Vec<_>>();
        &with_ns[..]
    } else {
        cols
    };
    let page = area.height.saturating_sub(3) as usize;
    let start = st.offset.min(st.visible.len());
    let end = (start + page).min(st.visible.len());
    let on_screen: Vec<&R> = st.visible[start..end]
        .iter()
        .filter_map(|&i| rows.get(i as usize).map(|r| &**r))
        .collect();
    let (keep, mut cells) = lay_out(
        cols,
        on_screen.iter().copied(),
        app.now,
        inner_width,
        app.wide,
    );
    // The last rows of a context that cannot be reached: shown, muted.
    let down: Vec<&str> = app
        .contexts
        .iter()
        .filter(|c| matches!(c.status.watch, WatchState::Disconnected(_)))
        .map(|c| c.name.as_str())
        .collect();
    if !down.is_empty() {
        for (row, r) in cells.iter_mut().zip(&on_screen) {
            if down.contains(&r.context()) {
                for cell in row.iter_mut() {
                    cell.1 = Role::Muted;
                }
            }
        }
    }
    if let Some(spark) = spark
        && let Some(at) = keep
            .iter()
            .position(|&(i, _)| cols[i].title == history::SPARK_TITLE)
    {
        for (row, r) in cells.iter_mut().zip(&on_screen) {
            row[at].0 = spark(r);
        }
    }
    let body = table_rows(theme, &keep, cols, cells, |n| {
        let r = on_screen[n];
        (start + n == st.selected, st.marks.contains(r.key()))
    });
    let widths: Vec<Constraint> = keep.iter().map(|&(_, w)| Constraint::Length(w)).collect();
    let header = header_row(theme, &keep, cols);
    let empty = body.is_empty();
    frame.render_widget(
        Table::new(body, widths)
            .header(header)
            .block(block)
            .column_spacing(1),
        area,
    );
    if empty && area.height > 4 {
        draw_why_empty(frame, area, app, theme, (kind, rows.is_empty()));
    }
}

/// A table's title: the view, its counts and its marks always (an
/// action acts on the marks); the filter, the sort, the pool and `wide`
/// go in that order from the end when the border (`width`) is short.
fn table_title<'a>(
    app: &'a App,
    theme: &Theme,
    (kind, pool): (ViewKind, Option<&'a str>),
    total: usize,
    width: u16,
) -> Line<'a> {
    let st = app.table(kind);
    // What the title says, by priority: the view, its counts and its marks
    // always (an action acts on the marks); the filter, the sort, the pool
    // and `wide` go in that order from the end when the border is short.
    let mut title: Vec<(u8, Vec<Span>)> = vec![(
        0,
        vec![Span::styled(
            format!(" {}", capitalise(kind.as_str())),
            theme.style(Role::Title),
        )],
    )];
    if let Some(p) = pool {
        title.push((
            3,
            vec![Span::styled(
                format!(" of pool {}", text::shorten_middle(p, 24)),
                theme.style(Role::Title),
            )],
        ));
    }
    title.push((
        0,
        vec![Span::styled(
            format!(" [{}/{}]", st.visible.len(), total),
            theme.style(Role::Muted),
        )],
    ));
    if !st.marks.is_empty() {
        title.push((
            0,
            vec![Span::styled(
                format!(" {} marked", st.marks.len()),
                theme.style(Role::Marked),
            )],
        ));
    }
    if let Some(c) = &app.narrow {
        title.push((
            1,
            vec![Span::styled(
                format!(" ctx:{}", text::shorten_middle(c, 24)),
                theme.style(Role::Prompt),
            )],
        ));
    }
    if !st.filter_text.is_empty() {
        let mut spans = vec![Span::styled(
            format!(" /{}", text::ellipsize(&st.filter_text, 30)),
            theme.style(Role::Prompt),
        )];
        if let Some(e) = st.filter.error() {
            spans.push(Span::styled(format!(" ({e})"), theme.style(Role::Danger)));
        }
        title.push((1, spans));
    }
    if app.wide {
        title.push((4, vec![Span::styled(" wide", theme.style(Role::Muted))]));
    }
    if st.sort != crate::app::SortKey::Natural {
        title.push((
            2,
            vec![Span::styled(
                format!(" sort:{:?}{}", st.sort, if st.reverse { "↑" } else { "" }).to_lowercase(),
                theme.style(Role::Muted),
            )],
        ));
    }
    title.push((0, vec![Span::raw(" ")]));
    // The border's corners and a dash of it either side.
    by_priority(title, usize::from(width.saturating_sub(4)))
}

/// Why a table shows no rows: its view's reason, or the filter.
fn draw_why_empty(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    theme: &Theme,
    (kind, no_rows): (ViewKind, bool),
) {
    let (lines, role) = if no_rows {
        empty_view::why_empty(app, kind)
    } else {
        (
            vec!["nothing matches the filter (esc clears it)".to_owned()],
            Role::Muted,
        )
    };
    let r = Rect {
        x: area.x + 2,
        y: area.y + 2,
        width: area.width.saturating_sub(4),
        height: area.height.saturating_sub(3).min(lines.len() as u16 * 2),
    };
    frame.render_widget(
        Paragraph::new(lines.into_iter().map(Line::from).collect::<Vec<_>>())
            .wrap(ratatui::widgets::Wrap { trim: false })
            .style(theme.style(role)),
        r,
    );
}

/// The header's words for a watch state, and their colour.
fn watch_words(watch: &WatchState) -> (String, Role) {
    match watch {
        WatchState::Synced => ("synced".to_owned(), Role::Ok),
        WatchState::Syncing => ("syncing".to_owned(), Role::Pending),
        // Neither pools nor tasks: this identity sees nothing of
        // agentdeck here, which is not the same as a cluster that is down.
        WatchState::Partial(kinds)
            if kinds.iter().any(|k| k == "agentpools")
                && kinds.iter().any(|k| k == "agenttasks") =>
        {
            (
                format!("no access: {} forbidden", kinds.join(", ")),
                Role::Warn,
            )
        }
        WatchState::Partial(kinds) => (
            format!("partial: {} forbidden", kinds.join(", ")),
            Role::Warn,
        ),
        WatchState::NotInstalled => ("not installed".to_owned(), Role::Danger),
        WatchState::Resyncing(what) => (format!("resyncing: {what}"), Role::Warn),
        WatchState::Failing(what) => (format!("failing: {what}"), Role::Danger),
        WatchState::Disconnected(why) => (format!("disconnected: {why}"), Role::Danger),
    }
}

/// The column titles of a laid-out table.
fn header_row<'a, R>(theme: &Theme, keep: &[(usize, u16)], cols: &[Column<R>]) -> TableRow<'a> {
    TableRow::new(keep.iter().map(|&(i, _)| {
        let c = &cols[i];
        let line = Line::from(c.title);
        Cell::from(if c.right { line.right_aligned() } else { line })
    }))
    .style(theme.style(Role::Column))
}

/// The rows of a laid-out table; `state(n)` says whether the `n`th is
/// selected and whether it is marked.
fn table_rows<'a, R>(
    theme: &Theme,
    keep: &[(usize, u16)],
    cols: &[Column<R>],
    cells: Vec<Vec<(String, Role)>>,
    state: impl Fn(usize) -> (bool, bool),
) -> Vec<TableRow<'a>> {
    cells
        .into_iter()
        .enumerate()
        .map(|(n, row)| {
            let (selected, marked) = state(n);
            let cells = keep.iter().zip(row).map(|(&(ci, _), (text, role))| {
                let style = if selected {
                    Style::default()
                } else if marked {
                    theme.style(Role::Marked)
                } else {
                    theme.style(role)
                };
                let line = Line::from(Span::styled(text, style));
                Cell::from(if cols[ci].right {
                    line.right_aligned()
                } else {
                    line
                })
            });
            let row = TableRow::new(cells);
            if selected {
                row.style(theme.style(Role::Selection))
            } else {
                row
            }
        })
        .collect()
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

fn draw_logs(frame: &mut Frame, area: Rect, app: &App, theme: &Theme, title: &str) {
    let Some(l) = &app.logs else {
        return;
    };
    let t = log_title(l, title, area.width, theme);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(t);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let height = inner.height as usize;
    let width = inner.width as usize;
    if height == 0 {
        return;
    }
    let mut reserved = 0;
    if l.ended.is_some() || l.buffer.is_empty() {
        reserved = 1;
    }
    let avail = height.saturating_sub(reserved);
    let text_of = |i: usize| -> (String, Option<String>) {
        let line = l.buffer.get(i).expect("index within the buffer");
        let ts = l.timestamps.then(|| line.time.clone().unwrap_or_default());
        (line.text.clone(), ts)
    };
    let rows_of = |i: usize| {
        let (text, ts) = text_of(i);
        if !l.wrap {
            return 1;
        }
        let ts = ts.map_or(0, |t| t.len() + 1);
        if ts == 0 {
            wrapped_rows(&text, width)
        } else {
            (text.chars().count() + ts).max(1).div_ceil(width.max(1))
        }
    };
    // The lines on screen: from the bottom when following, else from `top`.
    let n = l.buffer.len();
    let (first, last) = if l.follow {
        let mut used = 0;
        let mut first = n;
        while first > 0 {
            let r = rows_of(first - 1);
            if used + r > avail {
                break;
            }
            used += r;
            first -= 1;
        }
        (first, n)
    } else {
        let first = l.top.min(n);
        let mut used = 0;
        let mut last = first;
        while last < n {
            let r = rows_of(last);
            if used + r > avail && last > first {
                break;
            }
            used += r;
            last += 1;
        }
        (first, last)
    };
    let mut lines: Vec<Line> = Vec::with_capacity(last - first + 1);
    for i in first..last {
        lines.push(log_line(l, i, theme));
    }
    if let Some(why) = &l.ended {
        lines.push(Line::styled(format!("— {why} —"), theme.style(Role::Muted)));
    } else if n == 0 {
        lines.push(Line::styled(
            "waiting for output…",
            theme.style(Role::Muted),
        ));
    }
    let mut p = Paragraph::new(lines);
    if l.wrap {
        p = p.wrap(Wrap { trim: false });
    }
    frame.render_widget(p, inner);
}

/// The log view's title: which log, the view's flags and the search,
/// saying less where `width` is short.
fn log_title<'a>(l: &crate::app::LogsState, title: &str, width: u16, theme: &Theme) -> Line<'a> {
    let flags = format!(
        " {} · wrap {} · time {} · {} lines{} ",
        if l.follow { "following" } else { "paused" },
        if l.wrap { "on" } else { "off" },
        if l.timestamps { "on" } else { "off" },
        l.buffer.len(),
        if l.buffer.dropped > 0 {
            format!(" ({} older dropped)", l.buffer.dropped)
        } else {
            String::new()
        }
    );
    let search = l.search.as_ref().map(|(s, _)| format!("/{s} "));
    // Where the title (which task, which pod) does not fit, the flags say
    // less (following or paused, and the count), then the title is
    // shortened in the middle to what is left.
    let room_beside = |flags: &str| {
        usize::from(width.saturating_sub(2))
            .saturating_sub(text::width(" Logs: ") + text::width(flags))
            .saturating_sub(search.as_deref().map_or(0, text::width))
    };
    let flags = if text::width(title) > room_beside(&flags) {
        format!(
            " {} · {} lines ",
            if l.follow { "following" } else { "paused" },
            l.buffer.len()
        )
    } else {
        flags
    };
    let room = room_beside(&flags).max(12);
    let mut t = vec![
        Span::styled(
            format!(" Logs: {}", text::shorten_middle(title, room)),
            theme.style(Role::Title),
        ),
        Span::styled(flags, theme.style(Role::Muted)),
    ];
    if let Some(s) = search {
        t.push(Span::styled(s, theme.style(Role::Prompt)));
    }
    Line::from(t)
}

/// Line `i` of the log, its search matches marked.
fn log_line<'a>(l: &crate::app::LogsState, i: usize, theme: &Theme) -> Line<'a> {
    let line = l.buffer.get(i).expect("index within the buffer");
    let ts = l.timestamps.then(|| line.time.clone().unwrap_or_default());
    let text = line.text.clone();
    let mut spans = Vec::new();
    if let Some(ts) = ts {
        spans.push(Span::styled(format!("{ts} "), theme.style(Role::Muted)));
    }
    let is_match = l.matched == Some(i);
    match &l.search {
        Some((_, re)) => {
            let mut at = 0;
            for m in re.find_iter(&text) {
                spans.push(Span::styled(
                    text[at..m.start()].to_owned(),
                    theme.style(Role::Text),
                ));
                spans.push(Span::styled(
                    m.as_str().to_owned(),
                    theme.style(Role::Match),
                ));
                at = m.end();
            }
            spans.push(Span::styled(text[at..].to_owned(), theme.style(Role::Text)));
        }
        None => spans.push(Span::styled(text, theme.style(Role::Text))),
    }
    let mut line = Line::from(spans);
    if is_match {
        line = line.style(Style::default().add_modifier(Modifier::BOLD));
    }
    line
}

fn draw_yaml(frame: &mut Frame, area: Rect, app: &App, theme: &Theme, title: &str) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(Span::styled(
            format!(" YAML: {title} "),
            theme.style(Role::Title),
        ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let y = &app.yaml;
    let lines: Vec<Line> = if !y.loaded {
        vec![Line::styled("loading…", theme.style(Role::Muted))]
    } else {
        y.lines
            .iter()
            .skip(y.top)
            .take(inner.height as usize)
            .map(|l| {
                // Keys in one colour, values in another.
                match l.find(": ") {
                    Some(i)
                        if !l.trim_start().starts_with('-')
                            || l.trim_start()[1..].contains(": ") =>
                    {
                        Line::from(vec![
                            Span::styled(l[..=i].to_owned(), theme.style(Role::Header)),
                            Span::styled(l[i + 1..].to_owned(), theme.style(Role::Text)),
                        ])
                    }
                    _ => Line::styled(l.clone(), theme.style(Role::Text)),
                }
            })
            .collect()
    };
    frame.render_widget(Paragraph::new(lines), inner);
}

fn key_label(app: &App, a: Action) -> String {
    app.opts
        .keymap
        .keys(a)
        .first()
        .map_or_else(|| "-".into(), |k| k.label())
}

fn draw_footer(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let line = match &app.prompt {
        Some(Prompt::Command(input)) => {
            let value = input.value();
            let mut spans = vec![
                Span::styled(":", theme.style(Role::Prompt)),
                Span::styled(value.to_owned(), theme.style(Role::Text)),
            ];
            if let Some(c) = crate::app::complete_line(value, &app.snapshot)
                && let Some(rest) = c.strip_prefix(value.trim_start())
            {
                spans.push(Span::styled(rest.to_owned(), theme.style(Role::Muted)));
            }
            let x = area.x + 1 + input.visual_cursor() as u16;
            frame.set_cursor_position((x.min(area.right().saturating_sub(1)), area.y));
            Line::from(spans)
        }
        Some(Prompt::Filter(input)) => {
            let x = area.x + 1 + input.visual_cursor() as u16;
            frame.set_cursor_position((x.min(area.right().saturating_sub(1)), area.y));
            let role = if input.selected() {
                // The filter in force, selected: typing replaces it,
                // ←/→/backspace edit it, ctrl-u clears it.
                Role::Selection
            } else {
                Role::Text
            };
            Line::from(vec![
                Span::styled("/", theme.style(Role::Prompt)),
                Span::styled(input.value().to_owned(), theme.style(role)),
            ])
        }
        None => {
            let hint = |a: Action, what: &'static str| {
                vec![
                    Span::styled(format!(" {}", key_label(app, a)), theme.style(Role::Key)),
                    Span::styled(format!(" {what}"), theme.style(Role::Muted)),
                ]
            };
            let mut spans = Vec::new();
            let list: &[(Action, &str)] = match app.screen() {
                Screen::Logs { .. } => &[
                    (Action::Back, "back"),
                    (Action::Follow, "follow"),
                    (Action::Wrap, "wrap"),
                    (Action::Timestamps, "time"),
                    (Action::Filter, "search"),
                    (Action::Help, "help"),
                ],
                Screen::PoolHistory { .. } => &[
                    (Action::Back, "back"),
                    (Action::Down, "next pool"),
                    (Action::Up, "previous"),
                    (Action::Help, "help"),
                    (Action::Quit, "quit"),
                ],
                Screen::Yaml { .. } => &[
                    (Action::Back, "back"),
                    (Action::Help, "help"),
                    (Action::Quit, "quit"),
                ],
                Screen::Audit => &[
                    (Action::Back, "back"),
                    (Action::Filter, "filter"),
                    (Action::Help, "help"),
                    (Action::Quit, "quit"),
                ],
                Screen::Table { .. } => &[
                    (Action::Enter, "open"),
                    (Action::Back, "back"),
                    (Action::Filter, "filter"),
                    (Action::Command, "cmd"),
                    (Action::Yaml, "yaml"),
                    (Action::Help, "help"),
                    (Action::Quit, "quit"),
                ],
            };
            for (a, w) in list {
                spans.extend(hint(*a, w));
            }
            Line::from(spans)
        }
    };
    frame.render_widget(Paragraph::new(line), area);
    draw_toast(frame, area, app, theme);
}

/// Most lines a toast takes (a debug pod's `kubectl exec` line is read
/// whole even at 80 columns).
const TOAST_LINES: usize = 4;

/// The toast at the right of the footer when it fits there, else wrapped
/// over the lines above it, at most [`TOAST_LINES`].
fn draw_toast(frame: &mut Frame, footer: Rect, app: &App, theme: &Theme) {
    let Some(toast) = &app.toast else { return };
    let role = if toast.error {
        Role::ToastError
    } else {
        Role::Toast
    };
    let full = usize::from(footer.width);
    let one = format!(" {} ", toast.text);
    let mut lines = if text::width(&one) <= full && !toast.text.contains("; ") {
        vec![one]
    } else {
        text::wrap_parts(&toast.text, full.saturating_sub(2))
            .into_iter()
            .map(|l| format!(" {l} "))
            .collect()
    };
    let room = usize::from(footer.bottom()).min(TOAST_LINES);
    if lines.len() > room {
        lines.truncate(room);
        if let Some(last) = lines.last_mut() {
            let more = format!("{}…", last.trim_end());
            *last = format!("{} ", text::ellipsize(&more, full.saturating_sub(1)));
        }
    }
    let w = lines
        .iter()
        .map(|l| text::width(l))
        .max()
        .unwrap_or(0)
        .min(full) as u16;
    let h = lines.len() as u16;
    let r = Rect {
        x: footer.right().saturating_sub(w),
        y: footer.bottom().saturating_sub(h),
        width: w,
        height: h,
    };
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(lines.into_iter().map(Line::from).collect::<Vec<_>>())
            .style(theme.style(role)),
        r,
    );
}

fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn draw_help(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    use crate::app::help::{self, HelpLine};
    let all = help::lines(&app.opts.keymap, app.opts.read_only);
    let (columns, rows) = help::layout((area.width, area.height));
    let top = app
        .help_top
        .min(help::max_top(all.len(), (area.width, area.height)));
    let shown = &all[top..(top + columns * rows).min(all.len())];
    let (iw, ih) = help::inner((area.width, area.height));
    let r = centered(area, iw + 2, ih + 2);
    frame.render_widget(Clear, r);
    let mut title = vec![Span::styled(" Help ", theme.style(Role::Title))];
    if shown.len() < all.len() {
        title.push(Span::styled(
            format!(
                "{}–{} of {} · {}/{} scroll · ",
                top + 1,
                top + shown.len(),
                all.len(),
                key_label(app, Action::Down),
                key_label(app, Action::Up),
            ),
            theme.style(Role::Muted),
        ));
    } else {
        title.push(Span::styled("— ", theme.style(Role::Muted)));
    }
    title.push(Span::styled(
        "any other key closes ",
        theme.style(Role::Muted),
    ));
    let mut block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(Line::from(title));
    if let Some(path) = &app.opts.kubeconfig {
        let text = format!(" kubectl beside it: KUBECONFIG={path} ");
        block = block.title_bottom(Line::styled(
            text::ellipsize(&text, usize::from(iw)).into_owned(),
            theme.style(Role::Muted),
        ));
    }
    let inner = block.inner(r);
    frame.render_widget(block, r);
    let view = app.table_kind().map(|(v, _)| v);
    let line = |l: &HelpLine| match l {
        HelpLine::Title(s) => Line::styled(s.as_str(), theme.style(Role::Title)),
        HelpLine::Entry(keys, action) => {
            let keys = Span::styled(
                format!(" {keys:<w$} ", w = help::KEYS_WIDTH - 2),
                theme.style(Role::Key),
            );
            // An action this identity may not take here: dimmed, and why.
            match view.and_then(|v| app.help_refusal(*action, v)) {
                Some(why) => Line::from(vec![
                    keys.style(theme.style(Role::Muted)),
                    Span::styled(
                        format!("{}: {why}", action.name()),
                        theme.style(Role::Muted),
                    ),
                ]),
                None => Line::from(vec![
                    keys,
                    Span::styled(action.help(), theme.style(Role::Text)),
                ]),
            }
        }
        HelpLine::Blank => Line::raw(""),
    };
    let areas =
        Layout::horizontal(vec![Constraint::Ratio(1, columns as u32); columns]).split(inner);
    for (area, chunk) in areas.iter().zip(shown.chunks(rows.max(1))) {
        frame.render_widget(
            Paragraph::new(chunk.iter().map(line).collect::<Vec<_>>()),
            *area,
        );
    }
}

fn draw_dialog(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    use crate::app::actions::{DialogLine, dialog_inner, dialog_lines, dialog_rows, dialog_width};
    let Some(d) = &app.dialog else { return };
    let inner = dialog_inner(area.width);
    let plain = theme.style(Role::Dialog);
    // The text scrolls; the keys line stays.
    let lines = dialog_lines(d, inner);
    let shown = lines.len().min(dialog_rows(area.height));
    let top = d.scroll.min(lines.len() - shown);
    let mut keys = d.keys_line().to_owned();
    if shown < lines.len() {
        keys = format!(
            "↑/↓ {}–{} of {} · {keys}",
            top + 1,
            top + shown,
            lines.len()
        );
    }
    let mut body: Vec<Line> = lines
        .into_iter()
        .skip(top)
        .take(shown)
        .map(|(text, kind)| match kind {
            DialogLine::Input => {
                let typed = text.strip_prefix("> ").unwrap_or(&text).to_owned();
                // A prefilled value is selected: typing replaces it.
                let selected = d.input.as_ref().is_some_and(|i| i.selected());
                Line::from(vec![
                    Span::styled("> ", theme.style(Role::Prompt)),
                    if selected {
                        Span::styled(typed, theme.style(Role::Selection))
                    } else {
                        Span::raw(typed)
                    },
                ])
            }
            DialogLine::Text => Line::styled(text, plain),
            DialogLine::Error => Line::styled(text, theme.style(Role::Danger)),
            DialogLine::Muted => Line::styled(text, theme.style(Role::Muted)),
            DialogLine::Heading => Line::styled(text, theme.style(Role::Title)),
        })
        .collect();
    body.push(Line::raw(""));
    body.push(Line::styled(
        text::ellipsize(&keys, inner).into_owned(),
        theme.style(Role::Key),
    ));
    let h = u16::try_from(body.len() + 2).unwrap_or(u16::MAX);
    let r = centered(area, dialog_width(area.width), h);
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(
            format!(" {} ", text::ellipsize(&d.title, inner.saturating_sub(2))),
            theme.style(Role::Title),
        ))
        .style(plain);
    frame.render_widget(Paragraph::new(body).block(block), r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_where_nothing_of_agentdeck_may_be_seen_says_no_access_not_down() {
        let nothing = WatchState::Partial(vec!["agentpools".into(), "agenttasks".into()]);
        let (words, role) = watch_words(&nothing);
        assert_eq!(words, "no access: agentpools, agenttasks forbidden");
        assert_eq!(role, Role::Warn);
        let some = WatchState::Partial(vec!["pods".into(), "events".into()]);
        assert_eq!(watch_words(&some).0, "partial: pods, events forbidden");
    }

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (60, "1m"),
            (61, "1m01s"),
            (3600, "1h"),
            (3660, "1h01m"),
            (86_400 * 3, "3d"),
        ];
        for (s, want) in cases {
            assert_eq!(duration(s), want, "{s}");
        }
    }

    #[test]
    fn a_scale_reason_without_a_scaling_has_no_age() {
        let now = crate::app::fixtures::now();
        let snap = crate::app::rows::build(
            &crate::app::fixtures::sources(now, 3),
            now,
            &crate::health::FreshnessThresholds {
                stale_after: std::time::Duration::from_secs(20),
                offline_after: std::time::Duration::from_secs(60),
            },
        );
        let cols = pool_columns();
        let last = cols
            .iter()
            .find(|c| c.title == "LAST SCALE")
            .expect("the column");
        let mut row = (*snap.pools[0]).clone();
        row.scale_reason = "job mode: one Job per task".into();
        row.last_scale = None;
        assert_eq!((last.cell)(&row, now).0, "job mode: one Job per task");
        row.last_scale = Some(now - jiff::SignedDuration::from_secs(90));
        assert_eq!(
            (last.cell)(&row, now).0,
            "1m30s ago: job mode: one Job per task"
        );
    }

    #[test]
    fn narrow_tables_keep_the_most_important_columns_in_order() {
        let cols = task_columns();
        let natural = vec![10; cols.len()];
        let all = layout(&cols, &natural, 500, true);
        assert_eq!(all.len(), cols.len());
        let normal = layout(&cols, &natural, 500, false);
        assert!(normal.iter().all(|&(i, _)| !cols[i].wide), "no wide column");
        let narrow = layout(&cols, &natural, 60, false);
        let titles: Vec<_> = narrow.iter().map(|&(i, _)| cols[i].title).collect();
        assert!(
            titles.starts_with(&["NAME"]) && titles.contains(&"PHASE"),
            "{titles:?}"
        );
        assert!(!titles.contains(&"ATT"), "{titles:?}");
    }

    #[test]
    fn a_layout_fills_the_width_exactly_and_gives_numbers_their_whole_width() {
        let cols = task_columns();
        for width in 20..=200u16 {
            for n in [0u16, 3, 8, 14, 40] {
                let natural = vec![n; cols.len()];
                let keep = layout(&cols, &natural, width, false);
                let used: u16 =
                    keep.iter().map(|&(_, w)| w).sum::<u16>() + keep.len().saturating_sub(1) as u16;
                assert!(used <= width, "{width}/{n}: {used}");
                if keep.iter().any(|&(i, _)| cols[i].fill) {
                    assert_eq!(used, width, "{width}/{n}: the fill column takes the rest");
                }
                for &(i, w) in &keep {
                    if cols[i].fit == Fit::Whole {
                        assert!(w >= n, "{width}/{n}: {} is {w} wide", cols[i].title);
                    }
                }
            }
        }
    }

    #[test]
    fn names_get_the_width_before_long_text_does() {
        let cols = task_columns();
        let mut natural = vec![0; cols.len()];
        let at = |t: &str| cols.iter().position(|c| c.title == t).expect(t);
        natural[at("NAME")] = 34;
        natural[at("MESSAGE")] = 60;
        let keep = layout(&cols, &natural, 120, false);
        let w = |t: &str| {
            keep.iter()
                .find(|&&(i, _)| cols[i].title == t)
                .map(|&(_, w)| w)
        };
        assert_eq!(w("NAME"), Some(34), "{keep:?}");
        assert_eq!(w("MESSAGE"), Some(39), "{keep:?}");
    }

    /// Every kept column of `cols` laid out over `rows` at `width`: whole
    /// columns show their cells whole, every cell fits its column, and the
    /// columns fit the width.
    fn check<R>(what: &str, cols: &[Column<R>], rows: &[&R], width: u16, wide: bool) {
        let now = crate::app::fixtures::now();
        let (keep, cells) = lay_out(cols, rows.iter().copied(), now, width, wide);
        let used: usize =
            keep.iter().map(|&(_, w)| usize::from(w)).sum::<usize>() + keep.len().saturating_sub(1);
        assert!(used <= usize::from(width), "{what} {width}: {used}");
        for (r, row) in rows.iter().zip(&cells) {
            for (&(i, w), (shown, _)) in keep.iter().zip(row) {
                let c = &cols[i];
                assert!(
                    text::width(shown) <= usize::from(w),
                    "{what} {width}: {} {shown:?} in {w}",
                    c.title
                );
                let full = (c.cell)(r, now).0;
                if c.fit == Fit::Whole {
                    assert_eq!(shown, &*full, "{what} {width}: {} cut", c.title);
                } else if shown != &*full {
                    assert!(
                        shown.contains('…'),
                        "{what} {width}: {shown:?} cut silently"
                    );
                }
            }
        }
    }

    #[test]
    fn no_number_or_short_word_is_ever_cut_in_any_view_at_any_width() {
        use crate::health::FreshnessThresholds;
        let now = crate::app::fixtures::now();
        let snap = crate::app::rows::build(
            &crate::app::fixtures::sources(now, 40),
            now,
            &FreshnessThresholds {
                stale_after: std::time::Duration::from_secs(20),
                offline_after: std::time::Duration::from_secs(60),
            },
        );
        let pools: Vec<&PoolRow> = snap.pools.iter().map(|r| &**r).collect();
        let agents: Vec<&AgentRow> = snap.agents.iter().map(|r| &**r).collect();
        let tasks: Vec<&TaskRow> = snap.tasks.iter().map(|r| &**r).collect();
        let events: Vec<&EventRow> = snap.events.iter().map(|r| &**r).collect();
        for width in 10..=220 {
            for wide in [false, true] {
                check("pools", &pool_columns(), &pools, width, wide);
                check("agents", &agent_columns(), &agents, width, wide);
                check("tasks", &task_columns(), &tasks, width, wide);
                check("events", &event_columns(), &events, width, wide);
            }
        }
    }
}
