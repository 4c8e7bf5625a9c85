//! The blocking side of a bundle: one thread owns the zip file, takes the
//! collected files from a bounded channel, redacts them while it compresses
//! them, and at the end writes the manifest and renames the finished zip
//! into place. Log bodies arrive as spool files on disk, so memory stays
//! flat however large the logs are.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::mpsc;
use zip::ZipWriter;
use zip::write::SimpleFileOptions;

use super::redact::{RedactStream, RedactionCounts, Redactor};
use super::{BundleError, Progress, ProgressFn};

/// The body of one file of the bundle.
pub enum Body {
    /// Small content built in memory (objects, events, health).
    Bytes(Vec<u8>),
    /// A log spooled to an unnamed temporary file.
    Spool {
        /// The file, at any position.
        file: File,
        /// Bytes in it.
        len: u64,
    },
}

/// One file to add.
pub struct Entry {
    /// Path inside the zip.
    pub path: String,
    /// Content.
    pub body: Body,
    /// Keep at most this many bytes (the end of the content), with a
    /// marker line saying what was left out.
    pub cap: Option<u64>,
    /// Run the redactor over it (objects are redacted field by field before).
    pub redact: bool,
    /// Matches hidden before it was sent (objects), for the report.
    pub counts: RedactionCounts,
}

/// A file in the finished bundle, for the manifest.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileRecord {
    /// Path inside the zip.
    pub path: String,
    /// Bytes collected.
    pub source_bytes: u64,
    /// Bytes written (after the cap and redaction).
    pub bytes: u64,
    /// The cap cut the start of the content.
    pub truncated: bool,
}

/// What the writer did.
#[derive(Debug, Default)]
pub struct Written {
    pub files: Vec<FileRecord>,
    /// Per file, per rule, how many matches were hidden.
    pub redactions: BTreeMap<String, RedactionCounts>,
}

/// Compression: level 1 deflate — logs compress well even at the fastest
/// level, and a bundle is written while someone waits for it.
/// Entries are dated now (local time, as zip tools expect), not the
/// format's 1980-01-01 default.
fn options() -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(1))
        .unix_permissions(0o644)
        .last_modified_time(zip_time(&jiff::Zoned::now()))
}

/// `at` as a zip entry time (to the even second the format keeps).
fn zip_time(at: &jiff::Zoned) -> zip::DateTime {
    let part = |v: i8| u8::try_from(v).unwrap_or(0);
    zip::DateTime::from_date_and_time(
        u16::try_from(at.year()).unwrap_or(1980),
        part(at.month()),
        part(at.day()),
        part(at.hour()),
        part(at.minute()),
        part(at.second()),
    )
    .unwrap_or_default()
}

/// Where the bundle is written until complete: beside the target, hidden,
/// so a rename puts it in place atomically and a crash leaves no file that
/// looks whole.
pub fn partial_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bundle.zip".into());
    target.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Entries smaller than this are written by the assembling thread itself;
/// larger ones (logs) are redacted and compressed by the workers.
const INLINE_MAX: usize = 64 * 1024;

/// One entry compressed by a worker: a single-file zip in an unnamed
/// temporary file, copied into the bundle without recompressing.
struct Compressed {
    part: File,
    record: FileRecord,
    counts: RedactionCounts,
}

/// How many threads redact and compress: one per core, at most four (the
/// API is read at the same time).
pub(super) fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// Runs the writer until `rx` closes; returns the zip still open so the
/// manifest can be added by [`finish`].
///
/// Redaction and compression are the costly part of a bundle, and each log
/// is independent: a pool of [`workers`] threads each turn one log into a
/// single-entry zip on disk, and this thread copies the compressed entries
/// into the bundle as they come (`raw_copy_file`: no second compression).
/// Small entries are written here directly. Memory stays flat: logs are
/// spool files, parts are temporary files, and both queues are bounded.
pub fn run(
    zip_path: &Path,
    mut rx: mpsc::Receiver<Entry>,
    redactor: Option<Arc<Redactor>>,
    progress: ProgressFn,
    expected: Arc<std::sync::atomic::AtomicU64>,
) -> Result<(ZipWriter<File>, Written), BundleError> {
    let file = File::create(zip_path).map_err(|source| BundleError::CreateOutput {
        path: zip_path.to_path_buf(),
        source,
    })?;
    let mut zip = ZipWriter::new(file);
    let mut written = Written::default();
    let mut bytes_total = 0u64;
    let n = workers();
    let (job_tx, job_rx) = std::sync::mpsc::sync_channel::<Entry>(n);
    let job_rx = Arc::new(std::sync::Mutex::new(job_rx));
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<(String, io::Result<Compressed>)>(n);
    let pool = spawn_workers(n, &job_rx, &done_tx, redactor.as_ref());
    drop(done_tx);
    let mut add = |written: &mut Written,
                   path: String,
                   result: io::Result<FileRecord>|
     -> Result<(), BundleError> {
        let record = result.map_err(|source| BundleError::Write {
            path: zip_path.to_path_buf(),
            entry: path.clone(),
            source,
        })?;
        bytes_total += record.bytes;
        written.files.push(record);
        progress(Progress {
            phase: super::Phase::Collecting,
            files_done: written.files.len() as u64,
            files_expected: expected.load(std::sync::atomic::Ordering::Relaxed),
            bytes_written: bytes_total,
            current: path,
        });
        Ok(())
    };
    let mut in_flight = 0usize;
    let mut outcome = Ok(());
    'entries: while let Some(entry) = rx.blocking_recv() {
        // Copy in what the workers finished, so their queue keeps moving.
        while let Ok((path, part)) = done_rx.try_recv() {
            in_flight -= 1;
            let r = copy_part(&mut zip, part, &mut written);
            if let Err(e) = add(&mut written, path, r) {
                outcome = Err(e);
                break 'entries;
            }
        }
        let small = match &entry.body {
            Body::Bytes(b) => b.len() <= INLINE_MAX,
            Body::Spool { len, .. } => *len <= INLINE_MAX as u64,
        };
        if small || n <= 1 {
            let path = entry.path.clone();
            let r = write_entry(&mut zip, entry, redactor.as_deref(), &mut written);
            if let Err(e) = add(&mut written, path, r) {
                outcome = Err(e);
                break;
            }
            continue;
        }
        // Hand it to a worker; while every worker is busy, copy in what
        // they finish.
        let mut job = entry;
        loop {
            match job_tx.try_send(job) {
                Ok(()) => {
                    in_flight += 1;
                    break;
                }
                Err(std::sync::mpsc::TrySendError::Full(back)) => {
                    job = back;
                    let Ok((path, part)) = done_rx.recv() else {
                        break 'entries;
                    };
                    in_flight -= 1;
                    let r = copy_part(&mut zip, part, &mut written);
                    if let Err(e) = add(&mut written, path, r) {
                        outcome = Err(e);
                        break 'entries;
                    }
                }
                Err(std::sync::mpsc::TrySendError::Disconnected(_)) => break 'entries,
            }
        }
    }
    drop(job_tx);
    while in_flight > 0 {
        let Ok((path, part)) = done_rx.recv() else {
            break;
        };
        in_flight -= 1;
        if outcome.is_ok() {
            let r = copy_part(&mut zip, part, &mut written);
            outcome = add(&mut written, path, r);
        }
    }
    for t in pool {
        let _ = t.join();
    }
    outcome?;
    Ok((zip, written))
}

/// `n` threads that each take an entry from `jobs` and send it back to
/// `done` redacted and compressed (see [`compress_part`]).
fn spawn_workers(
    n: usize,
    jobs: &Arc<std::sync::Mutex<std::sync::mpsc::Receiver<Entry>>>,
    done: &std::sync::mpsc::SyncSender<(String, io::Result<Compressed>)>,
    redactor: Option<&Arc<Redactor>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let job_rx = jobs.clone();
            let done_tx = done.clone();
            let redactor = redactor.cloned();
            std::thread::spawn(move || {
                loop {
                    let job = job_rx
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .recv();
                    let Ok(entry) = job else { break };
                    let path = entry.path.clone();
                    let part = compress_part(entry, redactor.as_deref());
                    if done_tx.send((path, part)).is_err() {
                        break;
                    }
                }
            })
        })
        .collect()
}

/// A worker's job: the entry redacted and compressed into a one-file zip.
fn compress_part(entry: Entry, redactor: Option<&Redactor>) -> io::Result<Compressed> {
    let mut part = ZipWriter::new(tempfile::tempfile()?);
    let mut written = Written::default();
    let record = write_entry(&mut part, entry, redactor, &mut written)?;
    let part = part.finish().map_err(io::Error::other)?;
    let counts = written.redactions.into_values().next().unwrap_or_default();
    Ok(Compressed {
        part,
        record,
        counts,
    })
}

/// Copies a worker's entry into the bundle as it is (already compressed).
fn copy_part(
    zip: &mut ZipWriter<File>,
    part: io::Result<Compressed>,
    written: &mut Written,
) -> io::Result<FileRecord> {
    let Compressed {
        mut part,
        record,
        counts,
    } = part?;
    part.seek(SeekFrom::Start(0))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(part)).map_err(io::Error::other)?;
    let file = archive.by_index_raw(0).map_err(io::Error::other)?;
    zip.raw_copy_file(file).map_err(io::Error::other)?;
    if !counts.is_empty() {
        let e = written.redactions.entry(record.path.clone()).or_default();
        for (k, v) in counts {
            *e.entry(k).or_default() += v;
        }
    }
    Ok(record)
}

fn write_entry<W: Write + Seek>(
    zip: &mut ZipWriter<W>,
    entry: Entry,
    redactor: Option<&Redactor>,
    written: &mut Written,
) -> io::Result<FileRecord> {
    zip.start_file(entry.path.as_str(), options())
        .map_err(io::Error::other)?;
    let mut counting = Counting { inner: zip, n: 0 };
    let redactor = redactor.filter(|_| entry.redact);
    if !entry.counts.is_empty() {
        written
            .redactions
            .insert(entry.path.clone(), entry.counts.clone());
    }
    let (source_bytes, truncated) = match entry.body {
        Body::Bytes(bytes) => {
            let len = bytes.len() as u64;
            let start = match entry.cap {
                Some(cap) if len > cap => {
                    let from = (len - cap) as usize;
                    from + line_skip(&bytes[from..bytes.len().min(from + 64 * 1024)])
                }
                _ => 0,
            };
            let cut = (start > 0).then_some((start as u64, entry.cap.unwrap_or(0)));
            copy_through(
                &mut &bytes[start..],
                &mut counting,
                redactor,
                &entry.path,
                written,
                cut,
            )?;
            (len, cut.is_some())
        }
        Body::Spool { mut file, len } => {
            let start = match entry.cap {
                Some(cap) if len > cap => {
                    let from = len - cap;
                    file.seek(SeekFrom::Start(from))?;
                    let mut head = Vec::new();
                    (&mut file).take(64 * 1024).read_to_end(&mut head)?;
                    from + line_skip(&head) as u64
                }
                _ => 0,
            };
            file.seek(SeekFrom::Start(start))?;
            let cut = (start > 0).then_some((start, entry.cap.unwrap_or(0)));
            copy_through(
                &mut BufReader::with_capacity(64 * 1024, file),
                &mut counting,
                redactor,
                &entry.path,
                written,
                cut,
            )?;
            (len, cut.is_some())
        }
    };
    Ok(FileRecord {
        path: entry.path,
        source_bytes,
        bytes: counting.n,
        truncated,
    })
}

/// How many bytes to skip at a cut so that kept content starts at a line:
/// up to the first newline in `head`, or none when there is none (a cut
/// mid-line is better than losing a whole long line).
fn line_skip(head: &[u8]) -> usize {
    memchr::memchr(b'\n', head).map_or(0, |p| p + 1)
}

/// Bytes gathered before a redacted log goes to the deflater.
const OUT_BUF: usize = 64 * 1024;

fn copy_through(
    input: &mut impl Read,
    out: &mut impl Write,
    redactor: Option<&Redactor>,
    path: &str,
    written: &mut Written,
    cut: Option<(u64, u64)>,
) -> io::Result<()> {
    if let Some((omitted, cap)) = cut {
        writeln!(
            out,
            "[agentdeck bundle: the first {omitted} bytes of this log are left out; \
             the last {cap} bytes at most are kept (--max-bytes-per-log)]"
        )?;
    }
    match redactor {
        Some(r) => {
            // The redactor writes a log in many small pieces (the text
            // between two secrets, then each part of a placeholder); the
            // deflater and the CRC are much cheaper on large writes.
            let mut s = RedactStream::new(r, io::BufWriter::with_capacity(OUT_BUF, &mut *out));
            io::copy(input, &mut s)?;
            let (buffered, counts) = s.finish()?;
            buffered
                .into_inner()
                .map_err(io::IntoInnerError::into_error)?;
            if !counts.is_empty() {
                let e = written.redactions.entry(path.to_owned()).or_default();
                for (k, v) in counts {
                    *e.entry(k).or_default() += v;
                }
            }
        }
        None => {
            io::copy(input, out)?;
        }
    }
    Ok(())
}

struct Counting<'a, W: Write + Seek> {
    inner: &'a mut ZipWriter<W>,
    n: u64,
}

impl<W: Write + Seek> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Adds the last files (manifest, redaction report), closes the zip and
/// renames it to `target`.
pub fn finish(
    mut zip: ZipWriter<File>,
    last: Vec<(String, Vec<u8>)>,
    partial: &Path,
    target: &Path,
) -> Result<u64, BundleError> {
    let write_err = |entry: &str, source: io::Error| BundleError::Write {
        path: partial.to_path_buf(),
        entry: entry.to_owned(),
        source,
    };
    for (name, bytes) in last {
        zip.start_file(name.as_str(), options())
            .map_err(|e| write_err(&name, io::Error::other(e)))?;
        zip.write_all(&bytes).map_err(|e| write_err(&name, e))?;
    }
    let file = zip
        .finish()
        .map_err(|e| write_err("(central directory)", io::Error::other(e)))?;
    file.sync_all()
        .map_err(|e| write_err("(central directory)", e))?;
    let size = file
        .metadata()
        .map_err(|e| write_err("(central directory)", e))?
        .len();
    drop(file);
    std::fs::rename(partial, target).map_err(|source| BundleError::Rename {
        from: partial.to_path_buf(),
        to: target.to_path_buf(),
        source,
    })?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_starts_at_the_next_line() {
        assert_eq!(line_skip(b"two\nline three\n"), 4);
        assert_eq!(line_skip(b"no newline at all"), 0);
    }

    #[test]
    fn entries_are_dated_when_written() {
        let at: jiff::Zoned = "2026-11-27T21:05:43+00:00[UTC]".parse().expect("time");
        let t = zip_time(&at);
        assert_eq!(
            (
                t.year(),
                t.month(),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            ),
            (2026, 11, 27, 21, 5, 42)
        );
    }

    #[test]
    fn the_partial_file_is_hidden_beside_the_target() {
        let p = partial_path(Path::new("/tmp/x/b.zip"));
        assert_eq!(p.parent(), Some(Path::new("/tmp/x")));
        assert!(
            p.file_name()
                .expect("name")
                .to_string_lossy()
                .starts_with(".b.zip.partial-")
        );
    }
}
