//! What real clients' own cluster suites check of an API server — metadata
//! only reads, the order and end of what is written, token review
//! audiences, API services, CSR approval, component statuses, watch
//! parameters, the port-forward handshake — each checked through a real
//! client (kube-rs, kubectl) or on the wire where the bytes themselves are
//! the behaviour.

mod common;

use std::time::Duration;

use common::TestSandbox;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

/// A raw request: status code and body text.
fn raw(
    sb: &TestSandbox,
    method: &str,
    path: &str,
    accept: Option<&str>,
    body: Option<Value>,
) -> (u16, String) {
    let url = format!("{}{path}", sb.sandbox().url());
    sb.rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = sb.sandbox().http_client().expect("http client");
        let mut req = client.request(method.parse().expect("method"), &url);
        if let Some(a) = accept {
            req = req.header("Accept", a);
        }
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.expect("request");
        let code = resp.status().as_u16();
        (code, resp.text().await.expect("body"))
    })
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("JSON ({e}): {text}"))
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "meta"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .expect("pod")
}

const POM: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const POM_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

#[test]
fn metadata_only_get_list_watch_and_patch_through_kube_rs() {
    let sb = TestSandbox::start();
    let client = sb.client();
    sb.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        pods.create(&PostParams::default(), &pod("m1"))
            .await
            .expect("created");

        let meta = pods.get_metadata("m1").await.expect("get_metadata");
        assert_eq!(meta.metadata.name.as_deref(), Some("m1"));
        let types = meta.types.expect("typed");
        assert_eq!(
            (types.kind.as_str(), types.api_version.as_str()),
            ("PartialObjectMetadata", "meta.k8s.io/v1")
        );

        let list = pods
            .list_metadata(&ListParams::default())
            .await
            .expect("list_metadata");
        assert_eq!(list.types.kind, "PartialObjectMetadataList");
        assert_eq!(list.types.api_version, "meta.k8s.io/v1");
        assert!(list.metadata.resource_version.is_some());
        let item = list
            .items
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("m1"))
            .expect("m1 listed");
        assert_eq!(
            item.types.as_ref().map(|t| t.kind.as_str()),
            Some("PartialObjectMetadata")
        );

        let patched = pods
            .patch_metadata(
                "m1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"patched": "yes"}}})),
            )
            .await
            .expect("patch_metadata");
        assert_eq!(
            patched
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("patched")),
            Some(&"yes".to_string())
        );

        // A metadata watcher (kube 5 spells `metadata_watcher` as a watcher
        // of `PartialObjectMeta`): the initial list and a live change.
        let metas: Api<PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), "default");
        let mut stream = watcher(metas, watcher::Config::default())
            .applied_objects()
            .boxed();
        let first = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("in time")
            .expect("an item")
            .expect("no error");
        assert_eq!(first.metadata.name.as_deref(), Some("m1"));
        pods.create(&PostParams::default(), &pod("m2"))
            .await
            .expect("created");
        let seen = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(ev) = stream.next().await {
                let ev = ev.expect("no error");
                if ev.metadata.name.as_deref() == Some("m2") {
                    return ev;
                }
            }
            panic!("the watch ended");
        })
        .await
        .expect("m2 seen in time");
        assert_eq!(
            seen.types.as_ref().map(|t| t.kind.as_str()),
            Some("PartialObjectMetadata")
        );
    });

    // On the wire: metadata only, negotiated from a list of types, and the
    // apiserver's 406 for a list asked of one object.
    let (code, text) = raw(
        &sb,
        "GET",
        "/api/v1/namespaces/default/pods/m1",
        Some(&format!("{POM},application/json")),
        None,
    );
    assert_eq!(code, 200, "{text}");
    let body = json_of(&text);
    assert_eq!(body["kind"], "PartialObjectMetadata");
    assert!(
        body.get("spec").is_none() && body.get("status").is_none(),
        "{text}"
    );
    let (code, text) = raw(
        &sb,
        "GET",
        "/api/v1/namespaces/default/pods/m1",
        Some(POM_LIST),
        None,
    );
    assert_eq!(code, 406, "{text}");
    assert!(
        json_of(&text)["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with(
                "you requested PartialObjectMetadataList, but the requested object is not a list"
            ),
        "{text}"
    );
    let (code, text) = raw(
        &sb,
        "GET",
        "/api/v1/namespaces/default/pods",
        Some(POM),
        None,
    );
    assert_eq!(code, 406, "{text}");
    // A plain Accept still gets whole objects.
    let (_, text) = raw(&sb, "GET", "/api/v1/namespaces/default/pods/m1", None, None);
    assert_eq!(json_of(&text)["kind"], "Pod");
}

#[test]
fn objects_and_statuses_are_written_kind_api_version_metadata_first_ending_in_a_newline() {
    let sb = TestSandbox::start();
    let client = sb.client();
    sb.rt.block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "order", "labels": {"a": "b"}}, "data": {"k": "v"}}))
        .expect("cm");
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("created");
    });
    let (code, text) = raw(
        &sb,
        "GET",
        "/api/v1/namespaces/default/configmaps/order",
        None,
        None,
    );
    assert_eq!(code, 200);
    assert!(
        text.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"order","namespace":"default","uid":"#),
        "{text}"
    );
    assert!(text.ends_with("}\n"), "{text:?}");

    let (code, text) = raw(
        &sb,
        "GET",
        "/api/v1/namespaces/default/configmaps/missing",
        None,
        None,
    );
    assert_eq!(code, 404);
    assert!(
        text.starts_with(r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"missing\" not found","reason":"NotFound","details":"#),
        "{text}"
    );
    assert!(text.ends_with("\"code\":404}\n"), "{text:?}");

    // A pod: spec before status; a list: items after its metadata.
    sb.rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(sb.client(), "default");
        pods.create(&PostParams::default(), &pod("ordered"))
            .await
            .expect("created");
    });
    let (_, text) = raw(
        &sb,
        "GET",
        "/api/v1/namespaces/default/pods/ordered",
        None,
        None,
    );
    let (spec, status) = (
        text.find(r#","spec":{"#).expect("spec"),
        text.find(r#","status":{"#).expect("status"),
    );
    assert!(spec < status, "{text}");
    let (_, text) = raw(&sb, "GET", "/api/v1/namespaces/default/pods", None, None);
    assert!(
        text.starts_with(r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"#),
        "{text}"
    );
    assert!(
        text.contains(r#""items":[{"kind":"Pod","apiVersion":"v1","metadata":{"name":"#)
            || text.contains(r#""items":[{"metadata":{"name":"#),
        "{text}"
    );
    assert!(text.ends_with("]}\n"), "{text:?}");
}

#[test]
fn token_reviews_honour_spec_audiences_as_the_service_account_authenticator_does() {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenReview};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sb = TestSandbox::start();
    let client = sb.client();
    sb.rt.block_on(async {
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let sa: ServiceAccount = serde_json::from_value(json!({"apiVersion": "v1",
            "kind": "ServiceAccount", "metadata": {"name": "reviewed"}}))
        .expect("sa");
        sas.create(&PostParams::default(), &sa)
            .await
            .expect("created");
        let request: TokenRequest =
            serde_json::from_value(json!({"apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest", "spec": {"audiences": ["api"]}}))
            .expect("token request");
        let token = sas
            .create_token_request("reviewed", &PostParams::default(), &request)
            .await
            .expect("token minted")
            .status
            .expect("status")
            .token;
        let reviews: Api<TokenReview> = Api::all(client.clone());
        let review = |audiences: Vec<&str>| {
            serde_json::from_value::<TokenReview>(json!({"apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview", "spec": {"token": token, "audiences": audiences}}))
            .expect("review")
        };
        let ok = reviews
            .create(&PostParams::default(), &review(vec!["api"]))
            .await
            .expect("reviewed")
            .status
            .expect("status");
        assert_eq!(ok.authenticated, Some(true), "{ok:?}");
        assert_eq!(ok.audiences, Some(vec!["api".to_owned()]));
        assert_eq!(
            ok.user.and_then(|u| u.username).as_deref(),
            Some("system:serviceaccount:default:reviewed")
        );
        let no = reviews
            .create(&PostParams::default(), &review(vec!["other"]))
            .await
            .expect("reviewed")
            .status
            .expect("status");
        assert_ne!(no.authenticated, Some(true), "{no:?}");
        assert_eq!(
            no.error.as_deref(),
            Some(r#"token audiences ["api"] is invalid for the target audiences ["other"]"#)
        );
        // No audiences; `user` is a struct in Go, so written empty (`{}`).
        assert!(no.audiences.is_none(), "{no:?}");
        assert_eq!(no.user, Some(Default::default()), "{no:?}");
        // No audiences asked: the apiserver's own, which this token is not for.
        let default = reviews
            .create(&PostParams::default(), &review(vec![]))
            .await
            .expect("reviewed")
            .status
            .expect("status");
        assert_ne!(default.authenticated, Some(true), "{default:?}");
    });
}

#[test]
fn api_services_csr_approval_and_component_statuses_are_served_to_kubectl() {
    let sb = TestSandbox::start();
    // Discovery lists the groups; the aggregator's local APIServices exist.
    let apis = sb.kubectl_ok(&["get", "--raw", "/apis"]);
    assert!(
        apis.contains(r#""name":"apiregistration.k8s.io""#),
        "{apis}"
    );
    assert!(apis.contains(r#""name":"certificates.k8s.io""#), "{apis}");
    let services = sb.kubectl_ok(&["get", "apiservices", "-o", "json"]);
    let services = json_of(&services);
    let names: Vec<&str> = services["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    for want in [
        "v1.",
        "v1.apps",
        "v1.batch",
        "v1.apiregistration.k8s.io",
        "v1.certificates.k8s.io",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    let apps = sb.kubectl_ok(&["get", "apiservice", "v1.apps", "-o", "json"]);
    let apps = json_of(&apps);
    assert_eq!(apps["spec"]["group"], "apps");
    assert_eq!(apps["spec"]["groupPriorityMinimum"], 17800);
    assert_eq!(apps["status"]["conditions"][0]["type"], "Available");
    assert_eq!(apps["status"]["conditions"][0]["status"], "True");
    assert_eq!(apps["status"]["conditions"][0]["reason"], "Local");

    // componentstatuses: get and list only.
    let cs = sb.kubectl_ok(&["get", "componentstatuses"]);
    let header: Vec<&str> = cs
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "STATUS", "MESSAGE", "ERROR"], "{cs}");
    let etcd: Vec<&str> = cs
        .lines()
        .find(|l| l.starts_with("etcd-0"))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(etcd, ["etcd-0", "Healthy", "ok"], "{cs}");
    assert!(cs.contains("scheduler"), "{cs}");
    let apps_row = sb.kubectl_ok(&["get", "apiservice", "v1.apps", "--no-headers"]);
    let apps_row: Vec<&str> = apps_row.split_whitespace().collect();
    assert_eq!(apps_row[..3], ["v1.apps", "Local", "True"], "{apps_row:?}");
    let one = json_of(&sb.kubectl_ok(&["get", "cs", "etcd-0", "-o", "json"]));
    assert_eq!(one["conditions"][0]["type"], "Healthy");
    let (code, text) = raw(
        &sb,
        "POST",
        "/api/v1/componentstatuses",
        None,
        Some(json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": "x"}})),
    );
    assert_eq!(code, 405, "{text}");

    // A CSR approved through its /approval subresource by kubectl.
    let csr = r#"{"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
      "metadata": {"name": "agent-csr"},
      "spec": {"request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K",
               "signerName": "kubernetes.io/kube-apiserver-client",
               "usages": ["client auth"]}}"#;
    sb.kubectl_in_ok(&["create", "-f", "-"], csr);
    let approved = sb.kubectl_ok(&["certificate", "approve", "agent-csr"]);
    assert!(approved.contains("approved"), "{approved}");
    let got = json_of(&sb.kubectl_ok(&["get", "csr", "agent-csr", "-o", "json"]));
    let conditions = got["status"]["conditions"].as_array().expect("conditions");
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Approved" && c["status"] == "True"),
        "{got}"
    );
    assert_eq!(
        got["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client"
    );
    // /approval changes only the conditions.
    let mut changed = got.clone();
    changed["spec"]["signerName"] = json!("example.com/other");
    changed["status"]["certificate"] = json!("Zm9v");
    let (code, text) = raw(
        &sb,
        "PUT",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/agent-csr/approval",
        None,
        Some(changed),
    );
    assert_eq!(code, 200, "{text}");
    let after = json_of(&text);
    assert_eq!(
        after["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client"
    );
    assert!(after["status"].get("certificate").is_none(), "{text}");
}

#[test]
fn a_watch_rejects_a_resource_version_or_limit_that_is_not_a_number_as_a_list_does() {
    let sb = TestSandbox::start();
    for watch in ["", "&watch=true"] {
        let (code, text) = raw(
            &sb,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?resourceVersion=abc{watch}"),
            None,
            None,
        );
        assert_eq!(code, 422, "{watch}: {text}");
        let body = json_of(&text);
        assert_eq!(body["reason"], "Invalid", "{text}");
        assert_eq!(body["details"]["causes"][0]["field"], "resourceVersion");
        let (code, text) = raw(
            &sb,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?limit=abc{watch}"),
            None,
            None,
        );
        assert_eq!(code, 400, "{watch}: {text}");
        assert_eq!(
            json_of(&text)["message"],
            r#"strconv.ParseInt: parsing "abc": invalid syntax"#
        );
    }
    // kubectl sees the error rather than a stream.
    let o = sb.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=abc",
        "--request-timeout=5s",
    ]);
    assert!(!o.status.success());
    assert!(
        common::err(&o).contains("must be a non-negative integer"),
        "{}",
        common::err(&o)
    );
}

#[test]
fn a_spdy_port_forward_is_negotiated_as_the_kubelets_handshake_does() {
    let sb = TestSandbox::start();
    sb.kubectl_in_ok(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pf", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "ports": [{"containerPort": 80}]}]}}"#,
    );
    sb.kubectl_ok(&["wait", "--for=condition=Ready", "pod/pf", "--timeout=60s"]);
    let url = format!(
        "{}/api/v1/namespaces/default/pods/pf/portforward?ports=80",
        sb.sandbox().url()
    );
    let ask = |protocol: Option<&str>| {
        sb.rt.block_on(async {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut req = sb
                .sandbox()
                .http_client()
                .expect("client")
                .post(&url)
                .header("Connection", "Upgrade")
                .header("Upgrade", "SPDY/3.1");
            if let Some(p) = protocol {
                req = req.header("X-Stream-Protocol-Version", p);
            }
            let resp = req.send().await.expect("request");
            (resp.status().as_u16(), resp.text().await.expect("body"))
        })
    };
    // httpstream.Handshake: the protocol header is required, and must
    // name one the server speaks; errors are client errors, never retried.
    let (code, text) = ask(None);
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("unable to upgrade: X-Stream-Protocol-Version is required"),
        "{text}"
    );
    let (code, text) = ask(Some("v9.portforward.example"));
    assert_eq!(code, 403, "{text}");
    assert!(
        json_of(&text)["message"]
            .as_str()
            .unwrap_or_default()
            .contains("unable to negotiate protocol: client supports [v9.portforward.example], server accepts [portforward.k8s.io]"),
        "{text}"
    );
}
