//! The `:audit` view and the support bundle's gauge: pure drawing of the
//! app state, columns declared as data like the other tables.

use std::borrow::Cow;

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, LineGauge, Paragraph, Table};

use super::{
    Column, Role, Theme, age, col, fill, header_row, lay_out, long, name, num, t, table_rows,
};
use crate::app::App;
use crate::app::audit::AuditRow;

/// Columns of the audit view.
pub fn audit_columns() -> Vec<Column<AuditRow>> {
    vec![
        num("AGE", 6, 0, |r, now| {
            (Cow::Owned(age(now, Some(r.time))), Role::Muted)
        }),
        long("USER", 10, 1, |r, _| t(&r.user)),
        col("VIA", 7, 5, |r, _| {
            (Cow::Borrowed(r.via.as_str()), Role::Muted)
        }),
        name("CONTEXT", 12, 7, |r, _| {
            (Cow::Borrowed(r.context.as_str()), Role::Muted)
        }),
        name("NAMESPACE", 12, 6, |r, _| {
            (Cow::Borrowed(r.namespace.as_str()), Role::Muted)
        }),
        col("ACTION", 10, 0, |r, _| t(&r.action)),
        name("OBJECTS", 22, 1, |r, _| t(&r.objects)),
        fill("BEFORE → AFTER", 20, 2, |r, _| {
            (Cow::Borrowed(r.changes.as_str()), Role::Text)
        }),
        long("OUTCOME", 20, 0, |r, _| {
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
    let page = area.height.saturating_sub(3) as usize;
    let start = st.offset.min(st.visible.len());
    let end = (start + page).min(st.visible.len());
    let on_screen: Vec<&AuditRow> = st.visible[start..end]
        .iter()
        .filter_map(|&i| a.rows.get(i as usize))
        .collect();
    let (keep, cells) = lay_out(
        &cols,
        on_screen.iter().copied(),
        app.now,
        area.width.saturating_sub(2),
        false,
    );
    let body = table_rows(theme, &keep, &cols, cells, |n| {
        (start + n == st.selected, false)
    });
    let widths: Vec<Constraint> = keep.iter().map(|&(_, w)| Constraint::Length(w)).collect();
    let header = header_row(theme, &keep, &cols);
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
            (None, true, true) if app.opts.bundle.is_some() => (
                "the bundle holds no audit records: nothing had been done with agentdeck in this context and namespace from where it was taken"
                    .to_owned(),
                Role::Muted,
            ),
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
