//! The Grafana dashboard an on-call opens first: an overview, the
//! controller's health, then one row per pool (the `pool` variable,
//! repeated), with the autoscaler's decisions as annotations. Every query
//! reads only metrics the daemon exports (`tests/monitoring.rs` holds this
//! against a running daemon's `/metrics`).

use serde_json::{Value, json};

/// The dashboard's uid, stable across versions so that an upgrade replaces it.
pub const DASHBOARD_UID: &str = "agentdeck-pools";

/// Grafana's dashboard JSON schema version the model is written for.
const SCHEMA_VERSION: u32 = 39;

/// Pools of the chosen namespaces, as a selector fragment.
const POOLS: &str = "namespace=~\"$namespace\",pool=~\"$pool\"";
/// All pools of the chosen namespaces.
const NAMESPACES: &str = "namespace=~\"$namespace\"";

fn datasource() -> Value {
    json!({"type": "prometheus", "uid": "${datasource}"})
}

/// Lays panels out left to right in rows of 24 columns.
struct Layout {
    panels: Vec<Value>,
    x: u32,
    y: u32,
    row_height: u32,
}

impl Layout {
    fn new() -> Self {
        Layout {
            panels: Vec::new(),
            x: 0,
            y: 0,
            row_height: 0,
        }
    }

    fn next_id(&self) -> usize {
        self.panels.len() + 1
    }

    fn row(&mut self, title: &str, repeat: Option<&str>) {
        self.newline();
        let mut row = json!({
            "type": "row", "id": self.next_id(), "title": title, "collapsed": false,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": [],
        });
        if let Some(var) = repeat {
            row["repeat"] = json!(var);
        }
        self.panels.push(row);
        self.y += 1;
    }

    fn newline(&mut self) {
        if self.x > 0 {
            self.y += self.row_height;
            self.x = 0;
            self.row_height = 0;
        }
    }

    fn place(&mut self, mut panel: Value, w: u32, h: u32) {
        if self.x + w > 24 {
            self.newline();
        }
        panel["id"] = json!(self.next_id());
        panel["gridPos"] = json!({"h": h, "w": w, "x": self.x, "y": self.y});
        panel["datasource"] = datasource();
        self.panels.push(panel);
        self.x += w;
        self.row_height = self.row_height.max(h);
    }
}

fn targets(queries: &[(&str, &str)]) -> Value {
    let refs = ["A", "B", "C", "D", "E", "F"];
    Value::Array(
        queries
            .iter()
            .zip(refs)
            .map(|((expr, legend), ref_id)| {
                json!({"refId": ref_id, "datasource": datasource(), "expr": expr, "legendFormat": legend})
            })
            .collect(),
    )
}

fn timeseries(title: &str, description: &str, unit: &str, queries: &[(&str, &str)]) -> Value {
    json!({
        "type": "timeseries", "title": title, "description": description,
        "targets": targets(queries),
        "fieldConfig": {"defaults": {"unit": unit, "min": 0, "custom": {"lineWidth": 1, "fillOpacity": 10}}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": true}, "tooltip": {"mode": "multi", "sort": "none"}},
    })
}

fn stat(title: &str, description: &str, expr: &str, steps: Value, mappings: Value) -> Value {
    json!({
        "type": "stat", "title": title, "description": description,
        "targets": targets(&[(expr, "")]),
        "fieldConfig": {"defaults": {"thresholds": {"mode": "absolute", "steps": steps}, "mappings": mappings}, "overrides": []},
        "options": {"colorMode": "background", "graphMode": "none", "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": false}},
    })
}

fn steps(levels: &[(Option<f64>, &str)]) -> Value {
    Value::Array(
        levels
            .iter()
            .map(|(value, color)| json!({"value": value, "color": color}))
            .collect(),
    )
}

fn overview(l: &mut Layout) {
    l.row("Overview", None);
    let count = |verdict: &str| {
        format!(
            "count(max by (namespace, pool) (agentdeck_pool_verdict{{verdict=\"{verdict}\",{NAMESPACES}}}) == 1) or vector(0)"
        )
    };
    let bad = steps(&[(None, "green"), (Some(1.0), "red")]);
    l.place(stat("Pools stuck", "Pools whose verdict is Stuck: work waits and will not move on its own (AgentdeckPoolStuck).", &count("Stuck"), bad.clone(), json!([])), 6, 4);
    l.place(
        stat(
            "Pools degraded",
            "Pools whose verdict is Degraded: work flows, something needs a look.",
            &count("Degraded"),
            steps(&[(None, "green"), (Some(1.0), "orange")]),
            json!([]),
        ),
        6,
        4,
    );
    l.place(
        stat(
            "Tasks pending",
            "Tasks waiting for an agent, all pools of the namespaces.",
            &format!(
                "sum(max by (namespace, pool) (agentdeck_pool_pending_tasks{{{NAMESPACES}}}))"
            ),
            steps(&[(None, "blue")]),
            json!([]),
        ),
        6,
        4,
    );
    l.place(stat("Leader", "Whether a scraped daemon holds the leader Lease (AgentdeckNoLeader).", "max(agentdeck_leader)", steps(&[(None, "red"), (Some(1.0), "green")]),
        json!([{"type": "value", "options": {"0": {"text": "none"}, "1": {"text": "leading"}}}])), 6, 4);
    let verdicts = format!(
        "2 * max by (namespace, pool) (agentdeck_pool_verdict{{verdict=\"Stuck\",{POOLS}}}) + max by (namespace, pool) (agentdeck_pool_verdict{{verdict=\"Degraded\",{POOLS}}})"
    );
    l.place(json!({
        "type": "state-timeline", "title": "Verdict by pool",
        "description": "Each pool's verdict as `agentdeck status` gives it: OK, Degraded or Stuck.",
        "targets": targets(&[(&verdicts, "{{namespace}}/{{pool}}")]),
        "fieldConfig": {"defaults": {
            "thresholds": {"mode": "absolute", "steps": steps(&[(None, "green"), (Some(1.0), "orange"), (Some(2.0), "red")])},
            "mappings": [{"type": "value", "options": {"0": {"text": "OK"}, "1": {"text": "Degraded"}, "2": {"text": "Stuck"}}}],
            "color": {"mode": "thresholds"}}, "overrides": []},
        "options": {"showValue": "never", "mergeValues": true, "rowHeight": 0.9},
    }), 24, 6);
}

fn controller(l: &mut Layout) {
    l.row("Controller", None);
    l.place(
        timeseries(
            "Leader",
            "1 on the daemon holding the Lease; a gap with none at 1 is a handover or no leader.",
            "none",
            &[("agentdeck_leader", "{{instance}}")],
        ),
        8,
        7,
    );
    l.place(timeseries("Watches", "Watches following their changes (1) and their failed restarts; nothing is decided while one is not current.", "none",
        &[("min by (kind) (agentdeck_watch_current)", "{{kind}} current"),
          ("sum by (kind, reason) (increase(agentdeck_watch_restarts_total[$__rate_interval]))", "{{kind}} restarts ({{reason}})")]), 8, 7);
    let q = |p: &str| {
        format!(
            "histogram_quantile({p}, sum by (le) (rate(agentdeck_reconcile_duration_seconds_bucket[$__rate_interval])))"
        )
    };
    let (p50, p95, p99) = (q("0.5"), q("0.95"), q("0.99"));
    l.place(
        timeseries(
            "Reconcile latency",
            "Time one pool reconcile takes.",
            "s",
            &[(&p50, "p50"), (&p95, "p95"), (&p99, "p99")],
        ),
        8,
        7,
    );
    l.place(
        timeseries(
            "Reconciles and errors",
            "Pool reconciles per second, and those that failed (AgentdeckReconcileErrors).",
            "ops",
            &[
                (
                    "sum(rate(agentdeck_reconciles_total[$__rate_interval]))",
                    "reconciles",
                ),
                (
                    "sum(rate(agentdeck_reconcile_errors_total[$__rate_interval]))",
                    "errors",
                ),
            ],
        ),
        12,
        7,
    );
    l.place(timeseries("API errors", "Kubernetes API errors by HTTP code (409: a lost race, retried; 403: missing rights; transport: no answer).", "ops",
        &[("sum by (code) (rate(agentdeck_api_errors_total[$__rate_interval]))", "{{code}}")]), 12, 7);
}

fn pool_row(l: &mut Layout) {
    l.row("Pool $pool", Some("pool"));
    let sel = |metric: &str| format!("max({metric}{{{POOLS}}})");
    let (pending, running) = (
        sel("agentdeck_pool_pending_tasks"),
        sel("agentdeck_pool_running_tasks"),
    );
    l.place(
        timeseries(
            "Queue and running",
            "Tasks waiting for an agent and tasks being run.",
            "none",
            &[(&pending, "pending"), (&running, "running")],
        ),
        8,
        8,
    );
    let (desired, current, ready) = (
        sel("agentdeck_pool_desired_replicas"),
        sel("agentdeck_pool_current_replicas"),
        sel("agentdeck_pool_ready_replicas"),
    );
    l.place(timeseries("Replicas", "What the autoscaler wants, what exists and what is ready; scaling decisions are marked.", "none",
        &[(&desired, "desired"), (&current, "current"), (&ready, "ready")]), 8, 8);
    let health = format!("max by (freshness) (agentdeck_pool_agents_health{{{POOLS}}})");
    l.place(
        timeseries(
            "Agent health",
            "Agents by /healthz freshness (AgentdeckAgentsStale).",
            "none",
            &[(&health, "{{freshness}}")],
        ),
        8,
        8,
    );
    let q = |p: &str| {
        format!(
            "histogram_quantile({p}, sum by (le) (rate(agentdeck_task_queue_to_start_seconds_bucket{{{POOLS}}}[$__rate_interval])))"
        )
    };
    let (p50, p95) = (q("0.5"), q("0.95"));
    let target = sel("agentdeck_pool_queue_wait_target_seconds");
    l.place(timeseries("Queue wait", "Created to claimed, p50 and p95, and the pool's spec.slo.queueWaitSeconds (AgentdeckQueueWaitHigh).", "s",
        &[(&p50, "p50"), (&p95, "p95"), (&target, "target")]), 8, 8);
    let outcomes = format!(
        "sum by (phase) (increase(agentdeck_tasks_finished_total{{{POOLS}}}[$__rate_interval]))"
    );
    let mut bars = timeseries(
        "Task outcomes",
        "Tasks that ended, by phase (AgentdeckTaskFailuresHigh).",
        "none",
        &[(&outcomes, "{{phase}}")],
    );
    bars["fieldConfig"]["defaults"]["custom"] =
        json!({"drawStyle": "bars", "fillOpacity": 80, "stacking": {"mode": "normal"}});
    l.place(bars, 8, 8);
    let verdict = format!("max by (verdict) (agentdeck_pool_verdict{{{POOLS}}})");
    let frozen = sel("agentdeck_pool_frozen");
    l.place(timeseries("Verdict and freeze", "1 for the pool's current verdict; frozen 1 inside a freeze window (AgentdeckPoolStuck, AgentdeckPoolFrozenQueueGrowing).", "none",
        &[(&verdict, "{{verdict}}"), (&frozen, "frozen")]), 8, 8);
}

fn variables() -> Value {
    let query = |name: &str, label: &str, query: String| {
        json!({
            "name": name, "label": label, "type": "query", "datasource": datasource(),
            "query": {"query": query, "refId": name}, "definition": query,
            "refresh": 2, "multi": true, "includeAll": true, "sort": 1,
            "current": {"selected": true, "text": ["All"], "value": ["$__all"]},
        })
    };
    json!({"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus", "current": {}, "hide": 0},
        query("namespace", "Namespace", "label_values(agentdeck_pool_verdict, namespace)".to_owned()),
        query("pool", "Pool", format!("label_values(agentdeck_pool_verdict{{{NAMESPACES}}}, pool)")),
    ]})
}

fn annotations() -> Value {
    json!({"list": [
        {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": true, "hide": true,
         "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
        {"name": "Scaling decisions", "datasource": datasource(), "enable": true, "iconColor": "purple",
         "expr": format!("sum by (namespace, pool, direction) (increase(agentdeck_scale_events_total{{{POOLS}}}[$__interval])) > 0"),
         "step": "30s", "titleFormat": "{{namespace}}/{{pool}} scaled {{direction}}",
         "textFormat": "the autoscaler changed the replicas ({{direction}})", "tagKeys": "namespace,pool,direction",
         "useValueForTime": false},
    ]})
}

/// The dashboard, as Grafana's JSON model.
pub fn dashboard() -> Value {
    let mut l = Layout::new();
    overview(&mut l);
    controller(&mut l);
    pool_row(&mut l);
    json!({
        "uid": DASHBOARD_UID,
        "title": "agentdeck: pools and controller",
        "description": "Rendered by `agentdeck monitoring dashboard`; the alerts' runbook is assets/RUNBOOK.md.",
        "tags": ["agentdeck"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": true,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": variables(),
        "annotations": annotations(),
        "panels": l.panels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_have_unique_ids_and_do_not_overlap() {
        let d = dashboard();
        let panels = d["panels"].as_array().expect("panels");
        assert!(panels.len() > 10);
        let mut ids: Vec<u64> = panels
            .iter()
            .map(|p| p["id"].as_u64().expect("id"))
            .collect();
        ids.dedup();
        assert_eq!(ids.len(), panels.len());
        let mut cells = std::collections::HashSet::new();
        for p in panels {
            let g = &p["gridPos"];
            let n = |k: &str| g[k].as_u64().expect("grid position");
            assert!(n("x") + n("w") <= 24, "{p}");
            for x in n("x")..n("x") + n("w") {
                for y in n("y")..n("y") + n("h") {
                    assert!(cells.insert((x, y)), "{} overlaps at {x},{y}", p["title"]);
                }
            }
        }
    }

    #[test]
    fn one_row_repeats_per_pool_and_scaling_is_annotated() {
        let d = dashboard();
        let rows: Vec<&Value> = d["panels"]
            .as_array()
            .expect("panels")
            .iter()
            .filter(|p| p["repeat"] == "pool")
            .collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["type"], "row");
        let scaling = &d["annotations"]["list"][1];
        assert!(
            scaling["expr"]
                .as_str()
                .expect("expr")
                .contains("agentdeck_scale_events_total")
        );
        assert!(d["schemaVersion"].as_u64().expect("version") >= 39);
    }
}
