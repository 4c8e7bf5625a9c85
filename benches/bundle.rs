//! Support-bundle figures: redaction throughput on one core, then
//! `agentdeck bundle` against the shell loop the chart's documentation
//! gives, side by side on one sandbox namespace (wall time, peak RSS, what
//! each captured), then that bundle opened by its receiver: the console
//! (`agentdeck --bundle`, under tmux) until its pools are on screen, and
//! the bundle served (`agentdeck sandbox --from-bundle`'s server) until a
//! client lists its pools.
//!
//! ```text
//! cargo bench --bench bundle
//! AGENTDECK_BENCH_MB=32 AGENTDECK_BENCH_PODS=50 AGENTDECK_BENCH_LOG_KB=512 cargo bench --bench bundle   # quicker
//! ```
//!
//! Prints what it measured; asserts nothing.

use std::io::Write;
use std::time::{Duration, Instant};

use agentdeck::ops::bundle::redact::{RedactStream, Redactor};
use agentdeck::sandbox::Sandbox;
use agentdeck::sandbox::kubelet::KubeletConfig;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "default";

/// Log lines as agents and their tools write them: mostly plain, some JSON,
/// a few with keywords and fewer with secrets.
const LINES: &[&str] = &[
    "[plan-42] Refreshing state... [id=vpc-0a1b2c3d4e5f67890]\n",
    "[plan-42] aws_instance.web[3]: Still creating... [1m20s elapsed]\n",
    "{\"level\":\"info\",\"ts\":\"2026-11-24T08:00:00Z\",\"msg\":\"task claimed\",\"task\":\"apply-7\",\"attempt\":1}\n",
    "{\"level\":\"debug\",\"ts\":\"2026-11-24T08:00:01Z\",\"msg\":\"heartbeat\",\"task\":\"apply-7\",\"elapsed_ms\":5012}\n",
    "2026-11-24T08:00:02Z INFO agentdeck::agent: polling for work pool=default idle=true\n",
    "[apply-7] module.network.aws_subnet.private[1]: Creation complete after 2s [id=subnet-0123]\n",
    "[apply-7] Plan: 12 to add, 0 to change, 3 to destroy.\n",
    "2026-11-24T08:00:03Z WARN reqwest: retrying request to https://api.example.com/v1/runs (attempt 2)\n",
    "[apply-7] Initializing provider plugins... - Finding hashicorp/aws versions matching \"~> 5.0\"...\n",
    "{\"level\":\"info\",\"msg\":\"token refreshed\",\"expires_in\":3600}\n",
    "[apply-7] export TF_VAR_db_password=S3cretPassw0rd-123\n",
    "[apply-7] Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.c2lnbmF0dXJl\n",
    "2026-11-24T08:00:04Z INFO agentdeck::agent: task finished task=apply-7 exit=0 duration=93.2s\n",
    "[plan-42] Note: Objects have changed outside of Terraform\n",
    "[plan-42]   # aws_security_group.allow_tls will be updated in-place\n",
    "[plan-42]       ~ ingress = [ (known after apply) ]\n",
];

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    redaction();
    compare();
}

fn redaction() {
    let mb: usize = std::env::var("AGENTDECK_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let mut input = Vec::with_capacity(mb << 20);
    let mut i = 0usize;
    while input.len() < mb << 20 {
        // One secret line in about every 200.
        let line = LINES[i % LINES.len()];
        if (line.contains("password") || line.contains("Bearer")) && i % 100 != 10 && i % 100 != 11
        {
            i += 1;
            continue;
        }
        input.extend_from_slice(line.as_bytes());
        i += 1;
    }
    // Sparse: realistic logs. Dense: a secret on every line (a pathological
    // agent that prints its token with each request).
    let dense: Vec<u8> = b"2026-11-24T08:00:00Z INFO request done status=200 token=abc123secret\n"
        .iter()
        .copied()
        .cycle()
        .take(input.len() / 4)
        .collect();
    // The logs of the comparison below: every line of LINES in turn, two
    // secrets in every sixteen lines.
    let block: Vec<u8> = LINES
        .concat()
        .into_bytes()
        .iter()
        .copied()
        .cycle()
        .take(input.len() / 4)
        .collect();
    let literals: Vec<Vec<u8>> = (0..50)
        .map(|i| format!("secret-value-{i:04}-xyz").into_bytes())
        .collect();
    let redactor = Redactor::new(&literals);
    for (what, data) in [
        ("sparse", &input),
        ("sparse", &input),
        ("the comparison's logs", &block),
        ("dense", &dense),
    ] {
        let started = Instant::now();
        let mut s = RedactStream::new(&redactor, std::io::sink());
        for piece in data.chunks(64 * 1024) {
            s.write_all(piece).expect("sink");
        }
        let (_, counts) = s.finish().expect("sink");
        let secs = started.elapsed().as_secs_f64();
        println!(
            "redaction ({what}, 50 known secrets): {:.0} MB in {:.3} s on one core = {:.0} MB/s; {} matches",
            data.len() as f64 / 1e6,
            secs,
            data.len() as f64 / 1e6 / secs,
            counts.values().sum::<u64>(),
        );
    }
}

/// Bundle vs the shell loop of the chart's documentation on one sandbox
/// namespace.
fn compare() {
    let pods: usize = env_or("AGENTDECK_BENCH_PODS", 200);
    let log_kb: usize = env_or("AGENTDECK_BENCH_LOG_KB", 2048);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Containers start through agentdeck's hidden entry point; without this
    // the kubelet would run this bench binary for each of them (and each
    // copy would start a sandbox of its own).
    let kubelet = KubeletConfig {
        exe: env!("CARGO_BIN_EXE_agentdeck").into(),
        ..KubeletConfig::from_env()
    };
    let sandbox = rt
        .block_on(Sandbox::start_with_kubelet(0, 3, kubelet))
        .expect("sandbox starts");
    let client = {
        let _g = rt.enter();
        sandbox.client().expect("client")
    };
    let dir = tempfile::tempdir().expect("dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sandbox.kubeconfig(NS)).expect("kubeconfig");
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    // A pool, so that the bundle's receiver has one to see.
    rt.block_on(async {
        use agentdeck::crd::{AgentPool, AgentTask};
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::CustomResourceExt;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd).await.expect("crd");
        }
        let pools: Api<AgentPool> = Api::namespaced(client.clone(), NS);
        let pool: AgentPool = serde_json::from_value(json!({
            "metadata": {"name": "bench"},
            "spec": {"image": "ghcr.io/agentdeck/agentdeck:0.1.0", "minReplicas": 0, "maxReplicas": 2}
        }))
        .expect("pool");
        pools.create(&PostParams::default(), &pool).await.expect("pool created");
    });
    // Agent-like output: the lines of the redaction benchmark, one in 16
    // with a secret.
    let block: String = LINES
        .iter()
        .map(|l| l.replace('\'', ""))
        .collect::<String>();
    let line = block.trim_end();
    rt.block_on(async {
        for i in 0..pods {
            let script = format!(
                "yes '{line}' | head -c {}; echo; echo DONE; exec sleep 3600",
                log_kb * 1024
            );
            let crash = i == 0;
            let containers: Vec<Value> = ["agent", "runner"]
                .iter()
                .map(|c| {
                    let script = if crash && *c == "agent" {
                        "echo crashing; exit 1".to_owned()
                    } else {
                        script.clone()
                    };
                    json!({"name": c, "image": "busybox", "command": ["sh", "-c", script]})
                })
                .collect();
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("agent-{i:03}"), "annotations": {"sandbox.agentdeck.dev/run-shell": "true"}},
                "spec": {"containers": containers, "restartPolicy": "Always"}
            }))
            .expect("pod");
            api.create(&PostParams::default(), &pod).await.expect("pod created");
        }
        // Every log complete.
        let started = Instant::now();
        for i in 1..pods {
            for c in ["agent", "runner"] {
                loop {
                    let lp = LogParams { container: Some(c.into()), tail_lines: Some(1), ..LogParams::default() };
                    if api.logs(&format!("agent-{i:03}"), &lp).await.is_ok_and(|l| l.contains("DONE")) {
                        break;
                    }
                    assert!(started.elapsed() < Duration::from_secs(600), "logs never completed");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    });
    let total_mb = (pods * 2 * log_kb) as f64 / 1024.0;
    println!(
        "\nnamespace: {pods} pods x 2 containers, {log_kb} KiB of log each ({total_mb:.0} MiB), one crash-looping"
    );

    // The chart's loop.
    let out_dir = dir.path().join("loop");
    std::fs::create_dir_all(&out_dir).expect("dir");
    let script = format!(
        "cd {d} && for pod in $(kubectl get pods -n {NS} -o name); do kubectl logs -n {NS} $pod --all-containers > $(basename $pod).log; done && zip -qr ../loop.zip .",
        d = out_dir.display()
    );
    let (loop_secs, loop_rss) = timed_child("bash", &["-c", &script], &kubeconfig);
    let loop_zip = std::fs::metadata(dir.path().join("loop.zip"))
        .map(|m| m.len())
        .unwrap_or(0);
    let loop_files = std::fs::read_dir(&out_dir).map(|d| d.count()).unwrap_or(0);

    // agentdeck bundle.
    let zip = dir.path().join("bundle.zip");
    let (bundle_secs, bundle_rss) = timed_child(
        env!("CARGO_BIN_EXE_agentdeck"),
        &["bundle", "-n", NS, "-o", &zip.to_string_lossy()],
        &kubeconfig,
    );
    let bundle_zip = std::fs::metadata(&zip).map(|m| m.len()).unwrap_or(0);
    let listing = std::process::Command::new("unzip")
        .arg("-Z1")
        .arg(&zip)
        .output()
        .expect("unzip");
    let names = String::from_utf8_lossy(&listing.stdout).into_owned();
    let logs = names.lines().filter(|l| l.ends_with(".log")).count();
    let previous = names
        .lines()
        .filter(|l| l.ends_with(".previous.log"))
        .count();

    println!(
        "shell loop (kubectl logs per pod + zip -r): {loop_secs:.2} s, peak RSS of one process {:.1} MiB, {loop_files} files, zip {:.1} MB; previous logs: no, events/YAML: no, redaction: no",
        loop_rss as f64 / 1024.0,
        loop_zip as f64 / 1e6
    );
    println!(
        "agentdeck bundle: {bundle_secs:.2} s, peak RSS {:.1} MiB, {logs} log files ({previous} previous), zip {:.1} MB; events, YAML of 12 kinds, redaction: yes",
        bundle_rss as f64 / 1024.0,
        bundle_zip as f64 / 1e6
    );
    println!(
        "wall time ratio (loop / bundle): {:.1}x",
        loop_secs / bundle_secs.max(1e-9)
    );
    rt.block_on(sandbox.stop());
    open_bundle(&rt, &zip, total_mb);
}

/// The bundle just taken, opened as its receiver does, with the cluster it
/// came from stopped: the console until the pools view shows the pool (tmux
/// polled every 5 ms), and the served bundle until a client has listed the
/// pools.
fn open_bundle(rt: &tokio::runtime::Runtime, zip: &std::path::Path, total_mb: f64) {
    let home = tempfile::tempdir().expect("dir");
    let socket = format!("agentdeck-bench-{}", std::process::id());
    let started = Instant::now();
    let line = format!(
        "env HOME={h} XDG_CONFIG_HOME={h} {} --bundle {}; sleep 600",
        env!("CARGO_BIN_EXE_agentdeck"),
        zip.display(),
        h = home.path().display()
    );
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
    };
    let ok = tmux(&[
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        "b",
        "-x",
        "160",
        "-y",
        "30",
        &line,
    ])
    .is_ok_and(|o| o.status.success());
    let mut shown = None;
    while ok && started.elapsed() < Duration::from_secs(60) {
        let screen = tmux(&["capture-pane", "-p", "-t", "b"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if screen.contains("Pools [1/1]") && screen.contains("bench") {
            shown = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = tmux(&["kill-server"]);
    match shown {
        Some(d) => println!(
            "bundle opened (agentdeck --bundle, {total_mb:.0} MiB of logs in the zip): pools on screen in {} ms",
            d.as_millis()
        ),
        None => println!("bundle opened: the pools never showed within 60 s (tmux: {ok})"),
    }
    let served = rt.block_on(async {
        let started = Instant::now();
        let replay = agentdeck::replay::Replay::start(zip, 0)
            .await
            .expect("served");
        let pools: Api<agentdeck::crd::AgentPool> = Api::namespaced(replay.conn.client.clone(), NS);
        let n = pools
            .list(&Default::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        let d = started.elapsed();
        replay.sandbox.stop().await;
        (d, n)
    });
    println!(
        "bundle served (sandbox --from-bundle's server): {} pool(s) listed by a client in {} ms",
        served.1,
        served.0.as_millis()
    );
}

/// Runs a child under `/usr/bin/time`: wall seconds and the peak RSS (KiB)
/// of the largest process it ran.
fn timed_child(program: &str, args: &[&str], kubeconfig: &std::path::Path) -> (f64, u64) {
    let started = Instant::now();
    let out = std::process::Command::new("/usr/bin/time")
        .arg("-f")
        .arg("MAXRSS %M")
        .arg(program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("runs");
    let secs = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        println!("{program} failed: {err}");
    }
    let rss = err
        .lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("MAXRSS ")
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0);
    (secs, rss)
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
