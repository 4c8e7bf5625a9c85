//! What each watch of the cluster view is doing, so that nobody trusts a
//! store whose watch is not running.
//!
//! A store fed by a watch is only as current as the watch: one that failed,
//! is listing again, or stopped reading keeps its last objects and looks
//! fine. Each watch (see [`super::listwatch`]) reports its phase to a
//! [`WatchCell`]; the [`WatchBoard`] holds every cell's phase for the
//! console's header (`watch synced` only while every watch watches), the
//! controller (which decides nothing on a view that is not current) and
//! `/metrics` (`agentdeck_watch_current`, `agentdeck_watch_restarts_total`
//! by kind and reason).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// What a watch is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Listing (the first time, or again after `410 Gone`).
    Listing,
    /// Listed and following the changes: its store is current.
    Watching,
    /// Its last attempt failed; it retries with backoff.
    Failing,
    /// The API refused it in a way that asking again soon will not change
    /// (403: this identity may not; 404: the resource is not served, as a
    /// CustomResourceDefinition not installed). The watch asks again slowly
    /// ([`REFUSED_FORBIDDEN_RECHECK`], [`REFUSED_NOT_SERVED_RECHECK`]) or at
    /// once on [`WatchBoard::recheck`]; it is an answer, not a sync that is
    /// taking long.
    Refused(Refusal),
}

/// How a watch was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 403 on `verb` (`list` or `watch`).
    Forbidden(&'static str),
    /// 404: the server does not serve the resource.
    NotServed,
}

/// How long a forbidden watch waits before asking again: rights change
/// rarely, and the user can ask at once (ctrl-r in the console).
pub const REFUSED_FORBIDDEN_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a watch of a resource the server does not serve waits before
/// asking again: installing the CRDs is the next thing a new user does,
/// and a 404 costs the server nothing.
pub const REFUSED_NOT_SERVED_RECHECK: std::time::Duration = std::time::Duration::from_secs(3);

/// Why a watch started over: each is counted in
/// `agentdeck_watch_restarts_total{kind, reason}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// The server ended the watch (its timeout): resumed from the last version.
    Ended,
    /// Nothing arrived for longer than the server's timeout: the connection
    /// is given up and the watch resumed.
    Idle,
    /// `410 Gone` (an ERROR event or an HTTP status): listed again.
    Gone,
    /// The list failed: listed again after backoff.
    ListFailed,
    /// The watch request failed: resumed after backoff.
    StartFailed,
    /// The watch stream failed or said ERROR: resumed after backoff.
    StreamFailed,
}

impl Restart {
    /// The metric's `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Restart::Ended => "ended",
            Restart::Idle => "idle",
            Restart::Gone => "gone",
            Restart::ListFailed => "list_failed",
            Restart::StartFailed => "start_failed",
            Restart::StreamFailed => "stream_failed",
        }
    }
}

/// One watch's state, as the board shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchStatus {
    pub phase: Phase,
    /// Why the last attempt failed (kept while listing again after it).
    pub reason: Option<String>,
    /// Failures since the watch last watched.
    pub failures_in_row: u32,
    /// Since when the watch is in this phase.
    pub since: Instant,
    /// Whether it has listed at least once (its store was whole once).
    pub listed_once: bool,
    /// While it lists: how far (see [`ListProgress`]).
    pub progress: Option<ListProgress>,
    /// Kept beside the controller's stores (see [`WatchBoard::cell_beside`]):
    /// nothing the controller decides waits on it.
    pub beside: bool,
}

/// How far a list has come: the objects its pages brought so far, and how
/// many the API said there are in all (`listed` and the last page's
/// `remainingItemCount`; unknown when the API leaves it out, as it does for
/// a list with a label selector).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListProgress {
    pub listed: u64,
    pub expected: Option<u64>,
}

impl WatchStatus {
    /// Whether the API has answered this watch: it listed once, or refused.
    pub fn answered(&self) -> bool {
        self.listed_once || matches!(self.phase, Phase::Refused(_))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    pub(crate) kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RestartLabels {
    pub(crate) kind: String,
    pub(crate) reason: &'static str,
}

/// The metric families the board writes (registered by
/// [`super::Metrics`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct WatchMetrics {
    pub(crate) current: Family<KindLabels, Gauge>,
    pub(crate) restarts: Family<RestartLabels, Counter>,
}

/// Every watch's state. Cheap to clone.
#[derive(Clone, Default)]
pub struct WatchBoard {
    watches: Arc<Mutex<BTreeMap<String, WatchStatus>>>,
    metrics: WatchMetrics,
    /// Wakes refused watches to ask again now.
    recheck: Arc<tokio::sync::Notify>,
}

/// How the board sums up: whether every watch is current and, when not,
/// the one that says most (failing before listing, the longest first).
/// Refused watches are not trouble to retry: they are listed apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoardSummary {
    pub all_watching: bool,
    pub worst: Option<(String, WatchStatus)>,
    /// Whether the API has answered every watch (see [`WatchStatus::answered`]).
    pub answered: bool,
    /// The refused watches, by kind.
    pub refused: Vec<(String, Refusal)>,
}

impl WatchBoard {
    pub(crate) fn with_metrics(metrics: WatchMetrics) -> Self {
        WatchBoard {
            watches: Arc::default(),
            metrics,
            recheck: Arc::default(),
        }
    }

    /// A cell for the watch of `kind` (listing until it says otherwise).
    pub fn cell(&self, kind: &str) -> WatchCell {
        // Every reason at zero from the start: `increase()` over a series
        // that appears at 1 does not see that first restart.
        for reason in [
            Restart::Ended,
            Restart::Idle,
            Restart::Gone,
            Restart::ListFailed,
            Restart::StartFailed,
            Restart::StreamFailed,
        ] {
            drop(self.metrics.restarts.get_or_create(&RestartLabels {
                kind: kind.to_owned(),
                reason: reason.as_str(),
            }));
        }
        let cell = WatchCell {
            board: self.clone(),
            kind: kind.to_owned(),
            watching: Arc::new(AtomicBool::new(false)),
        };
        cell.set(Phase::Listing, None);
        cell
    }

    /// A cell for a watch the controller does not read (the console's
    /// Events): shown like every other, but [`WatchBoard::all_watching`]
    /// does not wait for it, so a console's embedded controller acts
    /// while the Events are not watched yet, being listed or refused.
    pub fn cell_beside(&self, kind: &str) -> WatchCell {
        let cell = self.cell(kind);
        if let Some(s) = self.lock().get_mut(kind) {
            s.beside = true;
        }
        cell
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, WatchStatus>> {
        self.watches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Each watch's state, by kind.
    pub fn statuses(&self) -> BTreeMap<String, WatchStatus> {
        self.lock().clone()
    }

    /// Whether every watch is current, and which is not.
    pub fn summary(&self) -> BoardSummary {
        let watches = self.lock();
        let rank = |s: &WatchStatus| match s.phase {
            Phase::Failing => 0,
            _ => 1,
        };
        let worst = watches
            .iter()
            .filter(|(_, s)| matches!(s.phase, Phase::Failing | Phase::Listing))
            .min_by_key(|(_, s)| (rank(s), s.since))
            .map(|(k, s)| (k.clone(), s.clone()));
        let refused: Vec<(String, Refusal)> = watches
            .iter()
            .filter_map(|(k, s)| match s.phase {
                Phase::Refused(r) => Some((k.clone(), r)),
                _ => None,
            })
            .collect();
        BoardSummary {
            all_watching: watches
                .values()
                .all(|s| s.beside || s.phase == Phase::Watching),
            answered: watches.values().all(WatchStatus::answered),
            worst,
            refused,
        }
    }

    /// Whether the API has answered the watch of `kind` (listed once, or
    /// refused); false for a kind with no watch (yet).
    pub fn answered(&self, kind: &str) -> bool {
        self.lock().get(kind).is_some_and(WatchStatus::answered)
    }

    /// Whether the API has answered every watch but `late`'s (one started
    /// later, whose first list is not waited for).
    pub fn answered_but(&self, late: &str) -> bool {
        self.lock().iter().all(|(k, s)| k == late || s.answered())
    }

    /// Wakes every refused watch to ask the API again now.
    pub fn recheck(&self) {
        self.recheck.notify_waiters();
    }

    /// Whether every watch the controller reads is current.
    pub fn all_watching(&self) -> bool {
        self.lock()
            .values()
            .all(|s| s.beside || s.phase == Phase::Watching)
    }
}

/// What one watch reports to the board.
#[derive(Clone)]
pub struct WatchCell {
    board: WatchBoard,
    kind: String,
    /// Whether the phase is `Watching`: the per-event report is one load.
    watching: Arc<AtomicBool>,
}

impl WatchCell {
    /// A cell on a board of its own (a watch nobody looks at).
    pub fn detached(kind: &str) -> Self {
        WatchBoard::default().cell(kind)
    }

    fn set(&self, phase: Phase, failure: Option<String>) {
        let mut watches = self.board.lock();
        let now = Instant::now();
        let entry = watches
            .entry(self.kind.clone())
            .or_insert_with(|| WatchStatus {
                phase,
                reason: None,
                failures_in_row: 0,
                since: now,
                listed_once: false,
                progress: None,
                beside: false,
            });
        if entry.phase != phase {
            entry.since = now;
        }
        entry.phase = phase;
        entry.listed_once |= phase == Phase::Watching;
        if phase != Phase::Listing {
            entry.progress = None;
        }
        match failure {
            Some(why) => {
                entry.reason = Some(why);
                entry.failures_in_row = entry.failures_in_row.saturating_add(1);
            }
            None if phase == Phase::Watching => {
                entry.reason = None;
                entry.failures_in_row = 0;
            }
            None => {}
        }
        self.watching
            .store(phase == Phase::Watching, Ordering::Release);
        self.board
            .metrics
            .current
            .get_or_create(&KindLabels {
                kind: self.kind.clone(),
            })
            .set(i64::from(phase == Phase::Watching));
    }

    /// A list starts. A refused watch asking again stays refused until the
    /// API answers otherwise, so that what is shown does not flicker.
    pub fn listing(&self) {
        let refused = self
            .board
            .lock()
            .get(&self.kind)
            .is_some_and(|s| matches!(s.phase, Phase::Refused(_)));
        if !refused {
            self.set(Phase::Listing, None);
            if let Some(s) = self.board.lock().get_mut(&self.kind) {
                s.progress = Some(ListProgress::default());
            }
        }
    }

    /// A page of the list brought `items` objects, and said `remaining`
    /// more are to come (its `remainingItemCount`).
    pub fn page_listed(&self, items: usize, remaining: Option<i64>) {
        let mut watches = self.board.lock();
        let Some(p) = watches
            .get_mut(&self.kind)
            .and_then(|s| s.progress.as_mut())
        else {
            return;
        };
        p.listed += items as u64;
        p.expected = match remaining {
            Some(r) => Some(p.listed + u64::try_from(r).unwrap_or(0)),
            // The last page says nothing more is to come.
            None => p.expected.map(|e| e.max(p.listed)),
        };
    }

    /// Listed, or a watch started or delivered: the store is current.
    pub fn watching(&self) {
        if !self.watching.load(Ordering::Acquire) {
            self.set(Phase::Watching, None);
        }
    }

    /// An attempt failed with `why`; the watch starts over as `restart` says.
    pub fn failed(&self, restart: Restart, why: String) {
        self.count(restart);
        self.set(Phase::Failing, Some(why));
    }

    /// The API refused the watch as `refusal` says, `why` in its words.
    /// `true` when it was not refused so already (the refusal is news).
    pub fn refused(&self, refusal: Refusal, why: String) -> bool {
        let news = self
            .board
            .lock()
            .get(&self.kind)
            .is_none_or(|s| s.phase != Phase::Refused(refusal));
        if news {
            self.count(Restart::ListFailed);
        }
        self.set(Phase::Refused(refusal), Some(why));
        news
    }

    /// Resolves when someone asks refused watches to ask again now.
    pub async fn recheck_asked(&self) {
        self.board.recheck.notified().await;
    }

    /// The watch starts over for `restart` with nothing wrong (the server
    /// ended it, or it went quiet): counted, phase unchanged.
    pub fn restarted(&self, restart: Restart) {
        self.count(restart);
    }

    fn count(&self, restart: Restart) {
        self.board
            .metrics
            .restarts
            .get_or_create(&RestartLabels {
                kind: self.kind.clone(),
                reason: restart.as_str(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_counts_its_pages_against_what_the_api_said_is_to_come() {
        let board = WatchBoard::default();
        let cell = board.cell("AgentTask");
        let progress = || board.statuses()["AgentTask"].progress;
        cell.listing();
        assert_eq!(progress(), Some(ListProgress::default()));
        cell.page_listed(500, Some(1_500));
        assert_eq!(
            progress(),
            Some(ListProgress {
                listed: 500,
                expected: Some(2_000)
            })
        );
        // The last page carries no remainingItemCount.
        cell.page_listed(1_500, None);
        assert_eq!(
            progress(),
            Some(ListProgress {
                listed: 2_000,
                expected: Some(2_000)
            })
        );
        cell.watching();
        assert_eq!(progress(), None, "listed: nothing under way");
        // A list with a selector: the API says no total.
        cell.listing();
        cell.page_listed(10, None);
        assert_eq!(
            progress(),
            Some(ListProgress {
                listed: 10,
                expected: None
            })
        );
    }

    #[test]
    fn a_kind_is_answered_once_listed_or_refused() {
        let board = WatchBoard::default();
        assert!(!board.answered("AgentPool"), "no watch yet");
        let pools = board.cell("AgentPool");
        pools.listing();
        assert!(!board.answered("AgentPool"), "listing");
        pools.watching();
        assert!(board.answered("AgentPool"), "listed");
        let tasks = board.cell("AgentTask");
        tasks.refused(Refusal::Forbidden("list"), "403".into());
        assert!(board.answered("AgentTask"), "refused");
    }

    #[test]
    fn the_board_is_current_only_while_every_watch_watches() {
        let board = WatchBoard::default();
        let pods = board.cell("Pod");
        let tasks = board.cell("AgentTask");
        assert!(!board.all_watching());
        pods.watching();
        tasks.watching();
        assert!(board.all_watching());
        pods.failed(Restart::StartFailed, "connection refused".into());
        let summary = board.summary();
        assert!(!summary.all_watching);
        let (kind, status) = summary.worst.expect("a watch is not current");
        assert_eq!(kind, "Pod");
        assert_eq!(status.phase, Phase::Failing);
        assert_eq!(status.reason.as_deref(), Some("connection refused"));
        pods.failed(Restart::StartFailed, "connection refused".into());
        assert_eq!(board.statuses()["Pod"].failures_in_row, 2);
        // Listing again after the failure keeps the reason.
        pods.listing();
        assert_eq!(
            board.statuses()["Pod"].reason.as_deref(),
            Some("connection refused")
        );
        pods.watching();
        assert!(board.all_watching());
        assert_eq!(board.statuses()["Pod"].failures_in_row, 0);
        assert_eq!(board.statuses()["Pod"].reason, None);
    }

    #[test]
    fn a_watch_beside_the_controllers_is_shown_but_not_waited_for() {
        let board = WatchBoard::default();
        let pods = board.cell("Pod");
        let events = board.cell_beside("Event");
        pods.watching();
        // Not started, listing, refused, failing: the controller acts.
        assert!(board.all_watching() && board.summary().all_watching);
        assert!(!board.answered("Event"), "shown as not answered yet");
        events.refused(Refusal::Forbidden("list"), "403".into());
        assert!(board.all_watching());
        assert_eq!(
            board.summary().refused,
            vec![("Event".to_owned(), Refusal::Forbidden("list"))]
        );
        events.failed(Restart::StartFailed, "connection refused".into());
        assert!(board.all_watching());
        assert_eq!(board.statuses()["Event"].phase, Phase::Failing);
        pods.failed(Restart::StartFailed, "connection refused".into());
        assert!(!board.all_watching(), "the controller's own watch failing");
    }

    #[test]
    fn a_failing_watch_is_shown_before_a_listing_one() {
        let board = WatchBoard::default();
        let a = board.cell("A");
        let b = board.cell("B");
        a.listing();
        b.failed(Restart::Gone, "410".into());
        assert_eq!(board.summary().worst.map(|(k, _)| k).as_deref(), Some("B"));
    }
}
