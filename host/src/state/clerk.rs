//! The clerk (LRPC 3.1): the registry of exported interfaces, by name.
//!
//! A server domain exports a WIT interface under a name (by default the interface's own
//! name, e.g. `lrpc:bench/bench`). At export time the clerk builds the procedure descriptor
//! list from the WIT (per procedure: entry stub, A-stack size and count) and checks that the
//! module really has each entry with the right type; binding then needs no further checks
//! of the server.

use super::domain::{DomainData, DomainShared};
use super::linkage::{Pinned, ReplicaKey};
use crate::error::Error;
use crate::sync::lock;
use crate::transport::RemoteTarget;
use lrpc_abi::Status;
use lrpc_presentation::{InterfacePlan, SidePresentation};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use wasmtime::{Caller, TypedFunc};

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

/// How a server domain runs the calls made to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
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

setters!(ExportOptions {
    with_serving => serving: Serving,
    with_deadline => deadline: Option<Duration>,
    with_presentation => presentation: Option<SidePresentation>,
});

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
    /// The tick by which the call must be done.
    pub deadline: u64,
    /// The entry's arguments in the server's first replica.
    pub first: EntryArgs,
}

/// How the kernel relays a call to an export's server that the calling thread does not
/// migrate into: to the server's own thread (`mailbox`), the component domain behind a core
/// face (`component::mixed`), or a server on another machine (`transport`). Each is
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
    map: RwLock<HashMap<String, Arc<ExportEntry>>>,
    /// Interfaces exported by component domains (one namespace with `map`), as the
    /// component module's records.
    components: RwLock<HashMap<String, Arc<dyn Any + Send + Sync>>>,
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

    /// Registers an export under its name, in its server's ties so that terminating the
    /// server withdraws it.
    pub fn insert(&self, entry: Arc<ExportEntry>) -> Result<(), Error> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(&entry.name)
            || self
                .components
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&entry.name)
        {
            return Err(Error::NameTaken(entry.name.clone()));
        }
        lock(&entry.server.core.ties)
            .exports
            .push(entry.name.clone());
        map.insert(entry.name.clone(), entry);
        Ok(())
    }

    /// Withdraws every export of a domain.
    pub fn withdraw(&self, server: &DomainShared) {
        let names = std::mem::take(&mut lock(&server.core.ties).exports);
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        for n in names {
            map.remove(&n);
        }
    }

    /// A component domain's export by name, as the component module registered it.
    pub fn component<T: Any + Send + Sync>(&self, name: &str) -> Option<Arc<T>> {
        let entry = self
            .components
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()?;
        entry.downcast().ok()
    }

    /// Registers a component domain's export under `name`.
    pub fn export_component(
        &self,
        name: &str,
        entry: Arc<dyn Any + Send + Sync>,
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
