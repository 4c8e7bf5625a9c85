//! What several benches share: percentiles and their printing, a process's
//! RSS and CPU time from `/proc`, the binary measured, `agentdeck --daemon`
//! as a child process killed on drop, and a console driven under tmux (one
//! `tmux` process per poll, or a control-mode client).
//!
//! Included by each bench as `mod common;`; a bench uses part of it.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

/// Prints one key-latency figure: `what: p50 … p99 …`.
/// Round `round`'s change to the fixture sources: one task's status message
/// (a different task each round), put in place; the new task, for the
/// delta that tells a row builder.
pub fn change_a_task(
    src: &mut agentdeck::app::rows::Sources,
    round: usize,
) -> Arc<agentdeck::crd::AgentTask> {
    let i = (round * 7919) % src.tasks.len();
    let mut t = agentdeck::crd::AgentTask::clone(&src.tasks[i]);
    if let Some(st) = t.status.as_mut() {
        st.message = Some(format!("changed {round}"));
    }
    let t = Arc::new(t);
    src.tasks[i] = t.clone();
    t
}

pub fn report_latency(what: &str, mut samples: Vec<Duration>) {
    println!(
        "{what}: p50 {} p99 {}",
        ms(percentile(&mut samples, 0.5)),
        ms(percentile(&mut samples, 0.99))
    );
}

pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i.min(samples.len() - 1)]
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

pub struct Tmux(String);

impl Tmux {
    pub fn start(cmd: &str, w: u16, h: u16) -> Tmux {
        Tmux::start_on(
            &format!("agentdeck-bench-{}", std::process::id()),
            cmd,
            w,
            h,
        )
    }

    /// [`Tmux::start`] on the tmux server of socket `socket` (`tmux -L`).
    pub fn start_on(socket: &str, cmd: &str, w: u16, h: u16) -> Tmux {
        let ok = Command::new("tmux")
            .args([
                "-L",
                socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "b",
            ])
            .args(["-x", &w.to_string(), "-y", &h.to_string(), cmd])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tmux starts");
        Tmux(socket.to_owned())
    }
    pub fn screen(&self) -> String {
        self.capture(false)
    }
    /// The screen, with its colours as escape sequences when `escapes`.
    pub fn capture(&self, escapes: bool) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.0, "capture-pane", "-p", "-t", "b"])
            .args(escapes.then_some("-e"))
            .output()
            .expect("capture");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    pub fn send(&self, k: &str) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "send-keys", "-t", "b", k])
            .status();
    }
    pub fn pid(&self) -> Option<u32> {
        let o = Command::new("tmux")
            .args(["-L", &self.0, "list-panes", "-t", "b", "-F", "#{pane_pid}"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    }
    /// Polls until `ok`; the time it took, or None after `limit`.
    pub fn until(&self, limit: Duration, ok: impl Fn(&str) -> bool) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if ok(&self.screen()) {
                return Some(started.elapsed());
            }
        }
        None
    }
    /// Key press → screen changed, `n` times alternating two views.
    pub fn key_latency(&self, n: usize) -> Vec<Duration> {
        let mut out = Vec::new();
        for i in 0..n {
            let (k, want) = if i % 2 == 0 {
                ("3", "Tasks [")
            } else {
                ("1", "Pools [")
            };
            let t = Instant::now();
            self.send(k);
            while !self.screen().contains(want) {
                if t.elapsed() > Duration::from_secs(10) {
                    // Say what the screen showed instead: a figure of 10 s
                    // is a key not answered, not a slow one.
                    println!(
                        "  ({k} not answered in 10 s; the screen:)\n{}",
                        self.screen()
                    );
                    break;
                }
            }
            out.push(t.elapsed());
        }
        out
    }
}

/// A tmux control-mode client (`tmux -C attach`): commands and their
/// answers over one pipe, so polling the screen spawns no process — the
/// measurement's own floor drops from a few ms (a `tmux` process per
/// `send-keys` and per `capture-pane`) to a round trip to the server.
pub struct Control {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Control {
    pub fn attach(t: &Tmux) -> Option<Control> {
        let mut child = Command::new("tmux")
            // Without the pane's output: a control client is sent every
            // byte the pane prints as `%output` lines (escaped, so a frame
            // grows threefold) ahead of its commands' answers, and while the
            // server encodes them and the client reads them, key presses
            // wait (bursts of 20–80 ms, the console's thread idle).
            .args(["-L", &t.0, "-C", "attach", "-f", "no-output", "-t", "b"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let out = std::io::BufReader::new(child.stdout.take()?);
        let mut c = Control { child, stdin, out };
        // The greeting block, then a first answer proves it works.
        c.command("display-message -p ok")
            .filter(|l| l.iter().any(|l| l == "ok"))?;
        // Keep the pane's size whatever tmux makes of one more client.
        let _ = c.command("refresh-client -C 160x48");
        Some(c)
    }

    /// Runs one command; its output lines (notifications skipped).
    pub fn command(&mut self, cmd: &str) -> Option<Vec<String>> {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "{cmd}").ok()?;
        self.stdin.flush().ok()?;
        let mut lines = Vec::new();
        let mut inside = false;
        let mut raw = Vec::new();
        loop {
            raw.clear();
            // Bytes, not text: `%output` notifications carry a pane's output
            // as it was read, and a chunk can end inside a UTF-8 sequence.
            if self.out.read_until(b'\n', &mut raw).ok()? == 0 {
                return None;
            }
            let line = String::from_utf8_lossy(&raw);
            let l = line.trim_end_matches('\n');
            if l.starts_with("%begin") {
                inside = true;
                lines.clear();
            } else if inside && (l.starts_with("%end") || l.starts_with("%error")) {
                // The attach greeting is an empty block: keep reading.
                if !lines.is_empty() || !cmd.starts_with("display") || l.starts_with("%error") {
                    return Some(std::mem::take(&mut lines));
                }
                inside = false;
            } else if inside {
                lines.push(l.to_owned());
            }
        }
    }

    /// Polls the screen until `ok` (given a test for a text on it); the
    /// time it took, or None after `limit`.
    pub fn until(
        &mut self,
        limit: Duration,
        ok: impl Fn(&dyn Fn(&str) -> bool) -> bool,
    ) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < limit {
            let screen = self.command("capture-pane -p -t b").unwrap_or_default();
            if ok(&|what| screen.iter().any(|l| l.contains(what))) {
                return Some(started.elapsed());
            }
        }
        None
    }

    /// Key press → screen changed, `n` times alternating two views.
    pub fn key_latency(&mut self, n: usize) -> Vec<Duration> {
        let mut out = Vec::new();
        for i in 0..n {
            let (k, want) = if i % 2 == 0 {
                ("3", "Tasks [")
            } else {
                ("1", "Pools [")
            };
            let t = Instant::now();
            let _ = self.command(&format!("send-keys -t b {k}"));
            self.until(Duration::from_secs(10), |has| has(want));
            out.push(t.elapsed());
        }
        out
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .status();
    }
}

pub fn rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS:")
}

/// A `kB` line of `/proc/PID/status`, in MiB.
pub fn status_mib(pid: u32, key: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// RSS split: heap and other anonymous pages, and file pages (mostly the
/// binary's own code).
pub fn rss_split(pid: u32) -> String {
    let f = |k| status_mib(pid, k).map_or_else(|| "?".into(), |v| format!("{v:.1}"));
    format!("anon {} + file {} MiB", f("RssAnon:"), f("RssFile:"))
}

/// The console measured: this build's, or `AGENTDECK_BENCH_BIN` (to set two
/// builds side by side on the same machine state).
pub fn binary() -> String {
    std::env::var("AGENTDECK_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentdeck").to_owned())
}

/// `agentdeck --daemon` started by a bench, killed when dropped.
pub struct Daemon {
    pub child: Child,
    /// Its `/readyz` and `/metrics` port.
    pub port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts `bin --daemon` on `kubeconfig`, controlling namespace `ns`, its
/// log in `log`.
pub fn start_daemon(
    bin: &str,
    kubeconfig: &std::path::Path,
    ns: &str,
    log: &std::path::Path,
) -> Daemon {
    start_daemon_filtered(bin, kubeconfig, ns, log, "info")
}

/// [`start_daemon`] with a log filter of its own (`RUST_LOG` directives:
/// `info,agentdeck::controller::reconcile=debug`).
pub fn start_daemon_filtered(
    bin: &str,
    kubeconfig: &std::path::Path,
    ns: &str,
    log: &std::path::Path,
    filter: &str,
) -> Daemon {
    let log = std::fs::File::create(log).expect("daemon log file");
    let port = free_port();
    let mut cmd = Command::new(bin);
    // The daemon's config loader rejects unknown AGENTDECK_* variables:
    // the benches' knobs and the sandbox's executable are not its own.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("AGENTDECK_BENCH_") || k == "AGENTDECK_SANDBOX_EXE" {
            cmd.env_remove(k.as_ref());
        }
    }
    let child = cmd
        .arg("--daemon")
        .env("KUBECONFIG", kubeconfig)
        .env("AGENTDECK_CONTROLLER_NAMESPACE", ns)
        .env("AGENTDECK_SERVER__PORT", port.to_string())
        .env("AGENTDECK_LOG__LEVEL", "info")
        .env("RUST_LOG", filter)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("agentdeck --daemon starts");
    Daemon { child, port }
}

/// (RSS KiB, peak RSS KiB, CPU ticks) of `pid` from /proc.
pub fn proc_stats(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 here.
    (kib("VmRSS:"), kib("VmHWM:"), ticks(11) + ticks(12))
}

/// Clock ticks a second (USER_HZ; 100 on every Linux this runs on, asked
/// anyway).
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Every replica count a Deployment goes through, with when it was seen.
pub fn record_replicas(
    client: &kube::Client,
    ns: &str,
    pool: &str,
) -> Arc<Mutex<Vec<(i32, Instant)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let cfg = watcher::Config::default().fields(&format!("metadata.name=iac-agent-{pool}"));
    let out = seen.clone();
    tokio::spawn(async move {
        let stream = watcher(api, cfg).default_backoff().applied_objects();
        tokio::pin!(stream);
        while let Some(Ok(d)) = stream.next().await {
            let r = d.spec.and_then(|s| s.replicas).unwrap_or(-1);
            let mut seen = out.lock().expect("lock");
            if seen.last().map(|(v, _)| *v) != Some(r) {
                seen.push((r, Instant::now()));
            }
        }
    });
    seen
}
