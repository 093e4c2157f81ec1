//! NATS endpoints use the NATS server's own security: `lrpc serve` and `lrpc run`, the real
//! binary, against a real `nats-server` run with `deploy/nats-server.conf` (two deployments,
//! each confined to its subject prefix) or with a token.
//!
//! Needs `nats-server`: `scripts/test.sh` installs it and names it in `NATS_SERVER`.

mod common;

use std::io::{BufRead as _, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LRPC: &str = env!("CARGO_BIN_EXE_lrpc");

/// How long a start or a run may take on a loaded machine before the test calls it a hang.
const BOUND: Duration = Duration::from_secs(60);

/// The documented NATS server config.
fn documented_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nats-server.conf")
}

fn nats_server_binary() -> PathBuf {
    common::nats_server()
}

/// A fresh directory for one test.
fn scratch(tag: &str) -> PathBuf {
    common::scratch("lrpc-nats-auth", tag)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `nats-server` on loopback with `args` and `env`, once it takes connections; its port.
fn nats_server(args: &[&str], env: &[(&str, &str)]) -> (Killed, u16) {
    let port = free_port();
    let mut child = Killed(
        Command::new(nats_server_binary())
            .args(args)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server"),
    );
    let until = Instant::now() + BOUND;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            panic!("nats-server exited: {status}");
        }
        assert!(Instant::now() < until, "nats-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, port)
}

/// `lrpc serve config` with `env`: the running server once it listens, or what it said on
/// stderr when it stopped instead (bounded: a start that hangs fails the test).
fn serve(config: &Path, env: &[(&str, &str)]) -> Result<Killed, String> {
    let log = config.with_extension("serve.log");
    let mut child = Killed(
        Command::new(LRPC)
            .arg("serve")
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("the log file"))
            .spawn()
            .expect("start lrpc serve"),
    );
    let out = child.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(BOUND)
        .expect("lrpc serve neither started nor stopped");
    if line.starts_with("listening on http://") {
        return Ok(child);
    }
    let _ = child.0.wait();
    Err(std::fs::read_to_string(&log).unwrap_or_default())
}

/// `lrpc run config` with `env`, bounded: (succeeded, stdout, stderr, time taken).
fn run(config: &Path, env: &[(&str, &str)]) -> (bool, String, String, Duration) {
    let out = config.with_extension("run.out");
    let err = config.with_extension("run.err");
    let start = Instant::now();
    let mut child = Killed(
        Command::new(LRPC)
            .arg("run")
            .arg(config)
            .envs(env.iter().copied())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("start lrpc run"),
    );
    let status = loop {
        if let Some(s) = child.0.try_wait().expect("try_wait") {
            break s;
        }
        assert!(start.elapsed() < BOUND, "lrpc run did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status.success(),
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default(),
        start.elapsed(),
    )
}

/// The key-value store served at `endpoint`; `auth` are the endpoint's NATS keys
/// (`, nkey-seed = "a.nk"` …).
fn store_config(dir: &Path, name: &str, endpoint: &str, auth: &str) -> PathBuf {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[domains.store]\nguest = \"kv-server\"\n\
             exports = [{{ interface = \"lrpc:kv/store\", deadline = \"5s\" }}]\n\n\
             [network]\nlisten = [{{ address = \"{endpoint}\"{auth} }}]\n\
             exports = [\"lrpc:kv/store\"]\n"
        ),
    )
    .expect("write");
    config
}

/// The key-value client's self-test against the store at `endpoint`, with `auth` lines in
/// its `[remotes.store]`. A remote call may take a minute: a refusal that only ended at
/// that deadline would show in the time taken.
fn client_config(dir: &Path, name: &str, endpoint: &str, auth: &str) -> PathBuf {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[kernel]\ndeadline = \"300s\"\n\n\
             [remotes.store]\ninterface = \"lrpc:kv/store\"\nendpoint = \"{endpoint}\"\n\
             deadline = \"60s\"\n{auth}\n\
             [domains.client]\nguest = \"kv-client\"\n\
             binds = [{{ interface = \"lrpc:kv/store\", server = \"store\" }}]\n\n\
             [run]\nentry = \"client.selftest\"\n"
        ),
    )
    .expect("write");
    config
}

/// With the documented config: `a` (an nkey) serves under its prefix and calls its own
/// export; a kernel without a credential can neither serve nor call; `b` (a user and a
/// password from the environment) is let in but can neither serve under `a`'s prefix nor
/// call `a`'s export, and learns it at once, not at a deadline.
#[test]
fn the_documented_nats_config_confines_each_deployment_to_its_prefix() {
    let dir = scratch("confined");
    let a = nkeys::KeyPair::new_user();
    std::fs::write(dir.join("a.nk"), a.seed().expect("a seed")).expect("write the seed");
    let b_password = "b-password-for-the-test";
    let conf = documented_config();
    let (_bus, port) = nats_server(
        &["-c", conf.to_str().expect("utf-8 path")],
        &[
            ("LRPC_A_NKEY", &a.public_key()),
            ("LRPC_B_PASSWORD", b_password),
        ],
    );
    let at_a = format!("nats://127.0.0.1:{port}/a");
    let at_b = format!("nats://127.0.0.1:{port}/b");
    let b_env = [("LRPC_B_USER", "b"), ("LRPC_B_PASSWORD", b_password)];
    let b_keys = "user-env = \"LRPC_B_USER\"\npassword-env = \"LRPC_B_PASSWORD\"\n";

    // Without a credential, serving is refused at start, naming the endpoint.
    let open = store_config(&dir, "open-store", &at_a, "");
    let err = serve(&open, &[])
        .err()
        .expect("served without a credential");
    assert!(err.contains(&at_a), "{err}");
    assert!(err.contains("authorization violation"), "{err}");

    // `a` serves under its prefix and calls its own export.
    let store = serve(
        &store_config(&dir, "a-store", &at_a, ", nkey-seed = \"a.nk\""),
        &[],
    )
    .expect("a serves");
    let (ok, out, err, _) = run(
        &client_config(&dir, "a-client", &at_a, "nkey-seed = \"a.nk\""),
        &[],
    );
    assert!(ok, "{err}");
    assert_eq!(out, "0\n", "{err}");

    // A client without a credential is refused on its first call, and says why.
    let (_, out, err, _) = run(&client_config(&dir, "open-client", &at_a, ""), &[]);
    assert_ne!(out, "0\n");
    assert!(
        err.contains(&format!(
            "the NATS server of {at_a} refused: authorization violation"
        )),
        "{err}"
    );

    // `b`'s credential is good: on its own prefix it only finds nobody serving there.
    let (_, out, err, _) = run(&client_config(&dir, "b-own", &at_b, b_keys), &b_env);
    assert_ne!(out, "0\n");
    assert!(err.contains("no server subscribes"), "{err}");
    assert!(!err.contains("refused"), "{err}");

    // `b` can not serve under `a`'s prefix either: the start fails and says why.
    let b_as_a = store_config(
        &dir,
        "b-as-a",
        &at_a,
        ", user-env = \"LRPC_B_USER\", password-env = \"LRPC_B_PASSWORD\"",
    );
    let err = serve(&b_as_a, &b_env)
        .err()
        .expect("b served under a's prefix");
    assert!(
        err.contains(&format!(
            "listening on {at_a}: the NATS server refused: Permissions Violation"
        )),
        "{err}"
    );

    // `b` calling `a`'s export is refused by the server's permissions, well before the
    // call's deadline (60 s).
    let (_, out, err, took) = run(&client_config(&dir, "b-to-a", &at_a, b_keys), &b_env);
    assert_ne!(out, "0\n");
    assert!(
        err.contains(&format!(
            "the NATS server of {at_a} refused: Permissions Violation"
        )),
        "{err}"
    );
    assert!(took < Duration::from_secs(40), "{took:?}: {err}");

    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A NATS server that wants a token: the token comes from the environment variable that
/// `token-env` names, on both sides; unset, the config is refused at its line.
#[test]
fn a_nats_token_comes_from_the_environment() {
    let dir = scratch("token");
    let token = "s3cret-token-for-the-test";
    let (_bus, port) = nats_server(&["--auth", token], &[]);
    let at = format!("nats://127.0.0.1:{port}/t");
    let keys = ", token-env = \"LRPC_TEST_NATS_TOKEN\"";
    let store_toml = store_config(&dir, "store", &at, keys);
    let err = serve(&store_toml, &[])
        .err()
        .expect("served without the token");
    assert!(
        err.contains(&format!(
            "{}:6: the environment variable `LRPC_TEST_NATS_TOKEN` is not set",
            store_toml.display()
        )),
        "{err}"
    );
    let env = [("LRPC_TEST_NATS_TOKEN", token)];
    let store = serve(&store_toml, &env).expect("serves with the token");
    let client = client_config(&dir, "client", &at, "token-env = \"LRPC_TEST_NATS_TOKEN\"");
    let (ok, out, err, _) = run(&client, &env);
    assert!(ok, "{err}");
    assert_eq!(out, "0\n", "{err}");
    // A wrong token is an authorization violation.
    let (_, out, err, _) = run(&client, &[("LRPC_TEST_NATS_TOKEN", "not-the-token")]);
    assert_ne!(out, "0\n");
    assert!(err.contains("authorization violation"), "{err}");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A NATS server that speaks TLS only, its certificate signed by a CA made here: an
/// endpoint `tls://…` with `tls = { ca }` naming that CA serves and calls; without the CA
/// (the system's roots only) the call is refused.
#[test]
fn tls_to_the_nats_server_trusts_the_configured_ca() {
    let dir = scratch("tls");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "test NATS CA");
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("params");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &issuer).expect("certificate");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).expect("write");
    std::fs::write(dir.join("nats.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("nats.key"), key.serialize_pem()).expect("write");
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n}}\n",
            dir.join("nats.pem").display(),
            dir.join("nats.key").display()
        ),
    )
    .expect("write");
    let (_bus, port) = nats_server(&["-c", conf.to_str().expect("utf-8 path")], &[]);
    let at = format!("tls://127.0.0.1:{port}/t");
    let store = serve(
        &store_config(&dir, "store", &at, ", tls = { ca = \"ca.pem\" }"),
        &[],
    )
    .expect("serves over TLS");
    let (ok, out, err, _) = run(
        &client_config(&dir, "client", &at, "tls = { ca = \"ca.pem\" }"),
        &[],
    );
    assert!(ok, "{err}");
    assert_eq!(out, "0\n", "{err}");
    // Not trusting the CA: no connection, and the error names the endpoint.
    let (_, out, err, _) = run(&client_config(&dir, "untrusting", &at, ""), &[]);
    assert_ne!(out, "0\n");
    assert!(
        err.contains(&format!("no peer at {at}")) && err.contains("certificate"),
        "{err}"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
