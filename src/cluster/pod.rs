//! A pod as the controller caches it: only the fields something reads.
//!
//! The controller's pod store holds every managed pod, for the whole run.
//! k8s-openapi's `Pod` is 2,176 bytes inline and each `Container` 2,120
//! (each `ContainerStatus` 752) however little they hold, because every
//! optional field has its room. Decoded as a [`CachedPod`], an agent pod
//! takes about a quarter of that, and what is not kept (volumes, env,
//! probes, resources …) is skipped while decoding rather than built and
//! dropped. Field names and types follow k8s-openapi's, so code reads a
//! cached pod as it would a `Pod`. Whoever needs the whole pod GETs it (the
//! console's YAML view, debug pods).

use k8s_openapi::api::core::v1::{ContainerPort, ContainerState, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

/// A pod with the fields the controller and the console read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<CachedPodSpec>,
    #[serde(default)]
    pub status: Option<CachedPodStatus>,
}

/// What is kept of `spec`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default)]
    pub containers: Vec<CachedContainer>,
}

/// What is kept of a container: its name, image and ports (the agent's
/// health port is found by name).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CachedContainer {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
}

/// What is kept of `status`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Its `Ready` condition only (see [`ready_only`]).
    #[serde(
        default,
        deserialize_with = "ready_only",
        skip_serializing_if = "Option::is_none"
    )]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<CachedContainerStatus>>,
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A pod's conditions as cached: its `Ready` condition, the only one
/// anything reads from the cache (an agent is ready, a Job's pod is not).
/// A pod has five or six (`PodScheduled`, `Initialized`,
/// `ContainersReady`, `PodReadyToStartContainers`, …), about a kilobyte of
/// each cached pod; the YAML view GETs the whole pod.
fn ready_only<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<PodCondition>>, D::Error> {
    let mut conditions = Option::<Vec<PodCondition>>::deserialize(d)?;
    if let Some(c) = conditions.as_mut() {
        c.retain(|c| c.type_ == "Ready");
        c.shrink_to_fit();
    }
    Ok(conditions)
}

/// What is kept of a container's status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainerStatus {
    pub name: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
}

cached_form!(CachedPod, Pod);

/// Serialised as a Pod object (`apiVersion` and `kind` first), for the
/// YAML shown when the whole pod cannot be fetched.
impl Serialize for CachedPod {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Pod", 5)?;
        st.serialize_field("apiVersion", <Self as k8s_openapi::Resource>::API_VERSION)?;
        st.serialize_field("kind", <Self as k8s_openapi::Resource>::KIND)?;
        st.serialize_field("metadata", &self.metadata)?;
        match &self.spec {
            Some(spec) => st.serialize_field("spec", spec)?,
            None => st.skip_field("spec")?,
        }
        match &self.status {
            Some(status) => st.serialize_field("status", status)?,
            None => st.skip_field("status")?,
        }
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "iac-agent-a-0", "namespace": "ns",
                "labels": {"agentdeck.dev/pool": "a"},
                "annotations": {"agentdeck.dev/drain": "true"},
                "deletionTimestamp": "2026-11-27T05:00:00Z"},
            "spec": {
                "nodeName": "node-1",
                "serviceAccountName": "agent",
                "volumes": [{"name": "kube-api-access", "projected": {"sources": []}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "containers": [{
                    "name": "agent", "image": "img:1",
                    "command": ["agentdeck", "agent"],
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"name": "health", "containerPort": 8081}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8081}},
                    "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run"}],
                    "resources": {"limits": {"cpu": "1"}}
                }]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.7", "startTime": "2026-11-27T04:00:00Z",
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}
                ],
                "hostIP": "192.168.0.1", "qosClass": "Burstable",
                "containerStatuses": [{
                    "name": "agent", "ready": true, "restartCount": 2, "image": "img:1",
                    "imageID": "sha256:x", "containerID": "sandbox://1", "started": true,
                    "state": {"running": {"startedAt": "2026-11-27T04:00:01Z"}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}
                }]
            }
        })
    }

    #[test]
    fn a_cached_pod_keeps_what_is_read_and_skips_the_rest() {
        let pod: CachedPod = serde_json::from_value(agent_pod()).expect("decodes");
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some("iac-agent-a-0"));
        assert!(meta.deletion_timestamp.is_some());
        assert_eq!(
            meta.annotations
                .as_ref()
                .and_then(|a| a.get("agentdeck.dev/drain")),
            Some(&"true".to_owned())
        );
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("node-1"));
        let c = &spec.containers[0];
        assert_eq!(
            (c.name.as_str(), c.image.as_deref()),
            ("agent", Some("img:1"))
        );
        let port = &c.ports.as_ref().expect("ports")[0];
        assert_eq!(
            (port.name.as_deref(), port.container_port),
            (Some("health"), 8081)
        );
        let status = pod.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.7"));
        assert!(status.start_time.is_some());
        let kept: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(kept, ["Ready"], "the one condition read");
        let cs = &status.container_statuses.as_ref().expect("statuses")[0];
        assert_eq!(
            (cs.name.as_str(), cs.ready, cs.restart_count),
            ("agent", true, 2)
        );
        assert!(cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some());

        // What is not kept is not there when shown either.
        let shown = serde_json::to_value(&pod).expect("serialises");
        assert_eq!(shown["apiVersion"], "v1");
        assert_eq!(shown["kind"], "Pod");
        assert_eq!(shown["status"]["podIP"], "10.0.0.7");
        assert_eq!(
            shown["spec"]["containers"][0]["ports"][0]["containerPort"],
            8081
        );
        for gone in ["volumes", "tolerations", "serviceAccountName"] {
            assert!(shown["spec"].get(gone).is_none(), "{gone}");
        }
        for gone in [
            "env",
            "readinessProbe",
            "volumeMounts",
            "resources",
            "command",
        ] {
            assert!(shown["spec"]["containers"][0].get(gone).is_none(), "{gone}");
        }
        assert!(shown["status"].get("hostIP").is_none());
    }

    #[test]
    fn a_whole_pod_converts_to_the_same_cached_pod_the_watch_decodes() {
        let whole: Pod = serde_json::from_value(agent_pod()).expect("pod");
        let decoded: CachedPod = serde_json::from_value(agent_pod()).expect("cached");
        assert_eq!(CachedPod::of(&whole), decoded);
    }

    #[test]
    fn a_cached_pod_is_a_fraction_of_a_pod_inline() {
        let cached = std::mem::size_of::<CachedPod>()
            + std::mem::size_of::<CachedContainer>()
            + std::mem::size_of::<CachedContainerStatus>();
        let whole = std::mem::size_of::<Pod>()
            + std::mem::size_of::<k8s_openapi::api::core::v1::Container>()
            + std::mem::size_of::<k8s_openapi::api::core::v1::ContainerStatus>();
        assert!(cached * 3 < whole, "cached {cached} B, whole {whole} B");
    }
}
