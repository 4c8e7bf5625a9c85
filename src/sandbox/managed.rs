//! `metadata.managedFields` as server-side apply keeps them: every write
//! records which manager owns which fields (`Update` for create, update and
//! the classic patches, `Apply` for apply patches), a field changed by one
//! manager leaves the others' sets, and an apply that would change a field
//! another manager owns is a conflict, worded as the apiserver words it.
//!
//! Fields are leaves of the object; lists whose items all have a `name` are
//! walked by name (`k:{"name":"web"}`), other lists are atomic.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::api::ApiError;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathStep {
    /// A map key.
    Key(String),
    /// A list item by its `name`.
    Named(String),
}

/// A field path.
pub type Path = Vec<PathStep>;

/// The leaf fields a document sets, with their values. Identity fields
/// (apiVersion, kind, metadata.name …) and item names are nobody's.
pub fn leaves(doc: &Value) -> Vec<(Path, Value)> {
    fn walk(v: &Value, path: &mut Path, out: &mut Vec<(Path, Value)>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    path.push(PathStep::Key(k.clone()));
                    walk(child, path, out);
                    path.pop();
                }
            }
            Value::Array(items)
                if !items.is_empty() && items.iter().all(|i| i["name"].is_string()) =>
            {
                for item in items {
                    path.push(PathStep::Named(
                        item["name"].as_str().unwrap_or_default().to_string(),
                    ));
                    walk(item, path, out);
                    path.pop();
                }
            }
            _ => out.push((path.clone(), v.clone())),
        }
    }
    let mut out = Vec::new();
    walk(doc, &mut Vec::new(), &mut out);
    out.retain(|(p, _)| {
        let top = |k: &str| p.first() == Some(&PathStep::Key(k.into()));
        let meta = |k: &str| top("metadata") && p.get(1) == Some(&PathStep::Key(k.into()));
        !(top("apiVersion")
            || top("kind")
            || [
                "name",
                "namespace",
                "generateName",
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "generation",
                "managedFields",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ]
            .iter()
            .any(|k| meta(k))
            || p.last() == Some(&PathStep::Key("name".into()))
                && p.len() >= 2
                && matches!(p[p.len() - 2], PathStep::Named(_)))
    });
    out
}

/// A field path as the apiserver prints it: `.spec.containers[name="api"].image`.
pub fn field_path(path: &[PathStep]) -> String {
    path.iter()
        .map(|s| match s {
            PathStep::Key(k) => format!(".{k}"),
            PathStep::Named(n) => format!("[name=\"{n}\"]"),
        })
        .collect()
}

/// Removes the field at `path` from `doc`.
pub fn remove_leaf(doc: &mut Value, path: &[PathStep]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = doc;
    for step in parents {
        let next = match step {
            PathStep::Key(k) => cur.get_mut(k.as_str()),
            PathStep::Named(n) => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| i["name"] == n.as_str())),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        PathStep::Key(k) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(k);
            }
        }
        PathStep::Named(n) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| i["name"] != n.as_str());
            }
        }
    }
}

/// `fieldsV1` for a set of paths.
pub fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for step in p {
            let key = match step {
                PathStep::Key(k) => format!("f:{k}"),
                PathStep::Named(n) => format!("k:{}", json!({"name": n})),
            };
            let child = cur.entry(key).or_insert_with(|| json!({}));
            if matches!(step, PathStep::Named(_))
                && let Some(m) = child.as_object_mut()
            {
                m.entry(".").or_insert_with(|| json!({}));
            }
            let Some(next) = child.as_object_mut() else {
                break;
            };
            cur = next;
        }
    }
    Value::Object(root)
}

/// The paths a `fieldsV1` names.
pub fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let children: Vec<(&String, &Value)> = v
            .as_object()
            .map(|m| m.iter().filter(|(k, _)| k.as_str() != ".").collect())
            .unwrap_or_default();
        if children.is_empty() {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            return;
        }
        for (k, child) in children {
            let step = if let Some(f) = k.strip_prefix("f:") {
                PathStep::Key(f.to_owned())
            } else if let Some(key) = k.strip_prefix("k:") {
                let parsed: Value = serde_json::from_str(key).unwrap_or(Value::Null);
                PathStep::Named(parsed["name"].as_str().unwrap_or_default().to_owned())
            } else {
                continue;
            };
            path.push(step);
            walk(child, path, out);
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// One `managedFields` entry.
#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    subresource: String,
    time: Value,
    fields: BTreeSet<Path>,
}

impl Entry {
    fn of(v: &Value) -> Entry {
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
        Entry {
            manager: s("manager"),
            operation: s("operation"),
            api_version: s("apiVersion"),
            subresource: s("subresource"),
            time: v["time"].clone(),
            fields: from_fields_v1(&v["fieldsV1"]),
        }
    }

    fn to_value(&self) -> Value {
        let mut v = json!({"manager": self.manager, "operation": self.operation,
            "apiVersion": self.api_version, "time": self.time,
            "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&self.fields)});
        if !self.subresource.is_empty() {
            v["subresource"] = json!(self.subresource);
        }
        v
    }

    /// As a conflict message names it (`printManager`).
    fn printed(&self) -> String {
        let mut s = format!("\"{}\"", self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource \"{}\"", self.subresource);
        }
        if self.operation == "Update" {
            match self.time.as_str() {
                Some(t) => format!("{s} using {} at {t}", self.api_version),
                None => format!("{s} using {}", self.api_version),
            }
        } else {
            s
        }
    }
}

fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|l| l.iter().map(Entry::of).collect())
        .unwrap_or_default()
}

/// Which fields of a write are tracked: a status write owns status only,
/// a main-resource write of a kind with a status subresource everything but.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every field.
    All,
    /// Everything but `status`.
    NotStatus,
    /// Only `status`.
    Status,
}

impl Scope {
    fn keeps(self, p: &Path) -> bool {
        let status = p.first() == Some(&PathStep::Key("status".into()));
        match self {
            Scope::All => true,
            Scope::NotStatus => !status,
            Scope::Status => status,
        }
    }
}

/// Who writes, and how.
#[derive(Debug, Clone)]
pub struct Write<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// `Apply` with the applied configuration's fields, else `Update`.
    pub applied: Option<BTreeSet<Path>>,
    /// `apiVersion` of the request.
    pub api_version: &'a str,
    /// `status` for a status write.
    pub subresource: &'a str,
    /// Which fields count.
    pub scope: Scope,
    /// Now, RFC 3339.
    pub time: &'a str,
}

/// Sets `new`'s managedFields from `old`'s and what this write changed.
pub fn track(old: Option<&Value>, new: &mut Value, w: &Write<'_>) {
    let leaf_map = |v: &Value| -> BTreeMap<Path, Value> {
        leaves(v)
            .into_iter()
            .filter(|(p, _)| w.scope.keeps(p))
            .collect()
    };
    let before = old.map(leaf_map).unwrap_or_default();
    let after = leaf_map(new);
    let mut changed: BTreeSet<Path> = after
        .iter()
        .filter(|(p, v)| before.get(*p) != Some(*v))
        .map(|(p, _)| p.clone())
        .collect();
    changed.extend(before.keys().filter(|p| !after.contains_key(*p)).cloned());
    let operation = if w.applied.is_some() {
        "Apply"
    } else {
        "Update"
    };
    let mut list = old.map(entries).unwrap_or_default();
    let mine = |e: &Entry| {
        e.manager == w.manager && e.operation == operation && e.subresource == w.subresource
    };
    for e in list.iter_mut().filter(|e| !mine(e)) {
        e.fields
            .retain(|p| !changed.contains(p) && after.contains_key(p) || !w.scope.keeps(p));
    }
    let fields: BTreeSet<Path> = match &w.applied {
        Some(applied) => applied.clone(),
        None => {
            let previous = list
                .iter()
                .find(|e| mine(e))
                .map(|e| e.fields.clone())
                .unwrap_or_default();
            previous
                .into_iter()
                .filter(|p| after.contains_key(p) || !w.scope.keeps(p))
                .chain(changed.iter().filter(|p| after.contains_key(*p)).cloned())
                .collect()
        }
    };
    // A write that changes nothing of the object nor of what this manager
    // owns leaves its entry (and so the object) as it was: a repeated apply
    // is a no-op, as on a real server.
    let previous = list.iter().find(|e| mine(e)).map(|e| &e.fields);
    let touched = !changed.is_empty() || previous != Some(&fields);
    match list.iter_mut().find(|e| mine(e)) {
        Some(e) => {
            e.fields = fields;
            if touched {
                e.time = json!(w.time);
                e.api_version = w.api_version.to_owned();
            }
        }
        None => list.push(Entry {
            manager: w.manager.to_owned(),
            operation: operation.to_owned(),
            api_version: w.api_version.to_owned(),
            subresource: w.subresource.to_owned(),
            time: json!(w.time),
            fields,
        }),
    }
    list.retain(|e| !e.fields.is_empty());
    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert(
                "managedFields".into(),
                Value::Array(list.iter().map(Entry::to_value).collect()),
            );
        }
    }
}

/// The value at `path` in `doc`.
fn value_at<'a>(doc: &'a Value, path: &[PathStep]) -> Option<&'a Value> {
    let mut cur = doc;
    for step in path {
        cur = match step {
            PathStep::Key(k) => cur.get(k.as_str())?,
            PathStep::Named(n) => cur.as_array()?.iter().find(|i| i["name"] == n.as_str())?,
        };
    }
    Some(cur)
}

/// An apply by `manager` of `applied` onto `current`: the fields another
/// manager owns that it would change, or the 409 naming them unless forced.
pub fn check_conflicts(
    current: &Value,
    manager: &str,
    applied: &[(Path, Value)],
    force: bool,
) -> Result<(), ApiError> {
    let mut conflicts: Vec<(Entry, Path)> = Vec::new();
    for e in entries(current) {
        if e.manager == manager && e.operation == "Apply" {
            continue;
        }
        for (p, v) in applied {
            if e.fields.contains(p) && value_at(current, p) != Some(v) {
                conflicts.push((e.clone(), p.clone()));
            }
        }
    }
    if conflicts.is_empty() || force {
        return Ok(());
    }
    Err(conflict_error(&conflicts))
}

/// The apiserver's `NewConflictError`.
fn conflict_error(conflicts: &[(Entry, Path)]) -> ApiError {
    let n = conflicts.len();
    let message = if let [(e, p)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            e.printed(),
            field_path(p)
        )
    } else {
        let mut by_manager: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        for (e, p) in conflicts {
            by_manager
                .entry(e.manager.clone())
                .or_insert_with(|| (e.printed(), Vec::new()))
                .1
                .push(field_path(p));
        }
        let mut lines = Vec::new();
        for (printed, paths) in by_manager.values() {
            lines.push(format!("conflicts with {printed}:"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
    };
    let mut e = ApiError::new_status(409, "Conflict", message);
    e.details = Some(json!({"causes": conflicts.iter().map(|(e, p)| json!({
        "reason": "FieldManagerConflict",
        "message": format!("conflict with {}", e.printed()),
        "field": field_path(p),
    })).collect::<Vec<_>>()}));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w<'a>(manager: &'a str, applied: Option<BTreeSet<Path>>) -> Write<'a> {
        Write {
            manager,
            applied,
            api_version: "v1",
            subresource: "",
            scope: Scope::All,
            time: "2026-01-01T00:00:00Z",
        }
    }

    fn owned(obj: &Value, manager: &str) -> Vec<String> {
        entries(obj)
            .into_iter()
            .filter(|e| e.manager == manager)
            .flat_map(|e| e.fields.iter().map(|p| field_path(p)).collect::<Vec<_>>())
            .collect()
    }

    #[test]
    fn updates_take_the_fields_they_change_from_other_managers() {
        let mut created = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "1"}});
        track(None, &mut created, &w("kubectl-create", None));
        assert_eq!(owned(&created, "kubectl-create"), [".data.a", ".data.b"]);
        let mut patched = created.clone();
        patched["data"]["b"] = json!("2");
        track(Some(&created), &mut patched, &w("kubectl-patch", None));
        assert_eq!(owned(&patched, "kubectl-create"), [".data.a"]);
        assert_eq!(owned(&patched, "kubectl-patch"), [".data.b"]);
        let fields = &patched["metadata"]["managedFields"][1];
        assert_eq!(fields["operation"], "Update");
        assert_eq!(fields["fieldsV1"], json!({"f:data": {"f:b": {}}}));
    }

    #[test]
    fn an_apply_that_changes_a_field_someone_else_owns_conflicts_with_the_real_wording() {
        let mut obj = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "1"}});
        track(None, &mut obj, &w("kubectl-create", None));
        let applied = vec![
            (
                vec![PathStep::Key("data".into()), PathStep::Key("a".into())],
                json!("9"),
            ),
            (
                vec![PathStep::Key("data".into()), PathStep::Key("b".into())],
                json!("1"),
            ),
        ];
        let e = check_conflicts(&obj, "tool", &applied, false).expect_err("conflict");
        assert_eq!(e.code, 409);
        assert_eq!(
            e.message,
            "Apply failed with 1 conflict: conflict with \"kubectl-create\" using v1 at 2026-01-01T00:00:00Z: .data.a"
        );
        assert!(check_conflicts(&obj, "tool", &applied, true).is_ok());
    }

    #[test]
    fn applying_the_same_configuration_again_changes_nothing() {
        let applied: BTreeSet<Path> = [vec![
            PathStep::Key("data".into()),
            PathStep::Key("a".into()),
        ]]
        .into_iter()
        .collect();
        let mut first = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        track(None, &mut first, &w("tool", Some(applied.clone())));
        let mut again = first.clone();
        let mut later = w("tool", Some(applied));
        later.time = "2026-01-01T00:05:00Z";
        track(Some(&first), &mut again, &later);
        assert_eq!(again, first);
    }

    #[test]
    fn fields_v1_round_trips_named_list_items() {
        let paths: BTreeSet<Path> = [vec![
            PathStep::Key("spec".into()),
            PathStep::Key("containers".into()),
            PathStep::Named("web".into()),
            PathStep::Key("image".into()),
        ]]
        .into_iter()
        .collect();
        let v = to_fields_v1(&paths);
        assert_eq!(
            v,
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}})
        );
        assert_eq!(from_fields_v1(&v), paths);
    }
}
