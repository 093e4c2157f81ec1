//! The records that refer to each other, in one file: a domain ([`DomainShared`], its
//! [`DomainCore`] and [`Ties`]) and its replicas ([`Replica`], each with its store's
//! [`DomainData`]), bindings ([`Binding`], a client's [`ClientBinding`]), exports
//! ([`ExportEntry`], the [`Clerk`]'s registry, a [`Relay`] for calls that do not migrate)
//! and the kernel's own record ([`KernelInner`]).
//!
//! A replica's store data holds its client bindings and its kernel, a binding holds its
//! export and both domains, a domain's ties list its bindings, the kernel's table lists the
//! domains: the types form one circle, so they are defined together here. What they do is
//! defined above them, in the files named after them (`domain`, `binding`, `place`,
//! `clerk`, `kernel`, ...), which re-export the records they act on; the records they hold
//! that refer to none of these (settings, window space, fresh state) are below.

use super::config::{CodeCache, KernelConfig};
use super::fresh::Fresh;
use super::window::{DirectWindow, Mappings, WindowSpace};
use crate::astack::ProcStacks;
use crate::ext::Extensions;
use crate::quota::{Account, Charge};
use crate::slot::Slot;
use crate::transport::RemoteTarget;
use lrpc_abi::Status;
use lrpc_lock::TryLock;
use lrpc_presentation::{Combination, InterfacePlan, SidePresentation, Wit};
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;
use wasmtime::{Caller, Engine, Instance, Linker, Memory, Module, Store, TypedFunc};

/// Identifies one replica (one `Store`) of one domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ReplicaKey {
    pub domain: u16,
    pub replica: u16,
}

/// The per-`Store` data of a replica.
pub struct DomainData {
    pub(crate) core: Arc<DomainCore>,
    pub(crate) replica: u16,
    pub(crate) kernel: Weak<KernelInner>,
    /// Bindings this replica holds as client, indexed by handle slot.
    pub(crate) bindings: Vec<Slot<ClientBinding>>,
    /// Bindings unbound while a call on them was still in flight (see `linkage::Pinned`).
    pub(crate) retired: Vec<ClientBinding>,
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
    pub(crate) fresh: Option<Box<Fresh>>,
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
    pub(super) base: usize,
    /// The replica's window space and the windows waiting to be unmapped.
    pub windows: WindowSpace,
    /// Threads waiting for `store` (shared with the store's `DomainData`).
    pub(super) waiting: Arc<AtomicU32>,
    /// Set once the replica's memory went back to the system after its domain was
    /// terminated ([`DomainShared::release_memory`]).
    pub(super) released: AtomicBool,
}

/// A domain: its replicas and shared state.
pub(crate) struct DomainShared {
    pub core: Arc<DomainCore>,
    pub replicas: Box<[Replica]>,
    /// The compiled module (direct-linked clients instantiate their own copy of it).
    pub module: Module,
}

/// A client's view of one live binding.
pub(crate) struct ClientBinding {
    pub binding: Arc<Binding>,
    pub procs: Box<[ProcStacks]>,
}

/// A procedure's masks of `in` arguments the server reads in place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Masks {
    /// On a call that does not lend.
    pub borrow: i32,
    /// On a call that lends.
    pub lend: i32,
}

/// A binding between one client replica and a server domain.
pub(crate) struct Binding {
    pub handle: u64,
    /// The combination signature of both sides' presentations.
    pub combination: Combination,
    /// Per procedure, the borrow mask passed to the server's entry, and the mask passed
    /// instead when the call lends its arguments (see [`Binding::lends`]); side by side, so
    /// that a call reads one slot.
    pub masks: Box<[Masks]>,
    /// Whether the server can reach the client through bindings, as `binding::GRAPH`
    /// generation `reach >> 1` found it (bit 0: it can). Generation 0 is never current.
    pub(super) reach: AtomicU64,
    pub export: Arc<ExportEntry>,
    pub server: Arc<DomainShared>,
    pub client: Weak<DomainShared>,
    pub client_key: ReplicaKey,
    pub state: AtomicU8,
    pub deadline: Duration,
    pub deadline_ticks: u64,
    /// The segments this binding owns and where each is mapped (see `place`).
    pub(crate) mappings: Mutex<Mappings>,
    /// Where the A-stacks are mapped into a direct-linked server copy (in the client's store).
    pub(crate) direct: Mutex<Option<DirectWindow>>,
    /// The client domain's quota account, and what this binding has charged to it.
    pub(super) account: Arc<Account>,
    pub(super) charged: Mutex<Charge>,
}

/// A binding pinned for the duration of a call without touching its reference count.
///
/// The call path reads the binding of every call; cloning its `Arc` would cost two atomic
/// read-modify-writes per call (measured: a large share of a null call). Instead the client
/// replica's binding slot keeps the `Arc` alive while any A-stack of the binding is busy: the
/// `unbind` import moves a slot with busy A-stacks to the replica's retired list rather than
/// dropping it, and a retired binding is dropped only once its last call released its
/// A-stack. A `Pinned` is created from the slot when the call marks its A-stack busy and is
/// used only until the call releases it. Only `linkage` (where the unsafe code is fenced)
/// makes one and reads the binding through it.
#[derive(Clone, Copy)]
pub(crate) struct Pinned(pub(super) *const Binding);

/// The core type of an entry stub: `(astack, astack_cap, oob, oob_cap, borrow) -> status`.
pub(crate) type EntryFunc = TypedFunc<(i32, i32, i32, i32, i32), i32>;

/// The arguments of a server's entry stub for one call (see [`EntryFunc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryArgs {
    /// The A-stack's address in the server replica.
    pub astack: i32,
    /// The A-stack's size.
    pub astack_cap: i32,
    /// The `in` out-of-band segment's address in the server replica (`u32::MAX` while it is
    /// not mapped there yet; 0 when there is none).
    pub oob: i32,
    /// The `in` segment's capacity (0: none).
    pub oob_cap: i32,
    /// Which `in` arguments the server reads in place (the procedure's borrow mask).
    pub borrow: i32,
}

impl EntryArgs {
    /// The arguments in the order the entry stub takes them.
    #[inline(always)]
    pub(crate) fn params(self) -> (i32, i32, i32, i32, i32) {
        (
            self.astack,
            self.astack_cap,
            self.oob,
            self.oob_cap,
            self.borrow,
        )
    }
}

/// One exported interface: the procedure descriptor list and the entries per replica.
pub(crate) struct ExportEntry {
    /// The name clients bind under.
    pub name: String,
    pub plan: InterfacePlan,
    pub server: Arc<DomainShared>,
    /// `entries[replica][proc]`.
    pub entries: Box<[Box<[EntryFunc]>]>,
    pub deadline: Duration,
    /// The server's presentation.
    pub presentation: SidePresentation,
    /// How calls reach the server when they do not migrate into its replicas: `None` on
    /// the call path's common case, so it is one test there.
    pub relay: Option<Box<dyn Relay>>,
}

/// A call on its way to a server that it does not migrate into (see [`Relay`]).
pub(crate) struct RelayCall {
    /// The calling replica.
    pub client_key: ReplicaKey,
    /// The binding the call travels on.
    pub binding: Pinned,
    /// The A-stack's address in the client replica.
    pub client_astack: u32,
    /// The A-stack's size.
    pub size: u32,
    /// The A-stack's index among the procedure's.
    pub index: u32,
    /// The procedure.
    pub proc: u32,
    /// The entry's arguments in the server's first replica.
    pub first: EntryArgs,
}

/// How the kernel relays a call to an export's server that the calling thread does not
/// migrate into: to the server's own thread (`mailbox`), the component domain behind a core
/// stand-in (`component::mixed`), or a server on another machine (`transport`). Each is
/// implemented beside the call path (`imports`).
pub(crate) trait Relay: Send + Sync {
    /// Makes the call from `caller` and says how it went.
    fn call(&self, caller: &mut Caller<'_, DomainData>, call: &RelayCall) -> Status;

    /// Whether the kernel translates each call for a server that is not a core domain here
    /// (a component domain or a remote server), rather than running a core entry stub.
    fn translates(&self) -> bool;

    /// The transport, when the server is on another machine (MultiRPC sends its remote
    /// members' calls through it at once).
    fn remote(&self) -> Option<&Arc<dyn RemoteTarget>> {
        None
    }
}

/// The registry.
#[derive(Default)]
pub(crate) struct Clerk {
    pub(super) map: RwLock<HashMap<String, Arc<ExportEntry>>>,
    /// Interfaces exported by component domains (one namespace with `map`), as the
    /// component module's records.
    pub(super) components: RwLock<HashMap<String, Arc<dyn Any + Send + Sync>>>,
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
    pub(super) fueled: OnceLock<Result<Engine, String>>,
    /// The pooled engine ([`KernelInner::pooled_engine`]), made on first use (ticked by
    /// `ticker` too).
    pub(super) pooled: OnceLock<Result<Engine, String>>,
    /// The pooled engine with component-model concurrency
    /// ([`KernelInner::pooled_concurrent_engine`]), made on first use (ticked by `ticker` too).
    pub(super) pooled_concurrent: OnceLock<Result<Engine, String>>,
    /// The tables features keep for the whole kernel (the channel processors' registry),
    /// each the feature's own type.
    pub features: Mutex<Extensions>,
    pub wit: RwLock<Vec<Wit>>,
    pub(super) domains: Mutex<DomainTable>,
    /// Compiled code by content: a restart or reload of the same bytes compiles nothing.
    pub code: Mutex<CodeCache>,
    /// Advances the engines' epochs and counts `ticks`.
    pub ticker: crate::tick::Ticker,
}

#[derive(Default)]
pub(super) struct DomainTable {
    pub(super) entries: Vec<DomainEntry>,
}

/// One entry of the domain table, indexed by domain id. An entry is reserved while its
/// domain is being created, so that two domains created at once on different threads never
/// get the same id (their replicas' keys would collide, and bindings would be placed in the
/// wrong memory).
#[derive(Default)]
pub(super) enum DomainEntry {
    #[default]
    Free,
    Reserved,
    Live(Weak<DomainShared>),
}
