//! Conformance, part two: the real `kubectl` driving workloads that the
//! sandbox's simulated controllers and kubelet run — scale, rollout, logs,
//! wait, events, describe and the `create` generators. Each test asserts
//! what kubectl printed.

mod common;

use std::time::{Duration, Instant};

use common::{TestSandbox, err, eventually_blocking as eventually, out};

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
    metadata:
      labels: {app: api}
      # The image is a name only: the sandbox plays its container.
      annotations: {sandbox.agentdeck.dev/simulate: "true"}
    spec:
      containers:
        - name: api
          image: ghcr.io/acme/api:1.0
"#;

#[test]
fn scale_and_rollout_status_follow_the_deployment_controller() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], DEPLOY);
    let status = sb.kubectl_ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    assert!(
        status.contains("deployment \"api\" successfully rolled out"),
        "{status}"
    );
    let table = sb.kubectl_ok(&["get", "deployment", "api"]);
    let header = table.lines().next().unwrap_or_default();
    for col in ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"] {
        assert!(header.contains(col), "{table}");
    }
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(4).collect::<Vec<_>>() == ["api", "2/2", "2", "2"]),
        "{table}"
    );
    let wide = sb.kubectl_ok(&["get", "deployment", "api", "-o", "wide"]);
    let header = wide.lines().next().unwrap_or_default();
    for col in ["CONTAINERS", "IMAGES", "SELECTOR"] {
        assert!(header.contains(col), "{wide}");
    }
    assert!(
        wide.contains("ghcr.io/acme/api:1.0") && wide.contains("app=api"),
        "{wide}"
    );

    let scaled = sb.kubectl_ok(&["scale", "deployment", "api", "--replicas=3"]);
    assert_eq!(scaled.trim(), "deployment.apps/api scaled");
    sb.kubectl_ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    let pods = sb.kubectl_ok(&["get", "pods", "-l", "app=api", "-o", "name"]);
    assert_eq!(pods.lines().count(), 3, "{pods}");
    // A precondition that does not hold refuses the scale.
    let refused = sb.kubectl(&[
        "scale",
        "deployment",
        "api",
        "--current-replicas=7",
        "--replicas=1",
    ]);
    assert!(!refused.status.success());
    assert!(
        err(&refused).contains("Expected replicas to be 7, was 3"),
        "{}",
        err(&refused)
    );

    // A new image is a new ReplicaSet, rolled out and recorded as revision 2.
    let set = sb.kubectl_ok(&["set", "image", "deployment/api", "api=ghcr.io/acme/api:2.0"]);
    assert!(set.contains("deployment.apps/api image updated"), "{set}");
    let status = sb.kubectl_ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    assert!(
        status.contains("deployment \"api\" successfully rolled out"),
        "{status}"
    );
    let rs = sb.kubectl_ok(&["get", "replicasets", "-l", "app=api"]);
    assert_eq!(rs.lines().count(), 3, "two ReplicaSets:\n{rs}");
    assert!(
        rs.lines().filter(|l| l.starts_with("api-")).any(|l| l
            .split_whitespace()
            .skip(1)
            .take(3)
            .collect::<Vec<_>>()
            == ["0", "0", "0"]),
        "old ReplicaSet scaled to zero:\n{rs}"
    );
    let history = sb.kubectl_ok(&["rollout", "history", "deployment/api"]);
    assert!(
        history.contains("REVISION") && history.lines().any(|l| l.starts_with('2')),
        "{history}"
    );
    let undo = sb.kubectl_ok(&["rollout", "undo", "deployment/api"]);
    assert!(undo.contains("deployment.apps/api rolled back"), "{undo}");
    sb.kubectl_ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    assert_eq!(
        sb.kubectl_ok(&[
            "get",
            "deploy",
            "api",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}"
        ]),
        "ghcr.io/acme/api:1.0"
    );
}

#[test]
fn logs_with_container_tail_previous_and_follow() {
    let sb = TestSandbox::start();
    // `app` prints three lines and fails, so the kubelet restarts it;
    // `side` prints once and stays up.
    let pod = r#"
apiVersion: v1
kind: Pod
metadata:
  name: chatty
  annotations: {sandbox.agentdeck.dev/run-shell: "true"}
spec:
  containers:
    - name: app
      image: busybox
      command: [sh, -c, 'echo one; echo two; echo "three $$"; sleep 1; exit 3']
    - name: side
      image: busybox
      command: [sh, -c, 'echo side says hi; sleep 300']
"#;
    sb.kubectl_in_ok(&["create", "-f", "-"], pod);
    let restarts = eventually("a restart of app", || {
        let n = sb.kubectl_ok(&[
            "get",
            "pod",
            "chatty",
            "-o",
            "jsonpath={.status.containerStatuses[?(@.name==\"app\")].restartCount}",
        ]);
        (n.trim().parse::<u32>().unwrap_or(0) >= 1).then_some(n)
    });
    assert!(!restarts.is_empty());
    // Each restart repeats the kubelet's events: they are counted on the
    // first one, as client-go's correlator does.
    let started = eventually("an aggregated Started event", || {
        let e = sb.kubectl_ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=chatty,reason=Started",
            "-o",
            "jsonpath={range .items[*]}{.message}={.count}{\"\\n\"}{end}",
        ]);
        e.lines()
            .any(|l| {
                l.strip_prefix("Started container: app=")
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n >= 2)
            })
            .then_some(e)
    });
    assert_eq!(
        started
            .lines()
            .filter(|l| l.starts_with("Started container: app="))
            .count(),
        1,
        "{started}"
    );
    let described = sb.kubectl_ok(&["describe", "pod", "chatty"]);
    assert!(
        described.lines().any(|l| l.contains("Started")
            && l.contains("(x")
            && l.contains("Started container: app")),
        "{described}"
    );
    // Without -c, a pod with two containers is ambiguous: kubectl picks the
    // default container and says so on stderr.
    let side = sb.kubectl_ok(&["logs", "chatty", "-c", "side"]);
    assert_eq!(side, "side says hi\n");
    let current = eventually("the restarted app's output", || {
        let o = sb.kubectl(&["logs", "chatty", "-c", "app"]);
        (o.status.success() && out(&o).lines().count() == 3).then(|| out(&o))
    });
    let prev = sb.kubectl_ok(&["logs", "chatty", "-c", "app", "--previous"]);
    assert!(prev.starts_with("one\ntwo\nthree "), "{prev}");
    assert_eq!(prev.lines().count(), 3, "{prev}");
    let tail = sb.kubectl_ok(&["logs", "chatty", "-c", "app", "--previous", "--tail=1"]);
    assert!(
        tail.starts_with("three ") && tail.lines().count() == 1,
        "{tail}"
    );
    assert!(current.starts_with("one\n"), "{current}");
    let limited = sb.kubectl_ok(&["logs", "chatty", "-c", "side", "--limit-bytes=4"]);
    assert_eq!(limited, "side");
    let stamped = sb.kubectl_ok(&["logs", "chatty", "-c", "side", "--timestamps"]);
    let (ts, line) = stamped.trim_end().split_once(' ').expect("timestamp");
    assert!(
        ts.contains('T') && ts.ends_with('Z') && line == "side says hi",
        "{stamped}"
    );
    let unknown = sb.kubectl(&["logs", "chatty", "-c", "nope"]);
    assert!(
        err(&unknown).contains("container nope is not valid for pod chatty"),
        "{}",
        err(&unknown)
    );

    // -f streams lines as they are written and ends when the container does.
    let follow_pod = r#"
apiVersion: v1
kind: Pod
metadata:
  name: ticker
  annotations: {sandbox.agentdeck.dev/run-shell: "true"}
spec:
  restartPolicy: Never
  containers:
    - name: tick
      image: busybox
      command: [sh, -c, 'for i in 1 2 3; do echo tick $i; sleep 1; done']
"#;
    sb.kubectl_in_ok(&["create", "-f", "-"], follow_pod);
    sb.kubectl_ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Running",
        "pod/ticker",
        "--timeout=60s",
    ]);
    let started = Instant::now();
    let followed = sb.kubectl_ok(&["logs", "-f", "ticker"]);
    assert_eq!(followed, "tick 1\ntick 2\ntick 3\n");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "-f returned before the container finished: {followed}"
    );
}

#[test]
fn wait_for_conditions_jsonpath_and_deletion() {
    let sb = TestSandbox::start();
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers: [{name: pause, image: registry.k8s.io/pause:3.10}]
"#;
    sb.kubectl_in_ok(&["create", "-f", "-"], pod);
    let ready = sb.kubectl_ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"]);
    assert_eq!(ready.trim(), "pod/web condition met");
    let running = sb.kubectl_ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Running",
        "pod",
        "-l",
        "app=web",
        "--timeout=60s",
    ]);
    assert_eq!(running.trim(), "pod/web condition met");
    let never = sb.kubectl(&[
        "wait",
        "--for=condition=Ready=false",
        "pod/web",
        "--timeout=2s",
    ]);
    assert!(!never.status.success());
    assert!(
        err(&never).contains("timed out waiting for the condition on pods/web"),
        "{}",
        err(&never)
    );

    let job = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  template:
    metadata:
      annotations: {sandbox.agentdeck.dev/exit-after: "1"}
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox}]
"#;
    sb.kubectl_in_ok(&["create", "-f", "-"], job);
    let done = sb.kubectl_ok(&[
        "wait",
        "--for=condition=complete",
        "job/once",
        "--timeout=60s",
    ]);
    assert_eq!(done.trim(), "job.batch/once condition met");
    let jobs = sb.kubectl_ok(&["get", "jobs"]);
    assert!(
        jobs.lines().any(|l| l.starts_with("once")
            && (l.contains("1/1") && (l.contains("Complete") || !l.contains("Running")))),
        "{jobs}"
    );

    sb.kubectl_ok(&["delete", "pod", "web", "--wait=false"]);
    let gone = sb.kubectl(&["wait", "--for=delete", "pod/web", "--timeout=60s"]);
    // kubectl 1.27+ prints "condition met", or nothing when already gone.
    assert!(gone.status.success(), "{}", err(&gone));
    let missing = sb.kubectl(&["get", "pod", "web"]);
    assert!(err(&missing).contains("not found"), "{}", err(&missing));
}

#[test]
fn events_and_describe_show_what_the_controllers_and_kubelet_did() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], DEPLOY);
    sb.kubectl_ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    let pod = sb
        .kubectl_ok(&["get", "pods", "-l", "app=api", "-o", "name"])
        .lines()
        .next()
        .expect("a pod")
        .to_string();
    let pod_name = pod.trim_start_matches("pod/").to_string();

    let events = eventually("kubelet events", || {
        let e = sb.kubectl_ok(&["events"]);
        e.contains("Started").then_some(e)
    });
    let header = events.lines().next().unwrap_or_default();
    for col in ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"] {
        assert!(header.contains(col), "{events}");
    }
    for reason in [
        "ScalingReplicaSet",
        "SuccessfulCreate",
        "Scheduled",
        "Pulled",
        "Created",
        "Started",
    ] {
        assert!(
            events.lines().any(|l| l.contains(reason)),
            "{reason} missing:\n{events}"
        );
    }
    assert!(
        events.contains(&format!("Pod/{pod_name}")) && events.contains("Deployment/api"),
        "{events}"
    );
    let for_pod = sb.kubectl_ok(&["events", "--for", &pod]);
    assert!(
        for_pod.lines().skip(1).all(|l| l.contains(&pod_name)) && for_pod.contains("Scheduled"),
        "{for_pod}"
    );
    let get_events = sb.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=Scheduled,involvedObject.kind=Pod",
    ]);
    assert!(
        get_events.contains("Successfully assigned default/") && get_events.contains(&pod_name),
        "{get_events}"
    );
    let warnings = sb.kubectl_ok(&["events", "--types=Warning"]);
    assert!(!warnings.contains("Scheduled"), "{warnings}");

    let described = sb.kubectl_ok(&["describe", "pod", &pod_name]);
    for want in [
        format!("Name:             {pod_name}"),
        "Namespace:        default".to_string(),
        "Node:             sandbox-node-".to_string(),
        "Status:           Running".to_string(),
        "IP:               127.".to_string(),
        "Controlled By:  ReplicaSet/api-".to_string(),
        "Image:          ghcr.io/acme/api:1.0".to_string(),
        "State:          Running".to_string(),
        "Ready:          True".to_string(),
        "Conditions:".to_string(),
        "Events:".to_string(),
        "Successfully assigned default/".to_string(),
    ] {
        assert!(described.contains(&want), "{want:?} missing:\n{described}");
    }
    let described = sb.kubectl_ok(&["describe", "deployment", "api"]);
    for want in [
        "Name:                   api",
        "Replicas:               2 desired | 2 updated | 2 total | 2 available | 0 unavailable",
        "StrategyType:           RollingUpdate",
        "NewReplicaSet:",
        "Scaled up replica set api-",
    ] {
        assert!(described.contains(want), "{want:?} missing:\n{described}");
    }
    sb.kubectl_ok(&["delete", "pod", &pod_name, "--wait=false"]);
    let killing = eventually("the kubelet's Killing event", || {
        let e = sb.kubectl_ok(&["events", "--for", &pod]);
        e.contains("Killing").then_some(e)
    });
    assert!(killing.contains("Stopping container api"), "{killing}");
    let node = sb.kubectl_ok(&["describe", "node", "sandbox-node-0"]);
    assert!(
        node.contains("Name:               sandbox-node-0") && node.contains("Ready"),
        "{node}"
    );
}

#[test]
fn create_generators_make_the_objects_a_cluster_would() {
    let sb = TestSandbox::start();
    let ns = sb.kubectl_ok(&["create", "namespace", "tools"]);
    assert_eq!(ns.trim(), "namespace/tools created");
    let cm = sb.kubectl_ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "tools",
        "--from-literal=mode=fast",
        "--from-literal=level=3",
    ]);
    assert_eq!(cm.trim(), "configmap/settings created");
    assert_eq!(
        sb.kubectl_ok(&[
            "get",
            "cm",
            "settings",
            "-n",
            "tools",
            "-o",
            "jsonpath={.data.mode}"
        ]),
        "fast"
    );
    let secret = sb.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "token",
        "-n",
        "tools",
        "--from-literal=value=s3cr3t",
    ]);
    assert_eq!(secret.trim(), "secret/token created");
    let secrets = sb.kubectl_ok(&["get", "secrets", "-n", "tools"]);
    assert!(
        secrets
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()[..3] == ["token", "Opaque", "1"]),
        "{secrets}"
    );
    assert_eq!(
        sb.kubectl_ok(&[
            "get",
            "secret",
            "token",
            "-n",
            "tools",
            "-o",
            "jsonpath={.data.value}"
        ]),
        "czNjcjN0"
    );
    let sa = sb.kubectl_ok(&["create", "serviceaccount", "runner", "-n", "tools"]);
    assert_eq!(sa.trim(), "serviceaccount/runner created");
    let deploy = sb.kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "-n",
        "tools",
        "--image=nginx:1.27",
        "--replicas=2",
        "--port=80",
    ]);
    assert_eq!(deploy.trim(), "deployment.apps/web created");
    let svc = sb.kubectl_ok(&[
        "expose",
        "deployment",
        "web",
        "-n",
        "tools",
        "--port=8080",
        "--target-port=80",
    ]);
    assert_eq!(svc.trim(), "service/web exposed");
    let services = sb.kubectl_ok(&["get", "svc", "web", "-n", "tools", "-o", "wide"]);
    let header = services.lines().next().unwrap_or_default();
    for col in [
        "NAME",
        "TYPE",
        "CLUSTER-IP",
        "EXTERNAL-IP",
        "PORT(S)",
        "SELECTOR",
    ] {
        assert!(header.contains(col), "{services}");
    }
    assert!(
        services.contains("ClusterIP")
            && services.contains("8080/TCP")
            && services.contains("app=web"),
        "{services}"
    );
    let run = sb.kubectl_ok(&[
        "run",
        "probe",
        "-n",
        "tools",
        "--image=busybox",
        "--restart=Never",
        "--labels=role=probe",
    ]);
    assert_eq!(run.trim(), "pod/probe created");
    let job = sb.kubectl_ok(&["create", "job", "once", "-n", "tools", "--image=busybox"]);
    assert_eq!(job.trim(), "job.batch/once created");
    let role = sb.kubectl_ok(&[
        "create",
        "role",
        "reader",
        "-n",
        "tools",
        "--verb=get,list,watch",
        "--resource=pods",
    ]);
    assert_eq!(role.trim(), "role.rbac.authorization.k8s.io/reader created");
    let binding = sb.kubectl_ok(&[
        "create",
        "rolebinding",
        "reader",
        "-n",
        "tools",
        "--role=reader",
        "--serviceaccount=tools:runner",
    ]);
    assert_eq!(
        binding.trim(),
        "rolebinding.rbac.authorization.k8s.io/reader created"
    );
    let pdb = sb.kubectl_ok(&[
        "create",
        "poddisruptionbudget",
        "web",
        "-n",
        "tools",
        "--selector=app=web",
        "--min-available=1",
    ]);
    assert_eq!(pdb.trim(), "poddisruptionbudget.policy/web created");

    // Server-side dry run validates and answers without storing anything.
    let dry = sb.kubectl_ok(&[
        "create",
        "configmap",
        "ghost",
        "-n",
        "tools",
        "--from-literal=a=b",
        "--dry-run=server",
    ]);
    assert_eq!(dry.trim(), "configmap/ghost created (server dry run)");
    let ghost = sb.kubectl(&["get", "cm", "ghost", "-n", "tools"]);
    assert!(err(&ghost).contains("not found"), "{}", err(&ghost));

    let all = sb.kubectl_ok(&["get", "all", "-n", "tools"]);
    for want in [
        "pod/probe",
        "service/web",
        "deployment.apps/web",
        "job.batch/once",
    ] {
        assert!(all.contains(want), "{want} missing from get all:\n{all}");
    }
    let in_ns = sb.kubectl_ok(&[
        "get",
        "namespaces",
        "tools",
        "-o",
        "jsonpath={.status.phase}",
    ]);
    assert_eq!(in_ns, "Active");
    let deleted = sb.kubectl_ok(&["delete", "namespace", "tools", "--timeout=60s"]);
    assert_eq!(deleted.trim(), "namespace \"tools\" deleted");
    let cms = sb.kubectl(&["get", "cm", "settings", "-n", "tools"]);
    assert!(err(&cms).contains("not found"), "{}", err(&cms));
}

#[test]
fn drain_evicts_only_what_the_disruption_budget_allows() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], DEPLOY);
    sb.kubectl_ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    let pdb = sb.kubectl_ok(&[
        "create",
        "pdb",
        "api",
        "--selector=app=api",
        "--min-available=2",
    ]);
    assert_eq!(pdb.trim(), "poddisruptionbudget.policy/api created");
    let budgets = eventually("the budget's status", || {
        let t = sb.kubectl_ok(&["get", "pdb", "api"]);
        t.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()[..4] == ["api", "2", "N/A", "0"])
            .then_some(t)
    });
    assert!(budgets.contains("ALLOWED DISRUPTIONS"), "{budgets}");
    let node = sb.kubectl_ok(&[
        "get",
        "pods",
        "-l",
        "app=api",
        "-o",
        "jsonpath={.items[0].spec.nodeName}",
    ]);
    assert!(node.starts_with("sandbox-node-"), "{node}");
    let blocked = sb.kubectl(&["drain", &node, "--timeout=3s"]);
    assert!(!blocked.status.success(), "{}", out(&blocked));
    assert!(
        err(&blocked).contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{}",
        err(&blocked)
    );
    let nodes = sb.kubectl_ok(&["get", "node", &node]);
    assert!(nodes.contains("Ready,SchedulingDisabled"), "{nodes}");

    sb.kubectl_ok(&[
        "patch",
        "pdb",
        "api",
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":1}}"#,
    ]);
    eventually("a disruption to be allowed", || {
        let n = sb.kubectl_ok(&[
            "get",
            "pdb",
            "api",
            "-o",
            "jsonpath={.status.disruptionsAllowed}",
        ]);
        (n == "1").then_some(())
    });
    let drained = sb.kubectl_ok(&["drain", &node, "--timeout=60s"]);
    assert!(
        drained.contains("evicted") && drained.contains(&format!("node/{node} drained")),
        "{drained}"
    );
    // The Deployment replaces the evicted pod on another, schedulable node.
    sb.kubectl_ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    let nodes_now = sb.kubectl_ok(&[
        "get",
        "pods",
        "-l",
        "app=api",
        "-o",
        "jsonpath={.items[*].spec.nodeName}",
    ]);
    assert!(!nodes_now.contains(&node), "{nodes_now}");
    let un = sb.kubectl_ok(&["uncordon", &node]);
    assert_eq!(un.trim(), format!("node/{node} uncordoned"));
}

#[test]
fn debug_adds_an_ephemeral_container_through_its_subresource() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&["run", "web", "--image=registry.k8s.io/pause:3.10"]);
    sb.kubectl_ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"]);
    let o = sb.kubectl(&[
        "debug",
        "web",
        "--image=busybox",
        "--target=web",
        "--container=probe",
        "--profile=general",
    ]);
    assert!(o.status.success(), "{}\n{}", out(&o), err(&o));
    let said = format!("{}{}", out(&o), err(&o));
    assert!(
        said.contains("Targeting container \"web\"") && !said.contains("panic"),
        "{said}"
    );
    let eph = sb.kubectl_ok(&[
        "get",
        "pod",
        "web",
        "-o",
        "jsonpath={.spec.ephemeralContainers[0].name} {.spec.ephemeralContainers[0].image} {.spec.ephemeralContainers[0].targetContainerName}",
    ]);
    assert_eq!(eph, "probe busybox web");
    let state = eventually("the ephemeral container's status", || {
        let s = sb.kubectl_ok(&[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.status.ephemeralContainerStatuses[0].name}:{.status.ephemeralContainerStatuses[0].state.running.startedAt}",
        ]);
        s.starts_with("probe:2").then_some(s)
    });
    assert!(state.ends_with('Z'), "{state}");
    let described = sb.kubectl_ok(&["describe", "pod", "web"]);
    assert!(
        described.contains("Ephemeral Containers:") && described.contains("  probe:"),
        "{described}"
    );
    // Ephemeral containers can be added, never changed or removed.
    let changed = sb.kubectl(&[
        "patch",
        "pod",
        "web",
        "--subresource=ephemeralcontainers",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/ephemeralContainers/0/image","value":"alpine"}]"#,
    ]);
    assert!(!changed.status.success());
    assert!(
        err(&changed).contains("may not be removed or changed"),
        "{}",
        err(&changed)
    );
}

#[test]
fn explain_reads_built_in_and_custom_resource_schemas_from_openapi_v3() {
    let sb = TestSandbox::start();
    let image = sb.kubectl_ok(&["explain", "pods.spec.containers.image"]);
    assert!(
        image.contains("KIND:       Pod")
            && image.contains("FIELD: image <string>")
            && image.contains("Container image name"),
        "{image}"
    );
    let replicas = sb.kubectl_ok(&["explain", "deployment.spec.replicas"]);
    assert!(
        replicas.contains("GROUP:      apps") && replicas.contains("FIELD: replicas <integer>"),
        "{replicas}"
    );
    sb.kubectl_in_ok(&["apply", "-f", "-"], &out(&sb.agentdeck(&["crds"])));
    let pool = sb.kubectl_ok(&["explain", "agentpool.spec.minReplicas"]);
    assert!(
        pool.contains("GROUP:      agentdeck.dev") && pool.contains("FIELD: minReplicas <integer>"),
        "{pool}"
    );
    let task = sb.kubectl_ok(&["explain", "at", "--recursive"]);
    assert!(
        task.contains("KIND:       AgentTask") && task.contains("labels\t<map[string]string>"),
        "{task}"
    );
    let nope = sb.kubectl(&["explain", "pods.spec.nonsense"]);
    assert!(!nope.status.success());
    assert!(
        err(&nope).contains("field \"nonsense\" does not exist"),
        "{}",
        err(&nope)
    );
}

const TASK: &str = r#"
apiVersion: agentdeck.dev/v1alpha1
kind: AgentTask
metadata:
  name: plan-1
  labels: {team: infra}
spec:
  pool: platform
  command: [terraform, plan]
"#;

#[test]
fn our_custom_resources_print_their_columns_take_status_and_are_waited_on() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], &out(&sb.agentdeck(&["crds"])));
    let created = sb.kubectl_in_ok(&["create", "-f", "-"], TASK);
    assert_eq!(created.trim(), "agenttask.agentdeck.dev/plan-1 created");
    sb.kubectl_in_ok(
        &["create", "-f", "-"],
        &TASK
            .replace("plan-1", "apply-1")
            .replace("pool: platform", "pool: batch"),
    );
    let table = sb.kubectl_ok(&["get", "at"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "POOL", "PHASE", "AGENT", "ATTEMPTS", "AGE"],
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("plan-1") && l.contains("platform")),
        "{table}"
    );
    // Selectable fields and labels select custom resources too.
    let by_pool = sb.kubectl_ok(&[
        "get",
        "atasks",
        "--field-selector",
        "spec.pool=batch",
        "-o",
        "name",
    ]);
    assert_eq!(by_pool.trim(), "agenttask.agentdeck.dev/apply-1");
    let by_label = sb.kubectl_ok(&["get", "agenttasks", "-l", "team=infra", "-o", "name"]);
    assert_eq!(by_label.lines().count(), 2, "{by_label}");
    // The category lists them with everything else of ours.
    let category = sb.kubectl_ok(&["get", "agentdeck", "-o", "name"]);
    assert!(
        category.contains("agenttask.agentdeck.dev/plan-1"),
        "{category}"
    );

    // Status goes through its subresource only; a plain patch cannot set it.
    sb.kubectl_ok(&[
        "patch",
        "at",
        "plan-1",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Failed"}}"#,
    ]);
    assert_eq!(
        sb.kubectl_ok(&["get", "at", "plan-1", "-o", "jsonpath={.status.phase}"]),
        "",
        "status is dropped from writes to the main resource"
    );
    let patched = sb.kubectl_ok(&[
        "patch",
        "at",
        "plan-1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running","agent":"agent-0","attempts":1}}"#,
    ]);
    assert!(
        patched.contains("agenttask.agentdeck.dev/plan-1 patched"),
        "{patched}"
    );
    let waited = sb.kubectl_ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Running",
        "at/plan-1",
        "--timeout=30s",
    ]);
    assert_eq!(
        waited.trim(),
        "agenttask.agentdeck.dev/plan-1 condition met"
    );
    let row = sb.kubectl_ok(&["get", "at", "plan-1", "--no-headers"]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..5],
        ["plan-1", "platform", "Running", "agent-0", "1"],
        "{row}"
    );
    let bad = sb.kubectl(&[
        "patch",
        "at",
        "plan-1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Sleeping"}}"#,
    ]);
    assert!(!bad.status.success());
    assert!(
        err(&bad).contains("Unsupported value: \"Sleeping\""),
        "{}",
        err(&bad)
    );
    let deleted = sb.kubectl_ok(&["delete", "atask", "apply-1"]);
    assert_eq!(
        deleted.trim(),
        "agenttask.agentdeck.dev \"apply-1\" deleted"
    );
}

#[test]
fn auth_checks_tokens_and_default_service_accounts_work_as_on_a_cluster() {
    let sb = TestSandbox::start();
    assert_eq!(
        sb.kubectl_ok(&["auth", "can-i", "create", "pods"]).trim(),
        "yes"
    );
    assert_eq!(
        sb.kubectl_ok(&["auth", "can-i", "delete", "deployments", "--all-namespaces"])
            .trim(),
        "yes"
    );
    let who = sb.kubectl_ok(&["auth", "whoami"]);
    assert!(
        who.contains("Username    agentdeck-sandbox-admin") && who.contains("system:masters"),
        "{who}"
    );
    sb.kubectl_ok(&["create", "namespace", "team-a"]);
    let sa = eventually("the namespace's default service account", || {
        let o = sb.kubectl(&[
            "get",
            "serviceaccount",
            "default",
            "-n",
            "team-a",
            "-o",
            "name",
        ]);
        o.status.success().then(|| out(&o))
    });
    assert_eq!(sa.trim(), "serviceaccount/default");
    let token = sb.kubectl_ok(&[
        "create",
        "token",
        "default",
        "-n",
        "team-a",
        "--duration=10m",
    ]);
    let claims = token.trim().split('.').nth(1).expect("a JWT");
    let decoded = base64_url_decode(claims);
    let claims: serde_json::Value = serde_json::from_slice(&decoded).expect("claims json");
    assert_eq!(claims["sub"], "system:serviceaccount:team-a:default");
    let lifetime = claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0);
    assert_eq!(lifetime, 600, "{claims}");
    let missing = sb.kubectl(&["create", "token", "nobody", "-n", "team-a"]);
    assert!(
        err(&missing).contains("serviceaccounts \"nobody\" not found"),
        "{}",
        err(&missing)
    );
}

fn base64_url_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'-' | b'+' => 62,
            _ => 63,
        }
    };
    let mut out = Vec::new();
    for chunk in s.trim_end_matches('=').as_bytes().chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, c)| acc | (value(*c) << (18 - 6 * i)));
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

#[test]
fn logs_by_workload_and_label_restart_and_diff_against_the_live_object() {
    let sb = TestSandbox::start();
    let deploy = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: sh, labels: {app: sh}}
spec:
  replicas: 2
  selector: {matchLabels: {app: sh}}
  template:
    metadata:
      labels: {app: sh}
      annotations: {sandbox.agentdeck.dev/run-shell: "true"}
    spec:
      containers:
        - name: sh
          image: busybox
          command: [sh, -c, 'echo hello from $HOSTNAME; sleep 600']
"#;
    sb.kubectl_in_ok(&["apply", "-f", "-"], deploy);
    sb.kubectl_ok(&["rollout", "status", "deployment/sh", "--timeout=60s"]);
    let pods = sb.kubectl_ok(&["get", "pods", "-l", "app=sh", "-o", "name"]);
    let names: Vec<&str> = pods.lines().map(|l| l.trim_start_matches("pod/")).collect();
    assert_eq!(names.len(), 2, "{pods}");
    let by_label = eventually("both pods' output", || {
        let l = sb.kubectl_ok(&["logs", "-l", "app=sh", "--prefix"]);
        (l.lines().count() == 2).then_some(l)
    });
    for name in &names {
        assert!(
            by_label.contains(&format!("[pod/{name}/sh] hello from {name}")),
            "{by_label}"
        );
    }
    let one = sb.kubectl_ok(&["logs", "deployment/sh"]);
    assert!(
        names.iter().any(|n| one == format!("hello from {n}\n")),
        "{one}"
    );

    let restarted = sb.kubectl_ok(&["rollout", "restart", "deployment/sh"]);
    assert_eq!(restarted.trim(), "deployment.apps/sh restarted");
    sb.kubectl_ok(&["rollout", "status", "deployment/sh", "--timeout=60s"]);
    let after = eventually("the old pods to go", || {
        let p = sb.kubectl_ok(&["get", "pods", "-l", "app=sh", "-o", "name"]);
        (p.lines().count() == 2).then_some(p)
    });
    assert!(
        names.iter().all(|n| !after.contains(n)),
        "restart replaced every pod: {after}"
    );

    let same = sb.kubectl_in(&["diff", "-f", "-"], deploy);
    assert_eq!(same.status.code(), Some(0), "{}{}", out(&same), err(&same));
    let changed = sb.kubectl_in(
        &["diff", "-f", "-"],
        &deploy.replace("replicas: 2", "replicas: 5"),
    );
    assert_eq!(changed.status.code(), Some(1), "{}", err(&changed));
    assert!(
        out(&changed).contains("-  replicas: 2") && out(&changed).contains("+  replicas: 5"),
        "{}",
        out(&changed)
    );
    assert_eq!(
        sb.kubectl_ok(&["get", "deploy", "sh", "-o", "jsonpath={.spec.replicas}"]),
        "2",
        "diff changes nothing"
    );
}

#[test]
fn names_are_validated_by_kind_as_apimachinery_words_it() {
    let sb = TestSandbox::start();
    let ns = sb.kubectl(&["create", "namespace", "team.a"]);
    assert!(
        err(&ns).contains("The Namespace \"team.a\" is invalid: metadata.name: Invalid value: \"team.a\": a lowercase RFC 1123 label must consist of"),
        "{}",
        err(&ns)
    );
    let svc = sb.kubectl(&["create", "service", "clusterip", "1web", "--tcp=80:80"]);
    assert!(
        err(&svc).contains("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character"),
        "{}",
        err(&svc)
    );
    let cm = sb.kubectl(&["create", "configmap", "Bad_Name"]);
    assert!(
        err(&cm).contains("a lowercase RFC 1123 subdomain must consist of"),
        "{}",
        err(&cm)
    );
    let dotted = sb.kubectl_ok(&["create", "configmap", "app.settings"]);
    assert_eq!(dotted.trim(), "configmap/app.settings created");
}

/// The oldest and a middle kubectl the machine bundles, called directly
/// (the dispatcher would pick 1.33 from `/version`).
#[test]
fn older_bundled_kubectls_work_too() {
    let sb = TestSandbox::start();
    for version in ["1.27", "1.30"] {
        let bin = format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}");
        if !std::path::Path::new(&bin).exists() {
            println!("note: {bin} not installed; skipped");
            continue;
        }
        let run = |args: &[&str]| {
            let o = std::process::Command::new(&bin)
                .args(args)
                .env("KUBECONFIG", &sb.kubeconfig)
                .output()
                .expect("kubectl runs");
            assert!(
                o.status.success(),
                "kubectl {version} {args:?}: {}",
                err(&o)
            );
            out(&o)
        };
        let name = format!("web-{}", version.replace('.', "-"));
        let created = run(&[
            "create",
            "deployment",
            &name,
            "--image=registry.k8s.io/pause:3.10",
        ]);
        assert_eq!(created.trim(), format!("deployment.apps/{name} created"));
        let status = run(&[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=60s",
        ]);
        assert!(status.contains("successfully rolled out"), "{status}");
        let table = run(&["get", "deployment", &name]);
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(&name) && l.contains("1/1")),
            "{version}: {table}"
        );
        let cm = run(&["create", "configmap", &name, "--from-literal=a=b"]);
        assert_eq!(cm.trim(), format!("configmap/{name} created"));
        let labeled = run(&["label", "deployment", &name, "tier=web"]);
        assert_eq!(labeled.trim(), format!("deployment.apps/{name} labeled"));
        let events = run(&[
            "get",
            "events",
            "--field-selector",
            "reason=ScalingReplicaSet",
        ]);
        assert!(events.contains(&format!("deployment/{name}")), "{events}");
        let resources = run(&["api-resources"]);
        assert!(resources.contains("deployments"), "{resources}");
    }
}

#[test]
fn chunked_gets_forced_deletes_and_waiting_for_creation() {
    let sb = TestSandbox::start();
    // Secrets: nothing else writes them here (every namespace has its
    // kube-root-ca.crt ConfigMap, as in a cluster).
    for name in ["p1", "p2", "p3"] {
        sb.kubectl_ok(&["create", "secret", "generic", name, "--from-literal=n=1"]);
    }
    // One item per request: kubectl follows the continue tokens.
    let chunked = sb.kubectl_ok(&["get", "secrets", "--chunk-size=1", "-o", "name"]);
    assert_eq!(
        chunked.lines().collect::<Vec<_>>(),
        ["secret/p1", "secret/p2", "secret/p3"]
    );
    let table = sb.kubectl_ok(&["get", "secrets", "--chunk-size=2"]);
    assert_eq!(
        table.lines().filter(|l| l.starts_with("NAME")).count(),
        1,
        "one header across chunks:\n{table}"
    );
    assert_eq!(table.lines().count(), 4, "{table}");

    sb.kubectl_ok(&["run", "web", "--image=nginx"]);
    let forced = sb.kubectl(&["delete", "pod", "web", "--grace-period=0", "--force"]);
    assert!(forced.status.success(), "{}", err(&forced));
    assert!(
        out(&forced).contains("pod \"web\" force deleted"),
        "{}",
        out(&forced)
    );
    let gone = sb.kubectl(&["get", "pod", "web"]);
    assert!(err(&gone).contains("not found"), "{}", err(&gone));

    let waiter = std::process::Command::new("kubectl")
        .args(["wait", "--for=create", "configmap/later", "--timeout=60s"])
        .env("KUBECONFIG", &sb.kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl wait starts");
    std::thread::sleep(Duration::from_millis(500));
    sb.kubectl_ok(&["create", "configmap", "later"]);
    let waited = waiter.wait_with_output().expect("kubectl wait ends");
    assert!(waited.status.success(), "{}", err(&waited));
    assert_eq!(out(&waited).trim(), "configmap/later condition met");
}

#[test]
fn top_reads_simulated_usage_from_the_metrics_api() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(&["apply", "-f", "-"], DEPLOY);
    sb.kubectl_ok(&["rollout", "status", "deployment/api", "--timeout=60s"]);
    let pods = sb.kubectl_ok(&["top", "pods", "-l", "app=api"]);
    let header: Vec<&str> = pods
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "CPU(cores)", "MEMORY(bytes)"], "{pods}");
    let rows: Vec<Vec<&str>> = pods
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{pods}");
    assert!(
        rows.iter()
            .all(|r| r[0].starts_with("api-") && r[1] == "1m" && r[2] == "4Mi"),
        "{pods}"
    );
    let nodes = sb.kubectl_ok(&["top", "nodes"]);
    assert!(
        nodes.lines().next().unwrap_or_default().contains("CPU(%)")
            && nodes
                .lines()
                .filter(|l| l.starts_with("sandbox-node-"))
                .count()
                == 2,
        "{nodes}"
    );
    let missing = sb.kubectl(&["top", "pod", "nope"]);
    assert!(
        err(&missing).contains("podmetrics.metrics.k8s.io \"nope\" not found"),
        "{}",
        err(&missing)
    );
}
