//! A pool's last hour, drawn: the QUEUE 1h sparkline of the pools table,
//! and the pool history view (`i`): queue, ready/desired replicas and
//! fresh agents on one time axis, the pool's scaling decisions marked on
//! it and listed below. Every mark is a character (`▲` `▼` `◆`, `◇` for a
//! capacity window opening or closing, `░` for replicas desired but not
//! ready), so it reads with `NO_COLOR`.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::{Role, Theme};
use crate::app::App;
use crate::app::history::{self, BARS, Decision, Sample};
use crate::app::rows::PoolRow;
use crate::app::text;

/// The sparkline column's title and width: one character per 7½
/// minutes, as narrow as its title so that it fits beside every other
/// column of the fixture pools at 160 columns.
pub const SPARK_TITLE: &str = "QUEUE 1h";
pub const SPARK_WIDTH: u16 = 8;
/// The sparkline column's cell before it is drawn from the history.
pub const SPARK_BLANK: &str = "        ";

/// The queue of the last hour of `pool`, [`SPARK_WIDTH`] characters.
pub fn queue_sparkline(app: &App, pool: &PoolRow) -> String {
    let cols = app
        .pool_history
        .columns(&pool.key, app.now, SPARK_WIDTH.into(), |s| s.queue);
    history::sparkline(&cols)
}

/// A line of single characters, each in its role, runs merged.
fn line_of(cells: Vec<(char, Role)>, theme: &Theme) -> Line<'static> {
    let mut spans: Vec<Span> = Vec::new();
    let mut run = String::new();
    let mut role = None;
    for (c, r) in cells {
        if role != Some(r) && !run.is_empty() {
            spans.push(Span::styled(
                std::mem::take(&mut run),
                theme.style(role.unwrap_or(Role::Text)),
            ));
        }
        role = Some(r);
        run.push(c);
    }
    if !run.is_empty() {
        spans.push(Span::styled(run, theme.style(role.unwrap_or(Role::Text))));
    }
    Line::from(spans)
}

/// Width of the value labels left of the charts, and their axis.
const GUTTER: usize = 6;

/// A number in at most 5 characters.
fn short(v: i32) -> String {
    match v {
        v if v < 100_000 => v.to_string(),
        v => format!("{}k", v / 1000),
    }
}

/// The character of a bar `eighths` high in the chart row `row` (0 the
/// bottom).
fn bar(eighths: i64, row: i64) -> Option<char> {
    let fill = (eighths - row * 8).clamp(0, 8);
    (fill > 0).then(|| BARS[fill as usize - 1])
}

/// How many eighths of `h` rows `v` is, of the top `top`: zero shows as
/// the lowest bar (so it differs from no data), anything else as two
/// eighths at least.
fn eighths(v: i32, top: i32, h: usize) -> i64 {
    let full = h as u64 * 8;
    if v <= 0 {
        return 1;
    }
    (u64::from(v.unsigned_abs()) * full)
        .div_ceil(u64::from(top.max(1).unsigned_abs()))
        .clamp(2, full) as i64
}

/// A chart of one series (`second`: a second series drawn as `░` above
/// the first where it is higher: desired replicas not ready).
struct Chart<'a> {
    label: String,
    cols: Vec<Option<i32>>,
    second: Option<Vec<Option<i32>>>,
    role: Role,
    theme: &'a Theme,
}

impl Chart<'_> {
    fn lines(&self, h: usize) -> Vec<Line<'static>> {
        let t = self.theme;
        let top = self
            .cols
            .iter()
            .chain(self.second.iter().flatten())
            .flatten()
            .copied()
            .max()
            .unwrap_or(0)
            .max(1);
        let mut out = vec![Line::from(Span::styled(
            format!(" {}", self.label),
            t.style(Role::Header),
        ))];
        for row in (0..h).rev() {
            let label = if row + 1 == h {
                short(top)
            } else if row == 0 {
                "0".to_owned()
            } else {
                String::new()
            };
            let tick = if row + 1 == h || row == 0 {
                '┤'
            } else {
                '│'
            };
            let mut cells: Vec<(char, Role)> = format!("{label:>w$}", w = GUTTER - 1)
                .chars()
                .map(|c| (c, Role::Muted))
                .collect();
            cells.push((tick, Role::Muted));
            for (i, v) in self.cols.iter().enumerate() {
                let second = self
                    .second
                    .as_ref()
                    .and_then(|s| s.get(i).copied().flatten());
                let cell = match (v, second) {
                    (None, None) => None,
                    (v, second) => {
                        let first = eighths(v.unwrap_or(0), top, h);
                        match bar(first, row as i64) {
                            Some(c) => Some((c, self.role)),
                            None => match second {
                                // Desired above ready: the shortfall.
                                Some(d)
                                    if d > v.unwrap_or(0)
                                        && eighths(d, top, h) > row as i64 * 8 =>
                                {
                                    Some(('░', Role::Warn))
                                }
                                _ => None,
                            },
                        }
                    }
                };
                cells.push(cell.unwrap_or((' ', Role::Text)));
            }
            out.push(line_of(cells, t));
        }
        out
    }
}

/// The time axis under the charts: 15-minute ticks, the decisions marked,
/// and the labels line.
fn axis(
    width: usize,
    marks: &[(usize, Decision)],
    theme: &Theme,
) -> (Line<'static>, Line<'static>) {
    let mut cells: Vec<(char, Role)> = vec![(' ', Role::Muted); GUTTER - 1];
    cells.push(('└', Role::Muted));
    let tick_at = |q: usize| (q * width / 4).min(width.saturating_sub(1));
    let mut row = vec![('─', Role::Muted); width];
    for q in 1..4 {
        row[tick_at(q)] = ('┴', Role::Muted);
    }
    for &(c, d) in marks {
        if let Some(cell) = row.get_mut(c) {
            *cell = (d.mark(), Role::Title);
        }
    }
    cells.extend(row);
    let mut labels = vec![' '; GUTTER + width];
    let mut put = |at: usize, s: &str| {
        let n = s.chars().count();
        let at = at.min((GUTTER + width).saturating_sub(n));
        if labels[at..at + n].iter().all(|c| *c == ' ')
            && (at == 0 || labels[at - 1] == ' ')
            && labels.get(at + n).is_none_or(|c| *c == ' ')
        {
            for (i, c) in s.chars().enumerate() {
                labels[at + i] = c;
            }
        }
    };
    put(GUTTER - 2, "-60m");
    put(GUTTER + width.saturating_sub(3), "now");
    for (q, s) in [(1, "-45m"), (2, "-30m"), (3, "-15m")] {
        put((GUTTER + tick_at(q)).saturating_sub(2), s);
    }
    (
        line_of(cells, theme),
        Line::styled(
            labels.into_iter().collect::<String>().trim_end().to_owned(),
            theme.style(Role::Muted),
        ),
    )
}

/// Draws the pool history view of `namespace/name`.
pub fn draw_pool_history(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    theme: &Theme,
    context: &str,
    namespace: &str,
    name: &str,
) {
    let key = crate::app::fleet::key_in(context, &format!("{namespace}/{name}"));
    let pool = app.snapshot.pools.iter().find(|p| p.key == key);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(Line::from(vec![
            Span::styled(
                format!(" Pool {}: the last hour ", text::shorten_middle(name, 32)),
                theme.style(Role::Title),
            ),
            Span::styled("(esc back) ", theme.style(Role::Muted)),
        ]));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let (w, h) = (usize::from(inner.width), usize::from(inner.height));
    if w < GUTTER + 12 || h < 10 {
        frame.render_widget(
            Paragraph::new("too small to draw the last hour").style(theme.style(Role::Muted)),
            inner,
        );
        return;
    }
    let plot = w - GUTTER;
    let now = app.now;
    let samples = app.pool_history.samples(&key);
    let cols = |f: fn(&Sample) -> i32| app.pool_history.columns(&key, now, plot, f);
    let decisions = history::decisions(&app.snapshot.events, context, namespace, name, now);

    // What is true now, and since when the console has watched.
    let mut lines: Vec<Line> = Vec::new();
    lines.push(now_line(pool.map(|p| &**p), samples, (name, now), w, theme));
    // The capacity window open and the next change, for a pool with windows.
    let capacity = pool.and_then(|p| p.capacity.as_deref());
    if let Some(c) = capacity {
        lines.push(Line::from(vec![
            Span::styled(" capacity ", theme.style(Role::Header)),
            Span::styled(
                text::ellipsize(c, w.saturating_sub(10)).into_owned(),
                theme.style(Role::Text),
            ),
        ]));
    }

    // Rows: the lines above, three chart titles, the axis and its labels,
    // the decisions' title and list; the charts share what is left.
    let fixed = 1 + usize::from(capacity.is_some()) + 3 + 2 + 1;
    let room = (h - fixed).saturating_sub(6).clamp(1, 10);
    let listed = decisions.len().clamp(1, room);
    let charts = h - fixed - listed;
    let (qh, rh) = ((charts * 2 / 5).max(1), (charts * 2 / 5).max(1));
    let fh = charts.saturating_sub(qh + rh).max(1);

    let queue = Chart {
        label: "queue (pending tasks)".into(),
        cols: cols(|s| s.queue),
        second: None,
        role: Role::Pending,
        theme,
    };
    let replicas = Chart {
        label: "replicas: ready █, desired not ready ░".into(),
        cols: cols(|s| s.ready),
        second: Some(cols(|s| s.desired)),
        role: Role::Ok,
        theme,
    };
    let fresh = Chart {
        label: "fresh agents (answering /healthz)".into(),
        cols: cols(|s| s.fresh),
        second: None,
        role: Role::Fresh,
        theme,
    };
    lines.extend(queue.lines(qh));
    lines.extend(replicas.lines(rh));
    lines.extend(fresh.lines(fh));
    let marks: Vec<(usize, Decision)> = decisions
        .iter()
        .filter_map(|(at, d, _)| Some((history::column_of(*at, now, plot)?, *d)))
        .collect();
    let (axis_line, labels) = axis(plot, &marks, theme);
    lines.push(axis_line);
    lines.push(labels);

    lines.extend(decision_lines(&decisions, listed, w, theme));
    frame.render_widget(Paragraph::new(lines), inner);
}

/// What is true of the pool now, and since when the console has watched
/// it (its `samples`), in `w` columns.
fn now_line<'a>(
    pool: Option<&PoolRow>,
    samples: Option<&std::collections::VecDeque<Sample>>,
    (name, now): (&str, jiff::Timestamp),
    w: usize,
    theme: &Theme,
) -> Line<'a> {
    let mut now_line = match pool {
        Some(p) => vec![
            Span::styled(" now ", theme.style(Role::Header)),
            Span::styled(format!("queue {}", p.pending), theme.style(Role::Pending)),
            Span::styled(" · ", theme.style(Role::Muted)),
            Span::styled(
                format!("ready {} of {} desired", p.ready, p.desired),
                theme.style(if p.ready < p.desired {
                    Role::Warn
                } else {
                    Role::Ok
                }),
            ),
            Span::styled(" · ", theme.style(Role::Muted)),
            Span::styled(format!("fresh {}", p.fresh), theme.style(Role::Fresh)),
        ],
        None => vec![Span::styled(
            format!(" pool {name} is gone"),
            theme.style(Role::Warn),
        )],
    };
    let since = match samples.and_then(|s| s.front()) {
        Some(first) if first.at > now.as_second() - history::WINDOW_SECS => {
            let at = jiff::Timestamp::from_second(first.at).unwrap_or(now);
            format!("   watched since {}Z", at.strftime("%H:%M:%S"))
        }
        Some(_) => String::new(),
        None => "   no sample yet".to_owned(),
    };
    let used: usize = now_line.iter().map(Span::width).sum();
    if used + text::width(&since) <= w {
        now_line.push(Span::styled(since, theme.style(Role::Muted)));
    }
    Line::from(now_line)
}

/// The scaling decisions' title and list, newest first, `listed` of them
/// at most (what does not fit is counted).
fn decision_lines<'a>(
    decisions: &[(jiff::Timestamp, Decision, &crate::app::rows::EventRow)],
    listed: usize,
    w: usize,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    lines.push(Line::from(vec![
        Span::styled(" scaling decisions ", theme.style(Role::Header)),
        Span::styled(
            text::ellipsize(
                if decisions.iter().any(|(_, d, _)| *d == Decision::Window) {
                    "(▲ up  ▼ down  ◆ hold, operator, freeze  ◇ capacity window)"
                } else {
                    "(▲ up  ▼ down  ◆ hold, operator, freeze)"
                },
                w.saturating_sub(19),
            )
            .into_owned(),
            theme.style(Role::Muted),
        ),
    ]));
    if decisions.is_empty() {
        lines.push(Line::styled(
            "   none in the last hour",
            theme.style(Role::Muted),
        ));
    }
    // Newest first; what does not fit is counted.
    let more = decisions.len().saturating_sub(listed);
    let shown = if more > 0 { listed - 1 } else { listed };
    for (at, d, e) in decisions.iter().rev().take(shown) {
        let head = format!(
            " {}Z {} {:<12} ",
            at.strftime("%H:%M:%S"),
            d.mark(),
            e.reason
        );
        let rest = w.saturating_sub(text::width(&head));
        lines.push(Line::from(vec![
            Span::styled(head, theme.style(Role::Title)),
            Span::styled(
                text::ellipsize(&e.message, rest).into_owned(),
                theme.style(Role::Text),
            ),
        ]));
    }
    if more > 0 {
        lines.push(Line::styled(
            format!("   … {} earlier (4 events lists them)", more + 1),
            theme.style(Role::Muted),
        ));
    }
    lines
}
