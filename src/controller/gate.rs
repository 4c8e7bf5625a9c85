//! When a pool is reconciled: at once on the first event of a burst (a task
//! created is a scaling decision within milliseconds, not after a quiet
//! time), and the rest of the burst coalesced into one follow-up once the
//! pool has been quiet for a moment — so 100 tasks created at once are one
//! or two scaling decisions, never 100, and never a wait on an idle pool.
//!
//! [`Gate`] is the pure rule (time comes in as arguments); [`run`] drives it
//! over the merged trigger streams of every pool.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy)]
enum KeyState {
    /// A burst of urgent events (tasks) is on: later events only mark a
    /// follow-up, due once no urgent event came for the quiet time.
    Hot { pending: bool, quiet_until: Instant },
    /// Only background events (the pool's own objects changing, often in
    /// the wake of our own writes): one reconcile once they go quiet.
    Trailing { quiet_until: Instant },
}

impl KeyState {
    fn quiet_until(&self) -> Instant {
        match *self {
            KeyState::Hot { quiet_until, .. } | KeyState::Trailing { quiet_until } => quiet_until,
        }
    }
}

/// Leading-edge trigger with one trailing follow-up per burst, per key.
#[derive(Debug)]
pub struct Gate<K> {
    quiet: Duration,
    keys: HashMap<K, KeyState>,
}

impl<K: Clone + Eq + Hash> Gate<K> {
    /// A gate whose bursts end after `quiet` without an event.
    pub fn new(quiet: Duration) -> Self {
        Gate {
            quiet,
            keys: HashMap::new(),
        }
    }

    /// An event for `key` at `now`; `urgent` for work arriving (a task
    /// created, finished, deleted), not for the pool's own objects moving.
    /// Returns whether to reconcile now: the first urgent event of a burst.
    /// Everything else waits for [`Gate::due`]; background events never
    /// delay an urgent one, and never stretch a burst.
    pub fn on_event(&mut self, key: K, urgent: bool, now: Instant) -> bool {
        let quiet_until = now + self.quiet;
        let state = self.keys.get(&key).copied();
        let (next, emit) = match (state, urgent) {
            (Some(KeyState::Hot { .. }), true) => (
                KeyState::Hot {
                    pending: true,
                    quiet_until,
                },
                false,
            ),
            (Some(KeyState::Hot { quiet_until, .. }), false) => (
                KeyState::Hot {
                    pending: true,
                    quiet_until,
                },
                false,
            ),
            (_, true) => (
                KeyState::Hot {
                    pending: false,
                    quiet_until,
                },
                true,
            ),
            (_, false) => (KeyState::Trailing { quiet_until }, false),
        };
        self.keys.insert(key, next);
        emit
    }

    /// Keys whose burst has gone quiet at `now` with events waiting: one
    /// follow-up each. Keys quiet with nothing waiting are forgotten, so
    /// their next urgent event is a leading edge again.
    pub fn due(&mut self, now: Instant) -> Vec<K> {
        let mut out = Vec::new();
        self.keys.retain(|key, state| {
            if state.quiet_until() > now {
                return true;
            }
            if matches!(
                state,
                KeyState::Hot { pending: true, .. } | KeyState::Trailing { .. }
            ) {
                out.push(key.clone());
            }
            false
        });
        out
    }

    /// When [`Gate::due`] may next have something to say.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.keys.values().map(KeyState::quiet_until).min()
    }
}

/// Passes `input` through a [`Gate`] into `output` until `cancel` or the
/// input ends.
pub async fn run<K>(
    input: impl Stream<Item = (K, bool)> + Send + 'static,
    output: mpsc::Sender<K>,
    quiet: Duration,
    cancel: CancellationToken,
) where
    K: Clone + Eq + Hash + Send + 'static,
{
    let mut gate = Gate::new(quiet);
    tokio::pin!(input);
    // No later than the gate's next deadline (waking early finds nothing
    // due, and looks again): recomputed over every key only when it
    // passes, not at each event (100,000 tasks listed are 100,000 events,
    // and a look over 1,000 pools at each was most of this loop's time).
    let mut deadline: Option<Instant> = None;
    loop {
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            next = input.next() => {
                let Some((key, urgent)) = next else { return };
                let now = Instant::now();
                // Whatever the event did, no key's deadline is later than this.
                let latest = now + quiet;
                deadline = Some(deadline.map_or(latest, |d| d.min(latest)));
                if gate.on_event(key.clone(), urgent, now) && output.send(key).await.is_err() {
                    return;
                }
            }
            _ = sleep => {
                for key in gate.due(Instant::now()) {
                    if output.send(key).await.is_err() {
                        return;
                    }
                }
                deadline = gate.next_deadline();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_one_reconcile_at_once_and_one_follow_up_after_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut gate = Gate::new(Duration::from_millis(150));
        let mut emitted: Vec<(u64, &str)> = Vec::new();
        // 100 task events for pool "a" over 300 ms with its pods moving
        // meanwhile, one task for "b" at 50 ms; the clock looked at every 10 ms.
        for ms in (0..1_000).step_by(10) {
            if ms < 300 && ms % 3 == 0 && gate.on_event("a", true, at(ms)) {
                emitted.push((ms, "a"));
            }
            if ms < 600 && ms % 20 == 0 && gate.on_event("a", false, at(ms)) {
                emitted.push((ms, "a-background"));
            }
            if ms == 50 && gate.on_event("b", true, at(ms)) {
                emitted.push((ms, "b"));
            }
            for key in gate.due(at(ms)) {
                emitted.push((ms, key));
            }
        }
        // "a": at once, then once 150 ms after its last task (at 270 ms);
        // its pods moving after that are one more reconcile once quiet.
        // "b": at once, nothing pending after.
        assert_eq!(emitted, [(0, "a"), (50, "b"), (420, "a"), (730, "a")]);
        assert_eq!(gate.next_deadline(), None, "everything forgotten");
        assert!(gate.on_event("a", true, at(2_000)), "a leading edge again");
    }

    #[test]
    fn background_events_never_delay_a_task_event() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut gate = Gate::new(Duration::from_millis(150));
        // The pool's pods keep moving (after our own scale-up)...
        for ms in (0..400).step_by(20) {
            assert!(!gate.on_event("a", false, at(ms)));
        }
        // ...and a task arrives: reconciled at once.
        assert!(gate.on_event("a", true, at(400)));
        // The background wake of a hot burst does not stretch it.
        assert!(!gate.on_event("a", false, at(500)));
        assert_eq!(gate.due(at(549)), Vec::<&str>::new());
        assert_eq!(gate.due(at(550)), ["a"], "the follow-up, on time");
    }

    #[test]
    fn a_lone_event_is_reconciled_at_once_and_never_again() {
        let t0 = Instant::now();
        let mut gate = Gate::new(Duration::from_millis(150));
        assert!(gate.on_event(1, true, t0));
        assert_eq!(gate.due(t0 + Duration::from_millis(149)), Vec::<i32>::new());
        assert_eq!(gate.due(t0 + Duration::from_millis(150)), Vec::<i32>::new());
        assert_eq!(gate.next_deadline(), None);
    }

    #[tokio::test]
    async fn the_driver_forwards_the_leading_event_and_one_follow_up() {
        let (tx, rx) = mpsc::channel::<(u8, bool)>(16);
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) });
        let (out_tx, mut out_rx) = mpsc::channel::<u8>(16);
        let cancel = CancellationToken::new();
        let driver = tokio::spawn(run(
            stream,
            out_tx,
            Duration::from_millis(50),
            cancel.clone(),
        ));
        for _ in 0..5 {
            tx.send((7, true)).await.expect("sent");
        }
        assert_eq!(out_rx.recv().await, Some(7), "leading edge");
        assert_eq!(out_rx.recv().await, Some(7), "one follow-up");
        tx.send((8, true)).await.expect("sent");
        assert_eq!(out_rx.recv().await, Some(8), "another key, at once");
        cancel.cancel();
        driver.await.expect("driver ends");
        assert!(out_rx.try_recv().is_err(), "nothing more");
    }
}
