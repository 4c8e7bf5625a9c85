//! `agentdeck status`: each pool's verdict, replicas, queue and hold, as
//! rows built purely from the objects, printed kubectl-style.

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ListParams;
use serde::Serialize;

use super::error::{OpsError, Result};
use crate::cluster::Connection;
use crate::crd::{AgentPool, AgentTask};
use crate::plan::capacity;
use crate::plan::verdict::{VerdictLevel, unclaimed_tasks, verdict, with_long_running};

/// One pool as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    pub name: String,
    pub namespace: String,
    pub verdict: VerdictLevel,
    pub reason: String,
    pub mode: String,
    pub ready: i32,
    pub desired: i32,
    pub replicas: i32,
    pub min: i32,
    pub max: i32,
    pub pending: i32,
    pub running: i32,
    /// The hold in force, as one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// The capacity window open and the next change, or the next window
    /// to open (`office-hours: min 4 until 18:00, then 0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    pub draining: bool,
    pub frozen: bool,
    pub debug: bool,
    pub fresh: i32,
    pub stale: i32,
    pub offline: i32,
}

/// Rows for `pools`, sorted by name, with their tasks' unclaimed counts
/// and, past `long_after` (zero: never), their long-running tasks: the
/// verdict the console shows.
pub fn rows(
    pools: &[AgentPool],
    tasks: &[AgentTask],
    now: Timestamp,
    long_after: std::time::Duration,
) -> Vec<PoolRow> {
    let mut rows: Vec<PoolRow> = pools
        .iter()
        .map(|p| {
            let name = p.name_any();
            let ns = p.namespace().unwrap_or_default();
            let own = || {
                tasks
                    .iter()
                    .filter(|t| t.namespace().as_deref() == Some(ns.as_str()))
            };
            let mut v = verdict(p, unclaimed_tasks(&name, own()), now);
            if !long_after.is_zero() {
                let long = own()
                    .filter(|t| t.spec.pool == name && running_past(t, now, long_after))
                    .count();
                v = with_long_running(v, u32::try_from(long).unwrap_or(u32::MAX), long_after);
            }
            let s = p.status.clone().unwrap_or_default();
            PoolRow {
                name,
                namespace: ns,
                verdict: v.level,
                reason: v.reason,
                mode: p.spec.execution_mode.as_str().into(),
                ready: s.ready_replicas,
                desired: s.desired_replicas,
                replicas: s.replicas,
                min: p.spec.min_replicas,
                max: p.spec.max_replicas,
                pending: s.pending_tasks,
                running: s.running_tasks,
                hold: crate::crd::HoldStatus::of(p.spec.hold.as_ref(), now).map(|h| h.summary),
                capacity: capacity_line(p, now),
                draining: p.spec.drain,
                frozen: s.frozen,
                debug: p.spec.debug,
                fresh: s.health.fresh,
                stale: s.health.stale,
                offline: s.health.offline,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// The pool's capacity windows in one line: the controller's, which reads
/// windows without a time zone in its `defaultTimezone`; before it wrote
/// one, read from the spec in UTC.
pub fn capacity_line(pool: &AgentPool, now: Timestamp) -> Option<String> {
    if pool.spec.capacity_schedules.is_empty() {
        return None;
    }
    if let Some(c) = pool.status.as_ref().and_then(|s| s.capacity.as_ref()) {
        return Some(c.summary.clone());
    }
    let windows = capacity::parse_all(
        &pool.spec.capacity_schedules,
        pool.spec.max_replicas,
        &jiff::tz::TimeZone::UTC,
    )
    .ok()?;
    let whole = |n: i32| u32::try_from(n.max(0)).unwrap_or(0);
    let bounds = capacity::Bounds {
        min: whole(pool.spec.min_replicas),
        max: whole(pool.spec.max_replicas),
    };
    capacity::summary(&windows, bounds, now)
}

/// Whether `t` has been Running for `after` or longer at `now` (from its
/// start, else its claim).
fn running_past(t: &AgentTask, now: Timestamp, after: std::time::Duration) -> bool {
    let Some(st) = t
        .status
        .as_ref()
        .filter(|s| s.phase == crate::crd::TaskPhase::Running)
    else {
        return false;
    };
    st.started_at
        .as_ref()
        .or(st.claimed_at.as_ref())
        .is_some_and(|from| {
            std::time::Duration::try_from(now.duration_since(from.0)).is_ok_and(|d| d >= after)
        })
}

/// Left-aligned columns separated by three spaces, kubectl-style.
pub fn columns<const N: usize>(headers: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}   "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The table `status` prints; `wide` adds mode, min/max, health and
/// switches. Pools with capacity windows have a line each below it.
pub fn table(rows: &[PoolRow], wide: bool) -> String {
    let mut out = pool_table(rows, wide);
    let notes: Vec<String> = rows
        .iter()
        .filter_map(|r| Some(format!("{} capacity: {}\n", r.name, r.capacity.as_ref()?)))
        .collect();
    if !notes.is_empty() {
        out.push('\n');
        out.extend(notes);
    }
    out
}

fn pool_table(rows: &[PoolRow], wide: bool) -> String {
    let hold = |r: &PoolRow| r.hold.clone().unwrap_or_else(|| "-".into());
    if wide {
        let cells: Vec<[String; 14]> = rows
            .iter()
            .map(|r| {
                [
                    r.name.clone(),
                    r.verdict.as_str().into(),
                    r.mode.clone(),
                    format!("{}/{}", r.ready, r.desired),
                    r.min.to_string(),
                    r.max.to_string(),
                    r.pending.to_string(),
                    r.running.to_string(),
                    format!("{}/{}/{}", r.fresh, r.stale, r.offline),
                    yes(r.draining),
                    yes(r.frozen),
                    yes(r.debug),
                    hold(r),
                    r.reason.clone(),
                ]
            })
            .collect();
        columns(
            &[
                "POOL",
                "VERDICT",
                "MODE",
                "READY",
                "MIN",
                "MAX",
                "PENDING",
                "RUNNING",
                "FRESH/STALE/OFFLINE",
                "DRAINING",
                "FROZEN",
                "DEBUG",
                "HOLD",
                "REASON",
            ],
            &cells,
        )
    } else {
        let cells: Vec<[String; 7]> = rows
            .iter()
            .map(|r| {
                [
                    r.name.clone(),
                    r.verdict.as_str().into(),
                    format!("{}/{}", r.ready, r.desired),
                    r.pending.to_string(),
                    r.running.to_string(),
                    hold(r),
                    r.reason.clone(),
                ]
            })
            .collect();
        columns(
            &[
                "POOL", "VERDICT", "READY", "PENDING", "RUNNING", "HOLD", "REASON",
            ],
            &cells,
        )
    }
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// Reads the pools (one, or all in the namespace) and their tasks.
pub async fn load(
    conn: &Connection,
    pool: Option<&str>,
    long_after: std::time::Duration,
) -> Result<Vec<PoolRow>> {
    let pools: kube::Api<AgentPool> = kube::Api::namespaced(conn.client.clone(), &conn.namespace);
    let tasks: kube::Api<AgentTask> = kube::Api::namespaced(conn.client.clone(), &conn.namespace);
    let ns = &conn.namespace;
    let mut all = pools
        .list(&ListParams::default())
        .await
        .map_err(OpsError::api(format!("list AgentPools in namespace {ns}")))?
        .items;
    if let Some(name) = pool {
        let known: Vec<String> = all.iter().map(|p| p.name_any()).collect();
        all.retain(|p| p.name_any() == name);
        if all.is_empty() {
            return Err(OpsError::UnknownPool {
                pool: name.to_owned(),
                namespace: ns.clone(),
                known,
            });
        }
    }
    let tasks = tasks
        .list(&ListParams::default())
        .await
        .map_err(OpsError::api(format!("list AgentTasks in namespace {ns}")))?
        .items;
    Ok(rows(&all, &tasks, Timestamp::now(), long_after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(name: &str, spec: serde_json::Value, status: serde_json::Value) -> AgentPool {
        let mut full = json!({"image": "i", "minReplicas": 1, "maxReplicas": 4});
        for (k, v) in spec.as_object().expect("object") {
            full[k] = v.clone();
        }
        serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name, "namespace": "default"}, "spec": full, "status": status
        }))
        .expect("pool")
    }

    #[test]
    fn a_task_running_past_the_threshold_makes_the_verdict_the_console_shows() {
        let now: Timestamp = "2026-11-24T10:00:00Z".parse().expect("ts");
        let pools = [pool(
            "p",
            json!({}),
            json!({"readyReplicas": 1, "desiredReplicas": 1, "runningTasks": 1}),
        )];
        let task = |started: &str| -> AgentTask {
            serde_json::from_value(json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": "t", "namespace": "default"},
                "spec": {"pool": "p", "command": ["true"]},
                "status": {"phase": "Running", "agent": "a", "startedAt": started}
            }))
            .expect("task")
        };
        let hour = std::time::Duration::from_secs(3600);
        let long = rows(&pools, &[task("2026-11-24T08:00:00Z")], now, hour);
        assert_eq!(long[0].verdict, VerdictLevel::Degraded);
        assert!(
            long[0].reason.starts_with("1 task running over 1h"),
            "{}",
            long[0].reason
        );
        let short = rows(&pools, &[task("2026-11-24T09:50:00Z")], now, hour);
        assert_eq!(short[0].verdict, VerdictLevel::Ok, "{}", short[0].reason);
        let off = rows(
            &pools,
            &[task("2026-11-24T08:00:00Z")],
            now,
            std::time::Duration::ZERO,
        );
        assert_eq!(off[0].verdict, VerdictLevel::Ok, "zero: never flagged");
    }

    #[test]
    fn rows_carry_verdict_queue_and_hold_and_print_as_columns() {
        let now: Timestamp = "2026-11-24T10:00:00Z".parse().expect("ts");
        let pools = [
            pool(
                "zeta",
                json!({"drain": true}),
                json!({"readyReplicas": 1, "desiredReplicas": 1, "pendingTasks": 2}),
            ),
            pool(
                "alpha",
                json!({"hold": {"replicas": 3, "setBy": "al", "until": "2026-11-24T10:30:00Z"}}),
                json!({"readyReplicas": 3, "desiredReplicas": 3, "runningTasks": 1}),
            ),
        ];
        let rows = rows(&pools, &[], now, std::time::Duration::from_secs(3600));
        assert_eq!(
            rows.iter()
                .map(|r| (r.name.as_str(), r.verdict, r.hold.as_deref()))
                .collect::<Vec<_>>(),
            vec![
                (
                    "alpha",
                    VerdictLevel::Ok,
                    Some("3 by al until 2026-11-24T10:30:00Z")
                ),
                ("zeta", VerdictLevel::Stuck, None),
            ]
        );
        let t = table(&rows, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("POOL    VERDICT   READY"), "{t}");
        assert!(lines[2].starts_with("zeta    Stuck     1/1"), "{t}");
        let wide = table(&rows, true);
        assert!(
            wide.lines()
                .next()
                .is_some_and(|h| h.contains("FRESH/STALE/OFFLINE")),
            "{wide}"
        );
        let json = serde_json::to_value(&rows).expect("json");
        assert_eq!(json[1]["verdict"], "Stuck");
        assert_eq!(json[0]["hold"], "3 by al until 2026-11-24T10:30:00Z");
    }

    #[test]
    fn a_pool_with_capacity_windows_says_the_open_one_and_the_next_change_below_the_table() {
        // 2026-11-24 is a Tuesday.
        let now: Timestamp = "2026-11-24T10:00:00Z".parse().expect("ts");
        let windows = json!({"minReplicas": 0, "capacitySchedules": [
            {"name": "office-hours", "from": "09:00", "to": "18:00", "minReplicas": 4}]});
        let pools = [
            // The controller's line wins (it reads zone-less windows in its
            // defaultTimezone).
            pool(
                "alpha",
                windows.clone(),
                json!({"capacity": {"open": ["office-hours"], "minReplicas": 4, "maxReplicas": 4,
                                    "summary": "office-hours: min 4 until 18:00, then 0"}}),
            ),
            // No status yet: read from the spec, in UTC.
            pool("beta", windows, serde_json::Value::Null),
            pool("gamma", json!({}), json!({})),
        ];
        let rows = rows(&pools, &[], now, std::time::Duration::ZERO);
        let capacity: Vec<Option<&str>> = rows.iter().map(|r| r.capacity.as_deref()).collect();
        assert_eq!(
            capacity,
            vec![
                Some("office-hours: min 4 until 18:00, then 0"),
                Some("office-hours: min 4 until 18:00, then 0"),
                None
            ]
        );
        let t = table(&rows, false);
        assert!(
            t.ends_with(
                "\nalpha capacity: office-hours: min 4 until 18:00, then 0\n\
                 beta capacity: office-hours: min 4 until 18:00, then 0\n"
            ),
            "{t}"
        );
        let json = serde_json::to_value(&rows).expect("json");
        assert_eq!(
            json[0]["capacity"],
            "office-hours: min 4 until 18:00, then 0"
        );
        assert!(json[2].get("capacity").is_none());
    }
}
