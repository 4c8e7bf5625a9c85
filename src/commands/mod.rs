//! What each command of the command line does: `main.rs` parses the
//! command line and dispatches here. The bodies answer with the crate's
//! [`Error`], which gathers every layer's: they sit above every room.

pub mod bundle;
pub mod console;
pub mod daemon;
pub mod debug;
pub mod install;

use std::io::Write;

use crate::cli::{AgentArgs, AuditArgs, DrainArgs, GlobalArgs, SandboxArgs, StatusArgs, TaskArgs};
use crate::config::{AgentConfig, Config, ConfigSources};
use crate::error::{Error, Result};
use crate::ops;

/// `agentdeck sandbox`: the API emulator, empty or (`--from-bundle`)
/// serving a support bundle.
pub fn sandbox(global: &GlobalArgs, args: SandboxArgs) -> Result<()> {
    if let Some(path) = args.from_bundle.clone() {
        runtime()?.block_on(crate::replay::run_cli(
            &path,
            args.port,
            args.kubeconfig_out,
        ))?;
        return Ok(());
    }
    let namespace = global.namespace.clone().unwrap_or_else(|| "default".into());
    let retention = crate::sandbox::retention::Retention {
        compaction_interval: args.compaction_interval,
        event_ttl: args.event_ttl,
        ..Default::default()
    };
    runtime()?.block_on(crate::sandbox::run_cli(
        args.port,
        args.nodes,
        args.kubeconfig_out,
        &namespace,
        &args.name,
        retention,
    ))?;
    Ok(())
}

/// `agentdeck agent`: the runtime in an agent pod.
pub fn agent(global: &GlobalArgs, args: AgentArgs) -> Result<()> {
    let (config, _) = AgentConfig::load(&ConfigSources::from_process(global.config.clone()))?;
    let format = global.log_format.unwrap_or(config.log.format);
    let telemetry = crate::telemetry::init(format, &config.log.level, global.log_dir.as_deref())?;
    runtime()?.block_on(crate::agent::run(args, global, config, Some(telemetry)))?;
    Ok(())
}

/// `agentdeck drain`: the action, then (`--wait`) until the pool is drained.
pub fn drain(global: &GlobalArgs, args: &DrainArgs) -> Result<()> {
    let action = ops::cli::drain_action(args);
    with_cluster(global, async |conn| {
        let mut out = std::io::stdout().lock();
        ops::cli::run(
            &conn,
            global.context.as_deref(),
            &action,
            args.confirm,
            &mut out,
            &mut std::io::stdin().lock(),
        )
        .await?;
        // Also when it was drained already (nothing to change).
        if args.wait {
            ops::cli::wait_drained(&conn, args, &mut out).await?;
        }
        Ok(())
    })
}

/// `agentdeck task`: an action on tasks, or (`show`) one task printed.
pub fn task(global: &GlobalArgs, args: &TaskArgs) -> Result<()> {
    match ops::cli::task_action(&args.command) {
        Some((action, confirm)) => act(global, &action, confirm),
        None => {
            let crate::cli::TaskCommand::Show(show) = &args.command else {
                unreachable!("only show has no action");
            };
            with_cluster(global, async |conn| {
                ops::cli::print_task(&conn, &show.name, &mut std::io::stdout().lock()).await?;
                Ok(())
            })
        }
    }
}

/// `agentdeck status`: the pools' table and verdicts.
pub fn status(global: &GlobalArgs, args: &StatusArgs) -> Result<()> {
    with_cluster(global, async |conn| {
        // Running tasks past the console's threshold count in the verdict.
        let long_after = Config::load(&ConfigSources::from_process(global.config.clone()))?
            .0
            .long_running_task();
        ops::cli::print_status(&conn, args, long_after, &mut std::io::stdout().lock()).await?;
        Ok(())
    })
}

/// `agentdeck audit`: the local audit trail.
pub fn audit(global: &GlobalArgs, args: &AuditArgs) -> Result<()> {
    check_config(global)?;
    if let Some(ns) = global.namespace.as_deref() {
        crate::cluster::check_namespace(ns, "--namespace")?;
    }
    ops::cli::print_audit(
        args,
        global.namespace.as_deref(),
        &mut std::io::stdout().lock(),
    )?;
    Ok(())
}

/// Reads the configuration (`--config`, `AGENTDECK_CONFIG`, the default
/// file, the environment) for a command that uses none of it, so that a
/// missing `--config` file or a typo'd key is refused as everywhere else.
pub fn check_config(global: &crate::cli::GlobalArgs) -> Result<()> {
    Config::load(&ConfigSources::from_process(global.config.clone()))?;
    Ok(())
}

/// Connects (context and namespace from the flags), checks that the
/// namespace exists, and runs `f` on a runtime.
pub fn with_cluster(
    global: &crate::cli::GlobalArgs,
    f: impl AsyncFnOnce(crate::cluster::Connection) -> Result<()>,
) -> Result<()> {
    with_cluster_as(global, None, f)
}

/// [`with_cluster`], every request acting as `impersonation` when given.
pub fn with_cluster_as(
    global: &crate::cli::GlobalArgs,
    impersonation: Option<&crate::cluster::Impersonation>,
    f: impl AsyncFnOnce(crate::cluster::Connection) -> Result<()>,
) -> Result<()> {
    check_config(global)?;
    let _logs = crate::telemetry::init(
        global
            .log_format
            .unwrap_or(crate::telemetry::LogFormat::Plain),
        "warn",
        None,
    )?;
    runtime()?.block_on(async {
        let conn = crate::cluster::connect_as(
            global.context.as_deref(),
            global.namespace.as_deref(),
            impersonation,
        )
        .await?;
        crate::cluster::require_namespace(&conn).await?;
        f(conn).await
    })
}

/// `agentdeck access`: one row per feature, for this identity or (`--as`)
/// another, in the namespace (or, `-A`, all of them). Exit 0 whatever the
/// answers; 1 when the questions could not be asked.
pub fn access(global: &crate::cli::GlobalArgs, args: &crate::cli::AccessArgs) -> Result<()> {
    use crate::ops::access;
    let impersonation = args
        .as_user
        .clone()
        .map(|user| crate::cluster::Impersonation {
            user,
            groups: args.as_groups.clone(),
        });
    with_cluster_as(global, impersonation.as_ref(), async |conn| {
        let (config, _) = Config::load(&ConfigSources::from_process(global.config.clone()))?;
        let namespace = (!args.all_namespaces).then_some(conn.namespace.as_str());
        let table = access::review_as(
            &conn.client,
            namespace,
            &config.controller_namespace,
            impersonation.as_ref(),
        )
        .await?;
        let text = match args.output {
            Some(crate::cli::AccessOutput::Json) => {
                let mut s = serde_json::to_string_pretty(&table).unwrap_or_default();
                s.push('\n');
                s
            }
            None => access::table_text(&table),
        };
        print(&text)
    })
}

/// One action: preview, confirm (unless `--yes`), apply, audit.
pub fn act(
    global: &crate::cli::GlobalArgs,
    action: &ops::Action,
    confirm: crate::cli::ConfirmArgs,
) -> Result<()> {
    with_cluster(global, async |conn| {
        ops::cli::run(
            &conn,
            global.context.as_deref(),
            action,
            confirm,
            &mut std::io::stdout().lock(),
            &mut std::io::stdin().lock(),
        )
        .await?;
        Ok(())
    })
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)
}

pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::Output)
}
