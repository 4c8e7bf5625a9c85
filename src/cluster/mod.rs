//! Connecting to the Kubernetes API (a real cluster or the sandbox), shared by
//! every mode that talks to one.

use kube::config::KubeConfigOptions;

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig names no such context, or cannot be read.
    #[error("cannot load kubeconfig context {context:?}: {source}")]
    Kubeconfig {
        /// Context asked for.
        context: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor the in-cluster environment was found.
    #[error(
        "no Kubernetes configuration found (set KUBECONFIG, or run in a pod); \
         `agentdeck sandbox` starts a local one: {0}"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built from the configuration.
    #[error("cannot create a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

impl ClusterError {
    /// A mistake in what the user gave (an unknown context).
    pub fn is_user_error(&self) -> bool {
        matches!(self, ClusterError::Kubeconfig { .. })
    }
}

/// A client and the namespace the configuration points at.
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// `--namespace` if given, else the context's namespace, else `default`.
    pub namespace: String,
}

/// Connects with `context` from the kubeconfig (or, with none, whatever
/// `KUBECONFIG`/`~/.kube/config`/in-cluster gives), in `namespace` when given.
pub async fn connect(
    context: Option<&str>,
    namespace: Option<&str>,
) -> Result<Connection, ClusterError> {
    let config = match context {
        Some(context) => kube::Config::from_kubeconfig(&KubeConfigOptions {
            context: Some(context.to_owned()),
            ..KubeConfigOptions::default()
        })
        .await
        .map_err(|source| ClusterError::Kubeconfig {
            context: context.to_owned(),
            source,
        })?,
        None => kube::Config::infer().await.map_err(ClusterError::Infer)?,
    };
    let namespace = namespace
        .map(str::to_owned)
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(ClusterError::Client)?;
    Ok(Connection { client, namespace })
}
