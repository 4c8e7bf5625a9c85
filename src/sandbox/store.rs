//! The sandbox's object store: every object as JSON, one global
//! resourceVersion counter, a bounded history of changes for watches, and a
//! broadcast of new changes.
//!
//! The store knows nothing of API semantics (that is `api`); it only keeps
//! objects keyed by resource, namespace and name, stamps resourceVersions and
//! records what changed, atomically.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::broadcast;

/// Identifies a resource type: `plural.group` (`pods`, `deployments.apps`).
pub type ResourceKey = String;

/// Namespace ("" when cluster-scoped) and name.
pub type ObjectKey = (String, String);

/// What a watch event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed (the object as it was last).
    Deleted,
}

impl EventType {
    /// As on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in history and broadcast to watchers.
#[derive(Debug, Clone)]
pub struct Change {
    /// resourceVersion the change produced.
    pub rv: u64,
    /// Resource type.
    pub resource: ResourceKey,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// Added, modified or deleted.
    pub kind: EventType,
    /// The object after the change (before, for a delete, with the new rv).
    pub object: Arc<Value>,
    /// The object before the change (None for a create), so a watch can tell
    /// an object entering or leaving its selector.
    pub previous: Option<Arc<Value>>,
}

/// A write refused by the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The object exists already.
    AlreadyExists,
    /// The object does not exist.
    NotFound,
    /// The caller's resourceVersion is not the current one.
    Conflict,
}

/// The watch history no longer reaches back to the asked resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld {
    /// Oldest resourceVersion a watch can still start from.
    pub oldest: u64,
}

struct Inner {
    rv: u64,
    objects: HashMap<ResourceKey, BTreeMap<ObjectKey, Arc<Value>>>,
    history: VecDeque<Change>,
    /// Watches asking for a resourceVersion before this get 410 Gone.
    compacted_rv: u64,
    history_limit: usize,
}

/// The in-memory store. Cheap to clone-share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Change>>,
}

/// Default number of changes kept for watches (the real apiserver keeps a
/// time window, 75 s by default in etcd compaction terms; a count suits a
/// test server better).
pub const DEFAULT_HISTORY: usize = 50_000;

impl Default for Store {
    fn default() -> Self {
        Store::new(DEFAULT_HISTORY)
    }
}

impl Store {
    /// An empty store that keeps `history_limit` changes for watches.
    pub fn new(history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(16_384);
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: HashMap::new(),
                history: VecDeque::new(),
                compacted_rv: 0,
                history_limit,
            }),
            tx,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every write
        // is a single insert); keep serving rather than poisoning the server.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current (latest) resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// One object.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let g = self.lock();
        g.objects
            .get(resource)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// All objects of a resource (in one namespace, or all when `ns` is None),
    /// ordered by namespace then name, with the resourceVersion they were read at.
    pub fn list(&self, resource: &str, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let g = self.lock();
        (objects_in(&g, resource, ns), g.rv)
    }

    /// The objects of a resource as they were at resourceVersion `at`,
    /// rebuilt by undoing the later changes the history still holds (what
    /// etcd's MVCC gives the real apiserver for an exact or continued list).
    pub fn list_at(
        &self,
        resource: &str,
        ns: Option<&str>,
        at: u64,
    ) -> Result<Vec<Arc<Value>>, TooOld> {
        let g = self.lock();
        if at < g.compacted_rv {
            return Err(TooOld {
                oldest: g.compacted_rv + 1,
            });
        }
        let touched = g
            .history
            .iter()
            .rev()
            .take_while(|c| c.rv > at)
            .any(|c| c.resource == resource && ns.is_none_or(|ns| ns == c.namespace));
        if !touched {
            // Nothing of this resource changed since: the present is that snapshot.
            return Ok(objects_in(&g, resource, ns));
        }
        let mut items: BTreeMap<ObjectKey, Arc<Value>> = match g.objects.get(resource) {
            None => BTreeMap::new(),
            Some(m) => m
                .iter()
                .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        for c in g.history.iter().rev().take_while(|c| c.rv > at) {
            if c.resource != resource || ns.is_some_and(|ns| ns != c.namespace) {
                continue;
            }
            let name = c.object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let key = (c.namespace.clone(), name);
            match (c.kind, &c.previous) {
                (EventType::Added, _) => {
                    items.remove(&key);
                }
                (_, Some(before)) => {
                    items.insert(key, before.clone());
                }
                (_, None) => {
                    items.insert(key, c.object.clone());
                }
            }
        }
        Ok(items.into_values().collect())
    }

    /// Number of objects of a resource.
    pub fn count(&self, resource: &str) -> usize {
        self.lock().objects.get(resource).map_or(0, BTreeMap::len)
    }

    /// Resource keys that have at least one object.
    pub fn resources(&self) -> Vec<ResourceKey> {
        self.lock()
            .objects
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Stores a new object, stamping `metadata.resourceVersion`.
    pub fn create(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        let mut g = self.lock();
        let key = (ns.to_string(), name.to_string());
        if g.objects
            .get(resource)
            .is_some_and(|m| m.contains_key(&key))
        {
            return Err(StoreError::AlreadyExists);
        }
        g.rv += 1;
        let rv = g.rv;
        set_rv(&mut obj, rv);
        let obj = Arc::new(obj);
        g.objects
            .entry(resource.to_string())
            .or_default()
            .insert(key, obj.clone());
        self.record(&mut g, resource, ns, EventType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an object. With `expect_rv`, fails with Conflict unless it is
    /// the stored one. `f` may inspect the stored object to build the new one;
    /// returning `Ok(None)` means "no change" (no new resourceVersion, no event).
    pub fn update<E>(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        f: impl FnOnce(&Value) -> Result<Option<Value>, E>,
    ) -> Result<Result<Arc<Value>, StoreError>, E> {
        let mut g = self.lock();
        let key = (ns.to_string(), name.to_string());
        let Some(old) = g.objects.get(resource).and_then(|m| m.get(&key)).cloned() else {
            return Ok(Err(StoreError::NotFound));
        };
        let Some(mut new) = f(&old)? else {
            return Ok(Ok(old));
        };
        g.rv += 1;
        let rv = g.rv;
        set_rv(&mut new, rv);
        let new = Arc::new(new);
        g.objects
            .entry(resource.to_string())
            .or_default()
            .insert(key, new.clone());
        self.record(
            &mut g,
            resource,
            ns,
            EventType::Modified,
            new.clone(),
            Some(old),
        );
        Ok(Ok(new))
    }

    /// Removes an object; the DELETED event carries it with a new resourceVersion.
    pub fn delete(&self, resource: &str, ns: &str, name: &str) -> Result<Arc<Value>, StoreError> {
        let mut g = self.lock();
        let key = (ns.to_string(), name.to_string());
        let Some(old) = g.objects.get_mut(resource).and_then(|m| m.remove(&key)) else {
            return Err(StoreError::NotFound);
        };
        g.rv += 1;
        let rv = g.rv;
        let mut gone = (*old).clone();
        set_rv(&mut gone, rv);
        let gone = Arc::new(gone);
        self.record(
            &mut g,
            resource,
            ns,
            EventType::Deleted,
            gone.clone(),
            Some(old),
        );
        Ok(gone)
    }

    fn record(
        &self,
        g: &mut Inner,
        resource: &str,
        ns: &str,
        kind: EventType,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) {
        let change = Change {
            rv: g.rv,
            resource: resource.to_string(),
            namespace: ns.to_string(),
            kind,
            object,
            previous,
        };
        g.history.push_back(change.clone());
        while g.history.len() > g.history_limit {
            if let Some(c) = g.history.pop_front() {
                g.compacted_rv = c.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(Arc::new(change));
    }

    /// A receiver for every later change of every resource (for the
    /// simulated controllers).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    /// Forgets all history: watches from any earlier resourceVersion get 410.
    pub fn compact(&self) {
        let mut g = self.lock();
        g.history.clear();
        g.compacted_rv = g.rv;
    }

    /// Changes to `resource` after `since`, plus a receiver for later ones,
    /// taken atomically so nothing falls between the two.
    pub fn watch_from(
        &self,
        resource: &str,
        since: u64,
    ) -> Result<(Vec<Change>, broadcast::Receiver<Arc<Change>>), TooOld> {
        let g = self.lock();
        if since < g.compacted_rv {
            return Err(TooOld {
                oldest: g.compacted_rv + 1,
            });
        }
        let rx = self.tx.subscribe();
        let past = g
            .history
            .iter()
            .filter(|c| c.rv > since && c.resource == resource)
            .cloned()
            .collect();
        Ok((past, rx))
    }

    /// The current objects of `resource` (as synthetic ADDED events at their
    /// own versions) plus a receiver for later changes, atomically.
    pub fn watch_current(
        &self,
        resource: &str,
        ns: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64, broadcast::Receiver<Arc<Change>>) {
        let g = self.lock();
        let rx = self.tx.subscribe();
        let items = match g.objects.get(resource) {
            None => Vec::new(),
            Some(m) => m
                .iter()
                .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
                .map(|(_, v)| v.clone())
                .collect(),
        };
        (items, g.rv, rx)
    }
}

fn objects_in(g: &Inner, resource: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
    match g.objects.get(resource) {
        None => Vec::new(),
        Some(m) => match ns {
            None => m.values().cloned().collect(),
            Some(ns) => m
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
        },
    }
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// `metadata.resourceVersion` as a number (0 when absent or not a number).
pub fn rv_of(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"n": 1}})
    }

    #[test]
    fn every_write_gets_a_higher_resource_version() {
        let s = Store::default();
        let a = s.create("pods", "default", "a", obj("a")).expect("created");
        let b = s.create("pods", "default", "b", obj("b")).expect("created");
        assert!(rv_of(&b) > rv_of(&a));
        let a2 = s
            .update::<()>("pods", "default", "a", |o| Ok(Some(o.clone())))
            .expect("ok")
            .expect("updated");
        assert!(rv_of(&a2) > rv_of(&b));
        assert_eq!(s.current_rv(), rv_of(&a2));
    }

    #[test]
    fn creating_twice_is_already_exists_and_deleting_twice_not_found() {
        let s = Store::default();
        s.create("pods", "default", "a", obj("a")).expect("created");
        assert_eq!(
            s.create("pods", "default", "a", obj("a")),
            Err(StoreError::AlreadyExists)
        );
        s.delete("pods", "default", "a").expect("deleted");
        assert_eq!(s.delete("pods", "default", "a"), Err(StoreError::NotFound));
    }

    #[test]
    fn an_update_that_changes_nothing_keeps_the_version() {
        let s = Store::default();
        let a = s.create("pods", "default", "a", obj("a")).expect("created");
        let same = s
            .update::<()>("pods", "default", "a", |_| Ok(None))
            .expect("ok")
            .expect("kept");
        assert_eq!(rv_of(&same), rv_of(&a));
    }

    #[test]
    fn list_by_namespace_only_returns_that_namespace() {
        let s = Store::default();
        s.create("pods", "a", "x", obj("x")).expect("created");
        s.create("pods", "ab", "y", obj("y")).expect("created");
        s.create("pods", "b", "z", obj("z")).expect("created");
        assert_eq!(s.list("pods", Some("a")).0.len(), 1);
        assert_eq!(s.list("pods", None).0.len(), 3);
        assert_eq!(s.list("services", None).0.len(), 0);
    }

    #[test]
    fn watch_from_replays_only_later_changes_of_that_resource() {
        let s = Store::default();
        let a = s.create("pods", "default", "a", obj("a")).expect("created");
        s.create("services", "default", "svc", obj("svc"))
            .expect("created");
        s.create("pods", "default", "b", obj("b")).expect("created");
        let (past, _rx) = s.watch_from("pods", rv_of(&a)).expect("in history");
        assert_eq!(past.len(), 1);
        assert_eq!(past[0].object["metadata"]["name"], "b");
    }

    #[test]
    fn list_at_rebuilds_an_earlier_snapshot_until_it_is_compacted() {
        let s = Store::default();
        let a = s.create("pods", "default", "a", obj("a")).expect("created");
        s.create("pods", "default", "b", obj("b")).expect("created");
        let at = s.current_rv();
        s.update::<()>("pods", "default", "a", |o| {
            let mut n = o.clone();
            n["spec"]["n"] = json!(2);
            Ok(Some(n))
        })
        .expect("ok")
        .expect("updated");
        s.delete("pods", "default", "b").expect("deleted");
        s.create("pods", "default", "c", obj("c")).expect("created");
        s.create("configmaps", "default", "x", obj("x"))
            .expect("created");
        let then = s.list_at("pods", Some("default"), at).expect("in history");
        let names: Vec<&str> = then
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(then[0]["spec"]["n"], 1);
        let before_a = s.list_at("pods", None, rv_of(&a) - 1).expect("in history");
        assert!(before_a.is_empty());
        assert_eq!(
            s.list_at("pods", None, s.current_rv()).expect("now").len(),
            2
        );
        s.compact();
        assert!(s.list_at("pods", None, at).is_err());
    }

    #[test]
    fn a_watch_older_than_the_history_is_too_old() {
        let s = Store::new(2);
        let a = s.create("pods", "default", "a", obj("a")).expect("created");
        for n in ["b", "c", "d"] {
            s.create("pods", "default", n, obj(n)).expect("created");
        }
        assert!(s.watch_from("pods", rv_of(&a)).is_err());
        s.compact();
        assert!(s.watch_from("pods", s.current_rv() - 1).is_err());
        assert!(s.watch_from("pods", s.current_rv()).is_ok());
    }

    #[tokio::test]
    async fn watchers_receive_changes_made_after_subscribing() {
        let s = Store::default();
        let (_, _, mut rx) = s.watch_current("pods", None);
        s.create("pods", "default", "a", obj("a")).expect("created");
        let c = rx.recv().await.expect("a change");
        assert_eq!(c.kind, EventType::Added);
        s.delete("pods", "default", "a").expect("deleted");
        let c = rx.recv().await.expect("a change");
        assert_eq!(c.kind, EventType::Deleted);
        assert_eq!(c.object["metadata"]["name"], "a");
    }
}
