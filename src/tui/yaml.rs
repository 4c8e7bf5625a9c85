//! The YAML loader: the object the YAML view shows, read from the API for
//! pods, tasks and events (the caches keep less) and from the stores
//! otherwise.

use std::time::Duration;

use crate::cluster::event::CachedEvent;
use crate::crd::AgentTask;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::runtime::reflector::{self, Store};
use kube::{Api, Client, Resource};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::app::{Msg, ObjectKey};
use crate::cluster::ClusterView;

pub(super) async fn yaml_loader(
    client: Client,
    view: ClusterView,
    events: Store<CachedEvent>,
    mut rx: mpsc::Receiver<ObjectKey>,
    tx: mpsc::Sender<Msg>,
    cancel: CancellationToken,
) {
    loop {
        let key = tokio::select! {
            _ = cancel.cancelled() => return,
            k = rx.recv() => match k { Some(k) => k, None => return },
        };
        let text = tokio::select! {
            _ = cancel.cancelled() => return,
            text = object_yaml(&client, &view, &events, &key) => text,
        };
        if tx.send(Msg::Yaml { object: key, text }).await.is_err() {
            return;
        }
    }
}

/// The object as the YAML view shows it: pods, tasks and events as the API has
/// them (the caches keep less; the cached copy, said to be partial, when
/// the API does not answer), the rest from the stores.
pub async fn object_yaml(
    client: &Client,
    view: &ClusterView,
    events: &Store<CachedEvent>,
    key: &ObjectKey,
) -> String {
    match key.kind {
        // The cached pods keep only what is read (see `cluster::pod`).
        "Pod" => {
            let cached = || find(&view.pods, key);
            let lacks =
                "with only the fields the console reads (no volumes, env, probes, resources)";
            api_yaml::<Pod>(client, key, cached, lacks).await
        }
        // The cached tasks keep no output (see `cluster::strip_task`).
        "AgentTask" => {
            let cached = || {
                let mut value = find(&view.tasks, key);
                if let Some(status) = value
                    .as_mut()
                    .and_then(|v| v.get_mut("status"))
                    .and_then(|s| s.as_object_mut())
                {
                    status.remove("outputTail");
                }
                value
            };
            let lacks = "without its kept output (status.outputTail)";
            api_yaml::<AgentTask>(client, key, cached, lacks).await
        }
        // The cached events keep only what the rows read (see `cluster::event`).
        "Event" => {
            let cached = || find(events, key);
            let lacks =
                "with only the fields the console reads (no source, series, related object)";
            api_yaml::<Event>(client, key, cached, lacks).await
        }
        _ => yaml_of(view, events, key),
    }
}

/// `key`'s object as the API has it, as `kubectl get -o yaml`; when the
/// API does not answer, the `cached` copy, said to be partial (`lacks`).
async fn api_yaml<K>(
    client: &Client,
    key: &ObjectKey,
    cached: impl FnOnce() -> Option<serde_json::Value>,
    lacks: &str,
) -> String
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), &key.namespace);
    let why = match tokio::time::timeout(Duration::from_secs(10), api.get_opt(&key.name)).await {
        Ok(Ok(found)) => {
            return render_yaml(found.and_then(|o| serde_json::to_value(&o).ok()), key);
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer in 10 s".to_owned(),
    };
    format!(
        "# could not read the {} from the API ({}); shown from the console's cache,\n# {lacks}\n{}",
        key.kind,
        crate::text::sanitize_line(&why),
        render_yaml(cached(), key)
    )
}

fn find<K>(store: &Store<K>, key: &ObjectKey) -> Option<serde_json::Value>
where
    K: Resource<DynamicType = ()> + Clone + serde::Serialize + 'static,
{
    let r = reflector::ObjectRef::<K>::new(&key.name).within(&key.namespace);
    store.get(&r).and_then(|o| serde_json::to_value(&*o).ok())
}

/// The object as YAML, managedFields stripped; read from the stores (pods
/// are read from the API by the loader).
pub fn yaml_of(view: &ClusterView, events: &Store<CachedEvent>, key: &ObjectKey) -> String {
    let value = match key.kind {
        "AgentPool" => find(&view.pools, key),
        "AgentTask" => find(&view.tasks, key),
        "Pod" => find(&view.pods, key),
        "Event" => find(events, key),
        _ => None,
    };
    render_yaml(value, key)
}

fn render_yaml(value: Option<serde_json::Value>, key: &ObjectKey) -> String {
    let Some(mut value) = value else {
        return format!("# {} {}/{} is gone", key.kind, key.namespace, key.name);
    };
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    serde_saphyr::to_string(&value).unwrap_or_else(|e| format!("# cannot render: {e}"))
}
