use super::*;

fn redactor() -> Redactor {
    Redactor::with_hash_key(
        &[
            b"s3cr3t-handed-to-the-tool".to_vec(),
            b"pool-token-0123456789".to_vec(),
        ],
        b"test key",
    )
}

fn run(r: &Redactor, input: &[u8]) -> (Vec<u8>, RedactionCounts) {
    let mut counts = RedactionCounts::new();
    let out = r.redact_bytes(input, &mut counts);
    (out, counts)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEAwJt7QmFv3vPqlantedPemBodyLineOne0123456789abcdefABCDEF
bXlzZWNyZXRrZXlib2R5bGluZXR3b3BsYW50ZWRmb3J0ZXN0aW5nMDEyMzQ1Njc4OQ==
-----END RSA PRIVATE KEY-----
";

/// (what the line is, the line, the secret planted in it, the rule that must hide it)
const CORPUS: &[(&str, &str, &str, &str)] = &[
    (
        "env dump",
        "DB_PASSWORD=hunter2-env\n",
        "hunter2-env",
        "key-value",
    ),
    (
        "export",
        "export API_TOKEN=tok-export-77\n",
        "tok-export-77",
        "key-value",
    ),
    (
        "env quoted",
        "AWS_SECRET_ACCESS_KEY=\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"\n",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "key-value",
    ),
    (
        "yaml",
        "  password: yaml-pass-1\n",
        "yaml-pass-1",
        "key-value",
    ),
    (
        "yaml quoted",
        "  clientSecret: 'yaml-secret-2'\n",
        "yaml-secret-2",
        "key-value",
    ),
    (
        "json",
        "{\"user\":\"bob\",\"password\":\"json-pass-3\"}\n",
        "json-pass-3",
        "key-value",
    ),
    (
        "json spaced",
        "{ \"api_key\" : \"json-apikey-4\" }\n",
        "json-apikey-4",
        "key-value",
    ),
    (
        "json escaped quote",
        "{\"token\":\"tok\\\"esc-5\"}\n",
        "esc-5",
        "key-value",
    ),
    (
        "nested json string",
        "{\"last\":\"{\\\"password\\\":\\\"nested-pass-6\\\"}\"}\n",
        "nested-pass-6",
        "key-value",
    ),
    (
        "logfmt",
        "level=info msg=login password=logfmt-pass-7 user=bob\n",
        "logfmt-pass-7",
        "key-value",
    ),
    (
        "flag",
        "running tool --password=flag-pass-8 --verbose\n",
        "flag-pass-8",
        "key-value",
    ),
    (
        "query string",
        "GET /cb?code=1&client_secret=query-secret-9&state=x\n",
        "query-secret-9",
        "key-value",
    ),
    (
        "private key var",
        "PRIVATE_KEY=pk-value-10\n",
        "pk-value-10",
        "key-value",
    ),
    (
        "credentials",
        "credentials: cred-value-11\n",
        "cred-value-11",
        "key-value",
    ),
    (
        "passphrase",
        "ssh passphrase=phrase-value-12\n",
        "phrase-value-12",
        "key-value",
    ),
    (
        "cookie",
        "Cookie: session=cookie-value-13\n",
        "cookie-value-13",
        "key-value",
    ),
    (
        "env pair json",
        "{\"name\":\"DB_PASSWORD\",\"value\":\"envpair-14\"}\n",
        "envpair-14",
        "env-pair",
    ),
    (
        "url",
        "connecting to postgres://admin:url-pass-15@db:5432/app\n",
        "url-pass-15",
        "url-credentials",
    ),
    (
        "https url",
        "git clone https://bot:url-pass-16@github.com/x/y\n",
        "url-pass-16",
        "url-credentials",
    ),
    (
        "ado.net",
        "Server=db;User ID=sa-user-17;Password=conn-pass-18;Database=app\n",
        "conn-pass-18",
        "connection-string",
    ),
    (
        "ado.net user",
        "Server=db;User ID=sa-user-17;Password=conn-pass-18;Database=app\n",
        "sa-user-17",
        "connection-string",
    ),
    (
        "odbc",
        "Driver={ODBC};Server=x;Uid=odbc-user-19;Pwd=odbc-pass-20;\n",
        "odbc-pass-20",
        "connection-string",
    ),
    (
        "azure storage",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=YXp1cmUta2V5LTIxLXBsYW50ZWQ=;EndpointSuffix=core\n",
        "YXp1cmUta2V5LTIxLXBsYW50ZWQ=",
        "connection-string",
    ),
    (
        "azure bus",
        "Endpoint=sb://x/;SharedAccessKeyName=root;SharedAccessKey=sbkey22PlantedValue=\n",
        "sbkey22PlantedValue=",
        "connection-string",
    ),
    (
        "azure sas",
        "uploading https://acct.blob.core.windows.net/c/b?sv=2020&sig=SASsig23PlantedValue%2Bxyz\n",
        "SASsig23PlantedValue",
        "azure-sas",
    ),
    (
        "bearer header",
        "Authorization: Bearer bearer-tok-24.abc\n",
        "bearer-tok-24.abc",
        "auth-header",
    ),
    (
        "basic header",
        "authorization: Basic YmFzaWMtMjU6cGFzcw==\n",
        "YmFzaWMtMjU6cGFzcw==",
        "auth-header",
    ),
    (
        "bearer in text",
        "curl -H 'Bearer Tok26PlantedValue' https://x\n",
        "Tok26PlantedValue",
        "auth-header",
    ),
    (
        "github token header",
        "Authorization: token ghtok27planted\n",
        "ghtok27planted",
        "auth-header",
    ),
    (
        "jwt",
        "id_tk eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJqd3QtMjgifQ.c2lnbmF0dXJlMjg in claims\n",
        "eyJzdWIiOiJqd3QtMjgifQ",
        "jwt",
    ),
    (
        "aws key id",
        "using key AKIAIOSFODNN7PLANT29 for s3\n",
        "AKIAIOSFODNN7PLANT29",
        "aws-access-key",
    ),
    (
        "aws sts key id",
        "assumed ASIAY34FZKBOKMUTVV30 ok\n",
        "ASIAY34FZKBOKMUTVV30",
        "aws-access-key",
    ),
    (
        "gcp api key",
        "maps key AIzaSyD-planted31abcdefghijklmnopqrstuv ok\n",
        "AIzaSyD-planted31abcdefghijklmnopqrstuv",
        "gcp-key",
    ),
    (
        "gcp oauth",
        "got ya29.a0Planted32AccessTokenValueXYZ\n",
        "ya29.a0Planted32AccessTokenValueXYZ",
        "gcp-key",
    ),
    (
        "ghp",
        "pushing with ghp_Planted33abcdefghijklmnopqrstuvwxyz0123\n",
        "ghp_Planted33abcdefghijklmnopqrstuvwxyz0123",
        "github-token",
    ),
    (
        "gho",
        "oauth gho_Planted34abcdefghijklmnopqrstuvwxyz0123 used\n",
        "gho_Planted34abcdefghijklmnopqrstuvwxyz0123",
        "github-token",
    ),
    (
        "ghs",
        "app ghs_Planted35abcdefghijklmnopqrstuvwxyz0123\n",
        "ghs_Planted35abcdefghijklmnopqrstuvwxyz0123",
        "github-token",
    ),
    (
        "ghu ghr",
        "u ghu_Planted36abcdefghijklmnopqrstuvwxyz0123 r\n",
        "ghu_Planted36abcdefghijklmnopqrstuvwxyz0123",
        "github-token",
    ),
    (
        "ghr",
        "r ghr_Planted37abcdefghijklmnopqrstuvwxyz0123 r\n",
        "ghr_Planted37abcdefghijklmnopqrstuvwxyz0123",
        "github-token",
    ),
    (
        "github pat",
        "pat github_pat_11Planted38_abcdefghijklmnopqrstu\n",
        "github_pat_11Planted38_abcdefghijklmnopqrstu",
        "github-token",
    ),
    (
        "gitlab",
        "CI uses glpat-Planted39abcdefghijk for api\n",
        "glpat-Planted39abcdefghijk",
        "gitlab-token",
    ),
    (
        "pulumi",
        "login pul-0123456789abcdef0123456789abcdef40404040 done\n",
        "pul-0123456789abcdef0123456789abcdef40404040",
        "pulumi-token",
    ),
    (
        "terraform",
        "tfc Plnted41abcdef.atlasv1.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 x\n",
        "atlasv1.abcdefghijklmnopqrstuvwxyz",
        "terraform-token",
    ),
    (
        "slack",
        "notify xoxb-Planted42-abcdefghij\n",
        "xoxb-Planted42-abcdefghij",
        "slack-token",
    ),
    (
        "literal",
        "the agent printed s3cr3t-handed-to-the-tool by mistake\n",
        "s3cr3t-handed-to-the-tool",
        KNOWN_SECRET,
    ),
    (
        "literal in word",
        "x=POOL-TOKEN-0123456789y\n",
        "TOKEN-0123456789",
        KNOWN_SECRET,
    ),
    ("pem", PEM, "plantedPemBodyLineOne", PEM_RULE),
    ("pem second line", PEM, "bXlzZWNyZXRrZXlib2R5", PEM_RULE),
    (
        "pem inline json",
        "{\"private_key\":\"-----BEGIN PRIVATE KEY-----\\nMIIEvQplantedInline45\\n-----END PRIVATE KEY-----\\n\"}\n",
        "plantedInline45",
        "key-value",
    ),
    (
        "pem with prefixes",
        "[t1] -----BEGIN OPENSSH PRIVATE KEY-----\n[t1] b3BlbnNzaC1rZXktdjEAAAAplanted46\n[t1] -----END OPENSSH PRIVATE KEY-----\n",
        "planted46",
        PEM_RULE,
    ),
];

#[test]
fn every_planted_secret_in_the_corpus_is_hidden_by_its_rule() {
    let r = redactor();
    assert!(
        CORPUS.len() >= 40,
        "the corpus has {} secrets",
        CORPUS.len()
    );
    for (what, line, secret, rule) in CORPUS {
        let (out, counts) = run(&r, line.as_bytes());
        let text = String::from_utf8_lossy(&out);
        assert!(
            !contains(&out, secret.as_bytes()),
            "{what}: {secret:?} survived: {text}"
        );
        assert!(
            counts.get(rule).copied().unwrap_or(0) >= 1,
            "{what}: rule {rule} hid nothing ({counts:?}): {text}"
        );
        assert!(
            text.contains(&format!("***REDACTED:{rule}:"))
                || *rule == PEM_RULE && text.contains("REDACTED:pem"),
            "{what}: {text}"
        );
    }
}

#[test]
fn the_whole_corpus_in_one_stream_hides_every_secret() {
    let r = redactor();
    let all: String = CORPUS.iter().map(|c| c.1).collect();
    let mut out = Vec::new();
    let mut s = RedactStream::new(&r, &mut out);
    // Byte by byte: no write boundary may cut a secret in two.
    for b in all.as_bytes() {
        s.write_all(std::slice::from_ref(b)).expect("write");
    }
    s.finish().expect("finish");
    for (what, _, secret, _) in CORPUS {
        assert!(
            !contains(&out, secret.as_bytes()),
            "{what}: {secret} survived"
        );
    }
}

/// Lines a bundle must keep as they are.
const HARMLESS: &[&str] = &[
    "PWD=/home/agent\n",
    "OLDPWD=/\n",
    "secretName: agent-token\n",
    "tokenSecretRef: {name: pool-token, key: token}\n",
    "  key: password\n",
    "passwordFile: /etc/agent/password\n",
    "token_expires_seconds=3600\n",
    "enable basic authentication for the dashboard\n",
    "password: \"\"\n",
    "password: ${DB_PASSWORD}\n",
    "auth: true\n",
    "visit https://example.com/path?x=1\n",
    "-----BEGIN CERTIFICATE-----\nMIIBcertificateBodyIsPublic\n-----END CERTIFICATE-----\n",
    "the author wrote this\n",
    "max_tokens: 4096\n",
];

#[test]
fn harmless_lines_pass_through_untouched() {
    let r = redactor();
    for line in HARMLESS {
        let (out, counts) = run(&r, line.as_bytes());
        if *line == "max_tokens: 4096\n" {
            // A count under a sensitive word is hidden: the rules prefer
            // hiding a number to leaking a numeric password.
            continue;
        }
        assert_eq!(String::from_utf8_lossy(&out), *line, "changed ({counts:?})");
        assert!(counts.is_empty(), "{line}: {counts:?}");
    }
}

#[test]
fn one_secret_gets_one_placeholder_everywhere_and_different_secrets_differ() {
    let r = redactor();
    let (a, _) = run(&r, b"password=same-secret-1\n");
    let (b, _) = run(&r, b"{\"password\": \"same-secret-1\"}\n");
    let (c, _) = run(&r, b"password=other-secret-2\n");
    let ph = |v: &[u8]| {
        let t = String::from_utf8_lossy(v).into_owned();
        let i = t.find("***REDACTED").expect("placeholder");
        // The hash, not the rule: one secret correlates whichever rule found it.
        t[i..]
            .split("***")
            .nth(1)
            .expect("placeholder")
            .rsplit(':')
            .next()
            .expect("hash")
            .to_owned()
    };
    assert_eq!(ph(&a), ph(&b));
    assert_ne!(ph(&a), ph(&c));
    // Another key gives other placeholders: they reveal nothing across bundles.
    let other = Redactor::with_hash_key(&[], b"another key");
    let (d, _) = run(&other, b"password=same-secret-1\n");
    assert_ne!(ph(&a), ph(&d));
}

#[test]
fn a_ten_megabyte_line_without_newline_streams_in_bounded_pieces_and_keeps_its_length() {
    let r = redactor();
    let mut line = Vec::with_capacity(10 << 20);
    while line.len() < 10 << 20 {
        line.extend_from_slice(b"{\"k\":\"abcdefghij\",\"n\":1234567890},");
    }
    line.extend_from_slice(b"ghp_PlantedLong0abcdefghijklmnopqrstuvwxyz0123");
    let mut out = Vec::new();
    let mut s = RedactStream::new(&r, &mut out);
    for piece in line.chunks(8192) {
        s.write_all(piece).expect("write");
        assert!(
            s.pending.len() <= MAX_SEGMENT + CHUNK + PEM_MAX,
            "buffer grew"
        );
    }
    let (_, counts) = s.finish().expect("finish");
    assert_eq!(counts.get("github-token"), Some(&1));
    assert!(!contains(&out, b"ghp_PlantedLong0"));
    assert_eq!(
        out.len() + 46 - 38,
        line.len(),
        "only the token was replaced"
    );
}

#[test]
fn binary_bytes_and_invalid_utf8_pass_through_and_secrets_among_them_are_hidden() {
    let r = redactor();
    let mut input: Vec<u8> = (0u8..=255).collect();
    input.extend_from_slice(b"\xff\xfe password=bin-pass-1 \x00\x1b[31mred\x1b[0m\n");
    input.extend_from_slice(&[0xc3, 0x28, 0xa0, 0xa1, b'\n']);
    let (out, counts) = run(&r, &input);
    assert!(!contains(&out, b"bin-pass-1"));
    assert_eq!(counts.values().sum::<u64>(), 1, "{counts:?}");
    assert!(out.starts_with(&(0u8..=255).collect::<Vec<_>>()));
    assert!(out.ends_with(&[0xc3, 0x28, 0xa0, 0xa1, b'\n']));
    assert!(contains(&out, b"\x1b[31mred\x1b[0m"));
}

#[test]
fn a_pem_key_split_over_many_writes_is_hidden_whole() {
    let r = redactor();
    let mut input = Vec::new();
    for i in 0..20_000 {
        input.extend_from_slice(format!("line {i} of filler text\n").as_bytes());
    }
    input.extend_from_slice(PEM.as_bytes());
    input.extend_from_slice(b"after the key\n");
    let mut out = Vec::new();
    let mut s = RedactStream::new(&r, &mut out);
    for piece in input.chunks(7) {
        s.write_all(piece).expect("write");
    }
    let (_, counts) = s.finish().expect("finish");
    assert_eq!(counts.get(PEM_RULE), Some(&1), "{counts:?}");
    assert!(!contains(&out, b"PlantedPem") && !contains(&out, b"bXlzZWNy"));
    assert!(contains(
        &out,
        b"-----END RSA PRIVATE KEY-----\nafter the key\n"
    ));
    assert!(contains(&out, b"line 19999 of filler text\n-----BEGIN RSA"));
}

#[test]
fn a_pem_key_without_end_hides_a_bounded_stretch() {
    let r = redactor();
    let mut input = b"-----BEGIN PRIVATE KEY-----\nTruncatedKeyBody0123\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', PEM_MAX * 3));
    let (out, counts) = run(&r, &input);
    assert_eq!(counts.get(PEM_RULE), Some(&1));
    assert!(!contains(&out, b"TruncatedKeyBody"));
    assert!(out.len() > PEM_MAX, "only a bounded stretch is hidden");
}

#[test]
fn placeholders_are_not_redacted_again() {
    let r = redactor();
    let (once, _) = run(&r, b"password=twice-1\n");
    let (twice, counts) = run(&r, &once);
    assert_eq!(once, twice);
    assert!(counts.is_empty());
}

/// Text redacted once (as the controller does when it keeps a log tail),
/// then by a bundle with another key, for each line of `input`.
fn redacted_by_the_controller_then_the_bundle(input: &[u8]) -> (Vec<u8>, Vec<u8>, RedactionCounts) {
    let controller = Redactor::with_hash_key(&[], b"the controller's key");
    let (once, _) = run(&controller, input);
    let (twice, counts) = run(&redactor(), &once);
    (once, twice, counts)
}

#[test]
fn a_second_pass_leaves_every_placeholder_and_what_surrounds_it_as_it_was() {
    let input = format!(
        "cloning https://u:p4ss-word@host.example/x\n\
         push to https://deploy:hunter2-url@git.example.com:8443/repo.git done\n\
         DB_PASSWORD=hunter2-env API_TOKEN=tok-export-77\n\
         Authorization: Bearer abcdefghijklmnop0123\n\
         github ghp_abcdefghijklmnopqrstuvwxyz0123456789 and done\n\
         {PEM}after the key\n"
    );
    let (once, twice, counts) = redacted_by_the_controller_then_the_bundle(input.as_bytes());
    let text = String::from_utf8_lossy(&twice);
    assert_eq!(twice, once, "nothing is matched again:\n{text}");
    assert!(counts.is_empty(), "{counts:?}");
    for kept in [
        "cloning https://u:***REDACTED:url-credentials:",
        "***@host.example/x\n",
        "***@git.example.com:8443/repo.git done\n",
        "-----BEGIN RSA PRIVATE KEY-----***REDACTED:pem-private-key:",
        "***-----END RSA PRIVATE KEY-----\nafter the key\n",
    ] {
        assert!(text.contains(kept), "lacks {kept:?}:\n{text}");
    }
    for secret in [
        "p4ss-word",
        "hunter2-url",
        "hunter2-env",
        "tok-export-77",
        "MIIEow",
    ] {
        assert!(!text.contains(secret), "{secret} shows:\n{text}");
    }
    // Each placeholder is whole: opening, rule, 10 hex digits, closing.
    let placeholders = text.matches("***REDACTED:").count();
    let whole = regex::Regex::new(r"\*\*\*REDACTED:[a-z-]+:[0-9a-f]{10}\*\*\*").expect("regex");
    assert_eq!(whole.find_iter(&text).count(), placeholders, "{text}");
}

#[test]
fn a_secret_next_to_a_placeholder_is_still_hidden_and_the_placeholder_kept() {
    let r = redactor();
    let (once, _) = run(&r, b"url https://u:first-pass-1@h.example/x\n");
    let once = String::from_utf8(once).expect("text");
    let line = format!("{} password=second-pass-2\n", once.trim_end());
    let (out, counts) = run(&r, line.as_bytes());
    let out = String::from_utf8(out).expect("text");
    assert!(out.starts_with(once.trim_end()), "{out}");
    assert!(!out.contains("second-pass-2"), "{out}");
    assert_eq!(counts.get("key-value"), Some(&1), "{counts:?}");
}

#[test]
fn sensitive_names_are_told_from_references_to_secrets() {
    for n in [
        "password",
        "DB_PASSWORD",
        "\"api_key\"",
        "clientSecret",
        "X-Auth-Token",
        "aws_secret_access_key",
    ] {
        assert!(sensitive_name(n.as_bytes()), "{n}");
    }
    for n in [
        "secretName",
        "tokenSecretRef",
        "passwordFile",
        "PWD",
        "author",
        "key",
        "user",
        "sessionAffinity",
    ] {
        assert!(!sensitive_name(n.as_bytes()), "{n}");
    }
}

#[test]
fn the_hand_split_of_a_key_value_match_finds_the_groups_the_captures_find() {
    let rules = rules();
    let rule = rules
        .iter()
        .find(|r| r.split.is_some())
        .expect("a rule splits by hand");
    let split = rule.split.expect("split");
    let mut lines: Vec<&str> = CORPUS.iter().map(|c| c.1).collect();
    lines.extend(HARMLESS);
    // Separators the alternation could read either way, blanks, quotes,
    // escaped JSON, values that start with a separator.
    lines.extend([
        "token:=abc123",
        "token=>abc123",
        "password := \"quoted value\"",
        "api_key:\t 'single'",
        "{\\\"client_secret\\\": \\\"s3cr3t-in-escaped-json\\\"}",
        "x-auth-token:=\"q\" and secret_key = v2 and pwd:",
        "AUTH_TOKEN==double",
        "session:  :colon",
    ]);
    let mut compared = 0;
    for line in lines {
        let line = line.as_bytes();
        let mut locs = rule.regex.capture_locations();
        let mut at = 0;
        while let Some(m) = rule.regex.captures_read_at(&mut locs, line, at) {
            let name = locs
                .get(rule.name_group.expect("name group"))
                .expect("name");
            let value = locs.get(rule.group).expect("value");
            let o = m.start();
            let by_hand =
                split(m.as_bytes()).map(|((a, b), (c, d))| ((o + a, o + b), (o + c, o + d)));
            assert_eq!(
                by_hand,
                Some((name, value)),
                "groups of {:?} in {:?}",
                String::from_utf8_lossy(m.as_bytes()),
                String::from_utf8_lossy(line)
            );
            compared += 1;
            at = m.end().max(m.start() + 1);
        }
    }
    assert!(compared >= 20, "only {compared} matches compared");
}

/// Issue #30: one secret, one placeholder in a bundle, whether the bundle
/// read it in a live log or in a tail the controller kept. Both derive the
/// placeholder as HMAC(namespace key, value); the controller, knowing no
/// Secret values, hides them by pattern, and the bundle relabels those
/// whose hash is a known value's as it labels the value itself.
#[test]
fn the_controller_and_the_bundle_agree_on_placeholders_when_keyed_alike() {
    let key = b"the namespace's redaction key, 64 hex digits in real life";
    let db = b"db-pw-from-a-Secret-9".to_vec();
    // The controller: no literals, the namespace's key.
    let controller = Redactor::with_hash_key(&[], key);
    // The bundle: the namespace's Secret values, the same key.
    let bundle = Redactor::with_hash_key(std::slice::from_ref(&db), key);
    let printed = b"DB_PASSWORD=db-pw-from-a-Secret-9\nfetch https://u:url-pw-7x@host.example/x\n";
    let (kept, _) = run(&controller, printed);
    assert!(!contains(&kept, &db) && !contains(&kept, b"url-pw-7x"));
    let final_log = bundle.relabel_known(&run(&bundle, &kept).0);
    let (live, _) = run(&bundle, printed);
    assert_eq!(
        String::from_utf8_lossy(&final_log),
        String::from_utf8_lossy(&live)
    );
    // The Secret's value: known-secret with the keyed hash of the value.
    let known = bundle.placeholder(KNOWN_SECRET, &db);
    assert_eq!(known, controller.placeholder(KNOWN_SECRET, &db));
    assert!(contains(&live, format!("DB_PASSWORD={known}\n").as_bytes()));
    // The URL's password, known to neither: the pattern's placeholder.
    let url = controller.placeholder("url-credentials", b"url-pw-7x");
    assert!(contains(
        &live,
        format!("https://u:{url}@host.example").as_bytes()
    ));

    // Keyed differently (no namespace key on one side), they differ: the
    // old behaviour, and what the bundle's report says then.
    let alone = Redactor::with_hash_key(std::slice::from_ref(&db), b"a key of the bundle's own");
    let (kept_elsewhere, _) = run(&controller, printed);
    assert_ne!(alone.relabel_known(&kept_elsewhere), run(&alone, printed).0);
}

#[test]
fn a_placeholder_is_a_keyed_hash_of_the_value_and_never_the_value_or_an_unkeyed_hash() {
    let a = Redactor::with_hash_key(&[], b"key one");
    let b = Redactor::with_hash_key(&[], b"key two");
    let p = a.placeholder("key-value", b"hunter2");
    // Deterministic for one key, different under another key.
    assert_eq!(
        p,
        Redactor::with_hash_key(&[], b"key one").placeholder("key-value", b"hunter2")
    );
    assert_ne!(p, b.placeholder("key-value", b"hunter2"));
    assert!(!p.contains("hunter2"), "{p}");
    // Not an unkeyed digest of the value (a low-entropy password could be
    // guessed back from one).
    let unkeyed = ring::digest::digest(&ring::digest::SHA256, b"hunter2");
    let hex: String = unkeyed.as_ref()[..5]
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
    assert!(!p.contains(&hex), "{p}");
    assert!(
        regex::Regex::new(r"^\*\*\*REDACTED:key-value:[0-9a-f]{10}\*\*\*$")
            .expect("regex")
            .is_match(&p),
        "{p}"
    );
}

#[test]
fn relabelling_touches_only_placeholders_of_known_values() {
    let key = b"k";
    let r = Redactor::with_hash_key(&[b"known-value-1".to_vec()], key);
    let known = r.placeholder("key-value", b"known-value-1");
    let other = r.placeholder("key-value", b"unknown-value-2");
    let input = format!("a {known} b {other} c ***REDACTED:odd*** d\n");
    let out = String::from_utf8(r.relabel_known(input.as_bytes())).expect("utf-8");
    assert_eq!(
        out,
        format!(
            "a {} b {other} c ***REDACTED:odd*** d\n",
            r.placeholder(KNOWN_SECRET, b"known-value-1")
        )
    );
}

fn added(literals: &[&str], patterns: &[&str]) -> Redactor {
    Redactor::with_added_rules_and_key(
        &literals
            .iter()
            .map(|l| l.as_bytes().to_vec())
            .collect::<Vec<_>>(),
        patterns
            .iter()
            .map(|p| Regex::new(p).expect("pattern"))
            .collect(),
        b"pass key",
    )
}

#[test]
fn added_rules_hide_literals_and_patterns_and_nothing_the_built_in_rules_would() {
    let r = added(&["Acme Widgets"], &[r"order-\d{4}"]);
    let input = b"shipping order-1234 to ACME WIDGETS GmbH\nDB_PASSWORD=hunter2planted\n";
    let (out, counts) = run(&r, input);
    let text = String::from_utf8(out).expect("utf-8");
    assert!(!text.to_lowercase().contains("acme widgets"), "{text}");
    assert!(!text.contains("order-1234"), "{text}");
    assert!(text.contains("***REDACTED:literal:"), "{text}");
    assert!(text.contains("***REDACTED:regex:"), "{text}");
    assert!(text.contains(" GmbH\n"), "{text}");
    // Only the added rules run: the password is left to the bundle's own pass.
    assert!(text.contains("DB_PASSWORD=hunter2planted\n"), "{text}");
    assert_eq!(
        counts,
        RedactionCounts::from([(LITERAL_RULE, 1), (REGEX_RULE, 1)])
    );
}

#[test]
fn an_added_pattern_matches_within_one_line_and_never_across() {
    let r = added(&[], &[r"^start.*end$", r"a\sb"]);
    let (out, counts) = run(&r, b"start one end\r\nstart two\nend\na\nb\n");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(text.starts_with("***REDACTED:regex:"), "{text}");
    assert!(text.contains("\r\nstart two\nend\na\nb\n"), "{text}");
    assert_eq!(counts.get(REGEX_RULE), Some(&1), "{text}");
}

#[test]
fn a_second_pass_of_added_rules_finds_nothing_in_its_own_output() {
    // Patterns that would match inside placeholders (their rule names,
    // hex hashes, the stars) do not touch them.
    let r = added(
        &["Acme Widgets", "REDACTED:literal"],
        &[r"[0-9a-f]{6,}", r"\*+", "regex", r"Acme\S*"],
    );
    let input = b"Acme Widgets paid 0xdeadbeef; see ***REDACTED:jwt:0123456789***\nAcmeCorp\n";
    let (once, first) = run(&r, input);
    assert!(!first.is_empty());
    let (twice, second) = run(&r, &once);
    assert_eq!(
        String::from_utf8_lossy(&twice),
        String::from_utf8_lossy(&once)
    );
    assert!(second.is_empty(), "{second:?}");
    assert!(
        contains(&once, b"***REDACTED:jwt:0123456789***"),
        "{}",
        String::from_utf8_lossy(&once)
    );
}

#[test]
fn counts_are_described_most_first_without_values() {
    let counts = RedactionCounts::from([("jwt", 1), (LITERAL_RULE, 12), ("aws-access-key", 3)]);
    assert_eq!(
        describe_counts(&counts),
        "12 × literal, 3 × aws-access-key, 1 × jwt"
    );
    assert_eq!(describe_counts(&RedactionCounts::new()), "nothing");
}
