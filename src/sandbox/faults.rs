//! Faults the sandbox can inject so reliability tests exercise the real
//! client code: dropped watches, 429/500 answers, latency and compaction.
//! Driven in-process through [`Faults`] or over HTTP at `/sandbox/faults`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// Answer the next `count` requests whose path starts with `path_prefix`
/// (and whose method matches, when given) with `code`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailRule {
    /// Path prefix, e.g. `/apis/apps/v1/namespaces/default/deployments`.
    pub path_prefix: String,
    /// Only this method (GET, PATCH …); any when absent.
    #[serde(default)]
    pub method: Option<String>,
    /// 429 (with Retry-After: 1) or 500, or any other status.
    pub code: u16,
    /// How many requests to fail.
    pub count: u32,
}

/// Distinct request keys counted before new ones are lumped together.
pub const REQUEST_PATHS: usize = 10_000;

/// Where requests to paths past [`REQUEST_PATHS`] are counted.
pub const OTHER_PATHS: &str = "(other paths)";

/// The fault switchboard.
#[derive(Debug, Default)]
pub struct Faults {
    watches: Mutex<CancellationToken>,
    rules: Mutex<Vec<FailRule>>,
    latency: Mutex<Duration>,
    requests: Mutex<BTreeMap<String, u64>>,
    restart: Mutex<(CancellationToken, Duration)>,
}

impl Faults {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A token every open watch ends on; replaced after each drop.
    pub fn watch_token(&self) -> CancellationToken {
        Self::lock(&self.watches).clone()
    }

    /// Ends every open watch (clients see their stream close).
    pub fn drop_watches(&self) {
        let mut g = Self::lock(&self.watches);
        g.cancel();
        *g = CancellationToken::new();
    }

    /// Asks the HTTP server to stop listening, stay down for `down`, then
    /// listen again on the same port with the same store (as a restarted
    /// apiserver over the same etcd): clients see their connections drop.
    pub fn restart_server(&self, down: Duration) {
        let mut g = Self::lock(&self.restart);
        g.0.cancel();
        *g = (CancellationToken::new(), down);
    }

    /// A token the server stops on to restart, and how long it stays down.
    pub(crate) fn restart_token(&self) -> (CancellationToken, Duration) {
        let g = Self::lock(&self.restart);
        (g.0.clone(), g.1)
    }

    /// Adds a rule failing matching requests.
    pub fn fail(&self, rule: FailRule) {
        Self::lock(&self.rules).push(rule);
    }

    /// Delay added before every answer.
    pub fn set_latency(&self, d: Duration) {
        *Self::lock(&self.latency) = d;
    }

    /// Current added latency.
    pub fn latency(&self) -> Duration {
        *Self::lock(&self.latency)
    }

    /// Removes every rule and the latency.
    pub fn clear(&self) {
        Self::lock(&self.rules).clear();
        self.set_latency(Duration::ZERO);
    }

    /// Counts one API request under `"<VERB> <path>"`, where the verb is
    /// the HTTP method, or `WATCH` for a GET with `watch=true|1`. Past
    /// [`REQUEST_PATHS`] distinct keys, new paths count under
    /// `"<VERB> (other paths)"`: every object's name is in some path, so
    /// under churn the table would otherwise grow for ever.
    pub fn record_request(&self, method: &str, path: &str, watch: bool) {
        let verb = if watch { "WATCH" } else { method };
        let key = format!("{verb} {path}");
        let mut counts = Self::lock(&self.requests);
        if let Some(n) = counts.get_mut(&key) {
            *n += 1;
        } else if counts.len() < REQUEST_PATHS {
            counts.insert(key, 1);
        } else {
            *counts.entry(format!("{verb} {OTHER_PATHS}")).or_default() += 1;
        }
    }

    /// Requests served since the start (or the last reset), by verb and path.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        Self::lock(&self.requests).clone()
    }

    /// Forgets the request counts.
    pub fn reset_requests(&self) {
        Self::lock(&self.requests).clear();
    }

    /// The status code to fail this request with, consuming one use of the rule.
    pub fn take_failure(&self, method: &str, path: &str) -> Option<u16> {
        let mut rules = Self::lock(&self.rules);
        let i = rules.iter().position(|r| {
            r.count > 0
                && path.starts_with(&r.path_prefix)
                && r.method
                    .as_deref()
                    .is_none_or(|m| m.eq_ignore_ascii_case(method))
        })?;
        rules[i].count -= 1;
        let code = rules[i].code;
        if rules[i].count == 0 {
            rules.remove(i);
        }
        Some(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_fails_exactly_count_matching_requests() {
        let f = Faults::default();
        f.fail(FailRule {
            path_prefix: "/api/v1/pods".into(),
            method: Some("GET".into()),
            code: 429,
            count: 2,
        });
        assert_eq!(f.take_failure("POST", "/api/v1/pods"), None);
        assert_eq!(f.take_failure("GET", "/api/v1/services"), None);
        assert_eq!(f.take_failure("GET", "/api/v1/pods"), Some(429));
        assert_eq!(f.take_failure("get", "/api/v1/pods?watch=1"), Some(429));
        assert_eq!(f.take_failure("GET", "/api/v1/pods"), None);
    }

    #[test]
    fn requests_are_counted_by_verb_and_path_until_reset() {
        let f = Faults::default();
        f.record_request("GET", "/api/v1/pods", false);
        f.record_request("GET", "/api/v1/pods", false);
        f.record_request("GET", "/api/v1/pods", true);
        let counts = f.requests();
        assert_eq!(counts.get("GET /api/v1/pods"), Some(&2));
        assert_eq!(counts.get("WATCH /api/v1/pods"), Some(&1));
        f.reset_requests();
        assert!(f.requests().is_empty());
    }

    #[test]
    fn request_counts_stop_growing_at_the_path_bound() {
        let f = Faults::default();
        for i in 0..REQUEST_PATHS + 50 {
            f.record_request("GET", &format!("/api/v1/namespaces/d/pods/p{i}"), false);
        }
        f.record_request("GET", "/api/v1/namespaces/d/pods/p0", false);
        let counts = f.requests();
        assert_eq!(counts.len(), REQUEST_PATHS + 1);
        assert_eq!(counts.get(&format!("GET {OTHER_PATHS}")), Some(&50));
        assert_eq!(counts.get("GET /api/v1/namespaces/d/pods/p0"), Some(&2));
    }

    #[test]
    fn dropping_watches_cancels_the_old_token_only() {
        let f = Faults::default();
        let t = f.watch_token();
        f.drop_watches();
        assert!(t.is_cancelled());
        assert!(!f.watch_token().is_cancelled());
    }
}
