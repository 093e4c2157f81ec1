//! Component domains: WebAssembly components (wit-bindgen, componentize-py, …) as protection
//! domains beside the core-module domains, under the same clerk and failure rules.
//!
//! * **One Store per domain.** A trap anywhere in a component poisons its whole Store ("cannot
//!   enter component instance"), so every component domain has a Store of its own, behind its
//!   own lock, with its own limits: linear memory, instances and tables through
//!   [`wasmtime::StoreLimits`] (counting the memory held, [`MeteredLimits`]), optional fuel (per call), and the per-call deadline through epoch
//!   interruption, like core domains.
//! * **WASI as capabilities.** A domain gets WASI p2 only as [`WasiGrants`] say: preopened
//!   directories (read-only or read-write), environment variables, arguments, standard
//!   output and error (discarded, inherited or captured), socket addresses. Nothing granted,
//!   nothing reachable.
//! * **Exports through the clerk.** [`Kernel::export_component`] registers an exported
//!   interface under its WIT name, after checking every function against the WIT the kernel
//!   knows; a mismatch is refused with the function and the reason.
//! * **Imports bound at instantiation.** Each non-WASI import of a component is bound, when
//!   the domain is created, to the domain exporting that interface (the one registered under
//!   the interface's name, or the export named in [`ComponentOptions::bind`]); the import's
//!   types are checked against the export's. The server may be a component or a core
//!   (A-stack) domain, and core clients may bind to a component's export: see `mixed`. Each
//!   import is a Binding Object ([`ComponentBindingInfo`]): checked on every call, revoked
//!   when either side is terminated. A call runs on the calling thread: the import's host
//!   function locks the server's Store and calls its export (the thread migrates; nothing is
//!   queued).
//!
//! **Full trust.** Imports named in [`ComponentOptions::trust_fully`] are not bound through
//! the kernel: their server is composed into the client when it is created (`fuse`), the
//! component analog of the direct-linked path.
//!
//! **Failure.** A server that traps, passes its deadline or runs out of fuel is *dead*: its
//! Store is poisoned, so every later call to it fails at once, without entering it, until the
//! embedder [restarts](Kernel::restart_component) it; bindings to it survive and reach the
//! fresh instance. The client is never trapped by its server's failure (that would poison the
//! client's Store too). Instead the failed call returns, and what the client sees depends on
//! whether the WIT function has an error channel:
//!
//! * a function returning `result<T, E>` returns `err(e)`, where `e` is E's case named
//!   `call-failed` when E is a variant or enum that has one (its payload the failure's text if
//!   it is a string, else its zero value), the failure's text when E is `string`, and E's zero
//!   value otherwise;
//! * any other function returns the zero value of its result type (0, false, "", empty list,
//!   `none`, the first case of an enum or variant, no flags; for a resource, a handle with
//!   nothing behind it, which every later call fails as stale).
//!
//! Either way the kernel records the failure in the client domain
//! ([`ComponentDomain::take_failures`]), so the embedder, which supervises its plugins, learns
//! of it, and the client domain stays usable. Interfaces that must tell failure from a real
//! answer should have an error channel.
//!
//! A call back into a domain that is itself waiting in an outgoing call (A→B→A) is not
//! re-entered (its Store is held by the waiting call): it waits for the deadline and fails
//! as `ServerBusy`.
//!
//! **Resources.** Between two component domains, functions pass resource handles (`own<T>`,
//! `borrow<T>`; constructors, methods and static functions are functions like the others):
//! the client's import defines each resource of the interface as a host resource of the
//! binding, and the binding keeps a table from the client's handles to the server's (see
//! `handles`). Such functions take the dynamic path, their handles translated in both
//! directions; both sides' types are checked against the kernel's WIT (the resource types of
//! two components never compare equal). The client dropping a handle drops the server's;
//! handles into a restarted or terminated server are stale and calls with them fail (as
//! above, `StaleBinding`); the handles of a client that goes away are dropped in its
//! servers. A core (A-stack) domain can not carry handles: an interface with resources has
//! no plan, so it gets no core face and a component's import of it can not bind to a core
//! export (`mixed`). Futures and streams can not cross component domains yet; an import
//! whose functions carry them is refused at bind time, naming the function.

pub mod codec;
mod fuse;
mod handles;
pub(crate) mod lent;
mod limits;
pub(crate) mod mixed;
mod shapes;
mod typecheck;
mod typed;
mod wasi;

pub use crate::state::kernel::EngineKind;
pub use limits::MeteredLimits;
pub use wasi::{CapturedOutput, Preopen, Stdio, WasiGrants};

use crate::error::{Error, Fault, boxed};
use crate::state::domain::SETUP_WAIT;
use crate::state::kernel::{Kernel, KernelInner};
use crate::state::reset::{Isolation, current_request};
use crate::sync::{lock, wait_lock};
use lrpc_abi::Status;
use lrpc_lock::TryLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use wasmtime::component::types::{ComponentFunc, ComponentItem, Type};
use wasmtime::component::{Component, Func, Instance, Linker, ResourceTable, ResourceType, Val};
use wasmtime::{Engine, Store, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Whether `wasm` is a component binary (as opposed to a core module): the preamble's
/// version field says so (`\0asm`, then layer 1).
pub fn is_component(wasm: &[u8]) -> bool {
    wasm.len() >= 8 && wasm[..4] == *b"\0asm" && wasm[6..8] == [1, 0]
}

/// The limits of one component domain. `None`: no limit beyond the kernel's.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ComponentLimits {
    /// Bytes of each linear memory; growing past it fails (the guest's allocator sees an
    /// out-of-memory and, for Rust guests, traps: the call fails, the host does not).
    pub memory: Option<usize>,
    /// Fuel (roughly, wasm instructions) of each call into the domain; running out traps
    /// with `OutOfFuel`. Domains with fuel run on an engine that meters it.
    pub fuel: Option<u64>,
    /// Core instances in the domain's Store (a component is made of several).
    pub instances: Option<usize>,
    /// Tables in the domain's Store.
    pub tables: Option<usize>,
    /// How long one call into the domain may run; `None`: the kernel's default deadline.
    pub deadline: Option<Duration>,
}

setters!(ComponentLimits {
    with_memory => memory: Option<usize>,
    with_fuel => fuel: Option<u64>,
    with_instances => instances: Option<usize>,
    with_tables => tables: Option<usize>,
    with_deadline => deadline: Option<Duration>,
});

/// Options of a new component domain.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ComponentOptions {
    /// The WASI capabilities the domain is granted (none by default).
    pub wasi: WasiGrants,
    /// Its limits.
    pub limits: ComponentLimits,
    /// Imports bound to a named export rather than to the one registered under the
    /// interface's own name, as `(interface, export name)`.
    pub bind: Vec<(String, String)>,
    /// Imports whose servers this domain trusts fully (`leaky+unprotected`): each server is
    /// composed into this component when it is created (wasmtime's fused adapters, no host
    /// crossing). The copy of the server lives in this domain's Store with its own state, and
    /// a trap in it kills this domain too.
    pub trust_fully: Vec<String>,
    /// What the domain keeps from one request to the next: with [`Isolation::Request`], each
    /// request meets a fresh instance, and a fault replaces the instance instead of killing
    /// the domain (see [`Isolation`]).
    pub isolation: Isolation,
}

setters!(ComponentOptions {
    with_wasi => wasi: WasiGrants,
    with_limits => limits: ComponentLimits,
    with_bind => bind: Vec<(String, String)>,
    with_trust_fully => trust_fully: Vec<String>,
    with_isolation => isolation: Isolation,
});

/// A call a component domain made through one of its imports that failed in the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailure {
    /// The import's interface.
    pub interface: String,
    /// The function called.
    pub function: String,
    /// Why it failed (`ServerTrapped`, `DeadlineExceeded`, `ServerTerminated`, `ServerBusy`,
    /// `StaleBinding`).
    pub status: Status,
}

/// What the embedder can see of one binding of a component import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentBindingInfo {
    /// The imported interface.
    pub interface: String,
    /// The export name it is bound to.
    pub export: String,
    /// The server domain's name.
    pub server: String,
    /// Whether the binding is live (not revoked).
    pub live: bool,
}

/// The Store data of a component domain.
pub(crate) struct ComponentData {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: limits::MeteredLimits,
    deadline_tick: u64,
    ticks: Arc<crate::tick::Clock>,
    terminated: Arc<AtomicBool>,
    failures: Vec<CallFailure>,
    /// Threads waiting for this Store (`Shared::waiting`), for the tick hook (`pace`).
    waiting: Arc<AtomicU32>,
}

impl WasiView for ComponentData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Failures kept per domain until the embedder takes them.
const MAX_FAILURES: usize = 256;

/// Records a failed call a domain made through an import (the latest [`MAX_FAILURES`]).
/// The Store is held by another call for longer than the deadline allows.
#[cold]
#[inline(never)]
fn busy() -> Error {
    Error::Busy
}

fn record_failure(data: &mut ComponentData, interface: &str, function: &str, status: Status) {
    let failures = &mut data.failures;
    if failures.len() >= MAX_FAILURES {
        failures.remove(0);
    }
    failures.push(CallFailure {
        interface: interface.to_string(),
        function: function.to_string(),
        status,
    });
}

/// An instance of the domain: its Store, the functions it exports, the bindings of its
/// imports.
struct Live {
    store: Store<ComponentData>,
    funcs: Vec<Func>,
    /// The typed handles of `funcs` the typed path made (a `TypedFunc<P, R>` each), so that
    /// their types are checked once, not on every call.
    typed: Vec<Option<Box<dyn std::any::Any + Send + Sync>>>,
    bindings: Vec<Arc<ImportBinding>>,
    /// Imports bound to core domains' exports (mixed pairs).
    to_core: Vec<Arc<mixed::CoreBinding>>,
    /// The instance's number, unique in the process: resource handles into it carry it
    /// (see `handles`), so that handles into an earlier instance are known stale.
    instance: u64,
    /// An isolated domain's instance: whether a call entered it, and the request of the
    /// last call that did (0: none known).
    used: bool,
    request: u64,
}

/// The next [`Live::instance`].
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

impl Live {
    /// Drops, in each server, the handles this (revoked) instance held through its bindings:
    /// the client is gone, so nothing will drop them otherwise. Called without the client's
    /// Store lock held (each drop takes its server's).
    fn release_handles(&self) {
        for b in &self.bindings {
            for (server, instance) in b.handles.take_all() {
                b.server.drop_handle(server, instance);
            }
        }
    }

    /// Revokes the bindings of this instance's imports.
    fn revoke(&self) {
        for b in &self.bindings {
            b.revoked.store(true, Ordering::Release);
        }
        for b in &self.to_core {
            b.revoked.store(true, Ordering::Release);
        }
    }
}

/// A component domain, shared by its handles, its exports and the bindings to it.
pub(crate) struct Shared {
    name: String,
    /// The kernel and this domain itself, for an isolated domain's fresh instances.
    kernel: Weak<KernelInner>,
    me: Weak<Shared>,
    /// The binary the domain was created from (servers composed into fully trusting
    /// clients are taken from here).
    wasm: Arc<[u8]>,
    /// Imports served by a composed copy of their server.
    fused: Vec<String>,
    component: Component,
    engine: Engine,
    ticks: Arc<crate::tick::Clock>,
    options: ComponentOptions,
    /// `(interface, function)` of every exported function, by index into `Live::funcs`.
    export_funcs: Vec<(String, String)>,
    live: TryLock<Option<Live>>,
    /// Threads waiting for `live` (`Shared::wait_live`).
    waiting: Arc<AtomicU32>,
    /// Why the domain is dead (its Store is poisoned), if it is.
    dead: Mutex<Option<Fault>>,
    /// Whether `dead` holds a fault: the call path's check, without taking the mutex.
    is_dead: AtomicBool,
    terminated: Arc<AtomicBool>,
    deadline: Duration,
    deadline_ticks: u64,
    output: wasi::Output,
    server_bindings: Mutex<Vec<Weak<ImportBinding>>>,
    exports: Mutex<Vec<String>>,
    /// Its linked, type-checked form, when it imports only WASI (see `instantiate`).
    pre: std::sync::OnceLock<wasmtime::component::InstancePre<ComponentData>>,
    /// The core faces of its exports (see `mixed`).
    faces: Mutex<Vec<Arc<crate::state::domain::DomainShared>>>,
    /// Bytes of linear memory its current Store holds (see `limits`).
    memory: Arc<std::sync::atomic::AtomicUsize>,
}

impl Shared {
    fn index(&self, interface: &str, function: &str) -> Option<usize> {
        self.export_funcs
            .iter()
            .position(|(i, f)| i == interface && f == function)
    }

    fn is_dead(&self) -> Option<Fault> {
        if !self.is_dead.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.dead).clone()
    }

    fn set_dead(&self, fault: Option<Fault>) {
        let mut d = lock(&self.dead);
        self.is_dead.store(fault.is_some(), Ordering::Release);
        *d = fault;
    }

    /// Runs the exported function `idx` with the domain's deadline and fuel; a fault kills
    /// the domain.
    fn run(&self, idx: usize, params: &[Val], results: &mut [Val]) -> Result<(), Error> {
        self.enter(idx, |live, func| {
            Ok(func.call(&mut live.store, params, results))
        })
    }

    /// [`Shared::run`] with static types (see `typed`).
    fn run_typed<P, R>(&self, idx: usize, params: P) -> Result<R, Error>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower + 'static,
        R: wasmtime::component::ComponentNamedList + wasmtime::component::Lift + 'static,
    {
        self.run_typed_by::<P, R, R>(idx, |f, store| f.call(store, params))
    }

    /// Runs `call` with function `idx` typed as taking `P` and returning `R` (checked once,
    /// then kept). `P` may hold `'static` borrows: a typed function is covariant in its
    /// parameters, so `call` may pass borrows that live shorter.
    fn run_typed_by<P, R, T>(
        &self,
        idx: usize,
        call: impl FnOnce(
            wasmtime::component::TypedFunc<P, R>,
            &mut Store<ComponentData>,
        ) -> wasmtime::Result<T>,
    ) -> Result<T, Error>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower + 'static,
        R: wasmtime::component::ComponentNamedList + wasmtime::component::Lift + 'static,
    {
        type Typed<P, R> = wasmtime::component::TypedFunc<P, R>;
        self.enter(idx, |live, func| {
            let slot = &mut live.typed[idx];
            let typed = match slot.as_ref().and_then(|t| t.downcast_ref::<Typed<P, R>>()) {
                Some(t) => *t,
                None => {
                    let t = func.typed::<P, R>(&live.store).map_err(|e| Error::Guest {
                        what: format!("calling into `{}`", self.name),
                        reason: format!("{e:#}"),
                    })?;
                    *slot = Some(Box::new(t));
                    t
                }
            };
            Ok(call(typed, &mut live.store))
        })
    }

    /// [`Shared::run`] with resource handles among the parameters: `instances` are the
    /// server instances they came from. Answers the instance that ran the call, or `None`
    /// (without entering) when a handle is from another instance (stale).
    fn run_handles(
        &self,
        idx: usize,
        params: &[Val],
        results: &mut [Val],
        instances: &[u64],
    ) -> Result<Option<u64>, Error> {
        self.enter(idx, |live, func| {
            if instances.iter().any(|i| *i != live.instance) {
                return Ok(Ok(None));
            }
            Ok(func
                .call(&mut live.store, params, results)
                .map(|()| Some(live.instance)))
        })
    }

    /// Drops a handle of the server's instance `instance` that a client no longer holds,
    /// under the Store lock and deadline of a call. Nothing to do when that instance is gone
    /// or the domain dead or terminated (its handles went with the Store); a fault while the
    /// server's destructor runs kills the server, as a call's would.
    fn drop_handle(&self, handle: wasmtime::component::ResourceAny, instance: u64) {
        if self.terminated.load(Ordering::Acquire) || self.is_dead().is_some() {
            return;
        }
        let Some(mut guard) = self.wait_live(self.deadline) else {
            return;
        };
        let Some(live) = guard.as_mut() else {
            return;
        };
        if live.instance != instance {
            return;
        }
        self.arm(&mut live.store);
        let r = handle.resource_drop(&mut live.store);
        live.store.data_mut().deadline_tick = 0;
        drop(guard);
        if let Err(e) = r {
            self.set_dead(Some(Fault::classify(&e)));
        }
    }

    /// Locks the Store, waiting for at most `wait` (counted as a waiter meanwhile: see
    /// `ComponentData::waiting`).
    #[inline]
    fn wait_live(&self, wait: Duration) -> Option<lrpc_lock::Guard<'_, Option<Live>>> {
        wait_lock(&self.live, wait, &self.waiting)
    }

    /// Enters the Store to run the exported function `idx` through `f`, with the domain's
    /// deadline and fuel armed. `f` answers an error of its own (the call did not start) or
    /// the call's outcome, whose error is a fault that kills the domain.
    ///
    /// This is the whole kernel side of a call between component domains, so its common
    /// case is kept short: one look at each of the two flags that refuse a call, the Store
    /// taken with one compare-exchange (`wait_lock` reads the clock only when another call
    /// holds it), and every refusal built out of line.
    #[inline]
    fn enter<T>(
        &self,
        idx: usize,
        f: impl FnOnce(&mut Live, Func) -> Result<wasmtime::Result<T>, Error>,
    ) -> Result<T, Error> {
        if (self.terminated.load(Ordering::Acquire) || self.is_dead.load(Ordering::Acquire))
            && let Some(e) = self.refusal()
        {
            return Err(e);
        }
        // `ok_or_else`: an `Error` built eagerly would be dropped on every successful call.
        let mut guard = self.wait_live(self.deadline).ok_or_else(busy)?;
        let Some(live) = guard.as_mut() else {
            return Err(self.gone());
        };
        let isolated = self.options.isolation == Isolation::Request;
        // Instances an isolated domain replaced: before the call, and after a fault.
        let mut before = None;
        let mut faulted = None;
        if isolated {
            before = self.enter_request(live)?;
        }
        // Taken after `enter_request`: a function belongs to the instance it came from.
        let Some(func) = live.funcs.get(idx).copied() else {
            return Err(self.no_function(idx));
        };
        self.arm(&mut live.store);
        let r = f(live, func);
        live.store.data_mut().deadline_tick = 0;
        let r = match r {
            // An isolated domain lives on past a fault: the instance that faulted goes.
            Ok(Err(e)) if isolated && !self.terminated.load(Ordering::Acquire) => {
                faulted = self.replace(live);
                Err(Error::Fault(Fault::classify(&e)))
            }
            Ok(Err(e)) => Err(self.faulted(&e)),
            Ok(Ok(v)) => Ok(v),
            Err(e) => Err(e),
        };
        drop(guard);
        for old in [before, faulted].into_iter().flatten() {
            old.revoke();
            old.release_handles();
        }
        r
    }

    /// Before a call enters an isolated domain's instance: a fresh instance in its place
    /// when a call of another request (or of none known) entered it before. Returns the
    /// instance replaced, whose bindings the caller revokes once the Store lock is let go.
    #[inline]
    fn enter_request(&self, live: &mut Live) -> Result<Option<Live>, Error> {
        let request = current_request();
        let old = if live.used && (request == 0 || request != live.request) {
            Some(self.replace_or_fail(live)?)
        } else {
            None
        };
        live.used = true;
        live.request = request;
        Ok(old)
    }

    /// Puts a fresh instance in `live`'s place; the old one.
    #[cold]
    #[inline(never)]
    fn replace_or_fail(&self, live: &mut Live) -> Result<Live, Error> {
        let (Some(kernel), Some(me)) = (self.kernel.upgrade(), self.me.upgrade()) else {
            return Err(self.gone());
        };
        let fresh = instantiate(&kernel, &me)?;
        Ok(std::mem::replace(live, fresh))
    }

    /// [`Shared::replace_or_fail`] after a fault: when no fresh instance can be made, the
    /// domain is dead (as any domain whose instance faulted).
    #[cold]
    #[inline(never)]
    fn replace(&self, live: &mut Live) -> Option<Live> {
        match self.replace_or_fail(live) {
            Ok(old) => Some(old),
            Err(e) => {
                self.set_dead(Some(Fault::Trapped {
                    trap: None,
                    message: format!("no fresh instance after a fault: {e}"),
                }));
                None
            }
        }
    }

    /// Why a call is refused when the domain is terminated or dead; `None` when it no
    /// longer is (restarted since the flag was read): the call goes ahead.
    #[cold]
    #[inline(never)]
    fn refusal(&self) -> Option<Error> {
        if self.terminated.load(Ordering::Acquire) {
            return Some(Error::Terminated(self.name.clone()));
        }
        self.is_dead().map(Error::Fault)
    }

    /// The domain has no instance (it was terminated).
    #[cold]
    #[inline(never)]
    fn gone(&self) -> Error {
        Error::Terminated(self.name.clone())
    }

    /// No exported function `idx`.
    #[cold]
    #[inline(never)]
    fn no_function(&self, idx: usize) -> Error {
        Error::Guest {
            what: format!("calling into `{}`", self.name),
            reason: format!("no exported function {idx}"),
        }
    }

    /// A call faulted: the domain is dead.
    #[cold]
    #[inline(never)]
    fn faulted(&self, e: &wasmtime::Error) -> Error {
        let fault = Fault::classify(e);
        self.set_dead(Some(fault.clone()));
        Error::Fault(fault)
    }

    /// Sets the deadline (and fuel) of a call about to enter the Store.
    fn arm(&self, store: &mut Store<ComponentData>) {
        let now = self.ticks.now();
        store.data_mut().deadline_tick = now.saturating_add(self.deadline_ticks);
        if let Some(fuel) = self.options.limits.fuel {
            // Only domains with a fuel limit live on the metering engine.
            let _ = store.set_fuel(fuel);
        }
    }
}

/// One import of a client domain bound to a server's export: the component Binding Object.
pub(crate) struct ImportBinding {
    interface: String,
    export: String,
    server: Arc<Shared>,
    revoked: AtomicBool,
    /// The resource handles the client holds into the server through this binding.
    handles: Arc<handles::Handles>,
}

impl ImportBinding {
    fn info(&self) -> ComponentBindingInfo {
        ComponentBindingInfo {
            interface: self.interface.clone(),
            export: self.export.clone(),
            server: self.server.name.clone(),
            live: !self.revoked.load(Ordering::Acquire),
        }
    }

    /// A call through the binding: checked, then run in the server on this thread.
    fn call(&self, idx: usize, params: &[Val], results: &mut [Val]) -> Result<(), Status> {
        self.checked(|server| server.run(idx, params, results))
    }

    /// [`ImportBinding::call`] with static types (see `typed`).
    fn call_typed<P, R>(&self, idx: usize, params: P) -> Result<R, Status>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower + 'static,
        R: wasmtime::component::ComponentNamedList + wasmtime::component::Lift + 'static,
    {
        self.checked(|server| server.run_typed(idx, params))
    }

    /// Runs `f` on the server if the binding is not revoked; its error as a status.
    #[inline]
    fn checked<T>(&self, f: impl FnOnce(&Shared) -> Result<T, Error>) -> Result<T, Status> {
        if self.revoked.load(Ordering::Acquire) {
            return Err(Status::StaleBinding);
        }
        f(&self.server).map_err(|e| e.status())
    }
}

/// One exported interface of a component domain, as the clerk keeps it.
pub(crate) struct ComponentExport {
    interface: String,
    server: Arc<Shared>,
    /// `(function, type, index into the server's functions)`.
    funcs: Vec<(String, ComponentFunc, usize)>,
    /// What core clients bind to (see `mixed`), when the interface has a plan.
    face: Option<Arc<crate::state::clerk::ExportEntry>>,
}

/// A component domain, as the embedder holds it. Cloning gives another handle to the same
/// domain.
#[derive(Clone)]
pub struct ComponentDomain {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ComponentDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentDomain")
            .field("name", &self.shared.name)
            .field("dead", &self.shared.is_dead())
            .field("terminated", &self.is_terminated())
            .finish()
    }
}

impl ComponentDomain {
    /// Bytes of linear memory the domain's instance holds (every memory of every core
    /// instance in it), read without entering its Store.
    pub fn memory_size(&self) -> usize {
        self.shared.memory.load(Ordering::Relaxed)
    }

    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Why the domain is dead (it trapped, passed its deadline or ran out of fuel, so its
    /// Store refuses entry), or `None` while it is alive. [`Kernel::restart_component`]
    /// brings a dead domain back.
    pub fn dead(&self) -> Option<Fault> {
        self.shared.is_dead()
    }

    /// Whether the domain has been terminated (withdrawn for good).
    pub fn is_terminated(&self) -> bool {
        self.shared.terminated.load(Ordering::Acquire)
    }

    /// The type of `function` of the exported `interface`, if the component exports it.
    pub fn function_type(
        &self,
        interface: &str,
        function: &str,
    ) -> Option<wasmtime::component::types::ComponentFunc> {
        let engine = &self.shared.engine;
        match self
            .shared
            .component
            .component_type()
            .get_export(engine, interface)?
            .ty
        {
            ComponentItem::ComponentInstance(i) => match i.get_export(engine, function)?.ty {
                ComponentItem::ComponentFunc(f) => Some(f),
                _ => None,
            },
            _ => None,
        }
    }

    /// Calls `function` of the exported `interface` with dynamically typed values, under the
    /// domain's deadline (and fuel). A fault kills the domain and is returned as
    /// [`Error::Fault`].
    pub fn call(&self, interface: &str, function: &str, params: &[Val]) -> Result<Vec<Val>, Error> {
        let idx = self
            .shared
            .index(interface, function)
            .ok_or_else(|| Error::NoSuchExport {
                domain: self.shared.name.clone(),
                export: format!("{interface}#{function}"),
                source: "the component exports no such function".into(),
            })?;
        let n = self
            .function_type(interface, function)
            .map_or(0, |f| f.results().len());
        let mut results = vec![Val::Bool(false); n];
        self.shared.run(idx, params, &mut results)?;
        Ok(results)
    }

    /// The failed calls this domain made through its imports since the last take (at most
    /// the latest 256).
    pub fn take_failures(&self) -> Vec<CallFailure> {
        match self.shared.wait_live(SETUP_WAIT) {
            Some(mut g) => g
                .as_mut()
                .map(|l| std::mem::take(&mut l.store.data_mut().failures))
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// The imports served by a copy of their server composed into this domain
    /// ([`ComponentOptions::trust_fully`]).
    pub fn fused(&self) -> &[String] {
        &self.shared.fused
    }

    /// The bindings of this domain's imports (those through the kernel).
    pub fn bindings(&self) -> Vec<ComponentBindingInfo> {
        match self.shared.wait_live(SETUP_WAIT) {
            Some(g) => g
                .as_ref()
                .map(|l| {
                    let core = l.to_core.iter().map(|b| ComponentBindingInfo {
                        interface: b.interface.clone(),
                        export: b.export.name.clone(),
                        server: b.export.server.core.name.clone(),
                        live: !b.revoked.load(Ordering::Acquire)
                            && !b.export.server.core.terminated.load(Ordering::Acquire),
                    });
                    l.bindings.iter().map(|b| b.info()).chain(core).collect()
                })
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// What the domain wrote to its standard output, when it is captured ([`Stdio::Capture`]).
    pub fn stdout(&self) -> Vec<u8> {
        self.shared.output.stdout.contents()
    }

    /// What the domain wrote to its standard error, when it is captured.
    pub fn stderr(&self) -> Vec<u8> {
        self.shared.output.stderr.contents()
    }
}

/// A domain of either kind, as [`Kernel::load`] creates it from a binary and as the
/// kernel's methods for both kinds ([`Kernel::export`], [`Kernel::terminate`]) take it
/// (from a `&Domain` or a `&ComponentDomain`).
#[derive(Debug, Clone)]
pub enum AnyDomain {
    /// A core module speaking the kernel's ABI.
    Core(crate::Domain),
    /// A component.
    Component(ComponentDomain),
}

impl From<&crate::Domain> for AnyDomain {
    fn from(d: &crate::Domain) -> AnyDomain {
        AnyDomain::Core(d.clone())
    }
}

impl From<&ComponentDomain> for AnyDomain {
    fn from(d: &ComponentDomain) -> AnyDomain {
        AnyDomain::Component(d.clone())
    }
}

impl From<&AnyDomain> for AnyDomain {
    fn from(d: &AnyDomain) -> AnyDomain {
        d.clone()
    }
}

impl Kernel {
    /// Creates a domain from a binary of either kind: a component becomes a component
    /// domain with `options`, a core module (binary or text) a core domain with the defaults.
    pub fn load(
        &self,
        name: &str,
        wasm: &[u8],
        options: ComponentOptions,
    ) -> Result<AnyDomain, Error> {
        if is_component(wasm) {
            self.component(name, wasm, options)
                .map(AnyDomain::Component)
        } else {
            self.domain(name, wasm).map(AnyDomain::Core)
        }
    }

    /// Creates a component domain: compiles the component, instantiates it in a Store of its
    /// own with the limits and WASI grants of `options`, and binds each of its non-WASI
    /// imports to the export of that interface (see [`ComponentOptions::bind`]).
    pub fn component(
        &self,
        name: &str,
        wasm: &[u8],
        options: ComponentOptions,
    ) -> Result<ComponentDomain, Error> {
        if !is_component(wasm) {
            return Err(Error::Compile {
                domain: name.to_string(),
                source: "not a component binary (a core module? use `Kernel::domain`)".into(),
            });
        }
        let inner = &self.inner;
        let (engine, ticks) = if options.limits.fuel.is_some() {
            (inner.fuel_engine()?.clone(), inner.ticks.clone())
        } else {
            (inner.engine.clone(), inner.ticks.clone())
        };
        let mut composed: Option<Vec<u8>> = None;
        for import in &options.trust_fully {
            let unbound = |reason: String| Error::Unbound {
                domain: name.to_string(),
                import: import.clone(),
                reason,
            };
            let export_name = options
                .bind
                .iter()
                .find(|(i, _)| i == import)
                .map_or(import.as_str(), |(_, e)| e.as_str());
            let export = inner
                .clerk
                .component::<ComponentExport>(export_name)
                .ok_or_else(|| unbound(format!("nothing is exported under `{export_name}`")))?;
            if export.interface != *import {
                return Err(unbound(format!(
                    "`{export_name}` serves `{}`",
                    export.interface
                )));
            }
            let client = composed.as_deref().unwrap_or(wasm);
            composed = Some(
                fuse::compose(client, &export.server.wasm, import)
                    .map_err(|r| unbound(format!("composing with its server: {r}")))?,
            );
        }
        let component = inner.compile_component(
            name,
            composed.as_deref().unwrap_or(wasm),
            if options.limits.fuel.is_some() {
                crate::state::kernel::EngineKind::Fuel
            } else {
                crate::state::kernel::EngineKind::Kernel
            },
        )?;
        let mut export_funcs = Vec::new();
        for (iface, item) in component.component_type().exports(&engine) {
            if let ComponentItem::ComponentInstance(i) = item.ty {
                for (f, fi) in i.exports(&engine) {
                    if matches!(fi.ty, ComponentItem::ComponentFunc(_)) {
                        export_funcs.push((iface.to_string(), f.to_string()));
                    }
                }
            }
        }
        let deadline = options.limits.deadline.unwrap_or(inner.config.deadline);
        let shared = Arc::new_cyclic(|me| Shared {
            name: name.to_string(),
            kernel: Arc::downgrade(inner),
            me: me.clone(),
            wasm: wasm.into(),
            fused: options.trust_fully.clone(),
            component,
            engine,
            ticks,
            deadline,
            deadline_ticks: inner.ticks_for(deadline),
            options,
            export_funcs,
            live: TryLock::new(None),
            dead: Mutex::new(None),
            is_dead: AtomicBool::new(false),
            terminated: Arc::new(AtomicBool::new(false)),
            waiting: Arc::new(AtomicU32::new(0)),
            output: Default::default(),
            server_bindings: Mutex::new(Vec::new()),
            exports: Mutex::new(Vec::new()),
            faces: Mutex::new(Vec::new()),
            pre: std::sync::OnceLock::new(),
            memory: Default::default(),
        });
        let live = instantiate(inner, &shared)?;
        *shared.wait_live(SETUP_WAIT).ok_or(Error::Busy)? = Some(live);
        Ok(ComponentDomain { shared })
    }

    /// Exports `interface` from a component domain under `name` (see [`Kernel::export_as`]).
    /// Every function of the interface's WIT (known to the kernel: its embedded WIT and
    /// [`Kernel::add_wit_dir`]) must be exported with the WIT's type, and nothing else; a
    /// mismatch is refused with [`Error::ComponentMismatch`].
    pub(crate) fn export_component_as(
        &self,
        server: &ComponentDomain,
        interface: &str,
        name: &str,
    ) -> Result<(), Error> {
        let shared = &server.shared;
        if server.is_terminated() {
            return Err(Error::Terminated(shared.name.clone()));
        }
        let mismatch = |function: &str, reason: String| Error::ComponentMismatch {
            domain: shared.name.clone(),
            interface: interface.to_string(),
            function: function.to_string(),
            reason,
        };
        let engine = &shared.engine;
        let ctype = shared.component.component_type();
        let Some(ComponentItem::ComponentInstance(inst)) =
            ctype.get_export(engine, interface).map(|e| e.ty)
        else {
            return Err(mismatch(
                "*",
                "the component does not export this interface".into(),
            ));
        };
        let mut have: HashMap<String, ComponentFunc> = HashMap::new();
        for (f, item) in inst.exports(engine) {
            if let ComponentItem::ComponentFunc(t) = item.ty {
                have.insert(f.to_string(), t);
            }
        }
        let checked = self.inner.with_wit(interface, |wit| {
            let resolve = wit.resolve();
            let id = typecheck::interface_id(resolve, interface)
                .ok_or_else(|| Error::UnknownInterface(interface.to_string()))?;
            let want = &resolve.interfaces[id].functions;
            for (fname, f) in want {
                let t = have
                    .get(fname.as_str())
                    .ok_or_else(|| mismatch(fname, "not exported".into()))?;
                typecheck::check_func(resolve, f, t).map_err(|r| mismatch(fname, r))?;
            }
            if let Some(extra) = have.keys().find(|f| !want.contains_key(f.as_str())) {
                return Err(mismatch(extra, "not in the WIT interface".into()));
            }
            Ok(())
        });
        checked.unwrap_or_else(|| Err(Error::UnknownInterface(interface.to_string())))?;
        let mut funcs = Vec::with_capacity(have.len());
        for (f, t) in have {
            let idx = shared
                .index(interface, &f)
                .ok_or_else(|| mismatch(&f, "no such exported function".into()))?;
            funcs.push((f, t, idx));
        }
        let face = mixed::face(&self.inner, shared, interface, name)?;
        self.inner.clerk.export_component(
            name,
            Arc::new(ComponentExport {
                interface: interface.to_string(),
                server: shared.clone(),
                funcs,
                face,
            }),
        )?;
        lock(&shared.exports).push(name.to_string());
        Ok(())
    }

    /// Brings a dead component domain back: a fresh instance in a fresh Store, its imports
    /// bound anew. Its exports and the bindings of its clients stay as they were, so clients
    /// reach the new instance without rebinding. Restarting a live domain replaces it too
    /// (its state is lost).
    pub fn restart_component(&self, domain: &ComponentDomain) -> Result<(), Error> {
        let shared = &domain.shared;
        if domain.is_terminated() {
            return Err(Error::Terminated(shared.name.clone()));
        }
        let mut guard = shared.wait_live(SETUP_WAIT).ok_or(Error::Busy)?;
        let live = instantiate(&self.inner, shared)?;
        let old = guard.replace(live);
        drop(guard);
        if let Some(old) = old {
            old.revoke();
            old.release_handles();
        }
        shared.set_dead(None);
        Ok(())
    }

    /// Terminates a component domain for good: withdraws its exports, revokes the bindings
    /// of its imports and those of its clients, interrupts code running in it at the next
    /// tick and drops its instance (see [`Kernel::terminate`]).
    pub(crate) fn terminate_component(&self, domain: &ComponentDomain) {
        let shared = &domain.shared;
        shared.terminated.store(true, Ordering::Release);
        let names = std::mem::take(&mut *lock(&shared.exports));
        self.inner.clerk.withdraw_components(&names);
        for b in lock(&shared.server_bindings).drain(..) {
            if let Some(b) = b.upgrade() {
                b.revoked.store(true, Ordering::Release);
            }
        }
        let faces = std::mem::take(&mut *lock(&shared.faces));
        mixed::terminate_faces(&self.inner, &faces);
        // Running code is interrupted at the next tick; then the Store can be dropped.
        let old = shared.wait_live(SETUP_WAIT).and_then(|mut g| g.take());
        if let Some(old) = old {
            old.revoke();
            old.release_handles();
        }
    }
}

/// A fresh instance of a domain in a fresh Store, its imports bound.
fn instantiate(kernel: &Arc<KernelInner>, shared: &Arc<Shared>) -> Result<Live, Error> {
    let fail = |source: crate::error::BoxError| Error::Instantiate {
        domain: shared.name.clone(),
        source,
    };
    let limits = &shared.options.limits;
    let mut lb = StoreLimitsBuilder::new();
    if let Some(m) = limits.memory {
        lb = lb.memory_size(m);
    }
    if let Some(n) = limits.instances {
        lb = lb.instances(n).memories(n);
    }
    if let Some(n) = limits.tables {
        lb = lb.tables(n);
    }
    let wasi = shared
        .options
        .wasi
        .build(&shared.output)
        .map_err(|e| fail(e.into()))?;
    // A fresh Store: its memories are counted from nothing.
    shared.memory.store(0, Ordering::Relaxed);
    let data = ComponentData {
        wasi,
        table: ResourceTable::new(),
        limits: limits::MeteredLimits::new(lb.build(), shared.memory.clone()),
        deadline_tick: 0,
        ticks: shared.ticks.clone(),
        terminated: shared.terminated.clone(),
        failures: Vec::new(),
        waiting: shared.waiting.clone(),
    };
    let mut store = Store::new(&shared.engine, data);
    store.limiter(|d| &mut d.limits);
    store.epoch_deadline_callback(|ctx| {
        let d = ctx.data();
        crate::pace::at_tick(
            &d.terminated,
            d.deadline_tick,
            d.ticks.at_tick(),
            &d.waiting,
        )
    });
    store.set_epoch_deadline(1);
    // A component that imports only WASI links the same way every time: its linked,
    // type-checked form is kept (an isolated domain instantiates once per request). One with
    // other imports binds them anew for each instance.
    let (pre, bindings, to_core) = match shared.pre.get() {
        Some(pre) => (pre.clone(), Vec::new(), Vec::new()),
        None => {
            let mut linker: Linker<ComponentData> = Linker::new(&shared.engine);
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| fail(boxed(e)))?;
            let (bindings, to_core) = bind_imports(kernel, shared, &mut linker)?;
            let pre = linker
                .instantiate_pre(&shared.component)
                .map_err(|e| fail(boxed(e)))?;
            if only_wasi(shared) {
                let _ = shared.pre.set(pre.clone());
            }
            (pre, bindings, to_core)
        }
    };
    shared.arm(&mut store);
    let instance = pre.instantiate(&mut store).map_err(|e| fail(boxed(e)))?;
    store.data_mut().deadline_tick = 0;
    let funcs =
        resolve_exports(&mut store, &instance, &shared.export_funcs).map_err(|e| fail(e.into()))?;
    Ok(Live {
        store,
        typed: funcs.iter().map(|_| None).collect(),
        funcs,
        bindings,
        to_core,
        instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
        used: false,
        request: 0,
    })
}

/// Whether every import of the domain's component is a WASI interface.
fn only_wasi(shared: &Shared) -> bool {
    shared
        .component
        .component_type()
        .imports(&shared.engine)
        .all(|(name, _)| name.starts_with("wasi:"))
}

fn resolve_exports(
    store: &mut Store<ComponentData>,
    instance: &Instance,
    names: &[(String, String)],
) -> Result<Vec<Func>, String> {
    let mut funcs = Vec::with_capacity(names.len());
    for (iface, f) in names {
        let parent = instance
            .get_export_index(&mut *store, None, iface)
            .ok_or_else(|| format!("no export {iface}"))?;
        let idx = instance
            .get_export_index(&mut *store, Some(&parent), f)
            .ok_or_else(|| format!("no export {iface}#{f}"))?;
        funcs.push(
            instance
                .get_func(&mut *store, idx)
                .ok_or_else(|| format!("{iface}#{f} is not a function"))?,
        );
    }
    Ok(funcs)
}

/// Whether a type holds a resource handle (`own` or `borrow`).
fn holds_handles(t: &Type) -> bool {
    holds(t, &|t| matches!(t, Type::Own(_) | Type::Borrow(_)))
}

/// Whether a type holds a future, a stream, an error context or a map: values the kernel
/// can not carry between two Stores yet.
fn holds_async(t: &Type) -> bool {
    holds(t, &|t| {
        matches!(
            t,
            Type::Future(_) | Type::Stream(_) | Type::ErrorContext | Type::Map(_)
        )
    })
}

/// Whether `t` or a type inside it is one `leaf` picks.
fn holds(t: &Type, leaf: &dyn Fn(&Type) -> bool) -> bool {
    if leaf(t) {
        return true;
    }
    let inner = |t: &Type| holds(t, leaf);
    match t {
        Type::List(l) => inner(&l.ty()),
        Type::FixedLengthList(l) => inner(&l.ty()),
        Type::Record(r) => r.fields().any(|f| inner(&f.ty)),
        Type::Tuple(t) => t.types().any(|t| inner(&t)),
        Type::Variant(v) => v.cases().any(|c| c.ty.as_ref().is_some_and(inner)),
        Type::Option(o) => inner(&o.ty()),
        Type::Result(r) => {
            r.ok().as_ref().is_some_and(inner) || r.err().as_ref().is_some_and(inner)
        }
        _ => false,
    }
}

/// Links the imported function `fname` (type `want`), whose values carry resource handles,
/// as a call through `binding` on the dynamic path, its handles translated by `handles`.
fn link_with_handles(
    li: &mut wasmtime::component::LinkerInstance<'_, ComponentData>,
    fname: &str,
    want: &ComponentFunc,
    binding: &Arc<ImportBinding>,
    idx: usize,
    handles: &Arc<handles::Handles>,
    interface: &str,
) -> wasmtime::Result<()> {
    let result_types: Vec<Type> = want.results().collect();
    let (b, h) = (binding.clone(), handles.clone());
    let (iface, func) = (interface.to_string(), fname.to_string());
    li.func_new(fname, move |mut ctx, _ty, params, results| {
        let outcome = (|| {
            let mut instances = Vec::new();
            let server_params = params
                .iter()
                .map(|v| h.to_server(&mut ctx, v, &mut instances))
                .collect::<Result<Vec<Val>, Status>>()?;
            let mut server_results = vec![Val::Bool(false); results.len()];
            let instance = b
                .checked(|server| {
                    server.run_handles(idx, &server_params, &mut server_results, &instances)
                })?
                .ok_or(Status::StaleBinding)?;
            for ((slot, v), t) in results.iter_mut().zip(server_results).zip(&result_types) {
                *slot = h.to_client(&mut ctx, v, t, instance)?;
            }
            Ok::<(), Status>(())
        })();
        let Err(status) = outcome else {
            return Ok(());
        };
        let text = format!("{iface}#{func}: {status:?}");
        for (slot, t) in results.iter_mut().zip(&result_types) {
            let mut handle = |t: &Type| h.failed_handle(&mut ctx, t);
            *slot = failed_value_with(t, &text, &mut handle)
                .ok_or_else(|| wasmtime::format_err!("{text}: no value to answer with"))?;
        }
        record_failure(ctx.data_mut(), &iface, &func, status);
        Ok(())
    })
}

/// The bindings of a domain's imports: to component domains, and to core domains.
type Bound = (Vec<Arc<ImportBinding>>, Vec<Arc<mixed::CoreBinding>>);

/// Binds every non-WASI import of the domain to its server's export, defining each
/// imported function in `linker` as a call through the binding.
fn bind_imports(
    kernel: &Arc<KernelInner>,
    shared: &Arc<Shared>,
    linker: &mut Linker<ComponentData>,
) -> Result<Bound, Error> {
    let engine = &shared.engine;
    let mut bindings = Vec::new();
    let mut to_core = Vec::new();
    for (import, item) in shared.component.component_type().imports(engine) {
        if import.starts_with("wasi:") {
            continue;
        }
        let unbound = |reason: String| Error::Unbound {
            domain: shared.name.clone(),
            import: import.to_string(),
            reason,
        };
        let ComponentItem::ComponentInstance(inst) = item.ty else {
            return Err(unbound(
                "only interface imports can be bound to other domains".into(),
            ));
        };
        let export_name = shared
            .options
            .bind
            .iter()
            .find(|(i, _)| i == import)
            .map_or(import, |(_, e)| e.as_str());
        let Some(export) = kernel.clerk.component::<ComponentExport>(export_name) else {
            // A core domain's export: a mixed pair.
            let core = kernel
                .clerk
                .get(export_name)
                .ok_or_else(|| unbound(format!("nothing is exported under `{export_name}`")))?;
            let mut li = linker
                .instance(import)
                .map_err(|e| unbound(format!("{e:#}")))?;
            to_core.push(
                mixed::bind_core(kernel, shared, import, &inst, core, &mut li).map_err(unbound)?,
            );
            continue;
        };
        if export.interface != import {
            return Err(unbound(format!(
                "`{export_name}` serves `{}`",
                export.interface
            )));
        }
        if Arc::ptr_eq(&export.server, shared) {
            return Err(unbound("a domain can not bind to itself".into()));
        }
        let mut resources = Vec::new();
        let mut funcs = Vec::new();
        for (name, item) in inst.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(f) => funcs.push((name, f)),
                ComponentItem::Resource(r) => resources.push((name.to_string(), r)),
                ComponentItem::Type(_) => {}
                _ => {
                    return Err(unbound(format!(
                        "`{name}`: only functions and resources can cross component domains"
                    )));
                }
            }
        }
        let handles = Arc::new(handles::Handles::new(resources));
        let binding = Arc::new(ImportBinding {
            interface: import.to_string(),
            export: export_name.to_string(),
            server: export.server.clone(),
            revoked: AtomicBool::new(false),
            handles: handles.clone(),
        });
        let mut li = linker
            .instance(import)
            .map_err(|e| unbound(format!("{e:#}")))?;
        for (rname, ty) in handles.kinds() {
            let (h, b) = (handles.clone(), binding.clone());
            li.resource(rname, ResourceType::host_dynamic(ty), move |_, rep| {
                // The client dropped its handle: drop the server's.
                if let Some((Some(server), instance)) = h.take(rep)
                    && !b.revoked.load(Ordering::Acquire)
                {
                    b.server.drop_handle(server, instance);
                }
                Ok(())
            })
            .map_err(|e| unbound(format!("`{rname}`: {e:#}")))?;
        }
        for (fname, want) in funcs {
            let (_, have, idx) = export
                .funcs
                .iter()
                .find(|(n, ..)| n == fname)
                .ok_or_else(|| unbound(format!("the server does not export `{fname}`")))?;
            if want.params().any(|(_, t)| holds_async(&t))
                || want.results().any(|t| holds_async(&t))
            {
                return Err(unbound(format!(
                    "`{fname}`: futures, streams and maps can not cross component domains yet"
                )));
            }
            let carries = want.params().any(|(_, t)| holds_handles(&t))
                || want.results().any(|t| holds_handles(&t));
            if carries {
                // Resource types differ between the two components; both sides are checked
                // against the kernel's WIT instead (the server's at export).
                let checked = kernel.with_wit(import, |wit| {
                    let resolve = wit.resolve();
                    let id = typecheck::interface_id(resolve, import)
                        .ok_or_else(|| "the interface is not in the kernel's WIT".to_string())?;
                    let f = resolve.interfaces[id]
                        .functions
                        .get(fname)
                        .ok_or_else(|| "not in the WIT interface".to_string())?;
                    typecheck::check_func(resolve, f, &want)
                });
                match checked {
                    Some(Ok(())) => {}
                    Some(Err(r)) => return Err(unbound(format!("`{fname}`: {r}"))),
                    None => {
                        return Err(unbound(format!(
                            "`{fname}` carries resources: the kernel needs the interface's WIT"
                        )));
                    }
                }
                link_with_handles(&mut li, fname, &want, &binding, *idx, &handles, import)
                    .map_err(|e| unbound(format!("`{fname}`: {e:#}")))?;
                continue;
            }
            let same = want
                .params()
                .map(|(_, t)| t)
                .eq(have.params().map(|(_, t)| t))
                && want.results().eq(have.results());
            if !same {
                return Err(unbound(format!("`{fname}` has another type in the server")));
            }
            let to = typed::ToComponent {
                binding: binding.clone(),
                idx: *idx,
                function: fname.to_string(),
            };
            let at = typed::Import {
                li: &mut li,
                name: fname,
                ty: &want,
            };
            if typed::link(at, to).map_err(|e| unbound(format!("`{fname}`: {e:#}")))? {
                continue;
            }
            let (b, idx, iface, func) =
                (binding.clone(), *idx, import.to_string(), fname.to_string());
            li.func_new(fname, move |mut ctx, ty, params, results| {
                match b.call(idx, params, results) {
                    Ok(()) => Ok(()),
                    Err(status) => {
                        let text = format!("{iface}#{func}: {status:?}");
                        for (slot, t) in results.iter_mut().zip(ty.results()) {
                            *slot = failed_value(&t, &text).ok_or_else(|| {
                                wasmtime::format_err!("{text}: no value to answer with")
                            })?;
                        }
                        record_failure(ctx.data_mut(), &iface, &func, status);
                        Ok(())
                    }
                }
            })
            .map_err(|e| unbound(format!("`{fname}`: {e:#}")))?;
        }
        let mut known = lock(&export.server.server_bindings);
        // An isolated client binds anew with each fresh instance: forget the bindings gone.
        known.retain(|b| b.strong_count() > 0);
        known.push(Arc::downgrade(&binding));
        bindings.push(binding);
    }
    Ok((bindings, to_core))
}

/// What a failed call answers (see the module's documentation): the error channel when the
/// result is a `result`, the zero value otherwise.
fn failed_value(t: &Type, text: &str) -> Option<Val> {
    failed_value_with(t, text, &mut |_| None)
}

/// A handle a failed call answers where its result holds one (see `handles`).
type HandleFor<'a> = dyn FnMut(&Type) -> Option<Val> + 'a;

/// [`failed_value`], with `handle` making the handles the value holds.
fn failed_value_with(t: &Type, text: &str, handle: &mut HandleFor<'_>) -> Option<Val> {
    match t {
        Type::Result(r) => {
            let err = match r.err() {
                None => None,
                Some(e) => Some(Box::new(error_value(&e, text, handle)?)),
            };
            Some(Val::Result(Err(err)))
        }
        other => zero(other, handle),
    }
}

fn error_value(t: &Type, text: &str, handle: &mut HandleFor<'_>) -> Option<Val> {
    match t {
        Type::String => Some(Val::String(text.to_string())),
        Type::Enum(e) if e.names().any(|n| n == "call-failed") => {
            Some(Val::Enum("call-failed".into()))
        }
        Type::Variant(v) => match v.cases().find(|c| c.name == "call-failed") {
            Some(c) => {
                let payload = match c.ty {
                    None => None,
                    Some(Type::String) => Some(Box::new(Val::String(text.to_string()))),
                    Some(p) => Some(Box::new(zero(&p, handle)?)),
                };
                Some(Val::Variant("call-failed".into(), payload))
            }
            None => zero(t, handle),
        },
        other => zero(other, handle),
    }
}

/// The zero value of a type; handles come from `handle`; `None` for futures and streams.
fn zero(t: &Type, handle: &mut HandleFor<'_>) -> Option<Val> {
    Some(match t {
        Type::Bool => Val::Bool(false),
        Type::S8 => Val::S8(0),
        Type::U8 => Val::U8(0),
        Type::S16 => Val::S16(0),
        Type::U16 => Val::U16(0),
        Type::S32 => Val::S32(0),
        Type::U32 => Val::U32(0),
        Type::S64 => Val::S64(0),
        Type::U64 => Val::U64(0),
        Type::Float32 => Val::Float32(0.0),
        Type::Float64 => Val::Float64(0.0),
        Type::Char => Val::Char('\0'),
        Type::String => Val::String(String::new()),
        Type::List(_) => Val::List(Vec::new()),
        Type::Record(r) => Val::Record(
            r.fields()
                .map(|f| Some((f.name.to_string(), zero(&f.ty, handle)?)))
                .collect::<Option<_>>()?,
        ),
        Type::Tuple(t) => Val::Tuple(t.types().map(|t| zero(&t, handle)).collect::<Option<_>>()?),
        Type::Variant(v) => {
            let c = v.cases().next()?;
            let payload = match c.ty {
                None => None,
                Some(p) => Some(Box::new(zero(&p, handle)?)),
            };
            Val::Variant(c.name.to_string(), payload)
        }
        Type::Enum(e) => Val::Enum(e.names().next()?.to_string()),
        Type::Option(_) => Val::Option(None),
        Type::Result(r) => Val::Result(Ok(match r.ok() {
            None => None,
            Some(t) => Some(Box::new(zero(&t, handle)?)),
        })),
        Type::Flags(_) => Val::Flags(Vec::new()),
        Type::Map(_) => Val::Map(Vec::new()),
        Type::Own(_) | Type::Borrow(_) => return handle(t),
        Type::FixedLengthList(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return None;
        }
    })
}
