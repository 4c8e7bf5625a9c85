//! The alert rules: one Prometheus rule file (`groups:`), each alert with
//! a `severity`, a `summary` and `description` naming the pool and its
//! namespace, and a `runbook_url` to its section of `assets/RUNBOOK.md`.
//!
//! Pool series come from the leading daemon only: a daemon that lost the
//! Lease keeps exporting what it last saw, so pool alerts join on
//! `agentdeck_leader == 1` of the same scrape target.

use serde_json::{Value, json};

use super::{anchor, prom_duration};
use crate::config::MonitoringConfig;

/// One alert: its name (also its runbook section), severity, and what it
/// says.
#[derive(Debug, Clone, Copy)]
pub struct Alert {
    pub name: &'static str,
    pub severity: &'static str,
    pub summary: &'static str,
    pub description: &'static str,
}

/// `expr` kept to what the leading daemon exports, matched by scrape target.
const LEADING: &str = "and on (job, instance) (agentdeck_leader == 1)";

/// Every alert, in the order of the runbook.
pub const ALERTS: [Alert; 8] = [
    Alert {
        name: "AgentdeckPoolStuck",
        severity: "critical",
        summary: "Pool {{ $labels.namespace }}/{{ $labels.pool }} is stuck: tasks wait and no agent can take them",
        description: "The verdict of pool {{ $labels.pool }} in namespace {{ $labels.namespace }} has been Stuck for over {for}: tasks are pending and nothing will run them on its own (maxReplicas 0, held at 0, draining, frozen with no agent ready, or tasks unclaimed past their acquire timeout). `agentdeck status {{ $labels.pool }} -n {{ $labels.namespace }}` says which.",
    },
    Alert {
        name: "AgentdeckQueueWaitHigh",
        severity: "warning",
        summary: "Tasks of pool {{ $labels.namespace }}/{{ $labels.pool }} wait {{ $value | humanizeDuration }} (p95) for an agent",
        description: "The p95 wait from a task's creation to its claim in pool {{ $labels.pool }} (namespace {{ $labels.namespace }}) over the last {window} is {{ $value | humanizeDuration }}, above the pool's spec.slo.queueWaitSeconds (default {target}), for over {for}.",
    },
    Alert {
        name: "AgentdeckAgentsStale",
        severity: "warning",
        summary: "{{ $value }} agent(s) of pool {{ $labels.namespace }}/{{ $labels.pool }} do not report health",
        description: "{{ $value }} agent(s) of pool {{ $labels.pool }} in namespace {{ $labels.namespace }} have been stale or offline on /healthz (no activity within the freshness window, or no answer) for over {for}. Offline agents' tasks are requeued; stale ones may be hung.",
    },
    Alert {
        name: "AgentdeckNoLeader",
        severity: "critical",
        summary: "No agentdeck controller leads{{ with $labels.namespace }} in namespace {{ . }}{{ end }}",
        description: "For over {for} no scraped agentdeck daemon{{ with $labels.namespace }} in namespace {{ . }}{{ end }} has held the leader Lease (or none is scraped at all): no pool is scaled, no task Job created, no lost task recovered.",
    },
    Alert {
        name: "AgentdeckWatchStale",
        severity: "warning",
        summary: "The {{ $labels.kind }} watch of agentdeck {{ $labels.instance }}{{ with $labels.namespace }} in {{ . }}{{ end }} is not current",
        description: "The daemon's watch of {{ $labels.kind }} has not been following changes, or has failed to restart at least {restarts} times in {window}, for over {for}. While any watch is not current the controller decides nothing (pools in every namespace wait).",
    },
    Alert {
        name: "AgentdeckTaskFailuresHigh",
        severity: "warning",
        summary: "{{ $value | printf \"%.0f\" }}% of pool {{ $labels.namespace }}/{{ $labels.pool }}'s tasks fail",
        description: "In the last {window}, {{ $value | printf \"%.0f\" }}% of the tasks that ended in pool {{ $labels.pool }} (namespace {{ $labels.namespace }}) ended Failed or Errored (threshold {percent}%, at least {min} tasks), for over {for}.",
    },
    Alert {
        name: "AgentdeckReconcileErrors",
        severity: "warning",
        summary: "{{ $value | printf \"%.0f\" }}% of agentdeck's pool reconciles fail{{ with $labels.namespace }} in {{ . }}{{ end }}",
        description: "Over the last {window}, {{ $value | printf \"%.0f\" }}% of the pool reconciles of daemon {{ $labels.instance }} failed (threshold {percent}%), for over {for}: pool status, scaling and task recovery fall behind.",
    },
    Alert {
        name: "AgentdeckPoolFrozenQueueGrowing",
        severity: "warning",
        summary: "Pool {{ $labels.namespace }}/{{ $labels.pool }} is frozen and its queue keeps growing",
        description: "Pool {{ $labels.pool }} in namespace {{ $labels.namespace }} is inside a freeze window (its replicas are held) and its pending tasks grew in every {window} for over {for}. When the window ends they all ask for agents at once; or the freeze is wrong.",
    },
];

/// The PromQL of alert `name` under `cfg`, and its `for`.
fn expr(name: &str, cfg: &MonitoringConfig) -> (String, u64) {
    let w = prom_duration(cfg.rate_window_seconds);
    match name {
        "AgentdeckPoolStuck" => (
            format!(
                "max by (namespace, pool) (agentdeck_pool_verdict{{verdict=\"Stuck\"}} == 1 {LEADING})"
            ),
            cfg.stuck_for_seconds,
        ),
        "AgentdeckQueueWaitHigh" => (
            format!(
                "histogram_quantile(0.95, sum by (namespace, pool, le) (rate(agentdeck_task_queue_to_start_seconds_bucket[{w}]))) \
                 > on (namespace, pool) (max by (namespace, pool) (agentdeck_pool_queue_wait_target_seconds) \
                 or on (namespace, pool) (0 * max by (namespace, pool) (agentdeck_pool_verdict) + {}))",
                cfg.queue_wait_seconds
            ),
            cfg.queue_wait_for_seconds,
        ),
        "AgentdeckAgentsStale" => (
            format!(
                "sum by (namespace, pool) (agentdeck_pool_agents_health{{freshness=~\"stale|offline\"}} {LEADING}) > 0"
            ),
            cfg.agents_stale_for_seconds,
        ),
        "AgentdeckNoLeader" => (
            "max by (namespace, job) (agentdeck_leader) < 1 or absent(agentdeck_leader)".to_owned(),
            cfg.no_leader_for_seconds,
        ),
        "AgentdeckWatchStale" => (
            format!(
                "agentdeck_watch_current == 0 or sum without (reason) \
                 (increase(agentdeck_watch_restarts_total{{reason=~\"list_failed|start_failed|stream_failed\"}}[{w}])) >= {}",
                cfg.watch_failed_restarts
            ),
            cfg.watch_stale_for_seconds,
        ),
        "AgentdeckTaskFailuresHigh" => (
            format!(
                "sum by (namespace, pool) (increase(agentdeck_tasks_finished_total{{phase=~\"Failed|Errored\"}}[{w}])) \
                 / sum by (namespace, pool) (increase(agentdeck_tasks_finished_total[{w}])) * 100 > {} \
                 and on (namespace, pool) sum by (namespace, pool) (increase(agentdeck_tasks_finished_total[{w}])) >= {}",
                cfg.task_failure_percent, cfg.task_failure_min_tasks
            ),
            cfg.errors_for_seconds,
        ),
        "AgentdeckReconcileErrors" => (
            format!(
                "rate(agentdeck_reconcile_errors_total[{w}]) / rate(agentdeck_reconciles_total[{w}]) * 100 > {}",
                cfg.reconcile_error_percent
            ),
            cfg.errors_for_seconds,
        ),
        "AgentdeckPoolFrozenQueueGrowing" => (
            format!(
                "max by (namespace, pool) (agentdeck_pool_frozen == 1 {LEADING}) \
                 and on (namespace, pool) max by (namespace, pool) (delta(agentdeck_pool_pending_tasks[{w}]) > 0 {LEADING})"
            ),
            cfg.frozen_queue_for_seconds,
        ),
        other => unreachable!("no expression for alert {other}"),
    }
}

/// Fills the `{placeholders}` of an alert's text for `cfg`.
fn fill(text: &str, cfg: &MonitoringConfig, for_seconds: u64, name: &str) -> String {
    let percent = if name == "AgentdeckReconcileErrors" {
        cfg.reconcile_error_percent
    } else {
        cfg.task_failure_percent
    };
    text.replace("{for}", &prom_duration(for_seconds))
        .replace("{window}", &prom_duration(cfg.rate_window_seconds))
        .replace("{target}", &prom_duration(cfg.queue_wait_seconds))
        .replace("{restarts}", &cfg.watch_failed_restarts.to_string())
        .replace("{percent}", &percent.to_string())
        .replace("{min}", &cfg.task_failure_min_tasks.to_string())
}

/// One rule of the file.
fn rule(alert: &Alert, cfg: &MonitoringConfig) -> Value {
    let (expr, for_seconds) = expr(alert.name, cfg);
    json!({
        "alert": alert.name,
        "expr": expr,
        "for": prom_duration(for_seconds),
        "labels": {"severity": alert.severity},
        "annotations": {
            "summary": fill(alert.summary, cfg, for_seconds, alert.name),
            "description": fill(alert.description, cfg, for_seconds, alert.name),
            "runbook_url": format!("{}#{}", cfg.runbook_url, anchor(alert.name)),
        },
    })
}

/// The rule file: pool alerts in one group, the controller's in another.
pub fn rules(cfg: &MonitoringConfig) -> Value {
    let controller = [
        "AgentdeckNoLeader",
        "AgentdeckWatchStale",
        "AgentdeckReconcileErrors",
    ];
    let group = |name: &str, of_controller: bool| {
        json!({
            "name": name,
            "rules": ALERTS
                .iter()
                .filter(|a| controller.contains(&a.name) == of_controller)
                .map(|a| rule(a, cfg))
                .collect::<Vec<_>>(),
        })
    };
    json!({"groups": [group("agentdeck.pools", false), group("agentdeck.controller", true)]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_rules(cfg: &MonitoringConfig) -> Vec<Value> {
        rules(cfg)["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .flat_map(|g| g["rules"].as_array().expect("rules").clone())
            .collect()
    }

    #[test]
    fn every_alert_is_rendered_once_with_severity_summary_and_runbook() {
        let rules = all_rules(&MonitoringConfig::default());
        assert_eq!(rules.len(), ALERTS.len());
        for r in &rules {
            let name = r["alert"].as_str().expect("name");
            assert!(matches!(
                r["labels"]["severity"].as_str(),
                Some("critical" | "warning")
            ));
            let a = &r["annotations"];
            assert!(
                a["summary"].as_str().is_some_and(|s| !s.contains("{for}")),
                "{name}"
            );
            let d = a["description"].as_str().expect("description");
            assert!(
                !d.contains("{window}") && !d.contains("{for}"),
                "{name}: {d}"
            );
            assert_eq!(
                a["runbook_url"],
                format!(
                    "https://github.com/agentdeck/agentdeck/blob/main/assets/RUNBOOK.md#{}",
                    name.to_lowercase()
                )
            );
        }
    }

    #[test]
    fn thresholds_reach_the_rules() {
        let cfg = MonitoringConfig {
            stuck_for_seconds: 3,
            queue_wait_seconds: 45,
            task_failure_percent: 40,
            rate_window_seconds: 120,
            ..MonitoringConfig::default()
        };
        let rules = all_rules(&cfg);
        let by = |name: &str| {
            rules
                .iter()
                .find(|r| r["alert"] == name)
                .cloned()
                .expect("rendered")
        };
        assert_eq!(by("AgentdeckPoolStuck")["for"], "3s");
        let wait = by("AgentdeckQueueWaitHigh")["expr"]
            .as_str()
            .expect("expr")
            .to_owned();
        assert!(wait.contains("+ 45)") && wait.contains("[2m]"), "{wait}");
        let failures = by("AgentdeckTaskFailuresHigh");
        assert!(
            failures["expr"]
                .as_str()
                .expect("expr")
                .contains("* 100 > 40 ")
        );
        assert!(
            failures["annotations"]["description"]
                .as_str()
                .expect("description")
                .contains("(threshold 40%, at least 5 tasks)")
        );
    }
}
