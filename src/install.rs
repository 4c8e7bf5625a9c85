//! What `agentdeck crds` and `agentdeck manifests` print: the CRDs, the daemon
//! with its RBAC, and the operator's pools, as one YAML stream for
//! `kubectl apply -f -`.
//!
//! Nothing is printed unless every input is valid, so a bad pool file never
//! yields a half-applied install.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::config::Config;
use crate::crd::{self, AgentPool};
use crate::plan::validate::{FieldError, parse_pool};

/// Why an install stream could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The pools path could not be read.
    #[error("cannot read {path}: {source}")]
    PoolsUnreadable {
        /// File or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// One or more pool documents are invalid; nothing was printed.
    #[error("{}", invalid_message(.0))]
    InvalidPools(Vec<DocumentError>),
    /// A pool name appears twice in one namespace.
    #[error("pool {name:?} is defined twice: in {first} and in {second}")]
    DuplicatePool {
        /// Pool name.
        name: String,
        /// Where it was first seen.
        first: String,
        /// Where it was seen again.
        second: String,
    },
    /// `--pools` names a directory or file holding no AgentPool at all.
    #[error(
        "--pools {}: no AgentPool found ({files} YAML file(s) read); nothing was printed. \
         Give a directory of AgentPool YAML such as config/, or leave out --pools",
        path.display()
    )]
    NoPools {
        /// File or directory as given.
        path: PathBuf,
        /// How many files were read.
        files: usize,
    },
    /// YAML output failed (a bug, not a user mistake).
    #[error("cannot render YAML: {0}")]
    Render(String),
}

impl InstallError {
    /// A mistake in what the user gave us (exit code 2), as opposed to a fault.
    pub fn is_user_error(&self) -> bool {
        !matches!(self, InstallError::Render(_))
    }
}

/// Everything wrong with one document of one file.
#[derive(Debug)]
pub struct DocumentError {
    /// File the document came from.
    pub file: PathBuf,
    /// 1-based position of the document in its file.
    pub document: usize,
    /// Object name when known.
    pub name: Option<String>,
    /// What is wrong.
    pub errors: Vec<FieldError>,
}

fn invalid_message(docs: &[DocumentError]) -> String {
    let mut out = String::from("invalid pool definitions (nothing was printed):");
    for d in docs {
        let name = d
            .name
            .as_deref()
            .map(|n| format!(" (AgentPool {n:?})"))
            .unwrap_or_default();
        for e in &d.errors {
            out.push_str(&format!(
                "\n  {}, document {}{}: {}",
                d.file.display(),
                d.document,
                name,
                e
            ));
        }
    }
    out
}

/// Where and how the daemon is installed.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// Namespace of the daemon, its Lease and its config.
    pub namespace: String,
    /// Image of the daemon.
    pub image: String,
    /// Config rendered into the daemon's ConfigMap.
    pub config: Config,
    /// Grant the controller's rules cluster-wide (a ClusterRole) rather than
    /// in each namespace of `config.namespaces`.
    pub cluster_wide: bool,
}

/// Image of this version's release build.
pub fn default_image() -> String {
    format!("ghcr.io/agentdeck/agentdeck:{}", env!("CARGO_PKG_VERSION"))
}

/// Both CRDs as JSON values, numbers written as the API server writes them.
pub fn crd_documents() -> Vec<Value> {
    crd::crds()
        .into_iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
            integral_floats_to_ints(&mut v);
            v
        })
        .collect()
}

/// schemars writes `minimum: 1.0`; the API server and every published CRD say
/// `minimum: 1`, and a float there reads as a mistake in `kubectl get -o yaml`.
fn integral_floats_to_ints(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *v = json!(f as i64);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(integral_floats_to_ints),
        Value::Object(m) => m.values_mut().for_each(integral_floats_to_ints),
        _ => {}
    }
}

const CONTROLLER: &str = "agentdeck-controller";

fn labels() -> Value {
    json!({
        "app.kubernetes.io/name": "agentdeck",
        "app.kubernetes.io/component": "controller",
        crd::LABEL_MANAGED_BY: crd::MANAGED_BY,
    })
}

/// What the controller does in a namespace it watches, and nothing else:
/// run pools (their Deployments, task Jobs and the objects beside them),
/// keep their status, record Events, follow and keep pods' final log lines.
///
/// - No Secrets but one: a missing `tokenSecretRef` is told by the pods'
///   `FailedMount` Events, which is why Events are listed. The one is the
///   namespace's redaction key ([`crate::plan::redaction_key`]), which it
///   may `get` and `update` by name (to fill it in), never list, watch or
///   create: rendered empty beside these grants, it keys the placeholders
///   in the log tails the controller keeps.
/// - Pods: no `create` (agents run under Deployments and task pods under
///   Jobs; debug pods are created by the operator's own credentials), only
///   `patch` (the deletion cost of busy agents) and `delete` (expired debug
///   pods).
/// - Roles and RoleBindings: each pool's agent Role and its binding. The
///   API server's escalation check caps any Role this account writes at
///   what it holds itself in that namespace, and it holds this Role in the
///   watched namespaces only.
/// - Nothing it only applies may be listed, watched or deleted by it
///   (another's RoleBinding, ConfigMap or Service is not its to remove).
pub fn controller_rules() -> Value {
    let grp = crd::GROUP;
    // What it applies (server-side apply) and never lists, watches nor
    // deletes: its owned objects go with their pool through garbage
    // collection.
    let apply = json!(["get", "create", "update", "patch"]);
    let watch_and_apply = json!(["get", "list", "watch", "create", "update", "patch"]);
    json!([
        {"apiGroups": [grp], "resources": ["agentpools"], "verbs": ["get", "list", "watch", "update", "patch"]},
        // delete: finished tasks past their pool's taskHistory (recorded first).
        {"apiGroups": [grp], "resources": ["agenttasks"], "verbs": ["get", "list", "watch", "update", "patch", "delete"]},
        {"apiGroups": [grp], "resources": ["agentpools/status", "agenttasks/status"], "verbs": ["get", "update", "patch"]},
        // blockOwnerDeletion on owned objects needs update on the owners' finalizers.
        {"apiGroups": [grp], "resources": ["agentpools/finalizers", "agenttasks/finalizers"], "verbs": ["update"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": watch_and_apply},
        // A finished or orphaned task's Job is deleted.
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [crate::plan::redaction_key::SECRET_NAME], "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["services", "serviceaccounts", "configmaps"], "verbs": apply},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "create", "patch"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": apply},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": apply},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": apply},
        {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors"], "verbs": apply}
    ])
}

/// What a controller watching several namespaces needs at the cluster
/// scope: its watches of pools, tasks, pods, Deployments and Jobs are one
/// watch each across namespaces (it keeps what is in its namespaces), and a
/// watch across namespaces is authorized at the cluster scope. Read-only.
pub fn cluster_watch_rules() -> Value {
    json!([
        {"apiGroups": [crd::GROUP], "resources": ["agentpools", "agenttasks"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]}
    ])
}

/// The namespaces the rendered controller works in: its configuration's,
/// or, when that lists none, its own (where a daemon in a pod looks).
fn controller_namespaces(opts: &InstallOptions) -> Vec<String> {
    let mut out: std::collections::BTreeSet<String> =
        opts.config.namespaces.iter().cloned().collect();
    if out.is_empty() {
        out.insert(opts.namespace.clone());
    }
    out.into_iter().collect()
}

fn binding_to(kind: &str, name: &str, namespace: Option<&str>, sa_namespace: &str) -> Value {
    let binding_kind = if namespace.is_some() {
        "RoleBinding"
    } else {
        "ClusterRoleBinding"
    };
    let mut metadata = json!({"name": name, "labels": labels()});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding_kind,
           "metadata": metadata,
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
           "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": sa_namespace}]})
}

/// The controller's grants: a Role and RoleBinding in each namespace it
/// watches; for `cluster_wide` one ClusterRole and ClusterRoleBinding
/// instead. A controller of several namespaces also gets the read-only
/// cluster-scope watch ([`cluster_watch_rules`]).
pub fn controller_rbac(opts: &InstallOptions) -> Vec<Value> {
    let ns = opts.namespace.as_str();
    let rbac = "rbac.authorization.k8s.io/v1";
    if opts.cluster_wide {
        return vec![
            json!({"apiVersion": rbac, "kind": "ClusterRole",
                   "metadata": {"name": CONTROLLER, "labels": labels()},
                   "rules": controller_rules()}),
            binding_to("ClusterRole", CONTROLLER, None, ns),
        ];
    }
    let namespaces = controller_namespaces(opts);
    let mut out = Vec::new();
    if namespaces.len() > 1 {
        let name = format!("{CONTROLLER}-watch");
        out.push(json!({"apiVersion": rbac, "kind": "ClusterRole",
                        "metadata": {"name": name, "labels": labels()},
                        "rules": cluster_watch_rules()}));
        out.push(binding_to("ClusterRole", &name, None, ns));
    }
    for watched in &namespaces {
        out.push(json!({"apiVersion": rbac, "kind": "Role",
                        "metadata": {"name": CONTROLLER, "namespace": watched, "labels": labels()},
                        "rules": controller_rules()}));
        out.push(binding_to("Role", CONTROLLER, Some(watched), ns));
    }
    out
}

/// The daemon: Namespace, ServiceAccount, its grants ([`controller_rbac`]),
/// Role for its Lease, ConfigMap with `agentdeck.yaml`, Deployment and
/// metrics Service.
pub fn controller_objects(opts: &InstallOptions) -> Result<Vec<Value>, InstallError> {
    let ns = opts.namespace.as_str();
    let config_yaml =
        serde_saphyr::to_string(&opts.config).map_err(|e| InstallError::Render(e.to_string()))?;
    let port = opts.config.server.port;
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels()}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": CONTROLLER, "namespace": ns, "labels": labels()}}),
    ];
    objects.extend(controller_rbac(opts));
    // Empty: the controller fills in the key (see plan::redaction_key).
    objects.extend(
        controller_namespaces(opts)
            .iter()
            .map(|watched| crate::plan::redaction_key::empty_secret(watched, labels())),
    );
    objects.extend([
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": format!("{CONTROLLER}-leader"), "namespace": ns, "labels": labels()},
               "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch", "create", "update", "patch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": format!("{CONTROLLER}-leader"), "namespace": ns, "labels": labels()},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{CONTROLLER}-leader")},
               "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": ns}]}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("{CONTROLLER}-config"), "namespace": ns, "labels": labels()},
               "data": {"agentdeck.yaml": config_yaml}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": CONTROLLER, "namespace": ns, "labels": labels()},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "agentdeck", "app.kubernetes.io/component": "controller"}},
            "template": {
                "metadata": {"labels": labels(), "annotations": {
                    "prometheus.io/scrape": "true", "prometheus.io/port": port.to_string(), "prometheus.io/path": "/metrics"}},
                "spec": {
                    "serviceAccountName": CONTROLLER,
                    // No AGENTDECK_CONTROLLER_* service-link variables: the
                    // config loader ignores them, but nothing needs them either.
                    "enableServiceLinks": false,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": "controller",
                        "image": opts.image,
                        "command": ["agentdeck", "--daemon", "--config", "/etc/agentdeck/agentdeck.yaml", "--log-format", "json"],
                        // POD_IP: the daemon serves on its pod's address.
                        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "ports": [{"name": "http", "containerPort": port}],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5},
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10, "failureThreshold": 6},
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/agentdeck", "readOnly": true}]
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": format!("{CONTROLLER}-config")}}]
                }
            }
        }}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": CONTROLLER, "namespace": ns, "labels": labels()},
               "spec": {"selector": {"app.kubernetes.io/name": "agentdeck", "app.kubernetes.io/component": "controller"},
                        "ports": [{"name": "http", "port": port, "targetPort": "http"}]}}),
    ]);
    Ok(objects)
}

/// Reads AgentPool documents from a file or from every `*.yaml`/`*.yml` in a
/// directory (not recursive), validating each; all problems are reported at
/// once. Documents that are agentdeck's own config files (`agentdeck*.yaml`
/// with no `kind`) are skipped, so `--pools config/` works on the examples.
pub fn load_pools(path: &Path) -> Result<Vec<(PathBuf, AgentPool)>, InstallError> {
    let unreadable = |source| InstallError::PoolsUnreadable {
        path: path.to_path_buf(),
        source,
    };
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(unreadable)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            })
            .collect();
        v.sort();
        v
    } else {
        std::fs::metadata(path).map_err(unreadable)?;
        vec![path.to_path_buf()]
    };
    let mut pools: Vec<(PathBuf, AgentPool)> = Vec::new();
    let mut bad = Vec::new();
    let read = files.len();
    for file in files {
        let text =
            std::fs::read_to_string(&file).map_err(|source| InstallError::PoolsUnreadable {
                path: file.clone(),
                source,
            })?;
        let docs: Vec<Value> = match serde_saphyr::from_multiple(&text) {
            Ok(d) => d,
            Err(e) => {
                bad.push(DocumentError {
                    file: file.clone(),
                    document: 1,
                    name: None,
                    errors: vec![FieldError {
                        field: "(yaml)".into(),
                        value: String::new(),
                        expected: format!("valid YAML: {e}"),
                    }],
                });
                continue;
            }
        };
        let is_config_file = file
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("agentdeck"));
        for (i, doc) in docs.into_iter().enumerate() {
            if doc.is_null()
                || (is_config_file && doc.get("kind").is_none() && doc.get("apiVersion").is_none())
            {
                continue;
            }
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string);
            match parse_pool(&doc) {
                Ok(pool) => {
                    let key = (pool.metadata.namespace.clone(), pool.metadata.name.clone());
                    if let Some((first, _)) = pools.iter().find(|(_, p)| {
                        (p.metadata.namespace.clone(), p.metadata.name.clone()) == key
                    }) {
                        return Err(InstallError::DuplicatePool {
                            name: name.unwrap_or_default(),
                            first: first.display().to_string(),
                            second: file.display().to_string(),
                        });
                    }
                    pools.push((file.clone(), pool));
                }
                Err(errors) => bad.push(DocumentError {
                    file: file.clone(),
                    document: i + 1,
                    name,
                    errors,
                }),
            }
        }
    }
    if !bad.is_empty() {
        return Err(InstallError::InvalidPools(bad));
    }
    if pools.is_empty() {
        return Err(InstallError::NoPools {
            path: path.to_path_buf(),
            files: read,
        });
    }
    Ok(pools)
}

/// The whole install: CRDs, daemon, then pools.
pub fn install_documents(
    opts: &InstallOptions,
    pools: &[AgentPool],
) -> Result<Vec<Value>, InstallError> {
    let mut docs = crd_documents();
    docs.extend(controller_objects(opts)?);
    for p in pools {
        let mut v = serde_json::to_value(p).map_err(|e| InstallError::Render(e.to_string()))?;
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
        }
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
        }
        docs.push(v);
    }
    Ok(docs)
}

/// The namespaces an installed daemon whose configuration lists none
/// watches: where `kubectl apply` puts the pools (`apply_namespace` for
/// those naming none, which is also where pools applied later land) and
/// every namespace a pool names. In a pod, "the current namespace" would be
/// the daemon's own, where no pool is.
pub fn watched_namespaces(pools: &[AgentPool], apply_namespace: &str) -> Vec<String> {
    let mut out: std::collections::BTreeSet<String> = pools
        .iter()
        .filter_map(|p| p.metadata.namespace.clone())
        .collect();
    out.insert(apply_namespace.to_owned());
    out.into_iter().collect()
}

/// What `manifests --monitoring` adds, in the daemon's namespace: a
/// ServiceMonitor for its metrics, the alert rules as a PrometheusRule and
/// the dashboard as a ConfigMap for Grafana's sidecar.
pub fn monitoring_documents(opts: &InstallOptions) -> Vec<Value> {
    let m = &opts.config.monitoring;
    let ns = opts.namespace.as_str();
    vec![
        crate::monitoring::service_monitor(m, ns, &labels()),
        crate::monitoring::prometheus_rule(m, ns, &labels()),
        crate::monitoring::dashboard_config_map(m, ns, &labels()),
    ]
}

/// One document as YAML.
pub fn to_yaml(doc: &Value) -> Result<String, InstallError> {
    serde_saphyr::to_string(doc).map_err(|e| InstallError::Render(e.to_string()))
}

/// Documents as one YAML stream (`---` separated).
pub fn to_yaml_stream(docs: &[Value]) -> Result<String, InstallError> {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(d).map_err(|e| InstallError::Render(e.to_string()))?);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, namespace: Option<&str>) -> AgentPool {
        serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": "agentdeck"}
        }))
        .expect("pool")
    }

    fn options(namespaces: &[&str], cluster_wide: bool) -> InstallOptions {
        InstallOptions {
            namespace: "agentdeck-system".into(),
            image: "agentdeck:dev".into(),
            config: Config {
                namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
                ..Config::default()
            },
            cluster_wide,
        }
    }

    /// `(kind, namespace, name)` of the RBAC objects rendered for the daemon.
    fn grants(opts: &InstallOptions) -> Vec<(String, String, String)> {
        controller_objects(opts)
            .expect("renders")
            .iter()
            .filter(|o| o["apiVersion"] == "rbac.authorization.k8s.io/v1")
            .map(|o| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (
                    s(&o["kind"]),
                    s(&o["metadata"]["namespace"]),
                    s(&o["metadata"]["name"]),
                )
            })
            .collect()
    }

    fn owned(rows: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        rows.iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect()
    }

    #[test]
    fn the_controller_is_granted_a_role_in_each_watched_namespace_and_nothing_cluster_wide() {
        assert_eq!(
            grants(&options(&["team-a"], false)),
            owned(&[
                ("Role", "team-a", CONTROLLER),
                ("RoleBinding", "team-a", CONTROLLER),
                ("Role", "agentdeck-system", "agentdeck-controller-leader"),
                (
                    "RoleBinding",
                    "agentdeck-system",
                    "agentdeck-controller-leader"
                ),
            ])
        );
        // No namespaces configured: the daemon in its pod watches its own.
        assert_eq!(
            grants(&options(&[], false))[..2],
            owned(&[
                ("Role", "agentdeck-system", CONTROLLER),
                ("RoleBinding", "agentdeck-system", CONTROLLER),
            ])
        );
    }

    #[test]
    fn several_namespaces_add_only_a_read_only_cluster_watch() {
        let rows = grants(&options(&["team-b", "team-a"], false));
        assert_eq!(
            rows[..6],
            owned(&[
                ("ClusterRole", "", "agentdeck-controller-watch"),
                ("ClusterRoleBinding", "", "agentdeck-controller-watch"),
                ("Role", "team-a", CONTROLLER),
                ("RoleBinding", "team-a", CONTROLLER),
                ("Role", "team-b", CONTROLLER),
                ("RoleBinding", "team-b", CONTROLLER),
            ])
        );
        for rule in cluster_watch_rules().as_array().expect("rules") {
            assert_eq!(rule["verbs"], json!(["list", "watch"]), "{rule}");
        }
    }

    #[test]
    fn cluster_wide_rbac_is_one_cluster_role_when_asked_for() {
        let rows = grants(&options(&["team-a", "team-b"], true));
        assert_eq!(
            rows[..2],
            owned(&[
                ("ClusterRole", "", CONTROLLER),
                ("ClusterRoleBinding", "", CONTROLLER),
            ])
        );
        assert!(!rows.iter().any(|(k, _, n)| k == "Role" && n == CONTROLLER));
    }

    #[test]
    fn each_watched_namespace_gets_an_empty_redaction_key_secret() {
        let objects = controller_objects(&options(&["team-b", "team-a"], false)).expect("renders");
        let keys: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Secret").collect();
        let namespaces: Vec<&str> = keys
            .iter()
            .map(|o| o["metadata"]["namespace"].as_str().expect("namespace"))
            .collect();
        assert_eq!(namespaces, ["team-a", "team-b"]);
        for k in keys {
            assert_eq!(
                k["metadata"]["name"],
                crate::plan::redaction_key::SECRET_NAME
            );
            // No value in rendered YAML: the controller fills it in.
            assert!(
                k.get("data").is_none() && k.get("stringData").is_none(),
                "{k}"
            );
        }
    }

    #[test]
    fn the_controller_may_not_read_secrets_nor_create_pods() {
        let rules = controller_rules();
        let verbs_on = |resource: &str| -> Vec<String> {
            rules
                .as_array()
                .expect("rules")
                .iter()
                .filter(|r| {
                    r["apiGroups"]
                        .as_array()
                        .expect("groups")
                        .contains(&json!(""))
                        && r["resources"]
                            .as_array()
                            .expect("resources")
                            .contains(&json!(resource))
                })
                .flat_map(|r| r["verbs"].as_array().expect("verbs").clone())
                .map(|v| v.as_str().expect("verb").to_owned())
                .collect()
        };
        // Secrets: the redaction key only, by name, get and update only.
        for rule in rules.as_array().expect("rules") {
            if rule["resources"]
                .as_array()
                .expect("resources")
                .contains(&json!("secrets"))
            {
                assert_eq!(
                    rule["resourceNames"],
                    json!([crate::plan::redaction_key::SECRET_NAME]),
                    "{rule}"
                );
                assert_eq!(rule["verbs"], json!(["get", "update"]), "{rule}");
            }
        }
        assert_eq!(verbs_on("secrets"), ["get", "update"]);
        let rbac = rules
            .as_array()
            .expect("rules")
            .iter()
            .find(|r| r["apiGroups"] == json!(["rbac.authorization.k8s.io"]))
            .expect("an RBAC rule");
        assert_eq!(rbac["resources"], json!(["roles", "rolebindings"]));
        assert_eq!(
            rbac["verbs"],
            json!(["get", "create", "update", "patch"]),
            "it writes its pools' agent Roles and bindings, and removes none"
        );
        assert_eq!(
            verbs_on("pods"),
            ["get", "list", "watch", "patch", "delete"]
        );
        for rule in rules.as_array().expect("rules") {
            for verb in rule["verbs"].as_array().expect("verbs") {
                assert!(
                    !matches!(
                        verb.as_str(),
                        Some("*" | "escalate" | "bind" | "impersonate")
                    ),
                    "{rule}"
                );
            }
        }
    }

    #[test]
    fn an_installed_daemon_watches_where_its_pools_are_applied() {
        assert_eq!(watched_namespaces(&[], "default"), ["default"]);
        let pools = [
            pool("a", None),
            pool("b", Some("team-b")),
            pool("c", Some("team-a")),
            pool("d", Some("team-b")),
        ];
        assert_eq!(
            watched_namespaces(&pools, "ops"),
            ["ops", "team-a", "team-b"]
        );
    }
}
