//! The server side of a channel: the server's loop for one channel ([`ChannelShared::serve`],
//! run by the server's processors or by a donating client processor), which takes the
//! pending requests, runs each in a server replica on its slot's A-stack and posts its
//! reply; a server fault terminates the server and fails the calls in flight on every
//! channel of its processors.

use super::processors::BusyMark;
use super::ring::{REP_HEAD, REP_TAIL, REQ_HEAD, REQ_TAIL};
use super::{CallError, ChannelShared, ProcInfo};
use crate::error::Fault;
use crate::state::domain::DomainData;
use crate::state::kernel::KernelInner;
use crate::sync::lock;
use lrpc_abi::Status;
use std::sync::Weak;
use std::sync::atomic::{Ordering, fence};
use std::time::Duration;
use wasmtime::{AsContextMut, Store};

/// The server side's own counters (never read back from the segment).
pub(super) struct ServerSide {
    pub(super) req_tail: u32,
    pub(super) rep_head: u32,
    /// The client's reply tail as last read: read again only when the reply ring looks
    /// full, so the client's stores to it do not pull its line over on every request.
    pub(super) rep_tail: u32,
}

impl ChannelShared {
    /// The server's loop for this channel, once: takes the pending requests (at most one
    /// ring's worth), runs each in the server and posts its reply. Returns how many ran.
    /// `processor`: run by one of the server's processors, which may wait (bounded) for a
    /// busy replica; a donating client processor never waits.
    pub(super) fn serve(&self, processor: bool) -> usize {
        if self.failed.load(Ordering::Acquire) || self.is_closed() || !self.check_server() {
            return 0;
        }
        // URPC's non-spinning lock: another processor serves this channel now.
        let Some(mut s) = self.serving.try_lock() else {
            return 0;
        };
        let n = match self.ready(&mut s) {
            Ok(n) => n,
            Err(why) => {
                drop(s);
                self.fail(CallError::Corrupt(why));
                return 0;
            }
        };
        if n == 0 {
            return 0;
        }
        let server = &self.procs.server;
        let wait = if processor {
            self.export.deadline
        } else {
            Duration::ZERO
        };
        let Some((r, mut store)) = crate::state::domain::pick_replica(&server.replicas, wait)
        else {
            return 0;
        };
        let _busy = processor.then(|| BusyMark::new(&self.procs.busy));
        let kernel = self.kernel.upgrade();
        let mut done = 0;
        let mut replied: [u32; 8] = [0; 8];
        let mut nreplied = 0;
        for _ in 0..n {
            let e = self.layout.req_entry(s.req_tail);
            let (slot, seq, proc) = (
                self.window.load(e),
                self.window.load(e + 4),
                self.window.load(e + 8),
            );
            if slot >= self.layout.slots {
                drop(store);
                drop(s);
                self.fail(CallError::Corrupt("request names no slot"));
                return done;
            }
            let ran = match self.info.get(proc as usize) {
                None => Ok(Status::BadProcedure),
                Some(info) => self.run_request(&mut store, kernel.as_deref(), r, slot, proc, info),
            };
            let status = match ran {
                Ok(status) => status,
                Err(fault) => {
                    drop(store);
                    drop(s);
                    self.server_faulted(kernel.as_deref(), &fault);
                    return done;
                }
            };
            self.post_reply(&mut s, slot, seq, status);
            done += 1;
            replied[nreplied] = slot;
            nreplied += 1;
            // Wake early replies while later requests run.
            if nreplied == replied.len() {
                self.wake(&replied);
                nreplied = 0;
            }
        }
        server.replicas[r].flush_deferred();
        drop(store);
        drop(s);
        self.wake(&replied[..nreplied]);
        if done > 0 {
            self.wake_guest();
        }
        done
    }

    /// How many pending requests the server's loop takes now: those waiting, as many as
    /// the reply ring has room for. The reason the channel is refused when a counter read
    /// from the segment is out of range.
    #[inline]
    fn ready(&self, s: &mut ServerSide) -> Result<u32, &'static str> {
        let slots = self.layout.slots;
        let head = self.window.load(REQ_HEAD);
        let waiting = head.wrapping_sub(s.req_tail);
        if waiting == 0 {
            return Ok(0);
        }
        if waiting > slots {
            return Err("request head out of range");
        }
        let mut in_use = s.rep_head.wrapping_sub(s.rep_tail);
        if in_use >= slots {
            s.rep_tail = self.window.load(REP_TAIL);
            in_use = s.rep_head.wrapping_sub(s.rep_tail);
        }
        if in_use > slots {
            return Err("reply tail out of range");
        }
        Ok(waiting.min(slots - in_use))
    }

    /// Runs procedure `proc` (its `info`) in server replica `r`, whose Store is `store`, on
    /// the A-stack of `slot`, under the export's deadline: the request's status, or the
    /// fault that ended it.
    #[inline]
    fn run_request(
        &self,
        store: &mut Store<DomainData>,
        kernel: Option<&KernelInner>,
        r: usize,
        slot: u32,
        proc: u32,
        info: &ProcInfo,
    ) -> Result<Status, Fault> {
        let mut ctx = store.as_context_mut();
        let deadline = kernel.map_or(0, |k| k.deadline_tick(self.export.deadline));
        let saved = std::mem::replace(&mut ctx.data_mut().deadline_tick, deadline);
        let astack = self.offsets[r] + self.layout.astack(slot);
        let out = self.export.entries[r][proc as usize].call(
            &mut ctx,
            (astack as i32, self.layout.size as i32, 0, 0, info.borrow),
        );
        ctx.data_mut().deadline_tick = saved;
        match out {
            Ok(lrpc_abi::ENTRY_OK) => Ok(Status::Ok),
            Ok(_) => Ok(Status::ServerRejected),
            Err(e) => Err(Fault::classify(&e)),
        }
    }

    /// The server faulted serving this channel (the channel's server side and the replica
    /// let go): the server is terminated and every call in flight on the channels of these
    /// processors fails with the fault's status.
    fn server_faulted(&self, kernel: Option<&KernelInner>, fault: &Fault) {
        let server = &self.procs.server;
        tracing::debug!(server = server.core.name, %fault, "server faulted serving a channel");
        // The fault is recorded before the server is marked terminated, so that every
        // channel of these processors that learns of the termination (`check_server`)
        // fails with the fault's status; and the server is terminated before any call
        // fails, so that a client seeing its call fail sees the server terminated.
        let err = CallError::Failed(fault.status());
        self.procs
            .fault
            .compare_exchange(
                0,
                fault.status() as i32,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .ok();
        if let Some(k) = kernel {
            crate::terminate::terminate_shared(k, server);
        }
        self.fail(err.clone());
        let others: Vec<_> = lock(&self.procs.channels)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for ch in others {
            ch.fail(err.clone());
        }
    }

    /// Posts the reply `status` to the call `seq` on `slot`, and takes its request off the
    /// request ring.
    #[inline]
    fn post_reply(&self, s: &mut ServerSide, slot: u32, seq: u32, status: Status) {
        let rep = self.layout.rep_entry(s.rep_head);
        self.window.store(rep, slot);
        self.window.store(rep + 4, seq);
        self.window.store(rep + 8, status as i32 as u32);
        s.req_tail = s.req_tail.wrapping_add(1);
        s.rep_head = s.rep_head.wrapping_add(1);
        self.window.store(REQ_TAIL, s.req_tail);
        self.window.store(REP_HEAD, s.rep_head);
    }

    /// Wakes the futures waiting for replies just posted to `slots`. Only slots whose
    /// future registered a waker (`armed`) cost a lock: executors that poll (`try_take`)
    /// register none. The fence pairs with the one in `Call::poll`: either this side sees
    /// the slot armed, or the future's look after arming sees the reply.
    fn wake(&self, slots: &[u32]) {
        if slots.is_empty() {
            return;
        }
        fence(Ordering::SeqCst);
        for &slot in slots {
            if let (Some(armed), Some(w)) = (
                self.armed.get(slot as usize),
                self.wakers.get(slot as usize),
            ) && armed.load(Ordering::Relaxed)
                && armed.swap(false, Ordering::AcqRel)
                && let Some(w) = lock(w).take()
            {
                w.wake();
            }
        }
    }
}
