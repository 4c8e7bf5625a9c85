//! The binary as a user meets it: help, exit codes, and what `crds` and
//! `manifests` print.

use std::path::Path;
use std::process::{Command, Output};

use agentdeck::crd::{AgentPool, ExecutionMode};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

fn agentdeck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        // Keep the developer's own config files and env out of the test.
        .env("XDG_CONFIG_HOME", env!("CARGO_TARGET_TMPDIR"))
        .env("HOME", env!("CARGO_TARGET_TMPDIR"))
        .output()
        .expect("agentdeck runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("output is YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

#[test]
fn help_explains_every_mode_in_one_line() {
    let o = agentdeck(&["--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    for needle in [
        "--daemon",
        "--demo",
        "sandbox",
        "agent",
        "bundle",
        "debug",
        "scale",
        "drain",
        "debug-logs",
        "task",
        "status",
        "audit",
        "access",
        "crds",
        "manifests",
        "completions",
        "--namespace",
        "--context",
        "--config",
        "--theme",
        "--log-format",
        "--log-dir",
    ] {
        assert!(help.contains(needle), "help lacks {needle}:\n{help}");
    }
}

#[test]
fn version_prints_the_crate_version() {
    let o = agentdeck(&["--version"]);
    assert!(o.status.success());
    assert_eq!(
        stdout(&o).trim(),
        format!("agentdeck {}", env!("CARGO_PKG_VERSION"))
    );
}

/// The binary allocates with jemalloc, and jemalloc reads the options
/// built in (`src/main.rs`: freed pages go back after a second): a symbol
/// name that stopped matching would leave its ten-second default, silently.
/// Its background thread runs (started by `main`; the option itself stays
/// off, as it must before the kubelet's container set-up). jemalloc prints
/// its options at exit when asked to by its environment.
#[test]
fn the_allocator_is_jemalloc_with_its_pages_given_back_after_a_second() {
    let o = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("agentdeck runs");
    assert!(o.status.success());
    let printed = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        printed.contains("opt.dirty_decay_ms: 1000 "),
        "jemalloc's statistics name the decay built in: {printed}"
    );
    assert!(
        printed.contains("opt.background_thread: false (background_thread: true)"),
        "jemalloc's background thread was started after start-up, not by its option: {printed}"
    );
}

#[test]
fn debug_attach_with_an_unknown_context_exits_2_naming_it() {
    let o = agentdeck(&[
        "debug",
        "some-pod",
        "--attach",
        "--context",
        "no-such-context",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-context"), "{}", stderr(&o));
}

#[test]
fn bundle_with_a_bad_size_or_duration_exits_2_naming_the_valid_forms() {
    let o = agentdeck(&["bundle", "--max-bytes-per-log", "3T"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("K, M, G"), "{}", stderr(&o));
    let o = agentdeck(&["bundle", "--since", "yesterday"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("15m"), "{}", stderr(&o));
}

#[test]
fn the_daemon_with_an_unknown_context_exits_2_naming_it() {
    let o = agentdeck(&["--daemon", "--context", "no-such-context"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-context"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
}

#[test]
fn a_bad_flag_value_exits_2() {
    let o = agentdeck(&["--log-format", "xml", "crds"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn crds_prints_both_definitions_that_round_trip() {
    let o = agentdeck(&["crds"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let docs = yaml_docs(&stdout(&o));
    assert_eq!(docs.len(), 2);
    let crds: Vec<CustomResourceDefinition> = docs
        .iter()
        .map(|d| serde_json::from_value(d.clone()).expect("a CRD"))
        .collect();
    assert_eq!(
        crds[0].metadata.name.as_deref(),
        Some("agentpools.agentdeck.dev")
    );
    assert_eq!(
        crds[1].metadata.name.as_deref(),
        Some("agenttasks.agentdeck.dev")
    );
    assert_eq!(
        crds[0].spec.names.short_names.as_deref(),
        Some(&["ap".to_string()][..])
    );
    assert_eq!(
        crds[1].spec.names.short_names.as_deref(),
        Some(&["atask".to_string(), "at".to_string(), "atasks".to_string()][..])
    );
    let text = stdout(&o);
    assert!(
        text.contains("self.minReplicas <= self.maxReplicas"),
        "CEL rule present"
    );
    assert!(
        !text.contains("minimum: 0.0"),
        "integral bounds are printed as integers"
    );
}

#[test]
fn manifests_include_the_daemon_and_every_example_pool() {
    let o = agentdeck(&["manifests", "--pools", "config/"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let docs = yaml_docs(&stdout(&o));
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for k in [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
    ] {
        assert!(kinds.contains(&k), "no {k} in {kinds:?}");
    }
    // Namespaced by default: nothing cluster-wide for one namespace.
    assert!(!kinds.iter().any(|k| k.starts_with("Cluster")), "{kinds:?}");
    let roles: Vec<(&str, &str)> = docs
        .iter()
        .filter(|d| d["kind"] == "Role")
        .filter_map(|d| {
            Some((
                d["metadata"]["namespace"].as_str()?,
                d["metadata"]["name"].as_str()?,
            ))
        })
        .collect();
    assert!(
        roles.contains(&("default", "agentdeck-controller"))
            && roles.contains(&("agentdeck-system", "agentdeck-controller-leader")),
        "{roles:?}"
    );
    let wide = agentdeck(&["manifests", "--pools", "config/", "--cluster-wide-rbac"]);
    assert!(wide.status.success(), "{}", stderr(&wide));
    let wide_kinds: Vec<String> = yaml_docs(&stdout(&wide))
        .iter()
        .filter_map(|d| d["kind"].as_str().map(str::to_owned))
        .collect();
    for k in ["ClusterRole", "ClusterRoleBinding"] {
        assert!(
            wide_kinds.iter().any(|w| w == k),
            "no {k} in {wide_kinds:?}"
        );
    }
    let pools: Vec<AgentPool> = docs
        .iter()
        .filter(|d| d["kind"] == "AgentPool")
        .map(|d| serde_json::from_value(d.clone()).expect("an AgentPool"))
        .collect();
    let mut names: Vec<String> = pools
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    assert_eq!(names, ["batch", "platform", "quickstart", "sandbox-envs"]);
    let batch = pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("batch"))
        .expect("batch");
    assert_eq!(batch.spec.execution_mode, ExecutionMode::Job);
    // Typed round trip: what we print is exactly what our types serialise to.
    for d in &docs {
        if d["kind"] == "AgentPool" {
            let p: AgentPool = serde_json::from_value(d.clone()).expect("pool");
            let mut again = serde_json::to_value(&p).expect("serialises");
            again.as_object_mut().map(|o| o.remove("status"));
            assert_eq!(&again, d);
        }
    }
}

#[test]
fn manifests_render_the_config_into_the_daemon_configmap() {
    let o = agentdeck(&["manifests", "--install-namespace", "ops-tools"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let docs = yaml_docs(&stdout(&o));
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("config map");
    assert_eq!(cm["metadata"]["namespace"], "ops-tools");
    let cfg = cm["data"]["agentdeck.yaml"].as_str().expect("config text");
    let parsed: Value = serde_saphyr::from_str(cfg).expect("config YAML");
    assert_eq!(parsed["resyncIntervalSeconds"], 30);
}

fn assert_rejected(fixture: &str, needles: &[&str]) {
    let path = Path::new("tests/fixtures").join(fixture);
    let o = agentdeck(&["manifests", "--pools", path.to_str().expect("utf-8 path")]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{fixture}: {err}");
    assert!(
        stdout(&o).is_empty(),
        "{fixture}: nothing may be printed on a validation failure"
    );
    assert!(
        err.contains(fixture),
        "{fixture}: error names the file: {err}"
    );
    for n in needles {
        assert!(err.contains(n), "{fixture}: error lacks {n:?}: {err}");
    }
    assert!(!err.contains("panicked"));
}

#[test]
fn min_above_max_is_rejected_naming_the_field() {
    assert_rejected(
        "pool-min-gt-max.yaml",
        &["spec.minReplicas", "5", "spec.maxReplicas"],
    );
}

#[test]
fn an_impossible_time_is_rejected_naming_the_schedule() {
    assert_rejected(
        "pool-bad-time.yaml",
        &["spec.freezeSchedules[0].from", "25:00", "HH:MM"],
    );
}

#[test]
fn a_capacity_window_above_the_pool_max_is_rejected_naming_the_window() {
    assert_rejected(
        "pool-capacity-above-max.yaml",
        &[
            "spec.capacitySchedules[1].minReplicas",
            "8",
            "spec.maxReplicas (5)",
        ],
    );
}

#[test]
fn weekday_9_is_rejected_with_the_valid_range() {
    assert_rejected(
        "pool-bad-weekday.yaml",
        &["spec.freezeSchedules[0].weekdays", "9", "Sunday"],
    );
}

#[test]
fn negative_replicas_are_rejected() {
    assert_rejected(
        "pool-negative-replicas.yaml",
        &["spec.minReplicas", "-1", "from 0"],
    );
}

#[test]
fn an_unknown_mode_lists_the_valid_ones() {
    assert_rejected(
        "pool-unknown-mode.yaml",
        &["spec.executionMode", "daemonset", "deployment", "job"],
    );
}

#[test]
fn an_unknown_field_is_named_with_the_valid_ones() {
    assert_rejected(
        "pool-unknown-field.yaml",
        &["spec.maxReplica", "maxReplicas"],
    );
}

#[test]
fn a_name_too_long_for_a_label_is_rejected() {
    assert_rejected("pool-name-too-long.yaml", &["metadata.name", "63"]);
}

#[test]
fn a_quantity_that_does_not_parse_is_rejected() {
    assert_rejected(
        "pool-bad-quantity.yaml",
        &["spec.resources.requests.memory", "12 gigs", "256Mi"],
    );
}

#[test]
fn a_missing_pools_path_is_a_usage_error() {
    let o = agentdeck(&["manifests", "--pools", "no/such/dir"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no/such/dir"));
}

#[test]
fn a_config_with_an_unknown_key_exits_2_naming_file_and_field() {
    let o = agentdeck(&[
        "manifests",
        "--config",
        "tests/fixtures/config-bad-field.yaml",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("config-bad-field.yaml") && err.contains("intervalSecs"),
        "{err}"
    );
    assert!(
        err.contains("intervalSeconds"),
        "valid keys are listed: {err}"
    );
    assert!(stdout(&o).is_empty());
}

#[test]
fn a_config_with_a_bad_value_exits_2_naming_the_field() {
    let o = agentdeck(&[
        "manifests",
        "--config",
        "tests/fixtures/config-bad-value.yaml",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("healthProbe.intervalSeconds"), "{err}");
}

#[test]
fn a_missing_config_file_exits_2() {
    let o = agentdeck(&["manifests", "--config", "tests/fixtures/nope.yaml"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("nope.yaml"));
}

#[test]
fn completions_are_printed_for_bash() {
    let o = agentdeck(&["completions", "bash"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("_agentdeck"));
}

#[test]
fn sandbox_serves_kubectl_then_stops_cleanly_on_sigterm() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kc");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .args(["sandbox", "--nodes", "1", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .env("HOME", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sandbox starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    assert!(
        first.contains("Kubernetes API on https://127.0.0.1:"),
        "{first}"
    );
    let second = lines.next().expect("a line").expect("utf-8");
    assert!(
        second.contains(&kubeconfig.display().to_string()),
        "{second}"
    );
    let ns = Command::new("kubectl")
        .args(["get", "namespaces", "-o", "name"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .output()
        .expect("kubectl runs");
    assert!(ns.status.success(), "{}", stderr(&ns));
    assert!(stdout(&ns).contains("namespace/default"), "{}", stdout(&ns));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "sandbox did not stop within 60 s of SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn sandbox_on_a_busy_port_exits_2_and_names_the_port() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port().to_string();
    let o = agentdeck(&["sandbox", "--port", &port]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&port), "{}", stderr(&o));
}
