//! The HTTP face of the sandbox: routes Kubernetes REST paths to the API,
//! negotiates discovery and Table formats, and streams watches.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::api::{Api, ApiError, ApiResult, LogOptions, LogStream, Query, Served, Target};
use super::auth::UserInfo;
use super::selector::{
    FieldResource, FieldSelector, LabelSelector, parse_field_selector, parse_label_selector,
};
use super::store::{Change, EventType, ObjectKey, Page, rv_of};
use super::{convert, discovery, table, wire};

/// Largest request body accepted (the real apiserver allows 3 MiB objects).
const MAX_BODY: usize = 8 * 1024 * 1024;

/// Serves the API on `listener` until `cancel` fires.
pub async fn serve(
    api: Arc<Api>,
    listener: TcpListener,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let app = axum::Router::new()
        .fallback(handle)
        .layer(axum::middleware::from_fn_with_state(
            api.clone(),
            super::auth::middleware,
        ))
        .with_state(api.clone());
    let mut listener = listener;
    loop {
        let (restart, _) = api.faults.restart_token();
        let addr = listener.local_addr()?;
        let stop = {
            let (cancel, restart) = (cancel.clone(), restart.clone());
            async move {
                tokio::select! {
                    () = cancel.cancelled() => {}
                    () = restart.cancelled() => {}
                }
            }
        };
        // HTTPS, as every real apiserver serves (the listener sets
        // TCP_NODELAY on each connection, as Go does).
        let cut = CancellationToken::new();
        let tls = api.security.pki().listener(listener, cut.clone())?;
        let server = axum::serve(
            tls,
            app.clone()
                .into_make_service_with_connect_info::<super::tls::PeerIdentity>(),
        )
        .with_graceful_shutdown(stop)
        .into_future();
        tokio::pin!(server);
        tokio::select! {
            r = &mut server => r?,
            // A restart or a stop: watches end at once; other streams (log
            // follows, which a running container's never do by themselves)
            // get a moment to finish before their connections are cut. A
            // stop waited for them without end (a console leading the
            // cluster follows its agents' logs).
            () = restart.cancelled() => drain(&api, &mut server).await,
            () = cancel.cancelled() => drain(&api, &mut server).await,
        }
        // Whatever is still open is cut now, as a process exiting would:
        // the server's graceful shutdown only waits for its connections.
        cut.cancel();
        if cancel.is_cancelled() {
            return Ok(());
        }
        let (_, down) = api.faults.restart_token();
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = tokio::time::sleep(down) => {}
        }
        listener = loop {
            match TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(_) if !cancel.is_cancelled() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        };
    }
}

/// How long open streams get to end when the server stops or restarts.
const STREAMS_GRACE: Duration = Duration::from_secs(2);

/// Ends the watches, then waits for the server's graceful shutdown at most
/// [`STREAMS_GRACE`] (the caller cuts whatever is still open).
async fn drain<F: std::future::Future + Unpin>(api: &Api, server: &mut F) {
    api.faults.drop_watches();
    let _ = tokio::time::timeout(STREAMS_GRACE, server).await;
}

/// Binds 127.0.0.1:`port` (0 = any free port).
pub async fn bind(port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = l.local_addr()?;
    Ok((l, addr))
}

fn json_response(code: u16, body: &Value, content_type: &str) -> Response {
    let mut r = Response::new(Body::from(wire::to_vec(body)));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

fn ok(body: &Value) -> Response {
    json_response(200, body, "application/json")
}

/// The Status response of an error.
pub(super) fn error_response(e: &ApiError) -> Response {
    error(e)
}

fn error(e: &ApiError) -> Response {
    let mut r = json_response(e.code, &e.status(), "application/json");
    if e.code == 429
        && let Ok(v) = HeaderValue::from_str("1")
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

async fn handle(State(api): State<Arc<Api>>, req: axum::extract::Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let upgrade = super::exec::pending_upgrade(&mut parts).await;
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            return error(&ApiError::new_status(
                413,
                "RequestEntityTooLarge",
                "request body too large",
            ));
        }
    };
    let path = parts.uri.path().to_string();
    let mut query = Query::parse(parts.uri.query());
    query.user_agent = header_str(&parts.headers, header::USER_AGENT).map(str::to_owned);
    let latency = api.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if path.starts_with("/sandbox/") {
        return match admin(&api, &parts.method, &path, &body) {
            Ok(r) => r,
            Err(e) => error(&e),
        };
    }
    api.faults
        .record_request(parts.method.as_str(), &path, query.flag("watch"));
    if let Some(code) = api.faults.take_failure(parts.method.as_str(), &path) {
        let reason = match code {
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            _ => "Unknown",
        };
        return error(&ApiError::new_status(
            code,
            reason,
            format!("injected fault ({code}) for {path}"),
        ));
    }
    let user = parts
        .extensions
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_else(UserInfo::anonymous);
    let request = Request {
        method: &parts.method,
        path: &path,
        query: &query,
        headers: &parts.headers,
        user: &user,
    };
    let routed = route(&api, &request, body);
    let mut response = match super::exec::with_upgrade(upgrade, routed).await {
        Ok(r) => r,
        Err(e) => error(&e),
    };
    for w in query.warnings() {
        // As the apiserver sends them: code 299, no agent, the text quoted.
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

/// `/sandbox/faults`: POST `{"dropWatches": true}`, `{"fail": FailRule}`,
/// `{"latencyMs": N}`, `{"compact": true}`, `{"restart": {"downMs": N}}`
/// (stop listening, stay down N ms, listen again with the same store) or
/// `{"clear": true}`.
/// `/sandbox/requests`: GET the API requests served so far by verb and path
/// (`{"GET /api/v1/pods": 3, "WATCH /api/v1/pods": 1}`); DELETE resets them.
fn admin(api: &Api, method: &Method, path: &str, body: &[u8]) -> ApiResult<Response> {
    if path == "/sandbox/requests" {
        return match *method {
            Method::GET => Ok(ok(&json!(api.faults.requests()))),
            Method::DELETE => {
                api.faults.reset_requests();
                Ok(ok(&json!({"done": ["requests reset"]})))
            }
            _ => Err(ApiError::no_route(path)),
        };
    }
    if path != "/sandbox/faults" || method != Method::POST {
        return Err(ApiError::no_route(path));
    }
    let cmd: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("fault command: {e}")))?;
    let mut done = Vec::new();
    if cmd["clear"] == true {
        api.faults.clear();
        done.push("cleared");
    }
    if cmd["dropWatches"] == true {
        api.faults.drop_watches();
        done.push("watches dropped");
    }
    if cmd["compact"] == true {
        api.store.compact();
        done.push("history compacted");
    }
    if let Some(ms) = cmd["latencyMs"].as_u64() {
        api.faults.set_latency(Duration::from_millis(ms));
        done.push("latency set");
    }
    if let Some(restart) = cmd.get("restart").filter(|r| **r != false) {
        let down = restart["downMs"].as_u64().unwrap_or(0);
        api.faults.restart_server(Duration::from_millis(down));
        done.push("server restarting");
    }
    if let Some(rule) = cmd.get("fail") {
        let rule: super::faults::FailRule = serde_json::from_value(rule.clone())
            .map_err(|e| ApiError::bad_request(format!("fail rule: {e}")))?;
        api.faults.fail(rule);
        done.push("failure rule added");
    }
    if done.is_empty() {
        return Err(ApiError::bad_request(
            "no fault named; use dropWatches, fail {pathPrefix, method?, code, count}, latencyMs, compact, restart {downMs} or clear",
        ));
    }
    Ok(ok(&json!({"done": done})))
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// What [`route`] needs of a request besides its body.
struct Request<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a Query,
    headers: &'a HeaderMap,
    user: &'a UserInfo,
}

/// Routes a request: the discovery and OpenAPI documents, a group's or
/// version's discovery, then a resource's handlers (see [`Handler`]),
/// after the checks every resource request passes (metrics, reviews, a
/// read-only snapshot, RBAC escalation, the verbs served).
async fn route(api: &Arc<Api>, request: &Request<'_>, body: Bytes) -> ApiResult<Response> {
    let path = request.path;
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(r) = non_resource(api, request, &segs)? {
        return Ok(r);
    }
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g] => {
            return discovery::api_group(&resource_infos(api), g)
                .map(|d| ok(&d))
                .ok_or_else(|| ApiError::no_route(path));
        }
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    if rest.is_empty() {
        return discovery::api_resource_list(&resource_infos(api), group, version)
            .map(|d| ok(&d))
            .ok_or_else(|| ApiError::no_route(path));
    }
    let (plural, target) = resource_target(group, rest).ok_or_else(|| ApiError::no_route(path))?;
    if group == "metrics.k8s.io" && *request.method == Method::GET {
        return metrics(api, plural, &target, request.query);
    }
    let addressed = Addressed {
        request,
        group,
        plural,
        target: &target,
        body: &body,
    };
    if let Some(answer) = review(api, &addressed) {
        return Ok(json_response(201, &answer, "application/json"));
    }
    refuse_read_only(api, request.method, &target)?;
    check_escalation(api, &addressed)?;
    let served = api.served(group, version, plural)?;
    let accept = header_str(request.headers, header::ACCEPT);
    let handler = Handler {
        api,
        req: request,
        group,
        version,
        plural,
        target,
        served,
        body,
        ct: header_str(request.headers, header::CONTENT_TYPE).unwrap_or("application/json"),
        want_table: table::wants_table(accept),
        meta_only: MetadataOnly::asked(accept),
    };
    if let Some(r) = handler.check_subresource()? {
        return Ok(r);
    }
    handler.check_storage_verb()?;
    handler.dispatch().await
}

/// What every served resource is, for discovery.
fn resource_infos(api: &Api) -> Vec<super::registry::ResourceInfo> {
    api.registry()
        .all()
        .iter()
        .map(|s| s.info.clone())
        .collect()
}

/// The paths that are not a resource's: version, health, the discovery
/// roots and the OpenAPI documents. `None` for any other path.
fn non_resource(api: &Api, request: &Request<'_>, segs: &[&str]) -> ApiResult<Option<Response>> {
    let path = request.path;
    let accept = header_str(request.headers, header::ACCEPT);
    Ok(Some(match segs {
        ["version"] => ok(&discovery::version()),
        ["healthz" | "readyz" | "livez"] => (StatusCode::OK, "ok").into_response(),
        ["api"] | ["apis"] => {
            let resources = resource_infos(api);
            let fmt = discovery::negotiate(accept);
            let body = if segs[0] == "api" {
                let url = api.server_url();
                let addr = url.trim_start_matches("https://").to_string();
                discovery::core_root(&resources, fmt, &addr)
            } else {
                discovery::apis_root(&resources, fmt)
            };
            json_response(200, &body, fmt.content_type())
        }
        ["openapi", "v2"] => {
            let served = discovery::openapi_v2_served(api.registry().all());
            let (ct, bytes) = served.body(accept);
            let mut r = Response::new(Body::from(bytes));
            if let Ok(v) = HeaderValue::from_str(ct) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            r
        }
        ["openapi", "v3"] => ok(&openapi_v3_root(api)),
        ["openapi", "v3", rest @ ..] => {
            let (group, version) = match rest {
                ["api", v] => ("", *v),
                ["apis", g, v] => (*g, *v),
                _ => return Err(ApiError::no_route(path)),
            };
            let mut doc = discovery::openapi_v3_group_version(&resource_infos(api), group, version)
                .ok_or_else(|| ApiError::no_route(path))?;
            super::openapi_schemas::publish(&mut doc, api.registry().all(), group, version);
            ok(&doc)
        }
        _ => return Ok(None),
    }))
}

/// `/openapi/v3`: the group versions, each with the hash of its document.
/// The hashes cover the documents as served, object schemas included, so
/// a changed CRD schema busts kubectl's cache.
fn openapi_v3_root(api: &Api) -> Value {
    let resources = resource_infos(api);
    let mut root = discovery::openapi_v3_root(&resources);
    if let Some(paths) = root["paths"].as_object_mut() {
        let registry = api.registry();
        for (key, entry) in paths.iter_mut() {
            let (group, version) = match key.split('/').collect::<Vec<_>>().as_slice() {
                ["api", v] => (String::new(), v.to_string()),
                ["apis", g, v] => (g.to_string(), v.to_string()),
                _ => continue,
            };
            if let Some(mut doc) = discovery::openapi_v3_group_version(&resources, &group, &version)
            {
                super::openapi_schemas::publish(&mut doc, registry.all(), &group, &version);
                entry["serverRelativeURL"] = json!(format!(
                    "/openapi/v3/{key}?hash={}",
                    discovery::openapi_v3_hash(&doc)
                ));
            }
        }
    }
    root
}

/// The resource and target of a group version's path rest:
/// `[namespaces, ns, plural, name?, sub?]` or `[plural, name?, sub?]` (a
/// namespace's own `status` and `finalize` are the namespace's).
fn resource_target<'a>(group: &str, rest: &[&'a str]) -> Option<(&'a str, Target)> {
    Some(match rest {
        ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => (
            "namespaces",
            Target {
                namespace: None,
                name: Some(ns.to_string()),
                subresource: Some(sub.to_string()),
            },
        ),
        ["namespaces", ns, plural, tail @ ..] => (
            *plural,
            Target {
                namespace: Some(ns.to_string()),
                name: tail.first().map(|s| s.to_string()),
                subresource: tail.get(1).map(|s| s.to_string()),
            },
        ),
        [plural, tail @ ..] => (
            *plural,
            Target {
                namespace: None,
                name: tail.first().map(|s| s.to_string()),
                subresource: tail.get(1).map(|s| s.to_string()),
            },
        ),
        [] => return None,
    })
}

/// What a request for a resource addresses, for the checks made before
/// its handler.
struct Addressed<'a> {
    request: &'a Request<'a>,
    group: &'a str,
    plural: &'a str,
    target: &'a Target,
    body: &'a [u8],
}

impl Addressed<'_> {
    /// The body as its content type says.
    fn object(&self) -> ApiResult<Value> {
        parse_body(
            self.body,
            header_str(self.request.headers, header::CONTENT_TYPE).unwrap_or("application/json"),
        )
    }
}

/// A POST of a review (SubjectAccessReview, TokenReview …) is answered by
/// [`super::auth::review`]; `None` for any other request.
fn review(api: &Api, a: &Addressed<'_>) -> Option<Value> {
    if *a.request.method != Method::POST || a.target.name.is_some() {
        return None;
    }
    super::auth::review(
        api,
        a.request.user,
        a.group,
        a.plural,
        a.target.namespace.as_deref(),
        a.object().unwrap_or_else(|_| json!({})),
    )
}

/// A snapshot (a support bundle) is served read-only: reviews answer,
/// every write is refused with what the server is.
fn refuse_read_only(api: &Api, method: &Method, target: &Target) -> ApiResult<()> {
    if let Some(what) = api.read_only()
        && !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
    {
        return Err(ApiError::new_status(
            405,
            "MethodNotAllowed",
            format!(
                "this server serves {what}, read-only: {} is not allowed",
                write_verb(
                    method.as_str(),
                    target.name.is_some(),
                    target.subresource.as_deref()
                )
            ),
        ));
    }
    Ok(())
}

/// A write of an RBAC object may not grant more than its writer holds
/// (see [`super::auth::escalation_check`]).
fn check_escalation(api: &Api, a: &Addressed<'_>) -> ApiResult<()> {
    let (request, target) = (a.request, a.target);
    if a.group == "rbac.authorization.k8s.io"
        && matches!(*request.method, Method::POST | Method::PUT | Method::PATCH)
        && target.subresource.is_none()
        && let Ok(obj) = a.object()
        && obj.is_object()
    {
        let mut obj = obj;
        if obj["metadata"]["name"].is_null()
            && let Some(name) = &target.name
        {
            obj["metadata"]["name"] = json!(name);
        }
        super::auth::escalation_check(
            api,
            request.user,
            a.plural,
            target.namespace.as_deref().unwrap_or_default(),
            &obj,
        )?;
    }
    Ok(())
}

/// A request for a served resource, its objects or a subresource: one
/// handler per verb and subresource, chosen by [`Handler::dispatch`].
struct Handler<'a> {
    /// The API.
    api: &'a Arc<Api>,
    /// The request.
    req: &'a Request<'a>,
    /// The path's group.
    group: &'a str,
    /// The path's version.
    version: &'a str,
    /// The path's resource.
    plural: &'a str,
    /// The namespace, name and subresource of the path.
    target: Target,
    /// The resource.
    served: Served,
    /// The request body.
    body: Bytes,
    /// The body's content type.
    ct: &'a str,
    /// The Table version the Accept header asks for.
    want_table: Option<table::TableVersion>,
    /// The metadata-only view the Accept header asks for.
    meta_only: Option<MetadataOnly>,
}

impl Handler<'_> {
    /// Calls the handler of the request's verb and subresource.
    async fn dispatch(&self) -> ApiResult<Response> {
        let name = self.target.name.as_deref();
        match (
            self.req.method.as_str(),
            name,
            self.target.subresource.as_deref(),
        ) {
            ("GET", None, _) => self.collection().await,
            ("GET", Some(name), Some("log")) => self.log(name),
            ("GET", Some(name), Some("scale")) => self.scale(name),
            ("GET", Some(name), _) => self.get(name),
            ("POST", Some(name), Some("token")) => self.token(name),
            ("POST", Some(name), Some("eviction")) => self.eviction(name),
            ("POST", None, _) => self.create(),
            ("PUT", Some(_), Some("scale")) => self.put_scale(),
            ("PATCH", Some(name), Some("scale")) => self.patch_scale(name),
            ("PUT", Some(_), sub) => self.update(sub),
            ("PATCH", Some(name), sub) => self.patch(name, sub),
            ("DELETE", Some(name), None) => self.delete(name),
            ("DELETE", None, _) => self.delete_collection(),
            (m, _, _) => Err(ApiError::method_not_allowed(m)),
        }
    }

    /// A subresource must be one the resource has (404), served for the
    /// verb (405); a connect subresource (exec, attach, portforward) is
    /// answered here.
    fn check_subresource(&self) -> ApiResult<Option<Response>> {
        let (served, target, method) = (&self.served, &self.target, self.req.method);
        if let Some(sub) = &target.subresource
            && !served.info.has_subresource(sub)
        {
            return Err(ApiError::no_route(self.req.path));
        }
        if let (Some(name), Some(sub)) = (&target.name, &target.subresource)
            && let Some(sub_info) = served.info.subresources.iter().find(|s| &s.name == sub)
        {
            if is_connect(served, sub) {
                let (query, headers) = (self.req.query, self.req.headers);
                return connect(self.api, served, target, name, query, headers).map(Some);
            }
            let verb = match *method {
                Method::GET => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::POST => "create",
                Method::DELETE => "delete",
                _ => "",
            };
            if !sub_info.verbs.iter().any(|v| v == verb) {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
        }
        Ok(None)
    }

    /// A verb the resource's storage does not implement has no handler in
    /// the apiserver: 405, as for `componentstatuses` (get and list only).
    fn check_storage_verb(&self) -> ApiResult<()> {
        let (served, target, method) = (&self.served, &self.target, self.req.method);
        if target.subresource.is_none() && served.crd.is_none() {
            let verb = match (method.as_str(), target.name.is_some()) {
                ("GET", false) if self.req.query.flag("watch") => "watch",
                ("GET", false) => "list",
                ("GET", true) => "get",
                ("POST", false) => "create",
                ("PUT", true) => "update",
                ("PATCH", true) => "patch",
                ("DELETE", true) => "delete",
                ("DELETE", false) => "deletecollection",
                _ => "",
            };
            if !verb.is_empty() && !served.info.verbs.iter().any(|v| v == verb) {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
        }
        Ok(())
    }

    /// An object answered as asked: whole, or its metadata only.
    fn answer(&self, code: u16, obj: &Value) -> ApiResult<Response> {
        let body = match self.meta_only {
            Some(m) => m.object(&self.served.info, obj)?,
            None => return Ok(json_response(code, obj, "application/json")),
        };
        Ok(json_response(code, &body, "application/json"))
    }

    /// A list answered as asked: whole, or its items' metadata only.
    fn answer_list(&self, list: &Listed) -> ApiResult<Response> {
        if let Some(m) = self.meta_only {
            return Ok(ok(&m.list(&self.served.info, list)?));
        }
        let mut r = Response::new(Body::from(list.to_bytes()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(r)
    }

    /// The named object of the path's resource.
    fn object(&self, name: &str) -> ApiResult<Arc<Value>> {
        let ns = self.target.namespace.as_deref();
        self.api
            .get(self.group, self.version, self.plural, ns, name)
    }

    /// The path's target without its subresource: the object itself.
    fn main_target(&self) -> Target {
        Target {
            subresource: None,
            ..self.target.clone()
        }
    }

    /// GET of the collection: a WATCH, or a LIST (as a Table if asked).
    async fn collection(&self) -> ApiResult<Response> {
        let (api, served, query) = (self.api, &self.served, self.req.query);
        if query.flag("watch") {
            watch(
                api,
                served,
                &self.target,
                query,
                self.want_table,
                self.meta_only,
            )
            .await
        } else {
            let list = list(api, served, &self.target, query)?;
            match self.want_table {
                Some(v) => Ok(ok(&to_table(served, &list.to_value(), query, v, false)?)),
                None => self.answer_list(&list),
            }
        }
    }

    /// GET `pods/NAME/log`.
    fn log(&self, name: &str) -> ApiResult<Response> {
        self.object(name)?;
        let ns = self.target.namespace.as_deref().unwrap_or_default();
        logs(self.api, ns, name, self.req.query)
    }

    /// GET `…/NAME/scale`: the object's Scale.
    fn scale(&self, name: &str) -> ApiResult<Response> {
        let obj = self.object(name)?;
        self.answer(200, &scale_of(&self.served, &obj))
    }

    /// GET of an object (or a subresource served as the object, such as
    /// status), as a Table if asked.
    fn get(&self, name: &str) -> ApiResult<Response> {
        let obj = self.object(name)?;
        match self.want_table {
            Some(v) => {
                let list = json!({"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "items": [obj.as_ref().clone()]});
                Ok(ok(&to_table(
                    &self.served,
                    &list,
                    self.req.query,
                    v,
                    false,
                )?))
            }
            None => self.answer(200, &obj),
        }
    }

    /// POST `serviceaccounts/NAME/token`: a TokenRequest answered.
    fn token(&self, name: &str) -> ApiResult<Response> {
        let sa = self.object(name)?;
        let request = if self.body.is_empty() {
            json!({})
        } else {
            parse_body(&self.body, self.ct)?
        };
        Ok(json_response(
            201,
            &token_request(self.api, &sa, &request),
            "application/json",
        ))
    }

    /// POST `pods/NAME/eviction`: the pod deleted if its disruption
    /// budgets allow it.
    fn eviction(&self, name: &str) -> ApiResult<Response> {
        let eviction = parse_body(&self.body, self.ct)?;
        let pod = self.object(name)?;
        super::cluster::disruption::check_eviction(self.api, &pod)?;
        let opts = eviction
            .get("deleteOptions")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let q = with_body_dry_run(self.req.query, &opts);
        let t = self.main_target();
        self.api
            .delete(self.group, self.version, self.plural, &t, &opts, &q)?;
        Ok(json_response(
            201,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            "application/json",
        ))
    }

    /// POST of a new object (a CSR stamped with its requester).
    fn create(&self) -> ApiResult<Response> {
        let mut obj = parse_body(&self.body, self.ct)?;
        if self.group == "certificates.k8s.io" && self.plural == "certificatesigningrequests" {
            super::auth::stamp_csr_requester(self.req.user, &mut obj);
        }
        let created = self.api.create(
            self.group,
            self.version,
            self.plural,
            self.target.namespace.as_deref(),
            obj,
            self.req.query,
        )?;
        self.answer(201, &created)
    }

    /// PUT `…/NAME/scale`: the Scale's spec.replicas written.
    fn put_scale(&self) -> ApiResult<Response> {
        let body = parse_body(&self.body, self.ct)?;
        self.write_scale(spec_replicas(&body))
    }

    /// PATCH `…/NAME/scale`: the patch merged into the current Scale, its
    /// spec.replicas written.
    fn patch_scale(&self, name: &str) -> ApiResult<Response> {
        let current = self.object(name)?;
        let mut scale = scale_of(&self.served, &current);
        let p: Value =
            serde_json::from_slice(&self.body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        crate::plan::strategic_merge::json_merge_patch(&mut scale, &p);
        self.write_scale(spec_replicas(&scale))
    }

    /// Writes a Scale's replicas into the object (a merge patch of its
    /// replicas path) and answers the Scale after.
    fn write_scale(&self, replicas: &Value) -> ApiResult<Response> {
        let t = self.main_target();
        let patch = scale_patch(&self.served, replicas)?;
        let r = self.api.patch(
            self.group,
            self.version,
            self.plural,
            &t,
            "application/merge-patch+json",
            &patch,
            self.req.query,
        )?;
        self.answer(200, &scale_of(&self.served, &r))
    }

    /// PUT of an object or a subresource (status, finalize, approval …).
    fn update(&self, sub: Option<&str>) -> ApiResult<Response> {
        if self.ct.contains("protobuf") && sub == Some("status") {
            // The protobuf schemas here cover what clients create, not
            // every status: refuse rather than write an empty status.
            return Err(ApiError::new_status(
                415,
                "UnsupportedMediaType",
                "the sandbox cannot decode a status update from protobuf; send it as application/json",
            ));
        }
        let obj = parse_body(&self.body, self.ct)?;
        let (api, query) = (self.api, self.req.query);
        let updated = api.update(
            self.group,
            self.version,
            self.plural,
            &self.target,
            obj,
            query,
        )?;
        self.answer(200, &updated)
    }

    /// PATCH of an object or a subresource; an apply that creates answers
    /// 201 Created, as the real one does.
    fn patch(&self, name: &str, sub: Option<&str>) -> ApiResult<Response> {
        let creates = self.ct.starts_with("application/apply-patch")
            && sub.is_none()
            && self.object(name).is_err();
        let (api, query) = (self.api, self.req.query);
        let r = api.patch(
            self.group,
            self.version,
            self.plural,
            &self.target,
            self.ct,
            &self.body,
            query,
        )?;
        self.answer(if creates { 201 } else { 200 }, &r)
    }

    /// The DeleteOptions of the body (none: empty).
    fn delete_options(&self) -> ApiResult<Value> {
        if self.body.is_empty() {
            Ok(json!({}))
        } else {
            parse_body(&self.body, self.ct)
        }
    }

    /// DELETE of an object: deleted at once → the object with 200; marked
    /// for deletion → 202 with it.
    fn delete(&self, name: &str) -> ApiResult<Response> {
        let opts = self.delete_options()?;
        let query = &with_body_dry_run(self.req.query, &opts);
        let obj = self.api.delete(
            self.group,
            self.version,
            self.plural,
            &self.target,
            &opts,
            query,
        )?;
        let code =
            if obj.pointer("/metadata/deletionTimestamp").is_some() && self.object(name).is_ok() {
                202
            } else {
                200
            };
        self.answer(code, &obj)
    }

    /// DELETE of the collection: each listed object deleted, the deleted
    /// answered as a list.
    fn delete_collection(&self) -> ApiResult<Response> {
        let (api, served, target) = (self.api, &self.served, &self.target);
        let opts = self.delete_options()?;
        let query = &with_body_dry_run(self.req.query, &opts);
        let listed = list(api, served, target, query)?;
        let mut deleted = Vec::new();
        for item in listed.items {
            let t = Target {
                namespace: item["metadata"]["namespace"]
                    .as_str()
                    .map(str::to_string)
                    .or(target.namespace.clone()),
                name: item["metadata"]["name"].as_str().map(str::to_string),
                subresource: None,
            };
            if let Ok(o) = api.delete(self.group, self.version, self.plural, &t, &opts, query) {
                deleted.push(o);
            }
        }
        self.answer_list(&Listed {
            kind: format!("{}List", served.info.kind),
            api_version: served.info.api_version(),
            metadata: json!({"resourceVersion": api.store.current_rv().to_string()}),
            items: deleted.into_iter().map(Arc::new).collect(),
        })
    }
}

/// The `PartialObjectMetadata` view an `Accept` header asks for
/// (`application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`, or
/// `…List`), negotiated as any other representation.
#[derive(Debug, Clone, Copy)]
struct MetadataOnly {
    version: table::TableVersion,
    list: bool,
}

impl MetadataOnly {
    fn asked(accept: Option<&str>) -> Option<MetadataOnly> {
        match table::negotiate(accept) {
            Some(table::Representation::PartialObjectMetadata { version, list }) => {
                Some(MetadataOnly { version, list })
            }
            _ => None,
        }
    }

    fn partial(&self, obj: &Value) -> Value {
        json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": self.version.api_version(),
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })
    }

    /// One object's view; a Status goes out as it is. Asking a single
    /// object for a list is the apiserver's 406.
    fn object(&self, info: &super::registry::ResourceInfo, obj: &Value) -> ApiResult<Value> {
        if obj["kind"] == "Status" {
            return Ok(obj.clone());
        }
        if self.list {
            return Err(not_acceptable(format!(
                "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
                go_type(
                    info,
                    &obj["kind"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| info.kind.clone())
                )
            )));
        }
        Ok(self.partial(obj))
    }

    /// A list's view: a `PartialObjectMetadataList` of `PartialObjectMetadata`.
    fn list(&self, info: &super::registry::ResourceInfo, list: &Listed) -> ApiResult<Value> {
        if !self.list {
            return Err(not_acceptable(format!(
                "you requested PartialObjectMetadata, but the requested object is a list ({})",
                go_type(info, &list.kind)
            )));
        }
        let items: Vec<Value> = list.items.iter().map(|i| self.partial(i)).collect();
        Ok(json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": self.version.api_version(),
            "metadata": list.metadata,
            "items": items,
        }))
    }
}

/// The Go type the apiserver names in its 406 text (`*core.Pod`,
/// `*unstructured.Unstructured` for custom resources).
fn go_type(info: &super::registry::ResourceInfo, kind: &str) -> String {
    if !super::builtin::is_builtin_group(&info.group) {
        return if kind.ends_with("List") {
            "*unstructured.UnstructuredList".into()
        } else {
            "*unstructured.Unstructured".into()
        };
    }
    let package = match info.group.split('.').next() {
        None | Some("") => "core",
        Some(p) => p,
    };
    format!("*{package}.{kind}")
}

/// 406 NotAcceptable, as `errNotAcceptable` words it.
fn not_acceptable(message: String) -> ApiError {
    ApiError::new_status(406, "NotAcceptable", message)
}

/// `pods/NAME/exec|attach|portforward`: streaming subresources the real
/// apiserver proxies to the kubelet over an upgraded connection.
fn is_connect(served: &Served, sub: &str) -> bool {
    served.info.group.is_empty()
        && served.info.plural == "pods"
        && matches!(sub, "exec" | "attach" | "portforward")
}

/// Answers a connect request as kube-apiserver does before it would proxy
/// it: the pod must exist, the container be one of its own (and named when
/// there are several), the pod be on a node, and the request an upgrade.
/// Exec and attach are then served by [`super::exec`], portforward by
/// [`super::portforward`].
fn connect(
    api: &Api,
    served: &Served,
    target: &Target,
    name: &str,
    query: &Query,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let info = &served.info;
    let pod = api.get(
        &info.group,
        &info.version,
        &info.plural,
        target.namespace.as_deref(),
        name,
    )?;
    if target.subresource.as_deref() != Some("portforward") {
        let names: Vec<&str> = ["initContainers", "containers", "ephemeralContainers"]
            .iter()
            .flat_map(|k| pod["spec"][k].as_array().into_iter().flatten())
            .filter_map(|c| c["name"].as_str())
            .collect();
        match query.get("container") {
            Some(c) if !names.contains(&c) => {
                return Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )));
            }
            None => {
                let main: Vec<&str> = pod["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["name"].as_str())
                    .collect();
                if main.len() > 1 {
                    return Err(ApiError::bad_request(format!(
                        "a container name must be specified for pod {name}, choose one of: [{}]",
                        main.join(" ")
                    )));
                }
            }
            Some(_) => {}
        }
    }
    if pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let upgrade = header_str(headers, header::CONNECTION)
        .is_some_and(|c| c.to_ascii_lowercase().contains("upgrade"))
        && headers.contains_key(header::UPGRADE);
    if !upgrade {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    match target.subresource.as_deref() {
        Some(sub @ ("exec" | "attach")) => super::exec::connect(
            api,
            target.namespace.as_deref().unwrap_or_default(),
            name,
            sub == "attach",
        ),
        _ => {
            let Some(pending) = super::exec::take_pending() else {
                return Err(ApiError::bad_request("Upgrade request required"));
            };
            super::portforward::connect(
                api,
                pending,
                target.namespace.as_deref().unwrap_or_default(),
                name,
            )
        }
    }
}

/// Simulated usage of one running container (the sandbox measures nothing).
const CONTAINER_CPU_MILLIS: u64 = 1;
const CONTAINER_MEMORY_MIB: u64 = 4;

/// `metrics.k8s.io/v1beta1` as metrics-server serves it, for `kubectl top`:
/// running pods use a little CPU and memory per container, nodes a base
/// load plus their pods'.
fn metrics(api: &Api, plural: &str, target: &Target, query: &Query) -> ApiResult<Response> {
    const API_VERSION: &str = "metrics.k8s.io/v1beta1";
    let now = super::api::now_rfc3339();
    let labels = match query.get("labelSelector") {
        Some(s) => Some(parse_label_selector(s).map_err(|e| ApiError::bad_request(e.to_string()))?),
        None => None,
    };
    let ns = if plural == "pods" {
        target.namespace.as_deref()
    } else {
        None
    };
    let (pods, _) = api.store.list("pods", ns);
    let running: Vec<&Value> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p["status"]["phase"] == "Running")
        .collect();
    let containers = |p: &Value| p["spec"]["containers"].as_array().map_or(0, Vec::len) as u64;
    let (kind, items): (&str, Vec<Value>) = match plural {
        "pods" => (
            "PodMetrics",
            running
                .iter()
                .filter(|p| labels.as_ref().is_none_or(|l| l.matches_object(p)))
                .map(|p| {
                    json!({
                        "kind": "PodMetrics", "apiVersion": API_VERSION,
                        "metadata": {"name": p["metadata"]["name"], "namespace": p["metadata"]["namespace"],
                                     "labels": p["metadata"]["labels"], "creationTimestamp": now},
                        "timestamp": now, "window": "10s",
                        "containers": p["spec"]["containers"].as_array().into_iter().flatten().map(|c| json!({
                            "name": c["name"],
                            "usage": {"cpu": format!("{CONTAINER_CPU_MILLIS}m"), "memory": format!("{CONTAINER_MEMORY_MIB}Mi")},
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect(),
        ),
        "nodes" => {
            let (nodes, _) = api.store.list("nodes", None);
            (
                "NodeMetrics",
                nodes
                    .iter()
                    .filter(|n| labels.as_ref().is_none_or(|l| l.matches_object(n)))
                    .map(|n| {
                        let name = n["metadata"]["name"].as_str().unwrap_or_default();
                        let here: u64 = running
                            .iter()
                            .filter(|p| p["spec"]["nodeName"] == name)
                            .map(|p| containers(p))
                            .sum();
                        json!({
                            "kind": "NodeMetrics", "apiVersion": API_VERSION,
                            "metadata": {"name": name, "labels": n["metadata"]["labels"], "creationTimestamp": now},
                            "timestamp": now, "window": "10s",
                            "usage": {"cpu": format!("{}m", 50 + here * CONTAINER_CPU_MILLIS),
                                      "memory": format!("{}Mi", 256 + here * CONTAINER_MEMORY_MIB)},
                        })
                    })
                    .collect(),
            )
        }
        _ => return Err(ApiError::no_route(plural)),
    };
    match &target.name {
        Some(name) => items
            .into_iter()
            .find(|i| i["metadata"]["name"] == name.as_str())
            .map(|i| ok(&i))
            .ok_or_else(|| {
                let mut e = ApiError::new_status(
                    404,
                    "NotFound",
                    format!(
                        "{}.metrics.k8s.io \"{name}\" not found",
                        kind.to_lowercase()
                    ),
                );
                e.details = Some(
                    json!({"name": name, "group": "metrics.k8s.io", "kind": kind.to_lowercase()}),
                );
                e
            }),
        None => Ok(ok(&json!({
            "kind": format!("{kind}List"),
            "apiVersion": API_VERSION,
            "metadata": {},
            "items": items,
        }))),
    }
}

/// `serviceaccounts/NAME/token`: a TokenRequest answered with a signed
/// token for the account (bound to a pod when `boundObjectRef` names one),
/// which the sandbox then authenticates.
fn token_request(api: &Api, sa: &Value, request: &Value) -> Value {
    let ns = sa["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = sa["metadata"]["name"].as_str().unwrap_or_default();
    let now = jiff::Timestamp::now().as_second();
    let asked = request["spec"]["expirationSeconds"].as_i64().unwrap_or(0);
    let audiences: Vec<String> = request["spec"]["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let bound = &request["spec"]["boundObjectRef"];
    let pod = (bound["kind"] == "Pod")
        .then(|| bound["name"].as_str())
        .flatten()
        .and_then(|pod| api.store.get("pods", ns, pod));
    let (token, expires_at) = api
        .security
        .issue_token(sa, pod.as_deref(), &audiences, asked, now);
    let audiences = if audiences.is_empty() {
        vec![super::auth::API_AUDIENCE.to_owned()]
    } else {
        audiences
    };
    let expires = jiff::Timestamp::from_second(expires_at)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
        "spec": {"audiences": audiences, "expirationSeconds": expires_at - now, "boundObjectRef": bound},
        "status": {"token": token, "expirationTimestamp": expires},
    })
}

/// The query, with `dryRun=All` when DeleteOptions in the body ask for it
/// (`kubectl delete --dry-run=server` sends it there, not in the URL).
fn with_body_dry_run(query: &Query, opts: &Value) -> Query {
    let mut q = query.clone();
    if opts["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|v| v == "All"))
    {
        q.params.insert("dryRun".into(), "All".into());
    }
    q
}

/// The verb of a write, as RBAC names it, for the refusal of a read-only
/// server (`create pods/exec`).
fn write_verb(method: &str, named: bool, sub: Option<&str>) -> String {
    let verb = match (method, named) {
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (m, _) => return m.to_owned(),
    };
    match sub {
        Some(sub) => format!("{verb} of {sub}"),
        None => verb.to_owned(),
    }
}

/// A Scale's `spec.replicas` (`null` when it has none).
fn spec_replicas(scale: &Value) -> &Value {
    scale.pointer("/spec/replicas").unwrap_or(&Value::Null)
}

/// `GET …/pods/NAME/log`, answered by the kubelet hooks.
fn logs(api: &Api, ns: &str, name: &str, query: &Query) -> ApiResult<Response> {
    let num = |k: &str| -> ApiResult<Option<u64>> {
        match query.get(k) {
            None => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "{k}: Invalid value: \"{v}\": must be a non-negative integer"
                ))
            }),
        }
    };
    let opts = LogOptions {
        container: query.get("container").map(str::to_string),
        previous: query.flag("previous"),
        tail_lines: num("tailLines")?.map(|n| n as usize),
        since_seconds: num("sinceSeconds")?,
        limit_bytes: num("limitBytes")?.map(|n| n as usize),
        follow: query.flag("follow"),
        timestamps: query.flag("timestamps"),
    };
    let text_plain = HeaderValue::from_static("text/plain");
    match api.hooks().pod_logs(ns, name, &opts)? {
        LogStream::Done(bytes) => {
            let mut r = Response::new(Body::from(bytes));
            r.headers_mut().insert(header::CONTENT_TYPE, text_plain);
            Ok(r)
        }
        LogStream::Follow(initial, mut rx) => {
            let first =
                futures::stream::once(async move { Ok::<_, Infallible>(Bytes::from(initial)) });
            let rest = futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
                .map(|b| Ok::<_, Infallible>(Bytes::from(b)));
            let mut r = Response::new(Body::from_stream(first.chain(rest)));
            r.headers_mut().insert(header::CONTENT_TYPE, text_plain);
            Ok(r)
        }
    }
}

fn parse_body(body: &[u8], content_type: &str) -> ApiResult<Value> {
    if content_type.contains("protobuf") {
        return super::protobuf::decode(body)
            .map_err(|e| ApiError::new_status(415, "UnsupportedMediaType", e.to_string()));
    }
    if content_type.contains("yaml") {
        let text =
            std::str::from_utf8(body).map_err(|_| ApiError::bad_request("body is not UTF-8"))?;
        return serde_saphyr::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{}': {e}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    })
}

/// The `autoscaling/v1` Scale of a Deployment, ReplicaSet or custom resource.
fn scale_of(served: &Served, obj: &Value) -> Value {
    let (spec_path, status_path, selector_path) = scale_paths(served);
    let spec = obj.pointer(&spec_path).cloned().unwrap_or(json!(0));
    let status = obj.pointer(&status_path).cloned().unwrap_or(json!(0));
    let selector = match selector_path {
        Some(p) => obj.pointer(&p).cloned().unwrap_or(Value::Null),
        None => obj
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
            .map(|m| {
                json!(
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .unwrap_or(Value::Null),
    };
    let mut s = json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
            "uid": obj["metadata"]["uid"], "resourceVersion": obj["metadata"]["resourceVersion"],
            "creationTimestamp": obj["metadata"]["creationTimestamp"],
        },
        "spec": {"replicas": spec},
        "status": {"replicas": status},
    });
    if !selector.is_null() {
        s["status"]["selector"] = selector;
    }
    s
}

/// JSON pointers for spec replicas, status replicas and label selector.
fn scale_paths(served: &Served) -> (String, String, Option<String>) {
    let to_ptr = |p: &str| format!("/{}", p.trim_start_matches('.').replace('.', "/"));
    match served.crd.as_ref().and_then(|c| c.scale.clone()) {
        Some(sc) => (
            to_ptr(sc["specReplicasPath"].as_str().unwrap_or(".spec.replicas")),
            to_ptr(
                sc["statusReplicasPath"]
                    .as_str()
                    .unwrap_or(".status.replicas"),
            ),
            sc["labelSelectorPath"].as_str().map(to_ptr),
        ),
        None => ("/spec/replicas".into(), "/status/replicas".into(), None),
    }
}

fn scale_patch(served: &Served, replicas: &Value) -> ApiResult<Vec<u8>> {
    if !replicas.is_i64() && !replicas.is_u64() {
        return Err(ApiError::bad_request("spec.replicas: must be an integer"));
    }
    let (spec_path, _, _) = scale_paths(served);
    let mut patch = json!({});
    let parts: Vec<&str> = spec_path.trim_start_matches('/').split('/').collect();
    let mut cur = &mut patch;
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            cur[*p] = replicas.clone();
        } else {
            cur = &mut cur[*p];
        }
    }
    serde_json::to_vec(&patch).map_err(|e| ApiError::internal(e.to_string()))
}

struct Filter {
    namespace: Option<String>,
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    group: String,
    kind: String,
    namespaced: bool,
    selectable: Option<Vec<String>>,
}

impl Filter {
    fn new(served: &Served, target: &Target, query: &Query) -> ApiResult<Self> {
        let labels = match query.get("labelSelector") {
            Some(s) => {
                Some(parse_label_selector(s).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
            None => None,
        };
        let mut filter = Filter {
            namespace: target.namespace.clone().filter(|_| served.info.namespaced),
            labels,
            fields: None,
            group: served.info.group.clone(),
            kind: served.info.kind.clone(),
            namespaced: served.info.namespaced,
            selectable: served.crd.as_ref().map(|c| c.selectable_fields.clone()),
        };
        if let Some(s) = query.get("fieldSelector") {
            let fs = parse_field_selector(s).map_err(|e| ApiError::bad_request(e.to_string()))?;
            fs.check(&filter.resource())
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            filter.fields = Some(fs);
        }
        Ok(filter)
    }

    fn resource(&self) -> FieldResource<'_> {
        match &self.selectable {
            Some(sel) => FieldResource::custom(&self.group, &self.kind, self.namespaced, sel),
            None => FieldResource::built_in(&self.group, &self.kind, self.namespaced),
        }
    }

    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj["metadata"]["namespace"].as_str() != Some(ns)
        {
            return false;
        }
        self.matches_selectors(obj)
    }

    /// A label or field selector narrows what is listed.
    fn selects(&self) -> bool {
        self.labels.is_some() || self.fields.is_some()
    }

    /// [`Filter::matches`] for an object known to be in the namespace.
    fn matches_selectors(&self, obj: &Value) -> bool {
        if let Some(l) = &self.labels
            && !l.matches_object(obj)
        {
            return false;
        }
        if let Some(f) = &self.fields
            && !f.matches(obj, &self.resource())
        {
            return false;
        }
        true
    }
}

/// A continue token: the list's version, the last key handed out, and (when
/// no selector narrowed the list) how many objects followed it, so that a
/// continued page need not count them again.
fn encode_continue(rv: u64, ns: &str, name: &str, remaining: Option<usize>) -> String {
    let remaining = remaining.map(|n| n.to_string()).unwrap_or_default();
    format!("{rv}|{remaining}|{ns}|{name}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> Option<((u64, String, String), Option<usize>)> {
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let s = String::from_utf8(bytes?).ok()?;
    let mut it = s.splitn(4, '|');
    let rv = it.next()?.parse().ok()?;
    let remaining = match it.next()? {
        "" => None,
        n => Some(n.parse().ok()?),
    };
    Some((
        (rv, it.next()?.to_string(), it.next()?.to_string()),
        remaining,
    ))
}

/// A LIST answer: the items are the store's own objects, shared, so a list
/// of 10k pods copies nothing until it is written out.
struct Listed {
    kind: String,
    api_version: String,
    metadata: Value,
    items: Vec<Arc<Value>>,
}

impl Listed {
    /// As one JSON value (tables, deletecollection).
    fn to_value(&self) -> Value {
        json!({
            "kind": self.kind,
            "apiVersion": self.api_version,
            "metadata": self.metadata,
            "items": self.items.iter().map(|i| i.as_ref().clone()).collect::<Vec<_>>(),
        })
    }

    /// The JSON bytes, written item by item from the shared objects.
    fn to_bytes(&self) -> Vec<u8> {
        wire::list(&self.kind, &self.api_version, &self.metadata, &self.items)
    }
}

/// LIST with selectors, limit and continue.
fn list(api: &Api, served: &Served, target: &Target, query: &Query) -> ApiResult<Listed> {
    decode_integer_options(query)?;
    if query.opt_flag("sendInitialEvents").is_some() {
        return Err(invalid_list_options(
            "sendInitialEvents",
            "Forbidden: sendInitialEvents is forbidden for list".into(),
        ));
    }
    let filter = Filter::new(served, target, query)?;
    let (after, known_remaining) = match query.get("continue").filter(|t| !t.is_empty()) {
        Some(tok) => {
            let (after, remaining) = decode_continue(tok).ok_or_else(|| {
                ApiError::bad_request(
                    "continue key is not valid: the provided continue parameter is not valid",
                )
            })?;
            (Some(after), remaining)
        }
        None => (None, None),
    };
    let limit: Option<usize> = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0);
    let version = list_version(api, query, after.as_ref(), limit)?;
    // The store hands a page over in (namespace, name) order, already of
    // the asked namespace, starting after the token's key, so a page costs
    // its own items, not the collection's (as etcd's range read does).
    let mut read = ListRead {
        api,
        served,
        res: served.info.storage_resource(),
        ns: filter.namespace.as_deref(),
        version,
        from: after
            .as_ref()
            .map(|(_, ns, name)| (ns.clone(), name.clone())),
        after: after.as_ref(),
        limit,
    };
    let (out, rv, next) = if filter.selects() {
        read.selected(&filter)?
    } else {
        read.all(known_remaining)?
    };
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some((token, remaining)) = next {
        meta["continue"] = json!(token);
        if let Some(remaining) = remaining {
            meta["remainingItemCount"] = json!(remaining);
        }
    }
    Ok(Listed {
        kind: format!("{}List", served.info.kind),
        api_version: served.info.api_version(),
        metadata: meta,
        items: out,
    })
}

/// One page of a LIST: its items, the version read, and the continue
/// token with the remaining count, when more follow.
type ListPage = (Vec<Arc<Value>>, u64, Option<(String, Option<usize>)>);

/// A LIST being read from the store, a page at a time.
struct ListRead<'a> {
    /// The API.
    api: &'a Api,
    /// The resource listed.
    served: &'a Served,
    /// Its storage resource.
    res: String,
    /// The namespace listed (none: all).
    ns: Option<&'a str>,
    /// The version read.
    version: ListVersion,
    /// The key the next read starts after.
    from: Option<ObjectKey>,
    /// The continue token's version and key.
    after: Option<&'a (u64, String, String)>,
    /// The page size asked for.
    limit: Option<usize>,
}

/// The continue token of a page that ends with `last`.
fn token_after(rv: u64, last: &Value, remaining: Option<usize>) -> String {
    let m = &last["metadata"];
    encode_continue(
        rv,
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
        remaining,
    )
}

impl ListRead<'_> {
    /// A page of what a selector selects. Read on until a page's worth
    /// match and one more (another page is there when another item
    /// matches); its count is left unset, as kube-apiserver leaves
    /// `remainingItemCount` when a selector narrowed the list (it cannot
    /// know without reading on).
    fn selected(&mut self, filter: &Filter) -> ApiResult<ListPage> {
        let limit = self.limit;
        let want = limit.map_or(usize::MAX, |l| l + 1);
        let chunk = limit.map_or(usize::MAX, |l| (l + 1).max(256));
        let mut out: Vec<Arc<Value>> = Vec::new();
        let rv = loop {
            let page = read_page(
                self.api,
                &self.res,
                self.ns,
                self.version,
                self.from.as_ref(),
                (chunk, false),
                self.after,
            )?;
            // Every chunk of one answer reads the same version.
            self.version = ListVersion::Snapshot(page.rv);
            self.from = page.items.last().map(|o| key_of(o));
            for o in page.items {
                let o = convert::present(&self.served.info, o);
                if filter.matches_selectors(&o) {
                    out.push(o);
                    if out.len() == want {
                        break;
                    }
                }
            }
            if out.len() == want || !page.more {
                break page.rv;
            }
        };
        let next = match limit {
            Some(l) if out.len() > l => {
                out.truncate(l);
                out.last().map(|last| (token_after(rv, last, None), None))
            }
            _ => None,
        };
        Ok((out, rv, next))
    }

    /// A page of the whole collection. How many follow is counted once a
    /// list, on its first page (a walk over the rest of the collection),
    /// and carried in the token (`known_remaining`): every page reads the
    /// same version, so it only goes down.
    fn all(&mut self, known_remaining: Option<usize>) -> ApiResult<ListPage> {
        let max = self.limit.unwrap_or(usize::MAX);
        let page = read_page(
            self.api,
            &self.res,
            self.ns,
            self.version,
            self.from.as_ref(),
            (max, known_remaining.is_none()),
            self.after,
        )?;
        let remaining = page
            .remaining
            .or_else(|| known_remaining.map(|n| n.saturating_sub(page.items.len())));
        let out: Vec<Arc<Value>> = page
            .items
            .into_iter()
            .map(|o| convert::present(&self.served.info, o))
            .collect();
        let next = match out.last() {
            Some(last) if page.more => Some((
                token_after(page.rv, last, remaining),
                Some(remaining.unwrap_or(1)),
            )),
            _ => None,
        };
        Ok((out, page.rv, next))
    }
}

/// The integer list options decoded as the apiserver's parameter codec
/// does: one that is not a number is a 400 with strconv's text.
fn decode_integer_options(query: &Query) -> ApiResult<()> {
    for key in ["limit", "timeoutSeconds"] {
        if let Some(v) = query.get(key).filter(|v| !v.is_empty())
            && v.parse::<i64>().is_err()
        {
            let why = if v
                .trim_start_matches(['-', '+'])
                .chars()
                .all(|c| c.is_ascii_digit())
            {
                "value out of range"
            } else {
                "invalid syntax"
            };
            return Err(ApiError::bad_request(format!(
                "strconv.ParseInt: parsing {}: {why}",
                super::selector::go_quote(v)
            )));
        }
    }
    Ok(())
}

/// A 422 about the list options, as `ValidateListOptions` words it.
fn invalid_list_options(field: &str, message: String) -> ApiError {
    invalid_list_options_all(vec![(field.to_owned(), message)])
}

/// A 422 naming every invalid list option, aggregated as the apiserver's
/// `NewInvalid` does (`[a: …, b: …]` when there are several).
fn invalid_list_options_all(errs: Vec<(String, String)>) -> ApiError {
    let each: Vec<String> = errs.iter().map(|(f, m)| format!("{f}: {m}")).collect();
    let all = match each.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", each.join(", ")),
    };
    let reason = |m: &str| {
        if m.starts_with("Forbidden") {
            "FieldValueForbidden"
        } else if m.starts_with("Unsupported value") {
            "FieldValueNotSupported"
        } else {
            "FieldValueInvalid"
        }
    };
    let causes: Vec<Value> = errs
        .iter()
        .map(|(f, m)| json!({"reason": reason(m), "message": m, "field": f}))
        .collect();
    let mut e = ApiError::new_status(
        422,
        "Invalid",
        format!("ListOptions.meta.k8s.io \"\" is invalid: {all}"),
    );
    e.details = Some(json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes}));
    e
}

/// The watch-list rules of `validateWatchOptions`: `sendInitialEvents`
/// needs `resourceVersionMatch=NotOlderThan`, which a watch may only give
/// together with `sendInitialEvents`.
fn validate_watch_options(query: &Query) -> ApiResult<()> {
    let send_initial = query.opt_flag("sendInitialEvents");
    let matching = query.get("resourceVersionMatch");
    let mut errs = Vec::new();
    let field = "resourceVersionMatch".to_owned();
    if send_initial.is_some() && matching != Some("NotOlderThan") {
        errs.push((
            field.clone(),
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                .to_owned(),
        ));
    }
    if let Some(m) = matching {
        if send_initial.is_none() {
            errs.push((
                field.clone(),
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".to_owned(),
            ));
        }
        if m != "NotOlderThan" {
            errs.push((
                field.clone(),
                format!("Unsupported value: \"{m}\": supported values: \"NotOlderThan\""),
            ));
        }
        if query.get("continue").is_some() {
            errs.push((
                field,
                "Forbidden: resourceVersionMatch is forbidden when continue is provided".to_owned(),
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid_list_options_all(errs))
    }
}

/// An object's (namespace, name), its key in the store.
fn key_of(o: &Value) -> ObjectKey {
    let m = &o["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_owned(),
        m["name"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Which version of the objects a LIST reads.
#[derive(Clone, Copy, Debug)]
enum ListVersion {
    /// The latest state.
    Latest,
    /// The version of a continue token: 410 Expired once compacted.
    Continued(u64),
    /// An exact version: 410 Gone once compacted.
    Snapshot(u64),
}

/// The version a LIST reads, following the resourceVersion /
/// resourceVersionMatch / continue semantics of the API concepts: unset is
/// the latest state, `0` any, an exact version (or a continue token) that
/// version's snapshot.
fn list_version(
    api: &Api,
    query: &Query,
    after: Option<&(u64, String, String)>,
    limit: Option<usize>,
) -> ApiResult<ListVersion> {
    let asked = query.get("resourceVersion").filter(|s| !s.is_empty());
    let matching = query.get("resourceVersionMatch").filter(|s| !s.is_empty());
    match matching {
        None | Some("Exact" | "NotOlderThan") => {}
        Some(other) => {
            return Err(invalid_list_options(
                "resourceVersionMatch",
                format!(
                    "Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                ),
            ));
        }
    }
    if matching.is_some() && asked.is_none() {
        return Err(invalid_list_options(
            "resourceVersionMatch",
            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
                .into(),
        ));
    }
    if matching.is_some() && after.is_some() {
        return Err(invalid_list_options(
            "resourceVersionMatch",
            "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
        ));
    }
    if matching == Some("Exact") && asked == Some("0") {
        return Err(invalid_list_options(
            "resourceVersionMatch",
            "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
                .into(),
        ));
    }
    if let Some((at, _, _)) = after {
        if asked.is_some_and(|a| a != "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        return Ok(ListVersion::Continued(*at));
    }
    let asked_rv = match asked {
        None | Some("0") => None,
        Some(a) => Some(a.parse::<u64>().map_err(|_| {
            invalid_list_options(
                "resourceVersion",
                format!("Invalid value: \"{a}\": must be a non-negative integer"),
            )
        })?),
    };
    let Some(at) = asked_rv else {
        return Ok(ListVersion::Latest);
    };
    let current = api.store.current_rv();
    if at > current {
        // The real apiserver waits up to 3 s for its cache to catch up, then
        // answers this; nothing here will catch up.
        let mut e = ApiError::new_status(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {at}, current: {current}"),
        );
        e.details = Some(json!({"causes": [{"reason": "ResourceVersionTooLarge",
            "message": "Too large resource version"}], "retryAfterSeconds": 1}));
        return Err(e);
    }
    // An exact version, or a paginated list at a given version (the legacy
    // meaning of resourceVersion with limit), reads that snapshot.
    if matching == Some("Exact") || (matching.is_none() && limit.is_some()) {
        return Ok(ListVersion::Snapshot(at));
    }
    Ok(ListVersion::Latest)
}

/// Up to `max` objects after `from` at `version` (see [`Store::page`]);
/// `after` is the continue token's version and key, for a 410's fresh token.
///
/// [`Store::page`]: super::store::Store::page
fn read_page(
    api: &Api,
    res: &str,
    ns: Option<&str>,
    version: ListVersion,
    from: Option<&ObjectKey>,
    (max, count): (usize, bool),
    after: Option<&(u64, String, String)>,
) -> ApiResult<Page> {
    let at = match version {
        ListVersion::Latest => None,
        ListVersion::Continued(at) | ListVersion::Snapshot(at) => Some(at),
    };
    api.store
        .page(res, ns, at, from, max, count)
        .map_err(|too_old| match (version, after) {
            (ListVersion::Continued(_), Some((_, ns_key, name_key))) => {
                let mut e = ApiError::new_status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter, or use the continue token \
                     in this response to retrieve the remainder of the results. Continuing with the \
                     provided token results in an inconsistent list - objects that were created, \
                     modified, or deleted between the time the first chunk was returned and now may \
                     show up in the list.",
                );
                e.list_meta = Some(json!({"continue": encode_continue(
                    api.store.current_rv(), ns_key, name_key, None)}));
                e
            }
            (_, _) => ApiError::gone(at.unwrap_or_default(), too_old.oldest),
        })
}

fn printer_columns(served: &Served) -> Option<Vec<table::PrinterColumn>> {
    served.crd.as_ref().map(|c| {
        c.printer_columns
            .iter()
            .filter_map(table::PrinterColumn::from_crd)
            .collect()
    })
}

/// Renders `list` (a List object) as a `meta.k8s.io` Table.
fn to_table(
    served: &Served,
    list: &Value,
    query: &Query,
    version: table::TableVersion,
    no_headers: bool,
) -> ApiResult<Value> {
    let items: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
    let include_object = table::IncludeObject::from_query(query.get("includeObject"))
        .map_err(ApiError::bad_request)?;
    let cols = printer_columns(served);
    let meta = &list["metadata"];
    let s = |k: &str| meta[k].as_str().map(str::to_string);
    let options = table::TableOptions {
        version,
        include_object,
        no_headers,
        now: jiff::Timestamp::now(),
    };
    let list_meta = table::ListMeta {
        resource_version: s("resourceVersion"),
        continue_token: s("continue"),
        remaining_item_count: meta["remainingItemCount"].as_i64(),
    };
    Ok(table::to_table(
        &served.info.kind,
        &items,
        cols.as_deref(),
        &options,
        &list_meta,
    ))
}

/// One event to send: its type and object.
type Event = (EventType, Arc<Value>);

/// WATCH: replays what the asked resourceVersion has not seen, then streams
/// live changes, bookmarks if asked, and ends after `timeoutSeconds`.
async fn watch(
    api: &Arc<Api>,
    served: &Served,
    target: &Target,
    query: &Query,
    as_table: Option<table::TableVersion>,
    meta_only: Option<MetadataOnly>,
) -> ApiResult<Response> {
    let filter = watch_filter(served, target, query, as_table)?;
    let res = served.info.storage_resource();
    let send_initial = query.opt_flag("sendInitialEvents") == Some(true);
    let (initial, start_rv, rx) = match watch_start(api, served, &filter, query, &res) {
        Ok(start) => start,
        Err(gone) => {
            // The real apiserver answers 200 and then one ERROR event.
            let mut r = Response::new(Body::from(wire::event("ERROR", &gone.status())));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return Ok(r);
        }
    };
    let bookmarks = query.flag("allowWatchBookmarks");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(1800);
    let task = WatchTask {
        encoder: WatchEncoder {
            kind: served.info.kind.clone(),
            api_version: served.info.api_version(),
            served: served.clone(),
            query: query.clone(),
            as_table,
            meta_only,
            headers_sent: false,
        },
        filter,
        res,
        bookmarks,
        initial_bookmark: send_initial && bookmarks,
        timeout: Duration::from_secs(timeout),
        cancel: api.faults_cancel_token(),
    };
    let (tx, out_rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(256);
    tokio::spawn(task.run(tx, initial, start_rv, rx));
    let stream = tokio_stream_from(out_rx);
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
    Ok(r)
}

/// A watch's options checked (as a list's are, and the watch-list rules)
/// and its filter.
fn watch_filter(
    served: &Served,
    target: &Target,
    query: &Query,
    as_table: Option<table::TableVersion>,
) -> ApiResult<Filter> {
    let filter = Filter::new(served, target, query)?;
    if as_table.is_some() {
        // Reject a bad includeObject before the stream starts.
        table::IncludeObject::from_query(query.get("includeObject"))
            .map_err(ApiError::bad_request)?;
    }
    validate_watch_options(query)?;
    decode_integer_options(query)?;
    // The same check a list makes: a version must be a number.
    if let Some(a) = query.get("resourceVersion").filter(|a| !a.is_empty())
        && a.parse::<u64>().is_err()
    {
        return Err(invalid_list_options(
            "resourceVersion",
            format!("Invalid value: \"{a}\": must be a non-negative integer"),
        ));
    }
    Ok(filter)
}

/// Where a watch starts: the events it replays first, the version they
/// bring it to, and its receiver of later changes.
type WatchStart = (Vec<Event>, u64, broadcast::Receiver<Arc<Change>>);

/// A watch's start: from an asked version, the changes since (`Err`: the
/// 410 of a version compacted away, sent as the stream's one ERROR event);
/// else the current state as ADDED events, unless sendInitialEvents=false.
fn watch_start(
    api: &Api,
    served: &Served,
    filter: &Filter,
    query: &Query,
    res: &str,
) -> Result<WatchStart, ApiError> {
    let send_initial_opt = query.opt_flag("sendInitialEvents");
    let send_initial = send_initial_opt == Some(true);
    match query
        .get("resourceVersion")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|n| *n > 0 && !send_initial)
    {
        Some(since) => match api.store.watch_from(res, since) {
            Ok((past, rx)) => {
                let evs = past
                    .into_iter()
                    .filter_map(|c| {
                        let c = present_change(&served.info, &c);
                        visible(filter, &c).map(|t| (t, c.object.clone()))
                    })
                    .collect();
                Ok((evs, since, rx))
            }
            Err(too_old) => Err(ApiError::gone(since, too_old.oldest)),
        },
        // sendInitialEvents=false from "any" or the latest version: the
        // changes from now on, without the current state.
        None if send_initial_opt == Some(false) => {
            let (_, at, rx) = api.store.watch_current(res, filter.namespace.as_deref());
            Ok((Vec::new(), at, rx))
        }
        None => {
            let (items, at, rx) = api.store.watch_current(res, filter.namespace.as_deref());
            let evs = items
                .into_iter()
                .map(|o| convert::present(&served.info, o))
                .filter(|o| filter.matches(o))
                .map(|o| (EventType::Added, o))
                .collect();
            Ok((evs, at, rx))
        }
    }
}

/// How a watch writes its events: objects as asked (whole, as Table rows,
/// or metadata only) and bookmarks of the resource's kind.
struct WatchEncoder {
    /// The resource's kind (of bookmarks).
    kind: String,
    /// The resource's apiVersion (of bookmarks).
    api_version: String,
    /// The resource watched.
    served: Served,
    /// The watch's options (a Table's includeObject).
    query: Query,
    /// The Table version asked for.
    as_table: Option<table::TableVersion>,
    /// The metadata-only view asked for.
    meta_only: Option<MetadataOnly>,
    /// A Table's column headers went with the first row.
    headers_sent: bool,
}

impl WatchEncoder {
    /// One event of type `t` with `obj`, as bytes of the stream.
    fn encode(&mut self, t: &str, obj: &Value) -> Bytes {
        let object = match self.as_table {
            Some(version) if t != "BOOKMARK" && t != "ERROR" => {
                let l = json!({"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "items": [obj]});
                let table = to_table(&self.served, &l, &self.query, version, self.headers_sent)
                    .unwrap_or(Value::Null);
                self.headers_sent = true;
                table
            }
            // Each event's object, bookmarks included, as the
            // watch's embedded encoder transforms it.
            _ if t != "ERROR" && self.meta_only.is_some() => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": self.meta_only.map_or("meta.k8s.io/v1", |m| m.version.api_version()),
                "metadata": obj["metadata"],
            }),
            _ => obj.clone(),
        };
        Bytes::from(wire::event(t, &object))
    }

    /// A BOOKMARK event at `rv` (`initial_end`: the one that ends the
    /// initial events of a watch-list).
    fn bookmark(&mut self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": meta});
        self.encode("BOOKMARK", &object)
    }
}

/// A watch's stream, run as its own task.
struct WatchTask {
    /// How events are written.
    encoder: WatchEncoder,
    /// What the watch selects.
    filter: Filter,
    /// The storage resource watched.
    res: String,
    /// allowWatchBookmarks.
    bookmarks: bool,
    /// A bookmark ends the initial events (a watch-list that allows them).
    initial_bookmark: bool,
    /// When the watch ends (timeoutSeconds).
    timeout: Duration,
    /// Ends every watch (a fault dropping them, the server restarting).
    cancel: CancellationToken,
}

/// An event stream's sender.
type EventSender = tokio::sync::mpsc::Sender<Result<Bytes, Infallible>>;

impl WatchTask {
    /// Sends the initial events (and their bookmark), then the live
    /// changes, until the timeout, a cancel, the client going away or the
    /// watcher falling behind.
    async fn run(
        mut self,
        tx: EventSender,
        initial: Vec<Event>,
        start_rv: u64,
        rx: broadcast::Receiver<Arc<Change>>,
    ) {
        // Bookmarks carry the latest resourceVersion this watch has seen of
        // the whole store, as the real watch cache's progress notifications do.
        let mut last_rv = start_rv;
        for (t, obj) in initial {
            last_rv = last_rv.max(rv_of(&obj));
            let event = self.encoder.encode(t.as_str(), &obj);
            if tx.send(Ok(event)).await.is_err() {
                return;
            }
        }
        if self.initial_bookmark {
            let event = self.encoder.bookmark(last_rv, true);
            if tx.send(Ok(event)).await.is_err() {
                return;
            }
        }
        self.live(tx, last_rv, rx).await;
    }

    /// Streams the live changes after `last_rv`, with a bookmark every
    /// 10 s if asked.
    async fn live(
        mut self,
        tx: EventSender,
        mut last_rv: u64,
        mut rx: broadcast::Receiver<Arc<Change>>,
    ) {
        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = self.cancel.cancelled() => return,
                // The client went away: without this a watch of a quiet
                // resource would only notice at its timeout (30 min by
                // default), keeping its task and receiver until then.
                () = tx.closed() => return,
                _ = tick.tick(), if self.bookmarks => {
                    let event = self.encoder.bookmark(last_rv, false);
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                msg = rx.recv() => match msg {
                    Ok(c) => {
                        if c.rv <= last_rv {
                            continue;
                        }
                        last_rv = c.rv;
                        if c.resource != self.res {
                            continue;
                        }
                        let c = present_change(&self.encoder.served.info, &c);
                        if let Some(t) = visible(&self.filter, &c) {
                            let event = self.encoder.encode(t.as_str(), &c.object);
                            if tx.send(Ok(event)).await.is_err() {
                                return;
                            }
                        }
                    }
                    // A watcher too slow to keep up is ended, as the real
                    // apiserver does; the client re-lists or re-watches.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}

/// A change as a client of `info` sees it (an events.k8s.io view of a
/// core Event is converted; everything else is shared as is).
fn present_change<'a>(
    info: &super::registry::ResourceInfo,
    c: &'a Change,
) -> std::borrow::Cow<'a, Change> {
    if !info.is_view() {
        return std::borrow::Cow::Borrowed(c);
    }
    let mut view = c.clone();
    view.object = convert::present(info, view.object);
    view.previous = view.previous.map(|p| convert::present(info, p));
    std::borrow::Cow::Owned(view)
}

/// How a change looks to a watch with this filter: an object entering the
/// selection is ADDED, one leaving it DELETED, as the real watch cache does.
fn visible(filter: &Filter, c: &Change) -> Option<EventType> {
    let now = filter.matches(&c.object);
    let before = c.previous.as_ref().is_some_and(|p| filter.matches(p));
    match c.kind {
        EventType::Added => now.then_some(EventType::Added),
        EventType::Deleted => (now || before).then_some(EventType::Deleted),
        EventType::Modified => match (before, now) {
            (true, true) => Some(EventType::Modified),
            (false, true) => Some(EventType::Added),
            (true, false) => Some(EventType::Deleted),
            (false, false) => None,
        },
    }
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, Infallible>>,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

/// Labels of an object as a map (for selectors).
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}
