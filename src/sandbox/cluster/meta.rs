//! Small shared pieces: reading object fields, time, owner references,
//! conditions, the adopt/release rule of controller references, and a writer
//! that remembers whether a write conflicted.

use serde_json::{Map, Value, json};

use crate::sandbox::api::{Api, ApiError, Query, Target};
use crate::sandbox::selector::LabelSelector;

/// A served resource, as the controllers address it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gvr {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
}

impl Gvr {
    /// The store's key (`plural.group`).
    pub fn key(self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `apiVersion` of its objects.
    pub fn api_version(self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub(crate) const PODS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "pods",
    kind: "Pod",
};
pub(crate) const NODES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "nodes",
    kind: "Node",
};
pub(crate) const EVENTS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "events",
    kind: "Event",
};
pub(crate) const REPLICA_SETS: Gvr = Gvr {
    group: "apps",
    version: "v1",
    plural: "replicasets",
    kind: "ReplicaSet",
};
pub(crate) const DEPLOYMENTS: Gvr = Gvr {
    group: "apps",
    version: "v1",
    plural: "deployments",
    kind: "Deployment",
};
pub(crate) const JOBS: Gvr = Gvr {
    group: "batch",
    version: "v1",
    plural: "jobs",
    kind: "Job",
};

/// `Value::pointer` without its per-token allocation (it unescapes `~0`
/// and `~1` into a new String for every step); the controllers walk
/// thousands of objects a second and their paths never hold escapes.
pub(crate) fn at<'a>(v: &'a Value, ptr: &str) -> Option<&'a Value> {
    if ptr.contains('~') || !(ptr.is_empty() || ptr.starts_with('/')) {
        return v.pointer(ptr);
    }
    let mut cur = v;
    for token in ptr.split('/').skip(1) {
        cur = match cur {
            Value::Object(m) => m.get(token)?,
            Value::Array(a) => a.get(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// The string at a JSON pointer, or "".
pub(crate) fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    at(v, ptr).and_then(Value::as_str).unwrap_or_default()
}

/// The integer at a JSON pointer.
pub(crate) fn int_at(v: &Value, ptr: &str) -> Option<i64> {
    at(v, ptr).and_then(Value::as_i64)
}

/// The boolean at a JSON pointer (false when absent).
pub(crate) fn bool_at(v: &Value, ptr: &str) -> bool {
    at(v, ptr).and_then(Value::as_bool).unwrap_or(false)
}

/// The array at a JSON pointer (empty when absent).
pub(crate) fn array_at<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    at(v, ptr)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

pub(crate) fn name(v: &Value) -> &str {
    str_at(v, "/metadata/name")
}

pub(crate) fn namespace(v: &Value) -> &str {
    str_at(v, "/metadata/namespace")
}

pub(crate) fn uid(v: &Value) -> &str {
    str_at(v, "/metadata/uid")
}

pub(crate) fn is_deleting(v: &Value) -> bool {
    at(v, "/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

/// `metadata.creationTimestamp` as Unix seconds (0 when absent, which the
/// orderings treat like Go's zero time).
pub(crate) fn created(v: &Value) -> i64 {
    time_at(v, "/metadata/creationTimestamp").unwrap_or(0)
}

/// Now, in Unix seconds.
pub(crate) fn now_secs() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// An RFC 3339 time at a JSON pointer, as Unix seconds.
pub(crate) fn time_at(v: &Value, ptr: &str) -> Option<i64> {
    parse_time(at(v, ptr)?.as_str()?)
}

/// Parses an RFC 3339 timestamp into Unix seconds.
pub(crate) fn parse_time(s: &str) -> Option<i64> {
    s.parse::<jiff::Timestamp>()
        .ok()
        .map(jiff::Timestamp::as_second)
}

/// Unix seconds as the API writes times (`2024-05-01T10:00:00Z`).
pub(crate) fn format_time(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The owner reference a controller puts on what it creates
/// (`metav1.NewControllerRef`).
pub(crate) fn controller_ref(owner: &Value, gvr: Gvr) -> Value {
    json!({
        "apiVersion": gvr.api_version(),
        "kind": gvr.kind,
        "name": name(owner),
        "uid": uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The owner reference with `controller: true`, if any.
pub(crate) fn controller_of(v: &Value) -> Option<&Value> {
    array_at(v, "/metadata/ownerReferences")
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// UID of the controlling owner.
pub(crate) fn controller_uid(v: &Value) -> Option<&str> {
    controller_of(v)
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
}

/// The condition of a type in `status.conditions`.
pub(crate) fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    array_at(obj, "/status/conditions")
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

/// Is the condition of that type present with status "True"?
pub(crate) fn condition_true(obj: &Value, kind: &str) -> bool {
    condition(obj, kind).is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// The parsed `spec.selector` of a workload; `None` when it does not parse
/// (the real controllers then skip the object).
pub(crate) fn selector(obj: &Value) -> Option<LabelSelector> {
    LabelSelector::from_k8s(obj.pointer("/spec/selector").unwrap_or(&Value::Null)).ok()
}

/// What `ControllerRefManager.ClaimObject` decides for one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Ours and matching: manage it.
    Owned,
    /// An orphan that matches: take it (then manage it).
    Adopt,
    /// Ours but no longer matching: let it go.
    Release,
    /// Someone else's, or not for us.
    Ignore,
}

/// Decides whether `owner` (with parsed `selector`) claims `obj`. Objects
/// being deleted are never adopted; an owner being deleted neither adopts
/// nor releases.
pub(crate) fn claim(owner: &Value, selector: &LabelSelector, obj: &Value) -> Claim {
    let matches = selector.matches_object(obj);
    match controller_uid(obj) {
        Some(u) if u == uid(owner) => {
            if matches {
                Claim::Owned
            } else if is_deleting(owner) {
                Claim::Ignore
            } else {
                Claim::Release
            }
        }
        Some(_) => Claim::Ignore,
        None => {
            if is_deleting(owner)
                || !matches
                || is_deleting(obj)
                || namespace(owner) != namespace(obj)
            {
                Claim::Ignore
            } else {
                Claim::Adopt
            }
        }
    }
}

/// The claim pass of kube-controller-manager's ref manager over
/// `candidates` of kind `gvr`: `owner` (of kind `owner_gvr`) keeps those it
/// controls and selects, adopts the orphans it selects (their adopted
/// copies go into `adopted`) and releases those it no longer selects. The
/// claimed objects: its own first, then the adopted.
pub(crate) fn claim_all<'v>(
    w: &mut Writer<'_>,
    (owner, owner_gvr): (&Value, Gvr),
    (gvr, selector): (Gvr, &LabelSelector),
    candidates: impl IntoIterator<Item = &'v Value>,
    adopted: &'v mut Vec<Value>,
) -> Vec<&'v Value> {
    let mut claimed: Vec<&'v Value> = Vec::new();
    for o in candidates {
        match claim(owner, selector, o) {
            Claim::Owned => claimed.push(o),
            Claim::Adopt => {
                if let Some(taken) = w.adopt(gvr, o, owner, owner_gvr) {
                    adopted.push(taken);
                }
            }
            Claim::Release => {
                let _ = w.release(gvr, o, uid(owner));
            }
            Claim::Ignore => {}
        }
    }
    let adopted: &'v Vec<Value> = adopted;
    claimed.extend(adopted.iter());
    claimed
}

/// Objects of one namespace as an owner's pass looks for what it can
/// claim: by the uid of their controller, and those with none. [`claim`]
/// ignores an object another controller holds, so an owner need look only
/// at its own and the orphans: a pass over N owners of M objects costs
/// N + M, not N × M (1,000 ReplicaSets × 10,000 pods is ten million label
/// matches a pass otherwise, and a pass follows every pod status write).
pub(crate) struct Claimable<'a> {
    objects: Vec<&'a Value>,
    by_controller: std::collections::HashMap<&'a str, Vec<usize>>,
    orphans: Vec<usize>,
}

impl<'a> Claimable<'a> {
    pub fn new(objects: Vec<&'a Value>) -> Self {
        let mut by_controller: std::collections::HashMap<&str, Vec<usize>> =
            std::collections::HashMap::new();
        let mut orphans = Vec::new();
        for (i, o) in objects.iter().enumerate() {
            match controller_uid(o) {
                Some(u) => by_controller.entry(u).or_default().push(i),
                None => orphans.push(i),
            }
        }
        Claimable {
            objects,
            by_controller,
            orphans,
        }
    }

    /// The objects of `objects` by namespace, each namespace's claimable
    /// (the start of every workload controller's pass).
    pub fn by_namespace(
        objects: &'a [std::sync::Arc<Value>],
    ) -> std::collections::HashMap<&'a str, Claimable<'a>> {
        by_namespace(objects.iter().map(std::sync::Arc::as_ref))
            .into_iter()
            .map(|(ns, objects)| (ns, Claimable::new(objects)))
            .collect()
    }

    /// Every object of the namespace, in the order given.
    pub fn all(&self) -> &[&'a Value] {
        &self.objects
    }

    /// The objects `owner` controls and those no one does, in the order
    /// given: every object for which [`claim`] can answer other than
    /// [`Claim::Ignore`].
    pub fn candidates(&self, owner: &Value) -> Vec<&'a Value> {
        let own = self
            .by_controller
            .get(uid(owner))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut at: Vec<usize> = own.iter().chain(&self.orphans).copied().collect();
        at.sort_unstable();
        at.into_iter().map(|i| self.objects[i]).collect()
    }
}

/// Objects by namespace, each namespace's in the order given.
pub(crate) fn by_namespace<'a>(
    objects: impl IntoIterator<Item = &'a Value>,
) -> std::collections::HashMap<&'a str, Vec<&'a Value>> {
    let mut out: std::collections::HashMap<&str, Vec<&Value>> = std::collections::HashMap::new();
    for o in objects {
        out.entry(namespace(o)).or_default().push(o);
    }
    out
}

/// Writes through the API, remembering conflicts so the pass is retried.
pub(crate) struct Writer<'a> {
    pub api: &'a Api,
    pub retry: bool,
    component: &'static str,
}

impl<'a> Writer<'a> {
    pub fn new(api: &'a Api, component: &'static str) -> Self {
        Writer {
            api,
            retry: false,
            component,
        }
    }

    fn note(&mut self, what: &str, obj: &str, e: &ApiError) {
        match e.code {
            409 => self.retry = true,
            404 => {}
            // A namespace being torn down refuses new content; nothing to do.
            403 => {}
            _ => {
                tracing::debug!(component = self.component, what, obj, error = %e.message, "sandbox controller write refused")
            }
        }
    }

    /// POST; the API's answer (conflicts flag a retry).
    pub fn create(&mut self, gvr: Gvr, ns: &str, obj: Value) -> Result<Value, ApiError> {
        let r = self.api.create(
            gvr.group,
            gvr.version,
            gvr.plural,
            Some(ns),
            obj,
            &Query::default(),
        );
        if let Err(e) = &r {
            self.note("create", gvr.plural, e);
        }
        r
    }

    /// PUT of the object (its `metadata.resourceVersion` is the precondition).
    pub fn update(&mut self, gvr: Gvr, obj: Value) -> Option<Value> {
        self.put(gvr, obj, None)
    }

    /// PUT of the status subresource.
    pub fn update_status(&mut self, gvr: Gvr, obj: Value) -> Option<Value> {
        self.put(gvr, obj, Some("status"))
    }

    fn put(&mut self, gvr: Gvr, obj: Value, sub: Option<&str>) -> Option<Value> {
        let target = target(namespace(&obj), name(&obj), sub);
        let obj_name = name(&obj).to_string();
        match self.api.update(
            gvr.group,
            gvr.version,
            gvr.plural,
            &target,
            obj,
            &Query::default(),
        ) {
            Ok(v) => Some(v),
            Err(e) => {
                self.note("update", &obj_name, &e);
                None
            }
        }
    }

    /// DELETE with options (`{}` for the defaults); true when accepted.
    pub fn delete(&mut self, gvr: Gvr, ns: &str, name: &str, options: &Value) -> bool {
        match self.api.delete(
            gvr.group,
            gvr.version,
            gvr.plural,
            &target(ns, name, None),
            options,
            &Query::default(),
        ) {
            Ok(_) => true,
            Err(e) => {
                self.note("delete", name, &e);
                false
            }
        }
    }

    /// Adds `owner`'s controller reference to an orphan.
    pub fn adopt(&mut self, gvr: Gvr, obj: &Value, owner: &Value, owner_gvr: Gvr) -> Option<Value> {
        let mut new = obj.clone();
        let reference = controller_ref(owner, owner_gvr);
        let meta = new.get_mut("metadata").and_then(Value::as_object_mut)?;
        match meta
            .entry("ownerReferences")
            .or_insert_with(|| json!([]))
            .as_array_mut()
        {
            Some(refs) => refs.push(reference),
            None => {
                meta.insert("ownerReferences".into(), json!([reference]));
            }
        }
        self.update(gvr, new)
    }

    /// Removes the owner reference to `owner_uid`.
    pub fn release(&mut self, gvr: Gvr, obj: &Value, owner_uid: &str) -> Option<Value> {
        let mut new = obj.clone();
        let meta = new.get_mut("metadata").and_then(Value::as_object_mut)?;
        if let Some(refs) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
            if refs.is_empty() {
                meta.remove("ownerReferences");
            }
        }
        self.update(gvr, new)
    }

    /// Records an Event about `involved`, as client-go's recorder does.
    pub fn event(&mut self, involved: &Value, kind: &str, reason: &str, message: &str) {
        super::events::record(self.api, involved, kind, reason, message, self.component);
    }
}

/// A request target.
pub(crate) fn target(ns: &str, name: &str, sub: Option<&str>) -> Target {
    Target {
        namespace: (!ns.is_empty()).then(|| ns.to_string()),
        name: Some(name.to_string()),
        subresource: sub.map(str::to_string),
    }
}

/// `status` of an object as a map to edit (empty when absent).
pub(crate) fn status_map(obj: &Value) -> Map<String, Value> {
    obj.get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Sets an integer status field the way Go's `omitempty` writes it: zero
/// removes the field.
pub(crate) fn set_omitempty(status: &mut Map<String, Value>, key: &str, n: i64) {
    if n == 0 {
        status.remove(key);
    } else {
        status.insert(key.to_string(), json!(n));
    }
}

/// A copy of `obj` with `status` replaced, for a status write.
pub(crate) fn with_status(obj: &Value, status: Map<String, Value>) -> Value {
    let mut new = obj.clone();
    new["status"] = Value::Object(status);
    new
}

/// Serializes with object keys sorted at every level, so a hash of it does
/// not depend on how a map happened to be ordered.
pub(crate) fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(x) = m.get(k) {
                    write_canonical(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(uid: &str, labels: Value, owner: Option<&str>, deleting: bool) -> Value {
        let mut v = json!({"metadata": {"name": "x", "namespace": "default", "uid": uid, "labels": labels}});
        if let Some(o) = owner {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "o", "uid": o, "controller": true}]);
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        v
    }

    #[test]
    fn an_owner_is_offered_its_own_objects_and_the_orphans_in_order_and_nothing_it_would_ignore() {
        let owner = obj("rs", json!({}), None, false);
        let sel = LabelSelector::from_set(&json!({"app": "a"}));
        let objects = [
            obj("p0", json!({"app": "a"}), Some("other"), false),
            obj("p1", json!({"app": "a"}), None, false),
            obj("p2", json!({"app": "a"}), Some("rs"), false),
            obj("p3", json!({"app": "b"}), Some("rs"), false),
            obj("p4", json!({"app": "b"}), None, false),
            obj("p5", json!({"app": "a"}), Some("other"), false),
        ];
        let index = Claimable::new(objects.iter().collect());
        let offered: Vec<&str> = index.candidates(&owner).into_iter().map(uid).collect();
        assert_eq!(offered, ["p1", "p2", "p3", "p4"]);
        // Nothing left out is one the owner would claim, adopt or release.
        for o in &objects {
            if !offered.contains(&uid(o)) {
                assert_eq!(claim(&owner, &sel, o), Claim::Ignore, "{o}");
            }
        }
        assert_eq!(index.all().len(), objects.len());
        let other = obj("nobody", json!({}), None, false);
        let offered: Vec<&str> = index.candidates(&other).into_iter().map(uid).collect();
        assert_eq!(offered, ["p1", "p4"]);
    }

    #[test]
    fn objects_are_grouped_by_namespace_in_order() {
        let mut a = obj("a", json!({}), None, false);
        let mut b = obj("b", json!({}), None, false);
        let c = obj("c", json!({}), None, false);
        a["metadata"]["namespace"] = json!("x");
        b["metadata"]["namespace"] = json!("y");
        let mut d = c.clone();
        d["metadata"]["uid"] = json!("d");
        d["metadata"]["namespace"] = json!("x");
        let all = [a, b, c, d];
        let grouped = by_namespace(all.iter());
        let uids = |ns: &str| -> Vec<&str> { grouped[ns].iter().map(|o| uid(o)).collect() };
        assert_eq!(uids("x"), ["a", "d"]);
        assert_eq!(uids("y"), ["b"]);
        assert_eq!(uids("default"), ["c"]);
    }

    #[test]
    fn claiming_adopts_matching_orphans_releases_strays_and_ignores_others() {
        let owner = obj("rs", json!({}), None, false);
        let sel = LabelSelector::from_k8s(&json!({"matchLabels": {"app": "a"}})).expect("valid");
        let cases = [
            (
                obj("p", json!({"app": "a"}), Some("rs"), false),
                Claim::Owned,
            ),
            (
                obj("p", json!({"app": "b"}), Some("rs"), false),
                Claim::Release,
            ),
            (obj("p", json!({"app": "a"}), None, false), Claim::Adopt),
            (obj("p", json!({"app": "b"}), None, false), Claim::Ignore),
            (obj("p", json!({"app": "a"}), None, true), Claim::Ignore),
            (
                obj("p", json!({"app": "a"}), Some("other"), false),
                Claim::Ignore,
            ),
        ];
        for (candidate, want) in cases {
            assert_eq!(claim(&owner, &sel, &candidate), want, "{candidate}");
        }
    }

    #[test]
    fn an_owner_being_deleted_keeps_what_it_owns_but_adopts_and_releases_nothing() {
        let owner = obj("rs", json!({}), None, true);
        let sel = LabelSelector::from_k8s(&json!({"matchLabels": {"app": "a"}})).expect("valid");
        assert_eq!(
            claim(
                &owner,
                &sel,
                &obj("p", json!({"app": "a"}), Some("rs"), false)
            ),
            Claim::Owned
        );
        assert_eq!(
            claim(
                &owner,
                &sel,
                &obj("p", json!({"app": "b"}), Some("rs"), false)
            ),
            Claim::Ignore
        );
        assert_eq!(
            claim(&owner, &sel, &obj("p", json!({"app": "a"}), None, false)),
            Claim::Ignore
        );
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"d": [1, {"z": 1, "y": 2}], "c": "x"}}"#)
                .expect("json");
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":"x","d":[1,{"y":2,"z":1}]},"b":1}"#
        );
    }

    #[test]
    fn times_round_trip_through_the_api_format() {
        let t = parse_time("2024-05-01T10:00:00Z").expect("parses");
        assert_eq!(format_time(t), "2024-05-01T10:00:00Z");
        assert_eq!(parse_time("not a time"), None);
    }
}

#[cfg(test)]
mod pointer_tests {
    use super::at;
    use serde_json::json;

    #[test]
    fn at_reads_like_json_pointer() {
        let v = json!({"a": {"b": [10, {"c": "x"}], "d~e": 1, "f/g": 2}, "": 3});
        for p in [
            "",
            "/a",
            "/a/b",
            "/a/b/0",
            "/a/b/1/c",
            "/a/b/2",
            "/a/x",
            "/a/b/x",
            "/a/d~0e",
            "/a/f~1g",
            "/",
            "/a/b/1/c/z",
            "a",
            "a/b",
        ] {
            assert_eq!(at(&v, p), v.pointer(p), "{p}");
        }
    }
}
