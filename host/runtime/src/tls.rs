//! TLS for `lrpc serve` (`[serve] tls-cert` and `tls-key`): rustls with the ring provider,
//! TLS 1.2 and 1.3, ALPN `h2` and `http/1.1`.
//!
//! The certificate can change while the server runs. A [`ResolvesServerCert`] hands each
//! handshake the current [`CertifiedKey`]; a reload swaps it, so connections already open keep
//! the one they started with and new ones get the new one. A reload happens when a file in the
//! folders of the two files changes ([`Tls::watch`], which reads the files again only when
//! their bytes changed: a renamed-in file or a symlinked folder counts too) and on SIGHUP
//! ([`reload_on_hangup`]). A pair that does not load (a half-written file, a key that is not
//! the certificate's) is logged and the old pair kept; the next change tries again.
//!
//! The handshake must end within the header timeout ([`Tls::accept`]), so a client that
//! opens a connection and stalls can not hold one of the listener's slots.

use notify::{RecursiveMode, Watcher as _};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long the files' folders must stay quiet after a change before the files are read.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// The longest wait for quiet: a folder that never stays quiet (a log written beside the
/// files) does not hold a reload back for longer.
const MAX_DEBOUNCE: Duration = Duration::from_secs(1);

/// The PEM files of the server's certificate (`[serve] tls-cert`) and its private key
/// (`[serve] tls-key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// The private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
    pub key: PathBuf,
}

/// A certificate or key that does not load; the reason names the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

/// The server side of TLS: the current certificate and the acceptor that uses it.
pub struct Tls {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: Arc<Current>,
    acceptor: tokio_rustls::TlsAcceptor,
    /// The hash of the bytes last tried, so that unchanged files are not loaded again.
    tried: Mutex<u64>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

/// The certificate handed to new handshakes.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.0
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// FNV-1a over both files' bytes and lengths.
fn hash(cert: &[u8], key: &[u8]) -> u64 {
    [cert, key].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        let h = b
            .iter()
            .fold(h, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3));
        (h ^ b.len() as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError(format!("{what} `{}`: {e}", path.display())))
}

/// The certificate chain and key in `cert` and `key` (the bytes of `files`), checked to
/// belong together.
fn certified(
    files: &TlsFiles,
    cert: &[u8],
    key: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let cert_file = files.cert.display();
    let key_file = files.key.display();
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            TlsError(format!(
                "tls-cert `{cert_file}`: not a PEM certificate: {e}"
            ))
        })?;
    if chain.is_empty() {
        return Err(TlsError(format!(
            "tls-cert `{cert_file}`: no `BEGIN CERTIFICATE` block in it"
        )));
    }
    let der = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
        TlsError(format!(
            "tls-key `{key_file}`: no PEM private key (PKCS#8, PKCS#1 or SEC1) in it: {e}"
        ))
    })?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| TlsError(format!("tls-key `{key_file}`: {e}")))?;
    let pair = CertifiedKey::new(chain, signing);
    match pair.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(pair)
        }
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError(format!(
            "tls-key `{key_file}` is not the key of the certificate in `{cert_file}`"
        ))),
        Err(e) => Err(TlsError(format!("tls-cert `{cert_file}`: {e}"))),
    }
}

impl Tls {
    /// Loads the certificate and key of `files`; an error names the file at fault.
    pub fn load(files: &TlsFiles) -> Result<Arc<Tls>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (cert, key) = (read(&files.cert, "tls-cert")?, read(&files.key, "tls-key")?);
        let pair = certified(files, &cert, &key, &provider)?;
        let current = Arc::new(Current(RwLock::new(Arc::new(pair))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError(format!("TLS settings: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(Tls {
            files: files.clone(),
            provider,
            current,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            tried: Mutex::new(hash(&cert, &key)),
        }))
    }

    /// Loads the files again and, when they hold a good pair, hands it to new handshakes.
    /// Unless `force`, files whose bytes were tried last time are not loaded again, and a
    /// file that could not be read the same way as last time is not reported again. Whether
    /// a new pair is in use.
    pub fn reload(&self, force: bool) -> Result<bool, TlsError> {
        let files = read(&self.files.cert, "tls-cert")
            .and_then(|cert| Ok((cert, read(&self.files.key, "tls-key")?)));
        let h = match &files {
            Ok((cert, key)) => hash(cert, key),
            Err(e) => !hash(e.0.as_bytes(), b""),
        };
        {
            let mut tried = self.tried.lock().unwrap_or_else(PoisonError::into_inner);
            if *tried == h && !force {
                return Ok(false);
            }
            *tried = h;
        }
        let (cert, key) = files?;
        let pair = certified(&self.files, &cert, &key, &self.provider)?;
        *self
            .current
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(pair);
        Ok(true)
    }

    /// [`Tls::reload`], its outcome logged.
    fn reload_logged(&self, force: bool) {
        match self.reload(force) {
            Ok(true) => {
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded")
            }
            Ok(false) => {}
            Err(e) => tracing::error!("TLS certificate not reloaded, the old one stays: {e}"),
        }
    }

    /// Runs the server's side of a handshake on `stream`, for at most `timeout`; `None` when
    /// it failed or took longer.
    pub async fn accept(
        &self,
        stream: TcpStream,
        timeout: Duration,
    ) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
        match tokio::time::timeout(timeout, self.acceptor.accept(stream)).await {
            Ok(Ok(s)) => Some(s),
            Ok(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!("TLS handshake not done within the header timeout");
                None
            }
        }
    }

    /// Reloads the pair whenever something changes in the folders of its files, until the
    /// returned watcher is dropped.
    pub fn watch(self: &Arc<Self>) -> notify::Result<TlsWatcher> {
        let mut dirs = Vec::new();
        for f in [&self.files.cert, &self.files.key] {
            let dir = f
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            // Opening and reading a file unchanged (the reloads' own reads too) are no change.
            if ev.is_ok_and(|ev| !matches!(ev.kind, notify::EventKind::Access(_))) {
                let _ = tx.send(());
            }
        })?;
        for d in &dirs {
            watcher.watch(d, RecursiveMode::NonRecursive)?;
        }
        let tls = self.clone();
        std::thread::Builder::new()
            .name("lrpc-tls-reload".into())
            .spawn(move || {
                // Ends when the watcher, and so the sender, is dropped.
                while rx.recv().is_ok() {
                    let first = std::time::Instant::now();
                    while first.elapsed() < MAX_DEBOUNCE && rx.recv_timeout(DEBOUNCE).is_ok() {}
                    tls.reload_logged(false);
                }
            })
            .map_err(|e| notify::Error::generic(&e.to_string()))?;
        Ok(TlsWatcher { _watcher: watcher })
    }
}

/// Watches the certificate's files until dropped.
pub struct TlsWatcher {
    _watcher: notify::RecommendedWatcher,
}

/// A task that reloads the certificate on every SIGHUP, forever. SIGHUP is caught from
/// this call on (inside a tokio runtime), before the task first runs.
pub fn reload_on_hangup(
    tls: Arc<Tls>,
) -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    Ok(async move {
        while hangups.recv().await.is_some() {
            let tls = tls.clone();
            let _ = tokio::task::spawn_blocking(move || tls.reload_logged(true)).await;
        }
    })
}

/// An accepted connection, in clear or in TLS.
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP, the handshake done.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// `stream` as the listener serves it: through a handshake when `tls` is set (`None` when
/// that fails or takes longer than `timeout`), else as it is.
pub async fn wrap(tls: Option<&Tls>, stream: TcpStream, timeout: Duration) -> Option<Stream> {
    match tls {
        None => Some(Stream::Plain(stream)),
        Some(t) => t
            .accept(stream, timeout)
            .await
            .map(|s| Stream::Tls(Box::new(s))),
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// How clients reach the edge server, for the admin endpoint: a token sent in clear to an
/// address other machines can reach may have been read on the way, so it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transport {
    /// Whether connections are TLS.
    pub tls: bool,
    /// Whether the server listens on a loopback address only.
    pub loopback: bool,
}

impl Transport {
    /// Whether a secret sent by a client crossed a network in clear.
    pub fn exposes_secrets(&self) -> bool {
        !self.tls && !self.loopback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_are_not_a_matching_pair_are_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("lrpc-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        let e = Tls::load(&files).expect_err("no files").to_string();
        assert!(e.starts_with("tls-cert `"), "{e}");
        std::fs::write(&files.cert, "not pem").expect("write");
        std::fs::write(&files.key, "not pem").expect("write");
        let e = Tls::load(&files).expect_err("no pem").to_string();
        assert!(e.contains("no `BEGIN CERTIFICATE` block"), "{e}");
        let provider = rustls::crypto::ring::default_provider();
        let e = certified(&files, b"", b"", &provider)
            .expect_err("empty")
            .to_string();
        assert!(e.contains("cert.pem"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reload_keeps_the_old_pair_when_the_new_one_is_bad_and_tries_each_change_once() {
        let dir = std::env::temp_dir().join(format!("lrpc-tls-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        let write = |c: &rcgen::CertifiedKey<rcgen::KeyPair>| {
            std::fs::write(&files.cert, c.cert.pem()).expect("write");
            std::fs::write(&files.key, c.signing_key.serialize_pem()).expect("write");
        };
        let issue = || rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let (a, b) = (issue(), issue());
        write(&a);
        let tls = Tls::load(&files).expect("a good pair");
        let served = || tls.current.0.read().expect("lock").cert[0].to_vec();
        assert_eq!(served(), a.cert.der().to_vec());
        assert!(
            !tls.reload(false).expect("unchanged"),
            "unchanged files reload"
        );
        // B's key with A's certificate: refused, A stays; the same bytes are not tried again.
        std::fs::write(&files.key, b.signing_key.serialize_pem()).expect("write");
        let e = tls.reload(false).expect_err("a key of another certificate");
        assert!(
            e.to_string().contains("is not the key of the certificate"),
            "{e}"
        );
        assert!(!tls.reload(false).expect("tried already"));
        assert_eq!(served(), a.cert.der().to_vec());
        // A missing file is reported once too.
        std::fs::remove_file(&files.cert).expect("remove");
        assert!(tls.reload(false).is_err());
        assert!(!tls.reload(false).expect("reported already"));
        write(&b);
        assert!(tls.reload(false).expect("a good pair"));
        assert_eq!(served(), b.cert.der().to_vec());
        assert!(
            tls.reload(true).expect("forced"),
            "SIGHUP reloads even unchanged files"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_token_in_clear_is_exposed_only_beyond_loopback() {
        let t = |tls, loopback| Transport { tls, loopback }.exposes_secrets();
        assert!(t(false, false));
        assert!(!t(true, false));
        assert!(!t(false, true));
        assert!(!t(true, true));
    }
}
