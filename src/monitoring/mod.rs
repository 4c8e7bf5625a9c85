//! What `agentdeck monitoring` prints and `agentdeck manifests --monitoring`
//! installs: the alert rules ([`rules`]) and the Grafana dashboard
//! ([`dashboard`]) over the metrics the daemon exports
//! (`controller::metrics`), rendered by the same binary so that names,
//! rules and panels cannot drift apart. Each alert's `runbook_url` points
//! to its section of `assets/RUNBOOK.md`.
//!
//! Pure: configuration in, documents (as JSON values) out.

mod dashboard;
mod rules;

pub use dashboard::{DASHBOARD_UID, dashboard};
pub use rules::{ALERTS, Alert, rules};

use serde_json::{Value, json};

use crate::config::MonitoringConfig;

/// Name of the rendered PrometheusRule, ServiceMonitor and dashboard ConfigMap.
pub const NAME: &str = "agentdeck-controller";

/// A duration as Prometheus writes one: `5m`, `2h`, `90s`.
pub fn prom_duration(seconds: u64) -> String {
    match seconds {
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The GitHub anchor of a Markdown heading: lower-cased, spaces to `-`,
/// everything but letters, digits, `-` and `_` left out.
pub fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn metadata(namespace: &str, labels: &Value, extra: Value) -> Value {
    let mut all = labels.clone();
    if let (Some(all), Value::Object(extra)) = (all.as_object_mut(), extra) {
        all.extend(extra);
    }
    json!({"name": NAME, "namespace": namespace, "labels": all})
}

/// The rules as a prometheus-operator `PrometheusRule` in `namespace`,
/// labelled with `labels` plus `monitoring.ruleLabels`.
pub fn prometheus_rule(cfg: &MonitoringConfig, namespace: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(namespace, labels, json!(cfg.rule_labels)),
        "spec": rules(cfg),
    })
}

/// A prometheus-operator `ServiceMonitor` for the daemon's Service (port
/// `http`). `honorLabels`: the daemon's own `namespace` and `pool` labels
/// name the pool, and must not be renamed `exported_namespace` for the
/// target's.
pub fn service_monitor(cfg: &MonitoringConfig, namespace: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(namespace, labels, json!(cfg.rule_labels)),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "agentdeck", "app.kubernetes.io/component": "controller"}},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "30s", "honorLabels": true}],
        },
    })
}

/// The dashboard in a ConfigMap the kube-prometheus-stack's Grafana
/// sidecar loads (`grafana_dashboard: "1"`).
pub fn dashboard_config_map(cfg: &MonitoringConfig, namespace: &str, labels: &Value) -> Value {
    let mut extra = json!(cfg.rule_labels);
    extra["grafana_dashboard"] = json!("1");
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(namespace, labels, extra),
        "data": {"agentdeck.json": dashboard().to_string()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_prometheus_writes_them() {
        assert_eq!(prom_duration(300), "5m");
        assert_eq!(prom_duration(7200), "2h");
        assert_eq!(prom_duration(90), "90s");
        assert_eq!(prom_duration(3), "3s");
    }

    #[test]
    fn anchors_are_githubs() {
        assert_eq!(anchor("AgentdeckPoolStuck"), "agentdeckpoolstuck");
        assert_eq!(
            anchor("Escalate: a support bundle"),
            "escalate-a-support-bundle"
        );
    }

    #[test]
    fn the_installed_objects_carry_the_configured_labels() {
        let mut cfg = MonitoringConfig::default();
        cfg.rule_labels
            .insert("release".into(), "kube-prometheus-stack".into());
        let base = json!({"app.kubernetes.io/name": "agentdeck"});
        let rule = prometheus_rule(&cfg, "ops", &base);
        assert_eq!(rule["kind"], "PrometheusRule");
        assert_eq!(rule["metadata"]["namespace"], "ops");
        assert_eq!(
            rule["metadata"]["labels"]["release"],
            "kube-prometheus-stack"
        );
        assert_eq!(
            rule["metadata"]["labels"]["app.kubernetes.io/name"],
            "agentdeck"
        );
        assert!(
            rule["spec"]["groups"]
                .as_array()
                .is_some_and(|g| !g.is_empty())
        );
        let cm = dashboard_config_map(&cfg, "ops", &base);
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
        let text = cm["data"]["agentdeck.json"].as_str().expect("a string");
        let parsed: Value = serde_json::from_str(text).expect("the dashboard is JSON");
        assert_eq!(parsed["uid"], DASHBOARD_UID);
        let sm = service_monitor(&cfg, "ops", &base);
        assert_eq!(sm["spec"]["endpoints"][0]["honorLabels"], true);
    }
}
