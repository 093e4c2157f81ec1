//! The embedder's side of a channel: its asynchronous binding ([`AsyncBinding`]) and the
//! future of each call ([`Call`]), which takes its reply when it lands and, when the server
//! has no processor free, runs the server's loop for the channel first (donation).

use super::client::{SlotState, WAITING};
use super::{CallError, ChannelShared};
use crate::sync::lock;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::task::{Context, Poll, Waker};

/// Polls a call waits with every server processor busy before its client processor helps
/// (with S = 0 it helps at once): a server keeping up with its load is left to its own
/// processors, which a client probing the channel's lock on every poll would only slow.
const DONATE_AFTER: u32 = 1_000;

/// An asynchronous binding held by the embedder: calls are messages on a channel served by
/// the server's [`Processors`]. Dropping it unbinds.
pub struct AsyncBinding {
    pub(super) ch: Arc<ChannelShared>,
}

impl std::fmt::Debug for AsyncBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncBinding")
            .field("export", &self.ch.export.name)
            .field("slots", &self.ch.layout.slots)
            .finish()
    }
}

impl AsyncBinding {
    /// The index of procedure `name` of the bound interface.
    pub fn procedure(&self, name: &str) -> Option<usize> {
        self.ch
            .export
            .plan
            .procs
            .iter()
            .position(|p| p.name == name)
    }

    /// Calls procedure `proc` with its encoded arguments (the kernel's encoding, as on an
    /// A-stack: see `lrpc_presentation::plan`); the future resolves to the encoded results
    /// when the reply lands. Polling it never blocks; with no processor of the server's own
    /// (S = 0) it runs the server's loop for this channel first (processor donation).
    /// Dropping it before it resolves cancels the call: the reply, if one comes, is
    /// discarded.
    pub fn call_async(&self, proc: usize, args: &[u8]) -> Call {
        match self.ch.submit(proc, args) {
            Ok((slot, seq)) => Call {
                ch: self.ch.clone(),
                slot,
                seq,
                state: CallState::InFlight,
                polls: 0,
            },
            Err(e) => Call {
                ch: self.ch.clone(),
                slot: 0,
                seq: 0,
                state: CallState::Refused(Some(e)),
                polls: 0,
            },
        }
    }

    /// Calls and waits on this thread, polling (and donating when S = 0).
    pub fn call_blocking(&self, proc: usize, args: &[u8]) -> Result<Vec<u8>, CallError> {
        let mut call = self.call_async(proc, args);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut spins = 0u32;
        loop {
            if let Poll::Ready(r) = Pin::new(&mut call).poll(&mut cx) {
                return r;
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Runs the server's loop for this channel once on this thread (what an idle client
    /// processor does when the server has no processor of its own); how many requests ran.
    pub fn donate(&self) -> usize {
        self.ch.serve(false)
    }

    /// Calls in flight (including cancelled ones whose reply has not arrived).
    pub fn in_flight(&self) -> usize {
        let c = lock(&self.ch.client);
        c.slots.len() - c.free.len()
    }

    /// The segment's place in server replica 0's memory: offset and length (for tests that
    /// play a hostile server).
    pub fn window(&self) -> (usize, usize) {
        (self.ch.offsets[0], self.ch.layout.len)
    }

    /// Unbinds: calls in flight fail with [`CallError::Closed`], the segment leaves the
    /// server's memory.
    pub fn unbind(self) {
        self.ch.close();
    }
}

impl Drop for AsyncBinding {
    fn drop(&mut self) {
        self.ch.close();
    }
}

enum CallState {
    InFlight,
    Refused(Option<CallError>),
    Finished,
}

/// An asynchronous call in flight (see [`AsyncBinding::call_async`]).
#[must_use = "a call is cancelled when its future is dropped"]
pub struct Call {
    ch: Arc<ChannelShared>,
    slot: u32,
    seq: u32,
    state: CallState,
    /// Times this call was polled without its reply.
    polls: u32,
}

impl Future for Call {
    type Output = Result<Vec<u8>, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match &mut this.state {
            CallState::Refused(e) => {
                let e = e.take().unwrap_or(CallError::Closed);
                this.state = CallState::Finished;
                return Poll::Ready(Err(e));
            }
            CallState::Finished => return Poll::Ready(Err(CallError::Closed)),
            CallState::InFlight => {}
        }
        if let Some(r) = this.try_take() {
            return Poll::Ready(r);
        }
        // Register, then look again, so a reply posted in between wakes us.
        {
            let mut w = lock(&this.ch.wakers[this.slot as usize]);
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        this.ch.armed[this.slot as usize].store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if let Some(r) = this.take_done() {
            return Poll::Ready(r);
        }
        Poll::Pending
    }
}

impl Call {
    /// Takes the reply if it has landed, without registering a waker: for executors that
    /// poll their channels when they have nothing runnable (URPC's user-level scheduler)
    /// rather than wait to be woken. When the server has no processor free (S = 0, or all
    /// busy) it runs the server's loop for this channel first.
    pub fn try_take(&mut self) -> Option<Result<Vec<u8>, CallError>> {
        match &mut self.state {
            CallState::Refused(e) => {
                let e = e.take().unwrap_or(CallError::Closed);
                self.state = CallState::Finished;
                return Some(Err(e));
            }
            CallState::Finished => return Some(Err(CallError::Closed)),
            CallState::InFlight => {}
        }
        let procs = &self.ch.procs;
        let running = procs.running.load(Ordering::Acquire);
        self.polls = self.polls.saturating_add(1);
        let underpowered = running == 0
            || (self.polls > DONATE_AFTER && procs.busy.load(Ordering::Acquire) >= running);
        if underpowered {
            // Processor reallocation (URPC 5): the server has no processor free, this
            // client processor has nothing to run, so it runs the server's loop for this
            // channel, once, and goes back to its own threads.
            self.ch.serve(false);
        } else {
            self.ch.check_server();
        }
        self.take_done()
    }

    /// Harvests the replies and takes this call's, if it is there.
    fn take_done(&mut self) -> Option<Result<Vec<u8>, CallError>> {
        let ch = &self.ch;
        let mut c = lock(&ch.client);
        ch.harvest(&mut c);
        let slot = self.slot as usize;
        if let SlotState::Done { seq, .. } = c.slots[slot]
            && seq == self.seq
        {
            let SlotState::Done { result, .. } =
                std::mem::replace(&mut c.slots[slot], SlotState::Free)
            else {
                unreachable!("matched above");
            };
            c.free.push(self.slot);
            self.state = CallState::Finished;
            return Some(result);
        }
        None
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if !matches!(self.state, CallState::InFlight) {
            return;
        }
        let mut c = lock(&self.ch.client);
        self.ch.harvest(&mut c);
        let slot = self.slot as usize;
        match c.slots[slot].key() {
            (WAITING, s) if s == self.seq => {
                // Cancelled: the slot stays taken until the reply comes, which is dropped.
                c.slots[slot] = SlotState::Abandoned { seq: self.seq };
            }
            (3, s) if s == self.seq => {
                c.slots[slot] = SlotState::Free;
                c.free.push(self.slot);
            }
            _ => {}
        }
        drop(c);
        self.ch.armed[slot].store(false, Ordering::Release);
        lock(&self.ch.wakers[slot]).take();
    }
}
