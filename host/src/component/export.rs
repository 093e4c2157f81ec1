//! Exporting an interface of a component domain through the clerk: every function checked
//! against the kernel's WIT, and the record the clerk keeps ([`ComponentExport`]).

use super::domain::ComponentDomain;
use super::record::Shared;
use super::{mixed, typecheck};
use crate::error::Error;
use crate::state::kernel::Kernel;
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::Arc;
use wasmtime::component::types::{ComponentFunc, ComponentItem};

/// One exported interface of a component domain, as the clerk keeps it.
pub(crate) struct ComponentExport {
    pub(super) interface: String,
    pub(super) server: Arc<Shared>,
    /// `(function, type, index into the server's functions)`.
    pub(super) funcs: Vec<(String, ComponentFunc, usize)>,
    /// What core clients bind to (see `mixed`), when the interface has a plan.
    pub(super) stand_in: Option<Arc<crate::state::clerk::ExportEntry>>,
}

impl Kernel {
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
        let stand_in = mixed::stand_in(&self.inner, shared, interface, name)?;
        self.inner.clerk.export_component(
            name,
            Arc::new(ComponentExport {
                interface: interface.to_string(),
                server: shared.clone(),
                funcs,
                stand_in,
            }),
        )?;
        lock(&shared.exports).push(name.to_string());
        Ok(())
    }
}
