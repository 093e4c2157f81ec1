//! The kernel's settings ([`KernelConfig`], its [`InstancePool`]), the engines it compiles
//! for ([`EngineKind`]) and its cache of compiled code: plain records the kernel's own
//! record (`records::KernelInner`) holds.

use crate::error::{Error, boxed};
use crate::quota::Quotas;
use std::time::Duration;
use wasmtime::Module;

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
pub(super) const POOL_CORE_INSTANCES: u32 = 16;
pub(super) const POOL_MEMORIES: u32 = 2;
pub(super) const POOL_TABLES: u32 = 8;

/// The largest linear memory of the pooled engine: a 32-bit memory's whole range.
pub(super) const POOL_MAX_MEMORY: usize = 4 << 30;

/// The engines the kernel compiles for ([`Kernel::engine_of`](crate::Kernel::engine_of));
/// each keeps its own compiled code.
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
    use wasmtime::Engine;

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
