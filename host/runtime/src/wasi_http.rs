//! An off-the-shelf `wasi:http/incoming-handler` component as the handler at the end of a
//! chain, served with wasmtime-wasi-http.
//!
//! **Where it runs.** The component is a domain of the deployment, but not one of the
//! kernel's component domains: its imports are `wasi:http` and WASI, which the edge provides
//! (the kernel has no HTTP), so it gets a Store of its own with exactly the WASI its
//! `[domains.X.wasi]` table grants, its memory limit, and its deadline. It runs on the
//! kernel's engine, whose epoch ticker enforces the deadline. Each worker thread of a route
//! keeps one instance across requests (as replicas of a plugin do), so nothing is
//! instantiated per request; outgoing HTTP requests are refused.
//!
//! **A request.** After the plugins of the chain have passed the request on, the worker
//! hands it, as they left it, to the handler: an `incoming-request` whose authority is the
//! request's `host` header, and a `response-outparam`. When the guest sets the response, its
//! body is collected on the WASI runtime's threads while the guest writes it (so a body
//! larger than the stream's buffer does not stall the guest). The answer goes back to the
//! client the way a plugin's answer does.
//!
//! **Failure.** A trap answers 502, a call past the deadline 504 (also when the body is
//! not finished by then), both naming the domain; the instance is dropped (its Store is
//! poisoned), and the domain is restarted fresh with backoff as a plugin is: until then,
//! requests are answered 503. A guest that answers nothing, or an `error-code`, answers 502.

use crate::config::{DomainSpec, Source};
use crate::http::{Answer, Incoming};
use crate::metrics::Metrics;
use crate::supervise::{DeployError, Supervised, Supervision, died, lock, read};
use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt as _, Full, Limited};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, StoreLimitsBuilder, UpdateDeadline};
use wasmtime_wasi::runtime::AbortOnDropJoinHandle;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::p2::bindings::sync::{Proxy, ProxyPre};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

/// The data of a handler's Store.
pub struct HttpState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: Refuse,
    limits: lrpc_kernel::component::MeteredLimits,
    /// When the running call must stop.
    deadline: Option<Instant>,
}

impl WasiView for HttpState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HttpState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// `wasi:http` hooks that refuse every outgoing request: a handler reaches only what its
/// WASI grants give it.
struct Refuse;

impl WasiHttpHooks for Refuse {
    fn send_request(
        &mut self,
        _request: axum::http::Request<wasmtime_wasi_http::WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    axum::http::Response<wasmtime_wasi_http::WasiBody>,
                    Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                )>,
            > + Send,
    > {
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

/// The error a call stopped at its deadline traps with.
#[derive(Debug)]
struct PastDeadline;

impl std::fmt::Display for PastDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call ran past its deadline")
    }
}

impl std::error::Error for PastDeadline {}

/// One generation of a handler: the component, pre-instantiated.
pub struct Generation {
    pre: ProxyPre<HttpState>,
    /// 1 for the first; each restart or reload makes the next.
    pub generation: u64,
}

/// A worker's instance of a handler.
pub struct HandlerInstance {
    generation: u64,
    store: Store<HttpState>,
    proxy: Proxy,
}

/// What the guest passed to `response-outparam.set`.
enum Sent {
    /// A response; its body is being collected.
    Response(
        axum::http::response::Parts,
        AbortOnDropJoinHandle<Result<Bytes, String>>,
    ),
    /// An error code instead of a response.
    Error(ErrorCode),
}

/// A `wasi:http/incoming-handler` domain under supervision.
pub struct HttpHandler {
    /// The domain's name.
    pub name: String,
    source: Source,
    engine: Engine,
    /// The kernel, whose compiled code a restart or reload of the same bytes reuses.
    kernel: lrpc_kernel::Kernel,
    grants: lrpc_kernel::component::WasiGrants,
    memory: Option<usize>,
    deadline: Duration,
    max_body: usize,
    output: lrpc_kernel::component::CapturedOutput,
    current: Mutex<Arc<Generation>>,
    /// The current generation died and no fresh one has replaced it yet.
    down: AtomicBool,
    supervision: Supervision,
    /// The handler's call counter (looked up once).
    calls: crate::metrics::sharded::Counter,
    /// The linear memory of each worker's instance, counted by its Store's limiter; an
    /// instance's count goes when its Store does.
    memories: Mutex<Vec<std::sync::Weak<std::sync::atomic::AtomicUsize>>>,
}

impl Supervised for HttpHandler {
    const KIND: &'static str = "wasi:http handler";
    fn name(&self) -> &str {
        &self.name
    }
    fn supervision(&self) -> &Supervision {
        &self.supervision
    }
    fn replace(&self, generation: u64) -> Result<(), DeployError> {
        let wasm = read(&self.source)?;
        let pre = prepare(&self.kernel, &wasm)
            .map_err(|e| DeployError::Unknown(format!("wasi:http handler `{}`: {e}", self.name)))?;
        *lock(&self.current) = Arc::new(Generation { pre, generation });
        Ok(())
    }
    fn renewed(&self) {
        self.down.store(false, Ordering::Release);
    }
}

impl HttpHandler {
    /// Compiles and links the handler `spec` (a component domain exporting
    /// `wasi:http/incoming-handler`); responses are limited to `max_body` bytes.
    pub fn start(
        kernel: &lrpc_kernel::Kernel,
        spec: &DomainSpec,
        max_body: usize,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<HttpHandler>, DeployError> {
        let c = spec.component.clone().unwrap_or_default();
        let engine = kernel.engine().clone();
        let wasm = read(&spec.source)?;
        let pre = prepare(kernel, &wasm)
            .map_err(|e| DeployError::Unknown(format!("wasi:http handler `{}`: {e}", spec.name)))?;
        Ok(Arc::new(HttpHandler {
            name: spec.name.clone(),
            source: spec.source.clone(),
            engine,
            kernel: kernel.clone(),
            grants: c.wasi,
            memory: c.limits.memory,
            deadline: c.limits.deadline.unwrap_or(kernel.config().deadline),
            max_body,
            output: lrpc_kernel::component::CapturedOutput::default(),
            current: Mutex::new(Arc::new(Generation { pre, generation: 1 })),
            down: AtomicBool::new(false),
            calls: metrics.call_counter(&spec.name),
            supervision: Supervision::new(metrics),
            memories: Mutex::default(),
        }))
    }

    /// The generation requests use now.
    pub fn current(&self) -> Arc<Generation> {
        lock(&self.current).clone()
    }

    /// The component file, when the handler comes from one.
    pub fn file(&self) -> Option<&std::path::Path> {
        match &self.source {
            Source::File(p) => Some(p),
            Source::Builtin(..) => None,
        }
    }

    /// What the handler wrote to standard output and error, when its grants capture them.
    pub fn captured(&self) -> &lrpc_kernel::component::CapturedOutput {
        &self.output
    }

    /// Replaces the running generation with one from the component's current bytes.
    /// Requests in flight finish on the instances they started on.
    pub fn reload(&self) -> Result<u64, DeployError> {
        crate::supervise::reload(self)
    }

    /// Reports that generation `generation` died: the handler is down until a fresh
    /// generation replaces it, and the first report schedules a restart with backoff.
    pub fn died(self: &Arc<Self>, generation: u64) {
        if self.supervision.generation() == generation {
            self.down.store(true, Ordering::Release);
        }
        died(self, generation);
    }

    /// A fresh instance of the current generation, in a fresh Store.
    fn instantiate(&self, generation: &Generation) -> Result<HandlerInstance, String> {
        let wasi = self.grants.context(&self.output)?;
        let mut limits = StoreLimitsBuilder::new();
        if let Some(m) = self.memory {
            limits = limits.memory_size(m);
        }
        let bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        {
            let mut m = lock(&self.memories);
            m.retain(|w| w.strong_count() > 0);
            m.push(Arc::downgrade(&bytes));
        }
        let mut store = Store::new(
            &self.engine,
            HttpState {
                wasi,
                http: WasiHttpCtx::new(),
                table: ResourceTable::new(),
                hooks: Refuse,
                limits: lrpc_kernel::component::MeteredLimits::new(limits.build(), bytes),
                deadline: Some(Instant::now() + self.deadline),
            },
        );
        store.limiter(|s| &mut s.limits);
        store.epoch_deadline_callback(|ctx| match ctx.data().deadline {
            Some(d) if Instant::now() >= d => Err(wasmtime::Error::new(PastDeadline)),
            _ => Ok(UpdateDeadline::Continue(1)),
        });
        store.set_epoch_deadline(1);
        let proxy = generation
            .pre
            .instantiate(&mut store)
            .map_err(|e| format!("{e:#}"))?;
        store.data_mut().deadline = None;
        Ok(HandlerInstance {
            generation: generation.generation,
            store,
            proxy,
        })
    }

    /// Bytes of linear memory held by the handler's instances (one per route worker that has
    /// served it).
    pub fn memory(&self) -> usize {
        lock(&self.memories)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    /// Serves one request on the worker's instance (`slot`, made or replaced as needed);
    /// counts the call and its failures.
    pub fn serve(self: &Arc<Self>, slot: &mut Option<HandlerInstance>, req: Incoming) -> Answer {
        self.calls.inc();
        let fail = |code: u16, kind: &str, what: &str| {
            self.supervision.metrics.failure(&self.name, kind);
            Answer::text(code, format!("plugin {} {what}\n", self.name))
        };
        let current = self.current();
        if self.down.load(Ordering::Acquire) {
            // Schedules another attempt if the last restart failed.
            self.died(current.generation);
            return fail(503, "terminated", "is restarting");
        }
        if slot
            .as_ref()
            .is_none_or(|i| i.generation != current.generation)
        {
            *slot = None;
            match self.instantiate(&current) {
                Ok(i) => *slot = Some(i),
                Err(e) => {
                    tracing::warn!(plugin = self.name, "instantiating failed: {e}");
                    self.died(current.generation);
                    return fail(503, "terminated", "is restarting");
                }
            }
        }
        let Some(inst) = slot.as_mut() else {
            return fail(503, "terminated", "is restarting");
        };
        let request = match hyper_request(req) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(plugin = self.name, "a request it can not take: {e}");
                return fail(502, "malformed", "was passed a malformed request");
            }
        };
        let sent: Arc<Mutex<Option<Sent>>> = Arc::default();
        let max = self.max_body;
        let sink = sent.clone();
        let resources = {
            let mut http = inst.store.data_mut().http();
            http.new_incoming_request(Scheme::Http, request)
                .and_then(|r| {
                    let out = http.new_response_outparam_from_callback(move |v| {
                        *lock(&sink) = Some(collect(v, max));
                    })?;
                    Ok((r, out))
                })
        };
        let (request, out) = match resources {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(plugin = self.name, "passing the request: {e:#}");
                return fail(502, "malformed", "was passed a malformed request");
            }
        };
        let until = Instant::now() + self.deadline;
        inst.store.data_mut().deadline = Some(until);
        let called =
            inst.proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut inst.store, request, out);
        inst.store.data_mut().deadline = None;
        let generation = inst.generation;
        if let Err(e) = called {
            // The Store is poisoned: the instance goes, the domain is restarted.
            *slot = None;
            self.died(generation);
            return if e.downcast_ref::<PastDeadline>().is_some() {
                fail(504, "deadline", "ran past its deadline")
            } else {
                tracing::warn!(plugin = self.name, "trapped: {e:#}");
                // 500, as `wasmtime serve` answers a handler's trap (a plugin's trap in a
                // chain is 502: the plugin is a gateway to what comes after it).
                fail(500, "trap", "trapped")
            };
        }
        let sent = lock(&sent).take();
        match sent {
            None => fail(502, "malformed", "answered nothing"),
            Some(Sent::Error(code)) => {
                tracing::warn!(plugin = self.name, "answered with an error: {code:?}");
                fail(502, "malformed", "answered with an error")
            }
            Some(Sent::Response(parts, body)) => {
                let left = until.saturating_duration_since(Instant::now());
                let body = wasmtime_wasi::runtime::in_tokio(async move {
                    tokio::time::timeout(left, body).await
                });
                match body {
                    Ok(Ok(body)) => Answer {
                        status: parts.status.as_u16(),
                        headers: parts
                            .headers
                            .iter()
                            .filter_map(|(n, v)| {
                                let v = std::str::from_utf8(v.as_bytes()).ok()?;
                                Some((n.as_str().to_string(), v.to_string()))
                            })
                            .collect(),
                        body: body.to_vec(),
                    },
                    Ok(Err(e)) => {
                        tracing::warn!(plugin = self.name, "its response body failed: {e}");
                        fail(502, "malformed", "answered with a malformed response")
                    }
                    Err(_) => {
                        // The guest holds on to an unfinished body: start afresh.
                        *slot = None;
                        self.died(generation);
                        fail(504, "deadline", "ran past its deadline")
                    }
                }
            }
        }
    }
}

/// Compiles `wasm` (or takes the kernel's code compiled from the same bytes before) and
/// links it against WASI and `wasi:http`.
fn prepare(kernel: &lrpc_kernel::Kernel, wasm: &[u8]) -> Result<ProxyPre<HttpState>, String> {
    if !lrpc_kernel::component::is_component(wasm) {
        return Err("not a component".into());
    }
    let component = kernel
        .compile_component(wasm)
        .map_err(|e| format!("{e:#}"))?;
    let engine = kernel.engine();
    let mut linker: Linker<HttpState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| format!("{e:#}"))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)
        .map_err(|e| format!("{e:#}"))?;
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| format!("{e:#}"))?;
    ProxyPre::new(pre).map_err(|e| format!("does not export {}: {e:#}", HANDLER))
}

const HANDLER: &str = crate::config::HANDLER_INTERFACE;

/// What `response-outparam.set` received; a response's body starts being collected (at most
/// `max` bytes) on the WASI runtime.
fn collect(v: Result<axum::http::Response<HyperOutgoingBody>, ErrorCode>, max: usize) -> Sent {
    match v {
        Ok(r) => {
            let (parts, body) = r.into_parts();
            let task = wasmtime_wasi::runtime::spawn(async move {
                Limited::new(body, max)
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .map_err(|e| e.to_string())
            });
            Sent::Response(parts, task)
        }
        Err(code) => Sent::Error(code),
    }
}

/// The request as the chain left it, as an HTTP request (method, path and headers checked).
fn hyper_request(
    req: Incoming,
) -> Result<
    Request<http_body_util::combinators::UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>>,
    String,
> {
    let method = Method::from_bytes(req.method.as_bytes()).map_err(|e| e.to_string())?;
    let host = req
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map_or("localhost", |(_, v)| v.as_str());
    let path = if req.path.starts_with('/') {
        req.path.clone()
    } else {
        format!("/{}", req.path)
    };
    let uri = Uri::builder()
        .scheme("http")
        .authority(host)
        .path_and_query(path.as_str())
        .build()
        .or_else(|_| {
            Uri::builder()
                .scheme("http")
                .authority("localhost")
                .path_and_query(path.as_str())
                .build()
        })
        .map_err(|e| format!("path `{path}`: {e}"))?;
    let mut b = Request::builder().method(method).uri(uri);
    for (n, v) in &req.headers {
        let name = HeaderName::from_bytes(n.as_bytes()).map_err(|e| format!("`{n}`: {e}"))?;
        let value = HeaderValue::from_str(v).map_err(|e| format!("`{n}`: {e}"))?;
        b = b.header(name, value);
    }
    let body = Full::new(Bytes::from(req.body))
        .map_err(|never| match never {})
        .boxed_unsync();
    b.body(body).map_err(|e| e.to_string())
}
