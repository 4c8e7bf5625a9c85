//! The Secret values an agent was handed, so that what it prints of a task
//! never carries them: the pod log is followed into the log-tails
//! ConfigMap, read by support bundles and kept by log collectors, all of
//! them readable by people who may not read the Secret.
//!
//! The agent knows them without reading any Secret (its Role grants none):
//! its token file, the variables its container draws from a Secret
//! (`env[].valueFrom.secretKeyRef`, as its own pod spec says, and their
//! values from its own environment) and the files of Secret volumes
//! mounted into its container. `envFrom` Secrets are not told apart from
//! other variables and are not covered.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Volume};
use kube::Api;

use crate::redact::{MIN_LITERAL, Redactor};

/// Largest Secret file read from a mounted volume (a Secret holds 1 MiB at
/// most; a key longer than this is a certificate bundle, not a password).
const MAX_FILE: u64 = 64 * 1024;

/// Names of the variables `container` of `pod` draws from a Secret. Pure.
pub fn secret_env_names(pod: &Pod, container: &str) -> Vec<String> {
    own_container(pod, container)
        .and_then(|c| c.env.as_ref())
        .into_iter()
        .flatten()
        .filter(|e| {
            e.value_from
                .as_ref()
                .is_some_and(|v| v.secret_key_ref.is_some())
        })
        .map(|e| e.name.clone())
        .collect()
}

/// Where `container` of `pod` mounts a Secret (a `secret` volume, or a
/// `projected` one with a Secret source). Pure.
pub fn secret_mount_paths(pod: &Pod, container: &str) -> Vec<String> {
    let volumes: Vec<&Volume> = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter(|v| {
            v.secret.is_some()
                || v.projected
                    .as_ref()
                    .is_some_and(|p| p.sources.iter().flatten().any(|s| s.secret.is_some()))
        })
        .collect();
    own_container(pod, container)
        .and_then(|c| c.volume_mounts.as_ref())
        .into_iter()
        .flatten()
        .filter(|m| volumes.iter().any(|v| v.name == m.name))
        .map(|m| m.mount_path.clone())
        .collect()
}

fn own_container<'p>(pod: &'p Pod, name: &str) -> Option<&'p Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)
}

/// The value itself and, if it differs, without surrounding whitespace (a
/// file's trailing newline is not part of what a task prints).
fn literal_forms(value: &[u8], out: &mut Vec<Vec<u8>>) {
    let trimmed = value.trim_ascii();
    for v in [value, trimmed] {
        if v.len() >= MIN_LITERAL && !out.iter().any(|o| o == v) {
            out.push(v.to_vec());
        }
    }
}

/// Every file directly in `dir` (a Secret volume: one file per key, the
/// `..data` links of the kubelet skipped), at most [`MAX_FILE`] each.
fn files_in(dir: &Path, out: &mut Vec<Vec<u8>>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        // A mount of one key (subPath) is a file.
        if let Ok(meta) = std::fs::metadata(dir)
            && meta.is_file()
            && meta.len() <= MAX_FILE
            && let Ok(bytes) = std::fs::read(dir)
        {
            literal_forms(&bytes, out);
        }
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with("..") {
            continue;
        }
        let path = entry.path();
        if let Ok(meta) = std::fs::metadata(&path)
            && meta.is_file()
            && meta.len() <= MAX_FILE
            && let Ok(bytes) = std::fs::read(&path)
        {
            literal_forms(&bytes, out);
        }
    }
}

/// The Secret values known to the agent: `token`, the values in `env` of
/// the variables named in `env_names`, and the files under `mounts`.
pub fn known_secrets(
    token: Option<&str>,
    env: &BTreeMap<String, String>,
    env_names: &[String],
    mounts: &[String],
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(t) = token {
        literal_forms(t.as_bytes(), &mut out);
    }
    for name in env_names {
        if let Some(v) = env.get(name) {
            literal_forms(v.as_bytes(), &mut out);
        }
    }
    for dir in mounts {
        files_in(Path::new(dir), &mut out);
    }
    out
}

/// The redactor for what this agent prints: [`known_secrets`] of its own
/// container (`container` of pod `pod` in `namespace`, read once) and the
/// bundle's built-in rules. Without its pod (no API yet), the token and
/// the rules alone.
pub async fn redactor_for(
    client: kube::Client,
    namespace: &str,
    pod: Option<&str>,
    container: &str,
    token: Option<&str>,
    env: &BTreeMap<String, String>,
) -> Redactor {
    let spec = match pod {
        Some(name) => {
            let pods: Api<Pod> = Api::namespaced(client, namespace);
            match tokio::time::timeout(Duration::from_secs(10), pods.get(name)).await {
                Ok(Ok(p)) => Some(p),
                Ok(Err(e)) => {
                    tracing::warn!(pod = name, error = %e, "cannot read the agent's own pod; only its token is redacted from task output");
                    None
                }
                Err(_) => {
                    tracing::warn!(
                        pod = name,
                        "the agent's own pod did not come in 10 s; only its token is redacted from task output"
                    );
                    None
                }
            }
        }
        None => None,
    };
    let (names, mounts) = spec.as_ref().map_or_else(Default::default, |p| {
        (
            secret_env_names(p, container),
            secret_mount_paths(p, container),
        )
    });
    let secrets = known_secrets(token, env, &names, &mounts);
    tracing::debug!(
        count = secrets.len(),
        "Secret values redacted from task output"
    );
    Redactor::new(&secrets)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::redact::RedactionCounts;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "a-0"},
            "spec": {
                "containers": [
                    {"name": "agent",
                     "env": [
                        {"name": "PLAIN", "value": "not-a-secret"},
                        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
                        {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "r"}}}
                     ],
                     "volumeMounts": [
                        {"name": "token", "mountPath": "/etc/agentdeck/token"},
                        {"name": "creds", "mountPath": "/creds"},
                        {"name": "ca", "mountPath": "/etc/agentdeck/ca"},
                        {"name": "shared", "mountPath": "/shared"}
                     ]},
                    {"name": "sidecar",
                     "env": [{"name": "OTHER", "valueFrom": {"secretKeyRef": {"name": "o", "key": "k"}}}]}
                ],
                "volumes": [
                    {"name": "token", "secret": {"secretName": "t"}},
                    {"name": "creds", "projected": {"sources": [{"secret": {"name": "cloud"}}]}},
                    {"name": "ca", "configMap": {"name": "corp-ca"}},
                    {"name": "shared", "emptyDir": {}}
                ]
            }
        }))
        .expect("pod")
    }

    #[test]
    fn only_the_agent_containers_secret_variables_and_mounts_are_taken() {
        assert_eq!(secret_env_names(&pod(), "agent"), ["DB_PASSWORD"]);
        assert_eq!(
            secret_mount_paths(&pod(), "agent"),
            ["/etc/agentdeck/token", "/creds"]
        );
        assert_eq!(secret_env_names(&pod(), "sidecar"), ["OTHER"]);
        assert!(secret_mount_paths(&pod(), "nosuch").is_empty());
    }

    #[test]
    fn known_secrets_are_the_token_the_secret_variables_and_the_mounted_files() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("access-key"), "AKIAPLANTED0001\n").expect("write");
        std::fs::write(dir.path().join("short"), "abc").expect("write");
        std::fs::create_dir(dir.path().join("..2026_data")).expect("dir");
        std::fs::write(dir.path().join("..2026_data").join("x"), "hidden-dir").expect("write");
        let env = BTreeMap::from([
            ("DB_PASSWORD".to_owned(), "s3cr3t-db-pw".to_owned()),
            ("PLAIN".to_owned(), "not-a-secret".to_owned()),
        ]);
        let got = known_secrets(
            Some("tok-123456\n"),
            &env,
            &["DB_PASSWORD".to_owned(), "UNSET".to_owned()],
            &[dir.path().display().to_string()],
        );
        let got: Vec<String> = got
            .into_iter()
            .map(|v| String::from_utf8(v).expect("utf-8"))
            .collect();
        assert_eq!(
            got,
            [
                "tok-123456\n",
                "tok-123456",
                "s3cr3t-db-pw",
                "AKIAPLANTED0001\n",
                "AKIAPLANTED0001"
            ]
        );
    }

    #[test]
    fn a_redactor_from_known_secrets_hides_each_of_them() {
        let env = BTreeMap::from([("DB_PASSWORD".to_owned(), "s3cr3t-db-pw".to_owned())]);
        let secrets = known_secrets(Some("tok-123456"), &env, &["DB_PASSWORD".to_owned()], &[]);
        let redactor = Redactor::with_hash_key(&secrets, b"k");
        let mut counts = RedactionCounts::new();
        let out = redactor.redact_str(
            "connecting with s3cr3t-db-pw as tok-123456 to not-a-secret\n",
            &mut counts,
        );
        assert!(!out.contains("s3cr3t-db-pw"), "{out}");
        assert!(!out.contains("tok-123456"), "{out}");
        assert!(out.contains("not-a-secret"), "{out}");
    }
}
