//! The per-pool agent Deployment (deployment mode).

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, KeyToPath, PodSpec, PodTemplateSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::{
    AGENT_CONFIG_KEY, AGENT_CONFIG_PATH, AGENT_CONFIG_VOLUME, AGENT_CONTAINER,
    ANNOTATION_AGENT_CONFIG_HASH, agent_mounts, container_security_context, health_port,
    injected_agent_env, liveness_probe, merge_env, overlay_pod_template, pod_security_context,
    pool_volumes, readiness_probe, scrape_annotations, termination_grace_seconds,
};
use super::{COMPONENT_AGENT, Result, labels, pool_ids, pool_object_meta, selector_labels};
use crate::crd::AgentPool;

/// The Deployment running `replicas` long-lived agents of `pool`.
pub fn agent_deployment(pool: &AgentPool, replicas: i32) -> Result<Deployment> {
    let ids = pool_ids(pool)?;
    let spec = &pool.spec;
    let pod_labels = labels(&ids.name, COMPONENT_AGENT);

    let agent = Container {
        name: AGENT_CONTAINER.to_string(),
        image: Some(spec.image.clone()),
        // The sandbox runs containers whose command starts with `agentdeck`
        // as real processes, so the command is spelled out, not left to the image.
        command: Some(vec!["agentdeck".to_string(), "agent".to_string()]),
        env: Some(merge_env(injected_agent_env(pool, &ids), &spec.env)),
        ports: Some(vec![health_port(pool)]),
        readiness_probe: Some(readiness_probe()),
        liveness_probe: Some(liveness_probe()),
        resources: spec.resources.clone(),
        security_context: Some(container_security_context(true)),
        volume_mounts: Some({
            let mut mounts = agent_mounts(pool);
            mounts.push(agent_config_mount());
            mounts
        }),
        ..Container::default()
    };
    let mut annotations = scrape_annotations(spec.health_port);
    annotations.insert(
        ANNOTATION_AGENT_CONFIG_HASH.to_owned(),
        super::agent_config_hash(pool),
    );
    let mut volumes = pool_volumes(pool);
    volumes.push(agent_config_volume(pool));
    let base = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pod_labels.clone()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![agent],
            service_account_name: Some(super::service_account_name(pool)),
            // Service links would hand every pod `AGENTDECK_*_PORT`-style
            // variables for Services named `agentdeck-…`; nothing reads them.
            enable_service_links: Some(false),
            security_context: Some(pod_security_context()),
            termination_grace_period_seconds: Some(termination_grace_seconds(pool)),
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
    };
    let template = overlay_pod_template(pool, &ids, base, &pod_labels)?;

    Ok(Deployment {
        metadata: pool_object_meta(&ids, pool.deployment_name(), COMPONENT_AGENT),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(&ids.name, COMPONENT_AGENT)),
                match_expressions: None,
            },
            strategy: Some(rolling_strategy()),
            template,
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

/// The pool's settings ConfigMap as a volume.
fn agent_config_volume(pool: &AgentPool) -> Volume {
    Volume {
        name: AGENT_CONFIG_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: pool.deployment_name(),
            items: Some(vec![KeyToPath {
                key: AGENT_CONFIG_KEY.to_owned(),
                path: AGENT_CONFIG_KEY.to_owned(),
                mode: None,
            }]),
            // The controller applies the ConfigMap before the Deployment, but
            // a Deployment applied alone (rendered manifests, tests) must not
            // wait on it: the injected variables carry the same settings.
            optional: Some(true),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The settings file alone at [`AGENT_CONFIG_PATH`] (a subPath, so the CA
/// bundle can still be mounted beside it under `/etc/agentdeck`). A subPath
/// does not follow ConfigMap updates; the hash annotation rolls the pods.
fn agent_config_mount() -> VolumeMount {
    VolumeMount {
        name: AGENT_CONFIG_VOLUME.to_owned(),
        mount_path: AGENT_CONFIG_PATH.to_owned(),
        sub_path: Some(AGENT_CONFIG_KEY.to_owned()),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// Surge one pod at a time and never go below the wanted count.
///
/// A replaced agent leaves the Deployment's count as soon as it starts
/// terminating, then drains in the background for up to drain + grace
/// seconds without claiming new work. So `maxUnavailable: 0` keeps claim
/// capacity intact, and the rollout paces on readiness (seconds), not on
/// drains (up to an hour). `Recreate` would stop every agent at once and
/// leave the pool with none until the slowest drain ended. A larger surge
/// would not speed up the drains, only stack more new pods next to the
/// draining ones, whose requests stay reserved until their task ends: at
/// most one pod's worth of resources above what draining already holds.
fn rolling_strategy() -> DeploymentStrategy {
    DeploymentStrategy {
        type_: Some("RollingUpdate".to_string()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(1)),
            max_unavailable: Some(IntOrString::Int(0)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    use super::*;
    use crate::crd::names::is_dns1123_label;
    use crate::crd::{LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_POOL};
    use crate::plan::manifests::fixtures::{
        POOL_UID, container, env, env_names, env_value, mount_path, plain_pool, pod_spec, pool,
    };
    use crate::plan::manifests::{
        APP_NAME, CA_FILE, LABEL_APP_NAME, ManifestError, TOKEN_DIR, TOKEN_FILE,
    };

    fn template(deployment: &Deployment) -> &PodTemplateSpec {
        &deployment
            .spec
            .as_ref()
            .expect("deployment has a spec")
            .template
    }

    fn agent_of(deployment: &Deployment) -> &Container {
        container(template(deployment), AGENT_CONTAINER)
    }

    fn build(pool: &AgentPool) -> Deployment {
        agent_deployment(pool, 2).expect("deployment builds")
    }

    fn fully_configured_pool() -> AgentPool {
        pool(
            "prod",
            json!({
                "apiEndpoint": "https://iac.example.com",
                "tokenSecretRef": { "name": "agent-token", "key": "svc" },
                "envForwardAllowlist": ["AWS_REGION", "TF_LOG"],
                "proxy": {
                    "httpProxy": "http://proxy:3128",
                    "httpsProxy": "http://proxy:3129",
                    "noProxy": ".svc,10.0.0.0/8"
                },
                "caBundle": { "configMapName": "corp-ca" },
                "onStop": "grace-shutdown",
                "concurrency": 3,
                "env": [{ "name": "EXTRA", "value": "1" }]
            }),
        )
    }

    #[test]
    fn an_80_character_pool_name_gives_names_and_labels_within_63() {
        let name = "p".repeat(80);
        let d = build(&pool(&name, json!({})));
        let deployment_name = d.metadata.name.clone().expect("named");
        assert_eq!(deployment_name.len(), 63);
        assert!(is_dns1123_label(&deployment_name), "{deployment_name}");
        let sa = pod_spec(template(&d))
            .service_account_name
            .clone()
            .expect("service account set");
        assert!(
            sa.len() <= 63 && sa.starts_with("agentdeck-agent-p"),
            "{sa}"
        );
        for labels in [
            d.metadata.labels.as_ref(),
            template(&d)
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref()),
        ] {
            for (key, value) in labels.expect("labelled") {
                assert!(value.len() <= 63, "{key}={value}");
            }
        }
    }

    #[test]
    fn agents_mount_the_pools_settings_file_and_roll_when_it_changes() {
        let d = build(&plain_pool());
        let mount = agent_of(&d)
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == AGENT_CONFIG_PATH)
            .expect("settings file mounted");
        assert_eq!(mount.read_only, Some(true));
        assert_eq!(mount.sub_path.as_deref(), Some(AGENT_CONFIG_KEY));
        let volume = pod_spec(template(&d))
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .expect("volume");
        let source = volume.config_map.as_ref().expect("a ConfigMap volume");
        assert_eq!(source.name, "iac-agent-prod");
        assert_eq!(
            source.optional,
            Some(true),
            "a missing ConfigMap blocks no agent"
        );
        let hash = |d: &Deployment| {
            template(d)
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(ANNOTATION_AGENT_CONFIG_HASH).cloned())
                .expect("hash annotation")
        };
        assert_eq!(
            hash(&d),
            crate::plan::manifests::agent_config_hash(&plain_pool())
        );
        let changed = build(&pool("prod", json!({"drainTimeoutSeconds": 60})));
        assert_ne!(hash(&changed), hash(&d));
    }

    #[test]
    fn deployment_is_named_after_the_pool_with_the_requested_replicas() {
        let d = agent_deployment(&plain_pool(), 5).expect("builds");
        assert_eq!(d.metadata.name.as_deref(), Some("iac-agent-prod"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("infra"));
        assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(5));
    }

    #[test]
    fn deployment_and_pods_carry_the_agentdeck_labels() {
        let d = build(&plain_pool());
        let pod_labels = template(&d)
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone());
        for labels in [d.metadata.labels.clone(), pod_labels] {
            let labels = labels.expect("labelled");
            assert_eq!(labels[LABEL_MANAGED_BY], "agentdeck");
            assert_eq!(labels[LABEL_POOL], "prod");
            assert_eq!(labels[LABEL_APP_NAME], APP_NAME);
            assert_eq!(labels[LABEL_COMPONENT], "agent");
        }
    }

    #[test]
    fn selector_is_the_pool_and_component_and_matches_the_pod_labels() {
        let d = build(&plain_pool());
        let selector = d
            .spec
            .as_ref()
            .and_then(|s| s.selector.match_labels.clone())
            .expect("selector");
        let keys: Vec<&str> = selector.keys().map(String::as_str).collect();
        assert_eq!(keys, [LABEL_POOL, LABEL_COMPONENT]);
        let pod_labels = template(&d)
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .expect("pod labels");
        for (k, v) in &selector {
            assert_eq!(pod_labels.get(k), Some(v), "{k}");
        }
    }

    #[test]
    fn deployment_is_owned_by_its_pool_as_controller() {
        let d = build(&plain_pool());
        let owners = d.metadata.owner_references.expect("owned");
        assert_eq!(owners.len(), 1);
        let owner = &owners[0];
        assert_eq!(owner.api_version, "agentdeck.dev/v1alpha1");
        assert_eq!(owner.kind, "AgentPool");
        assert_eq!(owner.name, "prod");
        assert_eq!(owner.uid, POOL_UID);
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    #[test]
    fn agent_runs_the_pool_image_as_agentdeck_agent() {
        let d = build(&plain_pool());
        let agent = agent_of(&d);
        assert_eq!(agent.image.as_deref(), Some("ghcr.io/acme/agent:1.4"));
        assert_eq!(
            agent.command,
            Some(vec!["agentdeck".to_string(), "agent".to_string()])
        );
    }

    #[test]
    fn injected_env_comes_in_the_documented_order_with_the_pool_env_last() {
        let d = build(&fully_configured_pool());
        assert_eq!(
            env_names(agent_of(&d)),
            [
                "POOL_ID",
                "POOL_NAME",
                "POOL_TYPE",
                "API_ENDPOINT",
                "HOST_IP",
                "POD_IP",
                "IAC_AGENT_NAME",
                "POD_NAMESPACE",
                "CC_SERVER_PORT",
                "SERVER_PORT",
                "AGENTDECK_AGENT_HEALTH_PORT",
                "AGENTDECK_AGENT_STOP_MODE",
                "AGENTDECK_AGENT_DRAIN_TIMEOUT_SECONDS",
                "AGENTDECK_AGENT_GRACE_SHUTDOWN_SECONDS",
                "AGENTDECK_AGENT_CONCURRENCY",
                "AGENTDECK_AGENT_ENV_FORWARD_ALLOWLIST",
                "AGENTDECK_AGENT_TOKEN_FILE",
                "HTTP_PROXY",
                "http_proxy",
                "HTTPS_PROXY",
                "https_proxy",
                "NO_PROXY",
                "no_proxy",
                "SSL_CERT_FILE",
                "EXTRA",
            ]
        );
    }

    #[test]
    fn injected_env_values_describe_the_pool() {
        let d = build(&fully_configured_pool());
        let agent = agent_of(&d);
        for (name, want) in [
            ("POOL_ID", POOL_UID),
            ("POOL_NAME", "prod"),
            ("POOL_TYPE", "k8s"),
            ("API_ENDPOINT", "https://iac.example.com"),
            ("CC_SERVER_PORT", "8080"),
            ("SERVER_PORT", "8080"),
            ("AGENTDECK_AGENT_HEALTH_PORT", "8080"),
            ("AGENTDECK_AGENT_STOP_MODE", "grace-shutdown"),
            ("AGENTDECK_AGENT_DRAIN_TIMEOUT_SECONDS", "3600"),
            ("AGENTDECK_AGENT_GRACE_SHUTDOWN_SECONDS", "60"),
            ("AGENTDECK_AGENT_CONCURRENCY", "3"),
            ("AGENTDECK_AGENT_ENV_FORWARD_ALLOWLIST", "AWS_REGION,TF_LOG"),
            ("AGENTDECK_AGENT_TOKEN_FILE", TOKEN_FILE),
            ("EXTRA", "1"),
        ] {
            assert_eq!(env_value(agent, name), Some(want), "{name}");
        }
    }

    #[test]
    fn pod_identity_comes_from_the_downward_api() {
        let d = build(&plain_pool());
        let agent = agent_of(&d);
        for (name, path) in [
            ("HOST_IP", "status.hostIP"),
            ("POD_IP", "status.podIP"),
            ("IAC_AGENT_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        ] {
            let var = env(agent, name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(var.value, None, "{name}");
            let field = var
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str());
            assert_eq!(field, Some(path), "{name}");
        }
    }

    #[test]
    fn optional_settings_are_left_out_when_the_pool_does_not_set_them() {
        let d = build(&plain_pool());
        let names = env_names(agent_of(&d));
        for absent in [
            "API_ENDPOINT",
            "AGENTDECK_AGENT_ENV_FORWARD_ALLOWLIST",
            "AGENTDECK_AGENT_TOKEN_FILE",
            "HTTP_PROXY",
            "https_proxy",
            "SSL_CERT_FILE",
        ] {
            assert!(!names.contains(&absent), "{absent} in {names:?}");
        }
    }

    #[test]
    fn a_health_port_change_reaches_env_port_probes_and_annotations() {
        let d = build(&pool("prod", json!({ "healthPort": 9100 })));
        let agent = agent_of(&d);
        assert_eq!(env_value(agent, "SERVER_PORT"), Some("9100"));
        assert_eq!(env_value(agent, "CC_SERVER_PORT"), Some("9100"));
        let port = &agent.ports.as_ref().expect("ports")[0];
        assert_eq!(port.name.as_deref(), Some("health"));
        assert_eq!(port.container_port, 9100);
        let annotations = template(&d)
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.clone())
            .expect("annotations");
        assert_eq!(annotations["prometheus.io/scrape"], "true");
        assert_eq!(annotations["prometheus.io/port"], "9100");
        assert_eq!(annotations["prometheus.io/path"], "/metrics");
    }

    #[test]
    fn user_env_overrides_an_injected_variable_in_its_place() {
        let p = pool(
            "prod",
            json!({ "env": [
                { "name": "FIRST", "value": "a" },
                { "name": "POOL_TYPE", "value": "custom" },
                { "name": "HOST_IP", "value": "10.0.0.1" }
            ]}),
        );
        let d = build(&p);
        let agent = agent_of(&d);
        let names = env_names(agent);
        assert_eq!(names.iter().filter(|n| **n == "POOL_TYPE").count(), 1);
        assert_eq!(names[2], "POOL_TYPE");
        assert_eq!(env_value(agent, "POOL_TYPE"), Some("custom"));
        let host_ip = env(agent, "HOST_IP").expect("HOST_IP");
        assert_eq!(host_ip.value.as_deref(), Some("10.0.0.1"));
        assert!(host_ip.value_from.is_none());
        assert_eq!(names.last(), Some(&"FIRST"));
    }

    #[test]
    fn token_is_a_read_only_file_and_never_an_env_var() {
        let d = build(&fully_configured_pool());
        let pod = pod_spec(template(&d));
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.secret.is_some())
            .expect("a secret volume");
        let secret = volume.secret.as_ref().expect("secret source");
        assert_eq!(secret.secret_name.as_deref(), Some("agent-token"));
        assert_eq!(secret.default_mode, Some(0o400));
        let items = secret.items.as_ref().expect("items");
        assert_eq!(
            (items[0].key.as_str(), items[0].path.as_str()),
            ("svc", "token")
        );
        assert_eq!(format!("{TOKEN_DIR}/{}", items[0].path), TOKEN_FILE);

        let agent = agent_of(&d);
        let mount = agent
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == volume.name)
            .expect("token mounted");
        assert_eq!(mount.mount_path, TOKEN_DIR);
        assert_eq!(mount.read_only, Some(true));
        for c in &pod.containers {
            for var in c.env.iter().flatten() {
                let from_secret = var
                    .value_from
                    .as_ref()
                    .and_then(|v| v.secret_key_ref.as_ref());
                assert!(from_secret.is_none(), "{} reads a secret", var.name);
            }
            assert!(c.env_from.is_none());
        }
    }

    #[test]
    fn token_file_is_readable_by_the_non_root_agent_through_its_fs_group() {
        let d = build(&fully_configured_pool());
        let security = pod_spec(template(&d))
            .security_context
            .clone()
            .expect("set");
        assert_eq!(security.fs_group, security.run_as_group);
        assert!(security.fs_group.is_some());
    }

    #[test]
    fn ca_bundle_is_mounted_read_only_and_exported_as_ssl_cert_file() {
        let d = build(&fully_configured_pool());
        let pod = pod_spec(template(&d));
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.config_map.is_some())
            .expect("a configMap volume");
        let cm = volume.config_map.as_ref().expect("configMap source");
        assert_eq!(cm.name, "corp-ca");
        let items = cm.items.as_ref().expect("items");
        assert_eq!(
            (items[0].key.as_str(), items[0].path.as_str()),
            ("ca.crt", "ca.crt")
        );
        let agent = agent_of(&d);
        assert_eq!(mount_path(agent, &volume.name), Some("/etc/agentdeck/ca/"));
        assert_eq!(env_value(agent, "SSL_CERT_FILE"), Some(CA_FILE));
        assert!(CA_FILE.starts_with("/etc/agentdeck/ca/"));
    }

    #[test]
    fn proxy_settings_are_exported_in_both_spellings_and_only_when_set() {
        let d = build(&pool(
            "prod",
            json!({ "proxy": { "httpsProxy": "http://p:1" } }),
        ));
        let agent = agent_of(&d);
        assert_eq!(env_value(agent, "HTTPS_PROXY"), Some("http://p:1"));
        assert_eq!(env_value(agent, "https_proxy"), Some("http://p:1"));
        for absent in ["HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"] {
            assert!(env(agent, absent).is_none(), "{absent}");
        }
    }

    #[test]
    fn agent_has_a_shared_volume_and_a_writable_tmp() {
        let d = build(&plain_pool());
        let agent = agent_of(&d);
        assert_eq!(mount_path(agent, "shared"), Some("/shared"));
        assert_eq!(mount_path(agent, "tmp"), Some("/tmp"));
        let pod = pod_spec(template(&d));
        let shared = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "shared")
            .expect("shared volume");
        assert!(shared.empty_dir.is_some());
    }

    #[test]
    fn pod_and_container_follow_the_restricted_security_profile() {
        let d = build(&plain_pool());
        let pod = pod_spec(template(&d))
            .security_context
            .clone()
            .expect("pod context");
        assert_eq!(pod.run_as_non_root, Some(true));
        assert!(pod.run_as_user.is_some_and(|uid| uid != 0));
        assert_eq!(
            pod.seccomp_profile.map(|p| p.type_).as_deref(),
            Some("RuntimeDefault")
        );
        let c = agent_of(&d)
            .security_context
            .clone()
            .expect("container context");
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(
            c.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        assert_eq!(c.read_only_root_filesystem, Some(true));
        assert_eq!(c.privileged, None);
    }

    #[test]
    fn termination_grace_is_drain_timeout_plus_grace_shutdown() {
        let p = pool(
            "prod",
            json!({ "drainTimeoutSeconds": 900, "graceShutdownSeconds": 45 }),
        );
        let d = build(&p);
        assert_eq!(
            pod_spec(template(&d)).termination_grace_period_seconds,
            Some(945)
        );
        let defaults = build(&plain_pool());
        assert_eq!(
            pod_spec(template(&defaults)).termination_grace_period_seconds,
            Some(3660)
        );
    }

    #[test]
    fn probes_ask_healthz_and_liveness_tolerates_more_than_readiness() {
        let d = build(&plain_pool());
        let agent = agent_of(&d);
        let readiness = agent.readiness_probe.clone().expect("readiness");
        let liveness = agent.liveness_probe.clone().expect("liveness");
        for probe in [&readiness, &liveness] {
            let get = probe.http_get.as_ref().expect("http probe");
            assert_eq!(get.path.as_deref(), Some("/healthz"));
            assert_eq!(get.port, IntOrString::String("health".to_string()));
        }
        let patience = |p: &k8s_openapi::api::core::v1::Probe| {
            p.period_seconds.unwrap_or(10) * p.failure_threshold.unwrap_or(3)
        };
        assert!(patience(&liveness) >= 60, "{}", patience(&liveness));
        assert!(patience(&liveness) > patience(&readiness));
    }

    #[test]
    fn resources_and_service_account_come_from_the_spec() {
        let p = pool(
            "prod",
            json!({
                "serviceAccountName": "platform-agent",
                "resources": { "limits": { "memory": "1Gi" } }
            }),
        );
        let d = build(&p);
        assert_eq!(
            pod_spec(template(&d)).service_account_name.as_deref(),
            Some("platform-agent")
        );
        let limits = agent_of(&d)
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("limits");
        assert_eq!(limits["memory"], Quantity("1Gi".to_string()));
        let default = build(&plain_pool());
        assert_eq!(
            pod_spec(template(&default)).service_account_name.as_deref(),
            Some("agentdeck-agent-prod")
        );
    }

    #[test]
    fn rollout_never_lowers_capacity_and_surges_one_pod() {
        let d = build(&plain_pool());
        let strategy = d.spec.and_then(|s| s.strategy).expect("strategy");
        assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
        let rolling = strategy.rolling_update.expect("rolling update");
        assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
        assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));
    }

    #[test]
    fn overlay_can_add_a_sidecar_beside_the_agent() {
        let p = pool(
            "prod",
            json!({ "podTemplate": { "spec": { "containers": [
                { "name": "vault-agent", "image": "hashicorp/vault:1.17" }
            ]}}}),
        );
        let d = build(&p);
        let pod = pod_spec(template(&d));
        let names: Vec<_> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert!(names.contains(&"vault-agent"), "{names:?}");
        let agent = agent_of(&d);
        assert_eq!(agent.image.as_deref(), Some("ghcr.io/acme/agent:1.4"));
        assert_eq!(env_value(agent, "POOL_NAME"), Some("prod"));
    }

    #[test]
    fn overlay_can_add_tolerations_and_a_node_selector() {
        let p = pool(
            "prod",
            json!({ "podTemplate": { "spec": {
                "nodeSelector": { "pool": "iac" },
                "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "iac", "effect": "NoSchedule" }]
            }}}),
        );
        let d = build(&p);
        let pod = pod_spec(template(&d));
        assert_eq!(
            pod.node_selector.as_ref().map(|s| s["pool"].as_str()),
            Some("iac")
        );
        let tolerations = pod.tolerations.as_ref().expect("tolerations");
        assert_eq!(tolerations.len(), 1);
        assert_eq!(tolerations[0].key.as_deref(), Some("dedicated"));
        // The generated parts survive the overlay.
        assert_eq!(pod.termination_grace_period_seconds, Some(3660));
        assert_eq!(agent_of(&d).command.as_ref().map(Vec::len), Some(2));
    }

    #[test]
    fn overlay_overrides_the_agent_resources_by_container_name() {
        let p = pool(
            "prod",
            json!({
                "resources": { "requests": { "cpu": "100m" } },
                "podTemplate": { "spec": { "containers": [
                    { "name": "agent", "resources": { "requests": { "cpu": "2" } } }
                ]}}
            }),
        );
        let d = build(&p);
        let pod = pod_spec(template(&d));
        assert_eq!(pod.containers.len(), 1, "no second container named agent");
        let agent = agent_of(&d);
        let requests = agent
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .expect("requests");
        assert_eq!(requests["cpu"], Quantity("2".to_string()));
        assert_eq!(agent.image.as_deref(), Some("ghcr.io/acme/agent:1.4"));
        assert_eq!(env_value(agent, "POOL_ID"), Some(POOL_UID));
    }

    #[test]
    fn overlay_cannot_move_pods_out_of_the_selector() {
        let p = pool(
            "prod",
            json!({ "podTemplate": { "metadata": { "labels": {
                "agentdeck.dev/pool": "other",
                "app.kubernetes.io/component": "sidecar",
                "team": "platform"
            }}}}),
        );
        let d = build(&p);
        let labels = template(&d)
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .expect("labels");
        assert_eq!(labels[LABEL_POOL], "prod");
        assert_eq!(labels[LABEL_COMPONENT], "agent");
        assert_eq!(labels["team"], "platform", "other labels are kept");
    }

    #[test]
    fn a_malformed_overlay_is_an_error_naming_spec_pod_template() {
        let p = pool(
            "prod",
            json!({ "podTemplate": { "spec": { "containers": "x" } } }),
        );
        let err = agent_deployment(&p, 1).expect_err("overlay is malformed");
        assert!(
            matches!(
                err,
                ManifestError::PodTemplateInvalid { .. }
                    | ManifestError::PodTemplateMergeFailed { .. }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("spec.podTemplate"), "{message}");
        assert!(message.contains("prod"), "{message}");
    }

    #[test]
    fn a_pool_without_uid_or_namespace_is_refused() {
        let mut p = plain_pool();
        p.metadata.uid = None;
        assert!(matches!(
            agent_deployment(&p, 1),
            Err(ManifestError::MissingUid { name, .. }) if name == "prod"
        ));
        let mut p = plain_pool();
        p.metadata.namespace = None;
        assert!(matches!(
            agent_deployment(&p, 1),
            Err(ManifestError::MissingNamespace { name, .. }) if name == "prod"
        ));
    }
}
