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
use std::sync::{Mutex, OnceLock};

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
fn builtin_definitions(group: &str, version: &str, kinds: &[String]) -> Map<String, Value> {
    static CACHE: OnceLock<Mutex<HashMap<String, Map<String, Value>>>> = OnceLock::new();
    let key = format!("{group}/{version}:{}", kinds.join(","));
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(defs) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return defs.clone();
    }
    let mut generator = SchemaSettings::openapi3().into_generator();
    for kind in kinds {
        add_builtin(&mut generator, group, kind);
    }
    let defs = generator.take_definitions(true);
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, defs.clone());
    defs
}

fn object_meta_definitions() -> Map<String, Value> {
    let mut generator = SchemaSettings::openapi3().into_generator();
    generator.subschema_for::<ObjectMeta>();
    generator.take_definitions(true)
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
        for (name, schema) in builtin_definitions(group, version, &builtin_kinds) {
            schemas.insert(name, schema);
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

/// The component name the apiserver gives a kind's schema.
fn top_name(s: &Served) -> String {
    let (g, v, k) = (&s.info.group, &s.info.version, &s.info.kind);
    if s.crd.is_some() {
        let reversed: Vec<&str> = g.split('.').rev().collect();
        return format!("{}.{v}.{k}", reversed.join("."));
    }
    match g.as_str() {
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
}
