//! Object diffs as the preview shows them, and the JSON merge patch that
//! turns one object into another. Pure.

use serde_json::{Map, Value};

/// Parts of an object a preview shows; the rest (resourceVersion,
/// generation, managedFields, timestamps) is the server's bookkeeping.
const SHOWN: [&str; 4] = [
    "/metadata/labels",
    "/metadata/annotations",
    "/spec",
    "/status",
];

/// One line per changed leaf, `path: before → after`, in path order;
/// `(none)` for a side that lacks it.
pub fn lines(before: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for pointer in SHOWN {
        let path = pointer.trim_start_matches('/').replace('/', ".");
        walk(
            &path,
            before.pointer(pointer).unwrap_or(&Value::Null),
            after.pointer(pointer).unwrap_or(&Value::Null),
            &mut out,
        );
    }
    out
}

fn walk(path: &str, before: &Value, after: &Value, out: &mut Vec<String>) {
    if same(before, after) {
        return;
    }
    let (Some(b), Some(a)) = (as_map(before), as_map(after)) else {
        out.push(format!("{path}: {} → {}", show(before), show(after)));
        return;
    };
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let child = if k.contains('.') || k.contains('/') {
            format!("{path}[{k:?}]")
        } else {
            format!("{path}.{k}")
        };
        walk(
            &child,
            b.get(k).unwrap_or(&Value::Null),
            a.get(k).unwrap_or(&Value::Null),
            out,
        );
    }
}

/// Equal once fields set to `null` are taken as absent: the API writes
/// `lastProbeTime: null` in a pod's conditions where a typed client leaves
/// the field out, and that is no change.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let set = |m: &Map<String, Value>| m.iter().filter(|(_, v)| !v.is_null()).count();
            set(x) == set(y)
                && x.iter()
                    .filter(|(_, v)| !v.is_null())
                    .all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

/// An object's fields, `null` counting as an empty object (so a field
/// added or removed whole is shown leaf by leaf).
fn as_map(v: &Value) -> Option<Map<String, Value>> {
    match v {
        Value::Object(m) => Some(m.clone()),
        Value::Null => Some(Map::new()),
        _ => None,
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::Null => "(none)".into(),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// The RFC 7386 merge patch from `before` to `after`: changed keys, `null`
/// for removed ones, arrays whole.
pub fn merge_patch(before: &Value, after: &Value) -> Value {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut patch = Map::new();
            for (k, av) in a {
                match b.get(k) {
                    Some(bv) if bv == av => {}
                    Some(bv) => {
                        patch.insert(k.clone(), merge_patch(bv, av));
                    }
                    None => {
                        patch.insert(k.clone(), av.clone());
                    }
                }
            }
            for k in b.keys() {
                if !a.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => after.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_field_the_api_writes_as_null_is_no_change() {
        let before = json!({"metadata": {"annotations": {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let after = json!({"metadata": {"annotations": {"agentdeck.dev/drain": "true"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null}]}});
        assert_eq!(
            lines(&before, &after),
            vec!["metadata.annotations[\"agentdeck.dev/drain\"]: (none) → \"true\"".to_owned()]
        );
        // A real change inside the array still shows.
        let changed = json!({"metadata": {"annotations": {}},
            "status": {"conditions": [{"type": "Ready", "status": "False", "lastProbeTime": null}]}});
        assert_eq!(lines(&before, &changed).len(), 1);
        assert!(lines(&before, &changed)[0].starts_with("status.conditions:"));
    }

    #[test]
    fn changed_leaves_are_listed_with_both_sides() {
        let cases = [
            (
                json!({"spec": {"minReplicas": 1, "maxReplicas": 4}}),
                json!({"spec": {"minReplicas": 3, "maxReplicas": 4}}),
                vec!["spec.minReplicas: 1 → 3"],
            ),
            (
                json!({"spec": {"drain": false}}),
                json!({"spec": {"drain": true, "hold": {"replicas": 2, "setBy": "al"}}}),
                vec![
                    "spec.drain: false → true",
                    "spec.hold.replicas: (none) → 2",
                    "spec.hold.setBy: (none) → \"al\"",
                ],
            ),
            (
                json!({"metadata": {"resourceVersion": "1", "annotations": {"a": "b"}}}),
                json!({"metadata": {"resourceVersion": "2", "annotations": {"agentdeck.dev/drain": "true", "a": "b"}}}),
                vec!["metadata.annotations[\"agentdeck.dev/drain\"]: (none) → \"true\""],
            ),
            (
                json!({"status": {"phase": "Failed", "exitCode": 2, "history": []}}),
                json!({"status": {"phase": "Pending", "history": [{"phase": "Failed"}]}}),
                vec![
                    "status.exitCode: 2 → (none)",
                    "status.history: [] → [{\"phase\":\"Failed\"}]",
                    "status.phase: \"Failed\" → \"Pending\"",
                ],
            ),
            (json!({"spec": {"x": 1}}), json!({"spec": {"x": 1}}), vec![]),
        ];
        for (before, after, want) in cases {
            assert_eq!(lines(&before, &after), want, "{before} → {after}");
        }
    }

    #[test]
    fn a_merge_patch_turns_before_into_after() {
        let cases = [
            (
                json!({"a": 1, "b": {"c": 2, "d": 3}}),
                json!({"a": 1, "b": {"c": 5}}),
            ),
            (json!({"a": [1, 2]}), json!({"a": [2], "e": "x"})),
            (json!({"hold": {"replicas": 1}}), json!({})),
        ];
        for (before, after) in cases {
            let patch = merge_patch(&before, &after);
            let mut applied = before.clone();
            json_patch::merge(&mut applied, &patch);
            assert_eq!(applied, after, "patch {patch}");
        }
        assert_eq!(
            merge_patch(&json!({"a": 1, "b": 2}), &json!({"a": 1, "b": 3})),
            json!({"b": 3}),
            "only what changed"
        );
    }
}
