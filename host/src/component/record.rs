//! The component domain record: [`Shared`], what a domain's handles, its exports and the
//! bindings to it share; [`Live`], its current instance (Store, exported functions, the
//! bindings of its imports); and [`ComponentData`], the data of that Store. How a call
//! enters the Store is in `enter`.

use super::binding::ImportBinding;
use super::failure::CallFailure;
use super::limits::MeteredLimits;
use super::options::ComponentOptions;
use super::{mixed, wasi};
use crate::error::Fault;
use crate::state::kernel::KernelInner;
use crate::sync::{lock, wait_lock};
use lrpc_lock::TryLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use wasmtime::component::{Component, Func, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The Store data of a component domain.
pub(crate) struct ComponentData {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limits: MeteredLimits,
    pub(super) deadline_tick: u64,
    pub(super) ticks: Arc<crate::tick::Clock>,
    pub(super) terminated: Arc<AtomicBool>,
    pub(super) failures: Vec<CallFailure>,
    /// Threads waiting for this Store (`Shared::waiting`), for the tick hook (`pace`).
    pub(super) waiting: Arc<AtomicU32>,
}

impl WasiView for ComponentData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// An instance of the domain: its Store, the functions it exports, the bindings of its
/// imports.
pub(super) struct Live {
    pub(super) store: Store<ComponentData>,
    pub(super) funcs: Vec<Func>,
    /// The typed handles of `funcs` the typed path made (a `TypedFunc<P, R>` each), so that
    /// their types are checked once, not on every call.
    pub(super) typed: Vec<Option<Box<dyn std::any::Any + Send + Sync>>>,
    pub(super) bindings: Vec<Arc<ImportBinding>>,
    /// Imports bound to core domains' exports (mixed pairs).
    pub(super) to_core: Vec<Arc<mixed::CoreBinding>>,
    /// The instance's number, unique in the process: resource handles into it carry it
    /// (see `handles`), so that handles into an earlier instance are known stale.
    pub(super) instance: u64,
    /// An isolated domain's instance: whether a call entered it, and the request of the
    /// last call that did (0: none known).
    pub(super) used: bool,
    pub(super) request: u64,
}

impl Live {
    /// Drops, in each server, the handles this (revoked) instance held through its bindings:
    /// the client is gone, so nothing will drop them otherwise. Called without the client's
    /// Store lock held (each drop takes its server's).
    pub(super) fn release_handles(&self) {
        for b in &self.bindings {
            for (server, instance) in b.handles.take_all() {
                b.server.drop_handle(server, instance);
            }
        }
    }

    /// Revokes the bindings of this instance's imports.
    pub(super) fn revoke(&self) {
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
    pub(super) name: String,
    /// The kernel and this domain itself, for an isolated domain's fresh instances.
    pub(super) kernel: Weak<KernelInner>,
    pub(super) me: Weak<Shared>,
    /// The binary the domain was created from (servers composed into fully trusting
    /// clients are taken from here).
    pub(super) wasm: Arc<[u8]>,
    /// Imports served by a composed copy of their server.
    pub(super) fused: Vec<String>,
    pub(super) component: Component,
    pub(super) engine: Engine,
    pub(super) ticks: Arc<crate::tick::Clock>,
    pub(super) options: ComponentOptions,
    /// `(interface, function)` of every exported function, by index into `Live::funcs`.
    pub(super) export_funcs: Vec<(String, String)>,
    pub(super) live: TryLock<Option<Live>>,
    /// Threads waiting for `live` (`Shared::wait_live`).
    pub(super) waiting: Arc<AtomicU32>,
    /// Why the domain is dead (its Store is poisoned), if it is.
    pub(super) dead: Mutex<Option<Fault>>,
    /// Whether `dead` holds a fault: the call path's check, without taking the mutex.
    pub(super) is_dead: AtomicBool,
    pub(super) terminated: Arc<AtomicBool>,
    pub(super) deadline: Duration,
    pub(super) deadline_ticks: u64,
    pub(super) output: wasi::Output,
    pub(super) server_bindings: Mutex<Vec<Weak<ImportBinding>>>,
    pub(super) exports: Mutex<Vec<String>>,
    /// Its linked, type-checked form, when it imports only WASI (see `instantiate`).
    pub(super) pre: std::sync::OnceLock<wasmtime::component::InstancePre<ComponentData>>,
    /// The core stand-ins of its exports (see `mixed`).
    pub(super) stand_ins: Mutex<Vec<Arc<crate::state::domain::DomainShared>>>,
    /// Bytes of linear memory its current Store holds (see `limits`).
    pub(super) memory: Arc<std::sync::atomic::AtomicUsize>,
}

impl Shared {
    pub(super) fn index(&self, interface: &str, function: &str) -> Option<usize> {
        self.export_funcs
            .iter()
            .position(|(i, f)| i == interface && f == function)
    }

    pub(super) fn is_dead(&self) -> Option<Fault> {
        if !self.is_dead.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.dead).clone()
    }

    pub(super) fn set_dead(&self, fault: Option<Fault>) {
        let mut d = lock(&self.dead);
        self.is_dead.store(fault.is_some(), Ordering::Release);
        *d = fault;
    }

    /// Locks the Store, waiting for at most `wait` (counted as a waiter meanwhile: see
    /// `ComponentData::waiting`).
    #[inline]
    pub(super) fn wait_live(&self, wait: Duration) -> Option<lrpc_lock::Guard<'_, Option<Live>>> {
        wait_lock(&self.live, wait, &self.waiting)
    }
}
