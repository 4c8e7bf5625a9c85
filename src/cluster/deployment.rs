//! A Deployment as the controller caches it: its replicas, nothing else.
//!
//! The controller watches each pool's agent Deployment for the whole run
//! and reads only how many replicas it asks for and how many are ready (and
//! the pool label, to know whose it is). A k8s-openapi `Deployment` carries
//! its whole pod template: at 1,000 pools the heap profile put the store at
//! 24 MB, about 24 KB a Deployment, nearly all of it the template's
//! containers, env, probes and volumes. Decoded as a [`CachedDeployment`],
//! the template is skipped while decoding. Field names and types follow
//! k8s-openapi's, so code reads a cached Deployment as it would the whole.
//! What the controller writes it renders from the pool (server-side
//! apply), never from the cached copy.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A Deployment with the fields the controller reads.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CachedDeployment {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<CachedDeploymentSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CachedDeploymentStatus>,
}

/// What is kept of `spec`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CachedDeploymentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// What is kept of `status`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedDeploymentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
}

cached_form!(CachedDeployment, Deployment);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "iac-agent-a", "namespace": "ns", "generation": 4,
                "labels": {"agentdeck.dev/pool": "a"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"agentdeck.dev/pool": "a"}},
                "template": {
                    "metadata": {"labels": {"agentdeck.dev/pool": "a"}},
                    "spec": {"containers": [{
                        "name": "agent", "image": "img:1",
                        "env": [{"name": "A", "value": "1"}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8081}}
                    }]}
                }
            },
            "status": {"observedGeneration": 4, "replicas": 3, "readyReplicas": 2,
                "availableReplicas": 2, "updatedReplicas": 3,
                "conditions": [{"type": "Available", "status": "True"}]}
        })
    }

    #[test]
    fn a_cached_deployment_keeps_its_replicas_and_skips_the_template() {
        let d: CachedDeployment = serde_json::from_value(deployment()).expect("decodes");
        assert_eq!(d.metadata.name.as_deref(), Some("iac-agent-a"));
        assert_eq!(
            d.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("agentdeck.dev/pool"))
                .map(String::as_str),
            Some("a")
        );
        assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(3));
        let status = d.status.as_ref().expect("status");
        assert_eq!(
            (
                status.observed_generation,
                status.replicas,
                status.ready_replicas,
                status.available_replicas,
                status.updated_replicas
            ),
            (Some(4), Some(3), Some(2), Some(2), Some(3))
        );
        let shown = serde_json::to_value(&d).expect("serialises");
        assert!(shown["spec"].get("template").is_none());
        assert!(shown["status"].get("conditions").is_none());
    }

    #[test]
    fn a_whole_deployment_converts_to_the_same_cached_one_the_watch_decodes() {
        let whole: Deployment = serde_json::from_value(deployment()).expect("deployment");
        let decoded: CachedDeployment = serde_json::from_value(deployment()).expect("cached");
        assert_eq!(CachedDeployment::of(&whole), decoded);
    }
}
