//! Connecting to the Kubernetes API (a real cluster or the sandbox), shared by
//! every mode that talks to one.

/// What makes a cached form of a k8s-openapi kind (only the fields read,
/// the same names and types) a store object: the kind's resource identity,
/// its `metadata`, and `of`, the cached form of a whole object.
macro_rules! cached_form {
    ($cached:ty, $whole:ty) => {
        impl $cached {
            /// The cached form of a whole object (what the watch would have
            /// decoded).
            pub fn of(whole: &$whole) -> $cached {
                serde_json::to_value(whole)
                    .and_then(serde_json::from_value)
                    .unwrap_or_default()
            }
        }

        impl k8s_openapi::Resource for $cached {
            const API_VERSION: &'static str = <$whole as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$whole as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$whole as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$whole as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$whole as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = k8s_openapi::NamespaceResourceScope;
        }

        impl k8s_openapi::Metadata for $cached {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}

pub mod debug_pods;
pub mod deployment;
pub mod event;
pub mod feed;
pub mod health;
pub mod listwatch;
pub mod pod;
pub mod reflect;
pub mod slim;
pub mod view;
pub mod watches;

pub use health::{AgentSample, HealthSamples};
pub use view::{
    ByPool, Changes, ClusterView, Feeds, slim_finished_task, strip_pod, strip_task,
    task_output_stripped, with_kept_output,
};
pub use watches::{WatchBoard, WatchCell};

use kube::config::KubeConfigOptions;

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// `--context` names a context the kubeconfig does not have.
    #[error(
        "kube context {context:?} is not in the kubeconfig{}; contexts there: {}",
        source_hint(),
        list(known)
    )]
    UnknownContext {
        /// Context asked for.
        context: String,
        /// The contexts the kubeconfig has.
        known: Vec<String>,
    },
    /// `--all-contexts`, and the kubeconfig has none.
    #[error("--all-contexts: the kubeconfig{} has no contexts", source_hint())]
    NoContexts,
    /// The kubeconfig names the context but it cannot be used.
    #[error(
        "cannot load kubeconfig context {context:?}{}: {source}",
        source_hint()
    )]
    Kubeconfig {
        /// Context asked for.
        context: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig is missing or not a kubeconfig, and this is not a pod.
    #[error(
        "no usable Kubernetes configuration: kubeconfig{}: {kubeconfig}; and not running in a cluster (KUBERNETES_SERVICE_HOST unset). Set KUBECONFIG or --context, or start a local API with `agentdeck sandbox`",
        source_hint()
    )]
    Infer {
        /// Why the kubeconfig could not be used.
        kubeconfig: String,
        /// kube's full answer.
        #[source]
        source: kube::config::InferConfigError,
    },
    /// In a pod, the service-account configuration could not be used.
    #[error("cannot use the in-cluster configuration: {0}")]
    InCluster(#[source] kube::config::InferConfigError),
    /// `--namespace` (or the context's namespace) is not a namespace name.
    #[error("namespace {namespace:?} (from {from}) is not valid; expected {expected}")]
    InvalidNamespace {
        /// The name given.
        namespace: String,
        /// `--namespace` or the kube context.
        from: &'static str,
        /// What a namespace name is.
        expected: String,
    },
    /// The namespace asked for is not there.
    #[error(
        "namespace {namespace:?} does not exist on {server}; {}",
        namespaces_there(known)
    )]
    NoSuchNamespace {
        /// The namespace given.
        namespace: String,
        /// The API server asked.
        server: String,
        /// The namespaces there (empty when they cannot be listed).
        known: Vec<String>,
    },
    /// A request made before anything else failed.
    #[error("{}", api_fault(what, source))]
    Api {
        /// What was asked ("read namespace default").
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The client could not be built from the configuration.
    #[error("cannot create a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

impl ClusterError {
    /// A mistake in what the user gave: an unknown context, a kubeconfig
    /// that is missing or not one, a bad namespace name.
    pub fn is_user_error(&self) -> bool {
        !matches!(
            self,
            ClusterError::Client(_) | ClusterError::InCluster(_) | ClusterError::Api { .. }
        )
    }
}

fn namespaces_there(known: &[String]) -> String {
    if known.is_empty() {
        "the namespaces there cannot be listed".to_owned()
    } else {
        format!("namespaces there: {}", known.join(", "))
    }
}

/// Checks that the connection's namespace exists: a missing one is
/// [`ClusterError::NoSuchNamespace`], an API that cannot be used (not
/// reached, token refused) [`ClusterError::Api`]. A user who may not read
/// namespaces (403) is let through: nothing says it is missing.
pub async fn require_namespace(conn: &Connection) -> Result<(), ClusterError> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(conn.client.clone());
    match api.get_opt(&conn.namespace).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            let known = api
                .list(&kube::api::ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter_map(|n| n.metadata.name)
                        .collect()
                })
                .unwrap_or_default();
            Err(ClusterError::NoSuchNamespace {
                namespace: conn.namespace.clone(),
                server: server_label(),
                known,
            })
        }
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(()),
        Err(source) => Err(ClusterError::Api {
            what: format!("read namespace {}", conn.namespace),
            source,
        }),
    }
}

/// ` (KUBECONFIG=…)` when the variable is set, so the message says which file.
fn source_hint() -> String {
    match std::env::var_os("KUBECONFIG") {
        Some(value) if !value.is_empty() => format!(" (KUBECONFIG={})", value.to_string_lossy()),
        _ => String::new(),
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The API server the last [`connect`] went to, for messages about it.
static SERVER: std::sync::RwLock<Option<String>> = std::sync::RwLock::new(None);

/// The API server this process talks to (`https://10.96.0.1:443`), or
/// "the configured API server" when not known.
pub fn server_label() -> String {
    SERVER
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
        .unwrap_or_else(|| "the configured API server".to_owned())
}

/// One line about a failed API request: the server, the operation (`what`,
/// as in "list AgentPools in namespace default") and the cause, in words
/// rather than kube's `Debug` of the Status.
pub fn api_fault(what: &str, e: &kube::Error) -> String {
    let server = server_label();
    if is_not_served(e) && names_own_resource(what) {
        return format!("cannot {what}: {}", not_installed(&server));
    }
    match e {
        kube::Error::Api(s) if s.code == 401 => format!(
            "the token was refused by {server} (to {what}): log in again or check the kubeconfig user"
        ),
        kube::Error::Api(s) if s.code == 403 => format!(
            "{server} does not allow the kubeconfig user to {what}: {}",
            s.message
        ),
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", s.reason)
            };
            format!(
                "cannot {what}: {server} answered {}{reason}: {}",
                s.code, s.message
            )
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            format!(
                "cannot reach the API server at {server} to {what}: {}",
                root_cause(e)
            )
        }
        other => format!("cannot {what} at {server}: {}", root_cause(other)),
    }
}

/// The command that installs agentdeck's CustomResourceDefinitions.
pub const INSTALL_CRDS: &str = "agentdeck crds | kubectl apply -f -";

/// What a user is told when the API does not serve agentdeck's resources.
pub fn not_installed(server: &str) -> String {
    format!(
        "agentdeck is not installed on {server}: it does not serve AgentPools and AgentTasks \
         (their CustomResourceDefinitions are missing). Install them with `{INSTALL_CRDS}` \
         (`agentdeck access` says whether you may; else a cluster admin can)"
    )
}

/// Whether `e` says the server does not serve the resource at all (a
/// CustomResourceDefinition not installed), rather than that one named
/// object is missing: kube-apiserver's 404 for an unknown resource names
/// no object in its details.
pub fn is_not_served(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) if s.code == 404 => s
            .details
            .as_ref()
            .is_none_or(|d| d.name.is_empty() && d.kind.is_empty()),
        _ => false,
    }
}

/// `api.get_opt(name)`, except that a resource the server does not serve
/// is an error, not "no such object" (kube's `get_opt` answers `None` for
/// both).
pub async fn get_served<K>(api: &kube::Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get(name).await {
        Ok(object) => Ok(Some(object)),
        Err(e) if is_not_served(&e) => Err(e),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether an operation in words is on agentdeck's own resources.
fn names_own_resource(what: &str) -> bool {
    let what = what.to_ascii_lowercase();
    what.contains("agentpool") || what.contains("agenttask")
}

/// [`api_fault`] without the operation, for lists that say it already.
pub fn api_cause(e: &kube::Error) -> String {
    let server = server_label();
    if is_not_served(e) {
        return format!(
            "{server} does not serve it (404): agentdeck's CRDs are not installed? `{INSTALL_CRDS}`"
        );
    }
    match e {
        kube::Error::Api(s) if s.code == 401 => {
            format!("the token was refused by {server}: log in again or check the kubeconfig user")
        }
        kube::Error::Api(s) => format!("{} ({}): {}", s.reason, s.code, s.message),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            format!("cannot reach the API server at {server}: {}", root_cause(e))
        }
        other => format!("{server}: {}", root_cause(other)),
    }
}

/// Whether `e` says the API server cannot be used at all (not reached, or
/// the credentials refused), rather than something about one request.
pub fn is_unusable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 401,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The innermost cause of `e`, without the OS error number:
/// "connection refused" rather than "ServiceError: client error (Connect)".
pub fn root_cause(e: &dyn std::error::Error) -> String {
    let mut inner = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    let text = inner.to_string();
    let text = match text.find(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_owned(),
        _ => text,
    };
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        // "Connection refused" → "connection refused"; "TLS …" stays.
        (Some(first), Some(second)) if first.is_uppercase() && second.is_lowercase() => {
            first.to_lowercase().collect::<String>() + &text[first.len_utf8()..]
        }
        _ => text,
    }
}

/// The kubeconfig's current context (`KUBECONFIG` or `~/.kube/config`),
/// when there is one.
pub fn current_context() -> Option<String> {
    kube::config::Kubeconfig::read()
        .ok()?
        .current_context
        .filter(|c| !c.is_empty())
}

/// Every context of the kubeconfig (`KUBECONFIG` or `~/.kube/config`), in
/// its order, for `--all-contexts`.
pub fn kubeconfig_contexts() -> Result<Vec<String>, ClusterError> {
    let kubeconfig =
        kube::config::Kubeconfig::read().map_err(|source| ClusterError::Kubeconfig {
            context: "(all)".to_owned(),
            source,
        })?;
    Ok(kubeconfig.contexts.into_iter().map(|c| c.name).collect())
}

/// Checks that the kubeconfig (`KUBECONFIG` or `~/.kube/config`) can be
/// read and has `context`, without connecting: for commands such as
/// `manifests` that only render, so `--context nosuch` is still refused.
pub fn check_context(context: &str) -> Result<(), ClusterError> {
    let kubeconfig =
        kube::config::Kubeconfig::read().map_err(|source| ClusterError::Kubeconfig {
            context: context.to_owned(),
            source,
        })?;
    let known: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    if known.iter().any(|name| name == context) {
        Ok(())
    } else {
        Err(ClusterError::UnknownContext {
            context: context.to_owned(),
            known,
        })
    }
}

/// The namespace of `context` (or of the current context) in the
/// kubeconfig, without connecting: where `kubectl apply` puts objects that
/// name none. None when there is no kubeconfig or it names none.
pub fn context_namespace(context: Option<&str>) -> Option<String> {
    let kubeconfig = kube::config::Kubeconfig::read().ok()?;
    let name = context
        .map(str::to_owned)
        .or_else(|| kubeconfig.current_context.clone())?;
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == name)?
        .context
        .as_ref()?
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
}

/// Checks a namespace name before anything is watched in it.
pub fn check_namespace(namespace: &str, from: &'static str) -> Result<(), ClusterError> {
    crate::config::check_namespace("namespace", namespace).map_err(|invalid| {
        ClusterError::InvalidNamespace {
            namespace: namespace.to_owned(),
            from,
            expected: invalid.expected,
        }
    })
}

/// A client and the namespace the configuration points at.
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// Clients for long-lived streams (the controller follows the log of
    /// every agent container). `None`: use `client`.
    pub streams: Option<StreamClients>,
    /// `--namespace` if given, else the context's namespace, else `default`.
    pub namespace: String,
}

/// Whom requests act as instead of the kubeconfig's user (`--as`,
/// `--as-group`, as `kubectl` takes them): sent as the API's
/// `Impersonate-User` and `Impersonate-Group` headers, which the API server
/// honours only for a user allowed to `impersonate` that user (or service
/// account) and those groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Impersonation {
    /// A user name, or `system:serviceaccount:NS:NAME`.
    pub user: String,
    /// Groups to act in as well.
    pub groups: Vec<String>,
}

impl Impersonation {
    /// The namespace and name of the service account impersonated, if the
    /// user is one (`system:serviceaccount:NS:NAME`).
    pub fn service_account(&self) -> Option<(&str, &str)> {
        let rest = self.user.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
    }

    /// What the impersonating user must be allowed, in words:
    /// "impersonate on serviceaccounts in team-a" (and "on groups").
    pub fn needs(&self) -> String {
        let mut out = match self.service_account() {
            Some((ns, _)) => format!("impersonate on serviceaccounts in {ns}"),
            None => "impersonate on users".to_owned(),
        };
        if !self.groups.is_empty() {
            out.push_str(" and on groups");
        }
        out
    }
}

/// Connects with `context` from the kubeconfig (or, with none, whatever
/// `KUBECONFIG`/`~/.kube/config`/in-cluster gives), in `namespace` when given.
pub async fn connect(
    context: Option<&str>,
    namespace: Option<&str>,
) -> Result<Connection, ClusterError> {
    connect_as(context, namespace, None).await
}

/// [`connect`], every request acting as `impersonation` when given.
pub async fn connect_as(
    context: Option<&str>,
    namespace: Option<&str>,
    impersonation: Option<&Impersonation>,
) -> Result<Connection, ClusterError> {
    if let Some(namespace) = namespace {
        check_namespace(namespace, "--namespace")?;
    }
    let mut config = match context {
        Some(context) => {
            check_context(context)?;
            kube::Config::from_kubeconfig(&KubeConfigOptions {
                context: Some(context.to_owned()),
                ..KubeConfigOptions::default()
            })
            .await
            .map_err(|source| ClusterError::Kubeconfig {
                context: context.to_owned(),
                source,
            })?
        }
        None => kube::Config::infer().await.map_err(|source| {
            if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
                return ClusterError::InCluster(source);
            }
            let kubeconfig = std::error::Error::source(&source)
                .map(ToString::to_string)
                .unwrap_or_else(|| source.to_string());
            ClusterError::Infer { kubeconfig, source }
        })?,
    };
    if let Some(as_) = impersonation {
        config.auth_info.impersonate = Some(as_.user.clone());
        config.auth_info.impersonate_groups = (!as_.groups.is_empty()).then(|| as_.groups.clone());
    }
    let namespace = match namespace {
        Some(namespace) => namespace.to_owned(),
        None => {
            check_namespace(&config.default_namespace, "the kube context")?;
            config.default_namespace.clone()
        }
    };
    *SERVER
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(
        config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned(),
    );
    let streams = StreamClients::new(&config).map_err(ClusterError::Client)?;
    let client = kube::Client::try_from(config).map_err(ClusterError::Client)?;
    Ok(Connection {
        client,
        streams: Some(streams),
        namespace,
    })
}

/// Read buffer of a stream client's HTTP/1.1 connection. hyper's adaptive
/// buffer starts at 8 KiB per connection and grows; a followed log arrives
/// a line at a time, and a leader follows up to 2,000 containers. Response
/// heads must fit in it (an API server's are a few hundred bytes).
pub const STREAM_READ_BUFFER: usize = 2048;

/// Streams one HTTP/2 connection carries at most. kube-apiserver allows
/// 100 concurrent streams per connection (since the 2023 rapid-reset fix),
/// and an HTTP/2 client that reaches a server's limit queues further
/// requests on that connection, which for never-ending log follows means
/// forever: the streams are spread over connections with room to spare.
pub const STREAMS_PER_CONNECTION: usize = 64;

/// HTTP/2 pings on a stream connection: a silent followed log on a dead
/// connection is noticed within interval + timeout.
const STREAM_PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
const STREAM_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Clients for long-lived streams (the controller follows the log of every
/// agent container). Against an API server, which speaks HTTP/2 over TLS,
/// a thousand followed logs are a thousand streams over
/// ⌈1000 / [`STREAMS_PER_CONNECTION`]⌉ connections rather than a thousand
/// TLS connections, each with its buffers on both ends. A server that
/// speaks only HTTP/1.1 gets a connection per stream, as before, with
/// [`STREAM_READ_BUFFER`] bytes of read buffer each.
#[derive(Clone)]
pub struct StreamClients {
    inner: std::sync::Arc<StreamInner>,
}

enum StreamInner {
    /// One client for every stream (through a proxy, and in tests).
    Shared(kube::Client),
    /// A client (so a connection) per [`STREAMS_PER_CONNECTION`] streams,
    /// made as streams need them.
    Spread {
        config: Box<kube::Config>,
        slots: std::sync::Mutex<Vec<StreamSlot>>,
    },
}

#[derive(Clone)]
struct StreamSlot {
    client: kube::Client,
    room: std::sync::Arc<tokio::sync::Semaphore>,
}

/// A client to open one stream with; the stream counts against its
/// connection until this is dropped.
pub struct StreamLease {
    /// The client to open the stream with.
    pub client: kube::Client,
    _room: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl StreamClients {
    /// Every stream over `client`.
    pub fn shared(client: kube::Client) -> Self {
        Self {
            inner: std::sync::Arc::new(StreamInner::Shared(client)),
        }
    }

    /// Stream clients with the connection settings of `config` (TLS,
    /// credentials, headers, connect timeout; like kube's, no read
    /// timeout), HTTP/2 offered, pings on silent connections and TCP
    /// keepalive. Through a proxy: the ordinary client. The settings are
    /// checked here, by making the first client.
    pub fn new(config: &kube::Config) -> Result<Self, kube::Error> {
        if config.proxy_url.is_some() {
            return Ok(Self::shared(kube::Client::try_from(config.clone())?));
        }
        let first = StreamSlot {
            client: stream_client(config)?,
            room: std::sync::Arc::new(tokio::sync::Semaphore::new(STREAMS_PER_CONNECTION)),
        };
        Ok(Self {
            inner: std::sync::Arc::new(StreamInner::Spread {
                config: Box::new(config.clone()),
                slots: std::sync::Mutex::new(vec![first]),
            }),
        })
    }

    /// A client with room for one more stream.
    pub fn lease(&self) -> Result<StreamLease, kube::Error> {
        let (config, slots) = match &*self.inner {
            StreamInner::Shared(client) => {
                return Ok(StreamLease {
                    client: client.clone(),
                    _room: None,
                });
            }
            StreamInner::Spread { config, slots } => (config, slots),
        };
        let mut slots = slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for slot in slots.iter() {
            if let Ok(room) = slot.room.clone().try_acquire_owned() {
                return Ok(StreamLease {
                    client: slot.client.clone(),
                    _room: Some(room),
                });
            }
        }
        let slot = StreamSlot {
            client: stream_client(config)?,
            room: std::sync::Arc::new(tokio::sync::Semaphore::new(STREAMS_PER_CONNECTION)),
        };
        let room = slot.room.clone().try_acquire_owned().ok();
        let client = slot.client.clone();
        slots.push(slot);
        Ok(StreamLease {
            client,
            _room: room,
        })
    }

    /// Connections' worth of clients made so far (one for a shared client).
    pub fn clients(&self) -> usize {
        match &*self.inner {
            StreamInner::Shared(_) => 1,
            StreamInner::Spread { slots, .. } => slots
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .len(),
        }
    }
}

/// One stream client: its own connection pool, so with HTTP/2 its own
/// connection.
fn stream_client(config: &kube::Config) -> Result<kube::Client, kube::Error> {
    use hyper_util::client::legacy::connect::HttpConnector;
    use kube::client::ConfigExt;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_keepalive(Some(std::time::Duration::from_secs(60)));
    // As kube's own connector, but offering HTTP/2 as well.
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name.clone().try_into().map_err(|_| {
            kube::Error::Service(format!("invalid TLS server name {name:?}").into())
        })?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = tls.enable_http1().enable_http2().wrap_connector(http);
    let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .http1_read_buf_exact_size(STREAM_READ_BUFFER)
            .http2_keep_alive_interval(STREAM_PING_INTERVAL)
            .http2_keep_alive_timeout(STREAM_PING_TIMEOUT)
            .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_checked_before_connecting() {
        for bad in ["Bad_NS", "", "-a", "a.b", &"n".repeat(64)] {
            let err = check_namespace(bad, "--namespace").expect_err(bad);
            assert!(err.is_user_error());
            let text = err.to_string();
            assert!(text.contains(&format!("{bad:?}")), "{text}");
            assert!(text.contains("--namespace"), "{text}");
            assert!(text.contains("lowercase letters"), "{text}");
        }
        assert!(check_namespace("team-a", "--namespace").is_ok());
    }

    #[test]
    fn an_impersonation_says_what_the_impersonator_needs() {
        let sa = Impersonation {
            user: "system:serviceaccount:team-a:viewer".into(),
            groups: Vec::new(),
        };
        assert_eq!(sa.service_account(), Some(("team-a", "viewer")));
        assert_eq!(sa.needs(), "impersonate on serviceaccounts in team-a");
        let user = Impersonation {
            user: "jane".into(),
            groups: vec!["ops".into()],
        };
        assert_eq!(user.service_account(), None);
        assert_eq!(user.needs(), "impersonate on users and on groups");
        let odd = Impersonation {
            user: "system:serviceaccount:team-a".into(),
            groups: Vec::new(),
        };
        assert_eq!(odd.service_account(), None);
    }

    #[test]
    fn an_unknown_context_lists_the_known_ones() {
        let err = ClusterError::UnknownContext {
            context: "nosuch".into(),
            known: vec!["kind".into(), "prod".into()],
        };
        assert!(err.is_user_error());
        assert!(
            err.to_string().contains("contexts there: kind, prod"),
            "{err}"
        );
    }

    #[test]
    fn an_api_fault_is_one_line_naming_the_server_the_operation_and_the_cause() {
        let status = |code: u16, reason: &str, message: &str| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure(message, reason).with_code(code),
            ))
        };
        // Other tests may connect meanwhile: the server is any one word (or
        // the words for none).
        let says = |e: &kube::Error, pattern: &str| {
            let text = api_fault("list AgentPools in namespace default", e);
            let re = regex::Regex::new(&format!("^{pattern}$")).expect("pattern");
            assert!(re.is_match(&text), "{text}");
        };
        says(
            &status(401, "Unauthorized", "Unauthorized"),
            r"the token was refused by (?:\S+|the configured API server) \(to list AgentPools in namespace default\): log in again or check the kubeconfig user",
        );
        says(
            &status(500, "InternalError", "etcd is down"),
            r"cannot list AgentPools in namespace default: (?:\S+|the configured API server) answered 500 InternalError: etcd is down",
        );
        let refused = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        );
        says(
            &kube::Error::Service(Box::new(refused)),
            r"cannot reach the API server at (?:\S+|the configured API server) to list AgentPools in namespace default: connection refused",
        );
    }
}
