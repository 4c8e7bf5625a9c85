//! The console's state and its one entry point, [`App::update`]: a message
//! in (a key, a tick carrying the time, a snapshot of the cluster, log lines,
//! an action's outcome), the commands to carry out back. Synchronous, no
//! I/O and no clock, so key sequences are tested by the commands they emit.

pub mod actions;
pub mod audit;
pub mod field;
pub mod filter;
#[doc(hidden)]
pub mod fixtures;
pub mod fleet;
pub mod help;
pub mod history;
pub mod keymap;
pub mod logs;
pub mod rights;
pub mod rows;
mod shell;
pub mod text;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use jiff::Timestamp;

pub use field::Field;
use filter::Filter;
use keymap::{Action, Key, Keymap, Scope};
use logs::{LogBuffer, LogLine};
use rows::{LogSource, Row, Snapshot};
pub use shell::ShellRequest;

pub use actions::{ActionRequest, BundleGauge, Dialog, PreviewState, parse_bounds};

/// The tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViewKind {
    Pools,
    Agents,
    Tasks,
    Events,
}

impl ViewKind {
    pub const ALL: [ViewKind; 4] = [
        ViewKind::Pools,
        ViewKind::Agents,
        ViewKind::Tasks,
        ViewKind::Events,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ViewKind::Pools => "pools",
            ViewKind::Agents => "agents",
            ViewKind::Tasks => "tasks",
            ViewKind::Events => "events",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What the main area shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Screen {
    /// A table, optionally narrowed to one pool (drill-down).
    Table {
        kind: ViewKind,
        pool: Option<String>,
    },
    /// Logs of a task or pod.
    Logs {
        title: String,
        source: LogSource,
        previous: bool,
    },
    /// YAML of one object.
    Yaml { object: ObjectKey },
    /// The audit trail of actions.
    Audit,
    /// A pool's last hour, drawn (`i`).
    PoolHistory {
        /// Empty with one context.
        context: String,
        namespace: String,
        name: String,
    },
}

/// One object, for YAML.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// The kube context it is in (empty: the console's only one).
    pub context: String,
    /// `AgentPool`, `AgentTask`, `Pod` or `Event`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

/// Who this console is toward the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Its embedded controller holds the Lease and acts.
    Leader,
    /// Another controller holds the Lease; actions go through object changes.
    #[default]
    Observer,
    /// `--read-only`: watches only, no actions.
    ReadOnly,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Observer => "observer",
            Role::ReadOnly => "read-only",
        }
    }
}

/// The state of the watches feeding the view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WatchState {
    /// Initial lists not all in yet.
    #[default]
    Syncing,
    Synced,
    /// Every watch answered and follows, but the API refuses this identity
    /// some resources: which (`pods`, `events`), each a state of its view.
    Partial(Vec<String>),
    /// The API does not serve agentdeck's own resources: its CRDs are not
    /// installed.
    NotInstalled,
    /// A watch is listing again (after `410 Gone`, or a failed list): which,
    /// and why.
    Resyncing(String),
    /// A watch's last attempt failed and it retries: which, and why. Its
    /// store may be missing what happened since.
    Failing(String),
    /// The API cannot be reached: why.
    Disconnected(String),
}

/// AgentPools in namespaces other than the one the console reads, as the
/// API answered when the console looked (only while it shows none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Elsewhere {
    /// Not looked yet.
    #[default]
    NotLooked,
    /// Pools per other namespace (those with none left out).
    Found(Vec<(String, usize)>),
    /// The API would not say, in words (`you may not list agentpools in
    /// all namespaces`).
    CannotLook(String),
}

/// What the status probe last learnt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterStatus {
    pub role: Role,
    pub watch: WatchState,
    /// Round trip of the last API call.
    pub latency: Option<Duration>,
    /// Why the role is not leader, in words (`daemon agentdeck-7f… holds
    /// the Lease`); none while it leads or before anything is known.
    pub role_reason: Option<String>,
    /// The kinds (`Pod`, `AgentPool`) whose first list has not answered.
    pub loading: Vec<String>,
    /// How far the kinds still on their first list have come.
    pub listing: Vec<(String, crate::cluster::watches::ListProgress)>,
    /// The kinds the API refused, and how.
    pub refused: Vec<(String, Refusal)>,
}

impl ClusterStatus {
    /// How many objects of `kind` its first list, still under way, will
    /// bring in all, when the API said.
    pub fn expected(&self, kind: &str) -> Option<u64> {
        self.listing
            .iter()
            .find(|(k, _)| k == kind)
            .and_then(|(_, p)| p.expected)
    }

    /// How the API refused `kind`, if it did.
    pub fn refusal(&self, kind: &str) -> Option<Refusal> {
        self.refused
            .iter()
            .find(|(k, _)| k == kind)
            .map(|(_, r)| *r)
    }
}

pub use crate::cluster::watches::Refusal;

/// The API's name (plural, lower case) of a kind the console watches, as
/// RBAC and `kubectl` name it.
pub fn plural(kind: &str) -> &str {
    match kind {
        "AgentPool" => "agentpools",
        "AgentTask" => "agenttasks",
        "Pod" => "pods",
        "Event" => "events",
        "Deployment" => "deployments",
        "Job" => "jobs",
        "Lease" => "leases",
        other => other,
    }
}

/// Kinds in the order a user cares about them (what their views show
/// first), for lists of kinds in words.
pub fn kind_rank(kind: &str) -> usize {
    [
        "AgentPool",
        "AgentTask",
        "Pod",
        "Event",
        "Job",
        "Deployment",
    ]
    .iter()
    .position(|k| *k == kind)
    .unwrap_or(usize::MAX)
}

/// Which log stream, so lines of an older one are ignored.
pub type StreamId = u64;

/// I/O the console asks for; carried out off the UI thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Quit,
    /// `command`, for the workers of one context (a console over several).
    In {
        context: String,
        command: Box<Command>,
    },
    /// Stream (follow) a pod's log; replaces any running stream.
    StreamLogs {
        id: StreamId,
        source: LogSource,
        previous: bool,
    },
    StopLogs,
    /// The YAML of one object, from the stores.
    LoadYaml(ObjectKey),
    /// An action, after confirmation.
    Action(ActionRequest),
    /// What an action would change (server-side dry run), for its dialog.
    PreviewAction(ActionRequest),
    /// Read the audit trail.
    LoadAudit,
    /// Write a support bundle of a namespace (or one pool).
    TakeBundle {
        namespace: String,
        pool: Option<String>,
        /// The pools' last hour ([`history::History::export`]).
        history: Option<serde_json::Value>,
    },
    /// Make a copy-mode debug pod of an agent pod.
    CreateDebugPod {
        namespace: String,
        pod: String,
    },
    /// An interactive shell: the console suspends while it runs.
    Shell(ShellRequest),
    /// Ask the API again now what it refused (rights, resources not
    /// served), in every context.
    Recheck,
    /// Start watching Events, in every context: a view that reads them
    /// was opened (they are not watched until one is).
    WatchEvents,
}

/// Everything that can happen to the console.
#[derive(Clone, Debug)]
pub enum Msg {
    Key(KeyEvent),
    Paste(String),
    Resize(u16, u16),
    /// The time now (ages, clock, toast expiry).
    Tick(Timestamp),
    Snapshot(Arc<Snapshot>),
    Status(ClusterStatus),
    /// AgentPools outside the namespace shown, looked for while it has none.
    PoolsElsewhere(Elsewhere),
    /// What this identity may do in `context` (empty: the console's only
    /// one), as the API answered.
    Rights {
        context: String,
        table: crate::ops::access::AccessTable,
    },
    /// The status of one context of a console over several.
    ContextStatus {
        context: String,
        status: ClusterStatus,
    },
    LogLines {
        id: StreamId,
        lines: Vec<String>,
    },
    LogEnded {
        id: StreamId,
        reason: String,
    },
    Yaml {
        object: ObjectKey,
        text: String,
    },
    ActionDone {
        request: ActionRequest,
        result: Result<String, String>,
    },
    /// The dry-run preview of an action whose dialog may still be open:
    /// its impact, one line each.
    ActionPreview {
        request: ActionRequest,
        result: Result<Vec<String>, String>,
    },
    /// A confirmed action waits behind `ahead` others.
    ActionQueued {
        request: ActionRequest,
        ahead: usize,
    },
    /// The audit trail, read (rows newest first).
    AuditLoaded(Result<Vec<audit::AuditRow>, String>),
    /// How far the support bundle is.
    BundleProgress(BundleGauge),
    /// The bundle's zip path, or why there is none.
    BundleWritten(Result<String, String>),
    /// The debug pod made (name, expiry, how to get a shell), or why not.
    DebugPodCreated(Result<String, String>),
    /// A shell ended: its exit code, or why it could not run.
    ShellEnded {
        pod: String,
        result: Result<i32, String>,
    },
}

/// Sort orders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    /// As built: pools and agents by name, tasks and events newest first.
    #[default]
    Natural,
    Name,
    Age,
    Status,
    Pool,
}

/// One table's state.
#[derive(Debug, Default)]
pub struct TableState {
    pub filter_text: String,
    pub filter: Filter,
    pub sort: SortKey,
    pub reverse: bool,
    /// Row indices in sort order.
    order: Vec<u32>,
    /// Row indices shown (filtered, in order).
    pub visible: Vec<u32>,
    pub selected: usize,
    /// The key of the selected row's object: the selection follows it
    /// through re-sorts, inserts and deletes, not its row number.
    pub selected_key: Option<String>,
    pub offset: usize,
    /// Marked rows' keys: only rows shown, cleared when the view or its
    /// filter changes.
    pub marks: BTreeSet<String>,
    stale: bool,
}

/// The log view's state.
#[derive(Debug)]
pub struct LogsState {
    pub id: StreamId,
    pub buffer: LogBuffer,
    pub prefix: Option<String>,
    pub follow: bool,
    pub wrap: bool,
    pub timestamps: bool,
    /// First line shown when not following.
    pub top: usize,
    pub search: Option<(String, regex::Regex)>,
    /// Line of the current match.
    pub matched: Option<usize>,
    /// Why the stream ended, if it did.
    pub ended: Option<String>,
}

/// The YAML view's state.
#[derive(Debug, Default)]
pub struct YamlState {
    pub lines: Vec<String>,
    pub top: usize,
    pub loaded: bool,
}

/// Where a table's selected object is after its rows changed.
enum Kept {
    Nothing,
    At(usize),
    FilteredOut,
    Gone(String),
}

/// A one-line input at the bottom (`:` or `/`).
#[derive(Debug, Clone)]
pub enum Prompt {
    Command(Field),
    Filter(Field),
}

/// A short message in the corner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toast {
    pub text: String,
    pub error: bool,
    pub until: Timestamp,
}

/// How long a toast stays.
pub const TOAST_FOR: Duration = Duration::from_secs(4);

/// Layout facts shared with `ui`: lines above and below a table's rows.
pub const HEADER_LINES: u16 = 2;
pub const FOOTER_LINES: u16 = 1;
/// Table block borders and column titles.
pub const TABLE_CHROME: u16 = 3;

/// Rows of a table that fit in a terminal `height` lines high.
pub fn list_rows(height: u16) -> usize {
    usize::from(height.saturating_sub(HEADER_LINES + FOOTER_LINES + TABLE_CHROME)).max(1)
}

/// What the console is started with.
#[derive(Clone, Debug)]
pub struct AppOptions {
    pub context: String,
    /// Every context of a console over several (`--context a --context b`);
    /// empty or one: the console of one context.
    pub contexts: Vec<String>,
    pub namespace: String,
    /// `-A`: objects of every namespace, with a namespace column.
    pub all_namespaces: bool,
    pub read_only: bool,
    pub keymap: Keymap,
    pub log_capacity: usize,
    /// The kubeconfig to use `kubectl` beside the console (`--demo` writes
    /// one), shown in help and the header.
    pub kubeconfig: Option<String>,
    /// How the namespace was chosen when nobody chose it (`the kube
    /// context names no namespace: default was taken`).
    pub namespace_note: Option<String>,
    /// The console is on a support bundle (`--bundle`), not a cluster.
    pub bundle: Option<BundleOpened>,
}

/// A support bundle the console shows (`agentdeck --bundle B.zip`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BundleOpened {
    /// Its file name.
    pub file: String,
    /// When it was taken: the console's clock stands there.
    pub taken_at: Timestamp,
    /// What it could not give (a newer format, no pool history …).
    pub notes: Vec<String>,
}

impl BundleOpened {
    /// What an action key answers on a bundle.
    pub fn refusal(&self, what: &str) -> String {
        format!(
            "read-only: {} is a support bundle taken {}; {what} acts on a live cluster (open its context with agentdeck --context …)",
            self.file,
            self.taken_at.strftime("%Y-%m-%d %H:%M:%SZ")
        )
    }
}

impl Default for AppOptions {
    fn default() -> Self {
        AppOptions {
            context: String::new(),
            contexts: Vec::new(),
            namespace: String::new(),
            all_namespaces: false,
            read_only: false,
            keymap: Keymap::default(),
            log_capacity: logs::DEFAULT_CAPACITY,
            kubeconfig: None,
            namespace_note: None,
            bundle: None,
        }
    }
}

/// Commands of the `:` bar.
pub const COMMANDS: &[&str] = &[
    "pools", "agents", "tasks", "events", "audit", "bundle", "help", "quit", "q", "ap", "at", "po",
    "pod", "ev", "shell", "ctx",
];

/// The console.
#[derive(Debug)]
pub struct App {
    pub opts: AppOptions,
    pub now: Timestamp,
    pub size: (u16, u16),
    pub snapshot: Arc<Snapshot>,
    pub status: ClusterStatus,
    pub history: Vec<Screen>,
    pub at: usize,
    pub tables: [TableState; 4],
    pub logs: Option<LogsState>,
    pub yaml: YamlState,
    pub prompt: Option<Prompt>,
    pub command_history: Vec<String>,
    command_cursor: Option<usize>,
    pub help: bool,
    /// First help line shown (help scrolls when it does not fit).
    pub help_top: usize,
    /// Wide columns (labels, job) shown in tables.
    pub wide: bool,
    pub dialog: Option<Dialog>,
    pub toast: Option<Toast>,
    /// The `:audit` view.
    pub audit: audit::AuditState,
    /// The support bundle being written, if one is.
    pub bundle: Option<BundleGauge>,
    /// Each pool's last hour, sampled from the snapshots.
    pub pool_history: history::History,
    /// Each context of a console over several, with its status (empty with one).
    pub contexts: Vec<fleet::ContextState>,
    /// `:ctx NAME`: the tables show that context only.
    pub narrow: Option<String>,
    /// Pools in other namespaces, for an empty pools view.
    pub elsewhere: Elsewhere,
    /// What this identity may do, per context, as the API last answered.
    pub rights: std::collections::BTreeMap<String, crate::ops::access::AccessTable>,
    /// Events are watched: a view that reads them was opened (see
    /// [`Command::WatchEvents`]).
    pub events_watched: bool,
    next_stream: StreamId,
    matcher: nucleo_matcher::Matcher,
}

impl App {
    pub fn new(opts: AppOptions, now: Timestamp) -> App {
        let role = if opts.read_only {
            Role::ReadOnly
        } else {
            Role::Observer
        };
        let mut tables: [TableState; 4] = Default::default();
        for t in &mut tables {
            t.stale = true;
        }
        let contexts = if opts.contexts.len() > 1 {
            opts.contexts
                .iter()
                .map(|c| fleet::ContextState::new(c, opts.read_only))
                .collect()
        } else {
            Vec::new()
        };
        let mut app = App {
            opts,
            now,
            size: (100, 30),
            snapshot: Arc::default(),
            status: ClusterStatus {
                role,
                ..ClusterStatus::default()
            },
            history: vec![Screen::Table {
                kind: ViewKind::Pools,
                pool: None,
            }],
            at: 0,
            tables,
            logs: None,
            yaml: YamlState::default(),
            prompt: None,
            command_history: Vec::new(),
            command_cursor: None,
            help: false,
            help_top: 0,
            wide: false,
            dialog: None,
            toast: None,
            audit: audit::AuditState::default(),
            bundle: None,
            pool_history: history::History::default(),
            contexts,
            narrow: None,
            elsewhere: Elsewhere::NotLooked,
            rights: std::collections::BTreeMap::new(),
            events_watched: false,
            next_stream: 1,
            matcher: filter::matcher(),
        };
        // How the namespace came to be, when nobody chose it (or `-A`
        // could not have it all): said once at start, and by an empty
        // pools view.
        if let Some(note) = app.opts.namespace_note.clone() {
            app.toast(note, false);
        }
        app
    }

    /// The screen shown.
    pub fn screen(&self) -> &Screen {
        &self.history[self.at]
    }

    /// The table shown, if a table is shown.
    pub fn table_kind(&self) -> Option<(ViewKind, Option<&str>)> {
        match self.screen() {
            Screen::Table { kind, pool } => Some((*kind, pool.as_deref())),
            _ => None,
        }
    }

    pub fn table(&self, kind: ViewKind) -> &TableState {
        &self.tables[kind.index()]
    }

    fn scope(&self) -> Scope {
        match self.screen() {
            Screen::Table { .. } => Scope::Table,
            Screen::Logs { .. } => Scope::Logs,
            Screen::Yaml { .. } | Screen::PoolHistory { .. } => Scope::Global,
            Screen::Audit => Scope::Table,
        }
    }

    /// Rows of a table that fit on screen.
    pub fn page(&self) -> usize {
        list_rows(self.size.1)
    }

    /// Handles one message.
    pub fn update(&mut self, msg: Msg) -> Vec<Command> {
        match msg {
            Msg::Key(k) => self.key(k),
            Msg::Paste(text) => {
                if let Some(Prompt::Command(input) | Prompt::Filter(input)) = &mut self.prompt {
                    input.paste(&text);
                    self.prompt_changed();
                } else if let Some(input) = self.dialog.as_mut().and_then(|d| d.input.as_mut()) {
                    input.paste(&text);
                }
                Vec::new()
            }
            Msg::Resize(w, h) => {
                self.size = (w, h);
                self.clamp_all();
                Vec::new()
            }
            Msg::Tick(now) => {
                self.now = now;
                if self.toast.as_ref().is_some_and(|t| t.until <= now) {
                    self.toast = None;
                }
                Vec::new()
            }
            Msg::Snapshot(s) => {
                self.pool_history.observe(&s);
                self.snapshot = s;
                for t in &mut self.tables {
                    t.stale = true;
                }
                self.refresh_current();
                Vec::new()
            }
            Msg::Status(s) => {
                self.status = ClusterStatus {
                    role: if self.opts.read_only {
                        Role::ReadOnly
                    } else {
                        s.role
                    },
                    ..s
                };
                Vec::new()
            }
            Msg::Rights { context, table } => {
                self.rights.insert(context, table);
                Vec::new()
            }
            Msg::PoolsElsewhere(found) => {
                self.elsewhere = found;
                Vec::new()
            }
            Msg::ContextStatus { context, status } => {
                self.context_status(&context, status);
                Vec::new()
            }
            Msg::LogLines { id, lines } => {
                if let Some(l) = self.logs.as_mut().filter(|l| l.id == id) {
                    for raw in &lines {
                        if let Some(line) = LogLine::parse(raw, true, l.prefix.as_deref()) {
                            l.buffer.push(line);
                        }
                    }
                    if !l.follow {
                        // Keep the same lines in view while older ones are dropped.
                        l.top = l.top.min(l.buffer.len().saturating_sub(1));
                    }
                }
                Vec::new()
            }
            Msg::LogEnded { id, reason } => {
                if let Some(l) = self.logs.as_mut().filter(|l| l.id == id) {
                    l.ended = Some(text::clean(&reason));
                }
                Vec::new()
            }
            Msg::Yaml { object, text } => {
                if matches!(self.screen(), Screen::Yaml { object: o } if *o == object) {
                    self.yaml = YamlState {
                        lines: text.lines().map(text::clean).collect(),
                        top: 0,
                        loaded: true,
                    };
                }
                Vec::new()
            }
            Msg::ActionPreview { request, result } => {
                if let Some(d) = &mut self.dialog
                    && d.request == request
                {
                    d.preview = match result {
                        Ok(lines) => PreviewState::Lines(lines),
                        Err(why) => PreviewState::Failed(why),
                    };
                }
                Vec::new()
            }
            Msg::ShellEnded { pod, result } => {
                self.shell_ended(&pod, result);
                Vec::new()
            }
            Msg::ActionDone { request, result } => {
                match result {
                    Ok(what) => self.toast(format!("{}: {what}", request.describe()), false),
                    Err(why) => self.toast(format!("{} failed: {why}", request.describe()), true),
                }
                if *self.screen() == Screen::Audit {
                    return vec![Command::LoadAudit];
                }
                Vec::new()
            }
            other => self.job_msg(other),
        }
    }

    fn toast(&mut self, text: String, error: bool) {
        self.toast = Some(Toast {
            text: text::clean(&text),
            error,
            until: self.now.checked_add(TOAST_FOR).unwrap_or(self.now),
        });
    }

    fn key(&mut self, k: KeyEvent) -> Vec<Command> {
        if k.kind == crossterm::event::KeyEventKind::Release {
            return Vec::new();
        }
        let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl_c {
            return vec![Command::Quit];
        }
        if self.dialog.is_some() {
            return self.dialog_key(k);
        }
        if self.prompt.is_some() {
            return self.prompt_key(k);
        }
        let key = Key::from_event(&k);
        if self.help {
            self.help_key(key);
            return Vec::new();
        }
        // On a bundle every action key answers that it is one, rather
        // than doing nothing as an unbound key would.
        if let Some(b) = &self.opts.bundle
            && let Some(a) = self.opts.keymap.lookup(key, self.scope(), false)
            && (a.writes() || a == Action::Bundle)
        {
            let what = match a {
                Action::Bundle => "a new bundle".to_owned(),
                Action::Scale
                    if self
                        .table_kind()
                        .is_some_and(|(k, _)| k == ViewKind::Agents) =>
                {
                    "a shell".to_owned()
                }
                other => other.name().to_owned(),
            };
            let text = b.refusal(&what);
            self.toast(text, true);
            return Vec::new();
        }
        let Some(action) = self
            .opts
            .keymap
            .lookup(key, self.scope(), self.opts.read_only)
        else {
            if let Some(hint) = k9s_hint(key)
                && self.opts.keymap.lookup(key, Scope::Table, false).is_none()
            {
                self.toast(hint.to_owned(), false);
            }
            return Vec::new();
        };
        self.act(action)
    }

    /// In help, the moving keys scroll it and any other key closes it.
    fn help_key(&mut self, key: Key) {
        let total = help::lines(&self.opts.keymap, self.opts.read_only).len();
        let max = help::max_top(total, self.size);
        let page = help::layout(self.size).1;
        let top = self.help_top;
        self.help_top = match self.opts.keymap.lookup(key, Scope::Global, false) {
            Some(Action::Down) => top + 1,
            Some(Action::Up) => top.saturating_sub(1),
            Some(Action::PageDown) => top + page,
            Some(Action::PageUp) => top.saturating_sub(page),
            Some(Action::Top) => 0,
            Some(Action::Bottom) => max,
            _ => {
                self.help = false;
                0
            }
        }
        .min(max);
    }

    fn act(&mut self, action: Action) -> Vec<Command> {
        // An action the API said this identity may not take answers at
        // once, without a dialog that could only end in a 403.
        if matches!(
            action,
            Action::Scale
                | Action::Drain
                | Action::DebugLogs
                | Action::CancelTask
                | Action::RetryTask
                | Action::DebugPod
        ) && let Some(why) = self.action_refused(action)
        {
            self.toast(why, true);
            return Vec::new();
        }
        match action {
            Action::Quit => vec![Command::Quit],
            Action::Help => {
                self.help = true;
                Vec::new()
            }
            Action::Command => {
                self.prompt = Some(Prompt::Command(Field::default()));
                self.command_cursor = None;
                Vec::new()
            }
            Action::Filter => self.open_filter(),
            Action::Back => self.back_key(),
            Action::HistoryBack => self.back(),
            Action::HistoryForward => self.history_forward(),
            Action::Pools => self.go_table(ViewKind::Pools, None),
            Action::Agents => self.go_table(ViewKind::Agents, self.current_pool()),
            Action::Tasks => self.go_table(ViewKind::Tasks, self.current_pool()),
            Action::Events => self.go_table(ViewKind::Events, self.current_pool()),
            Action::Up => self.move_by(-1),
            Action::Down => self.move_by(1),
            Action::PageUp => self.move_by(-(self.page() as i64)),
            Action::PageDown => self.move_by(self.page() as i64),
            Action::Top => self.move_by(i64::MIN / 2),
            Action::Bottom => self.move_by(i64::MAX / 2),
            Action::Enter if *self.screen() == Screen::Audit => self.audit_open(),
            Action::Enter => self.enter(),
            Action::Switch => self.switch_view(),
            Action::Yaml => match self.selected_object() {
                Some(object) => self.go(Screen::Yaml { object }),
                None => Vec::new(),
            },
            Action::Logs => self.open_logs(false),
            Action::PreviousLogs => self.open_logs(true),
            Action::Mark => self.toggle_mark(),
            Action::ClearMarks => self.clear_marks(),
            Action::Wide => {
                self.wide = !self.wide;
                Vec::new()
            }
            Action::SortName => self.sort(SortKey::Name),
            Action::SortAge => self.sort(SortKey::Age),
            Action::SortStatus => self.sort(SortKey::Status),
            Action::SortPool => self.sort(SortKey::Pool),
            Action::Scale if matches!(self.table_kind(), Some((ViewKind::Agents, _))) => {
                self.shell()
            }
            Action::Scale
            | Action::Drain
            | Action::DebugLogs
            | Action::CancelTask
            | Action::RetryTask => self.ask(action),
            Action::Bundle => self.bundle_key(),
            Action::DebugPod => self.debug_pod_key(),
            Action::Audit => self.go(Screen::Audit),
            Action::Recheck => {
                self.toast(
                    "asking the API again: your rights, and the resources it refused".into(),
                    false,
                );
                vec![Command::Recheck]
            }
            Action::PoolHistory => self.open_pool_history(),
            Action::Follow
            | Action::Wrap
            | Action::Timestamps
            | Action::SearchNext
            | Action::SearchPrevious => self.log_key(action),
        }
    }

    /// `/`: the filter prompt, prefilled with the filter in force.
    fn open_filter(&mut self) -> Vec<Command> {
        let current = match self.screen() {
            Screen::Table { kind, .. } => self.table(*kind).filter_text.clone(),
            Screen::Logs { .. } => self
                .logs
                .as_ref()
                .and_then(|l| l.search.as_ref().map(|s| s.0.clone()))
                .unwrap_or_default(),
            Screen::Yaml { .. } | Screen::PoolHistory { .. } => return Vec::new(),
            Screen::Audit => self.audit.table.filter_text.clone(),
        };
        self.prompt = Some(Prompt::Filter(Field::prefilled(current)));
        Vec::new()
    }

    /// Esc: undoes the nearest thing first (a filter, marks, a log search),
    /// and only then goes back.
    fn back_key(&mut self) -> Vec<Command> {
        if let Some((kind, _)) = self.table_kind()
            && !self.table(kind).filter_text.is_empty()
        {
            self.set_filter(kind, String::new());
            return Vec::new();
        }
        if let Some((kind, _)) = self.table_kind()
            && !self.table(kind).marks.is_empty()
        {
            self.tables[kind.index()].marks.clear();
            self.toast("marks cleared".into(), false);
            return Vec::new();
        }
        if *self.screen() == Screen::Audit && !self.audit.table.filter_text.is_empty() {
            self.audit_filter(String::new());
            return Vec::new();
        }
        if let Some(l) = self.logs.as_mut().filter(|l| l.search.is_some()) {
            l.search = None;
            l.matched = None;
            return Vec::new();
        }
        self.back()
    }

    /// Forward in the history, if there is a forward.
    fn history_forward(&mut self) -> Vec<Command> {
        if self.at + 1 < self.history.len() {
            let from = self.screen().clone();
            self.at += 1;
            self.entered(&from)
        } else {
            Vec::new()
        }
    }

    /// Tab: between a pool's agents and tasks, or from a pool to its agents.
    fn switch_view(&mut self) -> Vec<Command> {
        match self.screen().clone() {
            Screen::Table {
                kind: ViewKind::Tasks,
                pool: Some(p),
            } => self.go_table(ViewKind::Agents, Some(p)),
            Screen::Table {
                kind: ViewKind::Agents,
                pool: Some(p),
            } => self.go_table(ViewKind::Tasks, Some(p)),
            Screen::Table {
                kind: ViewKind::Pools,
                ..
            } => match self.selected_key(ViewKind::Pools) {
                Some(_) => {
                    let pool = self.selected_pool_name();
                    self.go_table(ViewKind::Agents, pool)
                }
                None => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// Space: marks or unmarks the selected row and moves down.
    fn toggle_mark(&mut self) -> Vec<Command> {
        if let Some((kind, _)) = self.table_kind()
            && let Some(key) = self.selected_key(kind)
        {
            let t = &mut self.tables[kind.index()];
            if !t.marks.remove(&key) {
                t.marks.insert(key);
            }
            return self.move_by(1);
        }
        Vec::new()
    }

    /// Clears the marks of the table shown.
    fn clear_marks(&mut self) -> Vec<Command> {
        if let Some((kind, _)) = self.table_kind() {
            let t = &mut self.tables[kind.index()];
            let n = t.marks.len();
            t.marks.clear();
            if n > 0 {
                self.toast(format!("{n} mark(s) cleared"), false);
            }
        }
        Vec::new()
    }

    /// The log view's keys: follow, wrap, timestamps, search steps.
    fn log_key(&mut self, action: Action) -> Vec<Command> {
        match action {
            Action::Follow => {
                if let Some(l) = &mut self.logs {
                    l.follow = !l.follow;
                    if !l.follow {
                        l.top = l.buffer.len().saturating_sub(self.size.1 as usize);
                    }
                }
                Vec::new()
            }
            Action::Wrap => {
                if let Some(l) = &mut self.logs {
                    l.wrap = !l.wrap;
                }
                Vec::new()
            }
            Action::Timestamps => {
                if let Some(l) = &mut self.logs {
                    l.timestamps = !l.timestamps;
                }
                Vec::new()
            }
            Action::SearchNext | Action::SearchPrevious => {
                self.search_step(action == Action::SearchNext);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn current_pool(&self) -> Option<String> {
        match self.screen() {
            Screen::Table { pool, .. } => pool.clone(),
            _ => None,
        }
    }

    fn go_table(&mut self, kind: ViewKind, pool: Option<String>) -> Vec<Command> {
        let pool = if kind == ViewKind::Pools { None } else { pool };
        self.go(Screen::Table { kind, pool })
    }

    /// Moves to `screen`, dropping the forward history.
    fn go(&mut self, screen: Screen) -> Vec<Command> {
        if *self.screen() == screen {
            return Vec::new();
        }
        let from = self.screen().clone();
        self.history.truncate(self.at + 1);
        self.history.push(screen);
        self.at += 1;
        // History is for going back a few steps, not a log of the session.
        if self.history.len() > 50 {
            self.history.remove(0);
            self.at -= 1;
        }
        self.entered(&from)
    }

    fn back(&mut self) -> Vec<Command> {
        if self.at == 0 {
            return Vec::new();
        }
        let from = self.screen().clone();
        self.at -= 1;
        self.entered(&from)
    }

    /// After the screen changed from `from`: start or stop what it needs.
    fn entered(&mut self, from: &Screen) -> Vec<Command> {
        let mut out = Vec::new();
        let to = self.screen().clone();
        let reads_events = matches!(
            to,
            Screen::Table {
                kind: ViewKind::Events,
                ..
            } | Screen::PoolHistory { .. }
        );
        if reads_events && !self.events_watched {
            self.events_watched = true;
            out.push(Command::WatchEvents);
        }
        if let Screen::Table { kind, .. } = from
            && from != &to
        {
            // Marks belong to the view they were made in.
            self.tables[kind.index()].marks.clear();
        }
        if matches!(from, Screen::Logs { .. }) && from != &to {
            self.logs = None;
            out.push(Command::StopLogs);
        }
        match to {
            Screen::Table { kind, .. } => {
                self.tables[kind.index()].stale = true;
                self.refresh_current();
            }
            Screen::Logs {
                source, previous, ..
            } => {
                if from != self.screen() {
                    let id = self.next_stream;
                    self.next_stream += 1;
                    self.logs = Some(LogsState {
                        id,
                        buffer: LogBuffer::with_capacity(self.opts.log_capacity),
                        prefix: source.prefix.clone(),
                        follow: true,
                        wrap: false,
                        timestamps: false,
                        top: 0,
                        search: None,
                        matched: None,
                        ended: None,
                    });
                    let context = source.context.clone();
                    out.push(fleet::routed(
                        &context,
                        Command::StreamLogs {
                            id,
                            source,
                            previous,
                        },
                    ));
                }
            }
            // An audit record is shown from its row (see `audit_open`).
            Screen::Yaml { object } if object.kind == audit::AUDIT_RECORD => {}
            Screen::Yaml { object } => {
                self.yaml = YamlState::default();
                out.push(fleet::routed(
                    &object.context.clone(),
                    Command::LoadYaml(object),
                ));
            }
            // Read again each time: the CLI may have acted meanwhile.
            Screen::Audit => out.push(Command::LoadAudit),
            Screen::PoolHistory { .. } => {}
        }
        out
    }

    fn enter(&mut self) -> Vec<Command> {
        let Some((kind, _)) = self.table_kind() else {
            return Vec::new();
        };
        match kind {
            ViewKind::Pools => {
                let pool = self.selected_pool_name();
                match pool {
                    Some(p) => self.go_table(ViewKind::Tasks, Some(p)),
                    None => Vec::new(),
                }
            }
            ViewKind::Tasks | ViewKind::Agents => self.open_logs(false),
            ViewKind::Events => match self.selected_object() {
                Some(object) => self.go(Screen::Yaml { object }),
                None => Vec::new(),
            },
        }
    }

    fn selected_index(&self, kind: ViewKind) -> Option<usize> {
        let t = self.table(kind);
        t.visible.get(t.selected).map(|&i| i as usize)
    }

    fn selected_key(&self, kind: ViewKind) -> Option<String> {
        self.row_key(kind, self.selected_index(kind)?)
    }

    /// The selected pool, as a view is narrowed to it: its name, or
    /// `context/name` in a console over several contexts.
    fn selected_pool_name(&self) -> Option<String> {
        let i = self.selected_index(ViewKind::Pools)?;
        let p = self.snapshot.pools.get(i)?;
        Some(if p.context.is_empty() {
            p.name.clone()
        } else {
            format!("{}/{}", p.context, p.name)
        })
    }

    /// The context of row `i` of table `kind` (empty with one context).
    fn row_context(&self, kind: ViewKind, i: usize) -> String {
        let s = &self.snapshot;
        let c = match kind {
            ViewKind::Pools => s.pools.get(i).map(|r| &r.context),
            ViewKind::Agents => s.agents.get(i).map(|r| &r.context),
            ViewKind::Tasks => s.tasks.get(i).map(|r| &r.context),
            ViewKind::Events => s.events.get(i).map(|r| &r.context),
        };
        c.map(|c| c.to_string()).unwrap_or_default()
    }

    fn selected_object(&self) -> Option<ObjectKey> {
        let (kind, _) = self.table_kind()?;
        let i = self.selected_index(kind)?;
        let s = &self.snapshot;
        let (k, ns, name) = match kind {
            ViewKind::Pools => {
                let r = s.pools.get(i)?;
                ("AgentPool", &r.namespace, &r.name)
            }
            ViewKind::Agents => {
                let r = s.agents.get(i)?;
                ("Pod", &r.namespace, &r.name)
            }
            ViewKind::Tasks => {
                let r = s.tasks.get(i)?;
                ("AgentTask", &r.namespace, &r.name)
            }
            ViewKind::Events => {
                let r = s.events.get(i)?;
                return Some(ObjectKey {
                    context: r.context.to_string(),
                    kind: "Event",
                    namespace: r.namespace.clone(),
                    name: fleet::name_of_key(&r.key).to_owned(),
                });
            }
        };
        Some(ObjectKey {
            context: self.row_context(kind, i),
            kind: k,
            namespace: ns.clone(),
            name: name.clone(),
        })
    }

    fn open_logs(&mut self, previous: bool) -> Vec<Command> {
        let Some((kind, _)) = self.table_kind() else {
            return Vec::new();
        };
        let Some(i) = self.selected_index(kind) else {
            return Vec::new();
        };
        let s = self.snapshot.clone();
        let found = match kind {
            ViewKind::Tasks => s.tasks.get(i).map(|t| {
                let log = t.log();
                let title = match &log {
                    Some(src) if t.job.is_none() => {
                        format!("task {} on agent {}", t.name, src.pod)
                    }
                    Some(src) => format!(
                        "task {} — job {} pod {} ({})",
                        t.name,
                        t.job.as_deref().unwrap_or("-"),
                        src.pod,
                        src.container.as_deref().unwrap_or("all")
                    ),
                    None => String::new(),
                };
                (log, title, t.phase)
            }),
            ViewKind::Agents => s.agents.get(i).map(|a| {
                (
                    Some(LogSource {
                        context: a.context.to_string(),
                        namespace: a.namespace.clone(),
                        pod: a.name.clone(),
                        // A task pod's output is in its worker's log.
                        container: (a.component == "task").then(|| "worker".to_owned()),
                        prefix: None,
                        task: None,
                    }),
                    format!("pod {}", a.name),
                    crate::crd::TaskPhase::Running,
                )
            }),
            _ => None,
        };
        match found {
            Some((Some(source), title, _)) => {
                let title = if previous {
                    format!("{title} (previous container)")
                } else {
                    title
                };
                let title = if source.context.is_empty() {
                    title
                } else {
                    format!("{title} in {}", source.context)
                };
                self.go(Screen::Logs {
                    title,
                    source,
                    previous,
                })
            }
            Some((None, _, phase)) => {
                self.toast(
                    format!("no pod to read yet: the task is {}", phase.as_str()),
                    false,
                );
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    fn prompt_key(&mut self, k: KeyEvent) -> Vec<Command> {
        let Some(prompt) = &mut self.prompt else {
            return Vec::new();
        };
        match (prompt, k.code) {
            (_, KeyCode::Esc) => {
                if let Some(Prompt::Filter(_)) = self.prompt.take() {
                    // Esc while typing a filter drops it.
                    match self.screen().clone() {
                        Screen::Table { kind, .. } => self.set_filter(kind, String::new()),
                        Screen::Logs { .. } => {
                            if let Some(l) = &mut self.logs {
                                l.search = None;
                                l.matched = None;
                            }
                        }
                        Screen::Yaml { .. } | Screen::PoolHistory { .. } => {}
                        Screen::Audit => self.audit_filter(String::new()),
                    }
                }
                Vec::new()
            }
            (Prompt::Command(input), KeyCode::Enter) => {
                let line = input.value().trim().to_owned();
                self.prompt = None;
                self.run_command(&line)
            }
            (Prompt::Command(input), KeyCode::Tab) | (Prompt::Command(input), KeyCode::Right)
                if input.cursor() == input.value().chars().count() =>
            {
                let snapshot = self.snapshot.clone();
                if let Some(s) = complete_line(input.value(), &snapshot) {
                    input.set(s);
                }
                Vec::new()
            }
            (Prompt::Command(input), KeyCode::Up | KeyCode::Down) => {
                if self.command_history.is_empty() {
                    return Vec::new();
                }
                let n = self.command_history.len();
                let cur = self.command_cursor.unwrap_or(n);
                let next = if k.code == KeyCode::Up {
                    cur.saturating_sub(1)
                } else {
                    (cur + 1).min(n)
                };
                self.command_cursor = Some(next);
                *input = Field::new(self.command_history.get(next).cloned().unwrap_or_default());
                Vec::new()
            }
            (Prompt::Filter(_), KeyCode::Enter) => {
                self.prompt = None;
                if let Screen::Logs { .. } = self.screen() {
                    self.search_step(true);
                }
                Vec::new()
            }
            (Prompt::Command(input) | Prompt::Filter(input), _) => {
                if input.key(k) {
                    self.prompt_changed();
                }
                Vec::new()
            }
        }
    }

    /// The filter applies as it is typed.
    fn prompt_changed(&mut self) {
        let Some(Prompt::Filter(input)) = &self.prompt else {
            return;
        };
        let text = input.value().to_owned();
        match self.screen().clone() {
            Screen::Table { kind, .. } => self.set_filter(kind, text),
            Screen::Logs { .. } => {
                if let Some(l) = &mut self.logs {
                    l.search = regex::RegexBuilder::new(&text)
                        .case_insensitive(true)
                        .build()
                        .ok()
                        .filter(|_| !text.is_empty())
                        .map(|re| (text, re));
                }
            }
            Screen::Yaml { .. } | Screen::PoolHistory { .. } => {}
            Screen::Audit => self.audit_filter(text),
        }
    }

    fn run_command(&mut self, line: &str) -> Vec<Command> {
        if line.is_empty() {
            return Vec::new();
        }
        if self.command_history.last().map(String::as_str) != Some(line) {
            self.command_history.push(line.to_owned());
        }
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or_default();
        let arg = words.next().map(str::to_owned);
        let kind = match cmd {
            "pools" | "pool" | "ap" | "agentpools" => Some(ViewKind::Pools),
            "agents" | "agent" | "po" | "pod" | "pods" => Some(ViewKind::Agents),
            "tasks" | "task" | "at" | "agenttasks" => Some(ViewKind::Tasks),
            "events" | "event" | "ev" => Some(ViewKind::Events),
            _ => None,
        };
        if let Some(kind) = kind {
            // `:tasks platform` opens the tasks of pool platform.
            return self.go_table(kind, arg);
        }
        match cmd {
            "q" | "quit" | "q!" => vec![Command::Quit],
            "audit" => self.go(Screen::Audit),
            "bundle" | "shell" | "sh" | "attach" if self.opts.bundle.is_some() => {
                let what = if cmd == "bundle" {
                    "a new bundle"
                } else {
                    "a shell"
                };
                let text = self
                    .opts
                    .bundle
                    .as_ref()
                    .map(|b| b.refusal(what))
                    .unwrap_or_default();
                self.toast(text, true);
                Vec::new()
            }
            "bundle" => self.take_bundle(arg),
            "shell" | "sh" | "attach" => self.shell_named(arg, words.next()),
            "help" => {
                self.help = true;
                Vec::new()
            }
            "ns" | "namespace" | "namespaces" => {
                let now = if self.opts.all_namespaces {
                    "every namespace (-A)".to_owned()
                } else {
                    format!("namespace {}", self.opts.namespace)
                };
                self.toast(
                    format!(
                        "not in agentdeck: the console watches {now}; start it with -n NAME or -A"
                    ),
                    false,
                );
                Vec::new()
            }
            "ctx" | "context" | "contexts" => self.narrow_context(arg),
            other => {
                self.toast(
                    format!(
                        "unknown command :{other}; try {}",
                        [
                            "pools", "agents", "tasks", "events", "audit", "bundle", "help", "q"
                        ]
                        .map(|c| format!(":{c}"))
                        .join(" ")
                    ),
                    true,
                );
                Vec::new()
            }
        }
    }

    fn set_filter(&mut self, kind: ViewKind, text: String) {
        let t = &mut self.tables[kind.index()];
        if t.filter_text != text {
            // Marks act on what is shown: a new filter starts over.
            t.marks.clear();
        }
        t.filter = Filter::parse(&text);
        t.filter_text = text;
        self.refilter(kind, false);
    }

    fn sort(&mut self, key: SortKey) -> Vec<Command> {
        let Some((kind, _)) = self.table_kind() else {
            return Vec::new();
        };
        let t = &mut self.tables[kind.index()];
        if t.sort == key {
            t.reverse = !t.reverse;
        } else {
            t.sort = key;
            t.reverse = false;
        }
        self.refilter(kind, true);
        Vec::new()
    }

    fn refresh_current(&mut self) {
        if let Some((kind, _)) = self.table_kind()
            && self.tables[kind.index()].stale
        {
            self.refilter(kind, true);
        }
    }

    /// Recomputes a table's order (when `resort`) and visible rows, keeping
    /// the selected row selected when it is still there.
    fn refilter(&mut self, kind: ViewKind, resort: bool) {
        let keep_key = self.tables[kind.index()].selected_key.clone();
        let showing = self.table_kind().map(|(k, _)| k) == Some(kind);
        let pool = match self.screen() {
            Screen::Table { kind: k, pool } if *k == kind => pool.clone(),
            _ => None,
        };
        let snap = self.snapshot.clone();
        let t = &mut self.tables[kind.index()];
        let resort = resort || t.stale || t.order.is_empty();
        let matcher = &mut self.matcher;
        let narrow = self.narrow.clone();
        macro_rules! run {
            ($rows:expr) => {{
                let rows = $rows;
                if resort {
                    t.order = sort_order(rows, t.sort, t.reverse);
                }
                let keep = |r: &_| {
                    pool.as_deref().is_none_or(|p| fleet::in_pool(r, p))
                        && narrow.as_deref().is_none_or(|c| Row::context(r) == c)
                };
                t.visible = t.filter.apply(rows, &t.order, keep, matcher);
                if !t.marks.is_empty() {
                    let shown: BTreeSet<&str> =
                        t.visible.iter().map(|&i| rows[i as usize].key()).collect();
                    t.marks.retain(|k| shown.contains(k.as_str()));
                }
                match keep_key.as_deref() {
                    None => Kept::Nothing,
                    Some(k) => match t.visible.iter().position(|&i| rows[i as usize].key() == k) {
                        Some(at) => Kept::At(at),
                        None if rows.iter().any(|r| r.key() == k) => Kept::FilteredOut,
                        None => Kept::Gone(fleet::name_of_key(k).to_owned()),
                    },
                }
            }};
        }
        let kept = match kind {
            ViewKind::Pools => run!(&snap.pools),
            ViewKind::Agents => run!(&snap.agents),
            ViewKind::Tasks => run!(&snap.tasks),
            ViewKind::Events => run!(&snap.events),
        };
        t.stale = false;
        let mut gone = None;
        match kept {
            Kept::At(i) => t.selected = i,
            // Not shown under the new filter: back to the top.
            Kept::FilteredOut => t.selected = 0,
            // Deleted: its neighbour moves up into its place.
            Kept::Gone(name) => gone = Some(name),
            Kept::Nothing => {}
        }
        self.clamp(kind);
        if let Some(name) = gone
            && showing
            && kind != ViewKind::Events
        {
            let now = self.tables[kind.index()]
                .selected_key
                .as_deref()
                .map(|k| fleet::name_of_key(k).to_owned());
            let what = &kind.as_str()[..kind.as_str().len() - 1];
            self.toast(
                match now {
                    Some(n) => format!("{what} {name} is gone; selected {n}"),
                    None => format!("{what} {name} is gone"),
                },
                false,
            );
        }
    }

    /// The key of row `i` of table `kind` in the current snapshot.
    fn row_key(&self, kind: ViewKind, i: usize) -> Option<String> {
        let s = &self.snapshot;
        Some(match kind {
            ViewKind::Pools => s.pools.get(i)?.key.clone(),
            ViewKind::Agents => s.agents.get(i)?.key.clone(),
            ViewKind::Tasks => s.tasks.get(i)?.key.clone(),
            ViewKind::Events => s.events.get(i)?.key.clone(),
        })
    }

    fn clamp_all(&mut self) {
        for k in ViewKind::ALL {
            self.clamp(k);
        }
    }

    fn clamp(&mut self, kind: ViewKind) {
        let page = self.page();
        let t = &mut self.tables[kind.index()];
        let n = t.visible.len();
        t.selected = t.selected.min(n.saturating_sub(1));
        if t.selected < t.offset {
            t.offset = t.selected;
        } else if t.selected >= t.offset + page {
            t.offset = t.selected + 1 - page;
        }
        t.offset = t.offset.min(n.saturating_sub(page));
        // A stale table's rows are of an older snapshot: its key stays
        // until it is filtered again.
        if !t.stale {
            let row = t.visible.get(t.selected).map(|&i| i as usize);
            let key = row.and_then(|i| self.row_key(kind, i));
            let t = &mut self.tables[kind.index()];
            if key.is_some() {
                t.selected_key = key;
            }
        }
    }

    fn move_by(&mut self, delta: i64) -> Vec<Command> {
        match self.screen().clone() {
            Screen::Table { kind, .. } => {
                let t = &mut self.tables[kind.index()];
                let n = t.visible.len() as i64;
                t.selected = (t.selected as i64 + delta).clamp(0, (n - 1).max(0)) as usize;
                self.clamp(kind);
            }
            Screen::Logs { .. } => {
                let page = self.size.1 as usize;
                if let Some(l) = &mut self.logs {
                    let max = l.buffer.len().saturating_sub(1);
                    let top = if l.follow {
                        l.buffer
                            .len()
                            .saturating_sub(page.saturating_sub(HEADER_LINES as usize + 3))
                    } else {
                        l.top
                    };
                    l.follow = false;
                    l.top = (top as i64 + delta).clamp(0, max as i64) as usize;
                    if delta > 0 && l.top >= max {
                        l.follow = true;
                    }
                }
            }
            Screen::Yaml { .. } => {
                let max = self.yaml.lines.len().saturating_sub(1) as i64;
                self.yaml.top = (self.yaml.top as i64 + delta).clamp(0, max.max(0)) as usize;
            }
            Screen::Audit => self.audit_move(delta),
            Screen::PoolHistory { .. } => self.pool_history_step(delta),
        }
        Vec::new()
    }

    fn search_step(&mut self, forward: bool) {
        let Some(l) = &mut self.logs else { return };
        let Some((_, re)) = &l.search else { return };
        let from = l.matched.unwrap_or(if forward {
            l.top.saturating_sub(1).min(l.buffer.len())
        } else {
            l.top
        });
        if let Some(i) = l.buffer.find(re, from, forward) {
            l.matched = Some(i);
            l.follow = false;
            l.top = i.saturating_sub(2);
        } else {
            let what = l.search.as_ref().map(|s| s.0.clone()).unwrap_or_default();
            self.toast(format!("no line matches {what:?}"), false);
        }
    }
}

/// What Tab makes of a `:` line: the command completed, or its argument
/// (a pool's name after `:pools`/`:agents`/`:tasks`/`:events`/`:bundle`, an
/// agent's after `:shell`) completed as far as the names agree.
pub fn complete_line(line: &str, snapshot: &Snapshot) -> Option<String> {
    let Some((cmd, arg)) = line.trim_start().split_once(' ') else {
        return complete(line).map(str::to_owned);
    };
    let arg = arg.trim_start();
    if arg.contains(' ') {
        return None;
    }
    let names: Vec<&str> = match cmd {
        "pools" | "pool" | "ap" | "agentpools" | "agents" | "agent" | "po" | "pod" | "pods"
        | "tasks" | "task" | "at" | "agenttasks" | "events" | "event" | "ev" | "bundle" => {
            snapshot.pools.iter().map(|p| p.name.as_str()).collect()
        }
        "shell" | "sh" | "attach" => snapshot.agents.iter().map(|a| a.name.as_str()).collect(),
        // The contexts rows came from (a console over several).
        "ctx" | "context" => {
            let mut c: Vec<&str> = snapshot.pools.iter().map(|p| &*p.context).collect();
            c.extend(snapshot.agents.iter().map(|a| &*a.context));
            c.sort_unstable();
            c.dedup();
            c.retain(|c| !c.is_empty());
            c
        }
        _ => return None,
    };
    let matching: Vec<&str> = names.into_iter().filter(|n| n.starts_with(arg)).collect();
    let first = *matching.first()?;
    // The longest prefix every match shares.
    let mut common = first.len();
    for m in &matching[1..] {
        common = first
            .bytes()
            .zip(m.bytes())
            .take(common)
            .take_while(|(a, b)| a == b)
            .count();
    }
    let completed = &first[..common];
    (completed.len() > arg.len()).then(|| format!("{cmd} {completed}"))
}

/// What a k9s habit does here, for keys agentdeck does not bind: the
/// console answers instead of doing nothing.
pub fn k9s_hint(key: Key) -> Option<&'static str> {
    let c = match key.code {
        KeyCode::Char(c) => c,
        _ => return None,
    };
    Some(match (key.ctrl, c) {
        (false, '0' | '6' | '7' | '8' | '9') => {
            "not in agentdeck: 1–5 are the views (pools agents tasks events audit); -A at start for every namespace"
        }
        (true, 'a') => {
            "not in agentdeck: commands are :pools :agents :tasks :events :audit :bundle :shell :q (Tab completes)"
        }
        (false, 'e') => "not in agentdeck: y shows the YAML; edit with kubectl edit",
        (true, 'd') => {
            "not in agentdeck: nothing is deleted from here; ctrl-k cancels a task, d drains"
        }
        _ => return None,
    })
}

/// The completion of a `:` command prefix.
pub fn complete(prefix: &str) -> Option<&'static str> {
    let p = prefix.trim();
    if p.is_empty() {
        return None;
    }
    COMMANDS
        .iter()
        .copied()
        .find(|c| c.starts_with(p) && c.len() > p.len())
}

fn sort_order<R: Row>(rows: &[R], key: SortKey, reverse: bool) -> Vec<u32> {
    let mut order: Vec<u32> = (0..rows.len() as u32).collect();
    let r = |i: &u32| &rows[*i as usize];
    match key {
        SortKey::Natural => {}
        SortKey::Name => order.sort_by(|a, b| r(a).name().cmp(r(b).name())),
        // Newest first, as people read ages.
        SortKey::Age => order.sort_by_key(|i| std::cmp::Reverse(r(i).when())),
        SortKey::Status => order.sort_by(|a, b| r(a).status().cmp(r(b).status())),
        SortKey::Pool => order.sort_by(|a, b| r(a).pool().cmp(&r(b).pool())),
    }
    if reverse {
        order.reverse();
    }
    order
}

#[cfg(test)]
mod tests;
