//! What is kept of a task's or a pod's output once the pod is gone, and of
//! a task once it is deleted: for the console's log view, `agentdeck task
//! show` and the bundle.
//!
//! Three places, most precise first: the task's own output (its last
//! lines, written by its agent at the end of the run into a ConfigMap of
//! the task's, or by older agents into its `status.outputTail`: see
//! [`crate::crd::output`]), the
//! record of a deleted task in its pool's history ConfigMap
//! ([`crate::controller::retention`]), and the final log tail of the pod
//! the controller keeps ([`crate::controller::tails`]).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::crd::AgentTask;
use crate::crd::output::Found;
use crate::ops::bundle::LABEL_LOG_TAILS;
use crate::plan::retention::TaskRecord;
use crate::plan::retention::{LABEL_TASK_HISTORY, record_in};

/// Output found, and where it came from (said to the reader).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub lines: Vec<String>,
    pub from: String,
}

/// A task as it is, or as its record keeps it once deleted.
#[derive(Clone, Debug)]
pub enum TaskNow {
    Live(Box<AgentTask>),
    Deleted(Box<TaskRecord>),
}

/// The task `name` of `namespace`: live, or its record in a pool's history.
pub async fn find_task(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<TaskNow>, kube::Error> {
    let api: Api<AgentTask> = Api::namespaced(client.clone(), namespace);
    if let Some(task) = api.get_opt(name).await? {
        return Ok(Some(TaskNow::Live(Box::new(task))));
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let histories = cms
        .list(&ListParams::default().labels(&format!("{LABEL_TASK_HISTORY}=true")))
        .await?;
    Ok(histories
        .items
        .iter()
        .find_map(|cm| record_in(cm, name))
        .map(|r| TaskNow::Deleted(Box::new(r))))
}

/// The kept output of task `name`: its `status.outputTail`, or its
/// record's once it is deleted.
pub async fn task_output(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Kept>, kube::Error> {
    Ok(match find_task(client, namespace, name).await? {
        Some(TaskNow::Live(task)) => crate::crd::output::read(client, &task)
            .await?
            .map(|found| {
                let lines: Vec<String> = found.text().lines().map(str::to_owned).collect();
                Kept {
                    from: format!(
                        "the last {} lines task {name} printed, kept in {}",
                        lines.len(),
                        match &found {
                            Found::Status(_) => "its status (outputTail)".to_owned(),
                            Found::ConfigMap(cm, _) => format!("ConfigMap {cm}"),
                        }
                    ),
                    lines,
                }
            }),
        Some(TaskNow::Deleted(record)) => record.output_tail.as_deref().map(|tail| Kept {
            lines: tail.lines().map(str::to_owned).collect(),
            from: format!(
                "task {name} was deleted at {} ({}); its last lines as kept in agentdeck-task-history-{}",
                record.deleted_at, record.deleted_because, record.pool
            ),
        }),
        None => None,
    })
}

/// The final log tail the controller kept of `pod` (its `container`, or
/// every container kept when `None`).
pub async fn pod_tail(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
) -> Result<Option<Kept>, kube::Error> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let tails = cms
        .list(&ListParams::default().labels(&format!("{LABEL_LOG_TAILS}=true")))
        .await?;
    for cm in &tails.items {
        let value = serde_json::to_value(cm).unwrap_or_default();
        let found: Vec<(String, String)> = crate::plan::tails::entries(&value)
            .into_iter()
            .filter(|(p, c, _)| p == pod && container.is_none_or(|want| want == c))
            .map(|(_, c, text)| (c, text))
            .collect();
        if !found.is_empty() {
            let containers: Vec<&str> = found.iter().map(|(c, _)| c.as_str()).collect();
            return Ok(Some(Kept {
                lines: found
                    .iter()
                    .flat_map(|(_, text)| text.lines().map(str::to_owned))
                    .collect(),
                from: format!(
                    "the final log lines of pod {pod} ({}) the controller kept in {}",
                    containers.join(", "),
                    cm.name_any()
                ),
            }));
        }
    }
    Ok(None)
}
