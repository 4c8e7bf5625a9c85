//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! controllers (daemon replicas, a console next to a daemon) only one writes.
//!
//! Written here rather than taken from a crate, for measured reasons.
//! kube-lease-manager 0.13.1 (built on kube 5) was tried against the
//! sandbox with a 15 s Lease: after the holder's `release()`, a waiting
//! candidate led only 12.0 s later, because a non-holder sleeps until the
//! holder's recorded expiry (`grace_sleep_duration(expiry, 0)` in its
//! `watcher_step`) without looking at the Lease again, so a graceful
//! hand-over costs the rest of the Lease instead of one retry period (the
//! SIGTERM hand-over must take ≤ 2 s, and the 240 s-Lease hand-over test
//! would time out). It also exposes no holder identity (only "am I the
//! leader"), which the console's observer mode needs, and it judges expiry
//! from the holder's `renewTime` against the local clock, so clock skew
//! beyond its grace period elects two leaders. kube-leader-election still
//! needs kube 4. The algorithm here is client-go's: every write carries the
//! resourceVersion read (a 409 means someone else moved first), a Lease is
//! expired when its record has not changed for `leaseDurationSeconds` as
//! seen on the *local* clock (so clock skew between holders does not
//! matter), and a leader that cannot renew within the renew deadline steps
//! down. On shutdown the holder clears `holderIdentity` so a successor
//! takes over at its next retry instead of waiting for expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::LeaderElectionConfig;

/// Whether this process leads, shared with everything that writes.
#[derive(Debug, Clone, Default)]
pub struct LeaderState {
    leading: Arc<AtomicBool>,
    /// Woken on every change of leadership.
    changed: Arc<Notify>,
    /// Why this process does not lead, in words, as the elector last saw.
    why_not: Arc<std::sync::Mutex<Option<String>>>,
}

impl LeaderState {
    /// A state that always leads (election disabled).
    pub fn always() -> LeaderState {
        let s = LeaderState::default();
        s.leading.store(true, Ordering::SeqCst);
        s
    }

    /// This process holds the Lease now.
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// Resolves at the next change of leadership.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Why this process does not lead (`daemon X holds the Lease`,
    /// `namespace agentdeck-system missing …`), as the elector last saw;
    /// none while it leads or before its first attempt.
    pub fn why_not(&self) -> Option<String> {
        if self.is_leader() {
            return None;
        }
        self.why_not
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn note_why_not(&self, why: Option<String>) {
        *self
            .why_not
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = why;
    }

    /// Forgets leadership without touching the Lease (the process is gone).
    pub(crate) fn clear(&self) {
        self.set(false);
    }

    fn set(&self, leading: bool) {
        if self.leading.swap(leading, Ordering::SeqCst) != leading {
            self.changed.notify_waiters();
        }
    }
}

/// Timings of the election.
#[derive(Debug, Clone)]
pub struct ElectionTimings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl From<&LeaderElectionConfig> for ElectionTimings {
    fn from(c: &LeaderElectionConfig) -> Self {
        ElectionTimings {
            lease_duration: c.lease_duration(),
            renew_deadline: c.renew_deadline(),
            retry_period: c.retry_period(),
        }
    }
}

/// Competes for the Lease `name` until `cancel`, then releases it if held
/// (bounded to 2 s so shutdown stays quick).
pub async fn run(
    api: Api<Lease>,
    api_namespace: String,
    name: String,
    identity: String,
    timings: ElectionTimings,
    state: LeaderState,
    cancel: CancellationToken,
) {
    let mut observed: Option<(String, Instant)> = None;
    let mut last_renew: Option<Instant> = None;
    let mut warned = false;
    let mut held: Option<Lease> = None;
    loop {
        let mut holder = None;
        let leading = try_acquire_or_renew(
            &api,
            &name,
            &identity,
            &timings,
            (&mut observed, &mut holder),
            &mut held,
        )
        .await;
        state.note_why_not(why_not(&leading, holder, &api_namespace));
        match leading {
            Ok(true) => {
                last_renew = Some(Instant::now());
                if !state.is_leader() {
                    tracing::info!(lease = %name, %identity, "became leader");
                }
                state.set(true);
            }
            Ok(false) => {
                if state.is_leader() {
                    tracing::warn!(lease = %name, "lost the lease to another holder");
                }
                state.set(false);
            }
            Err(e) => {
                let expired = last_renew.is_none_or(|t| t.elapsed() >= timings.renew_deadline);
                if state.is_leader() && expired {
                    tracing::warn!(lease = %name, error = %e, "cannot renew the lease; stepping down");
                    state.set(false);
                } else if !warned && matches!(&e, kube::Error::Api(_)) {
                    // Once, loudly: a missing controllerNamespace or a
                    // missing permission would otherwise leave the
                    // controller idle without a word. (An API that does not
                    // answer at all is reported by the watches.)
                    warned = true;
                    let hint = match &e {
                        kube::Error::Api(s) if s.code == 404 => format!(
                            " (namespace {api_namespace:?} does not exist: create it, or set \
                             controllerNamespace)"
                        ),
                        kube::Error::Api(s) if s.code == 403 => {
                            " (the controller's service account may not use Leases there)"
                                .to_owned()
                        }
                        _ => String::new(),
                    };
                    tracing::warn!(lease = %name, namespace = %api_namespace, error = %e,
                        "cannot take the leader Lease; nothing is reconciled until it can{hint}");
                } else {
                    tracing::debug!(lease = %name, error = %e, "lease attempt failed");
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(timings.retry_period) => {}
        }
    }
    if state.is_leader() {
        state.set(false);
        match tokio::time::timeout(Duration::from_secs(2), release(&api, &name, &identity)).await {
            Ok(Ok(())) => tracing::info!(lease = %name, "released the lease"),
            Ok(Err(e)) => tracing::warn!(lease = %name, error = %e, "cannot release the lease"),
            Err(_) => tracing::warn!(lease = %name, "releasing the lease timed out"),
        }
    }
}

/// Why a round did not end with this process leading, in words.
fn why_not(
    round: &Result<bool, kube::Error>,
    holder: Option<String>,
    namespace: &str,
) -> Option<String> {
    match round {
        Ok(true) => None,
        Ok(false) => Some(match holder {
            Some(h) => format!("daemon {h} holds the Lease"),
            None => "another controller took the Lease first".to_owned(),
        }),
        Err(kube::Error::Api(s)) if s.code == 404 => Some(format!(
            "namespace {namespace} missing (the Lease lives there)"
        )),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            Some(format!("you may not create leases in {namespace}"))
        }
        Err(e) => Some(format!(
            "cannot reach the Lease: {}",
            crate::cluster::listwatch::cause(e)
        )),
    }
}

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

/// One round: `Ok(true)` when this process holds the Lease afterwards.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    name: &str,
    identity: &str,
    timings: &ElectionTimings,
    (observed, holder_seen): (&mut Option<(String, Instant)>, &mut Option<String>),
    held: &mut Option<Lease>,
) -> Result<bool, kube::Error> {
    // While holding, renew from the Lease as last written: one request per
    // round instead of a read and a write. A 409 means it changed under us.
    if let Some(mut lease) = held.take() {
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(now_micro());
        }
        match api.replace(name, &PostParams::default(), &lease).await {
            Ok(updated) => {
                *observed = Some((
                    updated
                        .metadata
                        .resource_version
                        .clone()
                        .unwrap_or_default(),
                    Instant::now(),
                ));
                *held = Some(updated);
                return Ok(true);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                *held = Some(lease);
                return Err(e);
            }
        }
    }
    let current = match api.get_opt(name).await? {
        Some(lease) => lease,
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(identity.to_owned()),
                    lease_duration_seconds: Some(seconds(timings.lease_duration)),
                    acquire_time: Some(now_micro()),
                    renew_time: Some(now_micro()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    *held = Some(created);
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        }
    };
    let rv = current
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    // Expiry is judged by when *we* last saw the record change.
    let seen_at = match observed {
        Some((seen_rv, at)) if *seen_rv == rv => *at,
        _ => {
            let at = Instant::now();
            *observed = Some((rv.clone(), at));
            at
        }
    };
    let duration = spec
        .lease_duration_seconds
        .map(|s| Duration::from_secs(u64::try_from(s.max(0)).unwrap_or(0)))
        .unwrap_or(timings.lease_duration);
    let mine = holder.as_deref() == Some(identity);
    if !mine && holder.is_some() && seen_at.elapsed() < duration {
        *holder_seen = holder;
        return Ok(false);
    }
    let transitions = spec.lease_transitions.unwrap_or(0);
    let mut next = current.clone();
    next.spec = Some(LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(seconds(timings.lease_duration)),
        acquire_time: if mine {
            spec.acquire_time.clone()
        } else {
            Some(now_micro())
        },
        renew_time: Some(now_micro()),
        lease_transitions: Some(if mine { transitions } else { transitions + 1 }),
        ..spec
    });
    match api.replace(name, &PostParams::default(), &next).await {
        Ok(updated) => {
            *observed = Some((
                updated
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_default(),
                Instant::now(),
            ));
            *held = Some(updated);
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Clears the holder if it is still us, so the next candidate takes over
/// without waiting for the Lease to expire.
async fn release(api: &Api<Lease>, name: &str, identity: &str) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(name).await? else {
        return Ok(());
    };
    let spec = lease.spec.get_or_insert_default();
    if spec.holder_identity.as_deref() != Some(identity) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now_micro());
    api.replace(name, &PostParams::default(), &lease).await?;
    Ok(())
}
