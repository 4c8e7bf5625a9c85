//! The terminal and the event loop: crossterm events, a clock tick, a
//! render throttle (at most 60 frames a second, and none when nothing
//! changed), and messages from the background tasks that feed the app —
//! the snapshot builder (woken by the cluster view's change signal), the
//! status probe, the log streamer, the YAML loader and the action runner.
//! The terminal is restored on every exit path, panics included (a hook
//! of our own: ratatui's prints with `eprintln!`, which panics — and so
//! aborts, leaving what the console started running — once the terminal
//! is gone).

use std::future::Future;
use std::io::{BufWriter, Stdout, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::crd::{AgentTask, TaskPhase};
use crossterm::event::{Event as TermEvent, EventStream};
use futures::{AsyncBufReadExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::LogParams;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::app::rows::{Changes, Delta, LogSource, RowBuilder, Sources};
use crate::app::{
    ActionRequest, App, AppOptions, ClusterStatus, Command, Msg, ObjectKey, Refusal, Role,
    StreamId, WatchState,
};
use crate::cluster::Connection;
use crate::config::Config;
use crate::controller::{self, ClusterView, ControllerHandle, StartOptions};
use crate::health::FreshnessThresholds;
use crate::ui::{self, Theme};

pub mod actions;
pub mod fleet;
pub mod jobs;
pub mod queue;
mod suspend;

/// Carries out (or previews) an action; `Ok` is the outcome in words (for
/// a preview: the impact, one line each).
pub type ActionFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;
/// The action layer the console calls ([`actions::ops_runner`] plugs the
/// ops module in here).
pub type ActionRunner =
    Arc<dyn Fn(Client, ActionRequest, ActionMode) -> ActionFuture + Send + Sync>;

/// What the runner is asked to do with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionMode {
    /// Server-side dry run: what it would change, in words.
    Preview,
    /// Do it (and audit it).
    Apply,
}

/// What the console runs with.
pub struct ConsoleSetup {
    /// A support bundle's console (`--bundle`): its clock, health and
    /// audit trail. `None`: a live cluster.
    pub replay: Option<ReplaySetup>,
    /// The contexts to watch: one, or several (a fleet, see [`fleet`]).
    pub contexts: Vec<ContextSetup>,
    /// Contexts of several that could not be used, and why: shown as
    /// disconnected.
    pub unusable: Vec<(String, String)>,
    pub config: Config,
    pub app: AppOptions,
    pub theme: Theme,
    pub all_namespaces: bool,
}

/// What the console on a support bundle reads from the bundle rather than
/// the cluster: its clock stands at the time the bundle was taken (ages
/// read as they did then), the agents' health is as the bundle recorded it
/// (nothing is probed), and the audit trail is the bundle's.
#[derive(Clone, Debug)]
pub struct ReplaySetup {
    pub taken_at: Timestamp,
    pub health: Vec<controller::prober::AgentSample>,
    /// The bundle's audit trail, written out where the audit view reads it.
    pub audit_path: Option<std::path::PathBuf>,
    /// The pools' last hour, as the bundle recorded it.
    pub history: Option<serde_json::Value>,
}

/// The console's clock: now, or (on a bundle) the moment it was taken.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clock(Option<Timestamp>);

impl Clock {
    /// A clock that stands at `at`.
    pub fn frozen(at: Timestamp) -> Clock {
        Clock(Some(at))
    }

    pub fn now(self) -> Timestamp {
        self.0.unwrap_or_else(Timestamp::now)
    }
}

impl ConsoleSetup {
    fn clock(&self) -> Clock {
        self.replay
            .as_ref()
            .map_or_else(Clock::default, |r| Clock::frozen(r.taken_at))
    }
}

/// One kube context of the console.
pub struct ContextSetup {
    /// Its name in the kubeconfig (what the audit records and, with
    /// several, what the CONTEXT column shows).
    pub name: String,
    pub conn: Connection,
    /// `None`: actions answer that they are not available in this build.
    pub actions: Option<ActionRunner>,
}

/// Shortest time between two frames drawn for data (60 fps); a key is
/// answered with a frame at once.
pub const FRAME: Duration = Duration::from_millis(16);
/// Shortest time between two snapshots once the watches are synced (before,
/// [`FRAME`], so the first lists show as soon as they are in); longer when
/// building one is slow.
pub const SNAPSHOT_GAP: Duration = Duration::from_millis(50);

/// The terminal the console draws on. Its output is buffered, so a frame
/// leaves in one write (`Terminal::draw` flushes at its end) instead of one
/// per kilobyte through stdout's line buffer: each of those woke the
/// terminal (or tmux) to take part of a frame.
pub type Term = Terminal<CrosstermBackend<BufWriter<Stdout>>>;

/// Room for a whole frame: a full redraw of 160×48 in colour is 10–30 KiB
/// (a larger one still goes out whole, in a few writes).
const FRAME_BYTES: usize = 256 * 1024;

/// A terminal over `out` that sends each frame in one write.
fn terminal_over<W: Write>(out: W) -> std::io::Result<Terminal<CrosstermBackend<BufWriter<W>>>> {
    Terminal::new(CrosstermBackend::new(BufWriter::with_capacity(
        FRAME_BYTES,
        out,
    )))
}

/// Raw mode, the alternate screen and the panic hook that undoes both,
/// then a terminal over buffered output.
fn open_terminal() -> std::io::Result<Term> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
    });
    crossterm::terminal::enable_raw_mode()?;
    crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen)?;
    terminal_over(std::io::stdout())
}

/// Leaves raw mode and the alternate screen and shows the cursor. A
/// terminal that is gone (its window closed: SIGHUP, then EIO) is not an
/// error here: nothing is printed and nothing panics, so the console still
/// stops what it started.
pub(crate) fn restore_terminal() {
    let _ = crossterm::terminal::disable_raw_mode();
    let _ = crossterm::execute!(
        std::io::stdout(),
        crossterm::terminal::LeaveAlternateScreen,
        crossterm::cursor::Show
    );
}

/// Opens the console and runs it until the user quits (or `cancel`).
pub async fn run(setup: ConsoleSetup, cancel: CancellationToken) -> std::io::Result<()> {
    tracing::info!("console starting");
    let read_only = setup.app.read_only;
    // Each context: its own controller (leader where it holds that
    // cluster's Lease) and workers.
    let mut handles = Vec::new();
    let mut members = Vec::new();
    for context in &setup.contexts {
        let handle = Arc::new(controller::start_with(
            context.conn.clone(),
            &setup.config,
            StartOptions {
                watch_only: read_only || setup.all_namespaces,
                all_namespaces: setup.all_namespaces,
                replay: setup.replay.is_some(),
            },
            cancel.clone(),
        ));
        if let Some(r) = &setup.replay {
            handle.view().health.load(r.health.clone());
        }
        let (workers, rx) = Workers::start(&setup, context, handle.clone(), cancel.clone());
        members.push((context.name.clone(), workers, rx));
        handles.push(handle);
    }
    let workers = fleet::Fleet::new(members, setup.unusable.clone(), cancel.clone());
    let clock = setup.clock();
    let mut opts = setup.app;
    opts.all_namespaces |= setup.all_namespaces;
    let mut app = App::new(opts, clock.now());
    if let Some(h) = setup.replay.as_ref().and_then(|r| r.history.as_ref()) {
        app.pool_history = crate::app::history::History::import(h);
    }
    // The event loop has a thread of its own: a key is answered even while
    // every worker of the main runtime is busy (a relist of thousands of
    // objects being decoded, reconciles, probes).
    let theme = setup.theme;
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("agentdeck-ui".into())
        .spawn(move || {
            let r = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|rt| rt.block_on(ui_loop(&mut app, &theme, workers, clock)));
            let _ = done.send(r);
        })?;
    let result = result.await.unwrap_or_else(|_| {
        Err(std::io::Error::other(
            "the console's event loop ended without an answer",
        ))
    });
    cancel.cancel();
    // The terminal is back already; do not hold the user up for long.
    let joins = futures::future::join_all(handles.iter().map(|h| h.join()));
    let _ = tokio::time::timeout(Duration::from_secs(2), joins).await;
    result
}

/// The background tasks of one context and the channels to them.
pub struct Workers {
    logs: watch::Sender<Option<(StreamId, LogSource, bool)>>,
    yaml: mpsc::Sender<ObjectKey>,
    actions: queue::ActionQueue,
    jobs: jobs::Jobs,
    client: Client,
    /// A shell asked for, run by the event loop with the console suspended.
    shell: Option<crate::app::ShellRequest>,
    /// The watches' board, to ask refused watches again.
    board: controller::watches::WatchBoard,
    /// Asks the rights worker to ask the API again.
    rights_asked: Arc<tokio::sync::Notify>,
}

impl Workers {
    /// Starts the snapshot builder, status probe, log streamer, YAML loader
    /// and action runner of `context` over its controller's view; the
    /// messages for the app come out of the receiver.
    pub fn start(
        setup: &ConsoleSetup,
        context: &ContextSetup,
        handle: Arc<ControllerHandle>,
        cancel: CancellationToken,
    ) -> (Workers, mpsc::Receiver<Msg>) {
        let (tx, rx) = mpsc::channel(256);
        let client = context.conn.client.clone();
        let view = handle.view();
        let handle_board = view.watches.clone();
        let (shown, shown_rx) = watch::channel(false);
        let (events, event_feed) = watch_events(
            &context.conn,
            setup.all_namespaces,
            &setup.config,
            (view.changes.clone(), view.watches.cell(LATE_KIND)),
            shown_rx,
            cancel.clone(),
        );
        let thresholds = controller::prober::thresholds(&setup.config.health_probe);
        tokio::spawn(snapshots(
            view.clone(),
            (events.clone(), event_feed),
            handle.clone(),
            (thresholds, setup.config.long_running_task()),
            (tx.clone(), setup.clock()),
            shown,
            cancel.clone(),
        ));
        let read_only = setup.app.read_only.then(|| match &setup.app.bundle {
            Some(_) => "a support bundle: nothing here acts on a cluster".to_owned(),
            None => "--read-only".to_owned(),
        });
        tokio::spawn(status(
            client.clone(),
            handle.clone(),
            (read_only, setup.all_namespaces),
            tx.clone(),
            cancel.clone(),
        ));
        let rights_asked = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(rights(
            client.clone(),
            (!setup.all_namespaces).then(|| context.conn.namespace.clone()),
            setup.config.controller_namespace.clone(),
            // Rows of a console of one context name none.
            if setup.contexts.len() > 1 {
                context.name.clone()
            } else {
                String::new()
            },
            (tx.clone(), rights_asked.clone()),
            cancel.clone(),
        ));
        if !setup.all_namespaces {
            tokio::spawn(pools_elsewhere(
                client.clone(),
                handle.clone(),
                context.conn.namespace.clone(),
                tx.clone(),
                cancel.clone(),
            ));
        }
        let (logs, logs_rx) = watch::channel(None);
        tokio::spawn(log_streamer(
            client.clone(),
            view.clone(),
            logs_rx,
            (setup.app.log_capacity, setup.replay.is_some()),
            tx.clone(),
            cancel.clone(),
        ));
        let (yaml, yaml_rx) = mpsc::channel(4);
        tokio::spawn(yaml_loader(
            client.clone(),
            view,
            events,
            yaml_rx,
            tx.clone(),
            cancel.clone(),
        ));
        let actions = queue::ActionQueue::start(
            client.clone(),
            context.actions.clone(),
            tx.clone(),
            cancel.clone(),
        );
        let jobs = jobs::Jobs::start(
            client.clone(),
            jobs::JobSettings {
                context: Some(context.name.clone()).filter(|c| !c.is_empty()),
                controller_namespace: Some(setup.config.controller_namespace.clone()),
                bundle_dir: std::env::current_dir().unwrap_or_default(),
                audit_path: setup.replay.as_ref().and_then(|r| r.audit_path.clone()),
            },
            tx,
            cancel,
        );
        let workers = Workers {
            logs,
            yaml,
            actions,
            jobs,
            client,
            shell: None,
            board: handle_board,
            rights_asked,
        };
        (workers, rx)
    }

    /// Hands a command to its worker; `false` for Quit.
    pub fn dispatch(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Quit => return false,
            // Routed by the fleet; here, the context is this one.
            Command::In { command, .. } => return self.dispatch(*command),
            Command::StreamLogs {
                id,
                source,
                previous,
            } => {
                let _ = self.logs.send(Some((id, source, previous)));
            }
            Command::StopLogs => {
                let _ = self.logs.send(None);
            }
            // Newest wins: a full queue means the user already moved on.
            Command::LoadYaml(key) => {
                let _ = self.yaml.try_send(key);
            }
            // Never dropped (see `queue`).
            Command::Action(req) => self.actions.apply(req),
            Command::PreviewAction(req) => self.actions.preview(req),
            Command::LoadAudit => self.jobs.load_audit(),
            Command::TakeBundle {
                namespace,
                pool,
                history,
            } => self.jobs.bundle(namespace, pool, history),
            Command::CreateDebugPod { namespace, pod } => self.jobs.debug_pod(namespace, pod),
            Command::Shell(req) => self.shell = Some(req),
            Command::Recheck => {
                self.board.recheck();
                self.rights_asked.notify_one();
            }
        }
        true
    }
}

async fn ui_loop(
    app: &mut App,
    theme: &Theme,
    mut workers: fleet::Fleet,
    clock: Clock,
) -> std::io::Result<()> {
    let mut terminal = open_terminal()?;
    let result = async {
        let size = terminal.size()?;
        app.update(Msg::Resize(size.width, size.height));
        let mut events = EventStream::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut dirty = true;
        // A key was handled since the last frame: draw at once.
        let mut input = false;
        let mut last_draw: Option<Instant> = None;
        // When the first key since the last frame was taken, and what
        // updating the app for the messages since took.
        let mut key_at: Option<Instant> = None;
        let mut updating = Duration::ZERO;
        // SIGTERM, SIGINT from outside, or SIGHUP (its terminal closed)
        // end the console cleanly too, stopping what it started.
        let stop = async {
            let hangup = async {
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    Err(_) => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = crate::signal::terminated() => {}
                _ = hangup => {}
            }
        };
        tokio::pin!(stop);
        loop {
            if dirty && (input || last_draw.is_none_or(|t| t.elapsed() >= FRAME)) {
                let drawing = Instant::now();
                terminal.draw(|f| ui::draw(f, app, theme))?;
                last_draw = Some(Instant::now());
                if let Some(at) = key_at.take() {
                    tracing::trace!(
                        answered_us = at.elapsed().as_micros() as u64,
                        update_us = updating.as_micros() as u64,
                        draw_us = drawing.elapsed().as_micros() as u64,
                        "key answered"
                    );
                }
                updating = Duration::ZERO;
                dirty = false;
                input = false;
            }
            let wait = last_draw.map_or(Duration::ZERO, |t| FRAME.saturating_sub(t.elapsed()));
            let msg = tokio::select! {
                ev = events.next() => match ev {
                    Some(Ok(TermEvent::Key(k))) => Msg::Key(k),
                    Some(Ok(TermEvent::Resize(w, h))) => Msg::Resize(w, h),
                    Some(Ok(TermEvent::Paste(p))) => Msg::Paste(p),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e),
                    None => return Ok(()),
                },
                m = workers.rx.recv() => match m {
                    Some(m) => m,
                    None => continue,
                },
                _ = tick.tick() => Msg::Tick(clock.now()),
                _ = &mut stop => return Ok(()),
                _ = tokio::time::sleep(wait), if dirty => continue,
            };
            let woke = Instant::now();
            if matches!(msg, Msg::Key(_)) && key_at.is_none() {
                key_at = Some(woke);
            }
            input |= matches!(msg, Msg::Key(_) | Msg::Paste(_) | Msg::Resize(..));
            let mut pending = vec![msg];
            // Take whatever else is ready before drawing once.
            while pending.len() < 64 {
                match workers.rx.try_recv() {
                    Ok(m) => pending.push(m),
                    Err(_) => break,
                }
            }
            for m in pending {
                if let Msg::Resize(..) = m {
                    terminal.autoresize()?;
                }
                for cmd in app.update(m) {
                    if !workers.dispatch(cmd) {
                        return Ok(());
                    }
                }
            }
            if let Some((client, req)) = workers.take_shell() {
                suspend::shell(&mut terminal, &mut events, app, &client, req).await?;
            }
            updating += woke.elapsed();
            dirty = true;
        }
    }
    .await;
    // ratatui's Drop shows a hidden cursor and prints (panicking on a
    // closed stderr) when it cannot: a terminal that is gone is let go.
    if terminal.show_cursor().is_err() {
        std::mem::forget(terminal);
    }
    restore_terminal();
    result
}

/// A reflector of Events in the watched namespaces, bumping `changes`.
///
/// The list starts once the first screen of synced rows is built (`shown`
/// turns true): events are a view away, and their pages would compete with
/// the lists and the rows that screen shows.
fn watch_events(
    conn: &Connection,
    all: bool,
    config: &Config,
    (changes, cell): (controller::Changes, controller::watches::WatchCell),
    mut shown: watch::Receiver<bool>,
    cancel: CancellationToken,
) -> (Store<Event>, controller::feed::ChangeFeed) {
    let api: Api<Event> = if all || config.namespaces.len() > 1 {
        Api::all(conn.client.clone())
    } else {
        let ns = config.namespaces.first().unwrap_or(&conn.namespace);
        Api::namespaced(conn.client.clone(), ns)
    };
    let (reader, writer) = reflector::store::<Event>();
    let stream = controller::listwatch::watcher_reporting(api, watcher::Config::default(), cell)
        .default_backoff()
        .modify(|e| e.meta_mut().managed_fields = None)
        .reflect(writer);
    let feed = controller::feed::ChangeFeed::default();
    let told = feed.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = shown.wait_for(|shown| *shown) => if r.is_err() { return },
        }
        tokio::pin!(stream);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                n = stream.next() => match n {
                    Some(Ok(e)) => {
                        // Told before the bump, so a reader woken by it
                        // finds the change in the feed.
                        use controller::feed::Follower;
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
/// every [`SNAPSHOT_GAP`] or twice the time the last build took. `shown`
/// turns true once rows built from synced stores are sent.
async fn snapshots(
    view: ClusterView,
    (events, event_feed): (Store<Event>, controller::feed::ChangeFeed),
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
            tasks = snap.tasks.len(),
            agents = snap.agents.len(),
            rebuilt = builder.rebuilt,
            took_us = started.elapsed().as_micros() as u64,
            "rows built"
        );
        if tx.send(Msg::Snapshot(Arc::new(snap))).await.is_err() {
            return;
        }
        if whole {
            shown.send_if_modified(|shown| !std::mem::replace(shown, true));
        }
        let gap = if answered(&synced) {
            SNAPSHOT_GAP
        } else {
            FRAME
        };
        let gap = gap.max(started.elapsed() * 2);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(gap) => {}
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

/// Whether the rows are as whole as the API lets them be: every watch
/// listed, or refused (a forbidden kind never lists, and is not waited for).
fn answered(handle: &ControllerHandle) -> bool {
    handle.is_synced() || handle.view().watches.answered_but(LATE_KIND)
}

/// Longest time between two snapshots when nothing changes.
const CLOCK_REBUILD: Duration = Duration::from_secs(15);

/// What changed in the view since the console last looked, from the
/// feeds kept beside its stores (see `controller::feed`): a watch event
/// costs the rows it touches, not a pass over every object.
pub struct ViewChanges {
    view: ClusterView,
    events: Store<Event>,
    event_feed: controller::feed::ChangeFeed,
}

impl ViewChanges {
    /// Starts the view's feeds and `event_feed` (told by the watch behind
    /// `events`); the first take reads every store whole.
    pub fn new(
        view: ClusterView,
        events: Store<Event>,
        event_feed: controller::feed::ChangeFeed,
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
fn changes<K>(feed: &controller::feed::ChangeFeed, store: &Store<K>) -> Changes<K>
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

/// How often the API is asked for its version (latency, reachability).
const STATUS_EVERY: Duration = Duration::from_secs(3);

async fn status(
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
        if tx
            .send(Msg::Status(ClusterStatus {
                role,
                watch,
                latency,
                role_reason,
                loading,
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
async fn rights(
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
async fn pools_elsewhere(
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
            .is_some_and(|w| matches!(w.phase, controller::watches::Phase::Refused(_)));
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
            Err(e) => return Elsewhere::CannotLook(controller::listwatch::cause(&e)),
        }
    }
    let mut found: Vec<(String, usize)> = counts.into_iter().collect();
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Elsewhere::Found(found)
}

/// The kind whose watch starts after the first screen (events are a view
/// away): its first list is that view's loading, not the console's sync.
const LATE_KIND: &str = "Event";

/// The header's watch state from every watch's, the kinds still on their
/// first list, and the kinds the API refused.
fn watch_state(
    watches: &std::collections::BTreeMap<String, controller::watches::WatchStatus>,
    last_ask: Option<&Result<Duration, String>>,
) -> (WatchState, Vec<String>, Vec<(String, Refusal)>) {
    use controller::watches::Phase;
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
fn watch_trouble(kind: &str, w: &controller::watches::WatchStatus) -> WatchState {
    let why = w.reason.as_deref().unwrap_or("");
    match w.phase {
        controller::watches::Phase::Failing => {
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
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    let text = cur.to_string();
    if text.is_empty() { e.to_string() } else { text }
}

/// Lines batched per message, and how long a partial batch may wait.
const LOG_BATCH: usize = 512;
const LOG_FLUSH: Duration = Duration::from_millis(40);

async fn log_streamer(
    client: Client,
    view: ClusterView,
    mut rx: watch::Receiver<Option<(StreamId, LogSource, bool)>>,
    // Lines kept; whether the logs are a bundle's (they end where it was taken).
    (capacity, collected): (usize, bool),
    tx: mpsc::Sender<Msg>,
    cancel: CancellationToken,
) {
    let mut current: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            r = rx.changed() => if r.is_err() { break },
        }
        if let Some(h) = current.take() {
            h.abort();
        }
        let req = rx.borrow_and_update().clone();
        if let Some((id, source, previous)) = req {
            current = Some(tokio::spawn(stream_logs(
                client.clone(),
                view.clone(),
                id,
                source,
                previous,
                (capacity, collected),
                tx.clone(),
            )));
        }
    }
    if let Some(h) = current {
        h.abort();
    }
}

/// What was kept of `source` once its pod is gone: the task's own output
/// tail, else the pod's final log tail (lines given back with the
/// source's prefix, which the log view strips).
async fn kept_output(client: &Client, source: &LogSource) -> Option<crate::ops::kept::Kept> {
    use crate::ops::kept;
    if let Some(task) = &source.task
        && let Ok(Some(mut found)) = kept::task_output(client, &source.namespace, task).await
    {
        if let Some(prefix) = &source.prefix {
            for line in &mut found.lines {
                line.insert_str(0, prefix);
            }
        }
        return Some(found);
    }
    kept::pod_tail(
        client,
        &source.namespace,
        &source.pod,
        source.container.as_deref(),
    )
    .await
    .ok()
    .flatten()
}

/// Why the view shows what was kept rather than the pod's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeptBecause {
    /// The pod is gone.
    PodGone,
    /// The pod's log has none of the task's lines any more (an agent that
    /// ran many tasks since: the tail read does not reach back to them).
    AgedOut,
    /// The pod's log could not be read (why).
    Unreadable(String),
}

/// The line that ends a view of what was kept (`from`: where it came
/// from, `None`: nothing was kept). It always starts by saying where the
/// lines come from.
pub fn kept_reason(pod: &str, because: &KeptBecause, from: Option<&str>) -> String {
    let why = match because {
        KeptBecause::PodGone => "the pod is gone".to_owned(),
        KeptBecause::AgedOut => format!("its lines are no longer in the log of pod {pod}"),
        KeptBecause::Unreadable(why) => format!("cannot read the log of pod {pod}: {why}"),
    };
    match (from, because) {
        (Some(from), _) => format!("from the kept output ({why}): {from}"),
        (None, KeptBecause::PodGone) => {
            format!("pod {pod} is gone and nothing of its output was kept")
        }
        (None, KeptBecause::AgedOut) => format!("{why}, and nothing of its output was kept"),
        (None, KeptBecause::Unreadable(_)) => why,
    }
}

/// The line that ends a task's output: its own end, said with its phase.
pub fn task_end_line(task: &str, phase: TaskPhase, at: Option<Timestamp>) -> String {
    match at {
        Some(at) => format!(
            "task {task} {} at {}; end of its output",
            phase.as_str(),
            at.strftime("%H:%M:%S UTC")
        ),
        None => format!("task {task} {}; end of its output", phase.as_str()),
    }
}

/// The task's phase and end time, once it is finished.
fn finished_task(view: &ClusterView, source: &LogSource) -> Option<(TaskPhase, Option<Timestamp>)> {
    let name = source.task.as_deref()?;
    let r = reflector::ObjectRef::<AgentTask>::new(name).within(&source.namespace);
    let task = view.tasks.get(&r)?;
    let st = task.status.as_ref()?;
    st.phase
        .is_finished()
        .then(|| (st.phase, st.finished_at.as_ref().map(|t| t.0)))
}

/// Whether `pod` is gone: the store says so first (no request while it
/// is there), the API confirms.
/// Whether the view holds `source`'s pod as being deleted.
fn pod_going(view: &ClusterView, source: &LogSource) -> bool {
    let r = reflector::ObjectRef::<controller::pod::CachedPod>::new(&source.pod)
        .within(&source.namespace);
    view.pods
        .get(&r)
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
}

async fn pod_gone(view: &ClusterView, pods: &Api<Pod>, source: &LogSource, ask: bool) -> bool {
    let r = reflector::ObjectRef::<controller::pod::CachedPod>::new(&source.pod)
        .within(&source.namespace);
    if !ask && view.pods.get(&r).is_some() {
        return false;
    }
    matches!(pods.get_opt(&source.pod).await, Ok(None))
}

/// Sends what was kept of `source` and the line that says so.
async fn end_with_kept(
    client: &Client,
    tx: &mpsc::Sender<Msg>,
    id: StreamId,
    source: &LogSource,
    because: KeptBecause,
) {
    let kept = kept_output(client, source).await;
    let from = kept.as_ref().map(|k| k.from.clone());
    if let Some(kept) = kept {
        let _ = tx
            .send(Msg::LogLines {
                id,
                lines: kept.lines,
            })
            .await;
    }
    let reason = kept_reason(&source.pod, &because, from.as_deref());
    let _ = tx.send(Msg::LogEnded { id, reason }).await;
}

/// Longest line handed on whole: a longer one (a pod may print megabytes
/// without a newline) goes on in pieces of this size.
const MAX_LINE: usize = 64 * 1024;

/// How often a followed log looks whether its task finished or its pod
/// went (store reads; the API is asked only when the store says gone).
const LOG_CHECK: Duration = Duration::from_millis(250);
/// Once a task in a shared agent log is finished, how long its last lines
/// (printed before the agent reported the end) get to arrive.
const TASK_END_GRACE: Duration = Duration::from_millis(800);

/// Reads up to and including the next newline into `line`, or
/// [`MAX_LINE`] bytes of a longer one; `false` at the end of the stream.
/// Whatever was read stays in `line` if the future is dropped, so it can
/// be raced against timers.
async fn read_piece<R>(reader: &mut R, line: &mut Vec<u8>) -> std::io::Result<bool>
where
    R: futures::AsyncBufRead + Unpin,
{
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(!line.is_empty());
        }
        let room = MAX_LINE.saturating_sub(line.len()).max(1);
        let window = &buf[..buf.len().min(room)];
        let (take, whole) = match window.iter().position(|b| *b == b'\n') {
            Some(end) => (end + 1, true),
            None => (window.len(), line.len() + window.len() >= MAX_LINE),
        };
        line.extend_from_slice(&window[..take]);
        reader.consume_unpin(take);
        if whole {
            return Ok(true);
        }
    }
}

async fn stream_logs(
    client: Client,
    view: ClusterView,
    id: StreamId,
    source: LogSource,
    previous: bool,
    (capacity, collected): (usize, bool),
    tx: mpsc::Sender<Msg>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &source.namespace);
    // An agent's log mixes its tasks: read further back to find this one's.
    let tail = if source.prefix.is_some() {
        capacity * 10
    } else {
        capacity
    };
    // A finished task's output is all there: read it, do not wait for more.
    let done_at_open = finished_task(&view, &source);
    let follow = !previous && done_at_open.is_none();
    // Several tasks share this log (deployment mode): the pod lives on
    // after this task, so its end is the task's, not the container's.
    let shared = source.prefix.is_some() && source.container.is_none() && source.task.is_some();
    let params = LogParams {
        container: source.container.clone(),
        follow,
        previous,
        timestamps: true,
        tail_lines: Some(i64::try_from(tail).unwrap_or(i64::MAX)),
        ..LogParams::default()
    };
    let reader = match pods.log_stream(&source.pod, &params).await {
        Ok(r) => r,
        Err(e) => {
            let not_found = matches!(&e, kube::Error::Api(s) if s.code == 404);
            let because = if not_found || pod_gone(&view, &pods, &source, true).await {
                KeptBecause::PodGone
            } else {
                KeptBecause::Unreadable(match &e {
                    kube::Error::Api(s) => s.message.clone(),
                    other => root_cause(other),
                })
            };
            end_with_kept(&client, &tx, id, &source, because).await;
            return;
        }
    };
    let mut reader = std::pin::pin!(reader);
    let mut line = Vec::new();
    let mut batch = Vec::new();
    // Lines of this task (all lines without a prefix) seen so far.
    let mut own = 0usize;
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut task_end: Option<(tokio::time::Instant, String)> = None;
    let mut check = tokio::time::interval(LOG_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let far = || tokio::time::Instant::now() + Duration::from_secs(3600);
    // How the stream stopped: at its end, failed, or the pod went.
    let stopped: Result<bool, String> = loop {
        let flush_at = deadline.unwrap_or_else(far);
        let end_at = task_end.as_ref().map_or_else(far, |(at, _)| *at);
        tokio::select! {
            piece = read_piece(&mut reader, &mut line) => match piece {
                Ok(true) => {
                    let text = crate::app::logs::decode(&line);
                    line.clear();
                    if crate::app::logs::LogLine::kept_by(&text, true, source.prefix.as_deref()) {
                        own += 1;
                    }
                    batch.push(text);
                    deadline.get_or_insert_with(|| tokio::time::Instant::now() + LOG_FLUSH);
                    if batch.len() >= LOG_BATCH {
                        deadline = None;
                        if tx.send(Msg::LogLines { id, lines: std::mem::take(&mut batch) }).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(false) => break Ok(true),
                Err(e) => break Err(format!("log stream failed: {}", root_cause(&e))),
            },
            _ = tokio::time::sleep_until(flush_at), if deadline.is_some() => {
                deadline = None;
                if tx.send(Msg::LogLines { id, lines: std::mem::take(&mut batch) }).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(end_at), if task_end.is_some() => {
                let _ = tx.send(Msg::LogLines { id, lines: std::mem::take(&mut batch) }).await;
                let reason = task_end.take().map(|(_, r)| r).unwrap_or_default();
                let _ = tx.send(Msg::LogEnded { id, reason }).await;
                return;
            }
            _ = check.tick(), if follow && task_end.is_none() => {
                if shared && let Some((phase, at)) = finished_task(&view, &source) {
                    let name = source.task.as_deref().unwrap_or_default();
                    task_end = Some((
                        tokio::time::Instant::now() + TASK_END_GRACE,
                        task_end_line(name, phase, at),
                    ));
                } else if pod_gone(&view, &pods, &source, false).await {
                    break Ok(false);
                }
            }
        }
    };
    let _ = tx
        .send(Msg::LogLines {
            id,
            lines: std::mem::take(&mut batch),
        })
        .await;
    // Asked of the API, not the view: the stream of a deleted pod ends
    // before the watch has told the view, the more so on a busy machine.
    let gone = match stopped {
        Ok(false) => true,
        _ => pod_going(&view, &source) || pod_gone(&view, &pods, &source, true).await,
    };
    let finished = finished_task(&view, &source);
    let reason = match (gone, own, finished, stopped) {
        // Nothing of the task came from the pod: what was kept, if anything.
        (true, 0, _, _) => {
            return end_with_kept(&client, &tx, id, &source, KeptBecause::PodGone).await;
        }
        // None of the finished task's lines in the pod's log: read too little
        // of a long shared log, or it printed nothing at all.
        (false, 0, Some((phase, at)), _) if source.prefix.is_some() && !previous => {
            match kept_output(&client, &source).await {
                Some(kept) => {
                    let _ = tx
                        .send(Msg::LogLines {
                            id,
                            lines: kept.lines,
                        })
                        .await;
                    kept_reason(&source.pod, &KeptBecause::AgedOut, Some(&kept.from))
                }
                None => task_end_line(source.task.as_deref().unwrap_or_default(), phase, at),
            }
        }
        (true, _, Some((phase, at)), _) => format!(
            "{} (pod {} is gone)",
            task_end_line(source.task.as_deref().unwrap_or_default(), phase, at),
            source.pod
        ),
        (true, _, None, _) => format!(
            "pod {} is gone; the lines above were read from it before it went",
            source.pod
        ),
        (false, _, _, Err(why)) => why,
        (false, _, _, _) if previous => "end of the previous container's log".to_owned(),
        (false, _, Some((phase, at)), _) => {
            task_end_line(source.task.as_deref().unwrap_or_default(), phase, at)
        }
        (false, _, None, _) if collected => {
            "end of the log as collected when the bundle was taken".to_owned()
        }
        (false, _, None, _) => "the container ended; end of log".to_owned(),
    };
    let _ = tx.send(Msg::LogEnded { id, reason }).await;
}

async fn yaml_loader(
    client: Client,
    view: ClusterView,
    events: Store<Event>,
    mut rx: mpsc::Receiver<ObjectKey>,
    tx: mpsc::Sender<Msg>,
    cancel: CancellationToken,
) {
    loop {
        let key = tokio::select! {
            _ = cancel.cancelled() => return,
            k = rx.recv() => match k { Some(k) => k, None => return },
        };
        let text = tokio::select! {
            _ = cancel.cancelled() => return,
            text = object_yaml(&client, &view, &events, &key) => text,
        };
        if tx.send(Msg::Yaml { object: key, text }).await.is_err() {
            return;
        }
    }
}

/// The object as the YAML view shows it: pods and tasks as the API has
/// them (the caches keep less; the cached copy, said to be partial, when
/// the API does not answer), the rest from the stores.
pub async fn object_yaml(
    client: &Client,
    view: &ClusterView,
    events: &Store<Event>,
    key: &ObjectKey,
) -> String {
    match key.kind {
        // The cached pods keep only what is read (see `controller::pod`).
        "Pod" => {
            let cached = || find(&view.pods, key);
            let lacks =
                "with only the fields the console reads (no volumes, env, probes, resources)";
            api_yaml::<Pod>(client, key, cached, lacks).await
        }
        // The cached tasks keep no output (see `controller::strip_task`).
        "AgentTask" => {
            let cached = || {
                let mut value = find(&view.tasks, key);
                if let Some(status) = value
                    .as_mut()
                    .and_then(|v| v.get_mut("status"))
                    .and_then(|s| s.as_object_mut())
                {
                    status.remove("outputTail");
                }
                value
            };
            let lacks = "without its kept output (status.outputTail)";
            api_yaml::<AgentTask>(client, key, cached, lacks).await
        }
        _ => yaml_of(view, events, key),
    }
}

/// `key`'s object as the API has it, as `kubectl get -o yaml`; when the
/// API does not answer, the `cached` copy, said to be partial (`lacks`).
async fn api_yaml<K>(
    client: &Client,
    key: &ObjectKey,
    cached: impl FnOnce() -> Option<serde_json::Value>,
    lacks: &str,
) -> String
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), &key.namespace);
    let why = match tokio::time::timeout(Duration::from_secs(10), api.get_opt(&key.name)).await {
        Ok(Ok(found)) => {
            return render_yaml(found.and_then(|o| serde_json::to_value(&o).ok()), key);
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer in 10 s".to_owned(),
    };
    format!(
        "# could not read the {} from the API ({}); shown from the console's cache,\n# {lacks}\n{}",
        key.kind,
        crate::text::sanitize_line(&why),
        render_yaml(cached(), key)
    )
}

fn find<K>(store: &Store<K>, key: &ObjectKey) -> Option<serde_json::Value>
where
    K: Resource<DynamicType = ()> + Clone + serde::Serialize + 'static,
{
    let r = reflector::ObjectRef::<K>::new(&key.name).within(&key.namespace);
    store.get(&r).and_then(|o| serde_json::to_value(&*o).ok())
}

/// The object as YAML, managedFields stripped; read from the stores (pods
/// are read from the API by the loader).
pub fn yaml_of(view: &ClusterView, events: &Store<Event>, key: &ObjectKey) -> String {
    let value = match key.kind {
        "AgentPool" => find(&view.pools, key),
        "AgentTask" => find(&view.tasks, key),
        "Pod" => find(&view.pods, key),
        "Event" => find(events, key),
        _ => None,
    };
    render_yaml(value, key)
}

fn render_yaml(value: Option<serde_json::Value>, key: &ObjectKey) -> String {
    let Some(mut value) = value else {
        return format!("# {} {}/{} is gone", key.kind, key.namespace, key.name);
    };
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    serde_saphyr::to_string(&value).unwrap_or_else(|e| format!("# cannot render: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::fixtures;
    use crate::app::rows;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    /// A board where each `(kind, phase, listed once)` is so.
    fn board(
        cells: &[(&str, controller::watches::Phase, bool)],
    ) -> std::collections::BTreeMap<String, controller::watches::WatchStatus> {
        cells
            .iter()
            .map(|(k, phase, listed_once)| {
                (
                    (*k).to_owned(),
                    controller::watches::WatchStatus {
                        phase: *phase,
                        reason: None,
                        failures_in_row: 0,
                        since: Instant::now(),
                        listed_once: *listed_once,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_header_says_what_the_api_refused_rather_than_syncing() {
        use controller::watches::Phase::{Listing, Refused, Watching};
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

    /// Counts the writes that reach it: (calls, bytes).
    #[derive(Clone, Default)]
    struct Writes(std::rc::Rc<std::cell::Cell<(usize, usize)>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let (calls, bytes) = self.0.get();
            self.0.set((calls + 1, bytes + buf.len()));
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Every piece [`read_piece`] makes of `input`, decoded.
    fn pieces(input: &[u8]) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            // A small buffer: lines arrive split across reads.
            let mut reader = futures::io::BufReader::with_capacity(7, input);
            let mut line = Vec::new();
            let mut out = Vec::new();
            while read_piece(&mut reader, &mut line).await.expect("read") {
                out.push(crate::app::logs::decode(&line));
                line.clear();
            }
            out
        })
    }

    #[test]
    fn bad_bytes_are_read_as_a_line_and_the_lines_after_them_still_come() {
        let got = pieces(
            b"2026-11-27T10:00:00Z [t] \xff\xfe\n2026-11-27T10:00:01Z [t] after-bad-bytes\nlast",
        );
        assert_eq!(
            got,
            [
                "2026-11-27T10:00:00Z [t] \u{fffd}\u{fffd}",
                "2026-11-27T10:00:01Z [t] after-bad-bytes",
                "last",
            ]
        );
    }

    #[test]
    fn a_line_longer_than_the_limit_comes_in_pieces() {
        let mut input = vec![b'x'; MAX_LINE * 2 + 10];
        input.push(b'\n');
        input.extend_from_slice(b"next\n");
        let got = pieces(&input);
        let lens: Vec<usize> = got.iter().map(String::len).collect();
        assert_eq!(lens, [MAX_LINE, MAX_LINE, 10, 4]);
        assert_eq!(got[3], "next");
    }

    #[test]
    fn the_end_of_a_view_of_kept_output_says_where_it_comes_from() {
        let from = "the last 2 lines task t printed, kept in its status (outputTail)";
        assert_eq!(
            kept_reason("agent-1", &KeptBecause::PodGone, Some(from)),
            format!("from the kept output (the pod is gone): {from}")
        );
        assert_eq!(
            kept_reason("agent-1", &KeptBecause::AgedOut, Some(from)),
            format!(
                "from the kept output (its lines are no longer in the log of pod agent-1): {from}"
            )
        );
        assert_eq!(
            kept_reason("agent-1", &KeptBecause::PodGone, None),
            "pod agent-1 is gone and nothing of its output was kept"
        );
        let why = KeptBecause::Unreadable("container is waiting".into());
        assert_eq!(
            kept_reason("agent-1", &why, None),
            "cannot read the log of pod agent-1: container is waiting"
        );
        let at: Timestamp = "2026-11-27T10:04:05Z".parse().expect("time");
        assert_eq!(
            task_end_line("plan-1", TaskPhase::Succeeded, Some(at)),
            "task plan-1 Succeeded at 10:04:05 UTC; end of its output"
        );
        assert_eq!(
            task_end_line("plan-1", TaskPhase::Failed, None),
            "task plan-1 Failed; end of its output"
        );
    }

    #[test]
    fn a_whole_frame_reaches_the_terminal_in_one_write() {
        let now = fixtures::now();
        let src = fixtures::sources(now, 10_000);
        let thresholds = controller::prober::thresholds(&Default::default());
        let mut app = App::new(AppOptions::default(), now);
        app.update(Msg::Resize(160, 48));
        app.update(Msg::Snapshot(Arc::new(rows::build(&src, now, &thresholds))));
        let theme = Theme::default();
        let out = Writes::default();
        let mut term = terminal_over(out.clone()).expect("terminal");
        for view in ['3', '1', '2', '3'] {
            app.update(Msg::Key(KeyEvent::new(
                KeyCode::Char(view),
                KeyModifiers::NONE,
            )));
            let (calls, bytes) = out.0.get();
            term.draw(|f| ui::draw(f, &app, &theme)).expect("draw");
            let (calls, bytes) = (out.0.get().0 - calls, out.0.get().1 - bytes);
            // All of it at once, though each frame is more than stdout's
            // 1 KiB line buffer lets through in one write.
            assert_eq!(calls, 1, "view {view}: {calls} writes for {bytes} bytes");
            assert!(bytes > 1024, "view {view}: {bytes} bytes");
        }
    }
}
