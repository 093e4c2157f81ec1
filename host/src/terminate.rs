//! Domain termination (LRPC 5.3).
//!
//! Terminating a domain marks it dead (its epoch callback then interrupts any code still
//! running in it at the next tick), withdraws its exports, and revokes every binding it holds
//! as client or server: the A-stack and out-of-band pages leave both memories, calls in
//! flight fail with a call-failed status, later calls on those bindings fail fast. Then its
//! replicas' memories go back to the system (see [`DomainShared::release_memory`]), each as
//! soon as no code runs in it, though handles to the domain may keep its records for longer.

use crate::state::binding::{Binding, RevokeReason};
use crate::state::domain::DomainShared;
use crate::state::kernel::KernelInner;
use crate::sync::lock;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Terminates `domain` (idempotent).
pub(crate) fn terminate_shared(kernel: &KernelInner, domain: &DomainShared) {
    if domain.core.terminated.swap(true, Ordering::AcqRel) {
        // Terminated before, maybe while a replica ran: the caller may be the thread that
        // ran it, back from it now, so that replica's memory can go.
        domain.release_memory();
        return;
    }
    tracing::debug!(domain = domain.core.name, "terminating domain");
    kernel.clerk.withdraw(domain);
    let (as_client, as_server): (Vec<Arc<Binding>>, Vec<Arc<Binding>>) = {
        let ties = lock(&domain.core.ties);
        (
            ties.client.clone(),
            ties.server.iter().filter_map(|w| w.upgrade()).collect(),
        )
    };
    for b in as_server {
        b.revoke_with(RevokeReason::ServerTerminated, None);
    }
    for b in as_client {
        b.revoke_with(RevokeReason::ClientTerminated, None);
    }
    // Its asynchronous bindings: out of the servers' memories now, out of its own when the
    // guest is gone (it runs no more code meanwhile).
    let closers = std::mem::take(&mut lock(&domain.core.ties).closers);
    for c in closers.iter().filter_map(std::sync::Weak::upgrade) {
        c.close();
    }
    domain.release_memory();
}
