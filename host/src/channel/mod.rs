//! URPC channels (Bershad et al., TOCS 9(2), sections 2–4): asynchronous calls as messages
//! in memory shared by exactly one client and one server, served by the server's own
//! processors, beside the synchronous migrating call.
//!
//! # Shape
//!
//! An asynchronous binding ([`Processors::bind`]) is one memfd segment — a header, a request
//! ring, a reply ring and one A-stack per *slot* (a call in flight) — mapped into every replica
//! of the server through the same window mechanism as A-stacks (`Replica::alloc_window`,
//! `MemoryRange::map`). Its client is the embedder: the kernel is its processor and reaches
//! the segment through its mapping in the server's memory, so the segment is in no third
//! domain's memory (see `ring` for the layout). Or its client is a guest domain
//! (`lrpc.channel_bind`, see `guest`): then the segment is mapped into the calling client
//! replica too, the guest's SDK plays the client side below in the guest's own memory, and
//! the server side is the same code, trusting the client's values no more than the server's.
//!
//! ```text
//!  client (embedder thread / tokio task)          server's processors (S OS threads)
//!  ─────────────────────────────────────          ──────────────────────────────────
//!  take a free slot, write args on its A-stack
//!  request ring[head] = (slot, seq, proc)
//!  publish request head (release store) ────────▶ poll: request head (acquire) − own tail
//!  wake a parked processor if any                  take the channel's try-lock (no spin)
//!                                                  run the entry stub on the slot's A-stack
//!  poll: reply head (acquire) − own tail  ◀─────── reply ring[head] = (slot, seq, status),
//!  check slot and seq, read results                publish reply head (release), wake slot
//! ```
//!
//! Sending a request or a reply is a store to shared memory; nothing crosses into a domain
//! on the way except the server's entry stub itself. A processor spins a bounded number of
//! while it has nothing to do ([`IDLE_SPIN`]) and then parks on a condition variable; a
//! client that publishes a request wakes it only if it is parked. When the server has no
//! processor free — **S = 0**, or all S are running requests (of other channels, or a long
//! one) — an idle client processor, the thread polling a call's future, runs the server's
//! loop for its channel once (URPC's processor reallocation to the underpowered domain) and
//! goes back to its own work right after: it serves at most one ring's worth per poll, and
//! never waits for a busy server replica (with one replica, a donor can only help when the
//! processors are between requests; give the server replicas to let donors run beside them).
//!
//! # Synchronisation, and why plain accesses are sound here
//!
//! Every host access to a ring counter is an atomic `u32` load with acquire or store with
//! release ordering (`ring::SegmentView`); the payload (ring entries, A-stacks) is copied with
//! volatile byte accesses. The client and the server loop are both host code, so the
//! protocol is an ordinary single-producer/single-consumer ring under the Rust memory model:
//! the producer writes the entry and A-stack, then release-stores the head; the consumer
//! acquire-loads the head, then reads the entry. One try-lock per channel (`serving`, a
//! `TryLock`, never spun on: a processor that finds it taken moves on to its next channel,
//! as URPC's non-spinning locks do) makes the server side single-consumer across S threads.
//!
//! The server's guest code also has the pages mapped, and may write anything into them at
//! any time (it is untrusted, exactly as on an A-stack). Its stores are plain wasm stores,
//! which Cranelift lowers on x86-64 to aligned `mov`s of at most 8 bytes: a concurrent host
//! atomic load sees either the old or the new value of a word, never a torn mix, and the
//! values it sees are only ever *used after validation*. A guest therefore can not cause a
//! data race in host code; it can only make the values the host reads wrong, which is what
//! the checks below are for. (Async channels are therefore built only on x86-64; a weaker
//! host memory model would need the guest to use wasm atomics on the window.)
//!
//! # Nothing read from the segment is trusted
//!
//! * Counters: `head − tail` (wrapping) must be at most the number of slots, or the channel
//!   is refused (every call in flight fails with [`CallError::Corrupt`]). The host keeps its
//!   own copy of the counters it owns and never reads them back.
//! * Entries: a request names a slot below `slots` and a procedure of the interface; a reply
//!   names a slot that has a call in flight with exactly that sequence number (sequence
//!   numbers are the host's, per slot, never reused while a reply may still arrive).
//! * Each poll consumes at most `slots` entries: a peer can not make the other side loop.
//! * Every copy is bounds checked against the segment, so no value can make the host read
//!   or write outside the channel.
//!
//! # Failure
//!
//! A server that traps or runs past its deadline while serving a channel is terminated (as on
//! the synchronous path), and every call in flight on its channels fails with the fault's
//! status; one terminated from elsewhere is noticed by its processors and by the clients'
//! polls. A cancelled call (its future dropped) keeps its slot until its reply arrives, and
//! that reply is discarded: it can never be delivered to the slot's next call.
//!
//! # Files
//!
//! * `processors`: a server's processors (S threads), their loop and their registry;
//! * `open`: opening a channel (its segment placed in every server replica, the window, the
//!   charge) and closing it;
//! * `serve`: the server side, the server's loop for one channel;
//! * `client`: the client side kept by the host (requests, replies, slots);
//! * `binding`: the embedder's asynchronous binding and its calls' futures;
//! * `ring`: the segment's layout and its accesses; `guest`: channels whose client is a
//!   guest domain; `tokio_api`: waiting for a call from tokio.

mod binding;
mod client;
pub(crate) mod guest;
mod open;
mod processors;
mod ring;
mod serve;
#[cfg(feature = "tokio")]
mod tokio_api;

pub use binding::{AsyncBinding, Call};
pub(crate) use guest::{HANDLE_BIT, MAX_WAIT};
pub(crate) use processors::ProcShared;
pub use processors::Processors;

use crate::quota::Charge;
use crate::state::clerk::ExportEntry;
use crate::state::kernel::KernelInner;
use crate::sync::lock;
use client::ClientSide;
use lrpc_abi::Status;
use lrpc_lock::TryLock;
use ring::{Layout, REQ_HEAD, REQ_TAIL, SegmentView};
use serve::ServerSide;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::task::Waker;
use std::time::Duration;

/// How long a processor polls with nothing to do before it parks.
pub const IDLE_SPIN: Duration = Duration::from_micros(200);

/// Why an asynchronous call did not return results.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The call failed in the server, or the server failed while the call was in flight
    /// (trapped, terminated, past its deadline: the call-failed statuses of the synchronous
    /// path), or the server refused the request as malformed.
    #[error("the call failed: {0:?}")]
    Failed(Status),
    /// A value read from the channel was out of range (a ring index, a slot, a sequence
    /// number, a result length): the channel is refused and every call on it fails.
    #[error("the channel was refused: {0}")]
    Corrupt(&'static str),
    /// The binding was unbound.
    #[error("the asynchronous binding is closed")]
    Closed,
    /// Every slot of the channel holds a call in flight.
    #[error("every slot of the channel is in use")]
    Full,
    /// The procedure index is out of range.
    #[error("no procedure {0}")]
    BadProcedure(usize),
    /// The embedder's timeout passed first; the call was cancelled (its reply, if one
    /// comes, is discarded).
    #[error("timed out; the call was cancelled")]
    TimedOut,
    /// The arguments do not fit the channel's A-stack.
    #[error("{len} bytes of arguments do not fit an A-stack of {cap}")]
    TooLarge {
        /// Encoded argument bytes.
        len: usize,
        /// What fits.
        cap: usize,
    },
}

/// Options of one asynchronous binding.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ChannelOptions {
    /// Calls that may be in flight at once (each has an A-stack); at most 256.
    pub slots: u32,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions { slots: 32 }
    }
}

setters!(ChannelOptions {
    with_slots => slots: u32,
});

/// A value on cache lines of its own: 128 bytes, the pair of 64-byte lines an x86-64 core
/// fetches together. The client's processor and the server's each write some state on every
/// call (a lock word, a counter); kept beside what the other side reads, that state would
/// move a line between their cores on every call, on top of the ring's own transfers.
#[repr(align(128))]
struct Lines<T>(T);

impl<T> std::ops::Deref for Lines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Per procedure: how its arguments and results sit on an A-stack.
struct ProcInfo {
    bounded: bool,
    out_bound: usize,
    borrow: i32,
}

/// One channel. Aligned to two cache lines, so that the reference counts of its `Arc`
/// (taken by every call the embedder makes) share no line with the fields the server's
/// processors read; the server's and the client's own counters are on lines of their own.
#[repr(align(128))]
pub(crate) struct ChannelShared {
    kernel: Weak<KernelInner>,
    procs: Arc<ProcShared>,
    export: Arc<ExportEntry>,
    info: Box<[ProcInfo]>,
    layout: Layout,
    window: SegmentView,
    /// Where the segment is in each server replica's memory.
    offsets: Box<[usize]>,
    serving: Lines<TryLock<ServerSide>>,
    client: Lines<Mutex<ClientSide>>,
    wakers: Box<[Mutex<Option<Waker>>]>,
    /// Per slot: a future registered a waker in `wakers` (see `wake`).
    armed: Box<[AtomicBool]>,
    failed: AtomicBool,
    closed: AtomicBool,
    charge: Charge,
    /// The client is a guest domain (see `guest`): it keeps its own client side in its
    /// memory, and the host's `client` half is unused but for the failure.
    guest: bool,
    /// A guest client waiting in `channel_wait` parks here; the server side wakes it when
    /// it posts replies or the channel fails.
    guest_park: Mutex<()>,
    guest_wake: Condvar,
    guest_sleepers: AtomicUsize,
}

impl ChannelShared {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether requests wait (a hint read from the segment; `serve` validates).
    fn pending(&self) -> bool {
        !self.failed.load(Ordering::Acquire)
            && self.window.load(REQ_HEAD) != self.window.load(REQ_TAIL)
    }

    /// Fails every call in flight with `err` and refuses later ones.
    fn fail(&self, err: CallError) {
        let mut c = lock(&self.client);
        // Replies posted before the failure still reach their calls (a guest client
        // harvests its own, before it asks why the channel failed).
        if !self.guest {
            self.harvest(&mut c);
        }
        self.fail_locked(&mut c, err);
        drop(c);
        self.wake_guest();
    }

    /// Notices a server terminated from elsewhere.
    fn check_server(&self) -> bool {
        if self.procs.server.core.terminated.load(Ordering::Acquire) {
            if !self.failed.load(Ordering::Acquire) {
                // A fault of the server while one of these processors ran it, or a
                // termination from elsewhere.
                let status = Status::try_from(self.procs.fault.load(Ordering::Acquire))
                    .ok()
                    .filter(|s| *s != Status::Ok)
                    .unwrap_or(Status::ServerTerminated);
                self.fail(CallError::Failed(status));
            }
            return false;
        }
        true
    }

    /// Wakes a guest client parked in `channel_wait`, if one is. The caller published
    /// replies (or the failure) before; the fence pairs with the waiter's, which counts
    /// itself a sleeper before it looks at the reply head one last time.
    fn wake_guest(&self) {
        if !self.guest {
            return;
        }
        fence(Ordering::SeqCst);
        if self.guest_sleepers.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.guest_park);
            self.guest_wake.notify_all();
        }
    }
}
