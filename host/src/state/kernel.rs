//! What the kernel's own record does: its engines, compiling code (through the cache),
//! the domain table, the loaded WIT. The record (the engine and linker, the settings, the
//! domain table, the clerk's registry, the loaded WIT and the ticker) is [`KernelInner`],
//! defined with the records it refers to (`records`), its settings below them (`config`).
//! Behaviour modules reach it through [`KernelInner`]; the embedder holds it through
//! [`Kernel`], whose methods the facade (`crate::kernel`) and the feature modules define.

use super::config::{
    Code, CodeKey, POOL_CORE_INSTANCES, POOL_MAX_MEMORY, POOL_MEMORIES, POOL_TABLES,
};
use super::records::{Clerk, DomainCore, DomainData, DomainEntry, DomainShared, DomainTable};
use crate::error::{Error, boxed};
use crate::ext::Extensions;
use crate::quota::Account;
use crate::sync::lock;
use lrpc_presentation::{InterfacePlan, Wit, plan::Presentation};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use wasmtime::{Engine, Linker, Module};

pub(crate) use super::config::{CodeCache, disk_cache};
pub use super::config::{EngineKind, InstancePool, KernelConfig};
pub(crate) use super::records::KernelInner;

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

    /// The core stand-in of a component domain's export (see `component::mixed`): a domain of
    /// the table with no replicas, the server side of the bindings core clients make to the
    /// export. Its ties list those bindings, so that terminating it revokes them.
    pub(crate) fn stand_in(&self, name: &str) -> Result<Arc<DomainShared>, Error> {
        // The smallest module: a stand-in has no instance, but a domain has a module.
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
}
