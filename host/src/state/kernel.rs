//! The kernel's own record: the engine and linker, the settings, the domain table, the
//! clerk's registry, the loaded WIT and the ticker. Behaviour modules reach it through
//! [`KernelInner`]; the embedder holds it through [`Kernel`], whose methods the facade
//! (`crate::kernel`) and the feature modules define.

use super::clerk::Clerk;
use super::domain::{DomainCore, DomainData, DomainShared};
use crate::error::{Error, boxed};
use crate::ext::Extensions;
use crate::quota::{Account, Quotas};
use crate::sync::lock;
use lrpc_presentation::{InterfacePlan, Wit, plan::Presentation};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;
use wasmtime::{Engine, Linker, Module};

/// Kernel settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KernelConfig {
    /// Default deadline of a call into a domain (per export overridable).
    pub deadline: Duration,
    /// Epoch tick: the resolution of deadlines and of asynchronous termination. While no
    /// guest code runs the ticker rests, ticking once a second, and the first call wakes it
    /// ([`Kernel::wake_ticker`](crate::Kernel::wake_ticker)).
    pub tick: Duration,
    /// Largest out-of-band segment one A-stack may get, in bytes.
    pub max_oob: usize,
    /// The quotas of every domain that does not set its own
    /// ([`DomainOptions::quotas`]).
    pub quotas: Quotas,
    /// A folder where compiled code is kept across process starts (wasmtime's cache, keyed
    /// by the code's content and the engine's settings); `None`: compiled code is kept in
    /// memory only, for the process's life.
    pub cache_dir: Option<std::path::PathBuf>,
    /// The instance pool of the pooled engine ([`EngineKind::Pooled`]).
    pub pool: InstancePool,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            deadline: Duration::from_secs(10),
            tick: Duration::from_millis(1),
            max_oob: 64 << 20,
            quotas: Quotas::default(),
            cache_dir: None,
            pool: InstancePool::default(),
        }
    }
}

setters!(KernelConfig {
    with_deadline => deadline: Duration,
    with_tick => tick: Duration,
    with_max_oob => max_oob: usize,
    with_quotas => quotas: Quotas,
    with_cache_dir => cache_dir: Option<std::path::PathBuf>,
    with_pool => pool: InstancePool,
});

/// How many component instances the pooled engine ([`EngineKind::Pooled`]) holds at once,
/// and how large each linear memory may grow. The pool reserves its address space up front:
/// a memory slot is 4 GiB of it plus a guard, but only pages in use take memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstancePool {
    /// Component instances alive at once.
    pub instances: u32,
    /// Bytes one linear memory may grow to; at most 4 GiB.
    pub memory: usize,
}

impl Default for InstancePool {
    fn default() -> Self {
        InstancePool {
            instances: 16,
            memory: 128 << 20,
        }
    }
}

setters!(InstancePool {
    with_instances => instances: u32,
    with_memory => memory: usize,
});

/// Core instances, memories and tables the pool keeps per component instance: a component
/// made by `wit-component` has a few core instances (the program, the WASI adapter, shims),
/// usually one memory and two tables. Core instances and tables cost little address space.
const POOL_CORE_INSTANCES: u32 = 16;
const POOL_MEMORIES: u32 = 2;
const POOL_TABLES: u32 = 8;

/// The largest linear memory of the pooled engine: a 32-bit memory's whole range.
const POOL_MAX_MEMORY: usize = 4 << 30;

/// The engines the kernel compiles for ([`Kernel::engine_of`]); each keeps its own compiled
/// code.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum EngineKind {
    /// The kernel's own, which domains run on.
    Kernel,
    /// The fuel-metering one of component domains with a fuel limit.
    Fuel,
    /// The pooled one, for components an embedder instantiates afresh for each piece of work
    /// (the edge server's WASI 0.2 `wasi:http` handlers, one instance per request).
    Pooled,
    /// The pooled one with the component model's concurrency (`Store::run_concurrent`, async
    /// exports, streams and futures), for components that serve several pieces of work at
    /// once on one instance (WASI 0.3 handlers). A pool of its own.
    PooledConcurrent,
}

/// Most compiled modules and components kept in memory, and most bytes of compiled code
/// they may hold together; past either, the least recently used goes first. What a live
/// domain uses stays in memory anyway: the cache only decides what outlives its domains.
const CODE_KEPT: usize = 16;
const CODE_BYTES_KEPT: usize = 256 << 20;

/// Which code an entry of the [`CodeCache`] is: a kind, an engine and a content hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct CodeKey {
    /// The engine the code was compiled for.
    pub engine: EngineKind,
    /// A component (else a core module).
    pub component: bool,
    /// SHA-256 of the binary.
    pub digest: [u8; 32],
}

impl CodeKey {
    /// The key of `wasm` compiled as a component or a module on engine `engine`.
    pub(crate) fn of(wasm: &[u8], component: bool, engine: EngineKind) -> CodeKey {
        use sha2::Digest;
        CodeKey {
            engine,
            component,
            digest: sha2::Sha256::digest(wasm).into(),
        }
    }
}

/// Compiled code by content, least recently used first, within [`CODE_KEPT`] entries and
/// [`CODE_BYTES_KEPT`] bytes, and how many compilations the kernel made.
#[derive(Default)]
pub(crate) struct CodeCache {
    entries: Vec<(CodeKey, Code)>,
    /// Compilations made (a cache hit makes none).
    pub compiled: u64,
}

impl Code {
    /// Bytes of compiled code.
    fn size(&self) -> usize {
        let r = match self {
            Code::Module(m) => m.image_range(),
            Code::Component(c) => c.image_range(),
        };
        (r.end as usize).saturating_sub(r.start as usize)
    }
}

/// Compiled code of either kind.
#[derive(Clone)]
pub(crate) enum Code {
    Module(Module),
    Component(wasmtime::component::Component),
}

impl CodeCache {
    /// The code kept under `key` (now the most recently used).
    pub(crate) fn get(&mut self, key: &CodeKey) -> Option<Code> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        let e = self.entries.remove(i);
        let code = e.1.clone();
        self.entries.push(e);
        Some(code)
    }

    /// Keeps `code` under `key`, dropping the least recently used entries past the bounds.
    pub(crate) fn insert(&mut self, key: CodeKey, code: Code) {
        self.compiled += 1;
        if self.entries.iter().any(|(k, _)| *k == key) {
            return;
        }
        self.entries.push((key, code));
        let mut bytes: usize = self.entries.iter().map(|(_, c)| c.size()).sum();
        while self.entries.len() > 1 && (self.entries.len() > CODE_KEPT || bytes > CODE_BYTES_KEPT)
        {
            let (_, gone) = self.entries.remove(0);
            bytes -= gone.size();
        }
    }
}

/// The kernel's state, shared by its handles, its domains (weakly) and the kernel imports.
pub(crate) struct KernelInner {
    pub engine: Engine,
    pub linker: Linker<DomainData>,
    pub config: KernelConfig,
    pub ticks: Arc<crate::tick::Clock>,
    pub clerk: Clerk,
    /// The fuel-metering engine of component domains with a fuel limit, made on first use
    /// (ticked by `ticker` too).
    fueled: OnceLock<Result<Engine, String>>,
    /// The pooled engine ([`KernelInner::pooled_engine`]), made on first use (ticked by
    /// `ticker` too).
    pooled: OnceLock<Result<Engine, String>>,
    /// The pooled engine with component-model concurrency
    /// ([`KernelInner::pooled_concurrent_engine`]), made on first use (ticked by `ticker` too).
    pooled_concurrent: OnceLock<Result<Engine, String>>,
    /// The tables features keep for the whole kernel (the channel processors' registry),
    /// each the feature's own type.
    pub features: Mutex<Extensions>,
    pub wit: RwLock<Vec<Wit>>,
    domains: Mutex<DomainTable>,
    /// Compiled code by content: a restart or reload of the same bytes compiles nothing.
    pub code: Mutex<CodeCache>,
    /// Advances the engines' epochs and counts `ticks`.
    pub ticker: crate::tick::Ticker,
}

#[derive(Default)]
struct DomainTable {
    entries: Vec<DomainEntry>,
}

/// One entry of the domain table, indexed by domain id. An entry is reserved while its
/// domain is being created, so that two domains created at once on different threads never
/// get the same id (their replicas' keys would collide, and bindings would be placed in the
/// wrong memory).
#[derive(Default)]
enum DomainEntry {
    #[default]
    Free,
    Reserved,
    Live(Weak<DomainShared>),
}

impl DomainEntry {
    fn is_free(&self) -> bool {
        match self {
            DomainEntry::Free => true,
            DomainEntry::Reserved => false,
            DomainEntry::Live(w) => w.strong_count() == 0,
        }
    }

    fn live(&self) -> Option<Arc<DomainShared>> {
        match self {
            DomainEntry::Live(w) => w.upgrade(),
            _ => None,
        }
    }
}

impl KernelInner {
    /// A kernel's record around `engine` and `linker`, with no domains yet.
    pub(crate) fn new(
        engine: Engine,
        linker: Linker<DomainData>,
        config: KernelConfig,
        wit: Wit,
        ticker: crate::tick::Ticker,
    ) -> KernelInner {
        KernelInner {
            engine,
            linker,
            config,
            ticks: ticker.clock(),
            clerk: Clerk::default(),
            fueled: OnceLock::new(),
            pooled: OnceLock::new(),
            pooled_concurrent: OnceLock::new(),
            features: Mutex::new(Extensions::default()),
            wit: RwLock::new(vec![wit]),
            domains: Mutex::new(DomainTable::default()),
            code: Mutex::new(CodeCache::default()),
            ticker,
        }
    }

    /// The fuel-metering engine (made and added to the ticker on first use).
    pub(crate) fn fuel_engine(&self) -> Result<&Engine, Error> {
        self.fueled
            .get_or_init(|| {
                let mut c = wasmtime::Config::new();
                c.epoch_interruption(true)
                    .consume_fuel(true)
                    .concurrency_support(false);
                disk_cache(&mut c, self.config.cache_dir.as_deref()).map_err(|e| e.to_string())?;
                let engine = Engine::new(&c).map_err(|e| format!("{e:#}"))?;
                self.ticker.add(engine.clone());
                Ok(engine)
            })
            .as_ref()
            .map_err(|e| Error::Engine(e.clone().into()))
    }

    /// The engine of components the embedder instantiates afresh for each piece of work (the
    /// edge server's `wasi:http` handlers): the pooling instance allocator with
    /// copy-on-write memory images, sized by [`KernelConfig::pool`], and epoch interruption.
    /// Made, and added to the ticker, on first use. A separate engine: the kernel's maps
    /// A-stack windows into host-made memories, which a pool can not hold.
    pub(crate) fn pooled_engine(&self) -> Result<&Engine, Error> {
        self.pooled
            .get_or_init(|| self.make_pooled_engine(false))
            .as_ref()
            .map_err(|e| Error::Engine(e.clone().into()))
    }

    /// [`KernelInner::pooled_engine`] with component-model concurrency: `run_concurrent`,
    /// async exports, streams and futures (WASI 0.3). A pool of its own, made on first use.
    pub(crate) fn pooled_concurrent_engine(&self) -> Result<&Engine, Error> {
        self.pooled_concurrent
            .get_or_init(|| self.make_pooled_engine(true))
            .as_ref()
            .map_err(|e| Error::Engine(e.clone().into()))
    }

    /// A pooled engine (see [`KernelInner::pooled_engine`]), with component-model
    /// concurrency or without it, added to the ticker.
    fn make_pooled_engine(&self, concurrent: bool) -> Result<Engine, String> {
        let pool = self.config.pool;
        let instances = pool.instances.max(1);
        let mut p = wasmtime::PoolingAllocationConfig::new();
        p.total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(POOL_CORE_INSTANCES))
            .total_memories(instances.saturating_mul(POOL_MEMORIES))
            .total_tables(instances.saturating_mul(POOL_TABLES))
            .max_memory_size(pool.memory.clamp(1, POOL_MAX_MEMORY));
        let mut c = wasmtime::Config::new();
        c.epoch_interruption(true)
            .concurrency_support(concurrent)
            .memory_init_cow(true)
            .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(p));
        disk_cache(&mut c, self.config.cache_dir.as_deref()).map_err(|e| e.to_string())?;
        let engine = Engine::new(&c).map_err(|e| {
            format!(
                "reserving the address space of a pool of {instances} instances, \
                 with memories of up to {} MiB (see `ulimit -v`): {e:#}",
                pool.memory.clamp(1, POOL_MAX_MEMORY) >> 20
            )
        })?;
        self.ticker.add(engine.clone());
        Ok(engine)
    }

    /// `wasm` compiled as a core module on the kernel's engine, from memory when the same
    /// bytes were compiled before.
    pub(crate) fn compile_module(&self, name: &str, wasm: &[u8]) -> Result<Module, Error> {
        let key = CodeKey::of(wasm, false, EngineKind::Kernel);
        if let Some(Code::Module(m)) = lock(&self.code).get(&key) {
            return Ok(m);
        }
        let m = Module::new(&self.engine, wasm).map_err(|e| Error::Compile {
            domain: name.to_string(),
            source: boxed(e),
        })?;
        lock(&self.code).insert(key, Code::Module(m.clone()));
        Ok(m)
    }

    /// The engine of `kind`, made on first use.
    pub(crate) fn engine_of(&self, kind: EngineKind) -> Result<&Engine, Error> {
        match kind {
            EngineKind::Kernel => Ok(&self.engine),
            EngineKind::Fuel => self.fuel_engine(),
            EngineKind::Pooled => self.pooled_engine(),
            EngineKind::PooledConcurrent => self.pooled_concurrent_engine(),
        }
    }

    /// `wasm` compiled as a component on engine `kind`, from memory when the same bytes were
    /// compiled for it before (code compiled for one engine never runs on another).
    pub(crate) fn compile_component(
        &self,
        name: &str,
        wasm: &[u8],
        kind: EngineKind,
    ) -> Result<wasmtime::component::Component, Error> {
        let engine = self.engine_of(kind)?;
        let key = CodeKey::of(wasm, true, kind);
        if let Some(Code::Component(c)) = lock(&self.code).get(&key) {
            return Ok(c);
        }
        let c = wasmtime::component::Component::new(engine, wasm).map_err(|e| Error::Compile {
            domain: name.to_string(),
            source: boxed(e),
        })?;
        lock(&self.code).insert(key, Code::Component(c.clone()));
        Ok(c)
    }

    /// Gives a reserved id back (its domain was not created).
    pub(crate) fn free_id(&self, id: u16) {
        lock(&self.domains).entries[usize::from(id)] = DomainEntry::Free;
    }

    /// Enters a created domain under its reserved id.
    pub(crate) fn enter(&self, shared: &Arc<DomainShared>) {
        lock(&self.domains).entries[usize::from(shared.core.id)] =
            DomainEntry::Live(Arc::downgrade(shared));
    }

    /// Every live domain.
    pub(crate) fn live_domains(&self) -> Vec<Arc<DomainShared>> {
        lock(&self.domains)
            .entries
            .iter()
            .filter_map(DomainEntry::live)
            .collect()
    }

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
        self.ticks.now().saturating_add(self.ticks_for(deadline))
    }

    /// A live domain by id.
    pub(crate) fn domain_by_id(&self, id: u16) -> Option<Arc<DomainShared>> {
        let t = lock(&self.domains);
        t.entries.get(usize::from(id))?.live()
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

    /// Reserves a free entry of the domain table (until the domain is created or the entry is
    /// freed again) and returns its id.
    pub(crate) fn reserve_id(&self) -> Result<u16, Error> {
        let mut t = lock(&self.domains);
        let free = t.entries.iter().position(DomainEntry::is_free);
        let id = free.unwrap_or(t.entries.len());
        if id > usize::from(u16::MAX) {
            return Err(Error::TooManyDomains);
        }
        if id == t.entries.len() {
            t.entries.push(DomainEntry::Free);
        }
        t.entries[id] = DomainEntry::Reserved;
        Ok(id as u16)
    }

    /// The core face of a component domain's export (see `component::mixed`): a domain of
    /// the table with no replicas, the server side of the bindings core clients make to the
    /// export. Its ties list those bindings, so that terminating it revokes them.
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
            ties: Mutex::new(Default::default()),
            account: Arc::new(Account::new(name, self.config.quotas)),
            memory: Default::default(),
        });
        let shared = Arc::new(DomainShared {
            core,
            replicas: Box::new([]),
            module,
        });
        self.enter(&shared);
        Ok(shared)
    }

    pub(crate) fn plan(&self, interface: &str) -> Result<InterfacePlan, Error> {
        self.plan_with(interface, &Presentation::default())
    }

    pub(crate) fn plan_with(
        &self,
        interface: &str,
        p: &Presentation,
    ) -> Result<InterfacePlan, Error> {
        let wits = self.wit.read().unwrap_or_else(|e| e.into_inner());
        for w in wits.iter().rev() {
            if w.interface_names().iter().any(|n| n == interface) {
                return Ok(w.interface_with(interface, p)?);
            }
        }
        Err(Error::UnknownInterface(interface.to_string()))
    }
}

/// The LRPC kernel. Cheap to clone; all clones are the same kernel.
///
/// Its methods are the facade's (`crate::kernel`) and the feature modules' (component
/// domains, channels); the type lives here so that they can name it from below the facade.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: Arc<KernelInner>,
}

/// Turns on wasmtime's cache of compiled code in `dir` for an engine's config `c` (nothing
/// when `dir` is `None`).
pub(crate) fn disk_cache(
    c: &mut wasmtime::Config,
    dir: Option<&std::path::Path>,
) -> Result<(), Error> {
    let Some(dir) = dir else {
        return Ok(());
    };
    let dir = std::path::absolute(dir).map_err(|e| Error::Engine(Box::new(e)))?;
    let mut cc = wasmtime::CacheConfig::new();
    cc.with_directory(dir);
    let cache = wasmtime::Cache::new(cc).map_err(|e| Error::Engine(boxed(e)))?;
    c.cache(Some(cache));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component that loops forever in its export `spin`.
    const SPIN: &[u8] = b"(component
        (core module $m (func (export \"spin\") (loop $l (br $l))))
        (core instance $i (instantiate $m))
        (func (export \"spin\") (canon lift (core func $i \"spin\"))))";

    #[test]
    fn the_pooled_engine_keeps_its_own_code_and_its_epochs_are_ticked() {
        let pool = InstancePool::default()
            .with_instances(2)
            .with_memory(1 << 20);
        let kernel =
            Kernel::with_config(KernelConfig::default().with_pool(pool)).expect("a kernel");
        let own = kernel
            .compile_component(EngineKind::Kernel, SPIN)
            .expect("compiled");
        let pooled = kernel
            .compile_component(EngineKind::Pooled, SPIN)
            .expect("compiled");
        // The same bytes, compiled once for each engine, and then taken from the cache.
        assert_eq!(kernel.compilations(), 2);
        let engine = kernel
            .engine_of(EngineKind::Pooled)
            .expect("the pooled engine");
        assert!(Engine::same(pooled.engine(), engine));
        assert!(Engine::same(own.engine(), kernel.engine()));
        assert!(!Engine::same(own.engine(), engine));
        let again = kernel
            .compile_component(EngineKind::Pooled, SPIN)
            .expect("cached");
        assert!(Engine::same(again.engine(), engine));
        assert_eq!(kernel.compilations(), 2);
        // The kernel's ticker advances the pooled engine's epoch: a spinning call stops.
        let mut store = wasmtime::Store::new(engine, ());
        store.set_epoch_deadline(20);
        let linker = wasmtime::component::Linker::new(engine);
        let instance = linker.instantiate(&mut store, &pooled).expect("instance");
        let spin = instance
            .get_typed_func::<(), ()>(&mut store, "spin")
            .expect("spin");
        // A Store of the embedder's own: the kernel does not know it runs guest code.
        kernel.wake_ticker();
        let e = spin.call(&mut store, ()).expect_err("stopped");
        assert_eq!(
            e.downcast_ref::<wasmtime::Trap>(),
            Some(&wasmtime::Trap::Interrupt)
        );
    }

    #[test]
    fn the_pooled_concurrent_engine_is_its_own_runs_concurrently_and_is_ticked() {
        let pool = InstancePool::default()
            .with_instances(2)
            .with_memory(1 << 20);
        let kernel =
            Kernel::with_config(KernelConfig::default().with_pool(pool)).expect("a kernel");
        let pooled = kernel
            .compile_component(EngineKind::Pooled, SPIN)
            .expect("compiled");
        let concurrent = kernel
            .compile_component(EngineKind::PooledConcurrent, SPIN)
            .expect("compiled");
        assert_eq!(kernel.compilations(), 2);
        let engine = kernel
            .engine_of(EngineKind::PooledConcurrent)
            .expect("the engine");
        assert!(Engine::same(concurrent.engine(), engine));
        assert!(!Engine::same(pooled.engine(), engine));
        kernel
            .compile_component(EngineKind::PooledConcurrent, SPIN)
            .expect("cached");
        assert_eq!(kernel.compilations(), 2);
        // The others have no component-model concurrency; this one has.
        let mut plain = wasmtime::Store::new(pooled.engine(), ());
        let mut store = wasmtime::Store::new(engine, ());
        let run = |s: &mut wasmtime::Store<()>| {
            wasmtime_wasi::runtime::in_tokio(s.run_concurrent(async |_| ())).is_ok()
        };
        assert!(!run(&mut plain));
        assert!(run(&mut store));
        // The kernel's ticker advances its epoch: a spinning call stops.
        store.set_epoch_deadline(20);
        let linker = wasmtime::component::Linker::new(engine);
        let instance = linker
            .instantiate(&mut store, &concurrent)
            .expect("instance");
        let spin = instance
            .get_typed_func::<(), ()>(&mut store, "spin")
            .expect("spin");
        // A Store of the embedder's own: the kernel does not know it runs guest code.
        kernel.wake_ticker();
        let e = spin.call(&mut store, ()).expect_err("stopped");
        assert_eq!(
            e.downcast_ref::<wasmtime::Trap>(),
            Some(&wasmtime::Trap::Interrupt)
        );
    }

    #[test]
    fn the_code_cache_keeps_the_recently_used_within_its_bounds() {
        let engine = Engine::default();
        let module = |i: usize| {
            let wat = format!("(module (func (export \"f{i}\")))");
            (
                CodeKey::of(wat.as_bytes(), false, EngineKind::Kernel),
                Code::Module(Module::new(&engine, &wat).expect("compile")),
            )
        };
        let mut cache = CodeCache::default();
        let (first, code) = module(0);
        cache.insert(first, code);
        for i in 1..40 {
            // The first entry is used between insertions: it stays.
            assert!(cache.get(&first).is_some(), "entry 0 kept at {i}");
            let (k, c) = module(i);
            cache.insert(k, c);
        }
        assert_eq!(cache.entries.len(), CODE_KEPT);
        assert_eq!(cache.compiled, 40);
        assert!(
            cache.get(&module(1).0).is_none(),
            "an old, unused entry went"
        );
        assert!(cache.get(&module(39).0).is_some());
    }
}
