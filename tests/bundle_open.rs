//! The bundle's receiver: a bundle taken from a live sandbox with the
//! daemon, three finished tasks whose output names a customer, then the
//! cluster and the daemon stopped — and the receiver, holding only the
//! zip, opens it in the console (tmux) and serves it to kubectl.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::tmux::Tmux;
use common::{TestSandbox, eventually_blocking as poll, out};
use serde_json::Value;

/// A name no secret rule knows: it reaches the bundle as the task printed it.
pub const CUSTOMER: &str = "Globex-Corporation-Springfield";

fn tasks_yaml() -> String {
    let mut y = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 1..=3 {
        y.push_str(&format!(
            "  - apiVersion: agentdeck.dev/v1alpha1\n    kind: AgentTask\n    metadata:\n      name: plan-{i}\n    spec:\n      pool: quickstart\n      command: [sh, -c, 'echo \"plan {i} for customer {CUSTOMER}\"; echo \"plan {i}: no changes\"']\n"
        ));
    }
    y
}

/// Takes the bundle of the done-when: a pool, its daemon, three finished
/// tasks. Everything is stopped when this returns; only the zip is left.
fn take_bundle(dir: &Path) -> PathBuf {
    // SAFETY: set before the sandbox (and any other thread) starts.
    unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    let sb = TestSandbox::start();
    sb.install();
    let home = tempfile::tempdir().expect("temp dir");
    let (mut daemon, port) = sb.daemon(home.path());
    sb.kubectl_ok(&["apply", "-f", "config/pool-quickstart.yaml"]);
    sb.kubectl_in_ok(&["create", "-f", "-"], &tasks_yaml());
    poll("the three tasks to succeed", || {
        let o = sb.kubectl(&["get", "at", "-o", "json"]);
        let list: Value = serde_json::from_slice(&o.stdout).ok()?;
        let items = list["items"].as_array()?;
        (items.len() == 3
            && items.iter().all(|t| {
                t["status"]["phase"] == "Succeeded"
                    && t["status"]["output"]["configMap"].is_string()
            }))
        .then_some(())
    });
    // An agent that answers its probe, so the bundle holds its health.
    poll("a fresh agent", || {
        let o = sb.kubectl(&[
            "get",
            "ap",
            "quickstart",
            "-o",
            "jsonpath={.status.health.fresh}",
        ]);
        (out(&o).trim().parse::<i32>().ok()? > 0).then_some(())
    });
    let zip = dir.join("B.zip");
    let o = sb.agentdeck(&[
        "bundle",
        "-n",
        "default",
        "-o",
        zip.to_str().expect("path"),
        "--controller-url",
        &format!("http://127.0.0.1:{port}"),
    ]);
    assert!(o.status.success(), "bundle: {}{}", out(&o), common::err(&o));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(daemon.id()).expect("pid"));
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = daemon.wait();
    drop(sb);
    zip
}

struct Served {
    child: Child,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Served {
    fn start(zip: &Path) -> Served {
        let home = tempfile::tempdir().expect("temp dir");
        let kubeconfig = home.path().join("kubeconfig");
        let child = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .args(["sandbox", "--from-bundle"])
            .arg(zip)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sandbox starts");
        poll("the bundle's kubeconfig", || {
            kubeconfig.exists().then_some(())
        });
        Served {
            child,
            kubeconfig,
            home,
        }
    }

    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.home.path())
            .output()
            .expect("kubectl runs")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_bundle_opens_in_the_console_and_serves_kubectl_after_the_cluster_is_gone() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let zip = take_bundle(dir.path());

    // The bundle says what format it is and holds the audit and (absent,
    // said why) history entries of format 2.
    let manifest: Value = {
        let f = std::fs::File::open(&zip).expect("zip");
        let mut z = zip::ZipArchive::new(f).expect("a zip");
        serde_json::from_reader(z.by_name("manifest.json").expect("manifest")).expect("json")
    };
    assert_eq!(manifest["formatVersion"], 2, "{manifest}");
    assert_eq!(manifest["history"]["recorded"], false, "{manifest}");

    // kubectl against the served bundle.
    let served = Served::start(&zip);
    let o = served.kubectl(&["get", "agenttasks", "-o", "name"]);
    let names = out(&o);
    for i in 1..=3 {
        assert!(
            names.contains(&format!("agenttask.agentdeck.dev/plan-{i}")),
            "{names}"
        );
    }
    let o = served.kubectl(&["get", "pod", "-o", "name"]);
    let pods = out(&o);
    let agent = pods
        .lines()
        .find_map(|l| {
            l.strip_prefix("pod/")
                .filter(|p| p.starts_with("iac-agent-quickstart-"))
        })
        .unwrap_or_else(|| panic!("an agent pod: {pods}"))
        .to_owned();
    let o = served.kubectl(&["logs", &agent]);
    assert!(o.status.success(), "logs: {}", common::err(&o));
    assert!(!out(&o).trim().is_empty(), "the agent's log is empty");
    let o = served.kubectl(&["describe", "agenttask", "plan-1"]);
    assert!(
        out(&o).contains(CUSTOMER),
        "describe shows the task's output: {}",
        out(&o)
    );
    // Writes are refused, saying why.
    let o = served.kubectl(&["delete", "agenttask", "plan-1"]);
    assert!(!o.status.success());
    let e = common::err(&o);
    assert!(
        e.contains("MethodNotAllowed") || e.contains("not allowed"),
        "{e}"
    );
    assert!(e.contains("support bundle B.zip"), "{e}");
    let o = served.kubectl(&["get", "agenttask", "plan-1"]);
    assert!(o.status.success(), "still there after the refused delete");
    python_client_reads(&served, &agent);
    drop(served);

    // The console on the bundle.
    let t = Tmux::start(&["--bundle", zip.to_str().expect("path")], &[], 160, 30);
    let s = t.wait("the pools of the bundle", |s| {
        s.contains("bundle B.zip") && s.contains("quickstart") && s.contains("Pools [1/1]")
    });
    assert!(s.contains("read-only"), "{s}");
    t.send(&["3"]);
    let s = t.wait("its three tasks", |s| s.contains("Tasks [3/3]"));
    for i in 1..=3 {
        assert!(s.contains(&format!("plan-{i}")), "{s}");
    }
    t.send(&["1"]);
    t.wait("back on the pools", |s| s.contains("Pools [1/1]"));
    t.send(&["s"]);
    t.wait("s saying the bundle is read-only", |s| {
        s.contains("read-only: B.zip is a support bundle")
    });
    t.send(&["q"]);
    t.wait("the console to exit 0", |s| s.contains("EXIT=0"));
}

/// The official Python client (strict models: every field a real server
/// always writes must be there) reads the served bundle too, and is refused
/// a write with 405. Skipped, with a note, without the client.
fn python_client_reads(served: &Served, agent: &str) {
    let have = Command::new("python3")
        .args(["-c", "import kubernetes"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!(
            "note: skipped: the Python Kubernetes client is not installed (pip install kubernetes)"
        );
        return;
    }
    const SCRIPT: &str = r#"
import json, sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
custom = client.CustomObjectsApi()
seen = {}
seen["tasks"] = sorted(t["metadata"]["name"] for t in custom.list_namespaced_custom_object(
    "agentdeck.dev", "v1alpha1", "default", "agenttasks")["items"])
seen["pods"] = [p.metadata.name for p in v1.list_namespaced_pod("default").items]
seen["deployments"] = [d.metadata.name for d in client.AppsV1Api().list_namespaced_deployment("default").items]
seen["log"] = v1.read_namespaced_pod_log(sys.argv[2], "default")
try:
    v1.delete_namespaced_pod(sys.argv[2], "default")
except ApiException as e:
    seen["delete"] = [e.status, json.loads(e.body)["reason"]]
print(json.dumps(seen))
"#;
    let o = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(&served.kubeconfig)
        .arg(agent)
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}\n{}", out(&o), common::err(&o));
    let seen: Value = serde_json::from_str(out(&o).trim()).expect("script prints JSON");
    assert_eq!(
        seen["tasks"],
        serde_json::json!(["plan-1", "plan-2", "plan-3"]),
        "{seen}"
    );
    assert!(
        seen["pods"]
            .as_array()
            .is_some_and(|p| p.iter().any(|n| n == agent)),
        "{seen}"
    );
    assert_eq!(
        seen["deployments"],
        serde_json::json!(["iac-agent-quickstart"]),
        "{seen}"
    );
    assert!(
        seen["log"].as_str().is_some_and(|l| !l.is_empty()),
        "{seen}"
    );
    assert_eq!(
        seen["delete"],
        serde_json::json!([405, "MethodNotAllowed"]),
        "{seen}"
    );
}

#[test]
fn a_damaged_or_foreign_zip_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A zip of other files.
    let foreign = dir.path().join("photos.zip");
    {
        let mut z = zip::ZipWriter::new(std::fs::File::create(&foreign).expect("create"));
        z.start_file("a.jpg", zip::write::SimpleFileOptions::default())
            .expect("entry");
        std::io::Write::write_all(&mut z, b"not a bundle").expect("write");
        z.finish().expect("finish");
    }
    // Not a zip at all (a bundle cut short in transfer looks like this).
    let cut = dir.path().join("cut.zip");
    std::fs::write(&cut, b"PK\x03\x04 half a bundle").expect("write");
    for (file, says) in [
        (&foreign, "not an agentdeck support bundle"),
        (&cut, "not a readable zip"),
    ] {
        for args in [
            vec!["--bundle", file.to_str().expect("path")],
            vec!["sandbox", "--from-bundle", file.to_str().expect("path")],
        ] {
            let o = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
                .args(&args)
                .env("HOME", dir.path())
                .output()
                .expect("runs");
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", common::err(&o));
            assert!(
                common::err(&o).contains(says),
                "{args:?}: {}",
                common::err(&o)
            );
        }
    }
}
