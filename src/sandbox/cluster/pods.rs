//! What controllers read from pods (`podutil.IsPodReady`,
//! `IsPodAvailable`, `controller.IsPodActive` …) and the order in which they
//! pick pods to delete when there are too many (`controller.ActivePods` and
//! `ActivePodsWithRanks` in kubernetes/pkg/controller/controller_utils.go).

use std::cmp::Reverse;

use serde_json::Value;

use super::meta;

/// Annotation whose (int32) value ranks pods for scale-down: lower goes first.
pub(crate) const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

pub(crate) fn phase(pod: &Value) -> &str {
    meta::str_at(pod, "/status/phase")
}

/// Succeeded or Failed.
pub(crate) fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// `controller.IsPodActive`: not terminal and not being deleted.
pub(crate) fn is_active(pod: &Value) -> bool {
    !is_terminal(pod) && !meta::is_deleting(pod)
}

/// `controller.IsPodTerminating`: being deleted and not yet terminal.
pub(crate) fn is_terminating(pod: &Value) -> bool {
    !is_terminal(pod) && meta::is_deleting(pod)
}

/// `podutil.IsPodReady`: condition Ready is True.
pub(crate) fn is_ready(pod: &Value) -> bool {
    meta::condition_true(pod, "Ready")
}

/// When the Ready condition last became True.
pub(crate) fn ready_since(pod: &Value) -> Option<i64> {
    if !is_ready(pod) {
        return None;
    }
    meta::condition(pod, "Ready").and_then(|c| meta::time_at(c, "/lastTransitionTime"))
}

/// `podutil.IsPodAvailable`: ready for more than `min_ready_seconds`.
pub(crate) fn is_available(pod: &Value, min_ready_seconds: i64, now: i64) -> bool {
    if !is_ready(pod) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    ready_since(pod).is_some_and(|t| t + min_ready_seconds < now)
}

/// The highest restart count among its containers.
pub(crate) fn max_restarts(pod: &Value) -> i64 {
    meta::array_at(pod, "/status/containerStatuses")
        .iter()
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .max()
        .unwrap_or(0)
}

/// `GetDeletionCostFromPodAnnotations`: the annotation as an int32, 0 when
/// absent or invalid.
pub(crate) fn deletion_cost(pod: &Value) -> i32 {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(DELETION_COST))
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<i32>().ok())
        .unwrap_or(0)
}

/// How timestamps are compared when ranking pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeScale {
    /// Exact times (`controller.ActivePods`).
    Exact,
    /// Powers of two of the age at `now` (the LogarithmicScaleDown feature,
    /// on by default since 1.22, used by ReplicaSet scale-down), so that pods
    /// of similar age are picked pseudo-randomly (by UID).
    Logarithmic { now: i64 },
}

/// A time as a sort key where smaller means "prefer for deletion": missing
/// (Go's zero time) first, then newest first.
fn recency_key(t: Option<i64>, scale: TimeScale) -> i64 {
    match (t, scale) {
        (None | Some(0), _) => i64::MIN,
        (Some(t), TimeScale::Exact) => -t,
        (Some(t), TimeScale::Logarithmic { now }) => {
            let age_ns = (now - t).saturating_mul(1_000_000_000);
            if age_ns <= 0 {
                -1
            } else {
                i64::from(age_ns.ilog2())
            }
        }
    }
}

/// The ranking of `ActivePodsWithRanks.Less`, as a sort key: smaller sorts
/// first, i.e. is deleted first. Rules in order:
/// 1. not assigned to a node before assigned;
/// 2. Pending, then Unknown, then Running;
/// 3. not ready before ready;
/// 4. lower `pod-deletion-cost` first (only with ranks, as the ReplicaSet
///    controller does; the Job controller's `ActivePods` has no cost rule);
/// 5. more related pods on the same node first ("doubled up");
/// 6. ready for a shorter time first;
/// 7. more container restarts first;
/// 8. created more recently first;
/// 9. UID, as the tie-break the logarithmic comparisons use.
///
/// Go's comparator jumps to the UID as soon as two times fall in the same
/// logarithmic bucket; a key makes the order total (Rust's sort needs that),
/// so equal buckets fall through to the next rule instead.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct DeletionKey {
    assigned: bool,
    phase: u8,
    ready: bool,
    cost: i32,
    colocated: Reverse<usize>,
    ready_recency: i64,
    restarts: Reverse<i64>,
    age_recency: i64,
    uid: String,
}

fn deletion_key(pod: &Value, colocated: usize, use_cost: bool, scale: TimeScale) -> DeletionKey {
    let phase = match phase(pod) {
        "Unknown" => 1,
        "Running" => 2,
        // Go's map lookup gives Pending and anything else 0.
        _ => 0,
    };
    let ready = is_ready(pod);
    DeletionKey {
        assigned: !meta::str_at(pod, "/spec/nodeName").is_empty(),
        phase,
        ready,
        cost: if use_cost { deletion_cost(pod) } else { 0 },
        colocated: Reverse(colocated),
        ready_recency: if ready {
            recency_key(ready_since(pod), scale)
        } else {
            0
        },
        restarts: Reverse(max_restarts(pod)),
        age_recency: recency_key(Some(meta::created(pod)), scale),
        uid: meta::uid(pod).to_string(),
    }
}

/// `ActivePodsWithRanks` sorted: the pods in the order the ReplicaSet
/// controller deletes them. `related` are the pods of every ReplicaSet with
/// the same owner (`getIndirectlyRelatedPods`); a pod's rank is the number
/// of active related pods on its node.
pub(crate) fn replica_set_deletion_order<'a>(
    pods: &[&'a Value],
    related: &[&Value],
    now: i64,
) -> Vec<&'a Value> {
    let mut on_node: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for p in related.iter().filter(|p| is_active(p)) {
        *on_node
            .entry(meta::str_at(p, "/spec/nodeName"))
            .or_default() += 1;
    }
    let scale = TimeScale::Logarithmic { now };
    let mut keyed: Vec<(DeletionKey, &'a Value)> = pods
        .iter()
        .map(|p| {
            let rank = on_node
                .get(meta::str_at(p, "/spec/nodeName"))
                .copied()
                .unwrap_or(0);
            (deletion_key(p, rank, true, scale), *p)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, p)| p).collect()
}

/// `controller.ActivePods` sorted: the order the Job controller removes
/// surplus pods in (no deletion cost, no ranks, exact times).
pub(crate) fn active_pods_order<'a>(pods: &[&'a Value]) -> Vec<&'a Value> {
    let mut keyed: Vec<(DeletionKey, &'a Value)> = pods
        .iter()
        .map(|p| (deletion_key(p, 0, false, TimeScale::Exact), *p))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, p)| p).collect()
}

/// `getPodsToDelete`: the first `diff` pods of the ranking (all of them,
/// unsorted, when every pod goes).
pub(crate) fn pods_to_delete<'a>(
    pods: &[&'a Value],
    related: &[&Value],
    diff: usize,
    now: i64,
) -> Vec<&'a Value> {
    if diff >= pods.len() {
        return pods.to_vec();
    }
    let mut order = replica_set_deletion_order(pods, related, now);
    order.truncate(diff);
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_000;

    /// A pod builder: `pod("a").on("n1").running().ready_at(t)`.
    #[derive(Clone)]
    struct P(Value);

    fn pod(name: &str) -> P {
        P(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                         "creationTimestamp": meta::format_time(NOW - 1000)},
            "spec": {},
            "status": {"phase": "Pending"}
        }))
    }

    impl P {
        fn on(mut self, node: &str) -> P {
            self.0["spec"]["nodeName"] = json!(node);
            self
        }
        fn phase(mut self, phase: &str) -> P {
            self.0["status"]["phase"] = json!(phase);
            self
        }
        fn running(self) -> P {
            self.phase("Running")
        }
        fn ready_at(mut self, t: i64) -> P {
            self.0["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "lastTransitionTime": meta::format_time(t)}]);
            self
        }
        fn cost(mut self, c: &str) -> P {
            self.0["metadata"]["annotations"] = json!({DELETION_COST: c});
            self
        }
        fn restarts(mut self, n: i64) -> P {
            self.0["status"]["containerStatuses"] = json!([{"name": "c", "restartCount": n}]);
            self
        }
        fn created_at(mut self, t: i64) -> P {
            self.0["metadata"]["creationTimestamp"] = json!(meta::format_time(t));
            self
        }
    }

    fn names(pods: &[&Value]) -> Vec<String> {
        pods.iter().map(|p| meta::name(p).to_string()).collect()
    }

    /// Ranks `pods` (given in the reverse of the expected order, so a
    /// no-op sort fails) and returns the names in deletion order.
    fn ranked(pods: Vec<P>) -> Vec<String> {
        let values: Vec<Value> = pods.into_iter().map(|p| p.0).collect();
        let refs: Vec<&Value> = values.iter().rev().collect();
        names(&replica_set_deletion_order(&refs, &refs, NOW))
    }

    #[test]
    fn replica_set_scale_down_ranks_pods_rule_by_rule() {
        let cases: Vec<(&str, Vec<P>)> = vec![
            (
                "unassigned before assigned",
                vec![pod("a"), pod("b").on("n1").running()],
            ),
            (
                "pending before unknown before running",
                vec![
                    pod("a").on("n1"),
                    pod("b").on("n1").phase("Unknown"),
                    pod("c").on("n1").running(),
                ],
            ),
            (
                "not ready before ready",
                vec![
                    pod("a").on("n1").running(),
                    pod("b").on("n1").running().ready_at(NOW - 100),
                ],
            ),
            (
                "lower deletion cost first, even among ready running pods",
                vec![
                    pod("a").on("n1").running().ready_at(NOW - 5000).cost("-10"),
                    pod("b").on("n1").running().ready_at(NOW - 5000),
                    pod("c").on("n1").running().ready_at(NOW - 5000).cost("100"),
                ],
            ),
            (
                "ready for less time first",
                vec![
                    pod("a").on("n1").running().ready_at(NOW - 10),
                    pod("b").on("n1").running().ready_at(NOW - 100_000),
                ],
            ),
            (
                "more restarts first",
                vec![
                    pod("a").on("n1").running().restarts(5),
                    pod("b").on("n1").running().restarts(1),
                ],
            ),
            (
                "newer before older",
                vec![
                    pod("a").on("n1").running().created_at(NOW - 10),
                    pod("b").on("n1").running().created_at(NOW - 100_000),
                ],
            ),
        ];
        for (rule, pods) in cases {
            let want: Vec<String> = pods.iter().map(|p| meta::name(&p.0).to_string()).collect();
            assert_eq!(ranked(pods), want, "{rule}");
        }
    }

    #[test]
    fn deletion_cost_does_not_outrank_readiness_or_phase() {
        // Cost is rule 4: an unready pod goes first however costly.
        let got = ranked(vec![
            pod("unready").on("n1").running().cost("1000"),
            pod("ready")
                .on("n1")
                .running()
                .ready_at(NOW - 100)
                .cost("-1000"),
        ]);
        assert_eq!(got, ["unready", "ready"]);
    }

    #[test]
    fn an_invalid_deletion_cost_counts_as_zero() {
        let got = ranked(vec![
            pod("negative").on("n1").running().cost("-1"),
            pod("invalid").on("n1").running().cost("cheap"),
            pod("positive").on("n1").running().cost("1"),
        ]);
        assert_eq!(got, ["negative", "invalid", "positive"]);
    }

    #[test]
    fn pods_doubled_up_on_a_node_go_first() {
        let crowded_a = pod("crowded-a").on("n1").running().ready_at(NOW - 100);
        let crowded_b = pod("crowded-b").on("n1").running().ready_at(NOW - 100);
        let alone = pod("alone").on("n2").running().ready_at(NOW - 100);
        let all = [crowded_a.0, crowded_b.0, alone.0];
        let candidates: Vec<&Value> = vec![&all[2], &all[0]];
        let related: Vec<&Value> = all.iter().collect();
        assert_eq!(
            names(&replica_set_deletion_order(&candidates, &related, NOW)),
            ["crowded-a", "alone"]
        );
    }

    #[test]
    fn similar_ready_times_are_ordered_by_uid_not_by_the_second() {
        // 1000 s and 1001 s ago fall in the same power-of-two bucket, so the
        // newer one does not necessarily go first.
        let got = ranked(vec![
            pod("a").on("n1").running().ready_at(NOW - 1000),
            pod("b").on("n1").running().ready_at(NOW - 1001),
        ]);
        assert_eq!(got, ["a", "b"]);
        let got = ranked(vec![
            pod("a").on("n1").running().ready_at(NOW - 1001),
            pod("b").on("n1").running().ready_at(NOW - 1000),
        ]);
        assert_eq!(got, ["a", "b"], "uid-a sorts before uid-b either way");
    }

    #[test]
    fn the_job_order_ignores_deletion_cost_and_compares_exact_times() {
        let a = pod("a").on("n1").running().ready_at(NOW - 1000).cost("100");
        let b = pod("b")
            .on("n1")
            .running()
            .ready_at(NOW - 1001)
            .cost("-100");
        let values = [b.0, a.0];
        let refs: Vec<&Value> = values.iter().collect();
        assert_eq!(names(&active_pods_order(&refs)), ["a", "b"]);
    }

    #[test]
    fn deleting_every_pod_skips_the_ranking() {
        let values = [pod("b").0, pod("a").0];
        let refs: Vec<&Value> = values.iter().collect();
        assert_eq!(names(&pods_to_delete(&refs, &refs, 5, NOW)), ["b", "a"]);
        assert_eq!(names(&pods_to_delete(&refs, &refs, 1, NOW)), ["a"]);
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let p = pod("a").on("n1").running().ready_at(NOW - 10).0;
        assert!(is_available(&p, 0, NOW));
        assert!(is_available(&p, 9, NOW));
        assert!(!is_available(&p, 10, NOW));
        assert!(!is_available(&pod("b").0, 0, NOW));
    }

    #[test]
    fn active_and_terminating_follow_phase_and_deletion() {
        let mut deleting = pod("a").on("n1").running().0;
        deleting["metadata"]["deletionTimestamp"] = json!(meta::format_time(NOW));
        let done = pod("b").phase("Succeeded").0;
        let running = pod("c").running().0;
        assert!(!is_active(&deleting) && is_terminating(&deleting));
        assert!(!is_active(&done) && !is_terminating(&done));
        assert!(is_active(&running) && !is_terminating(&running));
    }
}
