//! Tasks that try to hurt the agent or the reader, run by a real agent
//! (`agentdeck agent` in the sandbox): each row is a task spec → the phase
//! it ends in and what its message says (sanitised: no escape sequence from
//! the task reaches what we show).

mod common;

use common::TestSandbox;

use std::sync::Once;

use agentdeck::crd::{AgentPool, AgentTask, TaskPhase, crds};
use agentdeck::plan::manifests::agent_deployment;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const NS: &str = "default";

fn start_sandbox() -> TestSandbox {
    static EXE: Once = Once::new();
    EXE.call_once(|| {
        // SAFETY: set once, before any sandbox (and so any thread reading
        // the variable) exists.
        unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
    });
    TestSandbox::start()
}

#[test]
fn bad_task_specs_end_errored_with_a_clean_message_naming_the_field() {
    let sb = start_sandbox();
    let client = sb.client();
    sb.rt.block_on(async {
        let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crds() {
            crd_api
                .create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": "hostile", "namespace": NS},
            "spec": {"image": "agentdeck:dev", "concurrency": 4,
                     "env": [{"name": "AGENTDECK_AGENT_HEARTBEAT_SECONDS", "value": "1"}]}
        }))
        .expect("pool");
        let pool = Api::<AgentPool>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created");
        common::install_agent_rbac(&client, &pool).await;
        Api::<Deployment>::namespaced(client.clone(), NS)
            .create(
                &PostParams::default(),
                &agent_deployment(&pool, 1).expect("deployment builds"),
            )
            .await
            .expect("deployment created");
        let tasks: Api<AgentTask> = Api::namespaced(client.clone(), NS);
        // Outside /tmp: agent containers have a volume of their own there.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
        let ran = dir.path().join("ran");
        let touch = format!("touch '{}'", ran.display());
        let cases: Vec<(&str, Value, TaskPhase, &[&str])> = vec![
            (
                "env-with-equals",
                json!({"command": ["sh", "-c", touch], "env": [{"name": "A=B", "value": "x"}]}),
                TaskPhase::Errored,
                &["spec.env[0].name: \"A=B\" is not valid; expected an environment variable name"],
            ),
            (
                "escape-in-command",
                json!({"command": ["\u{1b}]0;pwned\u{7}\u{1b}[2Jno-such-program"]}),
                TaskPhase::Errored,
                &["cannot start", "no-such-program"],
            ),
        ];
        for (name, spec, _, _) in &cases {
            let mut spec = spec.clone();
            spec["pool"] = json!("hostile");
            let task: AgentTask = serde_json::from_value(json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": name, "namespace": NS}, "spec": spec
            }))
            .expect("task");
            tasks
                .create(&PostParams::default(), &task)
                .await
                .expect("task created");
        }
        for (name, _, phase, fragments) in &cases {
            let task =
                common::wait_task(&tasks, name, "finished", |t| t.phase().is_finished()).await;
            let status = task.status.expect("status");
            let message = status.message.unwrap_or_default();
            assert_eq!(status.phase, *phase, "{name}: {message}");
            assert!(
                !message.chars().any(|c| c.is_control()),
                "{name}: control characters in {message:?}"
            );
            for fragment in *fragments {
                assert!(message.contains(fragment), "{name}: {message}");
            }
        }
        assert!(!ran.exists(), "a task with a bad env name never runs");
    });
}
