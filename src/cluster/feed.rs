//! Kept beside each watch's store, fed by the same events: what changed
//! since a reader last looked ([`ChangeFeed`], so the console rebuilds the
//! rows of what changed rather than passing over every object), and the
//! objects of one pool ([`PoolIndex`], so a reconcile reads its own pool's
//! tasks and pods rather than filtering every one in the cluster).
//!
//! Both follow the store: they are told after the reflector has written an
//! event to it (see `shared_watch`), and rebuilt from the store after each
//! (re)list, when the reflector swaps in what was listed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

/// An object's (namespace, name).
pub type Key = (String, String);

/// Hashed with foldhash rather than SipHash: these maps are written once
/// per object a watch brings (100,000 tasks at a console's start), with
/// keys of the cluster's own names, and SipHash was a good part of what
/// telling them cost (`perf`, the scale bench's console).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The (namespace, name) of `o`.
pub fn key_of<K: Resource>(o: &K) -> Key {
    let m = o.meta();
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// Told of each event a watch's reflector has written to its store.
pub trait Follower<K>: Send + Sync {
    /// `o` was added or changed.
    fn applied(&self, o: &K);
    /// `o` was deleted.
    fn deleted(&self, o: &K);
    /// The store now holds exactly `all` (after a list).
    fn relisted(&self, all: &[Arc<K>]);
}

/// The keys of the objects changed since the reader last took them, for a
/// reader that subscribed. Nothing is recorded before anyone subscribes
/// (the daemon never does), and a key is recorded once however often its
/// object changes, so what is kept is bounded by the objects there are.
#[derive(Clone, Debug, Default)]
pub struct ChangeFeed(Arc<Mutex<Option<Pending>>>);

#[derive(Debug, Default)]
struct Pending {
    keys: HashSet<Key>,
    relisted: bool,
}

/// What changed since the last [`ChangeFeed::take`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// Everything may have changed (the first take, a relist): read the
    /// whole store.
    pub relisted: bool,
    /// These objects changed or went: read each from the store (absent:
    /// deleted).
    pub keys: Vec<Key>,
}

impl ChangeFeed {
    /// Starts recording; the first [`ChangeFeed::take`] says `relisted`.
    pub fn subscribe(&self) {
        *self.lock() = Some(Pending {
            keys: HashSet::default(),
            relisted: true,
        });
    }

    /// What changed since the last take (nothing before a subscribe).
    pub fn take(&self) -> Taken {
        let mut lock = self.lock();
        let Some(p) = lock.as_mut() else {
            return Taken::default();
        };
        let taken = Taken {
            relisted: std::mem::take(&mut p.relisted),
            keys: p.keys.drain().collect(),
        };
        // A burst's worth of keys is not kept allocated for ever.
        if p.keys.capacity() > 4096 {
            p.keys.shrink_to(64);
        }
        taken
    }

    /// Records a change of `key`.
    pub fn touch(&self, key: Key) {
        if let Some(p) = self.lock().as_mut()
            && !p.relisted
        {
            p.keys.insert(key);
        }
    }

    /// Records that everything may have changed.
    pub fn relist(&self) {
        if let Some(p) = self.lock().as_mut() {
            p.relisted = true;
            p.keys.clear();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Resource> Follower<K> for ChangeFeed {
    fn applied(&self, o: &K) {
        self.touch(key_of(o));
    }
    fn deleted(&self, o: &K) {
        self.touch(key_of(o));
    }
    fn relisted(&self, _: &[Arc<K>]) {
        self.relist();
    }
}

/// The names of a kind's objects by (namespace, pool), where an object's
/// pool is what `pool_of` reads (a task's `spec.pool`, a pod's pool label).
pub struct PoolIndex<K> {
    inner: Arc<RwLock<Groups>>,
    pool_of: fn(&K) -> Option<&str>,
}

impl<K> Clone for PoolIndex<K> {
    fn clone(&self) -> Self {
        PoolIndex {
            inner: self.inner.clone(),
            pool_of: self.pool_of,
        }
    }
}

/// A pool's objects, and when one of them last came, changed or went.
#[derive(Default)]
struct Group {
    names: BTreeSet<Arc<str>>,
    /// The index's clock then (kept while the group is empty: its pool's
    /// readers hear that its last object went).
    touched: u64,
}

/// Nested by namespace, so that an object's strings are looked up as they
/// are (no key built per event), and each name kept once for both maps.
#[derive(Default)]
struct Groups {
    /// namespace → pool → its group.
    groups: HashMap<String, HashMap<Arc<str>, Group>>,
    /// namespace → name → pool: where to remove an object from when it
    /// moves or goes.
    pool: HashMap<String, HashMap<Arc<str>, Arc<str>>>,
    /// Changes so far: the clock each group's `touched` is read against.
    clock: u64,
}

impl Groups {
    /// The group of `pool` in `namespace`, made if need be, touched now.
    fn touch(&mut self, namespace: &str, pool: &str) -> (&mut Group, Arc<str>) {
        self.clock += 1;
        if !self.groups.contains_key(namespace) {
            self.groups.insert(namespace.to_owned(), HashMap::default());
        }
        let in_ns = self.groups.get_mut(namespace).expect("just made");
        let (pool, group) = match in_ns.get_key_value(pool) {
            Some((name, _)) => {
                let name = name.clone();
                let group = in_ns.get_mut(pool).expect("just found");
                (name, group)
            }
            None => {
                let name: Arc<str> = Arc::from(pool);
                (name.clone(), in_ns.entry(name).or_default())
            }
        };
        group.touched = self.clock;
        (group, pool)
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        let Some(pool) = self
            .pool
            .get_mut(namespace)
            .and_then(|names| names.remove(name))
        else {
            return;
        };
        self.touch(namespace, &pool).0.names.remove(name);
    }

    fn insert(&mut self, namespace: &str, name: &str, pool: &str) {
        let was = self
            .pool
            .get(namespace)
            .and_then(|names| names.get(name))
            .map(|p| &**p == pool);
        if was == Some(true) {
            // Changed in place.
            self.touch(namespace, pool);
            return;
        }
        if was == Some(false) {
            self.remove(namespace, name);
        }
        let name: Arc<str> = Arc::from(name);
        let (group, pool) = self.touch(namespace, pool);
        group.names.insert(name.clone());
        match self.pool.get_mut(namespace) {
            Some(names) => names.insert(name, pool),
            None => self
                .pool
                .entry(namespace.to_owned())
                .or_default()
                .insert(name, pool),
        };
    }
}

impl<K: Resource> PoolIndex<K> {
    /// An empty index grouping by `pool_of`.
    pub fn new(pool_of: fn(&K) -> Option<&str>) -> Self {
        PoolIndex {
            inner: Arc::default(),
            pool_of,
        }
    }

    /// The names in `pool` of `namespace`, in name order.
    pub fn names(&self, namespace: &str, pool: &str) -> Vec<String> {
        let groups = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        groups
            .groups
            .get(namespace)
            .and_then(|pools| pools.get(pool))
            .map(|g| g.names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }

    /// The objects of `pool` in `namespace` as `store` holds them now, in
    /// name order (one deleted since it was indexed is left out).
    pub fn objects(&self, store: &Store<K>, namespace: &str, pool: &str) -> Vec<Arc<K>>
    where
        K: Clone,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        self.names(namespace, pool)
            .into_iter()
            .filter_map(|n| store.get(&ObjectRef::new(&n).within(namespace)))
            .collect()
    }

    /// The groups, (namespace, pool), whose objects came, changed or went
    /// after `seen` on this index's clock, and the clock now (the `seen`
    /// of the next call). `seen` 0 gives every group there is.
    pub fn touched_since(&self, seen: u64) -> (Vec<Key>, u64) {
        let groups = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let touched = groups
            .groups
            .iter()
            .flat_map(|(ns, pools)| {
                pools
                    .iter()
                    .filter(|(_, g)| g.touched > seen)
                    .map(|(pool, _)| (ns.clone(), pool.to_string()))
            })
            .collect();
        (touched, groups.clock)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Groups> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Resource> Follower<K> for PoolIndex<K> {
    fn applied(&self, o: &K) {
        let m = o.meta();
        let (ns, name) = (
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
        );
        match (self.pool_of)(o) {
            Some(pool) => self.write().insert(ns, name, pool),
            None => self.write().remove(ns, name),
        }
    }

    fn deleted(&self, o: &K) {
        let m = o.meta();
        self.write().remove(
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
        );
    }

    fn relisted(&self, all: &[Arc<K>]) {
        let mut groups = self.write();
        // Every group there was or is now counts as touched: the clock
        // goes on, so a reader's `seen` stays meaningful.
        let mut fresh = Groups {
            clock: groups.clock,
            ..Groups::default()
        };
        for o in all {
            if let Some(pool) = (self.pool_of)(o) {
                let m = o.meta();
                fresh.insert(
                    m.namespace.as_deref().unwrap_or_default(),
                    m.name.as_deref().unwrap_or_default(),
                    pool,
                );
            }
        }
        for (ns, pools) in &groups.groups {
            for pool in pools.keys() {
                fresh.touch(ns, pool);
            }
        }
        *groups = fresh;
    }
}

/// A count of the changes a watch has written to its store: a reader that
/// remembers it knows whether anything changed since (the pools, for the
/// looks that read each pool's spec).
#[derive(Clone, Debug, Default)]
pub struct Generation(Arc<std::sync::atomic::AtomicU64>);

impl Generation {
    /// Changes so far.
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn bump(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl<K> Follower<K> for Generation {
    fn applied(&self, _: &K) {
        self.bump();
    }
    fn deleted(&self, _: &K) {
        self.bump();
    }
    fn relisted(&self, _: &[Arc<K>]) {
        self.bump();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, pool: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some([("pool".to_owned(), pool.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn pool_label(c: &ConfigMap) -> Option<&str> {
        c.metadata.labels.as_ref()?.get("pool").map(String::as_str)
    }

    #[test]
    fn an_index_follows_objects_into_their_pool_out_of_it_and_across_a_relist() {
        let index = PoolIndex::new(pool_label);
        index.applied(&cm("a", "x", "p"));
        index.applied(&cm("a", "y", "p"));
        index.applied(&cm("b", "z", "p"));
        assert_eq!(index.names("a", "p"), ["x", "y"]);
        assert_eq!(index.names("b", "p"), ["z"]);
        // Moved to another pool: gone from the first.
        index.applied(&cm("a", "x", "q"));
        assert_eq!(index.names("a", "p"), ["y"]);
        assert_eq!(index.names("a", "q"), ["x"]);
        index.deleted(&cm("a", "y", "p"));
        assert!(index.names("a", "p").is_empty());
        assert!(
            !index.inner.read().unwrap().pool["a"].contains_key("y"),
            "a deleted object is not kept"
        );
        // A relist replaces everything: what was there and is not listed goes.
        index.relisted(&[Arc::new(cm("c", "w", "p"))]);
        assert!(index.names("a", "q").is_empty());
        assert_eq!(index.names("c", "p"), ["w"]);
    }

    #[test]
    fn an_index_says_which_pools_changed_since_a_reader_last_looked() {
        let index = PoolIndex::new(pool_label);
        let sorted = |(mut groups, clock): (Vec<Key>, u64)| {
            groups.sort();
            (groups, clock)
        };
        let group = |ns: &str, pool: &str| (ns.to_owned(), pool.to_owned());
        index.applied(&cm("a", "x", "p"));
        index.applied(&cm("a", "y", "q"));
        let (all, seen) = sorted(index.touched_since(0));
        assert_eq!(all, [group("a", "p"), group("a", "q")]);
        assert_eq!(index.touched_since(seen), (vec![], seen), "nothing since");
        // A change in place (same pool) counts, as does a move (both pools).
        index.applied(&cm("a", "x", "p"));
        let (changed, seen) = index.touched_since(seen);
        assert_eq!(changed, [group("a", "p")]);
        index.applied(&cm("a", "x", "r"));
        let (moved, seen) = sorted(index.touched_since(seen));
        assert_eq!(moved, [group("a", "p"), group("a", "r")]);
        // The last object of a group going is a change of that group.
        index.deleted(&cm("a", "y", "q"));
        let (gone, seen) = index.touched_since(seen);
        assert_eq!(gone, [group("a", "q")]);
        // After a relist every group counts, those that went included.
        index.relisted(&[Arc::new(cm("b", "z", "p"))]);
        let (relisted, _) = sorted(index.touched_since(seen));
        assert_eq!(
            relisted,
            [
                group("a", "p"),
                group("a", "q"),
                group("a", "r"),
                group("b", "p")
            ]
        );
    }

    #[test]
    fn a_feed_records_nothing_until_subscribed_then_each_key_once_and_a_relist_as_such() {
        let feed = ChangeFeed::default();
        Follower::<ConfigMap>::applied(&feed, &cm("a", "x", "p"));
        assert_eq!(feed.take(), Taken::default());
        feed.subscribe();
        assert!(feed.take().relisted, "the first take reads everything");
        for _ in 0..3 {
            Follower::<ConfigMap>::applied(&feed, &cm("a", "x", "p"));
        }
        Follower::<ConfigMap>::deleted(&feed, &cm("a", "y", "p"));
        let mut taken = feed.take();
        taken.keys.sort();
        assert_eq!(
            taken,
            Taken {
                relisted: false,
                keys: vec![("a".into(), "x".into()), ("a".into(), "y".into())],
            }
        );
        assert_eq!(feed.take(), Taken::default());
        Follower::<ConfigMap>::applied(&feed, &cm("a", "x", "p"));
        Follower::<ConfigMap>::relisted(&feed, &[]);
        assert_eq!(
            feed.take(),
            Taken {
                relisted: true,
                keys: vec![]
            }
        );
    }
}
