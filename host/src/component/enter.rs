//! Entering a component domain's Store for a call: the deadline and fuel armed, the Store
//! taken (waiting at most the deadline), a dead or terminated domain refused without
//! entering, a fault that kills the domain (or, in an isolated domain, replaces its
//! instance), and the typed and handle-carrying variants of a call.

use super::instantiate::instantiate;
use super::record::{ComponentData, Live, Shared};
use crate::error::{Error, Fault};
use crate::state::reset::{Isolation, current_request};
use std::sync::atomic::Ordering;
use wasmtime::Store;
use wasmtime::component::{Func, Val};

/// The Store is held by another call for longer than the deadline allows.
#[cold]
#[inline(never)]
fn busy() -> Error {
    Error::Busy
}

impl Shared {
    /// Runs the exported function `idx` with the domain's deadline and fuel; a fault kills
    /// the domain.
    pub(super) fn run(&self, idx: usize, params: &[Val], results: &mut [Val]) -> Result<(), Error> {
        self.enter(idx, |live, func| {
            Ok(func.call(&mut live.store, params, results))
        })
    }

    /// [`Shared::run`] with static types (see `typed`).
    pub(super) fn run_typed<P, R>(&self, idx: usize, params: P) -> Result<R, Error>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower + 'static,
        R: wasmtime::component::ComponentNamedList + wasmtime::component::Lift + 'static,
    {
        self.run_typed_by::<P, R, R>(idx, |f, store| f.call(store, params))
    }

    /// Runs `call` with function `idx` typed as taking `P` and returning `R` (checked once,
    /// then kept). `P` may hold `'static` borrows: a typed function is covariant in its
    /// parameters, so `call` may pass borrows that live shorter.
    pub(super) fn run_typed_by<P, R, T>(
        &self,
        idx: usize,
        call: impl FnOnce(
            wasmtime::component::TypedFunc<P, R>,
            &mut Store<ComponentData>,
        ) -> wasmtime::Result<T>,
    ) -> Result<T, Error>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower + 'static,
        R: wasmtime::component::ComponentNamedList + wasmtime::component::Lift + 'static,
    {
        type Typed<P, R> = wasmtime::component::TypedFunc<P, R>;
        self.enter(idx, |live, func| {
            let slot = &mut live.typed[idx];
            let typed = match slot.as_ref().and_then(|t| t.downcast_ref::<Typed<P, R>>()) {
                Some(t) => *t,
                None => {
                    let t = func.typed::<P, R>(&live.store).map_err(|e| Error::Guest {
                        what: format!("calling into `{}`", self.name),
                        reason: format!("{e:#}"),
                    })?;
                    *slot = Some(Box::new(t));
                    t
                }
            };
            Ok(call(typed, &mut live.store))
        })
    }

    /// [`Shared::run`] with resource handles among the parameters: `instances` are the
    /// server instances they came from. Answers the instance that ran the call, or `None`
    /// (without entering) when a handle is from another instance (stale).
    pub(super) fn run_handles(
        &self,
        idx: usize,
        params: &[Val],
        results: &mut [Val],
        instances: &[u64],
    ) -> Result<Option<u64>, Error> {
        self.enter(idx, |live, func| {
            if instances.iter().any(|i| *i != live.instance) {
                return Ok(Ok(None));
            }
            Ok(func
                .call(&mut live.store, params, results)
                .map(|()| Some(live.instance)))
        })
    }

    /// Drops a handle of the server's instance `instance` that a client no longer holds,
    /// under the Store lock and deadline of a call. Nothing to do when that instance is gone
    /// or the domain dead or terminated (its handles went with the Store); a fault while the
    /// server's destructor runs kills the server, as a call's would.
    pub(super) fn drop_handle(&self, handle: wasmtime::component::ResourceAny, instance: u64) {
        if self.terminated.load(Ordering::Acquire) || self.is_dead().is_some() {
            return;
        }
        let Some(mut guard) = self.wait_live(self.deadline) else {
            return;
        };
        let Some(live) = guard.as_mut() else {
            return;
        };
        if live.instance != instance {
            return;
        }
        self.arm(&mut live.store);
        let r = handle.resource_drop(&mut live.store);
        live.store.data_mut().deadline_tick = 0;
        drop(guard);
        if let Err(e) = r {
            self.set_dead(Some(Fault::classify(&e)));
        }
    }

    /// Enters the Store to run the exported function `idx` through `f`, with the domain's
    /// deadline and fuel armed. `f` answers an error of its own (the call did not start) or
    /// the call's outcome, whose error is a fault that kills the domain.
    ///
    /// This is the whole kernel side of a call between component domains, so its common
    /// case is kept short: one look at each of the two flags that refuse a call, the Store
    /// taken with one compare-exchange (`wait_lock` reads the clock only when another call
    /// holds it), and every refusal built out of line.
    #[inline]
    fn enter<T>(
        &self,
        idx: usize,
        f: impl FnOnce(&mut Live, Func) -> Result<wasmtime::Result<T>, Error>,
    ) -> Result<T, Error> {
        if (self.terminated.load(Ordering::Acquire) || self.is_dead.load(Ordering::Acquire))
            && let Some(e) = self.refusal()
        {
            return Err(e);
        }
        // `ok_or_else`: an `Error` built eagerly would be dropped on every successful call.
        let mut guard = self.wait_live(self.deadline).ok_or_else(busy)?;
        let Some(live) = guard.as_mut() else {
            return Err(self.gone());
        };
        let isolated = self.options.isolation == Isolation::Request;
        // Instances an isolated domain replaced: before the call, and after a fault.
        let mut before = None;
        let mut faulted = None;
        if isolated {
            before = self.enter_request(live)?;
        }
        // Taken after `enter_request`: a function belongs to the instance it came from.
        let Some(func) = live.funcs.get(idx).copied() else {
            return Err(self.no_function(idx));
        };
        self.arm(&mut live.store);
        let r = f(live, func);
        live.store.data_mut().deadline_tick = 0;
        let r = match r {
            // An isolated domain lives on past a fault: the instance that faulted goes.
            Ok(Err(e)) if isolated && !self.terminated.load(Ordering::Acquire) => {
                faulted = self.replace(live);
                Err(Error::Fault(Fault::classify(&e)))
            }
            Ok(Err(e)) => Err(self.faulted(&e)),
            Ok(Ok(v)) => Ok(v),
            Err(e) => Err(e),
        };
        drop(guard);
        for old in [before, faulted].into_iter().flatten() {
            old.revoke();
            old.release_handles();
        }
        r
    }

    /// Before a call enters an isolated domain's instance: a fresh instance in its place
    /// when a call of another request (or of none known) entered it before. Returns the
    /// instance replaced, whose bindings the caller revokes once the Store lock is let go.
    #[inline]
    fn enter_request(&self, live: &mut Live) -> Result<Option<Live>, Error> {
        let request = current_request();
        let old = if live.used && (request == 0 || request != live.request) {
            Some(self.replace_or_fail(live)?)
        } else {
            None
        };
        live.used = true;
        live.request = request;
        Ok(old)
    }

    /// Puts a fresh instance in `live`'s place; the old one.
    #[cold]
    #[inline(never)]
    fn replace_or_fail(&self, live: &mut Live) -> Result<Live, Error> {
        let (Some(kernel), Some(me)) = (self.kernel.upgrade(), self.me.upgrade()) else {
            return Err(self.gone());
        };
        let fresh = instantiate(&kernel, &me)?;
        Ok(std::mem::replace(live, fresh))
    }

    /// [`Shared::replace_or_fail`] after a fault: when no fresh instance can be made, the
    /// domain is dead (as any domain whose instance faulted).
    #[cold]
    #[inline(never)]
    fn replace(&self, live: &mut Live) -> Option<Live> {
        match self.replace_or_fail(live) {
            Ok(old) => Some(old),
            Err(e) => {
                self.set_dead(Some(Fault::Trapped {
                    trap: None,
                    message: format!("no fresh instance after a fault: {e}"),
                }));
                None
            }
        }
    }

    /// Why a call is refused when the domain is terminated or dead; `None` when it no
    /// longer is (restarted since the flag was read): the call goes ahead.
    #[cold]
    #[inline(never)]
    fn refusal(&self) -> Option<Error> {
        if self.terminated.load(Ordering::Acquire) {
            return Some(Error::Terminated(self.name.clone()));
        }
        self.is_dead().map(Error::Fault)
    }

    /// The domain has no instance (it was terminated).
    #[cold]
    #[inline(never)]
    fn gone(&self) -> Error {
        Error::Terminated(self.name.clone())
    }

    /// No exported function `idx`.
    #[cold]
    #[inline(never)]
    fn no_function(&self, idx: usize) -> Error {
        Error::Guest {
            what: format!("calling into `{}`", self.name),
            reason: format!("no exported function {idx}"),
        }
    }

    /// A call faulted: the domain is dead.
    #[cold]
    #[inline(never)]
    fn faulted(&self, e: &wasmtime::Error) -> Error {
        let fault = Fault::classify(e);
        self.set_dead(Some(fault.clone()));
        Error::Fault(fault)
    }

    /// Sets the deadline (and fuel) of a call about to enter the Store.
    pub(super) fn arm(&self, store: &mut Store<ComponentData>) {
        let now = self.ticks.now();
        store.data_mut().deadline_tick = now.saturating_add(self.deadline_ticks);
        if let Some(fuel) = self.options.limits.fuel {
            // Only domains with a fuel limit live on the metering engine.
            let _ = store.set_fuel(fuel);
        }
    }
}
