//! The per-task Job (job mode): a worker container (the agent, supervising and
//! reporting) and a runner container (the IaC toolchain) sharing `/shared`.

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, Container, DownwardAPIProjection, DownwardAPIVolumeFile, KeyToPath,
    ObjectFieldSelector, PodSpec, PodTemplateSpec, ProjectedVolumeSource,
    ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{
    agent_mounts, ca_mount, container_security_context, health_port, injected_agent_env, merge_env,
    network_env, overlay_pod_template, pod_security_context, pool_volumes, scrape_annotations,
    shared_mount, termination_grace_seconds,
};
use super::{
    COMPONENT_TASK, ManifestError, OwnerIds, Result, label_value, labels, pool_ids,
    task_controller_ref, task_ids,
};
use crate::crd::names;
use crate::crd::{AgentPool, AgentTask, LABEL_TASK};

/// The task pod's agent container: `agentdeck agent --task <name>`.
pub const WORKER_CONTAINER: &str = "worker";
/// The task pod's toolchain container, running [`RUNNER_SCRIPT`].
pub const RUNNER_CONTAINER: &str = "runner";
/// Where the worker hands a task over to the runner.
pub const TASK_DIR: &str = "/shared/task";

/// The runner container's program (`/bin/sh -c`), and with it the protocol
/// between worker and runner, all files in [`TASK_DIR`]:
///
/// - `run.sh`: the task, written by the worker, run with `sh`.
/// - `env`: optional shell assignments (values quoted by the worker), sourced
///   with auto-export into the task's environment only.
/// - `ready`: written by the worker last, once the files above are complete.
/// - `abort`: written by the worker instead of `ready` when it gives up before
///   the task starts; the runner then exits 0 without running anything and the
///   worker's own exit status decides the pod's fate.
/// - `stop`: written by the worker to end a started task (cancel, timeout),
///   holding the seconds between SIGTERM and SIGKILL (10 if it holds no
///   number). The runner sends the task SIGTERM within a second, SIGKILL once
///   the grace is over, and then reports and exits as for any other end.
/// - `exit-code`: written by the runner (atomically, via rename) with the
///   task's exit status, which is also the runner's exit status.
/// - `output`: written by the runner: the task's stdout and stderr. The
///   worker prints it, redacted of the Secret values it knows, as
///   `[task]` lines of its own log; the runner container's log carries no
///   task output, so no Secret value a task prints reaches a pod log (nor
///   the kept log tails or a log collector).
///
/// SIGTERM/SIGINT to the runner are forwarded to the task: as PID 1 the shell
/// would otherwise ignore them and the task would only ever see SIGKILL.
/// Signals go to the task's process (`run.sh` execs the command), not to
/// processes a task's own shell may have started.
pub const RUNNER_SCRIPT: &str = r#"task=/shared/task
until [ -f "$task/run.sh" ] && [ -f "$task/ready" ]; do
  if [ -f "$task/abort" ]; then exit 0; fi
  sleep 1
done
# Trapped before the task starts, so a TERM that comes while it is being
# started is not lost: it is forwarded as soon as the task has a pid.
child=
term=
trap 'term=1; if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; fi' TERM INT
(
  if [ -f "$task/env" ]; then set -a; . "$task/env"; set +a; fi
  exec sh "$task/run.sh" >>"$task/output" 2>&1
) &
child=$!
if [ -n "$term" ]; then kill -TERM "$child" 2>/dev/null; fi
# The stop watcher: until the task ends (the main shell reaps it), look for
# `stop` every second; then TERM, and KILL once the grace is over.
(
  until [ -f "$task/stop" ]; do
    kill -0 "$child" 2>/dev/null || exit 0
    sleep 1
  done
  grace=$(cat "$task/stop" 2>/dev/null)
  case $grace in ''|*[!0-9]*) grace=10 ;; esac
  kill -TERM "$child" 2>/dev/null
  while [ "$grace" -gt 0 ] && kill -0 "$child" 2>/dev/null; do
    sleep 1
    grace=$((grace - 1))
  done
  kill -KILL "$child" 2>/dev/null
) </dev/null >/dev/null 2>&1 &
watcher=$!
code=0
wait "$child" || code=$?
# A trapped signal interrupts wait before the task ends: wait for its status.
while kill -0 "$child" 2>/dev/null; do
  code=0
  wait "$child" || code=$?
done
kill "$watcher" 2>/dev/null
printf '%s\n' "$code" > "$task/exit-code.tmp" && mv "$task/exit-code.tmp" "$task/exit-code"
exit "$code"
"#;

/// Where the worker finds its API credentials (the standard in-cluster path).
const KUBE_API_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const KUBE_API_VOLUME: &str = "kube-api-access";
/// Lifetime the kubelet asks for the projected token (it refreshes it at 80 %),
/// the same the API server's own automount uses.
const KUBE_API_TOKEN_SECONDS: i64 = 3607;

/// Name of the Job running `task`: its name and the first 8 characters of its
/// uid, bounded to 63. Derived only from the task, so a restarted controller
/// finds the Job it created, and a re-created task of the same name gets a new one.
pub fn job_name(task: &AgentTask) -> Result<String> {
    let ids = task_ids(task)?;
    let uid: String = ids.uid.chars().take(8).collect();
    Ok(names::bounded(
        &format!("{}-{uid}", ids.name),
        names::MAX_NAME_LEN,
    ))
}

/// The Job that runs `task` for `pool`, owned by the task.
pub fn task_job(pool: &AgentPool, task: &AgentTask) -> Result<Job> {
    let pool_ids = pool_ids(pool)?;
    let task_ids = task_ids(task)?;
    if pool_ids.namespace != task_ids.namespace {
        return Err(ManifestError::NamespaceMismatch {
            task: task_ids.name,
            task_namespace: task_ids.namespace,
            pool: pool_ids.name,
            pool_namespace: pool_ids.namespace,
        });
    }
    let runner_image = task
        .spec
        .image
        .clone()
        .or_else(|| pool.spec.task_defaults.runner_image.clone())
        .ok_or_else(|| ManifestError::NoRunnerImage {
            task: task_ids.name.clone(),
            pool: pool_ids.name.clone(),
        })?;
    let spec = &pool.spec;

    let mut pod_labels = labels(&pool_ids.name, COMPONENT_TASK);
    pod_labels.insert(LABEL_TASK.to_string(), label_value(&task_ids.name));

    let worker = worker_container(pool, &pool_ids, &task_ids.name);
    let runner = runner_container(pool, runner_image);

    let mut volumes = pool_volumes(pool);
    volumes.push(kube_api_volume());
    let mut annotations = scrape_annotations(spec.health_port);
    // The autoscaler must not evict a node's running task to save cost.
    annotations.insert(
        "cluster-autoscaler.kubernetes.io/safe-to-evict".to_string(),
        "false".to_string(),
    );
    let base = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pod_labels.clone()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![worker, runner],
            restart_policy: Some("Never".to_string()),
            // Service links would hand every pod `AGENTDECK_*_PORT`-style
            // variables for Services named `agentdeck-…`; nothing reads them.
            enable_service_links: Some(false),
            service_account_name: Some(super::service_account_name(pool)),
            // The API token is projected into the worker alone (see
            // kube_api_volume): automounting would hand it to the runner too.
            automount_service_account_token: Some(false),
            security_context: Some(pod_security_context()),
            termination_grace_period_seconds: Some(termination_grace_seconds(pool)),
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
    };
    let mut template = overlay_pod_template(pool, &pool_ids, base, &pod_labels)?;
    if let Some(pod) = template.spec.as_mut() {
        // podFailurePolicy is rejected with any other restart policy.
        pod.restart_policy = Some("Never".to_string());
    }

    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name(task)?),
            namespace: Some(task_ids.namespace.clone()),
            labels: Some(pod_labels),
            owner_references: Some(vec![task_controller_ref(&task_ids)]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            // One retry for the failures no rule below decides, such as a pod
            // that failed before its runner started.
            backoff_limit: Some(1),
            pod_failure_policy: Some(pod_failure_policy()),
            // A replacement pod only once the old one is gone, so two workers
            // of one task never run side by side.
            pod_replacement_policy: Some("Failed".to_string()),
            ttl_seconds_after_finished: Some(spec.task_defaults.ttl_seconds_after_finished),
            // The worker enforces the task's timeout itself and then needs the
            // stop time to end and report it; the deadline is only a backstop.
            active_deadline_seconds: task
                .spec
                .timeout_seconds
                .map(|timeout| timeout.saturating_add(termination_grace_seconds(pool))),
            template,
            ..JobSpec::default()
        }),
        status: None,
    })
}

/// The task pod's worker: the agent, reporting the task it hands over.
fn worker_container(pool: &AgentPool, pool_ids: &OwnerIds, task: &str) -> Container {
    let spec = &pool.spec;
    let mut worker_mounts = agent_mounts(pool);
    worker_mounts.push(VolumeMount {
        name: KUBE_API_VOLUME.to_string(),
        mount_path: KUBE_API_DIR.to_string(),
        read_only: Some(true),
        ..VolumeMount::default()
    });
    Container {
        name: WORKER_CONTAINER.to_string(),
        image: Some(spec.image.clone()),
        command: Some(vec![
            "agentdeck".to_string(),
            "agent".to_string(),
            "--task".to_string(),
            task.to_string(),
        ]),
        env: Some(merge_env(injected_agent_env(pool, pool_ids), &spec.env)),
        // No probes: with restartPolicy Never a liveness kill would fail the
        // task; the controller's health prober watches the worker instead.
        ports: Some(vec![health_port(pool)]),
        resources: spec.resources.clone(),
        security_context: Some(container_security_context(true)),
        volume_mounts: Some(worker_mounts),
        ..Container::default()
    }
}

/// The task pod's runner. It runs the user's toolchain: it gets the
/// network settings and the hand-over directory, never the agent token or
/// API credentials.
fn runner_container(pool: &AgentPool, runner_image: String) -> Container {
    let spec = &pool.spec;
    let mut runner_mounts = vec![shared_mount()];
    runner_mounts.extend(ca_mount(pool));
    let runner_env = network_env(pool);
    Container {
        name: RUNNER_CONTAINER.to_string(),
        image: Some(runner_image),
        command: Some(vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            RUNNER_SCRIPT.to_string(),
        ]),
        env: (!runner_env.is_empty()).then_some(runner_env),
        resources: spec.task_defaults.resources.clone(),
        // No read-only root: IaC toolchains write outside any mount we could
        // predict (provider plugin caches under $HOME, installs of tools,
        // scratch files beside the binary).
        security_context: Some(container_security_context(false)),
        volume_mounts: Some(runner_mounts),
        ..Container::default()
    }
}

/// Evictions, preemptions and node drains (DisruptionTarget) do not count
/// against the task: the pod is replaced. A runner that ran the task and
/// exited non-zero fails the Job at once; retrying would run the IaC change twice.
fn pod_failure_policy() -> PodFailurePolicy {
    PodFailurePolicy {
        rules: vec![
            PodFailurePolicyRule {
                action: "Ignore".to_string(),
                on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                    type_: "DisruptionTarget".to_string(),
                    status: "True".to_string(),
                }]),
                on_exit_codes: None,
            },
            PodFailurePolicyRule {
                action: "FailJob".to_string(),
                on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                    container_name: Some(RUNNER_CONTAINER.to_string()),
                    operator: "NotIn".to_string(),
                    values: vec![0],
                }),
                on_pod_conditions: None,
            },
        ],
    }
}

/// What the API server's automount would give every container (token, CA,
/// namespace), as a volume only the worker mounts.
fn kube_api_volume() -> Volume {
    Volume {
        name: KUBE_API_VOLUME.to_string(),
        projected: Some(ProjectedVolumeSource {
            default_mode: None,
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: None,
                        expiration_seconds: Some(KUBE_API_TOKEN_SECONDS),
                        path: "token".to_string(),
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_string(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_string(),
                            path: "ca.crt".to_string(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_string(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: None,
                                field_path: "metadata.namespace".to_string(),
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
        }),
        ..Volume::default()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    use super::*;
    use crate::crd::names::is_dns1123_label;
    use crate::crd::{LABEL_COMPONENT, LABEL_POOL};
    use crate::plan::manifests::TOKEN_FILE;
    use crate::plan::manifests::fixtures::{
        NAMESPACE, TASK_UID, container, env, env_value, mount_path, plain_pool, pod_spec, pool,
        task,
    };

    fn job_pool() -> AgentPool {
        pool(
            "prod",
            json!({
                "executionMode": "job",
                "tokenSecretRef": { "name": "agent-token" },
                "proxy": { "httpProxy": "http://proxy:3128" },
                "caBundle": { "configMapName": "corp-ca" },
                "taskDefaults": {
                    "runnerImage": "hashicorp/terraform:1.9",
                    "ttlSecondsAfterFinished": 120,
                    "resources": { "limits": { "memory": "2Gi" } }
                }
            }),
        )
    }

    fn build(pool: &AgentPool) -> Job {
        task_job(pool, &task("apply-network", json!({}))).expect("job builds")
    }

    fn template(job: &Job) -> &PodTemplateSpec {
        &job.spec.as_ref().expect("job has a spec").template
    }

    fn pod(job: &Job) -> &PodSpec {
        pod_spec(template(job))
    }

    #[test]
    fn job_name_is_the_task_name_and_the_start_of_its_uid() {
        let name = job_name(&task("apply-network", json!({}))).expect("named");
        assert_eq!(name, format!("apply-network-{}", &TASK_UID[..8]));
    }

    #[test]
    fn job_name_of_a_long_task_is_deterministic_bounded_and_unique_per_uid() {
        let long = task(&"t".repeat(120), json!({}));
        let first = job_name(&long).expect("named");
        assert_eq!(first, job_name(&long.clone()).expect("named"));
        assert_eq!(first.len(), 63);
        assert!(is_dns1123_label(&first), "{first}");
        let mut recreated = long.clone();
        recreated.metadata.uid = Some("99999999-0000-0000-0000-000000000000".to_string());
        assert_ne!(first, job_name(&recreated).expect("named"));
    }

    #[test]
    fn job_name_of_a_task_without_uid_is_an_error() {
        let mut t = task("apply", json!({}));
        t.metadata.uid = None;
        assert!(matches!(
            job_name(&t),
            Err(ManifestError::MissingUid { kind: "AgentTask", name }) if name == "apply"
        ));
    }

    #[test]
    fn job_is_named_labelled_and_owned_by_its_task() {
        let job = build(&job_pool());
        assert_eq!(
            job.metadata.name,
            Some(format!("apply-network-{}", &TASK_UID[..8]))
        );
        assert_eq!(job.metadata.namespace.as_deref(), Some(NAMESPACE));
        let owners = job.metadata.owner_references.clone().expect("owned");
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "AgentTask");
        assert_eq!(owners[0].api_version, "agentdeck.dev/v1alpha1");
        assert_eq!(owners[0].name, "apply-network");
        assert_eq!(owners[0].uid, TASK_UID);
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        let pod_labels = template(&job)
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone());
        for labels in [job.metadata.labels.clone(), pod_labels] {
            let labels = labels.expect("labelled");
            assert_eq!(labels[LABEL_POOL], "prod");
            assert_eq!(labels[LABEL_TASK], "apply-network");
            assert_eq!(labels[LABEL_COMPONENT], "task");
            assert_eq!(labels["app.kubernetes.io/managed-by"], "agentdeck");
            assert_eq!(labels["app.kubernetes.io/name"], "agentdeck");
        }
    }

    #[test]
    fn a_long_task_name_is_bounded_in_its_label() {
        let t = task(&"t".repeat(120), json!({}));
        let job = task_job(&job_pool(), &t).expect("builds");
        let labels = job.metadata.labels.expect("labelled");
        assert!(labels[LABEL_TASK].len() <= 63);
        assert!(labels[LABEL_TASK].starts_with("ttt"));
    }

    #[test]
    fn task_pods_are_not_safe_to_evict() {
        let job = build(&job_pool());
        let annotations = template(&job)
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.clone())
            .expect("annotations");
        assert_eq!(
            annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"],
            "false"
        );
    }

    #[test]
    fn job_retries_once_never_restarts_in_place_and_expires_after_the_ttl() {
        let job = build(&job_pool());
        let spec = job.spec.as_ref().expect("spec");
        assert_eq!(spec.backoff_limit, Some(1));
        assert_eq!(spec.ttl_seconds_after_finished, Some(120));
        assert_eq!(spec.pod_replacement_policy.as_deref(), Some("Failed"));
        assert_eq!(pod(&job).restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.active_deadline_seconds, None, "no task timeout");
    }

    #[test]
    fn pod_failure_policy_ignores_disruptions_and_fails_fast_on_runner_exit_codes() {
        let job = build(&job_pool());
        let policy = job
            .spec
            .as_ref()
            .and_then(|s| s.pod_failure_policy.clone())
            .expect("policy");
        assert_eq!(policy.rules.len(), 2);
        let ignore = &policy.rules[0];
        assert_eq!(ignore.action, "Ignore");
        let conditions = ignore.on_pod_conditions.as_ref().expect("conditions");
        assert_eq!(conditions[0].type_, "DisruptionTarget");
        assert_eq!(conditions[0].status, "True");
        let fail = &policy.rules[1];
        assert_eq!(fail.action, "FailJob");
        let codes = fail.on_exit_codes.as_ref().expect("exit codes");
        assert_eq!(codes.container_name.as_deref(), Some(RUNNER_CONTAINER));
        assert_eq!(codes.operator, "NotIn");
        assert_eq!(codes.values, [0]);
    }

    #[test]
    fn overlay_cannot_change_the_restart_policy_the_failure_policy_needs() {
        let p = pool(
            "prod",
            json!({
                "taskDefaults": { "runnerImage": "tf:1" },
                "podTemplate": { "spec": { "restartPolicy": "OnFailure" } }
            }),
        );
        let job = build(&p);
        assert_eq!(pod(&job).restart_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn deadline_is_the_task_timeout_plus_drain_and_grace() {
        let p = pool(
            "prod",
            json!({
                "drainTimeoutSeconds": 300,
                "graceShutdownSeconds": 30,
                "taskDefaults": { "runnerImage": "tf:1" }
            }),
        );
        let t = task("plan", json!({ "timeoutSeconds": 1800 }));
        let job = task_job(&p, &t).expect("builds");
        assert_eq!(job.spec.and_then(|s| s.active_deadline_seconds), Some(2130));
    }

    #[test]
    fn runner_image_comes_from_the_task_before_the_pool_default() {
        let t = task("plan", json!({ "image": "opentofu/opentofu:1.8" }));
        let job = task_job(&job_pool(), &t).expect("builds");
        let runner = container(template(&job), RUNNER_CONTAINER);
        assert_eq!(runner.image.as_deref(), Some("opentofu/opentofu:1.8"));
        let job = build(&job_pool());
        let runner = container(template(&job), RUNNER_CONTAINER);
        assert_eq!(runner.image.as_deref(), Some("hashicorp/terraform:1.9"));
    }

    #[test]
    fn no_runner_image_anywhere_is_an_error_naming_both_fields() {
        let err = task_job(&plain_pool(), &task("plan", json!({}))).expect_err("no image");
        assert!(
            matches!(&err, ManifestError::NoRunnerImage { task, pool } if task == "plan" && pool == "prod")
        );
        let message = err.to_string();
        assert!(message.contains("spec.image"), "{message}");
        assert!(
            message.contains("spec.taskDefaults.runnerImage"),
            "{message}"
        );
    }

    #[test]
    fn a_task_from_another_namespace_than_its_pool_is_refused() {
        let mut t = task("plan", json!({}));
        t.metadata.namespace = Some("elsewhere".to_string());
        assert!(matches!(
            task_job(&job_pool(), &t),
            Err(ManifestError::NamespaceMismatch { .. })
        ));
    }

    #[test]
    fn worker_is_the_agent_for_this_task_with_the_agent_env() {
        let job = build(&job_pool());
        let worker = container(template(&job), WORKER_CONTAINER);
        assert_eq!(worker.image.as_deref(), Some("ghcr.io/acme/agent:1.4"));
        assert_eq!(
            worker.command,
            Some(
                ["agentdeck", "agent", "--task", "apply-network"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(env_value(worker, "POOL_TYPE"), Some("k8s"));
        assert_eq!(
            env_value(worker, "AGENTDECK_AGENT_TOKEN_FILE"),
            Some(TOKEN_FILE)
        );
        let agent_name = env(worker, "IAC_AGENT_NAME")
            .and_then(|e| e.value_from.as_ref())
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        assert_eq!(agent_name, Some("metadata.name"));
        assert_eq!(mount_path(worker, "shared"), Some("/shared"));
        assert_eq!(
            mount_path(worker, "agent-token"),
            Some("/var/run/agentdeck")
        );
        assert_eq!(
            mount_path(worker, "kube-api-access"),
            Some("/var/run/secrets/kubernetes.io/serviceaccount")
        );
    }

    #[test]
    fn runner_gets_the_shared_volume_and_network_settings_but_no_credentials() {
        let job = build(&job_pool());
        let runner = container(template(&job), RUNNER_CONTAINER);
        assert_eq!(mount_path(runner, "shared"), Some("/shared"));
        assert_eq!(mount_path(runner, "ca-bundle"), Some("/etc/agentdeck/ca/"));
        assert_eq!(mount_path(runner, "agent-token"), None);
        assert_eq!(mount_path(runner, "kube-api-access"), None);
        assert_eq!(env_value(runner, "HTTP_PROXY"), Some("http://proxy:3128"));
        assert_eq!(
            env_value(runner, "SSL_CERT_FILE"),
            Some("/etc/agentdeck/ca/ca.crt")
        );
        for var in runner.env.iter().flatten() {
            assert!(!var.name.starts_with("AGENTDECK_AGENT_"), "{}", var.name);
            assert!(var.value.as_deref() != Some(TOKEN_FILE), "{}", var.name);
            assert!(var.value_from.is_none(), "{}", var.name);
        }
        assert_eq!(pod(&job).automount_service_account_token, Some(false));
        let limits = runner
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("limits");
        assert_eq!(limits["memory"], Quantity("2Gi".to_string()));
    }

    #[test]
    fn runner_runs_the_protocol_script_with_a_writable_root() {
        let job = build(&job_pool());
        let runner = container(template(&job), RUNNER_CONTAINER);
        assert_eq!(
            runner.command,
            Some(vec![
                "/bin/sh".into(),
                "-c".into(),
                RUNNER_SCRIPT.to_string()
            ])
        );
        let security = runner.security_context.clone().expect("context");
        assert_eq!(security.read_only_root_filesystem, None);
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(
            security.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        let worker = container(template(&job), WORKER_CONTAINER);
        let worker_security = worker.security_context.clone().expect("context");
        assert_eq!(worker_security.read_only_root_filesystem, Some(true));
    }

    #[test]
    fn task_pod_follows_the_restricted_profile_and_the_pool_grace() {
        let job = build(&job_pool());
        let security = pod(&job).security_context.clone().expect("context");
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(
            security.seccomp_profile.map(|p| p.type_).as_deref(),
            Some("RuntimeDefault")
        );
        assert_eq!(pod(&job).termination_grace_period_seconds, Some(3660));
        assert_eq!(
            pod(&job).service_account_name.as_deref(),
            Some("agentdeck-agent-prod")
        );
    }

    #[test]
    fn overlay_applies_to_task_pods_without_moving_them_out_of_the_pool() {
        let p = pool(
            "prod",
            json!({
                "taskDefaults": { "runnerImage": "tf:1" },
                "podTemplate": {
                    "metadata": { "labels": { "agentdeck.dev/task": "other" } },
                    "spec": { "nodeSelector": { "pool": "iac" } }
                }
            }),
        );
        let job = build(&p);
        assert_eq!(
            pod(&job).node_selector.as_ref().map(|s| s["pool"].as_str()),
            Some("iac")
        );
        let labels = template(&job)
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .expect("labels");
        assert_eq!(labels[LABEL_TASK], "apply-network");
    }

    /// [`RUNNER_SCRIPT`] running in its own process group, which is killed
    /// when the test ends so a failing test leaves no task behind.
    struct Runner(std::process::Child);

    impl Drop for Runner {
        fn drop(&mut self) {
            let group = format!("-{}", self.0.id());
            let _ = Command::new("kill")
                .args(["-KILL", "--", &group])
                .stderr(Stdio::null())
                .status();
            let _ = self.0.wait();
        }
    }

    /// Runs [`RUNNER_SCRIPT`] with its task directory moved to `dir`.
    fn spawn_runner(dir: &Path) -> Runner {
        use std::os::unix::process::CommandExt;
        let script = RUNNER_SCRIPT.replace(TASK_DIR, &dir.display().to_string());
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("sh starts");
        Runner(child)
    }

    fn wait_for(runner: &mut Runner) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = runner.0.try_wait().expect("wait works") {
                return status.code().expect("exited normally");
            }
            assert!(Instant::now() < deadline, "runner script hangs");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn runner_script_waits_for_ready_then_runs_the_task_with_its_env_and_reports_the_code() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = spawn_runner(dir.path());
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            child.0.try_wait().expect("wait works").is_none(),
            "must wait for ready"
        );
        let out = dir.path().join("out");
        std::fs::write(dir.path().join("env"), "GREETING='hello world'\n").expect("write env");
        std::fs::write(
            dir.path().join("run.sh"),
            format!(
                "printf '%s' \"$GREETING\" > '{}'\necho printed; echo to-stderr >&2\nexit 3\n",
                out.display()
            ),
        )
        .expect("write run.sh");
        std::fs::write(dir.path().join("ready"), "").expect("write ready");
        assert_eq!(wait_for(&mut child), 3);
        let code = std::fs::read_to_string(dir.path().join("exit-code")).expect("exit-code");
        assert_eq!(code.trim(), "3");
        assert_eq!(
            std::fs::read_to_string(out).expect("task ran"),
            "hello world"
        );
        // What the task prints goes to `output`, for the worker to print.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("output")).expect("output"),
            "printed\nto-stderr\n"
        );
    }

    #[test]
    fn runner_script_exits_cleanly_without_running_anything_on_abort() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("abort"), "").expect("write abort");
        let mut child = spawn_runner(dir.path());
        assert_eq!(wait_for(&mut child), 0);
        assert!(!dir.path().join("exit-code").exists());
    }

    /// A task that records its start, exits 7 on SIGTERM (or ignores it
    /// with `ignore_term`), and otherwise runs for a minute.
    fn write_long_task(dir: &Path, ignore_term: bool) -> std::path::PathBuf {
        let started = dir.join("started");
        let trap = if ignore_term { "''" } else { "'exit 7'" };
        std::fs::write(
            dir.join("run.sh"),
            format!(
                "trap {trap} TERM\n: > '{}'\ni=0\nwhile [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n",
                started.display()
            ),
        )
        .expect("write run.sh");
        std::fs::write(dir.join("ready"), "").expect("write ready");
        started
    }

    fn wait_started(started: &Path) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !started.exists() {
            assert!(Instant::now() < deadline, "task never started");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn runner_script_terms_the_task_when_the_worker_writes_stop_and_reports_its_exit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let started = write_long_task(dir.path(), false);
        let mut child = spawn_runner(dir.path());
        wait_started(&started);
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            child.0.try_wait().expect("wait works").is_none(),
            "runs until asked to stop"
        );
        let asked = Instant::now();
        std::fs::write(dir.path().join("stop"), "30\n").expect("write stop");
        assert_eq!(wait_for(&mut child), 7, "the task's own TERM handler ran");
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "stopped after {:?}",
            asked.elapsed()
        );
        let code = std::fs::read_to_string(dir.path().join("exit-code")).expect("exit-code");
        assert_eq!(code.trim(), "7");
    }

    #[test]
    fn runner_script_kills_a_task_that_ignores_term_once_the_stop_grace_is_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let started = write_long_task(dir.path(), true);
        let mut child = spawn_runner(dir.path());
        wait_started(&started);
        let asked = Instant::now();
        std::fs::write(dir.path().join("stop"), "2\n").expect("write stop");
        assert_eq!(wait_for(&mut child), 128 + 9, "SIGKILL ended the task");
        let took = asked.elapsed();
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(8),
            "killed after {took:?}, grace 2 s"
        );
        let code = std::fs::read_to_string(dir.path().join("exit-code")).expect("exit-code");
        assert_eq!(code.trim(), "137");
    }

    #[test]
    fn runner_script_reads_an_unreadable_stop_grace_as_ten_seconds_and_still_terms() {
        let dir = tempfile::tempdir().expect("tempdir");
        let started = write_long_task(dir.path(), false);
        let mut child = spawn_runner(dir.path());
        wait_started(&started);
        std::fs::write(dir.path().join("stop"), "soon; rm -rf /\n").expect("write stop");
        assert_eq!(wait_for(&mut child), 7);
    }

    #[test]
    fn runner_script_forwards_sigterm_to_the_task_and_reports_its_exit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let started = dir.path().join("started");
        std::fs::write(
            dir.path().join("run.sh"),
            format!(
                "trap 'exit 7' TERM\n: > '{}'\nwhile :; do sleep 0.1; done\n",
                started.display()
            ),
        )
        .expect("write run.sh");
        std::fs::write(dir.path().join("ready"), "").expect("write ready");
        let mut child = spawn_runner(dir.path());
        let deadline = Instant::now() + Duration::from_secs(60);
        while !started.exists() {
            assert!(Instant::now() < deadline, "task never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let killed = Command::new("kill")
            .args(["-TERM", &child.0.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(killed.success());
        assert_eq!(wait_for(&mut child), 7);
        let code = std::fs::read_to_string(dir.path().join("exit-code")).expect("exit-code");
        assert_eq!(code.trim(), "7");
    }
}
