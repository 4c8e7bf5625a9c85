//! The workers of every context of the console, as one.
//!
//! With one context its workers' messages go to the app as they are. With
//! several, one task takes every context's messages: a context's snapshot
//! is merged with the others' latest ([`Merger`]) and its status is sent
//! as that context's. A context that cannot be reached only stops sending:
//! the others' snapshots, the keys and the frames do not wait for it.
//!
//! Commands go to the context they name ([`Command::In`]); the rest (the
//! audit trail, which is local) to the first context.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::app::fleet::Merger;
use crate::app::{ClusterStatus, Command, Msg, Role, ShellRequest, WatchState};

use super::{SNAPSHOT_GAP, Workers};

/// Every context's workers, and the messages of all of them.
pub struct Fleet {
    /// Messages for the app.
    pub rx: mpsc::Receiver<Msg>,
    members: Vec<(String, Workers)>,
}

impl Fleet {
    /// `members`: each context's name, workers and messages, in the order
    /// their rows are shown.
    /// `unusable`: contexts that could not be used, and why.
    pub fn new(
        members: Vec<(String, Workers, mpsc::Receiver<Msg>)>,
        unusable: Vec<(String, String)>,
        cancel: CancellationToken,
    ) -> Fleet {
        let mut names = Vec::new();
        let mut workers = Vec::new();
        let mut receivers = Vec::new();
        for (name, w, rx) in members {
            names.push(name.clone());
            workers.push((name, w));
            receivers.push(rx);
        }
        let rx = if receivers.len() == 1 && unusable.is_empty() {
            receivers.pop().expect("one receiver")
        } else {
            let (tx, rx) = mpsc::channel(256);
            for (context, why) in unusable {
                let _ = tx.try_send(Msg::ContextStatus {
                    context,
                    status: ClusterStatus {
                        role: Role::Observer,
                        watch: WatchState::Disconnected(why),
                        ..ClusterStatus::default()
                    },
                });
            }
            tokio::spawn(merge(names, receivers, tx, cancel));
            rx
        };
        Fleet {
            rx,
            members: workers,
        }
    }

    /// Hands a command to the workers of its context; `false` for Quit.
    pub fn dispatch(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Quit => false,
            Command::In { context, command } => {
                let Some(at) = self.members.iter().position(|(n, _)| *n == context) else {
                    tracing::warn!(
                        context,
                        "a command for a context this console does not have"
                    );
                    return true;
                };
                // One log view at a time: another context's stream stops.
                if matches!(*command, Command::StreamLogs { .. }) {
                    for (i, (_, w)) in self.members.iter_mut().enumerate() {
                        if i != at {
                            w.dispatch(Command::StopLogs);
                        }
                    }
                }
                self.members[at].1.dispatch(*command)
            }
            Command::StopLogs | Command::Recheck | Command::WatchEvents => {
                for (_, w) in &mut self.members {
                    w.dispatch(cmd.clone());
                }
                true
            }
            other => match self.members.first_mut() {
                Some((_, w)) => w.dispatch(other),
                None => true,
            },
        }
    }

    /// A shell asked for, with the client of its context.
    pub fn take_shell(&mut self) -> Option<(Client, ShellRequest)> {
        self.members
            .iter_mut()
            .find_map(|(_, w)| w.shell.take().map(|req| (w.client.clone(), req)))
    }
}

/// Takes every context's messages: snapshots merged, statuses named, the
/// rest as they are.
async fn merge(
    names: Vec<String>,
    receivers: Vec<mpsc::Receiver<Msg>>,
    tx: mpsc::Sender<Msg>,
    cancel: CancellationToken,
) {
    let (each_tx, mut each) = mpsc::channel::<(usize, Msg)>(256);
    for (i, mut rx) in receivers.into_iter().enumerate() {
        let each_tx = each_tx.clone();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if each_tx.send((i, m)).await.is_err() {
                    break;
                }
            }
        });
    }
    drop(each_tx);
    let mut merger = Merger::new(&names);
    // A merged snapshot at most every SNAPSHOT_GAP: what arrives meanwhile
    // is taken and merged once (a merge costs a pass over every context's
    // rows: 16 ms for 3 × 100k tasks).
    let mut sent: Option<Instant> = None;
    let mut dirty = false;
    loop {
        let due = sent.map_or(Duration::ZERO, |t| SNAPSHOT_GAP.saturating_sub(t.elapsed()));
        let (i, msg) = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(due), if dirty => {
                dirty = false;
                sent = Some(Instant::now());
                if tx.send(Msg::Snapshot(Arc::new(merger.merged()))).await.is_err() {
                    return;
                }
                continue;
            }
            m = each.recv() => match m {
                Some(m) => m,
                None => return,
            },
        };
        let out = match msg {
            Msg::Snapshot(s) => {
                merger.take(i, s);
                dirty = true;
                continue;
            }
            m => named(&names, i, m),
        };
        if tx.send(out).await.is_err() {
            return;
        }
    }
}

/// A message of context `i`: its status, and the outcome of an action
/// taken there, naming it.
fn named(names: &[String], i: usize, msg: Msg) -> Msg {
    let context = &names[i];
    match msg {
        Msg::Status(status) => Msg::ContextStatus {
            context: context.clone(),
            status,
        },
        Msg::ActionDone { request, result } => Msg::ActionDone {
            request,
            result: result
                .map(|done| format!("in {context}: {done}"))
                .map_err(|why| format!("in {context}: {why}")),
        },
        m => m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::rows::Snapshot;

    #[tokio::test]
    async fn snapshots_arriving_together_are_merged_once_a_gap_apart_and_statuses_named() {
        let (a_tx, a_rx) = mpsc::channel(64);
        let (b_tx, b_rx) = mpsc::channel(64);
        let (tx, mut rx) = mpsc::channel(64);
        let cancel = CancellationToken::new();
        tokio::spawn(merge(
            vec!["a".into(), "b".into()],
            vec![a_rx, b_rx],
            tx,
            cancel.clone(),
        ));
        // The first is sent at once.
        let at = Instant::now();
        a_tx.send(Msg::Snapshot(Arc::new(Snapshot::default())))
            .await
            .expect("sent");
        let first = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert!(matches!(first, Ok(Some(Msg::Snapshot(_)))));
        // Ten more from both within the gap: one merged snapshot, a gap
        // after the first.
        for i in 0..10 {
            let to = if i % 2 == 0 { &a_tx } else { &b_tx };
            to.send(Msg::Snapshot(Arc::new(Snapshot::default())))
                .await
                .expect("sent");
        }
        b_tx.send(Msg::Status(crate::app::ClusterStatus {
            role: Role::Leader,
            watch: WatchState::Synced,
            latency: None,
            ..Default::default()
        }))
        .await
        .expect("sent");
        let status = rx.recv().await;
        assert!(
            matches!(&status, Some(Msg::ContextStatus { context, .. }) if context == "b"),
            "{status:?}"
        );
        assert!(matches!(rx.recv().await, Some(Msg::Snapshot(_))));
        assert!(at.elapsed() >= SNAPSHOT_GAP);
        // Nothing more was sent for them.
        let more = tokio::time::timeout(SNAPSHOT_GAP * 4, rx.recv()).await;
        assert!(more.is_err(), "{more:?}");
        cancel.cancel();
    }
}
