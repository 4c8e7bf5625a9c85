//! Longer jobs the console starts: a support bundle (its progress feeds the
//! console's gauge from the same reports as the CLI's bar), a copy-mode
//! debug pod, and reading the audit trail. Each runs off the UI thread and
//! answers with a message.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::Client;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::app::audit::rows as audit_rows;
use crate::app::{BundleGauge, Msg};
use crate::ops::Actor;
use crate::ops::audit::{self, AuditObject, AuditRecord};
use crate::ops::bundle::{self, BundleOptions, Phase, Progress};
use crate::ops::debug::{self, DebugOptions};

/// Shortest time between two gauge updates.
const GAUGE_EVERY: Duration = Duration::from_millis(100);
/// Lifetime of a debug pod made from the console (the CLI's default).
pub use crate::app::actions::DEBUG_POD_TTL;

/// What the jobs need to know.
#[derive(Clone)]
pub struct JobSettings {
    /// kubeconfig context, for the bundle's manifest.
    pub context: Option<String>,
    /// Where the controller's Lease lives (collected in a bundle).
    pub controller_namespace: Option<String>,
    /// Directory the bundle's zip is written to.
    pub bundle_dir: PathBuf,
    /// The audit file.
    pub audit_path: Option<PathBuf>,
}

/// A bundle asked for: namespace, pool, the pools' last hour.
type BundleAsk = (String, Option<String>, Option<serde_json::Value>);

/// Starts jobs.
pub struct Jobs {
    client: Client,
    settings: JobSettings,
    tx: mpsc::Sender<Msg>,
    bundle: mpsc::Sender<BundleAsk>,
    audit: mpsc::Sender<()>,
}

impl Jobs {
    pub fn start(
        client: Client,
        settings: JobSettings,
        tx: mpsc::Sender<Msg>,
        cancel: CancellationToken,
    ) -> Jobs {
        // One bundle at a time (the app refuses a second one while the
        // first is written); one audit read queued at most (a read later
        // sees everything a read now would).
        let (bundle, mut bundle_rx) = mpsc::channel::<BundleAsk>(1);
        let (audit, mut audit_rx) = mpsc::channel::<()>(1);
        let (c, s, t, stop) = (client.clone(), settings.clone(), tx.clone(), cancel.clone());
        tokio::spawn(async move {
            loop {
                let (namespace, pool, history) = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = bundle_rx.recv() => match r { Some(r) => r, None => return },
                };
                let result = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = take_bundle(c.clone(), &s, (namespace, pool, history), t.clone()) => r,
                };
                if t.send(Msg::BundleWritten(result)).await.is_err() {
                    return;
                }
            }
        });
        let (s, t) = (settings.clone(), tx.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = audit_rx.recv() => if r.is_none() { return },
                }
                let (path, context) = (s.audit_path.clone(), s.context.clone());
                let read = tokio::task::spawn_blocking(move || {
                    read_audit(path.as_deref(), context.as_deref())
                })
                .await;
                let result = read.unwrap_or_else(|e| Err(format!("reading failed: {e}")));
                if t.send(Msg::AuditLoaded(result)).await.is_err() {
                    return;
                }
            }
        });
        Jobs {
            client,
            settings,
            tx,
            bundle,
            audit,
        }
    }

    pub fn bundle(
        &self,
        namespace: String,
        pool: Option<String>,
        history: Option<serde_json::Value>,
    ) {
        if self.bundle.try_send((namespace, pool, history)).is_err() {
            let _ = self.tx.try_send(Msg::BundleWritten(Err(
                "a bundle is being written already".into()
            )));
        }
    }

    pub fn load_audit(&self) {
        let _ = self.audit.try_send(());
    }

    pub fn debug_pod(&self, namespace: String, pod: String) {
        let (client, tx) = (self.client.clone(), self.tx.clone());
        let (context, audit_path) = (
            self.settings.context.clone(),
            self.settings.audit_path.clone(),
        );
        tokio::spawn(async move {
            let result = debug_pod(&client, namespace.clone(), pod.clone()).await;
            // Recorded as the other actions are; a trail that cannot be
            // written is said with the outcome.
            let actor = Actor::of(&client, context.as_deref(), "console").await;
            let record = debug_pod_record(&actor, &namespace, &pod, &result);
            let written = match audit_path {
                Some(p) => audit::append(&p, &record),
                None => audit::default_path().and_then(|p| audit::append(&p, &record)),
            };
            let result = match (result, written) {
                (Ok((said, _)), Err(e)) => Ok(format!("{said} (not in the audit trail: {e})")),
                (r, _) => r.map(|(said, _)| said),
            };
            let _ = tx.send(Msg::DebugPodCreated(result)).await;
        });
    }

    pub fn settings(&self) -> &JobSettings {
        &self.settings
    }
}

/// The gauge of a progress report.
pub fn gauge(scope: &str, p: &Progress) -> BundleGauge {
    BundleGauge {
        scope: scope.to_owned(),
        phase: match p.phase {
            Phase::Listing => "listing",
            Phase::Collecting => "collecting",
            Phase::Finishing => "finishing",
            Phase::Done => "done",
        }
        .into(),
        files_done: p.files_done,
        files_expected: p.files_expected,
        bytes: p.bytes_written,
    }
}

async fn take_bundle(
    client: Client,
    s: &JobSettings,
    (namespace, pool, history): BundleAsk,
    tx: mpsc::Sender<Msg>,
) -> Result<String, String> {
    let name = bundle::file_name(&namespace, pool.as_deref(), Timestamp::now());
    let output = s.bundle_dir.join(name);
    let scope = match &pool {
        Some(p) => format!("pool {p}"),
        None => format!("namespace {namespace}"),
    };
    let mut opts = BundleOptions::new(namespace, output);
    opts.pool = pool;
    opts.context = s.context.clone();
    opts.controller_namespace = s.controller_namespace.clone();
    opts.history = history;
    opts.audit_path = s.audit_path.clone();
    // The progress callback runs on the zip writer's thread: send at most
    // every GAUGE_EVERY (and the last one), never block it.
    let last: Mutex<Option<Instant>> = Mutex::new(None);
    let report = move |p: Progress| {
        let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
        if p.phase == Phase::Done || last.is_none_or(|t| t.elapsed() >= GAUGE_EVERY) {
            *last = Some(Instant::now());
            let _ = tx.try_send(Msg::BundleProgress(gauge(&scope, &p)));
        }
    };
    let summary = bundle::collect(client, opts, report)
        .await
        .map_err(|e| e.to_string())?;
    Ok(bundle_written(&summary))
}

/// What the console says of a bundle written: where, how big, what was
/// hidden per rule (never a value), what could not be collected.
fn bundle_written(summary: &bundle::Summary) -> String {
    let path = std::path::absolute(&summary.path).unwrap_or(summary.path.clone());
    let mut said = format!(
        "{} ({} files, {:.1} MB; hidden: {})",
        path.display(),
        summary.files,
        summary.zip_bytes as f64 / 1e6,
        bundle::redact::describe_counts(&summary.hidden)
    );
    if !summary.errors.is_empty() {
        said.push_str(&format!(
            "; {} not collected, listed in manifest.json",
            summary.errors.len()
        ));
    }
    said
}

/// The audit line of a debug pod made (or not) from the console.
fn debug_pod_record(
    actor: &Actor,
    namespace: &str,
    pod: &str,
    result: &Result<(String, String), String>,
) -> AuditRecord {
    AuditRecord {
        time: Timestamp::now(),
        user: actor.user.clone(),
        via: actor.via.clone(),
        context: actor.context.clone(),
        namespace: namespace.to_owned(),
        action: "debug-pod".into(),
        request: serde_json::json!({"pod": pod, "mode": "copy", "ttl": crate::units::format_duration(DEBUG_POD_TTL)}),
        summary: format!("debug pod of {pod}"),
        objects: match result {
            Ok((_, made)) => vec![AuditObject {
                object: format!("Pod/{made}"),
                before: serde_json::Value::String("absent".into()),
                after: serde_json::Value::String("created".into()),
                changes: vec![format!("copy of Pod/{pod}")],
            }],
            Err(_) => Vec::new(),
        },
        unchanged: Vec::new(),
        outcome: match result {
            Ok(_) => "applied".into(),
            Err(e) => format!("failed: {e}"),
        },
    }
}

/// Makes the debug pod: what to say, and its name.
async fn debug_pod(
    client: &Client,
    namespace: String,
    pod: String,
) -> Result<(String, String), String> {
    let made = debug::create(
        client,
        &DebugOptions {
            namespace: namespace.clone(),
            pod,
            image: None,
            mode: crate::cli::DebugMode::Copy,
            profile: crate::cli::DebugProfile::General,
            ttl: DEBUG_POD_TTL,
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let expires = made
        .expires_at
        .map(|t| format!(", deleted at {}", t.strftime("%H:%M:%SZ")))
        .unwrap_or_default();
    Ok((
        format!(
            "debug pod {}{expires}; shell: kubectl exec -it -n {namespace} {} -c {} -- sh",
            made.name, made.name, made.container
        ),
        made.name,
    ))
}

/// The audit trail's rows of `context` (all without one), newest first.
fn read_audit(
    path: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<Vec<crate::app::audit::AuditRow>, String> {
    let path = match path {
        Some(p) => p.to_owned(),
        None => crate::ops::audit::default_path().map_err(|e| e.to_string())?,
    };
    let mut records = crate::ops::audit::read(&path, None).map_err(|e| e.to_string())?;
    if let Some(c) = context {
        records.retain(|r| r.context == c);
    }
    Ok(audit_rows(&records))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_written_is_said_with_what_each_rule_hid() {
        let summary = bundle::Summary {
            path: "/tmp/b.zip".into(),
            files: 12,
            zip_bytes: 2_400_000,
            bytes: 9_000_000,
            errors: Vec::new(),
            redactions: 16,
            hidden: [("known-secret", 12), ("aws-access-key", 3), ("jwt", 1)].into(),
            deadline_reached: false,
            listed: 11,
            lacks: Vec::new(),
            elapsed: std::time::Duration::from_secs(2),
        };
        assert_eq!(
            bundle_written(&summary),
            "/tmp/b.zip (12 files, 2.4 MB; hidden: 12 × known-secret, 3 × aws-access-key, 1 × jwt)"
        );
    }

    #[test]
    fn the_gauge_follows_the_bundles_progress_reports() {
        let p = |phase, done, expected| Progress {
            phase,
            files_done: done,
            files_expected: expected,
            bytes_written: 2_000_000,
            current: String::new(),
        };
        let g = gauge("pool alpha", &p(Phase::Listing, 0, 0));
        assert_eq!((g.phase.as_str(), g.ratio()), ("listing", 0.0));
        let g = gauge("pool alpha", &p(Phase::Collecting, 10, 40));
        assert_eq!((g.phase.as_str(), g.ratio()), ("collecting", 0.25));
        assert_eq!(g.bytes, 2_000_000);
        // More written than planned so far (planning still growing): full, not over.
        assert_eq!(gauge("x", &p(Phase::Collecting, 12, 10)).ratio(), 1.0);
        assert_eq!(gauge("x", &p(Phase::Done, 3, 40)).ratio(), 1.0);
    }

    #[test]
    fn the_audit_trail_reads_newest_first_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("audit.jsonl");
        assert_eq!(read_audit(Some(&path), None), Ok(Vec::new()));
        let line = |t: &str, a: &str, ctx: &str| {
            format!(
                r#"{{"time":"{t}","user":"u","via":"cli","context":"{ctx}","namespace":"n","action":"{a}","summary":"{a} pool p","outcome":"applied"}}"#
            )
        };
        std::fs::write(
            &path,
            format!(
                "{}\n{}\n{}\n",
                line("2026-01-01T00:00:00Z", "drain", "prod"),
                line("2026-01-02T00:00:00Z", "hold", "prod"),
                line("2026-01-03T00:00:00Z", "retry", "staging"),
            ),
        )
        .expect("write");
        let rows = read_audit(Some(&path), None).expect("read");
        assert_eq!(
            rows.iter().map(|r| r.action.as_str()).collect::<Vec<_>>(),
            ["retry", "hold", "drain"]
        );
        // A console shows its own context's actions only.
        let rows = read_audit(Some(&path), Some("prod")).expect("read");
        assert_eq!(
            rows.iter().map(|r| r.action.as_str()).collect::<Vec<_>>(),
            ["hold", "drain"]
        );
        assert!(rows[0].detail.iter().any(|l| l.contains("context: prod")));
    }
}
