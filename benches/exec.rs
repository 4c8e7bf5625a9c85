//! Exec figures against the in-process sandbox through kube-rs's
//! `AttachedProcess` (WebSocket, `v5.channel.k8s.io`): the round trip of
//! a short command, output and input throughput, and `kubectl exec` wall
//! time for comparison (kubectl's own start and discovery included).
//!
//! ```text
//! cargo bench --bench exec
//! AGENTDECK_BENCH_MB=256 AGENTDECK_BENCH_RUNS=100 cargo bench --bench exec
//! ```
//!
//! Prints what it measured; asserts nothing.

use std::time::{Duration, Instant};

use agentdeck::sandbox::Sandbox;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn median_p90(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.9))
}

fn main() {
    // Containers run through agentdeck's own entry point (their mount
    // namespace), not this harness. Set before any thread exists.
    // SAFETY: single-threaded here; nothing reads the environment concurrently.
    unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mb = env_or("AGENTDECK_BENCH_MB", 64);
    let runs = env_or("AGENTDECK_BENCH_RUNS", 50).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let sb = Sandbox::start(0, 1).await.expect("sandbox");
        let client = sb.client().expect("client");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "bench", "annotations": {"sandbox.agentdeck.dev/run-shell": "true"}},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "sleep 3600"]}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod).await.expect("pod created");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let p = pods.get("bench").await.expect("pod");
            if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
                break;
            }
            assert!(Instant::now() < deadline, "the pod never ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!("agentdeck exec benchmark (in-process sandbox, kube-rs over WebSocket v5)");

        let mut times = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let mut p = pods
                .exec("bench", ["true"], &AttachParams::default().stderr(false))
                .await
                .expect("exec");
            let status = p.take_status().expect("status");
            let mut out = p.stdout().expect("stdout");
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink).await;
            let _ = status.await;
            times.push(t.elapsed());
        }
        let (med, p90) = median_p90(times);
        println!("exec `true` round trip:        {} median, {} p90 ({runs} runs)", ms(med), ms(p90));

        let t = Instant::now();
        let mut p = pods
            .exec(
                "bench",
                ["head", "-c", &format!("{}", mb << 20), "/dev/zero"],
                &AttachParams::default().stderr(false),
            )
            .await
            .expect("exec");
        let mut out = p.stdout().expect("stdout");
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0usize;
        loop {
            match out.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "stdout throughput:             {:.0} MB/s ({} MiB read)",
            n as f64 / secs / 1e6,
            n >> 20
        );

        let t = Instant::now();
        let mut p = pods
            .exec(
                "bench",
                ["wc", "-c"],
                &AttachParams::default().stdin(true).stderr(false),
            )
            .await
            .expect("exec");
        let mut input = p.stdin().expect("stdin");
        let mut out = p.stdout().expect("stdout");
        let chunk = vec![b'x'; 1 << 16];
        let writer = tokio::spawn(async move {
            for _ in 0..(mb << 20) / chunk.len() {
                if input.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            let _ = input.shutdown().await;
        });
        let mut counted = String::new();
        let _ = out.read_to_string(&mut counted).await;
        let _ = writer.await;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "stdin throughput:              {:.0} MB/s ({} bytes counted by wc)",
            (mb << 20) as f64 / secs / 1e6,
            counted.trim()
        );

        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, sb.kubeconfig("default")).expect("kubeconfig");
        let kubectl_runs = runs.min(10);
        let mut times = Vec::new();
        for _ in 0..kubectl_runs {
            let t = Instant::now();
            let ok = tokio::process::Command::new("kubectl")
                .args(["exec", "bench", "--", "true"])
                .env("KUBECONFIG", &kubeconfig)
                .env("HOME", dir.path())
                .output()
                .await
                .is_ok_and(|o| o.status.success());
            if !ok {
                println!("kubectl exec:                  not measured (kubectl missing or failed)");
                break;
            }
            times.push(t.elapsed());
        }
        if !times.is_empty() {
            let (med, p90) = median_p90(times);
            println!(
                "kubectl exec -- true (wall):   {} median, {} p90 ({kubectl_runs} runs)",
                ms(med),
                ms(p90)
            );
        }
        sb.stop().await;
    });
}
