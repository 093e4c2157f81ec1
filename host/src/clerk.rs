//! The clerk (LRPC 3.1): the registry of exported interfaces, by name.
//!
//! A server domain exports a WIT interface under a name (by default the interface's own
//! name, e.g. `lrpc:bench/bench`). At export time the clerk builds the procedure descriptor
//! list from the WIT (per procedure: entry stub, A-stack size and count) and checks that the
//! module really has each entry with the right type; binding then needs no further checks
//! of the server.

use crate::domain::{DomainShared, SETUP_WAIT};
use crate::error::Error;
use crate::mailbox::Mailbox;
use crate::sync::lock;
use lrpc_presentation::{InterfacePlan, SidePresentation};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use wasmtime::TypedFunc;

/// The core type of an entry stub: `(astack, astack_cap, oob, oob_cap, borrow) -> status`.
pub(crate) type EntryFunc = TypedFunc<(i32, i32, i32, i32, i32), i32>;

/// How a server domain runs the calls made to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Serving {
    /// LRPC: the calling thread migrates into the server (the default).
    #[default]
    Migrate,
    /// Thread-per-domain message passing: the server runs on a thread of its own and calls
    /// travel as messages carrying copies of the A-stack (the baseline LRPC compared with).
    OwnThread,
}

/// Options of one export.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// How the server runs calls.
    pub serving: Serving,
    /// How long one call may run in the server before it is interrupted and the server
    /// terminated (LRPC's "captured thread"). `None`: the kernel's default.
    pub deadline: Option<Duration>,
    /// The server side's presentation (see [`crate::Kernel::presentation`]); `None`: the
    /// default presentation.
    pub presentation: Option<SidePresentation>,
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
    pub detour: Option<Detour>,
}

/// The other ways than migration a call reaches an export's server.
pub(crate) enum Detour {
    /// The server thread's queue, when it serves on a thread of its own.
    Mailbox(Mailbox),
    /// The component domain behind the export, when `server` is its core face (a mixed
    /// pair: the kernel translates each call, see `component::mixed`).
    Component(crate::component::mixed::Target),
    /// A server on another machine (see `remote`): the kernel hands each call to the
    /// transport on the calling thread.
    Remote(Arc<dyn crate::remote::RemoteTarget>),
}

/// The registry.
#[derive(Default)]
pub(crate) struct Clerk {
    map: RwLock<HashMap<String, Arc<ExportEntry>>>,
    /// Interfaces exported by component domains (one namespace with `map`).
    components: RwLock<HashMap<String, Arc<crate::component::ComponentExport>>>,
}

impl Clerk {
    pub fn get(&self, name: &str) -> Option<Arc<ExportEntry>> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        v.extend(
            self.components
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned(),
        );
        v.sort();
        v
    }

    /// Registers an export, resolving and type-checking its entries in every replica.
    pub fn export(
        &self,
        name: &str,
        plan: InterfacePlan,
        server: &Arc<DomainShared>,
        deadline: Duration,
        presentation: SidePresentation,
        serving: Serving,
    ) -> Result<(), Error> {
        let mut entries = Vec::with_capacity(server.replicas.len());
        for r in server.replicas.iter() {
            let mut store = r.wait_store(SETUP_WAIT).ok_or(Error::Busy)?;
            let mut funcs = Vec::with_capacity(plan.procs.len());
            for p in &plan.procs {
                let f = r
                    .instance
                    .get_typed_func::<(i32, i32, i32, i32, i32), i32>(&mut *store, &p.entry)
                    .map_err(|e| Error::NotImplemented {
                        domain: server.core.name.clone(),
                        interface: plan.name.clone(),
                        entry: p.entry.clone(),
                        source: crate::error::boxed(e),
                    })?;
                funcs.push(f);
            }
            entries.push(funcs.into_boxed_slice());
        }
        let detour = match serving {
            Serving::Migrate => None,
            Serving::OwnThread => Some(Detour::Mailbox(
                Mailbox::start(name, server, entries[0].to_vec()).map_err(Error::Thread)?,
            )),
        };
        self.insert(Arc::new(ExportEntry {
            name: name.to_string(),
            plan,
            server: server.clone(),
            entries: entries.into_boxed_slice(),
            deadline,
            presentation,
            detour,
        }))
    }

    /// Registers an export under its name, in its server's book so that terminating the
    /// server withdraws it.
    pub fn insert(&self, entry: Arc<ExportEntry>) -> Result<(), Error> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(&entry.name) || self.component(&entry.name).is_some() {
            return Err(Error::NameTaken(entry.name.clone()));
        }
        lock(&entry.server.core.book)
            .exports
            .push(entry.name.clone());
        map.insert(entry.name.clone(), entry);
        Ok(())
    }

    /// Withdraws every export of a domain.
    pub fn withdraw(&self, server: &DomainShared) {
        let names = std::mem::take(&mut lock(&server.core.book).exports);
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        for n in names {
            map.remove(&n);
        }
    }

    /// A component domain's export by name.
    pub fn component(&self, name: &str) -> Option<Arc<crate::component::ComponentExport>> {
        self.components
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Registers a component domain's export under `name`.
    pub fn export_component(
        &self,
        name: &str,
        entry: Arc<crate::component::ComponentExport>,
    ) -> Result<(), Error> {
        let core = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut map = self.components.write().unwrap_or_else(|e| e.into_inner());
        if core.contains_key(name) || map.contains_key(name) {
            return Err(Error::NameTaken(name.to_string()));
        }
        map.insert(name.to_string(), entry);
        Ok(())
    }

    /// Withdraws component exports by name.
    pub fn withdraw_components(&self, names: &[String]) {
        let mut map = self.components.write().unwrap_or_else(|e| e.into_inner());
        for n in names {
            map.remove(n);
        }
    }

    /// Drops every export.
    pub fn clear(&self) -> Vec<Arc<ExportEntry>> {
        self.components
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.drain().map(|(_, v)| v).collect()
    }
}
