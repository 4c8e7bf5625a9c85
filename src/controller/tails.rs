//! The final log lines of agent and task pods that terminate, kept so that
//! a support bundle taken after an incident still has them.
//!
//! **Where.** One ConfigMap per pool, `agentdeck-log-tails-<pool>`,
//! labelled `agentdeck.dev/log-tails=true` and owned by the pool: it
//! survives controller restarts and failover (unlike memory), needs no
//! volume (unlike a file), is read by the bundle through the API with the
//! permissions it already has, and goes away with its pool.
//!
//! **Bounds.** Per container the last [`TAIL_BYTES`] (16 KiB) of its log; per
//! pool the last [`MAX_PODS`] (20) pods, oldest dropped first, and at most
//! [`MAX_TOTAL_BYTES`] (512 KiB) in all, well under the 1 MiB an object
//! may hold.
//!
//! **When.** The leader watches agentdeck-managed pods (debug pods
//! excepted) and captures a pod's tails when it starts terminating (its
//! `deletionTimestamp` appears, while the kubelet still serves its logs)
//! and again once it finished (phase Succeeded/Failed or every container
//! terminated), the later capture replacing the earlier.
//!
//! Tails are redacted before they are stored: a ConfigMap is often readable
//! by more people than pod logs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, LogParams, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::crd::{AgentPool, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY};
use crate::ops::bundle::LABEL_LOG_TAILS;
use crate::ops::bundle::redact::{RedactionCounts, Redactor};

/// Bytes kept of each container's log.
pub const TAIL_BYTES: usize = 16 * 1024;
/// Pods kept per pool.
pub const MAX_PODS: usize = 20;
/// Bytes kept per pool, over all its pods.
pub const MAX_TOTAL_BYTES: usize = 512 * 1024;
/// Annotation holding the index (`[{pod, container, key, capturedAt, reason}]`).
pub const ANNOTATION_INDEX: &str = "agentdeck.dev/log-tails-index";
/// Label of debug pods, whose logs are not kept.
pub const LABEL_DEBUG: &str = crate::ops::debug::LABEL_DEBUG_POD;

/// Name of the pool's tails ConfigMap.
pub fn configmap_name(pool: &str) -> String {
    format!("agentdeck-log-tails-{pool}")
}

/// One kept tail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TailEntry {
    /// The pod.
    pub pod: String,
    /// The container.
    pub container: String,
    /// Its key in `data`.
    pub key: String,
    /// When it was captured.
    pub captured_at: String,
    /// Why (`Terminating`, `Succeeded`, `Failed`, `Terminated`).
    pub reason: String,
}

fn data_key(pod: &str, container: &str) -> String {
    // `__` cannot occur in pod or container names (DNS names), so the key
    // splits back unambiguously; keys allow [-._a-zA-Z0-9].
    format!("{pod}__{container}.log")
}

/// The tails in a tails ConfigMap (as JSON): pod, container, text.
pub fn entries(cm: &Value) -> Vec<(String, String, String)> {
    let index: Vec<TailEntry> = cm["metadata"]["annotations"][ANNOTATION_INDEX]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    index
        .into_iter()
        .filter_map(|e| {
            let text = cm["data"][&e.key].as_str()?.to_owned();
            Some((e.pod, e.container, text))
        })
        .collect()
}

/// Keeps the last whole lines within `max` bytes of `log`.
pub fn tail_of(log: &str, max: usize) -> &str {
    if log.len() <= max {
        return log;
    }
    let mut from = log.len() - max;
    while !log.is_char_boundary(from) {
        from += 1;
    }
    match log[from..].find('\n') {
        Some(p) if from + p + 1 < log.len() => &log[from + p + 1..],
        _ => &log[from..],
    }
}

/// Adds `new` tails (replacing those of the same pod and container) to a
/// ConfigMap's index and data, then drops the oldest pods until the bounds
/// hold. Pure.
pub fn merge(
    index: &mut Vec<TailEntry>,
    data: &mut BTreeMap<String, String>,
    new: Vec<(TailEntry, String)>,
) {
    for (entry, text) in new {
        index.retain(|e| e.key != entry.key);
        data.insert(entry.key.clone(), text);
        index.push(entry);
    }
    index.sort_by(|a, b| a.captured_at.cmp(&b.captured_at));
    loop {
        let mut pods: Vec<&str> = Vec::new();
        for e in index.iter() {
            if !pods.contains(&e.pod.as_str()) {
                pods.push(&e.pod);
            }
        }
        let total: usize = index
            .iter()
            .filter_map(|e| data.get(&e.key))
            .map(String::len)
            .sum();
        if pods.len() <= MAX_PODS && total <= MAX_TOTAL_BYTES {
            break;
        }
        let Some(oldest) = pods.first().map(|p| (*p).to_owned()) else {
            break;
        };
        index.retain(|e| e.pod != oldest);
    }
    data.retain(|k, _| index.iter().any(|e| &e.key == k));
}

/// Why a pod's tails are due now, if they are.
fn capture_reason(pod: &Pod) -> Option<&'static str> {
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => return Some("Succeeded"),
        Some("Failed") => return Some("Failed"),
        _ => {}
    }
    let statuses = status.and_then(|s| s.container_statuses.as_ref());
    let all_terminated = statuses.is_some_and(|cs| {
        !cs.is_empty()
            && cs
                .iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
    });
    if pod.metadata.deletion_timestamp.is_some() {
        return Some(if all_terminated {
            "Terminated"
        } else {
            "Terminating"
        });
    }
    None
}

/// Runs until `cancel`: watches managed pods in `namespace` and keeps the
/// tails of those that terminate (only while leading).
pub(crate) async fn run(shared: Arc<Shared>, namespace: String, cancel: CancellationToken) {
    let pods: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    let config = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    let stream = watcher(pods.clone(), config)
        .default_backoff()
        .applied_objects();
    tokio::pin!(stream);
    // uid → reasons already captured (a pod is captured at most twice).
    let mut seen: HashMap<String, Vec<&'static str>> = HashMap::new();
    let redactor = Arc::new(Redactor::new(&[]));
    let locks: Arc<tokio::sync::Mutex<()>> = Arc::default();
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return,
            n = stream.next() => n,
        };
        let pod = match next {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "log tails: pod watch failed; retrying");
                continue;
            }
            None => return,
        };
        if !shared.leader.is_leader() || pod.labels().contains_key(LABEL_DEBUG) {
            continue;
        }
        let (Some(reason), Some(uid), Some(pool)) = (
            capture_reason(&pod),
            pod.uid(),
            pod.labels().get(LABEL_POOL).cloned(),
        ) else {
            continue;
        };
        let done = seen.entry(uid).or_default();
        let finished = reason != "Terminating";
        if done.contains(&reason) || (done.len() >= 2) || (!finished && !done.is_empty()) {
            continue;
        }
        done.push(reason);
        if seen.len() > 4096 {
            // Old pods are gone; forget the record (bounded memory).
            seen.clear();
        }
        let shared = shared.clone();
        let pods = pods.clone();
        let redactor = redactor.clone();
        let locks = locks.clone();
        let namespace = namespace.clone();
        tokio::spawn(async move {
            let new = capture(&pods, &pod, reason, &redactor).await;
            if new.is_empty() {
                return;
            }
            let _one_writer = locks.lock().await;
            if let Err(e) = store(&shared, &namespace, &pool, new).await {
                tracing::warn!(pod = %pod.name_any(), error = %e, "cannot keep the pod's final log lines");
            }
        });
    }
}

async fn capture(
    pods: &Api<Pod>,
    pod: &Pod,
    reason: &'static str,
    redactor: &Redactor,
) -> Vec<(TailEntry, String)> {
    let name = pod.name_any();
    let containers: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
        .collect();
    let now = Timestamp::now().to_string();
    let mut out = Vec::new();
    for container in containers {
        let lp = LogParams {
            container: Some(container.clone()),
            tail_lines: Some(400),
            ..LogParams::default()
        };
        let log = match tokio::time::timeout(Duration::from_secs(10), pods.logs(&name, &lp)).await {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                tracing::debug!(pod = %name, %container, error = %e, "no log to keep");
                continue;
            }
            Err(_) => continue,
        };
        let mut counts = RedactionCounts::new();
        let text = redactor.redact_str(tail_of(&log, TAIL_BYTES), &mut counts);
        out.push((
            TailEntry {
                pod: name.clone(),
                key: data_key(&name, &container),
                container,
                captured_at: now.clone(),
                reason: reason.to_owned(),
            },
            text,
        ));
    }
    out
}

async fn store(
    shared: &Shared,
    namespace: &str,
    pool: &str,
    new: Vec<(TailEntry, String)>,
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(shared.client.clone(), namespace);
    let name = configmap_name(pool);
    for _attempt in 0..5 {
        let existing = api.get_opt(&name).await?;
        let mut cm = existing.clone().unwrap_or_else(|| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([
                    (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
                    (LABEL_POOL.to_owned(), pool.to_owned()),
                    (LABEL_LOG_TAILS.to_owned(), "true".to_owned()),
                ])),
                owner_references: owner(shared, namespace, pool),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        });
        let mut index: Vec<TailEntry> = cm
            .annotations()
            .get(ANNOTATION_INDEX)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let mut data = cm.data.take().unwrap_or_default();
        merge(&mut index, &mut data, new.clone());
        cm.data = Some(data);
        cm.annotations_mut().insert(
            ANNOTATION_INDEX.to_owned(),
            serde_json::to_string(&index).unwrap_or_default(),
        );
        let result = if existing.is_some() {
            api.replace(&name, &PostParams::default(), &cm).await
        } else {
            api.create(&PostParams::default(), &cm).await
        };
        match result {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn owner(
    shared: &Shared,
    namespace: &str,
    pool: &str,
) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>> {
    let p = shared
        .view
        .pools
        .get(&kube::runtime::reflector::ObjectRef::<AgentPool>::new(pool).within(namespace))?;
    Some(vec![p.controller_owner_ref(&())?])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pod: &str, container: &str, at: &str) -> TailEntry {
        TailEntry {
            pod: pod.into(),
            container: container.into(),
            key: data_key(pod, container),
            captured_at: at.into(),
            reason: "Terminated".into(),
        }
    }

    #[test]
    fn a_tail_keeps_the_last_whole_lines_within_the_bound() {
        assert_eq!(tail_of("a\nbb\nccc\n", 6), "ccc\n");
        assert_eq!(tail_of("short\n", 100), "short\n");
        assert_eq!(tail_of("ééé", 3), "é");
    }

    #[test]
    fn the_oldest_pods_go_first_and_the_bounds_hold() {
        let mut index = Vec::new();
        let mut data = BTreeMap::new();
        for i in 0..(MAX_PODS + 5) {
            let at = format!("2026-01-01T00:00:{i:02}Z");
            merge(
                &mut index,
                &mut data,
                vec![
                    (entry(&format!("p{i}"), "worker", &at), format!("w{i}\n")),
                    (entry(&format!("p{i}"), "runner", &at), format!("r{i}\n")),
                ],
            );
        }
        let pods: std::collections::BTreeSet<_> = index.iter().map(|e| e.pod.clone()).collect();
        assert_eq!(pods.len(), MAX_PODS);
        assert!(!pods.contains("p0") && pods.contains(&format!("p{}", MAX_PODS + 4)));
        assert_eq!(data.len(), 2 * MAX_PODS);
        // A bigger tail evicts by bytes.
        let big = "x".repeat(TAIL_BYTES);
        for i in 0..40 {
            merge(
                &mut index,
                &mut data,
                vec![(
                    entry(
                        &format!("big{i}"),
                        "c",
                        &format!("2027-01-01T00:00:{i:02}Z"),
                    ),
                    big.clone(),
                )],
            );
        }
        assert!(data.values().map(String::len).sum::<usize>() <= MAX_TOTAL_BYTES);
        assert!(index.iter().any(|e| e.pod == "big39"));
    }

    #[test]
    fn entries_read_back_what_merge_wrote() {
        let mut index = Vec::new();
        let mut data = BTreeMap::new();
        merge(
            &mut index,
            &mut data,
            vec![(entry("my.pod-1", "agent", "t"), "last line\n".into())],
        );
        let cm = serde_json::json!({
            "metadata": {"annotations": {ANNOTATION_INDEX: serde_json::to_string(&index).expect("json")}},
            "data": data,
        });
        assert_eq!(
            entries(&cm),
            vec![(
                "my.pod-1".to_owned(),
                "agent".to_owned(),
                "last line\n".to_owned()
            )]
        );
    }
}
