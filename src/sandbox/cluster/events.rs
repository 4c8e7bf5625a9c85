//! Events as client-go's `record.EventRecorder` writes them (core/v1), so
//! `kubectl describe` and `kubectl get events` show what the controllers and
//! the scheduler did.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

use super::meta::{self, EVENTS};
use crate::sandbox::api::{Api, Query, Target};

/// Last name suffix handed out, so two events in the same nanosecond differ.
static LAST_NANOS: AtomicI64 = AtomicI64::new(0);

fn unique_nanos() -> i64 {
    let now = i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX);
    let mut last = LAST_NANOS.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST_NANOS.compare_exchange(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// The Event object for one occurrence.
pub(crate) fn event(
    involved: &Value,
    kind: &str,
    reason: &str,
    message: &str,
    component: &str,
    now: i64,
) -> Value {
    let ns = match meta::namespace(involved) {
        "" => "default",
        ns => ns,
    };
    let name = meta::name(involved);
    let time = meta::format_time(now);
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{name}.{:x}", unique_nanos()), "namespace": ns},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion").cloned().unwrap_or(Value::Null),
            "kind": involved.get("kind").cloned().unwrap_or(Value::Null),
            "name": name,
            "namespace": meta::namespace(involved),
            "uid": meta::uid(involved),
            "resourceVersion": meta::str_at(involved, "/metadata/resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": 1,
        "type": kind,
        "eventTime": null,
        "reportingComponent": component,
        "reportingInstance": "",
    })
}

/// Writes an Event; failures (a namespace going away) are ignored, as the
/// real recorder drops what it cannot write.
pub(crate) fn record(
    api: &Api,
    involved: &Value,
    kind: &str,
    reason: &str,
    message: &str,
    component: &str,
) {
    let now = meta::now_secs();
    let ev = event(involved, kind, reason, message, component, now);
    let ns = meta::namespace(&ev).to_string();
    // Like client-go's EventCorrelator: the same event about the same object
    // again bumps `count` and `lastTimestamp` of the first one, which is what
    // `kubectl describe` prints as "(x4 over 20s)".
    let key = format!(
        "{ns}|{}|{kind}|{reason}|{component}|{message}",
        meta::uid(involved)
    );
    let known = seen().names.get(&key).cloned();
    if let Some(name) = known
        && let Some(first) = api.store.get(&EVENTS.key(), &ns, &name)
    {
        let mut again = (*first).clone();
        again["count"] = json!(first["count"].as_i64().unwrap_or(1) + 1);
        again["lastTimestamp"] = json!(meta::format_time(now));
        let target = Target {
            namespace: Some(ns.clone()),
            name: Some(name),
            subresource: None,
        };
        if api
            .update(
                EVENTS.group,
                EVENTS.version,
                EVENTS.plural,
                &target,
                again,
                &Query::default(),
            )
            .is_ok()
        {
            return;
        }
    }
    if let Ok(created) = api.create(
        EVENTS.group,
        EVENTS.version,
        EVENTS.plural,
        Some(&ns),
        ev,
        &Query::default(),
    ) {
        seen().insert(key, meta::name(&created).to_string());
    }
}

/// Occurrences remembered for aggregation: client-go's EventCorrelator
/// keeps an LRU cache of 4096; without a bound the table grew with every
/// pod ever started.
const SEEN_LIMIT: usize = 4096;

/// Which event each (object, reason, message …) was first recorded as, the
/// [`SEEN_LIMIT`] latest first recordings.
#[derive(Default)]
struct Seen {
    names: HashMap<String, String>,
    order: VecDeque<String>,
}

impl Seen {
    fn insert(&mut self, key: String, name: String) {
        if self.names.insert(key.clone(), name).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > SEEN_LIMIT {
            if let Some(oldest) = self.order.pop_front() {
                self.names.remove(&oldest);
            }
        }
    }
}

/// Object uids are unique across sandboxes, so one table serves them all.
fn seen() -> std::sync::MutexGuard<'static, Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(|| Mutex::new(Seen::default()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_the_object_they_are_about_and_who_reported_them() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "web-1", "namespace": "apps", "uid": "u1", "resourceVersion": "7"}});
        let ev = event(
            &pod,
            "Normal",
            "Scheduled",
            "Successfully assigned apps/web-1 to n0",
            "default-scheduler",
            0,
        );
        assert_eq!(ev["metadata"]["namespace"], "apps");
        assert!(meta::name(&ev).starts_with("web-1."));
        assert_eq!(ev["involvedObject"]["kind"], "Pod");
        assert_eq!(ev["involvedObject"]["uid"], "u1");
        assert_eq!(ev["source"]["component"], "default-scheduler");
        assert_eq!(ev["firstTimestamp"], "1970-01-01T00:00:00Z");
    }

    #[test]
    fn the_aggregation_table_keeps_only_the_latest_first_recordings() {
        let mut seen = Seen::default();
        for i in 0..=SEEN_LIMIT {
            seen.insert(format!("k{i}"), format!("e{i}"));
        }
        seen.insert(format!("k{SEEN_LIMIT}"), "again".into());
        assert_eq!(seen.names.len(), SEEN_LIMIT);
        assert_eq!(seen.order.len(), SEEN_LIMIT);
        assert!(!seen.names.contains_key("k0"));
        assert_eq!(seen.names.get("k1").map(String::as_str), Some("e1"));
        assert_eq!(
            seen.names
                .get(&format!("k{SEEN_LIMIT}"))
                .map(String::as_str),
            Some("again")
        );
    }

    #[test]
    fn two_events_in_a_row_get_distinct_names() {
        let pod = json!({"metadata": {"name": "p", "namespace": "default"}});
        let a = event(&pod, "Normal", "R", "m", "c", 0);
        let b = event(&pod, "Normal", "R", "m", "c", 0);
        assert_ne!(a["metadata"]["name"], b["metadata"]["name"]);
    }
}
