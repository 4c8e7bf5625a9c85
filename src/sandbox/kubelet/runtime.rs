//! The sandbox's container runtime: what a container runs as (a real
//! process or a simulation), starting it with its output captured line by
//! line, signalling its process group, and readiness probes.
//!
//! What runs for real is the sandbox's policy ([`super::policy`], where the
//! rules are written down); this module applies it:
//!
//! - agentdeck (image or `command[0]`) runs the agentdeck binary (the
//!   kubelet's `exe`), with `command[1..] + args` (a `command[0]` that is not
//!   agentdeck is kept as the first argument);
//! - agentdeck's own `sh -c` scripts run with the host's `/bin/sh`;
//! - a container with the simulation annotations ([`SIMULATE`],
//!   [`EXIT_AFTER`], [`EXIT_CODE`], [`READY`]) is simulated: it logs that it started and runs
//!   until stopped, or exits after [`EXIT_AFTER`] seconds with [`EXIT_CODE`];
//! - any other container runs what a runtime would (its `command`/`args`,
//!   else its image's ENTRYPOINT and CMD as the policy knows them) as a
//!   process of the host's userland (in the container's namespaces, or with
//!   its mount paths rewritten to host directories where there are none);
//! - the pause image's `/pause` is played ([`Program::Pause`]);
//! - a container with neither whose image the policy does not know cannot
//!   run ([`Program::Unpullable`]).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use super::logs::ContainerLogs;
use super::policy;

/// Annotation: seconds after which simulated containers exit
/// (`<ANNOTATION>.<container>` for one container).
pub const EXIT_AFTER: &str = "sandbox.agentdeck.dev/exit-after";
/// Annotation: the exit code of simulated containers (default 0; alone it
/// means exit at once).
pub const EXIT_CODE: &str = "sandbox.agentdeck.dev/exit-code";
/// Annotation: `"false"` keeps a simulated container unready.
pub const READY: &str = "sandbox.agentdeck.dev/ready";
/// Annotation: `"true"` simulates the pod's containers (or
/// `<ANNOTATION>.<container>` one of them) whatever their command: they log
/// that they started and run until stopped, ready (a placeholder that
/// needs no program on this machine).
pub const SIMULATE: &str = "sandbox.agentdeck.dev/simulate";
/// Annotation: `"true"` ran `sh -c` containers' scripts for real when
/// other commands were simulated; every command runs now, and the
/// annotation changes nothing (pods written for earlier sandboxes keep it).
pub const RUN_SHELL: &str = "sandbox.agentdeck.dev/run-shell";

/// How a container runs in the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Program {
    /// A real process.
    Exec {
        program: PathBuf,
        args: Vec<String>,
        /// A shell script (whose mount paths are rewritten when there is
        /// no mount namespace).
        shell: bool,
    },
    /// Nothing runs: the kubelet plays the container.
    Simulated {
        exit_after: Option<Duration>,
        exit_code: i32,
        ready: bool,
    },
    /// The pause image's program, played exactly: silent, ready, until
    /// stopped.
    Pause,
    /// Nothing can run: the image is one the sandbox cannot stand in for
    /// (the runtime's pull error).
    Unpullable { message: String },
}

fn annotation<'a>(pod: &'a Value, key: &str, container: &str) -> Option<&'a str> {
    let a = &pod["metadata"]["annotations"];
    a[format!("{key}.{container}")]
        .as_str()
        .or_else(|| a[key].as_str())
}

fn is_shell(c: &str) -> bool {
    matches!(
        c.rsplit('/').next().unwrap_or(c),
        "sh" | "bash" | "ash" | "dash"
    )
}

/// Whether the simulation annotations shape `container` (its author asked
/// for a stand-in rather than its command).
fn simulation_asked(pod: &Value, container: &str) -> bool {
    annotation(pod, SIMULATE, container) == Some("true")
        || [EXIT_AFTER, EXIT_CODE, READY]
            .iter()
            .any(|key| annotation(pod, key, container).is_some())
}

/// Decides how `container` (with `command` and `args` already expanded)
/// runs, given the agentdeck executable (the rules of [`policy`]).
pub(super) fn plan(
    pod: &Value,
    container: &Value,
    command: &[String],
    args: &[String],
    exe: &Path,
) -> Program {
    let name = container["name"].as_str().unwrap_or_default();
    let image = container["image"].as_str().unwrap_or_default();
    if command
        .first()
        .is_some_and(|c| policy::is_agentdeck_command(c))
    {
        return Program::Exec {
            program: exe.to_path_buf(),
            args: command[1..].iter().chain(args).cloned().collect(),
            shell: false,
        };
    }
    let argv: Vec<&String> = command.iter().chain(args).collect();
    if let [sh, flag, script, rest @ ..] = argv.as_slice()
        && is_shell(sh)
        && flag.as_str() == "-c"
        && policy::is_product_script(script)
    {
        let mut args = vec!["-c".to_string(), (*script).clone()];
        args.extend(rest.iter().map(|s| (*s).clone()));
        return Program::Exec {
            program: PathBuf::from("/bin/sh"),
            args,
            shell: true,
        };
    }
    if policy::is_agentdeck_image(image) {
        return Program::Exec {
            program: exe.to_path_buf(),
            args: command.iter().chain(args).cloned().collect(),
            shell: false,
        };
    }
    let argv = policy::container_argv(image, command, args);
    if !simulation_asked(pod, name) {
        if policy::is_pause(image, &argv) {
            return Program::Pause;
        }
        let Some((program, rest)) = argv.split_first() else {
            return Program::Unpullable {
                message: policy::unpullable(image),
            };
        };
        let shell = is_shell(program) && rest.first().is_some_and(|f| f == "-c");
        return Program::Exec {
            program: PathBuf::from(program),
            args: rest.to_vec(),
            shell,
        };
    }
    let exit_after = annotation(pod, EXIT_AFTER, name).and_then(|s| s.trim().parse::<f64>().ok());
    let exit_code = annotation(pod, EXIT_CODE, name).and_then(|s| s.trim().parse::<i32>().ok());
    Program::Simulated {
        exit_after: match (exit_after, exit_code) {
            (Some(s), _) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s)),
            (None, Some(_)) => Some(Duration::ZERO),
            _ => None,
        },
        exit_code: exit_code.unwrap_or(0),
        ready: annotation(pod, READY, name) != Some("false"),
    }
}

/// Whether `program` is in the container's file tree, as a runtime's exec
/// finds it: a path (relative ones from `cwd`), or a name on the
/// container's `PATH`; the tree is the host's with the container's
/// volumes at their mount paths.
pub(super) fn program_exists(
    program: &Path,
    env: &[(String, String)],
    mounts: &[super::volumes::ContainerMount],
    cwd: &Path,
) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        let host = super::volumes::resolve_host_path(None, mounts, p);
        std::fs::metadata(host).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_absolute() {
        return executable(program);
    }
    if program.components().count() > 1 {
        return executable(&cwd.join(program));
    }
    let path = env.iter().find(|(k, _)| k == "PATH").map_or(
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        |(_, v)| v.as_str(),
    );
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .any(|d| executable(&Path::new(d).join(program)))
}

/// A started process: its group is its own (`process_group(0)`).
pub(super) struct Process {
    pub child: Child,
    pub pgid: Pid,
    pub readers: Vec<tokio::task::JoinHandle<()>>,
    /// Its standard streams for attach, when the container keeps its
    /// standard input open (`stdin: true`).
    pub attach: Option<Arc<Attach>>,
}

/// The standard streams of a container that keeps its input open
/// (`stdin: true`, as `kubectl run -i` writes it), for attach: a
/// pseudo-terminal with `tty: true`, else pipes. Its output goes to the log
/// and to whoever is attached.
pub(crate) struct Attach {
    /// Bytes for the container's standard input.
    pub input: tokio::sync::mpsc::UnboundedSender<Bytes>,
    /// Its output as it comes.
    pub output: tokio::sync::broadcast::Sender<Bytes>,
    /// The terminal's controlling side (for resizes), with `tty`.
    pub master: Option<std::os::fd::OwnedFd>,
    /// Its exit code, once its process has ended.
    pub exited: tokio::sync::watch::Sender<Option<i32>>,
}

/// How a container's standard streams are set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Stdio3 {
    /// `stdin: true`.
    pub stdin: bool,
    /// `tty: true` (with `stdin`).
    pub tty: bool,
}

/// What to start.
pub(super) struct Launch<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: &'a Path,
}

/// Whether `launch` starts the namespaces' entry point ([`super::mountns`]),
/// whose command takes a terminal as its own controlling one in the
/// container (its PID namespace's), as runc gives it: the process started
/// here leads a session without one.
fn in_namespaces(launch: &Launch<'_>) -> bool {
    launch.args.first().map(String::as_str) == Some(super::mountns::SUBCOMMAND)
}

fn setsid_program() -> Option<&'static Path> {
    ["/usr/bin/setsid", "/bin/setsid"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
}

/// Starts a process with only the given environment, in its own process
/// group (and session, see [`kill_container`]), its stdout and stderr
/// appended to `logs` as instance `id`; with `stdio.stdin` its streams are
/// kept for attach (a pseudo-terminal, its controlling one, with `tty`).
pub(super) fn spawn(
    launch: &Launch<'_>,
    logs: &Arc<ContainerLogs>,
    id: &str,
    stdio: Stdio3,
) -> std::io::Result<Process> {
    // A session of its own (util-linux `setsid`, where there is one) marks
    // every process of the container, orphans included, for
    // [`kill_container`]. Not yet a group leader, `setsid` execs the
    // program in place: same pid, which leads its new group and session.
    let tty = stdio.stdin && stdio.tty;
    let mut cmd = match setsid_program() {
        Some(setsid) => {
            let mut cmd = Command::new(setsid);
            if tty && !in_namespaces(launch) {
                cmd.arg("--ctty");
            }
            cmd.arg("--").arg(launch.program);
            cmd
        }
        None => {
            let mut cmd = Command::new(launch.program);
            cmd.process_group(0);
            cmd
        }
    };
    cmd.args(launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(launch.cwd)
        .kill_on_drop(true);
    let (output, _) = tokio::sync::broadcast::channel::<Bytes>(256);
    let (input, mut input_rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let mut readers = Vec::new();
    let mut master = None;
    let child = if tty {
        let pty = nix::pty::openpty(None, None).map_err(std::io::Error::from)?;
        let slave = pty.slave;
        cmd.stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave));
        let child = cmd.spawn()?;
        // The terminal closes (EIO on its reads) once the process and what
        // it started are gone, not while this side holds it open.
        drop(cmd);
        let read = std::fs::File::from(pty.master.try_clone()?);
        let write = std::fs::File::from(pty.master.try_clone()?);
        let (logs, id, out) = (logs.clone(), id.to_string(), output.clone());
        readers.push(tokio::task::spawn_blocking(move || {
            read_terminal(read, &logs, &id, &out);
        }));
        std::thread::spawn(move || {
            let mut write = write;
            while let Some(data) = input_rx.blocking_recv() {
                if std::io::Write::write_all(&mut write, &data).is_err() {
                    return;
                }
            }
        });
        master = Some(pty.master);
        child
    } else {
        cmd.stdin(if stdio.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            tokio::spawn(async move {
                while let Some(data) = input_rx.recv().await {
                    if stdin.write_all(&data).await.is_err() {
                        return;
                    }
                }
            });
        }
        let out = stdio.stdin.then(|| output.clone());
        if let Some(o) = child.stdout.take() {
            readers.push(tokio::spawn(read_lines(
                o,
                logs.clone(),
                id.to_string(),
                out.clone(),
            )));
        }
        if let Some(e) = child.stderr.take() {
            readers.push(tokio::spawn(read_lines(
                e,
                logs.clone(),
                id.to_string(),
                out,
            )));
        }
        child
    };
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| std::io::Error::other("the process has no id"))?;
    let attach = stdio.stdin.then(|| {
        Arc::new(Attach {
            input,
            output,
            master,
            exited: tokio::sync::watch::Sender::new(None),
        })
    });
    Ok(Process {
        child,
        pgid: Pid::from_raw(pid),
        readers,
        attach,
    })
}

/// Reads a container's terminal until it closes: whole lines to its log,
/// every chunk to whoever is attached.
fn read_terminal(
    mut from: std::fs::File,
    logs: &ContainerLogs,
    id: &str,
    out: &tokio::sync::broadcast::Sender<Bytes>,
) {
    let mut buf = vec![0u8; 32 * 1024];
    let mut line: Vec<u8> = Vec::new();
    loop {
        // EIO once every holder of the terminal is gone.
        let n = match std::io::Read::read(&mut from, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = out.send(Bytes::copy_from_slice(&buf[..n]));
        for &b in &buf[..n] {
            line.push(b);
            if b == b'\n' {
                logs.append(id, jiff::Timestamp::now(), std::mem::take(&mut line));
            }
        }
    }
    if !line.is_empty() {
        logs.append(id, jiff::Timestamp::now(), line);
    }
}

/// The command for a process exec'd into a running container (`kubectl
/// exec`, and attach to an ephemeral container): the same environment and
/// working directory as the container's own process ([`spawn`]), in a
/// session of its own; with `tty` that session's controlling terminal is
/// its standard input (`setsid --ctty`), which the caller connects to a
/// pseudo-terminal. The caller sets the standard streams.
pub(super) fn exec_command(launch: &Launch<'_>, tty: bool) -> Command {
    let mut cmd = match setsid_program() {
        Some(setsid) => {
            let mut cmd = Command::new(setsid);
            if tty && !in_namespaces(launch) {
                cmd.arg("--ctty");
            }
            cmd.arg("--").arg(launch.program);
            cmd
        }
        None => {
            let mut cmd = Command::new(launch.program);
            cmd.process_group(0);
            cmd
        }
    };
    cmd.args(launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(launch.cwd)
        .kill_on_drop(true);
    cmd
}

async fn read_lines(
    stream: impl AsyncRead + Unpin,
    logs: Arc<ContainerLogs>,
    id: String,
    attached: Option<tokio::sync::broadcast::Sender<Bytes>>,
) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if let Some(out) = &attached {
                    let _ = out.send(Bytes::copy_from_slice(&line));
                }
                logs.append(&id, jiff::Timestamp::now(), line);
            }
        }
    }
}

/// Sends `signal` to every process of the group (gone already is fine).
pub(super) fn signal_group(pgid: Pid, signal: Signal) {
    let _ = killpg(pgid, signal);
}

/// SIGKILL for a whole container, as a runtime kills its cgroup: the main
/// process's group, every process below it, also those in groups of their
/// own (an agent runs each task in one), and what is left of its session
/// (orphans of a main process that is gone). Without this a task would
/// outlive its killed agent and, once requeued, run twice.
pub(super) fn kill_container(pgid: Pid) {
    let procs = processes();
    signal_group(pgid, Signal::SIGKILL);
    let mut below = Vec::new();
    let mut queue = vec![pgid.as_raw()];
    while let Some(parent) = queue.pop() {
        for p in procs.iter().filter(|p| p.ppid == parent) {
            below.push(p.pid);
            queue.push(p.pid);
        }
    }
    // The session is the container's only when `spawn` gave it one.
    let own = nix::unistd::getsid(None).map(Pid::as_raw).ok();
    if own != Some(pgid.as_raw()) && pgid.as_raw() > 1 {
        below.extend(
            procs
                .iter()
                .filter(|p| p.session == pgid.as_raw())
                .map(|p| p.pid),
        );
    }
    for pid in below {
        let pid = Pid::from_raw(pid);
        let _ = kill(pid, Signal::SIGKILL);
        // Its group, if it leads one: what it started there goes too.
        let _ = killpg(pid, Signal::SIGKILL);
    }
}

pub(super) struct ProcessEntry {
    pub pid: i32,
    pub ppid: i32,
    pub session: i32,
}

/// Every process of the machine, from `/proc` (none where there is none).
pub(super) fn processes() -> Vec<ProcessEntry> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid pgrp session ...`; comm may hold spaces
            // and parentheses.
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().take(4).collect();
            Some(ProcessEntry {
                pid,
                ppid: fields.get(1)?.parse().ok()?,
                session: fields.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

/// A process's exit as a container runtime reports it: its code, or 128 +
/// the signal that ended it.
pub(crate) fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(255)
}

/// One run of a readiness probe: true when it passes. `httpGet` is a real
/// HTTP/1.1 GET (200–399 passes, as the kubelet's prober decides);
/// `tcpSocket` a connect; `exec` and `grpc` cannot run in the sandbox and
/// pass.
pub(super) async fn probe(probe: &Value, container: &Value, pod_ip: &str) -> bool {
    let timeout = Duration::from_secs(probe["timeoutSeconds"].as_u64().unwrap_or(1).max(1));
    if let Some(h) = probe.get("httpGet") {
        let host = h["host"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(pod_ip);
        let Some(port) = resolve_port(&h["port"], container) else {
            return false;
        };
        let path = h["path"].as_str().unwrap_or("/");
        let headers: Vec<(String, String)> = h["httpHeaders"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| {
                Some((
                    x["name"].as_str()?.to_string(),
                    x["value"].as_str()?.to_string(),
                ))
            })
            .collect();
        let https = h["scheme"].as_str() == Some("HTTPS");
        return tokio::time::timeout(timeout, http_get(host, port, path, &headers, https))
            .await
            .unwrap_or(false);
    }
    if let Some(t) = probe.get("tcpSocket") {
        let host = t["host"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(pod_ip);
        let Some(port) = resolve_port(&t["port"], container) else {
            return false;
        };
        return matches!(
            tokio::time::timeout(timeout, TcpStream::connect((host, port))).await,
            Ok(Ok(_))
        );
    }
    true
}

fn resolve_port(port: &Value, container: &Value) -> Option<u16> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).ok();
    }
    let name = port.as_str()?;
    if let Ok(n) = name.parse() {
        return Some(n);
    }
    container["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|n| u16::try_from(n).ok())
}

async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    https: bool,
) -> bool {
    let Ok(mut stream) = TcpStream::connect((host, port)).await else {
        return false;
    };
    if https {
        // No TLS client here: a listening port is the best the sandbox can tell.
        return true;
    }
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    if stream.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    if reader.read_line(&mut status_line).await.is_err() {
        return false;
    }
    status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .is_some_and(|c| (200..400).contains(&c))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::policy::is_agentdeck_image;
    use super::*;
    use crate::plan::manifests::RUNNER_SCRIPT;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn plan_of(pod: &Value, c: &Value) -> Program {
        let command: Vec<String> = c["command"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let args: Vec<String> = c["args"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        plan(pod, c, &command, &args, Path::new("/bin/agentdeck-exe"))
    }

    #[test]
    fn agentdeck_images_are_recognised_from_any_registry_and_tag() {
        for yes in [
            "agentdeck",
            "agentdeck:1.0",
            "ghcr.io/x/agentdeck:1.0",
            "localhost:5000/agentdeck",
            "r.io/agentdeck@sha256:ab",
        ] {
            assert!(is_agentdeck_image(yes), "{yes}");
        }
        for no in [
            "nginx",
            "ghcr.io/agentdeck/runner:1",
            "agentdeck-runner",
            "localhost:5000/x",
        ] {
            assert!(!is_agentdeck_image(no), "{no}");
        }
    }

    #[test]
    fn an_agentdeck_command_runs_the_executable_without_its_name() {
        let pod = json!({});
        let c = json!({"name": "worker", "image": "busybox", "command": ["/usr/bin/agentdeck", "agent"], "args": ["--task", "t"]});
        assert_eq!(
            plan_of(&pod, &c),
            Program::Exec {
                program: "/bin/agentdeck-exe".into(),
                args: strings(&["agent", "--task", "t"]),
                shell: false
            }
        );
        let c = json!({"name": "agent", "image": "ghcr.io/x/agentdeck:1.0", "args": ["agent"]});
        assert_eq!(
            plan_of(&pod, &c),
            Program::Exec {
                program: "/bin/agentdeck-exe".into(),
                args: strings(&["agent"]),
                shell: false
            }
        );
    }

    #[test]
    fn the_task_runner_script_runs_in_the_hosts_shell_whatever_the_image() {
        let runner = json!({"name": "runner", "image": "hashicorp/terraform:1.9", "command": ["/bin/sh", "-c", RUNNER_SCRIPT]});
        assert!(matches!(
            plan_of(&json!({}), &runner),
            Program::Exec { ref program, shell: true, .. } if program == Path::new("/bin/sh")
        ));
    }

    #[test]
    fn any_command_runs_with_the_hosts_userland_standing_in_for_the_image() {
        let script =
            json!({"name": "s", "image": "busybox", "command": ["sh"], "args": ["-c", "echo hi"]});
        let expected = Program::Exec {
            program: "sh".into(),
            args: strings(&["-c", "echo hi"]),
            shell: true,
        };
        assert_eq!(plan_of(&json!({}), &script), expected);
        // The annotation of earlier sandboxes changes nothing.
        let opted_in = json!({"metadata": {"annotations": {RUN_SHELL: "true"}}});
        assert_eq!(plan_of(&opted_in, &script), expected);
        // `kubectl run bb --image=busybox -- sleep 5`: args alone, and
        // busybox has no entrypoint.
        let args = json!({"name": "bb", "image": "busybox", "args": ["sleep", "5"]});
        assert_eq!(
            plan_of(&json!({}), &args),
            Program::Exec {
                program: "sleep".into(),
                args: strings(&["5"]),
                shell: false
            }
        );
        // A program the host may not have is still what runs (and fails
        // as a missing binary when it is not there).
        let nginx =
            json!({"name": "web", "image": "nginx", "command": ["nginx", "-g", "daemon off;"]});
        assert!(matches!(
            plan_of(&json!({}), &nginx),
            Program::Exec { ref program, .. } if program == Path::new("nginx")
        ));
    }

    #[test]
    fn the_simulation_annotations_keep_a_command_simulated() {
        let c = json!({"name": "c", "image": "busybox", "command": ["sleep", "60"]});
        let pod = json!({"metadata": {"annotations": {SIMULATE: "true"}}});
        assert_eq!(
            plan_of(&pod, &c),
            Program::Simulated {
                exit_after: None,
                exit_code: 0,
                ready: true
            }
        );
        let pod = json!({"metadata": {"annotations": {"sandbox.agentdeck.dev/exit-code.c": "3"}}});
        assert_eq!(
            plan_of(&pod, &c),
            Program::Simulated {
                exit_after: Some(Duration::ZERO),
                exit_code: 3,
                ready: true
            }
        );
    }

    #[test]
    fn programs_are_found_on_the_path_and_in_the_containers_volumes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mounts = vec![super::super::volumes::ContainerMount {
            path: "/scripts".into(),
            host: dir.path().to_path_buf(),
            read_only: true,
        }];
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let root = Path::new("/");
        assert!(program_exists(Path::new("sh"), &env, &mounts, root));
        assert!(program_exists(
            Path::new("/scripts/run.sh"),
            &env,
            &mounts,
            root
        ));
        assert!(program_exists(
            Path::new("scripts/run.sh"),
            &env,
            &mounts,
            root
        ));
        assert!(!program_exists(
            Path::new("no-such-program-here"),
            &env,
            &mounts,
            root
        ));
        assert!(!program_exists(
            Path::new("/docker-entrypoint.sh"),
            &env,
            &mounts,
            root
        ));
    }

    #[test]
    fn a_debug_pods_waiting_shell_runs_in_a_real_shell_whatever_the_image() {
        let wait = crate::ops::debug::waiting_shell(Duration::from_secs(60));
        for image in ["busybox", "ghcr.io/x/agentdeck:1.0"] {
            let c = json!({"name": "agent", "image": image, "command": wait});
            assert!(
                matches!(plan_of(&json!({}), &c), Program::Exec { ref program, shell: true, .. } if program == Path::new("/bin/sh")),
                "{image}"
            );
        }
    }

    #[test]
    fn a_container_without_a_command_runs_its_images_default_or_cannot_run() {
        // nginx's ENTRYPOINT and CMD (which the host does not have).
        let nginx = json!({"name": "web", "image": "nginx"});
        assert_eq!(
            plan_of(&json!({}), &nginx),
            Program::Exec {
                program: "/docker-entrypoint.sh".into(),
                args: strings(&["nginx", "-g", "daemon off;"]),
                shell: false
            }
        );
        // busybox's CMD, with or without input.
        for c in [
            json!({"name": "bb", "image": "busybox:1.36"}),
            json!({"name": "bb", "image": "busybox:1.36", "stdin": true}),
        ] {
            assert_eq!(
                plan_of(&json!({}), &c),
                Program::Exec {
                    program: "sh".into(),
                    args: Vec::new(),
                    shell: false
                }
            );
        }
        let pause = json!({"name": "p", "image": "registry.k8s.io/pause:3.10"});
        assert_eq!(plan_of(&json!({}), &pause), Program::Pause);
        let unknown = json!({"name": "app", "image": "example.com/app:1"});
        assert_eq!(
            plan_of(&json!({}), &unknown),
            Program::Unpullable {
                message: policy::unpullable("example.com/app:1")
            }
        );
        // The annotations play any of them.
        let simulated = json!({"metadata": {"annotations": {SIMULATE: "true"}}});
        for c in [nginx, pause, unknown] {
            assert_eq!(
                plan_of(&simulated, &c),
                Program::Simulated {
                    exit_after: None,
                    exit_code: 0,
                    ready: true
                },
                "{c}"
            );
        }
    }

    #[test]
    fn simulated_containers_follow_the_exit_annotations() {
        let c = json!({"name": "web", "image": "nginx"});
        let pod = json!({"metadata": {"annotations": {EXIT_AFTER: "1.5", EXIT_CODE: "3", "sandbox.agentdeck.dev/exit-code.web": "4"}}});
        assert_eq!(
            plan_of(&pod, &c),
            Program::Simulated {
                exit_after: Some(Duration::from_millis(1500)),
                exit_code: 4,
                ready: true
            }
        );
        let pod = json!({"metadata": {"annotations": {EXIT_CODE: "2", READY: "false"}}});
        assert_eq!(
            plan_of(&pod, &c),
            Program::Simulated {
                exit_after: Some(Duration::ZERO),
                exit_code: 2,
                ready: false
            }
        );
    }

    #[test]
    fn named_probe_ports_resolve_through_the_container_ports() {
        let c = json!({"ports": [{"name": "health", "containerPort": 8080}]});
        assert_eq!(resolve_port(&json!("health"), &c), Some(8080));
        assert_eq!(resolve_port(&json!(9000), &c), Some(9000));
        assert_eq!(resolve_port(&json!("nope"), &c), None);
    }

    #[tokio::test]
    async fn an_http_probe_passes_on_2xx_and_fails_on_5xx_or_nothing_listening() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            for code in [200, 503] {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let p = json!({"httpGet": {"path": "/healthz", "port": port}});
        assert!(probe(&p, &json!({}), "127.0.0.1").await);
        assert!(!probe(&p, &json!({}), "127.0.0.1").await);
        assert!(!probe(&p, &json!({}), "127.0.0.1").await);
    }

    /// Alive and not a zombie (an orphan's reaper may be slow, or absent).
    fn running(pid: Pid) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let (_, rest) = stat.rsplit_once(')')?;
                rest.split_whitespace().next().map(|state| state != "Z")
            })
            .unwrap_or(false)
    }

    #[test]
    fn killing_a_container_ends_what_it_started_in_a_session_of_its_own() {
        use std::os::unix::process::CommandExt;
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("pid");
        let mut main = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "setsid sleep 60 & echo $! > '{}'; wait",
                pidfile.display()
            ))
            .process_group(0)
            .spawn()
            .expect("sh starts");
        let main_pid = Pid::from_raw(i32::try_from(main.id()).expect("pid"));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let orphan = loop {
            let pid = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .map(Pid::from_raw);
            if let Some(pid) = pid
                && nix::unistd::getpgid(Some(pid)) == Ok(pid)
            {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "setsid never ran");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(running(orphan));
        kill_container(main_pid);
        main.wait().expect("main ends");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while running(orphan) {
            if std::time::Instant::now() > deadline {
                let _ = kill(orphan, Signal::SIGKILL);
                panic!("the process in its own session outlived its container");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
