//! The HTTP edge server: a route maps a path prefix to a chain of plugin domains; each
//! request goes through the chain's plugins in order until one answers.
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
//!   eight times it: see `Pace`) leaves it; from then on its own pool of worker threads
//!   (`workers` in the config) serves it, each owning a driver domain bound to the route's
//!   plugins, a request handed to the pool over a queue and its answer back on a oneshot
//!   channel. A worker that then sees the route's requests clearly short, in wall-clock and
//!   in processor time, over a thousand of them (more each time the route left before),
//!   brings it back to the reactor (`Return`): on a loaded machine the system may run other
//!   threads in the middle of a short request, and a spell of that must not cost the route
//!   the reactor for good. Routes ending in a
//!   `wasi:http` handler (which runs on a runtime of its own) and runtimes that can not hand
//!   work over (tokio's current-thread runtime) always use the pool.
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
//! `lrpc:http/plugin`; the driver reaches a component through the kernel's core face of its
//! export, so a chain mixes both kinds. The last domain of a chain may instead be an
//! off-the-shelf `wasi:http/incoming-handler` component ([`crate::wasi_http`]): the driver
//! hands back the request as the plugins left it, and the worker runs the handler on its own
//! instance of it, outside the kernel's call path.
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

use crate::body_rate::{BodyClock, Late};
use crate::config::Route;
use crate::deploy::{Deployment, Plugin, PluginInstance};
use crate::driver::{BindError, ChainEnd, Driver};
use crate::http::{Answer, Incoming, Reply};
use crate::metrics::RouteMeters;
use crate::supervise::{lock, report_failure};
use crate::wasi_http::{HandlerSlot, HttpHandler, RequestBody};
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lrpc_kernel::Status;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

struct Job {
    request: Vec<u8>,
    reply: oneshot::Sender<Reply>,
    /// The request body, when it streams to a handler (then `request` has none).
    body: Option<RequestBody>,
    span: tracing::Span,
}

struct RouteRt {
    route: Route,
    /// The chain's plugins (without a `wasi:http` handler that ends it).
    plugins: Vec<Arc<Plugin>>,
    /// The `wasi:http` handler at the end of the chain, if it has one.
    handler: Option<Arc<HttpHandler>>,
    /// The plugins that take no body (`body = "none"`), bit `slot` each: they get an empty
    /// one and may not pass one on.
    bodyless: u32,
    queue: Arc<JobQueue>,
    /// The route's metrics, and each plugin's call counter (in chain order).
    meters: RouteMeters,
    calls: Vec<crate::metrics::sharded::Counter>,
    workers: Mutex<Vec<JoinHandle<()>>>,
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

    /// Admits one more request if the route has room for it.
    fn admit(&self) -> Option<Admitted<'_>> {
        if self.admitted.fetch_add(1, Ordering::AcqRel) >= self.route.max_in_flight {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Admitted(&self.admitted))
    }
}

/// A request admitted to a route; gives its place back when dropped.
struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A route's requests on the reactor's threads (see the module docs): whether they still
/// run there, and the seats they use.
struct OnReactor {
    on: AtomicBool,
    /// One seat per thread (a thread uses slot `thread_index() % SEATS`), each on a cache
    /// line of its own: a thread takes its own seat's lock, which no other thread touches
    /// while the two run on different slots.
    slots: Box<[Slot]>,
    /// Seats made and not yet taken by a thread (and the seats a thread borrows when its
    /// own slot is busy).
    spare: Mutex<Held<Vec<Seat>>>,
    /// Seats made so far (each has a driver domain of its own name).
    made: AtomicUsize,
    /// Times the route left the reactor.
    left: AtomicU32,
    /// A seat is being made.
    making: AtomicBool,
}

/// Slots for the reactor's threads' seats, per route. Threads beyond it share slots; a
/// thread that finds its slot busy borrows a spare seat.
const SEATS: usize = 32;

/// A thread's seat on a route and the moving average of its requests' wall-clock time.
#[repr(align(128))]
struct Slot(Mutex<Held>);

/// Seats and the pace of the requests served on them.
#[derive(Default)]
struct Held<S = Option<Seat>> {
    seat: S,
    pace: Pace,
}

/// The recent wall-clock time of a route's requests: moving averages, each request entering
/// with weight 1/16, of their time and of how many of them were long (half of
/// [`LONG_REQUEST`] or more).
///
/// Wall-clock time is what a request holds a reactor thread for, also while its guest waits
/// on something, but it also counts the time the system ran other threads in its place: on a
/// loaded machine a request of microseconds now and then takes milliseconds that way. Such a
/// request is rare among its route's requests, where a long computation, or a guest that
/// waits, makes most of them long or their average very long. So a route is long when its
/// requests average [`LONG_REQUEST`] and at least one in eight of them is long, or when
/// they average eight times [`LONG_REQUEST`].
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct Pace {
    /// Seconds.
    average: f64,
    /// The share of long requests, from 0 to 1.
    long: f64,
}

impl Pace {
    /// Counts a request that took `took`.
    fn add(&mut self, took: Duration) {
        let long = if took >= LONG_REQUEST / 2 { 1.0 } else { 0.0 };
        self.average = self.average * (15.0 / 16.0) + took.as_secs_f64() / 16.0;
        self.long = self.long * (15.0 / 16.0) + long / 16.0;
    }

    /// Whether these are the requests of a long route (see above).
    fn is_long(&self) -> bool {
        let long = LONG_REQUEST.as_secs_f64();
        (self.average >= long && self.long >= 1.0 / 8.0) || self.average >= 8.0 * long
    }

    /// Whether these are clearly the requests of a short route: a route that left the
    /// reactor comes back only on this, well away from [`Pace::is_long`], so that it does
    /// not go back and forth.
    fn is_short(&self) -> bool {
        self.average < LONG_REQUEST.as_secs_f64() / 4.0 && self.long < 1.0 / 32.0
    }
}

/// Short requests a route's worker serves, after the route left the reactor, before the
/// route comes back to it (see [`Return`]); doubled each time it left again, at most
/// [`RETURN_DOUBLINGS`] times (about a million requests).
const RETURN_AFTER: u64 = 1024;
const RETURN_DOUBLINGS: u32 = 10;

impl OnReactor {
    /// Counts a request that took `took` on a reactor thread into its slot's pace (`pace`);
    /// a route whose requests turn out long ([`Pace::is_long`]) leaves the reactor for its
    /// workers, until they find its requests short again ([`Return`]). (A request counts
    /// without its seat's setup, and not at all, `None`, when it ended in a plugin's trap:
    /// see `Seat::route_time`.)
    fn took(&self, pace: &mut Pace, took: Option<Duration>, prefix: &str, meters: &RouteMeters) {
        let Some(took) = took else { return };
        pace.add(took);
        if pace.is_long() && self.on.swap(false, Ordering::Relaxed) {
            self.left.fetch_add(1, Ordering::Relaxed);
            meters.on_reactor(false);
            tracing::info!(
                route = prefix,
                "requests take over {LONG_REQUEST:?}: the route's workers serve them"
            );
        }
    }

    /// Brings a route that left the reactor back to it, with its seats' paces cleared.
    fn come_back(&self, prefix: &str, meters: &RouteMeters) {
        for slot in &self.slots {
            lock(&slot.0).pace = Pace::default();
        }
        lock(&self.spare).pace = Pace::default();
        if !self.on.swap(true, Ordering::Relaxed) {
            meters.on_reactor(true);
            tracing::info!(
                route = prefix,
                "requests are short again: the reactor's threads serve them"
            );
        }
    }
}

/// What a route's worker has seen since the route left the reactor: the pace of the
/// requests it served, their processor time, and how many there were. The route comes back
/// to the reactor once a worker has served enough of them ([`RETURN_AFTER`], doubled each
/// time the route left before) and they are clearly short, both in wall-clock time
/// ([`Pace::is_short`]) and in processor time: a route that left on a spell of load, when
/// the system ran other threads in the middle of its requests, does not stay off the
/// reactor for good, and one whose requests are long does not come back.
#[derive(Default)]
struct Return {
    /// The count of the route's departures this evidence is about.
    left: u32,
    pace: Pace,
    seen: u64,
}

impl Return {
    /// Counts a request of `rt` that took `took`, its worker's processor time per request
    /// averaging `cpu`; whether the route should come back to the reactor now.
    fn add(&mut self, rt: &RouteRt, took: Duration, cpu: Duration) -> bool {
        let left = rt.reactor.left.load(Ordering::Relaxed);
        if left != self.left {
            *self = Return {
                left,
                ..Return::default()
            };
        }
        self.pace.add(took);
        self.seen += 1;
        let needed = RETURN_AFTER << left.saturating_sub(1).min(RETURN_DOUBLINGS);
        self.seen >= needed && self.pace.is_short() && cpu < LONG_REQUEST / 4
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
    /// Set by [`Edge::end_grace`]: requests waiting for a worker's answer get 503 now.
    ended: AtomicBool,
    /// Notified when `ended` is set.
    ended_now: tokio::sync::Notify,
    /// When the admin endpoint next takes a reload (see [`ADMIN_SPACING`]).
    admin_next: Mutex<Instant>,
}

/// The admin endpoint takes at most one reload per this long, whatever the domain: a
/// reload compiles a module, and a client that loops on it must not starve the routes.
pub const ADMIN_SPACING: Duration = Duration::from_millis(200);

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
            // Every worker of the route waits on the queue itself: a request wakes one of
            // them.
            let queue = Arc::new(JobQueue::default());
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
            meters.on_reactor(on_reactor);
            let rt = Arc::new(RouteRt {
                meters,
                calls,
                route: route.clone(),
                plugins,
                handler,
                bodyless,
                queue: queue.clone(),
                workers: Mutex::new(Vec::new()),
                reactor: OnReactor {
                    // A `wasi:http` handler runs on a runtime of its own, which may not be
                    // entered from the reactor.
                    on: AtomicBool::new(on_reactor),
                    slots: (0..SEATS)
                        .map(|_| Slot(Mutex::new(Held::default())))
                        .collect(),
                    spare: Mutex::new(Held::default()),
                    made: AtomicUsize::new(0),
                    left: AtomicU32::new(0),
                    making: AtomicBool::new(false),
                },
                admitted: AtomicUsize::new(0),
                running: AtomicUsize::new(0),
            });
            for k in 0..route.workers {
                let (rt2, rx, dep) = (rt.clone(), queue.clone(), deployment.clone());
                let short = short.clone();
                let h = std::thread::Builder::new()
                    .name(format!("edge{}#{k}", route.prefix))
                    .spawn(move || worker(&dep, &rt2, k, &rx, &short))?;
                lock(&rt.workers).push(h);
            }
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
                ended: AtomicBool::new(false),
                ended_now: tokio::sync::Notify::new(),
                admin_next: Mutex::new(Instant::now()),
            }),
        })
    }

    /// The router: the configured routes, `/metrics`, and (when the config turns it on,
    /// with a token) `POST /admin/reload/{domain}`.
    pub fn router(&self) -> Router {
        let mut r = Router::new().route("/metrics", get(metrics));
        if self.inner.deployment.config.admin.is_some() {
            r = r.route("/admin/reload/{domain}", post(reload));
        }
        r.fallback(handle).with_state(self.clone())
    }

    /// The deployment.
    pub fn deployment(&self) -> &Arc<Deployment> {
        &self.inner.deployment
    }

    /// Stops taking requests and waits for the workers to finish the ones queued.
    pub fn shutdown(&self) {
        self.inner.stopped.store(true, Ordering::Relaxed);
        for r in &self.inner.routes {
            r.queue.close();
        }
        for r in &self.inner.routes {
            let hs = std::mem::take(&mut *lock(&r.workers));
            for h in hs {
                let _ = h.join();
            }
        }
    }

    /// Ends a shutdown's grace period: stops every plugin and `wasi:http` handler of the
    /// deployment for good (the calls still running in them are terminated at their next
    /// epoch tick, on whatever thread runs them, and answer 503; nothing is restarted),
    /// answers 503 to the requests queued for a worker and to those waiting for a worker's
    /// answer, and refuses new ones with 503. Returns at once: the calls stop on their own
    /// threads. What it did is logged; `None` when it was done before.
    pub fn end_grace(&self) -> Option<GraceEnded> {
        let inner = &self.inner;
        inner.stopped.store(true, Ordering::SeqCst);
        if inner.ended.swap(true, Ordering::SeqCst) {
            return None;
        }
        inner.ended_now.notify_waiters();
        let mut ended = GraceEnded::default();
        for r in &inner.routes {
            for job in r.queue.close_and_take() {
                let _ = job.reply.send(shutting_down().into());
                ended.queued += 1;
            }
            ended.running += r.running.load(Ordering::SeqCst);
        }
        let dep = &inner.deployment;
        // Marked stopped first, so that none of them restarts another's generation.
        for p in dep.plugins.values() {
            p.stop();
        }
        for h in dep.handlers.values() {
            h.stop();
        }
        tracing::warn!(
            running = ended.running,
            queued = ended.queued,
            "the grace period ended: {} calls still running in plugins or handlers were \
             terminated and {} queued requests answered 503",
            ended.running,
            ended.queued
        );
        Some(ended)
    }

    /// Whether [`Edge::end_grace`] was called.
    pub fn grace_ended(&self) -> bool {
        self.inner.ended.load(Ordering::SeqCst)
    }

    /// Stops taking requests and waits at most `wait` for the route workers to finish the
    /// requests queued and stop; the number of workers still running then, which are left
    /// to the end of the process. (After [`Edge::end_grace`], a worker runs on only where
    /// a handler waits outside its guest code, for a slow client or an outgoing request.)
    pub fn shutdown_within(&self, wait: Duration) -> usize {
        self.inner.stopped.store(true, Ordering::Relaxed);
        for r in &self.inner.routes {
            r.queue.close();
        }
        let until = Instant::now() + wait;
        let mut left = Vec::new();
        for r in &self.inner.routes {
            left.append(&mut lock(&r.workers));
        }
        loop {
            left.retain(|h| !h.is_finished());
            if left.is_empty() || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        left.len()
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
        let request = encode_request_with(method, &inner, headers, body);
        // At debug level, as the chain's span below: `lrpc serve` logs at info by default, and a
        // span its subscriber records costs more than a short chain's calls (about 8% of the
        // chain route's throughput); `RUST_LOG=lrpc_runtime=debug` shows both.
        let span = tracing::debug_span!("request", route = route.route.prefix, method, path);
        let metrics = &self.inner.deployment.metrics;
        // Counted down on every way out, also when the client goes away mid-request.
        let _in_flight = InFlight::new(&route.meters);
        if route.reactor.on.load(Ordering::Relaxed)
            && !self.inner.stopped.load(Ordering::Relaxed)
            && reactor_may_hand_off()
            && let Some((answer, took)) =
                span.in_scope(|| self.serve_on_reactor(route, &request, start))
        {
            route.meters.answered(metrics, answer.status, took);
            return answer.into();
        }
        let (tx, rx) = oneshot::channel();
        let sent = route.queue.send(Job {
            request,
            reply: tx,
            body: stream,
            span,
        });
        let reply = match sent {
            true => {
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
            false => shutting_down().into(),
        };
        // A streamed reply counts when its head is out.
        route
            .meters
            .answered(metrics, reply.status(), start.elapsed());
        reply
    }
}

impl Edge {
    /// Serves `request`, which arrived at `start`, on this reactor thread with a warm seat
    /// of the route's own (this thread's, else a spare one); the answer and the time since
    /// `start`. `None` when no seat is free (one is being made meanwhile, off the reactor:
    /// starting a driver and binding it takes milliseconds).
    fn serve_on_reactor(
        &self,
        route: &Arc<RouteRt>,
        request: &[u8],
        start: Instant,
    ) -> Option<(Answer, Duration)> {
        note_short_request(&self.inner.short);
        let reactor = &route.reactor;
        let slot = &reactor.slots[crate::metrics::sharded::thread_index() % SEATS].0;
        // This thread's slot: its seat's driver memory is in this processor's caches.
        let mut mine = match slot.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            // Another thread on the same slot.
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        let (answer, took) = match mine.as_deref_mut() {
            Some(held) => {
                if held.seat.is_none() {
                    held.seat = lock(&reactor.spare).seat.pop();
                }
                let Some(seat) = held.seat.as_mut() else {
                    // No seat for this thread, and none spare.
                    self.make_seat(route);
                    return None;
                };
                let (answer, took, counted, handed) =
                    self.serve_seated(route, seat, request, start);
                reactor.took(&mut held.pace, counted, &route.route.prefix, &route.meters);
                if handed {
                    // This thread handed its share of the reactor to a new one and leaves
                    // when this request ends: its seat goes to the spare pool, where the new
                    // thread (another slot) finds it instead of making one.
                    lock(&reactor.spare).seat.extend(held.seat.take());
                }
                (answer, took)
            }
            // Another thread on this slot: a spare seat, if there is one, for this request.
            None => {
                let Some(mut seat) = lock(&reactor.spare).seat.pop() else {
                    self.make_seat(route);
                    return None;
                };
                let (answer, took, counted, _) =
                    self.serve_seated(route, &mut seat, request, start);
                let mut spare = lock(&reactor.spare);
                spare.seat.push(seat);
                reactor.took(&mut spare.pace, counted, &route.route.prefix, &route.meters);
                (answer, took)
            }
        };
        Some((answer, took))
    }

    /// Serves `request` on `seat`, handing the reactor's other work over if it runs long;
    /// the answer, the time since `start`, the part of it that counts toward the route's
    /// average (`Seat::route_time`), and whether this thread handed its work over.
    fn serve_seated(
        &self,
        route: &RouteRt,
        seat: &mut Seat,
        request: &[u8],
        start: Instant,
    ) -> (Answer, Duration, Option<Duration>, bool) {
        let dep = &self.inner.deployment;
        let (answer, handed) = hand_off_if_long(start, || {
            seat.serve(dep, route, request, None, Default::default()).0
        });
        if handed {
            route.meters.handed_off();
        }
        let took = start.elapsed();
        (answer, took, seat.route_time(took), handed)
    }

    /// Starts making a warm seat for `route` on a thread of its own, unless one is being
    /// made already.
    fn make_seat(&self, route: &Arc<RouteRt>) {
        if route.reactor.making.swap(true, Ordering::Acquire) {
            return;
        }
        let (dep, rt) = (self.inner.deployment.clone(), route.clone());
        let made = std::thread::Builder::new()
            .name("edge-seat".into())
            .spawn(move || {
                add_seat(&dep, &rt);
                rt.reactor.making.store(false, Ordering::Release);
            });
        if let Err(e) = made {
            tracing::error!("can not start a thread to make a seat: {e}");
            route.reactor.making.store(false, Ordering::Release);
        }
    }
}

/// Makes a seat for `rt`'s requests on the reactor (a driver of its own name, started and
/// bound) and adds it to the free ones; a seat that fails to start is dropped (the request
/// that finds none free goes to the route's workers).
fn add_seat(dep: &Deployment, rt: &RouteRt) {
    let n = rt.reactor.made.fetch_add(1, Ordering::Relaxed);
    let name = format!("edge-driver{}@{n}", rt.route.prefix.replace('/', "-"));
    let mut seat = Seat::new(name, rt);
    if seat.warm(dep, rt) {
        lock(&rt.reactor.spare).seat.push(seat);
    }
}

/// Counts a short request into `short` (see `give_way_while_short_requests_arrive`) once in
/// a few of this thread's requests: a demoted worker only asks whether it moved, and a
/// counter that every request wrote would move between the processors' caches at each.
fn note_short_request(short: &AtomicU64) {
    thread_local! {
        static SINCE: Cell<u32> = const { Cell::new(0) };
    }
    SINCE.with(|n| {
        let k = n.get();
        n.set(k.wrapping_add(1));
        if k % 4 == 0 {
            short.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Whether this thread may run guest code for a request: it is a thread of a multi-thread
/// tokio runtime, which can take its other work over when the guest code turns out long
/// (`tokio::task::block_in_place`; a current-thread runtime can not).
///
/// Asked once per thread: a runtime's threads stay its own, and the runtime's handle is
/// shared by all of them, so taking it at every request would move its reference count
/// between the processors. (A thread that enters another kind of runtime later keeps its
/// first answer; [`hand_off`] asks again before it hands anything over.)
fn reactor_may_hand_off() -> bool {
    thread_local! {
        static MAY: bool = multi_thread_runtime().is_some();
    }
    MAY.with(|m| *m)
}

/// The multi-thread tokio runtime this thread is in, if it is in one.
fn multi_thread_runtime() -> Option<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// How long a reactor thread that hands its other work over waits at most, each time it
/// tries, for the runtime to show that another thread has taken it.
const HAND_OFF_WAIT: Duration = Duration::from_millis(20);

/// Runs `f`, a request's guest code, on this reactor thread. When the guest code is still
/// running at an epoch tick [`LONG_REQUEST`] after the request began (at `start`) and has
/// used at least half of [`LONG_REQUEST`] of processor time from that tick to a later one,
/// or is about to wait for a `Store` another thread holds, the thread first hands the
/// reactor's other work to another thread and then goes on with the request alone; answers
/// whether it did. (A Store's first guest code after a tick reaches its epoch deadline at
/// once, so the ticks a request sees do not measure its length: the clocks do. The
/// processor time tells a long computation from a short request whose thread the system
/// preempted past a tick: handing the reactor over then would only add a thread to a busy
/// machine, and make the request wait for it.)
fn hand_off_if_long<T>(start: Instant, f: impl FnOnce() -> T) -> (T, bool) {
    // The request, where the hooks find it: the hooks capture nothing, so installing them
    // allocates nothing.
    thread_local! {
        static REQUEST: Cell<Option<Running>> = const { Cell::new(None) };
    }
    fn try_hand_off() {
        REQUEST.with(|r| {
            if let Some(run @ Running { handed: false, .. }) = r.get() {
                r.set(Some(Running {
                    handed: hand_off(),
                    ..run
                }));
            }
        });
    }
    let on_tick = |_wanted: bool| {
        let Some(run) = REQUEST.with(Cell::get) else {
            return;
        };
        if run.handed || run.start.elapsed() < LONG_REQUEST {
            return;
        }
        let cpu = thread_cpu_time();
        match run.cpu_at_long {
            // The first tick past the mark: where this thread's processor time stood.
            None => REQUEST.with(|r| {
                r.set(Some(Running {
                    cpu_at_long: Some(cpu),
                    ..run
                }))
            }),
            Some(then) if cpu.saturating_sub(then) >= LONG_REQUEST / 2 => try_hand_off(),
            Some(_) => {}
        }
    };
    let outer = REQUEST.with(|r| {
        r.replace(Some(Running {
            start,
            cpu_at_long: None,
            handed: false,
        }))
    });
    let tick = lrpc_kernel::pace::set_tick_hook(Some(Box::new(on_tick)));
    let wait = lrpc_kernel::pace::set_wait_hook(Some(Box::new(try_hand_off)));
    let r = f();
    lrpc_kernel::pace::set_tick_hook(tick);
    lrpc_kernel::pace::set_wait_hook(wait);
    let handed = REQUEST
        .with(|r| r.replace(outer))
        .is_some_and(|run| run.handed);
    (r, handed)
}

/// A request running on a reactor thread, as [`hand_off_if_long`]'s hooks see it.
#[derive(Clone, Copy)]
struct Running {
    /// When it began.
    start: Instant,
    /// The thread's processor time at the first tick [`LONG_REQUEST`] after `start`.
    cpu_at_long: Option<Duration>,
    /// Whether the thread handed the reactor's other work over.
    handed: bool,
}

/// Hands this reactor thread's other work to another thread; whether the runtime showed
/// that it went on without this thread in time (else the next tick tries again).
///
/// `block_in_place` gives the thread's share of the runtime to a thread it starts, and
/// takes it back when its closure returns if that thread has not taken it yet. So the
/// closure waits, at most [`HAND_OFF_WAIT`], until a task spawned meanwhile runs: this
/// thread runs no tasks inside `block_in_place`, so another thread did.
fn hand_off() -> bool {
    let Some(rt) = multi_thread_runtime() else {
        return false;
    };
    tokio::task::block_in_place(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(());
        });
        rx.recv_timeout(HAND_OFF_WAIT).is_ok()
    })
}

/// What [`Edge::end_grace`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraceEnded {
    /// Requests a seat was serving (their calls into plugins or handlers are terminated).
    pub running: usize,
    /// Requests queued for a worker, not started, answered 503.
    pub queued: usize,
}

/// The answer to a request the server stops or refuses while it shuts down.
fn shutting_down() -> Answer {
    Answer::text(503, "shutting down\n".into())
}

/// One request in flight on a route, for the in-flight gauge.
struct InFlight<'a>(&'a crate::metrics::RouteMeters);

impl<'a> InFlight<'a> {
    fn new(meters: &'a crate::metrics::RouteMeters) -> Self {
        meters.in_flight(1);
        InFlight(meters)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight(-1);
    }
}

/// The answer to a path no route serves.
fn no_route(path: &str) -> Answer {
    Answer::text(404, format!("no route for {path}\n"))
}

fn matches(prefix: &str, path: &str) -> bool {
    prefix == "/"
        || path
            .strip_prefix(prefix.trim_end_matches('/'))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
}

/// `path` below the route's prefix, always starting with `/`.
fn strip<'a>(prefix: &str, path: &'a str) -> std::borrow::Cow<'a, str> {
    let rest = path
        .strip_prefix(prefix.trim_end_matches('/'))
        .unwrap_or(path);
    if rest.starts_with('/') {
        rest.into()
    } else {
        format!("/{rest}").into()
    }
}

/// Gives the request one authority that every plugin and the handler see alike: its `host`
/// line. The target's own authority (HTTP/2's `:authority`, or an HTTP/1.1 absolute-form
/// target) takes the place of any `host` line, as RFC 9112 §3.2.2 asks; otherwise plugins
/// would check one authority while the handler used another. Two `host` lines are a bad
/// request (RFC 9112 §3.2). The error says why the request is refused.
fn one_authority(parts: &mut axum::http::request::Parts) -> Result<(), &'static str> {
    use axum::http::header::HOST;
    if let Some(authority) = parts.uri.authority() {
        match HeaderValue::from_str(authority.as_str()) {
            Ok(v) => {
                parts.headers.insert(HOST, v);
            }
            Err(_) => return Err("a malformed authority\n"),
        }
    } else if parts.headers.get_all(HOST).iter().nth(1).is_some() {
        return Err("more than one host header\n");
    }
    Ok(())
}

/// The answer to a request body over the route's cap.
fn too_large() -> Response {
    (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response()
}

/// Reads a request body of at most `max` bytes, as fast as `clock` asks (each piece within
/// `body-timeout` of the one before, and at least the minimum rate after its grace); the
/// answer to give instead when it can not.
async fn read_body(body: Body, max: usize, clock: BodyClock) -> Result<Vec<u8>, Response> {
    use axum::body::HttpBody as _;
    let mut body = body;
    let mut clock = clock;
    let hint = axum::body::HttpBody::size_hint(&body);
    if hint.lower() > max as u64 {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(hint.upper().map_or(0, |n| n.min(max as u64) as usize));
    loop {
        let next = std::future::poll_fn(|cx| match std::pin::Pin::new(&mut body).poll_frame(cx) {
            std::task::Poll::Ready(f) => std::task::Poll::Ready(Ok(f)),
            std::task::Poll::Pending => clock.poll_late(cx).map(Err),
        })
        .await;
        match next {
            Err(late) => return Err(late_body(late)),
            Ok(None) => return Ok(out),
            // Malformed framing (a bad chunk size, a missing CRLF) or a connection that broke.
            Ok(Some(Err(_))) => {
                return Err((StatusCode::BAD_REQUEST, "malformed request body\n").into_response());
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    clock.arrived(data.len());
                    if out.len() + data.len() > max {
                        return Err(too_large());
                    }
                    out.extend_from_slice(&data);
                }
            }
        }
    }
}

/// The answer to a body that came too late: 408 (the caller closes the connection: the rest
/// of the body is not waited for).
fn late_body(late: Late) -> Response {
    (StatusCode::REQUEST_TIMEOUT, late.reason()).into_response()
}

/// `resp` with `connection: close` on HTTP/1 (HTTP/2 has no such header: there the stream
/// ends, as its body was dropped).
fn closing(mut resp: Response, version: axum::http::Version) -> Response {
    if version <= axum::http::Version::HTTP_11 {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
    } else {
        resp.headers_mut().remove(axum::http::header::CONNECTION);
    }
    resp
}

async fn handle(State(edge): State<Edge>, req: Request) -> Response {
    let start = Instant::now();
    let (mut parts, body) = req.into_parts();
    if let Err(why) = one_authority(&mut parts) {
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    let config = &edge.inner.deployment.config;
    let metrics = &edge.inner.deployment.metrics;
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    // The route's own caps, before its body is read: a route's large bodies or many
    // requests can not take what the plugins it shares with other routes need. Their
    // refusals are counted as the chain's answers are.
    let route = edge.route_for(path);
    let refused = |r: Response| {
        if let Some(route) = route {
            route
                .meters
                .answered(metrics, r.status().as_u16(), start.elapsed());
        }
        r
    };
    let _admitted = match route.map(|r| r.admit()) {
        Some(None) => {
            return refused(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the route is at its limit of requests\n",
                )
                    .into_response(),
            );
        }
        Some(Some(a)) => Some(a),
        None => None,
    };
    let max_body = route.map_or(config.max_body, |r| r.route.max_body);
    let clock = || {
        BodyClock::new(
            config.connections.body_timeout,
            config.connections.min_body_rate,
        )
    };
    // Plugins that take the body get it whole. Otherwise a handler reads it as it arrives
    // (after the plugins, which get none); with no handler, nothing reads it.
    let (body, stream) = match route {
        Some(r) if !r.reads_body() => {
            if axum::body::HttpBody::size_hint(&body).lower() > max_body as u64 {
                return refused(too_large());
            }
            let stream = r.handler.is_some().then(|| {
                let stream = RequestBody::new(body, max_body, clock());
                // A handler no plugin comes before gets the header lines as they came,
                // values as bytes; after plugins, it gets the client's framing with the
                // body the client sends.
                if r.plugins.is_empty() {
                    stream.with_headers(std::mem::take(&mut parts.headers))
                } else {
                    stream.with_framing_of(&parts.headers)
                }
            });
            (Vec::new(), stream)
        }
        _ => match read_body(body, max_body, clock()).await {
            Ok(b) => (b, None),
            Err(answer) if answer.status() == StatusCode::REQUEST_TIMEOUT => {
                return refused(closing(answer, parts.version));
            }
            Err(answer) => return refused(answer),
        },
    };
    // A streamed body that came too late: the connection closes after the answer.
    let late = stream.as_ref().map(RequestBody::state);
    // Header values go to the plugins as bytes. A plugin of `lrpc:http/plugin` takes them as
    // WIT strings, so a value that is not UTF-8 can not reach it; and nothing may pass
    // around a plugin (one that strips or checks a header would be bypassed by the same
    // header with a byte above 0x7F), so a route with such a plugin refuses the request
    // before any plugin runs. (A handler alone took them all above, as bytes.)
    let strict = route.is_some_and(|r| r.plugins.iter().any(|p| p.speaks_strings()));
    let mut headers: Vec<(&str, &[u8])> = Vec::with_capacity(parts.headers.len());
    for (n, v) in &parts.headers {
        if strict && std::str::from_utf8(v.as_bytes()).is_err() {
            return refused(
                (
                    StatusCode::BAD_REQUEST,
                    format!(
                        "the value of header `{n}` is not UTF-8, which the plugins can not read\n"
                    ),
                )
                    .into_response(),
            );
        }
        headers.push((n.as_str(), v.as_bytes()));
    }

    let reply = match route {
        Some(route) => {
            edge.dispatch_on(route, parts.method.as_str(), path, &headers, &body, stream)
                .await
        }
        None => {
            metrics.unrouted(404);
            no_route(path).into()
        }
    };
    let resp = response(reply, parts.method == axum::http::Method::HEAD);
    if late.is_some_and(|l| l.late()) {
        return closing(resp, parts.version);
    }
    resp
}

/// The response that carries `reply`. To a `HEAD` request (RFC 9110) it has no body: the
/// headers the handler set pass, and no length is made up from a body that is not sent.
fn response(reply: Reply, head: bool) -> Response {
    let mut resp = match reply {
        Reply::Streamed(r) => r,
        Reply::Whole(a) => {
            let mut resp = Response::new(Body::from(a.body));
            *resp.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::BAD_GATEWAY);
            for (n, v) in a.headers {
                if let (Ok(n), Ok(v)) = (HeaderName::try_from(n), HeaderValue::try_from(v)) {
                    resp.headers_mut().append(n, v);
                }
            }
            resp
        }
    };
    if head {
        let body = std::mem::replace(resp.body_mut(), Body::new(Headless));
        // A handler writes its body as for `GET`: it is read and dropped, so that its writes
        // do not fail (a streamed body ends by the handler's deadline).
        tokio::spawn(async move {
            use http_body_util::BodyExt as _;
            let mut body = body;
            while let Some(Ok(_)) = body.frame().await {}
        });
    }
    resp
}

/// The body of a response to `HEAD`: none, and of no stated length.
struct Headless;

impl axum::body::HttpBody for Headless {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(None)
    }
}

/// `reply` as a whole answer: a streamed body is collected, up to `max` bytes.
async fn whole(reply: Reply, max: usize) -> Answer {
    use http_body_util::BodyExt as _;
    let r = match reply {
        Reply::Whole(a) => return a,
        Reply::Streamed(r) => r,
    };
    let (parts, body) = r.into_parts();
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(b) => Answer {
            status: parts.status.as_u16(),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: b.to_bytes().to_vec(),
        },
        Err(e) => Answer::text(502, format!("the handler's response body failed: {e}\n")),
    }
}

async fn metrics(State(edge): State<Edge>) -> Response {
    let dep = edge.inner.deployment.clone();
    let text = tokio::task::spawn_blocking(move || {
        // Core domains (plugins, drivers, other domains, generations not yet released) are
        // counted by the kernel; components and handlers here.
        let core = dep.kernel.memory_bytes();
        let mut total = core;
        for p in dep.plugins.values() {
            let current = p.current();
            let m = current.memory();
            dep.metrics.memory(&p.name, m);
            if current.core().is_none() {
                total = total.saturating_add(m);
            }
        }
        for (n, d) in &dep.domains {
            dep.metrics.memory(n, d.memory_bytes());
        }
        for (n, c) in &dep.components {
            let m = c.memory_size();
            dep.metrics.memory(n, m);
            total = total.saturating_add(m);
        }
        for (n, h) in &dep.handlers {
            let m = h.memory();
            dep.metrics.memory(n, m);
            total = total.saturating_add(m);
        }
        dep.metrics.totals(core, dep.kernel.segment_bytes(), total);
        dep.metrics.compilations(dep.kernel.compilations());
        dep.metrics.encode()
    })
    .await
    .unwrap_or_default();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn reload(
    State(edge): State<Edge>,
    Path(domain): Path<String>,
    transport: Option<axum::Extension<crate::tls::Transport>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let dep = &edge.inner.deployment;
    // `lrpc serve` says how its clients reach it; an embedder's router says nothing.
    if transport.is_some_and(|t| t.exposes_secrets()) {
        tracing::warn!("admin request refused: a token in clear on an address other hosts reach");
        return (
            StatusCode::FORBIDDEN,
            "the admin endpoint takes no token in plain HTTP on an address other machines can \
             reach: serve TLS (`[serve] tls-cert`, `tls-key`) or listen on loopback\n",
        )
            .into_response();
    }
    let authorization = headers
        .get(axum::http::header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if !dep
        .config
        .admin
        .as_ref()
        .is_some_and(|t| t.accepts(authorization))
    {
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "the admin endpoint needs `authorization: Bearer TOKEN`\n",
        )
            .into_response();
    }
    {
        let mut next = lock(&edge.inner.admin_next);
        let now = Instant::now();
        if now < *next {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(axum::http::header::RETRY_AFTER, "1")],
                "one reload at a time: try again shortly\n",
            )
                .into_response();
        }
        *next = now + ADMIN_SPACING;
    }
    let reload: Box<dyn FnOnce() -> Result<u64, crate::deploy::DeployError> + Send> =
        if let Some(p) = dep.plugins.get(&domain).cloned() {
            Box::new(move || p.reload())
        } else if let Some(h) = dep.handlers.get(&domain).cloned() {
            Box::new(move || h.reload())
        } else {
            return (StatusCode::NOT_FOUND, format!("no plugin `{domain}`\n")).into_response();
        };
    match tokio::task::spawn_blocking(reload).await {
        Ok(Ok(g)) => (
            StatusCode::OK,
            format!("reloaded {domain}: generation {g}\n"),
        )
            .into_response(),
        Ok(Err(e)) => (StatusCode::UNPROCESSABLE_ENTITY, format!("{e}\n")).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "reload failed\n").into_response(),
    }
}

/// A route's requests waiting for its workers. A worker that finds none parks at once. With
/// a channel that spins and yields before it parks (crossbeam's), the reused `wasi:http`
/// handler of the load benchmark served about 15% fewer requests on a 2-core machine, where
/// idle workers, the reactor and the load share the cores. Closed, the queue gives out what
/// it holds, then nothing.
#[derive(Default)]
struct JobQueue {
    /// The requests, and whether the queue is closed.
    state: Mutex<(std::collections::VecDeque<Job>, bool)>,
    ready: std::sync::Condvar,
}

impl JobQueue {
    /// Queues `job` for a worker; false when the queue is closed.
    fn send(&self, job: Job) -> bool {
        let mut s = lock(&self.state);
        if s.1 {
            return false;
        }
        s.0.push_back(job);
        drop(s);
        self.ready.notify_one();
        true
    }

    /// The next request, waiting for one; `None` once the queue is closed and empty.
    fn recv(&self) -> Option<Job> {
        let mut s = lock(&self.state);
        loop {
            if let Some(job) = s.0.pop_front() {
                return Some(job);
            }
            if s.1 {
                return None;
            }
            s = self
                .ready
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Takes no more requests; the workers finish those queued, then stop.
    fn close(&self) {
        lock(&self.state).1 = true;
        self.ready.notify_all();
    }

    /// Takes no more requests, and takes back those queued (the workers then stop).
    fn close_and_take(&self) -> std::collections::VecDeque<Job> {
        let taken = {
            let mut s = lock(&self.state);
            s.1 = true;
            std::mem::take(&mut s.0)
        };
        self.ready.notify_all();
        taken
    }
}

/// A worker: owns a seat on the route; runs queued requests. `short` counts the requests
/// that short requests' threads have started, on every route.
fn worker(dep: &Deployment, rt: &RouteRt, k: usize, rx: &JobQueue, short: &Arc<AtomicU64>) {
    let mut seat = Seat::new(
        format!("edge-driver{}#{k}", rt.route.prefix.replace('/', "-")),
        rt,
    );
    let mut demoted = false;
    let mut meter = CpuMeter::new();
    // A route that may run on the reactor and left it: what this worker sees of its requests.
    let mut back = Return::default();
    loop {
        let Some(job) = rx.recv() else { return };
        // The client went away while the request waited: it is not run.
        if job.reply.is_closed() {
            continue;
        }
        if !demoted {
            note_short_request(short);
        }
        // A request that starts this worker's driver pays for it: it is not measured.
        let measured = !seat.cold(rt);
        let began = Instant::now();
        let (answer, unsent) = job
            .span
            .in_scope(|| seat.serve(dep, rt, &job.request, Some(job.reply), job.body));
        let counted = seat.route_time(began.elapsed());
        // Unless a handler's streamed head went out already.
        if let Some(tx) = unsent {
            let _ = tx.send(answer.into());
        }
        seat.handler.tidy();
        if demoted {
            continue;
        }
        if !measured {
            meter.restart();
            continue;
        }
        let cpu = meter.done();
        if cpu >= LONG_REQUEST {
            demoted = true;
            tracing::info!(
                route = rt.route.prefix,
                worker = k,
                "requests take over {LONG_REQUEST:?} of processor time: this worker's guest \
                 code now gives way while short requests arrive"
            );
            give_way_while_short_requests_arrive(short.clone());
        } else if let Some(took) = counted
            && rt.handler.is_none()
            && !rt.reactor.on.load(Ordering::Relaxed)
            && back.add(rt, took, cpu)
        {
            rt.reactor.come_back(&rt.route.prefix, &rt.meters);
        }
    }
}

/// A worker's processor time per request: a moving average over about the last 16
/// requests, so that one cold request (faulting in a fresh replica's pages) does not count.
/// The thread's clock is read once per batch of requests, not per request (reading it is a
/// system call): a batch ends after [`CpuMeter::BATCH`] requests, or at the first request
/// that ends [`LONG_REQUEST`] of wall-clock time after the batch began (processor time
/// never exceeds wall-clock time, so a long request never hides in a long batch).
struct CpuMeter {
    /// The thread's processor time when the batch began.
    cpu: std::time::Duration,
    /// When the batch began.
    began: Instant,
    /// Requests done in this batch.
    done: u32,
    /// The moving average, in seconds.
    average: f64,
}

impl CpuMeter {
    const BATCH: u32 = 8;

    fn new() -> CpuMeter {
        CpuMeter {
            cpu: thread_cpu_time(),
            began: Instant::now(),
            done: 0,
            average: 0.0,
        }
    }

    /// Begins a new batch now (what ran since the last one began is not counted).
    fn restart(&mut self) {
        *self = CpuMeter {
            average: self.average,
            ..CpuMeter::new()
        };
    }

    /// Counts a request done; the average so far.
    fn done(&mut self) -> std::time::Duration {
        self.done += 1;
        if self.done >= Self::BATCH || self.began.elapsed() >= LONG_REQUEST {
            let now = thread_cpu_time();
            let per = now.saturating_sub(self.cpu).as_secs_f64() / f64::from(self.done);
            // As if each of the batch's requests, at its mean, entered the average in turn
            // with weight 1/16.
            let keep = (15.0f64 / 16.0).powi(self.done as i32);
            self.average = self.average * keep + per * (1.0 - keep);
            self.cpu = now;
            self.began = Instant::now();
            self.done = 0;
        }
        std::time::Duration::from_secs_f64(self.average)
    }
}

/// Processor time per request (a [`CpuMeter`] average) past which a worker gives way to
/// short requests (see [`give_way_while_short_requests_arrive`]). The plugin chains of a web edge take
/// tens of microseconds.
const LONG_REQUEST: std::time::Duration = std::time::Duration::from_millis(1);

/// The processor time this thread has used.
fn thread_cpu_time() -> std::time::Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// How long a demoted worker's guest computation pauses at a time while short requests
/// keep arriving, and at most in a row (then it runs for one epoch tick before it pauses
/// again): a long computation gets at least about a fiftieth of a processor however busy
/// the other routes are.
const PAUSE_STEP: std::time::Duration = std::time::Duration::from_millis(1);
const MAX_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// A worker whose requests take [`LONG_REQUEST`] of processor time on average serves a route
/// of long computations. It keeps its thread's scheduling class and priority: the server
/// orders its own work, and hands none of its processor time to other processes on the
/// host. (Moving such a thread to `SCHED_IDLE` or nice 19 did favour short requests, but it
/// also let any busy process on the host take a long request's processor, and an
/// unprivileged thread could never come back.) Instead its thread pauses its guest
/// computation at each epoch tick (`lrpc_kernel::pace`) for as long as short requests have started since its last
/// look, [`PAUSE_STEP`] at a time and [`MAX_PAUSE`] at most, and not while another thread
/// waits for the Store it is in (a short request to the same plugin domain). The pause counts
/// toward the call's deadline: routes of long computations need deadlines that allow for it.
fn give_way_while_short_requests_arrive(short: Arc<AtomicU64>) {
    let mut seen = short.load(Ordering::Relaxed);
    let hook = move |wanted: bool| {
        // Another thread waits for the Store this computation holds: pausing would hold
        // that request up too.
        if wanted {
            return;
        }
        let mut paused = std::time::Duration::ZERO;
        loop {
            let now = short.load(Ordering::Relaxed);
            let active = now != seen;
            seen = now;
            if !active || paused >= MAX_PAUSE {
                return;
            }
            std::thread::sleep(PAUSE_STEP);
            paused += PAUSE_STEP;
        }
    };
    lrpc_kernel::pace::set_tick_hook(Some(Box::new(hook)));
}

/// What a thread that serves a route's requests keeps between them: its driver domain (by
/// its name), the plugin generations the driver is bound to, and its instance of the
/// route's `wasi:http` handler.
struct Seat {
    name: String,
    driver: Option<Driver>,
    bound: Vec<Option<Arc<PluginInstance>>>,
    handler: HandlerSlot,
    /// Time the last request spent on the seat's own setup (a driver started, plugins bound
    /// after a restart or reload), which is not the route's.
    setup: Duration,
    /// The last request ended in a plugin's trap: its time is mostly the kernel's
    /// terminating the plugin, not the route's.
    trapped: bool,
    /// When [`Worker::set_up`] began work this request, if it did.
    setup_began: Option<Instant>,
    /// The route's gauge of its drivers' memory, and what this seat's driver added to it.
    drivers: prometheus_client::metrics::gauge::Gauge,
    counted: i64,
}

impl Seat {
    /// Of the last request's time `took`, what counts toward the route's average: without
    /// the seat's setup, and nothing after a plugin's trap. Resets both for the next.
    fn route_time(&mut self, took: Duration) -> Option<Duration> {
        let setup = std::mem::take(&mut self.setup);
        (!std::mem::take(&mut self.trapped)).then(|| took.saturating_sub(setup))
    }

    fn new(name: String, rt: &RouteRt) -> Seat {
        Seat {
            name,
            driver: None,
            bound: vec![None; rt.plugins.len()],
            handler: HandlerSlot::new(rt.route.reuse),
            setup: Duration::ZERO,
            trapped: false,
            setup_began: None,
            drivers: rt.meters.drivers.clone(),
            counted: 0,
        }
    }

    /// After a request: lets go of plugin generations that were replaced (so that they can
    /// be released), has a plugin generation whose memory grew past `[serve] recycle-above`
    /// replaced, and drops the driver when its own memory did (its bindings, and their
    /// segments, go with it; a fresh driver starts at the next request). Reads atomics only,
    /// unless something is to be replaced.
    fn tidy(&mut self, dep: &Deployment, rt: &RouteRt) {
        for (b, plugin) in self.bound.iter_mut().zip(&rt.plugins) {
            if let Some(inst) = b {
                if inst.generation != plugin.generation() {
                    *b = None;
                } else if plugin.recycle_if_grown(inst) {
                    // Its replacement comes in a moment; the seat binds to it then.
                    tracing::debug!(plugin = plugin.name, "recycling a grown plugin");
                }
            }
        }
        let memory = self
            .driver
            .as_ref()
            .map_or(0, |d| d.domain().memory_bytes());
        if let Some(mark) = dep.config.recycle_above
            && memory > mark
            && let Some(d) = self.driver.take()
        {
            tracing::debug!(driver = self.name, memory, "replacing a grown edge driver");
            dep.kernel.terminate(d.domain());
            self.bound.iter_mut().for_each(|b| *b = None);
            dep.metrics.recycled("edge-driver", "memory");
            self.count_driver(0);
        } else {
            self.count_driver(memory);
        }
    }

    /// Sets this seat's share of the route's driver memory gauge to `bytes`.
    fn count_driver(&mut self, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        if bytes != self.counted {
            self.drivers.inc_by(bytes - self.counted);
            self.counted = bytes;
        }
    }

    /// Whether a request served now would start this seat's driver or handler (and so take
    /// longer than the route's requests do).
    fn cold(&self, rt: &RouteRt) -> bool {
        (self.driver.is_none() && !rt.plugins.is_empty())
            || (self.handler.cold() && rt.handler.is_some())
    }

    /// Starts the driver and binds it to the route's plugins, ahead of any request; whether
    /// that worked.
    fn warm(&mut self, dep: &Deployment, rt: &RouteRt) -> bool {
        let mut w = Worker {
            dep,
            rt,
            seat: self,
            reply: None,
            body: None,
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.ready().is_ok()))
            .unwrap_or(false)
            && !self.cold(rt)
    }

    /// Serves one request; a panic below (a kernel bug) costs this request and the driver,
    /// not the thread. A `wasi:http` handler sends its streamed head through `reply`; the
    /// answer, and `reply` unless it was used.
    fn serve(
        &mut self,
        dep: &Deployment,
        rt: &RouteRt,
        request: &[u8],
        reply: Option<oneshot::Sender<Reply>>,
        body: Option<RequestBody>,
    ) -> (Answer, Option<oneshot::Sender<Reply>>) {
        let _running = Serving::new(&rt.running);
        let mut w = Worker {
            dep,
            rt,
            seat: self,
            reply,
            body,
        };
        let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.serve(request)))
            .unwrap_or_else(|_| {
                tracing::error!("a request panicked; the driver is replaced");
                w.drop_driver();
                Answer::text(500, "internal error\n".into())
            });
        let reply = w.reply;
        self.tidy(dep, rt);
        (answer, reply)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.count_driver(0);
    }
}

/// A request a seat is serving, counted in its route's `running` while it lives.
struct Serving<'a>(&'a AtomicUsize);

impl<'a> Serving<'a> {
    fn new(running: &'a AtomicUsize) -> Serving<'a> {
        running.fetch_add(1, Ordering::SeqCst);
        Serving(running)
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The longest a request's walk through `plugins` may take, for the deadline of the driver
/// that walks it. The driver's deadline runs on while a plugin runs, so it must outlast every
/// plugin's: each call may wait for a busy replica as long as its deadline, then run as long,
/// and the driver's own work gets a second. (The kernel's default deadline would otherwise
/// end the driver, and with it the request as a 500, before a plugin allowed more ran out.)
/// Capped at a day, where a sum of deadlines set for other reasons stops meaning anything.
fn chain_deadline(plugins: &[Arc<Plugin>]) -> Duration {
    const CAP: Duration = Duration::from_secs(24 * 60 * 60);
    plugins
        .iter()
        .fold(Duration::from_secs(1), |sum, p| {
            sum.saturating_add(p.deadline().saturating_mul(2))
        })
        .min(CAP)
}

/// A seat at work on a route of a deployment.
struct Worker<'a> {
    dep: &'a Deployment,
    rt: &'a RouteRt,
    seat: &'a mut Seat,
    /// Where a `wasi:http` handler sends its head as soon as it sets it.
    reply: Option<oneshot::Sender<Reply>>,
    /// The request body, when it streams to the handler.
    body: Option<RequestBody>,
}

/// Why a seat is not ready for a request: the answer to give, or a plugin to wait for.
enum Stop {
    Answer(Answer),
    Restarting(Restarting),
}

/// A plugin of the chain was terminated before it ran the request (by another request's
/// fault, a reload, or the kernel): generation `generation` of the plugin in `slot`.
struct Restarting {
    slot: usize,
    generation: u64,
}

impl Worker<'_> {
    fn serve(&mut self, request: &[u8]) -> Answer {
        if self.rt.plugins.is_empty() {
            // A `wasi:http` handler alone.
            return self.handle(request, "the client");
        }
        // A plugin that was terminated under the request is waited for, once, as long as
        // one call into it may take: the request then goes through the chain again on the
        // fresh instance (the plugins before it run again; the terminated one never ran).
        let mut waited = false;
        loop {
            let r = match self.serve_chain(request) {
                Ok(answer) => return answer,
                Err(r) => r,
            };
            let plugin = &self.rt.plugins[r.slot];
            // A request whose client went away is not run again.
            let gone = self.reply.as_ref().is_some_and(oneshot::Sender::is_closed);
            if !waited && !gone && !plugin.stopped() {
                waited = true;
                let until = Instant::now() + plugin.deadline();
                lrpc_kernel::pace::about_to_wait();
                if plugin.wait_past(r.generation, until) {
                    continue;
                }
            }
            self.dep.metrics.failure(&plugin.name, "terminated");
            if plugin.stopped() {
                // Terminated at the end of a shutdown's grace: it is not restarted.
                return shutting_down();
            }
            return Answer::text(503, format!("plugin {} is restarting\n", plugin.name));
        }
    }

    /// Runs the request through the chain once: the answer, or the plugin that was
    /// terminated before it could run it.
    fn serve_chain(&mut self, request: &[u8]) -> Result<Answer, Restarting> {
        match self.ready() {
            Ok(()) => {}
            Err(Stop::Answer(a)) => return Ok(a),
            Err(Stop::Restarting(r)) => return Err(r),
        }
        let Some(driver) = &self.seat.driver else {
            return Ok(Answer::text(500, "no driver\n".into()));
        };
        let end = {
            let _s = tracing::debug_span!("chain", plugins = self.rt.plugins.len()).entered();
            driver.chain(self.rt.plugins.len(), request, self.rt.bodyless)
        };
        let metrics = &self.dep.metrics;
        // The plugins the request reached, in chain order: up to the one that answered or
        // failed (the driver's slot, bounded by the chain), or all of them.
        let reached = match &end {
            Ok(
                ChainEnd::Responded { slot, .. }
                | ChainEnd::Failed { slot, .. }
                | ChainEnd::RewroteBody { slot },
            ) => slot.saturating_add(1),
            Ok(ChainEnd::Unanswered { .. }) => self.rt.calls.len(),
            Err(_) => 0,
        };
        for c in self.rt.calls.iter().take(reached) {
            c.inc();
        }
        Ok(match end {
            Ok(ChainEnd::Responded { slot, response }) => decode_response(&response)
                .unwrap_or_else(|| {
                    let name = self.plugin_name(slot);
                    metrics.failure(&name, "malformed");
                    Answer::text(
                        502,
                        format!("plugin {name} answered with a malformed response\n"),
                    )
                }),
            Ok(ChainEnd::Failed { slot, status }) => {
                let name = self.plugin_name(slot);
                // A dead component keeps answering with the fault that killed it until its
                // restart: once that fault is reported, it is restarting. (A dead core
                // domain answers `ServerTerminated` instead, so a core plugin's trap or
                // deadline is always this call's own, whatever restart is pending.)
                let bound = self.seat.bound.get(slot).and_then(Option::as_ref);
                let restarting = status.is_call_failed()
                    && bound.is_some_and(|b| b.core().is_none())
                    && self.rt.plugins.get(slot).is_some_and(|p| p.restarting());
                // Terminated before it ran this request (by another request's fault, a
                // reload, or the kernel): the caller waits for the fresh instance.
                if restarting || matches!(status, Status::ServerTerminated | Status::StaleBinding) {
                    tracing::debug!(plugin = name, %status, "plugin terminated under a request");
                    let taken = self.seat.bound.get_mut(slot).and_then(Option::take);
                    let plugin = &self.rt.plugins[slot];
                    let generation = taken.map_or_else(|| plugin.generation(), |i| i.generation);
                    plugin.died(generation);
                    return Err(Restarting { slot, generation });
                }
                let (code, kind, what) = match status {
                    Status::ServerTrapped => (502, "trap", "trapped"),
                    Status::DeadlineExceeded => (504, "deadline", "ran past its deadline"),
                    Status::BadReply => (502, "malformed", "answered with a malformed action"),
                    _ => (502, "other", "failed"),
                };
                metrics.failure(&name, kind);
                report_failure(&name, || format!("plugin call failed: {status}"));
                self.seat.trapped |= status == Status::ServerTrapped;
                if (status.is_call_failed() || status == Status::StaleBinding)
                    && let (Some(p), Some(b)) =
                        (self.rt.plugins.get(slot), self.seat.bound.get_mut(slot))
                    && let Some(inst) = b.take()
                {
                    p.died(inst.generation);
                }
                Answer::text(code, format!("plugin {name} {what}\n"))
            }
            Ok(ChainEnd::RewroteBody { slot }) => {
                let name = self.plugin_name(slot);
                metrics.failure(&name, "malformed");
                tracing::warn!(plugin = name, "rewrote the body, but takes none");
                Answer::text(
                    502,
                    format!("plugin {name} rewrote the body, but takes none (`body = \"none\"`)\n"),
                )
            }
            Ok(ChainEnd::Unanswered { request }) => {
                if self.rt.handler.is_some() {
                    let last = self.plugin_name(self.rt.plugins.len().saturating_sub(1));
                    self.handle(&request, &format!("plugin {last}"))
                } else {
                    Answer::text(502, "no plugin of the chain answered\n".into())
                }
            }
            Err(e) => {
                tracing::error!("the driver failed: {e}");
                self.drop_driver();
                Answer::text(500, "the edge driver failed\n".into())
            }
        })
    }

    /// The seat's driver started and bound to the current generation of each plugin of
    /// the chain (the answer to give instead when that fails, or the plugin to wait for).
    fn ready(&mut self) -> Result<(), Stop> {
        let r = self.set_up();
        if let Some(began) = self.seat.setup_began.take() {
            self.seat.setup += began.elapsed();
        }
        r
    }

    /// [`Worker::ready`]'s work; notes in `setup_began` when it began starting a driver or
    /// binding a plugin (the clock is read only then).
    fn set_up(&mut self) -> Result<(), Stop> {
        if self.seat.driver.is_none() {
            self.seat.setup_began.get_or_insert_with(Instant::now);
            match Driver::new(&self.dep.kernel, &self.seat.name) {
                Ok(mut d) => {
                    d.set_deadline(chain_deadline(&self.rt.plugins));
                    self.seat.driver = Some(d);
                }
                Err(e) => {
                    tracing::error!("starting a driver: {e}");
                    return Err(Stop::Answer(Answer::text(
                        500,
                        "the edge driver could not start\n".into(),
                    )));
                }
            }
            self.seat.bound.iter_mut().for_each(|b| *b = None);
        }
        let Some(driver) = &self.seat.driver else {
            return Err(Stop::Answer(Answer::text(500, "no driver\n".into())));
        };
        // The interfaces' plans (fingerprint and procedures; one per plugin version, strings
        // and bytes), made only when a plugin needs binding: planning an interface costs
        // more than a whole chain of calls.
        let mut plans: [Option<(u64, usize)>; 2] = [None, None];
        for (slot, plugin) in self.rt.plugins.iter().enumerate() {
            // The generation count first: it is read by every request and written only by
            // a reload or restart, where taking the current instance writes a lock and a
            // reference count.
            let bound = |b: &Option<Arc<PluginInstance>>, g: u64| {
                b.as_ref().is_some_and(|b| b.generation == g)
            };
            if bound(&self.seat.bound[slot], plugin.generation()) {
                continue;
            }
            let cur = plugin.current();
            if bound(&self.seat.bound[slot], cur.generation) {
                continue;
            }
            self.seat.setup_began.get_or_insert_with(Instant::now);
            let plan = &mut plans[usize::from(!plugin.speaks_strings())];
            let (fingerprint, procs) = match plan {
                Some(p) => *p,
                None => match self.dep.kernel.interface(plugin.interface()) {
                    Ok(p) => *plan.insert((p.fingerprint, p.procs.len())),
                    Err(e) => return Err(Stop::Answer(Answer::text(500, format!("{e}\n")))),
                },
            };
            match driver.bind(slot, &cur.export, fingerprint, procs) {
                Ok(()) => self.seat.bound[slot] = Some(cur),
                Err(BindError::Status(s)) => {
                    tracing::debug!(plugin = plugin.name, "binding failed: {s}");
                    self.seat.bound[slot] = None;
                    plugin.died(cur.generation);
                    return Err(Stop::Restarting(Restarting {
                        slot,
                        generation: cur.generation,
                    }));
                }
                Err(BindError::Driver(e)) => {
                    tracing::error!("the driver failed: {e}");
                    self.drop_driver();
                    return Err(Stop::Answer(Answer::text(
                        500,
                        "the edge driver failed\n".into(),
                    )));
                }
            }
        }
        Ok(())
    }

    /// Runs the route's `wasi:http` handler on `request` (encoded as `handle`'s arguments,
    /// as `from` passed it on).
    fn handle(&mut self, request: &[u8], from: &str) -> Answer {
        let Some(h) = &self.rt.handler else {
            return Answer::text(502, "no plugin of the chain answered\n".into());
        };
        match decode_request(request) {
            Some(r) => h.serve(&mut self.seat.handler, r, self.body.take(), &mut self.reply),
            None => Answer::text(502, format!("{from} passed on a malformed request\n")),
        }
    }

    /// Drops a driver that failed (terminated first, so that its bindings are revoked).
    fn drop_driver(&mut self) {
        if let Some(d) = self.seat.driver.take() {
            self.dep.kernel.terminate(d.domain());
        }
    }

    fn plugin_name(&self, slot: usize) -> String {
        self.rt
            .plugins
            .get(slot)
            .map_or_else(|| format!("#{slot}"), |p| p.name.clone())
    }
}

/// The arguments of `lrpc:http/plugin#handle` (see `lrpc_presentation::plan` for the
/// encoding): the head record, then the body. Both versions of the interface share it: a
/// header value is a length then its bytes, as a string (`lrpc:http/plugin`) or as a byte
/// list (`lrpc:http/plugin@0.2.0`); only a string must be UTF-8.
pub fn encode_request(
    method: &str,
    path: &str,
    headers: &[(String, Vec<u8>)],
    body: &[u8],
) -> Vec<u8> {
    encode_request_with(method, path, headers, body)
}

/// [`encode_request`] with header names of any string type and values of any byte type.
fn encode_request_with<N: AsRef<str>, V: AsRef<[u8]>>(
    method: &str,
    path: &str,
    headers: &[(N, V)],
    body: &[u8],
) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s);
    }
    let lines: usize = headers
        .iter()
        .map(|(n, v)| 8 + n.as_ref().len() + v.as_ref().len())
        .sum();
    let mut out = Vec::with_capacity(16 + method.len() + path.len() + lines + body.len());
    string(&mut out, method.as_bytes());
    string(&mut out, path.as_bytes());
    out.extend_from_slice(&(headers.len() as u32).to_le_bytes());
    for (n, v) in headers {
        string(&mut out, n.as_ref().as_bytes());
        string(&mut out, v.as_ref());
    }
    string(&mut out, body);
    out
}

/// A reader of encoded records that believes no length before the bytes are there.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn len(&mut self) -> Option<usize> {
        usize::try_from(u32::from_le_bytes(self.take(4)?.try_into().ok()?)).ok()
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        std::str::from_utf8(self.bytes()?).ok().map(str::to_owned)
    }
    /// A list of header lines (name a string, value bytes): a count the bytes left can not
    /// hold (two lengths each) is refused before anything is allocated.
    fn headers(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        let n = self.len()?;
        if n > self.0.len() / 8 {
            return None;
        }
        let mut headers = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.string()?;
            let value = self.bytes()?.to_vec();
            headers.push((name, value));
        }
        Some(headers)
    }
}

/// Decodes `handle`'s encoded arguments (the inverse of [`encode_request`]), header values as
/// `lrpc:http/plugin@0.2.0` reads them (any bytes); `None` when they are malformed.
pub fn decode_request(b: &[u8]) -> Option<Incoming> {
    let mut c = Cursor(b);
    let method = c.string()?;
    let path = c.string()?;
    let headers = c.headers()?;
    let body = c.bytes()?.to_vec();
    c.0.is_empty().then_some(Incoming {
        method,
        path,
        headers,
        body,
    })
}

/// Decodes an encoded `response` record, header values as bytes; `None` when it is
/// malformed.
pub fn decode_response(b: &[u8]) -> Option<Answer> {
    let mut c = Cursor(b);
    let status = u16::from_le_bytes(c.take(2)?.try_into().ok()?);
    if !(100..=999).contains(&status) {
        return None;
    }
    let headers = c.headers()?;
    let body = c.bytes()?.to_vec();
    c.0.is_empty().then_some(Answer {
        status,
        headers,
        body,
    })
}

/// Waits for ctrl-c or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spends `d` of this thread's processor time.
    fn spin(d: std::time::Duration) {
        let t = thread_cpu_time();
        while thread_cpu_time().saturating_sub(t) < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_route_is_long_on_many_long_requests_not_on_a_few_preempted_ones() {
        let us = Duration::from_micros;
        let ms = Duration::from_millis;
        let fed = |pace: &mut Pace, took: Duration, n: usize| {
            (0..n).for_each(|_| pace.add(took));
            *pace
        };
        // Short requests, one in twenty preempted for 5 ms: the average passes 1 ms at times,
        // but long ones are too few.
        let mut p = Pace::default();
        for _ in 0..50 {
            fed(&mut p, us(5), 19);
            p.add(ms(5));
            assert!(!p.is_long(), "{p:?}");
        }
        // Once every few requests, the route is long.
        let mut p = Pace::default();
        let long = (1..=20).find(|_| {
            fed(&mut p, us(5), 3);
            p.add(ms(5));
            p.is_long()
        });
        assert!(long.is_some(), "{p:?}");
        // Requests of 5 ms: long from the fourth (the average passes 1 ms there).
        let mut p = Pace::default();
        let n = (1..=8).find(|_| fed(&mut p, ms(5), 1).is_long());
        assert_eq!(n, Some(4), "{p:?}");
        // One request of 200 ms (a guest that waits, or a spin up to its deadline) is enough.
        let mut p = fed(&mut Pace::default(), us(5), 100);
        p.add(ms(200));
        assert!(p.is_long());
        // Clearly short only after the long ones have faded.
        assert!(!p.is_short());
        assert!(fed(&mut p, us(5), 200).is_short(), "{p:?}");
        // A preempted request now and then: the route is clearly short again a few requests
        // after each.
        let mut p = Pace::default();
        for _ in 0..20 {
            p.add(ms(3));
            assert!(!p.is_short(), "{p:?}");
            assert!(fed(&mut p, us(5), 20).is_short(), "{p:?}");
            fed(&mut p, us(5), 79);
        }
    }

    #[test]
    fn a_cpu_meter_tells_long_requests_from_short_ones() {
        let mut m = CpuMeter::new();
        for _ in 0..64 {
            spin(std::time::Duration::from_micros(20));
            let avg = m.done();
            assert!(avg < LONG_REQUEST / 4, "short requests averaged {avg:?}");
        }
        // Requests of 5 ms: the average passes 1 ms on the fourth (weights of 1/16 each).
        let long = (1..=8).find(|_| {
            spin(std::time::Duration::from_millis(5));
            m.done() >= LONG_REQUEST
        });
        assert!(
            long.is_some_and(|n| (3..=5).contains(&n)),
            "found long after {long:?} requests"
        );
    }

    #[test]
    fn prefixes() {
        assert!(matches("/api", "/api"));
        assert!(matches("/api", "/api/x"));
        assert!(matches("/api/", "/api/x"));
        assert!(!matches("/api", "/apix"));
        assert!(matches("/", "/anything"));
        assert_eq!(strip("/api", "/api/x?y"), "/x?y");
        assert_eq!(strip("/api", "/api"), "/");
        assert_eq!(strip("/", "/x"), "/x");
    }

    #[test]
    fn requests_decode_strictly() {
        let headers = [
            ("a".to_string(), b"b".to_vec()),
            ("x-user".to_string(), b"caf\xe9".to_vec()),
        ];
        let b = encode_request("POST", "/x?y", &headers, b"body");
        let r = decode_request(&b).expect("valid");
        assert_eq!(
            r,
            Incoming {
                method: "POST".into(),
                path: "/x?y".into(),
                headers: headers.to_vec(),
                body: b"body".to_vec(),
            }
        );
        for cut in 0..b.len() {
            assert_eq!(decode_request(&b[..cut]), None);
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode_request(&long), None);
        // The method, path and names are strings; only values are bytes.
        let bad = encode_request("G\u{e9}T", "/", &[], b"");
        let mut bad_utf8 = bad.clone();
        bad_utf8[5] = 0xff;
        assert_eq!(decode_request(&bad_utf8), None);
        let named = encode_request("GET", "/", &[("n\u{e9}".to_string(), Vec::new())], b"");
        let mut bad_name = named.clone();
        bad_name[21] = 0xff;
        assert!(decode_request(&named).is_some());
        assert_eq!(decode_request(&bad_name), None);
    }

    #[test]
    fn responses_decode_strictly() {
        let mut b = 200u16.to_le_bytes().to_vec();
        b.extend_from_slice(&1u32.to_le_bytes());
        for s in [&b"a"[..], b"\xff"] {
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(s);
        }
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(b"hi");
        let a = decode_response(&b).expect("valid");
        assert_eq!(a.status, 200);
        assert_eq!(a.headers, [("a".to_string(), b"\xff".to_vec())]);
        assert_eq!(a.body, b"hi");
        for cut in 0..b.len() {
            assert_eq!(decode_response(&b[..cut]), None);
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode_response(&long), None);
    }
}
