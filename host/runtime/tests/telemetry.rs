//! Trace export (`lrpc_runtime::telemetry`): real `lrpc serve` and `lrpc run` processes
//! export their spans over OTLP/HTTP to a collector this test runs, and the spans of one
//! request form one tree under the caller's `traceparent`, across plugins, a handler and a
//! remote binding.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::request;

const LRPC: &str = env!("CARGO_BIN_EXE_lrpc");

/// The caller's trace and span, as a client would send them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE}-{PARENT}-01")
}

fn app(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/apps")
        .join(name)
}

/// One span as the collector got it.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
    kind: i32,
    attributes: Vec<(String, String)>,
}

impl Span {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// An OTLP/HTTP collector on loopback: `POST /v1/traces` with a protobuf body, decoded.
struct Collector {
    addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Collector {
    /// A collector of OTLP/HTTP.
    fn start() -> Collector {
        Collector::start_speaking(false)
    }

    /// A collector of OTLP/gRPC: HTTP/2, `TraceService/Export`, gRPC's length-prefixed
    /// messages and its status in the trailers.
    fn start_grpc() -> Collector {
        Collector::start_speaking(true)
    }

    fn start_speaking(grpc: bool) -> Collector {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let got = spans.clone();
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let got = got.clone();
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    if grpc {
                        let service = hyper::service::service_fn(move |req| {
                            let got = got.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(take_grpc(req, &got).await)
                            }
                        });
                        let _ = hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        )
                        .serve_connection(io, service)
                        .await;
                    } else {
                        let service = hyper::service::service_fn(move |req| {
                            let got = got.clone();
                            async move { Ok::<_, std::convert::Infallible>(take(req, &got).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, service)
                            .await;
                    }
                });
            }
        });
        Collector {
            addr,
            spans,
            _runtime: runtime,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (at most a minute: the export is batched, the machine may be loaded) until
    /// `done` holds for the spans received; them.
    fn wait_for(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < until,
                "no {what} after a minute; the spans received:\n{spans:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Decodes one export request into `got`; the collector's answer.
async fn take(
    req: hyper::Request<hyper::body::Incoming>,
    got: &Mutex<Vec<Span>>,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    use http_body_util::BodyExt as _;
    let answer = |status: u16| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(http_body_util::Full::new(hyper::body::Bytes::new()))
            .unwrap()
    };
    if req.method() != hyper::Method::POST || req.uri().path() != "/v1/traces" {
        return answer(404);
    }
    let Ok(body) = req.into_body().collect().await else {
        return answer(400);
    };
    let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return answer(400);
    };
    keep(export, got);
    // An empty `ExportTraceServiceResponse`: no bytes.
    answer(200)
}

/// Decodes one gRPC `Export` call into `got`; the answer: an empty response message and
/// status 0 in the trailers.
async fn take_grpc(
    req: hyper::Request<hyper::body::Incoming>,
    got: &Mutex<Vec<Span>>,
) -> hyper::Response<http_body_util::StreamBody<GrpcFrames>> {
    use http_body_util::BodyExt as _;
    let status = |code: &str| {
        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("grpc-status", code.parse().unwrap());
        let frames: Vec<Result<hyper::body::Frame<hyper::body::Bytes>, std::convert::Infallible>> = vec![
            Ok(hyper::body::Frame::data(hyper::body::Bytes::from_static(
                &[0, 0, 0, 0, 0],
            ))),
            Ok(hyper::body::Frame::trailers(trailers)),
        ];
        hyper::Response::builder()
            .header("content-type", "application/grpc")
            .body(http_body_util::StreamBody::new(futures::stream::iter(
                frames,
            )))
            .unwrap()
    };
    if req.uri().path() != "/opentelemetry.proto.collector.trace.v1.TraceService/Export" {
        return status("12");
    }
    let Ok(body) = req.into_body().collect().await else {
        return status("13");
    };
    let body = body.to_bytes();
    // One message: not compressed (0), its length (big endian), the protobuf.
    let Some(message) = body.get(5..).filter(|_| body.first() == Some(&0)) else {
        return status("13");
    };
    let Ok(export) = ExportTraceServiceRequest::decode(message) else {
        return status("13");
    };
    keep(export, got);
    status("0")
}

type GrpcFrames = futures::stream::Iter<
    std::vec::IntoIter<Result<hyper::body::Frame<hyper::body::Bytes>, std::convert::Infallible>>,
>;

/// Adds the spans of `export` to `got`.
fn keep(export: ExportTraceServiceRequest, got: &Mutex<Vec<Span>>) {
    let mut spans = got.lock().unwrap();
    for rs in export.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(a.value.as_ref()))
            .unwrap_or_default();
        for s in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            spans.push(Span {
                service: service.clone(),
                name: s.name,
                trace: hex(&s.trace_id),
                id: hex(&s.span_id),
                parent: hex(&s.parent_span_id),
                kind: s.kind,
                attributes: s
                    .attributes
                    .iter()
                    .map(|a| (a.key.clone(), text(a.value.as_ref())))
                    .collect(),
            });
        }
    }
}

/// The OTLP span kinds the tests look for.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

/// Spans go out over gRPC too, when `OTEL_EXPORTER_OTLP_PROTOCOL` says so.
#[test]
fn spans_go_out_over_grpc_too() {
    let collector = Collector::start_grpc();
    let mut command = traced(&collector, "grpc-test");
    command
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .arg("serve")
        .arg(app("http-chain").join("lrpc.toml"))
        .args(["--listen", "127.0.0.1:0"]);
    let server = Server::start(command, 1);
    let r = request(
        server.addr(),
        "GET",
        "/api/v1/greet",
        &[
            ("authorization", "Bearer letmein"),
            ("traceparent", &traceparent()),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let spans = collector.wait_for("the request's spans over gRPC", |s| {
        s.iter().any(|s| s.name == "request" && s.trace == TRACE)
            && s.iter()
                .filter(|s| s.name == "call" && s.trace == TRACE)
                .count()
                >= 3
    });
    let req = one(&spans, "request span", |s| s.name == "request");
    assert_eq!(req.parent, PARENT);
    assert_eq!(req.service, "grpc-test");
    let chain = one(&spans, "chain span", |s| s.name == "chain");
    for domain in ["auth", "rewrite", "hello"] {
        let call = one(&spans, domain, |s| s.name == "call" && of(s, domain));
        assert_eq!(
            call.parent, chain.id,
            "{domain}'s call is the chain's child"
        );
    }
}

/// `lrpc` with trace export to `collector` as `service`, quickly batched.
fn traced(collector: &Collector, service: &str) -> Command {
    let mut c = Command::new(LRPC);
    c.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_SERVICE_NAME", service)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("RUST_LOG", "info,lrpc::access=off")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_SAMPLER");
    c
}

/// A running `lrpc serve`, killed when dropped; its first `lines` lines of output.
struct Server {
    child: Child,
    lines: Vec<String>,
}

impl Server {
    fn start(mut command: Command, lines: usize) -> Server {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lrpc serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut got = Vec::new();
        for _ in 0..lines {
            let mut l = String::new();
            out.read_line(&mut l).expect("a line");
            got.push(l.trim().to_string());
        }
        Server { child, lines: got }
    }

    fn addr(&self) -> &str {
        self.lines[0]
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {:?}", self.lines[0]))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `s` is a call into (a generation of) the domain `domain`: the kernel names a
/// plugin's generations `NAME@N`.
fn of(s: &Span, domain: &str) -> bool {
    s.attr("domain")
        .and_then(|d| d.strip_prefix(domain))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('@'))
}

fn one<'s>(spans: &'s [Span], what: &str, f: impl Fn(&Span) -> bool) -> &'s Span {
    let found: Vec<&Span> = spans.iter().filter(|s| f(s)).collect();
    assert_eq!(
        found.len(),
        1,
        "one {what} expected, got {found:#?}\nof {spans:#?}"
    );
    found[0]
}

/// A request with a `traceparent` through `auth → rewrite → hello` (a `wasi:http` handler
/// that answers with the headers it got) and through `auth → stamp → rewrite → greet`
/// (plugins only, one a component): each request's spans form one tree under the caller's
/// span, and the handler sees its own span's `traceparent`.
#[test]
fn a_request_s_spans_form_one_tree_under_the_caller_s_span() {
    let collector = Collector::start();
    let mut command = traced(&collector, "edge-test");
    command
        .arg("serve")
        .arg(app("wasi-http").join("lrpc.toml"))
        .args(["--listen", "127.0.0.1:0"]);
    let server = Server::start(command, 1);
    let tp = traceparent();
    let alice = ("authorization", "Bearer letmein");
    let r = request(
        server.addr(),
        "GET",
        "/api/v1/headers",
        &[
            alice,
            ("traceparent", &tp),
            ("tracestate", "congo=t61rcWkgMzE"),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = r.text();

    let spans = collector.wait_for("handler span", |s| {
        s.iter().any(|s| s.name == "handler") && s.iter().any(|s| s.name == "request")
    });
    let mine: Vec<Span> = spans.iter().filter(|s| s.trace == TRACE).cloned().collect();
    assert!(mine.iter().all(|s| s.service == "edge-test"), "{mine:#?}");
    let req = one(&mine, "request span", |s| s.name == "request");
    assert_eq!(
        req.parent, PARENT,
        "the caller's span is the request's parent"
    );
    assert_eq!(req.kind, SERVER);
    assert_eq!(req.attr("route"), Some("/api"));
    assert_eq!(req.attr("status"), Some("200"));
    let chain = one(&mine, "chain span", |s| s.name == "chain");
    assert_eq!(chain.parent, req.id);
    for (domain, procedure) in [("auth", "handle"), ("rewrite", "handle")] {
        let call = one(&mine, domain, |s| s.name == "call" && of(s, domain));
        assert_eq!(
            call.parent, chain.id,
            "{domain}'s call is the chain's child"
        );
        assert_eq!(call.attr("procedure"), Some(procedure), "{call:#?}");
        assert_eq!(call.attr("deadline_ms"), Some("100"), "{call:#?}");
        assert_eq!(call.attr("status"), Some("ok"), "{call:#?}");
    }
    let handler = one(&mine, "handler span", |s| s.name == "handler");
    assert_eq!(handler.parent, req.id);
    assert_eq!(handler.attr("domain"), Some("hello"));
    // The handler got its own span's context, and the caller's trace state.
    let want = format!("traceparent: 00-{TRACE}-{}-01", handler.id);
    assert!(seen.contains(&want), "{want} in:\n{seen}");
    assert!(seen.contains("tracestate: congo=t61rcWkgMzE"), "{seen}");

    // Plugins only: every plugin's call, a component's too, under the chain.
    let other = "0af7651916cd43dd8448eb211c80319c";
    let r = request(
        server.addr(),
        "GET",
        "/mixed/hi",
        &[
            alice,
            ("traceparent", &format!("00-{other}-b7ad6b7169203331-01")),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let spans = collector.wait_for("the second request's calls", |s| {
        s.iter()
            .filter(|s| s.trace == other && s.name == "call")
            .count()
            >= 4
            && s.iter().any(|s| s.trace == other && s.name == "request")
    });
    let mine: Vec<Span> = spans.iter().filter(|s| s.trace == other).cloned().collect();
    let req = one(&mine, "request span", |s| s.name == "request");
    assert_eq!(req.parent, "b7ad6b7169203331");
    let chain = one(&mine, "chain span", |s| s.name == "chain");
    assert_eq!(chain.parent, req.id);
    for domain in ["auth", "stamp", "rewrite", "greet"] {
        let call = one(&mine, domain, |s| s.name == "call" && of(s, domain));
        assert_eq!(
            call.parent, chain.id,
            "{domain}'s call is the chain's child"
        );
    }
    // A request without a context starts a trace of its own.
    let r = request(server.addr(), "GET", "/mixed/x", &[alice], b"");
    assert_eq!(r.status, 200);
    let spans = collector.wait_for("a fresh trace", |s| {
        s.iter()
            .any(|s| s.name == "request" && s.trace != TRACE && s.trace != other)
    });
    let fresh = spans
        .iter()
        .find(|s| s.name == "request" && s.trace != TRACE && s.trace != other)
        .unwrap();
    assert_eq!(fresh.parent, "", "a root span");
}

/// `lrpc run` calls a key-value store that `lrpc serve` serves over wRPC (a session, over
/// TCP): the served call's span, in the other process, is the child of the client's remote
/// call span, in the trace that `TRACEPARENT` named.
#[test]
fn a_remote_call_s_server_span_is_the_client_s_child() {
    remote_call_spans(Transport::Tcp);
}

/// The same over NATS, where the context rides in the invocation's headers.
#[test]
fn over_nats_too() {
    remote_call_spans(Transport::Nats);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Nats,
}

/// A `nats-server` on a free loopback port, killed when dropped.
struct Bus(Child, u16);

impl Bus {
    fn start() -> Bus {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(common::nats_server())
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let bus = Bus(child, port);
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        bus
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn remote_call_spans(transport: Transport) {
    let collector = Collector::start();
    let dir = std::env::temp_dir().join(format!("lrpc-otel-{}-{transport:?}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kv = app("kv-remote");
    let bus = (transport == Transport::Nats).then(Bus::start);
    let listen = match &bus {
        Some(b) => format!("nats://127.0.0.1:{}/otel", b.1),
        None => "tcp:127.0.0.1:0".into(),
    };
    let text = std::fs::read_to_string(kv.join("server.toml")).unwrap();
    let server_toml = dir.join("server.toml");
    std::fs::write(
        &server_toml,
        text.replace("tcp:127.0.0.1:7000", &listen)
            .replace("127.0.0.1:8081", "127.0.0.1:0"),
    )
    .unwrap();
    let mut command = traced(&collector, "store-test");
    command.arg("serve").arg(&server_toml);
    let server = Server::start(command, 2);
    let endpoint = server.lines[1]
        .strip_prefix("exports on ")
        .unwrap_or_else(|| panic!("unexpected second line {:?}", server.lines[1]))
        .to_string();
    let text = std::fs::read_to_string(kv.join("client.toml")).unwrap();
    let client_toml = dir.join("client.toml");
    std::fs::write(&client_toml, text.replace("tcp:127.0.0.1:7000", &endpoint)).unwrap();

    let out = traced(&collector, "client-test")
        .env("TRACEPARENT", traceparent())
        .arg("run")
        .arg(&client_toml)
        .args(["--call", "lrpc:kv/store.get", "\"bin-1\""])
        .output()
        .expect("lrpc run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let spans = collector.wait_for("the served call's span", |s| {
        s.iter()
            .any(|s| s.name == "remote serve" && s.trace == TRACE)
            && s.iter()
                .any(|s| s.name == "remote call" && s.trace == TRACE)
            && s.iter().any(|s| s.name == "run")
            && s.iter()
                .any(|s| s.service == "store-test" && s.name == "call" && s.trace == TRACE)
    });
    let mine: Vec<Span> = spans.iter().filter(|s| s.trace == TRACE).cloned().collect();
    let run = one(&mine, "run span", |s| s.name == "run");
    assert_eq!(run.service, "client-test");
    assert_eq!(run.parent, PARENT, "TRACEPARENT names the run's parent");
    let client = one(&mine, "remote call span", |s| s.name == "remote call");
    assert_eq!(client.service, "client-test");
    assert_eq!(client.kind, CLIENT);
    assert_eq!(client.attr("procedure"), Some("get"));
    assert_eq!(client.attr("status"), Some("ok"));
    // The client's spans chain up to the run's.
    let mut at = client;
    while at.id != run.id {
        at = mine
            .iter()
            .find(|s| s.id == at.parent)
            .unwrap_or_else(|| panic!("the parent of {at:#?} in {mine:#?}"));
    }
    let served = one(&mine, "remote serve span", |s| s.name == "remote serve");
    assert_eq!(served.service, "store-test");
    assert_eq!(served.kind, SERVER);
    assert_eq!(
        served.parent, client.id,
        "the served call is the remote call's child"
    );
    let carried = match transport {
        Transport::Tcp => "session",
        Transport::Nats => "nats",
    };
    assert_eq!(served.attr("transport"), Some(carried));
    assert_eq!(served.attr("function"), Some("get"));
    assert_eq!(served.attr("status"), Some("ok"));
    let store = one(&mine, "the store's call", |s| {
        s.service == "store-test" && s.name == "call"
    });
    assert_eq!(
        store.parent, served.id,
        "the store's call runs in the served span"
    );
    assert!(of(store, "store"), "{store:#?}");
    drop(server);
    drop(bus);
    let _ = std::fs::remove_dir_all(&dir);
}
