//! Authentication and authorization, as kube-apiserver does them.
//!
//! - **Authentication** of bearer tokens: the admin token of the kubeconfig
//!   the sandbox writes (user `agentdeck-sandbox-admin` in `system:masters`),
//!   and service-account tokens — JWTs the sandbox signs (HS256, a key of its
//!   own), issued by TokenRequest and projected into pods' service-account
//!   volumes. A token is valid while unexpired, meant for the API server's
//!   audience, and its ServiceAccount (and the pod it is bound to) still
//!   exists with the same uid. A request without credentials may read only
//!   the public paths (`/healthz`, `/livez`, `/readyz`, `/version`); any other
//!   one, and any unknown token, gets 401.
//! - **Authorization** by RBAC: `system:masters` may do anything; everyone
//!   else what the ClusterRoles and Roles bound to them (as user, group or
//!   service account) grant — API groups, resources and subresources, verbs,
//!   resource names and non-resource URLs, `*` wildcards — else 403 with the
//!   apiserver's message. The access and rules reviews answer from the same
//!   evaluation.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::api::{Api, ApiError, Query};
use super::tls::{Pki, TlsError};

/// The admin user of the sandbox's kubeconfig.
pub const ADMIN_USER: &str = "agentdeck-sandbox-admin";

/// The audience and issuer of the service-account tokens the sandbox issues.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// What admission asks for in the projected token of the standard
/// `kube-api-access-*` volume; the apiserver extends it to a year (as
/// `--service-account-extend-token-expiration` does by default).
const STANDARD_TOKEN_SECONDS: i64 = 3607;
const EXTENDED_TOKEN_SECONDS: i64 = 365 * 24 * 3600;

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// `system:serviceaccount:NS:NAME`, the admin, or `system:anonymous`.
    pub username: String,
    /// The account's uid, when it has one.
    pub uid: Option<String>,
    /// Groups, `system:authenticated` included.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The kubeconfig's user.
    pub fn admin() -> Self {
        UserInfo {
            username: ADMIN_USER.to_owned(),
            uid: None,
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    /// The user a verified client certificate names (CN, groups O).
    fn from_certificate(cert: Option<(String, Vec<String>)>) -> Self {
        let (username, mut groups) = cert.unwrap_or_default();
        groups.push("system:authenticated".into());
        UserInfo {
            username,
            uid: None,
            groups,
        }
    }

    /// A request without credentials.
    pub fn anonymous() -> Self {
        UserInfo {
            username: "system:anonymous".to_owned(),
            uid: None,
            groups: vec!["system:unauthenticated".into()],
        }
    }

    /// The service account `ns/name`.
    pub fn service_account(ns: &str, name: &str, uid: Option<String>) -> Self {
        UserInfo {
            username: format!("system:serviceaccount:{ns}:{name}"),
            uid,
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
        }
    }

    fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }

    fn to_json(&self) -> Value {
        let mut v = json!({"username": self.username, "groups": self.groups});
        if let Some(uid) = &self.uid {
            v["uid"] = json!(uid);
        }
        v
    }
}

/// The sandbox's credentials: its PKI, the admin token and the key that
/// signs service-account tokens.
pub struct Security {
    pki: Pki,
    admin_token: String,
    signing: ring::hmac::Key,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security").finish_non_exhaustive()
    }
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(8) {
        let r = fastrand::u64(..).to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    out
}

impl Security {
    /// Fresh credentials.
    pub fn generate() -> Result<Security, TlsError> {
        use ring::rand::SecureRandom;
        let rng = ring::rand::SystemRandom::new();
        let mut secret = [0u8; 32];
        let mut admin = [0u8; 24];
        // The system RNG does not fail on Linux; fall back to fastrand only
        // so a sandbox still starts where it would.
        if rng.fill(&mut secret).is_err() {
            secret = random_bytes();
        }
        if rng.fill(&mut admin).is_err() {
            admin = random_bytes();
        }
        Ok(Security {
            pki: Pki::generate()?,
            admin_token: URL_SAFE_NO_PAD.encode(admin),
            signing: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret),
        })
    }

    /// The CA and serving certificate.
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// The kubeconfig user's bearer token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// A service-account token (a signed JWT) for `sa` (a ServiceAccount
    /// object), bound to `pod` when given.
    pub fn issue_token(
        &self,
        sa: &Value,
        pod: Option<&Value>,
        audiences: &[String],
        expiration_seconds: i64,
        now: i64,
    ) -> (String, i64) {
        let ns = sa["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = sa["metadata"]["name"].as_str().unwrap_or_default();
        let lifetime = match expiration_seconds {
            s if s <= 0 => 3600,
            STANDARD_TOKEN_SECONDS => EXTENDED_TOKEN_SECONDS,
            s => s,
        };
        let audiences: Vec<String> = if audiences.is_empty() {
            vec![API_AUDIENCE.to_owned()]
        } else {
            audiences.to_vec()
        };
        let mut k8s = json!({"namespace": ns,
            "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]}});
        if let Some(pod) = pod {
            k8s["pod"] = json!({"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]});
        }
        let claims = json!({
            "aud": audiences,
            "exp": now + lifetime,
            "iat": now,
            "nbf": now,
            "iss": API_AUDIENCE,
            "sub": format!("system:serviceaccount:{ns}:{name}"),
            "jti": URL_SAFE_NO_PAD.encode(random_bytes::<12>()),
            "kubernetes.io": k8s,
        });
        let header = json!({"alg": "HS256", "typ": "JWT", "kid": "agentdeck-sandbox"});
        let enc = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap_or_default());
        let signed = format!("{}.{}", enc(&header), enc(&claims));
        let sig = ring::hmac::sign(&self.signing, signed.as_bytes());
        (
            format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())),
            now + lifetime,
        )
    }

    /// The claims of a token this sandbox signed, if the signature holds.
    fn verified_claims(&self, token: &str) -> Option<Value> {
        let (signed, sig) = token.rsplit_once('.')?;
        let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
        ring::hmac::verify(&self.signing, signed.as_bytes(), &sig).ok()?;
        let (header, claims) = signed.split_once('.')?;
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
        if header["alg"] != "HS256" {
            return None;
        }
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()
    }

    /// Who `token` identifies, or why not.
    pub fn authenticate_token(&self, api: &Api, token: &str) -> Result<UserInfo, String> {
        self.authenticate_token_for(api, token, &[API_AUDIENCE.to_owned()])
            .map(|(user, _)| user)
    }

    /// Who `token` identifies for one of the `requested` audiences, and
    /// which of them it is good for, as the service-account token
    /// authenticator answers a TokenReview's `spec.audiences`.
    pub fn authenticate_token_for(
        &self,
        api: &Api,
        token: &str,
        requested: &[String],
    ) -> Result<(UserInfo, Vec<String>), String> {
        if constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()) {
            // The admin token is not audience-bound, as a static token is not.
            return Ok((UserInfo::admin(), requested.to_vec()));
        }
        let claims = self.verified_claims(token).ok_or("invalid bearer token")?;
        let now = jiff::Timestamp::now().as_second();
        if claims["exp"].as_i64().is_none_or(|exp| exp <= now) {
            return Err("token has expired".into());
        }
        if claims["nbf"].as_i64().is_some_and(|nbf| nbf > now + 60) {
            return Err("token is not valid yet".into());
        }
        let token_audiences: Vec<String> = match &claims["aud"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        let good_for: Vec<String> = token_audiences
            .iter()
            .filter(|a| requested.contains(a))
            .cloned()
            .collect();
        if good_for.is_empty() {
            // As the authenticator words it, with Go's %q of a []string.
            let quoted = |l: &[String]| {
                let each: Vec<String> = l.iter().map(|a| super::selector::go_quote(a)).collect();
                format!("[{}]", each.join(" "))
            };
            return Err(format!(
                "token audiences {} is invalid for the target audiences {}",
                quoted(&token_audiences),
                quoted(requested)
            ));
        }
        let k8s = &claims["kubernetes.io"];
        let ns = k8s["namespace"].as_str().ok_or("invalid bearer token")?;
        let name = k8s["serviceaccount"]["name"]
            .as_str()
            .ok_or("invalid bearer token")?;
        let sa = api
            .store
            .get("serviceaccounts", ns, name)
            .ok_or("service account has been deleted")?;
        let uid = sa["metadata"]["uid"].as_str().map(str::to_owned);
        if let Some(want) = k8s["serviceaccount"]["uid"].as_str()
            && uid.as_deref() != Some(want)
        {
            return Err("service account UID does not match".into());
        }
        if let Some(pod) = k8s["pod"].as_object() {
            let pod_name = pod.get("name").and_then(Value::as_str).unwrap_or_default();
            let live = api
                .store
                .get("pods", ns, pod_name)
                .ok_or("pod the token is bound to has been deleted")?;
            if pod.get("uid").and_then(Value::as_str) != live["metadata"]["uid"].as_str() {
                return Err("pod the token is bound to has been replaced".into());
            }
        }
        Ok((UserInfo::service_account(ns, name, uid), good_for))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Paths anyone may read, as the `system:public-info-viewer` role grants.
fn is_public(path: &str) -> bool {
    matches!(
        path.trim_end_matches('/'),
        "/healthz" | "/livez" | "/readyz" | "/version"
    ) || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}

/// The bearer token of a request, if it carries one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn unauthorized() -> ApiError {
    ApiError::new_status(401, "Unauthorized", "Unauthorized")
}

/// What a request asks to do, as the apiserver's RequestInfo describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; for paths the lower-case HTTP method.
    pub verb: String,
    /// Whether this names an API resource (else `path` is a non-resource URL).
    pub resource_request: bool,
    /// API group (`""` for core).
    pub api_group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`log`, `status`, …), empty if none.
    pub subresource: String,
    /// Object name, empty if none.
    pub name: String,
    /// Namespace, empty for cluster scope.
    pub namespace: String,
    /// The URL path.
    pub path: String,
}

impl Attributes {
    /// The request's attributes from its method, path and query.
    pub fn of_request(method: &Method, path: &str, query: &Query) -> Attributes {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let http_verb = method.as_str().to_ascii_lowercase();
        let non_resource = || Attributes {
            verb: http_verb.clone(),
            path: path.to_owned(),
            ..Attributes::default()
        };
        let (group, rest): (&str, &[&str]) = match segs.as_slice() {
            ["api", _v, rest @ ..] if !rest.is_empty() => ("", rest),
            ["apis", g, _v, rest @ ..] if !rest.is_empty() => (g, rest),
            _ => return non_resource(),
        };
        let mut a = Attributes {
            resource_request: true,
            api_group: group.to_owned(),
            path: path.to_owned(),
            ..Attributes::default()
        };
        // `namespaces/NAME[/status|finalize]` is the namespace itself (and
        // in it); `namespaces/NAME/RESOURCE…` a resource in it.
        let namespace_itself =
            group.is_empty() && matches!(rest, ["namespaces", _, "status" | "finalize"]);
        let parts: &[&str] = match rest {
            ["namespaces", ns, tail @ ..] if !tail.is_empty() && !namespace_itself => {
                a.namespace = (*ns).to_owned();
                tail
            }
            other => other,
        };
        a.resource = parts.first().copied().unwrap_or_default().to_owned();
        a.name = parts.get(1).copied().unwrap_or_default().to_owned();
        a.subresource = parts.get(2).copied().unwrap_or_default().to_owned();
        if a.resource == "namespaces" && !a.name.is_empty() {
            a.namespace = a.name.clone();
        }
        let watch = query.flag("watch");
        a.verb = match *method {
            Method::GET | Method::HEAD if a.name.is_empty() => {
                if watch { "watch" } else { "list" }.to_owned()
            }
            Method::GET | Method::HEAD => "get".to_owned(),
            Method::POST => "create".to_owned(),
            Method::PUT => "update".to_owned(),
            Method::PATCH => "patch".to_owned(),
            Method::DELETE if a.name.is_empty() => "deletecollection".to_owned(),
            Method::DELETE => "delete".to_owned(),
            _ => http_verb,
        };
        // A list or watch of one object by field selector is authorized
        // for that name (RBAC resourceNames then apply).
        if matches!(a.verb.as_str(), "list" | "watch")
            && let Some(selector) = query.get("fieldSelector")
        {
            let names: Vec<&str> = selector
                .split(',')
                .filter_map(|t| {
                    t.strip_prefix("metadata.name==")
                        .or_else(|| t.strip_prefix("metadata.name="))
                })
                .collect();
            if let [one] = names.as_slice() {
                a.name = (*one).to_owned();
            }
        }
        a
    }

    /// `resource` or `resource/subresource`.
    fn full_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The 403 kube-apiserver answers when RBAC allows nothing.
pub fn forbidden(user: &UserInfo, a: &Attributes) -> ApiError {
    let user_name = &user.username;
    if !a.resource_request {
        let mut e = ApiError::new_status(
            403,
            "Forbidden",
            format!(
                "forbidden: User \"{user_name}\" cannot {} path \"{}\"",
                a.verb, a.path
            ),
        );
        e.details = Some(json!({}));
        return e;
    }
    let qualified = if a.api_group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.api_group)
    };
    let subject = if a.name.is_empty() {
        qualified
    } else {
        format!("{qualified} \"{}\"", a.name)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    let mut e = ApiError::new_status(
        403,
        "Forbidden",
        format!(
            "{subject} is forbidden: User \"{user_name}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
            a.verb,
            a.full_resource(),
            a.api_group
        ),
    );
    let mut details = json!({"group": a.api_group, "kind": a.resource});
    if !a.name.is_empty() {
        details["name"] = json!(a.name);
    }
    e.details = Some(details);
    e
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether one PolicyRule allows `a`.
fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = strings(&rule["verbs"]);
    if !verbs.iter().any(|v| *v == "*" || *v == a.verb) {
        return false;
    }
    if !a.resource_request {
        return strings(&rule["nonResourceURLs"]).iter().any(|u| {
            *u == "*" || *u == a.path || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
        });
    }
    let groups = strings(&rule["apiGroups"]);
    if !groups.iter().any(|g| *g == "*" || *g == a.api_group) {
        return false;
    }
    let full = a.full_resource();
    let resources = strings(&rule["resources"]);
    let resource_ok = resources.iter().any(|r| {
        *r == "*"
            || *r == full
            || (a.subresource.is_empty() && *r == a.resource)
            || r.strip_prefix("*/")
                .is_some_and(|sub| !a.subresource.is_empty() && sub == a.subresource)
    });
    if !resource_ok {
        return false;
    }
    let names = strings(&rule["resourceNames"]);
    names.is_empty() || (!a.name.is_empty() && names.contains(&a.name.as_str()))
}

fn subject_matches(subject: &Value, user: &UserInfo, binding_ns: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str().unwrap_or_default() {
        "User" => name == user.username,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            user.username == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// Every rule granted to `user` that applies in `namespace` (cluster-wide
/// ones only when `namespace` is empty).
fn rules_for(api: &Api, user: &UserInfo, namespace: &str) -> Vec<Value> {
    let mut rules = Vec::new();
    let role_rules = |kind: &str, name: &str, ns: &str| -> Vec<Value> {
        let role = match kind {
            "ClusterRole" => api
                .store
                .get("clusterroles.rbac.authorization.k8s.io", "", name),
            "Role" => api.store.get("roles.rbac.authorization.k8s.io", ns, name),
            _ => None,
        };
        role.and_then(|r| r["rules"].as_array().cloned())
            .unwrap_or_default()
    };
    let (cluster_bindings, _) = api
        .store
        .list("clusterrolebindings.rbac.authorization.k8s.io", None);
    for b in &cluster_bindings {
        let subjects = b["subjects"].as_array().into_iter().flatten();
        if subjects.clone().any(|s| subject_matches(s, user, "")) {
            let name = b["roleRef"]["name"].as_str().unwrap_or_default();
            rules.extend(role_rules("ClusterRole", name, ""));
        }
    }
    if !namespace.is_empty() {
        let (bindings, _) = api
            .store
            .list("rolebindings.rbac.authorization.k8s.io", Some(namespace));
        for b in &bindings {
            let subjects = b["subjects"].as_array().into_iter().flatten();
            if subjects
                .clone()
                .any(|s| subject_matches(s, user, namespace))
            {
                let kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
                let name = b["roleRef"]["name"].as_str().unwrap_or_default();
                rules.extend(role_rules(kind, name, namespace));
            }
        }
    }
    rules
}

/// `(namespace, name)` of a service account's username.
fn service_account_of(username: &str) -> Option<(&str, &str)> {
    username
        .strip_prefix("system:serviceaccount:")?
        .split_once(':')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
}

/// Whether RBAC lets `user` do `a`.
pub fn allowed(api: &Api, user: &UserInfo, a: &Attributes) -> bool {
    user.is_master()
        || rules_for(api, user, &a.namespace)
            .iter()
            .any(|r| rule_allows(r, a))
}

/// The user a request acts as when it carries `Impersonate-User` (and
/// `Impersonate-Group`, `Impersonate-Uid`), as kube-apiserver's
/// impersonation filter does: `user` must be allowed to `impersonate` each
/// (`serviceaccounts` in the account's namespace, `users`, `groups`,
/// `uids`), else 403 naming the first refused. The impersonated user gets
/// the groups asked for, a service account its own groups, and
/// `system:authenticated`. `Ok(None)`: no impersonation asked.
pub fn impersonated(
    api: &Api,
    user: &UserInfo,
    headers: &HeaderMap,
) -> Result<Option<UserInfo>, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let users = values("impersonate-user");
    let groups = values("impersonate-group");
    let uids = values("impersonate-uid");
    let Some(username) = users.first().cloned() else {
        if groups.is_empty() && uids.is_empty() {
            return Ok(None);
        }
        return Err(ApiError::new_status(
            400,
            "BadRequest",
            "requested impersonation without a user",
        ));
    };
    let impersonate = |api_group: &str, resource: &str, namespace: &str, name: &str| Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        api_group: api_group.into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Attributes::default()
    };
    let account = service_account_of(&username);
    let mut asked = vec![match account {
        Some((ns, name)) => impersonate("", "serviceaccounts", ns, name),
        None => impersonate("", "users", "", &username),
    }];
    asked.extend(groups.iter().map(|g| impersonate("", "groups", "", g)));
    asked.extend(
        uids.iter()
            .map(|u| impersonate("authentication.k8s.io", "uids", "", u)),
    );
    if let Some(refused) = asked.iter().find(|a| !allowed(api, user, a)) {
        return Err(forbidden(user, refused));
    }
    let mut as_user = match account {
        Some((ns, name)) => UserInfo::service_account(ns, name, None),
        None => UserInfo {
            username: username.clone(),
            uid: None,
            groups: Vec::new(),
        },
    };
    as_user.uid = uids.first().cloned();
    for g in groups {
        if !as_user.groups.contains(&g) {
            as_user.groups.push(g);
        }
    }
    if username != "system:anonymous" && !as_user.groups.iter().any(|g| g == "system:authenticated")
    {
        as_user.groups.push("system:authenticated".into());
    }
    Ok(Some(as_user))
}

/// Every `(verb, group, resource, name)` a PolicyRule grants, wildcards
/// kept as `*` (only a holder of `*` covers them), as request attributes
/// in `namespace`.
fn granted_by(rule: &Value, namespace: &str) -> Vec<Attributes> {
    let list =
        |key: &str| -> Vec<String> { strings(&rule[key]).into_iter().map(str::to_owned).collect() };
    let verbs = list("verbs");
    let urls = list("nonResourceURLs");
    let mut out = Vec::new();
    if !urls.is_empty() {
        for verb in &verbs {
            for path in &urls {
                out.push(Attributes {
                    verb: verb.clone(),
                    path: path.clone(),
                    ..Attributes::default()
                });
            }
        }
        return out;
    }
    let mut names = list("resourceNames");
    if names.is_empty() {
        names.push(String::new());
    }
    for verb in &verbs {
        for group in list("apiGroups") {
            for full in list("resources") {
                let (resource, subresource) = match full.split_once('/') {
                    Some((r, s)) => (r.to_owned(), s.to_owned()),
                    None => (full.clone(), String::new()),
                };
                for name in &names {
                    out.push(Attributes {
                        verb: verb.clone(),
                        resource_request: true,
                        api_group: group.clone(),
                        resource: resource.clone(),
                        subresource: subresource.clone(),
                        name: name.clone(),
                        namespace: namespace.to_owned(),
                        path: String::new(),
                    });
                }
            }
        }
    }
    out
}

/// kube-apiserver's RBAC escalation prevention, for a Role, ClusterRole,
/// RoleBinding or ClusterRoleBinding `obj` that `user` writes in
/// `namespace` (empty: cluster scope): a role may grant only what its
/// writer holds there, unless the writer may `escalate` it; a binding may
/// bind only a role whose every rule its writer holds there, unless the
/// writer may `bind` it. A partial object (a merge patch) is checked for
/// what it sets.
pub fn escalation_check(
    api: &Api,
    user: &UserInfo,
    plural: &str,
    namespace: &str,
    obj: &Value,
) -> Result<(), ApiError> {
    if user.is_master() {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let rbac = "rbac.authorization.k8s.io";
    let may = |verb: &str, resource: &str, role: &str| {
        allowed(
            api,
            user,
            &Attributes {
                verb: verb.into(),
                resource_request: true,
                api_group: rbac.into(),
                resource: resource.into(),
                name: role.into(),
                namespace: namespace.into(),
                ..Attributes::default()
            },
        )
    };
    let rules: Vec<Value> = match plural {
        "roles" | "clusterroles" => {
            if may("escalate", plural, name) {
                return Ok(());
            }
            obj["rules"].as_array().cloned().unwrap_or_default()
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &obj["roleRef"];
            let Some(role) = role_ref["name"].as_str() else {
                return Ok(());
            };
            let (resource, stored) = match role_ref["kind"].as_str() {
                Some("ClusterRole") => (
                    "clusterroles",
                    api.store.get(&format!("clusterroles.{rbac}"), "", role),
                ),
                _ => (
                    "roles",
                    api.store.get(&format!("roles.{rbac}"), namespace, role),
                ),
            };
            if may("bind", resource, role) {
                return Ok(());
            }
            stored
                .and_then(|r| r["rules"].as_array().cloned())
                .unwrap_or_default()
        }
        _ => return Ok(()),
    };
    let held = rules_for(api, user, namespace);
    let missing: Vec<&Value> = rules
        .iter()
        .filter(|rule| {
            granted_by(rule, namespace)
                .iter()
                .any(|a| !held.iter().any(|h| rule_allows(h, a)))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = missing
        .iter()
        .map(|r| {
            let field = |key: &str, label: &str| {
                let v = strings(&r[key]);
                (!v.is_empty()).then(|| format!("{label}:{v:?}"))
            };
            let parts: Vec<String> = [
                field("apiGroups", "APIGroups"),
                field("resources", "Resources"),
                field("resourceNames", "ResourceNames"),
                field("nonResourceURLs", "NonResourceURLs"),
                field("verbs", "Verbs"),
            ]
            .into_iter()
            .flatten()
            .collect();
            format!("{{{}}}", parts.join(", "))
        })
        .collect();
    let mut e = ApiError::new_status(
        403,
        "Forbidden",
        format!(
            "{plural}.{rbac} \"{name}\" is forbidden: user \"{}\" (groups={:?}) is attempting to grant RBAC permissions not currently held:\n{}",
            user.username,
            user.groups,
            listed.join("\n")
        ),
    );
    e.details = Some(json!({"group": rbac, "kind": plural, "name": name}));
    Err(e)
}

/// Authenticates and authorizes every request before it is routed; the
/// user travels on in the request's extensions.
pub async fn middleware(State(api): State<Arc<Api>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    // A verified client certificate first, as kube-apiserver's x509
    // authenticator comes before its token authenticators.
    let cert = req
        .extensions()
        .get::<axum::extract::ConnectInfo<super::tls::PeerIdentity>>()
        .and_then(|c| c.0.0.clone());
    let user = match bearer(req.headers()) {
        _ if cert.is_some() => UserInfo::from_certificate(cert),
        Some(token) => match api.security.authenticate_token(&api, token) {
            Ok(user) => user,
            Err(_) => return super::server::error_response(&unauthorized()),
        },
        None if is_public(&path) => UserInfo::anonymous(),
        None => return super::server::error_response(&unauthorized()),
    };
    let user = match impersonated(&api, &user, req.headers()) {
        Ok(Some(as_user)) => as_user,
        Ok(None) => user,
        Err(e) => return super::server::error_response(&e),
    };
    if path.starts_with("/sandbox/") && !user.is_master() {
        let a = Attributes {
            verb: req.method().as_str().to_ascii_lowercase(),
            path,
            ..Attributes::default()
        };
        return super::server::error_response(&forbidden(&user, &a));
    }
    if !is_public(&path) {
        let query = Query::parse(req.uri().query());
        let a = Attributes::of_request(req.method(), &path, &query);
        if !allowed(&api, &user, &a) {
            return super::server::error_response(&forbidden(&user, &a));
        }
    }
    req.extensions_mut().insert(user);
    next.run(req).await
}

/// What the CertificateSigningRequest registry strategy writes on create
/// (`PrepareForCreate`): whatever the client put in `spec.username`,
/// `uid`, `groups` and `extra` is replaced by the requesting user, and the
/// status is cleared (no one creates a request approved).
pub fn stamp_csr_requester(user: &UserInfo, csr: &mut Value) {
    if !csr["spec"].is_object() {
        csr["spec"] = json!({});
    }
    if let Some(spec) = csr["spec"].as_object_mut() {
        for key in ["username", "uid", "groups", "extra"] {
            spec.remove(key);
        }
        spec.insert("username".into(), json!(user.username));
        if let Some(uid) = &user.uid {
            spec.insert("uid".into(), json!(uid));
        }
        spec.insert("groups".into(), json!(user.groups));
    }
    csr["status"] = json!({});
}

/// Where pods find their service account's credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The ServiceAccount admission plugin's part for a new pod: unless the pod
/// (or, when the pod does not say, its ServiceAccount) sets
/// `automountServiceAccountToken: false`, a projected `kube-api-access-*`
/// volume (token, `kube-root-ca.crt`'s `ca.crt`, the namespace) mounted
/// read-only at [`SERVICE_ACCOUNT_DIR`] in every container that does not
/// mount something there already.
pub fn mount_service_account_token(store: &super::store::Store, ns: &str, pod: &mut Value) {
    let spec = &pod["spec"];
    let account = spec["serviceAccountName"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let automount = spec["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| {
            store.get("serviceaccounts", ns, &account)?["automountServiceAccountToken"].as_bool()
        })
        .unwrap_or(true);
    let already = spec["volumes"].as_array().into_iter().flatten().any(|v| {
        v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))
    });
    if !automount || already {
        return;
    }
    const ALNUM: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = (0..5)
        .map(|_| char::from(ALNUM[fastrand::usize(..ALNUM.len())]))
        .collect();
    let name = format!("kube-api-access-{suffix}");
    let volume = json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": STANDARD_TOKEN_SECONDS, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}});
    let mount = json!({"name": name, "readOnly": true, "mountPath": SERVICE_ACCOUNT_DIR});
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.insert("serviceAccount".into(), json!(account));
    for key in ["initContainers", "containers"] {
        for c in spec
            .get_mut(key)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let mounts = c
                .as_object_mut()
                .map(|c| c.entry("volumeMounts").or_insert_with(|| json!([])));
            if let Some(mounts) = mounts.and_then(Value::as_array_mut)
                && !mounts.iter().any(|m| {
                    m["mountPath"].as_str().map(|p| p.trim_end_matches('/'))
                        == Some(SERVICE_ACCOUNT_DIR)
                })
            {
                mounts.push(mount.clone());
            }
        }
    }
    match spec.get_mut("volumes").and_then(Value::as_array_mut) {
        Some(volumes) => volumes.push(volume),
        None => {
            spec.insert("volumes".into(), json!([volume]));
        }
    }
}

/// `spec.resourceAttributes` / `spec.nonResourceAttributes` of an access
/// review as [`Attributes`].
fn review_attributes(spec: &Value, namespace_override: Option<&str>) -> Attributes {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    if let Some(r) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        Attributes {
            verb: s(&r["verb"]),
            resource_request: true,
            api_group: s(&r["group"]),
            resource: s(&r["resource"]),
            subresource: s(&r["subresource"]),
            name: s(&r["name"]),
            namespace: namespace_override.map_or_else(|| s(&r["namespace"]), str::to_owned),
            path: String::new(),
        }
    } else {
        let n = &spec["nonResourceAttributes"];
        Attributes {
            verb: s(&n["verb"]),
            path: s(&n["path"]),
            ..Attributes::default()
        }
    }
}

/// Answers the review resources that are computed, never stored, for
/// `user`: access reviews and rules reviews from the RBAC evaluation,
/// SelfSubjectReview and TokenReview from authentication.
pub fn review(
    api: &Api,
    user: &UserInfo,
    group: &str,
    plural: &str,
    namespace: Option<&str>,
    mut obj: Value,
) -> Option<Value> {
    let decision = |subject: &UserInfo, a: &Attributes| {
        if allowed(api, subject, a) {
            json!({"allowed": true, "reason": if subject.is_master() { "" } else { "RBAC: allowed by a role binding" }})
        } else {
            json!({"allowed": false})
        }
    };
    let (api_version, kind, status) = match (group, plural) {
        ("authorization.k8s.io", "selfsubjectaccessreviews") => {
            let a = review_attributes(&obj["spec"], None);
            (
                "authorization.k8s.io/v1",
                "SelfSubjectAccessReview",
                decision(user, &a),
            )
        }
        ("authorization.k8s.io", "subjectaccessreviews" | "localsubjectaccessreviews") => {
            let spec = &obj["spec"];
            let subject = UserInfo {
                username: spec["user"].as_str().unwrap_or_default().to_owned(),
                uid: spec["uid"].as_str().map(str::to_owned),
                groups: strings(&spec["groups"])
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            };
            let local = plural == "localsubjectaccessreviews";
            let a = review_attributes(spec, if local { namespace } else { None });
            let kind = if local {
                "LocalSubjectAccessReview"
            } else {
                "SubjectAccessReview"
            };
            ("authorization.k8s.io/v1", kind, decision(&subject, &a))
        }
        ("authorization.k8s.io", "selfsubjectrulesreviews") => {
            let ns = obj["spec"]["namespace"].as_str().unwrap_or_default();
            let status = if user.is_master() {
                json!({"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                       "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                       "incomplete": false})
            } else {
                let rules = rules_for(api, user, ns);
                let (non_resource, resource): (Vec<Value>, Vec<Value>) = rules
                    .into_iter()
                    .partition(|r| r.get("nonResourceURLs").is_some_and(|u| !u.is_null()));
                json!({"resourceRules": resource.into_iter().map(|mut r| {
                           if let Some(o) = r.as_object_mut() { o.remove("nonResourceURLs"); }
                           r
                       }).collect::<Vec<_>>(),
                       "nonResourceRules": non_resource.into_iter().map(|r| json!({
                           "verbs": r["verbs"], "nonResourceURLs": r["nonResourceURLs"]})).collect::<Vec<_>>(),
                       "incomplete": false})
            };
            ("authorization.k8s.io/v1", "SelfSubjectRulesReview", status)
        }
        ("authentication.k8s.io", "selfsubjectreviews") => (
            "authentication.k8s.io/v1",
            "SelfSubjectReview",
            json!({"userInfo": user.to_json()}),
        ),
        ("authentication.k8s.io", "tokenreviews") => {
            let token = obj["spec"]["token"].as_str().unwrap_or_default();
            // No audiences asked: the apiserver's own (`--api-audiences`).
            let mut requested: Vec<String> = obj["spec"]["audiences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            if requested.is_empty() {
                requested.push(API_AUDIENCE.to_owned());
            }
            let status = match api.security.authenticate_token_for(api, token, &requested) {
                Ok((u, audiences)) => json!({"authenticated": true, "user": u.to_json(),
                                "audiences": audiences}),
                Err(why) => json!({"authenticated": false, "error": why}),
            };
            ("authentication.k8s.io/v1", "TokenReview", status)
        }
        _ => return None,
    };
    if !obj.is_object() {
        obj = json!({});
    }
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    if obj["metadata"].is_null() {
        obj["metadata"] = json!({});
    }
    obj["status"] = status;
    // What Go always writes of the status struct (a TokenReview's `user`).
    super::gotypes::fill_status(&mut obj);
    Some(obj)
}

#[cfg(test)]
mod tests;
