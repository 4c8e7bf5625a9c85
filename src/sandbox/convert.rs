//! Conversion between a stored object and the version a client asked for,
//! where one storage has two views: `events.k8s.io/v1` Events are stored as
//! core/v1 Events, as kube-apiserver does (its conversion functions map
//! `regarding` to `involvedObject`, `note` to `message`, `deprecated*` to the
//! core fields and `reportingController` to `reportingComponent`).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::registry::ResourceInfo;

/// events.k8s.io/v1 field ↔ core/v1 field.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(obj: &mut Value, api_version: &str, to_core: bool) {
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    let mut moved = Map::new();
    for (v1, core) in EVENT_FIELDS {
        let (from, to) = if to_core { (v1, core) } else { (core, v1) };
        // A field of the other form is not part of this one: drop it.
        o.remove(to);
        if let Some(v) = o.remove(from).filter(|v| !v.is_null()) {
            moved.insert(to.to_owned(), v);
        }
    }
    o.extend(moved);
    o.insert("apiVersion".into(), Value::String(api_version.to_owned()));
}

/// The object as stored, from what a client of `info` sent.
pub fn to_storage(info: &ResourceInfo, mut obj: Value) -> Value {
    if info.is_view() {
        rename(&mut obj, "v1", true);
    }
    obj
}

/// The stored object as a client of `info` sees it.
pub fn present(info: &ResourceInfo, obj: Arc<Value>) -> Arc<Value> {
    if !info.is_view() {
        return obj;
    }
    let mut v = (*obj).clone();
    rename(&mut v, &info.api_version(), false);
    Arc::new(v)
}

/// [`present`] for an owned value.
pub fn present_value(info: &ResourceInfo, mut obj: Value) -> Value {
    if info.is_view() {
        rename(&mut obj, &info.api_version(), false);
    }
    obj
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn events_v1() -> ResourceInfo {
        ResourceInfo {
            group: "events.k8s.io".into(),
            version: "v1".into(),
            kind: "Event".into(),
            plural: "events".into(),
            singular: "event".into(),
            namespaced: true,
            verbs: vec![],
            short_names: vec![],
            categories: vec![],
            subresources: vec![],
        }
    }

    #[test]
    fn an_events_v1_event_is_stored_as_a_core_event_and_reads_back_the_same() {
        let sent = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "p.1", "namespace": "default"},
            "regarding": {"kind": "AgentPool", "name": "p"}, "note": "stuck",
            "reason": "Invalid", "type": "Warning", "action": "Reconcile",
            "reportingController": "agentdeck", "reportingInstance": "agentdeck-0",
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}});
        let stored = to_storage(&events_v1(), sent.clone());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "p");
        assert_eq!(stored["message"], "stuck");
        assert_eq!(stored["reportingComponent"], "agentdeck");
        assert_eq!(stored["series"]["count"], 2);
        assert!(stored.get("regarding").is_none() && stored.get("note").is_none());
        assert_eq!(present_value(&events_v1(), stored), sent);
    }

    #[test]
    fn other_resources_pass_through_unchanged() {
        let mut pods = events_v1();
        pods.group = String::new();
        pods.plural = "pods".into();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "note": "x"});
        assert_eq!(to_storage(&pods, pod.clone()), pod);
        assert_eq!(*present(&pods, Arc::new(pod.clone())), pod);
    }
}
