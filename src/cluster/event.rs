//! An Event as the console caches it: only the fields its rows read.
//!
//! The console watches every Event in its namespaces, and at 100,000
//! tasks that is tens of thousands of them. k8s-openapi's `Event` is about
//! a kilobyte inline (its `related` ObjectReference, `series`, `source`
//! and the reporting fields each have their room, mostly empty), and the
//! text of what is not read (the involved object's uid, apiVersion,
//! resourceVersion and fieldPath, the reporting component and instance)
//! is allocated for each. Decoded as a [`CachedEvent`], what is not kept is
//! skipped while decoding. Field names and types follow k8s-openapi's, so
//! code reads a cached event as it would an `Event`; the YAML view GETs
//! the whole one (as it does a pod).

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// An Event with the fields the console reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedEvent {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub involved_object: CachedObjectReference,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    pub count: Option<i32>,
    #[serde(default)]
    pub first_timestamp: Option<Time>,
    #[serde(default)]
    pub last_timestamp: Option<Time>,
    #[serde(default)]
    pub event_time: Option<MicroTime>,
}

/// What is kept of `involvedObject`: what it is and where.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CachedObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

cached_form!(CachedEvent, Event);

/// A cached event as an Event object (`apiVersion` and `kind` first), for
/// the YAML shown when the whole one cannot be fetched.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Shown<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a ObjectMeta,
    involved_object: &'a CachedObjectReference,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: &'a Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    type_: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: &'a Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_timestamp: &'a Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_timestamp: &'a Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_time: &'a Option<MicroTime>,
}

impl Serialize for CachedEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Shown {
            api_version: <Self as k8s_openapi::Resource>::API_VERSION,
            kind: <Self as k8s_openapi::Resource>::KIND,
            metadata: &self.metadata,
            involved_object: &self.involved_object,
            reason: &self.reason,
            message: &self.message,
            type_: &self.type_,
            count: &self.count,
            first_timestamp: &self.first_timestamp,
            last_timestamp: &self.last_timestamp,
            event_time: &self.event_time,
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "t-1.18c", "namespace": "ns", "resourceVersion": "7",
                "creationTimestamp": "2026-12-06T10:00:00Z"},
            "involvedObject": {"kind": "AgentTask", "namespace": "ns", "name": "t-1",
                "uid": "4d1c-…", "apiVersion": "agentdeck.dev/v1alpha1",
                "resourceVersion": "6", "fieldPath": "status"},
            "reason": "Claimed", "message": "claimed by iac-agent-a-0", "type": "Normal",
            "count": 3,
            "firstTimestamp": "2026-12-06T10:00:00Z", "lastTimestamp": "2026-12-06T10:01:00Z",
            "eventTime": "2026-12-06T10:00:00.123456Z",
            "source": {"component": "agentdeck", "host": "node-1"},
            "reportingComponent": "agentdeck.dev/controller", "reportingInstance": "pod-1",
            "action": "Claim",
            "related": {"kind": "Pod", "name": "iac-agent-a-0", "namespace": "ns"},
            "series": {"count": 2, "lastObservedTime": "2026-12-06T10:01:00.000000Z"}
        })
    }

    #[test]
    fn a_cached_event_keeps_what_the_rows_read_and_skips_the_rest() {
        let e: CachedEvent = serde_json::from_value(event()).expect("decodes");
        assert_eq!(e.metadata.name.as_deref(), Some("t-1.18c"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert!(e.metadata.creation_timestamp.is_some());
        let o = &e.involved_object;
        assert_eq!(
            (o.kind.as_deref(), o.namespace.as_deref(), o.name.as_deref()),
            (Some("AgentTask"), Some("ns"), Some("t-1"))
        );
        assert_eq!(e.reason.as_deref(), Some("Claimed"));
        assert_eq!(e.message.as_deref(), Some("claimed by iac-agent-a-0"));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.count, Some(3));
        assert!(e.first_timestamp.is_some() && e.last_timestamp.is_some());
        assert!(e.event_time.is_some());

        let shown = serde_json::to_value(&e).expect("serialises");
        assert_eq!(shown["apiVersion"], "v1");
        assert_eq!(shown["kind"], "Event");
        assert_eq!(shown["type"], "Normal");
        assert_eq!(shown["involvedObject"]["name"], "t-1");
        assert_eq!(shown["lastTimestamp"], "2026-12-06T10:01:00Z");
        for gone in [
            "source",
            "related",
            "series",
            "action",
            "reportingComponent",
        ] {
            assert!(shown.get(gone).is_none(), "{gone}");
        }
        assert!(shown["involvedObject"].get("uid").is_none());
        // What is shown decodes to the same cached event.
        let again: CachedEvent = serde_json::from_value(shown).expect("round trip");
        assert_eq!(again, e);
    }

    #[test]
    fn a_whole_event_converts_to_the_same_cached_event_the_watch_decodes() {
        let whole: Event = serde_json::from_value(event()).expect("event");
        let decoded: CachedEvent = serde_json::from_value(event()).expect("cached");
        assert_eq!(CachedEvent::of(&whole), decoded);
    }

    #[test]
    fn a_cached_event_is_well_under_an_event_inline() {
        // Most of what is left is the ObjectMeta (360 B) every store object has.
        let cached = std::mem::size_of::<CachedEvent>();
        let whole = std::mem::size_of::<Event>();
        assert!(cached * 3 < whole * 2, "cached {cached} B, whole {whole} B");
    }
}
