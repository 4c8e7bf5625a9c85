//! The controller end to end: the real controller (library API, as the
//! daemon and the console run it) against an in-process sandbox through the
//! real kube client.
//!
//! No real agents run here (the agent runtime is built elsewhere): each
//! pool's `podTemplate` replaces the agent container's command with one the
//! sandbox simulates (running until deleted), and tests play the agents by
//! writing task status the way an agent would (claim = Running on a pod,
//! finish = Succeeded). Everything the controller does is observed through
//! the API.

mod common;

use common::{eventually, eventually_within};

use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use agentdeck::cluster::Connection;
use agentdeck::config::Config;
use agentdeck::controller::{self, ControllerHandle};
use agentdeck::crd::{AgentPool, AgentTask, TaskPhase};
use agentdeck::sandbox::Sandbox;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
/// A resync far beyond any test's deadline, for tests of what must not wait for it.
const RESYNC_SECONDS: u64 = 300;

/// The agent container, simulated by the sandbox instead of running the
/// not-yet-built `agentdeck agent` (whose process would exit at once).
fn sim_agent() -> Value {
    json!({"spec": {"containers": [{"name": "agent", "command": ["sim-agent"]}]}})
}

static EXE: Once = Once::new();

struct Harness {
    sandbox: Option<Sandbox>,
    client: Client,
}

impl Harness {
    async fn start() -> Harness {
        EXE.call_once(|| {
            // SAFETY: set once, before any sandbox of this binary starts a
            // kubelet that reads it; no other thread writes the environment.
            unsafe { std::env::set_var("AGENTDECK_SANDBOX_EXE", env!("CARGO_BIN_EXE_agentdeck")) };
        });
        let _ = rustls::crypto::ring::default_provider().install_default();
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
        let sandbox = Sandbox::start(0, 2).await.expect("sandbox starts");
        let client = sandbox.client().expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in [AgentPool::crd(), AgentTask::crd()] {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("crd created");
        }
        Harness {
            sandbox: Some(sandbox),
            client,
        }
    }

    fn sandbox(&self) -> &Sandbox {
        self.sandbox.as_ref().expect("running")
    }

    fn controller(&self, config: &Config) -> (Arc<ControllerHandle>, CancellationToken) {
        self.controller_with(config, controller::StartOptions::default())
    }

    /// The controller as `agentdeck --daemon` starts it (see
    /// `commands::daemon`): its finished tasks cached slimmed.
    fn daemon(&self, config: &Config) -> (Arc<ControllerHandle>, CancellationToken) {
        let options = controller::StartOptions {
            slim_finished_tasks: true,
            ..Default::default()
        };
        self.controller_with(config, options)
    }

    fn controller_with(
        &self,
        config: &Config,
        options: controller::StartOptions,
    ) -> (Arc<ControllerHandle>, CancellationToken) {
        let cancel = CancellationToken::new();
        let conn = Connection {
            client: self.client.clone(),
            namespace: NS.into(),
            streams: None,
        };
        let handle = Arc::new(controller::start_with(
            conn,
            config,
            options,
            cancel.clone(),
        ));
        (handle, cancel)
    }

    fn pools(&self) -> Api<AgentPool> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn tasks(&self) -> Api<AgentTask> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create_pool(&self, name: &str, spec: Value) -> AgentPool {
        let mut full = json!({
            "image": "agentdeck:dev",
            "minReplicas": 1,
            "maxReplicas": 10,
            "podTemplate": sim_agent(),
        });
        for (k, v) in spec.as_object().expect("spec object") {
            full[k] = v.clone();
        }
        let pool: AgentPool = serde_json::from_value(json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentPool",
            "metadata": {"name": name}, "spec": full
        }))
        .expect("pool");
        self.pools()
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created")
    }

    async fn create_tasks(&self, pool: &str, prefix: &str, n: usize) {
        let api = self.tasks();
        let creates = (0..n).map(|i| {
            let api = api.clone();
            let task: AgentTask = serde_json::from_value(json!({
                "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                "metadata": {"name": format!("{prefix}-{i}")},
                "spec": {"pool": pool, "command": ["terraform", "plan"]}
            }))
            .expect("task");
            async move {
                api.create(&PostParams::default(), &task)
                    .await
                    .expect("task created")
            }
        });
        futures::future::join_all(creates).await;
    }

    async fn set_task_status(&self, task: &str, status: Value) {
        self.tasks()
            .patch_status(
                task,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .expect("task status written");
    }

    async fn replicas(&self, pool: &str) -> Option<i32> {
        self.deployments()
            .get_opt(&format!("iac-agent-{pool}"))
            .await
            .expect("get deployment")
            .and_then(|d| d.spec?.replicas)
    }

    /// Names of the pool's agent pods that are not terminating.
    async fn live_agents(&self, pool: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .pods()
            .list(&ListParams::default().labels(&format!("agentdeck.dev/pool={pool}")))
            .await
            .expect("pods")
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| p.name_any())
            .collect();
        names.sort();
        names
    }

    /// Records every replica count the pool's Deployment goes through.
    fn record_replicas(&self, pool: &str) -> Arc<std::sync::Mutex<Vec<i32>>> {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let cfg = watcher::Config::default().fields(&format!("metadata.name=iac-agent-{pool}"));
        let stream = watcher(self.deployments(), cfg)
            .default_backoff()
            .applied_objects();
        let out = seen.clone();
        tokio::spawn(async move {
            tokio::pin!(stream);
            // A watch error is retried by the back-off; the recorder goes on.
            while let Some(event) = stream.next().await {
                let Ok(d) = event else { continue };
                let r = d.spec.and_then(|s| s.replicas).unwrap_or(-1);
                let mut seen = out.lock().expect("lock");
                if seen.last() != Some(&r) {
                    seen.push(r);
                }
            }
        });
        seen
    }

    async fn events(&self, object: &str, reason: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
            })
            .collect()
    }

    async fn pool(&self, name: &str) -> AgentPool {
        self.pools().get(name).await.expect("pool")
    }

    async fn task(&self, name: &str) -> AgentTask {
        self.tasks().get(name).await.expect("task")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(sb) = self.sandbox.take() {
            // The test's runtime ends right after and takes the sandbox's
            // tasks with it; no real processes run in these tests (every
            // container is simulated), so ending the watches is enough.
            sb.api().faults.drop_watches();
        }
    }
}

/// Fast settings: short resync, no cooldown guesswork, no election.
fn config() -> Config {
    let mut c = Config {
        resync_interval_seconds: 2,
        controller_namespace: NS.into(),
        ..Config::default()
    };
    c.leader_election.enabled = false;
    c.health_probe.interval_seconds = 1;
    c.health_probe.offline_after_seconds = 600;
    c
}

fn condition<'a>(
    pool: &'a AgentPool,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    pool.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

fn running_on(agent: &str, attempts: i32) -> Value {
    json!({"phase": "Running", "agent": agent, "attempts": attempts,
           "claimedAt": jiff::Timestamp::now().to_string()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_pool_gets_its_owned_objects_and_a_current_status() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    let pool = h
        .create_pool("alpha", json!({"minReplicas": 2, "maxReplicas": 5}))
        .await;
    let uid = pool.uid().expect("uid");

    let deployment = eventually("the Deployment", || async {
        h.deployments()
            .get_opt("iac-agent-alpha")
            .await
            .expect("get")
    })
    .await;
    let spec = deployment.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(2), "created at minReplicas");
    let owner = &deployment
        .metadata
        .owner_references
        .as_ref()
        .expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("AgentPool", uid.as_str())
    );
    assert_eq!(owner.controller, Some(true));
    let agent = &spec.template.spec.as_ref().expect("pod spec").containers[0];
    assert_eq!(agent.image.as_deref(), Some("agentdeck:dev"));
    assert_eq!(
        agent.command.as_deref(),
        Some(&["sim-agent".to_string()][..]),
        "the pool's podTemplate overlay is applied"
    );

    let sa: Api<ServiceAccount> = Api::namespaced(h.client.clone(), NS);
    let account = eventually("the agents' ServiceAccount", || async {
        sa.get_opt("agentdeck-agent-alpha").await.expect("get")
    })
    .await;
    assert_eq!(
        account.metadata.owner_references.expect("owned")[0].uid,
        uid
    );
    let svc: Api<Service> = Api::namespaced(h.client.clone(), NS);
    let services = eventually("the agent Service", || async {
        let items = svc
            .list(&ListParams::default().labels("agentdeck.dev/pool=alpha"))
            .await
            .expect("services")
            .items;
        (!items.is_empty()).then_some(items)
    })
    .await;
    assert_eq!(services.len(), 1, "one agent Service");

    let pool = eventually("status with observedGeneration and Ready", || async {
        let p = h.pool("alpha").await;
        let s = p.status.as_ref()?;
        (s.observed_generation == Some(1)
            && s.desired_replicas == 2
            && s.replicas == 2
            && condition(&p, "Ready").is_some())
        .then_some(p)
    })
    .await;
    assert_eq!(
        condition(&pool, "Invalid").map(|c| c.status.as_str()),
        Some("False")
    );
    assert_eq!(
        condition(&pool, "Frozen").map(|c| c.status.as_str()),
        Some("False")
    );
    assert_eq!(
        condition(&pool, "Draining").map(|c| c.status.as_str()),
        Some("False")
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_settings_configmap_is_owned_and_follows_the_pool() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    let pool = h
        .create_pool("tuned", json!({"minReplicas": 1, "concurrency": 2}))
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), NS);
    let file = |cm: &ConfigMap| {
        cm.data
            .as_ref()
            .and_then(|d| d.get("agentdeck-agent.yaml").cloned())
            .unwrap_or_default()
    };
    let cm = eventually("the settings ConfigMap", || async {
        cms.get_opt("iac-agent-tuned").await.expect("get")
    })
    .await;
    let owner = &cm.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(owner.kind, "AgentPool");
    assert_eq!(Some(owner.uid.clone()), pool.uid());
    assert!(file(&cm).contains("concurrency: 2"), "{}", file(&cm));
    let hash = |d: &Deployment| {
        d.spec
            .as_ref()?
            .template
            .metadata
            .as_ref()?
            .annotations
            .as_ref()?
            .get("agentdeck.dev/agent-config-hash")
            .cloned()
    };
    let before = eventually("the Deployment with the settings hash", || async {
        hash(
            &h.deployments()
                .get_opt("iac-agent-tuned")
                .await
                .expect("get")?,
        )
    })
    .await;

    h.pools()
        .patch(
            "tuned",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"concurrency": 4}})),
        )
        .await
        .expect("pool changed");
    let cm = eventually("the ConfigMap updated", || async {
        let cm = cms.get("iac-agent-tuned").await.expect("get");
        file(&cm).contains("concurrency: 4").then_some(cm)
    })
    .await;
    assert!(!file(&cm).contains("concurrency: 2"));
    let after = eventually("the agents rolled with the new hash", || async {
        let h2 = hash(&h.deployments().get("iac-agent-tuned").await.expect("get"))?;
        (h2 != before).then_some(h2)
    })
    .await;
    assert_eq!(after.len(), 8);
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_a_hundred_tasks_scales_the_pool_to_max_in_a_few_decisions_not_one_per_task() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    // No up-cooldown: on a busy machine the test's 100 creates can spread
    // past the controller's quiet period and bring a second decision, which
    // must not stick below max. That a burst arriving at once is one
    // decision is a figure (`cargo bench --bench controller`).
    h.create_pool(
        "burst",
        json!({"minReplicas": 1, "maxReplicas": 10, "cooldownSeconds": {"up": 0, "down": 300}}),
    )
    .await;
    eventually("the Deployment at min", || async {
        (h.replicas("burst").await == Some(1)).then_some(())
    })
    .await;
    let seen = h.record_replicas("burst");
    recorded(&seen, 1).await;
    h.create_tasks("burst", "t", 100).await;
    recorded(&seen, 10).await;
    // Anything after max would be a wrong step too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let steps = seen.lock().expect("lock").clone();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]) && steps.last() == Some(&10),
        "only up, to max and no further: {steps:?}"
    );
    // One decision per task would be 9 steps of one; a debounced burst is
    // one or two jumps.
    assert!(
        steps.len() <= 4,
        "a decision per task, not per burst: {steps:?}"
    );
    // Repeated decisions share one Event (its series counts them).
    let ups = eventually("the ScaledUp event", || async {
        let ups = h.events("burst", "ScaledUp").await;
        (!ups.is_empty()).then_some(ups)
    })
    .await;
    let note = ups[0].note.clone().unwrap_or_default();
    assert!(note.starts_with("scale up 1→"), "{note}");
    let pool = eventually("status counting the pending tasks", || async {
        let p = h.pool("burst").await;
        (p.status.as_ref()?.pending_tasks == 100).then_some(p)
    })
    .await;
    let status = pool.status.expect("status");
    assert_eq!(status.desired_replicas, 10);
    assert!(status.last_scale_time.is_some());
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_up_step_adds_one_agent_per_decision() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool(
        "stepper",
        json!({"minReplicas": 1, "maxReplicas": 4, "scaleUpStep": 1,
               "cooldownSeconds": {"up": 0, "down": 300}}),
    )
    .await;
    eventually("the Deployment at min", || async {
        (h.replicas("stepper").await == Some(1)).then_some(())
    })
    .await;
    let seen = h.record_replicas("stepper");
    recorded(&seen, 1).await;
    h.create_tasks("stepper", "s", 20).await;
    recorded(&seen, 4).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![1, 2, 3, 4],
        "one agent per step"
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_work_scales_back_to_min_without_removing_busy_agents() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    // No stabilization window: this is about which agents go, not when.
    h.create_pool(
        "shrink",
        json!({"minReplicas": 1, "maxReplicas": 4, "cooldownSeconds": {"up": 0, "down": 1},
               "scaleDownStabilizationSeconds": 0}),
    )
    .await;
    h.create_tasks("shrink", "w", 4).await;
    let pods = eventually("four agent pods", || async {
        let live = h.live_agents("shrink").await;
        (live.len() == 4).then_some(live)
    })
    .await;
    // Two agents claim a task each; the other two tasks finish.
    h.set_task_status("w-0", running_on(&pods[1], 1)).await;
    h.set_task_status("w-1", running_on(&pods[3], 1)).await;
    for t in ["w-2", "w-3"] {
        h.set_task_status(t, json!({"phase": "Succeeded", "attempts": 1}))
            .await;
    }
    let busy = vec![pods[1].clone(), pods[3].clone()];
    eventually("the two busy agents alone left", || async {
        let live = h.live_agents("shrink").await;
        (h.replicas("shrink").await == Some(2) && live == busy).then_some(())
    })
    .await;
    for name in &busy {
        let pod = h.pods().get(name).await.expect("busy pod");
        assert_eq!(
            pod.annotations()
                .get("controller.kubernetes.io/pod-deletion-cost")
                .map(String::as_str),
            Some("1000"),
            "busy pods are marked to go last"
        );
    }
    // One finishes: down to one agent, the one still busy.
    h.set_task_status("w-0", json!({"phase": "Succeeded", "attempts": 1}))
        .await;
    eventually("only the agent still busy is left", || async {
        let live = h.live_agents("shrink").await;
        (h.replicas("shrink").await == Some(1) && live == vec![pods[3].clone()]).then_some(())
    })
    .await;
    h.set_task_status("w-1", json!({"phase": "Succeeded", "attempts": 1}))
        .await;
    // Back at min (1): stays there.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(h.replicas("shrink").await, Some(1), "never below min");
    eventually("the ScaledDown event", || async {
        (!h.events("shrink", "ScaledDown").await.is_empty()).then_some(())
    })
    .await;
    cancel.cancel();
}

/// Plays the agents of `pools` through a trickle: one task per pool every
/// second, each running 0.5–2.5 s (the same deterministic lengths in every
/// pool) on an idle agent, every fifth failing. Returns when every task has
/// finished.
async fn trickle(h: &Harness, pools: &[&str], tasks: usize) {
    use std::collections::{BTreeSet, VecDeque};
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let lengths: Vec<Duration> = (0..tasks)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            Duration::from_millis(500 + rng % 2001)
        })
        .collect();
    let start = Instant::now();
    let mut created = 0;
    let mut waiting: Vec<VecDeque<usize>> = vec![VecDeque::new(); pools.len()];
    // (pool, task, agent, ends at)
    let mut running: Vec<(usize, usize, String, Instant)> = Vec::new();
    loop {
        while created < tasks && start.elapsed() >= Duration::from_secs(created as u64) {
            for (p, pool) in pools.iter().enumerate() {
                let task: AgentTask = serde_json::from_value(json!({
                    "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
                    "metadata": {"name": format!("{pool}-{created}")},
                    "spec": {"pool": pool, "command": ["terraform", "plan"]}
                }))
                .expect("task");
                h.tasks()
                    .create(&PostParams::default(), &task)
                    .await
                    .expect("task created");
                waiting[p].push_back(created);
            }
            created += 1;
        }
        let now = Instant::now();
        let mut still = Vec::new();
        for (p, t, agent, end) in running.drain(..) {
            if end > now {
                still.push((p, t, agent, end));
                continue;
            }
            let status = if t % 5 == 4 {
                json!({"phase": "Failed", "attempts": 1, "exitCode": 1})
            } else {
                json!({"phase": "Succeeded", "attempts": 1, "exitCode": 0})
            };
            h.set_task_status(&format!("{}-{t}", pools[p]), status)
                .await;
        }
        running = still;
        for (p, pool) in pools.iter().enumerate() {
            if waiting[p].is_empty() {
                continue;
            }
            let busy: BTreeSet<&str> = running
                .iter()
                .filter(|r| r.0 == p)
                .map(|r| r.2.as_str())
                .collect();
            let idle: Vec<String> = h
                .live_agents(pool)
                .await
                .into_iter()
                .filter(|a| !busy.contains(a.as_str()))
                .collect();
            for agent in idle {
                let Some(t) = waiting[p].pop_front() else {
                    break;
                };
                h.set_task_status(&format!("{pool}-{t}"), running_on(&agent, 1))
                    .await;
                running.push((p, t, agent, Instant::now() + lengths[t]));
            }
        }
        if created == tasks && running.is_empty() && waiting.iter().all(VecDeque::is_empty) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_under_a_trickle_settles_and_says_why_it_holds() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    // No cooldowns: only the window stands between a trickle and flapping.
    for (name, window) in [("steady", 300), ("flappy", 0)] {
        h.create_pool(
            name,
            json!({"minReplicas": 1, "maxReplicas": 4, "cooldownSeconds": {"up": 0, "down": 0},
                   "scaleDownStabilizationSeconds": window}),
        )
        .await;
    }
    let steady = h.record_replicas("steady");
    let flappy = h.record_replicas("flappy");
    eventually("one agent in each pool", || async {
        (h.live_agents("steady").await.len() == 1 && h.live_agents("flappy").await.len() == 1)
            .then_some(())
    })
    .await;

    trickle(&h, &["steady", "flappy"], 30).await;
    let steady = steady.lock().expect("lock").clone();
    let flappy = flappy.lock().expect("lock").clone();
    eprintln!("replicas under the trickle: steady {steady:?}, flappy {flappy:?}");
    assert!(
        steady.iter().max() > Some(&1),
        "the trickle needed more than one agent: {steady:?}"
    );
    assert!(
        steady.is_sorted(),
        "with the window the pool only grows under a trickle: {steady:?}"
    );
    // The same trickle without the window: the test can fail.
    assert!(
        flappy.windows(2).any(|w| w[0] > w[1]),
        "without the window the pool scales down between tasks: {flappy:?}"
    );

    // The work is done: the steady pool holds its agents for the window and
    // says until when.
    // (The trickle ends when its last task is marked done; the controller may
    // still count it running for a moment, so wait for the idle reason.)
    let top = *steady.last().expect("replicas");
    let reason = eventually("the stabilizing reason with nothing running", || async {
        let reason = h.pool("steady").await.status?.scale_reason?;
        (reason.starts_with(&format!("stabilizing: hold at {top} until "))
            && reason.contains("0 pending, 0 running"))
        .then_some(reason)
    })
    .await;
    assert!(
        reason.contains("needed within the last 300s; 0 pending, 0 running"),
        "{reason}"
    );
    assert_eq!(h.replicas("steady").await, Some(top));
    cancel.cancel();
}

/// The `until` of a `stabilizing: hold at N until <time>, …` reason.
fn stabilizing_until(reason: &str) -> Option<jiff::Timestamp> {
    let rest = reason.strip_prefix("stabilizing: hold at ")?;
    let (_, rest) = rest.split_once(" until ")?;
    rest.split(',').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_holds_a_busy_looking_pool_for_a_window() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool(
        "restarted",
        json!({"minReplicas": 1, "maxReplicas": 4, "cooldownSeconds": {"up": 0, "down": 0},
               "scaleDownStabilizationSeconds": 300}),
    )
    .await;
    h.create_tasks("restarted", "r", 3).await;
    let pods = eventually("three agents", || async {
        let live = h.live_agents("restarted").await;
        (live.len() == 3).then_some(live)
    })
    .await;
    for (i, pod) in pods.iter().enumerate() {
        h.set_task_status(&format!("r-{i}"), running_on(pod, 1))
            .await;
    }
    for i in 0..3 {
        h.set_task_status(
            &format!("r-{i}"),
            json!({"phase": "Succeeded", "attempts": 1}),
        )
        .await;
    }
    let first = eventually("the first controller holding 3", || async {
        let reason = h.pool("restarted").await.status?.scale_reason?;
        stabilizing_until(&reason)
    })
    .await;
    cancel.cancel();
    // Reasons name their time to the second: a restart within the same
    // second as the first hold would name the same "until".
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // A new controller remembers nothing of the need for 3 agents.
    let (_c, cancel) = h.controller(&config());
    let (second, reason) = eventually("the new controller's decision", || async {
        let reason = h.pool("restarted").await.status?.scale_reason?;
        let until = stabilizing_until(&reason)?;
        (until > first).then_some((until, reason))
    })
    .await;
    assert!(
        reason.starts_with("stabilizing: hold at 3 until "),
        "{reason}"
    );
    assert!(
        second > first,
        "held for a window from the restart: {reason}"
    );
    assert_eq!(h.replicas("restarted").await, Some(3));
    assert!(
        h.events("restarted", "ScaledDown").await.is_empty(),
        "nothing was scaled down"
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_window_holds_the_replicas_and_the_condition_says_why() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool(
        "frozen",
        json!({"minReplicas": 1, "maxReplicas": 5,
               "freezeSchedules": [{"name": "always", "from": "00:00", "to": "00:00",
                                    "weekdays": [0, 1, 2, 3, 4, 5, 6]}]}),
    )
    .await;
    h.create_tasks("frozen", "f", 10).await;
    let pool = eventually("the Frozen condition with its reason", || async {
        let p = h.pool("frozen").await;
        (p.status.as_ref()?.pending_tasks == 10
            && condition(&p, "Frozen").is_some_and(|c| c.status == "True"))
        .then_some(p)
    })
    .await;
    let frozen = condition(&pool, "Frozen").expect("frozen");
    assert!(frozen.message.contains("always"), "{}", frozen.message);
    let status = pool.status.as_ref().expect("status");
    assert!(status.frozen);
    assert!(
        status
            .scale_reason
            .as_deref()
            .is_some_and(|r| r.contains("would scale to 5")),
        "{:?}",
        status.scale_reason
    );
    // Several resyncs later: still at 1.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.replicas("frozen").await, Some(1));
    assert!(h.events("frozen", "ScaledUp").await.is_empty());
    cancel.cancel();
}

/// `HH:MM` in UTC `minutes` from now (whole minutes, floored).
fn utc_hh_mm(minutes: i64) -> String {
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_mins(minutes);
    at.to_zoned(jiff::tz::TimeZone::UTC)
        .strftime("%H:%M")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_window_covering_now_keeps_its_minimum_without_a_task() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    // Open from an hour ago to two hours ahead (crossing midnight or not).
    h.create_pool(
        "warm",
        json!({"minReplicas": 0, "maxReplicas": 5,
               "capacitySchedules": [{"name": "working", "from": utc_hh_mm(-60),
                                      "to": utc_hh_mm(120), "minReplicas": 3}]}),
    )
    .await;
    // Opens in two hours: nothing yet.
    h.create_pool(
        "later",
        json!({"minReplicas": 0, "maxReplicas": 5,
               "capacitySchedules": [{"name": "evening", "from": utc_hh_mm(120),
                                      "to": utc_hh_mm(180), "minReplicas": 3}]}),
    )
    .await;
    eventually("3 warm agents with no task", || async {
        (h.live_agents("warm").await.len() == 3).then_some(())
    })
    .await;
    assert_eq!(h.replicas("warm").await, Some(3));
    let status = eventually("the window in the status", || async {
        let s = h.pool("warm").await.status?;
        s.capacity.is_some().then_some(s)
    })
    .await;
    let reason = status.scale_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("min 3 from capacity window working (until "),
        "{reason}"
    );
    let capacity = status.capacity.expect("capacity");
    assert_eq!(capacity.open, vec!["working".to_string()]);
    assert_eq!(capacity.min_replicas, Some(3));
    assert!(
        capacity.summary.starts_with("working: min 3 until ")
            && capacity.summary.ends_with(", then 0"),
        "{}",
        capacity.summary
    );
    // Created inside the window, the Deployment starts at its minimum.
    assert!(h.events("warm", "ScaledUp").await.is_empty());
    eventually("the CapacityWindowOpened event", || async {
        (!h.events("warm", "CapacityWindowOpened").await.is_empty()).then_some(())
    })
    .await;

    let later = eventually("the later pool's status", || async {
        let s = h.pool("later").await.status?;
        s.capacity.is_some().then_some(s)
    })
    .await;
    assert_eq!(h.replicas("later").await, Some(0));
    let summary = later.capacity.expect("capacity").summary;
    assert!(
        summary.starts_with("none open; evening from ") && summary.ends_with(": min 3"),
        "{summary}"
    );
    assert!(h.events("later", "ScaledUp").await.is_empty());
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_window_scales_the_pool_when_it_opens_not_at_the_next_resync() {
    let h = Harness::start().await;
    // A resync far away: only the wake at the window's edge can scale.
    let mut slow = config();
    slow.resync_interval_seconds = 3600;
    let (_c, cancel) = h.controller(&slow);
    // The next minute, or the one after when this one is nearly over.
    let now = jiff::Timestamp::now();
    let ahead = if now.as_second().rem_euclid(60) > 50 {
        2
    } else {
        1
    };
    let from = utc_hh_mm(ahead);
    h.create_pool(
        "opening",
        json!({"minReplicas": 0, "maxReplicas": 5,
               "capacitySchedules": [{"name": "soon", "from": from,
                                      "to": utc_hh_mm(ahead + 60), "minReplicas": 2}]}),
    )
    .await;
    let before = eventually("the window ahead in the status", || async {
        let s = h.pool("opening").await.status?;
        s.capacity.is_some().then_some(s)
    })
    .await;
    assert_eq!(before.desired_replicas, 0);
    assert!(
        before
            .capacity
            .as_ref()
            .is_some_and(|c| c.summary == format!("none open; soon from {from}: min 2")),
        "{before:?}"
    );
    eventually_within(
        Duration::from_secs(150),
        "2 agents once the window opens",
        || async { (h.replicas("opening").await == Some(2)).then_some(()) },
    )
    .await;
    // The Deployment is scaled before the status says so.
    let status = eventually("the scale in the status", || async {
        let s = h.pool("opening").await.status?;
        (s.desired_replicas == 2 && s.last_scale_time.is_some()).then_some(s)
    })
    .await;
    let edge: jiff::Timestamp = {
        let today = jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        let t = jiff::civil::Time::strptime("%H:%M", &from).expect("HH:MM");
        let at = today
            .to_datetime(t)
            .to_zoned(jiff::tz::TimeZone::UTC)
            .expect("utc")
            .timestamp();
        // A window opening just after midnight is tomorrow's from before it.
        if at > jiff::Timestamp::now() {
            at - jiff::SignedDuration::from_hours(24)
        } else {
            at
        }
    };
    let scaled_at = status.last_scale_time.expect("scaled").0;
    assert!(
        scaled_at >= edge,
        "scaled at {scaled_at}, before the window opened at {edge}"
    );
    assert!(
        status
            .scale_reason
            .as_deref()
            .is_some_and(|r| r.contains("min 2 from capacity window soon")),
        "{:?}",
        status.scale_reason
    );
    let note = eventually("the ScaledUp event naming the window", || async {
        h.events("opening", "ScaledUp")
            .await
            .into_iter()
            .find_map(|e| e.note)
    })
    .await;
    assert!(
        note.contains("min 2 from capacity window soon (until "),
        "{note}"
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_window_above_the_pool_max_makes_the_pool_invalid() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool(
        "too-warm",
        json!({"minReplicas": 0, "maxReplicas": 5,
               "capacitySchedules": [{"name": "big", "from": "09:00", "to": "18:00",
                                      "minReplicas": 8}]}),
    )
    .await;
    let pool = eventually("the Invalid condition", || async {
        let p = h.pool("too-warm").await;
        condition(&p, "Invalid")
            .is_some_and(|c| c.status == "True")
            .then_some(p)
    })
    .await;
    let invalid = condition(&pool, "Invalid").expect("invalid");
    assert!(
        invalid
            .message
            .contains("spec.capacitySchedules[0].minReplicas: 8 is not valid")
            && invalid.message.contains("spec.maxReplicas (5)"),
        "{}",
        invalid.message
    );
    assert_eq!(h.replicas("too-warm").await, None);
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_pool_keeps_busy_agents_then_scales_to_zero() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool(
        "drainer",
        json!({"minReplicas": 3, "maxReplicas": 5, "cooldownSeconds": {"up": 0, "down": 0}}),
    )
    .await;
    let pods = eventually("three agents", || async {
        let live = h.live_agents("drainer").await;
        (live.len() == 3).then_some(live)
    })
    .await;
    h.create_tasks("drainer", "d", 1).await;
    h.set_task_status("d-0", running_on(&pods[0], 1)).await;
    h.pools()
        .patch(
            "drainer",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"drain": true}})),
        )
        .await
        .expect("drain");
    eventually("only the busy agent left", || async {
        let live = h.live_agents("drainer").await;
        (h.replicas("drainer").await == Some(1) && live == vec![pods[0].clone()]).then_some(())
    })
    .await;
    // The status is written after the Deployment: wait for it.
    eventually("the Draining condition", || async {
        let pool = h.pool("drainer").await;
        condition(&pool, "Draining")
            .is_some_and(|c| c.status == "True")
            .then_some(())
    })
    .await;
    h.set_task_status("d-0", json!({"phase": "Succeeded", "attempts": 1}))
        .await;
    eventually("zero replicas once idle", || async {
        (h.replicas("drainer").await == Some(0)).then_some(())
    })
    .await;
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_mode_runs_one_job_per_task_and_a_restart_makes_no_duplicate() {
    let h = Harness::start().await;
    // Worker and runner simulated (an `agentdeck` image or command would
    // run the real binary), exiting 0 after a second.
    let template = json!({
        "metadata": {"annotations": {"sandbox.agentdeck.dev/exit-after": "1"}},
        "spec": {"containers": [
            {"name": "worker", "image": "example.com/worker-sim:1", "command": ["sim-worker"]},
            {"name": "runner", "command": ["sim-runner"]}
        ]}
    });
    h.create_pool(
        "jobs",
        json!({"executionMode": "job", "minReplicas": 0, "maxReplicas": 10, "maxInFlight": 2,
               "podTemplate": template,
               "taskDefaults": {"runnerImage": "hashicorp/terraform:1.9"}}),
    )
    .await;
    h.create_tasks("jobs", "j", 6).await;
    let (first, cancel) = h.controller(&config());
    eventually("the first Jobs", || async {
        let n = h
            .jobs()
            .list(&ListParams::default())
            .await
            .expect("jobs")
            .items
            .len();
        (n >= 2).then_some(())
    })
    .await;
    // Never more than maxInFlight at once.
    let tasks = h
        .tasks()
        .list(&ListParams::default())
        .await
        .expect("tasks")
        .items;
    let in_flight = tasks
        .iter()
        .filter(|t| matches!(t.phase(), TaskPhase::Scheduled | TaskPhase::Running))
        .count();
    assert!(in_flight <= 2, "{in_flight} in flight");
    cancel.cancel();
    first.join().await;
    let (_second, cancel) = h.controller(&config());
    let tasks = eventually("every task succeeded", || async {
        let tasks = h
            .tasks()
            .list(&ListParams::default())
            .await
            .expect("tasks")
            .items;
        tasks
            .iter()
            .all(|t| t.phase() == TaskPhase::Succeeded)
            .then_some(tasks)
    })
    .await;
    let jobs = h
        .jobs()
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items;
    assert_eq!(jobs.len(), 6, "one Job per task");
    for task in &tasks {
        let status = task.status.as_ref().expect("status");
        assert_eq!(status.attempts, 1, "{} scheduled once", task.name_any());
        let job = status.job.as_deref().expect("job recorded");
        let owned = jobs
            .iter()
            .filter(|j| {
                j.owner_references()
                    .iter()
                    .any(|o| o.uid == task.uid().unwrap_or_default())
            })
            .count();
        assert_eq!(
            owned,
            1,
            "task {} has exactly one Job ({job})",
            task.name_any()
        );
    }
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_agent_pod_is_killed_is_requeued_or_failed_past_its_attempts() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool("rec", json!({"minReplicas": 2, "maxReplicas": 2}))
        .await;
    let pods = eventually("two agents", || async {
        let live = h.live_agents("rec").await;
        (live.len() == 2).then_some(live)
    })
    .await;
    h.create_tasks("rec", "r", 2).await;
    h.set_task_status("r-0", running_on(&pods[0], 1)).await;
    // What the agent kept of its output before it went (the controller's
    // cached copy has none: its write must keep the API's).
    let mut with_output = running_on(&pods[1], 3);
    with_output["outputTail"] = json!("Plan: 2 to add\nError: agent lost");
    h.set_task_status("r-1", with_output).await;
    for pod in &pods {
        h.pods()
            .delete(pod, &DeleteParams::default().grace_period(0))
            .await
            .expect("pod killed");
    }
    let task = eventually("the task requeued", || async {
        let t = h.task("r-0").await;
        (t.phase() == TaskPhase::Pending).then_some(t)
    })
    .await;
    let status = task.status.expect("status");
    assert_eq!(status.attempts, 1);
    assert_eq!(status.agent, None);
    let msg = status.message.unwrap_or_default();
    assert!(
        msg.contains(&format!("agent pod {} is gone", pods[0])),
        "{msg}"
    );
    let spent = eventually("the task out of attempts failed", || async {
        let t = h.task("r-1").await;
        (t.phase() == TaskPhase::Failed).then_some(t)
    })
    .await;
    let spent = spent.status.expect("status");
    let msg = spent.message.unwrap_or_default();
    assert!(msg.contains("gave up after 3 of 3"), "{msg}");
    assert_eq!(
        spent.output_tail.as_deref(),
        Some("Plan: 2 to add\nError: agent lost"),
        "the kept output survives the controller's write"
    );
    eventually("the Requeued event", || async {
        (!h.events("r-0", "Requeued").await.is_empty()).then_some(())
    })
    .await;
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_agent_stops_answering_is_requeued_without_waiting_for_the_resync() {
    let h = Harness::start().await;
    let mut cfg = config();
    cfg.health_probe.offline_after_seconds = 3;
    // Far beyond the test's deadline: the requeue must come from the
    // prober's offline trigger (or the recheck the reconcile schedules for
    // when the agent would turn offline), not from the resync.
    cfg.resync_interval_seconds = RESYNC_SECONDS;
    let (c, cancel) = h.controller(&cfg);
    h.create_pool("quiet", json!({"minReplicas": 1, "maxReplicas": 1}))
        .await;
    let pods = eventually("an agent", || async {
        let live = h.live_agents("quiet").await;
        (live.len() == 1).then_some(live)
    })
    .await;
    h.create_tasks("quiet", "q", 1).await;
    h.set_task_status("q-0", running_on(&pods[0], 1)).await;
    // The simulated agent serves no /healthz: offline 3 s after the prober
    // first saw it.
    let limits = controller::prober::thresholds(&cfg.health_probe);
    eventually("the agent classified offline", || async {
        let sample = c.view().health.get(NS, &pods[0])?;
        (sample.freshness(jiff::Timestamp::now(), &limits) == agentdeck::health::Freshness::Offline)
            .then_some(())
    })
    .await;
    // A probe interval (1 s), the debounce and one reconcile on an idle
    // machine; the deadline is for a busy one, and still a fifth of the
    // resync.
    let task = eventually_within(
        Duration::from_secs(RESYNC_SECONDS / 5),
        "the task requeued once its agent is offline, before the resync",
        || async {
            let t = h.task("q-0").await;
            (t.phase() == TaskPhase::Pending).then_some(t)
        },
    )
    .await;
    let msg = task.status.and_then(|s| s.message).unwrap_or_default();
    assert!(msg.contains("is offline"), "{msg}");
    let sample = c
        .view()
        .health
        .get(NS, &pods[0])
        .expect("the prober keeps a sample");
    assert!(sample.error.is_some(), "{sample:?}");
    // The pool's status is written by the same reconcile but after the
    // task's: wait for it rather than read it once.
    eventually("the pool's status counting the agent offline", || async {
        let pool = h.pool("quiet").await;
        (pool.status?.health.offline >= 1).then_some(())
    })
    .await;
    cancel.cancel();
}

/// Waits until the replica recorder's latest value is `replicas`.
async fn recorded(seen: &Arc<std::sync::Mutex<Vec<i32>>>, replicas: i32) {
    eventually(
        &format!("the Deployment watched at {replicas} replicas"),
        || async { (seen.lock().expect("lock").last() == Some(&replicas)).then_some(()) },
    )
    .await;
}

fn task_condition(task: &AgentTask, type_: &str) -> Option<(String, String, String)> {
    task.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_nobody_claims_gets_a_warning_naming_the_pool_state_until_an_agent_takes_it() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool(
        "idle",
        json!({"minReplicas": 1, "maxReplicas": 2, "drain": true,
               "taskDefaults": {"acquireTimeoutSeconds": 2}}),
    )
    .await;
    h.create_tasks("idle", "u", 1).await;
    let (_, reason, message) = eventually("the Unclaimed condition", || async {
        let t = h.task("u-0").await;
        task_condition(&t, "Unclaimed").filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(reason, "PoolDraining");
    assert!(
        message.contains("within 2s") && message.contains("draining"),
        "{message}"
    );
    assert_eq!(
        h.task("u-0").await.phase(),
        TaskPhase::Pending,
        "still queued"
    );
    eventually("the Warning event on the task and the pool", || async {
        let on_task = h.events("u-0", "Unclaimed").await;
        let on_pool = h.events("idle", "Unclaimed").await;
        (!on_task.is_empty() && !on_pool.is_empty()).then_some(())
    })
    .await;
    let warning = &h.events("u-0", "Unclaimed").await[0];
    assert_eq!(warning.type_.as_deref(), Some("Warning"));

    // The drain ends: the (simulated) agents are up but claim nothing.
    h.pools()
        .patch(
            "idle",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"drain": false}})),
        )
        .await
        .expect("drain lifted");
    let agent = eventually("an agent", || async {
        h.live_agents("idle").await.into_iter().next()
    })
    .await;
    eventually("the reason follows the pool", || async {
        let t = h.task("u-0").await;
        task_condition(&t, "Unclaimed").filter(|c| c.1 != "PoolDraining")
    })
    .await;

    h.set_task_status("u-0", running_on(&agent, 1)).await;
    let (status, reason, _) = eventually("the condition cleared once claimed", || async {
        let t = h.task("u-0").await;
        task_condition(&t, "Unclaimed").filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Claimed"));
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_pool_gets_a_condition_and_an_event_and_other_pools_go_on() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool(
        "broken",
        json!({"freezeSchedules": [{"from": "09:00", "to": "17:00", "timezone": "Mars/Olympus_Mons"}]}),
    )
    .await;
    h.create_pool("fine", json!({"minReplicas": 1})).await;
    let pool = eventually("the Invalid condition", || async {
        let p = h.pool("broken").await;
        condition(&p, "Invalid")
            .is_some_and(|c| c.status == "True")
            .then_some(p)
    })
    .await;
    let invalid = condition(&pool, "Invalid").expect("invalid");
    assert!(
        invalid.message.contains("spec.freezeSchedules[0].timezone"),
        "{}",
        invalid.message
    );
    eventually("the InvalidSpec event", || async {
        (!h.events("broken", "InvalidSpec").await.is_empty()).then_some(())
    })
    .await;
    eventually("the valid pool's Deployment", || async {
        h.replicas("fine").await
    })
    .await;
    assert_eq!(
        h.replicas("broken").await,
        None,
        "nothing applied for an invalid pool"
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_elect_one_leader_and_fail_over() {
    let h = Harness::start().await;
    let mut cfg = config();
    cfg.leader_election.enabled = true;
    cfg.leader_election.lease_duration_seconds = 4;
    cfg.leader_election.renew_deadline_seconds = 3;
    cfg.leader_election.retry_period_seconds = 1;
    let (a, cancel_a) = h.controller(&cfg);
    let (b, cancel_b) = h.controller(&cfg);
    let leaders = || u8::from(a.leader().is_leader()) + u8::from(b.leader().is_leader());
    eventually("one leader", || async { (leaders() == 1).then_some(()) }).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(leaders(), 1, "still exactly one leader");
    let (leader, follower, cancel_leader, cancel_follower) = if a.leader().is_leader() {
        (a, b, cancel_a, cancel_b)
    } else {
        (b, a, cancel_b, cancel_a)
    };
    h.create_pool("led", json!({"minReplicas": 1})).await;
    eventually("the leader reconciles", || async {
        h.replicas("led").await
    })
    .await;

    // Killed, not stopped: no release, the follower waits out the Lease.
    leader.abort();
    // How soon is a figure (`cargo bench --bench controller`); here only
    // that the follower does take over once the Lease runs out.
    eventually("the follower takes over", || async {
        follower.leader().is_leader().then_some(())
    })
    .await;
    h.create_pool("after", json!({"minReplicas": 1})).await;
    eventually("the new leader reconciles", || async {
        h.replicas("after").await
    })
    .await;

    cancel_follower.cancel();
    cancel_leader.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_hands_the_lease_over_without_waiting_for_it_to_expire() {
    let h = Harness::start().await;
    let mut cfg = config();
    cfg.leader_election.enabled = true;
    // A Lease far longer than the test's deadline: only a released Lease
    // lets the successor lead in time.
    cfg.leader_election.lease_duration_seconds = 240;
    cfg.leader_election.renew_deadline_seconds = 120;
    cfg.leader_election.retry_period_seconds = 1;
    let (first, cancel_first) = h.controller(&cfg);
    eventually("the first controller leads", || async {
        first.leader().is_leader().then_some(())
    })
    .await;
    let (second, cancel_second) = h.controller(&cfg);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!second.leader().is_leader(), "two leaders at once");
    cancel_first.cancel();
    first.join().await;
    assert!(!first.leader().is_leader(), "stepped down on the way out");
    eventually_within(
        Duration::from_secs(60),
        "the successor to lead before the 240 s Lease expires",
        || async { second.leader().is_leader().then_some(()) },
    )
    .await;
    h.create_pool("handed-over", json!({"minReplicas": 1}))
        .await;
    eventually("the successor reconciles", || async {
        h.replicas("handed-over").await
    })
    .await;
    cancel_second.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_answers_healthz_readyz_and_metrics() {
    let h = Harness::start().await;
    let (c, cancel) = h.controller(&config());
    let listener = agentdeck::server::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(agentdeck::server::serve(
        listener,
        c.clone(),
        cancel.clone(),
    ));
    h.create_pool("served", json!({"minReplicas": 1})).await;
    eventually("the Deployment", || async { h.replicas("served").await }).await;
    let http = reqwest::Client::new();
    let health = eventually("/healthz 200", || async {
        let r = http
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
            .ok()?;
        (r.status() == 200).then_some(r)
    })
    .await;
    let report: agentdeck::health::HealthReport = health.json().await.expect("health report");
    assert_eq!(report.status, agentdeck::health::HealthStatus::Healthy);
    let ready = http
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 200);
    let families = [
        "agentdeck_pool_desired_replicas{namespace=\"default\",pool=\"served\"} 1",
        "agentdeck_reconciles_total",
        "agentdeck_reconcile_duration_seconds_bucket",
        "agentdeck_task_queue_to_start_seconds_count",
        "agentdeck_leader 1",
        "agentdeck_pool_agents_health{",
    ];
    eventually(
        &format!("every metric family in /metrics: {families:?}"),
        || async {
            let t = http
                .get(format!("http://{addr}/metrics"))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            families.iter().all(|f| t.contains(f)).then_some(())
        },
    )
    .await;
    // OpenMetrics, as Prometheus negotiates it: the content type says so
    // and the exposition ends with `# EOF`.
    let scraped = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(
        scraped.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = scraped.text().await.expect("metrics text");
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE agentdeck_reconciles counter\n"),
        "{text}"
    );
    // The API going away turns /healthz unhealthy only past a threshold
    // (see healthz_turns_503_…); here it stays up.
    assert_eq!(c.health().status, agentdeck::health::HealthStatus::Healthy);
    let _ = h.sandbox();
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_turns_503_while_the_api_is_unreachable_past_the_threshold_and_recovers() {
    const OUTAGE_SECONDS: u64 = 30;
    let h = Harness::start().await;
    let mut cfg = config();
    cfg.server.api_unreachable_seconds = 2;
    let (c, cancel) = h.controller(&cfg);
    let listener = agentdeck::server::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(agentdeck::server::serve(
        listener,
        c.clone(),
        cancel.clone(),
    ));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("http client");
    let status = || async {
        http.get(format!("http://{addr}/healthz"))
            .send()
            .await
            .ok()
            .map(|r| r.status().as_u16())
    };
    eventually("/healthz 200", || async {
        (status().await == Some(200)).then_some(())
    })
    .await;

    // The API server stops listening for a while: the watches cannot
    // reconnect. Long enough that a busy machine still sees the 2 s
    // threshold pass within it.
    h.sandbox()
        .api()
        .faults
        .restart_server(Duration::from_secs(OUTAGE_SECONDS));
    let down = Instant::now();
    eventually("/healthz 503", || async {
        (status().await == Some(503)).then_some(())
    })
    .await;
    let after = down.elapsed();
    assert!(
        after >= Duration::from_secs(2),
        "503 after {after:?}, before the 2 s threshold"
    );
    let report = c.health();
    assert_eq!(report.status, agentdeck::health::HealthStatus::Unhealthy);

    eventually("/healthz 200 once the API is back", || async {
        (status().await == Some(200)).then_some(())
    })
    .await;
    assert!(
        down.elapsed() >= Duration::from_secs(OUTAGE_SECONDS - 1),
        "healthy again only once the API answers"
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_serves_healthz_and_exits_zero_on_sigterm_releasing_the_lease() {
    use k8s_openapi::api::coordination::v1::Lease;
    let h = Harness::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, h.sandbox().kubeconfig(NS)).expect("kubeconfig");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentdeck"))
        .arg("--daemon")
        .env_remove("AGENTDECK_SANDBOX_EXE")
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .env("AGENTDECK_CONTROLLER_NAMESPACE", NS)
        .env("AGENTDECK_SERVER__PORT", port.to_string())
        .env("AGENTDECK_LOG__FORMAT", "json")
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("daemon starts");
    h.create_pool("headless", json!({"minReplicas": 1})).await;
    eventually("the daemon reconciles", || async {
        h.replicas("headless").await
    })
    .await;
    let http = reqwest::Client::new();
    let report: agentdeck::health::HealthReport = eventually("/healthz 200", || async {
        let r = http
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
            .ok()?;
        if r.status() != 200 {
            return None;
        }
        r.json().await.ok()
    })
    .await;
    assert_eq!(report.status, agentdeck::health::HealthStatus::Healthy);
    let leases: Api<Lease> = Api::namespaced(h.client.clone(), NS);
    let holder = eventually("the daemon holds the Lease", || async {
        leases
            .get_opt("agentdeck-controller")
            .await
            .ok()
            .flatten()?
            .spec?
            .holder_identity
    })
    .await;
    assert!(!holder.is_empty());

    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().expect("pid")).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    // The daemon gives itself 4 s to stop; the deadline is for a busy
    // machine, and still catches a daemon that ignores SIGTERM.
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the daemon exits after SIGTERM")
        .expect("wait");
    assert!(status.success(), "exit status {status:?}");
    let lease = leases.get("agentdeck-controller").await.expect("lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "released on the way out"
    );
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = e.read_to_string(&mut err).await;
    }
    let first = err.lines().next().unwrap_or("");
    assert!(first.starts_with('{'), "json log lines on stderr: {first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_cannot_start_errors_the_task_after_the_scheduling_timeout() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    let template = json!({"spec": {
        "nodeSelector": {"agentdeck.dev/no-such-node": "true"},
        "containers": [
            {"name": "worker", "image": "example.com/worker-sim:1", "command": ["sim-worker"]},
            {"name": "runner", "command": ["sim-runner"]}
        ]
    }});
    h.create_pool(
        "stuck",
        json!({"executionMode": "job", "minReplicas": 0, "podTemplate": template,
               "taskDefaults": {"runnerImage": "hashicorp/terraform:1.9",
                                "schedulingTimeoutSeconds": 2}}),
    )
    .await;
    h.create_tasks("stuck", "x", 1).await;
    let task = eventually("the task Errored", || async {
        let t = h.task("x-0").await;
        (t.phase() == TaskPhase::Errored).then_some(t)
    })
    .await;
    let status = task.status.expect("status");
    let msg = status.message.unwrap_or_default();
    assert!(msg.contains("not running 2s after Job"), "{msg}");
    let job = status.job.expect("job recorded");
    eventually("the Job deleted", || async {
        h.jobs()
            .get_opt(&job)
            .await
            .expect("get")
            .is_none_or(|j| j.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    eventually("the SchedulingTimeout event", || async {
        (!h.events("x-0", "SchedulingTimeout").await.is_empty()).then_some(())
    })
    .await;
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_is_stopped() {
    let h = Harness::start().await;
    let (_c, cancel) = h.controller(&config());
    h.create_pool("calm", json!({"minReplicas": 0, "maxReplicas": 2}))
        .await;
    let task: AgentTask = serde_json::from_value(json!({
        "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
        "metadata": {"name": "c-0"},
        "spec": {"pool": "calm", "command": ["terraform", "apply"], "cancel": true}
    }))
    .expect("task");
    h.tasks()
        .create(&PostParams::default(), &task)
        .await
        .expect("created");
    let task = eventually("the task Cancelled", || async {
        let t = h.task("c-0").await;
        (t.phase() == TaskPhase::Cancelled).then_some(t)
    })
    .await;
    assert!(task.status.and_then(|s| s.finished_at).is_some());
    // A cancelled task is no work: the pool stays at 0.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.replicas("calm").await, Some(0));
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_controller_only_watches_through_a_debug_pod_sweep() {
    let h = Harness::start().await;
    let (c, cancel) = h.controller(&config());
    eventually("watches synced", || async { c.is_synced().then_some(()) }).await;
    // The debug-pod sweep lists its pods once the others are in: two lists
    // of pods (the agents' and the debug pods'), then nothing but watches.
    eventually("the debug-pod watch listed", || async {
        let lists = h
            .sandbox()
            .api()
            .faults
            .requests()
            .get("GET /api/v1/namespaces/default/pods")
            .copied()
            .unwrap_or(0);
        (lists >= 2).then_some(())
    })
    .await;
    h.sandbox().api().faults.reset_requests();
    // Long enough for a debug pod sweep, which once listed pods.
    tokio::time::sleep(controller::debugpods::SWEEP_INTERVAL + Duration::from_secs(2)).await;
    let reads: Vec<(String, u64)> = h
        .sandbox()
        .api()
        .faults
        .requests()
        .into_iter()
        .filter(|(k, _)| k.starts_with("GET ") && !k.ends_with("/version"))
        .collect();
    assert!(reads.is_empty(), "an idle controller read {reads:?}");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_tasks_go_after_their_pools_task_history_and_their_record_stays() {
    finished_tasks_go_and_their_records_stay(false).await;
}

/// The same with the controller as `--daemon` starts it, which caches
/// finished tasks slimmed (no agent, message or output in its store): each
/// record is still the whole task's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_keeps_whole_records_of_the_finished_tasks_it_caches_slimmed() {
    finished_tasks_go_and_their_records_stay(true).await;
}

async fn finished_tasks_go_and_their_records_stay(daemon: bool) {
    let h = Harness::start().await;
    let (_c, cancel) = if daemon {
        h.daemon(&config())
    } else {
        h.controller(&config())
    };
    h.create_pool(
        "kept",
        json!({"minReplicas": 0, "maxReplicas": 1,
               "taskHistory": {"ttlSecondsAfterFinished": 4, "succeededLimit": 2, "failedLimit": 5}}),
    )
    .await;
    h.create_tasks("kept", "t", 6).await;
    let now = jiff::Timestamp::now();
    let at = |secs: i64| (now - jiff::SignedDuration::from_secs(secs)).to_string();
    // Four succeeded (two beyond the limit), one failed with its output,
    // one still running.
    for (i, secs) in [(0, 3), (1, 2), (2, 1), (3, 0)] {
        h.set_task_status(
            &format!("t-{i}"),
            json!({"phase": "Succeeded", "attempts": 1, "finishedAt": at(secs)}),
        )
        .await;
    }
    h.set_task_status(
        "t-4",
        json!({"phase": "Failed", "attempts": 1, "exitCode": 3, "finishedAt": at(0),
               "agent": "agent-7", "message": "exited with code 3 after 1.0s",
               "outputTail": "Error: state lock held\nexit 3"}),
    )
    .await;
    h.set_task_status("t-5", running_on("some-agent", 1)).await;
    let names = || async {
        let mut n: Vec<String> = h
            .tasks()
            .list(&ListParams::default())
            .await
            .expect("tasks")
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        n.sort();
        n
    };
    // The limit first: the two oldest succeeded go at once.
    eventually("the succeeded beyond the limit deleted", || async {
        let n = names().await;
        (!n.contains(&"t-0".to_owned()) && !n.contains(&"t-1".to_owned())).then_some(())
    })
    .await;
    // Then the TTL: every finished task, never the running one.
    let left = eventually("the finished tasks past the TTL deleted", || async {
        let n = names().await;
        (n.len() == 1).then_some(n)
    })
    .await;
    assert_eq!(left, ["t-5"], "a running task is never deleted");
    // What each was is still readable.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(h.client.clone(), NS);
    let history = cms
        .get("agentdeck-task-history-kept")
        .await
        .expect("the history ConfigMap");
    assert_eq!(
        history.owner_references()[0].kind,
        "AgentPool",
        "it goes with its pool"
    );
    let failed = controller::retention::record_in(&history, "t-4").expect("t-4's record");
    assert_eq!(failed.phase, TaskPhase::Failed);
    assert_eq!(failed.exit_code, Some(3));
    assert_eq!(failed.agent.as_deref(), Some("agent-7"));
    assert_eq!(
        failed.message.as_deref(),
        Some("exited with code 3 after 1.0s")
    );
    assert_eq!(
        failed.output_tail.as_deref(),
        Some("Error: state lock held\nexit 3")
    );
    assert!(
        failed.deleted_because.contains("past the 4s to keep"),
        "{}",
        failed.deleted_because
    );
    let first = controller::retention::record_in(&history, "t-0").expect("t-0's record");
    assert_eq!(first.deleted_because, "2 newer succeeded tasks are kept");
    assert!(controller::retention::record_in(&history, "t-5").is_none());
    cancel.cancel();
}
