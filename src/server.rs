//! The daemon's HTTP server: `/healthz` (the agents' JSON shape), `/readyz`
//! and `/metrics` (OpenMetrics text format, which Prometheus scrapes).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use crate::controller::ControllerHandle;

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("health server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Where to listen: `server.bind` when set, else the pod's own IP when
/// the pod says it (`POD_IP`, as the agents bind theirs), else every
/// address inside a cluster and loopback outside one, where agents in the
/// sandbox bind 127.x addresses of their own: a wildcard bind there
/// would collide with theirs on the same port.
pub fn address(config: &ServerConfig) -> SocketAddr {
    let pod_ip = std::env::var("POD_IP").ok();
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    SocketAddr::new(
        default_ip(config.bind_ip(), pod_ip.as_deref(), in_cluster),
        config.port,
    )
}

/// [`address`]'s choice, given what the environment says.
fn default_ip(configured: Option<IpAddr>, pod_ip: Option<&str>, in_cluster: bool) -> IpAddr {
    configured
        .or_else(|| pod_ip.and_then(|ip| ip.trim().parse().ok()))
        .unwrap_or(if in_cluster {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        })
}

/// Binds `addr`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// The routes, over a running controller.
pub fn router(controller: Arc<ControllerHandle>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(controller)
}

/// Serves on `listener` until `cancel`.
pub async fn serve(
    listener: TcpListener,
    controller: Arc<ControllerHandle>,
    cancel: CancellationToken,
) -> Result<(), ServerError> {
    axum::serve(listener, router(controller))
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await
        .map_err(ServerError::Serve)
}

async fn healthz(State(c): State<Arc<ControllerHandle>>) -> Response {
    let report = c.health();
    let code = StatusCode::from_u16(report.http_status()).unwrap_or(StatusCode::OK);
    match serde_json::to_string(&report) {
        Ok(body) => (code, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn readyz(State(c): State<Arc<ControllerHandle>>) -> Response {
    if c.is_synced() {
        return (StatusCode::OK, "ok\n").into_response();
    }
    // A watch the API refuses never syncs: name it, so that a daemon
    // without its rights (or its CRDs) says what it lacks.
    use crate::cluster::watches::{Phase, Refusal};
    let mut body = "watches not synced\n".to_owned();
    for (kind, w) in c.view().watches.statuses() {
        let Phase::Refused(refusal) = w.phase else {
            continue;
        };
        let line = match refusal {
            Refusal::Forbidden(verb) => format!(
                "forbidden: {verb} {kind}: {}\n",
                w.reason.unwrap_or_default()
            ),
            Refusal::NotServed => format!(
                "not served: {kind} (install the CRDs: {})\n",
                crate::cluster::INSTALL_CRDS
            ),
        };
        body.push_str(&line);
    }
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

async fn metrics(State(c): State<Arc<ControllerHandle>>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            crate::controller::metrics::CONTENT_TYPE,
        )],
        c.metrics_text(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_binds_what_is_configured_else_its_pod_ip_else_by_where_it_runs() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(default_ip(Some(ip("::")), Some("10.0.0.7"), true), ip("::"));
        assert_eq!(default_ip(None, Some("10.0.0.7"), true), ip("10.0.0.7"));
        assert_eq!(default_ip(None, Some("not-an-ip"), true), ip("0.0.0.0"));
        assert_eq!(default_ip(None, None, true), ip("0.0.0.0"));
        assert_eq!(default_ip(None, None, false), ip("127.0.0.1"));
    }
}
