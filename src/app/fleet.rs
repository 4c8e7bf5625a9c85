//! Several kube contexts in one console (`--context a --context b`,
//! `--all-contexts`, `contexts:` in the configuration).
//!
//! Each context has its own watches, embedded controller and workers (see
//! `tui::fleet`); what the app sees is one snapshot whose rows carry their
//! context, merged here by [`Merger`], and one status per context. A
//! command about a row goes to that row's context: it is wrapped in
//! [`Command::In`] where it is made.
//!
//! With one context nothing here is used: rows keep an empty context and
//! their `namespace/name` keys, and commands are not wrapped.

use std::sync::Arc;

use super::rows::{AgentRow, ContextCounts, EventRow, PoolRow, Row, Snapshot, TaskCounts, TaskRow};
use super::{App, ClusterStatus, Command, Role, WatchState};

/// One context of the console and what its status probe last said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextState {
    pub name: String,
    pub status: ClusterStatus,
}

impl ContextState {
    pub fn new(name: &str, read_only: bool) -> ContextState {
        ContextState {
            name: name.to_owned(),
            status: ClusterStatus {
                role: if read_only {
                    Role::ReadOnly
                } else {
                    Role::Observer
                },
                ..ClusterStatus::default()
            },
        }
    }
}

/// `command`, sent to the workers of `context` (as is when `context` is
/// empty: the console's only one).
pub fn routed(context: &str, command: Command) -> Command {
    if context.is_empty() {
        command
    } else {
        Command::In {
            context: context.to_owned(),
            command: Box::new(command),
        }
    }
}

/// A row's key in a console over several contexts: its context first, so
/// the same namespace/name in two clusters are two rows.
pub fn key_in(context: &str, key: &str) -> String {
    if context.is_empty() {
        key.to_owned()
    } else {
        format!("{context}/{key}")
    }
}

/// The object name at the end of a row key (`[context/]namespace/name`).
pub fn name_of_key(key: &str) -> &str {
    key.rsplit_once('/').map_or(key, |(_, name)| name)
}

/// Whether `r` belongs to the pool a view is narrowed to: `pool` is a
/// pool's name (every context's pool of that name) or `context/name`
/// (one context's; a pool name has no `/`, a context name may).
pub fn in_pool<R: Row>(r: &R, pool: &str) -> bool {
    match pool.rsplit_once('/') {
        Some((context, name)) => r.context() == context && r.pool() == Some(name),
        None => r.pool() == Some(pool),
    }
}

/// Each context's latest snapshot, and its rows with their context set.
///
/// A context's rows are copied (to set the context and key) once per row
/// version: the row builder shares unchanged rows between snapshots, and
/// the copy of each shared row is kept for the next merge.
#[derive(Default)]
pub struct Merger {
    parts: Vec<Part>,
}

#[derive(Default)]
struct Part {
    context: Arc<str>,
    latest: Option<Arc<Snapshot>>,
    pools: Tagged<PoolRow>,
    agents: Tagged<AgentRow>,
    tasks: Tagged<TaskRow>,
    events: Tagged<EventRow>,
}

/// One table's rows of the last snapshot, each with its copy that carries
/// the context, in order.
struct Tagged<R> {
    last: Vec<(Arc<R>, Arc<R>)>,
}

impl<R> Default for Tagged<R> {
    fn default() -> Self {
        Tagged { last: Vec::new() }
    }
}

/// How far ahead a row is looked for where the order moved (a row added,
/// changed or removed): beyond, a row is copied again, which is only
/// slower.
const WINDOW: usize = 32;

/// Sets a row's context and key.
pub trait Tag: Clone {
    fn tag(&mut self, context: &Arc<str>);
}

macro_rules! tag_key {
    ($t:ty) => {
        impl Tag for $t {
            fn tag(&mut self, context: &Arc<str>) {
                self.key = key_in(context, &self.key);
                self.context = context.clone();
            }
        }
    };
}
tag_key!(PoolRow);
tag_key!(AgentRow);
tag_key!(EventRow);
// A task's log source is read in its row's context (`TaskRow::log`).
tag_key!(TaskRow);

impl<R: Tag> Tagged<R> {
    /// Takes the table's new rows: a row the builder shared from the last
    /// snapshot keeps its copy (found in the same order, one pointer
    /// comparison a row when little changed); a new or changed one is
    /// copied with its context.
    fn update(&mut self, context: &Arc<str>, rows: &[Arc<R>]) {
        let last = std::mem::take(&mut self.last);
        let mut next = Vec::with_capacity(rows.len());
        // Where in the last rows the next one is looked for.
        let mut at = 0;
        for (i, source) in rows.iter().enumerate() {
            let end = (at + WINDOW).min(last.len());
            let tagged = match (at..end).find(|&j| Arc::ptr_eq(&last[j].0, source)) {
                Some(j) => {
                    at = j + 1;
                    last[j].1.clone()
                }
                None => {
                    // The last row at `at`, if it is not further down the
                    // new rows, was changed or removed: past it.
                    let ahead = &rows[i + 1..(i + 1 + WINDOW).min(rows.len())];
                    if at < last.len() && !ahead.iter().any(|r| Arc::ptr_eq(r, &last[at].0)) {
                        at += 1;
                    }
                    let mut row = R::clone(source);
                    row.tag(context);
                    Arc::new(row)
                }
            };
            next.push((source.clone(), tagged));
        }
        self.last = next;
    }

    fn rows(&self) -> impl Iterator<Item = Arc<R>> + '_ {
        self.last.iter().map(|(_, tagged)| tagged.clone())
    }
}

impl Merger {
    /// A merger of `contexts`, in the order their rows are shown.
    pub fn new(contexts: &[String]) -> Merger {
        Merger {
            parts: contexts
                .iter()
                .map(|c| Part {
                    context: c.as_str().into(),
                    ..Part::default()
                })
                .collect(),
        }
    }

    /// Takes context `i`'s latest snapshot.
    pub fn take(&mut self, i: usize, snapshot: Arc<Snapshot>) {
        if let Some(p) = self.parts.get_mut(i) {
            let c = p.context.clone();
            p.pools.update(&c, &snapshot.pools);
            p.agents.update(&c, &snapshot.agents);
            p.tasks.update(&c, &snapshot.tasks);
            p.events.update(&c, &snapshot.events);
            p.latest = Some(snapshot);
        }
    }

    /// Every context's latest rows as one snapshot: each context's rows in
    /// its own order, the contexts in theirs.
    pub fn merged(&self) -> Snapshot {
        let mut out = Snapshot::default();
        let mut counts = TaskCounts::default();
        for p in &self.parts {
            let Some(s) = &p.latest else { continue };
            out.pools.extend(p.pools.rows());
            out.agents.extend(p.agents.rows());
            out.tasks.extend(p.tasks.rows());
            out.events.extend(p.events.rows());
            out.contexts.push(ContextCounts {
                context: p.context.clone(),
                pools: s.pools.len(),
                agents: s.agents.len(),
                tasks: s.tasks.len(),
                events: s.events.len(),
                task_counts: s.task_counts,
            });
            counts.pending += s.task_counts.pending;
            counts.running += s.task_counts.running;
            counts.failed += s.task_counts.failed;
            // The oldest of the parts: what the whole is as of.
            out.built = match (out.built, s.built) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        out.task_counts = counts;
        out
    }
}

impl App {
    /// Whether the console is over several contexts.
    pub fn is_fleet(&self) -> bool {
        self.contexts.len() > 1
    }

    /// A context's status changed: its line in the header, and the
    /// console's overall watch state (what an empty table says).
    pub(super) fn context_status(&mut self, context: &str, status: ClusterStatus) {
        let read_only = self.opts.read_only;
        if let Some(c) = self.contexts.iter_mut().find(|c| c.name == context) {
            c.status = ClusterStatus {
                role: if read_only {
                    Role::ReadOnly
                } else {
                    status.role
                },
                ..status
            };
        }
        self.status = overall(&self.contexts, self.narrow.as_deref(), read_only);
    }

    /// `:ctx [NAME]`: the tables narrowed to one context, or widened again.
    pub(super) fn narrow_context(&mut self, name: Option<String>) -> Vec<Command> {
        if !self.is_fleet() {
            let now = if self.opts.context.is_empty() {
                "the current context".to_owned()
            } else {
                format!("context {}", self.opts.context)
            };
            self.toast(
                format!(
                    "the console runs against {now}; start it with --context A --context B (or --all-contexts) to see several"
                ),
                false,
            );
            return Vec::new();
        }
        match name {
            None => {
                self.narrow = None;
                self.toast("every context shown".into(), false);
            }
            Some(n) if self.contexts.iter().any(|c| c.name == n) => {
                self.toast(format!("context {n} only (:ctx shows every one)"), false);
                self.narrow = Some(n);
            }
            Some(n) => {
                let known: Vec<&str> = self.contexts.iter().map(|c| c.name.as_str()).collect();
                self.toast(
                    format!(
                        "no context {n} in this console; contexts: {}",
                        known.join(", ")
                    ),
                    true,
                );
                return Vec::new();
            }
        }
        self.status = overall(&self.contexts, self.narrow.as_deref(), self.opts.read_only);
        for t in &mut self.tables {
            t.stale = true;
            t.marks.clear();
        }
        self.refresh_current();
        Vec::new()
    }

    /// The one context of `rows`, or a toast saying they are of several.
    pub(super) fn one_context<'a, R: Row>(&mut self, rows: &[&'a R]) -> Option<&'a str> {
        let first = rows.first().map_or("", |r| r.context());
        if rows.iter().all(|r| r.context() == first) {
            return Some(first);
        }
        let mut names: Vec<&str> = rows.iter().map(|r| r.context()).collect();
        names.sort_unstable();
        names.dedup();
        self.toast(
            format!(
                "the marked rows are in {} contexts ({}): act on one at a time (:ctx NAME shows one)",
                names.len(),
                names.join(", ")
            ),
            true,
        );
        None
    }
}

/// The watch state of the contexts shown, as one: synced while any shown
/// context is (its rows are there), partial while any is, else the first
/// one's trouble. A kind loads while any shown context loads it, and is
/// refused when every shown context refuses it.
fn overall(contexts: &[ContextState], narrow: Option<&str>, read_only: bool) -> ClusterStatus {
    let shown: Vec<&ContextState> = contexts
        .iter()
        .filter(|c| narrow.is_none_or(|n| c.name == n))
        .collect();
    let watch = if shown.iter().any(|c| c.status.watch == WatchState::Synced) {
        WatchState::Synced
    } else if let Some(c) = shown
        .iter()
        .find(|c| matches!(c.status.watch, WatchState::Partial(_)))
    {
        c.status.watch.clone()
    } else {
        shown
            .iter()
            .find(|c| c.status.watch != WatchState::Syncing)
            .map_or(WatchState::Syncing, |c| c.status.watch.clone())
    };
    let role = if read_only {
        Role::ReadOnly
    } else if shown.iter().any(|c| c.status.role == Role::Leader) {
        Role::Leader
    } else {
        Role::Observer
    };
    let mut loading: Vec<String> = shown
        .iter()
        .flat_map(|c| c.status.loading.iter().cloned())
        .collect();
    loading.sort();
    loading.dedup();
    let refused = shown.first().map_or_else(Vec::new, |first| {
        first
            .status
            .refused
            .iter()
            .filter(|(k, _)| shown.iter().all(|c| c.status.refusal(k).is_some()))
            .cloned()
            .collect()
    });
    ClusterStatus {
        role,
        watch,
        latency: shown.iter().filter_map(|c| c.status.latency).max(),
        role_reason: shown
            .iter()
            .find(|c| c.status.role == role)
            .and_then(|c| c.status.role_reason.clone()),
        loading,
        // Several contexts' rows in one table: one context's progress
        // would not count them.
        listing: Vec::new(),
        refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::fixtures;

    /// The fixture cluster's rows, as one context's snapshot.
    pub(crate) fn snapshot() -> Snapshot {
        let now = fixtures::now();
        let thresholds = crate::health::FreshnessThresholds {
            stale_after: std::time::Duration::from_secs(20),
            offline_after: std::time::Duration::from_secs(60),
        };
        crate::app::rows::build(&fixtures::sources(now, 12), now, &thresholds)
    }

    fn fleet_snapshot(names: &[&str]) -> Vec<Arc<Snapshot>> {
        names.iter().map(|_| Arc::new(snapshot())).collect()
    }

    #[test]
    fn merged_rows_carry_their_context_and_keys_stay_unique() {
        let contexts = vec!["a".to_owned(), "b".to_owned()];
        let mut m = Merger::new(&contexts);
        let parts = fleet_snapshot(&["a", "b"]);
        m.take(0, parts[0].clone());
        m.take(1, parts[1].clone());
        let s = m.merged();
        let n = parts[0].pools.len();
        assert_eq!(s.pools.len(), 2 * n);
        assert!(s.pools[..n].iter().all(|p| &*p.context == "a"));
        assert!(s.pools[n..].iter().all(|p| &*p.context == "b"));
        assert_eq!(s.pools[0].key, format!("a/{}", parts[0].pools[0].key));
        let keys: std::collections::BTreeSet<&str> =
            s.tasks.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys.len(), s.tasks.len(), "a key is in both contexts");
        assert!(
            s.tasks
                .iter()
                .filter_map(|t| t.log())
                .all(|l| l.context == "a" || l.context == "b")
        );
        let c = parts[0].task_counts;
        assert_eq!(s.task_counts.pending, 2 * c.pending);
    }

    #[test]
    fn a_row_shared_between_snapshots_is_copied_once() {
        let contexts = vec!["a".to_owned(), "b".to_owned()];
        let mut m = Merger::new(&contexts);
        let first = Arc::new(snapshot());
        m.take(0, first.clone());
        let one = m.merged();
        // The next snapshot shares every row but the first pool's.
        let mut next = (*first).clone();
        let mut changed = (*next.pools[0]).clone();
        changed.ready += 1;
        next.pools[0] = Arc::new(changed);
        m.take(0, Arc::new(next));
        let two = m.merged();
        assert!(!Arc::ptr_eq(&one.pools[0], &two.pools[0]));
        assert_eq!(two.pools[0].ready, one.pools[0].ready + 1);
        assert!(Arc::ptr_eq(&one.pools[1], &two.pools[1]));
        assert!(Arc::ptr_eq(&one.tasks[0], &two.tasks[0]));
    }

    #[test]
    fn rows_added_changed_and_removed_anywhere_come_out_as_a_fresh_copy_would() {
        let base = snapshot();
        let pool = base.pools[0].clone();
        let row = |n: usize| {
            let mut r = (*pool).clone();
            r.name = format!("pool-{n:04}");
            r.key = format!("ns/{}", r.name);
            Arc::new(r)
        };
        let context: Arc<str> = "east".into();
        let mut tagged = Tagged::<PoolRow>::default();
        let mut rows: Vec<Arc<PoolRow>> = (0..200).map(row).collect();
        let mut next_name = 200;
        fastrand::seed(7);
        for step in 0..300 {
            tagged.update(&context, &rows);
            let out: Vec<Arc<PoolRow>> = tagged.rows().collect();
            assert_eq!(out.len(), rows.len(), "step {step}");
            for (t, s) in out.iter().zip(&rows) {
                let mut want = (**s).clone();
                want.tag(&context);
                assert_eq!(**t, want, "step {step}");
            }
            // The next snapshot: a few rows added, changed or removed
            // anywhere (sometimes many at once), the rest shared.
            let before = out;
            let edits = if step % 50 == 49 {
                80
            } else {
                fastrand::usize(0..4)
            };
            for _ in 0..edits {
                let i = fastrand::usize(0..=rows.len());
                match fastrand::u8(0..3) {
                    0 => {
                        rows.insert(i, row(next_name));
                        next_name += 1;
                    }
                    1 if i < rows.len() => {
                        let mut r = (*rows[i]).clone();
                        r.ready += 1;
                        rows[i] = Arc::new(r);
                    }
                    _ if i < rows.len() && rows.len() > 1 => {
                        rows.remove(i);
                    }
                    _ => {}
                }
            }
            // A few edits: only the rows added or changed are copied.
            if edits < 4 {
                tagged.update(&context, &rows);
                let after: Vec<Arc<PoolRow>> = tagged.rows().collect();
                let kept = after
                    .iter()
                    .filter(|a| before.iter().any(|b| Arc::ptr_eq(a, b)))
                    .count();
                assert!(
                    after.len() - kept <= edits,
                    "step {step}: {} copied for {edits} edits",
                    after.len() - kept
                );
            }
        }
    }

    #[test]
    fn a_context_that_has_not_answered_adds_nothing() {
        let contexts = vec!["a".to_owned(), "down".to_owned()];
        let mut m = Merger::new(&contexts);
        m.take(0, Arc::new(snapshot()));
        let s = m.merged();
        assert!(s.pools.iter().all(|p| &*p.context == "a"));
        assert!(!s.pools.is_empty());
    }

    #[test]
    fn pool_scopes_name_one_context_or_every_one() {
        let mut row = (*snapshot().tasks[0]).clone();
        row.tag(&Arc::from("prod/eu"));
        let pool = row.pool.clone();
        assert!(in_pool(&row, &pool));
        assert!(in_pool(&row, &format!("prod/eu/{pool}")));
        assert!(!in_pool(&row, &format!("staging/{pool}")));
        assert_eq!(name_of_key(&row.key), row.name);
    }

    #[test]
    fn the_header_state_is_synced_while_any_shown_context_is() {
        let mut a = ContextState::new("a", false);
        let mut b = ContextState::new("b", false);
        a.status.watch = WatchState::Synced;
        b.status.watch = WatchState::Disconnected("connection refused".into());
        let both = [a, b];
        assert_eq!(overall(&both, None, false).watch, WatchState::Synced);
        assert_eq!(
            overall(&both, Some("b"), false).watch,
            WatchState::Disconnected("connection refused".into())
        );
        assert_eq!(overall(&both, None, true).role, Role::ReadOnly);
    }
}
