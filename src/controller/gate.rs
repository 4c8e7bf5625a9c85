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
struct KeyState {
    /// Events arrived since the last emission.
    pending: bool,
    /// The key stays hot (events only mark it pending) until then.
    quiet_until: Instant,
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

    /// An event for `key` at `now`: whether to reconcile it now (the first
    /// event of a burst). Later events of the burst wait for [`Gate::due`].
    pub fn on_event(&mut self, key: K, now: Instant) -> bool {
        let quiet_until = now + self.quiet;
        match self.keys.get_mut(&key) {
            Some(state) => {
                state.pending = true;
                state.quiet_until = quiet_until;
                false
            }
            None => {
                self.keys.insert(
                    key,
                    KeyState {
                        pending: false,
                        quiet_until,
                    },
                );
                true
            }
        }
    }

    /// Keys whose burst has gone quiet at `now` with events waiting: one
    /// follow-up each. Keys quiet with nothing waiting are forgotten, so
    /// their next event is a leading edge again.
    pub fn due(&mut self, now: Instant) -> Vec<K> {
        let mut out = Vec::new();
        self.keys.retain(|key, state| {
            if state.quiet_until > now {
                return true;
            }
            if state.pending {
                out.push(key.clone());
            }
            false
        });
        out
    }

    /// When [`Gate::due`] may next have something to say.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.keys.values().map(|s| s.quiet_until).min()
    }
}

/// Passes `input` through a [`Gate`] into `output` until `cancel` or the
/// input ends.
pub async fn run<K>(
    input: impl Stream<Item = K> + Send + 'static,
    output: mpsc::Sender<K>,
    quiet: Duration,
    cancel: CancellationToken,
) where
    K: Clone + Eq + Hash + Send + 'static,
{
    let mut gate = Gate::new(quiet);
    tokio::pin!(input);
    loop {
        let deadline = gate.next_deadline();
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            next = input.next() => {
                let Some(key) = next else { return };
                if gate.on_event(key.clone(), Instant::now()) && output.send(key).await.is_err() {
                    return;
                }
            }
            _ = sleep => {
                for key in gate.due(Instant::now()) {
                    if output.send(key).await.is_err() {
                        return;
                    }
                }
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
        // 100 task events for pool "a" over 300 ms, one for "b" at 50 ms,
        // the clock looked at every 10 ms.
        for ms in (0..1_000).step_by(10) {
            if ms < 300 && ms % 3 == 0 && gate.on_event("a", at(ms)) {
                emitted.push((ms, "a"));
            }
            if ms == 50 && gate.on_event("b", at(ms)) {
                emitted.push((ms, "b"));
            }
            for key in gate.due(at(ms)) {
                emitted.push((ms, key));
            }
        }
        // "a": at once, then once 150 ms after its last event (at 270 ms);
        // "b": at once, nothing pending after.
        assert_eq!(emitted, [(0, "a"), (50, "b"), (420, "a")]);
        assert_eq!(gate.next_deadline(), None, "everything forgotten");
        // The next event is a leading edge again.
        assert!(gate.on_event("a", at(2_000)));
    }

    #[test]
    fn a_lone_event_is_reconciled_at_once_and_never_again() {
        let t0 = Instant::now();
        let mut gate = Gate::new(Duration::from_millis(150));
        assert!(gate.on_event(1, t0));
        assert_eq!(gate.due(t0 + Duration::from_millis(149)), Vec::<i32>::new());
        assert_eq!(gate.due(t0 + Duration::from_millis(150)), Vec::<i32>::new());
        assert_eq!(gate.next_deadline(), None);
    }

    #[tokio::test]
    async fn the_driver_forwards_the_leading_event_and_one_follow_up() {
        let (tx, rx) = mpsc::channel::<u8>(16);
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
            tx.send(7).await.expect("sent");
        }
        assert_eq!(out_rx.recv().await, Some(7), "leading edge");
        assert_eq!(out_rx.recv().await, Some(7), "one follow-up");
        tx.send(8).await.expect("sent");
        assert_eq!(out_rx.recv().await, Some(8), "another key, at once");
        cancel.cancel();
        driver.await.expect("driver ends");
        assert!(out_rx.try_recv().is_err(), "nothing more");
    }
}
