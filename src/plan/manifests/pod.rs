//! Pod pieces shared by the agent Deployment and the task Jobs: injected
//! environment, volumes, security contexts, probes and the pool's overlay.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, KeyToPath, ObjectFieldSelector, PodSecurityContext, PodTemplateSpec, Probe,
    SeccompProfile, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{ManifestError, OwnerIds, Result};
use crate::crd::AgentPool;
use crate::plan::strategic_merge;

/// Name of the agent container in deployment mode (overlays match it by name).
pub const AGENT_CONTAINER: &str = "agent";
/// Name of the container port serving `/healthz` and `/metrics`.
pub const HEALTH_PORT_NAME: &str = "health";
/// Path of the agents' health endpoint.
pub const HEALTH_PATH: &str = "/healthz";
/// Path of the agents' Prometheus metrics.
pub const METRICS_PATH: &str = "/metrics";
/// Where the `shared` emptyDir is mounted (agent ↔ runner hand-over in job mode).
pub const SHARED_DIR: &str = "/shared";
/// Directory the token Secret is mounted on.
pub const TOKEN_DIR: &str = "/var/run/agentdeck";
/// The agent's service token, as a file (never an environment variable).
pub const TOKEN_FILE: &str = "/var/run/agentdeck/token";
/// Directory the CA bundle ConfigMap is mounted on.
pub const CA_DIR: &str = "/etc/agentdeck/ca/";
/// The CA bundle file, exported as `SSL_CERT_FILE`.
pub const CA_FILE: &str = "/etc/agentdeck/ca/ca.crt";
/// Agent runtime settings travel as `AGENTDECK_AGENT_<UPPER_SNAKE_OF_KEY>`.
pub const AGENT_SETTING_PREFIX: &str = "AGENTDECK_AGENT_";
/// Where agent pods find the pool's rendered `agentdeck-agent.yaml`: a
/// directory of the agent's configuration search.
pub const AGENT_CONFIG_PATH: &str = "/etc/agentdeck/agentdeck-agent.yaml";
/// Key of that file in the pool's ConfigMap.
pub const AGENT_CONFIG_KEY: &str = "agentdeck-agent.yaml";
/// Pod-template annotation holding a hash of the settings file: a change
/// of the file changes the template, which rolls the agents.
pub const ANNOTATION_AGENT_CONFIG_HASH: &str = "agentdeck.dev/agent-config-hash";
pub(super) const AGENT_CONFIG_VOLUME: &str = "agent-config";

pub(super) const SHARED_VOLUME: &str = "shared";
const TMP_VOLUME: &str = "tmp";
const TOKEN_VOLUME: &str = "agent-token";
const CA_VOLUME: &str = "ca-bundle";

/// The uid/gid pods run as unless the overlay says otherwise (distroless
/// `nonroot`). A fixed uid lets `runAsNonRoot` admit images whose USER is root
/// or a name, and the matching fsGroup is what makes the 0400 token file
/// readable: the kubelet then gives it group ownership and group read.
const NON_ROOT_ID: i64 = 65532;

/// Secret files readable by their owner only (the fsGroup adds group read).
const TOKEN_FILE_MODE: i32 = 0o400;

/// The pod annotations telling Prometheus where the metrics are.
pub(super) fn scrape_annotations(port: i32) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("prometheus.io/scrape".to_string(), "true".to_string()),
        ("prometheus.io/port".to_string(), port.to_string()),
        ("prometheus.io/path".to_string(), METRICS_PATH.to_string()),
    ])
}

fn value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: path.to_string(),
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn setting(key: &str, v: impl Into<String>) -> EnvVar {
    value(&format!("{AGENT_SETTING_PREFIX}{key}"), v)
}

/// The agent runtime settings a pool decides, as `agentdeck-agent.yaml`
/// keys and values, in a fixed order. The one place they are derived: the
/// pool's ConfigMap file and the `AGENTDECK_AGENT_*` variables are both
/// rendered from it, so they cannot disagree.
pub(super) fn agent_settings(pool: &AgentPool) -> Vec<(&'static str, serde_json::Value)> {
    let spec = &pool.spec;
    let mut settings = vec![
        ("healthPort", spec.health_port.into()),
        ("stopMode", spec.on_stop.as_str().into()),
        ("drainTimeoutSeconds", spec.drain_timeout_seconds.into()),
        ("graceShutdownSeconds", spec.grace_shutdown_seconds.into()),
        ("concurrency", spec.concurrency.into()),
    ];
    // Omitted when empty: an empty variable would read as a list of one "" name.
    if !spec.env_forward_allowlist.is_empty() {
        settings.push((
            "envForwardAllowlist",
            spec.env_forward_allowlist.clone().into(),
        ));
    }
    if spec.token_secret_ref.is_some() {
        settings.push(("tokenFile", TOKEN_FILE.into()));
    }
    settings
}

/// `drainTimeoutSeconds` → `DRAIN_TIMEOUT_SECONDS`.
fn upper_snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// A setting as an environment value: lists comma-separated.
fn setting_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => {
            items.iter().map(setting_text).collect::<Vec<_>>().join(",")
        }
        other => other.to_string(),
    }
}

/// The environment agentdeck injects into an agent (or task worker)
/// container, before the pool's own `env`.
// `debug` is deliberately not here: it is switched live by watching the pool,
// and an env change would roll every agent.
pub(super) fn injected_agent_env(pool: &AgentPool, ids: &OwnerIds) -> Vec<EnvVar> {
    let spec = &pool.spec;
    let port = spec.health_port.to_string();
    let mut env = vec![
        value("POOL_ID", ids.uid.clone()),
        value("POOL_NAME", ids.name.clone()),
        value("POOL_TYPE", "k8s"),
    ];
    if let Some(endpoint) = &spec.api_endpoint {
        env.push(value("API_ENDPOINT", endpoint.clone()));
    }
    env.extend([
        field("HOST_IP", "status.hostIP"),
        field("POD_IP", "status.podIP"),
        field("IAC_AGENT_NAME", "metadata.name"),
        field("POD_NAMESPACE", "metadata.namespace"),
        value("CC_SERVER_PORT", port.clone()),
        value("SERVER_PORT", port),
    ]);
    env.extend(
        agent_settings(pool)
            .into_iter()
            .map(|(key, v)| setting(&upper_snake(key), setting_text(&v))),
    );
    env.extend(network_env(pool));
    env
}

/// Proxy and CA variables, which both the agent and the task runner need.
pub(super) fn network_env(pool: &AgentPool) -> Vec<EnvVar> {
    let mut env = Vec::new();
    if let Some(proxy) = &pool.spec.proxy {
        // Tools disagree on the case they read (curl only honours lowercase
        // http_proxy), so both spellings are set.
        for (upper, lower, setting) in [
            ("HTTP_PROXY", "http_proxy", &proxy.http_proxy),
            ("HTTPS_PROXY", "https_proxy", &proxy.https_proxy),
            ("NO_PROXY", "no_proxy", &proxy.no_proxy),
        ] {
            if let Some(v) = setting {
                env.push(value(upper, v.clone()));
                env.push(value(lower, v.clone()));
            }
        }
    }
    if pool.spec.ca_bundle.is_some() {
        env.push(value("SSL_CERT_FILE", CA_FILE));
    }
    env
}

/// `injected` with `user` laid over it by name: a user variable replaces an
/// injected one of the same name in place, new ones are appended in order.
pub(super) fn merge_env(mut injected: Vec<EnvVar>, user: &[EnvVar]) -> Vec<EnvVar> {
    for var in user {
        match injected.iter_mut().find(|e| e.name == var.name) {
            Some(slot) => *slot = var.clone(),
            None => injected.push(var.clone()),
        }
    }
    injected
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// Volumes of every pool pod: shared, tmp, and token / CA bundle when set.
pub(super) fn pool_volumes(pool: &AgentPool) -> Vec<Volume> {
    let mut volumes = vec![empty_dir(SHARED_VOLUME), empty_dir(TMP_VOLUME)];
    if let Some(token) = &pool.spec.token_secret_ref {
        volumes.push(Volume {
            name: TOKEN_VOLUME.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(token.name.clone()),
                items: Some(vec![KeyToPath {
                    key: token.key.clone(),
                    path: "token".to_string(),
                    mode: None,
                }]),
                default_mode: Some(TOKEN_FILE_MODE),
                optional: None,
            }),
            ..Volume::default()
        });
    }
    if let Some(ca) = &pool.spec.ca_bundle {
        volumes.push(Volume {
            name: CA_VOLUME.to_string(),
            config_map: Some(ConfigMapVolumeSource {
                name: ca.config_map_name.clone(),
                items: Some(vec![KeyToPath {
                    key: ca.key.clone(),
                    path: "ca.crt".to_string(),
                    mode: None,
                }]),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    volumes
}

/// Mounts of the agent (or worker) container. `/tmp` is an emptyDir because
/// the root filesystem is read-only.
pub(super) fn agent_mounts(pool: &AgentPool) -> Vec<VolumeMount> {
    let mut mounts = vec![
        mount(SHARED_VOLUME, SHARED_DIR, false),
        mount(TMP_VOLUME, "/tmp", false),
    ];
    if pool.spec.token_secret_ref.is_some() {
        mounts.push(mount(TOKEN_VOLUME, TOKEN_DIR, true));
    }
    mounts.extend(ca_mount(pool));
    mounts
}

/// The CA bundle mount, for every container that talks TLS.
pub(super) fn ca_mount(pool: &AgentPool) -> Option<VolumeMount> {
    pool.spec
        .ca_bundle
        .as_ref()
        .map(|_| mount(CA_VOLUME, CA_DIR, true))
}

pub(super) fn shared_mount() -> VolumeMount {
    mount(SHARED_VOLUME, SHARED_DIR, false)
}

/// Pod-level half of the restricted Pod Security profile.
pub(super) fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(NON_ROOT_ID),
        run_as_group: Some(NON_ROOT_ID),
        fs_group: Some(NON_ROOT_ID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}

/// Container-level half of the restricted profile. `read_only_root` is left
/// unset (not `false`) when a container needs to write, so an overlay or a
/// policy engine can still decide.
pub(super) fn container_security_context(read_only_root: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["ALL".to_string()]),
        }),
        read_only_root_filesystem: read_only_root.then_some(true),
        ..SecurityContext::default()
    }
}

pub(super) fn health_port(pool: &AgentPool) -> ContainerPort {
    ContainerPort {
        name: Some(HEALTH_PORT_NAME.to_string()),
        container_port: pool.spec.health_port,
        protocol: Some("TCP".to_string()),
        ..ContainerPort::default()
    }
}

fn health_probe() -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(HEALTH_PATH.to_string()),
            port: IntOrString::String(HEALTH_PORT_NAME.to_string()),
            ..HTTPGetAction::default()
        }),
        ..Probe::default()
    }
}

/// Ready once `/healthz` answers; quick, because it only gates traffic and
/// rollout progress.
pub(super) fn readiness_probe() -> Probe {
    Probe {
        period_seconds: Some(5),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..health_probe()
    }
}

/// Restarts only after about two minutes without an answer: a busy agent may
/// answer slowly, and a restart kills the task it is running.
pub(super) fn liveness_probe() -> Probe {
    Probe {
        initial_delay_seconds: Some(10),
        period_seconds: Some(20),
        timeout_seconds: Some(5),
        failure_threshold: Some(6),
        ..health_probe()
    }
}

/// Time the kubelet gives a stopping pod: a draining agent finishes its task
/// (drain timeout), then the task gets its SIGTERM grace.
pub(super) fn termination_grace_seconds(pool: &AgentPool) -> i64 {
    pool.spec
        .drain_timeout_seconds
        .saturating_add(pool.spec.grace_shutdown_seconds)
}

/// `base` with the pool's `spec.podTemplate` overlaid (strategic merge), and
/// `fixed_labels` put back afterwards: selectors, watches and the pool's
/// disruption budget key on them, so an overlay must not move pods out.
pub(super) fn overlay_pod_template(
    pool: &AgentPool,
    ids: &OwnerIds,
    base: PodTemplateSpec,
    fixed_labels: &BTreeMap<String, String>,
) -> Result<PodTemplateSpec> {
    let mut template = match &pool.spec.pod_template {
        None => base,
        Some(overlay) => {
            let mut json =
                serde_json::to_value(&base).map_err(|source| ManifestError::SerializeFailed {
                    kind: "PodTemplateSpec",
                    name: ids.name.clone(),
                    source,
                })?;
            strategic_merge::merge_pod_template(&mut json, overlay).map_err(|source| {
                ManifestError::PodTemplateMergeFailed {
                    pool: ids.name.clone(),
                    source: Box::new(source),
                }
            })?;
            serde_json::from_value(json).map_err(|source| ManifestError::PodTemplateInvalid {
                pool: ids.name.clone(),
                source,
            })?
        }
    };
    template
        .metadata
        .get_or_insert_with(ObjectMeta::default)
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(fixed_labels.clone());
    Ok(template)
}
