//! A watcher whose initial list asks for the next page while it decodes the
//! page in hand.
//!
//! kube-runtime's [`watcher`](kube::runtime::watcher()) lists one page after
//! another: ask, wait, decode, ask again. The API server encodes a page while
//! we wait and we decode it while the server waits, so one side is idle half
//! of the time. Listing 10,000 tasks (20 pages) from the sandbox into a
//! store takes a median 76–90 ms that way and 48–58 ms this way, with the
//! pages decoded as [`super::slim`] does (`benches/console.rs`, 27 Nov).
//!
//! This is kube-runtime's watcher state machine (the same [`Event`]s in the
//! same order, the same [`watcher::Error`]s, the same recovery: a watch that
//! ends resumes from the last resourceVersion, `410 Gone` relists) with one
//! change: as soon as a page has arrived, its `continue` token is read (the
//! server writes it before the items, and the scan stops there) and the
//! next page is asked for; the
//! page's items are then decoded while the server encodes the next one. At
//! most one page is asked for ahead, so memory grows by one page's text at
//! most. (Decoding on the blocking pool instead was no quicker and held
//! 8 MiB more RSS, we think because its thread allocates from a malloc
//! arena of its own.)
//!
//! A second difference: listed objects come without `metadata.managedFields`
//! (skipped while decoding, see [`super::slim`]); every watch here drops
//! them anyway, watched objects included.
//!
//! The initial list is always list-then-watch: streaming lists are off by
//! default up to Kubernetes 1.33 and answer `422` there.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::{ListParams, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event, ListSemantic};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::watches::{
    REFUSED_FORBIDDEN_RECHECK, REFUSED_NOT_SERVED_RECHECK, Refusal, Restart, WatchCell,
};

/// The watch's own idle limit beyond the server's timeout (as kube-runtime):
/// a connection whose close never came is given up after this.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// The server's watch timeout when the config names none (kube-runtime's).
const DEFAULT_WATCH_TIMEOUT: u32 = 290;

/// Watches `api` as [`kube::runtime::watcher()`] does, with the initial list
/// pipelined (see the module). `config`'s selectors, page size, list
/// semantic, timeout and bookmarks are honoured; its initial list strategy
/// is not (always list, then watch).
pub fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    watcher_reporting(api, config, WatchCell::detached(&kind))
}

/// [`watcher`], reporting each change of phase and each restart to `cell`
/// (see [`super::watches`]).
pub fn watcher_reporting<K>(
    api: Api<K>,
    config: watcher::Config,
    cell: WatchCell,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher_emptying(api, config, cell, &[])
}

/// [`watcher_reporting`], with the `status` fields named in `emptied`
/// read from list pages as the empty string (see
/// [`super::slim::items_emptying`]); watch events decode whole.
pub fn watcher_emptying<K>(
    api: Api<K>,
    config: watcher::Config,
    cell: WatchCell,
    emptied: super::slim::Emptied,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let lister = Lister {
        client: api.clone().into_client(),
        url: api.resource_url().to_owned(),
        params: list_params(&config),
        cell,
        emptied,
    };
    futures::stream::unfold(
        (api, lister, config, State::Empty),
        |(api, lister, config, state)| async move {
            let (event, state) = step(&api, &lister, &config, state).await;
            Some((event, (api, lister, config, state)))
        },
    )
}

fn list_params(config: &watcher::Config) -> ListParams {
    let (resource_version, version_match) = match config.list_semantic {
        ListSemantic::Any => (Some("0".to_owned()), Some(VersionMatch::NotOlderThan)),
        ListSemantic::MostRecent => (None, None),
    };
    ListParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        limit: config.page_size,
        resource_version,
        version_match,
        ..ListParams::default()
    }
}

fn watch_params(config: &watcher::Config) -> WatchParams {
    WatchParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        timeout: config.timeout,
        bookmarks: config.bookmarks,
        send_initial_events: false,
    }
}

/// Asks for list pages (and holds the watch's report cell).
struct Lister {
    client: Client,
    url: String,
    params: ListParams,
    cell: WatchCell,
    /// `status` fields read from pages as the empty string.
    emptied: super::slim::Emptied,
}

impl Lister {
    /// Starts asking for the page after `continue_token` (the first page
    /// with none); the answer is the page's text.
    fn fetch(&self, continue_token: Option<String>) -> Fetch {
        let params = ListParams {
            continue_token,
            ..self.params.clone()
        };
        let request = kube::core::Request::new(&self.url).list(&params);
        let client = self.client.clone();
        Fetch(tokio::spawn(async move {
            let request = request.map_err(kube::Error::BuildRequest)?;
            // As `Client::request_text` (an error answer is its `Status`),
            // with the body read once into the text's own buffer: there it
            // is gathered, copied whole, then copied again into the text.
            let mut body = client.request_stream(request).await?;
            let mut bytes = Vec::new();
            futures::AsyncReadExt::read_to_end(&mut body, &mut bytes)
                .await
                .map_err(kube::Error::ReadEvents)?;
            String::from_utf8(bytes).map_err(kube::Error::FromUtf8)
        }))
    }
}

/// A page being asked for; dropping it stops asking.
struct Fetch(JoinHandle<kube::Result<String>>);

impl Drop for Fetch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Future for Fetch {
    type Output = kube::Result<String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|joined| joined.unwrap_or_else(|e| Err(join_error(e))))
    }
}

fn join_error(e: tokio::task::JoinError) -> kube::Error {
    match e.try_into_panic() {
        Ok(panic) => std::panic::resume_unwind(panic),
        Err(e) => kube::Error::Service(Box::new(e)),
    }
}

enum State<K> {
    /// The next step starts a list.
    Empty,
    /// Handing out a page's objects; `next` is the page after it, already
    /// asked for (none after the last page).
    Listing {
        objects: std::vec::IntoIter<K>,
        next: Option<Fetch>,
        resource_version: Option<String>,
    },
    /// Listed (or a watch ended): the next step starts a watch.
    Listed { resource_version: String },
    Watching {
        resource_version: String,
        stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    },
    /// The API refused the list or watch (403, 404): the next step waits
    /// this long, or until a recheck is asked for, then lists again.
    Refused { wait: Duration },
}

/// Steps until there is something to say.
async fn step<K>(
    api: &Api<K>,
    lister: &Lister,
    config: &watcher::Config,
    mut state: State<K>,
) -> (watcher::Result<Event<K>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    loop {
        match step_once(api, lister, config, state).await {
            (Some(event), next) => return (event, next),
            (None, next) => state = next,
        }
    }
}

/// One step of the watcher: one function per state, each saying what (if
/// anything) to hand out and the state after it.
async fn step_once<K>(
    api: &Api<K>,
    lister: &Lister,
    config: &watcher::Config,
    state: State<K>,
) -> (Option<watcher::Result<Event<K>>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    match state {
        State::Empty => start_list(lister),
        State::Listing {
            objects,
            next,
            resource_version,
        } => listing(lister, objects, next, resource_version).await,
        State::Listed { resource_version } => {
            start_watch(api, lister, config, resource_version).await
        }
        State::Watching {
            resource_version,
            stream,
        } => watching(lister, config, resource_version, stream).await,
        State::Refused { wait } => {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = lister.cell.recheck_asked() => {}
            }
            (None, State::Empty)
        }
    }
}

/// A refusal retrying soon will not change: 403 (this identity may not
/// `verb`) or 404 (the resource is not served: its CRD is not installed).
fn refusal(e: &kube::Error, verb: &'static str) -> Option<Refusal> {
    match e {
        kube::Error::Api(s) if s.code == 403 => Some(Refusal::Forbidden(verb)),
        kube::Error::Api(s) if s.code == 404 => Some(Refusal::NotServed),
        _ => None,
    }
}

/// The watch was refused as `refusal` says: reported to the cell, said
/// once (the first time, as an error, for the log and the API's health),
/// then asked again slowly.
fn refused<K>(
    lister: &Lister,
    refusal: Refusal,
    e: kube::Error,
    error: fn(kube::Error) -> watcher::Error,
) -> (Option<watcher::Result<Event<K>>>, State<K>) {
    let wait = match refusal {
        Refusal::Forbidden(_) => REFUSED_FORBIDDEN_RECHECK,
        Refusal::NotServed => REFUSED_NOT_SERVED_RECHECK,
    };
    let news = lister.cell.refused(refusal, cause(&e));
    let said = news.then(|| Err(error(e)));
    (said, State::Refused { wait })
}

/// Empty: starts a list (its first page asked for at once).
fn start_list<K>(lister: &Lister) -> (Option<watcher::Result<Event<K>>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    lister.cell.listing();
    (
        Some(Ok(Event::Init)),
        State::Listing {
            objects: Vec::new().into_iter(),
            next: Some(lister.fetch(None)),
            resource_version: None,
        },
    )
}

/// Listing: hands out the page's objects, then takes the next page; after
/// the last, the list's resourceVersion is where the watch starts.
async fn listing<K>(
    lister: &Lister,
    mut objects: std::vec::IntoIter<K>,
    next: Option<Fetch>,
    resource_version: Option<String>,
) -> (Option<watcher::Result<Event<K>>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    if let Some(object) = objects.next() {
        let state = State::Listing {
            objects,
            next,
            resource_version,
        };
        return (Some(Ok(Event::InitApply(object))), state);
    }
    match next {
        Some(page) => next_page(lister, page).await,
        None => match resource_version {
            Some(resource_version) => (
                {
                    tracing::trace!(url = %lister.url, "listed");
                    lister.cell.watching();
                    Some(Ok(Event::InitDone))
                },
                State::Listed { resource_version },
            ),
            None => {
                lister.cell.failed(
                    Restart::ListFailed,
                    "the list carried no resourceVersion".into(),
                );
                (Some(Err(watcher::Error::NoResourceVersion)), State::Empty)
            }
        },
    }
}

/// Listed: starts a watch from `resource_version`.
async fn start_watch<K>(
    api: &Api<K>,
    lister: &Lister,
    config: &watcher::Config,
    resource_version: String,
) -> (Option<watcher::Result<Event<K>>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    match api.watch(&watch_params(config), &resource_version).await {
        Ok(stream) => {
            lister.cell.watching();
            (
                None,
                State::Watching {
                    resource_version,
                    stream: stream.boxed(),
                },
            )
        }
        Err(e) => {
            if let Some(r) = refusal(&e, "watch") {
                return refused(lister, r, e, watcher::Error::WatchStartFailed);
            }
            log_failure(&e, "watch start failed");
            // 410 as the answer's status (not as an ERROR event in
            // a 200 stream): the version is as gone as in an event,
            // and asking again from it can never work. kube-runtime's
            // watcher retries the same version here, forever.
            let gone = matches!(&e, kube::Error::Api(s) if s.code == 410);
            let state = if gone {
                lister.cell.failed(Restart::Gone, cause(&e));
                State::Empty
            } else {
                lister.cell.failed(Restart::StartFailed, cause(&e));
                State::Listed { resource_version }
            };
            (Some(Err(watcher::Error::WatchStartFailed(e))), state)
        }
    }
}

/// Watching: the stream's next event, failure, end or silence.
async fn watching<K>(
    lister: &Lister,
    config: &watcher::Config,
    resource_version: String,
    mut stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
) -> (Option<watcher::Result<Event<K>>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    match next_or_idle(&mut stream, config.timeout).await {
        Watched::Event(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
            lister.cell.watching();
            watched(lister, object, Event::Apply, stream)
        }
        Watched::Event(WatchEvent::Deleted(object)) => {
            lister.cell.watching();
            watched(lister, object, Event::Delete, stream)
        }
        Watched::Event(WatchEvent::Bookmark(mark)) => {
            lister.cell.watching();
            (
                None,
                State::Watching {
                    resource_version: mark.metadata.resource_version,
                    stream,
                },
            )
        }
        Watched::Event(WatchEvent::Error(status)) => {
            tracing::debug!(?status, "watch error event");
            let why = format!("{} ({})", status.message, status.code);
            // 410 Gone: the version is out of the server's window; relist.
            // Any other ERROR: the server ends the watch after it; resume.
            let state = if status.code == 410 {
                lister.cell.failed(Restart::Gone, why);
                State::Empty
            } else {
                lister.cell.failed(Restart::StreamFailed, why);
                State::Watching {
                    resource_version,
                    stream,
                }
            };
            (Some(Err(watcher::Error::WatchError(status))), state)
        }
        Watched::Failed(e) => {
            log_failure(&e, "watch failed");
            lister.cell.failed(Restart::StreamFailed, cause(&e));
            let state = State::Watching {
                resource_version,
                stream,
            };
            (Some(Err(watcher::Error::WatchFailed(e))), state)
        }
        Watched::Ended => {
            lister.cell.restarted(Restart::Ended);
            (None, State::Listed { resource_version })
        }
        Watched::Idle => {
            lister.cell.restarted(Restart::Idle);
            (None, State::Listed { resource_version })
        }
    }
}

/// Takes the page `page` brings: asks for the one after it, then decodes it.
async fn next_page<K>(lister: &Lister, page: Fetch) -> (Option<watcher::Result<Event<K>>>, State<K>)
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    let failed = |e: kube::Error| {
        if let Some(r) = refusal(&e, "list") {
            return refused(lister, r, e, watcher::Error::InitialListFailed);
        }
        log_failure(&e, "list failed");
        lister.cell.failed(Restart::ListFailed, cause(&e));
        (
            Some(Err(watcher::Error::InitialListFailed(e))),
            State::Empty,
        )
    };
    let text = match page.await {
        Ok(text) => text,
        Err(e) => return failed(e),
    };
    let head = match super::slim::head(&text) {
        Ok(head) => head,
        Err(e) => return failed(kube::Error::SerdeError(e)),
    };
    let resource_version = head.resource_version.filter(|v| !v.is_empty());
    let continue_token = head.continue_.filter(|c| !c.is_empty());
    if resource_version.is_none() && continue_token.is_none() {
        lister.cell.failed(
            Restart::ListFailed,
            "a list page carried no resourceVersion".into(),
        );
        return (Some(Err(watcher::Error::NoResourceVersion)), State::Empty);
    }
    let next = continue_token.map(|c| lister.fetch(Some(c)));
    if next.is_some() {
        // Let this worker send the request (the fetch and the connection's
        // task wait in its queue) before it is busy decoding.
        tokio::task::yield_now().await;
    }
    tracing::trace!(url = %lister.url, bytes = text.len(), more = next.is_some(), "list page arrived");
    let remaining = head.remaining_item_count;
    match super::slim::items_emptying::<K>(&text, lister.emptied) {
        Ok(items) => (
            {
                lister.cell.page_listed(items.len(), remaining);
                None
            },
            State::Listing {
                objects: items.into_iter(),
                next,
                resource_version,
            },
        ),
        Err(e) => failed(kube::Error::SerdeError(e)),
    }
}

/// An object from the watch: its event, the watch going on from its version.
fn watched<K: Resource>(
    lister: &Lister,
    object: K,
    event: fn(K) -> Event<K>,
    stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
) -> (Option<watcher::Result<Event<K>>>, State<K>) {
    match object.resource_version().filter(|v| !v.is_empty()) {
        Some(resource_version) => (
            Some(Ok(event(object))),
            State::Watching {
                resource_version,
                stream,
            },
        ),
        None => {
            lister.cell.failed(
                Restart::StreamFailed,
                "a watch event carried no resourceVersion".into(),
            );
            (Some(Err(watcher::Error::NoResourceVersion)), State::Empty)
        }
    }
}

/// What the watch stream said next.
enum Watched<K> {
    Event(WatchEvent<K>),
    Failed(kube::Error),
    /// The server ended the watch.
    Ended,
    /// Nothing for longer than the server's timeout and a margin: the
    /// connection's end was lost.
    Idle,
}

/// The innermost cause of `e`, which says what went wrong ("connection
/// refused"), with the outer message when the cause alone says little.
pub(crate) fn cause(e: &kube::Error) -> String {
    if let kube::Error::Api(status) = e {
        return format!("{} ({})", status.message, status.code);
    }
    let mut cur: &dyn std::error::Error = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    let inner = cur.to_string();
    if inner.is_empty() {
        e.to_string()
    } else {
        inner
    }
}

/// The watch's next event, or `None` when it ended or said nothing for the
/// server's timeout and a margin (its close was lost).
async fn next_or_idle<K>(
    stream: &mut BoxStream<'static, kube::Result<WatchEvent<K>>>,
    timeout: Option<u32>,
) -> Watched<K> {
    let said = |next: Option<kube::Result<WatchEvent<K>>>| match next {
        Some(Ok(event)) => Watched::Event(event),
        Some(Err(e)) => Watched::Failed(e),
        None => Watched::Ended,
    };
    if timeout == Some(0) {
        return said(stream.next().await);
    }
    let secs = u64::from(timeout.unwrap_or(DEFAULT_WATCH_TIMEOUT));
    match tokio::time::timeout(Duration::from_secs(secs) + IDLE_MARGIN, stream.next()).await {
        Ok(next) => said(next),
        Err(_) => {
            tracing::debug!("watch idle past its timeout; watching again");
            Watched::Idle
        }
    }
}

fn log_failure(e: &kube::Error, what: &str) {
    if matches!(e, kube::Error::Api(status) if status.is_forbidden()) {
        tracing::warn!(error = %e, "{what}");
    } else {
        tracing::debug!(error = %e, "{what}");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::cluster::watches::WatchBoard;

    /// A client whose answers come from `answer(uri)`: the status and body.
    /// The uris asked for are kept in order.
    fn client(
        answer: impl Fn(&str) -> (u16, String) + Send + Sync + 'static,
    ) -> (Client, Arc<Mutex<Vec<String>>>) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let uri = request.uri().to_string();
            log.lock().unwrap().push(uri.clone());
            let (status, body) = answer(&uri);
            let response = http::Response::builder()
                .status(status)
                .body(kube::client::Body::from(body.into_bytes()))
                .expect("a valid response");
            async move { Ok::<_, std::convert::Infallible>(response) }
        });
        (Client::new(service, "default"), asked)
    }

    fn map(name: &str, version: u32) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{version}"}}}}"#
        )
    }

    fn page(names: &[&str], continue_token: &str) -> String {
        let items: Vec<String> = names.iter().map(|n| map(n, 3)).collect();
        format!(
            r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"10","continue":"{continue_token}"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    fn event(kind: &str, object: &str) -> String {
        format!(r#"{{"type":"{kind}","object":{object}}}"#) + "\n"
    }

    /// Three pages (a1 a2 | a3 | a4), list version 10.
    fn three_pages(uri: &str) -> Option<String> {
        if uri.contains("watch=") {
            None
        } else if uri.contains("continue=p2") {
            Some(page(&["a3"], "p3"))
        } else if uri.contains("continue=p3") {
            Some(page(&["a4"], ""))
        } else {
            Some(page(&["a1", "a2"], "p2"))
        }
    }

    fn said(event: &watcher::Result<Event<ConfigMap>>) -> String {
        match event {
            Ok(Event::Init) => "init".into(),
            Ok(Event::InitApply(o)) => format!("init-apply {}", o.name_any()),
            Ok(Event::InitDone) => "init-done".into(),
            Ok(Event::Apply(o)) => format!("apply {}", o.name_any()),
            Ok(Event::Delete(o)) => format!("delete {}", o.name_any()),
            Err(watcher::Error::WatchError(s)) => format!("watch error {}", s.code),
            Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) => {
                format!("list failed {}", s.code)
            }
            Err(watcher::Error::WatchStartFailed(kube::Error::Api(s))) => {
                format!("watch start failed {}", s.code)
            }
            Err(e) => format!("error {e}"),
        }
    }

    async fn next_said(
        stream: &mut (impl Stream<Item = watcher::Result<Event<ConfigMap>>> + Unpin),
    ) -> String {
        let next = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the watcher says something within 10 s")
            .expect("the watcher never ends");
        said(&next)
    }

    #[tokio::test]
    async fn the_next_page_is_asked_for_before_the_page_in_hand_is_handed_out() {
        let (client, asked) = client(|uri| (200, three_pages(uri).unwrap_or_default()));
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let mut stream = Box::pin(watcher(api, watcher::Config::default().page_size(2)));
        assert_eq!(next_said(&mut stream).await, "init");
        assert_eq!(next_said(&mut stream).await, "init-apply a1");
        // Nothing more is taken from the stream: the second page must be on
        // its way all the same (kube-runtime's watcher would wait for a2 to
        // be taken, and then for a pass over the empty page buffer).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if asked
                .lock()
                .unwrap()
                .iter()
                .any(|u| u.contains("continue=p2"))
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "page 2 was never asked for: {:?}",
                asked.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // ...and only the second: the third waits for the second's token.
        assert!(
            !asked
                .lock()
                .unwrap()
                .iter()
                .any(|u| u.contains("continue=p3"))
        );
    }

    #[tokio::test]
    async fn lists_in_order_then_watches_resumes_and_relists_on_gone() {
        let watches = Arc::new(Mutex::new(0));
        let seen = watches.clone();
        let (client, asked) = client(move |uri| {
            if let Some(page) = three_pages(uri) {
                return (200, page);
            }
            let mut n = seen.lock().unwrap();
            *n += 1;
            let body = match *n {
                1 => {
                    event("ADDED", &map("b", 11))
                        + &event("DELETED", &map("a1", 12))
                        + r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"13"}}}"#
                        + "\n"
                }
                _ => {
                    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#
                        .to_owned()
                        + "\n"
                }
            };
            (200, body)
        });
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let config = watcher::Config::default().labels("app=x").page_size(2);
        let mut stream = Box::pin(watcher(api, config));
        let mut got = Vec::new();
        for _ in 0..12 {
            got.push(next_said(&mut stream).await);
        }
        assert_eq!(
            got,
            [
                "init",
                "init-apply a1",
                "init-apply a2",
                "init-apply a3",
                "init-apply a4",
                "init-done",
                "apply b",
                "delete a1",
                // The first watch ended after its bookmark; the second,
                // from the bookmark's version, says 410.
                "watch error 410",
                "init",
                "init-apply a1",
                "init-apply a2",
            ]
        );
        let asked = asked.lock().unwrap();
        let watches: Vec<&String> = asked.iter().filter(|u| u.contains("watch=true")).collect();
        assert_eq!(watches.len(), 2, "{asked:?}");
        assert!(watches[0].contains("resourceVersion=10"), "{}", watches[0]);
        assert!(watches[1].contains("resourceVersion=13"), "{}", watches[1]);
        for uri in asked.iter() {
            assert!(uri.contains("labelSelector=app%3Dx"), "{uri}");
        }
        let lists = asked.iter().filter(|u| !u.contains("watch=true"));
        for uri in lists {
            assert!(uri.contains("limit=2"), "{uri}");
        }
    }

    #[tokio::test]
    async fn a_watch_refused_with_410_lists_again_and_the_board_says_why() {
        let watches = Arc::new(Mutex::new(0));
        let seen = watches.clone();
        let (client, asked) = client(move |uri| {
            if let Some(page) = three_pages(uri) {
                return (200, page);
            }
            *seen.lock().unwrap() += 1;
            (
                410,
                r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 10 (40)","reason":"Expired","code":410}"#.into(),
            )
        });
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let board = super::super::WatchBoard::default();
        let mut stream = Box::pin(watcher_reporting(
            api,
            watcher::Config::default().page_size(2),
            board.cell("ConfigMap"),
        ));
        let mut got = Vec::new();
        for _ in 0..8 {
            got.push(next_said(&mut stream).await);
        }
        assert_eq!(
            got,
            [
                "init",
                "init-apply a1",
                "init-apply a2",
                "init-apply a3",
                "init-apply a4",
                "init-done",
                "watch start failed 410",
                // Listed again, not asked again from the gone version.
                "init",
            ]
        );
        let status = &board.statuses()["ConfigMap"];
        assert_eq!(status.phase, super::super::watches::Phase::Listing);
        assert_eq!(
            status.reason.as_deref(),
            Some("too old resource version: 10 (40) (410)")
        );
        assert_eq!(*watches.lock().unwrap(), 1, "{:?}", asked.lock().unwrap());
    }

    #[tokio::test]
    async fn a_failed_list_is_said_and_the_next_poll_lists_again() {
        let lists = Arc::new(Mutex::new(0));
        let seen = lists.clone();
        let (client, _) = client(move |uri| {
            let mut n = seen.lock().unwrap();
            *n += 1;
            match *n {
                1 => (
                    500,
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","code":500}"#.into(),
                ),
                2 => (200, r#"{"kind":"ConfigMapList","items":[{"#.into()),
                _ => (200, three_pages(uri).unwrap_or_default()),
            }
        });
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let mut stream = Box::pin(watcher(api, watcher::Config::default()));
        assert_eq!(next_said(&mut stream).await, "init");
        assert_eq!(next_said(&mut stream).await, "list failed 500");
        assert_eq!(next_said(&mut stream).await, "init");
        let garbled = next_said(&mut stream).await;
        assert!(
            garbled.starts_with("error failed to perform initial object list"),
            "{garbled}"
        );
        assert_eq!(next_said(&mut stream).await, "init");
        assert_eq!(next_said(&mut stream).await, "init-apply a1");
    }

    fn status(code: u16, reason: &str) -> String {
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"{reason}","reason":"{reason}","code":{code}}}"#
        )
    }

    /// A watch of config maps over `client`, reporting to a board of its
    /// own, taken up to its first refusal (`code`, said once).
    async fn refused_once(
        client: Client,
        code: u16,
    ) -> (
        WatchBoard,
        impl Stream<Item = watcher::Result<Event<ConfigMap>>> + Unpin + Send,
    ) {
        let board = WatchBoard::default();
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let mut stream = Box::pin(watcher_reporting(
            api,
            watcher::Config::default(),
            board.cell("ConfigMap"),
        ));
        assert_eq!(next_said(&mut stream).await, "init");
        assert_eq!(next_said(&mut stream).await, format!("list failed {code}"));
        (board, stream)
    }

    /// A list refused `refusals` times with `code`, then three pages; the
    /// lists started (first pages asked for) are counted.
    fn refusing(code: u16, refusals: usize) -> (Client, Arc<Mutex<usize>>) {
        let lists = Arc::new(Mutex::new(0));
        let seen = lists.clone();
        let (client, _) = client(move |uri| {
            if uri.contains("watch=") {
                return (200, String::new());
            }
            if uri.contains("continue=") {
                return (200, three_pages(uri).unwrap_or_default());
            }
            let mut n = seen.lock().unwrap();
            *n += 1;
            if *n <= refusals {
                (code, status(code, "Refused"))
            } else {
                (200, three_pages(uri).unwrap_or_default())
            }
        });
        (client, lists)
    }

    #[tokio::test(start_paused = true)]
    async fn a_forbidden_list_is_said_once_reported_as_refused_and_asked_again_only_after_a_minute()
    {
        let (client, lists) = refusing(403, 2);
        let (board, mut stream) = refused_once(client, 403).await;
        let summary = board.summary();
        assert_eq!(
            summary.refused,
            vec![("ConfigMap".to_owned(), Refusal::Forbidden("list"))]
        );
        // Refused is an answer: not a sync in progress.
        assert!(summary.answered);
        assert!(summary.worst.is_none());
        // The paused test clock: virtual time, the same on any machine.
        let started = tokio::time::Instant::now();
        // Each list starts with `init`: the second is refused again, and
        // that is not said again; the third lists.
        assert_eq!(next_said_within(&mut stream, 300).await, "init");
        assert!(started.elapsed() >= REFUSED_FORBIDDEN_RECHECK);
        assert_eq!(next_said_within(&mut stream, 300).await, "init");
        assert!(started.elapsed() >= REFUSED_FORBIDDEN_RECHECK * 2);
        assert_eq!(next_said(&mut stream).await, "init-apply a1");
        assert_eq!(*lists.lock().unwrap(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_recheck_asks_a_forbidden_watch_again_at_once() {
        let (client, lists) = refusing(403, 1);
        let (board, mut stream) = refused_once(client, 403).await;
        let next = tokio::spawn(async move {
            let said = next_said_within(&mut stream, 300).await;
            (said, stream)
        });
        // Let the watch reach its wait, then ask.
        tokio::time::sleep(Duration::from_secs(5)).await;
        // The paused test clock: virtual time, the same on any machine.
        let asked_at = tokio::time::Instant::now();
        board.recheck();
        let (said, mut stream) = next.await.unwrap();
        assert_eq!(said, "init");
        assert!(asked_at.elapsed() < REFUSED_FORBIDDEN_RECHECK);
        assert_eq!(next_said(&mut stream).await, "init-apply a1");
        assert_eq!(*lists.lock().unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resource_not_served_is_asked_again_within_seconds_and_followed_once_it_is() {
        let (client, _) = refusing(404, 3);
        let (board, mut stream) = refused_once(client, 404).await;
        assert_eq!(
            board.summary().refused,
            vec![("ConfigMap".to_owned(), Refusal::NotServed)]
        );
        // The paused test clock: virtual time, the same on any machine.
        let started = tokio::time::Instant::now();
        // Two more refusals, not said again, then the list.
        for _ in 0..3 {
            assert_eq!(next_said_within(&mut stream, 60).await, "init");
        }
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!(next_said(&mut stream).await, "init-apply a1");
        for _ in 0..3 {
            next_said(&mut stream).await;
        }
        assert_eq!(next_said(&mut stream).await, "init-done");
        assert!(board.all_watching());
    }

    async fn next_said_within(
        stream: &mut (impl Stream<Item = watcher::Result<Event<ConfigMap>>> + Unpin),
        secs: u64,
    ) -> String {
        let next = tokio::time::timeout(Duration::from_secs(secs), stream.next())
            .await
            .expect("the watcher says something in time")
            .expect("the watcher never ends");
        said(&next)
    }
}
