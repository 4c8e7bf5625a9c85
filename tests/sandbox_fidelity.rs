//! Sandbox fidelity, checked through clients nobody here wrote: the official
//! Python client (`pip install kubernetes`), the real `kubectl` and raw HTTP.
//! Each test asserts what a real kube-apiserver documents or does.
//!
//! Python-based tests skip, with a note, where the Python client is missing.

mod common;

use std::process::Command;

use common::{TestSandbox, err, out};
use serde_json::{Value, json};

/// Whether the official Python client is importable here.
fn python_client() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!(
            "note: skipped: the Python Kubernetes client is not installed (pip install kubernetes)"
        );
    }
    ok
}

/// Runs `script` with the kubeconfig and the sandbox URL as arguments; the
/// JSON it prints last.
fn python(sb: &TestSandbox, script: &str) -> Value {
    let o = Command::new("python3")
        .args(["-c", script])
        .arg(&sb.kubeconfig)
        .arg(sb.sandbox().url())
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    let text = out(&o);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("script prints JSON ({e}): {text}"))
}

const WATCH_AND_FOLLOW: &str = r#"
import json, ssl, sys, threading, time, urllib.request
from kubernetes import client, config, watch
config.load_kube_config(config_file=sys.argv[1])
base = sys.argv[2]
# The sandbox's admin endpoints, over HTTPS with the kubeconfig's CA and token.
cfg = client.Configuration.get_default_copy()
tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
auth = {"Authorization": cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")}
def admin(path, method="GET"):
    return urllib.request.urlopen(urllib.request.Request(base + path, method=method, headers=auth), context=tls)
v1 = client.CoreV1Api()
seen = {}
v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="quiet")))
admin("/sandbox/requests", "DELETE")
events = []
def loop():
    for ev in watch.Watch().stream(v1.list_namespaced_config_map, "quiet"):
        events.append(ev["type"])
threading.Thread(target=loop, daemon=True).start()
time.sleep(5)
counts = json.load(admin("/sandbox/requests"))
seen["requests"] = {k: v for k, v in counts.items() if "/namespaces/quiet/configmaps" in k}

pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "talker", "annotations": {"sandbox.agentdeck.dev/run-shell": "true"}},
       "spec": {"containers": [{"name": "c", "image": "busybox",
                                "command": ["sh", "-c", "echo one; sleep 2; echo two; sleep 60"]}]}}
v1.create_namespaced_pod("quiet", pod)
deadline = time.time() + 60
while time.time() < deadline and v1.read_namespaced_pod("talker", "quiet").status.phase != "Running":
    time.sleep(0.1)
r = v1.read_namespaced_pod_log("talker", "quiet", follow=True, _preload_content=False, _request_timeout=60)
buf = b""
for chunk in r.stream(16):
    buf += chunk
    if b"two" in buf:
        break
seen["followed"] = buf.decode().split()
print(json.dumps(seen))
"#;

#[test]
fn python_watch_loops_hold_one_watch_and_follow_true_streams_logs() {
    if !python_client() {
        return;
    }
    let sb = TestSandbox::start();
    let seen = python(&sb, WATCH_AND_FOLLOW);
    let requests = seen["requests"].as_object().expect("request counts");
    let total: u64 = requests.values().filter_map(Value::as_u64).sum();
    assert!(
        (1..=3).contains(&total),
        "a quiet 5 s watch loop should make a handful of requests: {requests:?}"
    );
    assert!(
        requests.keys().all(|k| k.starts_with("WATCH ")),
        "watch=True is a watch: {requests:?}"
    );
    assert_eq!(seen["followed"], json!(["one", "two"]));
}

/// The CRDs and the quickstart pool, installed through kubectl.
fn quickstart_pool(sb: &TestSandbox) {
    let crds = sb.agentdeck(&["crds"]);
    assert!(crds.status.success(), "{}", err(&crds));
    sb.kubectl_in_ok(&["apply", "-f", "-"], &out(&crds));
    sb.kubectl_ok(&["apply", "-f", "config/pool-quickstart.yaml"]);
}

#[test]
fn warnings_recorded_through_events_k8s_io_show_in_kubectl_get_events_events_and_describe() {
    use kube::Resource;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    let sb = TestSandbox::start();
    quickstart_pool(&sb);
    let client = sb.client();
    sb.rt.block_on(async {
        let pools: kube::Api<agentdeck::crd::AgentPool> =
            kube::Api::namespaced(client.clone(), "default");
        let pool = pools.get("quickstart").await.expect("pool exists");
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "fidelity-test".into(),
                instance: Some("fidelity-test-0".into()),
            },
        );
        let ev = Event {
            type_: EventType::Warning,
            reason: "PoolStuck".into(),
            note: Some("no agent can start: image pull failed".into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        for _ in 0..2 {
            recorder
                .publish(&ev, &pool.object_ref(&()))
                .await
                .expect("event recorded");
        }
    });
    let listed = sb.kubectl_ok(&["get", "events"]);
    let line = listed
        .lines()
        .find(|l| l.contains("PoolStuck"))
        .unwrap_or_else(|| panic!("kubectl get events shows the Warning:\n{listed}"));
    assert!(
        line.contains("Warning") && line.contains("agentpool/quickstart"),
        "{line}"
    );
    let events = sb.kubectl_ok(&["events", "--for", "agentpool/quickstart"]);
    assert!(
        events.contains("PoolStuck") && events.contains("no agent can start"),
        "{events}"
    );
    let described = sb.kubectl_ok(&["describe", "ap", "quickstart"]);
    let tail = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("describe has an Events section:\n{described}"));
    assert!(
        tail.contains("Warning") && tail.contains("PoolStuck") && tail.contains("fidelity-test"),
        "{described}"
    );
    // One store, two views: the core Event reads back in events.k8s.io form.
    let notes = sb.kubectl_ok(&[
        "get",
        "events.v1.events.k8s.io",
        "-o",
        "jsonpath={range .items[*]}{.reason}={.note}/{.regarding.name}{\"\\n\"}{end}",
    ]);
    assert!(
        notes
            .lines()
            .any(|l| l == "PoolStuck=no agent can start: image pull failed/quickstart"),
        "{notes}"
    );
}

fn pool_with_typo(name: &str) -> String {
    format!(
        "apiVersion: agentdeck.dev/v1alpha1\nkind: AgentPool\nmetadata:\n  name: {name}\nspec:\n  image: agentdeck:dev\n  maxReplica: 3\n"
    )
}

#[test]
fn field_validation_is_strict_for_kubectl_and_warn_or_ignore_when_asked() {
    let sb = TestSandbox::start();
    quickstart_pool(&sb);
    let strict = sb.kubectl_in(&["apply", "-f", "-"], &pool_with_typo("typo"));
    assert!(!strict.status.success(), "{}", out(&strict));
    assert!(
        err(&strict).contains(r#"unknown field "spec.maxReplica""#),
        "{}",
        err(&strict)
    );
    assert!(!sb.kubectl(&["get", "ap", "typo"]).status.success());

    let warned = sb.kubectl_in(
        &["apply", "--validate=warn", "-f", "-"],
        &pool_with_typo("typo"),
    );
    assert!(warned.status.success(), "{}", err(&warned));
    assert!(
        err(&warned).contains(r#"Warning: unknown field "spec.maxReplica""#),
        "{}",
        err(&warned)
    );
    let max = sb.kubectl_ok(&["get", "ap", "typo", "-o", "jsonpath={.spec.maxReplicas}"]);
    assert_eq!(max, "1", "the unknown field was dropped, the default kept");

    let ignored = sb.kubectl_in(
        &["create", "--validate=false", "-f", "-"],
        &pool_with_typo("quiet"),
    );
    assert!(ignored.status.success(), "{}", err(&ignored));
    assert!(
        !err(&ignored).contains("unknown field"),
        "{}",
        err(&ignored)
    );

    // Changing an existing pool: kubectl apply patches with Strict;
    // kubectl patch sends no fieldValidation, so the server's default warns.
    let applied = sb.kubectl_in(&["apply", "-f", "-"], &pool_with_typo("quickstart"));
    assert!(!applied.status.success(), "{}", out(&applied));
    assert!(
        err(&applied).contains(r#"unknown field "spec.maxReplica""#),
        "{}",
        err(&applied)
    );
    let patched = sb.kubectl(&[
        "patch",
        "ap",
        "quickstart",
        "--type=merge",
        "-p",
        r#"{"spec":{"maxReplica":3}}"#,
    ]);
    assert!(patched.status.success(), "{}", err(&patched));
    assert!(
        err(&patched).contains(r#"Warning: unknown field "spec.maxReplica""#),
        "{}",
        err(&patched)
    );
}

fn deployment_with_typo(name: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicaz: 3\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: c\n        image: busybox\n"
    )
}

#[test]
fn kubectl_validation_finds_unknown_fields_in_built_in_kinds() {
    let sb = TestSandbox::start();
    let strict = sb.kubectl_in(&["apply", "-f", "-"], &deployment_with_typo("web"));
    assert!(!strict.status.success(), "{}", out(&strict));
    assert!(
        err(&strict).contains(
            r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "spec.replicaz""#
        ),
        "{}",
        err(&strict)
    );
    assert!(!sb.kubectl(&["get", "deployment", "web"]).status.success());

    let warned = sb.kubectl_in(
        &["apply", "--validate=warn", "-f", "-"],
        &deployment_with_typo("web"),
    );
    assert!(warned.status.success(), "{}", err(&warned));
    assert!(
        err(&warned).contains(r#"Warning: unknown field "spec.replicaz""#),
        "{}",
        err(&warned)
    );
    let replicas = sb.kubectl_ok(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(
        replicas, "1",
        "the unknown field was dropped, the default kept"
    );

    let ignored = sb.kubectl_in(
        &["create", "--validate=false", "-f", "-"],
        &deployment_with_typo("quiet"),
    );
    assert!(ignored.status.success(), "{}", err(&ignored));
    assert!(
        !err(&ignored).contains("unknown field"),
        "{}",
        err(&ignored)
    );
    let stored = sb.kubectl_ok(&["get", "deployment", "quiet", "-o", "json"]);
    assert!(!stored.contains("replicaz"), "{stored}");

    // A typo deep in a list, in an existing object: kubectl apply patches
    // with Strict and the path names the list index.
    let pod_typo = deployment_with_typo("web")
        .replace("  replicaz: 3\n", "")
        .replace(
            "image: busybox",
            "image: busybox\n        imagePullPolicz: Always",
        );
    let applied = sb.kubectl_in(&["apply", "-f", "-"], &pod_typo);
    assert!(!applied.status.success(), "{}", out(&applied));
    assert!(
        err(&applied).contains(
            r#"strict decoding error: unknown field "spec.template.spec.containers[0].imagePullPolicz""#
        ),
        "{}",
        err(&applied)
    );
    // Server-side apply types the applied configuration first: an
    // undeclared field is an error whatever `fieldValidation` says.
    for validate in ["--validate=strict", "--validate=false"] {
        let ssa = sb.kubectl_in(
            &["apply", "--server-side", validate, "-f", "-"],
            &deployment_with_typo("web"),
        );
        assert!(!ssa.status.success(), "{}", out(&ssa));
        assert!(
            err(&ssa).contains(
                "failed to create typed patch object (apps/v1, Kind=Deployment): .spec.replicaz: field not declared in schema"
            ),
            "{validate}: {}",
            err(&ssa)
        );
    }
    // A correct file still applies cleanly, with no warning.
    let clean = sb.kubectl_in(
        &["apply", "-f", "-"],
        &deployment_with_typo("web").replace("replicaz", "replicas"),
    );
    assert!(clean.status.success(), "{}", err(&clean));
    assert!(!err(&clean).contains("Warning"), "{}", err(&clean));
}

/// Raw HTTP (the Python client validates bodies itself and refuses the
/// typo before sending it), then the Python client reads back what was kept.
const BUILTIN_FIELD_VALIDATION: &str = r#"
import json, ssl, sys, urllib.request, urllib.error
from kubernetes import client, config
config.load_kube_config(config_file=sys.argv[1])
base = sys.argv[2]
# Raw HTTPS with the kubeconfig's CA and token.
cfg = client.Configuration.get_default_copy()
tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
auth = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
seen = {}
def create(name, mode):
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80, "protocoll": "TCP"}]}}
    req = urllib.request.Request(
        base + "/api/v1/namespaces/default/services?fieldValidation=" + mode,
        data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": auth})
    try:
        r = urllib.request.urlopen(req, context=tls)
        return [r.status, r.headers.get("Warning")]
    except urllib.error.HTTPError as e:
        return [e.code, json.loads(e.read())["message"]]
seen["strict"] = create("strict", "Strict")
seen["warned"] = create("warned", "Warn")
seen["ignored"] = create("ignored", "Ignore")
seen["stored"] = client.CoreV1Api().read_namespaced_service("ignored", "default").to_dict()["spec"]["ports"]
print(json.dumps(seen, default=str))
"#;

#[test]
fn python_client_field_validation_strict_warn_ignore_for_a_service() {
    if !python_client() {
        return;
    }
    let sb = TestSandbox::start();
    let seen = python(&sb, BUILTIN_FIELD_VALIDATION);
    assert_eq!(
        seen["strict"],
        json!([
            400,
            r#"Service in version "v1" cannot be handled as a Service: strict decoding error: unknown field "spec.ports[0].protocoll""#
        ])
    );
    assert_eq!(seen["warned"][0], 201);
    let warning = seen["warned"][1].as_str().unwrap_or_default();
    assert!(
        warning.starts_with("299 - ")
            && warning.contains(r#"unknown field \"spec.ports[0].protocoll\""#),
        "{warning}"
    );
    assert_eq!(seen["ignored"], json!([201, null]));
    assert_eq!(seen["stored"][0]["port"], 80);
    assert!(
        !seen["stored"].to_string().contains("protocoll"),
        "{}",
        seen["stored"]
    );
}

const FAILING_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: fails
  annotations: {sandbox.agentdeck.dev/exit-code: "1"}
spec:
  restartPolicy: Never
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata:
  name: unmounted
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: token, secret: {secretName: missing-token}}]
"#;

#[test]
fn a_non_zero_exit_under_restart_never_fails_the_pod_and_a_missing_secret_warns_failed_mount() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], FAILING_PODS);
    let phase = common::eventually_blocking("the pod to fail", || {
        let p = sb.kubectl_ok(&["get", "pod", "fails", "-o", "jsonpath={.status.phase}"]);
        (p == "Failed" || p == "Succeeded").then_some(p)
    });
    assert_eq!(phase, "Failed");
    let row = sb.kubectl_ok(&["get", "pod", "fails", "--no-headers"]);
    assert!(row.split_whitespace().any(|c| c == "Error"), "{row}");

    let warning = common::eventually_blocking("a FailedMount event", || {
        let text = sb.kubectl_ok(&["events", "--for", "pod/unmounted", "--types", "Warning"]);
        text.lines()
            .find(|l| l.contains("FailedMount"))
            .map(str::to_string)
    });
    assert!(
        warning.contains(
            r#"MountVolume.SetUp failed for volume "token" : secret "missing-token" not found"#
        ),
        "{warning}"
    );
    let row = sb.kubectl_ok(&["get", "pod", "unmounted", "--no-headers"]);
    assert!(row.contains("ContainerCreating"), "{row}");
}

#[test]
fn get_on_connect_and_create_only_pod_subresources_is_an_error_not_the_pod() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&["run", "web", "--image=nginx"]);
    common::eventually_blocking("the pod to be scheduled", || {
        let node = sb.kubectl_ok(&["get", "pod", "web", "-o", "jsonpath={.spec.nodeName}"]);
        (!node.is_empty()).then_some(())
    });
    let raw = |sub: &str| {
        let o = sb.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/default/pods/web/{sub}"),
        ]);
        assert!(!o.status.success(), "GET {sub} answered: {}", out(&o));
        err(&o)
    };
    for sub in ["exec", "attach", "portforward"] {
        let e = raw(sub);
        assert!(
            e.contains("BadRequest") && e.contains("Upgrade request required"),
            "{sub}: {e}"
        );
    }
    let e = raw("exec?container=nope&command=ls");
    assert!(e.contains("container nope is not valid for pod web"), "{e}");
    for sub in ["eviction", "binding"] {
        let e = raw(sub);
        assert!(e.contains("MethodNotAllowed"), "{sub}: {e}");
    }
    // What does serve GET still does.
    let status = sb.kubectl_ok(&["get", "--raw", "/api/v1/namespaces/default/pods/web/status"]);
    assert!(status.contains(r#""kind":"Pod""#), "{status}");
}

/// A raw GET: status code and body as JSON.
fn raw_get(sb: &TestSandbox, path: &str) -> (u16, Value) {
    let url = format!("{}{path}", sb.sandbox().url());
    sb.rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resp = sb
            .sandbox()
            .http_client()
            .expect("http client")
            .get(&url)
            .send()
            .await
            .expect("request");
        let code = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    })
}

/// The first `n` events of a watch.
fn first_events(sb: &TestSandbox, path: &str, n: usize) -> Vec<Value> {
    let url = format!("{}{path}", sb.sandbox().url());
    sb.rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut resp = sb
            .sandbox()
            .http_client()
            .expect("http client")
            .get(&url)
            .send()
            .await
            .expect("watch");
        assert_eq!(resp.status().as_u16(), 200);
        let (mut buf, mut events) = (Vec::new(), Vec::new());
        while events.len() < n {
            let chunk = tokio::time::timeout(std::time::Duration::from_secs(60), resp.chunk())
                .await
                .expect("watch events in time")
                .expect("chunk")
                .expect("the watch stays open");
            buf.extend_from_slice(&chunk);
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                events.push(serde_json::from_slice(&line).expect("event json"));
            }
        }
        events
    })
}

#[test]
fn watch_list_options_are_validated_and_send_initial_events_false_sends_none() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&["create", "secret", "generic", "before"]);
    // Secrets: nothing else writes them in default (configmaps hold kube-root-ca.crt).
    const CMS: &str = "/api/v1/namespaces/default/secrets";
    let cases = [
        (
            format!("{CMS}?sendInitialEvents=true"),
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ),
        (
            format!("{CMS}?watch=true&sendInitialEvents=true"),
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ),
        (
            format!("{CMS}?watch=true&resourceVersionMatch=NotOlderThan&resourceVersion=0"),
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ),
        (
            format!(
                "{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=Exact&resourceVersion=1"
            ),
            r#"Unsupported value: "Exact": supported values: "NotOlderThan""#,
        ),
    ];
    for (path, message) in cases {
        let (code, body) = raw_get(&sb, &path);
        assert_eq!(code, 422, "{path}: {body}");
        assert_eq!(body["reason"], "Invalid", "{path}: {body}");
        let text = body["message"].as_str().unwrap_or_default();
        assert!(
            text.starts_with(r#"ListOptions.meta.k8s.io "" is invalid: "#)
                && text.contains(message),
            "{path}: {text}"
        );
    }
    // No initial events: the first event is the object created after the
    // watch started, not the one that was there before.
    let events = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(500));
            sb.kubectl_ok(&["create", "secret", "generic", "after"]);
        });
        first_events(
            &sb,
            &format!(
                "{CMS}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion=0"
            ),
            1,
        )
    });
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(
        events[0]["object"]["metadata"]["name"], "after",
        "{events:?}"
    );
    // With sendInitialEvents=true the state comes first, then the bookmark.
    let events = first_events(
        &sb,
        &format!(
            "{CMS}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=0"
        ),
        3,
    );
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default(),
                e["object"]["metadata"]["name"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("ADDED", "after"), ("ADDED", "before"), ("BOOKMARK", "")]
    );
}

const NAMESPACE_DELETION: &str = r#"
import json, sys, threading, time
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
seen = {}

def until(what, f):
    deadline = time.time() + 60
    while time.time() < deadline:
        v = f()
        if v:
            return v
        time.sleep(0.1)
    raise SystemExit("timed out waiting for " + what)

v1.create_namespace({"metadata": {"name": "doomed"}, "spec": {"finalizers": ["example.com/hold"]}})
seen["spec_finalizers"] = v1.read_namespace("doomed").spec.finalizers
v1.create_namespaced_config_map("doomed", {"metadata": {"name": "kept", "finalizers": ["example.com/keep"]}})
v1.create_namespaced_pod("doomed", {"metadata": {"name": "stubborn",
    "annotations": {"sandbox.agentdeck.dev/run-shell": "true"}},
    "spec": {"terminationGracePeriodSeconds": 2, "containers": [{"name": "c", "image": "busybox",
             "command": ["sh", "-c", "trap '' TERM; echo up; while true; do sleep 1; done"]}]}})
until("the pod to run", lambda: v1.read_namespaced_pod("stubborn", "doomed").status.phase == "Running")

pod_events = []
def watch_pods():
    for ev in watch.Watch().stream(v1.list_namespaced_pod, "doomed", timeout_seconds=60):
        pod_events.append([ev["type"], ev["object"].metadata.deletion_grace_period_seconds])
        if ev["type"] == "DELETED":
            return
t = threading.Thread(target=watch_pods)
t.start()
time.sleep(0.5)
v1.delete_namespace("doomed")
seen["phase_at_once"] = v1.read_namespace("doomed").status.phase
try:
    v1.create_namespaced_config_map("doomed", {"metadata": {"name": "late"}})
except ApiException as e:
    seen["create_in_terminating"] = [e.status, json.loads(e.body)["reason"]]
t.join(60)
seen["pod_events"] = pod_events

def conds():
    ns = v1.read_namespace("doomed")
    return {c.type: [c.status, c.reason, c.message] for c in (ns.status.conditions or [])}
seen["held"] = until("only the configmap to remain",
    lambda: (lambda c: c if c.get("NamespaceContentRemaining", [""])[2].endswith("configmaps. has 1 resource instances") else None)(conds()))
v1.patch_namespaced_config_map("kept", "doomed", {"metadata": {"finalizers": None}})
seen["emptied"] = until("the content to be gone",
    lambda: (lambda c: c if c.get("NamespaceContentRemaining", ["True"])[0] == "False" else None)(conds()))
ns = v1.read_namespace("doomed")
seen["left"] = [ns.status.phase, ns.spec.finalizers]
ns.spec.finalizers = []
v1.replace_namespace_finalize("doomed", ns)
def gone():
    try:
        v1.read_namespace("doomed")
        return False
    except ApiException as e:
        return e.status == 404
until("the namespace to go", gone)
seen["gone"] = True
print(json.dumps(seen))
"#;

#[test]
fn deleting_a_namespace_waits_for_finalizers_and_grace_periods_with_conditions() {
    if !python_client() {
        return;
    }
    let sb = TestSandbox::start();
    let seen = python(&sb, NAMESPACE_DELETION);
    assert_eq!(
        seen["spec_finalizers"],
        json!(["example.com/hold", "kubernetes"])
    );
    assert_eq!(seen["phase_at_once"], "Terminating");
    assert_eq!(seen["create_in_terminating"], json!([403, "Forbidden"]));
    let pod_events = seen["pod_events"].as_array().expect("pod events");
    assert!(
        pod_events.contains(&json!(["MODIFIED", 2])),
        "the pod is deleted with its grace period: {pod_events:?}"
    );
    assert_eq!(
        pod_events.last(),
        Some(&json!(["DELETED", 2])),
        "{pod_events:?}"
    );
    let held = &seen["held"];
    assert_eq!(
        held["NamespaceContentRemaining"],
        json!([
            "True",
            "SomeResourcesRemain",
            "Some resources are remaining: configmaps. has 1 resource instances"
        ])
    );
    assert_eq!(
        held["NamespaceFinalizersRemaining"],
        json!([
            "True",
            "SomeFinalizersRemain",
            "Some content in the namespace has finalizers remaining: example.com/keep in 1 resource instances"
        ])
    );
    assert_eq!(
        seen["emptied"]["NamespaceFinalizersRemaining"],
        json!([
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished"
        ])
    );
    assert_eq!(seen["left"], json!(["Terminating", ["example.com/hold"]]));
    assert_eq!(seen["gone"], true);
}

const APPLIED_CM: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: \"9\"\n  b: \"3\"\n";

#[test]
fn server_side_apply_tracks_every_manager_and_conflicts_with_updates_as_the_apiserver_words_it() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&["create", "configmap", "cfg", "--from-literal=a=1"]);
    sb.kubectl_ok(&["patch", "configmap", "cfg", "-p", r#"{"data":{"b":"2"}}"#]);
    let conflict = sb.kubectl_in(
        &["apply", "--server-side", "--field-manager=tool", "-f", "-"],
        APPLIED_CM,
    );
    assert!(!conflict.status.success(), "{}", out(&conflict));
    let e = err(&conflict);
    assert!(
        e.contains("Apply failed with 2 conflicts: conflicts with \"kubectl-create\" using v1 at "),
        "{e}"
    );
    assert!(
        e.contains(":\n- .data.a\nconflicts with \"kubectl-patch\" using v1 at "),
        "{e}"
    );
    assert!(e.contains(":\n- .data.b"), "{e}");

    let hidden = sb.kubectl_ok(&["get", "configmap", "cfg", "-o", "yaml"]);
    assert!(!hidden.contains("managedFields"), "{hidden}");
    let before = sb.kubectl_ok(&[
        "get",
        "configmap",
        "cfg",
        "--show-managed-fields",
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation}={.fieldsV1}{\"\\n\"}{end}",
    ]);
    assert_eq!(
        before.lines().collect::<Vec<_>>(),
        [
            r#"kubectl-create/Update={"f:data":{"f:a":{}}}"#,
            r#"kubectl-patch/Update={"f:data":{"f:b":{}}}"#,
        ],
        "{before}"
    );

    sb.kubectl_in_ok(
        &[
            "apply",
            "--server-side",
            "--field-manager=tool",
            "--force-conflicts",
            "-f",
            "-",
        ],
        APPLIED_CM,
    );
    let after = sb.kubectl_ok(&[
        "get",
        "configmap",
        "cfg",
        "--show-managed-fields",
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation}={.fieldsV1}{\"\\n\"}{end}",
    ]);
    assert_eq!(
        after.lines().collect::<Vec<_>>(),
        [r#"tool/Apply={"f:data":{"f:a":{},"f:b":{}}}"#],
        "forced fields change hands and managers left with nothing drop out: {after}"
    );
    // An update of a field the applier owns is the updater's now; the next
    // apply of another value conflicts with it.
    sb.kubectl_ok(&["patch", "configmap", "cfg", "-p", r#"{"data":{"a":"5"}}"#]);
    let again = sb.kubectl_in(
        &["apply", "--server-side", "--field-manager=tool", "-f", "-"],
        APPLIED_CM,
    );
    let e = err(&again);
    assert!(
        e.contains("Apply failed with 1 conflict: conflict with \"kubectl-patch\" using v1 at ")
            && e.contains(": .data.a\n"),
        "{e}"
    );
}

const CONSOLE_KINDS: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: a, image: busybox}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: standard
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1}
spec:
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  hostPath: {path: /tmp/pv-1}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: legacy}
spec:
  replicas: 1
  selector: {app: legacy}
  template:
    metadata: {labels: {app: legacy}}
    spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  ingressClassName: nginx
  rules:
    - host: web.example.com
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: rancher.io/local-path
"#;

#[test]
fn the_kinds_a_console_lists_are_served_with_printer_columns_and_default_cluster_roles_exist() {
    let sb = TestSandbox::start();
    let resources = sb.kubectl_ok(&["api-resources", "--no-headers"]);
    for (name, short) in [
        ("statefulsets", "sts"),
        ("daemonsets", "ds"),
        ("cronjobs", "cj"),
        ("persistentvolumeclaims", "pvc"),
        ("persistentvolumes", "pv"),
        ("replicationcontrollers", "rc"),
        ("ingresses", "ing"),
        ("storageclasses", "sc"),
    ] {
        assert!(
            resources.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.first() == Some(&name) && cols.get(1) == Some(&short)
            }),
            "{name} ({short}) missing:\n{resources}"
        );
    }
    // Listed empty before anything exists, as a console's first screen does.
    let empty = sb.kubectl(&["get", "sts,ds,cj,pvc,pv,rc,ing,sc", "-A"]);
    assert!(empty.status.success(), "{}", err(&empty));
    sb.kubectl_in_ok(&["apply", "-f", "-"], CONSOLE_KINDS);
    let row = |kind: &str| -> Vec<String> {
        let text = sb.kubectl_ok(&["get", kind]);
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default().to_owned();
        let first = lines.next().unwrap_or_default().to_owned();
        vec![header, first]
    };
    let pvc = row("pvc");
    assert!(
        pvc[0].starts_with("NAME") && pvc[0].contains("STATUS") && pvc[0].contains("STORAGECLASS"),
        "{pvc:?}"
    );
    assert!(
        pvc[1].starts_with("data") && pvc[1].contains("Pending") && pvc[1].contains("standard"),
        "{pvc:?}"
    );
    let pv = row("pv");
    assert!(
        pv[0].contains("RECLAIM POLICY")
            && pv[1].contains("5Gi")
            && pv[1].contains("RWO,ROX")
            && pv[1].contains("Retain"),
        "{pv:?}"
    );
    let ing = row("ingress");
    assert!(
        ing[0].contains("HOSTS")
            && ing[1].contains("nginx")
            && ing[1].contains("web.example.com")
            && ing[1].contains("80"),
        "{ing:?}"
    );
    let sc = row("sc");
    assert!(
        sc[0].contains("PROVISIONER")
            && sc[1].starts_with("standard (default)")
            && sc[1].contains("rancher.io/local-path")
            && sc[1].contains("Delete"),
        "{sc:?}"
    );
    for (kind, header) in [
        ("sts", "READY"),
        ("ds", "DESIRED"),
        ("cj", "SCHEDULE"),
        ("rc", "DESIRED"),
    ] {
        let r = row(kind);
        assert!(r[0].contains(header) && !r[1].is_empty(), "{kind}: {r:?}");
    }
    let invalid = sb.kubectl_in(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: bad}\nspec: {resources: {requests: {storage: 1Gi}}}\n",
    );
    assert!(
        err(&invalid)
            .contains("spec.accessModes: Required value: at least 1 access mode is required"),
        "{}",
        err(&invalid)
    );
    let explain = sb.kubectl_ok(&["explain", "storageclass.provisioner"]);
    assert!(explain.contains("provisioner"), "{explain}");

    let roles = sb.kubectl_ok(&["get", "clusterroles", "-o", "name"]);
    for r in ["cluster-admin", "admin", "edit", "view"] {
        assert!(
            roles
                .lines()
                .any(|l| l == format!("clusterrole.rbac.authorization.k8s.io/{r}")),
            "{roles}"
        );
    }
    let binding = sb.kubectl_ok(&["get", "clusterrolebinding", "cluster-admin", "--no-headers"]);
    assert!(binding.contains("ClusterRole/cluster-admin"), "{binding}");
}

#[test]
fn openapi_v2_is_the_real_document_and_each_namespace_gets_kube_root_ca_crt() {
    let sb = TestSandbox::start();
    let (code, doc) = raw_get(&sb, "/openapi/v2");
    assert_eq!(code, 200);
    assert_eq!(doc["swagger"], "2.0");
    let pod = &doc["definitions"]["io.k8s.api.core.v1.Pod"];
    assert!(pod["properties"]["spec"].is_object(), "{pod}");
    let list = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"];
    assert_eq!(list["x-kubernetes-group-version-kind"]["kind"], "Pod");
    let deploy = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["put"];
    assert_eq!(deploy["parameters"][0]["in"], "body", "{deploy}");
    assert!(!doc.to_string().contains("#/components/"));

    sb.kubectl_ok(&["create", "namespace", "fresh"]);
    let ca = |ns: &str| {
        let o = sb.kubectl(&[
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            ns,
            "-o",
            r"jsonpath={.data.ca\.crt}",
        ]);
        o.status
            .success()
            .then(|| out(&o))
            .filter(|c| !c.is_empty())
    };
    let pem = common::eventually_blocking("kube-root-ca.crt in the new namespace", || ca("fresh"));
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let default = common::eventually_blocking("kube-root-ca.crt in default", || ca("default"));
    assert_eq!(default, pem);
    sb.kubectl_ok(&["delete", "configmap", "kube-root-ca.crt", "-n", "fresh"]);
    let again = common::eventually_blocking("kube-root-ca.crt to come back", || ca("fresh"));
    assert_eq!(again, pem);
}

/// Reads protobuf wire format: (field number, bytes) of each
/// length-delimited field; other wire types are skipped.
fn protobuf_fields(mut b: &[u8]) -> Vec<(u64, &[u8])> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut v = 0;
        for shift in (0..64).step_by(7) {
            let byte = b[0];
            *b = &b[1..];
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
        }
        v
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        match key & 7 {
            0 => {
                varint(&mut b);
            }
            1 => b = &b[8..],
            2 => {
                let len = varint(&mut b) as usize;
                out.push((key >> 3, &b[..len]));
                b = &b[len..];
            }
            w => panic!("wire type {w} is not used by gnostic's messages"),
        }
    }
    out
}

#[test]
fn openapi_v2_protobuf_is_the_served_document_and_kubectl_explains_from_it() {
    let sb = TestSandbox::start();
    quickstart_pool(&sb);
    let url = format!("{}/openapi/v2", sb.sandbox().url());
    let (content_type, body) = sb.rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resp = sb
            .sandbox()
            .http_client()
            .expect("http client")
            .get(&url)
            .header(
                "Accept",
                "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            )
            .send()
            .await
            .expect("request");
        let ct = resp.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_string();
        (ct, resp.bytes().await.expect("body").to_vec())
    });
    assert_eq!(
        content_type,
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    // openapi.v2.Document: swagger = 1, definitions = 9 (Definitions, whose
    // field 1 repeats NamedSchema {name = 1, value = 2}).
    let top = protobuf_fields(&body);
    let swagger = top.iter().find(|(n, _)| *n == 1).expect("swagger");
    assert_eq!(swagger.1, b"2.0");
    let definitions = top.iter().find(|(n, _)| *n == 9).expect("definitions").1;
    let names: Vec<String> = protobuf_fields(definitions)
        .into_iter()
        .map(|(_, named)| {
            let name = protobuf_fields(named)[0].1;
            String::from_utf8(name.to_vec()).expect("utf-8")
        })
        .collect();
    let (_, json_doc) = raw_get(&sb, "/openapi/v2");
    let mut json_names: Vec<String> = json_doc["definitions"]
        .as_object()
        .expect("definitions")
        .keys()
        .cloned()
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    json_names.sort();
    assert_eq!(
        sorted, json_names,
        "both encodings carry the same definitions"
    );
    assert!(
        names
            .iter()
            .any(|n| n == "dev.agentdeck.v1alpha1.AgentPool")
    );

    let containers = sb.kubectl_ok(&[
        "explain",
        "pods.spec.containers",
        "--output=plaintext-openapiv2",
    ]);
    assert!(
        containers.contains("RESOURCE: containers <[]Object>"),
        "{containers}"
    );
    assert!(
        containers.contains("imagePullPolicy\t<string>"),
        "{containers}"
    );
    // A described reference (`allOf` of one `$ref` in v3) is followed.
    let selector = sb.kubectl_ok(&[
        "explain",
        "deployments.spec.selector",
        "--output=plaintext-openapiv2",
    ]);
    assert!(
        selector.contains("matchLabels\t<map[string]string>"),
        "{selector}"
    );
    let pool = sb.kubectl_ok(&["explain", "agentpools.spec", "--output=plaintext-openapiv2"]);
    assert!(pool.contains("KIND:     AgentPool"), "{pool}");
    assert!(pool.contains("maxReplicas\t<integer>"), "{pool}");

    // kubectl validates a `kind: List` file's items against this document
    // on its own side: the type meta every object carries is declared, an
    // unknown field is not.
    let list = |spec: &str| {
        format!(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: agentdeck.dev/v1alpha1\n  kind: AgentTask\n  metadata: {{generateName: listed-}}\n  spec: {{pool: quickstart, command: [\"true\"]{spec}}}\n"
        )
    };
    sb.kubectl_in_ok(&["create", "-f", "-"], &list(""));
    let typo = sb.kubectl_in(&["create", "-f", "-"], &list(", timeoutSecondz: 5"));
    assert!(!typo.status.success(), "{}", out(&typo));
    assert!(
        err(&typo).contains(r#"unknown field "timeoutSecondz""#),
        "{}",
        err(&typo)
    );
}

const TWO_CONTAINERS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: two}
spec:
  selector: {matchLabels: {app: two}}
  template:
    metadata: {labels: {app: two}}
    spec:
      containers:
      - name: a
        image: busybox
        env: [{name: "X", value: "1"}, {name: "Y", value: "2"}]
      - {name: b, image: busybox}
"#;

const ONE_CONTAINER: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: two}
spec:
  selector: {matchLabels: {app: two}}
  template:
    metadata: {labels: {app: two}}
    spec:
      containers:
      - name: a
        image: busybox
        env: [{name: "Y", value: "3"}]
"#;

#[test]
fn kubectl_apply_removes_list_elements_by_their_merge_key_from_the_published_patch_metadata() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], TWO_CONTAINERS);
    sb.kubectl_in_ok(&["apply", "-f", "-"], ONE_CONTAINER);
    // kubectl computes the patch from the OpenAPI document's
    // x-kubernetes-patch-merge-key: with it, `b` and `X` are deleted by key;
    // without it, the lists would be sent whole and merged by the server,
    // keeping both.
    let containers = sb.kubectl_ok(&[
        "get",
        "deployment",
        "two",
        "-o",
        "jsonpath={range .spec.template.spec.containers[*]}{.name}={.env[*].name}:{.env[*].value};{end}",
    ]);
    assert_eq!(containers, "a=Y:3;");
}
