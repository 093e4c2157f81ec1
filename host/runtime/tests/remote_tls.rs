//! Remote callers prove who they are, through the real binary: `lrpc serve` serves the
//! key-value store over TLS with client certificates (`[network] tls`) to the callers on
//! its allow list, and `lrpc run` calls it through `[remotes.NAME] tls` as the kv client.
//! The certificates are made here (`rcgen`).

mod common;

use common::request;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const LRPC: &str = env!("CARGO_BIN_EXE_lrpc");

/// A CA that signs certificates.
struct Ca {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
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

    /// Writes a certificate with common name `cn` (and DNS names `dns`) and its key into
    /// `dir` as `NAME.pem` and `NAME.key`.
    fn issue(&self, dir: &Path, name: &str, cn: &str, dns: &[&str]) {
        let mut p =
            rcgen::CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                .expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.issuer).expect("certificate");
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).expect("write");
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).expect("write");
    }
}

fn scratch(tag: &str) -> PathBuf {
    common::scratch("lrpc-remote-tls", tag)
}

fn lrpc(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(LRPC).args(args).output().expect("run lrpc");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A running `lrpc serve`, killed when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The store's config: TLS on every tcp: address, the store allowed to `CN=billing` only.
const SERVER: &str = "[domains.store]\nguest = \"kv-server\"\n\
                      exports = [{ interface = \"lrpc:kv/store\" }]\n\n\
                      [network]\nlisten = [\"tcp:0.0.0.0:0\"]\n\
                      tls = { cert = \"server.pem\", key = \"server.key\", client-ca = \"ca.pem\" }\n\
                      exports = [{ name = \"lrpc:kv/store\", allow = [\"CN=billing\"] }]\n";

/// The kv client's config calling the store at `port` over TLS, presenting `me`
/// (`me.pem`, `me.key`) when given.
fn client(port: &str, ca: &str, me: Option<&str>) -> String {
    let mine = me.map_or(String::new(), |m| {
        format!(", cert = \"{m}.pem\", key = \"{m}.key\"")
    });
    format!(
        "[remotes.store]\ninterface = \"lrpc:kv/store\"\nendpoint = \"tcp:127.0.0.1:{port}\"\n\
         deadline = \"5s\"\n\
         tls = {{ ca = \"{ca}\", server-name = \"localhost\"{mine} }}\n\n\
         [domains.client]\nguest = \"kv-client\"\n\
         binds = [{{ interface = \"lrpc:kv/store\", server = \"store\" }}]\n\n\
         [run]\nentry = \"client.selftest\"\n"
    )
}

#[test]
fn a_store_served_over_tls_answers_only_the_callers_on_its_allow_list() {
    let dir = scratch("allow");
    let (ca, other) = (Ca::new("deployment"), Ca::new("elsewhere"));
    std::fs::write(dir.join("ca.pem"), &ca.pem).expect("write");
    ca.issue(&dir, "server", "store", &["localhost"]);
    ca.issue(&dir, "billing", "billing", &[]);
    ca.issue(&dir, "intruder", "intruder", &[]);
    other.issue(&dir, "stranger", "billing", &[]);
    std::fs::write(dir.join("lrpc.toml"), SERVER).expect("write");
    let config = dir.join("lrpc.toml");
    // tcp:0.0.0.0 needs no `insecure = true`: it is served over TLS.
    let mut child = Command::new(LRPC)
        .args([
            "serve",
            config.to_str().expect("utf-8"),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lrpc serve");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let _serve = Serve(child);
    let mut lines = [String::new(), String::new()];
    for l in &mut lines {
        out.read_line(l).expect("read a line");
    }
    let http = lines[0]
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {:?}", lines[0]))
        .to_string();
    let endpoint = lines[1]
        .trim()
        .strip_prefix("exports on tcp:0.0.0.0:")
        .unwrap_or_else(|| panic!("unexpected second line {:?}", lines[1]))
        .to_string();
    let run = |name: &str, text: String| {
        let c = dir.join(format!("{name}.toml"));
        std::fs::write(&c, text).expect("write");
        lrpc(&["run", c.to_str().expect("utf-8")])
    };
    // One call from the command line: the process fails when the call does.
    let call = |name: &str, text: String| {
        let c = dir.join(format!("{name}.toml"));
        std::fs::write(&c, text).expect("write");
        let c = c.to_str().expect("utf-8");
        lrpc(&["run", c, "--call", "lrpc:kv/store.get", "\"x\""])
    };
    // On the list: the client's self-test passes against the remote store.
    let (ok, out, err) = run("billing", client(&endpoint, "ca.pem", Some("billing")));
    assert!(ok, "{err}");
    assert_eq!(out, "0\n");
    // Trusted but not on the list: refused with the typed error, and counted.
    let (ok, _, err) = call("intruder", client(&endpoint, "ca.pem", Some("intruder")));
    assert!(!ok);
    assert!(
        err.contains("export `lrpc:kv/store` does not allow this caller"),
        "{err}"
    );
    let metrics = request(&http, "GET", "/metrics", &[], b"").text();
    let refused = metrics
        .lines()
        .find(|l| l.starts_with("lrpc_remote_refused_total{export=\"lrpc:kv/store\"}"))
        .unwrap_or_else(|| panic!("no refusal counter in {metrics}"));
    let n: u64 = refused
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(n >= 1, "{refused}");
    // Without a certificate, and with one another CA signed: refused in the handshake.
    for (name, me) in [("anonymous", None), ("stranger", Some("stranger"))] {
        let (ok, _, err) = call(name, client(&endpoint, "ca.pem", me));
        assert!(!ok, "{name}");
        assert!(err.contains("TLS with tcp:127.0.0.1"), "{name}: {err}");
    }
    // A client that does not trust the server's CA refuses it.
    std::fs::write(dir.join("other-ca.pem"), &other.pem).expect("write");
    let (ok, _, err) = call(
        "distrust",
        client(&endpoint, "other-ca.pem", Some("billing")),
    );
    assert!(!ok);
    assert!(err.contains("TLS with tcp:127.0.0.1"), "{err}");
    // The handshake refusals never reached the export: the count is the intruder's.
    let metrics = request(&http, "GET", "/metrics", &[], b"").text();
    assert!(metrics.contains(refused), "{metrics}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tls_files_that_do_not_load_fail_the_start_with_file_and_line() {
    let dir = scratch("files");
    let ca = Ca::new("deployment");
    std::fs::write(dir.join("ca.pem"), &ca.pem).expect("write");
    ca.issue(&dir, "server", "store", &["localhost"]);
    std::fs::write(dir.join("bad.pem"), "no certificate here\n").expect("write");
    let check = |text: &str| {
        let c = dir.join("lrpc.toml");
        std::fs::write(&c, text).expect("write");
        let c = c.to_str().expect("utf-8").to_string();
        let (ok, out, err) = lrpc(&["serve", &c, "--listen", "127.0.0.1:0"]);
        assert!(!ok, "started: {out}");
        (c, err)
    };
    let (c, err) = check(&SERVER.replace("client-ca = \"ca.pem\"", "client-ca = \"gone.pem\""));
    assert!(err.contains(&format!("{c}:7: client-ca `")), "{err}");
    assert!(err.contains("gone.pem"), "{err}");
    let (c, err) = check(&SERVER.replace("cert = \"server.pem\"", "cert = \"bad.pem\""));
    assert!(err.contains(&format!("{c}:7: cert `")), "{err}");
    assert!(err.contains("BEGIN CERTIFICATE"), "{err}");
    // An allow list needs callers with certificates.
    let (c, err) = check(&SERVER.replace(", client-ca = \"ca.pem\"", ""));
    assert!(err.contains(&format!("{c}:8: `allow` needs")), "{err}");
    // Clear TCP beyond loopback is still refused without TLS.
    let no_tls: String = SERVER
        .lines()
        .filter(|l| !l.starts_with("tls") && !l.starts_with("exports = [{ name"))
        .map(|l| format!("{l}\n"))
        .collect();
    let (c, err) = check(&no_tls);
    assert!(
        err.contains(&format!("{c}:6: `tcp:0.0.0.0:0` is reachable")),
        "{err}"
    );
    // A client's TLS is for tcp: endpoints, and its files load at start too.
    let client = "[remotes.store]\ninterface = \"lrpc:kv/store\"\nendpoint = \"unix:/tmp/x.sock\"\n\
                  tls = { ca = \"ca.pem\" }\n\n[domains.client]\nguest = \"kv-client\"\n\
                  binds = [{ interface = \"lrpc:kv/store\", server = \"store\" }]\n";
    let c = dir.join("client.toml");
    std::fs::write(&c, client).expect("write");
    let c = c.to_str().expect("utf-8");
    let (ok, _, err) = lrpc(&["run", c]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{c}:4: `tls` is for `tcp:` endpoints")),
        "{err}"
    );
    std::fs::write(
        dir.join("client.toml"),
        client
            .replace("unix:/tmp/x.sock", "tcp:127.0.0.1:1")
            .replace("ca.pem", "missing-ca.pem"),
    )
    .expect("write");
    let (ok, _, err) = lrpc(&["run", c]);
    assert!(!ok);
    assert!(err.contains(&format!("{c}:4: ca `")), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
