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
        None if cli.daemon => not_built("--daemon", "the headless controller"),
        None if cli.demo => not_built("--demo", "the sandbox demo with live agents"),
        None => not_built("(console)", "the terminal console"),
    }
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
