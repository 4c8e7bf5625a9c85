//! The one loading mechanism behind both configuration files: find the file,
//! parse it to a JSON tree, check it against the type's JSON schema (so a
//! mistake names its key path), apply environment overrides by walking the
//! same schema, deserialize, validate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::validate::{InvalidField, quoted};
use super::{ConfigError, ConfigSources, Origin, RESERVED_ENV_VARS};

/// What the generic loader needs to know about a configuration type.
pub(crate) trait ConfigFile: Serialize + DeserializeOwned + JsonSchema + Default {
    /// File name searched for (`agentdeck.yaml`).
    const FILE_NAME: &'static str;
    /// Prefix of overriding variables (`AGENTDECK_`).
    const ENV_PREFIX: &'static str;
    /// Variables with the prefix that belong to another configuration.
    const FOREIGN_ENV_PREFIXES: &'static [&'static str];

    /// Range and consistency checks after loading.
    fn validate(&self) -> Result<(), InvalidField>;
}

/// A configuration as loaded, with the file it came from and what was
/// ignored on the way (unknown variables), for the caller to report once.
pub(crate) struct Loaded<T> {
    pub config: T,
    pub file: Option<PathBuf>,
    pub warnings: Vec<String>,
}

/// Loads `T` from `sources`; returns it, the file it came from and warnings.
pub(crate) fn load<T: ConfigFile>(sources: &ConfigSources) -> Result<Loaded<T>, ConfigError> {
    let schema = schema_of::<T>();
    let root = Field::of(&schema);
    let file = sources.find(T::FILE_NAME)?;
    let mut tree = match &file {
        Some(path) => {
            let mut tree = read_yaml(path)?;
            drop_empty_sections(&mut tree, &root);
            check(&tree, &root, &mut Vec::new(), &Origin::File(path.clone()))?;
            tree
        }
        None => Value::Object(Map::new()),
    };
    let mut warnings = Vec::new();
    let overrides = apply_env::<T>(&mut tree, &root, &sources.env, &mut warnings)?;
    let origin_of_whole = match (&file, overrides.values().next()) {
        (Some(path), _) => Origin::File(path.clone()),
        (None, Some(var)) => Origin::Env(var.clone()),
        (None, None) => Origin::Defaults,
    };
    let config: T = serde_json::from_value(tree).map_err(|err| ConfigError::Rejected {
        origin: origin_of_whole,
        message: err.to_string(),
    })?;
    config.validate().map_err(|invalid| {
        let origin = origin_of(&invalid, &overrides, file.as_deref());
        ConfigError::InvalidValue {
            origin,
            field: invalid.field,
            value: invalid.value,
            expected: invalid.expected,
        }
    })?;
    Ok(Loaded {
        config,
        file,
        warnings,
    })
}

/// Every key that can be set, as `(key path, environment variable)`, in
/// schema order; sections are not listed, their keys are.
pub(crate) fn env_vars<T: ConfigFile>() -> Vec<(String, String)> {
    fn walk(
        field: &Field<'_>,
        path: &mut Vec<String>,
        prefix: &str,
        out: &mut Vec<(String, String)>,
    ) {
        match &field.shape {
            Shape::Struct(props) => {
                for (key, sub) in *props {
                    path.push(key.clone());
                    walk(&Field::of(sub), path, prefix, out);
                    path.pop();
                }
            }
            _ => out.push((path.join("."), env_name(prefix, path))),
        }
    }
    let schema = schema_of::<T>();
    let mut out = Vec::new();
    walk(
        &Field::of(&schema),
        &mut Vec::new(),
        T::ENV_PREFIX,
        &mut out,
    );
    out
}

fn schema_of<T: JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

fn read_yaml(path: &Path) -> Result<Value, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::InvalidData {
            ConfigError::NotText {
                path: path.to_owned(),
            }
        } else {
            ConfigError::ReadFailed {
                path: path.to_owned(),
                source,
            }
        }
    })?;
    if is_blank_yaml(&text) {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value = serde_saphyr::from_str(&text).map_err(|err| {
        let location = err.location();
        ConfigError::Syntax {
            path: path.to_owned(),
            line: location.as_ref().map(|l| l.line()),
            column: location.as_ref().map(|l| l.column()),
            message: first_line(&err.to_string()),
        }
    })?;
    // An empty document (`---` alone) means "no settings".
    Ok(if value.is_null() {
        Value::Object(Map::new())
    } else {
        value
    })
}

/// Removes sections written with nothing below them (`healthProbe:` with
/// every key commented out), which YAML reads as null: they mean "defaults".
fn drop_empty_sections(tree: &mut Value, field: &Field<'_>) {
    let (Shape::Struct(props), Value::Object(map)) = (&field.shape, tree) else {
        return;
    };
    map.retain(|key, value| {
        let Some(sub) = props.get(key) else {
            return true;
        };
        let sub = Field::of(sub);
        let is_section = matches!(sub.shape, Shape::Struct(_));
        if is_section && !sub.nullable && value.is_null() {
            return false;
        }
        drop_empty_sections(value, &sub);
        true
    });
}

fn is_blank_yaml(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#')
    })
}

/// The parser's message without the source snippet it may append and
/// without its own `error: line L column C:` prefix; the location is
/// reported separately.
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default().trim();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    let without_location = line
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
        .map(|(_, text)| text);
    without_location.unwrap_or(line).to_owned()
}

/// Which origin to blame for a failed validation: the variable that set the
/// key (or the related key), else the file, else the variables, else the
/// defaults.
fn origin_of(
    invalid: &InvalidField,
    overrides: &BTreeMap<String, String>,
    file: Option<&Path>,
) -> Origin {
    let fields = std::iter::once(&invalid.field).chain(invalid.related.as_ref());
    for field in fields {
        let set_by = overrides.iter().find(|(path, _)| {
            field == *path
                || field.starts_with(&format!("{path}."))
                || field.starts_with(&format!("{path}["))
        });
        if let Some((_, var)) = set_by {
            return Origin::Env(var.clone());
        }
    }
    match (file, overrides.values().next()) {
        (Some(path), _) => Origin::File(path.to_owned()),
        (None, Some(var)) => Origin::Env(var.clone()),
        (None, None) => Origin::Defaults,
    }
}

/// What a schema node accepts, reduced to what the loader distinguishes.
#[derive(Debug)]
struct Field<'s> {
    shape: Shape<'s>,
    nullable: bool,
}

#[derive(Debug)]
enum Shape<'s> {
    /// A struct: exactly these keys.
    Struct(&'s Map<String, Value>),
    /// A map with free keys and values of the given schema.
    Map(Option<&'s Value>),
    List(Option<&'s Value>),
    Integer {
        min: Option<i128>,
        max: Option<i128>,
    },
    Number,
    Bool,
    Text,
    /// One of these strings (an enum).
    Choice(Vec<String>),
    /// Only `null`.
    Null,
    /// Anything (a schema the loader does not understand).
    Any,
}

impl<'s> Field<'s> {
    fn of(schema: &'s Value) -> Field<'s> {
        let any = Field {
            shape: Shape::Any,
            nullable: true,
        };
        let Some(node) = schema.as_object() else {
            return any;
        };
        if let Some(values) = node.get("enum").and_then(Value::as_array) {
            return Field {
                shape: Shape::Choice(
                    values
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect(),
                ),
                nullable: values.iter().any(Value::is_null),
            };
        }
        if let Some(value) = node.get("const") {
            return match value.as_str() {
                Some(text) => Field {
                    shape: Shape::Choice(vec![text.to_owned()]),
                    nullable: false,
                },
                None => any,
            };
        }
        for union in ["oneOf", "anyOf"] {
            if let Some(branches) = node.get(union).and_then(Value::as_array) {
                return Field::union(branches.iter().map(Field::of));
            }
        }
        let types: Vec<&str> = match node.get("type") {
            Some(Value::String(one)) => vec![one.as_str()],
            Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
            _ => return any,
        };
        let nullable = types.contains(&"null");
        let mut concrete = types.iter().filter(|t| **t != "null");
        let shape = match (concrete.next(), concrete.next()) {
            (None, _) => Shape::Null,
            (Some(_), Some(_)) => Shape::Any,
            (Some(kind), None) => match *kind {
                "object" => match node.get("properties").and_then(Value::as_object) {
                    Some(props) => Shape::Struct(props),
                    None => Shape::Map(node.get("additionalProperties").filter(|v| v.is_object())),
                },
                "array" => Shape::List(node.get("items")),
                "integer" => Shape::Integer {
                    min: node.get("minimum").and_then(as_i128),
                    max: node.get("maximum").and_then(as_i128),
                },
                "number" => Shape::Number,
                "boolean" => Shape::Bool,
                "string" => Shape::Text,
                _ => Shape::Any,
            },
        };
        Field { shape, nullable }
    }

    fn union(branches: impl Iterator<Item = Field<'s>>) -> Field<'s> {
        let mut nullable = false;
        let mut choices = Vec::new();
        let mut others = Vec::new();
        for branch in branches {
            nullable |= branch.nullable;
            match branch.shape {
                Shape::Null => {}
                Shape::Choice(names) => choices.extend(names),
                shape => others.push(shape),
            }
        }
        let shape = match (choices.is_empty(), others.len()) {
            (false, 0) => Shape::Choice(choices),
            (true, 1) => others.pop().unwrap_or(Shape::Any),
            (true, 0) => Shape::Null,
            _ => Shape::Any,
        };
        Field { shape, nullable }
    }

    fn expected(&self) -> String {
        let base = match &self.shape {
            Shape::Struct(props) => format!(
                "a mapping with the keys {}",
                props.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            Shape::Map(values) => match values.map(Field::of) {
                Some(values) => format!("a mapping of names to {}", values.expected_plural()),
                None => "a mapping".to_owned(),
            },
            Shape::List(items) => match items.map(Field::of) {
                Some(items) => format!("a list of {}", items.expected_plural()),
                None => "a list".to_owned(),
            },
            Shape::Integer { min, max } => match (min, max) {
                (Some(min), Some(max)) if *max <= i128::from(u32::MAX) => {
                    format!("a whole number from {min} to {max}")
                }
                (Some(min), _) => format!("a whole number, {min} or more"),
                _ => "a whole number".to_owned(),
            },
            Shape::Number => "a number".to_owned(),
            Shape::Bool => "true or false".to_owned(),
            Shape::Text => "a string".to_owned(),
            Shape::Choice(names) => format!("one of {}", names.join(", ")),
            Shape::Null => "null".to_owned(),
            Shape::Any => "a value".to_owned(),
        };
        match (&self.shape, self.nullable) {
            (Shape::Null | Shape::Any, _) | (_, false) => base,
            (_, true) => format!("{base}, or null to leave it unset"),
        }
    }

    fn expected_plural(&self) -> String {
        match &self.shape {
            Shape::Text => "strings".to_owned(),
            Shape::Integer { .. } => "whole numbers".to_owned(),
            Shape::Choice(names) => format!("values among {}", names.join(", ")),
            _ => format!("values ({})", self.expected()),
        }
    }
}

fn as_i128(value: &Value) -> Option<i128> {
    value
        .as_i64()
        .map(i128::from)
        .or_else(|| value.as_u64().map(i128::from))
        // Truncation is intended: schema bounds of integer types are integral.
        .or_else(|| value.as_f64().map(|f| f as i128))
}

/// Checks `value` against `field`, naming `origin` and the key path in errors.
fn check(
    value: &Value,
    field: &Field<'_>,
    path: &mut Vec<String>,
    origin: &Origin,
) -> Result<(), ConfigError> {
    let invalid = |path: &[String]| ConfigError::InvalidValue {
        origin: origin.clone(),
        field: display_path(path),
        value: shorten(&value.to_string()),
        expected: field.expected(),
    };
    if value.is_null() {
        return match field.shape {
            Shape::Null | Shape::Any => Ok(()),
            _ if field.nullable => Ok(()),
            _ => Err(invalid(path)),
        };
    }
    match &field.shape {
        Shape::Struct(props) => {
            let map = value.as_object().ok_or_else(|| invalid(path))?;
            for (key, item) in map {
                let Some(sub) = props.get(key) else {
                    let section = display_path(path);
                    path.push(key.clone());
                    return Err(ConfigError::UnknownKey {
                        origin: origin.clone(),
                        key: display_path(path),
                        section: if path.len() == 1 {
                            String::new()
                        } else {
                            section
                        },
                        valid: props.keys().cloned().collect(),
                    });
                };
                path.push(key.clone());
                check(item, &Field::of(sub), path, origin)?;
                path.pop();
            }
            Ok(())
        }
        Shape::Map(values) => {
            let map = value.as_object().ok_or_else(|| invalid(path))?;
            if let Some(values) = values {
                let values = Field::of(values);
                for (key, item) in map {
                    path.push(key.clone());
                    check(item, &values, path, origin)?;
                    path.pop();
                }
            }
            Ok(())
        }
        Shape::List(items) => {
            let list = value.as_array().ok_or_else(|| invalid(path))?;
            if let Some(items) = items {
                let items = Field::of(items);
                for (index, item) in list.iter().enumerate() {
                    path.push(format!("[{index}]"));
                    check(item, &items, path, origin)?;
                    path.pop();
                }
            }
            Ok(())
        }
        Shape::Integer { min, max } => {
            let number = value
                .as_i64()
                .map(i128::from)
                .or_else(|| value.as_u64().map(i128::from))
                .ok_or_else(|| invalid(path))?;
            let in_range =
                min.is_none_or(|min| number >= min) && max.is_none_or(|max| number <= max);
            in_range.then_some(()).ok_or_else(|| invalid(path))
        }
        Shape::Number => value.is_number().then_some(()).ok_or_else(|| invalid(path)),
        Shape::Bool => value
            .is_boolean()
            .then_some(())
            .ok_or_else(|| invalid(path)),
        Shape::Text => value.is_string().then_some(()).ok_or_else(|| invalid(path)),
        Shape::Choice(names) => match value.as_str() {
            Some(text) if names.iter().any(|name| name == text) => Ok(()),
            _ => Err(invalid(path)),
        },
        Shape::Null => Err(invalid(path)),
        Shape::Any => Ok(()),
    }
}

/// `healthProbe.intervalSeconds`, `namespaces[1]`; list indexes are stored
/// as `[n]` segments and attach to the key before them.
fn display_path(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        if !out.is_empty() && !segment.starts_with('[') {
            out.push('.');
        }
        out.push_str(segment);
    }
    if out.is_empty() {
        "(top level)".to_owned()
    } else {
        out
    }
}

fn shorten(text: &str) -> String {
    const LIMIT: usize = 80;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// `healthProbe` → `HEALTH_PROBE`.
fn env_segment(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for (index, ch) in key.chars().enumerate() {
        if ch.is_ascii_uppercase() && index > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

fn env_name(prefix: &str, path: &[String]) -> String {
    let segments: Vec<String> = path.iter().map(|key| env_segment(key)).collect();
    format!("{prefix}{}", segments.join("__"))
}

/// Whether `name=value` has the shape of a variable Kubernetes injects for
/// a Service (service links), checking the value too so that a typo such as
/// `AGENTDECK_SERVER_PORT=9090` is still reported:
///
/// | name                               | value                 |
/// |------------------------------------|-----------------------|
/// | `<SVC>_SERVICE_HOST`               | an IP address         |
/// | `<SVC>_SERVICE_PORT[_<NAME>]`      | a port number         |
/// | `<SVC>_PORT`                       | `tcp://10.96.0.5:8080` |
/// | `<SVC>_PORT_<n>_<PROTO>`           | `tcp://10.96.0.5:8080` |
/// | `<SVC>_PORT_<n>_<PROTO>_PROTO`     | `tcp`                 |
/// | `<SVC>_PORT_<n>_<PROTO>_PORT`      | a port number         |
/// | `<SVC>_PORT_<n>_<PROTO>_ADDR`      | an IP address         |
///
/// A Service named `agentdeck-controller` gives every later pod of its
/// namespace `AGENTDECK_CONTROLLER_PORT=tcp://…`: never configuration.
pub(crate) fn is_service_link(name: &str, value: &str) -> bool {
    let is_ip = || value.parse::<std::net::IpAddr>().is_ok();
    let is_port = || !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    let is_url = || {
        ["tcp://", "udp://", "sctp://"]
            .iter()
            .any(|scheme| value.starts_with(scheme))
    };
    if name.ends_with("_SERVICE_HOST") {
        return is_ip();
    }
    if name.ends_with("_SERVICE_PORT") {
        return is_port();
    }
    if let Some((_, port_name)) = name.rsplit_once("_SERVICE_PORT_") {
        return !port_name.is_empty() && is_port();
    }
    if name.ends_with("_PORT") && is_url() {
        return true;
    }
    let Some(idx) = name.rfind("_PORT_") else {
        return false;
    };
    let mut parts = name[idx + "_PORT_".len()..].split('_');
    let number = parts.next().unwrap_or_default();
    let proto = parts.next().unwrap_or_default();
    let suffix = parts.next();
    let shaped = !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
        && matches!(proto, "TCP" | "UDP" | "SCTP")
        && parts.next().is_none();
    shaped
        && match suffix {
            None => is_url(),
            Some("PROTO") => value.eq_ignore_ascii_case(proto),
            Some("PORT") => is_port(),
            Some("ADDR") => is_ip(),
            Some(_) => false,
        }
}

/// Edit distance (insert, delete, substitute: 1 each), for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The valid variable closest to `name`: one that extends it (a section or
/// a cut-off key) first, else the fewest edits away.
fn closest<'a>(name: &str, valid: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    valid.into_iter().min_by_key(|candidate| {
        (
            !candidate.starts_with(name),
            edit_distance(name, candidate),
            candidate.len(),
        )
    })
}

/// Applies the variables meant for `T` to `tree`; returns which key path each
/// one set. A variable naming no key is not an error (Kubernetes injects
/// `AGENTDECK_*`-looking variables for Services named `agentdeck-…`):
/// service-link shapes are skipped silently, anything else becomes one
/// warning naming the closest valid variable.
fn apply_env<T: ConfigFile>(
    tree: &mut Value,
    root: &Field<'_>,
    env: &[(String, String)],
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut vars: Vec<&(String, String)> = env
        .iter()
        .filter(|(name, _)| {
            name.starts_with(T::ENV_PREFIX)
                && !T::FOREIGN_ENV_PREFIXES
                    .iter()
                    .any(|foreign| name.starts_with(foreign))
                && !RESERVED_ENV_VARS.contains(&name.as_str())
        })
        .collect();
    vars.sort();
    let mut applied = BTreeMap::new();
    let mut known: Option<Vec<(String, String)>> = None;
    for (name, raw) in vars {
        let (path, field) = match resolve_env::<T>(name, root) {
            Ok(found) => found,
            Err(ConfigError::UnknownEnvVar { .. }) if is_service_link(name, raw) => continue,
            Err(ConfigError::UnknownEnvVar { .. }) => {
                let known = known.get_or_insert_with(env_vars::<T>);
                let hint = closest(name, known.iter().map(|(_, var)| var.as_str()))
                    .map(|var| format!("; did you mean {var}?"))
                    .unwrap_or_default();
                warnings.push(format!(
                    "environment variable {name} names no configuration key and is ignored{hint}"
                ));
                continue;
            }
            Err(other) => return Err(other),
        };
        let origin = Origin::Env(name.clone());
        let value = coerce(raw, &field).map_err(|()| ConfigError::InvalidValue {
            origin: origin.clone(),
            field: display_path(&path),
            value: shorten(&quoted(raw)),
            expected: field.expected(),
        })?;
        check(&value, &field, &mut path.clone(), &origin)?;
        set(tree, &path, value);
        applied.insert(display_path(&path), name.clone());
    }
    Ok(applied)
}

/// Finds the key a variable names by walking the schema one `__`-separated
/// segment at a time.
fn resolve_env<'s, T: ConfigFile>(
    name: &str,
    root: &Field<'s>,
) -> Result<(Vec<String>, Field<'s>), ConfigError> {
    let rest = &name[T::ENV_PREFIX.len()..];
    let mut path: Vec<String> = Vec::new();
    let mut props = match root.shape {
        Shape::Struct(props) => props,
        _ => {
            return Err(ConfigError::Internal(
                "configuration root is not a struct".into(),
            ));
        }
    };
    let unknown = |path: &[String], props: &Map<String, Value>| {
        let level_prefix = if path.is_empty() {
            T::ENV_PREFIX.to_owned()
        } else {
            format!("{}__", env_name(T::ENV_PREFIX, path))
        };
        let valid = props
            .iter()
            .map(|(key, sub)| {
                let mut full = path.to_vec();
                full.push(key.clone());
                let var = env_name(T::ENV_PREFIX, &full);
                match Field::of(sub).shape {
                    Shape::Struct(_) => format!("{var}__*"),
                    _ => var,
                }
            })
            .collect();
        ConfigError::UnknownEnvVar {
            var: name.to_owned(),
            prefix: if path.is_empty() {
                String::new()
            } else {
                level_prefix
            },
            valid,
        }
    };
    let segments: Vec<&str> = rest.split("__").collect();
    for (index, segment) in segments.iter().enumerate() {
        let Some((key, sub)) = props.iter().find(|(key, _)| env_segment(key) == *segment) else {
            return Err(unknown(&path, props));
        };
        path.push(key.clone());
        let field = Field::of(sub);
        let last = index + 1 == segments.len();
        match (field.shape, last) {
            (Shape::Struct(inner), false) => props = inner,
            // A section named on its own: list the keys it has.
            (Shape::Struct(inner), true) => return Err(unknown(&path, inner)),
            (_, true) => return Ok((path, Field::of(sub))),
            // Segments below a plain key.
            (_, false) => return Err(unknown(&path[..path.len() - 1], props)),
        }
    }
    Err(unknown(&path, props))
}

/// Turns a variable's text into a value of the key's type.
fn coerce(raw: &str, field: &Field<'_>) -> Result<Value, ()> {
    let text = raw.trim();
    if field.nullable && text.is_empty() {
        return Ok(Value::Null);
    }
    match &field.shape {
        Shape::Integer { .. } => text
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| text.parse::<u64>().map(Value::from))
            .map_err(drop),
        Shape::Number => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or(()),
        Shape::Bool => match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::Bool(true)),
            "false" | "0" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err(()),
        },
        Shape::Text | Shape::Choice(_) | Shape::Any => Ok(Value::String(raw.to_owned())),
        Shape::Null => Err(()),
        Shape::List(items) => {
            if text.starts_with('[') {
                return serde_json::from_str(text).map_err(drop);
            }
            let items = items.map(Field::of).unwrap_or(Field {
                shape: Shape::Text,
                nullable: false,
            });
            text.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| coerce(item, &items))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        Shape::Map(values) => {
            if text.starts_with('{') {
                return serde_json::from_str(text).map_err(drop);
            }
            let values = values.map(Field::of).unwrap_or(Field {
                shape: Shape::Text,
                nullable: false,
            });
            let mut map = Map::new();
            for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once('=').ok_or(())?;
                map.insert(key.trim().to_owned(), coerce(value.trim(), &values)?);
            }
            Ok(Value::Object(map))
        }
        Shape::Struct(_) => Err(()),
    }
}

/// Sets `path` in `tree`, creating the mappings on the way.
fn set(tree: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = tree;
    for key in parents {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else {
            return;
        };
        node = map
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !node.is_object() {
        *node = Value::Object(Map::new());
    }
    if let Value::Object(map) = node {
        map.insert(last.clone(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_keys_become_upper_snake_env_segments() {
        assert_eq!(env_segment("healthProbe"), "HEALTH_PROBE");
        assert_eq!(env_segment("intervalSeconds"), "INTERVAL_SECONDS");
        assert_eq!(env_segment("theme"), "THEME");
        let path = ["healthProbe".to_owned(), "intervalSeconds".to_owned()];
        assert_eq!(
            env_name("AGENTDECK_", &path),
            "AGENTDECK_HEALTH_PROBE__INTERVAL_SECONDS"
        );
    }

    #[test]
    fn key_paths_are_displayed_with_dots_and_indexes() {
        let path = ["namespaces".to_owned(), "[1]".to_owned()];
        assert_eq!(display_path(&path), "namespaces[1]");
        assert_eq!(display_path(&[]), "(top level)");
    }

    #[test]
    fn set_creates_missing_sections() {
        let mut tree = serde_json::json!({"other": 1});
        set(&mut tree, &["a".to_owned(), "b".to_owned()], Value::from(2));
        assert_eq!(tree, serde_json::json!({"other": 1, "a": {"b": 2}}));
    }

    #[test]
    fn parser_messages_lose_their_duplicate_location_prefix() {
        assert_eq!(
            first_line("error: line 3 column 20: unclosed bracket '['\n  snippet"),
            "unclosed bracket '['"
        );
        assert_eq!(first_line("something else"), "something else");
    }

    #[test]
    fn comment_only_files_count_as_blank() {
        assert!(is_blank_yaml("# nothing\n\n   # here\n"));
        assert!(!is_blank_yaml("# a\ntheme: x\n"));
    }

    #[test]
    fn list_and_map_variables_accept_comma_and_json_forms() {
        let list = Field {
            shape: Shape::List(None),
            nullable: false,
        };
        assert_eq!(
            coerce("a, b,,c", &list),
            Ok(serde_json::json!(["a", "b", "c"]))
        );
        assert_eq!(coerce(r#"["a,b"]"#, &list), Ok(serde_json::json!(["a,b"])));
        assert_eq!(coerce("", &list), Ok(serde_json::json!([])));
        let map = Field {
            shape: Shape::Map(None),
            nullable: false,
        };
        assert_eq!(
            coerce("q=x, s = y", &map),
            Ok(serde_json::json!({"q": "x", "s": "y"}))
        );
        assert_eq!(
            coerce(r#"{"q":","}"#, &map),
            Ok(serde_json::json!({"q": ","}))
        );
        assert_eq!(coerce("novalue", &map), Err(()));
    }

    #[test]
    fn boolean_variables_accept_common_spellings_only() {
        let field = Field {
            shape: Shape::Bool,
            nullable: false,
        };
        for (text, expected) in [
            ("true", true),
            ("ON", true),
            ("1", true),
            ("no", false),
            ("False", false),
        ] {
            assert_eq!(coerce(text, &field), Ok(Value::Bool(expected)), "{text}");
        }
        assert_eq!(coerce("maybe", &field), Err(()));
    }
}
