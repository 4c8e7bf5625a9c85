//! The log streamer: one followed log at a time (the newest asked for),
//! read in pieces and sent in batches, and what ends it — the task's end in
//! a shared agent log, the pod gone, or what was kept of its output.

use std::time::Duration;

use crate::cluster;
use crate::crd::{AgentTask, TaskPhase};
use futures::AsyncBufReadExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use kube::runtime::reflector;
use kube::{Api, Client};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::status::root_cause;
use crate::app::rows::LogSource;
use crate::app::{Msg, StreamId};
use crate::cluster::ClusterView;

/// Lines batched per message, and how long a partial batch may wait.
const LOG_BATCH: usize = 512;
const LOG_FLUSH: Duration = Duration::from_millis(40);

pub(super) async fn log_streamer(
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
    let r =
        reflector::ObjectRef::<cluster::pod::CachedPod>::new(&source.pod).within(&source.namespace);
    view.pods
        .get(&r)
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
}

async fn pod_gone(view: &ClusterView, pods: &Api<Pod>, source: &LogSource, ask: bool) -> bool {
    let r =
        reflector::ObjectRef::<cluster::pod::CachedPod>::new(&source.pod).within(&source.namespace);
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
            let because = unreadable(&view, &pods, &source, &e).await;
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
    let Some(reason) = end_reason(
        (&client, &view, &pods),
        (&tx, id),
        &source,
        (previous, collected),
        own,
        stopped,
    )
    .await
    else {
        return;
    };
    let _ = tx.send(Msg::LogEnded { id, reason }).await;
}

/// Why the log could not be opened: its pod gone, or what the API said.
async fn unreadable(
    view: &ClusterView,
    pods: &Api<Pod>,
    source: &LogSource,
    e: &kube::Error,
) -> KeptBecause {
    let not_found = matches!(e, kube::Error::Api(s) if s.code == 404);
    if not_found || pod_gone(view, pods, source, true).await {
        KeptBecause::PodGone
    } else {
        KeptBecause::Unreadable(match e {
            kube::Error::Api(s) => s.message.clone(),
            other => root_cause(other),
        })
    }
}

/// The line that ends a log once its stream `stopped` (at its end, failed,
/// or the pod went), `own` lines of the task read: said with the task's
/// end, the pod's going, or what was kept (sent here). `None` when what
/// was kept has been sent with its own end line.
async fn end_reason(
    (client, view, pods): (&Client, &ClusterView, &Api<Pod>),
    (tx, id): (&mpsc::Sender<Msg>, StreamId),
    source: &LogSource,
    (previous, collected): (bool, bool),
    own: usize,
    stopped: Result<bool, String>,
) -> Option<String> {
    // Asked of the API, not the view: the stream of a deleted pod ends
    // before the watch has told the view, the more so on a busy machine.
    let gone = match stopped {
        Ok(false) => true,
        _ => pod_going(view, source) || pod_gone(view, pods, source, true).await,
    };
    let finished = finished_task(view, source);
    let reason = match (gone, own, finished, stopped) {
        // Nothing of the task came from the pod: what was kept, if anything.
        (true, 0, _, _) => {
            end_with_kept(client, tx, id, source, KeptBecause::PodGone).await;
            return None;
        }
        // None of the finished task's lines in the pod's log: read too little
        // of a long shared log, or it printed nothing at all.
        (false, 0, Some((phase, at)), _) if source.prefix.is_some() && !previous => {
            match kept_output(client, source).await {
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
    Some(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
