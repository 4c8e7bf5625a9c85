//! The local audit trail: one JSON line per action in
//! `$XDG_STATE_HOME/agentdeck/audit.jsonl` (default
//! `~/.local/state/agentdeck/audit.jsonl`): who, what, on which objects,
//! before → after, and the outcome. The cluster side of the trail is the
//! Event [`super::exec::apply`] records on each object.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::action::{Action, Actor};
use super::error::{OpsError, Result};
use super::plan::Change;

/// One action, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    pub time: Timestamp,
    /// Kube user of the context.
    pub user: String,
    /// `cli` or `console`.
    pub via: String,
    /// The kubeconfig context (empty in records written before it was kept).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
    pub namespace: String,
    /// The verb (`scale`, `hold`, `drain` …).
    pub action: String,
    /// The request as given (flags, names).
    #[serde(default)]
    pub request: Value,
    /// `drain pool alpha`.
    pub summary: String,
    /// Objects changed.
    #[serde(default)]
    pub objects: Vec<AuditObject>,
    /// Targets already as asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unchanged: Vec<String>,
    /// `applied`, or `failed: <why>`.
    pub outcome: String,
}

/// One object an action changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditObject {
    /// `AgentPool/alpha`.
    pub object: String,
    /// The changed fields as they were (shaped like `after`).
    pub before: Value,
    /// The changed fields as written.
    pub after: Value,
    /// `path: before → after` lines.
    pub changes: Vec<String>,
}

impl AuditObject {
    pub(crate) fn of(change: &Change, after: &Value, changes: Vec<String>) -> AuditObject {
        if change.delete {
            return AuditObject {
                object: change.object(),
                before: Value::String("present".into()),
                after: Value::String("deleted".into()),
                changes,
            };
        }
        let mut patch = super::diff::merge_patch(&change.before, after);
        for noise in ["resourceVersion", "generation", "managedFields"] {
            if let Some(m) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove(noise);
            }
        }
        let empty_metadata = patch
            .get("metadata")
            .and_then(Value::as_object)
            .is_some_and(|m| m.is_empty());
        if let Some(m) = patch.as_object_mut().filter(|_| empty_metadata) {
            m.remove("metadata");
        }
        AuditObject {
            object: change.object(),
            before: pick(&change.before, &patch),
            after: patch,
            changes,
        }
    }
}

/// The parts of `before` that `patch` touches, shaped like `patch`.
fn pick(before: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut out = serde_json::Map::new();
            for (k, pv) in p {
                let bv = before.get(k).unwrap_or(&Value::Null);
                let v = if pv.is_object() && bv.is_object() {
                    pick(bv, pv)
                } else {
                    bv.clone()
                };
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        _ => before.clone(),
    }
}

impl AuditRecord {
    pub(crate) fn new(
        actor: &Actor,
        namespace: &str,
        action: &Action,
        summary: &str,
        objects: Vec<AuditObject>,
        unchanged: Vec<String>,
        outcome: String,
    ) -> AuditRecord {
        AuditRecord {
            time: Timestamp::now(),
            user: actor.user.clone(),
            via: actor.via.clone(),
            context: actor.context.clone(),
            namespace: namespace.to_owned(),
            action: action.verb().to_owned(),
            request: serde_json::to_value(action).unwrap_or_default(),
            summary: summary.to_owned(),
            objects,
            unchanged,
            outcome,
        }
    }

    /// The record of an action that failed after it was confirmed.
    pub fn failed(actor: &Actor, namespace: &str, action: &Action, error: &OpsError) -> Self {
        AuditRecord::new(
            actor,
            namespace,
            action,
            action.verb(),
            Vec::new(),
            Vec::new(),
            format!("failed: {error}"),
        )
    }
}

/// `$XDG_STATE_HOME/agentdeck/audit.jsonl`, else
/// `$HOME/.local/state/agentdeck/audit.jsonl`.
pub fn default_path() -> Result<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = var("XDG_STATE_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".local").join("state")))
        .ok_or(OpsError::NoStateDir)?;
    Ok(base.join("agentdeck").join("audit.jsonl"))
}

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> OpsError + '_ {
    move |source| OpsError::AuditFile {
        path: path.display().to_string(),
        source,
    }
}

/// Appends `record` as one line (one write, so concurrent writers do not
/// interleave within a line).
pub fn append(path: &Path, record: &AuditRecord) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(file_error(path))?;
    }
    let mut line = serde_json::to_string(record).unwrap_or_default();
    line.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(file_error(path))?;
    file.write_all(line.as_bytes()).map_err(file_error(path))
}

/// Records at or after `since` (all without), oldest first; a missing file
/// is an empty trail, and lines that are not records are skipped.
pub fn read(path: &Path, since: Option<Timestamp>) -> Result<Vec<AuditRecord>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(file_error(path)(e)),
    };
    let mut out = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line.map_err(file_error(path))?;
        let Ok(record) = serde_json::from_str::<AuditRecord>(&line) else {
            continue;
        };
        if since.is_none_or(|s| record.time >= s) {
            out.push(record);
        }
    }
    Ok(out)
}

/// Widest cell of each audit column but TIME (USER, NAMESPACE, ACTION,
/// OBJECTS, CHANGES, OUTCOME): a row fits a wide terminal; `-o json`
/// has everything.
pub const CELL_WIDTHS: [usize; 6] = [24, 20, 12, 40, 60, 40];

/// `text` on one line, at most `max` characters (the end replaced by `…`).
fn clip(text: &str, max: usize) -> String {
    let line = crate::text::sanitize_line(text);
    if line.chars().count() <= max {
        return line;
    }
    let mut out: String = line.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The trail as a table: TIME USER NAMESPACE ACTION OBJECTS CHANGES
/// OUTCOME, each cell cut to [`CELL_WIDTHS`].
pub fn table(records: &[AuditRecord]) -> String {
    let rows: Vec<[String; 7]> = records
        .iter()
        .map(|r| {
            let objects: Vec<&str> = r.objects.iter().map(|o| o.object.as_str()).collect();
            let changes: Vec<String> = r.objects.iter().flat_map(|o| o.changes.clone()).collect();
            let [user, namespace, action, objects_w, changes_w, outcome] = CELL_WIDTHS;
            [
                r.time.strftime("%Y-%m-%d %H:%M:%S").to_string(),
                clip(&r.user, user),
                clip(&r.namespace, namespace),
                clip(&r.action, action),
                if objects.is_empty() {
                    "-".into()
                } else {
                    clip(&objects.join(","), objects_w)
                },
                if changes.is_empty() {
                    clip(&r.unchanged.join("; "), changes_w)
                } else {
                    clip(&changes.join("; "), changes_w)
                },
                clip(&r.outcome, outcome),
            ]
        })
        .collect();
    super::status::columns(
        &[
            "TIME",
            "USER",
            "NAMESPACE",
            "ACTION",
            "OBJECTS",
            "CHANGES",
            "OUTCOME",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::plan::Kind;
    use serde_json::json;

    fn actor() -> Actor {
        Actor {
            user: "alice".into(),
            via: "cli".into(),
            context: "test".into(),
        }
    }

    #[test]
    fn a_record_keeps_only_the_changed_fields_before_and_after() {
        let change = Change {
            kind: Kind::AgentPool,
            name: "alpha".into(),
            status: false,
            delete: false,
            before: json!({"metadata": {"resourceVersion": "1"}, "spec": {"minReplicas": 1, "image": "i"}}),
            after: json!({}),
        };
        let after = json!({"metadata": {"resourceVersion": "2", "generation": 2},
                           "spec": {"minReplicas": 3, "image": "i"}});
        let o = AuditObject::of(&change, &after, vec!["spec.minReplicas: 1 → 3".into()]);
        assert_eq!(o.before, json!({"spec": {"minReplicas": 1}}));
        assert_eq!(o.after, json!({"spec": {"minReplicas": 3}}));
    }

    #[test]
    fn table_rows_are_bounded_whatever_an_action_changed() {
        let action = Action::DrainPool {
            pool: "alpha".into(),
            undo: false,
        };
        let objects: Vec<AuditObject> = (0..40)
            .map(|i| AuditObject {
                object: format!("Pod/agent-with-a-long-name-{i:03}"),
                before: json!({}),
                after: json!({}),
                changes: vec![format!(
                    "metadata.annotations.agentdeck.dev/drain: null → \"true\" ({i})"
                )],
            })
            .collect();
        let record = AuditRecord::new(
            &actor(),
            "default",
            &action,
            "drain pool alpha",
            objects,
            vec![],
            format!("failed: {}", "the API said no\nat length ".repeat(30)),
        );
        let text = table(&[record]);
        let widest = 19 + CELL_WIDTHS.iter().sum::<usize>() + 3 * CELL_WIDTHS.len();
        assert_eq!(text.lines().count(), 2, "{text}");
        for line in text.lines() {
            assert!(
                line.chars().count() <= widest,
                "{} wide: {line}",
                line.len()
            );
        }
        assert!(text.contains("Pod/agent-with-a-long-name-000,"), "{text}");
        assert!(text.contains('…'), "{text}");
    }

    #[test]
    fn records_round_trip_through_the_file_and_filter_by_time() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("nested").join("audit.jsonl");
        assert_eq!(read(&path, None).expect("missing file"), vec![]);
        let action = Action::DrainPool {
            pool: "alpha".into(),
            undo: false,
        };
        let mut old = AuditRecord::new(
            &actor(),
            "default",
            &action,
            "drain pool alpha",
            vec![],
            vec![],
            "applied".into(),
        );
        old.time = "2026-01-01T00:00:00Z".parse().expect("ts");
        let new = AuditRecord::new(
            &actor(),
            "default",
            &action,
            "drain pool alpha",
            vec![],
            vec![],
            "applied".into(),
        );
        append(&path, &old).expect("append");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"not json\n"))
            .expect("garbage line");
        append(&path, &new).expect("append");
        assert_eq!(
            read(&path, None).expect("read"),
            vec![old.clone(), new.clone()]
        );
        let since: Timestamp = "2026-06-01T00:00:00Z".parse().expect("ts");
        assert_eq!(read(&path, Some(since)).expect("read"), vec![new.clone()]);
        assert_eq!(new.request["action"], "drainPool");
        let t = table(&[new]);
        assert!(t.starts_with("TIME"), "{t}");
        assert!(
            t.contains("alice") && t.contains("drain") && t.contains("applied"),
            "{t}"
        );
    }
}
