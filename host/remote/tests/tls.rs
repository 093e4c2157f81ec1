//! Remote callers prove who they are: TLS with client certificates on `tcp:` endpoints, and
//! per-export allow lists, through real sockets on loopback.
//!
//! The certificates are made here (`rcgen`): a CA the server trusts for callers, another CA it
//! does not, and callers named by common name, DNS name and URI.

use anyhow::{Context as _, Result};
use lrpc_remote::{
    ClientTls, Endpoint, LocalPool, Principal, RemoteBinding, RemoteError, RemoteOptions,
    RemoteServer, ServeOptions, ServerTls, ServerTlsFiles,
};
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

mod common;

use common::{BENCH, KV, Reaped, bytes, local, proc_of, runtime, string, u32s};

/// A CA that signs certificates.
struct Ca {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

/// A certificate and its key, PEM.
struct Leaf {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("test CA {name}"));
        let key = rcgen::KeyPair::generate().expect("CA key");
        let pem = p.self_signed(&key).expect("CA certificate").pem();
        Ca {
            pem,
            issuer: rcgen::Issuer::new(p, key),
        }
    }

    /// A certificate with common name `cn` and these subject alternative names.
    fn issue(&self, cn: &str, sans: Vec<rcgen::SanType>) -> Leaf {
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.subject_alt_names = sans;
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.issuer).expect("certificate");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

fn dns(name: &str) -> rcgen::SanType {
    rcgen::SanType::DnsName(name.try_into().expect("DNS name"))
}

fn uri(u: &str) -> rcgen::SanType {
    rcgen::SanType::URI(u.try_into().expect("URI"))
}

/// A kernel serving the bench and key-value exports over TLS on loopback: callers need a
/// certificate from `ca`, and the bench export allows only the names in `allow`.
struct Served {
    server: Arc<RemoteServer>,
    endpoint: Endpoint,
    pool: Arc<LocalPool>,
    rt: tokio::runtime::Runtime,
    _kernel: lrpc_kernel::Kernel,
}

fn serve(ca: &Ca, server_cert: &Leaf, allow: &[&str]) -> Result<Served> {
    let (kernel, pool) = local()?;
    let rt = runtime();
    let allow: Vec<Principal> = allow
        .iter()
        .map(|a| a.parse().map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    let server = rt.block_on(RemoteServer::with_allow(
        pool.clone(),
        ServeOptions::default(),
        HashMap::from([(BENCH.to_string(), allow)]),
    ))?;
    let tls = ServerTls::from_pem(
        server_cert.cert.as_bytes(),
        server_cert.key.as_bytes(),
        Some(ca.pem.as_bytes()),
    )?;
    assert!(tls.verifies_clients());
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let endpoint = Endpoint::Tcp(listener.local_addr()?.to_string());
    rt.spawn(server.clone().listen_tls(listener, tls));
    Ok(Served {
        server,
        endpoint,
        pool,
        rt,
        _kernel: kernel,
    })
}

impl Served {
    /// A binding to `name` over TLS trusting `ca` (the server's), presenting `me`.
    fn binding(&self, name: &str, ca: &Ca, me: Option<&Leaf>) -> Result<RemoteBinding> {
        let tls = ClientTls::from_pem(
            ca.pem.as_bytes(),
            me.map(|l| (l.cert.as_bytes(), l.key.as_bytes())),
            Some("localhost"),
        )?;
        let plan = self.pool.export(name).context("export")?.plan.clone();
        Ok(RemoteBinding::with_tls(
            self.endpoint.clone(),
            name,
            plan,
            RemoteOptions::default(),
            Some(tls),
        ))
    }

    fn add(&self, b: &RemoteBinding, x: u32, y: u32) -> Result<Vec<u8>, RemoteError> {
        let add = proc_of(&self.pool, BENCH, "add");
        self.rt.block_on(b.call(add, &u32s(&[x, y])))
    }

    fn refused(&self) -> u64 {
        self.server
            .refused()
            .into_iter()
            .find(|(n, _)| n == BENCH)
            .map_or(0, |(_, c)| c)
    }
}

#[test]
fn callers_without_a_trusted_certificate_are_refused_in_the_handshake() -> Result<()> {
    let (ca, other) = (Ca::new("deployment"), Ca::new("elsewhere"));
    let s = serve(
        &ca,
        &ca.issue("server", vec![dns("localhost")]),
        &["CN=billing"],
    )?;
    // No certificate at all.
    let none = s.binding(BENCH, &ca, None)?;
    let err = s.add(&none, 1, 2).unwrap_err();
    assert!(matches!(err, RemoteError::Tls { .. }), "{err:?}");
    // A certificate with the right name, signed by a CA the server does not trust.
    let forged = other.issue("billing", vec![]);
    let err = s
        .add(&s.binding(BENCH, &ca, Some(&forged))?, 1, 2)
        .unwrap_err();
    assert!(matches!(err, RemoteError::Tls { .. }), "{err:?}");
    // Neither reached an export: refusals in the handshake are not the allow list's.
    assert_eq!(s.refused(), 0);
    // A client that does not trust the server's certificate refuses it.
    let billing = ca.issue("billing", vec![]);
    let err = s
        .add(&s.binding(BENCH, &other, Some(&billing))?, 1, 2)
        .unwrap_err();
    assert!(matches!(err, RemoteError::Tls { .. }), "{err:?}");
    // A caller in clear on the TLS port gets nothing.
    let plan = s.pool.export(BENCH).context("export")?.plan.clone();
    let clear = RemoteBinding::new(
        s.endpoint.clone(),
        BENCH,
        plan,
        RemoteOptions {
            deadline: std::time::Duration::from_secs(3),
            ..Default::default()
        },
    );
    assert!(s.add(&clear, 1, 2).is_err());
    // The same server serves the trusted caller on its list.
    assert_eq!(
        s.add(&s.binding(BENCH, &ca, Some(&billing))?, 40, 2)?,
        42u32.to_le_bytes()
    );
    Ok(())
}

#[test]
fn an_export_serves_only_the_callers_on_its_allow_list() -> Result<()> {
    let ca = Ca::new("deployment");
    let s = serve(
        &ca,
        &ca.issue("server", vec![dns("localhost")]),
        &[
            "CN=billing",
            "dns:edge-1.example",
            "uri:spiffe://example.org/reports",
        ],
    )?;
    // Trusted, but on no list: refused with the typed error, counted, and the session goes
    // on (a second refusal on the same kept connection).
    let intruder = s.binding(
        BENCH,
        &ca,
        Some(&ca.issue("intruder", vec![dns("x.example")])),
    )?;
    for i in 1..=2u64 {
        match s.add(&intruder, 1, 2) {
            Err(RemoteError::NotAllowed { export }) => assert_eq!(export, BENCH),
            other => panic!("{other:?}"),
        }
        assert_eq!(intruder.kept_connections(), 1);
        assert_eq!(s.refused(), i);
    }
    assert_eq!(
        RemoteError::NotAllowed {
            export: BENCH.into()
        }
        .status(),
        lrpc_kernel::Status::UnknownInterface
    );
    // The key-value export has no allow list: the same caller is served there.
    let kv = s.binding(KV, &ca, Some(&ca.issue("intruder", vec![])))?;
    let put = proc_of(&s.pool, KV, "put");
    let mut args = string("k");
    args.extend(bytes(b"v"));
    args.push(0);
    s.rt.block_on(kv.call(put, &args))?;
    // On the list by common name, by DNS name, by URI: served.
    for me in [
        ca.issue("billing", vec![]),
        ca.issue("edge", vec![dns("edge-1.example")]),
        ca.issue("reports", vec![uri("spiffe://example.org/reports")]),
    ] {
        let b = s.binding(BENCH, &ca, Some(&me))?;
        assert_eq!(s.add(&b, 40, 2)?, 42u32.to_le_bytes());
    }
    assert_eq!(s.refused(), 2);
    Ok(())
}

#[test]
fn a_kept_session_over_tls_makes_many_calls_on_one_connection() -> Result<()> {
    let ca = Ca::new("deployment");
    let s = serve(
        &ca,
        &ca.issue("server", vec![dns("localhost")]),
        &["CN=billing"],
    )?;
    let b = s.binding(BENCH, &ca, Some(&ca.issue("billing", vec![])))?;
    let big_in_out = proc_of(&s.pool, BENCH, "big-in-out");
    let big: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    for i in 0..50u32 {
        assert_eq!(s.add(&b, i, 1)?, (i + 1).to_le_bytes());
        // The one connection is kept between calls: the handshake is paid once.
        assert_eq!(b.kept_connections(), 1, "call {i}");
    }
    // Larger values cross several TLS records both ways.
    let r = s.rt.block_on(b.call(big_in_out, &bytes(&big)))?;
    assert_eq!(r.len(), 4 + big.len());
    assert_eq!(b.kept_connections(), 1);
    // Calls at once open more connections, each with its own handshake, all served.
    let add = proc_of(&s.pool, BENCH, "add");
    let calls: Vec<_> = (0..8u32)
        .map(|i| {
            let b = b.clone();
            s.rt.spawn(async move { b.call(add, &u32s(&[i, 100])).await })
        })
        .collect();
    for (i, c) in calls.into_iter().enumerate() {
        assert_eq!(s.rt.block_on(c)??, (i as u32 + 100).to_le_bytes());
    }
    assert!(b.kept_connections() >= 1);
    Ok(())
}

/// One plain wRPC invocation of the bench export's `add(40, 2)` over TLS, presenting `me`
/// (not a session): the result's bytes, empty when the connection closed without one.
fn plain_add(s: &Served, ca: &Ca, me: &Leaf) -> Result<Vec<u8>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.pem.as_bytes())?)?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_client_auth_cert(
        vec![CertificateDer::from_pem_slice(me.cert.as_bytes())?],
        PrivateKeyDer::from_pem_slice(me.key.as_bytes())?,
    )?;
    let Endpoint::Tcp(addr) = &s.endpoint else {
        anyhow::bail!("not TCP");
    };
    s.rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr.as_str()).await?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost")?, tcp)
            .await?;
        let (r, w) = tokio::io::split(tls);
        let paths: [&[Option<usize>]; 0] = [];
        // add(40, 2): two u32 in the value encoding (LEB128).
        let (mut out, mut inc) = wrpc_transport::frame::invoke(
            w,
            tokio::io::BufReader::new(r),
            BENCH,
            "add",
            bytes::Bytes::from_static(&[40, 2]),
            paths,
        )
        .await?;
        let _ = out.shutdown().await;
        let mut result = Vec::new();
        let _ = inc.read_to_end(&mut result).await;
        Ok(result)
    })
}

#[test]
fn plain_wrpc_invocations_over_tls_are_checked_too() -> Result<()> {
    let ca = Ca::new("deployment");
    let s = serve(
        &ca,
        &ca.issue("server", vec![dns("localhost")]),
        &["CN=billing"],
    )?;
    assert_eq!(plain_add(&s, &ca, &ca.issue("billing", vec![]))?, [42]);
    // Plain wRPC has no error channel: the refused invocation's connection closes without a
    // result, and the refusal is counted.
    assert_eq!(plain_add(&s, &ca, &ca.issue("intruder", vec![]))?, [0u8; 0]);
    assert_eq!(s.refused(), 1);
    Ok(())
}

#[test]
fn tls_files_that_do_not_load_name_the_file() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("lrpc-remote-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ca = Ca::new("deployment");
    let leaf = ca.issue("server", vec![dns("localhost")]);
    let (cert, key, bad) = (dir.join("s.pem"), dir.join("s.key"), dir.join("bad.pem"));
    std::fs::write(&cert, &leaf.cert)?;
    std::fs::write(&key, &leaf.key)?;
    std::fs::write(&bad, "not a certificate\n")?;
    let files =
        |c: &std::path::Path, k: &std::path::Path, ca: Option<&std::path::Path>| ServerTlsFiles {
            cert: c.into(),
            key: k.into(),
            client_ca: ca.map(Into::into),
        };
    ServerTls::load(&files(&cert, &key, None))?;
    let missing = dir.join("missing.pem");
    let e = ServerTls::load(&files(&missing, &key, None)).unwrap_err();
    assert!(e.to_string().contains("missing.pem"), "{e}");
    let e = ServerTls::load(&files(&bad, &key, None)).unwrap_err();
    assert!(e.to_string().contains("bad.pem"), "{e}");
    let e = ServerTls::load(&files(&cert, &cert, None)).unwrap_err();
    assert!(e.to_string().contains("key"), "{e}");
    let e = ServerTls::load(&files(&cert, &key, Some(&bad))).unwrap_err();
    assert!(
        e.to_string().contains("client-ca") && e.to_string().contains("bad.pem"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Starts `lrpc-remote-node` with `args`; its first line on stdout, or its error.
fn node(args: &[&str]) -> Result<std::result::Result<String, String>> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lrpc-remote-node"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    if line.is_empty() {
        let out = child.wait_with_output()?;
        return Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    drop(Reaped(child));
    Ok(Ok(line))
}

#[test]
fn the_node_refuses_clear_tcp_beyond_loopback_unless_insecure() -> Result<()> {
    let err = node(&["--listen", "tcp:0.0.0.0:0"])?.unwrap_err();
    assert!(err.contains("--insecure"), "{err}");
    let line = node(&["--listen", "tcp:0.0.0.0:0", "--insecure"])?.map_err(anyhow::Error::msg)?;
    assert!(line.starts_with("listening tcp:"), "{line}");
    // Over TLS it needs no flag.
    let dir = std::env::temp_dir().join(format!("lrpc-remote-node-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ca = Ca::new("deployment");
    let leaf = ca.issue("server", vec![dns("localhost")]);
    let (cert, key, ca_file) = (dir.join("s.pem"), dir.join("s.key"), dir.join("ca.pem"));
    std::fs::write(&cert, &leaf.cert)?;
    std::fs::write(&key, &leaf.key)?;
    std::fs::write(&ca_file, &ca.pem)?;
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let line = node(&[
        "--listen",
        "tcp:0.0.0.0:0",
        "--tls-cert",
        &path(&cert),
        "--tls-key",
        &path(&key),
        "--tls-client-ca",
        &path(&ca_file),
    ])?
    .map_err(anyhow::Error::msg)?;
    assert!(line.starts_with("listening tcp:"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
