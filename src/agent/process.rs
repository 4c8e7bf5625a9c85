//! One claimed task run as a child process (deployment mode): its own
//! process group in a fresh working directory, output streamed to the
//! agent's stdout as `[task] line` and to a log file, heartbeats, and the
//! stops it can meet (cancel, timeout, agent stopping, ownership lost).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use super::plan::{self, Ending};
use super::state::AgentState;
use super::status::{StatusWriter, ownership_lost};
use crate::crd::AgentTask;
use crate::redact::{RedactionCounts, Redactor};

/// How often the running task's object is looked at (cancel, ownership):
/// an in-memory store read, so cheap.
const CHECK_EVERY: Duration = Duration::from_millis(200);
/// How long output readers may keep going once the process has ended
/// (a grandchild may still hold the pipe).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// An order from the agent to a running task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOrder {
    /// Keep running.
    Run,
    /// SIGTERM, SIGKILL after the grace, then requeue.
    Terminate(Duration),
    /// SIGKILL now, then requeue.
    Kill,
}

/// What every task run needs from its agent.
pub struct RunEnv {
    /// Status writes.
    pub writer: StatusWriter,
    /// The watched tasks (cancel and ownership are read from here).
    pub store: Store<AgentTask>,
    /// Agent state, for activity.
    pub state: Arc<AgentState>,
    /// The agent's environment (allowlisted names are taken from it).
    pub agent_env: BTreeMap<String, String>,
    /// `envForwardAllowlist`.
    pub allowlist: Vec<String>,
    /// The agent's token, so that it is never forwarded.
    pub token: Option<String>,
    /// Where working directories and logs go (already host-resolved).
    pub work_dir: PathBuf,
    /// Between heartbeats.
    pub heartbeat: Duration,
    /// SIGTERM-to-SIGKILL time for cancel and timeout.
    pub grace: Duration,
    /// Hides the Secret values the agent was handed ([`super::secrets`])
    /// from the task output it prints and keeps.
    pub redactor: Arc<Redactor>,
}

/// Runs the claimed `task` to its end and reports it. Never fails: every
/// problem ends up in the task's status (or the agent's log when the API
/// cannot be reached).
pub async fn run_task(env: Arc<RunEnv>, task: AgentTask, stop: watch::Receiver<StopOrder>) {
    let name = task.metadata.name.clone().unwrap_or_default();
    let attempts = task.status.as_ref().map_or(0, |s| s.attempts);
    let started = Instant::now();
    let ending = supervise(&env, &task, &name, attempts, stop).await;
    // The run's own log file: its end goes into the status, then it goes
    // (an agent that runs for weeks must not keep one file per task).
    let log_path = env.work_dir.join(format!("{name}-{attempts}.log"));
    let tail = read_end(&log_path).and_then(|end| plan::output_tail(&end, &env.redactor));
    if let Err(e) = std::fs::remove_file(&log_path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::debug!(task = %name, error = %e, "task log not removed");
    }
    let Some(ending) = ending else {
        tracing::warn!(task = %name, "task was taken from this agent; stopped it without reporting");
        return;
    };
    let duration = started.elapsed();
    tracing::info!(task = %name, ?ending, "task ended");
    let now = Timestamp::now();
    let max_attempts = env.state.max_attempts();
    match env
        .writer
        .finish(&name, attempts, tail.as_deref(), |s| {
            plan::finished_status(s, &ending, duration, max_attempts, now)
        })
        .await
    {
        Ok(true) => env.state.touch(),
        Ok(false) => {}
        Err(e) => tracing::error!(task = %name, error = %e, "cannot report the task's end"),
    }
}

/// The run itself; `None` when the task stopped being ours.
async fn supervise(
    env: &RunEnv,
    task: &AgentTask,
    name: &str,
    attempts: i32,
    mut stop: watch::Receiver<StopOrder>,
) -> Option<Ending> {
    let argv = match plan::task_argv(task) {
        Ok(a) => a,
        Err(why) => return Some(Ending::Invalid(why)),
    };
    let dir = env.work_dir.join(format!("{name}-{attempts}"));
    let log_path = env.work_dir.join(format!("{name}-{attempts}.log"));
    if let Err(e) = fresh_dir(&dir) {
        return Some(Ending::Invalid(format!(
            "cannot prepare the working directory: {e}"
        )));
    }
    let vars = match plan::task_env(
        &env.agent_env,
        &env.allowlist,
        env.token.as_deref(),
        task,
        &dir.to_string_lossy(),
    ) {
        Ok(v) => v,
        Err(e) => return Some(Ending::Invalid(e.0)),
    };
    let spawned = spawn(&argv, &vars, &dir, &log_path, name, env.redactor.clone());
    let (mut child, pgid, output) = match spawned {
        Ok(x) => x,
        Err(e) => {
            return Some(Ending::Invalid(format!(
                "cannot start {:?}: {e}",
                argv.first().map(String::as_str).unwrap_or_default()
            )));
        }
    };
    tracing::info!(task = %name, attempt = attempts, "task started");
    let started_at = Timestamp::now();
    if let Err(e) = env.writer.heartbeat(name, Some(started_at)).await {
        tracing::warn!(task = %name, error = %e, "cannot record the start");
    }
    let timeout = task
        .spec
        .timeout_seconds
        .filter(|s| *s > 0)
        .map(|s| (s, Duration::from_secs(s.unsigned_abs())));
    let deadline = timeout.map(|(_, d)| tokio::time::Instant::now() + d);
    let mut heartbeat = tokio::time::interval(env.heartbeat);
    heartbeat.tick().await;
    let mut check = tokio::time::interval(CHECK_EVERY);
    let key = ObjectRef::<AgentTask>::new(name)
        .within(task.metadata.namespace.as_deref().unwrap_or_default());

    let (ending, status) = loop {
        tokio::select! {
            status = child.wait() => {
                let code = status.map(plan::exit_code).unwrap_or(1);
                break (Some(Ending::Exited(code)), None);
            }
            _ = heartbeat.tick() => {
                match env.writer.heartbeat(name, None).await {
                    Ok(_) => env.state.touch(),
                    Err(e) => tracing::warn!(task = %name, error = %e, "heartbeat failed"),
                }
            }
            _ = check.tick() => {
                let seen = env.store.get(&key);
                if let Some(t) = &seen {
                    if ownership_lost(t.status.as_ref(), env.writer.me(), attempts) {
                        let s = stop_group(&mut child, pgid, None).await;
                        break (None, Some(s));
                    }
                    if t.spec.cancel {
                        tracing::info!(task = %name, "cancel requested");
                        let s = stop_group(&mut child, pgid, Some(env.grace)).await;
                        break (Some(Ending::Cancelled), Some(s));
                    }
                }
            }
            _ = sleep_until(deadline) => {
                let secs = timeout.map_or(0, |(s, _)| s);
                tracing::info!(task = %name, seconds = secs, "task timed out");
                let s = stop_group(&mut child, pgid, Some(env.grace)).await;
                break (Some(Ending::TimedOut(secs)), Some(s));
            }
            changed = stop.changed() => {
                let order = if changed.is_ok() { *stop.borrow_and_update() } else { StopOrder::Kill };
                match order {
                    StopOrder::Run => {}
                    StopOrder::Terminate(grace) => {
                        let s = stop_group(&mut child, pgid, Some(grace)).await;
                        break (Some(Ending::Requeue("agent stopping (grace-shutdown)".into())), Some(s));
                    }
                    StopOrder::Kill => {
                        let s = stop_group(&mut child, pgid, None).await;
                        break (Some(Ending::Requeue("agent stopping (force-shutdown)".into())), Some(s));
                    }
                }
            }
        }
    };
    let _ = status;
    // Whatever the leader did, nothing of the task outlives it.
    let _ = killpg(pgid, Signal::SIGKILL);
    let _ = tokio::time::timeout(OUTPUT_DRAIN, output).await;
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        tracing::debug!(task = %name, error = %e, "working directory not removed");
    }
    ending
}

/// The last bytes of `path` (enough for [`plan::output_tail`]), or `None`
/// when it cannot be read.
pub(super) fn read_end(path: &Path) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let want = u64::try_from(crate::crd::OUTPUT_TAIL_BYTES * 4).unwrap_or(u64::MAX);
    file.seek(SeekFrom::Start(len.saturating_sub(want))).ok()?;
    let mut end = Vec::new();
    file.read_to_end(&mut end).ok()?;
    Some(end)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// SIGTERM the group and wait `grace` (None: SIGKILL at once), then SIGKILL.
async fn stop_group(child: &mut Child, pgid: Pid, grace: Option<Duration>) -> Option<ExitStatus> {
    if let Some(grace) = grace {
        let _ = killpg(pgid, Signal::SIGTERM);
        if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
            return status.ok();
        }
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    child.wait().await.ok()
}

fn fresh_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)
}

type Spawned = (Child, Pid, tokio::task::JoinHandle<()>);

/// Starts the process in its own group with exactly `vars`; its output goes
/// to the agent's stdout (prefixed) and to `log_path`.
fn spawn(
    argv: &[String],
    vars: &[(String, String)],
    dir: &Path,
    log_path: &Path,
    name: &str,
    redactor: Arc<Redactor>,
) -> std::io::Result<Spawned> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    // The program is looked up on the task's PATH, as a container would.
    let program = resolve_program(program, vars);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)?;
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other("the process has no id"))?;
    // Bounded: at most 32 pieces (512 KiB) wait for the writer.
    let (tx, rx) = mpsc::channel::<Piece>(32);
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(tokio::spawn(read_lines(out, tx.clone())));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(tokio::spawn(read_lines(err, tx.clone())));
    }
    drop(tx);
    let prefix = format!("[{name}] ");
    let writer = tokio::task::spawn_blocking(move || write_output(rx, log, &prefix, &redactor));
    let output = tokio::spawn(async move {
        for r in readers {
            let _ = r.await;
        }
        let _ = writer.await;
    });
    Ok((child, Pid::from_raw(pid), output))
}

fn resolve_program(program: &str, vars: &[(String, String)]) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let path = vars
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    std::env::split_paths(path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(program))
}

/// Longest piece of output handled at once: a line longer than this (a
/// task may print 100 MB without a newline) is cut into pieces of this
/// size, so the agent's memory stays flat whatever a task prints.
pub const OUTPUT_PIECE: usize = 16 * 1024;

/// A bounded piece of output: a whole line (ending in `\n`), the end of
/// the stream, or [`OUTPUT_PIECE`] bytes of a longer line.
#[derive(Debug, PartialEq, Eq)]
struct Piece(Vec<u8>);

async fn read_lines(stream: impl AsyncRead + Unpin, tx: mpsc::Sender<Piece>) {
    let mut reader = BufReader::with_capacity(OUTPUT_PIECE, stream);
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => buf,
            _ => {
                if !pending.is_empty() {
                    let _ = tx.send(Piece(pending)).await;
                }
                return;
            }
        };
        let room = OUTPUT_PIECE - pending.len();
        let window = &buf[..buf.len().min(room)];
        let (take, complete) = match window.iter().position(|b| *b == b'\n') {
            Some(end) => (end + 1, true),
            None => (window.len(), pending.len() + window.len() == OUTPUT_PIECE),
        };
        pending.extend_from_slice(&window[..take]);
        reader.consume(take);
        if complete {
            let piece = std::mem::take(&mut pending);
            if tx.send(Piece(piece)).await.is_err() {
                return;
            }
        }
    }
}

/// Prints `piece` (already redacted) to the pod log as one `prefix`ed line.
fn print_piece(prefix: &str, piece: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(prefix.as_bytes());
    let _ = out.write_all(piece);
    if piece.last() != Some(&b'\n') {
        let _ = out.write_all(b"\n");
    }
    let _ = out.flush();
}

/// Follows a file another process writes (a job-mode runner's `output`)
/// and prints it as the agent prints its own tasks' output: in lines or
/// [`OUTPUT_PIECE`]-byte pieces, redacted, `prefix`ed.
pub struct OutputRelay {
    path: std::path::PathBuf,
    offset: u64,
    pending: Vec<u8>,
    prefix: String,
    redactor: Arc<Redactor>,
    counts: RedactionCounts,
}

impl OutputRelay {
    /// A relay of `path` (which may not exist yet) for task `name`.
    pub fn new(path: std::path::PathBuf, name: &str, redactor: Arc<Redactor>) -> Self {
        OutputRelay {
            path,
            offset: 0,
            pending: Vec::new(),
            prefix: format!("[{name}] "),
            redactor,
            counts: RedactionCounts::new(),
        }
    }

    /// Prints what was added since the last call: whole lines (or
    /// [`OUTPUT_PIECE`]-byte pieces of longer ones), and when `last` all
    /// that is left. Reads at most 1 MiB per call unless `last`.
    pub fn pump(&mut self, last: bool) {
        use std::io::{Read, Seek, SeekFrom};
        const MAX_READ: u64 = 1024 * 1024;
        loop {
            let mut read = 0;
            if let Ok(mut file) = std::fs::File::open(&self.path)
                && file.seek(SeekFrom::Start(self.offset)).is_ok()
            {
                let mut buf = Vec::new();
                if let Ok(n) = file.take(MAX_READ).read_to_end(&mut buf) {
                    read = n;
                    self.offset += n as u64;
                    self.pending.extend_from_slice(&buf);
                }
            }
            self.print_pieces(false);
            if !last || read == 0 {
                break;
            }
        }
        if last {
            self.print_pieces(true);
        }
    }

    fn print_pieces(&mut self, rest: bool) {
        loop {
            let window = &self.pending[..self.pending.len().min(OUTPUT_PIECE)];
            let take = match window.iter().position(|b| *b == b'\n') {
                Some(end) => end + 1,
                None if window.len() == OUTPUT_PIECE => OUTPUT_PIECE,
                None if rest && !window.is_empty() => window.len(),
                None => break,
            };
            let piece: Vec<u8> = self.pending.drain(..take).collect();
            let piece = self.redactor.redact_bytes(&piece, &mut self.counts);
            print_piece(&self.prefix, &piece);
        }
    }
}

/// The log file gets the bytes as printed, and the pod log each piece as
/// one prefixed line (a cut line continues on the next `[task]` line),
/// both redacted: the Secret values the agent knows never leave it. (A
/// value cut in two by a 16 KiB piece boundary of a longer line is not
/// matched.)
fn write_output(
    mut rx: mpsc::Receiver<Piece>,
    mut log: std::fs::File,
    prefix: &str,
    redactor: &Redactor,
) {
    let mut counts = RedactionCounts::new();
    while let Some(Piece(piece)) = rx.blocking_recv() {
        let piece = redactor.redact_bytes(&piece, &mut counts);
        let _ = log.write_all(&piece);
        print_piece(prefix, &piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pieces_of(input: Vec<u8>) -> Vec<Vec<u8>> {
        let (tx, mut rx) = mpsc::channel(4);
        let reader = tokio::spawn(read_lines(std::io::Cursor::new(input), tx));
        let mut out = Vec::new();
        while let Some(Piece(p)) = rx.recv().await {
            assert!(p.len() <= OUTPUT_PIECE, "a piece of {} bytes", p.len());
            out.push(p);
        }
        reader.await.expect("reader ends");
        out
    }

    #[tokio::test]
    async fn output_is_cut_into_lines_and_bounded_pieces_that_add_up_to_it() {
        let long = vec![b'x'; OUTPUT_PIECE * 3 + 5];
        let mut mixed = b"short\n".to_vec();
        mixed.extend_from_slice(&long);
        mixed.extend_from_slice(b"\nlast without newline");
        let cases: Vec<(Vec<u8>, Vec<usize>)> = vec![
            (b"a\nbb\n".to_vec(), vec![2, 3]),
            (b"no newline".to_vec(), vec![10]),
            (Vec::new(), vec![]),
            (vec![b'y'; OUTPUT_PIECE], vec![OUTPUT_PIECE]),
            (
                mixed.clone(),
                vec![6, OUTPUT_PIECE, OUTPUT_PIECE, OUTPUT_PIECE, 6, 20],
            ),
        ];
        for (input, sizes) in cases {
            let pieces = pieces_of(input.clone()).await;
            assert_eq!(
                pieces.iter().map(Vec::len).collect::<Vec<_>>(),
                sizes,
                "{:?}",
                String::from_utf8_lossy(&input[..input.len().min(40)])
            );
            assert_eq!(pieces.concat(), input, "nothing lost or added");
        }
    }
}
