//! Thread-per-domain message passing: the baseline LRPC measured itself against.
//!
//! A server exported with [`Serving::OwnThread`](crate::Serving::OwnThread) runs on an OS
//! thread of its own. A call then does not migrate: the client's thread copies the A-stack's
//! contents into a request message, sends it to the server's thread and blocks for the
//! reply; the server's thread copies the request into its side of the A-stack, runs the
//! entry stub, and sends a copy of the A-stack back. Out-of-band segments (arguments larger
//! than an A-stack) stay shared; the messages carry the A-stack itself.

use crate::clerk::EntryFunc;
use crate::domain::{DomainShared, wait_lock};
use crate::error::Fault;
use crate::linkage::{self, Pinned, ReplicaKey};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// One request to a server thread.
pub(crate) struct Request {
    /// The call's binding, client and A-stack index, for the server thread's linkage record.
    pub call: (Pinned, ReplicaKey, u32),
    /// Procedure index.
    pub proc: usize,
    /// Server address of the A-stack the request is copied into.
    pub astack: u32,
    /// Entry arguments besides the A-stack: capacity, `in` segment, its capacity, borrow mask.
    pub rest: (i32, i32, i32, i32),
    /// Tick at which the server must stop.
    pub deadline_tick: u64,
    /// A copy of the client's A-stack.
    pub payload: Vec<u8>,
    /// Where the reply goes.
    pub reply: SyncSender<Reply>,
}

/// A server thread's answer.
pub(crate) struct Reply {
    /// The entry's return value, or the fault that stopped the server.
    pub outcome: Result<i32, Fault>,
    /// A copy of the server's A-stack after the call.
    pub payload: Vec<u8>,
}

/// The sending end of a server thread's queue.
pub(crate) struct Mailbox {
    tx: Mutex<Sender<Request>>,
}

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

    /// Sends a request (see [`Request`] for the parts) and waits at most `wait` for the reply.
    #[allow(clippy::too_many_arguments, reason = "the parts of one request")]
    pub(crate) fn call(
        &self,
        call: (Pinned, ReplicaKey, u32),
        proc: usize,
        astack: u32,
        rest: (i32, i32, i32, i32),
        deadline_tick: u64,
        payload: Vec<u8>,
        wait: Duration,
    ) -> Option<Reply> {
        let (reply_tx, reply_rx) = sync_channel(1);
        let req = Request {
            call,
            proc,
            astack,
            rest,
            deadline_tick,
            payload,
            reply: reply_tx,
        };
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(req)
            .is_ok();
        if !sent {
            return None;
        }
        reply_rx.recv_timeout(wait).ok()
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
        let replica = &server.replicas[0];
        let cap = req.rest.0 as usize;
        let outcome = match wait_lock(&replica.store, Duration::from_secs(60)) {
            None => Err(Fault::Terminated),
            Some(mut store) => {
                let range = replica.window_range();
                let mut payload = vec![0u8; cap];
                let copied_in = range.write(req.astack as usize, &req.payload);
                let result = if copied_in.is_none() {
                    Err(Fault::Terminated)
                } else {
                    store.data_mut().deadline_tick = req.deadline_tick;
                    let (binding, client, index) = req.call;
                    let args = (
                        req.astack as i32,
                        req.rest.0,
                        req.rest.1,
                        req.rest.2,
                        req.rest.3,
                    );
                    let entry = &entries[req.proc];
                    let r = linkage::with_served(
                        client,
                        replica.key,
                        binding,
                        req.proc as u32,
                        index,
                        || entry.call(&mut *store, args),
                    );
                    store.data_mut().deadline_tick = 0;
                    r.map_err(|e| Fault::classify(&e))
                };
                range.read(req.astack as usize, &mut payload);
                let _ = req.reply.send(Reply {
                    outcome: result,
                    payload,
                });
                continue;
            }
        };
        let _ = req.reply.send(Reply {
            outcome,
            payload: Vec::new(),
        });
    }
}
