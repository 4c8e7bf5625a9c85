//! Objects as the bundle writes them: pure functions from API objects (as
//! JSON) to the YAML a support engineer reads, with secrets hidden field by
//! field.

use serde_json::{Map, Value};

use super::redact::{OBJECT_FIELD, RedactionCounts, Redactor, sensitive_name, trivial_value};

/// Strips what only adds bulk (managedFields) and, for nodes, keeps only
/// what a support engineer needs (identity, conditions, capacity).
pub fn trim(kind: &str, obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if kind == "Node" {
        let meta = obj["metadata"].clone();
        let status = &obj["status"];
        let mut keep = Map::new();
        keep.insert("apiVersion".into(), obj["apiVersion"].clone());
        keep.insert("kind".into(), "Node".into());
        keep.insert(
            "metadata".into(),
            serde_json::json!({
                "name": meta["name"],
                "labels": meta["labels"],
                "creationTimestamp": meta["creationTimestamp"],
            }),
        );
        keep.insert(
            "status".into(),
            serde_json::json!({
                "conditions": status["conditions"],
                "capacity": status["capacity"],
                "allocatable": status["allocatable"],
                "nodeInfo": status["nodeInfo"],
            }),
        );
        *obj = Value::Object(keep);
    }
}

/// A Secret as the bundle shows it: its name, type, labels and the names of
/// its keys — never a value.
pub fn secret_summary(secret: &Value) -> Value {
    let keys = |field: &str| -> Vec<String> {
        secret[field]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mut all = keys("data");
    all.extend(keys("stringData"));
    all.sort();
    all.dedup();
    serde_json::json!({
        "name": secret["metadata"]["name"],
        "type": secret["type"],
        "labels": secret["metadata"]["labels"],
        "creationTimestamp": secret["metadata"]["creationTimestamp"],
        "keys": all,
    })
}

/// The values of a Secret (base64-decoded), so that the redactor can hide
/// them wherever else they show up.
pub fn secret_values(secret: &Value) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(data) = secret["data"].as_object() {
        for v in data.values().filter_map(Value::as_str) {
            if let Some(bytes) = base64_decode(v) {
                out.push(bytes);
            }
        }
    }
    if let Some(data) = secret["stringData"].as_object() {
        out.extend(
            data.values()
                .filter_map(Value::as_str)
                .map(|s| s.as_bytes().to_vec()),
        );
    }
    // A multi-line value (a key file, a kubeconfig) is also hidden line by
    // line, as logs print it.
    let lines: Vec<Vec<u8>> = out
        .iter()
        .filter(|v| v.contains(&b'\n'))
        .flat_map(|v| v.split(|b| *b == b'\n').map(|l| l.trim_ascii().to_vec()))
        .collect();
    out.extend(lines);
    out
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    crate::plan::redaction_key::decode_base64(s)
}

/// Hides secrets in an object: a string under a sensitive key (`password:`,
/// `clientSecret:`), the `value` of a `{name, value}` pair whose name is
/// sensitive (container env), and whatever the text rules find in any other
/// string (a token inside a ConfigMap's script, a JSON annotation).
pub fn redact_value(redactor: &Redactor, v: &mut Value, counts: &mut RedactionCounts) {
    match v {
        Value::Object(map) => {
            let pair_is_sensitive = map
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| sensitive_name(n.as_bytes()))
                && map.get("value").is_some_and(Value::is_string);
            for (k, child) in map.iter_mut() {
                let hide = (k == "value" && pair_is_sensitive)
                    || (child.is_string() && sensitive_name(k.as_bytes()));
                match child {
                    Value::String(s) if hide && !trivial_value(s.as_bytes()) => {
                        *s = redactor.placeholder(OBJECT_FIELD, s.as_bytes());
                        *counts.entry(OBJECT_FIELD).or_default() += 1;
                    }
                    _ => redact_value(redactor, child, counts),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                redact_value(redactor, item, counts);
            }
        }
        Value::String(s) => {
            let out = redactor.redact_str(s, counts);
            if out != *s {
                *s = out;
            }
        }
        _ => {}
    }
}

/// A YAML stream of `objects`, one document each.
pub fn to_yaml_stream(objects: &[Value]) -> String {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        match serde_saphyr::to_string(o) {
            Ok(s) => out.push_str(&s),
            // Not expected for JSON values; keep the object readable anyway.
            Err(_) => out.push_str(&serde_json::to_string_pretty(o).unwrap_or_default()),
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn redactor() -> Redactor {
        Redactor::with_hash_key(&[b"literal-secret-xyz".to_vec()], b"k")
    }

    #[test]
    fn env_pairs_sensitive_keys_and_strings_inside_objects_are_hidden() {
        let r = redactor();
        let mut pod = json!({
            "metadata": {"name": "p", "annotations": {
                "note": "uses glpat-abcdefghijklmnopqrstuvwx",
                "kubectl.kubernetes.io/last-applied-configuration":
                    "{\"env\":[{\"name\":\"DB_PASSWORD\",\"value\":\"inline-pass-1\"}]}"
            }},
            "spec": {"containers": [{"name": "c", "env": [
                {"name": "DB_PASSWORD", "value": "env-pass-1"},
                {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
                {"name": "LOG_LEVEL", "value": "debug"},
                {"name": "GREETING", "value": "hello literal-secret-xyz"}
            ]}]},
            "data": {"password": "cm-pass-1", "secretName": "keep-me"}
        });
        let mut counts = RedactionCounts::new();
        redact_value(&r, &mut pod, &mut counts);
        let text = pod.to_string();
        for s in [
            "env-pass-1",
            "inline-pass-1",
            "glpat-abc",
            "cm-pass-1",
            "literal-secret-xyz",
        ] {
            assert!(!text.contains(s), "{s} survived: {text}");
        }
        for s in ["keep-me", "\"debug\"", "secretKeyRef", "\"token\""] {
            assert!(text.contains(s), "{s} was lost: {text}");
        }
        assert_eq!(counts.get(OBJECT_FIELD), Some(&2), "{counts:?}");
    }

    #[test]
    fn secrets_show_names_and_keys_and_their_values_feed_the_redactor() {
        let s = json!({
            "metadata": {"name": "pool-token"},
            "type": "Opaque",
            "data": {"token": "cG9vbC10b2tlbi12YWx1ZQ==", "ca.crt": "bGluZTEKbGluZTI="},
            "stringData": {"extra": "plain-value"}
        });
        let summary = secret_summary(&s).to_string();
        assert!(summary.contains("\"token\"") && summary.contains("ca.crt"));
        assert!(!summary.contains("cG9v") && !summary.contains("plain-value"));
        let values = secret_values(&s);
        assert!(values.contains(&b"pool-token-value".to_vec()));
        assert!(values.contains(&b"plain-value".to_vec()));
        assert!(values.contains(&b"line2".to_vec()));
    }

    #[test]
    fn nodes_keep_only_conditions_and_capacity() {
        let mut n = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "managedFields": [{}], "annotations": {"a": "b"}},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "images": [{"names": ["x"]}]}
        });
        trim("Node", &mut n);
        assert_eq!(n["status"]["conditions"][0]["type"], "Ready");
        assert!(n["spec"].is_null() && n["status"]["images"].is_null());
        assert!(n["metadata"]["annotations"].is_null() && n["metadata"]["managedFields"].is_null());
    }
}
