//! `monitoring:` in `agentdeck.yaml`: the thresholds of the alert rules
//! `agentdeck monitoring rules` prints (each also a flag of that command).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::validate::{self as check, InvalidField, quoted};

/// Thresholds and labels of the rendered alert rules.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct MonitoringConfig {
    /// Seconds a pool's verdict is Stuck before `AgentdeckPoolStuck` fires.
    #[schemars(range(min = 1))]
    pub stuck_for_seconds: u64,
    /// p95 created-to-claimed wait, in seconds, of pools without
    /// `spec.slo.queueWaitSeconds`.
    #[schemars(range(min = 1))]
    pub queue_wait_seconds: u64,
    /// Seconds the p95 wait stays over target before `AgentdeckQueueWaitHigh` fires.
    #[schemars(range(min = 1))]
    pub queue_wait_for_seconds: u64,
    /// Seconds agents stay stale or offline before `AgentdeckAgentsStale` fires.
    #[schemars(range(min = 1))]
    pub agents_stale_for_seconds: u64,
    /// Seconds without a leading daemon before `AgentdeckNoLeader` fires.
    #[schemars(range(min = 1))]
    pub no_leader_for_seconds: u64,
    /// Seconds a watch is not following (or keeps failing) before
    /// `AgentdeckWatchStale` fires.
    #[schemars(range(min = 1))]
    pub watch_stale_for_seconds: u64,
    /// Failed restarts of one watch within `rateWindowSeconds` that count
    /// as restarting.
    #[schemars(range(min = 1))]
    pub watch_failed_restarts: u64,
    /// Percent of a pool's finished tasks Failed or Errored within
    /// `rateWindowSeconds` above which `AgentdeckTaskFailuresHigh` fires.
    #[schemars(range(min = 1, max = 100))]
    pub task_failure_percent: u64,
    /// Tasks that must have finished within the window before the ratio counts.
    #[schemars(range(min = 1))]
    pub task_failure_min_tasks: u64,
    /// Percent of reconciles failing above which `AgentdeckReconcileErrors` fires.
    #[schemars(range(min = 1, max = 100))]
    pub reconcile_error_percent: u64,
    /// Seconds the failure ratios stay high before their alerts fire.
    #[schemars(range(min = 1))]
    pub errors_for_seconds: u64,
    /// Seconds a frozen pool's queue keeps growing before
    /// `AgentdeckPoolFrozenQueueGrowing` fires.
    #[schemars(range(min = 1))]
    pub frozen_queue_for_seconds: u64,
    /// Window, in seconds, of the rates and ratios the rules compute.
    #[schemars(range(min = 1))]
    pub rate_window_seconds: u64,
    /// The runbook; each alert's `runbook_url` is this plus `#` and its section.
    pub runbook_url: String,
    /// Labels of the rendered PrometheusRule and dashboard ConfigMap (a
    /// Prometheus's `ruleSelector`, say `release: kube-prometheus-stack`).
    pub rule_labels: BTreeMap<String, String>,
}

impl Default for MonitoringConfig {
    fn default() -> Self {
        MonitoringConfig {
            stuck_for_seconds: 300,
            queue_wait_seconds: 300,
            queue_wait_for_seconds: 600,
            agents_stale_for_seconds: 600,
            no_leader_for_seconds: 120,
            watch_stale_for_seconds: 300,
            watch_failed_restarts: 3,
            task_failure_percent: 25,
            task_failure_min_tasks: 5,
            reconcile_error_percent: 10,
            errors_for_seconds: 600,
            frozen_queue_for_seconds: 1800,
            rate_window_seconds: 600,
            runbook_url: "https://github.com/agentdeck/agentdeck/blob/main/assets/RUNBOOK.md"
                .to_owned(),
            rule_labels: BTreeMap::new(),
        }
    }
}

impl MonitoringConfig {
    /// Every key in range.
    pub fn validate(&self) -> Result<(), InvalidField> {
        let seconds = [
            ("monitoring.stuckForSeconds", self.stuck_for_seconds),
            ("monitoring.queueWaitSeconds", self.queue_wait_seconds),
            (
                "monitoring.queueWaitForSeconds",
                self.queue_wait_for_seconds,
            ),
            (
                "monitoring.agentsStaleForSeconds",
                self.agents_stale_for_seconds,
            ),
            ("monitoring.noLeaderForSeconds", self.no_leader_for_seconds),
            (
                "monitoring.watchStaleForSeconds",
                self.watch_stale_for_seconds,
            ),
            ("monitoring.watchFailedRestarts", self.watch_failed_restarts),
            (
                "monitoring.taskFailureMinTasks",
                self.task_failure_min_tasks,
            ),
            ("monitoring.errorsForSeconds", self.errors_for_seconds),
            (
                "monitoring.frozenQueueForSeconds",
                self.frozen_queue_for_seconds,
            ),
            ("monitoring.rateWindowSeconds", self.rate_window_seconds),
        ];
        for (field, value) in seconds {
            check::positive(field, value)?;
        }
        for (field, value) in [
            ("monitoring.taskFailurePercent", self.task_failure_percent),
            (
                "monitoring.reconcileErrorPercent",
                self.reconcile_error_percent,
            ),
        ] {
            if !(1..=100).contains(&value) {
                return Err(InvalidField::new(
                    field,
                    value,
                    "a percentage from 1 to 100",
                ));
            }
        }
        if !(self.runbook_url.starts_with("https://") || self.runbook_url.starts_with("http://"))
            || self.runbook_url.contains('#')
        {
            return Err(InvalidField::new(
                "monitoring.runbookUrl",
                quoted(&self.runbook_url),
                "an http(s) URL of the runbook without a #fragment (each alert adds its section's)",
            ));
        }
        for (name, value) in &self.rule_labels {
            if !label_name(name) {
                return Err(InvalidField::new(
                    "monitoring.ruleLabels",
                    quoted(name),
                    "label names of letters, digits, `-`, `_`, `.` and an optional `prefix/`",
                ));
            }
            check::not_blank(&format!("monitoring.ruleLabels.{name}"), value)?;
        }
        Ok(())
    }
}

/// A Kubernetes label key: an optional DNS prefix and `/`, then a name of
/// at most 63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn label_name(key: &str) -> bool {
    let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !name.is_empty()
        && name.len() <= 63
        && ends(name.chars().next())
        && ends(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_each_bad_value_names_its_key() {
        assert_eq!(MonitoringConfig::default().validate(), Ok(()));
        let bad = |change: fn(&mut MonitoringConfig)| {
            let mut m = MonitoringConfig::default();
            change(&mut m);
            m.validate().expect_err("invalid").field
        };
        assert_eq!(
            bad(|m| m.stuck_for_seconds = 0),
            "monitoring.stuckForSeconds"
        );
        assert_eq!(
            bad(|m| m.task_failure_percent = 101),
            "monitoring.taskFailurePercent"
        );
        assert_eq!(
            bad(|m| m.runbook_url = "https://x/RUNBOOK.md#top".into()),
            "monitoring.runbookUrl"
        );
        assert_eq!(
            bad(|m| {
                m.rule_labels.insert("bad label".into(), "x".into());
            }),
            "monitoring.ruleLabels"
        );
        let mut ok = MonitoringConfig::default();
        ok.rule_labels.insert(
            "app.kubernetes.io/part-of".into(),
            "kube-prometheus-stack".into(),
        );
        assert_eq!(ok.validate(), Ok(()));
    }
}
