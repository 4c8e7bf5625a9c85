//! Objects a fresh cluster has before anyone writes: the default
//! ClusterRoles and ClusterRoleBinding of the apiserver's RBAC bootstrap
//! policy (`cluster-admin`, and the user-facing `admin`, `edit` and `view`,
//! aggregated from roles labelled `aggregate-to-<name>`, as
//! `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go` declares
//! them), and the roles every authenticated user holds (`system:discovery`,
//! `system:basic-user`, `system:public-info-viewer`). The sandbox enforces
//! them for service accounts (see [`super::auth`]).

use serde_json::{Value, json};

fn meta(name: &str) -> Value {
    json!({"name": name,
           "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
           "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
}

/// An aggregated role: `edit` is itself aggregated into `admin`, `view`
/// into `edit`.
fn aggregated(name: &str, rules: Value) -> Value {
    let mut m = meta(name);
    let into = match name {
        "edit" => Some("admin"),
        "view" => Some("edit"),
        _ => None,
    };
    if let Some(into) = into {
        m["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{into}")] = json!("true");
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": m,
           "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {
               format!("rbac.authorization.k8s.io/aggregate-to-{name}"): "true"}}]},
           "rules": rules})
}

const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 7] = [
    "create",
    "delete",
    "deletecollection",
    "patch",
    "update",
    "get",
    "list",
];

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

/// `(plural, object)` for each default RBAC object.
pub fn default_rbac() -> Vec<(&'static str, Value)> {
    let core_read = [
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "persistentvolumeclaims/status",
        "pods",
        "pods/log",
        "pods/status",
        "replicationcontrollers",
        "replicationcontrollers/scale",
        "replicationcontrollers/status",
        "serviceaccounts",
        "services",
        "services/status",
        "bindings",
        "events",
        "limitranges",
        "namespaces",
        "namespaces/status",
        "resourcequotas",
        "resourcequotas/status",
    ];
    let apps = [
        "controllerrevisions",
        "daemonsets",
        "daemonsets/status",
        "deployments",
        "deployments/scale",
        "deployments/status",
        "replicasets",
        "replicasets/scale",
        "replicasets/status",
        "statefulsets",
        "statefulsets/scale",
        "statefulsets/status",
    ];
    let batch = ["cronjobs", "cronjobs/status", "jobs", "jobs/status"];
    let view_rules = json!([
        rule(&[""], &core_read, &READ),
        rule(&["apps"], &apps, &READ),
        rule(&["batch"], &batch, &READ),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
            &READ
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            &READ
        ),
        rule(&["events.k8s.io"], &["events"], &READ),
    ]);
    let edit_rules = json!([
        rule(
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy"
            ],
            &READ
        ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy"
            ],
            &["create", "delete", "deletecollection", "patch", "update"]
        ),
        rule(
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy"
            ],
            &["create", "delete", "deletecollection", "patch", "update"]
        ),
        rule(&["apps"], &apps, &WRITE),
        rule(&["batch"], &batch, &WRITE),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
            &WRITE
        ),
        rule(&["policy"], &["poddisruptionbudgets"], &WRITE),
    ]);
    let admin_rules = json!([
        rule(
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
            &["create"]
        ),
        rule(
            &["rbac.authorization.k8s.io"],
            &["rolebindings", "roles"],
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch"
            ]
        ),
    ]);
    let cluster_admin = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": meta("cluster-admin"),
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                  {"nonResourceURLs": ["*"], "verbs": ["*"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": meta("cluster-admin"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]});
    // The aggregated roles hold the union of what their aggregate-to roles
    // grant; the sandbox writes that union directly (it runs no aggregator).
    let union = |parts: &[&Value]| -> Value {
        Value::Array(
            parts
                .iter()
                .flat_map(|p| p.as_array().cloned().unwrap_or_default())
                .collect(),
        )
    };
    let system = |name: &str, rules: Value, groups: &[&str]| {
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": meta(name), "rules": rules});
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
            .collect();
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": meta(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subjects});
        [("clusterroles", role), ("clusterrolebindings", binding)]
    };
    let discovery = system(
        "system:discovery",
        json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                                    "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
                "verbs": ["get"]}]),
        &["system:authenticated"],
    );
    let basic_user = system(
        "system:basic-user",
        json!([
            rule(
                &["authorization.k8s.io"],
                &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                &["create"]
            ),
            rule(
                &["authentication.k8s.io"],
                &["selfsubjectreviews"],
                &["create"]
            )
        ]),
        &["system:authenticated"],
    );
    let public_info = system(
        "system:public-info-viewer",
        json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                "verbs": ["get"]}]),
        &["system:authenticated", "system:unauthenticated"],
    );
    vec![
        ("clusterroles", cluster_admin),
        (
            "clusterroles",
            aggregated("admin", union(&[&view_rules, &edit_rules, &admin_rules])),
        ),
        (
            "clusterroles",
            aggregated("edit", union(&[&view_rules, &edit_rules])),
        ),
        ("clusterroles", aggregated("view", view_rules)),
        ("clusterrolebindings", binding),
    ]
    .into_iter()
    .chain(discovery)
    .chain(basic_user)
    .chain(public_info)
    .collect()
}

/// The `default/kubernetes` Service every cluster has, with its Endpoints
/// and EndpointSlice pointing at the API server at `addr`, as the
/// apiserver's own reconciler keeps them: `(group, plural, object)` each.
///
/// A real cluster's Service listens on 443 of a cluster IP that kube-proxy
/// forwards to the apiserver's 6443. The sandbox has no service proxy, so
/// its Service's cluster IP and port are the address the API server
/// listens on: the `KUBERNETES_SERVICE_HOST`/`PORT` variables the kubelet
/// derives from it (service links) reach the API as in a cluster.
pub fn kubernetes_service(addr: std::net::SocketAddr) -> Vec<(&'static str, &'static str, Value)> {
    let ip = addr.ip().to_string();
    let port = addr.port();
    let family = if addr.is_ipv4() { "IPv4" } else { "IPv6" };
    vec![
        (
            "",
            "services",
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                            "ipFamilies": [family], "ipFamilyPolicy": "SingleStack",
                            "internalTrafficPolicy": "Cluster", "sessionAffinity": "None",
                            "ports": [{"name": "https", "port": port, "protocol": "TCP", "targetPort": port}]}}),
        ),
        (
            "",
            "endpoints",
            json!({"apiVersion": "v1", "kind": "Endpoints",
                   "metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                   "subsets": [{"addresses": [{"ip": ip}],
                                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]}),
        ),
        (
            "discovery.k8s.io",
            "endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"kubernetes.io/service-name": "kubernetes"}},
                   "addressType": family,
                   "endpoints": [{"addresses": [ip],
                                  "conditions": {"ready": true, "serving": true, "terminating": false}}],
                   "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
        ),
    ]
}

/// kube-aggregator's priorities of the built-in group versions
/// (`apiVersionPriorities` in its `apiserver` package); a group not listed
/// gets the default an unlisted local group gets.
fn api_service_priority(group: &str, version: &str) -> (i64, i64) {
    match (group, version) {
        ("", "v1") => (18000, 1),
        ("apps", "v1") => (17800, 15),
        ("events.k8s.io", "v1") => (17750, 15),
        ("authentication.k8s.io", "v1") => (17700, 15),
        ("authorization.k8s.io", "v1") => (17600, 15),
        ("autoscaling", "v1") => (17500, 15),
        ("batch", "v1") => (17400, 15),
        ("certificates.k8s.io", "v1") => (17300, 15),
        ("networking.k8s.io", "v1") => (17200, 15),
        ("policy", "v1") => (17100, 15),
        ("rbac.authorization.k8s.io", "v1") => (17000, 15),
        ("storage.k8s.io", "v1") => (16800, 15),
        ("apiextensions.k8s.io", "v1") => (16700, 15),
        ("coordination.k8s.io", "v1") => (16500, 15),
        ("discovery.k8s.io", "v1") => (16200, 15),
        ("metrics.k8s.io", "v1beta1") => (100, 100),
        _ => (1000, 15),
    }
}

/// The APIServices a real cluster lists for the group versions served
/// here: local ones (`spec.service` unset) as the aggregator's autoregister
/// controller creates them at start, Available because local; the metrics
/// API as metrics-server's manifest registers it, a service in kube-system.
pub fn api_services(served: &[super::api::Served]) -> Vec<Value> {
    let now = super::api::now_rfc3339();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for s in served.iter().filter(|s| s.crd.is_none()) {
        let (group, version) = (s.info.group.as_str(), s.info.version.as_str());
        if !seen.insert((group.to_owned(), version.to_owned())) {
            continue;
        }
        let (group_priority, version_priority) = api_service_priority(group, version);
        let name = format!("{version}.{group}");
        let metrics = group == "metrics.k8s.io";
        let mut spec = json!({"group": group, "version": version,
            "groupPriorityMinimum": group_priority, "versionPriority": version_priority});
        let mut meta = json!({"name": name});
        let condition = if metrics {
            spec["service"] =
                json!({"namespace": "kube-system", "name": "metrics-server", "port": 443});
            spec["insecureSkipTLSVerify"] = json!(true);
            meta["labels"] = json!({"k8s-app": "metrics-server"});
            json!({"type": "Available", "status": "True", "lastTransitionTime": now,
                   "reason": "Passed", "message": "all checks passed"})
        } else {
            meta["labels"] = json!({"kube-aggregator.kubernetes.io/automanaged": "onstart"});
            json!({"type": "Available", "status": "True", "lastTransitionTime": now,
                   "reason": "Local", "message": "Local APIServices are always available"})
        };
        out.push(
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": meta, "spec": spec, "status": {"conditions": [condition]}}),
        );
    }
    out
}

/// `componentstatuses` of a healthy control plane, as kube-apiserver 1.33
/// reports them (deprecated, still served).
pub fn component_statuses() -> Vec<Value> {
    let healthy = |name: &str, message: &str| {
        json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": name},
               "conditions": [{"type": "Healthy", "status": "True", "message": message}]})
    };
    vec![
        healthy("controller-manager", "ok"),
        healthy("etcd-0", "ok"),
        healthy("scheduler", "ok"),
    ]
}
