//! Reading a bundle back, for whoever receives it: the console on a bundle
//! (`agentdeck --bundle B.zip`) and the bundle served as an API
//! (`agentdeck sandbox --from-bundle B.zip`) both start here.
//!
//! [`OpenedBundle::open`] checks that the zip is one of agentdeck's (its
//! `manifest.json` says `"tool": "agentdeck"`) and reads the manifest;
//! everything else is read on demand: the objects once, a log when it is
//! asked for (a bundle of 200 pods × 2 MiB of logs opens without reading a
//! single log). What cannot be read — a file of an unknown layout, a
//! format newer than this build's — is said in [`OpenedBundle::notes`],
//! never a reason to refuse the rest.
//!
//! Formats ([`FORMAT_VERSION`]): 1 had no `formatVersion` in its manifest,
//! no `history/` and no `audit.jsonl`; 2 added them. Every later version
//! must stay readable here: add, never rename.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use jiff::Timestamp;
use serde_json::Value;

use crate::ops::audit::AuditRecord;

/// The bundle format this build writes and reads.
pub const FORMAT_VERSION: u64 = 2;

/// Where a bundle keeps the pools' last hour (the samples behind `i`).
pub const HISTORY_FILE: &str = "history/pools.json";
/// Where a bundle keeps the audit trail of its context.
pub const AUDIT_FILE: &str = "audit.jsonl";

/// Why a file is not a bundle that can be opened. Each is the user's to
/// fix (another file), so the CLI exits 2.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file cannot be read at all.
    #[error("cannot read the bundle {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not a zip, or a damaged one (truncated, say).
    #[error("{} is not a readable zip ({why}); is it a whole bundle? A bundle cut short in transfer has no central directory", path.display())]
    Damaged { path: PathBuf, why: String },
    /// A zip, but not a bundle of agentdeck's.
    #[error("{} is not an agentdeck support bundle: {why}", path.display())]
    Foreign { path: PathBuf, why: String },
}

/// What the manifest says of the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleInfo {
    /// The zip's file name, as the header shows it.
    pub file: String,
    /// The format it was written in (1 when the manifest does not say).
    pub format: u64,
    /// The agentdeck version that wrote it.
    pub tool_version: String,
    /// When collection started: objects were listed then, so ages are
    /// shown relative to it.
    pub taken_at: Timestamp,
    /// The kube context it was taken in.
    pub context: Option<String>,
    /// The namespaces it holds.
    pub namespaces: Vec<String>,
    /// The pool it was limited to.
    pub pool: Option<String>,
}

/// A bundle opened for reading.
pub struct OpenedBundle {
    pub path: PathBuf,
    pub info: BundleInfo,
    /// The manifest as written.
    pub manifest: Value,
    /// Every entry's name.
    names: BTreeSet<String>,
    zip: Mutex<zip::ZipArchive<File>>,
    /// What could not be read, in words, for the header and the CLI.
    notes: Mutex<Vec<String>>,
}

/// The top-level entries this build knows.
const KNOWN: &[&str] = &[
    "manifest.json",
    "redactions.json",
    "events.yaml",
    AUDIT_FILE,
    "objects/",
    "pods/",
    "tasks/",
    "health/",
    "history/",
];

/// Kinds of `objects/*.yaml` that are not objects to serve:
/// `secrets.yaml` holds names and keys only, never a Secret.
const NOT_OBJECTS: &[&str] = &["objects/secrets.yaml"];

impl OpenedBundle {
    /// Opens `path`: a zip with an agentdeck manifest, or an error that
    /// says what it is instead.
    pub fn open(path: &Path) -> Result<OpenedBundle, OpenError> {
        let file = File::open(path).map_err(|source| OpenError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(OpenError::Read {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "a directory"),
            });
        }
        let mut zip = zip::ZipArchive::new(file).map_err(|e| OpenError::Damaged {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        let names: BTreeSet<String> = zip
            .file_names()
            .filter_map(|n| n.ok().map(|n| n.into_owned()))
            .collect();
        let foreign = |why: String| OpenError::Foreign {
            path: path.to_path_buf(),
            why,
        };
        let manifest = read_entry(&mut zip, "manifest.json")
            .map_err(|why| match why {
                EntryError::Missing => foreign(format!(
                    "it has no manifest.json ({} entries{})",
                    names.len(),
                    names
                        .iter()
                        .next()
                        .map(|n| format!(", the first {n}"))
                        .unwrap_or_default()
                )),
                EntryError::Unreadable(why) => OpenError::Damaged {
                    path: path.to_path_buf(),
                    why: format!("manifest.json: {why}"),
                },
            })
            .and_then(|bytes| {
                serde_json::from_slice::<Value>(&bytes)
                    .map_err(|e| foreign(format!("its manifest.json is not JSON: {e}")))
            })?;
        if manifest["tool"] != "agentdeck" {
            return Err(foreign(format!(
                "its manifest.json names tool {} (an agentdeck bundle's says \"agentdeck\")",
                manifest["tool"]
            )));
        }
        let info = info_of(path, &manifest).map_err(foreign)?;
        let mut notes = Vec::new();
        if info.format > FORMAT_VERSION {
            notes.push(format!(
                "written by agentdeck {} in bundle format {} (this agentdeck reads up to {}): shown is what it could read",
                info.tool_version, info.format, FORMAT_VERSION
            ));
        }
        let unknown: Vec<&String> = names
            .iter()
            .filter(|n| {
                !KNOWN.iter().any(|k| {
                    if k.ends_with('/') {
                        n.starts_with(k)
                    } else {
                        n == k
                    }
                })
            })
            .collect();
        if !unknown.is_empty() {
            notes.push(format!(
                "{} entr{} of a layout this agentdeck does not know left unread: {}",
                unknown.len(),
                if unknown.len() == 1 { "y" } else { "ies" },
                unknown
                    .iter()
                    .take(5)
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(OpenedBundle {
            path: path.to_path_buf(),
            info,
            manifest,
            names,
            zip: Mutex::new(zip),
            notes: Mutex::new(notes),
        })
    }

    /// What could not be read so far (grows as parts are read).
    pub fn notes(&self) -> Vec<String> {
        self.notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn note(&self, note: String) {
        self.notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(note);
    }

    /// Whether the bundle has an entry of this name.
    pub fn has(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The bytes of one entry (`None`: no such entry, or unreadable, noted).
    pub fn read(&self, name: &str) -> Option<Vec<u8>> {
        let mut zip = self.zip.lock().unwrap_or_else(PoisonError::into_inner);
        match read_entry(&mut zip, name) {
            Ok(b) => Some(b),
            Err(EntryError::Missing) => None,
            Err(EntryError::Unreadable(why)) => {
                drop(zip);
                self.note(format!("{name}: cannot be read ({why})"));
                None
            }
        }
    }

    /// Every object the bundle holds, as JSON: `objects/*.yaml` (but the
    /// secrets' summaries) and `events.yaml`, with the log tails the
    /// controller kept put back into their ConfigMaps and each task's kept
    /// output into its status, so that they read as they did live.
    pub fn objects(&self) -> Vec<Value> {
        let files: Vec<String> = self
            .names
            .iter()
            .filter(|n| {
                (n.starts_with("objects/")
                    && n.ends_with(".yaml")
                    && !NOT_OBJECTS.contains(&n.as_str()))
                    || n.as_str() == "events.yaml"
            })
            .cloned()
            .collect();
        let mut out = Vec::new();
        for name in files {
            let Some(bytes) = self.read(&name) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            match serde_saphyr::from_multiple::<Value>(&text) {
                Ok(docs) => out.extend(docs.into_iter().filter(|d| d.is_object())),
                Err(e) => self.note(format!(
                    "{name}: not readable as YAML ({e}); its objects are not shown"
                )),
            }
        }
        for obj in &mut out {
            self.restore_tails(obj);
            self.restore_output(obj);
        }
        out
    }

    /// A tails ConfigMap's `data`, which the bundle keeps in
    /// `pods/<pod>/<container>.final.log`, back in place.
    fn restore_tails(&self, cm: &mut Value) {
        use crate::plan::tails::{ANNOTATION_INDEX, LABEL_LOG_TAILS, TailEntry};
        if cm["kind"] != "ConfigMap" || cm["metadata"]["labels"][LABEL_LOG_TAILS] != "true" {
            return;
        }
        let index: Vec<TailEntry> = cm["metadata"]["annotations"][ANNOTATION_INDEX]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let mut data = serde_json::Map::new();
        for e in index {
            if let Some(b) = self.read(&format!("pods/{}/{}.final.log", e.pod, e.container)) {
                data.insert(
                    e.key,
                    Value::String(String::from_utf8_lossy(&b).into_owned()),
                );
            }
        }
        cm["data"] = Value::Object(data);
    }

    /// A task's kept output, when its object in the bundle lacks it, from
    /// `tasks/<task>.output.log` (whose first line says where it came from).
    fn restore_output(&self, task: &mut Value) {
        if task["kind"] != "AgentTask" || task["status"]["outputTail"].is_string() {
            return;
        }
        let Some(name) = task["metadata"]["name"].as_str() else {
            return;
        };
        if let Some(b) = self.read(&format!("tasks/{name}.output.log")) {
            let text = String::from_utf8_lossy(&b);
            let body = match text.split_once('\n') {
                Some((first, rest)) if first.starts_with("# ") => rest,
                _ => &text,
            };
            if task["status"].is_object() {
                task["status"]["outputTail"] =
                    Value::String(body.trim_end_matches('\n').to_owned() + "\n");
            }
        }
    }

    /// The log of a container as collected: current, or the previous
    /// instance's (`previous`).
    pub fn log(&self, pod: &str, container: &str, previous: bool) -> Option<Vec<u8>> {
        let suffix = if previous { ".previous" } else { "" };
        self.read(&format!("pods/{pod}/{container}{suffix}.log"))
    }

    /// The agents' `/healthz` answers as collected (`health/agents.json`).
    pub fn health(&self) -> Vec<Value> {
        let Some(b) = self.read("health/agents.json") else {
            return Vec::new();
        };
        match serde_json::from_slice::<Vec<Value>>(&b) {
            Ok(v) => v,
            Err(e) => {
                self.note(format!(
                    "health/agents.json: not readable ({e}); agents show no health"
                ));
                Vec::new()
            }
        }
    }

    /// The pools' last hour, when the bundle holds it (taken from the
    /// console; `agentdeck bundle` keeps none).
    pub fn history(&self) -> Option<Value> {
        let b = self.read(HISTORY_FILE)?;
        match serde_json::from_slice(&b) {
            Ok(v) => Some(v),
            Err(e) => {
                self.note(format!(
                    "{HISTORY_FILE}: not readable ({e}); no pool history"
                ));
                None
            }
        }
    }

    /// The audit trail of the bundle's context, as recorded where it was
    /// taken. Lines that do not read are skipped and counted in the notes.
    pub fn audit(&self) -> Vec<AuditRecord> {
        let Some(b) = self.read(AUDIT_FILE) else {
            return Vec::new();
        };
        let mut bad = 0;
        let records = String::from_utf8_lossy(&b)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| match serde_json::from_str::<AuditRecord>(l) {
                Ok(r) => Some(r),
                Err(_) => {
                    bad += 1;
                    None
                }
            })
            .collect();
        if bad > 0 {
            self.note(format!(
                "{AUDIT_FILE}: {bad} line(s) not readable, left out"
            ));
        }
        records
    }

    /// What this bundle lacks that the console would show, in words: for
    /// the header's notes and the CLI.
    pub fn missing(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.has(HISTORY_FILE) {
            out.push(match self.manifest["history"]["why"].as_str() {
                Some(why) => format!("no pool history (i): {why}"),
                None if self.info.format < 2 => {
                    "no pool history (i): bundles before format 2 did not keep it".to_owned()
                }
                None => "no pool history (i)".to_owned(),
            });
        }
        if !self.has(AUDIT_FILE) && self.info.format < 2 {
            out.push("no audit trail: bundles before format 2 did not keep it".to_owned());
        }
        if !self.has("health/agents.json") {
            out.push("no agent health: the bundle has no health/agents.json".to_owned());
        }
        out
    }
}

fn info_of(path: &Path, m: &Value) -> Result<BundleInfo, String> {
    let taken_at = m["startedAt"]
        .as_str()
        .or_else(|| m["finishedAt"].as_str())
        .ok_or("its manifest.json has no startedAt")?
        .parse::<Timestamp>()
        .map_err(|e| format!("its manifest.json's startedAt is not a time: {e}"))?;
    let namespaces: Vec<String> = m["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    Ok(BundleInfo {
        file: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string()),
        format: m["formatVersion"].as_u64().unwrap_or(1),
        tool_version: m["version"].as_str().unwrap_or("?").to_owned(),
        taken_at,
        context: m["context"].as_str().map(str::to_owned),
        namespaces,
        pool: m["pool"].as_str().map(str::to_owned),
    })
}

enum EntryError {
    Missing,
    Unreadable(String),
}

fn read_entry(zip: &mut zip::ZipArchive<File>, name: &str) -> Result<Vec<u8>, EntryError> {
    let mut f = match zip.by_name(name) {
        Ok(f) => f,
        Err(zip::result::ZipError::FileNotFound) => return Err(EntryError::Missing),
        Err(e) => return Err(EntryError::Unreadable(e.to_string())),
    };
    let mut out = Vec::with_capacity(usize::try_from(f.size()).unwrap_or(0).min(64 << 20));
    f.read_to_end(&mut out)
        .map_err(|e| EntryError::Unreadable(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_of(entries: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp");
        let mut z = zip::ZipWriter::new(f.reopen().expect("reopen"));
        for (name, body) in entries {
            z.start_file(*name, zip::write::SimpleFileOptions::default())
                .expect("entry");
            z.write_all(body).expect("write");
        }
        z.finish().expect("finish");
        f
    }

    const MANIFEST: &[u8] = br#"{"tool":"agentdeck","version":"0.1.0","startedAt":"2026-11-30T10:00:00Z","context":"prod","namespaces":["team-a"],"pool":null}"#;

    #[test]
    fn a_bundle_without_a_format_version_is_format_1_and_says_what_it_lacks() {
        let f = zip_of(&[("manifest.json", MANIFEST), ("events.yaml", b"")]);
        let b = OpenedBundle::open(f.path()).expect("opens");
        assert_eq!(b.info.format, 1);
        assert_eq!(b.info.context.as_deref(), Some("prod"));
        assert_eq!(b.info.namespaces, vec!["team-a".to_owned()]);
        assert_eq!(b.info.taken_at.to_string(), "2026-11-30T10:00:00Z");
        let missing = b.missing().join("; ");
        assert!(missing.contains("no pool history"), "{missing}");
        assert!(missing.contains("no audit trail"), "{missing}");
        assert!(b.notes().is_empty(), "{:?}", b.notes());
    }

    #[test]
    fn a_newer_format_and_unknown_entries_are_said_not_refused() {
        let m = br#"{"tool":"agentdeck","version":"9.0.0","formatVersion":7,"startedAt":"2026-11-30T10:00:00Z","namespaces":["a"]}"#;
        let f = zip_of(&[("manifest.json", m), ("spans/trace.bin", b"x")]);
        let b = OpenedBundle::open(f.path()).expect("opens");
        let notes = b.notes().join("; ");
        assert!(notes.contains("bundle format 7"), "{notes}");
        assert!(notes.contains("spans/trace.bin"), "{notes}");
    }

    #[test]
    fn a_zip_of_other_files_is_foreign_and_a_cut_zip_damaged() {
        let f = zip_of(&[("README.txt", b"hello")]);
        let e = OpenedBundle::open(f.path()).err().expect("refused");
        assert!(matches!(e, OpenError::Foreign { .. }), "{e}");
        assert!(e.to_string().contains("no manifest.json"), "{e}");

        let other = zip_of(&[("manifest.json", br#"{"tool":"sbctl"}"#)]);
        let e = OpenedBundle::open(other.path()).err().expect("refused");
        assert!(e.to_string().contains("\"sbctl\""), "{e}");

        let whole = std::fs::read(
            zip_of(&[("manifest.json", MANIFEST), ("events.yaml", &[b'x'; 4096])]).path(),
        )
        .expect("read");
        let cut = tempfile::NamedTempFile::new().expect("temp");
        std::fs::write(cut.path(), &whole[..whole.len() / 2]).expect("write");
        let e = OpenedBundle::open(cut.path()).err().expect("refused");
        assert!(matches!(e, OpenError::Damaged { .. }), "{e}");

        let e = OpenedBundle::open(Path::new("/nonexistent/b.zip"))
            .err()
            .expect("refused");
        assert!(matches!(e, OpenError::Read { .. }), "{e}");
    }

    #[test]
    fn objects_come_back_with_kept_tails_and_outputs_in_place() {
        let index = serde_json::json!([{"pod": "agent-0", "container": "agent",
            "key": "agent-0__agent.log", "capturedAt": "2026-11-30T09:59:00Z", "reason": "Terminating"}]);
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "agentdeck-log-tails-p", "namespace": "team-a",
                "labels": {crate::plan::tails::LABEL_LOG_TAILS: "true"},
                "annotations": {crate::plan::tails::ANNOTATION_INDEX: index.to_string()}},
            "data": "(see pods/*/*.final.log)"});
        let task = serde_json::json!({"apiVersion": "agentdeck.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "t1", "namespace": "team-a"}, "spec": {"pool": "p"},
            "status": {"phase": "Succeeded"}});
        let yaml = super::super::objects::to_yaml_stream(&[cm, task]);
        let f = zip_of(&[
            ("manifest.json", MANIFEST),
            ("objects/configmaps.yaml", yaml.as_bytes()),
            ("objects/secrets.yaml", b"---\nname: s\nkeys: [a]\n"),
            ("pods/agent-0/agent.final.log", b"last words\n"),
            (
                "tasks/t1.output.log",
                b"# the last lines task t1 printed\nPlan: 1 to add\n",
            ),
            (
                "events.yaml",
                b"---\napiVersion: v1\nkind: Event\nmetadata: {name: e, namespace: team-a}\n",
            ),
        ]);
        let b = OpenedBundle::open(f.path()).expect("opens");
        let objects = b.objects();
        assert_eq!(objects.len(), 3, "{objects:?}");
        let cm = objects
            .iter()
            .find(|o| o["kind"] == "ConfigMap")
            .expect("cm");
        assert_eq!(cm["data"]["agent-0__agent.log"], "last words\n");
        let t = objects
            .iter()
            .find(|o| o["kind"] == "AgentTask")
            .expect("task");
        assert_eq!(t["status"]["outputTail"], "Plan: 1 to add\n");
        assert!(objects.iter().any(|o| o["kind"] == "Event"));
    }
}
