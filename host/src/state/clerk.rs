//! The clerk (LRPC 3.1): the registry of exported interfaces, by name.
//!
//! A server domain exports a WIT interface under a name (by default the interface's own
//! name, e.g. `lrpc:bench/bench`). At export time the clerk builds the procedure descriptor
//! list from the WIT (per procedure: entry stub, A-stack size and count) and checks that the
//! module really has each entry with the right type; binding then needs no further checks
//! of the server.
//!
//! The registry's records (an export, its entries, the [`Relay`] of calls that do not
//! migrate) are defined with the records they refer to (`records`); this file is what the
//! clerk does with them, and the options of an export.

use super::records::{Clerk, DomainShared};
use crate::error::Error;
use crate::sync::lock;
use lrpc_presentation::SidePresentation;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use super::records::{EntryArgs, EntryFunc, ExportEntry, Relay, RelayCall};

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
