//! Conformance with a client nobody here wrote: the official Kubernetes
//! Python client (`pip install kubernetes`) lists, watches, creates,
//! patches, pages, conflicts and scales against the sandbox. The script
//! prints what it saw as JSON; the assertions are here.
//!
//! Skipped, with a note, where the Python client is not installed.

mod common;

use std::process::Command;

use common::{TestSandbox, err, out};
use serde_json::Value;

const SCRIPT: &str = r#"
import json, sys, threading, time
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
apps = client.AppsV1Api()
seen = {}

seen["namespaces"] = sorted(n.metadata.name for n in v1.list_namespace().items)
meta = client.V1ObjectMeta(name="py", labels={"from": "python"})
cm = v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=meta, data={"a": "1"}))
seen["created_rv"] = cm.metadata.resource_version
seen["created_uid"] = cm.metadata.uid
try:
    v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=meta))
except ApiException as e:
    seen["again"] = [e.status, json.loads(e.body)["reason"]]

v1.patch_namespaced_config_map("py", "default", {"data": {"b": "2"}})
v1.patch_namespaced_config_map("py", "default", [{"op": "add", "path": "/data/c", "value": "3"}])
seen["patched"] = v1.read_namespaced_config_map("py", "default").data

stale = cm
stale.data = {"x": "y"}
try:
    v1.replace_namespaced_config_map("py", "default", stale)
except ApiException as e:
    seen["stale"] = [e.status, json.loads(e.body)["reason"]]

for i in range(5):
    v1.create_namespaced_config_map("default", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="pg-%d" % i, labels={"page": "yes"})))
pages, token = [], None
while True:
    page = v1.list_namespaced_config_map("default", label_selector="page=yes", limit=2, _continue=token)
    pages.append([i.metadata.name for i in page.items])
    token = page.metadata._continue
    if not token:
        break
seen["pages"] = pages
seen["by_field"] = [i.metadata.name for i in v1.list_namespaced_config_map(
    "default", field_selector="metadata.name=py").items]
seen["not_python"] = sorted(i.metadata.name for i in v1.list_namespaced_config_map(
    "default", label_selector="from!=python,page notin (no)").items)

start = v1.list_namespaced_config_map("default").metadata.resource_version
def writes():
    time.sleep(0.5)
    v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="w")))
    v1.patch_namespaced_config_map("w", "default", {"metadata": {"labels": {"x": "y"}}})
    v1.delete_namespaced_config_map("w", "default")
threading.Thread(target=writes).start()
events = []
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=30):
    events.append([ev["type"], ev["object"].metadata.name])
    if ev["type"] == "DELETED":
        w.stop()
seen["watch"] = events

dep = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "pyweb"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "pyweb"}},
             "template": {"metadata": {"labels": {"app": "pyweb"}},
                          "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}}},
}
apps.create_namespaced_deployment("default", dep)
deadline = time.time() + 60
while time.time() < deadline:
    st = apps.read_namespaced_deployment_status("pyweb", "default").status
    if st.ready_replicas == 2:
        break
    time.sleep(0.2)
seen["ready"] = st.ready_replicas
scale = apps.patch_namespaced_deployment_scale("pyweb", "default", {"spec": {"replicas": 3}})
seen["scale"] = [scale.kind, scale.spec.replicas]
apps.delete_namespaced_deployment("pyweb", "default",
                                  body=client.V1DeleteOptions(propagation_policy="Foreground"))
try:
    v1.read_namespaced_config_map("nope", "default")
except ApiException as e:
    seen["missing"] = [e.status, json.loads(e.body)["reason"]]
print(json.dumps(seen))
"#;

/// A sandbox, or `None` (with a note) where the Python client is missing.
fn sandbox_with_python_client() -> Option<TestSandbox> {
    let has_client = Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_client {
        println!(
            "note: skipped: the Python Kubernetes client is not installed (pip install kubernetes)"
        );
        return None;
    }
    Some(TestSandbox::start())
}

#[test]
fn the_official_python_client_lists_watches_writes_and_pages() {
    let Some(sb) = sandbox_with_python_client() else {
        return;
    };
    let o = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(&sb.kubeconfig)
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    let seen: Value = serde_json::from_str(out(&o).trim()).expect("script prints JSON");
    let ns = seen["namespaces"].as_array().expect("namespaces");
    assert!(ns.iter().any(|n| n == "default") && ns.iter().any(|n| n == "kube-system"));
    assert!(seen["created_rv"].is_string() && seen["created_uid"].is_string());
    assert_eq!(seen["again"], serde_json::json!([409, "AlreadyExists"]));
    assert_eq!(
        seen["patched"],
        serde_json::json!({"a": "1", "b": "2", "c": "3"})
    );
    assert_eq!(seen["stale"], serde_json::json!([409, "Conflict"]));
    assert_eq!(
        seen["pages"],
        serde_json::json!([["pg-0", "pg-1"], ["pg-2", "pg-3"], ["pg-4"]])
    );
    assert_eq!(seen["by_field"], serde_json::json!(["py"]));
    let not_python = seen["not_python"].as_array().expect("list");
    assert!(
        !not_python.iter().any(|n| n == "py") && not_python.iter().any(|n| n == "pg-0"),
        "{not_python:?}"
    );
    assert_eq!(
        seen["watch"],
        serde_json::json!([["ADDED", "w"], ["MODIFIED", "w"], ["DELETED", "w"]])
    );
    assert_eq!(seen["ready"], 2);
    assert_eq!(seen["scale"], serde_json::json!(["Scale", 3]));
    assert_eq!(seen["missing"], serde_json::json!([404, "NotFound"]));
}

/// The Python client's interactive exec, as its own e2e suite drives it
/// (`test_pod_apis`, `test_pod_exec_close_channel`): `str` stdin goes as
/// WebSocket text frames, which the apiserver reads as it reads binary ones.
const EXEC_SCRIPT: &str = r#"
import json, sys, time
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
v1.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bb"},
    "spec": {"containers": [{"name": "sleep", "image": "busybox",
        "args": ["/bin/sh", "-c", "while true; do sleep 5; done"]}]}})
deadline = time.time() + 60
while v1.read_namespaced_pod("bb", "default").status.phase != "Running":
    if time.time() > deadline:
        sys.exit("the pod never ran")
    time.sleep(0.5)
seen = {}
resp = stream(v1.connect_post_namespaced_pod_exec, "bb", "default", command=["/bin/sh"],
              stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
resp.write_stdin("echo test string 1\n")
seen["stdout"] = resp.readline_stdout(timeout=10)
resp.write_stdin("echo test string 2 >&2\n")
seen["stderr"] = resp.readline_stderr(timeout=10)
resp.write_stdin("exit\n")
resp.close()
resp = stream(v1.connect_post_namespaced_pod_exec, "bb", "default", command=["/bin/sh", "-c", "cat"],
              stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
seen["protocol"] = resp.subprotocol
resp.write_stdin("test-close\n")
seen["cat"] = resp.readline_stdout(timeout=10)
resp.close_channel(0)
resp.run_forever(timeout=15)
seen["open_after_eof"] = resp.is_open()
print(json.dumps(seen))
"#;

#[test]
fn the_official_python_clients_interactive_exec_reads_stdin_sent_as_text() {
    let Some(sb) = sandbox_with_python_client() else {
        return;
    };
    let o = Command::new("python3")
        .args(["-c", EXEC_SCRIPT])
        .arg(&sb.kubeconfig)
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    let seen: Value = serde_json::from_str(out(&o).trim()).expect("script prints JSON");
    assert_eq!(seen["stdout"], "test string 1", "{seen}");
    assert_eq!(seen["stderr"], "test string 2", "{seen}");
    assert_eq!(seen["cat"], "test-close", "{seen}");
    if seen["protocol"] == "v5.channel.k8s.io" {
        assert_eq!(seen["open_after_eof"], false, "cat ends at EOF: {seen}");
    }
}
