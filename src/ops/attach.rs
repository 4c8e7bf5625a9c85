//! An interactive shell in a pod's container (`agentdeck debug --attach`,
//! the console's shell key): exec `sh` with a TTY through kube-rs's
//! [`AttachedProcess`], the local terminal in raw mode, its size sent at
//! the start and on every `SIGWINCH`, input copied until the remote shell
//! ends. The terminal is restored on every path out, and the remote exit
//! code is returned.
//!
//! Input is read by a thread that polls the terminal with a short timeout
//! and stops when the session ends, so no read is left pending that would
//! swallow the next key pressed after it (the console resumes at once).

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::SinkExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Client;
use kube::api::{Api, AttachParams, AttachedProcess, TerminalSize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The shell run in the container.
pub const SHELL: &str = "sh";

/// How long a container may take to be running before giving up.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Where to open the shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellTarget {
    /// Namespace.
    pub namespace: String,
    /// Pod.
    pub pod: String,
    /// Container (regular or ephemeral).
    pub container: String,
}

impl std::fmt::Display for ShellTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "container {} of pod {}/{}",
            self.container, self.namespace, self.pod
        )
    }
}

/// Why a shell could not be opened or ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The container is not running (and is not about to).
    #[error("cannot open a shell: {target} is not running ({state})")]
    NotRunning {
        /// Where.
        target: ShellTarget,
        /// What it is doing instead.
        state: String,
    },
    /// The container has no shell.
    #[error(
        "cannot open a shell: {target} has no `{SHELL}` ({message}); debug it with an image that has one: `agentdeck debug POD --image busybox`"
    )]
    NoShell {
        /// Where.
        target: ShellTarget,
        /// What the runtime said.
        message: String,
    },
    /// The API refused the exec (permission, upgrade, unknown container…).
    #[error("cannot open a shell in {target}: the API refused: {message}")]
    Refused {
        /// Where.
        target: ShellTarget,
        /// What it said.
        message: String,
    },
    /// Reading the pod failed.
    #[error("{}", crate::cluster::api_fault(&format!("read pod {pod}"), source))]
    Read {
        /// Pod.
        pod: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The local terminal could not be set up.
    #[error("cannot set up the terminal: {0}")]
    Terminal(#[source] std::io::Error),
}

impl AttachError {
    /// A mistake in what the user asked for (not a failure of ours).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            AttachError::NotRunning { .. } | AttachError::NoShell { .. }
        )
    }
}

fn find_status<'a>(pod: &'a Pod, container: &str) -> Option<&'a ContainerStatus> {
    let st = pod.status.as_ref()?;
    st.container_statuses
        .iter()
        .flatten()
        .chain(st.ephemeral_container_statuses.iter().flatten())
        .chain(st.init_container_statuses.iter().flatten())
        .find(|c| c.name == container)
}

/// Where a container stands: Ok when running, Err(what it does instead),
/// None while it may still start.
pub fn readiness(pod: &Pod, container: &str) -> Option<Result<(), String>> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Some(Err("the pod is being deleted".into()));
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    if let Some(state) = find_status(pod, container).and_then(|c| c.state.as_ref()) {
        if state.running.is_some() {
            return Some(Ok(()));
        }
        if let Some(t) = &state.terminated {
            return Some(Err(format!(
                "terminated: {} (exit code {})",
                t.reason.as_deref().unwrap_or("Completed"),
                t.exit_code
            )));
        }
        if let Some(w) = &state.waiting
            && let Some(reason) = w.reason.as_deref()
            && matches!(
                reason,
                "ErrImagePull"
                    | "ImagePullBackOff"
                    | "InvalidImageName"
                    | "CreateContainerConfigError"
                    | "CreateContainerError"
                    | "CrashLoopBackOff"
            )
        {
            return Some(Err(format!("waiting: {reason}")));
        }
    }
    if matches!(phase.as_str(), "Succeeded" | "Failed") {
        return Some(Err(format!("pod phase {phase}")));
    }
    None
}

/// Waits (watching the pod) until the container runs, or says why it will not.
pub async fn wait_running(client: &Client, target: &ShellTarget) -> Result<(), AttachError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &target.namespace);
    let container = target.container.clone();
    let cond = move |p: Option<&Pod>| p.is_none_or(|p| readiness(p, &container).is_some());
    let waited = tokio::time::timeout(
        START_TIMEOUT,
        kube::runtime::wait::await_condition(api.clone(), &target.pod, cond),
    )
    .await;
    let pod = match waited {
        Ok(Ok(Some(pod))) => pod,
        Ok(Ok(None)) => {
            return Err(AttachError::NotRunning {
                target: target.clone(),
                state: "the pod is gone".into(),
            });
        }
        Ok(Err(e)) => {
            return Err(AttachError::Refused {
                target: target.clone(),
                message: e.to_string(),
            });
        }
        Err(_) => {
            let pod = api
                .get(&target.pod)
                .await
                .map_err(|source| AttachError::Read {
                    pod: target.pod.clone(),
                    source,
                })?;
            let state = find_status(&pod, &target.container)
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.clone())
                .unwrap_or_else(|| "not started".into());
            return Err(AttachError::NotRunning {
                target: target.clone(),
                state: format!("still {state} after {}s", START_TIMEOUT.as_secs()),
            });
        }
    };
    match readiness(&pod, &target.container) {
        Some(Ok(())) => Ok(()),
        Some(Err(state)) => Err(AttachError::NotRunning {
            target: target.clone(),
            state,
        }),
        None => Err(AttachError::NotRunning {
            target: target.clone(),
            state: "not started".into(),
        }),
    }
}

/// The exit code a finished exec's `Status` reports (0 for success; the
/// `ExitCode` cause of `NonZeroExitCode`; 1 for any other failure).
pub fn exit_code(status: &Status) -> i32 {
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(1)
}

/// Whether a failed exec's message says the program is missing.
fn program_missing(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("executable file not found")
        || m.contains("no such file or directory")
        || m.contains("not found in $path")
}

/// Raw mode for as long as it lives.
struct RawMode;

impl RawMode {
    fn enable() -> Result<Self, AttachError> {
        crossterm::terminal::enable_raw_mode().map_err(AttachError::Terminal)?;
        Ok(RawMode)
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

fn terminal_size() -> Option<TerminalSize> {
    crossterm::terminal::size()
        .ok()
        .map(|(width, height)| TerminalSize { width, height })
}

/// Copies this process's standard input to `tx` until `stop` (or end of
/// input), never blocking longer than a poll interval.
fn read_input(tx: tokio::sync::mpsc::Sender<Vec<u8>>, stop: Arc<AtomicBool>) {
    let stdin = std::io::stdin();
    let mut buf = [0u8; 4096];
    let timeout = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 50_000_000,
    };
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [rustix::event::PollFd::new(
            &stdin,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match stdin.lock().read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.blocking_send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        }
    }
}

async fn copy_out(mut from: impl AsyncRead + Unpin, stderr: bool) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let written = if stderr {
                    let mut e = std::io::stderr().lock();
                    e.write_all(&buf[..n]).and_then(|()| e.flush())
                } else {
                    let mut o = std::io::stdout().lock();
                    o.write_all(&buf[..n]).and_then(|()| o.flush())
                };
                if written.is_err() {
                    return;
                }
            }
        }
    }
}

/// Opens `sh` in the container, wired to this terminal, until it exits;
/// returns its exit code.
pub async fn shell(client: &Client, target: &ShellTarget) -> Result<i32, AttachError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &target.namespace);
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let params = AttachParams::default()
        .container(target.container.clone())
        .stdin(true)
        .stdout(true)
        .stderr(!tty)
        .tty(tty);
    let mut process: AttachedProcess =
        api.exec(&target.pod, [SHELL], &params)
            .await
            .map_err(|e| AttachError::Refused {
                target: target.clone(),
                message: match e {
                    kube::Error::Api(s) => s.message.clone(),
                    other => other.to_string(),
                },
            })?;
    let status = process.take_status();
    let raw = if tty { Some(RawMode::enable()?) } else { None };
    let mut resize = process.terminal_size();
    if let (Some(tx), Some(size)) = (resize.as_mut(), terminal_size()) {
        let _ = tx.send(size).await;
    }
    let resizer = resize.map(|mut tx| {
        tokio::spawn(async move {
            let Ok(mut winch) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            else {
                return;
            };
            while winch.recv().await.is_some() {
                if let Some(size) = terminal_size()
                    && tx.send(size).await.is_err()
                {
                    return;
                }
            }
        })
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (in_tx, mut in_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || read_input(in_tx, stop))
    };
    let writer = process.stdin().map(|mut w| {
        tokio::spawn(async move {
            while let Some(data) = in_rx.recv().await {
                if w.write_all(&data).await.is_err() || w.flush().await.is_err() {
                    return;
                }
            }
            // End of input: the remote side reads EOF.
            let _ = w.shutdown().await;
        })
    });
    let err_copy = process.stderr().map(|e| tokio::spawn(copy_out(e, true)));
    if let Some(out) = process.stdout() {
        copy_out(out, false).await;
    }
    if let Some(e) = err_copy {
        let _ = e.await;
    }
    let status = match status {
        Some(s) => s.await,
        None => None,
    };
    stop.store(true, Ordering::Relaxed);
    if let Some(r) = resizer {
        r.abort();
    }
    if let Some(w) = writer {
        w.abort();
    }
    let _ = process.join().await;
    let _ = tokio::task::spawn_blocking(move || reader.join()).await;
    drop(raw);
    let Some(status) = status else {
        // The connection ended without a status (the pod went away).
        return Ok(1);
    };
    if status.status.as_deref() != Some("Success")
        && status.reason.as_deref() != Some("NonZeroExitCode")
    {
        let message = status.message.clone().unwrap_or_default();
        if program_missing(&message) {
            return Err(AttachError::NoShell {
                target: target.clone(),
                message,
            });
        }
        return Err(AttachError::Refused {
            target: target.clone(),
            message,
        });
    }
    Ok(exit_code(&status))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
    use serde_json::json;

    use super::*;

    #[test]
    fn exit_codes_come_from_the_status_cause() {
        let ok = Status {
            status: Some("Success".into()),
            ..Status::default()
        };
        assert_eq!(exit_code(&ok), 0);
        let three = Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some("3".into()),
                    field: None,
                }]),
                ..StatusDetails::default()
            }),
            ..Status::default()
        };
        assert_eq!(exit_code(&three), 3);
        let other = Status {
            status: Some("Failure".into()),
            ..Status::default()
        };
        assert_eq!(exit_code(&other), 1);
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).expect("pod")
    }

    #[test]
    fn a_container_is_ready_for_a_shell_only_when_running() {
        let running = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "agent", "image": "x", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]}));
        assert_eq!(readiness(&running, "agent"), Some(Ok(())));
        let eph = pod(json!({"phase": "Running", "ephemeralContainerStatuses": [
            {"name": "debugger", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"running": {}}}]}));
        assert_eq!(readiness(&eph, "debugger"), Some(Ok(())));
        let creating = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "agent", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
        assert_eq!(readiness(&creating, "agent"), None);
        let pulling = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "agent", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}));
        assert_eq!(
            readiness(&pulling, "agent"),
            Some(Err("waiting: ImagePullBackOff".into()))
        );
        let done = pod(json!({"phase": "Succeeded"}));
        assert_eq!(
            readiness(&done, "agent"),
            Some(Err("pod phase Succeeded".into()))
        );
    }

    #[test]
    fn a_missing_shell_is_told_apart_from_other_failures() {
        assert!(program_missing(
            "error executing command in container: exec: \"sh\": executable file not found in $PATH"
        ));
        assert!(!program_missing("pods \"p\" is forbidden"));
    }
}
