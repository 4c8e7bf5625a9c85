//! Deployment mode: a long-lived agent claiming its pool's tasks.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::plan::{self, StopPlan};
use super::process::{self, RunEnv, StopOrder};
use super::state::{self, AgentState};
use super::status::StatusWriter;
use super::{Agent, AgentError};
use crate::crd::{ANNOTATION_DEBUG, ANNOTATION_DRAIN, AgentPool, AgentTask};

/// The live switches of one agent, from its pool and its pod.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Switches {
    pool_debug: bool,
    pool_drain: bool,
    pod_debug: bool,
    pod_drain: bool,
}

/// Applies switch changes: drain to the state, debug to the log level.
struct SwitchBoard {
    switches: Mutex<(Switches, String)>,
    configured_level: String,
    agent: Arc<Agent>,
}

impl SwitchBoard {
    fn update(&self, change: impl FnOnce(&mut Switches)) {
        let mut guard = self.switches.lock().unwrap_or_else(PoisonError::into_inner);
        let (switches, level) = &mut *guard;
        change(switches);
        let drain = switches.pool_drain || switches.pod_drain;
        if drain != self.agent.state.draining() && !drain {
            tracing::info!("drain lifted; claiming again");
        } else if drain && !self.agent.state.draining() {
            tracing::info!("draining: finishing current work, claiming nothing new");
        }
        self.agent.state.set_drain_requested(drain);
        let want = plan::log_level(
            switches.pool_debug,
            switches.pod_debug,
            &self.configured_level,
        );
        if want != *level
            && let Some(t) = &self.agent.telemetry
        {
            match t.set_level(&want) {
                Ok(()) => {
                    tracing::info!(level = %want, "log level switched to {want}");
                    *level = want;
                }
                Err(e) => tracing::warn!(error = %e, "cannot switch the log level"),
            }
        }
    }
}

/// Watches the agent's pool and its own pod for the debug and drain
/// switches; `wake` is notified on every change (a lifted drain means
/// claiming again).
pub(super) fn spawn_switch_watchers(agent: &Arc<Agent>, wake: Arc<Notify>) {
    let board = Arc::new(SwitchBoard {
        switches: Mutex::new((Switches::default(), agent.config.log.level.clone())),
        configured_level: agent.config.log.level.clone(),
        agent: agent.clone(),
    });
    let pools: Api<AgentPool> = Api::namespaced(agent.client.clone(), &agent.namespace);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={}", agent.id.pool));
    let (b, w, s) = (board.clone(), wake.clone(), agent.state.clone());
    tokio::spawn(async move {
        let mut events = watcher::watcher(pools, cfg).default_backoff().boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(Event::Apply(p) | Event::InitApply(p)) => {
                    s.touch();
                    s.set_max_attempts(p.spec.task_defaults.max_attempts);
                    b.update(|sw| {
                        sw.pool_debug = p.spec.debug;
                        sw.pool_drain = p.spec.drain;
                    });
                    w.notify_one();
                }
                Ok(Event::Delete(_)) => {
                    s.touch();
                    b.update(|sw| {
                        sw.pool_debug = false;
                        sw.pool_drain = false;
                    });
                }
                Ok(_) => s.touch(),
                // Health follows the task watch and the status writes, the
                // agent's real work; this watch only carries switches.
                Err(e) => tracing::warn!(error = %e, "pool watch failed; retrying"),
            }
        }
    });
    let pods: Api<Pod> = Api::namespaced(agent.client.clone(), &agent.namespace);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={}", agent.id.agent));
    let s = agent.state.clone();
    tokio::spawn(async move {
        let mut events = watcher::watcher(pods, cfg).default_backoff().boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(Event::Apply(p) | Event::InitApply(p)) => {
                    s.touch();
                    let annotations = p.metadata.annotations.unwrap_or_default();
                    let on = |k: &str| plan::annotation_on(annotations.get(k).map(String::as_str));
                    board.update(|sw| {
                        sw.pod_debug = on(ANNOTATION_DEBUG);
                        sw.pod_drain = on(ANNOTATION_DRAIN);
                    });
                    wake.notify_one();
                }
                Ok(_) => s.touch(),
                Err(e) => tracing::debug!(error = %e, "pod watch failed; retrying"),
            }
        }
    });
}

/// While the API is marked unreachable, asks it for one task every
/// `every`: a watch that recovered after an error emits nothing until
/// something changes, so without this an idle agent would stay unhealthy.
pub(super) fn spawn_reachability_probe(api: Api<AgentTask>, state: Arc<AgentState>) {
    const EVERY: Duration = Duration::from_secs(2);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tick.tick().await;
            if !state.reachable() && api.list(&ListParams::default().limit(1)).await.is_ok() {
                tracing::info!("the API answers again");
                state.set_reachable();
            }
        }
    });
}

/// The field selector for the pool's tasks when the API server supports it
/// (`selectableFields`, Kubernetes 1.30+); otherwise tasks are filtered
/// here, which the claim planner does anyway.
async fn pool_field_selector(api: &Api<AgentTask>, pool: &str) -> Option<String> {
    let selector = format!("spec.pool={pool}");
    match api
        .list(&ListParams::default().fields(&selector).limit(1))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 400 => {
            tracing::info!("the API server cannot select tasks by pool; filtering here");
            None
        }
        _ => Some(selector),
    }
}

/// Starts the reflector of the pool's tasks; `wake` is notified on every
/// event, and the state learns of activity, sync and API errors.
pub(super) fn spawn_task_reflector(
    api: Api<AgentTask>,
    cfg: watcher::Config,
    state: Arc<AgentState>,
    wake: Arc<Notify>,
) -> Store<AgentTask> {
    let (store, writer) = reflector::store();
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, cfg)
            .default_backoff()
            .reflect(writer)
            .boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(Event::InitDone) => {
                    state.api_ok();
                    state.set_synced();
                    wake.notify_one();
                }
                Ok(Event::Init | Event::InitApply(_)) => state.api_ok(),
                Ok(_) => {
                    state.api_ok();
                    wake.notify_one();
                }
                Err(e) => {
                    state.api_failed();
                    tracing::warn!(error = %e, "task watch failed; retrying");
                }
            }
        }
    });
    store
}

/// Runs the agent until SIGTERM/SIGINT (then stops per its stop mode), or
/// after one task with `--single-run`.
pub async fn run_pool_agent(agent: Arc<Agent>) -> Result<(), AgentError> {
    let cancel = CancellationToken::new();
    let _stop_server = cancel.clone().drop_guard();
    let addr = state::bind_addr(agent.id.pod_ip.as_deref(), agent.config.health_port);
    state::serve_health(addr, agent.state.clone(), cancel.clone()).await?;
    tracing::info!(%addr, "serving /healthz");

    let wake = Arc::new(Notify::new());
    spawn_switch_watchers(&agent, wake.clone());
    let tasks: Api<AgentTask> = Api::namespaced(agent.client.clone(), &agent.namespace);
    let mut cfg = watcher::Config::default();
    if let Some(sel) = pool_field_selector(&tasks, &agent.id.pool).await {
        cfg = cfg.fields(&sel);
    }
    let store = spawn_task_reflector(tasks.clone(), cfg, agent.state.clone(), wake.clone());
    spawn_reachability_probe(tasks.clone(), agent.state.clone());
    let writer = StatusWriter::new(tasks, agent.id.agent.clone(), agent.state.clone());
    let run_env = run_env(&agent, &writer, &store).await?;

    let concurrency = usize::try_from(agent.config.concurrency)
        .unwrap_or(1)
        .max(1);
    let mut running: HashMap<String, watch::Sender<StopOrder>> = HashMap::new();
    let mut joins: JoinSet<String> = JoinSet::new();
    let mut lost: HashMap<String, String> = HashMap::new();
    let mut claimed = 0usize;
    let mut poll = tokio::time::interval(agent.config.poll_interval());
    let terminated = crate::signal::terminated();
    tokio::pin!(terminated);

    let mut orphans_given_back = false;

    loop {
        // Also when draining: the orphans' runs are gone either way.
        if !orphans_given_back && agent.state.synced() {
            orphans_given_back = true;
            give_back_orphans(&agent, &store, &writer, &running).await;
        }
        let budget_left = !agent.single_run || claimed == 0;
        if agent.state.may_claim() && budget_left && running.len() < concurrency {
            let names: HashSet<String> = running.keys().cloned().collect();
            let candidates = plan::spread(
                &plan::claim_candidates(&store.state(), &agent.id.pool, &names, &lost),
                &agent.id.agent,
                // Wider with more free slots: an agent claiming many tasks in
                // one pass then takes a run of them apart from the others'.
                plan::SPREAD_WINDOW * (concurrency - running.len()),
            );
            for task in candidates {
                if running.len() >= concurrency || (agent.single_run && claimed > 0) {
                    break;
                }
                let name = task.metadata.name.clone().unwrap_or_default();
                match writer.claim(&task).await {
                    Ok(Some(mine)) => {
                        claimed += 1;
                        tracing::info!(task = %name, "claimed");
                        let (tx, rx) = watch::channel(StopOrder::Run);
                        running.insert(name.clone(), tx);
                        let env = run_env.clone();
                        joins.spawn(async move {
                            process::run_task(env, mine, rx).await;
                            name
                        });
                    }
                    Ok(None) => {
                        tracing::debug!(task = %name, "another agent claimed it first");
                        if let Some(rv) = task.metadata.resource_version.clone() {
                            lost.insert(name, rv);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(task = %name, error = %e, "claim failed");
                        break;
                    }
                }
            }
        }
        if agent.single_run && claimed > 0 && running.is_empty() {
            tracing::info!("single run done");
            return Ok(());
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = poll.tick() => {
                lost.clear();
                // Looking for work is activity: an idle agent whose API
                // answers is fresh, not offline with its tasks requeued
                // (health freshness is judged against the poll interval).
                if agent.state.reachable() {
                    agent.state.touch();
                }
            }
            Some(done) = joins.join_next() => {
                if let Ok(name) = done {
                    running.remove(&name);
                }
            }
            _ = &mut terminated => {
                agent.state.set_stopping();
                let plan = plan::stop_plan(
                    agent.config.stop_mode,
                    agent.config.drain_timeout(),
                    agent.config.grace_shutdown(),
                );
                tracing::info!(mode = agent.config.stop_mode.as_str(), running = running.len(), "stopping");
                stop(plan, &running, &mut joins).await;
                tracing::info!("stopped");
                return Ok(());
            }
        }
    }
}

/// What each task run shares: status writes, the watched tasks, the
/// environment it may forward, its work directory and redactor.
async fn run_env(
    agent: &Agent,
    writer: &StatusWriter,
    store: &Store<AgentTask>,
) -> Result<Arc<RunEnv>, AgentError> {
    let work_dir = agent.config.work_dir.clone();
    std::fs::create_dir_all(&work_dir).map_err(|source| AgentError::SharedDir {
        path: work_dir.clone(),
        source,
    })?;
    let token = agent.token();
    let redactor = super::secrets::redactor_for(
        agent.client.clone(),
        &agent.namespace,
        Some(&agent.id.agent),
        crate::plan::manifests::AGENT_CONTAINER,
        token.as_deref(),
        &agent.env,
    )
    .await;
    Ok(Arc::new(RunEnv {
        writer: writer.clone(),
        store: store.clone(),
        state: agent.state.clone(),
        agent_env: agent.env.clone(),
        allowlist: agent.config.env_forward_allowlist.clone(),
        token,
        work_dir,
        heartbeat: agent.config.heartbeat(),
        grace: agent.config.grace_shutdown(),
        redactor: Arc::new(redactor),
    }))
}

/// Requeues the tasks an earlier process of this pod claimed and did not
/// finish (see [`plan::orphaned_claims`]), once the task list is synced and
/// before this process claims anything.
async fn give_back_orphans(
    agent: &Agent,
    store: &Store<AgentTask>,
    writer: &StatusWriter,
    running: &HashMap<String, watch::Sender<StopOrder>>,
) {
    let names: HashSet<String> = running.keys().cloned().collect();
    for (name, attempts) in plan::orphaned_claims(&store.state(), &agent.id.agent, &names) {
        let reason = format!("agent {} restarted while running it", agent.id.agent);
        tracing::warn!(task = %name, attempt = attempts, "giving back a task an earlier run of this agent left behind");
        let max_attempts = agent.state.max_attempts();
        let now = jiff::Timestamp::now();
        if let Err(e) = writer
            .finish(&name, attempts, None, |s| {
                s.requeued(&reason, max_attempts, now)
            })
            .await
        {
            tracing::warn!(task = %name, error = %e, "cannot give the task back");
        }
    }
}

/// Carries out `plan` on the running tasks and waits until each has
/// finished or been given back.
async fn stop(
    plan: StopPlan,
    running: &HashMap<String, watch::Sender<StopOrder>>,
    joins: &mut JoinSet<String>,
) {
    let order_all = |order: StopOrder| {
        for tx in running.values() {
            let _ = tx.send(order);
        }
    };
    match plan {
        StopPlan::Drain { timeout, grace } => {
            let drained = tokio::time::timeout(timeout, async {
                while joins.join_next().await.is_some() {}
            })
            .await;
            if drained.is_err() {
                tracing::warn!(
                    seconds = timeout.as_secs(),
                    "drain timeout passed; stopping the tasks left"
                );
                order_all(StopOrder::Terminate(grace));
            }
        }
        StopPlan::Grace { grace } => order_all(StopOrder::Terminate(grace)),
        StopPlan::Force => order_all(StopOrder::Kill),
    }
    // Bounded by the grace given to each task, plus its final write.
    let _ = tokio::time::timeout(Duration::from_secs(3600), async {
        while joins.join_next().await.is_some() {}
    })
    .await;
}
