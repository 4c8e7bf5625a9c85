//! The format of the kept log tails: the ConfigMaps in which the controller
//! ([`crate::controller::tails`]) stores the final log lines of terminated
//! pods, and from which the support bundle ([`crate::ops::bundle`]) and
//! `agentdeck kept` read them. Both sides read this one description, so
//! neither needs the other.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Label of the ConfigMaps in which the controller keeps the final log
/// lines of terminated pods.
pub const LABEL_LOG_TAILS: &str = "agentdeck.dev/log-tails";
/// Annotation holding the index (`[{pod, container, key, capturedAt, reason}]`).
pub const ANNOTATION_INDEX: &str = "agentdeck.dev/log-tails-index";

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

/// Key of a container's tail in the ConfigMap's `data`.
pub fn data_key(pod: &str, container: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_what_the_index_names() {
        let index = vec![TailEntry {
            pod: "agent-0".into(),
            container: "agent".into(),
            key: data_key("agent-0", "agent"),
            captured_at: "2026-01-01T00:00:00Z".into(),
            reason: "Terminating".into(),
        }];
        let cm = serde_json::json!({
            "metadata": {"annotations": {ANNOTATION_INDEX: serde_json::to_string(&index).unwrap()}},
            "data": {"agent-0__agent.log": "last line\n", "stray.log": "not indexed"},
        });
        assert_eq!(
            entries(&cm),
            vec![("agent-0".into(), "agent".into(), "last line\n".into())]
        );
    }

    #[test]
    fn a_configmap_without_an_index_has_no_entries() {
        assert!(entries(&serde_json::json!({"data": {"a__b.log": "x"}})).is_empty());
    }
}
