//! Namespace deletion as kube-apiserver and the namespace controller do it:
//! a deleted namespace turns Terminating, its content is deleted with the
//! usual semantics (finalizers hold objects, pods get their grace period),
//! its status conditions say what remains, and once it is empty the
//! `kubernetes` finalizer is removed; the namespace goes when no finalizer
//! (spec or metadata) is left.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

use super::api::{Api, Query, Served, Target, finalizers, now_rfc3339};

/// The namespace controller's finalizer token.
pub const KUBERNETES_FINALIZER: &str = "kubernetes";

/// Namespaces being synced right now, and those that changed meanwhile
/// (keyed by the store's address, so sandboxes in one process stay apart).
struct Syncing {
    active: HashSet<(usize, String)>,
    dirty: HashSet<(usize, String)>,
}

fn syncing() -> std::sync::MutexGuard<'static, Syncing> {
    static S: OnceLock<Mutex<Syncing>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(Syncing {
            active: HashSet::new(),
            dirty: HashSet::new(),
        })
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}

/// `spec.finalizers` of a namespace.
pub fn spec_finalizers(ns: &Value) -> Vec<String> {
    ns.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a namespace being deleted may go: no finalizer of either kind.
pub fn finalized(ns: &Value) -> bool {
    spec_finalizers(ns).is_empty() && finalizers(ns).is_empty()
}

fn condition(type_: &str, remains: Option<(&str, String)>, ok: (&str, &str)) -> Value {
    let (status, reason, message) = match remains {
        Some((reason, message)) => ("True", reason.to_owned(), message),
        None => ("False", ok.0.to_owned(), ok.1.to_owned()),
    };
    json!({"type": type_, "status": status, "reason": reason, "message": message})
}

/// The five deletion conditions, as `status_condition_utils.go` words them.
fn conditions(content: &BTreeMap<String, usize>, held: &BTreeMap<String, usize>) -> Vec<Value> {
    let resources = (!content.is_empty()).then(|| {
        let each: Vec<String> = content
            .iter()
            .map(|(r, n)| format!("{r} has {n} resource instances"))
            .collect();
        (
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", each.join(", ")),
        )
    });
    let finalizers = (!held.is_empty()).then(|| {
        let each: Vec<String> = held
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        (
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                each.join(", ")
            ),
        )
    });
    vec![
        condition(
            "NamespaceDeletionDiscoveryFailure",
            None,
            (
                "ResourcesDiscovered",
                "All resources successfully discovered",
            ),
        ),
        condition(
            "NamespaceDeletionGroupVersionParsingFailure",
            None,
            (
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            ),
        ),
        condition(
            "NamespaceDeletionContentFailure",
            None,
            (
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            ),
        ),
        condition(
            "NamespaceContentRemaining",
            resources,
            ("ContentRemoved", "All content successfully removed"),
        ),
        condition(
            "NamespaceFinalizersRemaining",
            finalizers,
            (
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished",
            ),
        ),
    ]
}

/// Keeps each condition's `lastTransitionTime` while its status holds.
fn with_transition_times(new: Vec<Value>, old: &Value) -> Vec<Value> {
    let now = now_rfc3339();
    new.into_iter()
        .map(|mut c| {
            let before = old
                .as_array()
                .and_then(|l| l.iter().find(|o| o["type"] == c["type"]));
            c["lastTransitionTime"] = match before {
                Some(b) if b["status"] == c["status"] => b["lastTransitionTime"].clone(),
                _ => json!(now),
            };
            c
        })
        .collect()
}

impl Api {
    /// One pass of the namespace controller over `ns` if it is being
    /// deleted; repeated while its content changes under it.
    pub(crate) fn sync_namespace(&self, ns: &str) {
        let key = (std::ptr::from_ref(&self.store) as usize, ns.to_owned());
        {
            let mut s = syncing();
            if !s.active.insert(key.clone()) {
                s.dirty.insert(key);
                return;
            }
        }
        loop {
            syncing().dirty.remove(&key);
            self.sync_namespace_once(ns);
            let mut s = syncing();
            if !s.dirty.remove(&key) {
                s.active.remove(&key);
                return;
            }
        }
    }

    fn sync_namespace_once(&self, ns: &str) {
        let Some(namespace) = self.store.get("namespaces", "", ns) else {
            return;
        };
        if namespace.pointer("/metadata/deletionTimestamp").is_none() {
            return;
        }
        let served: Vec<Served> = self
            .registry()
            .all()
            .iter()
            .filter(|s| s.info.namespaced && !s.info.is_view())
            .cloned()
            .collect();
        // Delete what is not yet being deleted; dependents are not orphaned.
        let opts = json!({"propagationPolicy": "Background"});
        for s in &served {
            let (items, _) = self.store.list(&s.info.storage_resource(), Some(ns));
            for item in items
                .iter()
                .filter(|i| i.pointer("/metadata/deletionTimestamp").is_none())
            {
                let target = Target {
                    namespace: Some(ns.to_owned()),
                    name: item["metadata"]["name"].as_str().map(str::to_owned),
                    subresource: None,
                };
                let info = &s.info;
                let _ = self.delete(
                    &info.group,
                    &info.version,
                    &info.plural,
                    &target,
                    &opts,
                    &Query::default(),
                );
            }
        }
        let mut content: BTreeMap<String, usize> = BTreeMap::new();
        let mut held: BTreeMap<String, usize> = BTreeMap::new();
        for s in &served {
            let (items, _) = self.store.list(&s.info.storage_resource(), Some(ns));
            if items.is_empty() {
                continue;
            }
            content.insert(format!("{}.{}", s.info.plural, s.info.group), items.len());
            for f in items.iter().flat_map(|i| finalizers(i)) {
                *held.entry(f).or_default() += 1;
            }
        }
        let Ok(Ok(updated)) = self.store.update("namespaces", "", ns, |old| {
            let mut new = old.clone();
            let conds =
                with_transition_times(conditions(&content, &held), &old["status"]["conditions"]);
            new["status"]["phase"] = json!("Terminating");
            new["status"]["conditions"] = Value::Array(conds);
            if content.is_empty() {
                let kept: Vec<String> = spec_finalizers(old)
                    .into_iter()
                    .filter(|f| f != KUBERNETES_FINALIZER)
                    .collect();
                new["spec"]["finalizers"] = json!(kept);
            }
            Ok::<_, ()>((&new != old).then_some(new))
        }) else {
            return;
        };
        if finalized(&updated)
            && let Ok(s) = self.served("", "v1", "namespaces")
            && let Ok(gone) = self.store.delete("namespaces", "", ns)
        {
            self.after_delete(&s, &gone);
        }
    }
}
