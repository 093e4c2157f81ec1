//! `lrpc serve` with TLS (`[serve] tls-cert`, `tls-key`), the real binary on loopback, with
//! certificates made here and real clients: `curl` (HTTP/1.1 and h2) and a rustls client that
//! keeps its connection open across a certificate rotation.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::request;

const LRPC: &str = env!("CARGO_BIN_EXE_lrpc");

/// How long a test waits for something the server does on its own (a reload, a close).
const PATIENCE: Duration = Duration::from_secs(30);

const TOKEN: &str = "test-admin-token-0123";

fn scratch(tag: &str) -> PathBuf {
    common::scratch("lrpc-tls", tag)
}

/// A certificate for `localhost` and `127.0.0.1`, issued by a CA of its own.
struct Cert {
    /// The CA's certificate, PEM: what a client trusts.
    ca_pem: String,
    /// The CA's certificate, DER.
    ca_der: Vec<u8>,
    /// The server's certificate, PEM, and DER.
    pem: String,
    der: Vec<u8>,
    /// The server's private key, PEM.
    key_pem: String,
}

fn issue(name: &str) -> Cert {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("test CA {name}"));
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("params");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &issuer).expect("certificate");
    Cert {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().to_vec(),
        pem: cert.pem(),
        der: cert.der().to_vec(),
        key_pem: key.serialize_pem(),
    }
}

/// A running `lrpc serve`, killed when dropped; its log goes to a file.
struct Server {
    child: Child,
    /// The port it listens on.
    port: u16,
    log: PathBuf,
}

impl Server {
    fn start(config: &Path, listen: &str) -> Server {
        let log = config.with_file_name("stderr.log");
        let mut child = Command::new(LRPC)
            .arg("serve")
            .arg(config)
            .args(["--listen", listen])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start lrpc serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the address");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("unexpected first line {line:?}; log:\n{log}")
            });
        Server { child, port, log }
    }

    /// How many times the log holds `text`.
    fn logged(&self, text: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.matches(text).count()
    }

    /// Waits (bounded) until the log holds `text` more than `before` times.
    fn wait_for_log(&self, text: &str, before: usize) {
        let until = Instant::now() + PATIENCE;
        loop {
            if self.logged(text) > before {
                return;
            }
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            assert!(Instant::now() < until, "no `{text}` in the log:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl` on `https://localhost:PORT{path}`, trusting `ca` only; the status code (0 when
/// no answer came) and the HTTP version, as curl's `-w` writes them.
fn curl(port: u16, path: &str, ca: &Path, args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "30"])
        .args(["-w", "%{http_code} %{http_version}"])
        .arg("--cacert")
        .arg(ca)
        .arg("--resolve")
        .arg(format!("localhost:{port}:127.0.0.1"))
        .args(args)
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, version) = text.split_once(' ').unwrap_or((&text, ""));
    (code.parse().unwrap_or(0), version.to_string())
}

/// A TLS connection made with rustls, trusting the given CAs, that sends HTTP/1.1 requests
/// by hand and keeps the connection open between them.
struct Client {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl Client {
    fn connect(port: u16, cas: &[&[u8]]) -> Client {
        let mut roots = rustls::RootCertStore::empty();
        for ca in cas {
            roots
                .add(rustls::pki_types::CertificateDer::from(ca.to_vec()))
                .expect("a CA");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
        let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("a connection");
        let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        tcp.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn
                .complete_io(&mut tls.sock)
                .expect("the TLS handshake");
        }
        Client { tls }
    }

    /// The server's certificate on this connection, DER.
    fn peer(&self) -> Vec<u8> {
        self.tls
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .expect("a certificate")
    }

    /// `GET path` on this connection; the status and body.
    fn get(&mut self, path: &str) -> (u16, Vec<u8>) {
        write!(self.tls, "GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").expect("send");
        self.tls.flush().expect("send");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            self.tls.read_exact(&mut byte).expect("the reply's head");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status");
        let length: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .expect("replies here have a content-length");
        let mut body = vec![0; length];
        self.tls.read_exact(&mut body).expect("the body");
        (status, body)
    }
}

fn hello_config(dir: &Path, serve: &str) -> PathBuf {
    std::fs::write(dir.join("handler.wasm"), lrpc_artifacts::HTTP_HELLO).expect("write");
    let config = dir.join("lrpc.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\n{serve}\n\
             [domains.handler]\nwasm = \"handler.wasm\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\" }}]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"handler\"]\n"
        ),
    )
    .expect("write the config");
    config
}

fn write_pair(dir: &Path, c: &Cert) {
    // The key first: a reload between the two writes meets a key that is not the
    // certificate's, and keeps the old pair until the certificate follows.
    std::fs::write(dir.join("key.pem"), &c.key_pem).expect("write the key");
    std::fs::write(dir.join("cert.pem"), &c.pem).expect("write the certificate");
}

/// HTTP/1.1 and h2 over TLS answer a route; writing new certificate files rotates the
/// certificate: a connection opened before still works, new connections get the new
/// certificate, and a bad file later is logged and the certificate in use stays.
#[test]
fn https_answers_both_protocols_and_rotates_its_certificate_without_dropping_connections() {
    let dir = scratch("rotate");
    let (a, b) = (issue("a"), issue("b"));
    write_pair(&dir, &a);
    for (name, c) in [("a.pem", &a), ("b.pem", &b)] {
        std::fs::write(dir.join(name), &c.ca_pem).expect("write a CA");
    }
    // A long header timeout: the connection kept open idles while the files change.
    let config = hello_config(
        &dir,
        "tls-cert = \"cert.pem\"\ntls-key = \"key.pem\"\nheader-timeout = \"120s\"",
    );
    let s = Server::start(&config, "127.0.0.1:0");
    let ca_a = dir.join("a.pem");
    assert_eq!(
        curl(s.port, "/hello", &ca_a, &["--http1.1"]),
        (200, "1.1".into())
    );
    assert_eq!(
        curl(s.port, "/hello", &ca_a, &["--http2"]),
        (200, "2".into())
    );
    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    plain.set_read_timeout(Some(PATIENCE)).expect("timeout");
    plain
        .write_all(b"GET /hello HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .expect("send");
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP was answered");

    let mut kept = Client::connect(s.port, &[&a.ca_der]);
    assert_eq!(kept.peer(), a.der);
    let (status, before) = kept.get("/hello");
    assert_eq!(status, 200);

    write_pair(&dir, &b);
    let until = Instant::now() + PATIENCE;
    while Client::connect(s.port, &[&a.ca_der, &b.ca_der]).peer() != b.der {
        assert!(
            Instant::now() < until,
            "new connections still get the old certificate"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s.wait_for_log("TLS certificate reloaded", 0);
    // The connection opened before the rotation still works, on the old certificate.
    assert_eq!(kept.get("/hello"), (200, before));
    assert_eq!(kept.peer(), a.der);
    assert_eq!(
        curl(s.port, "/hello", &dir.join("b.pem"), &["--http2"]),
        (200, "2".into())
    );
    assert_eq!(curl(s.port, "/hello", &ca_a, &["--http1.1"]).0, 0);

    // A broken certificate file is refused at reload; the one in use stays.
    let refused = s.logged("TLS certificate not reloaded");
    std::fs::write(dir.join("cert.pem"), "-----BEGIN CERTIFICATE-----\nAAAA\n").expect("write");
    s.wait_for_log("TLS certificate not reloaded", refused);
    assert_eq!(Client::connect(s.port, &[&b.ca_der]).peer(), b.der);
    assert_eq!(kept.get("/hello").0, 200);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGHUP reloads the certificate, even from unchanged files, and the server serves on.
#[test]
fn sighup_reloads_the_certificate() {
    let dir = scratch("hup");
    let a = issue("a");
    write_pair(&dir, &a);
    let config = hello_config(&dir, "tls-cert = \"cert.pem\"\ntls-key = \"key.pem\"");
    let s = Server::start(&config, "127.0.0.1:0");
    assert_eq!(s.logged("TLS certificate reloaded"), 0);
    let hup = Command::new("kill")
        .args(["-HUP", &s.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    s.wait_for_log("TLS certificate reloaded", 0);
    assert_eq!(Client::connect(s.port, &[&a.ca_der]).get("/hello").0, 200);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A certificate or key that does not load stops `lrpc serve` at start with the file's name;
/// a missing one names the config's line.
#[test]
fn a_bad_certificate_at_start_is_an_error_naming_the_file() {
    let dir = scratch("bad");
    let (a, b) = (issue("a"), issue("b"));
    let config = hello_config(&dir, "tls-cert = \"cert.pem\"\ntls-key = \"key.pem\"");
    let c = config.to_str().expect("utf-8 path");
    let start = || {
        let o = Command::new(LRPC)
            .args(["serve", c, "--listen", "127.0.0.1:0"])
            .output()
            .expect("run lrpc");
        assert!(!o.status.success(), "it started");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = start();
    assert!(
        err.contains(&format!("{c}:2: tls-cert `")) && err.contains("not found"),
        "{err}"
    );
    std::fs::write(dir.join("cert.pem"), "not a certificate").expect("write");
    std::fs::write(dir.join("key.pem"), &a.key_pem).expect("write");
    let err = start();
    let cert = dir.join("cert.pem");
    assert!(
        err.contains(&format!("tls-cert `{}`", cert.display())),
        "{err}"
    );
    std::fs::write(dir.join("cert.pem"), &a.pem).expect("write");
    std::fs::write(dir.join("key.pem"), "not a key").expect("write");
    let err = start();
    assert!(err.contains("tls-key `"), "{err}");
    std::fs::write(dir.join("key.pem"), &b.key_pem).expect("write");
    let err = start();
    assert!(err.contains("is not the key of the certificate"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that opens a connection and starts a handshake it never finishes is closed
/// within the header timeout.
#[test]
fn a_stalled_handshake_is_closed_within_the_header_timeout() {
    let dir = scratch("stall");
    let a = issue("a");
    write_pair(&dir, &a);
    let config = hello_config(
        &dir,
        "tls-cert = \"cert.pem\"\ntls-key = \"key.pem\"\nheader-timeout = \"1s\"",
    );
    let s = Server::start(&config, "127.0.0.1:0");
    let mut tcp = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    tcp.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let t0 = Instant::now();
    // The first bytes of a TLS record header (a handshake), and no more.
    tcp.write_all(&[0x16, 0x03, 0x01]).expect("send");
    let mut buf = [0u8; 64];
    let closed = match tcp.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    assert!(closed, "the connection is still open");
    // Within the timeout plus a generous grace for a loaded machine.
    assert!(
        t0.elapsed() < Duration::from_secs(1 + 10),
        "{:?}",
        t0.elapsed()
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The admin endpoint refuses a token sent in plain HTTP to a server that listens beyond
/// loopback; over TLS there, or in plain HTTP on loopback, it works.
#[test]
fn the_admin_token_is_refused_in_clear_beyond_loopback() {
    let dir = scratch("admin");
    let a = issue("a");
    write_pair(&dir, &a);
    std::fs::write(dir.join("a.pem"), &a.ca_pem).expect("write a CA");
    let admin = format!("admin = true\nadmin-token = \"{TOKEN}\"");
    let bearer = format!("Bearer {TOKEN}");
    let reload = "/admin/reload/handler";

    let plain = hello_config(&dir, &admin);
    let s = Server::start(&plain, "0.0.0.0:0");
    let r = request(
        &format!("127.0.0.1:{}", s.port),
        "POST",
        reload,
        &[("authorization", &bearer)],
        b"",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("plain HTTP"), "{}", r.text());
    drop(s);

    let s = Server::start(&plain, "127.0.0.1:0");
    let r = request(
        &format!("127.0.0.1:{}", s.port),
        "POST",
        reload,
        &[("authorization", &bearer)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    drop(s);

    let tls = hello_config(
        &dir,
        &format!("{admin}\ntls-cert = \"cert.pem\"\ntls-key = \"key.pem\""),
    );
    let s = Server::start(&tls, "0.0.0.0:0");
    let auth = format!("authorization: {bearer}");
    let (status, _) = curl(
        s.port,
        reload,
        &dir.join("a.pem"),
        &["-X", "POST", "-H", &auth],
    );
    assert_eq!(status, 200);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
