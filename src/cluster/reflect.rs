//! The cluster's cache filled: a reflector per watch that writes a
//! store, tells followers (the per-pool indexes, the change feeds) of each
//! change, and streams what changed to subscribers (the controller's
//! triggers, the log tails).

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{Changes, WatchCell, feed, listwatch, slim};

/// Reports each watch outcome (`None` = fine) to the API health tracker.
pub type WatchHealth = Arc<dyn Fn(WatchSignal<'_>) + Send + Sync>;

/// What one watch stream reports.
pub enum WatchSignal<'a> {
    /// An event arrived.
    Event,
    /// The initial list is in the store.
    Listed,
    /// The watch failed (it retries with backoff).
    Failed(&'a watcher::Error),
}

/// Keeps an object as listed (managedFields aside).
pub fn keep_all<K>(_: &mut K) {}

/// A reflector over `api`: its store, `subscribers` streams of the objects
/// it applies (for the Controller's triggers and the log tails), and the
/// task driving it (which also feeds API health and the watch board).
///
/// kube-runtime's shared reflector is not used: its subscriber
/// (`ReflectHandle`) looks each object up when it is read and, when the
/// object was deleted in between, answers `Pending` without asking to be
/// woken again. A subscriber polled only on its own wake-ups (one stream of
/// a `select_all`, as the Controller's triggers are) then never reads again,
/// its buffer fills, and the reflector waits for it forever: the store
/// freezes while everything says it is synced. [`Subscriber`] skips an
/// object that is gone and reads on.
#[allow(clippy::too_many_arguments)]
pub fn shared_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    (strip, emptied, first_list): (fn(&mut K), slim::Emptied, FirstListAs),
    shared_api: WatchHealth,
    changes: Changes,
    cell: WatchCell,
    subscribers: usize,
    followers: Vec<Arc<dyn feed::Follower<K>>>,
    cancel: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> (Store<K>, Vec<Subscriber<K>>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store::<K>();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..subscribers)
        .map(|_| tokio::sync::mpsc::channel::<ObjectRef<K>>(SUBSCRIBER_BUFFER))
        .unzip();
    let subscribers = receivers
        .into_iter()
        .map(|rx| Subscriber {
            rx,
            store: reader.clone(),
        })
        .collect();
    let stream = listwatch::watcher_emptying(api, config, cell, emptied)
        .default_backoff()
        .modify(move |o| {
            // managedFields are never read here and are most of an object's size.
            o.meta_mut().managed_fields = None;
            strip(o);
        });
    let relay = Relay {
        store: reader.clone(),
        writer,
        first: FirstList::new(first_list),
        followers,
        changes,
        shared_api,
        listed: false,
        last_bump: None,
    };
    tasks.spawn(relay.run(stream, senders, cancel));
    (reader, subscribers)
}

/// The task behind one [`shared_watch`]: each event into the store, to
/// the followers, on the change signal, to the API's health and to the
/// subscribers, in that order.
struct Relay<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    writer: reflector::store::Writer<K>,
    first: FirstList,
    followers: Vec<Arc<dyn feed::Follower<K>>>,
    changes: Changes,
    shared_api: WatchHealth,
    /// The first list has ended (said once to `shared_api`).
    listed: bool,
    /// When a first list's objects were last said on the change signal.
    last_bump: Option<tokio::time::Instant>,
}

/// One item of a watch stream.
type WatchItem<K> = Option<Result<watcher::Event<K>, watcher::Error>>;

impl<K> Relay<K>
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    /// Relays `stream` until it ends or `cancel`.
    async fn run<S>(
        mut self,
        stream: S,
        mut senders: Vec<tokio::sync::mpsc::Sender<ObjectRef<K>>>,
        cancel: CancellationToken,
    ) where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    {
        tokio::pin!(stream);
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return,
                n = stream.next() => n,
            };
            // Into the store (as kube-runtime's `reflect`), the first list
            // as it arrives (see `FirstList`).
            let (next, fill) = match next {
                Some(Ok(event)) => {
                    let (event, fill) = self.first.write(&mut self.writer, event);
                    (Some(Ok(event)), fill)
                }
                other => (other, Fill::No),
            };
            let told = self.tell_followers(&next, fill);
            self.signal(&next, fill);
            if !self.report(&next) || !tell(&mut senders, told, &cancel).await {
                return;
            }
        }
    }

    /// Tells the followers of `next` (every change), and gives what the
    /// subscribers are to be told (kube-runtime's dispatch: an applied
    /// object; after a list, every object).
    fn tell_followers(&self, next: &WatchItem<K>, fill: Fill) -> Vec<ObjectRef<K>> {
        match next {
            // The first list's objects, each in the store as it came: the
            // subscribers hear of them all once it has ended.
            Some(Ok(watcher::Event::InitApply(o))) if fill == Fill::Object => {
                self.followers.iter().for_each(|f| f.applied(o));
                Vec::new()
            }
            Some(Ok(watcher::Event::Apply(o))) => {
                self.followers.iter().for_each(|f| f.applied(o));
                vec![ObjectRef::from_obj(o)]
            }
            Some(Ok(watcher::Event::Delete(o))) => {
                self.followers.iter().for_each(|f| f.deleted(o));
                Vec::new()
            }
            Some(Ok(watcher::Event::InitDone)) => {
                let all = self.store.state();
                // After a first list filled as it came, the followers were
                // told of each object already (a relist would rebuild each
                // index and make the console rebuild every row, for
                // nothing new).
                if fill != Fill::End {
                    self.followers.iter().for_each(|f| f.relisted(&all));
                }
                all.iter().map(|o| ObjectRef::from_obj(&**o)).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Says `next` on the change signal, after the followers were told, so
    /// a reader woken by it finds the change in the feeds. A first list's
    /// objects are said at most every FILL_BUMP_GAP (each bump wakes every
    /// reader: 100,000 of them were a tenth of a console's first list),
    /// the list's end at once.
    fn signal(&mut self, next: &WatchItem<K>, fill: Fill) {
        let said_lately = fill == Fill::Object
            && self
                .last_bump
                .is_some_and(|at| at.elapsed() < FILL_BUMP_GAP);
        if matches!(next, Some(Ok(_))) && !said_lately {
            self.changes.bump();
            self.last_bump = Some(tokio::time::Instant::now());
        }
    }

    /// Reports `next` to the API's health; `false` once the stream ended.
    fn report(&mut self, next: &WatchItem<K>) -> bool {
        match next {
            Some(Ok(watcher::Event::InitDone)) if !self.listed => {
                self.listed = true;
                tracing::debug!(kind = %K::kind(&K::DynamicType::default()), "watch listed");
                (self.shared_api)(WatchSignal::Listed);
            }
            // `Init` starts a relist before anything was answered.
            Some(Ok(watcher::Event::Init)) => {}
            Some(Ok(_)) => (self.shared_api)(WatchSignal::Event),
            Some(Err(e)) => {
                self.changes.watch_failed();
                // An unreachable API is said once for every watch (see
                // `reachability`); an answer such as 403 is worth a line.
                let kind = K::kind(&K::DynamicType::default()).to_string();
                if watch_error_is_transport(e) {
                    tracing::debug!(%kind, error = %e, "watch failed; retrying with backoff");
                } else {
                    tracing::warn!(%kind, error = %e, "watch failed; retrying with backoff");
                }
                (self.shared_api)(WatchSignal::Failed(e));
            }
            None => return false,
        }
        true
    }
}

/// Tells each subscriber of each of `told`, waiting for one whose buffer
/// is full; a subscriber that went away is not waited for again. `false`
/// once cancelled.
async fn tell<K>(
    senders: &mut Vec<tokio::sync::mpsc::Sender<ObjectRef<K>>>,
    told: Vec<ObjectRef<K>>,
    cancel: &CancellationToken,
) -> bool
where
    K: Resource + 'static,
    K::DynamicType: Clone,
{
    for object in told {
        let mut gone = Vec::new();
        for (i, tx) in senders.iter().enumerate() {
            let sent = tokio::select! {
                _ = cancel.cancelled() => return false,
                sent = tx.send(object.clone()) => sent,
            };
            if sent.is_err() {
                gone.push(i);
            }
        }
        for i in gone.into_iter().rev() {
            senders.swap_remove(i);
        }
    }
    true
}

/// How a watch's first list goes into its store: as it arrives.
///
/// kube-runtime's reflector keeps a list's objects aside until the list
/// has ended, then swaps them in, so that a relist never shows a mix of
/// old and new. On the first list there is nothing old to mix with: the
/// store is empty. So each object of the first list goes into the store
/// as its page arrives, and a console shows the first page of 100,000
/// tasks while the rest streams in (the watch still counts as listing
/// until the end, so nothing acts on a partial store: see `gate`). A first
/// list that fails part way and starts again is taken as every relist is
/// (aside, then swapped in), so that nothing it brought stays if the
/// second list has it no more.
struct FirstList {
    /// Lists started.
    lists: u32,
    /// The first list has ended.
    done: bool,
    /// At the first list's end, the store is put through the writer's own
    /// list (see [`FirstListAs::ArrivingReady`]).
    ready_at_end: bool,
}

/// A first list's objects arriving are said on the change signal at most
/// this often (see `shared_watch`).
const FILL_BUMP_GAP: Duration = Duration::from_millis(5);

/// What [`FirstList::write`] did with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Nothing special: as kube-runtime's reflector would.
    No,
    /// An object of the first list, in the store at once.
    Object,
    /// The end of a first list whose objects went in as they came.
    End,
}

/// How a watch's first list goes into its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstListAs {
    /// As it arrives (see [`FirstList`]).
    Arriving,
    /// As it arrives, and ready for a kube `Controller` at its end: for
    /// the store one runs on (the pools', the console's first view). A
    /// `Controller`'s runner waits for the reflector's ready signal, which
    /// only kube-runtime's own swap of a whole list gives: at the end the
    /// objects go through the writer's list once more (a copy of each,
    /// swapped in: the same set), and the runner starts on the whole list.
    ArrivingReady,
}

impl FirstList {
    fn new(first_list: FirstListAs) -> Self {
        FirstList {
            lists: 0,
            done: false,
            ready_at_end: first_list == FirstListAs::ArrivingReady,
        }
    }

    /// Writes `event` to the store behind `writer`, and gives it back with
    /// what was done ([`Fill`]).
    fn write<K>(
        &mut self,
        writer: &mut reflector::store::Writer<K>,
        event: watcher::Event<K>,
    ) -> (watcher::Event<K>, Fill)
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        let filling = !self.done && self.lists == 1;
        match event {
            watcher::Event::InitApply(o) if filling => {
                // Moved, not copied, into the event the store applies.
                let apply = watcher::Event::Apply(o);
                writer.apply_watcher_event(&apply);
                let watcher::Event::Apply(o) = apply else {
                    unreachable!("built as Apply just above")
                };
                return (watcher::Event::InitApply(o), Fill::Object);
            }
            watcher::Event::Init => self.lists += 1,
            // The store holds the whole list already: the swap would put
            // the empty set aside in its place.
            watcher::Event::InitDone if filling => {
                self.done = true;
                if self.ready_at_end {
                    let all = writer.as_reader().state();
                    writer.apply_watcher_event(&watcher::Event::Init);
                    for o in all {
                        writer.apply_watcher_event(&watcher::Event::InitApply((*o).clone()));
                    }
                    writer.apply_watcher_event(&watcher::Event::InitDone);
                }
                return (event, Fill::End);
            }
            watcher::Event::InitDone => self.done = true,
            _ => {}
        }
        writer.apply_watcher_event(&event);
        (event, Fill::No)
    }
}

/// Objects told to a subscriber and not yet read, per subscriber (as the
/// shared reflector's buffer was): the watch waits for a subscriber that
/// has this many unread.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// The objects a watch applies, read from its store when taken: an object
/// deleted before it was read is skipped (see [`shared_watch`]).
pub struct Subscriber<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    rx: tokio::sync::mpsc::Receiver<ObjectRef<K>>,
    store: Store<K>,
}

impl<K> Stream for Subscriber<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    type Item = Arc<K>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Arc<K>>> {
        loop {
            match std::task::ready!(self.rx.poll_recv(cx)) {
                None => return std::task::Poll::Ready(None),
                Some(object) => {
                    if let Some(found) = self.store.get(&object) {
                        return std::task::Poll::Ready(Some(found));
                    }
                    // Deleted since: read on (a `Pending` here would ask
                    // nobody to wake this stream again).
                }
            }
        }
    }
}

/// A watch failure with no answer from the API behind it (connect, TLS,
/// timeout), as opposed to an error answer.
fn watch_error_is_transport(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => !matches!(e, kube::Error::Api(_)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{slim_finished_task, strip_pod, strip_task, task_output_stripped};
    use crate::crd::AgentTask;
    use crate::crd::TaskPhase;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::core::v1::Pod;
    use kube::{Client, ResourceExt};

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(store: &Store<ConfigMap>) -> Vec<String> {
        let mut n: Vec<String> = store.state().iter().map(|c| c.name_any()).collect();
        n.sort();
        n
    }

    #[test]
    fn the_first_list_fills_the_store_as_it_arrives_and_a_relist_swaps_whole() {
        use watcher::Event::{Init, InitApply, InitDone};
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let mut first = FirstList::new(FirstListAs::Arriving);
        let mut write = |e| first.write(&mut writer, e).1;
        assert_eq!(write(Init), Fill::No);
        assert_eq!(write(InitApply(cm("a"))), Fill::Object, "applied at once");
        assert_eq!(names(&reader), ["a"], "seen before the list ends");
        assert_eq!(write(InitApply(cm("b"))), Fill::Object);
        assert_eq!(
            write(InitDone),
            Fill::End,
            "its end: the followers saw it all"
        );
        assert_eq!(names(&reader), ["a", "b"], "the end does not empty it");
        // A relist (410): aside until its end, then swapped in whole.
        write(Init);
        assert_eq!(write(InitApply(cm("b"))), Fill::No);
        assert_eq!(names(&reader), ["a", "b"]);
        assert_eq!(
            write(InitDone),
            Fill::No,
            "the followers are told of the relist"
        );
        assert_eq!(names(&reader), ["b"], "what the relist lacks goes");
    }

    #[test]
    fn a_first_list_started_again_is_taken_whole_so_nothing_stale_stays() {
        use watcher::Event::{Init, InitApply, InitDone};
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let mut first = FirstList::new(FirstListAs::Arriving);
        let mut write = |e| first.write(&mut writer, e).1;
        write(Init);
        write(InitApply(cm("gone")));
        // The list failed part way; the watcher lists again.
        write(Init);
        assert_eq!(write(InitApply(cm("kept"))), Fill::No);
        assert_eq!(write(InitDone), Fill::No);
        assert_eq!(names(&reader), ["kept"]);
    }

    #[tokio::test]
    async fn a_store_filled_as_it_arrives_for_a_controller_is_ready_at_its_lists_end_only() {
        use watcher::Event::{Init, InitApply, InitDone};
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let mut first = FirstList::new(FirstListAs::ArrivingReady);
        let ready = |reader: Store<ConfigMap>| async move {
            tokio::time::timeout(Duration::from_millis(200), reader.wait_until_ready())
                .await
                .is_ok()
        };
        assert_eq!(first.write(&mut writer, Init).1, Fill::No);
        assert_eq!(first.write(&mut writer, InitApply(cm("a"))).1, Fill::Object);
        assert_eq!(first.write(&mut writer, InitApply(cm("b"))).1, Fill::Object);
        assert_eq!(names(&reader), ["a", "b"], "seen before the list ends");
        assert!(!ready(reader.clone()).await, "not ready mid-list");
        assert_eq!(first.write(&mut writer, InitDone).1, Fill::End);
        assert_eq!(names(&reader), ["a", "b"], "the end keeps them all");
        assert!(ready(reader.clone()).await, "ready at the end");
        // A relist is taken whole, as ever.
        first.write(&mut writer, Init);
        assert_eq!(first.write(&mut writer, InitApply(cm("b"))).1, Fill::No);
        assert_eq!(names(&reader), ["a", "b"]);
        assert_eq!(first.write(&mut writer, InitDone).1, Fill::No);
        assert_eq!(names(&reader), ["b"]);
    }

    #[test]
    fn a_cached_task_keeps_no_output_but_says_it_had_one() {
        let task = |status: serde_json::Value| -> AgentTask {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": "t", "namespace": "ns"},
                "spec": {"pool": "p"},
                "status": status,
            }))
            .expect("task")
        };
        let mut kept = task(serde_json::json!({"phase": "Failed", "outputTail": "x".repeat(4000)}));
        strip_task(&mut kept);
        let tail = kept.status.as_ref().and_then(|s| s.output_tail.as_ref());
        assert_eq!(tail.map(String::as_str), Some(""));
        assert_eq!(tail.map(String::capacity), Some(0), "its bytes are freed");
        assert!(task_output_stripped(&kept));
        // Everything else is as listed.
        assert_eq!(kept.phase(), TaskPhase::Failed);
        let mut none = task(serde_json::json!({"phase": "Running"}));
        strip_task(&mut none);
        assert_eq!(
            none.status.as_ref().and_then(|s| s.output_tail.clone()),
            None
        );
        assert!(!task_output_stripped(&none));
    }

    #[test]
    fn a_finished_task_slimmed_keeps_what_retention_and_metrics_read_and_says_so() {
        let task = |status: serde_json::Value| -> AgentTask {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": "t", "namespace": "ns", "uid": "u-1",
                             "resourceVersion": "7", "labels": {"team": "a"},
                             "creationTimestamp": "2026-12-01T10:00:00Z"},
                "spec": {"pool": "p", "operation": "plan", "command": ["terraform", "plan"],
                         "args": ["-no-color"], "image": "tf:1", "cancel": true,
                         "env": [{"name": "TF_IN_AUTOMATION", "value": "1"}]},
                "status": status,
            }))
            .expect("task")
        };
        let status = serde_json::json!({
            "phase": "Failed", "attempts": 2, "exitCode": 3, "agent": "agent-7",
            "job": "t-job", "message": "exited with 3",
            "claimedAt": "2026-12-01T10:00:01Z", "startedAt": "2026-12-01T10:00:02Z",
            "finishedAt": "2026-12-01T10:01:00Z",
            "conditions": [{"type": "Unclaimed", "status": "False", "reason": "Claimed",
                            "message": "claimed", "lastTransitionTime": "2026-12-01T10:00:01Z"}],
            "output": {"configMap": "t-output-2", "bytes": 10, "lines": 1, "lastLine": "x"},
        });
        let whole = task(status.clone());
        let mut slim = whole.clone();
        slim_finished_task(&mut slim);
        // Kept: the metadata whole, the pool and cancel mark, the phase,
        // counts and times.
        assert_eq!(slim.metadata, whole.metadata);
        assert_eq!((slim.spec.pool.as_str(), slim.spec.cancel), ("p", true));
        let (s, w) = (
            slim.status.as_ref().expect("status"),
            whole.status.as_ref().expect("status"),
        );
        assert_eq!(
            (s.phase, s.attempts, s.exit_code),
            (TaskPhase::Failed, 2, Some(3))
        );
        assert_eq!(
            (&s.claimed_at, &s.started_at, &s.finished_at),
            (&w.claimed_at, &w.started_at, &w.finished_at)
        );
        // Gone: the text nothing decides on.
        assert!(
            slim.spec.command.is_empty() && slim.spec.args.is_empty() && slim.spec.env.is_empty()
        );
        assert_eq!((&slim.spec.image, &slim.spec.operation), (&None, &None));
        assert_eq!((&s.agent, &s.job, &s.message), (&None, &None, &None));
        assert!(s.conditions.is_empty() && s.history.is_empty() && s.output.is_none());
        // And it says so, as a stripped output does, though it had none in
        // its status: whoever writes or records it reads the API's copy.
        assert!(!task_output_stripped(&whole));
        assert!(task_output_stripped(&slim));
        // A task not finished is only stripped of its output.
        for phase in ["Pending", "Scheduled", "Running"] {
            let mut st = status.clone();
            st["phase"] = phase.into();
            let mut live = task(st);
            let before = live.clone();
            slim_finished_task(&mut live);
            assert_eq!(live, before, "{phase}");
        }
    }

    /// A client answering a list of `a` (version 10) and, from version 10,
    /// a watch that adds `x`, deletes it, adds `y0`..`y{ys-1}`, then stays
    /// open saying nothing (later watches too).
    fn churning_client(ys: usize) -> Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let uri = request.uri().to_string();
            let map = |name: &str, version: usize| {
                format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{version}"}}}}"#
                )
            };
            let lines: Vec<String> = if !uri.contains("watch=") {
                vec![format!(
                    r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"10"}},"items":[{}]}}"#,
                    map("a", 3)
                )]
            } else if uri.contains("resourceVersion=10&") || uri.ends_with("resourceVersion=10") {
                let mut lines = vec![
                    format!(r#"{{"type":"ADDED","object":{}}}"#, map("x", 11)),
                    format!(r#"{{"type":"DELETED","object":{}}}"#, map("x", 12)),
                ];
                lines.extend((0..ys).map(|i| {
                    format!(
                        r#"{{"type":"ADDED","object":{}}}"#,
                        map(&format!("y{i}"), 13 + i)
                    )
                }));
                lines.into_iter().map(|l| l + "\n").collect()
            } else {
                Vec::new()
            };
            let watch = uri.contains("watch=");
            let chunks = futures::stream::iter(
                lines
                    .into_iter()
                    .map(|l| Ok::<_, std::io::Error>(axum::body::Bytes::from(l))),
            );
            let body = if watch {
                axum::body::Body::from_stream(chunks.chain(futures::stream::pending()))
            } else {
                axum::body::Body::from_stream(chunks)
            };
            let response = http::Response::builder()
                .status(200)
                .body(body)
                .expect("a valid response");
            async move { Ok::<_, std::convert::Infallible>(response) }
        });
        Client::new(service, "default")
    }

    /// The freeze of issue 27: an object applied and deleted before a
    /// subscriber read it stalled kube-runtime's shared subscriber for good
    /// (polled inside `select_all`, as the Controller's triggers are), and
    /// once its buffer was full the watch itself stopped: the store kept
    /// what it had while everything said synced.
    #[tokio::test]
    async fn a_subscriber_reads_on_past_an_object_deleted_before_it_was_read() {
        use k8s_openapi::api::core::v1::ConfigMap;
        const YS: usize = 3 * SUBSCRIBER_BUFFER;
        let api: Api<ConfigMap> = Api::namespaced(churning_client(YS), "default");
        let mut tasks = JoinSet::new();
        let cancel = CancellationToken::new();
        let report: WatchHealth = Arc::new(|_| {});
        let (store, subscribers) = shared_watch(
            api,
            watcher::Config::default(),
            (keep_all, &[], FirstListAs::Arriving),
            report,
            Changes::default(),
            WatchCell::detached("ConfigMap"),
            1,
            Vec::new(),
            cancel.clone(),
            &mut tasks,
        );
        let named = |name: &str| ObjectRef::<ConfigMap>::new(name).within("default");
        // Nobody reads until `x` is gone from the store (a busy reader).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while store.get(&named("y0")).is_none() {
            assert!(tokio::time::Instant::now() < deadline, "y0 never arrived");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(store.get(&named("x")).is_none());
        let mut triggers =
            futures::stream::select_all(subscribers.into_iter().map(StreamExt::boxed));
        let mut read = Vec::new();
        let last = format!("y{}", YS - 1);
        while read.last() != Some(&last) {
            let next = tokio::time::timeout(Duration::from_secs(30), triggers.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "the subscriber stopped after {} objects (last {:?}); the store holds {}",
                        read.len(),
                        read.last(),
                        store.state().len()
                    )
                })
                .expect("the subscriber never ends");
            read.push(next.name_any());
        }
        assert_eq!(read.first().map(String::as_str), Some("a"));
        assert!(
            !read.contains(&"x".to_owned()),
            "x was deleted before it was read"
        );
        assert_eq!(store.state().len(), YS + 1, "a and every y");
        cancel.cancel();
    }

    #[test]
    fn a_cached_pod_keeps_what_is_read_and_drops_the_bulk() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a-1", "labels": {"agentdeck.dev/pool": "a"}},
            "spec": {
                "nodeName": "node-1",
                "containers": [{
                    "name": "agent", "image": "img:1", "command": ["agentdeck", "agent"],
                    "ports": [{"name": "health", "containerPort": 8081}],
                    "env": [{"name": "X", "value": "1"}],
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8081}}
                }],
                "volumes": [{"name": "tmp", "emptyDir": {}}],
                "tolerations": [{"key": "k", "operator": "Exists"}]
            },
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "containerStatuses": [{"name": "agent", "ready": true, "restartCount": 2,
                                              "image": "img:1", "imageID": ""}]}
        }))
        .expect("pod");
        let before = pod.clone();
        strip_pod(&mut pod);
        let spec = pod.spec.as_ref().expect("spec");
        let c = &spec.containers[0];
        assert_eq!(spec.node_name.as_deref(), Some("node-1"));
        assert_eq!(
            (c.name.as_str(), c.image.as_deref()),
            ("agent", Some("img:1"))
        );
        assert_eq!(c.ports, before.spec.as_ref().unwrap().containers[0].ports);
        assert_eq!(
            c.command,
            before.spec.as_ref().unwrap().containers[0].command
        );
        assert_eq!(pod.status, before.status);
        assert_eq!(pod.metadata, before.metadata);
        assert!(spec.volumes.is_none() && spec.tolerations.is_none());
        assert!(c.env.is_none() && c.volume_mounts.is_none() && c.readiness_probe.is_none());
    }
}
