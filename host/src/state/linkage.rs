//! Linkage records: the per-thread stack of in-flight cross-domain calls (LRPC 3.2).
//!
//! A call pushes a record when it leaves the client and pops it when it returns, so the stack
//! of a thread lists, innermost last, every domain that thread is currently "inside" as a
//! caller. Two things need it:
//!
//! * `reply_oob`, called by a server, finds the call it is answering (the topmost record).
//! * Re-entry: a domain that is suspended in an outgoing call on this thread holds its own
//!   `Store` lock, so a nested call back into it (A→B→A) or a nested bind that must grow its
//!   memory can not lock it again. The suspended domain's host-function frame lent its
//!   `Caller` to the record; the nested operation borrows it from there.
//!
//! **Why no loom model here** (the store lock has one, in `lrpc-lock`): nothing in this
//! module is shared between threads. The stack is a thread-local list of records on that
//! thread's own native stack, pushed and popped in LIFO order by frames of that thread, and
//! a `Pinned` binding (not `Send`) never leaves it; there is no interleaving for a model
//! checker to explore. What can go wrong is the nesting order, which the integration tests
//! drive with real guests: chains A→B→C, call-backs A→B→A, unbinding and termination under
//! a call in flight (`tests/all/nesting.rs`), a stale request on a server thread
//! (`tests/all/stale.rs`), and the soak test's mix on two threads (`tests/soak`).
#![allow(
    unsafe_code,
    reason = "re-entry borrows a suspended Caller through a raw pointer; argued below"
)]

use super::records::{Binding, DomainData};
use std::cell::Cell;
use std::sync::Arc;
use wasmtime::Caller;

pub(crate) use super::records::{Pinned, ReplicaKey};

/// What a linkage record says of a call.
#[derive(Clone, Copy)]
pub(crate) struct Call {
    /// The calling replica, suspended in its `lrpc.call` import (or, for a call served on
    /// the server's own thread, waiting on another thread).
    pub caller: ReplicaKey,
    /// The replica running the call.
    pub server: ReplicaKey,
    /// The binding the call travels on.
    pub binding: Pinned,
    /// Procedure index.
    pub proc: u32,
    /// Index of the A-stack within the procedure (across extents).
    pub astack: u32,
    /// The server reads some of the caller's arguments in place because the caller can not
    /// run until the call returns (see `Binding::entry_mask`).
    pub lent: bool,
}

/// One in-flight call. Records live on the native stack of the `lrpc.call` frame that made
/// them and form a per-thread intrusive list, innermost first (pushing is two thread-local
/// accesses, no allocation).
struct Record {
    call: Call,
    /// The caller's import's `Caller`, lent for re-entry while the record is on the stack
    /// (null when the caller runs on another thread).
    caller_ctx: *mut Caller<'static, DomainData>,
    /// The record below this one.
    prev: *const Record,
}

thread_local! {
    static TOP: Cell<*const Record> = const { Cell::new(std::ptr::null()) };
}

/// Restores the previous top (of the thread's `TOP`, reached once per call) when the call
/// returns, also when it unwinds.
struct PopOnDrop(*const Cell<*const Record>, *const Record);

impl Drop for PopOnDrop {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `self.0` is this thread's `TOP` (taken by `push` on this thread; a
        // `PopOnDrop` holds raw pointers, so it is neither `Send` nor `Sync` and is dropped
        // on this thread, inside the frame of `push`). A thread-local lives until its
        // thread exits, after every frame on its stack, and `TOP` has no destructor. The
        // `Cell` is only ever reached through shared references.
        unsafe { (*self.0).set(self.1) }
    }
}

/// What runs while a record is on the thread's stack: any closure, or a type whose `run` is
/// always inlined. The call path uses the latter: a closure is the inliner's choice, and an
/// outlined entry costs the null call about 50 instructions (callgrind).
pub(crate) trait Scoped {
    type Output;
    fn run(self) -> Self::Output;
}

impl<R, F: FnOnce() -> R> Scoped for F {
    type Output = R;
    #[inline(always)]
    fn run(self) -> R {
        self()
    }
}

/// Runs `f` with a record of `call` on the thread's linkage stack. `caller` is the `Caller`
/// of the client's import; it stays lent to nested re-entries until `f` returns.
///
/// `f` must not use `caller` (it has no access to it: the borrow is taken here).
#[inline(always)]
pub(crate) fn with_record<B: Scoped>(
    caller: &mut Caller<'_, DomainData>,
    call: Call,
    f: B,
) -> B::Output {
    let caller_ctx: *mut Caller<'_, DomainData> = caller;
    push(call, caller_ctx.cast(), f)
}

/// Runs `f` with a record of a call this thread serves on behalf of a client running on
/// another thread (thread-per-domain serving): `reply_oob` finds it; nothing can re-enter
/// the client through it.
pub(crate) fn with_served<R>(call: Call, f: impl FnOnce() -> R) -> R {
    push(call, std::ptr::null_mut(), f)
}

/// Links a record into the thread's stack for the duration of `f`.
#[inline(always)]
fn push<B: Scoped>(call: Call, caller_ctx: *mut Caller<'static, DomainData>, f: B) -> B::Output {
    // One thread-local access for the push and the pop (`PopOnDrop` keeps the cell's address).
    let top: *const Cell<*const Record> = TOP.with(std::ptr::from_ref);
    // SAFETY: `top` is this thread's `TOP`, alive for as long as the thread (see `PopOnDrop`).
    let prev = unsafe { (*top).get() };
    let record = Record {
        call,
        caller_ctx,
        prev,
    };
    // SAFETY: as above.
    unsafe { (*top).set(&record) };
    let _pop = PopOnDrop(top, prev);
    f.run()
}

/// Visits the records of this thread, innermost first, until `f` returns `Some`.
fn find<R>(mut f: impl FnMut(&Record) -> Option<R>) -> Option<R> {
    let mut at = TOP.with(|t| t.get());
    while !at.is_null() {
        // SAFETY: a record is reachable from `TOP` only while the `with_record` frame that
        // owns it is active: it is linked in after being placed on that frame's stack and
        // unlinked (by `PopOnDrop`) before the frame ends, in LIFO order, and `TOP` is
        // thread-local, so every record reachable here lives on this thread's stack below us.
        let r = unsafe { &*at };
        if let Some(x) = f(r) {
            return Some(x);
        }
        at = r.prev;
    }
    None
}

/// Calls `f` with the `Caller` lent by the topmost record whose caller is `key`, if the
/// replica is suspended in a call on this thread; `None` otherwise.
pub(crate) fn reenter<R>(
    key: ReplicaKey,
    f: impl FnOnce(&mut Caller<'_, DomainData>) -> R,
) -> Option<R> {
    let ptr = find(|r| (r.call.caller == key && !r.caller_ctx.is_null()).then_some(r.caller_ctx))?;
    // SAFETY: the record was pushed by `with_record` from a live `&mut Caller` whose frame is
    // further down this thread's stack, blocked in `f` until the record is popped; that frame
    // does not touch its `Caller` meanwhile (the borrow is held by `with_record`). The record
    // is still linked (we found it), so the `Caller` and the Store behind it are alive. We
    // take the topmost record of that replica: any frame nested above it that was using an
    // older record's `Caller` has since entered the replica's wasm, and that wasm called the
    // import that pushed this newer record, so the older borrow is suspended exactly as
    // wasmtime's own host-function re-entry suspends it.
    let caller = unsafe { &mut *ptr.cast::<Caller<'_, DomainData>>() };
    Some(f(caller))
}

/// Whether a call on this thread lends `key`'s arguments in place and has not returned: then
/// running `key`'s code (re-entering it) is refused with `Status::ReentryWhileLent`.
pub(crate) fn lending(key: ReplicaKey) -> bool {
    find(|r| (r.call.caller == key && r.call.lent).then_some(())).is_some()
}

/// The call currently being served on this thread (the topmost record), if any. The pinned
/// binding stays valid while the server runs inside that call.
pub(crate) fn current() -> Option<Call> {
    find(|r| Some(r.call))
}

impl Pinned {
    /// Pins `b`. The caller has just marked one of `b`'s A-stacks busy, or (a server
    /// thread serving a request) owns an `Arc` of `b` for as long as the `Pinned` is used.
    /// A `Pinned` is not `Send`: it never leaves the thread that made it.
    pub(crate) fn new(b: &Arc<Binding>) -> Pinned {
        Pinned(Arc::as_ptr(b))
    }

    /// The binding.
    #[inline]
    pub(crate) fn get(&self) -> &Binding {
        // SAFETY: a `Pinned` exists only while something holds an `Arc` of the binding:
        // either between marking an A-stack of the binding busy and releasing it (the `call`
        // import and the linkage record of that call, which is popped before the release;
        // meanwhile the client replica's slot or its retired list holds the `Arc`, see the
        // type's documentation, in `records`), or inside a server thread's linkage record for a request
        // that owns an `Arc` (`mailbox::run`). `Pinned` is not `Send`, so it is used only on
        // the thread that made it, inside that span. `Binding` is only ever accessed through
        // shared references.
        unsafe { &*self.0 }
    }
}

/// An A-stack's busy flag, held by the call that set it, so that the call clears it when it
/// returns without looking the binding up again.
///
/// The flag is an element of an extent's busy list (`Extent::busy`), a heap buffer that is
/// created with the extent and never resized. The client replica keeps the binding that
/// owns the extent alive while any of its flags is set, exactly as for [`Pinned`]: `unbind`
/// retires a binding with a call in flight instead of dropping it, and a retired binding is
/// dropped only after its last flag was cleared. The flags are `Cell`s reached through shared
/// references only, so nested code that reads or sets other flags of the same list while
/// this call is away (re-entry) never holds an exclusive reference to this one.
#[derive(Clone, Copy)]
pub(crate) struct BusyFlag(*const Cell<bool>);

impl BusyFlag {
    /// Pins `flag`, which the caller has just set.
    #[inline]
    pub(crate) fn new(flag: &Cell<bool>) -> BusyFlag {
        BusyFlag(flag)
    }

    /// Clears the flag: the call that set it has returned.
    #[inline]
    pub(crate) fn clear(self) {
        // SAFETY: the flag was set by the call holding this `BusyFlag` and has not been
        // cleared yet (each call clears its own flag once, here), so the binding owning the
        // extent is still in the client replica's slot or retired list (see the type's
        // documentation), and the busy list's buffer, never resized, has not moved. The
        // `BusyFlag` is not `Send` (a raw pointer): it is used on the thread of that call,
        // which holds the client replica's store. Only shared references to the `Cell` exist.
        unsafe { (*self.0).set(false) }
    }
}
