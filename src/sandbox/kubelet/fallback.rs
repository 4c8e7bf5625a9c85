//! Where the machine allows no mount namespace (no unprivileged user
//! namespaces, a seccomp profile refusing `unshare`, or
//! `AGENTDECK_SANDBOX_MOUNT_NAMESPACES=0`), containers run with the host's
//! view of the files and the kubelet hands them host paths instead, so
//! that product code still never needs to know it runs in the sandbox:
//!
//! - absolute paths under a mount in the container's arguments (also as
//!   `--flag=/path`) and variables become host paths (`PATH` excepted), and
//!   a shell script's mount paths are rewritten where they stand alone;
//! - an `agentdeck agent` gets the documented settings `tokenFile`,
//!   `sharedDir` and `workDir` as `AGENTDECK_AGENT_*` variables pointing at
//!   the host directories behind their default paths, unless the pod sets
//!   them itself;
//! - an `agentdeck` given no `--config` whose configuration file is mounted
//!   where it searches (`/etc/agentdeck/`) is given `--config <host file>`.
//!
//! The pod gets a `MountsNotAtPaths` Warning Event saying so.

use std::path::Path;

use super::policy;
use super::volumes::{ContainerMount, map_script_paths, resolve_host_path};

/// Rewrites `args` and `env` of a real-process container for the host
/// view; `shell` when `args` are `-c SCRIPT …` of a shell.
pub(super) fn host_paths(
    pod_dir: &Path,
    mounts: &[ContainerMount],
    args: &mut Vec<String>,
    env: &mut Vec<(String, String)>,
    shell: bool,
) {
    let map = |p: &str| -> String {
        resolve_host_path(Some(pod_dir), mounts, Path::new(p))
            .display()
            .to_string()
    };
    for (k, v) in env.iter_mut() {
        if k != "PATH" && v.starts_with('/') {
            *v = map(v);
        }
    }
    if shell {
        if let Some(script) = args.get_mut(1) {
            *script = map_script_paths(script, mounts);
        }
        return;
    }
    for a in args.iter_mut() {
        if a.starts_with('/') {
            *a = map(a);
        } else if let Some((flag, value)) = a.split_once('=')
            && flag.starts_with("--")
            && value.starts_with('/')
        {
            *a = format!("{flag}={}", map(value));
        }
    }
    let agent = policy::is_agent(args);
    if agent {
        for (var, path) in policy::agent_default_paths() {
            let host = resolve_host_path(Some(pod_dir), mounts, &path);
            if host != path && !env.iter().any(|(k, _)| k == var) {
                env.push((var.to_string(), host.display().to_string()));
            }
        }
    }
    let has_config = args
        .iter()
        .any(|a| a == "--config" || a.starts_with("--config="));
    if !has_config {
        let searched = policy::searched_config(agent);
        let host = resolve_host_path(Some(pod_dir), mounts, &searched);
        if host != searched && host.is_file() {
            args.push("--config".into());
            args.push(host.display().to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AGENT_CONFIG_FILE_NAME;

    fn mount(path: &str, host: &Path) -> ContainerMount {
        ContainerMount {
            path: path.into(),
            host: host.to_path_buf(),
            read_only: false,
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_agent_gets_its_default_paths_and_config_file_as_host_paths() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pod = dir.path();
        let config = pod.join("volumes/agent-config");
        std::fs::create_dir_all(&config).expect("dir");
        std::fs::write(config.join(AGENT_CONFIG_FILE_NAME), "concurrency: 2\n").expect("file");
        let mounts = vec![
            mount("/shared", &pod.join("volumes/shared")),
            mount("/var/run/agentdeck", &pod.join("volumes/token")),
            mount("/etc/agentdeck", &config),
        ];
        let mut args = strings(&["agent", "--task", "t"]);
        let mut env = vec![
            ("PATH".to_string(), "/usr/bin".to_string()),
            ("CA".to_string(), "/etc/agentdeck/ca.crt".to_string()),
            (
                "AGENTDECK_AGENT_WORK_DIR".to_string(),
                "/shared/mine".to_string(),
            ),
        ];
        host_paths(pod, &mounts, &mut args, &mut env, false);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("PATH").as_deref(), Some("/usr/bin"));
        assert_eq!(get("CA"), Some(config.join("ca.crt").display().to_string()));
        assert_eq!(
            get("AGENTDECK_AGENT_TOKEN_FILE"),
            Some(pod.join("volumes/token/token").display().to_string())
        );
        assert_eq!(
            get("AGENTDECK_AGENT_SHARED_DIR"),
            Some(pod.join("volumes/shared").display().to_string())
        );
        // Set by the pod: only mapped, not replaced.
        assert_eq!(
            get("AGENTDECK_AGENT_WORK_DIR"),
            Some(pod.join("volumes/shared/mine").display().to_string())
        );
        assert_eq!(
            args,
            strings(&[
                "agent",
                "--task",
                "t",
                "--config",
                &config.join(AGENT_CONFIG_FILE_NAME).display().to_string()
            ])
        );
    }

    #[test]
    fn the_daemons_config_argument_and_scripts_are_mapped() {
        let pod = Path::new("/pods/p");
        let mounts = vec![
            mount("/etc/agentdeck", Path::new("/pods/p/volumes/config")),
            mount("/shared", Path::new("/pods/p/volumes/shared")),
        ];
        let mut args = strings(&[
            "--daemon",
            "--config",
            "/etc/agentdeck/agentdeck.yaml",
            "--log-dir=/shared/logs",
        ]);
        let mut env = Vec::new();
        host_paths(pod, &mounts, &mut args, &mut env, false);
        assert_eq!(
            args,
            strings(&[
                "--daemon",
                "--config",
                "/pods/p/volumes/config/agentdeck.yaml",
                "--log-dir=/pods/p/volumes/shared/logs"
            ])
        );
        assert!(env.is_empty(), "not an agent: {env:?}");
        let mut args = strings(&["-c", "cat /shared/task/x"]);
        host_paths(pod, &mounts, &mut args, &mut env, true);
        assert_eq!(args[1], "cat /pods/p/volumes/shared/task/x");
    }
}
