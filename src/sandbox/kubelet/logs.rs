//! Container logs as the kubelet keeps them: per container, the output of the
//! current and the previous instance, line by line with the time each line
//! was read, bounded in bytes; and the reading side of `GET …/log` with the
//! kubelet's option semantics (tail first, then since, then the byte limit,
//! which counts timestamp prefixes too).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use tokio::sync::{mpsc, watch};

use crate::sandbox::api::{LogOptions, LogStream};

/// Bytes kept per container, over its kept instances.
pub(super) const DEFAULT_LOG_LIMIT: usize = 10 * 1024 * 1024;

/// Instances kept per container: the current and the previous one.
const KEPT_INSTANCES: usize = 2;

#[derive(Debug, Clone)]
struct Line {
    at: Timestamp,
    /// With its `\n`, unless the process ended mid-line.
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct Instance {
    id: String,
    lines: VecDeque<Line>,
    /// Sequence number of `lines[0]` (lines dropped for the limit are gone).
    first_seq: u64,
    bytes: usize,
    closed: bool,
}

impl Instance {
    fn next_seq(&self) -> u64 {
        self.first_seq + self.lines.len() as u64
    }
}

#[derive(Debug)]
struct Inner {
    instances: VecDeque<Instance>,
    limit: usize,
}

/// One container's logs.
#[derive(Debug)]
pub(super) struct ContainerLogs {
    inner: Mutex<Inner>,
    /// Bumped on every change, for followers.
    version: watch::Sender<u64>,
}

impl ContainerLogs {
    /// Empty logs keeping at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        ContainerLogs {
            inner: Mutex::new(Inner {
                instances: VecDeque::new(),
                limit,
            }),
            version: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// A new instance starts (the oldest beyond the kept ones is forgotten).
    pub fn start_instance(&self, id: &str) {
        let mut g = self.lock();
        g.instances.push_back(Instance {
            id: id.to_string(),
            lines: VecDeque::new(),
            first_seq: 0,
            bytes: 0,
            closed: false,
        });
        while g.instances.len() > KEPT_INSTANCES {
            g.instances.pop_front();
        }
        drop(g);
        self.changed();
    }

    /// A line of instance `id`'s output, read at `at`.
    pub fn append(&self, id: &str, at: Timestamp, bytes: Vec<u8>) {
        let mut g = self.lock();
        let limit = g.limit;
        let Some(inst) = g.instances.iter_mut().find(|i| i.id == id) else {
            return;
        };
        inst.bytes += bytes.len();
        inst.lines.push_back(Line { at, bytes });
        let mut total: usize = g.instances.iter().map(|i| i.bytes).sum();
        // Oldest output goes first: the previous instance, then the current one's start.
        while total > limit {
            let Some(inst) = g.instances.iter_mut().find(|i| !i.lines.is_empty()) else {
                break;
            };
            if let Some(l) = inst.lines.pop_front() {
                inst.first_seq += 1;
                inst.bytes -= l.bytes.len();
                total -= l.bytes.len();
            }
        }
        drop(g);
        self.changed();
    }

    /// Instance `id` has ended: followers stop after its last line.
    pub fn close(&self, id: &str) {
        let mut g = self.lock();
        if let Some(inst) = g.instances.iter_mut().find(|i| i.id == id) {
            inst.closed = true;
        }
        drop(g);
        self.changed();
    }

    /// Whether the output of instance `id` is still kept.
    #[cfg(test)]
    pub fn has(&self, id: &str) -> bool {
        self.lock().instances.iter().any(|i| i.id == id)
    }

    /// The log of instance `id` as `opts` ask, read at `now`.
    pub fn read(self: &Arc<Self>, id: &str, opts: &LogOptions, now: Timestamp) -> LogStream {
        let since = opts.since_seconds.and_then(|s| {
            now.checked_sub(jiff::SignedDuration::from_secs(
                i64::try_from(s).unwrap_or(i64::MAX),
            ))
            .ok()
        });
        let (mut out, next, closed) = {
            let g = self.lock();
            let Some(inst) = g.instances.iter().find(|i| i.id == id) else {
                return LogStream::Done(Vec::new());
            };
            let skip = match opts.tail_lines {
                Some(n) => inst.lines.len().saturating_sub(n),
                None => 0,
            };
            let mut out = Vec::new();
            for line in inst.lines.iter().skip(skip) {
                if since.is_some_and(|s| line.at < s) {
                    continue;
                }
                format_line(&mut out, line, opts.timestamps);
            }
            (out, inst.next_seq(), inst.closed)
        };
        let mut remaining = opts.limit_bytes;
        if let Some(limit) = remaining {
            out.truncate(limit);
            remaining = Some(limit - out.len());
        }
        if !opts.follow || closed || remaining == Some(0) {
            return LogStream::Done(out);
        }
        let (tx, rx) = mpsc::channel(64);
        let follower = Follower {
            logs: self.clone(),
            id: id.to_string(),
            next,
            remaining,
            timestamps: opts.timestamps,
            tx,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(follower.run());
                LogStream::Follow(out, rx)
            }
            Err(_) => LogStream::Done(out),
        }
    }
}

fn format_line(out: &mut Vec<u8>, line: &Line, timestamps: bool) {
    if timestamps {
        // Go's RFC3339Nano: trailing zeros of the fraction trimmed, as jiff prints.
        out.extend_from_slice(line.at.to_string().as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(&line.bytes);
}

/// Streams new lines of one instance until it ends, the byte limit is
/// reached or the reader goes away.
struct Follower {
    logs: Arc<ContainerLogs>,
    id: String,
    next: u64,
    remaining: Option<usize>,
    timestamps: bool,
    tx: mpsc::Sender<Vec<u8>>,
}

impl Follower {
    async fn run(mut self) {
        let mut version = self.logs.version.subscribe();
        loop {
            version.borrow_and_update();
            let (mut chunk, closed) = {
                let g = self.logs.lock();
                let Some(inst) = g.instances.iter().find(|i| i.id == self.id) else {
                    return;
                };
                let from = self.next.max(inst.first_seq);
                let skip = usize::try_from(from - inst.first_seq).unwrap_or(usize::MAX);
                let mut chunk = Vec::new();
                for line in inst.lines.iter().skip(skip) {
                    format_line(&mut chunk, line, self.timestamps);
                }
                self.next = inst.next_seq();
                (chunk, inst.closed)
            };
            if let Some(r) = self.remaining {
                chunk.truncate(r);
                self.remaining = Some(r - chunk.len());
            }
            if !chunk.is_empty() && self.tx.send(chunk).await.is_err() {
                return;
            }
            if closed || self.remaining == Some(0) {
                return;
            }
            tokio::select! {
                changed = version.changed() => if changed.is_err() { return },
                () = self.tx.closed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::new(1_700_000_000 + secs, 500_000_000).expect("valid time")
    }

    fn logs_with(lines: &[(&str, i64)]) -> Arc<ContainerLogs> {
        let logs = Arc::new(ContainerLogs::new(DEFAULT_LOG_LIMIT));
        logs.start_instance("c1");
        for (l, t) in lines {
            logs.append("c1", at(*t), format!("{l}\n").into_bytes());
        }
        logs
    }

    fn done(s: LogStream) -> String {
        match s {
            LogStream::Done(b) => String::from_utf8(b).expect("utf-8"),
            LogStream::Follow(..) => panic!("expected a finished stream"),
        }
    }

    #[test]
    fn tail_lines_keeps_the_last_lines() {
        let logs = logs_with(&[("a", 0), ("b", 1), ("c", 2)]);
        let opts = LogOptions {
            tail_lines: Some(2),
            ..LogOptions::default()
        };
        assert_eq!(done(logs.read("c1", &opts, at(3))), "b\nc\n");
        let opts = LogOptions {
            tail_lines: Some(0),
            ..LogOptions::default()
        };
        assert_eq!(done(logs.read("c1", &opts, at(3))), "");
        let opts = LogOptions {
            tail_lines: Some(10),
            ..LogOptions::default()
        };
        assert_eq!(done(logs.read("c1", &opts, at(3))), "a\nb\nc\n");
    }

    #[test]
    fn since_seconds_drops_older_lines() {
        let logs = logs_with(&[("old", 0), ("new", 100)]);
        let opts = LogOptions {
            since_seconds: Some(10),
            ..LogOptions::default()
        };
        assert_eq!(done(logs.read("c1", &opts, at(105))), "new\n");
    }

    #[test]
    fn limit_bytes_cuts_the_output_including_timestamps() {
        let logs = logs_with(&[("hello", 0), ("world", 1)]);
        let opts = LogOptions {
            limit_bytes: Some(8),
            ..LogOptions::default()
        };
        assert_eq!(done(logs.read("c1", &opts, at(2))), "hello\nwo");
        let opts = LogOptions {
            limit_bytes: Some(10),
            timestamps: true,
            ..LogOptions::default()
        };
        assert_eq!(done(logs.read("c1", &opts, at(2))), "2023-11-14");
    }

    #[test]
    fn timestamps_prefix_each_line_in_rfc3339_nano() {
        let logs = logs_with(&[("a", 0)]);
        let opts = LogOptions {
            timestamps: true,
            ..LogOptions::default()
        };
        assert_eq!(
            done(logs.read("c1", &opts, at(1))),
            "2023-11-14T22:13:20.5Z a\n"
        );
    }

    #[test]
    fn only_the_current_and_previous_instances_are_kept() {
        let logs = logs_with(&[("first", 0)]);
        logs.start_instance("c2");
        assert!(logs.has("c1"));
        logs.start_instance("c3");
        assert!(!logs.has("c1"));
        assert!(logs.has("c2") && logs.has("c3"));
    }

    #[test]
    fn the_byte_limit_drops_the_oldest_output_first() {
        let logs = Arc::new(ContainerLogs::new(10));
        logs.start_instance("c1");
        logs.append("c1", at(0), b"1234\n".to_vec());
        logs.start_instance("c2");
        logs.append("c2", at(1), b"abcd\n".to_vec());
        logs.append("c2", at(2), b"efgh\n".to_vec());
        let all = LogOptions::default();
        assert_eq!(done(logs.read("c1", &all, at(3))), "");
        assert_eq!(done(logs.read("c2", &all, at(3))), "abcd\nefgh\n");
        logs.append("c2", at(3), b"ijkl\n".to_vec());
        assert_eq!(done(logs.read("c2", &all, at(3))), "efgh\nijkl\n");
    }

    #[tokio::test]
    async fn follow_streams_new_lines_until_the_instance_ends() {
        let logs = logs_with(&[("a", 0)]);
        let opts = LogOptions {
            follow: true,
            ..LogOptions::default()
        };
        let LogStream::Follow(first, mut rx) = logs.read("c1", &opts, at(1)) else {
            panic!("expected a follow stream");
        };
        assert_eq!(first, b"a\n");
        logs.append("c1", at(2), b"b\n".to_vec());
        let next = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("in time");
        assert_eq!(next.as_deref(), Some(&b"b\n"[..]));
        logs.append("c1", at(3), b"c\n".to_vec());
        logs.close("c1");
        let mut rest = Vec::new();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("in time")
        {
            rest.extend(chunk);
        }
        assert_eq!(rest, b"c\n");
    }

    #[tokio::test]
    async fn follow_of_a_finished_instance_is_just_its_output() {
        let logs = logs_with(&[("a", 0)]);
        logs.close("c1");
        let opts = LogOptions {
            follow: true,
            ..LogOptions::default()
        };
        assert_eq!(done(logs.read("c1", &opts, at(1))), "a\n");
    }

    #[tokio::test]
    async fn follow_stops_at_the_byte_limit() {
        let logs = logs_with(&[("abc", 0)]);
        let opts = LogOptions {
            follow: true,
            limit_bytes: Some(6),
            ..LogOptions::default()
        };
        let LogStream::Follow(first, mut rx) = logs.read("c1", &opts, at(1)) else {
            panic!("expected a follow stream");
        };
        assert_eq!(first, b"abc\n");
        logs.append("c1", at(2), b"defg\n".to_vec());
        let mut rest = Vec::new();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("in time")
        {
            rest.extend(chunk);
        }
        assert_eq!(rest, b"de");
    }
}
