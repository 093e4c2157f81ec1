//! The component Binding Object: one import of a client domain bound to a server's export
//! ([`ImportBinding`]), checked on every call and revoked when either side goes, and what
//! the embedder sees of it ([`ComponentBindingInfo`]).

use super::handles::Handles;
use super::record::Shared;
use crate::error::Error;
use lrpc_abi::Status;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use wasmtime::component::Val;

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

/// One import of a client domain bound to a server's export: the component Binding Object.
pub(crate) struct ImportBinding {
    pub(super) interface: String,
    pub(super) export: String,
    pub(super) server: Arc<Shared>,
    pub(super) revoked: AtomicBool,
    /// The resource handles the client holds into the server through this binding.
    pub(super) handles: Arc<Handles>,
}

impl ImportBinding {
    pub(super) fn info(&self) -> ComponentBindingInfo {
        ComponentBindingInfo {
            interface: self.interface.clone(),
            export: self.export.clone(),
            server: self.server.name.clone(),
            live: !self.revoked.load(Ordering::Acquire),
        }
    }

    /// A call through the binding: checked, then run in the server on this thread.
    pub(super) fn call(
        &self,
        idx: usize,
        params: &[Val],
        results: &mut [Val],
    ) -> Result<(), Status> {
        self.checked(|server| server.run(idx, params, results))
    }

    /// [`ImportBinding::call`] with static types (see `typed`).
    pub(super) fn call_typed<P, R>(&self, idx: usize, params: P) -> Result<R, Status>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower + 'static,
        R: wasmtime::component::ComponentNamedList + wasmtime::component::Lift + 'static,
    {
        self.checked(|server| server.run_typed(idx, params))
    }

    /// Runs `f` on the server if the binding is not revoked; its error as a status.
    #[inline]
    pub(super) fn checked<T>(
        &self,
        f: impl FnOnce(&Shared) -> Result<T, Error>,
    ) -> Result<T, Status> {
        if self.revoked.load(Ordering::Acquire) {
            return Err(Status::StaleBinding);
        }
        f(&self.server).map_err(|e| e.status())
    }
}
