//! The support bundle: logs, events and objects of a namespace (or one
//! pool) in one redacted zip a support engineer can read without agentdeck.
//!
//! [`collect`] lists and fetches with bounded parallelism, a timeout per
//! request and an overall deadline: a broken API yields a partial bundle
//! whose `manifest.json` lists every error, never a hang. Collected files go
//! through a bounded channel to one blocking thread ([`zipper`]) that
//! redacts and compresses them; logs travel as spool files, so memory stays
//! flat whatever their size. The zip is written under a hidden temporary
//! name and renamed when complete.
//!
//! Layout of the zip:
//! - `manifest.json`: when, tool version, context, namespace, scope, every
//!   file with its sizes, every collection error, and what the identity
//!   that took it may do here (`access`: [`super::access`]'s table and what
//!   the bundle lacks for it), so that a receiver knows why something is
//!   absent;
//! - `pods/<pod>/<container>.log` and `.previous.log`; `.final.log` for the
//!   last lines the controller kept of pods already gone
//!   ([`crate::plan::tails`]);
//! - `objects/<kind>.yaml` (a YAML stream), `objects/secrets.yaml` with
//!   names and keys only, `events.yaml`;
//! - `health/agents.json` (each agent's `/healthz`), `health/controller.*`;
//! - `redactions.json`: per file, per rule, how many matches were hidden.

pub mod objects;
pub mod open;
pub use crate::redact;
pub mod reredact;
pub mod zipper;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::AsyncReadExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, LogParams};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::crd::{AgentPool, AgentTask, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY};
use redact::Redactor;
use zipper::{Body, Entry};

pub use crate::plan::tails::LABEL_LOG_TAILS;

/// Why no bundle could be written at all (collection problems are not
/// errors: they are recorded in the manifest).
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The directory the zip is to go in cannot be used.
    #[error("cannot write the bundle {}: directory {}: {}", path.display(), dir.display(), crate::cluster::root_cause(source))]
    OutputDir {
        /// The zip asked for.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The output file could not be created.
    #[error("cannot create {}: {source}", path.display())]
    CreateOutput {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing into the zip failed (disk full …).
    #[error("cannot write {entry} into {}: {source}", path.display())]
    Write {
        /// The zip being written.
        path: PathBuf,
        /// The entry being written.
        entry: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The finished zip could not be moved into place.
    #[error("cannot rename {} to {}: {source}", from.display(), to.display())]
    Rename {
        /// The temporary file.
        from: PathBuf,
        /// The target.
        to: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The blocking writer panicked or was cancelled.
    #[error("the zip writer stopped: {0}")]
    WriterStopped(String),
    /// A bad option.
    #[error("{0}")]
    Invalid(String),
    /// `agentdeck bundle redact` refused what it was given.
    #[error(transparent)]
    Redact(#[from] reredact::RedactError),
    /// The zip was written but nothing could be listed from the cluster.
    #[error(
        "{} holds nothing from the cluster: no list succeeded ({first}; all {count} failures are in its manifest.json)",
        path.display()
    )]
    NothingListed {
        /// The zip written.
        path: PathBuf,
        /// The first failure.
        first: String,
        /// How many things could not be collected.
        count: usize,
    },
}

impl BundleError {
    /// A mistake in what the user gave.
    pub fn is_user_error(&self) -> bool {
        matches!(self, BundleError::Invalid(_) | BundleError::Redact(_))
    }
}

/// What to collect and how.
#[derive(Debug, Clone)]
pub struct BundleOptions {
    /// Namespace to collect.
    pub namespace: String,
    /// Only this pool's pods and objects.
    pub pool: Option<String>,
    /// Zip file to write.
    pub output: PathBuf,
    /// Only log lines newer than this.
    pub since: Option<Duration>,
    /// Keep at most this many bytes of each log (its end).
    pub max_bytes_per_log: u64,
    /// Redact (on by default; off only on explicit request).
    pub redact: bool,
    /// Secrets handed to the tool, hidden wherever they show up.
    pub literals: Vec<Vec<u8>>,
    /// Requests in flight at once.
    pub parallelism: usize,
    /// Timeout of each request (for a log: of each read).
    pub request_timeout: Duration,
    /// Everything is collected within this; what is missing then is listed
    /// in the manifest as not collected.
    pub deadline: Duration,
    /// Where the controller's leader Lease lives (its Leases are collected).
    pub controller_namespace: Option<String>,
    /// The controller's `/healthz` and `/metrics` base URL, when reachable.
    pub controller_url: Option<String>,
    /// kubeconfig context, for the manifest.
    pub context: Option<String>,
    /// The pools' last hour as the console sampled it
    /// ([`crate::app::history::History::export`]), for `history/pools.json`;
    /// `None` from the CLI, which keeps none.
    pub history: Option<Value>,
    /// The audit trail to take this context's records from (`None`: the
    /// default file, [`super::audit::default_path`]).
    pub audit_path: Option<PathBuf>,
}

impl BundleOptions {
    /// Defaults for `namespace`, writing `output`.
    pub fn new(namespace: impl Into<String>, output: impl Into<PathBuf>) -> Self {
        BundleOptions {
            namespace: namespace.into(),
            pool: None,
            output: output.into(),
            since: None,
            max_bytes_per_log: DEFAULT_MAX_BYTES_PER_LOG,
            redact: true,
            literals: Vec::new(),
            parallelism: 8,
            request_timeout: Duration::from_secs(15),
            deadline: Duration::from_secs(300),
            controller_namespace: None,
            controller_url: None,
            context: None,
            history: None,
            audit_path: None,
        }
    }
}

/// Default cap of one log file: 10 MiB, the kubelet's default rotation size.
pub const DEFAULT_MAX_BYTES_PER_LOG: u64 = 10 * 1024 * 1024;

/// Where a bundle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Listing objects and planning what to fetch.
    Listing,
    /// Fetching logs and writing files.
    Collecting,
    /// Writing the manifest and renaming the zip.
    Finishing,
    /// Written.
    Done,
}

/// A progress report (for a bar or a gauge).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Where the bundle is.
    pub phase: Phase,
    /// Files written so far.
    pub files_done: u64,
    /// Files planned so far (grows while listing).
    pub files_expected: u64,
    /// Uncompressed bytes written so far.
    pub bytes_written: u64,
    /// The file just written.
    pub current: String,
}

/// Progress callback, called from the writer thread.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// One thing that could not be collected.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CollectionError {
    /// What was being collected (`logs`, `previous logs`, `list`, `health` …).
    pub what: String,
    /// Kind of the object.
    pub kind: String,
    /// Its name (empty for a list).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The container, for logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// What went wrong.
    pub message: String,
}

/// The outcome of a bundle.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The zip written.
    pub path: PathBuf,
    /// Files in it (manifest and report included).
    pub files: usize,
    /// Size of the zip.
    pub zip_bytes: u64,
    /// Uncompressed bytes of the collected files.
    pub bytes: u64,
    /// What could not be collected.
    pub errors: Vec<CollectionError>,
    /// Matches hidden, over all files.
    pub redactions: u64,
    /// Matches hidden per rule, over all files (the per-file counts are in
    /// `redactions.json`): what `agentdeck bundle` prints at its end.
    pub hidden: redact::RedactionCounts,
    /// The overall deadline cut the collection short.
    pub deadline_reached: bool,
    /// Lists of objects that succeeded (0: nothing came from the cluster).
    pub listed: usize,
    /// What the bundle lacks because its taker may not read it
    /// ("events.yaml: list events in team-a"), as the manifest's `access`
    /// says; empty when nothing is lacking or the review failed.
    pub lacks: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

/// The kinds written as YAML, in the order listed.
fn kinds() -> Vec<(ApiResource, &'static str)> {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    vec![
        (ApiResource::erase::<AgentPool>(&()), "agentpools"),
        (ApiResource::erase::<AgentTask>(&()), "agenttasks"),
        (ApiResource::erase::<Pod>(&()), "pods"),
        (ApiResource::erase::<Deployment>(&()), "deployments"),
        (ApiResource::erase::<ReplicaSet>(&()), "replicasets"),
        (ApiResource::erase::<Job>(&()), "jobs"),
        (ApiResource::erase::<Service>(&()), "services"),
        (ApiResource::erase::<ConfigMap>(&()), "configmaps"),
        (ApiResource::erase::<NetworkPolicy>(&()), "networkpolicies"),
        (ApiResource::erase::<Lease>(&()), "leases"),
    ]
}

/// Errors and bookkeeping shared by the collecting tasks.
#[derive(Default)]
struct Record {
    errors: Mutex<Vec<CollectionError>>,
    /// Logs planned (`pod/container[/previous]`) and not yet sent.
    pending_logs: Mutex<BTreeSet<String>>,
    /// Lists that succeeded.
    listed: std::sync::atomic::AtomicUsize,
}

impl Record {
    fn error(&self, e: CollectionError) {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(e);
    }
}

fn err(
    what: &str,
    kind: &str,
    name: &str,
    container: Option<&str>,
    message: String,
) -> CollectionError {
    CollectionError {
        what: what.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        container: container.map(str::to_owned),
        message,
    }
}

fn api_message(e: &kube::Error) -> String {
    crate::cluster::api_cause(e)
}

async fn timed<T>(
    d: Duration,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(d, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(api_message(&e)),
        Err(_) => Err(format!("no answer within {} s", d.as_secs_f64())),
    }
}

/// Collects the bundle `opts` describes, calling `progress` as files are
/// written. Returns once the zip is complete and in place; collection
/// problems are in the summary and the manifest, not errors.
pub async fn collect(
    client: Client,
    opts: BundleOptions,
    progress: impl Fn(Progress) + Send + Sync + 'static,
) -> Result<Summary, BundleError> {
    let started = Instant::now();
    let started_at = Timestamp::now();
    let deadline = started + opts.deadline;
    check_options(&opts)?;
    let progress: ProgressFn = Arc::new(progress);
    let record = Arc::new(Record::default());
    let expected = Arc::new(AtomicU64::new(0));
    progress(Progress::starting());
    let access = tokio::spawn(access_of(
        client.clone(),
        opts.namespace.clone(),
        opts.controller_namespace.clone(),
        deadline.min(started + opts.request_timeout),
    ));

    // Secrets first: their values teach the redactor what to hide.
    let secrets = read_secrets(&client, &opts, deadline, &record).await;
    let keyed_by_namespace = secrets.shared_key.is_some();
    let redactor = opts.redact.then(|| Arc::new(secrets.redactor()));
    let partial = zipper::partial_path(&opts.output);
    let (tx, rx) = mpsc::channel::<Entry>(8);
    let writer = {
        let partial = partial.clone();
        let (redactor, progress, expected) = (redactor.clone(), progress.clone(), expected.clone());
        tokio::task::spawn_blocking(move || zipper::run(&partial, rx, redactor, progress, expected))
    };
    let scope = Scope {
        client: client.clone(),
        opts: opts.clone(),
        redactor: redactor.clone(),
        record: record.clone(),
        expected: expected.clone(),
        tx: tx.clone(),
        limit: Arc::new(Semaphore::new(opts.parallelism.max(1))),
    };
    scope
        .send_value(
            "objects/secrets.yaml",
            Value::Array(secrets.summaries),
            false,
        )
        .await;

    let context = opts
        .context
        .clone()
        .or_else(crate::cluster::current_context);
    let audited = scope.send_history_and_audit(context.as_deref()).await;

    let mut work = JoinSet::new();
    let collected = tokio::time::timeout_at(deadline, scope.clone().run(&mut work)).await;
    let deadline_reached = collected.is_err();
    if deadline_reached {
        work.abort_all();
        while work.join_next().await.is_some() {}
        record_deadline(&record, opts.deadline);
    }
    drop(scope);
    drop(tx);

    let (zip, written) = writer
        .await
        .map_err(|e| BundleError::WriterStopped(e.to_string()))??;
    progress(Progress::finishing(
        &written,
        expected.load(Ordering::Relaxed),
    ));
    let errors = std::mem::take(&mut *record.errors.lock().unwrap_or_else(PoisonError::into_inner));
    let redactions: u64 = written.redactions.values().flat_map(|c| c.values()).sum();
    let hidden = per_rule(&written.redactions);
    let bytes: u64 = written.files.iter().map(|f| f.bytes).sum();
    let access = access.await.unwrap_or_else(
        |e| serde_json::json!({"error": format!("the access review stopped: {e}")}),
    );
    let lacks = lacks_of(&access);
    let manifest = manifest(
        &opts,
        (started_at, deadline_reached),
        context.as_deref(),
        audited,
        &written,
        &errors,
        access,
    );
    let report = redaction_report(redactor.as_deref(), keyed_by_namespace, &written);
    let files = written.files.len() + 2;
    let last = [("manifest.json", &manifest), ("redactions.json", &report)]
        .map(|(name, v)| {
            (
                name.to_owned(),
                serde_json::to_vec_pretty(v).unwrap_or_default(),
            )
        })
        .to_vec();
    let target = opts.output.clone();
    let zip_bytes =
        tokio::task::spawn_blocking(move || zipper::finish(zip, last, &partial, &target))
            .await
            .map_err(|e| BundleError::WriterStopped(e.to_string()))??;
    progress(Progress::done(files as u64, bytes));
    Ok(Summary {
        path: opts.output,
        files,
        zip_bytes,
        bytes,
        errors,
        redactions,
        hidden,
        deadline_reached,
        listed: record.listed.load(Ordering::Relaxed),
        lacks,
        elapsed: started.elapsed(),
    })
}

/// Refuses options no bundle can be taken with, before anything starts.
fn check_options(opts: &BundleOptions) -> Result<(), BundleError> {
    if opts.max_bytes_per_log == 0 {
        return Err(BundleError::Invalid(
            "--max-bytes-per-log must be at least 1".into(),
        ));
    }
    check_output_dir(&opts.output)
}

impl Secrets {
    /// The redactor that hides what they taught, keyed with the
    /// namespace's key when there is one.
    fn redactor(&self) -> Redactor {
        match &self.shared_key {
            Some(key) => Redactor::with_hash_key(&self.literals, key),
            None => Redactor::new(&self.literals),
        }
    }
}

/// What a namespace's Secrets teach the redactor.
struct Secrets {
    /// Values to hide: the operator's and every Secret's.
    literals: Vec<Vec<u8>>,
    /// The Secrets as the bundle lists them (no values).
    summaries: Vec<Value>,
    /// The namespace's redaction key (`crate::plan::redaction_key`).
    shared_key: Option<Vec<u8>>,
}

/// Lists the namespace's Secrets (a failure is recorded: nothing is then
/// known to hide but the operator's literals).
async fn read_secrets(
    client: &Client,
    opts: &BundleOptions,
    deadline: Instant,
    record: &Record,
) -> Secrets {
    let ns = opts.namespace.clone();
    let secrets_api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
    );
    let mut literals = opts.literals.clone();
    let mut secret_summaries = Vec::new();
    // The namespace's redaction key, which the controller keyed the tails
    // it kept with (crate::plan::redaction_key).
    let mut shared_key: Option<Vec<u8>> = None;
    let listed = tokio::time::timeout_at(
        deadline,
        timed(
            opts.request_timeout,
            secrets_api.list(&ListParams::default()),
        ),
    )
    .await
    .unwrap_or_else(|_| Err("the bundle deadline was reached".into()));
    match listed {
        Ok(list) => {
            for s in list.items {
                let v = serde_json::to_value(&s).unwrap_or_default();
                if opts.pool.as_deref().is_none_or(|p| in_pool(&v, p)) {
                    secret_summaries.push(objects::secret_summary(&v));
                }
                literals.extend(objects::secret_values(&v));
                if v["metadata"]["name"] == crate::plan::redaction_key::SECRET_NAME {
                    shared_key = crate::plan::redaction_key::key_in(&v);
                }
            }
        }
        Err(m) => record.error(err(
            "list (values hidden from logs need it)",
            "Secret",
            "",
            None,
            m,
        )),
    }
    Secrets {
        literals,
        summaries: secret_summaries,
        shared_key,
    }
}

/// Records that the overall deadline was reached, and each log still
/// being read then as not collected.
fn record_deadline(record: &Record, deadline: Duration) {
    record.error(err(
        "bundle",
        "",
        "",
        None,
        format!(
            "the overall deadline of {} s was reached; what is listed below as not collected is missing",
            deadline.as_secs()
        ),
    ));
    let missing: Vec<String> = record
        .pending_logs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    for m in missing {
        let mut parts = m.splitn(3, '/');
        let pod = parts.next().unwrap_or_default();
        let container = parts.next();
        let what = if parts.next().is_some() {
            "previous logs"
        } else {
            "logs"
        };
        record.error(err(
            what,
            "Pod",
            pod,
            container,
            "not collected before the deadline".into(),
        ));
    }
}

/// The parts of the bundle this identity may not read, from the access
/// review.
fn lacks_of(access: &Value) -> Vec<String> {
    access["bundleLacks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_owned))
        .collect()
}

/// `manifest.json`: what was asked, what was written, what failed, what
/// this identity may not read.
fn manifest(
    opts: &BundleOptions,
    (started_at, deadline_reached): (Timestamp, bool),
    context: Option<&str>,
    audited: Value,
    written: &zipper::Written,
    errors: &[CollectionError],
    access: Value,
) -> Value {
    let redactions: u64 = written.redactions.values().flat_map(|c| c.values()).sum();
    let bytes: u64 = written.files.iter().map(|f| f.bytes).sum();
    serde_json::json!({
        "tool": "agentdeck",
        "version": env!("CARGO_PKG_VERSION"),
        // What a reader may expect (open::FORMAT_VERSION); added to, never renamed.
        "formatVersion": open::FORMAT_VERSION,
        "startedAt": started_at.to_string(),
        "finishedAt": Timestamp::now().to_string(),
        // The context asked for, else the kubeconfig's current one.
        "context": context,
        "history": match &opts.history {
            Some(_) => serde_json::json!({"recorded": true, "file": open::HISTORY_FILE}),
            None => serde_json::json!({"recorded": false,
                "why": "taken with agentdeck bundle, which keeps no history: the console keeps a pool's last hour, and its bundle (b) holds it"}),
        },
        "audit": audited,
        "namespaces": [opts.namespace],
        "pool": opts.pool,
        "options": {
            "since": opts.since.map(|d| d.as_secs()),
            "maxBytesPerLog": opts.max_bytes_per_log,
            "redacted": opts.redact,
            "deadlineSeconds": opts.deadline.as_secs(),
            "requestTimeoutSeconds": opts.request_timeout.as_secs_f64(),
            "parallelism": opts.parallelism,
        },
        "deadlineReached": deadline_reached,
        "files": written.files,
        "bytes": bytes,
        "redactions": redactions,
        "errors": errors,
        "access": access,
    })
}

/// `redactions.json`: the rules, the placeholder's form and key, and what
/// each file had hidden.
fn redaction_report(
    redactor: Option<&Redactor>,
    keyed_by_namespace: bool,
    written: &zipper::Written,
) -> Value {
    serde_json::json!({
        "rules": redactor.map(|r| r.rule_names()).unwrap_or_default(),
        "placeholder": "***REDACTED:<rule>:<keyed hash of the secret, the same for one secret across this bundle>***",
        // Whether kept log tails (pods/*/*.final.log) share the placeholders
        // of live logs: only when keyed with the namespace's key.
        "placeholderKey": if keyed_by_namespace {
            "the namespace's redaction key (agentdeck-redaction-key): kept log tails and live logs agree"
        } else {
            "a key of this bundle only: placeholders in kept log tails (*.final.log) do not match those in live logs"
        },
        "files": written.redactions,
    })
}

impl Progress {
    /// The files written, the manifest being written.
    fn finishing(written: &zipper::Written, expected: u64) -> Progress {
        Progress {
            phase: Phase::Finishing,
            files_done: written.files.len() as u64,
            files_expected: expected,
            bytes_written: written.files.iter().map(|f| f.bytes).sum(),
            current: "manifest.json".into(),
        }
    }

    /// All `files` written, `bytes` of them.
    fn done(files: u64, bytes: u64) -> Progress {
        Progress {
            phase: Phase::Done,
            files_done: files,
            files_expected: files,
            bytes_written: bytes,
            current: String::new(),
        }
    }

    /// Nothing written yet: listing.
    fn starting() -> Progress {
        Progress {
            phase: Phase::Listing,
            files_done: 0,
            files_expected: 0,
            bytes_written: 0,
            current: String::new(),
        }
    }
}

/// Per-file per-rule counts summed per rule.
pub fn per_rule<'a>(
    files: impl IntoIterator<Item = (&'a String, &'a redact::RedactionCounts)>,
) -> redact::RedactionCounts {
    let mut out = redact::RedactionCounts::new();
    for (_, counts) in files {
        for (rule, n) in counts {
            *out.entry(rule).or_default() += n;
        }
    }
    out
}

/// What the identity taking the bundle may do in `namespace`, as the
/// manifest records it: the access table (with what the bundle lacks), or
/// why it could not be had. Never fails the bundle; done by `until`.
async fn access_of(
    client: Client,
    namespace: String,
    controller_namespace: Option<String>,
    until: Instant,
) -> Value {
    let lease = controller_namespace
        .unwrap_or_else(|| crate::config::Config::default().controller_namespace);
    let review = super::access::review(&client, Some(&namespace), &lease);
    match tokio::time::timeout_at(until, review).await {
        Ok(Ok(table)) => serde_json::to_value(&table).unwrap_or_default(),
        Ok(Err(e)) => serde_json::json!({ "error": e.to_string() }),
        Err(_) => serde_json::json!({
            "error": "the access review did not finish within the request timeout"
        }),
    }
}

/// Checks, before anything is collected, that the zip's directory is one:
/// a fault then names the directory given, not the hidden partial file.
fn check_output_dir(output: &std::path::Path) -> Result<(), BundleError> {
    let dir = output
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let fault = |source| BundleError::OutputDir {
        path: output.to_path_buf(),
        dir: dir.to_path_buf(),
        source,
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(fault(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "not a directory",
        ))),
        Err(e) => Err(fault(e)),
    }
}

/// Whether an object belongs to `pool`: its pool label, its name for the
/// AgentPool, its `spec.pool` for an AgentTask.
fn in_pool(v: &Value, pool: &str) -> bool {
    v["metadata"]["labels"][LABEL_POOL].as_str() == Some(pool)
        || (v["kind"] == "AgentPool" && v["metadata"]["name"].as_str() == Some(pool))
        || (v["kind"] == "AgentTask" && v["spec"]["pool"].as_str() == Some(pool))
}

/// What every collecting task shares.
#[derive(Clone)]
struct Scope {
    client: Client,
    opts: BundleOptions,
    redactor: Option<Arc<Redactor>>,
    record: Arc<Record>,
    expected: Arc<AtomicU64>,
    tx: mpsc::Sender<Entry>,
    limit: Arc<Semaphore>,
}

impl Scope {
    async fn send(&self, entry: Entry) {
        // The writer only stops on a fatal error, which collect() reports.
        let _ = self.tx.send(entry).await;
    }

    /// Sends `value` (a list of objects, or any JSON) as YAML, redacted
    /// field by field.
    async fn send_value(&self, path: &str, mut value: Value, redact: bool) {
        self.expected.fetch_add(1, Ordering::Relaxed);
        let mut counts = redact::RedactionCounts::new();
        if redact && let Some(r) = &self.redactor {
            objects::redact_value(r, &mut value, &mut counts);
        }
        let text = match &value {
            Value::Array(items) => objects::to_yaml_stream(items),
            other => objects::to_yaml_stream(std::slice::from_ref(other)),
        };
        self.send(Entry {
            path: path.to_owned(),
            body: Body::Bytes(text.into_bytes()),
            cap: None,
            // Already redacted field by field; a second pass would only
            // re-find its own placeholders.
            redact: false,
            counts,
        })
        .await;
    }

    /// This context's records of the local audit trail in `audit.jsonl`
    /// (redacted as logs are); what the manifest says of them.
    /// The pools' history (a console's bundle has it) and the audit trail;
    /// what the manifest says of the audit.
    async fn send_history_and_audit(&self, context: Option<&str>) -> Value {
        if let Some(h) = &self.opts.history {
            self.send(Entry {
                path: open::HISTORY_FILE.into(),
                body: Body::Bytes(serde_json::to_vec_pretty(h).unwrap_or_default()),
                cap: None,
                redact: false,
                counts: Default::default(),
            })
            .await;
            self.expected.fetch_add(1, Ordering::Relaxed);
        }
        self.send_audit(context).await
    }

    async fn send_audit(&self, context: Option<&str>) -> Value {
        let path = match self.opts.audit_path.clone() {
            Some(p) => p,
            None => match super::audit::default_path() {
                Ok(p) => p,
                Err(e) => return serde_json::json!({"records": 0, "why": e.to_string()}),
            },
        };
        if !path.exists() {
            return serde_json::json!({"records": 0, "why": format!("no audit trail at {}: nothing was done with agentdeck from here", path.display())});
        }
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || super::audit::read(&path, None)).await
        };
        let records = match read {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return serde_json::json!({"records": 0, "why": e.to_string()}),
            Err(e) => return serde_json::json!({"records": 0, "why": e.to_string()}),
        };
        let ns = &self.opts.namespace;
        let mut text = String::new();
        let mut n = 0;
        for r in records.iter().filter(|r| {
            &r.namespace == ns && context.is_none_or(|c| r.context == c || r.context.is_empty())
        }) {
            if let Ok(line) = serde_json::to_string(r) {
                text.push_str(&line);
                text.push('\n');
                n += 1;
            }
        }
        self.expected.fetch_add(1, Ordering::Relaxed);
        self.send(Entry {
            path: open::AUDIT_FILE.into(),
            body: Body::Bytes(text.into_bytes()),
            cap: None,
            redact: true,
            counts: Default::default(),
        })
        .await;
        serde_json::json!({"records": n, "file": open::AUDIT_FILE, "from": path.display().to_string(), "context": context, "namespace": ns})
    }

    async fn list(&self, ar: &ApiResource, namespace: Option<&str>) -> Result<Vec<Value>, String> {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
            None => Api::all_with(self.client.clone(), ar),
        };
        let _permit = self.limit.acquire().await;
        let list = timed(self.opts.request_timeout, api.list(&ListParams::default())).await?;
        self.record.listed.fetch_add(1, Ordering::Relaxed);
        Ok(list
            .items
            .into_iter()
            .map(|o| {
                let mut v = serde_json::to_value(&o).unwrap_or_default();
                v["apiVersion"] = ar.api_version.clone().into();
                v["kind"] = ar.kind.clone().into();
                objects::trim(&ar.kind, &mut v);
                v
            })
            .collect())
    }

    async fn run(self, work: &mut JoinSet<()>) {
        let listed = self.list_objects().await;
        // With a pool, the tail ConfigMaps of the pool are the ones labelled
        // with it; they are found in the unfiltered list above only if
        // labelled, which the controller does.

        self.write_events(&listed.names).await;
        self.write_outputs(listed.outputs, &listed.histories).await;
        self.write_tails(&listed.tails, &listed.pods).await;
        self.fetch_logs_and_health(work, listed.pods, &listed.pools)
            .await;
    }

    /// Every kind's objects, listed in parallel and written as they come,
    /// and what the later steps read from them.
    async fn list_objects(&self) -> Listed {
        let ns = self.opts.namespace.clone();
        let pool = self.opts.pool.clone();
        // Lists, in parallel.
        let mut lists = JoinSet::new();
        for (ar, file) in kinds() {
            let s = self.clone();
            let ns = ns.clone();
            lists.spawn(async move {
                let r = s.list(&ar, Some(&ns)).await;
                (ar, file, r)
            });
        }
        {
            let s = self.clone();
            lists.spawn(async move {
                let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&());
                let r = s.list(&ar, None).await;
                (ar, "nodes", r)
            });
        }
        if let Some(cns) = self.opts.controller_namespace.clone().filter(|c| *c != ns) {
            let s = self.clone();
            lists.spawn(async move {
                let ar = ApiResource::erase::<k8s_openapi::api::coordination::v1::Lease>(&());
                let r = s.list(&ar, Some(&cns)).await;
                (ar, "controller-leases", r)
            });
        }
        let events_scope = Arc::new(Mutex::new(BTreeSet::<String>::new()));
        let mut pods: Vec<PodPlan> = Vec::new();
        let mut tails: Vec<Value> = Vec::new();
        let mut pools: Vec<Value> = Vec::new();
        // Each task's kept output: (task, header, text); deleted tasks'
        // from their pool's history.
        let mut outputs: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut histories: Vec<Value> = Vec::new();
        // Tasks' uids, so an output ConfigMap is read only for its own task.
        let mut task_uids: BTreeMap<String, String> = BTreeMap::new();
        let mut output_cms: Vec<Value> = Vec::new();
        while let Some(joined) = lists.join_next().await {
            let Ok((ar, file, result)) = joined else {
                continue;
            };
            match result {
                Ok(mut items) => {
                    if let Some(p) = &pool
                        && ar.kind != "Node"
                        && ar.kind != "Lease"
                    {
                        items.retain(|v| in_pool(v, p));
                    }
                    if ar.kind == "ConfigMap" {
                        for cm in &mut items {
                            if cm["metadata"]["labels"][LABEL_LOG_TAILS] == "true" {
                                tails.push(cm.clone());
                                // Their content is in pods/<pod>/*.final.log.
                                cm["data"] = Value::String("(see pods/*/*.final.log)".into());
                            }
                            if cm["metadata"]["labels"][crate::plan::retention::LABEL_TASK_HISTORY]
                                == "true"
                            {
                                histories.push(cm.clone());
                            }
                            // Read once every list is in: the tasks' may come later.
                            if cm["metadata"]["labels"][crate::crd::LABEL_COMPONENT]
                                == crate::crd::output::COMPONENT_TASK_OUTPUT
                            {
                                output_cms.push(cm.clone());
                            }
                        }
                    }
                    if ar.kind == "AgentTask" {
                        read_tasks(&items, &mut task_uids, &mut outputs);
                    }
                    if ar.kind == "Pod" {
                        pods = items.iter().filter_map(PodPlan::of).collect();
                    }
                    if ar.kind == "AgentPool" {
                        pools = items.clone();
                    }
                    {
                        let mut names = events_scope.lock().unwrap_or_else(PoisonError::into_inner);
                        for v in &items {
                            if let Some(n) = v["metadata"]["name"].as_str() {
                                names.insert(format!("{}/{n}", ar.kind));
                            }
                        }
                    }
                    // Sent at once and not copied: with many pods these
                    // lists are the largest thing the bundle holds in memory.
                    self.send_value(&format!("objects/{file}.yaml"), Value::Array(items), true)
                        .await;
                }
                Err(m) => self.record.error(err("list", &ar.kind, "", None, m)),
            }
        }
        outputs_of_config_maps(&output_cms, &task_uids, &mut outputs);
        let names =
            std::mem::take(&mut *events_scope.lock().unwrap_or_else(PoisonError::into_inner));
        Listed {
            names,
            pods,
            tails,
            pools,
            outputs,
            histories,
        }
    }

    /// The namespace's Events (with a pool, those about the objects
    /// listed, `names`), oldest first.
    async fn write_events(&self, names: &BTreeSet<String>) {
        let ns = self.opts.namespace.clone();
        let pool = self.opts.pool.clone();
        // Events (filtered to the pool's objects when a pool is given).
        {
            let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&());
            match self.list(&ar, Some(&ns)).await {
                Ok(mut events) => {
                    if pool.is_some() {
                        events.retain(|e| {
                            let o = &e["involvedObject"];
                            names.contains(&format!(
                                "{}/{}",
                                o["kind"].as_str().unwrap_or_default(),
                                o["name"].as_str().unwrap_or_default()
                            ))
                        });
                    }
                    events.sort_by_key(event_time);
                    self.send_value("events.yaml", Value::Array(events), true)
                        .await;
                }
                Err(m) => self.record.error(err("list", "Event", "", None, m)),
            }
        }
    }

    /// Each task's kept output: the live tasks' (`outputs`), then the
    /// deleted ones' from their pools' `histories`.
    async fn write_outputs(
        &self,
        mut outputs: BTreeMap<String, (String, String)>,
        histories: &[Value],
    ) {
        // Each task's kept output, live tasks first, then deleted ones.
        for cm in histories {
            let Ok(cm) =
                serde_json::from_value::<k8s_openapi::api::core::v1::ConfigMap>(cm.clone())
            else {
                continue;
            };
            for key in cm.data.iter().flat_map(|d| d.keys()) {
                let Some(task) = key.strip_suffix(".json") else {
                    continue;
                };
                if outputs.contains_key(task) {
                    continue;
                }
                if let Some(r) = crate::plan::retention::record_in(&cm, task)
                    && let Some(tail) = r.output_tail
                {
                    outputs.insert(
                        task.to_owned(),
                        (
                            format!(
                                "# the last lines task {task} printed; the task was deleted at {} ({}); kept in agentdeck-task-history-{}",
                                r.deleted_at, r.deleted_because, r.pool
                            ),
                            tail,
                        ),
                    );
                }
            }
        }
        for (task, (header, text)) in outputs {
            self.expected.fetch_add(1, Ordering::Relaxed);
            self.send(Entry {
                path: format!("tasks/{task}.output.log"),
                body: Body::Bytes(format!("{header}\n{text}\n").into_bytes()),
                cap: Some(self.opts.max_bytes_per_log),
                redact: true,
                counts: Default::default(),
            })
            .await;
        }
    }

    /// The final log tails the controller kept (in the `tails` ConfigMaps).
    async fn write_tails(&self, tails: &[Value], pods: &[PodPlan]) {
        // Final log tails the controller kept.
        let live: BTreeSet<String> = pods.iter().map(|p| p.name.clone()).collect();
        for cm in tails {
            for (pod, container, text) in crate::plan::tails::entries(cm) {
                let state = if live.contains(&pod) {
                    ""
                } else {
                    " (pod gone)"
                };
                tracing::debug!(%pod, %container, "kept tail{state}");
                // Redacted by the controller with the namespace's key: a
                // Secret's value it hid by pattern gets the placeholder the
                // value gets in live logs here (Redactor::relabel_known).
                let text = match &self.redactor {
                    Some(r) => r.relabel_known(text.as_bytes()),
                    None => text.into_bytes(),
                };
                self.expected.fetch_add(1, Ordering::Relaxed);
                self.send(Entry {
                    path: format!("pods/{pod}/{container}.final.log"),
                    body: Body::Bytes(text),
                    cap: Some(self.opts.max_bytes_per_log),
                    redact: true,
                    counts: Default::default(),
                })
                .await;
            }
        }
    }

    /// The pods' logs and the agents' and controller's health, in
    /// parallel under the limit; then the health samples.
    async fn fetch_logs_and_health(
        &self,
        work: &mut JoinSet<()>,
        pods: Vec<PodPlan>,
        pools: &[Value],
    ) {
        // Logs and health, in parallel under the limit.
        let health = Arc::new(Mutex::new(Vec::<Value>::new()));
        let health_ports: BTreeMap<String, i64> = pools
            .iter()
            .filter_map(|p| {
                Some((
                    p["metadata"]["name"].as_str()?.to_owned(),
                    p["spec"]["healthPort"].as_i64().unwrap_or(8080),
                ))
            })
            .collect();
        let http = reqwest::Client::builder()
            .timeout(self.opts.request_timeout.min(Duration::from_secs(5)))
            .build()
            .ok();
        for pod in pods {
            let name = pod.name;
            for (container, previous) in pod.logs {
                let key = format!(
                    "{name}/{container}{}",
                    if previous { "/previous" } else { "" }
                );
                self.record
                    .pending_logs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key.clone());
                self.expected.fetch_add(1, Ordering::Relaxed);
                let s = self.clone();
                let name = name.clone();
                work.spawn(async move {
                    s.fetch_log(&name, &container, previous).await;
                    s.record
                        .pending_logs
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&key);
                });
            }
            if let (Some((ip, pool)), Some(http)) = (pod.agent, http.clone()) {
                let port = pool
                    .as_deref()
                    .and_then(|p| health_ports.get(p))
                    .copied()
                    .unwrap_or(8080);
                let url = format!("http://{ip}:{port}/healthz");
                let s = self.clone();
                let health = health.clone();
                let name = name.clone();
                work.spawn(async move {
                    let sample = s.probe(&http, &name, &url).await;
                    health
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(sample);
                });
            }
        }
        if let (Some(base), Some(http)) = (self.opts.controller_url.clone(), http.clone()) {
            for (what, path) in [
                ("healthz", "controller-healthz.json"),
                ("metrics", "controller-metrics.txt"),
            ] {
                let s = self.clone();
                let http = http.clone();
                let url = format!("{}/{what}", base.trim_end_matches('/'));
                work.spawn(async move {
                    s.fetch_url(&http, &url, &format!("health/{path}")).await;
                });
            }
        }
        while work.join_next().await.is_some() {}
        let mut samples =
            std::mem::take(&mut *health.lock().unwrap_or_else(PoisonError::into_inner));
        samples.sort_by(|a, b| a["pod"].as_str().cmp(&b["pod"].as_str()));
        self.expected.fetch_add(1, Ordering::Relaxed);
        self.send(Entry {
            path: "health/agents.json".into(),
            body: Body::Bytes(serde_json::to_vec_pretty(&samples).unwrap_or_default()),
            cap: None,
            redact: true,
            counts: Default::default(),
        })
        .await;
    }

    async fn probe(&self, http: &reqwest::Client, pod: &str, url: &str) -> Value {
        let _permit = self.limit.acquire().await;
        let at = Timestamp::now();
        let t = Instant::now();
        let (status, body, error) = match http.get(url).send().await {
            Ok(r) => {
                let code = r.status().as_u16();
                let text = r.text().await.unwrap_or_default();
                let body = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
                (Some(code), body, None)
            }
            Err(e) => (None, Value::Null, Some(e.to_string())),
        };
        serde_json::json!({
            "pod": pod,
            "url": url,
            "at": at.to_string(),
            "latencyMs": t.elapsed().as_millis() as u64,
            "status": status,
            "body": body,
            "error": error,
        })
    }

    async fn fetch_url(&self, http: &reqwest::Client, url: &str, path: &str) {
        let _permit = self.limit.acquire().await;
        self.expected.fetch_add(1, Ordering::Relaxed);
        match http.get(url).send().await {
            Ok(r) => {
                let body = r.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                drop(_permit);
                self.send(Entry {
                    path: path.to_owned(),
                    body: Body::Bytes(body),
                    cap: Some(self.opts.max_bytes_per_log),
                    redact: true,
                    counts: Default::default(),
                })
                .await;
            }
            Err(e) => self
                .record
                .error(err("controller", "", url, None, e.to_string())),
        }
    }

    /// Streams one log into a spool file, then hands it to the writer.
    async fn fetch_log(&self, pod: &str, container: &str, previous: bool) {
        let what = if previous { "previous logs" } else { "logs" };
        let path = format!(
            "pods/{pod}/{container}{}.log",
            if previous { ".previous" } else { "" }
        );
        let permit = self.limit.acquire().await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.opts.namespace);
        let lp = LogParams {
            container: Some(container.to_owned()),
            previous,
            since_seconds: self.opts.since.map(|d| d.as_secs().max(1) as i64),
            ..LogParams::default()
        };
        let stream = match timed(self.opts.request_timeout, api.log_stream(pod, &lp)).await {
            Ok(s) => s,
            Err(m) => {
                self.record.error(err(what, "Pod", pod, Some(container), m));
                return;
            }
        };
        let spool = match tempfile::tempfile() {
            Ok(f) => f,
            Err(e) => {
                self.record.error(err(
                    what,
                    "Pod",
                    pod,
                    Some(container),
                    format!("no spool file: {e}"),
                ));
                return;
            }
        };
        let mut stream = std::pin::pin!(stream);
        let mut spool = Spool::new(spool);
        let mut len = 0u64;
        // A log longer than this many caps is not read further: only its
        // last cap is kept anyway, and the API may be streaming forever.
        let read_limit = self.opts.max_bytes_per_log.saturating_mul(16);
        let spool_error = |e: std::io::Error| {
            self.record.error(err(
                what,
                "Pod",
                pod,
                Some(container),
                format!("spool write: {e}"),
            ));
        };
        loop {
            let read =
                tokio::time::timeout(self.opts.request_timeout, stream.read(spool.unfilled()))
                    .await;
            match read {
                Ok(Ok(0)) => break,
                Ok(Ok(n)) => {
                    if let Err(e) = spool.filled(n).await {
                        spool_error(e);
                        return;
                    }
                    len += n as u64;
                    if len >= read_limit {
                        self.record.error(err(
                            what,
                            "Pod",
                            pod,
                            Some(container),
                            format!("log longer than {read_limit} bytes; stopped reading"),
                        ));
                        break;
                    }
                }
                Ok(Err(e)) => {
                    self.record.error(err(
                        what,
                        "Pod",
                        pod,
                        Some(container),
                        format!("log stream broke after {len} bytes: {e}"),
                    ));
                    break;
                }
                Err(_) => {
                    self.record.error(err(
                        what,
                        "Pod",
                        pod,
                        Some(container),
                        format!(
                            "log stream stalled for {} s after {len} bytes; kept what arrived",
                            self.opts.request_timeout.as_secs_f64()
                        ),
                    ));
                    break;
                }
            }
        }
        let file = match spool.finish().await {
            Ok(f) => f,
            Err(e) => {
                spool_error(e);
                return;
            }
        };
        drop(permit);
        self.send(Entry {
            path,
            body: Body::Spool { file, len },
            cap: Some(self.opts.max_bytes_per_log),
            redact: true,
            counts: Default::default(),
        })
        .await;
    }
}

/// Bytes of a log gathered before they go to its spool file.
const SPOOL_BUF: usize = 256 * 1024;

/// A log's spool file and the buffer filled from the API: the buffer goes to
/// disk in one blocking call when full (a log arrives in chunks of a few KiB;
/// a blocking-pool hop for each cost more CPU than the write itself and kept
/// some forty blocking threads, each with its allocator arena, alive).
struct Spool {
    file: Option<std::fs::File>,
    buf: Vec<u8>,
    used: usize,
}

impl Spool {
    fn new(file: std::fs::File) -> Self {
        Spool {
            file: Some(file),
            buf: vec![0; SPOOL_BUF],
            used: 0,
        }
    }

    /// Where the next read goes.
    fn unfilled(&mut self) -> &mut [u8] {
        &mut self.buf[self.used..]
    }

    /// `n` bytes were read into [`Spool::unfilled`].
    async fn filled(&mut self, n: usize) -> std::io::Result<()> {
        self.used += n;
        if self.used == self.buf.len() {
            self.write().await?;
        }
        Ok(())
    }

    async fn write(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        let (Some(mut file), buf, used) =
            (self.file.take(), std::mem::take(&mut self.buf), self.used)
        else {
            return Err(std::io::Error::other("spool file already failed"));
        };
        let (file, buf, result) = tokio::task::spawn_blocking(move || {
            let r = file.write_all(&buf[..used]);
            (file, buf, r)
        })
        .await
        .map_err(std::io::Error::other)?;
        result?;
        self.file = Some(file);
        self.buf = buf;
        self.used = 0;
        Ok(())
    }

    /// Writes what is left and hands the file back.
    async fn finish(mut self) -> std::io::Result<std::fs::File> {
        if self.used > 0 {
            self.write().await?;
        }
        self.file
            .take()
            .ok_or_else(|| std::io::Error::other("spool file already failed"))
    }
}

fn event_time(e: &Value) -> String {
    ["lastTimestamp", "eventTime", "firstTimestamp"]
        .iter()
        .find_map(|k| e[*k].as_str())
        .or_else(|| e["metadata"]["creationTimestamp"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// What the object lists hold for the later steps of a bundle.
struct Listed {
    /// `Kind/name` of every object listed (the Events are about these).
    names: BTreeSet<String>,
    pods: Vec<PodPlan>,
    /// The ConfigMaps of kept log tails.
    tails: Vec<Value>,
    pools: Vec<Value>,
    /// Each live task's kept output: (header, text).
    outputs: BTreeMap<String, (String, String)>,
    /// The pools' history ConfigMaps (deleted tasks' records).
    histories: Vec<Value>,
}

/// What the bundle needs of a listed pod once its YAML is written.
struct PodPlan {
    name: String,
    /// From [`log_plan`].
    logs: Vec<(String, bool)>,
    /// For one of our agents: its IP and pool, to sample its health.
    agent: Option<(String, Option<String>)>,
}

impl PodPlan {
    fn of(pod: &Value) -> Option<PodPlan> {
        let labels = &pod["metadata"]["labels"];
        let agent = (labels[LABEL_MANAGED_BY] == MANAGED_BY)
            .then(|| pod["status"]["podIP"].as_str())
            .flatten()
            .map(|ip| {
                (
                    ip.to_owned(),
                    labels[LABEL_POOL].as_str().map(str::to_owned),
                )
            });
        Some(PodPlan {
            name: pod["metadata"]["name"].as_str()?.to_owned(),
            logs: log_plan(pod),
            agent,
        })
    }
}

/// Which logs to fetch for a pod: every container (init, regular,
/// ephemeral) current, and previous for those that restarted.
pub fn log_plan(pod: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for field in ["initContainers", "containers", "ephemeralContainers"] {
        for c in pod["spec"][field].as_array().into_iter().flatten() {
            if let Some(name) = c["name"].as_str() {
                out.push((name.to_owned(), false));
            }
        }
    }
    let restarted: BTreeSet<&str> = [
        "initContainerStatuses",
        "containerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .flat_map(|f| pod["status"][*f].as_array().into_iter().flatten())
    .filter(|s| {
        s["restartCount"].as_i64().unwrap_or(0) > 0 || s["lastState"]["terminated"].is_object()
    })
    .filter_map(|s| s["name"].as_str())
    .collect();
    let previous: Vec<(String, bool)> = out
        .iter()
        .filter(|(n, _)| restarted.contains(n.as_str()))
        .map(|(n, _)| (n.clone(), true))
        .collect();
    out.extend(previous);
    out
}

/// The default file name: `agentdeck-bundle-<namespace>-<UTC time>.zip`.
pub fn default_file_name(namespace: &str, now: Timestamp) -> String {
    file_name(namespace, None, now)
}

/// The zip's default name, with the pool when the bundle is of one:
/// `agentdeck-bundle-<namespace>[-<pool>]-<UTC time>.zip`.
pub fn file_name(namespace: &str, pool: Option<&str>, now: Timestamp) -> String {
    let t = now.strftime("%Y%m%dT%H%M%SZ");
    match pool {
        Some(pool) => format!("agentdeck-bundle-{namespace}-{pool}-{t}.zip"),
        None => format!("agentdeck-bundle-{namespace}-{t}.zip"),
    }
}

/// What the tasks listed tell the later steps: their uids (an output
/// ConfigMap is read only for its own task) and the outputs kept in their
/// status.
fn read_tasks(
    items: &[Value],
    task_uids: &mut BTreeMap<String, String>,
    outputs: &mut BTreeMap<String, (String, String)>,
) {
    for t in items {
        if let (Some(name), Some(uid)) = (
            t["metadata"]["name"].as_str(),
            t["metadata"]["uid"].as_str(),
        ) {
            task_uids.insert(name.to_owned(), uid.to_owned());
        }
        if let (Some(name), Some(tail)) = (
            t["metadata"]["name"].as_str(),
            t["status"]["outputTail"].as_str(),
        ) {
            outputs.insert(
                name.to_owned(),
                (
                    format!("# the last lines task {name} printed (status.outputTail)"),
                    tail.to_owned(),
                ),
            );
        }
    }
}

/// Each task's output from its output ConfigMap (`cms`), for the tasks
/// listed (`uids`) that have none from their status (`outputs`).
fn outputs_of_config_maps(
    cms: &[Value],
    uids: &BTreeMap<String, String>,
    outputs: &mut BTreeMap<String, (String, String)>,
) {
    for cm in cms {
        if let Some((task, text)) = task_output_of(cm, uids) {
            let from = format!(
                "# the last lines task {task} printed (ConfigMap {})",
                cm["metadata"]["name"].as_str().unwrap_or_default()
            );
            outputs.entry(task).or_insert((from, text));
        }
    }
}

/// The task and output an output ConfigMap keeps (see
/// [`crate::crd::output`]), when `cm` is one and its owner is the task of
/// that name listed (`uids`).
fn task_output_of(cm: &Value, uids: &BTreeMap<String, String>) -> Option<(String, String)> {
    use crate::crd::output::{COMPONENT_TASK_OUTPUT, OUTPUT_KEY};
    if cm["metadata"]["labels"][crate::crd::LABEL_COMPONENT] != COMPONENT_TASK_OUTPUT {
        return None;
    }
    let owner = cm["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["kind"] == "AgentTask")?;
    let task = owner["name"].as_str()?;
    (uids.get(task).map(String::as_str) == owner["uid"].as_str()).then_some(())?;
    Some((task.to_owned(), cm["data"][OUTPUT_KEY].as_str()?.to_owned()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_output_config_map_is_read_for_its_own_listed_task_whatever_came_first() {
        let cm = |name: &str, task: &str, uid: &str| {
            serde_json::json!({
                "metadata": {"name": name,
                    "labels": {"app.kubernetes.io/component": "task-output"},
                    "ownerReferences": [{"kind": "AgentTask", "name": task, "uid": uid}]},
                "data": {"output": format!("{task} done")},
            })
        };
        let cms = [
            cm("a-output-1", "a", "u-a"),
            // A task of that name deleted and made again: not this one's.
            cm("b-output-1", "b", "old-b"),
            cm("c-output-1", "c", "u-c"),
        ];
        let uids = BTreeMap::from([
            ("a".to_owned(), "u-a".to_owned()),
            ("b".to_owned(), "u-b".to_owned()),
            ("c".to_owned(), "u-c".to_owned()),
        ]);
        // c's output came from its status (an older agent's): kept.
        let mut outputs =
            BTreeMap::from([("c".to_owned(), ("# status".to_owned(), "s".to_owned()))]);
        super::outputs_of_config_maps(&cms, &uids, &mut outputs);
        assert_eq!(outputs.len(), 2, "{outputs:?}");
        assert_eq!(outputs["a"].1, "a done");
        assert!(
            outputs["a"].0.contains("ConfigMap a-output-1"),
            "{:?}",
            outputs["a"]
        );
        assert_eq!(outputs["c"].1, "s");
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn every_container_is_planned_and_previous_only_after_a_restart() {
        let pod = json!({
            "spec": {
                "initContainers": [{"name": "init"}],
                "containers": [{"name": "agent"}, {"name": "runner"}]
            },
            "status": {"containerStatuses": [
                {"name": "agent", "restartCount": 3},
                {"name": "runner", "restartCount": 0}
            ]}
        });
        assert_eq!(
            log_plan(&pod),
            vec![
                ("init".to_owned(), false),
                ("agent".to_owned(), false),
                ("runner".to_owned(), false),
                ("agent".to_owned(), true),
            ]
        );
    }

    #[test]
    fn pool_scope_takes_labelled_objects_the_pool_and_its_tasks() {
        assert!(in_pool(
            &json!({"metadata": {"labels": {LABEL_POOL: "a"}}}),
            "a"
        ));
        assert!(in_pool(
            &json!({"kind": "AgentPool", "metadata": {"name": "a"}}),
            "a"
        ));
        assert!(in_pool(
            &json!({"kind": "AgentTask", "metadata": {"name": "t"}, "spec": {"pool": "a"}}),
            "a"
        ));
        assert!(!in_pool(
            &json!({"kind": "AgentTask", "metadata": {"name": "t"}, "spec": {"pool": "b"}}),
            "a"
        ));
        assert!(!in_pool(&json!({"metadata": {"name": "a"}}), "a"));
    }

    #[test]
    fn the_default_file_name_says_namespace_and_time() {
        let t: Timestamp = "2026-11-24T08:00:00Z".parse().expect("time");
        assert_eq!(
            default_file_name("ops", t),
            "agentdeck-bundle-ops-20261124T080000Z.zip"
        );
    }
}
