//! The final log lines of agent and task pods that terminate, kept so that
//! a support bundle taken after an incident still has them.
//!
//! **Where.** One ConfigMap per pool, `agentdeck-log-tails-<pool>`,
//! labelled `agentdeck.dev/log-tails=true` and owned by the pool: it
//! survives controller restarts and failover (unlike memory), needs no
//! volume (unlike a file), is read by the bundle through the API with the
//! permissions it already has, and goes away with its pool.
//!
//! **Bounds.** Per container the last [`TAIL_BYTES`] (16 KiB) of its log; per
//! pool the last [`MAX_PODS`] (20) pods, oldest dropped first, and at most
//! [`MAX_TOTAL_BYTES`] (512 KiB) in all, well under the 1 MiB an object
//! may hold.
//!
//! **When.** The leader follows the log of every container of the
//! agentdeck-managed pods (debug pods excepted), keeping its last
//! [`TAIL_BYTES`] in memory (at most [`MAX_FOLLOWED`] containers), and
//! stores them when the stream ends because the pod went, is terminating
//! or finished. A container that restarts is followed on.
//!
//! Tails are redacted before they are stored: a ConfigMap is often readable
//! by more people than pod logs. The controller reads no Secret values, so
//! it cannot know them: those are hidden where they are known, by the
//! agent before it prints a task's output ([`crate::agent::secrets`]); the
//! pattern rules here are a second pass over what any container printed.
//! Their placeholders are keyed with the namespace's redaction key, the one
//! Secret the controller may read (and fill in) by name, so that a bundle
//! gives a value the same placeholder in a kept tail as in a live log
//! ([`crate::plan::redaction_key`] says why this design).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, LogParams, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::cluster::pod::CachedPod;
use crate::crd::{AgentPool, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY};
use crate::plan::redaction_key;
pub use crate::plan::tails::{
    ANNOTATION_INDEX, LABEL_LOG_TAILS, TailEntry, configmap_name, data_key, entries,
};
use crate::redact::{RedactionCounts, Redactor};

/// Bytes kept of each container's log.
pub const TAIL_BYTES: usize = 16 * 1024;
/// Pods kept per pool.
pub const MAX_PODS: usize = 20;
/// Bytes kept per pool, over all its pods.
pub const MAX_TOTAL_BYTES: usize = 512 * 1024;
/// Label of debug pods, whose logs are not kept.
pub const LABEL_DEBUG: &str = crate::crd::LABEL_DEBUG_POD;

/// Appends `chunk` to `ring`, dropping its oldest bytes so that at most
/// `max` remain.
fn keep_last(ring: &mut VecDeque<u8>, chunk: &[u8], max: usize) {
    let chunk = &chunk[chunk.len().saturating_sub(max)..];
    let over = (ring.len() + chunk.len()).saturating_sub(max);
    ring.drain(..over);
    ring.extend(chunk);
}

/// Keeps the last whole lines within `max` bytes of `log`.
pub fn tail_of(log: &str, max: usize) -> &str {
    if log.len() <= max {
        return log;
    }
    let mut from = log.len() - max;
    while !log.is_char_boundary(from) {
        from += 1;
    }
    match log[from..].find('\n') {
        Some(p) if from + p + 1 < log.len() => &log[from + p + 1..],
        _ => &log[from..],
    }
}

/// Adds `new` tails (replacing those of the same pod and container) to a
/// ConfigMap's index and data, then drops the oldest pods until the bounds
/// hold. Pure.
pub fn merge(
    index: &mut Vec<TailEntry>,
    data: &mut BTreeMap<String, String>,
    new: Vec<(TailEntry, String)>,
) {
    for (entry, text) in new {
        index.retain(|e| e.key != entry.key);
        data.insert(entry.key.clone(), text);
        index.push(entry);
    }
    index.sort_by(|a, b| a.captured_at.cmp(&b.captured_at));
    loop {
        let mut pods: Vec<&str> = Vec::new();
        for e in index.iter() {
            if !pods.contains(&e.pod.as_str()) {
                pods.push(&e.pod);
            }
        }
        let total: usize = index
            .iter()
            .filter_map(|e| data.get(&e.key))
            .map(String::len)
            .sum();
        if pods.len() <= MAX_PODS && total <= MAX_TOTAL_BYTES {
            break;
        }
        let Some(oldest) = pods.first().map(|p| (*p).to_owned()) else {
            break;
        };
        index.retain(|e| e.pod != oldest);
    }
    data.retain(|k, _| index.iter().any(|e| &e.key == k));
}

/// Why a pod's tails are final now, if they are (`None`: it still runs).
fn final_reason(pod: Option<&CachedPod>) -> Option<&'static str> {
    let Some(pod) = pod else {
        return Some("Deleted");
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("Terminating");
    }
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => Some("Succeeded"),
        Some("Failed") => Some("Failed"),
        _ => None,
    }
}

/// Log streams being opened at once. A new leader finds every agent's
/// container to follow: opened all together they are a burst of TLS
/// handshakes whose transient buffers the heap keeps long after.
const MAX_OPENING: usize = 16;
/// Opens are paced: at most [`MAX_OPENING`] per `OPEN_PACE` (160 a second).
/// A leader that starts next to a thousand agents opens their streams over
/// about 6 s rather than all at once: the API server proxies every one to a
/// kubelet, and the burst would also take the CPU the first reconciles and
/// the console's first screen need (on 2 cores, 1,000 opens at once made
/// the first build of 10k rows 50–100 ms instead of 30–50).
const OPEN_PACE: Duration = Duration::from_millis(100);
/// Longest wait for a log stream's response head.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Most containers followed at once; beyond, new pods are not kept.
pub const MAX_FOLLOWED: usize = 2000;

/// A log stream that brought nothing (refused, as for a container the
/// kubelet cannot read or a user without `pods/log`, or ended at once) is
/// opened again after this, doubled at each such try up to
/// [`RETRY_MAX`]; one that brought bytes is opened again after this.
const RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest wait before a log stream is opened again.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// How long a follower waits before opening its stream again, after
/// `fruitless` tries in a row that brought nothing.
fn retry_after(fruitless: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1u32 << fruitless.min(16))
        .min(RETRY_MAX)
}

/// Runs until `cancel`: while leading, follows the log of every container
/// of the agentdeck-managed pods (debug pods excepted), keeping the last
/// [`TAIL_BYTES`] in memory, and stores them once the pod is gone,
/// terminating or finished.
///
/// The pods are the controller's own (`shared.view.pods`, fed by the one
/// pod watch): `changed` yields each pod as it changes. They are looked at
/// once the watches have listed (opening a stream per container next to
/// the first lists slows the first picture for what can wait) and whenever
/// this controller becomes the leader, and then as they change.
///
/// Following rather than fetching at deletion: a pod's log is only served
/// while the pod exists, and a deleted pod can be gone before anyone asks
/// (in milliseconds on the sandbox); following also keeps what the agent
/// printed after SIGTERM. A finalizer would hold deleted pods instead, but
/// would leave them stuck whenever the controller is not running.
pub(crate) async fn run<S>(shared: Arc<Context>, changed: S, cancel: CancellationToken)
where
    S: futures::Stream<Item = Arc<CachedPod>> + Send,
{
    let mut changes = shared.view.changes.subscribe();
    tokio::pin!(changed);
    let tails = Tails {
        shared: shared.clone(),
        followed: Arc::default(),
        redactors: Arc::default(),
        writer: Arc::default(),
        opening: Arc::new(tokio::sync::Semaphore::new(MAX_OPENING)),
        cancel: cancel.clone(),
    };
    // Whether every pod was looked at as leader since the watches listed.
    let mut caught_up = false;
    loop {
        // The subscriber must be read on all along: the pod watch waits
        // for it. A change wakes this loop too, which also revives a
        // subscriber stalled on a pod deleted before it was read.
        let pod = tokio::select! {
            _ = cancel.cancelled() => return,
            p = changed.next() => match p {
                Some(p) => Some(p),
                None => return,
            },
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
                None
            }
            () = shared.leader.changed() => None,
        };
        let ready =
            shared.synced.load(std::sync::atomic::Ordering::SeqCst) && shared.leader.is_leader();
        if !ready {
            caught_up = false;
            continue;
        }
        if !caught_up {
            caught_up = true;
            for pod in shared.view.pods.state() {
                tails.consider(&pod);
            }
        }
        if let Some(pod) = pod {
            tails.consider(&pod);
        }
    }
}

/// What the followers share.
struct Tails {
    shared: Arc<Context>,
    /// `uid/container` of the containers followed.
    followed: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    redactors: Arc<Redactors>,
    writer: Arc<tokio::sync::Mutex<()>>,
    opening: Arc<tokio::sync::Semaphore>,
    cancel: CancellationToken,
}

impl Tails {
    /// Follows the started containers of `pod` not followed yet.
    fn consider(&self, pod: &CachedPod) {
        if pod.labels().contains_key(LABEL_DEBUG) || final_reason(Some(pod)).is_some() {
            return;
        }
        let (Some(uid), Some(pool), Some(namespace)) = (
            pod.uid(),
            pod.labels().get(LABEL_POOL).cloned(),
            pod.namespace(),
        ) else {
            return;
        };
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or_default();
        for c in statuses {
            // Only once a container has started is there a log to follow.
            if c.state.as_ref().is_none_or(|s| s.waiting.is_some()) && c.restart_count == 0 {
                continue;
            }
            let key = format!("{uid}/{}", c.name);
            {
                let mut f = self
                    .followed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if f.len() >= MAX_FOLLOWED || !f.insert(key.clone()) {
                    continue;
                }
            }
            let follower = Follower {
                shared: self.shared.clone(),
                pods: Api::namespaced(self.shared.client.clone(), &namespace),
                namespace: namespace.clone(),
                pool: pool.clone(),
                pod: pod.name_any(),
                uid: uid.clone(),
                container: c.name.clone(),
                redactors: self.redactors.clone(),
                writer: self.writer.clone(),
                opening: self.opening.clone(),
            };
            let followed = self.followed.clone();
            let cancel = self.cancel.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = follower.run() => {}
                }
                followed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&key);
            });
        }
    }
}

/// Follows one container's log.
struct Follower {
    shared: Arc<Context>,
    pods: Api<CachedPod>,
    namespace: String,
    pool: String,
    pod: String,
    uid: String,
    container: String,
    redactors: Arc<Redactors>,
    writer: Arc<tokio::sync::Mutex<()>>,
    /// Streams being opened (see [`MAX_OPENING`]).
    opening: Arc<tokio::sync::Semaphore>,
}

impl Follower {
    async fn run(self) {
        // At most TAIL_BYTES, grown only as the container prints: a quiet
        // agent costs a few bytes here, not a buffer (a leader follows up to
        // MAX_FOLLOWED containers).
        let mut ring: VecDeque<u8> = VecDeque::new();
        let mut since: Option<i64> = None;
        // Tries in a row whose stream brought nothing (see `retry_after`).
        let mut fruitless: u32 = 0;
        loop {
            let lp = LogParams {
                container: Some(self.container.clone()),
                follow: true,
                tail_lines: if since.is_none() { Some(400) } else { None },
                since_seconds: since,
                ..LogParams::default()
            };
            // Held while the stream lasts: it counts against its connection.
            let lease = self.shared.streams.lease();
            let opened = match &lease {
                Ok(lease) => {
                    let Ok(permit) = self.opening.clone().acquire_owned().await else {
                        return;
                    };
                    let paced = tokio::time::Instant::now() + OPEN_PACE;
                    let logs: Api<Pod> = Api::namespaced(lease.client.clone(), &self.namespace);
                    // A permit is not held by an API that never answers.
                    // Boxed, as below: a future's state is as large as its
                    // largest await, and a follower mostly waits on its
                    // stream (a leader holds up to MAX_FOLLOWED of them).
                    let opened = tokio::time::timeout(
                        OPEN_TIMEOUT,
                        Box::pin(logs.log_stream(&self.pod, &lp)),
                    )
                    .await
                    .ok()
                    .and_then(Result::ok);
                    // The permit is freed once the stream is open and
                    // OPEN_PACE after it was taken: at most MAX_OPENING
                    // opening at once, and MAX_OPENING per OPEN_PACE.
                    tokio::spawn(async move {
                        tokio::time::sleep_until(paced).await;
                        drop(permit);
                    });
                    opened
                }
                Err(e) => {
                    tracing::debug!(error = %e, "log tails: no stream client");
                    None
                }
            };
            let mut brought = 0usize;
            if let Some(stream) = opened {
                let mut stream = std::pin::pin!(stream);
                // Read from the connection's own buffer: no copy buffer per
                // followed container.
                loop {
                    let n = match stream.as_mut().fill_buf().await {
                        Ok([]) | Err(_) => break,
                        Ok(chunk) => {
                            keep_last(&mut ring, chunk, TAIL_BYTES);
                            brought += chunk.len();
                            chunk.len()
                        }
                    };
                    futures::AsyncBufRead::consume(stream.as_mut(), n);
                }
            }
            // The stream ended: the pod went, or its container restarted,
            // or the connection broke.
            let reason = Box::pin(self.final_reason_now()).await;
            if let Some(reason) = reason {
                Box::pin(self.keep(ring.make_contiguous(), reason)).await;
                return;
            }
            fruitless = if brought == 0 { fruitless + 1 } else { 0 };
            let wait = retry_after(fruitless.saturating_sub(1));
            // What was printed while away is read again (and a second
            // more, as the clocks differ), so nothing of the tail is lost.
            since = Some(
                i64::try_from(wait.as_secs())
                    .unwrap_or(i64::MAX)
                    .saturating_add(1),
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// Why this container's tail is final now, if it is: the pod is gone
    /// (or another took its name), terminating or finished.
    async fn final_reason_now(&self) -> Option<&'static str> {
        match self.pods.get_opt(&self.pod).await {
            Ok(Some(p)) if p.uid().as_deref() != Some(&self.uid) => Some("Deleted"),
            Ok(p) => final_reason(p.as_ref()),
            Err(_) => None,
        }
    }

    async fn keep(&self, ring: &[u8], reason: &'static str) {
        if ring.is_empty() || !self.shared.leader.is_leader() {
            return;
        }
        let text = String::from_utf8_lossy(ring);
        let mut counts = RedactionCounts::new();
        let redactor = self
            .redactors
            .of(&self.shared.client, &self.namespace)
            .await;
        let text = redactor.redact_str(tail_of(&text, TAIL_BYTES), &mut counts);
        let entry = TailEntry {
            pod: self.pod.clone(),
            container: self.container.clone(),
            key: data_key(&self.pod, &self.container),
            captured_at: Timestamp::now().to_string(),
            reason: reason.to_owned(),
        };
        let _one_writer = self.writer.lock().await;
        if let Err(e) = store(
            &self.shared,
            &self.namespace,
            &self.pool,
            vec![(entry, text)],
        )
        .await
        {
            tracing::warn!(pod = %self.pod, container = %self.container, error = %e, "cannot keep the final log lines");
        } else {
            tracing::debug!(pod = %self.pod, container = %self.container, reason, "kept the final log lines");
        }
    }
}

/// How long a namespace without a usable redaction key keeps its random
/// one before the Secret is looked for again.
const KEY_RETRY: Duration = Duration::from_secs(60);

/// Longest wait for the namespace's redaction key.
const KEY_TIMEOUT: Duration = Duration::from_secs(15);

/// The redactor of each namespace whose pods' tails are kept, keyed with
/// the namespace's redaction key ([`redaction_key`]).
#[derive(Default)]
struct Redactors(tokio::sync::Mutex<BTreeMap<String, KeyedRedactor>>);

/// A namespace's redactor and, when it has no key of the namespace's, when
/// to look for one again.
type KeyedRedactor = (Arc<Redactor>, Option<tokio::time::Instant>);

impl Redactors {
    /// The namespace's redactor: with its redaction key, read (and filled
    /// in when empty) once; without one (no Secret, or no right to it), a
    /// random key, looked for again after [`KEY_RETRY`].
    async fn of(&self, client: &kube::Client, namespace: &str) -> Arc<Redactor> {
        let mut cache = self.0.lock().await;
        if let Some((r, retry)) = cache.get(namespace)
            && retry.is_none_or(|at| tokio::time::Instant::now() < at)
        {
            return r.clone();
        }
        // Bounded: every keep of the namespace waits for this.
        let key = tokio::time::timeout(KEY_TIMEOUT, namespace_key(client, namespace))
            .await
            .unwrap_or_else(|_| Err("the API did not answer in time".into()));
        let (redactor, retry) = match key {
            Ok(key) => (
                // The key itself is hidden too, should anything print it.
                Redactor::with_hash_key(std::slice::from_ref(&key), &key),
                None,
            ),
            Err(why) => {
                tracing::warn!(%namespace, secret = redaction_key::SECRET_NAME, %why,
                    "no redaction key: the placeholders in kept log tails will not match a bundle's");
                (
                    Redactor::new(&[]),
                    Some(tokio::time::Instant::now() + KEY_RETRY),
                )
            }
        };
        let redactor = Arc::new(redactor);
        cache.insert(namespace.to_owned(), (redactor.clone(), retry));
        redactor
    }
}

/// The namespace's redaction key, filled in with a new random one when the
/// Secret (rendered empty by `agentdeck manifests`) holds none yet. The
/// controller may get and update this one Secret, and create none.
async fn namespace_key(client: &kube::Client, namespace: &str) -> Result<Vec<u8>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _attempt in 0..5 {
        let Some(mut secret) = api
            .get_opt(redaction_key::SECRET_NAME)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err("the Secret does not exist (see agentdeck manifests)".into());
        };
        if let Some(key) = serde_json::to_value(&secret)
            .ok()
            .and_then(|v| redaction_key::key_in(&v))
        {
            return Ok(key);
        }
        let mut random = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random)
            .map_err(|_| "no system random source".to_owned())?;
        let key = redaction_key::new_key(&random).into_bytes();
        secret.data.get_or_insert_default().insert(
            redaction_key::DATA_KEY.to_owned(),
            k8s_openapi::ByteString(key.clone()),
        );
        secret.string_data = None;
        match api
            .replace(redaction_key::SECRET_NAME, &PostParams::default(), &secret)
            .await
        {
            Ok(_) => return Ok(key),
            // Another replica filled it in first: take theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("the Secret kept changing while it was filled in".into())
}

async fn store(
    shared: &Context,
    namespace: &str,
    pool: &str,
    new: Vec<(TailEntry, String)>,
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(shared.client.clone(), namespace);
    let name = configmap_name(pool);
    for _attempt in 0..5 {
        let existing = api.get_opt(&name).await?;
        let mut cm = existing.clone().unwrap_or_else(|| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([
                    (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
                    (LABEL_POOL.to_owned(), pool.to_owned()),
                    (LABEL_LOG_TAILS.to_owned(), "true".to_owned()),
                ])),
                owner_references: owner(shared, namespace, pool),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        });
        let mut index: Vec<TailEntry> = cm
            .annotations()
            .get(ANNOTATION_INDEX)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let mut data = cm.data.take().unwrap_or_default();
        merge(&mut index, &mut data, new.clone());
        cm.data = Some(data);
        cm.annotations_mut().insert(
            ANNOTATION_INDEX.to_owned(),
            serde_json::to_string(&index).unwrap_or_default(),
        );
        let result = if existing.is_some() {
            api.replace(&name, &PostParams::default(), &cm).await
        } else {
            api.create(&PostParams::default(), &cm).await
        };
        match result {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn owner(
    shared: &Context,
    namespace: &str,
    pool: &str,
) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>> {
    let p = shared
        .view
        .pools
        .get(&kube::runtime::reflector::ObjectRef::<AgentPool>::new(pool).within(namespace))?;
    Some(vec![p.controller_owner_ref(&())?])
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_log_stream_that_brings_nothing_is_tried_again_less_and_less_often() {
        use super::{RETRY_MAX, retry_after};
        use std::time::Duration;
        assert_eq!(retry_after(0), Duration::from_secs(1));
        assert_eq!(retry_after(1), Duration::from_secs(2));
        assert_eq!(retry_after(3), Duration::from_secs(8));
        assert_eq!(retry_after(6), RETRY_MAX);
        assert_eq!(retry_after(u32::MAX), RETRY_MAX);
    }

    use super::*;

    fn entry(pod: &str, container: &str, at: &str) -> TailEntry {
        TailEntry {
            pod: pod.into(),
            container: container.into(),
            key: data_key(pod, container),
            captured_at: at.into(),
            reason: "Terminated".into(),
        }
    }

    #[test]
    fn the_ring_keeps_the_last_bytes_printed_and_never_more_than_its_bound() {
        let mut ring = VecDeque::new();
        keep_last(&mut ring, b"abc", 5);
        keep_last(&mut ring, b"def", 5);
        assert_eq!(ring.make_contiguous(), b"bcdef");
        // A chunk longer than the bound keeps only its own end.
        keep_last(&mut ring, b"0123456789", 5);
        assert_eq!(ring.make_contiguous(), b"56789");
        keep_last(&mut ring, b"", 5);
        assert_eq!(ring.make_contiguous(), b"56789");
        // Many small writes: the bound holds and the capacity stays near it.
        let mut ring = VecDeque::new();
        for i in 0..10_000u32 {
            keep_last(&mut ring, format!("line {i}\n").as_bytes(), TAIL_BYTES);
            assert!(ring.len() <= TAIL_BYTES);
        }
        assert!(ring.capacity() <= 2 * TAIL_BYTES, "{}", ring.capacity());
        let text = String::from_utf8(ring.make_contiguous().to_vec()).expect("utf-8");
        assert!(text.ends_with("line 9999\n"), "{text}");
    }

    #[test]
    fn a_tail_keeps_the_last_whole_lines_within_the_bound() {
        assert_eq!(tail_of("a\nbb\nccc\n", 6), "ccc\n");
        assert_eq!(tail_of("short\n", 100), "short\n");
        assert_eq!(tail_of("ééé", 3), "é");
    }

    #[test]
    fn the_oldest_pods_go_first_and_the_bounds_hold() {
        let mut index = Vec::new();
        let mut data = BTreeMap::new();
        for i in 0..(MAX_PODS + 5) {
            let at = format!("2026-01-01T00:00:{i:02}Z");
            merge(
                &mut index,
                &mut data,
                vec![
                    (entry(&format!("p{i}"), "worker", &at), format!("w{i}\n")),
                    (entry(&format!("p{i}"), "runner", &at), format!("r{i}\n")),
                ],
            );
        }
        let pods: std::collections::BTreeSet<_> = index.iter().map(|e| e.pod.clone()).collect();
        assert_eq!(pods.len(), MAX_PODS);
        assert!(!pods.contains("p0") && pods.contains(&format!("p{}", MAX_PODS + 4)));
        assert_eq!(data.len(), 2 * MAX_PODS);
        // A bigger tail evicts by bytes.
        let big = "x".repeat(TAIL_BYTES);
        for i in 0..40 {
            merge(
                &mut index,
                &mut data,
                vec![(
                    entry(
                        &format!("big{i}"),
                        "c",
                        &format!("2027-01-01T00:00:{i:02}Z"),
                    ),
                    big.clone(),
                )],
            );
        }
        assert!(data.values().map(String::len).sum::<usize>() <= MAX_TOTAL_BYTES);
        assert!(index.iter().any(|e| e.pod == "big39"));
    }

    #[test]
    fn entries_read_back_what_merge_wrote() {
        let mut index = Vec::new();
        let mut data = BTreeMap::new();
        merge(
            &mut index,
            &mut data,
            vec![(entry("my.pod-1", "agent", "t"), "last line\n".into())],
        );
        let cm = serde_json::json!({
            "metadata": {"annotations": {ANNOTATION_INDEX: serde_json::to_string(&index).expect("json")}},
            "data": data,
        });
        assert_eq!(
            entries(&cm),
            vec![(
                "my.pod-1".to_owned(),
                "agent".to_owned(),
                "last line\n".to_owned()
            )]
        );
    }
}
