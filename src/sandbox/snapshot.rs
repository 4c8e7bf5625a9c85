//! A sandbox that serves a snapshot of a cluster, read-only: the objects
//! as they were (uids, times and status kept, as an apiserver restored
//! from an etcd backup would serve them), the logs as they were collected,
//! and nothing that moves — no controllers, no kubelet, no scheduler, no
//! Events expiring. Any client reads it as it reads a cluster (`kubectl
//! get`, `describe`, `logs`, watches that stay quiet); every write answers
//! 405 MethodNotAllowed with a Status that says why.
//!
//! What is served comes from whoever starts it ([`Snapshot`]): the
//! sandbox does not know where the objects came from (`agentdeck sandbox
//! --from-bundle` hands it a support bundle's).

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::api::{Api, ApiError, ApiResult, Hooks, LogOptions, LogStream, Query};
use super::{Sandbox, SandboxError, auth, builtin};

/// A container's log as collected: `(namespace, pod, container, previous)`
/// → its bytes, `None` when none was collected.
pub type LogFn = Arc<dyn Fn(&str, &str, &str, bool) -> Option<Vec<u8>> + Send + Sync>;

/// What to serve.
pub struct Snapshot {
    /// Every object (any served kind), as JSON with `apiVersion` and `kind`.
    pub objects: Vec<Value>,
    /// CustomResourceDefinitions to serve before the objects are loaded
    /// (those of the kinds among them).
    pub crds: Vec<Value>,
    /// The logs.
    pub logs: LogFn,
    /// What the server is, for the Status of a refused write (`the support
    /// bundle b.zip`).
    pub what: String,
}

/// What loading the snapshot could not do (an object of a kind not
/// served, say), in words.
pub type Skipped = Vec<String>;

impl Sandbox {
    /// Serves `snapshot` read-only on 127.0.0.1:`port` (0: a free port).
    pub async fn start_snapshot(
        port: u16,
        snapshot: Snapshot,
    ) -> Result<(Sandbox, Skipped), SandboxError> {
        let security = auth::Security::generate().map_err(SandboxError::Tls)?;
        let mut api = Api::new(builtin::builtin_resources());
        api.security = security;
        let api = Arc::new(api);
        let skipped = load(&api, snapshot.crds, snapshot.objects);
        api.set_hooks(Arc::new(SnapshotHooks {
            api: Arc::downgrade(&api),
            logs: snapshot.logs,
            what: snapshot.what.clone(),
        }));
        api.set_read_only(&snapshot.what);
        let sb = Sandbox::serve(api.clone(), port, CancellationToken::new()).await?;
        api.set_server_url(&sb.url());
        Ok((sb, skipped))
    }
}

/// Loads the CRDs through the API (so their kinds are served), then every
/// object as it is.
fn load(api: &Api, crds: Vec<Value>, objects: Vec<Value>) -> Skipped {
    let q = Query::default();
    let mut skipped = Vec::new();
    for crd in crds {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Err(e) = api.create(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            None,
            crd,
            &q,
        ) {
            skipped.push(format!("CustomResourceDefinition {name}: {}", e.message));
        }
    }
    let namespaces: BTreeSet<String> = objects
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str())
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .collect();
    for ns in namespaces {
        if api.store.get("namespaces", "", &ns).is_none() {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let _ = api.create("", "v1", "namespaces", None, obj, &q);
        }
    }
    for obj in objects {
        if let Err(why) = api.restore(obj.clone()) {
            skipped.push(format!(
                "{} {}: {why}",
                obj["kind"].as_str().unwrap_or("?"),
                obj["metadata"]["name"].as_str().unwrap_or("?")
            ));
        }
    }
    skipped
}

/// Logs from the snapshot; no exec, attach or port-forward (nothing runs).
struct SnapshotHooks {
    api: Weak<Api>,
    logs: LogFn,
    what: String,
}

impl Hooks for SnapshotHooks {
    fn pod_logs(&self, namespace: &str, name: &str, opts: &LogOptions) -> ApiResult<LogStream> {
        let api = self
            .api
            .upgrade()
            .ok_or_else(|| ApiError::internal("the server is stopping"))?;
        let pod = api.pod(namespace, name)?;
        let container = super::kubelet::choose_container(&pod, opts.container.as_deref())?;
        let Some(bytes) = (self.logs)(namespace, name, &container, opts.previous) else {
            return Err(ApiError::bad_request(if opts.previous {
                format!(
                    "previous terminated container \"{container}\" in pod \"{name}\" not found in {}",
                    self.what
                )
            } else {
                format!(
                    "no log of container \"{container}\" in pod \"{name}\" was collected in {}",
                    self.what
                )
            }));
        };
        Ok(LogStream::Done(cut(bytes, opts)))
    }

    fn pod_stream(&self, req: &super::exec::StreamRequest) -> ApiResult<super::exec::Launcher> {
        Err(ApiError::bad_request(format!(
            "pod {} is in {}: nothing runs there, so exec, attach and port-forward are not available",
            req.pod, self.what
        )))
    }
}

/// `tailLines` and `limitBytes` over a collected log (it has no
/// timestamps, so `sinceSeconds` and `timestamps` cannot apply).
fn cut(mut bytes: Vec<u8>, opts: &LogOptions) -> Vec<u8> {
    if let Some(n) = opts.tail_lines {
        let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let start = if n == 0 {
            bytes.len()
        } else {
            body.iter()
                .enumerate()
                .rev()
                .filter(|(_, b)| **b == b'\n')
                .nth(n - 1)
                .map_or(0, |(i, _)| i + 1)
        };
        bytes.drain(..start);
    }
    if let Some(limit) = opts.limit_bytes {
        bytes.truncate(limit);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_lines_and_limit_bytes_cut_a_collected_log_as_a_kubelet_does() {
        let log = b"one\ntwo\nthree\n".to_vec();
        let opts = |tail: Option<usize>, limit: Option<usize>| LogOptions {
            tail_lines: tail,
            limit_bytes: limit,
            ..LogOptions::default()
        };
        assert_eq!(cut(log.clone(), &opts(Some(2), None)), b"two\nthree\n");
        assert_eq!(cut(log.clone(), &opts(Some(9), None)), log);
        assert_eq!(cut(log.clone(), &opts(Some(0), None)), b"");
        assert_eq!(cut(log.clone(), &opts(None, Some(5))), b"one\nt");
        assert_eq!(cut(b"a\nb".to_vec(), &opts(Some(1), None)), b"b");
    }
}
