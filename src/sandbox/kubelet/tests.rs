//! The kubelet against a real in-process API: pods from creation to
//! removal, real processes (`/bin/sh` standing in for the agentdeck
//! executable), logs and deletion.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::plan::manifests::RUNNER_SCRIPT;
use crate::sandbox::api::{Query, Target};
use crate::sandbox::builtin::builtin_resources;

/// Generous: these tests run real processes, and CI machines are busy.
const WAIT: Duration = Duration::from_secs(60);

struct Node {
    api: Arc<Api>,
    cancel: CancellationToken,
    handle: Option<JoinHandle<()>>,
    root: tempfile::TempDir,
}

impl Node {
    fn start() -> Node {
        let api = Arc::new(Api::new(builtin_resources()));
        // What the service account controller would have made: pods run as
        // `default`, and their token volume needs the account.
        let sa = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                    "metadata": {"name": "default", "namespace": "default"}});
        api.create(
            "",
            "v1",
            "serviceaccounts",
            Some("default"),
            sa,
            &Query::default(),
        )
        .expect("default service account");
        let root = tempfile::tempdir().expect("temp dir");
        let cancel = CancellationToken::new();
        let config = KubeletConfig {
            exe: PathBuf::from("/bin/sh"),
            root: Some(root.path().to_path_buf()),
            restart_backoff: Duration::from_millis(200),
            log_limit: logs::DEFAULT_LOG_LIMIT,
            resync: Duration::from_millis(200),
            mount_namespaces: true,
        };
        let handle = start_with(api.clone(), cancel.clone(), config);
        Node {
            api,
            cancel,
            handle: Some(handle),
            root,
        }
    }

    async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(h) = self.handle.take() {
            tokio::time::timeout(WAIT, h)
                .await
                .expect("kubelet stops in time")
                .expect("kubelet task ends cleanly");
        }
    }

    fn create(&self, pod: Value) -> Value {
        self.api
            .create("", "v1", "pods", Some("default"), pod, &Query::default())
            .expect("pod created")
    }

    fn create_object(&self, plural: &str, obj: Value) {
        self.api
            .create("", "v1", plural, Some("default"), obj, &Query::default())
            .expect("object created");
    }

    fn get(&self, name: &str) -> Option<Arc<Value>> {
        self.api.store.get("pods", "default", name)
    }

    /// Polls the pod until `f` holds, failing after [`WAIT`].
    async fn wait_for(&self, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let pod = self.get(name);
            if let Some(p) = &pod
                && f(p)
            {
                return (**p).clone();
            }
            if tokio::time::Instant::now() > deadline {
                panic!("pod {name}: {what} did not happen; last seen {pod:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_gone(&self, name: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.get(name).is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "pod {name} was not removed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn logs(&self, name: &str, opts: LogOptions) -> Result<String, ApiError> {
        match self.api.hooks().pod_logs("default", name, &opts)? {
            LogStream::Done(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
            LogStream::Follow(b, _) => Ok(String::from_utf8_lossy(&b).into_owned()),
        }
    }

    /// Polls the pod's log until it contains `needle`.
    async fn wait_log(&self, name: &str, container: Option<&str>, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let opts = LogOptions {
                container: container.map(str::to_string),
                ..LogOptions::default()
            };
            if let Ok(l) = self.logs(name, opts)
                && l.contains(needle)
            {
                return l;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "log of {name} never showed {needle:?}: {:?}",
                self.logs(name, LogOptions::default())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn delete(&self, name: &str, options: Value) {
        let target = Target {
            namespace: Some("default".into()),
            name: Some(name.into()),
            subresource: None,
        };
        self.api
            .delete("", "v1", "pods", &target, &options, &Query::default())
            .expect("delete accepted");
    }
}

fn pod(name: &str, spec: Value) -> Value {
    pod_with(name, json!({}), spec)
}

fn pod_with(name: &str, annotations: Value, mut spec: Value) -> Value {
    spec["nodeName"] = json!("sandbox-node-0");
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": spec
    })
}

/// A container running `script` with `/bin/sh` standing in for agentdeck.
/// Kubernetes expands `$(VAR)` in commands and turns `$$` into `$`, so a
/// script's own `$$` is written `$$$$`.
fn shell(name: &str, script: &str) -> Value {
    json!({"name": name, "image": "ghcr.io/x/agentdeck:1.0", "command": ["agentdeck", "-c", script]})
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or_default()
}

fn condition<'a>(p: &'a Value, kind: &str) -> &'a Value {
    p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn is_ready(p: &Value) -> bool {
    condition(p, "Ready")["status"] == "True"
}

fn container_status<'a>(p: &'a Value, name: &str) -> &'a Value {
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn process_alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

async fn wait_dead(pid: i32) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while process_alive(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "process {pid} still alive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pid_in(log: &str) -> i32 {
    log.lines()
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid= line in {log:?}"))
}

/// The placeholder image whose program the kubelet plays exactly.
const PAUSE: &str = "registry.k8s.io/pause:3.10";

#[tokio::test]
async fn a_simulated_container_runs_and_becomes_ready_with_full_status() {
    let node = Node::start();
    node.create(pod_with(
        "web",
        json!({"sandbox.agentdeck.dev/simulate": "true"}),
        json!({"containers": [{"name": "nginx", "image": "nginx:1.27"}]}),
    ));
    let p = node
        .wait_for("web", "Running and Ready", |p| {
            phase(p) == "Running" && is_ready(p)
        })
        .await;
    let status = &p["status"];
    let ip = status["podIP"].as_str().expect("pod IP");
    assert!(ip.starts_with("127.") && ip != "127.0.0.1", "{ip}");
    assert_eq!(status["podIPs"], json!([{"ip": ip}]));
    assert_eq!(status["hostIP"], "127.0.0.1");
    assert!(status["startTime"].is_string());
    for kind in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ] {
        assert_eq!(condition(&p, kind)["status"], "True", "{kind}");
        assert!(
            condition(&p, kind)["lastTransitionTime"].is_string(),
            "{kind}"
        );
    }
    let c = container_status(&p, "nginx");
    assert!(c["state"]["running"]["startedAt"].is_string());
    assert_eq!(c["ready"], true);
    assert_eq!(c["restartCount"], 0);
    assert!(
        c["containerID"]
            .as_str()
            .is_some_and(|id| id.starts_with("agentdeck://"))
    );
    let log = node.wait_log("web", None, "started").await;
    assert_eq!(
        log,
        "simulated container nginx (image nginx:1.27) started\n"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_pod_without_a_node_is_left_alone() {
    let node = Node::start();
    let mut p = pod(
        "unscheduled",
        json!({"containers": [{"name": "c", "image": "nginx"}]}),
    );
    p["spec"].as_object_mut().expect("spec").remove("nodeName");
    node.create(p);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let p = node.get("unscheduled").expect("pod");
    assert_eq!(phase(&p), "Pending");
    assert!(p["status"]["podIP"].is_null());
    assert_eq!(
        node.logs("unscheduled", LogOptions::default())
            .expect("empty log"),
        ""
    );
    node.stop().await;
}

#[tokio::test]
async fn exit_annotations_end_pods_succeeded_or_failed_per_restart_policy() {
    let node = Node::start();
    let ann = |code: &str| json!({"sandbox.agentdeck.dev/exit-after": "0.2", "sandbox.agentdeck.dev/exit-code": code});
    node.create(pod_with(
        "fails",
        ann("3"),
        json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}),
    ));
    node.create(pod_with(
        "succeeds",
        ann("0"),
        json!({"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}),
    ));

    let failed = node
        .wait_for("fails", "Failed", |p| phase(p) == "Failed")
        .await;
    let t = &container_status(&failed, "c")["state"]["terminated"];
    assert_eq!(t["exitCode"], 3);
    assert_eq!(t["reason"], "Error");
    assert!(t["startedAt"].is_string() && t["finishedAt"].is_string());
    assert_eq!(condition(&failed, "Ready")["reason"], "PodFailed");
    assert_eq!(
        condition(&failed, "PodReadyToStartContainers")["status"],
        "False"
    );

    let done = node
        .wait_for("succeeds", "Succeeded", |p| phase(p) == "Succeeded")
        .await;
    let t = &container_status(&done, "c")["state"]["terminated"];
    assert_eq!(t["exitCode"], 0);
    assert_eq!(t["reason"], "Completed");
    assert_eq!(condition(&done, "Ready")["reason"], "PodCompleted");
    let log = node
        .logs("succeeds", LogOptions::default())
        .expect("log of a completed pod");
    assert!(
        log.ends_with("simulated container c exiting with code 0\n"),
        "{log}"
    );
    node.stop().await;
}

#[tokio::test]
async fn restart_policy_always_restarts_and_keeps_the_previous_log() {
    let node = Node::start();
    let ann = json!({"sandbox.agentdeck.dev/exit-after.c": "0.3", "sandbox.agentdeck.dev/exit-code": "1"});
    node.create(pod_with(
        "crashy",
        ann,
        json!({"containers": [{"name": "c", "image": "busybox"}]}),
    ));
    let before = LogOptions {
        previous: true,
        ..LogOptions::default()
    };
    node.wait_for("crashy", "Running", |p| phase(p) == "Running")
        .await;
    let e = node
        .logs("crashy", before.clone())
        .expect_err("no previous instance yet");
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "previous terminated container \"c\" in pod \"crashy\" not found"
    );

    let p = node
        .wait_for("crashy", "restarted twice", |p| {
            container_status(p, "c")["restartCount"].as_u64() >= Some(2)
        })
        .await;
    assert_eq!(phase(&p), "Running");
    let c = container_status(&p, "c");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    let previous = node.logs("crashy", before).expect("previous log");
    assert!(previous.contains("exiting with code 1"), "{previous}");
    node.stop().await;
}

#[tokio::test]
async fn a_real_process_gets_the_pod_environment_and_its_output_is_logged() {
    let node = Node::start();
    node.create_object(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "agent-token"}, "data": {"token": "czNjcjN0"}}),
    );
    let script = "echo pid=$$$$; echo name=$MY_NAME; echo token=$TOKEN; echo ip=$POD_IP; \
                  echo leaked=${CARGO_MANIFEST_DIR:-none}; echo home=$HOME; \
                  echo token_file=$TOKEN_FILE; echo oops >&2; exec sleep 30";
    let mut c = shell("agent", script);
    c["env"] = json!([
        {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "agent-token", "key": "token"}}},
        {"name": "TOKEN_FILE", "value": "/var/run/agentdeck/token"}
    ]);
    c["volumeMounts"] =
        json!([{"name": "token", "mountPath": "/var/run/agentdeck", "readOnly": true}]);
    node.create(pod("agent-0", json!({
        "containers": [c],
        "volumes": [{"name": "token", "secret": {"secretName": "agent-token", "defaultMode": 256}}]
    })));
    let p = node
        .wait_for("agent-0", "Running and Ready", |p| {
            phase(p) == "Running" && is_ready(p)
        })
        .await;
    let log = node.wait_log("agent-0", None, "oops").await;
    let ip = p["status"]["podIP"].as_str().expect("pod IP");
    let line = |k: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in {log}"))
            .to_string()
    };
    assert_eq!(line("name"), "agent-0");
    assert_eq!(line("token"), "s3cr3t");
    assert_eq!(line("ip"), ip);
    assert_eq!(line("leaked"), "none");
    let home = PathBuf::from(line("home"));
    assert!(home.starts_with(node.root.path()), "{home:?}");
    // `/bin/sh` standing in for agentdeck has no mount namespace entry
    // point: the kubelet falls back to host paths, and says so.
    let token = PathBuf::from(line("token_file"));
    assert!(token.starts_with(&home), "{token:?}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (events, _) = node.api.store.list("events", Some("default"));
        if events.iter().any(|e| e["reason"] == "MountsNotAtPaths") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no MountsNotAtPaths event: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        std::fs::read_to_string(token).expect("token file"),
        "s3cr3t"
    );

    let pid = pid_in(&log);
    assert!(process_alive(pid));
    node.stop().await;
    wait_dead(pid).await;
    assert!(!home.exists(), "the pod directory is removed");
}

#[tokio::test]
async fn log_options_tail_limit_timestamps_and_since_apply() {
    let node = Node::start();
    node.create(pod("lines", json!({"containers": [shell("c", "for i in 1 2 3 4 5; do echo line$i; done; exec sleep 30")]})));
    node.wait_log("lines", None, "line5").await;
    let read = |opts: LogOptions| node.logs("lines", opts).expect("log");
    assert_eq!(
        read(LogOptions::default()),
        "line1\nline2\nline3\nline4\nline5\n"
    );
    assert_eq!(
        read(LogOptions {
            tail_lines: Some(2),
            ..LogOptions::default()
        }),
        "line4\nline5\n"
    );
    assert_eq!(
        read(LogOptions {
            limit_bytes: Some(8),
            ..LogOptions::default()
        }),
        "line1\nli"
    );
    assert_eq!(
        read(LogOptions {
            since_seconds: Some(3600),
            tail_lines: Some(1),
            ..LogOptions::default()
        }),
        "line5\n"
    );
    let stamped = read(LogOptions {
        timestamps: true,
        tail_lines: Some(1),
        ..LogOptions::default()
    });
    let (ts, rest) = stamped.split_once(' ').expect("timestamp prefix");
    assert_eq!(rest, "line5\n");
    let ts: jiff::Timestamp = ts.parse().expect("RFC 3339 timestamp");
    assert!(jiff::Timestamp::now().duration_since(ts) < jiff::SignedDuration::from_secs(60));
    assert!(ts.to_string().ends_with('Z'));
    node.stop().await;
}

#[tokio::test]
async fn following_a_log_streams_until_the_container_stops() {
    let node = Node::start();
    node.create(pod(
        "ticker",
        json!({"restartPolicy": "Never",
        "containers": [shell("c", "echo first; sleep 0.5; echo second; sleep 0.3; echo third")]}),
    ));
    node.wait_log("ticker", None, "first").await;
    let opts = LogOptions {
        follow: true,
        ..LogOptions::default()
    };
    let LogStream::Follow(head, mut rx) = node
        .api
        .hooks()
        .pod_logs("default", "ticker", &opts)
        .expect("log")
    else {
        panic!("a running container's log is followed");
    };
    let mut all = head;
    while let Some(chunk) = tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("stream ends in time")
    {
        all.extend(chunk);
    }
    assert_eq!(String::from_utf8_lossy(&all), "first\nsecond\nthird\n");
    node.wait_for("ticker", "Succeeded", |p| phase(p) == "Succeeded")
        .await;
    node.stop().await;
}

#[tokio::test]
async fn log_requests_name_the_container_as_the_api_requires() {
    let node = Node::start();
    node.create(pod_with(
        "two",
        json!({"sandbox.agentdeck.dev/simulate": "true"}),
        json!({"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "redis"}]}),
    ));
    node.wait_for("two", "Running", |p| phase(p) == "Running")
        .await;
    let e = node
        .logs("two", LogOptions::default())
        .expect_err("ambiguous");
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "a container name must be specified for pod two, choose one of: [a b]"
    );
    let e = node
        .logs(
            "two",
            LogOptions {
                container: Some("c".into()),
                ..LogOptions::default()
            },
        )
        .expect_err("unknown");
    assert_eq!(e.message, "container c is not valid for pod two");
    let e = node
        .logs("nope", LogOptions::default())
        .expect_err("no pod");
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "pods \"nope\" not found")
    );
    node.wait_log(
        "two",
        Some("b"),
        "simulated container b (image redis) started",
    )
    .await;
    node.stop().await;
}

#[tokio::test]
async fn graceful_deletion_sends_sigterm_then_removes_the_pod() {
    let node = Node::start();
    let marker = node.root.path().join("term-marker");
    let mut c = shell(
        "c",
        "trap 'echo got TERM > \"$MARKER\"; exit 0' TERM; echo pid=$$$$; while true; do sleep 0.1; done",
    );
    c["env"] = json!([{"name": "MARKER", "value": marker.display().to_string()}]);
    node.create(pod(
        "graceful",
        json!({"terminationGracePeriodSeconds": 20, "containers": [c]}),
    ));
    node.wait_for("graceful", "Running", |p| phase(p) == "Running")
        .await;
    let pid = pid_in(&node.wait_log("graceful", None, "pid=").await);
    let mut changes = node.api.store.subscribe();
    node.delete("graceful", json!({}));
    node.wait_gone("graceful").await;
    assert_eq!(
        std::fs::read_to_string(&marker).expect("TERM was trapped"),
        "got TERM\n"
    );
    wait_dead(pid).await;
    // The last status written before removal reports the clean exit.
    let mut last = None;
    while let Ok(change) = changes.try_recv() {
        if change.resource == "pods" && change.kind == crate::sandbox::store::EventType::Modified {
            last = Some(change.object.clone());
        }
    }
    let last = last.expect("a final status");
    let t = &container_status(&last, "c")["state"]["terminated"];
    assert_eq!(t["exitCode"], 0);
    assert_eq!(t["reason"], "Completed");
    node.stop().await;
}

#[tokio::test]
async fn a_pod_stays_until_its_slowest_container_has_stopped() {
    let node = Node::start();
    let marker = node.root.path().join("slow-done");
    let fast = shell("fast", "trap 'exit 0' TERM; while true; do sleep 0.1; done");
    let mut slow = shell(
        "slow",
        "trap 'sleep 1; echo done > \"$MARKER\"; exit 0' TERM; echo armed; while true; do sleep 0.1; done",
    );
    slow["env"] = json!([{"name": "MARKER", "value": marker.display().to_string()}]);
    node.create(pod(
        "pair",
        json!({"terminationGracePeriodSeconds": 20, "containers": [fast, slow]}),
    ));
    node.wait_for("pair", "Running", |p| phase(p) == "Running")
        .await;
    // A SIGTERM before the shell has set its trap would end it at once.
    node.wait_log("pair", Some("slow"), "armed").await;
    node.delete("pair", json!({}));
    node.wait_gone("pair").await;
    assert!(
        marker.exists(),
        "the pod was removed before its slow container stopped"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_when_the_grace_period_ends() {
    let node = Node::start();
    let c = shell(
        "c",
        "trap '' TERM; echo pid=$$$$; while true; do sleep 0.1; done",
    );
    node.create(pod(
        "stubborn",
        json!({"terminationGracePeriodSeconds": 1, "containers": [c]}),
    ));
    node.wait_for("stubborn", "Running", |p| phase(p) == "Running")
        .await;
    let pid = pid_in(&node.wait_log("stubborn", None, "pid=").await);
    let mut changes = node.api.store.subscribe();
    let started = tokio::time::Instant::now();
    node.delete("stubborn", json!({}));
    node.wait_gone("stubborn").await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited the grace period"
    );
    wait_dead(pid).await;
    let mut last = None;
    while let Ok(change) = changes.try_recv() {
        if change.resource == "pods" && change.kind == crate::sandbox::store::EventType::Modified {
            last = Some(change.object.clone());
        }
    }
    let last = last.expect("a final status");
    assert_eq!(
        container_status(&last, "c")["state"]["terminated"]["exitCode"],
        137
    );
    assert_eq!(phase(&last), "Failed");
    node.stop().await;
}

#[tokio::test]
async fn a_pod_deleted_at_once_has_its_processes_killed() {
    let node = Node::start();
    node.create(pod(
        "forced",
        json!({"containers": [shell("c", "echo pid=$$$$; exec sleep 30")]}),
    ));
    node.wait_for("forced", "Running", |p| phase(p) == "Running")
        .await;
    let pid = pid_in(&node.wait_log("forced", None, "pid=").await);
    node.delete("forced", json!({"gracePeriodSeconds": 0}));
    assert!(node.get("forced").is_none());
    wait_dead(pid).await;
    node.stop().await;
}

#[tokio::test]
async fn pods_get_distinct_loopback_addresses() {
    let node = Node::start();
    for i in 0..6 {
        node.create(pod(
            &format!("p{i}"),
            json!({"containers": [{"name": "c", "image": "nginx"}]}),
        ));
    }
    let mut ips = HashSet::new();
    for i in 0..6 {
        let p = node
            .wait_for(&format!("p{i}"), "an IP", |p| {
                p["status"]["podIP"].is_string()
            })
            .await;
        let ip = p["status"]["podIP"].as_str().expect("ip").to_string();
        assert!(ip.starts_with("127.") && ip != HOST_IP, "{ip}");
        ips.insert(ip);
    }
    assert_eq!(ips.len(), 6);
    node.stop().await;
}

#[test]
fn the_address_pool_never_hands_out_an_address_in_use() {
    let mut pool = IpPool::default();
    let a = pool.allocate().expect("an address");
    assert_eq!(a, Ipv4Addr::new(127, 1, 0, 1));
    let b = pool.allocate().expect("an address");
    assert_ne!(a, b);
    pool.release(&a.to_string());
    let c = pool.allocate().expect("an address");
    assert!(c != a && c != b, "a freed address is not reused at once");
    pool.next = 255;
    assert_eq!(
        pool.allocate(),
        Some(Ipv4Addr::new(127, 1, 1, 1)),
        ".255 and .0 are skipped"
    );
}

#[tokio::test]
async fn a_missing_secret_holds_the_pod_until_it_exists() {
    let node = Node::start();
    let mut c = json!({"name": "c", "image": PAUSE});
    c["env"] = json!([{"name": "T", "valueFrom": {"secretKeyRef": {"name": "later", "key": "k"}}}]);
    node.create(pod("waiting", json!({"containers": [c]})));
    let p = node
        .wait_for("waiting", "CreateContainerConfigError", |p| {
            container_status(p, "c")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
        })
        .await;
    assert_eq!(phase(&p), "Pending");
    assert_eq!(
        container_status(&p, "c")["state"]["waiting"]["message"],
        "secret \"later\" not found"
    );
    let e = node
        .logs("waiting", LogOptions::default())
        .expect_err("nothing ran");
    assert_eq!(
        e.message,
        "container \"c\" in pod \"waiting\" is waiting to start: CreateContainerConfigError"
    );
    node.create_object("secrets", json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "later"}, "data": {"k": "dg=="}}));
    node.wait_for("waiting", "Running", |p| phase(p) == "Running")
        .await;
    node.stop().await;
}

#[tokio::test]
async fn a_missing_volume_source_keeps_containers_creating() {
    let node = Node::start();
    node.create(pod("mounting", json!({
        "containers": [{"name": "c", "image": PAUSE, "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
        "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}]
    })));
    let p = node
        .wait_for("mounting", "ContainerCreating", |p| {
            container_status(p, "c")["state"]["waiting"]["reason"] == "ContainerCreating"
        })
        .await;
    assert!(p["status"]["podIP"].is_null());
    assert_eq!(
        condition(&p, "PodReadyToStartContainers")["status"],
        "False"
    );
    node.create_object("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "b"}}));
    node.wait_for("mounting", "Running", |p| phase(p) == "Running")
        .await;
    node.stop().await;
}

#[tokio::test]
async fn the_task_runner_script_runs_the_handed_over_task_in_the_shared_volume() {
    let node = Node::start();
    let runner = json!({"name": "runner", "image": "hashicorp/terraform:1.9",
        "command": ["/bin/sh", "-c", RUNNER_SCRIPT],
        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]});
    let created = node.create(pod(
        "task",
        json!({"restartPolicy": "Never", "containers": [runner],
        "volumes": [{"name": "shared", "emptyDir": {}}]}),
    ));
    node.wait_for("task", "Running", |p| phase(p) == "Running")
        .await;
    let uid: String = created["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    let task_dir = node
        .root
        .path()
        .join(format!("default_task_{uid}"))
        .join("volumes/shared/task");
    std::fs::create_dir_all(&task_dir).expect("task dir");
    std::fs::write(
        task_dir.join("run.sh"),
        "echo task ran with $GREETING; exit 3\n",
    )
    .expect("run.sh");
    std::fs::write(task_dir.join("env"), "GREETING='hello there'\n").expect("env");
    std::fs::write(task_dir.join("ready"), "").expect("ready");
    let p = node
        .wait_for("task", "Failed", |p| phase(p) == "Failed")
        .await;
    assert_eq!(
        container_status(&p, "runner")["state"]["terminated"]["exitCode"],
        3
    );
    assert_eq!(
        std::fs::read_to_string(task_dir.join("exit-code")).expect("exit code written"),
        "3\n"
    );
    // The task's output goes to the shared volume, where the worker reads
    // it and prints it redacted; the runner's own log has none of it.
    assert_eq!(
        std::fs::read_to_string(task_dir.join("output")).expect("output written"),
        "task ran with hello there\n"
    );
    assert!(
        !node
            .logs("task", LogOptions::default())
            .expect("log")
            .contains("hello there")
    );
    node.stop().await;
}

#[tokio::test]
async fn readiness_follows_an_http_probe_on_the_pod_ip() {
    let node = Node::start();
    let mut c = shell("c", "exec sleep 30");
    c["ports"] = json!([{"name": "health", "containerPort": 18080}]);
    c["readinessProbe"] =
        json!({"httpGet": {"path": "/healthz", "port": "health"}, "periodSeconds": 1});
    node.create(pod("probed", json!({"containers": [c]})));
    let p = node
        .wait_for("probed", "Running", |p| phase(p) == "Running")
        .await;
    let ip = p["status"]["podIP"].as_str().expect("pod IP").to_string();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let p = node.get("probed").expect("pod");
    assert!(!is_ready(&p), "nothing answers the probe yet");
    assert_eq!(
        condition(&p, "Ready")["message"],
        "containers with unready status: [c]"
    );
    let listener = tokio::net::TcpListener::bind((ip.as_str(), 18080))
        .await
        .expect("bind the pod IP");
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
            let _ = tokio::io::AsyncWriteExt::write_all(
                &mut s,
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            )
            .await;
        }
    });
    node.wait_for("probed", "Ready", is_ready).await;
    server.abort();
    node.stop().await;
}

#[tokio::test]
async fn stopping_the_kubelet_kills_every_process() {
    let node = Node::start();
    node.create(pod(
        "a",
        json!({"containers": [shell("c", "echo pid=$$$$; exec sleep 30")]}),
    ));
    node.create(pod(
        "b",
        json!({"containers": [shell("c", "echo pid=$$$$; exec sleep 30")]}),
    ));
    let a = pid_in(&node.wait_log("a", None, "pid=").await);
    let b = pid_in(&node.wait_log("b", None, "pid=").await);
    node.stop().await;
    wait_dead(a).await;
    wait_dead(b).await;
}

#[tokio::test]
async fn after_the_kubelet_stops_deletions_are_immediate() {
    let node = Node::start();
    node.create(pod(
        "late",
        json!({"containers": [{"name": "c", "image": PAUSE}]}),
    ));
    node.wait_for("late", "Running", |p| phase(p) == "Running")
        .await;
    let api = node.api.clone();
    node.stop().await;
    let target = Target {
        namespace: Some("default".into()),
        name: Some("late".into()),
        subresource: None,
    };
    api.delete("", "v1", "pods", &target, &json!({}), &Query::default())
        .expect("deleted");
    assert!(api.store.get("pods", "default", "late").is_none());
}

#[test]
fn only_the_agentdeck_binary_is_taken_as_the_container_entry_point() {
    use std::path::Path;
    assert!(super::is_agentdeck(Path::new(
        "/work/target/release/agentdeck"
    )));
    // Test and bench harnesses (`deps/<name>-<hash>`) would run themselves
    // again for `__sandbox-container`.
    for other in [
        "/work/target/release/deps/bundle-19ec5f5b1a5aa63c",
        "/work/target/debug/deps/agentdeck-0123456789abcdef",
        "/usr/bin/agentdeck.sh",
    ] {
        assert!(!super::is_agentdeck(Path::new(other)), "{other}");
    }
}

#[tokio::test]
async fn the_pause_image_runs_silent_and_ready_until_stopped() {
    let node = Node::start();
    node.create(pod(
        "placeholder",
        json!({"containers": [{"name": "c", "image": PAUSE}]}),
    ));
    let p = node
        .wait_for("placeholder", "Running and Ready", |p| {
            phase(p) == "Running" && is_ready(p)
        })
        .await;
    assert!(container_status(&p, "c")["state"]["running"].is_object());
    let stand_in = condition(&p, crate::sandbox::kubelet::policy::STAND_IN_CONDITION);
    assert!(
        stand_in["message"]
            .as_str()
            .is_some_and(|m| m.contains("c: image registry.k8s.io/pause:3.10's /pause is played")),
        "{stand_in}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        node.logs("placeholder", LogOptions::default())
            .expect("a log"),
        "",
        "pause writes nothing until it is signalled"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_commandless_nginx_fails_to_start_as_its_entrypoint_is_not_here() {
    let node = Node::start();
    node.create(pod(
        "web",
        json!({"containers": [{"name": "web", "image": "nginx:1.27"}]}),
    ));
    let p = node
        .wait_for("web", "a StartError, then back-off", |p| {
            let c = container_status(p, "web");
            c["lastState"]["terminated"]["reason"] == "StartError"
                && c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        })
        .await;
    let c = container_status(&p, "web");
    let t = &c["lastState"]["terminated"];
    assert_eq!(t["exitCode"], 128);
    assert!(
        t["message"].as_str().is_some_and(|m| m.contains(
            "exec: \"/docker-entrypoint.sh\": stat /docker-entrypoint.sh: no such file or directory"
        )),
        "{t}"
    );
    // Never silently running: not ready, its pod neither (a pod whose
    // container restarts under `Always` is in phase Running, as a
    // kubelet's).
    assert_eq!(c["ready"], false);
    assert!(c["state"]["running"].is_null(), "{c}");
    assert_eq!(condition(&p, "Ready")["status"], "False");
    node.stop().await;
}

#[tokio::test]
async fn a_commandless_busybox_runs_sh_which_exits_at_once_into_a_crash_loop() {
    let node = Node::start();
    node.create(pod(
        "bb",
        json!({"containers": [{"name": "bb", "image": "busybox"}]}),
    ));
    let p = node
        .wait_for("bb", "CrashLoopBackOff after sh completed", |p| {
            let c = container_status(p, "bb");
            c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
                && c["lastState"]["terminated"]["reason"] == "Completed"
        })
        .await;
    let c = container_status(&p, "bb");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 0);
    assert!(c["restartCount"].as_u64().is_some_and(|n| n >= 1), "{c}");
    node.stop().await;
}

#[tokio::test]
async fn an_image_the_sandbox_cannot_run_waits_as_an_image_it_cannot_pull() {
    let node = Node::start();
    node.create(pod(
        "app",
        json!({"containers": [{"name": "app", "image": "example.com/acme/app:2"}]}),
    ));
    let p = node
        .wait_for("app", "ErrImagePull", |p| {
            container_status(p, "app")["state"]["waiting"]["reason"] == "ErrImagePull"
        })
        .await;
    let message = container_status(&p, "app")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.starts_with(
            "rpc error: code = Unknown desc = failed to pull and unpack image \"example.com/acme/app:2\""
        ),
        "{message}"
    );
    assert_eq!(phase(&p), "Pending");
    let p = node
        .wait_for("app", "ImagePullBackOff", |p| {
            container_status(p, "app")["state"]["waiting"]["reason"] == "ImagePullBackOff"
        })
        .await;
    assert_eq!(
        container_status(&p, "app")["state"]["waiting"]["message"],
        format!("Back-off pulling image \"example.com/acme/app:2\": ErrImagePull: {message}")
    );
    assert_eq!(phase(&p), "Pending");
    assert_eq!(container_status(&p, "app")["restartCount"], 0);
    let (events, _) = node.api.store.list("events", Some("default"));
    let said = |reason: &str, text: &str| {
        events.iter().any(|e| {
            e["reason"] == reason && e["message"].as_str().is_some_and(|m| m.contains(text))
        })
    };
    assert!(said("Pulling", "Pulling image \"example.com/acme/app:2\""));
    assert!(said(
        "Failed",
        "Failed to pull image \"example.com/acme/app:2\": rpc error"
    ));
    assert!(said(
        "BackOff",
        "Back-off pulling image \"example.com/acme/app:2\""
    ));
    node.stop().await;
}
