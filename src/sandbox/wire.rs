//! How objects go out on the wire: in the field order kube-apiserver writes
//! them, and as its JSON encoder ends a document, with a newline.
//!
//! The store keeps `serde_json::Value`s whose maps are sorted by key (the
//! crate does not enable serde_json's `preserve_order`: every map in the
//! product would pay for it, and an insertion order is not the schema's
//! order either). The apiserver writes Go structs: each struct's fields in
//! declaration order, at every depth, and each Go map sorted. `gotypes`
//! holds those structs, read from the API's Go sources, so an object of a
//! built-in kind (found by its `apiVersion` and `kind`), a list, a `Status`
//! and its `details`, a Table or a discovery document are written in their
//! structs' order; a watch event as `type` then `object`. A custom resource
//! is an unstructured map to the apiserver, so written sorted, as Go writes
//! a map. Keys a struct does not have come after its fields, sorted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::gotypes::{self, Ty, TypeId};

/// The JSON of `value` in the apiserver's order, ending with a newline.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&Ordered(value, top_shape(value))).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Appends the JSON of `value` in the apiserver's order (no newline).
pub fn write(out: &mut Vec<u8>, value: &Value) {
    let _ = serde_json::to_writer(out, &Ordered(value, top_shape(value)));
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

/// A list answer, written item by item from shared objects (a list of 10k
/// pods copies nothing): a built-in kind's List in its struct's order
/// (`kind`, `apiVersion`, `metadata`, `items`), a custom resource's as the
/// apiserver writes an unstructured list, sorted (`apiVersion`, `items`,
/// `kind`, `metadata`).
pub fn list(kind: &str, api_version: &str, metadata: &Value, items: &[Arc<Value>]) -> Vec<u8> {
    let t = gotypes::types();
    let typed = t.of_kind(api_version, kind).map(|list| {
        let field = |name: &str| {
            t.get(list)
                .field(name)
                .map_or(Shape::Untyped, |f| shape_of(&f.ty))
        };
        (field("metadata"), field("items"))
    });
    let mut out = Vec::with_capacity(256 + items.len() * 1024);
    let write_items = |out: &mut Vec<u8>, shape: Shape| {
        out.extend_from_slice(b"\"items\":[");
        for (i, item) in ENCODED.items(items, shape).iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item);
        }
        out.push(b']');
    };
    let string = |out: &mut Vec<u8>, s: &str| {
        let _ = serde_json::to_writer(out, s);
    };
    match typed {
        Some((meta, items)) => {
            out.extend_from_slice(b"{\"kind\":");
            string(&mut out, kind);
            out.extend_from_slice(b",\"apiVersion\":");
            string(&mut out, api_version);
            out.extend_from_slice(b",\"metadata\":");
            let _ = serde_json::to_writer(&mut out, &Ordered(metadata, meta));
            out.push(b',');
            write_items(&mut out, items);
        }
        None => {
            out.extend_from_slice(b"{\"apiVersion\":");
            string(&mut out, api_version);
            out.push(b',');
            write_items(&mut out, Shape::Sorted);
            out.extend_from_slice(b",\"kind\":");
            string(&mut out, kind);
            out.extend_from_slice(b",\"metadata\":");
            let _ = serde_json::to_writer(&mut out, &Ordered(metadata, Shape::Sorted));
        }
    }
    out.extend_from_slice(b"}\n");
    out
}

/// The JSON of the stored objects lists have written, each kept while its
/// object lives: an object is written the same in every list of its
/// resource, and a store's objects are never changed in place (a write
/// stores a new one; while one is kept here it cannot be: `Arc::get_mut`
/// refuses, and `Arc::make_mut` moves it, for the weak reference held
/// here). At 100,000 tasks and 10,000 pods, writing each
/// item afresh in its Go order was most of what a list cost the sandbox,
/// for every client that listed (the daemon, each console, each relist).
/// The real apiserver keeps its objects decoded in its watch cache and
/// encodes them per answer; what goes out is the same either way.
static ENCODED: Encoded = Encoded {
    by_object: Mutex::new(None),
};

/// An object (held weakly) and its JSON.
type KeptText = (Weak<Value>, Arc<[u8]>);

/// What [`ENCODED`] holds: by object address and shape, the object (weakly:
/// held, its address is not reused, and an entry whose object is gone is
/// known as such) and its JSON.
struct Encoded {
    by_object: Mutex<Option<EncodedMap>>,
}

struct EncodedMap {
    items: HashMap<(usize, Shape), KeptText>,
    /// Entries when gone objects' entries were last dropped.
    live_at_sweep: usize,
}

impl Encoded {
    /// The JSON of each of `items` as `shape`: kept, else written (and kept
    /// when the object is a store's, held elsewhere too; a copy made for
    /// this answer alone would never be asked for again).
    fn items(&self, items: &[Arc<Value>], shape: Shape) -> Vec<Arc<[u8]>> {
        let key = |item: &Arc<Value>| (Arc::as_ptr(item) as usize, shape);
        let mut found: Vec<Option<Arc<[u8]>>> = {
            let map = self
                .by_object
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            items
                .iter()
                .map(|item| {
                    let (_, text) = map.as_ref()?.items.get(&key(item))?;
                    Some(text.clone())
                })
                .collect()
        };
        let mut written = Vec::new();
        for (item, slot) in items.iter().zip(&mut found) {
            if slot.is_none() {
                let text: Arc<[u8]> = serde_json::to_vec(&Ordered(item, shape))
                    .unwrap_or_default()
                    .into();
                if Arc::strong_count(item) > 1 {
                    written.push((key(item), Arc::downgrade(item), text.clone()));
                }
                *slot = Some(text);
            }
        }
        if !written.is_empty() {
            let mut map = self
                .by_object
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let map = map.get_or_insert_with(|| EncodedMap {
                items: HashMap::new(),
                live_at_sweep: 0,
            });
            for (k, object, text) in written {
                map.items.insert(k, (object, text));
            }
            if map.items.len() > 2 * map.live_at_sweep + 1024 {
                map.items.retain(|_, (object, _)| object.strong_count() > 0);
                map.live_at_sweep = map.items.len();
            }
        }
        found.into_iter().flatten().collect()
    }
}

/// Which order a value's keys go out in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Shape {
    /// An object of this struct (or an array of them).
    Struct(TypeId),
    /// A Go map whose values are of this struct: keys sorted.
    MapOf(TypeId),
    /// Not known from where it sits: a built-in object (with `apiVersion`
    /// and `kind`) in its struct's order, anything else sorted.
    Untyped,
    /// A Go map all the way down (a custom resource): sorted.
    Sorted,
}

fn shape_of(ty: &Ty) -> Shape {
    match ty.shape() {
        Some((t, false)) => Shape::Struct(t),
        Some((t, true)) => Shape::MapOf(t),
        None => Shape::Untyped,
    }
}

/// The shape of a document: what its `apiVersion` and `kind` say; the
/// version document (`/version`, which has neither) as `version.Info`.
fn top_shape(value: &Value) -> Shape {
    let Some(map) = value.as_object() else {
        return Shape::Untyped;
    };
    if let Some(t) = object_type(map) {
        return Shape::Struct(t);
    }
    if map.contains_key("gitVersion")
        && !map.contains_key("kind")
        && let Some(t) = gotypes::types().named("version.Info")
    {
        return Shape::Struct(t);
    }
    if map.contains_key("apiVersion") && map.contains_key("kind") {
        // A custom resource (or its list).
        return Shape::Sorted;
    }
    Shape::Untyped
}

fn object_type(map: &Map<String, Value>) -> Option<TypeId> {
    let api_version = map.get("apiVersion")?.as_str()?;
    let kind = map.get("kind")?.as_str()?;
    gotypes::types().of_kind(api_version, kind)
}

/// A value serialized in the apiserver's key order.
struct Ordered<'a>(&'a Value, Shape);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => serialize_map(map, self.1, s),
            Value::Array(items) => s.collect_seq(items.iter().map(|i| Ordered(i, self.1))),
            other => other.serialize(s),
        }
    }
}

fn serialize_map<S: Serializer>(
    map: &Map<String, Value>,
    shape: Shape,
    s: S,
) -> Result<S::Ok, S::Error> {
    let shape = match shape {
        Shape::Untyped => object_type(map).map_or(Shape::Untyped, Shape::Struct),
        other => other,
    };
    let mut m = s.serialize_map(Some(map.len()))?;
    match shape {
        Shape::Struct(t) => {
            for (k, v, ty) in gotypes::types().order(t, map) {
                let inner = ty.map_or(Shape::Untyped, shape_of);
                m.serialize_entry(k, &Ordered(v, inner))?;
            }
        }
        Shape::MapOf(t) => {
            for (k, v) in map {
                m.serialize_entry(k, &Ordered(v, Shape::Struct(t)))?;
            }
        }
        Shape::Untyped | Shape::Sorted => {
            for (k, v) in map {
                m.serialize_entry(k, &Ordered(v, shape))?;
            }
        }
    }
    m.end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &Value) -> String {
        String::from_utf8(to_vec(v)).expect("utf-8")
    }

    #[test]
    fn objects_are_written_in_their_structs_order_at_every_depth() {
        let pod = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "t"}]},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i", "ports": [{"protocol": "TCP", "containerPort": 80}]}]},
            "metadata": {"uid": "u", "name": "p", "namespace": "ns", "labels": {"b": "1", "a": "2"}, "resourceVersion": "3"},
            "kind": "Pod", "apiVersion": "v1"});
        assert_eq!(
            text(&pod),
            concat!(
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","uid":"u","resourceVersion":"3","labels":{"a":"2","b":"1"}},"#,
                r#""spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80,"protocol":"TCP"}]}],"nodeName":"n"},"#,
                r#""status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"t"}]}}"#,
                "\n"
            )
        );
    }

    #[test]
    fn a_status_and_its_details_are_written_in_metav1_order() {
        let st = json!({"code": 409, "details": {"kind": "configmaps", "name": "dup"}, "reason": "AlreadyExists", "message": "m",
            "status": "Failure", "metadata": {}, "apiVersion": "v1", "kind": "Status"});
        assert_eq!(
            text(&st),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"m\",\"reason\":\"AlreadyExists\",\"details\":{\"name\":\"dup\",\"kind\":\"configmaps\"},\"code\":409}\n"
        );
    }

    #[test]
    fn lists_are_written_in_their_structs_order_and_custom_resources_sorted() {
        let d = json!({"spec": {"template": {"spec": {}, "metadata": {"labels": {}}}, "replicas": 1}, "metadata": {"name": "d"}, "kind": "Deployment", "apiVersion": "apps/v1"});
        let bytes = list(
            "DeploymentList",
            "apps/v1",
            &json!({"resourceVersion": "9", "continue": "c"}),
            &[Arc::new(d)],
        );
        assert_eq!(
            String::from_utf8(bytes).expect("utf-8"),
            "{\"kind\":\"DeploymentList\",\"apiVersion\":\"apps/v1\",\"metadata\":{\"resourceVersion\":\"9\",\"continue\":\"c\"},\"items\":[{\"kind\":\"Deployment\",\"apiVersion\":\"apps/v1\",\"metadata\":{\"name\":\"d\"},\"spec\":{\"replicas\":1,\"template\":{\"metadata\":{\"labels\":{}},\"spec\":{}}}}]}\n"
        );
        let w = json!({"spec": {"z": 1, "a": 2}, "metadata": {"name": "w", "namespace": "ns"}, "kind": "Widget", "apiVersion": "fx.example.com/v1"});
        assert_eq!(
            text(&w),
            "{\"apiVersion\":\"fx.example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"name\":\"w\",\"namespace\":\"ns\"},\"spec\":{\"a\":2,\"z\":1}}\n"
        );
        let bytes = list(
            "WidgetList",
            "fx.example.com/v1",
            &json!({"resourceVersion": "9", "continue": ""}),
            &[Arc::new(w)],
        );
        assert!(
            String::from_utf8(bytes)
                .expect("utf-8")
                .starts_with("{\"apiVersion\":\"fx.example.com/v1\",\"items\":[{\"apiVersion\""),
        );
    }

    #[test]
    fn a_stored_object_is_written_alike_in_every_list_and_a_new_one_afresh() {
        let pod = |name: &str, phase: &str| {
            Arc::new(
                json!({"status": {"phase": phase}, "metadata": {"name": name, "namespace": "ns"}, "kind": "Pod", "apiVersion": "v1"}),
            )
        };
        let listed = |items: &[Arc<Value>]| {
            String::from_utf8(list(
                "PodList",
                "v1",
                &json!({"resourceVersion": "5"}),
                items,
            ))
            .expect("utf-8")
        };
        let want = |phases: &[(&str, &str)]| {
            let items: Vec<String> = phases
                .iter()
                .map(|(name, phase)| format!("{{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"ns\"}},\"status\":{{\"phase\":\"{phase}\"}}}}"))
                .collect();
            format!(
                "{{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"5\"}},\"items\":[{}]}}\n",
                items.join(",")
            )
        };
        // A store's objects: held by the store and by each list's items.
        let mut store = vec![pod("a", "Pending"), pod("b", "Pending")];
        let first = listed(&store.clone());
        assert_eq!(first, want(&[("a", "Pending"), ("b", "Pending")]));
        assert_eq!(
            listed(&store.clone()),
            first,
            "written again from what was kept"
        );
        // A write stores a new object: the list has it, not the old text.
        store[0] = pod("a", "Running");
        assert_eq!(
            listed(&store.clone()),
            want(&[("a", "Running"), ("b", "Pending")])
        );
        // Many objects come and go: the kept text of the gone is dropped
        // and no new object is given an old one's text.
        let kept = Encoded {
            by_object: Mutex::new(None),
        };
        for round in 0..4 {
            let phase = ["Running", "Succeeded", "Failed", "Unknown"][round];
            let many: Vec<Arc<Value>> = (0..1500).map(|i| pod(&format!("p{i}"), phase)).collect();
            let texts = kept.items(&many.clone(), top_shape(&many[0]));
            for (i, text) in texts.iter().enumerate() {
                let text = std::str::from_utf8(text).expect("utf-8");
                assert!(
                    text.contains(&format!("\"name\":\"p{i}\"")) && text.contains(phase),
                    "round {round}: {text}"
                );
            }
            let held = kept
                .by_object
                .lock()
                .map_or(0, |m| m.as_ref().map_or(0, |m| m.items.len()));
            assert!(
                (1500..=2 * 1500 + 1024).contains(&held),
                "round {round}: {held:?} kept"
            );
        }
    }

    #[test]
    fn watch_events_lead_with_their_type_and_embedded_objects_keep_their_order() {
        let line = event(
            "ADDED",
            &json!({"metadata": {"name": "a"}, "kind": "Pod", "apiVersion": "v1"}),
        );
        assert_eq!(
            String::from_utf8(line).expect("utf-8"),
            "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\"}}}\n"
        );
        // A Table row's object (a RawExtension) is a whole object.
        let table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "1"},
            "columnDefinitions": [], "rows": [{"object": {"metadata": {"name": "x"}, "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}, "cells": ["x"]}]});
        assert_eq!(
            text(&table),
            "{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"1\"},\"columnDefinitions\":[],\"rows\":[{\"cells\":[\"x\"],\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"name\":\"x\"}}}]}\n"
        );
    }

    #[test]
    fn the_version_document_is_written_as_version_info() {
        let v = json!({"platform": "linux/amd64", "gitVersion": "v1.33.0", "minor": "33", "major": "1"});
        assert_eq!(
            text(&v),
            "{\"major\":\"1\",\"minor\":\"33\",\"gitVersion\":\"v1.33.0\",\"platform\":\"linux/amd64\"}\n"
        );
    }
}
