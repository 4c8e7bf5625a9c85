//! Conformance: the machine's real `kubectl` against the sandbox. Each test
//! asserts what kubectl printed, not only its exit code.

mod common;

use common::{TestSandbox, err, out};

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web, tier: front}
spec:
  containers:
    - name: nginx
      image: nginx:1.27
"#;

const DEPLOY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  labels: {app: api}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
        - name: api
          image: ghcr.io/acme/api:1.0
          env: [{name: A, value: "1"}]
"#;

#[test]
fn get_namespaces_lists_the_system_namespaces_as_a_table() {
    let sb = TestSandbox::start();
    let text = sb.kubectl_ok(&["get", "namespaces"]);
    let header = text.lines().next().unwrap_or_default();
    assert!(
        header.contains("NAME") && header.contains("STATUS") && header.contains("AGE"),
        "{text}"
    );
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(ns) && l.contains("Active")),
            "{ns} missing:\n{text}"
        );
    }
}

#[test]
fn api_resources_lists_built_ins_with_short_names() {
    let sb = TestSandbox::start();
    let text = sb.kubectl_ok(&["api-resources"]);
    for (name, short) in [
        ("pods", "po"),
        ("deployments", "deploy"),
        ("namespaces", "ns"),
        ("customresourcedefinitions", "crd"),
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(name)
                && l.split_whitespace()
                    .any(|w| w.split(',').any(|s| s == short))),
            "{name}/{short} missing:\n{text}"
        );
    }
}

#[test]
fn our_crds_apply_and_their_short_names_and_columns_work() {
    let sb = TestSandbox::start();
    let crds = out(&sb.agentdeck(&["crds"]));
    let dry = sb.kubectl_in_ok(
        &["apply", "--dry-run=client", "--validate=false", "-f", "-"],
        &crds,
    );
    assert!(
        dry.contains("agentpools.agentdeck.dev created (dry run)"),
        "{dry}"
    );
    let applied = sb.kubectl_in_ok(&["apply", "-f", "-"], &crds);
    assert!(
        applied.contains(
            "customresourcedefinition.apiextensions.k8s.io/agentpools.agentdeck.dev created"
        ),
        "{applied}"
    );
    assert!(
        applied.contains("agenttasks.agentdeck.dev created"),
        "{applied}"
    );
    let res = sb.kubectl_ok(&["api-resources", "--api-group=agentdeck.dev"]);
    assert!(res.contains("agentpools") && res.contains("ap"), "{res}");
    assert!(
        res.contains("agenttasks") && res.contains("atask,at") || res.contains("at,atask"),
        "{res}"
    );
    // The pools of config/ go in after the CRDs exist.
    let manifests = out(&sb.agentdeck(&["manifests", "--pools", "config/"]));
    let dry = sb.kubectl_in_ok(
        &["apply", "--dry-run=client", "--validate=false", "-f", "-"],
        &manifests,
    );
    assert!(
        dry.contains("agentpool.agentdeck.dev/platform created (dry run)"),
        "{dry}"
    );
    let pools: String = [
        "config/pool-deployment.yaml",
        "config/pool-job.yaml",
        "config/pool-scale-to-zero.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(f).expect("example pool"))
    .collect::<Vec<_>>()
    .join("\n---\n");
    sb.kubectl_in_ok(&["apply", "-f", "-"], &pools);
    let table = sb.kubectl_ok(&["get", "ap"]);
    let header = table.lines().next().unwrap_or_default();
    for col in [
        "NAME", "MODE", "READY", "DESIRED", "MIN", "MAX", "PENDING", "RUNNING", "FROZEN", "AGE",
    ] {
        assert!(header.contains(col), "{col} missing: {table}");
    }
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("batch") && l.contains("job") && l.contains("20")),
        "{table}"
    );
    // Server-side defaults from the schema.
    let port = sb.kubectl_ok(&[
        "get",
        "agentpool",
        "sandbox-envs",
        "-o",
        "jsonpath={.spec.healthPort}",
    ]);
    assert_eq!(port, "8080");
    let tasks = sb.kubectl(&["get", "at"]);
    assert!(tasks.status.success(), "{}", err(&tasks));
    assert!(
        err(&tasks).contains("No resources found"),
        "{}",
        err(&tasks)
    );
    // Every short name the CRD declares resolves, as kubectl resolves them.
    for name in ["atask", "atasks", "agenttasks"] {
        let o = sb.kubectl(&["get", name]);
        assert!(
            o.status.success() && err(&o).contains("No resources found"),
            "kubectl get {name}: {}",
            err(&o)
        );
    }
}

#[test]
fn an_invalid_pool_is_refused_by_the_schema_rules() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], &out(&sb.agentdeck(&["crds"])));
    let bad = std::fs::read_to_string("tests/fixtures/pool-min-gt-max.yaml").expect("fixture");
    let o = sb.kubectl_in(&["apply", "-f", "-"], &bad);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("minReplicas must be less than or equal to maxReplicas"),
        "{}",
        err(&o)
    );
    let bad = std::fs::read_to_string("tests/fixtures/pool-unknown-mode.yaml").expect("fixture");
    let o = sb.kubectl_in(&["apply", "-f", "-"], &bad);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("Unsupported value: \"daemonset\""),
        "{}",
        err(&o)
    );
}

#[test]
fn create_get_and_output_formats() {
    let sb = TestSandbox::start();
    let created = sb.kubectl_in_ok(&["create", "-f", "-"], POD);
    assert_eq!(created.trim(), "pod/web created");
    let again = sb.kubectl_in(&["create", "-f", "-"], POD);
    assert!(
        err(&again).contains("pods \"web\" already exists"),
        "{}",
        err(&again)
    );
    let yaml = sb.kubectl_ok(&["get", "pod", "web", "-o", "yaml"]);
    assert!(
        yaml.contains("name: web") && yaml.contains("uid:") && yaml.contains("resourceVersion:"),
        "{yaml}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&sb.kubectl_ok(&["get", "po", "web", "-o", "json"])).expect("json");
    assert_eq!(json["spec"]["containers"][0]["image"], "nginx:1.27");
    assert_eq!(
        sb.kubectl_ok(&[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.metadata.labels.tier}"
        ]),
        "front"
    );
    let table = sb.kubectl_ok(&["get", "pods"]);
    let header = table.lines().next().unwrap_or_default();
    for col in ["NAME", "READY", "STATUS", "RESTARTS", "AGE"] {
        assert!(header.contains(col), "{table}");
    }
    let wide = sb.kubectl_ok(&["get", "pods", "-o", "wide"]);
    assert!(
        wide.lines().next().unwrap_or_default().contains("NODE"),
        "{wide}"
    );
    let missing = sb.kubectl(&["get", "pod", "nope"]);
    assert!(
        err(&missing).contains("pods \"nope\" not found"),
        "{}",
        err(&missing)
    );
}

#[test]
fn label_and_field_selectors_filter_lists() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["create", "-f", "-"], POD);
    sb.kubectl_in_ok(
        &["create", "-f", "-"],
        &POD.replace("name: web", "name: db")
            .replace("app: web", "app: db"),
    );
    let by_label = sb.kubectl_ok(&["get", "pods", "-l", "app=db", "-o", "name"]);
    assert_eq!(by_label.trim(), "pod/db");
    let by_set = sb.kubectl_ok(&["get", "pods", "-l", "app in (web,db),tier", "-o", "name"]);
    assert_eq!(by_set.lines().count(), 2, "{by_set}");
    let not = sb.kubectl_ok(&["get", "pods", "-l", "app!=web", "-o", "name"]);
    assert_eq!(not.trim(), "pod/db");
    let by_field = sb.kubectl_ok(&[
        "get",
        "pods",
        "--field-selector",
        "metadata.name=web",
        "-o",
        "name",
    ]);
    assert_eq!(by_field.trim(), "pod/web");
    let phase = sb.kubectl_ok(&[
        "get",
        "pods",
        "--field-selector",
        "status.phase!=Failed,metadata.namespace=default",
        "-o",
        "name",
    ]);
    assert_eq!(phase.lines().count(), 2, "{phase}");
    let none = sb.kubectl_ok(&[
        "get",
        "pods",
        "--field-selector",
        "status.phase=Failed",
        "-o",
        "name",
    ]);
    assert_eq!(none.trim(), "", "{none}");
    let bad_field = sb.kubectl(&["get", "pods", "--field-selector", "spec.color=red"]);
    assert!(
        err(&bad_field).contains("field label not supported"),
        "{}",
        err(&bad_field)
    );
    let bad = sb.kubectl(&["get", "pods", "-l", "app in (web"]);
    assert!(!bad.status.success());
}

#[test]
fn patch_with_all_three_types_and_replace() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["create", "-f", "-"], DEPLOY);
    let p = sb.kubectl_ok(&[
        "patch",
        "deployment",
        "api",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"team":"infra"}}}"#,
    ]);
    assert!(p.contains("deployment.apps/api patched"), "{p}");
    sb.kubectl_ok(&[
        "patch",
        "deployment",
        "api",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
    ]);
    // Strategic merge: env merged by name, existing entries kept.
    sb.kubectl_ok(&[
        "patch", "deployment", "api", "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"api","env":[{"name":"B","value":"2"}]}]}}}}"#,
    ]);
    let d: serde_json::Value =
        serde_json::from_str(&sb.kubectl_ok(&["get", "deploy", "api", "-o", "json"]))
            .expect("json");
    assert_eq!(d["metadata"]["labels"]["team"], "infra");
    assert_eq!(d["spec"]["replicas"], 3);
    let env: Vec<&str> = d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(env.contains(&"A") && env.contains(&"B"), "{env:?}");
    assert!(
        d["metadata"]["generation"].as_i64().unwrap_or(0) >= 3,
        "{}",
        d["metadata"]
    );
    let replaced = DEPLOY.replace("replicas: 2", "replicas: 5");
    let r = sb.kubectl_in_ok(&["replace", "-f", "-"], &replaced);
    assert!(r.contains("deployment.apps/api replaced"), "{r}");
    assert_eq!(
        sb.kubectl_ok(&["get", "deploy", "api", "-o", "jsonpath={.spec.replicas}"]),
        "5"
    );
    let s = sb.kubectl_ok(&["scale", "deployment", "api", "--replicas=1"]);
    assert!(s.contains("deployment.apps/api scaled"), "{s}");
    assert_eq!(
        sb.kubectl_ok(&["get", "deploy", "api", "-o", "jsonpath={.spec.replicas}"]),
        "1"
    );
}

#[test]
fn apply_client_side_then_server_side() {
    let sb = TestSandbox::start();
    let first = sb.kubectl_in_ok(&["apply", "-f", "-"], DEPLOY);
    assert!(first.contains("deployment.apps/api created"), "{first}");
    let same = sb.kubectl_in_ok(&["apply", "-f", "-"], DEPLOY);
    assert!(same.contains("deployment.apps/api unchanged"), "{same}");
    let changed = sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &DEPLOY.replace("replicas: 2", "replicas: 4"),
    );
    assert!(
        changed.contains("deployment.apps/api configured"),
        "{changed}"
    );
    let ssa = sb.kubectl_in_ok(
        &["apply", "--server-side", "-f", "-"],
        &DEPLOY.replace("name: api\n", "name: api2\n"),
    );
    assert!(
        ssa.contains("deployment.apps/api2 serverside-applied"),
        "{ssa}"
    );
    let ssa2 = sb.kubectl_in_ok(
        &["apply", "--server-side", "-f", "-"],
        &DEPLOY
            .replace("name: api\n", "name: api2\n")
            .replace("replicas: 2", "replicas: 6"),
    );
    assert!(ssa2.contains("serverside-applied"), "{ssa2}");
    assert_eq!(
        sb.kubectl_ok(&["get", "deploy", "api2", "-o", "jsonpath={.spec.replicas}"]),
        "6"
    );
}

#[test]
fn delete_with_each_cascade_mode() {
    let sb = TestSandbox::start();
    let owner = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}"#;
    sb.kubectl_in_ok(&["create", "-f", "-"], owner);
    let uid = sb.kubectl_ok(&["get", "cm", "owner", "-o", "jsonpath={.metadata.uid}"]);
    let child = |name: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"{uid}"}}]}}}}"#
        )
    };
    sb.kubectl_in_ok(&["create", "-f", "-"], &child("kid"));
    let o = sb.kubectl_ok(&["delete", "cm", "owner", "--cascade=orphan"]);
    assert!(o.contains("configmap \"owner\" deleted"), "{o}");
    let kid: serde_json::Value =
        serde_json::from_str(&sb.kubectl_ok(&["get", "cm", "kid", "-o", "json"])).expect("json");
    assert!(
        kid["metadata"].get("ownerReferences").is_none(),
        "orphaned: {kid}"
    );

    for mode in ["background", "foreground"] {
        sb.kubectl_in_ok(&["create", "-f", "-"], owner);
        let uid2 = sb.kubectl_ok(&["get", "cm", "owner", "-o", "jsonpath={.metadata.uid}"]);
        let c = child(&format!("kid-{mode}")).replace(&uid, &uid2);
        sb.kubectl_in_ok(&["create", "-f", "-"], &c);
        let o = sb.kubectl_ok(&["delete", "cm", "owner", &format!("--cascade={mode}")]);
        assert!(o.contains("configmap \"owner\" deleted"), "{o}");
        let gone = sb.kubectl(&["get", "cm", &format!("kid-{mode}")]);
        assert!(
            err(&gone).contains("not found"),
            "{mode}: dependent survived: {}",
            out(&gone)
        );
    }
}

#[test]
fn watch_sees_adds_modifications_and_deletes() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["create", "-f", "-"], POD);
    let mut child = std::process::Command::new("kubectl")
        .args(["get", "pods", "-w", "--output-watch-events"])
        .env("KUBECONFIG", &sb.kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl -w starts");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    sb.kubectl_in_ok(
        &["create", "-f", "-"],
        &POD.replace("name: web", "name: late"),
    );
    sb.kubectl_ok(&["label", "pod", "late", "x=y"]);
    sb.kubectl_ok(&["delete", "pod", "late", "--wait=false"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let _ = child.kill();
    let o = child.wait_with_output().expect("output");
    let text = out(&o);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ADDED") && l.contains("web")),
        "{text}\n{}",
        err(&o)
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("ADDED") && l.contains("late")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("MODIFIED") && l.contains("late")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("DELETED") && l.contains("late")),
        "{text}"
    );
}
