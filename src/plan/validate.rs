//! Validation of AgentPool and AgentTask objects beyond what the CRD schema
//! can say, with errors that name the field, the bad value and what is valid.
//!
//! The same checks run in three places: the CLI on files (`agentdeck manifests
//! --pools`), the controller before it acts on an object (an `Invalid`
//! condition with the same message), and tests. Documents read from files are
//! also checked for unknown fields against the CRD's own schema, the way
//! `kubectl apply --validate=strict` would. The schedules are read as the
//! planners read them ([`super::freeze`], [`super::capacity`]), so a
//! schedule that validates is one they can follow.

use std::fmt;

use k8s_openapi::api::core::v1::{EnvVar, PodTemplateSpec, ResourceRequirements};
use kube::{CustomResourceExt, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{capacity, freeze};
use crate::crd::names::{is_dns1123_label, is_dns1123_subdomain};
use crate::crd::{AgentPool, AgentPoolSpec, AgentTask, TaskDefaults, TaskHistory};

/// One thing wrong with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path from the object root, e.g. `spec.freezeSchedules[0].from`.
    pub field: String,
    /// The offending value as written (empty when the field is missing).
    pub value: String,
    /// What would be valid.
    pub expected: String,
}

impl FieldError {
    fn new(
        field: impl Into<String>,
        value: impl fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        FieldError {
            field: field.into(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}: {}", self.field, self.expected)
        } else {
            write!(
                f,
                "{}: {} is not valid; expected {}",
                self.field, self.value, self.expected
            )
        }
    }
}

/// Joins errors into the one-line message used in conditions and Events.
pub fn summary(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Everything wrong with a pool; empty when it is valid.
pub fn validate_pool(pool: &AgentPool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let s = &pool.spec;
    check_object_name(&pool.name_any(), "pool", &mut errs);
    if s.image.trim().is_empty() {
        errs.push(FieldError::new(
            "spec.image",
            "\"\"",
            "a container image reference such as ghcr.io/acme/agentdeck:1.0",
        ));
    }
    check_scaling(s, &mut errs);
    check_agent_pod(s, &mut errs);
    check_schedules(s, &mut errs);
    if let Some(ca) = &s.ca_bundle
        && !is_dns1123_subdomain(&ca.config_map_name)
    {
        errs.push(FieldError::new(
            "spec.caBundle.configMapName",
            format!("{:?}", ca.config_map_name),
            DNS_SUBDOMAIN,
        ));
    }
    check_task_defaults(&s.task_defaults, &mut errs);
    check_task_history(&s.task_history, &mut errs);
    errs
}

/// The bounds, steps and timings of scaling and draining.
fn check_scaling(s: &AgentPoolSpec, errs: &mut Vec<FieldError>) {
    range(errs, "spec.minReplicas", s.min_replicas.into(), 0, 10_000);
    range(errs, "spec.maxReplicas", s.max_replicas.into(), 0, 10_000);
    if s.min_replicas > s.max_replicas {
        errs.push(FieldError::new(
            "spec.minReplicas",
            s.min_replicas,
            format!(
                "a value less than or equal to spec.maxReplicas ({})",
                s.max_replicas
            ),
        ));
    }
    if let Some(step) = s.scale_up_step {
        range(errs, "spec.scaleUpStep", step.into(), 1, 10_000);
    }
    range(errs, "spec.concurrency", s.concurrency.into(), 1, 64);
    if let Some(n) = s.max_in_flight {
        range(errs, "spec.maxInFlight", n.into(), 1, 10_000);
    }
    range(
        errs,
        "spec.cooldownSeconds.up",
        s.cooldown_seconds.up,
        0,
        86_400,
    );
    range(
        errs,
        "spec.cooldownSeconds.down",
        s.cooldown_seconds.down,
        0,
        86_400,
    );
    range(
        errs,
        "spec.scaleDownStabilizationSeconds",
        s.scale_down_stabilization_seconds,
        0,
        3_600,
    );
    range(errs, "spec.healthPort", s.health_port.into(), 1, 65_535);
    range(
        errs,
        "spec.drainTimeoutSeconds",
        s.drain_timeout_seconds,
        0,
        86_400,
    );
    range(
        errs,
        "spec.graceShutdownSeconds",
        s.grace_shutdown_seconds,
        0,
        3_600,
    );
}

/// What the agent pods are made of: resources, identity, environment,
/// the platform's token and endpoint, the pod template.
fn check_agent_pod(s: &AgentPoolSpec, errs: &mut Vec<FieldError>) {
    if let Some(r) = &s.resources {
        check_resources("spec.resources", r, errs);
    }
    if let Some(sa) = &s.service_account_name
        && !is_dns1123_subdomain(sa)
    {
        errs.push(FieldError::new(
            "spec.serviceAccountName",
            format!("{sa:?}"),
            DNS_SUBDOMAIN,
        ));
    }
    check_env("spec.env", &s.env, errs);
    if let Some(t) = &s.token_secret_ref {
        if !is_dns1123_subdomain(&t.name) {
            errs.push(FieldError::new(
                "spec.tokenSecretRef.name",
                format!("{:?}", t.name),
                DNS_SUBDOMAIN,
            ));
        }
        if t.key.is_empty() {
            errs.push(FieldError::new(
                "spec.tokenSecretRef.key",
                "\"\"",
                "the key within the Secret that holds the token",
            ));
        }
    }
    if let Some(url) = &s.api_endpoint
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        errs.push(FieldError::new(
            "spec.apiEndpoint",
            format!("{url:?}"),
            "an http:// or https:// URL",
        ));
    }
    for (i, name) in s.env_forward_allowlist.iter().enumerate() {
        if !is_env_name(name) {
            errs.push(FieldError::new(
                format!("spec.envForwardAllowlist[{i}]"),
                format!("{name:?}"),
                ENV_NAME,
            ));
        }
    }
    if let Some(t) = &s.pod_template {
        check_pod_template(t, errs);
    }
}

/// The freeze and capacity windows, read as the planners read them.
fn check_schedules(s: &AgentPoolSpec, errs: &mut Vec<FieldError>) {
    if let Err(fe) = freeze::parse_all(&s.freeze_schedules, &jiff::tz::TimeZone::UTC) {
        errs.extend(fe.into_iter().map(|e| FieldError {
            field: e.field().to_string(),
            value: e.value().to_string(),
            expected: e.expected().to_string(),
        }));
    }
    if let Err(ce) = capacity::parse_all(
        &s.capacity_schedules,
        s.max_replicas,
        &jiff::tz::TimeZone::UTC,
    ) {
        errs.extend(ce.into_iter().map(|e| FieldError {
            field: e.field,
            value: e.value,
            expected: e.expected,
        }));
    }
}

/// What a task gets unless it says otherwise.
fn check_task_defaults(td: &TaskDefaults, errs: &mut Vec<FieldError>) {
    range(
        errs,
        "spec.taskDefaults.schedulingTimeoutSeconds",
        td.scheduling_timeout_seconds,
        1,
        86_400,
    );
    range(
        errs,
        "spec.taskDefaults.acquireTimeoutSeconds",
        td.acquire_timeout_seconds,
        1,
        86_400,
    );
    range(
        errs,
        "spec.taskDefaults.ttlSecondsAfterFinished",
        td.ttl_seconds_after_finished.into(),
        0,
        604_800,
    );
    range(
        errs,
        "spec.taskDefaults.maxAttempts",
        td.max_attempts.into(),
        1,
        100,
    );
    if let Some(r) = &td.resources {
        check_resources("spec.taskDefaults.resources", r, errs);
    }
}

/// How long finished tasks are kept, and how many.
fn check_task_history(th: &TaskHistory, errs: &mut Vec<FieldError>) {
    range(
        errs,
        "spec.taskHistory.ttlSecondsAfterFinished",
        th.ttl_seconds_after_finished,
        0,
        31_536_000,
    );
    range(
        errs,
        "spec.taskHistory.succeededLimit",
        th.succeeded_limit.into(),
        0,
        100_000,
    );
    range(
        errs,
        "spec.taskHistory.failedLimit",
        th.failed_limit.into(),
        0,
        100_000,
    );
}

/// Everything wrong with a task; empty when it is valid.
pub fn validate_task(task: &AgentTask) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let s = &task.spec;
    check_object_name(&task.name_any(), "task", &mut errs);
    if !is_dns1123_label(&s.pool) {
        errs.push(FieldError::new(
            "spec.pool",
            format!("{:?}", s.pool),
            "the name of an AgentPool in the same namespace",
        ));
    }
    if s.command.is_empty() && s.operation.as_deref().is_none_or(str::is_empty) {
        errs.push(FieldError::new(
            "spec.command",
            "",
            "a command (or a named spec.operation) to run; the task has neither",
        ));
    }
    if let Some(t) = s.timeout_seconds {
        range(&mut errs, "spec.timeoutSeconds", t, 1, 604_800);
    }
    check_env("spec.env", &s.env, &mut errs);
    errs
}

/// Parses one YAML/JSON document as an AgentPool: unknown fields, wrong types
/// and semantic mistakes all come back as field errors; nothing is defaulted
/// silently past a mistake.
pub fn parse_pool(doc: &Value) -> Result<AgentPool, Vec<FieldError>> {
    let pool: AgentPool = parse_checked(doc, &AgentPool::crd())?;
    let errs = validate_pool(&pool);
    if errs.is_empty() { Ok(pool) } else { Err(errs) }
}

/// As [`parse_pool`], for an AgentTask.
pub fn parse_task(doc: &Value) -> Result<AgentTask, Vec<FieldError>> {
    let task: AgentTask = parse_checked(doc, &AgentTask::crd())?;
    let errs = validate_task(&task);
    if errs.is_empty() { Ok(task) } else { Err(errs) }
}

fn parse_checked<T: DeserializeOwned>(
    doc: &Value,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Result<T, Vec<FieldError>> {
    let mut errs = Vec::new();
    let schema = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref());
    if let Some(schema) = schema {
        let schema = serde_json::to_value(schema).unwrap_or(Value::Null);
        unknown_fields(doc, &schema, "", &mut errs);
    }
    let want = format!(
        "{}/{}",
        crd.spec.group,
        crd.spec
            .versions
            .first()
            .map(|v| v.name.as_str())
            .unwrap_or_default()
    );
    match doc.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v == want => {}
        other => errs.push(FieldError::new(
            "apiVersion",
            format!("{:?}", other.unwrap_or_default()),
            format!("{want:?}"),
        )),
    }
    match doc.get("kind").and_then(Value::as_str) {
        Some(k) if k == crd.spec.names.kind => {}
        other => errs.push(FieldError::new(
            "kind",
            format!("{:?}", other.unwrap_or_default()),
            format!("{:?}", crd.spec.names.kind),
        )),
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    serde_path_to_error::deserialize::<_, T>(doc.clone()).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let segments = path_segments(&path);
        // A wrong type or an out-of-range number: say what the schema
        // accepts there rather than serde's "expected i32".
        let described = schema
            .and_then(|s| serde_json::to_value(s).ok())
            .and_then(|s| schema_at(&s, &segments).and_then(describe_schema))
            .zip(value_at(doc, &segments));
        match described {
            Some((expected, value)) => vec![FieldError::new(path, value, expected)],
            None => vec![FieldError::new(path, "", e.into_inner().to_string())],
        }
    })
}

/// `spec.env[0].name` → `spec`, `env`, `[0]`, `name`.
fn path_segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        match part.split_once('[') {
            Some((key, rest)) => {
                if !key.is_empty() {
                    out.push(key.to_owned());
                }
                for index in rest.split('[') {
                    out.push(format!("[{}", index));
                }
            }
            None => out.push(part.to_owned()),
        }
    }
    out
}

fn schema_at<'a>(schema: &'a Value, segments: &[String]) -> Option<&'a Value> {
    let mut node = schema;
    for segment in segments {
        node = if segment.starts_with('[') {
            node.get("items")?
        } else {
            node.get("properties")
                .and_then(|p| p.get(segment))
                .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))?
        };
    }
    Some(node)
}

fn value_at(doc: &Value, segments: &[String]) -> Option<String> {
    let mut node = doc;
    for segment in segments {
        node = match segment.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            Some(index) => node.get(index.parse::<usize>().ok()?)?,
            None => node.get(segment)?,
        };
    }
    Some(node.to_string())
}

/// What a scalar schema accepts, in the words [`range`] uses.
fn describe_schema(schema: &Value) -> Option<String> {
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64).map(|f| f as i64);
    let choices = schema.get("enum").and_then(Value::as_array);
    match schema.get("type").and_then(Value::as_str)? {
        _ if choices.is_some() => Some(format!(
            "one of {}",
            choices?
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        "integer" => Some(match (bound("minimum"), bound("maximum")) {
            (Some(lo), Some(hi)) => format!("an integer from {lo} to {hi}"),
            (Some(lo), None) => format!("an integer, {lo} or more"),
            _ => "an integer".to_owned(),
        }),
        "boolean" => Some("true or false".to_owned()),
        "number" => Some("a number".to_owned()),
        "string" => Some("a string".to_owned()),
        _ => None,
    }
}

/// Reports every key of `doc` that the structural schema does not declare
/// (unless the schema preserves unknown fields there).
fn unknown_fields(doc: &Value, schema: &Value, path: &str, errs: &mut Vec<FieldError>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match doc {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, v) in map {
                // Every object has these; CRD schemas leave them implicit.
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let child = join(path, k);
                match props.and_then(|p| p.get(k)) {
                    Some(s) => unknown_fields(v, s, &child, errs),
                    None => match additional {
                        Some(a) if a.is_object() => unknown_fields(v, a, &child, errs),
                        Some(Value::Bool(true)) => {}
                        _ => {
                            let mut valid: Vec<&str> = props
                                .map(|p| p.keys().map(String::as_str).collect())
                                .unwrap_or_default();
                            valid.sort_unstable();
                            errs.push(FieldError::new(
                                child,
                                "",
                                if valid.is_empty() {
                                    "unknown field; no fields are allowed here".to_string()
                                } else {
                                    format!(
                                        "unknown field; valid fields here are {}",
                                        valid.join(", ")
                                    )
                                },
                            ));
                        }
                    },
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    unknown_fields(v, item_schema, &format!("{path}[{i}]"), errs);
                }
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

const DNS_SUBDOMAIN: &str = "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters";
const ENV_NAME: &str =
    "an environment variable name: letters, digits and '_', not starting with a digit";

fn check_object_name(name: &str, what: &str, errs: &mut Vec<FieldError>) {
    if name.is_empty() {
        errs.push(FieldError::new(
            "metadata.name",
            "",
            format!("a {what} name"),
        ));
    } else if !is_dns1123_label(name) {
        errs.push(FieldError::new(
            "metadata.name",
            format!("{name:?}"),
            format!(
                "a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters (the {what} name is used as a label value){}",
                if name.len() > 63 { format!("; this one has {}", name.len()) } else { String::new() }
            ),
        ));
    }
}

fn range(errs: &mut Vec<FieldError>, field: &str, v: i64, lo: i64, hi: i64) {
    if v < lo || v > hi {
        errs.push(FieldError::new(
            field,
            v,
            format!("an integer from {lo} to {hi}"),
        ));
    }
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
}

/// What is wrong with the names of `env` (at `path`, e.g. `spec.env`).
pub fn env_errors(path: &str, env: &[EnvVar]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    check_env(path, env, &mut errs);
    errs
}

fn check_env(path: &str, env: &[EnvVar], errs: &mut Vec<FieldError>) {
    for (i, e) in env.iter().enumerate() {
        if !is_env_name(&e.name) {
            errs.push(FieldError::new(
                format!("{path}[{i}].name"),
                format!("{:?}", e.name),
                ENV_NAME,
            ));
        }
    }
}

fn check_resources(path: &str, r: &ResourceRequirements, errs: &mut Vec<FieldError>) {
    let mut parsed = std::collections::BTreeMap::new();
    for (kind, map) in [("requests", &r.requests), ("limits", &r.limits)] {
        for (res, q) in map.iter().flatten() {
            match parse_quantity(&q.0) {
                Some(v) => {
                    parsed.insert((kind, res.clone()), v);
                }
                None => errs.push(FieldError::new(
                    format!("{path}.{kind}.{res}"),
                    format!("{:?}", q.0),
                    "a quantity such as 500m, 2, 1.5, 256Mi, 1Gi or 1e3",
                )),
            }
        }
    }
    for ((kind, res), req) in &parsed {
        if *kind == "requests"
            && let Some(lim) = parsed.get(&("limits", res.clone()))
            && req > lim
        {
            errs.push(FieldError::new(
                format!("{path}.requests.{res}"),
                format!("{req}"),
                format!("at most the limit ({lim})"),
            ));
        }
    }
}

/// Parses a Kubernetes resource quantity (`<signed number><suffix>`, suffix one
/// of the binary-SI `Ki Mi Gi Ti Pi Ei`, decimal-SI `n u m k M G T P E` or an
/// exponent `e<n>`/`E<n>`) to its value. Grammar from apimachinery's
/// resource.Quantity. `None` when it does not parse.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || (*i == 0 && (*c == '+' || *c == '-'))))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let digits = num.trim_start_matches(['+', '-']);
    if digits.is_empty() || digits == "." || digits.matches('.').count() > 1 {
        return None;
    }
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let e = &exp[1..];
            let ed = e.trim_start_matches(['+', '-']);
            if ed.is_empty() || !ed.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            10f64.powi(e.parse::<i32>().ok()?)
        }
        _ => return None,
    };
    Some(n * mult)
}

fn check_pod_template(t: &Value, errs: &mut Vec<FieldError>) {
    if !t.is_object() {
        errs.push(FieldError::new(
            "spec.podTemplate",
            short_json(t),
            "a (partial) pod template object with metadata and/or spec",
        ));
        return;
    }
    if let Err(e) = serde_path_to_error::deserialize::<_, PodTemplateSpec>(t.clone()) {
        let path = e.path().to_string();
        errs.push(FieldError::new(
            if path == "." {
                "spec.podTemplate".to_string()
            } else {
                format!("spec.podTemplate.{path}")
            },
            "",
            format!("a valid pod template field: {}", e.into_inner()),
        ));
    }
}

fn short_json(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(spec: Value) -> Value {
        json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool", "metadata": {"name": "p"}, "spec": spec})
    }

    fn fields(errs: &[FieldError]) -> Vec<&str> {
        errs.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn wrong_types_and_huge_numbers_name_the_valid_range() {
        let cases = [
            (
                json!({"image": "x", "maxReplicas": 99_999_999_999_i64}),
                "spec.maxReplicas: 99999999999 is not valid; expected an integer from 0 to 10000",
            ),
            (
                json!({"image": "x", "minReplicas": "two"}),
                "spec.minReplicas: \"two\" is not valid; expected an integer from 0 to 10000",
            ),
            (
                json!({"image": "x", "debug": "yes"}),
                "spec.debug: \"yes\" is not valid; expected true or false",
            ),
            (
                json!({"image": "x", "executionMode": 3}),
                "spec.executionMode: 3 is not valid; expected one of deployment, job",
            ),
        ];
        for (spec, want) in cases {
            let errs = parse_pool(&pool(spec.clone())).expect_err("invalid");
            assert_eq!(summary(&errs), want, "{spec}");
        }
    }

    #[test]
    fn task_env_names_are_checked_like_pool_env_names() {
        let task = |env: Value| {
            json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                   "metadata": {"name": "t"},
                   "spec": {"pool": "p", "command": ["true"], "env": env}})
        };
        for (name, ok) in [
            ("A", true),
            ("_A1", true),
            ("A=B", false),
            ("1A", false),
            ("", false),
            ("A B", false),
            ("A\u{1b}[2J", false),
        ] {
            let result = parse_task(&task(json!([{"name": name, "value": "x"}])));
            assert_eq!(result.is_ok(), ok, "{name:?}: {result:?}");
            if let Err(errs) = result {
                assert_eq!(errs[0].field, "spec.env[0].name");
                assert!(errs[0].expected.contains("environment variable name"));
            }
        }
    }

    #[test]
    fn a_minimal_pool_is_valid_and_defaulted() {
        let p = parse_pool(&pool(json!({"image": "agentdeck:dev"}))).expect("valid");
        assert_eq!(p.spec.max_replicas, 1);
        assert_eq!(p.spec.health_port, 8080);
        assert_eq!(p.spec.cooldown_seconds.down, 300);
        assert_eq!(p.spec.scale_down_stabilization_seconds, 300);
    }

    #[test]
    fn quantities_follow_the_kubernetes_grammar() {
        for (q, v) in [
            ("1", 1.0),
            ("500m", 0.5),
            ("1.5", 1.5),
            ("256Mi", 268_435_456.0),
            ("1Gi", 1_073_741_824.0),
            ("2k", 2000.0),
            ("1e3", 1000.0),
            ("1E-3", 0.001),
            (".5", 0.5),
            ("+2", 2.0),
            ("100n", 1e-7),
        ] {
            let got = parse_quantity(q).unwrap_or_else(|| panic!("{q} parses"));
            assert!(
                (got - v).abs() < 1e-9 * v.abs().max(1.0),
                "{q}: {got} != {v}"
            );
        }
        for bad in [
            "", "m", "12 gigs", "1.2.3", "1GB", "1ki", "e3", "1e", "1e+", "Mi", ".",
        ] {
            assert!(parse_quantity(bad).is_none(), "{bad:?} must not parse");
        }
    }

    #[test]
    fn requests_above_limits_are_rejected() {
        let errs = parse_pool(&pool(json!({"image": "x", "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}})))
            .expect_err("invalid");
        assert_eq!(fields(&errs), ["spec.resources.requests.memory"]);
    }

    #[test]
    fn every_mistake_is_reported_at_once() {
        let errs = parse_pool(&pool(json!({
            "image": "",
            "minReplicas": 3,
            "maxReplicas": 1,
            "healthPort": 70000,
            "envForwardAllowlist": ["OK", "1BAD"],
            "apiEndpoint": "ftp://x",
        })))
        .expect_err("invalid");
        let f = fields(&errs);
        for want in [
            "spec.image",
            "spec.minReplicas",
            "spec.healthPort",
            "spec.envForwardAllowlist[1]",
            "spec.apiEndpoint",
        ] {
            assert!(f.contains(&want), "{want} missing from {f:?}");
        }
    }

    #[test]
    fn the_stabilization_window_is_bounded_like_the_hpas() {
        for (window, ok) in [
            (0, true),
            (300, true),
            (3600, true),
            (3601, false),
            (-1, false),
        ] {
            let result = parse_pool(&pool(
                json!({"image": "x", "scaleDownStabilizationSeconds": window}),
            ));
            assert_eq!(result.is_ok(), ok, "{window}: {result:?}");
            if let Err(errs) = result {
                assert_eq!(
                    summary(&errs),
                    format!(
                        "spec.scaleDownStabilizationSeconds: {window} is not valid; expected an integer from 0 to 3600"
                    )
                );
            }
        }
    }

    #[test]
    fn a_wrong_type_names_its_path() {
        let errs =
            parse_pool(&pool(json!({"image": "x", "maxReplicas": "ten"}))).expect_err("invalid");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.maxReplicas");
    }

    #[test]
    fn a_pod_template_that_is_not_a_pod_template_is_rejected() {
        let errs = parse_pool(&pool(
            json!({"image": "x", "podTemplate": {"spec": {"containers": "sidecar"}}}),
        ))
        .expect_err("invalid");
        assert!(errs[0].field.starts_with("spec.podTemplate"), "{errs:?}");
        let errs =
            parse_pool(&pool(json!({"image": "x", "podTemplate": []}))).expect_err("invalid");
        assert!(errs[0].field.starts_with("spec.podTemplate"), "{errs:?}");
    }

    #[test]
    fn unknown_fields_inside_the_pod_template_are_left_to_kubernetes() {
        // The pod template is preserved as written; Kubernetes itself judges it.
        parse_pool(&pool(
            json!({"image": "x", "podTemplate": {"metadata": {"annotations": {"a": "b"}}}}),
        ))
        .expect("valid");
    }

    #[test]
    fn a_wrong_kind_or_api_version_is_rejected() {
        let mut doc = pool(json!({"image": "x"}));
        doc["kind"] = json!("AgentTask");
        doc["apiVersion"] = json!("agentdeck.dev/v1");
        assert_eq!(
            fields(&parse_pool(&doc).expect_err("invalid")),
            ["apiVersion", "kind"]
        );
    }

    #[test]
    fn a_task_needs_a_pool_and_something_to_run() {
        let doc = json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask", "metadata": {"name": "t"},
                         "spec": {"pool": "Bad_Pool", "timeoutSeconds": 0}});
        let errs = parse_task(&doc).expect_err("invalid");
        assert_eq!(
            fields(&errs),
            ["spec.pool", "spec.command", "spec.timeoutSeconds"]
        );
        let ok = json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask", "metadata": {"name": "t"},
                        "spec": {"pool": "p", "command": ["tofu", "plan"]}});
        parse_task(&ok).expect("valid");
    }

    #[test]
    fn the_error_line_names_field_value_and_what_is_valid() {
        let e = FieldError::new("spec.healthPort", 70000, "an integer from 1 to 65535");
        assert_eq!(
            e.to_string(),
            "spec.healthPort: 70000 is not valid; expected an integer from 1 to 65535"
        );
        assert_eq!(summary(&[e.clone(), e]).matches("; expected").count(), 2);
    }
}
