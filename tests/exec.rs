//! Exec and attach against the sandbox with the real kubectl (WebSocket,
//! `v5.channel.k8s.io`): plain exec, stdin, exit codes, `kubectl cp` both
//! ways, and the interactive cases (`kubectl exec -it`, `kubectl debug -it`)
//! driven under tmux and read with `capture-pane`.

mod common;

use std::process::Command;

use common::{TestSandbox, err, eventually_blocking, out};

/// A pod whose container the sandbox runs as a real shell, with an env
/// variable and an emptyDir mounted at /data.
const SHELL_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: shell
  annotations:
    sandbox.agentdeck.dev/run-shell: "true"
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo started; sleep 3600"]
    env:
    - name: GREETING
      value: hello-from-the-pod
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    emptyDir: {}
"#;

fn with_shell_pod() -> TestSandbox {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], SHELL_POD);
    eventually_blocking("the shell pod to run", || {
        let phase = sb.kubectl_ok(&["get", "pod", "shell", "-o", "jsonpath={.status.phase}"]);
        (phase == "Running").then_some(())
    });
    sb
}

#[test]
fn kubectl_exec_runs_in_the_containers_environment_and_propagates_exit_codes() {
    let sb = with_shell_pod();
    assert_eq!(
        sb.kubectl_ok(&["exec", "shell", "--", "echo", "hi"]),
        "hi\n"
    );
    assert_eq!(
        sb.kubectl_ok(&["exec", "shell", "--", "sh", "-c", "echo $GREETING"]),
        "hello-from-the-pod\n"
    );
    let o = sb.kubectl(&[
        "exec",
        "shell",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 3",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert_eq!(out(&o), "out\n");
    assert!(err(&o).contains("err\n"), "{}", err(&o));
    let piped = sb.kubectl_in_ok(
        &[
            "exec",
            "-i",
            "shell",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z; echo done",
        ],
        "from stdin\n",
    );
    assert_eq!(piped, "FROM STDIN\ndone\n");
    let missing = sb.kubectl(&["exec", "shell", "--", "no-such-program"]);
    assert!(!missing.status.success());
    assert!(
        err(&missing).contains("\"no-such-program\": executable file not found in $PATH"),
        "{}",
        err(&missing)
    );
}

#[test]
fn kubectl_cp_copies_files_and_directories_both_ways() {
    let sb = with_shell_pod();
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("a.txt"), "alpha\n").expect("write");
    std::fs::write(src.join("sub/b.txt"), "beta\n").expect("write");
    let src_s = src.display().to_string();
    sb.kubectl_ok(&["cp", &src_s, "shell:/data/tree"]);
    assert_eq!(
        sb.kubectl_ok(&["exec", "shell", "--", "cat", "/data/tree/sub/b.txt"]),
        "beta\n"
    );
    let back = dir.path().join("back");
    let back_s = back.display().to_string();
    sb.kubectl_ok(&["cp", "shell:/data/tree", &back_s]);
    assert_eq!(
        std::fs::read_to_string(back.join("a.txt")).expect("a.txt copied back"),
        "alpha\n"
    );
    assert_eq!(
        std::fs::read_to_string(back.join("sub/b.txt")).expect("b.txt copied back"),
        "beta\n"
    );
}

#[test]
fn simulated_containers_refuse_exec_and_attach_saying_why() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&[
        "run",
        "web",
        "--image=nginx",
        "--annotations=sandbox.agentdeck.dev/simulate=true",
    ]);
    eventually_blocking("the simulated pod to run", || {
        let phase = sb.kubectl_ok(&["get", "pod", "web", "-o", "jsonpath={.status.phase}"]);
        (phase == "Running").then_some(())
    });
    for args in [vec!["exec", "web", "--", "ls"], vec!["attach", "web"]] {
        let o = sb.kubectl(&args);
        assert!(!o.status.success(), "{args:?}");
        let e = err(&o);
        assert!(
            e.contains("container \"web\" in pod \"web\" is simulated by the agentdeck sandbox"),
            "{args:?}: {e}"
        );
        assert!(!e.contains("MethodNotAllowed"), "{e}");
    }
}

/// A tmux server of its own running one command; killed on drop.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `line` (a shell command line) in a `w`×`h` session; when it
    /// ends, `EXIT=<code>` is printed and the pane stays.
    pub fn start(line: &str, w: u16, h: u16) -> Tmux {
        let socket = format!(
            "agentdeck-exec-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        );
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
            .arg(format!("{line}; echo EXIT=$?; sleep 600"))
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux new-session failed");
        Tmux { socket }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }

    /// Types `text` and Enter.
    pub fn line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", text]);
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }

    pub fn resize(&self, w: u16, h: u16) {
        self.tmux(&[
            "resize-window",
            "-t",
            "t",
            "-x",
            &w.to_string(),
            "-y",
            &h.to_string(),
        ]);
    }

    /// Waits until the screen contains `text`; the screen.
    pub fn wait_for(&self, text: &str) -> String {
        eventually_blocking(&format!("{text:?} on the screen"), || {
            let s = self.screen();
            s.contains(text).then_some(s)
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

fn kubectl_line(sb: &TestSandbox, args: &str) -> String {
    format!("env KUBECONFIG={} kubectl {args}", sb.kubeconfig.display())
}

#[test]
fn kubectl_exec_it_gives_a_terminal_that_follows_resizes() {
    let sb = with_shell_pod();
    let t = Tmux::start(&kubectl_line(&sb, "exec -it shell -- sh"), 100, 30);
    t.line("tty && echo marker-$((6*7))");
    let screen = t.wait_for("marker-42");
    assert!(screen.contains("/dev/pts/"), "{screen}");
    t.line("stty size");
    t.wait_for("30 100");
    t.resize(120, 40);
    t.line("stty size");
    t.wait_for("40 120");
    t.line("exit 5");
    let screen = t.wait_for("EXIT=5");
    assert!(
        screen.contains("command terminated with exit code 5"),
        "{screen}"
    );
}

#[test]
fn kubectl_debug_it_attaches_to_an_ephemeral_container_in_the_targets_environment() {
    let sb = with_shell_pod();
    let t = Tmux::start(
        &kubectl_line(
            &sb,
            "debug -it shell --image=busybox --target=main --profile=general",
        ),
        120,
        30,
    );
    t.wait_for("If you don't see a command prompt");
    t.line("echo debugging-$GREETING");
    t.wait_for("debugging-hello-from-the-pod");
    t.line("exit");
    let screen = t.wait_for("EXIT=0");
    assert!(screen.contains("Session ended"), "{screen}");
}

fn agentdeck_line(sb: &TestSandbox, args: &str) -> String {
    format!(
        "env KUBECONFIG={} {} {args}",
        sb.kubeconfig.display(),
        env!("CARGO_BIN_EXE_agentdeck")
    )
}

/// After the command, whether the terminal is back in cooked mode.
const COOKED: &str = "; echo EXIT=$?; stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo | tr '\\n' ' '; echo COOKED";

#[test]
fn debug_attach_opens_a_shell_in_a_copy_follows_resizes_and_returns_its_exit_code() {
    let sb = with_shell_pod();
    let t = Tmux::start(
        &format!(
            "{}{COOKED}",
            agentdeck_line(&sb, "debug shell --attach --image busybox")
        ),
        100,
        30,
    );
    let screen = t.wait_for("exit or Ctrl-D ends it");
    assert!(screen.contains("created pod/debug-shell-"), "{screen}");
    t.line("echo attached-$GREETING; stty size");
    t.wait_for("attached-hello-from-the-pod");
    t.wait_for("30 100");
    t.resize(110, 35);
    t.line("stty size");
    t.wait_for("35 110");
    t.line("exit 4");
    let screen = t.wait_for("COOKED");
    assert!(screen.contains("EXIT=4"), "{screen}");
    assert!(screen.contains("the shell exited with code 4"), "{screen}");
    assert!(screen.contains("icanon echo COOKED"), "{screen}");
    // The debug pod is there to attach to again, without a new copy.
    let names = sb.kubectl_ok(&[
        "get",
        "pods",
        "-l",
        "agentdeck.dev/debug-pod=true",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    let copy = names.trim().to_string();
    assert!(
        copy.starts_with("debug-shell-") && !copy.contains(' '),
        "{names}"
    );
    let again = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .args(["debug", &copy, "--attach"])
        .env("KUBECONFIG", &sb.kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin")
                .write_all(b"echo again-$GREETING\nexit 6\n")?;
            c.wait_with_output()
        })
        .expect("agentdeck runs");
    assert_eq!(again.status.code(), Some(6), "{}", err(&again));
    assert_eq!(out(&again), "again-hello-from-the-pod\n");
    assert!(
        err(&again).contains(&format!("attaching to debug pod/{copy}")),
        "{}",
        err(&again)
    );
    let after = sb.kubectl_ok(&[
        "get",
        "pods",
        "-l",
        "agentdeck.dev/debug-pod=true",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert_eq!(after.trim(), copy);
}

#[test]
fn debug_attach_in_an_ephemeral_container_ends_on_ctrl_d() {
    let sb = with_shell_pod();
    let t = Tmux::start(
        &format!(
            "{}{COOKED}",
            agentdeck_line(&sb, "debug shell --attach --mode ephemeral --image busybox")
        ),
        100,
        30,
    );
    let screen = t.wait_for("exit or Ctrl-D ends it");
    assert!(
        screen.contains("added ephemeral container debugger-"),
        "{screen}"
    );
    t.line("echo ephemeral-$GREETING");
    t.wait_for("ephemeral-hello-from-the-pod");
    t.tmux(&["send-keys", "-t", "t", "C-d"]);
    let screen = t.wait_for("COOKED");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("icanon echo COOKED"), "{screen}");
}

/// A pod labelled as a debug pod, with what `spec` says.
fn debug_pod(sb: &TestSandbox, name: &str, annotations: &str, container: &str) {
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    agentdeck.dev/debug-pod: \"true\"\n  annotations:\n{annotations}\nspec:\n  restartPolicy: Never\n  containers:\n{container}\n"
        ),
    );
}

#[test]
fn debug_attach_says_plainly_when_there_is_no_shell_no_running_container_or_no_stream() {
    let sb = TestSandbox::start();
    debug_pod(
        &sb,
        "no-shell",
        "    sandbox.agentdeck.dev/run-shell: \"true\"",
        "  - name: agent\n    image: distroless\n    command: [\"/bin/sh\", \"-c\", \"/bin/sleep 3600\"]\n    env:\n    - name: PATH\n      value: /nonexistent",
    );
    debug_pod(
        &sb,
        "finished",
        "    sandbox.agentdeck.dev/exit-code: \"0\"",
        "  - name: agent\n    image: busybox",
    );
    debug_pod(
        &sb,
        "simulated",
        "    sandbox.agentdeck.dev/simulate: \"true\"",
        "  - name: agent\n    image: busybox",
    );
    let attach = |pod: &str| {
        Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .args(["debug", pod, "--attach"])
            .env("KUBECONFIG", &sb.kubeconfig)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("agentdeck runs")
    };
    let o = attach("no-shell");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("container agent of pod default/no-shell has no `sh`"),
        "{}",
        err(&o)
    );
    let o = attach("finished");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("container agent of pod default/finished is not running"),
        "{}",
        err(&o)
    );
    let o = attach("simulated");
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(
        err(&o).contains("the API refused")
            && err(&o).contains("is simulated by the agentdeck sandbox"),
        "{}",
        err(&o)
    );
}

#[test]
fn the_console_suspends_for_a_shell_in_an_agent_and_resumes_cleanly() {
    let home = tempfile::tempdir().expect("temp dir");
    let t = Tmux::start(
        &format!(
            "env HOME={h} XDG_CONFIG_HOME={h} {} --demo",
            env!("CARGO_BIN_EXE_agentdeck"),
            h = home.path().display()
        ),
        120,
        35,
    );
    t.wait_for("watch synced");
    t.tmux(&["send-keys", "-t", "t", "2"]);
    let screen = eventually_blocking("a running agent first in the agents view", || {
        let s = t.screen();
        s.lines()
            .find(|l| l.starts_with('│') && l.contains("iac-agent-"))
            .is_some_and(|l| l.contains("Running"))
            .then_some(s)
    });
    // As shown: shortened in the middle when the column is narrow.
    let shown = screen
        .lines()
        .find(|l| l.starts_with('│') && l.contains("iac-agent-"))
        .and_then(|l| l.trim_start_matches('│').split_whitespace().next())
        .expect("an agent row")
        .to_string();
    // The selection stays on the row first selected (an object, not a row
    // number): go to the top row, the agent's.
    t.tmux(&["send-keys", "-t", "t", "g"]);
    t.tmux(&["send-keys", "-t", "t", "s"]);
    let screen = t.wait_for("returns to the console");
    let agent = screen
        .split("shell in pod demo/")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("the pod the shell is in: {screen}"))
        .to_string();
    let (head, tail) = shown.split_once('…').unwrap_or((&shown, ""));
    assert!(
        agent.starts_with(head) && agent.ends_with(tail),
        "the shell is in {agent}, the top row is {shown}"
    );
    assert!(
        !screen.contains("Agents ["),
        "the console was not suspended:\n{screen}"
    );
    t.line("echo in-shell-$((6*7)) $IAC_AGENT_NAME");
    t.wait_for(&format!("in-shell-42 {agent}"));
    t.line("exit");
    let screen = t.wait_for(&format!("shell in {agent} ended"));
    assert!(screen.contains("Agents ["), "{screen}");
    assert!(
        !screen.contains("in-shell-42"),
        "stale shell output:\n{screen}"
    );
    // Keys reach the console again.
    t.tmux(&["send-keys", "-t", "t", "1"]);
    t.wait_for("Pools [");
    t.tmux(&["send-keys", "-t", "t", "q"]);
    t.wait_for("EXIT=0");
}

#[test]
fn the_console_attaches_to_a_debug_pod_by_name_and_resumes() {
    let sb = with_shell_pod();
    let crds = sb.agentdeck(&["crds"]);
    assert!(crds.status.success(), "{}", err(&crds));
    sb.kubectl_in_ok(&["apply", "-f", "-"], &out(&crds));
    let made = sb.agentdeck(&["debug", "shell", "--image", "busybox"]);
    assert!(made.status.success(), "{}", err(&made));
    let copy = out(&made)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pod/"))
        .expect("the copy's name")
        .to_string();
    let home = tempfile::tempdir().expect("temp dir");
    let t = Tmux::start(
        &format!(
            "env HOME={h} XDG_CONFIG_HOME={h} KUBECONFIG={} AGENTDECK_LEADER_ELECTION__ENABLED=false {}",
            sb.kubeconfig.display(),
            env!("CARGO_BIN_EXE_agentdeck"),
            h = home.path().display()
        ),
        120,
        35,
    );
    t.wait_for("watch synced");
    t.tmux(&["send-keys", "-t", "t", ":"]);
    t.line(&format!("shell {copy}"));
    t.wait_for("returns to the console");
    t.line("echo in-debug-pod-$GREETING");
    t.wait_for("in-debug-pod-hello-from-the-pod");
    t.line("exit 2");
    let screen = t.wait_for(&format!("shell in {copy} exited with code 2"));
    assert!(screen.contains("Pools ["), "{screen}");
    t.tmux(&["send-keys", "-t", "t", "q"]);
    t.wait_for("EXIT=0");
}

/// Raw WebSocket exec: the messages a client asking only for `protocol`
/// gets, until the server closes (channel byte first).
fn raw_exec(sb: &TestSandbox, protocol: &str, query: &str, stdin: &[&[u8]]) -> Vec<Vec<u8>> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!(
        "{}/api/v1/namespaces/default/pods/shell/exec?{query}",
        sb.sandbox().url().replacen("https", "wss", 1)
    );
    sb.rt.block_on(async {
        let mut req = url.into_client_request().expect("request");
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            protocol.parse().expect("header value"),
        );
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {}", sb.sandbox().admin_token())
                .parse()
                .expect("header value"),
        );
        let tcp = tokio::net::TcpStream::connect(sb.sandbox().addr())
            .await
            .expect("connect");
        // The sandbox serves HTTPS with its own CA, as an API server does.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = sb
            .sandbox()
            .api()
            .security
            .pki()
            .client_config()
            .expect("client TLS config");
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
        let tcp = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
            .connect(name, tcp)
            .await
            .expect("TLS handshake");
        let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp)
            .await
            .expect("upgraded");
        assert_eq!(
            resp.headers()
                .get("Sec-WebSocket-Protocol")
                .and_then(|v| v.to_str().ok()),
            Some(protocol)
        );
        for data in stdin {
            ws.send(Message::Binary(data.to_vec().into()))
                .await
                .expect("sent");
        }
        let mut got = Vec::new();
        while let Some(m) = ws.next().await {
            match m.expect("message") {
                Message::Binary(b) => got.push(b.to_vec()),
                Message::Close(_) => break,
                _ => {}
            }
        }
        got
    })
}

fn channel(msgs: &[Vec<u8>], ch: u8) -> String {
    msgs.iter()
        .filter(|m| m.first() == Some(&ch))
        .map(|m| String::from_utf8_lossy(&m[1..]).into_owned())
        .collect()
}

#[test]
fn v4_and_v5_clients_get_their_streams_and_a_final_status() {
    let sb = with_shell_pod();
    let got = raw_exec(
        &sb,
        "v4.channel.k8s.io",
        "command=sh&command=-c&command=echo%20out%3B%20echo%20err%20%3E%262%3B%20exit%207&stdout=true&stderr=true",
        &[],
    );
    assert_eq!(channel(&got, 1), "out\n");
    assert_eq!(channel(&got, 2), "err\n");
    let status: serde_json::Value =
        serde_json::from_str(&channel(&got, 3)).expect("a Status on the error channel");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "7", "{status}");
    // v5: stdin, then the close signal for it, and the process sees EOF.
    let got = raw_exec(
        &sb,
        "v5.channel.k8s.io",
        "command=wc&command=-c&stdin=true&stdout=true",
        &[b"\x00hello", b"\x00 world", &[255, 0]],
    );
    assert_eq!(channel(&got, 1).trim(), "11");
    let status: serde_json::Value =
        serde_json::from_str(&channel(&got, 3)).expect("a Status on the error channel");
    assert_eq!(status["status"], "Success", "{status}");
}

/// `kubectl exec` into an agent pod the controller made runs in the
/// container's own view (its mount namespace): the pod's volumes at their
/// paths for every file the command opens, relative paths included, as on
/// a cluster.
#[test]
fn kubectl_exec_into_an_agent_pod_sees_its_volumes_at_their_paths() {
    use std::process::Stdio;
    let sb = TestSandbox::start_with(agentdeck::sandbox::kubelet::KubeletConfig {
        exe: std::path::PathBuf::from(env!("CARGO_BIN_EXE_agentdeck")),
        mount_namespaces: true,
        ..agentdeck::sandbox::kubelet::KubeletConfig::from_env()
    });
    assert!(
        !std::path::Path::new("/etc/agentdeck").exists(),
        "this test needs a host without /etc/agentdeck"
    );
    let crds = out(&sb.agentdeck(&["crds"]));
    sb.kubectl_in_ok(&["apply", "-f", "-"], &crds);
    sb.kubectl_ok(&["create", "namespace", "agentdeck-system"]);
    let home = tempfile::tempdir().expect("temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let daemon = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .arg("--daemon")
        .env_remove("AGENTDECK_SANDBOX_EXE")
        .env("KUBECONFIG", &sb.kubeconfig)
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("AGENTDECK_SERVER__PORT", port.to_string())
        .current_dir(home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("daemon starts");
    let _daemon = Killed(daemon);
    sb.kubectl_ok(&["apply", "-f", "config/pool-quickstart.yaml"]);
    let pod = eventually_blocking("a running agent pod", || {
        let o = sb.kubectl(&[
            "get",
            "pods",
            "-l",
            "agentdeck.dev/pool=quickstart",
            "-o",
            "jsonpath={range .items[?(@.status.phase==\"Running\")]}{.metadata.name}{\"\\n\"}{end}",
        ]);
        out(&o).lines().next().map(str::to_string)
    });
    let ls = sb.kubectl_ok(&["exec", &pod, "--", "sh", "-c", "ls /etc/agentdeck"]);
    assert!(
        ls.lines().any(|l| l == "agentdeck-agent.yaml"),
        "ls /etc/agentdeck in {pod}: {ls:?}"
    );
    let config_map = sb.kubectl_ok(&[
        "get",
        "pod",
        &pod,
        "-o",
        "jsonpath={.spec.volumes[?(@.configMap)].configMap.name}",
    ]);
    let settings = sb.kubectl_ok(&[
        "get",
        "configmap",
        config_map
            .split_whitespace()
            .next()
            .expect("a ConfigMap volume"),
        "-o",
        "jsonpath={.data.agentdeck-agent\\.yaml}",
    ]);
    assert!(!settings.is_empty(), "the ConfigMap has the settings file");
    let cat = sb.kubectl_ok(&[
        "exec",
        &pod,
        "--",
        "cat",
        "/etc/agentdeck/agentdeck-agent.yaml",
    ]);
    assert_eq!(cat, settings);
    let relative = sb.kubectl_ok(&[
        "exec",
        &pod,
        "--",
        "sh",
        "-c",
        "cd /etc/agentdeck && cat ./agentdeck-agent.yaml",
    ]);
    assert_eq!(relative, settings);
    // The binary at the image's path, and the container's own `/tmp`.
    let version = sb.kubectl_ok(&["exec", &pod, "--", "agentdeck", "--version"]);
    assert!(version.starts_with("agentdeck "), "{version}");
    sb.kubectl_ok(&["exec", &pod, "--", "sh", "-c", "echo x > /tmp/from-exec"]);
    let tmp = sb.kubectl_ok(&["exec", &pod, "--", "sh", "-c", "cat /tmp/from-exec"]);
    assert_eq!(tmp, "x\n");
}

/// A child process killed (and waited for) however the test ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
