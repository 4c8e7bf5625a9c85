//! `config/README.md` is the configuration reference: every key of
//! `agentdeck.yaml` and `agentdeck-agent.yaml`, its default and its
//! environment variable, plus the other `AGENTDECK_*` variables agentdeck
//! reads. These tests hold it to the code, both ways, so it cannot drift: a
//! key added, renamed or given a new default without the document fails
//! here, and so does a row the code no longer has.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use agentdeck::config::{AgentConfig, Config, RESERVED_ENV_VARS};
use serde_json::Value;

fn reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join("README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rows of the document's key tables, `| `key` | `default` | `VARIABLE` | … |`,
/// by variable (unique across both files, unlike the key paths): `(key, default)`.
fn key_rows(doc: &str) -> BTreeMap<String, (String, String)> {
    let mut rows = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if !line.trim_start().starts_with('|') || cells.len() < 4 {
            continue;
        }
        let unquote = |cell: &str| {
            cell.strip_prefix('`')
                .and_then(|c| c.strip_suffix('`'))
                .map(str::to_owned)
        };
        let (Some(key), Some(default), Some(var)) =
            (unquote(cells[0]), unquote(cells[1]), unquote(cells[2]))
        else {
            continue;
        };
        if !var.starts_with("AGENTDECK_") {
            continue;
        }
        let previous = rows.insert(var.clone(), (key, default));
        assert!(previous.is_none(), "config/README.md lists {var} twice");
    }
    rows
}

/// Every leaf of a serialized configuration as `(key path, value)`; a map
/// or list is one key (it is set whole), a section is not.
fn leaves(value: &Value, sections: &[&str]) -> Vec<(String, Value)> {
    fn walk(
        value: &Value,
        path: &mut Vec<String>,
        sections: &[&str],
        out: &mut Vec<(String, Value)>,
    ) {
        let joined = path.join(".");
        match value {
            Value::Object(map) if path.is_empty() || sections.contains(&joined.as_str()) => {
                for (key, sub) in map {
                    path.push(key.clone());
                    walk(sub, path, sections, out);
                    path.pop();
                }
            }
            other => out.push((joined, other.clone())),
        }
    }
    let mut out = Vec::new();
    walk(value, &mut Vec::new(), sections, &mut out);
    out
}

/// A default as the document writes it: strings bare, everything else as
/// JSON (`null`, `[]`, `{}`, `30`, `true`).
fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Checks one configuration type against the document's rows for its
/// variables (those starting with `prefix` and not with `other_prefix`).
fn check_file(
    doc: &str,
    file: &str,
    defaults: Value,
    env_vars: Vec<(String, String)>,
    prefix: &str,
    other_prefix: Option<&str>,
) {
    let rows = key_rows(doc);
    // Sections are the keys the loader does not list itself, only their keys.
    let settable: BTreeMap<String, String> = env_vars.into_iter().collect();
    let sections: Vec<String> = settable
        .keys()
        .filter_map(|key| key.rsplit_once('.').map(|(section, _)| section.to_owned()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let sections: Vec<&str> = sections.iter().map(String::as_str).collect();
    let defaults = leaves(&defaults, &sections);

    let walked: BTreeSet<&str> = defaults.iter().map(|(key, _)| key.as_str()).collect();
    let listed: BTreeSet<&str> = settable.keys().map(String::as_str).collect();
    assert_eq!(
        walked, listed,
        "{file}: the serialized defaults and the loader's keys differ"
    );

    let mut problems = Vec::new();
    for (key, default) in &defaults {
        let var = &settable[key];
        match rows.get(var) {
            None => problems.push(format!(
                "{file}: no row `{key}` | `{}` | `{var}`",
                shown(default)
            )),
            Some((doc_key, doc_default)) => {
                if doc_key != key {
                    problems.push(format!(
                        "{var}: the row names `{doc_key}`, the key is `{key}`"
                    ));
                }
                if *doc_default != shown(default) {
                    problems.push(format!(
                        "{file} `{key}`: the document says the default is `{doc_default}`, the code `{}`",
                        shown(default)
                    ));
                }
            }
        }
    }
    // And no row for a key the code does not have.
    for (var, (key, _)) in &rows {
        let ours =
            var.starts_with(prefix) && other_prefix.is_none_or(|other| !var.starts_with(other));
        if ours && !settable.values().any(|v| v == var) {
            problems.push(format!(
                "{file}: the document lists `{key}` / {var}, which the code does not have"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "config/README.md is out of date:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_controller_key_is_documented_with_its_default_and_variable() {
    check_file(
        &reference(),
        "agentdeck.yaml",
        serde_json::to_value(Config::default()).expect("config serializes"),
        Config::env_vars(),
        "AGENTDECK_",
        Some("AGENTDECK_AGENT_"),
    );
}

#[test]
fn every_agent_key_is_documented_with_its_default_and_variable() {
    check_file(
        &reference(),
        "agentdeck-agent.yaml",
        serde_json::to_value(AgentConfig::default()).expect("agent config serializes"),
        AgentConfig::env_vars(),
        "AGENTDECK_AGENT_",
        None,
    );
}

/// `AGENTDECK_*` names in string literals of the crate's code (test modules
/// excluded: by this crate's convention they end each file): every variable
/// something reads or sets, besides the keys' own.
fn variables_in_source() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source is text");
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (at, _) in code.match_indices("\"AGENTDECK_") {
                let name: String = code[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // `"AGENTDECK_"` and `"AGENTDECK_AGENT_"` are the prefixes.
                if !name.ends_with('_') && code[at + 1 + name.len()..].starts_with('"') {
                    found.insert(name);
                }
            }
        }
    }
    found
}

#[test]
fn every_other_agentdeck_variable_the_code_reads_is_documented() {
    let doc = reference();
    let keys: BTreeSet<String> = Config::env_vars()
        .into_iter()
        .chain(AgentConfig::env_vars())
        .map(|(_, var)| var)
        .collect();
    let named = |var: &str| doc.contains(&format!("`{var}`"));
    let sandbox = [
        agentdeck::sandbox::kubelet::EXE_ENV,
        agentdeck::sandbox::kubelet::MOUNT_NAMESPACES_ENV,
        agentdeck::sandbox::retention::COMPACTION_INTERVAL_ENV,
        agentdeck::sandbox::retention::EVENT_TTL_ENV,
    ];
    let in_source = variables_in_source();
    assert!(
        in_source.contains("AGENTDECK_BUNDLE_REDACT"),
        "the source scan finds nothing: {in_source:?}"
    );
    let missing: Vec<&str> = RESERVED_ENV_VARS
        .iter()
        .copied()
        .chain(sandbox)
        .chain(in_source.iter().map(String::as_str))
        .filter(|var| !keys.contains(*var) && !named(var))
        .collect();
    assert!(
        missing.is_empty(),
        "config/README.md does not name these variables: {missing:?}"
    );
}

#[test]
fn a_key_left_out_of_the_document_is_found() {
    let doc = reference();
    let without = doc
        .lines()
        .filter(|line| !line.contains("`AGENTDECK_HEALTH_PROBE__TIMEOUT_SECONDS`"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(
        doc.lines().count(),
        without.lines().count(),
        "the row exists"
    );
    let check = std::panic::catch_unwind(|| {
        check_file(
            &without,
            "agentdeck.yaml",
            serde_json::to_value(Config::default()).expect("config serializes"),
            Config::env_vars(),
            "AGENTDECK_",
            Some("AGENTDECK_AGENT_"),
        )
    });
    assert!(check.is_err(), "a missing row must fail the check");
}
