use std::io::Write;
use std::process::ExitCode;

use agentdeck::cli::{Cli, Command};
use agentdeck::config::{AgentConfig, Config, ConfigSources};
use agentdeck::error::{Error, Result};
use agentdeck::install;
use clap::{CommandFactory, Parser};

fn main() -> ExitCode {
    // kube's client needs one process-wide rustls provider (CRATES.md: ring only).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentdeck: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let not_built = |mode, what| Err(Error::NotBuilt { mode, what });
    match cli.command {
        Some(Command::Crds) => print(&install::to_yaml_stream(&install::crd_documents())?),
        Some(Command::Manifests(args)) => {
            // Nothing is asked of the cluster, but a context that is not
            // there is still a mistake worth saying.
            if let Some(context) = cli.global.context.as_deref() {
                agentdeck::cluster::check_context(context)?;
            }
            if let Some(namespace) = args.install_namespace.as_deref() {
                agentdeck::cluster::check_namespace(namespace, "--install-namespace")?;
            }
            let (config, _) =
                Config::load(&ConfigSources::from_process(cli.global.config.clone()))?;
            let pools = match &args.pools {
                Some(path) => install::load_pools(path)?
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect(),
                None => Vec::new(),
            };
            let opts = install::InstallOptions {
                namespace: args
                    .install_namespace
                    .unwrap_or_else(|| config.controller_namespace.clone()),
                image: args.image.unwrap_or_else(install::default_image),
                config,
            };
            print(&install::to_yaml_stream(&install::install_documents(
                &opts, &pools,
            )?)?)
        }
        Some(Command::Completions { shell }) => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "agentdeck", &mut out);
            std::io::stdout().write_all(&out).map_err(Error::Output)
        }
        Some(Command::Sandbox(args)) => {
            let namespace = cli
                .global
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            runtime()?.block_on(agentdeck::sandbox::run_cli(
                args.port,
                args.nodes,
                args.kubeconfig_out,
                &namespace,
            ))?;
            Ok(())
        }
        Some(Command::Agent(args)) => {
            let (config, _) =
                AgentConfig::load(&ConfigSources::from_process(cli.global.config.clone()))?;
            let format = cli.global.log_format.unwrap_or(config.log.format);
            let telemetry = agentdeck::telemetry::init(
                format,
                &config.log.level,
                cli.global.log_dir.as_deref(),
            )?;
            runtime()?.block_on(agentdeck::agent::run(
                args,
                &cli.global,
                config,
                Some(telemetry),
            ))?;
            Ok(())
        }
        Some(Command::Bundle(_)) => not_built("bundle", "the redacted support bundle"),
        Some(Command::Debug(_)) => not_built("debug", "debug pods with a TTL"),
        Some(Command::Scale(_)) => not_built("scale", "scaling a pool through the controller"),
        Some(Command::Drain(_)) => not_built("drain", "draining a pool through the controller"),
        Some(Command::DebugLogs(_)) => not_built("debug-logs", "live debug-log toggling"),
        None if cli.daemon => daemon(&cli),
        None if cli.demo => not_built("--demo", "the sandbox demo with live agents"),
        None => not_built("(console)", "the terminal console"),
    }
}

/// `agentdeck --daemon`: the controller headless, with its health and
/// metrics server, until SIGTERM/SIGINT; then it stops taking work,
/// releases the lease and exits within 5 s.
fn daemon(cli: &Cli) -> Result<()> {
    let (config, _) = Config::load(&ConfigSources::from_process(cli.global.config.clone()))?;
    let format = cli.global.log_format.unwrap_or(config.log.format);
    let dir = cli
        .global
        .log_dir
        .clone()
        .or_else(|| config.log.dir.clone());
    let _logs = agentdeck::telemetry::init(format, &config.log.level, dir.as_deref())?;
    let rt = runtime()?;
    let result = rt.block_on(async {
        let conn = agentdeck::cluster::connect(
            cli.global.context.as_deref(),
            cli.global.namespace.as_deref(),
        )
        .await?;
        let listener = agentdeck::server::bind(agentdeck::server::address(&config.server)).await?;
        let cancel = tokio_util::sync::CancellationToken::new();
        let controller =
            std::sync::Arc::new(agentdeck::controller::start(conn, &config, cancel.clone()));
        tracing::info!(addr = ?listener.local_addr().ok(), "serving /healthz, /readyz, /metrics");
        let server = tokio::spawn(agentdeck::server::serve(
            listener,
            controller.clone(),
            cancel.clone(),
        ));
        agentdeck::signal::terminated().await;
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

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)
}

fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::Output)
}
