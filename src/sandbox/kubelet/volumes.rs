//! Pod volumes on the host, and how a process in the sandbox finds them.
//!
//! Each pod gets a directory; each volume is a subdirectory of
//! `<pod dir>/volumes/` shared by the pod's containers: emptyDir (and any
//! type the sandbox cannot provide) empty, secret/configMap/projected/
//! downwardAPI with their files written as the kubelet writes them
//! (`items` key → path, `mode`/`defaultMode`).
//!
//! Each container sees its volumes at their mount paths through a private
//! mount namespace ([`super::mountns`]). Where the machine allows none,
//! the kubelet falls back to telling the process where its mounts are on
//! the host instead: [`resolve_host_path`] maps a path as the container
//! would see it to the host (the longest mount path that is a
//! component-wise prefix of it is replaced with its host directory; any
//! other path, a relative one, or one inside the pod directory is returned
//! unchanged), and the kubelet applies it to the paths in the container's
//! arguments, variables and (for shell scripts) script text.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::env::{Lookup, PodFields, object_data};

/// One `volumeMounts` entry of a container, resolved to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ContainerMount {
    /// `mountPath`.
    pub path: String,
    /// The volume's directory (a `subPath` included) on the host.
    pub host: PathBuf,
    /// `readOnly`.
    pub read_only: bool,
}

/// Where `container_path` is on the host, given the container's mounts and
/// the pod directory `root` (see the module documentation).
pub(super) fn resolve_host_path(
    root: Option<&Path>,
    mounts: &[ContainerMount],
    container_path: &Path,
) -> PathBuf {
    if !container_path.is_absolute() || root.is_some_and(|r| container_path.starts_with(r)) {
        return container_path.to_path_buf();
    }
    let best = mounts
        .iter()
        .map(|m| (Path::new(m.path.trim_end_matches('/')), &m.host))
        .filter(|(mount, _)| !mount.as_os_str().is_empty() && container_path.starts_with(mount))
        .max_by_key(|(mount, _)| mount.components().count());
    match best {
        Some((mount, host)) => match container_path.strip_prefix(mount) {
            Ok(rest) if rest.as_os_str().is_empty() => host.clone(),
            Ok(rest) => host.join(rest),
            Err(_) => container_path.to_path_buf(),
        },
        None => container_path.to_path_buf(),
    }
}

/// Rewrites the mount paths a shell script names to their host
/// directories, where the path stands on its own (`/shared/task` but not
/// `/sharedx` or `/a/shared`).
pub(super) fn map_script_paths(script: &str, mounts: &[ContainerMount]) -> String {
    let mut sorted: Vec<(&str, String)> = mounts
        .iter()
        .map(|m| (m.path.trim_end_matches('/'), m.host.display().to_string()))
        .filter(|(m, _)| !m.is_empty())
        .collect();
    sorted.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    let path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    let mut out = String::with_capacity(script.len());
    let mut i = 0;
    'outer: while i < script.len() {
        let rest = &script[i..];
        let before_ok = script[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !path_char(c));
        if before_ok {
            for (mount, host) in &sorted {
                if let Some(after) = rest.strip_prefix(mount)
                    && after
                        .chars()
                        .next()
                        .is_none_or(|c| c == '/' || !path_char(c))
                {
                    out.push_str(host);
                    i += mount.len();
                    continue 'outer;
                }
            }
        }
        let c = rest.chars().next().unwrap_or('\0');
        out.push(c);
        i += c.len_utf8().max(1);
    }
    out
}

/// A volume path item must stay inside its volume.
fn safe_relative(path: &str) -> Option<&Path> {
    let p = Path::new(path);
    let ok = !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    ok.then_some(p)
}

fn write_file(dir: &Path, rel: &str, bytes: &[u8], mode: u32) -> Result<(), String> {
    let Some(rel) = safe_relative(rel) else {
        return Err(format!("invalid path {rel:?} in volume"));
    };
    let path = dir.join(rel);
    let io = |e: io::Error| format!("cannot write {}: {e}", path.display());
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    // A file left read-only by an earlier attempt must be replaceable.
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, bytes).map_err(io)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o777)).map_err(io)
}

fn mode_of(v: &Value, default: u32) -> u32 {
    v.as_u64()
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(default)
}

/// Files of a Secret or ConfigMap source (`items`, or every key).
fn write_keys(
    dir: &Path,
    resource: &str,
    source: &Value,
    name: &str,
    default_mode: u32,
    lookup: Lookup<'_>,
) -> Result<(), String> {
    let optional = source["optional"].as_bool().unwrap_or(false);
    let Some(obj) = lookup(resource, name) else {
        // The sandbox has no root CA to publish; an empty bundle lets the
        // standard projected API-access volume mount.
        if optional || (resource == "configmaps" && name == "kube-root-ca.crt") {
            for item in source["items"].as_array().into_iter().flatten() {
                if let Some(path) = item["path"].as_str() {
                    write_file(dir, path, b"", mode_of(&item["mode"], default_mode))?;
                }
            }
            return Ok(());
        }
        let kind = if resource == "secrets" {
            "secret"
        } else {
            "configmap"
        };
        return Err(format!("{kind} \"{name}\" not found"));
    };
    let data = object_data(resource, &obj);
    match source["items"].as_array() {
        Some(items) => {
            for item in items {
                let key = item["key"].as_str().unwrap_or_default();
                let path = item["path"].as_str().unwrap_or(key);
                match data.get(key) {
                    Some(bytes) => {
                        write_file(dir, path, bytes, mode_of(&item["mode"], default_mode))?
                    }
                    None if optional => {}
                    None if resource == "secrets" => {
                        return Err(format!("references non-existent secret key: {key}"));
                    }
                    None => {
                        return Err(format!(
                            "configmap references non-existent config key: {key}"
                        ));
                    }
                }
            }
        }
        None => {
            for (key, bytes) in &data {
                write_file(dir, key, bytes, default_mode)?;
            }
        }
    }
    Ok(())
}

fn write_downward(
    dir: &Path,
    items: &Value,
    default_mode: u32,
    fields: &PodFields<'_>,
) -> Result<(), String> {
    for item in items.as_array().into_iter().flatten() {
        let path = item["path"].as_str().unwrap_or_default();
        let value = match item.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
            Some(fp) => fields
                .volume_field(fp)
                .ok_or_else(|| format!("unsupported fieldPath: {fp}"))?,
            None => String::new(),
        };
        write_file(
            dir,
            path,
            value.as_bytes(),
            mode_of(&item["mode"], default_mode),
        )?;
    }
    Ok(())
}

/// The token the sandbox projects (it checks no credentials).
pub(super) const SANDBOX_TOKEN: &str = "agentdeck-sandbox-token";

/// Creates every volume of the pod under `pod_dir/volumes`, returning each
/// volume's host directory. An error is the kubelet's `MountVolume.SetUp`
/// message (the pod stays ContainerCreating and it is retried).
pub(super) fn prepare_volumes(
    fields: &PodFields<'_>,
    pod_dir: &Path,
    lookup: Lookup<'_>,
) -> Result<BTreeMap<String, PathBuf>, String> {
    let mut out = BTreeMap::new();
    for v in fields.pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let Some(name) = v["name"].as_str() else {
            continue;
        };
        let dir = pod_dir.join("volumes").join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let setup = |r: Result<(), String>| {
            r.map_err(|e| format!("MountVolume.SetUp failed for volume \"{name}\" : {e}"))
        };
        if let Some(s) = v.get("secret") {
            let secret = s["secretName"].as_str().unwrap_or_default();
            setup(write_keys(
                &dir,
                "secrets",
                s,
                secret,
                mode_of(&s["defaultMode"], 0o644),
                lookup,
            ))?;
        } else if let Some(c) = v.get("configMap") {
            let cm = c["name"].as_str().unwrap_or_default();
            setup(write_keys(
                &dir,
                "configmaps",
                c,
                cm,
                mode_of(&c["defaultMode"], 0o644),
                lookup,
            ))?;
        } else if let Some(d) = v.get("downwardAPI") {
            setup(write_downward(
                &dir,
                &d["items"],
                mode_of(&d["defaultMode"], 0o644),
                fields,
            ))?;
        } else if let Some(p) = v.get("projected") {
            let mode = mode_of(&p["defaultMode"], 0o644);
            for source in p["sources"].as_array().into_iter().flatten() {
                if let Some(s) = source.get("secret") {
                    let n = s["name"].as_str().unwrap_or_default();
                    setup(write_keys(&dir, "secrets", s, n, mode, lookup))?;
                }
                if let Some(c) = source.get("configMap") {
                    let n = c["name"].as_str().unwrap_or_default();
                    setup(write_keys(&dir, "configmaps", c, n, mode, lookup))?;
                }
                if let Some(d) = source.get("downwardAPI") {
                    setup(write_downward(&dir, &d["items"], mode, fields))?;
                }
                if let Some(t) = source.get("serviceAccountToken") {
                    let path = t["path"].as_str().unwrap_or("token");
                    setup(write_file(&dir, path, SANDBOX_TOKEN.as_bytes(), mode))?;
                }
            }
        }
        out.insert(name.to_string(), dir);
    }
    Ok(out)
}

/// The container's mounts, with `subPath` directories created. Mounts of
/// unknown volumes are left out.
pub(super) fn container_mounts(
    container: &Value,
    volumes: &BTreeMap<String, PathBuf>,
) -> Vec<ContainerMount> {
    let mut out = Vec::new();
    for m in container["volumeMounts"].as_array().into_iter().flatten() {
        let (Some(name), Some(path)) = (m["name"].as_str(), m["mountPath"].as_str()) else {
            continue;
        };
        let Some(dir) = volumes.get(name) else {
            continue;
        };
        let host = match m["subPath"]
            .as_str()
            .filter(|s| !s.is_empty())
            .and_then(safe_relative)
        {
            Some(sub) => {
                let d = dir.join(sub);
                if !d.exists() {
                    let _ = std::fs::create_dir_all(&d);
                }
                d
            }
            None => dir.clone(),
        };
        out.push(ContainerMount {
            path: path.to_string(),
            host,
            read_only: m["readOnly"].as_bool().unwrap_or(false),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn mounts(pairs: &[(&str, &str)]) -> Vec<ContainerMount> {
        pairs
            .iter()
            .map(|(path, host)| ContainerMount {
                path: (*path).to_string(),
                host: PathBuf::from(host),
                read_only: false,
            })
            .collect()
    }

    #[test]
    fn container_paths_map_to_the_longest_mount() {
        let m = mounts(&[
            ("/shared", "/h/vol/shared"),
            ("/var/run/agentdeck", "/h/vol/token"),
            ("/var", "/h/vol/var"),
            ("/etc/agentdeck/ca/", "/h/b"),
        ]);
        let r = |p: &str| resolve_host_path(Some(Path::new("/h")), &m, Path::new(p));
        assert_eq!(
            r("/shared/task/run.sh"),
            PathBuf::from("/h/vol/shared/task/run.sh")
        );
        assert_eq!(r("/shared"), PathBuf::from("/h/vol/shared"));
        assert_eq!(
            r("/var/run/agentdeck/token"),
            PathBuf::from("/h/vol/token/token")
        );
        assert_eq!(r("/var/lib/x"), PathBuf::from("/h/vol/var/lib/x"));
        assert_eq!(r("/etc/agentdeck/ca/ca.crt"), PathBuf::from("/h/b/ca.crt"));
        assert_eq!(r("/sharedx/a"), PathBuf::from("/sharedx/a"));
        assert_eq!(r("/etc/hosts"), PathBuf::from("/etc/hosts"));
        assert_eq!(r("relative/shared"), PathBuf::from("relative/shared"));
    }

    #[test]
    fn mapping_a_host_path_again_changes_nothing() {
        let m = mounts(&[("/tmp", "/tmp/sb/pod/volumes/tmp")]);
        let root = Path::new("/tmp/sb/pod");
        let once = resolve_host_path(Some(root), &m, Path::new("/tmp/x"));
        assert_eq!(once, PathBuf::from("/tmp/sb/pod/volumes/tmp/x"));
        assert_eq!(resolve_host_path(Some(root), &m, &once), once);
    }

    #[test]
    fn scripts_have_standalone_mount_paths_rewritten() {
        let m = mounts(&[("/shared", "/h/s")]);
        assert_eq!(
            map_script_paths(
                "task=/shared/task\ncat \"/shared\" /sharedx /a/shared $x/shared",
                &m
            ),
            "task=/h/s/task\ncat \"/h/s\" /sharedx /a/shared $x/shared"
        );
    }

    fn lookup(resource: &str, name: &str) -> Option<Arc<Value>> {
        match (resource, name) {
            ("secrets", "agent-token") => Some(Arc::new(
                json!({"data": {"token": "dG9r", "extra": "eA=="}}),
            )),
            ("configmaps", "corp-ca") => Some(Arc::new(json!({"data": {"ca.crt": "PEM"}}))),
            _ => None,
        }
    }

    #[test]
    fn secret_config_map_and_projected_volumes_are_written_as_files() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let pod = json!({
            "metadata": {"name": "p", "namespace": "prod"},
            "spec": {"volumes": [
                {"name": "shared", "emptyDir": {}},
                {"name": "token", "secret": {"secretName": "agent-token", "defaultMode": 0o400,
                                             "items": [{"key": "token", "path": "token"}]}},
                {"name": "ca", "configMap": {"name": "corp-ca"}},
                {"name": "api", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
                ]}}
            ]}
        });
        let fields = PodFields {
            pod: &pod,
            pod_ip: "127.1.0.1",
            host_ip: "127.0.0.1",
        };
        let vols = prepare_volumes(&fields, tmp.path(), &lookup).expect("mounted");
        assert!(vols["shared"].is_dir());
        let token = vols["token"].join("token");
        assert_eq!(std::fs::read(&token).expect("token"), b"tok");
        let mode = std::fs::metadata(&token)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o400);
        assert!(!vols["token"].join("extra").exists());
        assert_eq!(
            std::fs::read(vols["ca"].join("ca.crt")).expect("ca"),
            b"PEM"
        );
        assert_eq!(
            std::fs::read(vols["api"].join("namespace")).expect("ns"),
            b"prod"
        );
        assert_eq!(
            std::fs::read(vols["api"].join("token")).expect("t"),
            SANDBOX_TOKEN.as_bytes()
        );
        // Mounting again (a retry) succeeds over the read-only files.
        prepare_volumes(&fields, tmp.path(), &lookup).expect("mounted again");

        let c = json!({"volumeMounts": [
            {"name": "shared", "mountPath": "/shared"},
            {"name": "shared", "mountPath": "/work", "subPath": "w", "readOnly": true},
            {"name": "missing", "mountPath": "/x"}
        ]});
        let mounts = container_mounts(&c, &vols);
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[1].host, vols["shared"].join("w"));
        assert!(mounts[1].host.is_dir());
        assert!(!mounts[0].read_only && mounts[1].read_only);
    }

    #[test]
    fn a_missing_secret_fails_the_mount_unless_optional() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let pod = json!({"metadata": {"name": "p"}, "spec": {"volumes": [
            {"name": "s", "secret": {"secretName": "nope"}}
        ]}});
        let fields = PodFields {
            pod: &pod,
            pod_ip: "",
            host_ip: "",
        };
        assert_eq!(
            prepare_volumes(&fields, tmp.path(), &lookup),
            Err(
                "MountVolume.SetUp failed for volume \"s\" : secret \"nope\" not found".to_string()
            )
        );
        let pod = json!({"metadata": {"name": "p"}, "spec": {"volumes": [
            {"name": "s", "secret": {"secretName": "nope", "optional": true}}
        ]}});
        let fields = PodFields {
            pod: &pod,
            pod_ip: "",
            host_ip: "",
        };
        assert!(prepare_volumes(&fields, tmp.path(), &lookup).is_ok());
    }
}
