//! The `:audit` view and the support bundle's gauge: pure drawing of the
//! app state, columns declared as data like the other tables.

use std::borrow::Cow;

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, LineGauge, Paragraph, Row as TableRow, Table};

use super::{Column, Role, Theme, age, col, fill, fit, num, t};
use crate::app::App;
use crate::app::audit::AuditRow;

/// Columns of the audit view.
pub fn audit_columns() -> Vec<Column<AuditRow>> {
    vec![
        num("AGE", 5, 0, |r, now| {
            (Cow::Owned(age(now, Some(r.time))), Role::Muted)
        }),
        col("USER", 10, 1, |r, _| t(&r.user)),
        col("VIA", 7, 5, |r, _| {
            (Cow::Borrowed(r.via.as_str()), Role::Muted)
        }),
        col("NAMESPACE", 12, 6, |r, _| {
            (Cow::Borrowed(r.namespace.as_str()), Role::Muted)
        }),
        col("ACTION", 10, 0, |r, _| t(&r.action)),
        col("OBJECTS", 22, 1, |r, _| t(&r.objects)),
        fill("BEFORE → AFTER", 20, 2, |r, _| {
            (Cow::Borrowed(r.changes.as_str()), Role::Text)
        }),
        col("OUTCOME", 20, 0, |r, _| {
            let role = if r.failed { Role::Failed } else { Role::Ok };
            (Cow::Borrowed(r.outcome.as_str()), role)
        }),
    ]
}

/// The audit trail as a table.
pub fn draw_audit(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let a = &app.audit;
    let st = &a.table;
    let mut title = vec![
        Span::styled(" Audit", theme.style(Role::Title)),
        Span::styled(
            format!(" [{}/{}]", st.visible.len(), a.rows.len()),
            theme.style(Role::Muted),
        ),
    ];
    if !st.filter_text.is_empty() {
        title.push(Span::styled(
            format!(" /{}", st.filter_text),
            theme.style(Role::Prompt),
        ));
        if let Some(e) = st.filter.error() {
            title.push(Span::styled(format!(" ({e})"), theme.style(Role::Danger)));
        }
    }
    title.push(Span::raw(" "));
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.style(Role::Border))
        .title(Line::from(title));
    let cols = audit_columns();
    let keep = fit(&cols, area.width.saturating_sub(4), false);
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
        let line = Line::from(c.title);
        Cell::from(if c.right { line.right_aligned() } else { line })
    }))
    .style(theme.style(Role::Column));
    let page = area.height.saturating_sub(3) as usize;
    let start = st.offset.min(st.visible.len());
    let end = (start + page).min(st.visible.len());
    let body: Vec<TableRow> = st.visible[start..end]
        .iter()
        .enumerate()
        .filter_map(|(n, &i)| {
            let r = a.rows.get(i as usize)?;
            let selected = start + n == st.selected;
            let cells = keep.iter().map(|&ci| {
                let c = &cols[ci];
                let (text, role) = (c.cell)(r, app.now);
                let style = if selected {
                    Style::default()
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
        let (msg, role) = match (&a.error, a.loaded, a.rows.is_empty()) {
            (Some(e), _, _) => (format!("cannot read the audit trail: {e}"), Role::Danger),
            (None, false, _) => ("loading…".to_owned(), Role::Muted),
            (None, true, true) => (
                "no actions recorded yet (they are kept in $XDG_STATE_HOME/agentdeck/audit.jsonl)"
                    .to_owned(),
                Role::Muted,
            ),
            (None, true, false) => (
                "nothing matches the filter (esc clears it)".to_owned(),
                Role::Muted,
            ),
        };
        let r = Rect {
            x: area.x + 2,
            y: area.y + 2,
            width: area.width.saturating_sub(4),
            height: 1,
        };
        frame.render_widget(Paragraph::new(msg).style(theme.style(role)), r);
    }
}

/// The support bundle's progress, one line above the footer.
pub fn draw_bundle_gauge(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let Some(g) = &app.bundle else { return };
    if area.height < 2 {
        return;
    }
    let r = Rect {
        x: area.x,
        y: area.bottom().saturating_sub(2),
        width: area.width,
        height: 1,
    };
    let label = format!(
        " bundle of {}: {} {}/{} files, {:.1} MB ",
        g.scope,
        g.phase,
        g.files_done,
        g.files_expected.max(g.files_done),
        g.bytes as f64 / 1e6
    );
    frame.render_widget(Clear, r);
    frame.render_widget(
        LineGauge::default()
            .ratio(g.ratio())
            .label(Span::styled(label, theme.style(Role::Title)))
            .filled_style(theme.style(Role::Running))
            .unfilled_style(theme.style(Role::Muted)),
        r,
    );
}
