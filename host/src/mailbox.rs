//! Thread-per-domain message passing: the baseline LRPC measured itself against.
//!
//! A server exported with [`Serving::OwnThread`](crate::Serving::OwnThread) runs on an OS
//! thread of its own. A call then does not migrate: the client's thread copies the A-stack's
//! contents into a request message, sends it to the server's thread and blocks for the
//! reply; the server's thread copies the request into its side of the A-stack, runs the
//! entry stub, and sends a copy of the A-stack back. Out-of-band segments (arguments larger
//! than an A-stack) stay shared; the messages carry the A-stack itself.

use crate::error::Fault;
use crate::state::binding::Binding;
use crate::state::clerk::EntryFunc;
use crate::state::domain::DomainShared;
use crate::state::linkage::{self, Pinned, ReplicaKey};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// One request to a server thread.
///
/// **A request may outlive its caller.** The client waits at most the binding's deadline;
/// then it gives up, releases its A-stack and may unbind, while the request still sits in the
/// queue or runs. So a request owns everything it touches: the binding (an `Arc`, not the
/// call path's [`Pinned`], which is valid only while the client blocks), and copies of the
/// A-stack's contents. Its window accesses are made under [`Binding::while_live`], so they
/// never reach pages that revocation gave back (and a later binding reused), and a request
/// its client abandoned before the server thread took it is dropped unrun.
///
/// Whether a request runs is decided once, by a compare-exchange on its [`state`]: the
/// server thread takes it (`PENDING → TAKEN`) only after it holds the server's store, right
/// before running it; a client that stops waiting abandons it (`PENDING → ABANDONED`). A
/// client that loses that race waits for the reply, which the server's deadline bounds. So a
/// client told `ServerBusy` knows its call did not run, and every call that ran is answered.
///
/// [`state`]: Request::state
pub(crate) struct Request {
    /// The call's binding.
    pub binding: Arc<Binding>,
    /// The client replica and the A-stack's index, for the server thread's linkage record.
    pub client: ReplicaKey,
    pub index: u32,
    /// Procedure index.
    pub proc: usize,
    /// Server address of the A-stack the request is copied into.
    pub astack: u32,
    /// Entry arguments besides the A-stack: capacity, `in` segment, its capacity, borrow mask.
    pub rest: (i32, i32, i32, i32),
    /// How long the server thread waits for its store (the binding's deadline; the run gets
    /// that deadline again, counted from when it starts).
    pub wait: Duration,
    /// A copy of the client's A-stack.
    pub payload: Vec<u8>,
    /// `PENDING`, `TAKEN` by the server thread, or `ABANDONED` by the client.
    pub state: Arc<AtomicU8>,
    /// Where the reply goes.
    pub reply: SyncSender<Reply>,
    /// The client's request (`state::reset`): an isolated server is reset before a call of
    /// another request runs in it.
    pub request: u64,
}

/// How a request ended in the server thread.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The entry returned this value.
    Entry(i32),
    /// The server faulted.
    Fault(Fault),
    /// The server's store stayed locked (by calls on other threads) past the wait.
    Busy,
    /// The binding was revoked before the request could be copied in or out.
    Revoked,
}

/// A server thread's answer.
pub(crate) struct Reply {
    pub outcome: Outcome,
    /// A copy of the server's A-stack after the call.
    pub payload: Vec<u8>,
}

/// A request not yet taken or abandoned.
const PENDING: u8 = 0;
/// The server thread runs (or ran) the request.
const TAKEN: u8 = 1;
/// The client stopped waiting before the server thread took the request.
const ABANDONED: u8 = 2;

/// How long a client waits at least for a request the server thread has taken.
const TAKEN_WAIT: Duration = Duration::from_secs(5);

/// The sending end of a server thread's queue.
pub(crate) struct Mailbox {
    tx: Mutex<Sender<Request>>,
}

/// The client stopped waiting before a reply came.
#[derive(Debug)]
pub(crate) struct GaveUp;

impl Mailbox {
    /// Starts a server thread for replica 0 of `server`, calling `entries` (its entries).
    pub(crate) fn start(
        name: &str,
        server: &Arc<DomainShared>,
        entries: Vec<EntryFunc>,
    ) -> std::io::Result<Mailbox> {
        let (tx, rx) = std::sync::mpsc::channel::<Request>();
        let weak = Arc::downgrade(server);
        std::thread::Builder::new()
            .name(format!("lrpc-server-{name}"))
            .spawn(move || serve(weak, entries, rx))?;
        Ok(Mailbox { tx: Mutex::new(tx) })
    }

    /// Sends a request built by `make` (given the reply channel and the state word) and
    /// waits at most `wait` for the reply. A request the server thread has not taken by then
    /// is abandoned and never runs; one it has taken is waited for (the server's deadline
    /// bounds it; after `TAKEN_WAIT` more the client gives up anyway).
    pub(crate) fn call(
        &self,
        make: impl FnOnce(SyncSender<Reply>, Arc<AtomicU8>) -> Request,
        wait: Duration,
    ) -> Result<Reply, GaveUp> {
        let (reply_tx, reply_rx) = sync_channel(1);
        let state = Arc::new(AtomicU8::new(PENDING));
        let req = make(reply_tx, state.clone());
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(req)
            .is_ok();
        if !sent {
            return Err(GaveUp);
        }
        if let Ok(reply) = reply_rx.recv_timeout(wait) {
            return Ok(reply);
        }
        match state.compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Err(GaveUp),
            // Taken: it is running under the server's deadline and its answer is on the way;
            // the longer wait allows for the server thread being descheduled meanwhile.
            Err(_) => reply_rx
                .recv_timeout(wait.max(TAKEN_WAIT))
                .map_err(|_| GaveUp),
        }
    }
}

/// The server thread: receives requests until the domain is gone or terminated.
fn serve(server: Weak<DomainShared>, entries: Vec<EntryFunc>, rx: Receiver<Request>) {
    loop {
        let req = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => match server.upgrade() {
                Some(s) if !s.core.terminated.load(Ordering::Acquire) => continue,
                _ => return,
            },
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let Some(server) = server.upgrade() else {
            return;
        };
        if req.state.load(Ordering::Acquire) == ABANDONED {
            continue;
        }
        let reply = run(&server, &entries, &req);
        // The client may have given up meanwhile; then nobody receives this.
        let _ = req.reply.send(reply);
    }
}

/// Runs one request in replica 0 of `server`.
fn run(server: &DomainShared, entries: &[EntryFunc], req: &Request) -> Reply {
    let replica = &server.replicas[0];
    let answer = |outcome| Reply {
        outcome,
        payload: Vec::new(),
    };
    let Some(mut store) = replica.wait_store(req.wait) else {
        return answer(Outcome::Busy);
    };
    // Taken under the store, right before it runs: the client may have stopped waiting
    // while this thread waited for the store, and then the request must not run.
    if req
        .state
        .compare_exchange(PENDING, TAKEN, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return answer(Outcome::Revoked);
    }
    let range = replica.window_range();
    let copied_in = req
        .binding
        .while_live(|| range.write(req.astack as usize, &req.payload));
    if copied_in.flatten().is_none() {
        return answer(Outcome::Revoked);
    }
    let _request = crate::state::reset::adopt_request(req.request);
    if let Err(why) = replica.enter_request(wasmtime::AsContextMut::as_context_mut(&mut *store)) {
        return answer(Outcome::Fault(Fault::Trapped {
            trap: None,
            message: format!("resetting the isolated server failed: {why}"),
        }));
    }
    // The server is blamed only for its own run: its deadline starts now, after the queue
    // and the wait for the store.
    store.data_mut().deadline_tick = req.binding.run_deadline(&store.data().ticks);
    let args = (
        req.astack as i32,
        req.rest.0,
        req.rest.1,
        req.rest.2,
        req.rest.3,
    );
    let entry = &entries[req.proc];
    // The request owns an `Arc` of the binding for as long as the linkage record exists, so
    // the pinned view `reply_oob` reads stays valid.
    let call = linkage::Call {
        caller: req.client,
        server: replica.key,
        binding: Pinned::new(&req.binding),
        proc: req.proc as u32,
        astack: req.index,
        lent: false,
    };
    let r = linkage::with_served(call, || entry.call(&mut *store, args));
    store.data_mut().deadline_tick = 0;
    let outcome = match r {
        Ok(code) => Outcome::Entry(code),
        Err(e) => return answer(Outcome::Fault(Fault::classify(&e))),
    };
    let mut payload = vec![0u8; req.rest.0.max(0) as usize];
    let copied_out = req
        .binding
        .while_live(|| range.read(req.astack as usize, &mut payload));
    if copied_out.flatten().is_none() {
        return answer(Outcome::Revoked);
    }
    Reply { outcome, payload }
}
