//! Carrying actions out against the API: read the objects, plan, preview
//! through the server-side dry run, apply with the resourceVersion read as
//! a precondition (a 409 is planned again on fresh data, never applied
//! blindly), record an Event on each changed object.

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PropagationPolicy,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::action::{Action, Actor, TaskSelection};
use super::audit::{AuditObject, AuditRecord};
use super::error::{OpsError, Result};
use super::plan::{self, Change, Kind, State};
use crate::cluster::Connection;
use crate::crd::{AgentPool, AgentTask, LABEL_COMPONENT, LABEL_POOL, TaskPhase};
use crate::plan::manifests::{COMPONENT_AGENT, job_name, label_value};

/// Times an action is planned again after a 409 before giving up.
pub const MAX_ATTEMPTS: u32 = 5;
/// Reporting controller of the Events actions record.
pub const REPORTER: &str = "agentdeck-ops";

/// What an action would change, as the API's dry run answers, and what
/// that means.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    /// `drain pool alpha`.
    pub summary: String,
    /// Each object the action writes and its diff from the dry run.
    pub objects: Vec<ObjectDiff>,
    /// Impact in words.
    pub impact: Vec<String>,
    /// Targets already as asked.
    pub unchanged: Vec<String>,
}

/// One object's diff.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectDiff {
    /// `AgentPool/alpha`.
    pub object: String,
    /// `path: before → after` lines.
    pub lines: Vec<String>,
}

impl Preview {
    /// Nothing would be written.
    pub fn changes_nothing(&self) -> bool {
        self.objects.is_empty()
    }

    /// The preview as the CLI prints it (and the console's dialog shows it).
    pub fn render(&self) -> String {
        let mut out = format!("{}:\n", self.summary);
        for o in &self.objects {
            out.push_str(&format!("  {}\n", o.object));
            for l in &o.lines {
                out.push_str(&format!("    {l}\n"));
            }
        }
        for u in &self.unchanged {
            out.push_str(&format!("  unchanged: {u}\n"));
        }
        if !self.impact.is_empty() {
            out.push_str("Impact:\n");
            for i in &self.impact {
                out.push_str(&format!("  - {i}\n"));
            }
        }
        out
    }
}

/// What an applied action did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub summary: String,
    /// The audit record of it (also what the CLI prints).
    pub record: AuditRecord,
}

impl Outcome {
    /// One line per changed object, for the CLI and the console's status line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for o in &self.record.objects {
            out.push_str(&format!("{} changed: {}\n", o.object, o.changes.join("; ")));
        }
        for u in &self.record.unchanged {
            out.push_str(&format!("unchanged: {u}\n"));
        }
        out
    }
}

fn resource(kind: Kind) -> ApiResource {
    match kind {
        Kind::AgentPool => ApiResource::erase::<AgentPool>(&()),
        Kind::Pod => ApiResource::erase::<Pod>(&()),
        Kind::AgentTask => ApiResource::erase::<AgentTask>(&()),
        Kind::Job => ApiResource::erase::<Job>(&()),
    }
}

/// Checks that `pool` is an AgentPool in the connection's namespace.
pub async fn require_pool(conn: &Connection, pool: &str) -> Result<()> {
    let ns = &conn.namespace;
    let pools: Api<AgentPool> = Api::namespaced(conn.client.clone(), ns);
    let known: Vec<String> = pools
        .list(&ListParams::default())
        .await
        .map_err(OpsError::api(format!("list AgentPools in namespace {ns}")))?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    if known.iter().any(|p| p == pool) {
        Ok(())
    } else {
        Err(OpsError::UnknownPool {
            pool: pool.to_owned(),
            namespace: ns.clone(),
            known,
        })
    }
}

/// Reads what `action` touches.
pub async fn load(conn: &Connection, action: &Action) -> Result<State> {
    let ns = conn.namespace.clone();
    let mut state = State {
        namespace: ns.clone(),
        ..State::default()
    };
    if let Some(pool) = action.pool() {
        let pools: Api<AgentPool> = Api::namespaced(conn.client.clone(), &ns);
        let all = pools
            .list(&ListParams::default())
            .await
            .map_err(OpsError::api(format!("list AgentPools in namespace {ns}")))?;
        state.pool_names = all.items.iter().map(|p| p.name_any()).collect();
        state.pool = all.items.into_iter().find(|p| p.name_any() == pool);
        if state.pool.is_some() {
            let pods: Api<Pod> = Api::namespaced(conn.client.clone(), &ns);
            let selector = format!(
                "{LABEL_POOL}={},{LABEL_COMPONENT}={COMPONENT_AGENT}",
                label_value(pool)
            );
            state.agents = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(OpsError::api(format!("list the agents of pool {pool}")))?
                .items;
            state.agents.sort_by_key(|p| p.name_any());
            state.pool_tasks = pool_tasks(conn, pool).await?;
        }
    }
    if let Action::CancelTasks(sel) | Action::RetryTasks(sel) = action {
        let (tasks, missing) = select_tasks(conn, sel).await?;
        state.tasks = tasks;
        state.missing_tasks = missing;
        if matches!(action, Action::RetryTasks(_)) {
            let jobs: Api<Job> = Api::namespaced(conn.client.clone(), &ns);
            for task in &state.tasks {
                let Ok(name) = job_name(task) else { continue };
                if let Some(job) = jobs
                    .get_opt(&name)
                    .await
                    .map_err(OpsError::api(format!("read Job {name}")))?
                {
                    state.jobs.insert(
                        task.name_any(),
                        serde_json::to_value(job).unwrap_or_default(),
                    );
                }
            }
        }
    }
    Ok(state)
}

async fn pool_tasks(conn: &Connection, pool: &str) -> Result<Vec<AgentTask>> {
    let tasks: Api<AgentTask> = Api::namespaced(conn.client.clone(), &conn.namespace);
    Ok(tasks
        .list(&ListParams::default())
        .await
        .map_err(OpsError::api(format!("list the tasks of pool {pool}")))?
        .items
        .into_iter()
        .filter(|t| t.spec.pool == pool)
        .collect())
}

async fn select_tasks(
    conn: &Connection,
    sel: &TaskSelection,
) -> Result<(Vec<AgentTask>, Vec<String>)> {
    let api: Api<AgentTask> = Api::namespaced(conn.client.clone(), &conn.namespace);
    let mut tasks = Vec::new();
    let mut missing = Vec::new();
    for name in &sel.names {
        match crate::cluster::get_served(&api, name)
            .await
            .map_err(OpsError::api(format!("read AgentTask {name}")))?
        {
            Some(t) => tasks.push(t),
            None => missing.push(name.clone()),
        }
    }
    if let Some(selector) = &sel.selector {
        let listed = api
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| match e {
                kube::Error::Api(s) if s.code == 400 => OpsError::BadValue {
                    flag: "-l",
                    value: selector.clone(),
                    message: s.message,
                },
                source => OpsError::Api {
                    what: format!("list AgentTasks matching {selector}"),
                    source,
                },
            })?;
        tasks.extend(listed.items);
    }
    let mut seen = BTreeSet::new();
    tasks.retain(|t| seen.insert(t.name_any()));
    Ok((tasks, missing))
}

/// Sends one planned change (or its dry run) and returns the object the
/// API answers with (for a delete, the object as it was). A change planned
/// on data that has moved since gets a 409 from the API.
pub async fn send(conn: &Connection, change: &Change, dry_run: bool) -> Result<Value, kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(conn.client.clone(), &conn.namespace, &resource(change.kind));
    if change.delete {
        let dp = DeleteParams {
            dry_run,
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        api.delete(&change.name, &dp).await?;
        return Ok(change.before.clone());
    }
    let pp = PatchParams {
        dry_run,
        ..PatchParams::default()
    };
    let patch = change.patch();
    let obj = if change.status {
        api.patch_status(&change.name, &pp, &Patch::Merge(&patch))
            .await?
    } else {
        api.patch(&change.name, &pp, &Patch::Merge(&patch)).await?
    };
    Ok(serde_json::to_value(obj).unwrap_or_default())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// What `action` would change now: planned on the objects as they are,
/// each write sent as a server-side dry run (nothing is stored), and the
/// diff taken from what the API answers. `actor` is who would act (holds
/// and retries record it).
pub async fn preview(conn: &Connection, action: &Action, actor: &Actor) -> Result<Preview> {
    let mut last = String::new();
    for _ in 0..MAX_ATTEMPTS {
        let state = load(conn, action).await?;
        let plan = plan::plan(action, &state, &actor.user, Timestamp::now())?;
        let mut objects = Vec::new();
        let mut raced = false;
        for change in &plan.changes {
            let lines = match send(conn, change, true).await {
                Ok(_) if change.delete => vec!["(deleted)".to_string()],
                Ok(after) => super::diff::lines(&change.before, &after),
                Err(e) if is_conflict(&e) => {
                    last = change.object();
                    raced = true;
                    break;
                }
                Err(source) => {
                    return Err(OpsError::Api {
                        what: format!("preview the change of {} (dry run)", change.object()),
                        source,
                    });
                }
            };
            objects.push(ObjectDiff {
                object: change.object(),
                lines,
            });
        }
        if !raced {
            return Ok(Preview {
                summary: plan.summary,
                objects,
                impact: plan.impact,
                unchanged: plan.unchanged,
            });
        }
    }
    Err(OpsError::Conflict {
        object: last,
        attempts: MAX_ATTEMPTS,
        done: "nothing was changed".into(),
    })
}

/// Applies `action` as `actor`: planned on fresh objects, each write
/// carrying the resourceVersion read; a 409 plans the rest again on fresh
/// data (up to [`MAX_ATTEMPTS`]). Each changed object gets an Event naming
/// the actor and the change. The caller appends `Outcome::record` to the
/// audit file.
pub async fn apply(conn: &Connection, action: &Action, actor: &Actor) -> Result<Outcome> {
    let recorder = Recorder::new(
        conn.client.clone(),
        Reporter {
            controller: REPORTER.to_owned(),
            instance: Some(actor.user.clone()),
        },
    );
    let mut current = action.clone();
    let mut done_objects: BTreeSet<String> = BTreeSet::new();
    let mut done_tasks: BTreeSet<String> = BTreeSet::new();
    let mut objects: Vec<AuditObject> = Vec::new();
    let mut first: Option<plan::Plan> = None;
    let mut last_conflict = String::new();
    for attempt in 1..=MAX_ATTEMPTS {
        let state = load(conn, &current).await?;
        let plan = match plan::plan(&current, &state, &actor.user, Timestamp::now()) {
            Ok(p) => p,
            // Everything named was done before the race: nothing is left.
            Err(OpsError::NothingSelected(_)) if !done_tasks.is_empty() => plan::Plan::default(),
            Err(e) => return Err(e),
        };
        let mut raced = false;
        for change in &plan.changes {
            if done_objects.contains(&change.object()) {
                continue;
            }
            match send(conn, change, false).await {
                Ok(after) => {
                    record_done(&recorder, action, actor, change, &after, &mut objects).await;
                }
                Err(e) if change.delete && is_not_found(&e) => {}
                Err(e) if is_conflict(&e) => {
                    tracing::debug!(object = %change.object(), attempt, "conflict; planning again on fresh data");
                    last_conflict = change.object();
                    raced = true;
                    break;
                }
                Err(source) => {
                    return Err(OpsError::Api {
                        what: format!("change {} ({})", change.object(), done_so_far(&objects)),
                        source,
                    });
                }
            }
            done_objects.insert(change.object());
            if change.kind == Kind::AgentTask {
                done_tasks.insert(change.name.clone());
            }
        }
        let first = first.get_or_insert_with(|| plan.clone());
        if !raced {
            let record = AuditRecord::new(
                actor,
                &conn.namespace,
                action,
                &first.summary,
                objects,
                plan.unchanged.clone(),
                "applied".into(),
            );
            return Ok(Outcome {
                summary: first.summary.clone(),
                record,
            });
        }
        current = action.without_tasks(&done_tasks);
    }
    Err(OpsError::Conflict {
        object: last_conflict,
        attempts: MAX_ATTEMPTS,
        done: done_so_far(&objects),
    })
}

fn done_so_far(objects: &[AuditObject]) -> String {
    if objects.is_empty() {
        "nothing was changed".into()
    } else {
        format!(
            "already changed: {}",
            objects
                .iter()
                .map(|o| o.object.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

async fn record_done(
    recorder: &Recorder,
    action: &Action,
    actor: &Actor,
    change: &Change,
    after: &Value,
    objects: &mut Vec<AuditObject>,
) {
    let lines = if change.delete {
        vec!["deleted".to_string()]
    } else {
        super::diff::lines(&change.before, after)
    };
    objects.push(AuditObject::of(change, after, lines.clone()));
    // A deleted Job has nowhere to keep an Event; its task's Event says it.
    if change.delete {
        return;
    }
    let reference = reference(after);
    let mut note = format!("{} (via {}): {}", actor.user, actor.via, lines.join("; "));
    if note.len() > 1000 {
        let mut end = 997;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    let ev = Event {
        type_: EventType::Normal,
        reason: action.event_reason().to_owned(),
        note: Some(note),
        action: action.verb().to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &reference).await {
        tracing::warn!(error = %e, object = %change.object(), "cannot record the audit Event");
    }
}

fn reference(obj: &Value) -> ObjectReference {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_owned);
    ObjectReference {
        api_version: s("/apiVersion"),
        kind: s("/kind"),
        name: s("/metadata/name"),
        namespace: s("/metadata/namespace"),
        uid: s("/metadata/uid"),
        resource_version: s("/metadata/resourceVersion"),
        field_path: None,
    }
}

/// How far a drain has come: the drained agents and which are still busy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainProgress {
    /// Agents (pods) the drain applies to.
    pub agents: Vec<String>,
    /// `(agent, task)` still running.
    pub busy: Vec<(String, String)>,
}

impl DrainProgress {
    /// Every drained agent is idle.
    pub fn done(&self) -> bool {
        self.busy.is_empty()
    }

    /// `1 of 3 drained agents still busy: a-0 (task t-1)`, where `total`
    /// is how many agents the drain started with (idle ones may be gone).
    pub fn line(&self, total: usize) -> String {
        if self.busy.is_empty() {
            return "drained: no drained agent is busy".into();
        }
        let busy: Vec<String> = self
            .busy
            .iter()
            .map(|(a, t)| format!("{a} (task {t})"))
            .collect();
        format!(
            "{} of {} drained agents still busy: {}",
            self.busy.len(),
            total.max(self.busy.len()),
            busy.join(", ")
        )
    }
}

/// Progress of draining `pool` (or one `agent` of it), from the API.
pub async fn drain_progress(
    conn: &Connection,
    pool: &str,
    agent: Option<&str>,
) -> Result<DrainProgress> {
    let pods: Api<Pod> = Api::namespaced(conn.client.clone(), &conn.namespace);
    let selector = format!(
        "{LABEL_POOL}={},{LABEL_COMPONENT}={COMPONENT_AGENT}",
        label_value(pool)
    );
    let mut agents: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(OpsError::api(format!("list the agents of pool {pool}")))?
        .items
        .iter()
        .map(|p| p.name_any())
        .filter(|n| agent.is_none_or(|a| a == n))
        .collect();
    agents.sort();
    let busy = pool_tasks(conn, pool)
        .await?
        .into_iter()
        .filter(|t| matches!(t.phase(), TaskPhase::Running | TaskPhase::Scheduled))
        .filter_map(|t| {
            let on = t
                .status
                .as_ref()
                .and_then(|s| s.agent.clone())
                .unwrap_or_else(|| "(job)".into());
            agent.is_none_or(|a| a == on).then(|| (on, t.name_any()))
        })
        .collect();
    Ok(DrainProgress { agents, busy })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_progress_names_the_busy_agents_until_none_is() {
        let p = |agents: &[&str], busy: &[(&str, &str)]| DrainProgress {
            agents: agents.iter().map(|s| s.to_string()).collect(),
            busy: busy
                .iter()
                .map(|(a, t)| (a.to_string(), t.to_string()))
                .collect(),
        };
        let cases = [
            (
                p(&["a-0", "a-1", "a-2"], &[("a-0", "t1"), ("a-2", "t2")]),
                3,
                "2 of 3 drained agents still busy: a-0 (task t1), a-2 (task t2)",
                false,
            ),
            // Idle agents already gone: the count is what the drain began with.
            (
                p(&["a-0"], &[("a-0", "t1")]),
                3,
                "1 of 3 drained agents still busy: a-0 (task t1)",
                false,
            ),
            (p(&[], &[]), 3, "drained: no drained agent is busy", true),
        ];
        for (progress, total, line, done) in cases {
            assert_eq!(progress.line(total), line);
            assert_eq!(progress.done(), done, "{line}");
        }
    }

    #[test]
    fn a_preview_lists_objects_diffs_and_impact() {
        let preview = Preview {
            summary: "drain pool alpha".into(),
            objects: vec![ObjectDiff {
                object: "AgentPool/alpha".into(),
                lines: vec!["spec.drain: false → true".into()],
            }],
            impact: vec!["1 busy agent will finish its task first (t)".into()],
            unchanged: vec![],
        };
        assert_eq!(
            preview.render(),
            "drain pool alpha:\n  AgentPool/alpha\n    spec.drain: false → true\n\
             Impact:\n  - 1 busy agent will finish its task first (t)\n"
        );
        assert!(!preview.changes_nothing());
    }
}
