//! Discovery and OpenAPI documents, built as pure functions over the
//! resources the sandbox serves (built-ins plus those CRDs add at runtime).
//!
//! # Discovery
//!
//! Shapes follow a real kube-apiserver's answers as snapshotted in
//! `kubernetes/kubernetes` under `api/discovery/` (`api.json`, `apis.json`,
//! `apis__apps.json`, `api__v1.json`, `aggregated_v2.json`):
//!
//! - `GET /version`: [`version`]. `/usr/bin/kubectl` here is a dispatcher that
//!   picks its bundled kubectl (1.27–1.33) from `major`/`minor`, so we say 1.33.
//! - `GET /api`, `GET /apis`: legacy `APIVersions` / `APIGroupList`, or the
//!   aggregated `APIGroupDiscoveryList` (`apidiscovery.k8s.io/v2`, or
//!   `v2beta1` for kubectl 1.27/1.28 which only ask for that) when the
//!   `Accept` header asks for it ([`negotiate`]). client-go
//!   (`discovery_client.go`) sends `AcceptV2,AcceptV2Beta1,application/json`
//!   (newer releases put a `;profile=nopeer` variant first) and decides how to
//!   decode by the answer's `Content-Type` (`g`, `v` and `as` parameters), so
//!   the content type must be exact: see [`DiscoveryFormat::content_type`].
//!   kube-rs sends no `Accept` for `Discovery::run` and the same three-part
//!   header for `Discovery::run_aggregated`.
//! - `GET /api/v1`, `GET /apis/<g>/<v>`: `APIResourceList` with one entry per
//!   resource and one per subresource (`pods/status`), subresources carrying
//!   `group`/`version` when their kind lives elsewhere (`deployments/scale` →
//!   `autoscaling/v1` `Scale`); `kubectl scale` finds the Scale kind there.
//! - `GET /apis/<g>`: `APIGroup`.
//!
//! In aggregated discovery, built-in resources carry an empty group/version in
//! `responseKind` (as `aggregated_v2.json` shows: "same as the enclosing
//! group-version") while CRD resources carry their full group/version, as the
//! apiextensions discovery controller writes them. Groups are listed in
//! priority order: built-in groups in table order, then CRD groups by name;
//! versions of a group are sorted the Kubernetes way (`v2 > v1 > v1beta1 >
//! v1alpha1`) and the first is preferred, as the CRD discovery controller does.
//!
//! # OpenAPI: what kubectl 1.27–1.33 needs
//!
//! Read from `kubernetes/kubernetes` `staging/src/k8s.io/…`:
//!
//! - **Field validation** (`create`, `apply`, `apply --server-side`,
//!   `replace`; default `--validate=strict`). `cmd/util/factory_client_access.go`
//!   `Validator` wraps a `ParamVerifyingSchema` around a fallback verifier:
//!   `cli-runtime/pkg/resource/query_param_verifier_v3.go` fetches
//!   `GET /openapi/v3` (a map `paths` → `{serverRelativeURL}` keyed
//!   `api/v1`, `apis/<g>/<v>`, see `client-go/openapi/client.go` and
//!   `openapi3/root.go`), then the group-version document, and looks for the
//!   first PATCH operation whose `x-kubernetes-group-version-kind` is the
//!   object's GVK; if that operation lists a `fieldValidation` parameter
//!   (inline, `$ref`s are not followed) the server validates and kubectl does
//!   no client-side validation. If the GV is missing and the kind is a CRD it
//!   checks the Namespace document instead. Only when the v3 lookup *errors*
//!   does `fallback_query_param_verifier.go` try `/openapi/v2`; and only when
//!   the parameter is *unsupported* under `strict` does
//!   `kubectl/pkg/validation/schema.go` validate client-side against OpenAPI
//!   v2, which with a 404 fails the command. Hence every PATCH, POST and PUT
//!   operation here, including those of subresources (the verifier stops at
//!   the first PATCH matching the GVK, and `…/status` PATCH carries the
//!   parent's GVK), declares `fieldValidation`, `dryRun` and `fieldManager`.
//!   `kind: List` documents are always "unsupported", so they do need v2.
//! - **Client-side apply** (`kubectl/pkg/cmd/apply/patcher.go`): with a v3 GV
//!   document whose PATCH accepts `application/strategic-merge-patch+json` it
//!   computes the patch from the v3 component schema whose
//!   `x-kubernetes-group-version-kind` matches; if none matches it tries v2
//!   (errors ignored), then the compiled-in Go types (built-ins) or a JSON
//!   merge patch (unregistered kinds, i.e. CRDs). The k8s-openapi schemas that
//!   `schemars` could generate carry no `x-kubernetes-patch-merge-key` /
//!   `-strategy` extensions, so advertising them would make kubectl treat
//!   `containers` and other keyed lists as atomic. We therefore publish
//!   permissive component schemas (`type: object`,
//!   `x-kubernetes-preserve-unknown-fields`) *without* a GVK extension:
//!   kubectl falls back to its compiled-in patch metadata, which is exact for
//!   built-ins. Strategic merge is listed for built-ins only, as the real
//!   server does (CRDs accept JSON patch, merge patch and apply patch).
//! - `get`, `patch`, `scale`, `wait` fetch no OpenAPI at all (discovery only).
//! - `kubectl explain` reads the v3 schemas (v2 with `--output=plaintext-openapiv2`).
//! - **`/openapi/v2`** cannot be a 404. Against a mock serving these
//!   documents, the bundled kubectl 1.27 and 1.28 fetch it in
//!   `Validator` before every `create`/`apply` (observed; 1.29+ load it lazily,
//!   cf. kubernetes PR #116565) and fail with NotFound; 1.29–1.33 fetch
//!   it for `kind: List` files and in client-side apply. client-go's
//!   `OpenAPISchema()` asks for
//!   `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` and
//!   proto-decodes the body, so JSON cannot satisfy it, and it parses the
//!   answer's `Content-Type` with Go's `mime`, which rejects the `@`
//!   spelling: the real server answers
//!   `application/com.github.proto-openapi.spec.v2.v1.0+protobuf`. We serve
//!   the full document in gnostic's protobuf encoding ([`OpenApiV2`],
//!   `super::gnostic`): its definitions carry the same schemas, GVK tags and
//!   patch strategies as v3, so `kubectl explain --output=plaintext-openapiv2`
//!   works and client-side apply gets the real patch metadata. Since the v3
//!   documents declare `fieldValidation`, kubectl 1.27–1.33 skip client-side
//!   validation and send `create`, `apply`, `apply --server-side` and `List`
//!   requests with `fieldValidation=Strict`, and resolve `get all`, `ev`,
//!   `crd`, CRD short names and `scale deploy` from discovery.
//!
//! The GV document URL carries `?hash=` of its content (as a real server
//! does), so client-go's HTTP cache never reuses a document after a CRD
//! changes it.

use std::cmp::Ordering;

use serde_json::{Map, Value, json};

use super::builtin::is_builtin_group;
use super::registry::{ResourceInfo, SubresourceInfo};

/// Kubernetes version the sandbox reports.
const MAJOR: &str = "1";
const MINOR: &str = "33";
const GIT_VERSION: &str = "v1.33.0+agentdeck";

/// `Content-Type` of legacy discovery answers.
pub const LEGACY_CONTENT_TYPE: &str = "application/json";
/// `Content-Type` of aggregated discovery (`apidiscovery.k8s.io/v2`).
pub const AGGREGATED_V2_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// `Content-Type` of aggregated discovery (`apidiscovery.k8s.io/v2beta1`).
pub const AGGREGATED_V2BETA1_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

const DISCOVERY_GROUP: &str = "apidiscovery.k8s.io";
const DISCOVERY_LIST_KIND: &str = "APIGroupDiscoveryList";

/// Version of the aggregated discovery API a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregatedVersion {
    /// `apidiscovery.k8s.io/v2` (kubectl ≥ 1.30, kube-rs).
    V2,
    /// `apidiscovery.k8s.io/v2beta1` (kubectl 1.27–1.29).
    V2Beta1,
}

impl AggregatedVersion {
    fn api_version(self) -> &'static str {
        match self {
            AggregatedVersion::V2 => "apidiscovery.k8s.io/v2",
            AggregatedVersion::V2Beta1 => "apidiscovery.k8s.io/v2beta1",
        }
    }
}

/// How to answer `GET /api` and `GET /apis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryFormat {
    /// `APIGroupDiscoveryList` in the given version.
    Aggregated(AggregatedVersion),
    /// `APIVersions` / `APIGroupList`.
    Legacy,
}

impl DiscoveryFormat {
    /// The exact `Content-Type` to answer with; client-go picks its decoder
    /// from it.
    pub fn content_type(self) -> &'static str {
        match self {
            DiscoveryFormat::Aggregated(AggregatedVersion::V2) => AGGREGATED_V2_CONTENT_TYPE,
            DiscoveryFormat::Aggregated(AggregatedVersion::V2Beta1) => {
                AGGREGATED_V2BETA1_CONTENT_TYPE
            }
            DiscoveryFormat::Legacy => LEGACY_CONTENT_TYPE,
        }
    }
}

/// Pick the discovery format from an `Accept` header: the acceptable media
/// range with the highest `q` (first wins ties). No header, `*/*`, plain
/// `application/json`, or nothing we can produce (protobuf) mean legacy.
pub fn negotiate(accept: Option<&str>) -> DiscoveryFormat {
    let Some(accept) = accept else {
        return DiscoveryFormat::Legacy;
    };
    let mut best: Option<(f32, DiscoveryFormat)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let (mut g, mut v, mut as_kind, mut q) = (None, None, None, 1.0_f32);
        for param in parts {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match key.trim().to_ascii_lowercase().as_str() {
                "g" => g = Some(value),
                "v" => v = Some(value),
                "as" => as_kind = Some(value),
                "q" => q = value.parse().unwrap_or(0.0),
                _ => {}
            }
        }
        let candidate = match media.as_str() {
            "application/json" => match (g, v, as_kind) {
                (None, None, None) => Some(DiscoveryFormat::Legacy),
                (Some(DISCOVERY_GROUP), Some("v2"), Some(DISCOVERY_LIST_KIND)) => {
                    Some(DiscoveryFormat::Aggregated(AggregatedVersion::V2))
                }
                (Some(DISCOVERY_GROUP), Some("v2beta1"), Some(DISCOVERY_LIST_KIND)) => {
                    Some(DiscoveryFormat::Aggregated(AggregatedVersion::V2Beta1))
                }
                _ => None,
            },
            "*/*" | "application/*" => Some(DiscoveryFormat::Legacy),
            _ => None,
        };
        if let Some(format) = candidate
            && q > 0.0
            && best.is_none_or(|(best_q, _)| q > best_q)
        {
            best = Some((q, format));
        }
    }
    best.map_or(DiscoveryFormat::Legacy, |(_, format)| format)
}

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "emulationMajor": MAJOR,
        "emulationMinor": MINOR,
        "minCompatibilityMajor": MAJOR,
        "minCompatibilityMinor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": concat!("agentdeck-", env!("CARGO_PKG_VERSION")),
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "none (agentdeck sandbox, Rust)",
        "compiler": "rustc",
        "platform": platform(),
    })
}

fn platform() -> String {
    format!("{}/{}", std::env::consts::OS, go_arch())
}

/// This machine's architecture as Go names it (`GOARCH`): what a kubelet
/// writes in `kubernetes.io/arch` and `nodeInfo.architecture`.
pub(crate) fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// `GET /api` (legacy): `APIVersions`. `server_address` is the `host:port`
/// clients reached us at.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    })
}

/// `GET /api` in the negotiated format.
pub fn core_root(
    resources: &[ResourceInfo],
    format: DiscoveryFormat,
    server_address: &str,
) -> Value {
    match format {
        DiscoveryFormat::Aggregated(version) => aggregated_core(resources, version),
        DiscoveryFormat::Legacy => api_versions(server_address),
    }
}

/// `GET /apis` in the negotiated format.
pub fn apis_root(resources: &[ResourceInfo], format: DiscoveryFormat) -> Value {
    match format {
        DiscoveryFormat::Aggregated(version) => aggregated_apis(resources, version),
        DiscoveryFormat::Legacy => api_group_list(resources),
    }
}

/// `GET /apis` (legacy): `APIGroupList` of every non-core group.
pub fn api_group_list(resources: &[ResourceInfo]) -> Value {
    let groups: Vec<Value> = named_groups(resources)
        .into_iter()
        .map(|group| api_group_body(resources, group))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`: `APIGroup`, or `None` if no resource is in it.
pub fn api_group(resources: &[ResourceInfo], group: &str) -> Option<Value> {
    if group.is_empty() || !resources.iter().any(|r| r.group == group) {
        return None;
    }
    let mut body = api_group_body(resources, group);
    let object = body.as_object_mut()?;
    object.insert("kind".into(), json!("APIGroup"));
    object.insert("apiVersion".into(), json!("v1"));
    Some(body)
}

fn api_group_body(resources: &[ResourceInfo], group: &str) -> Value {
    let versions: Vec<Value> = group_versions(resources, group)
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`: `APIResourceList`, or
/// `None` if nothing is served in that group-version.
pub fn api_resource_list(resources: &[ResourceInfo], group: &str, version: &str) -> Option<Value> {
    let in_gv = resources_in(resources, group, version);
    if in_gv.is_empty() {
        return None;
    }
    let mut entries: Vec<(String, Value)> = Vec::new();
    for r in in_gv {
        let mut main = Map::new();
        main.insert("name".into(), json!(r.plural));
        main.insert("singularName".into(), json!(r.singular));
        main.insert("namespaced".into(), json!(r.namespaced));
        main.insert("kind".into(), json!(r.kind));
        main.insert("verbs".into(), json!(r.verbs));
        if !r.short_names.is_empty() {
            main.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            main.insert("categories".into(), json!(r.categories));
        }
        entries.push((r.plural.clone(), Value::Object(main)));
        for s in &r.subresources {
            let name = format!("{}/{}", r.plural, s.name);
            let mut sub = Map::new();
            sub.insert("name".into(), json!(name));
            sub.insert("singularName".into(), json!(""));
            sub.insert("namespaced".into(), json!(r.namespaced));
            if let Some((g, v)) = s.group_version.as_deref().map(split_group_version) {
                if !g.is_empty() {
                    sub.insert("group".into(), json!(g));
                }
                sub.insert("version".into(), json!(v));
            }
            sub.insert("kind".into(), json!(s.kind));
            sub.insert("verbs".into(), json!(s.verbs));
            entries.push((name, Value::Object(sub)));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let list: Vec<Value> = entries.into_iter().map(|(_, v)| v).collect();
    let group_version = group_version_string(group, version);
    let mut body = json!({
        "kind": "APIResourceList",
        "groupVersion": group_version,
        "resources": list,
    });
    // The real server leaves `apiVersion` out for the core group only.
    if !group.is_empty()
        && let Some(object) = body.as_object_mut()
    {
        object.insert("apiVersion".into(), json!("v1"));
    }
    Some(body)
}

/// `GET /api` (aggregated): the core group as an `APIGroupDiscoveryList`.
pub fn aggregated_core(resources: &[ResourceInfo], version: AggregatedVersion) -> Value {
    let items: Vec<Value> = if resources.iter().any(|r| r.group.is_empty()) {
        vec![aggregated_group(resources, "", json!({}))]
    } else {
        Vec::new()
    };
    aggregated_list(version, items)
}

/// `GET /apis` (aggregated): every non-core group as an
/// `APIGroupDiscoveryList`.
pub fn aggregated_apis(resources: &[ResourceInfo], version: AggregatedVersion) -> Value {
    let items: Vec<Value> = named_groups(resources)
        .into_iter()
        .map(|group| aggregated_group(resources, group, json!({"name": group})))
        .collect();
    aggregated_list(version, items)
}

fn aggregated_list(version: AggregatedVersion, items: Vec<Value>) -> Value {
    json!({
        "kind": DISCOVERY_LIST_KIND,
        "apiVersion": version.api_version(),
        "metadata": {},
        "items": items,
    })
}

fn aggregated_group(resources: &[ResourceInfo], group: &str, metadata: Value) -> Value {
    let versions: Vec<Value> = group_versions(resources, group)
        .into_iter()
        .map(|version| {
            let list: Vec<Value> = resources_in(resources, group, version)
                .into_iter()
                .map(aggregated_resource)
                .collect();
            json!({"version": version, "resources": list, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": metadata, "versions": versions})
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let builtin = is_builtin_group(&r.group);
    let mut out = Map::new();
    out.insert("resource".into(), json!(r.plural));
    out.insert(
        "responseKind".into(),
        response_kind(r, builtin, &r.kind, None),
    );
    out.insert(
        "scope".into(),
        json!(if r.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }),
    );
    out.insert("singularResource".into(), json!(r.singular));
    out.insert("verbs".into(), json!(r.verbs));
    if !r.short_names.is_empty() {
        out.insert("shortNames".into(), json!(r.short_names));
    }
    if !r.categories.is_empty() {
        out.insert("categories".into(), json!(r.categories));
    }
    if !r.subresources.is_empty() {
        let mut subs: Vec<&SubresourceInfo> = r.subresources.iter().collect();
        subs.sort_by(|a, b| a.name.cmp(&b.name));
        let subs: Vec<Value> = subs
            .into_iter()
            .map(|s| {
                json!({
                    "subresource": s.name,
                    "responseKind": response_kind(r, builtin, &s.kind, s.group_version.as_deref()),
                    "verbs": s.verbs,
                })
            })
            .collect();
        out.insert("subresources".into(), json!(subs));
    }
    Value::Object(out)
}

/// `responseKind` as the real server writes it: an explicit group-version when
/// the kind lives elsewhere, empty for built-ins in their own group-version,
/// full for CRDs.
fn response_kind(r: &ResourceInfo, builtin: bool, kind: &str, elsewhere: Option<&str>) -> Value {
    let (group, version) = match elsewhere {
        Some(gv) => split_group_version(gv),
        None if builtin => ("", ""),
        None => (r.group.as_str(), r.version.as_str()),
    };
    json!({"group": group, "version": version, "kind": kind})
}

// ---------------------------------------------------------------------------
// OpenAPI v2
// ---------------------------------------------------------------------------

/// The media type client-go asks `/openapi/v2` for (kube-openapi calls this
/// spelling deprecated but still accepts it).
pub const OPENAPI_V2_PROTOBUF_ACCEPT: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The media type a real server answers protobuf OpenAPI v2 with: `@` is not
/// a token character, and Go's `mime.ParseMediaType` in client-go rejects
/// the `@` spelling in a `Content-Type` ("unexpected content after media
/// subtype").
pub const OPENAPI_V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// `GET /openapi/v2` as served: the Swagger 2.0 document as JSON and in
/// gnostic's `openapi.v2.Document` protobuf encoding, which client-go
/// always asks for.
///
/// kubectl 1.27 and 1.28 download it before every `create`/`apply` and fail
/// on a 404, and 1.29+ need it for `kind: List` files (checked against the
/// bundled kubectls); `kubectl explain --output=plaintext-openapiv2` reads
/// it, as does kubectl's client-side validation where a server lacks
/// `fieldValidation`.
pub struct OpenApiV2 {
    json: axum::body::Bytes,
    protobuf: axum::body::Bytes,
}

impl OpenApiV2 {
    /// Encodes `doc` (from [`openapi_v2_document`]) both ways.
    pub fn new(doc: &Value) -> Self {
        OpenApiV2 {
            json: serde_json::to_vec(doc).unwrap_or_default().into(),
            protobuf: super::gnostic::encode_document(doc).into(),
        }
    }

    /// The `Content-Type` and body for a request's `Accept` header:
    /// protobuf when asked for, JSON otherwise.
    pub fn body(&self, accept: Option<&str>) -> (&'static str, axum::body::Bytes) {
        let wants_protobuf = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let media = range.split(';').next().map(str::trim);
                media == Some(OPENAPI_V2_PROTOBUF_ACCEPT) || media == Some(OPENAPI_V2_PROTOBUF)
            })
        });
        if wants_protobuf {
            (OPENAPI_V2_PROTOBUF, self.protobuf.clone())
        } else {
            ("application/json", self.json.clone())
        }
    }
}

/// The `/openapi/v2` document for what `served` holds, built once per
/// distinct set of served resources (building it takes most of a second in
/// a debug build, and kubectl 1.27/1.28 ask for it before every write).
pub fn openapi_v2_served(served: &[super::api::Served]) -> std::sync::Arc<OpenApiV2> {
    use std::sync::{Arc, Mutex, OnceLock};
    /// The fingerprint of what was served, and its document.
    type Cached = Option<(String, Arc<OpenApiV2>)>;
    static CACHE: OnceLock<Mutex<Cached>> = OnceLock::new();
    let key = openapi_v3_hash(&Value::String(format!("{served:?}")));
    let cache = CACHE.get_or_init(|| Mutex::new(None));
    if let Some((k, doc)) = &*cache.lock().unwrap_or_else(|p| p.into_inner())
        && *k == key
    {
        return Arc::clone(doc);
    }
    let resources: Vec<ResourceInfo> = served.iter().map(|s| s.info.clone()).collect();
    let docs: Vec<Value> = all_group_versions(&resources)
        .into_iter()
        .filter_map(|(group, version)| {
            let mut doc = openapi_v3_group_version(&resources, group, version)?;
            super::openapi_schemas::publish(&mut doc, served, group, version);
            Some(doc)
        })
        .collect();
    let built = Arc::new(OpenApiV2::new(&openapi_v2_document(&docs)));
    *cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, Arc::clone(&built)));
    built
}

/// The Swagger 2.0 document as JSON, from the OpenAPI v3 documents of every
/// group/version: the same paths and operations (a request body becomes
/// the `body` parameter, response content its `schema`, query parameters
/// carry their type inline) and the schemas as `definitions`.
pub fn openapi_v2_document(v3_docs: &[Value]) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for doc in v3_docs {
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            let mut converted = Map::new();
            for (method, op) in item.as_object().into_iter().flatten() {
                let value = if method == "parameters" {
                    Value::Array(
                        op.as_array()
                            .into_iter()
                            .flatten()
                            .map(v2_parameter)
                            .collect(),
                    )
                } else {
                    v2_operation(op)
                };
                converted.insert(method.clone(), value);
            }
            paths.insert(path.clone(), Value::Object(converted));
        }
        for (name, schema) in doc["components"]["schemas"]
            .as_object()
            .into_iter()
            .flatten()
        {
            definitions.insert(name.clone(), schema.clone());
        }
    }
    let mut doc = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication",
            "type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    });
    v2_refs_to_definitions(&mut doc);
    doc
}

/// Points every `#/components/schemas/` reference in `v` at
/// `#/definitions/`, and writes a one-reference `allOf` as the `$ref`.
fn v2_refs_to_definitions(v: &mut Value) {
    match v {
        Value::Object(m) => {
            // Swagger 2.0 documents write a described reference as a
            // `$ref` with siblings, as the apiserver's does; kubectl's
            // v2 reader does not follow a one-element `allOf`.
            let single_ref = match m.get("allOf").and_then(Value::as_array) {
                Some(all) if all.len() == 1 && all[0].as_object().is_some_and(|o| o.len() == 1) => {
                    all[0].get("$ref").cloned()
                }
                _ => None,
            };
            if let Some(r) = single_ref {
                m.remove("allOf");
                m.insert("$ref".into(), r);
            }
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                *r = format!("#/definitions/{name}");
            }
            m.values_mut().for_each(v2_refs_to_definitions);
        }
        Value::Array(a) => a.iter_mut().for_each(v2_refs_to_definitions),
        _ => {}
    }
}

/// A v3 parameter in Swagger 2.0: its schema's fields inline.
fn v2_parameter(p: &Value) -> Value {
    let mut out = p.clone();
    if let Some(o) = out.as_object_mut()
        && let Some(Value::Object(schema)) = o.remove("schema")
    {
        for (k, v) in schema {
            o.insert(k, v);
        }
    }
    out
}

/// A v3 operation in Swagger 2.0: the request body as the `body`
/// parameter (with `consumes`), responses with their `schema`, and the
/// `produces` and `schemes` the apiserver lists.
fn v2_operation(op: &Value) -> Value {
    let mut out = op.clone();
    let Some(o) = out.as_object_mut() else {
        return out;
    };
    let mut params: Vec<Value> = o
        .remove("parameters")
        .and_then(|p| p.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(v2_parameter)
        .collect();
    if let Some(body) = o.remove("requestBody") {
        let content = body["content"].as_object().cloned().unwrap_or_default();
        let schema = content
            .values()
            .next()
            .map(|c| c["schema"].clone())
            .unwrap_or(Value::Null);
        params.insert(
            0,
            json!({"name": "body", "in": "body", "required": true, "schema": schema}),
        );
        o.insert("consumes".into(), json!(content.keys().collect::<Vec<_>>()));
    }
    if !params.is_empty() {
        o.insert("parameters".into(), Value::Array(params));
    }
    if let Some(Value::Object(responses)) = o.get_mut("responses") {
        responses.values_mut().for_each(v2_response);
    }
    o.insert(
        "produces".into(),
        json!([
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf"
        ]),
    );
    o.insert("schemes".into(), json!(["https"]));
    out
}

/// A v3 response in Swagger 2.0: its first content's schema as `schema`.
fn v2_response(r: &mut Value) {
    let schema = r["content"]
        .as_object()
        .and_then(|c| c.values().next())
        .map(|c| c["schema"].clone());
    if let Some(ro) = r.as_object_mut() {
        ro.remove("content");
        if let Some(schema) = schema {
            ro.insert("schema".into(), schema);
        }
    }
}

// ---------------------------------------------------------------------------
// OpenAPI v3
// ---------------------------------------------------------------------------

/// `GET /openapi/v3`: where each group-version's document is.
pub fn openapi_v3_root(resources: &[ResourceInfo]) -> Value {
    let mut paths = Map::new();
    for (group, version) in all_group_versions(resources) {
        let Some(doc) = openapi_v3_group_version(resources, group, version) else {
            continue;
        };
        let key = openapi_v3_key(group, version);
        let url = format!("/openapi/v3/{key}?hash={}", openapi_v3_hash(&doc));
        paths.insert(key, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// Content hash of an OpenAPI document, as used in the `hash` query
/// parameter of [`openapi_v3_root`] (and usable as its `ETag`).
pub fn openapi_v3_hash(doc: &Value) -> String {
    // FNV-1a: stable across builds and platforms, unlike `DefaultHasher`.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in doc.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016X}")
}

/// `GET /openapi/v3/api/v1` or `GET /openapi/v3/apis/<g>/<v>`, or `None` if
/// nothing is served there.
pub fn openapi_v3_group_version(
    resources: &[ResourceInfo],
    group: &str,
    version: &str,
) -> Option<Value> {
    let in_gv = resources_in(resources, group, version);
    if in_gv.is_empty() {
        return None;
    }
    let builtin = is_builtin_group(group);
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for name in [META_PATCH, META_DELETE_OPTIONS, META_STATUS] {
        schemas.insert(name.into(), permissive_schema(name));
    }
    for r in in_gv {
        add_resource_paths(&mut paths, &mut schemas, &prefix, r, builtin);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

const META_PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const META_DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const META_STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";

/// A kind an operation is about, with its schema's component name.
struct KindRef<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    schema: String,
}

impl<'a> KindRef<'a> {
    fn new(group: &'a str, version: &'a str, kind: &'a str, builtin: bool) -> Self {
        let schema = definition_name(group, version, kind, builtin);
        KindRef {
            group,
            version,
            kind,
            schema,
        }
    }

    fn gvk(&self) -> Value {
        json!({"group": self.group, "version": self.version, "kind": self.kind})
    }
}

/// The paths and schemas of one resource: its collection (and, when
/// namespaced, the list across namespaces), its items and their
/// subresources.
fn add_resource_paths(
    paths: &mut Map<String, Value>,
    schemas: &mut Map<String, Value>,
    prefix: &str,
    r: &ResourceInfo,
    builtin: bool,
) {
    let object = KindRef::new(&r.group, &r.version, &r.kind, builtin);
    let list_schema = format!("{}List", object.schema);
    let collection = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{prefix}/{}", r.plural)
    };
    let scope_params = if r.namespaced {
        vec![path_param("namespace")]
    } else {
        Vec::new()
    };
    let at = ResourcePaths {
        r,
        object,
        list_schema,
        builtin,
        collection,
        scope_params,
    };
    schemas.insert(
        at.object.schema.clone(),
        permissive_schema(&at.object.schema),
    );
    if at.has("list") {
        schemas.insert(at.list_schema.clone(), permissive_schema(&at.list_schema));
    }
    add_collection_paths(paths, &at, prefix);
    let item = format!("{}/{{name}}", at.collection);
    let mut item_params = vec![path_param("name")];
    item_params.extend(at.scope_params.iter().cloned());
    add_item_path(paths, &at, &item, item_params.clone());
    for s in &r.subresources {
        add_subresource_path(paths, schemas, &at, s, &item, &item_params);
    }
}

/// What the paths of one resource share.
struct ResourcePaths<'a> {
    r: &'a ResourceInfo,
    /// The resource's kind.
    object: KindRef<'a>,
    /// The schema name of its list.
    list_schema: String,
    /// Its group is built in.
    builtin: bool,
    /// The path of its collection (in a namespace, when namespaced).
    collection: String,
    /// The collection's path parameters (`namespace`, when namespaced).
    scope_params: Vec<Value>,
}

impl ResourcePaths<'_> {
    /// Discovery lists `verb` for the resource.
    fn has(&self, verb: &str) -> bool {
        self.r.verbs.iter().any(|v| v == verb)
    }

    /// The operation id of `action` (on subresource `suffix`), as the
    /// apiserver names it (`listCoreV1NamespacedPod`, `readCoreV1NamespacedPodStatus`).
    fn op_id(&self, action: &str, suffix: &str) -> String {
        let scope = if self.r.namespaced { "Namespaced" } else { "" };
        format!(
            "{action}{}{scope}{}{suffix}",
            operation_group(&self.r.group, &self.r.version),
            self.r.kind
        )
    }
}

/// The collection's list, create and deletecollection, and for a
/// namespaced resource the list across namespaces.
fn add_collection_paths(paths: &mut Map<String, Value>, at: &ResourcePaths<'_>, prefix: &str) {
    let (r, object) = (at.r, &at.object);
    let mut ops = Map::new();
    if at.has("list") {
        ops.insert(
            "get".into(),
            operation(
                &at.op_id("list", ""),
                "list",
                object,
                list_params(),
                None,
                &at.list_schema,
            ),
        );
    }
    if at.has("create") {
        ops.insert(
            "post".into(),
            operation(
                &at.op_id("create", ""),
                "post",
                object,
                write_params(false),
                Some(whole_object_body(&object.schema)),
                &object.schema,
            ),
        );
    }
    if at.has("deletecollection") {
        let mut params = delete_params();
        params.extend(list_params());
        ops.insert(
            "delete".into(),
            operation(
                &at.op_id("deleteCollection", ""),
                "deletecollection",
                object,
                params,
                Some(whole_object_body(META_DELETE_OPTIONS)),
                META_STATUS,
            ),
        );
    }
    insert_path(paths, at.collection.clone(), ops, at.scope_params.clone());

    if r.namespaced && at.has("list") {
        let mut ops = Map::new();
        ops.insert(
            "get".into(),
            operation(
                &format!(
                    "list{}{}ForAllNamespaces",
                    operation_group(&r.group, &r.version),
                    r.kind
                ),
                "list",
                object,
                list_params(),
                None,
                &at.list_schema,
            ),
        );
        insert_path(paths, format!("{prefix}/{}", r.plural), ops, Vec::new());
    }
}

/// An item's get, update, patch and delete.
fn add_item_path(
    paths: &mut Map<String, Value>,
    at: &ResourcePaths<'_>,
    item: &str,
    item_params: Vec<Value>,
) {
    let object = &at.object;
    let mut ops = Map::new();
    if at.has("get") {
        ops.insert(
            "get".into(),
            operation(
                &at.op_id("read", ""),
                "get",
                object,
                vec![pretty_param()],
                None,
                &object.schema,
            ),
        );
    }
    if at.has("update") {
        ops.insert(
            "put".into(),
            operation(
                &at.op_id("replace", ""),
                "put",
                object,
                write_params(false),
                Some(whole_object_body(&object.schema)),
                &object.schema,
            ),
        );
    }
    if at.has("patch") {
        ops.insert(
            "patch".into(),
            operation(
                &at.op_id("patch", ""),
                "patch",
                object,
                write_params(true),
                Some(patch_body(at.builtin)),
                &object.schema,
            ),
        );
    }
    if at.has("delete") {
        ops.insert(
            "delete".into(),
            operation(
                &at.op_id("delete", ""),
                "delete",
                object,
                delete_params(),
                Some(whole_object_body(META_DELETE_OPTIONS)),
                META_STATUS,
            ),
        );
    }
    insert_path(paths, item.to_string(), ops, item_params);
}

/// A subresource's path (`…/{name}/status`) and its kind's schema.
fn add_subresource_path(
    paths: &mut Map<String, Value>,
    schemas: &mut Map<String, Value>,
    at: &ResourcePaths<'_>,
    s: &SubresourceInfo,
    item: &str,
    item_params: &[Value],
) {
    let (group, version) = match s.group_version.as_deref() {
        Some(gv) => split_group_version(gv),
        None => (at.r.group.as_str(), at.r.version.as_str()),
    };
    // Kinds from other group-versions (Scale, Eviction …) are built-in
    // whatever group the parent is in.
    let sub_builtin = at.builtin || s.group_version.is_some();
    let sub_kind = KindRef::new(group, version, &s.kind, sub_builtin);
    schemas.insert(sub_kind.schema.clone(), permissive_schema(&sub_kind.schema));
    let suffix = capitalize(&s.name);
    let has_sub = |verb: &str| s.verbs.iter().any(|v| v == verb);
    let mut ops = Map::new();
    if has_sub("get") {
        ops.insert(
            "get".into(),
            operation(
                &at.op_id("read", &suffix),
                "get",
                &sub_kind,
                vec![pretty_param()],
                None,
                &sub_kind.schema,
            ),
        );
    }
    if has_sub("create") {
        ops.insert(
            "post".into(),
            operation(
                &at.op_id("create", &suffix),
                "post",
                &sub_kind,
                write_params(false),
                Some(whole_object_body(&sub_kind.schema)),
                &sub_kind.schema,
            ),
        );
    }
    if has_sub("update") {
        ops.insert(
            "put".into(),
            operation(
                &at.op_id("replace", &suffix),
                "put",
                &sub_kind,
                write_params(false),
                Some(whole_object_body(&sub_kind.schema)),
                &sub_kind.schema,
            ),
        );
    }
    if has_sub("patch") {
        ops.insert(
            "patch".into(),
            operation(
                &at.op_id("patch", &suffix),
                "patch",
                &sub_kind,
                write_params(true),
                Some(patch_body(at.builtin)),
                &sub_kind.schema,
            ),
        );
    }
    insert_path(
        paths,
        format!("{item}/{}", s.name),
        ops,
        item_params.to_vec(),
    );
}

fn insert_path(
    paths: &mut Map<String, Value>,
    path: String,
    ops: Map<String, Value>,
    params: Vec<Value>,
) {
    if ops.is_empty() {
        return;
    }
    let mut item = ops;
    if !params.is_empty() {
        item.insert("parameters".into(), Value::Array(params));
    }
    paths.insert(path, Value::Object(item));
}

fn operation(
    id: &str,
    action: &str,
    kind: &KindRef<'_>,
    parameters: Vec<Value>,
    request_body: Option<Value>,
    response_schema: &str,
) -> Value {
    let mut op = Map::new();
    op.insert("operationId".into(), json!(id));
    op.insert("parameters".into(), Value::Array(parameters));
    if let Some(body) = request_body {
        op.insert("requestBody".into(), body);
    }
    op.insert(
        "responses".into(),
        json!({
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": schema_ref(response_schema)}},
            },
            "401": {"description": "Unauthorized"},
        }),
    );
    op.insert("x-kubernetes-action".into(), json!(action));
    op.insert("x-kubernetes-group-version-kind".into(), kind.gvk());
    Value::Object(op)
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn whole_object_body(schema: &str) -> Value {
    json!({"content": {"*/*": {"schema": schema_ref(schema)}}, "required": true})
}

fn patch_body(strategic_merge: bool) -> Value {
    let mut content = Map::new();
    let mut types = vec![
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if strategic_merge {
        types.push("application/strategic-merge-patch+json");
    }
    for media in types {
        content.insert(media.into(), json!({"schema": schema_ref(META_PATCH)}));
    }
    json!({"content": content, "required": true})
}

/// A permissive component schema: the sandbox validates on the server, and
/// must not carry `x-kubernetes-group-version-kind` (see the module docs).
fn permissive_schema(name: &str) -> Value {
    json!({
        "description": format!("{name}: schema not published by the agentdeck sandbox; the server validates requests."),
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn query_param(name: &str, kind: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": kind, "uniqueItems": true},
    })
}

fn path_param(name: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": format!("{name} of the resource"),
        "required": true,
        "schema": {"type": "string", "uniqueItems": true},
    })
}

fn pretty_param() -> Value {
    query_param(
        "pretty",
        "string",
        "If 'true', then the output is pretty printed.",
    )
}

/// Parameters of create, update and patch: the ones kubectl looks for.
fn write_params(patch: bool) -> Vec<Value> {
    let mut params = vec![
        query_param(
            "dryRun",
            "string",
            "When present, indicates that modifications should not be persisted. Valid value: All.",
        ),
        query_param(
            "fieldManager",
            "string",
            "Name associated with the actor or entity that is making these changes.",
        ),
        query_param(
            "fieldValidation",
            "string",
            "How the server handles unknown or duplicate fields: Ignore, Warn or Strict.",
        ),
    ];
    if patch {
        params.push(query_param(
            "force",
            "boolean",
            "Force is going to \"force\" Apply requests; it must be unset for non-apply patch requests.",
        ));
    }
    params.push(pretty_param());
    params
}

fn list_params() -> Vec<Value> {
    vec![
        query_param(
            "allowWatchBookmarks",
            "boolean",
            "Request watch events with type BOOKMARK.",
        ),
        query_param(
            "continue",
            "string",
            "Continue token from a previous paged list.",
        ),
        query_param("fieldSelector", "string", "Restrict the list by fields."),
        query_param("labelSelector", "string", "Restrict the list by labels."),
        query_param("limit", "integer", "Maximum number of items to return."),
        pretty_param(),
        query_param("resourceVersion", "string", "Resource version constraint."),
        query_param(
            "resourceVersionMatch",
            "string",
            "How resourceVersion is applied.",
        ),
        query_param(
            "sendInitialEvents",
            "boolean",
            "Start a watch with synthetic ADDED events.",
        ),
        query_param(
            "timeoutSeconds",
            "integer",
            "Timeout for the list/watch call.",
        ),
        query_param("watch", "boolean", "Watch for changes instead of listing."),
    ]
}

fn delete_params() -> Vec<Value> {
    vec![
        query_param(
            "dryRun",
            "string",
            "When present, indicates that modifications should not be persisted. Valid value: All.",
        ),
        query_param(
            "gracePeriodSeconds",
            "integer",
            "Seconds before the object is deleted.",
        ),
        query_param(
            "propagationPolicy",
            "string",
            "Orphan, Background or Foreground.",
        ),
        pretty_param(),
    ]
}

/// Component name of a kind's schema, following the real server's naming:
/// `io.k8s.api.<pkg>.<v>.<Kind>` for built-ins, reversed group for CRDs.
fn definition_name(group: &str, version: &str, kind: &str, builtin: bool) -> String {
    if !builtin {
        let reversed: Vec<&str> = group.split('.').rev().collect();
        return format!("{}.{version}.{kind}", reversed.join("."));
    }
    match group {
        "" => format!("io.k8s.api.core.{version}.{kind}"),
        "apiextensions.k8s.io" => {
            format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}.{kind}")
        }
        _ => {
            let package = group.split('.').next().unwrap_or(group);
            format!("io.k8s.api.{package}.{version}.{kind}")
        }
    }
}

/// The `AppsV1` / `CoreV1` / `RbacAuthorizationV1` part of operation ids.
fn operation_group(group: &str, version: &str) -> String {
    let group_part: String = if group.is_empty() {
        "Core".into()
    } else {
        group
            .trim_end_matches(".k8s.io")
            .split(['.', '-'])
            .map(capitalize)
            .collect()
    };
    format!("{group_part}{}", capitalize(version))
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn openapi_v3_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

// ---------------------------------------------------------------------------
// Grouping helpers
// ---------------------------------------------------------------------------

fn group_version_string(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// `autoscaling/v1` → (`autoscaling`, `v1`); `v1` → (``, `v1`).
fn split_group_version(gv: &str) -> (&str, &str) {
    gv.split_once('/').unwrap_or(("", gv))
}

/// Resources of one group-version, sorted by plural as the server lists them.
fn resources_in<'a>(
    resources: &'a [ResourceInfo],
    group: &str,
    version: &str,
) -> Vec<&'a ResourceInfo> {
    let mut out: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    out.sort_by(|a, b| a.plural.cmp(&b.plural));
    out
}

/// Non-core groups in priority order: built-in groups as they appear, then
/// the others (from CRDs) by name.
fn named_groups(resources: &[ResourceInfo]) -> Vec<&str> {
    let mut groups: Vec<&str> = Vec::new();
    for r in resources {
        if !r.group.is_empty() && !groups.contains(&r.group.as_str()) {
            groups.push(&r.group);
        }
    }
    let rank = |group: &str| -> (bool, Option<usize>, String) {
        if is_builtin_group(group) {
            (
                false,
                groups.iter().position(|g| *g == group),
                String::new(),
            )
        } else {
            (true, None, group.to_string())
        }
    };
    let mut ordered = groups.clone();
    ordered.sort_by_key(|g| rank(g));
    ordered
}

/// Versions served in a group, most preferred first.
fn group_versions<'a>(resources: &'a [ResourceInfo], group: &str) -> Vec<&'a str> {
    let mut versions: Vec<&str> = Vec::new();
    for r in resources.iter().filter(|r| r.group == group) {
        if !versions.contains(&r.version.as_str()) {
            versions.push(&r.version);
        }
    }
    versions.sort_by(|a, b| kube_version_cmp(b, a));
    versions
}

/// Every (group, version) served, core first.
fn all_group_versions(resources: &[ResourceInfo]) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    for group in std::iter::once("").chain(named_groups(resources)) {
        for version in group_versions(resources, group) {
            out.push((group, version));
        }
    }
    out
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first;
/// versions not of the `vN[alpha|betaM]` form rank below all and compare
/// in reverse alphabetical order (so ascending sorts put them after).
fn kube_version_cmp(a: &str, b: &str) -> Ordering {
    match (parse_kube_version(a), parse_kube_version(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (None, None) => b.cmp(a),
    }
}

/// (stability, major, minor) where stability is 2 for GA, 1 beta, 0 alpha.
fn parse_kube_version(v: &str) -> Option<(u8, u64, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let major: u64 = rest[..digits].parse().ok()?;
    if major == 0 {
        return None;
    }
    let tail = &rest[digits..];
    if tail.is_empty() {
        return Some((2, major, 0));
    }
    let (stability, number) = if let Some(n) = tail.strip_prefix("beta") {
        (1, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (0, n)
    } else {
        return None;
    };
    let minor: u64 = number.parse().ok()?;
    Some((stability, major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::builtin::builtin_resources;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        APIGroup, APIGroupList, APIResourceList, APIVersions,
    };
    use kube::core::discovery::v2::APIGroupDiscoveryList;

    const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    fn agent_pool(version: &str) -> ResourceInfo {
        ResourceInfo {
            group: "agentdeck.dev".into(),
            version: version.into(),
            kind: "AgentPool".into(),
            plural: "agentpools".into(),
            singular: "agentpool".into(),
            namespaced: true,
            verbs: [
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "create",
                "update",
                "watch",
            ]
            .map(String::from)
            .to_vec(),
            short_names: vec!["ap".into()],
            categories: vec!["all".into()],
            subresources: vec![
                SubresourceInfo {
                    name: "status".into(),
                    kind: "AgentPool".into(),
                    group_version: None,
                    verbs: ["get", "patch", "update"].map(String::from).to_vec(),
                },
                SubresourceInfo {
                    name: "scale".into(),
                    kind: "Scale".into(),
                    group_version: Some("autoscaling/v1".into()),
                    verbs: ["get", "patch", "update"].map(String::from).to_vec(),
                },
            ],
        }
    }

    /// Built-ins plus a CRD served in two versions.
    fn served() -> Vec<ResourceInfo> {
        let mut all = builtin_resources();
        all.push(agent_pool("v1alpha1"));
        all.push(agent_pool("v1"));
        all
    }

    fn entry<'a>(list: &'a Value, name: &str) -> &'a Value {
        list["resources"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == name))
            .unwrap_or_else(|| panic!("{name} not listed"))
    }

    fn aggregated_resource_of<'a>(
        list: &'a Value,
        group: &str,
        version: &str,
        plural: &str,
    ) -> &'a Value {
        let items = list["items"].as_array().expect("items");
        let group_item = items
            .iter()
            .find(|i| i["metadata"]["name"].as_str().unwrap_or("") == group)
            .unwrap_or_else(|| panic!("group {group:?} missing"));
        let version_item = group_item["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["version"] == version))
            .unwrap_or_else(|| panic!("{group}/{version} missing"));
        version_item["resources"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["resource"] == plural))
            .unwrap_or_else(|| panic!("{plural} missing"))
    }

    #[test]
    fn version_reports_kubernetes_1_33_in_a_shape_kube_rs_parses() {
        let v = version();
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], "33");
        let info: k8s_openapi::apimachinery::pkg::version::Info =
            serde_json::from_value(v).expect("version::Info");
        assert!(info.git_version.starts_with("v1.33."));
    }

    #[test]
    fn kubectl_accept_header_negotiates_aggregated_v2() {
        let format = negotiate(Some(KUBECTL_ACCEPT));
        assert_eq!(format, DiscoveryFormat::Aggregated(AggregatedVersion::V2));
        assert_eq!(
            format.content_type(),
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
    }

    #[test]
    fn nopeer_profile_first_still_negotiates_aggregated_v2() {
        let accept = format!(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer,{KUBECTL_ACCEPT}"
        );
        assert_eq!(
            negotiate(Some(&accept)),
            DiscoveryFormat::Aggregated(AggregatedVersion::V2)
        );
    }

    #[test]
    fn old_kubectl_asking_only_for_v2beta1_gets_v2beta1() {
        let accept = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        let format = negotiate(Some(accept));
        assert_eq!(
            format,
            DiscoveryFormat::Aggregated(AggregatedVersion::V2Beta1)
        );
        assert_eq!(
            format.content_type(),
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        );
    }

    #[test]
    fn no_accept_header_or_plain_json_negotiates_legacy() {
        for accept in [
            None,
            Some("application/json"),
            Some("*/*"),
            Some("application/vnd.kubernetes.protobuf, application/json"),
            Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
            Some("application/vnd.kubernetes.protobuf"),
        ] {
            let format = negotiate(accept);
            assert_eq!(format, DiscoveryFormat::Legacy, "{accept:?}");
            assert_eq!(format.content_type(), "application/json");
        }
    }

    #[test]
    fn quality_values_outrank_header_order() {
        let accept = "application/json;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        assert_eq!(
            negotiate(Some(accept)),
            DiscoveryFormat::Aggregated(AggregatedVersion::V2)
        );
        let refused = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json";
        assert_eq!(negotiate(Some(refused)), DiscoveryFormat::Legacy);
    }

    #[test]
    fn legacy_api_root_is_api_versions_with_v1() {
        let body = core_root(&served(), DiscoveryFormat::Legacy, "127.0.0.1:6443");
        let parsed: APIVersions = serde_json::from_value(body.clone()).expect("APIVersions");
        assert_eq!(body["kind"], "APIVersions");
        assert_eq!(parsed.versions, vec!["v1".to_string()]);
        assert_eq!(
            parsed.server_address_by_client_cidrs[0].server_address,
            "127.0.0.1:6443"
        );
    }

    #[test]
    fn legacy_group_list_has_builtin_groups_in_priority_order_then_crd_groups() {
        let body = apis_root(&served(), DiscoveryFormat::Legacy);
        assert_eq!(body["kind"], "APIGroupList");
        let parsed: APIGroupList = serde_json::from_value(body).expect("APIGroupList");
        let names: Vec<&str> = parsed.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "apiregistration.k8s.io",
                "apps",
                "events.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "batch",
                "certificates.k8s.io",
                "networking.k8s.io",
                "policy",
                "rbac.authorization.k8s.io",
                "storage.k8s.io",
                "apiextensions.k8s.io",
                "coordination.k8s.io",
                "discovery.k8s.io",
                "metrics.k8s.io",
                "agentdeck.dev",
            ]
        );
        let crd_group = parsed.groups.last().expect("crd group");
        let versions: Vec<&str> = crd_group
            .versions
            .iter()
            .map(|v| v.version.as_str())
            .collect();
        assert_eq!(versions, ["v1", "v1alpha1"]);
        let preferred = crd_group.preferred_version.as_ref().expect("preferred");
        assert_eq!(preferred.group_version, "agentdeck.dev/v1");
    }

    #[test]
    fn api_group_describes_one_group_and_nothing_for_unknown_or_core() {
        let body = api_group(&served(), "apps").expect("apps");
        assert_eq!(body["kind"], "APIGroup");
        let parsed: APIGroup = serde_json::from_value(body).expect("APIGroup");
        assert_eq!(parsed.name, "apps");
        assert_eq!(
            parsed.preferred_version.map(|p| p.group_version),
            Some("apps/v1".to_string())
        );
        assert!(api_group(&served(), "example.com").is_none());
        assert!(api_group(&served(), "").is_none());
    }

    #[test]
    fn core_resource_list_lists_subresources_as_the_real_server_does() {
        let body = api_resource_list(&served(), "", "v1").expect("v1");
        assert_eq!(body["kind"], "APIResourceList");
        assert_eq!(body["groupVersion"], "v1");
        assert!(body.get("apiVersion").is_none());
        let pods = entry(&body, "pods");
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        assert_eq!(pods["singularName"], "pod");
        let status = entry(&body, "pods/status");
        assert_eq!(
            status,
            &json!({
                "name": "pods/status",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get", "patch", "update"],
            })
        );
        let eviction = entry(&body, "pods/eviction");
        assert_eq!(
            (&eviction["group"], &eviction["version"]),
            (&json!("policy"), &json!("v1"))
        );
        assert!(entry(&body, "namespaces/finalize")["group"].is_null());
        let parsed: APIResourceList = serde_json::from_value(body).expect("APIResourceList");
        let names: Vec<&str> = parsed.resources.iter().map(|r| r.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "entries are listed by name");
    }

    #[test]
    fn group_resource_lists_carry_scale_kinds_and_api_version() {
        let apps = api_resource_list(&served(), "apps", "v1").expect("apps/v1");
        assert_eq!(apps["apiVersion"], "v1");
        assert_eq!(apps["groupVersion"], "apps/v1");
        let scale = entry(&apps, "deployments/scale");
        assert_eq!(
            (&scale["group"], &scale["version"], &scale["kind"]),
            (&json!("autoscaling"), &json!("v1"), &json!("Scale"))
        );
        let crd = api_resource_list(&served(), "agentdeck.dev", "v1alpha1").expect("crd gv");
        assert_eq!(entry(&crd, "agentpools")["shortNames"], json!(["ap"]));
        assert_eq!(entry(&crd, "agentpools/status")["kind"], "AgentPool");
        assert!(api_resource_list(&served(), "apps", "v1beta1").is_none());
    }

    #[test]
    fn aggregated_core_has_one_unnamed_group_with_pods_as_in_the_reference() {
        let body = core_root(
            &served(),
            DiscoveryFormat::Aggregated(AggregatedVersion::V2),
            "127.0.0.1:6443",
        );
        assert_eq!(body["kind"], "APIGroupDiscoveryList");
        assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(body["items"].as_array().map(Vec::len), Some(1));
        let pods = aggregated_resource_of(&body, "", "v1", "pods");
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["singularResource"], "pod");
        assert_eq!(
            pods["responseKind"],
            json!({"group": "", "version": "", "kind": "Pod"})
        );
        let eviction = pods["subresources"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["subresource"] == "eviction"))
            .expect("eviction");
        assert_eq!(
            eviction["responseKind"],
            json!({"group": "policy", "version": "v1", "kind": "Eviction"})
        );
        assert_eq!(
            aggregated_resource_of(&body, "", "v1", "namespaces")["scope"],
            "Cluster"
        );
        let parsed: APIGroupDiscoveryList =
            serde_json::from_value(body).expect("kube-rs parses it");
        assert_eq!(
            parsed.items[0].versions[0].freshness.as_deref(),
            Some("Current")
        );
    }

    #[test]
    fn aggregated_apis_lists_builtins_and_crd_resources_with_their_response_kinds() {
        let body = aggregated_apis(&served(), AggregatedVersion::V2Beta1);
        assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let deployments = aggregated_resource_of(&body, "apps", "v1", "deployments");
        assert_eq!(deployments["shortNames"], json!(["deploy"]));
        assert_eq!(deployments["categories"], json!(["all"]));
        let subs: Vec<&str> = deployments["subresources"]
            .as_array()
            .expect("subresources")
            .iter()
            .filter_map(|s| s["subresource"].as_str())
            .collect();
        assert_eq!(subs, ["scale", "status"]);
        assert_eq!(
            deployments["subresources"][0]["responseKind"],
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
        );
        let crds = aggregated_resource_of(
            &body,
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
        );
        assert_eq!(crds["shortNames"], json!(["crd", "crds"]));
        let pools = aggregated_resource_of(&body, "agentdeck.dev", "v1alpha1", "agentpools");
        assert_eq!(
            pools["responseKind"],
            json!({"group": "agentdeck.dev", "version": "v1alpha1", "kind": "AgentPool"})
        );
        assert_eq!(
            pools["subresources"][1]["responseKind"],
            json!({"group": "agentdeck.dev", "version": "v1alpha1", "kind": "AgentPool"})
        );
        assert!(
            aggregated_resource_of(&body, "events.k8s.io", "v1", "events")["responseKind"]["kind"]
                == "Event"
        );
        let parsed: APIGroupDiscoveryList =
            serde_json::from_value(body).expect("kube-rs parses it");
        assert!(
            parsed
                .items
                .iter()
                .flat_map(|g| &g.versions)
                .all(|v| v.freshness.as_deref() == Some("Current"))
        );
        let crd_group = parsed
            .items
            .iter()
            .find(|g| g.metadata.as_ref().and_then(|m| m.name.as_deref()) == Some("agentdeck.dev"))
            .expect("crd group");
        let versions: Vec<&str> = crd_group
            .versions
            .iter()
            .filter_map(|v| v.version.as_deref())
            .collect();
        assert_eq!(versions, ["v1", "v1alpha1"]);
    }

    #[test]
    fn kubernetes_versions_sort_ga_then_beta_then_alpha_then_others() {
        let mut versions = vec![
            "v1alpha1", "foo", "v1beta2", "v2", "v1", "v1beta1", "v10", "v2alpha1", "bar",
        ];
        versions.sort_by(|a, b| kube_version_cmp(b, a));
        assert_eq!(
            versions,
            [
                "v10", "v2", "v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha1", "bar", "foo"
            ]
        );
    }

    #[test]
    fn openapi_root_points_at_every_group_version_with_a_content_hash() {
        let all = served();
        let root = openapi_v3_root(&all);
        let paths = root["paths"].as_object().expect("paths");
        for key in [
            "api/v1",
            "apis/apps/v1",
            "apis/agentdeck.dev/v1",
            "apis/agentdeck.dev/v1alpha1",
        ] {
            assert!(paths.contains_key(key), "{key} missing");
        }
        assert_eq!(paths.len(), 18);
        let doc = openapi_v3_group_version(&all, "apps", "v1").expect("apps/v1");
        assert_eq!(
            paths["apis/apps/v1"]["serverRelativeURL"],
            format!("/openapi/v3/apis/apps/v1?hash={}", openapi_v3_hash(&doc))
        );
        let fewer = builtin_resources();
        let before = openapi_v3_root(&fewer);
        assert_eq!(before["paths"]["apis/apps/v1"], paths["apis/apps/v1"]);
        assert!(before["paths"].get("apis/agentdeck.dev/v1").is_none());
    }

    /// What `QueryParamVerifierV3` does: the first PATCH for the GVK decides.
    fn patch_params_for(doc: &Value, group: &str, version: &str, kind: &str) -> Vec<Vec<String>> {
        let gvk = json!({"group": group, "version": version, "kind": kind});
        doc["paths"]
            .as_object()
            .expect("paths")
            .values()
            .filter_map(|item| item.get("patch"))
            .filter(|op| op["x-kubernetes-group-version-kind"] == gvk)
            .map(|op| {
                op["parameters"]
                    .as_array()
                    .expect("parameters")
                    .iter()
                    .filter_map(|p| p["name"].as_str().map(String::from))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_write_operation_declares_field_validation_dry_run_and_field_manager() {
        let all = served();
        for (group, version) in all_group_versions(&all) {
            let doc = openapi_v3_group_version(&all, group, version).expect("doc");
            for (path, item) in doc["paths"].as_object().expect("paths") {
                for method in ["post", "put", "patch"] {
                    let Some(op) = item.get(method) else { continue };
                    let names: Vec<&str> = op["parameters"]
                        .as_array()
                        .expect("parameters")
                        .iter()
                        .filter_map(|p| p["name"].as_str())
                        .collect();
                    for wanted in ["fieldValidation", "dryRun", "fieldManager"] {
                        assert!(names.contains(&wanted), "{method} {path} lacks {wanted}");
                    }
                    assert!(op["x-kubernetes-group-version-kind"]["kind"].is_string());
                }
            }
        }
    }

    #[test]
    fn field_validation_is_found_for_pods_deployments_scale_and_custom_resources() {
        let all = served();
        let core = openapi_v3_group_version(&all, "", "v1").expect("core");
        let pods = patch_params_for(&core, "", "v1", "Pod");
        assert_eq!(pods.len(), 3, "pods, pods/status, pods/ephemeralcontainers");
        assert!(
            pods.iter()
                .all(|p| p.contains(&"fieldValidation".to_string()))
        );
        let apps = openapi_v3_group_version(&all, "apps", "v1").expect("apps");
        assert!(!patch_params_for(&apps, "apps", "v1", "Deployment").is_empty());
        let scale = patch_params_for(&apps, "autoscaling", "v1", "Scale");
        assert_eq!(
            scale.len(),
            3,
            "deployments/scale, replicasets/scale and statefulsets/scale"
        );
        let crd = openapi_v3_group_version(&all, "agentdeck.dev", "v1").expect("crd");
        let pools = patch_params_for(&crd, "agentdeck.dev", "v1", "AgentPool");
        assert!(
            !pools.is_empty()
                && pools
                    .iter()
                    .all(|p| p.contains(&"fieldValidation".to_string()))
        );
    }

    #[test]
    fn strategic_merge_patch_is_offered_for_builtins_but_not_for_custom_resources() {
        let all = served();
        let apps = openapi_v3_group_version(&all, "apps", "v1").expect("apps");
        let deployment_patch =
            &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert!(
            deployment_patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_some()
        );
        let crd = openapi_v3_group_version(&all, "agentdeck.dev", "v1").expect("crd");
        let pool_patch = &crd["paths"]["/apis/agentdeck.dev/v1/namespaces/{namespace}/agentpools/{name}"]
            ["patch"];
        let content = pool_patch["requestBody"]["content"]
            .as_object()
            .expect("content");
        assert!(content.contains_key("application/merge-patch+json"));
        assert!(content.contains_key("application/apply-patch+yaml"));
        assert!(!content.contains_key("application/strategic-merge-patch+json"));
    }

    #[test]
    fn component_schemas_carry_no_gvk_so_kubectl_keeps_compiled_in_patch_metadata() {
        let all = served();
        let core = openapi_v3_group_version(&all, "", "v1").expect("core");
        let schemas = core["components"]["schemas"].as_object().expect("schemas");
        assert!(schemas.contains_key("io.k8s.api.core.v1.Pod"));
        assert!(schemas.contains_key("io.k8s.api.policy.v1.Eviction"));
        assert!(
            schemas
                .values()
                .all(|s| s.get("x-kubernetes-group-version-kind").is_none())
        );
        let crd = openapi_v3_group_version(&all, "agentdeck.dev", "v1alpha1").expect("crd");
        assert!(
            crd["components"]["schemas"]
                .get("dev.agentdeck.v1alpha1.AgentPool")
                .is_some()
        );
    }

    #[test]
    fn openapi_paths_follow_the_api_url_layout() {
        let all = served();
        let core = openapi_v3_group_version(&all, "", "v1").expect("core");
        let paths = core["paths"].as_object().expect("paths");
        for path in [
            "/api/v1/namespaces/{namespace}/pods",
            "/api/v1/pods",
            "/api/v1/namespaces/{namespace}/pods/{name}",
            "/api/v1/namespaces/{namespace}/pods/{name}/status",
            "/api/v1/namespaces",
            "/api/v1/namespaces/{name}/finalize",
            "/api/v1/namespaces/{namespace}/bindings",
        ] {
            assert!(paths.contains_key(path), "{path} missing");
        }
        // bindings only accept create: no item path, no list.
        assert!(!paths.contains_key("/api/v1/namespaces/{namespace}/bindings/{name}"));
        assert!(
            paths["/api/v1/namespaces/{namespace}/bindings"]
                .get("get")
                .is_none()
        );
        assert_eq!(
            paths["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]["operationId"],
            "patchCoreV1NamespacedPod"
        );
        assert!(openapi_v3_group_version(&all, "apps", "v2").is_none());
    }

    #[test]
    fn openapi_v2_answers_client_go_with_the_document_in_protobuf() {
        let doc =
            json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": GIT_VERSION}});
        let served = OpenApiV2::new(&doc);
        let (content_type, body) = served.body(Some(OPENAPI_V2_PROTOBUF_ACCEPT));
        assert_eq!(
            content_type,
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        );
        let mut expected = vec![0x0a, 3];
        expected.extend_from_slice(b"2.0");
        expected.extend_from_slice(&[0x12, (2 + 10 + 2 + GIT_VERSION.len()) as u8, 0x0a, 10]);
        expected.extend_from_slice(b"Kubernetes");
        expected.extend_from_slice(&[0x12, GIT_VERSION.len() as u8]);
        expected.extend_from_slice(GIT_VERSION.as_bytes());
        assert_eq!(body.as_ref(), expected.as_slice());
        assert_eq!(
            served.body(Some(OPENAPI_V2_PROTOBUF)).0,
            OPENAPI_V2_PROTOBUF
        );
        for accept in [None, Some("application/json")] {
            let (ct, body) = served.body(accept);
            assert_eq!(ct, "application/json");
            assert_eq!(
                serde_json::from_slice::<Value>(&body).ok(),
                Some(doc.clone())
            );
        }
    }

    #[test]
    fn openapi_v2_json_carries_the_v3_paths_and_schemas_as_swagger_2() {
        let all = served();
        let core = openapi_v3_group_version(&all, "", "v1").expect("core");
        let doc = openapi_v2_document(&[core]);
        assert_eq!(doc["swagger"], "2.0");
        let create = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"];
        assert_eq!(create["parameters"][0]["in"], "body");
        assert_eq!(
            create["parameters"][0]["schema"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.Pod"
        );
        assert!(create["requestBody"].is_null());
        let query = create["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .find(|p| p["name"] == "fieldValidation")
            .expect("fieldValidation");
        assert_eq!(query["type"], "string");
        assert!(doc["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
        assert!(!doc.to_string().contains("#/components/"));
    }
}
