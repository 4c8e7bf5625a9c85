//! List pages decoded without `metadata.managedFields`.
//!
//! Every watch here drops an object's managedFields as soon as it is
//! decoded: nothing reads them, and they are about 40% of an object's JSON
//! (an agent task's or an agent pod's alike). Decoded, they are also its
//! most costly part: each `fieldsV1` is a tree of `serde_json::Value` maps,
//! every key a `String` and every map a B-tree, built and freed at once. A
//! page decoded with [`items`] skips them in the text instead (as serde
//! skips a field it does not know), so the objects come out as the watch
//! would have kept them, and those allocations never happen.
//!
//! Only `metadata.managedFields` of each item is skipped: a field of that
//! name anywhere else (in a spec, a label key) is decoded as usual.
//!
//! [`head`] reads a page's list metadata (its `continue` token) and stops:
//! the API server writes it before the items, so the next page can be
//! asked for without a pass over this one's items first.

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess,
    Visitor,
};

/// The `items` of a list page, each without `metadata.managedFields`.
pub fn items<K: DeserializeOwned>(text: &str) -> serde_json::Result<Vec<K>> {
    items_emptying(text, &[])
}

/// [`items`], with the `status` fields named in `emptied` read as the
/// empty string whatever their text (skipped as `managedFields` are, so
/// their text is never copied): a task's `status.outputTail` (see
/// `cluster::strip_task`, which does the same to a watched task).
pub fn items_emptying<K: DeserializeOwned>(
    text: &str,
    emptied: Emptied,
) -> serde_json::Result<Vec<K>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let items = de.deserialize_map(PageVisitor(PhantomData, emptied))?;
    de.end()?;
    Ok(items)
}

/// Names of `status` fields read as the empty string.
pub type Emptied = &'static [&'static str];

/// A page's list metadata (`resourceVersion`, `continue`); the default when
/// it has none. The text after it is not read (not even checked: [`items`]
/// does that), unless it comes after the items.
pub fn head(text: &str) -> serde_json::Result<ListMeta> {
    if let Some(meta) = trailing_head(text) {
        return Ok(meta);
    }
    let mut found = None;
    let read = serde_json::Deserializer::from_str(text).deserialize_map(HeadVisitor(&mut found));
    match (found, read) {
        (Some(meta), _) => Ok(meta),
        (None, Ok(())) => Ok(ListMeta::default()),
        (None, Err(e)) => Err(e),
    }
}

/// The list metadata of a page that ends with it, read from the end: a
/// custom resource's list is written as an unstructured map, keys sorted
/// (`apiVersion`, `items`, `kind`, `metadata`), so its `continue` token
/// comes after every item, and a scan from the start passed over the
/// whole page (100,000 tasks: 200 pages read twice, and each next page
/// asked for only after the scan). The last `"metadata":` of the text is
/// taken when a list metadata object follows it and then only the page's
/// closing brace: unescaped quotes are never inside a JSON string, so it
/// is a key, and only the page object's last key is followed by its end.
/// `None` otherwise (a built-in kind's list, whose metadata comes first;
/// an escaped key), and [`head`] reads from the start.
fn trailing_head(text: &str) -> Option<ListMeta> {
    const KEY: &str = "\"metadata\":";
    let at = text.rfind(KEY)?;
    let rest = &text[at + KEY.len()..];
    let mut read = serde_json::Deserializer::from_str(rest).into_iter::<ListMeta>();
    let meta = read.next()?.ok()?;
    (rest[read.byte_offset()..].trim() == "}").then_some(meta)
}

/// Keeps the page's `metadata` and stops there.
struct HeadVisitor<'a>(&'a mut Option<ListMeta>);

impl<'de> Visitor<'de> for HeadVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.as_str() == "metadata" {
                *self.0 = Some(map.next_value()?);
                // Not an error: the way to stop the parser mid-object.
                return Err(de::Error::custom("list metadata read"));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

/// Which map keys to look at, and how.
#[derive(Clone, Copy)]
enum Level {
    /// An item: its `metadata` is decoded at [`Level::Meta`], its `status`
    /// (when some of its fields are emptied) at [`Level::Status`].
    Item(Emptied),
    /// An item's metadata: its `managedFields` are skipped.
    Meta,
    /// An item's status: the fields named are read as the empty string.
    Status(Emptied),
}

impl Level {
    /// `inner` (a deserializer, visitor or seed) wrapped at this level.
    fn wrap<T>(self, inner: T) -> Slim<T> {
        Slim { level: self, inner }
    }
}

/// The page object: `items` decoded, everything else (`metadata`, read
/// before, `apiVersion`, `kind`) skipped.
struct PageVisitor<K>(PhantomData<K>, Emptied);

impl<'de, K: DeserializeOwned> Visitor<'de> for PageVisitor<K> {
    type Value = Vec<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<K>, A::Error> {
        let mut items = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.as_str() == "items" {
                // `null` items are an empty list, as kube's `ObjectList` has them.
                items = map.next_value_seed(ItemsSeed(PhantomData, self.1))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(items.unwrap_or_default())
    }
}

/// `items`: `null` or an array of objects.
struct ItemsSeed<K>(PhantomData<K>, Emptied);

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ItemsSeed<K> {
    type Value = Option<Vec<K>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ItemsSeed<K> {
    type Value = Option<Vec<K>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let level = Level::Item(self.1);
        while let Some(item) = seq.next_element_seed(level.wrap(PhantomData::<K>))? {
            items.push(item);
        }
        Ok(Some(items))
    }
}

/// A deserializer, visitor or seed (`inner`) wrapped at `level`.
struct Slim<T> {
    level: Level,
    inner: T,
}

/// A seed decoding through a deserializer wrapped at `level`: an item
/// (the seed `PhantomData<K>`), or an item's `metadata` value.
impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Slim<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(self.level.wrap(d))
    }
}

/// Deserializer methods handed to the wrapped deserializer as they are.
macro_rules! forward {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
                self.inner.$method(v)
            }
        )*
    };
}

/// A deserializer whose maps go through [`SlimMap`]; anything else is the
/// wrapped deserializer's own.
impl<'de, D: Deserializer<'de>> Deserializer<'de> for Slim<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(self.level.wrap(v))
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(self.level.wrap(v))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_struct(name, fields, self.level.wrap(v))
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        // `Some` is decoded through the wrapper too (an `Option<ObjectMeta>`).
        self.inner.deserialize_option(self.level.wrap(v))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_newtype_struct(name, self.level.wrap(v))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_enum(name, variants, v)
    }

    forward! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_seq deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_unit_struct(name, v)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple(len, v)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple_struct(name, len, v)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// A visitor whose maps go through [`SlimMap`] (and whose `Some` through
/// the wrapper); anything else is the wrapped visitor's own.
impl<'de, V: Visitor<'de>> Visitor<'de> for Slim<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(SlimMap {
            level: self.level,
            inner: map,
            value_level: None,
            value_emptied: false,
        })
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(self.level.wrap(d))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(self.level.wrap(d))
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.inner.visit_bool(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.inner.visit_i64(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.inner.visit_f64(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.inner.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.inner.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.inner.visit_string(v)
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<V::Value, E> {
        self.inner.visit_i128(v)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<V::Value, E> {
        self.inner.visit_u128(v)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        self.inner.visit_bytes(v)
    }

    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<V::Value, E> {
        self.inner.visit_borrowed_bytes(v)
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<V::Value, E> {
        self.inner.visit_byte_buf(v)
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// An object's keys at `level`: an item's `metadata` is handed on wrapped
/// at [`Level::Meta`]; a metadata's `managedFields` are skipped.
struct SlimMap<A> {
    level: Level,
    inner: A,
    /// The level the value of the key just read is decoded at.
    value_level: Option<Level>,
    /// The value of the key just read is skipped and read as `""`.
    value_emptied: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for SlimMap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            self.value_level = match (self.level, key.as_str()) {
                (Level::Meta, "managedFields") => {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                (Level::Item(_), "metadata") => Some(Level::Meta),
                (Level::Item(emptied), "status") if !emptied.is_empty() => {
                    Some(Level::Status(emptied))
                }
                (Level::Status(emptied), k) => {
                    self.value_emptied = emptied.contains(&k);
                    None
                }
                _ => None,
            };
            return match key {
                Key::Borrowed(k) => seed.deserialize(BorrowedStrDeserializer::<A::Error>::new(k)),
                Key::Owned(k) => seed.deserialize(StringDeserializer::<A::Error>::new(k)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.value_emptied) {
            self.inner.next_value::<IgnoredAny>()?;
            return seed.deserialize(EmptyStr(PhantomData));
        }
        match self.value_level.take() {
            Some(level) => self.inner.next_value_seed(level.wrap(seed)),
            None => self.inner.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// The empty string, also as `Some` of an optional one.
struct EmptyStr<E>(PhantomData<E>);

impl<'de, E: de::Error> Deserializer<'de> for EmptyStr<E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        v.visit_borrowed_str("")
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        v.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple tuple_struct
        map struct enum identifier ignored_any
    }
}

/// A map key, borrowed from the text when it holds no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(k) => k,
            Key::Owned(k) => k,
        }
    }
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::pod::CachedPod;
    use crate::crd::AgentTask;
    use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
    use kube::core::ObjectList;
    use kube::{Resource, ResourceExt};
    use serde_json::{Value, json};

    fn managed() -> Value {
        json!([
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet",
             "operation": "Update", "subresource": "status", "time": "2026-11-27T09:42:33Z",
             "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {
                 "k:{\"name\":\"agent\"}": {".": {}, "f:ready": {}}}}}},
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubectl",
             "operation": "Apply", "time": "2026-11-27T09:42:30Z", "fieldsV1": {"f:spec": {}}}
        ])
    }

    fn page(items: Vec<Value>) -> String {
        json!({
            "apiVersion": "v1", "kind": "List",
            "metadata": {"resourceVersion": "42", "continue": "abc"},
            "items": items,
        })
        .to_string()
    }

    /// What the watch kept before: the whole page decoded, then each
    /// item's managedFields dropped.
    fn decoded_then_dropped<K: Resource + DeserializeOwned + Clone>(text: &str) -> Vec<K> {
        let mut list: ObjectList<K> = serde_json::from_str(text).expect("decodes whole");
        for item in &mut list.items {
            item.meta_mut().managed_fields = None;
        }
        list.items
    }

    #[test]
    fn an_emptied_status_field_is_read_as_the_empty_string_and_nothing_else_is() {
        let tail = "Plan: 3 to add\nError: \"lock\" held\n".repeat(50);
        let task = |name: &str, status: Value| {
            json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": name, "namespace": "ns", "managedFields": managed(),
                    "labels": {"outputTail": "a label"}},
                "spec": {"pool": "p", "env": [{"name": "outputTail", "value": "an env"}]},
                "status": status,
            })
        };
        let listed = vec![
            task(
                "done",
                json!({"phase": "Failed", "exitCode": 1, "outputTail": tail,
                "message": "exited with 1", "attempts": 2}),
            ),
            task("running", json!({"phase": "Running", "agent": "a-0"})),
            task("new", Value::Null),
        ];
        let text = page(listed);
        let slim: Vec<AgentTask> = items_emptying(&text, &["outputTail"]).expect("decodes");
        let mut whole: Vec<AgentTask> = decoded_then_dropped(&text);
        assert_eq!(
            whole[0]
                .status
                .as_ref()
                .and_then(|s| s.output_tail.as_deref()),
            Some(tail.as_str())
        );
        for t in &mut whole {
            crate::cluster::strip_task(t);
        }
        // As a watched task is stripped (see `strip_task`): the tail is
        // an empty string with no bytes behind it; the rest is as listed.
        assert_eq!(slim, whole);
        let kept = slim[0].status.as_ref().and_then(|s| s.output_tail.as_ref());
        assert_eq!(kept.map(String::capacity), Some(0));
        assert_eq!(
            slim[0].labels().get("outputTail").map(String::as_str),
            Some("a label")
        );
        assert_eq!(slim[0].spec.env[0].value.as_deref(), Some("an env"));
        // Without names, nothing is emptied.
        let all: Vec<AgentTask> = items(&text).expect("decodes");
        assert_eq!(
            all[0]
                .status
                .as_ref()
                .and_then(|s| s.output_tail.as_deref()),
            Some(tail.as_str())
        );
    }

    fn agent_pod(i: usize) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("agent-{i}"), "namespace": "ns", "uid": "u",
                "resourceVersion": "7", "creationTimestamp": "2026-11-27T09:42:30Z",
                "labels": {"agentdeck.dev/pool": "a", "managedFields": "a label"},
                "annotations": {"managedFields": "an annotation"},
                "managedFields": managed(),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "rs", "uid": "r", "controller": true}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "agent", "image": "img:1",
                "ports": [{"name": "health", "containerPort": 8081}],
                "env": [{"name": "managedFields", "value": "1"}]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.7",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "agent", "ready": true, "restartCount": 2,
                    "image": "img:1", "imageID": "",
                    "state": {"running": {"startedAt": "2026-11-27T09:42:31Z"}}}]}
        })
    }

    #[test]
    fn items_are_the_whole_decode_without_managed_fields() {
        let pods = page((0..3).map(agent_pod).collect());
        let slim: Vec<CachedPod> = items(&pods).expect("cached pods");
        assert_eq!(slim, decoded_then_dropped::<CachedPod>(&pods));
        assert_eq!(slim.len(), 3);
        let whole: Vec<Pod> = items(&pods).expect("pods");
        assert_eq!(whole, decoded_then_dropped::<Pod>(&pods));
        // Only metadata's own managedFields go: a label, an annotation and
        // an env var of that name stay.
        let meta = &whole[0].metadata;
        assert!(meta.managed_fields.is_none());
        assert_eq!(meta.labels.as_ref().unwrap()["managedFields"], "a label");
        assert_eq!(
            meta.annotations.as_ref().unwrap()["managedFields"],
            "an annotation"
        );
        assert_eq!(meta.owner_references.as_ref().unwrap()[0].name, "rs");
        let env = whole[0].spec.as_ref().unwrap().containers[0]
            .env
            .as_ref()
            .unwrap();
        assert_eq!(env[0].name, "managedFields");

        let tasks = page(
            (0..2)
                .map(|i| {
                    json!({
                        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                        "metadata": {"name": format!("t-{i}"), "namespace": "ns",
                            "generation": 1, "managedFields": managed()},
                        "spec": {"pool": "a", "command": ["echo", "\"managedFields\": []"]},
                        "status": {"phase": "Failed", "message": "exit 1", "attempts": 2}
                    })
                })
                .collect(),
        );
        let slim: Vec<AgentTask> = items(&tasks).expect("tasks");
        assert_eq!(slim, decoded_then_dropped::<AgentTask>(&tasks));
        assert_eq!(slim[1].spec.command[1], "\"managedFields\": []");

        let events = page(vec![json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns", "managedFields": managed()},
            "involvedObject": {"kind": "Pod", "name": "agent-0"},
            "reason": "Started", "message": "m", "count": 3,
            "lastTimestamp": "2026-11-27T09:42:31Z"
        })]);
        let slim: Vec<Event> = items(&events).expect("events");
        assert_eq!(slim, decoded_then_dropped::<Event>(&events));
        assert_eq!(slim[0].count, Some(3));
    }

    #[test]
    fn escaped_keys_are_read_as_their_text() {
        // `metadata` and `managedFields` spelt with escapes still mean them.
        let text = r#"{"items": [{"apiVersion": "v1", "kind": "ConfigMap",
            "meta\u0064ata": {"name": "c", "managed\u0046ields": [{"manager": "m"}],
                "l\u0061bels": {"a": "b"}},
            "data": {"managedFields": "kept", "k\u0065y": "v"}}]}"#;
        let slim: Vec<ConfigMap> = items(text).expect("config maps");
        assert_eq!(slim, decoded_then_dropped::<ConfigMap>(text));
        assert_eq!(slim[0].metadata.name.as_deref(), Some("c"));
        assert_eq!(slim[0].metadata.labels.as_ref().unwrap()["a"], "b");
        let data = slim[0].data.as_ref().unwrap();
        assert_eq!(
            (data["managedFields"].as_str(), data["key"].as_str()),
            ("kept", "v")
        );
    }

    #[test]
    fn the_head_is_the_list_metadata_wherever_it_is() {
        let meta = head(&page(vec![agent_pod(0)])).expect("head");
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(meta.continue_.as_deref(), Some("abc"));
        // Read before the items, which are not looked at: broken ones too.
        let meta = head(r#"{"metadata": {"resourceVersion": "7"}, "items": [{"#).expect("head");
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        // After the items, and with escapes in its name.
        let meta = head(
            r#"{"items": [{"metadata": {"resourceVersion": "1"}}],
            "met\u0061data": {"continue": "c", "remainingItemCount": 3}}"#,
        )
        .expect("head");
        assert_eq!(meta.continue_.as_deref(), Some("c"));
        assert_eq!(meta.remaining_item_count, Some(3));
        // At the end as a custom resource's list has it (keys sorted), read
        // from the end even when the items before it are broken; an item's
        // own metadata last in the text is not taken for the page's.
        let meta = head(
            r#"{"apiVersion":"a/v1","items":[{"metadata":{"name":"x"}}{,"kind":"L","metadata":{"continue":"t","resourceVersion":"9"}}
"#,
        )
        .expect("head");
        assert_eq!(meta.continue_.as_deref(), Some("t"));
        assert_eq!(meta.resource_version.as_deref(), Some("9"));
        let meta = head(
            r#"{"kind":"L","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"resourceVersion":"1"}}]}"#,
        )
        .expect("head");
        assert_eq!(meta.resource_version.as_deref(), Some("5"));
        let meta = head(
            r#"{"metadata":{"resourceVersion":"6"},"items":[{"spec":{},"metadata":{"resourceVersion":"2"}}]}"#,
        )
        .expect("head");
        assert_eq!(meta.resource_version.as_deref(), Some("6"));
        // None at all: the default, as a missing field.
        assert_eq!(head(r#"{"items": []}"#).expect("head"), ListMeta::default());
        for text in [
            r#"{"metadata": {"continue": 3}}"#,
            r#"{"items": [}"#,
            "[]",
            "",
        ] {
            assert!(head(text).is_err(), "{text}");
        }
    }

    #[test]
    fn an_empty_page_has_no_items_and_a_broken_one_is_an_error() {
        for text in [
            r#"{"kind": "List", "metadata": {"resourceVersion": "1"}, "items": null}"#,
            r#"{"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}"#,
            r#"{"kind": "List", "metadata": {"resourceVersion": "1"}}"#,
        ] {
            assert!(items::<Pod>(text).expect(text).is_empty(), "{text}");
        }
        for text in [
            r#"{"items": [{"metadata": {"name": 3}}]}"#,
            r#"{"items": [{"metadata": {"managedFields": [}}]}"#,
            r#"{"items": {}}"#,
            r#"{"items": []} trailing"#,
            r#"[]"#,
            r#"{"items": [{"metadata": {"name": "a"}}]"#,
        ] {
            assert!(items::<ConfigMap>(text).is_err(), "{text}");
        }
    }
}
