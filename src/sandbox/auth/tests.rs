use serde_json::json;

use super::*;
use crate::sandbox::builtin::builtin_resources;

fn api() -> Api {
    Api::new(builtin_resources())
}

fn create(api: &Api, group: &str, plural: &str, ns: Option<&str>, obj: Value) -> Value {
    api.create(group, "v1", plural, ns, obj, &Query::default())
        .unwrap_or_else(|e| panic!("create {plural}: {}", e.message))
}

fn namespace(api: &Api, name: &str) {
    create(
        api,
        "",
        "namespaces",
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    );
}

fn service_account(api: &Api, ns: &str, name: &str) -> Value {
    create(
        api,
        "",
        "serviceaccounts",
        Some(ns),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}),
    )
}

const RBAC: &str = "rbac.authorization.k8s.io";

fn role(api: &Api, ns: &str, name: &str, rules: Value) {
    create(
        api,
        RBAC,
        "roles",
        Some(ns),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": name, "namespace": ns}, "rules": rules}),
    );
}

fn bind(api: &Api, ns: &str, name: &str, role_kind: &str, role: &str, subjects: Value) {
    create(
        api,
        RBAC,
        "rolebindings",
        Some(ns),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": ns},
               "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
               "subjects": subjects}),
    );
}

fn attrs(method: Method, path_and_query: &str) -> Attributes {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    Attributes::of_request(&method, path, &Query::parse(Some(query)))
}

fn short(a: &Attributes) -> String {
    format!(
        "{} {}|{}|{}|{}|{} {}",
        a.verb,
        a.api_group,
        a.resource,
        a.subresource,
        a.name,
        a.namespace,
        if a.resource_request { "" } else { &a.path }
    )
}

#[test]
fn requests_are_described_as_the_apiserver_describes_them() {
    let cases = [
        (
            Method::GET,
            "/api/v1/namespaces/ns/pods",
            "list |pods|||ns ",
        ),
        (
            Method::GET,
            "/api/v1/namespaces/ns/pods?watch=true",
            "watch |pods|||ns ",
        ),
        (
            Method::GET,
            "/api/v1/namespaces/ns/pods/p1/log",
            "get |pods|log|p1|ns ",
        ),
        (
            Method::GET,
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases?fieldSelector=metadata.name%3Dlead&watch=1",
            "watch coordination.k8s.io|leases||lead|ns ",
        ),
        (Method::GET, "/api/v1/nodes", "list |nodes||| "),
        (
            Method::GET,
            "/api/v1/namespaces/team",
            "get |namespaces||team|team ",
        ),
        (
            Method::PUT,
            "/api/v1/namespaces/team/finalize",
            "update |namespaces|finalize|team|team ",
        ),
        (Method::GET, "/api/v1/pods", "list |pods||| "),
        (
            Method::PATCH,
            "/apis/agentdeck.dev/v1alpha1/namespaces/ns/agenttasks/t/status",
            "patch agentdeck.dev|agenttasks|status|t|ns ",
        ),
        (
            Method::DELETE,
            "/apis/apps/v1/namespaces/ns/deployments",
            "deletecollection apps|deployments|||ns ",
        ),
        (
            Method::POST,
            "/apis/apps/v1/namespaces/ns/deployments",
            "create apps|deployments|||ns ",
        ),
        (Method::GET, "/apis", "get |||| /apis"),
        (Method::GET, "/apis/apps/v1", "get |||| /apis/apps/v1"),
        (Method::GET, "/openapi/v2", "get |||| /openapi/v2"),
    ];
    for (method, path, want) in cases {
        assert_eq!(short(&attrs(method, path)), want, "{path}");
    }
}

#[test]
fn rules_match_verbs_groups_resources_subresources_and_names() {
    let list_pods = attrs(Method::GET, "/api/v1/namespaces/ns/pods");
    let pod_log = attrs(Method::GET, "/api/v1/namespaces/ns/pods/p/log");
    let get_pod = attrs(Method::GET, "/api/v1/namespaces/ns/pods/p");
    let get_other = attrs(Method::GET, "/api/v1/namespaces/ns/pods/q");
    let apis = attrs(Method::GET, "/apis/apps");
    let cases = [
        (
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}),
            &list_pods,
            true,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
            &list_pods,
            false,
        ),
        (
            json!({"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["*"]}),
            &list_pods,
            false,
        ),
        (
            json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
            &list_pods,
            true,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
            &pod_log,
            false,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}),
            &pod_log,
            true,
        ),
        (
            json!({"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]}),
            &pod_log,
            true,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}),
            &get_pod,
            false,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"], "verbs": ["get", "list"]}),
            &get_pod,
            true,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"], "verbs": ["get", "list"]}),
            &get_other,
            false,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"], "verbs": ["get", "list"]}),
            &list_pods,
            false,
        ),
        (
            json!({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}),
            &apis,
            true,
        ),
        (
            json!({"nonResourceURLs": ["/api"], "verbs": ["get"]}),
            &apis,
            false,
        ),
        (
            json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
            &apis,
            false,
        ),
    ];
    for (rule, a, want) in cases {
        assert_eq!(rule_allows(&rule, a), want, "{rule} for {}", short(a));
    }
}

#[test]
fn bindings_grant_to_accounts_groups_and_users_only_where_they_are() {
    let api = api();
    for ns in ["team", "other"] {
        namespace(&api, ns);
    }
    role(
        &api,
        "team",
        "reader",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]),
    );
    bind(
        &api,
        "team",
        "reader",
        "Role",
        "reader",
        json!([{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]),
    );
    // A ClusterRole through a RoleBinding applies in that namespace only.
    bind(
        &api,
        "team",
        "viewers",
        "ClusterRole",
        "view",
        json!([{"kind": "Group", "name": "system:serviceaccounts:team", "apiGroup": RBAC}]),
    );
    let bot = UserInfo::service_account("team", "bot", None);
    let peer = UserInfo::service_account("team", "peer", None);
    let stranger = UserInfo::service_account("other", "bot", None);
    let cms = |ns: &str| attrs(Method::GET, &format!("/api/v1/namespaces/{ns}/configmaps"));
    let pods = |ns: &str| attrs(Method::GET, &format!("/api/v1/namespaces/{ns}/pods"));
    assert!(allowed(&api, &bot, &cms("team")));
    assert!(!allowed(&api, &bot, &cms("other")));
    assert!(!allowed(&api, &stranger, &cms("team")));
    // `view` reaches every account of the namespace through the group.
    assert!(allowed(&api, &peer, &pods("team")));
    assert!(!allowed(&api, &peer, &pods("other")));
    assert!(!allowed(
        &api,
        &peer,
        &attrs(Method::DELETE, "/api/v1/namespaces/team/pods/p")
    ));
    assert!(allowed(&api, &UserInfo::admin(), &pods("other")));
    let alice = UserInfo {
        username: "alice".into(),
        uid: None,
        groups: vec!["system:authenticated".into()],
    };
    assert!(!allowed(&api, &alice, &pods("team")));
    bind(
        &api,
        "team",
        "alice",
        "ClusterRole",
        "edit",
        json!([{"kind": "User", "name": "alice"}]),
    );
    assert!(allowed(
        &api,
        &alice,
        &attrs(Method::DELETE, "/api/v1/namespaces/team/pods/p")
    ));
    // Discovery is for everyone authenticated (system:discovery).
    assert!(allowed(&api, &alice, &attrs(Method::GET, "/apis/apps/v1")));
    assert!(!allowed(
        &api,
        &UserInfo::anonymous(),
        &attrs(Method::GET, "/apis")
    ));
}

#[test]
fn refusals_are_worded_as_kube_apiserver_words_them() {
    let sa = UserInfo::service_account("ns", "sa", None);
    let cases = [
        (
            attrs(Method::GET, "/api/v1/namespaces/ns/pods"),
            r#"pods is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "pods" in API group "" in the namespace "ns""#,
        ),
        (
            attrs(Method::GET, "/api/v1/namespaces/ns/pods/p/log"),
            r#"pods "p" is forbidden: User "system:serviceaccount:ns:sa" cannot get resource "pods/log" in API group "" in the namespace "ns""#,
        ),
        (
            attrs(
                Method::DELETE,
                "/apis/apps/v1/namespaces/ns/deployments/web",
            ),
            r#"deployments.apps "web" is forbidden: User "system:serviceaccount:ns:sa" cannot delete resource "deployments" in API group "apps" in the namespace "ns""#,
        ),
        (
            attrs(Method::GET, "/api/v1/nodes"),
            r#"nodes is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "nodes" in API group "" at the cluster scope"#,
        ),
        (
            attrs(Method::GET, "/metrics"),
            r#"forbidden: User "system:serviceaccount:ns:sa" cannot get path "/metrics""#,
        ),
    ];
    for (a, want) in cases {
        let e = forbidden(&sa, &a);
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (403, "Forbidden", want)
        );
    }
}

#[test]
fn service_account_tokens_identify_their_account_while_it_and_its_pod_live() {
    let api = api();
    namespace(&api, "team");
    let sa = service_account(&api, "team", "bot");
    let now = jiff::Timestamp::now().as_second();
    let sec = &api.security;
    let (token, _) = sec.issue_token(&sa, None, &[], 600, now);
    let user = sec.authenticate_token(&api, &token).expect("valid");
    assert_eq!(user.username, "system:serviceaccount:team:bot");
    assert_eq!(
        user.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:team",
            "system:authenticated"
        ]
    );
    assert_eq!(user.uid.as_deref(), sa["metadata"]["uid"].as_str());
    assert_eq!(
        sec.authenticate_token(&api, sec.admin_token()),
        Ok(UserInfo::admin())
    );

    // Tampered, expired, for someone else, or from another sandbox: refused.
    let (head, rest) = token.split_once('.').expect("jwt");
    let (claims, sig) = rest.split_once('.').expect("jwt");
    let mut forged: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).expect("b64")).expect("json");
    forged["kubernetes.io"]["serviceaccount"]["name"] = json!("admin");
    let forged = format!(
        "{head}.{}.{sig}",
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).expect("json"))
    );
    assert!(sec.authenticate_token(&api, &forged).is_err());
    let (expired, _) = sec.issue_token(&sa, None, &[], 60, now - 3600);
    assert_eq!(
        sec.authenticate_token(&api, &expired),
        Err("token has expired".to_owned())
    );
    let (elsewhere, _) = sec.issue_token(&sa, None, &["vault".to_owned()], 600, now);
    assert!(sec.authenticate_token(&api, &elsewhere).is_err());
    let other = Security::generate().expect("other sandbox");
    let (foreign, _) = other.issue_token(&sa, None, &[], 600, now);
    assert!(sec.authenticate_token(&api, &foreign).is_err());
    assert!(sec.authenticate_token(&api, "not-a-token").is_err());

    // A pod-bound token dies with its pod; any dies with its account.
    let pod = create(
        &api,
        "",
        "pods",
        Some("team"),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"},
               "spec": {"serviceAccountName": "bot", "containers": [{"name": "c", "image": "i"}]}}),
    );
    let (bound, _) = sec.issue_token(&sa, Some(&pod), &[], 600, now);
    assert!(sec.authenticate_token(&api, &bound).is_ok());
    let _ = api.store.delete("pods", "team", "p");
    assert!(sec.authenticate_token(&api, &bound).is_err());
    let _ = api.store.delete("serviceaccounts", "team", "bot");
    assert!(sec.authenticate_token(&api, &token).is_err());
    service_account(&api, "team", "bot");
    assert_eq!(
        sec.authenticate_token(&api, &token),
        Err("service account UID does not match".to_owned())
    );
}

#[test]
fn pods_get_the_api_access_volume_unless_automount_is_off() {
    let api = api();
    namespace(&api, "team");
    create(
        &api,
        "",
        "serviceaccounts",
        Some("team"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "quiet", "namespace": "team"},
               "automountServiceAccountToken": false}),
    );
    let pod = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "i"},
                                    {"name": "d", "image": "i", "volumeMounts": [
                                        {"name": "own", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount/"}]}]);
        spec["initContainers"] = json!([{"name": "init", "image": "i"}]);
        spec["volumes"] = json!([{"name": "own", "emptyDir": {}}]);
        create(
            &api,
            "",
            "pods",
            Some("team"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"}, "spec": spec}),
        )
    };
    let mounted = pod("plain", json!({}));
    let spec = &mounted["spec"];
    let volume = &spec["volumes"][1];
    let name = volume["name"].as_str().expect("name");
    assert!(
        name.starts_with("kube-api-access-") && name.len() == 21,
        "{name}"
    );
    assert_eq!(
        volume["projected"]["sources"][0]["serviceAccountToken"],
        json!({"expirationSeconds": 3607, "path": "token"})
    );
    assert_eq!(
        volume["projected"]["sources"][1]["configMap"]["name"],
        "kube-root-ca.crt"
    );
    assert_eq!(spec["serviceAccount"], "default");
    let mount = json!({"name": name, "readOnly": true, "mountPath": SERVICE_ACCOUNT_DIR});
    assert_eq!(spec["containers"][0]["volumeMounts"], json!([mount]));
    assert_eq!(spec["initContainers"][0]["volumeMounts"], json!([mount]));
    // A container mounting something there already keeps it.
    assert_eq!(
        spec["containers"][1]["volumeMounts"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    for (name, spec) in [
        ("off", json!({"automountServiceAccountToken": false})),
        ("quiet", json!({"serviceAccountName": "quiet"})),
    ] {
        let p = pod(name, spec);
        assert_eq!(
            p["spec"]["volumes"].as_array().map(Vec::len),
            Some(1),
            "{name}"
        );
        assert!(
            p["spec"]["containers"][0]["volumeMounts"].is_null(),
            "{name}"
        );
    }
    // The pod's own word wins over its account's.
    let p = pod(
        "on",
        json!({"serviceAccountName": "quiet", "automountServiceAccountToken": true}),
    );
    assert_eq!(p["spec"]["volumes"].as_array().map(Vec::len), Some(2));
}

#[test]
fn access_and_rules_reviews_answer_from_rbac() {
    let api = api();
    namespace(&api, "team");
    service_account(&api, "team", "bot");
    role(
        &api,
        "team",
        "logs",
        json!([{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"]}]),
    );
    bind(
        &api,
        "team",
        "logs",
        "Role",
        "logs",
        json!([{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]),
    );
    let bot = UserInfo::service_account("team", "bot", None);
    let ssar = |verb: &str, resource: &str, sub: &str| {
        let body = json!({"spec": {"resourceAttributes": {
            "namespace": "team", "verb": verb, "resource": resource, "subresource": sub}}});
        review(
            &api,
            &bot,
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            None,
            body,
        )
        .expect("a review")["status"]["allowed"]
            .clone()
    };
    assert_eq!(ssar("get", "pods", "log"), json!(true));
    assert_eq!(ssar("get", "pods", "exec"), json!(false));
    assert_eq!(ssar("delete", "pods", ""), json!(false));
    let rules = review(
        &api,
        &bot,
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        None,
        json!({"spec": {"namespace": "team"}}),
    )
    .expect("a review");
    let resource_rules = rules["status"]["resourceRules"].as_array().expect("rules");
    assert!(
        resource_rules
            .iter()
            .any(|r| r["resources"] == json!(["pods", "pods/log"])),
        "{rules}"
    );
    assert!(
        rules["status"]["nonResourceRules"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["nonResourceURLs"]
                .as_array()
                .is_some_and(|u| u.contains(&json!("/apis/*"))))),
        "{rules}"
    );
    let whoami = review(
        &api,
        &bot,
        "authentication.k8s.io",
        "selfsubjectreviews",
        None,
        json!({}),
    )
    .expect("a review");
    assert_eq!(
        whoami["status"]["userInfo"]["username"],
        "system:serviceaccount:team:bot"
    );
    // SubjectAccessReview asks about someone else.
    let sar = review(
        &api,
        &UserInfo::admin(),
        "authorization.k8s.io",
        "subjectaccessreviews",
        None,
        json!({"spec": {"user": "system:serviceaccount:team:bot",
                        "groups": ["system:serviceaccounts"],
                        "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods"}}}),
    )
    .expect("a review");
    assert_eq!(sar["status"]["allowed"], true);
}

#[test]
fn a_service_account_that_does_not_exist_is_allowed_what_a_binding_names() {
    let api = api();
    namespace(&api, "team");
    // A binding may name an account before (or after) it exists.
    bind(
        &api,
        "team",
        "viewers",
        "ClusterRole",
        "view",
        json!([{"kind": "ServiceAccount", "name": "later", "namespace": "team"}]),
    );
    let later = UserInfo::service_account("team", "later", None);
    let pods = attrs(Method::GET, "/api/v1/namespaces/team/pods");
    // RBAC matches subjects by name, as kube-apiserver's authorizer does;
    // whether the account exists is the authenticator's business.
    assert!(allowed(&api, &later, &pods));
    let sar = |user: &str| {
        review(
            &api,
            &UserInfo::admin(),
            "authorization.k8s.io",
            "subjectaccessreviews",
            None,
            json!({"spec": {"user": user,
                            "resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}}}),
        )
        .expect("a review")["status"]["allowed"]
            .clone()
    };
    assert_eq!(sar("system:serviceaccount:team:later"), json!(true));
    assert_eq!(sar("system:serviceaccount:nosuch:nosuch"), json!(false));
    service_account(&api, "team", "later");
    assert_eq!(sar("system:serviceaccount:team:later"), json!(true));
}

fn impersonating(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (k, v) in pairs {
        headers.append(
            axum::http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            v.parse().expect("value"),
        );
    }
    headers
}

#[test]
fn impersonation_acts_as_the_named_subject_and_needs_the_impersonate_verb() {
    let api = api();
    namespace(&api, "team");
    service_account(&api, "team", "bot");
    service_account(&api, "team", "ops");
    role(
        &api,
        "team",
        "reader",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]),
    );
    bind(
        &api,
        "team",
        "reader",
        "Role",
        "reader",
        json!([{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]),
    );
    let pods = attrs(Method::GET, "/api/v1/namespaces/team/pods");
    let secrets = attrs(Method::GET, "/api/v1/namespaces/team/secrets");
    let admin = UserInfo::admin();

    assert_eq!(
        impersonated(&api, &admin, &HeaderMap::new()).expect("no impersonation"),
        None
    );
    let bot = impersonated(
        &api,
        &admin,
        &impersonating(&[("Impersonate-User", "system:serviceaccount:team:bot")]),
    )
    .expect("the admin may impersonate")
    .expect("impersonated");
    assert_eq!(bot, UserInfo::service_account("team", "bot", None));
    assert!(allowed(&api, &bot, &pods));
    assert!(!allowed(&api, &bot, &secrets));

    // `kubectl auth can-i --as=system:serviceaccount:nosuch:nosuch`.
    let nobody = impersonated(
        &api,
        &admin,
        &impersonating(&[("Impersonate-User", "system:serviceaccount:nosuch:nosuch")]),
    )
    .expect("the admin may impersonate")
    .expect("impersonated");
    assert!(!allowed(&api, &nobody, &pods));

    // Groups asked for are added; a user gets system:authenticated.
    let alice = impersonated(
        &api,
        &admin,
        &impersonating(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Group", "qa"),
        ]),
    )
    .expect("allowed")
    .expect("impersonated");
    assert_eq!(alice.username, "alice");
    assert_eq!(alice.groups, ["devs", "qa", "system:authenticated"]);

    // Without the impersonate verb: refused, naming what was asked.
    let ops = UserInfo::service_account("team", "ops", None);
    let refused = impersonated(
        &api,
        &ops,
        &impersonating(&[("Impersonate-User", "system:serviceaccount:team:bot")]),
    )
    .expect_err("ops may not impersonate");
    assert_eq!(refused.code, 403);
    assert_eq!(
        refused.message,
        "serviceaccounts \"bot\" is forbidden: User \"system:serviceaccount:team:ops\" \
         cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"team\""
    );
    role(
        &api,
        "team",
        "impersonator",
        json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"],
                "resourceNames": ["bot"]}]),
    );
    bind(
        &api,
        "team",
        "impersonator",
        "Role",
        "impersonator",
        json!([{"kind": "ServiceAccount", "name": "ops", "namespace": "team"}]),
    );
    assert!(
        impersonated(
            &api,
            &ops,
            &impersonating(&[("Impersonate-User", "system:serviceaccount:team:bot")]),
        )
        .is_ok()
    );
    let group_too = impersonated(
        &api,
        &ops,
        &impersonating(&[
            ("Impersonate-User", "system:serviceaccount:team:bot"),
            ("Impersonate-Group", "system:masters"),
        ]),
    )
    .expect_err("no group impersonation granted");
    assert!(
        group_too.message.contains("groups \"system:masters\""),
        "{}",
        group_too.message
    );
    let no_user = impersonated(
        &api,
        &admin,
        &impersonating(&[("Impersonate-Group", "devs")]),
    )
    .expect_err("a group alone");
    assert_eq!(no_user.code, 400);
}

#[test]
fn roles_and_bindings_grant_only_what_their_writer_holds_unless_it_may_escalate_or_bind() {
    let api = api();
    namespace(&api, "team");
    service_account(&api, "team", "ctl");
    role(
        &api,
        "team",
        "ctl",
        json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
             "verbs": ["create", "update", "patch"]}
        ]),
    );
    bind(
        &api,
        "team",
        "ctl",
        "Role",
        "ctl",
        json!([{"kind": "ServiceAccount", "name": "ctl", "namespace": "team"}]),
    );
    let ctl = UserInfo::service_account("team", "ctl", None);
    let role_of = |name: &str, rules: Value| json!({"metadata": {"name": name}, "rules": rules});
    let reader = role_of(
        "reader",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["p"]}]),
    );
    assert!(escalation_check(&api, &ctl, "roles", "team", &reader).is_ok());
    let grab = role_of(
        "grab",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
    );
    let refused = escalation_check(&api, &ctl, "roles", "team", &grab).expect_err("escalation");
    assert_eq!(refused.code, 403);
    assert!(
        refused.message.starts_with(
            "roles.rbac.authorization.k8s.io \"grab\" is forbidden: user \"system:serviceaccount:team:ctl\""
        ) && refused.message.contains("is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"),
        "{}",
        refused.message
    );
    // Elsewhere it holds nothing.
    assert!(escalation_check(&api, &ctl, "roles", "other", &reader).is_err());
    // A wildcard is covered only by a wildcard.
    let star = role_of(
        "star",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]),
    );
    assert!(escalation_check(&api, &ctl, "roles", "team", &star).is_err());

    let binding = |role_kind: &str, role: &str| {
        json!({"metadata": {"name": "b"},
               "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
               "subjects": [{"kind": "ServiceAccount", "name": "x", "namespace": "team"}]})
    };
    role(&api, "team", "reader", reader["rules"].clone());
    assert!(
        escalation_check(
            &api,
            &ctl,
            "rolebindings",
            "team",
            &binding("Role", "reader")
        )
        .is_ok()
    );
    assert!(
        escalation_check(
            &api,
            &ctl,
            "rolebindings",
            "team",
            &binding("ClusterRole", "admin")
        )
        .is_err()
    );
    // `bind` on that ClusterRole by name lets it bind what it does not hold.
    role(
        &api,
        "team",
        "binder",
        json!([{"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["bind"],
                "resourceNames": ["view"]}]),
    );
    bind(
        &api,
        "team",
        "binder",
        "Role",
        "binder",
        json!([{"kind": "ServiceAccount", "name": "ctl", "namespace": "team"}]),
    );
    assert!(
        escalation_check(
            &api,
            &ctl,
            "rolebindings",
            "team",
            &binding("ClusterRole", "view")
        )
        .is_ok()
    );
    assert!(
        escalation_check(
            &api,
            &ctl,
            "rolebindings",
            "team",
            &binding("ClusterRole", "edit")
        )
        .is_err()
    );
    assert!(escalation_check(&api, &UserInfo::admin(), "roles", "team", &grab).is_ok());
}
