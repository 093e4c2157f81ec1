//! Remote exports for guests: a [`RemoteBinding`] registered with a local kernel
//! ([`lrpc_kernel::Kernel::export_remote`]), so that a guest binds to the remote interface by name
//! and calls it through its unchanged client stub. The kernel hands each call to
//! [`Forward`] on the guest's thread; the call goes out on the tokio runtime given, and the
//! guest's thread waits for its result.

use crate::client::RemoteBinding;
use crate::values::param_types;
use crate::wire;
use lrpc_kernel::{Domain, Kernel, Status, transport::RemoteDone, transport::RemoteTarget};
use lrpc_presentation::layout::Extent;
use std::sync::Arc;
use std::sync::mpsc;
use tokio::runtime::Handle;

/// The kernel's target for calls on bindings to a remote export: translates the request
/// from the A-stack encoding (checking it as it goes), sends it through the binding on the
/// runtime and waits for the result.
///
/// The waiting thread must not be one the runtime needs to make progress: call guests off
/// the runtime's worker threads (a thread of their own, or `spawn_blocking`), as for every
/// call into the kernel.
#[derive(Debug)]
pub struct Forward {
    binding: RemoteBinding,
    runtime: Handle,
}

impl Forward {
    /// Calls through `binding`, on `runtime`.
    pub fn new(binding: RemoteBinding, runtime: Handle) -> Forward {
        Forward { binding, runtime }
    }
}

impl Forward {
    /// The request in the wire encoding, checked as it is translated.
    fn params(&self, proc: usize, request: &[u8]) -> Result<bytes::Bytes, Status> {
        let plan = self.binding.plan();
        let pp = plan.procs.get(proc).ok_or(Status::BadProcedure)?;
        let tys = param_types(plan, proc).map_err(|e| e.status())?;
        let params = wire::to_wire_extent(plan, &tys, request, Extent::of(pp)).map_err(|e| {
            tracing::debug!(proc, "a guest's request does not translate: {e}");
            Status::ServerRejected
        })?;
        Ok(params.freeze())
    }
}

/// A remote call's outcome as the guest sees it: a status only; the log says which peer and
/// why.
fn outcome(
    binding: &RemoteBinding,
    proc: usize,
    r: Result<Vec<u8>, crate::error::RemoteError>,
) -> Result<Vec<u8>, Status> {
    r.map_err(|e| {
        tracing::warn!(proc, endpoint = %binding.endpoint(), "a remote call failed: {e}");
        e.status()
    })
}

/// Records a remote call's status on its span.
fn record(span: &tracing::Span, r: &Result<Vec<u8>, Status>) {
    match r {
        Ok(_) => span.record("status", "ok"),
        Err(s) => span.record("status", tracing::field::display(s)),
    };
}

impl RemoteTarget for Forward {
    fn call(&self, proc: usize, request: &[u8]) -> Result<Vec<u8>, Status> {
        let params = self.params(proc, request)?;
        // The call's span is this thread's while it waits; the context that goes to the
        // peer is this span's.
        let span = self.binding.span(proc);
        let _entered = span.enter();
        let trace = crate::trace::outgoing();
        let (tx, rx) = mpsc::sync_channel(1);
        let binding = self.binding.clone();
        self.runtime.spawn(async move {
            let _ = tx.send(binding.call_wire_traced(proc, params, trace).await);
        });
        let r = match rx.recv() {
            Ok(r) => outcome(&self.binding, proc, r),
            // The runtime dropped the call: it is shutting down.
            Err(mpsc::RecvError) => Err(Status::ServerTerminated),
        };
        record(&span, &r);
        r
    }

    fn start(self: Arc<Self>, proc: usize, request: Vec<u8>, done: RemoteDone) {
        let params = match self.params(proc, &request) {
            Ok(p) => p,
            Err(s) => return done(Err(s)),
        };
        let span = self.binding.span(proc);
        let trace = span.in_scope(crate::trace::outgoing);
        let runtime = self.runtime.clone();
        runtime.spawn(async move {
            let r = self.binding.call_wire_traced(proc, params, trace).await;
            let r = outcome(&self.binding, proc, r);
            record(&span, &r);
            drop(span);
            done(r);
        });
    }
}

/// Exports `binding`'s interface in `kernel` under `name`, so that guests bind to it by name
/// (the binding carries the remote bit); calls go out on `runtime`. Terminating the returned
/// stand-in withdraws the export and revokes the guests' bindings.
pub fn export_remote(
    kernel: &Kernel,
    name: &str,
    binding: RemoteBinding,
    runtime: Handle,
) -> Result<Domain, lrpc_kernel::Error> {
    let interface = binding.plan().name.clone();
    kernel.export_remote(name, &interface, Arc::new(Forward::new(binding, runtime)))
}
