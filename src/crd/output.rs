//! Where a finished task's kept output lives: a ConfigMap of its own, not
//! the task.
//!
//! An agent keeps the last lines a run printed (at most
//! [`super::OUTPUT_TAIL_LINES`] lines and [`super::OUTPUT_TAIL_BYTES`] bytes, redacted) so
//! that the output outlives its pod. Written into the AgentTask's status
//! (`status.outputTail`, as agents did before this module), those 3–4 KB
//! were paid by every watcher of every task: the controller, every console
//! and anyone's `kubectl get agenttasks -w`, for output almost nobody reads.
//! At 100,000 tasks that made the task list about 350 MB.
//!
//! So the agent writes the output into a ConfigMap of the task's own
//! ([`config_map`]: `<task>-output-<attempt>`, owned by the task so that the
//! garbage collector deletes it with the task, labelled
//! [`COMPONENT_TASK_OUTPUT`]) and leaves in the task's status a summary of
//! a few dozen bytes ([`TaskOutput`]: the ConfigMap's name, lines, bytes and
//! the last line). Nobody watches these ConfigMaps: the console, `agentdeck
//! task show`, the bundle and the retention's record read one when they need
//! it ([`read`]).
//!
//! Tasks written before the change keep their `status.outputTail`, and an
//! agent whose Role cannot create ConfigMaps (a pool installed by an older
//! agentdeck, until the controller has updated its Role) writes the status
//! as before: [`read`] reads both.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Api, Client, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    API_VERSION, AgentTask, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_POOL, LABEL_TASK, MANAGED_BY,
};

/// [`LABEL_COMPONENT`] of a task's output ConfigMap.
pub const COMPONENT_TASK_OUTPUT: &str = "task-output";
/// The key of the output in its ConfigMap's `data`.
pub const OUTPUT_KEY: &str = "output";
/// Characters of the last line kept in [`TaskOutput::last_line`].
pub const LAST_LINE_CHARS: usize = 160;
/// The longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// `status.output`: where a finished task's kept output is, and a summary.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskOutput {
    /// The ConfigMap (same namespace, owned by the task) whose `data.output`
    /// holds the last lines the run printed.
    pub config_map: String,
    /// Lines kept (at most 40).
    #[serde(default)]
    pub lines: u32,
    /// Bytes kept (at most 4096).
    #[serde(default)]
    pub bytes: u32,
    /// The last line printed (its first 160 characters).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_line: String,
}

impl TaskOutput {
    /// The summary of `text` kept in ConfigMap `config_map`.
    pub fn of(config_map: String, text: &str) -> TaskOutput {
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        TaskOutput {
            config_map,
            lines: u32::try_from(text.lines().count()).unwrap_or(u32::MAX),
            bytes: u32::try_from(text.len()).unwrap_or(u32::MAX),
            last_line: last.trim_end().chars().take(LAST_LINE_CHARS).collect(),
        }
    }
}

/// The name of the ConfigMap keeping the output of `task`'s run number
/// `attempts`: `<task>-output-<attempts>`, or for a name too long for that,
/// its start and a hash of the whole (names stay unique and within 253).
pub fn config_map_name(task: &str, attempts: i32) -> String {
    let suffix = format!("-output-{attempts}");
    if task.len() + suffix.len() <= MAX_NAME {
        return format!("{task}{suffix}");
    }
    let hash = format!("-{:016x}", fnv1a(task.as_bytes()));
    let mut keep = MAX_NAME - suffix.len() - hash.len();
    while !task.is_char_boundary(keep) {
        keep -= 1;
    }
    let start = task[..keep].trim_end_matches(['-', '.']);
    format!("{start}{hash}{suffix}")
}

/// FNV-1a, 64 bits: stable across builds, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The ConfigMap keeping `text`, the output of `task`'s run `attempts`:
/// owned by the task (deleted with it), labelled with its pool and name.
/// `None` for a task with no uid (one not read from the API).
pub fn config_map(task: &AgentTask, attempts: i32, text: &str) -> Option<ConfigMap> {
    let uid = task.metadata.uid.clone()?;
    let name = task.name_any();
    let labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
        (LABEL_COMPONENT.to_owned(), COMPONENT_TASK_OUTPUT.to_owned()),
        (LABEL_POOL.to_owned(), label_value(&task.spec.pool)),
        (LABEL_TASK.to_owned(), label_value(&name)),
    ]);
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(&name, attempts)),
            namespace: task.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![OwnerReference {
                api_version: API_VERSION.to_owned(),
                kind: AgentTask::kind(&()).into_owned(),
                name,
                uid,
                // Not blocking: the task's deletion does not wait for it,
                // and the agent needs no rights on the task's finalizers.
                block_owner_deletion: None,
                controller: None,
            }]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(OUTPUT_KEY.to_owned(), text.to_owned())])),
        ..ConfigMap::default()
    })
}

/// A label value: at most 63 characters, else its first 63 ending in an
/// alphanumeric (names longer than that are found by the owner instead).
fn label_value(name: &str) -> String {
    let mut v: String = name.chars().take(63).collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    v
}

/// The output `cm` keeps for the task whose uid is `uid`: `None` when the
/// ConfigMap is not that task's (another task's of the same name, since
/// deleted, or anyone else's) or keeps none.
pub fn text_of(cm: &ConfigMap, uid: &str) -> Option<String> {
    let owned = cm
        .owner_references()
        .iter()
        .any(|o| o.kind == "AgentTask" && o.uid == uid);
    if !owned {
        return None;
    }
    cm.data.as_ref()?.get(OUTPUT_KEY).cloned()
}

/// Where a task's kept output was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// The task's own `status.outputTail` (written before the output moved).
    Status(String),
    /// Its output ConfigMap (named).
    ConfigMap(String, String),
}

impl Found {
    /// The output.
    pub fn text(&self) -> &str {
        match self {
            Found::Status(t) | Found::ConfigMap(_, t) => t,
        }
    }

    /// Where it came from, said to a reader.
    pub fn source(&self) -> String {
        match self {
            Found::Status(_) => "status.outputTail".to_owned(),
            Found::ConfigMap(name, _) => format!("ConfigMap {name}"),
        }
    }
}

/// Whether `task` kept output somewhere (without reading it).
pub fn has_output(task: &AgentTask) -> bool {
    task.status.as_ref().is_some_and(|s| {
        s.output.is_some() || s.output_tail.as_deref().is_some_and(|t| !t.is_empty())
    })
}

/// The kept output of `task` as read from the API: its `status.outputTail`
/// when it has one (tasks of older agents), else its output ConfigMap's.
/// `Ok(None)` when it kept none or its ConfigMap is gone or not its own.
pub async fn read(client: &Client, task: &AgentTask) -> Result<Option<Found>, kube::Error> {
    let Some(status) = task.status.as_ref() else {
        return Ok(None);
    };
    if let Some(tail) = status.output_tail.as_deref().filter(|t| !t.is_empty()) {
        return Ok(Some(Found::Status(tail.to_owned())));
    }
    let (Some(output), Some(uid)) = (status.output.as_ref(), task.metadata.uid.as_deref()) else {
        return Ok(None);
    };
    let ns = task.namespace().unwrap_or_else(|| "default".to_owned());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    Ok(api
        .get_opt(&output.config_map)
        .await?
        .and_then(|cm| text_of(&cm, uid))
        .map(|text| Found::ConfigMap(output.config_map.clone(), text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_unique_and_within_the_limit() {
        assert_eq!(config_map_name("plan-7", 2), "plan-7-output-2");
        let long = "a".repeat(250);
        let other = format!("{}b", "a".repeat(249));
        let (n1, n2) = (config_map_name(&long, 1), config_map_name(&other, 1));
        assert!(n1.len() <= 253 && n2.len() <= 253, "{n1} {n2}");
        assert_ne!(n1, n2);
        assert!(n1.ends_with("-output-1"));
        assert_eq!(n1, config_map_name(&long, 1), "stable");
        // Exactly at the limit: no hash.
        let fits = "x".repeat(253 - "-output-9".len());
        assert_eq!(config_map_name(&fits, 9), format!("{fits}-output-9"));
    }

    #[test]
    fn the_summary_counts_and_keeps_the_last_printed_line() {
        let s = TaskOutput::of("t-output-1".into(), "Plan: 1 to add\nApply complete!\n\n");
        assert_eq!((s.lines, s.bytes), (3, 32));
        assert_eq!(s.last_line, "Apply complete!");
        let long = format!("{}\n", "é".repeat(300));
        assert_eq!(
            TaskOutput::of("x".into(), &long).last_line.chars().count(),
            160
        );
    }

    fn task(uid: Option<&str>) -> AgentTask {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "plan-7", "namespace": "ci", "uid": uid},
            "spec": {"pool": "prod"},
        }))
        .expect("task")
    }

    #[test]
    fn the_config_map_is_the_tasks_own_and_read_only_for_it() {
        assert!(
            config_map(&task(None), 1, "x").is_none(),
            "no uid, no owner"
        );
        let cm = config_map(&task(Some("u-1")), 2, "done\n").expect("cm");
        assert_eq!(cm.metadata.name.as_deref(), Some("plan-7-output-2"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("ci"));
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels[LABEL_COMPONENT], COMPONENT_TASK_OUTPUT);
        assert_eq!(labels[LABEL_POOL], "prod");
        assert_eq!(labels[LABEL_TASK], "plan-7");
        let owner = &cm.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("AgentTask", "u-1")
        );
        assert_eq!(owner.api_version, "agentdeck.dev/v1alpha1");
        assert_eq!(text_of(&cm, "u-1").as_deref(), Some("done\n"));
        assert_eq!(
            text_of(&cm, "u-2"),
            None,
            "a task of the same name since recreated"
        );
    }

    #[test]
    fn label_values_are_cut_to_63_ending_alphanumeric() {
        let name = format!("{}-x", "a".repeat(62));
        assert_eq!(label_value(&name), "a".repeat(62));
        assert_eq!(label_value("plan-7"), "plan-7");
    }
}
