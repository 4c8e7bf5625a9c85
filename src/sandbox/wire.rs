//! How objects go out on the wire: in the key order kube-apiserver writes
//! them, and as its JSON encoder ends a document, with a newline.
//!
//! The store keeps `serde_json::Value`s whose maps are sorted by key (the
//! crate does not enable serde_json's `preserve_order`: every map in the
//! product would pay for it, and an insertion order is not the schema's
//! order either). The apiserver writes Go structs, so their field order:
//! `kind`, `apiVersion`, `metadata` (in `ObjectMeta`'s own order), then the
//! body with `status` last; a `Status` as `metav1.Status` declares it; a
//! watch event as `type` then `object`. Deeper fields stay sorted, which is
//! as close to schema order as the data here can say.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// `ObjectMeta`'s fields in declaration order.
const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// `ListMeta`'s fields in declaration order.
const LIST_META: &[&str] = &[
    "selfLink",
    "resourceVersion",
    "continue",
    "remainingItemCount",
];

/// `metav1.Status`'s fields in declaration order.
const STATUS: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "status",
    "message",
    "reason",
    "details",
    "code",
];

/// The JSON of `value` in the apiserver's order, ending with a newline.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&Ordered(value)).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Appends the JSON of `value` in the apiserver's order (no newline).
pub fn write(out: &mut Vec<u8>, value: &Value) {
    let _ = serde_json::to_writer(out, &Ordered(value));
}

/// One watch event line: `{"type":…,"object":…}` and a newline.
pub fn event(kind: &str, object: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"type\":");
    let _ = serde_json::to_writer(&mut out, kind);
    out.extend_from_slice(b",\"object\":");
    write(&mut out, object);
    out.extend_from_slice(b"}\n");
    out
}

/// A value serialized in the apiserver's key order.
struct Ordered<'a>(&'a Value);

/// Which order a map's keys go out in.
#[derive(Clone, Copy)]
enum Shape {
    /// Sorted, except that an object (a map with `metadata`) leads with its
    /// type and metadata and ends with `status`.
    Any,
    /// `ObjectMeta` or `ListMeta`.
    Meta,
}

struct OrderedIn<'a>(&'a Value, Shape);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        OrderedIn(self.0, Shape::Any).serialize(s)
    }
}

impl Serialize for OrderedIn<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => serialize_map(map, self.1, s),
            Value::Array(items) => s.collect_seq(items.iter().map(Ordered)),
            other => other.serialize(s),
        }
    }
}

fn serialize_map<S: Serializer>(
    map: &Map<String, Value>,
    shape: Shape,
    s: S,
) -> Result<S::Ok, S::Error> {
    let keys = key_order(map, shape);
    let mut m = s.serialize_map(Some(keys.len()))?;
    for k in keys {
        let v = &map[k];
        let inner = if k == "metadata" && matches!(shape, Shape::Any) {
            Shape::Meta
        } else {
            Shape::Any
        };
        m.serialize_entry(k, &OrderedIn(v, inner))?;
    }
    m.end()
}

fn key_order(map: &Map<String, Value>, shape: Shape) -> Vec<&str> {
    let lead: &[&str] = match shape {
        Shape::Meta if map.contains_key("name") || map.contains_key("uid") => OBJECT_META,
        Shape::Meta => LIST_META,
        Shape::Any if map.get("kind").and_then(Value::as_str) == Some("Status") => STATUS,
        Shape::Any if map.contains_key("metadata") => &["kind", "apiVersion", "metadata"],
        Shape::Any => &[],
    };
    let mut keys: Vec<&str> = lead
        .iter()
        .copied()
        .filter(|k| map.contains_key(*k))
        .collect();
    let object = matches!(shape, Shape::Any) && map.contains_key("metadata");
    let rest = map
        .keys()
        .map(String::as_str)
        .filter(|k| !(lead.contains(k) || (object && *k == "status")));
    keys.extend(rest);
    if object && !lead.contains(&"status") && map.contains_key("status") {
        keys.push("status");
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &Value) -> String {
        String::from_utf8(to_vec(v)).expect("utf-8")
    }

    #[test]
    fn objects_lead_with_kind_api_version_and_metadata_and_end_with_status() {
        let pod = json!({"status": {"phase": "Running"}, "spec": {"containers": []},
            "metadata": {"uid": "u", "name": "p", "namespace": "ns", "labels": {"a": "b"}, "resourceVersion": "3"},
            "kind": "Pod", "apiVersion": "v1"});
        assert_eq!(
            text(&pod),
            "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\",\"resourceVersion\":\"3\",\"labels\":{\"a\":\"b\"}},\"spec\":{\"containers\":[]},\"status\":{\"phase\":\"Running\"}}\n"
        );
    }

    #[test]
    fn a_status_is_written_in_metav1_status_order() {
        let st = json!({"code": 404, "details": {"name": "x"}, "reason": "NotFound", "message": "m",
            "status": "Failure", "metadata": {}, "apiVersion": "v1", "kind": "Status"});
        assert_eq!(
            text(&st),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"m\",\"reason\":\"NotFound\",\"details\":{\"name\":\"x\"},\"code\":404}\n"
        );
    }

    #[test]
    fn list_items_and_pod_templates_are_ordered_too() {
        let list = json!({"items": [{"spec": {"template": {"spec": {}, "metadata": {"labels": {}}}}, "metadata": {"name": "d"}, "kind": "Deployment", "apiVersion": "apps/v1"}],
            "metadata": {"resourceVersion": "9", "continue": "c"}, "kind": "DeploymentList", "apiVersion": "apps/v1"});
        assert_eq!(
            text(&list),
            "{\"kind\":\"DeploymentList\",\"apiVersion\":\"apps/v1\",\"metadata\":{\"resourceVersion\":\"9\",\"continue\":\"c\"},\"items\":[{\"kind\":\"Deployment\",\"apiVersion\":\"apps/v1\",\"metadata\":{\"name\":\"d\"},\"spec\":{\"template\":{\"metadata\":{\"labels\":{}},\"spec\":{}}}}]}\n"
        );
    }

    #[test]
    fn watch_events_lead_with_their_type() {
        let line = event(
            "ADDED",
            &json!({"metadata": {"name": "a"}, "kind": "Pod", "apiVersion": "v1"}),
        );
        assert_eq!(
            String::from_utf8(line).expect("utf-8"),
            "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\"}}}\n"
        );
    }
}
