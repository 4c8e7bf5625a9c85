//! The sandbox's PKI and its TLS listener: as a real kube-apiserver, it
//! serves HTTPS with a certificate signed by a cluster CA of its own,
//! generated at start. The CA goes into the kubeconfig
//! (`certificate-authority-data`), the `kube-root-ca.crt` ConfigMaps and
//! each pod's service-account volume (`ca.crt`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::future::Future;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::{CancellationToken, DropGuard};

/// The ClusterIP of `default/kubernetes`, the first address of the
/// default service range (`10.96.0.0/12`), as kube-apiserver puts it in its
/// serving certificate.
pub const SERVICE_IP: &str = "10.96.0.1";

/// Names and addresses the serving certificate is valid for: loopback (where
/// the sandbox listens and pods reach it) and the in-cluster names of the
/// `kubernetes` Service.
pub const SERVING_NAMES: [&str; 8] = [
    "127.0.0.1",
    "::1",
    "localhost",
    SERVICE_IP,
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the PKI could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Key or certificate generation failed.
    #[error("cannot generate the sandbox's certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// The serving configuration was refused.
    #[error("cannot configure TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The cluster CA and the API server's serving configuration.
pub struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
    /// The admin's client certificate and key (PEM), for kubeconfigs.
    admin_cert_pem: String,
    admin_key_pem: String,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

impl Pki {
    /// A fresh CA (ECDSA P-256) and a serving certificate it signs for
    /// [`SERVING_NAMES`].
    pub fn generate() -> Result<Pki, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name = name("agentdeck-sandbox-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.not_before = rcgen::date_time_ymd(2020, 1, 1);
        ca.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let key = KeyPair::generate()?;
        let mut serving = CertificateParams::default();
        serving.distinguished_name = name("kube-apiserver");
        serving.subject_alt_names = SERVING_NAMES
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName((*n).try_into()?)),
            })
            .collect::<Result<_, rcgen::Error>>()?;
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        // Python's ssl (X509_STRICT) wants the issuer's key identified.
        serving.use_authority_key_identifier_extension = true;
        serving.not_before = rcgen::date_time_ymd(2020, 1, 1);
        serving.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let cert = serving.signed_by(&key, &issuer)?;

        // The admin's client certificate, as kubeadm's admin.conf has one:
        // user = CN, groups = O.
        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::default();
        admin.distinguished_name = name(super::auth::ADMIN_USER);
        admin
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        admin.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        admin.use_authority_key_identifier_extension = true;
        admin.not_before = rcgen::date_time_ymd(2020, 1, 1);
        admin.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let admin_cert = admin.signed_by(&admin_key, &issuer)?;

        let chain = vec![cert.der().clone(), ca_cert.der().clone()];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // Client certificates are asked for, not required (kube-apiserver's
        // `--client-ca-file`): one the CA signed authenticates its CN.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, private)?;
        // HTTP/2 for clients that offer it, as an apiserver does (kubectl
        // and client-go do; upgrades for exec and port-forward ask for
        // HTTP/1.1), HTTP/1.1 for the rest.
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Pki {
            ca_pem: ca_cert.pem(),
            server: Arc::new(server),
            admin_cert_pem: admin_cert.pem(),
            admin_key_pem: admin_key.serialize_pem(),
        })
    }

    /// The admin's client certificate (PEM): CN the admin user, O
    /// `system:masters`.
    pub fn admin_cert_pem(&self) -> &str {
        &self.admin_cert_pem
    }

    /// The admin certificate's private key (PEM, PKCS#8).
    pub fn admin_key_pem(&self) -> &str {
        &self.admin_key_pem
    }

    /// The CA certificate (PEM), what clients trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A rustls client configuration trusting only this CA (ring provider).
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for der in ca_ders(&self.ca_pem) {
            roots.add(CertificateDer::from(der))?;
        }
        Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
    }

    /// Accepts TLS connections on `listener`; each is cut when `cut` is
    /// cancelled (see [`Cut`]).
    pub fn listener(
        &self,
        listener: TcpListener,
        cut: CancellationToken,
    ) -> std::io::Result<TlsListener> {
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(self.server.clone());
        let (tx, rx) = mpsc::channel(64);
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(listener, acceptor, tx, stop.clone()));
        Ok(TlsListener {
            addr,
            rx,
            cut,
            _stop: stop.drop_guard(),
        })
    }
}

fn name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

/// The DER certificates of a PEM bundle.
pub fn ca_ders(pem: &str) -> Vec<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .map(|c| c.to_vec())
        .collect()
}

/// TLS connections, handshaken off the accept path so a slow client never
/// holds up the next one. Dropping it closes the port.
pub struct TlsListener {
    addr: SocketAddr,
    rx: mpsc::Receiver<(TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    /// Cuts the connections it accepted.
    cut: CancellationToken,
    _stop: DropGuard,
}

/// A connection that ends, streams in flight included, when its listener's
/// `cut` token is cancelled: a real apiserver's connections end with its
/// process, so a restarted sandbox must leave no watch or log follow
/// running on an old one (a graceful shutdown only waits for them).
pub struct Cut<S> {
    io: S,
    cut: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl<S> Cut<S> {
    fn check(&mut self, cx: &mut std::task::Context<'_>) -> std::io::Result<()> {
        match self.cut.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => Err(std::io::ErrorKind::ConnectionAborted.into()),
            std::task::Poll::Pending => Ok(()),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Cut<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        std::pin::Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Cut<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        std::pin::Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        std::pin::Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        std::pin::Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            () = tx.closed() => return,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(_) => {
                // Out of descriptors and the like: let the condition pass.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // As a real apiserver (Go sets TCP_NODELAY on every connection):
        // without it small writes such as watch events wait for a delayed ACK.
        let _ = tcp.set_nodelay(true);
        let (acceptor, tx, stop) = (acceptor.clone(), tx.clone(), stop.clone());
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
            let stream = tokio::select! {
                () = stop.cancelled() => return,
                r = handshake => r,
            };
            if let Ok(Ok(stream)) = stream {
                let _ = tx.send((stream, peer)).await;
            }
        });
    }
}

/// Who the connection's client certificate names (it was verified against
/// the CA in the handshake): user = CN, groups = each O, as kube-apiserver's
/// x509 authenticator. None without a certificate.
#[derive(Debug, Clone, Default)]
pub struct PeerIdentity(pub Option<(String, Vec<String>)>);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>>
    for PeerIdentity
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        let (_, conn) = stream.io().io.get_ref();
        let Some(der) = conn.peer_certificates().and_then(|c| c.first()) else {
            return PeerIdentity(None);
        };
        PeerIdentity(subject(der))
    }
}

/// CN and O values of a certificate's subject.
fn subject(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let name = cert.subject();
    let cn = name.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = name
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some((cn, groups))
}

impl axum::serve::Listener for TlsListener {
    type Io = Cut<TlsStream<tokio::net::TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some((io, peer)) => (
                Cut {
                    io,
                    cut: Box::pin(self.cut.clone().cancelled_owned()),
                },
                peer,
            ),
            // The accept loop only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_certificate_names_the_admin_in_system_masters() {
        let pki = Pki::generate().expect("pki");
        let der = ca_ders(pki.admin_cert_pem()).remove(0);
        assert_eq!(
            subject(&der),
            Some((
                super::super::auth::ADMIN_USER.to_owned(),
                vec!["system:masters".to_owned()]
            ))
        );
    }

    #[test]
    fn the_ca_bundle_parses_back_to_one_certificate() {
        let pki = Pki::generate().expect("pki");
        assert!(pki.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(ca_ders(pki.ca_pem()).len(), 1);
        assert!(pki.client_config().is_ok());
    }

    #[test]
    fn two_sandboxes_have_different_cas() {
        let a = Pki::generate().expect("pki");
        let b = Pki::generate().expect("pki");
        assert_ne!(a.ca_pem(), b.ca_pem());
    }
}
