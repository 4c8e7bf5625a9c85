//! The console's action worker. A confirmed action is an operator's
//! decision: it is never dropped. Applies go through an unbounded FIFO
//! (their rate is bounded by a person confirming dialogs) and run one
//! after the other, in the order confirmed; one confirmed while others
//! still run is said to be queued, with how many are ahead. Previews only
//! matter for the dialog open now, so they coalesce: the newest replaces
//! one not yet started, and they never wait behind an apply.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kube::Client;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{ActionMode, ActionRunner};
use crate::app::{ActionRequest, Msg};

/// Hands actions to the worker tasks.
pub struct ActionQueue {
    apply: mpsc::UnboundedSender<ActionRequest>,
    preview: watch::Sender<Option<ActionRequest>>,
    /// Applies confirmed and not finished.
    in_flight: Arc<AtomicUsize>,
    tx: mpsc::Sender<Msg>,
}

impl ActionQueue {
    /// Starts the apply and preview workers; `runner` `None` answers every
    /// action that actions are off.
    pub fn start(
        client: Client,
        runner: Option<ActionRunner>,
        tx: mpsc::Sender<Msg>,
        cancel: CancellationToken,
    ) -> ActionQueue {
        let (apply, mut apply_rx) = mpsc::unbounded_channel::<ActionRequest>();
        let (preview, mut preview_rx) = watch::channel::<Option<ActionRequest>>(None);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let run = move |client: Client, req: ActionRequest, mode: ActionMode| {
            let runner = runner.clone();
            async move {
                match &runner {
                    Some(run) => run(client, req, mode).await,
                    None => Err("actions are off in this console (read-only)".to_owned()),
                }
            }
        };
        let run2 = run.clone();
        let (c, t, n, stop) = (
            client.clone(),
            tx.clone(),
            in_flight.clone(),
            cancel.clone(),
        );
        tokio::spawn(async move {
            loop {
                let req = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = apply_rx.recv() => match r { Some(r) => r, None => return },
                };
                let result = run(c.clone(), req.clone(), ActionMode::Apply).await;
                n.fetch_sub(1, Ordering::SeqCst);
                let msg = Msg::ActionDone {
                    request: req,
                    result,
                };
                if t.send(msg).await.is_err() {
                    return;
                }
            }
        });
        let t = tx.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = preview_rx.changed() => if r.is_err() { return },
                }
                let Some(req) = preview_rx.borrow_and_update().clone() else {
                    continue;
                };
                let result = run2(client.clone(), req.clone(), ActionMode::Preview).await;
                let msg = Msg::ActionPreview {
                    request: req,
                    result: result.map(|t| t.lines().map(str::to_owned).collect()),
                };
                if t.send(msg).await.is_err() {
                    return;
                }
            }
        });
        ActionQueue {
            apply,
            preview,
            in_flight,
            tx,
        }
    }

    /// Queues a confirmed action; never drops it. When others are ahead
    /// the app is told, so the operator sees it waits.
    pub fn apply(&self, req: ActionRequest) {
        let ahead = self.in_flight.fetch_add(1, Ordering::SeqCst);
        if ahead > 0 {
            // Only the notice may be lost (a full UI queue), not the action.
            let _ = self.tx.try_send(Msg::ActionQueued {
                request: req.clone(),
                ahead,
            });
        }
        if self.apply.send(req).is_err() {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Asks for a preview, replacing one not started yet.
    pub fn preview(&self, req: ActionRequest) {
        self.preview.send_replace(Some(req));
    }

    /// Applies confirmed and not finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;
    use tokio::sync::Semaphore;

    fn client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Client::try_from(config).expect("a client that is never called")
    }

    fn cancel(t: &str) -> ActionRequest {
        ActionRequest::CancelTasks {
            namespace: "ns".into(),
            tasks: vec![t.into()],
        }
    }

    /// A runner that waits for a permit per call and records what it ran.
    fn gated() -> (ActionRunner, Arc<Semaphore>, Arc<Mutex<Vec<String>>>) {
        let gate = Arc::new(Semaphore::new(0));
        let ran = Arc::new(Mutex::new(Vec::new()));
        let (g, r) = (gate.clone(), ran.clone());
        let runner: ActionRunner = Arc::new(move |_c, req: ActionRequest, mode| {
            let (g, r) = (g.clone(), r.clone());
            Box::pin(async move {
                r.lock()
                    .expect("lock")
                    .push(format!("{mode:?} {}", req.describe()));
                g.acquire().await.expect("gate").forget();
                Ok(format!("done {}", req.describe()))
            })
        });
        (runner, gate, ran)
    }

    async fn next(rx: &mut mpsc::Receiver<Msg>) -> Msg {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a message within 10 s")
            .expect("channel open")
    }

    #[tokio::test]
    async fn twenty_actions_behind_a_slow_one_all_run_in_order_and_say_they_wait() {
        let (runner, gate, _) = gated();
        let (tx, mut rx) = mpsc::channel(256);
        let q = ActionQueue::start(client(), Some(runner), tx, CancellationToken::new());
        for i in 0..20 {
            q.apply(cancel(&format!("t{i}")));
        }
        assert_eq!(q.in_flight(), 20);
        // The first runs at once; each later one is told how many are ahead.
        for ahead in 1..20 {
            match next(&mut rx).await {
                Msg::ActionQueued { request, ahead: a } => {
                    assert_eq!(request, cancel(&format!("t{ahead}")));
                    assert_eq!(a, ahead);
                }
                other => panic!("expected ActionQueued, got {other:?}"),
            }
        }
        gate.add_permits(20);
        for i in 0..20 {
            match next(&mut rx).await {
                Msg::ActionDone { request, result } => {
                    assert_eq!(request, cancel(&format!("t{i}")));
                    assert_eq!(result, Ok(format!("done cancel task t{i}")));
                }
                other => panic!("expected ActionDone, got {other:?}"),
            }
        }
        assert_eq!(q.in_flight(), 0);
    }

    #[tokio::test]
    async fn previews_coalesce_to_the_newest_and_do_not_wait_behind_applies() {
        let (runner, gate, ran) = gated();
        let (tx, mut rx) = mpsc::channel(256);
        let q = ActionQueue::start(client(), Some(runner), tx, CancellationToken::new());
        q.preview(cancel("a"));
        // Wait until the first preview runs, then ask for two more.
        crate_eventually(|| ran.lock().expect("lock").len() == 1).await;
        q.preview(cancel("b"));
        q.preview(cancel("c"));
        // An apply runs beside the preview, not behind it.
        q.apply(cancel("x"));
        crate_eventually(|| ran.lock().expect("lock").len() == 2).await;
        gate.add_permits(3);
        let mut previews = Vec::new();
        let mut done = Vec::new();
        while previews.len() < 2 || done.is_empty() {
            match next(&mut rx).await {
                Msg::ActionPreview { request, .. } => previews.push(request),
                Msg::ActionDone { request, .. } => done.push(request),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(previews, vec![cancel("a"), cancel("c")]);
        assert_eq!(done, vec![cancel("x")]);
        let ran = ran.lock().expect("lock").clone();
        assert!(!ran.iter().any(|r| r.contains("task b")), "{ran:?}");
    }

    /// Polls `ok` until it holds (10 s at most).
    async fn crate_eventually(ok: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !ok() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "condition not met in 10 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
