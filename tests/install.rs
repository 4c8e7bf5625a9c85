//! The README's install, exactly as a user types it, on the sandbox:
//! `agentdeck crds | kubectl apply -f -`, then `agentdeck manifests --pools
//! config/ | kubectl apply -f -`. The controller runs as the rendered
//! Deployment's pods — real processes, their configuration file at
//! `/etc/agentdeck` through their mount namespace, the API found through
//! the kubelet's `KUBERNETES_*` service variables — never as a daemon the
//! test starts. Nothing here sets `KUBECONFIG` for the pods: how a pod
//! reaches the API is the kubelet's business (today a kubeconfig it hands
//! the pod, in-cluster configuration once the sandbox serves HTTPS).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use agentdeck::sandbox::kubelet::KubeletConfig;
use common::{TestSandbox, eventually_blocking as poll, out};
use serde_json::Value;

const SYSTEM: &str = "agentdeck-system";
const CONTROLLER: &str = "app.kubernetes.io/component=controller";

fn sandbox(mount_namespaces: bool) -> TestSandbox {
    // reqwest (the /metrics reads) needs the process's rustls provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    TestSandbox::start_with(KubeletConfig {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_agentdeck")),
        mount_namespaces,
        ..KubeletConfig::from_env()
    })
}

/// The two commands of the README's install.
fn install(sb: &TestSandbox) {
    let crds = out(&sb.agentdeck(&["crds"]));
    sb.kubectl_in_ok(&["apply", "-f", "-"], &crds);
    let manifests = sb.agentdeck(&["manifests", "--pools", "config/"]);
    assert!(manifests.status.success(), "{}", common::err(&manifests));
    let applied = sb.kubectl_in_ok(&["apply", "-f", "-"], &out(&manifests));
    assert!(
        applied.contains("deployment.apps/agentdeck-controller created"),
        "{applied}"
    );
}

/// A controller pod as the test watches it.
#[derive(Debug, Clone)]
struct ControllerPod {
    name: String,
    ip: String,
    ready: bool,
    restarts: i64,
    links: bool,
}

fn controller_pods(sb: &TestSandbox) -> Vec<ControllerPod> {
    let o = sb.kubectl(&["get", "pods", "-n", SYSTEM, "-l", CONTROLLER, "-o", "json"]);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| ControllerPod {
            name: p["metadata"]["name"].as_str().unwrap_or_default().into(),
            ip: p["status"]["podIP"].as_str().unwrap_or_default().into(),
            ready: p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True"),
            restarts: p["status"]["containerStatuses"][0]["restartCount"]
                .as_i64()
                .unwrap_or_default(),
            links: p["spec"]["enableServiceLinks"].as_bool() != Some(false),
        })
        .collect()
}

fn lease_holder(sb: &TestSandbox) -> Option<String> {
    let o = sb.kubectl(&[
        "get",
        "lease",
        "agentdeck-controller",
        "-n",
        SYSTEM,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    Some(out(&o).trim().to_owned()).filter(|h| !h.is_empty())
}

/// The pod (of `pods`) whose controller holds the Lease.
fn leader_of<'a>(holder: &str, pods: &'a [ControllerPod]) -> Option<&'a ControllerPod> {
    pods.iter()
        .find(|p| holder.starts_with(&format!("{}-", p.name)))
}

/// `agentdeck_leader` from a controller pod's `/metrics`, on its pod IP.
fn leader_gauge(sb: &TestSandbox, ip: &str) -> Option<u8> {
    let url = format!("http://{ip}:8080/metrics");
    let text = sb.rt.block_on(async {
        reqwest::Client::new()
            .get(&url)
            .timeout(std::time::Duration::from_secs(5))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()
    })?;
    text.lines()
        .find(|l| l.starts_with("agentdeck_leader "))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u8)
}

/// The process running `pod`'s container (its `HOSTNAME` is the pod's
/// name), its environment, and its view of `path`.
fn container_process(pod: &str, path: &str) -> Option<(BTreeMap<String, String>, Option<String>)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(raw) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let env: BTreeMap<String, String> = raw
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = String::from_utf8_lossy(kv);
                let (k, v) = kv.split_once('=')?;
                Some((k.to_owned(), v.to_owned()))
            })
            .collect();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if env.get("HOSTNAME").map(String::as_str) == Some(pod)
            && String::from_utf8_lossy(&cmdline).contains("--daemon")
        {
            let seen = std::fs::read_to_string(
                entry.path().join("root").join(path.trim_start_matches('/')),
            )
            .ok();
            return Some((env, seen));
        }
    }
    None
}

/// Creates the README's eight quickstart tasks and waits for each to
/// succeed once on a quickstart agent; returns their names.
fn run_quickstart_tasks(sb: &TestSandbox) -> Vec<String> {
    let created = sb.kubectl_ok(&["create", "-f", "config/tasks/quickstart.yaml", "-o", "name"]);
    let names: Vec<String> = created
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .map(str::to_owned)
        .collect();
    assert_eq!(names.len(), 8, "{created}");
    for name in &names {
        let status = poll(&format!("task {name} to finish"), || {
            let o = sb.kubectl(&["get", "at", name, "-o", "jsonpath={.status}"]);
            let s: Value = serde_json::from_slice(&o.stdout).ok()?;
            matches!(s["phase"].as_str(), Some("Succeeded" | "Failed")).then_some(s)
        });
        assert_eq!(status["phase"], "Succeeded", "{name}: {status}");
        assert_eq!(status["attempts"], 1, "{name} ran once: {status}");
        assert!(
            status["agent"]
                .as_str()
                .is_some_and(|a| a.starts_with("iac-agent-quickstart-")),
            "{name}: {status}"
        );
    }
    names
}

#[test]
fn the_readme_install_runs_the_controller_in_pods_that_scale_pools_run_tasks_and_fail_over() {
    let sb = sandbox(true);
    install(&sb);

    // Two replicas, both running (no crash loop: the config file is at its
    // path, service variables are no configuration), exactly one leading.
    let (pods, leader) = poll("two Ready controller pods and a Lease holder", || {
        let pods = controller_pods(&sb);
        let holder = lease_holder(&sb)?;
        let leader = leader_of(&holder, &pods)?.clone();
        (pods.len() == 2 && pods.iter().all(|p| p.ready)).then_some((pods, leader))
    });
    assert!(pods.iter().all(|p| p.restarts == 0), "{pods:?}");
    let standby = pods
        .iter()
        .find(|p| p.name != leader.name)
        .expect("a second replica")
        .clone();
    poll("the leader and the standby to say so in /metrics", || {
        (leader_gauge(&sb, &leader.ip)? == 1 && leader_gauge(&sb, &standby.ip)? == 0).then_some(())
    });

    // The controller reads its configuration at /etc/agentdeck and finds
    // the API through the kubelet's KUBERNETES_* variables.
    let config = sb.kubectl_ok(&[
        "get",
        "configmap",
        "agentdeck-controller-config",
        "-n",
        SYSTEM,
        "-o",
        "jsonpath={.data.agentdeck\\.yaml}",
    ]);
    let (env, seen) = poll("the leader's process", || {
        container_process(&leader.name, "/etc/agentdeck/agentdeck.yaml")
    });
    assert_eq!(seen.as_deref(), Some(config.as_str()), "its /etc/agentdeck");
    let svc = sb.kubectl_ok(&[
        "get",
        "svc",
        "kubernetes",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.clusterIP} {.spec.ports[0].port}",
    ]);
    assert_eq!(
        format!(
            "{} {}",
            env.get("KUBERNETES_SERVICE_HOST")
                .map_or("", String::as_str),
            env.get("KUBERNETES_SERVICE_PORT")
                .map_or("", String::as_str)
        ),
        svc.trim()
    );
    assert!(
        !env.keys().any(|k| k.starts_with("AGENTDECK_CONTROLLER_")),
        "the rendered pods turn service links off: {env:?}"
    );

    // Pools get their Deployments; tasks run on real agents.
    for pool in ["quickstart", "platform", "sandbox-envs"] {
        poll(&format!("the Deployment of pool {pool}"), || {
            let o = sb.kubectl(&["get", "deploy", &format!("iac-agent-{pool}"), "-o", "name"]);
            o.status.success().then_some(())
        });
    }
    run_quickstart_tasks(&sb);

    // Job mode: a task of the job pool gets its Job from the installed
    // controller, which may create Jobs but no pod.
    let task = sb.kubectl_in_ok(
        &["create", "-f", "-", "-o", "name"],
        r#"{"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"generateName": "batch-"},
            "spec": {"pool": "batch", "command": ["sh", "-c", "echo hi"]}}"#,
    );
    let task = task
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    poll(&format!("the Job of task {task}"), || {
        let o = sb.kubectl(&[
            "get",
            "jobs",
            "-l",
            "agentdeck.dev/pool=batch",
            "-o",
            "name",
        ]);
        (!out(&o).trim().is_empty()).then_some(())
    });
    // The job pool's token Secret does not exist. With no Secret read, the
    // controller still says so: from the kubelet's FailedMount Events about
    // the task's pod waiting to start.
    let degraded = poll("pool batch Degraded, naming its missing Secret", || {
        let o = sb.kubectl(&[
            "get",
            "ap",
            "batch",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Degraded\")].message}",
        ]);
        let message = out(&o);
        message.contains("batch-agent-token").then_some(message)
    });
    assert!(degraded.contains("does not exist"), "{degraded}");

    // Debug pods past their expiry are deleted by the installed controller.
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "expired-debug", "namespace": "default",
                         "labels": {"agentdeck.dev/debug-pod": "true"},
                         "annotations": {"agentdeck.dev/expires-at": "2020-01-01T00:00:00Z"}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "600"]}]}}"#,
    );
    poll("the expired debug pod deleted by the controller", || {
        let o = sb.kubectl(&["get", "pod", "expired-debug", "-o", "name"]);
        (!o.status.success()).then_some(())
    });

    // The leader's pod is deleted: the standby takes over, and the
    // ReplicaSet's replacement pod joins as the new standby.
    sb.kubectl_ok(&["delete", "pod", &leader.name, "-n", SYSTEM, "--wait=false"]);
    let (pods, successor) = poll("a new leader and a replacement pod", || {
        let pods = controller_pods(&sb);
        let successor = leader_of(&lease_holder(&sb)?, &pods)?.clone();
        let replaced = pods.len() == 2 && pods.iter().all(|p| p.ready && p.name != leader.name);
        (replaced && successor.name != leader.name).then_some((pods, successor))
    });
    assert!(
        pods.iter().any(|p| p.name != standby.name),
        "a replacement pod: {pods:?}"
    );

    // Pods started with service links (as a Deployment edited without
    // `enableServiceLinks: false` would be) get AGENTDECK_CONTROLLER_*
    // variables and still run: a rollout replaces both replicas.
    sb.kubectl_ok(&[
        "patch",
        "deploy",
        "agentdeck-controller",
        "-n",
        SYSTEM,
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"enableServiceLinks":true}}}}"#,
    ]);
    let (pods, leader) = poll("the rolled-out pods, one of them leading", || {
        let pods = controller_pods(&sb);
        let leader = leader_of(&lease_holder(&sb)?, &pods)?.clone();
        let rolled = pods.len() == 2 && pods.iter().all(|p| p.ready && p.links);
        rolled.then_some((pods, leader))
    });
    assert!(
        pods.iter()
            .all(|p| p.name != successor.name && p.restarts == 0),
        "{pods:?}"
    );
    let (env, _) = poll("the new leader's process", || {
        container_process(&leader.name, "/etc/agentdeck/agentdeck.yaml")
    });
    let port = sb.kubectl_ok(&[
        "get",
        "svc",
        "agentdeck-controller",
        "-n",
        SYSTEM,
        "-o",
        "jsonpath={.spec.clusterIP}:{.spec.ports[0].port}",
    ]);
    assert_eq!(
        env.get("AGENTDECK_CONTROLLER_PORT").map(String::as_str),
        Some(format!("tcp://{}", port.trim()).as_str()),
        "{env:?}"
    );
    // The new leader reconciles: new work runs.
    run_quickstart_tasks(&sb);
}

#[test]
fn without_mount_namespaces_the_install_still_works_on_host_paths_and_says_so() {
    let sb = sandbox(false);
    install(&sb);
    poll("two Ready controller pods and a Lease holder", || {
        let pods = controller_pods(&sb);
        let holder = lease_holder(&sb)?;
        leader_of(&holder, &pods)?;
        (pods.len() == 2 && pods.iter().all(|p| p.ready && p.restarts == 0)).then_some(())
    });
    run_quickstart_tasks(&sb);
    let events = sb.kubectl_ok(&[
        "get",
        "events",
        "-n",
        SYSTEM,
        "--field-selector",
        "reason=MountsNotAtPaths",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("volumes are not at their mount paths"),
        "{events}"
    );
}

/// `kubectl auth can-i` as an operator runs it: with a token, or as the
/// admin impersonating a subject.
fn can_i(sb: &TestSandbox, token: Option<&str>, args: &[&str]) -> String {
    let mut all: Vec<&str> = Vec::new();
    if let Some(t) = token {
        all.extend(["--token", t]);
    }
    all.extend(["auth", "can-i"]);
    all.extend_from_slice(args);
    out(&sb.kubectl(&all)).trim().to_owned()
}

#[test]
fn the_installed_accounts_are_refused_secrets_other_namespaces_and_others_objects() {
    let sb = sandbox(true);
    install(&sb);
    sb.kubectl_ok(&["create", "namespace", "elsewhere"]);
    for ns in ["kube-system", "default"] {
        sb.kubectl_ok(&[
            "create",
            "secret",
            "generic",
            "planted",
            "-n",
            ns,
            "--from-literal=pw=hunter2-planted",
        ]);
    }
    let controller = sb
        .kubectl_ok(&["create", "token", "agentdeck-controller", "-n", SYSTEM])
        .trim()
        .to_owned();
    // The controller's token: what it needs where it works, and no more.
    for ns in ["kube-system", "default"] {
        let o = sb.kubectl(&[
            "--token",
            &controller,
            "get",
            "secret",
            "planted",
            "-n",
            ns,
            "-o",
            "jsonpath={.data.pw}",
        ]);
        assert!(!o.status.success(), "read a Secret in {ns}: {}", out(&o));
        let said = common::err(&o);
        assert!(
            said.contains(&format!(
                "secrets \"planted\" is forbidden: User \"system:serviceaccount:{SYSTEM}:agentdeck-controller\" \
                 cannot get resource \"secrets\" in API group \"\" in the namespace \"{ns}\""
            )),
            "{said}"
        );
    }
    let t = Some(controller.as_str());
    for (args, want) in [
        (&["create", "rolebindings", "-n", "default"][..], "yes"),
        (&["create", "rolebindings", "-n", "elsewhere"], "no"),
        (&["create", "roles", "-n", "kube-system"], "no"),
        (&["create", "clusterrolebindings"], "no"),
        (&["list", "secrets", "-n", "default"], "no"),
        (&["create", "pods", "-n", "default"], "no"),
        (&["delete", "pods", "-n", "default"], "yes"),
        (&["list", "pods", "-n", "elsewhere"], "no"),
        (&["create", "jobs.batch", "-n", "default"], "yes"),
        (&["create", "jobs.batch", "-n", "elsewhere"], "no"),
        (
            &["update", "leases.coordination.k8s.io", "-n", SYSTEM],
            "yes",
        ),
        (
            &["get", "leases.coordination.k8s.io", "-n", "kube-system"],
            "no",
        ),
        (
            &["update", "leases.coordination.k8s.io", "-n", "default"],
            "no",
        ),
    ] {
        assert_eq!(can_i(&sb, t, args), want, "controller: can-i {args:?}");
    }

    // Roles and bindings it writes cannot grant what it does not hold.
    for (args, what) in [
        (
            &[
                "create",
                "role",
                "grab",
                "-n",
                "default",
                "--verb=get",
                "--resource=secrets",
            ][..],
            "roles.rbac.authorization.k8s.io \"grab\" is forbidden",
        ),
        (
            &[
                "create",
                "rolebinding",
                "grab",
                "-n",
                "default",
                "--clusterrole=admin",
                "--serviceaccount=default:default",
            ],
            "rolebindings.rbac.authorization.k8s.io \"grab\" is forbidden",
        ),
    ] {
        let mut all = vec!["--token", controller.as_str()];
        all.extend_from_slice(args);
        let o = sb.kubectl(&all);
        assert!(!o.status.success(), "{args:?}: {}", out(&o));
        let said = common::err(&o);
        assert!(
            said.contains(what)
                && said.contains("is attempting to grant RBAC permissions not currently held"),
            "{said}"
        );
    }

    // The same answers for an operator asking as the account, and none for
    // an account that does not exist.
    let as_controller = format!("--as=system:serviceaccount:{SYSTEM}:agentdeck-controller");
    for (args, want) in [
        (
            vec![as_controller.as_str(), "get", "secrets", "-n", "default"],
            "no",
        ),
        (
            vec![as_controller.as_str(), "list", "pods", "-n", "default"],
            "yes",
        ),
        (
            vec!["--as=system:serviceaccount:nosuch:nosuch", "get", "pods"],
            "no",
        ),
        (
            vec![
                "--as=system:serviceaccount:nosuch:nosuch",
                "get",
                "pods",
                "-n",
                "default",
            ],
            "no",
        ),
    ] {
        assert_eq!(can_i(&sb, None, &args), want, "admin: can-i {args:?}");
    }

    // An agent's token: its own pool's tasks and pool, nothing of others.
    let agent = poll("the quickstart pool's service account", || {
        let o = sb.kubectl(&[
            "create",
            "token",
            "agentdeck-agent-quickstart",
            "-n",
            "default",
        ]);
        o.status.success().then(|| out(&o).trim().to_owned())
    });
    let t = Some(agent.as_str());
    for (args, want) in [
        (
            &["list", "agenttasks.agentdeck.dev", "-n", "default"][..],
            "yes",
        ),
        (
            &[
                "get",
                "agentpools.agentdeck.dev/quickstart",
                "-n",
                "default",
            ],
            "yes",
        ),
        (
            &["get", "agentpools.agentdeck.dev/platform", "-n", "default"],
            "no",
        ),
        (&["get", "secrets", "-n", "default"], "no"),
        (&["list", "configmaps", "-n", "default"], "no"),
        (
            &["list", "agenttasks.agentdeck.dev", "-n", "elsewhere"],
            "no",
        ),
        (&["create", "rolebindings", "-n", "default"], "no"),
        (&["get", "leases.coordination.k8s.io", "-n", SYSTEM], "no"),
        (&["create", "events", "-n", "default"], "no"),
    ] {
        assert_eq!(can_i(&sb, t, args), want, "agent: can-i {args:?}");
    }
}
