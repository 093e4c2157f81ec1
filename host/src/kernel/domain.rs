//! Running a domain's exports from the embedder: the calls that terminate a domain whose
//! code traps, so they sit above the records, beside termination.

use crate::error::{Error, Fault};
use crate::state::domain::{Domain, DomainFunc, Replica, SETUP_WAIT, pick_replica};
use crate::state::reset::NotReset;
use std::sync::atomic::Ordering;
use std::time::Duration;
use wasmtime::{WasmParams, WasmResults};

impl Domain {
    /// Puts every replica of this domain back into its fresh state now (see
    /// [`Isolation`](crate::domain::Isolation)). Calls through bindings already meet a
    /// replica reset for their request (the top-level call that made them); this is for an
    /// embedder that wants every replica clean now. Waits for calls running in it to
    /// return. An error if the domain was not created with
    /// [`Isolation::Request`](crate::domain::Isolation::Request), and [`Error::Reset`] if a
    /// replica's guest grew a table (the domain is terminated then).
    pub fn reset(&self) -> Result<(), Error> {
        if self.is_terminated() {
            return Err(Error::Terminated(self.name().to_string()));
        }
        for r in self.shared.replicas.iter() {
            let mut store = r.wait_store(SETUP_WAIT).ok_or(Error::Busy)?;
            if !Replica::is_isolated(&store) {
                return Err(Error::Options(format!(
                    "domain `{}` was not created with `Isolation::Request`",
                    self.name()
                )));
            }
            if let Err(e) = r.reset(&mut *store, true) {
                drop(store);
                return Err(self.reset_failed(e));
            }
        }
        Ok(())
    }

    /// Makes the state every replica of this isolated domain has now the state
    /// [`Domain::reset`] and each request go back to: for an embedder that initializes the
    /// domain after creating it (binds it to its servers, runs an init export). Until then
    /// the fresh state is the one right after instantiation. Waits for calls running in it
    /// to return; an error if the domain was not created with
    /// [`Isolation::Request`](crate::domain::Isolation::Request).
    ///
    /// Bindings the guest makes or drops during a later request are not undone by a reset:
    /// a handle it kept in its fresh memory stays what the kernel says it is (a binding
    /// dropped since is refused as a stale handle).
    pub fn capture_fresh_state(&self) -> Result<(), Error> {
        if self.is_terminated() {
            return Err(Error::Terminated(self.name().to_string()));
        }
        for r in self.shared.replicas.iter() {
            let mut store = r.wait_store(SETUP_WAIT).ok_or(Error::Busy)?;
            match r.recapture(&mut store) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(Error::Options(format!(
                        "domain `{}` was not created with `Isolation::Request`",
                        self.name()
                    )));
                }
                Err(e) => {
                    drop(store);
                    return Err(self.reset_failed(NotReset::Io(std::io::Error::other(e))));
                }
            }
        }
        Ok(())
    }

    /// Terminates the domain after a failed reset and says why.
    fn reset_failed(&self, why: NotReset) -> Error {
        tracing::warn!(
            domain = self.name(),
            "terminating an isolated domain: {why}"
        );
        if let Some(kernel) = self.kernel.upgrade() {
            crate::terminate::terminate_shared(&kernel, &self.shared);
        }
        Error::Reset {
            domain: self.name().to_string(),
            source: why.to_string().into(),
        }
    }

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
        // A request of its own: the isolated servers it reaches through bindings meet it
        // in their fresh state (see `state::reset`).
        let _request = crate::state::reset::begin_request();
        let replica = &shared.replicas[i];
        let isolated = Replica::is_isolated(&store);
        if isolated {
            if let Err(e) = replica.reset(&mut *store, false) {
                drop(store);
                return Err(self.domain.reset_failed(e));
            }
            if let Some(fresh) = store.data_mut().fresh.as_mut() {
                fresh.dirty = true;
            }
        }
        let data = store.data_mut();
        data.deadline_tick = data
            .ticks
            .now()
            .saturating_add(ticks.unwrap_or(data.default_deadline_ticks));
        let result = self.funcs[i].call(&mut *store, params);
        store.data_mut().deadline_tick = 0;
        replica.flush_deferred();
        if isolated && result.is_err() && !shared.core.terminated.load(Ordering::Acquire) {
            // A trap or a deadline in an isolated domain: no termination, the domain goes
            // back to its fresh state now (nothing the failed call left lingers).
            let fault = result.as_ref().err().map(Fault::classify);
            let reset = replica.reset(&mut *store, false);
            drop(store);
            if let Err(e) = reset {
                return Err(self.domain.reset_failed(e));
            }
            return Err(Error::Fault(fault.unwrap_or(Fault::Terminated)));
        }
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
