//! What the sandbox serves: one entry per resource (built-in or from a CRD),
//! with the facts discovery and the request router need.

use serde::{Deserialize, Serialize};

/// A resource the sandbox serves, as discovery describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Plural resource name used in URLs, e.g. `pods`.
    pub plural: String,
    /// Singular name, e.g. `pod`.
    pub singular: String,
    /// Namespaced (true) or cluster-scoped.
    pub namespaced: bool,
    /// Verbs as discovery lists them (`create`, `delete`, `deletecollection`,
    /// `get`, `list`, `patch`, `update`, `watch`).
    pub verbs: Vec<String>,
    /// Short names (`po`, `deploy` …).
    pub short_names: Vec<String>,
    /// Categories (`all` …).
    pub categories: Vec<String>,
    /// Subresources served (`status`, `scale`, `log`, `eviction`, `ephemeralcontainers`, `binding`…).
    pub subresources: Vec<SubresourceInfo>,
}

/// A subresource of a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubresourceInfo {
    /// Name as in the URL (`status`).
    pub name: String,
    /// Kind answered (`Pod` for status, `Scale` for scale …).
    pub kind: String,
    /// Group/version of that kind when it differs (`autoscaling/v1` for Scale, `policy/v1` for Eviction).
    pub group_version: Option<String>,
    /// Verbs discovery lists for it.
    pub verbs: Vec<String>,
}

impl ResourceInfo {
    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (`pods`, `deployments.apps`), the name CRDs and RBAC use.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The store key of its objects: [`Self::group_resource`], except for a
    /// view of another resource's storage. `events.k8s.io/v1` Events are
    /// core Events, as the apiserver keeps both in one place.
    pub fn storage_resource(&self) -> String {
        if self.is_view() {
            "events".to_owned()
        } else {
            self.group_resource()
        }
    }

    /// Is it a second view of objects stored under another resource?
    pub fn is_view(&self) -> bool {
        self.group == "events.k8s.io" && self.plural == "events"
    }

    /// Does it serve this subresource?
    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s.name == name)
    }
}
