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

use super::binding::{BindingInfo, RevokeReason};
use super::records::{Binding, KernelInner};
use super::reset;
use super::window::WindowSpace;
use crate::astack::MemoryRange;
use crate::error::Error;
use crate::ext::Extensions;
use crate::sync::lock;
use lrpc_lock::TryLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use wasmtime::{
    Module, Store, StoreLimits, StoreLimitsBuilder, TypedFunc, WasmParams, WasmResults,
};

pub(crate) use super::records::{Close, DomainCore, DomainData, DomainShared, Replica, ReplicaKey};
pub(crate) use super::replica::{pick_replica, thread_slot};

/// How long setup operations (export, export lookup) wait for a busy replica.
pub(crate) const SETUP_WAIT: Duration = Duration::from_secs(30);

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
            b.revoke_with(RevokeReason::ClientTerminated, Some(self));
        }
    }
}

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
        reset::snapshot(&mut store, &r, &names.globals, &names.tables).map_err(|e| {
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
    pub fn client_bindings(&self) -> Vec<BindingInfo> {
        let ties = lock(&self.shared.core.ties);
        ties.client.iter().map(|b| b.info()).collect()
    }

    /// The live bindings to this domain as server.
    pub fn server_bindings(&self) -> Vec<BindingInfo> {
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
