//! What kube-apiserver does to a custom resource with its CRD's structural
//! schema before storing it: prune unknown fields, drop nulls that are not
//! nullable, apply defaults, validate (types, enums, bounds, lengths, required,
//! patterns) and evaluate `x-kubernetes-validations` rules.
//!
//! CEL: only rules of the form `self.a OP self.b` or `self.a OP <literal>`
//! (OP one of `== != < <= > >=`), optionally with `has(self.x) ?`-free paths,
//! are evaluated; that covers the rules agentdeck's own CRDs use. Any other
//! rule is accepted without evaluation, which is more lenient than a real
//! server; the sandbox says so here rather than guessing.

use serde_json::{Map, Value};

use super::api::{ApiError, ApiResult, CrdExtras};
use super::registry::ResourceInfo;

/// Prunes, defaults and validates `obj` (a whole custom object) in place.
/// Returns the unknown fields it pruned (`spec.maxReplica`), which the
/// request's `fieldValidation` turns into an error or warnings.
pub fn prepare_custom_object(
    info: &ResourceInfo,
    extras: &CrdExtras,
    name: &str,
    obj: &mut Value,
    _old: Option<&Value>,
) -> ApiResult<Vec<String>> {
    let mut pruned = Vec::new();
    let Some(schema) = &extras.schema else {
        return Ok(pruned);
    };
    if let Some(o) = obj.as_object_mut() {
        let props = schema.get("properties").and_then(Value::as_object);
        let preserve =
            schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        let keys: Vec<String> = o.keys().cloned().collect();
        for k in keys {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match props.and_then(|p| p.get(&k)) {
                Some(s) => {
                    if let Some(v) = o.get_mut(&k) {
                        if v.is_null() && s.get("nullable") != Some(&Value::Bool(true)) {
                            o.remove(&k);
                            continue;
                        }
                        prune_and_default(v, s, &k, &mut pruned);
                    }
                }
                None if !preserve => {
                    o.remove(&k);
                    pruned.push(k.clone());
                }
                None => {}
            }
        }
        if let Some(props) = props {
            for (k, s) in props {
                if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if !o.contains_key(k)
                    && let Some(d) = s.get("default")
                {
                    let mut d = d.clone();
                    prune_and_default(&mut d, s, k, &mut Vec::new());
                    o.insert(k.clone(), d);
                }
            }
        }
    }
    let mut causes = Vec::new();
    let root_props = schema.get("properties").and_then(Value::as_object);
    if let (Some(o), Some(props)) = (obj.as_object(), root_props) {
        for (k, v) in o {
            if let Some(s) = props.get(k)
                && !matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
            {
                validate(v, s, k, &mut causes);
            }
        }
        if let Some(req) = schema.get("required").and_then(Value::as_array) {
            for r in req.iter().filter_map(Value::as_str) {
                if !o.contains_key(r) {
                    causes.push((r.to_string(), "Required value".to_string()));
                }
            }
        }
    }
    if causes.is_empty() {
        Ok(pruned)
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

fn prune_and_default(v: &mut Value, schema: &Value, path: &str, pruned: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
                && schema.get("properties").is_none()
            {
                return;
            }
            let preserve =
                schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                let child_schema = props.and_then(|p| p.get(&k)).or(additional);
                match child_schema {
                    Some(s) => {
                        let drop_null = o.get(&k).is_some_and(Value::is_null)
                            && s.get("nullable") != Some(&Value::Bool(true));
                        if drop_null {
                            o.remove(&k);
                        } else if let Some(child) = o.get_mut(&k) {
                            prune_and_default(child, s, &format!("{path}.{k}"), pruned);
                        }
                    }
                    None if preserve
                        || schema.get("additionalProperties") == Some(&Value::Bool(true)) => {}
                    None => {
                        o.remove(&k);
                        pruned.push(format!("{path}.{k}"));
                    }
                }
            }
            if let Some(props) = props {
                apply_defaults(o, props);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, it) in items.iter_mut().enumerate() {
                    prune_and_default(it, item_schema, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

fn apply_defaults(o: &mut Map<String, Value>, props: &Map<String, Value>) {
    for (k, s) in props {
        if !o.contains_key(k)
            && let Some(d) = s.get("default")
        {
            let mut d = d.clone();
            prune_and_default(&mut d, s, k, &mut Vec::new());
            o.insert(k.clone(), d);
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Checks `v` against the structural `schema` at `path`, adding what fails
/// to `causes` as the apiserver's OpenAPI validator words it.
fn validate(v: &Value, schema: &Value, path: &str, causes: &mut Vec<(String, String)>) {
    if v.is_null() {
        return;
    }
    if !validate_type(v, schema, path, causes) {
        return;
    }
    validate_enum(v, schema, path, causes);
    validate_number(v, schema, path, causes);
    validate_string(v, schema, path, causes);
    validate_children(v, schema, path, causes);
    validate_rules(v, schema, path, causes);
}

/// Whether `v` is of the schema's `type` (an int-or-string takes either);
/// a cause is added when it is not.
fn validate_type(
    v: &Value,
    schema: &Value,
    path: &str,
    causes: &mut Vec<(String, String)>,
) -> bool {
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(v);
        let ok = int_or_string && matches!(actual, "integer" | "string")
            || actual == t
            || (t == "number" && actual == "integer");
        if !ok {
            causes.push((
                path.to_string(),
                format!(
                    "Invalid value: {}: {path} in body must be of type {t}: \"{actual}\"",
                    show(v)
                ),
            ));
            return false;
        }
    }
    true
}

/// The schema's `enum`.
fn validate_enum(v: &Value, schema: &Value, path: &str, causes: &mut Vec<(String, String)>) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(show).collect();
        causes.push((
            path.to_string(),
            format!(
                "Unsupported value: {}: supported values: {}",
                show(v),
                list.join(", ")
            ),
        ));
    }
}

/// A number's `minimum` and `maximum`.
fn validate_number(v: &Value, schema: &Value, path: &str, causes: &mut Vec<(String, String)>) {
    let Some(n) = v.as_f64() else {
        return;
    };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && n < min
    {
        causes.push((
            path.to_string(),
            format!(
                "Invalid value: {v}: {path} in body should be greater than or equal to {}",
                num(min)
            ),
        ));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && n > max
    {
        causes.push((
            path.to_string(),
            format!(
                "Invalid value: {v}: {path} in body should be less than or equal to {}",
                num(max)
            ),
        ));
    }
}

/// A string's `minLength`, `maxLength` and `pattern`.
fn validate_string(v: &Value, schema: &Value, path: &str, causes: &mut Vec<(String, String)>) {
    let Some(s) = v.as_str() else {
        return;
    };
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        causes.push((
            path.to_string(),
            format!("Invalid value: \"{s}\": {path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        causes.push((
            path.to_string(),
            format!("Too long: may not be more than {max} bytes"),
        ));
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str)
        && let Ok(re) = regex::Regex::new(p)
        && !re.is_match(s)
    {
        causes.push((
            path.to_string(),
            format!("Invalid value: \"{s}\": {path} in body should match '{p}'"),
        ));
    }
}

/// An object's properties (and `required`) and an array's items, each
/// against its own schema.
fn validate_children(v: &Value, schema: &Value, path: &str, causes: &mut Vec<(String, String)>) {
    match v {
        Value::Object(o) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in o {
                if let Some(s) = props.and_then(|p| p.get(k)).or(additional) {
                    validate(child, s, &format!("{path}.{k}"), causes);
                }
            }
            if let Some(req) = schema.get("required").and_then(Value::as_array) {
                for r in req.iter().filter_map(Value::as_str) {
                    if !o.contains_key(r) {
                        causes.push((format!("{path}.{r}"), "Required value".to_string()));
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, it) in items.iter().enumerate() {
                    validate(it, s, &format!("{path}[{i}]"), causes);
                }
            }
        }
        _ => {}
    }
}

/// The schema's `x-kubernetes-validations` rules.
fn validate_rules(v: &Value, schema: &Value, path: &str, causes: &mut Vec<(String, String)>) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for r in rules {
            let rule = r.get("rule").and_then(Value::as_str).unwrap_or_default();
            if eval_rule(rule, v) == Some(false) {
                let msg = r
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("failed rule: {rule}"));
                causes.push((
                    path.to_string(),
                    format!("Invalid value: {}: {msg}", show(v)),
                ));
            }
        }
    }
}

fn num(f: f64) -> String {
    if f.fract() == 0.0 {
        format!("{}", f as i64)
    } else {
        f.to_string()
    }
}

/// Evaluates `self.a OP self.b` / `self.a OP literal`; None when the rule is
/// outside that subset (or refers to absent fields).
fn eval_rule(rule: &str, this: &Value) -> Option<bool> {
    const OPS: [&str; 6] = ["<=", ">=", "==", "!=", "<", ">"];
    let (op, l, r) = OPS
        .iter()
        .find_map(|op| rule.split_once(op).map(|(l, r)| (*op, l.trim(), r.trim())))?;
    let operand = |s: &str| -> Option<Value> {
        if let Some(path) = s.strip_prefix("self.") {
            let mut cur = this;
            for part in path.split('.') {
                if !part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return None;
                }
                cur = cur.get(part)?;
            }
            Some(cur.clone())
        } else {
            serde_json::from_str(s).ok()
        }
    };
    let (a, b) = (operand(l)?, operand(r)?);
    Some(match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => match op {
            "<=" => x <= y,
            ">=" => x >= y,
            "<" => x < y,
            ">" => x > y,
            "==" => x == y,
            _ => x != y,
        },
        _ => match op {
            "==" => a == b,
            "!=" => a != b,
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info() -> ResourceInfo {
        ResourceInfo {
            group: "agentdeck.dev".into(),
            version: "v1alpha1".into(),
            kind: "AgentPool".into(),
            plural: "agentpools".into(),
            singular: "agentpool".into(),
            namespaced: true,
            verbs: vec![],
            short_names: vec![],
            categories: vec![],
            subresources: vec![],
        }
    }

    fn extras() -> CrdExtras {
        let crd = serde_json::to_value(<crate::crd::AgentPool as kube::CustomResourceExt>::crd())
            .expect("crd");
        CrdExtras {
            schema: crd
                .pointer("/spec/versions/0/schema/openAPIV3Schema")
                .cloned(),
            ..Default::default()
        }
    }

    #[test]
    fn unknown_fields_are_pruned_and_defaults_applied() {
        let mut obj = json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool", "metadata": {"name": "p"},
                             "spec": {"image": "x", "bogus": 1}, "extra": true});
        let pruned = prepare_custom_object(&info(), &extras(), "p", &mut obj, None).expect("valid");
        assert_eq!(pruned, ["extra", "spec.bogus"]);
        assert!(obj.get("extra").is_none());
        assert!(obj["spec"].get("bogus").is_none());
        assert_eq!(obj["spec"]["maxReplicas"], 1);
        assert_eq!(obj["spec"]["healthPort"], 8080);
        assert_eq!(obj["spec"]["cooldownSeconds"]["down"], 300);
    }

    #[test]
    fn the_cel_rule_min_le_max_is_enforced() {
        let mut obj = json!({"metadata": {"name": "p"}, "spec": {"image": "x", "minReplicas": 5, "maxReplicas": 2}});
        let e =
            prepare_custom_object(&info(), &extras(), "p", &mut obj, None).expect_err("invalid");
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .contains("minReplicas must be less than or equal to maxReplicas"),
            "{}",
            e.message
        );
    }

    #[test]
    fn types_enums_bounds_and_patterns_are_checked() {
        let mut obj = json!({"metadata": {"name": "p"}, "spec": {"image": "x", "maxReplicas": "ten",
            "executionMode": "daemonset", "healthPort": 0,
            "freezeSchedules": [{"from": "25:00", "to": "02:00"}]}});
        let e =
            prepare_custom_object(&info(), &extras(), "p", &mut obj, None).expect_err("invalid");
        for want in [
            "spec.maxReplicas",
            "spec.executionMode: Unsupported value: \"daemonset\"",
            "spec.healthPort",
            "spec.freezeSchedules[0].from",
        ] {
            assert!(e.message.contains(want), "{want} not in {}", e.message);
        }
    }

    #[test]
    fn a_missing_required_field_is_reported() {
        let mut obj = json!({"metadata": {"name": "p"}, "spec": {}});
        let e =
            prepare_custom_object(&info(), &extras(), "p", &mut obj, None).expect_err("invalid");
        assert!(
            e.message.contains("spec.image: Required value"),
            "{}",
            e.message
        );
    }

    #[test]
    fn rules_outside_the_subset_are_not_judged() {
        assert_eq!(eval_rule("self.all(x, x > 0)", &json!({})), None);
        assert_eq!(
            eval_rule("self.a <= self.b", &json!({"a": 1, "b": 2})),
            Some(true)
        );
        assert_eq!(eval_rule("self.a == 'x'", &json!({"a": "x"})), None);
        assert_eq!(eval_rule("self.a == \"x\"", &json!({"a": "x"})), Some(true));
    }
}
