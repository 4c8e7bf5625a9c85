//! What feeds the rows: the watch of Events (started once the first screen
//! is shown and a view reads events), the snapshot builder woken by the
//! view's change signal, and the changes it reads from the feeds kept
//! beside the stores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::event::CachedEvent as Event;
use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{Clock, FRAME, SNAPSHOT_GAP};
use crate::app::Msg;
use crate::app::rows::{Changes, Delta, RowBuilder, Sources};
use crate::cluster;
use crate::cluster::ClusterView;
use crate::cluster::Connection;
use crate::config::Config;
use crate::controller::ControllerHandle;
use crate::health::FreshnessThresholds;

/// The kind whose watch starts after the first screen (events are a view
/// away): its first list is that view's loading, not the console's sync.
pub(super) const LATE_KIND: &str = "Event";

/// A reflector of Events in the watched namespaces, bumping `changes`.
///
/// The list starts once the first screen of synced rows is built (`shown`
/// turns true) and a view that reads events is first opened (`wanted`
/// turns true: the events table, a pool's history). Events are a view
/// away: their pages would compete with the lists and the rows of the
/// first screen, and at 100,000 tasks the 51,000 that 10,000 agent pods
/// leave took about 125 MiB of a console that might never show one
/// (benches/README.md, the scale bench).
pub(super) fn watch_events(
    conn: &Connection,
    all: bool,
    config: &Config,
    (changes, cell): (cluster::Changes, cluster::watches::WatchCell),
    (mut shown, mut wanted): (watch::Receiver<bool>, watch::Receiver<bool>),
    cancel: CancellationToken,
) -> (Store<Event>, cluster::feed::ChangeFeed) {
    let api: Api<Event> = if all || config.namespaces.len() > 1 {
        Api::all(conn.client.clone())
    } else {
        let ns = config.namespaces.first().unwrap_or(&conn.namespace);
        Api::namespaced(conn.client.clone(), ns)
    };
    let (reader, writer) = reflector::store::<Event>();
    let stream = cluster::listwatch::watcher_reporting(api, watcher::Config::default(), cell)
        .default_backoff()
        .modify(|e| e.meta_mut().managed_fields = None)
        .reflect(writer);
    let feed = cluster::feed::ChangeFeed::default();
    let told = feed.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = shown.wait_for(|shown| *shown) => if r.is_err() { return },
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = wanted.wait_for(|wanted| *wanted) => if r.is_err() { return },
        }
        tokio::pin!(stream);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                n = stream.next() => match n {
                    Some(Ok(e)) => {
                        // Told before the bump, so a reader woken by it
                        // finds the change in the feed.
                        use cluster::feed::Follower;
                        match &e {
                            watcher::Event::Apply(o) => told.applied(o),
                            watcher::Event::Delete(o) => told.deleted(o),
                            watcher::Event::InitDone => told.relisted(&[] as &[Arc<Event>]),
                            watcher::Event::Init | watcher::Event::InitApply(_) => {}
                        }
                        changes.bump();
                    }
                    Some(Err(e)) => tracing::debug!(error = %e, "event watch failed; retrying"),
                    None => return,
                }
            }
        }
    });
    (reader, feed)
}

/// Rebuilds the rows whenever the view changes (not on a timer), at most
/// every [`SNAPSHOT_GAP`] or twice the time the last build took (the first
/// build after the watches sync goes at once). `shown`
/// turns true once rows built from synced stores are sent.
pub(super) async fn snapshots(
    view: ClusterView,
    (events, event_feed): (Store<Event>, cluster::feed::ChangeFeed),
    synced: Arc<ControllerHandle>,
    // Agents' freshness thresholds; when a Running task is flagged.
    (thresholds, long_running): (FreshnessThresholds, Duration),
    (tx, clock): (mpsc::Sender<Msg>, Clock),
    shown: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let mut changes = view.changes.subscribe();
    let told = ViewChanges::new(view.clone(), events, event_feed);
    // Keeps the rows of the last build: a change costs the rows it touches.
    let mut builder = RowBuilder::flagging_long_running(long_running);
    loop {
        let started = Instant::now();
        let whole = answered(&synced);
        let delta = told.take();
        let now = clock.now();
        let Ok((b, snap)) = tokio::task::spawn_blocking(move || {
            let snap = builder.update(delta, now, &thresholds);
            (builder, snap)
        })
        .await
        else {
            return;
        };
        builder = b;
        tracing::debug!(
            pools = snap.pools.len(),
            tasks = snap.tasks.len(),
            agents = snap.agents.len(),
            rebuilt = builder.rebuilt,
            took_us = started.elapsed().as_micros() as u64,
            "rows built"
        );
        // The first screen's rows are in (the pools, the first view, and
        // some tasks): while the rest of the first lists streams in, each
        // build redoes the rows whose queue places moved, so fewer builds
        // leave the list (and the allocator) more of the machine. Until
        // then a frame apart: with the tasks' first pages in before the
        // pools' list, the pools' rows waited for the longer gap.
        let first_screen_in = first_rows_in(&snap, view.watches.answered("AgentPool"));
        if tx.send(Msg::Snapshot(Arc::new(snap))).await.is_err() {
            return;
        }
        if whole {
            shown.send_if_modified(|shown| !std::mem::replace(shown, true));
        }
        let gap = snapshot_gap(answered(&synced), first_screen_in, started.elapsed());
        // Rows built while the first lists stream in make the gap long; the
        // first whole rows go at once when the watches sync.
        let synced_now = async {
            if whole {
                std::future::pending::<()>().await
            } else {
                synced.synced().await
            }
        };
        let woken_by_sync = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(gap) => false,
            _ = synced_now => true,
        };
        if woken_by_sync {
            continue;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = changes.changed() => if r.is_err() { return },
            // Rows that follow the clock (a task running past the
            // threshold, its pool's verdict) catch up in a quiet cluster
            // too; the rebuild reuses every row that did not change.
            _ = tokio::time::sleep(CLOCK_REBUILD) => {}
        }
    }
}

/// Whether `snap` holds the first screen's rows: some tasks, and the pools
/// (the first view), or none because the pools' watch answered with none.
fn first_rows_in(snap: &crate::app::rows::Snapshot, pools_answered: bool) -> bool {
    (pools_answered || !snap.pools.is_empty()) && !snap.tasks.is_empty()
}

/// The time until the next snapshot, after one that took `took`: twice
/// that at least; [`SNAPSHOT_GAP`] once the watches are synced (`whole`);
/// before, [`FRAME`] until the first screen's rows are in ([`first_rows_in`]),
/// then [`LISTING_GAP`].
fn snapshot_gap(whole: bool, first_screen_in: bool, took: Duration) -> Duration {
    let gap = if whole {
        SNAPSHOT_GAP
    } else if first_screen_in {
        LISTING_GAP
    } else {
        FRAME
    };
    gap.max(took * 2)
}

/// Whether the rows are as whole as the API lets them be: every watch
/// listed, or refused (a forbidden kind never lists, and is not waited for).
pub(super) fn answered(handle: &ControllerHandle) -> bool {
    handle.is_synced() || handle.view().watches.answered_but(LATE_KIND)
}

/// Shortest time between two snapshots while the first lists stream in,
/// once some tasks are on the screen (before, [`FRAME`]).
const LISTING_GAP: Duration = Duration::from_millis(250);

/// Longest time between two snapshots when nothing changes.
const CLOCK_REBUILD: Duration = Duration::from_secs(15);

/// What changed in the view since the console last looked, from the
/// feeds kept beside its stores (see `cluster::feed`): a watch event
/// costs the rows it touches, not a pass over every object.
pub struct ViewChanges {
    view: ClusterView,
    events: Store<Event>,
    event_feed: cluster::feed::ChangeFeed,
}

impl ViewChanges {
    /// Starts the view's feeds and `event_feed` (told by the watch behind
    /// `events`); the first take reads every store whole.
    pub fn new(
        view: ClusterView,
        events: Store<Event>,
        event_feed: cluster::feed::ChangeFeed,
    ) -> ViewChanges {
        view.feeds.subscribe();
        view.health.feed().subscribe();
        event_feed.subscribe();
        ViewChanges {
            view,
            events,
            event_feed,
        }
    }

    /// What changed since the last take.
    pub fn take(&self) -> Delta {
        let v = &self.view;
        let samples = v.health.feed().take();
        Delta {
            pools: changes(&v.feeds.pools, &v.pools),
            tasks: changes(&v.feeds.tasks, &v.tasks),
            pods: changes(&v.feeds.pods, &v.pods),
            jobs: changes(&v.feeds.jobs, &v.jobs),
            samples: if samples.relisted {
                Changes::All(v.health.snapshot().into_iter().map(Arc::new).collect())
            } else {
                Changes::Some(
                    samples
                        .keys
                        .into_iter()
                        .map(|k| {
                            let s = v.health.get(&k.0, &k.1).map(Arc::new);
                            (k, s)
                        })
                        .collect(),
                )
            },
            events: changes(&self.event_feed, &self.events),
        }
    }
}

/// The objects `feed` says changed, read from `store` (absent: deleted).
fn changes<K>(feed: &cluster::feed::ChangeFeed, store: &Store<K>) -> Changes<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let taken = feed.take();
    if taken.relisted {
        return Changes::All(store.state());
    }
    Changes::Some(
        taken
            .keys
            .into_iter()
            .map(|k| {
                let o = store.get(&ObjectRef::new(&k.1).within(&k.0));
                (k, o)
            })
            .collect(),
    )
}

/// The objects of the view, as they are now.
pub fn sources(view: &ClusterView, events: &Store<Event>) -> Sources {
    Sources {
        pools: view.pools.state(),
        tasks: view.tasks.state(),
        pods: view.pods.state(),
        jobs: view.jobs.state(),
        events: events.state(),
        samples: view.health.snapshot(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_screen_is_in_with_tasks_and_the_pools_or_the_pools_answered_with_none() {
        let now = crate::app::fixtures::now();
        let thresholds = FreshnessThresholds {
            stale_after: Duration::from_secs(20),
            offline_after: Duration::from_secs(60),
        };
        let full =
            crate::app::rows::build(&crate::app::fixtures::sources(now, 3), now, &thresholds);
        assert!(!full.pools.is_empty() && !full.tasks.is_empty());
        assert!(first_rows_in(&full, false));
        let tasks_only = crate::app::rows::Snapshot {
            pools: Vec::new(),
            ..full.clone()
        };
        assert!(!first_rows_in(&tasks_only, false), "pools still listing");
        assert!(first_rows_in(&tasks_only, true), "a cluster with no pool");
        let pools_only = crate::app::rows::Snapshot {
            tasks: Vec::new(),
            ..full
        };
        assert!(!first_rows_in(&pools_only, true), "no task yet");
    }

    #[test]
    fn the_first_tasks_come_a_frame_apart_the_rest_of_the_list_less_often() {
        let quick = Duration::from_millis(1);
        assert_eq!(
            snapshot_gap(false, false, quick),
            FRAME,
            "nothing shown yet"
        );
        assert_eq!(
            snapshot_gap(false, true, quick),
            LISTING_GAP,
            "tasks shown, list under way"
        );
        assert_eq!(snapshot_gap(true, true, quick), SNAPSHOT_GAP, "synced");
        let slow = Duration::from_millis(400);
        assert_eq!(
            snapshot_gap(true, true, slow),
            slow * 2,
            "a slow build waits twice its time"
        );
    }
}
