//! TLS with client certificates on `tcp:` endpoints, and who a caller is.
//!
//! A server ([`ServerTls`]) presents its certificate and, with a client CA, asks every caller
//! for a certificate signed by that CA: a caller without one, or with one the CA did not
//! sign, is refused in the handshake. The names in a verified caller's certificate (its
//! subject's common names, its DNS and URI subject alternative names: an [`Identity`]) are
//! what an export's allow list ([`Principal`]s) is checked against, where the server decides
//! which export a call reaches (`server.rs`).
//!
//! A client ([`ClientTls`]) trusts the CA it is given (not the system's roots: kernels of one
//! deployment share a private CA), checks the server's certificate against the server name
//! (by default the endpoint's host) and, when it has one, presents its own certificate.
//!
//! rustls with the ring provider, TLS 1.3 and 1.2. The server sends no TLS 1.3 session
//! tickets: a kept connection must have nothing unread while it waits (`pool.rs` takes
//! unread bytes on an idle connection as a sign that the peer closed it), and sessions keep
//! their connection, so resumption would gain little.

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// A certificate, key or CA file that does not load, or settings rustls refuses; the reason
/// names the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The contents of a PEM file and the words naming it in errors (`cert \`server.pem\``).
struct Pem {
    bytes: Vec<u8>,
    name: String,
}

impl Pem {
    fn read(path: &Path, key: &str) -> Result<Pem, TlsError> {
        let name = format!("{key} `{}`", path.display());
        let bytes = std::fs::read(path).map_err(|e| TlsError(format!("{name}: {e}")))?;
        Ok(Pem { bytes, name })
    }

    fn given(bytes: &[u8], key: &str) -> Pem {
        Pem {
            bytes: bytes.to_vec(),
            name: key.to_string(),
        }
    }

    fn certs(&self) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        let certs = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError(format!("{}: not a PEM certificate: {e}", self.name)))?;
        if certs.is_empty() {
            return Err(TlsError(format!(
                "{}: no `BEGIN CERTIFICATE` block in it",
                self.name
            )));
        }
        Ok(certs)
    }

    fn key(&self) -> Result<PrivateKeyDer<'static>, TlsError> {
        PrivateKeyDer::from_pem_slice(&self.bytes).map_err(|e| {
            TlsError(format!(
                "{}: no PEM private key (PKCS#8, PKCS#1 or SEC1) in it: {e}",
                self.name
            ))
        })
    }

    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        for c in self.certs()? {
            roots
                .add(c)
                .map_err(|e| TlsError(format!("{}: not a CA certificate: {e}", self.name)))?;
        }
        Ok(roots)
    }
}

/// The PEM files of a server's side (`[network] tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// Its private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
    pub key: PathBuf,
    /// The CA that signs the callers' certificates; `None`: callers need none (and have no
    /// identity, so exports with an allow list refuse them).
    pub client_ca: Option<PathBuf>,
}

/// The PEM files of a client's side (`[remotes.NAME] tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// The CA that signed the server's certificate.
    pub ca: PathBuf,
    /// The client's certificate chain and key, presented to servers that ask for one.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// The name the server's certificate must carry; `None`: the endpoint's host.
    pub server_name: Option<String>,
}

/// The server side of TLS on a `tcp:` listener.
pub struct ServerTls {
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
    verifies_clients: bool,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("verifies_clients", &self.verifies_clients)
            .finish()
    }
}

impl ServerTls {
    /// Loads the files; an error names the file at fault.
    pub fn load(files: &ServerTlsFiles) -> Result<Arc<ServerTls>, TlsError> {
        let ca = match &files.client_ca {
            Some(p) => Some(Pem::read(p, "client-ca")?),
            None => None,
        };
        ServerTls::build(
            &Pem::read(&files.cert, "cert")?,
            &Pem::read(&files.key, "key")?,
            ca.as_ref(),
        )
    }

    /// From PEM text: the certificate chain, its key, and the CA of the callers' certificates
    /// (`None`: callers need none).
    pub fn from_pem(
        cert: &[u8],
        key: &[u8],
        client_ca: Option<&[u8]>,
    ) -> Result<Arc<ServerTls>, TlsError> {
        let ca = client_ca.map(|c| Pem::given(c, "client-ca"));
        ServerTls::build(
            &Pem::given(cert, "cert"),
            &Pem::given(key, "key"),
            ca.as_ref(),
        )
    }

    fn build(cert: &Pem, key: &Pem, client_ca: Option<&Pem>) -> Result<Arc<ServerTls>, TlsError> {
        let p = provider();
        let (chain, der) = (cert.certs()?, key.key()?);
        let builder = rustls::ServerConfig::builder_with_provider(p.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError(format!("TLS settings: {e}")))?;
        let builder = match client_ca {
            Some(ca) => {
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(ca.roots()?),
                    p,
                )
                .build()
                .map_err(|e| TlsError(format!("{}: {e}", ca.name)))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, der).map_err(|e| {
            TlsError(format!(
                "{} does not go with the certificate in {}: {e}",
                key.name, cert.name
            ))
        })?;
        config.send_tls13_tickets = 0;
        Ok(Arc::new(ServerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            verifies_clients: client_ca.is_some(),
        }))
    }

    /// Whether callers must present a certificate signed by the client CA.
    pub fn verifies_clients(&self) -> bool {
        self.verifies_clients
    }
}

/// The client side of TLS to a `tcp:` endpoint.
pub struct ClientTls {
    pub(crate) connector: tokio_rustls::TlsConnector,
    server_name: Option<ServerName<'static>>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl ClientTls {
    /// Loads the files; an error names the file at fault.
    pub fn load(files: &ClientTlsFiles) -> Result<Arc<ClientTls>, TlsError> {
        let pair = match &files.cert {
            Some((c, k)) => Some((Pem::read(c, "cert")?, Pem::read(k, "key")?)),
            None => None,
        };
        ClientTls::build(
            &Pem::read(&files.ca, "ca")?,
            pair.as_ref().map(|(c, k)| (c, k)),
            files.server_name.as_deref(),
        )
    }

    /// From PEM text: the CA of the server's certificate, the client's own certificate chain
    /// and key (if it presents one), and the name the server's certificate must carry
    /// (`None`: the endpoint's host).
    pub fn from_pem(
        ca: &[u8],
        cert_and_key: Option<(&[u8], &[u8])>,
        server_name: Option<&str>,
    ) -> Result<Arc<ClientTls>, TlsError> {
        let pair = cert_and_key.map(|(c, k)| (Pem::given(c, "cert"), Pem::given(k, "key")));
        ClientTls::build(
            &Pem::given(ca, "ca"),
            pair.as_ref().map(|(c, k)| (c, k)),
            server_name,
        )
    }

    fn build(
        ca: &Pem,
        pair: Option<(&Pem, &Pem)>,
        server_name: Option<&str>,
    ) -> Result<Arc<ClientTls>, TlsError> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError(format!("TLS settings: {e}")))?
            .with_root_certificates(ca.roots()?);
        let config = match pair {
            Some((cert, key)) => builder
                .with_client_auth_cert(cert.certs()?, key.key()?)
                .map_err(|e| {
                    TlsError(format!(
                        "{} does not go with the certificate in {}: {e}",
                        key.name, cert.name
                    ))
                })?,
            None => builder.with_no_client_auth(),
        };
        let server_name = server_name
            .map(|n| {
                ServerName::try_from(n.to_string())
                    .map_err(|e| TlsError(format!("server-name `{n}`: {e}")))
            })
            .transpose()?;
        Ok(Arc::new(ClientTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name,
        }))
    }

    /// The name checked in the server's certificate when calling `addr` (`host:port`).
    pub(crate) fn server_name(&self, addr: &str) -> std::io::Result<ServerName<'static>> {
        if let Some(n) = &self.server_name {
            return Ok(n.clone());
        }
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        ServerName::try_from(host.to_string()).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("`{host}` is no server name: {e}"),
            )
        })
    }
}

/// Who a caller is: the names in its verified certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The subject's common names (`CN=`).
    pub common_names: Vec<String>,
    /// DNS names among its subject alternative names.
    pub dns: Vec<String>,
    /// URIs among its subject alternative names (a SPIFFE ID, for example).
    pub uris: Vec<String>,
}

impl Identity {
    /// The names in `cert` (a certificate the handshake verified); no names when it does not
    /// parse.
    pub fn of(cert: &CertificateDer<'_>) -> Identity {
        let Ok(c) = webpki::EndEntityCert::try_from(cert) else {
            return Identity::default();
        };
        Identity {
            common_names: common_names(c.subject()),
            dns: c.valid_dns_names().map(str::to_string).collect(),
            uris: c.valid_uri_names().map(str::to_string).collect(),
        }
    }
}

/// One DER element at the front of `input`: its tag, its contents and what follows it.
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes.iter().fold(0usize, |l, &b| (l << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

/// The common names in a subject (the DER contents of its `Name` sequence): each relative
/// distinguished name's `2.5.4.3` attribute whose value is a UTF8, printable or IA5 string.
fn common_names(mut subject: &[u8]) -> Vec<String> {
    const SET: u8 = 0x31;
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    let mut names = Vec::new();
    while let Some((tag, mut rdn, rest)) = der(subject) {
        subject = rest;
        if tag != SET {
            break;
        }
        while let Some((tag, attr, rest)) = der(rdn) {
            rdn = rest;
            if tag != SEQUENCE {
                break;
            }
            let Some((OID, oid, value)) = der(attr) else {
                continue;
            };
            if oid != CN {
                continue;
            }
            if let Some((0x0c | 0x13 | 0x16, v, _)) = der(value)
                && let Ok(s) = std::str::from_utf8(v)
            {
                names.push(s.to_string());
            }
        }
    }
    names
}

/// An entry of an export's allow list: a name a caller's certificate must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// `CN=NAME`: a common name of the subject.
    CommonName(String),
    /// `dns:NAME`: a DNS subject alternative name (compared without regard to case).
    Dns(String),
    /// `uri:URI`: a URI subject alternative name (compared exactly).
    Uri(String),
}

impl Principal {
    /// Whether `id` carries this name.
    pub fn matches(&self, id: &Identity) -> bool {
        match self {
            Principal::CommonName(n) => id.common_names.iter().any(|c| c == n),
            Principal::Dns(n) => id.dns.iter().any(|d| d.eq_ignore_ascii_case(n)),
            Principal::Uri(n) => id.uris.iter().any(|u| u == n),
        }
    }
}

impl FromStr for Principal {
    type Err = String;
    fn from_str(s: &str) -> Result<Principal, String> {
        let (kind, name) = if let Some(n) = s.strip_prefix("CN=").or(s.strip_prefix("cn=")) {
            (Principal::CommonName as fn(String) -> Principal, n)
        } else if let Some(n) = s.strip_prefix("dns:") {
            (Principal::Dns as fn(String) -> Principal, n)
        } else if let Some(n) = s.strip_prefix("uri:") {
            (Principal::Uri as fn(String) -> Principal, n)
        } else {
            return Err(format!(
                "`{s}` is none of \"CN=NAME\", \"dns:NAME\" or \"uri:URI\""
            ));
        };
        if name.is_empty() || name.trim() != name {
            return Err(format!("`{s}` names nobody (empty, or spaces around it)"));
        }
        Ok(kind(name.to_string()))
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::CommonName(n) => write!(f, "CN={n}"),
            Principal::Dns(n) => write!(f, "dns:{n}"),
            Principal::Uri(n) => write!(f, "uri:{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_parse_and_print() {
        for s in [
            "CN=billing",
            "dns:edge-1.example",
            "uri:spiffe://example/billing",
        ] {
            assert_eq!(s.parse::<Principal>().unwrap().to_string(), s);
        }
        for s in ["billing", "CN=", "dns: x", "O=acme", ""] {
            assert!(s.parse::<Principal>().is_err(), "{s}");
        }
        let id = Identity {
            common_names: vec!["billing".into()],
            dns: vec!["Edge-1.example".into()],
            uris: vec!["spiffe://example/billing".into()],
        };
        for s in [
            "CN=billing",
            "dns:edge-1.example",
            "uri:spiffe://example/billing",
        ] {
            assert!(s.parse::<Principal>().unwrap().matches(&id), "{s}");
        }
        for s in [
            "CN=Billing",
            "dns:edge-2.example",
            "uri:spiffe://example/Billing",
        ] {
            assert!(!s.parse::<Principal>().unwrap().matches(&id), "{s}");
        }
    }

    #[test]
    fn common_names_survive_malformed_subjects() {
        // SET { SEQUENCE { OID 2.5.4.3, UTF8String "ab" } }
        let good = [
            0x31, 0x0b, 0x30, 0x09, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x02, b'a', b'b',
        ];
        assert_eq!(common_names(&good), vec!["ab".to_string()]);
        for cut in 0..good.len() {
            let _ = common_names(&good[..cut]);
        }
        let mut long = good;
        long[1] = 0x84;
        assert!(common_names(&long).is_empty());
        assert!(common_names(&[0x31, 0x85, 0xff, 0xff, 0xff, 0xff, 0xff]).is_empty());
    }
}
