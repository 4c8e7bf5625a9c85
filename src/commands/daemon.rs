//! `agentdeck --daemon`: the controller headless, with its health and
//! metrics server.

use super::runtime;
use crate::cli::Cli;
use crate::config::{Config, ConfigSources};
use crate::error::{Error, Result};

/// `agentdeck --daemon`: the controller headless, with its health and
/// metrics server, until SIGTERM/SIGINT; then it stops taking work,
/// releases the lease and exits within 5 s.
pub fn daemon(cli: &Cli) -> Result<()> {
    let (config, _) = Config::load(&ConfigSources::from_process(cli.global.config.clone()))?;
    let format = cli.global.log_format.unwrap_or(config.log.format);
    let dir = cli
        .global
        .log_dir
        .clone()
        .or_else(|| config.log.dir.clone());
    let _logs = crate::telemetry::init(format, &config.log.level, dir.as_deref())?;
    let rt = runtime()?;
    let result = rt.block_on(async {
        let conn = crate::cluster::connect(
            cli.global.context.as_deref(),
            cli.global.namespace.as_deref(),
        )
        .await?;
        if cli.global.namespace.is_some() && config.namespaces.is_empty() {
            // Unreachable or refused: the controller says so as it retries.
            if let Err(e @ crate::cluster::ClusterError::NoSuchNamespace { .. }) =
                crate::cluster::require_namespace(&conn).await
            {
                tracing::warn!("{e}; watching it anyway, its objects appear once it is created");
            }
        }
        let listener = crate::server::bind(crate::server::address(&config.server)).await?;
        let cancel = tokio_util::sync::CancellationToken::new();
        // Headless: nothing shows a finished task's text, so the store
        // keeps finished tasks slimmed (see `cluster::slim_finished_task`).
        let options = crate::controller::StartOptions {
            slim_finished_tasks: true,
            ..Default::default()
        };
        let controller = std::sync::Arc::new(crate::controller::start_with(
            conn,
            &config,
            options,
            cancel.clone(),
        ));
        tracing::info!(addr = ?listener.local_addr().ok(), "serving /healthz, /readyz, /metrics");
        let server = tokio::spawn(crate::server::serve(
            listener,
            controller.clone(),
            cancel.clone(),
        ));
        crate::signal::terminated().await;
        tracing::info!("stopping");
        cancel.cancel();
        let stopped = async {
            controller.join().await;
            let _ = server.await;
        };
        if tokio::time::timeout(std::time::Duration::from_secs(4), stopped)
            .await
            .is_err()
        {
            tracing::warn!("not everything stopped within 4 s; exiting anyway");
        }
        Ok::<(), Error>(())
    });
    // Do not wait for stray blocking work: the exit deadline is 5 s.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}
