//! What the console asks the API on a timer: its version (the header's
//! latency and watch state), what this identity may do, and where the
//! pools are when the namespace shown has none.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::feed::{LATE_KIND, answered};
use crate::app::{ClusterStatus, Msg, Refusal, Role, WatchState};
use crate::cluster;
use crate::controller::ControllerHandle;

/// How often the API is asked for its version (latency, reachability).
const STATUS_EVERY: Duration = Duration::from_secs(3);

pub(super) async fn status(
    client: Client,
    handle: Arc<ControllerHandle>,
    (read_only, watch_only): (Option<String>, bool),
    tx: mpsc::Sender<Msg>,
    cancel: CancellationToken,
) {
    let leader = handle.leader();
    let board = handle.view().watches;
    let mut last: Option<Result<Duration, String>> = None;
    loop {
        let (role, role_reason) = if let Some(why) = &read_only {
            (Role::ReadOnly, Some(why.clone()))
        } else if leader.is_leader() {
            (Role::Leader, None)
        } else if watch_only {
            (
                Role::Observer,
                Some("-A (a console over every namespace only watches)".to_owned()),
            )
        } else {
            (Role::Observer, leader.why_not())
        };
        let watches = board.statuses();
        let (watch, loading, refused) = watch_state(&watches, last.as_ref());
        let current =
            loading.is_empty() && matches!(watch, WatchState::Synced | WatchState::Partial(_));
        let latency = last.as_ref().and_then(|r| r.as_ref().ok().copied());
        // How far each first list has come, for the view tabs' counts.
        let listing = watches
            .iter()
            .filter(|(_, w)| !w.listed_once)
            .filter_map(|(k, w)| Some((k.clone(), w.progress?)))
            .collect();
        if tx
            .send(Msg::Status(ClusterStatus {
                role,
                watch,
                latency,
                role_reason,
                loading,
                listing,
                refused,
            }))
            .await
            .is_err()
        {
            return;
        }
        let every = if matches!(last, Some(Ok(_))) && current {
            STATUS_EVERY
        } else {
            Duration::from_millis(500)
        };
        let ask = async {
            let started = Instant::now();
            match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
                Ok(Ok(_)) => Ok(started.elapsed()),
                Ok(Err(e)) => Err(root_cause(&e)),
                Err(_) => Err("the API did not answer within 10s".to_owned()),
            }
        };
        let syncing = !handle.is_synced();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = leader.changed() => continue,
            // Said as soon as it is so, not at the next ask up to 500 ms on.
            _ = handle.synced(), if syncing => continue,
            r = async { tokio::time::sleep(every).await; ask.await } => last = Some(r),
        }
    }
}

/// How often the console asks the API again what this identity may do.
const RIGHTS_EVERY: Duration = Duration::from_secs(60);

/// Asks the API what this identity may do (one SelfSubjectAccessReview
/// per permission agentdeck uses, see `ops::access`) at start, every
/// [`RIGHTS_EVERY`] and when asked (ctrl-r), and tells the app.
pub(super) async fn rights(
    client: Client,
    namespace: Option<String>,
    lease_namespace: String,
    context: String,
    (tx, asked): (mpsc::Sender<Msg>, Arc<tokio::sync::Notify>),
    cancel: CancellationToken,
) {
    loop {
        match crate::ops::access::review(&client, namespace.as_deref(), &lease_namespace).await {
            Ok(table) => {
                let msg = Msg::Rights {
                    context: context.clone(),
                    table,
                };
                if tx.send(msg).await.is_err() {
                    return;
                }
            }
            // Not known is not refused: actions go to the API, which answers.
            Err(e) => tracing::debug!(error = %e, "cannot ask the API what this identity may do"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RIGHTS_EVERY) => {}
            _ = asked.notified() => {}
        }
    }
}

/// How often an empty pools view looks for pools in other namespaces.
const ELSEWHERE_EVERY: Duration = Duration::from_secs(15);

/// While the namespace shown has no pools, looks (one metadata list over
/// every namespace, or says why it could not) where the pools are, so an
/// empty view can name them.
pub(super) async fn pools_elsewhere(
    client: Client,
    handle: Arc<ControllerHandle>,
    namespace: String,
    tx: mpsc::Sender<Msg>,
    cancel: CancellationToken,
) {
    let view = handle.view();
    let mut last = None;
    loop {
        let empty = answered(&handle) && view.pools.state().is_empty();
        let served = !view
            .watches
            .statuses()
            .get("AgentPool")
            .is_some_and(|w| matches!(w.phase, cluster::watches::Phase::Refused(_)));
        if empty && served {
            let found = look_elsewhere(&client, &namespace).await;
            if last.as_ref() != Some(&found) {
                last = Some(found.clone());
                if tx.send(Msg::PoolsElsewhere(found)).await.is_err() {
                    return;
                }
            }
        }
        // Looked: again after a while. Not looked (pools here, or not
        // answered yet): soon, to be there when the view empties.
        let wait = if empty && served {
            ELSEWHERE_EVERY
        } else {
            Duration::from_secs(2)
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// AgentPools in namespaces other than `namespace`, counted from one list
/// of their metadata (the names only, in pages).
async fn look_elsewhere(client: &Client, namespace: &str) -> crate::app::Elsewhere {
    use crate::app::Elsewhere;
    let api: Api<crate::crd::AgentPool> = Api::all(client.clone());
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut params = kube::api::ListParams::default().limit(500);
    loop {
        match api.list_metadata(&params).await {
            Ok(page) => {
                for p in &page.items {
                    let ns = p.metadata.namespace.clone().unwrap_or_default();
                    if ns != namespace {
                        *counts.entry(ns).or_default() += 1;
                    }
                }
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(next) => params = params.continue_token(&next),
                    None => break,
                }
            }
            Err(kube::Error::Api(s)) if s.code == 403 => {
                return Elsewhere::CannotLook(
                    "you may not list agentpools in all namespaces".to_owned(),
                );
            }
            Err(e) => return Elsewhere::CannotLook(cluster::listwatch::cause(&e)),
        }
    }
    let mut found: Vec<(String, usize)> = counts.into_iter().collect();
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Elsewhere::Found(found)
}

/// The header's watch state from every watch's, the kinds still on their
/// first list, and the kinds the API refused.
fn watch_state(
    watches: &std::collections::BTreeMap<String, cluster::watches::WatchStatus>,
    last_ask: Option<&Result<Duration, String>>,
) -> (WatchState, Vec<String>, Vec<(String, Refusal)>) {
    use cluster::watches::Phase;
    let loading: Vec<String> = watches
        .iter()
        .filter(|(_, w)| !w.answered())
        .map(|(k, _)| k.clone())
        .collect();
    let mut refused: Vec<(String, Refusal)> = watches
        .iter()
        .filter_map(|(k, w)| match w.phase {
            Phase::Refused(r) => Some((k.clone(), r)),
            _ => None,
        })
        .collect();
    refused.sort_by_key(|(k, _)| crate::app::kind_rank(k));
    let not_installed = refused
        .iter()
        .any(|(k, r)| *r == Refusal::NotServed && matches!(k.as_str(), "AgentPool" | "AgentTask"));
    // Trouble is a watch that followed once and is not following now (a
    // first list is the sync, said as such).
    let trouble = watches
        .iter()
        .filter(|(_, w)| w.phase == Phase::Failing || (w.phase == Phase::Listing && w.listed_once))
        .min_by_key(|(_, w)| (w.phase != Phase::Failing, w.since));
    let watch = match (last_ask, trouble) {
        (Some(Err(why)), _) => WatchState::Disconnected(why.clone()),
        _ if not_installed => WatchState::NotInstalled,
        _ if loading.iter().any(|k| k != LATE_KIND) => WatchState::Syncing,
        (_, Some((kind, w))) => watch_trouble(kind, w),
        _ if !refused.is_empty() => WatchState::Partial(
            refused
                .iter()
                .map(|(k, _)| crate::app::plural(k).to_owned())
                .collect(),
        ),
        _ => WatchState::Synced,
    };
    (watch, loading, refused)
}

/// The header's word for a watch that is not current: which, and why.
fn watch_trouble(kind: &str, w: &cluster::watches::WatchStatus) -> WatchState {
    let why = w.reason.as_deref().unwrap_or("");
    match w.phase {
        cluster::watches::Phase::Failing => {
            let times = if w.failures_in_row > 1 {
                format!(" ({}×)", w.failures_in_row)
            } else {
                String::new()
            };
            WatchState::Failing(format!("{kind} watch: {why}{times}"))
        }
        _ if why.is_empty() => WatchState::Resyncing(format!("{kind} listing")),
        _ => WatchState::Resyncing(format!("{kind} listing again: {why}")),
    }
}

/// The innermost cause of an error, which says what actually went wrong.
pub(super) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    let text = cur.to_string();
    if text.is_empty() { e.to_string() } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board where each `(kind, phase, listed once)` is so.
    fn board(
        cells: &[(&str, cluster::watches::Phase, bool)],
    ) -> std::collections::BTreeMap<String, cluster::watches::WatchStatus> {
        cells
            .iter()
            .map(|(k, phase, listed_once)| {
                (
                    (*k).to_owned(),
                    cluster::watches::WatchStatus {
                        phase: *phase,
                        reason: None,
                        failures_in_row: 0,
                        since: Instant::now(),
                        listed_once: *listed_once,
                        progress: None,
                        beside: false,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_header_says_what_the_api_refused_rather_than_syncing() {
        use cluster::watches::Phase::{Listing, Refused, Watching};
        let ok = Ok(Duration::from_millis(1));
        // Pods and events forbidden, the rest followed: partial.
        let b = board(&[
            ("AgentPool", Watching, true),
            ("AgentTask", Watching, true),
            ("Pod", Refused(Refusal::Forbidden("list")), false),
            ("Event", Refused(Refusal::Forbidden("list")), false),
        ]);
        let (watch, loading, refused) = watch_state(&b, Some(&ok));
        assert_eq!(
            watch,
            WatchState::Partial(vec!["pods".into(), "events".into()])
        );
        assert!(loading.is_empty());
        assert_eq!(refused.len(), 2);
        // The CRDs not served: not installed, whatever else is listing.
        let b = board(&[
            ("AgentPool", Refused(Refusal::NotServed), false),
            ("AgentTask", Refused(Refusal::NotServed), false),
            ("Pod", Listing, false),
        ]);
        assert_eq!(watch_state(&b, Some(&ok)).0, WatchState::NotInstalled);
        // A first list is the sync; the events' first list (a view away)
        // is that view's loading, not the console's.
        let b = board(&[("AgentPool", Watching, true), ("Pod", Listing, false)]);
        assert_eq!(watch_state(&b, Some(&ok)).0, WatchState::Syncing);
        let b = board(&[("AgentPool", Watching, true), ("Event", Listing, false)]);
        let (watch, loading, _) = watch_state(&b, Some(&ok));
        assert_eq!(watch, WatchState::Synced);
        assert_eq!(loading, vec!["Event".to_owned()]);
        // Listing again after following once is a resync.
        let b = board(&[("AgentPool", Listing, true)]);
        assert!(matches!(
            watch_state(&b, Some(&ok)).0,
            WatchState::Resyncing(_)
        ));
        // An API that does not answer says so first.
        let down = Err("connection refused".to_owned());
        assert!(matches!(
            watch_state(&b, Some(&down)).0,
            WatchState::Disconnected(_)
        ));
    }
}
