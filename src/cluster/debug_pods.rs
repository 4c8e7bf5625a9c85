//! Debug pods as the API holds them: their expiry, and deleting those that
//! are due. `ops::debug` makes them; the controller's sweep deletes them
//! when their time is up; both read this.

use std::borrow::Borrow;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};

pub use crate::crd::LABEL_DEBUG_POD;
/// Annotation: when the debug pod is deleted (RFC 3339).
pub const ANNOTATION_EXPIRES: &str = "agentdeck.dev/expires-at";

/// A debug pod the API would not delete.
#[derive(Debug, thiserror::Error)]
#[error("{}", super::api_fault(&format!("delete debug pod {name}"), source))]
pub struct DeleteFailed {
    /// The pod.
    pub name: String,
    /// Cause.
    #[source]
    pub source: kube::Error,
}

/// Whether a debug pod's expiry has passed (an unreadable expiry counts as
/// expired: nobody would ever delete it otherwise).
pub fn expired(pod: &Pod, now: Timestamp) -> bool {
    pod.annotations()
        .get(ANNOTATION_EXPIRES)
        .and_then(|s| s.parse::<Timestamp>().ok())
        .is_none_or(|t| t <= now)
}

/// Deletes those of `pods` (debug pods) not already going: all of them, or
/// with `only_expired` those past their expiry then. Their names.
pub async fn delete_due<P: Borrow<Pod>>(
    client: &Client,
    pods: &[P],
    only_expired: Option<Timestamp>,
) -> Result<Vec<String>, DeleteFailed> {
    let mut deleted = Vec::new();
    for p in pods.iter().map(Borrow::borrow) {
        if only_expired.is_some_and(|now| !expired(p, now))
            || p.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let name = p.name_any();
        let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace().unwrap_or_default());
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => deleted.push(name),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(DeleteFailed { name, source }),
        }
    }
    Ok(deleted)
}
