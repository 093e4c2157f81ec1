//! Running a domain's exports from the embedder: the calls that terminate a domain whose
//! code traps, so they sit above the records, beside termination.

use crate::error::{Error, Fault};
use crate::state::domain::{Domain, DomainFunc, pick_replica};
use std::sync::atomic::Ordering;
use std::time::Duration;
use wasmtime::{WasmParams, WasmResults};

impl Domain {
    /// Calls the export `name` of the domain's first free replica with the kernel's default
    /// deadline. A trap terminates the domain and is returned as [`Error::Fault`].
    pub fn call<P: WasmParams, R: WasmResults>(&self, name: &str, params: P) -> Result<R, Error> {
        let f = self.func::<P, R>(name)?;
        f.call(params)
    }
}

impl<P: WasmParams, R: WasmResults> DomainFunc<P, R> {
    /// Calls the export on the first free replica under the kernel's default deadline.
    pub fn call(&self, params: P) -> Result<R, Error> {
        self.call_ticks(params, None)
    }

    /// Calls the export on the first free replica under `deadline` instead of the kernel's
    /// default. An embedder whose export calls other domains gives it a deadline that covers
    /// theirs: the caller's deadline keeps running while its callees run.
    pub fn call_within(&self, params: P, deadline: Duration) -> Result<R, Error> {
        let ticks = match self.domain.kernel.upgrade() {
            Some(kernel) => kernel.ticks_for(deadline),
            None => return Err(Error::Fault(Fault::Terminated)),
        };
        self.call_ticks(params, Some(ticks))
    }

    fn call_ticks(&self, params: P, ticks: Option<u64>) -> Result<R, Error> {
        let shared = &self.domain.shared;
        if shared.core.terminated.load(Ordering::Acquire) {
            return Err(Error::Fault(Fault::Terminated));
        }
        // (`ok_or_else`: an error built on every call would be dropped on every call.)
        let (i, mut store) =
            pick_replica(&shared.replicas, self.wait).ok_or_else(|| Error::Busy)?;
        let data = store.data_mut();
        data.deadline_tick = data
            .ticks
            .now()
            .saturating_add(ticks.unwrap_or(data.default_deadline_ticks));
        let result = self.funcs[i].call(&mut *store, params);
        store.data_mut().deadline_tick = 0;
        shared.replicas[i].flush_deferred();
        drop(store);
        result.map_err(|e| {
            let fault = Fault::classify(&e);
            if let Some(kernel) = self.domain.kernel.upgrade() {
                crate::terminate::terminate_shared(&kernel, shared);
            }
            Error::Fault(fault)
        })
    }
}
