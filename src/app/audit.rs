//! The `:audit` view: the local audit trail (the file `agentdeck audit`
//! reads), newest first, filtered like the other tables. Rows are built
//! off the UI thread, when the file is read.

use jiff::Timestamp;

use super::rows::{Labels, Row};
use super::text::clean;
use super::{App, TableState};
use crate::ops::audit::AuditRecord;

/// One action of the trail.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRow {
    pub key: String,
    pub time: Timestamp,
    pub user: String,
    /// `cli` or `console`.
    pub via: String,
    /// The kube context acted in (empty in old records).
    pub context: String,
    pub namespace: String,
    /// The verb (`drain`, `hold` …).
    pub action: String,
    /// Objects changed (`AgentPool/alpha`), or the summary when none was.
    pub objects: String,
    /// `path: before → after`, joined.
    pub changes: String,
    /// `applied`, or `failed: …`.
    pub outcome: String,
    pub failed: bool,
    /// The whole record as YAML lines, for Enter.
    pub detail: Vec<String>,
    pub labels: Labels,
    pub search: String,
    pub name_lc: String,
}

impl Row for AuditRow {
    fn key(&self) -> &str {
        &self.key
    }
    fn name(&self) -> &str {
        &self.objects
    }
    fn search(&self) -> &str {
        &self.search
    }
    fn name_lc(&self) -> &str {
        &self.name_lc
    }
    fn labels(&self) -> &Labels {
        &self.labels
    }
    fn pool(&self) -> Option<&str> {
        None
    }
    fn when(&self) -> Option<Timestamp> {
        Some(self.time)
    }
    fn status(&self) -> &str {
        &self.outcome
    }
}

/// The rows of `records` (oldest first, as read), newest first; every
/// string sanitised and the search text lower-cased once.
pub fn rows(records: &[AuditRecord]) -> Vec<AuditRow> {
    records
        .iter()
        .enumerate()
        .rev()
        .map(|(i, r)| {
            let objects: Vec<&str> = r.objects.iter().map(|o| o.object.as_str()).collect();
            let objects = clean(&if objects.is_empty() {
                r.summary.clone()
            } else {
                objects.join(", ")
            });
            let changes: Vec<String> = r.objects.iter().flat_map(|o| o.changes.clone()).collect();
            let changes = clean(&if changes.is_empty() {
                if r.unchanged.is_empty() {
                    "-".to_owned()
                } else {
                    format!("unchanged: {}", r.unchanged.join("; "))
                }
            } else {
                changes.join("; ")
            });
            let (user, via, action, outcome, namespace, context) = (
                clean(&r.user),
                clean(&r.via),
                clean(&r.action),
                clean(&r.outcome),
                clean(&r.namespace),
                clean(&r.context),
            );
            let search = [
                user.as_str(),
                via.as_str(),
                context.as_str(),
                namespace.as_str(),
                action.as_str(),
                objects.as_str(),
                changes.as_str(),
                outcome.as_str(),
            ]
            .join(" ")
            .to_lowercase();
            let detail = serde_json::to_value(r)
                .ok()
                .and_then(|v| serde_saphyr::to_string(&v).ok())
                .unwrap_or_default()
                .lines()
                .map(clean)
                .collect();
            AuditRow {
                detail,
                key: format!("{i}/{}", r.time),
                time: r.time,
                failed: !outcome.starts_with("applied"),
                name_lc: objects.to_lowercase(),
                user,
                via,
                context,
                namespace,
                action,
                objects,
                changes,
                outcome,
                labels: Labels::new(),
                search,
            }
        })
        .collect()
}

/// The kind of the YAML view's object when it shows an audit record.
pub const AUDIT_RECORD: &str = "AuditRecord";

/// The audit view's state.
#[derive(Debug, Default)]
pub struct AuditState {
    pub rows: Vec<AuditRow>,
    pub table: TableState,
    /// The file has been read at least once.
    pub loaded: bool,
    /// Why it could not be read, last time.
    pub error: Option<String>,
}

impl App {
    pub(super) fn audit_loaded(&mut self, result: Result<Vec<AuditRow>, String>) {
        let a = &mut self.audit;
        a.loaded = true;
        match result {
            Ok(rows) => {
                a.rows = rows;
                a.error = None;
            }
            Err(e) => a.error = Some(clean(&e)),
        }
        self.audit_refilter();
    }

    pub(super) fn audit_filter(&mut self, text: String) {
        let t = &mut self.audit.table;
        t.filter = super::filter::Filter::parse(&text);
        t.filter_text = text;
        t.selected = 0;
        t.offset = 0;
        self.audit_refilter();
    }

    fn audit_refilter(&mut self) {
        let page = self.page();
        let a = &mut self.audit;
        let keep = a
            .table
            .visible
            .get(a.table.selected)
            .and_then(|&i| a.rows.get(i as usize))
            .map(|r| r.key.clone());
        let order: Vec<u32> = (0..a.rows.len() as u32).collect();
        a.table.visible = a
            .table
            .filter
            .apply(&a.rows, &order, |_| true, &mut self.matcher);
        if let Some(k) = keep
            && let Some(i) = a
                .table
                .visible
                .iter()
                .position(|&i| a.rows[i as usize].key == k)
        {
            a.table.selected = i;
        }
        clamp(&mut a.table, page);
    }

    /// Enter on a row: the whole record, in the YAML view.
    pub(super) fn audit_open(&mut self) -> Vec<super::Command> {
        let t = &self.audit.table;
        let Some(row) = t
            .visible
            .get(t.selected)
            .and_then(|&i| self.audit.rows.get(i as usize))
        else {
            return Vec::new();
        };
        let object = super::ObjectKey {
            context: String::new(),
            kind: AUDIT_RECORD,
            namespace: row.namespace.clone(),
            name: format!(
                "{} {} {}",
                row.time.strftime("%Y-%m-%d %H:%M:%S"),
                row.action,
                row.objects
            ),
        };
        let lines = row.detail.clone();
        let out = self.go(super::Screen::Yaml { object });
        self.yaml = super::YamlState {
            lines,
            top: 0,
            loaded: true,
        };
        out
    }

    pub(super) fn audit_move(&mut self, delta: i64) {
        let page = self.page();
        let t = &mut self.audit.table;
        let n = t.visible.len() as i64;
        t.selected = (t.selected as i64 + delta).clamp(0, (n - 1).max(0)) as usize;
        clamp(t, page);
    }
}

fn clamp(t: &mut TableState, page: usize) {
    let n = t.visible.len();
    t.selected = t.selected.min(n.saturating_sub(1));
    if t.selected < t.offset {
        t.offset = t.selected;
    } else if t.selected >= t.offset + page {
        t.offset = t.selected + 1 - page;
    }
    t.offset = t.offset.min(n.saturating_sub(page));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::audit::AuditObject;
    use serde_json::json;

    fn record(t: &str, action: &str, outcome: &str, object: Option<&str>) -> AuditRecord {
        AuditRecord {
            time: t.parse().expect("time"),
            user: "alice\u{1b}[31m".into(),
            via: "console".into(),
            context: "kind-a".into(),
            namespace: "team".into(),
            action: action.into(),
            request: json!({}),
            summary: format!("{action} pool alpha"),
            objects: object
                .map(|o| AuditObject {
                    object: o.into(),
                    before: json!({"spec": {"drain": false}}),
                    after: json!({"spec": {"drain": true}}),
                    changes: vec!["spec.drain: false → true".into()],
                })
                .into_iter()
                .collect(),
            unchanged: Vec::new(),
            outcome: outcome.into(),
        }
    }

    #[test]
    fn the_trail_reads_newest_first_with_before_and_after_and_clean_text() {
        let rows = rows(&[
            record(
                "2026-01-01T10:00:00Z",
                "drain",
                "applied",
                Some("AgentPool/alpha"),
            ),
            record("2026-01-01T11:00:00Z", "hold", "failed: 409 twice", None),
        ]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].action, "hold");
        assert!(rows[0].failed);
        assert_eq!(rows[0].objects, "hold pool alpha");
        assert_eq!(rows[1].objects, "AgentPool/alpha");
        assert_eq!(rows[1].changes, "spec.drain: false → true");
        // The context acted in, shown and searched.
        assert_eq!(rows[1].context, "kind-a");
        assert!(rows[1].search.contains("kind-a"), "{}", rows[1].search);
        assert!(!rows[1].failed);
        assert!(!rows[1].user.contains('\u{1b}'), "{:?}", rows[1].user);
        assert!(rows[1].search.contains("agentpool/alpha"));
        assert_ne!(rows[0].key, rows[1].key);
    }
}
