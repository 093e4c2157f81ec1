//! The kernel: the engine, the kernel imports, the clerk, the domain table and the epoch
//! ticker that enforces deadlines.

use crate::clerk::{Clerk, Detour, ExportEntry, ExportOptions};
use crate::domain::{self, Domain, DomainCore, DomainShared};
use crate::error::{Error, Quota, boxed};
use crate::quota::{Account, Quotas};
use crate::remote::RemoteTarget;
use crate::sync::lock;
use lrpc_presentation::{InterfacePlan, Side, SidePresentation, Wit, plan::Presentation};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use wasmtime::{Config, Engine, Linker, Module};

/// Kernel settings.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// Default deadline of a call into a domain (per export overridable).
    pub deadline: Duration,
    /// Epoch tick: the resolution of deadlines and of asynchronous termination.
    pub tick: Duration,
    /// Largest out-of-band segment one A-stack may get, in bytes.
    pub max_oob: usize,
    /// The quotas of every domain that does not set its own
    /// ([`DomainOptions::quotas`]).
    pub quotas: Quotas,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            deadline: Duration::from_secs(10),
            tick: Duration::from_millis(1),
            max_oob: 64 << 20,
            quotas: Quotas::default(),
        }
    }
}

/// The WIT packages the kernel knows without being told: the project's `wit/` directory.
pub const EMBEDDED_WIT: &[(&str, &str)] = &[
    ("bench.wit", include_str!("../../wit/bench.wit")),
    ("kv.wit", include_str!("../../wit/kv.wit")),
    ("test.wit", include_str!("../../wit/test.wit")),
    ("http.wit", include_str!("../../wit/http.wit")),
];

pub(crate) struct KernelInner {
    pub engine: Engine,
    pub linker: Linker<domain::DomainData>,
    pub config: KernelConfig,
    pub ticks: Arc<AtomicU64>,
    pub clerk: Clerk,
    /// Component domains' machinery (the fuel-metering engine).
    pub components: crate::component::Host,
    /// Every server's processors for asynchronous bindings (`channel::Processors`), so that a
    /// guest's `channel_bind` finds the processors of the server it binds to.
    pub processors: Mutex<Vec<std::sync::Weak<crate::channel::ProcShared>>>,
    wit: RwLock<Vec<Wit>>,
    domains: Mutex<DomainTable>,
    modules: Mutex<HashMap<u64, Module>>,
    /// Advances the engines' epochs and counts `ticks`.
    pub ticker: crate::tick::Ticker,
}

#[derive(Default)]
struct DomainTable {
    slots: Vec<Slot>,
}

/// One entry of the domain table. A slot is reserved while its domain is being created, so
/// that two domains created at once on different threads never get the same id (their
/// replicas' keys would collide, and bindings would be placed in the wrong memory).
#[derive(Default)]
enum Slot {
    #[default]
    Free,
    Reserved,
    Live(Weak<DomainShared>),
}

impl Slot {
    fn is_free(&self) -> bool {
        match self {
            Slot::Free => true,
            Slot::Reserved => false,
            Slot::Live(w) => w.strong_count() == 0,
        }
    }

    fn live(&self) -> Option<Arc<DomainShared>> {
        match self {
            Slot::Live(w) => w.upgrade(),
            _ => None,
        }
    }
}

impl KernelInner {
    /// How many ticks `deadline` spans (rounded up, plus the partial tick running now).
    pub(crate) fn ticks_for(&self, deadline: Duration) -> u64 {
        let ticks = deadline
            .as_nanos()
            .div_ceil(self.config.tick.as_nanos().max(1))
            + 1;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// The tick at which something started now with `deadline` must stop.
    pub(crate) fn deadline_tick(&self, deadline: Duration) -> u64 {
        self.ticks
            .load(Ordering::Relaxed)
            .saturating_add(self.ticks_for(deadline))
    }

    /// A live domain by id.
    pub(crate) fn domain_by_id(&self, id: u16) -> Option<Arc<DomainShared>> {
        let t = lock(&self.domains);
        t.slots.get(usize::from(id))?.live()
    }

    /// Runs `f` on the newest loaded WIT that defines `interface` (the component domains
    /// check exported and imported functions against it); `None` if no WIT defines it.
    pub(crate) fn with_wit<R>(&self, interface: &str, f: impl FnOnce(&Wit) -> R) -> Option<R> {
        let wits = self.wit.read().unwrap_or_else(|e| e.into_inner());
        wits.iter()
            .rev()
            .find(|w| w.interface_names().iter().any(|n| n == interface))
            .map(f)
    }

    /// Reserves a free slot of the domain table (until the domain is created or the slot is
    /// freed again) and returns its id.
    fn reserve_id(&self) -> Result<u16, Error> {
        let mut t = lock(&self.domains);
        let free = t.slots.iter().position(Slot::is_free);
        let id = free.unwrap_or(t.slots.len());
        if id > usize::from(u16::MAX) {
            return Err(Error::TooManyDomains);
        }
        if id == t.slots.len() {
            t.slots.push(Slot::Free);
        }
        t.slots[id] = Slot::Reserved;
        Ok(id as u16)
    }

    /// The core face of a component domain's export (see `component::mixed`): a domain of
    /// the table with no replicas, the server side of the bindings core clients make to the
    /// export. Its book lists those bindings, so that terminating it revokes them.
    pub(crate) fn face(&self, name: &str) -> Result<Arc<DomainShared>, Error> {
        // The smallest module: a face has no instance, but a domain has a module.
        const EMPTY: &[u8] = b"\0asm\x01\0\0\0";
        let module = Module::new(&self.engine, EMPTY).map_err(|e| Error::Compile {
            domain: name.to_string(),
            source: boxed(e),
        })?;
        let id = self.reserve_id()?;
        let core = Arc::new(DomainCore {
            id,
            name: name.to_string(),
            presentations: Vec::new(),
            terminated: AtomicBool::new(false),
            book: Mutex::new(Default::default()),
            account: Arc::new(Account::new(name, self.config.quotas)),
        });
        let shared = Arc::new(DomainShared {
            core,
            replicas: Box::new([]),
            module,
        });
        lock(&self.domains).slots[usize::from(id)] = Slot::Live(Arc::downgrade(&shared));
        Ok(shared)
    }

    pub(crate) fn plan(&self, interface: &str) -> Result<InterfacePlan, Error> {
        self.plan_with(interface, &Presentation::default())
    }

    fn plan_with(&self, interface: &str, p: &Presentation) -> Result<InterfacePlan, Error> {
        let wits = self.wit.read().unwrap_or_else(|e| e.into_inner());
        for w in wits.iter().rev() {
            if w.interface_names().iter().any(|n| n == interface) {
                return Ok(w.interface_with(interface, p)?);
            }
        }
        Err(Error::UnknownInterface(interface.to_string()))
    }
}

/// Options for a new domain.
#[derive(Debug, Clone)]
pub struct DomainOptions {
    /// Number of replicas (instances). Use more than one only for servers that keep no
    /// state between calls: each replica has its own memory.
    pub replicas: usize,
    /// The domain's client-side presentations, one per interface it binds to (see
    /// [`Kernel::presentation`]); interfaces not listed use the default presentation.
    pub presentations: Vec<SidePresentation>,
    /// The domain's quotas; `None`: the kernel's ([`KernelConfig::quotas`]).
    pub quotas: Option<Quotas>,
}

impl Default for DomainOptions {
    fn default() -> Self {
        DomainOptions {
            replicas: 1,
            presentations: Vec::new(),
            quotas: None,
        }
    }
}

/// The LRPC kernel. Cheap to clone; all clones are the same kernel.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: Arc<KernelInner>,
}

impl Kernel {
    /// A kernel with the default configuration and the project's embedded WIT.
    pub fn new() -> Result<Kernel, Error> {
        Kernel::with_config(KernelConfig::default())
    }

    /// A kernel with `config`.
    pub fn with_config(config: KernelConfig) -> Result<Kernel, Error> {
        let mut c = Config::new();
        c.epoch_interruption(true)
            .memory_reservation(1 << 32)
            .memory_may_move(false);
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
        let ticks = ticker.ticks();
        Ok(Kernel {
            inner: Arc::new(KernelInner {
                engine,
                linker,
                config,
                ticks,
                clerk: Clerk::default(),
                components: Default::default(),
                processors: Mutex::new(Vec::new()),
                wit: RwLock::new(vec![wit]),
                domains: Mutex::new(DomainTable::default()),
                modules: Mutex::new(HashMap::new()),
                ticker,
            }),
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

    fn module(&self, name: &str, wasm: &[u8]) -> Result<Module, Error> {
        let key = lrpc_abi::fnv1a64(wasm) ^ (wasm.len() as u64).rotate_left(32);
        if let Some(m) = lock(&self.inner.modules).get(&key) {
            return Ok(m.clone());
        }
        let m = Module::new(&self.inner.engine, wasm).map_err(|e| Error::Compile {
            domain: name.to_string(),
            source: boxed(e),
        })?;
        lock(&self.inner.modules).insert(key, m.clone());
        Ok(m)
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
        let module = self.module(name, wasm)?;
        let id = self.inner.reserve_id()?;
        if let Some(p) = options
            .presentations
            .iter()
            .find(|p| p.side != Side::Client)
        {
            lock(&self.inner.domains).slots[usize::from(id)] = Slot::Free;
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
            book: Mutex::new(Default::default()),
            account,
        });
        let mut replicas = Vec::with_capacity(options.replicas);
        for i in 0..options.replicas {
            match domain::instantiate(&self.inner, &core, &module, i as u16) {
                Ok(r) => replicas.push(r),
                Err(e) => {
                    lock(&self.inner.domains).slots[usize::from(id)] = Slot::Free;
                    return Err(e);
                }
            }
        }
        let shared = Arc::new(DomainShared {
            core,
            replicas: replicas.into_boxed_slice(),
            module,
        });
        lock(&self.inner.domains).slots[usize::from(id)] = Slot::Live(Arc::downgrade(&shared));
        Ok(Domain {
            shared,
            kernel: Arc::downgrade(&self.inner),
        })
    }

    /// Exports `interface` from `server` under the interface's own name.
    pub fn export(&self, server: &Domain, interface: &str) -> Result<(), Error> {
        self.export_as(server, interface, interface, ExportOptions::default())
    }

    /// Exports `interface` from `server` under `name` with `options`.
    pub fn export_as(
        &self,
        server: &Domain,
        interface: &str,
        name: &str,
        options: ExportOptions,
    ) -> Result<(), Error> {
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
        self.inner.clerk.export(
            name,
            plan,
            &server.shared,
            options.deadline.unwrap_or(self.inner.config.deadline),
            presentation,
            options.serving,
        )
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

    /// Terminates a domain: revokes every binding it holds as client or server, withdraws
    /// its exports, fails its calls in flight.
    pub fn terminate(&self, domain: &Domain) {
        crate::terminate::terminate_shared(&self.inner, &domain.shared);
    }

    /// Exports `interface` under `name` on behalf of a server elsewhere: calls made on
    /// bindings to it go to `target`. Guests bind to it by name like any export. The returned
    /// domain is the export's local face: terminating it withdraws the export and revokes
    /// its bindings.
    pub fn export_remote(
        &self,
        name: &str,
        interface: &str,
        target: Arc<dyn RemoteTarget>,
    ) -> Result<Domain, Error> {
        let plan = self.inner.plan(interface)?;
        let face = self.inner.face(&format!("remote {name}"))?;
        let entry = ExportEntry {
            name: name.to_string(),
            plan,
            server: face.clone(),
            entries: Box::new([]),
            deadline: self.inner.config.deadline,
            presentation: SidePresentation::default_for(interface, Side::Server),
            detour: Some(Detour::Remote(target)),
        };
        if let Err(e) = self.inner.clerk.insert(Arc::new(entry)) {
            crate::terminate::terminate_shared(&self.inner, &face);
            return Err(e);
        }
        Ok(Domain {
            shared: face,
            kernel: Arc::downgrade(&self.inner),
        })
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // The last embedder handle: break binding cycles so domains can be freed.
        if Arc::strong_count(&self.inner) == 1 {
            let domains: Vec<Arc<DomainShared>> = lock(&self.inner.domains)
                .slots
                .iter()
                .filter_map(Slot::live)
                .collect();
            for d in &domains {
                crate::terminate::terminate_shared(&self.inner, d);
            }
            self.inner.clerk.clear();
        }
    }
}
