//! Containers see their volumes at their mount paths, as on a cluster: a
//! ConfigMap directory under `/etc`, a `subPath` file, the service-account
//! directory under `/var/run/secrets`, a shared emptyDir between two
//! containers, `readOnly` enforced — and nothing of it created on the
//! host. A process joining a container's mount namespace (what `kubectl
//! exec` will do) sees the same files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentdeck::sandbox::kubelet::{KubeletConfig, mountns};
use common::{TestSandbox, eventually_blocking as poll, out};

const POD: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {agentdeck.yaml: "from the configmap\n", extra.yaml: "extra file\n"}
---
apiVersion: v1
kind: Pod
metadata:
  name: viewer
  annotations: {sandbox.agentdeck.dev/run-shell: "true"}
spec:
  containers:
  - name: reader
    image: busybox
    command: ["sh", "-c"]
    args:
    - |
      echo "config=$(cat /etc/agentdeck/agentdeck.yaml)"
      echo "sub=$(cat /etc/agentdeck-extra/extra.yaml)"
      echo "ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
      if echo x > /etc/agentdeck/new 2>/dev/null; then echo ro=writable; else echo ro=refused; fi
      echo hello > /shared/from-reader
      echo "hosts=$(test -s /etc/hosts && echo kept)"
      echo ready
      exec sleep 601
  - name: peer
    image: busybox
    command: ["sh", "-c", "until [ -f /data/from-reader ]; do sleep 0.1; done; echo peer=$(cat /data/from-reader); exec sleep 600"]
    volumeMounts:
    - {name: shared, mountPath: /data}
  volumes:
  - name: settings
    configMap: {name: settings}
  - name: shared
    emptyDir: {}
  - name: sa
    projected:
      sources:
      - downwardAPI:
          items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]
"#;

fn reader_mounts() -> &'static str {
    r#"[{"op": "add", "path": "/spec/containers/0/volumeMounts", "value": [
        {"name": "settings", "mountPath": "/etc/agentdeck", "readOnly": true},
        {"name": "settings", "mountPath": "/etc/agentdeck-extra/extra.yaml", "subPath": "extra.yaml"},
        {"name": "sa", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
        {"name": "shared", "mountPath": "/shared"}]}]"#
}

/// The reader's process (its script's `exec sleep 601`) in pod `pod`.
fn container_pid(pod: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let host = format!("HOSTNAME={pod}");
        let mine = env.split(|b| *b == 0).any(|kv| kv == host.as_bytes());
        let in_ns = std::fs::read_link(e.path().join("ns/mnt")).ok()
            != std::fs::read_link("/proc/self/ns/mnt").ok();
        (mine && in_ns && cmd == b"sleep\x00601\x00").then_some(pid)
    })
}

#[test]
fn containers_see_their_volumes_at_their_paths_and_a_joining_process_sees_the_same() {
    assert!(
        !Path::new("/shared").exists() && !Path::new("/etc/agentdeck").exists(),
        "this test needs a host without /shared and /etc/agentdeck"
    );
    let sb = TestSandbox::start_with(KubeletConfig {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_agentdeck")),
        mount_namespaces: true,
        ..KubeletConfig::from_env()
    });
    // The reader's mounts are added with a JSON patch before the pod is
    // created (kubectl would reject none of them; it keeps the YAML short).
    let mut docs: Vec<serde_json::Value> = POD
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).expect("yaml"))
        .collect();
    let patch: json_patch::Patch = serde_json::from_str(reader_mounts()).expect("patch");
    json_patch::patch(&mut docs[1], &patch).expect("patched");
    let stream: String = docs
        .iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect::<Vec<_>>()
        .join("\n");
    sb.kubectl_in_ok(&["apply", "-f", "-"], &stream);

    let log = poll("the reader's report", || {
        let o = sb.kubectl(&["logs", "viewer", "-c", "reader"]);
        let log = out(&o);
        log.contains("ready").then_some(log)
    });
    for line in [
        "config=from the configmap",
        "sub=extra file",
        "ns=default",
        "ro=refused",
        "hosts=kept",
    ] {
        assert!(log.lines().any(|l| l == line), "{line:?} in {log}");
    }
    let peer = poll("the peer to read the shared volume", || {
        let log = out(&sb.kubectl(&["logs", "viewer", "-c", "peer"]));
        log.contains("peer=").then_some(log)
    });
    assert!(peer.contains("peer=hello"), "{peer}");
    assert!(
        !Path::new("/shared").exists() && !Path::new("/etc/agentdeck").exists(),
        "mount points were created on the host"
    );

    // Joining the reader's mount namespace: the same files.
    let pid = poll("the reader's process", || container_pid("viewer"));
    let args = mountns::join_args(
        pid,
        Some(Path::new("/etc/agentdeck")),
        &[
            "/bin/sh".into(),
            "-c".into(),
            "pwd; cat agentdeck.yaml /shared/from-reader".into(),
        ],
    );
    let joined = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .args(&args)
        .output()
        .expect("joins");
    assert!(joined.status.success(), "{}", common::err(&joined));
    assert_eq!(out(&joined), "/etc/agentdeck\nfrom the configmap\nhello\n");
}

/// Where the machine lets an unprivileged user have namespaces (this CI
/// does), the same entry point works for one: a user namespace mapping
/// only its own uid, then the mount namespace. Needs root to become
/// `nobody` (util-linux `setpriv`); elsewhere there is nothing to run.
#[test]
fn an_unprivileged_user_gets_its_mounts_through_a_user_namespace_too() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("not root or no setpriv: nothing to run");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let open = |p: &Path| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).expect("chmod")
    };
    open(dir.path());
    let exe = dir.path().join("agentdeck");
    copy_binary(&exe);
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let vol = dir.path().join("vol");
    std::fs::create_dir(&vol).expect("vol");
    open(&vol);
    std::fs::write(vol.join("agentdeck.yaml"), "mine\n").expect("file");
    let command = [
        "/bin/sh".into(),
        "-c".into(),
        "id -u; cat /etc/agentdeck/agentdeck.yaml; touch /etc/agentdeck/x 2>/dev/null || echo refused; \
         touch /shared/y && echo written"
            .into(),
    ];
    let args = mountns::create_args(
        &dir.path().join("rootfs"),
        None,
        &[
            mountns::Mount {
                source: vol.clone(),
                target: "/etc/agentdeck".into(),
                read_only: true,
            },
            mountns::Mount {
                source: vol.clone(),
                target: "/shared".into(),
                read_only: false,
            },
        ],
        false,
        &command,
    );
    let o = Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args(&args)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", common::err(&o));
    assert_eq!(out(&o), "65534\nmine\nrefused\nwritten\n");
    assert!(vol.join("y").exists(), "written through to the volume");
    assert!(!Path::new("/shared").exists());
    // No PID namespace for it, and the probe says why: its uid maps to
    // itself, so the command's first process has no capability left after
    // its exec to mount the namespace's /proc.
    let probe = Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args(mountns::probe_args(&dir.path().join("probe")))
        .output()
        .expect("probes");
    assert!(probe.status.success(), "{}", common::err(&probe));
    let why = mountns::probed_pid_namespace(&out(&probe)).expect_err("no PID namespace");
    assert!(
        why.contains("cannot mount /proc for the PID namespace: EPERM"),
        "{why}"
    );
}

/// A sandbox and controller started from a copy of the binary under `/tmp`,
/// as `cargo run` from a checkout cloned there starts them: the pods'
/// emptyDir at `/tmp` hides that path, so containers run the binary from a
/// path of its own (`/usr/local/bin/agentdeck`, as the image has it).
#[test]
fn a_sandbox_started_from_a_binary_under_tmp_runs_a_pool_whose_task_succeeds() {
    use std::process::Stdio;
    let dir = tempfile::Builder::new()
        .prefix("agentdeck-checkout-")
        .tempdir_in("/tmp")
        .expect("temp dir under /tmp");
    let bin = dir.path().join("target/debug/agentdeck");
    std::fs::create_dir_all(bin.parent().expect("parent")).expect("mkdir");
    copy_binary(&bin);
    let kubeconfig = dir.path().join("kubeconfig");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let run = |program: &Path, args: &[&str], stdin: Option<&str>| {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", &home)
            .env_remove("AGENTDECK_SANDBOX_EXE")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("starts");
        if let Some(text) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("stdin written");
        }
        child.wait_with_output().expect("ends")
    };
    let ok = |program: &Path, args: &[&str], stdin: Option<&str>| {
        let o = run(program, args, stdin);
        assert!(o.status.success(), "{args:?}: {}", common::err(&o));
        out(&o)
    };
    let kubectl = Path::new("kubectl");

    let sandbox = Command::new(&bin)
        .args(["sandbox", "--port", "0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .env_remove("AGENTDECK_SANDBOX_EXE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sandbox starts");
    let _sandbox = Stopped(sandbox);
    poll("the sandbox's kubeconfig", || {
        kubeconfig.exists().then_some(())
    });
    let crds = ok(&bin, &["crds"], None);
    ok(kubectl, &["apply", "-f", "-"], Some(&crds));
    ok(kubectl, &["create", "namespace", "agentdeck-system"], None);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let daemon = Command::new(&bin)
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
    let _daemon = Stopped(daemon);
    ok(
        kubectl,
        &["apply", "-f", "config/pool-quickstart.yaml"],
        None,
    );
    let task = "apiVersion: agentdeck.dev/v1alpha1
kind: AgentTask
metadata: {name: from-tmp}
spec: {pool: quickstart, command: [sh, -c, 'echo ran from /tmp']}
";
    ok(kubectl, &["create", "-f", "-"], Some(task));
    let phase = poll("the task to finish", || {
        let o = run(
            kubectl,
            &["get", "at", "from-tmp", "-o", "jsonpath={.status.phase}"],
            None,
        );
        let phase = out(&o);
        matches!(phase.as_str(), "Succeeded" | "Failed" | "Errored").then_some(phase)
    });
    let pods = out(&run(kubectl, &["get", "pods", "-o", "wide"], None));
    assert_eq!(phase, "Succeeded", "{pods}");
}

/// A child process stopped with SIGTERM (and waited for) however the test ends.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.0.wait();
    }
}

/// Copies the binary under test to `to` with `cp`: a copy written by this
/// (multi-threaded) process leaves a writable descriptor that a child forked
/// meanwhile by another test thread holds until it execs, and executing the
/// copy then fails with "Text file busy".
fn copy_binary(to: &Path) {
    let status = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_agentdeck"))
        .arg(to)
        .status()
        .expect("cp runs");
    assert!(status.success(), "binary copied to {}", to.display());
}
