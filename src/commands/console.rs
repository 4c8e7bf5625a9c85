//! `agentdeck` (and `--demo`, `--bundle`): the console, embedding the
//! controller, on one context or several, a demo cluster or a bundle.

use super::runtime;
use crate::cli::Cli;
use crate::config::{Config, ConfigSources};
use crate::error::{Error, Result};

/// `agentdeck` (and `--demo`): the console, embedding the controller.
pub fn console(cli: &Cli) -> Result<()> {
    use crate::app::AppOptions;
    use crate::app::keymap::Keymap;
    use crate::ui::theme::{Theme, no_color_env};

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
        Some(dir) => Some(crate::telemetry::init_with(
            crate::telemetry::TelemetryOptions {
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
        // A bundle: served read-only in this process, the console on it.
        let replay = match &cli.bundle {
            Some(path) => Some(crate::replay::Replay::start(path, 0).await?),
            None => None,
        };
        let Opened {
            mut contexts,
            demo,
            given,
            unusable,
        } = open_contexts(cli, &mut config, replay.as_ref()).await?;
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
        let live = demo.is_none() && replay.is_none();
        let (namespace, namespace_note) =
            namespace_shown(cli, &config, &contexts, all_namespaces, live);
        // What the bundle could not give is said at the start.
        let bundle = replay.as_ref().map(|r| crate::app::BundleOpened {
            file: r.bundle.info.file.clone(),
            taken_at: r.bundle.info.taken_at,
            notes: r.notes().into_iter().chain(r.bundle.missing()).collect(),
        });
        let audit_file = replay.as_ref().and_then(|r| r.audit_file());
        let replay_setup = replay.as_ref().map(|r| crate::tui::ReplaySetup {
            taken_at: r.bundle.info.taken_at,
            health: r.health_samples(),
            audit_path: audit_file.as_ref().map(|p| p.to_path_buf()),
            history: r.bundle.history(),
        });
        let bundle_note = bundle
            .as_ref()
            .filter(|b| !b.notes.is_empty())
            .map(|b| b.notes.join("; "));
        let setup = crate::tui::ConsoleSetup {
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
        let result = crate::tui::run(setup, cancel).await;
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
        let all = crate::cluster::kubeconfig_contexts()?;
        if all.is_empty() {
            return Err(crate::cluster::ClusterError::NoContexts.into());
        }
        all
    } else if !cli.global.contexts.is_empty() {
        cli.global.contexts.clone()
    } else {
        config.contexts.clone()
    };
    let mut out: Vec<Option<String>> = Vec::new();
    for name in named {
        crate::cluster::check_context(&name)?;
        if !out.iter().any(|n| n.as_deref() == Some(name.as_str())) {
            out.push(Some(name));
        }
    }
    if out.is_empty() {
        out.push(None);
    }
    Ok(out)
}

/// `-A`: every namespace when this identity may list AgentPools in all
/// of them; else the first namespace it may read them in (the kube
/// context's when none can be found), with a note that says so.
async fn all_namespaces_or_readable(
    conn: &mut crate::cluster::Connection,
) -> (bool, Option<String>) {
    use crate::ops::access::readable_namespaces;
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

/// The contexts a console opens, and what the header says of them.
struct Opened {
    contexts: Vec<crate::tui::ContextSetup>,
    /// The demo cluster (`--demo`), stopped when the console ends.
    demo: Option<crate::demo::Demo>,
    /// The contexts asked for, in order (the header lists them all).
    given: Vec<String>,
    /// Those of several that could not be used, and why.
    unusable: Vec<(String, String)>,
}

/// The bundle's context, the demo's (its probes made quick), or those
/// asked for: one that cannot be used is an error, one of several is
/// shown with its reason.
async fn open_contexts(
    cli: &Cli,
    config: &mut Config,
    replay: Option<&crate::replay::Replay>,
) -> Result<Opened> {
    // Read-only refuses actions in the app; no runner either. The
    // audit records the context acted in.
    let runner = |context: &str| {
        (!cli.read_only).then(|| crate::tui::actions::ops_runner(Some(context.to_owned())))
    };
    let mut unusable = Vec::new();
    let mut given = Vec::new();
    let (contexts, demo) = if let Some(r) = replay {
        // The bundle's namespaces, whatever the configuration watches.
        config.namespaces = r.bundle.info.namespaces.clone();
        let one = crate::tui::ContextSetup {
            name: r.context(),
            conn: r.conn.clone(),
            actions: None,
        };
        (vec![one], None)
    } else if cli.demo {
        let demo = crate::demo::Demo::start().await?;
        // Health probed often, so the colours move; idle agents poll
        // every 30 s, so they count as stale only after that.
        config.health_probe.interval_seconds = 2;
        config.health_probe.stale_after_seconds = Some(35);
        config.resync_interval_seconds = 10;
        let one = crate::tui::ContextSetup {
            name: demo.context.clone(),
            conn: demo.conn.clone(),
            actions: runner(&demo.context),
        };
        (vec![one], Some(demo))
    } else {
        let names = console_contexts(cli, config)?;
        given = names
            .iter()
            .map(|n| crate::ops::action::context_name(n.as_deref()))
            .collect();
        let several = names.len() > 1;
        let mut contexts = Vec::new();
        let mut first_error = None;
        for name in &names {
            let conn =
                crate::cluster::connect(name.as_deref(), cli.global.namespace.as_deref()).await;
            let name = crate::ops::action::context_name(name.as_deref());
            match conn {
                Ok(conn) => contexts.push(crate::tui::ContextSetup {
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
    Ok(Opened {
        contexts,
        demo,
        given,
        unusable,
    })
}

/// The namespace the header shows, and (`live`: neither a demo nor a
/// bundle) a note when nobody chose it.
fn namespace_shown(
    cli: &Cli,
    config: &Config,
    contexts: &[crate::tui::ContextSetup],
    all_namespaces: bool,
    live: bool,
) -> (String, Option<String>) {
    let mut namespaces: Vec<&str> = contexts.iter().map(|c| c.conn.namespace.as_str()).collect();
    namespaces.dedup();
    let namespace = if all_namespaces {
        "(all)".to_owned()
    } else if config.namespaces.is_empty() {
        namespaces.join(",")
    } else {
        config.namespaces.join(",")
    };
    // Nobody chose the namespace: say which default was taken.
    let namespace_note = (live
        && !all_namespaces
        && cli.global.namespace.is_none()
        && config.namespaces.is_empty()
        && contexts.len() == 1
        && crate::cluster::context_namespace(cli.global.contexts.first().map(String::as_str))
            .is_none())
    .then(|| {
        format!(
            "the kube context names no namespace, so {namespace} was taken (-n NAME picks another)"
        )
    });
    (namespace, namespace_note)
}
