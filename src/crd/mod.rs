//! The two custom resources agentdeck defines (group `agentdeck.dev`, version
//! `v1alpha1`), and the names, labels and limits they own. Their validation
//! beyond the schema is [`crate::plan::validate`] (it reads schedules as the
//! planners do).

pub mod names;
pub mod output;
// kube-derive expands repeated `printcolumn`/`shortname` attributes, which clippy
// mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
mod pool;
#[allow(clippy::duplicated_attributes)]
mod task;

pub use pool::*;
pub use task::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Pod annotation: `"true"` makes that one agent drain (finish its task, claim
/// nothing new), as the pool's `spec.drain` does for all of them.
pub const ANNOTATION_DRAIN: &str = "agentdeck.dev/drain";
/// Pod annotation: `"true"` turns on that one agent's debug logs, live, as
/// the pool's `spec.debug` does for all of them.
pub const ANNOTATION_DEBUG: &str = "agentdeck.dev/debug";
/// Pod annotation the ReplicaSet controller reads to pick which pods go
/// first on scale-down (lower goes first).
pub const ANNOTATION_POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// API group of every agentdeck resource.
pub const GROUP: &str = "agentdeck.dev";
/// API version of every agentdeck resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "agentdeck.dev/v1alpha1";

/// Label every object the controller owns carries.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "agentdeck";
/// Label naming the pool an owned object belongs to.
pub const LABEL_POOL: &str = "agentdeck.dev/pool";
/// Label naming the task a Job or pod runs.
pub const LABEL_TASK: &str = "agentdeck.dev/task";
/// Label naming the component (`agent`, `task`, `controller`).
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// Label of every debug pod (`"true"`); the controller keeps no log tails
/// of these.
pub const LABEL_DEBUG_POD: &str = "agentdeck.dev/debug-pod";

/// Largest replica count the CRD accepts (its schema's range for the
/// bounds, holds and capacity windows).
pub const MAX_REPLICAS: i32 = 10_000;

/// Both CRDs, pool first, as `kubectl apply` should receive them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![AgentPool::crd(), AgentTask::crd()]
}
