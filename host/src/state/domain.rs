//! Protection domains: one wasm instance (per replica) with its own linear memory and `Store`.
//!
//! **Why one `Store` per domain.** Fuel and epoch budgets, trap state and teardown belong to a
//! `Store`; with a Store per domain they are naturally per domain, and measured crossings
//! between Stores cost the same as within one (22–23 ns). A `Store` is single threaded, so
//! each one sits behind its own lock: calls into different domains run in parallel on
//! different threads and take no shared lock; calls into the same domain serialize on that
//! domain's lock. A stateless server may be created with several **replicas** (LRPC's
//! E-stacks, here whole instances): a call takes whichever replica is free, so calls from
//! several threads into one server run in parallel too.
//!
//! A domain whose instance traps is terminated: after a trap the guest's shadow stack
//! pointer is not restored, so the instance is not trusted to run again.

use super::binding::{Binding, ClientBinding};
use super::kernel::KernelInner;
use super::linkage::{self, ReplicaKey};
use super::window::WindowSpace;
use crate::astack::MemoryRange;
use crate::error::Error;
use crate::ext::Extensions;
use crate::slot::Slot;
use crate::sync::lock;
use lrpc_lock::{Guard, TryLock};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use wasmtime::{
    AsContextMut, Instance, Memory, Module, Store, StoreContextMut, StoreLimits,
    StoreLimitsBuilder, TypedFunc, WasmParams, WasmResults,
};

/// How long setup operations (export, export lookup) wait for a busy replica.
pub(crate) const SETUP_WAIT: Duration = Duration::from_secs(30);

/// The per-`Store` data of a replica.
pub struct DomainData {
    pub(crate) core: Arc<DomainCore>,
    pub(crate) replica: u16,
    pub(crate) kernel: Weak<KernelInner>,
    /// Bindings this replica holds as client, indexed by handle slot.
    pub(crate) bindings: Vec<Slot<ClientBinding>>,
    /// Bindings unbound while a call on them was still in flight (see `linkage::Pinned`).
    pub(crate) retired: Vec<super::binding::ClientBinding>,
    /// The features' tables of this replica: its channels (`channel::guest`), its
    /// MultiRPCs under way (`imports::multi`), the direct-linked server copies in its store
    /// (`direct`).
    pub(crate) features: Extensions,
    /// Ticks of the kernel's default deadline, for calls the embedder makes.
    pub(crate) default_deadline_ticks: u64,
    /// Tick at which the code running now must stop (0: no deadline).
    pub(crate) deadline_tick: u64,
    pub(crate) ticks: Arc<crate::tick::Clock>,
    /// The store's resource limits (memory size, instances, tables: the domain's quotas).
    pub(crate) limits: crate::quota::MeteredLimits,
    /// The domain module's `memory` export as an index, so that the imports find the calling
    /// instance's memory without a lookup by name (a direct-linked server copy in this store
    /// is another module: for it, the index does not match and the name is looked up).
    pub(crate) memory_export: Option<wasmtime::ModuleExport>,
    /// The replica's flag for windows waiting to be unmapped (`Replica::flush_deferred`),
    /// so that the imports find out without looking the replica up.
    pub(crate) has_deferred: Arc<AtomicBool>,
    /// Threads waiting for this replica's store (`Replica::wait_store`), which the epoch
    /// callback passes to the thread's tick hook (`pace`).
    pub(crate) waiting: Arc<AtomicU32>,
    /// The fresh state of an isolated domain's replica (`reset`).
    pub(crate) fresh: Option<Box<super::reset::Fresh>>,
}

impl DomainData {
    pub(crate) fn key(&self) -> ReplicaKey {
        ReplicaKey {
            domain: self.core.id,
            replica: self.replica,
        }
    }
}

/// State of a domain shared by its replicas and by the kernel.
pub(crate) struct DomainCore {
    pub id: u16,
    pub name: String,
    /// Client-side presentations, by interface.
    pub presentations: Vec<lrpc_presentation::SidePresentation>,
    pub terminated: AtomicBool,
    pub ties: Mutex<Ties>,
    /// The domain's quotas and what its bindings hold.
    pub account: Arc<crate::quota::Account>,
    /// Bytes of linear memory its replicas' Stores hold (every memory of each, direct-linked
    /// server copies included), counted by their resource limiters as memories grow.
    pub memory: Arc<std::sync::atomic::AtomicUsize>,
}

/// What ties a domain to others — its bindings either way, its exports, its handles, what
/// closes with it — so that terminating it undoes them. Touched at bind, unbind and
/// termination time, never on the call path.
#[derive(Default)]
pub(crate) struct Ties {
    /// Bindings this domain holds as client.
    pub client: Vec<Arc<Binding>>,
    /// Bindings to this domain as server.
    pub server: Vec<Weak<Binding>>,
    /// Names this domain exports interfaces under.
    pub exports: Vec<String>,
    /// Handles of its live bindings, to tell a foreign handle from a forged one.
    pub handles: HashSet<u64>,
    /// What closes with it: the asynchronous bindings (URPC channels) its replicas hold as
    /// client (each replica's table owns them: see `channel::guest`).
    pub closers: Vec<Weak<dyn Close>>,
}

/// Something a domain holds that closes when the domain is terminated.
pub(crate) trait Close: Send + Sync {
    /// Closes it (idempotent).
    fn close(&self);
}

/// One instance of a domain. Aligned to two cache lines so that the locks of neighbouring
/// replicas, taken by different threads, never share one.
#[repr(align(128))]
pub(crate) struct Replica {
    pub key: ReplicaKey,
    pub store: TryLock<Store<DomainData>>,
    pub instance: Instance,
    pub memory: Memory,
    base: usize,
    /// The replica's window space and the windows waiting to be unmapped.
    pub windows: WindowSpace,
    /// Threads waiting for `store` (shared with the store's `DomainData`).
    waiting: Arc<AtomicU32>,
    /// Set once the replica's memory went back to the system after its domain was
    /// terminated ([`DomainShared::release_memory`]).
    released: AtomicBool,
}

/// A domain: its replicas and shared state.
pub(crate) struct DomainShared {
    pub core: Arc<DomainCore>,
    pub replicas: Box<[Replica]>,
    /// The compiled module (direct-linked clients instantiate their own copy of it).
    pub module: Module,
}

impl DomainShared {
    /// Gives a terminated domain's memory back to the system: zero pages over the whole
    /// linear memory of each replica that no code runs in now, as revocation does for a
    /// window. A replica still running is left to the next call of this, which the thread
    /// that ran it makes when the interrupted code returns (`terminate_shared`). The
    /// domain's Stores and records stay as long as handles hold them, but no longer its
    /// memory: a crashed plugin's RSS goes at once, not when its last binding is dropped.
    pub(crate) fn release_memory(&self) {
        debug_assert!(self.core.terminated.load(Ordering::Acquire));
        for r in self.replicas.iter() {
            r.release_memory();
        }
    }
}

impl DomainShared {
    /// See [`Domain::memory_bytes`].
    pub(crate) fn memory_bytes(&self) -> usize {
        if self.core.terminated.load(Ordering::Acquire) {
            return 0;
        }
        self.core.memory.load(Ordering::Relaxed)
    }
}

impl Drop for DomainShared {
    fn drop(&mut self) {
        // Revoke while this domain's Stores still exist (fields drop after this body), so
        // that unmapping its side of each window happens in a live memory.
        let bindings = {
            let mut ties = lock(&self.core.ties);
            let mut all: Vec<Arc<Binding>> = std::mem::take(&mut ties.client);
            all.extend(ties.server.drain(..).filter_map(|w| w.upgrade()));
            all
        };
        for b in bindings {
            b.revoke_with(super::binding::RevokeReason::ClientTerminated, Some(self));
        }
    }
}

impl Replica {
    /// See [`DomainShared::release_memory`].
    fn release_memory(&self) {
        if self.released.load(Ordering::Acquire) {
            return;
        }
        // Only while no code runs in the replica: the store lock is what a running call
        // holds.
        let Some(store) = self.store.try_lock() else {
            return;
        };
        let size = self.memory.data_size(&*store);
        // The guest's own pages only: windows stay as they are (a channel's replies that
        // its client has yet to collect live there), and go when their owners give them
        // back. They are pages of memory files, not the guest's heap.
        let guest = self.guest_ranges(size);
        let range = self.range(size);
        for (off, len) in guest {
            if let Err(e) = range.unmap(off, len) {
                tracing::error!(
                    domain = self.key.domain,
                    replica = self.key.replica,
                    "giving a terminated replica's memory back failed: {e}"
                );
                return;
            }
        }
        self.released.store(true, Ordering::Release);
    }

    /// Whether the replica's memory went back to the system.
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Locks the replica's store, waiting for at most `wait` (counted as a waiter meanwhile:
    /// see `DomainData::waiting`).
    #[inline]
    pub(crate) fn wait_store(&self, wait: Duration) -> Option<Guard<'_, Store<DomainData>>> {
        crate::sync::wait_lock(&self.store, wait, &self.waiting)
    }

    /// The memory as a window-mapping range, up to the host-grown high-water mark.
    #[allow(unsafe_code, reason = "the range's contract, argued below")]
    pub(crate) fn range(&self, high: usize) -> MemoryRange {
        // SAFETY: `base` is this replica's linear memory, which never moves and lives as long
        // as the replica's Store; callers pass at most the size the host has grown it to, and
        // use the range only while they hold the replica (its shared state keeps the Store).
        unsafe { MemoryRange::new(self.base as *mut u8, high) }
    }

    /// Runs `f` with this replica's store: locked if it is free, borrowed from the linkage
    /// stack if this thread is inside a call made by it, or after waiting up to `wait` for
    /// another thread to release it.
    pub(crate) fn with_store<R>(
        &self,
        wait: Duration,
        f: impl FnOnce(StoreContextMut<'_, DomainData>) -> R,
    ) -> Result<R, Busy> {
        if let Some(mut guard) = self.store.try_lock() {
            return Ok(f(guard.as_context_mut()));
        }
        let mut f = Some(f);
        if let Some(r) = linkage::reenter(self.key, |caller| {
            (f.take().expect("called once"))(caller.as_context_mut())
        }) {
            return Ok(r);
        }
        let f = f.take().expect("not yet called");
        let mut guard = self.wait_store(wait).ok_or(Busy)?;
        Ok(f(guard.as_context_mut()))
    }
}

/// A replica stayed locked by another thread for the whole wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Busy;

/// The exports a module rewritten for isolation keeps its state under (`isolate`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ResetExports {
    pub globals: Vec<String>,
    pub tables: Vec<String>,
}

/// Creates one replica of a domain; its start function runs under the deadline `start`. With
/// `isolated`, the replica's fresh state is saved once it is initialized (see `reset`).
pub(crate) fn instantiate(
    kernel: &Arc<KernelInner>,
    core: &Arc<DomainCore>,
    module: &Module,
    replica: u16,
    start: std::time::Duration,
    isolated: Option<&ResetExports>,
) -> Result<Replica, Error> {
    let data = DomainData {
        core: core.clone(),
        replica,
        kernel: Arc::downgrade(kernel),
        bindings: Vec::new(),
        retired: Vec::new(),
        features: Extensions::default(),
        default_deadline_ticks: kernel.ticks_for(kernel.config.deadline),
        deadline_tick: kernel.deadline_tick(start),
        ticks: kernel.ticks.clone(),
        limits: crate::quota::MeteredLimits::new(
            store_limits(&core.account.limits),
            core.memory.clone(),
        ),
        memory_export: module.get_export_index("memory"),
        has_deferred: Arc::new(AtomicBool::new(false)),
        waiting: Arc::new(AtomicU32::new(0)),
        fresh: None,
    };
    let mut store = Store::new(&kernel.engine, data);
    store.limiter(|d| &mut d.limits);
    store.epoch_deadline_callback(|ctx| {
        let d = ctx.data();
        crate::pace::at_tick(
            &d.core.terminated,
            d.deadline_tick,
            d.ticks.at_tick(),
            &d.waiting,
        )
    });
    store.set_epoch_deadline(1);
    let instance =
        kernel
            .linker
            .instantiate(&mut store, module)
            .map_err(|e| Error::Instantiate {
                domain: core.name.clone(),
                source: crate::error::boxed(e),
            })?;
    let memory = instance
        .get_memory(&mut store, "memory")
        .ok_or_else(|| Error::Instantiate {
            domain: core.name.clone(),
            source: "the module exports no memory named `memory`".into(),
        })?;
    if memory.ty(&store).is_64() || memory.ty(&store).is_shared() {
        return Err(Error::Instantiate {
            domain: core.name.clone(),
            source: "the exported memory must be a 32-bit, unshared memory".into(),
        });
    }
    let base = memory.data_ptr(&store) as usize;
    store.data_mut().deadline_tick = 0;
    let has_deferred = store.data().has_deferred.clone();
    let waiting = store.data().waiting.clone();
    let r = Replica {
        key: ReplicaKey {
            domain: core.id,
            replica,
        },
        store: TryLock::new(store),
        instance,
        memory,
        base,
        windows: WindowSpace::new(has_deferred),
        waiting,
        released: AtomicBool::new(false),
    };
    if let Some(names) = isolated {
        let mut store = r.store.try_lock().ok_or_else(|| Error::Instantiate {
            domain: core.name.clone(),
            source: "a new replica's store is locked".into(),
        })?;
        super::reset::snapshot(&mut store, &r, &names.globals, &names.tables).map_err(|e| {
            Error::Instantiate {
                domain: core.name.clone(),
                source: e.into(),
            }
        })?;
    }
    Ok(r)
}

/// The resource limiter of a domain's store: memories up to the memory quota, and as many
/// instances, memories and tables as the instance quota allows (its own instance and the
/// server copies of direct-linked bindings).
fn store_limits(q: &crate::quota::Quotas) -> StoreLimits {
    let instances = usize::try_from(q.instances).unwrap_or(usize::MAX);
    StoreLimitsBuilder::new()
        .memory_size(usize::try_from(q.memory).unwrap_or(usize::MAX))
        .instances(instances)
        .memories(instances)
        .tables(instances)
        .build()
}

/// A protection domain, as the embedder holds it. Cloning gives another handle to the same
/// domain.
#[derive(Clone)]
pub struct Domain {
    pub(crate) shared: Arc<DomainShared>,
    pub(crate) kernel: Weak<KernelInner>,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("id", &self.id())
            .field("name", &self.name())
            .field("replicas", &self.replicas())
            .field("terminated", &self.is_terminated())
            .finish()
    }
}

impl Domain {
    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.shared.core.name
    }

    /// The kernel's identifier of this domain (unique among live domains).
    pub fn id(&self) -> u16 {
        self.shared.core.id
    }

    /// Number of replicas (instances) of this domain.
    pub fn replicas(&self) -> usize {
        self.shared.replicas.len()
    }

    /// Whether the domain has been terminated (by a trap, a deadline or the API).
    pub fn is_terminated(&self) -> bool {
        self.shared.core.terminated.load(Ordering::Acquire)
    }

    /// Looks up an export once for repeated calls (see [`DomainFunc`]).
    pub fn func<P: WasmParams, R: WasmResults>(
        &self,
        name: &str,
    ) -> Result<DomainFunc<P, R>, Error> {
        let mut funcs = Vec::with_capacity(self.shared.replicas.len());
        for r in self.shared.replicas.iter() {
            let mut store = r.wait_store(SETUP_WAIT).ok_or(Error::Busy)?;
            let f = r
                .instance
                .get_typed_func::<P, R>(&mut *store, name)
                .map_err(|e| Error::NoSuchExport {
                    domain: self.name().to_string(),
                    export: name.to_string(),
                    source: crate::error::boxed(e),
                })?;
            funcs.push(f);
        }
        let wait = self
            .kernel
            .upgrade()
            .map_or(Duration::from_secs(10), |k| k.config.deadline);
        Ok(DomainFunc {
            domain: self.clone(),
            funcs,
            wait,
        })
    }

    /// Copies `len` bytes of replica 0's linear memory at `offset` (through raw, volatile
    /// loads, so it is safe on window pages a peer may be writing).
    pub fn read_memory(&self, offset: usize, len: usize) -> Result<Vec<u8>, Error> {
        self.in_memory0(offset, len, |m| {
            let mut buf = vec![0; len];
            m.read(offset, &mut buf).map(|()| buf)
        })
    }

    /// Copies `dst.len()` bytes of replica 0's linear memory at `offset` into `dst`, as
    /// [`Domain::read_memory`] does, without allocating.
    pub fn read_memory_into(&self, offset: usize, dst: &mut [u8]) -> Result<(), Error> {
        self.in_memory0(offset, dst.len(), |m| m.read(offset, dst))
    }

    /// Writes into replica 0's linear memory at `offset` (raw, volatile stores).
    pub fn write_memory(&self, offset: usize, bytes: &[u8]) -> Result<(), Error> {
        self.in_memory0(offset, bytes.len(), |m| m.write(offset, bytes))
    }

    /// Runs `f` on replica 0's linear memory once `[offset, offset + len)` is known to lie
    /// inside it (before `f` allocates anything: `len` may come from the guest).
    fn in_memory0<R>(
        &self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&MemoryRange) -> Option<R>,
    ) -> Result<R, Error> {
        let r = &self.shared.replicas[0];
        let size = lock_or_reenter_size(r, Duration::from_secs(5)).ok_or_else(|| Error::Busy)?;
        let outside = || Error::OutOfBounds { offset, len };
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(outside());
        }
        f(&r.range(size)).ok_or_else(outside)
    }

    /// Writes into one of this domain's A-stack or out-of-band windows (replica 0) without
    /// waiting for the domain's lock: the window pages stay mapped while the domain runs, so
    /// this is how a test plays a hostile peer rewriting shared memory mid-call. Refused
    /// unless `[offset, offset + bytes.len())` lies inside a live window of this domain.
    ///
    /// Trusted: it breaks a lent view. A call whose client can not run lends its byte lists
    /// to the server in place, and a write here changes them under the server (which reads
    /// each length once, so it stays in bounds).
    pub fn write_window(&self, offset: usize, bytes: &[u8]) -> Result<(), Error> {
        let end = offset.checked_add(bytes.len()).ok_or(Error::OutOfBounds {
            offset,
            len: bytes.len(),
        })?;
        // (start, len) of every window of this domain, as client and as server.
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for b in self.client_bindings() {
            for w in b.windows.iter().chain(&b.oob_windows) {
                spans.push((w.0, w.2));
            }
        }
        for b in self.server_bindings() {
            for w in b.windows.iter().chain(&b.oob_windows) {
                if let Some(&start) = w.1.first() {
                    spans.push((start, w.2));
                }
            }
        }
        let ok = spans
            .iter()
            .any(|&(start, len)| offset >= start && end <= start.saturating_add(len));
        if !ok {
            return Err(Error::OutOfBounds {
                offset,
                len: bytes.len(),
            });
        }
        self.shared.replicas[0]
            .window_range()
            .write(offset, bytes)
            .ok_or(Error::OutOfBounds {
                offset,
                len: bytes.len(),
            })
    }

    /// Current size in bytes of replica 0's linear memory.
    pub fn memory_size(&self) -> Result<usize, Error> {
        lock_or_reenter_size(&self.shared.replicas[0], Duration::from_secs(5)).ok_or(Error::Busy)
    }

    /// [`Domain::memory_size`] without waiting: `None` while another thread's call runs in
    /// replica 0 (for gauges, which keep their last value rather than wait for a call).
    pub fn memory_size_now(&self) -> Option<usize> {
        lock_or_reenter_size(&self.shared.replicas[0], Duration::ZERO)
    }

    /// Bytes of linear memory all the domain's replicas hold (each replica's memories, the
    /// host-grown pages its windows are mapped over included), read without entering any
    /// of them; 0 once the domain is terminated (its memory goes back to the system then).
    pub fn memory_bytes(&self) -> usize {
        self.shared.memory_bytes()
    }

    /// What the domain's bindings hold now, counted against its quotas.
    pub fn usage(&self) -> crate::quota::Usage {
        self.shared.core.account.used().into()
    }

    /// The domain's quotas.
    pub fn quotas(&self) -> crate::quota::Quotas {
        self.shared.core.account.limits
    }

    /// The bindings this domain holds as client.
    pub fn client_bindings(&self) -> Vec<super::binding::BindingInfo> {
        let ties = lock(&self.shared.core.ties);
        ties.client.iter().map(|b| b.info()).collect()
    }

    /// The live bindings to this domain as server.
    pub fn server_bindings(&self) -> Vec<super::binding::BindingInfo> {
        let ties = lock(&self.shared.core.ties);
        ties.server
            .iter()
            .filter_map(|b| b.upgrade())
            .filter(|b| b.is_live())
            .map(|b| b.info())
            .collect()
    }
}

/// The size of `r`'s memory: 0 once it went back to the system (its domain was
/// terminated).
fn lock_or_reenter_size(r: &Replica, wait: Duration) -> Option<usize> {
    if r.is_released() {
        return Some(0);
    }
    r.with_store(wait, |ctx| r.memory.data_size(&ctx)).ok()
}

/// An export of a domain looked up once, to call repeatedly (benchmarks, drivers).
pub struct DomainFunc<P, R> {
    pub(crate) domain: Domain,
    pub(crate) funcs: Vec<TypedFunc<P, R>>,
    pub(crate) wait: Duration,
}

/// Locks the first free replica, starting from one chosen by the calling thread so that
/// threads spread over replicas; waits (bounded) when all are busy.
pub(crate) fn pick_replica(
    replicas: &[Replica],
    wait: Duration,
) -> Option<(usize, Guard<'_, Store<DomainData>>)> {
    let n = replicas.len();
    let start = if n == 1 { 0 } else { thread_slot() % n };
    for k in 0..n {
        let i = (start + k) % n;
        if let Some(g) = replicas[i].store.try_lock() {
            return Some((i, g));
        }
    }
    replicas[start].wait_store(wait).map(|g| (start, g))
}

/// A small per-thread number used to spread threads over replicas.
pub(crate) fn thread_slot() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|s| *s)
}
