//! The kubelet's own directory (`$TMPDIR/agentdeck-sandbox-<pid>-<hex>`):
//! pods' volumes, token files and task logs live there, so it must not
//! outlive the sandbox. A guard removes it on every way the kubelet ends —
//! a clean stop, a runtime dropped under it (tests, Ctrl-C), a panic — and
//! each start removes those left by sandboxes that were killed (SIGKILL
//! runs no code) and whose process is gone.

use std::path::{Path, PathBuf};

/// Name prefix of every kubelet root in the temp directory.
pub const PREFIX: &str = "agentdeck-sandbox-";

/// A fresh root for this process: `<temp>/agentdeck-sandbox-<pid>-<hex8>`.
pub fn fresh_root(temp: &Path) -> PathBuf {
    temp.join(format!(
        "{PREFIX}{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ))
}

/// The pid a root directory name belongs to, when `name` is one.
pub fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, suffix) = rest.split_once('-')?;
    let is_suffix = suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_suffix {
        return None;
    }
    pid.parse().ok()
}

/// Removes the roots in `temp` whose process no longer runs (`alive` says
/// whether a pid runs); returns how many went. Files (such as the
/// `agentdeck-sandbox-<port>.kubeconfig` the CLI writes) are left alone.
pub fn remove_stale(temp: &Path, alive: impl Fn(u32) -> bool) -> usize {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || alive(pid) {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                tracing::info!(dir = %entry.path().display(), pid, "removed the directory of a sandbox that is gone");
                removed += 1;
            }
            Err(e) => {
                tracing::debug!(dir = %entry.path().display(), error = %e, "cannot remove a stale sandbox directory");
            }
        }
    }
    removed
}

/// Whether process `pid` runs (Linux: `/proc/<pid>` exists).
pub fn pid_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes its directory when dropped, however its owner ends.
#[derive(Debug)]
pub struct RootGuard(pub PathBuf);

impl Drop for RootGuard {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::debug!(dir = %self.0.display(), error = %e, "cannot remove the sandbox directory");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_names_are_recognised_with_their_pid() {
        let cases = [
            ("agentdeck-sandbox-1234-0badf00d", Some(1234)),
            ("agentdeck-sandbox-1-ffffffff", Some(1)),
            ("agentdeck-sandbox-8080.kubeconfig", None),
            ("agentdeck-sandbox-12-xyz", None),
            ("agentdeck-sandbox-12-0badf00d0", None),
            ("other-1234-0badf00d", None),
        ];
        for (name, pid) in cases {
            assert_eq!(owner_pid(name), pid, "{name}");
        }
        let fresh = fresh_root(Path::new("/t"));
        let name = fresh.file_name().and_then(|n| n.to_str()).expect("name");
        assert_eq!(owner_pid(name), Some(std::process::id()));
    }

    #[test]
    fn only_directories_of_dead_processes_are_removed() {
        let temp = tempfile::tempdir().expect("temp dir");
        let make = |name: &str| {
            let dir = temp.path().join(name);
            std::fs::create_dir_all(dir.join("pod/volumes")).expect("mkdir");
            std::fs::write(dir.join("pod/volumes/token"), "secret").expect("write");
            dir
        };
        let dead = make("agentdeck-sandbox-111-0000000a");
        let live = make("agentdeck-sandbox-222-0000000b");
        let unrelated = make("something-else");
        let kubeconfig = temp.path().join("agentdeck-sandbox-333-0000000c");
        std::fs::write(&kubeconfig, "a file, not a root").expect("write");
        assert_eq!(remove_stale(temp.path(), |pid| pid == 222), 1);
        assert!(!dead.exists());
        assert!(live.exists() && unrelated.exists() && kubeconfig.exists());
    }

    #[test]
    fn the_guard_removes_its_directory_with_everything_in_it() {
        let temp = tempfile::tempdir().expect("temp dir");
        let root = temp.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::write(root.join("a/b/log"), "x").expect("write");
        drop(RootGuard(root.clone()));
        assert!(!root.exists());
        // Already gone: nothing to do, no panic.
        drop(RootGuard(root));
    }

    #[test]
    fn this_process_is_alive() {
        assert!(pid_alive(std::process::id()));
    }
}
