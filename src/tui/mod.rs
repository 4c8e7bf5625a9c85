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

use crossterm::event::{Event as TermEvent, EventStream};
use futures::StreamExt;
use jiff::Timestamp;
use kube::Client;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::app::rows::LogSource;
use crate::app::{ActionRequest, App, AppOptions, Command, Msg, ObjectKey, StreamId};
use crate::cluster;
use crate::cluster::Connection;
use crate::config::Config;
use crate::controller::{self, ControllerHandle, StartOptions};
use crate::ui::{self, Theme};

pub mod actions;
mod feed;
pub mod fleet;
pub mod jobs;
mod logs;
pub mod queue;
mod status;
mod suspend;
mod yaml;

use feed::{LATE_KIND, snapshots, watch_events};
pub use feed::{ViewChanges, sources};
use logs::log_streamer;
pub use logs::{KeptBecause, kept_reason, task_end_line};
use status::{pools_elsewhere, rights, status};
use yaml::yaml_loader;
pub use yaml::{object_yaml, yaml_of};

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
    pub health: Vec<cluster::AgentSample>,
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
                // The console shows every task whole.
                slim_finished_tasks: false,
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
    board: cluster::watches::WatchBoard,
    /// Asks the rights worker to ask the API again.
    rights_asked: Arc<tokio::sync::Notify>,
    /// Starts the watch of Events (see [`watch_events`]).
    events_wanted: watch::Sender<bool>,
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
        let (events_wanted, wanted_rx) = watch::channel(false);
        let (events, event_feed) = watch_events(
            &context.conn,
            setup.all_namespaces,
            &setup.config,
            (view.changes.clone(), view.watches.cell_beside(LATE_KIND)),
            (shown_rx, wanted_rx),
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
            events_wanted,
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
            Command::WatchEvents => {
                self.events_wanted
                    .send_if_modified(|w| !std::mem::replace(w, true));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::fixtures;
    use crate::app::rows;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

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
