//! Pool-level objects beside the workload: the agents' settings ConfigMap,
//! Service, ServiceMonitor, NetworkPolicy, PodDisruptionBudget and the
//! agents' RBAC.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicySpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use serde_json::json;

use super::pod::{
    AGENT_CONFIG_KEY, HEALTH_PORT_NAME, METRICS_PATH, agent_settings, scrape_annotations,
};
use super::{
    COMPONENT_AGENT, COMPONENT_TASK, Result, label_value, pool_ids, pool_object_meta,
    selector_labels,
};
use crate::crd::names;
use crate::crd::{AgentPool, GROUP, LABEL_POOL};

/// Cloud metadata services the NetworkPolicy denies: the link-local address
/// every major cloud uses, and AWS's IPv6 endpoint.
const METADATA_V4: &str = "169.254.169.254/32";
const METADATA_V6: &str = "fd00:ec2::254/128";

/// The pool's `agentdeck-agent.yaml`: the agent runtime settings its spec
/// decides, as agent pods read it (see [`super::AGENT_CONFIG_PATH`]).
pub fn agent_config_file(pool: &AgentPool) -> String {
    let settings: serde_json::Map<String, serde_json::Value> = agent_settings(pool)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    // JSON is YAML too, should the YAML writer ever refuse a plain map.
    let body = serde_saphyr::to_string(&settings)
        .unwrap_or_else(|_| serde_json::Value::Object(settings.clone()).to_string());
    format!(
        "# Rendered by agentdeck from AgentPool {}; edit the pool, not this file.\n\
         # AGENTDECK_AGENT_* variables in the pool's env win over it.\n{body}",
        pool.name_any()
    )
}

/// A short, stable hash of [`agent_config_file`] for the pod template
/// annotation (FNV-1a: stable across builds, unlike `DefaultHasher`).
pub fn agent_config_hash(pool: &AgentPool) -> String {
    format!("{:08x}", names::fnv1a32(agent_config_file(pool).as_bytes()))
}

/// ConfigMap `iac-agent-<pool>` holding the pool's `agentdeck-agent.yaml`.
pub fn agent_config_map(pool: &AgentPool) -> Result<ConfigMap> {
    let ids = pool_ids(pool)?;
    Ok(ConfigMap {
        metadata: pool_object_meta(&ids, pool.deployment_name(), COMPONENT_AGENT),
        data: Some(BTreeMap::from([(
            AGENT_CONFIG_KEY.to_owned(),
            agent_config_file(pool),
        )])),
        ..ConfigMap::default()
    })
}

/// Service account the pool's pods run as: the pool's own, else
/// `agentdeck-agent-<pool>` (bounded) which [`agent_rbac`] creates.
pub fn service_account_name(pool: &AgentPool) -> String {
    pool.spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| rbac_name(pool))
}

/// Name of the pool's Role and RoleBinding (and default service account).
pub fn rbac_name(pool: &AgentPool) -> String {
    names::bounded_name("agentdeck-agent-", &pool.name_any())
}

/// Name of the pool's metadata-service NetworkPolicy.
pub fn network_policy_name(pool: &AgentPool) -> String {
    names::bounded_name("agentdeck-no-metadata-", &pool.name_any())
}

/// Name of the PodDisruptionBudget guarding the pool's task pods.
pub fn task_disruption_budget_name(pool: &AgentPool) -> String {
    names::bounded_name("iac-task-", &pool.name_any())
}

/// The Service in front of the agents' health/metrics port (named like the
/// Deployment), for Prometheus and ServiceMonitors.
pub fn agent_service(pool: &AgentPool) -> Result<Service> {
    let ids = pool_ids(pool)?;
    let mut metadata = pool_object_meta(&ids, pool.deployment_name(), COMPONENT_AGENT);
    metadata.annotations = Some(scrape_annotations(pool.spec.health_port));
    Ok(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            selector: Some(selector_labels(&ids.name, COMPONENT_AGENT)),
            ports: Some(vec![ServicePort {
                name: Some(HEALTH_PORT_NAME.to_string()),
                port: pool.spec.health_port,
                target_port: Some(IntOrString::String(HEALTH_PORT_NAME.to_string())),
                protocol: Some("TCP".to_string()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// A prometheus-operator `ServiceMonitor` for the agents' Service, when the
/// pool asks for one. Untyped: its CRD is not ours and may not be installed.
pub fn service_monitor(pool: &AgentPool) -> Result<Option<serde_json::Value>> {
    if !pool.spec.service_monitor {
        return Ok(None);
    }
    let ids = pool_ids(pool)?;
    let metadata = pool_object_meta(&ids, pool.deployment_name(), COMPONENT_AGENT);
    Ok(Some(json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata,
        "spec": {
            "selector": { "matchLabels": selector_labels(&ids.name, COMPONENT_AGENT) },
            "endpoints": [{ "port": HEALTH_PORT_NAME, "path": METRICS_PATH }],
        },
    })))
}

/// When `restrictMetadataService`: egress from every pod of the pool (agents
/// and tasks) to anywhere except the cloud metadata service, which would hand
/// out the node's cloud credentials to any task.
pub fn metadata_network_policy(pool: &AgentPool) -> Result<Option<NetworkPolicy>> {
    if !pool.spec.restrict_metadata_service {
        return Ok(None);
    }
    let ids = pool_ids(pool)?;
    let ip_block = |cidr: &str, except: &str| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.to_string(),
            except: Some(vec![except.to_string()]),
        }),
        ..NetworkPolicyPeer::default()
    };
    Ok(Some(NetworkPolicy {
        metadata: pool_object_meta(&ids, network_policy_name(pool), COMPONENT_AGENT),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some([(LABEL_POOL.to_string(), label_value(&ids.name))].into()),
                match_expressions: None,
            }),
            // Egress only: the policy must not start isolating ingress.
            policy_types: Some(vec!["Egress".to_string()]),
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![
                    ip_block("0.0.0.0/0", METADATA_V4),
                    ip_block("::/0", METADATA_V6),
                    // Some network plugins (Cilium) never match pod IPs with
                    // ipBlocks; without this peer, DNS and in-cluster services
                    // would be cut off too.
                    NetworkPolicyPeer {
                        namespace_selector: Some(LabelSelector::default()),
                        ..NetworkPolicyPeer::default()
                    },
                ]),
                ports: None,
            }]),
            ingress: None,
        }),
    }))
}

/// Busy task pods are not evicted voluntarily (node drains, autoscaler):
/// `maxUnavailable: 0` over the pool's task pods.
pub fn task_disruption_budget(pool: &AgentPool) -> Result<PodDisruptionBudget> {
    let ids = pool_ids(pool)?;
    Ok(PodDisruptionBudget {
        metadata: pool_object_meta(&ids, task_disruption_budget_name(pool), COMPONENT_TASK),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(0)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(&ids.name, COMPONENT_TASK)),
                match_expressions: None,
            }),
            // A task pod that never became ready (image pull failure, stuck
            // runner) runs no task worth protecting and must not block drains.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_string()),
            min_available: None,
        }),
        status: None,
    })
}

/// The agents' identity and least-privilege Role, exactly what the agent
/// runtime calls: list and watch the namespace's tasks and write their status
/// (claims, heartbeats, results); watch its own pool (by name: the Role
/// names it); watch its own pod for the debug and drain annotations (a pod
/// watch by name, which RBAC cannot narrow to a name unknown before the pod
/// exists, so pods of the namespace are readable, never writable); create
/// ConfigMaps (a finished run's output, see [`crate::crd::output`]; no
/// read or write of any). No Secrets, Events, Deployments or Leases. The service account only when
/// the pool did not name its own.
pub fn agent_rbac(pool: &AgentPool) -> Result<(Option<ServiceAccount>, Role, RoleBinding)> {
    let ids = pool_ids(pool)?;
    let name = rbac_name(pool);
    let account = pool
        .spec
        .service_account_name
        .is_none()
        .then(|| ServiceAccount {
            metadata: pool_object_meta(&ids, name.clone(), COMPONENT_AGENT),
            ..ServiceAccount::default()
        });
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    };
    let own_pool = PolicyRule {
        resource_names: Some(vec![ids.name.clone()]),
        ..rule(GROUP, &["agentpools"], &["get", "list", "watch"])
    };
    let role = Role {
        metadata: pool_object_meta(&ids, name.clone(), COMPONENT_AGENT),
        rules: Some(vec![
            rule(GROUP, &["agenttasks"], &["get", "list", "watch"]),
            rule(GROUP, &["agenttasks/status"], &["update", "patch"]),
            own_pool,
            rule("", &["pods"], &["get", "list", "watch"]),
            // A finished run's output, in a ConfigMap of the task's own
            // (`crd::output`): created, never read or changed.
            rule("", &["configmaps"], &["create"]),
        ]),
    };
    let binding = RoleBinding {
        metadata: pool_object_meta(&ids, name.clone(), COMPONENT_AGENT),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name,
        },
        subjects: Some(vec![Subject {
            api_group: None,
            kind: "ServiceAccount".to_string(),
            name: service_account_name(pool),
            namespace: Some(ids.namespace.clone()),
        }]),
    };
    Ok((account, role, binding))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::crd::LABEL_COMPONENT;
    use crate::plan::manifests::fixtures::{NAMESPACE, POOL_UID, plain_pool, pool};

    fn configured_pool() -> AgentPool {
        pool(
            "prod",
            json!({
                "tokenSecretRef": { "name": "agent-token", "key": "svc" },
                "envForwardAllowlist": ["AWS_REGION", "TF_LOG"],
                "concurrency": 3,
                "onStop": "grace-shutdown",
                "healthPort": 9090,
            }),
        )
    }

    /// The agent's configuration as loaded from `file` in `/etc/agentdeck`
    /// (stood in for by a temporary directory) and the variables `env`.
    fn load_agent_config(
        file: Option<&str>,
        env: Vec<(String, String)>,
    ) -> crate::config::AgentConfig {
        let dir = tempfile::tempdir().expect("temp dir");
        if let Some(file) = file {
            std::fs::write(dir.path().join(AGENT_CONFIG_KEY), file).expect("write");
        }
        let sources = crate::config::ConfigSources {
            etc: Some(dir.path().to_path_buf()),
            env,
            ..crate::config::ConfigSources::none()
        };
        crate::config::AgentConfig::load(&sources)
            .expect("the agent loads it")
            .0
    }

    fn injected_settings(pool: &AgentPool) -> Vec<(String, String)> {
        let deployment = super::super::agent_deployment(pool, 1).expect("deployment");
        let spec = deployment.spec.expect("spec").template.spec.expect("pod");
        spec.containers[0]
            .env
            .iter()
            .flatten()
            .filter(|e| e.name.starts_with(super::super::AGENT_SETTING_PREFIX))
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn agent_config_map_holds_the_settings_file_and_is_owned_by_the_pool() {
        let cm = agent_config_map(&configured_pool()).expect("builds");
        assert_eq!(cm.metadata.name.as_deref(), Some("iac-agent-prod"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some(NAMESPACE));
        let owner = &cm.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("AgentPool", POOL_UID, Some(true))
        );
        let data = cm.data.expect("data");
        assert_eq!(data.keys().collect::<Vec<_>>(), [AGENT_CONFIG_KEY]);
        let config = load_agent_config(Some(&data[AGENT_CONFIG_KEY]), vec![]);
        assert_eq!(config.concurrency, 3);
        assert_eq!(config.health_port, 9090);
        assert_eq!(config.stop_mode, crate::crd::StopMode::GraceShutdown);
        assert_eq!(config.env_forward_allowlist, ["AWS_REGION", "TF_LOG"]);
        assert_eq!(
            config.token_file,
            std::path::PathBuf::from(super::super::TOKEN_FILE)
        );
    }

    #[test]
    fn the_settings_file_and_the_injected_variables_say_the_same() {
        for p in [plain_pool(), configured_pool()] {
            let from_file = load_agent_config(Some(&agent_config_file(&p)), vec![]);
            let from_env = load_agent_config(None, injected_settings(&p));
            assert_eq!(from_file, from_env, "pool {:?}", p.spec);
        }
        let configured = load_agent_config(Some(&agent_config_file(&configured_pool())), vec![]);
        assert_ne!(configured, crate::config::AgentConfig::default());
    }

    #[test]
    fn a_variable_in_the_pool_env_wins_over_the_settings_file() {
        let file = agent_config_file(&configured_pool());
        let config = load_agent_config(
            Some(&file),
            vec![("AGENTDECK_AGENT_CONCURRENCY".into(), "7".into())],
        );
        assert_eq!(config.concurrency, 7);
        assert_eq!(
            config.health_port, 9090,
            "the rest still comes from the file"
        );
    }

    #[test]
    fn the_settings_hash_follows_the_settings_only() {
        let base = agent_config_hash(&plain_pool());
        assert_eq!(base.len(), 8);
        assert_eq!(base, agent_config_hash(&plain_pool()), "stable");
        let scaled = pool("prod", json!({"minReplicas": 3, "maxReplicas": 9}));
        assert_eq!(agent_config_hash(&scaled), base, "replicas are no setting");
        let busier = pool("prod", json!({"concurrency": 2}));
        assert_ne!(agent_config_hash(&busier), base);
    }

    #[test]
    fn service_fronts_the_agents_health_port_under_the_deployment_name() {
        let service = agent_service(&pool("prod", json!({ "healthPort": 9100 }))).expect("builds");
        assert_eq!(service.metadata.name.as_deref(), Some("iac-agent-prod"));
        let annotations = service.metadata.annotations.clone().expect("annotations");
        assert_eq!(annotations["prometheus.io/scrape"], "true");
        assert_eq!(annotations["prometheus.io/port"], "9100");
        assert_eq!(annotations["prometheus.io/path"], "/metrics");
        let spec = service.spec.expect("spec");
        let selector = spec.selector.expect("selector");
        assert_eq!(selector.len(), 2);
        assert_eq!(selector[LABEL_POOL], "prod");
        assert_eq!(selector[LABEL_COMPONENT], "agent");
        let port = &spec.ports.expect("ports")[0];
        assert_eq!(port.name.as_deref(), Some("health"));
        assert_eq!(port.port, 9100);
        assert_eq!(port.target_port, Some(IntOrString::String("health".into())));
    }

    #[test]
    fn service_monitor_exists_only_when_the_pool_asks_for_it() {
        assert_eq!(service_monitor(&plain_pool()).expect("builds"), None);
        let monitor = service_monitor(&pool("prod", json!({ "serviceMonitor": true })))
            .expect("builds")
            .expect("asked for");
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(monitor["kind"], "ServiceMonitor");
        assert_eq!(monitor["metadata"]["namespace"], NAMESPACE);
        assert_eq!(monitor["metadata"]["ownerReferences"][0]["uid"], POOL_UID);
        assert_eq!(
            monitor["spec"]["endpoints"],
            json!([{ "port": "health", "path": "/metrics" }])
        );
        let service = agent_service(&plain_pool()).expect("builds");
        let service_labels = service.metadata.labels.expect("labels");
        let selector = monitor["spec"]["selector"]["matchLabels"]
            .as_object()
            .expect("matchLabels");
        assert!(!selector.is_empty());
        for (k, v) in selector {
            assert_eq!(
                Some(v.as_str().expect("string")),
                service_labels.get(k).map(String::as_str),
                "{k}"
            );
        }
    }

    #[test]
    fn network_policy_exists_only_when_the_metadata_service_is_restricted() {
        assert!(
            metadata_network_policy(&plain_pool())
                .expect("builds")
                .is_none()
        );
    }

    #[test]
    fn network_policy_denies_only_the_metadata_service_to_every_pod_of_the_pool() {
        let policy =
            metadata_network_policy(&pool("prod", json!({ "restrictMetadataService": true })))
                .expect("builds")
                .expect("restricted");
        let spec = policy.spec.expect("spec");
        let selector = spec
            .pod_selector
            .and_then(|s| s.match_labels)
            .expect("selector");
        assert_eq!(
            selector.len(),
            1,
            "agents and task pods alike: {selector:?}"
        );
        assert_eq!(selector[LABEL_POOL], "prod");
        assert_eq!(spec.policy_types, Some(vec!["Egress".to_string()]));
        assert!(spec.ingress.is_none());
        let rules = spec.egress.expect("egress");
        assert_eq!(rules.len(), 1);
        assert!(rules[0].ports.is_none(), "every port");
        let peers = rules[0].to.clone().expect("peers");
        let blocks: Vec<(String, Vec<String>)> = peers
            .iter()
            .filter_map(|p| p.ip_block.clone())
            .map(|b| (b.cidr, b.except.unwrap_or_default()))
            .collect();
        assert_eq!(
            blocks,
            [
                (
                    "0.0.0.0/0".to_string(),
                    vec!["169.254.169.254/32".to_string()]
                ),
                ("::/0".to_string(), vec!["fd00:ec2::254/128".to_string()]),
            ]
        );
        let in_cluster = peers
            .iter()
            .find(|p| p.ip_block.is_none())
            .expect("in-cluster peer");
        assert_eq!(
            in_cluster.namespace_selector,
            Some(LabelSelector::default())
        );
        assert!(in_cluster.pod_selector.is_none());
    }

    #[test]
    fn task_disruption_budget_allows_no_voluntary_eviction_of_task_pods() {
        let pdb = task_disruption_budget(&plain_pool()).expect("builds");
        assert_eq!(pdb.metadata.name.as_deref(), Some("iac-task-prod"));
        let spec = pdb.spec.expect("spec");
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(0)));
        assert_eq!(spec.min_available, None);
        let selector = spec
            .selector
            .and_then(|s| s.match_labels)
            .expect("selector");
        assert_eq!(selector.len(), 2);
        assert_eq!(selector[LABEL_POOL], "prod");
        assert_eq!(selector[LABEL_COMPONENT], "task");
    }

    #[test]
    fn agent_role_grants_exactly_the_least_privilege_rules() {
        let (_, role, _) = agent_rbac(&plain_pool()).expect("builds");
        type Rule = (Vec<String>, Vec<String>, Vec<String>, Option<Vec<String>>);
        let rules: Vec<Rule> = role
            .rules
            .expect("rules")
            .into_iter()
            .map(|r| {
                assert!(r.non_resource_urls.is_none());
                (
                    r.api_groups.unwrap_or_default(),
                    r.resources.unwrap_or_default(),
                    r.verbs,
                    r.resource_names,
                )
            })
            .collect();
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let read = owned(&["get", "list", "watch"]);
        assert_eq!(
            rules,
            [
                (
                    owned(&["agentdeck.dev"]),
                    owned(&["agenttasks"]),
                    read.clone(),
                    None
                ),
                (
                    owned(&["agentdeck.dev"]),
                    owned(&["agenttasks/status"]),
                    owned(&["update", "patch"]),
                    None
                ),
                // Its own pool only.
                (
                    owned(&["agentdeck.dev"]),
                    owned(&["agentpools"]),
                    read.clone(),
                    Some(owned(&["prod"]))
                ),
                // Read-only: no pod is the agent's to change.
                (owned(&[""]), owned(&["pods"]), read, None),
                // A run's output ConfigMap: made, never read or changed.
                (
                    owned(&[""]),
                    owned(&["configmaps"]),
                    owned(&["create"]),
                    None
                ),
            ]
        );
    }

    #[test]
    fn rbac_creates_and_binds_the_default_service_account() {
        let (account, role, binding) = agent_rbac(&plain_pool()).expect("builds");
        let account = account.expect("default account is created");
        assert_eq!(
            account.metadata.name.as_deref(),
            Some("agentdeck-agent-prod")
        );
        assert_eq!(role.metadata.name.as_deref(), Some("agentdeck-agent-prod"));
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(binding.role_ref.name, "agentdeck-agent-prod");
        assert_eq!(binding.role_ref.api_group, "rbac.authorization.k8s.io");
        let subjects = binding.subjects.expect("subjects");
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, "agentdeck-agent-prod");
        assert_eq!(subjects[0].namespace.as_deref(), Some(NAMESPACE));
    }

    #[test]
    fn a_pool_naming_its_own_service_account_gets_it_bound_but_not_created() {
        let (account, _, binding) = agent_rbac(&pool(
            "prod",
            json!({ "serviceAccountName": "platform-agent" }),
        ))
        .expect("builds");
        assert!(account.is_none());
        assert_eq!(
            binding.subjects.expect("subjects")[0].name,
            "platform-agent"
        );
    }

    #[test]
    fn pool_object_names_stay_valid_for_an_80_character_pool_name() {
        let p = pool(&"p".repeat(80), json!({ "restrictMetadataService": true }));
        for name in [
            rbac_name(&p),
            network_policy_name(&p),
            task_disruption_budget_name(&p),
            service_account_name(&p),
        ] {
            assert!(names::is_dns1123_label(&name), "{name}");
        }
        let policy = metadata_network_policy(&p)
            .expect("builds")
            .expect("restricted");
        let selector = policy
            .spec
            .and_then(|s| s.pod_selector)
            .and_then(|s| s.match_labels)
            .expect("selector");
        assert!(selector[LABEL_POOL].len() <= 63);
    }
}
