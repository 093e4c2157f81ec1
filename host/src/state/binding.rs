//! Bindings (LRPC 3.1): the Binding Object a client holds and the state a binding shares
//! between its client, its server and the calls in flight. The A-stacks allocated for it,
//! and the pages they live in, are the `astack` tree's (extents, placement, mapping).
//!
//! A binding's state is split by who touches it:
//!
//! * [`ClientBinding`]s live in the client replica's store data (its handle table). The call path reads them while
//!   it holds that store (it runs inside the client's `lrpc.call` import), so validating a
//!   handle, a procedure and an A-stack takes no lock: a generation compare and, per extent
//!   of A-stacks, one range check (A-stacks of an extent are contiguous).
//! * [`Binding`] is shared (`Arc`) between the client's slot, the linkage records of calls in
//!   flight and the domains' books. It owns the memfd segments and knows where each is mapped,
//!   so it can be revoked from any thread (termination) without the client's store.
//!
//! The records are defined with the others they refer to (`records`); placing a binding's
//! segments and revoking it are above this file (`place`).

use super::records::ExportEntry;
use super::window::Mappings;
use crate::error::Error;
use crate::quota::Charge;
use crate::sync::lock;
use lrpc_presentation::Combination;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) use super::records::{Binding, ClientBinding, DomainShared, Masks, ReplicaKey};

/// Binding state values.
pub(crate) const LIVE: u8 = 0;
pub(super) const UNBOUND: u8 = 1;
pub(super) const SERVER_TERMINATED: u8 = 2;
pub(super) const CLIENT_TERMINATED: u8 = 3;

/// The binding graph's generation, bumped by every bind and revocation (in any kernel of the
/// process: a bump elsewhere only costs a recomputation). Starts at 1.
static GRAPH: AtomicU64 = AtomicU64::new(1);

/// Marks the binding graph changed: cached reachability answers are stale.
pub(crate) fn graph_changed() {
    GRAPH.fetch_add(1, Ordering::AcqRel);
}

/// Why a binding is revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RevokeReason {
    /// The client unbound it.
    Unbound,
    /// The server domain was terminated.
    ServerTerminated,
    /// The client domain was terminated (or dropped).
    ClientTerminated,
}

impl ClientBinding {
    /// Whether a call on this binding is in flight.
    pub fn any_busy(&self) -> bool {
        self.procs.iter().any(|p| {
            p.extents
                .iter()
                .any(|e| e.busy.iter().any(std::cell::Cell::get))
        })
    }
}

/// What the embedder can see of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingInfo {
    /// The Binding Object's handle as the client holds it.
    pub handle: u64,
    /// The name the interface was bound under.
    pub name: String,
    /// The interface.
    pub interface: String,
    /// Client domain id and replica.
    pub client: (u16, u16),
    /// Server domain id.
    pub server: u16,
    /// Whether the binding is live.
    pub live: bool,
    /// The A-stack windows: client offset, server offsets per replica, length.
    pub windows: Vec<(usize, Vec<usize>, usize)>,
    /// The out-of-band windows, in the same form.
    pub oob_windows: Vec<(usize, Vec<usize>, usize)>,
    /// The combination signature: per procedure the copy/borrow and buffer decisions, the
    /// trust settings and the transport.
    pub combination: Combination,
}

impl Binding {
    #[allow(clippy::too_many_arguments, reason = "a binding has this many parts")]
    pub(crate) fn new(
        handle: u64,
        combination: Combination,
        export: Arc<ExportEntry>,
        client: &Arc<DomainShared>,
        client_key: ReplicaKey,
        deadline: Duration,
        tick: Duration,
    ) -> Binding {
        let ticks = deadline.as_nanos().div_ceil(tick.as_nanos().max(1)) + 1;
        let masks = combination
            .procs
            .iter()
            .map(|p| Masks {
                borrow: p.borrow_mask() as i32,
                lend: p.lend_mask() as i32,
            })
            .collect();
        Binding {
            handle,
            combination,
            masks,
            reach: AtomicU64::new(0),
            server: export.server.clone(),
            export,
            client: Arc::downgrade(client),
            client_key,
            state: AtomicU8::new(LIVE),
            deadline,
            deadline_ticks: u64::try_from(ticks).unwrap_or(u64::MAX),
            mappings: Mutex::new(Mappings::default()),
            direct: Mutex::new(None),
            account: client.core.account.clone(),
            charged: Mutex::new(Charge::default()),
        }
    }

    /// The tick at which a call's run in the server must stop, for a run starting now.
    ///
    /// The binding's deadline bounds the wait for a busy server (the caller then hears
    /// `ServerBusy`) and, counted again from when the server is entered, the server's own run
    /// (past it the server is terminated). A run is never shortened by the wait before it:
    /// a server is not blamed for being busy.
    pub(crate) fn run_deadline(&self, clock: &crate::tick::Clock) -> u64 {
        clock.now().saturating_add(self.deadline_ticks)
    }

    /// Charges `c` to the client domain's quotas on this binding's behalf (returned when the
    /// binding is revoked), or refuses with the quota it would exceed.
    pub(crate) fn charge(&self, c: Charge) -> Result<(), Error> {
        let mut charged = lock(&self.charged);
        if !self.is_live() {
            return Err(Error::Terminated(self.server.core.name.clone()));
        }
        self.account.charge(&c)?;
        charged.add(&c);
        Ok(())
    }

    /// Gives back part of what this binding charged.
    pub(crate) fn refund(&self, c: Charge) {
        let mut charged = lock(&self.charged);
        let give = c.at_most(&charged);
        charged.sub(&give);
        self.account.refund(&give);
    }

    /// Runs `f` (a host-side copy into or out of this binding's windows) only while the
    /// binding is live, and keeps it live until `f` returns: revocation unmaps and frees the
    /// windows under the same lock, so a window can not change hands during the copy.
    pub(crate) fn while_live<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let _m = lock(&self.mappings);
        self.is_live().then(f)
    }

    /// The mask for the server's entry on a call of `proc` by a client that can not run until
    /// it returns, and whether it lends more than the presentations allow on every call.
    /// A synchronous call lends when the server can not reach the client through bindings:
    /// then the client runs again only after the call (a re-entry through a binding made
    /// meanwhile is refused, see `linkage::lending`).
    #[inline]
    pub(crate) fn entry_mask(&self, proc: u32) -> (i32, bool) {
        let Some(&Masks { borrow, lend }) = self.masks.get(proc as usize) else {
            return (0, false);
        };
        if lend != borrow && self.lends() {
            (lend, true)
        } else {
            (borrow, false)
        }
    }

    /// Whether the server can not reach the client through bindings, from the answer cached
    /// for the current binding graph (recomputed once after each bind or revocation).
    #[inline]
    pub(crate) fn lends(&self) -> bool {
        let g = GRAPH.load(Ordering::Acquire);
        let r = self.reach.load(Ordering::Relaxed);
        if r >> 1 == g {
            return r & 1 == 0;
        }
        self.lends_now(g)
    }

    #[cold]
    #[inline(never)]
    fn lends_now(&self, g: u64) -> bool {
        let reaches = self.server_reaches_client();
        self.reach
            .store(g << 1 | u64::from(reaches), Ordering::Relaxed);
        !reaches
    }

    /// Walks the binding graph from the server: does a chain of live bindings lead back to
    /// the client domain? A component or remote server counts as reaching it (the kernel
    /// does not follow its bindings).
    fn server_reaches_client(&self) -> bool {
        let target = self.client_key.domain;
        let mut seen = vec![self.server.core.id];
        let mut todo = vec![self.server.clone()];
        while let Some(d) = todo.pop() {
            let out: Vec<Arc<Binding>> = lock(&d.core.ties).client.clone();
            for b in out.iter().filter(|b| b.is_live()) {
                if b.export.relay.as_ref().is_some_and(|x| x.translates()) {
                    return true;
                }
                let next = b.server.core.id;
                if next == target {
                    return true;
                }
                if !seen.contains(&next) {
                    seen.push(next);
                    todo.push(b.server.clone());
                }
            }
        }
        false
    }

    pub(crate) fn is_live(&self) -> bool {
        self.state.load(Ordering::Acquire) == LIVE
    }

    /// The status a call on this binding gets when it is no longer live.
    pub(crate) fn dead_status(&self) -> lrpc_abi::Status {
        match self.state.load(Ordering::Acquire) {
            UNBOUND => lrpc_abi::Status::StaleBinding,
            SERVER_TERMINATED => lrpc_abi::Status::ServerTerminated,
            CLIENT_TERMINATED => lrpc_abi::Status::StaleBinding,
            _ => lrpc_abi::Status::Ok,
        }
    }

    pub(crate) fn info(&self) -> BindingInfo {
        let (windows, oob_windows) = lock(&self.mappings).views();
        BindingInfo {
            handle: self.handle,
            name: self.export.name.clone(),
            interface: self.export.plan.name.clone(),
            client: (self.client_key.domain, self.client_key.replica),
            server: self.server.core.id,
            live: self.is_live(),
            windows,
            oob_windows,
            combination: self.combination.clone(),
        }
    }
}
