//! The component domain as the embedder holds it ([`ComponentDomain`]: calls, failures,
//! bindings, captured output), and a domain of either kind ([`AnyDomain`]).

use super::binding::ComponentBindingInfo;
use super::failure::CallFailure;
use super::record::Shared;
use crate::error::{Error, Fault};
use crate::state::domain::SETUP_WAIT;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use wasmtime::component::Val;
use wasmtime::component::types::ComponentItem;

/// A component domain, as the embedder holds it. Cloning gives another handle to the same
/// domain.
#[derive(Clone)]
pub struct ComponentDomain {
    pub(super) shared: Arc<Shared>,
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
    /// Store refuses entry), or `None` while it is alive.
    /// [`Kernel::restart_component`](crate::Kernel::restart_component) brings a dead domain
    /// back.
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
    /// ([`ComponentOptions::trust_fully`](super::ComponentOptions::trust_fully)).
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

    /// What the domain wrote to its standard output, when it is captured
    /// ([`Stdio::Capture`](super::Stdio::Capture)).
    pub fn stdout(&self) -> Vec<u8> {
        self.shared.output.stdout.contents()
    }

    /// What the domain wrote to its standard error, when it is captured.
    pub fn stderr(&self) -> Vec<u8> {
        self.shared.output.stderr.contents()
    }
}

/// A domain of either kind, as [`Kernel::load`](crate::Kernel::load) creates it from a
/// binary and as the kernel's methods for both kinds
/// ([`Kernel::export`](crate::Kernel::export), [`Kernel::terminate`](crate::Kernel::terminate))
/// take it (from a `&Domain` or a `&ComponentDomain`).
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
