use std::io::Write;
use std::process::ExitCode;

use agentdeck::cli::{Cli, Command};
use agentdeck::config::{AgentConfig, Config, ConfigSources};
use agentdeck::error::{Error, Result};
use agentdeck::install;
use agentdeck::ops;
use clap::{CommandFactory, Parser};

fn main() -> ExitCode {
    // The sandbox kubelet's container set-up (a mount namespace, then the
    // container's command): first, while this process has one thread.
    if let Some(code) = agentdeck::sandbox::kubelet::mountns::entry_point() {
        return code;
    }
    // kube's client needs one process-wide rustls provider: ring, the one
    // crypto backend built in (no aws-lc and its C build).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match Cli::parse().settle() {
        Ok(cli) => cli,
        Err(why) => {
            eprintln!("agentdeck: {why}");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentdeck: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}

fn run(cli: Cli) -> Result<()> {
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
            let (mut config, _) =
                Config::load(&ConfigSources::from_process(cli.global.config.clone()))?;
            let pools: Vec<_> = match &args.pools {
                Some(path) => install::load_pools(path)?
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect(),
                None => Vec::new(),
            };
            if config.namespaces.is_empty() {
                let apply_namespace = cli
                    .global
                    .namespace
                    .clone()
                    .or_else(|| {
                        agentdeck::cluster::context_namespace(cli.global.context.as_deref())
                    })
                    .unwrap_or_else(|| "default".to_owned());
                config.namespaces = install::watched_namespaces(&pools, &apply_namespace);
            }
            let mut opts = install::InstallOptions {
                namespace: args
                    .install_namespace
                    .unwrap_or_else(|| config.controller_namespace.clone()),
                image: args.image.unwrap_or_else(install::default_image),
                config,
                cluster_wide: args.cluster_wide_rbac,
            };
            let mut docs = install::install_documents(&opts, &pools)?;
            if args.monitoring {
                args.thresholds.apply(&mut opts.config.monitoring);
                docs.extend(install::monitoring_documents(&opts));
            }
            print(&install::to_yaml_stream(&docs)?)
        }
        Some(Command::Monitoring(args)) => {
            let (mut config, _) =
                Config::load(&ConfigSources::from_process(cli.global.config.clone()))?;
            match args.command {
                agentdeck::cli::MonitoringCommand::Rules(thresholds) => {
                    thresholds.apply(&mut config.monitoring);
                    print(&install::to_yaml(&agentdeck::monitoring::rules(
                        &config.monitoring,
                    ))?)
                }
                agentdeck::cli::MonitoringCommand::Dashboard => {
                    print(&format!("{:#}\n", agentdeck::monitoring::dashboard()))
                }
            }
        }
        Some(Command::Completions { shell }) => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "agentdeck", &mut out);
            std::io::stdout().write_all(&out).map_err(Error::Output)
        }
        Some(Command::Sandbox(args)) if args.from_bundle.is_some() => {
            let path = args.from_bundle.clone().unwrap_or_default();
            runtime()?.block_on(agentdeck::replay::run_cli(
                &path,
                args.port,
                args.kubeconfig_out,
            ))?;
            Ok(())
        }
        Some(Command::Sandbox(args)) => {
            let namespace = cli
                .global
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let retention = agentdeck::sandbox::retention::Retention {
                compaction_interval: args.compaction_interval,
                event_ttl: args.event_ttl,
                ..Default::default()
            };
            runtime()?.block_on(agentdeck::sandbox::run_cli(
                args.port,
                args.nodes,
                args.kubeconfig_out,
                &namespace,
                &args.name,
                retention,
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
        Some(Command::Bundle(args)) => match args.command {
            Some(agentdeck::cli::BundleCommand::Redact(redact)) => {
                bundle_redact(&cli.global, redact)
            }
            None => bundle(&cli.global, args),
        },
        Some(Command::Debug(args)) => debug(&cli.global, args),
        Some(Command::Scale(args)) => {
            let action = ops::cli::scale_action(&args);
            act(&cli.global, &action, args.confirm)
        }
        Some(Command::Drain(args)) => {
            let action = ops::cli::drain_action(&args);
            with_cluster(&cli.global, async |conn| {
                let mut out = std::io::stdout().lock();
                ops::cli::run(
                    &conn,
                    cli.global.context.as_deref(),
                    &action,
                    args.confirm,
                    &mut out,
                    &mut std::io::stdin().lock(),
                )
                .await?;
                // Also when it was drained already (nothing to change).
                if args.wait {
                    ops::cli::wait_drained(&conn, &args, &mut out).await?;
                }
                Ok(())
            })
        }
        Some(Command::DebugLogs(args)) => {
            let action = ops::cli::debug_logs_action(&args)?;
            act(&cli.global, &action, args.confirm)
        }
        Some(Command::Task(args)) => match ops::cli::task_action(&args.command) {
            Some((action, confirm)) => act(&cli.global, &action, confirm),
            None => {
                let agentdeck::cli::TaskCommand::Show(show) = &args.command else {
                    unreachable!("only show has no action");
                };
                with_cluster(&cli.global, async |conn| {
                    ops::cli::print_task(&conn, &show.name, &mut std::io::stdout().lock()).await?;
                    Ok(())
                })
            }
        },
        Some(Command::Status(args)) => with_cluster(&cli.global, async |conn| {
            // Running tasks past the console's threshold count in the verdict.
            let long_after = Config::load(&ConfigSources::from_process(cli.global.config.clone()))?
                .0
                .long_running_task();
            ops::cli::print_status(&conn, &args, long_after, &mut std::io::stdout().lock()).await?;
            Ok(())
        }),
        Some(Command::Audit(args)) => {
            check_config(&cli.global)?;
            if let Some(ns) = cli.global.namespace.as_deref() {
                agentdeck::cluster::check_namespace(ns, "--namespace")?;
            }
            ops::cli::print_audit(
                &args,
                cli.global.namespace.as_deref(),
                &mut std::io::stdout().lock(),
            )?;
            Ok(())
        }
        Some(Command::Access(args)) => access(&cli.global, &args),
        None if cli.daemon => daemon(&cli),
        None => console(&cli),
    }
}

/// Reads the configuration (`--config`, `AGENTDECK_CONFIG`, the default
/// file, the environment) for a command that uses none of it, so that a
/// missing `--config` file or a typo'd key is refused as everywhere else.
fn check_config(global: &agentdeck::cli::GlobalArgs) -> Result<()> {
    Config::load(&ConfigSources::from_process(global.config.clone()))?;
    Ok(())
}

/// Connects (context and namespace from the flags), checks that the
/// namespace exists, and runs `f` on a runtime.
fn with_cluster(
    global: &agentdeck::cli::GlobalArgs,
    f: impl AsyncFnOnce(agentdeck::cluster::Connection) -> Result<()>,
) -> Result<()> {
    with_cluster_as(global, None, f)
}

/// [`with_cluster`], every request acting as `impersonation` when given.
fn with_cluster_as(
    global: &agentdeck::cli::GlobalArgs,
    impersonation: Option<&agentdeck::cluster::Impersonation>,
    f: impl AsyncFnOnce(agentdeck::cluster::Connection) -> Result<()>,
) -> Result<()> {
    check_config(global)?;
    let _logs = agentdeck::telemetry::init(
        global
            .log_format
            .unwrap_or(agentdeck::telemetry::LogFormat::Plain),
        "warn",
        None,
    )?;
    runtime()?.block_on(async {
        let conn = agentdeck::cluster::connect_as(
            global.context.as_deref(),
            global.namespace.as_deref(),
            impersonation,
        )
        .await?;
        agentdeck::cluster::require_namespace(&conn).await?;
        f(conn).await
    })
}

/// `agentdeck access`: one row per feature, for this identity or (`--as`)
/// another, in the namespace (or, `-A`, all of them). Exit 0 whatever the
/// answers; 1 when the questions could not be asked.
fn access(global: &agentdeck::cli::GlobalArgs, args: &agentdeck::cli::AccessArgs) -> Result<()> {
    use agentdeck::ops::access;
    let impersonation = args
        .as_user
        .clone()
        .map(|user| agentdeck::cluster::Impersonation {
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
            Some(agentdeck::cli::AccessOutput::Json) => {
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
fn act(
    global: &agentdeck::cli::GlobalArgs,
    action: &ops::Action,
    confirm: agentdeck::cli::ConfirmArgs,
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
        if cli.global.namespace.is_some() && config.namespaces.is_empty() {
            // Unreachable or refused: the controller says so as it retries.
            if let Err(e @ agentdeck::cluster::ClusterError::NoSuchNamespace { .. }) =
                agentdeck::cluster::require_namespace(&conn).await
            {
                tracing::warn!("{e}; watching it anyway, its objects appear once it is created");
            }
        }
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

/// `-A`: every namespace when this identity may list AgentPools in all
/// of them; else the first namespace it may read them in (the kube
/// context's when none can be found), with a note that says so.
async fn all_namespaces_or_readable(
    conn: &mut agentdeck::cluster::Connection,
) -> (bool, Option<String>) {
    use agentdeck::ops::access::readable_namespaces;
    match readable_namespaces(&conn.client, &conn.namespace).await {
        Ok(None) => (true, None),
        Ok(Some(readable)) => {
            let note = match readable.split_first() {
                Some((first, rest)) => {
                    let also = if rest.is_empty() {
                        String::new()
                    } else {
                        format!(" (also readable: {}; -n NAME for one)", rest.join(", "))
                    };
                    let note = format!(
                        "-A: you may not list agentpools in all namespaces; showing {first}, where you may{also}"
                    );
                    conn.namespace = first.clone();
                    note
                }
                None => format!(
                    "-A: you may not list agentpools in all namespaces, nor in any namespace found; showing {}",
                    conn.namespace
                ),
            };
            (false, Some(note))
        }
        // Not known: ask for all, and let the watches say what they get.
        Err(_) => (true, None),
    }
}

/// `agentdeck` (and `--demo`): the console, embedding the controller.
fn console(cli: &Cli) -> Result<()> {
    use agentdeck::app::AppOptions;
    use agentdeck::app::keymap::Keymap;
    use agentdeck::ui::theme::{Theme, no_color_env};

    let (mut config, file) = Config::load(&ConfigSources::from_process(cli.global.config.clone()))?;
    let theme = Theme::load(
        cli.global.theme.as_deref().unwrap_or(&config.theme),
        no_color_env(),
    )?;
    let keymap = Keymap::with_overrides(&config.keymap).map_err(|source| Error::Keymap {
        file: file
            .as_ref()
            .map_or_else(|| "configuration".to_owned(), |f| f.display().to_string()),
        source,
    })?;
    // The console owns the terminal: logs go to files only, if asked for.
    let dir = cli
        .global
        .log_dir
        .clone()
        .or_else(|| config.log.dir.clone());
    let _logs = match &dir {
        Some(dir) => Some(agentdeck::telemetry::init_with(
            agentdeck::telemetry::TelemetryOptions {
                format: cli.global.log_format.unwrap_or(config.log.format),
                level: &config.log.level,
                dir: Some(dir),
                stderr: false,
            },
        )?),
        None => None,
    };
    let rt = runtime()?;
    let result = rt.block_on(async {
        // Read-only refuses actions in the app; no runner either. The
        // audit records the context acted in.
        let runner = |context: &str| {
            (!cli.read_only).then(|| agentdeck::tui::actions::ops_runner(Some(context.to_owned())))
        };
        let mut unusable = Vec::new();
        let mut given = Vec::new();
        // A bundle: served read-only in this process, the console on it.
        let replay = match &cli.bundle {
            Some(path) => Some(agentdeck::replay::Replay::start(path, 0).await?),
            None => None,
        };
        let (contexts, demo) = if let Some(r) = &replay {
            // The bundle's namespaces, whatever the configuration watches.
            config.namespaces = r.bundle.info.namespaces.clone();
            let one = agentdeck::tui::ContextSetup {
                name: r.context(),
                conn: r.conn.clone(),
                actions: None,
            };
            (vec![one], None)
        } else if cli.demo {
            let demo = agentdeck::demo::Demo::start().await?;
            // Health probed often, so the colours move; idle agents poll
            // every 30 s, so they count as stale only after that.
            config.health_probe.interval_seconds = 2;
            config.health_probe.stale_after_seconds = Some(35);
            config.resync_interval_seconds = 10;
            let one = agentdeck::tui::ContextSetup {
                name: demo.context.clone(),
                conn: demo.conn.clone(),
                actions: runner(&demo.context),
            };
            (vec![one], Some(demo))
        } else {
            let names = console_contexts(cli, &config)?;
            given = names
                .iter()
                .map(|n| agentdeck::ops::action::context_name(n.as_deref()))
                .collect();
            let several = names.len() > 1;
            let mut contexts = Vec::new();
            let mut first_error = None;
            for name in &names {
                let conn =
                    agentdeck::cluster::connect(name.as_deref(), cli.global.namespace.as_deref())
                        .await;
                let name = agentdeck::ops::action::context_name(name.as_deref());
                match conn {
                    Ok(conn) => contexts.push(agentdeck::tui::ContextSetup {
                        actions: runner(&name),
                        name,
                        conn,
                    }),
                    // One of several that cannot be used (its credentials
                    // file gone, say): shown with the reason, the others open.
                    Err(e) if several => {
                        unusable.push((name, e.to_string()));
                        first_error.get_or_insert(e);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if let (true, Some(e)) = (contexts.is_empty(), first_error) {
                return Err(e.into());
            }
            (contexts, None)
        };
        let mut contexts = contexts;
        // `-A` for someone who may not list pools everywhere: the
        // namespaces they may read, said so.
        let (all_namespaces, fallback_note) = if cli.all_namespaces && contexts.len() == 1 {
            all_namespaces_or_readable(&mut contexts[0].conn).await
        } else {
            (cli.all_namespaces, None)
        };
        // Every context, in the order given: those that could not be
        // used among them, as the header shows them.
        let names: Vec<String> = match (&demo, &replay) {
            (None, None) => given,
            _ => contexts.iter().map(|c| c.name.clone()).collect(),
        };
        let mut namespaces: Vec<&str> =
            contexts.iter().map(|c| c.conn.namespace.as_str()).collect();
        namespaces.dedup();
        let namespace = if all_namespaces {
            "(all)".to_owned()
        } else if config.namespaces.is_empty() {
            namespaces.join(",")
        } else {
            config.namespaces.join(",")
        };
        // Nobody chose the namespace: say which default was taken.
        let namespace_note = (demo.is_none()
            && replay.is_none()
            && !all_namespaces
            && cli.global.namespace.is_none()
            && config.namespaces.is_empty()
            && contexts.len() == 1
            && agentdeck::cluster::context_namespace(
                cli.global.contexts.first().map(String::as_str),
            )
            .is_none())
        .then(|| {
            format!(
                "the kube context names no namespace, so {namespace} was taken (-n NAME picks another)"
            )
        });
        // What the bundle could not give is said at the start.
        let bundle = replay.as_ref().map(|r| agentdeck::app::BundleOpened {
            file: r.bundle.info.file.clone(),
            taken_at: r.bundle.info.taken_at,
            notes: r.notes().into_iter().chain(r.bundle.missing()).collect(),
        });
        let audit_file = replay.as_ref().and_then(|r| r.audit_file());
        let replay_setup = replay.as_ref().map(|r| agentdeck::tui::ReplaySetup {
            taken_at: r.bundle.info.taken_at,
            health: r.health_samples(),
            audit_path: audit_file.as_ref().map(|p| p.to_path_buf()),
            history: r.bundle.history(),
        });
        let bundle_note = bundle
            .as_ref()
            .filter(|b| !b.notes.is_empty())
            .map(|b| b.notes.join("; "));
        let setup = agentdeck::tui::ConsoleSetup {
            config,
            replay: replay_setup,
            app: AppOptions {
                context: names.join(", "),
                contexts: names,
                namespace,
                read_only: cli.read_only || bundle.is_some(),
                keymap,
                kubeconfig: demo.as_ref().map(|d| d.kubeconfig.display().to_string()),
                namespace_note: bundle_note.or(fallback_note).or(namespace_note),
                bundle,
                ..AppOptions::default()
            },
            theme,
            all_namespaces,
            contexts,
            unusable,
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        let result = agentdeck::tui::run(setup, cancel).await;
        if let Some(demo) = demo {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), demo.stop()).await;
        }
        if let Some(r) = replay {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), r.sandbox.stop()).await;
        }
        drop(audit_file);
        result.map_err(Error::Terminal)
    });
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}

/// The contexts the console opens: `--context` (each time given), else
/// every context of the kubeconfig with `--all-contexts`, else `contexts:`
/// of the configuration, else the current one (`None`). A name the
/// kubeconfig does not have is refused before anything starts.
fn console_contexts(cli: &Cli, config: &Config) -> Result<Vec<Option<String>>> {
    let named: Vec<String> = if cli.all_contexts {
        let all = agentdeck::cluster::kubeconfig_contexts()?;
        if all.is_empty() {
            return Err(agentdeck::cluster::ClusterError::NoContexts.into());
        }
        all
    } else if !cli.global.contexts.is_empty() {
        cli.global.contexts.clone()
    } else {
        config.contexts.clone()
    };
    let mut out: Vec<Option<String>> = Vec::new();
    for name in named {
        agentdeck::cluster::check_context(&name)?;
        if !out.iter().any(|n| n.as_deref() == Some(name.as_str())) {
            out.push(Some(name));
        }
    }
    if out.is_empty() {
        out.push(None);
    }
    Ok(out)
}

/// `agentdeck bundle`: collects, shows a progress bar on a terminal, prints
/// where the zip is and what could not be collected.
fn bundle(global: &agentdeck::cli::GlobalArgs, args: agentdeck::cli::BundleArgs) -> Result<()> {
    use agentdeck::ops::bundle::{self, BundleOptions, Phase};
    use std::io::IsTerminal;
    let (config, _) = Config::load(&ConfigSources::from_process(global.config.clone()))?;
    let rt = runtime()?;
    let summary = rt.block_on(async {
        let conn =
            agentdeck::cluster::connect(global.context.as_deref(), global.namespace.as_deref())
                .await?;
        // Nothing is started for a namespace or pool that is not there, or
        // an API that cannot be used.
        agentdeck::cluster::require_namespace(&conn).await?;
        if let Some(pool) = &args.pool {
            ops::exec::require_pool(&conn, pool).await?;
        }
        let output = args.output.clone().unwrap_or_else(|| {
            bundle::file_name(
                &conn.namespace,
                args.pool.as_deref(),
                jiff::Timestamp::now(),
            )
            .into()
        });
        let mut opts = BundleOptions::new(conn.namespace.clone(), output);
        opts.pool = args.pool.clone();
        opts.since = args.since;
        opts.max_bytes_per_log = args.max_bytes_per_log;
        opts.redact = !args.no_redact;
        opts.deadline = args.deadline;
        opts.request_timeout = args.request_timeout;
        opts.parallelism = usize::from(args.parallel);
        opts.controller_url = args.controller_url.clone();
        opts.context = global.context.clone();
        // Values to hide that only the operator knows (tokens of the
        // platform the agents talk to), one per line.
        if let Ok(values) = std::env::var("AGENTDECK_BUNDLE_REDACT") {
            opts.literals
                .extend(values.lines().map(|l| l.trim().as_bytes().to_vec()));
        }
        opts.controller_namespace = Some(config.controller_namespace);
        let bar = if std::io::stderr().is_terminal() {
            indicatif::ProgressBar::new(0)
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg:12} [{bar:30}] {pos}/{len} files, {prefix}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let b = bar.clone();
        let summary = bundle::collect(conn.client, opts, move |p| {
            b.set_length(p.files_expected.max(p.files_done));
            b.set_position(p.files_done);
            b.set_prefix(format!("{:.1} MB", p.bytes_written as f64 / 1e6));
            b.set_message(match p.phase {
                Phase::Listing => "listing",
                Phase::Collecting => "collecting",
                Phase::Finishing => "finishing",
                Phase::Done => "done",
            });
        })
        .await;
        bar.finish_and_clear();
        Ok::<_, Error>(summary?)
    })?;
    let mut out = format!(
        "wrote {} ({} files, {:.1} MB compressed from {:.1} MB, {} secrets hidden) in {:.1} s\n",
        summary.path.display(),
        summary.files,
        summary.zip_bytes as f64 / 1e6,
        summary.bytes as f64 / 1e6,
        summary.redactions,
        summary.elapsed.as_secs_f64()
    );
    // Per rule, never a value (per file: redactions.json).
    out.push_str(&if args.no_redact {
        "hidden: nothing (--no-redact)\n".to_owned()
    } else {
        format!(
            "hidden: {}\n",
            bundle::redact::describe_counts(&summary.hidden)
        )
    });
    if !summary.errors.is_empty() {
        out.push_str(&format!(
            "{} things could not be collected (all listed in manifest.json){}:\n",
            summary.errors.len(),
            if summary.deadline_reached {
                "; the deadline was reached"
            } else {
                ""
            }
        ));
        for e in summary.errors.iter().take(10) {
            let container = e
                .container
                .as_deref()
                .map(|c| format!("/{c}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {} {} {}{}: {}\n",
                e.what, e.kind, e.name, container, e.message
            ));
        }
    }
    if !summary.lacks.is_empty() {
        out.push_str(&format!(
            "{} parts are missing for want of rights (manifest.json: access):\n",
            summary.lacks.len()
        ));
        for l in summary.lacks.iter().take(10) {
            out.push_str(&format!("  {l}\n"));
        }
    }
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    print(&out)?;
    if summary.listed == 0 {
        // A zip of nothing from the cluster is not a bundle: say so, and
        // keep it for what it says about why.
        return Err(bundle::BundleError::NothingListed {
            path: summary.path.clone(),
            first: summary
                .errors
                .first()
                .map(|e| e.message.clone())
                .unwrap_or_default(),
            count: summary.errors.len(),
        }
        .into());
    }
    Ok(())
}

/// `agentdeck bundle redact`: one more redaction pass over a bundle, with a
/// progress bar on a terminal; prints what it hid per rule.
fn bundle_redact(
    global: &agentdeck::cli::GlobalArgs,
    args: agentdeck::cli::BundleRedactArgs,
) -> Result<()> {
    use agentdeck::ops::bundle::reredact::{self, RedactOptions};
    use std::io::IsTerminal;
    check_config(global)?;
    let mut literals = Vec::new();
    for file in &args.literal_files {
        literals.extend(
            reredact::read_literal_file(file).map_err(agentdeck::ops::bundle::BundleError::from)?,
        );
    }
    let opts = RedactOptions {
        input: args.input,
        output: args.output,
        literals,
        patterns: args.regexes,
    };
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(0)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg:12} [{bar:30}] {pos}/{len} entries, {prefix}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let b = bar.clone();
    let summary = reredact::run(&opts, move |p| {
        b.set_length(p.files_expected.max(p.files_done));
        b.set_position(p.files_done);
        b.set_prefix(format!("{:.1} MB read", p.bytes_written as f64 / 1e6));
        b.set_message(match p.phase {
            agentdeck::ops::bundle::Phase::Finishing => "finishing",
            agentdeck::ops::bundle::Phase::Done => "done",
            _ => "redacting",
        });
    });
    bar.finish_and_clear();
    print(&summary?.report(&opts.input))
}

/// `agentdeck debug`: makes, lists or removes debug pods.
fn debug(global: &agentdeck::cli::GlobalArgs, args: agentdeck::cli::DebugArgs) -> Result<()> {
    use agentdeck::ops::debug::{self, DebugOptions};
    check_config(global)?;
    if args.attach {
        return debug_attach(global, &args);
    }
    let rt = runtime()?;
    let text = rt.block_on(async {
        let conn =
            agentdeck::cluster::connect(global.context.as_deref(), global.namespace.as_deref())
                .await?;
        agentdeck::cluster::require_namespace(&conn).await?;
        let ns = conn.namespace.clone();
        if args.list {
            let pods = debug::list(&conn.client, &ns).await?;
            let ephemeral = debug::list_ephemeral(&conn.client, &ns).await?;
            if pods.is_empty() && ephemeral.is_empty() {
                return Ok::<_, Error>(format!(
                    "no debug pods or ephemeral debug containers in {ns}\n"
                ));
            }
            let when = |t: Option<jiff::Timestamp>| t.map_or_else(|| "-".into(), |t| t.to_string());
            let mut out = String::new();
            if !pods.is_empty() {
                out.push_str(&format!(
                    "{:<56} {:<40} {:<10} EXPIRES\n",
                    "NAME", "TARGET", "PHASE"
                ));
                for p in pods {
                    out.push_str(&format!(
                        "{:<56} {:<40} {:<10} {}\n",
                        p.name,
                        p.target,
                        p.phase.unwrap_or_default(),
                        when(p.expires_at)
                    ));
                }
            }
            if !ephemeral.is_empty() {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&format!(
                    "{:<56} {:<20} {:<12} {:<24} EXPIRES\n",
                    "POD", "EPHEMERAL CONTAINER", "TARGETS", "STATE"
                ));
                for e in ephemeral {
                    out.push_str(&format!(
                        "{:<56} {:<20} {:<12} {:<24} {}\n",
                        e.pod,
                        e.container,
                        e.target_container.as_deref().unwrap_or("-"),
                        e.state,
                        when(e.expires_at)
                    ));
                }
            }
            return Ok(out);
        }
        if args.cleanup {
            let deleted = debug::cleanup(&conn.client, &ns, args.pod.as_deref(), None).await?;
            return Ok(if deleted.is_empty() {
                format!("no debug pods to delete in {ns}\n")
            } else {
                deleted
                    .iter()
                    .map(|n| format!("deleted pod/{n}\n"))
                    .collect()
            });
        }
        let pod = args.pod.clone().unwrap_or_default();
        let made = debug::create(
            &conn.client,
            &DebugOptions {
                namespace: ns.clone(),
                pod,
                image: args.image.clone(),
                mode: args.mode,
                profile: args.profile,
                ttl: args.ttl,
            },
        )
        .await?;
        let mut out = match made.expires_at {
            Some(t) => format!(
                "created pod/{} (a copy of {}), deleted by the controller at {t}\n",
                made.name, made.target
            ),
            None => format!(
                "added ephemeral container {} to pod/{}\n",
                made.container, made.name
            ),
        };
        if !made.original_command.is_empty() {
            out.push_str(&format!(
                "original command of container {}: {}\n",
                made.container,
                made.original_command.join(" ")
            ));
        }
        out.push_str(&format!(
            "shell: kubectl exec -it -n {ns} {} -c {} -- sh\n",
            made.name, made.container
        ));
        Ok(out)
    })?;
    print(&text)
}

/// `agentdeck debug POD --attach`: a shell in a new debug pod (or in POD
/// when it is one already); exits with the shell's code.
fn debug_attach(
    global: &agentdeck::cli::GlobalArgs,
    args: &agentdeck::cli::DebugArgs,
) -> Result<()> {
    use agentdeck::ops::attach::{self, ShellTarget};
    use agentdeck::ops::debug::{self, DebugOptions};
    let rt = runtime()?;
    let code = rt.block_on(async {
        let conn =
            agentdeck::cluster::connect(global.context.as_deref(), global.namespace.as_deref())
                .await?;
        let ns = conn.namespace.clone();
        let pod = args.pod.clone().unwrap_or_default();
        let made = match debug::existing(&conn.client, &ns, &pod).await? {
            Some(found) => {
                eprintln!("attaching to debug pod/{}", found.name);
                found
            }
            None => {
                let made = debug::create(
                    &conn.client,
                    &DebugOptions {
                        namespace: ns.clone(),
                        pod,
                        image: args.image.clone(),
                        mode: args.mode,
                        profile: args.profile,
                        ttl: args.ttl,
                    },
                )
                .await?;
                match made.expires_at {
                    Some(t) => eprintln!(
                        "created pod/{} (a copy of {}), deleted by the controller at {t}",
                        made.name, made.target
                    ),
                    None => eprintln!(
                        "added ephemeral container {} to pod/{}",
                        made.container, made.name
                    ),
                }
                made
            }
        };
        let target = ShellTarget {
            namespace: ns,
            pod: made.name.clone(),
            container: made.container.clone(),
        };
        attach::wait_running(&conn.client, &target)
            .await
            .map_err(debug::DebugError::from)?;
        eprintln!("shell in {target}; exit or Ctrl-D ends it");
        let code = attach::shell(&conn.client, &target)
            .await
            .map_err(debug::DebugError::from)?;
        Ok::<_, Error>(code)
    })?;
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    if code != 0 {
        return Err(agentdeck::ops::debug::DebugError::ShellExited(code).into());
    }
    Ok(())
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
