//! `pods/NAME/portforward`, as kube-apiserver and the kubelet serve it:
//! connections to a pod's ports, carried over the upgraded request.
//!
//! - **SPDY/3.1** (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version:
//!   portforward.k8s.io`): client-go's port-forwarder, kubectl before 1.31
//!   (and after, as its fallback), negotiated as `httpstream.Handshake` does.
//! - **SPDY tunnelled through WebSocket** (subprotocol
//!   `SPDY/3.1+portforward.k8s.io`, or `v2.portforward.k8s.io` of the
//!   first clients): kubectl ≥ 1.31, whose frames the apiserver's
//!   `TunnelingHandler` carries in binary messages.
//! - **WebSocket channels** (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`,
//!   or none): the kubelet's own protocol, which kube-rs and the Python
//!   client speak: for the `ports` of the query, channel `2i` carries port
//!   `i`'s data and `2i+1` its errors, each starting with the port number
//!   (two bytes, little-endian).
//!
//! Each connection dials the pod's address on the node (its loopback pod
//! IP, where the sandbox's containers listen, as a CRI runtime dials
//! `localhost` in the pod's network namespace); a port nothing listens on
//! is reported on the error stream in containerd's words ([`Target::dial`]).
//! What is dialled is the kubelet's business ([`Hooks::pod_port_forward`]).
//!
//! [`Hooks::pod_port_forward`]: super::api::Hooks::pod_port_forward

pub mod spdy;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ws::{CloseFrame, Message, WebSocket, close_code};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::api::{Api, ApiError, ApiResult, percent_decode};
use super::exec::PendingUpgrade;

/// The port-forward protocol of SPDY streams.
pub const PROTOCOL_V1: &str = "portforward.k8s.io";
/// WebSocket subprotocols that tunnel SPDY (kubectl ≥ 1.31, then 1.30's).
const TUNNELING: [&str; 2] = ["SPDY/3.1+portforward.k8s.io", "v2.portforward.k8s.io"];
/// The kubelet's WebSocket channel subprotocols (binary, base64).
const CHANNELS: [&str; 4] = [
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
];
/// How long a connection whose one direction ended waits for the other
/// (containerd's, after socat's).
const HALF_CLOSE_WAIT: Duration = Duration::from_secs(1);
/// How long a dial may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a pod's ports are, on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The pod's IP (its containers listen there).
    pub ip: String,
    /// The pod's sandbox id, as the runtime names it in its errors.
    pub sandbox_id: String,
}

impl Target {
    /// A connection to `port`, or the error a kubelet writes on the
    /// error stream (containerd dials `localhost`, IPv4 then IPv6, in the
    /// pod's network namespace; a sandbox pod has its IPv4 address only).
    pub async fn dial(&self, port: u16) -> Result<TcpStream, String> {
        let addr = format!("{}:{port}", self.ip);
        let err = match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(&addr)).await {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                "connection refused".to_string()
            }
            Ok(Err(e)) => e.to_string().to_lowercase(),
            Err(_) => "i/o timeout".to_string(),
        };
        let id = &self.sandbox_id;
        Err(format!(
            "error forwarding port {port} to pod {id}, uid : failed to connect to localhost:{port} \
             inside namespace \"{id}\", IPv4: dial tcp4 {addr}: connect: {err} \
             IPv6 dial tcp6: address localhost: no suitable address found "
        ))
    }
}

/// Copies both ways until one ends, then gives the other
/// [`HALF_CLOSE_WAIT`] (or stops both when the connection is `done`).
async fn copy_both_ways(
    up: impl Future<Output = ()>,
    down: impl Future<Output = ()>,
    done: &CancellationToken,
) {
    tokio::pin!(up, down);
    let mut up_done = false;
    let mut down_done = false;
    tokio::select! {
        () = &mut up => up_done = true,
        () = &mut down => down_done = true,
        () = done.cancelled() => return,
    }
    let wait = tokio::time::sleep(HALF_CLOSE_WAIT);
    tokio::pin!(wait);
    tokio::select! {
        () = &mut up, if !up_done => {}
        () = &mut down, if !down_done => {}
        () = &mut wait => {}
        () = done.cancelled() => {}
    }
}

/// The `ports` of a request (repeated or comma-separated), checked as the
/// kubelet's `NewV4Options` checks them.
fn query_ports(raw: &str) -> ApiResult<Vec<u16>> {
    let mut ports = Vec::new();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !matches!(percent_decode(k).as_str(), "ports" | "port") {
            continue;
        }
        let v = percent_decode(v);
        if v.is_empty() {
            return Err(ApiError::bad_request(
                "query parameter \"port\" cannot be empty",
            ));
        }
        for p in v.split(',') {
            let port: u16 = p.trim().parse().map_err(|e| {
                ApiError::bad_request(format!("unable to parse {v:?} as a port: {e}"))
            })?;
            if port < 1 {
                return Err(ApiError::bad_request(format!("port {v:?} must be > 0")));
            }
            ports.push(port);
        }
    }
    Ok(ports)
}

/// Serves an upgraded port-forward request the apiserver has validated
/// (pod, node, upgrade headers).
pub fn connect(
    api: &Api,
    pending: PendingUpgrade,
    namespace: &str,
    pod: &str,
) -> ApiResult<Response> {
    let target = Arc::new(api.hooks().pod_port_forward(namespace, pod)?);
    match pending.ws {
        Some(ws) => {
            let requested: Vec<String> = ws
                .requested_protocols()
                .filter_map(|p| p.to_str().ok().map(str::to_string))
                .collect();
            let chosen = requested
                .iter()
                .find(|p| TUNNELING.contains(&p.as_str()) || CHANNELS.contains(&p.as_str()))
                .cloned();
            if chosen.is_none() && !requested.is_empty() {
                let mut supported: Vec<&str> = TUNNELING.to_vec();
                supported.extend(CHANNELS);
                return Err(ApiError::bad_request(format!(
                    "requested protocol(s) are not supported: [{}]; supports [{}]",
                    requested.join(" "),
                    supported.join(" ")
                )));
            }
            let tunnel = chosen.as_deref().is_some_and(|p| TUNNELING.contains(&p));
            let ports = if tunnel {
                Vec::new()
            } else {
                let ports = query_ports(&pending.raw_query)?;
                if ports.is_empty() {
                    return Err(ApiError::bad_request(
                        "query parameter \"port\" is required",
                    ));
                }
                ports
            };
            let base64 = chosen.as_deref().is_some_and(|p| p.contains("base64"));
            let ws = match chosen {
                Some(p) => ws.protocols([p]),
                None => ws,
            };
            Ok(ws
                .on_failed_upgrade(|e| tracing::debug!(error = %e, "port-forward upgrade failed"))
                .on_upgrade(move |socket| async move {
                    if tunnel {
                        spdy::serve(tunnel_io(socket), target).await;
                    } else {
                        channels(socket, base64, ports, target).await;
                    }
                }))
        }
        None => spdy_upgrade(pending, target),
    }
}

/// `httpstream.Handshake` and the SPDY upgrade of the connection.
fn spdy_upgrade(pending: PendingUpgrade, target: Arc<Target>) -> ApiResult<Response> {
    if !pending.protocol.eq_ignore_ascii_case("SPDY/3.1") {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade: the agentdeck sandbox serves port-forward over SPDY/3.1 and WebSocket, not {}",
            pending.protocol
        )));
    }
    let offered: Vec<String> = pending
        .stream_protocols
        .iter()
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if offered.is_empty() {
        return Err(ApiError::bad_request(
            "unable to upgrade: X-Stream-Protocol-Version is required",
        ));
    }
    if !offered.iter().any(|p| p == PROTOCOL_V1) {
        return Err(ApiError::new_status(
            403,
            "Forbidden",
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{PROTOCOL_V1}]",
                offered.join(" ")
            ),
        ));
    }
    let Some(on_upgrade) = pending.on_upgrade else {
        return Err(ApiError::bad_request(
            "unable to upgrade: SPDY needs an HTTP/1.1 connection",
        ));
    };
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => spdy::serve(hyper_util::rt::TokioIo::new(upgraded), target).await,
            Err(e) => tracing::debug!(error = %e, "port-forward upgrade failed"),
        }
    });
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    h.insert(
        "X-Stream-Protocol-Version",
        HeaderValue::from_static(PROTOCOL_V1),
    );
    Ok(r)
}

/// A WebSocket whose binary messages carry a byte stream, as client-go's
/// `TunnelingConnection` reads and writes it (a normal close is its end).
fn tunnel_io(socket: WebSocket) -> tokio::io::DuplexStream {
    let (near, far) = tokio::io::duplex(256 * 1024);
    let (mut from_near, mut to_near) = tokio::io::split(near);
    let (mut sink, mut stream) = socket.split();
    tokio::spawn(async move {
        while let Some(Ok(msg)) = stream.next().await {
            match msg {
                Message::Binary(b) if to_near.write_all(&b).await.is_err() => break,
                Message::Close(_) | Message::Text(_) => break,
                _ => {}
            }
        }
        let _ = to_near.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_near.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink
                        .send(Message::Binary(Bytes::copy_from_slice(&buf[..n])))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            })))
            .await;
    });
    far
}

/// A message on `channel` (binary: the channel byte first; base64: its
/// digit, then the data encoded).
fn channel_message(base64: bool, channel: u8, data: &[u8]) -> Message {
    if base64 {
        let text = format!(
            "{}{}",
            char::from(b'0' + channel),
            base64::engine::general_purpose::STANDARD.encode(data)
        );
        Message::Text(text.into())
    } else {
        let mut v = Vec::with_capacity(data.len() + 1);
        v.push(channel);
        v.extend_from_slice(data);
        Message::Binary(Bytes::from(v))
    }
}

/// The kubelet's WebSocket port-forward (`handleWebSocketStreams`): one
/// connection per port of the query, closed with the socket once all are
/// done.
async fn channels(socket: WebSocket, base64: bool, ports: Vec<u16>, target: Arc<Target>) {
    let (sink, mut incoming) = socket.split();
    let (out_tx, out_rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(super::exec::write_out(sink, out_rx));
    let done = CancellationToken::new();
    let mut inputs = Vec::new();
    let mut forwards = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let data_ch = u8::try_from(2 * i).unwrap_or(u8::MAX - 1);
        for ch in [data_ch, data_ch + 1] {
            let _ = out_tx
                .send(channel_message(base64, ch, &port.to_le_bytes()))
                .await;
        }
        let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
        inputs.push(Some(tx));
        forwards.push(tokio::spawn(forward_channel(
            *port,
            data_ch,
            base64,
            rx,
            target.clone(),
            out_tx.clone(),
            done.clone(),
        )));
    }
    drop(out_tx);
    let all = futures::future::join_all(forwards);
    tokio::pin!(all);
    loop {
        tokio::select! {
            _ = &mut all => break,
            msg = incoming.next() => match msg {
                Some(Ok(Message::Binary(b))) => route(&mut inputs, b.first().copied(), &b[1.min(b.len())..]),
                Some(Ok(Message::Text(t))) => {
                    let t = t.as_bytes();
                    let ch = t.first().and_then(|c| c.checked_sub(b'0'));
                    if let Ok(data) = base64::engine::general_purpose::STANDARD.decode(&t[1.min(t.len())..]) {
                        route(&mut inputs, ch, &data);
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    // Nothing more comes from the client: each port's
                    // connection gets its FIN, then the half-close wait.
                    inputs.clear();
                    let _ = tokio::time::timeout(HALF_CLOSE_WAIT * 2, &mut all).await;
                    done.cancel();
                    break;
                }
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
}

fn route(inputs: &mut [Option<mpsc::UnboundedSender<Vec<u8>>>], channel: Option<u8>, data: &[u8]) {
    let Some(ch) = channel else { return };
    // Only data channels are read; what comes on an error channel is dropped.
    if ch % 2 == 0
        && let Some(Some(tx)) = inputs.get(usize::from(ch / 2))
        && !data.is_empty()
    {
        let _ = tx.send(data.to_vec());
    }
}

async fn forward_channel(
    port: u16,
    data_ch: u8,
    base64: bool,
    mut input: mpsc::UnboundedReceiver<Vec<u8>>,
    target: Arc<Target>,
    out: mpsc::Sender<Message>,
    done: CancellationToken,
) {
    let conn = match target.dial(port).await {
        Ok(c) => c,
        Err(message) => {
            let _ = out
                .send(channel_message(base64, data_ch + 1, message.as_bytes()))
                .await;
            return;
        }
    };
    let (mut from_pod, mut to_pod) = conn.into_split();
    let up = async {
        while let Some(bytes) = input.recv().await {
            if to_pod.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to_pod.shutdown().await;
    };
    let down = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match from_pod.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if out
                        .send(channel_message(base64, data_ch, &buf[..n]))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    };
    copy_both_ways(up, down, &done).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_read_from_the_query_as_the_kubelet_reads_them() {
        assert_eq!(query_ports("ports=80%2C1234").expect("ports"), [80, 1234]);
        assert_eq!(query_ports("ports=80&ports=81").expect("ports"), [80, 81]);
        assert!(query_ports("").expect("none").is_empty());
        let e = query_ports("ports=0").expect_err("zero");
        assert!(e.message.contains("must be > 0"), "{}", e.message);
        let e = query_ports("ports=x").expect_err("not a number");
        assert!(
            e.message.starts_with("unable to parse \"x\" as a port"),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn a_port_nothing_listens_on_is_reported_in_containerds_words() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let t = Target {
            ip: "127.0.0.1".into(),
            sandbox_id: "abc".into(),
        };
        let e = t.dial(port).await.expect_err("nothing listens");
        assert_eq!(
            e,
            format!(
                "error forwarding port {port} to pod abc, uid : failed to connect to localhost:{port} \
                 inside namespace \"abc\", IPv4: dial tcp4 127.0.0.1:{port}: connect: connection refused \
                 IPv6 dial tcp6: address localhost: no suitable address found "
            )
        );
    }
}
