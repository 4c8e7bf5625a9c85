//! Deletes debug pods past their expiry ([`crate::cluster::debug_pods`]), while
//! leading.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::cluster::debug_pods as debug;

/// How often expired debug pods are looked for.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(15);

/// While leading, deletes the debug pods of the watched namespaces past
/// their expiry. The debug pods are watched, not listed at every sweep: an
/// idle controller's API traffic is its watches.
pub(crate) async fn run(shared: Arc<Context>, cancel: CancellationToken) {
    // A sweep is due in 15 s at the earliest: its list waits until the
    // first lists, which the console shows, are in.
    tokio::select! {
        _ = cancel.cancelled() => return,
        () = shared.wait_synced() => {}
    }
    let api: Api<Pod> = super::namespaced_or_all(&shared.client, &shared.namespaces);
    let (store, writer) = reflector::store::<Pod>();
    let selector = format!("{}=true", debug::LABEL_DEBUG_POD);
    let watch =
        crate::cluster::listwatch::watcher(api, watcher::Config::default().labels(&selector))
            .default_backoff()
            .modify(|p| {
                p.metadata.managed_fields = None;
                crate::cluster::strip_pod(p);
            })
            .reflect(writer)
            .for_each(|r| async move {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "debug pod watch failed; retrying");
                }
            });
    tokio::pin!(watch);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            () = &mut watch => return,
            _ = tokio::time::sleep(SWEEP_INTERVAL) => {}
        }
        if !shared.leader.is_leader() {
            continue;
        }
        let mut pods = store.state();
        if shared.namespaces.len() > 1 {
            pods.retain(|p| {
                p.namespace()
                    .is_some_and(|ns| shared.namespaces.contains(&ns))
            });
        }
        // The watch keeps reading meanwhile: deleting is a few requests.
        let swept = debug::delete_due(&shared.client, &pods, Some(Timestamp::now()));
        match tokio::select! {
            _ = cancel.cancelled() => return,
            () = &mut watch => return,
            r = swept => r,
        } {
            Ok(deleted) => {
                for name in deleted {
                    tracing::info!(pod = %name, "deleted expired debug pod");
                }
            }
            Err(e) => tracing::debug!(error = %e, "debug pod sweep failed"),
        }
    }
}
