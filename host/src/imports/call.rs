//! `lrpc.call`: the call path (LRPC 3.2).
//!
//! `lrpc.call(handle, proc, astack)` runs in the client's thread with the client's store: it
//! validates the handle (owner, slot, generation), the binding's liveness, the procedure and
//! the A-stack (a range check per extent, then the busy bit), records a linkage, takes the
//! server replica's store (an uncontended lock; no lock shared by unrelated domains),
//! translates the A-stack address and calls the server's entry stub on the same thread. A
//! server that faults is terminated and the client gets a call-failed status.

use super::{HostResult, flush_own, live_binding};
use crate::astack;
use crate::error::{Fault, Interrupt};
use crate::state::binding::{Binding, ClientBinding};
use crate::state::clerk::{EntryArgs, Relay, RelayCall};
use crate::state::domain::DomainData;
use crate::state::linkage::{self, BusyFlag, Pinned, ReplicaKey, Scoped};
use crate::sync::lock;
use lrpc_abi::Status;
use lrpc_lock::Guard;
use std::sync::atomic::Ordering;
use wasmtime::{AsContextMut, Caller};

/// What the call path keeps of the client's slot while the call is away: the binding,
/// pinned, the A-stack's busy flag, where the A-stack lies among the procedure's, and the
/// entry's arguments in the server's first replica (the common case: one replica, or this
/// thread's is the first). Small on purpose (it is built and read on every call); the
/// arguments in another replica are read once it is known (`entry_args`).
struct Prepared {
    binding: Pinned,
    busy: BusyFlag,
    client_astack: u32,
    /// Index of the A-stack among the procedure's A-stacks (across extents).
    index: u32,
    /// The entry's arguments in replica 0 (the A-stack's size is their `astack_cap`).
    first: EntryArgs,
    /// The call lends arguments in place (see `Binding::entry_mask`).
    lent: bool,
}

#[inline(always)]
fn prepare(data: &DomainData, raw: u64, proc: i32, astack: i32) -> Result<Prepared, Status> {
    let cb = live_binding(data, raw)?;
    let (e, local) = astack::astack(&cb.procs, proc, astack)?;
    let busy = e.busy.get(local as usize).ok_or(Status::BadAStack)?;
    if busy.replace(true) {
        return Err(Status::AStackBusy);
    }
    let (mask, lent) = cb.binding.entry_mask(proc as u32);
    Ok(Prepared {
        binding: Pinned::new(&cb.binding),
        busy: BusyFlag::new(busy),
        client_astack: astack as u32,
        index: e.first + local,
        first: args_in(e, local, 0, mask),
        lent,
    })
}

/// The procedure's borrow mask on binding `b`: which `in` arguments the server reads in place
/// on a call that does not lend (the client may run meanwhile, see `Binding::entry_mask`).
#[inline]
pub(super) fn borrow_mask(b: &Binding, proc: u32) -> i32 {
    b.masks.get(proc as usize).map_or(0, |m| m.borrow)
}

/// The entry's arguments for A-stack `local` of extent `e` in server replica `r`: A-stack
/// address and capacity, `in` segment address and capacity, borrow mask. The segment address
/// is `u32::MAX` when the segment is not mapped into that replica yet (see `resolve_oob`).
#[inline]
pub(super) fn args_in(e: &crate::astack::Extent, local: u32, r: usize, borrow: i32) -> EntryArgs {
    let oob = e.oob_in.get(local as usize);
    let (base, oob_at) = if r == 0 {
        // The common case, kept next to the lists (`base0`, `first`).
        (e.base0, oob.map_or(0, |o| o.first))
    } else {
        (
            e.server_bases.get(r).copied().unwrap_or(0),
            oob.map_or(0, |o| o.server.get(r).copied().unwrap_or(0)),
        )
    };
    EntryArgs {
        astack: base.wrapping_add(local * e.size) as i32,
        astack_cap: e.size as i32,
        oob: oob_at as i32,
        oob_cap: oob.map_or(0, |o| o.cap) as i32,
        borrow,
    }
}

/// Marks the call's A-stack free again. The binding is in its slot, or in the retired list
/// if it was unbound while the call was in flight; a retired binding whose last call
/// finished is dropped here.
#[inline]
fn release(data: &mut DomainData, p: &Prepared) {
    p.busy.clear();
    drop_finished_retired(data);
}

/// Drops the bindings unbound while a call on them was in flight whose last call has
/// finished (see `linkage::Pinned`).
#[inline]
pub(super) fn drop_finished_retired(data: &mut DomainData) {
    if !data.retired.is_empty() {
        data.retired.retain(ClientBinding::any_busy);
    }
}

/// `lrpc.call(handle, proc, astack) -> status`.
pub(super) fn call(
    mut caller: Caller<'_, DomainData>,
    raw: i64,
    proc: i32,
    astack: i32,
) -> HostResult<i32> {
    call_in(&mut caller, raw as u64, proc, astack)
}

/// [`call`] through a borrowed caller (MultiRPC makes its local members' calls with it).
#[inline(always)]
pub(super) fn call_in(
    caller: &mut Caller<'_, DomainData>,
    raw: u64,
    proc: i32,
    astack: i32,
) -> HostResult<i32> {
    let data = caller.data_mut();
    let p = match prepare(data, raw, proc, astack) {
        Ok(p) => p,
        Err(s) => return Ok(s as i32),
    };
    // The binding was made for this replica (`bind` gives it the caller's key): the key is
    // read off the binding the call already holds rather than off the domain's core.
    let client_key = p.binding.get().client_key;
    debug_assert_eq!(client_key, data.key(), "a slot's binding is this replica's");
    let now = data.ticks.now();
    // One load of the subscriber's most verbose level: a call has a span only when a
    // subscriber takes debug spans (the runtime's trace export, or `RUST_LOG=...=debug`).
    let mut status = if tracing::level_enabled!(tracing::Level::DEBUG) {
        transfer_traced(caller, client_key, raw, &p, proc as u32, now)
    } else {
        transfer(caller, client_key, raw, &p, proc as u32, now)
    };
    if status == Status::Ok && !p.binding.get().is_live() {
        // Unbound or revoked while the call was in flight: its A-stack left both memories,
        // so whatever the server wrote did not reach the client.
        status = p.binding.get().dead_status();
    }
    release(caller.data_mut(), &p);
    if status != Status::Ok {
        // A failed call's stub reads nothing off the A-stack: windows revoked while this
        // client ran can go now (see `Replica::unmap_or_defer`).
        flush_own(caller);
    }
    let data = caller.data_mut();
    if data.core.terminated.load(Ordering::Acquire) {
        // The client itself was terminated while it waited: unwind it.
        return Err(wasmtime::Error::new(Interrupt::Terminated));
    }
    Ok(status as i32)
}

/// [`transfer`] inside a `call` span: the server domain, the procedure, the binding's
/// deadline and the call's status. Entered on the calling thread, so that the server's own
/// calls, and a remote call's span, are its children.
#[cold]
#[inline(never)]
fn transfer_traced(
    caller: &mut Caller<'_, DomainData>,
    client_key: ReplicaKey,
    raw: u64,
    p: &Prepared,
    proc: u32,
    now: u64,
) -> Status {
    let b = p.binding.get();
    let procedure = b
        .export
        .plan
        .procs
        .get(proc as usize)
        .map_or("", |pp| pp.name.as_str());
    let span = tracing::debug_span!(
        target: "lrpc_kernel::call",
        "call",
        domain = b.server.core.name.as_str(),
        export = b.export.name.as_str(),
        procedure,
        deadline_ms = u64::try_from(b.deadline.as_millis()).unwrap_or(u64::MAX),
        status = tracing::field::Empty,
    );
    let status = span.in_scope(|| transfer(caller, client_key, raw, p, proc, now));
    span.record("status", status.describe());
    status
}

/// The server address of the call's `in` segment in replica `i` (`at`, as `entry_args` read
/// it), mapping the segment there first if it was created while that replica was busy (see
/// `Binding::place_lazily`).
#[inline]
fn resolve_oob(
    b: &Binding,
    (proc, index): (u32, u32),
    i: usize,
    args: &EntryArgs,
    ctx: wasmtime::StoreContextMut<'_, DomainData>,
) -> Result<i32, Status> {
    let (at, cap) = (args.oob, args.oob_cap);
    if cap == 0 || at as u32 != u32::MAX {
        return Ok(at);
    }
    map_oob_lazily(b, (proc, index), i, ctx)
}

/// The slow half of `resolve_oob`: maps the segment into replica `i` now.
#[cold]
#[inline(never)]
fn map_oob_lazily(
    b: &Binding,
    (proc, index): (u32, u32),
    i: usize,
    ctx: wasmtime::StoreContextMut<'_, DomainData>,
) -> Result<i32, Status> {
    let off = b
        .map_into((proc, index, lrpc_abi::OOB_IN), i, ctx)
        .map_err(|e| e.status())?;
    i32::try_from(off).map_err(|_| Status::ResourceExhausted)
}

/// Runs the call in the server and maps its outcome to a status.
#[inline(always)]
fn transfer(
    caller: &mut Caller<'_, DomainData>,
    client_key: ReplicaKey,
    raw: u64,
    p: &Prepared,
    proc: u32,
    now: u64,
) -> Status {
    let b = p.binding.get();
    let server = &b.server;
    if let Some(d) = &b.export.relay {
        return relayed(caller, client_key, p, proc, &**d);
    }
    let deadline = now.saturating_add(b.deadline_ticks);
    // A free replica, starting from this thread's own so that threads do not contend for
    // the same one. The common case is that one being free: the rest is `transfer_contended`.
    let (start, replica) = match &*server.replicas {
        [only] => (0, only),
        all => {
            let i = crate::state::domain::thread_slot() % all.len();
            (i, &all[i])
        }
    };
    let call = RunArgs {
        client_key,
        raw,
        p,
        proc,
        deadline,
    };
    let outcome = match replica.store.try_lock() {
        // `RunArgs::locked`, written out: calling it, even always inlined, costs the null
        // call 734 instructions against 727 (callgrind).
        Some(mut store) => match call.entry_args(caller.data(), start) {
            Ok(args) => {
                let entry = Entry {
                    call,
                    i: start,
                    args,
                    ctx: store.as_context_mut(),
                };
                call.recorded(caller, replica.key, entry)
            }
            Err(s) => Err(s),
        },
        None => call.contended(caller, start),
    };
    status_of(outcome, &caller.data().kernel, server)
}

/// The status of an entry's outcome: a server that faulted is terminated.
#[inline(always)]
fn status_of(
    outcome: Outcome,
    kernel: &std::sync::Weak<crate::state::kernel::KernelInner>,
    server: &crate::state::domain::DomainShared,
) -> Status {
    match outcome {
        Ok(Ok(lrpc_abi::ENTRY_OK)) => Status::Ok,
        Ok(Ok(_)) => Status::ServerRejected,
        Ok(Err(e)) => server_faulted(kernel, server, &e),
        Err(s) => s,
    }
}

/// Runs the entry of `proc` in replica `i` through `ctx` (its store, locked by this thread)
/// with `deadline` set on the server, mapping the `in` segment there first if it is not yet
/// (`index`: the A-stack's index among the procedure's). `nested`: the call re-enters a
/// replica suspended lower on this thread's stack.
#[inline(always)]
fn enter(
    b: &Binding,
    (proc, index): (u32, u32),
    i: usize,
    mut args: EntryArgs,
    deadline: u64,
    mut ctx: wasmtime::StoreContextMut<'_, DomainData>,
    nested: bool,
) -> Outcome {
    args.oob = resolve_oob(b, (proc, index), i, &args, ctx.as_context_mut())?;
    if ctx.data().fresh.is_some() {
        return enter_isolated(b, (proc, i), args, deadline, ctx, nested);
    }
    let saved = std::mem::replace(&mut ctx.data_mut().deadline_tick, deadline);
    let r = b.export.entries[i][proc as usize].call(&mut ctx, args.params());
    ctx.data_mut().deadline_tick = saved;
    Ok(r)
}

/// [`enter`] into a replica of an isolated domain (`state::reset`): put back into its fresh
/// state first if another request used it last, and reset again at once, instead of
/// terminated, if the call traps or runs past its deadline (the client gets the fault's
/// status; the next call meets a clean replica). A re-entered replica is neither: its
/// suspended call still runs on the state.
#[cold]
#[inline(never)]
fn enter_isolated(
    b: &Binding,
    (proc, i): (u32, usize),
    args: EntryArgs,
    deadline: u64,
    mut ctx: wasmtime::StoreContextMut<'_, DomainData>,
    nested: bool,
) -> Outcome {
    let Some(replica) = b.server.replicas.get(i) else {
        return Err(Status::ServerTerminated);
    };
    if !nested && let Err(why) = replica.enter_request(ctx.as_context_mut()) {
        // Answered as a fault, so that `status_of` terminates the server.
        tracing::warn!(
            server = b.server.core.name,
            "terminating an isolated domain: {why}"
        );
        return Ok(Err(wasmtime::Error::msg(format!(
            "resetting the isolated domain failed: {why}"
        ))));
    }
    let saved = std::mem::replace(&mut ctx.data_mut().deadline_tick, deadline);
    let r = b.export.entries[i][proc as usize].call(&mut ctx, args.params());
    ctx.data_mut().deadline_tick = saved;
    let e = match r {
        Err(e) if !nested && !b.server.core.terminated.load(Ordering::Acquire) => e,
        r => return Ok(r),
    };
    let fault = Fault::classify(&e);
    if matches!(fault, Fault::Terminated) {
        return Ok(Err(e));
    }
    match replica.reset(ctx.as_context_mut(), false) {
        Ok(()) => {
            tracing::debug!(server = b.server.core.name, %fault, "isolated server reset after a fault");
            Err(fault.status())
        }
        Err(why) => {
            tracing::warn!(
                server = b.server.core.name,
                "terminating an isolated domain: {why}"
            );
            Ok(Err(e))
        }
    }
}

/// A call that does not migrate into the server's replicas: to the server's own thread, to a
/// component domain or to a server on another machine (see `translate`).
#[cold]
fn relayed(
    caller: &mut Caller<'_, DomainData>,
    client_key: ReplicaKey,
    p: &Prepared,
    proc: u32,
    relay: &dyn Relay,
) -> Status {
    let call = RelayCall {
        client_key,
        binding: p.binding,
        client_astack: p.client_astack,
        size: p.first.astack_cap as u32,
        index: p.index,
        proc,
        first: p.first,
    };
    relay.call(caller, &call)
}

/// A server's fault during a call: the server is terminated, the client gets the status.
#[cold]
fn server_faulted(
    kernel: &std::sync::Weak<crate::state::kernel::KernelInner>,
    server: &crate::state::domain::DomainShared,
    e: &wasmtime::Error,
) -> Status {
    let fault = Fault::classify(e);
    if let Some(k) = kernel.upgrade() {
        crate::terminate::terminate_shared(&k, server);
    }
    tracing::debug!(server = server.core.name, %fault, "server faulted during a call");
    fault.status()
}

/// The entry of a call into replica `i` through `ctx` (its store, locked by this thread), as
/// run with the call's linkage record on the stack: always inlined into the call path.
struct Entry<'a, 's> {
    call: RunArgs<'a>,
    i: usize,
    args: EntryArgs,
    ctx: wasmtime::StoreContextMut<'s, DomainData>,
}

impl Scoped for Entry<'_, '_> {
    type Output = Outcome;
    #[inline(always)]
    fn run(self) -> Outcome {
        self.call.entry(self.i, self.args, self.ctx, false)
    }
}

/// What a call's entry into a server replica needs, whichever way the replica is reached.
#[derive(Clone, Copy)]
struct RunArgs<'a> {
    client_key: ReplicaKey,
    raw: u64,
    p: &'a Prepared,
    proc: u32,
    deadline: u64,
}

/// The entry's outcome, or why the call was not sent (the slot changed, or the `in`
/// segment could not be mapped into the replica).
type Outcome = Result<wasmtime::Result<i32>, Status>;

impl RunArgs<'_> {
    /// The server entry's arguments for this call in replica `r` (see `args_in`), looked up
    /// again in the client's live binding (if it is gone, the call is refused rather than
    /// sent anywhere).
    #[inline]
    fn entry_args(&self, data: &DomainData, r: usize) -> Result<EntryArgs, Status> {
        if r == 0 {
            return Ok(self.p.first);
        }
        self.other_replica_args(data, r)
    }

    /// [`entry_args`](Self::entry_args) for a replica other than the first (out of the
    /// common path).
    #[cold]
    #[inline(never)]
    fn other_replica_args(&self, data: &DomainData, r: usize) -> Result<EntryArgs, Status> {
        let cb = live_binding(data, self.raw)?;
        let (e, local) = astack::astack(&cb.procs, self.proc as i32, self.p.client_astack as i32)?;
        // The same mask as in replica 0: the call lends or not wherever it runs.
        Ok(args_in(e, local, r, self.p.first.borrow))
    }

    /// Runs the call in replica `i` (whose key is `key`), whose store this thread has
    /// locked, with this call's linkage record on the thread's stack (the common case of
    /// this, the first replica tried being free, is written out in `transfer`).
    #[inline]
    fn locked(
        self,
        caller: &mut Caller<'_, DomainData>,
        i: usize,
        key: ReplicaKey,
        mut store: Guard<'_, wasmtime::Store<DomainData>>,
    ) -> Outcome {
        let args = self.entry_args(caller.data(), i)?;
        let entry = Entry {
            call: self,
            i,
            args,
            ctx: store.as_context_mut(),
        };
        self.recorded(caller, key, entry)
    }

    /// Runs `f` with this call's linkage record (to `server`) on the thread's stack.
    #[inline(always)]
    fn recorded<B: Scoped>(
        self,
        caller: &mut Caller<'_, DomainData>,
        server: ReplicaKey,
        f: B,
    ) -> B::Output {
        let call = linkage::Call {
            caller: self.client_key,
            server,
            binding: self.p.binding,
            proc: self.proc,
            astack: self.p.index,
            lent: self.p.lent,
        };
        linkage::with_record(caller, call, f)
    }

    /// Runs the entry in replica `i` through `ctx`, with the binding's deadline set on the
    /// server (`nested`: a re-entry, see [`enter`]).
    #[inline(always)]
    fn entry(
        self,
        i: usize,
        args: EntryArgs,
        ctx: wasmtime::StoreContextMut<'_, DomainData>,
        nested: bool,
    ) -> Outcome {
        let key = (self.proc, self.p.index);
        enter(
            self.p.binding.get(),
            key,
            i,
            args,
            self.deadline,
            ctx,
            nested,
        )
    }

    /// This thread's replica was busy: another free one; else one suspended in a call on this
    /// thread (re-entry, A→B→A); else wait for one (bounded by the deadline: a call cycle
    /// across threads must not deadlock).
    #[cold]
    #[inline(never)]
    fn contended(self, caller: &mut Caller<'_, DomainData>, start: usize) -> Outcome {
        let b = self.p.binding.get();
        let server = &b.server;
        let n = server.replicas.len();
        let picked = (1..n)
            .map(|k| (start + k) % n)
            .find_map(|i| server.replicas[i].store.try_lock().map(|g| (i, g)));
        if let Some((i, store)) = picked {
            return self.locked(caller, i, server.replicas[i].key, store);
        }
        let reentered = (0..n).find_map(|i| {
            let key = server.replicas[i].key;
            if linkage::lending(key) {
                // Suspended on this thread in a call that lends its arguments: running its
                // code now could change them under that call's server.
                return Some(Err(Status::ReentryWhileLent));
            }
            let args = self.entry_args(caller.data(), i);
            self.recorded(caller, key, || {
                linkage::reenter(key, |srv| {
                    args.and_then(|args| self.entry(i, args, srv.as_context_mut(), true))
                })
            })
        });
        match reentered {
            Some(r) => r,
            // The wait was the server's being busy, not its fault: the deadline that bounds
            // its run starts once it is ours.
            None => match server.replicas[start].wait_store(b.deadline) {
                Some(store) => RunArgs {
                    deadline: b.run_deadline(&caller.data().ticks),
                    ..self
                }
                .locked(caller, start, server.replicas[start].key, store),
                None => Err(Status::ServerBusy),
            },
        }
    }
}

/// The message-passing path: the `in` segment resolved in the server's replica 0, then the
/// request sent to the server's thread (`send_message`).
impl Relay for crate::mailbox::Mailbox {
    fn call(&self, caller: &mut Caller<'_, DomainData>, call: &RelayCall) -> Status {
        let b = call.binding.get();
        // Replica 0's arguments, as prepared.
        let mut args = call.first;
        let r0 = &b.server.replicas[0];
        let oob = r0.with_store(b.deadline, |ctx| {
            resolve_oob(b, (call.proc, call.index), 0, &args, ctx)
        });
        match oob {
            Ok(Ok(o)) => args.oob = o,
            Ok(Err(s)) => return s,
            Err(_) => return Status::ServerBusy,
        }
        send_message(caller, b, self, call, args)
    }

    fn translates(&self) -> bool {
        false
    }
}

/// The message-passing baseline: copy the A-stack into a message for the server's thread and
/// wait for its copy back (see `mailbox`, which also explains why a request owns its binding).
fn send_message(
    caller: &mut Caller<'_, DomainData>,
    b: &Binding,
    mailbox: &crate::mailbox::Mailbox,
    p: &RelayCall,
    args: EntryArgs,
) -> Status {
    use crate::mailbox::{Outcome, Request};
    let Some(client) = b.client.upgrade() else {
        return Status::StaleBinding;
    };
    // The binding's `Arc`, for the request to own (the call path's `Pinned` is valid only
    // while this thread waits, and the request may outlive that wait).
    let Some(binding) = lock(&client.core.ties)
        .client
        .iter()
        .find(|x| x.handle == b.handle)
        .cloned()
    else {
        return b.dead_status();
    };
    let range = client.replicas[usize::from(b.client_key.replica)].window_range();
    let mut request = vec![0u8; p.size as usize];
    if b.while_live(|| range.read(p.client_astack as usize, &mut request))
        .flatten()
        .is_none()
    {
        return b.dead_status();
    }
    let reply = mailbox.call(
        |reply, state| Request {
            binding,
            client: b.client_key,
            index: p.index,
            proc: p.proc as usize,
            astack: args.astack as u32,
            rest: (args.astack_cap, args.oob, args.oob_cap, args.borrow),
            wait: b.deadline,
            payload: request,
            state,
            reply,
            request: crate::state::reset::current_request(),
        },
        b.deadline,
    );
    let Ok(reply) = reply else {
        // The server thread did not answer within the deadline (its queue was long, or
        // its store busy); the request will not run if it has not started.
        return Status::ServerBusy;
    };
    match reply.outcome {
        Outcome::Entry(code) => {
            let written = b.while_live(|| range.write(p.client_astack as usize, &reply.payload));
            if written.flatten().is_none() {
                return b.dead_status();
            }
            if code == lrpc_abi::ENTRY_OK {
                Status::Ok
            } else {
                Status::ServerRejected
            }
        }
        Outcome::Busy => Status::ServerBusy,
        Outcome::Revoked => b.dead_status(),
        Outcome::Fault(fault) => {
            if let Some(k) = caller.data().kernel.upgrade() {
                crate::terminate::terminate_shared(&k, &b.server);
            }
            fault.status()
        }
    }
}

/// A call prepared on the client's thread and run on another one (a MultiRPC's helper, see
/// `multi`): the client's A-stack is already marked busy, and stays so until the client's
/// thread hears the outcome.
pub(super) struct Detached {
    pub binding: std::sync::Arc<Binding>,
    pub client_key: ReplicaKey,
    pub proc: u32,
    /// Index of the A-stack among the procedure's A-stacks.
    pub index: u32,
    /// The entry's arguments in each replica of the server (see `args_in`).
    pub args: Vec<EntryArgs>,
    pub kernel: std::sync::Weak<crate::state::kernel::KernelInner>,
    /// The client's request (`state::reset`), which this call is part of.
    pub request: u64,
}

impl Detached {
    /// Runs the call in a free replica of the server (or the first to come free within the
    /// binding's deadline), on this thread; the call's status. A server that faults is
    /// terminated, as on the call path. The server can not call back into the client,
    /// whose thread waits elsewhere holding its store: such a call finds it busy.
    pub(super) fn run(&self) -> Status {
        let b = &*self.binding;
        let server = &b.server;
        let Some((i, mut store)) = crate::state::domain::pick_replica(&server.replicas, b.deadline)
        else {
            return Status::ServerBusy;
        };
        let Some(&args) = self.args.get(i) else {
            return Status::BadAStack;
        };
        let key = (self.proc, self.index);
        let call = linkage::Call {
            caller: self.client_key,
            server: server.replicas[i].key,
            binding: Pinned::new(&self.binding),
            proc: self.proc,
            astack: self.index,
            lent: false,
        };
        let _request = crate::state::reset::adopt_request(self.request);
        // Counted from now: the wait for a free replica is not the server's run.
        let deadline = b.run_deadline(&store.data().ticks);
        let outcome = linkage::with_served(call, || {
            enter(b, key, i, args, deadline, store.as_context_mut(), false)
        });
        drop(store);
        let status = status_of(outcome, &self.kernel, server);
        if status == Status::Ok && !b.is_live() {
            return b.dead_status();
        }
        status
    }
}
