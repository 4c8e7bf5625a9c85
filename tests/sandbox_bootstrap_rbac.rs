//! What a kube-apiserver has from its first second (issue 43, items 6 and
//! 7): the RBAC bootstrap policy, the clusterrole-aggregation controller,
//! RBAC by subject name, and a CertificateSigningRequest that records who
//! asked. The policy is `src/sandbox/data/rbac.json`, generated from the
//! golden files kubernetes keeps of what its server creates.

mod common;

use std::collections::BTreeSet;

use common::{TestSandbox, eventually_blocking, out};
use serde_json::{Value, json};

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("JSON ({e}): {text}"))
}

/// The golden policy's objects of one plural.
fn golden(plural: &str) -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/sandbox/data/rbac.json");
    let table = json_of(&std::fs::read_to_string(path).expect("data/rbac.json"));
    table["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .filter(|o| o["plural"] == plural)
        .map(|o| o["object"].clone())
        .collect()
}

fn key(obj: &Value) -> String {
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{ns}/{}", obj["metadata"]["name"].as_str().unwrap_or("")),
        None => obj["metadata"]["name"].as_str().unwrap_or("").to_owned(),
    }
}

fn served(sb: &TestSandbox, plural: &str) -> Vec<Value> {
    let list = json_of(&sb.kubectl_ok(&["get", plural, "-A", "-o", "json"]));
    list["items"].as_array().expect("items").clone()
}

#[test]
fn a_fresh_sandbox_has_the_bootstrap_policy_a_kube_apiserver_creates() {
    let sb = TestSandbox::start();
    for plural in [
        "clusterroles",
        "clusterrolebindings",
        "roles",
        "rolebindings",
    ] {
        let want = golden(plural);
        let got = served(&sb, plural);
        let names = |objs: &[Value]| objs.iter().map(key).collect::<BTreeSet<_>>();
        assert_eq!(names(&got), names(&want), "{plural}");
        for w in &want {
            let g = got.iter().find(|g| key(g) == key(w)).expect("served");
            for field in ["labels", "annotations"] {
                assert_eq!(
                    g["metadata"][field],
                    w["metadata"][field],
                    "{plural} {}: {field}",
                    key(w)
                );
            }
            for field in ["rules", "roleRef", "subjects", "aggregationRule"] {
                // The aggregated roles' rules are the controller's (below).
                if field == "rules" && w.get("aggregationRule").is_some() {
                    continue;
                }
                assert_eq!(
                    g.get(field).filter(|v| !v.is_null()),
                    w.get(field),
                    "{plural} {}: {field}",
                    key(w)
                );
            }
        }
    }
    // As `kubectl get clusterroles` shows them, the names the policy has.
    let table = sb.kubectl_ok(&["get", "clusterroles", "--no-headers"]);
    for name in [
        "system:auth-delegator",
        "system:controller:clusterrole-aggregation-controller",
        "system:certificates.k8s.io:kube-apiserver-client-approver",
        "system:heapster",
        "system:monitoring",
        "system:node-proxier",
    ] {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} in:\n{table}"
        );
    }
    let delegator =
        json_of(&sb.kubectl_ok(&["get", "clusterrole", "system:auth-delegator", "-o", "json"]));
    assert_eq!(
        delegator["rules"],
        json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}
        ])
    );
}

#[test]
fn a_service_account_bound_to_auth_delegator_may_review_tokens_and_access() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&["create", "serviceaccount", "proxy", "-n", "default"]);
    let token = sb
        .kubectl_ok(&["create", "token", "proxy", "-n", "default"])
        .trim()
        .to_owned();
    let review = format!(
        r#"{{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {{"token": "{token}"}}}}"#
    );
    let sar = r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "someone", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "default"}}}"#;
    // Without kubectl's client-side validation, which lists CRDs for a
    // kind without PATCH (as against a cluster): an auth proxy posts the
    // review directly.
    let as_proxy = |body: &str| {
        sb.kubectl_in(
            &[
                "--token",
                &token,
                "create",
                "--validate=false",
                "-f",
                "-",
                "-o",
                "json",
            ],
            body,
        )
    };
    let refused = as_proxy(&review);
    assert!(!refused.status.success(), "{}", out(&refused));
    assert!(
        common::err(&refused).contains("cannot create resource \"tokenreviews\""),
        "{}",
        common::err(&refused)
    );

    sb.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "proxy-auth",
        "--clusterrole=system:auth-delegator",
        "--serviceaccount=default:proxy",
    ]);
    let o = as_proxy(&review);
    assert!(o.status.success(), "{}", common::err(&o));
    let answer = json_of(&out(&o));
    assert_eq!(answer["status"]["authenticated"], true, "{answer}");
    assert_eq!(
        answer["status"]["user"]["username"],
        "system:serviceaccount:default:proxy"
    );
    let o = as_proxy(sar);
    assert!(o.status.success(), "{}", common::err(&o));
    assert_eq!(json_of(&out(&o))["status"]["allowed"], false);
    // Nothing more than that.
    let o = sb.kubectl(&["--token", &token, "get", "pods", "-n", "default"]);
    assert!(!o.status.success(), "{}", out(&o));
}

fn rules_of(sb: &TestSandbox, role: &str) -> Vec<Value> {
    let r = json_of(&sb.kubectl_ok(&["get", "clusterrole", role, "-o", "json"]));
    r["rules"].as_array().cloned().unwrap_or_default()
}

#[test]
fn aggregated_roles_hold_the_rules_of_the_roles_labelled_for_them() {
    let sb = TestSandbox::start();
    let admin = sb.kubectl_ok(&["get", "clusterrole", "admin", "-o", "yaml"]);
    assert!(
        admin.contains("aggregate-to-admin") && admin.contains("localsubjectaccessreviews"),
        "{admin}"
    );
    // admin = edit's rules (edit = aggregate-to-edit's, then view's), then
    // aggregate-to-admin's: the order the Go controller writes.
    let to = |n: &str| rules_of(&sb, &format!("system:aggregate-to-{n}"));
    assert_eq!(rules_of(&sb, "view"), to("view"));
    let edit = rules_of(&sb, "edit");
    assert_eq!(edit[..to("edit").len()], to("edit")[..]);
    let admin = rules_of(&sb, "admin");
    assert_eq!(admin[..edit.len()], edit[..]);
    assert!(to("admin").iter().all(|r| admin.contains(r)), "{admin:?}");

    // A role labelled for view extends view, and so edit and admin.
    let widgets = json!({"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "widgets-view",
                     "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [widgets]});
    sb.kubectl_in_ok(&["create", "-f", "-"], &role.to_string());
    for r in ["view", "edit", "admin"] {
        eventually_blocking(&format!("{r} has the widgets rule"), || {
            rules_of(&sb, r).contains(&widgets).then_some(())
        });
    }
    // Changed, the aggregated roles follow; deleted, the rule goes.
    let more = json!({"apiGroups": ["example.com"], "resources": ["widgets", "gadgets"], "verbs": ["get"]});
    let mut changed = role.clone();
    changed["rules"] = json!([more]);
    sb.kubectl_in_ok(&["apply", "-f", "-"], &changed.to_string());
    eventually_blocking("admin follows the change", || {
        let rules = rules_of(&sb, "admin");
        (rules.contains(&more) && !rules.contains(&widgets)).then_some(())
    });
    sb.kubectl_ok(&["delete", "clusterrole", "widgets-view"]);
    eventually_blocking("view drops the deleted role's rule", || {
        (!rules_of(&sb, "view").contains(&more)).then_some(())
    });
    assert_eq!(rules_of(&sb, "view"), to("view"));
}

#[test]
fn can_i_as_a_service_account_that_does_not_exist_answers_from_its_bindings() {
    let sb = TestSandbox::start();
    sb.kubectl_ok(&["create", "namespace", "team"]);
    sb.kubectl_ok(&[
        "create",
        "rolebinding",
        "later-view",
        "-n",
        "team",
        "--clusterrole=view",
        "--serviceaccount=team:later",
    ]);
    let can_i = |who: &str| {
        let o = sb.kubectl(&["auth", "can-i", "list", "pods", "-n", "team", "--as", who]);
        out(&o).trim().to_owned()
    };
    // RBAC matches subjects by name: the account need not exist.
    assert_eq!(can_i("system:serviceaccount:team:later"), "yes");
    assert_eq!(can_i("system:serviceaccount:team:other"), "no");
    let o = sb.kubectl(&[
        "auth",
        "can-i",
        "delete",
        "pods",
        "-n",
        "team",
        "--as",
        "system:serviceaccount:team:later",
    ]);
    assert_eq!(out(&o).trim(), "no");
}

#[test]
fn a_new_certificate_signing_request_records_who_asked_for_it() {
    let sb = TestSandbox::start();
    let csr = |name: &str| {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K",
                     "signerName": "kubernetes.io/kube-apiserver-client",
                     "usages": ["client auth"],
                     // What a client says of itself is replaced.
                     "username": "mallory", "groups": ["system:masters"],
                     "extra": {"k": ["v"]}, "uid": "forged"}})
        .to_string()
    };
    sb.kubectl_in_ok(&["create", "-f", "-"], &csr("by-admin"));
    let got = json_of(&sb.kubectl_ok(&["get", "csr", "by-admin", "-o", "json"]));
    let admin = json_of(&sb.kubectl_ok(&["auth", "whoami", "-o", "json"]));
    assert_eq!(
        got["spec"]["username"], admin["status"]["userInfo"]["username"],
        "{got}"
    );
    assert_eq!(got["spec"]["groups"], admin["status"]["userInfo"]["groups"]);
    assert!(got["spec"].get("extra").is_none(), "{got}");
    assert!(got["spec"].get("uid").is_none(), "{got}");

    // A node bootstrapper's account, allowed by the bootstrap role.
    sb.kubectl_ok(&["create", "serviceaccount", "joiner", "-n", "default"]);
    sb.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "joiner",
        "--clusterrole=system:node-bootstrapper",
        "--serviceaccount=default:joiner",
    ]);
    let token = sb
        .kubectl_ok(&["create", "token", "joiner", "-n", "default"])
        .trim()
        .to_owned();
    sb.kubectl_in_ok(&["--token", &token, "create", "-f", "-"], &csr("by-joiner"));
    let got = json_of(&sb.kubectl_ok(&["get", "csr", "by-joiner", "-o", "json"]));
    let sa = json_of(&sb.kubectl_ok(&["get", "sa", "joiner", "-n", "default", "-o", "json"]));
    assert_eq!(
        got["spec"]["username"],
        "system:serviceaccount:default:joiner"
    );
    assert_eq!(got["spec"]["uid"], sa["metadata"]["uid"], "{got}");
    assert_eq!(
        got["spec"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    assert_eq!(got["status"], json!({}), "{got}");
}

#[test]
fn the_volume_controllers_keep_the_portworx_plugins_rule_of_v1_33() {
    let sb = TestSandbox::start();
    // v1.33's in-tree Portworx plugin reads its Service: expand-controller
    // and persistent-volume-binder may get services (dropped in v1.36).
    for role in ["expand-controller", "persistent-volume-binder"] {
        let rules = rules_of(&sb, &format!("system:controller:{role}"));
        assert_eq!(
            rules.last(),
            Some(&json!({"apiGroups": [""], "resources": ["services"], "verbs": ["get"]})),
            "{role}: {rules:?}"
        );
        let o = sb.kubectl(&[
            "auth",
            "can-i",
            "get",
            "services",
            "-n",
            "default",
            "--as",
            &format!("system:serviceaccount:kube-system:{role}"),
        ]);
        assert_eq!(out(&o).trim(), "yes", "{role}");
    }
}
