//! Debug pods: a copy of an agent pod whose agent container waits in a
//! shell (or an ephemeral container in the pod itself), labelled with an
//! expiry after which the controller deletes it.
//!
//! A copy keeps the target's service account, volumes, node and env, but
//! none of its labels or owners: a copy carrying the ReplicaSet's labels
//! would be adopted by it and scaled away, or counted as an agent.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EphemeralContainer, Pod, SeccompProfile, SecurityContext,
};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use crate::cli::{DebugMode, DebugProfile};

pub use crate::cluster::debug_pods::{
    ANNOTATION_EXPIRES, DeleteFailed, LABEL_DEBUG_POD, delete_due, expired,
};
/// Label naming the pod a debug pod was copied from.
pub const LABEL_DEBUG_TARGET: &str = "agentdeck.dev/debug-target";
/// Annotation: the agent container's original command (JSON array).
pub const ANNOTATION_ORIGINAL_COMMAND: &str = "agentdeck.dev/original-command";

/// Why a debug pod could not be made, listed or removed.
#[derive(Debug, thiserror::Error)]
pub enum DebugError {
    /// No such pod.
    #[error(
        "pod {pod} not found in namespace {namespace}; `kubectl get pods -n {namespace}` lists the pods"
    )]
    PodNotFound {
        /// Namespace.
        namespace: String,
        /// Pod asked for.
        pod: String,
    },
    /// The pod has no containers to copy.
    #[error("pod {0} has no containers")]
    NoContainer(String),
    /// The API refused or failed.
    #[error("{}", crate::cluster::api_fault(&format!("{action} {name}"), source))]
    Api {
        /// What was being done.
        action: &'static str,
        /// On what.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// `--cleanup POD`: POD is neither a debug pod nor debugged by one.
    #[error(
        "no such debug pod: {pod:?} is neither a debug pod nor the target of one in namespace {namespace}; debug pods there: {}",
        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
    )]
    NoSuchDebugPod {
        /// The name given.
        pod: String,
        /// Where.
        namespace: String,
        /// The debug pods there.
        known: Vec<String>,
    },
    /// `--cleanup POD` where POD only has ephemeral debug containers.
    #[error(
        "pod {pod} has ephemeral debug container(s) {}, which cannot be removed: they end when their --ttl runs out, or with the pod",
        containers.join(", ")
    )]
    EphemeralOnly {
        /// The pod.
        pod: String,
        /// Its ephemeral debug containers.
        containers: Vec<String>,
    },
    /// `--attach` cannot be served.
    #[error("{0}")]
    AttachUnavailable(String),
    /// The shell could not be opened.
    #[error(transparent)]
    Attach(#[from] crate::ops::attach::AttachError),
    /// The shell ended with a non-zero exit code (the process's own).
    #[error("the shell exited with code {0}")]
    ShellExited(i32),
}

impl From<DeleteFailed> for DebugError {
    fn from(e: DeleteFailed) -> Self {
        DebugError::Api {
            action: "delete debug pod",
            name: e.name,
            source: e.source,
        }
    }
}

impl DebugError {
    /// A mistake in what the user gave.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            DebugError::PodNotFound { .. }
                | DebugError::NoSuchDebugPod { .. }
                | DebugError::EphemeralOnly { .. }
                | DebugError::NoContainer(_)
                | DebugError::AttachUnavailable(_)
        ) || matches!(self, DebugError::Attach(e) if e.is_user_error())
    }
}

/// What to make.
#[derive(Debug, Clone)]
pub struct DebugOptions {
    /// Namespace of the target.
    pub namespace: String,
    /// Target pod.
    pub pod: String,
    /// Debug image (default: the agent's own).
    pub image: Option<String>,
    /// Copy or ephemeral.
    pub mode: DebugMode,
    /// Security profile.
    pub profile: DebugProfile,
    /// Lifetime.
    pub ttl: std::time::Duration,
}

/// A debug pod as made or listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugPod {
    /// Its name (for ephemeral mode, the target's).
    pub name: String,
    /// The container to open a shell in.
    pub container: String,
    /// The pod it debugs.
    pub target: String,
    /// When the controller deletes it.
    pub expires_at: Option<Timestamp>,
    /// The agent container's command and args before they were replaced.
    pub original_command: Vec<String>,
    /// Phase, when listed.
    pub phase: Option<String>,
}

/// The container a debug session is about: `agent`, else `worker`, else
/// the first.
pub fn agent_container(spec: &k8s_openapi::api::core::v1::PodSpec) -> Option<&Container> {
    spec.containers
        .iter()
        .find(|c| c.name == "agent")
        .or_else(|| spec.containers.iter().find(|c| c.name == "worker"))
        .or_else(|| spec.containers.first())
}

/// The shell the agent container waits in: it prints one line, then
/// sleeps until the TTL (the controller deletes the pod by then anyway) and
/// exits at once on SIGTERM.
pub fn waiting_shell(ttl: std::time::Duration) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "{WAITING_BANNER}; trap 'exit 0' TERM INT; sleep {} & wait",
            ttl.as_secs().max(1)
        ),
    ]
}

/// How [`waiting_shell`]'s script begins.
const WAITING_BANNER: &str = "echo 'agentdeck debug pod: waiting; exec into it for a shell'";

/// Whether a `sh -c` script is [`waiting_shell`]'s.
pub fn is_waiting_shell(script: &str) -> bool {
    script.starts_with(WAITING_BANNER)
}

fn security_context(profile: DebugProfile) -> Option<SecurityContext> {
    match profile {
        DebugProfile::General => None,
        DebugProfile::Baseline => Some(SecurityContext {
            privileged: Some(false),
            ..SecurityContext::default()
        }),
        DebugProfile::Restricted => Some(SecurityContext {
            run_as_non_root: Some(true),
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..SecurityContext::default()
        }),
        DebugProfile::Netadmin => Some(SecurityContext {
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".into(), "NET_RAW".into()]),
                drop: None,
            }),
            ..SecurityContext::default()
        }),
        DebugProfile::Sysadmin => Some(SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
    }
}

/// Name of a copy: `debug-<pod>-<suffix>`, within the 63 characters a pod
/// name may have.
pub fn copy_name(pod: &str, suffix: &str) -> String {
    let keep = 63 - "debug--".len() - suffix.len();
    let base: String = pod.chars().take(keep).collect();
    format!("debug-{}-{suffix}", base.trim_end_matches(['-', '.']))
}

/// The copy of `target` (pure): see the module documentation.
pub fn plan_copy(
    target: &Pod,
    opts: &DebugOptions,
    now: Timestamp,
    suffix: &str,
) -> Result<(Pod, DebugPod), DebugError> {
    let name = target.name_any();
    let mut spec = target
        .spec
        .clone()
        .ok_or_else(|| DebugError::NoContainer(name.clone()))?;
    let agent_name = agent_container(&spec)
        .map(|c| c.name.clone())
        .ok_or_else(|| DebugError::NoContainer(name.clone()))?;
    let mut original = Vec::new();
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        c.liveness_probe = None;
        c.readiness_probe = None;
        c.startup_probe = None;
        if c.name == agent_name {
            original = c
                .command
                .clone()
                .unwrap_or_default()
                .into_iter()
                .chain(c.args.clone().unwrap_or_default())
                .collect();
            if let Some(image) = &opts.image {
                c.image = Some(image.clone());
            }
            c.command = Some(waiting_shell(opts.ttl));
            c.args = None;
            if let Some(sc) = security_context(opts.profile) {
                c.security_context = Some(sc);
            }
        }
    }
    spec.ephemeral_containers = None;
    spec.restart_policy = Some("Never".into());
    // The copy must not replace the original in a Service's endpoints.
    spec.readiness_gates = None;
    let expires = now
        .checked_add(jiff::SignedDuration::from_secs(
            i64::try_from(opts.ttl.as_secs()).unwrap_or(i64::MAX / 2),
        ))
        .unwrap_or(now);
    let copy = copy_name(&name, suffix);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(copy.clone()),
            namespace: target.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([
                (LABEL_DEBUG_POD.to_owned(), "true".to_owned()),
                (LABEL_DEBUG_TARGET.to_owned(), label_value(&name)),
            ])),
            annotations: Some(BTreeMap::from([
                (ANNOTATION_EXPIRES.to_owned(), expires.to_string()),
                (
                    ANNOTATION_ORIGINAL_COMMAND.to_owned(),
                    serde_json::to_string(&original).unwrap_or_default(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    };
    Ok((
        pod,
        DebugPod {
            name: copy,
            container: agent_name,
            target: name,
            expires_at: Some(expires),
            original_command: original,
            phase: None,
        },
    ))
}

fn label_value(s: &str) -> String {
    s.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_owned()
}

/// Makes a debug pod (or an ephemeral container) for `opts.pod`.
pub async fn create(client: &Client, opts: &DebugOptions) -> Result<DebugPod, DebugError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &opts.namespace);
    let target = api
        .get_opt(&opts.pod)
        .await
        .map_err(|source| DebugError::Api {
            action: "read pod",
            name: opts.pod.clone(),
            source,
        })?
        .ok_or_else(|| DebugError::PodNotFound {
            namespace: opts.namespace.clone(),
            pod: opts.pod.clone(),
        })?;
    match opts.mode {
        DebugMode::Copy => {
            let suffix = format!("{:05x}", fastrand::u32(..) & 0xfffff);
            let (pod, info) = plan_copy(&target, opts, Timestamp::now(), &suffix)?;
            api.create(&PostParams::default(), &pod)
                .await
                .map_err(|source| DebugError::Api {
                    action: "create debug pod",
                    name: info.name.clone(),
                    source,
                })?;
            Ok(info)
        }
        DebugMode::Ephemeral => {
            let spec = target
                .spec
                .as_ref()
                .ok_or_else(|| DebugError::NoContainer(opts.pod.clone()))?;
            let agent =
                agent_container(spec).ok_or_else(|| DebugError::NoContainer(opts.pod.clone()))?;
            let name = format!("debugger-{:05x}", fastrand::u32(..) & 0xfffff);
            let mut existing = spec.ephemeral_containers.clone().unwrap_or_default();
            existing.push(EphemeralContainer {
                name: name.clone(),
                image: opts.image.clone().or_else(|| agent.image.clone()),
                command: Some(waiting_shell(opts.ttl)),
                target_container_name: Some(agent.name.clone()),
                stdin: Some(true),
                tty: Some(true),
                security_context: security_context(opts.profile),
                ..EphemeralContainer::default()
            });
            let patch = serde_json::json!({"spec": {"ephemeralContainers": existing}});
            api.patch_ephemeral_containers(
                &opts.pod,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
            .map_err(|source| DebugError::Api {
                action: "add an ephemeral container to",
                name: opts.pod.clone(),
                source,
            })?;
            Ok(DebugPod {
                name: opts.pod.clone(),
                container: name,
                target: opts.pod.clone(),
                expires_at: None,
                original_command: Vec::new(),
                phase: None,
            })
        }
    }
}

fn info(p: &Pod) -> DebugPod {
    let container = p
        .spec
        .as_ref()
        .and_then(agent_container)
        .map(|c| c.name.clone())
        .unwrap_or_default();
    DebugPod {
        name: p.name_any(),
        container,
        target: p
            .labels()
            .get(LABEL_DEBUG_TARGET)
            .cloned()
            .unwrap_or_default(),
        expires_at: p
            .annotations()
            .get(ANNOTATION_EXPIRES)
            .and_then(|s| s.parse().ok()),
        original_command: p
            .annotations()
            .get(ANNOTATION_ORIGINAL_COMMAND)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default(),
        phase: p.status.as_ref().and_then(|s| s.phase.clone()),
    }
}

/// `pod` when it is a debug pod (labelled as one), else None.
pub async fn existing(
    client: &Client,
    namespace: &str,
    pod: &str,
) -> Result<Option<DebugPod>, DebugError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let found = api.get_opt(pod).await.map_err(|source| DebugError::Api {
        action: "read pod",
        name: pod.to_owned(),
        source,
    })?;
    Ok(found
        .filter(|p| p.labels().get(LABEL_DEBUG_POD).map(String::as_str) == Some("true"))
        .map(|p| info(&p)))
}

/// The debug pods in `namespace`, soonest expiry first.
pub async fn list(client: &Client, namespace: &str) -> Result<Vec<DebugPod>, DebugError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = api
        .list(&ListParams::default().labels(&format!("{LABEL_DEBUG_POD}=true")))
        .await
        .map_err(|source| DebugError::Api {
            action: "list debug pods in",
            name: namespace.to_owned(),
            source,
        })?;
    let mut out: Vec<DebugPod> = pods.items.iter().map(info).collect();
    out.sort_by(|a, b| a.expires_at.cmp(&b.expires_at).then(a.name.cmp(&b.name)));
    Ok(out)
}

/// A debug container added to a running pod (`--mode ephemeral`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EphemeralDebug {
    /// The pod it was added to.
    pub pod: String,
    /// Its name (`debugger-…`).
    pub container: String,
    /// The container whose processes it sees.
    pub target_container: Option<String>,
    /// `running`, `waiting (reason)`, `terminated (reason)` or `-`.
    pub state: String,
    /// When its waiting shell ends: its start plus the `--ttl` it was given.
    pub expires_at: Option<Timestamp>,
}

/// The ephemeral debug containers in `namespace` (those running
/// [`waiting_shell`]), by pod and name. Ephemeral containers cannot be
/// removed: they are listed while their pod lives, ended or not.
pub async fn list_ephemeral(
    client: &Client,
    namespace: &str,
) -> Result<Vec<EphemeralDebug>, DebugError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = api
        .list(&ListParams::default())
        .await
        .map_err(|source| DebugError::Api {
            action: "list pods in",
            name: namespace.to_owned(),
            source,
        })?;
    let mut out: Vec<EphemeralDebug> = pods.items.iter().flat_map(ephemeral_of).collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod).then(a.container.cmp(&b.container)));
    Ok(out)
}

/// `pod`'s ephemeral debug containers.
fn ephemeral_of(pod: &Pod) -> Vec<EphemeralDebug> {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.ephemeral_container_statuses.clone())
        .unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .filter_map(|c| {
            let script = match c.command.as_deref() {
                Some([sh, flag, script]) if sh == "sh" && flag == "-c" => script,
                _ => return None,
            };
            if !is_waiting_shell(script) {
                return None;
            }
            let status = statuses.iter().find(|s| s.name == c.name);
            let state = status.and_then(|s| s.state.as_ref());
            let started = state
                .and_then(|s| s.running.as_ref()?.started_at.as_ref())
                .map(|t| t.0);
            let ttl = script
                .split("sleep ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next()?.parse::<i64>().ok());
            let expires_at = match (started, ttl) {
                (Some(at), Some(secs)) => {
                    at.checked_add(jiff::SignedDuration::from_secs(secs)).ok()
                }
                _ => None,
            };
            let state = match state {
                Some(s) if s.running.is_some() => "running".to_owned(),
                Some(s) if s.terminated.is_some() => format!(
                    "terminated ({})",
                    s.terminated
                        .as_ref()
                        .and_then(|t| t.reason.clone())
                        .unwrap_or_default()
                ),
                Some(s) if s.waiting.is_some() => format!(
                    "waiting ({})",
                    s.waiting
                        .as_ref()
                        .and_then(|w| w.reason.clone())
                        .unwrap_or_default()
                ),
                _ => "-".to_owned(),
            };
            Some(EphemeralDebug {
                pod: pod.name_any(),
                container: c.name.clone(),
                target_container: c.target_container_name.clone(),
                state,
                expires_at,
            })
        })
        .collect()
}

/// Deletes debug pods in `namespace`: all of them, those of `target`, or
/// (with `only_expired`) those past their expiry at `now`. Returns the
/// names deleted.
pub async fn cleanup(
    client: &Client,
    namespace: &str,
    target: Option<&str>,
    only_expired: Option<Timestamp>,
) -> Result<Vec<String>, DebugError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut selector = format!("{LABEL_DEBUG_POD}=true");
    if let Some(t) = target {
        selector.push_str(&format!(",{LABEL_DEBUG_TARGET}={}", label_value(t)));
    }
    let pods = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| DebugError::Api {
            action: "list debug pods in",
            name: namespace.to_owned(),
            source,
        })?;
    if let Some(name) = target
        && pods.items.is_empty()
    {
        // POD may be a debug pod itself (`debug --list` shows their names).
        return match existing(client, namespace, name).await? {
            Some(_) => {
                let pod = api.get(name).await.map_err(|source| DebugError::Api {
                    action: "read pod",
                    name: name.to_owned(),
                    source,
                })?;
                Ok(delete_due(client, &[pod], only_expired).await?)
            }
            None => {
                let ephemeral: Vec<String> = api
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .map(|p| ephemeral_of(&p).into_iter().map(|e| e.container).collect())
                    .unwrap_or_default();
                if ephemeral.is_empty() {
                    Err(DebugError::NoSuchDebugPod {
                        pod: name.to_owned(),
                        namespace: namespace.to_owned(),
                        known: list(client, namespace)
                            .await?
                            .into_iter()
                            .map(|p| p.name)
                            .collect(),
                    })
                } else {
                    Err(DebugError::EphemeralOnly {
                        pod: name.to_owned(),
                        containers: ephemeral,
                    })
                }
            }
        };
    }
    Ok(delete_due(client, &pods.items, only_expired).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn target() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "iac-agent-default-7d9f8-abcde",
                "namespace": "ops",
                "labels": {"agentdeck.dev/pool": "default", "pod-template-hash": "7d9f8"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]
            },
            "spec": {
                "serviceAccountName": "iac-agent-default",
                "nodeName": "node-1",
                "volumes": [{"name": "work", "emptyDir": {}}],
                "containers": [{
                    "name": "agent",
                    "image": "ghcr.io/x/agentdeck:1",
                    "command": ["agentdeck", "agent"],
                    "args": ["--single-run"],
                    "env": [{"name": "POOL_NAME", "value": "default"}],
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}}
                }]
            },
            "status": {"phase": "Running"}
        }))
        .expect("pod")
    }

    fn opts() -> DebugOptions {
        DebugOptions {
            namespace: "ops".into(),
            pod: "iac-agent-default-7d9f8-abcde".into(),
            image: Some("busybox:1.36".into()),
            mode: DebugMode::Copy,
            profile: DebugProfile::General,
            ttl: Duration::from_secs(1800),
        }
    }

    #[test]
    fn a_copy_keeps_account_node_volumes_env_and_waits_in_a_shell() {
        let now: Timestamp = "2026-11-24T08:00:00Z".parse().expect("time");
        let (pod, info) = plan_copy(&target(), &opts(), now, "x1y2z").expect("plans");
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(info.name, "debug-iac-agent-default-7d9f8-abcde-x1y2z");
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some("iac-agent-default")
        );
        assert_eq!(spec.node_name.as_deref(), Some("node-1"));
        assert_eq!(spec.volumes.as_ref().map(Vec::len), Some(1));
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("busybox:1.36"));
        assert_eq!(c.command.as_ref().expect("command")[0], "sh");
        assert!(c.args.is_none() && c.liveness_probe.is_none() && c.readiness_probe.is_none());
        assert_eq!(c.env.as_ref().expect("env")[0].name, "POOL_NAME");
        assert_eq!(
            info.original_command,
            ["agentdeck", "agent", "--single-run"]
        );
        assert_eq!(
            info.expires_at,
            Some("2026-11-24T08:30:00Z".parse().expect("time"))
        );
        let labels = pod.labels();
        assert_eq!(
            labels.get(LABEL_DEBUG_POD).map(String::as_str),
            Some("true")
        );
        assert!(
            !labels.contains_key("agentdeck.dev/pool") && !labels.contains_key("pod-template-hash")
        );
        assert!(pod.metadata.owner_references.is_none());
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn names_stay_within_63_characters() {
        let long = "a".repeat(80);
        let n = copy_name(&long, "abcde");
        assert!(n.len() <= 63, "{n}");
        assert!(n.starts_with("debug-a") && n.ends_with("-abcde"));
    }

    #[test]
    fn profiles_set_the_debug_container_security() {
        let mut o = opts();
        o.profile = DebugProfile::Restricted;
        let (pod, _) = plan_copy(&target(), &o, Timestamp::now(), "s").expect("plans");
        let sc = pod.spec.expect("spec").containers[0]
            .security_context
            .clone()
            .expect("sc");
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        o.profile = DebugProfile::Sysadmin;
        let (pod, _) = plan_copy(&target(), &o, Timestamp::now(), "s").expect("plans");
        assert_eq!(
            pod.spec.expect("spec").containers[0]
                .security_context
                .clone()
                .expect("sc")
                .privileged,
            Some(true)
        );
    }

    #[test]
    fn expiry_is_read_from_the_annotation_and_a_missing_one_counts_as_expired() {
        let now: Timestamp = "2026-11-24T08:00:00Z".parse().expect("time");
        let (pod, _) = plan_copy(&target(), &opts(), now, "s").expect("plans");
        assert!(!expired(&pod, now));
        assert!(expired(&pod, "2026-11-24T08:30:00Z".parse().expect("time")));
        let mut bare = pod.clone();
        bare.metadata.annotations = None;
        assert!(expired(&bare, now));
    }
}
