//! Support bundles and debug pods end to end: the real collector (library
//! API, as the CLI and the console call it) and the real controller against
//! an in-process sandbox, through the real kube client. Bundles are checked
//! with the machine's `unzip`, as a support engineer would open them.

mod common;

use common::eventually;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentdeck::cli::{DebugMode, DebugProfile};
use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::controller::{self, tails};
use agentdeck::crd::{AgentPool, AgentTask};
use agentdeck::ops::bundle::{self, BundleOptions, Summary};
use agentdeck::ops::debug::{self, DebugOptions};
use agentdeck::sandbox::Sandbox;
use agentdeck::sandbox::kubelet::KubeletConfig;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, CustomResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
const POOL: &str = "bpool";
const RUN_SHELL: &str = "sandbox.agentdeck.dev/run-shell";

async fn start() -> (Sandbox, Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    // Containers start through agentdeck's hidden entry point, as in a
    // real run (this test binary has none).
    let kubelet = KubeletConfig {
        exe: env!("CARGO_BIN_EXE_agentdeck").into(),
        ..KubeletConfig::from_env()
    };
    let sandbox = Sandbox::start_with_kubelet(0, 2, kubelet)
        .await
        .expect("sandbox starts");
    let client = sandbox.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [AgentPool::crd(), AgentTask::crd()] {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd created");
    }
    (sandbox, client)
}

fn config() -> Config {
    let mut c = Config {
        resync_interval_seconds: 2,
        controller_namespace: NS.into(),
        ..Config::default()
    };
    c.leader_election.enabled = false;
    c.health_probe.interval_seconds = 1;
    c.health_probe.offline_after_seconds = 600;
    c
}

/// A pod whose containers run shell scripts for real, labelled as one of
/// the pool's agents.
fn shell_pod(name: &str, containers: &[(&str, &str)], restart: &str, env: Value) -> Pod {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(c, script)| {
            json!({"name": c, "image": "busybox", "command": ["sh", "-c", script], "env": env})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "agentdeck", "agentdeck.dev/pool": POOL},
            "annotations": {RUN_SHELL: "true"}
        },
        "spec": {"containers": containers, "restartPolicy": restart, "terminationGracePeriodSeconds": 1}
    }))
    .expect("pod")
}

/// Secrets planted in logs, one format each, cycling; every value is
/// unique so a survivor names its format.
fn planted(i: usize) -> (String, String) {
    let u = format!("{i:03}");
    match i % 12 {
        0 => (
            format!("DB_PASSWORD=pw{u}plantedvalue"),
            format!("pw{u}plantedvalue"),
        ),
        1 => (
            format!("Authorization: Bearer tok{u}PlantedBearer.x"),
            format!("tok{u}PlantedBearer"),
        ),
        2 => {
            let s = format!("ghp_{u}Planted0123456789abcdefghijklmnopq");
            (format!("pushing with {s}"), s)
        }
        3 => {
            let s = format!("AKIAPLANTED{u}ABCDE");
            let s = format!("{s}{}", "X".repeat(20 - s.len()));
            (format!("aws key {s} in use"), s)
        }
        4 => (
            format!("connecting postgres://admin:urlpw{u}planted@db:5432/x"),
            format!("urlpw{u}planted"),
        ),
        5 => {
            let s = format!("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{u}planted.sig{u}");
            (format!("id token {s}"), format!("eyJzdWIiOiJ{u}planted"))
        }
        6 => {
            let s = format!("glpat-{u}Plantedabcdefghijklm");
            (format!("gitlab {s}"), s)
        }
        7 => (
            format!("Server=db;User ID=sa;Password=connpw{u}planted;Database=x"),
            format!("connpw{u}planted"),
        ),
        8 => (
            format!("{{\"level\":\"info\",\"api_key\":\"jsonkey{u}planted\"}}"),
            format!("jsonkey{u}planted"),
        ),
        9 => {
            let s = format!(
                "pul-{u}{}",
                "a1b2c3d4e5".repeat(4).get(..37).unwrap_or_default()
            );
            (format!("pulumi login {s}"), s)
        }
        10 => {
            let s = format!("AbCdEfGh{u}XYZ.atlasv1.{}", "Zq9".repeat(24));
            (
                format!("tfc token {s}"),
                format!("atlasv1.{}", "Zq9".repeat(24)),
            )
        }
        _ => (
            format!("  client_secret: yamlsec{u}planted"),
            format!("yamlsec{u}planted"),
        ),
    }
}

fn unzip(zip: &Path, into: &Path) {
    let t = std::process::Command::new("unzip")
        .arg("-t")
        .arg(zip)
        .output()
        .expect("unzip runs");
    assert!(
        t.status.success(),
        "unzip -t failed:\n{}",
        String::from_utf8_lossy(&t.stdout)
    );
    let x = std::process::Command::new("unzip")
        .arg("-q")
        .arg(zip)
        .arg("-d")
        .arg(into)
        .output()
        .expect("unzip runs");
    assert!(x.status.success(), "{}", String::from_utf8_lossy(&x.stderr));
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest.json"))
        .expect("manifest is JSON")
}

fn has_error(m: &Value, pod: &str, container: &str) -> bool {
    m["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["name"] == pod && (e["container"] == container || e["container"].is_null()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_of_a_busy_namespace_has_every_container_and_no_planted_secret() {
    let (sandbox, client) = start().await;
    let cancel = CancellationToken::new();
    let handle = controller::start(
        Connection {
            client: client.clone(),
            namespace: NS.into(),
            streams: None,
        },
        &config(),
        cancel.clone(),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut secrets: Vec<String> = Vec::new();
    let pp = PostParams::default();

    // A Secret whose value an agent prints: hidden because the bundle
    // learns the namespace's Secret values.
    let leaked = "secret-object-value-planted-42";
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "pool-token"},
        "stringData": {"token": leaked}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&pp, &s)
        .await
        .expect("secret created");
    secrets.push(leaked.into());

    // ConfigMaps and our own objects carry secrets too.
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "agent-settings"},
        "data": {
            "api_token": "cmtoken-planted-1",
            "app.properties": "user=bob\npassword=cmprops-planted-2\n",
            "notes": "retry with ghp_CmPlanted3abcdefghijklmnopqrstuvwxyz0"
        }
    }))
    .expect("cm");
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&pp, &cm)
        .await
        .expect("cm created");
    secrets.extend(
        [
            "cmtoken-planted-1",
            "cmprops-planted-2",
            "ghp_CmPlanted3abcdefghijklmnopqrstuvwxyz0",
        ]
        .map(String::from),
    );
    let pool: AgentPool = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
        "metadata": {"name": POOL},
        "spec": {
            "image": "busybox", "minReplicas": 0, "maxReplicas": 0,
            "env": [{"name": "PLATFORM_TOKEN", "value": "poolenv-planted-4"}]
        }
    }))
    .expect("pool");
    Api::<AgentPool>::namespaced(client.clone(), NS)
        .create(&pp, &pool)
        .await
        .expect("pool created");
    let task: AgentTask = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": "t1"},
        "spec": {
            "pool": POOL, "command": ["tofu", "apply", "--password=taskarg-planted-5"],
            "env": [{"name": "DB_PASSWORD", "value": "taskenv-planted-6"}]
        }
    }))
    .expect("task");
    Api::<AgentTask>::namespaced(client.clone(), NS)
        .create(&pp, &task)
        .await
        .expect("task created");
    secrets.extend(
        [
            "poolenv-planted-4",
            "taskarg-planted-5",
            "taskenv-planted-6",
        ]
        .map(String::from),
    );

    // 46 pods, two containers each, each printing planted secrets; with the
    // four special pods below, 50 in all.
    let mut expected_containers: Vec<(String, String)> = Vec::new();
    let mut n = 0;
    for p in 0..46 {
        let name = format!("agent-{p:02}");
        let mut scripts = Vec::new();
        for c in ["agent", "runner"] {
            let (l1, s1) = planted(n);
            let (l2, s2) = planted(n + 1);
            n += 2;
            secrets.push(s1);
            secrets.push(s2);
            scripts.push((
                c,
                format!(
                    "echo 'start {c}'; echo '{l1}'; echo '{l2}'; echo 'ready {c}'; exec sleep 3600"
                ),
            ));
            expected_containers.push((name.clone(), c.to_owned()));
        }
        let refs: Vec<(&str, &str)> = scripts.iter().map(|(c, s)| (*c, s.as_str())).collect();
        let env = json!([{"name": "DB_PASSWORD", "value": format!("podenv-{p}-planted")}]);
        secrets.push(format!("podenv-{p}-planted"));
        pods.create(&pp, &shell_pod(&name, &refs, "Always", env))
            .await
            .expect("pod created");
    }
    // One that crash-loops (previous logs).
    pods.create(
        &pp,
        &shell_pod(
            "agent-crash",
            &[("agent", &format!("echo 'crashing {leaked}'; echo 'AWS_SECRET_ACCESS_KEY=crashpw-planted-7'; exit 3"))],
            "Always",
            json!([]),
        ),
    )
    .await
    .expect("pod created");
    secrets.push("crashpw-planted-7".into());
    expected_containers.push(("agent-crash".into(), "agent".into()));
    // One with a 10 MB line, binary bytes and escape sequences.
    pods.create(
        &pp,
        &shell_pod(
            "agent-big",
            &[("agent", "printf 'token=bigpw-planted-8 '; head -c 10000000 /dev/zero | tr '\\000' 'a'; printf '\\n\\033[31mred\\033[0m \\377\\376\\001 binary ghp_BigPlanted9abcdefghijklmnopqrstuvwxyz01\\n'; exec sleep 3600")],
            "Always",
            json!([]),
        ),
    )
    .await
    .expect("pod created");
    secrets.extend(
        [
            "bigpw-planted-8",
            "ghp_BigPlanted9abcdefghijklmnopqrstuvwxyz01",
        ]
        .map(String::from),
    );
    expected_containers.push(("agent-big".into(), "agent".into()));
    // One deleted before collection: only the controller's kept tail has it.
    pods.create(
        &pp,
        &shell_pod(
            "agent-gone",
            &[(
                "agent",
                "echo 'gone pod last words'; echo 'password=gonepw-planted-10'; echo 'fetch https://u:gone-url-planted-12@host.example/x'; exec sleep 3600",
            )],
            "Always",
            json!([]),
        ),
    )
    .await
    .expect("pod created");
    secrets.push("gonepw-planted-10".into());
    secrets.push("gone-url-planted-12".into());
    // One deleted mid-collection.
    pods.create(
        &pp,
        &shell_pod(
            "zz-victim",
            &[(
                "agent",
                "echo 'victim password=victimpw-planted-11'; exec sleep 3600",
            )],
            "Always",
            json!([]),
        ),
    )
    .await
    .expect("pod created");
    secrets.push("victimpw-planted-11".into());
    assert!(secrets.len() >= 40, "{} planted secrets", secrets.len());

    eventually(
        "every pod printed its lines and the crash-looper restarted",
        || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&Default::default()).await.ok()?;
                let crash = list
                    .items
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some("agent-crash"))?;
                let restarts = crash
                    .status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .restart_count;
                if restarts < 1 {
                    return None;
                }
                for p in ["agent-00", "agent-23", "agent-gone", "zz-victim"] {
                    let log = pods
                        .logs(
                            p,
                            &kube::api::LogParams {
                                container: Some("agent".into()),
                                ..Default::default()
                            },
                        )
                        .await
                        .ok()?;
                    if !log.contains("ready agent")
                        && !log.contains("last words")
                        && !log.contains("victim")
                    {
                        return None;
                    }
                }
                // Not UTF-8: read it as bytes.
                let mut big = Vec::new();
                let stream = pods
                    .log_stream("agent-big", &Default::default())
                    .await
                    .ok()?;
                futures::AsyncReadExt::read_to_end(&mut std::pin::pin!(stream), &mut big)
                    .await
                    .ok()?;
                memchr_find(&big, b"binary").map(|_| ())
            }
        },
    )
    .await;

    pods.delete("agent-gone", &DeleteParams::default())
        .await
        .expect("gone deleted");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    eventually("the gone pod has left and its tail is kept", || {
        let (pods, cms) = (pods.clone(), cms.clone());
        async move {
            if pods.get_opt("agent-gone").await.ok()?.is_some() {
                return None;
            }
            let cm = cms.get_opt(&tails::configmap_name(POOL)).await.ok()??;
            let v = serde_json::to_value(&cm).ok()?;
            tails::entries(&v)
                .iter()
                .any(|(p, _, t)| p == "agent-gone" && t.contains("last words"))
                .then_some(())
        }
    })
    .await;

    // Collect; the first log written deletes the victim.
    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("b.zip");
    let mut opts = BundleOptions::new(NS, &out);
    opts.max_bytes_per_log = 1 << 20;
    opts.parallelism = 2;
    opts.deadline = Duration::from_secs(240);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let fired = AtomicBool::new(false);
    let phases = Arc::new(Mutex::new(Vec::new()));
    let seen = phases.clone();
    let victim = {
        let pods = pods.clone();
        tokio::spawn(async move {
            if rx.recv().await.is_some() {
                let _ = pods
                    .delete(
                        "zz-victim",
                        &DeleteParams {
                            grace_period_seconds: Some(0),
                            ..Default::default()
                        },
                    )
                    .await;
            }
        })
    };
    let summary: Summary = bundle::collect(client.clone(), opts, move |p| {
        seen.lock().expect("lock").push(p.phase);
        if p.current.starts_with("pods/") && !fired.swap(true, Ordering::SeqCst) {
            let _ = tx.send(());
        }
    })
    .await
    .expect("bundle written");
    victim.await.expect("victim task");
    assert!(out.exists() && !summary.deadline_reached, "{summary:?}");
    assert_eq!(
        phases.lock().expect("lock").last(),
        Some(&bundle::Phase::Done)
    );
    // No half file is left beside it.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("e").file_name())
        .collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("b.zip")]);

    let x = dir.path().join("x");
    unzip(&out, &x);
    let m = manifest(&x);
    let files = files_under(&x);
    let names: BTreeSet<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(&x)
                .expect("under")
                .to_string_lossy()
                .into_owned()
        })
        .collect();

    // Every pod and container has its log or an error entry.
    for (pod, c) in &expected_containers {
        assert!(
            names.contains(&format!("pods/{pod}/{c}.log")) || has_error(&m, pod, c),
            "{pod}/{c}: neither a file nor an error; files: {names:?}"
        );
    }
    assert!(
        names.contains("pods/zz-victim/agent.log") || has_error(&m, "zz-victim", "agent"),
        "the victim has a file or an error"
    );
    // It was deleted mid-collection: listed with the pods, gone at the end.
    let pods_yaml = std::fs::read_to_string(x.join("objects/pods.yaml")).expect("pods.yaml");
    assert!(
        pods_yaml.contains("name: zz-victim"),
        "the victim was listed"
    );
    assert!(
        pods.get_opt("zz-victim").await.expect("get").is_none(),
        "the victim is gone"
    );
    assert!(
        !pods_yaml.contains("name: agent-gone"),
        "the gone pod was not listed"
    );
    assert!(
        names.contains("pods/agent-crash/agent.previous.log"),
        "{names:?}"
    );
    let gone = std::fs::read_to_string(x.join("pods/agent-gone/agent.final.log"))
        .expect("kept tail in the bundle");
    assert!(gone.contains("gone pod last words"), "{gone}");
    // Redacted by the controller when kept, and not mangled by the bundle:
    // the host stays, the password is one whole placeholder.
    let url = regex::Regex::new(
        r"fetch https://u:\*\*\*REDACTED:url-credentials:[0-9a-f]{10}\*\*\*@host\.example/x\n",
    )
    .expect("regex");
    assert!(url.is_match(&gone), "{gone}");
    assert!(gone.contains("password=***REDACTED:"), "{gone}");
    for f in [
        "manifest.json",
        "redactions.json",
        "events.yaml",
        "objects/pods.yaml",
        "objects/configmaps.yaml",
        "objects/agentpools.yaml",
        "objects/agenttasks.yaml",
        "objects/secrets.yaml",
        "objects/nodes.yaml",
        "health/agents.json",
    ] {
        assert!(names.contains(f), "{f} missing: {names:?}");
    }
    let secrets_yaml = std::fs::read_to_string(x.join("objects/secrets.yaml")).expect("secrets");
    assert!(secrets_yaml.contains("pool-token") && secrets_yaml.contains("token"));

    // Zero planted secrets survive, anywhere.
    for f in &files {
        let bytes = std::fs::read(f).expect("read");
        for s in &secrets {
            assert!(
                memchr_find(&bytes, s.as_bytes()).is_none(),
                "{s} survived in {}",
                f.display()
            );
        }
    }
    // Caps hold: the 10 MB log is cut to its end with a marker.
    let cap = 1u64 << 20;
    for f in files
        .iter()
        .filter(|f| f.to_string_lossy().ends_with(".log"))
    {
        let len = std::fs::metadata(f).expect("meta").len();
        assert!(len <= cap + 512, "{} is {len} bytes", f.display());
    }
    let big = std::fs::read(x.join("pods/agent-big/agent.log")).expect("big log");
    assert!(
        big.starts_with(b"[agentdeck bundle: the first"),
        "marker at the top"
    );
    assert!(memchr_find(&big, b"\x1b[31mred\x1b[0m \xff\xfe\x01 binary").is_some());
    // The report counts what was hidden, per file.
    let report: Value =
        serde_json::from_slice(&std::fs::read(x.join("redactions.json")).expect("report"))
            .expect("json");
    assert!(
        report["files"]["pods/agent-00/agent.log"].is_object(),
        "{report}"
    );
    assert!(
        m["redactions"].as_u64().unwrap_or(0) >= secrets.len() as u64 - 10,
        "{m}"
    );

    cancel.cancel();
    handle.join().await;
    sandbox.stop().await;
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_against_an_api_that_stops_answering_ends_by_its_deadline_with_what_it_got() {
    let (sandbox, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for p in 0..6 {
        pods.create(
            &PostParams::default(),
            &shell_pod(
                &format!("p{p}"),
                &[("agent", "echo hello; exec sleep 3600")],
                "Always",
                json!([]),
            ),
        )
        .await
        .expect("pod created");
    }
    eventually("pods run", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .then_some(())
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("partial.zip");
    let mut opts = BundleOptions::new(NS, &out);
    opts.parallelism = 1;
    opts.request_timeout = Duration::from_secs(2);
    opts.deadline = Duration::from_secs(8);
    let api = sandbox.api().clone();
    // The API stops answering once the first file is written.
    let summary = bundle::collect(client.clone(), opts, move |p| {
        if p.files_done == 1 {
            api.faults.set_latency(Duration::from_secs(3600));
        }
    })
    .await
    .expect("a partial bundle is still a bundle");
    assert!(out.exists());
    assert!(
        summary
            .errors
            .iter()
            .any(|e| e.message.contains("no answer within") || e.message.contains("deadline")),
        "{:?}",
        summary.errors
    );
    let x = dir.path().join("x");
    unzip(&out, &x);
    let m = manifest(&x);
    assert!(!m["errors"].as_array().expect("errors").is_empty());
    assert!(
        x.join("objects/secrets.yaml").exists(),
        "what it got is kept"
    );
    sandbox.api().faults.clear();
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debug_copy_waits_in_a_shell_is_listed_and_is_deleted_when_expired() {
    let (sandbox, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut target = shell_pod(
        "agent-x",
        &[("agent", "echo real agent; exec sleep 3600")],
        "Always",
        json!([{"name": "POOL_NAME", "value": POOL}]),
    );
    target.spec.as_mut().expect("spec").containers[0].readiness_probe = Some(
        serde_json::from_value(json!({"httpGet": {"path": "/healthz", "port": 8080}}))
            .expect("probe"),
    );
    pods.create(&PostParams::default(), &target)
        .await
        .expect("pod created");
    let opts = DebugOptions {
        namespace: NS.into(),
        pod: "agent-x".into(),
        image: Some("busybox:1.36".into()),
        mode: DebugMode::Copy,
        profile: DebugProfile::General,
        ttl: Duration::from_secs(3600),
    };
    let made = debug::create(&client, &opts)
        .await
        .expect("debug pod created");
    assert_eq!(
        made.original_command[..2],
        ["sh".to_owned(), "-c".to_owned()]
    );
    let copy = pods.get(&made.name).await.expect("copy exists");
    let c = &copy.spec.as_ref().expect("spec").containers[0];
    assert!(c.readiness_probe.is_none());
    assert_eq!(c.image.as_deref(), Some("busybox:1.36"));
    let listed = debug::list(&client, NS).await.expect("list");
    assert_eq!(
        listed.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        [made.name.as_str()]
    );
    assert!(listed[0].expires_at.is_some());

    // A second one that expires at once: the controller deletes it, and
    // only it.
    let short = debug::create(
        &client,
        &DebugOptions {
            ttl: Duration::from_secs(1),
            ..opts.clone()
        },
    )
    .await
    .expect("second debug pod");
    let cancel = CancellationToken::new();
    let handle = controller::start(
        Connection {
            client: client.clone(),
            namespace: NS.into(),
            streams: None,
        },
        &config(),
        cancel.clone(),
    );
    eventually("the controller deletes the expired debug pod", || {
        let pods = pods.clone();
        let name = short.name.clone();
        async move { pods.get_opt(&name).await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert!(
        pods.get_opt(&made.name).await.expect("get").is_some(),
        "the live one stays"
    );
    assert!(
        pods.get_opt("agent-x").await.expect("get").is_some(),
        "the target stays"
    );
    // Ephemeral mode: a container added to the running pod, aimed at the
    // agent container.
    let eph = debug::create(
        &client,
        &DebugOptions {
            mode: DebugMode::Ephemeral,
            ..opts.clone()
        },
    )
    .await
    .expect("ephemeral container added");
    assert_eq!(eph.name, "agent-x");
    let with = pods.get("agent-x").await.expect("target");
    let added = with
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.clone())
        .unwrap_or_default();
    assert_eq!(added.len(), 1, "{added:?}");
    assert_eq!(added[0].name, eph.container);
    assert_eq!(added[0].target_container_name.as_deref(), Some("agent"));
    assert_eq!(added[0].image.as_deref(), Some("busybox:1.36"));
    // `debug --list` shows it too.
    let listed = debug::list_ephemeral(&client, NS).await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|e| (
                e.pod.as_str(),
                e.container.as_str(),
                e.target_container.as_deref()
            ))
            .collect::<Vec<_>>(),
        [("agent-x", eph.container.as_str(), Some("agent"))]
    );
    // --cleanup removes the rest now.
    let deleted = debug::cleanup(&client, NS, None, None)
        .await
        .expect("cleanup");
    assert_eq!(deleted, vec![made.name.clone()]);
    cancel.cancel();
    handle.join().await;
    sandbox.stop().await;
}

/// Issue #30: one secret, one placeholder across live logs and kept tails.
/// A pod prints a Secret's value (from its env) as `DB_PASSWORD=…` and in a
/// URL, and a URL with a password known to nobody; it is deleted and the
/// controller keeps its tail; a new pod prints the same. In the bundle the
/// kept `.final.log` and the new pod's live log show the same placeholders,
/// and the values are nowhere: not in the bundle, not in the kept tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_has_one_placeholder_in_a_live_log_and_in_a_kept_tail() {
    let (sandbox, client) = start().await;
    let cancel = CancellationToken::new();
    let handle = controller::start(
        Connection {
            client: client.clone(),
            namespace: NS.into(),
            streams: None,
        },
        &config(),
        cancel.clone(),
    );
    let pp = PostParams::default();
    let value = "db-pw-from-secret-31";
    let url_pw = "url-pw-planted-77";
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    for s in [
        json!({"metadata": {"name": "db"}, "stringData": {"password": value}}),
        // As `agentdeck manifests` renders it: no value; the controller
        // fills it in.
        json!({"metadata": {"name": "agentdeck-redaction-key"}, "type": "Opaque"}),
    ] {
        secrets
            .create(&pp, &serde_json::from_value(s).expect("secret"))
            .await
            .expect("secret created");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let env = json!([{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]);
    let script = |word: &str| {
        format!(
            "echo \"DB_PASSWORD=$DB_PASSWORD\"; echo \"connecting postgres://app:$DB_PASSWORD@db:5432/x\"; \
             echo 'fetch https://u:{url_pw}@host.example/x'; echo '{word} ready'; exec sleep 3600"
        )
    };
    let printed = |pod: &'static str, word: &'static str| {
        let pods = pods.clone();
        async move {
            let log = pods
                .logs(
                    pod,
                    &kube::api::LogParams {
                        container: Some("agent".into()),
                        ..Default::default()
                    },
                )
                .await
                .ok()?;
            log.contains(&format!("{word} ready")).then_some(())
        }
    };
    pods.create(
        &pp,
        &shell_pod(
            "agent-old",
            &[("agent", &script("old"))],
            "Always",
            env.clone(),
        ),
    )
    .await
    .expect("pod created");
    eventually("the old pod printed its lines", || {
        printed("agent-old", "old")
    })
    .await;
    pods.delete("agent-old", &DeleteParams::default())
        .await
        .expect("old deleted");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let kept = eventually("the old pod has left and its tail is kept", || {
        let (pods, cms) = (pods.clone(), cms.clone());
        async move {
            if pods.get_opt("agent-old").await.ok()?.is_some() {
                return None;
            }
            let cm = cms.get_opt(&tails::configmap_name(POOL)).await.ok()??;
            let v = serde_json::to_value(&cm).ok()?;
            tails::entries(&v)
                .into_iter()
                .find(|(p, _, t)| p == "agent-old" && t.contains("old ready"))
                .map(|(_, _, t)| t)
        }
    })
    .await;
    // The kept tail (a ConfigMap) holds neither value.
    assert!(!kept.contains(value) && !kept.contains(url_pw), "{kept}");
    pods.create(
        &pp,
        &shell_pod("agent-new", &[("agent", &script("new"))], "Always", env),
    )
    .await
    .expect("pod created");
    eventually("the new pod printed its lines", || {
        printed("agent-new", "new")
    })
    .await;

    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("b.zip");
    let mut opts = BundleOptions::new(NS, &out);
    opts.deadline = Duration::from_secs(120);
    bundle::collect(client.clone(), opts, |_| {})
        .await
        .expect("bundle written");
    let x = dir.path().join("x");
    unzip(&out, &x);
    let final_log = std::fs::read_to_string(x.join("pods/agent-old/agent.final.log"))
        .expect("kept tail in the bundle");
    let live = std::fs::read_to_string(x.join("pods/agent-new/agent.log")).expect("live log");
    let lines = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains("REDACTED"))
            .map(str::to_owned)
            .collect()
    };
    let kept_lines = lines(&final_log);
    assert_eq!(kept_lines.len(), 3, "{final_log}");
    assert_eq!(
        kept_lines,
        lines(&live),
        "kept:\n{final_log}\nlive:\n{live}"
    );
    // The Secret's value is one placeholder in both forms it was printed in.
    let known =
        regex::Regex::new(r"\*\*\*REDACTED:known-secret:[0-9a-f]{10}\*\*\*").expect("regex");
    let found: BTreeSet<&str> = known.find_iter(&live).map(|m| m.as_str()).collect();
    assert_eq!(found.len(), 1, "{live}");
    let p = found.first().expect("one");
    assert!(live.contains(&format!("DB_PASSWORD={p}\n")), "{live}");
    assert!(
        live.contains(&format!("postgres://app:{p}@db:5432/x")),
        "{live}"
    );
    assert!(
        live.contains("fetch https://u:***REDACTED:url-credentials:"),
        "{live}"
    );
    for f in files_under(&x) {
        let text = std::fs::read(&f).expect("read");
        for s in [value, url_pw] {
            assert!(
                memchr_find(&text, s.as_bytes()).is_none(),
                "{s} in {}",
                f.display()
            );
        }
    }
    let report: Value =
        serde_json::from_slice(&std::fs::read(x.join("redactions.json")).expect("report"))
            .expect("json");
    assert!(
        report["placeholderKey"]
            .as_str()
            .is_some_and(|k| k.contains("agree")),
        "{report}"
    );

    cancel.cancel();
    handle.join().await;
    sandbox.stop().await;
}
