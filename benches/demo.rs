//! `agentdeck --demo` left open: the real binary under tmux (160×48) for
//! `AGENTDECK_BENCH_DEMO_MINUTES` (10), its RSS read every 30 s, then the
//! agents view set beside the API's pods read through the demo's own
//! kubeconfig with `kubectl`.
//!
//! Prints, and asserts nothing:
//! - `demo RSS: minute N X MiB` at each whole minute;
//! - `demo RSS growth from minute 5 to 10: X MiB` (from half-time to the
//!   end, with other lengths);
//! - `demo agents view: matches kubectl get pods (N pods)` or what differs.
//!
//! ```text
//! cargo bench --bench demo
//! AGENTDECK_BENCH_DEMO_MINUTES=4 cargo bench --bench demo
//! AGENTDECK_BENCH_BIN=/path/to/agentdeck cargo bench --bench demo   # another build
//! ```

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{Tmux, binary, rss_mib, rss_split};

fn main() {
    let minutes: u64 = std::env::var("AGENTDECK_BENCH_DEMO_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bin = binary();
    let dir = tempfile::tempdir().expect("temp dir");
    println!("== agentdeck --demo for {minutes} minutes under tmux 160x48 ({bin}) ==");
    let t = Tmux::start(
        &format!(
            "env HOME={d} XDG_CONFIG_HOME={d} {bin} --demo",
            d = dir.path().display()
        ),
        160,
        48,
    );
    let Some(pid) = t.pid() else {
        println!("(the demo did not start)");
        return;
    };
    let started = Instant::now();
    let mut by_minute = vec![rss_mib(pid)];
    let mut next = Duration::from_secs(30);
    let end = Duration::from_secs(minutes * 60);
    while started.elapsed() < end {
        std::thread::sleep(next.saturating_sub(started.elapsed()));
        let Some(rss) = rss_mib(pid) else {
            println!(
                "(the demo ended after {:.0} s)",
                started.elapsed().as_secs_f64()
            );
            return;
        };
        let secs = next.as_secs();
        if secs.is_multiple_of(60) {
            println!("demo RSS: minute {} {rss:.1} MiB", secs / 60);
            by_minute.push(Some(rss));
        } else {
            println!("  ({secs} s: {rss:.1} MiB)");
        }
        next += Duration::from_secs(30);
    }
    let half = (minutes / 2) as usize;
    if let (Some(Some(a)), Some(Some(b))) = (by_minute.get(half), by_minute.last()) {
        println!(
            "demo RSS growth from minute {half} to {minutes}: {:.1} MiB ({})",
            b - a,
            rss_split(pid)
        );
    }
    agents_view(&t);
    t.send("q");
    std::thread::sleep(Duration::from_secs(3));
}

/// The agents view's names beside `kubectl get pods` in the demo's
/// namespace, through the kubeconfig the header names.
fn agents_view(t: &Tmux) {
    t.send("2");
    if t.until(Duration::from_secs(10), |s| s.contains("Agents ["))
        .is_none()
    {
        println!("demo agents view: not shown within 10 s");
        return;
    }
    std::thread::sleep(Duration::from_secs(1));
    let screen = t.screen();
    let Some(kubeconfig) = screen
        .split_whitespace()
        .find_map(|w| w.strip_prefix("KUBECONFIG="))
    else {
        println!("demo agents view: the header names no kubeconfig");
        return;
    };
    let shown: BTreeSet<String> = screen
        .lines()
        .filter_map(|l| l.strip_prefix('│'))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "NAME" && n.starts_with(|c: char| c.is_ascii_lowercase()))
        .map(str::to_owned)
        .collect();
    let out = Command::new("kubectl")
        .args(["--kubeconfig", kubeconfig, "get", "pods", "-n", "demo"])
        .args(["--no-headers", "-o", "custom-columns=N:.metadata.name"])
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        println!("demo agents view: kubectl get pods failed");
        return;
    };
    let api: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    if shown == api {
        println!(
            "demo agents view: matches kubectl get pods ({} pods)",
            api.len()
        );
    } else {
        println!(
            "demo agents view: differs from kubectl get pods: only shown {:?}, only in the API {:?}",
            shown.difference(&api).collect::<Vec<_>>(),
            api.difference(&shown).collect::<Vec<_>>()
        );
    }
}
