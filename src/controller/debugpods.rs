//! Deletes debug pods past their expiry ([`crate::ops::debug`]), while
//! leading.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::ops::debug;

/// How often expired debug pods are looked for.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(15);

pub(crate) async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_INTERVAL) => {}
        }
        if !shared.leader.is_leader() {
            continue;
        }
        for ns in &shared.namespaces {
            match debug::cleanup(&shared.client, ns, None, Some(Timestamp::now())).await {
                Ok(deleted) => {
                    for name in deleted {
                        tracing::info!(namespace = %ns, pod = %name, "deleted expired debug pod");
                    }
                }
                Err(e) => tracing::debug!(namespace = %ns, error = %e, "debug pod sweep failed"),
            }
        }
    }
}
