//! What the agent knows about itself, shared by its loops and served on
//! `/healthz`: last activity, whether the API answers, whether it drains.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::AgentError;
use super::plan::health_status;
use crate::health::HealthReport;

/// Shared, cheap-to-update agent state.
#[derive(Debug)]
pub struct AgentState {
    last_activity: Mutex<Timestamp>,
    api_reachable: AtomicBool,
    /// Pool `spec.drain` or the pod's drain annotation.
    drain_requested: AtomicBool,
    /// SIGTERM received: no new claims whatever the pool says.
    stopping: AtomicBool,
    /// Watches have listed once, so claims see the whole pool.
    synced: AtomicBool,
    /// The pool's `taskDefaults.maxAttempts`.
    max_attempts: AtomicI32,
}

impl Default for AgentState {
    fn default() -> Self {
        AgentState {
            last_activity: Mutex::new(Timestamp::now()),
            // Unknown until the first list or write answers.
            api_reachable: AtomicBool::new(false),
            drain_requested: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            synced: AtomicBool::new(false),
            max_attempts: AtomicI32::new(super::plan::MAX_ATTEMPTS),
        }
    }
}

impl AgentState {
    /// A sign of work: watch event, claim, heartbeat or finish.
    pub fn touch(&self) {
        *self
            .last_activity
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Timestamp::now();
    }

    /// An API call succeeded (also a sign of activity).
    pub fn api_ok(&self) {
        self.api_reachable.store(true, Ordering::Relaxed);
        self.touch();
    }

    /// A probe reached the API (not work, so activity stays).
    pub fn set_reachable(&self) {
        self.api_reachable.store(true, Ordering::Relaxed);
    }

    /// Whether the last API call or watch answered.
    pub fn reachable(&self) -> bool {
        self.api_reachable.load(Ordering::Relaxed)
    }

    /// An API call or watch failed.
    pub fn api_failed(&self) {
        self.api_reachable.store(false, Ordering::Relaxed);
    }

    /// The pool or pod asks for a drain (or no longer does).
    pub fn set_drain_requested(&self, on: bool) {
        self.drain_requested.store(on, Ordering::Relaxed);
    }

    /// The process was told to stop.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// The watches have listed once.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    /// Whether the watches have listed once.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    /// The pool's attempt limit, as last seen.
    pub fn set_max_attempts(&self, n: i32) {
        self.max_attempts.store(n.max(1), Ordering::Relaxed);
    }

    /// Attempts a task gets before a requeue fails it.
    pub fn max_attempts(&self) -> i32 {
        self.max_attempts.load(Ordering::Relaxed)
    }

    /// Whether new tasks may be claimed.
    pub fn may_claim(&self) -> bool {
        !self.draining() && self.synced()
    }

    /// Draining or stopping: no new work.
    pub fn draining(&self) -> bool {
        self.drain_requested.load(Ordering::Relaxed) || self.stopping.load(Ordering::Relaxed)
    }

    /// The `/healthz` body now.
    pub fn report(&self) -> HealthReport {
        HealthReport {
            status: health_status(self.api_reachable.load(Ordering::Relaxed), self.draining()),
            current_time: Timestamp::now(),
            last_activity: *self
                .last_activity
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        }
    }
}

/// Where `/healthz` listens: the pod IP when known (in the sandbox every
/// pod has its own loopback IP, so a wildcard bind would collide), else all
/// addresses.
pub fn bind_addr(pod_ip: Option<&str>, port: u16) -> SocketAddr {
    let ip = pod_ip
        .and_then(|ip| ip.trim().parse::<IpAddr>().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    SocketAddr::new(ip, port)
}

async fn healthz(State(state): State<Arc<AgentState>>) -> Response {
    let report = state.report();
    let code = StatusCode::from_u16(report.http_status()).unwrap_or(StatusCode::OK);
    match serde_json::to_vec(&report) {
        Ok(body) => (
            code,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn readyz(State(state): State<Arc<AgentState>>) -> StatusCode {
    if state.synced.load(Ordering::Relaxed) && state.api_reachable.load(Ordering::Relaxed) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// Binds `/healthz` and `/readyz` and serves them until `cancel`.
pub async fn serve_health(
    addr: SocketAddr,
    state: Arc<AgentState>,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, AgentError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| AgentError::HealthBind { addr, source })?;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state);
    Ok(tokio::spawn(async move {
        let shutdown = async move { cancel.cancelled().await };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!(error = %e, "health server stopped");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;

    #[test]
    fn binds_the_pod_ip_when_set_else_everything() {
        assert_eq!(
            bind_addr(Some("127.1.0.7"), 8080),
            "127.1.0.7:8080".parse().expect("addr")
        );
        assert_eq!(bind_addr(None, 9), "0.0.0.0:9".parse().expect("addr"));
        assert_eq!(bind_addr(Some(""), 9), "0.0.0.0:9".parse().expect("addr"));
    }

    #[test]
    fn the_report_follows_drain_stop_and_api_state() {
        let s = AgentState::default();
        assert_eq!(
            s.report().status,
            HealthStatus::Unhealthy,
            "until the API answers"
        );
        s.api_ok();
        assert_eq!(s.report().status, HealthStatus::Healthy);
        assert!(!s.may_claim(), "not before the first list");
        s.set_synced();
        assert!(s.may_claim());
        s.set_drain_requested(true);
        assert_eq!(s.report().status, HealthStatus::Draining);
        s.set_drain_requested(false);
        s.set_stopping();
        assert_eq!(s.report().status, HealthStatus::Draining);
        assert!(!s.may_claim());
        s.api_failed();
        assert_eq!(s.report().status, HealthStatus::Unhealthy);
        let before = s.report().last_activity;
        s.api_ok();
        assert!(s.report().last_activity >= before);
        assert_eq!(s.report().status, HealthStatus::Draining);
    }
}
