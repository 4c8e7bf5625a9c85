//! The alert rules and the dashboard on the real thing: `promtool` checks
//! the rules and runs the unit tests of `tests/monitoring/`, and a real
//! Prometheus server scrapes `agentdeck --daemon` on the sandbox until
//! `AgentdeckPoolStuck` goes pending, then firing, for the pool made
//! stuck. Every `agentdeck_*` metric a rule or panel queries must be in
//! that daemon's `/metrics`.
//!
//! promtool and prometheus come from Debian's `prometheus` package
//! (`.ci/run` installs it); without them these tests fail saying so.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestSandbox, eventually, eventually_blocking as poll, out};
use serde_json::{Value, json};

const INSTALL: &str = "apt-get install -y prometheus";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `program`, or a failure naming the package that has it.
fn tool(program: &str) -> &str {
    match Command::new(program).arg("--version").output() {
        Ok(o) if o.status.success() => program,
        Ok(o) => panic!(
            "{program} --version failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("{program} is not installed ({e}); install it with `{INSTALL}`"),
    }
}

fn agentdeck(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .args(args)
        .env("HOME", std::env::temp_dir())
        .env("XDG_CONFIG_HOME", std::env::temp_dir())
        .current_dir(std::env::temp_dir())
        .output()
        .expect("agentdeck runs");
    assert!(
        o.status.success(),
        "agentdeck {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out(&o)
}

/// The rule file as JSON (through the YAML the command prints).
fn rules_json(yaml: &str) -> Value {
    serde_saphyr::from_str(yaml).expect("the rules are YAML")
}

fn rule_list(rules: &Value) -> Vec<Value> {
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

/// GitHub's anchors of the Markdown headings of `doc`.
fn anchors(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(agentdeck::monitoring::anchor)
        .collect()
}

const NAMED: [&str; 5] = [
    "AgentdeckPoolStuck",
    "AgentdeckQueueWaitHigh",
    "AgentdeckAgentsStale",
    "AgentdeckNoLeader",
    "AgentdeckWatchStale",
];

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let promtool = tool("promtool");
    let yaml = agentdeck(&["monitoring", "rules"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("rules.yml");
    std::fs::write(&file, &yaml).expect("rules written");
    let check = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool runs");
    assert!(
        check.status.success(),
        "promtool check rules:\n{}{}",
        out(&check),
        String::from_utf8_lossy(&check.stderr)
    );

    // Each alert: a severity, a summary and a runbook section that exists.
    let runbook = std::fs::read_to_string(manifest_dir().join("assets/RUNBOOK.md"))
        .expect("assets/RUNBOOK.md");
    let headings = anchors(&runbook);
    let rules = rule_list(&rules_json(&yaml));
    let names: BTreeSet<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    for name in NAMED {
        assert!(names.contains(name), "{name} is not rendered: {names:?}");
    }
    for r in &rules {
        let name = r["alert"].as_str().expect("alert name");
        assert!(r["labels"]["severity"].is_string(), "{name}: no severity");
        assert!(
            r["annotations"]["summary"]
                .as_str()
                .is_some_and(|s| s.contains("$labels")),
            "{name}: no summary naming its labels"
        );
        let url = r["annotations"]["runbook_url"]
            .as_str()
            .expect("runbook_url");
        let (_, anchor) = url.split_once('#').expect("an anchor");
        assert!(
            headings.contains(anchor),
            "{name}: #{anchor} is not a heading of assets/RUNBOOK.md"
        );
    }

    // The unit tests run against the committed rendering of the defaults.
    let tests_dir = manifest_dir().join("tests/monitoring");
    let committed = std::fs::read_to_string(tests_dir.join("rules.yml")).expect("rules.yml");
    assert!(
        committed == yaml,
        "tests/monitoring/rules.yml is not what `agentdeck monitoring rules` prints; \
         regenerate it: cargo run -- monitoring rules > tests/monitoring/rules.yml"
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&tests_dir)
        .expect("tests/monitoring")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let covered: BTreeSet<String> = files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("test file")
                .lines()
                .filter_map(|l| {
                    l.trim()
                        .strip_prefix("alertname:")
                        .map(|n| n.trim().to_owned())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for name in &names {
        assert!(covered.contains(*name), "no promtool test of {name}");
    }
    let test = Command::new(promtool)
        .args(["test", "rules"])
        .args(&files)
        .current_dir(&tests_dir)
        .output()
        .expect("promtool runs");
    assert!(
        test.status.success(),
        "promtool test rules:\n{}{}",
        out(&test),
        String::from_utf8_lossy(&test.stderr)
    );
}

#[test]
fn manifests_with_monitoring_render_a_prometheus_rule_promtool_accepts_and_the_dashboard() {
    let promtool = tool("promtool");
    let stream = agentdeck(&["manifests", "--monitoring", "--stuck-for", "7m"]);
    let docs: Vec<Value> = stream
        .split("\n---\n")
        .map(|d| d.trim_start_matches("---\n"))
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).expect("a YAML document"))
        .collect();
    let of_kind = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == "agentdeck-controller")
            .unwrap_or_else(|| panic!("no {kind} agentdeck-controller in the manifests"))
    };
    let rule = of_kind("PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], "agentdeck-system");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("rules.yml");
    std::fs::write(&file, serde_json::to_string(&rule["spec"]).expect("JSON")).expect("written");
    let check = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let stuck = rule_list(&rule["spec"])
        .into_iter()
        .find(|r| r["alert"] == "AgentdeckPoolStuck")
        .expect("AgentdeckPoolStuck");
    assert_eq!(stuck["for"], "7m", "the flag reaches the PrometheusRule");
    assert_eq!(
        of_kind("ServiceMonitor")["spec"]["endpoints"][0]["honorLabels"],
        true
    );
    let cm = of_kind("ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value = serde_json::from_str(
        cm["data"]["agentdeck.json"]
            .as_str()
            .expect("dashboard text"),
    )
    .expect("dashboard JSON");
    assert!(
        dashboard["panels"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    );
    // Without the flag, none of it.
    let plain = agentdeck(&["manifests"]);
    assert!(!plain.contains("PrometheusRule") && !plain.contains("grafana_dashboard"));
}

/// Every `agentdeck_*` name in `text`.
fn metric_names(text: &str, into: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(at) = rest.find("agentdeck_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        into.insert(name);
    }
}

/// The expressions of the dashboard: targets, annotations, variables.
fn dashboard_queries(d: &Value, into: &mut Vec<String>) {
    match d {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "definition", Value::String(s)) => into.push(s.clone()),
                    _ => dashboard_queries(v, into),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| dashboard_queries(v, into)),
        _ => {}
    }
}

/// A child process killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn pool(name: &str, spec: Value) -> String {
    let mut full = json!({"image": "agentdeck:dev", "cooldownSeconds": {"up": 0, "down": 30}});
    if let (Some(full), Value::Object(spec)) = (full.as_object_mut(), spec) {
        full.extend(spec);
    }
    json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
           "metadata": {"name": name}, "spec": full})
    .to_string()
}

fn task(name: &str, pool: &str, script: &str) -> String {
    json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
           "metadata": {"name": name}, "spec": {"pool": pool, "command": ["sh", "-c", script]}})
    .to_string()
}

/// Prometheus's alerts named `name`, as `(pool, state)`.
async fn alerts(http: &reqwest::Client, prom: &str, name: &str) -> Option<Vec<(String, String)>> {
    let v: Value = http
        .get(format!("{prom}/api/v1/alerts"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    Some(
        v["data"]["alerts"]
            .as_array()?
            .iter()
            .filter(|a| a["labels"]["alertname"] == name)
            .map(|a| {
                (
                    a["labels"]["pool"].as_str().unwrap_or_default().to_owned(),
                    a["state"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
    )
}

#[test]
fn a_real_prometheus_fires_pool_stuck_and_every_queried_metric_is_exported() {
    let prometheus = tool("prometheus");
    // SAFETY: set before the sandbox (and any other thread) starts.
    unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], &agentdeck(&["crds"]));
    sb.kubectl_ok(&["create", "namespace", "agentdeck-system"]);

    let port = free_port();
    let home = tempfile::tempdir().expect("temp dir");
    let _daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .arg("--daemon")
            .env_remove("AGENTDECK_SANDBOX_EXE")
            .env("KUBECONFIG", &sb.kubeconfig)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path())
            .env("AGENTDECK_SERVER__PORT", port.to_string())
            .current_dir(home.path())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(home.path().join("daemon.log")).expect("log file"),
            ))
            .spawn()
            .expect("daemon starts"),
    );

    // Prometheus, its own: a scrape and an evaluation every second, and
    // the rules as a user renders them, with a short `for` by flag.
    let rules = agentdeck(&["monitoring", "rules", "--stuck-for", "5s"]);
    std::fs::write(home.path().join("rules.yml"), &rules).expect("rules written");
    std::fs::write(
        home.path().join("prometheus.yml"),
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [rules.yml]\n\
             scrape_configs:\n\
             - job_name: agentdeck\n  static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
        ),
    )
    .expect("prometheus.yml written");
    let prom_port = free_port();
    let _prometheus = Killed(
        Command::new(prometheus)
            .arg(format!(
                "--config.file={}",
                home.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                home.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .arg("--log.level=warn")
            .current_dir(home.path())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(home.path().join("prometheus.log")).expect("log file"),
            ))
            .spawn()
            .expect("prometheus starts"),
    );
    let prom = format!("http://127.0.0.1:{prom_port}");

    // A pool that works (real agents, a task that fails among those that
    // succeed, a target of its own), one stuck (work and maxReplicas 0),
    // one scaled to zero with nothing to do.
    let work = pool(
        "work",
        json!({"minReplicas": 1, "maxReplicas": 2, "slo": {"queueWaitSeconds": 60}}),
    );
    let stuck = pool("stuck", json!({"minReplicas": 0, "maxReplicas": 0}));
    let idle = pool("idle", json!({"minReplicas": 0, "maxReplicas": 0}));
    for doc in [work, stuck, idle] {
        sb.kubectl_in_ok(&["apply", "-f", "-"], &doc);
    }
    for (name, pool, script) in [
        ("ok-1", "work", "echo one; sleep 1"),
        ("ok-2", "work", "echo two; sleep 1"),
        ("fails", "work", "echo three; exit 3"),
        ("waits", "stuck", "echo never"),
    ] {
        sb.kubectl_in_ok(&["create", "-f", "-"], &task(name, pool, script));
    }

    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("http client");
    let started = Instant::now();
    let seen = |states: &[(String, String)]| {
        let wrong: Vec<_> = states.iter().filter(|(p, _)| p != "stuck").collect();
        assert!(
            wrong.is_empty(),
            "AgentdeckPoolStuck for another pool: {wrong:?}"
        );
    };
    sb.rt.block_on(async {
        eventually("AgentdeckPoolStuck pending for pool stuck", || async {
            let states = alerts(&http, &prom, "AgentdeckPoolStuck").await?;
            seen(&states);
            states.iter().any(|(_, s)| s == "pending").then_some(())
        })
        .await;
        let pending = started.elapsed();
        eventually("AgentdeckPoolStuck firing for pool stuck", || async {
            let states = alerts(&http, &prom, "AgentdeckPoolStuck").await?;
            seen(&states);
            states.iter().any(|(_, s)| s == "firing").then_some(())
        })
        .await;
        eprintln!(
            "AgentdeckPoolStuck: pending after {pending:?}, firing after {:?}",
            started.elapsed()
        );
        // Every rule evaluates without error on the real series.
        let rules: Value = http
            .get(format!("{prom}/api/v1/rules"))
            .send()
            .await
            .expect("rules API")
            .json()
            .await
            .expect("rules JSON");
        for group in rules["data"]["groups"].as_array().expect("groups") {
            for r in group["rules"].as_array().expect("rules") {
                assert_eq!(r["health"], "ok", "{}: {}", r["name"], r["lastError"]);
            }
        }
    });

    // The pool that works has run its tasks: every metric the rules and
    // the dashboard query is in the daemon's /metrics.
    poll("the work pool's three tasks to end", || {
        let o = sb.kubectl(&["get", "at", "-o", "json"]);
        let list: Value = serde_json::from_slice(&o.stdout).ok()?;
        let ended = list["items"]
            .as_array()?
            .iter()
            .filter(|t| t["spec"]["pool"] == "work")
            .filter(|t| matches!(t["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
            .count();
        (ended == 3).then_some(())
    });
    let mut queried = BTreeSet::new();
    for r in rule_list(&rules_json(&rules)) {
        metric_names(r["expr"].as_str().expect("expr"), &mut queried);
    }
    let dashboard: Value =
        serde_json::from_str(&agentdeck(&["monitoring", "dashboard"])).expect("dashboard JSON");
    assert!(
        dashboard["panels"].as_array().is_some_and(|p| p.len() > 10),
        "a dashboard with panels"
    );
    let mut exprs = Vec::new();
    dashboard_queries(&dashboard, &mut exprs);
    for e in &exprs {
        metric_names(e, &mut queried);
    }
    assert!(queried.len() > 15, "{queried:?}");
    let metrics = || async {
        http.get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()
    };
    // A task's end is counted on the reconcile after it.
    let outcome =
        "agentdeck_tasks_finished_total{namespace=\"default\",pool=\"work\",phase=\"Failed\"} 1";
    let text = sb.rt.block_on(eventually(
        "the failed task counted in /metrics",
        || async { metrics().await.filter(|t| t.contains(outcome)) },
    ));
    let has_sample = |name: &str| {
        text.lines()
            .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
    };
    let missing: Vec<&String> = queried.iter().filter(|n| !has_sample(n)).collect();
    assert!(
        missing.is_empty(),
        "queried by a rule or panel, not exported by the daemon: {missing:?}\n{text}"
    );
}
