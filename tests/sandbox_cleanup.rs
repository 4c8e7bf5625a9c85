//! `agentdeck sandbox` leaves nothing in the temp directory: its kubelet
//! directory (pool tokens, volumes, task logs) goes on SIGTERM, and one left
//! by a sandbox killed with SIGKILL goes when the next sandbox starts.

mod common;

use common::eventually_blocking;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const OBJECTS: &str = "apiVersion: v1
kind: Secret
metadata: {name: agent-token}
stringData: {token: s3cr3t}
---
apiVersion: v1
kind: Pod
metadata: {name: holder}
spec:
  containers:
  - name: c
    image: busybox
    command: [sleep, '3600']
    volumeMounts: [{name: token, mountPath: /var/run/token}]
  volumes:
  - name: token
    secret: {secretName: agent-token}
";

/// A sandbox process whose temp directory is `tmp`.
fn start(tmp: &Path, kubeconfig: &Path) -> Child {
    let _ = std::fs::remove_file(kubeconfig);
    let child = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .args(["sandbox", "--port", "0", "--kubeconfig-out"])
        .arg(kubeconfig)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sandbox starts");
    eventually_blocking("the sandbox's kubeconfig", || {
        kubeconfig.exists().then_some(())
    });
    child
}

/// The kubelet directories in `tmp`.
fn roots(tmp: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(tmp)
        .expect("read tmp")
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("agentdeck-sandbox-")
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Whether any file below `dir` holds `needle` (the mounted token).
fn holds(dir: &Path, needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let path = e.path();
        if path.is_dir() {
            holds(&path, needle)
        } else {
            std::fs::read_to_string(&path).is_ok_and(|t| t.contains(needle))
        }
    })
}

/// Creates a pod with a Secret volume and waits until its token is on disk.
fn mount_a_token(tmp: &Path, kubeconfig: &Path) -> PathBuf {
    let mut kubectl = Command::new("kubectl")
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    kubectl
        .stdin
        .take()
        .expect("stdin")
        .write_all(OBJECTS.as_bytes())
        .expect("objects written");
    let out = kubectl.wait_with_output().expect("kubectl ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually_blocking("the token mounted under the kubelet directory", || {
        roots(tmp).into_iter().find(|r| holds(r, "s3cr3t"))
    })
}

fn signal(child: &Child, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, signal).expect("signal sent");
}

#[test]
fn sigterm_removes_the_kubelet_directory() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let kubeconfig = tmp.path().join("kc").join("kubeconfig");
    std::fs::create_dir_all(kubeconfig.parent().expect("parent")).expect("mkdir");
    let mut sandbox = start(tmp.path(), &kubeconfig);
    let root = mount_a_token(tmp.path(), &kubeconfig);
    signal(&sandbox, Signal::SIGTERM);
    let status = sandbox.wait().expect("sandbox ends");
    assert!(status.success(), "{status:?}");
    assert!(!root.exists(), "{} left behind", root.display());
    assert_eq!(roots(tmp.path()), Vec::<PathBuf>::new());
}

#[test]
fn a_directory_left_by_sigkill_is_removed_by_the_next_start() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let kubeconfig = tmp.path().join("kc").join("kubeconfig");
    std::fs::create_dir_all(kubeconfig.parent().expect("parent")).expect("mkdir");
    let mut killed = start(tmp.path(), &kubeconfig);
    let stale = mount_a_token(tmp.path(), &kubeconfig);
    signal(&killed, Signal::SIGKILL);
    killed.wait().expect("killed sandbox reaped");
    assert!(
        stale.exists(),
        "SIGKILL runs no code: the directory is still there"
    );

    let mut next = start(tmp.path(), &kubeconfig);
    eventually_blocking("the dead sandbox's directory removed", || {
        (!stale.exists()).then_some(())
    });
    signal(&next, Signal::SIGTERM);
    assert!(next.wait().expect("sandbox ends").success());
    assert_eq!(roots(tmp.path()), Vec::<PathBuf>::new());
}
