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

/// Runs kubectl against the sandbox of `kubeconfig`; its stdout.
fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("stdin written");
    }
    let out = child.wait_with_output().expect("kubectl ends");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every process below `top`, from `/proc`: (pid, command line).
fn descendants(top: u32) -> Vec<(i32, String)> {
    let procs: Vec<(i32, i32, String)> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let ppid: i32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            Some((pid, ppid, cmd))
        })
        .collect();
    let mut out = Vec::new();
    let mut queue = vec![i32::try_from(top).expect("pid")];
    while let Some(p) = queue.pop() {
        for (pid, ppid, cmd) in &procs {
            if *ppid == p {
                out.push((*pid, cmd.clone()));
                queue.push(*pid);
            }
        }
    }
    out
}

/// A shell pod whose script leaves processes of its own behind: one in the
/// background, one in a session of its own (out of the container's group).
const LEAVER: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: leaver
  annotations: {sandbox.agentdeck.dev/run-shell: "true"}
spec:
  containers:
  - name: c
    image: busybox
    command: ["sh", "-c", "sleep 3607 & setsid sleep 3608 & echo started; exec sleep 3609"]
"#;

#[test]
fn sigkill_of_the_sandbox_ends_every_process_it_started() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let kubeconfig = tmp.path().join("kc").join("kubeconfig");
    std::fs::create_dir_all(kubeconfig.parent().expect("parent")).expect("mkdir");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let mut sandbox = start(tmp.path(), &kubeconfig);
    let crds = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .arg("crds")
        .output()
        .expect("crds");
    kubectl(
        &kubeconfig,
        &home,
        &["apply", "-f", "-"],
        Some(&String::from_utf8_lossy(&crds.stdout)),
    );
    kubectl(
        &kubeconfig,
        &home,
        &["create", "namespace", "agentdeck-system"],
        None,
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .arg("--daemon")
        .env_remove("AGENTDECK_SANDBOX_EXE")
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", &home)
        .env("AGENTDECK_SERVER__PORT", port.to_string())
        .current_dir(&home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("daemon starts");
    kubectl(
        &kubeconfig,
        &home,
        &["apply", "-f", "config/pool-quickstart.yaml"],
        None,
    );
    kubectl(&kubeconfig, &home, &["apply", "-f", "-"], Some(LEAVER));
    let before = eventually_blocking("an agent and the leaver's processes", || {
        let below = descendants(sandbox.id());
        let agent = below.iter().any(|(_, c)| c.contains(" agent"));
        let leavers = ["sleep 3607", "sleep 3608", "sleep 3609"]
            .iter()
            .all(|s| below.iter().any(|(_, c)| c.trim_end() == *s));
        (agent && leavers).then_some(below)
    });
    let _ = daemon.kill();
    let _ = daemon.wait();

    signal(&sandbox, Signal::SIGKILL);
    sandbox.wait().expect("killed sandbox reaped");
    let started = std::time::Instant::now();
    let alive = |pid: i32| {
        // Gone, or a zombie not yet reaped by whoever adopted it.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .is_some_and(|zombie| !zombie)
    };
    loop {
        let left: Vec<&(i32, String)> = before.iter().filter(|(p, _)| alive(*p)).collect();
        if left.is_empty() {
            break;
        }
        if started.elapsed() > std::time::Duration::from_secs(5) {
            for (pid, _) in &left {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
            panic!("still running 5 s after the sandbox's SIGKILL: {left:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
