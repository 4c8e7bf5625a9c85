//! Log lines held for the log view: a bounded ring buffer (the oldest lines
//! go once it is full, counted), lines sanitised and JSON made readable on
//! the way in, and only the lines on screen ever laid out.

use std::collections::VecDeque;

use super::text::{readable_json, sanitize};

/// One line as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// RFC 3339 timestamp the API gave, if any.
    pub time: Option<String>,
    pub text: String,
}

impl LogLine {
    /// A raw line from the API (`<RFC3339> text` with timestamps on); keeps
    /// lines that carry `prefix` only, with it stripped.
    pub fn parse(raw: &str, timestamps: bool, prefix: Option<&str>) -> Option<LogLine> {
        let (time, text) = split_time(raw, timestamps);
        let text = match prefix {
            Some(p) => text.strip_prefix(p)?,
            None => text,
        };
        let clean = sanitize(text);
        let text = readable_json(&clean).unwrap_or_else(|| clean.into_owned());
        Some(LogLine {
            time: time.map(str::to_owned),
            text,
        })
    }

    /// Whether [`LogLine::parse`] keeps `raw` (it carries `prefix`).
    pub fn kept_by(raw: &str, timestamps: bool, prefix: Option<&str>) -> bool {
        prefix.is_none_or(|p| split_time(raw, timestamps).1.starts_with(p))
    }
}

/// `raw` split into its RFC 3339 timestamp (with timestamps on) and text.
fn split_time(raw: &str, timestamps: bool) -> (Option<&str>, &str) {
    let raw = raw.strip_suffix('\r').unwrap_or(raw);
    if !timestamps {
        return (None, raw);
    }
    match raw.split_once(' ') {
        Some((t, rest)) if t.len() >= 20 && t.as_bytes()[4] == b'-' => (Some(t), rest),
        _ => (None, raw),
    }
}

/// One line of a log as the API sent it, bytes that are not UTF-8 shown as
/// U+FFFD: a task may print anything, and one bad byte must not end the
/// view (a text decoder that fails there would). The line break goes.
pub fn decode(raw: &[u8]) -> String {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    String::from_utf8_lossy(raw).into_owned()
}

/// The ring buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBuffer {
    lines: VecDeque<LogLine>,
    cap: usize,
    /// Lines dropped from the front since the view opened.
    pub dropped: u64,
}

/// Lines kept per log view by default (k9s keeps 5,000).
pub const DEFAULT_CAPACITY: usize = 5000;

impl Default for LogBuffer {
    fn default() -> Self {
        LogBuffer::with_capacity(DEFAULT_CAPACITY)
    }
}

impl LogBuffer {
    pub fn with_capacity(cap: usize) -> LogBuffer {
        LogBuffer {
            lines: VecDeque::with_capacity(cap.min(1024)),
            cap: cap.max(1),
            dropped: 0,
        }
    }

    pub fn push(&mut self, line: LogLine) {
        if self.lines.len() == self.cap {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(line);
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&LogLine> {
        self.lines.get(i)
    }

    pub fn clear(&mut self) {
        self.lines.clear();
        self.dropped = 0;
    }

    /// Index of the next line after `from` (wrapping) whose text matches.
    pub fn find(&self, re: &regex::Regex, from: usize, forward: bool) -> Option<usize> {
        let n = self.lines.len();
        if n == 0 {
            return None;
        }
        (1..=n)
            .map(|k| {
                if forward {
                    (from + k) % n
                } else {
                    (from + n * 2 - k) % n
                }
            })
            .find(|&i| re.is_match(&self.lines[i].text))
    }
}

/// Rows a line of `width` columns takes when wrapped.
pub fn wrapped_rows(text: &str, width: usize) -> usize {
    let w = unicode_width(text);
    if width == 0 || w == 0 {
        1
    } else {
        w.div_ceil(width)
    }
}

fn unicode_width(s: &str) -> usize {
    // Cheap and good enough for log text: one column per char.
    s.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_keeps_the_newest_lines_and_counts_the_rest() {
        let mut b = LogBuffer::with_capacity(3);
        for i in 0..5 {
            b.push(LogLine {
                time: None,
                text: format!("line {i}"),
            });
        }
        assert_eq!(b.len(), 3);
        assert_eq!(b.dropped, 2);
        assert_eq!(b.get(0).map(|l| l.text.as_str()), Some("line 2"));
    }

    #[test]
    fn lines_are_split_from_their_timestamp_filtered_by_prefix_and_cleaned() {
        let l = LogLine::parse(
            "2026-11-24T08:00:00.123Z [plan-1] hello \u{1b}[31mred",
            true,
            Some("[plan-1] "),
        )
        .expect("kept");
        assert_eq!(l.time.as_deref(), Some("2026-11-24T08:00:00.123Z"));
        assert_eq!(l.text, "hello red");
        assert_eq!(
            LogLine::parse("2026-11-24T08:00:00Z [other] x", true, Some("[plan-1] ")),
            None
        );
        let j = LogLine::parse(r#"{"level":"warn","msg":"slow"}"#, false, None).expect("kept");
        assert_eq!(j.text, "WARN slow");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_decoded_lossily_and_the_line_kept() {
        let cases: [(&[u8], &str); 6] = [
            (b"plain\n", "plain"),
            (b"crlf\r\n", "crlf"),
            (b"\xff\xfe\n", "\u{fffd}\u{fffd}"),
            (b"before \xc3 after", "before \u{fffd} after"),
            // A valid multi-byte character stays whole.
            ("caf\u{e9} \u{2713}\n".as_bytes(), "caf\u{e9} \u{2713}"),
            (b"", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(decode(raw), want, "{raw:?}");
        }
        // Through the view's parser: the prefix still selects the task's
        // line and the timestamp is still split off.
        let raw = decode(b"2026-11-24T08:00:00.1Z [t-1] \xff\xfe\xe2\x80\x8dx\n");
        assert!(LogLine::kept_by(&raw, true, Some("[t-1] ")));
        assert!(!LogLine::kept_by(&raw, true, Some("[t-2] ")));
        assert!(LogLine::kept_by(&raw, true, None));
        let l = LogLine::parse(&raw, true, Some("[t-1] ")).expect("kept");
        assert_eq!(l.time.as_deref(), Some("2026-11-24T08:00:00.1Z"));
        // The zero-width joiner (E2 80 8D) is gone, the bad bytes shown.
        assert_eq!(l.text, "\u{fffd}\u{fffd}x");
    }

    #[test]
    fn search_wraps_around_in_both_directions() {
        let mut b = LogBuffer::default();
        for t in ["a", "match 1", "b", "match 2"] {
            b.push(LogLine {
                time: None,
                text: t.into(),
            });
        }
        let re = regex::Regex::new("match").expect("re");
        assert_eq!(b.find(&re, 1, true), Some(3));
        assert_eq!(b.find(&re, 3, true), Some(1));
        assert_eq!(b.find(&re, 1, false), Some(3));
        assert_eq!(wrapped_rows("abcdefghij", 4), 3);
    }
}
