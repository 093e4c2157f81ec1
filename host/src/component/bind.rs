//! Binding a new instance's imports: each non-WASI import of a component domain is bound,
//! when an instance is made, to the export serving its interface — a component domain's
//! (a Binding Object per import, a host resource per resource of the interface and a host
//! function per imported function, on the typed path when `typed` knows its shape, else on
//! the dynamic one) or a core domain's (`mixed`). What can not cross between two Stores
//! (futures, streams) is refused here, naming the function.

use super::binding::ImportBinding;
use super::export::ComponentExport;
use super::failure::{failed_value, failed_value_with, record_failure};
use super::handles::Handles;
use super::record::{ComponentData, Shared};
use super::{mixed, typecheck, typed};
use crate::error::Error;
use crate::state::kernel::KernelInner;
use crate::sync::lock;
use lrpc_abi::Status;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use wasmtime::Engine;
use wasmtime::component::types::{ComponentFunc, ComponentInstance, ComponentItem, Type};
use wasmtime::component::{Linker, LinkerInstance, ResourceType, Val};

/// The bindings of a domain's imports: to component domains, and to core domains.
pub(super) type Bound = (Vec<Arc<ImportBinding>>, Vec<Arc<mixed::CoreBinding>>);

/// Binds every non-WASI import of the domain to its server's export, defining each
/// imported function in `linker` as a call through the binding.
pub(super) fn bind_imports(
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
        let binding = bind_component(kernel, shared, linker, import, &inst, export_name, &export)
            .map_err(unbound)?;
        bindings.push(binding);
    }
    Ok((bindings, to_core))
}

/// Binds the import `import` (of type `inst`) to `export`, a component domain's export
/// under `export_name`: a Binding Object, defined in `linker` as a host resource per
/// resource of the interface and a host function per imported function, and made known to
/// the server (which revokes it when it is terminated). The reason when it can not.
fn bind_component(
    kernel: &KernelInner,
    shared: &Arc<Shared>,
    linker: &mut Linker<ComponentData>,
    import: &str,
    inst: &ComponentInstance,
    export_name: &str,
    export: &ComponentExport,
) -> Result<Arc<ImportBinding>, String> {
    if export.interface != import {
        return Err(format!("`{export_name}` serves `{}`", export.interface));
    }
    if Arc::ptr_eq(&export.server, shared) {
        return Err("a domain can not bind to itself".into());
    }
    let (resources, funcs) = interface_items(inst, &shared.engine)?;
    let binding = Arc::new(ImportBinding {
        interface: import.to_string(),
        export: export_name.to_string(),
        server: export.server.clone(),
        revoked: AtomicBool::new(false),
        handles: Arc::new(Handles::new(resources)),
    });
    let mut li = linker.instance(import).map_err(|e| format!("{e:#}"))?;
    link_resources(&mut li, &binding)?;
    for (fname, want) in funcs {
        link_function(kernel, &mut li, fname, &want, export, &binding)?;
    }
    let mut known = lock(&export.server.server_bindings);
    // An isolated client binds anew with each fresh instance: forget the bindings gone.
    known.retain(|b| b.strong_count() > 0);
    known.push(Arc::downgrade(&binding));
    Ok(binding)
}

/// An imported interface's resources (by name) and functions (name and type).
type Items<'a> = (Vec<(String, ResourceType)>, Vec<(&'a str, ComponentFunc)>);

/// The resources and functions of an imported interface; anything else can not cross
/// component domains.
fn interface_items<'a>(
    inst: &'a ComponentInstance,
    engine: &'a Engine,
) -> Result<Items<'a>, String> {
    let mut resources = Vec::new();
    let mut funcs = Vec::new();
    for (name, item) in inst.exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(f) => funcs.push((name, f)),
            ComponentItem::Resource(r) => resources.push((name.to_string(), r)),
            ComponentItem::Type(_) => {}
            _ => {
                return Err(format!(
                    "`{name}`: only functions and resources can cross component domains"
                ));
            }
        }
    }
    Ok((resources, funcs))
}

/// Defines each resource of the binding's interface in `li` as a host resource of the
/// binding: the client dropping its handle drops the server's.
fn link_resources(
    li: &mut LinkerInstance<'_, ComponentData>,
    binding: &Arc<ImportBinding>,
) -> Result<(), String> {
    let handles = &binding.handles;
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
        .map_err(|e| format!("`{rname}`: {e:#}"))?;
    }
    Ok(())
}

/// Links the imported function `fname` (type `want`) as a call through `binding` to the
/// server's function of that name in `export`: with its handles translated when its values
/// carry resources, on the typed path when `typed` carries its signature, else with
/// dynamically typed values. The reason when it can not.
fn link_function(
    kernel: &KernelInner,
    li: &mut LinkerInstance<'_, ComponentData>,
    fname: &str,
    want: &ComponentFunc,
    export: &ComponentExport,
    binding: &Arc<ImportBinding>,
) -> Result<(), String> {
    let (_, have, idx) = export
        .funcs
        .iter()
        .find(|(n, ..)| n == fname)
        .ok_or_else(|| format!("the server does not export `{fname}`"))?;
    if want.params().any(|(_, t)| holds_async(&t)) || want.results().any(|t| holds_async(&t)) {
        return Err(format!(
            "`{fname}`: futures, streams and maps can not cross component domains yet"
        ));
    }
    let carries =
        want.params().any(|(_, t)| holds_handles(&t)) || want.results().any(|t| holds_handles(&t));
    if carries {
        check_with_wit(kernel, &binding.interface, fname, want)?;
        let (handles, interface) = (&binding.handles, &binding.interface);
        return link_with_handles(li, fname, want, binding, *idx, handles, interface)
            .map_err(|e| format!("`{fname}`: {e:#}"));
    }
    let same = want
        .params()
        .map(|(_, t)| t)
        .eq(have.params().map(|(_, t)| t))
        && want.results().eq(have.results());
    if !same {
        return Err(format!("`{fname}` has another type in the server"));
    }
    let to = typed::ToComponent {
        binding: binding.clone(),
        idx: *idx,
        function: fname.to_string(),
    };
    let at = typed::Import {
        li: &mut *li,
        name: fname,
        ty: want,
    };
    if typed::link(at, to).map_err(|e| format!("`{fname}`: {e:#}"))? {
        return Ok(());
    }
    link_dynamic(li, fname, binding, *idx).map_err(|e| format!("`{fname}`: {e:#}"))
}

/// Checks the imported function `fname` (type `want`) of `interface`, which carries
/// resources, against the kernel's WIT: resource types differ between the two components,
/// so both sides are checked against the kernel's WIT instead (the server's at export).
fn check_with_wit(
    kernel: &KernelInner,
    interface: &str,
    fname: &str,
    want: &ComponentFunc,
) -> Result<(), String> {
    let checked = kernel.with_wit(interface, |wit| {
        let resolve = wit.resolve();
        let id = typecheck::interface_id(resolve, interface)
            .ok_or_else(|| "the interface is not in the kernel's WIT".to_string())?;
        let f = resolve.interfaces[id]
            .functions
            .get(fname)
            .ok_or_else(|| "not in the WIT interface".to_string())?;
        typecheck::check_func(resolve, f, want)
    });
    match checked {
        Some(Ok(())) => Ok(()),
        Some(Err(r)) => Err(format!("`{fname}`: {r}")),
        None => Err(format!(
            "`{fname}` carries resources: the kernel needs the interface's WIT"
        )),
    }
}

/// Links the imported function `fname` as a call through `binding` with dynamically typed
/// values: a failed call answers what [`failed_value`] makes and is recorded in the client.
fn link_dynamic(
    li: &mut LinkerInstance<'_, ComponentData>,
    fname: &str,
    binding: &Arc<ImportBinding>,
    idx: usize,
) -> wasmtime::Result<()> {
    let (b, iface, func) = (
        binding.clone(),
        binding.interface.clone(),
        fname.to_string(),
    );
    li.func_new(fname, move |mut ctx, ty, params, results| {
        match b.call(idx, params, results) {
            Ok(()) => Ok(()),
            Err(status) => {
                let text = format!("{iface}#{func}: {status:?}");
                for (slot, t) in results.iter_mut().zip(ty.results()) {
                    *slot = failed_value(&t, &text)
                        .ok_or_else(|| wasmtime::format_err!("{text}: no value to answer with"))?;
                }
                record_failure(ctx.data_mut(), &iface, &func, status);
                Ok(())
            }
        }
    })
}

/// Links the imported function `fname` (type `want`), whose values carry resource handles,
/// as a call through `binding` on the dynamic path, its handles translated by `handles`.
fn link_with_handles(
    li: &mut LinkerInstance<'_, ComponentData>,
    fname: &str,
    want: &ComponentFunc,
    binding: &Arc<ImportBinding>,
    idx: usize,
    handles: &Arc<Handles>,
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

/// Whether a type holds a resource handle (`own` or `borrow`).
pub(super) fn holds_handles(t: &Type) -> bool {
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
