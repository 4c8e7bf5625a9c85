//! The built-in resources the sandbox serves, with the facts a real
//! kube-apiserver publishes for them in discovery.
//!
//! The table lives in `data/builtin.json`, extracted from the discovery
//! snapshots that `kubernetes/kubernetes` keeps under `api/discovery/`
//! (`api__v1.json`, `apis__apps__v1.json`, `apis__batch__v1.json`,
//! `apis__coordination.k8s.io__v1.json`, `apis__networking.k8s.io__v1.json`,
//! `apis__policy__v1.json`, `apis__rbac.authorization.k8s.io__v1.json`,
//! `apis__events.k8s.io__v1.json`, `apis__apiextensions.k8s.io__v1.json`,
//! `apis__storage.k8s.io__v1.json`,
//! cross-checked against `aggregated_v2.json`); the file's `source` field
//! names the commit each snapshot was read at. Verbs, short names,
//! categories, singular names, scope and subresource kinds are copied, not
//! remembered. Only `storageVersionHash` is left out: no client we serve
//! reads it.
//!
//! Order matters: groups follow the server's priority order (core first,
//! then as in `apis.json`), so a client resolving `events` finds the core
//! group before `events.k8s.io`, as it does against a real cluster.

use std::sync::LazyLock;

use serde::Deserialize;

use super::registry::{ResourceInfo, SubresourceInfo};

const BUILTIN_JSON: &str = include_str!("data/builtin.json");

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Table {
    #[allow(dead_code)] // provenance for readers of the JSON file
    source: String,
    group_versions: Vec<GroupVersionEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupVersionEntry {
    group: String,
    version: String,
    resources: Vec<ResourceEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResourceEntry {
    kind: String,
    plural: String,
    singular: String,
    namespaced: bool,
    verbs: Vec<String>,
    #[serde(default)]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
    #[serde(default)]
    subresources: Vec<SubresourceEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubresourceEntry {
    name: String,
    kind: String,
    #[serde(default)]
    group_version: Option<String>,
    verbs: Vec<String>,
}

static BUILTINS: LazyLock<Vec<ResourceInfo>> = LazyLock::new(|| {
    let table: Table = serde_json::from_str(BUILTIN_JSON)
        .expect("data/builtin.json is embedded at build time and parsed by the unit tests");
    table
        .group_versions
        .into_iter()
        .flat_map(|gv| {
            let GroupVersionEntry {
                group,
                version,
                resources,
            } = gv;
            resources.into_iter().map(move |r| ResourceInfo {
                group: group.clone(),
                version: version.clone(),
                kind: r.kind,
                plural: r.plural,
                singular: r.singular,
                namespaced: r.namespaced,
                verbs: r.verbs,
                short_names: r.short_names,
                categories: r.categories,
                subresources: r
                    .subresources
                    .into_iter()
                    .map(|s| SubresourceInfo {
                        name: s.name,
                        kind: s.kind,
                        group_version: s.group_version,
                        verbs: s.verbs,
                    })
                    .collect(),
            })
        })
        .collect()
});

/// Every built-in resource the sandbox serves, in discovery priority order.
pub fn builtin_resources() -> Vec<ResourceInfo> {
    BUILTINS.clone()
}

/// Is this API group one of the built-in groups (as opposed to a group a
/// CRD introduced)? The core group (`""`) is built in.
pub fn is_builtin_group(group: &str) -> bool {
    BUILTINS.iter().any(|r| r.group == group)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(group: &str, plural: &str) -> ResourceInfo {
        builtin_resources()
            .into_iter()
            .find(|r| r.group == group && r.plural == plural)
            .unwrap_or_else(|| panic!("{plural}.{group} is not in the built-in table"))
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    const ALL_VERBS: [&str; 8] = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];

    #[test]
    fn the_embedded_table_parses_into_exactly_the_resources_the_sandbox_serves() {
        let mut served: Vec<String> = builtin_resources()
            .iter()
            .map(|r| format!("{}/{}", r.api_version(), r.plural))
            .collect();
        served.sort();
        let mut expected = strings(&[
            "v1/bindings",
            "v1/componentstatuses",
            "v1/configmaps",
            "v1/endpoints",
            "v1/events",
            "v1/namespaces",
            "v1/nodes",
            "v1/pods",
            "v1/secrets",
            "v1/serviceaccounts",
            "v1/services",
            "v1/persistentvolumeclaims",
            "v1/persistentvolumes",
            "v1/replicationcontrollers",
            "apps/v1/daemonsets",
            "apps/v1/deployments",
            "apps/v1/replicasets",
            "apps/v1/statefulsets",
            "batch/v1/cronjobs",
            "batch/v1/jobs",
            "networking.k8s.io/v1/ingresses",
            "storage.k8s.io/v1/csidrivers",
            "storage.k8s.io/v1/csinodes",
            "storage.k8s.io/v1/csistoragecapacities",
            "storage.k8s.io/v1/storageclasses",
            "storage.k8s.io/v1/volumeattachments",
            "coordination.k8s.io/v1/leases",
            "discovery.k8s.io/v1/endpointslices",
            "networking.k8s.io/v1/networkpolicies",
            "policy/v1/poddisruptionbudgets",
            "rbac.authorization.k8s.io/v1/roles",
            "rbac.authorization.k8s.io/v1/rolebindings",
            "rbac.authorization.k8s.io/v1/clusterroles",
            "rbac.authorization.k8s.io/v1/clusterrolebindings",
            "events.k8s.io/v1/events",
            "apiextensions.k8s.io/v1/customresourcedefinitions",
            "authentication.k8s.io/v1/selfsubjectreviews",
            "authentication.k8s.io/v1/tokenreviews",
            "authorization.k8s.io/v1/localsubjectaccessreviews",
            "authorization.k8s.io/v1/selfsubjectaccessreviews",
            "authorization.k8s.io/v1/selfsubjectrulesreviews",
            "authorization.k8s.io/v1/subjectaccessreviews",
            "metrics.k8s.io/v1beta1/nodes",
            "metrics.k8s.io/v1beta1/pods",
            "apiregistration.k8s.io/v1/apiservices",
            "certificates.k8s.io/v1/certificatesigningrequests",
        ]);
        expected.sort();
        assert_eq!(served, expected);
    }

    #[test]
    fn pods_match_the_reference_snapshot() {
        let pods = find("", "pods");
        assert_eq!(pods.kind, "Pod");
        assert_eq!(pods.singular, "pod");
        assert!(pods.namespaced);
        assert_eq!(pods.short_names, strings(&["po"]));
        assert_eq!(pods.categories, strings(&["all"]));
        assert_eq!(pods.verbs, strings(&ALL_VERBS));
        let eviction = pods
            .subresources
            .iter()
            .find(|s| s.name == "eviction")
            .expect("pods/eviction");
        assert_eq!(eviction.kind, "Eviction");
        assert_eq!(eviction.group_version.as_deref(), Some("policy/v1"));
        assert_eq!(eviction.verbs, strings(&["create"]));
        let log = pods
            .subresources
            .iter()
            .find(|s| s.name == "log")
            .expect("pods/log");
        assert_eq!(
            (log.kind.as_str(), log.verbs.clone()),
            ("Pod", strings(&["get"]))
        );
        for name in [
            "status",
            "ephemeralcontainers",
            "binding",
            "exec",
            "attach",
            "portforward",
        ] {
            assert!(pods.has_subresource(name), "pods/{name} missing");
        }
    }

    #[test]
    fn deployments_have_the_deploy_short_name_and_an_autoscaling_scale_subresource() {
        let deployments = find("apps", "deployments");
        assert_eq!(deployments.short_names, strings(&["deploy"]));
        assert_eq!(deployments.categories, strings(&["all"]));
        assert_eq!(deployments.verbs, strings(&ALL_VERBS));
        let scale = deployments
            .subresources
            .iter()
            .find(|s| s.name == "scale")
            .expect("deployments/scale");
        assert_eq!(scale.kind, "Scale");
        assert_eq!(scale.group_version.as_deref(), Some("autoscaling/v1"));
        assert_eq!(scale.verbs, strings(&["get", "patch", "update"]));
    }

    #[test]
    fn events_exist_in_the_core_group_and_in_events_k8s_io_with_core_first() {
        let all = builtin_resources();
        let positions: Vec<(usize, &str)> = all
            .iter()
            .enumerate()
            .filter(|(_, r)| r.plural == "events")
            .map(|(i, r)| (i, r.group.as_str()))
            .collect();
        assert_eq!(positions.len(), 2);
        assert_eq!(positions[0].1, "");
        assert_eq!(positions[1].1, "events.k8s.io");
        for (_, group) in positions {
            let events = find(group, "events");
            assert_eq!(events.kind, "Event");
            assert_eq!(events.short_names, strings(&["ev"]));
        }
    }

    #[test]
    fn custom_resource_definitions_have_crd_and_crds_short_names() {
        let crds = find("apiextensions.k8s.io", "customresourcedefinitions");
        assert_eq!(crds.short_names, strings(&["crd", "crds"]));
        assert_eq!(crds.categories, strings(&["api-extensions"]));
        assert!(!crds.namespaced);
        assert!(crds.has_subresource("status"));
    }

    #[test]
    fn namespaces_cannot_be_deleted_as_a_collection_and_have_finalize() {
        let namespaces = find("", "namespaces");
        assert!(!namespaces.namespaced);
        assert!(!namespaces.verbs.iter().any(|v| v == "deletecollection"));
        let finalize = namespaces
            .subresources
            .iter()
            .find(|s| s.name == "finalize")
            .expect("namespaces/finalize");
        assert_eq!(finalize.verbs, strings(&["update"]));
    }

    #[test]
    fn bindings_only_accept_create_and_service_account_tokens_are_token_requests() {
        let bindings = find("", "bindings");
        assert_eq!(bindings.verbs, strings(&["create"]));
        let token = find("", "serviceaccounts")
            .subresources
            .into_iter()
            .find(|s| s.name == "token")
            .expect("serviceaccounts/token");
        assert_eq!(token.kind, "TokenRequest");
        assert_eq!(
            token.group_version.as_deref(),
            Some("authentication.k8s.io/v1")
        );
    }

    #[test]
    fn jobs_are_in_category_all_without_short_names_and_leases_have_neither() {
        let jobs = find("batch", "jobs");
        assert_eq!(jobs.categories, strings(&["all"]));
        assert!(jobs.short_names.is_empty());
        let leases = find("coordination.k8s.io", "leases");
        assert!(leases.categories.is_empty() && leases.short_names.is_empty());
        assert_eq!(
            find("networking.k8s.io", "networkpolicies").short_names,
            strings(&["netpol"])
        );
        assert_eq!(
            find("policy", "poddisruptionbudgets").short_names,
            strings(&["pdb"])
        );
    }

    #[test]
    fn every_listed_subresource_has_verbs_and_a_kind() {
        for r in builtin_resources() {
            assert!(!r.verbs.is_empty(), "{} has no verbs", r.plural);
            for s in &r.subresources {
                assert!(
                    !s.kind.is_empty() && !s.verbs.is_empty(),
                    "{}/{}",
                    r.plural,
                    s.name
                );
            }
        }
    }

    #[test]
    fn only_groups_from_the_table_count_as_built_in() {
        assert!(is_builtin_group(""));
        assert!(is_builtin_group("apps"));
        assert!(is_builtin_group("apiextensions.k8s.io"));
        assert!(!is_builtin_group("agentdeck.dev"));
        assert!(!is_builtin_group("autoscaling"));
    }
}
