//! Redaction: one streaming pass per file over bytes.
//!
//! An Aho–Corasick automaton over every rule's keywords (and over the literal
//! secrets handed to the tool) runs once over the input; only the lines it
//! hits are given to the few regular expressions their keywords select. Each
//! match becomes `***REDACTED:<rule>:<hash>***`, where `<hash>` is a keyed
//! hash of the secret, so one secret can be followed across files without
//! being revealed. The key is the namespace's redaction key when there is
//! one ([`crate::plan::redaction_key`]: the controller's kept log tails and
//! the bundle then agree), else a random one per redactor. A placeholder
//! already in the input whose hash is that of a literal secret is relabelled
//! `known-secret` ([`Redactor::relabel_known`]): the controller, which knows
//! no Secret values, hid `password=<a Secret's value>` by pattern, and the
//! bundle, which knows them, hides the same value in a live log as a known
//! secret.
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

use aho_corasick::{AhoCorasick, MatchKind};
use regex::bytes::Regex;

/// Secrets whose hash a stream remembers.
const HASH_CACHE: usize = 4096;
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
    /// Finds the name and secret groups in a whole match by hand, exactly
    /// as the regex's captures would: a capture search costs a second
    /// pass over every match, which dominated on logs with a secret on
    /// every line.
    split: Option<Split>,
}

impl Rule {
    /// The rule's secrets in `line` (at `offset` in its chunk), with one
    /// set of capture slots `locs` for every match.
    fn scan_line(
        &self,
        locs: &mut regex::bytes::CaptureLocations,
        line: &[u8],
        offset: usize,
        found: &mut Vec<Found>,
    ) {
        let mut at = 0;
        while at <= line.len() {
            let Some((whole, groups)) = self.next_match(locs, line, at) else {
                break;
            };
            at = if whole.end > whole.start {
                whole.end
            } else {
                whole.end + 1
            };
            if let Some((s, e)) = groups.and_then(|g| self.secret_in(line, g)) {
                found.push(Found {
                    start: offset + s,
                    end: offset + e,
                    rule: self.name,
                });
            }
        }
    }

    /// The next match in `line` from `at`: its range, and the ranges of its
    /// name and secret groups when they took part.
    fn next_match(
        &self,
        locs: &mut regex::bytes::CaptureLocations,
        line: &[u8],
        at: usize,
    ) -> Option<(std::ops::Range<usize>, Option<SplitRanges>)> {
        match self.split {
            Some(split) => {
                let w = self.regex.find_at(line, at)?;
                let g = split(w.as_bytes()).map(|((ns, ne), (vs, ve))| {
                    let o = w.start();
                    ((o + ns, o + ne), (o + vs, o + ve))
                });
                Some((w.range(), g))
            }
            None => {
                let w = self.regex.captures_read_at(locs, line, at)?;
                let name = self.name_group.and_then(|g| locs.get(g)).unwrap_or((0, 0));
                Some((w.range(), locs.get(self.group).map(|v| (name, v))))
            }
        }
    }

    /// What of a match's secret group is to be hidden (the inside of a
    /// quoted value), or `None` when the match is no secret: an insensitive
    /// name, a placeholder already, a trivial value, or not token-like.
    fn secret_in(&self, line: &[u8], ((ns, ne), (ms, me)): SplitRanges) -> Option<(usize, usize)> {
        if self.name_group.is_some() && !sensitive_name(&line[ns..ne]) {
            return None;
        }
        let (mut s, mut e) = (ms, me);
        // Keep the quotes around a value, hide what is inside.
        let v = &line[ms..me];
        if self.name_group.is_some() {
            let lead = (v.len() - trim_quotes(v).len()) / 2;
            s += lead;
            e -= lead;
        }
        if line[s..e].starts_with(b"***REDACTED")
            || self.name_group.is_some() && trivial_value(&line[s..e])
        {
            return None;
        }
        if self.token_like && !looks_like_token(&line[s..e]) {
            return None;
        }
        Some((s, e))
    }
}

/// `(name, secret)` byte ranges within a match or a line.
type SplitRanges = ((usize, usize), (usize, usize));

/// `(name, secret)` byte ranges within a match.
type Split = fn(&[u8]) -> Option<((usize, usize), (usize, usize))>;

/// The key-value rule's groups: the name runs up to the first blank or
/// separator (it cannot contain either); the separator is one `=` or `:`
/// (the regex's leftmost-first alternation always prefers the one-byte
/// branch, as a value may begin with `=` or `>`); blanks follow; the value
/// is the rest of the match.
fn split_key_value(m: &[u8]) -> Option<((usize, usize), (usize, usize))> {
    let name_end = m
        .iter()
        .position(|b| matches!(b, b' ' | b'\t' | b'=' | b':'))?;
    let sep = name_end
        + m[name_end..]
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t'))?;
    if !matches!(m[sep], b'=' | b':') {
        return None;
    }
    let value = sep
        + 1
        + m[sep + 1..]
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t'))?;
    Some(((0, name_end), (value, m.len())))
}

/// Name of the rule for literal secrets handed to the tool.
pub const KNOWN_SECRET: &str = "known-secret";
/// Name of the rule for literal values added to a bundle already taken
/// (`agentdeck bundle redact --literal-file`).
pub const LITERAL_RULE: &str = "literal";
/// Name of the rule for patterns added to a bundle already taken
/// (`agentdeck bundle redact --regex`).
pub const REGEX_RULE: &str = "regex";
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
    // A Service's `sessionAffinity` (None or ClientIP).
    "affinity",
];

/// Whether a variable/key name says its value is a secret.
pub fn sensitive_name(name: &[u8]) -> bool {
    // On the stack: this runs once per candidate match.
    let mut buf = [0u8; 128];
    let mut n = 0;
    for b in name.iter().filter(|b| !matches!(b, b'"' | b'\'' | b'\\')) {
        if n == buf.len() {
            break;
        }
        buf[n] = b.to_ascii_lowercase();
        n += 1;
    }
    let Ok(lower) = std::str::from_utf8(&buf[..n]) else {
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
pub(crate) fn trivial_value(v: &[u8]) -> bool {
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

/// A token has a digit, mixed case or punctuation; a word does not, nor
/// does an authorization scheme (`Bearer` before a token hidden already).
fn looks_like_token(v: &[u8]) -> bool {
    if [&b"bearer"[..], b"basic", b"token", b"digest", b"negotiate"]
        .iter()
        .any(|w| v.eq_ignore_ascii_case(w))
    {
        return false;
    }
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
                r#"(?-u)(?i)(?m)(?:^|[;"'])[ \t]*(?:password|pwd|user id|uid|accountkey|sharedaccesskey)[ \t]*=[ \t]*([^;"'\s/][^;"'\s]*)"#,
            ),
            group: 1,
            name_group: None,
            token_like: false,
            split: None,
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
            split: Some(split_key_value),
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
            split: None,
        },
        // `scheme://user:pass@host`.
        Rule {
            name: "url-credentials",
            keywords: &["://"],
            regex: re(r"(?-u)(?i)[a-z][a-z0-9+.\-]*://[^/\s:@]+:([^/\s@]+)@"),
            group: 1,
            name_group: None,
            token_like: false,
            split: None,
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
            split: None,
        },
        Rule {
            name: "jwt",
            keywords: &["eyj"],
            regex: re(r"(?-u)\beyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
        Rule {
            name: "aws-access-key",
            keywords: &["akia", "asia", "abia", "acca", "a3t"],
            regex: re(r"(?-u)\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
        Rule {
            name: "gcp-key",
            keywords: &["aiza", "ya29."],
            regex: re(r"(?-u)\b(?:AIza[0-9A-Za-z_\-]{35}|ya29\.[0-9A-Za-z_\-]{20,})"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
        // Azure SAS signatures in URLs (`…&sig=…`).
        Rule {
            name: "azure-sas",
            keywords: &["sig="],
            regex: re(r"(?-u)(?i)[?&]sig=([A-Za-z0-9%+/=]{16,})"),
            group: 1,
            name_group: None,
            token_like: false,
            split: None,
        },
        Rule {
            name: "github-token",
            keywords: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
            regex: re(r"(?-u)\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
        Rule {
            name: "gitlab-token",
            keywords: &["glpat-"],
            regex: re(r"(?-u)\bglpat-[A-Za-z0-9_\-]{20,}"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
        Rule {
            name: "pulumi-token",
            keywords: &["pul-"],
            regex: re(r"(?-u)\bpul-[a-f0-9]{40}"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
        Rule {
            name: "terraform-token",
            keywords: &[".atlasv1."],
            regex: re(r"(?-u)\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{40,}"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
        Rule {
            name: "slack-token",
            keywords: &["xox"],
            regex: re(r"(?-u)\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
        Rule {
            name: PEM_RULE,
            keywords: &["private key"],
            regex: re(r"(?-u)-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"),
            group: 0,
            name_group: None,
            token_like: false,
            split: None,
        },
    ]
}

/// How many matches each rule hid, most first, as a report prints it
/// (`12 × literal, 3 × aws-access-key, 1 × jwt`); `nothing` for none.
/// Counts only: never a value.
pub fn describe_counts(counts: &RedactionCounts) -> String {
    let mut rows: Vec<(&str, u64)> = counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| (*k, *n))
        .collect();
    if rows.is_empty() {
        return "nothing".into();
    }
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    rows.iter()
        .map(|(k, n)| format!("{n} \u{d7} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Shortest literal secret worth matching (shorter ones would hide common
/// words and numbers).
pub const MIN_LITERAL: usize = 6;

/// The compiled rules, shared by every stream of one bundle.
pub struct Redactor {
    rules: Vec<Rule>,
    /// Every rule's keywords, lower-case, longest first, searched
    /// leftmost-first in a lower-cased copy of the input (case-sensitive
    /// automata keep their SIMD prefilter; case-insensitive ones lose it and
    /// run four times slower).
    keywords: AhoCorasick,
    /// Keyword id → the rules it selects: its own and those of every
    /// keyword it contains (a leftmost-first match hides the shorter ones).
    keyword_rules: Vec<u64>,
    /// The literal secrets, lower-case, longest first.
    literals: Option<AhoCorasick>,
    /// The rule name literal matches are hidden under.
    literal_rule: &'static str,
    /// Patterns given by the user, each run on every line.
    patterns: Vec<Regex>,
    /// The PEM rule's index (none without the built-in rules).
    pem: Option<usize>,
    key: ring::hmac::Key,
    /// The hashes of the literal secrets, as given (see [`Self::relabel_known`]).
    known: std::collections::HashSet<[u8; 10]>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("rules", &self.rules.len())
            .field("keywords", &self.keyword_rules.len())
            .field(
                "literals",
                &self.literals.as_ref().map_or(0, AhoCorasick::patterns_len),
            )
            .field("patterns", &self.patterns.len())
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

    /// A redactor whose placeholders are keyed with `key`: the namespace's
    /// redaction key ([`crate::plan::redaction_key`]), shared by whoever
    /// must agree on placeholders; fixed keys in tests and benches.
    pub fn with_hash_key(literals: &[Vec<u8>], key: &[u8]) -> Redactor {
        Redactor::with_key(literals, ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key))
    }

    /// A redactor of only the rules someone adds to a bundle already taken
    /// (`agentdeck bundle redact`): `literals` hidden as [`LITERAL_RULE`]
    /// and `patterns` as [`REGEX_RULE`], each pattern run on every line
    /// (`^` and `$` are a line's ends; a match never spans lines). No
    /// built-in rule runs: what they hide was hidden when the bundle was
    /// taken. The hash key is random, its own.
    pub fn with_added_rules(literals: &[Vec<u8>], patterns: Vec<Regex>) -> Redactor {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the system random source works");
        Redactor::with_added_rules_keyed(literals, patterns, key)
    }

    /// [`Redactor::with_added_rules`] with a fixed hash key (tests).
    pub fn with_added_rules_and_key(
        literals: &[Vec<u8>],
        patterns: Vec<Regex>,
        key: &[u8],
    ) -> Redactor {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
        Redactor::with_added_rules_keyed(literals, patterns, key)
    }

    fn with_added_rules_keyed(
        literals: &[Vec<u8>],
        patterns: Vec<Regex>,
        key: ring::hmac::Key,
    ) -> Redactor {
        let mut r = Redactor::build(literals, key, Vec::new());
        r.literal_rule = LITERAL_RULE;
        r.patterns = patterns;
        r
    }

    fn with_key(literals: &[Vec<u8>], key: ring::hmac::Key) -> Redactor {
        Redactor::build(literals, key, rules())
    }

    fn build(literals_in: &[Vec<u8>], key: ring::hmac::Key, rules: Vec<Rule>) -> Redactor {
        let literals = literals_in;
        let mut words: Vec<&'static str> = rules
            .iter()
            .flat_map(|r| r.keywords.iter().copied())
            .collect();
        words.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        words.dedup();
        let keyword_rules: Vec<u64> = words
            .iter()
            .map(|w| {
                rules
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.keywords.iter().any(|k| w.contains(k)))
                    .fold(0u64, |m, (i, _)| m | (1u64 << i))
            })
            .collect();
        let keywords = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .build(&words)
            .expect("keyword automaton builds");
        let mut lits: Vec<Vec<u8>> = literals
            .iter()
            .filter(|l| l.len() >= MIN_LITERAL)
            .map(|l| l.to_ascii_lowercase())
            .collect();
        lits.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        lits.dedup();
        let literals = (!lits.is_empty()).then(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostFirst)
                .build(&lits)
                .expect("literal automaton builds")
        });
        let pem = rules.iter().position(|r| r.name == PEM_RULE);
        let mut redactor = Redactor {
            rules,
            keywords,
            keyword_rules,
            literals,
            literal_rule: KNOWN_SECRET,
            patterns: Vec::new(),
            pem,
            key,
            known: std::collections::HashSet::new(),
        };
        redactor.known = literals_in
            .iter()
            .filter(|l| l.len() >= MIN_LITERAL)
            .map(|l| redactor.hash(l))
            .collect();
        redactor
    }

    /// Relabels the placeholders already in `input` whose hash is that of a
    /// literal secret as `known-secret`, the placeholder this redactor gives
    /// the value itself: a kept log tail redacted by the controller (which
    /// knows no Secret values and hid `password=<value>` by pattern) then
    /// agrees with a live log in which the bundle found the value. Only
    /// meaningful when both were keyed with the same key
    /// ([`crate::plan::redaction_key`]); other placeholders pass unchanged.
    pub fn relabel_known(&self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        let mut at = 0;
        for (start, end) in placeholder_spans(input) {
            let body = &input[start + PLACEHOLDER_OPEN.len()..end - 3];
            let known = body
                .iter()
                .rposition(|b| *b == b':')
                .and_then(|p| <[u8; 10]>::try_from(&body[p + 1..]).ok())
                .is_some_and(|h| self.known.contains(&h));
            out.extend_from_slice(&input[at..start]);
            if known {
                out.extend_from_slice(PLACEHOLDER_OPEN);
                out.extend_from_slice(KNOWN_SECRET.as_bytes());
                out.push(b':');
                out.extend_from_slice(&body[body.len() - 10..]);
                out.extend_from_slice(b"***");
            } else {
                out.extend_from_slice(&input[start..end]);
            }
            at = end;
        }
        out.extend_from_slice(&input[at..]);
        out
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
        let hash = self.hash(secret);
        format!(
            "***REDACTED:{rule}:{}***",
            std::str::from_utf8(&hash).unwrap_or_default()
        )
    }

    /// The keyed hash of a secret, as 10 hex digits.
    fn hash(&self, secret: &[u8]) -> [u8; 10] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let tag = ring::hmac::sign(&self.key, secret);
        let mut out = [0u8; 10];
        for (i, b) in tag.as_ref()[..5].iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 15)];
        }
        out
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
    fn scan(
        &self,
        chunk: &[u8],
        lower: &mut Vec<u8>,
        complete: bool,
        found: &mut Vec<Found>,
    ) -> usize {
        found.clear();
        lower.clear();
        lower.extend_from_slice(chunk);
        lower.make_ascii_lowercase();
        self.scan_literals(lower, found);
        let masks = self.keyword_spans(chunk, lower);
        let mut limit = chunk.len();
        // One set of capture slots per rule for the whole chunk (making them
        // per line cost as much as a short search).
        let mut slots: Vec<Option<regex::bytes::CaptureLocations>> =
            self.rules.iter().map(|_| None).collect();
        for &(start, end, mask) in &masks {
            if start >= limit {
                break;
            }
            let line = &chunk[start..end];
            for (i, rule) in self.rules.iter().enumerate() {
                if mask & (1u64 << i) == 0 {
                    continue;
                }
                if Some(i) == self.pem {
                    if let Some(held) = self.scan_pem(chunk, (start, end), complete, found) {
                        limit = limit.min(held);
                    }
                    continue;
                }
                // One set of capture slots for every match (captures_iter
                // allocates per match, which dominates on dense input).
                let locs = slots[i].get_or_insert_with(|| rule.regex.capture_locations());
                rule.scan_line(locs, line, start, found);
            }
        }
        self.scan_patterns(&chunk[..limit], found);
        limit
    }

    /// The literal secrets in `lower` (the chunk in lower case).
    fn scan_literals(&self, lower: &[u8], found: &mut Vec<Found>) {
        if let Some(lits) = &self.literals {
            for m in lits.find_iter(lower) {
                found.push(Found {
                    start: m.start(),
                    end: m.end(),
                    rule: self.literal_rule,
                });
            }
        }
    }

    /// The spans of `chunk` with keywords (found in `lower`, the chunk in
    /// lower case): whole lines, each with the bits of the rules its
    /// keywords select.
    fn keyword_spans(&self, chunk: &[u8], lower: &[u8]) -> Vec<(usize, usize, u64)> {
        let mut masks: Vec<(usize, usize, u64)> = Vec::new();
        for m in self.keywords.find_iter(lower) {
            let bits = self.keyword_rules[m.pattern().as_usize()];
            if let Some(last) = masks.last_mut()
                && m.start() >= last.0
                && m.end() <= last.1
            {
                last.2 |= bits;
                continue;
            }
            let start = memchr::memrchr(b'\n', &chunk[..m.start()]).map_or(0, |p| p + 1);
            let end =
                memchr::memchr(b'\n', &chunk[m.start()..]).map_or(chunk.len(), |p| m.start() + p);
            // Consecutive lines with keywords become one span: one regex
            // run over many lines costs far less than one per line.
            if let Some(last) = masks.last_mut()
                && start == last.1 + 1
                && end - last.0 <= 64 * 1024
            {
                last.1 = end;
                last.2 |= bits;
                continue;
            }
            masks.push((start, end, bits));
        }
        masks
    }

    /// The user's patterns, line by line.
    fn scan_patterns(&self, chunk: &[u8], found: &mut Vec<Found>) {
        if self.patterns.is_empty() {
            return;
        }
        let mut start = 0;
        while start < chunk.len() {
            let end = memchr::memchr(b'\n', &chunk[start..]).map_or(chunk.len(), |p| start + p);
            let line = &chunk[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            for re in &self.patterns {
                for m in re.find_iter(line).filter(|m| !m.is_empty()) {
                    found.push(Found {
                        start: start + m.start(),
                        end: start + m.end(),
                        rule: REGEX_RULE,
                    });
                }
            }
            start = end + 1;
        }
    }

    /// A PEM private key whose BEGIN is on the line at `line_start`: its body
    /// up to END is one match. Returns where to stop writing when END has not
    /// arrived yet and more input may bring it.
    fn scan_pem(
        &self,
        chunk: &[u8],
        span: (usize, usize),
        complete: bool,
        found: &mut Vec<Found>,
    ) -> Option<usize> {
        let rule = self.pem.map(|i| &self.rules[i])?;
        let mut from = span.0;
        while let Some(b) = rule.regex.find_at(chunk, from) {
            if b.start() > span.1 {
                return None;
            }
            let body_start = b.end();
            let line_start = memchr::memrchr(b'\n', &chunk[..b.start()]).map_or(0, |p| p + 1);
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
                // END may come with more input: write up to the BEGIN line
                // (or, when the key starts the chunk, ask for more input).
                _ if !complete && chunk.len() - line_start < PEM_MAX => {
                    return Some(line_start);
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
    lower: Vec<u8>,
    hashes: std::collections::HashMap<Vec<u8>, [u8; 10]>,
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
            lower: Vec::new(),
            hashes: std::collections::HashMap::new(),
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
        let mut limit = self
            .redactor
            .scan(chunk, &mut self.lower, complete, &mut found);
        if limit == 0 && end > 0 && (complete || end >= PEM_MAX) {
            limit = self.redactor.scan(chunk, &mut self.lower, true, &mut found);
        }
        found.retain(|f| f.start < limit);
        spare_placeholders(&chunk[..limit], &mut found);
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
            let secret = &chunk[start..f_end];
            // A log repeats its secrets: hash each once per stream.
            let hash = match self.hashes.get(secret) {
                Some(h) => *h,
                None => {
                    let h = self.redactor.hash(secret);
                    if self.hashes.len() >= HASH_CACHE {
                        self.hashes.clear();
                    }
                    self.hashes.insert(secret.to_vec(), h);
                    h
                }
            };
            self.out.write_all(b"***REDACTED:")?;
            self.out.write_all(f.rule.as_bytes())?;
            self.out.write_all(b":")?;
            self.out.write_all(&hash)?;
            self.out.write_all(b"***")?;
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

/// What a placeholder starts with.
const PLACEHOLDER_OPEN: &[u8] = b"***REDACTED:";
/// How far a placeholder's closing `***` may be from its opening (rule
/// names are short, the hash 10 digits).
const PLACEHOLDER_MAX: usize = 80;

/// Where the placeholders already in `chunk` are (input redacted before,
/// such as the log tails the controller keeps).
fn placeholder_spans(chunk: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(p) = memchr::memmem::find(&chunk[from..], PLACEHOLDER_OPEN) {
        let start = from + p;
        let body = start + PLACEHOLDER_OPEN.len();
        let window = &chunk[body..chunk.len().min(body + PLACEHOLDER_MAX)];
        match memchr::memmem::find(window, b"***") {
            Some(q) => {
                spans.push((start, body + q + 3));
                from = body + q + 3;
            }
            None => from = body,
        }
    }
    spans
}

/// Redaction is idempotent: a placeholder is never matched again, neither
/// whole (a PEM body that is one already) nor in part (the rule name in
/// `***REDACTED:url-credentials:…***` reads as a sensitive key, whose
/// "value" would swallow the hash and the URL's host). A match that starts
/// before a placeholder keeps what precedes it; one that starts inside is
/// dropped.
fn spare_placeholders(chunk: &[u8], found: &mut Vec<Found>) {
    if found.is_empty() || memchr::memmem::find(chunk, PLACEHOLDER_OPEN).is_none() {
        return;
    }
    let spans = placeholder_spans(chunk);
    found.retain_mut(|f| {
        for &(s, e) in &spans {
            if f.start < e && f.end > s {
                if f.start >= s {
                    return false;
                }
                f.end = f.end.min(s);
            }
        }
        f.end > f.start
    });
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
