//! The health prober: `GET http://<podIP>:<port>/healthz` on every agent
//! pod, a bounded number at a time, keeping the last sample per agent. The
//! samples are part of the cluster view: pool status, metrics, task
//! recovery and the console all classify from them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cluster::pod::CachedPod;
use crate::cluster::{AgentSample, HealthSamples};
use crate::config::HealthProbeConfig;
use crate::crd::{AgentPool, LABEL_POOL};
use crate::health::{Freshness, FreshnessThresholds, HealthReport};
use crate::plan::manifests::HEALTH_PORT_NAME;

/// The thresholds the configuration asks for.
pub fn thresholds(config: &HealthProbeConfig) -> FreshnessThresholds {
    FreshnessThresholds {
        stale_after: config.stale_after(),
        offline_after: config.offline_after(),
    }
}

fn health_port(pod: &CachedPod) -> u16 {
    pod.spec
        .as_ref()
        .into_iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(HEALTH_PORT_NAME))
        .and_then(|p| u16::try_from(p.container_port).ok())
        .unwrap_or(8080)
}

/// Pods whose class became offline since `before`, updating `before` to
/// the classes at `now` (forgetting pods no longer sampled). A pod first
/// seen offline counts as a transition too.
pub fn went_offline(
    before: &mut HashMap<(String, String), Freshness>,
    samples: &[AgentSample],
    now: Timestamp,
    thresholds: &FreshnessThresholds,
) -> Vec<AgentSample> {
    let mut out = Vec::new();
    let mut next = HashMap::with_capacity(samples.len());
    for sample in samples {
        let key = (sample.namespace.clone(), sample.pod.clone());
        let class = sample.freshness(now, thresholds);
        if class == Freshness::Offline && before.get(&key) != Some(&Freshness::Offline) {
            out.push(sample.clone());
        }
        next.insert(key, class);
    }
    *before = next;
    out
}

/// Fresh, stale and offline agents of one pool.
pub type ClassCounts = [u32; 3];

/// Pools whose counts of fresh, stale and offline agents differ from
/// `before` (a pool whose last agent went counts as changed too), updating
/// `before` to the counts at `now`.
pub fn counts_changed(
    before: &mut HashMap<ObjectRef<AgentPool>, ClassCounts>,
    samples: &[AgentSample],
    owners: &HashMap<(String, String), ObjectRef<AgentPool>>,
    now: Timestamp,
    thresholds: &FreshnessThresholds,
) -> Vec<ObjectRef<AgentPool>> {
    let mut next: HashMap<ObjectRef<AgentPool>, ClassCounts> = HashMap::new();
    for sample in samples {
        let Some(owner) = owners.get(&(sample.namespace.clone(), sample.pod.clone())) else {
            continue;
        };
        let slot = match sample.freshness(now, thresholds) {
            Freshness::Fresh => 0,
            Freshness::Stale => 1,
            Freshness::Offline => 2,
        };
        next.entry(owner.clone()).or_default()[slot] += 1;
    }
    let mut changed: Vec<ObjectRef<AgentPool>> = next
        .iter()
        .filter(|(pool, c)| before.get(*pool) != Some(*c))
        .map(|(pool, _)| pool.clone())
        .chain(before.keys().filter(|p| !next.contains_key(*p)).cloned())
        .collect();
    changed.sort_by_key(ToString::to_string);
    *before = next;
    changed
}

/// What one probing round covers, read from the pods in the store.
#[derive(Debug, Default, PartialEq)]
struct Round {
    /// Every pod not gone or finished (namespace, name, pool label): the
    /// samples kept.
    live: Vec<(String, String, Option<String>)>,
    /// The running ones with an IP (namespace, name, `/healthz` URL): probed.
    targets: Vec<(String, String, String)>,
    /// Each pod's pool, for the pools to reconcile when their agents change.
    owners: HashMap<(String, String), ObjectRef<AgentPool>>,
}

/// The round over `pods`; `pool_of` maps a pod to its pool. Pure.
fn round_of(
    pods: &[Arc<CachedPod>],
    pool_of: fn(&CachedPod) -> Option<ObjectRef<AgentPool>>,
) -> Round {
    let mut live = Vec::new();
    let mut targets = Vec::new();
    let mut owners = HashMap::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(name) = pod.metadata.name.clone() else {
            continue;
        };
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let pool = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_POOL).cloned());
        let status = pod.status.as_ref();
        let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
        let ip = status.and_then(|s| s.pod_ip.clone());
        if matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            continue;
        }
        if let Some(owner) = pool_of(pod) {
            owners.insert((ns.clone(), name.clone()), owner);
        }
        live.push((ns.clone(), name.clone(), pool));
        if let (true, Some(ip)) = (running, ip) {
            targets.push((
                ns,
                name,
                format!("http://{ip}:{}/healthz", health_port(pod)),
            ));
        }
    }
    Round {
        live,
        targets,
        owners,
    }
}

/// Probes every running agent pod in `pods` each interval until `cancel`.
/// When an agent turns offline — or a pool's counts of fresh, stale and
/// offline agents change — the pool's reference goes to `offline`, so the
/// reconciler recovers its task and reports the counts now rather than at
/// the next resync; `pool_of` maps a pod to its pool.
pub async fn run(
    pods: Store<CachedPod>,
    samples: HealthSamples,
    config: HealthProbeConfig,
    offline: mpsc::Sender<ObjectRef<AgentPool>>,
    pool_of: fn(&CachedPod) -> Option<ObjectRef<AgentPool>>,
    cancel: CancellationToken,
) {
    let client = match probe_client(&config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the health probe client; agents will not be probed");
            return;
        }
    };
    let concurrency = usize::try_from(config.concurrency.max(1)).unwrap_or(1);
    let mut tick = tokio::time::interval(config.interval().max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let limits = thresholds(&config);
    let mut classes = HashMap::new();
    let mut counts = HashMap::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = Timestamp::now();
        let Round {
            live,
            targets,
            owners,
        } = round_of(&pods.state(), pool_of);
        samples.retain_and_register(&live, now);
        let probes = futures::stream::iter(targets.into_iter().map(|(ns, pod, url)| {
            let client = client.clone();
            async move { (ns, pod, probe(&client, &url).await) }
        }))
        .buffer_unordered(concurrency);
        tokio::pin!(probes);
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return,
                n = probes.next() => n,
            };
            let Some((ns, pod, outcome)) = next else {
                break;
            };
            if let Some(mut sample) = samples.get(&ns, &pod) {
                sample.last_probe = Some(Timestamp::now());
                sample.latency = Some(outcome.latency);
                sample.http_status = outcome.http_status;
                match outcome.report {
                    Ok(report) => {
                        sample.last_report = Some((report, outcome.received));
                        sample.error = None;
                    }
                    Err(e) => sample.error = Some(e),
                }
                samples.update(sample);
            }
        }
        let mut pools = std::collections::HashSet::new();
        let snapshot = samples.snapshot();
        let now = Timestamp::now();
        for sample in went_offline(&mut classes, &snapshot, now, &limits) {
            tracing::info!(pod = %sample.pod, namespace = %sample.namespace, "agent went offline");
            if let Some(owner) = owners.get(&(sample.namespace, sample.pod)) {
                pools.insert(owner.clone());
            }
        }
        // A pool's fresh/stale/offline counts (status, metrics, console)
        // follow the samples now, not at the next resync.
        pools.extend(counts_changed(
            &mut counts,
            &snapshot,
            &owners,
            now,
            &limits,
        ));
        for pool in pools {
            // Full means reconciles are already queued; the resync backs this up.
            let _ = offline.try_send(pool);
        }
    }
}

struct Outcome {
    report: Result<HealthReport, String>,
    received: Timestamp,
    latency: Duration,
    http_status: Option<u16>,
}

/// The client probes go through.
fn probe_client(config: &HealthProbeConfig) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(config.timeout())
        .connect_timeout(config.timeout())
        // One connection a probe, closed after it: each agent is its own
        // host, and a pool kept per host held a socket per agent open for
        // good (10,000 agents: 10,000 file descriptors, past the usual
        // limit of 1,024 long before).
        .pool_max_idle_per_host(0)
        .build()
}

async fn probe(client: &reqwest::Client, url: &str) -> Outcome {
    let started = Instant::now();
    let result = client.get(url).send().await;
    let (report, http_status) = match result {
        Err(e) => (Err(format!("no answer: {e}")), None),
        Ok(resp) => {
            let code = resp.status().as_u16();
            // An unhealthy agent answers 503 with the same body: still a report.
            match resp.json::<HealthReport>().await {
                Ok(r) => (Ok(r), Some(code)),
                Err(e) => (
                    Err(format!("HTTP {code}, not a health report: {e}")),
                    Some(code),
                ),
            }
        }
    };
    Outcome {
        report,
        received: Timestamp::now(),
        latency: started.elapsed(),
        http_status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent's `/healthz` that keeps each connection open as long as
    /// the prober does, and says when the prober closed it.
    #[tokio::test]
    async fn a_probe_leaves_no_connection_open_behind_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listener");
        let url = format!("http://{}/healthz", listener.local_addr().expect("addr"));
        let (closed_tx, mut closed) = mpsc::channel::<bool>(4);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let closed_tx = closed_tx.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let body = r#"{"status":"healthy","currentTime":"2026-01-01T00:00:00Z","lastActivity":"2026-01-01T00:00:00Z"}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                    // Kept alive unless the prober closes it.
                    let gone = tokio::time::timeout(Duration::from_secs(3), conn.read(&mut buf))
                        .await
                        .is_ok_and(|r| matches!(r, Ok(0)));
                    let _ = closed_tx.send(gone).await;
                });
            }
        });
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = probe_client(&HealthProbeConfig::default()).expect("client");
        for round in 0..2 {
            let out = probe(&client, &url).await;
            assert!(out.report.is_ok(), "round {round}: {:?}", out.report);
            let gone = closed.recv().await.expect("the server's word");
            assert!(gone, "round {round}: the probe's connection was kept open");
        }
    }

    fn pod(name: &str, phase: &str, ip: Option<&str>, terminating: bool) -> Arc<CachedPod> {
        let mut metadata =
            serde_json::json!({"name": name, "namespace": "ns", "labels": {LABEL_POOL: "p"}});
        if terminating {
            metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": metadata,
                "status": {"phase": phase, "podIP": ip},
            }))
            .expect("a pod"),
        )
    }

    #[test]
    fn a_round_probes_running_pods_with_an_ip_and_keeps_samples_of_live_ones() {
        let pods = [
            pod("running", "Running", Some("127.0.0.2"), false),
            pod("starting", "Pending", None, false),
            pod("done", "Succeeded", Some("127.0.0.3"), false),
            pod("leaving", "Running", Some("127.0.0.4"), true),
        ];
        let round = round_of(&pods, |p| {
            Some(ObjectRef::new(p.metadata.name.as_deref()?).within("ns"))
        });
        let live: Vec<&str> = round.live.iter().map(|(_, n, _)| n.as_str()).collect();
        assert_eq!(live, ["running", "starting"]);
        assert_eq!(round.live[0].2.as_deref(), Some("p"));
        assert_eq!(round.targets.len(), 1);
        assert_eq!(round.targets[0].1, "running");
        assert!(round.targets[0].2.starts_with("http://127.0.0.2:"));
        assert!(round.targets[0].2.ends_with("/healthz"));
        assert_eq!(round.owners.len(), 2);
    }

    fn sample(pod: &str, first_seen: Timestamp, report_at: Option<Timestamp>) -> AgentSample {
        AgentSample {
            namespace: "ns".into(),
            pod: pod.into(),
            pool: Some("p".into()),
            first_seen,
            last_probe: None,
            last_report: report_at.map(|at| {
                (
                    HealthReport {
                        status: crate::health::HealthStatus::Healthy,
                        current_time: at,
                        last_activity: at,
                    },
                    at,
                )
            }),
            http_status: None,
            latency: None,
            error: None,
        }
    }

    #[test]
    fn a_pool_is_reported_when_its_counts_change_and_not_while_they_hold() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let at = |s: i64| t0 + jiff::SignedDuration::from_secs(s);
        let limits = FreshnessThresholds {
            stale_after: Duration::from_secs(20),
            offline_after: Duration::from_secs(60),
        };
        let pool = ObjectRef::<AgentPool>::new("p").within("ns");
        let owners: HashMap<(String, String), ObjectRef<AgentPool>> = ["a", "b"]
            .into_iter()
            .map(|pod| (("ns".to_owned(), pod.to_owned()), pool.clone()))
            .collect();
        let mut before = HashMap::new();
        let never = |pod| sample(pod, t0, None);
        let answered = |pod, s| sample(pod, t0, Some(at(s)));
        let steps: Vec<(i64, Vec<AgentSample>, bool, Option<ClassCounts>)> = vec![
            // Registered, not probed yet: stale, the pool appears.
            (0, vec![never("a"), never("b")], true, Some([0, 2, 0])),
            (1, vec![never("a"), never("b")], false, Some([0, 2, 0])),
            // Both answer: fresh at once.
            (
                2,
                vec![answered("a", 2), answered("b", 2)],
                true,
                Some([2, 0, 0]),
            ),
            (
                12,
                vec![answered("a", 12), answered("b", 12)],
                false,
                Some([2, 0, 0]),
            ),
            // b stops answering: stale after 20 s, offline after 60 s.
            (
                40,
                vec![answered("a", 40), answered("b", 12)],
                true,
                Some([1, 1, 0]),
            ),
            (
                80,
                vec![answered("a", 80), answered("b", 12)],
                true,
                Some([1, 0, 1]),
            ),
            // Every agent gone.
            (81, vec![], true, None),
        ];
        for (now, samples, reported, counts) in steps {
            let got = counts_changed(&mut before, &samples, &owners, at(now), &limits);
            assert_eq!(got.is_empty(), !reported, "at t0+{now}s");
            assert_eq!(before.get(&pool).copied(), counts, "at t0+{now}s");
        }
    }

    #[test]
    fn an_agent_is_reported_once_when_it_turns_offline_and_again_after_it_recovers() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let at = |s: i64| t0 + jiff::SignedDuration::from_secs(s);
        let limits = FreshnessThresholds {
            stale_after: Duration::from_secs(2),
            offline_after: Duration::from_secs(10),
        };
        let mut before = HashMap::new();
        let names = |v: Vec<AgentSample>| v.into_iter().map(|s| s.pod).collect::<Vec<_>>();
        let quiet = sample("quiet", t0, None);
        let talking = sample("talking", t0, Some(at(0)));
        let steps: &[(i64, Vec<AgentSample>, &[&str])] = &[
            (1, vec![quiet.clone(), talking.clone()], &[]),
            (
                11,
                vec![quiet.clone(), talking.clone()],
                &["quiet", "talking"],
            ),
            (12, vec![quiet.clone(), talking.clone()], &[]),
            // talking answers again, then goes silent once more.
            (
                13,
                vec![quiet.clone(), sample("talking", t0, Some(at(13)))],
                &[],
            ),
            (
                24,
                vec![quiet.clone(), sample("talking", t0, Some(at(13)))],
                &["talking"],
            ),
            // A pod that left and came back counts anew.
            (25, vec![sample("talking", t0, Some(at(13)))], &[]),
            (
                26,
                vec![quiet.clone(), sample("talking", t0, Some(at(13)))],
                &["quiet"],
            ),
        ];
        for (now, samples, want) in steps {
            let got = names(went_offline(&mut before, samples, at(*now), &limits));
            let mut got = got;
            got.sort();
            assert_eq!(got, *want, "at t0+{now}s");
        }
    }
}
