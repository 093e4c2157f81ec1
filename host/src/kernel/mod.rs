//! The facade: the [`Kernel`]'s methods for core domains, exports, presentations and
//! termination (component domains' are in `component`, channels' in `channel`), and
//! running a domain's exports (`domain`).

mod domain;

use crate::component::AnyDomain;
use crate::error::{Error, Quota, boxed};
use crate::mailbox::Mailbox;
use crate::quota::{Account, Quotas};
use crate::state::clerk::{EntryFunc, ExportEntry, ExportOptions, Relay, Serving};
use crate::state::domain::{self as records, Domain, DomainCore, DomainShared, SETUP_WAIT};
use crate::state::kernel::{EngineKind, Kernel, KernelConfig, KernelInner};
use crate::sync::lock;
use crate::transport::{RemoteRelay, RemoteTarget};
use lrpc_presentation::{InterfacePlan, Side, SidePresentation, Wit, plan::Presentation};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use wasmtime::{Config, Engine, Linker};

/// The WIT packages the kernel knows without being told: the project's `wit/` directory.
pub const EMBEDDED_WIT: &[(&str, &str)] = &[
    ("bench.wit", include_str!("../../../wit/bench.wit")),
    ("kv.wit", include_str!("../../../wit/kv.wit")),
    ("test.wit", include_str!("../../../wit/test.wit")),
    ("http.wit", include_str!("../../../wit/http.wit")),
    (
        "http-bytes.wit",
        include_str!("../../../wit/http-bytes.wit"),
    ),
];

/// Options for a new domain.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DomainOptions {
    /// Number of replicas (instances). Use more than one only for servers that keep no
    /// state between calls: each replica has its own memory.
    pub replicas: usize,
    /// The domain's client-side presentations, one per interface it binds to (see
    /// [`Kernel::presentation`]); interfaces not listed use the default presentation.
    pub presentations: Vec<SidePresentation>,
    /// The domain's quotas; `None`: the kernel's ([`KernelConfig::quotas`]).
    pub quotas: Option<Quotas>,
    /// How long instantiating a replica, the module's start function included, may run;
    /// `None`: the kernel's deadline ([`KernelConfig::deadline`]).
    pub start_deadline: Option<std::time::Duration>,
    /// Whether each call meets the domain in its fresh state ([`Isolation`]).
    pub isolation: Isolation,
}

setters!(DomainOptions {
    with_replicas => replicas: usize,
    with_presentations => presentations: Vec<SidePresentation>,
    with_quotas => quotas: Option<Quotas>,
    with_start_deadline => start_deadline: Option<std::time::Duration>,
    with_isolation => isolation: Isolation,
});

pub use crate::state::reset::Isolation;

impl Default for DomainOptions {
    fn default() -> Self {
        DomainOptions {
            replicas: 1,
            presentations: Vec::new(),
            quotas: None,
            start_deadline: None,
            isolation: Isolation::None,
        }
    }
}

impl Kernel {
    /// A kernel with the default configuration and the project's embedded WIT.
    pub fn new() -> Result<Kernel, Error> {
        Kernel::with_config(KernelConfig::default())
    }

    /// A kernel with `config`.
    pub fn with_config(config: KernelConfig) -> Result<Kernel, Error> {
        let mut c = Config::new();
        // No component-model concurrency (`run_concurrent`, streams, futures): the kernel's
        // calls are synchronous, and a Store without it is cheaper to make. Only the
        // [pooled concurrent engine](EngineKind::PooledConcurrent) has it.
        c.epoch_interruption(true)
            .concurrency_support(false)
            .memory_reservation(1 << 32)
            .memory_may_move(false);
        crate::state::kernel::disk_cache(&mut c, config.cache_dir.as_deref())?;
        // Names for JIT code in profiles: `/tmp/perf-PID.map` (read by `perf`, and usable to
        // name callgrind's anonymous code addresses; see `benches/examples/callpath.rs`).
        if std::env::var_os("LRPC_PERFMAP").is_some() {
            c.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&c).map_err(|e| Error::Engine(boxed(e)))?;
        let mut linker = Linker::new(&engine);
        crate::imports::define(&mut linker).map_err(|e| Error::Engine(boxed(e)))?;
        let wit = Wit::load_sources(EMBEDDED_WIT)?;
        let ticker =
            crate::tick::Ticker::start(engine.clone(), config.tick).map_err(Error::Thread)?;
        Ok(Kernel {
            inner: Arc::new(KernelInner::new(engine, linker, config, wit, ticker)),
        })
    }

    /// The kernel's configuration.
    pub fn config(&self) -> &KernelConfig {
        &self.inner.config
    }

    /// The wasmtime engine domains run on.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Tells the epoch ticker that guest code is about to run in a Store of the embedder's
    /// own on one of the kernel's engines (a `wasi:http` handler's, say).
    ///
    /// The ticker rests while no guest code runs: it ticks every second instead of every
    /// [`KernelConfig::tick`]. The kernel's own calls wake it; a Store it does not know of
    /// would otherwise see its first epoch callbacks up to a second apart.
    pub fn wake_ticker(&self) {
        self.inner.ticks.now();
    }

    /// Makes the WIT packages in `dir` (every `*.wit` file) known to the kernel.
    pub fn add_wit_dir(&self, dir: &Path) -> Result<(), Error> {
        let w = Wit::load_dir(dir)?;
        self.inner
            .wit
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(w);
        Ok(())
    }

    /// The procedure descriptor list of a known interface.
    pub fn interface(&self, name: &str) -> Result<InterfacePlan, Error> {
        self.inner.plan(name)
    }

    /// Names clients can bind under right now.
    pub fn exported(&self) -> Vec<String> {
        self.inner.clerk.names()
    }

    /// Compilations this kernel has made, for any of its engines. A domain created, restarted
    /// or reloaded from bytes it compiled before compiles nothing: the code of the 16
    /// binaries used most recently (at most 256 MiB of it) outlives their domains in memory,
    /// and with [`KernelConfig::cache_dir`] all of it is kept on disk too.
    pub fn compilations(&self) -> u64 {
        lock(&self.inner.code).compiled
    }

    /// Bytes of linear memory the kernel's core domains hold now, over all their replicas
    /// (a terminated domain's count 0: its memory went back to the system). Component
    /// domains count their own
    /// ([`ComponentDomain::memory_size`](crate::ComponentDomain::memory_size)).
    pub fn memory_bytes(&self) -> usize {
        self.inner
            .live_domains()
            .iter()
            .map(|d| d.memory_bytes())
            .fold(0, usize::saturating_add)
    }

    /// Bytes of A-stack and out-of-band segments the kernel's bindings hold now, each segment
    /// once (it is mapped into two memories, over pages [`Kernel::memory_bytes`] counts).
    pub fn segment_bytes(&self) -> u64 {
        self.inner
            .live_domains()
            .iter()
            .map(|d| {
                let used = d.core.account.used();
                used.astack_bytes.saturating_add(used.oob_bytes)
            })
            .fold(0, u64::saturating_add)
    }

    /// The engine of `kind`: the kernel's own, or one of the engines for components an
    /// embedder instantiates itself (the edge server's `wasi:http` handlers). The pooled
    /// engines use wasmtime's pooling instance allocator with copy-on-write memory images,
    /// sized by [`KernelConfig::pool`], their epochs ticked with the kernel's; each is made
    /// on first use, so a deployment that needs none reserves nothing. An error if a pool's
    /// address space can not be reserved.
    pub fn engine_of(&self, kind: EngineKind) -> Result<&Engine, Error> {
        self.inner.engine_of(kind)
    }

    /// `wasm` compiled as a component for the engine of `kind`, from memory when the same
    /// bytes were compiled for it before (code compiled for one engine never runs on
    /// another). Counted in [`Kernel::compilations`].
    pub fn compile_component(
        &self,
        kind: EngineKind,
        wasm: &[u8],
    ) -> Result<wasmtime::component::Component, Error> {
        self.inner.compile_component("component", wasm, kind)
    }

    /// Creates a domain with one replica from a core wasm module (binary or text).
    pub fn domain(&self, name: &str, wasm: &[u8]) -> Result<Domain, Error> {
        self.domain_with(name, wasm, DomainOptions::default())
    }

    /// Creates a domain with options.
    pub fn domain_with(
        &self,
        name: &str,
        wasm: &[u8],
        options: DomainOptions,
    ) -> Result<Domain, Error> {
        if options.replicas == 0 || options.replicas > usize::from(u16::MAX) {
            return Err(Error::Instantiate {
                domain: name.to_string(),
                source: format!("{} replicas requested", options.replicas).into(),
            });
        }
        let account = Arc::new(Account::new(
            name,
            options.quotas.unwrap_or(self.inner.config.quotas),
        ));
        account.check(Quota::Replicas, options.replicas as u64)?;
        if crate::component::is_component(wasm) {
            return Err(Error::Compile {
                domain: name.to_string(),
                source: "a component binary: create it with `Kernel::component` or `Kernel::load`"
                    .into(),
            });
        }
        let (module, isolated) = match options.isolation {
            Isolation::None => (self.inner.compile_module(name, wasm)?, None),
            Isolation::Request => {
                let r = crate::isolate::rewrite(wasm).map_err(|e| Error::Compile {
                    domain: name.to_string(),
                    source: format!("the module can not be isolated: {e}").into(),
                })?;
                let exports = records::ResetExports {
                    globals: r.globals,
                    tables: r.tables,
                };
                (self.inner.compile_module(name, &r.wasm)?, Some(exports))
            }
        };
        let id = self.inner.reserve_id()?;
        if let Some(p) = options
            .presentations
            .iter()
            .find(|p| p.side != Side::Client)
        {
            self.inner.free_id(id);
            return Err(Error::Presentation(format!(
                "{}: a domain's own presentations must be client presentations",
                p.origin
            )));
        }
        let core = Arc::new(DomainCore {
            id,
            name: name.to_string(),
            presentations: options.presentations.clone(),
            terminated: AtomicBool::new(false),
            ties: Mutex::new(Default::default()),
            account,
            memory: Default::default(),
        });
        let mut replicas = Vec::with_capacity(options.replicas);
        for i in 0..options.replicas {
            let start = options.start_deadline.unwrap_or(self.inner.config.deadline);
            match records::instantiate(
                &self.inner,
                &core,
                &module,
                i as u16,
                start,
                isolated.as_ref(),
            ) {
                Ok(r) => replicas.push(r),
                Err(e) => {
                    self.inner.free_id(id);
                    return Err(e);
                }
            }
        }
        let shared = Arc::new(DomainShared {
            core,
            replicas: replicas.into_boxed_slice(),
            module,
        });
        self.inner.enter(&shared);
        Ok(Domain {
            shared,
            kernel: Arc::downgrade(&self.inner),
        })
    }

    /// Exports `interface` from `server` (a core or a component domain) under the
    /// interface's own name.
    pub fn export(&self, server: impl Into<AnyDomain>, interface: &str) -> Result<(), Error> {
        self.export_as(server, interface, interface, ExportOptions::default())
    }

    /// Exports `interface` from `server` under `name` with `options`. A component domain's
    /// calls run under its own limits ([`ComponentOptions`](crate::component::ComponentOptions)),
    /// so its exports take only the default options.
    pub fn export_as(
        &self,
        server: impl Into<AnyDomain>,
        interface: &str,
        name: &str,
        options: ExportOptions,
    ) -> Result<(), Error> {
        let server = match server.into() {
            AnyDomain::Core(d) => d,
            AnyDomain::Component(c) => {
                let defaults = options.serving == Serving::Migrate
                    && options.deadline.is_none()
                    && options.presentation.is_none();
                if !defaults {
                    return Err(Error::Options(format!(
                        "`{}` is a component domain: its exports take no export options",
                        c.name()
                    )));
                }
                return self.export_component_as(&c, interface, name);
            }
        };
        let server = &server;
        if server.is_terminated() {
            return Err(Error::Terminated(server.name().to_string()));
        }
        let presentation = match options.presentation {
            Some(p) => {
                if p.side != Side::Server || p.interface != interface {
                    return Err(Error::Presentation(format!(
                        "{}: expected a server presentation of `{interface}`",
                        p.origin
                    )));
                }
                p
            }
            None => SidePresentation::default_for(interface, Side::Server),
        };
        // The server's presentation sizes its procedure descriptor list (LRPC 5.2).
        let mut overrides = Presentation::default();
        let names: Vec<String> = self
            .inner
            .plan(interface)?
            .procs
            .into_iter()
            .map(|p| p.name)
            .collect();
        for (i, f) in &presentation.functions {
            if f.astack_count.is_some() || f.astack_size.is_some() {
                overrides
                    .astacks
                    .insert(names[*i].clone(), (f.astack_count, f.astack_size));
            }
        }
        let plan = self.inner.plan_with(interface, &overrides)?;
        let entries = entries_of(&server.shared, &plan)?;
        // Every binding maps its A-stacks into the server's memory. A server whose initial
        // memory leaves no room for one under its memory quota could never be bound:
        // refuse the export rather than fail each binding later.
        let astacks = crate::astack::plan_layout(&plan).map_or(u64::MAX, |(_, t)| t as u64);
        let size = server.memory_size()? as u64;
        if let Err(Error::QuotaExceeded { quota, limit, .. }) = server
            .shared
            .core
            .account
            .check(Quota::Memory, size.saturating_add(astacks))
        {
            return Err(Error::Options(format!(
                "domain `{}` can not export `{name}`: its initial memory ({size} bytes) leaves \
                 no room for a binding's A-stacks ({astacks} bytes) under its {quota} quota \
                 ({limit} bytes)",
                server.name()
            )));
        }
        let relay: Option<Box<dyn Relay>> = match options.serving {
            Serving::Migrate => None,
            Serving::OwnThread => Some(Box::new(
                Mailbox::start(name, &server.shared, entries[0].to_vec()).map_err(Error::Thread)?,
            )),
        };
        self.inner.clerk.insert(Arc::new(ExportEntry {
            name: name.to_string(),
            plan,
            server: server.shared.clone(),
            entries,
            deadline: options.deadline.unwrap_or(self.inner.config.deadline),
            presentation,
            relay,
        }))
    }

    /// Parses a presentation file's text (`origin` names it in messages) and checks it
    /// against the kernel's WIT.
    pub fn presentation(&self, origin: &str, text: &str) -> Result<SidePresentation, Error> {
        Ok(SidePresentation::parse(origin, text, |name| {
            self.inner.plan(name).map_err(|e| match e {
                Error::Wit(w) => w,
                other => {
                    lrpc_presentation::Error::UnknownInterface(name.to_string(), other.to_string())
                }
            })
        })?)
    }

    /// Reads and checks a presentation file.
    pub fn load_presentation(&self, path: &Path) -> Result<SidePresentation, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::PresentationFile {
            path: path.display().to_string(),
            source,
        })?;
        self.presentation(&path.display().to_string(), &text)
    }

    /// Terminates a domain of either kind: revokes every binding it holds as client or
    /// server, withdraws its exports, fails its calls in flight.
    pub fn terminate(&self, domain: impl Into<AnyDomain>) {
        match domain.into() {
            AnyDomain::Core(d) => crate::terminate::terminate_shared(&self.inner, &d.shared),
            AnyDomain::Component(c) => self.terminate_component(&c),
        }
    }

    /// Exports `interface` under `name` on behalf of a server elsewhere: calls made on
    /// bindings to it go to `target`. Guests bind to it by name like any export. The returned
    /// domain is the export's local stand-in: terminating it withdraws the export and revokes
    /// its bindings.
    pub fn export_remote(
        &self,
        name: &str,
        interface: &str,
        target: Arc<dyn RemoteTarget>,
    ) -> Result<Domain, Error> {
        let plan = self.inner.plan(interface)?;
        let stand_in = self.inner.stand_in(&format!("remote {name}"))?;
        let entry = ExportEntry {
            name: name.to_string(),
            plan,
            server: stand_in.clone(),
            entries: Box::new([]),
            deadline: self.inner.config.deadline,
            presentation: SidePresentation::default_for(interface, Side::Server),
            relay: Some(Box::new(RemoteRelay(target))),
        };
        if let Err(e) = self.inner.clerk.insert(Arc::new(entry)) {
            crate::terminate::terminate_shared(&self.inner, &stand_in);
            return Err(e);
        }
        Ok(Domain {
            shared: stand_in,
            kernel: Arc::downgrade(&self.inner),
        })
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // The last embedder handle: break binding cycles so domains can be freed.
        if Arc::strong_count(&self.inner) == 1 {
            let domains: Vec<Arc<DomainShared>> = self.inner.live_domains();
            for d in &domains {
                crate::terminate::terminate_shared(&self.inner, d);
            }
            self.inner.clerk.clear();
        }
    }
}

/// Resolves and type-checks the entry of every procedure of `plan` in every replica of
/// `server` (`entries[replica][proc]`), so that binding needs no further checks of it.
fn entries_of(
    server: &DomainShared,
    plan: &InterfacePlan,
) -> Result<Box<[Box<[EntryFunc]>]>, Error> {
    let mut entries = Vec::with_capacity(server.replicas.len());
    for r in server.replicas.iter() {
        let mut store = r.wait_store(SETUP_WAIT).ok_or(Error::Busy)?;
        let mut funcs = Vec::with_capacity(plan.procs.len());
        for p in &plan.procs {
            let f = r
                .instance
                .get_typed_func::<(i32, i32, i32, i32, i32), i32>(&mut *store, &p.entry)
                .map_err(|e| Error::NotImplemented {
                    domain: server.core.name.clone(),
                    interface: plan.name.clone(),
                    entry: p.entry.clone(),
                    source: boxed(e),
                })?;
            funcs.push(f);
        }
        entries.push(funcs.into_boxed_slice());
    }
    Ok(entries.into_boxed_slice())
}
