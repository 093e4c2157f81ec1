//! Asynchronous bindings: URPC channels held by this domain as client.
//!
//! A [`Channel`] is a segment the kernel maps into this domain's memory and the server's
//! (see `lrpc_abi::chan` for its layout): a request ring, a reply ring and one A-stack per
//! *slot* (a call in flight). A call ([`Channel::submit`], behind the generated `*_async`
//! stubs) takes a free slot, encodes its arguments on the slot's A-stack exactly as on a
//! synchronous binding, writes a request entry and publishes the request head; no kernel
//! crossing. The [`Reply`] it returns is a future that resolves when the server's reply
//! for that slot lands. The executor ([`crate::exec`]) runs other user-level threads in the
//! meantime and enters the kernel only when none can run ([`idle`]): then `channel_wait`
//! wakes the server's processors, runs the server's loop on this processor when the server
//! has none free (S = 0: processor donation), or parks until the reply head moves.
//!
//! # Memory ordering
//!
//! The ring counters are read and written through [`AtomicU32`] with acquire and release
//! ordering, everything else in the segment with volatile accesses. On wasm32 without the
//! threads proposal these are plain `i32.load`s and `i32.store`s that the compiler may not
//! reorder across the acquire load or the release store, nor merge across the loop
//! iterations of a poll; the engine keeps the order of a function's memory accesses, and
//! the host (x86-64) keeps the order of stores and of loads. So the server sees a request's
//! entry and arguments before the head that publishes them, and this side reads a reply's
//! entry and results only after the head that published them.
//!
//! # Nothing read from the segment is trusted
//!
//! The server may write anything into the segment at any time. The reply head may be at
//! most `slots` entries ahead of this side's tail; a reply must name a slot whose call is
//! in flight with exactly the sequence number it was sent with; a result's length must fit
//! the A-stack. A violation refuses the channel ([`CallError::ChannelRefused`]): every call
//! on it fails, and nothing more is read from it. Each harvest takes at most `slots`
//! entries, so a hostile peer can not make this side loop. Results are copied out of the
//! segment before they are decoded and validated.

use crate::rt::{DecodeError, Reader, Writer, with_copy};
use crate::{CallError, sys};
use core::cell::{Cell, RefCell};
use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::{AtomicU32, Ordering};
use core::task::{Context, Poll, Waker};
use lrpc_abi::{chan, header};
use std::rc::{Rc, Weak};

/// The channel descriptor `channel_bind` writes (for code speaking the raw ABI).
pub use lrpc_abi::chan::{DESC_LEN, Desc};

/// How long one `channel_wait` may block when a single channel has calls in flight, in
/// microseconds (the kernel returns as soon as a reply lands; the executor then looks
/// again).
const WAIT_US: i32 = 10_000;
/// The same when several channels have calls in flight (each is waited on in turn).
const WAIT_SHORT_US: i32 = 50;

thread_local! {
    /// Every live channel of this domain, for the executor's idle loop.
    static CHANNELS: RefCell<Vec<Weak<Inner>>> = const { RefCell::new(Vec::new()) };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    Waiting {
        seq: u32,
    },
    /// Its future was dropped: the reply, when it comes, is discarded.
    Abandoned {
        seq: u32,
    },
    Done {
        seq: u32,
        status: i32,
    },
}

struct State {
    req_head: u32,
    rep_tail: u32,
    slots: Vec<Slot>,
    seqs: Vec<u32>,
    free: Vec<u32>,
    wakers: Vec<Option<Waker>>,
    failure: Option<CallError>,
    /// Slots whose reply has not landed (waiting or abandoned).
    in_flight: usize,
    /// Most calls in flight at once so far.
    max_in_flight: usize,
}

struct Inner {
    /// 0 once unbound.
    handle: Cell<u64>,
    base: usize,
    slots: u32,
    size: u32,
    astacks: usize,
    nprocs: u32,
    state: RefCell<State>,
}

/// An asynchronous binding held by this domain as client. Unbinds when dropped; calls
/// still in flight then fail with [`CallError::StaleBinding`].
pub struct Channel {
    inner: Rc<Inner>,
}

impl Channel {
    /// Binds asynchronously to the interface exported under `name`, whose fingerprint must
    /// be `fingerprint` and which has `nprocs` procedures, with `slots` calls in flight at
    /// most (0: the kernel's default). The server must have processors
    /// ([`CallError::NoProcessors`] otherwise).
    pub fn bind(
        name: &str,
        fingerprint: u64,
        nprocs: usize,
        slots: u32,
    ) -> Result<Channel, CallError> {
        let mut rec = [0u8; chan::DESC_LEN];
        let name_len = i32::try_from(name.len()).map_err(|_| CallError::UnknownInterface)?;
        let slots = i32::try_from(slots).map_err(|_| CallError::ResourceExhausted)?;
        let code = sys::channel_bind(
            name.as_ptr() as i32,
            name_len,
            fingerprint as i64,
            slots,
            rec.as_mut_ptr() as i32,
            rec.len() as i32,
        );
        if code != 0 {
            return Err(CallError::from_code(code));
        }
        let d = chan::Desc::decode(&rec).unwrap_or_default();
        if d.nprocs as usize != nprocs || !d.is_sane() {
            let _ = sys::channel_unbind(d.handle as i64);
            return Err(CallError::InterfaceMismatch);
        }
        let n = d.slots as usize;
        let inner = Rc::new(Inner {
            handle: Cell::new(d.handle),
            base: d.base as usize,
            slots: d.slots,
            size: d.size,
            astacks: d.astacks as usize,
            nprocs: d.nprocs,
            state: RefCell::new(State {
                req_head: 0,
                rep_tail: 0,
                slots: vec![Slot::Free; n],
                seqs: vec![0; n],
                free: (0..d.slots).rev().collect(),
                wakers: (0..n).map(|_| None).collect(),
                failure: None,
                in_flight: 0,
                max_in_flight: 0,
            }),
        });
        CHANNELS.with(|c| {
            let mut c = c.borrow_mut();
            c.retain(|w| w.strong_count() > 0);
            c.push(Rc::downgrade(&inner));
        });
        Ok(Channel { inner })
    }

    /// The channel's handle (0 once unbound).
    pub fn handle(&self) -> u64 {
        self.inner.handle.get()
    }

    /// Calls whose reply has not landed yet (including cancelled ones).
    pub fn in_flight(&self) -> usize {
        self.inner.state.borrow().in_flight
    }

    /// Most calls that were in flight at once on this channel.
    pub fn max_in_flight(&self) -> usize {
        self.inner.state.borrow().max_in_flight
    }

    /// Sends a call of procedure `proc` (arguments: `size` bytes written by `enc` when not
    /// `bounded`; see `rt::invoke`) and returns the future of its reply, decoded by `dec`.
    /// The request is published before this returns; a refusal (every slot busy, arguments
    /// too large for a slot's A-stack, a failed channel) is the future's result.
    pub fn submit<R>(
        &self,
        proc: u32,
        bounded: bool,
        size: usize,
        out_bound: usize,
        enc: impl FnOnce(&mut Writer),
        dec: fn(&mut Reader<'_>) -> Result<R, DecodeError>,
    ) -> Reply<R> {
        let state = match self.inner.send(proc, bounded, size, enc) {
            Ok((slot, seq)) => CallState::InFlight { slot, seq },
            Err(e) => CallState::Refused(e),
        };
        Reply {
            ch: self.inner.clone(),
            bounded,
            out_bound,
            dec,
            state,
        }
    }

    /// Unbinds, reporting the kernel's answer (dropping also unbinds).
    pub fn unbind(self) -> Result<(), CallError> {
        match self.inner.close() {
            0 => Ok(()),
            code => Err(CallError::from_code(code)),
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        let _ = self.inner.close();
    }
}

/// The ring counter at `off` of the segment at `base`.
fn counter(base: usize, off: usize) -> &'static AtomicU32 {
    // SAFETY: `off` is one of the counters' offsets (below 512, 4-aligned), inside the
    // segment the kernel mapped at `base` (page aligned) for this domain; the address is
    // linear memory of this domain for as long as the domain lives (after `channel_unbind`
    // the pages are this domain's own again). Other parties change it only with aligned
    // word stores, and this side touches it only through atomics.
    unsafe { AtomicU32::from_ptr((base + off) as *mut u32) }
}

/// A word of the segment, read once (the peer may change it at any time).
fn load(at: usize) -> u32 {
    // SAFETY: `at` is 4-aligned inside the segment (entries and A-stack headers); a
    // volatile raw load forms no reference to shared memory.
    u32::from_le(unsafe { (at as *const u32).read_volatile() })
}

/// Stores a word of the segment.
fn store(at: usize, v: u32) {
    // SAFETY: as in `load`.
    unsafe { (at as *mut u32).write_volatile(v.to_le()) }
}

impl Inner {
    fn astack(&self, slot: u32) -> usize {
        self.base + self.astacks + self.size as usize * slot as usize
    }

    fn send(
        &self,
        proc: u32,
        bounded: bool,
        size: usize,
        enc: impl FnOnce(&mut Writer),
    ) -> Result<(u32, u32), CallError> {
        if self.handle.get() == 0 {
            return Err(CallError::StaleBinding);
        }
        if proc >= self.nprocs {
            return Err(CallError::BadProcedure);
        }
        let mut st = self.state.borrow_mut();
        if let Some(e) = st.failure {
            return Err(e);
        }
        let slot = st.free.pop().ok_or(CallError::ResourceExhausted)?;
        let at = self.astack(slot);
        let cap = self.size as usize;
        let fits = if bounded {
            // SAFETY: the slot's A-stack, `cap` bytes of the segment, is this side's until
            // the request is published.
            let mut w = unsafe { Writer::new(at as *mut u8, cap) };
            enc(&mut w);
            w.fits()
        } else if size <= cap.saturating_sub(header::LEN) {
            // SAFETY: as above, after the header.
            let mut w = unsafe { Writer::new((at + header::LEN) as *mut u8, cap - header::LEN) };
            enc(&mut w);
            store(at, 0);
            store(at + 4, size as u32);
            w.fits() && w.len() == size
        } else {
            false
        };
        if !fits {
            st.free.push(slot);
            return Err(CallError::ResourceExhausted);
        }
        let seq = st.seqs[slot as usize].wrapping_add(1);
        st.seqs[slot as usize] = seq;
        let e = self.base + chan::req_entry(self.slots, st.req_head);
        store(e, slot);
        store(e + 4, seq);
        store(e + 8, proc);
        store(e + 12, 0);
        st.req_head = st.req_head.wrapping_add(1);
        // Publishes the entry and the arguments written above.
        counter(self.base, chan::REQ_HEAD).store(st.req_head, Ordering::Release);
        st.slots[slot as usize] = Slot::Waiting { seq };
        st.in_flight += 1;
        st.max_in_flight = st.max_in_flight.max(st.in_flight);
        Ok((slot, seq))
    }

    /// Takes the replies the server posted (at most one ring's worth), checking each
    /// against the calls in flight, and wakes their futures.
    fn harvest(&self) {
        let mut wake: Vec<Waker> = Vec::new();
        {
            let mut st = self.state.borrow_mut();
            if st.failure.is_some() || self.handle.get() == 0 {
                return;
            }
            let head = counter(self.base, chan::REP_HEAD).load(Ordering::Acquire);
            let n = head.wrapping_sub(st.rep_tail);
            if n > self.slots {
                drop(st);
                self.fail(CallError::ChannelRefused);
                return;
            }
            for _ in 0..n {
                let e = self.base + chan::rep_entry(self.slots, st.rep_tail);
                let (slot, seq, status) = (load(e), load(e + 4), load(e + 8) as i32);
                match st.slots.get(slot as usize).copied() {
                    Some(Slot::Waiting { seq: s }) if s == seq => {
                        st.slots[slot as usize] = Slot::Done { seq, status };
                        st.in_flight -= 1;
                        if let Some(w) = st.wakers[slot as usize].take() {
                            wake.push(w);
                        }
                    }
                    Some(Slot::Abandoned { seq: s }) if s == seq => {
                        st.slots[slot as usize] = Slot::Free;
                        st.free.push(slot);
                        st.in_flight -= 1;
                    }
                    _ => {
                        drop(st);
                        self.fail(CallError::ChannelRefused);
                        wake.into_iter().for_each(Waker::wake);
                        return;
                    }
                }
                st.rep_tail = st.rep_tail.wrapping_add(1);
            }
            if n > 0 {
                counter(self.base, chan::REP_TAIL).store(st.rep_tail, Ordering::Release);
            }
        }
        wake.into_iter().for_each(Waker::wake);
    }

    /// Fails every call in flight with `err` and refuses later ones.
    fn fail(&self, err: CallError) {
        let mut wake = Vec::new();
        {
            let mut st = self.state.borrow_mut();
            if st.failure.is_none() {
                st.failure = Some(err);
            }
            let err = st.failure.unwrap_or(err);
            for i in 0..st.slots.len() {
                match st.slots[i] {
                    Slot::Waiting { seq } => {
                        st.slots[i] = Slot::Done {
                            seq,
                            status: err.code(),
                        };
                        st.in_flight -= 1;
                        if let Some(w) = st.wakers[i].take() {
                            wake.push(w);
                        }
                    }
                    Slot::Abandoned { .. } => {
                        st.slots[i] = Slot::Free;
                        st.free.push(i as u32);
                        st.in_flight -= 1;
                    }
                    _ => {}
                }
            }
        }
        wake.into_iter().for_each(Waker::wake);
    }

    /// Waits in the kernel for a reply (or donates this processor to the server); fails
    /// the channel with the kernel's status when it failed.
    fn wait(&self, timeout_us: i32) {
        let handle = self.handle.get();
        if handle == 0 {
            return;
        }
        let tail = self.state.borrow().rep_tail;
        let code = sys::channel_wait(handle as i64, tail as i32, timeout_us);
        // Replies posted before a failure still reach their calls.
        self.harvest();
        if code != 0 {
            self.fail(CallError::from_code(code));
        }
    }

    fn close(&self) -> i32 {
        let handle = self.handle.replace(0);
        if handle == 0 {
            return 0;
        }
        self.fail(CallError::StaleBinding);
        sys::channel_unbind(handle as i64)
    }
}

/// What the executor does when no user-level thread can run: looks for replies on every
/// channel of this domain and, if none woke a thread, waits in the kernel on a channel with
/// calls in flight (which may run the server's loop here: processor donation). Returns
/// `false` when no channel has a call in flight (nothing can wake a thread).
pub fn idle() -> bool {
    let live: Vec<Rc<Inner>> = CHANNELS.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|w| w.strong_count() > 0);
        c.iter().filter_map(Weak::upgrade).collect()
    });
    let busy: Vec<&Rc<Inner>> = live
        .iter()
        .filter(|ch| ch.handle.get() != 0 && ch.state.borrow().in_flight > 0)
        .collect();
    let timeout = if busy.len() == 1 {
        WAIT_US
    } else {
        WAIT_SHORT_US
    };
    for ch in &busy {
        let before = ch.state.borrow().rep_tail;
        ch.harvest();
        if ch.state.borrow().rep_tail != before {
            // Replies landed: their threads are runnable now.
            return true;
        }
    }
    for ch in &busy {
        ch.wait(timeout);
    }
    !busy.is_empty()
}

enum CallState {
    InFlight { slot: u32, seq: u32 },
    Refused(CallError),
    Finished,
}

/// The future of an asynchronous call's reply (see [`Channel::submit`]). Dropping it before
/// it resolves cancels the call: its reply, when it comes, is discarded.
#[must_use = "a call is cancelled when its future is dropped"]
pub struct Reply<R> {
    ch: Rc<Inner>,
    bounded: bool,
    out_bound: usize,
    dec: fn(&mut Reader<'_>) -> Result<R, DecodeError>,
    state: CallState,
}

impl<R> Reply<R> {
    /// Reads and decodes the results of the call in `slot`, whose reply said `Ok`.
    fn results(&self, slot: u32) -> Result<R, CallError> {
        let at = self.ch.astack(slot);
        let cap = self.ch.size as usize;
        let bad = |_| CallError::BadReply;
        if self.bounded {
            let n = self.out_bound.min(cap);
            // SAFETY: `[at, at + n)` lies in the slot's A-stack (`n <= cap`).
            return unsafe { with_copy(at as *const u8, n, |b| (self.dec)(&mut Reader::new(b))) }
                .map_err(bad);
        }
        // The header comes from the server: untrusted.
        let flags = load(at);
        let len = load(at + 4) as usize;
        if flags & header::OOB != 0 || len > cap.saturating_sub(header::LEN) {
            return Err(CallError::BadReply);
        }
        // SAFETY: `[at + LEN, at + LEN + len)` lies in the slot's A-stack (checked above).
        unsafe {
            with_copy((at + header::LEN) as *const u8, len, |b| {
                let mut r = Reader::new(b);
                let v = (self.dec)(&mut r)?;
                r.finish()?;
                Ok(v)
            })
        }
        .map_err(bad)
    }
}

impl<R> Future for Reply<R> {
    type Output = Result<R, CallError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `Reply` holds no self-references: it may be moved out of its pin.
        let this = Pin::into_inner(self);
        let (slot, seq) = match core::mem::replace(&mut this.state, CallState::Finished) {
            CallState::InFlight { slot, seq } => (slot, seq),
            CallState::Refused(e) => return Poll::Ready(Err(e)),
            CallState::Finished => return Poll::Ready(Err(CallError::NoCall)),
        };
        this.ch.harvest();
        let now = this.ch.state.borrow().slots[slot as usize];
        match now {
            Slot::Done { seq: s, status } if s == seq => {
                let r = if status == 0 {
                    this.results(slot)
                } else {
                    Err(CallError::from_code(status))
                };
                let mut st = this.ch.state.borrow_mut();
                st.slots[slot as usize] = Slot::Free;
                st.free.push(slot);
                Poll::Ready(r)
            }
            _ => {
                this.ch.state.borrow_mut().wakers[slot as usize] = Some(cx.waker().clone());
                this.state = CallState::InFlight { slot, seq };
                Poll::Pending
            }
        }
    }
}

impl<R> Drop for Reply<R> {
    fn drop(&mut self) {
        let CallState::InFlight { slot, seq } = self.state else {
            return;
        };
        let mut st = self.ch.state.borrow_mut();
        let i = slot as usize;
        st.wakers[i] = None;
        match st.slots[i] {
            Slot::Waiting { seq: s } if s == seq => st.slots[i] = Slot::Abandoned { seq },
            Slot::Done { seq: s, .. } if s == seq => {
                st.slots[i] = Slot::Free;
                st.free.push(slot);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOTS: u32 = 4;
    const SIZE: u32 = 64;
    const ASTACKS: usize = 4096;

    /// A private buffer standing in for the segment, touched only through raw pointers
    /// (by the channel and by the test playing the server).
    struct Seg(*mut [u64]);

    impl Drop for Seg {
        fn drop(&mut self) {
            // SAFETY: made by `Box::into_raw` in `segment`, freed once.
            drop(unsafe { Box::from_raw(self.0) });
        }
    }

    fn segment() -> Seg {
        let words = (ASTACKS + (SIZE * SLOTS) as usize) / 8;
        Seg(Box::into_raw(vec![0u64; words].into_boxed_slice()))
    }

    /// A channel over `seg` (no kernel: waiting answers `NoCall`).
    fn fake(seg: &Seg) -> Channel {
        let n = SLOTS as usize;
        Channel {
            inner: Rc::new(Inner {
                handle: Cell::new(1),
                base: seg.0 as *mut u64 as usize,
                slots: SLOTS,
                size: SIZE,
                astacks: ASTACKS,
                nprocs: 2,
                state: RefCell::new(State {
                    req_head: 0,
                    rep_tail: 0,
                    slots: vec![Slot::Free; n],
                    seqs: vec![0; n],
                    free: (0..SLOTS).rev().collect(),
                    wakers: (0..n).map(|_| None).collect(),
                    failure: None,
                    in_flight: 0,
                    max_in_flight: 0,
                }),
            }),
        }
    }

    fn word(seg: &Seg, off: usize) -> u32 {
        load(seg.0 as *mut u64 as usize + off)
    }

    fn set(seg: &Seg, off: usize, v: u32) {
        store(seg.0 as *mut u64 as usize + off, v);
    }

    /// Plays the server: answers request `n` (counting from 0) with `status`, writing `result`
    /// on its slot's A-stack, and names `(slot, seq)` as given when `forge` is set.
    fn reply(seg: &Seg, n: u32, status: i32, result: u32, forge: Option<(u32, u32)>) {
        let e = chan::req_entry(SLOTS, n);
        let (slot, seq) = forge.unwrap_or((word(seg, e), word(seg, e + 4)));
        set(seg, ASTACKS + (SIZE * word(seg, e)) as usize, result);
        let r = chan::rep_entry(SLOTS, n);
        set(seg, r, slot);
        set(seg, r + 4, seq);
        set(seg, r + 8, status as u32);
        set(seg, chan::REP_HEAD, n + 1);
    }

    fn add(ch: &Channel, a: u32) -> Reply<u32> {
        ch.submit(1, true, 0, 4, |w| w.u32(a), |r| r.u32())
    }

    fn poll<R>(r: &mut Reply<R>) -> Poll<Result<R, CallError>> {
        Pin::new(r).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_reply_reaches_its_call_and_arguments_reach_the_ring() {
        let seg = segment();
        let ch = fake(&seg);
        let mut call = add(&ch, 41);
        assert!(poll(&mut call).is_pending());
        assert_eq!(word(&seg, chan::REQ_HEAD), 1, "published");
        let e = chan::req_entry(SLOTS, 0);
        assert_eq!(
            (word(&seg, e + 4), word(&seg, e + 8)),
            (1, 1),
            "seq 1, proc 1"
        );
        let slot = word(&seg, e);
        assert_eq!(word(&seg, ASTACKS + (SIZE * slot) as usize), 41);
        reply(&seg, 0, 0, 42, None);
        assert_eq!(poll(&mut call), Poll::Ready(Ok(42)));
        assert_eq!(word(&seg, chan::REP_TAIL), 1, "taken");
        assert_eq!(ch.in_flight(), 0);
        // A failure status is the call's error.
        let mut call = add(&ch, 1);
        reply(&seg, 1, Status::ServerRejected as i32, 0, None);
        assert_eq!(poll(&mut call), Poll::Ready(Err(CallError::ServerRejected)));
    }

    use crate::Status;

    #[test]
    fn forged_replies_and_heads_refuse_the_channel() {
        // A reply with another sequence number.
        let seg = segment();
        let ch = fake(&seg);
        let mut call = add(&ch, 1);
        let slot = word(&seg, chan::req_entry(SLOTS, 0));
        reply(&seg, 0, 0, 2, Some((slot, 7)));
        assert_eq!(poll(&mut call), Poll::Ready(Err(CallError::ChannelRefused)));
        let mut later = add(&ch, 1);
        assert_eq!(
            poll(&mut later),
            Poll::Ready(Err(CallError::ChannelRefused))
        );

        // A reply naming a slot out of range.
        let seg = segment();
        let ch = fake(&seg);
        let mut call = add(&ch, 1);
        reply(&seg, 0, 0, 2, Some((SLOTS, 1)));
        assert_eq!(poll(&mut call), Poll::Ready(Err(CallError::ChannelRefused)));

        // A reply head far ahead of the tail.
        let seg = segment();
        let ch = fake(&seg);
        let mut call = add(&ch, 1);
        set(&seg, chan::REP_HEAD, u32::MAX);
        assert_eq!(poll(&mut call), Poll::Ready(Err(CallError::ChannelRefused)));
    }

    #[test]
    fn a_result_longer_than_the_a_stack_is_refused() {
        let seg = segment();
        let ch = fake(&seg);
        let mut call = ch.submit(0, false, 4, 0, |w| w.u32(5), |r| Ok(r.list_u8()?.to_vec()));
        let at = ASTACKS + (SIZE * word(&seg, chan::req_entry(SLOTS, 0))) as usize;
        assert_eq!((word(&seg, at), word(&seg, at + 4)), (0, 4), "the header");
        reply(&seg, 0, 0, 0, None);
        set(&seg, at + 4, SIZE);
        assert_eq!(poll(&mut call), Poll::Ready(Err(CallError::BadReply)));
        // Arguments that do not fit a slot are refused before anything is published.
        let big = [0u8; SIZE as usize];
        let mut call = ch.submit(0, false, 4 + big.len(), 0, |w| w.list_u8(&big), |_| Ok(()));
        assert_eq!(
            poll(&mut call),
            Poll::Ready(Err(CallError::ResourceExhausted))
        );
        assert_eq!(word(&seg, chan::REQ_HEAD), 1);
    }

    #[test]
    fn a_cancelled_call_s_late_reply_is_discarded() {
        let seg = segment();
        let ch = fake(&seg);
        let first = add(&ch, 1);
        let slot = word(&seg, chan::req_entry(SLOTS, 0));
        drop(first);
        assert_eq!(ch.in_flight(), 1, "the slot waits for its reply");
        let mut second = add(&ch, 2);
        reply(&seg, 0, 0, 99, None);
        reply(&seg, 1, 0, 3, None);
        assert_eq!(poll(&mut second), Poll::Ready(Ok(3)));
        assert_eq!(ch.in_flight(), 0);
        assert_eq!(
            ch.inner.state.borrow().free.len(),
            SLOTS as usize,
            "the cancelled call's slot {slot} is free again"
        );
        let mut third = add(&ch, 3);
        reply(&seg, 2, 0, 4, None);
        assert_eq!(poll(&mut third), Poll::Ready(Ok(4)));
    }

    #[test]
    fn every_slot_busy_is_a_refusal_not_a_wait() {
        let seg = segment();
        let ch = fake(&seg);
        let calls: Vec<_> = (0..SLOTS).map(|i| add(&ch, i)).collect();
        assert_eq!(ch.max_in_flight(), SLOTS as usize);
        let mut more = add(&ch, 9);
        assert_eq!(
            poll(&mut more),
            Poll::Ready(Err(CallError::ResourceExhausted))
        );
        drop(calls);
        drop(ch);
    }
}
