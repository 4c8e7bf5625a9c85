//! Drawing: pure functions of the app state and the theme. No clock (ages
//! come from `app.now`), no I/O; only the rows and log lines on screen are
//! built into widgets. Table columns are declared as data.

pub mod audit;
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
use crate::app::{
    App, FOOTER_LINES, HEADER_LINES, PreviewState, Prompt, Role as AppRole, Screen, ViewKind,
    WatchState,
};
use crate::crd::TaskPhase;
use crate::health::Freshness;
use crate::plan::verdict::VerdictLevel as Level;
pub use theme::{Role, Theme};

/// A table column: title, width, which columns go first when space is
/// short (lower first), and how to get a cell.
pub struct Column<R> {
    pub title: &'static str,
    pub width: u16,
    /// Takes the width left over (at most one per table).
    pub fill: bool,
    pub priority: u8,
    pub right: bool,
    /// Shown only in wide mode (`ctrl-w`).
    pub wide: bool,
    pub cell: fn(&R, Timestamp) -> (Cow<'_, str>, Role),
}

const fn col<R>(
    title: &'static str,
    width: u16,
    priority: u8,
    cell: fn(&R, Timestamp) -> (Cow<'_, str>, Role),
) -> Column<R> {
    Column {
        title,
        width,
        fill: false,
        priority,
        right: false,
        wide: false,
        cell,
    }
}

/// A column of wide mode only.
const fn wide<R>(
    title: &'static str,
    width: u16,
    cell: fn(&R, Timestamp) -> (Cow<'_, str>, Role),
) -> Column<R> {
    Column {
        title,
        width,
        fill: false,
        priority: 1,
        right: false,
        wide: true,
        cell,
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

const fn fill<R>(
    title: &'static str,
    width: u16,
    priority: u8,
    cell: fn(&R, Timestamp) -> (Cow<'_, str>, Role),
) -> Column<R> {
    Column {
        title,
        width,
        fill: true,
        priority,
        right: false,
        wide: false,
        cell,
    }
}

const fn num<R>(
    title: &'static str,
    width: u16,
    priority: u8,
    cell: fn(&R, Timestamp) -> (Cow<'_, str>, Role),
) -> Column<R> {
    Column {
        title,
        width,
        fill: false,
        priority,
        right: true,
        wide: false,
        cell,
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
        col("NAME", 14, 0, |r, _| t(&r.name)),
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
        col("FROZEN", 9, 3, |r, _| match &r.frozen {
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
        col("HOLD", 16, 5, |r, _| match &r.hold {
            Some(h) => (Cow::Borrowed(h.as_str()), Role::Warn),
            None => (Cow::Borrowed("-"), Role::Muted),
        }),
        fill("REASON", 24, 1, |r, _| {
            (
                Cow::Borrowed(r.verdict.reason.as_str()),
                level_role(r.verdict.level),
            )
        }),
        col("LAST SCALE", 24, 8, |r, now| {
            if r.scale_reason.is_empty() {
                (Cow::Borrowed("-"), Role::Muted)
            } else {
                o(
                    format!("{} ago: {}", age(now, r.last_scale), r.scale_reason),
                    Role::Muted,
                )
            }
        }),
        num("AGE", 5, 3, |r, now| o(age(now, r.created), Role::Muted)),
        wide("LABELS", 24, |r, _| labels_cell(&r.labels)),
    ]
}

/// Columns of the Agents view.
pub fn agent_columns() -> Vec<Column<AgentRow>> {
    vec![
        fill("NAME", 24, 0, |r, _| t(&r.name)),
        col("POOL", 12, 2, |r, _| t(&r.pool)),
        col("PHASE", 11, 1, |r, _| {
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
        col("TASK", 20, 1, |r, _| {
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
        col("NODE", 14, 6, |r, _| t(dash(&r.node))),
        num("RST", 3, 4, |r, _| {
            let role = if r.restarts > 0 {
                Role::Warn
            } else {
                Role::Muted
            };
            o(r.restarts.to_string(), role)
        }),
        num("AGE", 5, 3, |r, now| o(age(now, r.created), Role::Muted)),
        wide("LABELS", 24, |r, _| labels_cell(&r.labels)),
    ]
}

/// Columns of the Tasks view.
pub fn task_columns() -> Vec<Column<TaskRow>> {
    vec![
        col("NAME", 22, 0, |r, _| t(&r.name)),
        col("POOL", 12, 2, |r, _| t(&r.pool)),
        col("PHASE", 9, 0, |r, _| {
            (Cow::Borrowed(r.phase.as_str()), phase_role(r.phase))
        }),
        col("AGENT", 20, 4, |r, _| t(dash(&r.agent))),
        wide("JOB", 20, |r, _| {
            t(dash(r.job.as_deref().unwrap_or_default()))
        }),
        num("ATT", 3, 5, |r, _| o(r.attempts.to_string(), Role::Muted)),
        num("WAIT", 5, 3, |r, now| {
            let s = match r.waited {
                Some(d) => duration(d.as_secs() as i64),
                None if r.phase == TaskPhase::Pending => age(now, r.created),
                None => "-".into(),
            };
            o(s, Role::Muted)
        }),
        num("RUN", 5, 1, |r, now| {
            let s = match (r.started, r.finished) {
                (Some(s), Some(f)) => duration(f.duration_since(s).as_secs().max(0)),
                (Some(s), None) if r.phase == TaskPhase::Running => age(now, Some(s)),
                _ => "-".into(),
            };
            o(s, Role::Muted)
        }),
        num("AGE", 5, 2, |r, now| o(age(now, r.created), Role::Muted)),
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
        wide("LABELS", 24, |r, _| labels_cell(&r.labels)),
    ]
}

/// Columns of the Events view.
pub fn event_columns() -> Vec<Column<EventRow>> {
    vec![
        num("LAST", 5, 0, |r, now| o(age(now, r.last), Role::Muted)),
        col("TYPE", 7, 2, |r, _| {
            if r.warning {
                (Cow::Borrowed("Warning"), Role::Warn)
            } else {
                (Cow::Borrowed("Normal"), Role::Muted)
            }
        }),
        col("REASON", 16, 0, |r, _| t(&r.reason)),
        col("OBJECT", 28, 1, |r, _| t(&r.object)),
        num("#", 3, 3, |r, _| o(r.count.to_string(), Role::Muted)),
        fill("MESSAGE", 20, 0, |r, _| t(&r.message)),
    ]
}

/// Columns that fit in `width`, in declared order: by priority until full
/// (wide-mode columns only when `wide`).
fn fit<R>(cols: &[Column<R>], width: u16, wide: bool) -> Vec<usize> {
    let mut by_priority: Vec<usize> = (0..cols.len()).filter(|&i| wide || !cols[i].wide).collect();
    by_priority.sort_by_key(|&i| (cols[i].priority, i));
    let mut used = 0u16;
    let mut keep = Vec::new();
    for i in by_priority {
        let w = cols[i].width + 1;
        if used + w <= width {
            used += w;
            keep.push(i);
        }
    }
    keep.sort_unstable();
    keep
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
            &format!("{} {}/{}", object.kind, object.namespace, object.name),
        ),
        Screen::Audit => audit::draw_audit(frame, body, app, theme),
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
    let h = |s: &'static str| Span::styled(s, theme.style(Role::Header));
    let v = |s: String, r: Role| Span::styled(s, theme.style(r));
    let role = app.status.role;
    let role_style = match role {
        AppRole::Leader => Role::Ok,
        AppRole::Observer => Role::Warn,
        AppRole::ReadOnly => Role::Warn,
    };
    let (watch, watch_role) = match &app.status.watch {
        WatchState::Synced => ("synced".to_owned(), Role::Ok),
        WatchState::Syncing => ("syncing".to_owned(), Role::Pending),
        WatchState::Resyncing(what) => (format!("resyncing: {what}"), Role::Warn),
        WatchState::Failing(what) => (format!("failing: {what}"), Role::Danger),
        WatchState::Disconnected(why) => (format!("disconnected: {why}"), Role::Danger),
    };
    let latency = match app.status.latency {
        Some(d) if d.as_millis() >= 1 => format!("{}ms", d.as_millis()),
        Some(d) => format!("{:.1}ms", d.as_secs_f64() * 1000.0),
        None => "-".into(),
    };
    let clock = app.now.strftime("%H:%M:%S").to_string();
    let first = Line::from(vec![
        Span::styled(" agentdeck ", theme.style(Role::Title)),
        h(" ctx "),
        v(app.opts.context.clone(), Role::HeaderValue),
        h("  ns "),
        v(app.opts.namespace.clone(), Role::HeaderValue),
        h("  role "),
        v(role.as_str().to_owned(), role_style),
        h("  api "),
        v(latency, Role::HeaderValue),
        h("  watch "),
        v(watch, watch_role),
        h("  "),
        v(format!("{clock}Z"), Role::HeaderValue),
    ]);
    // Second line: the views, the current one highlighted, with counts.
    let mut spans = vec![Span::raw(" ")];
    let current = app.table_kind().map(|(k, _)| k);
    let s = &app.snapshot;
    for (i, kind) in ViewKind::ALL.iter().enumerate() {
        let n = match kind {
            ViewKind::Pools => s.pools.len(),
            ViewKind::Agents => s.agents.len(),
            ViewKind::Tasks => s.tasks.len(),
            ViewKind::Events => s.events.len(),
        };
        let style = if current == Some(*kind) {
            theme.style(Role::Selection)
        } else {
            theme.style(Role::Muted)
        };
        spans.push(Span::styled(
            format!("{}:{} {n}", i + 1, kind.as_str()),
            style,
        ));
        spans.push(Span::raw("  "));
    }
    let c = s.task_counts;
    let (pend, run, fail) = (c.pending, c.running, c.failed);
    spans.push(Span::styled(
        format!("{pend} pending "),
        theme.style(Role::Pending),
    ));
    spans.push(Span::styled(
        format!("{run} running "),
        theme.style(Role::Running),
    ));
    spans.push(Span::styled(
        format!("{fail} failed"),
        theme.style(Role::Failed),
    ));
    frame.render_widget(Paragraph::new(vec![first, Line::from(spans)]), area);
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
            kind,
            pool,
            &s.pools,
            &pool_columns(),
        ),
        ViewKind::Agents => table(
            frame,
            area,
            app,
            theme,
            kind,
            pool,
            &s.agents,
            &agent_columns(),
        ),
        ViewKind::Tasks => table(
            frame,
            area,
            app,
            theme,
            kind,
            pool,
            &s.tasks,
            &task_columns(),
        ),
        ViewKind::Events => table(
            frame,
            area,
            app,
            theme,
            kind,
            pool,
            &s.events,
            &event_columns(),
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn table<R: Row>(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    theme: &Theme,
    kind: ViewKind,
    pool: Option<&str>,
    rows: &[std::sync::Arc<R>],
    cols: &[Column<R>],
) {
    let st = app.table(kind);
    let mut title = vec![Span::styled(
        format!(" {}", capitalise(kind.as_str())),
        theme.style(Role::Title),
    )];
    if let Some(p) = pool {
        title.push(Span::styled(
            format!(" of pool {p}"),
            theme.style(Role::Title),
        ));
    }
    title.push(Span::styled(
        format!(" [{}/{}]", st.visible.len(), rows.len()),
        theme.style(Role::Muted),
    ));
    if !st.filter_text.is_empty() {
        title.push(Span::styled(
            format!(" /{}", st.filter_text),
            theme.style(Role::Prompt),
        ));
        if let Some(e) = st.filter.error() {
            title.push(Span::styled(format!(" ({e})"), theme.style(Role::Danger)));
        }
    }
    if !st.marks.is_empty() {
        title.push(Span::styled(
            format!(" {} marked", st.marks.len()),
            theme.style(Role::Marked),
        ));
    }
    if app.wide {
        title.push(Span::styled(" wide", theme.style(Role::Muted)));
    }
    if st.sort != crate::app::SortKey::Natural {
        title.push(Span::styled(
            format!(" sort:{:?}{}", st.sort, if st.reverse { "↑" } else { "" }).to_lowercase(),
            theme.style(Role::Muted),
        ));
    }
    title.push(Span::raw(" "));
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(Line::from(title));
    let inner_width = area.width.saturating_sub(2);
    // `-A`: the namespace first, as kubectl and k9s show it.
    let with_ns;
    let cols = if app.opts.all_namespaces {
        with_ns = std::iter::once(col("NAMESPACE", 12, 0, |r: &R, _| t(r.namespace())))
            .chain(cols.iter().map(|c| Column { ..*c }))
            .collect::<Vec<_>>();
        &with_ns[..]
    } else {
        cols
    };
    let keep = fit(cols, inner_width.saturating_sub(2), app.wide);
    let widths: Vec<Constraint> = keep
        .iter()
        .map(|&i| {
            if cols[i].fill {
                Constraint::Min(cols[i].width)
            } else {
                Constraint::Length(cols[i].width)
            }
        })
        .collect();
    let header = TableRow::new(keep.iter().map(|&i| {
        let c = &cols[i];
        let text = if c.right {
            Line::from(c.title).right_aligned()
        } else {
            Line::from(c.title)
        };
        Cell::from(text)
    }))
    .style(theme.style(Role::Column));
    let page = area.height.saturating_sub(3) as usize;
    let start = st.offset.min(st.visible.len());
    let end = (start + page).min(st.visible.len());
    let now = app.now;
    let body: Vec<TableRow> = st.visible[start..end]
        .iter()
        .enumerate()
        .filter_map(|(n, &i)| {
            let r = rows.get(i as usize)?;
            let selected = start + n == st.selected;
            let marked = st.marks.contains(r.key());
            let cells = keep.iter().map(|&ci| {
                let c = &cols[ci];
                let (text, role) = (c.cell)(r, now);
                let style = if selected {
                    Style::default()
                } else if marked {
                    theme.style(Role::Marked)
                } else {
                    theme.style(role)
                };
                let line = Line::from(Span::styled(text.into_owned(), style));
                Cell::from(if c.right { line.right_aligned() } else { line })
            });
            let row = TableRow::new(cells);
            Some(if selected {
                row.style(theme.style(Role::Selection))
            } else {
                row
            })
        })
        .collect();
    let empty = body.is_empty();
    frame.render_widget(
        Table::new(body, widths)
            .header(header)
            .block(block)
            .column_spacing(1),
        area,
    );
    if empty && area.height > 4 {
        let msg = if rows.is_empty() {
            match &app.status.watch {
                WatchState::Syncing => "loading…".to_owned(),
                WatchState::Disconnected(why) => format!("disconnected: {why}"),
                WatchState::Synced | WatchState::Resyncing(_) | WatchState::Failing(_) => {
                    format!("no {} yet", kind.as_str())
                }
            }
        } else {
            "nothing matches the filter (esc clears it)".to_owned()
        };
        let r = Rect {
            x: area.x + 2,
            y: area.y + 2,
            width: area.width.saturating_sub(4),
            height: 1,
        };
        frame.render_widget(Paragraph::new(msg).style(theme.style(Role::Muted)), r);
    }
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
    let mut t = vec![
        Span::styled(format!(" Logs: {title}"), theme.style(Role::Title)),
        Span::styled(flags, theme.style(Role::Muted)),
    ];
    if let Some((s, _)) = &l.search {
        t.push(Span::styled(format!("/{s} "), theme.style(Role::Prompt)));
    }
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(Line::from(t));
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
        let (text, ts) = text_of(i);
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
        lines.push(line);
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
            if let Some(c) = crate::app::complete(value) {
                spans.push(Span::styled(
                    c[value.trim().len().min(c.len())..].to_owned(),
                    theme.style(Role::Muted),
                ));
            }
            let x = area.x + 1 + input.visual_cursor() as u16;
            frame.set_cursor_position((x.min(area.right().saturating_sub(1)), area.y));
            Line::from(spans)
        }
        Some(Prompt::Filter(input)) => {
            let x = area.x + 1 + input.visual_cursor() as u16;
            frame.set_cursor_position((x.min(area.right().saturating_sub(1)), area.y));
            Line::from(vec![
                Span::styled("/", theme.style(Role::Prompt)),
                Span::styled(input.value().to_owned(), theme.style(Role::Text)),
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
    if let Some(toast) = &app.toast {
        let text = format!(" {} ", toast.text);
        let w = (text.chars().count() as u16).min(area.width);
        let r = Rect {
            x: area.right().saturating_sub(w),
            y: area.y,
            width: w,
            height: 1,
        };
        let role = if toast.error {
            Role::ToastError
        } else {
            Role::Toast
        };
        frame.render_widget(Clear, r);
        frame.render_widget(Paragraph::new(text).style(theme.style(role)), r);
    }
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
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(Line::from(title));
    let inner = block.inner(r);
    frame.render_widget(block, r);
    let line = |l: &HelpLine| match l {
        HelpLine::Title(s) => Line::styled(s.as_str(), theme.style(Role::Title)),
        HelpLine::Entry(keys, what) => Line::from(vec![
            Span::styled(
                format!(" {keys:<w$} ", w = help::KEYS_WIDTH - 2),
                theme.style(Role::Key),
            ),
            Span::styled(*what, theme.style(Role::Text)),
        ]),
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
    let Some(d) = &app.dialog else { return };
    let mut lines: Vec<Line> = d.body.iter().map(|b| Line::raw(b.clone())).collect();
    if let Some(input) = &d.input {
        lines.push(Line::from(vec![
            Span::styled("> ", theme.style(Role::Prompt)),
            Span::raw(input.value().to_owned()),
        ]));
    }
    if let Some(e) = &d.error {
        lines.push(Line::styled(e.clone(), theme.style(Role::Danger)));
    }
    match &d.preview {
        PreviewState::None => {}
        PreviewState::Loading => {
            lines.push(Line::raw(""));
            lines.push(Line::styled(
                "Preview (dry run): asking the API…",
                theme.style(Role::Muted),
            ));
        }
        PreviewState::Lines(impact) => {
            lines.push(Line::raw(""));
            lines.push(Line::styled("Preview (dry run):", theme.style(Role::Title)));
            lines.extend(impact.iter().map(|l| Line::raw(format!("• {l}"))));
        }
        PreviewState::Failed(why) => {
            lines.push(Line::raw(""));
            lines.push(Line::styled(
                format!("No preview: {why}"),
                theme.style(Role::Danger),
            ));
        }
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(if d.input.is_some() {
        "enter apply · esc cancel"
    } else {
        "y/enter apply · n/esc cancel"
    }));
    // Lines wrap inside the 64-wide box (62 inside its borders).
    let h: usize = lines.iter().map(|l| l.width().div_ceil(62).max(1)).sum();
    let r = centered(
        area,
        64,
        u16::try_from(h).unwrap_or(u16::MAX).saturating_add(2),
    );
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(
            format!(" {} ", d.title),
            theme.style(Role::Title),
        ))
        .style(theme.style(Role::Dialog));
    frame.render_widget(
        Paragraph::new(lines).block(block).wrap(Wrap { trim: true }),
        r,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn narrow_tables_keep_the_most_important_columns_in_order() {
        let cols = task_columns();
        let all = fit(&cols, 500, true);
        assert_eq!(all.len(), cols.len());
        let normal = fit(&cols, 500, false);
        assert!(normal.iter().all(|&i| !cols[i].wide), "no wide column");
        let narrow = fit(&cols, 60, false);
        let titles: Vec<_> = narrow.iter().map(|&i| cols[i].title).collect();
        assert!(
            titles.starts_with(&["NAME"]) && titles.contains(&"PHASE"),
            "{titles:?}"
        );
        assert!(!titles.contains(&"ATT"), "{titles:?}");
    }
}
