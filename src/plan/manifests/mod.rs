//! Pure builders for every object the controller creates for a pool and for a
//! task: typed k8s-openapi objects from an [`AgentPool`] / [`AgentTask`] as read
//! from the API (so with name, namespace and uid). No I/O, no clock.
//!
//! Every object carries the agentdeck labels and a controller ownerReference
//! (with `blockOwnerDeletion`) to its AgentPool, or for a task Job to its
//! AgentTask, so deleting the owner cascades.

mod agent;
mod pod;
mod pool;
mod task;

#[cfg(test)]
mod fixtures;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde::Serialize;

use crate::crd::names;
use crate::crd::{
    AgentPool, AgentTask, ExecutionMode, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY,
};

pub use agent::agent_deployment;
pub use pod::{
    AGENT_CONFIG_KEY, AGENT_CONFIG_PATH, AGENT_CONTAINER, AGENT_SETTING_PREFIX,
    ANNOTATION_AGENT_CONFIG_HASH, CA_DIR, CA_FILE, HEALTH_PATH, HEALTH_PORT_NAME, METRICS_PATH,
    SHARED_DIR, TOKEN_DIR, TOKEN_FILE,
};
pub use pool::{
    agent_config_file, agent_config_hash, agent_config_map, agent_rbac, agent_service,
    metadata_network_policy, network_policy_name, rbac_name, service_account_name, service_monitor,
    task_disruption_budget, task_disruption_budget_name,
};
pub use task::{RUNNER_CONTAINER, RUNNER_SCRIPT, TASK_DIR, WORKER_CONTAINER, job_name, task_job};

/// `app.kubernetes.io/name`, the same for every object agentdeck creates.
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
/// Value of [`LABEL_APP_NAME`].
pub const APP_NAME: &str = "agentdeck";
/// [`LABEL_COMPONENT`] of agent pods and the pool-level objects serving them.
pub const COMPONENT_AGENT: &str = "agent";
/// [`LABEL_COMPONENT`] of task Jobs and their pods.
pub const COMPONENT_TASK: &str = "task";

/// Why a manifest could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The object was not read from the API (or was built without a name).
    #[error("{kind} has no metadata.name")]
    MissingName { kind: &'static str },
    /// Owner references need the owner's uid, which only the API assigns.
    #[error(
        "{kind} {name} has no metadata.uid; build manifests from the object as read from the API"
    )]
    MissingUid { kind: &'static str, name: String },
    /// Owned objects live in their owner's namespace, so it must be known.
    #[error("{kind} {name} has no metadata.namespace")]
    MissingNamespace { kind: &'static str, name: String },
    /// Owner references cannot cross namespaces, and a task's pool is in its namespace.
    #[error(
        "AgentTask {task} is in namespace {task_namespace} but was given AgentPool {pool} from namespace {pool_namespace}"
    )]
    NamespaceMismatch {
        task: String,
        task_namespace: String,
        pool: String,
        pool_namespace: String,
    },
    /// Job mode needs an image for the runner container.
    #[error(
        "AgentTask {task} has no runner image: set AgentTask spec.image or AgentPool {pool} spec.taskDefaults.runnerImage"
    )]
    NoRunnerImage { task: String, pool: String },
    /// The strategic merge of the pool's overlay refused it.
    #[error("AgentPool {pool}: spec.podTemplate cannot be merged into the pod template: {source}")]
    PodTemplateMergeFailed {
        pool: String,
        // Boxed so this enum does not depend on the merge module's error type.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The merged template is not a valid PodTemplateSpec.
    #[error("AgentPool {pool}: spec.podTemplate does not give a valid pod template: {source}")]
    PodTemplateInvalid {
        pool: String,
        #[source]
        source: serde_json::Error,
    },
    /// A typed object could not be turned into JSON.
    #[error("{kind} {name} cannot be serialized: {source}")]
    SerializeFailed {
        kind: &'static str,
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Result of the manifest builders.
pub type Result<T, E = ManifestError> = std::result::Result<T, E>;

/// `name` as a label value: label values are capped at 63 characters while
/// pool and task names may be up to 253, so long names are cut with a hash.
/// Selectors on [`LABEL_POOL`] / `agentdeck.dev/task` must use this too.
pub fn label_value(name: &str) -> String {
    names::bounded(name, names::MAX_NAME_LEN)
}

/// Every object for `pool`, with `apiVersion` and `kind` set, in apply order:
/// the identity pods run as first (a pod referencing a missing service
/// account is rejected), the agents' settings ConfigMap (a pod mounting a
/// missing one does not start), then the NetworkPolicy (so no pod of the pool ever
/// runs without it), the Service before the ServiceMonitor selecting it, the
/// disruption budget, and the workload last. Job mode has no standing
/// workload: its Jobs come from [`task_job`] per task.
pub fn pool_objects(pool: &AgentPool, replicas: i32) -> Result<Vec<serde_json::Value>> {
    let mut objects = Vec::new();
    let (account, role, binding) = agent_rbac(pool)?;
    if let Some(account) = account {
        objects.push(to_json(&account)?);
    }
    objects.push(to_json(&role)?);
    objects.push(to_json(&binding)?);
    objects.push(to_json(&agent_config_map(pool)?)?);
    if let Some(policy) = metadata_network_policy(pool)? {
        objects.push(to_json(&policy)?);
    }
    objects.push(to_json(&agent_service(pool)?)?);
    if let Some(monitor) = service_monitor(pool)? {
        objects.push(monitor);
    }
    objects.push(to_json(&task_disruption_budget(pool)?)?);
    if pool.spec.execution_mode == ExecutionMode::Deployment {
        objects.push(to_json(&agent_deployment(pool, replicas)?)?);
    }
    Ok(objects)
}

/// Name, namespace and uid of an owner, all required.
#[derive(Debug, Clone)]
pub(crate) struct OwnerIds {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

fn owner_ids(kind: &'static str, meta: &ObjectMeta) -> Result<OwnerIds> {
    let name = meta
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(ManifestError::MissingName { kind })?;
    let namespace = meta
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ManifestError::MissingNamespace {
            kind,
            name: name.clone(),
        })?;
    let uid =
        meta.uid
            .clone()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| ManifestError::MissingUid {
                kind,
                name: name.clone(),
            })?;
    Ok(OwnerIds {
        name,
        namespace,
        uid,
    })
}

pub(crate) fn pool_ids(pool: &AgentPool) -> Result<OwnerIds> {
    owner_ids("AgentPool", &pool.metadata)
}

pub(crate) fn task_ids(task: &AgentTask) -> Result<OwnerIds> {
    owner_ids("AgentTask", &task.metadata)
}

/// A controller reference that also holds the owner's deletion until this
/// object is gone (foreground deletion then really waits for it).
fn controller_ref<K>(ids: &OwnerIds) -> OwnerReference
where
    K: Resource<DynamicType = ()>,
{
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: ids.name.clone(),
        uid: ids.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The labels every object of a pool carries.
pub(crate) fn labels(pool_name: &str, component: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(pool_name, component);
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    labels.insert(LABEL_APP_NAME.into(), APP_NAME.into());
    labels
}

/// The labels selectors match on: the pool and the component.
pub(crate) fn selector_labels(pool_name: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_POOL.to_string(), label_value(pool_name)),
        (LABEL_COMPONENT.to_string(), component.to_string()),
    ])
}

/// Metadata of an object owned by the pool.
pub(crate) fn pool_object_meta(ids: &OwnerIds, name: String, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(ids.namespace.clone()),
        labels: Some(labels(&ids.name, component)),
        owner_references: Some(vec![controller_ref::<AgentPool>(ids)]),
        ..ObjectMeta::default()
    }
}

pub(crate) fn task_controller_ref(ids: &OwnerIds) -> OwnerReference {
    controller_ref::<AgentTask>(ids)
}

fn to_json<K>(object: &K) -> Result<serde_json::Value>
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + Serialize,
{
    serde_json::to_value(object).map_err(|source| ManifestError::SerializeFailed {
        kind: K::KIND,
        name: object.metadata().name.clone().unwrap_or_default(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::fixtures::{POOL_UID, plain_pool, pool};
    use super::*;

    fn kinds(objects: &[serde_json::Value]) -> Vec<&str> {
        objects
            .iter()
            .map(|o| o["kind"].as_str().expect("kind is set"))
            .collect()
    }

    #[test]
    fn deployment_mode_pool_objects_come_in_apply_order() {
        let objects = pool_objects(&plain_pool(), 2).expect("builds");
        assert_eq!(
            kinds(&objects),
            [
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "Service",
                "PodDisruptionBudget",
                "Deployment"
            ]
        );
        let deployment = objects.last().expect("deployment");
        assert_eq!(deployment["spec"]["replicas"], 2);
    }

    #[test]
    fn job_mode_pool_objects_have_no_deployment() {
        let p = pool("prod", json!({ "executionMode": "job" }));
        let objects = pool_objects(&p, 2).expect("builds");
        assert!(
            !kinds(&objects).contains(&"Deployment"),
            "{:?}",
            kinds(&objects)
        );
        assert!(kinds(&objects).contains(&"PodDisruptionBudget"));
    }

    #[test]
    fn optional_objects_join_the_pool_objects_when_asked_for() {
        let p = pool(
            "prod",
            json!({
                "restrictMetadataService": true,
                "serviceMonitor": true,
                "serviceAccountName": "own"
            }),
        );
        let objects = pool_objects(&p, 0).expect("builds");
        assert_eq!(
            kinds(&objects),
            [
                "Role",
                "RoleBinding",
                "ConfigMap",
                "NetworkPolicy",
                "Service",
                "ServiceMonitor",
                "PodDisruptionBudget",
                "Deployment"
            ]
        );
    }

    #[test]
    fn every_pool_object_has_api_version_labels_and_a_blocking_owner_reference() {
        let p = pool(
            "prod",
            json!({ "restrictMetadataService": true, "serviceMonitor": true }),
        );
        for object in pool_objects(&p, 1).expect("builds") {
            let kind = &object["kind"];
            assert!(
                object["apiVersion"].as_str().is_some_and(|v| !v.is_empty()),
                "{kind}"
            );
            let meta = &object["metadata"];
            assert_eq!(meta["namespace"], "infra", "{kind}");
            let labels = &meta["labels"];
            assert_eq!(
                labels["app.kubernetes.io/managed-by"], "agentdeck",
                "{kind}"
            );
            assert_eq!(labels["app.kubernetes.io/name"], "agentdeck", "{kind}");
            assert_eq!(labels["agentdeck.dev/pool"], "prod", "{kind}");
            assert!(
                matches!(
                    labels["app.kubernetes.io/component"].as_str(),
                    Some("agent" | "task")
                ),
                "{kind}"
            );
            let owners = meta["ownerReferences"].as_array().expect("owned");
            assert_eq!(owners.len(), 1, "{kind}");
            assert_eq!(owners[0]["kind"], "AgentPool", "{kind}");
            assert_eq!(owners[0]["uid"], POOL_UID, "{kind}");
            assert_eq!(owners[0]["controller"], true, "{kind}");
            assert_eq!(owners[0]["blockOwnerDeletion"], true, "{kind}");
        }
    }

    #[test]
    fn pool_objects_of_a_pool_without_uid_are_refused() {
        let mut p = plain_pool();
        p.metadata.uid = None;
        let err = pool_objects(&p, 1).expect_err("no uid");
        assert!(matches!(
            err,
            ManifestError::MissingUid {
                kind: "AgentPool",
                ..
            }
        ));
        assert!(err.to_string().contains("prod"), "{err}");
    }

    #[test]
    fn long_names_are_cut_to_valid_label_values() {
        assert_eq!(label_value("prod"), "prod");
        let cut = label_value(&"p".repeat(200));
        assert_eq!(cut.len(), 63);
        assert!(names::is_dns1123_label(&cut), "{cut}");
    }
}
