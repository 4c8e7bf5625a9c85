//! The sandbox's object store: every object as JSON, one global
//! resourceVersion counter, a bounded history of changes for watches, and a
//! broadcast of new changes.
//!
//! The store knows nothing of API semantics (that is `api`); it only keeps
//! objects keyed by resource, namespace and name, stamps resourceVersions and
//! records what changed, atomically.
//!
//! It forgets as etcd under kube-apiserver does: the history is compacted on
//! a timer ([`Store::compaction_tick`], each tick compacting to the
//! revision seen at the tick before), and besides time it is capped by
//! count and bytes ([`HistoryLimits`]); objects of a resource
//! with a time to live ([`Store::set_ttl`], Events) are deleted once that
//! long has passed since their last write, as an etcd lease expiring.
//!
//! The history keeps versions as etcd does, as bytes: a version that is
//! still the stored object is the store's own `Arc` (no copy), one that a
//! later write superseded (or a deletion's last state) is kept serialized
//! ([`Version`]). As trees of `serde_json::Value` the versions of five
//! minutes of writes weighed about five times their JSON, most of an idle
//! `agentdeck --demo`'s growth (a heap profile: 172 MB of 264 MiB at
//! minute 7, the history's object copies and their managed fields).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// A version of an object as the history keeps it.
#[derive(Debug, Clone)]
enum Version {
    /// The stored object itself (the store's `Arc`, shared).
    Live(Arc<Value>),
    /// An earlier version (or a deleted object's last state), serialized.
    Packed(Arc<[u8]>),
}

impl Version {
    fn value(&self) -> Arc<Value> {
        match self {
            Version::Live(v) => v.clone(),
            // The store's own serialization of a `Value`: it reads back.
            Version::Packed(b) => Arc::new(serde_json::from_slice(b).unwrap_or(Value::Null)),
        }
    }

    fn packed_len(&self) -> usize {
        match self {
            Version::Live(_) => 0,
            Version::Packed(b) => b.len(),
        }
    }
}

/// Serializes a version for the history.
fn pack(v: &Value) -> Arc<[u8]> {
    serde_json::to_vec(v).unwrap_or_default().into()
}

/// One change as the history keeps it.
#[derive(Debug, Clone)]
struct Kept {
    rv: u64,
    resource: ResourceKey,
    namespace: String,
    name: String,
    kind: EventType,
    object: Version,
    previous: Option<Version>,
    /// What it counts against [`HistoryLimits::max_bytes`].
    bytes: usize,
}

impl Kept {
    fn weigh(&mut self) {
        self.bytes = std::mem::size_of::<Kept>()
            + self.resource.len()
            + self.namespace.len()
            + self.name.len()
            + self.object.packed_len()
            + self.previous.as_ref().map_or(0, Version::packed_len);
    }

    fn change(&self) -> Change {
        Change {
            rv: self.rv,
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            kind: self.kind,
            object: self.object.value(),
            previous: self.previous.as_ref().map(Version::value),
        }
    }
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

/// How much watch history the store keeps at most, whatever its age: a
/// burst of writes between two compaction ticks drops the oldest changes
/// once either bound is passed, and that drop is a compaction (watches and
/// lists from before it get 410 Gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// Changes kept.
    pub max_changes: usize,
    /// Bytes of the object versions kept serialized, and each change's
    /// bookkeeping (the versions that are still the stored objects cost
    /// nothing more).
    pub max_bytes: usize,
}

/// Changes kept for watches at most (10,000).
pub const DEFAULT_HISTORY_CHANGES: usize = 10_000;

/// Bytes of history kept for watches at most (64 MiB; a real etcd keeps
/// whatever five to ten minutes of writes weigh, a laptop's test server
/// should not hold a GiB after a burst).
pub const DEFAULT_HISTORY_BYTES: usize = 64 << 20;

impl Default for HistoryLimits {
    fn default() -> Self {
        HistoryLimits {
            max_changes: DEFAULT_HISTORY_CHANGES,
            max_bytes: DEFAULT_HISTORY_BYTES,
        }
    }
}

/// What the store reads the time from (for time-to-live), replaceable in tests.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

struct Inner {
    rv: u64,
    objects: HashMap<ResourceKey, BTreeMap<ObjectKey, Arc<Value>>>,
    /// Each change as kept, oldest first (in resourceVersion order).
    history: VecDeque<Kept>,
    history_bytes: usize,
    /// Watches asking for a resourceVersion before this get 410 Gone.
    compacted_rv: u64,
    limits: HistoryLimits,
    /// The resourceVersion at the last compaction tick: the next tick
    /// compacts to it (kube-apiserver's compactor does the same).
    tick_rv: Option<u64>,
    /// Time to live of the objects of these resources after each write.
    ttls: HashMap<ResourceKey, Duration>,
    /// When each write of an object with a time to live expires, with the
    /// resourceVersion it wrote (a later write leaves that entry stale).
    expiries: BTreeMap<(Instant, u64), (ResourceKey, ObjectKey)>,
}

/// One page of a list: see [`Store::page`].
#[derive(Debug)]
pub struct Page {
    /// The objects, in (namespace, name) order.
    pub items: Vec<Arc<Value>>,
    /// The resourceVersion they were read at.
    pub rv: u64,
    /// Whether objects follow the last one.
    pub more: bool,
    /// How many, when asked.
    pub remaining: Option<usize>,
}

/// The in-memory store. Cheap to clone-share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Change>>,
    clock: Clock,
}

impl Default for Store {
    fn default() -> Self {
        Store::with_limits(HistoryLimits::default())
    }
}

impl Store {
    /// An empty store that keeps at most `max_changes` changes for watches
    /// (and the default bytes).
    pub fn new(max_changes: usize) -> Self {
        Store::with_limits(HistoryLimits {
            max_changes,
            ..HistoryLimits::default()
        })
    }

    /// An empty store that keeps history within `limits`.
    pub fn with_limits(limits: HistoryLimits) -> Self {
        let (tx, _) = broadcast::channel(16_384);
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: HashMap::new(),
                history: VecDeque::new(),
                history_bytes: 0,
                compacted_rv: 0,
                limits,
                tick_rv: None,
                ttls: HashMap::new(),
                expiries: BTreeMap::new(),
            }),
            tx,
            clock: Arc::new(Instant::now),
        }
    }

    /// The same store reading the time from `clock` (tests move it by hand).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Changes the history bounds; a lower bound applies at the next write.
    pub fn set_limits(&self, limits: HistoryLimits) {
        self.lock().limits = limits;
    }

    /// Objects of `resource` written from now on are deleted `ttl` after
    /// their last write ([`Store::expire`]), as objects kube-apiserver
    /// stores with an etcd lease (`--event-ttl` for Events). `None` keeps
    /// them.
    pub fn set_ttl(&self, resource: &str, ttl: Option<Duration>) {
        let mut g = self.lock();
        match ttl {
            Some(ttl) => g.ttls.insert(resource.to_string(), ttl),
            None => g.ttls.remove(resource),
        };
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
        self.page(resource, ns, Some(at), None, usize::MAX, false)
            .map(|p| p.items)
    }

    /// Up to `max` objects of `resource` (in `ns`, or in every namespace)
    /// after the key `after`, in (namespace, name) order, as they were at
    /// resourceVersion `at` (`None`: now); whether more follow, and when
    /// `count`, how many.
    ///
    /// A page costs its own objects and the changes made since `at`, not
    /// the collection: it starts by a range read after `after` (as etcd's
    /// range read does for a continued list), and the later changes are
    /// undone only for the keys they touched. Reading the whole collection
    /// for every page made a paginated list of 100,000 objects cost 200
    /// pages × 100,000 (11–14 ms a page, most of a 27 ms page). Counting
    /// what follows walks the rest of the tree (12 ms at 100,000 objects):
    /// a caller that knows the count from an earlier page does not ask.
    pub fn page(
        &self,
        resource: &str,
        ns: Option<&str>,
        at: Option<u64>,
        after: Option<&ObjectKey>,
        max: usize,
        count: bool,
    ) -> Result<Page, TooOld> {
        use std::ops::Bound;

        let g = self.lock();
        let at = match at {
            Some(at) if at < g.compacted_rv => {
                return Err(TooOld {
                    oldest: g.compacted_rv + 1,
                });
            }
            Some(at) => at.min(g.rv),
            None => g.rv,
        };
        let then = g.changed_since(resource, ns, at);
        let (lower, upper) = page_bounds(after, ns);
        let empty = BTreeMap::new();
        let now = g.objects.get(resource).unwrap_or(&empty);
        // A key past the namespace (a token of another one): nothing
        // follows it there (and a range whose start passes its end panics).
        if let (Bound::Excluded(after), Bound::Excluded(end)) = (&lower, &upper)
            && after >= end
        {
            return Ok(Page {
                items: Vec::new(),
                rv: at,
                more: false,
                remaining: count.then_some(0),
            });
        }
        let mut cursor = PageCursor {
            current: now.range((lower.clone(), upper.clone())).peekable(),
            changed: then.range((lower, upper)).peekable(),
        };
        let taken = cursor.take(max);
        let (more, remaining) = if count {
            let remaining = cursor.remaining(now);
            (remaining > 0, Some(remaining))
        } else {
            (cursor.more(), None)
        };
        drop(g);
        Ok(Page {
            items: taken.iter().map(Version::value).collect(),
            rv: at,
            more,
            remaining,
        })
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
        self.record(
            &mut g,
            resource,
            ns,
            name,
            EventType::Added,
            obj.clone(),
            None,
        );
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
            name,
            EventType::Modified,
            new.clone(),
            Some(old),
        );
        Ok(Ok(new))
    }

    /// Removes an object; the DELETED event carries it with a new resourceVersion.
    pub fn delete(&self, resource: &str, ns: &str, name: &str) -> Result<Arc<Value>, StoreError> {
        let mut g = self.lock();
        self.delete_locked(&mut g, resource, ns, name)
    }

    fn delete_locked(
        &self,
        g: &mut Inner,
        resource: &str,
        ns: &str,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
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
            g,
            resource,
            ns,
            name,
            EventType::Deleted,
            gone.clone(),
            Some(old),
        );
        Ok(gone)
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        g: &mut Inner,
        resource: &str,
        ns: &str,
        name: &str,
        kind: EventType,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) {
        if kind != EventType::Deleted
            && let Some(ttl) = g.ttls.get(resource).copied()
        {
            let at = (self.clock)() + ttl;
            let rv = g.rv;
            g.expiries.insert(
                (at, rv),
                (resource.to_string(), (ns.to_string(), name.to_string())),
            );
        }
        // The version this write superseded is serialized once: for this
        // change's `previous`, and in place of the live object of the
        // change that wrote it, if the history still holds that one.
        let kept_previous = previous.as_ref().map(|old| {
            let packed = pack(old);
            if let Some(earlier) = g.find_mut(rv_of(old))
                && matches!(&earlier.object, Version::Live(v) if Arc::ptr_eq(v, old))
            {
                earlier.object = Version::Packed(packed.clone());
                let before = earlier.bytes;
                earlier.weigh();
                let after = earlier.bytes;
                g.history_bytes = g.history_bytes + after - before;
            }
            Version::Packed(packed)
        });
        let kept_object = match kind {
            EventType::Deleted => Version::Packed(pack(&object)),
            _ => Version::Live(object.clone()),
        };
        let mut kept = Kept {
            rv: g.rv,
            resource: resource.to_string(),
            namespace: ns.to_string(),
            name: name.to_string(),
            kind,
            object: kept_object,
            previous: kept_previous,
            bytes: 0,
        };
        kept.weigh();
        g.history_bytes += kept.bytes;
        g.history.push_back(kept);
        while g.history.len() > g.limits.max_changes
            || (g.history_bytes > g.limits.max_bytes && g.history.len() > 1)
        {
            match g.history.pop_front() {
                Some(c) => {
                    g.history_bytes -= c.bytes;
                    g.compacted_rv = g.compacted_rv.max(c.rv);
                }
                None => break,
            }
        }
        let change = Change {
            rv: g.rv,
            resource: resource.to_string(),
            namespace: ns.to_string(),
            kind,
            object,
            previous,
        };
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(Arc::new(change));
    }

    /// How many receivers of changes there are (open watches and the
    /// simulated controllers).
    pub fn subscribers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// A receiver for every later change of every resource (for the
    /// simulated controllers).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    /// Forgets all history: watches from any earlier resourceVersion get 410.
    pub fn compact(&self) {
        let mut g = self.lock();
        let rv = g.rv;
        compact_locked(&mut g, rv);
    }

    /// Forgets the changes up to and including `rv` (etcd's compact): a
    /// watch or list from a resourceVersion before `rv` gets 410 Gone, one
    /// from `rv` or later is served. Never moves back.
    pub fn compact_to(&self, rv: u64) {
        let mut g = self.lock();
        compact_locked(&mut g, rv);
    }

    /// One tick of kube-apiserver's compactor (`--etcd-compaction-interval`):
    /// compacts to the resourceVersion the previous tick saw (none on the
    /// first tick) and remembers the current one for the next. A change so
    /// outlives one interval and at most two. Returns what it compacted to.
    pub fn compaction_tick(&self) -> Option<u64> {
        let mut g = self.lock();
        let now = g.rv;
        let previous = g.tick_rv.replace(now);
        if let Some(rv) = previous {
            compact_locked(&mut g, rv);
        }
        previous
    }

    /// Deletes the objects whose time to live has run out since their last
    /// write (watchers see DELETED). Returns how many went.
    pub fn expire(&self) -> usize {
        let now = (self.clock)();
        let mut g = self.lock();
        let mut gone = 0;
        while let Some(entry) = g.expiries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, rv), (resource, (ns, name))) = entry.remove_entry();
            let current = g
                .objects
                .get(&resource)
                .and_then(|m| m.get(&(ns.clone(), name.clone())))
                .map(|o| rv_of(o));
            // Written again since: a later entry holds its expiry.
            if current == Some(rv) && self.delete_locked(&mut g, &resource, &ns, &name).is_ok() {
                gone += 1;
            }
        }
        gone
    }

    /// The oldest resourceVersion a watch can start from (earlier ones get 410).
    pub fn compacted_rv(&self) -> u64 {
        self.lock().compacted_rv
    }

    /// Changes kept for watches, and the bytes they count.
    pub fn history_size(&self) -> (usize, usize) {
        let g = self.lock();
        (g.history.len(), g.history_bytes)
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
        let past: Vec<Kept> = g
            .history
            .range(g.first_after(since)..)
            .filter(|c| c.resource == resource)
            .cloned()
            .collect();
        drop(g);
        // Read back outside the lock: a watch resumed after a burst reads
        // back thousands of versions, which must not stall every write.
        Ok((past.iter().map(Kept::change).collect(), rx))
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

fn compact_locked(g: &mut Inner, rv: u64) {
    let rv = rv.min(g.rv);
    while g.history.front().is_some_and(|c| c.rv <= rv) {
        if let Some(c) = g.history.pop_front() {
            g.history_bytes -= c.bytes;
        }
    }
    g.compacted_rv = g.compacted_rv.max(rv);
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

impl Inner {
    /// The index of the first change after resourceVersion `rv`.
    fn first_after(&self, rv: u64) -> usize {
        self.history.partition_point(|c| c.rv <= rv)
    }

    /// The change that produced resourceVersion `rv`, if still kept.
    fn find_mut(&mut self, rv: u64) -> Option<&mut Kept> {
        let i = self.history.partition_point(|c| c.rv < rv);
        self.history.get_mut(i).filter(|c| c.rv == rv)
    }

    /// The keys of `resource` (in `ns`, if given) changed after `at`, each
    /// as it was at `at` (None: it did not exist then). Read newest first,
    /// so the oldest change after `at` is the one left.
    fn changed_since(
        &self,
        resource: &str,
        ns: Option<&str>,
        at: u64,
    ) -> BTreeMap<ObjectKey, Option<Version>> {
        let mut then = BTreeMap::new();
        for c in self.history.range(self.first_after(at)..).rev() {
            if c.resource != resource || ns.is_some_and(|ns| ns != c.namespace) {
                continue;
            }
            let before = match (c.kind, &c.previous) {
                (EventType::Added, _) => None,
                (_, Some(before)) => Some(before.clone()),
                (_, None) => Some(c.object.clone()),
            };
            then.insert((c.namespace.clone(), c.name.clone()), before);
        }
        then
    }
}

/// The bounds of a page's range read: after the key `after` (or from the
/// start of namespace `ns`), to the end of `ns` (or of the collection).
fn page_bounds(
    after: Option<&ObjectKey>,
    ns: Option<&str>,
) -> (std::ops::Bound<ObjectKey>, std::ops::Bound<ObjectKey>) {
    use std::ops::Bound;
    let lower = match (after, ns) {
        (Some(after), _) => Bound::Excluded(after.clone()),
        (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
        (None, None) => Bound::Unbounded,
    };
    // Every name of namespace `ns` sorts before (`ns` + NUL, ""), and
    // every later namespace at or after it.
    let upper = match ns {
        Some(ns) => Bound::Excluded((format!("{ns}\0"), String::new())),
        None => Bound::Unbounded,
    };
    (lower, upper)
}

/// A page being read: the objects there now and the keys changed since
/// the page's version (each as it was then), both in key order.
struct PageCursor<'a> {
    /// The objects there now, in the page's range.
    current: std::iter::Peekable<std::collections::btree_map::Range<'a, ObjectKey, Arc<Value>>>,
    /// The keys changed since, in the page's range.
    changed:
        std::iter::Peekable<std::collections::btree_map::Range<'a, ObjectKey, Option<Version>>>,
}

impl PageCursor<'_> {
    /// Up to `max` objects as they were then: a changed key's old state
    /// stands for what is there now.
    /// (Earlier versions are read back by the caller, outside the lock.)
    fn take(&mut self, max: usize) -> Vec<Version> {
        use std::cmp::Ordering;
        let (current, changed) = (&mut self.current, &mut self.changed);
        let mut items = Vec::new();
        while items.len() < max {
            let live = |(_, v): (&ObjectKey, &Arc<Value>)| Some(Version::Live(v.clone()));
            let next = match (current.peek(), changed.peek()) {
                (None, None) => break,
                (Some(_), None) => current.next().map(live),
                (None, Some(_)) => changed.next().map(|(_, v)| v.clone()),
                (Some((a, _)), Some((b, _))) => match a.cmp(b) {
                    Ordering::Less => current.next().map(live),
                    Ordering::Greater => changed.next().map(|(_, v)| v.clone()),
                    Ordering::Equal => {
                        current.next();
                        changed.next().map(|(_, v)| v.clone())
                    }
                },
            };
            if let Some(Some(object)) = next {
                items.push(object);
            }
        }
        items
    }

    /// Whether another object follows: the next key there now was there
    /// then too, or a changed key was there then.
    fn more(&mut self) -> bool {
        let (current, changed) = (&mut self.current, &mut self.changed);
        loop {
            match (current.peek(), changed.peek()) {
                (None, None) => break false,
                (Some((a, _)), Some((b, was))) if a >= b => {
                    if was.is_some() {
                        break true;
                    }
                    if a == b {
                        current.next();
                    }
                    changed.next();
                }
                (Some(_), _) => break true,
                (None, Some((_, was))) => {
                    if was.is_some() {
                        break true;
                    }
                    changed.next();
                }
            }
        }
    }

    /// How many follow: the objects there now, corrected by the changed
    /// keys (one there then and not now counts, one there now and not then
    /// does not).
    fn remaining(self, now: &BTreeMap<ObjectKey, Arc<Value>>) -> usize {
        let mut remaining = self.current.count();
        for (key, was) in self.changed {
            match (was.is_some(), now.contains_key(key)) {
                (true, false) => remaining += 1,
                (false, true) => remaining -= 1,
                _ => {}
            }
        }
        remaining
    }
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
    fn a_page_reads_after_its_key_at_its_version_and_counts_what_follows() {
        let s = Store::default();
        let names = |p: &Page| -> Vec<String> {
            p.items
                .iter()
                .map(|o| {
                    let m = &o["metadata"];
                    format!(
                        "{}/{}",
                        m["namespace"].as_str().unwrap_or_default(),
                        m["name"].as_str().unwrap_or_default()
                    )
                })
                .collect()
        };
        let key = |ns: &str, n: &str| (ns.to_string(), n.to_string());
        for (ns, n) in [
            ("a", "1"),
            ("a", "2"),
            ("a", "3"),
            ("a-b", "1"),
            ("b", "1"),
            ("b", "2"),
        ] {
            s.create(
                "pods",
                ns,
                n,
                json!({"metadata": {"name": n, "namespace": ns}}),
            )
            .expect("created");
        }
        let at = s.current_rv();
        // After `at`: a/2 changed, a/3 deleted, a/25 and b/0 created.
        s.update::<()>("pods", "a", "2", |o| {
            let mut n = o.clone();
            n["spec"] = json!({"n": 2});
            Ok(Some(n))
        })
        .expect("ok")
        .expect("updated");
        s.delete("pods", "a", "3").expect("deleted");
        for (ns, n) in [("a", "25"), ("b", "0")] {
            s.create(
                "pods",
                ns,
                n,
                json!({"metadata": {"name": n, "namespace": ns}}),
            )
            .expect("created");
        }

        // Now, every namespace, two at a time.
        let p = s.page("pods", None, None, None, 2, true).expect("now");
        assert_eq!(
            (names(&p), p.remaining, p.rv),
            (vec!["a/1".into(), "a/2".into()], Some(5), s.current_rv())
        );
        let p = s
            .page("pods", None, None, Some(&key("a", "2")), 2, true)
            .expect("now");
        assert_eq!(
            (names(&p), p.remaining),
            (vec!["a/25".into(), "a-b/1".into()], Some(3))
        );
        // One namespace: a name-sharing prefix ("a-b") is not in it.
        let p = s
            .page("pods", Some("a"), None, Some(&key("a", "2")), 10, true)
            .expect("now");
        assert_eq!((names(&p), p.remaining), (vec!["a/25".into()], Some(0)));

        // At `at`, the later changes undone: a/3 is back, a/25 and b/0 are not.
        let p = s
            .page("pods", None, Some(at), Some(&key("a", "1")), 2, true)
            .expect("then");
        assert_eq!(
            (names(&p), p.remaining, p.rv),
            (vec!["a/2".into(), "a/3".into()], Some(3), at)
        );
        assert!(p.items[0].get("spec").is_none(), "a/2 as it was at {at}");
        let p = s
            .page("pods", Some("b"), Some(at), None, 10, true)
            .expect("then");
        assert_eq!(
            (names(&p), p.remaining),
            (vec!["b/1".into(), "b/2".into()], Some(0))
        );
        let p = s
            .page("pods", None, Some(at), Some(&key("a", "3")), 1, true)
            .expect("then");
        assert_eq!((names(&p), p.remaining), (vec!["a-b/1".into()], Some(2)));

        // Without counting, whether more follow: at `at`, after a/2 comes
        // a/3 (deleted since); now, after a/25 in "a" nothing does (a/3
        // was deleted), and after b/1 at `at` only b/2.
        for (ns, at, after, more) in [
            (None, Some(at), key("a", "2"), true),
            (Some("a"), None, key("a", "25"), false),
            (Some("a"), Some(at), key("a", "2"), true),
            (Some("b"), Some(at), key("b", "2"), false),
            (Some("b"), None, key("b", "0"), true),
        ] {
            let p = s
                .page("pods", ns, at, Some(&after), 0, false)
                .expect("read");
            assert_eq!(
                (p.more, p.remaining),
                (more, None),
                "{ns:?} at {at:?} after {after:?}"
            );
        }
        // A key of another namespace: nothing follows it in this one.
        let p = s
            .page("pods", Some("a"), None, Some(&key("b", "1")), 10, true)
            .expect("now");
        assert!(p.items.is_empty() && p.remaining == Some(0) && !p.more);
        // Compacted: too old.
        s.compact();
        assert!(s.page("pods", None, Some(at), None, 10, true).is_err());
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

    #[test]
    fn a_compaction_tick_forgets_what_the_tick_before_saw() {
        let s = Store::default();
        let a = s.create("pods", "default", "a", obj("a")).expect("created");
        assert_eq!(s.compaction_tick(), None, "the first tick only looks");
        assert!(s.watch_from("pods", rv_of(&a) - 1).is_ok());
        let seen = s.current_rv();
        let b = s.create("pods", "default", "b", obj("b")).expect("created");
        assert_eq!(s.compaction_tick(), Some(seen));
        assert_eq!(
            s.watch_from("pods", rv_of(&a) - 1).map(|_| ()),
            Err(TooOld { oldest: seen + 1 })
        );
        assert!(s.list_at("pods", None, rv_of(&a) - 1).is_err());
        // What came after the earlier tick is still there.
        let (past, _rx) = s.watch_from("pods", seen).expect("after the compaction");
        assert_eq!(past.len(), 1);
        assert_eq!(rv_of(&past[0].object), rv_of(&b));
        assert_eq!(s.list_at("pods", None, seen).expect("kept").len(), 1);
        // The next tick forgets b's creation too.
        s.compaction_tick();
        assert!(s.watch_from("pods", seen).is_err());
        assert!(s.watch_from("pods", rv_of(&b)).is_ok());
        assert_eq!(s.history_size().0, 0);
    }

    #[test]
    fn compact_to_keeps_later_changes_and_never_moves_back() {
        let s = Store::default();
        let a = s.create("pods", "default", "a", obj("a")).expect("created");
        let b = s.create("pods", "default", "b", obj("b")).expect("created");
        s.compact_to(rv_of(&a));
        assert_eq!(s.compacted_rv(), rv_of(&a));
        assert!(s.watch_from("pods", rv_of(&a) - 1).is_err());
        let (past, _rx) = s.watch_from("pods", rv_of(&a)).expect("kept");
        assert_eq!(past.len(), 1);
        assert_eq!(rv_of(&past[0].object), rv_of(&b));
        s.compact_to(1);
        assert_eq!(s.compacted_rv(), rv_of(&a));
    }

    #[test]
    fn a_burst_past_the_byte_bound_is_compacted_away() {
        let limits = HistoryLimits {
            max_changes: 1_000,
            max_bytes: 64 * 1024,
        };
        let s = Store::with_limits(limits);
        let first = s.current_rv();
        let mut o = obj("p");
        o["spec"]["blob"] = json!("x".repeat(4096));
        s.create("pods", "default", "p", o).expect("created");
        for i in 0..100 {
            s.update("pods", "default", "p", |old| {
                let mut new = old.clone();
                new["spec"]["n"] = json!(i);
                Ok::<_, ()>(Some(new))
            })
            .expect("no error")
            .expect("updated");
        }
        let (kept, bytes) = s.history_size();
        assert!(bytes <= limits.max_bytes, "{bytes} bytes kept");
        assert!(kept < 100 && kept > 5, "{kept} changes kept");
        assert!(s.watch_from("pods", first).is_err());
        assert!(s.list_at("pods", None, first).is_err());
        let (past, _rx) = s
            .watch_from("pods", s.current_rv() - 1)
            .expect("the latest change is kept");
        assert_eq!(past.len(), 1);
    }

    #[test]
    fn superseded_versions_are_kept_as_bytes_and_read_back_the_same() {
        let s = Store::default();
        let a = s.create("pods", "default", "a", obj("a")).expect("created");
        let (_, live) = s.history_size();
        let b = s
            .update("pods", "default", "a", |old| {
                let mut new = old.clone();
                new["spec"]["n"] = json!(1.5);
                Ok::<_, ()>(Some(new))
            })
            .expect("no error")
            .expect("updated");
        let gone = s.delete("pods", "default", "a").expect("deleted");
        // The creation's object is now the packed first version; the
        // update's previous shares it; the deletion's object is packed.
        let (kept, bytes) = s.history_size();
        assert_eq!(kept, 3);
        let text = |v: &Value| serde_json::to_vec(v).expect("serialises").len();
        assert!(
            bytes >= 3 * live + 2 * text(&a) + text(&b) + text(&gone),
            "{bytes} bytes for versions of {} {} {}",
            text(&a),
            text(&b),
            text(&gone)
        );
        let (past, _rx) = s.watch_from("pods", rv_of(&a) - 1).expect("kept");
        let objects: Vec<&Value> = past.iter().map(|c| c.object.as_ref()).collect();
        assert_eq!(objects, [&*a, &*b, &*gone]);
        let previous: Vec<Option<&Value>> = past.iter().map(|c| c.previous.as_deref()).collect();
        assert_eq!(previous, [None, Some(&*a), Some(&*b)]);
        assert_eq!(
            s.list_at("pods", None, rv_of(&a)).expect("kept"),
            vec![a.clone()]
        );
        assert_eq!(
            s.list_at("pods", None, rv_of(&b)).expect("kept"),
            vec![b.clone()]
        );
    }

    fn manual_clock() -> (Clock, Arc<Mutex<Instant>>) {
        let now = Arc::new(Mutex::new(Instant::now()));
        let read = now.clone();
        let clock: Clock = Arc::new(move || *read.lock().expect("clock"));
        (clock, now)
    }

    #[tokio::test]
    async fn objects_with_a_time_to_live_are_deleted_that_long_after_their_last_write() {
        let (clock, now) = manual_clock();
        let advance = |d: u64| *now.lock().expect("clock") += Duration::from_secs(d);
        let s = Store::default().with_clock(clock);
        s.set_ttl("events", Some(Duration::from_secs(60)));
        s.create("events", "default", "e1", obj("e1"))
            .expect("created");
        s.create("pods", "default", "p", obj("p")).expect("created");
        advance(30);
        s.create("events", "default", "e2", obj("e2"))
            .expect("created");
        s.update::<()>("events", "default", "e1", |o| {
            let mut n = o.clone();
            n["count"] = json!(2);
            Ok(Some(n))
        })
        .expect("ok")
        .expect("updated");
        let mut rx = s.subscribe();
        advance(31);
        assert_eq!(s.expire(), 0, "e1 was written again at 30 s");
        advance(30);
        assert_eq!(s.expire(), 2);
        assert_eq!(s.count("events"), 0);
        assert_eq!(s.count("pods"), 1, "pods have no time to live");
        let mut deleted = Vec::new();
        while let Ok(c) = rx.try_recv() {
            assert_eq!(c.kind, EventType::Deleted);
            deleted.push(
                c.object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        deleted.sort();
        assert_eq!(deleted, ["e1", "e2"]);
        assert_eq!(s.expire(), 0);
    }

    #[test]
    fn an_object_deleted_before_its_time_to_live_is_left_alone() {
        let (clock, now) = manual_clock();
        let s = Store::default().with_clock(clock);
        s.set_ttl("events", Some(Duration::from_secs(1)));
        s.create("events", "default", "e", obj("e"))
            .expect("created");
        s.delete("events", "default", "e").expect("deleted");
        s.create("events", "default", "e", obj("e"))
            .expect("created again");
        let rv = s.current_rv();
        *now.lock().expect("clock") += Duration::from_millis(500);
        assert_eq!(s.expire(), 0);
        *now.lock().expect("clock") += Duration::from_secs(1);
        assert_eq!(s.expire(), 1);
        assert_eq!(s.current_rv(), rv + 1, "one delete, for the second e");
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
