//! The HTTP edge server: a route maps a path prefix to a chain of plugin domains; each
//! request goes through the chain's plugins in order until one answers.
//!
//! **A request's path**, file by file:
//!
//! ```text
//!  admission.rs  handle: one authority (router.rs), the route's cap on requests,
//!       │        its body (body.rs: read whole, or streamed to a handler), header values
//!       ▼
//!  mod.rs        Edge::dispatch_on: the route (router.rs: longest prefix, path below it),
//!       │        the request encoded (codec.rs)
//!       ├── pool::place: Reactor ──▶ reactor.rs  this thread's seat; hands the reactor's
//!       │                                        other work over when guest code runs long
//!       └── pool::place: Pool ─────▶ pool.rs     a thread of the route's pool; its seat
//!                                    │
//!                                    ▼
//!                      chain.rs  Seat::serve ─▶ ChainRun: plugins in order, then the
//!                                    │           handler (crate::wasi_http); restarts
//!                                    ▼
//!  response.rs   the HTTP response (none of a body to HEAD)
//!
//!  admin.rs: /metrics, /admin/reload          shutdown.rs: drain, end of grace, signals
//!  health.rs: the liveness and readiness probes   access.rs: the access log's line
//! ```
//!
//! **Names**, one line each:
//! - `Seat` (chain.rs): what a thread keeps between a route's requests: driver, bindings,
//!   handler instance.
//! - `ThreadSlot` (reactor.rs): a reactor thread's place on a route, holding its seat.
//! - `Seated` (reactor.rs): what a slot, or the spare seats, hold: seats and their times.
//! - `RequestTimes` (reactor.rs): a route's recent wall-clock times (not `lrpc_kernel::pace`).
//! - `place` (pool.rs): the one policy for where a request runs: reactor or pool.
//! - `Worker` (pool.rs): a pool thread's state (`workers` in the config): seat and meters.
//! - `ChainRun` (chain.rs): a seat at work on one request, plugins then handler.
//! - `ComeBack` (pool.rs): what a pool worker saw that brings its route back to the reactor.
//! - `Pool` (`lrpc_driver::pool`): a route's threads and the one queue of its `Job`s.
//!
//! **Where wasm runs.** A request of a short route runs on the reactor thread that received
//! it: calls migrate into the plugins on that thread, as a native handler's code would run
//! there, with no hand-over to another thread and back (that hop alone costs a third of the
//! native handler's throughput: see the load benchmark). Guest code can not be preempted
//! there, so two things keep a long computation from holding the reactor:
//! - **Per request:** while a request's guest code runs, the thread watches the epoch ticks
//!   (`lrpc_kernel::pace`); at a tick [`LONG_REQUEST`] after the request began once the guest has
//!   kept the processor busy since (not when the system merely preempted the thread), or
//!   when a call is about to wait for a `Store` another thread holds, the thread hands the
//!   reactor's other work to a new thread (`tokio::task::block_in_place`) and finishes the
//!   request alone.
//! - **Per route:** a route whose requests turn out long on the reactor (they average
//!   [`LONG_REQUEST`] of wall-clock time and one in eight takes half of it, or they average
//!   eight times it: see `RequestTimes`) leaves it for its pool (`workers` threads, each with
//!   a driver bound to the route's plugins; the answer comes back on a oneshot channel).
//!   A worker that then sees a thousand of its requests clearly short brings it back
//!   (`ComeBack`). On tokio's current-thread runtime, plugins always use the pool.
//!
//! A `wasi:http` handler's code runs as a task per request on the reactor
//! ([`crate::wasi_http`]: wasmtime's async bindings, yielding at every epoch tick). A route
//! of a handler alone has no workers; on one with plugins, a worker runs them and hands the
//! request to the handler's task.
//!
//! (`spawn_blocking` for every request would pay the hop on every request and share one
//! pool between routes, so a slow route could take every blocking thread; wasmtime's async
//! epoch yielding would make every entry into a domain an async call, which the kernel's
//! synchronous call path does not do.) Plugins are created with replicas so that several
//! threads call them in parallel. A pool worker whose requests take more than 1 ms of
//! processor time on average pauses its guest computation at epoch ticks while short
//! requests keep arriving (`give_way_while_short_requests_arrive`, through `lrpc_kernel::pace`):
//! long computations hold only their own route's workers, and on a loaded machine they also
//! give way to short requests for the processors, without handing processor time to other
//! processes (the thread keeps its scheduling class and priority).
//!
//! The load benchmark (`host/runtime/bench/run.sh`) measures the chains alone and beside a
//! loaded slow route; its numbers are in `bench-results/edge.json`.
//!
//! **Kinds of domain in a chain.** A plugin is a core module or a component exporting
//! `lrpc:http/plugin`; the driver reaches a component through the kernel's core stand-in of its
//! export, so a chain mixes both kinds. The last domain of a chain may instead be an
//! off-the-shelf `wasi:http/incoming-handler` component ([`crate::wasi_http`]): the driver
//! hands back the request as the plugins left it, and the handler's task serves it, outside
//! the kernel's call path.
//!
//! **Failures.** A plugin that traps answers 502, one that runs past its deadline 504, one
//! whose domain is dead (and being restarted) 503, each with a short body naming the
//! plugin. The kernel has already terminated a faulting plugin; the runtime starts a fresh
//! generation with backoff ([`crate::deploy::Plugin::died`]), and workers rebind to it at
//! their next request. A reload swaps generations the same way, so requests in flight
//! finish on the generation they started on.
//!
//! **Shutdown.** [`Edge::end_grace`] ends a shutdown's grace period: every plugin's current
//! generation is terminated and every `wasi:http` handler stopped, for good (their
//! supervision restarts nothing after that). The kernel interrupts guest code of a
//! terminated domain at its next epoch tick, on whatever thread runs it, so a call that
//! would run to an hour's deadline ends within a tick; the request answers 503, as do the
//! requests queued for a worker and those waiting for a worker's answer. The workers are
//! then waited for with a bound ([`Edge::shutdown_within`]).

mod access;
mod admin;
mod admission;
mod body;
mod chain;
mod codec;
mod health;
mod pool;
mod reactor;
mod response;
mod router;
mod shutdown;

pub use admin::ADMIN_SPACING;
pub use codec::{decode_request, decode_response, encode_request};
pub use shutdown::{GraceEnded, shutdown_signal};

use crate::config::Route;
use crate::deploy::{Deployment, Plugin};
use crate::driver::pool::{Pool, Refused};
use crate::http::{Answer, Incoming, Reply};
use crate::metrics::RouteMeters;
use crate::telemetry;
use crate::wasi_http::{HttpHandler, RequestBody};
use admission::{InFlight, handle};
use axum::Router;
use axum::routing::{get, post};
use codec::encode_request_with;
use pool::{EDGE_WAKE, Job, Place, Worker, place};
use reactor::{OnReactor, SEATS, Seated, ThreadSlot, add_seat};
use response::{no_route, shutting_down, whole};
use router::{matches, strip};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;
/// A route at run time: its chain, its pool of workers, its seats on the reactor,
/// its meters and counts.
struct RouteRt {
    route: Route,
    /// The chain's plugins (without a `wasi:http` handler that ends it).
    plugins: Vec<Arc<Plugin>>,
    /// The `wasi:http` handler at the end of the chain, if it has one.
    handler: Option<Arc<HttpHandler>>,
    /// The plugins that take no body (`body = "none"`), bit `slot` each: they get an empty
    /// one and may not pass one on.
    bodyless: u32,
    /// The route's workers and the requests queued for them (at most `max_in_flight`).
    pool: Pool<Job>,
    /// The route's metrics, and each plugin's call counter (in chain order).
    meters: RouteMeters,
    calls: Vec<crate::metrics::sharded::Counter>,
    /// The route's requests on the reactor's threads.
    reactor: OnReactor,
    /// Requests admitted and not yet answered (bounded by the route's `max_in_flight`).
    admitted: AtomicUsize,
    /// Requests a seat is serving now (on the reactor or a worker).
    running: AtomicUsize,
}

impl RouteRt {
    /// Whether a plugin takes the body, which is then read whole before the chain runs.
    /// Otherwise it streams to the handler, if there is one, and is not read if not.
    fn reads_body(&self) -> bool {
        (self.bodyless.count_ones() as usize) < self.plugins.len()
    }
}

struct EdgeInner {
    deployment: Arc<Deployment>,
    routes: Vec<Arc<RouteRt>>,
    /// Requests that short requests' threads have started, on every route (see
    /// `give_way_while_short_requests_arrive`).
    short: Arc<AtomicU64>,
    /// Set by [`Edge::shutdown`] and [`Edge::end_grace`].
    stopped: AtomicBool,
    /// Set by [`Edge::drain`]: the readiness probe answers 503.
    draining: AtomicBool,
    /// Set by [`Edge::end_grace`]: requests waiting for a worker's answer get 503 now.
    ended: AtomicBool,
    /// Notified when `ended` is set.
    ended_now: tokio::sync::Notify,
    /// When the admin endpoint next takes a reload (see [`ADMIN_SPACING`]).
    admin_next: Mutex<Instant>,
}

/// A running edge server's routes and workers. Clone to share; [`Edge::router`] gives the
/// axum router that serves them.
#[derive(Clone)]
pub struct Edge {
    inner: Arc<EdgeInner>,
}

impl Edge {
    /// Starts the worker threads of every route of the deployment.
    pub fn start(deployment: Arc<Deployment>) -> std::io::Result<Edge> {
        let mut routes = Vec::new();
        let short = Arc::new(AtomicU64::new(0));
        for route in &deployment.config.routes {
            let plugins: Vec<Arc<Plugin>> = route
                .chain
                .iter()
                .filter_map(|p| deployment.plugins.get(p).cloned())
                .collect();
            let handler = route
                .chain
                .last()
                .and_then(|h| deployment.handlers.get(h).cloned());
            let calls = plugins
                .iter()
                .map(|p| deployment.metrics.call_counter(&p.name))
                .collect();
            // A chain has at most 16 plugins (the config's limit); one past 32 would take
            // the body.
            let bodyless = plugins
                .iter()
                .enumerate()
                .filter(|(slot, p)| {
                    let spec = deployment.config.domains.get(&p.name);
                    *slot < 32 && spec.is_some_and(|d| !d.takes_body)
                })
                .fold(0u32, |m, (slot, _)| m | 1 << slot);
            let on_reactor = handler.is_none();
            let meters = deployment.metrics.route(&route.prefix);
            // A handler alone runs as tasks on the reactor's threads.
            meters.on_reactor(on_reactor || plugins.is_empty());
            let rt = Arc::new(RouteRt {
                meters,
                calls,
                route: route.clone(),
                plugins,
                handler,
                bodyless,
                pool: Pool::new(route.max_in_flight, EDGE_WAKE),
                reactor: OnReactor {
                    // A `wasi:http` handler runs on a runtime of its own, which may not be
                    // entered from the reactor.
                    on: AtomicBool::new(on_reactor),
                    slots: (0..SEATS)
                        .map(|_| ThreadSlot(Mutex::new(Seated::default())))
                        .collect(),
                    spare: Mutex::new(Seated::default()),
                    made: AtomicUsize::new(0),
                    left: AtomicU32::new(0),
                    making: AtomicBool::new(false),
                },
                admitted: AtomicUsize::new(0),
                running: AtomicUsize::new(0),
            });
            let (rt2, rt3, dep, short) =
                (rt.clone(), rt.clone(), deployment.clone(), short.clone());
            // A handler alone needs no workers: its requests run as tasks.
            let workers = if rt.plugins.is_empty() && rt.handler.is_some() {
                0
            } else {
                route.workers
            };
            rt.pool
                .start(
                    workers,
                    |k| format!("edge{}#{k}", route.prefix),
                    move |k| Ok::<_, std::convert::Infallible>(Worker::new(&rt2, k, short.clone())),
                    move |w: &mut Worker, job| w.run(&dep, &rt3, job),
                )
                .map_err(|e| match e {
                    crate::driver::pool::StartError::Spawn(e) => e,
                    e => std::io::Error::other(e.to_string()),
                })?;
            // A seat for each of the processors (a multi-thread runtime's default number of
            // reactor threads) is made now, so that a route's first request on any of them
            // runs on the reactor; more, as requests run side by side, on threads of their
            // own (`Edge::make_seat`).
            if on_reactor {
                let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
                for _ in 0..threads.min(SEATS) {
                    add_seat(&deployment, &rt);
                }
            }
            routes.push(rt);
        }
        // Longest prefix first, so that the first match is the most specific.
        routes.sort_by_key(|r| std::cmp::Reverse(r.route.prefix.len()));
        Ok(Edge {
            inner: Arc::new(EdgeInner {
                deployment,
                routes,
                short,
                stopped: AtomicBool::new(false),
                draining: AtomicBool::new(false),
                ended: AtomicBool::new(false),
                ended_now: tokio::sync::Notify::new(),
                admin_next: Mutex::new(Instant::now()),
            }),
        })
    }

    /// The router: the configured routes, `/metrics`, the liveness and readiness probes
    /// (`[serve] health-path`, `ready-path`), and (when the config turns it on, with a token)
    /// `POST /admin/reload/{domain}`.
    pub fn router(&self) -> Router {
        let probes = &self.inner.deployment.config.probes;
        let mut r = Router::new()
            .route("/metrics", get(admin::metrics))
            .route(&probes.health, get(health::alive))
            .route(&probes.ready, get(health::ready));
        if self.inner.deployment.config.admin.is_some() {
            r = r.route("/admin/reload/{domain}", post(admin::reload));
        }
        r.fallback(handle).with_state(self.clone())
    }

    /// The deployment.
    pub fn deployment(&self) -> &Arc<Deployment> {
        &self.inner.deployment
    }

    /// Runs one request through the route matching `path` (the embedding API without HTTP).
    pub async fn dispatch(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Answer {
        let max = self
            .route_for(path)
            .map_or(self.inner.deployment.config.max_body, |r| r.route.max_body);
        whole(self.dispatch_with(method, path, headers, body).await, max).await
    }

    /// [`Edge::dispatch`] with header names of any string type and values of any byte type
    /// (the server passes the ones it received without copying them).
    async fn dispatch_with<N: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        method: &str,
        path: &str,
        headers: &[(N, V)],
        body: &[u8],
    ) -> Reply {
        match self.route_for(path) {
            Some(route) => {
                self.dispatch_on(route, method, path, headers, body, Default::default())
                    .await
            }
            None => no_route(path).into(),
        }
    }

    /// The route that serves `path`: the longest prefix that matches it.
    fn route_for(&self, path: &str) -> Option<&Arc<RouteRt>> {
        self.inner
            .routes
            .iter()
            .find(|r| matches(&r.route.prefix, path))
    }

    /// [`Edge::dispatch_with`] on the route that serves `path`, found already.
    async fn dispatch_on<N: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        route: &Arc<RouteRt>,
        method: &str,
        path: &str,
        headers: &[(N, V)],
        body: &[u8],
        stream: Option<RequestBody>,
    ) -> Reply {
        let start = Instant::now();
        let inner = strip(&route.route.prefix, path);
        // At debug level, as the chain's span below: `lrpc serve` logs at info by default, and a
        // span its subscriber records costs more than a short chain's calls (about 8% of the
        // chain route's throughput); `RUST_LOG=lrpc_runtime=debug` shows both. Trace export
        // takes it whatever the log's level (`crate::telemetry`).
        let span = tracing::debug_span!(
            "request",
            otel.kind = "server",
            route = route.route.prefix,
            method,
            path,
            status = tracing::field::Empty,
        );
        // With export on, the span continues the client's trace.
        let traced = telemetry::on();
        if traced && let Some(parent) = telemetry::header(headers, telemetry::TRACEPARENT) {
            let state = telemetry::header(headers, telemetry::TRACESTATE);
            telemetry::adopt(&span, parent, state);
        }
        // A handler alone takes the request as it came (its task carries its own trace
        // context): it is not encoded for a driver. Plugins see the request span's own
        // `traceparent`.
        let alone = route.plugins.is_empty() && route.handler.is_some();
        let request = if alone {
            Vec::new()
        } else if let Some((parent, state)) = traced.then(|| telemetry::context_of(&span)).flatten()
        {
            let carried = telemetry::with_context(headers, &parent, &state);
            encode_request_with(method, &inner, &carried[..], body)
        } else {
            encode_request_with(method, &inner, headers, body)
        };
        let metrics = &self.inner.deployment.metrics;
        // Counted down on every way out, also when the client goes away mid-request.
        let _in_flight = InFlight::new(&route.meters);
        if place(route, self.inner.stopped.load(Ordering::Relaxed)) == Place::Reactor
            && let Some((answer, took)) =
                span.in_scope(|| self.serve_on_reactor(route, &request, start))
        {
            span.record("status", answer.status);
            route.meters.answered(metrics, answer.status, took);
            return answer.into();
        }
        let (tx, rx) = oneshot::channel();
        let _running;
        let sent = match &route.handler {
            // A handler alone: its request's task runs on this thread (`crate::wasi_http`).
            Some(h) if alone => {
                let r = Incoming {
                    method: method.to_owned(),
                    path: inner.into_owned(),
                    headers: headers
                        .iter()
                        .map(|(n, v)| (n.as_ref().to_owned(), v.as_ref().to_vec()))
                        .collect(),
                    body: body.to_vec(),
                };
                _running = Some(chain::Serving::new(&route.running));
                span.in_scope(|| h.serve(r, stream, tx, route.route.reuse, true));
                Ok(())
            }
            _ => route.pool.submit(Job {
                request,
                reply: tx,
                body: stream,
                span: span.clone(),
            }),
        };
        let reply = match sent {
            Ok(()) => {
                // At the end of a shutdown's grace, the answer is 503 whatever the worker is
                // doing.
                let ended = self.inner.ended_now.notified();
                tokio::pin!(ended);
                ended.as_mut().enable();
                if self.inner.ended.load(Ordering::SeqCst) {
                    shutting_down().into()
                } else {
                    tokio::select! {
                        r = rx => r.unwrap_or_else(|_| {
                            Answer::text(500, "the worker went away\n".into()).into()
                        }),
                        () = ended => shutting_down().into(),
                    }
                }
            }
            Err(Refused::Closed(_)) => shutting_down().into(),
            // Only through `Edge::dispatch`, which the route's admission does not bound.
            Err(Refused::Full(_)) => Answer::text(503, "the route's queue is full\n".into()).into(),
        };
        // A streamed reply counts when its head is out.
        span.record("status", reply.status());
        route
            .meters
            .answered(metrics, reply.status(), start.elapsed());
        reply
    }
}

/// Processor time per request (a [`CpuMeter`] average) past which a worker gives way to
/// short requests (see [`give_way_while_short_requests_arrive`]). The plugin chains of a web edge take
/// tens of microseconds.
const LONG_REQUEST: std::time::Duration = std::time::Duration::from_millis(1);
