//! Every mistake a user can make on the command line gets one clear answer:
//! exit code 2 and a message naming what was wrong and what is valid. Each
//! row is input → exit code → fragments the message must hold.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: 'https://127.0.0.1:1'}
users:
- name: u
  user: {token: t}
contexts:
- name: kind-dev
  context: {cluster: c, user: u, namespace: default}
- name: prod
  context: {cluster: c, user: u}
current-context: kind-dev
";

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        let files = Files {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        files.write("kubeconfig", KUBECONFIG.as_bytes());
        files.write("garbage-kubeconfig", b"{{{ not: [yaml");
        files.write("binary.yaml", &[0xff, 0xfe, 0x00, 0x81, 0x9f, 0x00]);
        std::fs::create_dir(files.path("empty-dir")).expect("mkdir");
        files.write(
            "huge-max.yaml",
            b"apiVersion: agentdeck.dev/v1alpha1\nkind: AgentPool\nmetadata: {name: p}\n\
              spec: {image: x, maxReplicas: 99999999999}\n",
        );
        files.write(
            "two-min.yaml",
            b"apiVersion: agentdeck.dev/v1alpha1\nkind: AgentPool\nmetadata: {name: p}\n\
              spec: {image: x, minReplicas: two}\n",
        );
        files
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.path(name), bytes).expect("write fixture");
    }

    /// Runs agentdeck with `args` (`@name` is replaced by the fixture's
    /// path), a clean environment plus `env`, and `kubeconfig` as KUBECONFIG.
    fn run(&self, args: &[&str], env: &[(&str, &str)], kubeconfig: &str) -> Output {
        let args: Vec<String> = args
            .iter()
            .map(|a| match a.strip_prefix('@') {
                Some(name) => self.path(name).display().to_string(),
                None => (*a).to_owned(),
            })
            .collect();
        let kubeconfig = match kubeconfig.strip_prefix('@') {
            Some(name) => self.path(name),
            None => PathBuf::from(kubeconfig),
        };
        Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env("KUBECONFIG", &kubeconfig)
            .envs(env.iter().copied())
            .current_dir(self.dir.path())
            .output()
            .expect("agentdeck runs")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct Case {
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    kubeconfig: &'static str,
    code: i32,
    fragments: &'static [&'static str],
}

fn check(files: &Files, case: &Case) {
    let out = files.run(case.args, case.env, case.kubeconfig);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(case.code),
        "{:?} {:?}: stderr {stderr}",
        case.env,
        case.args
    );
    for fragment in case.fragments {
        assert!(
            stderr.contains(fragment),
            "{:?} {:?}: stderr lacks {fragment:?}:\n{stderr}",
            case.env,
            case.args
        );
    }
    if case.code == 2 {
        assert!(
            out.stdout.is_empty(),
            "a refused command prints nothing: {:?}",
            case.args
        );
        assert!(
            stderr.starts_with("agentdeck: ") && !stderr.contains("panicked"),
            "a message, not a trace: {stderr}"
        );
    }
}

#[test]
fn usage_mistakes_exit_2_with_a_message_naming_the_value_and_what_is_valid() {
    let files = Files::new();
    let cases = [
        Case {
            args: &["--daemon", "-n", "Bad_NS"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["\"Bad_NS\"", "--namespace", "lowercase letters"],
        },
        Case {
            args: &["manifests", "--context", "nosuch"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["\"nosuch\"", "contexts there: kind-dev, prod"],
        },
        Case {
            args: &["manifests", "--install-namespace", "Ops_Team"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["\"Ops_Team\"", "--install-namespace"],
        },
        Case {
            args: &["manifests"],
            env: &[("AGENTDECK_THEME", "nosuchtheme")],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &[
                "AGENTDECK_THEME",
                "\"nosuchtheme\"",
                "one of default, light, high-contrast",
            ],
        },
        Case {
            args: &["manifests", "--pools", "@empty-dir"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["empty-dir", "no AgentPool found (0 YAML file(s) read)"],
        },
        Case {
            args: &["manifests", "--pools", "/dev/null"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["/dev/null", "no AgentPool found (1 YAML file(s) read)"],
        },
        Case {
            args: &["manifests", "--pools", "@huge-max.yaml"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &[
                "spec.maxReplicas: 99999999999 is not valid; expected an integer from 0 to 10000",
            ],
        },
        Case {
            args: &["manifests", "--pools", "@two-min.yaml"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &[
                "spec.minReplicas: \"two\" is not valid; expected an integer from 0 to 10000",
            ],
        },
        Case {
            args: &["manifests", "--config", "@binary.yaml"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["binary.yaml", "not a UTF-8 text file"],
        },
        Case {
            args: &["manifests", "--config", "@empty-dir"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["empty-dir", "not a file"],
        },
        Case {
            args: &["--daemon"],
            env: &[],
            kubeconfig: "/nonexistent/kubeconfig",
            code: 2,
            fragments: &[
                "no usable Kubernetes configuration",
                "KUBECONFIG=/nonexistent/kubeconfig",
                "; and not running in a cluster (KUBERNETES_SERVICE_HOST unset). Set KUBECONFIG or --context, or start a local API with `agentdeck sandbox`",
            ],
        },
        Case {
            args: &["--daemon"],
            env: &[],
            kubeconfig: "@garbage-kubeconfig",
            code: 2,
            fragments: &["no usable Kubernetes configuration", "garbage-kubeconfig"],
        },
        Case {
            args: &["--daemon", "--context", "nosuch"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["contexts there: kind-dev, prod"],
        },
        // The console over several contexts: one missing is named before
        // anything starts (no terminal is taken).
        Case {
            args: &["--context", "prod", "--context", "nosuch"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &[
                "\"nosuch\" is not in the kubeconfig",
                "contexts there: kind-dev, prod",
            ],
        },
        Case {
            args: &["status", "--context", "prod", "--context", "kind-dev"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &[
                "--context was given 2 times (prod, kind-dev)",
                "only the console",
            ],
        },
        Case {
            args: &["--all-contexts", "--context", "prod"],
            env: &[],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["--all-contexts opens every context"],
        },
        Case {
            args: &["manifests"],
            env: &[("AGENTDECK_SERVER__PORT", "70000")],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["server.port = 70000: expected a whole number from 1 to 65535"],
        },
        Case {
            args: &["manifests"],
            env: &[("AGENTDECK_SERVER__PORT", "0")],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["server.port = 0: expected a whole number from 1 to 65535"],
        },
        Case {
            args: &["manifests"],
            env: &[("AGENTDECK_RESYNC_INTERVAL_SECONDS", "-1")],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["resyncIntervalSeconds = -1: expected a whole number, 1 or more"],
        },
        Case {
            args: &["manifests"],
            env: &[("AGENTDECK_RESYNC_INTERVAL_SECONDS", "0")],
            kubeconfig: "@kubeconfig",
            code: 2,
            fragments: &["resyncIntervalSeconds = 0: expected a whole number, 1 or more"],
        },
    ];
    for case in &cases {
        check(&files, case);
    }
}

#[test]
fn service_link_variables_are_ignored_and_other_unknown_ones_warned_about_once() {
    let files = Files::new();
    // What Kubernetes injects into every pod started after the rendered
    // Service `agentdeck-controller`.
    let links = [
        ("AGENTDECK_CONTROLLER_SERVICE_HOST", "10.96.0.5"),
        ("AGENTDECK_CONTROLLER_SERVICE_PORT", "8080"),
        ("AGENTDECK_CONTROLLER_SERVICE_PORT_HTTP", "8080"),
        ("AGENTDECK_CONTROLLER_PORT", "tcp://10.96.0.5:8080"),
        ("AGENTDECK_CONTROLLER_PORT_8080_TCP", "tcp://10.96.0.5:8080"),
        ("AGENTDECK_CONTROLLER_PORT_8080_TCP_PROTO", "tcp"),
        ("AGENTDECK_CONTROLLER_PORT_8080_TCP_PORT", "8080"),
        ("AGENTDECK_CONTROLLER_PORT_8080_TCP_ADDR", "10.96.0.5"),
    ];
    let out = files.run(&["manifests"], &links, "@kubeconfig");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "service links are silent");
    assert!(text(&out.stdout).contains("kind: Deployment"));

    let out = files.run(
        &["manifests"],
        &[("AGENTDECK_THEM", "light")],
        "@kubeconfig",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "agentdeck: warning: environment variable AGENTDECK_THEM names no configuration key \
         and is ignored; did you mean AGENTDECK_THEME?\n"
    );
}

#[test]
fn rendered_pods_opt_out_of_service_links() {
    let files = Files::new();
    let pools = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let pools = pools.display().to_string();
    let out = files.run(&["manifests", "--pools", &pools], &[], "@kubeconfig");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text(&out.stdout)).expect("YAML");
    let deployments: Vec<&serde_json::Value> =
        docs.iter().filter(|d| d["kind"] == "Deployment").collect();
    assert!(!deployments.is_empty());
    for d in deployments {
        assert_eq!(
            d["spec"]["template"]["spec"]["enableServiceLinks"],
            serde_json::json!(false),
            "{}",
            d["metadata"]["name"]
        );
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn an_unreachable_api_is_said_once_naming_the_server_and_the_cause() {
    let files = Files::new();
    let dead = free_port();
    files.write(
        "dead-kubeconfig",
        KUBECONFIG
            .replace("https://127.0.0.1:1", &format!("http://127.0.0.1:{dead}"))
            .as_bytes(),
    );
    let log = files.path("daemon.log");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .arg("--daemon")
        .env_clear()
        .env("HOME", files.dir.path())
        .env("XDG_CONFIG_HOME", files.dir.path())
        .env("KUBECONFIG", files.path("dead-kubeconfig"))
        .env("AGENTDECK_SERVER__PORT", free_port().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("daemon starts");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    common::eventually_blocking("the daemon to say the API is unreachable", || {
        read().contains("cannot reach").then_some(())
    });
    // Every watch, the elector and the version probe keep retrying meanwhile.
    std::thread::sleep(Duration::from_secs(3));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(daemon.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    assert!(daemon.wait().expect("daemon ends").success());
    let text = read();
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("cannot reach"))
        .collect();
    assert_eq!(said.len(), 1, "{text}");
    assert!(
        said[0].contains(&format!("http://127.0.0.1:{dead}")),
        "names the server: {}",
        said[0]
    );
    assert!(
        said[0].contains("Connection refused"),
        "names the cause: {}",
        said[0]
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("client error (Connect)"))
            .count(),
        1,
        "no other line per failed request: {text}"
    );
    assert!(!text.contains("controllerNamespace"), "{text}");
}

/// Runs `args` and checks the exit code and that stderr holds `fragments`
/// (for rows whose fragments are only known at run time).
fn answers(
    files: &Files,
    args: &[&str],
    kubeconfig: &str,
    code: i32,
    fragments: &[&str],
) -> Output {
    let out = files.run(args, &[], kubeconfig);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: stderr {stderr}");
    for fragment in fragments {
        assert!(
            stderr.contains(fragment),
            "{args:?}: stderr lacks {fragment:?}:\n{stderr}"
        );
    }
    assert!(
        stderr.starts_with("agentdeck: ") && stderr.lines().count() == 1,
        "{args:?}: one line: {stderr}"
    );
    if code == 2 {
        assert!(
            out.stdout.is_empty(),
            "a refused command prints nothing: {args:?}"
        );
    }
    out
}

#[test]
fn a_closed_port_is_named_with_the_operation_and_the_cause_by_every_command() {
    let files = Files::new();
    let dead = free_port();
    let server = format!("https://127.0.0.1:{dead}");
    files.write(
        "dead-kubeconfig",
        KUBECONFIG
            .replace("https://127.0.0.1:1", &server)
            .as_bytes(),
    );
    let reach = format!("cannot reach the API server at {server}");
    for args in [
        &["status"][..],
        &["scale", "p", "--max", "3", "--yes"],
        &["debug", "--list"],
        &["bundle", "-o", "x.zip"],
        &["access"],
    ] {
        answers(
            &files,
            args,
            "@dead-kubeconfig",
            1,
            &[&reach, "connection refused"],
        );
    }
    // The operation is named too.
    answers(
        &files,
        &["scale", "p", "--max", "3", "--yes"],
        "@dead-kubeconfig",
        1,
        &["to read namespace default"],
    );
    assert!(
        !files.path("x.zip").exists(),
        "no bundle is started against an API that cannot be reached"
    );
}

#[test]
fn every_command_that_loads_configuration_refuses_a_missing_file_or_a_typo_d_key() {
    let files = Files::new();
    files.write("typo.yaml", b"themee: light\n");
    for command in [
        &["status"][..],
        &["scale", "p", "--max", "3"],
        &["drain", "p"],
        &["debug-logs", "p", "on"],
        &["task", "show", "t"],
        &["audit"],
        &["bundle"],
        &["debug", "--list"],
        &["access", "--as", "jane"],
    ] {
        let mut args = command.to_vec();
        args.extend(["--config", "/nonexistent.yaml"]);
        answers(
            &files,
            &args,
            "@kubeconfig",
            2,
            &["/nonexistent.yaml", "does not exist"],
        );
        let mut args = command.to_vec();
        args.extend(["--config", "@typo.yaml"]);
        answers(
            &files,
            &args,
            "@kubeconfig",
            2,
            &["typo.yaml", "unknown key `themee`", "theme"],
        );
    }
}

#[test]
fn a_sandbox_answers_missing_namespaces_pools_and_refused_tokens_naming_them() {
    let files = Files::new();
    let sb = common::TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &agentdeck::install::to_yaml_stream(&agentdeck::install::crd_documents()).expect("crds"),
    );
    let kubeconfig = sb.kubeconfig.display().to_string();
    let config = std::fs::read_to_string(&sb.kubeconfig).expect("kubeconfig");
    let server = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("a server")
        .trim_end_matches('/')
        .to_owned();
    let token = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("a token");
    files.write("bad-token", config.replace(token, "not-a-token").as_bytes());

    let missing = "namespace \"nosuchns\" does not exist";
    for args in [
        &["bundle", "-n", "nosuchns"][..],
        &["status", "-n", "nosuchns"],
        &["scale", "p", "--max", "3", "-n", "nosuchns"],
        &["drain", "p", "-n", "nosuchns"],
        &["task", "show", "t", "-n", "nosuchns"],
        &["debug", "--list", "-n", "nosuchns"],
        &["access", "-n", "nosuchns"],
    ] {
        answers(&files, args, &kubeconfig, 2, &[missing, &server, "default"]);
    }
    answers(
        &files,
        &["bundle", "--pool", "nosuch"],
        &kubeconfig,
        2,
        &["no AgentPool \"nosuch\" in namespace default"],
    );
    let refused = format!(
        "the token was refused by {server} (to read namespace default): log in again or check the kubeconfig user"
    );
    for args in [&["bundle"][..], &["status"], &["access"]] {
        answers(&files, args, "@bad-token", 1, &[&refused]);
    }
    answers(
        &files,
        &["debug", "--list"],
        "@bad-token",
        1,
        &["the token was refused by", "to read namespace default"],
    );
    answers(
        &files,
        &["debug", "--cleanup", "nosuchpod"],
        &kubeconfig,
        2,
        &[
            "no such debug pod: \"nosuchpod\"",
            "namespace default",
            "debug pods there: none",
        ],
    );
    // An ephemeral debug container is listed, and said to be beyond --cleanup.
    sb.kubectl_ok(&[
        "run",
        "victim",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "sleep 3600",
    ]);
    common::eventually_blocking("the pod to run", || {
        let phase = sb.kubectl_ok(&["get", "pod", "victim", "-o", "jsonpath={.status.phase}"]);
        (phase == "Running").then_some(())
    });
    let out = files.run(
        &["debug", "victim", "--mode", "ephemeral"],
        &[],
        &kubeconfig,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let container = text(&out.stdout)
        .split_whitespace()
        .find(|w| w.starts_with("debugger-"))
        .expect("the container's name")
        .to_owned();
    let out = files.run(&["debug", "--list"], &[], &kubeconfig);
    let listed = text(&out.stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("victim ") && l.contains(&container)),
        "{listed}"
    );
    answers(
        &files,
        &["debug", "--cleanup", "victim"],
        &kubeconfig,
        2,
        &[&container, "cannot be removed"],
    );
    // An I/O fault names the directory given, not the hidden partial file.
    answers(
        &files,
        &["bundle", "-o", "/nonexistent/dir/x.zip"],
        &kubeconfig,
        1,
        &[
            "cannot write the bundle /nonexistent/dir/x.zip: directory /nonexistent/dir: no such file or directory",
        ],
    );
    let leftovers: Vec<_> = std::fs::read_dir(files.dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("bundle"))
        .collect();
    assert!(leftovers.is_empty(), "nothing started: {leftovers:?}");

    // And a bundle of what is there is still written, named after its pool.
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        "apiVersion: agentdeck.dev/v1alpha1\nkind: AgentPool\nmetadata: {name: p, namespace: default}\n\
         spec: {image: x, minReplicas: 0, maxReplicas: 1}\n",
    );
    let out = files.run(&["bundle", "--pool", "p"], &[], &kubeconfig);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let name = stdout
        .strip_prefix("wrote ")
        .and_then(|s| s.split_whitespace().next())
        .expect("the zip's name");
    assert!(name.starts_with("agentdeck-bundle-default-p-"), "{stdout}");
    // Its manifest names the context; its entries are dated now, not 1980.
    let zip = std::fs::File::open(files.path(name)).expect("zip");
    let mut zip = zip::ZipArchive::new(zip).expect("a zip");
    let manifest: serde_json::Value = {
        let mut f = zip.by_name("manifest.json").expect("manifest");
        serde_json::from_reader(&mut f).expect("JSON")
    };
    let context = config
        .lines()
        .find_map(|l| l.strip_prefix("current-context: "))
        .expect("a current context");
    assert_eq!(manifest["context"], serde_json::json!(context.trim()));
    let year = u16::try_from(jiff::Zoned::now().year()).expect("year");
    for i in 0..zip.len() {
        let f = zip.by_index_raw(i).expect("entry");
        let t = f.last_modified().expect("a time");
        assert!(t.year() + 1 >= year, "{:?} dated {t:?}", f.name());
    }
}

#[test]
fn number_and_duration_flags_are_range_checked_naming_the_flag_and_the_range() {
    let files = Files::new();
    let rows: &[(&[&str], &[&str])] = &[
        (
            &["scale", "p", "--max", "99999999999"],
            &["--max", "out of range", "from 0 to 10000"],
        ),
        (
            &["bundle", "--since", "-5m"],
            &["--since", "\"-5m\" is negative; durations are positive"],
        ),
        (&["bundle", "--since=-5m"], &["--since", "is negative"]),
        (
            &["bundle", "--since", "0s"],
            &["--since", "from 1s to 365d"],
        ),
        (
            &["bundle", "--deadline", "0s"],
            &["--deadline", "from 1s to 1d"],
        ),
        (&["debug", "x", "--ttl", "0s"], &["--ttl", "from 1m to 7d"]),
        (
            &["debug", "x", "--ttl", "87600h"],
            &["--ttl", "87600h is out of range"],
        ),
        (
            &["scale", "p", "--replicas", "2", "--for", "-5m"],
            &["--for", "is negative"],
        ),
        (&["audit", "--since", "-1h"], &["--since", "is negative"]),
        (&["drain", "p", "--timeout", "5m"], &["--wait"]),
    ];
    for (args, fragments) in rows {
        let out = files.run(args, &[], "@kubeconfig");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        for f in *fragments {
            assert!(stderr.contains(f), "{args:?}: lacks {f:?}: {stderr}");
        }
    }
}

#[test]
fn audit_n_shows_only_that_namespace_s_actions() {
    let files = Files::new();
    let dir = files.path(".local/state/agentdeck");
    std::fs::create_dir_all(&dir).expect("state dir");
    let record = |ns: &str, pool: &str| {
        serde_json::json!({
            "time": "2026-11-27T10:00:00Z", "user": "alice", "via": "cli",
            "namespace": ns, "action": "drain", "request": {},
            "summary": format!("drain pool {pool}"),
            "objects": [{"object": format!("AgentPool/{pool}"), "before": {}, "after": {}, "changes": []}],
            "outcome": "applied",
        })
        .to_string()
    };
    std::fs::write(
        dir.join("audit.jsonl"),
        format!(
            "{}\n{}\n",
            record("team-a", "alpha"),
            record("team-b", "beta")
        ),
    )
    .expect("audit file");
    let out = files.run(&["audit", "-n", "team-a"], &[], "@kubeconfig");
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(shown.contains("AgentPool/alpha"), "{shown}");
    assert!(!shown.contains("AgentPool/beta"), "{shown}");
    let out = files.run(&["audit"], &[], "@kubeconfig");
    let shown = text(&out.stdout);
    assert!(
        shown.contains("AgentPool/alpha") && shown.contains("AgentPool/beta"),
        "{shown}"
    );
    let out = files.run(&["audit", "-n", "team-c"], &[], "@kubeconfig");
    assert!(
        text(&out.stdout).starts_with("no actions in namespace team-c recorded in "),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_daemon_told_to_watch_a_namespace_that_does_not_exist_says_so() {
    let files = Files::new();
    let sb = common::TestSandbox::start();
    let log = files.path("daemon.log");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .args(["--daemon", "-n", "nosuchns"])
        .env_clear()
        .env("HOME", files.dir.path())
        .env("XDG_CONFIG_HOME", files.dir.path())
        .env("KUBECONFIG", &sb.kubeconfig)
        .env("AGENTDECK_SERVER__PORT", free_port().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("daemon starts");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let said = common::eventually_blocking("the daemon to note the namespace", || {
        read()
            .lines()
            .find(|l| l.contains("nosuchns"))
            .map(str::to_owned)
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(daemon.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    assert!(daemon.wait().expect("daemon ends").success(), "{}", read());
    assert!(
        said.contains("WARN") && said.contains("namespace \"nosuchns\" does not exist"),
        "{said}"
    );
}
