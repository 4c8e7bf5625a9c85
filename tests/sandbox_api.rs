//! API machinery over raw HTTP, checked against what the Kubernetes API
//! Concepts document: consistent pagination, resourceVersionMatch, 410
//! Expired, bookmarks, dry run, server-side apply conflicts, finalizers,
//! foreground deletion, evictions and the fault endpoints.

mod common;

use std::time::{Duration, Instant};

use common::{TestSandbox, err, out};
use serde_json::{Value, json};

/// One answer: status code, Retry-After header, body as JSON (or a string).
struct Answer {
    code: u16,
    retry_after: Option<String>,
    body: Value,
}

fn call(sb: &TestSandbox, method: &str, path: &str, ct: &str, body: Option<Value>) -> Answer {
    let url = format!("{}{path}", sb.sandbox().url());
    sb.rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = sb.sandbox().http_client().expect("http client");
        let mut req = client.request(method.parse().expect("method"), &url);
        if let Some(b) = body {
            req = req
                .header("content-type", ct)
                .body(serde_json::to_vec(&b).expect("json"));
        }
        let resp = req.send().await.expect("request");
        let code = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            code,
            retry_after,
            body,
        }
    })
}

fn get(sb: &TestSandbox, path: &str) -> Answer {
    call(sb, "GET", path, "", None)
}

fn post(sb: &TestSandbox, path: &str, body: Value) -> Answer {
    call(sb, "POST", path, "application/json", Some(body))
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}})
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// The ConfigMap every namespace holds, as in a cluster.
const ROOT_CA: &str = "kube-root-ca.crt";

/// A sandbox whose `default` namespace already has its kube-root-ca.crt,
/// so the lists below see the same objects every run.
fn start() -> TestSandbox {
    let sb = TestSandbox::start();
    common::eventually_blocking("kube-root-ca.crt in default", || {
        (get(&sb, &format!("{CMS}/{ROOT_CA}")).code == 200).then_some(())
    });
    sb
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            i["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .filter(|n| n != ROOT_CA)
        .collect()
}

fn compact(sb: &TestSandbox) {
    let a = post(sb, "/sandbox/faults", json!({"compact": true}));
    assert_eq!(a.code, 200, "{}", a.body);
}

#[test]
fn a_selected_page_goes_on_from_its_token_without_a_remaining_count() {
    let sb = start();
    for (n, tier) in [("a", "x"), ("b", "y"), ("c", "x"), ("d", "x"), ("e", "y")] {
        let mut o = cm(n);
        o["metadata"]["labels"] = json!({"tier": tier});
        assert_eq!(post(&sb, CMS, o).code, 201);
    }
    let first = get(&sb, &format!("{CMS}?limit=2&labelSelector=tier%3Dx")).body;
    assert_eq!(names(&first), ["a", "c"]);
    // kube-apiserver cannot count what a selector would keep without
    // reading on, so it leaves the count out.
    assert!(
        first["metadata"].get("remainingItemCount").is_none(),
        "{first}"
    );
    let token = first["metadata"]["continue"].as_str().expect("continue");
    let rest = get(
        &sb,
        &format!("{CMS}?limit=2&labelSelector=tier%3Dx&continue={token}"),
    )
    .body;
    assert_eq!(names(&rest), ["d"], "{rest}");
    assert!(rest["metadata"].get("continue").is_none(), "{rest}");
    // Unselected, a page from the middle counts the rest.
    let all = get(&sb, &format!("{CMS}?limit=2")).body;
    let token = all["metadata"]["continue"].as_str().expect("continue");
    let middle = get(&sb, &format!("{CMS}?limit=2&continue={token}")).body;
    assert_eq!(names(&middle), ["c", "d"]);
    // e and kube-root-ca.crt.
    assert_eq!(middle["metadata"]["remainingItemCount"], 2, "{middle}");
}

#[test]
fn paginated_lists_read_one_snapshot_and_an_expired_token_gets_410_with_a_fresh_one() {
    let sb = start();
    for n in ["a", "b", "c", "d", "e"] {
        assert_eq!(post(&sb, CMS, cm(n)).code, 201);
    }
    let first = get(&sb, &format!("{CMS}?limit=2")).body;
    assert_eq!(names(&first), ["a", "b"]);
    // c, d, e and kube-root-ca.crt.
    assert_eq!(first["metadata"]["remainingItemCount"], 4);
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("continue")
        .to_string();
    let snapshot_rv = first["metadata"]["resourceVersion"].clone();
    // Changes after the first page do not show in later pages.
    assert_eq!(call(&sb, "DELETE", &format!("{CMS}/c"), "", None).code, 200);
    assert_eq!(post(&sb, CMS, cm("f")).code, 201);
    let rest = get(&sb, &format!("{CMS}?limit=10&continue={token}")).body;
    assert_eq!(names(&rest), ["c", "d", "e"], "{rest}");
    assert_eq!(rest["metadata"]["resourceVersion"], snapshot_rv);
    assert!(rest["metadata"].get("continue").is_none(), "{rest}");
    // A fresh list sees the present.
    assert_eq!(names(&get(&sb, CMS).body), ["a", "b", "d", "e", "f"]);

    compact(&sb);
    let expired = get(&sb, &format!("{CMS}?limit=2&continue={token}"));
    assert_eq!(expired.code, 410, "{}", expired.body);
    assert_eq!(expired.body["kind"], "Status");
    assert_eq!(expired.body["reason"], "Expired");
    assert!(
        expired.body["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("The provided continue parameter is too old"),
        "{}",
        expired.body
    );
    // The fresh token goes on from the same place, inconsistently.
    let fresh = expired.body["metadata"]["continue"]
        .as_str()
        .expect("fresh token");
    let rest = get(&sb, &format!("{CMS}?limit=10&continue={fresh}")).body;
    assert_eq!(names(&rest), ["d", "e", "f"], "{rest}");
    let bad = get(&sb, &format!("{CMS}?continue=zz"));
    assert_eq!(
        (bad.code, bad.body["reason"].as_str()),
        (400, Some("BadRequest"))
    );
}

#[test]
fn resource_version_match_reads_exact_snapshots_and_is_validated() {
    let sb = start();
    let a = post(&sb, CMS, cm("a")).body;
    let at = a["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    post(&sb, CMS, cm("b"));
    let exact = get(
        &sb,
        &format!("{CMS}?resourceVersion={at}&resourceVersionMatch=Exact"),
    );
    assert_eq!(exact.code, 200, "{}", exact.body);
    assert_eq!(names(&exact.body), ["a"]);
    assert_eq!(exact.body["metadata"]["resourceVersion"], at.as_str());
    let newer = get(
        &sb,
        &format!("{CMS}?resourceVersion={at}&resourceVersionMatch=NotOlderThan"),
    );
    assert_eq!(names(&newer.body), ["a", "b"]);

    let no_rv = get(&sb, &format!("{CMS}?resourceVersionMatch=Exact"));
    assert_eq!(no_rv.code, 422, "{}", no_rv.body);
    assert_eq!(no_rv.body["reason"], "Invalid");
    assert_eq!(no_rv.body["details"]["kind"], "ListOptions");
    assert_eq!(
        no_rv.body["details"]["causes"][0]["field"],
        "resourceVersionMatch"
    );
    let zero = get(
        &sb,
        &format!("{CMS}?resourceVersion=0&resourceVersionMatch=Exact"),
    );
    assert_eq!(zero.code, 422, "{}", zero.body);
    let odd = get(
        &sb,
        &format!("{CMS}?resourceVersion=1&resourceVersionMatch=Sometimes"),
    );
    assert_eq!(odd.code, 422, "{}", odd.body);
    let future = get(
        &sb,
        &format!("{CMS}?resourceVersion=999999&resourceVersionMatch=NotOlderThan"),
    );
    assert_eq!(future.code, 504, "{}", future.body);
    assert_eq!(
        future.body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );

    compact(&sb);
    let gone = get(
        &sb,
        &format!("{CMS}?resourceVersion={at}&resourceVersionMatch=Exact"),
    );
    assert_eq!(gone.code, 410, "{}", gone.body);
    assert_eq!(
        (gone.body["reason"].as_str(), gone.body["code"].as_i64()),
        (Some("Expired"), Some(410))
    );
    assert!(
        gone.body["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&format!("too old resource version: {at} (")),
        "{}",
        gone.body
    );
}

/// Reads watch lines until `enough` says so or the deadline passes.
fn watch_lines(sb: &TestSandbox, path: &str, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let url = format!("{}{path}", sb.sandbox().url());
    sb.rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut resp = sb
            .sandbox()
            .http_client()
            .expect("http client")
            .get(&url)
            .send()
            .await
            .expect("watch");
        let mut buf = Vec::new();
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !enough(&events) {
            let chunk = tokio::time::timeout_at(deadline, resp.chunk())
                .await
                .expect("watch events in time")
                .expect("chunk");
            let Some(chunk) = chunk else { break };
            buf.extend_from_slice(&chunk);
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                events.push(serde_json::from_slice(&line).expect("event json"));
            }
        }
        events
    })
}

#[test]
fn watches_replay_from_a_version_end_with_410_once_compacted_and_mark_initial_events() {
    let sb = start();
    let a = post(&sb, CMS, cm("a")).body;
    let rv_a = a["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    post(&sb, CMS, cm("b"));
    let replay = watch_lines(&sb, &format!("{CMS}?watch=1&resourceVersion={rv_a}"), |e| {
        !e.is_empty()
    });
    assert_eq!(replay[0]["type"], "ADDED");
    assert_eq!(replay[0]["object"]["metadata"]["name"], "b");

    let initial = watch_lines(
        &sb,
        &format!(
            "{CMS}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion="
        ),
        |e| e.iter().any(|e| e["type"] == "BOOKMARK"),
    );
    let initial: Vec<Value> = initial
        .into_iter()
        .filter(|e| e["object"]["metadata"]["name"] != ROOT_CA)
        .collect();
    let types: Vec<&str> = initial.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "BOOKMARK"], "{initial:?}");
    let bookmark = &initial[2]["object"];
    assert_eq!(
        bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let bookmark_rv: u64 = bookmark["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("bookmark rv");
    assert!(bookmark_rv >= 1, "{bookmark}");

    compact(&sb);
    let gone = watch_lines(&sb, &format!("{CMS}?watch=1&resourceVersion={rv_a}"), |e| {
        !e.is_empty()
    });
    assert_eq!(gone[0]["type"], "ERROR", "{gone:?}");
    let status = &gone[0]["object"];
    assert_eq!(
        (
            status["kind"].as_str(),
            status["code"].as_i64(),
            status["reason"].as_str()
        ),
        (Some("Status"), Some(410), Some("Expired"))
    );
}

#[test]
fn dry_run_validates_and_answers_without_storing() {
    let sb = start();
    let created = post(&sb, &format!("{CMS}?dryRun=All"), cm("ghost"));
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(created.body["metadata"]["name"], "ghost");
    assert_eq!(get(&sb, &format!("{CMS}/ghost")).code, 404);
    let invalid = post(&sb, &format!("{CMS}?dryRun=All"), cm("Not_Valid"));
    assert_eq!(invalid.code, 422, "{}", invalid.body);

    post(&sb, CMS, cm("real"));
    let patched = call(
        &sb,
        "PATCH",
        &format!("{CMS}/real?dryRun=All"),
        "application/merge-patch+json",
        Some(json!({"data": {"k": "changed"}})),
    );
    assert_eq!(patched.body["data"]["k"], "changed", "{}", patched.body);
    assert_eq!(get(&sb, &format!("{CMS}/real")).body["data"]["k"], "real");
    let deleted = call(&sb, "DELETE", &format!("{CMS}/real?dryRun=All"), "", None);
    assert_eq!(deleted.code, 200, "{}", deleted.body);
    assert_eq!(get(&sb, &format!("{CMS}/real")).code, 200);

    // kubectl --dry-run=server goes through the same path.
    let o = sb.kubectl(&["delete", "cm", "real", "--dry-run=server"]);
    assert_eq!(
        out(&o).trim(),
        "configmap \"real\" deleted (server dry run)",
        "{}",
        err(&o)
    );
    assert_eq!(get(&sb, &format!("{CMS}/real")).code, 200);
}

fn apply(sb: &TestSandbox, manager: &str, force: bool, data: Value) -> Answer {
    let force = if force { "&force=true" } else { "" };
    call(
        sb,
        "PATCH",
        &format!("{CMS}/shared?fieldManager={manager}{force}"),
        "application/apply-patch+yaml",
        Some(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": data}),
        ),
    )
}

#[test]
fn server_side_apply_conflicts_name_the_field_and_manager_until_forced() {
    let sb = start();
    assert_eq!(
        apply(
            &sb,
            "alice",
            false,
            json!({"owner": "alice", "common": "x"})
        )
        .code,
        201
    );
    // Co-owning a field at the same value is no conflict.
    let same = apply(&sb, "bob", false, json!({"common": "x", "mine": "bob"}));
    assert_eq!(same.code, 200, "{}", same.body);
    let clash = apply(&sb, "bob", false, json!({"owner": "bob"}));
    assert_eq!(clash.code, 409, "{}", clash.body);
    assert_eq!(clash.body["reason"], "Conflict");
    assert_eq!(
        clash.body["message"],
        "Apply failed with 1 conflict: conflict with \"alice\": .data.owner"
    );
    assert_eq!(
        clash.body["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.owner"}])
    );
    assert_eq!(
        get(&sb, &format!("{CMS}/shared")).body["data"]["owner"],
        "alice"
    );
    let forced = apply(&sb, "bob", true, json!({"owner": "bob"}));
    assert_eq!(forced.code, 200, "{}", forced.body);
    assert_eq!(forced.body["data"]["owner"], "bob");
    // Bob took the field: alice applying without it leaves it alone.
    let alice = apply(&sb, "alice", false, json!({"common": "x"}));
    assert_eq!(alice.code, 200, "{}", alice.body);
    assert_eq!(alice.body["data"]["owner"], "bob");
}

#[test]
fn finalizers_hold_a_deletion_and_foreground_deletion_waits_for_dependents() {
    let sb = start();
    let mut held = cm("held");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    post(&sb, CMS, held);
    let d = call(&sb, "DELETE", &format!("{CMS}/held"), "", None);
    assert_eq!(d.code, 202, "{}", d.body);
    let now = get(&sb, &format!("{CMS}/held")).body;
    assert!(now["metadata"]["deletionTimestamp"].is_string(), "{now}");
    // A finalizer may not be added once deletion started; removing the last one deletes.
    let released = call(
        &sb,
        "PATCH",
        &format!("{CMS}/held"),
        "application/merge-patch+json",
        Some(json!({"metadata": {"finalizers": null}})),
    );
    assert_eq!(released.code, 200, "{}", released.body);
    assert_eq!(get(&sb, &format!("{CMS}/held")).code, 404);

    // Foreground: the owner stays, marked, while a dependent is held.
    let owner = post(&sb, CMS, cm("owner")).body;
    let mut kid = cm("kid");
    kid["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "owner", "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true}]);
    kid["metadata"]["finalizers"] = json!(["example.com/hold"]);
    post(&sb, CMS, kid);
    let d = call(
        &sb,
        "DELETE",
        &format!("{CMS}/owner"),
        "application/json",
        Some(json!({"propagationPolicy": "Foreground"})),
    );
    assert_eq!(d.code, 202, "{}", d.body);
    let marked = get(&sb, &format!("{CMS}/owner")).body;
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !get(&sb, &format!("{CMS}/kid")).body["metadata"]["deletionTimestamp"].is_string() {
        assert!(
            Instant::now() < deadline,
            "dependent never marked for deletion"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(&sb, &format!("{CMS}/owner")).code, 200, "owner waits");
    call(
        &sb,
        "PATCH",
        &format!("{CMS}/kid"),
        "application/merge-patch+json",
        Some(json!({"metadata": {"finalizers": null}})),
    );
    while get(&sb, &format!("{CMS}/owner")).code != 404 {
        assert!(Instant::now() < deadline, "owner never deleted");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn evictions_answer_429_while_a_budget_forbids_them() {
    let sb = start();
    let pods = "/api/v1/namespaces/default/pods";
    for name in ["a", "b"] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}});
        assert_eq!(post(&sb, pods, pod).code, 201);
    }
    sb.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/a",
        "pod/b",
        "--timeout=60s",
    ]);
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}});
    assert_eq!(
        post(
            &sb,
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            pdb
        )
        .code,
        201
    );
    let eviction =
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}});
    let refused = post(&sb, &format!("{pods}/a/eviction"), eviction.clone());
    assert_eq!(refused.code, 429, "{}", refused.body);
    assert_eq!(refused.body["reason"], "TooManyRequests");
    assert_eq!(
        refused.body["details"]["causes"][0]["message"],
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    );
    call(
        &sb,
        "PATCH",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
        "application/merge-patch+json",
        Some(json!({"spec": {"minAvailable": 1}})),
    );
    let evicted = post(&sb, &format!("{pods}/a/eviction"), eviction);
    assert_eq!(evicted.code, 201, "{}", evicted.body);
    assert_eq!(evicted.body["status"], "Success");
    let a = get(&sb, &format!("{pods}/a"));
    assert!(
        a.code == 404 || a.body["metadata"]["deletionTimestamp"].is_string(),
        "{}",
        a.body
    );
    let missing = post(
        &sb,
        &format!("{pods}/nope/eviction"),
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "nope"}}),
    );
    assert_eq!(missing.code, 404);
}

#[test]
fn faults_are_driven_through_kubectl_raw_and_answer_like_an_apiserver() {
    let sb = start();
    let rule =
        r#"{"fail":{"pathPrefix":"/api/v1/namespaces/default/configmaps","code":500,"count":1}}"#;
    let added = sb.kubectl_in_ok(&["create", "--raw", "/sandbox/faults", "-f", "-"], rule);
    assert!(added.contains("failure rule added"), "{added}");
    let failed = sb.kubectl(&["get", "configmaps"]);
    assert!(!failed.status.success());
    assert!(
        err(&failed).contains("Error from server (InternalError)")
            && err(&failed).contains("injected fault (500)"),
        "{}",
        err(&failed)
    );
    sb.kubectl_ok(&["get", "configmaps"]);
    let counts: Value =
        serde_json::from_str(&sb.kubectl_ok(&["get", "--raw", "/sandbox/requests"])).expect("json");
    assert!(
        counts["GET /api/v1/namespaces/default/configmaps"]
            .as_u64()
            .is_some_and(|n| n >= 2),
        "{counts}"
    );

    let throttle = json!({"fail": {"pathPrefix": CMS, "code": 429, "count": 1}});
    post(&sb, "/sandbox/faults", throttle);
    let limited = get(&sb, CMS);
    assert_eq!(limited.code, 429);
    assert_eq!(limited.retry_after.as_deref(), Some("1"));
    assert_eq!(limited.body["reason"], "TooManyRequests");
    assert_eq!(get(&sb, CMS).code, 200, "one request only");
    let unknown = post(&sb, "/sandbox/faults", json!({"explode": true}));
    assert_eq!(unknown.code, 400);
}

#[test]
fn a_restart_through_the_admin_endpoint_drops_connections_and_keeps_the_store() {
    let sb = start();
    post(&sb, CMS, cm("kept"));
    let url = format!("{}{CMS}?watch=1", sb.sandbox().url());
    let ended = sb.rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut watch = sb
            .sandbox()
            .http_client()
            .expect("http client")
            .get(&url)
            .send()
            .await
            .expect("watch");
        // The initial ADDED event, then the restart.
        let first = watch.chunk().await.expect("chunk").expect("an event");
        assert!(String::from_utf8_lossy(&first).contains("kept"));
        let r = sb
            .sandbox()
            .http_client()
            .expect("http client")
            .post(format!("{}/sandbox/faults", sb.sandbox().url()))
            .body(r#"{"restart": {"downMs": 300}}"#)
            .send()
            .await
            .expect("admin");
        assert_eq!(r.status().as_u16(), 200);
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match watch.chunk().await {
                    Ok(Some(_)) => continue,
                    Ok(None) | Err(_) => return,
                }
            }
        })
        .await
        .is_ok()
    });
    assert!(ended, "the open watch ended with the restart");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = sb.kubectl(&["get", "cm", "kept", "-o", "name"]);
        if o.status.success() {
            assert_eq!(out(&o).trim(), "configmap/kept");
            break;
        }
        assert!(Instant::now() < deadline, "never back: {}", err(&o));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The configmaps `forget=yes` the API lists, by name with their versions
/// (listed across namespaces, so as not to count as one of the watcher's
/// lists of `default`).
fn labelled(sb: &TestSandbox) -> Vec<(String, String)> {
    let list = get(sb, "/api/v1/configmaps?labelSelector=forget%3Dyes").body;
    let mut items: Vec<(String, String)> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            (
                m["name"].as_str().unwrap_or_default().to_owned(),
                m["resourceVersion"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    items.sort();
    items
}

#[test]
fn history_is_compacted_on_the_interval_and_the_watcher_relists_to_match_the_api() {
    use agentdeck::sandbox::retention::Retention;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let retention = Retention {
        compaction_interval: Duration::from_secs(1),
        ..Retention::default()
    };
    let sb = TestSandbox::start_retaining(
        agentdeck::sandbox::kubelet::KubeletConfig::from_env(),
        retention,
    );
    let labelled_cm = |name: &str| {
        let mut c = cm(name);
        c["metadata"]["labels"] = json!({"forget": "yes"});
        c
    };
    let a = post(&sb, CMS, labelled_cm("a")).body;
    let rv_a = a["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_owned();
    post(&sb, CMS, labelled_cm("b"));

    let client = sb.client();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let _driver = {
        let _g = sb.rt.enter();
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
        // No bookmarks: the watch resumes from the last change it saw.
        let cfg = watcher::Config::default()
            .labels("forget=yes")
            .disable_bookmarks();
        let stream =
            reflector(writer, agentdeck::cluster::listwatch::watcher(api, cfg)).default_backoff();
        sb.rt.spawn(stream.for_each(|_| async {}))
    };
    let cached = || {
        let mut v: Vec<(String, String)> = reader
            .state()
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap_or_default(),
                    c.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    };
    common::eventually_blocking("the watcher's first list", || {
        (cached() == labelled(&sb)).then_some(())
    });
    let lists = |sb: &TestSandbox| {
        sb.sandbox()
            .api()
            .faults
            .requests()
            .get(&format!("GET {CMS}"))
            .copied()
            .unwrap_or(0)
    };
    let lists_before = lists(&sb);

    // The watcher's connection goes and its reconnections fail while the
    // objects change and the history is compacted past what it saw.
    let faults = &sb.sandbox().api().faults;
    faults.fail(agentdeck::sandbox::faults::FailRule {
        path_prefix: CMS.into(),
        method: Some("GET".into()),
        code: 500,
        count: u32::MAX,
    });
    faults.drop_watches();
    let gone = call(&sb, "DELETE", &format!("{CMS}/a"), "", None);
    assert_eq!(gone.code, 200, "{}", gone.body);
    post(&sb, CMS, labelled_cm("c"));
    let store = &sb.sandbox().api().store;
    let written = store.current_rv();
    // No write comes after: the first tick sees `written`, the next compacts to it.
    common::eventually_blocking("a compaction past the last write", || {
        (store.compacted_rv() >= written).then_some(())
    });
    faults.clear();

    let expired = watch_lines(&sb, &format!("{CMS}?watch=1&resourceVersion={rv_a}"), |e| {
        !e.is_empty()
    });
    assert_eq!(expired[0]["type"], "ERROR", "{expired:?}");
    assert_eq!(expired[0]["object"]["code"], 410, "{expired:?}");
    assert_eq!(expired[0]["object"]["reason"], "Expired", "{expired:?}");

    common::eventually_blocking("the watcher's store to match the API again", || {
        let api = labelled(&sb);
        (cached() == api).then_some(api)
    });
    let names: Vec<String> = labelled(&sb).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["b", "c"]);
    assert!(
        lists(&sb) > lists_before,
        "the watcher listed again after its watch got 410 (lists {} then {})",
        lists_before,
        lists(&sb)
    );
}

#[test]
fn a_watch_whose_client_left_ends_without_waiting_for_a_change() {
    let sb = start();
    let store = &sb.sandbox().api().store;
    // Settled: the controllers and the kubelet are subscribed.
    common::eventually_blocking("the controllers subscribed", || {
        (store.subscribers() > 0).then_some(())
    });
    let before = store.subscribers();
    // Secrets of a namespace nothing writes to: the watch has nothing to send.
    let url = format!(
        "{}/api/v1/namespaces/kube-public/secrets?watch=1",
        sb.sandbox().url()
    );
    let watch = sb.rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        sb.sandbox()
            .http_client()
            .expect("http client")
            .get(&url)
            .send()
            .await
            .expect("watch")
    });
    assert_eq!(watch.status(), 200);
    common::eventually_blocking("the watch subscribed", || {
        (store.subscribers() > before).then_some(())
    });
    drop(watch);
    common::eventually_blocking("the watch's receiver gone with its client", || {
        (store.subscribers() <= before).then_some(())
    });
}

/// kube-apiserver drops what a create gives as status; a built-in kind's
/// status is a Go struct, written empty (`status: {}`), so clients that
/// read `.status` of a new Deployment find one (the Python client's
/// `read_namespaced_deployment_status(...).status.ready_replicas`).
#[test]
fn a_created_deployment_has_an_empty_status_whatever_was_sent() {
    let sb = start();
    let created = post(
        &sb,
        "/apis/apps/v1/namespaces/default/deployments",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "fresh"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "fresh"}},
                     "template": {"metadata": {"labels": {"app": "fresh"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"replicas": 7, "readyReplicas": 7}
        }),
    );
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(created.body["status"], json!({}), "{}", created.body);
}
