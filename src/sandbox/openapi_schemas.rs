//! Object schemas for the OpenAPI v3 documents, so that `kubectl explain`
//! (which looks a kind up by its `x-kubernetes-group-version-kind` and walks
//! its `$ref`s) works as against a real cluster.
//!
//! Built-in kinds take their schemas from k8s-openapi's `JsonSchema`
//! implementations, whose names are the apiserver's own
//! (`io.k8s.api.core.v1.Pod`); custom resources publish their CRD's
//! `openAPIV3Schema` with `metadata` pointing at ObjectMeta, as the
//! apiextensions server does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::{
    apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
    discovery::v1 as discovery, events::v1 as events, networking::v1 as networking,
    policy::v1 as policy, rbac::v1 as rbac, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::api::Served;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Adds the schema of `group`/`kind` (and what it refers to) to `generator`;
/// false for a kind without one here.
fn add_builtin(generator: &mut SchemaGenerator, group: &str, kind: &str) -> bool {
    macro_rules! add {
        ($t:ty) => {{
            generator.subschema_for::<$t>();
            true
        }};
    }
    match (group, kind) {
        ("", "Pod") => add!(core::Pod),
        ("", "Service") => add!(core::Service),
        ("", "ServiceAccount") => add!(core::ServiceAccount),
        ("", "ConfigMap") => add!(core::ConfigMap),
        ("", "Secret") => add!(core::Secret),
        ("", "Namespace") => add!(core::Namespace),
        ("", "Node") => add!(core::Node),
        ("", "Event") => add!(core::Event),
        ("", "Endpoints") => add!(core::Endpoints),
        ("", "PersistentVolumeClaim") => add!(core::PersistentVolumeClaim),
        ("", "PersistentVolume") => add!(core::PersistentVolume),
        ("", "ReplicationController") => add!(core::ReplicationController),
        ("storage.k8s.io", "StorageClass") => add!(storage::StorageClass),
        ("storage.k8s.io", "CSIDriver") => add!(storage::CSIDriver),
        ("storage.k8s.io", "CSINode") => add!(storage::CSINode),
        ("storage.k8s.io", "CSIStorageCapacity") => add!(storage::CSIStorageCapacity),
        ("storage.k8s.io", "VolumeAttachment") => add!(storage::VolumeAttachment),
        ("", "ComponentStatus") => add!(core::ComponentStatus),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            add!(k8s_openapi::api::certificates::v1::CertificateSigningRequest)
        }
        ("apiregistration.k8s.io", "APIService") => {
            add!(k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService)
        }
        ("apps", "Deployment") => add!(apps::Deployment),
        ("apps", "ReplicaSet") => add!(apps::ReplicaSet),
        ("apps", "StatefulSet") => add!(apps::StatefulSet),
        ("apps", "DaemonSet") => add!(apps::DaemonSet),
        ("batch", "Job") => add!(batch::Job),
        ("batch", "CronJob") => add!(batch::CronJob),
        ("coordination.k8s.io", "Lease") => add!(coordination::Lease),
        ("discovery.k8s.io", "EndpointSlice") => add!(discovery::EndpointSlice),
        ("events.k8s.io", "Event") => add!(events::Event),
        ("networking.k8s.io", "NetworkPolicy") => add!(networking::NetworkPolicy),
        ("networking.k8s.io", "Ingress") => add!(networking::Ingress),
        ("policy", "PodDisruptionBudget") => add!(policy::PodDisruptionBudget),
        ("rbac.authorization.k8s.io", "Role") => add!(rbac::Role),
        ("rbac.authorization.k8s.io", "RoleBinding") => add!(rbac::RoleBinding),
        ("rbac.authorization.k8s.io", "ClusterRole") => add!(rbac::ClusterRole),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => add!(rbac::ClusterRoleBinding),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            add!(apiextensions::CustomResourceDefinition)
        }
        _ => false,
    }
}

/// The built-in definitions of one group/version, computed once.
fn builtin_definitions(group: &str, version: &str, kinds: &[String]) -> Arc<Map<String, Value>> {
    type Cache = Mutex<HashMap<String, Arc<Map<String, Value>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = format!("{group}/{version}:{}", kinds.join(","));
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(defs) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Arc::clone(defs);
    }
    let mut generator = SchemaSettings::openapi3().into_generator();
    for kind in kinds {
        add_builtin(&mut generator, group, kind);
    }
    let mut defs = generator.take_definitions(true);
    add_patch_extensions(&mut defs);
    let defs = Arc::new(defs);
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, Arc::clone(&defs));
    defs
}

/// Marks the fields whose strategic-merge strategy is not the default, as
/// the apiserver's documents do: kubectl's client-side apply computes its
/// patch from these (a list without a merge key is replaced whole, so
/// without them removing a container or an env entry from a file would not
/// remove it from the object).
fn add_patch_extensions(defs: &mut Map<String, Value>) {
    for ext in crate::plan::strategic_merge::patch_extensions() {
        let Some(property) = defs
            .get_mut(&ext.definition)
            .and_then(|d| d.get_mut("properties"))
            .and_then(|p| p.get_mut(ext.field))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        property.insert("x-kubernetes-patch-strategy".into(), json!(ext.strategy));
        if let Some(key) = ext.merge_key {
            property.insert("x-kubernetes-patch-merge-key".into(), json!(key));
        }
    }
}

fn object_meta_definitions() -> Map<String, Value> {
    let mut generator = SchemaSettings::openapi3().into_generator();
    generator.subschema_for::<ObjectMeta>();
    let mut defs = generator.take_definitions(true);
    add_patch_extensions(&mut defs);
    defs
}

/// Fills `doc`'s `components.schemas` with real object schemas for the
/// kinds of `group`/`version` in `served`, each tagged with its
/// group/version/kind.
pub fn publish(doc: &mut Value, served: &[Served], group: &str, version: &str) {
    let in_gv: Vec<&Served> = served
        .iter()
        .filter(|s| s.info.group == group && s.info.version == version)
        .collect();
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let builtin_kinds: Vec<String> = in_gv
        .iter()
        .filter(|s| s.crd.is_none())
        .map(|s| s.info.kind.clone())
        .collect();
    if !builtin_kinds.is_empty() {
        for (name, schema) in builtin_definitions(group, version, &builtin_kinds).iter() {
            schemas.insert(name.clone(), schema.clone());
        }
    }
    if in_gv.iter().any(|s| s.crd.is_some()) {
        for (name, schema) in object_meta_definitions() {
            schemas.entry(name).or_insert(schema);
        }
    }
    for s in &in_gv {
        let name = top_name(s);
        let schema = match &s.crd {
            Some(extras) => {
                let mut schema = extras
                    .schema
                    .clone()
                    .unwrap_or_else(|| json!({"type": "object"}));
                // As the apiextensions server publishes a CRD's schema:
                // with the type meta every object has (kubectl validates a
                // `kind: List` file's items against it) and standard metadata.
                schema["properties"]["apiVersion"] = json!({"type": "string",
                    "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"});
                schema["properties"]["kind"] = json!({"type": "string",
                    "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"});
                schema["properties"]["metadata"] =
                    json!({"$ref": format!("#/components/schemas/{OBJECT_META}")});
                schema
            }
            None => match schemas.get(&name) {
                Some(v) => v.clone(),
                None => continue,
            },
        };
        let mut schema = schema;
        schema["x-kubernetes-group-version-kind"] =
            json!([{"group": group, "version": version, "kind": s.info.kind}]);
        schemas.insert(name, schema);
    }
}

/// Drops from `obj` (a whole built-in object of `group`/`version`/`kind`, as
/// the client sent it) every field its schema does not know, as the
/// apiserver's typed decoder does, and returns their paths in the
/// decoder's spelling (`spec.replicaz`,
/// `spec.template.spec.containers[0].imagez`) for `fieldValidation`. A kind
/// without a schema here, and any part of a schema that is open
/// (`x-kubernetes-preserve-unknown-fields`, or no properties at all), keeps
/// what it was given.
pub fn prune_unknown_fields(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
) -> Vec<String> {
    let defs = all_builtin_definitions();
    let mut unknown = Vec::new();
    if let Some(root) = defs.get(&component_name(group, version, kind, false)) {
        prune(obj, root, defs, "", &mut unknown);
    }
    unknown
}

/// Every built-in kind's definitions, generated once per process (tens of
/// milliseconds in a debug build, which a first write should not pay).
pub(crate) fn all_builtin_definitions() -> &'static Map<String, Value> {
    static ALL: OnceLock<Map<String, Value>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut generator = SchemaSettings::openapi3().into_generator();
        for r in super::builtin::builtin_resources() {
            add_builtin(&mut generator, &r.group, &r.kind);
        }
        generator.take_definitions(true)
    })
}

/// Generates the built-in schemas on a background thread, so that the
/// sandbox's first writes do not wait for them.
pub fn warm_up() {
    std::thread::spawn(|| {
        all_builtin_definitions();
    });
}

/// Follows `$ref` (bare, or wrapped in a one-element `allOf` as schemars
/// and the apiserver's v3 documents write a described reference).
fn resolve<'a>(mut schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    for _ in 0..8 {
        let target = schema
            .get("$ref")
            .or_else(|| match schema.get("allOf").and_then(Value::as_array) {
                Some(all) if all.len() == 1 => all[0].get("$ref"),
                _ => None,
            })
            .and_then(Value::as_str)
            .and_then(|r| r.rsplit('/').next())
            .and_then(|name| defs.get(name));
        match target {
            Some(t) => schema = t,
            None => break,
        }
    }
    schema
}

fn prune(
    value: &mut Value,
    schema: &Value,
    defs: &Map<String, Value>,
    path: &str,
    unknown: &mut Vec<String>,
) {
    let schema = resolve(schema, defs);
    match value {
        Value::Object(o) => {
            if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
                return;
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            if props.is_none() && additional.is_none() {
                return;
            }
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                let child_path = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match props.and_then(|p| p.get(&k)).or(additional) {
                    Some(child_schema) => {
                        if let Some(child) = o.get_mut(&k) {
                            prune(child, child_schema, defs, &child_path, unknown);
                        }
                    }
                    None => {
                        o.remove(&k);
                        unknown.push(child_path);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, item_schema, defs, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// The component name the apiserver gives a kind's schema.
fn top_name(s: &Served) -> String {
    component_name(
        &s.info.group,
        &s.info.version,
        &s.info.kind,
        s.crd.is_some(),
    )
}

fn component_name(g: &str, v: &str, k: &str, custom: bool) -> String {
    if custom {
        let reversed: Vec<&str> = g.split('.').rev().collect();
        return format!("{}.{v}.{k}", reversed.join("."));
    }
    match g {
        "" => format!("io.k8s.api.core.{v}.{k}"),
        "apiextensions.k8s.io" => {
            format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{v}.{k}")
        }
        "events.k8s.io" => format!("io.k8s.api.events.{v}.{k}"),
        _ => {
            let package = g.split('.').next().unwrap_or(g);
            format!("io.k8s.api.{package}.{v}.{k}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_kinds_get_k8s_openapi_schemas_under_the_apiservers_names() {
        let defs = builtin_definitions("apps", "v1", &["Deployment".to_string()]);
        let d = &defs["io.k8s.api.apps.v1.Deployment"];
        assert!(d["properties"]["spec"].is_object(), "{d}");
        assert!(defs.contains_key("io.k8s.api.core.v1.PodSpec"));
        assert!(defs.contains_key(OBJECT_META));
    }

    #[test]
    fn unknown_fields_of_built_in_kinds_are_dropped_and_named_as_the_decoder_names_them() {
        let mut deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labelz": {"a": "b"}, "labels": {"app": "web"}},
            "spec": {
                "replicaz": 3,
                "selector": {"matchLabels": {"app": "web"}, "matchLabelz": {}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "a", "image": "nginx"},
                        {"name": "b", "imagez": "nginx", "resources": {"limits": {"cpu": "1"}}},
                    ]},
                },
            },
        });
        let unknown = prune_unknown_fields("apps", "v1", "Deployment", &mut deployment);
        assert_eq!(
            unknown,
            [
                "metadata.labelz",
                "spec.replicaz",
                "spec.selector.matchLabelz",
                "spec.template.spec.containers[1].imagez",
            ]
        );
        assert!(deployment["spec"].get("replicaz").is_none());
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][1]["resources"]["limits"]["cpu"],
            "1"
        );
        assert_eq!(deployment["metadata"]["labels"]["app"], "web");
    }

    #[test]
    fn open_parts_of_a_schema_and_unknown_kinds_keep_everything() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"any-key": "v"}});
        assert!(prune_unknown_fields("", "v1", "ConfigMap", &mut cm).is_empty());
        assert_eq!(cm["data"]["any-key"], "v");
        let mut odd = json!({"whatever": 1});
        assert!(prune_unknown_fields("example.com", "v1", "Thing", &mut odd).is_empty());
        assert_eq!(odd["whatever"], 1);
    }

    #[test]
    fn merging_lists_carry_the_apiservers_patch_extensions() {
        let defs = builtin_definitions("apps", "v1", &["Deployment".to_string()]);
        let containers = &defs["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        let ports = &defs["io.k8s.api.core.v1.Container"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
        let finalizers = &defs[OBJECT_META]["properties"]["finalizers"];
        assert_eq!(finalizers["x-kubernetes-patch-strategy"], "merge");
        assert!(finalizers.get("x-kubernetes-patch-merge-key").is_none());
        let args = &defs["io.k8s.api.core.v1.Container"]["properties"]["args"];
        assert!(args.get("x-kubernetes-patch-strategy").is_none());
    }
}
