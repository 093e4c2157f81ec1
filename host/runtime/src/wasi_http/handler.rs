//! A `wasi:http` handler domain under supervision: started, restarted, reloaded and
//! stopped; its Stores (WASI grants, outgoing hooks, memory limit) and memory count.

use super::outgoing::Outgoing;
use super::{Generation, HttpState, Pre, generation_of, memory_limit, p3, prepare};
use crate::config::{DomainSpec, HttpOrigin, Source};
use crate::metrics::{Metrics, OutgoingMeters};
use crate::supervise::{DeployError, Supervised, Supervision, died, lock, read};
use lrpc_kernel::component::EngineKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, StoreLimitsBuilder};
use wasmtime_wasi_http::WasiHttpCtx;

/// A `wasi:http/incoming-handler` domain under supervision.
pub struct HttpHandler {
    /// The domain's name.
    pub name: String,
    source: Source,
    pub(super) engine: Engine,
    /// The kernel, whose compiled code a restart or reload of the same bytes reuses.
    pub(super) kernel: lrpc_kernel::Kernel,
    grants: lrpc_kernel::component::WasiGrants,
    memory: Option<usize>,
    pub(super) deadline: Duration,
    /// Requests one instance serves (`reuse`; 1: a fresh instance per request).
    pub(super) reuse: usize,
    /// The WASI 0.2 instances between requests, and the room for those at work.
    pub(super) instances: super::instances::Instances,
    /// How a WASI 0.3 handler's instances serve.
    p3: p3::Limits,
    /// The handler itself, for the instances of its WASI 0.3 generations.
    me: std::sync::Weak<HttpHandler>,
    output: lrpc_kernel::component::CapturedOutput,
    current: Mutex<Arc<Generation>>,
    /// The current generation died and no fresh one has replaced it yet.
    pub(super) down: AtomicBool,
    /// Set at shutdown ([`HttpHandler::stop`]): the guest code of WASI 0.2 instances stops
    /// at its next epoch tick.
    pub(super) stopped: Arc<AtomicBool>,
    /// Woken at shutdown: WASI 0.3 instances waiting for I/O stop too.
    pub(super) stopping: Arc<tokio::sync::Notify>,
    pub(super) supervision: Supervision,
    /// The handler's call counter (looked up once).
    pub(super) calls: crate::metrics::sharded::Counter,
    /// The origins its outgoing requests may go to (`[domains.X.wasi] http`).
    origins: Arc<[HttpOrigin]>,
    /// Its outgoing request counters (looked up once).
    outgoing: OutgoingMeters,
    /// The linear memory of each live instance, counted by its Store's limiter; an
    /// instance's count goes with it.
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
        *lock(&self.current) = Arc::new(generation_of(pre, self.me.clone(), generation, self.p3));
        Ok(())
    }
    fn renewed(&self) {
        self.down.store(false, Ordering::Release);
    }
}

impl HttpHandler {
    /// Compiles and links the handler `spec` (a component domain exporting
    /// `wasi:http/incoming-handler`, or WASI 0.3's `wasi:http/handler`), whose routes have
    /// `workers` worker threads in all (a WASI 0.3 handler runs as many instances at most).
    pub fn start(
        kernel: &lrpc_kernel::Kernel,
        spec: &DomainSpec,
        metrics: Arc<Metrics>,
        workers: usize,
    ) -> Result<Arc<HttpHandler>, DeployError> {
        let c = spec.component.clone().unwrap_or_default();
        let unknown =
            |e: String| DeployError::Unknown(format!("wasi:http handler `{}`: {e}", spec.name));
        let engine = kernel
            .engine_of(EngineKind::Pooled)
            .map_err(|error| DeployError::Kernel {
                what: format!("wasi:http handler `{}`", spec.name),
                error,
            })?
            .clone();
        let wasm = read(&spec.source)?;
        let pre = prepare(kernel, &wasm).map_err(unknown)?;
        let deadline = c.limits.deadline.unwrap_or(kernel.config().deadline);
        let limits = p3::Limits {
            instances: workers.max(1),
            reuse: c.reuse.unwrap_or(p3::REUSE).max(1),
            deadline,
        };
        Ok(Arc::new_cyclic(|me| HttpHandler {
            name: spec.name.clone(),
            source: spec.source.clone(),
            engine,
            kernel: kernel.clone(),
            grants: c.wasi,
            memory: Some(memory_limit(spec)),
            deadline,
            reuse: c.reuse.unwrap_or(1).max(1),
            instances: super::instances::Instances::new(workers),
            p3: limits,
            me: me.clone(),
            output: lrpc_kernel::component::CapturedOutput::default(),
            current: Mutex::new(Arc::new(generation_of(pre, me.clone(), 1, limits))),
            down: AtomicBool::new(false),
            stopped: Arc::default(),
            stopping: Arc::default(),
            calls: metrics.call_counter(&spec.name),
            origins: c.http.into(),
            outgoing: metrics.outgoing(&spec.name),
            supervision: Supervision::new(metrics),
            memories: Mutex::default(),
        }))
    }

    /// Whether the handler is a WASI 0.3 one (`wasi:http/handler@0.3`), as its current
    /// generation is.
    pub fn is_p3(&self) -> bool {
        matches!(self.current().pre, Pre::P3(_))
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

    /// Stops the handler for good, at shutdown: the guest code of its instances stops (a WASI
    /// 0.2 instance's at the next epoch tick; a WASI 0.3 instance's at once when it waits,
    /// else at the next tick), their requests answer 503, no request starts on it, and it is
    /// not restarted.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.stopping.notify_waiters();
        lock(&self.instances.idle).clear();
        self.supervision.stop();
    }

    /// A counter of an instance's linear memory, counted in [`HttpHandler::memory`] while it
    /// lives.
    pub(super) fn memory_counter(&self) -> Arc<std::sync::atomic::AtomicUsize> {
        let bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut m = lock(&self.memories);
        m.retain(|w| w.strong_count() > 0);
        m.push(Arc::downgrade(&bytes));
        bytes
    }

    /// A fresh Store on `engine` for an instance of the handler: its WASI grants, outgoing
    /// HTTP hooks and memory limit, its memory counted in `bytes`.
    pub(super) fn new_store(
        &self,
        engine: &Engine,
        bytes: Arc<std::sync::atomic::AtomicUsize>,
    ) -> Result<Store<HttpState>, String> {
        let wasi = self.grants.context(&self.output)?;
        let mut limits = StoreLimitsBuilder::new();
        if let Some(m) = self.memory {
            limits = limits.memory_size(m);
        }
        // The last instance's Store is gone: the count starts afresh.
        bytes.store(0, Ordering::Relaxed);
        let mut store = Store::new(
            engine,
            HttpState {
                wasi,
                http: WasiHttpCtx::new(),
                table: ResourceTable::new(),
                hooks: Outgoing {
                    origins: self.origins.clone(),
                    meters: self.outgoing.clone(),
                    deadline: None,
                },
                limits: lrpc_kernel::component::MeteredLimits::new(limits.build(), bytes),
                deadline: None,
            },
        );
        store.limiter(|s| &mut s.limits);
        Ok(store)
    }

    /// Bytes of linear memory of the handler's live instances (at work or idle).
    pub fn memory(&self) -> usize {
        lock(&self.memories)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }
}
