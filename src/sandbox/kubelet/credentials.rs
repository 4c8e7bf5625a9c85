//! What the kubelet's token manager puts in a pod's projected volumes: a
//! service-account token the API server issues for the pod's account,
//! bound to the pod, and the cluster CA for `kube-root-ca.crt` when the
//! publisher has not written the ConfigMap yet. Together with the
//! `namespace` file and `KUBERNETES_SERVICE_HOST`/`PORT` that is what
//! kube-rs's (and client-go's) in-cluster configuration reads.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::sandbox::api::Api;
use crate::sandbox::auth::SERVICE_ACCOUNT_DIR;

fn write(dir: &Path, rel: &str, bytes: &[u8], mode: u32) -> Result<(), String> {
    let rel_path = Path::new(rel);
    if rel.is_empty()
        || !rel_path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!("invalid path {rel:?} in volume"));
    }
    let path = dir.join(rel_path);
    let io = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, bytes).map_err(io)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o777)).map_err(io)
}

/// Writes the token (and, while the ConfigMap is missing, the CA) of every
/// projected volume of `pod`, whose directories are `vols`. An error is the
/// kubelet's mount failure (`failed to fetch token: …`).
pub(super) fn project(
    api: &Api,
    pod: &Value,
    vols: &BTreeMap<String, PathBuf>,
) -> Result<(), String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let account = pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("default");
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let (Some(name), Some(projected)) = (v["name"].as_str(), v.get("projected")) else {
            continue;
        };
        let Some(dir) = vols.get(name) else { continue };
        let mode = projected["defaultMode"]
            .as_u64()
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(0o644);
        let setup = |r: Result<(), String>| {
            r.map_err(|e| format!("MountVolume.SetUp failed for volume \"{name}\" : {e}"))
        };
        for source in projected["sources"].as_array().into_iter().flatten() {
            if let Some(t) = source.get("serviceAccountToken") {
                let sa = api.store.get("serviceaccounts", ns, account).ok_or_else(|| {
                    format!(
                        "MountVolume.SetUp failed for volume \"{name}\" : failed to fetch token: serviceaccounts \"{account}\" not found"
                    )
                })?;
                let audiences: Vec<String> = t["audience"]
                    .as_str()
                    .filter(|a| !a.is_empty())
                    .map(|a| vec![a.to_owned()])
                    .unwrap_or_default();
                let (token, _) = api.security.issue_token(
                    &sa,
                    Some(pod),
                    &audiences,
                    t["expirationSeconds"].as_i64().unwrap_or(3600),
                    jiff::Timestamp::now().as_second(),
                );
                let path = t["path"].as_str().unwrap_or("token");
                setup(write(dir, path, token.as_bytes(), mode))?;
            }
            if let Some(c) = source.get("configMap")
                && c["name"] == "kube-root-ca.crt"
                && api
                    .store
                    .get("configmaps", ns, "kube-root-ca.crt")
                    .is_none()
            {
                for item in c["items"].as_array().into_iter().flatten() {
                    if item["key"] == "ca.crt"
                        && let Some(path) = item["path"].as_str()
                    {
                        let ca = api.security.pki().ca_pem();
                        setup(write(dir, path, ca.as_bytes(), mode))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The host directory of the volume the pod mounts at the service-account
/// path, if any container does.
pub(super) fn service_account_dir(
    pod: &Value,
    vols: &BTreeMap<String, PathBuf>,
) -> Option<PathBuf> {
    ["initContainers", "containers"]
        .iter()
        .flat_map(|k| pod["spec"][k].as_array().into_iter().flatten())
        .flat_map(|c| c["volumeMounts"].as_array().into_iter().flatten())
        .find(|m| {
            m["mountPath"].as_str().map(|p| p.trim_end_matches('/')) == Some(SERVICE_ACCOUNT_DIR)
        })
        .and_then(|m| {
            let dir = vols.get(m["name"].as_str()?)?;
            Some(match m["subPath"].as_str().filter(|s| !s.is_empty()) {
                Some(sub) => dir.join(sub),
                None => dir.clone(),
            })
        })
}

/// A kubeconfig equivalent to the in-cluster configuration (server, the
/// CA and token files of the service-account volume, the namespace), for
/// processes that cannot see that volume at its real path.
pub(super) fn kubeconfig(server: &str, namespace: &str, sa_dir: Option<&Path>) -> String {
    let (ca, user) = match sa_dir {
        Some(dir) => (
            format!(
                "    certificate-authority: {}\n",
                dir.join("ca.crt").display()
            ),
            format!("\n    tokenFile: {}", dir.join("token").display()),
        ),
        None => (String::new(), " {}".to_owned()),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: in-cluster\n  cluster:\n    server: {server}\n{ca}\
         contexts:\n- name: in-cluster\n  context:\n    cluster: in-cluster\n    user: service-account\n    namespace: {namespace}\n\
         current-context: in-cluster\nusers:\n- name: service-account\n  user:{user}\npreferences: {{}}\n"
    )
}
