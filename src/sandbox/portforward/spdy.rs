//! SPDY/3.1 as Kubernetes speaks it for port-forward (moby/spdystream,
//! which client-go, kubectl and the kubelet use): framing, header blocks
//! compressed with zlib and the protocol's dictionary in one stream per
//! direction, and the server side of a port-forward connection.
//!
//! A client opens two streams per forwarded connection, `streamType: error`
//! and `streamType: data`, both with `port` and `requestID` headers; the
//! server replies to each (SYN_REPLY), pairs them by request, dials the port
//! and copies between the data stream and the connection; what goes wrong
//! is written on the error stream; both streams are closed (an empty DATA
//! frame with FIN) when the copy is over. PINGs are echoed. spdystream
//! keeps no flow-control windows (TCP and, tunnelled, WebSocket carry the
//! back-pressure), so WINDOW_UPDATE and SETTINGS are read and ignored.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Target;

/// Header names of the SPDY/3 dictionary, each written length-prefixed.
const DICTIONARY_NAMES: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// The rest of the SPDY/3 dictionary: status codes and common values.
const DICTIONARY_TAIL: &str = "100101201202205206300302303304305306307402405406407408409410\
411412413414415416417502504505203 Non-Authoritative Information204 No Content301 Moved \
Permanently400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server \
Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov \
Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,\
image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivate\
max-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

/// The zlib dictionary of SPDY/3 header blocks (draft 3, section 2.6.10.1).
static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut d = Vec::with_capacity(1423);
    for name in DICTIONARY_NAMES {
        d.extend_from_slice(&u32::try_from(name.len()).unwrap_or(0).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
    }
    d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    d
});

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const FLAG_FIN: u8 = 0x01;
/// RST_STREAM status: the stream was refused (bad headers).
const PROTOCOL_ERROR: u32 = 1;
/// Frames larger than this end the connection (spdystream's limit is the
/// 24-bit length; nothing a port-forward client sends comes close).
const MAX_FRAME: usize = 1 << 24;
/// DATA frames written carry at most this much.
const CHUNK: usize = 32 * 1024;

/// A frame read from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A new stream and its headers (names lower-cased, as on the wire).
    SynStream {
        id: u32,
        headers: Vec<(String, String)>,
        fin: bool,
    },
    /// The peer reset a stream.
    RstStream { id: u32 },
    /// A ping to echo.
    Ping { id: u32 },
    /// The peer is going away.
    GoAway,
    /// Stream data; `fin` ends the peer's side of it.
    Data { id: u32, fin: bool, data: Vec<u8> },
    /// Anything else (SETTINGS, WINDOW_UPDATE, HEADERS, SYN_REPLY …).
    Other,
}

/// Why a connection cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    /// The transport failed.
    #[error("spdy transport: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent something that is not SPDY/3.
    #[error("spdy protocol: {0}")]
    Protocol(String),
}

/// Reads frames, inflating header blocks with the connection's one zlib
/// stream.
pub struct FrameReader<R> {
    inner: R,
    inflate: Decompress,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader at the start of a connection.
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            inflate: Decompress::new(true),
        }
    }

    /// The next frame; None at a clean end of the connection.
    pub async fn next(&mut self) -> Result<Option<Frame>, SpdyError> {
        let mut head = [0u8; 8];
        match self.inner.read_exact(&mut head[..1]).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        self.inner.read_exact(&mut head[1..]).await?;
        let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let flags = head[4];
        let length = usize::from(head[5]) << 16 | usize::from(head[6]) << 8 | usize::from(head[7]);
        if length > MAX_FRAME {
            return Err(SpdyError::Protocol(format!("frame of {length} bytes")));
        }
        let mut payload = vec![0u8; length];
        self.inner.read_exact(&mut payload).await?;
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                id: first & 0x7fff_ffff,
                fin: flags & FLAG_FIN != 0,
                data: payload,
            }));
        }
        let kind = (first & 0xffff) as u16;
        let word = |at: usize| -> Result<u32, SpdyError> {
            payload
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
                .ok_or_else(|| SpdyError::Protocol(format!("control frame {kind} too short")))
        };
        Ok(Some(match kind {
            TYPE_SYN_STREAM => {
                let id = word(0)?;
                let block = payload.get(10..).unwrap_or_default();
                let headers = parse_header_block(&self.inflate_block(block)?)?;
                Frame::SynStream {
                    id,
                    headers,
                    fin: flags & FLAG_FIN != 0,
                }
            }
            TYPE_SYN_REPLY | TYPE_HEADERS => {
                // Inflated all the same: the zlib stream must stay in step.
                self.inflate_block(payload.get(4..).unwrap_or_default())?;
                Frame::Other
            }
            TYPE_RST_STREAM => Frame::RstStream { id: word(0)? },
            TYPE_PING => Frame::Ping {
                id: u32::from_be_bytes(
                    payload
                        .get(..4)
                        .and_then(|b| b.try_into().ok())
                        .ok_or_else(|| SpdyError::Protocol("short PING".into()))?,
                ),
            },
            TYPE_GOAWAY => Frame::GoAway,
            _ => Frame::Other,
        }))
    }

    /// One header block, inflated (the dictionary given when the stream
    /// asks for it, at its start).
    fn inflate_block(&mut self, mut input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        while !input.is_empty() {
            if out.capacity() - out.len() < 1024 {
                out.reserve(out.capacity().max(1024));
            }
            let before = self.inflate.total_in();
            let result = self
                .inflate
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let used = usize::try_from(self.inflate.total_in() - before).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            match result {
                Ok(Status::StreamEnd) => break,
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&DICTIONARY)
                        .map_err(|e| SpdyError::Protocol(format!("header dictionary: {e}")))?;
                }
                Err(e) => return Err(SpdyError::Protocol(format!("header block: {e}"))),
            }
        }
        Ok(out)
    }
}

fn parse_header_block(block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let short = || SpdyError::Protocol("truncated header block".into());
    let mut at = 0usize;
    let word = |at: &mut usize| -> Result<usize, SpdyError> {
        let b = block.get(*at..*at + 4).ok_or_else(short)?;
        *at += 4;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let count = word(&mut at)?;
    let mut headers = Vec::new();
    for _ in 0..count {
        let n = word(&mut at)?;
        let name = block.get(at..at + n).ok_or_else(short)?;
        at += n;
        let n = word(&mut at)?;
        let value = block.get(at..at + n).ok_or_else(short)?;
        at += n;
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        for v in String::from_utf8_lossy(value).split('\0') {
            headers.push((name.clone(), v.to_string()));
        }
    }
    Ok(headers)
}

/// Writes frames, deflating header blocks with the connection's one zlib
/// stream (the dictionary set before its first byte, as spdystream does).
pub struct FrameWriter {
    deflate: Compress,
}

impl Default for FrameWriter {
    fn default() -> Self {
        let mut deflate = Compress::new(Compression::best(), true);
        // Only fails on a stream already started.
        let _ = deflate.set_dictionary(&DICTIONARY);
        FrameWriter { deflate }
    }
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(&(0x8003_0000u32 | u32::from(kind)).to_be_bytes());
    let len = u32::try_from(payload.len()).unwrap_or(0) & 0x00ff_ffff;
    f.extend_from_slice(&(u32::from(flags) << 24 | len).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

impl FrameWriter {
    fn header_block(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut plain = Vec::new();
        plain.extend_from_slice(&u32::try_from(headers.len()).unwrap_or(0).to_be_bytes());
        for (k, v) in headers {
            for s in [k.to_ascii_lowercase().as_bytes(), v.as_bytes()] {
                plain.extend_from_slice(&u32::try_from(s.len()).unwrap_or(0).to_be_bytes());
                plain.extend_from_slice(s);
            }
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut input = &plain[..];
        loop {
            if out.capacity() - out.len() < 256 {
                out.reserve(1024);
            }
            let before = self.deflate.total_in();
            let _ = self
                .deflate
                .compress_vec(input, &mut out, FlushCompress::Sync);
            let used = usize::try_from(self.deflate.total_in() - before).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            // A sync flush is complete once output stopped short of the space.
            if input.is_empty() && out.len() < out.capacity() {
                return out;
            }
        }
    }

    /// SYN_REPLY accepting stream `id`, with no headers (as the kubelet's
    /// stream handler sends it).
    pub fn syn_reply(&mut self, id: u32) -> Vec<u8> {
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend(self.header_block(&[]));
        control(TYPE_SYN_REPLY, 0, &payload)
    }

    /// SYN_STREAM opening stream `id` (what a client sends; for tests).
    pub fn syn_stream(&mut self, id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        payload.extend(self.header_block(headers));
        control(TYPE_SYN_STREAM, 0, &payload)
    }
}

/// RST_STREAM of stream `id`.
pub fn rst_stream(id: u32, status: u32) -> Vec<u8> {
    let mut payload = id.to_be_bytes().to_vec();
    payload.extend_from_slice(&status.to_be_bytes());
    control(TYPE_RST_STREAM, 0, &payload)
}

/// PING with `id` (the reply to a client's is the same frame).
pub fn ping(id: u32) -> Vec<u8> {
    control(TYPE_PING, 0, &id.to_be_bytes())
}

/// GOAWAY: the server ends the connection.
pub fn goaway(last: u32) -> Vec<u8> {
    let mut payload = last.to_be_bytes().to_vec();
    payload.extend_from_slice(&0u32.to_be_bytes());
    control(TYPE_GOAWAY, 0, &payload)
}

/// DATA on stream `id` (`fin`: the last of it).
pub fn data(id: u32, fin: bool, bytes: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + bytes.len());
    f.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    let len = u32::try_from(bytes.len()).unwrap_or(0) & 0x00ff_ffff;
    f.extend_from_slice(&(u32::from(u8::from(fin)) << 24 | len).to_be_bytes());
    f.extend_from_slice(bytes);
    f
}

/// What the connection's writer sends.
enum Out {
    Reply(u32),
    Raw(Vec<u8>),
}

/// One forwarded connection's two streams, as they arrive.
#[derive(Default)]
struct Pair {
    port: u16,
    error: Option<u32>,
    data: Option<(u32, mpsc::UnboundedReceiver<Vec<u8>>)>,
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The kubelet's checks of a new stream's headers (`httpStreamReceived`).
fn check_stream(headers: &[(String, String)]) -> Result<(u16, bool), String> {
    let port = header(headers, "port").filter(|p| !p.is_empty());
    let Some(port) = port else {
        return Err("\"port\" header is required".into());
    };
    let port: u16 = port
        .parse()
        .map_err(|e| format!("unable to parse {port:?} as a port: {e}"))?;
    if port < 1 {
        return Err(format!("port \"{port}\" must be > 0"));
    }
    match header(headers, "streamtype") {
        Some("data") => Ok((port, true)),
        Some("error") => Ok((port, false)),
        Some(other) => Err(format!("invalid stream type {other:?}")),
        None => Err("\"streamType\" header is required".into()),
    }
}

/// Serves one upgraded port-forward connection until the client goes.
pub async fn serve<IO>(io: IO, target: Arc<Target>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (read, mut write) = tokio::io::split(io);
    let (out_tx, mut out_rx) = mpsc::channel::<Out>(64);
    let writer = tokio::spawn(async move {
        let mut frames = FrameWriter::default();
        while let Some(out) = out_rx.recv().await {
            let bytes = match out {
                Out::Reply(id) => frames.syn_reply(id),
                Out::Raw(b) => b,
            };
            if write.write_all(&bytes).await.is_err() || write.flush().await.is_err() {
                return;
            }
        }
        let _ = write.shutdown().await;
    });
    let done = CancellationToken::new();
    let mut reader = FrameReader::new(read);
    let mut inputs: HashMap<u32, mpsc::UnboundedSender<Vec<u8>>> = HashMap::new();
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut last_stream = 0;
    loop {
        let frame = match reader.next().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(error = %e, "port-forward connection ended");
                break;
            }
        };
        match frame {
            Frame::SynStream { id, headers, fin } => {
                last_stream = id;
                let (port, is_data) = match check_stream(&headers) {
                    Ok(v) => v,
                    Err(why) => {
                        tracing::debug!(%why, "port-forward stream refused");
                        let _ = out_tx.send(Out::Raw(rst_stream(id, PROTOCOL_ERROR))).await;
                        continue;
                    }
                };
                let _ = out_tx.send(Out::Reply(id)).await;
                // Older clients sent no request id: their streams come as
                // consecutive pairs, error first (the kubelet's fallback).
                let request = header(&headers, "requestid")
                    .map(str::to_string)
                    .unwrap_or_else(|| {
                        if is_data {
                            id.saturating_sub(2).to_string()
                        } else {
                            id.to_string()
                        }
                    });
                let pair = pairs.entry(request.clone()).or_default();
                pair.port = port;
                if is_data {
                    let (tx, rx) = mpsc::unbounded_channel();
                    if !fin {
                        inputs.insert(id, tx);
                    }
                    pair.data = Some((id, rx));
                } else {
                    pair.error = Some(id);
                }
                if pair.error.is_some()
                    && pair.data.is_some()
                    && let Some(pair) = pairs.remove(&request)
                {
                    tokio::spawn(forward(pair, target.clone(), out_tx.clone(), done.clone()));
                }
            }
            Frame::Data { id, fin, data } => {
                if let Some(tx) = inputs.get(&id)
                    && !data.is_empty()
                {
                    let _ = tx.send(data);
                }
                if fin {
                    inputs.remove(&id);
                }
            }
            Frame::RstStream { id } => {
                inputs.remove(&id);
            }
            Frame::Ping { id } => {
                let _ = out_tx.send(Out::Raw(ping(id))).await;
            }
            Frame::GoAway => break,
            Frame::Other => {}
        }
    }
    done.cancel();
    drop(inputs);
    let _ = out_tx.send(Out::Raw(goaway(last_stream))).await;
    drop(out_tx);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
}

/// One forwarded connection: dial, copy both ways, report, close both
/// streams (the error stream first, as the kubelet's deferred closes do).
async fn forward(pair: Pair, target: Arc<Target>, out: mpsc::Sender<Out>, done: CancellationToken) {
    let (Some(error_id), Some((data_id, mut input))) = (pair.error, pair.data) else {
        return;
    };
    match target.dial(pair.port).await {
        Err(message) => {
            let _ = out
                .send(Out::Raw(data(error_id, false, message.as_bytes())))
                .await;
        }
        Ok(conn) => {
            let (mut from_pod, mut to_pod) = conn.into_split();
            let up = async {
                while let Some(bytes) = input.recv().await {
                    if to_pod.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                // The client sends no more: a FIN to the pod.
                let _ = to_pod.shutdown().await;
            };
            let down = async {
                let mut buf = vec![0u8; CHUNK];
                loop {
                    match from_pod.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if out
                                .send(Out::Raw(data(data_id, false, &buf[..n])))
                                .await
                                .is_err()
                            {
                                break;
                            }
                        }
                    }
                }
            };
            super::copy_both_ways(up, down, &done).await;
        }
    }
    let _ = out.send(Out::Raw(data(error_id, true, &[]))).await;
    let _ = out.send(Out::Raw(data(data_id, true, &[]))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &x in data {
            a = (a + u32::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        b << 16 | a
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        // The dictionary id every SPDY/3 header stream names.
        assert_eq!(DICTIONARY.len(), 1423);
        assert_eq!(adler32(&DICTIONARY), 0xe3c6_a7c2);
    }

    #[tokio::test]
    async fn header_blocks_written_read_back_across_frames() {
        let mut w = FrameWriter::default();
        let mut wire = w.syn_stream(
            1,
            &[
                ("streamType", "error"),
                ("port", "8080"),
                ("requestID", "0"),
            ],
        );
        wire.extend(w.syn_stream(
            3,
            &[("streamType", "data"), ("port", "8080"), ("requestID", "0")],
        ));
        wire.extend(data(3, true, b"hi"));
        wire.extend(ping(1));
        let mut r = FrameReader::new(&wire[..]);
        let strings = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            r.next().await.expect("frame"),
            Some(Frame::SynStream {
                id: 1,
                headers: strings(&[
                    ("streamtype", "error"),
                    ("port", "8080"),
                    ("requestid", "0")
                ]),
                fin: false
            })
        );
        assert!(matches!(
            r.next().await.expect("frame"),
            Some(Frame::SynStream { id: 3, .. })
        ));
        assert_eq!(
            r.next().await.expect("frame"),
            Some(Frame::Data {
                id: 3,
                fin: true,
                data: b"hi".to_vec()
            })
        );
        assert_eq!(r.next().await.expect("frame"), Some(Frame::Ping { id: 1 }));
        assert_eq!(r.next().await.expect("end"), None);
    }

    #[test]
    fn streams_without_a_port_or_type_are_refused_as_the_kubelet_refuses_them() {
        let h = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            check_stream(&h(&[("streamtype", "data")])),
            Err("\"port\" header is required".into())
        );
        assert_eq!(
            check_stream(&h(&[("port", "0"), ("streamtype", "data")])),
            Err("port \"0\" must be > 0".into())
        );
        assert_eq!(
            check_stream(&h(&[("port", "80"), ("streamtype", "x")])),
            Err("invalid stream type \"x\"".into())
        );
        assert_eq!(
            check_stream(&h(&[("port", "80"), ("streamtype", "error")])),
            Ok((80, false))
        );
    }
}
