//! The real binary's console under tmux: keys sent with `send-keys`, the
//! screen read with `capture-pane`, every expectation awaited with a
//! deadline. Each session runs its own tmux server (`-L`), killed on drop.

use std::process::Command;

use super::eventually_blocking;

pub struct Tmux {
    pub socket: String,
    pub _dir: tempfile::TempDir,
}

impl Tmux {
    /// Runs `args` of our binary in a new tmux session of `w`×`h` with a
    /// clean configuration and `env`; when it exits, its code is printed.
    pub fn start(args: &[&str], env: &[(&str, &str)], w: u16, h: u16) -> Tmux {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = format!(
            "agentdeck-test-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        );
        let mut line = format!("env HOME={d} XDG_CONFIG_HOME={d}", d = dir.path().display());
        for (k, v) in env {
            line.push_str(&format!(" {k}={v}"));
        }
        line.push_str(&format!(" {}", env!("CARGO_BIN_EXE_agentdeck")));
        for a in args {
            line.push_str(&format!(" {a}"));
        }
        line.push_str("; echo EXIT=$?; sleep 600");
        let status = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
            ])
            .args(["-x", &w.to_string(), "-y", &h.to_string()])
            .arg(line)
            .current_dir(dir.path())
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux new-session failed");
        Tmux { socket, _dir: dir }
    }

    pub fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "t"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Sends keys (tmux key names: `Enter`, `Escape`, or literal text).
    pub fn send(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "t"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// Text typed literally (no key-name lookup).
    pub fn type_text(&self, text: &str) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-l", "-t", "t", text])
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// Waits until the screen satisfies `ok`; the last screen is in the panic.
    pub fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            eventually_blocking(what, || {
                let s = self.screen();
                let hit = ok(&s);
                // The console exited: no point in waiting any longer.
                assert!(hit || !s.contains("EXIT="), "the console exited:\n{s}");
                last = s.clone();
                hit.then_some(s)
            })
        }));
        match found {
            Ok(s) => s,
            Err(_) => panic!("timed out waiting for {what}; screen:\n{last}"),
        }
    }

    pub fn wait_for(&self, needle: &str) -> String {
        self.wait(needle, |s| s.contains(needle))
    }

    /// The line of the table row whose text contains `needle`.
    pub fn row_with(screen: &str, needle: &str) -> Option<String> {
        screen
            .lines()
            .find(|l| l.contains(needle))
            .map(str::to_owned)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}
