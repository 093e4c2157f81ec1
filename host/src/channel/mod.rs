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

pub(crate) mod guest;
mod ring;
#[cfg(feature = "tokio")]
mod tokio_api;

use crate::error::{Error, Fault};
use crate::quota::Charge;
use crate::state::clerk::ExportEntry;
use crate::state::domain::{Domain, DomainShared};
use crate::state::kernel::{Kernel, KernelInner};
use crate::sync::lock;
pub(crate) use guest::{HANDLE_BIT, MAX_WAIT};
use lrpc_abi::Status;
use lrpc_lock::TryLock;
use lrpc_presentation::{Side, SidePresentation};
use ring::{Layout, REP_HEAD, REP_TAIL, REQ_HEAD, REQ_TAIL, SegmentView};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wasmtime::AsContextMut;

/// How long a processor polls with nothing to do before it parks.
pub const IDLE_SPIN: Duration = Duration::from_micros(200);

/// Polls a call waits with every server processor busy before its client processor helps
/// (with S = 0 it helps at once): a server keeping up with its load is left to its own
/// processors, which a client probing the channel's lock on every poll would only slow.
const DONATE_AFTER: u32 = 1_000;

/// How long a parked processor sleeps before it looks again on its own (a safety net: a
/// client wakes it when it publishes a request).
const PARK: Duration = Duration::from_millis(10);

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

/// A server domain's processors: S OS threads running its dispatch loop over its channels
/// (S may be 0: then the clients' idle processors run it, see the module docs). Dropping it
/// stops the threads; bindings made through it keep working by donation.
pub struct Processors {
    shared: Arc<ProcShared>,
    threads: Vec<JoinHandle<()>>,
}

pub(crate) struct ProcShared {
    kernel: Weak<KernelInner>,
    pub(crate) server: Arc<DomainShared>,
    channels: Mutex<Vec<Weak<ChannelShared>>>,
    /// Bumped whenever `channels` changes, so processors refresh their copy.
    version: AtomicU64,
    /// Processors running (0 once stopped: clients donate).
    running: AtomicUsize,
    /// Processors running requests now (when all are, idle clients donate). Written twice
    /// per batch a processor serves; clients read `running` on every poll.
    busy: Lines<AtomicUsize>,
    /// The status of the fault that terminated the server while it served one of these
    /// processors' channels (0: none).
    fault: AtomicI32,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
}

impl ProcShared {
    /// Wakes a parked processor, if one is parked. The caller published its request before.
    fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.park);
            self.wake.notify_one();
        }
    }
}

impl Processors {
    /// Starts `threads` processors for `server`.
    pub fn start(kernel: &Kernel, server: &Domain, threads: usize) -> Result<Processors, Error> {
        if !cfg!(target_arch = "x86_64") {
            return Err(Error::Presentation(
                "asynchronous channels need an x86-64 host (see the `channel` module docs)".into(),
            ));
        }
        let shared = Arc::new(ProcShared {
            kernel: Arc::downgrade(&kernel.inner),
            server: server.shared.clone(),
            channels: Mutex::new(Vec::new()),
            version: AtomicU64::new(0),
            running: AtomicUsize::new(threads),
            busy: Lines(AtomicUsize::new(0)),
            fault: AtomicI32::new(0),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
        });
        {
            // The registry through which guests' `channel_bind` finds these processors.
            let mut features = lock(&kernel.inner.features);
            let all = &mut features.get_or_default::<Registry>().0;
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&shared));
        }
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("lrpc-cpu-{}-{i}", server.name()))
                .spawn(move || processor(&s));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let _ = Processors {
                        shared,
                        threads: handles,
                    };
                    return Err(Error::Thread(e));
                }
            }
        }
        Ok(Processors {
            shared,
            threads: handles,
        })
    }

    /// How many processors the server has (S).
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// How many of them are running requests right now.
    pub fn busy(&self) -> usize {
        self.shared.busy.load(Ordering::Acquire)
    }

    /// Makes an asynchronous binding from the embedder to the interface exported under
    /// `name` by this server domain.
    pub fn bind(&self, name: &str, options: ChannelOptions) -> Result<AsyncBinding, Error> {
        let p = &self.shared;
        let kernel = p.kernel.upgrade().ok_or(Error::KernelGone)?;
        let export = kernel
            .clerk
            .get(name)
            .ok_or_else(|| Error::UnknownInterface(name.to_string()))?;
        if !Arc::ptr_eq(&export.server, &p.server) {
            return Err(Error::Presentation(format!(
                "`{name}` is not exported by `{}`",
                p.server.core.name
            )));
        }
        if p.server.core.terminated.load(Ordering::Acquire) {
            return Err(Error::Terminated(p.server.core.name.clone()));
        }
        let (ch, _segment) = ChannelShared::new(&kernel, p.clone(), export, options, false)?;
        let ch = Arc::new(ch);
        p.attach(&ch);
        Ok(AsyncBinding { ch })
    }
}

impl ProcShared {
    /// Puts a new channel on the processors' list.
    fn attach(&self, ch: &Arc<ChannelShared>) {
        lock(&self.channels).push(Arc::downgrade(ch));
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The live processors registered for `server` (see [`Processors::start`]), the latest
    /// started first.
    pub(crate) fn of(kernel: &KernelInner, server: &Arc<DomainShared>) -> Option<Arc<ProcShared>> {
        lock(&kernel.features)
            .get::<Registry>()?
            .0
            .iter()
            .rev()
            .filter_map(Weak::upgrade)
            .find(|p| Arc::ptr_eq(&p.server, server) && !p.stop.load(Ordering::Acquire))
    }
}

/// Every server's processors (kept in the kernel's feature tables), so that a guest's
/// `channel_bind` finds the processors of the server it binds to.
#[derive(Default)]
struct Registry(Vec<Weak<ProcShared>>);

impl Drop for Processors {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _g = lock(&self.shared.park);
            self.shared.wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.shared.running.store(0, Ordering::Release);
    }
}

/// One processor: poll every channel of the server, run what is pending, park when idle.
fn processor(p: &ProcShared) {
    let mut seen = u64::MAX;
    let mut list: Vec<Arc<ChannelShared>> = Vec::new();
    let mut idle: Option<Instant> = None;
    while !p.stop.load(Ordering::Acquire) {
        let v = p.version.load(Ordering::Acquire);
        if v != seen {
            seen = v;
            let mut chans = lock(&p.channels);
            chans.retain(|w| w.upgrade().is_some_and(|c| !c.is_closed()));
            list = chans.iter().filter_map(Weak::upgrade).collect();
        }
        let mut did = 0;
        for ch in &list {
            did += ch.serve(true);
        }
        if did > 0 {
            idle = None;
            continue;
        }
        let since = *idle.get_or_insert_with(Instant::now);
        if since.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
            continue;
        }
        let g = lock(&p.park);
        p.sleepers.fetch_add(1, Ordering::SeqCst);
        let pending = list.iter().any(|c| c.pending());
        if !pending && !p.stop.load(Ordering::Acquire) && p.version.load(Ordering::Acquire) == seen
        {
            let _ = p.wake.wait_timeout(g, PARK);
        }
        p.sleepers.fetch_sub(1, Ordering::SeqCst);
        idle = None;
    }
}

/// Counts a processor as busy while it lives.
struct BusyMark<'a>(&'a AtomicUsize);

impl<'a> BusyMark<'a> {
    fn new(busy: &'a AtomicUsize) -> BusyMark<'a> {
        busy.fetch_add(1, Ordering::AcqRel);
        BusyMark(busy)
    }
}

impl Drop for BusyMark<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Per procedure: how its arguments and results sit on an A-stack.
struct ProcInfo {
    bounded: bool,
    out_bound: usize,
    borrow: i32,
}

/// The server side's own counters (never read back from the segment).
struct ServerSide {
    req_tail: u32,
    rep_head: u32,
    /// The client's reply tail as last read: read again only when the reply ring looks
    /// full, so the client's stores to it do not pull its line over on every request.
    rep_tail: u32,
}

enum SlotState {
    Free,
    Waiting {
        seq: u32,
    },
    Abandoned {
        seq: u32,
    },
    Done {
        seq: u32,
        result: Result<Vec<u8>, CallError>,
    },
}

const WAITING: u8 = 1;
const ABANDONED: u8 = 2;

impl SlotState {
    /// The state's kind and sequence number, to match on without borrowing.
    fn key(&self) -> (u8, u32) {
        match *self {
            SlotState::Free => (0, 0),
            SlotState::Waiting { seq } => (WAITING, seq),
            SlotState::Abandoned { seq } => (ABANDONED, seq),
            SlotState::Done { seq, .. } => (3, seq),
        }
    }
}

struct ClientSide {
    req_head: u32,
    rep_tail: u32,
    slots: Vec<SlotState>,
    seqs: Vec<u32>,
    /// The procedure of each slot's call (for reading its results).
    procs: Vec<usize>,
    free: Vec<u32>,
    failure: Option<CallError>,
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
    fn new(
        kernel: &KernelInner,
        procs: Arc<ProcShared>,
        export: Arc<ExportEntry>,
        options: ChannelOptions,
        guest: bool,
    ) -> Result<(ChannelShared, crate::astack::Segment), Error> {
        let server = procs.server.clone();
        let bad = |why: String| Error::Presentation(why);
        if options.slots == 0 || options.slots > ring::MAX_SLOTS {
            return Err(bad(format!(
                "a channel has 1 to {} slots, not {}",
                ring::MAX_SLOTS,
                options.slots
            )));
        }
        let client = SidePresentation::default_for(&export.plan.name, Side::Client);
        let combination = lrpc_presentation::combine(&export.plan, &client, &export.presentation)?;
        let info: Box<[ProcInfo]> = export
            .plan
            .procs
            .iter()
            .zip(&combination.procs)
            .map(|(p, c)| ProcInfo {
                bounded: p.bounded,
                out_bound: p.out_bound.unwrap_or(0),
                borrow: c.borrow_mask() as i32,
            })
            .collect();
        let size = export
            .plan
            .procs
            .iter()
            .map(|p| p.astack_size)
            .max()
            .unwrap_or(lrpc_abi::MIN_ASTACK_SIZE)
            .max(lrpc_abi::MIN_ASTACK_SIZE)
            .checked_next_multiple_of(64)
            .ok_or_else(|| bad("A-stack size overflows".into()))?;
        let layout =
            Layout::new(options.slots, size).ok_or_else(|| bad("channel too large".into()))?;
        let charge = Charge {
            mappings: server.replicas.len() as u64,
            astack_bytes: layout.len as u64,
            ..Charge::default()
        };
        server.core.account.charge(&charge)?;
        let placed = place(kernel, &server, &export, &layout);
        let (offsets, base, segment) = match placed {
            Ok(p) => p,
            Err(e) => {
                server.core.account.refund(&charge);
                return Err(e);
            }
        };
        #[allow(
            unsafe_code,
            reason = "the one place a channel's window is made; argued above"
        )]
        // SAFETY: `base` is replica 0's mapping of the segment: `layout.len` bytes inside
        // that replica's linear memory, page aligned. The memory's Store lives as long as
        // `server` (held by `procs`, which this channel holds), its 4 GiB reservation never
        // moves, and the window's pages stay allocated to this channel until `Drop` (after
        // every user of the `SegmentView`, all of which hold the channel).
        let window = unsafe { SegmentView::new(base, layout.len) };
        window.store(0, ring::MAGIC);
        window.store(4, layout.slots);
        window.store(8, layout.size);
        let n = options.slots as usize;
        let ch = ChannelShared {
            kernel: Arc::downgrade(&procs.kernel.upgrade().ok_or(Error::KernelGone)?),
            procs,
            export,
            info,
            layout,
            window,
            offsets,
            serving: Lines(TryLock::new(ServerSide {
                req_tail: 0,
                rep_head: 0,
                rep_tail: 0,
            })),
            client: Lines(Mutex::new(ClientSide {
                req_head: 0,
                rep_tail: 0,
                slots: (0..n).map(|_| SlotState::Free).collect(),
                seqs: vec![0; n],
                procs: vec![0; n],
                free: (0..options.slots).rev().collect(),
                failure: None,
            })),
            wakers: (0..n).map(|_| Mutex::new(None)).collect(),
            armed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            failed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            charge,
            guest,
            guest_park: Mutex::new(()),
            guest_wake: Condvar::new(),
            guest_sleepers: AtomicUsize::new(0),
        };
        Ok((ch, segment))
    }

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

    fn fail_locked(&self, c: &mut ClientSide, err: CallError) {
        if c.failure.is_none() {
            c.failure = Some(err.clone());
        }
        self.failed.store(true, Ordering::Release);
        for (i, s) in c.slots.iter_mut().enumerate() {
            match s {
                SlotState::Waiting { seq } => {
                    *s = SlotState::Done {
                        seq: *seq,
                        result: Err(err.clone()),
                    };
                }
                SlotState::Abandoned { .. } => {
                    *s = SlotState::Free;
                    c.free.push(i as u32);
                }
                _ => {}
            }
        }
        for w in self.wakers.iter() {
            if let Some(w) = lock(w).take() {
                w.wake();
            }
        }
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

    /// The server's loop for this channel, once: takes the pending requests (at most one
    /// ring's worth), runs each in the server and posts its reply. Returns how many ran.
    /// `processor`: run by one of the server's processors, which may wait (bounded) for a
    /// busy replica; a donating client processor never waits.
    fn serve(&self, processor: bool) -> usize {
        if self.failed.load(Ordering::Acquire) || self.is_closed() || !self.check_server() {
            return 0;
        }
        // URPC's non-spinning lock: another processor serves this channel now.
        let Some(mut s) = self.serving.try_lock() else {
            return 0;
        };
        let slots = self.layout.slots;
        let head = self.window.load(REQ_HEAD);
        let waiting = head.wrapping_sub(s.req_tail);
        if waiting == 0 {
            return 0;
        }
        if waiting > slots {
            drop(s);
            self.fail(CallError::Corrupt("request head out of range"));
            return 0;
        }
        let mut in_use = s.rep_head.wrapping_sub(s.rep_tail);
        if in_use >= slots {
            s.rep_tail = self.window.load(REP_TAIL);
            in_use = s.rep_head.wrapping_sub(s.rep_tail);
        }
        if in_use > slots {
            drop(s);
            self.fail(CallError::Corrupt("reply tail out of range"));
            return 0;
        }
        let n = waiting.min(slots - in_use);
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
            if slot >= slots {
                drop(store);
                drop(s);
                self.fail(CallError::Corrupt("request names no slot"));
                return done;
            }
            let status = match self.info.get(proc as usize) {
                None => Status::BadProcedure,
                Some(info) => {
                    let mut ctx = store.as_context_mut();
                    let deadline = kernel
                        .as_ref()
                        .map_or(0, |k| k.deadline_tick(self.export.deadline));
                    let saved = std::mem::replace(&mut ctx.data_mut().deadline_tick, deadline);
                    let astack = self.offsets[r] + self.layout.astack(slot);
                    let out = self.export.entries[r][proc as usize].call(
                        &mut ctx,
                        (astack as i32, self.layout.size as i32, 0, 0, info.borrow),
                    );
                    ctx.data_mut().deadline_tick = saved;
                    match out {
                        Ok(lrpc_abi::ENTRY_OK) => Status::Ok,
                        Ok(_) => Status::ServerRejected,
                        Err(e) => {
                            let fault = Fault::classify(&e);
                            drop(store);
                            drop(s);
                            tracing::debug!(server = server.core.name, %fault, "server faulted serving a channel");
                            // The fault is recorded before the server is marked terminated,
                            // so that every channel of these processors that learns of the
                            // termination (`check_server`) fails with the fault's status;
                            // and the server is terminated before any call fails, so that a
                            // client seeing its call fail sees the server terminated.
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
                            if let Some(k) = &kernel {
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
                            return done;
                        }
                    }
                }
            };
            let rep = self.layout.rep_entry(s.rep_head);
            self.window.store(rep, slot);
            self.window.store(rep + 4, seq);
            self.window.store(rep + 8, status as i32 as u32);
            s.req_tail = s.req_tail.wrapping_add(1);
            s.rep_head = s.rep_head.wrapping_add(1);
            self.window.store(REQ_TAIL, s.req_tail);
            self.window.store(REP_HEAD, s.rep_head);
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

    /// Takes the replies the server posted (at most one ring's worth), checking each
    /// against the calls in flight. Called with the client side locked.
    fn harvest(&self, c: &mut ClientSide) {
        if c.failure.is_some() {
            return;
        }
        let slots = self.layout.slots;
        let head = self.window.load(REP_HEAD);
        let n = head.wrapping_sub(c.rep_tail);
        if n > slots {
            self.fail_locked(c, CallError::Corrupt("reply head out of range"));
            return;
        }
        for _ in 0..n {
            let e = self.layout.rep_entry(c.rep_tail);
            let (slot, seq, status) = (
                self.window.load(e),
                self.window.load(e + 4),
                self.window.load(e + 8) as i32,
            );
            let Some(&cur) = c.slots.get(slot as usize).map(SlotState::key).as_ref() else {
                self.fail_locked(c, CallError::Corrupt("reply names no slot"));
                return;
            };
            match cur {
                (WAITING, s) if s == seq => {
                    let result = match Status::try_from(status) {
                        Ok(Status::Ok) => self.results(slot, c.procs.get(slot as usize).copied()),
                        Ok(other) => Err(CallError::Failed(other)),
                        Err(_) => {
                            self.fail_locked(c, CallError::Corrupt("reply status unknown"));
                            return;
                        }
                    };
                    c.slots[slot as usize] = SlotState::Done { seq, result };
                }
                (ABANDONED, s) if s == seq => {
                    // A cancelled call's late reply: discarded, the slot is free again.
                    c.slots[slot as usize] = SlotState::Free;
                    c.free.push(slot);
                }
                _ => {
                    self.fail_locked(c, CallError::Corrupt("reply names no call in flight"));
                    return;
                }
            }
            c.rep_tail = c.rep_tail.wrapping_add(1);
        }
        if n > 0 {
            self.window.store(REP_TAIL, c.rep_tail);
        }
    }

    /// Reads a successful call's results off its slot's A-stack, checking their length.
    fn results(&self, slot: u32, proc: Option<usize>) -> Result<Vec<u8>, CallError> {
        let info = proc
            .and_then(|p| self.info.get(p))
            .ok_or(CallError::Corrupt("reply for an unknown procedure"))?;
        let at = self.layout.astack(slot);
        let cap = self.layout.size as usize;
        let (off, len) = if info.bounded {
            (0, info.out_bound)
        } else {
            let flags = self.window.load(at);
            let len = self.window.load(at + 4) as usize;
            if flags & lrpc_abi::header::OOB != 0 {
                return Err(CallError::Failed(Status::BadReply));
            }
            (lrpc_abi::header::LEN, len)
        };
        if off + len > cap {
            return Err(CallError::Failed(Status::BadReply));
        }
        let mut out = vec![0; len];
        self.window
            .read(at + off, &mut out)
            .ok_or(CallError::Corrupt("results outside the channel"))?;
        Ok(out)
    }

    /// Publishes a request; the slot it took and its sequence number.
    fn submit(&self, proc: usize, args: &[u8]) -> Result<(u32, u32), CallError> {
        let info = self.info.get(proc).ok_or(CallError::BadProcedure(proc))?;
        let cap = self.layout.size as usize;
        let (off, need) = if info.bounded {
            (0, args.len())
        } else {
            (lrpc_abi::header::LEN, args.len() + lrpc_abi::header::LEN)
        };
        if need > cap {
            return Err(CallError::TooLarge {
                len: args.len(),
                cap: cap.saturating_sub(off),
            });
        }
        if self.is_closed() {
            return Err(CallError::Closed);
        }
        if !self.check_server() {
            return Err(CallError::Failed(Status::ServerTerminated));
        }
        let mut c = lock(&self.client);
        if let Some(f) = &c.failure {
            return Err(f.clone());
        }
        let slot = c.free.pop().ok_or(CallError::Full)?;
        let seq = c.seqs[slot as usize].wrapping_add(1);
        c.seqs[slot as usize] = seq;
        let at = self.layout.astack(slot);
        if !info.bounded {
            self.window.store(at, 0);
            self.window.store(at + 4, args.len() as u32);
        }
        self.window.write(at + off, args);
        let e = self.layout.req_entry(c.req_head);
        self.window.store(e, slot);
        self.window.store(e + 4, seq);
        self.window.store(e + 8, proc as u32);
        c.slots[slot as usize] = SlotState::Waiting { seq };
        c.req_head = c.req_head.wrapping_add(1);
        self.window.store(REQ_HEAD, c.req_head);
        c.procs[slot as usize] = proc;
        drop(c);
        self.procs.notify();
        Ok((slot, seq))
    }

    /// Closes the channel: fails calls in flight, takes the segment out of the server's
    /// memories and gives back its charge. Its pages return to the replicas' window
    /// allocators when the last user of the channel is gone (`Drop`).
    pub(crate) fn close(&self) {
        crate::state::domain::Close::close(self);
    }
}

impl crate::state::domain::Close for ChannelShared {
    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.fail(CallError::Closed);
        for (r, &off) in self.procs.server.replicas.iter().zip(self.offsets.iter()) {
            if let Err(e) = r.window_range().unmap(off, self.layout.len) {
                tracing::error!(
                    domain = r.key.domain,
                    off,
                    "unmapping a channel failed: {e}"
                );
            }
        }
        self.procs.server.core.account.refund(&self.charge);
        self.procs.version.fetch_add(1, Ordering::Release);
        let _g = lock(&self.procs.park);
        self.procs.wake.notify_all();
    }
}

impl Drop for ChannelShared {
    fn drop(&mut self) {
        self.close();
        // Nobody can touch the window any more: its pages go back to the replicas.
        for (r, &off) in self.procs.server.replicas.iter().zip(self.offsets.iter()) {
            r.free_window(off, self.layout.len);
        }
    }
}

/// Maps a new segment for `layout` into every replica of `server`: its offset in each, and
/// the host address of replica 0's mapping.
fn place(
    kernel: &KernelInner,
    server: &DomainShared,
    export: &ExportEntry,
    layout: &Layout,
) -> Result<(Box<[usize]>, *mut u8, crate::astack::Segment), Error> {
    let _ = kernel;
    let segment = crate::astack::Segment::new(layout.len).map_err(Error::Memfd)?;
    let len = segment.len();
    let mut offsets: Vec<usize> = Vec::with_capacity(server.replicas.len());
    let mut base0 = std::ptr::null_mut();
    let undo = |offsets: &[usize]| {
        for (r, &off) in server.replicas.iter().zip(offsets) {
            r.unmap_free(off, len);
        }
    };
    for (i, r) in server.replicas.iter().enumerate() {
        let got = r.with_store(export.deadline, |mut ctx| {
            let off = r.alloc_window(&mut ctx, len)?;
            Ok::<_, Error>((off, r.memory.data_ptr(&ctx) as usize))
        });
        let (off, base) = match got {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                undo(&offsets);
                return Err(e);
            }
            Err(_) => {
                undo(&offsets);
                return Err(Error::Busy);
            }
        };
        if let Err(source) = r.window_range().map(off, &segment) {
            r.free_window(off, len);
            undo(&offsets);
            return Err(Error::Map {
                domain: server.core.name.clone(),
                source,
            });
        }
        if i == 0 {
            base0 = (base + off) as *mut u8;
        }
        offsets.push(off);
    }
    Ok((offsets.into_boxed_slice(), base0, segment))
}

/// An asynchronous binding held by the embedder: calls are messages on a channel served by
/// the server's [`Processors`]. Dropping it unbinds.
pub struct AsyncBinding {
    ch: Arc<ChannelShared>,
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
