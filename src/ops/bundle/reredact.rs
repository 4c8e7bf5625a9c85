//! `agentdeck bundle redact`: one more redaction pass over a bundle already
//! taken, for the sender who finds one more thing to hide or the receiver
//! who must pass the bundle on.
//!
//! The rules applied when the bundle was taken stay applied: their
//! placeholders are left as they are and never counted again. The pass adds
//! literal values (rule `literal`) and patterns (rule `regex`) and runs only
//! those ([`Redactor::with_added_rules`]). Logs and other text stream through
//! the redactor in bounded memory (the chunks of [`crate::redact`], which
//! end at a line, so a match across a read boundary is found); YAML and JSON
//! are parsed and their strings and keys redacted one by one, then written
//! back as the bundle writes them, so a placeholder never breaks their syntax
//! (`***…` is an alias in plain YAML); JSON lines (`audit.jsonl`) likewise,
//! a line at a time. An entry in which nothing is found is
//! copied as it is, compressed bytes and date; so is a binary one.
//!
//! `redactions.json` gets the new rules, this pass's counts (added to the
//! per-file counts, and in a record of the pass: when, which rule kinds, how
//! many matches — never a value). `manifest.json` is read and written as a
//! JSON value, so fields this version does not know survive; only the sizes
//! of rewritten files, the byte and match totals and strings holding what
//! is to be hidden change. A pass that finds nothing and adds no rule kind
//! changes nothing: run twice, it gives the first output's contents.
//!
//! The output is written under [`zipper::partial_path`] and renamed when
//! complete; the input is never written to, and an output that is the input
//! (the same path, or the same file through a link) is refused.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use regex::bytes::Regex;
use serde_json::Value;
use zip::write::SimpleFileOptions;
use zip::{ZipArchive, ZipWriter};

use super::redact::{
    LITERAL_RULE, MIN_LITERAL, REGEX_RULE, RedactStream, RedactionCounts, Redactor,
};
use super::{BundleError, Phase, Progress, objects, zipper};

/// The bundle's manifest entry.
pub const MANIFEST: &str = "manifest.json";
/// The bundle's redaction report entry.
pub const REPORT: &str = "redactions.json";

/// A YAML or JSON entry larger than this is redacted as text (streamed):
/// parsing keeps the whole entry in memory.
pub const STRUCTURED_MAX: u64 = 64 * 1024 * 1024;

/// How much of an entry of unknown type is looked at to tell text from
/// binary (a NUL byte says binary).
const SNIFF: u64 = 8 * 1024;

/// Manifest fields a reader needs to open the bundle, kept as they are.
const MANIFEST_KEPT: &[&str] = &[
    "tool",
    "version",
    "formatVersion",
    "startedAt",
    "finishedAt",
];

/// Why a pass was refused (each is a mistake in what was given: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    /// Neither a literal file nor a pattern.
    #[error(
        "nothing to add: give --literal-file FILE (one value per line) or --regex RE (or both)"
    )]
    NothingToAdd,
    /// A literal file that cannot be used.
    #[error("--literal-file {}: {why}", path.display())]
    LiteralFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The input cannot be read at all.
    #[error("cannot read the bundle {}: {source}", path.display())]
    ReadInput {
        /// The input.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The input is not a zip, or not one agentdeck wrote (as the console
    /// and the sandbox on a bundle say it: [`super::open`]).
    #[error(transparent)]
    NotABundle(#[from] super::open::OpenError),
    /// Its `redactions.json` is not one of agentdeck's.
    #[error("{}: its {REPORT} cannot be used: {why}", path.display())]
    BadReport {
        /// The input.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// An entry of the input cannot be read (a damaged zip).
    #[error("{} is damaged: cannot read {entry}: {why}; nothing was written", path.display())]
    Damaged {
        /// The input.
        path: PathBuf,
        /// The entry.
        entry: String,
        /// Cause.
        why: String,
    },
    /// The output is the input.
    #[error(
        "-o {} would write over the input {} ({how}): write the re-redacted bundle to another file",
        output.display(),
        input.display()
    )]
    OverwritesInput {
        /// The input.
        input: PathBuf,
        /// The output asked for.
        output: PathBuf,
        /// How they are the same.
        how: &'static str,
    },
}

/// What to do.
#[derive(Debug, Clone)]
pub struct RedactOptions {
    /// The bundle to read (never written).
    pub input: PathBuf,
    /// The bundle to write.
    pub output: PathBuf,
    /// Values to hide, as rule `literal` (ASCII letters in either case).
    pub literals: Vec<Vec<u8>>,
    /// Patterns to hide, as rule `regex`, each matched within a line.
    pub patterns: Vec<Regex>,
}

/// What a pass did.
#[derive(Debug, Clone)]
pub struct PassSummary {
    /// The zip written.
    pub path: PathBuf,
    /// Entries in it.
    pub entries: usize,
    /// Entries written anew because something was hidden in them.
    pub rewritten: usize,
    /// Binary entries, copied unchanged.
    pub binary: usize,
    /// Matches hidden by this pass, per rule.
    pub hidden: RedactionCounts,
    /// The pass was recorded in `redactions.json`; false when it found
    /// nothing and added no rule kind (the output's contents are then the
    /// input's).
    pub recorded: bool,
    /// Size of the zip.
    pub zip_bytes: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl PassSummary {
    /// The lines `agentdeck bundle redact` prints: counts, never values.
    pub fn report(&self, input: &Path) -> String {
        let mut out = format!(
            "wrote {} ({} entries, {} rewritten, {:.1} MB) in {:.1} s\n",
            self.path.display(),
            self.entries,
            self.rewritten,
            self.zip_bytes as f64 / 1e6,
            self.elapsed.as_secs_f64()
        );
        if self.recorded && self.hidden.is_empty() {
            out.push_str("hidden by this pass: nothing found; redactions.json records the pass and its rules\n");
        } else if self.recorded {
            out.push_str(&format!(
                "hidden by this pass: {} (per file in redactions.json)\n",
                super::redact::describe_counts(&self.hidden)
            ));
        } else {
            out.push_str(&format!(
                "hidden by this pass: nothing new; {} holds what {} holds (these rules were applied before)\n",
                self.path.display(),
                input.display()
            ));
        }
        if self.binary > 0 {
            out.push_str(&format!(
                "{} binary entries copied unchanged\n",
                self.binary
            ));
        }
        out
    }
}

/// The values of a literal file: one per line; a trailing newline and CR
/// are stripped, empty and blank lines ignored, anything else (inner and
/// outer spaces included) taken as it is.
pub fn read_literal_file(path: &Path) -> Result<Vec<Vec<u8>>, RedactError> {
    let fault = |why: String| RedactError::LiteralFile {
        path: path.to_path_buf(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| fault(e.to_string()))?;
    literals_in(&bytes).map_err(fault)
}

/// [`read_literal_file`] on the file's bytes.
pub fn literals_in(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| matches!(b, b' ' | b'\t')) {
            continue;
        }
        if line.len() < MIN_LITERAL {
            return Err(format!(
                "line {} has {} bytes; a literal needs at least {MIN_LITERAL} (a shorter one would hide common words): \
                 hide a short value with --regex, e.g. --regex '\\bACME\\b'",
                n + 1,
                line.len()
            ));
        }
        out.push(line.to_vec());
    }
    if out.is_empty() {
        return Err("holds no value (one per line; empty lines are ignored)".into());
    }
    Ok(out)
}

/// Refuses an output that is the input: the same path, or the same file
/// through a hard link or a symbolic link.
fn refuse_overwrite(input: &Path, output: &Path) -> Result<(), RedactError> {
    use std::os::unix::fs::MetadataExt;
    let same = |how| RedactError::OverwritesInput {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        how,
    };
    let read = |source| RedactError::ReadInput {
        path: input.to_path_buf(),
        source,
    };
    let input_path = std::fs::canonicalize(input).map_err(read)?;
    let input_meta = std::fs::metadata(input).map_err(read)?;
    let symlink = std::fs::symlink_metadata(output).is_ok_and(|m| m.file_type().is_symlink());
    if std::fs::canonicalize(output).is_ok_and(|o| o == input_path) {
        return Err(same(if symlink {
            "a symbolic link to it"
        } else {
            "the same path"
        }));
    }
    if let Ok(out) = std::fs::metadata(output)
        && (out.dev(), out.ino()) == (input_meta.dev(), input_meta.ino())
    {
        return Err(same("the same file: a hard link to it"));
    }
    Ok(())
}

/// The input, opened and checked to be a bundle.
struct Bundle {
    zip: ZipArchive<File>,
    manifest: Value,
    report: Option<Value>,
}

fn open_bundle(path: &Path) -> Result<Bundle, RedactError> {
    let opened = super::open::OpenedBundle::open(path)?;
    let read = |source| RedactError::ReadInput {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(read)?;
    let mut zip = ZipArchive::new(file).map_err(|e| read(io::Error::other(e)))?;
    let bad = |why: String| RedactError::BadReport {
        path: path.to_path_buf(),
        why,
    };
    let report = match read_json(&mut zip, REPORT) {
        None => None,
        Some(Ok(r)) if r.is_object() => Some(r),
        Some(Ok(_)) => return Err(bad("not a JSON object".into())),
        Some(Err(why)) => return Err(bad(why)),
    };
    Ok(Bundle {
        zip,
        manifest: opened.manifest,
        report,
    })
}

/// An entry parsed as JSON, if there is one by that name.
fn read_json(zip: &mut ZipArchive<File>, name: &str) -> Option<Result<Value, String>> {
    zip.index_for_name(name)?;
    let mut read = || -> Result<Value, String> {
        let entry = zip.by_name(name).map_err(|e| e.to_string())?;
        let mut bytes = Vec::new();
        entry
            .take(STRUCTURED_MAX)
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        serde_json::from_slice(&bytes).map_err(|e| format!("not JSON ({e})"))
    };
    Some(read())
}

/// Runs the pass `opts` describes, calling `progress` (on this thread) as
/// entries are written.
pub fn run(opts: &RedactOptions, progress: impl Fn(Progress)) -> Result<PassSummary, BundleError> {
    let started = Instant::now();
    if opts.literals.is_empty() && opts.patterns.is_empty() {
        return Err(RedactError::NothingToAdd.into());
    }
    refuse_overwrite(&opts.input, &opts.output)?;
    let bundle = open_bundle(&opts.input)?;
    super::check_output_dir(&opts.output)?;
    let redactor = Redactor::with_added_rules(&opts.literals, opts.patterns.clone());
    let partial = zipper::partial_path(&opts.output);
    let result = write_pass(opts, bundle, &redactor, &partial, &progress);
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    let mut summary = result?;
    summary.elapsed = started.elapsed();
    progress(Progress {
        phase: Phase::Done,
        files_done: summary.entries as u64,
        files_expected: summary.entries as u64,
        bytes_written: 0,
        current: String::new(),
    });
    Ok(summary)
}

/// What became of one entry.
enum Outcome {
    /// Copied as it is (nothing found, or binary).
    Copy { binary: bool },
    /// Written anew into a one-entry zip in a temporary file.
    Rewritten {
        part: File,
        bytes: u64,
        counts: RedactionCounts,
    },
}

/// One entry done by a worker.
struct Done {
    index: usize,
    name: String,
    size: u64,
    outcome: Outcome,
}

/// Why an entry failed: reading the input (damaged) or writing a part.
enum Fault {
    Read { entry: String, why: String },
    Write { entry: String, source: io::Error },
}

/// The output being written, and the input it copies from.
struct Writing<'a> {
    opts: &'a RedactOptions,
    bundle: Bundle,
    out: ZipWriter<File>,
    partial: &'a Path,
    /// Entries written so far.
    entries: usize,
}

/// What the entries other than the manifest and the report became.
#[derive(Default)]
struct Body {
    /// Per rewritten file, its size before and after.
    sizes: BTreeMap<String, (u64, u64)>,
    /// Per rewritten file, per rule, what this pass hid.
    files: BTreeMap<String, RedactionCounts>,
    /// Binary entries copied.
    binary: usize,
}

impl Writing<'_> {
    fn write_err(&self, entry: &str, source: io::Error) -> BundleError {
        BundleError::Write {
            path: self.partial.to_path_buf(),
            entry: entry.to_owned(),
            source,
        }
    }

    fn damaged(&self, entry: &str, why: String) -> BundleError {
        RedactError::Damaged {
            path: self.opts.input.clone(),
            entry: entry.to_owned(),
            why,
        }
        .into()
    }

    /// Copies the input's entry `index` as it is (compressed).
    fn copy_raw(&mut self, index: usize, name: &str) -> Result<(), BundleError> {
        let entry = self
            .bundle
            .zip
            .by_index_raw(index)
            .map_err(|e| RedactError::Damaged {
                path: self.opts.input.clone(),
                entry: name.to_owned(),
                why: e.to_string(),
            })?;
        let copied = self.out.raw_copy_file(entry);
        copied.map_err(|e| self.write_err(name, io::Error::other(e)))?;
        self.entries += 1;
        Ok(())
    }
}

fn write_pass(
    opts: &RedactOptions,
    bundle: Bundle,
    redactor: &Redactor,
    partial: &Path,
    progress: &dyn Fn(Progress),
) -> Result<PassSummary, BundleError> {
    let file = File::create(partial).map_err(|source| BundleError::CreateOutput {
        path: partial.to_path_buf(),
        source,
    })?;
    let mut w = Writing {
        opts,
        bundle,
        out: ZipWriter::new(file),
        partial,
        entries: 0,
    };
    let body = write_body(&mut w, redactor, progress)?;
    finish_pass(w, redactor, body)
}

/// Every entry but the manifest and the report, in the input's order.
fn write_body(
    w: &mut Writing<'_>,
    redactor: &Redactor,
    progress: &dyn Fn(Progress),
) -> Result<Body, BundleError> {
    let zip = &w.bundle.zip;
    let jobs: Vec<usize> = (0..zip.len())
        .filter(|i| {
            !matches!(
                zip.name_for_index(*i).and_then(Result::ok).as_deref(),
                Some(MANIFEST | REPORT)
            )
        })
        .collect();
    let total = jobs.len() as u64 + 2;
    let mut body = Body::default();
    let mut bytes_read = 0u64;
    let mut done_count = 0u64;
    each_entry(&w.opts.input, &jobs, redactor, |done| {
        let done = done.map_err(|f| match f {
            Fault::Read { entry, why } => w.damaged(&entry, why),
            Fault::Write { entry, source } => w.write_err(&entry, source),
        })?;
        match done.outcome {
            Outcome::Copy { binary } => {
                body.binary += usize::from(binary);
                w.copy_raw(done.index, &done.name)?;
            }
            Outcome::Rewritten {
                part,
                bytes,
                counts,
            } => {
                copy_part(&mut w.out, part).map_err(|e| w.write_err(&done.name, e))?;
                w.entries += 1;
                body.sizes.insert(done.name.clone(), (done.size, bytes));
                body.files.insert(done.name.clone(), counts);
            }
        }
        bytes_read += done.size;
        done_count += 1;
        progress(Progress {
            phase: Phase::Collecting,
            files_done: done_count,
            files_expected: total,
            bytes_written: bytes_read,
            current: done.name,
        });
        Ok(())
    })?;
    progress(Progress {
        phase: Phase::Finishing,
        files_done: done_count,
        files_expected: total,
        bytes_written: bytes_read,
        current: MANIFEST.into(),
    });
    Ok(body)
}

/// The manifest and the report, each copied when unchanged, then the zip
/// closed and renamed into place.
fn finish_pass(
    mut w: Writing<'_>,
    redactor: &Redactor,
    mut body: Body,
) -> Result<PassSummary, BundleError> {
    let opts = w.opts;
    // The manifest: strings that hold what is to be hidden, then the sizes.
    let mut manifest = w.bundle.manifest.clone();
    let mut manifest_counts = RedactionCounts::new();
    redact_manifest(redactor, &mut manifest, &mut manifest_counts);
    if !manifest_counts.is_empty() {
        body.files.insert(MANIFEST.into(), manifest_counts);
    }
    let hidden = super::per_rule(&body.files);
    update_manifest(&mut manifest, &body.sizes, hidden.values().sum());

    let mut kinds = Vec::new();
    if !opts.literals.is_empty() {
        kinds.push(LITERAL_RULE);
    }
    if !opts.patterns.is_empty() {
        kinds.push(REGEX_RULE);
    }
    let mut report = w
        .bundle
        .report
        .clone()
        .unwrap_or_else(|| serde_json::json!({"rules": [], "files": {}}));
    let recorded = record_pass(
        &mut report,
        &kinds,
        opts.literals.len(),
        opts.patterns.len(),
        &body.files,
        jiff::Timestamp::now(),
    );

    let manifest_changed = manifest != w.bundle.manifest;
    let mut last = Vec::new();
    for (name, changed, value, present) in [
        (MANIFEST, manifest_changed, &manifest, true),
        (REPORT, recorded, &report, w.bundle.report.is_some()),
    ] {
        if changed {
            last.push((
                name.to_owned(),
                serde_json::to_vec_pretty(value).unwrap_or_default(),
            ));
        } else if present {
            let index =
                w.bundle.zip.index_for_name(name).ok_or_else(|| {
                    w.damaged(name, "the entry is gone from its directory".into())
                })?;
            w.copy_raw(index, name)?;
        }
    }
    let entries = w.entries + last.len();
    let zip_bytes = zipper::finish(w.out, last, w.partial, &opts.output)?;
    Ok(PassSummary {
        path: opts.output.clone(),
        entries,
        rewritten: body.sizes.len() + usize::from(manifest_changed),
        binary: body.binary,
        hidden,
        recorded,
        zip_bytes,
        elapsed: Duration::ZERO,
    })
}

/// How many entries may be done ahead of the one being written (each is a
/// temporary file at most, never memory).
fn window() -> usize {
    2 * zipper::workers()
}

/// Runs [`process`] over `jobs` on [`zipper::workers`] threads, each with
/// its own handle on the input, and hands the results to `write` in the
/// input's order. Stops at the first error `write` returns.
fn each_entry(
    input: &Path,
    jobs: &[usize],
    redactor: &Redactor,
    mut write: impl FnMut(Result<Done, Fault>) -> Result<(), BundleError>,
) -> Result<(), BundleError> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let written = (Mutex::new(0usize), Condvar::new());
    let (tx, rx) = mpsc::channel::<(usize, Result<Done, Fault>)>();
    std::thread::scope(|s| {
        for _ in 0..zipper::workers().min(jobs.len().max(1)) {
            let tx = tx.clone();
            let (next, stop, written) = (&next, &stop, &written);
            s.spawn(move || {
                let mut zip: Option<ZipArchive<File>> = None;
                loop {
                    let pos = next.fetch_add(1, Ordering::Relaxed);
                    if pos >= jobs.len() {
                        break;
                    }
                    {
                        let mut w = written.0.lock().unwrap_or_else(PoisonError::into_inner);
                        while pos >= *w + window() && !stop.load(Ordering::Relaxed) {
                            w = written.1.wait(w).unwrap_or_else(PoisonError::into_inner);
                        }
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let result = match &mut zip {
                        Some(z) => process(z, jobs[pos], redactor),
                        None => match File::open(input)
                            .map_err(|e| e.to_string())
                            .and_then(|f| ZipArchive::new(f).map_err(|e| e.to_string()))
                        {
                            Ok(z) => process(zip.insert(z), jobs[pos], redactor),
                            Err(why) => Err(Fault::Read {
                                entry: "(the archive)".into(),
                                why,
                            }),
                        },
                    };
                    if tx.send((pos, result)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut ready: BTreeMap<usize, Result<Done, Fault>> = BTreeMap::new();
        let mut at = 0;
        let outcome = (|| {
            while at < jobs.len() {
                let Ok((pos, result)) = rx.recv() else {
                    return Err(BundleError::WriterStopped(
                        "a redaction worker stopped".into(),
                    ));
                };
                ready.insert(pos, result);
                while let Some(result) = ready.remove(&at) {
                    write(result)?;
                    at += 1;
                    *written.0.lock().unwrap_or_else(PoisonError::into_inner) = at;
                    written.1.notify_all();
                }
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        written.1.notify_all();
        drop(rx);
        outcome
    })
}

/// What an entry's name says it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Yaml,
    Json,
    /// One JSON document a line (the audit trail).
    JsonLines,
    Text,
    /// Text unless its first bytes hold a NUL.
    Unknown,
}

impl Kind {
    fn of(name: &str) -> Kind {
        let ext = name
            .rsplit_once('.')
            .map(|(_, e)| e.to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "yaml" | "yml" => Kind::Yaml,
            "json" => Kind::Json,
            "jsonl" | "ndjson" => Kind::JsonLines,
            "log" | "txt" | "md" | "csv" | "tsv" => Kind::Text,
            _ => Kind::Unknown,
        }
    }
}

/// A reader that keeps its error, so that a fault of the input (damaged)
/// is told from one of the output.
struct Reading<R> {
    inner: R,
    failed: Option<io::Error>,
}

impl<R: Read> Read for Reading<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            self.failed = Some(io::Error::new(e.kind(), e.to_string()));
        })
    }
}

/// A writer that counts what goes through it.
struct Counted<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Options of a rewritten entry: the bundle's compression, the original's
/// date and mode (the content is still what was collected then).
/// An entry near 4 GiB is written as ZIP64: placeholders can make it grow.
fn options_like(entry: &zip::read::ZipFile<'_, File>) -> SimpleFileOptions {
    let mut o = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(1))
        .unix_permissions(entry.unix_mode().map_or(0o644, |m| m & 0o777))
        .large_file(entry.size() >= 1 << 31);
    if let Some(t) = entry.last_modified() {
        o = o.last_modified_time(t);
    }
    o
}

/// One entry: redacted into a part when something is found, else left to
/// be copied.
fn process(zip: &mut ZipArchive<File>, index: usize, r: &Redactor) -> Result<Done, Fault> {
    let (name, size, not_a_file, options) = {
        let e = zip.by_index(index).map_err(|e| Fault::Read {
            entry: format!("entry {index}"),
            why: e.to_string(),
        })?;
        let name = e.name().map(|n| n.into_owned()).map_err(|e| Fault::Read {
            entry: format!("entry {index}"),
            why: e.to_string(),
        })?;
        (name, e.size(), !e.is_file(), options_like(&e))
    };
    let done = |outcome| Done {
        index,
        name: name.clone(),
        size,
        outcome,
    };
    // A directory or a symbolic link has no content to redact.
    if not_a_file {
        return Ok(done(Outcome::Copy { binary: false }));
    }
    let read_fault = |why: String| Fault::Read {
        entry: name.clone(),
        why,
    };
    let write_fault = |source: io::Error| Fault::Write {
        entry: name.clone(),
        source,
    };
    let kind = Kind::of(&name);
    if matches!(kind, Kind::Yaml | Kind::Json) && size <= STRUCTURED_MAX {
        let mut bytes = Vec::new();
        zip.by_index(index)
            .map_err(|e| read_fault(e.to_string()))?
            .take(STRUCTURED_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| read_fault(e.to_string()))?;
        if let Some((text, counts)) = redact_structured(kind, &bytes, r) {
            if counts.is_empty() {
                return Ok(done(Outcome::Copy { binary: false }));
            }
            let (part, n) =
                write_part(&name, options, &mut |w| w.write_all(&text)).map_err(write_fault)?;
            return Ok(done(Outcome::Rewritten {
                part,
                bytes: n,
                counts,
            }));
        }
    }
    if kind == Kind::Unknown {
        let mut head = Vec::new();
        zip.by_index(index)
            .map_err(|e| read_fault(e.to_string()))?
            .take(SNIFF)
            .read_to_end(&mut head)
            .map_err(|e| read_fault(e.to_string()))?;
        if head.contains(&0) {
            return Ok(done(Outcome::Copy { binary: true }));
        }
    }
    // Text: counted first, and written only when something is found (most
    // logs hold nothing of a customer's name; copying them is far cheaper
    // than compressing them again).
    let counts = {
        let entry = zip.by_index(index).map_err(|e| read_fault(e.to_string()))?;
        let mut reading = Reading {
            inner: entry,
            failed: None,
        };
        redact_text(kind, r, &mut reading, &mut io::sink())
            .map_err(|e| read_fault(reading.failed.take().unwrap_or(e).to_string()))?
    };
    if counts.is_empty() {
        return Ok(done(Outcome::Copy { binary: false }));
    }
    let entry = zip.by_index(index).map_err(|e| read_fault(e.to_string()))?;
    let mut reading = Reading {
        inner: entry,
        failed: None,
    };
    let written = write_part(&name, options, &mut |w| {
        redact_text(kind, r, &mut reading, w).map(drop)
    });
    let (part, n) = written.map_err(|e| match reading.failed.take() {
        Some(read) => read_fault(read.to_string()),
        None => write_fault(e),
    })?;
    Ok(done(Outcome::Rewritten {
        part,
        bytes: n,
        counts,
    }))
}

/// Text through the redactor into `out`: streamed, or for JSON lines one
/// line at a time, each parsed and its strings and keys redacted so that it
/// stays JSON (a line that is not JSON is redacted as text).
fn redact_text(
    kind: Kind,
    r: &Redactor,
    input: &mut dyn Read,
    out: &mut dyn Write,
) -> io::Result<RedactionCounts> {
    if kind != Kind::JsonLines {
        let mut s = RedactStream::new(r, out);
        io::copy(input, &mut s)?;
        return Ok(s.finish()?.1);
    }
    let mut counts = RedactionCounts::new();
    let mut lines = io::BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::new();
    loop {
        line.clear();
        if io::BufRead::read_until(&mut lines, b'\n', &mut line)? == 0 {
            break;
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let mut found = RedactionCounts::new();
        match serde_json::from_slice::<Value>(body) {
            Ok(mut v) => {
                redact_tree(r, &mut v, true, &mut found);
                if found.is_empty() {
                    out.write_all(&line)?;
                } else {
                    serde_json::to_writer(&mut *out, &v)?;
                    out.write_all(&line[body.len()..])?;
                }
            }
            Err(_) => out.write_all(&r.redact_bytes(&line, &mut found))?,
        }
        for (k, n) in found {
            *counts.entry(k).or_default() += n;
        }
    }
    Ok(counts)
}

/// Writes what `fill` writes as the one entry `name` of a zip in a
/// temporary file; returns it and the entry's size.
fn write_part(
    name: &str,
    options: SimpleFileOptions,
    fill: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<(File, u64)> {
    let mut part = ZipWriter::new(tempfile::tempfile()?);
    part.start_file(name, options).map_err(io::Error::other)?;
    let n = {
        let mut counted = Counted {
            inner: io::BufWriter::with_capacity(64 * 1024, &mut part),
            n: 0,
        };
        fill(&mut counted)?;
        counted.flush()?;
        counted.n
    };
    let file = part.finish().map_err(io::Error::other)?;
    Ok((file, n))
}

/// Copies a part's one entry into the output as it is (compressed).
fn copy_part(out: &mut ZipWriter<File>, mut part: File) -> io::Result<()> {
    part.seek(SeekFrom::Start(0))?;
    let mut archive = ZipArchive::new(part).map_err(io::Error::other)?;
    let entry = archive.by_index_raw(0).map_err(io::Error::other)?;
    out.raw_copy_file(entry).map_err(io::Error::other)
}

/// A YAML stream or a JSON document with its strings and keys redacted,
/// written back as the bundle writes them, and what was hidden; `None` when
/// it does not parse (it is then redacted as text).
fn redact_structured(kind: Kind, bytes: &[u8], r: &Redactor) -> Option<(Vec<u8>, RedactionCounts)> {
    let mut counts = RedactionCounts::new();
    match kind {
        Kind::Yaml => {
            let text = std::str::from_utf8(bytes).ok()?;
            let mut docs: Vec<Value> =
                serde_saphyr::from_multiple_with_options(text, yaml_options()).ok()?;
            for d in &mut docs {
                redact_tree(r, d, true, &mut counts);
            }
            let out = if counts.is_empty() {
                Vec::new()
            } else {
                objects::to_yaml_stream(&docs).into_bytes()
            };
            Some((out, counts))
        }
        Kind::Json => {
            let mut v: Value = serde_json::from_slice(bytes).ok()?;
            redact_tree(r, &mut v, true, &mut counts);
            let out = if counts.is_empty() {
                Vec::new()
            } else {
                serde_json::to_vec_pretty(&v).ok()?
            };
            Some((out, counts))
        }
        Kind::JsonLines | Kind::Text | Kind::Unknown => None,
    }
}

/// The bundle's own YAML can be large (thousands of objects in one
/// stream): the parser's default budget is for configuration files.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: None,
            max_events: usize::MAX,
            max_documents: usize::MAX,
            max_nodes: usize::MAX,
            max_total_scalar_bytes: usize::MAX,
        },
    }
}

/// Redacts every string of `v` (and, with `keys`, every map key).
fn redact_tree(r: &Redactor, v: &mut Value, keys: bool, counts: &mut RedactionCounts) {
    match v {
        Value::String(s) => {
            if let Some(new) = redact_string(r, s, counts) {
                *s = new;
            }
        }
        Value::Array(items) => {
            for item in items {
                redact_tree(r, item, keys, counts);
            }
        }
        Value::Object(map) => {
            for child in map.values_mut() {
                redact_tree(r, child, keys, counts);
            }
            if keys {
                let mut renamed = Vec::new();
                for k in map.keys() {
                    if let Some(new) = redact_string(r, k, counts) {
                        renamed.push((k.clone(), new));
                    }
                }
                if !renamed.is_empty() {
                    let renamed: BTreeMap<String, String> = renamed.into_iter().collect();
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(k, v)| (renamed.get(&k).cloned().unwrap_or(k), v))
                        .collect();
                }
            }
        }
        _ => {}
    }
}

/// `s` redacted, when something was found in it.
fn redact_string(r: &Redactor, s: &str, counts: &mut RedactionCounts) -> Option<String> {
    let mut found = RedactionCounts::new();
    let out = r.redact_str(s, &mut found);
    if found.is_empty() {
        return None;
    }
    for (k, n) in found {
        *counts.entry(k).or_default() += n;
    }
    Some(out)
}

/// The manifest's strings redacted, but for what a reader needs to open
/// the bundle (tool, version, times, the paths of files, which are the
/// entries' names). Keys are the format's, never redacted.
fn redact_manifest(r: &Redactor, manifest: &mut Value, counts: &mut RedactionCounts) {
    let Some(map) = manifest.as_object_mut() else {
        return;
    };
    for (k, v) in map.iter_mut() {
        if MANIFEST_KEPT.contains(&k.as_str()) {
            continue;
        }
        if k == "files"
            && let Some(files) = v.as_array_mut()
        {
            for f in files {
                match f.as_object_mut() {
                    Some(f) => {
                        for (_, fv) in f.iter_mut().filter(|(k, _)| *k != "path") {
                            redact_tree(r, fv, false, counts);
                        }
                    }
                    None => redact_tree(r, f, false, counts),
                }
            }
            continue;
        }
        redact_tree(r, v, false, counts);
    }
}

/// New sizes of rewritten files (`files[].bytes`, `bytes`) and the total of
/// matches (`redactions`); every other field as it was.
fn update_manifest(manifest: &mut Value, sizes: &BTreeMap<String, (u64, u64)>, hidden: u64) {
    if let Some(files) = manifest.get_mut("files").and_then(Value::as_array_mut) {
        for f in files {
            let Some((_, after)) = f["path"].as_str().and_then(|p| sizes.get(p)) else {
                continue;
            };
            if f.get("bytes").is_some() {
                f["bytes"] = (*after).into();
            }
        }
    }
    if let Some(total) = manifest.get("bytes").and_then(Value::as_u64) {
        let before: u64 = sizes.values().map(|(b, _)| b).sum();
        let after: u64 = sizes.values().map(|(_, a)| a).sum();
        manifest["bytes"] = (total.saturating_sub(before) + after).into();
    }
    if hidden > 0
        && let Some(total) = manifest.get("redactions").and_then(Value::as_u64)
    {
        manifest["redactions"] = (total + hidden).into();
    }
}

/// Adds this pass to the report: new rule kinds to `rules`, its counts to
/// `files`, and a record under `passes`. Returns whether it was recorded:
/// not when it hid nothing and added no rule kind (the report, like the
/// rest, is then as it was).
fn record_pass(
    report: &mut Value,
    kinds: &[&str],
    literals: usize,
    patterns: usize,
    files: &BTreeMap<String, RedactionCounts>,
    at: jiff::Timestamp,
) -> bool {
    let Some(map) = report.as_object_mut() else {
        return false;
    };
    let known: Vec<String> = map
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    let new_kinds: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| !known.iter().any(|r| r == k))
        .collect();
    let matches = super::per_rule(files);
    if new_kinds.is_empty() && matches.is_empty() {
        return false;
    }
    let rules = map
        .entry("rules")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(rules) = rules.as_array_mut() {
        rules.extend(new_kinds.iter().map(|k| Value::from(*k)));
    }
    let per_file = map
        .entry("files")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Some(per_file) = per_file.as_object_mut() {
        for (path, counts) in files {
            let entry = per_file
                .entry(path.clone())
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(entry) = entry.as_object_mut() else {
                continue;
            };
            for (rule, n) in counts {
                let before = entry.get(*rule).and_then(Value::as_u64).unwrap_or(0);
                entry.insert((*rule).to_owned(), (before + n).into());
            }
        }
    }
    let record = serde_json::json!({
        "at": at.to_string(),
        "by": format!("agentdeck {} bundle redact", env!("CARGO_PKG_VERSION")),
        "rules": kinds,
        "literals": literals,
        "patterns": patterns,
        "matches": matches,
        "hidden": matches.values().sum::<u64>(),
        "files": files,
        "placeholderKey": "a key of this pass only: its placeholders agree with each other, not with those of other passes",
    });
    let passes = map
        .entry("passes")
        .or_insert_with(|| Value::Array(Vec::new()));
    match passes.as_array_mut() {
        Some(p) => p.push(record),
        None => *passes = Value::Array(vec![record]),
    }
    true
}

#[cfg(test)]
mod tests;
