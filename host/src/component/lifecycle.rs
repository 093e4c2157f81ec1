//! A component domain's life: created from a binary (`Kernel::load`,
//! `Kernel::component`, with the servers of fully trusted imports composed in), restarted
//! after a fault, and terminated for good.

use super::domain::{AnyDomain, ComponentDomain};
use super::export::ComponentExport;
use super::instantiate::instantiate;
use super::options::ComponentOptions;
use super::record::Shared;
use super::{fuse, is_component, mixed};
use crate::error::Error;
use crate::state::domain::SETUP_WAIT;
use crate::state::kernel::{EngineKind, Kernel, KernelInner};
use crate::sync::lock;
use lrpc_lock::TryLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

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
        let composed = compose_trusted(inner, name, wasm, &options)?;
        let component = inner.compile_component(
            name,
            composed.as_deref().unwrap_or(wasm),
            if options.limits.fuel.is_some() {
                EngineKind::Fuel
            } else {
                EngineKind::Kernel
            },
        )?;
        let export_funcs = exported_functions(&component, &engine);
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
            stand_ins: Mutex::new(Vec::new()),
            pre: std::sync::OnceLock::new(),
            memory: Default::default(),
        });
        let live = instantiate(inner, &shared)?;
        *shared.wait_live(SETUP_WAIT).ok_or(Error::Busy)? = Some(live);
        Ok(ComponentDomain { shared })
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
        let stand_ins = std::mem::take(&mut *lock(&shared.stand_ins));
        mixed::terminate_stand_ins(&self.inner, &stand_ins);
        // Running code is interrupted at the next tick; then the Store can be dropped.
        let old = shared.wait_live(SETUP_WAIT).and_then(|mut g| g.take());
        if let Some(old) = old {
            old.revoke();
            old.release_handles();
        }
    }
}

/// The client `wasm` with the server of each of its fully trusted imports
/// ([`ComponentOptions::trust_fully`]) composed into it, one after the other; `None` when it
/// trusts none.
fn compose_trusted(
    inner: &KernelInner,
    name: &str,
    wasm: &[u8],
    options: &ComponentOptions,
) -> Result<Option<Vec<u8>>, Error> {
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
    Ok(composed)
}

/// `(interface, function)` of every function the component exports (by index, the
/// domain's `Shared::export_funcs`).
fn exported_functions(component: &Component, engine: &Engine) -> Vec<(String, String)> {
    let mut export_funcs = Vec::new();
    for (iface, item) in component.component_type().exports(engine) {
        if let ComponentItem::ComponentInstance(i) = item.ty {
            for (f, fi) in i.exports(engine) {
                if matches!(fi.ty, ComponentItem::ComponentFunc(_)) {
                    export_funcs.push((iface.to_string(), f.to_string()));
                }
            }
        }
    }
    export_funcs
}
