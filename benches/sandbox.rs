//! Sandbox figures: create throughput, list latency at 10k and 100k objects,
//! watch latency from write to client, and the server's RSS at 100k objects.
//!
//! Runs the real `agentdeck sandbox` binary as its own process (so RSS is the
//! server's alone) and talks to it through kube-rs over HTTP, as every client
//! does. Prints what it measured; it asserts nothing about timing.
//!
//! ```text
//! cargo bench --bench sandbox                      # 10k pods, 100k config maps
//! AGENTDECK_BENCH_LARGE=20000 cargo bench --bench sandbox   # a quicker run
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

/// Objects created concurrently.
const IN_FLIGHT: usize = 32;

struct Server {
    child: Child,
    client: kube::Client,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `agentdeck sandbox --nodes 0`: pods stay Pending, so only the
    /// API machinery is measured, not the simulated kubelet.
    async fn start() -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let kc = dir.path().join("kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .args(["sandbox", "--nodes", "0", "--kubeconfig-out"])
            .arg(&kc)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("agentdeck sandbox starts");
        let out = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(out).lines();
        // Line 2 says the kubeconfig is written.
        for _ in 0..2 {
            lines
                .next()
                .expect("sandbox prints its address")
                .expect("utf-8");
        }
        std::thread::spawn(move || for _ in lines {});
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&kc).expect("kubeconfig"),
            &KubeConfigOptions::default(),
        )
        .await
        .expect("config");
        let client = kube::Client::try_from(config).expect("client");
        Server {
            child,
            client,
            _dir: dir,
        }
    }

    fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    }
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("bench-{i:06}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/bench:1", "ports": [{"containerPort": 8080}]}]}
    }))
    .expect("pod")
}

fn config_map(i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:07}"), "labels": {"shard": (i % 10).to_string()}},
        "data": {"key": format!("value-{i}")}
    }))
    .expect("config map")
}

/// Creates `n` objects `IN_FLIGHT` at a time; returns objects per second.
async fn create_all<K, F>(api: &Api<K>, range: std::ops::Range<usize>, make: F) -> f64
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    F: Fn(usize) -> K,
{
    let n = range.len();
    let started = Instant::now();
    let pp = PostParams::default();
    futures::stream::iter(range.map(make))
        .map(|obj| {
            let api = api.clone();
            let pp = pp.clone();
            async move { api.create(&pp, &obj).await }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_for_each(|_| async { Ok(()) })
        .await
        .expect("creates succeed");
    n as f64 / started.elapsed().as_secs_f64()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Lists `runs` times; returns (median raw GET, median typed list) and the count.
async fn list_latency<K>(
    client: &kube::Client,
    api: &Api<K>,
    path: &str,
    runs: usize,
) -> (Duration, Duration, usize)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut raw = Vec::new();
    let mut typed = Vec::new();
    let mut count = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let req = http::Request::get(path).body(Vec::new()).expect("request");
        let text = client.request_text(req).await.expect("raw list");
        raw.push(started.elapsed());
        std::hint::black_box(text.len());
        let started = Instant::now();
        let list = api.list(&ListParams::default()).await.expect("typed list");
        typed.push(started.elapsed());
        count = list.items.len();
    }
    raw.sort();
    typed.sort();
    (percentile(&raw, 0.5), percentile(&typed, 0.5), count)
}

/// Opens a watch, writes `n` patches one after another, and measures from
/// the start of each write to its event reaching the client.
async fn watch_latency(api: &Api<ConfigMap>, n: usize) -> Vec<Duration> {
    let probe = api
        .create(&PostParams::default(), &config_map(9_999_999))
        .await
        .expect("probe created");
    let rv = probe.metadata.resource_version.clone().expect("rv");
    let wp = WatchParams::default()
        .fields("metadata.name=cm-9999999")
        .timeout(290);
    let mut stream = api.watch(&wp, &rv).await.expect("watch").boxed();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let patch = Patch::Merge(json!({"data": {"key": format!("v{i}")}}));
        let started = Instant::now();
        api.patch("cm-9999999", &PatchParams::default(), &patch)
            .await
            .expect("patch");
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Modified(cm)))
                    if cm
                        .data
                        .as_ref()
                        .and_then(|d| d.get("key"))
                        .map(String::as_str)
                        == Some(&format!("v{i}")) =>
                {
                    samples.push(started.elapsed());
                    break;
                }
                Some(Ok(_)) => continue,
                other => panic!("watch ended: {other:?}"),
            }
        }
    }
    samples.sort();
    samples
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let large: usize = std::env::var("AGENTDECK_BENCH_LARGE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let server = Server::start().await;
        let client = server.client.clone();
        println!("agentdeck sandbox benchmark (server in its own process, client kube-rs over HTTP, {IN_FLIGHT} requests in flight)");
        println!("server RSS at start: {:.1} MiB", server.rss_mib());

        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let rate = create_all(&pods, 0..10_000, pod).await;
        println!("create pods:               {rate:>9.0} objects/s (10,000 pods)");
        let (raw, typed, n) = list_latency(&client, &pods, "/api/v1/namespaces/default/pods", 5).await;
        println!("list {n} pods:             {:>12} server+transfer, {} with kube-rs decoding (median of 5)", ms(raw), ms(typed));
        let lp = ListParams::default().labels("shard=3");
        let started = Instant::now();
        let sel = pods.list(&lp).await.expect("selector list");
        println!("list pods -l shard=3:      {:>12} ({} of 10,000 match)", ms(started.elapsed()), sel.items.len());
        let started = Instant::now();
        let page = pods.list(&ListParams::default().limit(500)).await.expect("page");
        println!("list pods limit=500:       {:>12} (first page, continue token {})", ms(started.elapsed()),
                 if page.metadata.continue_.is_some() { "set" } else { "missing" });

        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let progress_every = (large / 10).max(1);
        let mut created = 0;
        let started = Instant::now();
        while created < large {
            let next = (created + progress_every).min(large);
            create_all(&cms, created..next, config_map).await;
            created = next;
            eprintln!("  … {created}/{large} config maps, server RSS {:.0} MiB", server.rss_mib());
        }
        let rate = large as f64 / started.elapsed().as_secs_f64();
        println!("create config maps:        {rate:>9.0} objects/s ({large} config maps)");
        let (raw, typed, n) = list_latency(&client, &cms, "/api/v1/namespaces/default/configmaps", 3).await;
        println!("list {n} config maps:     {:>12} server+transfer, {} with kube-rs decoding (median of 3)", ms(raw), ms(typed));
        println!("server RSS with {} objects: {:.1} MiB", large + 10_000, server.rss_mib());

        let samples = watch_latency(&cms, 1_000).await;
        println!(
            "watch latency write→event: p50 {}, p99 {}, max {} (1,000 sequential patches, {} objects stored)",
            ms(percentile(&samples, 0.5)),
            ms(percentile(&samples, 0.99)),
            ms(percentile(&samples, 1.0)),
            large + 10_001
        );
        println!("server RSS at end: {:.1} MiB", server.rss_mib());
    });
}
