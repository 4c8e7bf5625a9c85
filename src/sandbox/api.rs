//! API semantics over the store: what kube-apiserver does with each verb —
//! names, uids, resourceVersion preconditions, generation, status
//! subresources, the patch types, deletion with finalizers and garbage
//! collection, namespaces, and CRDs that bring their own resources.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{Map, Value, json};

use super::convert;
use super::managed::{self, field_path, leaves as apply_leaves, remove_leaf};
use super::registry::{ResourceInfo, SubresourceInfo};
use super::store::{Store, StoreError, rv_of};
use crate::plan::strategic_merge;

/// An API error, answered as a `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `reason` (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid` …).
    pub reason: &'static str,
    /// Human message, worded as kube-apiserver words it.
    pub message: String,
    /// `details`, when the real server sends them.
    pub details: Option<Value>,
    /// `metadata` of the Status (a fresh `continue` token on an expired one).
    pub list_meta: Option<Value>,
}

impl ApiError {
    /// Any status.
    pub fn new_status(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(code, reason, message)
    }

    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            list_meta: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// 404 NotFound for an object.
    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        let mut e = ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", info.group_resource()),
        );
        e.details = Some(details(info, name));
        e
    }

    /// 404 for a path that names nothing we serve.
    pub fn no_route(path: &str) -> Self {
        let _ = path;
        let mut e = ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        // The real apiserver sends empty details here, and clients rely on
        // it (`kubectl debug` reads `details.name` to tell a missing route
        // from a missing pod).
        e.details = Some(json!({}));
        e
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(method: &str) -> Self {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        let mut e = ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", info.group_resource()),
        );
        e.details = Some(details(info, name));
        e
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(info: &ResourceInfo, name: &str) -> Self {
        let mut e = ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                info.group_resource()
            ),
        );
        e.details = Some(details(info, name));
        e
    }

    /// 422 Invalid with one cause per bad field.
    pub fn invalid(info: &ResourceInfo, name: &str, causes: Vec<(String, String)>) -> Self {
        let list: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let message = if list.len() == 1 {
            format!("{} \"{name}\" is invalid: {}", info.kind, list[0])
        } else {
            format!("{} \"{name}\" is invalid: [{}]", info.kind, list.join(", "))
        };
        let mut d = details(info, name);
        d["kind"] = json!(info.kind);
        d["causes"] = Value::Array(
            causes
                .into_iter()
                .map(|(field, message)| json!({"reason": cause_reason(&message), "message": message, "field": field}))
                .collect(),
        );
        ApiError {
            code: 422,
            reason: "Invalid",
            message,
            details: Some(d),
            list_meta: None,
        }
    }

    /// 415 for a patch type the resource does not accept.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type})"
            ),
        )
    }

    /// 410 Expired for a watch or list from a compacted resourceVersion.
    pub fn gone(asked: u64, oldest: u64) -> Self {
        ApiError::new(
            410,
            "Expired",
            format!("too old resource version: {asked} ({oldest})"),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", message)
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.list_meta.clone().unwrap_or_else(|| json!({})),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// The `reason` of a field error, from its message as field.Error words it
/// (`Required value` is `FieldValueRequired` …).
fn cause_reason(message: &str) -> &'static str {
    const REASONS: [(&str, &str); 6] = [
        ("Required value", "FieldValueRequired"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Forbidden", "FieldValueForbidden"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
    ];
    REASONS
        .iter()
        .find(|(prefix, _)| message.starts_with(prefix))
        .map_or("FieldValueInvalid", |(_, reason)| reason)
}

fn details(info: &ResourceInfo, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": info.plural});
    if !info.group.is_empty() {
        d["group"] = json!(info.group);
    }
    d
}

/// Result with an API error.
pub type ApiResult<T> = Result<T, ApiError>;

/// A CRD's extras the built-in table does not have.
#[derive(Debug, Clone, Default)]
pub struct CrdExtras {
    /// `additionalPrinterColumns` of the served version.
    pub printer_columns: Vec<Value>,
    /// `openAPIV3Schema` of the served version.
    pub schema: Option<Value>,
    /// `selectableFields` JSON paths.
    pub selectable_fields: Vec<String>,
    /// Scale subresource paths.
    pub scale: Option<Value>,
}

/// One served resource.
#[derive(Debug, Clone)]
pub struct Served {
    /// Discovery facts.
    pub info: ResourceInfo,
    /// Set for custom resources (shared: a request takes a copy of its
    /// resource, and the schema was a fifth of what the sandbox allocated).
    pub crd: Option<Arc<CrdExtras>>,
}

/// All served resources, built-in and custom.
#[derive(Debug, Default)]
pub struct Registry {
    served: Vec<Served>,
}

impl Registry {
    /// Built-ins only.
    pub fn new(builtins: Vec<ResourceInfo>) -> Self {
        Registry {
            served: builtins
                .into_iter()
                .map(|info| Served { info, crd: None })
                .collect(),
        }
    }

    /// Finds a resource by URL parts.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&Served> {
        self.served
            .iter()
            .find(|s| s.info.group == group && s.info.version == version && s.info.plural == plural)
    }

    /// Finds a resource by group and kind (any version).
    pub fn find_kind(&self, group: &str, kind: &str) -> Option<&Served> {
        self.served
            .iter()
            .find(|s| s.info.group == group && s.info.kind == kind)
    }

    /// Every served resource.
    pub fn all(&self) -> &[Served] {
        &self.served
    }

    fn remove_group_resource(&mut self, group: &str, plural: &str) {
        self.served
            .retain(|s| !(s.info.group == group && s.info.plural == plural && s.crd.is_some()));
    }
}

/// A parsed request for an object or collection.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// Namespace from the path ("" for cluster-scoped or all namespaces).
    pub namespace: Option<String>,
    /// Object name, when the path names one.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`, `log` …).
    pub subresource: Option<String>,
}

/// Query parameters the API understands.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// All parameters as given (last one wins).
    pub params: HashMap<String, String>,
    /// Warnings for the client (`Warning: 299` headers), shared by clones.
    warnings: Arc<Mutex<Vec<String>>>,
    /// The client's `User-Agent`, which names the field manager of writes
    /// that give none.
    pub user_agent: Option<String>,
}

impl Query {
    /// Parses a raw query string leniently (kube-rs sends `?&limit=500`).
    pub fn parse(raw: Option<&str>) -> Self {
        let mut params = HashMap::new();
        for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            params.insert(percent_decode(k), percent_decode(v));
        }
        Query {
            params,
            warnings: Arc::default(),
            user_agent: None,
        }
    }

    /// The field manager of a write: `fieldManager`, else the User-Agent up
    /// to its first `/` (as the apiserver defaults it); the sandbox's own
    /// controllers write as `kube-controller-manager`.
    pub fn manager(&self) -> String {
        if let Some(m) = self.get("fieldManager") {
            return m.to_owned();
        }
        match self
            .user_agent
            .as_deref()
            .map(|u| u.split('/').next().unwrap_or(u))
        {
            Some(prefix) if !prefix.is_empty() => prefix.to_owned(),
            _ => "kube-controller-manager".to_owned(),
        }
    }

    /// Adds a warning for the client.
    pub fn warn(&self, message: String) {
        self.warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(message);
    }

    /// The warnings gathered while serving the request.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What `fieldValidation` asks for unknown fields: `Strict`, `Warn`
    /// (the default) or `Ignore`; anything else is a 422 naming `options`
    /// (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
    pub fn field_validation(&self, options: &str) -> ApiResult<&str> {
        match self.get("fieldValidation") {
            None => Ok("Warn"),
            Some(v @ ("Strict" | "Warn" | "Ignore")) => Ok(v),
            Some(other) => {
                let message = format!(
                    "Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
                );
                let mut e = ApiError::new_status(
                    422,
                    "Invalid",
                    format!("{options}.meta.k8s.io \"\" is invalid: fieldValidation: {message}"),
                );
                e.details = Some(json!({"group": "meta.k8s.io", "kind": options,
                    "causes": [{"reason": "FieldValueNotSupported", "message": message, "field": "fieldValidation"}]}));
                Err(e)
            }
        }
    }

    /// Applies `fieldValidation` to the unknown fields a write dropped:
    /// `Strict` refuses the request as the apiserver's decoder does, `Warn`
    /// warns per field, `Ignore` says nothing. `decoded` is the kind and
    /// version for a create or update, whose error names them; `None` for a
    /// patch.
    pub fn check_unknown_fields(
        &self,
        unknown: &[String],
        options: &str,
        decoded: Option<(&str, &str)>,
    ) -> ApiResult<()> {
        let mode = self.field_validation(options)?;
        if unknown.is_empty() || mode == "Ignore" {
            return Ok(());
        }
        let fields: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        if mode == "Warn" {
            for f in fields {
                self.warn(f);
            }
            return Ok(());
        }
        let strict = format!("strict decoding error: {}", fields.join(", "));
        Err(ApiError::bad_request(match decoded {
            Some((kind, version)) => {
                format!("{kind} in version \"{version}\" cannot be handled as a {kind}: {strict}")
            }
            None => strict,
        }))
    }

    /// One parameter.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.params
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A boolean parameter, read as the apiserver's query conversion reads
    /// one: absent is false; present, it is true unless `0` or `false` in
    /// any case (the Python client sends `watch=True`, a bare `?watch` is true).
    pub fn flag(&self, key: &str) -> bool {
        self.opt_flag(key).unwrap_or(false)
    }

    /// A `*bool` parameter such as `sendInitialEvents`: `None` when absent.
    pub fn opt_flag(&self, key: &str) -> Option<bool> {
        self.params
            .get(key)
            .map(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
    }

    /// `dryRun=All`.
    pub fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }
}

/// Decodes `%XX` and `+` in a query component.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What `GET …/pods/NAME/log` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Container (required when the pod has several).
    pub container: Option<String>,
    /// The previous (terminated) instance of the container.
    pub previous: bool,
    /// Only the last N lines.
    pub tail_lines: Option<usize>,
    /// Only lines newer than this many seconds.
    pub since_seconds: Option<u64>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<usize>,
    /// Keep streaming new output.
    pub follow: bool,
    /// Prefix each line with its RFC 3339 timestamp.
    pub timestamps: bool,
}

/// Log output: what exists now, and for `follow` the rest as it comes
/// (the channel closes when the container stops).
pub enum LogStream {
    /// All there is.
    Done(Vec<u8>),
    /// What exists now, then more.
    Follow(Vec<u8>, tokio::sync::mpsc::Receiver<Vec<u8>>),
}

/// Hooks the simulated cluster gives the API (graceful pod deletion, logs).
pub trait Hooks: Send + Sync {
    /// A pod was asked to be deleted gracefully; the kubelet removes it
    /// (with [`Api::finish_pod_deletion`]) when its containers have stopped.
    /// Returns false when no kubelet handles it (it is then removed at once).
    fn pod_deletion_requested(&self, _namespace: &str, _name: &str) -> bool {
        false
    }

    /// Container logs. The default answers as a kubelet-less cluster would.
    fn pod_logs(&self, _namespace: &str, name: &str, _opts: &LogOptions) -> ApiResult<LogStream> {
        Err(ApiError::bad_request(format!(
            "pod {name} has no running kubelet: no logs are available"
        )))
    }

    /// Exec or attach: what to start once the connection is upgraded, or
    /// why the stream cannot be served.
    fn pod_stream(&self, req: &super::exec::StreamRequest) -> ApiResult<super::exec::Launcher> {
        Err(ApiError::bad_request(format!(
            "pod {} has no running kubelet: exec and attach are not available",
            req.pod
        )))
    }

    /// Port-forward: where the pod's ports are on its node.
    fn pod_port_forward(
        &self,
        _namespace: &str,
        name: &str,
    ) -> ApiResult<super::portforward::Target> {
        Err(ApiError::bad_request(format!(
            "pod {name} has no running kubelet: port-forward is not available"
        )))
    }
}

struct NoHooks;
impl Hooks for NoHooks {}

/// The API: store + registry + semantics.
pub struct Api {
    /// Objects.
    pub store: Store,
    registry: RwLock<Registry>,
    last_applied: Mutex<HashMap<(String, String, String, String), Value>>,
    hooks: RwLock<Arc<dyn Hooks>>,
    /// Fault injection.
    pub faults: super::faults::Faults,
    server_url: RwLock<String>,
    /// The CA, serving certificate and token keys (see [`super::auth`]).
    pub security: super::auth::Security,
    /// Set when the server serves a snapshot ([`super::snapshot`]): what
    /// it serves, for the Status that refuses every write.
    read_only: RwLock<Option<String>>,
}

const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Kinds whose objects carry `metadata.generation` in a real cluster.
fn has_generation(info: &ResourceInfo, is_crd: bool) -> bool {
    is_crd
        || matches!(
            info.kind.as_str(),
            "Deployment"
                | "ReplicaSet"
                | "StatefulSet"
                | "DaemonSet"
                | "Job"
                | "CronJob"
                | "CustomResourceDefinition"
                | "NetworkPolicy"
                | "PodDisruptionBudget"
                | "Pod"
        )
}

impl Api {
    /// An API with the given built-in resources and the system namespaces.
    pub fn new(builtins: Vec<ResourceInfo>) -> Self {
        let api = Api {
            store: Store::default(),
            registry: RwLock::new(Registry::new(builtins)),
            last_applied: Mutex::new(HashMap::new()),
            hooks: RwLock::new(Arc::new(NoHooks)),
            faults: super::faults::Faults::default(),
            server_url: RwLock::new(String::new()),
            security: super::auth::Security::generate()
                .expect("a CA and serving certificate from fixed, valid parameters"),
            read_only: RwLock::new(None),
        };
        for ns in SYSTEM_NAMESPACES {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let _ = api.create("", "v1", "namespaces", None, obj, &Query::default());
        }
        // What the aggregator registers at start for the groups served here.
        let services = super::bootstrap::api_services(api.registry().all());
        for obj in services {
            api.seed("apiregistration.k8s.io", "apiservices", None, obj);
        }
        // What `componentstatuses` reports of a healthy control plane.
        for obj in super::bootstrap::component_statuses() {
            api.seed("", "componentstatuses", None, obj);
        }
        // What the apiserver's RBAC bootstrap policy creates at start, the
        // aggregated roles' rules filled (a cluster's controller manager
        // fills them within moments).
        for (plural, obj) in super::bootstrap::default_rbac() {
            let ns = obj["metadata"]["namespace"].as_str();
            let _ = api.create(
                "rbac.authorization.k8s.io",
                "v1",
                plural,
                ns,
                obj.clone(),
                &Query::default(),
            );
        }
        api
    }

    /// Creates `obj` with its status as given, as a component that writes
    /// the status after creating it would leave it.
    fn seed(&self, group: &str, plural: &str, ns: Option<&str>, obj: Value) {
        let q = Query::default();
        let version = self
            .registry()
            .all()
            .iter()
            .find(|s| s.info.group == group && s.info.plural == plural)
            .map(|s| s.info.version.clone());
        let Some(version) = version else {
            return;
        };
        let Ok(mut created) = self.create(group, &version, plural, ns, obj.clone(), &q) else {
            return;
        };
        if obj.get("status").is_some() && created.get("status") != obj.get("status") {
            created["status"] = obj["status"].clone();
            let target = Target {
                namespace: ns.map(str::to_owned),
                name: created["metadata"]["name"].as_str().map(str::to_owned),
                subresource: Some("status".into()),
            };
            let _ = self.update(group, &version, plural, &target, created, &q);
        }
    }

    /// A stored pod, or the 404 the apiserver answers for it (logs, exec,
    /// attach and port-forward all start here).
    pub fn pod(&self, namespace: &str, name: &str) -> ApiResult<Arc<Value>> {
        let served = self.served("", "v1", "pods")?;
        self.store
            .get("pods", namespace, name)
            .ok_or_else(|| ApiError::not_found(&served.info, name))
    }

    /// Refuses every write from now on, saying the server serves `what`.
    pub fn set_read_only(&self, what: &str) {
        *self.read_only.write().unwrap_or_else(|p| p.into_inner()) = Some(what.to_owned());
    }

    /// What the server serves read-only, if it does.
    pub fn read_only(&self) -> Option<String> {
        self.read_only
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stores `obj` as it is — uid, times, status and all, as an apiserver
    /// restored from a backup serves them — under a new resourceVersion.
    /// No admission, defaults or garbage collection: for a snapshot
    /// ([`super::snapshot`]).
    pub fn restore(&self, obj: Value) -> Result<(), String> {
        let (group, _) = obj["apiVersion"]
            .as_str()
            .map(|v| v.rsplit_once('/').unwrap_or(("", v)))
            .ok_or("no apiVersion")?;
        let kind = obj["kind"].as_str().ok_or("no kind")?;
        let s = self
            .registry()
            .find_kind(group, kind)
            .cloned()
            .ok_or_else(|| format!("the kind {kind} of {group:?} is not served"))?;
        let name = obj["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or("no metadata.name")?
            .to_owned();
        let ns = if s.info.namespaced {
            obj["metadata"]["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or("no metadata.namespace")?
                .to_owned()
        } else {
            String::new()
        };
        self.store
            .create(
                &s.info.storage_resource(),
                &ns,
                &name,
                convert::to_storage(&s.info, obj),
            )
            .map(|_| ())
            .map_err(|_| "there are two of it".to_owned())
    }

    /// Records where the HTTP server listens (for in-cluster env of pods).
    pub fn set_server_url(&self, url: &str) {
        *self.server_url.write().unwrap_or_else(|p| p.into_inner()) = url.to_string();
    }

    /// `https://127.0.0.1:PORT` of the server, empty before it listens.
    pub fn server_url(&self) -> String {
        self.server_url
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The token open watches end on when faults drop them.
    pub fn faults_cancel_token(&self) -> tokio_util::sync::CancellationToken {
        self.faults.watch_token()
    }

    /// Installs the simulated cluster's hooks.
    pub fn set_hooks(&self, hooks: Arc<dyn Hooks>) {
        *self.hooks.write().unwrap_or_else(|p| p.into_inner()) = hooks;
    }

    /// The installed hooks.
    pub fn hooks(&self) -> Arc<dyn Hooks> {
        self.hooks.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A read view of the registry.
    pub fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Looks a resource up, or 404.
    pub fn served(&self, group: &str, version: &str, plural: &str) -> ApiResult<Served> {
        self.registry()
            .find(group, version, plural)
            .cloned()
            .ok_or_else(|| ApiError::no_route(&format!("{group}/{version}/{plural}")))
    }

    fn namespace_for(&self, s: &Served, ns: Option<&str>) -> ApiResult<String> {
        if s.info.namespaced {
            match ns {
                Some(ns) if !ns.is_empty() => Ok(ns.to_string()),
                _ => Err(ApiError::bad_request(
                    "the server could not find the requested resource: a namespace is required",
                )),
            }
        } else {
            Ok(String::new())
        }
    }

    /// GET one object.
    pub fn get(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        let s = self.served(group, version, plural)?;
        let ns = self.namespace_for(&s, ns)?;
        self.store
            .get(&s.info.storage_resource(), &ns, name)
            .map(|o| convert::present(&s.info, o))
            .ok_or_else(|| ApiError::not_found(&s.info, name))
    }

    /// POST: create an object.
    pub fn create(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        ns: Option<&str>,
        obj: Value,
        query: &Query,
    ) -> ApiResult<Value> {
        self.create_as(group, version, plural, ns, obj, query, None)
    }

    /// Create, by an apply (`applied` names its fields) or an update.
    #[allow(clippy::too_many_arguments)]
    fn create_as(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        ns: Option<&str>,
        mut obj: Value,
        query: &Query,
        applied: Option<std::collections::BTreeSet<managed::Path>>,
    ) -> ApiResult<Value> {
        let s = self.served(group, version, plural)?;
        let ns = self.namespace_for(&s, ns)?;
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        check_type_meta(&s.info, &obj)?;
        let admission = Admission {
            s: &s,
            query,
            write: WriteKind::Create,
            applied,
        };
        let name = self.new_metadata(&admission, &ns, &mut obj)?;
        set_type_meta(&s.info, &mut obj);
        drop_created_status(&s, &mut obj);
        admission.check_options()?;
        admission.decode(&mut obj)?;
        admission.strategy(self, &ns, &mut obj)?;
        if s.crd.is_none() {
            // Its status holds what Go always writes of the status struct
            // (a new DaemonSet's four counts at 0, a ReplicaSet's replicas),
            // under what the kind's strategy set.
            super::gotypes::fill_status(&mut obj);
        }
        admission.custom_schema(&name, &mut obj, None)?;
        admission.track(None, &mut obj, None);
        if query.dry_run() {
            return Ok(obj);
        }
        let created = self
            .store
            .create(
                &s.info.storage_resource(),
                &ns,
                &name,
                convert::to_storage(&s.info, obj),
            )
            .map_err(|_| ApiError::already_exists(&s.info, &name))?;
        self.after_write(&s, &created);
        Ok(convert::present_value(&s.info, (*created).clone()))
    }

    /// A new object's metadata: its namespace (the request's), its name
    /// (or one generated), validated, the namespace open for content, and
    /// what the server sets of a new object (uid, creationTimestamp,
    /// generation). Gives the name.
    fn new_metadata(
        &self,
        admission: &Admission<'_>,
        ns: &str,
        obj: &mut Value,
    ) -> ApiResult<String> {
        let s = admission.s;
        let meta = obj
            .as_object_mut()
            .and_then(|o| {
                o.entry("metadata").or_insert_with(|| json!({}));
                o.get_mut("metadata")
            })
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        if s.info.namespaced {
            match meta.get("namespace").and_then(Value::as_str) {
                Some(body_ns) if !body_ns.is_empty() && body_ns != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    meta.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            meta.remove("namespace");
        }
        let name = new_name(&s.info, meta)?;
        admission.validate_metadata(&name, meta)?;
        self.check_namespace_open(&s.info, ns, &name)?;
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.remove("resourceVersion");
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("managedFields");
        if has_generation(&s.info, s.crd.is_some()) {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        Ok(name)
    }

    /// A namespaced create needs its namespace to exist (404) and not be
    /// terminating (403).
    fn check_namespace_open(&self, info: &ResourceInfo, ns: &str, name: &str) -> ApiResult<()> {
        if info.namespaced
            && info.kind != "Namespace"
            && self.store.get("namespaces", "", ns).is_none()
        {
            let mut e = ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"));
            e.details = Some(json!({"name": ns, "kind": "namespaces"}));
            return Err(e);
        }
        if let Some(n) = self.store.get("namespaces", "", ns)
            && n.pointer("/metadata/deletionTimestamp").is_some()
        {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    info.group_resource()
                ),
            ));
        }
        Ok(())
    }

    /// Kind-specific defaults on create, as the real registry strategies do.
    fn admit_create(&self, s: &Served, ns: &str, obj: &mut Value) -> ApiResult<()> {
        match (s.info.group.as_str(), s.info.kind.as_str()) {
            ("", "Namespace") => namespace_defaults(obj),
            ("", "Pod") => self.pod_defaults(&s.info, ns, obj)?,
            ("", "Secret") => {
                if let Some(o) = obj.as_object_mut() {
                    o.entry("type").or_insert(json!("Opaque"));
                }
            }
            ("", "Service") => self.service_defaults(obj),
            ("apps", "Deployment") => {
                if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.entry("replicas").or_insert(json!(1));
                    spec.entry("revisionHistoryLimit").or_insert(json!(10));
                    spec.entry("progressDeadlineSeconds").or_insert(json!(600));
                    spec.entry("strategy").or_insert(
                        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
                    );
                }
            }
            ("apps", "ReplicaSet") => {
                if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.entry("replicas").or_insert(json!(1));
                }
            }
            ("batch", "Job") => job_defaults(obj),
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                self.check_crd(&s.info, obj)?;
            }
            ("", "PersistentVolumeClaim" | "PersistentVolume")
            | ("storage.k8s.io", "StorageClass") => {
                storage_defaults(&s.info, obj)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A new Service's defaults: type, session affinity, a cluster IP (none
    /// for a headless one), each port's protocol and target port.
    fn service_defaults(&self, obj: &mut Value) {
        let spec = obj.get_mut("spec").and_then(Value::as_object_mut);
        if let Some(spec) = spec {
            let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
            spec.entry("type").or_insert(json!("ClusterIP"));
            spec.entry("sessionAffinity").or_insert(json!("None"));
            if !headless {
                let n = self.store.count("services") as u32 + 1;
                let ip = format!("10.96.{}.{}", (n / 250) % 250, n % 250 + 1);
                spec.entry("clusterIP").or_insert(json!(ip.clone()));
                spec.insert(
                    "clusterIPs".into(),
                    json!([spec.get("clusterIP").cloned().unwrap_or(json!(ip))]),
                );
            } else {
                spec.insert("clusterIPs".into(), json!(["None"]));
            }
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    if let Some(p) = p.as_object_mut() {
                        p.entry("protocol").or_insert(json!("TCP"));
                        let port = p.get("port").cloned().unwrap_or(Value::Null);
                        p.entry("targetPort").or_insert(port);
                    }
                }
            }
        }
        obj["status"] = json!({"loadBalancer": {}});
    }

    /// A new Pod: its spec validated, then defaulted as the Pod strategy
    /// does, its service account token mounted and its status Pending.
    fn pod_defaults(&self, info: &ResourceInfo, ns: &str, obj: &mut Value) -> ApiResult<()> {
        let spec = obj.get_mut("spec").and_then(Value::as_object_mut);
        let Some(spec) = spec else {
            return Err(ApiError::invalid(
                info,
                obj.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                vec![("spec.containers".into(), "Required value".into())],
            ));
        };
        let causes = pod_spec_causes(spec);
        if !causes.is_empty() {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            return Err(ApiError::invalid(info, &name, causes));
        }
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        pod_spec_defaults(spec);
        super::auth::mount_service_account_token(&self.store, ns, obj);
        obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        Ok(())
    }

    /// PUT: replace an object (or its status).
    pub fn update(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        target: &Target,
        mut obj: Value,
        query: &Query,
    ) -> ApiResult<Value> {
        let s = self.served(group, version, plural)?;
        let ns = self.namespace_for(&s, target.namespace.as_deref())?;
        let name = target.name.clone().unwrap_or_default();
        check_type_meta(&s.info, &obj)?;
        let body_name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let expect_rv = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        if expect_rv.is_none() && s.crd.is_some() {
            return Err(ApiError::invalid(
                &s.info,
                &name,
                vec![(
                    "metadata.resourceVersion".into(),
                    "Invalid value: 0: must be specified for an update".into(),
                )],
            ));
        }
        set_type_meta(&s.info, &mut obj);
        let admission = Admission {
            s: &s,
            query,
            write: WriteKind::Update,
            applied: None,
        };
        let at = Replacement {
            ns: &ns,
            name: &name,
            sub: target.subresource.as_deref(),
            expect_rv,
        };
        self.replace(&admission, &at, obj)
    }

    /// The shared tail of update and patch: preconditions, status/spec split,
    /// generation, finalizer-driven removal.
    fn replace(
        &self,
        admission: &Admission<'_>,
        at: &Replacement<'_>,
        new: Value,
    ) -> ApiResult<Value> {
        let s = admission.s;
        let info = &s.info;
        let (ns, name) = (at.ns, at.name);
        admission.check_options()?;
        let mut new = new;
        if matches!(at.sub, None | Some("status")) {
            // The apiserver's typed decoder drops what the kind does not
            // know, and `fieldValidation` says whether that is an error.
            admission.decode(&mut new)?;
        }
        let new = convert::to_storage(info, new);
        let write = SubWrite::of(info, at.sub)?;
        let result = self
            .store
            .update(&info.storage_resource(), ns, name, |old| {
                self.replaced(admission, at, write, old, new)
            });
        let stored = match result {
            Ok(Ok(v)) => v,
            Ok(Err(_)) => return Err(ApiError::not_found(info, name)),
            Err(e) if e.reason == "DryRun" => {
                return Ok(convert::present_value(
                    info,
                    e.details.unwrap_or(Value::Null),
                ));
            }
            Err(e) => return Err(e),
        };
        self.after_write(s, &stored);
        self.remove_if_finalized(s, ns, name, &stored);
        Ok(convert::present_value(info, (*stored).clone()))
    }

    /// What a replacement of `old` by `new` stores (`None`: nothing
    /// changes), run under the store's lock: the precondition, the fields
    /// the client may not change, what the subresource writes, then the
    /// admission steps and the server's bookkeeping. A dry run ends in an
    /// error of reason `DryRun` carrying the object.
    fn replaced(
        &self,
        admission: &Admission<'_>,
        at: &Replacement<'_>,
        write: SubWrite,
        old: &Value,
        new: Value,
    ) -> ApiResult<Option<Value>> {
        let s = admission.s;
        let info = &s.info;
        let name = at.name;
        if let Some(rv) = &at.expect_rv
            && rv
                != &old["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
        {
            return Err(ApiError::conflict(info, name));
        }
        let mut new = new;
        keep_server_metadata(info, at.ns, old, &mut new);
        let mut new = write.merge(s, name, old, new)?;
        admission.validate_metadata(name, new["metadata"].as_object().unwrap_or(&Map::new()))?;
        admission.custom_schema(name, &mut new, Some(old))?;
        admission.strategy(self, at.ns, &mut new)?;
        keep_server_bookkeeping(s, old, &mut new);
        if &new == old && admission.applied.is_none() {
            return Ok(None);
        }
        admission.track(Some(old), &mut new, at.sub);
        if &new == old {
            return Ok(None);
        }
        if admission.query.dry_run() {
            return Err(ApiError {
                code: 0,
                reason: "DryRun",
                message: String::new(),
                details: Some(new),
                list_meta: None,
            });
        }
        Ok(Some(new))
    }

    /// The last finalizer gone from an object being deleted removes it,
    /// unless a grace period still runs (a pod's kubelet ends that), as
    /// kube-apiserver's ShouldDeleteDuringUpdate decides.
    fn remove_if_finalized(&self, s: &Served, ns: &str, name: &str, stored: &Value) {
        let info = &s.info;
        let is_namespace = info.kind == "Namespace" && info.group.is_empty();
        let last_gone = if is_namespace {
            super::namespaces::finalized(stored)
        } else {
            finalizers(stored).is_empty()
        };
        let grace_over = stored
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0;
        if stored.pointer("/metadata/deletionTimestamp").is_some()
            && last_gone
            && grace_over
            && let Ok(gone) = self.store.delete(&info.storage_resource(), ns, name)
        {
            self.after_delete(s, &gone);
        }
    }

    /// PATCH with one of the four patch types.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        target: &Target,
        content_type: &str,
        body: &[u8],
        query: &Query,
    ) -> ApiResult<Value> {
        let s = self.served(group, version, plural)?;
        let ns = self.namespace_for(&s, target.namespace.as_deref())?;
        let name = target.name.clone().unwrap_or_default();
        let ct = content_type.split(';').next().unwrap_or_default().trim();
        let is_apply = ct == "application/apply-patch+yaml" || ct == "application/apply-patch+cbor";
        let current = self
            .store
            .get(&s.info.storage_resource(), &ns, &name)
            .map(|c| convert::present(&s.info, c));
        let Some(current) = current else {
            if is_apply {
                return self.apply_create(&s, &ns, &name, body, query);
            }
            return Err(ApiError::not_found(&s.info, &name));
        };
        let mut doc = (*current).clone();
        let mut applied_fields = None;
        match ct {
            "application/merge-patch+json" => {
                let p: Value = parse_json(body)?;
                strategic_merge::json_merge_patch(&mut doc, &p);
            }
            "application/json-patch+json" => {
                let p: json_patch::Patch = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
                json_patch::patch(&mut doc, &p).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                    )
                })?;
            }
            "application/strategic-merge-patch+json" => {
                if s.crd.is_some() {
                    return Err(ApiError::unsupported_media_type(ct));
                }
                let p: Value = parse_json(body)?;
                strategic_merge::strategic_merge(&mut doc, &p, &s.info.api_version(), &s.info.kind)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
            }
            _ if is_apply => {
                let manager = query.get("fieldManager").ok_or_else(|| {
                    ApiError::bad_request(
                        "PATCH request must contain fieldManager when using apply patch type",
                    )
                })?;
                let applied = parse_apply_body(body)?;
                check_applied_fields(&s, &applied)?;
                let key = (
                    s.info.group_resource(),
                    ns.clone(),
                    name.clone(),
                    manager.to_string(),
                );
                self.check_apply_conflicts(&key, &current, &applied, query.flag("force"))?;
                applied_fields = Some(apply_leaves(&applied).into_iter().map(|(p, _)| p).collect());
                doc = self.apply_onto(&s, &ns, &name, manager, &current, &applied)?;
            }
            other => return Err(ApiError::unsupported_media_type(other)),
        }
        // A patch that sets resourceVersion makes it a precondition, checked
        // in the store's update itself, as etcd's compare-and-swap does: two
        // patches naming the same version cannot both win.
        let sets_rv = body
            .windows(b"resourceVersion".len())
            .any(|w| w == b"resourceVersion");
        let expect_rv = match doc
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            Some(rv)
                if sets_rv
                    || rv
                        != current["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default() =>
            {
                Some(rv.to_string())
            }
            _ => None,
        };
        doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        let admission = Admission {
            s: &s,
            query,
            write: WriteKind::Patch,
            applied: applied_fields,
        };
        let at = Replacement {
            ns: &ns,
            name: &name,
            sub: target.subresource.as_deref(),
            expect_rv,
        };
        let r = self.replace(&admission, &at, doc)?;
        if is_apply && !query.dry_run() {
            self.remember_applied(
                &s,
                &ns,
                &name,
                query.get("fieldManager").unwrap_or_default(),
                body,
            );
        }
        Ok(r)
    }

    /// Drops the server-side apply configurations remembered for objects
    /// that no longer exist (they died with the object on a real server;
    /// kept, they grew with every object ever applied).
    pub fn forget_applied_of_gone(&self) {
        let mut all = self.last_applied.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|(res, ns, name, _), _| {
            let stored = if res == "events.events.k8s.io" {
                "events"
            } else {
                res
            };
            self.store.get(stored, ns, name).is_some()
        });
    }

    fn remember_applied(&self, s: &Served, ns: &str, name: &str, manager: &str, body: &[u8]) {
        if let Ok(v) = parse_apply_body(body) {
            self.last_applied
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    (
                        s.info.group_resource(),
                        ns.to_string(),
                        name.to_string(),
                        manager.to_string(),
                    ),
                    v,
                );
        }
    }

    fn apply_create(
        &self,
        s: &Served,
        ns: &str,
        name: &str,
        body: &[u8],
        query: &Query,
    ) -> ApiResult<Value> {
        let manager = query.get("fieldManager").ok_or_else(|| {
            ApiError::bad_request(
                "PATCH request must contain fieldManager when using apply patch type",
            )
        })?;
        let mut obj = parse_apply_body(body)?;
        check_applied_fields(s, &obj)?;
        obj["metadata"]["name"] = json!(name);
        let ns_opt = if s.info.namespaced { Some(ns) } else { None };
        let applied = apply_leaves(&obj).into_iter().map(|(p, _)| p).collect();
        let created = self.create_as(
            &s.info.group,
            &s.info.version,
            &s.info.plural,
            ns_opt,
            obj,
            query,
            Some(applied),
        )?;
        if !query.dry_run() {
            self.remember_applied(s, ns, name, manager, body);
        }
        Ok(created)
    }

    /// Server-side apply for one field manager: fields this manager applied
    /// before and no longer applies are removed, then the applied
    /// configuration is merged in (lists by their merge keys for built-ins).
    fn apply_onto(
        &self,
        s: &Served,
        ns: &str,
        name: &str,
        manager: &str,
        current: &Value,
        applied: &Value,
    ) -> ApiResult<Value> {
        let key = (
            s.info.group_resource(),
            ns.to_string(),
            name.to_string(),
            manager.to_string(),
        );
        let previous = self
            .last_applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        let mut doc = current.clone();
        if let Some(prev) = previous {
            remove_unapplied(&mut doc, &prev, applied);
        }
        let mut patch = applied.clone();
        if let Some(m) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        if s.crd.is_none() && strategic_merge::has_schema(&s.info.api_version(), &s.info.kind) {
            strategic_merge::strategic_merge(&mut doc, &patch, &s.info.api_version(), &s.info.kind)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        } else {
            strategic_merge::json_merge_patch(&mut doc, &patch);
        }
        Ok(doc)
    }

    /// Fields another apply manager set to a different value are a 409
    /// conflict naming them and their manager; with `force` they change
    /// hands (the other manager no longer owns them).
    fn check_apply_conflicts(
        &self,
        key: &(String, String, String, String),
        current: &Value,
        applied: &Value,
        force: bool,
    ) -> ApiResult<()> {
        let mine = apply_leaves(applied);
        managed::check_conflicts(current, &key.3, &mine, force)?;
        if force {
            // Fields taken over leave the other appliers' configurations, so
            // a later apply of theirs does not remove them.
            let mut all = self.last_applied.lock().unwrap_or_else(|p| p.into_inner());
            for ((res, ns, name, manager), theirs) in all.iter_mut() {
                if (res, ns, name) != (&key.0, &key.1, &key.2) || manager == &key.3 {
                    continue;
                }
                let owned: BTreeMap<String, Value> = apply_leaves(theirs)
                    .into_iter()
                    .map(|(p, v)| (field_path(&p), v))
                    .collect();
                for (path, value) in &mine {
                    if owned.get(&field_path(path)).is_some_and(|v| v != value) {
                        remove_leaf(theirs, path);
                    }
                }
            }
        }
        Ok(())
    }

    /// DELETE one object, honouring finalizers and the propagation policy.
    pub fn delete(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        target: &Target,
        options: &Value,
        query: &Query,
    ) -> ApiResult<Value> {
        let s = self.served(group, version, plural)?;
        self.delete_stored(&s, target, options, query)
            .map(|v| convert::present_value(&s.info, v))
    }

    /// DELETE on the stored form of the object.
    fn delete_stored(
        &self,
        s: &Served,
        target: &Target,
        options: &Value,
        query: &Query,
    ) -> ApiResult<Value> {
        let s = s.clone();
        let ns = self.namespace_for(&s, target.namespace.as_deref())?;
        let name = target.name.clone().unwrap_or_default();
        let res = s.info.storage_resource();
        let current = self
            .store
            .get(&res, &ns, &name)
            .ok_or_else(|| ApiError::not_found(&s.info, &name))?;
        check_delete_preconditions(&s.info, &name, &current, options)?;
        let policy = propagation_policy(options, query)?;
        if query.dry_run() {
            return Ok((*current).clone());
        }
        let grace = options
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()));
        let extra_finalizer = match policy.as_str() {
            "Foreground" => Some("foregroundDeletion"),
            "Orphan" => Some("orphan"),
            _ => None,
        };
        let is_namespace = s.info.kind == "Namespace" && s.info.group.is_empty();
        let graceful_pod = s.info.kind == "Pod"
            && s.info.group.is_empty()
            && grace != Some(0)
            && current
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
        let needs_mark = !finalizers(&current).is_empty()
            || extra_finalizer.is_some()
            || is_namespace
            || graceful_pod;
        if needs_mark {
            let mark = DeletionMark {
                grace,
                extra_finalizer,
                is_namespace,
                graceful_pod,
            };
            return self.mark_deleted(&s, &ns, &name, &current, &mark);
        }
        let gone = self
            .store
            .delete(&res, &ns, &name)
            .map_err(|_| ApiError::not_found(&s.info, &name))?;
        self.after_delete(&s, &gone);
        Ok((*gone).clone())
    }

    /// A deletion that waits (on finalizers, a namespace's content or a
    /// pod's grace period): the object is marked with its
    /// deletionTimestamp and what the policy adds, and the answer is the
    /// marked object (or the pod, gone once nothing holds it).
    fn mark_deleted(
        &self,
        s: &Served,
        ns: &str,
        name: &str,
        current: &Value,
        mark: &DeletionMark,
    ) -> ApiResult<Value> {
        let res = s.info.storage_resource();
        let marked = self.store.update(&res, ns, name, |old| {
            let mut new = old.clone();
            if new.pointer("/metadata/deletionTimestamp").is_none() {
                new["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                let g = mark.grace.unwrap_or_else(|| {
                    current
                        .pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                });
                new["metadata"]["deletionGracePeriodSeconds"] =
                    json!(if mark.graceful_pod { g } else { 0 });
            }
            if let Some(f) = mark.extra_finalizer {
                let list = new["metadata"]
                    .as_object_mut()
                    .map(|m| m.entry("finalizers").or_insert(json!([])));
                if let Some(Value::Array(l)) = list
                    && !l.iter().any(|x| x == f)
                {
                    l.push(json!(f));
                }
            }
            if mark.is_namespace {
                new["status"]["phase"] = json!("Terminating");
            }
            Ok::<_, ApiError>(Some(new))
        })?;
        let marked = marked.map_err(|_| ApiError::not_found(&s.info, name))?;
        self.after_write(s, &marked);
        if mark.is_namespace {
            self.sync_namespace(name);
            return Ok(self
                .store
                .get(&res, ns, name)
                .map_or_else(|| (*marked).clone(), |n| (*n).clone()));
        } else if mark.graceful_pod && finalizers(&marked).is_empty() {
            if !self.hooks().pod_deletion_requested(ns, name)
                && let Ok(gone) = self.store.delete(&res, ns, name)
            {
                self.after_delete(s, &gone);
                return Ok((*gone).clone());
            }
        } else {
            self.collect_garbage();
        }
        Ok((*marked).clone())
    }

    /// Removes a pod whose graceful deletion the kubelet has finished.
    pub fn finish_pod_deletion(&self, ns: &str, name: &str) {
        let Ok(s) = self.served("", "v1", "pods") else {
            return;
        };
        let Some(p) = self.store.get("pods", ns, name) else {
            return;
        };
        if finalizers(&p).is_empty() {
            if let Ok(gone) = self.store.delete("pods", ns, name) {
                self.after_delete(&s, &gone);
            }
            return;
        }
        // As the kubelet's final delete with grace 0: the grace is over, so
        // the pod goes as soon as its last finalizer does.
        if let Ok(Ok(marked)) = self.store.update("pods", ns, name, |old| {
            let mut new = old.clone();
            new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            Ok::<_, ApiError>(Some(new))
        }) {
            self.after_write(&s, &marked);
        }
    }

    /// Bookkeeping after a create or update: CRD registration, GC.
    fn after_write(&self, s: &Served, obj: &Value) {
        if s.info.kind == "CustomResourceDefinition"
            && obj.pointer("/metadata/deletionTimestamp").is_none()
        {
            self.register_crd(obj);
        }
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            self.collect_garbage();
        }
    }

    pub(crate) fn after_delete(&self, s: &Served, obj: &Value) {
        if s.info.kind == "CustomResourceDefinition" {
            self.unregister_crd(obj);
        }
        self.collect_garbage();
        // Content leaving a terminating namespace moves its deletion on.
        if let Some(ns) = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
            && self
                .store
                .get("namespaces", "", ns)
                .is_some_and(|n| n.pointer("/metadata/deletionTimestamp").is_some())
        {
            self.sync_namespace(ns);
        }
    }

    /// Garbage collection as the real collector does it, synchronously:
    /// dependents of a vanished owner are deleted (or orphaned), and owners
    /// waiting on `foregroundDeletion`/`orphan` finalizers are finished.
    pub fn collect_garbage(&self) {
        // A bounded number of passes: each pass may delete owners of the next.
        for _ in 0..16 {
            if !self.gc_pass() {
                break;
            }
        }
        // What the collector removed may have been a terminating namespace's
        // last content.
        let (namespaces, _) = self.store.list("namespaces", None);
        for n in namespaces
            .iter()
            .filter(|n| n.pointer("/metadata/deletionTimestamp").is_some())
        {
            if let Some(name) = n["metadata"]["name"].as_str() {
                self.sync_namespace(name);
            }
        }
    }

    /// One pass of the collector over every stored object; whether it
    /// changed anything.
    fn gc_pass(&self) -> bool {
        let view = self.gc_view();
        let mut changed = false;
        for (i, obj) in &view.all {
            changed |= self.gc_dependent(&view, &view.served[*i], obj);
        }
        // Owners whose dependents are all gone (foreground) or released (orphan).
        for (i, obj) in &view.all {
            changed |= self.gc_owner(&view, &view.served[*i], obj);
        }
        changed
    }

    /// Every stored object of every served resource (views left out), and
    /// the objects by uid.
    fn gc_view(&self) -> GcView {
        let served: Vec<Served> = self
            .registry()
            .all()
            .iter()
            .filter(|s| !s.info.is_view())
            .cloned()
            .collect();
        let mut uids: HashMap<String, Arc<Value>> = HashMap::new();
        let mut all: Vec<(usize, Arc<Value>)> = Vec::new();
        for (i, s) in served.iter().enumerate() {
            let (items, _) = self.store.list(&s.info.group_resource(), None);
            for it in items {
                if let Some(uid) = it.pointer("/metadata/uid").and_then(Value::as_str) {
                    uids.insert(uid.to_string(), it.clone());
                }
                all.push((i, it));
            }
        }
        GcView { served, uids, all }
    }

    /// A dependent whose owner orphans it loses that owner reference; one
    /// whose owners are all gone (or one deleting in the foreground) is
    /// deleted. Whether it did either.
    fn gc_dependent(&self, view: &GcView, s: &Served, obj: &Value) -> bool {
        let uids = &view.uids;
        let (ns, name) = ns_name(obj);
        let owners = obj
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if owners.is_empty() {
            return false;
        }
        let mut live = 0;
        let mut orphaning_owner = false;
        let mut foreground_owner = false;
        for o in &owners {
            let uid = o.get("uid").and_then(Value::as_str).unwrap_or_default();
            if let Some(owner) = uids.get(uid) {
                let f = finalizers(owner);
                let deleting = owner.pointer("/metadata/deletionTimestamp").is_some();
                if deleting && f.iter().any(|x| x == "orphan") {
                    orphaning_owner = true;
                } else if deleting && f.iter().any(|x| x == "foregroundDeletion") {
                    foreground_owner = true;
                } else {
                    live += 1;
                }
            }
        }
        if orphaning_owner {
            self.gc_orphan(uids, s, &ns, &name);
            return true;
        }
        let all_gone = || {
            owners
                .iter()
                .all(|o| !uids.contains_key(o["uid"].as_str().unwrap_or_default()))
        };
        if live != 0 || !(foreground_owner || all_gone()) {
            return false;
        }
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            return false;
        }
        let target = Target {
            namespace: Some(ns),
            name: Some(name),
            subresource: None,
        };
        let policy = if foreground_owner {
            "Foreground"
        } else {
            "Background"
        };
        let _ = self.delete(
            &s.info.group,
            &s.info.version,
            &s.info.plural,
            &target,
            &json!({"propagationPolicy": policy}),
            &Query::default(),
        );
        true
    }

    /// Drops the references to owners being deleted with the `orphan`
    /// finalizer from a dependent.
    fn gc_orphan(&self, uids: &HashMap<String, Arc<Value>>, s: &Served, ns: &str, name: &str) {
        let r = self
            .store
            .update(&s.info.group_resource(), ns, name, |old| {
                let mut new = old.clone();
                if let Some(refs) = new
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| {
                        let uid = r.get("uid").and_then(Value::as_str).unwrap_or_default();
                        !uids.get(uid).is_some_and(|o| {
                            o.pointer("/metadata/deletionTimestamp").is_some()
                                && finalizers(o).iter().any(|x| x == "orphan")
                        })
                    });
                    if refs.is_empty()
                        && let Some(m) = new["metadata"].as_object_mut()
                    {
                        m.remove("ownerReferences");
                    }
                }
                Ok::<_, ()>(Some(new))
            });
        if let Ok(Ok(v)) = r {
            self.after_write(s, &v);
        }
    }

    /// An owner being deleted with `foregroundDeletion` or `orphan` whose
    /// dependents are gone or released loses those finalizers, and goes
    /// when none is left. Whether it went.
    fn gc_owner(&self, view: &GcView, s: &Served, obj: &Value) -> bool {
        if obj.pointer("/metadata/deletionTimestamp").is_none() {
            return false;
        }
        let f = finalizers(obj);
        if !f.iter().any(|x| x == "foregroundDeletion" || x == "orphan") {
            return false;
        }
        let uid = obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let owned_by = |d: &Value| {
            d.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
        };
        let has_dependents = view.all.iter().any(|(i, d)| {
            owned_by(d)
                && self
                    .store
                    .get(
                        &view.served[*i].info.group_resource(),
                        d["metadata"]["namespace"].as_str().unwrap_or_default(),
                        d["metadata"]["name"].as_str().unwrap_or_default(),
                    )
                    .is_some_and(|cur| owned_by(&cur))
        });
        if has_dependents {
            return false;
        }
        let (ns, name) = ns_name(obj);
        let res = s.info.group_resource();
        let r = self.store.update(&res, &ns, &name, |old| {
            let mut new = old.clone();
            if let Some(l) = new
                .pointer_mut("/metadata/finalizers")
                .and_then(Value::as_array_mut)
            {
                l.retain(|x| x != "foregroundDeletion" && x != "orphan");
            }
            Ok::<_, ()>(Some(new))
        });
        if let Ok(Ok(v)) = r
            && finalizers(&v).is_empty()
            && let Ok(gone) = self.store.delete(&res, &ns, &name)
        {
            if s.info.kind == "CustomResourceDefinition" {
                self.unregister_crd(&gone);
            }
            return true;
        }
        false
    }

    fn check_crd(&self, info: &ResourceInfo, crd: &Value) -> ApiResult<()> {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let plural = crd
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut causes = Vec::new();
        if name != format!("{plural}.{group}") {
            causes.push((
                "metadata.name".to_string(),
                format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
            ));
        }
        if crd
            .pointer("/spec/names/kind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(("spec.names.kind".into(), "Required value".into()));
        }
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if versions.is_empty() {
            causes.push((
                "spec.versions".into(),
                "Invalid value: null: must have exactly one version marked as storage version"
                    .into(),
            ));
        } else if versions.iter().filter(|v| v["storage"] == true).count() != 1 {
            causes.push((
                "spec.versions".into(),
                "Invalid value: must have exactly one version marked as storage version".into(),
            ));
        }
        for (i, v) in versions.iter().enumerate() {
            if v.pointer("/schema/openAPIV3Schema").is_none() {
                causes.push((
                    format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    "Required value: schemas are required".into(),
                ));
            }
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(info, name, causes))
        }
    }

    fn register_crd(&self, crd: &Value) {
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let names = &crd["spec"]["names"];
        let plural = names["plural"].as_str().unwrap_or_default().to_string();
        let kind = names["kind"].as_str().unwrap_or_default().to_string();
        let strs = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let namespaced = crd["spec"]["scope"] != "Cluster";
        let mut reg = self.registry.write().unwrap_or_else(|p| p.into_inner());
        reg.remove_group_resource(&group, &plural);
        for v in crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            if v["served"] != true {
                continue;
            }
            let version = v["name"].as_str().unwrap_or_default().to_string();
            let mut subresources = Vec::new();
            let verbs = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            if v.pointer("/subresources/status").is_some() {
                subresources.push(SubresourceInfo {
                    name: "status".into(),
                    kind: kind.clone(),
                    group_version: None,
                    verbs: verbs(&["get", "patch", "update"]),
                });
            }
            if v.pointer("/subresources/scale").is_some() {
                subresources.push(SubresourceInfo {
                    name: "scale".into(),
                    kind: "Scale".into(),
                    group_version: Some("autoscaling/v1".into()),
                    verbs: verbs(&["get", "patch", "update"]),
                });
            }
            let info = ResourceInfo {
                group: group.clone(),
                version: version.clone(),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: names["singular"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| kind.to_lowercase()),
                namespaced,
                verbs: verbs(&[
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "create",
                    "update",
                    "watch",
                ]),
                short_names: strs(&names["shortNames"]),
                categories: strs(&names["categories"]),
                subresources,
            };
            let extras = CrdExtras {
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                selectable_fields: v["selectableFields"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|f| f["jsonPath"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                scale: v.pointer("/subresources/scale").cloned(),
            };
            reg.served.push(Served {
                info,
                crd: Some(Arc::new(extras)),
            });
        }
        drop(reg);
        // Established, as a real apiserver reports within moments.
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if crd
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_none_or(|c| c.is_empty())
        {
            let now = now_rfc3339();
            let _ = self.store.update("customresourcedefinitions.apiextensions.k8s.io", "", &name, |old| {
                let mut new = old.clone();
                new["status"] = json!({
                    "acceptedNames": old["spec"]["names"].clone(),
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
                    ],
                    "storedVersions": old["spec"]["versions"].as_array().map(|vs| vs.iter().filter(|v| v["storage"] == true).map(|v| v["name"].clone()).collect::<Vec<_>>()).unwrap_or_default(),
                });
                Ok::<_, ()>(Some(new))
            });
        }
    }

    fn unregister_crd(&self, crd: &Value) {
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let plural = crd
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let res = format!("{plural}.{group}");
        let (items, _) = self.store.list(&res, None);
        for it in items {
            let ns = it["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = it["metadata"]["name"].as_str().unwrap_or_default();
            let _ = self.store.delete(&res, ns, name);
        }
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove_group_resource(&group, &plural);
    }
}

/// Which write an [`Admission`] admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    /// POST, or an apply that creates.
    Create,
    /// PUT.
    Update,
    /// PATCH (an apply included).
    Patch,
}

/// The one admission path of every write (a create, an apply's included,
/// an update and a patch), in the steps the apiserver's handlers take:
/// the options checked, the body decoded (a built-in kind's unknown fields
/// pruned, as its typed decoder drops them), the metadata validated, a
/// custom resource's schema applied, the kind's strategy (defaults on
/// create, a CRD's checks), and the write's fields tracked in
/// `managedFields`. The create and replace paths call the steps in their
/// own order around what only they do.
struct Admission<'a> {
    /// The resource written.
    s: &'a Served,
    /// The request's options.
    query: &'a Query,
    /// Which write.
    write: WriteKind,
    /// An apply's fields (its managedFields entry is an `Apply`).
    applied: Option<std::collections::BTreeSet<managed::Path>>,
}

impl Admission<'_> {
    /// The options kind of the write, as errors name it.
    fn options(&self) -> &'static str {
        match self.write {
            WriteKind::Create => "CreateOptions",
            WriteKind::Update => "UpdateOptions",
            WriteKind::Patch => "PatchOptions",
        }
    }

    /// The kind and version a strict decoding error names (a patch's
    /// names none).
    fn decoded(&self) -> Option<(&str, &str)> {
        match self.write {
            WriteKind::Patch => None,
            WriteKind::Create | WriteKind::Update => {
                Some((&self.s.info.kind, &self.s.info.version))
            }
        }
    }

    /// The `fieldValidation` option is one the apiserver knows.
    fn check_options(&self) -> ApiResult<()> {
        self.query.field_validation(self.options()).map(|_| ())
    }

    /// Unknown fields found while decoding: an error, a warning or
    /// nothing, as `fieldValidation` says.
    fn unknown_fields(&self, unknown: &[String]) -> ApiResult<()> {
        self.query
            .check_unknown_fields(unknown, self.options(), self.decoded())
    }

    /// Decodes a built-in kind's body as its typed decoder does: what the
    /// kind does not know is dropped.
    fn decode(&self, obj: &mut Value) -> ApiResult<()> {
        let info = &self.s.info;
        if self.s.crd.is_none() {
            let unknown = super::openapi_schemas::prune_unknown_fields(
                &info.group,
                &info.version,
                &info.kind,
                obj,
            );
            self.unknown_fields(&unknown)?;
        }
        Ok(())
    }

    /// The object's metadata (and a new object's name) are valid: 422
    /// with every cause otherwise.
    fn validate_metadata(&self, name: &str, meta: &Map<String, Value>) -> ApiResult<()> {
        let mut causes = match self.write {
            WriteKind::Create => validate_name(&self.s.info, name),
            WriteKind::Update | WriteKind::Patch => Vec::new(),
        };
        causes.extend(validate_meta(meta));
        if !causes.is_empty() {
            return Err(ApiError::invalid(&self.s.info, name, causes));
        }
        Ok(())
    }

    /// A custom resource's structural schema: pruning, defaults and
    /// validation (`old` is the object replaced).
    fn custom_schema(&self, name: &str, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        if let Some(extras) = &self.s.crd {
            let unknown =
                super::schema::prepare_custom_object(&self.s.info, extras, name, obj, old)?;
            self.unknown_fields(&unknown)?;
        }
        Ok(())
    }

    /// The kind's strategy: a create's defaults (see `admit_create`), and
    /// a replaced CustomResourceDefinition's checks.
    fn strategy(&self, api: &Api, ns: &str, obj: &mut Value) -> ApiResult<()> {
        match self.write {
            WriteKind::Create => api.admit_create(self.s, ns, obj),
            WriteKind::Update | WriteKind::Patch => {
                if self.s.info.kind == "CustomResourceDefinition" {
                    api.check_crd(&self.s.info, obj)?;
                }
                Ok(())
            }
        }
    }

    /// Sets the written object's managedFields: this manager's entry for
    /// what the write (of subresource `sub`) changed from `old`.
    fn track(&self, old: Option<&Value>, obj: &mut Value, sub: Option<&str>) {
        let info = &self.s.info;
        let version = info.api_version();
        let now = now_rfc3339();
        managed::track(
            old,
            obj,
            &managed::Write {
                manager: &self.query.manager(),
                applied: self.applied.clone(),
                api_version: &version,
                subresource: if sub == Some("status") { "status" } else { "" },
                scope: managed_scope(info, sub),
                time: &now,
            },
        );
    }
}

/// Where a replacement writes: the object, the subresource, and the
/// resourceVersion it must still have.
struct Replacement<'a> {
    /// The object's namespace.
    ns: &'a str,
    /// The object's name.
    name: &'a str,
    /// The subresource written, if any.
    sub: Option<&'a str>,
    /// The resourceVersion precondition.
    expect_rv: Option<String>,
}

/// What a replacement writes of the object, by its subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SubWrite {
    /// The object itself (its status kept, where status is a subresource).
    Object,
    /// `/status`: status only.
    Status,
    /// A pod's `/ephemeralcontainers`: ephemeral containers added.
    Ephemeral,
    /// A namespace's `/finalize`: its spec.finalizers.
    Finalize,
    /// A CertificateSigningRequest's `/approval`: its conditions.
    Approval,
}

impl SubWrite {
    /// The write of `sub` on `info`; a subresource without one is 404.
    fn of(info: &ResourceInfo, sub: Option<&str>) -> ApiResult<SubWrite> {
        let is_namespace = info.kind == "Namespace" && info.group.is_empty();
        Ok(match sub {
            None => SubWrite::Object,
            Some("status") => SubWrite::Status,
            Some("ephemeralcontainers") if info.kind == "Pod" => SubWrite::Ephemeral,
            Some("finalize") if is_namespace => SubWrite::Finalize,
            Some("approval") if info.kind == "CertificateSigningRequest" => SubWrite::Approval,
            Some(sub) => return Err(ApiError::no_route(sub)),
        })
    }

    /// `new` reduced to what this write may change of `old`.
    fn merge(self, s: &Served, name: &str, old: &Value, new: Value) -> ApiResult<Value> {
        let info = &s.info;
        let mut new = new;
        if info.kind == "Namespace" && info.group.is_empty() {
            new = namespace_finalizers(self == SubWrite::Finalize, old, new);
        }
        Ok(match self {
            SubWrite::Ephemeral => merge_ephemeral(info, name, old, &new)?,
            SubWrite::Approval => merge_approval(old, &new),
            SubWrite::Status => merge_status(s, old, &new),
            SubWrite::Object | SubWrite::Finalize => {
                if info.has_subresource("status") {
                    match old.get("status") {
                        Some(st) => new["status"] = st.clone(),
                        None => {
                            if let Some(o) = new.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                new
            }
        })
    }
}

/// The metadata a replacement keeps of `old` whatever the client sent:
/// uid, creation and deletion stamps, generation, the namespace; the
/// client's managedFields are dropped.
fn keep_server_metadata(info: &ResourceInfo, ns: &str, old: &Value, new: &mut Value) {
    for key in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old["metadata"].get(key) {
            Some(v) => new["metadata"][key] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(key);
                }
            }
        }
    }
    if info.namespaced {
        new["metadata"]["namespace"] = json!(ns);
    }
    if let Some(m) = new["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
}

/// A namespace's spec.finalizers change only through /finalize, and only
/// they do.
fn namespace_finalizers(finalize: bool, old: &Value, mut new: Value) -> Value {
    let finalizers = if finalize {
        new["spec"]["finalizers"].clone()
    } else {
        old["spec"]["finalizers"].clone()
    };
    if finalize {
        let mut merged = old.clone();
        merged["spec"]["finalizers"] = if finalizers.is_null() {
            json!([])
        } else {
            finalizers
        };
        return merged;
    }
    if !finalizers.is_null() {
        new["spec"]["finalizers"] = finalizers;
    }
    new
}

/// Only ephemeral containers change through this subresource, and only by
/// being added.
fn merge_ephemeral(info: &ResourceInfo, name: &str, old: &Value, new: &Value) -> ApiResult<Value> {
    let before = old["spec"]["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let after = new["spec"]["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut causes = Vec::new();
    for (i, c) in after.iter().enumerate() {
        let field = format!("spec.ephemeralContainers[{i}]");
        if c["name"].as_str().unwrap_or_default().is_empty() {
            causes.push((format!("{field}.name"), "Required value".into()));
        }
        if c["image"].as_str().unwrap_or_default().is_empty() {
            causes.push((format!("{field}.image"), "Required value".into()));
        }
    }
    for old_c in &before {
        match after.iter().find(|c| c["name"] == old_c["name"]) {
            Some(c) if c == old_c => {}
            _ => causes.push((
                "spec.ephemeralContainers".into(),
                format!(
                    "Forbidden: existing ephemeral containers \"{}\" may not be removed or changed",
                    old_c["name"].as_str().unwrap_or_default()
                ),
            )),
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(info, name, causes));
    }
    let mut merged = old.clone();
    if !after.is_empty() {
        merged["spec"]["ephemeralContainers"] = Value::Array(after);
    }
    Ok(merged)
}

/// Only the conditions change through /approval (the approval strategy
/// keeps everything else as it was).
fn merge_approval(old: &Value, new: &Value) -> Value {
    let mut merged = old.clone();
    let conditions = new["status"]["conditions"].clone();
    if conditions.is_null() {
        if let Some(st) = merged["status"].as_object_mut() {
            st.remove("conditions");
        }
    } else {
        merged["status"]["conditions"] = conditions;
    }
    merged
}

/// Only status (and metadata labels/annotations) changes through /status.
fn merge_status(s: &Served, old: &Value, new: &Value) -> Value {
    let mut merged = old.clone();
    merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
    if s.crd.is_none() {
        // Decoded into the status struct and written back: what Go always
        // writes is there, at zero if not sent.
        super::gotypes::fill_status(&mut merged);
    } else if merged["status"].is_null()
        && let Some(o) = merged.as_object_mut()
    {
        o.remove("status");
    }
    merged
}

/// What the server keeps of a replaced object: its generation (one more
/// when the spec changed), resourceVersion and managedFields.
fn keep_server_bookkeeping(s: &Served, old: &Value, new: &mut Value) {
    if has_generation(&s.info, s.crd.is_some()) && spec_changed(old, new) {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(g);
    }
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    match old["metadata"].get("managedFields") {
        Some(m) => new["metadata"]["managedFields"] = m.clone(),
        None => {
            if let Some(m) = new["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
        }
    }
}

/// A new object's name: its own, or one generated from its generateName
/// (which it then gets); 422 when it has neither.
fn new_name(info: &ResourceInfo, meta: &mut Map<String, Value>) -> ApiResult<String> {
    if let Some(n) = meta
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Ok(n.to_string());
    }
    match meta
        .get("generateName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(prefix) => {
            let n = format!("{}{}", truncate(prefix, 58), random_suffix());
            meta.insert("name".into(), json!(n));
            Ok(n)
        }
        None => Err(ApiError::invalid(
            info,
            "",
            vec![(
                "metadata.name".into(),
                "Required value: name or generateName is required".into(),
            )],
        )),
    }
}

/// What a create is given as status is dropped. A built-in kind's status
/// is a Go struct, so kube-apiserver writes an empty one (`status: {}`)
/// where a custom resource's is absent: the Python client reads `.status`
/// of a new Deployment before its controller has written one.
fn drop_created_status(s: &Served, obj: &mut Value) {
    if s.info.has_subresource("status")
        && s.info.kind != "Namespace"
        && let Some(o) = obj.as_object_mut()
    {
        if s.crd.is_none() && s.info.kind != "Pod" {
            o.insert("status".into(), json!({}));
        } else {
            o.remove("status");
        }
    }
}

/// A new Namespace: its own spec.finalizers are kept, `kubernetes` added;
/// it is Active.
fn namespace_defaults(obj: &mut Value) {
    let mut kept = super::namespaces::spec_finalizers(obj);
    if !kept
        .iter()
        .any(|f| f == super::namespaces::KUBERNETES_FINALIZER)
    {
        kept.push(super::namespaces::KUBERNETES_FINALIZER.to_owned());
    }
    obj["spec"] = json!({"finalizers": kept});
    obj["status"] = json!({"phase": "Active"});
}

/// The defaults of a new Pod's spec and its containers.
fn pod_spec_defaults(spec: &mut Map<String, Value>) {
    default_toleration_seconds(spec);
    spec.entry("restartPolicy").or_insert(json!("Always"));
    spec.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    spec.entry("schedulerName")
        .or_insert(json!("default-scheduler"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert(json!(30));
    spec.entry("serviceAccountName").or_insert(json!("default"));
    spec.entry("securityContext").or_insert(json!({}));
    spec.entry("enableServiceLinks").or_insert(json!(true));
    spec.entry("preemptionPolicy")
        .or_insert(json!("PreemptLowerPriority"));
    spec.entry("priority").or_insert(json!(0));
    if let Some(cs) = spec.get_mut("containers").and_then(Value::as_array_mut) {
        for c in cs {
            if let Some(c) = c.as_object_mut() {
                c.entry("imagePullPolicy").or_insert(json!("IfNotPresent"));
                c.entry("terminationMessagePath")
                    .or_insert(json!("/dev/termination-log"));
                c.entry("terminationMessagePolicy").or_insert(json!("File"));
                c.entry("resources").or_insert(json!({}));
            }
        }
    }
}

/// A new Job's defaults, and (unless it selects its pods itself) the
/// selector and template labels of its controller uid.
fn job_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("backoffLimit").or_insert(json!(6));
    spec.entry("completions").or_insert(json!(1));
    spec.entry("parallelism").or_insert(json!(1));
    spec.entry("completionMode").or_insert(json!("NonIndexed"));
    spec.entry("suspend").or_insert(json!(false));
    let uid = obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let name = obj
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or(Value::Null);
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let manual = spec
        .get("manualSelector")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if manual {
        return;
    }
    let labels = json!({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                        "controller-uid": uid, "job-name": name});
    spec.insert(
        "selector".into(),
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
    );
    let tmeta = spec
        .entry("template")
        .or_insert(json!({}))
        .as_object_mut()
        .map(|t| t.entry("metadata").or_insert(json!({})));
    if let Some(Value::Object(tm)) = tmeta {
        let l = tm.entry("labels").or_insert(json!({}));
        if let (Some(l), Some(add)) = (l.as_object_mut(), labels.as_object()) {
            for (k, v) in add {
                l.insert(k.clone(), v.clone());
            }
        }
    }
}

/// How a waiting deletion marks its object.
#[derive(Debug)]
struct DeletionMark {
    /// The grace period asked for, if any.
    grace: Option<i64>,
    /// The finalizer the propagation policy adds (`foregroundDeletion`,
    /// `orphan`).
    extra_finalizer: Option<&'static str>,
    /// A namespace: it turns `Terminating`.
    is_namespace: bool,
    /// A pod on a node, deleted with a grace period its kubelet ends.
    graceful_pod: bool,
}

/// A DELETE's preconditions (resourceVersion, uid) against `current`:
/// 409 Conflict when one does not hold.
fn check_delete_preconditions(
    info: &ResourceInfo,
    name: &str,
    current: &Value,
    options: &Value,
) -> ApiResult<()> {
    if let Some(rv) = options
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
        && rv
            != current["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
    {
        return Err(ApiError::conflict(info, name));
    }
    if let Some(uid) = options
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        && uid != current["metadata"]["uid"].as_str().unwrap_or_default()
    {
        return Err(ApiError::conflict(info, name));
    }
    Ok(())
}

/// A DELETE's propagation policy (the options', the query's, or Orphan
/// for `orphanDependents`; Background by default), checked.
fn propagation_policy(options: &Value, query: &Query) -> ApiResult<String> {
    let policy = options
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .or_else(|| query.get("propagationPolicy"))
        .map(str::to_string)
        .or_else(
            || match options.get("orphanDependents").and_then(Value::as_bool) {
                Some(true) => Some("Orphan".into()),
                _ => None,
            },
        )
        .unwrap_or_else(|| "Background".into());
    if !matches!(policy.as_str(), "Background" | "Foreground" | "Orphan") {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
        )));
    }
    Ok(policy)
}

/// What one pass of the garbage collector reads: every stored object.
struct GcView {
    /// The resources served (views left out).
    served: Vec<Served>,
    /// The objects by uid.
    uids: HashMap<String, Arc<Value>>,
    /// Every object, with its resource (an index into `served`: a
    /// resource's copy per object, a custom resource's schema with it, was
    /// 2 GB of the allocations of four minutes of `agentdeck --demo`).
    all: Vec<(usize, Arc<Value>)>,
}

/// An object's namespace and name (empty when unset).
fn ns_name(obj: &Value) -> (String, String) {
    let at = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (at("/metadata/namespace"), at("/metadata/name"))
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// What the API server's validation says of a pod's containers: each has
/// a name, unique among them, and an image (`validateContainers`).
fn pod_spec_causes(spec: &Map<String, Value>) -> Vec<(String, String)> {
    let mut causes = Vec::new();
    let containers = spec
        .get("containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if containers.is_empty() {
        causes.push(("spec.containers".into(), "Required value".into()));
    }
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        let items = spec
            .get(list)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, c) in items.iter().enumerate() {
            let field = format!("spec.{list}[{i}]");
            match c
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                None => causes.push((format!("{field}.name"), "Required value".into())),
                Some(n) if !seen.insert(n.to_owned()) => {
                    causes.push((format!("{field}.name"), format!("Duplicate value: \"{n}\"")))
                }
                Some(_) => {}
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                causes.push((format!("{field}.image"), "Required value".into()));
            }
        }
    }
    causes
}

/// The DefaultTolerationSeconds admission plugin: a pod that does not
/// already tolerate the not-ready and unreachable NoExecute taints
/// tolerates them for 300 s.
fn default_toleration_seconds(spec: &mut Map<String, Value>) {
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = list.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or_default();
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or_default();
            (k == key || (k.is_empty() && t["operator"] == "Exists"))
                && (effect.is_empty() || effect == "NoExecute")
        });
        if !tolerated {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

/// Did anything outside metadata and status change?
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

fn check_type_meta(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind of the provided object ({kind}) does not match the kind of the resource ({})",
            info.kind
        )));
    }
    if let Some(v) = obj.get("apiVersion").and_then(Value::as_str)
        && v != info.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    Ok(())
}

fn set_type_meta(info: &ResourceInfo, obj: &mut Value) {
    obj["apiVersion"] = json!(info.api_version());
    obj["kind"] = json!(info.kind);
}

fn validate_name(info: &ResourceInfo, name: &str) -> Vec<(String, String)> {
    // Namespaces are RFC 1123 labels, Services DNS-1035 labels, RBAC
    // objects path segments, everything else RFC 1123 subdomains; the
    // messages are apimachinery's.
    let message = match info.kind.as_str() {
        "Namespace" if !crate::crd::names::is_dns1123_label(name) => {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        }
        "Service"
            if !crate::crd::names::is_dns1123_label(name)
                || !name.starts_with(|c: char| c.is_ascii_lowercase()) =>
        {
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        }
        "Namespace" | "Service" => return Vec::new(),
        // `VERSION.GROUP`, and the core group's `v1.` with its empty group.
        "APIService"
            if name.strip_suffix('.').is_some_and(|v| {
                !v.is_empty()
                    && v.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            }) =>
        {
            return Vec::new();
        }
        k if k.ends_with("Role") || k.ends_with("RoleBinding") => {
            if !name.is_empty()
                && !name.contains('/')
                && !name.contains('%')
                && name != "."
                && name != ".."
            {
                return Vec::new();
            }
            "may not contain '/' or '%' and may not be '.' or '..'"
        }
        _ if crate::crd::names::is_dns1123_subdomain(name) => return Vec::new(),
        _ => {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        }
    };
    vec![(
        "metadata.name".into(),
        format!("Invalid value: \"{name}\": {message}"),
    )]
}

fn validate_meta(meta: &Map<String, Value>) -> Vec<(String, String)> {
    let mut causes = Vec::new();
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    if !v.is_string() {
                        causes.push((
                            format!("metadata.{field}"),
                            format!("Invalid value: {k}: values must be strings"),
                        ));
                    } else if field == "labels" {
                        let val = v.as_str().unwrap_or_default();
                        if val.len() > 63
                            || !val
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                            || val.starts_with(['-', '_', '.'])
                            || val.ends_with(['-', '_', '.'])
                        {
                            causes.push((
                                "metadata.labels".into(),
                                format!("Invalid value: \"{val}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
                            ));
                        }
                    }
                }
            }
            Some(_) => causes.push((
                format!("metadata.{field}"),
                "Invalid value: must be a map of strings".into(),
            )),
        }
    }
    causes
}

fn parse_json(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// Server-side apply converts the applied configuration to its typed
/// form before anything else, whatever `fieldValidation` says, so a field
/// the kind does not declare is a 400 in structured-merge-diff's words.
fn check_applied_fields(s: &Served, applied: &Value) -> ApiResult<()> {
    if s.crd.is_some() {
        return Ok(());
    }
    let mut typed = applied.clone();
    let unknown = super::openapi_schemas::prune_unknown_fields(
        &s.info.group,
        &s.info.version,
        &s.info.kind,
        &mut typed,
    );
    let errors: Vec<String> = unknown
        .iter()
        .map(|f| format!(".{f}: field not declared in schema"))
        .collect();
    let message = match errors.as_slice() {
        [] => return Ok(()),
        [one] => one.clone(),
        many => format!("errors:\n  {}", many.join("\n  ")),
    };
    Err(ApiError::bad_request(format!(
        "failed to create typed patch object ({}, Kind={}): {message}",
        if s.info.group.is_empty() {
            format!("/{}", s.info.version)
        } else {
            s.info.api_version()
        },
        s.info.kind
    )))
}

fn parse_apply_body(body: &[u8]) -> ApiResult<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("apply patch must be UTF-8 YAML or JSON"))?;
    let v: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_saphyr::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request("apply patch must be an object"));
    }
    Ok(v)
}

/// Validation and defaults of the storage kinds the sandbox stores but
/// runs no controller for (as their registry strategies and defaulters do).
fn storage_defaults(info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut causes = Vec::new();
    let empty = |v: Option<&Value>| v.is_none_or(|v| v.as_array().is_some_and(Vec::is_empty));
    match info.kind.as_str() {
        "PersistentVolumeClaim" => {
            if empty(obj.pointer("/spec/accessModes")) {
                causes.push((
                    "spec.accessModes".to_owned(),
                    "Required value: at least 1 access mode is required".to_owned(),
                ));
            }
            if obj.pointer("/spec/resources/requests/storage").is_none() {
                causes.push((
                    "spec.resources[storage]".to_owned(),
                    "Required value".to_owned(),
                ));
            }
            obj["spec"]["volumeMode"] = obj["spec"]
                .get("volumeMode")
                .cloned()
                .unwrap_or(json!("Filesystem"));
            obj["status"] = json!({"phase": "Pending"});
        }
        "PersistentVolume" => {
            if obj.pointer("/spec/capacity").is_none() {
                causes.push(("spec.capacity".to_owned(), "Required value".to_owned()));
            }
            if empty(obj.pointer("/spec/accessModes")) {
                causes.push((
                    "spec.accessModes".to_owned(),
                    "Required value: must specify at least 1 access mode".to_owned(),
                ));
            }
            for (k, d) in [
                ("persistentVolumeReclaimPolicy", "Retain"),
                ("volumeMode", "Filesystem"),
            ] {
                if obj["spec"].get(k).is_none() {
                    obj["spec"][k] = json!(d);
                }
            }
            obj["status"] = json!({"phase": "Pending"});
        }
        _ => {
            if obj["provisioner"].as_str().unwrap_or_default().is_empty() {
                causes.push(("provisioner".to_owned(), "Required value".to_owned()));
            }
            for (k, d) in [
                ("reclaimPolicy", "Delete"),
                ("volumeBindingMode", "Immediate"),
            ] {
                if obj.get(k).is_none() {
                    obj[k] = json!(d);
                }
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, &name, causes))
    }
}

/// Which fields a write to `sub` of `info` is tracked for.
fn managed_scope(info: &ResourceInfo, sub: Option<&str>) -> managed::Scope {
    match sub {
        Some("status") => managed::Scope::Status,
        _ if info.has_subresource("status") => managed::Scope::NotStatus,
        _ => managed::Scope::All,
    }
}

fn remove_unapplied(doc: &mut Value, prev: &Value, now: &Value) {
    let (Some(d), Some(p)) = (doc.as_object_mut(), prev.as_object()) else {
        return;
    };
    for (k, pv) in p {
        match now.get(k) {
            None => {
                if k != "apiVersion" && k != "kind" {
                    d.remove(k);
                }
            }
            Some(nv) if pv.is_object() && nv.is_object() => {
                if let Some(dv) = d.get_mut(k) {
                    remove_unapplied(dv, pv, nv);
                }
            }
            Some(_) => {}
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max { s } else { &s[..max] }
}

/// Five characters from the alphabet the real apiserver uses for generateName.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// A random RFC 4122 version-4 UUID.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    for x in &mut b {
        *x = fastrand::u8(..);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Now, as the API writes timestamps (seconds, UTC).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Kept for callers that need a stable empty map.
pub fn empty_labels() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// The event types, re-exported for the server's watch encoding.
pub use super::store::EventType as WatchEventType;

/// rv helper re-exported.
pub fn resource_version(obj: &Value) -> u64 {
    rv_of(obj)
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::internal(format!("{e:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::{Api, Query, Target};

    #[test]
    fn apply_configurations_are_forgotten_with_their_object() {
        let api = Api::new(crate::sandbox::builtin::builtin_resources());
        let q = Query::parse(Some("fieldManager=m"));
        let target = |name: &str| Target {
            namespace: Some("default".into()),
            name: Some(name.into()),
            subresource: None,
        };
        for name in ["kept", "gone"] {
            let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default"}});
            api.create("", "v1", "configmaps", Some("default"), cm, &q)
                .expect("created");
            let body = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"k":"v"}}}}"#
            );
            api.patch(
                "",
                "v1",
                "configmaps",
                &target(name),
                "application/apply-patch+yaml",
                body.as_bytes(),
                &q,
            )
            .expect("applied");
        }
        let remembered = |api: &Api| {
            let mut names: Vec<String> = api
                .last_applied
                .lock()
                .expect("lock")
                .keys()
                .map(|k| k.2.clone())
                .collect();
            names.sort();
            names
        };
        assert_eq!(remembered(&api), ["gone", "kept"]);
        api.store
            .delete("configmaps", "default", "gone")
            .expect("deleted");
        api.forget_applied_of_gone();
        assert_eq!(remembered(&api), ["kept"]);
    }

    #[test]
    fn boolean_query_values_are_true_unless_zero_or_false_in_any_case() {
        let q = Query::parse(Some("a=True&b=1&c=yes&d=&e=false&f=FALSE&g=0&h=False&bare"));
        for key in ["a", "b", "c", "d", "bare"] {
            assert!(q.flag(key), "{key} should be true");
        }
        for key in ["e", "f", "g", "h", "absent"] {
            assert!(!q.flag(key), "{key} should be false");
        }
        assert_eq!(q.opt_flag("absent"), None);
        assert_eq!(q.opt_flag("e"), Some(false));
        assert_eq!(q.opt_flag("a"), Some(true));
    }
}
