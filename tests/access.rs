//! `agentdeck access`: what a user who is not a cluster admin may do with
//! agentdeck, asked of the API for itself or (`--as`) for another, as the
//! command prints it, as the library answers it, as `kubectl auth can-i`
//! answers the same questions, and as a support bundle records it.

mod common;

use std::collections::BTreeSet;

use agentdeck::install::{crd_documents, to_yaml_stream};
use agentdeck::ops::access::{self, Feature};
use common::tmux::Tmux;
use common::{TestSandbox, err, out};
use serde_json::Value;

const NS: &str = "team-a";
const VIEWER: &str = "system:serviceaccount:team-a:viewer";
const LEASE_NS: &str = "agentdeck-system";

/// The issue's new user: may only get/list/watch AgentPools and
/// AgentTasks in team-a.
const VIEWER_RBAC: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: viewer, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: agentdeck-viewer, namespace: team-a}
rules:
- apiGroups: [agentdeck.dev]
  resources: [agentpools, agenttasks]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: agentdeck-viewer, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: agentdeck-viewer}
subjects:
- {kind: ServiceAccount, name: viewer, namespace: team-a}
"#;

const POOL: &str = r#"
apiVersion: agentdeck.dev/v1alpha1
kind: AgentPool
metadata: {name: alpha, namespace: team-a}
spec: {image: "agentdeck:dev", minReplicas: 0, maxReplicas: 1}
"#;

/// A sandbox with the CRDs, namespace team-a, a pool in it, and the
/// viewer as the kubeconfig's context `viewer` (the admin's stays
/// current). Returns the viewer's token.
fn with_viewer() -> (TestSandbox, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&crd_documents()).expect("crds"),
    );
    sb.kubectl_ok(&["create", "namespace", NS]);
    sb.kubectl_in_ok(&["apply", "-f", "-"], VIEWER_RBAC);
    common::eventually_blocking("the AgentPool CRD serves", || {
        sb.kubectl_in(&["apply", "-f", "-"], POOL)
            .status
            .success()
            .then_some(())
    });
    let token = sb
        .kubectl_ok(&["create", "token", "viewer", "-n", NS])
        .trim()
        .to_owned();
    sb.kubectl_ok(&[
        "config",
        "set-credentials",
        "viewer",
        &format!("--token={token}"),
    ]);
    sb.kubectl_ok(&[
        "config",
        "set-context",
        "viewer",
        "--cluster=agentdeck-sandbox",
        "--user=viewer",
        &format!("--namespace={NS}"),
    ]);
    (sb, token)
}

/// `agentdeck access ARGS` that must succeed (exit 0); its stdout.
fn access_ok(sb: &TestSandbox, args: &[&str]) -> String {
    let mut all = vec!["access"];
    all.extend_from_slice(args);
    let o = sb.agentdeck(&all);
    assert!(
        o.status.success(),
        "agentdeck {all:?} exited {:?}:\n{}\n{}",
        o.status.code(),
        out(&o),
        err(&o)
    );
    out(&o)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// A feature's row of the printed table: (ALLOWED, MISSING).
fn row(table: &str, feature: &str) -> (String, String) {
    let line = table
        .lines()
        .find(|l| {
            l.strip_prefix(feature)
                .is_some_and(|rest| rest.starts_with("  "))
        })
        .unwrap_or_else(|| panic!("no row {feature:?} in:\n{table}"));
    let rest = line[feature.len()..].trim_start();
    match rest.split_once(' ') {
        Some((verdict, missing)) => (verdict.to_owned(), missing.trim().to_owned()),
        None => (rest.to_owned(), String::new()),
    }
}

/// The JSON row of a feature by its id.
fn feature<'a>(table: &'a Value, id: &str) -> &'a Value {
    table["features"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["feature"] == id))
        .unwrap_or_else(|| panic!("no feature {id} in {table}"))
}

#[test]
fn the_viewer_sees_pools_not_agents_and_an_admin_asking_as_the_viewer_hears_the_same() {
    let (sb, _) = with_viewer();
    let table = access_ok(&sb, &["--context", "viewer"]);
    assert!(table.starts_with(VIEWER), "{table}");
    assert_eq!(row(&table, "see pools"), ("yes".into(), String::new()));
    assert_eq!(row(&table, "see tasks"), ("yes".into(), String::new()));
    assert_eq!(
        row(&table, "see agents"),
        ("no".into(), "list, watch pods in team-a".into())
    );
    let (scale, missing) = row(&table, "scale");
    assert_eq!(scale, "no");
    assert!(missing.contains("patch agentpools in team-a"), "{missing}");
    assert_eq!(row(&table, "bundle").0, "partly");
    assert!(
        table.contains("events.yaml: list events in team-a"),
        "{table}"
    );
    assert_eq!(
        row(&table, "lead"),
        (
            "no".into(),
            "get, create, update leases in agentdeck-system".into()
        )
    );

    // The same questions, asked by the admin as the viewer.
    let own = json(&access_ok(&sb, &["--context", "viewer", "-o", "json"]));
    let as_viewer = json(&access_ok(&sb, &["-n", NS, "--as", VIEWER, "-o", "json"]));
    assert_eq!(own["user"], VIEWER);
    assert_eq!(as_viewer["user"], VIEWER);
    assert_eq!(own["features"], as_viewer["features"]);
    assert_eq!(own["bundleLacks"], as_viewer["bundleLacks"]);
    assert_eq!(feature(&own, "see-pools")["allowed"], true);
    assert_eq!(feature(&own, "see-agents")["allowed"], false);
    assert_eq!(
        feature(&own, "see-agents")["missing"][0]["text"],
        "list pods in team-a"
    );
    // Without --as the admin may do everything: --as changed the answers.
    let admin = json(&access_ok(&sb, &["-n", NS, "-o", "json"]));
    for id in ["see-agents", "exec", "lead", "bundle"] {
        assert_eq!(feature(&admin, id)["allowed"], true, "{admin}");
    }
    assert_eq!(admin["bundleLacks"], serde_json::json!([]));
    // Every namespace: the viewer's Role is in one.
    let everywhere = json(&access_ok(
        &sb,
        &["--context", "viewer", "-A", "-o", "json"],
    ));
    assert_eq!(everywhere["namespace"], Value::Null);
    assert_eq!(
        feature(&everywhere, "see-pools")["missing"][0]["text"],
        "list agentpools in all namespaces"
    );
}

#[test]
fn kubectl_auth_can_i_agrees_with_the_table_need_by_need() {
    let (sb, _) = with_viewer();
    let table = json(&access_ok(&sb, &["-n", NS, "--as", VIEWER, "-o", "json"]));
    let missing: BTreeSet<String> = table["features"]
        .as_array()
        .expect("features")
        .iter()
        .flat_map(|f| f["missing"].as_array().cloned().unwrap_or_default())
        .map(|n| n["text"].as_str().expect("text").to_owned())
        .collect();
    let mut asked = BTreeSet::new();
    let mut yes = 0;
    for f in Feature::ALL {
        for need in access::needs(f, Some(NS), LEASE_NS) {
            let text = need.to_string();
            if !asked.insert(text.clone()) {
                continue;
            }
            let resource = if need.group.is_empty() {
                need.resource.to_owned()
            } else {
                format!("{}.{}", need.resource, need.group)
            };
            let mut args = vec![
                "auth".to_owned(),
                "can-i".to_owned(),
                need.verb.to_owned(),
                resource,
                "--as".to_owned(),
                VIEWER.to_owned(),
            ];
            match &need.namespace {
                Some(ns) => args.extend(["-n".to_owned(), ns.clone()]),
                None => args.push("--all-namespaces".to_owned()),
            }
            if let Some(sub) = need.subresource {
                args.push(format!("--subresource={sub}"));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let answer = out(&sb.kubectl(&args)).trim().to_owned();
            let table_says = if missing.contains(&text) { "no" } else { "yes" };
            assert_eq!(answer, table_says, "kubectl {args:?}");
            yes += usize::from(answer == "yes");
        }
    }
    // Both answers were asked about: pools and tasks yes, the rest no.
    assert!(yes >= 3, "{yes} yes of {}", asked.len());
    assert!(asked.len() - yes >= 20, "{yes} yes of {}", asked.len());
}

#[test]
fn the_library_answers_for_a_token_as_the_command_does() {
    let (sb, token) = with_viewer();
    let viewer = {
        let _g = sb.rt.enter();
        sb.sandbox()
            .client_with_token(&token)
            .expect("viewer client")
    };
    let admin = sb.client();
    sb.rt.block_on(async {
        let t = access::review(&viewer, Some(NS), LEASE_NS)
            .await
            .expect("answered");
        assert_eq!(t.user.as_deref(), Some(VIEWER));
        assert!(t.allows(Feature::SeePools));
        assert!(t.allows(Feature::SeeTasks));
        assert!(!t.allows(Feature::SeeAgents));
        assert!(
            t.missing(Feature::SeeAgents)
                .iter()
                .any(|n| n.to_string() == "list pods in team-a"),
            "{:?}",
            t.missing(Feature::SeeAgents)
        );
        let list_pods = access::needs(Feature::SeeAgents, Some(NS), LEASE_NS)
            .into_iter()
            .next()
            .expect("a need");
        assert!(
            !access::allowed(&viewer, &list_pods)
                .await
                .expect("answered")
        );
        assert!(access::allowed(&admin, &list_pods).await.expect("answered"));
        // An action checked before its dialog: draining one agent needs
        // the pool's reads and a patch of the pod.
        let drain_one = access::action_needs(
            &agentdeck::ops::Action::DrainAgent {
                pool: "alpha".into(),
                agent: "alpha-0".into(),
                undo: false,
            },
            NS,
        );
        let refused: Vec<String> = access::refused(&viewer, &drain_one)
            .await
            .expect("answered")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(refused, ["list pods in team-a", "patch pods in team-a"]);
        assert!(
            access::refused(&admin, &drain_one)
                .await
                .expect("answered")
                .is_empty()
        );
        let everything = access::review(&admin, Some(NS), LEASE_NS)
            .await
            .expect("answered");
        assert!(Feature::ALL.iter().all(|f| everything.allows(*f)));
    });
}

#[test]
fn a_user_who_may_not_impersonate_is_told_so_and_exits_1() {
    let (sb, _) = with_viewer();
    let o = sb.agentdeck(&[
        "access",
        "--context",
        "viewer",
        "--as",
        "system:serviceaccount:team-a:deployer",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", out(&o), err(&o));
    assert_eq!(out(&o), "", "nothing printed");
    let said = err(&o);
    assert!(
        said.contains(
            "you may not impersonate system:serviceaccount:team-a:deployer \
             (needs impersonate on serviceaccounts in team-a)"
        ),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
    // A malformed subject is a mistake in what was given.
    let o = sb.agentdeck(&["access", "--as", "system:serviceaccount:team-a"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
}

#[test]
fn a_bundle_records_what_its_taker_may_do_so_its_reader_knows_why_things_are_absent() {
    let (sb, _) = with_viewer();
    let dir = tempfile::tempdir().expect("dir");
    let zip = dir.path().join("viewer.zip");
    let zip_arg = zip.to_str().expect("utf-8 path");
    let o = sb.agentdeck(&["bundle", "--context", "viewer", "-o", zip_arg]);
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    // Said at once, too.
    assert!(
        out(&o).contains("missing for want of rights (manifest.json: access):\n")
            && out(&o).contains("  events.yaml: list events in team-a\n"),
        "{}",
        out(&o)
    );
    let unzipped = std::process::Command::new("unzip")
        .args(["-p", zip_arg, "manifest.json"])
        .output()
        .expect("unzip runs");
    assert!(unzipped.status.success());
    let manifest = json(&String::from_utf8_lossy(&unzipped.stdout));
    let taken_by = &manifest["access"];
    assert_eq!(taken_by["user"], VIEWER, "{manifest}");
    assert_eq!(taken_by["namespace"], NS);
    assert_eq!(feature(taken_by, "see-pools")["allowed"], true);
    assert_eq!(feature(taken_by, "bundle")["partial"], true);
    let lacks: Vec<&str> = taken_by["bundleLacks"]
        .as_array()
        .expect("bundleLacks")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        lacks.contains(&"events.yaml: list events in team-a"),
        "{lacks:?}"
    );
    assert!(
        lacks.contains(&"pod logs: get pods/log in team-a"),
        "{lacks:?}"
    );
    assert!(!lacks.iter().any(|l| l.contains("agentpools")), "{lacks:?}");
}

/// The issue's check, in the console: the viewer opens it and is told
/// what is forbidden (never `syncing` or `loading…`), and an action the
/// viewer may not take is refused before any dialog. On the main of
/// before, the header still said `syncing` 8 s in.
#[test]
fn the_viewers_console_says_what_is_forbidden_and_refuses_scale_before_a_dialog() {
    let (sb, _) = with_viewer();
    let kubeconfig = sb.kubeconfig.display().to_string();
    let started = std::time::Instant::now();
    let t = Tmux::start(
        &["--context", "viewer"],
        &[("KUBECONFIG", &kubeconfig)],
        150,
        40,
    );
    // Events are not watched until a view reads them: their refusal is
    // told when the events view is opened (below).
    let s = t.wait(
        "the pool, and the header saying the watch is partial",
        |s| s.contains("alpha") && s.contains("watch partial: pods"),
    );
    assert!(
        !s.contains("pods, events"),
        "events not asked for yet:\n{s}"
    );
    assert!(s.contains("forbidden"), "{s}");
    // 8 s in, the header has not gone back to syncing.
    if let Some(left) = std::time::Duration::from_secs(8).checked_sub(started.elapsed()) {
        std::thread::sleep(left);
    }
    let s = t.screen();
    assert!(!s.contains("syncing"), "8 s in:\n{s}");
    t.send(&["2"]);
    let s = t.wait_for("you may not list pods in team-a — agents need get/list/watch pods");
    assert!(!s.contains("loading…"), "{s}");
    t.send(&["4"]);
    let s = t.wait_for("you may not list events in team-a — events need get/list/watch events");
    assert!(!s.contains("loading…"), "{s}");
    t.wait_for("watch partial: pods, events");
    // `s` on the pool: refused at once, no prompt.
    t.send(&["1"]);
    t.wait_for("Pools [1/1]");
    let s = t.wait("scale refused without a dialog", |s| {
        // The rights arrive shortly after the first screen: press until
        // the answer is the refusal (a dialog would be closed by esc).
        if s.contains("Scale pool alpha") {
            t.send(&["Escape"]);
        }
        t.send(&["s"]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let now = t.screen();
        now.contains("you may not patch agentpools in team-a") && !now.contains("Scale pool alpha")
    });
    assert!(!s.contains("min-max bounds"), "{s}");
    // Help shows scaling dimmed, with the reason.
    t.send(&["?"]);
    t.wait("help naming why scale is unavailable", |s| {
        s.contains("scale: you may not patch agentpools in team-a")
    });
}

/// `-A` for the viewer, who may not list pools in every namespace: the
/// console falls back to the namespace the viewer may read, and says so.
#[test]
fn all_namespaces_for_a_viewer_of_one_falls_back_to_that_one() {
    let (sb, _) = with_viewer();
    let kubeconfig = sb.kubeconfig.display().to_string();
    let t = Tmux::start(
        &["--context", "viewer", "-A"],
        &[("KUBECONFIG", &kubeconfig)],
        150,
        30,
    );
    let s = t.wait("the pool of team-a, in team-a", |s| {
        s.contains("ns team-a") && s.contains("alpha") && s.contains("watch partial")
    });
    // One namespace: no NAMESPACE column, and no watch refused for want of
    // a cluster-wide list.
    assert!(!s.contains("NAMESPACE"), "{s}");
    let header = s.lines().next().unwrap_or_default();
    assert!(!header.contains("agentpools"), "{s}");
}
