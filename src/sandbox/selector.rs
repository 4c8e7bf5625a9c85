//! Label and field selectors as the kube-apiserver parses and applies them
//! (apimachinery `labels.Parse`, `fields.ParseSelector`, the per-kind field
//! label conversions and `metav1.LabelSelectorAsSelector`).
//!
//! Error messages are the apiserver's, word for word, so that a client sees
//! the same `400 BadRequest` text it would get from a real cluster. The
//! server checks, in this order: label selector syntax, field selector
//! syntax, then whether each field is selectable for the resource.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde_json::Value;

use super::jsonpath;

/// A selector the apiserver would reject; `Display` is its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// `labelSelector` does not parse, or a key or value is invalid.
    #[error("{0}")]
    InvalidLabelSelector(String),
    /// `fieldSelector` does not parse (no operator, bad escaping).
    #[error("{0}")]
    InvalidFieldSelector(String),
    /// The field is not selectable for this resource.
    #[error("{message}")]
    FieldNotSupported {
        /// The field as written in the selector.
        field: String,
        /// The apiserver's message for it.
        message: String,
    },
}

// ---------------------------------------------------------------------------
// Label selectors

/// The operator of one label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `key=value`
    Equals,
    /// `key==value`
    DoubleEquals,
    /// `key!=value` (also true when the key is absent)
    NotEquals,
    /// `key in (a,b)`
    In,
    /// `key notin (a,b)` (also true when the key is absent)
    NotIn,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>5` (integers)
    GreaterThan,
    /// `key<5` (integers)
    LessThan,
}

/// One `key op values` term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values (sorted and without duplicates when parsed from a string).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn matches(&self, labels: &dyn Labels) -> bool {
        let value = labels.label(&self.key);
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => value.is_some_and(has),
            Operator::NotIn | Operator::NotEquals => !value.is_some_and(has),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(actual) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(wanted) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.values.len() != 1 {
                    return false;
                }
                match self.operator {
                    Operator::GreaterThan => actual > wanted,
                    _ => actual < wanted,
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in (",
            Operator::NotIn => " notin (",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(op)?;
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        f.write_str(&values.join(","))?;
        if matches!(self.operator, Operator::In | Operator::NotIn) {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: the AND of its requirements. The empty selector
/// selects everything; [`LabelSelector::nothing`] selects nothing (what a
/// missing `spec.selector` means).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

/// Something labels can be read from.
pub trait Labels {
    /// The value of `key`, if the label is set.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Labels for HashMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A `metadata.labels` JSON object. Non-string values do not count as set.
impl Labels for Value {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
}

impl Labels for serde_json::Map<String, Value> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
}

impl LabelSelector {
    /// Selects every object.
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// Selects no object.
    pub fn nothing() -> LabelSelector {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// `metav1.LabelSelectorAsSelector` over a `LabelSelector` JSON object
    /// (`matchLabels`, `matchExpressions`): `null` selects nothing, `{}`
    /// everything.
    pub fn from_k8s(selector: &Value) -> Result<LabelSelector, SelectorError> {
        let Some(obj) = selector.as_object() else {
            return Ok(LabelSelector::nothing());
        };
        let mut requirements = Vec::new();
        if let Some(labels) = obj.get("matchLabels").and_then(Value::as_object) {
            // Go walks the map in random order and stops at the first
            // invalid entry; key order makes the message deterministic.
            let mut keys: Vec<&String> = labels.keys().collect();
            keys.sort();
            for key in keys {
                let value = labels.get(key).and_then(Value::as_str).unwrap_or_default();
                requirements.push(new_requirement(
                    key,
                    Operator::Equals,
                    vec![value.to_owned()],
                    ValuesKind::Slice,
                )?);
            }
        }
        for expr in obj
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let op_name = expr.get("operator").and_then(Value::as_str).unwrap_or("");
            let operator = match op_name {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::InvalidLabelSelector(format!(
                        "{} is not a valid label selector operator",
                        go_quote(other)
                    )));
                }
            };
            let key = expr.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<String> = expr
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect();
            requirements.push(new_requirement(key, operator, values, ValuesKind::Slice)?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// `labels.SelectorFromSet`: every `key=value` of a map must match (a
    /// Service's or ReplicationController's `spec.selector`). An empty or
    /// missing map selects everything; no validation, like the apiserver.
    pub fn from_set(set: &Value) -> LabelSelector {
        let mut requirements: Vec<Requirement> = set
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                operator: Operator::Equals,
                values: vec![v.as_str().unwrap_or_default().to_owned()],
            })
            .collect();
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// Does it select objects with these labels?
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(&AsDyn(labels)))
    }

    /// Does it select this object (by its `metadata.labels`)?
    pub fn matches_object(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").unwrap_or(&Value::Null);
        self.matches(labels)
    }

    /// True when it selects everything.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True when it selects nothing.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The value a requirement pins `key` to (`key=v`, `key==v`, `key in (v)`).
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [v]) => Some(v),
            _ => None,
        }
    }
}

struct AsDyn<'a, L: ?Sized>(&'a L);

impl<L: Labels + ?Sized> Labels for AsDyn<'_, L> {
    fn label(&self, key: &str) -> Option<&str> {
        self.0.label(key)
    }
}

/// The apiserver's string form (`a=b,c in (d,e),!f`), as `kubectl get -o
/// wide` shows in Selector columns.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// `metav1.FormatLabelSelector`: the selector's string, `<none>` when it is
/// empty, `<error>` when it is invalid.
pub fn format_label_selector(selector: &Value) -> String {
    match LabelSelector::from_k8s(selector) {
        Ok(s) => {
            let text = s.to_string();
            if text.is_empty() {
                "<none>".to_owned()
            } else {
                text
            }
        }
        Err(_) => "<error>".to_owned(),
    }
}

/// `labels.FormatLabels`: `k=v,…` sorted by key, `<none>` when empty.
pub fn format_labels(map: &Value) -> String {
    let text = LabelSelector::from_set(map).to_string();
    if text.is_empty() {
        "<none>".to_owned()
    } else {
        text
    }
}

/// Parses a `labelSelector` query parameter exactly as `labels.Parse` does.
pub fn parse_label_selector(selector: &str) -> Result<LabelSelector, SelectorError> {
    let mut parser = LabelParser {
        items: lex_all(selector.as_bytes()),
        position: 0,
    };
    let mut requirements = parser
        .parse()
        .map_err(SelectorError::InvalidLabelSelector)?;
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(LabelSelector {
        requirements,
        nothing: false,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(ch: u8) -> bool {
    matches!(ch, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// apimachinery's byte lexer; a NUL byte reads like the end of the input.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos -= 1;
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special_symbol(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_id_or_keyword()
        }
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut end;
        loop {
            end = self.pos;
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
        }
        let word = &self.s[start..end];
        let text = String::from_utf8_lossy(word).into_owned();
        match keyword(word) {
            Some(tok) => (tok, text),
            None => (Token::Identifier, text),
        }
    }

    fn scan_special_symbol(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut last: Option<(Token, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            match keyword(&self.s[start..self.pos]) {
                Some(tok) => last = Some((tok, self.pos)),
                None if last.is_some() => {
                    self.unread();
                    break;
                }
                None => {}
            }
        }
        match last {
            Some((tok, end)) => (
                tok,
                String::from_utf8_lossy(&self.s[start..end]).into_owned(),
            ),
            // Every single special symbol is a token, so this cannot happen;
            // kept for parity with the Go lexer.
            None => (
                Token::EndOfString,
                format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&self.s[start..self.pos])
                ),
            ),
        }
    }
}

fn lex_all(s: &[u8]) -> Vec<(Token, String)> {
    let mut lexer = Lexer { s, pos: 0 };
    let mut items = Vec::new();
    loop {
        let item = lexer.lex();
        let done = item.0 == Token::EndOfString;
        items.push(item);
        if done {
            return items;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct LabelParser {
    items: Vec<(Token, String)>,
    position: usize,
}

/// The operators `parseOperator` lists in its error, in apimachinery order.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

impl LabelParser {
    fn item(&self, context: Context, at: usize) -> (Token, String) {
        let (tok, lit) = self
            .items
            .get(at)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        if context == Context::Values && matches!(tok, Token::In | Token::NotIn) {
            return (Token::Identifier, lit);
        }
        (tok, lit)
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        self.item(context, self.position)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        self.position += 1;
        self.item(context, self.position - 1)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return new_requirement(&key, op, Vec::new(), ValuesKind::Slice)
                .map_err(|e| e.to_string());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(
            &key,
            operator,
            values.into_iter().collect(),
            ValuesKind::Set,
        )
        .map_err(|e| e.to_string())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        if let Some(detail) = validate_label_key(&lit) {
            return Err(field_invalid("<nil>", &lit, &detail));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((lit, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut set = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.insert(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set);
                    }
                    if tok2 == Token::Comma {
                        self.consume(Context::Values);
                        set.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if matches!(tok, Token::EndOfString | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(BTreeSet::from([lit]));
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

/// How Go would print the values in a `field.Invalid` on `values`: a parsed
/// selector builds them from a set, `LabelSelectorAsSelector` from a slice
/// that is nil when empty.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ValuesKind {
    Set,
    Slice,
}

/// `labels.NewRequirement`: validates and builds; errors are aggregated like
/// `field.ErrorList.ToAggregate()`.
fn new_requirement(
    key: &str,
    operator: Operator,
    values: Vec<String>,
    kind: ValuesKind,
) -> Result<Requirement, SelectorError> {
    let mut errors: Vec<String> = Vec::new();
    if let Some(detail) = validate_label_key(key) {
        errors.push(field_invalid("key", key, &detail));
    }
    let values_repr = || go_string_slice(&values, kind);
    match operator {
        Operator::In | Operator::NotIn if values.is_empty() => errors.push(format!(
            "values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty",
            values_repr()
        )),
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => {
            errors.push(format!(
                "values: Invalid value: {}: exact-match compatibility requires one single value",
                values_repr()
            ))
        }
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errors.push(format!(
            "values: Invalid value: {}: values set must be empty for exists and does not exist",
            values_repr()
        )),
        Operator::GreaterThan | Operator::LessThan => {
            if values.len() != 1 {
                errors.push(format!(
                    "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                    values_repr()
                ));
            }
            for (i, v) in values.iter().enumerate() {
                if v.parse::<i64>().is_err() {
                    errors.push(field_invalid(
                        &format!("values[{i}]"),
                        v,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    ));
                }
            }
        }
        _ => {}
    }
    for (i, v) in values.iter().enumerate() {
        if let Some(detail) = validate_label_value(v) {
            errors.push(field_invalid(&format!("values[{i}][{key}]"), v, &detail));
        }
    }
    if !errors.is_empty() {
        return Err(SelectorError::InvalidLabelSelector(aggregate(errors)));
    }
    Ok(Requirement {
        key: key.to_owned(),
        operator,
        values,
    })
}

/// `utilerrors.NewAggregate(...).Error()`: one message as is, several in
/// brackets, duplicates dropped.
fn aggregate(errors: Vec<String>) -> String {
    let mut seen = BTreeSet::new();
    let unique: Vec<String> = errors
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    match unique.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// `field.Invalid(path, value, detail).Error()` for a string value.
fn field_invalid(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {}: {detail}", go_quote(value))
}

/// Go's `%#v` of a `[]string`.
fn go_string_slice(values: &[String], kind: ValuesKind) -> String {
    if values.is_empty() && kind == ValuesKind::Slice {
        return "[]string(nil)".to_owned();
    }
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Go's `strconv.Quote` (`%q`).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// apimachinery's `validation.RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(e);
        out.push_str("', ");
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            (f.is_ascii_lowercase() || f.is_ascii_digit())
                && (l.is_ascii_lowercase() || l.is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        }
        _ => false,
    }
}

/// `validation.IsDNS1123Subdomain`.
fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if !value.split('.').all(is_dns1123_label) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `validation.IsQualifiedName`, joined with `"; "` like `validateLabelKey`.
fn validate_label_key(key: &str) -> Option<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            return Some(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    (!errs.is_empty()).then(|| errs.join("; "))
}

/// `validation.IsValidLabelValue`.
fn validate_label_value(value: &str) -> Option<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    (!errs.is_empty()).then(|| errs.join("; "))
}

// ---------------------------------------------------------------------------
// Field selectors

/// The operator of one field term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOperator {
    /// `field=value` or `field==value`
    Equals,
    /// `field!=value`
    NotEquals,
}

/// One `field op value` term, with the value unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTerm {
    /// The field as written (`status.phase`).
    pub field: String,
    /// `=`/`==` or `!=`.
    pub operator: FieldOperator,
    /// The unescaped value.
    pub value: String,
}

/// A field selector: the AND of its terms; empty selects everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

/// Which resource a field selector is applied to. It decides which fields
/// are selectable and how their values are read from the object.
#[derive(Debug, Clone, Copy)]
pub struct FieldResource<'a> {
    /// API group, empty for core.
    pub group: &'a str,
    /// Kind (`Pod`).
    pub kind: &'a str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// For a custom resource: the JSON paths of the served version's
    /// `selectableFields` (`.spec.color`). `None` for built-in kinds.
    pub selectable_fields: Option<&'a [String]>,
}

impl<'a> FieldResource<'a> {
    /// A built-in kind.
    pub fn built_in(group: &'a str, kind: &'a str, namespaced: bool) -> FieldResource<'a> {
        FieldResource {
            group,
            kind,
            namespaced,
            selectable_fields: None,
        }
    }

    /// A custom resource with its CRD version's `selectableFields` paths.
    pub fn custom(
        group: &'a str,
        kind: &'a str,
        namespaced: bool,
        selectable_fields: &'a [String],
    ) -> FieldResource<'a> {
        FieldResource {
            group,
            kind,
            namespaced,
            selectable_fields: Some(selectable_fields),
        }
    }
}

/// Parses a `fieldSelector` query parameter exactly as `fields.ParseSelector`
/// does. Whether the fields exist for a resource is [`FieldSelector::check`].
pub fn parse_field_selector(selector: &str) -> Result<FieldSelector, SelectorError> {
    let mut parts = split_terms(selector);
    parts.sort_unstable();
    let mut terms = Vec::new();
    for part in parts {
        if part.is_empty() {
            continue;
        }
        let Some((lhs, op, rhs)) = split_term(part) else {
            return Err(SelectorError::InvalidFieldSelector(format!(
                "invalid selector: '{selector}'; can't understand '{part}'"
            )));
        };
        let value = unescape_field_value(rhs).map_err(SelectorError::InvalidFieldSelector)?;
        terms.push(FieldTerm {
            field: lhs.to_owned(),
            operator: if op == "!=" {
                FieldOperator::NotEquals
            } else {
                FieldOperator::Equals
            },
            value,
        });
    }
    Ok(FieldSelector { terms })
}

/// Splits at commas not escaped by a backslash; escapes stay in the terms.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Splits at the first `!=`, `==` or `=` (the left side has no escaping).
fn split_term(term: &str) -> Option<(&str, &str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`.
fn unescape_field_value(s: &str) -> Result<String, String> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_owned());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    ));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Go prints the rune with %v, i.e. as a number.
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                ));
            }
            c => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_owned());
    }
    Ok(out)
}

/// How a kind's field labels are checked: which conversion function the
/// apiserver registered for it.
enum Conversion {
    /// A kind-specific list; anything else is `field label not supported: f`.
    Listed(&'static [&'static str]),
    /// batch/v1 Job's own wording.
    Job,
    /// No registration: `DefaultMetaV1FieldSelectorConversion`.
    Default,
}

const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
    // Old v1 clients' name for spec.nodeName.
    "spec.host",
];
const NODE_FIELDS: &[&str] = &["metadata.name", "spec.unschedulable"];
const REPLICATION_CONTROLLER_FIELDS: &[&str] =
    &["metadata.name", "metadata.namespace", "status.replicas"];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    "metadata.namespace",
    "metadata.name",
];
const EVENTS_V1_FIELDS: &[&str] = &[
    "reason",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
    "type",
    "metadata.namespace",
    "metadata.name",
];
const NAMESPACE_FIELDS: &[&str] = &["status.phase", "metadata.name"];
const SECRET_FIELDS: &[&str] = &["type", "metadata.namespace", "metadata.name"];
const SERVICE_FIELDS: &[&str] = &[
    "metadata.namespace",
    "metadata.name",
    "spec.clusterIP",
    "spec.type",
];
const CSR_FIELDS: &[&str] = &["metadata.name", "spec.signerName"];

fn conversion(group: &str, kind: &str) -> Conversion {
    match (group, kind) {
        ("", "Pod") => Conversion::Listed(POD_FIELDS),
        ("", "Node") => Conversion::Listed(NODE_FIELDS),
        ("", "ReplicationController") => Conversion::Listed(REPLICATION_CONTROLLER_FIELDS),
        ("", "Event") => Conversion::Listed(EVENT_FIELDS),
        ("events.k8s.io", "Event") => Conversion::Listed(EVENTS_V1_FIELDS),
        ("", "Namespace") => Conversion::Listed(NAMESPACE_FIELDS),
        ("", "Secret") => Conversion::Listed(SECRET_FIELDS),
        ("", "Service") => Conversion::Listed(SERVICE_FIELDS),
        ("certificates.k8s.io", "CertificateSigningRequest") => Conversion::Listed(CSR_FIELDS),
        ("batch", "Job") => Conversion::Job,
        _ => Conversion::Default,
    }
}

impl FieldSelector {
    /// Selects every object.
    pub fn everything() -> FieldSelector {
        FieldSelector::default()
    }

    /// The terms, in the order the apiserver evaluates them.
    pub fn terms(&self) -> &[FieldTerm] {
        &self.terms
    }

    /// True when it selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value an `=` term pins `field` to (e.g. `metadata.name` for a
    /// single-object watch).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && t.operator == FieldOperator::Equals)
            .map(|t| t.value.as_str())
    }

    /// Checks every field is selectable for `resource`; the error is the
    /// apiserver's for the first one that is not.
    pub fn check(&self, resource: &FieldResource<'_>) -> Result<(), SelectorError> {
        for term in &self.terms {
            if let Some(message) = unsupported(&term.field, resource) {
                return Err(SelectorError::FieldNotSupported {
                    field: term.field.clone(),
                    message,
                });
            }
        }
        Ok(())
    }

    /// Does it select `obj`? A field the object does not have reads as "".
    pub fn matches(&self, obj: &Value, resource: &FieldResource<'_>) -> bool {
        self.terms.iter().all(|t| {
            let actual = field_value(obj, &t.field, resource);
            match t.operator {
                FieldOperator::Equals => actual == t.value,
                FieldOperator::NotEquals => actual != t.value,
            }
        })
    }
}

fn unsupported(field: &str, resource: &FieldResource<'_>) -> Option<String> {
    let not_supported = || Some(format!("field label not supported: {field}"));
    if let Some(paths) = resource.selectable_fields {
        let ok = field == "metadata.name"
            || (resource.namespaced && field == "metadata.namespace")
            || paths
                .iter()
                .any(|p| p.strip_prefix('.').unwrap_or(p) == field);
        return if ok { None } else { not_supported() };
    }
    match conversion(resource.group, resource.kind) {
        Conversion::Listed(fields) => {
            if fields.contains(&field) {
                None
            } else {
                not_supported()
            }
        }
        Conversion::Job => {
            if ["metadata.name", "metadata.namespace", "status.successful"].contains(&field) {
                None
            } else {
                Some(format!(
                    "field label {} not supported for batchv1.Job",
                    go_quote(field)
                ))
            }
        }
        Conversion::Default => {
            if field == "metadata.name" || field == "metadata.namespace" {
                None
            } else {
                Some(format!(
                    "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                    go_quote(field)
                ))
            }
        }
    }
}

fn str_at<'v>(obj: &'v Value, pointer: &str) -> &'v str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn int_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn bool_at(obj: &Value, pointer: &str) -> bool {
    obj.pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The value the apiserver's `GetAttrs` gives a field of this object
/// (`fields.Set.Get`: "" when it has none).
fn field_value(obj: &Value, field: &str, resource: &FieldResource<'_>) -> String {
    match field {
        "metadata.name" => return str_at(obj, "/metadata/name").to_owned(),
        "metadata.namespace" => return str_at(obj, "/metadata/namespace").to_owned(),
        _ => {}
    }
    if let Some(paths) = resource.selectable_fields {
        let Some(path) = paths
            .iter()
            .find(|p| p.strip_prefix('.').unwrap_or(p) == field)
        else {
            return String::new();
        };
        let path = if path.starts_with('.') {
            path.clone()
        } else {
            format!(".{path}")
        };
        return match jsonpath::eval(&path, obj) {
            Ok(values) => match values.first() {
                Some(Value::Null) | None => String::new(),
                Some(v) => jsonpath::print_value(v),
            },
            Err(_) => String::new(),
        };
    }
    match (resource.group, resource.kind, field) {
        ("", "Pod", "spec.nodeName" | "spec.host") => str_at(obj, "/spec/nodeName").to_owned(),
        ("", "Pod", "spec.restartPolicy") => str_at(obj, "/spec/restartPolicy").to_owned(),
        ("", "Pod", "spec.schedulerName") => str_at(obj, "/spec/schedulerName").to_owned(),
        ("", "Pod", "spec.serviceAccountName") => {
            str_at(obj, "/spec/serviceAccountName").to_owned()
        }
        ("", "Pod", "spec.hostNetwork") => bool_at(obj, "/spec/hostNetwork").to_string(),
        ("", "Pod", "status.phase") => str_at(obj, "/status/phase").to_owned(),
        ("", "Pod", "status.podIP") => pod_ip(obj).to_owned(),
        ("", "Pod", "status.nominatedNodeName") => {
            str_at(obj, "/status/nominatedNodeName").to_owned()
        }
        ("", "Node", "spec.unschedulable") => bool_at(obj, "/spec/unschedulable").to_string(),
        ("", "ReplicationController", "status.replicas") => {
            int_at(obj, "/status/replicas").to_string()
        }
        ("", "Event", "source") => {
            let component = str_at(obj, "/source/component");
            if component.is_empty() {
                str_at(obj, "/reportingComponent").to_owned()
            } else {
                component.to_owned()
            }
        }
        ("", "Event", f) => match f.strip_prefix("involvedObject.") {
            Some(sub) => str_at(obj, &format!("/involvedObject/{sub}")).to_owned(),
            None => str_at(obj, &format!("/{f}")).to_owned(),
        },
        ("events.k8s.io", "Event", f) => match f.strip_prefix("regarding.") {
            Some(sub) => str_at(obj, &format!("/regarding/{sub}")).to_owned(),
            None => str_at(obj, &format!("/{f}")).to_owned(),
        },
        ("", "Namespace", "status.phase") => str_at(obj, "/status/phase").to_owned(),
        ("", "Secret", "type") => str_at(obj, "/type").to_owned(),
        ("", "Service", "spec.clusterIP") => str_at(obj, "/spec/clusterIP").to_owned(),
        ("", "Service", "spec.type") => str_at(obj, "/spec/type").to_owned(),
        ("certificates.k8s.io", "CertificateSigningRequest", "spec.signerName") => {
            str_at(obj, "/spec/signerName").to_owned()
        }
        ("batch", "Job", "status.successful") => int_at(obj, "/status/succeeded").to_string(),
        _ => String::new(),
    }
}

/// The first pod IP, as the v1→internal conversion fills `podIPs` from
/// `podIP` when only the latter is set.
pub(crate) fn pod_ip(pod: &Value) -> &str {
    pod.pointer("/status/podIPs/0/ip")
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(pod, "/status/podIP"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn parse_err(selector: &str) -> String {
        match parse_label_selector(selector) {
            Ok(s) => panic!("{selector:?} parsed as {s}"),
            Err(e) => e.to_string(),
        }
    }

    const NAME_PART_REGEX: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const LABEL_VALUE_REGEX: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    #[test]
    fn real_world_label_selectors_match_the_labels_they_should() {
        let pod = labels(&[
            ("app.kubernetes.io/name", "agent"),
            ("app.kubernetes.io/instance", "pool-a"),
            ("tier", "backend"),
            ("pod-template-hash", "7c9f8d"),
            ("version", "3"),
        ]);
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("   ", true),
            ("app.kubernetes.io/name=agent", true),
            ("app.kubernetes.io/name==agent", true),
            ("app.kubernetes.io/name = agent", true),
            ("app.kubernetes.io/name!=agent", false),
            ("app.kubernetes.io/name!=other", true),
            ("missing!=x", true),
            ("tier in (backend,frontend)", true),
            ("tier in (frontend)", false),
            ("tier notin (frontend)", true),
            ("missing notin (frontend)", true),
            ("tier notin (backend)", false),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!tier", false),
            ("tier,!missing", true),
            (
                "app.kubernetes.io/name=agent,app.kubernetes.io/instance=pool-a",
                true,
            ),
            (
                "app.kubernetes.io/name=agent,app.kubernetes.io/instance=pool-b",
                false,
            ),
            ("  tier  in  ( backend , frontend )  ,  version  ", true),
            ("version>2", true),
            ("version>3", false),
            ("version<4", true),
            ("tier>1", false),
            ("missing=", false),
            ("missing==", false),
            ("missing!=", true),
            ("tier in (,backend)", true),
            ("tier in ()", false),
            ("missing in ()", false),
            ("missing notin ()", true),
            ("in in (in)", false),
            ("\ttier\n=\rbackend", true),
        ];
        for (selector, want) in cases {
            let parsed = parse_label_selector(selector)
                .unwrap_or_else(|e| panic!("{selector:?} does not parse: {e}"));
            assert_eq!(parsed.matches(&pod), *want, "{selector:?}");
        }
    }

    #[test]
    fn a_key_named_like_an_operator_is_a_key() {
        let l = labels(&[("in", "in"), ("notin", "x")]);
        let cases = [
            ("in in (in)", true),
            ("in=in", true),
            ("notin notin (in)", true),
            ("in", true),
        ];
        for (selector, want) in cases {
            let parsed = parse_label_selector(selector).unwrap();
            assert_eq!(parsed.matches(&l), want, "{selector:?}");
        }
    }

    #[test]
    fn label_selector_syntax_errors_carry_the_apiserver_message() {
        let cases: &[(&str, &str)] = &[
            (
                "x in",
                "unable to parse requirement: found '' expected: '('",
            ),
            (
                "x in (",
                "unable to parse requirement: found '', expected: ',', ')' or identifier",
            ),
            (
                "x in (a",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "x in (a,,)",
                "unable to parse requirement: found ')', expected: ',', or identifier",
            ),
            (
                "x in a",
                "unable to parse requirement: found 'a' expected: '('",
            ),
            (
                "x y",
                "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt",
            ),
            ("x=a b", "found 'b', expected: ',' or 'end of string'"),
            ("x=a,", "found '', expected: identifier after ','"),
            ("x=a,,y", "found ',', expected: identifier after ','"),
            (
                "=a",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
            (
                ",x",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            ("!x=a", "found '=', expected: ',' or 'end of string'"),
            (
                "x=(a)",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            ("x in (a)b", "found 'b', expected: ',' or 'end of string'"),
            (
                "x!==y",
                "unable to parse requirement: found '=', expected: identifier",
            ),
        ];
        for (selector, want) in cases {
            assert_eq!(parse_err(selector), *want, "{selector:?}");
        }
    }

    #[test]
    fn invalid_keys_and_values_are_reported_like_field_errors() {
        let long_key = "k".repeat(64);
        let cases: Vec<(&str, String)> = vec![
            (
                "app:monolith",
                format!("unable to parse requirement: <nil>: Invalid value: \"app:monolith\": {NAME_PART_REGEX}"),
            ),
            (
                "app.kubernetes_io/name=x",
                "unable to parse requirement: <nil>: Invalid value: \"app.kubernetes_io/name\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned(),
            ),
            (
                "/name=x",
                "unable to parse requirement: <nil>: Invalid value: \"/name\": prefix part must be non-empty".to_owned(),
            ),
            (
                "example.com/=x",
                format!("unable to parse requirement: <nil>: Invalid value: \"example.com/\": name part must be non-empty; {NAME_PART_REGEX}"),
            ),
            (
                "a/b/c=x",
                "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_owned(),
            ),
            (
                &long_key,
                format!("unable to parse requirement: <nil>: Invalid value: \"{long_key}\": name part must be no more than 63 characters"),
            ),
            (
                "app=demo-{nginx}",
                format!("unable to parse requirement: values[0][app]: Invalid value: \"demo-{{nginx}}\": {LABEL_VALUE_REGEX}"),
            ),
            (
                "app in (ok, -bad, _worse)",
                format!("unable to parse requirement: [values[0][app]: Invalid value: \"-bad\": {LABEL_VALUE_REGEX}, values[1][app]: Invalid value: \"_worse\": {LABEL_VALUE_REGEX}]"),
            ),
            (
                "environment>qa",
                "unable to parse requirement: values[0]: Invalid value: \"qa\": for 'Gt', 'Lt' operators, the value must be an integer".to_owned(),
            ),
            (
                "*bar",
                format!("unable to parse requirement: <nil>: Invalid value: \"*bar\": {NAME_PART_REGEX}"),
            ),
        ];
        for (selector, want) in cases {
            assert_eq!(parse_err(selector), want, "{selector:?}");
        }
    }

    #[test]
    fn a_value_longer_than_63_characters_is_rejected() {
        let long = "v".repeat(64);
        assert_eq!(
            parse_err(&format!("app={long}")),
            format!(
                "unable to parse requirement: values[0][app]: Invalid value: \"{long}\": must be no more than 63 characters"
            )
        );
    }

    #[test]
    fn a_parsed_selector_prints_sorted_and_normalised() {
        let cases = [
            ("b=2,a=1", "a=1,b=2"),
            ("x in (c,a,b)", "x in (a,b,c)"),
            ("x notin (b,a,a)", "x notin (a,b)"),
            ("!z,y", "y,!z"),
            ("k==v", "k==v"),
            ("k!=v", "k!=v"),
            ("n>3,m<4", "m<4,n>3"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(parse_label_selector(input).unwrap().to_string(), want);
        }
    }

    #[test]
    fn match_labels_and_match_expressions_build_a_selector() {
        let selector = json!({
            "matchLabels": {"app": "agent"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["backend", "worker"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"},
                {"key": "track", "operator": "NotIn", "values": ["beta"]}
            ]
        });
        let s = LabelSelector::from_k8s(&selector).unwrap();
        assert_eq!(
            s.to_string(),
            "app=agent,!canary,tier in (backend,worker),track notin (beta),zone"
        );
        let cases = [
            (
                labels(&[("app", "agent"), ("tier", "worker"), ("zone", "a")]),
                true,
            ),
            (labels(&[("app", "agent"), ("tier", "worker")]), false),
            (
                labels(&[("app", "agent"), ("tier", "web"), ("zone", "a")]),
                false,
            ),
            (
                labels(&[
                    ("app", "agent"),
                    ("tier", "backend"),
                    ("zone", "a"),
                    ("canary", "1"),
                ]),
                false,
            ),
            (
                labels(&[
                    ("app", "agent"),
                    ("tier", "backend"),
                    ("zone", "a"),
                    ("track", "beta"),
                ]),
                false,
            ),
        ];
        for (l, want) in cases {
            assert_eq!(s.matches(&l), want, "{l:?}");
        }
    }

    #[test]
    fn a_missing_selector_selects_nothing_and_an_empty_one_everything() {
        let any = labels(&[("a", "b")]);
        let cases = [
            (json!(null), false, "<none>"),
            (json!({}), true, "<none>"),
            (json!({"matchLabels": {}}), true, "<none>"),
            (json!({"matchLabels": {"a": "b"}}), true, "a=b"),
        ];
        for (selector, want, formatted) in cases {
            let s = LabelSelector::from_k8s(&selector).unwrap();
            assert_eq!(s.matches(&any), want, "{selector}");
            assert_eq!(format_label_selector(&selector), formatted, "{selector}");
        }
    }

    #[test]
    fn invalid_label_selector_objects_are_rejected() {
        let cases = [
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
                "\"Gt\" is not a valid label selector operator".to_owned(),
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
                "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty".to_owned(),
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "values: Invalid value: []string{\"x\"}: values set must be empty for exists and does not exist".to_owned(),
            ),
            (
                json!({"matchLabels": {"bad key": "x"}}),
                format!("key: Invalid value: \"bad key\": {NAME_PART_REGEX}"),
            ),
        ];
        for (selector, want) in cases {
            let err = LabelSelector::from_k8s(&selector).unwrap_err();
            assert_eq!(err.to_string(), want, "{selector}");
            assert_eq!(format_label_selector(&selector), "<error>");
        }
    }

    #[test]
    fn labels_can_be_read_from_json_objects() {
        let pod = json!({"metadata": {"labels": {"app": "agent", "n": 3}}});
        let s = parse_label_selector("app=agent").unwrap();
        assert!(s.matches_object(&pod));
        assert!(s.matches(&pod["metadata"]["labels"]));
        // A non-string value is not a label.
        assert!(!parse_label_selector("n").unwrap().matches_object(&pod));
        assert!(!s.matches_object(&json!({"metadata": {}})));
    }

    #[test]
    fn a_set_selector_needs_every_pair() {
        let s = LabelSelector::from_set(&json!({"app": "agent", "tier": "web"}));
        assert!(s.matches(&labels(&[("app", "agent"), ("tier", "web"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "agent")])));
        assert_eq!(format_labels(&json!({"b": "2", "a": "1"})), "a=1,b=2");
        assert_eq!(format_labels(&json!(null)), "<none>");
    }

    #[test]
    fn exact_match_requirements_are_reported() {
        let s = parse_label_selector("a=1,b in (2),c in (3,4),d!=5").unwrap();
        assert_eq!(s.requires_exact_match("a"), Some("1"));
        assert_eq!(s.requires_exact_match("b"), Some("2"));
        assert_eq!(s.requires_exact_match("c"), None);
        assert_eq!(s.requires_exact_match("d"), None);
        assert_eq!(s.requires_exact_match("e"), None);
    }

    // -- field selectors

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "agent-0", "namespace": "pools"},
            "spec": {"nodeName": "node-1", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                     "serviceAccountName": "agent", "hostNetwork": true},
            "status": {"phase": "Running", "podIP": "127.0.0.5", "podIPs": [{"ip": "127.0.0.5"}],
                       "nominatedNodeName": ""}
        })
    }

    #[test]
    fn pod_field_selectors_match_like_the_apiserver() {
        let pods = FieldResource::built_in("", "Pod", true);
        let p = pod();
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("metadata.name=agent-0", true),
            ("metadata.name==agent-0", true),
            ("metadata.name!=agent-0", false),
            ("metadata.namespace=pools", true),
            ("status.phase=Running", true),
            ("status.phase!=Running", false),
            ("status.phase!=Pending,spec.restartPolicy=Always", true),
            ("spec.nodeName=node-1", true),
            ("spec.host=node-1", true),
            ("spec.nodeName=", false),
            ("spec.schedulerName=default-scheduler", true),
            ("spec.serviceAccountName=agent", true),
            ("spec.hostNetwork=true", true),
            ("status.podIP=127.0.0.5", true),
            ("status.nominatedNodeName=", true),
            ("status.podIPs=", true),
            ("metadata.name=agent-0,status.phase=Pending", false),
            (",metadata.name=agent-0,", true),
        ];
        for (selector, want) in cases {
            let s = parse_field_selector(selector).unwrap();
            s.check(&pods)
                .unwrap_or_else(|e| panic!("{selector:?} rejected: {e}"));
            assert_eq!(s.matches(&p, &pods), *want, "{selector:?}");
        }
    }

    #[test]
    fn a_pod_without_pod_ips_uses_its_pod_ip() {
        let pods = FieldResource::built_in("", "Pod", true);
        let p = json!({"status": {"podIP": "10.0.0.1"}});
        let s = parse_field_selector("status.podIP=10.0.0.1").unwrap();
        assert!(s.matches(&p, &pods));
    }

    #[test]
    fn unsupported_fields_get_the_message_of_their_kind() {
        let crd_fields = vec![".spec.color".to_owned()];
        let cases: Vec<(FieldResource<'_>, &str, &str)> = vec![
            (
                FieldResource::built_in("", "Pod", true),
                "status.hostIP=1",
                "field label not supported: status.hostIP",
            ),
            (
                FieldResource::built_in("", "Node", false),
                "metadata.namespace=x",
                "field label not supported: metadata.namespace",
            ),
            (
                FieldResource::built_in("", "Event", true),
                "message=x",
                "field label not supported: message",
            ),
            (
                FieldResource::built_in("", "Secret", true),
                "data=x",
                "field label not supported: data",
            ),
            (
                FieldResource::built_in("batch", "Job", true),
                "status.succeeded=1",
                "field label \"status.succeeded\" not supported for batchv1.Job",
            ),
            (
                FieldResource::built_in("apps", "Deployment", true),
                "spec.replicas=1",
                "\"spec.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
            ),
            (
                FieldResource::built_in("networking.k8s.io", "Ingress", true),
                "foo.bar=baz",
                "\"foo.bar\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
            ),
            (
                FieldResource::custom("agentdeck.dev", "AgentPool", true, &crd_fields),
                "spec.size=1",
                "field label not supported: spec.size",
            ),
            (
                FieldResource::custom("agentdeck.dev", "Cluster", false, &[]),
                "metadata.namespace=x",
                "field label not supported: metadata.namespace",
            ),
            (
                FieldResource::built_in("", "Pod", true),
                " metadata.name=x",
                "field label not supported:  metadata.name",
            ),
        ];
        for (resource, selector, want) in cases {
            let s = parse_field_selector(selector).unwrap();
            let err = s.check(&resource).unwrap_err();
            assert_eq!(err.to_string(), want, "{} {selector:?}", resource.kind);
        }
    }

    #[test]
    fn supported_fields_pass_the_check_for_each_kind() {
        let cases = [
            (
                FieldResource::built_in("", "Event", true),
                "involvedObject.kind=Pod,involvedObject.name=a,involvedObject.namespace=b,involvedObject.uid=c,involvedObject.apiVersion=v1,involvedObject.resourceVersion=1,involvedObject.fieldPath=x,reason=Started,reportingComponent=kubelet,source=kubelet,type=Normal",
            ),
            (
                FieldResource::built_in("", "Node", false),
                "metadata.name=n,spec.unschedulable=true",
            ),
            (
                FieldResource::built_in("batch", "Job", true),
                "status.successful=1,metadata.namespace=x",
            ),
            (FieldResource::built_in("", "Secret", true), "type=Opaque"),
            (
                FieldResource::built_in("", "Service", true),
                "spec.type=ClusterIP,spec.clusterIP=None",
            ),
            (
                FieldResource::built_in("", "Namespace", false),
                "status.phase=Active",
            ),
            (
                FieldResource::built_in("rbac.authorization.k8s.io", "ClusterRole", false),
                "metadata.namespace=",
            ),
            (
                FieldResource::built_in("events.k8s.io", "Event", true),
                "regarding.name=a,reportingController=x",
            ),
        ];
        for (resource, selector) in cases {
            let s = parse_field_selector(selector).unwrap();
            assert!(s.check(&resource).is_ok(), "{} {selector}", resource.kind);
        }
    }

    #[test]
    fn field_values_are_read_per_kind() {
        let cases: Vec<(FieldResource<'_>, Value, &str, bool)> = vec![
            (
                FieldResource::built_in("", "Node", false),
                json!({"spec": {}}),
                "spec.unschedulable=false",
                true,
            ),
            (
                FieldResource::built_in("", "Node", false),
                json!({"spec": {"unschedulable": true}}),
                "spec.unschedulable=true",
                true,
            ),
            (
                FieldResource::built_in("batch", "Job", true),
                json!({"status": {"succeeded": 2}}),
                "status.successful=2",
                true,
            ),
            (
                FieldResource::built_in("batch", "Job", true),
                json!({"status": {}}),
                "status.successful=0",
                true,
            ),
            (
                FieldResource::built_in("", "Secret", true),
                json!({"type": "kubernetes.io/tls"}),
                "type=kubernetes.io/tls",
                true,
            ),
            (
                FieldResource::built_in("", "Event", true),
                json!({"involvedObject": {"kind": "Pod", "name": "a"}, "reason": "Killing"}),
                "involvedObject.kind=Pod,involvedObject.name=a,reason=Killing",
                true,
            ),
            (
                FieldResource::built_in("", "Event", true),
                json!({"source": {}, "reportingComponent": "kubelet"}),
                "source=kubelet",
                true,
            ),
            (
                FieldResource::built_in("", "Event", true),
                json!({"source": {"component": "scheduler"}, "reportingComponent": "kubelet"}),
                "source=scheduler",
                true,
            ),
            (
                FieldResource::built_in("events.k8s.io", "Event", true),
                json!({"regarding": {"name": "a"}, "reportingController": "k"}),
                "regarding.name=a,reportingController=k",
                true,
            ),
            (
                FieldResource::built_in("", "Pod", true),
                json!({"spec": {}}),
                "spec.hostNetwork=false",
                true,
            ),
        ];
        for (resource, obj, selector, want) in cases {
            let s = parse_field_selector(selector).unwrap();
            s.check(&resource).unwrap();
            assert_eq!(
                s.matches(&obj, &resource),
                want,
                "{} {selector}",
                resource.kind
            );
        }
    }

    #[test]
    fn custom_resources_select_on_their_selectable_fields() {
        let fields = vec![
            ".spec.color".to_owned(),
            ".spec.size".to_owned(),
            "spec.enabled".to_owned(),
        ];
        let cr = FieldResource::custom("agentdeck.dev", "AgentPool", true, &fields);
        let obj = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"color": "blue", "size": 3, "enabled": false}});
        let cases = [
            ("spec.color=blue", true),
            ("spec.color!=blue", false),
            ("spec.size=3", true),
            ("spec.enabled=false", true),
            ("metadata.name=a,metadata.namespace=n", true),
        ];
        for (selector, want) in cases {
            let s = parse_field_selector(selector).unwrap();
            s.check(&cr).unwrap();
            assert_eq!(s.matches(&obj, &cr), want, "{selector}");
        }
        let missing = json!({"metadata": {"name": "b"}, "spec": {}});
        assert!(
            parse_field_selector("spec.color=")
                .unwrap()
                .matches(&missing, &cr)
        );
    }

    #[test]
    fn field_selector_values_are_unescaped() {
        let cases = [
            ("metadata.name=a\\,b", "a,b"),
            ("metadata.name=a\\=b", "a=b"),
            ("metadata.name=a\\\\b", "a\\b"),
            ("metadata.name==x", "x"),
            ("metadata.name=", ""),
        ];
        for (selector, want) in cases {
            let s = parse_field_selector(selector).unwrap();
            assert_eq!(s.terms().len(), 1, "{selector}");
            assert_eq!(s.terms()[0].value, want, "{selector}");
            assert_eq!(s.requires_exact_match("metadata.name"), Some(want));
        }
    }

    #[test]
    fn field_selector_syntax_errors_carry_the_apiserver_message() {
        let cases = [
            (
                "metadata.name",
                "invalid selector: 'metadata.name'; can't understand 'metadata.name'",
            ),
            ("a=1,b", "invalid selector: 'a=1,b'; can't understand 'b'"),
            (
                "metadata.name=a=b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "metadata.name=a\\,b,c",
                "invalid selector: 'metadata.name=a\\,b,c'; can't understand 'c'",
            ),
            (
                "metadata.name=a\\x",
                "invalid field selector: invalid escape sequence: \\x",
            ),
            (
                "metadata.name=a\\",
                "invalid field selector: invalid escape sequence: \\",
            ),
        ];
        for (selector, want) in cases {
            let err = parse_field_selector(selector).unwrap_err();
            assert_eq!(err.to_string(), want, "{selector}");
        }
    }

    #[test]
    fn field_terms_are_evaluated_in_sorted_order() {
        let s = parse_field_selector("z=1,a!=2").unwrap();
        let fields: Vec<&str> = s.terms().iter().map(|t| t.field.as_str()).collect();
        assert_eq!(fields, ["a", "z"]);
        // So the first unsupported field in sorted order is the one reported.
        let err = s
            .check(&FieldResource::built_in("", "Pod", true))
            .unwrap_err();
        assert_eq!(err.to_string(), "field label not supported: a");
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        let cases = [
            ("plain", "\"plain\""),
            ("a\"b", "\"a\\\"b\""),
            ("tab\there", "\"tab\\there\""),
            ("nul\u{0}", "\"nul\\x00\""),
            ("ünï", "\"ünï\""),
        ];
        for (input, want) in cases {
            assert_eq!(go_quote(input), want);
        }
    }
}
