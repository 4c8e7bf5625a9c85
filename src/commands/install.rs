//! `agentdeck crds`, `manifests` and `monitoring`: what to apply, printed.

use super::print;
use crate::cli::{GlobalArgs, ManifestsArgs, MonitoringArgs};
use crate::config::{Config, ConfigSources};
use crate::error::Result;
use crate::install;

/// `agentdeck crds`: both CRDs.
pub fn crds() -> Result<()> {
    print(&install::to_yaml_stream(&install::crd_documents())?)
}

/// `agentdeck manifests`: the controller's install (with `--pools`, their
/// namespaces watched and the pools themselves; `--monitoring`, the rules).
pub fn manifests(global: &GlobalArgs, args: ManifestsArgs) -> Result<()> {
    // Nothing is asked of the cluster, but a context that is not
    // there is still a mistake worth saying.
    if let Some(context) = global.context.as_deref() {
        crate::cluster::check_context(context)?;
    }
    if let Some(namespace) = args.install_namespace.as_deref() {
        crate::cluster::check_namespace(namespace, "--install-namespace")?;
    }
    let (mut config, _) = Config::load(&ConfigSources::from_process(global.config.clone()))?;
    let pools: Vec<_> = match &args.pools {
        Some(path) => install::load_pools(path)?
            .into_iter()
            .map(|(_, p)| p)
            .collect(),
        None => Vec::new(),
    };
    if config.namespaces.is_empty() {
        let apply_namespace = global
            .namespace
            .clone()
            .or_else(|| crate::cluster::context_namespace(global.context.as_deref()))
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

/// `agentdeck monitoring rules|dashboard`.
pub fn monitoring(global: &GlobalArgs, args: MonitoringArgs) -> Result<()> {
    let (mut config, _) = Config::load(&ConfigSources::from_process(global.config.clone()))?;
    match args.command {
        crate::cli::MonitoringCommand::Rules(thresholds) => {
            thresholds.apply(&mut config.monitoring);
            print(&install::to_yaml(&crate::monitoring::rules(
                &config.monitoring,
            ))?)
        }
        crate::cli::MonitoringCommand::Dashboard => {
            print(&format!("{:#}\n", crate::monitoring::dashboard()))
        }
    }
}
