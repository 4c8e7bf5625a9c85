//! `pods/NAME/exec` and `pods/NAME/attach` over WebSocket, as the
//! apiserver serves them to kubectl (≥ 1.30) and kube-rs: the
//! `v5.channel.k8s.io` subprotocol (and `v4`, which lacks the close
//! signal). Every binary message starts with its channel: 0 stdin, 1
//! stdout, 2 stderr, 3 error (one `Status` when the process has ended: a
//! non-zero exit is `NonZeroExitCode` with the code as an `ExitCode`
//! cause), 4 resize (`{"Width":W,"Height":H}`); v5 adds 255, whose payload
//! names a channel the peer closed (stdin: end of input).
//!
//! What runs is the kubelet's business ([`Hooks::pod_stream`]); this module
//! validates the request, upgrades the connection and pumps bytes between
//! the socket and the process (its pipes, or a pseudo-terminal with
//! `tty=true`).
//!
//! [`Hooks::pod_stream`]: super::api::Hooks::pod_stream

use std::cell::RefCell;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;

use axum::body::Bytes;
use axum::extract::FromRequestParts;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::request::Parts;
use axum::http::{Method, header};
use axum::response::Response;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use super::api::{Api, ApiError, ApiResult, percent_decode};

/// The subprotocols served, preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// What a client asked to run or attach to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamRequest {
    /// Namespace of the pod.
    pub namespace: String,
    /// The pod.
    pub pod: String,
    /// `container=` (None: the pod's only container).
    pub container: Option<String>,
    /// Attach (true) or exec.
    pub attach: bool,
    /// `command=` parameters, in order (exec).
    pub command: Vec<String>,
    /// Streams asked for.
    pub stdin: bool,
    /// Streams asked for.
    pub stdout: bool,
    /// Streams asked for (ignored with a TTY, which merges it into stdout).
    pub stderr: bool,
    /// A pseudo-terminal.
    pub tty: bool,
}

/// A boolean option as the apiserver's query conversion reads it (the same
/// rule as every other query flag): true unless `0` or `false` in any case,
/// so `stdin=yes` and a bare `tty` are true.
fn flag(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

impl StreamRequest {
    /// Reads the parameters of a raw query string (`command` repeats).
    pub fn from_query(namespace: &str, pod: &str, attach: bool, raw: &str) -> Self {
        let mut r = StreamRequest {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            attach,
            ..StreamRequest::default()
        };
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(&v.replace('+', " "));
            match percent_decode(k).as_str() {
                "command" => r.command.push(v),
                "container" => r.container = Some(v).filter(|c| !c.is_empty()),
                "stdin" => r.stdin = flag(&v),
                "stdout" => r.stdout = flag(&v),
                "stderr" => r.stderr = flag(&v),
                "tty" => r.tty = flag(&v),
                _ => {}
            }
        }
        r
    }

    /// The apiserver's own checks of the options.
    pub fn validate(&self) -> ApiResult<()> {
        if !self.attach && self.command.is_empty() {
            return Err(ApiError::bad_request("you must specify at least 1 command"));
        }
        if !(self.stdin || self.stdout || self.stderr) {
            return Err(ApiError::bad_request(
                "you must specify at least 1 of stdin, stdout, stderr",
            ));
        }
        Ok(())
    }
}

/// What ends a session.
pub enum Ends {
    /// The process started for it (exec, attach to an ephemeral container):
    /// its exit code is the session's.
    Child(Child),
    /// The container attached to (its code, once its process has ended):
    /// the session ends with it, in success, as the kubelet's attach does;
    /// a client that goes away leaves it running.
    Container(tokio::sync::watch::Receiver<Option<i32>>),
}

/// A started process and its streams.
pub struct ExecProcess {
    /// What ends the session.
    pub ends: Ends,
    /// Its standard streams.
    pub io: ExecIo,
    /// Ends whatever the process left behind, once the session is over.
    pub cleanup: Box<dyn FnOnce() + Send>,
}

/// How the process's streams are connected.
pub enum ExecIo {
    /// Pipes (those not asked for are null).
    Pipes {
        /// Its standard input.
        stdin: Option<ChildStdin>,
        /// Its standard output.
        stdout: Option<tokio::process::ChildStdout>,
        /// Its standard error.
        stderr: Option<tokio::process::ChildStderr>,
    },
    /// The controlling side of its pseudo-terminal.
    Pty(OwnedFd),
    /// A running container's streams (attach): its output as it comes, its
    /// input, and its terminal for resizes.
    Container {
        /// What it writes (standard output, or its terminal).
        output: tokio::sync::broadcast::Receiver<Bytes>,
        /// Its standard input (None when the client sends none).
        input: Option<mpsc::UnboundedSender<Bytes>>,
        /// Its terminal, with a TTY.
        terminal: Option<OwnedFd>,
    },
}

/// Starts the process once the connection is upgraded (a failure to start
/// is reported on the error channel, as a runtime's exec error is).
pub type Launcher = Box<dyn FnOnce() -> std::io::Result<ExecProcess> + Send>;

/// The upgrade a request carries, kept for the route that serves it.
pub struct PendingUpgrade {
    /// A WebSocket upgrade.
    pub ws: Option<WebSocketUpgrade>,
    /// The request's query.
    pub raw_query: String,
    /// What the client asked to upgrade to (`websocket`, `SPDY/3.1`).
    pub protocol: String,
    /// The connection, once upgraded, for an upgrade that is not a
    /// WebSocket (SPDY).
    pub on_upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// `X-Stream-Protocol-Version` values (what SPDY clients speak).
    pub stream_protocols: Vec<String>,
}

tokio::task_local! {
    static PENDING: RefCell<Option<PendingUpgrade>>;
}

/// Takes the upgrade out of a request for `…/exec`, `…/attach` or
/// `…/portforward` (any method: kubectl sends GET, the SPDY clients POST).
pub async fn pending_upgrade(parts: &mut Parts) -> Option<PendingUpgrade> {
    let path = parts.uri.path();
    if !(path.ends_with("/exec") || path.ends_with("/attach") || path.ends_with("/portforward")) {
        return None;
    }
    let protocol = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())?
        .to_string();
    let raw_query = parts.uri.query().unwrap_or_default().to_string();
    let ws = if protocol.eq_ignore_ascii_case("websocket") {
        let method = std::mem::replace(&mut parts.method, Method::GET);
        let ws = WebSocketUpgrade::from_request_parts(parts, &()).await.ok();
        parts.method = method;
        ws
    } else {
        None
    };
    let on_upgrade = if ws.is_none() {
        parts.extensions.remove::<hyper::upgrade::OnUpgrade>()
    } else {
        None
    };
    let stream_protocols = parts
        .headers
        .get_all("X-Stream-Protocol-Version")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    Some(PendingUpgrade {
        ws,
        raw_query,
        protocol,
        on_upgrade,
        stream_protocols,
    })
}

/// Runs `f` with `pending` available to [`connect`].
pub async fn with_upgrade<F: Future>(pending: Option<PendingUpgrade>, f: F) -> F::Output {
    PENDING.scope(RefCell::new(pending), f).await
}

/// The upgrade of the request being served (once).
pub fn take_pending() -> Option<PendingUpgrade> {
    PENDING.try_with(|p| p.borrow_mut().take()).ok().flatten()
}

/// Serves an upgraded exec or attach request the apiserver has already
/// validated (pod, container, node, upgrade headers).
pub fn connect(api: &Api, namespace: &str, pod: &str, attach: bool) -> ApiResult<Response> {
    let Some(pending) = take_pending() else {
        return Err(ApiError::bad_request("Upgrade request required"));
    };
    let req = StreamRequest::from_query(namespace, pod, attach, &pending.raw_query);
    req.validate()?;
    // Asked first, so that a stream that cannot be served says why
    // whatever protocol the client speaks.
    let launcher = api.hooks().pod_stream(&req)?;
    let Some(ws) = pending.ws else {
        return Err(ApiError::bad_request(format!(
            "the agentdeck sandbox serves {} over WebSocket ({}), not {}; kubectl 1.30 or later and kube-rs use WebSocket",
            if attach { "attach" } else { "exec" },
            PROTOCOLS.join(", "),
            pending.protocol
        )));
    };
    let ws = ws.protocols(PROTOCOLS);
    let v5 = match ws.selected_protocol().and_then(|p| p.to_str().ok()) {
        Some(p) if p == PROTOCOLS[0] => true,
        Some(_) => false,
        None => {
            return Err(ApiError::bad_request(format!(
                "no supported WebSocket subprotocol was requested; the sandbox speaks {}",
                PROTOCOLS.join(", ")
            )));
        }
    };
    Ok(ws
        .on_failed_upgrade(|e| tracing::debug!(error = %e, "exec upgrade failed"))
        .on_upgrade(move |socket| session(socket, v5, req, launcher)))
}

/// The exit code that ends the session.
async fn ended(ends: &mut Ends) -> i32 {
    match ends {
        Ends::Child(child) => child
            .wait()
            .await
            .map_or(255, super::kubelet::runtime::exit_code),
        Ends::Container(rx) => loop {
            if let Some(code) = *rx.borrow_and_update() {
                return code;
            }
            if rx.changed().await.is_err() {
                return 255;
            }
        },
    }
}

/// A text frame read as the binary frame of the same bytes: the
/// apiserver's stream reader (wsstream, `websocket.Message.Receive` into a
/// byte slice) takes either, and the Python client sends `str` stdin as
/// text (`ws_client.write_channel`).
fn text_as_binary(m: Message) -> Message {
    match m {
        Message::Text(t) => Message::Binary(Bytes::copy_from_slice(t.as_str().as_bytes())),
        other => other,
    }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(Bytes::from(v))
}

/// The `Status` the error channel carries for an exit code.
pub fn exit_status(command: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: command '{}' exited with {code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

fn failure_status(message: String) -> Value {
    json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500})
}

/// Where stdin goes.
enum Input {
    Pipe(mpsc::UnboundedSender<Bytes>),
    Pty(std::sync::mpsc::Sender<Bytes>),
}

impl Input {
    fn send(&self, data: Bytes) {
        match self {
            Input::Pipe(tx) => {
                let _ = tx.send(data);
            }
            Input::Pty(tx) => {
                let _ = tx.send(data);
            }
        }
    }
}

async fn pump_pipe(mut from: impl AsyncRead + Unpin, channel: u8, out: mpsc::Sender<Message>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out.send(frame(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn resize(master: &OwnedFd, data: &[u8]) {
    let Ok(size) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let dim = |k: &str| {
        size[k]
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(0)
    };
    let (cols, rows) = (dim("Width"), dim("Height"));
    if cols == 0 || rows == 0 {
        return;
    }
    let _ = rustix::termios::tcsetwinsize(
        master,
        rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    );
}

/// One upgraded connection: start the process, pump, report its end.
async fn session(socket: WebSocket, v5: bool, req: StreamRequest, launcher: Launcher) {
    let (sink, mut incoming) = socket.split();
    let (out_tx, out_rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(write_out(sink, out_rx));
    let mut process = match launcher() {
        Ok(p) => p,
        Err(e) => {
            let status = launch_failure(&req, &e);
            let _ = out_tx
                .send(frame(ERROR, status.to_string().as_bytes()))
                .await;
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    };
    let io = std::mem::replace(
        &mut process.io,
        ExecIo::Pipes {
            stdin: None,
            stdout: None,
            stderr: None,
        },
    );
    let mut streams = connect_streams(io, req.stdin, &out_tx);
    let attached = matches!(process.ends, Ends::Container(_));
    let (code, client_gone) = pump(&mut process.ends, &mut incoming, &mut streams, v5).await;
    let Streams {
        readers,
        master,
        input,
    } = streams;
    drop(input);
    drain(readers, process.cleanup, attached && client_gone).await;
    drop(master);
    if !client_gone {
        let body = if attached {
            exit_status(&req.command, 0)
        } else {
            exit_status(&req.command, code)
        };
        let _ = out_tx.send(frame(ERROR, body.to_string().as_bytes())).await;
    }
    drop(out_tx);
    let _ = writer.await;
}

/// Sends what the session queues to the client, then closes the socket
/// normally (clients read any other closure as an error).
pub(super) async fn write_out(
    mut sink: SplitSink<WebSocket, Message>,
    mut out_rx: mpsc::Receiver<Message>,
) {
    while let Some(m) = out_rx.recv().await {
        if sink.send(m).await.is_err() {
            return;
        }
    }
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: close_code::NORMAL,
            reason: "".into(),
        })))
        .await;
    let _ = sink.close().await;
}

/// The `Status` reporting a process that could not be started, as a
/// runtime's exec error reads.
fn launch_failure(req: &StreamRequest, e: &std::io::Error) -> Value {
    let what = if req.attach { "attach" } else { "exec" };
    let program = req.command.first().map_or("sh", String::as_str);
    let message = if e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "error executing command in container: exec: \"{program}\": executable file not found in $PATH"
        )
    } else {
        format!("error executing command in container: {what} {program}: {e}")
    };
    failure_status(message)
}

/// The process's streams as the session pumps them.
struct Streams {
    /// Tasks forwarding its output to the client.
    readers: Vec<tokio::task::JoinHandle<()>>,
    /// Its terminal, for resizes.
    master: Option<OwnedFd>,
    /// Where the client's input goes (None once it has ended).
    input: Option<Input>,
}

/// Connects the process's streams to the session: its output to `out`,
/// the client's input (when `stdin` was asked for, with a TTY) to it.
fn connect_streams(io: ExecIo, stdin: bool, out: &mpsc::Sender<Message>) -> Streams {
    match io {
        ExecIo::Pipes {
            stdin,
            stdout,
            stderr,
        } => connect_pipes(stdin, stdout, stderr, out),
        ExecIo::Pty(fd) => connect_pty(fd, stdin, out),
        ExecIo::Container {
            output,
            input,
            terminal,
        } => Streams {
            readers: vec![tokio::spawn(forward_output(output, out.clone()))],
            master: terminal,
            input: input.map(Input::Pipe),
        },
    }
}

/// A process's pipes: stdout and stderr pumped to their channels, stdin
/// written from a queue.
fn connect_pipes(
    stdin: Option<ChildStdin>,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
    out: &mpsc::Sender<Message>,
) -> Streams {
    let mut readers = Vec::new();
    let mut input = None;
    if let Some(stdout) = stdout {
        readers.push(tokio::spawn(pump_pipe(stdout, STDOUT, out.clone())));
    }
    if let Some(err) = stderr {
        readers.push(tokio::spawn(pump_pipe(err, STDERR, out.clone())));
    }
    if let Some(mut stdin) = stdin {
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        tokio::spawn(async move {
            while let Some(data) = rx.recv().await {
                if stdin.write_all(&data).await.is_err() {
                    return;
                }
            }
        });
        input = Some(Input::Pipe(tx));
    }
    Streams {
        readers,
        master: None,
        input,
    }
}

/// A process's pseudo-terminal: read (on a blocking thread) to stdout,
/// written from a queue when the client sends input.
fn connect_pty(fd: OwnedFd, stdin: bool, out: &mpsc::Sender<Message>) -> Streams {
    let mut readers = Vec::new();
    let mut input = None;
    if let (Ok(read_fd), Ok(write_fd)) = (fd.try_clone(), fd.try_clone()) {
        let out = out.clone();
        readers.push(tokio::task::spawn_blocking(move || {
            let mut file = std::fs::File::from(read_fd);
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                // EIO once every holder of the terminal is gone.
                match file.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if out.blocking_send(frame(STDOUT, &buf[..n])).is_err() {
                            return;
                        }
                    }
                }
            }
        }));
        if stdin {
            let (tx, rx) = std::sync::mpsc::channel::<Bytes>();
            std::thread::spawn(move || {
                let mut file = std::fs::File::from(write_fd);
                while let Ok(data) = rx.recv() {
                    if file.write_all(&data).is_err() {
                        return;
                    }
                }
            });
            input = Some(Input::Pty(tx));
        }
    }
    Streams {
        readers,
        master: Some(fd),
        input,
    }
}

/// A running container's output, as it comes, to stdout (what it wrote
/// while the session lagged behind is skipped).
async fn forward_output(
    mut output: tokio::sync::broadcast::Receiver<Bytes>,
    out: mpsc::Sender<Message>,
) {
    loop {
        match output.recv().await {
            Ok(data) => {
                if out.send(frame(STDOUT, &data)).await.is_err() {
                    return;
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Pumps the client's frames to the process until it ends (its exit code)
/// or, attached to a container, the client goes. Returns the code and
/// whether the client went away.
async fn pump(
    ends: &mut Ends,
    incoming: &mut SplitStream<WebSocket>,
    streams: &mut Streams,
    v5: bool,
) -> (i32, bool) {
    let mut client_gone = false;
    let code = loop {
        tokio::select! {
            code = ended(ends) => break code,
            msg = incoming.next(), if !client_gone => match msg.map(|m| m.map(text_as_binary)) {
                Some(Ok(Message::Binary(b))) => from_client(&b, streams, v5),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    client_gone = true;
                    streams.input = None;
                    if hang_up(ends) {
                        break 0;
                    }
                }
                Some(Ok(_)) => {}
            },
        }
    };
    (code, client_gone)
}

/// One binary frame from the client: input, a resize, or (v5) the end of
/// input.
fn from_client(b: &Bytes, streams: &mut Streams, v5: bool) {
    match b.first() {
        Some(&STDIN) => {
            if let Some(i) = &streams.input {
                i.send(b.slice(1..));
            }
        }
        Some(&RESIZE) => {
            if let Some(m) = &streams.master {
                resize(m, &b[1..]);
            }
        }
        Some(&CLOSE) if v5 && b.get(1) == Some(&STDIN) => {
            // End of input: the process reads EOF.
            streams.input = None;
        }
        _ => {}
    }
}

/// The client went away. A process started for the session is ended
/// (nobody reads it any more); true when attached to a container, which
/// goes on (detached).
fn hang_up(ends: &mut Ends) -> bool {
    match ends {
        Ends::Child(child) => {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGHUP,
                );
            }
            let _ = child.start_kill();
            false
        }
        Ends::Container(_) => true,
    }
}

/// Waits for what the process wrote before it ended, so that it is sent
/// before its status; output held open by something it left running is
/// not waited for long, and a detached session's not at all. Runs
/// `cleanup` either way.
async fn drain(
    mut readers: Vec<tokio::task::JoinHandle<()>>,
    cleanup: Box<dyn FnOnce() + Send>,
    detached: bool,
) {
    if detached {
        // The output of a container that goes on is not waited for.
        for r in &readers {
            r.abort();
        }
    }
    let drain = futures::future::join_all(readers.iter_mut());
    if tokio::time::timeout(std::time::Duration::from_secs(2), drain)
        .await
        .is_err()
    {
        cleanup();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            futures::future::join_all(readers),
        )
        .await;
    } else {
        cleanup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_commands_and_flags_are_read_from_the_query() {
        let r = StreamRequest::from_query(
            "ns",
            "p",
            false,
            "command=sh&command=-c&command=echo%20hi%3Bexit+3&container=agent&stdin=true&stdout=1&tty=false",
        );
        assert_eq!(r.command, ["sh", "-c", "echo hi;exit 3"]);
        assert_eq!(r.container.as_deref(), Some("agent"));
        assert!(r.stdin && r.stdout && !r.stderr && !r.tty);
        assert!(r.validate().is_ok());
        // As every boolean query value: true unless 0 or false in any case.
        let r =
            StreamRequest::from_query("ns", "p", false, "stdin=yes&stdout=True&stderr=FALSE&tty");
        assert!(r.stdin && r.stdout && !r.stderr && r.tty);
    }

    #[test]
    fn exec_without_a_command_or_any_stream_is_refused() {
        let none = StreamRequest::from_query("ns", "p", false, "stdout=true");
        assert!(none.validate().is_err());
        let quiet = StreamRequest::from_query("ns", "p", false, "command=ls");
        let e = quiet.validate().expect_err("no stream");
        assert!(e.message.contains("stdin, stdout, stderr"), "{}", e.message);
        let attach = StreamRequest::from_query("ns", "p", true, "stdout=true");
        assert!(attach.validate().is_ok());
    }

    #[test]
    fn a_non_zero_exit_is_reported_with_its_code_as_kubectl_reads_it() {
        let cmd = vec!["sh".to_string(), "-c".into(), "exit 3".into()];
        let s = exit_status(&cmd, 3);
        assert_eq!(s["status"], "Failure");
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(s["details"]["causes"][0]["message"], "3");
        assert_eq!(exit_status(&cmd, 0)["status"], "Success");
    }
}
