//! `lrpc serve` and `lrpc run`, the real binary, on loopback with the example deployments.

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::{Reply, request, try_request};

const LRPC: &str = env!("CARGO_BIN_EXE_lrpc");

fn app(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/apps")
        .join(name)
        .join("lrpc.toml")
}

/// Writes `text` as `dir`'s `lrpc.toml`; its path.
fn write_config(dir: &Path, text: &str) -> PathBuf {
    let config = dir.join("lrpc.toml");
    std::fs::write(&config, text).expect("write the config");
    config
}

/// The admin token of the configs that turn the admin endpoint on, and its header.
const ADMIN: (&str, &str) = ("authorization", "Bearer test-admin-token-0123");

/// A fresh directory for one test.
fn scratch(tag: &str) -> PathBuf {
    common::scratch("lrpc-edge", tag)
}

/// The edge server of the deployment in `config`, started in process (the embedding API).
fn start_edge(config: &Path) -> lrpc_runtime::edge::Edge {
    use lrpc_runtime::{config::Config, deploy::Deployment, edge::Edge};
    let deployment = Deployment::start(Config::load(config).expect("config")).expect("start");
    Edge::start(std::sync::Arc::new(deployment)).expect("workers")
}

/// Tests that keep both processors busy (hundreds of MiB streamed through a debug build)
/// take this for writing; every other server holds it for reading. So no timing test runs
/// beside them on a 2-core machine.
static ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Runs the rest of a test alone among the servers of this file.
fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    ALONE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running `lrpc serve`, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    /// Held while the server runs, unless the test runs alone (see [`ALONE`]).
    _beside: Option<std::sync::RwLockReadGuard<'static, ()>>,
}

impl Server {
    fn start(config: &Path) -> Server {
        let beside = ALONE
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut s = Server::start_alone(config);
        s._beside = Some(beside);
        s
    }

    /// [`Server::start`] for a test that holds [`alone`].
    fn start_alone(config: &Path) -> Server {
        // The access lines of thousands of requests would bury the tests' own output.
        let quiet = OsStr::new("info,lrpc::access=off");
        Server::spawn(config, Stdio::inherit(), &[("RUST_LOG", quiet)])
    }

    /// [`Server::start`] with the server's log written to the file `log`.
    fn start_logging(config: &Path, log: &Path) -> Server {
        let beside = ALONE
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let file = std::fs::File::create(log).expect("create the log file");
        let mut s = Server::spawn(config, file.into(), &[("RUST_LOG", OsStr::new("info"))]);
        s._beside = Some(beside);
        s
    }

    /// `lrpc serve config` with `env` set, its log to `stderr`.
    fn spawn(config: &Path, stderr: Stdio, env: &[(&str, &OsStr)]) -> Server {
        Server::spawn_with(config, stderr, env, &[])
    }

    /// [`Server::spawn`] with the options `args` after the config.
    fn spawn_with(config: &Path, stderr: Stdio, env: &[(&str, &OsStr)], args: &[&str]) -> Server {
        let mut command = Command::new(LRPC);
        command
            .arg("serve")
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .stderr(stderr);
        Server::of(command)
    }

    /// The server `command` starts: it waits for the line that says where it listens.
    fn of(mut command: Command) -> Server {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("start lrpc serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the address");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Server {
            child,
            addr,
            _beside: None,
        }
    }

    fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        request(&self.addr, "GET", path, headers, b"")
    }

    /// Waits (bounded) for the process to exit; its exit code.
    fn wait_exit(&mut self) -> Option<i32> {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn metric(&self, name: &str) -> f64 {
        let m = self.get("/metrics", &[]);
        assert_eq!(m.status, 200);
        metric_value(&m.text(), name)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the series whose line starts with `name` (0 when absent).
fn metric_value(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Polls `f` until it returns true, for at most 20 s.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

const ALICE: (&str, &str) = ("authorization", "Bearer letmein");

/// Through the `/api` chain (auth, rewrite, then a handler that greets the user and echoes
/// the body): a greeting with `/v1` dropped, and an echo of a body rewrite upper-cased.
fn greet_and_echo(s: &Server) {
    let r = s.get("/api/v1/greet", &[ALICE]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "hello alice at GET /greet\n");
    assert_eq!(r.header("x-plugin"), Some("hello"));
    let r = request(
        &s.addr,
        "POST",
        "/api/echo",
        &[ALICE, ("x-upper", "1")],
        b"some body",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "hello alice at POST /echo\nSOME BODY");
}

#[test]
fn a_three_plugin_chain_answers_and_a_plugin_can_short_circuit() {
    let s = Server::start(&app("http-chain"));
    // auth → rewrite (drops /v1) → hello; a body goes through the chain, and rewrite
    // replaces it when asked.
    greet_and_echo(&s);
    let big = vec![b'x'; 200_000];
    let r = request(&s.addr, "POST", "/public/big", &[], &big);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body.len(),
        "hello anonymous at POST /big\n".len() + big.len()
    );
    // Without a token auth answers itself; the others never run.
    let r = s.get("/api/v1/greet", &[]);
    assert_eq!(r.status, 401);
    assert_eq!(r.text(), "auth: missing or unknown token\n");
    assert_eq!(s.get("/nowhere", &[]).status, 404);
}

#[test]
fn a_trap_answers_502_a_deadline_504_and_the_plugin_is_restarted() {
    let s = Server::start(&app("http-chain"));
    assert_eq!(s.get("/faulty/ok", &[]).status, 200);
    let r = s.get("/faulty/trap", &[]);
    assert_eq!(r.status, 502);
    assert_eq!(r.text(), "plugin faulty trapped\n");
    // The dead plugin comes back fresh.
    assert!(eventually(|| s.get("/faulty/ok", &[]).status == 200));
    assert!(s.metric("lrpc_domain_restarts_total{domain=\"faulty\"}") >= 1.0);
    // Short requests so far: every route runs on the reactor.
    let on_reactor =
        |route: &str| s.metric(&format!("lrpc_http_route_on_reactor{{route=\"{route}\"}}"));
    assert_eq!((on_reactor("/faulty"), on_reactor("/api")), (1.0, 1.0));
    let r = s.get("/faulty/spin", &[]);
    assert_eq!(r.status, 504);
    assert_eq!(r.text(), "plugin faulty ran past its deadline\n");
    // The spin ran on a reactor thread, which handed its other work over 1 ms in; the 200 ms
    // it took moved the route to its worker pool. The other routes stay on the reactor.
    assert!(s.metric("lrpc_http_reactor_handoffs_total{route=\"/faulty\"}") >= 1.0);
    assert_eq!((on_reactor("/faulty"), on_reactor("/api")), (0.0, 1.0));
    assert!(eventually(|| s.get("/faulty/ok", &[]).status == 200));
    // The other routes never noticed.
    assert_eq!(s.get("/public/x", &[]).status, 200);
    let m = s.get("/metrics", &[]).text();
    assert!(
        metric_value(
            &m,
            "lrpc_plugin_failures_total{domain=\"faulty\",kind=\"trap\"}"
        ) >= 1.0
    );
    assert!(
        metric_value(
            &m,
            "lrpc_plugin_failures_total{domain=\"faulty\",kind=\"deadline\"}"
        ) >= 1.0
    );
    assert!(metric_value(&m, "lrpc_domain_restarts_total{domain=\"faulty\"}") >= 2.0);
}

/// A `wasi:http/incoming-handler` component ends a chain of plugins: it gets the request as
/// the plugins left it, and its answer reaches the client; after a failure the next request
/// gets a fresh instance at once.
#[test]
fn a_wasi_http_component_ends_a_chain() {
    let s = Server::start(&app("wasi-http"));
    // auth adds x-user, rewrite drops /v1 and upper-cases the body: the component sees those
    // changes (it echoes the body it got).
    greet_and_echo(&s);
    // A plugin in front still answers for it.
    assert_eq!(s.get("/api/v1/greet", &[]).status, 401);
    // `/metrics` has the linear memory of the plugins, the component plugin's too (`stamp`,
    // through its Store's limiter: a component has no memory handle). The handler gets a
    // fresh instance per request: between requests it holds none.
    assert_eq!(s.get("/mixed/x", &[ALICE]).status, 200);
    let m = s.get("/metrics", &[]).text();
    for d in ["stamp", "auth"] {
        let bytes = metric_value(&m, &format!("lrpc_domain_memory_bytes{{domain=\"{d}\"}}"));
        assert!(bytes >= 65536.0, "{d}: {bytes}\n{m}");
    }
    assert!(eventually(|| {
        let m = s.get("/metrics", &[]).text();
        metric_value(&m, "lrpc_domain_memory_bytes{domain=\"hello\"}") == 0.0
    }));
    // The component alone, with a body larger than one stream write.
    let big = vec![b'y'; 300_000];
    let r = request(&s.addr, "POST", "/direct/big", &[], &big);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body.len(),
        "hello anonymous at POST /big\n".len() + big.len()
    );
    assert!(r.body.ends_with(&big));
    // A header value past ASCII reaches the handler when it is UTF-8.
    let r = s.get("/direct/x", &[("x-user", "zoë")]);
    assert_eq!(r.text(), "hello zoë at GET /x\n");
    // A trap answers 500 naming it (as `wasmtime serve` answers a handler's trap), a
    // deadline 504; the next request gets a fresh instance after each.
    fails_and_is_restarted(&s, ("/direct", 500), "hello", ("/api/v1/ok", &[ALICE]));
    assert!(s.metric("lrpc_plugin_calls_total{domain=\"hello\"}") >= 6.0);
}

/// A client that makes a handler trap on every request can not flood the log: a domain's
/// failure is reported in full once a minute, the ones between counted.
#[test]
fn repeated_traps_are_reported_once_a_minute() {
    let dir = scratch("trap-log");
    let log = dir.join("server.log");
    let mut s = Server::start_logging(&app("wasi-http"), &log);
    for _ in 0..20 {
        assert_eq!(s.get("/direct/trap", &[]).status, 500);
    }
    assert_eq!(s.get("/direct/x", &[]).status, 200);
    let _ = s.child.kill();
    let _ = s.child.wait();
    let text = std::fs::read_to_string(&log).expect("the log");
    let reports = text.lines().filter(|l| l.contains("trapped")).count();
    assert_eq!(reports, 1, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `domain`, behind `route` (whose `/trap` and `/spin` make it trap and run past its
/// deadline, and whose `/ok` answers), answers `trap_code` (502 for a plugin, 500 for a
/// `wasi:http` handler) and 504 naming itself. A plugin is restarted fresh after each
/// (`again` succeeds once it is back); a handler is not: the very next request gets a fresh
/// instance. `/metrics` counts both failures, the restarts, and that nothing was compiled
/// again.
fn fails_and_is_restarted(
    s: &Server,
    (route, trap_code): (&str, u16),
    domain: &str,
    again: (&str, &[(&str, &str)]),
) {
    let handler = trap_code == 500;
    let compiled = s.metric("lrpc_compilations");
    assert!(compiled >= 1.0);
    let back = |path: &str, headers: &[(&str, &str)]| {
        if handler {
            let r = s.get(path, headers);
            assert_eq!(r.status, 200, "{path} right after a failure: {}", r.text());
        } else {
            assert!(eventually(|| s.get(path, headers).status == 200));
        }
    };
    let r = s.get(&format!("{route}/trap"), &[]);
    let trapped = format!("plugin {domain} trapped\n");
    assert_eq!((r.status, r.text().as_str()), (trap_code, trapped.as_str()));
    back(&format!("{route}/ok"), &[]);
    let r = s.get(&format!("{route}/spin"), &[]);
    let late = format!("plugin {domain} ran past its deadline\n");
    assert_eq!((r.status, r.text().as_str()), (504, late.as_str()));
    back(again.0, again.1);
    let m = s.get("/metrics", &[]).text();
    for kind in ["trap", "deadline"] {
        let series = format!("lrpc_plugin_failures_total{{domain=\"{domain}\",kind=\"{kind}\"}}");
        assert!(metric_value(&m, &series) >= 1.0, "{series}");
    }
    let restarts = format!("lrpc_domain_restarts_total{{domain=\"{domain}\"}}");
    if handler {
        assert_eq!(metric_value(&m, &restarts), 0.0, "{restarts}");
    } else {
        assert!(metric_value(&m, &restarts) >= 2.0, "{restarts}");
    }
    // The fresh instances came from the code compiled at start: nothing was compiled again.
    assert_eq!(metric_value(&m, "lrpc_compilations"), compiled);
}

/// A chain mixes plugins of both kinds: a component domain serving `lrpc:http/plugin`
/// between core-module plugins changes the request, answers it, fails and is restarted.
#[test]
fn a_chain_mixes_core_and_component_plugins() {
    let s = Server::start(&app("wasi-http"));
    // auth (core) → stamp (component) → rewrite (core) → greet (core).
    let r = s.get("/mixed/v1/greet", &[ALICE]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "hello alice at GET /stamped/v1/greet\n");
    // The body crosses the component unchanged, then rewrite upper-cases it.
    let body = vec![b'z'; 100_000];
    let r = request(
        &s.addr,
        "POST",
        "/mixed/echo",
        &[ALICE, ("x-upper", "1")],
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text()
            .starts_with("hello alice at POST /stamped/echo\nZZZ")
    );
    assert_eq!(
        r.body.len(),
        "hello alice at POST /stamped/echo\n".len() + body.len()
    );
    // 1 MiB crosses the component as one copy each way (the typed path), well inside its
    // 200 ms deadline even in a debug build.
    let body = vec![b'y'; 1 << 20];
    let began = std::time::Instant::now();
    let r = request(
        &s.addr,
        "POST",
        "/mixed/echo",
        &[ALICE, ("x-upper", "1")],
        &body,
    );
    eprintln!(
        "1 MiB through auth → stamp → rewrite → greet: {:?}",
        began.elapsed()
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let head = "hello alice at POST /stamped/echo\n";
    assert_eq!(&r.body[..head.len()], head.as_bytes());
    assert!(r.body[head.len()..].iter().all(|b| *b == b'Y'));
    assert_eq!(r.body.len(), head.len() + body.len());
    // The component answers itself; auth, in front of it, still does too.
    let r = s.get("/mixed/deny", &[ALICE]);
    assert_eq!((r.status, r.text().as_str()), (403, "stamp: denied\n"));
    assert_eq!(s.get("/mixed/deny", &[]).status, 401);
    // A component plugin before a wasi:http handler.
    let r = s.get("/stamp/ok", &[]);
    assert_eq!(r.text(), "hello anonymous at GET /stamped/ok\n");
    // Failures: 502 and 504 naming it, then a fresh instance.
    fails_and_is_restarted(&s, ("/stamp", 502), "stamp", ("/mixed/x", &[ALICE]));
}

/// A `wasi:http` handler from a file is reloaded when the file is replaced and through the
/// admin endpoint, with requests running beside it and none failing.
#[test]
fn a_wasi_http_handler_reloads_from_its_file() {
    let dir = scratch("wasi-reload");
    let file = dir.join("handler.wasm");
    std::fs::write(&file, lrpc_artifacts::HTTP_WASI_HELLO).expect("write the component");
    let config = write_config(
        &dir,
        "[domains.handler]\nwasm = \"handler.wasm\"\n\
         exports = [{ interface = \"wasi:http/incoming-handler\" }]\n\
         [serve]\nadmin = true\nadmin-token = \"test-admin-token-0123\"\n\
         [[routes]]\nprefix = \"/\"\nchain = [\"handler\"]\nworkers = 2\n",
    );
    let s = Server::start(&config);
    let reloads = "lrpc_domain_reloads_total{domain=\"handler\"}";
    assert_eq!(s.get("/a", &[]).text(), "hello anonymous at GET /a\n");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let failed = std::sync::Mutex::new(Vec::<String>::new());
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let r = s.get("/a", &[]);
                    if r.status != 200 {
                        failed
                            .lock()
                            .expect("lock")
                            .push(format!("{} {}", r.status, r.text()));
                    }
                }
            });
        }
        let tmp = dir.join("handler.wasm.new");
        std::fs::write(&tmp, lrpc_artifacts::HTTP_WASI_HELLO).expect("write");
        // The same bytes again are no change; a different binary (a custom section appended)
        // is.
        let mut changed = lrpc_artifacts::HTTP_WASI_HELLO.to_vec();
        changed.extend_from_slice(&[0, 4, 3, b'a', b'b', b'c']);
        std::fs::write(&tmp, &changed).expect("write");
        std::fs::rename(&tmp, &file).expect("rename");
        let by_file = eventually(|| s.metric(reloads) >= 1.0);
        let r = request(&s.addr, "POST", "/admin/reload/handler", &[ADMIN], b"");
        stop.store(true, Ordering::Relaxed);
        assert!(by_file, "the file change was not picked up");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "reloaded handler: generation 3\n");
    });
    assert_eq!(*failed.lock().expect("lock"), Vec::<String>::new());
    assert_eq!(s.get("/b", &[]).text(), "hello anonymous at GET /b\n");
    assert!(s.metric(reloads) >= 2.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `http-wasi-once` alone at `/`, on `workers` route workers, with `limits` as its
/// `[domains.once.limits]`: its directory and config.
fn once_config(tag: &str, limits: &str, workers: usize) -> (PathBuf, PathBuf) {
    let dir = scratch(tag);
    let config = write_config(
        &dir,
        &format!(
            "[domains.once]\nguest = \"http-wasi-once\"\n\
             exports = [{{ interface = \"wasi:http/incoming-handler\" }}]\n\
             [domains.once.limits]\n{limits}\
             [[routes]]\nprefix = \"/\"\nchain = [\"once\"]\nworkers = {workers}\n"
        ),
    );
    (dir, config)
}

/// A `wasi:http` handler gets a fresh instance for each request by default: a component
/// that traps on its second request in one instance serves 1,000 in a row, and nothing is
/// compiled per request.
#[test]
fn a_wasi_http_handler_gets_a_fresh_instance_per_request() {
    let (dir, config) = once_config("wasi-fresh", "", 2);
    let s = Server::start(&config);
    let compiled = s.metric("lrpc_compilations");
    assert!(compiled >= 1.0);
    for i in 0..1000 {
        let r = s.get("/x", &[]);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "once\n"),
            "request {i}"
        );
    }
    for _ in 0..4 {
        assert_eq!(s.get("/count", &[]).text(), "1\n");
    }
    let m = s.get("/metrics", &[]).text();
    assert_eq!(metric_value(&m, "lrpc_compilations"), compiled);
    assert_eq!(metric_value(&m, "lrpc_plugin_failures_total"), 0.0);
    // A handler alone runs on the reactor's threads (as tasks).
    assert_eq!(
        metric_value(&m, "lrpc_http_route_on_reactor{route=\"/\"}"),
        1.0
    );
    // Each instance went with its request: no memory is held between requests.
    assert!(eventually(|| {
        let m = s.get("/metrics", &[]).text();
        metric_value(&m, "lrpc_domain_memory_bytes{domain=\"once\"}") == 0.0
    }));
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `reuse = 5` one instance serves up to five requests, never more; an instance that
/// trapped, ran past its deadline, answered nothing or answered an error is never used
/// again, and the next request gets a fresh one at once; nothing is compiled again.
#[test]
fn reuse_serves_up_to_n_requests_on_one_instance() {
    // The deadline leaves room for a worker that a loaded machine leaves waiting.
    let (dir, config) = once_config("wasi-reuse", "reuse = 5\ndeadline = \"1s\"\n", 1);
    let s = Server::start(&config);
    let compiled = s.metric("lrpc_compilations");
    let count = || {
        let r = s.get("/count", &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        r.text().trim().parse::<u32>().expect("a count")
    };
    let counts: Vec<u32> = (0..12).map(|_| count()).collect();
    assert_eq!(counts, [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2]);
    // The very next request after a failure gets a fresh instance (the domain is not
    // restarted, so there is no 503 in between).
    let fresh_after = |path: &str, code: u16, text: &str| {
        assert_eq!(count(), 3, "before {path}");
        let r = s.get(path, &[]);
        assert_eq!((r.status, r.text().as_str()), (code, text), "{path}");
        assert_eq!(count(), 1, "after {path}");
        assert_eq!(count(), 2);
    };
    fresh_after("/trap", 500, "plugin once trapped\n");
    fresh_after("/nothing", 502, "plugin once answered nothing\n");
    fresh_after("/error", 502, "plugin once answered with an error\n");
    fresh_after("/spin", 504, "plugin once ran past its deadline\n");
    // A component that serves one request per instance fails its second on a reused one.
    let r = s.get("/x", &[]);
    assert_eq!(
        (r.status, r.text().as_str()),
        (500, "plugin once trapped\n")
    );
    assert_eq!(s.get("/x", &[]).status, 200);
    let m = s.get("/metrics", &[]).text();
    assert_eq!(
        metric_value(&m, "lrpc_domain_restarts_total{domain=\"once\"}"),
        0.0
    );
    assert_eq!(metric_value(&m, "lrpc_compilations"), compiled);
    // The instance waiting to serve again holds its memory, and `/metrics` counts it.
    let memory = metric_value(&m, "lrpc_domain_memory_bytes{domain=\"once\"}");
    assert!(memory >= 65536.0, "{memory}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The handlers' instance pool reserves its address space at start: where the process may
/// not have that much, `lrpc serve` stops at once with an error that says so.
#[test]
fn a_handler_pool_that_can_not_be_reserved_stops_the_start() {
    let (dir, config) = once_config("wasi-pool", "", 2);
    // 4 GiB: enough for the rest of the server, far from the 32 GiB the pool's 8 memories take.
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\" serve \"$1\" --listen 127.0.0.1:0")
        .arg(LRPC)
        .arg(&config)
        .output()
        .expect("run lrpc under a limit");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("lrpc.toml:1: wasi:http handler `once`")
            && err.contains("reserving the address space of a pool of 4 instances"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A route's `reuse` takes the place of its handler's, on that route only.
#[test]
fn a_route_may_set_its_own_reuse() {
    let dir = scratch("wasi-route-reuse");
    let config = write_config(
        &dir,
        "[domains.once]\nguest = \"http-wasi-once\"\n\
         exports = [{ interface = \"wasi:http/incoming-handler\" }]\n\
         [domains.once.limits]\nreuse = 4\n\
         [[routes]]\nprefix = \"/two\"\nchain = [\"once\"]\nworkers = 1\nreuse = 2\n\
         [[routes]]\nprefix = \"/four\"\nchain = [\"once\"]\nworkers = 1\n",
    );
    let s = Server::start(&config);
    let counts = |route: &str| -> Vec<String> {
        (0..6)
            .map(|_| s.get(&format!("{route}/count"), &[]).text())
            .collect()
    };
    assert_eq!(counts("/two"), ["1\n", "2\n", "1\n", "2\n", "1\n", "2\n"]);
    assert_eq!(counts("/four"), ["1\n", "2\n", "3\n", "4\n", "1\n", "2\n"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Requests side by side on two workers, with `reuse = 3`: no instance serves a fourth.
#[test]
fn reuse_is_never_exceeded_under_concurrent_requests() {
    let (dir, config) = once_config("wasi-reuse-2", "reuse = 3\n", 2);
    let s = Server::start(&config);
    let seen = std::sync::Mutex::new(Vec::<u32>::new());
    std::thread::scope(|sc| {
        for _ in 0..3 {
            sc.spawn(|| {
                for _ in 0..60 {
                    let r = s.get("/count", &[]);
                    assert_eq!(r.status, 200, "{}", r.text());
                    let n = r.text().trim().parse::<u32>().expect("a count");
                    seen.lock().expect("lock").push(n);
                }
            });
        }
    });
    let seen = seen.into_inner().expect("lock");
    assert!(seen.iter().all(|n| (1..=3).contains(n)), "{seen:?}");
    assert!(seen.contains(&3), "instances were reused: {seen:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metrics_move() {
    let s = Server::start(&app("http-chain"));
    let calls = "lrpc_plugin_calls_total{domain=\"hello\"}";
    let ok = "lrpc_http_requests_total{route=\"/api\",code=\"200\"}";
    let before = (s.metric(calls), s.metric(ok));
    for _ in 0..3 {
        assert_eq!(s.get("/api/x", &[ALICE]).status, 200);
    }
    let m = s.get("/metrics", &[]).text();
    assert_eq!(metric_value(&m, calls), before.0 + 3.0);
    assert_eq!(metric_value(&m, ok), before.1 + 3.0);
    assert!(
        metric_value(
            &m,
            "lrpc_http_request_duration_seconds_count{route=\"/api\"}"
        ) >= 3.0
    );
    assert!(metric_value(&m, "lrpc_domain_memory_bytes{domain=\"hello\"}") > 0.0);
}

#[test]
fn hot_reload_under_concurrent_requests_drops_none() {
    let dir = scratch("reload");
    let plugin = dir.join("handler.wasm");
    std::fs::write(&plugin, lrpc_artifacts::HTTP_HELLO).expect("write the plugin");
    let config = write_config(
        &dir,
        "[domains.handler]\nwasm = \"handler.wasm\"\nreplicas = 2\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [serve]\nadmin = true\nadmin-token = \"test-admin-token-0123\"\n\
         [[routes]]\nprefix = \"/\"\nchain = [\"handler\"]\nworkers = 3\n",
    );
    let s = Server::start(&config);
    assert!(s.get("/a", &[]).text().starts_with("hello"));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let failed = AtomicUsize::new(0);
    let first_failure = std::sync::Mutex::new(None::<String>);
    let done = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for _ in 0..3 {
            sc.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let r = s.get("/a", &[]);
                    // hello's greeting, or auth's refusal (no token) once swapped in.
                    let answered = match r.status {
                        200 => r.text().starts_with("hello"),
                        401 => r.text().starts_with("auth: "),
                        _ => false,
                    };
                    if !answered {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let mut f = first_failure.lock().expect("lock");
                        f.get_or_insert_with(|| format!("{} {}", r.status, r.text()));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Replace the file (by a rename, as deploy tools do): the watcher reloads it.
        let tmp = dir.join("handler.wasm.new");
        // (auth: a plugin of the same interface version as hello.)
        std::fs::write(&tmp, lrpc_artifacts::HTTP_AUTH).expect("write");
        std::fs::rename(&tmp, &plugin).expect("rename");
        let swapped = eventually(|| s.get("/a", &[]).text().starts_with("auth: "));
        // And back, through the admin endpoint.
        std::fs::write(&tmp, lrpc_artifacts::HTTP_HELLO).expect("write");
        let r = request(&s.addr, "POST", "/admin/reload/handler", &[ADMIN], b"");
        let admin_ok = r.status == 200 && s.get("/a", &[]).text().starts_with("auth: ");
        std::fs::rename(&tmp, &plugin).expect("rename");
        let back = eventually(|| s.get("/a", &[]).text().starts_with("hello"));
        stop.store(true, Ordering::Relaxed);
        assert!(swapped, "the file change was not picked up");
        assert!(admin_ok, "admin reload: {} {}", r.status, r.text());
        assert!(back, "the second file change was not picked up");
    });
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed during reloads, the first with {:?}",
        first_failure.lock().expect("lock")
    );
    assert!(done.load(Ordering::Relaxed) > 0);
    assert!(s.metric("lrpc_domain_reloads_total{domain=\"handler\"}") >= 3.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn requests_wait_for_a_shared_plugin_s_restart_instead_of_failing() {
    // Two routes share one plugin. A request on one route crashes it; the requests that
    // reach the other route meanwhile find their bindings revoked. They wait for the fresh
    // instance (50 ms of backoff here, within their 2 s deadline) rather than answer 503.
    let dir = scratch("wait-restart");
    let config = write_config(
        &dir,
        "[domains.faulty]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"2s\" }]\n\
         [[routes]]\nprefix = \"/crash\"\nchain = [\"faulty\"]\n\
         [[routes]]\nprefix = \"/other\"\nchain = [\"faulty\"]\n",
    );
    let s = Server::start(&config);
    let addr = s.addr.clone();
    // Seats on the other route, bound to the first generation.
    let burst = |n: usize| -> Vec<u16> {
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let addr = addr.clone();
                std::thread::spawn(move || request(&addr, "GET", "/other/ok", &[], b"").status)
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a request"))
            .collect()
    };
    assert!(burst(8).iter().all(|&c| c == 200));
    for round in 0..3 {
        let r = s.get("/crash/trap", &[]);
        assert_eq!(r.status, 502, "{}", r.text());
        let codes = burst(8);
        assert!(
            codes.iter().all(|&c| c == 200),
            "round {round}: the other route answered {codes:?} while the plugin restarted"
        );
    }
    assert!(s.metric("lrpc_domain_restarts_total{domain=\"faulty\"}") >= 3.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

#[test]
fn a_crashed_plugin_gives_its_memory_back() {
    // A plugin with no memory limit fills 256 MiB and traps, four times. Each time the
    // kernel terminates it and a fresh generation takes over; the dead one's memory must go
    // back to the system, not stay with the handles that still name the old domain.
    let dir = scratch("crash-memory");
    let config = write_config(
        &dir,
        "[domains.faulty]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"10s\" }]\n\
         [[routes]]\nprefix = \"/faulty\"\nchain = [\"faulty\"]\n",
    );
    let s = Server::start(&config);
    // Several seats bound to the first generation: each keeps its binding, and so a handle
    // to that domain, until its next request.
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let addr = s.addr.clone();
            std::thread::spawn(move || request(&addr, "GET", "/faulty/ok", &[], b"").status)
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("a request"), 200);
    }
    let before = rss(s.child.id());
    for _ in 0..4 {
        let r = s.get("/faulty/fill/256", &[]);
        assert_eq!(r.status, 502, "{}", r.text());
        assert!(eventually(|| s.get("/faulty/ok", &[]).status == 200));
    }
    let after = rss(s.child.id());
    assert!(
        after < before + (64 << 20),
        "RSS grew from {} MiB to {} MiB over four crashes of a 256 MiB plugin",
        before >> 20,
        after >> 20
    );
    // The gauge says what the live generation holds, not the dead ones.
    assert!(s.metric("lrpc_domain_memory_bytes{domain=\"faulty\"}") < (64 << 20) as f64);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A chain whose three plugins take the body (a component that reads it whole, a core
/// plugin that upper-cases it, a core plugin that echoes it), behind a `max-body` of 16 MiB;
/// `extra` goes under `[serve]`.
fn large_body_chain(tag: &str, extra: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(tag);
    let config = write_config(
        &dir,
        &format!(
            "[serve]\nmax-body = 16777216\n{extra}\n\
             [domains.stamp]\nguest = \"comp-http-stamp\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\" }}]\n\
             [domains.rewrite]\nguest = \"http-rewrite\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\" }}]\n\
             [domains.hello]\nguest = \"http-hello\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\" }}]\n\
             [[routes]]\nprefix = \"/big\"\nchain = [\"stamp\", \"rewrite\", \"hello\"]\n"
        ),
    );
    (dir, config)
}

/// Sends a few small requests, then `n` POSTs of 15 MiB through [`large_body_chain`]'s
/// route, each echoed upper-cased; the RSS after the small ones.
fn small_then_large(s: &Server, n: usize) -> u64 {
    for _ in 0..5 {
        let r = request(
            &s.addr,
            "POST",
            "/big/x",
            &[("x-upper", "1")],
            &[b'a'; 1024],
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // Twice: the first scrape makes the metrics' own records.
    s.metric("lrpc_memory_bytes");
    std::thread::sleep(Duration::from_millis(300));
    let baseline = rss(s.child.id());
    let body = vec![b'b'; 15 << 20];
    for i in 0..n {
        let r = request(&s.addr, "POST", "/big/x", &[("x-upper", "1")], &body);
        assert_eq!(
            r.status,
            200,
            "request {i}: {}",
            String::from_utf8_lossy(&r.body[..r.body.len().min(200)])
        );
        assert!(
            r.body.len() >= body.len() && r.body.ends_with(b"BBBB"),
            "request {i}: {} bytes came back",
            r.body.len()
        );
    }
    baseline
}

#[test]
fn memory_taken_by_large_bodies_comes_back() {
    // Twenty 15 MiB bodies through three plugins grow their linear memories, the edge
    // driver's, and the segments between them past the default `recycle-above` (16 MiB):
    // each grown domain is replaced after its request, so the process's memory goes back
    // to about where it was before the peak, without a failure or a restart.
    let _alone = alone();
    let (dir, config) = large_body_chain("recycle", "");
    let s = Server::start_alone(&config);
    let baseline = rss(s.child.id());
    let baseline = baseline.max(small_then_large(&s, 20));
    let peak = rss(s.child.id());
    let allowed = (baseline + baseline / 5).max(baseline + (16 << 20));
    let until = Instant::now() + Duration::from_secs(30);
    let mut now = rss(s.child.id());
    while now > allowed && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        now = rss(s.child.id());
    }
    let m = s.get("/metrics", &[]).text();
    eprintln!(
        "RSS: {} MiB before, {} MiB after the last request, {} MiB at the end; metrics:\n{}",
        baseline >> 20,
        peak >> 20,
        now >> 20,
        m.lines()
            .filter(|l| l.starts_with("lrpc_")
                && (l.contains("memory") || l.contains("recycled") || l.contains("segment")))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        now <= allowed,
        "RSS stayed at {} MiB after the peak (baseline {} MiB)",
        now >> 20,
        baseline >> 20
    );
    let recycled = |d: &str| {
        metric_value(
            &m,
            &format!("lrpc_domain_recycled_total{{domain=\"{d}\",reason=\"memory\"}}"),
        )
    };
    for d in ["stamp", "rewrite", "edge-driver"] {
        assert!(recycled(d) >= 1.0, "{d} was never recycled");
    }
    // A recycle is not a fault: nothing restarted, no call failed.
    assert_eq!(metric_value(&m, "lrpc_domain_restarts_total"), 0.0);
    assert_eq!(metric_value(&m, "lrpc_plugin_failures_total"), 0.0);
    // The total the metrics give tracks what the process holds: at the end no more than
    // what it held over its idle baseline at the start, give or take.
    let total = metric_value(&m, "lrpc_memory_bytes ");
    assert!(
        total > 0.0 && total < (96 << 20) as f64,
        "lrpc_memory_bytes {total}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_memory_metric_accounts_for_what_large_bodies_hold() {
    // With recycling off, the memory a peak takes stays (wasm memories never shrink): what
    // the process grew by must show in `lrpc_memory_bytes`, within about 10%.
    let _alone = alone();
    let (dir, config) = large_body_chain("metric", "recycle-above = false");
    let s = Server::start_alone(&config);
    let before = s.metric("lrpc_memory_bytes ");
    let baseline = small_then_large(&s, 20);
    let total = s.metric("lrpc_memory_bytes ");
    let before = before.max(0.0);
    std::thread::sleep(Duration::from_millis(300));
    let now = rss(s.child.id());
    let grew = now.saturating_sub(baseline) as f64;
    let counted = total - before;
    eprintln!(
        "RSS grew by {} MiB; lrpc_memory_bytes by {} MiB (to {} MiB); segments {} MiB",
        (grew as u64) >> 20,
        (counted as u64) >> 20,
        (total as u64) >> 20,
        (s.metric("lrpc_kernel_segment_bytes ") as u64) >> 20,
    );
    assert!(
        grew > (64 << 20) as f64,
        "the peak took only {} MiB",
        (grew as u64) >> 20
    );
    let slack = (counted * 0.1).max((16 << 20) as f64);
    assert!(
        (grew - counted).abs() <= slack,
        "RSS grew by {} MiB, the metric by {} MiB",
        (grew as u64) >> 20,
        (counted as u64) >> 20
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_finishes_requests_in_flight_and_exits_0() {
    // A deadline far beyond the request's 50 ms of work: on a loaded machine (the other
    // tests' servers run beside this one) that work may take several times as long, and what
    // is tested here is the shutdown, not the deadline.
    let dir = scratch("sigterm");
    let config = write_config(
        &dir,
        "[domains.faulty]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"10s\" }]\n\
         [[routes]]\nprefix = \"/faulty\"\nchain = [\"faulty\"]\n",
    );
    let mut s = Server::start(&config);
    let addr = s.addr.clone();
    let slow = std::thread::spawn(move || request(&addr, "GET", "/faulty/busy/50", &[], b""));
    // The signal comes while the request is in the plugin.
    assert!(eventually(|| s
        .metric("lrpc_http_requests_in_flight{route=\"/faulty\"}")
        >= 1.0));
    let kill = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let r = slow.join().expect("the slow request");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.wait_exit(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM is caught from the moment the server says it listens: a service manager that
/// stops what it just started gets a clean exit, not a process killed by the signal.
#[test]
fn sigterm_as_soon_as_the_server_listens_exits_0() {
    let dir = scratch("sigterm-early");
    let config = write_config(
        &dir,
        "[domains.hello]\nguest = \"http-hello\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [[routes]]\nprefix = \"/hello\"\nchain = [\"hello\"]\n",
    );
    for _ in 0..5 {
        let mut s = Server::start(&config);
        sigterm(&s);
        assert_eq!(
            s.wait_exit(),
            Some(0),
            "killed by the signal, not shut down"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A config whose `/faulty` route's plugin (two replicas) may run for an hour per call,
/// with `workers` workers, a `/hello` route beside it, and `[serve]` lines `serve`.
fn spin_config(dir: &Path, workers: usize, serve: &str) -> PathBuf {
    write_config(
        dir,
        &format!(
            "[serve]\n{serve}\n[domains.faulty]\nguest = \"http-faulty\"\nreplicas = 2\n\
             exports = [{{ interface = \"lrpc:http/plugin\", deadline = \"3600s\" }}]\n\
             [domains.hello]\nguest = \"http-hello\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\" }}]\n\
             [[routes]]\nprefix = \"/faulty\"\nchain = [\"faulty\"]\nworkers = {workers}\n\
             [[routes]]\nprefix = \"/hello\"\nchain = [\"hello\"]\n"
        ),
    )
}

/// Sends SIGTERM to the server.
fn sigterm(s: &Server) {
    let kill = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
}

/// Calls that would run for an hour do not hold the shutdown: at the end of the grace (2 s)
/// the two spinning in the plugin (one on each worker, both processors busy) are
/// terminated and a third, queued for a worker, is not started; all three clients get 503,
/// the process exits 0 within the grace and a second (asserted with a loaded machine's
/// margin: 6 s in all), and the log says what happened.
#[test]
fn sigterm_terminates_calls_still_running_at_the_end_of_the_grace() {
    let dir = scratch("sigterm-spin");
    let config = spin_config(&dir, 2, "shutdown-grace = \"2s\"");
    let log = dir.join("log");
    let mut s = Server::start_logging(&config, &log);
    // A request of half a second moves the route off the reactor to its two workers.
    assert_eq!(s.get("/faulty/busy/500", &[]).status, 200);
    let on_reactor = "lrpc_http_route_on_reactor{route=\"/faulty\"}";
    assert!(eventually(|| s.metric(on_reactor) == 0.0));
    let spins: Vec<_> = (0..3)
        .map(|_| {
            let addr = s.addr.clone();
            std::thread::spawn(move || request(&addr, "GET", "/faulty/spin", &[], b""))
        })
        .collect();
    let in_flight = "lrpc_http_requests_in_flight{route=\"/faulty\"}";
    assert!(eventually(|| s.metric(in_flight) >= 3.0));
    let start = Instant::now();
    sigterm(&s);
    assert_eq!(s.wait_exit(), Some(0));
    let took = start.elapsed();
    assert!(took < Duration::from_secs(6), "exited after {took:?}");
    // Not before the grace: the calls were running, not finished.
    assert!(took >= Duration::from_millis(1900), "exited after {took:?}");
    for t in spins {
        let r = t.join().expect("a spinning request");
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.text(), "shutting down\n");
    }
    let log = std::fs::read_to_string(&log).expect("the log");
    assert!(
        log.contains(
            "2 calls still running in plugins or handlers were terminated and 1 queued \
             requests answered 503"
        ),
        "{log}"
    );
    assert!(!log.contains("restarted"), "{log}");
    // The workers stopped: none was left to the end of the process.
    assert!(
        log.contains("shut down at the end of the grace period") && !log.contains("were left"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `wasi:http` handler computing under an hour's deadline is stopped at the end of the
/// grace too: its client gets 503, its worker stops (the log says none was left running),
/// and the process exits 0 within 6 s of SIGTERM with a 2 s grace.
#[test]
fn sigterm_stops_a_wasi_http_handler_still_running_at_the_end_of_the_grace() {
    let dir = scratch("sigterm-handler");
    let config = write_config(
        &dir,
        "[serve]\nshutdown-grace = \"2s\"\n\
         [domains.hello]\nguest = \"http-wasi-hello\"\n\
         exports = [{ interface = \"wasi:http/incoming-handler\" }]\n\
         [domains.hello.limits]\ndeadline = \"3600s\"\n\
         [[routes]]\nprefix = \"/direct\"\nchain = [\"hello\"]\n",
    );
    let log = dir.join("log");
    let mut s = Server::start_logging(&config, &log);
    let addr = s.addr.clone();
    let spin = std::thread::spawn(move || request(&addr, "GET", "/direct/spin", &[], b""));
    let in_flight = "lrpc_http_requests_in_flight{route=\"/direct\"}";
    assert!(eventually(|| s.metric(in_flight) >= 1.0));
    let start = Instant::now();
    sigterm(&s);
    assert_eq!(s.wait_exit(), Some(0));
    let took = start.elapsed();
    assert!(took < Duration::from_secs(6), "exited after {took:?}");
    let r = spin.join().expect("the spinning request");
    assert_eq!(r.status, 503, "{}", r.text());
    let log = std::fs::read_to_string(&log).expect("the log");
    assert!(log.contains("1 calls still running"), "{log}");
    assert!(
        log.contains("shut down at the end of the grace period") && !log.contains("were left"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A WASI 0.3 handler is stopped at the end of the grace too, whether its guest code
/// computes (`/spin`) or waits (for a backend that never answers): both clients get 503, and
/// the process exits 0 within 6 s of SIGTERM with a 2 s grace.
#[test]
fn sigterm_stops_a_wasi_p3_handler_computing_or_waiting_at_the_end_of_the_grace() {
    // Takes connections (the kernel's backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dir = scratch("sigterm-p3");
    let config = write_config(
        &dir,
        &format!(
            "[serve]\nshutdown-grace = \"2s\"\n\
             [domains.p3]\nguest = \"http-wasi-p3-hello\"\n\
             exports = [{{ interface = \"wasi:http/incoming-handler\" }}]\n\
             [domains.p3.limits]\ndeadline = \"3600s\"\n\
             [domains.p3.wasi]\nhttp = [\"http://127.0.0.1:{}\"]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"p3\"]\nworkers = 2\n",
            silent.local_addr().expect("address").port()
        ),
    );
    let log = dir.join("log");
    let mut s = Server::start_logging(&config, &log);
    let addr = s.addr.clone();
    let spin = std::thread::spawn(move || request(&addr, "GET", "/spin", &[], b""));
    let addr = s.addr.clone();
    let target = format!("http://{}/", silent.local_addr().expect("address"));
    let waiting = std::thread::spawn(move || {
        request(
            &addr,
            "GET",
            "/proxy",
            &[("x-target", target.as_str())],
            b"",
        )
    });
    let in_flight = "lrpc_http_requests_in_flight{route=\"/\"}";
    assert!(eventually(|| s.metric(in_flight) >= 2.0));
    let start = Instant::now();
    sigterm(&s);
    assert_eq!(s.wait_exit(), Some(0));
    let took = start.elapsed();
    assert!(took < Duration::from_secs(6), "exited after {took:?}");
    for t in [spin, waiting] {
        let r = t.join().expect("a request");
        assert_eq!(r.status, 503, "{}", r.text());
    }
    let log = std::fs::read_to_string(&log).expect("the log");
    assert!(
        log.contains("shut down at the end of the grace period"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// At SIGTERM a connection that sent half a request head, and an idle keep-alive one, are
/// closed at once (well within the 10 s grace, while a request in flight keeps the server
/// in it); that request's client gets 503 when the grace ends.
#[test]
fn sigterm_closes_half_sent_heads_and_idle_connections_at_once() {
    let dir = scratch("sigterm-half");
    let config = spin_config(
        &dir,
        1,
        "header-timeout = \"60s\"\nshutdown-grace = \"10s\"",
    );
    let mut s = Server::start(&config);
    let addr = s.addr.clone();
    let spin = std::thread::spawn(move || request(&addr, "GET", "/faulty/spin", &[], b""));
    let in_flight = "lrpc_http_requests_in_flight{route=\"/faulty\"}";
    assert!(eventually(|| s.metric(in_flight) >= 1.0));
    let mut half = TcpStream::connect(&s.addr).expect("connect");
    half.write_all(b"GET /faulty/x HTTP/1.1\r\nhost: a\r\n")
        .expect("send half a head");
    let mut idle = TcpStream::connect(&s.addr).expect("connect");
    idle.write_all(b"GET /hello/x HTTP/1.1\r\nhost: a\r\n\r\n")
        .expect("send a request");
    let mut r = BufReader::new(idle.try_clone().expect("clone"));
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 200);
    let n: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .expect("a length");
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).expect("the body");
    // Both reach the server before the signal.
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    sigterm(&s);
    assert!(
        closed_within(&mut half, Duration::from_secs(3)),
        "half a head"
    );
    assert!(closed_within(&mut idle, Duration::from_secs(3)), "idle");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    // Closed by the server in its grace, not by its exit.
    assert_eq!(s.child.try_wait().expect("try_wait"), None);
    let r = spin.join().expect("the spinning request");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        start.elapsed() >= Duration::from_millis(9900),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(s.wait_exit(), Some(0));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn lrpc(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(LRPC).args(args).output().expect("run lrpc");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn run_the_key_value_app() {
    let config = app("kv");
    let c = config.to_str().expect("utf-8 path");
    let (ok, out, err) = lrpc(&["run", c]);
    assert!(ok, "{err}");
    assert_eq!(out, "0\n");
    let (ok, out, err) = lrpc(&[
        "run",
        c,
        "--call",
        "lrpc:kv/store.put",
        "\"greeting\"",
        "\"hi\"",
        "text",
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, "ok(1)\n");
    let (ok, out, err) = lrpc(&["run", c, "--call", "lrpc:kv/store.get", "\"missing\""]);
    assert!(ok, "{err}");
    assert_eq!(out, "err(not-found(\"missing\"))\n");
    let (ok, out, err) = lrpc(&["run", c, "--call", "lrpc:kv/store.measure", "'a', -21, 3.0"]);
    assert!(ok, "{err}");
    assert_eq!(out, "('b', -42, 1.5)\n");
    let (ok, _, err) = lrpc(&["run", c, "--call", "lrpc:kv/store.put", "7"]);
    assert!(!ok);
    assert!(err.contains("parameter `key`"), "{err}");
}

/// Two deployments in two processes: `lrpc serve` serves the key-value store to the network
/// (`[network]`), and `lrpc run` runs the key-value client against it through `[remotes]`:
/// the client's stub binds by name and the kernel forwards its calls over wRPC.
#[test]
fn run_the_key_value_client_against_a_remote_store() {
    let dir = scratch("remote");
    let app = app("kv-remote").with_file_name("server.toml");
    let server = dir.join("server.toml");
    let text = std::fs::read_to_string(&app).expect("the example server config");
    std::fs::write(
        &server,
        text.replace("tcp:127.0.0.1:7000", "tcp:127.0.0.1:0")
            .replace("127.0.0.1:8081", "127.0.0.1:0"),
    )
    .expect("write");
    let mut child = Command::new(LRPC)
        .arg("serve")
        .arg(&server)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lrpc serve");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = [String::new(), String::new()];
    for l in &mut lines {
        out.read_line(l).expect("read a line");
    }
    let mut s = Server {
        child,
        addr: lines[0]
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {:?}", lines[0]))
            .to_string(),
        _beside: None,
    };
    let endpoint = lines[1]
        .trim()
        .strip_prefix("exports on ")
        .unwrap_or_else(|| panic!("unexpected second line {:?}", lines[1]))
        .to_string();
    let client = dir.join("client.toml");
    let text = std::fs::read_to_string(app.with_file_name("client.toml")).expect("client");
    std::fs::write(&client, text.replace("tcp:127.0.0.1:7000", &endpoint)).expect("write");
    let c = client.to_str().expect("utf-8 path");
    // The client's self-test runs against the remote store (0 = every check passed).
    let (ok, out, err) = lrpc(&["run", c]);
    assert!(ok, "{err}");
    assert_eq!(out, "0\n");
    // A call from the command line takes the same way; the store is the one the self-test
    // filled, in the other process.
    let (ok, out, err) = lrpc(&["run", c, "--call", "lrpc:kv/store.keys", "some(\"bin-1\")"]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "[\"bin-1\", \"bin-100000\", \"bin-1499\", \"bin-1500\"]\n"
    );
    // With the server gone, the client's call fails with the call-failed status.
    let _ = s.child.kill();
    let _ = s.child.wait();
    let (ok, _, err) = lrpc(&["run", c, "--call", "lrpc:kv/store.get", "\"x\""]);
    assert!(!ok);
    // The call's status, and the log line naming the peer that is gone.
    assert!(err.contains("the call failed"), "{err}");
    assert!(err.contains(&endpoint), "{err}");
    // A config naming a remote that serves another interface is refused with its line.
    std::fs::write(
        &client,
        format!(
            "[remotes.store]\ninterface = \"lrpc:bench/bench\"\nendpoint = \"{endpoint}\"\n\n\
             [domains.client]\nguest = \"kv-client\"\n\
             binds = [{{ interface = \"lrpc:kv/store\", server = \"store\" }}]\n"
        ),
    )
    .expect("write");
    let (ok, _, err) = lrpc(&["run", c]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{c}:7: remote `store` serves `lrpc:bench/bench`")),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[network] listen`: an address other machines reach is refused in clear at start, with
/// the config's file and line, unless it says `insecure = true`; loopback starts as it is;
/// a `unix:` socket is made with mode 0600.
#[test]
fn network_addresses_other_hosts_reach_need_insecure_and_sockets_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("insecure");
    let head = "[domains.store]\nguest = \"kv-server\"\n\
                exports = [{ interface = \"lrpc:kv/store\" }]\n\n[network]\n";
    let config = write_config(&dir, &format!("{head}listen = [\"tcp:0.0.0.0:0\"]\n"));
    let c = config.to_str().expect("utf-8 path");
    let (ok, out, err) = lrpc(&["serve", c, "--listen", "127.0.0.1:0"]);
    assert!(!ok, "started: {out}");
    assert!(
        err.contains(&format!(
            "{c}:6: `tcp:0.0.0.0:0` is reachable from other machines"
        )),
        "{err}"
    );
    assert!(err.contains("insecure = true"), "{err}");
    let sock = dir.join("kv.sock");
    write_config(
        &dir,
        &format!(
            "{head}listen = [{{ address = \"tcp:0.0.0.0:0\", insecure = true }}, \
             \"tcp:127.0.0.1:0\", \"unix:{}\"]\n",
            sock.display()
        ),
    );
    let mut child = Command::new(LRPC)
        .args(["serve", c, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lrpc serve");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = vec![String::new(); 4];
    for l in &mut lines {
        out.read_line(l).expect("read a line");
    }
    let _server = Server {
        child,
        addr: String::new(),
        _beside: None,
    };
    let exports: Vec<&str> = lines[1..]
        .iter()
        .map(|l| {
            l.trim()
                .strip_prefix("exports on ")
                .unwrap_or_else(|| panic!("unexpected line {l:?}"))
        })
        .collect();
    // Both TCP endpoints take connections (the wildcard one on loopback too).
    for (e, want) in exports[..2].iter().zip(["tcp:0.0.0.0:", "tcp:127.0.0.1:"]) {
        assert!(e.starts_with(want), "{e}");
        let port = e.rsplit(':').next().expect("a port");
        TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
    }
    assert_eq!(exports[2], format!("unix:{}", sock.display()));
    let mode = std::fs::metadata(&sock)
        .expect("the socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    std::os::unix::net::UnixStream::connect(&sock).expect("its owner connects");
    // Nothing is left of the private folder it was made in.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("read the dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    drop(_server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same two deployments behind a NATS server: the store's `[network]` joins a queue group
/// at a `nats://` address, and the client's remote names that address.
#[test]
fn run_the_key_value_client_against_a_store_behind_nats() {
    let nats = common::nats_server();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut bus = Command::new(nats)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nats-server");
    assert!(
        eventually(|| TcpStream::connect(("127.0.0.1", port)).is_ok()),
        "nats-server did not start"
    );
    let url = format!("nats://127.0.0.1:{port}/kv");
    let dir = scratch("nats");
    let app = app("kv-remote").with_file_name("server.toml");
    let server = dir.join("server.toml");
    let text = std::fs::read_to_string(&app).expect("the example server config");
    std::fs::write(
        &server,
        text.replace("tcp:127.0.0.1:7000", &url)
            .replace("127.0.0.1:8081", "127.0.0.1:0"),
    )
    .expect("write");
    let s = Server::start(&server);
    let client = dir.join("client.toml");
    let text = std::fs::read_to_string(app.with_file_name("client.toml")).expect("client");
    std::fs::write(&client, text.replace("tcp:127.0.0.1:7000", &url)).expect("write");
    let (ok, out, err) = lrpc(&["run", client.to_str().expect("utf-8 path")]);
    assert!(ok, "{err}");
    assert_eq!(out, "0\n");
    drop(s);
    let _ = bus.kill();
    let _ = bus.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_the_component_app() {
    let config = app("components");
    let c = config.to_str().expect("utf-8 path");
    let call = |args: &[&str]| {
        let mut all = vec!["run", c, "--call"];
        all.extend_from_slice(args);
        lrpc(&all)
    };
    // The driver's imports were bound by the kernel to the store and the probe.
    let (ok, out, err) = call(&["lrpc:comp/driver.kv-selftest"]);
    assert!(ok, "{err}");
    assert_eq!(out, "ok(13)\n");
    // WASI as the config grants it: the environment variable, and no file system.
    let (ok, out, err) = call(&["lrpc:comp/probe.env", "\"GREETING\""]);
    assert!(ok, "{err}");
    assert_eq!(out, "some(\"hello from the config\")\n");
    let (ok, out, err) = call(&["lrpc:comp/probe.env", "\"HOME\""]);
    assert!(ok, "{err}");
    assert_eq!(out, "none\n");
    let (ok, out, err) = call(&["lrpc:comp/probe.read-file", "\"/etc/hostname\""]);
    assert!(ok, "{err}");
    assert!(out.starts_with("err("), "{out}");
    // The limits: a call that spins is stopped at the domain's deadline.
    let (ok, _, err) = call(&["lrpc:comp/probe.spin"]);
    assert!(!ok);
    assert!(err.contains("deadline"), "{err}");
    let (ok, _, err) = call(&["lrpc:comp/probe.echo", "7"]);
    assert!(!ok);
    assert!(err.contains("arguments of `echo`"), "{err}");
}

#[test]
fn config_mistakes_name_file_and_line() {
    let dir = scratch("config");
    let config = dir.join("bad.toml");
    std::fs::write(
        &config,
        "[domains.a]\nguest = \"http-hello\"\nexports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\n\
         [[routes]]\nprefix = \"/\"\nchain = [\"a\", \"b\"]\n",
    )
    .expect("write");
    let (ok, _, err) = lrpc(&["serve", config.to_str().expect("utf-8")]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{}:7: no domain `b`", config.display())),
        "{err}"
    );
    std::fs::write(
        &config,
        "[domains.a]\nguest = \"kv-server\"\nreplicas = \"two\"\n",
    )
    .expect("write");
    let (ok, _, err) = lrpc(&["run", config.to_str().expect("utf-8")]);
    assert!(!ok);
    assert!(err.contains(&format!("{}:3: ", config.display())), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Mistakes found while starting a deployment (a module that is not wasm, an export of an
/// unknown interface, a client whose server is missing) name the config's file and line
/// and say their reason once.
#[test]
fn start_up_errors_name_file_and_line_once() {
    let dir = scratch("startup");
    std::fs::write(dir.join("garbage.wasm"), b"not a module").expect("write");
    let entry = "(func (export \"lrpc-entry:lrpc:http/plugin#handle\") \
                 (param i32 i32 i32 i32 i32) (result i32) i32.const 0)";
    // 4 GiB of initial memory: no room is left for the A-stacks of a binding.
    let big = format!("(module (memory (export \"memory\") 65536) {entry})");
    std::fs::write(dir.join("big.wat"), big).expect("write");
    let looping = format!(
        "(module (memory (export \"memory\") 17) (func $s (loop br 0)) (start $s) {entry})"
    );
    std::fs::write(dir.join("loop.wat"), looping).expect("write");
    let config = dir.join("app.toml");
    let cases = [
        (
            "[domains.p]\nwasm = \"big.wat\"\n\
             exports = [{ interface = \"lrpc:http/plugin\" }]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"p\"]\n",
            1,
            "leaves no room",
        ),
        (
            "[domains.p]\nwasm = \"loop.wat\"\n\
             exports = [{ interface = \"lrpc:http/plugin\", deadline = \"100ms\" }]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"p\"]\n",
            1,
            "past its deadline",
        ),
        (
            "[domains.p]\nwasm = \"garbage.wasm\"\n\
             exports = [{ interface = \"lrpc:http/plugin\" }]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"p\"]\n",
            1,
            "does not compile",
        ),
        (
            "# a comment\n[domains.kv]\nguest = \"kv-server\"\n\
             exports = [{ interface = \"lrpc:nope/nope\" }]\n",
            4,
            "unknown interface",
        ),
        (
            "[domains.kv]\nguest = \"kv-client\"\n\
             binds = [{ interface = \"lrpc:kv/store\", server = \"kv\" }]\n",
            3,
            "does not export",
        ),
        (
            "[kernel]\ndeadline = \"5s\"\nwit = [\"wit\"]\n",
            3,
            "expected an identifier",
        ),
    ];
    std::fs::create_dir_all(dir.join("wit")).expect("mkdir");
    std::fs::write(
        dir.join("wit/broken.wit"),
        "package a:b;\ninterface i { f: func(; }\n",
    )
    .expect("write");
    for (text, line, reason) in cases {
        std::fs::write(&config, text).expect("write");
        let (ok, _, err) = lrpc(&["run", config.to_str().expect("utf-8")]);
        assert!(!ok, "{text}");
        let at = format!("{}:{line}: ", config.display());
        assert!(err.contains(&at), "{at} in {err}");
        assert_eq!(err.matches(reason).count(), 1, "{reason} once in {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// In process, through the embedding API: a 100 KB body crosses a chain of a plugin that
/// may modify it (`rewrite`) and one that promises `preserved` (`hello`). Neither can reach
/// the caller, so each call lends the body: only the head's strings are copied, the body is
/// read in place on the request segment. The answers stay byte-exact, also when `rewrite`
/// replaces the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_chain_lends_the_body_to_every_plugin() {
    let dir = scratch("borrow");
    let preserved =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guests/http-hello/server.toml");
    // One replica each, so that the copy counters read below are the ones that counted.
    let config = write_config(
        &dir,
        &format!(
            "[domains.rewrite]\nguest = \"http-rewrite\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\" }}]\n\
             [domains.hello]\nguest = \"http-hello\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\", presentation = {:?} }}]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"rewrite\", \"hello\"]\nworkers = 1\n",
            preserved.display().to_string()
        ),
    );
    let edge = start_edge(&config);
    // (in copies, bytes they moved) of a plugin's stubs so far.
    let copied = |plugin: &str| -> (i64, i64) {
        let p = edge.deployment().plugins[plugin].current();
        let core = p.core().expect("a core plugin");
        (
            core.call("lrpc_in_copies", ()).expect("copy count"),
            core.call("lrpc_in_copied_bytes", ()).expect("copied bytes"),
        )
    };
    let (hello0, rewrite0) = (copied("hello"), copied("rewrite"));
    let body: Vec<u8> = (0..100_000u32).map(|i| (i * 31 + 7) as u8).collect();
    const REQUESTS: i64 = 4;
    for k in 0..REQUESTS {
        // Every other request asks `rewrite` for a new (upper-cased) body.
        let upper = k % 2 == 1;
        let headers = if upper {
            vec![("x-upper".to_string(), "1".to_string())]
        } else {
            vec![]
        };
        let a = edge.dispatch("POST", "/in", &headers, &body).await;
        assert_eq!(a.status, 200);
        let sent = if upper {
            body.to_ascii_uppercase()
        } else {
            body.clone()
        };
        assert_eq!(
            a.body,
            [b"hello anonymous at POST /in\n".as_slice(), &sent].concat()
        );
    }
    let (hello, rewrite) = (copied("hello"), copied("rewrite"));
    let (hello, rewrite) = (
        (hello.0 - hello0.0, hello.1 - hello0.1),
        (rewrite.0 - rewrite0.0, rewrite.1 - rewrite0.1),
    );
    eprintln!(
        "per request: hello copied {} bytes, rewrite {} bytes",
        hello.1 / REQUESTS,
        rewrite.1 / REQUESTS
    );
    // One copy into each plugin per request, of the head alone (method, path, header names
    // and values: tens of bytes).
    assert_eq!((hello.0, rewrite.0), (REQUESTS, REQUESTS));
    assert!(rewrite.1 < REQUESTS * 100, "{rewrite:?}");
    assert!(hello.1 < REQUESTS * 100, "{hello:?}");
    edge.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// In process, on a runtime of one worker thread: a request whose guest code computes for
/// 400 ms runs on that thread, hands the thread's other work over at the first epoch tick
/// past 1 ms, and a short request that arrives meanwhile is answered long before the
/// computation ends (without the hand-over it would wait for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_long_request_on_the_reactor_hands_its_other_work_over() {
    let dir = scratch("handoff");
    let config = write_config(
        &dir,
        "[domains.slow]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"10s\" }]\n\
         [domains.hello]\nguest = \"http-hello\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [[routes]]\nprefix = \"/slow\"\nchain = [\"slow\"]\n\
         [[routes]]\nprefix = \"/fast\"\nchain = [\"hello\"]\n",
    );
    let edge = start_edge(&config);
    // Both routes are warm: their first seats were made by `Edge::start`; these requests
    // measure them.
    for path in ["/slow/busy/1", "/fast/x"] {
        assert_eq!(edge.dispatch("GET", path, &[], b"").await.status, 200);
    }
    let t0 = Instant::now();
    let e = edge.clone();
    let slow = tokio::spawn(async move {
        let a = e.dispatch("GET", "/slow/busy/400", &[], b"").await;
        (a.status, t0.elapsed())
    });
    // This thread is not the runtime's worker: it may block while the slow request runs.
    std::thread::sleep(Duration::from_millis(50));
    let e = edge.clone();
    let fast = tokio::spawn(async move {
        let a = e.dispatch("GET", "/fast/x", &[], b"").await;
        (a.status, t0.elapsed())
    });
    let (fast, slow) = (fast.await.expect("fast"), slow.await.expect("slow"));
    eprintln!("fast answered after {:?}, slow after {:?}", fast.1, slow.1);
    assert_eq!((fast.0, slow.0), (200, 200));
    assert!(slow.1 >= Duration::from_millis(300), "{slow:?}");
    assert!(
        fast.1 + Duration::from_millis(150) < slow.1,
        "{fast:?} {slow:?}"
    );
    edge.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// In process: a route whose request ran 200 ms leaves the reactor for its worker; once the
/// worker has served a thousand short requests of it, it comes back; a second departure
/// asks for twice the evidence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_that_left_the_reactor_comes_back_when_its_requests_are_short() {
    use lrpc_runtime::edge::Edge;
    let dir = scratch("return");
    let config = write_config(
        &dir,
        "[domains.slow]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"10s\" }]\n\
         [[routes]]\nprefix = \"/slow\"\nchain = [\"slow\"]\nworkers = 1\n",
    );
    let edge = start_edge(&config);
    fn on_reactor(edge: &Edge) -> f64 {
        metric_value(
            &edge.deployment().metrics.encode(),
            "lrpc_http_route_on_reactor{route=\"/slow\"}",
        )
    }
    // Short requests until the route is back on the reactor; how many it took.
    async fn until_back(edge: &Edge) -> Option<usize> {
        for n in 1..=10_000 {
            assert_eq!(edge.dispatch("GET", "/slow/ok", &[], b"").await.status, 200);
            if on_reactor(edge) == 1.0 {
                return Some(n);
            }
        }
        None
    }
    assert_eq!(edge.dispatch("GET", "/slow/ok", &[], b"").await.status, 200);
    assert_eq!(on_reactor(&edge), 1.0);
    for round in 1..=2 {
        let a = edge.dispatch("GET", "/slow/busy/200", &[], b"").await;
        assert_eq!(a.status, 200);
        assert_eq!(on_reactor(&edge), 0.0, "round {round}");
        let back = until_back(&edge).await;
        eprintln!("round {round}: back on the reactor after {back:?} short requests");
        // Not before the worker has seen a thousand short requests (1024, doubled the second
        // time); a few more when a loaded machine preempts some of them.
        let needed = 1024 << (round - 1);
        assert!(
            back.is_some_and(|n| (needed..3 * needed).contains(&n)),
            "round {round}: {back:?}"
        );
    }
    edge.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The admin endpoint is off unless the config turns it on, then takes only requests that
/// carry its token, and at most one reload per `ADMIN_SPACING`.
#[test]
fn the_admin_endpoint_is_closed_by_default_and_needs_its_token() {
    let dir = scratch("admin");
    std::fs::write(dir.join("handler.wasm"), lrpc_artifacts::HTTP_HELLO).expect("write");
    let domain = "[domains.handler]\nwasm = \"handler.wasm\"\n\
                  exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
                  [[routes]]\nprefix = \"/app\"\nchain = [\"handler\"]\n";
    let config = write_config(&dir, domain);
    let s = Server::start(&config);
    let r = request(&s.addr, "POST", "/admin/reload/handler", &[ADMIN], b"");
    assert_eq!(r.status, 404, "{}", r.text());
    drop(s);

    let config = write_config(
        &dir,
        &format!("[serve]\nadmin = true\nadmin-token = \"test-admin-token-0123\"\n{domain}"),
    );
    let s = Server::start(&config);
    let reload = |headers: &[(&str, &str)]| {
        request(&s.addr, "POST", "/admin/reload/handler", headers, b"").status
    };
    assert_eq!(reload(&[]), 401);
    assert_eq!(
        reload(&[("authorization", "Bearer test-admin-token-0124")]),
        401
    );
    assert_eq!(
        reload(&[("authorization", "Bearer test-admin-token-012")]),
        401
    );
    assert_eq!(reload(&[("authorization", "test-admin-token-0123")]), 401);
    assert_eq!(
        s.metric("lrpc_domain_reloads_total{domain=\"handler\"}"),
        0.0
    );
    // A loop of reloads is paced: the first is taken, the next ones within the spacing
    // are answered 429 (a loaded machine may let one more through: the spacing is 200 ms).
    let statuses: Vec<u16> = (0..5).map(|_| reload(&[ADMIN])).collect();
    assert_eq!(statuses[0], 200, "{statuses:?}");
    assert!(
        statuses.iter().filter(|&&c| c == 429).count() >= 3,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|&c| c == 200 || c == 429),
        "{statuses:?}"
    );
    std::thread::sleep(lrpc_runtime::edge::ADMIN_SPACING * 2);
    assert_eq!(reload(&[ADMIN]), 200);
    // The routes kept answering.
    assert_eq!(s.get("/app/x", &[]).status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A body over the limit is answered 413; a malformed chunked body 400.
#[test]
fn a_malformed_chunked_body_is_a_bad_request_and_a_large_one_too_large() {
    let dir = scratch("framing");
    let config = write_config(
        &dir,
        "[serve]\nmax-body = 1024\n\
         [domains.hello]\nguest = \"http-hello\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [[routes]]\nprefix = \"/\"\nchain = [\"hello\"]\n",
    );
    let s = Server::start(&config);
    let raw = |request: &[u8]| -> String {
        let mut c = TcpStream::connect(&s.addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(30))).ok();
        c.write_all(request).expect("send");
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    let head =
        "POST /x HTTP/1.1\r\nhost: a\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n";
    let bad_size = raw(format!("{head}zz\r\nhello\r\n0\r\n\r\n").as_bytes());
    assert!(bad_size.starts_with("HTTP/1.1 400"), "{bad_size}");
    let no_crlf = raw(format!("{head}5\r\nhelloXX0\r\n\r\n").as_bytes());
    assert!(no_crlf.starts_with("HTTP/1.1 400"), "{no_crlf}");
    let large = raw(format!("{head}800\r\n{}\r\n0\r\n\r\n", "a".repeat(2048)).as_bytes());
    assert!(large.starts_with("HTTP/1.1 413"), "{large}");
    let fine = raw(format!("{head}5\r\nhello\r\n0\r\n\r\n").as_bytes());
    assert!(fine.starts_with("HTTP/1.1 200"), "{fine}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A config serving the hello plugin on `/`, with `serve` added to its `[serve]` table.
fn hello_with(dir: &Path, serve: &str) -> PathBuf {
    write_config(
        dir,
        &format!(
            "[serve]\n{serve}\n[domains.hello]\nguest = \"http-hello\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\" }}]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"hello\"]\n"
        ),
    )
}

/// Files under `dir`, at any depth.
fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => files_under(&e.path()),
                Ok(_) => 1,
                Err(_) => 0,
            })
            .sum()
    })
}

/// Starts `lrpc serve config` with `XDG_CACHE_HOME` at `cache_home`, answers one request,
/// and stops it.
fn serve_once_with_cache_home(config: &Path, cache_home: &Path) {
    let _beside = ALONE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut s = Server::spawn(
        config,
        Stdio::inherit(),
        &[("XDG_CACHE_HOME", cache_home.as_os_str())],
    );
    assert_eq!(s.get("/x", &[]).status, 200);
    let _ = s.child.kill();
    let _ = s.child.wait();
}

/// The compile cache is on by default, in the per-user cache folder (`XDG_CACHE_HOME`
/// here), so that a second start loads compiled code; `cache-dir = false` turns it off.
#[test]
fn compiled_code_is_cached_per_user_by_default() {
    let dir = scratch("compile-cache");
    let on = dir.join("on");
    serve_once_with_cache_home(&hello_with(&dir, ""), &on);
    assert!(
        files_under(&on.join("lrpc")) > 0,
        "nothing cached in {}",
        on.display()
    );

    let off = dir.join("off");
    let config = write_config(
        &dir,
        "[kernel]\ncache-dir = false\n[domains.hello]\nguest = \"http-hello\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [[routes]]\nprefix = \"/\"\nchain = [\"hello\"]\n",
    );
    serve_once_with_cache_home(&config, &off);
    assert_eq!(
        files_under(&off),
        0,
        "cached in {} although off",
        off.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether the server closes `c` (reads end) within `within`.
fn closed_within(c: &mut TcpStream, within: Duration) -> bool {
    c.set_read_timeout(Some(within)).expect("timeout");
    let mut buf = [0u8; 512];
    let start = Instant::now();
    loop {
        match c.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
        if start.elapsed() > within {
            return false;
        }
    }
}

/// Connections that send half a head, nothing, or half a body are closed by their budgets,
/// and a cap on connections keeps real requests answered while stalled ones pile up.
#[test]
fn stalled_connections_are_closed_and_can_not_starve_the_server() {
    let dir = scratch("stalls");
    let config = hello_with(
        &dir,
        "max-connections = 8\nheader-timeout = \"1s\"\nbody-timeout = \"1s\"",
    );
    let s = Server::start(&config);
    // Half a head, and nothing at all: both closed after about a second (margin for a
    // loaded machine: 20 s).
    let mut half = TcpStream::connect(&s.addr).expect("connect");
    half.write_all(b"GET / HTTP/1.1\r\nhost: a\r\nx-half: ")
        .expect("send");
    let mut silent = TcpStream::connect(&s.addr).expect("connect");
    assert!(closed_within(&mut half, Duration::from_secs(20)));
    assert!(closed_within(&mut silent, Duration::from_secs(20)));
    // Half a body: answered 408 once it stalls.
    let mut slow = TcpStream::connect(&s.addr).expect("connect");
    slow.write_all(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\nabc")
        .expect("send");
    slow.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // Far more stalled connections than the cap: a real request still gets through, once
    // the budgets close the stalled ones ahead of it.
    let stalled: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(&s.addr).expect("connect"))
        .collect();
    let r = s.get("/x", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    drop(stalled);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM with a stalled connection open exits at once, not when the connection's
/// budget runs out.
#[test]
fn sigterm_does_not_wait_for_stalled_connections() {
    let dir = scratch("stall-term");
    let config = hello_with(&dir, "header-timeout = \"60s\"\nshutdown-grace = \"2s\"");
    let mut s = Server::start(&config);
    let mut stalled = TcpStream::connect(&s.addr).expect("connect");
    stalled
        .write_all(b"GET / HTTP/1.1\r\nhost: a\r\n")
        .expect("send");
    let idle = TcpStream::connect(&s.addr).expect("connect");
    assert_eq!(s.get("/x", &[]).status, 200);
    let start = Instant::now();
    let kill = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    assert_eq!(s.wait_exit(), Some(0));
    // The grace period (2 s) bounds it; 15 s of margin for a loaded machine, far below the
    // stalled connection's 60 s.
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    drop((stalled, idle));
    let _ = std::fs::remove_dir_all(&dir);
}

/// HTTP/2 with prior knowledge is served on the same port: the server answers the
/// connection preface with its SETTINGS frame instead of resetting the connection. An h2c
/// upgrade is declined cleanly.
#[test]
fn http2_with_prior_knowledge_is_served_and_h2c_upgrade_declined() {
    let dir = scratch("h2");
    let config = hello_with(&dir, "");
    let s = Server::start(&config);
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .expect("preface");
    // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
    c.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).expect("settings");
    let mut head = [0u8; 9];
    c.read_exact(&mut head).expect("a frame back");
    assert_eq!(head[3], 4, "the first frame is SETTINGS: {head:?}");
    // An HTTP/1.1 request asking to upgrade to h2c is answered in HTTP/1.1 (the upgrade is
    // declined, as a server may), not reset or left hanging.
    let r = request(
        &s.addr,
        "GET",
        "/hello/x",
        &[
            ("connection", "Upgrade, HTTP2-Settings"),
            ("upgrade", "h2c"),
            ("http2-settings", "AAMAAABkAAQAoAAAAAIAAAAA"),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A route's own caps: a body over its `max-body` is 413 while a neighbour route takes it,
/// and requests past its `max-in-flight` are answered 503 at once.
#[test]
fn a_route_has_its_own_body_cap_and_request_cap() {
    let dir = scratch("route-caps");
    // The 1.5 s request took over 10 s of wall-clock time on a loaded machine: the plugin's
    // deadline allows 20 s, and the driver's follows the chain's (not the kernel's 10 s).
    let config = write_config(
        &dir,
        "[domains.hello]\nguest = \"http-hello\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [domains.faulty]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"20s\" }]\n\
         [[routes]]\nprefix = \"/small\"\nchain = [\"hello\"]\nmax-body = 100\n\
         [[routes]]\nprefix = \"/large\"\nchain = [\"hello\"]\n\
         [[routes]]\nprefix = \"/one\"\nchain = [\"faulty\"]\nmax-in-flight = 1\n",
    );
    let s = Server::start(&config);
    let body = [b'x'; 200];
    assert_eq!(request(&s.addr, "POST", "/small/a", &[], &body).status, 413);
    assert_eq!(request(&s.addr, "POST", "/large/a", &[], &body).status, 200);
    assert_eq!(
        request(&s.addr, "POST", "/small/a", &[], &body[..50]).status,
        200
    );

    let addr = s.addr.clone();
    let long = std::thread::spawn(move || request(&addr, "GET", "/one/busy/1500", &[], b""));
    assert!(eventually(|| s
        .metric("lrpc_http_requests_in_flight{route=\"/one\"}")
        >= 1.0));
    let refused = s.get("/one/busy/1", &[]);
    assert_eq!(refused.status, 503, "{}", refused.text());
    // Other routes are not held by it.
    assert_eq!(s.get("/large/b", &[]).status, 200);
    assert_eq!(long.join().expect("the long request").status, 200);
    assert_eq!(s.get("/one/busy/1", &[]).status, 200);
    // A path no route serves.
    assert_eq!(s.get("/nowhere", &[]).status, 404);
    // The refusals, answered before any plugin ran, are counted with their route and code,
    // and the 404 with an empty route.
    let text = s.get("/metrics", &[]).text();
    let count = |route: &str, code: u16| {
        metric_value(
            &text,
            &format!("lrpc_http_requests_total{{route=\"{route}\",code=\"{code}\"}}"),
        )
    };
    assert_eq!(count("/small", 413), 1.0, "{text}");
    assert_eq!(count("/small", 200), 1.0, "{text}");
    assert_eq!(count("/one", 503), 1.0, "{text}");
    assert_eq!(count("/one", 200), 2.0, "{text}");
    assert_eq!(count("", 404), 1.0, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The driver that walks a chain outlives the chain's plugins: with the kernel's default
/// deadline at 100 ms, a plugin allowed 20 s that works for about 400 ms answers 200 (not a
/// 500 from a driver that ran out first), and one that runs out its own 1 s deadline answers
/// 504 naming itself. (The work is CPU time: on a loaded 2-core machine 400 ms of it may take
/// seconds, well within 20 s.)
#[test]
fn the_driver_outlives_its_chain_s_deadlines() {
    let dir = scratch("driver-deadline");
    let config = write_config(
        &dir,
        "[kernel]\ndeadline = \"100ms\"\n\
         [domains.slow]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"20s\" }]\n\
         [domains.short]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"1s\" }]\n\
         [[routes]]\nprefix = \"/slow\"\nchain = [\"slow\"]\n\
         [[routes]]\nprefix = \"/short\"\nchain = [\"short\"]\n",
    );
    let s = Server::start(&config);
    for _ in 0..2 {
        let r = s.get("/slow/busy/400", &[]);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = s.get("/short/spin", &[]);
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(r.text().contains("short"), "{}", r.text());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `Expect: 100-continue`: a declared length over the route's body cap is answered 413 at
/// once, without `100 Continue` and before any body is sent; one within it gets
/// `100 Continue`, then the body is read and the request answered.
#[test]
fn expect_100_continue_follows_the_route_s_body_cap() {
    let dir = scratch("continue");
    let config = write_config(
        &dir,
        "[domains.hello]\nguest = \"http-hello\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [[routes]]\nprefix = \"/small\"\nchain = [\"hello\"]\nmax-body = 100\n",
    );
    let s = Server::start(&config);
    let head = |len: usize| {
        format!(
            "POST /small/a HTTP/1.1\r\nhost: x\r\ncontent-length: {len}\r\n\
             expect: 100-continue\r\n\r\n"
        )
    };
    let status_line = |r: &mut BufReader<TcpStream>| {
        let mut line = String::new();
        r.read_line(&mut line).expect("status line");
        line
    };
    // Over the cap: 413 with no body sent and no 100 Continue first.
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    c.write_all(head(1000).as_bytes()).expect("head");
    let mut r = BufReader::new(c.try_clone().expect("clone"));
    assert!(status_line(&mut r).starts_with("HTTP/1.1 413"));
    // Within it: 100 Continue, then the answer once the body is sent.
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    c.write_all(head(50).as_bytes()).expect("head");
    let mut r = BufReader::new(c.try_clone().expect("clone"));
    assert!(status_line(&mut r).starts_with("HTTP/1.1 100"));
    assert_eq!(status_line(&mut r), "\r\n");
    c.write_all(&[b'x'; 50]).expect("body");
    assert!(status_line(&mut r).starts_with("HTTP/1.1 200"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A loopback HTTP/1.1 backend for a handler's outgoing requests: each request (read whole)
/// is counted and answered by `answer`, given its request line, on a thread of its own.
struct Backend {
    addr: std::net::SocketAddr,
    hits: std::sync::Arc<AtomicUsize>,
}

impl Backend {
    fn start(answer: fn(&str, &mut TcpStream)) -> Backend {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a backend");
        let addr = listener.local_addr().expect("its address");
        let hits = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let counted = counted.clone();
                std::thread::spawn(move || {
                    let mut conn = conn;
                    if let Some(line) = read_request(&conn) {
                        counted.fetch_add(1, Ordering::SeqCst);
                        answer(&line, &mut conn);
                    }
                });
            }
        });
        Backend { addr, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Reads one request (its head, and a body by length or in chunks); its request line.
fn read_request(conn: &TcpStream) -> Option<String> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let (mut length, mut chunked) = (0, false);
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 || h == "\r\n" {
            break;
        }
        let h = h.to_ascii_lowercase();
        if let Some(v) = h.strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
        chunked |= h.starts_with("transfer-encoding:") && h.contains("chunked");
    }
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
        }
    } else {
        r.read_exact(&mut vec![0; length]).ok()?;
    }
    Some(line.trim_end().to_string())
}

/// Answers 200 naming the request line.
fn answer_at_once(line: &str, conn: &mut TcpStream) {
    let body = format!("backend saw {line}\n");
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Answers only after 30 s.
fn answer_late(line: &str, conn: &mut TcpStream) {
    std::thread::sleep(Duration::from_secs(30));
    answer_at_once(line, conn);
}

/// Sends its head at once, then a 40-byte body one byte every 250 ms (10 s in all).
fn answer_slowly(_: &str, conn: &mut TcpStream) {
    let head = "HTTP/1.1 200 OK\r\ncontent-length: 40\r\nconnection: close\r\n\r\n";
    if conn.write_all(head.as_bytes()).is_err() {
        return;
    }
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(250));
        if conn.write_all(b"x").is_err() {
            return;
        }
    }
}

/// A route per domain (`/NAME` to domain NAME), each the `http-wasi-proxy` handler with the
/// `http` grant and the deadline given.
fn proxies(dir: &Path, domains: &[(&str, &str, &str)]) -> PathBuf {
    let mut text = String::new();
    for (name, grant, deadline) in domains {
        text.push_str(&format!(
            "[domains.{name}]\nguest = \"http-wasi-proxy\"\n\
             exports = [{{ interface = \"wasi:http/incoming-handler\" }}]\n\
             [domains.{name}.wasi]\nhttp = [{grant}]\n\
             [domains.{name}.limits]\ndeadline = \"{deadline}\"\n\
             [[routes]]\nprefix = \"/{name}\"\nchain = [\"{name}\"]\n"
        ));
    }
    write_config(dir, &text)
}

/// A `wasi:http` handler reaches the origins its `http` grant lists and no other (another
/// port, scheme or host name of the same machine is another origin); with no grant it reaches
/// none. `/metrics` counts each outgoing request by its result.
#[test]
fn a_wasi_http_handler_sends_requests_only_to_granted_origins() {
    let granted = Backend::start(answer_at_once);
    let other = Backend::start(answer_at_once);
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address")
    };
    let dir = scratch("wasi-outgoing");
    let grant = format!(
        "\"http://127.0.0.1:{}\", \"http://{closed}\"",
        granted.addr.port()
    );
    let config = proxies(&dir, &[("proxy", &grant, "5s"), ("closed", "", "5s")]);
    let s = Server::start(&config);
    let via = |route: &str, target: &str| s.get(route, &[("x-target", target)]);

    let r = via("/proxy", &format!("http://{}/hello?x=1", granted.addr));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "backend saw GET /hello?x=1 HTTP/1.1\n");
    assert_eq!(granted.hits(), 1);
    let port = granted.addr.port();
    for denied in [
        format!("http://{}/", other.addr),
        format!("https://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://user@127.0.0.1:{port}/"),
    ] {
        let r = via("/proxy", &denied);
        assert_eq!(
            (r.status, r.text().as_str()),
            (403, "HttpRequestDenied\n"),
            "{denied}"
        );
    }
    // Granted, but nothing listens there: the request fails.
    let r = via("/proxy", &format!("http://{closed}/"));
    assert_eq!((r.status, r.text().as_str()), (502, "ConnectionRefused\n"));
    // No grant, no outgoing HTTP.
    let r = via("/closed", &format!("http://{}/", granted.addr));
    assert_eq!((r.status, r.text().as_str()), (403, "HttpRequestDenied\n"));
    assert_eq!((granted.hits(), other.hits()), (1, 0));

    let m = s.get("/metrics", &[]).text();
    let count = |domain: &str, result: &str| {
        metric_value(
            &m,
            &format!("lrpc_http_outgoing_total{{domain=\"{domain}\",result=\"{result}\"}}"),
        )
    };
    assert_eq!(
        [
            count("proxy", "sent"),
            count("proxy", "denied"),
            count("proxy", "failed")
        ],
        [1.0, 4.0, 1.0],
        "{m}"
    );
    assert_eq!(
        (count("closed", "denied"), count("closed", "sent")),
        (1.0, 0.0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An outgoing request ends by the deadline of the request the handler serves: a backend
/// that answers late, or sends its body slowly, does not hold the handler past it.
#[test]
fn a_wasi_http_handler_s_outgoing_request_ends_by_its_deadline() {
    let late = Backend::start(answer_late);
    let slow = Backend::start(answer_slowly);
    let fast = Backend::start(answer_at_once);
    let dir = scratch("wasi-outgoing-deadline");
    let grant = format!(
        "\"http://{}\", \"http://{}\", \"http://{}\"",
        late.addr, slow.addr, fast.addr
    );
    let config = proxies(&dir, &[("proxy", &grant, "1s")]);
    let s = Server::start(&config);
    let via = |target: String| s.get("/proxy", &[("x-target", &target)]);
    // Requests to the fast backend that did not end well (on a loaded machine).
    let mut missed = 0.0;
    for backend in [&late, &slow] {
        // The handler is up (again, after the deadline stopped it) and sends requests.
        assert!(eventually(|| {
            let ok = via(format!("http://{}/", fast.addr)).status == 200;
            missed += f64::from(u8::from(!ok));
            ok
        }));
        let started = Instant::now();
        let r = via(format!("http://{}/", backend.addr));
        let took = started.elapsed();
        assert_eq!(r.status, 504, "{}", r.text());
        // The deadline is 1 s; the backends would take 10 s or more.
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert_eq!(backend.hits(), 1);
    }
    let m = s.get("/metrics", &[]).text();
    let count = |result: &str| {
        let series = format!("lrpc_http_outgoing_total{{domain=\"proxy\",result=\"{result}\"}}");
        metric_value(&m, &series)
    };
    // The late backend's request failed; the slow one's was sent (its body timed out).
    let failed = count("failed");
    assert!((1.0..=1.0 + missed).contains(&failed), "{m}");
    assert!(count("sent") >= 3.0, "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `http-wasi-stream` at `/` (body cap 300 MiB) and at `/small` (1 MiB), with `deadline`:
/// its directory and config.
fn stream_config(tag: &str, deadline: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(tag);
    let config = write_config(
        &dir,
        &format!(
            "[domains.stream]\nguest = \"http-wasi-stream\"\n\
             exports = [{{ interface = \"wasi:http/incoming-handler\" }}]\n\
             [domains.stream.limits]\ndeadline = \"{deadline}\"\n\
             [[routes]]\nprefix = \"/small\"\nchain = [\"stream\"]\nmax-body = 1048576\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"stream\"]\nmax-body = 314572800\n"
        ),
    );
    (dir, config)
}

/// Byte `i` of the test pattern (the one `http-wasi-stream` generates).
fn pattern(i: u64) -> u8 {
    (i % 251) as u8
}

/// Sends `method path` with `len` pattern bytes of body (chunked when `chunked`), written
/// on a thread of its own by `write`, which may pause; the reader of the reply.
fn send_streaming(
    addr: &str,
    method: &str,
    path: &str,
    len: u64,
    chunked: bool,
    pause: Option<(u64, Duration)>,
) -> (BufReader<TcpStream>, std::thread::JoinHandle<()>) {
    send_streaming_with(addr, method, path, &[], len, chunked, pause)
}

/// [`send_streaming`] with header lines of its own.
fn send_streaming_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    len: u64,
    chunked: bool,
    pause: Option<(u64, Duration)>,
) -> (BufReader<TcpStream>, std::thread::JoinHandle<()>) {
    let c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let framing = if chunked {
        "transfer-encoding: chunked".to_string()
    } else {
        format!("content-length: {len}")
    };
    let extra: String = headers
        .iter()
        .map(|(n, v)| format!("{n}: {v}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{framing}\r\n{extra}\r\n"
    );
    let mut w = c.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        let piece: Vec<u8> = (0..64 * 1024).map(pattern).collect();
        let _ = w.write_all(head.as_bytes());
        let mut at = 0u64;
        while at < len {
            if let Some((when, d)) = pause
                && at == when
            {
                std::thread::sleep(d);
            }
            let skip = (at % 251) as usize;
            let n = (len - at).min((piece.len() - skip) as u64) as usize;
            let sent = if chunked {
                w.write_all(format!("{n:x}\r\n").as_bytes())
                    .and_then(|()| w.write_all(&piece[skip..skip + n]))
                    .and_then(|()| w.write_all(b"\r\n"))
            } else {
                w.write_all(&piece[skip..skip + n])
            };
            if sent.is_err() {
                return;
            }
            at += n as u64;
        }
        if chunked {
            let _ = w.write_all(b"0\r\n\r\n");
        }
    });
    (BufReader::new(c), writer)
}

/// The status and headers of a reply.
fn read_head(r: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).expect("a header line");
        let l = l.trim_end();
        if l.is_empty() {
            return (status, headers);
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
}

/// What a chunked body turned out to be.
#[derive(Debug, Default)]
struct Chunked {
    /// Bytes read.
    len: u64,
    /// Whether they all followed the pattern.
    pattern: bool,
    /// Whether the last chunk came (the body ended properly).
    ended: bool,
}

/// Reads a chunked body as it arrives, checking it against the pattern; `each` is called
/// with the bytes read so far after every chunk.
fn read_chunked(r: &mut BufReader<TcpStream>, mut each: impl FnMut(u64)) -> Chunked {
    let mut out = Chunked {
        pattern: true,
        ..Chunked::default()
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut size = String::new();
        if r.read_line(&mut size).unwrap_or(0) == 0 {
            return out;
        }
        let Ok(n) = u64::from_str_radix(size.trim(), 16) else {
            return out;
        };
        if n == 0 {
            out.ended = true;
            return out;
        }
        let mut left = n;
        while left > 0 {
            let k = left.min(buf.len() as u64) as usize;
            if r.read_exact(&mut buf[..k]).is_err() {
                return out;
            }
            for (i, b) in buf[..k].iter().enumerate() {
                out.pattern &= *b == pattern(out.len + i as u64);
            }
            out.len += k as u64;
            left -= k as u64;
        }
        let mut crlf = [0u8; 2];
        if r.read_exact(&mut crlf).is_err() {
            return out;
        }
        each(out.len);
    }
}

/// A 256 MiB body streams through a handler that echoes it as it reads it: the reply has
/// exactly the bytes sent, and the server's memory stays far below the body's size.
#[test]
fn a_256_mib_echo_streams_through_a_wasi_http_handler_in_bounded_memory() {
    let _alone = alone();
    let (dir, config) = stream_config("stream-echo", "120s");
    let s = Server::start_alone(&config);
    assert_eq!(
        request(&s.addr, "POST", "/echo", &[], b"warm").text(),
        "warm"
    );
    let len = 256u64 << 20;
    let (body, headers, growth) = stream_measuring_rss(&s, "POST", "/echo", len, "256 MiB echo");
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v == "chunked"),
        "{headers:?}"
    );
    assert!(body.ended && body.pattern, "{body:?}");
    assert_eq!(body.len, len);
    assert!(growth.bytes() < 64 << 20, "{growth}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Streams a request of `len` bytes (none for 0) to `path` and reads the chunked answer,
/// sampling the server's RSS every 4 MiB; the body, the answer's headers and the peak RSS
/// growth over before the request, printed under `what`.
fn stream_measuring_rss(
    s: &Server,
    method: &str,
    path: &str,
    len: u64,
    what: &str,
) -> (Chunked, Vec<(String, String)>, Growth) {
    stream_measuring_rss_with(s, method, path, &[], len, what)
}

/// [`stream_measuring_rss`] with header lines of its own.
fn stream_measuring_rss_with(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    len: u64,
    what: &str,
) -> (Chunked, Vec<(String, String)>, Growth) {
    let pid = s.child.id();
    let before = MemoryMap::of(s);
    let mut peak = before.clone();
    let mut peak_rss = rss(pid);
    let (mut r, writer) = send_streaming_with(&s.addr, method, path, headers, len, false, None);
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 200);
    let mut last = 0;
    let body = read_chunked(&mut r, |n| {
        if n - last >= 4 << 20 {
            last = n;
            // The whole map only when RSS reached a new peak: reading it takes a while.
            let now = rss(pid);
            if now > peak_rss {
                peak_rss = now;
                peak = MemoryMap::of(s);
            }
        }
    });
    writer.join().expect("the writer");
    let growth = Growth { before, peak };
    eprintln!("{what}: {growth}");
    (body, headers, growth)
}

/// A server's resident memory by mapping (`/proc/PID/smaps`), and the memory its metrics
/// account for: what a memory test's failure shows, so that it names what grew.
#[derive(Clone, Default)]
struct MemoryMap {
    /// Resident bytes by mapping: its address range and what it maps.
    rss: std::collections::BTreeMap<String, u64>,
    /// The `/metrics` series of memory (`..._bytes` of memories and segments), by line.
    metered: std::collections::BTreeMap<String, f64>,
}

impl MemoryMap {
    fn of(s: &Server) -> MemoryMap {
        let pid = s.child.id();
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
        let mut map = MemoryMap::default();
        let metrics = s.get("/metrics", &[]).text();
        for line in metrics.lines().filter(|l| {
            !l.starts_with('#') && (l.contains("memory_bytes") || l.contains("segment_bytes"))
        }) {
            if let Some((series, v)) = line.rsplit_once(' ') {
                map.metered
                    .insert(series.to_string(), v.parse().unwrap_or(f64::NAN));
            }
        }
        let mut at = String::new();
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if first.contains('-') && !first.ends_with(':') {
                // `start-end perms offset dev inode [path]`: the range and the path name it.
                let mut parts = line.split_whitespace();
                let range = parts.next().unwrap_or("");
                let path = parts.nth(4).unwrap_or("[anon]");
                at = format!("{range} {path}");
            } else if let Some(kb) = line.strip_prefix("Rss:") {
                let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                *map.rss.entry(at.clone()).or_default() += kb * 1024;
            }
        }
        map
    }

    fn total(&self) -> u64 {
        self.rss.values().sum()
    }
}

/// RSS before a request and at its peak.
struct Growth {
    before: MemoryMap,
    peak: MemoryMap,
}

impl Growth {
    fn bytes(&self) -> u64 {
        self.peak.total().saturating_sub(self.before.total())
    }
}

impl std::fmt::Display for Growth {
    /// The totals, then the mappings that grew most (by resident bytes).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {} MiB before, peak growth {} MiB",
            self.before.total() >> 20,
            self.bytes() >> 20
        )?;
        let mut grown: Vec<(i64, &String)> = self
            .peak
            .rss
            .iter()
            .map(|(m, n)| (*n as i64 - *self.before.rss.get(m).unwrap_or(&0) as i64, m))
            .chain(
                self.before
                    .rss
                    .iter()
                    .filter(|(m, _)| !self.peak.rss.contains_key(*m))
                    .map(|(m, n)| (-(*n as i64), m)),
            )
            .filter(|(d, _)| d.unsigned_abs() >= 1 << 20)
            .collect();
        grown.sort_by_key(|(d, _)| std::cmp::Reverse(d.unsigned_abs()));
        for (d, m) in grown.iter().take(8) {
            write!(f, "\n  {:+} KiB {m}", d / 1024)?;
        }
        // What the metrics say grew (a guest's memory, a segment), by series.
        for (series, v) in &self.peak.metered {
            let was = self.before.metered.get(series).copied().unwrap_or(0.0);
            if (v - was).abs() >= f64::from(1u32 << 20) {
                write!(f, "\n  {:+} KiB metered {series}", (v - was) as i64 / 1024)?;
            }
        }
        Ok(())
    }
}

/// A handler that streams 50 MiB without a length: the reply is chunked, complete, and the
/// server's memory stays bounded.
#[test]
fn a_50_mib_generated_response_streams_chunked_in_bounded_memory() {
    let _alone = alone();
    let (dir, config) = stream_config("stream-gen", "120s");
    let s = Server::start_alone(&config);
    assert_eq!(s.get("/gen/0", &[]).status, 200);
    let (body, headers, growth) =
        stream_measuring_rss(&s, "GET", "/gen/50", 0, "50 MiB streamed response");
    assert!(
        headers.iter().all(|(n, _)| n != "content-length"),
        "{headers:?}"
    );
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v == "chunked"),
        "{headers:?}"
    );
    assert!(body.ended && body.pattern, "{body:?}");
    assert_eq!(body.len, 50 << 20);
    assert!(growth.bytes() < 64 << 20, "{growth}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A handler that finishes its body before it returns answers whole, with a length; one
/// that writes more than the body's buffer holds streams it, chunked and complete. (A
/// handler still running a millisecond or two after it set its response streams too: on a
/// loaded machine a short one may, so the length is asked of one answer in twenty.)
#[test]
fn a_body_finished_before_returning_goes_whole_with_its_length() {
    let (dir, config) = stream_config("stream-whole", "30s");
    let s = Server::start(&config);
    let complete = |r: &Reply, len: u64| {
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len() as u64, len);
        assert!(
            r.body
                .iter()
                .enumerate()
                .all(|(i, b)| *b == pattern(i as u64))
        );
    };
    let whole = |path: &str, len: &str| {
        (0..20).any(|_| {
            let r = s.get(path, &[]);
            assert_eq!(r.status, 200);
            r.header("content-length") == Some(len) && r.header("transfer-encoding").is_none()
        })
    };
    assert!(whole("/ignore", "8"));
    assert!(whole("/gen/0", "0"));
    complete(&s.get("/gen/1", &[]), 1 << 20);
    // 8 MiB in 128 writes: the handler waits for its head to go, then streams.
    let r = s.get("/gen/8", &[]);
    complete(&r, 8 << 20);
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(s.metric("lrpc_plugin_failures_total"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A handler that sets its response and never finishes the body: the head comes at once,
/// the body is cut off (no last chunk) at the deadline, and the next request gets a fresh
/// instance. One that returns with its body unfinished is cut off at once, unless it wrote
/// none of it: that body ends empty.
#[test]
fn a_body_never_finished_is_cut_off_at_the_deadline() {
    let (dir, config) = stream_config("stream-hang", "4s");
    let s = Server::start(&config);
    assert_eq!(s.get("/ignore", &[]).text(), "ignored\n");
    let start = Instant::now();
    let (mut r, writer) = send_streaming(&s.addr, "GET", "/hang", 0, false, None);
    let (status, _) = read_head(&mut r);
    let head = start.elapsed();
    assert_eq!(status, 200);
    assert!(head < Duration::from_secs(2), "the head took {head:?}");
    let body = read_chunked(&mut r, |_| {});
    let cut = start.elapsed();
    writer.join().expect("the writer");
    assert!(!body.ended, "{body:?}");
    assert!(
        cut >= Duration::from_millis(3500) && cut < Duration::from_secs(10),
        "the body ended after {cut:?}"
    );
    // The worker sees the deadline pass too: the instance goes, and the next request gets a
    // fresh one.
    assert!(eventually(|| s.metric("lrpc_plugin_failures_total") >= 1.0));
    assert!(eventually(|| s.get("/ignore", &[]).status == 200));

    // A handler that returns with its body unfinished is cut off at once. When the cut
    // comes before hyper wrote the head, the connection just closes (documented).
    let start = Instant::now();
    let (mut r, writer) = send_streaming(&s.addr, "GET", "/leave", 0, false, None);
    let mut line = String::new();
    let _ = r.read_line(&mut line);
    if !line.is_empty() {
        assert!(line.starts_with("HTTP/1.1 200"), "{line:?}");
        let mut l = String::new();
        while r.read_line(&mut l).is_ok_and(|n| n > 0) && l.trim_end() != "" {
            l.clear();
        }
        let body = read_chunked(&mut r, |_| {});
        assert!(!body.ended, "{body:?}");
    }
    writer.join().expect("the writer");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(s.get("/ignore", &[]).text(), "ignored\n");

    // One that returns (or traps) with its body unfinished but never wrote a byte of it
    // answers with the head it set and an empty body, as under `wasmtime serve`: what a
    // JavaScript handler that throws after setting a 500 looks like.
    // (A trap before the head went out answers 500 instead.)
    for (path, trap) in [("/abandon", false), ("/abandon-trap", true)] {
        let head = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        let text = raw_exchange(&s.addr, head.as_bytes());
        if trap && text.starts_with("HTTP/1.1 500") {
            continue;
        }
        assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text:?}");
        let (_, body) = text.split_once("\r\n\r\n").expect("a head");
        assert!(
            body == "0\r\n\r\n" || (body.is_empty() && text.contains("content-length: 0")),
            "{path}: the body did not end empty: {text:?}"
        );
    }
    assert_eq!(s.get("/ignore", &[]).text(), "ignored\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A handler that answers without reading the body answers before the client has sent
/// it; a body over the route's cap fails the handler's read, answered 413 when the
/// handler answered nothing.
#[test]
fn a_handler_answers_without_waiting_for_the_body_and_the_cap_holds() {
    let (dir, config) = stream_config("stream-ignore", "30s");
    let s = Server::start(&config);
    // The client sends 1 MiB of 10, then waits 15 s: the answer comes meanwhile.
    let start = Instant::now();
    let pause = Some((1 << 20, Duration::from_secs(15)));
    let (mut r, writer) = send_streaming(&s.addr, "POST", "/ignore", 10 << 20, false, pause);
    let (status, headers) = read_head(&mut r);
    // A handler that finished its body before returning answers it whole, with its length.
    if headers.iter().all(|(n, _)| n != "content-length") {
        let mut line = String::new();
        r.read_line(&mut line).expect("a chunk size");
    }
    let mut text = String::new();
    r.read_line(&mut text).expect("a chunk");
    assert_eq!((status, text.as_str()), (200, "ignored\n"));
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    drop(r);
    writer.join().expect("the writer");

    let (mut r, writer) = send_streaming(&s.addr, "POST", "/small/sum", 100 << 10, true, None);
    let (status, _) = read_head(&mut r);
    writer.join().expect("the writer");
    assert_eq!(status, 200);
    let (mut r, writer) = send_streaming(&s.addr, "POST", "/small/sum", 2 << 20, true, None);
    let (status, _) = read_head(&mut r);
    writer.join().expect("the writer");
    assert_eq!(status, 413);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `HEAD` on a handler that writes a body: its headers, no body, and no length made up.
#[test]
fn head_on_a_wasi_http_handler_sends_no_body() {
    let (dir, config) = stream_config("stream-head", "30s");
    let s = Server::start(&config);
    let r = request(&s.addr, "HEAD", "/gen/1", &[], b"");
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty(), "{} bytes", r.body.len());
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.header("content-length"), None);
    // The handler was not disturbed by the body going nowhere.
    assert_eq!(s.get("/ignore", &[]).text(), "ignored\n");
    assert_eq!(s.metric("lrpc_plugin_failures_total"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A chain of plugins that take no body (`body = "none"`) and a handler behind them.
fn bodyless_config(tag: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(tag);
    let config = write_config(
        &dir,
        "[domains.auth]\nguest = \"http-auth\"\nbody = \"none\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [domains.rewrite]\nguest = \"http-rewrite\"\nbody = \"none\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [domains.stamp]\nguest = \"comp-http-stamp\"\nbody = \"none\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [domains.stream]\nguest = \"http-wasi-stream\"\n\
         exports = [{ interface = \"wasi:http/incoming-handler\" }]\n\
         [domains.stream.limits]\ndeadline = \"120s\"\n\
         [domains.hello]\nguest = \"http-wasi-hello\"\n\
         exports = [{ interface = \"wasi:http/incoming-handler\" }]\n\
         [[routes]]\nprefix = \"/stamp\"\nchain = [\"stamp\", \"hello\"]\n\
         [[routes]]\nprefix = \"/small\"\nchain = [\"auth\", \"rewrite\", \"stream\"]\n\
         max-body = 1048576\n\
         [[routes]]\nprefix = \"/\"\nchain = [\"auth\", \"rewrite\", \"stream\"]\n\
         max-body = 314572800\n",
    );
    (dir, config)
}

/// Plugins that take no body still see the head and may answer: `auth` refuses a request
/// without its token, and `rewrite` changes the path. The body passes them untouched (an
/// empty `rewrite` leaves it as it was), and the route's cap still holds.
#[test]
fn plugins_that_take_no_body_see_the_head_and_pass_the_body_on() {
    let (dir, config) = bodyless_config("bodyless-head");
    let s = Server::start(&config);
    let r = request(&s.addr, "POST", "/v1/echo", &[], b"some body");
    assert_eq!(r.status, 401, "{}", r.text());
    // `x-upper` makes `rewrite` upper-case the body it got: none, so the body stays.
    let r = request(
        &s.addr,
        "POST",
        "/v1/echo",
        &[ALICE, ("x-upper", "1")],
        b"some body",
    );
    assert_eq!((r.status, r.text().as_str()), (200, "some body"));
    let r = request(&s.addr, "POST", "/v1/sum", &[ALICE], &[7u8; 100_000]);
    assert_eq!((r.status, r.text().as_str()), (200, "100000\n"));
    // Over the route's cap: refused by its declared length, before the chain runs.
    let (mut r, writer) = send_streaming_with(
        &s.addr,
        "POST",
        "/small/v1/sum",
        &[ALICE],
        2 << 20,
        false,
        None,
    );
    let (status, _) = read_head(&mut r);
    writer.join().expect("the writer");
    assert_eq!(status, 413);
    assert_eq!(s.metric("lrpc_plugin_failures_total"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plugin that takes no body but passes one on is refused: 502, naming it.
#[test]
fn a_plugin_that_takes_no_body_may_not_rewrite_it() {
    let (dir, config) = bodyless_config("bodyless-rewrite");
    let s = Server::start(&config);
    let r = request(&s.addr, "POST", "/stamp/x", &[], b"kept");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "hello anonymous at POST /stamped/x\nkept");
    let r = request(&s.addr, "POST", "/stamp/rebody", &[], b"kept");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.text().contains("plugin stamp rewrote the body"),
        "{}",
        r.text()
    );
    assert_eq!(s.metric("lrpc_plugin_failures_total"), 1.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Behind a chain of plugins that take no body, a 128 MiB body streams to the handler and
/// back: the server's memory stays far below the body's size.
#[test]
fn a_body_streams_through_plugins_that_take_none_in_bounded_memory() {
    let _alone = alone();
    let (dir, config) = bodyless_config("bodyless-stream");
    let s = Server::start_alone(&config);
    let warm = request(&s.addr, "POST", "/v1/echo", &[ALICE], b"warm");
    assert_eq!(warm.text(), "warm");
    let len = 128u64 << 20;
    let (body, headers, growth) =
        stream_measuring_rss_with(&s, "POST", "/v1/echo", &[ALICE], len, "128 MiB echo");
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v == "chunked"),
        "{headers:?}"
    );
    assert!(body.ended && body.pattern, "{body:?}");
    assert_eq!(body.len, len);
    assert!(growth.bytes() < 48 << 20, "{growth}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A header value that is not UTF-8 (`caf\xe9`, Latin-1) reaches a handler no plugin comes
/// before as its bytes, also beside valid ones.
#[test]
fn a_header_value_that_is_not_utf8_reaches_a_lone_handler_as_bytes() {
    let s = Server::start(&app("wasi-http"));
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    c.write_all(
        b"GET /direct/hi HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
          x-user: caf\xe9\r\nx-other: ok\r\n\r\n",
    )
    .expect("send");
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).expect("read the reply");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // The handler decodes the value lossily: the byte it can not read is U+FFFD.
    assert!(text.ends_with("hello caf\u{fffd} at GET /hi\n"), "{text}");
}

/// Sends `head` (a whole HTTP/1.1 request head, `connection: close`) and returns the reply.
fn raw_exchange(addr: &str, head: &[u8]) -> String {
    String::from_utf8_lossy(&raw_bytes(addr, head)).into_owned()
}

/// [`raw_exchange`], the reply as its bytes.
fn raw_bytes(addr: &str, head: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    c.write_all(head).expect("send");
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).expect("read the reply");
    raw
}

/// Whether `hay` holds `needle`.
fn holds(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Plugins of `lrpc:http/plugin@0.2.0` take header values as bytes: a value that is not
/// UTF-8 reaches a core plugin, a component plugin and the handler after them byte for byte.
#[test]
fn header_values_that_are_not_utf8_reach_plugins_and_the_handler_as_bytes() {
    let dir = scratch("bytes");
    let s = Server::start(&write_config(&dir, MIXED_VERSIONS));
    // A core plugin greets the user it sees, bytes and all.
    let r = raw_bytes(
        &s.addr,
        b"GET /greet/hi HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-user: caf\xe9\r\n\r\n",
    );
    assert!(
        r.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&r)
    );
    assert!(
        r.ends_with(b"\r\n\r\nhello caf\xe9 at GET /hi\n"),
        "{}",
        String::from_utf8_lossy(&r)
    );
    // A component plugin copies `x-echo`'s bytes into `x-echoed`; the handler gets both, and
    // the client's `x-user`, exactly.
    let r = raw_bytes(
        &s.addr,
        b"GET /seen/headers HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
          x-user: caf\xe9\r\nx-echo: \xff\xfe\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&r);
    assert!(r.starts_with(b"HTTP/1.1 200"), "{text}");
    for line in [
        &b"\nx-user: caf\xe9\n"[..],
        b"\nx-echo: \xff\xfe\n",
        b"\nx-echoed: \xff\xfe\n",
    ] {
        assert!(
            holds(&r, line),
            "{:?} in {text}",
            String::from_utf8_lossy(line)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `auth` (`lrpc:http/plugin@0.2.0`) sees a value that is not UTF-8 too: such an
/// `authorization` matches no token, and a client's `x-user` in any byte form or case is
/// removed, so neither reaches the handler.
#[test]
fn auth_strips_identity_headers_that_are_not_utf8() {
    let dir = scratch("auth-bytes");
    let s = Server::start(&write_config(&dir, MIXED_VERSIONS));
    let r = raw_bytes(
        &s.addr,
        b"GET /auth/headers HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
          authorization: Bearer letmein\r\nx-user: caf\xe9\r\nX-User: \xff\xfeadmin\r\n\
          X-USER: \xe9\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&r);
    assert!(r.starts_with(b"HTTP/1.1 200"), "{text}");
    let body = &r[r.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4..];
    let users: Vec<&[u8]> = body
        .split(|b| *b == b'\n')
        .filter(|l| l.to_ascii_lowercase().starts_with(b"x-user"))
        .collect();
    assert_eq!(users, [&b"x-user: alice"[..]], "{text}");
    assert!(
        !holds(&body.to_ascii_lowercase(), b"authorization"),
        "{text}"
    );
    assert!(!body.iter().any(|b| *b >= 0x80), "{text}");
    assert!(!holds(body, b"admin"), "{text}");
    // A token that is not UTF-8 is no token; beside a good one, it makes two.
    for head in [
        &b"GET /auth/headers HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
           authorization: Bearer letmein\xe9\r\n\r\n"[..],
        b"GET /auth/headers HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
          authorization: Bearer letmein\r\nAuthorization: Bearer \xff\r\n\r\n",
    ] {
        let text = raw_exchange(&s.addr, head);
        assert!(text.starts_with("HTTP/1.1 401"), "{text}");
        assert!(!text.contains("authority"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A chain may mix plugins of both versions. One of `lrpc:http/plugin` (values as strings)
/// can not see a value that is not UTF-8, and nothing may pass around it: its route answers
/// 400 to such a request before any plugin runs. A value that a plugin of the byte version
/// sets on the way fails the string plugin's call cleanly: 502 naming it.
#[test]
fn a_header_value_that_is_not_utf8_never_passes_around_plugins() {
    let dir = scratch("old-plugin");
    let s = Server::start(&write_config(&dir, MIXED_VERSIONS));
    for path in ["/old/hi", "/mix/hi"] {
        let head = [
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n").as_bytes(),
            b"x-user: caf\xe9\r\n\r\n",
        ]
        .concat();
        let text = raw_exchange(&s.addr, &head);
        assert!(text.starts_with("HTTP/1.1 400"), "{path}: {text}");
        assert!(text.contains("not UTF-8"), "{path}: {text}");
    }
    let m = s.get("/metrics", &[]).text();
    for d in ["faulty", "stamp"] {
        let calls = metric_value(&m, &format!("lrpc_plugin_calls_total{{domain=\"{d}\"}}"));
        assert_eq!(calls, 0.0, "{d}\n{m}");
    }
    // UTF-8 values pass, through both versions.
    let r = s.get("/mix/hi", &[("x-user", "caf\u{e9}")]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "faulty ok /stamped/hi\n");
    // `stamp` sets `x-latin1: caf\xe9` on `/latin1`: `faulty` can not take it.
    let r = s.get("/mix/latin1", &[]);
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("faulty"), "{}", r.text());
    // The server is fine after it.
    assert_eq!(s.get("/mix/hi", &[]).status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Plugins of both versions: `auth`, `stamp` (a component) and `greet` speak
/// `lrpc:http/plugin@0.2.0`, `faulty` the string version; `hello` is a `wasi:http` handler.
const MIXED_VERSIONS: &str = "\
[domains.auth]
guest = \"http-auth\"
exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]
[domains.stamp]
guest = \"comp-http-stamp\"
exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]
[domains.greet]
guest = \"http-hello\"
exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]
[domains.faulty]
guest = \"http-faulty\"
exports = [{ interface = \"lrpc:http/plugin\" }]
[domains.hello]
guest = \"http-wasi-hello\"
exports = [{ interface = \"wasi:http/incoming-handler\" }]
[[routes]]
prefix = \"/greet\"
chain = [\"greet\"]
[[routes]]
prefix = \"/seen\"
chain = [\"stamp\", \"hello\"]
[[routes]]
prefix = \"/auth\"
chain = [\"auth\", \"hello\"]
[[routes]]
prefix = \"/old\"
chain = [\"faulty\"]
[[routes]]
prefix = \"/mix\"
chain = [\"stamp\", \"faulty\"]
";

/// The handler sees what the last plugin passed on, and the plugins see what the handler
/// will: one authority (an absolute-form target's, not a `host` line beside it), and the
/// framing of the body the handler gets (a chunked body the plugins read whole reaches the
/// handler with its length, not `transfer-encoding: chunked`). Two `host` lines are refused.
#[test]
fn plugins_and_the_handler_see_one_authority_and_true_framing() {
    let s = Server::start(&app("wasi-http"));
    let text = raw_exchange(
        &s.addr,
        b"GET http://real.example/api/v1/headers HTTP/1.1\r\nhost: fake.example\r\n\
          connection: close\r\nauthorization: Bearer letmein\r\n\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("authority real.example\n"), "{text}");
    assert!(!text.contains("fake.example"), "{text}");

    let text = raw_exchange(
        &s.addr,
        b"POST /api/v1/headers HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
          authorization: Bearer letmein\r\nx-upper: 1\r\ntransfer-encoding: chunked\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("content-length: 11\n"), "{text}");
    assert!(!text.contains("transfer-encoding: chunked\n"), "{text}");
    assert!(text.contains("HELLO WORLD"), "{text}");

    let text = raw_exchange(
        &s.addr,
        b"GET /direct/x HTTP/1.1\r\nhost: a\r\nhost: b\r\nconnection: close\r\n\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
}

/// `auth` vouches for `x-user`: one the client sent never survives it, in any case, and two
/// tokens are refused rather than one of them picked.
#[test]
fn a_client_sent_identity_never_survives_auth() {
    let s = Server::start(&app("wasi-http"));
    let bob = ("authorization", "Bearer opensesame");
    for claim in ["x-user", "X-User", "X-USER"] {
        let r = s.get("/api/v1/hi", &[bob, (claim, "alice")]);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "hello bob at GET /hi\n", "{claim}");
    }
    let r = s.get("/api/v1/hi", &[("x-user", "alice")]);
    assert_eq!(r.status, 401, "{}", r.text());
    let r = s.get("/api/v1/hi", &[bob, ALICE]);
    assert_eq!(r.status, 401, "{}", r.text());
}

/// A deployment of the WASI 0.3 handler `http-wasi-p3-hello` as `p3` on `/`, with the
/// domain's `limits` and the route's `workers`.
fn p3_config(tag: &str, limits: &str, workers: usize) -> (PathBuf, PathBuf) {
    let dir = scratch(tag);
    let config = write_config(
        &dir,
        &format!(
            "[domains.p3]\nguest = \"http-wasi-p3-hello\"\n\
             exports = [{{ interface = \"wasi:http/incoming-handler\" }}]\n\
             [domains.p3.limits]\n{limits}\
             [[routes]]\nprefix = \"/\"\nchain = [\"p3\"]\nworkers = {workers}\n\
             max-body = 4194304\n"
        ),
    );
    (dir, config)
}

/// A WASI 0.3 (`wasi:http/handler@0.3.0`) component is served like a p2 one: a GET gets its
/// answer, and a 1 MiB body streams through the handler and back byte for byte (the guest
/// copies it chunk by chunk, so the answer is chunked).
#[test]
fn a_wasi_p3_handler_answers_and_echoes_a_streamed_body() {
    let (dir, config) = p3_config("p3-hello", "", 1);
    let s = Server::start(&config);
    let r = s.get("/", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "hello from p3\n"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    for chunked in [false, true] {
        let len = 1u64 << 20;
        let (mut reader, writer) = send_streaming(&s.addr, "POST", "/echo", len, chunked, None);
        let (status, headers) = read_head(&mut reader);
        assert_eq!(status, 200, "{headers:?}");
        let body = read_chunked(&mut reader, |_| {});
        writer.join().expect("the writer");
        assert!(body.ended && body.pattern, "{body:?}");
        assert_eq!(body.len, len);
    }
    // `HEAD` (RFC 9110): the handler's headers, no body, no length made up.
    let r = request(&s.addr, "HEAD", "/", &[], b"");
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty(), "{} bytes", r.body.len());
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("content-length"), None);
    assert_eq!(s.metric("lrpc_plugin_failures_total"), 0.0);
    // A body declared over the route's `max-body` (4 MiB) is refused with 413 before it is
    // sent.
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    c.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4194305\r\n\r\n")
        .expect("send the head");
    let mut head = [0u8; 12];
    c.read_exact(&mut head).expect("read the status line");
    assert_eq!(&head, b"HTTP/1.1 413");
    assert_eq!(s.get("/", &[]).status, 200);
    let m = s.get("/metrics", &[]).text();
    assert!(metric_value(&m, "lrpc_plugin_calls_total{domain=\"p3\"}") >= 3.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// 32 requests at once, on a route with one worker thread (so at most one instance): all
/// are answered, GETs and echoes alike, the instance taking several at a time.
#[test]
fn a_wasi_p3_handler_serves_32_concurrent_requests() {
    let (dir, config) = p3_config("p3-concurrent", "", 1);
    let s = Server::start(&config);
    assert_eq!(s.get("/", &[]).status, 200);
    let answered = AtomicUsize::new(0);
    let start = std::sync::Barrier::new(32);
    std::thread::scope(|sc| {
        for i in 0..32 {
            let (s, answered, start) = (&s, &answered, &start);
            sc.spawn(move || {
                start.wait();
                let body = format!("request {i} ").repeat(1000);
                let r = if i % 2 == 0 {
                    s.get(&format!("/{i}"), &[])
                } else {
                    request(&s.addr, "POST", "/echo", &[], body.as_bytes())
                };
                assert_eq!(r.status, 200, "request {i}: {}", r.text());
                if i % 2 == 0 {
                    assert_eq!(r.text(), "hello from p3\n");
                } else {
                    assert_eq!(r.text(), body, "request {i}");
                }
                answered.fetch_add(1, Ordering::Relaxed);
            });
        }
    });
    assert_eq!(answered.load(Ordering::Relaxed), 32);
    let m = s.get("/metrics", &[]).text();
    assert_eq!(metric_value(&m, "lrpc_plugin_failures_total"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A p3 handler that traps answers 500 and one that spins past its deadline 504; either
/// way its instance is dropped, the domain is not restarted, and the next request is served
/// by a fresh instance at once.
#[test]
fn a_wasi_p3_handler_s_trap_is_500_and_its_spin_504() {
    let (dir, config) = p3_config("p3-fail", "deadline = \"500ms\"\n", 1);
    let s = Server::start(&config);
    assert_eq!(s.get("/", &[]).status, 200);
    let r = s.get("/trap", &[]);
    assert_eq!((r.status, r.text().as_str()), (500, "plugin p3 trapped\n"));
    assert_eq!(s.get("/", &[]).text(), "hello from p3\n");
    let began = Instant::now();
    let r = s.get("/spin", &[]);
    assert_eq!(
        (r.status, r.text().as_str()),
        (504, "plugin p3 ran past its deadline\n")
    );
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    let r = s.get("/", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "hello from p3\n"));
    let m = s.get("/metrics", &[]).text();
    assert_eq!(
        metric_value(&m, "lrpc_domain_restarts_total{domain=\"p3\"}"),
        0.0
    );
    assert_eq!(
        metric_value(
            &m,
            "lrpc_plugin_failures_total{domain=\"p3\",kind=\"trap\"}"
        ),
        1.0
    );
    assert_eq!(
        metric_value(
            &m,
            "lrpc_plugin_failures_total{domain=\"p3\",kind=\"deadline\"}"
        ),
        1.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// One instance serves requests side by side: on a route with one worker thread (so one
/// instance at most), two echoes whose clients hold back the second half of their bodies
/// both have their heads and first halves back before either body is finished; as each
/// is finished, its echo ends whole.
#[test]
fn one_wasi_p3_instance_serves_requests_side_by_side() {
    let (dir, config) = p3_config("p3-side-by-side", "deadline = \"30s\"\n", 1);
    let s = Server::start(&config);
    assert_eq!(s.get("/", &[]).status, 200);
    let len = 256u64 << 10;
    let half = len / 2;
    let pause = Some((half, Duration::from_secs(2)));
    let began = Instant::now();
    let (mut a, wa) = send_streaming(&s.addr, "POST", "/echo", len, true, pause);
    let (mut b, wb) = send_streaming(&s.addr, "POST", "/echo", len, true, pause);
    let mut halves = Vec::new();
    for r in [&mut a, &mut b] {
        let (status, _) = read_head(r);
        assert_eq!(status, 200);
        // Read up to the first half of the echo while both clients still hold theirs back.
        let mut got = 0u64;
        while got < half {
            let mut size = String::new();
            r.read_line(&mut size).expect("a chunk size");
            let n = u64::from_str_radix(size.trim(), 16).expect("a chunk size");
            let mut chunk = vec![0u8; n as usize + 2];
            r.read_exact(&mut chunk).expect("a chunk");
            got += n;
        }
        halves.push((got, began.elapsed()));
    }
    assert!(
        halves.iter().all(|(_, at)| *at < Duration::from_secs(2)),
        "both halves came back while the clients held the rest: {halves:?}"
    );
    for (r, w) in [(a, wa), (b, wb)] {
        let mut r = r;
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).expect("the rest");
        w.join().expect("the writer");
        assert!(rest.ends_with(b"0\r\n\r\n"), "the echo ended whole");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A p3 handler's outgoing requests (`wasi:http/client`) go through the same allow-list as
/// a p2 handler's: a granted origin is reached, any other is denied with
/// `HttpRequestDenied` and nothing is sent; `/metrics` counts both.
#[test]
fn a_wasi_p3_handler_sends_requests_only_to_granted_origins() {
    let granted = Backend::start(answer_at_once);
    let other = Backend::start(answer_at_once);
    let dir = scratch("p3-outgoing");
    let config = write_config(
        &dir,
        &format!(
            "[domains.p3]\nguest = \"http-wasi-p3-hello\"\n\
             exports = [{{ interface = \"wasi:http/incoming-handler\" }}]\n\
             [domains.p3.wasi]\nhttp = [\"http://127.0.0.1:{}\"]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"p3\"]\n",
            granted.addr.port()
        ),
    );
    let s = Server::start(&config);
    let via = |target: &str| s.get("/proxy", &[("x-target", target)]);
    let r = via(&format!("http://{}/hello?x=1", granted.addr));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "backend saw GET /hello?x=1 HTTP/1.1\n");
    for denied in [
        format!("http://{}/", other.addr),
        format!("http://localhost:{}/", granted.addr.port()),
    ] {
        let r = via(&denied);
        assert_eq!(
            (r.status, r.text().as_str()),
            (403, "HttpRequestDenied\n"),
            "{denied}"
        );
    }
    assert_eq!((granted.hits(), other.hits()), (1, 0));
    let m = s.get("/metrics", &[]).text();
    let count = |result: &str| {
        metric_value(
            &m,
            &format!("lrpc_http_outgoing_total{{domain=\"p3\",result=\"{result}\"}}"),
        )
    };
    assert_eq!([count("sent"), count("denied")], [1.0, 2.0], "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens a connection and sends the head of a request whose body (`len` bytes) is yet to
/// come.
fn body_pending(addr: &str, path: &str, len: usize) -> TcpStream {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.write_all(
        format!("POST {path} HTTP/1.1\r\nhost: a\r\ncontent-length: {len}\r\n\r\n").as_bytes(),
    )
    .expect("send the head");
    c
}

/// Writes one byte to each of `conns` every `every` until `stop` is set (errors, once the
/// server closed a connection, are ignored).
fn trickle(
    conns: Vec<TcpStream>,
    every: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut conns = conns;
        while !stop.load(Ordering::Relaxed) {
            for c in &mut conns {
                let _ = c.write_all(b"x");
            }
            std::thread::sleep(every);
        }
    })
}

/// All the server sends on `c` until it closes the connection; `None` when it is still open
/// after `within`.
fn read_until_closed(c: &mut TcpStream, within: Duration) -> Option<String> {
    c.set_read_timeout(Some(within)).expect("timeout");
    let mut out = Vec::new();
    match c.read_to_end(&mut out) {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            Some(String::from_utf8_lossy(&out).into_owned())
        }
        Err(_) => None,
    }
}

/// A body sent a few bytes a second never stalls (`body-timeout`), but falls below the
/// minimum rate after its grace: answered 408 and its connection closed, both when the
/// plugins read the body whole and when it streams to a `wasi:http` handler. The 408s are
/// counted.
#[test]
fn a_body_below_the_minimum_rate_is_answered_408_and_its_connection_closed() {
    let dir = scratch("min-rate");
    let config = write_config(
        &dir,
        "[serve]\nmin-body-rate-grace = \"1s\"\n\
         [domains.hello]\nguest = \"http-hello\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [domains.stream]\nguest = \"http-wasi-stream\"\n\
         exports = [{ interface = \"wasi:http/incoming-handler\" }]\n\
         [[routes]]\nprefix = \"/stream\"\nchain = [\"stream\"]\n\
         [[routes]]\nprefix = \"/\"\nchain = [\"hello\"]\n",
    );
    let s = Server::start(&config);
    // Keep-alive connections (HTTP/1.1's default): only the server can close them.
    let whole = body_pending(&s.addr, "/x", 1000);
    let streamed = body_pending(&s.addr, "/stream/sum", 1000);
    let conns = vec![
        whole.try_clone().expect("clone"),
        streamed.try_clone().expect("clone"),
    ];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A byte every 200 ms: 5 bytes a second, far below 240, and never a 10 s stall.
    let writer = trickle(conns, Duration::from_millis(200), stop.clone());
    let start = Instant::now();
    for (what, mut c) in [("whole", whole), ("streamed", streamed)] {
        // (Both trickle at once: the second is closed by the time the first is read.)
        // The grace (1 s), plus a wide margin for a loaded machine, and still below the
        // body's own end (1000 bytes at 5 a second: 200 s).
        let answer = read_until_closed(&mut c, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{what}: the connection is still open"));
        assert!(answer.starts_with("HTTP/1.1 408"), "{what}: {answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{what}: {answer}"
        );
    }
    // A handler that answered before the body failed (`/echo` sends its head first): the
    // answer can not change, but the connection closes all the same.
    let mut echoed = body_pending(&s.addr, "/stream/echo", 1000);
    let stop_echo = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let echo_writer = trickle(
        vec![echoed.try_clone().expect("clone")],
        Duration::from_millis(200),
        stop_echo.clone(),
    );
    let answer = read_until_closed(&mut echoed, Duration::from_secs(60))
        .expect("echo: the connection is still open");
    assert!(answer.starts_with("HTTP/1.1 "), "echo: {answer}");
    stop_echo.store(true, Ordering::Relaxed);
    echo_writer.join().expect("the writer");
    assert!(start.elapsed() < Duration::from_secs(120));
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer");
    assert_eq!(
        s.metric("lrpc_http_requests_total{route=\"/\",code=\"408\"}"),
        1.0
    );
    assert_eq!(
        s.metric("lrpc_http_requests_total{route=\"/stream\",code=\"408\"}"),
        1.0
    );
    // A body at a fair rate is served as before.
    assert_eq!(
        request(&s.addr, "POST", "/x", &[], &[b'y'; 500]).status,
        200
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// 200 clients sending their bodies a byte at a time do not hold the server (default
/// budgets): a normal request is answered meanwhile, and the slow ones are answered 408
/// once the grace of the minimum rate is over.
#[test]
fn slow_bodies_can_not_hold_the_server() {
    let dir = scratch("slow-bodies");
    let config = hello_with(&dir, "");
    let s = Server::start(&config);
    let slow: Vec<TcpStream> = (0..200)
        .map(|_| body_pending(&s.addr, "/x", 1000))
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = trickle(
        slow.iter().map(|c| c.try_clone().expect("clone")).collect(),
        Duration::from_millis(500),
        stop.clone(),
    );
    let r = s.get("/x", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    // Each is answered 408 after the grace (5 s); a wide margin for a loaded machine.
    let until = Instant::now() + Duration::from_secs(90);
    for (i, mut c) in slow.into_iter().enumerate() {
        let left = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        let answer = read_until_closed(&mut c, left)
            .unwrap_or_else(|| panic!("slow client {i}: still open"));
        assert!(
            answer.starts_with("HTTP/1.1 408"),
            "slow client {i}: {answer}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer");
    assert_eq!(s.get("/x", &[]).status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With an open-file limit below `max-connections`, the server lowers the cap and says so
/// once, and serves.
#[test]
fn max_connections_is_clamped_to_the_open_file_limit_with_one_warning() {
    let dir = scratch("fd-limit");
    let config = hello_with(&dir, "max-connections = 4096");
    let _beside = ALONE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // `ulimit -n` sets both the soft and the hard limit: the server can not raise it.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" serve \"$1\" --listen 127.0.0.1:0")
        .arg(LRPC)
        .arg(&config)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lrpc serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the address");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    // More connections than the lowered cap: they wait in the accept queue, and requests
    // are still served as they close.
    let held: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    drop(held);
    let r = request(&addr, "GET", "/x", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let _ = child.kill();
    let _ = child.wait();
    let mut log = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut log)
        .expect("read the log");
    let warnings = log
        .lines()
        .filter(|l| l.contains("max-connections lowered"))
        .count();
    assert_eq!(warnings, 1, "{log}");
    assert!(log.contains("open-file limit is 256"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The processor time `pid` has used (user and system, from `/proc/PID/stat`).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').expect("a command") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
    // `getconf CLK_TCK` is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// 200 clients ask for half a second of computation each and hang up: the requests still
/// waiting for a worker are dropped, not run, so the server's processor time stops growing
/// within seconds (run to the end, they would take 100 s of it).
#[test]
fn requests_of_clients_that_went_away_are_not_run() {
    let dir = scratch("gone");
    let config = write_config(
        &dir,
        "[domains.faulty]\nguest = \"http-faulty\"\n\
         exports = [{ interface = \"lrpc:http/plugin\", deadline = \"60s\" }]\n\
         [[routes]]\nprefix = \"/faulty\"\nchain = [\"faulty\"]\n",
    );
    // The requests that run before the route leaves the reactor keep both processors busy
    // for a while: no other timing test runs beside it.
    let _alone = alone();
    let s = Server::start_alone(&config);
    let pid = s.child.id();
    let clients: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).expect("connect");
            c.write_all(b"GET /faulty/busy/500 HTTP/1.1\r\nhost: a\r\n\r\n")
                .expect("send");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    drop(clients);
    // Those already running finish (a few, each half a second); then the server idles.
    // Look for two quiet seconds within 60 s: using less than half a second of processor
    // time in two seconds of wall-clock time.
    let until = Instant::now() + Duration::from_secs(60);
    let mut quiet = false;
    while Instant::now() < until {
        let before = cpu_time(pid);
        std::thread::sleep(Duration::from_secs(2));
        let used = cpu_time(pid).saturating_sub(before);
        if used < Duration::from_millis(500) {
            quiet = true;
            break;
        }
    }
    assert!(quiet, "the server kept computing after its clients left");
    assert_eq!(s.get("/faulty/busy/1", &[]).status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// CPU time `pid`'s threads have run, in nanoseconds (each thread's `schedstat`).
fn cpu_nanos(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn an_idle_server_takes_under_a_fifth_of_a_percent_of_a_core() {
    // Plugins and a wasi:http handler, each having served: then 30 s with no requests.
    let s = Server::start(&app("wasi-http"));
    let r = s.get("/api/v1/hi", &[ALICE]);
    assert_eq!(r.status, 200, "{}", r.text());
    // The epoch ticker rests 100 ticks after the last guest code ran.
    std::thread::sleep(Duration::from_secs(2));
    let (before, at) = (cpu_nanos(s.child.id()), Instant::now());
    std::thread::sleep(Duration::from_secs(30));
    let used = cpu_nanos(s.child.id()).saturating_sub(before);
    let share = used as f64 / at.elapsed().as_nanos() as f64;
    eprintln!(
        "idle: the server ran {:.1} ms in {:?}",
        used as f64 / 1e6,
        at.elapsed()
    );
    assert!(
        share < 0.002,
        "idle for {:?}, the server ran {:.1} ms: {:.3}% of a core",
        at.elapsed(),
        used as f64 / 1e6,
        share * 100.0
    );
    // And the first request after the rest is served as before.
    let r = s.get("/api/v1/hi", &[ALICE]);
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A config with a `/` route (`hello` answers every path) and a `/faulty` route whose
/// plugin may spin for an hour, with `[serve]` lines `serve`.
fn root_route_config(dir: &Path, serve: &str) -> PathBuf {
    write_config(
        dir,
        &format!(
            "[serve]\n{serve}\n[domains.faulty]\nguest = \"http-faulty\"\n\
             exports = [{{ interface = \"lrpc:http/plugin\", deadline = \"3600s\" }}]\n\
             [domains.hello]\nguest = \"http-hello\"\n\
             exports = [{{ interface = \"lrpc:http/plugin@0.2.0\" }}]\n\
             [[routes]]\nprefix = \"/faulty\"\nchain = [\"faulty\"]\n\
             [[routes]]\nprefix = \"/\"\nchain = [\"hello\"]\n"
        ),
    )
}

/// `/healthz` and `/readyz` answer 200 on a running server, before its `/` route sees them
/// (that route answers every other path). From SIGTERM on, while a request is still in
/// flight in the grace period, `/readyz` answers 503 and `/healthz` still 200, on
/// connections made after the signal; any other request on those gets 503. At the end of
/// the grace the spinning request is stopped (503) and the process exits 0.
#[test]
fn probes_answer_before_the_routes_and_readiness_fails_from_sigterm_on() {
    let dir = scratch("probes");
    // A grace long enough for the probes below on a loaded machine.
    let config = root_route_config(&dir, "shutdown-grace = \"10s\"");
    let mut s = Server::start(&config);
    let other = s.get("/other", &[]);
    assert_eq!(other.status, 200);
    assert_eq!(other.header("x-plugin"), Some("hello"));
    for (path, text) in [("/healthz", "ok\n"), ("/readyz", "ready\n")] {
        let r = s.get(path, &[]);
        assert_eq!((r.status, r.text().as_str()), (200, text), "{path}");
        assert_eq!(r.header("x-plugin"), None, "{path} reached the `/` route");
        assert_eq!(r.header("cache-control"), Some("no-store"));
    }
    // The probes count as no route's requests.
    assert_eq!(s.metric("lrpc_http_requests_total{route=\"/\""), 1.0);
    let addr = s.addr.clone();
    let spin = std::thread::spawn(move || request(&addr, "GET", "/faulty/spin", &[], b""));
    let in_flight = "lrpc_http_requests_in_flight{route=\"/faulty\"}";
    assert!(eventually(|| s.metric(in_flight) >= 1.0));
    let start = Instant::now();
    sigterm(&s);
    // The signal is handled on its own thread: the probe turns within moments, and the
    // listener then takes new connections as draining ones (any other path answers 503). A
    // connection accepted just before that whose request comes later than a moment after it
    // is closed as idle: on a loaded machine this client can be that slow.
    assert!(eventually(|| {
        try_request(&s.addr, "GET", "/readyz", &[], b"").is_ok_and(|r| r.status == 503)
    }));
    assert!(eventually(|| {
        try_request(&s.addr, "GET", "/other", &[], b"").is_ok_and(|r| r.status == 503)
    }));
    let ready = s.get("/readyz", &[]);
    assert_eq!(ready.text(), "not ready: shutting down\n");
    assert_eq!(s.get("/healthz", &[]).status, 200);
    let late = s.get("/other", &[]);
    assert_eq!(
        (late.status, late.text().as_str()),
        (503, "shutting down\n")
    );
    assert_eq!(late.header("connection"), Some("close"));
    // All of that within the grace: the spinning request was still running.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(s.wait_exit(), Some(0));
    assert_eq!(spin.join().expect("the spinning request").status, 503);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The log lines of `log` (every one a JSON object) whose target is `lrpc::access`.
fn access_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}"))
        })
        .filter(|v| v["target"] == "lrpc::access")
        .collect()
}

/// With `--log-format json` every log line is one JSON object, and every request the routes
/// answer (no probe) has one access line: method, route (none when none matched), path
/// without the query, status, duration, body bytes, and the trace id of a valid
/// `traceparent` (none for a malformed one). Probe paths come from the config.
#[test]
fn json_log_has_one_access_line_per_request_with_its_trace_id() {
    let dir = scratch("json-log");
    let config = root_route_config(&dir, "health-path = \"/live\"\nready-path = \"/ready\"");
    let log = dir.join("log");
    let file = std::fs::File::create(&log).expect("create the log file");
    let mut s = Server::spawn_with(
        &config,
        file.into(),
        &[("RUST_LOG", OsStr::new("info"))],
        &["--log-format", "json"],
    );
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = format!("00-{trace}-00f067aa0ba902b7-01");
    let r = s.get("/faulty/x?secret=1", &[("traceparent", &parent)]);
    assert_eq!(r.status, 200);
    let sent = r.body.len();
    let r = request(
        &s.addr,
        "POST",
        "/echo",
        &[("traceparent", "00-zz")],
        b"abc",
    );
    assert_eq!(r.status, 200);
    assert_eq!(s.get("/live", &[]).status, 200);
    assert_eq!(s.get("/ready", &[]).status, 200);
    sigterm(&s);
    assert_eq!(s.wait_exit(), Some(0));
    let text = std::fs::read_to_string(&log).expect("the log");
    let lines = access_lines(&text);
    assert_eq!(lines.len(), 2, "{text}");
    let first = &lines[0];
    assert_eq!(first["level"], "INFO");
    assert_eq!(first["method"], "GET");
    assert_eq!(first["route"], "/faulty");
    assert_eq!(first["path"], "/faulty/x");
    assert_eq!(first["status"], 200);
    assert!(first["duration_us"].as_u64().is_some(), "{first}");
    assert_eq!(first["request_bytes"], 0);
    assert_eq!(first["response_bytes"], sent as u64);
    assert_eq!(first["trace_id"], trace);
    let second = &lines[1];
    assert_eq!(second["method"], "POST");
    assert_eq!(second["route"], "/");
    assert_eq!(second["request_bytes"], 3);
    assert!(second.get("trace_id").is_none(), "{second}");
    // The server's other lines are JSON too (every line parsed above), with their message.
    assert!(text.contains("\"message\":\"serving\""), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `lrpc serve` started with `cmd`, its fd 3 the listening socket `l` (as a service manager
/// passes it).
fn with_passed_socket(mut cmd: Command, l: &std::net::TcpListener) -> Server {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::process::CommandExt as _;
    let fd = l.as_raw_fd();
    #[allow(unsafe_code, reason = "placing the socket at fd 3 in the child")]
    // SAFETY: the closure runs in the child between fork and exec and calls only `dup2` and
    // `fcntl`, which are async-signal-safe; `fd` stays open in the parent (borrowed from
    // `l`, alive across the spawn), so it is open in the child too.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 leaves close-on-exec off on its copy; on the same number it does nothing.
            let r = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Server::of(cmd)
}

/// A socket bound by the test and passed as fd 3 is served, as systemd passes it:
/// `LISTEN_FDS=1` and `LISTEN_PID` set to the server's own pid (a shell that `exec`s the
/// server keeps its pid), or with `--listenfd`, which does not look at `LISTEN_PID`. Passed
/// for another process (a `LISTEN_PID` not ours), the socket is left alone and `--listen`
/// is bound.
#[test]
fn a_socket_passed_as_systemd_does_is_served() {
    let _beside = ALONE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = scratch("listenfd");
    let config = root_route_config(&dir, "");
    let hello = |s: &Server| {
        let r = s.get("/x", &[]);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "hello anonymous at GET /x\n")
        );
    };
    // Binds a socket, starts `cmd` with it passed, checks that a request is answered, and
    // whether the server listens on that socket.
    let serve = |cmd: &dyn Fn() -> Command| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        let s = with_passed_socket(cmd(), &l);
        hello(&s);
        s.addr == addr
    };
    // systemd's way: the variables name this process.
    assert!(serve(&|| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" serve \"$1\"")
            .arg(LRPC)
            .arg(&config);
        cmd
    }));
    // `--listenfd`, with no LISTEN_PID.
    assert!(serve(&|| {
        let mut cmd = Command::new(LRPC);
        cmd.arg("serve")
            .arg(&config)
            .arg("--listenfd")
            .env("LISTEN_FDS", "1")
            .env_remove("LISTEN_PID");
        cmd
    }));
    // For another process: not taken.
    assert!(!serve(&|| {
        let mut cmd = Command::new(LRPC);
        cmd.arg("serve")
            .arg(&config)
            .args(["--listen", "127.0.0.1:0"])
            .env("LISTEN_FDS", "1")
            .env("LISTEN_PID", "1");
        cmd
    }));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A config with the `http-leak` plugin as domain `leak` with `isolation = "request"` and
/// `replicas` replicas (route `/iso`), and as domain `shared` without isolation (route
/// `/shared`).
fn leak_config(dir: &Path, replicas: usize) -> PathBuf {
    write_config(
        dir,
        &format!(
            "[domains.leak]\nguest = \"http-leak\"\nisolation = \"request\"\n\
             replicas = {replicas}\n\
             exports = [{{ interface = \"lrpc:http/plugin\", deadline = \"5s\" }}]\n\
             [domains.shared]\nguest = \"http-leak\"\n\
             exports = [{{ interface = \"lrpc:http/plugin\", deadline = \"5s\" }}]\n\
             [[routes]]\nprefix = \"/iso\"\nchain = [\"leak\"]\n\
             [[routes]]\nprefix = \"/shared\"\nchain = [\"shared\"]\n"
        ),
    )
}

/// What a fresh `http-leak` answers: nothing from before.
const NOTHING_SEEN: &str = "static=;heap=;count=0";

/// Random tenant names (xorshift, seeded from the clock: a different run each time).
struct Tenants(u64);

impl Tenants {
    fn new() -> Tenants {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        Tenants(seed | 1)
    }

    fn next(&mut self) -> String {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        format!("tenant-{x:016x}")
    }
}

/// `x-seen` of a `200` from `http-leak`, `tenant` sent as `x-tenant`.
fn seen(addr: &str, path: &str, tenant: &str) -> String {
    let r = request(addr, "GET", path, &[("x-tenant", tenant)], b"");
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.header("x-seen").expect("x-seen").to_string()
}

#[test]
fn an_isolated_plugin_never_shows_a_request_what_an_earlier_one_left() {
    // `http-leak` keeps each request's tenant in a static, on its heap and in a counter.
    // With `isolation = "request"` no request of 1,000, each with a random tenant, finds any
    // of it; the same plugin without isolation shows the last tenant to the next request
    // (so the check below can fail).
    let dir = scratch("isolation-leak");
    let s = Server::start(&leak_config(&dir, 1));
    let mut tenants = Tenants::new();
    for i in 0..1000 {
        let tenant = tenants.next();
        let seen = seen(&s.addr, "/iso/x", &tenant);
        assert_eq!(
            seen, NOTHING_SEEN,
            "request {i} found an earlier request's state"
        );
    }
    let mut last = tenants.next();
    seen(&s.addr, "/shared/x", &last);
    for i in 0..20 {
        let tenant = tenants.next();
        let seen = seen(&s.addr, "/shared/x", &tenant);
        assert!(
            seen.starts_with(&format!("static={last};heap={last};count=")),
            "request {i} without isolation: {seen}, the last tenant was {last}"
        );
        last = tenant;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_isolated_plugin_that_traps_serves_the_next_request_at_once() {
    // A trap in an isolated plugin resets it instead of terminating it: the next request is
    // answered 200 by a clean instance, without a restart (and its backoff).
    let dir = scratch("isolation-trap");
    let s = Server::start(&leak_config(&dir, 1));
    let mut tenants = Tenants::new();
    for round in 0..5 {
        let r = request(
            &s.addr,
            "GET",
            "/iso/trap",
            &[("x-tenant", &tenants.next())],
            b"",
        );
        assert_eq!(r.status, 502, "round {round}: {}", r.text());
        let began = Instant::now();
        let seen = seen(&s.addr, "/iso/x", &tenants.next());
        assert_eq!(seen, NOTHING_SEEN, "round {round}: after the trap");
        // Generous for a loaded machine; a restart would be counted below in any case.
        assert!(began.elapsed() < Duration::from_secs(5), "round {round}");
    }
    assert_eq!(s.metric("lrpc_domain_restarts_total{domain=\"leak\"}"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A config with the component plugin `comp-http-stamp` as domain `cleak` with
/// `isolation = "request"` (route `/ciso`), and as domain `cshared` without (route
/// `/cshared`).
fn component_leak_config(dir: &Path) -> PathBuf {
    write_config(
        dir,
        "[domains.cleak]\nguest = \"comp-http-stamp\"\nisolation = \"request\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [domains.cshared]\nguest = \"comp-http-stamp\"\n\
         exports = [{ interface = \"lrpc:http/plugin@0.2.0\" }]\n\
         [[routes]]\nprefix = \"/ciso\"\nchain = [\"cleak\"]\n\
         [[routes]]\nprefix = \"/cshared\"\nchain = [\"cshared\"]\n",
    )
}

#[test]
fn an_isolated_component_plugin_meets_each_request_fresh() {
    // A component plugin keeps each `/leak` request's tenant in a static and counts its
    // requests. Isolated, each of 300 requests with random tenants meets a fresh instance
    // and finds nothing; after a trap the next request is served at once, with no restart.
    // The same plugin without isolation shows the last tenant (so the check can fail).
    let dir = scratch("isolation-component");
    let s = Server::start(&component_leak_config(&dir));
    let mut tenants = Tenants::new();
    let fresh = "static=;count=0";
    for i in 0..300 {
        let seen = seen(&s.addr, "/ciso/leak", &tenants.next());
        assert_eq!(seen, fresh, "request {i} found an earlier request's state");
    }
    for round in 0..3 {
        let r = request(
            &s.addr,
            "GET",
            "/ciso/leak/trap",
            &[("x-tenant", &tenants.next())],
            b"",
        );
        assert_eq!(r.status, 502, "round {round}: {}", r.text());
        assert_eq!(seen(&s.addr, "/ciso/leak", &tenants.next()), fresh);
    }
    assert_eq!(
        s.metric("lrpc_domain_restarts_total{domain=\"cleak\"}"),
        0.0
    );
    let mut last = tenants.next();
    seen(&s.addr, "/cshared/leak", &last);
    for i in 0..10 {
        let tenant = tenants.next();
        let seen = seen(&s.addr, "/cshared/leak", &tenant);
        assert!(
            seen.starts_with(&format!("static={last};count=")),
            "request {i} without isolation: {seen}, the last tenant was {last}"
        );
        last = tenant;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_requests_each_meet_a_clean_replica_of_an_isolated_plugin() {
    // Two replicas, four clients at once: whichever replica a request is given, and
    // whatever the other replica runs meanwhile, it finds nothing from before.
    let dir = scratch("isolation-replicas");
    let s = Server::start(&leak_config(&dir, 2));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let addr = s.addr.clone();
            std::thread::spawn(move || {
                let mut tenants = Tenants::new();
                for i in 0..50 {
                    let tenant = format!("{}-{t}", tenants.next());
                    let seen = seen(&addr, "/iso/x", &tenant);
                    assert_eq!(seen, NOTHING_SEEN, "client {t}, request {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a client");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
