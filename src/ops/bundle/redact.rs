//! Redaction: one streaming pass per file over bytes.
//!
//! An Aho–Corasick automaton over every rule's keywords (and over the literal
//! secrets handed to the tool) runs once over the input; only the lines it
//! hits are given to the few regular expressions their keywords select. Each
//! match becomes `***REDACTED:<rule>:<hash>***`, where `<hash>` is a keyed
//! hash of the secret (the key is per bundle), so one secret can be followed
//! across files without being revealed.
//!
//! The input is bytes, not text: invalid UTF-8 and binary data pass through
//! untouched. Memory is bounded: the stream works on chunks that end at a
//! newline; a line longer than [`MAX_SEGMENT`] is cut at a separator (a
//! secret that straddles such a cut in a multi-megabyte line may be missed —
//! the one documented gap). PEM private keys span lines: the chunk is held
//! back until the END line arrives (at most [`PEM_MAX`] bytes), and their
//! body becomes one placeholder.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use regex::bytes::Regex;

/// Bytes gathered before a chunk is processed.
const CHUNK: usize = 256 * 1024;
/// A line longer than this without a newline is cut into segments.
pub const MAX_SEGMENT: usize = 1024 * 1024;
/// How far a PEM private key may run from BEGIN to END.
pub const PEM_MAX: usize = 64 * 1024;

/// How many matches each rule hid, by rule name.
pub type RedactionCounts = BTreeMap<&'static str, u64>;

/// What one rule looks for.
struct Rule {
    name: &'static str,
    /// Lower-case keywords, any of which selects the rule for a line.
    keywords: &'static [&'static str],
    regex: Regex,
    /// Capture group holding the secret (0: the whole match).
    group: usize,
    /// Capture group holding the variable name, checked with
    /// [`sensitive_name`] (key/value rules only).
    name_group: Option<usize>,
    /// The secret must look like a token, not a word (`basic settings`).
    token_like: bool,
}

/// Name of the rule for literal secrets handed to the tool.
pub const KNOWN_SECRET: &str = "known-secret";
/// Name of the rule for PEM private keys.
pub const PEM_RULE: &str = "pem-private-key";
/// Name of the rule for values under sensitive keys in objects.
pub const OBJECT_FIELD: &str = "object-field";

/// Words that make a variable, key or field name sensitive.
const SENSITIVE_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "api-key",
    "accesskey",
    "access_key",
    "access-key",
    "privatekey",
    "private_key",
    "private-key",
    "credential",
    "auth",
    "cookie",
    "session",
    "signature",
];

/// Suffixes that make a sensitive-looking name point at something that is
/// not itself a secret (`secretName`, `tokenSecretRef`, `passwordFile` …).
const HARMLESS_SUFFIXES: &[&str] = &[
    "name", "names", "ref", "file", "path", "dir", "seconds", "count", "limit", "type", "mode",
    "enabled", "url", "endpoint", "host", "expiry", "expires", "ttl", "length", "len", "format",
];

/// Whether a variable/key name says its value is a secret.
pub fn sensitive_name(name: &[u8]) -> bool {
    let lower: Vec<u8> = name
        .iter()
        .filter(|b| !matches!(b, b'"' | b'\''))
        .map(u8::to_ascii_lowercase)
        .collect();
    let Ok(lower) = std::str::from_utf8(&lower) else {
        return false;
    };
    if matches!(lower, "pwd" | "oldpwd") || lower.contains("authorization") {
        // The shell's working directory, in every `env` dump; and
        // `Authorization:`, whose scheme word the auth-header rule skips.
        return false;
    }
    if !SENSITIVE_WORDS.iter().any(|w| lower.contains(w)) {
        return false;
    }
    let tail = lower.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    !HARMLESS_SUFFIXES.iter().any(|s| {
        tail.ends_with(s)
            // `secret_name` and `tokenName` alike, but not `apiKeyname…`
            && !SENSITIVE_WORDS.contains(&tail)
    }) && !matches!(lower, "author" | "authors" | "authority" | "oauth")
}

/// Values that look like a placeholder or are empty, true/false/null:
/// nothing to hide.
fn trivial_value(v: &[u8]) -> bool {
    let v = trim_quotes(v);
    v.is_empty()
        || v.starts_with(b"***")
        || v.starts_with(b"${")
        || v.starts_with(b"$(")
        || v.starts_with(b"<")
        || v.eq_ignore_ascii_case(b"true")
        || v.eq_ignore_ascii_case(b"false")
        || v.eq_ignore_ascii_case(b"null")
        || v.eq_ignore_ascii_case(b"none")
        || v == b"{}"
        || v == b"[]"
        || v == b"|"
        || v == b">"
        || v == b"-"
}

/// A token has a digit, mixed case or punctuation; a word does not.
fn looks_like_token(v: &[u8]) -> bool {
    let digit = v.iter().any(u8::is_ascii_digit);
    let upper = v.iter().any(u8::is_ascii_uppercase);
    let lower = v.iter().any(u8::is_ascii_lowercase);
    let punct = v
        .iter()
        .any(|b| matches!(b, b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-'));
    digit || punct || (upper && lower)
}

fn trim_quotes(v: &[u8]) -> &[u8] {
    for q in [&b"\\\""[..], b"\"", b"'"] {
        if v.len() >= 2 * q.len() && v.starts_with(q) && v.ends_with(q) {
            return &v[q.len()..v.len() - q.len()];
        }
    }
    v
}

// A quoted value (either quote, JSON escapes allowed, also inside an escaped
// JSON string) or an unquoted one up to a separator.
const VALUE: &str =
    r#"("(?:[^"\\\n]|\\.)*"|\\"(?:[^"\\\n]|\\[^"\n])*\\"|'[^'\n]*'|[^\s"',;&}\]\)]+)"#;

fn rules() -> Vec<Rule> {
    let re = |s: &str| Regex::new(s).expect("built-in redaction pattern is valid");
    let name_word = r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials?|auth|cookie|session|signature)";
    vec![
        // ADO.NET/ODBC/JDBC-style connection strings and Azure keys in them.
        Rule {
            name: "connection-string",
            keywords: &[
                "password",
                "pwd",
                "user id",
                "uid",
                "accountkey",
                "sharedaccesskey",
            ],
            regex: re(
                r#"(?-u)(?i)(?:^|[;"'])[ \t]*(?:password|pwd|user id|uid|accountkey|sharedaccesskey)[ \t]*=[ \t]*([^;"'\s/][^;"'\s]*)"#,
            ),
            group: 1,
            name_group: None,
            token_like: false,
        },
        // `DB_PASSWORD=…`, `export API_TOKEN=…`, `password: …`, `"token": "…"`,
        // `client_secret=…&`, `--password=…`.
        Rule {
            name: "key-value",
            keywords: &[
                "pass",
                "pwd",
                "secret",
                "token",
                "key",
                "credential",
                "auth",
                "cookie",
                "session",
                "signature",
            ],
            regex: re(&format!(
                r#"(?-u)(?i)(\\?["']?[a-z0-9_.\-]*{name_word}[a-z0-9_.\-]*\\?["']?)[ \t]*(?:=|:|:=|=>)[ \t]*{VALUE}"#
            )),
            group: 2,
            name_group: Some(1),
            token_like: false,
        },
        // `{"name":"DB_PASSWORD","value":"…"}` (container env as JSON).
        Rule {
            name: "env-pair",
            keywords: &["\"value\""],
            regex: re(
                r#"(?-u)(?i)\\?"name\\?"[ \t]*:[ \t]*\\?"([^"\\]*)\\?"[ \t]*,[ \t]*\\?"value\\?"[ \t]*:[ \t]*\\?"((?:[^"\\\n]|\\[^"\n])*)\\?""#,
            ),
            group: 2,
            name_group: Some(1),
            token_like: false,
        },
        // `scheme://user:pass@host`.
        Rule {
            name: "url-credentials",
            keywords: &["://"],
            regex: re(r"(?-u)(?i)[a-z][a-z0-9+.\-]*://[^/\s:@]+:([^/\s@]+)@"),
            group: 1,
            name_group: None,
            token_like: false,
        },
        // `Authorization: Bearer …`, `Authorization: token …`, `Bearer …`.
        Rule {
            name: "auth-header",
            keywords: &["bearer", "basic", "authorization"],
            regex: re(
                r#"(?-u)(?i)(?:authorization\\?["']?[ \t]*[:=][ \t]*\\?["']?(?:(?:bearer|basic|token|digest|negotiate)[ \t]+)?|\b(?:bearer|basic)[ \t]+)([A-Za-z0-9._~+/=\-]{6,})"#,
            ),
            group: 1,
            name_group: None,
            token_like: true,
        },
        Rule {
            name: "jwt",
            keywords: &["eyj"],
            regex: re(r"(?-u)\beyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"),
            group: 0,
            name_group: None,
            token_like: false,
        },
        Rule {
            name: "aws-access-key",
            keywords: &["akia", "asia", "abia", "acca", "a3t"],
            regex: re(r"(?-u)\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),
            group: 0,
            name_group: None,
            token_like: false,
        },
        Rule {
            name: "gcp-key",
            keywords: &["aiza", "ya29."],
            regex: re(r"(?-u)\b(?:AIza[0-9A-Za-z_\-]{35}|ya29\.[0-9A-Za-z_\-]{20,})"),
            group: 0,
            name_group: None,
            token_like: false,
        },
        // Azure SAS signatures in URLs (`…&sig=…`).
        Rule {
            name: "azure-sas",
            keywords: &["sig="],
            regex: re(r"(?-u)(?i)[?&]sig=([A-Za-z0-9%+/=]{16,})"),
            group: 1,
            name_group: None,
            token_like: false,
        },
        Rule {
            name: "github-token",
            keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
            regex: re(r"(?-u)\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})"),
            group: 0,
            name_group: None,
            token_like: false,
        },
        Rule {
            name: "gitlab-token",
            keywords: &["glpat-"],
            regex: re(r"(?-u)\bglpat-[A-Za-z0-9_\-]{20,}"),
            group: 0,
            name_group: None,
            token_like: false,
        },
        Rule {
            name: "pulumi-token",
            keywords: &["pul-"],
            regex: re(r"(?-u)\bpul-[a-f0-9]{40}"),
            group: 0,
            name_group: None,
            token_like: false,
        },
        Rule {
            name: "terraform-token",
            keywords: &[".atlasv1."],
            regex: re(r"(?-u)\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{40,}"),
            group: 0,
            name_group: None,
            token_like: false,
        },
        Rule {
            name: "slack-token",
            keywords: &["xox"],
            regex: re(r"(?-u)\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
            group: 0,
            name_group: None,
            token_like: false,
        },
        Rule {
            name: PEM_RULE,
            keywords: &["private key"],
            regex: re(r"(?-u)-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"),
            group: 0,
            name_group: None,
            token_like: false,
        },
    ]
}

/// Shortest literal secret worth matching (shorter ones would hide common
/// words and numbers).
pub const MIN_LITERAL: usize = 6;

/// The compiled rules, shared by every stream of one bundle.
pub struct Redactor {
    rules: Vec<Rule>,
    matcher: AhoCorasick,
    /// Pattern id → rule index, or `None` for a literal secret.
    pattern_rule: Vec<Option<usize>>,
    pem: usize,
    key: ring::hmac::Key,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("rules", &self.rules.len())
            .field("patterns", &self.pattern_rule.len())
            .finish()
    }
}

/// One secret found in a chunk.
#[derive(Debug, Clone, Copy)]
struct Found {
    start: usize,
    end: usize,
    rule: &'static str,
}

impl Redactor {
    /// A redactor with the built-in rules, the given literal secrets (values
    /// handed to the tool: tokens, Secret values) and a random hash key.
    pub fn new(literals: &[Vec<u8>]) -> Redactor {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the system random source works");
        Redactor::with_key(literals, key)
    }

    /// A redactor whose placeholders are keyed with `key` (tests, benches).
    pub fn with_hash_key(literals: &[Vec<u8>], key: &[u8]) -> Redactor {
        Redactor::with_key(literals, ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key))
    }

    fn with_key(literals: &[Vec<u8>], key: ring::hmac::Key) -> Redactor {
        let rules = rules();
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut pattern_rule = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            for k in r.keywords {
                patterns.push(k.as_bytes().to_vec());
                pattern_rule.push(Some(i));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for l in literals {
            if l.len() >= MIN_LITERAL && seen.insert(l.clone()) {
                patterns.push(l.clone());
                pattern_rule.push(None);
            }
        }
        let matcher = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&patterns)
            .or_else(|_| {
                // Many literals can make the DFA too big; the NFA is slower
                // but takes any number.
                AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::Standard)
                    .build(&patterns)
            })
            .expect("keyword automaton builds");
        let pem = rules
            .iter()
            .position(|r| r.name == PEM_RULE)
            .expect("the PEM rule exists");
        Redactor {
            rules,
            matcher,
            pattern_rule,
            pem,
            key,
        }
    }

    /// Names of every rule, for reports.
    pub fn rule_names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.rules.iter().map(|r| r.name).collect();
        v.push(KNOWN_SECRET);
        v.push(OBJECT_FIELD);
        v
    }

    /// The placeholder for `secret` found by `rule`.
    pub fn placeholder(&self, rule: &str, secret: &[u8]) -> String {
        let tag = ring::hmac::sign(&self.key, secret);
        let h = tag.as_ref();
        format!(
            "***REDACTED:{rule}:{:02x}{:02x}{:02x}{:02x}{:02x}***",
            h[0], h[1], h[2], h[3], h[4]
        )
    }

    /// Redacts a whole buffer (small inputs, object fields).
    pub fn redact_bytes(&self, input: &[u8], counts: &mut RedactionCounts) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        let mut s = RedactStream::new(self, &mut out);
        // Writing into a Vec cannot fail.
        let _ = s.write_all(input);
        if let Ok((_, c)) = s.finish() {
            for (k, v) in c {
                *counts.entry(k).or_default() += v;
            }
        }
        out
    }

    /// Redacts a string (object fields); invalid UTF-8 cannot arise as
    /// placeholders are ASCII and cuts fall on ASCII bytes.
    pub fn redact_str(&self, input: &str, counts: &mut RedactionCounts) -> String {
        let out = self.redact_bytes(input.as_bytes(), counts);
        String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }

    /// Finds the secrets in `chunk`. `complete` says nothing follows the
    /// chunk's last line in this read (end of input, or a cut segment).
    /// Returns the matches and how many bytes of `chunk` may be written (less
    /// than its length when a PEM key began whose END has not arrived yet).
    fn scan(&self, chunk: &[u8], complete: bool, found: &mut Vec<Found>) -> usize {
        found.clear();
        let mut masks: Vec<(usize, usize, u64)> = Vec::new();
        for m in self.matcher.find_overlapping_iter(chunk) {
            match self.pattern_rule[m.pattern().as_usize()] {
                None => found.push(Found {
                    start: m.start(),
                    end: m.end(),
                    rule: KNOWN_SECRET,
                }),
                Some(rule) => {
                    let bit = 1u64 << rule;
                    if let Some(last) = masks.last_mut()
                        && m.start() >= last.0
                        && m.end() <= last.1
                    {
                        last.2 |= bit;
                        continue;
                    }
                    let start = memchr::memrchr(b'\n', &chunk[..m.start()]).map_or(0, |p| p + 1);
                    let end = memchr::memchr(b'\n', &chunk[m.start()..])
                        .map_or(chunk.len(), |p| m.start() + p);
                    masks.push((start, end, bit));
                }
            }
        }
        let mut limit = chunk.len();
        for &(start, end, mask) in &masks {
            if start >= limit {
                break;
            }
            let line = &chunk[start..end];
            for (i, rule) in self.rules.iter().enumerate() {
                if mask & (1u64 << i) == 0 {
                    continue;
                }
                if i == self.pem {
                    if let Some(held) = self.scan_pem(chunk, start, complete, found) {
                        limit = limit.min(held);
                    }
                    continue;
                }
                for caps in rule.regex.captures_iter(line) {
                    let Some(m) = caps.get(rule.group) else {
                        continue;
                    };
                    if let Some(g) = rule.name_group {
                        let name = caps.get(g).map_or(&b""[..], |n| n.as_bytes());
                        if !sensitive_name(name) {
                            continue;
                        }
                    }
                    let (mut s, mut e) = (m.start(), m.end());
                    // Keep the quotes around a value, hide what is inside.
                    let v = m.as_bytes();
                    if rule.name_group.is_some() {
                        let lead = (v.len() - trim_quotes(v).len()) / 2;
                        s += lead;
                        e -= lead;
                    }
                    if line[s..e].starts_with(b"***REDACTED")
                        || rule.name_group.is_some() && trivial_value(&line[s..e])
                    {
                        continue;
                    }
                    if rule.token_like && !looks_like_token(&line[s..e]) {
                        continue;
                    }
                    found.push(Found {
                        start: start + s,
                        end: start + e,
                        rule: rule.name,
                    });
                }
            }
        }
        limit
    }

    /// A PEM private key whose BEGIN is on the line at `line_start`: its body
    /// up to END is one match. Returns where to stop writing when END has not
    /// arrived yet and more input may bring it.
    fn scan_pem(
        &self,
        chunk: &[u8],
        line_start: usize,
        complete: bool,
        found: &mut Vec<Found>,
    ) -> Option<usize> {
        let rule = &self.rules[self.pem];
        let mut from = line_start;
        while let Some(b) = rule.regex.find_at(chunk, from) {
            let body_start = b.end();
            let line_end = memchr::memchr(b'\n', &chunk[from..]).map_or(chunk.len(), |p| from + p);
            if b.start() > line_end {
                return None;
            }
            let end_marker = memchr::memmem::find(&chunk[body_start..], b"-----END");
            match end_marker {
                Some(p) if p <= PEM_MAX => {
                    found.push(Found {
                        start: body_start,
                        end: body_start + p,
                        rule: PEM_RULE,
                    });
                    from = body_start + p + 1;
                }
                _ if !complete && chunk.len() - line_start < PEM_MAX && line_start > 0 => {
                    return Some(line_start);
                }
                _ if !complete && chunk.len() - line_start < PEM_MAX => {
                    // The key starts this chunk: ask for more input.
                    return Some(0);
                }
                _ => {
                    // No END within reach: hide up to PEM_MAX.
                    let end = chunk.len().min(body_start + PEM_MAX);
                    found.push(Found {
                        start: body_start,
                        end,
                        rule: PEM_RULE,
                    });
                    return None;
                }
            }
            if from >= chunk.len() {
                break;
            }
        }
        None
    }
}

/// A writer that redacts what goes through it into `W`.
pub struct RedactStream<'r, W: Write> {
    redactor: &'r Redactor,
    out: W,
    pending: Vec<u8>,
    found: Vec<Found>,
    counts: RedactionCounts,
    bytes_in: u64,
}

impl<'r, W: Write> RedactStream<'r, W> {
    /// Redacts into `out`.
    pub fn new(redactor: &'r Redactor, out: W) -> Self {
        RedactStream {
            redactor,
            out,
            pending: Vec::new(),
            found: Vec::new(),
            counts: RedactionCounts::new(),
            bytes_in: 0,
        }
    }

    /// Bytes written in so far.
    pub fn bytes_in(&self) -> u64 {
        self.bytes_in
    }

    /// Redacts `pending[..end]`, writes what may be written, keeps the rest.
    /// Returns whether anything was consumed.
    fn process(&mut self, end: usize, complete: bool) -> io::Result<bool> {
        let mut found = std::mem::take(&mut self.found);
        let chunk = &self.pending[..end];
        let mut limit = self.redactor.scan(chunk, complete, &mut found);
        if limit == 0 && end > 0 && (complete || end >= PEM_MAX) {
            limit = self.redactor.scan(chunk, true, &mut found);
        }
        found.retain(|f| f.start < limit);
        found.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        let mut at = 0;
        for f in &found {
            // A match that overlaps one already hidden hides what sticks out.
            let start = f.start.max(at);
            let f_end = f.end.min(limit);
            if f_end <= start {
                continue;
            }
            self.out.write_all(&chunk[at..start])?;
            let ph = self.redactor.placeholder(f.rule, &chunk[start..f_end]);
            self.out.write_all(ph.as_bytes())?;
            *self.counts.entry(f.rule).or_default() += 1;
            at = f_end;
        }
        self.out.write_all(&chunk[at..limit])?;
        self.found = found;
        self.pending.drain(..limit);
        Ok(limit > 0)
    }

    /// Processes whole chunks while enough is buffered.
    fn pump(&mut self, at_end: bool) -> io::Result<()> {
        loop {
            if self.pending.is_empty() || (!at_end && self.pending.len() < CHUNK) {
                return Ok(());
            }
            let (end, complete) = if at_end {
                (self.pending.len(), true)
            } else if let Some(nl) = memchr::memrchr(b'\n', &self.pending) {
                (nl + 1, false)
            } else if self.pending.len() >= MAX_SEGMENT {
                (safe_cut(&self.pending[..MAX_SEGMENT]), true)
            } else {
                return Ok(());
            };
            if !self.process(end, complete)? {
                if at_end || self.pending.len() >= MAX_SEGMENT + PEM_MAX {
                    // Cannot happen with complete=true; guard the loop anyway.
                    let all = self.pending.len();
                    self.process(all, true)?;
                }
                return Ok(());
            }
        }
    }

    /// Flushes what is buffered and returns the writer and the counts.
    pub fn finish(mut self) -> io::Result<(W, RedactionCounts)> {
        self.pump(true)?;
        self.out.flush()?;
        Ok((self.out, self.counts))
    }
}

impl<W: Write> Write for RedactStream<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        self.bytes_in += buf.len() as u64;
        self.pump(false)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Only whole chunks are written before finish(): a flush must not cut
        // a secret in two.
        self.out.flush()
    }
}

/// Where to cut a line that has no newline within [`MAX_SEGMENT`]: after
/// the last separator in its final 4 KiB, else at the end.
fn safe_cut(seg: &[u8]) -> usize {
    let window = seg.len().saturating_sub(4096);
    seg[window..]
        .iter()
        .rposition(|b| matches!(b, b',' | b';' | b'}' | b']' | b' ' | b'\t' | b'\r' | 0))
        .map_or(seg.len(), |p| window + p + 1)
}

/// A redactor shared between tasks.
pub type SharedRedactor = Arc<Redactor>;

#[cfg(test)]
mod tests;
