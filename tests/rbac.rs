//! The sandbox as a secured API server: HTTPS with its own CA, bearer
//! tokens, RBAC for service accounts. The rendered RBAC is tested rather
//! than trusted: the controller and its agents work with exactly what
//! `agentdeck manifests` and the controller grant them, and an agent is
//! refused everything else, with the apiserver's words.

mod common;

use std::sync::Once;

use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::controller;
use agentdeck::crd::{AgentPool, AgentTask, TaskPhase};
use agentdeck::install::{InstallOptions, controller_objects, crd_documents, to_yaml_stream};
use common::{TestSandbox, eventually, out};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod, Secret, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NS: &str = "agents";
const SYSTEM: &str = "agentdeck-system";

static EXE: Once = Once::new();

/// Agent pods run this build of agentdeck.
fn use_this_build() {
    EXE.call_once(|| {
        // SAFETY: set once, before any sandbox of this binary starts a
        // kubelet that reads it; no other thread writes the environment.
        unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A token for the service account `ns/name`, as TokenRequest issues it.
async fn token_for(admin: &Client, ns: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let request = TokenRequest::default();
    let answer: TokenRequest = eventually(&format!("a token for {ns}/{name}"), || {
        let (accounts, request) = (accounts.clone(), request.clone());
        async move {
            accounts
                .create_subresource("token", name, &PostParams::default(), &request)
                .await
                .ok()
        }
    })
    .await;
    answer.status.expect("status").token
}

fn pool_doc(name: &str) -> AgentPool {
    serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"image": "agentdeck:dev", "minReplicas": 1, "maxReplicas": 2,
                 "graceShutdownSeconds": 2,
                 "env": [{"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"}]}
    }))
    .expect("pool")
}

fn task_doc(name: &str, pool: &str) -> AgentTask {
    serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"pool": pool, "command": ["sh", "-c", "echo done"]}
    }))
    .expect("task")
}

fn create_namespace(sb: &TestSandbox, name: &str) {
    sb.kubectl_ok(&["create", "namespace", name]);
}

/// The status code and message of a refused call.
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_installed_controller_and_its_agents_work_with_only_the_rendered_rbac() {
    use_this_build();
    let sb = TestSandbox::start();
    // The README's install, minus the controller's Deployment: the daemon
    // runs here in-process, as its service account and nothing more.
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&crd_documents()).expect("crds"),
    );
    let mut config = Config {
        controller_namespace: SYSTEM.into(),
        namespaces: vec![NS.into()],
        resync_interval_seconds: 2,
        ..Config::default()
    };
    config.leader_election.enabled = true;
    let objects: Vec<Value> = controller_objects(&InstallOptions {
        namespace: SYSTEM.into(),
        image: "agentdeck:dev".into(),
        config: config.clone(),
        cluster_wide: false,
    })
    .expect("manifests")
    .into_iter()
    .filter(|o| o["kind"] != "Deployment")
    .collect();
    // The watched namespace is the operator's: it exists before the
    // controller's Role is applied into it.
    create_namespace(&sb, NS);
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&objects).expect("yaml"),
    );
    let admin = sb.client();
    sb.rt.block_on(async {
        let token = token_for(&admin, SYSTEM, "agentdeck-controller").await;
        let as_controller = {
            let _g = sb.rt.enter();
            sb.sandbox()
                .client_with_token(&token)
                .expect("controller client")
        };
        let cancel = CancellationToken::new();
        let handle = controller::start(
            Connection {
                client: as_controller,
                namespace: NS.into(),
                streams: None,
            },
            &config,
            cancel.clone(),
        );
        let pools: Api<AgentPool> = Api::namespaced(admin.clone(), NS);
        pools
            .create(&PostParams::default(), &pool_doc("alpha"))
            .await
            .expect("pool created");
        // The controller renders the pool's objects (its Role and binding
        // included) and the agents claim and run a task as their account.
        let deployments: Api<Deployment> = Api::namespaced(admin.clone(), NS);
        eventually("the pool's Deployment", || {
            let d = deployments.clone();
            async move {
                d.list(&ListParams::default())
                    .await
                    .ok()
                    .filter(|l| !l.items.is_empty())
            }
        })
        .await;
        let tasks: Api<AgentTask> = Api::namespaced(admin.clone(), NS);
        tasks
            .create(&PostParams::default(), &task_doc("first", "alpha"))
            .await
            .expect("task created");
        let done = common::wait_task(&tasks, "first", "Succeeded", |t| {
            t.status
                .as_ref()
                .is_some_and(|s| s.phase == TaskPhase::Succeeded)
        })
        .await;
        let agent = done
            .status
            .and_then(|s| s.agent)
            .expect("the task names its agent");
        assert!(agent.contains("alpha"), "{agent}");
        // The leader's Lease, written through the leader Role.
        let leases: Api<Lease> = Api::namespaced(admin.clone(), SYSTEM);
        eventually("the controller's Lease", || {
            let l = leases.clone();
            async move {
                l.list(&ListParams::default())
                    .await
                    .ok()
                    .filter(|l| !l.items.is_empty())
            }
        })
        .await;
        cancel.cancel();
        drop(handle);
    });
}

#[test]
fn an_agent_is_refused_what_its_role_does_not_grant() {
    use_this_build();
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&crd_documents()).expect("crds"),
    );
    create_namespace(&sb, NS);
    create_namespace(&sb, "elsewhere");
    let admin = sb.client();
    sb.rt.block_on(async {
        let pools: Api<AgentPool> = Api::namespaced(admin.clone(), NS);
        let mut created = Vec::new();
        for name in ["alpha", "beta"] {
            let pool = pools
                .create(&PostParams::default(), &pool_doc(name))
                .await
                .expect("pool created");
            common::install_agent_rbac(&admin, &pool).await;
            created.push(pool);
        }
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "beta-token"}, "stringData": {"token": "s3cret"}}))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("secret created");
        let tasks: Api<AgentTask> = Api::namespaced(admin.clone(), NS);
        tasks
            .create(&PostParams::default(), &task_doc("t1", "alpha"))
            .await
            .expect("task created");

        let account = agentdeck::plan::manifests::service_account_name(&created[0]);
        let token = token_for(&admin, NS, &account).await;
        let agent = {
            let _g = sb.rt.enter();
            sb.sandbox().client_with_token(&token).expect("agent client")
        };
        let user = format!("system:serviceaccount:{NS}:{account}");

        // What the agent does: allowed.
        let my_tasks: Api<AgentTask> = Api::namespaced(agent.clone(), NS);
        assert_eq!(my_tasks.list(&ListParams::default()).await.expect("tasks").items.len(), 1);
        let my_pools: Api<AgentPool> = Api::namespaced(agent.clone(), NS);
        my_pools.get("alpha").await.expect("its own pool");
        my_tasks
            .patch_status(
                "t1",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"message": "claimed"}})),
            )
            .await
            .expect("task status");
        let my_pods: Api<Pod> = Api::namespaced(agent.clone(), NS);
        my_pods.list(&ListParams::default()).await.expect("pods readable");

        // What it must not do: refused, as kube-apiserver words it.
        let in_ns = format!("in the namespace \"{NS}\"");
        let cases: Vec<(&str, Result<(), kube::Error>, String)> = vec![
            (
                "delete a Deployment",
                Api::<Deployment>::namespaced(agent.clone(), NS)
                    .delete("agentdeck-agent-alpha", &DeleteParams::default())
                    .await
                    .map(drop),
                format!("deployments.apps \"agentdeck-agent-alpha\" is forbidden: User \"{user}\" cannot delete resource \"deployments\" in API group \"apps\" {in_ns}"),
            ),
            (
                "list Secrets",
                Api::<Secret>::namespaced(agent.clone(), NS)
                    .list(&ListParams::default())
                    .await
                    .map(drop),
                format!("secrets is forbidden: User \"{user}\" cannot list resource \"secrets\" in API group \"\" {in_ns}"),
            ),
            (
                "read another pool's Secret",
                Api::<Secret>::namespaced(agent.clone(), NS)
                    .get("beta-token")
                    .await
                    .map(drop),
                format!("secrets \"beta-token\" is forbidden: User \"{user}\" cannot get resource \"secrets\" in API group \"\" {in_ns}"),
            ),
            (
                "change its pool's spec",
                my_pools
                    .patch(
                        "alpha",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"maxReplicas": 50}})),
                    )
                    .await
                    .map(drop),
                format!("agentpools.agentdeck.dev \"alpha\" is forbidden: User \"{user}\" cannot patch resource \"agentpools\" in API group \"agentdeck.dev\" {in_ns}"),
            ),
            (
                "read another pool",
                my_pools.get("beta").await.map(drop),
                format!("agentpools.agentdeck.dev \"beta\" is forbidden: User \"{user}\" cannot get resource \"agentpools\" in API group \"agentdeck.dev\" {in_ns}"),
            ),
            (
                "delete a task",
                my_tasks
                    .delete("t1", &DeleteParams::default())
                    .await
                    .map(drop),
                format!("agenttasks.agentdeck.dev \"t1\" is forbidden: User \"{user}\" cannot delete resource \"agenttasks\" in API group \"agentdeck.dev\" {in_ns}"),
            ),
            (
                "create a pod in another namespace",
                Api::<Pod>::namespaced(agent.clone(), "elsewhere")
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({"metadata": {"name": "x"},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
                        .expect("pod"),
                    )
                    .await
                    .map(drop),
                format!("pods is forbidden: User \"{user}\" cannot create resource \"pods\" in API group \"\" in the namespace \"elsewhere\""),
            ),
            (
                "change a pod",
                my_pods
                    .patch(
                        "anything",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
                    )
                    .await
                    .map(drop),
                format!("pods \"anything\" is forbidden: User \"{user}\" cannot patch resource \"pods\" in API group \"\" {in_ns}"),
            ),
            (
                "read a Lease",
                Api::<Lease>::namespaced(agent.clone(), NS)
                    .list(&ListParams::default())
                    .await
                    .map(drop),
                format!("leases.coordination.k8s.io is forbidden: User \"{user}\" cannot list resource \"leases\" in API group \"coordination.k8s.io\" {in_ns}"),
            ),
            (
                "emit an Event",
                Api::<Event>::namespaced(agent.clone(), NS)
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(json!({"metadata": {"name": "e"},
                            "involvedObject": {"kind": "Pod", "name": "x"}}))
                        .expect("event"),
                    )
                    .await
                    .map(drop),
                format!("events is forbidden: User \"{user}\" cannot create resource \"events\" in API group \"\" {in_ns}"),
            ),
            (
                "read tasks of another namespace",
                Api::<AgentTask>::namespaced(agent.clone(), "elsewhere")
                    .list(&ListParams::default())
                    .await
                    .map(drop),
                format!("agenttasks.agentdeck.dev is forbidden: User \"{user}\" cannot list resource \"agenttasks\" in API group \"agentdeck.dev\" in the namespace \"elsewhere\""),
            ),
            (
                "list namespaces",
                Api::<Namespace>::all(agent.clone())
                    .list(&ListParams::default())
                    .await
                    .map(drop),
                format!("namespaces is forbidden: User \"{user}\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"),
            ),
        ];
        for (what, result, message) in cases {
            assert_eq!(refusal(result), (403, message), "{what}");
        }

        // A token nobody issued, and one whose account is gone: 401.
        let forged = {
            let _g = sb.rt.enter();
            sb.sandbox().client_with_token("not-a-token").expect("client")
        };
        let r = Api::<AgentTask>::namespaced(forged, NS).list(&ListParams::default()).await;
        assert_eq!(refusal(r), (401, "Unauthorized".to_owned()));
        Api::<ServiceAccount>::namespaced(admin.clone(), NS)
            .delete(&account, &DeleteParams::default())
            .await
            .expect("account deleted");
        let r = my_tasks.list(&ListParams::default()).await;
        assert_eq!(refusal(r), (401, "Unauthorized".to_owned()));
    });
}

#[test]
fn kubectl_with_a_service_account_token_asks_and_is_answered_from_rbac() {
    use_this_build();
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&crd_documents()).expect("crds"),
    );
    create_namespace(&sb, NS);
    let admin = sb.client();
    let token = sb.rt.block_on(async {
        let pool = Api::<AgentPool>::namespaced(admin.clone(), NS)
            .create(&PostParams::default(), &pool_doc("alpha"))
            .await
            .expect("pool created");
        common::install_agent_rbac(&admin, &pool).await;
        let account = agentdeck::plan::manifests::service_account_name(&pool);
        token_for(&admin, NS, &account).await
    });
    let can_i = |args: &[&str]| {
        let mut all = vec!["--token", token.as_str(), "auth", "can-i", "-n", NS];
        all.extend_from_slice(args);
        out(&sb.kubectl(&all)).trim().to_owned()
    };
    assert_eq!(can_i(&["list", "agenttasks.agentdeck.dev"]), "yes");
    assert_eq!(
        can_i(&["patch", "agenttasks.agentdeck.dev", "--subresource=status"]),
        "yes"
    );
    assert_eq!(can_i(&["get", "agentpools.agentdeck.dev/alpha"]), "yes");
    assert_eq!(can_i(&["get", "agentpools.agentdeck.dev/beta"]), "no");
    assert_eq!(can_i(&["delete", "deployments"]), "no");
    assert_eq!(can_i(&["get", "secrets"]), "no");
    // The refusal as kubectl shows it.
    let o = sb.kubectl(&["--token", &token, "get", "secrets", "-n", NS]);
    assert!(!o.status.success());
    let said = common::err(&o);
    assert!(
        said.contains("secrets is forbidden: User \"system:serviceaccount:agents:")
            && said.contains(
                "cannot list resource \"secrets\" in API group \"\" in the namespace \"agents\""
            ),
        "{said}"
    );
    // The admin of the kubeconfig keeps every right.
    assert_eq!(
        out(&sb.kubectl(&["auth", "can-i", "delete", "deployments", "-n", NS])).trim(),
        "yes"
    );
}

/// kube-rs's in-cluster configuration, the path the daemon and the agents
/// take in a cluster: a pod given the service-account volume admission adds
/// and `KUBERNETES_SERVICE_HOST`/`PORT` runs `agentdeck status` with no
/// kubeconfig, its volume bound at the real path in a private mount
/// namespace (`unshare`), and sees what its account may see.
#[test]
fn a_pod_connects_with_in_cluster_configuration_as_its_service_account() {
    use_this_build();
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&crd_documents()).expect("crds"),
    );
    create_namespace(&sb, NS);
    sb.kubectl_ok(&["create", "serviceaccount", "viewer", "-n", NS]);
    sb.kubectl_ok(&[
        "create",
        "rolebinding",
        "viewer",
        "-n",
        NS,
        "--clusterrole=view",
        &format!("--serviceaccount={NS}:viewer"),
    ]);
    // `view` has no custom resources (nothing aggregates them into it here).
    sb.kubectl_ok(&[
        "create",
        "role",
        "pool-reader",
        "-n",
        NS,
        "--verb=get,list,watch",
        "--resource=agentpools.agentdeck.dev,agenttasks.agentdeck.dev",
    ]);
    sb.kubectl_ok(&[
        "create",
        "rolebinding",
        "pool-reader",
        "-n",
        NS,
        "--role=pool-reader",
        &format!("--serviceaccount={NS}:viewer"),
    ]);
    let admin = sb.client();
    // The container sees its service-account volume at the real path and
    // has no KUBECONFIG: kube-rs's in-cluster configuration is what connects.
    let script = "SA=/var/run/secrets/kubernetes.io/serviceaccount; \
        echo \"kubeconfig=${KUBECONFIG:-none}\"; ls \"$SA\"; \
        echo \"host=$KUBERNETES_SERVICE_HOST\"; \"$AGENTDECK\" status alpha; echo \"exit=$?\"; sleep 600";
    sb.rt.block_on(async {
        Api::<AgentPool>::namespaced(admin.clone(), NS)
            .create(&PostParams::default(), &pool_doc("alpha"))
            .await
            .expect("pool created");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "in-cluster", "namespace": NS,
                         "annotations": {"sandbox.agentdeck.dev/run-shell": "true"}},
            "spec": {"serviceAccountName": "viewer",
                     "containers": [{"name": "c", "image": "busybox",
                                     "command": ["sh", "-c", script],
                                     "env": [{"name": "AGENTDECK", "value": env!("CARGO_BIN_EXE_agentdeck")}]}]}
        }))
        .expect("pod");
        let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("pod created");
        let log = eventually("the pod's agentdeck to finish", || {
            let pods = pods.clone();
            async move {
                let log = pods.logs("in-cluster", &Default::default()).await.ok()?;
                log.contains("exit=").then_some(log)
            }
        })
        .await;
        assert!(log.contains("exit=0"), "{log}");
        assert!(log.contains("alpha"), "{log}");
        assert!(log.contains("kubeconfig=none"), "{log}");
        for file in ["ca.crt", "namespace", "token"] {
            assert!(log.lines().any(|l| l == file), "{file} in the volume: {log}");
        }
        let pod = pods.get("in-cluster").await.expect("pod");
        assert_eq!(pod.spec.expect("spec").service_account_name.as_deref(), Some("viewer"));
        let _ = pods.delete("in-cluster", &DeleteParams::default()).await;
    });
}

/// Every file of the bundle at `zip`, extracted under `into`, as bytes.
fn bundle_files(zip: &std::path::Path, into: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let x = std::process::Command::new("unzip")
        .arg("-q")
        .arg(zip)
        .arg("-d")
        .arg(into)
        .output()
        .expect("unzip runs");
    assert!(x.status.success(), "{}", String::from_utf8_lossy(&x.stderr));
    let mut out = Vec::new();
    let mut todo = vec![into.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((p.display().to_string(), std::fs::read(&p).expect("file")));
            }
        }
    }
    out
}

/// A value that exists only in a Secret of the pool's namespace, handed to
/// the agents through `secretKeyRef` and forwarded to tasks that print it,
/// in deployment mode and in job mode: the agent (or the job's worker)
/// hides it before printing, so the pod logs, the kept log tails, the
/// tasks, the Events and a support bundle hold no trace of it, while the
/// line around it is there.
#[test]
fn a_secret_value_tasks_print_in_either_mode_leaves_no_trace_in_configmaps_tasks_events_or_bundles()
{
    const PLANTED: &str = "planted-Zq8v-only-in-a-secret";
    use_this_build();
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&crd_documents()).expect("crds"),
    );
    let mut config = Config {
        controller_namespace: SYSTEM.into(),
        namespaces: vec![NS.into()],
        resync_interval_seconds: 2,
        ..Config::default()
    };
    config.leader_election.enabled = false;
    let objects: Vec<Value> = controller_objects(&InstallOptions {
        namespace: SYSTEM.into(),
        image: "agentdeck:dev".into(),
        config: config.clone(),
        cluster_wide: false,
    })
    .expect("manifests")
    .into_iter()
    .filter(|o| o["kind"] != "Deployment")
    .collect();
    create_namespace(&sb, NS);
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&objects).expect("yaml"),
    );
    sb.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "db",
        "-n",
        NS,
        &format!("--from-literal=password={PLANTED}"),
    ]);
    let admin = sb.client();
    sb.rt.block_on(async {
        let token = token_for(&admin, SYSTEM, "agentdeck-controller").await;
        let as_controller = {
            let _g = sb.rt.enter();
            sb.sandbox()
                .client_with_token(&token)
                .expect("controller client")
        };
        let cancel = CancellationToken::new();
        let handle = controller::start(
            Connection {
                client: as_controller,
                namespace: NS.into(),
                streams: None,
            },
            &config,
            cancel.clone(),
        );
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "alpha", "namespace": NS},
            "spec": {"image": "agentdeck:dev", "minReplicas": 1, "maxReplicas": 1,
                     "graceShutdownSeconds": 2,
                     "envForwardAllowlist": ["DB_PASSWORD"],
                     "env": [{"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"},
                             {"name": "DB_PASSWORD",
                              "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}
        }))
        .expect("pool");
        Api::<AgentPool>::namespaced(admin.clone(), NS)
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        let task: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "leaky", "namespace": NS},
            "spec": {"pool": "alpha",
                     "command": ["sh", "-c", "echo \"connecting with $DB_PASSWORD now\""]}
        }))
        .expect("task");
        let tasks: Api<AgentTask> = Api::namespaced(admin.clone(), NS);
        tasks
            .create(&PostParams::default(), &task)
            .await
            .expect("task created");
        let done = common::wait_task(&tasks, "leaky", "Succeeded", |t| {
            t.status
                .as_ref()
                .is_some_and(|s| s.phase == TaskPhase::Succeeded)
        })
        .await;
        let agent = done.status.and_then(|s| s.agent).expect("its agent");

        // The pod log: the line is there, the value is not.
        let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
        let log = eventually("the task's line in the agent's log", || {
            let (pods, agent) = (pods.clone(), agent.clone());
            async move {
                let log = pods.logs(&agent, &Default::default()).await.ok()?;
                log.contains("connecting with").then_some(log)
            }
        })
        .await;
        assert!(!log.contains(PLANTED), "{log}");
        assert!(log.contains("REDACTED"), "{log}");

        // The agent's pod goes: its last lines are kept, without the value.
        pods.delete(&agent, &DeleteParams::default())
            .await
            .expect("agent pod deleted");
        let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), NS);
        eventually("the agent's tail kept", || {
            let (cms, agent) = (cms.clone(), agent.clone());
            async move {
                let cm = cms
                    .get_opt(&agentdeck::controller::tails::configmap_name("alpha"))
                    .await
                    .ok()??;
                let v = serde_json::to_value(&cm).ok()?;
                agentdeck::controller::tails::entries(&v)
                    .iter()
                    .any(|(p, _, t)| *p == agent && t.contains("connecting with"))
                    .then_some(())
            }
        })
        .await;
        // Keyed with the namespace's redaction key, which the controller
        // filled in, with no right to Secrets but get and update of that
        // one (the rendered, empty Secret).
        let key = Api::<Secret>::namespaced(admin.clone(), NS)
            .get(agentdeck::plan::redaction_key::SECRET_NAME)
            .await
            .expect("the redaction key Secret");
        assert!(
            serde_json::to_value(&key)
                .ok()
                .and_then(|v| agentdeck::plan::redaction_key::key_in(&v))
                .is_some(),
            "the controller filled in the key"
        );

        // Job mode: the runner runs the task, the worker prints its output.
        let job_pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "beta", "namespace": NS},
            "spec": {"image": "agentdeck:dev", "executionMode": "job",
                     "taskDefaults": {"runnerImage": "runner:1"},
                     "envForwardAllowlist": ["DB_PASSWORD"],
                     "env": [{"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"},
                             {"name": "DB_PASSWORD",
                              "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}
        }))
        .expect("job pool");
        Api::<AgentPool>::namespaced(admin.clone(), NS)
            .create(&PostParams::default(), &job_pool)
            .await
            .expect("job pool created");
        let job_task: AgentTask = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "leaky-job", "namespace": NS},
            "spec": {"pool": "beta",
                     "command": ["sh", "-c", "echo \"job connecting with $DB_PASSWORD now\""]}
        }))
        .expect("job task");
        tasks
            .create(&PostParams::default(), &job_task)
            .await
            .expect("job task created");
        let done = common::wait_task(&tasks, "leaky-job", "Succeeded", |t| {
            t.status
                .as_ref()
                .is_some_and(|s| s.phase == TaskPhase::Succeeded)
        })
        .await;
        let job_pod = done.status.and_then(|s| s.agent).expect("its pod");
        let worker_log = eventually("the job task's line in its worker's log", || {
            let (pods, job_pod) = (pods.clone(), job_pod.clone());
            async move {
                let lp = kube::api::LogParams {
                    container: Some("worker".into()),
                    ..Default::default()
                };
                let log = pods.logs(&job_pod, &lp).await.ok()?;
                log.contains("job connecting with").then_some(log)
            }
        })
        .await;
        assert!(!worker_log.contains(PLANTED), "{worker_log}");
        assert!(worker_log.contains("REDACTED"), "{worker_log}");
        let runner_log = pods
            .logs(
                &job_pod,
                &kube::api::LogParams {
                    container: Some("runner".into()),
                    ..Default::default()
                },
            )
            .await
            .expect("runner log");
        assert!(!runner_log.contains(PLANTED), "{runner_log}");
        pods.delete(&job_pod, &DeleteParams::default())
            .await
            .expect("job pod deleted");
        eventually("the job pod's tails kept", || {
            let (cms, job_pod) = (cms.clone(), job_pod.clone());
            async move {
                let cm = cms
                    .get_opt(&agentdeck::controller::tails::configmap_name("beta"))
                    .await
                    .ok()??;
                let v = serde_json::to_value(&cm).ok()?;
                agentdeck::controller::tails::entries(&v)
                    .iter()
                    .any(|(p, c, t)| {
                        *p == job_pod && c == "worker" && t.contains("job connecting with")
                    })
                    .then_some(())
            }
        })
        .await;

        let lp = ListParams::default();
        let sinks = [
            (
                "ConfigMaps",
                serde_json::to_string(&cms.list(&lp).await.expect("configmaps").items),
            ),
            (
                "AgentTasks",
                serde_json::to_string(&tasks.list(&lp).await.expect("tasks").items),
            ),
            (
                "Events",
                serde_json::to_string(
                    &Api::<Event>::namespaced(admin.clone(), NS)
                        .list(&lp)
                        .await
                        .expect("events")
                        .items,
                ),
            ),
        ];
        for (sink, text) in sinks {
            let text = text.expect("JSON");
            assert!(!text.contains(PLANTED), "{sink} hold the value");
        }

        // A support bundle of the namespace.
        let dir = tempfile::tempdir().expect("dir");
        let zip = dir.path().join("b.zip");
        let mut opts = agentdeck::ops::bundle::BundleOptions::new(NS, &zip);
        opts.deadline = std::time::Duration::from_secs(120);
        agentdeck::ops::bundle::collect(admin.clone(), opts, |_| {})
            .await
            .expect("bundle written");
        let files = bundle_files(&zip, &dir.path().join("x"));
        assert!(
            files
                .iter()
                .any(|(_, b)| String::from_utf8_lossy(b).contains("connecting with")),
            "the task's line is in the bundle"
        );
        for (name, bytes) in files {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(PLANTED),
                "{name} holds the value"
            );
        }
        cancel.cancel();
        drop(handle);
    });
}

/// A controller of two namespaces: a Role in each and the read-only
/// cluster watch are enough to run pools in both; a third namespace is
/// not its to write.
#[test]
fn a_controller_of_two_namespaces_runs_pools_in_both_with_its_roles_and_the_cluster_watch() {
    const SECOND: &str = "agents-b";
    use_this_build();
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&crd_documents()).expect("crds"),
    );
    let config = Config {
        controller_namespace: SYSTEM.into(),
        namespaces: vec![NS.into(), SECOND.into()],
        resync_interval_seconds: 2,
        ..Config::default()
    };
    let objects: Vec<Value> = controller_objects(&InstallOptions {
        namespace: SYSTEM.into(),
        image: "agentdeck:dev".into(),
        config: config.clone(),
        cluster_wide: false,
    })
    .expect("manifests")
    .into_iter()
    .filter(|o| o["kind"] != "Deployment")
    .collect();
    for ns in [NS, SECOND, "elsewhere"] {
        create_namespace(&sb, ns);
    }
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        &to_yaml_stream(&objects).expect("yaml"),
    );
    let admin = sb.client();
    sb.rt.block_on(async {
        let token = token_for(&admin, SYSTEM, "agentdeck-controller").await;
        let as_controller = {
            let _g = sb.rt.enter();
            sb.sandbox()
                .client_with_token(&token)
                .expect("controller client")
        };
        let cancel = CancellationToken::new();
        let handle = controller::start(
            Connection {
                client: as_controller.clone(),
                namespace: NS.into(),
                streams: None,
            },
            &config,
            cancel.clone(),
        );
        for ns in [NS, SECOND] {
            let mut pool = pool_doc("alpha");
            pool.metadata.namespace = Some(ns.into());
            Api::<AgentPool>::namespaced(admin.clone(), ns)
                .create(&PostParams::default(), &pool)
                .await
                .expect("pool created");
            let mut task = task_doc("first", "alpha");
            task.metadata.namespace = Some(ns.into());
            let tasks: Api<AgentTask> = Api::namespaced(admin.clone(), ns);
            tasks
                .create(&PostParams::default(), &task)
                .await
                .expect("task created");
            common::wait_task(&tasks, "first", "Succeeded", |t| {
                t.status
                    .as_ref()
                    .is_some_and(|s| s.phase == TaskPhase::Succeeded)
            })
            .await;
        }
        // Cluster-wide it may only list and watch; elsewhere, nothing more.
        let r = Api::<Pod>::namespaced(as_controller.clone(), "elsewhere")
            .delete("x", &DeleteParams::default())
            .await
            .map(drop);
        assert_eq!(refusal(r).0, 403);
        let r = Api::<Secret>::all(as_controller.clone())
            .list(&ListParams::default())
            .await
            .map(drop);
        assert_eq!(refusal(r).0, 403);
        Api::<Pod>::all(as_controller)
            .list(&ListParams::default())
            .await
            .expect("the cluster watch's list");
        cancel.cancel();
        drop(handle);
    });
}
