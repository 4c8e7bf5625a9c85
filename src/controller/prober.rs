//! The health prober: `GET http://<podIP>:<port>/healthz` on every agent
//! pod, a bounded number at a time, keeping the last sample per agent. The
//! samples are part of the cluster view: pool status, metrics, task
//! recovery and the console all classify from them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
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
    /// The running ones with an IP (namespace, name, the address of their
    /// `/healthz`): probed.
    targets: Vec<(String, String, SocketAddr)>,
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
        let ip = status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<IpAddr>().ok());
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
            targets.push((ns, name, SocketAddr::new(ip, health_port(pod))));
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
/// the next resync; `pool_of` maps a pod to its pool. While `leading()`
/// says so, each agent's connection is kept for the next round (see
/// [`Connections`]); a follower (a console beside the daemon, a standby)
/// closes each one after its probe.
pub async fn run(
    pods: Store<CachedPod>,
    samples: HealthSamples,
    config: HealthProbeConfig,
    offline: mpsc::Sender<ObjectRef<AgentPool>>,
    pool_of: fn(&CachedPod) -> Option<ObjectRef<AgentPool>>,
    leading: impl Fn() -> bool,
    cancel: CancellationToken,
) {
    let connections = Connections::new(0);
    let timeout = config.timeout();
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
        connections.set_budget(if leading() { idle_budget() } else { 0 });
        connections.keep_only(targets.iter().map(|(_, _, addr)| *addr));
        let connections = &connections;
        let (round_began, agents) = (Instant::now(), targets.len());
        let probes = futures::stream::iter(targets.into_iter().map(|(ns, pod, addr)| async move {
            (ns, pod, probe(connections, addr, timeout).await)
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
        tracing::debug!(
            agents,
            took_ms = round_began.elapsed().as_millis() as u64,
            concurrency,
            "probe round"
        );
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
        // Every pool whose counts changed is sent, waiting for room: a full
        // channel dropped the rest, and with more than its 64 pools changing
        // in one round (a node's agents going, a daemon starting on a large
        // cluster) their statuses and requeues waited for the resync.
        for pool in pools {
            tokio::select! {
                _ = cancel.cancelled() => return,
                sent = offline.send(pool) => if sent.is_err() { return },
            }
        }
    }
}

struct Outcome {
    report: Result<HealthReport, String>,
    received: Timestamp,
    latency: Duration,
    http_status: Option<u16>,
}

/// Open files kept free of idle probe connections: the API's connections,
/// the log tails, the listener, files being written.
const FILES_KEPT_FREE: u64 = 1024;

/// Idle connections the open-file limit leaves room for (the soft limit,
/// raised to the hard one at start by [`raise_open_file_limit`], less
/// [`FILES_KEPT_FREE`]).
fn idle_budget() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from(soft.saturating_sub(FILES_KEPT_FREE)).unwrap_or(usize::MAX)
}

/// Raises this process's soft limit on open files to its hard limit, as Go
/// programs do at start (a container runtime may set a soft limit of 1,024
/// with a much higher hard one): the prober keeps one idle connection per
/// agent it probes (see [`Connections`]). Returns the soft limit then.
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "could not raise the open-file limit");
        }
    }
    getrlimit(Resource::Nofile).current
}

/// The agents' idle connections, one per address at most, kept between
/// rounds so that a probe is a request on an open connection rather than a
/// TCP handshake and teardown (at 10,000 agents, a thousand a second: most
/// of the controller's CPU when it had nothing else to do). Only the
/// socket is kept, taken off the runtime's reactor while idle: a socket
/// still registered keeps the waker of the probe that last used it, and
/// with it the memory of that probe (about 2.7 KB each, 27 MB for 10,000
/// agents). At most `budget` are kept; past it a probe closes its
/// connection, as every probe did before. Only the leader keeps any (see
/// [`run`]): an agent holds one connection open, not one per console.
struct Connections {
    idle: std::sync::Mutex<HashMap<SocketAddr, std::net::TcpStream>>,
    budget: std::sync::atomic::AtomicUsize,
}

impl Connections {
    fn new(budget: usize) -> Connections {
        Connections {
            idle: std::sync::Mutex::default(),
            budget: std::sync::atomic::AtomicUsize::new(budget),
        }
    }

    /// Keeps at most `budget` connections from now on (closing any past it).
    fn set_budget(&self, budget: usize) {
        self.budget
            .store(budget, std::sync::atomic::Ordering::Relaxed);
        let mut idle = self.lock();
        if idle.len() > budget {
            let extra: Vec<SocketAddr> = idle.keys().skip(budget).copied().collect();
            for addr in extra {
                idle.remove(&addr);
            }
        }
    }

    /// The idle connection to `addr`, back on the reactor.
    fn take(&self, addr: SocketAddr) -> Option<tokio::net::TcpStream> {
        let stream = self.lock().remove(&addr)?;
        tokio::net::TcpStream::from_std(stream).ok()
    }

    fn put(&self, addr: SocketAddr, stream: tokio::net::TcpStream) {
        let mut idle = self.lock();
        if idle.len() < self.budget.load(std::sync::atomic::Ordering::Relaxed)
            && let Ok(stream) = stream.into_std()
        {
            idle.insert(addr, stream);
        }
    }

    /// Closes the connections to addresses not in `live` (pods gone).
    fn keep_only(&self, live: impl Iterator<Item = SocketAddr>) {
        let live: std::collections::HashSet<SocketAddr> = live.collect();
        self.lock().retain(|addr, _| live.contains(addr));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, std::net::TcpStream>> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Bytes of a `/healthz` answer read at most (a report is about 120).
const MAX_ANSWER: usize = 64 * 1024;

async fn probe(connections: &Connections, addr: SocketAddr, timeout: Duration) -> Outcome {
    let started = Instant::now();
    let answer = match tokio::time::timeout(timeout, exchange(connections, addr)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "no answer: http://{addr}/healthz did not answer within {}",
            crate::units::format_duration(timeout)
        )),
    };
    let (report, http_status) = match answer {
        Err(e) => (Err(e), None),
        Ok((code, body)) => {
            // An unhealthy agent answers 503 with the same body: still a report.
            match serde_json::from_slice::<HealthReport>(&body) {
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

/// `GET /healthz` at `addr` on its idle connection if there is one (once
/// more on a new one if that fails: the agent may have closed it, or
/// restarted), else on a new one; the connection is kept when the answer
/// leaves it reusable. The status code and the body.
async fn exchange(connections: &Connections, addr: SocketAddr) -> Result<(u16, Vec<u8>), String> {
    if let Some(stream) = connections.take(addr)
        && let Ok((code, body, reusable)) = request(stream, addr).await
    {
        if let Some(stream) = reusable {
            connections.put(addr, stream);
        }
        return Ok((code, body));
    }
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("no answer: http://{addr}/healthz: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (code, body, reusable) = request(stream, addr).await?;
    if let Some(stream) = reusable {
        connections.put(addr, stream);
    }
    Ok((code, body))
}

/// One HTTP/1.1 request on `stream` (hyper's client connection, driven
/// here and taken apart after the answer, so the socket can be kept).
async fn request(
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
) -> Result<(u16, Vec<u8>, Option<tokio::net::TcpStream>), String> {
    use http_body_util::BodyExt;
    let failed = |e: &dyn std::fmt::Display| format!("no answer: http://{addr}/healthz: {e}");
    let (mut send, conn) = hyper::client::conn::http1::handshake::<
        _,
        http_body_util::Empty<hyper::body::Bytes>,
    >(hyper_util::rt::TokioIo::new(stream))
    .await
    .map_err(|e| failed(&e))?;
    let request = hyper::Request::get("/healthz")
        .header(hyper::header::HOST, addr.to_string())
        .body(http_body_util::Empty::new())
        .map_err(|e| failed(&e))?;
    let answer = async move {
        let response = send.send_request(request).await.map_err(|e| failed(&e))?;
        let code = response.status().as_u16();
        let closes = response
            .headers()
            .get(hyper::header::CONNECTION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| failed(&*e))?
            .to_bytes();
        // `send` goes here: the connection has no more to do and ends.
        Ok::<_, String>((code, body.to_vec(), closes))
    };
    let (answer, parts) = tokio::join!(answer, conn.without_shutdown());
    let (code, body, closes) = answer?;
    let reusable = match parts {
        Ok(parts) if !closes && parts.read_buf.is_empty() => Some(parts.io.into_inner()),
        _ => None,
    };
    Ok((code, body, reusable))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent's `/healthz` on loopback: answers every request on a
    /// connection (HTTP/1.1 keep-alive) until the prober closes it, or
    /// only `per_connection` of them before closing it itself. Counts the
    /// connections it accepted and the ones the prober closed.
    async fn agent(per_connection: Option<usize>) -> (SocketAddr, Arc<Tally>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listener");
        let addr = listener.local_addr().expect("addr");
        let tally = Arc::new(Tally::default());
        let t = tally.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                t.accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let t = t.clone();
                tokio::spawn(async move {
                    let mut served = 0;
                    let mut buf = [0u8; 4096];
                    loop {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => {
                                t.closed_by_prober
                                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                return;
                            }
                            Ok(_) => {}
                        }
                        let body = r#"{"status":"healthy","currentTime":"2026-01-01T00:00:00Z","lastActivity":"2026-01-01T00:00:00Z"}"#;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = conn.write_all(answer.as_bytes()).await;
                        served += 1;
                        if per_connection.is_some_and(|n| served >= n) {
                            // Closed by the agent, without a word (as one
                            // restarting or timing out an idle connection).
                            return;
                        }
                    }
                });
            }
        });
        (addr, tally)
    }

    #[derive(Default)]
    struct Tally {
        accepted: std::sync::atomic::AtomicUsize,
        closed_by_prober: std::sync::atomic::AtomicUsize,
    }

    impl Tally {
        fn accepted(&self) -> usize {
            self.accepted.load(std::sync::atomic::Ordering::SeqCst)
        }
        async fn closed_by_prober(&self, want: usize) -> usize {
            for _ in 0..200 {
                let n = self
                    .closed_by_prober
                    .load(std::sync::atomic::Ordering::SeqCst);
                if n >= want {
                    return n;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.closed_by_prober
                .load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(2);

    #[tokio::test]
    async fn probes_of_an_agent_share_one_connection_kept_between_rounds() {
        let (addr, tally) = agent(None).await;
        let connections = Connections::new(10);
        for round in 0..3 {
            let out = probe(&connections, addr, TIMEOUT).await;
            assert!(out.report.is_ok(), "round {round}: {:?}", out.report);
            assert_eq!(out.http_status, Some(200));
        }
        assert_eq!(tally.accepted(), 1, "three probes, one connection");
        assert_eq!(connections.lock().len(), 1);
        // The pod went: its connection is closed at the next round.
        connections.keep_only(std::iter::empty());
        assert_eq!(tally.closed_by_prober(1).await, 1);
    }

    #[tokio::test]
    async fn past_the_budget_a_probe_closes_its_connection() {
        let (addr, tally) = agent(None).await;
        let connections = Connections::new(0);
        for round in 0..2 {
            let out = probe(&connections, addr, TIMEOUT).await;
            assert!(out.report.is_ok(), "round {round}: {:?}", out.report);
            assert_eq!(
                tally.closed_by_prober(round + 1).await,
                round + 1,
                "round {round}: the probe's connection was kept open"
            );
        }
        assert_eq!(tally.accepted(), 2);
        assert!(connections.lock().is_empty());
    }

    #[tokio::test]
    async fn an_idle_connection_the_agent_closed_is_replaced_without_a_failed_probe() {
        let (addr, tally) = agent(Some(1)).await;
        let connections = Connections::new(10);
        for round in 0..3 {
            let out = probe(&connections, addr, TIMEOUT).await;
            assert!(out.report.is_ok(), "round {round}: {:?}", out.report);
        }
        assert_eq!(tally.accepted(), 3, "a new connection for each closed one");
    }

    #[tokio::test]
    async fn an_agent_that_is_not_there_is_no_answer_and_leaves_nothing_kept() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let connections = Connections::new(10);
        let out = probe(&connections, addr, TIMEOUT).await;
        let error = out.report.expect_err("nobody listens");
        assert!(
            error.starts_with(&format!("no answer: http://{addr}/healthz")),
            "{error}"
        );
        assert_eq!(out.http_status, None);
        assert!(connections.lock().is_empty());
    }

    #[test]
    fn the_open_file_limit_is_raised_to_its_hard_limit() {
        let soft = raise_open_file_limit();
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(soft, limit.maximum);
        assert_eq!(limit.current, limit.maximum);
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

    #[tokio::test]
    async fn every_pool_whose_counts_change_in_a_round_is_sent_however_many() {
        // 100 pools, one new agent each (not probed yet: stale), and a
        // channel with room for one: a full channel dropped the other 99.
        let (store, mut writer) = kube::runtime::reflector::store::<CachedPod>();
        for n in 0..100 {
            let p = pod(&format!("agent-{n}"), "Pending", None, false);
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply((*p).clone()));
        }
        let (tx, mut rx) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let prober = tokio::spawn(run(
            store,
            HealthSamples::default(),
            HealthProbeConfig::default(),
            tx,
            |p| Some(ObjectRef::new(p.metadata.name.as_deref()?).within("ns")),
            || true,
            cancel.clone(),
        ));
        let mut pools = std::collections::HashSet::new();
        // The reconciler is slow to take them; the prober waits for room.
        tokio::time::sleep(Duration::from_millis(200)).await;
        while pools.len() < 100 {
            match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
                Ok(Some(pool)) => pools.insert(pool.name),
                _ => break,
            };
        }
        cancel.cancel();
        let _ = prober.await;
        assert_eq!(pools.len(), 100, "pools sent in the first round");
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
        assert_eq!(round.targets[0].2, "127.0.0.2:8080".parse().expect("addr"));
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
