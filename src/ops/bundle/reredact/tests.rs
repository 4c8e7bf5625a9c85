use super::*;
use serde_json::json;

const NAME: &str = "Acme Widgets";

/// A bundle as `agentdeck bundle` writes one, with a log of several
/// stream chunks whose name sits across their boundaries, YAML, JSON, a
/// text entry of unknown type, a binary one, and manifest fields this
/// version does not know.
fn bundle_in(dir: &Path) -> PathBuf {
    let mut log = Vec::new();
    log.extend_from_slice(b"start\nshipping for ACME WIDGETS GmbH\n");
    log.extend_from_slice(b"DB_PASSWORD=***REDACTED:key-value:0123456789***\n");
    let mut i = 0;
    while log.len() < 3 * 1024 * 1024 {
        log.extend_from_slice(format!("line {i} of filler text\n").as_bytes());
        if i % 5000 == 0 {
            log.extend_from_slice(format!("order {i} for {NAME} shipped\n").as_bytes());
        }
        i += 1;
    }
    let yaml = objects::to_yaml_stream(&[json!({
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"tier": "gold"}},
        "data": {
            "customer": "Acme Widgets GmbH",
            "Acme Widgets.txt": "one",
            "token": "***REDACTED:object-field:abcdefabcd***"
        }
    })]);
    let json =
        serde_json::to_vec_pretty(&json!([{"pod": "a", "body": {"note": "for Acme Widgets"}}]))
            .expect("json");
    let mut blob = vec![0u8, 1, 2, 0];
    blob.extend_from_slice(NAME.as_bytes());
    let entries: Vec<(&str, Vec<u8>)> = vec![
        ("pods/a/agent.log", log),
        ("objects/configmaps.yaml", yaml.into_bytes()),
        ("health/agents.json", json),
        (
            "notes/README",
            format!("handed over by {NAME}\n").into_bytes(),
        ),
        ("extra/blob.bin", blob),
        ("pods/b/agent.log", b"nothing to see\n".to_vec()),
    ];
    let files: Vec<Value> = entries
        .iter()
        .map(|(p, b)| json!({"path": p, "sourceBytes": b.len(), "bytes": b.len(), "truncated": false}))
        .collect();
    let total: usize = entries.iter().map(|(_, b)| b.len()).sum();
    let manifest = json!({
        "tool": "agentdeck",
        "version": "0.1.0",
        "formatVersion": 1,
        "startedAt": "2026-12-01T10:00:00Z",
        "futureField": {"kept": [1, 2, 3]},
        "context": "Acme Widgets cluster",
        "files": files,
        "bytes": total,
        "redactions": 4,
        "errors": [],
    });
    let report = json!({
        "rules": ["key-value", "known-secret", "object-field"],
        "placeholderKey": "a key of this bundle only",
        "files": {"pods/a/agent.log": {"key-value": 3}, "objects/configmaps.yaml": {"object-field": 1}},
    });
    let path = dir.join("b.zip");
    let mut zip = ZipWriter::new(File::create(&path).expect("create"));
    for (name, bytes) in &entries {
        zip.start_file(*name, SimpleFileOptions::default())
            .expect("entry");
        zip.write_all(bytes).expect("write");
    }
    for (name, v) in [(MANIFEST, &manifest), (REPORT, &report)] {
        zip.start_file(name, SimpleFileOptions::default())
            .expect("entry");
        zip.write_all(&serde_json::to_vec_pretty(v).expect("json"))
            .expect("write");
    }
    zip.finish().expect("finish");
    path
}

fn entries_of(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut zip = ZipArchive::new(File::open(path).expect("open")).expect("zip");
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let mut e = zip.by_index(i).expect("entry");
        let mut bytes = Vec::new();
        e.read_to_end(&mut bytes).expect("read");
        out.insert(e.name().expect("name").into_owned(), bytes);
    }
    out
}

fn opts(input: &Path, output: &Path, literals: &[&str], patterns: &[&str]) -> RedactOptions {
    RedactOptions {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        literals: literals.iter().map(|l| l.as_bytes().to_vec()).collect(),
        patterns: patterns
            .iter()
            .map(|p| Regex::new(p).expect("pattern"))
            .collect(),
    }
}

fn json_of(entries: &BTreeMap<String, Vec<u8>>, name: &str) -> Value {
    serde_json::from_slice(&entries[name]).expect("JSON")
}

fn holds_name(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes)
        .to_ascii_lowercase()
        .contains(&NAME.to_ascii_lowercase())
}

#[test]
fn a_literal_is_hidden_in_every_text_entry_and_the_report_and_manifest_follow() {
    let dir = tempfile::tempdir().expect("dir");
    let input = bundle_in(dir.path());
    let output = dir.path().join("c.zip");
    let before = entries_of(&input);
    let summary = run(&opts(&input, &output, &[NAME], &[]), |_| {}).expect("pass");
    let after = entries_of(&output);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &after {
        if name == "extra/blob.bin" {
            assert_eq!(bytes, &before[name], "binary entries are copied unchanged");
        } else {
            assert!(!holds_name(bytes), "{name} still holds the name");
        }
    }
    assert_eq!(after["pods/b/agent.log"], before["pods/b/agent.log"]);
    let log = String::from_utf8_lossy(&after["pods/a/agent.log"]).into_owned();
    assert!(
        log.contains("DB_PASSWORD=***REDACTED:key-value:0123456789***\n"),
        "a placeholder of the bundle's own pass is kept"
    );
    let in_log = log.matches("***REDACTED:literal:").count() as u64;
    // One in the head, one every 5000 filler lines.
    assert!(in_log > 10, "{in_log}");
    assert_eq!(log.len() as u64, {
        let m = json_of(&after, MANIFEST);
        m["files"][0]["bytes"].as_u64().expect("bytes")
    });

    // YAML and JSON still parse, their strings and keys hidden.
    let docs: Vec<Value> = serde_saphyr::from_multiple(
        std::str::from_utf8(&after["objects/configmaps.yaml"]).expect("utf-8"),
    )
    .expect("YAML still parses");
    let data = docs[0]["data"].as_object().expect("data");
    assert!(
        data["customer"]
            .as_str()
            .expect("string")
            .starts_with("***REDACTED:literal:")
    );
    assert!(data.keys().any(|k| k.starts_with("***REDACTED:literal:")));
    assert_eq!(data["token"], "***REDACTED:object-field:abcdefabcd***");
    assert_eq!(docs[0]["metadata"]["labels"]["tier"], "gold");
    json_of(&after, "health/agents.json");

    // The manifest: unknown fields kept, sizes and totals updated.
    let m = json_of(&after, MANIFEST);
    let m0 = json_of(&before, MANIFEST);
    for kept in [
        "tool",
        "version",
        "formatVersion",
        "startedAt",
        "futureField",
        "errors",
    ] {
        assert_eq!(m[kept], m0[kept], "{kept}");
    }
    let sum: u64 = m["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            let path = f["path"].as_str().expect("path");
            assert_eq!(f["bytes"], after[path].len() as u64, "{path}");
            assert_eq!(
                f["sourceBytes"],
                m0["files"]
                    .as_array()
                    .expect("files")
                    .iter()
                    .find(|g| g["path"] == path)
                    .expect("same")["sourceBytes"]
            );
            f["bytes"].as_u64().expect("bytes")
        })
        .sum();
    assert_eq!(m["bytes"], sum);
    let hidden: u64 = summary.hidden.values().sum();
    assert_eq!(m["redactions"], 4 + hidden);

    // The report: the new rule, this pass's counts, a record, no value.
    let r = json_of(&after, REPORT);
    assert_eq!(
        r["rules"],
        json!(["key-value", "known-secret", "object-field", "literal"])
    );
    assert_eq!(r["files"]["pods/a/agent.log"]["key-value"], 3);
    assert_eq!(r["files"]["pods/a/agent.log"]["literal"], in_log);
    assert_eq!(r["files"]["objects/configmaps.yaml"]["object-field"], 1);
    assert_eq!(r["files"]["objects/configmaps.yaml"]["literal"], 2);
    assert_eq!(r["files"][MANIFEST]["literal"], 1);
    assert!(r["files"]["pods/b/agent.log"].is_null());
    let pass = &r["passes"][0];
    assert_eq!(pass["rules"], json!(["literal"]));
    assert_eq!(pass["literals"], 1);
    assert_eq!(pass["matches"]["literal"], hidden);
    assert_eq!(pass["hidden"], hidden);
    assert_eq!(pass["files"]["notes/README"]["literal"], 1);
    assert!(
        pass["at"]
            .as_str()
            .is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok())
    );
    assert!(!holds_name(&after[REPORT]));
    assert_eq!(r["placeholderKey"], "a key of this bundle only");

    assert_eq!(summary.hidden.get(LITERAL_RULE), Some(&hidden));
    assert_eq!(summary.binary, 1);
    assert_eq!(summary.rewritten, 5, "log, YAML, JSON, README, manifest");
    assert!(summary.recorded);
    assert_eq!(summary.entries, after.len());
    let report = summary.report(&input);
    assert!(
        report.contains(&format!("hidden by this pass: {hidden} × literal")),
        "{report}"
    );
    assert!(!holds_name(report.as_bytes()));
}

#[test]
fn a_second_pass_with_the_same_rules_gives_the_same_contents() {
    let dir = tempfile::tempdir().expect("dir");
    let input = bundle_in(dir.path());
    let once = dir.path().join("once.zip");
    let twice = dir.path().join("twice.zip");
    let rules = (&[NAME][..], &[r"order \d+"][..]);
    run(&opts(&input, &once, rules.0, rules.1), |_| {}).expect("first pass");
    let summary = run(&opts(&once, &twice, rules.0, rules.1), |_| {}).expect("second pass");
    assert_eq!(entries_of(&twice), entries_of(&once));
    assert!(!summary.recorded);
    assert!(summary.hidden.is_empty(), "{:?}", summary.hidden);
    assert_eq!(summary.rewritten, 0);
    assert!(summary.report(&once).contains("nothing new"));
}

#[test]
fn a_pass_that_finds_nothing_still_records_its_new_rule_and_changes_no_entry() {
    let dir = tempfile::tempdir().expect("dir");
    let input = bundle_in(dir.path());
    let output = dir.path().join("c.zip");
    let summary = run(&opts(&input, &output, &["Nobody Known Here"], &[]), |_| {}).expect("pass");
    assert!(summary.recorded && summary.hidden.is_empty());
    assert!(
        summary.report(&input).contains("nothing found"),
        "{}",
        summary.report(&input)
    );
    let (before, after) = (entries_of(&input), entries_of(&output));
    for (name, bytes) in &before {
        if name != REPORT {
            assert_eq!(&after[name], bytes, "{name}");
        }
    }
    let r = json_of(&after, REPORT);
    assert!(
        r["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .any(|k| k == LITERAL_RULE)
    );
    assert_eq!(r["passes"][0]["hidden"], 0);
    assert_eq!(r["files"], json_of(&before, REPORT)["files"]);
}

#[test]
fn a_pattern_hides_its_matches_and_counts_them_as_regex() {
    let dir = tempfile::tempdir().expect("dir");
    let input = bundle_in(dir.path());
    let output = dir.path().join("c.zip");
    let summary = run(&opts(&input, &output, &[], &[r"order \d+ for"]), |_| {}).expect("pass");
    let after = entries_of(&output);
    let log = String::from_utf8_lossy(&after["pods/a/agent.log"]).into_owned();
    assert!(!log.contains("order 0 for"), "the first match is hidden");
    assert!(log.contains("***REDACTED:regex:"));
    let n = log.matches("***REDACTED:regex:").count() as u64;
    assert_eq!(summary.hidden, RedactionCounts::from([(REGEX_RULE, n)]));
    let r = json_of(&after, REPORT);
    assert_eq!(r["passes"][0]["rules"], json!(["regex"]));
    assert_eq!(r["passes"][0]["patterns"], 1);
    assert!(
        !String::from_utf8_lossy(&after[REPORT]).contains(r"\d"),
        "the pattern itself is not recorded"
    );
}

#[test]
fn the_input_is_never_written_over_by_path_hard_link_or_symbolic_link() {
    let dir = tempfile::tempdir().expect("dir");
    let input = bundle_in(dir.path());
    let original = std::fs::read(&input).expect("read");
    let hard = dir.path().join("hard.zip");
    std::fs::hard_link(&input, &hard).expect("hard link");
    let soft = dir.path().join("soft.zip");
    std::os::unix::fs::symlink(&input, &soft).expect("symlink");
    let dotted = dir.path().join(".").join("b.zip");
    for (output, how) in [
        (&input, "(the same path)"),
        (&dotted, "(the same path)"),
        (&hard, "a hard link to it"),
        (&soft, "a symbolic link to it"),
    ] {
        let e = run(&opts(&input, output, &[NAME], &[]), |_| {}).expect_err("refused");
        assert!(e.is_user_error(), "{e}");
        assert!(
            matches!(e, BundleError::Redact(RedactError::OverwritesInput { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("would write over the input"), "{e}");
        assert!(e.to_string().contains(how), "{e}");
    }
    assert_eq!(std::fs::read(&input).expect("read"), original);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn a_zip_that_is_not_a_bundle_or_is_damaged_is_refused_naming_why() {
    let dir = tempfile::tempdir().expect("dir");
    let input = bundle_in(dir.path());
    let output = dir.path().join("c.zip");
    let refused = |path: &Path, fragment: &str| {
        let e = run(&opts(path, &output, &[NAME], &[]), |_| {}).expect_err("refused");
        assert!(e.is_user_error(), "{e}");
        assert!(e.to_string().contains(fragment), "{e}");
        assert!(!output.exists());
    };
    let bytes = std::fs::read(&input).expect("read");
    let truncated = dir.path().join("truncated.zip");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    refused(&truncated, "truncated.zip is not a readable zip");
    let text = dir.path().join("text.zip");
    std::fs::write(&text, b"not a zip at all").expect("write");
    refused(&text, "text.zip is not a readable zip");

    let foreign = dir.path().join("foreign.zip");
    let mut zip = ZipWriter::new(File::create(&foreign).expect("create"));
    zip.start_file("photo.txt", SimpleFileOptions::default())
        .expect("entry");
    zip.write_all(b"hello").expect("write");
    zip.finish().expect("finish");
    refused(
        &foreign,
        "foreign.zip is not an agentdeck support bundle: it has no manifest.json",
    );

    let other = dir.path().join("other.zip");
    let mut zip = ZipWriter::new(File::create(&other).expect("create"));
    zip.start_file(MANIFEST, SimpleFileOptions::default())
        .expect("entry");
    zip.write_all(br#"{"tool": "sbctl"}"#).expect("write");
    zip.finish().expect("finish");
    refused(&other, "names tool \"sbctl\"");

    // A flipped byte in a stored entry: its checksum fails when read.
    let damaged = dir.path().join("damaged.zip");
    let mut zip = ZipWriter::new(File::create(&damaged).expect("create"));
    let stored = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("pods/a/agent.log", stored).expect("entry");
    zip.write_all(b"a log line that will be damaged\n")
        .expect("write");
    zip.start_file(MANIFEST, stored).expect("entry");
    zip.write_all(br#"{"tool": "agentdeck", "startedAt": "2026-12-01T10:00:00Z"}"#)
        .expect("write");
    zip.finish().expect("finish");
    let mut bytes = std::fs::read(&damaged).expect("read");
    let at = memchr::memmem::find(&bytes, b"will be damaged").expect("content");
    bytes[at] ^= 0x20;
    std::fs::write(&damaged, &bytes).expect("write");
    refused(&damaged, "is damaged: cannot read pods/a/agent.log");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn nothing_to_add_is_a_mistake() {
    let dir = tempfile::tempdir().expect("dir");
    let input = bundle_in(dir.path());
    let e = run(&opts(&input, &dir.path().join("c.zip"), &[], &[]), |_| {}).expect_err("refused");
    assert!(e.is_user_error());
    assert!(e.to_string().contains("--literal-file"), "{e}");
}

#[test]
fn a_literal_file_has_one_value_per_line_and_a_short_one_is_refused_by_line_number() {
    assert_eq!(
        literals_in(b"Acme Widgets\r\n\n   \n  padded value  \nlast-one-no-newline").expect("ok"),
        vec![
            b"Acme Widgets".to_vec(),
            b"  padded value  ".to_vec(),
            b"last-one-no-newline".to_vec()
        ]
    );
    let why = literals_in(b"Acme Widgets\nAcme\n").expect_err("short");
    assert!(why.starts_with("line 2 has 4 bytes"), "{why}");
    assert!(!why.contains("Acme"), "the value is not echoed: {why}");
    assert!(
        literals_in(b"\n\r\n")
            .expect_err("empty")
            .contains("holds no value")
    );
}

#[test]
fn json_lines_stay_json_whatever_a_pattern_swallows() {
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("b.zip");
    let audit = concat!(
        r#"{"action":"drain","summary":"drain pool for Acme Widgets, by jane","time":"2026-12-01T10:00:00Z"}"#,
        "\n",
        r#"{"action":"hold","summary":"nothing here","time":"2026-12-01T10:01:00Z"}"#,
        "\n",
        "not json, from Acme Widgets\n"
    );
    let mut zip = ZipWriter::new(File::create(&input).expect("create"));
    for (name, bytes) in [
        (
            MANIFEST,
            &br#"{"tool": "agentdeck", "startedAt": "2026-12-01T10:00:00Z"}"#[..],
        ),
        ("audit.jsonl", audit.as_bytes()),
    ] {
        zip.start_file(name, SimpleFileOptions::default())
            .expect("entry");
        zip.write_all(bytes).expect("write");
    }
    zip.finish().expect("finish");
    let output = dir.path().join("c.zip");
    // The pattern runs to the end of the line, past the closing quote.
    run(&opts(&input, &output, &[], &[r"Acme.*"]), |_| {}).expect("pass");
    let after = entries_of(&output);
    let text = String::from_utf8(after["audit.jsonl"].clone()).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let first: Value = serde_json::from_str(lines[0]).expect("still JSON");
    assert!(
        first["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("drain pool for ***REDACTED:regex:")),
        "{first}"
    );
    assert_eq!(first["action"], "drain");
    assert_eq!(
        lines[1],
        r#"{"action":"hold","summary":"nothing here","time":"2026-12-01T10:01:00Z"}"#
    );
    assert!(
        lines[2].starts_with("not json, from ***REDACTED:regex:"),
        "{text}"
    );
    assert!(!text.contains("Acme"));
}
