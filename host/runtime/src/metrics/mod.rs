//! Counters and histograms of a deployment, exposed in the Prometheus text format at
//! `/metrics` (encoded by `prometheus-client`). What every request updates is sharded by
//! thread ([`sharded`]); the rest are `prometheus-client`'s own metrics.

pub mod sharded;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteCode {
    route: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainLabel {
    domain: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutgoingResult {
    domain: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainReason {
    domain: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExportLabel {
    export: String,
}

/// Where the remote refusals are read at each scrape: (export name, calls refused).
type Refusals = Box<dyn Fn() -> Vec<(String, u64)> + Send + Sync>;

/// `lrpc_remote_refused_total{export}`: calls from remote callers that an export's allow
/// list refused, read from the remote server when `/metrics` is scraped.
struct RemoteRefused(Refusals);

impl std::fmt::Debug for RemoteRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemoteRefused")
    }
}

impl prometheus_client::collector::Collector for RemoteRefused {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        use prometheus_client::metrics::TypedMetric as _;
        use prometheus_client::metrics::counter::ConstCounter;
        let mut family = encoder.encode_descriptor(
            "remote_refused",
            "Calls from remote callers refused by an export's allow list (a certificate not on it, or none), by export",
            None,
            ConstCounter::<u64>::TYPE,
        )?;
        for (export, n) in (self.0)() {
            let label = ExportLabel { export };
            ConstCounter::new(n).encode(family.encode_family(&label)?)?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Failure {
    domain: String,
    kind: String,
}

/// The deployment's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RouteCode, sharded::Counter>,
    request_seconds: Family<RouteLabel, sharded::Latency>,
    in_flight: Family<RouteLabel, sharded::Gauge>,
    on_reactor: Family<RouteLabel, Gauge>,
    handoffs: Family<RouteLabel, Counter>,
    calls: Family<DomainLabel, sharded::Counter>,
    failures: Family<Failure, Counter>,
    restarts: Family<DomainLabel, Counter>,
    reloads: Family<DomainLabel, Counter>,
    recycled: Family<DomainReason, Counter>,
    memory: Family<DomainLabel, Gauge>,
    drivers: Family<RouteLabel, Gauge>,
    core_memory: Gauge,
    segments: Gauge,
    total: Gauge,
    outgoing: Family<OutgoingResult, Counter>,
    compilations: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("lrpc");
        let requests = family(
            &mut registry,
            "http_requests",
            "HTTP requests answered, by route and status code",
        );
        let request_seconds = family(
            &mut registry,
            "http_request_duration_seconds",
            "Time from a request's arrival to its answer, by route",
        );
        let in_flight = family(
            &mut registry,
            "http_requests_in_flight",
            "Requests received and not yet answered, by route",
        );
        let on_reactor = family(
            &mut registry,
            "http_route_on_reactor",
            "1 while a route's requests run on the reactor's threads, 0 once its worker pool serves them",
        );
        let handoffs = family(
            &mut registry,
            "http_reactor_handoffs",
            "Requests whose guest code ran long (or had to wait for a domain) on a reactor thread, which handed its other work to another thread",
        );
        let calls = family(
            &mut registry,
            "plugin_calls",
            "Cross-domain calls into each plugin domain",
        );
        let failures = family(
            &mut registry,
            "plugin_failures",
            "Failed calls into each plugin domain, by kind (trap, deadline, terminated, other)",
        );
        let restarts = family(
            &mut registry,
            "domain_restarts",
            "Plugin domains restarted fresh after a fault",
        );
        let reloads = family(
            &mut registry,
            "domain_reloads",
            "Plugin domains replaced by a reload",
        );
        let recycled = family(
            &mut registry,
            "domain_recycled",
            "Plugin domains replaced by a fresh generation after a request, by reason (memory: it grew past `recycle-above`), and edge drivers replaced (domain=\"edge-driver\")",
        );
        let memory = family(
            &mut registry,
            "domain_memory_bytes",
            "Linear memory of each domain (every replica of a core domain; every memory of a component's instance; a wasi:http handler's instances)",
        );
        let drivers = family(
            &mut registry,
            "edge_driver_memory_bytes",
            "Linear memory of the edge's driver domains, by route (A-stack windows to the plugins included)",
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let core_memory = gauge(
            &mut registry,
            "kernel_core_memory_bytes",
            "Linear memory of every core domain of the kernel: plugins, other core domains, edge drivers, generations not yet released",
        );
        let segments = gauge(
            &mut registry,
            "kernel_segment_bytes",
            "A-stack and out-of-band segments of the kernel's bindings, each once (they are mapped over pages of two linear memories, which kernel_core_memory_bytes counts)",
        );
        let total = gauge(
            &mut registry,
            "memory_bytes",
            "Every byte of wasm memory the deployment holds: kernel_core_memory_bytes plus the component domains' and the wasi:http handlers' memories",
        );
        let outgoing = family(
            &mut registry,
            "http_outgoing",
            "Outgoing HTTP requests of each wasi:http handler, by result (sent, denied, failed)",
        );
        let compilations = Gauge::default();
        registry.register(
            "compilations",
            "Modules and components the kernel compiled (a restart or reload of the same bytes compiles nothing)",
            compilations.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            requests,
            request_seconds,
            in_flight,
            on_reactor,
            handoffs,
            calls,
            failures,
            restarts,
            reloads,
            recycled,
            memory,
            drivers,
            core_memory,
            segments,
            total,
            outgoing,
            compilations,
        }
    }
}

/// A family of metrics registered under `name` with `help`.
fn family<L, M>(registry: &mut Registry, name: &str, help: &str) -> Family<L, M>
where
    Family<L, M>: Default + Clone + prometheus_client::registry::Metric,
{
    let f = Family::default();
    registry.register(name, help, f.clone());
    f
}

fn domain(d: &str) -> DomainLabel {
    DomainLabel {
        domain: d.to_string(),
    }
}

/// A `wasi:http` handler's outgoing request counters, looked up once.
#[derive(Clone, Debug)]
pub struct OutgoingMeters {
    /// Requests sent that got a response.
    pub sent: Counter,
    /// Requests to an origin the handler is not granted.
    pub denied: Counter,
    /// Requests that got no response (refused, timed out, or left when the handler stopped).
    pub failed: Counter,
}

/// One route's metrics, looked up once when the route starts: what every request on it
/// updates, without a label lookup (and its allocations) per request.
#[derive(Clone)]
pub struct RouteMeters {
    route: String,
    in_flight: sharded::Gauge,
    seconds: sharded::Latency,
    /// Requests answered 200, the common case; other codes are looked up.
    ok: sharded::Counter,
    on_reactor: Gauge,
    handoffs: Counter,
    /// The linear memory of the route's edge drivers.
    pub drivers: Gauge,
}

impl RouteMeters {
    /// A request arrived (`+1`) or was answered (`-1`).
    pub fn in_flight(&self, delta: i64) {
        self.in_flight.add(delta);
    }

    /// Whether the route's requests run on the reactor's threads.
    pub fn on_reactor(&self, on: bool) {
        self.on_reactor.set(i64::from(on));
    }

    /// A request's reactor thread handed its other work to another thread.
    pub fn handed_off(&self) {
        self.handoffs.inc();
    }

    /// A request answered with `code` after `took`.
    pub fn answered(&self, metrics: &Metrics, code: u16, took: Duration) {
        if code == 200 {
            self.ok.inc();
        } else {
            metrics
                .requests
                .get_or_create(&route_code(&self.route, code))
                .inc();
        }
        self.seconds.observe(took);
    }
}

fn route_code(route: &str, code: u16) -> RouteCode {
    RouteCode {
        route: route.to_string(),
        code: code.to_string(),
    }
}

impl Metrics {
    /// The metrics of `route`, to keep (see [`RouteMeters`]).
    pub fn route(&self, route: &str) -> RouteMeters {
        let label = RouteLabel {
            route: route.to_string(),
        };
        RouteMeters {
            route: route.to_string(),
            in_flight: self.in_flight.get_or_create_owned(&label),
            seconds: self.request_seconds.get_or_create_owned(&label),
            ok: self.requests.get_or_create_owned(&route_code(route, 200)),
            on_reactor: self.on_reactor.get_or_create_owned(&label),
            handoffs: self.handoffs.get_or_create_owned(&label),
            drivers: self.drivers.get_or_create_owned(&label),
        }
    }

    /// A request no route serves, answered with `code` (counted with an empty route).
    pub fn unrouted(&self, code: u16) {
        self.requests.get_or_create(&route_code("", code)).inc();
    }

    /// Requests on `route` received and not yet answered.
    pub fn in_flight(&self, route: &str) -> i64 {
        self.in_flight
            .get_or_create(&RouteLabel {
                route: route.to_string(),
            })
            .get()
    }

    /// Exposes `lrpc_remote_refused_total{export}`, read from `refused` at each scrape (the
    /// `[network]` server's [`lrpc_remote::RemoteServer::refused`]).
    pub fn remote_refusals(
        &self,
        refused: impl Fn() -> Vec<(String, u64)> + Send + Sync + 'static,
    ) {
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .register_collector(Box::new(RemoteRefused(Box::new(refused))));
    }

    /// The call counter of plugin `name`, to keep and increment without a lookup per call.
    pub fn call_counter(&self, name: &str) -> sharded::Counter {
        self.calls.get_or_create_owned(&domain(name))
    }

    /// A failed call into plugin `name`.
    pub fn failure(&self, name: &str, kind: &str) {
        self.failures
            .get_or_create(&Failure {
                domain: name.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Plugin `name` was restarted after a fault.
    pub fn restart(&self, name: &str) {
        self.restarts.get_or_create(&domain(name)).inc();
    }

    /// Plugin `name` was reloaded.
    pub fn reload(&self, name: &str) {
        self.reloads.get_or_create(&domain(name)).inc();
    }

    /// Domain `name` was replaced by a fresh generation for `reason`.
    pub fn recycled(&self, name: &str, reason: &str) {
        self.recycled
            .get_or_create(&DomainReason {
                domain: name.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// The kernel-wide memory gauges: core domains' linear memory, segments, and the
    /// deployment's total.
    pub fn totals(&self, core: usize, segments: u64, total: usize) {
        let g = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.core_memory.set(g(core as u64));
        self.segments.set(g(segments));
        self.total.set(g(total as u64));
    }

    /// Domain `name` has `bytes` of linear memory.
    pub fn memory(&self, name: &str, bytes: usize) {
        self.memory
            .get_or_create(&domain(name))
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// The outgoing request counters of `wasi:http` handler `name`.
    pub fn outgoing(&self, name: &str) -> OutgoingMeters {
        let counter = |result: &str| {
            self.outgoing.get_or_create_owned(&OutgoingResult {
                domain: name.to_string(),
                result: result.to_string(),
            })
        };
        OutgoingMeters {
            sent: counter("sent"),
            denied: counter("denied"),
            failed: counter("failed"),
        }
    }

    /// The kernel has compiled `n` modules and components.
    pub fn compilations(&self, n: u64) {
        self.compilations.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Everything, in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}
