//! The Kubernetes JSONPath dialect (client-go `util/jsonpath`) as the
//! apiserver evaluates it for CRD `additionalPrinterColumns` and
//! `selectableFields`: missing keys give no result rather than an error, and
//! the path is read as if wrapped in `{…}`.
//!
//! Supported: `.field`, `\.` inside a field name, `['key']`, `[n]`, `[-n]`,
//! slices `[a:b:step]`, `[*]`, `.*`, unions `[0,2]`, recursive descent `..`,
//! and filters `[?(@.type=="Ready")]` with `==`, `!=`, `<`, `>`, `<=`, `>=`
//! or plain existence `[?(@.field)]`.
//!
//! Quirks kept on purpose because the real server has them:
//! - `['a.b']` is split at the dots (it is re-parsed as `.a.b`); only `\.`
//!   keeps a dot inside a key.
//! - Numeric literals in filters are floats, while integers in stored objects
//!   are integers, so `[?(@.count==3)]` never matches an integer `3`, and `!=`
//!   between them always matches (Go's template comparison refuses to compare
//!   int with float, and the filter treats that as "not equal").

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

/// A path that could not be parsed or evaluated. The message is client-go's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPathError {
    /// The path is not valid JSONPath.
    #[error("{0}")]
    Syntax(String),
    /// The path is valid but cannot be applied to this object (an index out of
    /// range, a filter on a scalar …).
    #[error("{0}")]
    Evaluation(String),
}

/// Evaluates `path` (e.g. `.status.conditions[?(@.type=="Ready")].status`)
/// against `obj` and returns every value it selects, in order. A missing
/// field selects nothing; it is not an error.
pub fn eval(path: &str, obj: &Value) -> Result<Vec<Value>, JsonPathError> {
    let parsed = JsonPath::parse(path)?;
    parsed.eval(obj)
}

/// A parsed JSONPath, for evaluating the same column against many objects.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    nodes: Vec<Node>,
}

impl JsonPath {
    /// Parses a path the way the apiserver does: as the template `{path}`.
    pub fn parse(path: &str) -> Result<JsonPath, JsonPathError> {
        let nodes = parse_action(&format!("{{{path}}}")).map_err(JsonPathError::Syntax)?;
        Ok(JsonPath { nodes })
    }

    /// Every value the path selects in `obj`.
    pub fn eval(&self, obj: &Value) -> Result<Vec<Value>, JsonPathError> {
        let input = vec![Cow::Borrowed(obj)];
        let out = eval_list(&input, &self.nodes).map_err(JsonPathError::Evaluation)?;
        Ok(out.into_iter().map(Cow::into_owned).collect())
    }
}

/// Formats one selected value the way client-go's `PrintResults` does for a
/// single result: objects and arrays as compact JSON (Go's encoding: sorted
/// keys, `<>&` escaped), strings as they are, numbers as Go's `%v`, and a JSON
/// `null` as `<no value>`.
pub fn print_value(value: &Value) -> String {
    match value {
        Value::Null => "<no value>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => s.clone(),
        Value::Array(_) | Value::Object(_) => go_json(value),
    }
}

/// Serialises a value as Go's `encoding/json` does: map keys sorted, `<`, `>`,
/// `&`, U+2028 and U+2029 escaped, floats without a trailing `.0`.
pub fn go_json(value: &Value) -> String {
    let mut out = String::new();
    write_go_json(&mut out, value);
    out
}

fn write_go_json(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_json_number(n)),
        Value::String(s) => write_go_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(out, key);
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_go_json(out, v);
                }
            }
            out.push('}');
        }
    }
}

fn write_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go's `encoding/json` number format: floats in plain notation between 1e-6
/// and 1e21, exponent form (`1e+21`, `1e-7`) outside.
fn go_json_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` is shortest round-trip like Go's and already writes
        // `1e-7`; Go spells positive exponents with a `+`.
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => s,
        }
    } else {
        // Rust's `{}` is shortest round-trip in plain notation, `3` for 3.0.
        format!("{f}")
    }
}

/// Go's `fmt.Print` of a JSON number: integers in decimal, floats as `%v`.
fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    go_format_float(n.as_f64().unwrap_or(0.0))
}

/// Go's `%v` for a float64, i.e. `strconv.FormatFloat(f, 'g', -1, 64)`:
/// shortest digits, exponent form (`1e+06`, `1.5e-07`) when the decimal
/// exponent is below -4 or at least 6 (Go fixes the `%g` precision at 6 for
/// the shortest form).
pub(crate) fn go_format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return sci;
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

// ---------------------------------------------------------------------------
// Parsing: a port of client-go's jsonpath/parser.go.

#[derive(Debug, Clone, PartialEq)]
enum Node {
    List(Vec<Node>),
    Text(String),
    Field(String),
    Array([Param; 3]),
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        op: String,
    },
    Int(i64),
    Float(f64),
    Bool(bool),
    Wildcard,
    Recursive,
    Union(Vec<Vec<Node>>),
    Identifier(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

/// Parses a template and returns the nodes of its first action, which is
/// what both the printer columns and client-go's `parseAction` use.
fn parse_action(template: &str) -> Result<Vec<Node>, String> {
    let root = parse_template(template)?;
    match root.into_iter().next() {
        Some(Node::List(nodes)) => Ok(nodes),
        Some(other) => Ok(vec![other]),
        None => Ok(Vec::new()),
    }
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
}

const EOF: char = '\u{FFFF}';

impl<'a> Parser<'a> {
    fn next(&mut self) -> char {
        match self.input[self.pos..].chars().next() {
            None => {
                self.width = 0;
                EOF
            }
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                c
            }
        }
    }

    fn peek(&mut self) -> char {
        let c = self.next();
        self.backup();
        c
    }

    fn backup(&mut self) {
        self.pos -= self.width;
    }

    fn consume_text(&mut self) -> &'a str {
        let value = &self.input[self.start..self.pos];
        self.start = self.pos;
        value
    }

    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    /// The byte before the character just read (the Go parser's
    /// `p.input[p.pos-2]` escape check).
    fn byte_before_last(&self) -> Option<u8> {
        let at = self.pos.checked_sub(self.width + 1)?;
        self.input.as_bytes().get(at).copied()
    }
}

fn parse_template(text: &str) -> Result<Vec<Node>, String> {
    let mut p = Parser {
        input: text,
        pos: 0,
        start: 0,
        width: 0,
    };
    let mut root = Vec::new();
    loop {
        // parseText
        loop {
            if p.rest().starts_with('{') {
                break;
            }
            if p.next() == EOF {
                if p.pos > p.start {
                    root.push(Node::Text(p.consume_text().to_owned()));
                }
                return Ok(root);
            }
        }
        if p.pos > p.start {
            root.push(Node::Text(p.consume_text().to_owned()));
        }
        // parseLeftDelim
        p.pos += 1;
        p.consume_text();
        let mut action = Vec::new();
        parse_inside_action(&mut p, &mut action)?;
        root.push(Node::List(action));
    }
}

/// Parses until the closing `}` of the current action (consumed).
fn parse_inside_action(p: &mut Parser<'_>, cur: &mut Vec<Node>) -> Result<(), String> {
    loop {
        let rest = p.rest();
        if rest.starts_with('}') {
            p.pos += 1;
            p.consume_text();
            return Ok(());
        }
        if rest.starts_with("[?(") {
            parse_filter(p, cur)?;
            continue;
        }
        if rest.starts_with("..") {
            if matches!(cur.last(), Some(Node::Recursive)) {
                return Err("invalid multiple recursive descent".to_owned());
            }
            p.pos += 2;
            p.consume_text();
            cur.push(Node::Recursive);
            if is_alphanumeric(p.peek()) {
                parse_field(p, cur);
            }
            continue;
        }
        let r = p.next();
        match r {
            EOF | '\r' | '\n' => return Err("unclosed action".to_owned()),
            ' ' | '@' | '$' => {
                p.consume_text();
            }
            '[' => parse_array(p, cur)?,
            '"' | '\'' => parse_quote(p, cur, r)?,
            '.' => parse_field(p, cur),
            c if c == '+' || c == '-' || c.is_ascii_digit() => {
                p.backup();
                parse_number(p, cur)?;
            }
            c if is_alphanumeric(c) => {
                p.backup();
                parse_identifier(p, cur);
            }
            c => {
                return Err(format!(
                    "unrecognized character in action: U+{:04X} '{c}'",
                    c as u32
                ));
            }
        }
    }
}

fn parse_identifier(p: &mut Parser<'_>, cur: &mut Vec<Node>) {
    loop {
        let r = p.next();
        if is_terminator(r) {
            p.backup();
            break;
        }
    }
    let value = p.consume_text();
    match value {
        "true" => cur.push(Node::Bool(true)),
        "false" => cur.push(Node::Bool(false)),
        _ => cur.push(Node::Identifier(value.to_owned())),
    }
}

fn parse_number(p: &mut Parser<'_>, cur: &mut Vec<Node>) -> Result<(), String> {
    let r = p.peek();
    if r == '+' || r == '-' {
        p.next();
    }
    loop {
        let r = p.next();
        if r != '.' && !r.is_ascii_digit() {
            p.backup();
            break;
        }
    }
    let value = p.consume_text();
    if let Ok(i) = value.parse::<i64>() {
        cur.push(Node::Int(i));
        return Ok(());
    }
    match value.parse::<f64>() {
        Ok(f) => {
            cur.push(Node::Float(f));
            Ok(())
        }
        Err(_) => Err(format!("cannot parse number {value}")),
    }
}

fn parse_array(p: &mut Parser<'_>, cur: &mut Vec<Node>) -> Result<(), String> {
    loop {
        match p.next() {
            EOF | '\n' => return Err("unterminated array".to_owned()),
            ']' => break,
            _ => {}
        }
    }
    let consumed = p.consume_text();
    let mut text = &consumed[1..consumed.len() - 1];
    if text == "*" {
        text = ":";
    }

    let parts: Vec<&str> = text.split(',').collect();
    if parts.len() > 1 {
        let mut union = Vec::new();
        for part in parts {
            union.push(parse_action(&format!("{{[{}]}}", part.trim_matches(' ')))?);
        }
        cur.push(Node::Union(union));
        return Ok(());
    }

    // ['key'] is re-parsed as `.key`, so dots inside it split the key.
    if text.len() >= 2 && text.starts_with('\'') && text.ends_with('\'') {
        let key = &text[1..text.len() - 1];
        if !key.contains('\'') {
            cur.extend(parse_action(&format!("{{.{key}}}"))?);
            return Ok(());
        }
    }

    let groups = slice_groups(text).ok_or_else(|| format!("invalid array index {text}"))?;
    let mut params = [Param::default(); 3];
    for i in 0..3 {
        let mut raw = groups[i];
        if !raw.is_empty() {
            if i > 0 {
                raw = &raw[1..];
            }
            if i > 0 && raw.is_empty() {
                params[i].known = false;
            } else {
                params[i].known = true;
                params[i].value = raw
                    .parse::<i64>()
                    .map_err(|_| format!("array index {raw} is not a number"))?;
            }
        } else if i == 1 {
            params[i].known = true;
            params[i].value = params[0].value + 1;
            params[i].derived = true;
        } else {
            params[i].known = false;
            params[i].value = 0;
        }
    }
    cur.push(Node::Array(params));
    Ok(())
}

/// Matches `^(-?\d*)(:-?\d*)?(:-?\d*)?$` and returns the three groups
/// (empty when absent).
fn slice_groups(text: &str) -> Option<[&str; 3]> {
    fn number_len(s: &str) -> usize {
        let b = s.as_bytes();
        let mut i = usize::from(b.first() == Some(&b'-'));
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    }
    let mut groups = [""; 3];
    let first = number_len(text);
    groups[0] = &text[..first];
    let mut rest = &text[first..];
    for group in groups.iter_mut().skip(1) {
        if let Some(after) = rest.strip_prefix(':') {
            let len = 1 + number_len(after);
            *group = &rest[..len];
            rest = &rest[len..];
        }
    }
    rest.is_empty().then_some(groups)
}

fn parse_filter(p: &mut Parser<'_>, cur: &mut Vec<Node>) -> Result<(), String> {
    p.pos += 3;
    p.consume_text();
    let mut begin = false;
    let mut end = false;
    let mut pair = '\0';
    loop {
        let r = p.next();
        match r {
            EOF | '\n' => return Err("unterminated filter".to_owned()),
            '"' | '\'' => {
                if !begin {
                    begin = true;
                    pair = r;
                    continue;
                }
                if p.byte_before_last() != Some(b'\\') && r == pair {
                    end = true;
                }
            }
            ')' if begin == end => break,
            _ => {}
        }
    }
    if p.next() != ']' {
        return Err("unclosed array expect ]".to_owned());
    }
    let consumed = p.consume_text();
    let text = &consumed[..consumed.len() - 2];
    match split_filter(text) {
        None => {
            let left = parse_action(&format!("{{{text}}}"))?;
            cur.push(Node::Filter {
                left,
                right: Vec::new(),
                op: "exists".to_owned(),
            });
        }
        Some((left, op, right)) => {
            let left = parse_action(&format!("{{{left}}}"))?;
            let right = parse_action(&format!("{{{right}}}"))?;
            cur.push(Node::Filter {
                left,
                right,
                op: op.to_owned(),
            });
        }
    }
    Ok(())
}

/// Matches `^([^!<>=]+)([!<>=]+)(.+?)$`.
fn split_filter(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let left_end = text.find(is_op)?;
    if left_end == 0 {
        return None;
    }
    let after = &text[left_end..];
    let op_len = after.find(|c: char| !is_op(c)).unwrap_or(after.len());
    let right = &after[op_len..];
    if right.is_empty() || right.contains('\n') {
        return None;
    }
    Some((&text[..left_end], &after[..op_len], right))
}

fn parse_quote(p: &mut Parser<'_>, cur: &mut Vec<Node>, end: char) -> Result<(), String> {
    loop {
        let r = p.next();
        if r == EOF || r == '\n' {
            return Err("unterminated quoted string".to_owned());
        }
        if r == end && p.byte_before_last() != Some(b'\\') {
            break;
        }
    }
    let value = p.consume_text();
    let s = unquote_extend(value).map_err(|e| format!("unquote string {value} error {e}"))?;
    cur.push(Node::Text(s));
    Ok(())
}

fn parse_field(p: &mut Parser<'_>, cur: &mut Vec<Node>) {
    p.consume_text();
    loop {
        let r = p.next();
        if r == '\\' {
            p.next();
        } else if is_terminator(r) {
            p.backup();
            break;
        }
    }
    let value = p.consume_text();
    if value == "*" {
        cur.push(Node::Wildcard);
    } else {
        cur.push(Node::Field(value.replace('\\', "")));
    }
}

fn is_terminator(r: char) -> bool {
    matches!(
        r,
        ' ' | '\t' | '\r' | '\n' | EOF | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
    )
}

fn is_alphanumeric(r: char) -> bool {
    r == '_' || r.is_alphabetic() || r.is_numeric()
}

/// Go's `strconv.Unquote`, extended to single-quoted strings.
fn unquote_extend(s: &str) -> Result<String, &'static str> {
    const SYNTAX: &str = "invalid syntax";
    let mut chars = s.chars();
    let quote = chars.next().ok_or(SYNTAX)?;
    if s.len() < 2 || !s.ends_with(quote) || (quote != '"' && quote != '\'') {
        return Err(SYNTAX);
    }
    let body = &s[1..s.len() - 1];
    let mut out = String::with_capacity(body.len());
    let mut it = body.chars().peekable();
    while let Some(c) = it.next() {
        if c == quote {
            return Err(SYNTAX);
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = it.next().ok_or(SYNTAX)?;
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' if e == quote => out.push(e),
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut code = 0u32;
                for _ in 0..n {
                    let d = it.next().and_then(|d| d.to_digit(16)).ok_or(SYNTAX)?;
                    code = code * 16 + d;
                }
                out.push(char::from_u32(code).ok_or(SYNTAX)?);
            }
            '0'..='7' => {
                let mut code = e.to_digit(8).ok_or(SYNTAX)?;
                for _ in 0..2 {
                    let d = it.next().and_then(|d| d.to_digit(8)).ok_or(SYNTAX)?;
                    code = code * 8 + d;
                }
                if code > 255 {
                    return Err(SYNTAX);
                }
                out.push(char::from_u32(code).ok_or(SYNTAX)?);
            }
            _ => return Err(SYNTAX),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Evaluation: a port of client-go's jsonpath/jsonpath.go with
// AllowMissingKeys(true).

type Values<'v> = Vec<Cow<'v, Value>>;

fn eval_list<'v>(input: &Values<'v>, nodes: &[Node]) -> Result<Values<'v>, String> {
    let mut cur = input.clone();
    for node in nodes {
        cur = walk(&cur, node)?;
    }
    Ok(cur)
}

fn walk<'v>(input: &Values<'v>, node: &Node) -> Result<Values<'v>, String> {
    match node {
        Node::List(nodes) => eval_list(input, nodes),
        Node::Text(text) => Ok(vec![Cow::Owned(Value::String(text.clone()))]),
        Node::Field(name) => Ok(eval_field(input, name)),
        Node::Array(params) => eval_array(input, params),
        Node::Filter { left, right, op } => eval_filter(input, left, right, op),
        Node::Int(i) => Ok(input.iter().map(|_| Cow::Owned(Value::from(*i))).collect()),
        Node::Float(f) => Ok(input.iter().map(|_| Cow::Owned(Value::from(*f))).collect()),
        Node::Bool(b) => Ok(input.iter().map(|_| Cow::Owned(Value::Bool(*b))).collect()),
        Node::Wildcard => Ok(input.iter().flat_map(children).collect()),
        Node::Recursive => Ok(eval_recursive(input)),
        Node::Union(lists) => {
            let mut out = Vec::new();
            for list in lists {
                out.extend(eval_list(input, list)?);
            }
            Ok(out)
        }
        Node::Identifier(name) => Err(format!("unrecognized identifier {name}")),
    }
}

fn eval_field<'v>(input: &Values<'v>, name: &str) -> Values<'v> {
    let mut out = Vec::new();
    for value in input {
        match value {
            Cow::Borrowed(Value::Object(map)) => {
                if let Some(v) = map.get(name) {
                    out.push(Cow::Borrowed(v));
                }
            }
            Cow::Owned(Value::Object(map)) => {
                if let Some(v) = map.get(name) {
                    out.push(Cow::Owned(v.clone()));
                }
            }
            _ => {}
        }
    }
    out
}

/// The elements of an array, or the values of an object in key order;
/// nothing for scalars and null.
fn children<'v>(value: &Cow<'v, Value>) -> Values<'v> {
    match value {
        Cow::Borrowed(v) => borrowed_children(v),
        Cow::Owned(v) => borrowed_children(v)
            .into_iter()
            .map(|c| Cow::Owned(c.into_owned()))
            .collect(),
    }
}

fn borrowed_children(value: &Value) -> Vec<Cow<'_, Value>> {
    match value {
        Value::Array(items) => items.iter().map(Cow::Borrowed).collect(),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            keys.into_iter()
                .filter_map(|k| map.get(k))
                .map(Cow::Borrowed)
                .collect()
        }
        _ => Vec::new(),
    }
}

fn eval_recursive<'v>(input: &Values<'v>) -> Values<'v> {
    let mut out = Vec::new();
    for value in input {
        let kids = children(value);
        if !kids.is_empty() {
            out.push(value.clone());
            out.extend(eval_recursive(&kids));
        }
    }
    out
}

fn eval_array<'v>(input: &Values<'v>, node: &[Param; 3]) -> Result<Values<'v>, String> {
    let mut out = Vec::new();
    for value in input {
        let items = match value.as_ref() {
            Value::Null => continue,
            Value::Array(items) => items,
            other => return Err(format!("{} is not array or slice", go_type_name(other))),
        };
        let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
        let mut params = *node;
        if !params[0].known {
            params[0].value = 0;
        }
        if params[0].value < 0 {
            params[0].value += len;
        }
        if !params[1].known {
            params[1].value = len;
        }
        if params[1].value < 0 || (params[1].value == 0 && params[1].derived) {
            params[1].value += len;
        }
        let (from, to) = (params[0].value, params[1].value);
        if to == from {
            // client-go returns what it has so far as soon as one input
            // selects nothing.
            return Ok(out);
        }
        if from >= len || from < 0 {
            return Err(format!(
                "array index out of bounds: index {from}, length {len}"
            ));
        }
        if to > len || to < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                to - 1
            ));
        }
        if from > to {
            return Err(format!(
                "starting index {from} is greater than ending index {to}"
            ));
        }
        let step = if params[2].known {
            if params[2].value <= 0 {
                return Err("step must be > 0".to_owned());
            }
            params[2].value
        } else {
            1
        };
        let (from, to) = (
            usize::try_from(from).unwrap_or(0),
            usize::try_from(to).unwrap_or(0),
        );
        let step = usize::try_from(step).unwrap_or(1);
        for i in (from..to).step_by(step) {
            out.push(match value {
                Cow::Borrowed(Value::Array(items)) => Cow::Borrowed(&items[i]),
                _ => Cow::Owned(items[i].clone()),
            });
        }
    }
    Ok(out)
}

fn eval_filter<'v>(
    input: &Values<'v>,
    left: &[Node],
    right: &[Node],
    op: &str,
) -> Result<Values<'v>, String> {
    let mut out = Vec::new();
    for value in input {
        let mut candidates = children(value);
        if !matches!(value.as_ref(), Value::Array(_) | Value::Object(_)) {
            candidates = vec![value.clone()];
        }
        for candidate in candidates {
            let one = vec![candidate.clone()];
            // Missing keys are allowed, so an error on the left side only
            // means "nothing to compare".
            let lefts = eval_list(&one, left).unwrap_or_default();
            let rights = eval_list(&one, right)?;
            match lefts.len() {
                0 => continue,
                1 => {}
                _ => return Err("can only compare one element at a time".to_owned()),
            }
            if op == "exists" {
                out.push(candidate);
                continue;
            }
            match rights.len() {
                0 => continue,
                1 => {}
                _ => return Err("can only compare one element at a time".to_owned()),
            }
            let left_literal = matches!(lefts[0], Cow::Owned(_));
            let right_literal = matches!(rights[0], Cow::Owned(_));
            let left = (lefts[0].as_ref(), operand_kind(&lefts[0], left_literal));
            let right = (rights[0].as_ref(), operand_kind(&rights[0], right_literal));
            if compare(op, left, right)? {
                out.push(candidate);
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BasicKind {
    Bool,
    Int,
    Float,
    String,
}

/// Go's `basicKind` for a value as the unstructured decoder produces it:
/// whole JSON numbers are int64, others float64.
fn basic_kind(v: &Value) -> Option<BasicKind> {
    match v {
        Value::Bool(_) => Some(BasicKind::Bool),
        Value::Number(n) if n.is_i64() => Some(BasicKind::Int),
        Value::Number(_) => Some(BasicKind::Float),
        Value::String(_) => Some(BasicKind::String),
        _ => None,
    }
}

/// The kind Go sees for one side of a filter comparison. Numbers written in
/// the filter are float64 (client-go turns its int literals into float64
/// before comparing); numbers read from the object keep their own kind.
/// Literal nodes are the only source of `Cow::Owned` numbers: everything read
/// from the object is borrowed.
fn operand_kind(v: &Value, from_literal: bool) -> Option<BasicKind> {
    match v {
        Value::Number(_) if from_literal => Some(BasicKind::Float),
        _ => basic_kind(v),
    }
}

/// Go template comparison. `Err` only for errors the filter does not ignore
/// (none in practice: incompatible or uncomparable types are ignored).
fn compare(
    op: &str,
    (left, lk): (&Value, Option<BasicKind>),
    (right, rk): (&Value, Option<BasicKind>),
) -> Result<bool, String> {
    let less = || -> Option<bool> {
        match (lk?, rk?) {
            (BasicKind::Int, BasicKind::Int) => Some(left.as_i64()? < right.as_i64()?),
            (BasicKind::Float, BasicKind::Float) => Some(left.as_f64()? < right.as_f64()?),
            (BasicKind::String, BasicKind::String) => Some(left.as_str()? < right.as_str()?),
            _ => None,
        }
    };
    let equal = || -> Option<bool> {
        match (lk?, rk?) {
            (BasicKind::Bool, BasicKind::Bool) => Some(left.as_bool()? == right.as_bool()?),
            (BasicKind::Int, BasicKind::Int) => Some(left.as_i64()? == right.as_i64()?),
            (BasicKind::Float, BasicKind::Float) => Some(left.as_f64()? == right.as_f64()?),
            (BasicKind::String, BasicKind::String) => Some(left.as_str()? == right.as_str()?),
            _ => None,
        }
    };
    // An incomparable pair makes every operator false except `!=`, which Go
    // computes as `!equal` before looking at the error.
    Ok(match op {
        "==" => equal().unwrap_or(false),
        "!=" => !equal().unwrap_or(false),
        "<" => less().unwrap_or(false),
        "<=" => match less() {
            Some(true) => true,
            Some(false) => equal().unwrap_or(false),
            None => false,
        },
        ">" => match (less(), equal()) {
            (Some(l), Some(e)) => !(l || e),
            _ => false,
        },
        ">=" => less().map(|l| !l).unwrap_or(false),
        other => return Err(format!("unrecognized filter operator {other}")),
    })
}

fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "map[string]interface {}",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::Array(_) => "[]interface {}",
        Value::Null => "<nil>",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "metadata": {
                "name": "agent-0",
                "labels": {"app.kubernetes.io/name": "agent", "tier": "web"},
                "annotations": {"example.com/owner": "team-a"}
            },
            "spec": {
                "replicas": 3,
                "containers": [
                    {"name": "main", "image": "agent:1", "ports": [{"containerPort": 80}]},
                    {"name": "sidecar", "image": "proxy:2"}
                ]
            },
            "status": {
                "ratio": 0.5,
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                    {"type": "PodScheduled", "status": "True"}
                ]
            }
        })
    }

    #[test]
    fn printer_column_paths_select_what_the_apiserver_selects() {
        let obj = pod();
        let cases: Vec<(&str, Vec<Value>)> = vec![
            (".spec.replicas", vec![json!(3)]),
            (".metadata.name", vec![json!("agent-0")]),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                vec![json!("False")],
            ),
            (
                ".status.conditions[?(@.type=='Ready')].reason",
                vec![json!("ContainersNotReady")],
            ),
            (
                ".status.conditions[?(@.status!=\"True\")].type",
                vec![json!("Ready")],
            ),
            (".status.conditions[?(@.reason)].type", vec![json!("Ready")]),
            (
                ".metadata.labels.app\\.kubernetes\\.io/name",
                vec![json!("agent")],
            ),
            (
                ".metadata.annotations.example\\.com/owner",
                vec![json!("team-a")],
            ),
            (".metadata.labels['tier']", vec![json!("web")]),
            (".spec.containers[0].image", vec![json!("agent:1")]),
            (".spec.containers[-1].name", vec![json!("sidecar")]),
            (
                ".spec.containers[*].name",
                vec![json!("main"), json!("sidecar")],
            ),
            (".spec.containers[0:1].name", vec![json!("main")]),
            (
                ".spec.containers[0,1].image",
                vec![json!("agent:1"), json!("proxy:2")],
            ),
            (
                ".spec.containers[*].ports[*].containerPort",
                vec![json!(80)],
            ),
            (".metadata.labels.*", vec![json!("agent"), json!("web")]),
            ("..containerPort", vec![json!(80)]),
            (".status.missing", vec![]),
            (".nope.deeper.still", vec![]),
            (".status.conditions[?(@.type==\"Gone\")].status", vec![]),
            (".spec.containers[?(@.ports)].name", vec![json!("main")]),
            (".status.ratio", vec![json!(0.5)]),
        ];
        for (path, want) in cases {
            let got = eval(path, &obj).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn bracketed_keys_are_split_at_dots_like_client_go() {
        let obj = pod();
        // `['a.b']` becomes `.a.b`, so it looks for nested keys.
        let got = eval(".metadata.labels['app.kubernetes.io/name']", &obj).unwrap();
        assert_eq!(got, Vec::<Value>::new());
    }

    #[test]
    fn numeric_filters_compare_floats_only_with_floats() {
        let obj = json!({"items": [
            {"n": 3, "f": 1.5, "b": true, "s": "x"},
            {"n": 4, "f": 2.5, "b": false, "s": "y"}
        ]});
        let cases: Vec<(&str, Vec<Value>)> = vec![
            // Whole numbers in objects are int64; literals are float64: never equal.
            (".items[?(@.n==3)].s", vec![]),
            (".items[?(@.n>3)].s", vec![]),
            // ... and `!=` between them is always true.
            (".items[?(@.n!=3)].s", vec![json!("x"), json!("y")]),
            (".items[?(@.f==1.5)].s", vec![json!("x")]),
            (".items[?(@.f>2)].s", vec![json!("y")]),
            (".items[?(@.f>=2.5)].s", vec![json!("y")]),
            (".items[?(@.f<=1.5)].s", vec![json!("x")]),
            (".items[?(@.f<2)].s", vec![json!("x")]),
            (".items[?(@.b==true)].s", vec![json!("x")]),
            (".items[?(@.b>true)].s", vec![]),
            (".items[?(@.s>\"x\")].s", vec![json!("y")]),
            (".items[?(@.missing==\"x\")].s", vec![]),
        ];
        for (path, want) in cases {
            assert_eq!(eval(path, &obj).unwrap(), want, "{path}");
        }
    }

    #[test]
    fn invalid_paths_report_client_go_errors() {
        let obj = pod();
        let cases = [
            (".spec.containers[", "unterminated array"),
            (".spec.containers[x]", "invalid array index x"),
            (".spec.containers[?(@.a==1]", "unterminated filter"),
            (".spec.containers[?(@.a==1)", "unclosed array expect ]"),
            (".a \"b", "unterminated quoted string"),
            (".a #", "unrecognized character in action: U+0023 '#'"),
            ("....a", "invalid multiple recursive descent"),
        ];
        for (path, want) in cases {
            assert_eq!(
                eval(path, &obj),
                Err(JsonPathError::Syntax(want.to_owned())),
                "{path}"
            );
        }
    }

    #[test]
    fn evaluation_errors_report_client_go_errors() {
        let obj = pod();
        let cases = [
            (
                ".spec.containers[5]",
                "array index out of bounds: index 5, length 2",
            ),
            (
                ".spec.containers[0:9]",
                "array index out of bounds: index 8, length 2",
            ),
            (
                ".metadata[0]",
                "map[string]interface {} is not array or slice",
            ),
            (".spec.containers[0:2:0]", "step must be > 0"),
            (".spec.x[?(@.a==b)]", "unrecognized identifier b"),
        ];
        for (path, want) in cases {
            let got = eval(path, &obj);
            // `.spec.x` is missing, so the filter sees nothing to evaluate.
            if path.starts_with(".spec.x") {
                assert_eq!(got, Ok(vec![]), "{path}");
                continue;
            }
            assert_eq!(
                got,
                Err(JsonPathError::Evaluation(want.to_owned())),
                "{path}"
            );
        }
    }

    #[test]
    fn a_parsed_path_can_be_reused() {
        let path = JsonPath::parse(".metadata.name").unwrap();
        assert_eq!(
            path.eval(&json!({"metadata": {"name": "a"}})).unwrap(),
            vec![json!("a")]
        );
        assert_eq!(
            path.eval(&json!({"metadata": {"name": "b"}})).unwrap(),
            vec![json!("b")]
        );
    }

    #[test]
    fn values_print_like_go() {
        let cases = [
            (json!("text"), "text"),
            (json!(3), "3"),
            (json!(-7), "-7"),
            (json!(0.5), "0.5"),
            (json!(2.0), "2"),
            (json!(123456.0), "123456"),
            (json!(1234567.0), "1.234567e+06"),
            (json!(0.0001), "0.0001"),
            (json!(0.00001), "1e-05"),
            (json!(true), "true"),
            (json!(null), "<no value>"),
            (
                json!({"b": 1, "a": "<x>"}),
                "{\"a\":\"\\u003cx\\u003e\",\"b\":1}",
            ),
            (json!([1, 2.5, 1e21, 1e-7]), "[1,2.5,1e+21,1e-7]"),
        ];
        for (value, want) in cases {
            assert_eq!(print_value(&value), want, "{value}");
        }
    }
}
