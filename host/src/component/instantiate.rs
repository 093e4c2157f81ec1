//! A fresh instance of a component domain: a fresh Store with the domain's limits, WASI
//! grants, deadline hook and fuel, its imports bound (`bind`) or its linked form reused,
//! and its exported functions looked up.

use super::bind::bind_imports;
use super::limits::MeteredLimits;
use super::record::{ComponentData, Live, Shared};
use crate::error::{Error, boxed};
use crate::state::kernel::KernelInner;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use wasmtime::component::{Func, Instance, Linker, ResourceTable};
use wasmtime::{Store, StoreLimitsBuilder};

/// The next [`Live::instance`].
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// A fresh instance of a domain in a fresh Store, its imports bound.
pub(super) fn instantiate(kernel: &Arc<KernelInner>, shared: &Arc<Shared>) -> Result<Live, Error> {
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
        limits: MeteredLimits::new(lb.build(), shared.memory.clone()),
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
