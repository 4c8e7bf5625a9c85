//! Pools and tasks as the API would return them, for the builders' tests.

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use serde_json::{Value, json};

use crate::crd::{AgentPool, AgentTask};

pub const NAMESPACE: &str = "infra";
pub const POOL_UID: &str = "0f3b9c2e-5d1a-4c7e-9a55-2b8f1e6d4c3a";
pub const TASK_UID: &str = "7c1e4a9b-2f3d-4e8a-b6c5-9d0e1f2a3b4c";

/// Pool `name` read from the API, with `spec` (JSON, camelCase) over a bare image.
pub fn pool(name: &str, spec: Value) -> AgentPool {
    let mut full = json!({ "image": "ghcr.io/acme/agent:1.4" });
    if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    let spec = serde_json::from_value(full).expect("fixture pool spec is valid");
    let mut pool = AgentPool::new(name, spec);
    pool.metadata.namespace = Some(NAMESPACE.to_string());
    pool.metadata.uid = Some(POOL_UID.to_string());
    pool
}

pub fn plain_pool() -> AgentPool {
    pool("prod", json!({}))
}

/// Task `name` of pool `prod`, read from the API, with `spec` over the pool name.
pub fn task(name: &str, spec: Value) -> AgentTask {
    let mut full = json!({ "pool": "prod" });
    if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    let spec = serde_json::from_value(full).expect("fixture task spec is valid");
    let mut task = AgentTask::new(name, spec);
    task.metadata.namespace = Some(NAMESPACE.to_string());
    task.metadata.uid = Some(TASK_UID.to_string());
    task
}

pub fn pod_spec(template: &PodTemplateSpec) -> &PodSpec {
    template.spec.as_ref().expect("template has a pod spec")
}

pub fn container<'a>(template: &'a PodTemplateSpec, name: &str) -> &'a Container {
    pod_spec(template)
        .containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

pub fn env<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
    container.env.iter().flatten().find(|e| e.name == name)
}

pub fn env_value<'a>(container: &'a Container, name: &str) -> Option<&'a str> {
    env(container, name).and_then(|e| e.value.as_deref())
}

pub fn env_names(container: &Container) -> Vec<&str> {
    container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect()
}

pub fn mount_path<'a>(container: &'a Container, volume: &str) -> Option<&'a str> {
    container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == volume)
        .map(|m| m.mount_path.as_str())
}
