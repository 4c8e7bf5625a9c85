//! Redaction you can check and extend (issue 42): `agentdeck bundle` says
//! per rule what it hid, and `agentdeck bundle redact` hides more in a
//! bundle already taken. The real binary against an in-process sandbox
//! whose tasks and logs hold a customer's name; bundles are opened with the
//! machine's `unzip` and the zip crate.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output};

use agentdeck::crd::{AgentPool, AgentTask};
use agentdeck::sandbox::kubelet::KubeletConfig;
use common::{TestSandbox, err, out};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const CUSTOMER: &str = "Acme Widgets GmbH";
const NS: &str = "default";

fn entries(zip: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(zip).expect("open")).expect("a zip");
    (0..z.len())
        .map(|i| {
            let mut e = z.by_index(i).expect("entry");
            let mut bytes = Vec::new();
            e.read_to_end(&mut bytes).expect("read");
            (e.name().expect("name").into_owned(), bytes)
        })
        .collect()
}

fn holding_customer(entries: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let needle = CUSTOMER.to_ascii_lowercase();
    entries
        .iter()
        .filter(|(_, b)| {
            String::from_utf8_lossy(b)
                .to_ascii_lowercase()
                .contains(&needle)
        })
        .map(|(n, _)| n.clone())
        .collect()
}

fn json_entry(entries: &BTreeMap<String, Vec<u8>>, name: &str) -> Value {
    serde_json::from_slice(&entries[name]).unwrap_or_else(|e| panic!("{name} is JSON: {e}"))
}

/// `redactions.json`'s per-file counts, summed per rule.
fn per_rule(report: &Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for counts in report["files"].as_object().expect("files").values() {
        for (rule, n) in counts.as_object().expect("counts") {
            *out.entry(rule.clone()).or_default() += n.as_u64().expect("count");
        }
    }
    out
}

fn unzip_test(zip: &Path) {
    let t = Command::new("unzip")
        .arg("-t")
        .arg(zip)
        .output()
        .expect("unzip runs");
    assert!(
        t.status.success(),
        "unzip -t {}:\n{}",
        zip.display(),
        out(&t)
    );
}

fn refused(o: &Output, fragments: &[&str]) {
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout {}\nstderr {}",
        out(o),
        err(o)
    );
    for f in fragments {
        assert!(err(o).contains(f), "stderr lacks {f:?}:\n{}", err(o));
    }
}

/// A pool, three finished tasks whose output names the customer, an agent
/// pod whose log names them too (with an order number and a password), and
/// a Secret whose value it prints.
fn plant(sb: &TestSandbox) {
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &agentdeck::install::to_yaml_stream(&agentdeck::install::crd_documents()).expect("crds"),
    );
    let client = sb.client();
    sb.rt.block_on(async {
        let pp = PostParams::default();
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "deploy"},
            "spec": {"image": "busybox", "minReplicas": 0, "maxReplicas": 1}
        }))
        .expect("pool");
        common::eventually("the AgentPool resource to be served", || async {
            Api::<AgentPool>::namespaced(client.clone(), NS)
                .create(&pp, &pool)
                .await
                .ok()
        })
        .await;
        let tasks: Api<AgentTask> = Api::namespaced(client.clone(), NS);
        for t in ["t1", "t2", "t3"] {
            let task: AgentTask = serde_json::from_value(json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": t}, "spec": {"pool": "deploy", "command": ["tofu", "apply"]}
            }))
            .expect("task");
            tasks.create(&pp, &task).await.expect("task created");
            let output = format!("Plan: 2 to add\nApplied for {CUSTOMER} (task {t})\n");
            tasks
                .patch_status(
                    t,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"phase": "Succeeded", "outputTail": output}})),
                )
                .await
                .expect("status");
        }
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "platform-token"},
            "stringData": {"token": "platform-token-planted-77"}
        }))
        .expect("secret");
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&pp, &secret)
            .await
            .expect("secret created");
        let script = format!(
            "echo 'claimed t1 for {CUSTOMER}'; echo 'order-4711 shipped to {CUSTOMER}'; \
             echo 'DB_PASSWORD=hunter2-planted-9'; echo 'using platform-token-planted-77'; \
             echo 'done'; exec sleep 3600"
        );
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "deploy-agent-0",
                "labels": {"agentdeck.dev/pool": "deploy"},
                "annotations": {"sandbox.agentdeck.dev/run-shell": "true"}
            },
            "spec": {
                "containers": [{"name": "agent", "image": "busybox", "command": ["sh", "-c", script]}],
                "terminationGracePeriodSeconds": 1
            }
        }))
        .expect("pod");
        Api::<Pod>::namespaced(client.clone(), NS)
            .create(&pp, &pod)
            .await
            .expect("pod created");
    });
    common::eventually_blocking("the agent's log to be complete", || {
        let o = sb.kubectl(&["logs", "deploy-agent-0"]);
        out(&o).contains("done").then_some(())
    });
}

#[test]
fn a_customer_name_is_hidden_from_a_bundle_already_taken_and_each_count_is_said() {
    let sb = TestSandbox::start_with(KubeletConfig {
        exe: env!("CARGO_BIN_EXE_agentdeck").into(),
        ..KubeletConfig::from_env()
    });
    plant(&sb);
    let dir = tempfile::tempdir().expect("dir");
    let path = |n: &str| dir.path().join(n);
    let arg = |n: &str| path(n).display().to_string();

    // The bundle says, per rule, what it hid: redactions.json's counts.
    let o = sb.agentdeck(&["bundle", "-o", &arg("b.zip")]);
    assert!(o.status.success(), "{}", err(&o));
    let b = entries(&path("b.zip"));
    let taken = per_rule(&json_entry(&b, "redactions.json"));
    assert!(
        taken.contains_key("known-secret") && taken.contains_key("key-value"),
        "{taken:?}"
    );
    let mut rows: Vec<(&String, &u64)> = taken.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let said: Vec<String> = rows.iter().map(|(r, n)| format!("{n} × {r}")).collect();
    let line = format!("hidden: {}\n", said.join(", "));
    assert!(out(&o).contains(&line), "{line:?} not in:\n{}", out(&o));
    for secret in ["hunter2-planted-9", "platform-token-planted-77"] {
        assert!(!out(&o).contains(secret));
    }
    let before = holding_customer(&b);
    for name in [
        "tasks/t1.output.log",
        "tasks/t3.output.log",
        "objects/agenttasks.yaml",
        "pods/deploy-agent-0/agent.log",
    ] {
        assert!(
            before.iter().any(|n| n == name),
            "{name} should hold the name: {before:?}"
        );
    }

    // One more pass, with the name in a literal file.
    std::fs::write(path("names.txt"), format!("{CUSTOMER}\r\n\n")).expect("write");
    let o = sb.agentdeck(&[
        "bundle",
        "redact",
        &arg("b.zip"),
        "-o",
        &arg("c.zip"),
        "--literal-file",
        &arg("names.txt"),
    ]);
    assert!(o.status.success(), "{}", err(&o));
    unzip_test(&path("c.zip"));
    let c = entries(&path("c.zip"));
    assert_eq!(c.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    assert_eq!(
        holding_customer(&c),
        Vec::<String>::new(),
        "the name is gone everywhere"
    );
    let report = json_entry(&c, "redactions.json");
    assert!(
        report["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .any(|r| r == "literal"),
        "{report}"
    );
    let now = per_rule(&report);
    let literal = now["literal"];
    // Three task outputs (each in its log and in agenttasks.yaml) and two
    // log lines at least.
    assert!(literal >= 8, "{now:?}");
    for (rule, n) in &taken {
        assert_eq!(
            now.get(rule),
            Some(n),
            "{rule}: the bundle's own counts are kept"
        );
    }
    assert_eq!(report["passes"][0]["matches"]["literal"], literal);
    assert!(
        out(&o).contains(&format!("hidden by this pass: {literal} × literal")),
        "{}",
        out(&o)
    );
    // The YAML still parses; the manifest keeps what it had, with new sizes.
    let tasks: Vec<Value> = serde_saphyr::from_multiple(
        std::str::from_utf8(&c["objects/agenttasks.yaml"]).expect("utf-8"),
    )
    .expect("agenttasks.yaml is YAML");
    assert_eq!(tasks.len(), 3);
    assert!(
        tasks[0]["status"]["outputTail"]
            .as_str()
            .expect("tail")
            .contains("***REDACTED:literal:")
    );
    let (mb, mc) = (
        json_entry(&b, "manifest.json"),
        json_entry(&c, "manifest.json"),
    );
    for field in [
        "tool",
        "version",
        "startedAt",
        "finishedAt",
        "namespaces",
        "options",
        "access",
    ] {
        assert_eq!(mb[field], mc[field], "{field}");
    }
    for f in mc["files"].as_array().expect("files") {
        let p = f["path"].as_str().expect("path");
        assert_eq!(f["bytes"], c[p].len() as u64, "{p}");
    }

    // It still opens as a bundle (the console and the sandbox on it read
    // it so), with every object and nothing it could not read.
    let opened = agentdeck::ops::bundle::open::OpenedBundle::open(&path("c.zip")).expect("opens");
    let objects = opened.objects();
    assert_eq!(
        objects.iter().filter(|o| o["kind"] == "AgentTask").count(),
        3
    );
    assert_eq!(opened.notes(), Vec::<String>::new());

    // Twice is once.
    let o = sb.agentdeck(&[
        "bundle",
        "redact",
        &arg("c.zip"),
        "-o",
        &arg("d.zip"),
        "--literal-file",
        &arg("names.txt"),
    ]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("nothing new"), "{}", out(&o));
    assert_eq!(entries(&path("d.zip")), c, "a second pass changes nothing");

    // A pattern.
    let o = sb.agentdeck(&[
        "bundle",
        "redact",
        &arg("b.zip"),
        "-o",
        &arg("e.zip"),
        "--regex",
        r"order-\d{4}",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    let e = entries(&path("e.zip"));
    let log = String::from_utf8_lossy(&e["pods/deploy-agent-0/agent.log"]).into_owned();
    assert!(log.contains("***REDACTED:regex:"), "{log}");
    // In the log and in the pod's command (objects/pods.yaml).
    let placed: usize = e
        .values()
        .map(|b| {
            String::from_utf8_lossy(b)
                .matches("***REDACTED:regex:")
                .count()
        })
        .sum();
    assert!(placed >= 2, "{placed}");
    assert!(
        e.values()
            .all(|b| !String::from_utf8_lossy(b).contains("order-4711"))
    );
    assert_eq!(
        per_rule(&json_entry(&e, "redactions.json"))["regex"],
        placed as u64
    );

    // Never over the input: by path, hard link or symbolic link.
    let original = std::fs::read(path("b.zip")).expect("read");
    std::fs::hard_link(path("b.zip"), path("hard.zip")).expect("hard link");
    std::os::unix::fs::symlink(path("b.zip"), path("soft.zip")).expect("symlink");
    for target in ["b.zip", "hard.zip", "soft.zip"] {
        let o = sb.agentdeck(&[
            "bundle",
            "redact",
            &arg("b.zip"),
            "-o",
            &arg(target),
            "--literal-file",
            &arg("names.txt"),
        ]);
        refused(&o, &["would write over the input"]);
    }
    assert_eq!(std::fs::read(path("b.zip")).expect("read"), original);

    // A damaged bundle, and a zip that is not one.
    std::fs::write(path("cut.zip"), &original[..original.len() * 2 / 3]).expect("write");
    let o = sb.agentdeck(&[
        "bundle",
        "redact",
        &arg("cut.zip"),
        "-o",
        &arg("x.zip"),
        "--regex",
        "x+",
    ]);
    refused(
        &o,
        &["cut.zip is not a readable zip", "is it a whole bundle?"],
    );
    assert!(!path("x.zip").exists());
    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn bundle_redact_refuses_bad_patterns_foreign_zips_and_unusable_literal_files_with_exit_2() {
    let dir = tempfile::tempdir().expect("dir");
    let path = |n: &str| dir.path().join(n);
    let arg = |n: &str| path(n).display().to_string();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agentdeck"))
            .args(args)
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .current_dir(dir.path())
            .output()
            .expect("agentdeck runs")
    };
    // A zip of random files.
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path("random.zip")).expect("create"));
    for (i, name) in ["a.bin", "notes.txt", "data.json"].iter().enumerate() {
        zip.start_file(*name, zip::write::SimpleFileOptions::default())
            .expect("entry");
        let bytes: Vec<u8> = (0..4096u32)
            .map(|n| (n * 31 + i as u32 * 7) as u8)
            .collect();
        zip.write_all(&bytes).expect("write");
    }
    zip.finish().expect("finish");
    std::fs::write(path("names.txt"), "Acme Widgets GmbH\n").expect("write");
    std::fs::write(path("short.txt"), "Acme Widgets GmbH\nAcme\n").expect("write");

    let o = run(&[
        "bundle",
        "redact",
        &arg("random.zip"),
        "-o",
        &arg("out.zip"),
        "--literal-file",
        &arg("names.txt"),
    ]);
    refused(
        &o,
        &[
            "random.zip is not an agentdeck support bundle",
            "has no manifest.json",
        ],
    );
    let o = run(&[
        "bundle",
        "redact",
        &arg("random.zip"),
        "-o",
        &arg("out.zip"),
        "--regex",
        "(unclosed",
    ]);
    refused(&o, &["--regex", "not a regular expression"]);
    let o = run(&[
        "bundle",
        "redact",
        &arg("random.zip"),
        "-o",
        &arg("out.zip"),
    ]);
    refused(&o, &["nothing to add", "--literal-file", "--regex"]);
    let o = run(&[
        "bundle",
        "redact",
        &arg("random.zip"),
        "-o",
        &arg("out.zip"),
        "--literal-file",
        &arg("missing.txt"),
    ]);
    refused(&o, &["--literal-file", "missing.txt"]);
    let o = run(&[
        "bundle",
        "redact",
        &arg("random.zip"),
        "-o",
        &arg("out.zip"),
        "--literal-file",
        &arg("short.txt"),
    ]);
    refused(&o, &["short.txt", "line 2 has 4 bytes"]);
    assert!(!err(&o).contains("Acme\n"), "the value is not echoed");
    let o = run(&[
        "bundle",
        "redact",
        &arg("no-such.zip"),
        "-o",
        &arg("out.zip"),
        "--regex",
        "x+",
    ]);
    refused(&o, &["cannot read the bundle", "no-such.zip"]);
    assert!(!path("out.zip").exists());
}
