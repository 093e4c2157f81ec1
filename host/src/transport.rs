//! Remote exports (LRPC 5.1): an interface whose server runs on another machine, registered
//! with the clerk like any export, so that a guest binds to it by name and calls it through
//! its unchanged client stub.
//!
//! The binding carries the remote bit: its export's relay is a [`RemoteRelay`]. Its server
//! is a *stand-in*, a domain of the kernel's table with no instance (as for a component server's
//! core stand-in), so the binding's A-stacks are in the client's memory only. `lrpc.call` on it
//! (`imports::translate::to_remote`) reads the request off the A-stack as a server stub would —
//! the client may still change it, so it is read once into the kernel's memory — and hands it
//! to the [`RemoteTarget`] on the calling thread, which waits for the network (the thread
//! migrates to the other machine, in effect); the result goes back onto the A-stack or into
//! the binding's `out` segment. The transport is not the kernel's business: `lrpc-remote`
//! implements the target on wRPC, on tokio, which the kernel does not depend on.
//!
//! A remote peer that fails a call fails that call only: the stand-in is not terminated, so the
//! binding stays and the next call reaches the peer again once it is back. Terminating the
//! stand-in (the [`Domain`](crate::Domain) [`Kernel::export_remote`](crate::Kernel::export_remote) returns) withdraws the export and revokes
//! every binding to it, as for any server.
//!
//! This module is the contract only (the target a transport implements); the kernel's side
//! of a remote export is [`Kernel::export_remote`](crate::Kernel::export_remote).

use lrpc_abi::Status;
use std::sync::Arc;

/// Where the kernel sends the calls made on bindings to a remote export.
pub trait RemoteTarget: Send + Sync + 'static {
    /// Runs procedure `proc` (an index into the interface's plan) elsewhere and waits for
    /// it. `request` is the parameters' A-stack encoding as the client's stub laid it out;
    /// for a procedure whose plan is `bounded`, the encoding may be followed by unused bytes
    /// up to the procedure's `in_bound`. Returns the result's A-stack encoding (empty for a
    /// procedure without a result), or the status the client's call fails with.
    ///
    /// Runs on the calling guest's thread, which waits: it must not need that thread to make
    /// progress.
    fn call(&self, proc: usize, request: &[u8]) -> Result<Vec<u8>, Status>;

    /// Starts [`call`](RemoteTarget::call) without holding the calling thread: `done` gets
    /// the outcome, on whichever thread finishes the call. A guest's MultiRPC starts its
    /// remote members this way, all at once. By default a thread of its own makes the call,
    /// with at most `MAX_STARTED` (256) such threads in the process at a time (beyond that a call
    /// fails at once with `ServerBusy`, so that guests can not make threads without bound); a
    /// target with an asynchronous transport sends the call there instead.
    fn start(self: Arc<Self>, proc: usize, request: Vec<u8>, done: RemoteDone) {
        use std::sync::atomic::Ordering;
        if STARTED.fetch_add(1, Ordering::AcqRel) >= MAX_STARTED {
            STARTED.fetch_sub(1, Ordering::AcqRel);
            return done(Err(Status::ServerBusy));
        }
        // Kept outside the thread's closure too, so that a thread that can not be made
        // still answers.
        let done = Arc::new(std::sync::Mutex::new(Some(done)));
        let answer = |done: &std::sync::Mutex<Option<RemoteDone>>, r| {
            let taken = done.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(d) = taken {
                d(r);
            }
        };
        let theirs = done.clone();
        let spawned = std::thread::Builder::new()
            .name("lrpc-remote-call".into())
            .spawn(move || {
                let r = self.call(proc, &request);
                STARTED.fetch_sub(1, Ordering::AcqRel);
                answer(&theirs, r);
            });
        if let Err(e) = spawned {
            STARTED.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("no thread for a remote call: {e}");
            answer(&done, Err(Status::ResourceExhausted));
        }
    }
}

/// Most threads the default [`RemoteTarget::start`] runs at once, in the whole process.
pub const MAX_STARTED: usize = 256;

/// Threads of the default [`RemoteTarget::start`] running now.
static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What receives a started remote call's outcome (see [`RemoteTarget::start`]).
pub type RemoteDone = Box<dyn FnOnce(Result<Vec<u8>, Status>) + Send>;

/// A remote export's way to its server: the transport (the call path's side of it is in
/// `imports::translate`).
pub(crate) struct RemoteRelay(pub Arc<dyn RemoteTarget>);
