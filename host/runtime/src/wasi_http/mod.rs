//! An off-the-shelf `wasi:http/incoming-handler` component as the handler at the end of a
//! chain, served with wasmtime-wasi-http.
//!
//! **WASI 0.3.** A component that exports `wasi:http/handler@0.3` instead (found in its
//! exports when it is deployed or reloaded) is served by [`p3`]: instances that serve
//! several requests at once, on the kernel's pooled concurrent engine. What follows is about
//! WASI 0.2 handlers; the grants, the outgoing-HTTP hooks, the request body and the streamed
//! response body are shared.
//!
//! **Where it runs.** The component is a domain of the deployment, but not one of the
//! kernel's component domains: its imports are `wasi:http` and WASI, which the edge provides
//! (the kernel has no HTTP), so it gets a Store of its own with exactly the WASI its
//! `[domains.X.wasi]` table grants, its memory limit, and its deadline.
//!
//! **An instance per request.** Components written for `wasmtime serve` or Spin expect a
//! fresh instance for each request, so each request gets one by default; `reuse = N` lets
//! one instance serve up to N requests in turn. Handlers run on the kernel's pooled engine
//! (`EngineKind::Pooled`): instances come from a pool reserved at start, and memories
//! from copy-on-write images, so instantiating costs tens of microseconds. The kernel's
//! epoch ticker ticks that engine too, which enforces the deadline. An instance that failed
//! in any way is never used again.
//!
//! **Outgoing HTTP.** A handler may send requests only to the origins its `[domains.X.wasi]
//! http` list grants; others fail with `HttpRequestDenied`. Allowed ones go out through
//! wasmtime-wasi-http's default sender (HTTPS with the webpki roots), and none outlives the
//! deadline of the request the handler is serving.
//!
//! **A request.** After the plugins of the chain have passed the request on (or at once,
//! with none), it goes, as they left it, to a task of its own (p2.rs) on the handler: an `incoming-request` whose authority is the
//! request's `host` header, and a `response-outparam`. When no plugin in front takes the
//! body (none does, or all say `body = "none"`), the body is not collected: it streams from
//! the client as the guest reads it ([`RequestBody`], request.rs, capped at the route's
//! `max-body`).
//!
//! **The response.** The response the guest sets is held back (see `Outparam`, heads.rs):
//! a guest that finishes its body and returns, as most do, has it sent whole, in one
//! hand-over to the client's connection. A guest still running a moment later
//! (`heads::HOLD`) gets its head sent then, over the request's reply channel, and its
//! body streams behind it (`StreamedBody`, body.rs) through wasmtime-wasi-http's bounded
//! channel, so a slow client slows the guest's writes.
//!
//! **Failure.** A trap answers 500, a call past the deadline 504, both naming the domain;
//! the instance is dropped (its Store is poisoned) and the next request gets a fresh one, as
//! under `wasmtime serve`: unlike a plugin, the domain is not restarted, so a client that
//! makes the handler trap can not hold its route in a restart's backoff. When the head went out
//! already, the body ends badly instead (the client's connection is aborted), as it does at
//! the deadline and when the guest returns with the body unfinished. A guest that answers
//! nothing, or an `error-code`, answers 502, and its instance is dropped (the domain is not
//! restarted).
//!
//! **Files.** mod.rs: the Store's data, generations, the instance pool's size;
//! handler.rs: the domain under supervision and its Stores; p2.rs: a WASI 0.2 request's
//! task; instances.rs: its instances between requests; p3.rs: WASI 0.3 instances;
//! request.rs: the request and its streamed body; heads.rs: response heads held back;
//! body.rs: response bodies, whole or streamed; outgoing.rs: the handler's outgoing HTTP.

mod body;
mod handler;
mod heads;
mod instances;
mod outgoing;
mod p2;
mod p3;
mod request;

pub use handler::HttpHandler;
pub use request::{BodyState, RequestBody};

use crate::config::DomainSpec;
use lrpc_kernel::component::EngineKind;
use outgoing::Outgoing;
use std::sync::Arc;
use std::time::Instant;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// The data of a handler's Store.
pub struct HttpState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: Outgoing,
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
        // An outgoing request made through this view ends by the running call's deadline.
        self.hooks.deadline = self.deadline;
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// The error a call stopped at its deadline traps with.
#[derive(Debug, thiserror::Error)]
#[error("the call ran past its deadline")]
struct PastDeadline;

/// The error a call stopped at shutdown traps with (see [`HttpHandler::stop`]).
#[derive(Debug, thiserror::Error)]
#[error("the server is shutting down")]
struct ShutDown;

/// One generation of a handler: the component, pre-instantiated.
pub struct Generation {
    pre: Pre,
    /// 1 for the first; each restart or reload makes the next.
    pub generation: u64,
}

/// A generation's component: a WASI 0.2 handler, run by a task per request (p2.rs), or a
/// WASI 0.3 one, run by its [`p3::Service`] on the WASI runtime.
enum Pre {
    P2(ProxyPre<HttpState>),
    P3(Arc<p3::Service>),
}

/// Generation `generation` of the handler `me`, of the component `pre`.
fn generation_of(
    pre: Prepared,
    me: std::sync::Weak<HttpHandler>,
    generation: u64,
    limits: p3::Limits,
) -> Generation {
    let pre = match pre {
        Prepared::P2(pre) => Pre::P2(pre),
        Prepared::P3(pre) => Pre::P3(Arc::new(p3::Service::new(pre, me, generation, limits))),
    };
    Generation { pre, generation }
}

/// A component prepared for serving, before it is a generation.
enum Prepared {
    P2(ProxyPre<HttpState>),
    P3(p3::Pre),
}

/// The most bytes a linear memory of a handler takes when its `memory` limit is not set.
pub const HANDLER_MEMORY: usize = 128 << 20;

/// Instances in the handler pool beyond one per worker of the routes that end in a handler
/// (a handler has at most that many instances: at work, or idle between requests).
const POOL_MARGIN: u32 = 2;

/// A handler's memory limit: its `memory`, else [`HANDLER_MEMORY`].
fn memory_limit(spec: &DomainSpec) -> usize {
    spec.component
        .as_ref()
        .and_then(|c| c.limits.memory)
        .unwrap_or(HANDLER_MEMORY)
}

/// The worker threads of the routes of `config` that end in the handler `name` (a WASI 0.3
/// handler runs as many instances at once at most).
pub fn workers(config: &crate::config::Config, name: &str) -> usize {
    config
        .routes
        .iter()
        .filter(|r| r.chain.last().is_some_and(|h| h == name))
        .map(|r| r.workers)
        .sum()
}

/// The kernel's instance pool for the `wasi:http` handlers of `config`: an instance per
/// worker of a route ending in one, and memories as large as the largest handler's limit.
pub fn pool(config: &crate::config::Config) -> lrpc_kernel::InstancePool {
    let workers: usize = config
        .routes
        .iter()
        .filter(|r| {
            r.chain
                .last()
                .and_then(|h| config.domains.get(h))
                .is_some_and(DomainSpec::http_handler)
        })
        .map(|r| r.workers)
        .sum();
    let memory = config
        .domains
        .values()
        .filter(|d| d.http_handler())
        .map(memory_limit)
        .max()
        .unwrap_or(HANDLER_MEMORY);
    lrpc_kernel::InstancePool::default()
        .with_instances(
            u32::try_from(workers)
                .unwrap_or(u32::MAX)
                .saturating_add(POOL_MARGIN),
        )
        .with_memory(memory)
}

/// Compiles `wasm` (or takes the kernel's code compiled from the same bytes before) and
/// links it against WASI and `wasi:http`: a component that exports WASI 0.3's
/// `wasi:http/handler` on the kernel's pooled concurrent engine, any other on its pooled one.
fn prepare(kernel: &lrpc_kernel::Kernel, wasm: &[u8]) -> Result<Prepared, String> {
    if !lrpc_kernel::component::is_component(wasm) {
        return Err("not a component".into());
    }
    if p3::exports_handler(wasm) {
        return p3::prepare(kernel, wasm).map(Prepared::P3);
    }
    let component = kernel
        .compile_component(EngineKind::Pooled, wasm)
        .map_err(|e| format!("{e:#}"))?;
    let mut linker: Linker<HttpState> = Linker::new(component.engine());
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| format!("{e:#}"))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
        .map_err(|e| format!("{e:#}"))?;
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| format!("{e:#}"))?;
    ProxyPre::new(pre)
        .map(Prepared::P2)
        .map_err(|e| format!("does not export {HANDLER} nor {}: {e:#}", p3::HANDLER))
}

const HANDLER: &str = crate::config::HANDLER_INTERFACE;

/// Whether the header `name` frames a message's body (RFC 9112 §6): the server sets those
/// lines for the body it hands on.
pub fn is_framing(name: &str) -> bool {
    name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding")
}
