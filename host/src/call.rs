//! The kernel imports guests call: bind, unbind, call (the hot path), A-stack growth and
//! out-of-band segments.
//!
//! **The call path** (LRPC 3.2). `lrpc.call(handle, proc, astack)` runs in the client's
//! thread with the client's store: it validates the handle (owner, slot, generation), the
//! binding's liveness, the procedure and the A-stack (a range check per extent, then the
//! busy bit), records a linkage, takes the server replica's store (an uncontended lock; no
//! lock shared by unrelated domains), translates the A-stack address and calls the server's
//! entry stub on the same thread. Every value passed in is an untrusted integer; every
//! failure is a status code returned to the client, which keeps running. A server that
//! faults is terminated and the client gets a call-failed status.

use crate::astack::page_round;
use crate::binding::{Binding, ClientBinding, ClientSlot, Extent, OobView, ProcStacks, layout};
use crate::domain::{DomainData, Interrupt, lock, wait_lock};
use crate::error::{Error, Fault};
use crate::kernel::KernelInner;
use crate::linkage::{self, Pinned, ReplicaKey};
use crate::quota::Charge;
use lrpc_abi::{Status, desc, handle};
use lrpc_presentation::{Side, SidePresentation};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use wasmtime::{AsContextMut, Caller, Linker, Memory};

type HostResult<T> = wasmtime::Result<T>;

/// Longest interface name `bind` reads from a guest.
const MAX_NAME: usize = 512;

/// What an import returns for the outcome of its work.
fn answer(r: Result<(), Status>) -> HostResult<i32> {
    Ok(r.err().unwrap_or(Status::Ok) as i32)
}

/// Registers the kernel imports.
pub(crate) fn define(linker: &mut Linker<DomainData>) -> wasmtime::Result<()> {
    let m = lrpc_abi::IMPORT_MODULE;
    linker.func_wrap(m, lrpc_abi::import::CALL, call)?;
    linker.func_wrap(m, lrpc_abi::import::BIND, bind)?;
    linker.func_wrap(m, lrpc_abi::import::UNBIND, unbind)?;
    linker.func_wrap(m, lrpc_abi::import::ASTACKS_MORE, astacks_more)?;
    linker.func_wrap(m, lrpc_abi::import::OOB, oob)?;
    linker.func_wrap(m, lrpc_abi::import::REPLY_OOB, reply_oob)?;
    Ok(())
}

/// Classifies a handle that does not name one of the caller's live bindings.
fn bad_handle(data: &DomainData, raw: u64) -> Status {
    let (owner, slot, generation) = handle::unpack(raw);
    if owner == data.core.id {
        return match data.bindings.get(usize::from(slot)) {
            Some(s) if generation != 0 && generation <= s.generation => Status::StaleBinding,
            _ => Status::ForgedBinding,
        };
    }
    // Someone else's handle? Ask the domain it names (a slow path: refusals only).
    let foreign = data.kernel.upgrade().is_some_and(|k| {
        k.domain_by_id(owner)
            .is_some_and(|d| lock(&d.core.book).handles.contains(&raw))
    });
    if foreign {
        Status::ForeignBinding
    } else {
        Status::ForgedBinding
    }
}

/// Looks up the caller's live binding for `raw`, or the refusal status.
#[inline]
fn client_binding(data: &mut DomainData, raw: u64) -> Result<&mut ClientBinding, Status> {
    let (owner, slot, generation) = handle::unpack(raw);
    let me = data.core.id;
    let ok = owner == me
        && data
            .bindings
            .get(usize::from(slot))
            .is_some_and(|s| s.generation == generation && s.live.is_some());
    if !ok {
        return Err(bad_handle(data, raw));
    }
    let cb = data.bindings[usize::from(slot)]
        .live
        .as_mut()
        .expect("checked above");
    if !cb.binding.is_live() {
        return Err(cb.binding.dead_status());
    }
    Ok(cb)
}

/// What the call path keeps of the client's slot while the call is away: the binding,
/// pinned, and where the call's A-stack lies among the procedure's. Small on purpose (it is
/// built and read on every call); the server-side addresses are read once the serving
/// replica is known (`entry_args`).
struct Prepared {
    binding: Pinned,
    client_astack: u32,
    /// The extent, and the A-stack's index within it.
    extent: usize,
    local: u32,
    /// Index of the A-stack among the procedure's A-stacks (across extents).
    index: u32,
    size: u32,
}

fn prepare(data: &mut DomainData, raw: u64, proc: i32, astack: i32) -> Result<Prepared, Status> {
    let cb = client_binding(data, raw)?;
    let ps = usize::try_from(proc)
        .ok()
        .and_then(|p| cb.procs.get_mut(p))
        .ok_or(Status::BadProcedure)?;
    let (extent, local) = ps.locate(astack as u32).ok_or(Status::BadAStack)?;
    let e = &mut ps.extents[extent];
    let busy = &mut e.busy[local as usize];
    if *busy {
        return Err(Status::AStackBusy);
    }
    *busy = true;
    Ok(Prepared {
        binding: Pinned::new(&cb.binding),
        client_astack: astack as u32,
        extent,
        local,
        index: e.first + local,
        size: e.size,
    })
}

/// The server entry's arguments for this call in replica `r`: A-stack address and capacity,
/// `in` segment address and capacity, borrow mask. The segment address is `u32::MAX` when
/// the segment is not mapped into that replica yet (see `resolve_oob`). Read from the
/// client's slot, which no guest code has run against since `prepare` marked the A-stack
/// busy (so it is there; if it were not, the call is refused rather than sent anywhere).
fn entry_args(
    data: &DomainData,
    raw: u64,
    proc: u32,
    p: &Prepared,
    r: usize,
) -> Result<EntryArgs, Status> {
    let (_, slot, _) = handle::unpack(raw);
    let b = p.binding.get();
    let borrow = b.borrow.get(proc as usize).copied().unwrap_or(0);
    let e = data
        .bindings
        .get(usize::from(slot))
        .and_then(|s| s.live.as_ref())
        .and_then(|cb| cb.procs.get(proc as usize))
        .and_then(|ps| ps.extents.get(p.extent));
    let e = e.ok_or(Status::StaleBinding)?;
    let base = e.server_bases.get(r).copied().unwrap_or(0);
    let oob = e.oob_in.get(p.local as usize);
    let (oob_at, oob_cap) = oob.map_or((0, 0), |o| (o.server.get(r).copied().unwrap_or(0), o.cap));
    Ok((
        base.wrapping_add(p.local * e.size) as i32,
        e.size as i32,
        oob_at as i32,
        oob_cap as i32,
        borrow,
    ))
}

/// A server entry's arguments (see `entry_args`).
type EntryArgs = (i32, i32, i32, i32, i32);

/// Marks the call's A-stack free again. The binding is in its slot, or in the retired list
/// if it was unbound while the call was in flight; a retired binding whose last call
/// finished is dropped here.
fn release(data: &mut DomainData, raw: u64, proc: i32, p: &Prepared) {
    fn clear(cb: &mut ClientBinding, proc: i32, p: &Prepared) {
        if let Some(b) = cb
            .procs
            .get_mut(proc as usize)
            .and_then(|ps| ps.extents.get_mut(p.extent))
            .and_then(|e| e.busy.get_mut(p.local as usize))
        {
            *b = false;
        }
    }
    let (_, slot, generation) = handle::unpack(raw);
    if let Some(ClientSlot {
        generation: g,
        live: Some(cb),
    }) = data.bindings.get_mut(usize::from(slot))
        && *g == generation
    {
        clear(cb, proc, p);
        return;
    }
    if let Some(cb) = data.retired.iter_mut().find(|cb| cb.binding.handle == raw) {
        clear(cb, proc, p);
    }
    data.retired.retain(|cb| cb.any_busy());
}

/// `lrpc.call(handle, proc, astack) -> status`.
fn call(mut caller: Caller<'_, DomainData>, raw: i64, proc: i32, astack: i32) -> HostResult<i32> {
    let raw = raw as u64;
    let data = caller.data_mut();
    let p = match prepare(data, raw, proc, astack) {
        Ok(p) => p,
        Err(s) => return Ok(s as i32),
    };
    let client_key = data.key();
    let now = data.ticks.load(Ordering::Relaxed);
    let mut status = transfer(&mut caller, client_key, raw, &p, proc as u32, now);
    if status == Status::Ok && !p.binding.get().is_live() {
        // Unbound or revoked while the call was in flight: its A-stack left both memories,
        // so whatever the server wrote did not reach the client.
        status = p.binding.get().dead_status();
    }
    let data = caller.data_mut();
    release(data, raw, proc, &p);
    if status != Status::Ok {
        // A failed call's stub reads nothing off the A-stack: windows revoked while this
        // client ran can go now (see `Replica::unmap_or_defer`).
        flush_own(&caller);
    }
    let data = caller.data_mut();
    if data.core.terminated.load(Ordering::Acquire) {
        // The client itself was terminated while it waited: unwind it.
        return Err(wasmtime::Error::new(Interrupt::Terminated));
    }
    Ok(status as i32)
}

/// Not an entry's answer: the `in` segment could not be mapped into the serving replica.
const OOB_FAILED: i32 = i32::MIN;

/// The server address of the call's `in` segment in replica `i` (`at`, as `entry_args` read
/// it), mapping the segment there first if it was created while that replica was busy (see
/// `Binding::place_lazily`).
#[inline]
fn resolve_oob(
    b: &Binding,
    p: &Prepared,
    proc: u32,
    i: usize,
    args: &EntryArgs,
    ctx: wasmtime::StoreContextMut<'_, DomainData>,
) -> Result<i32, Status> {
    let (at, cap) = (args.2, args.3);
    if cap == 0 || at as u32 != u32::MAX {
        return Ok(at);
    }
    map_oob_lazily(b, p, proc, i, ctx)
}

/// The slow half of `resolve_oob`: maps the segment into replica `i` now.
#[cold]
#[inline(never)]
fn map_oob_lazily(
    b: &Binding,
    p: &Prepared,
    proc: u32,
    i: usize,
    ctx: wasmtime::StoreContextMut<'_, DomainData>,
) -> Result<i32, Status> {
    let off = b
        .map_into((proc, p.index, lrpc_abi::OOB_IN), i, ctx)
        .map_err(|e| e.status())?;
    i32::try_from(off).map_err(|_| Status::ResourceExhausted)
}

/// Runs the call in the server and maps its outcome to a status.
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
    let deadline = now.saturating_add(b.deadline_ticks);
    if let Some(mailbox) = &b.export.mailbox {
        let mut args = match entry_args(caller.data(), raw, proc, p, 0) {
            Ok(a) => a,
            Err(s) => return s,
        };
        let r0 = &server.replicas[0];
        let oob = r0.with_store(b.deadline, |ctx| resolve_oob(b, p, proc, 0, &args, ctx));
        match oob {
            Ok(Ok(o)) => args.2 = o,
            Ok(Err(s)) => return s,
            Err(_) => return Status::ServerBusy,
        }
        return send_message(caller, b, mailbox, p, proc, deadline, args);
    }
    // Why the call could not be sent (the `in` segment could not be mapped), when `run`
    // answers `OOB_FAILED`.
    let oob_refusal = std::cell::Cell::new(Status::ResourceExhausted);
    // Runs the entry in replica `i` through `ctx`, with this call's linkage record on the
    // thread's stack and the binding's deadline set on the server.
    let run = |i: usize,
               mut args: EntryArgs,
               mut ctx: wasmtime::StoreContextMut<'_, DomainData>|
     -> wasmtime::Result<i32> {
        match resolve_oob(b, p, proc, i, &args, ctx.as_context_mut()) {
            Ok(o) => args.2 = o,
            Err(s) => {
                oob_refusal.set(s);
                return Ok(OOB_FAILED);
            }
        }
        let saved = std::mem::replace(&mut ctx.data_mut().deadline_tick, deadline);
        let r = b.export.entries[i][proc as usize].call(&mut ctx, args);
        ctx.data_mut().deadline_tick = saved;
        r
    };
    // A free replica, starting from this thread's own so that threads do not contend for
    // the same one; else one suspended in a call on this thread (re-entry, A→B→A); else wait
    // for one (bounded by the deadline: a call cycle across threads must not deadlock).
    let n = server.replicas.len();
    let start = if n == 1 {
        0
    } else {
        crate::domain::thread_slot() % n
    };
    let picked = (0..n)
        // `start < n` and `k < n`: one subtraction instead of a division on the call path.
        .map(|k| {
            if start + k >= n {
                start + k - n
            } else {
                start + k
            }
        })
        .find_map(|i| server.replicas[i].store.try_lock().map(|g| (i, g)));
    let outcome = match picked {
        Some((i, mut store)) => {
            let args = match entry_args(caller.data(), raw, proc, p, i) {
                Ok(a) => a,
                Err(s) => return s,
            };
            linkage::with_record(
                caller,
                client_key,
                server.replicas[i].key,
                p.binding,
                proc,
                p.index,
                || run(i, args, store.as_context_mut()),
            )
        }
        None => {
            let reentered = (0..n).find_map(|i| {
                let key = server.replicas[i].key;
                let args = entry_args(caller.data(), raw, proc, p, i);
                linkage::with_record(caller, client_key, key, p.binding, proc, p.index, || {
                    linkage::reenter(key, |srv| match args {
                        Ok(args) => run(i, args, srv.as_context_mut()),
                        Err(s) => {
                            oob_refusal.set(s);
                            Ok(OOB_FAILED)
                        }
                    })
                })
            });
            match reentered {
                Some(r) => r,
                None => {
                    let Some(mut store) = wait_lock(&server.replicas[start].store, b.deadline)
                    else {
                        return Status::ServerBusy;
                    };
                    let args = match entry_args(caller.data(), raw, proc, p, start) {
                        Ok(a) => a,
                        Err(s) => return s,
                    };
                    linkage::with_record(
                        caller,
                        client_key,
                        server.replicas[start].key,
                        p.binding,
                        proc,
                        p.index,
                        || run(start, args, store.as_context_mut()),
                    )
                }
            }
        }
    };
    match outcome {
        Ok(lrpc_abi::ENTRY_OK) => Status::Ok,
        Ok(OOB_FAILED) => oob_refusal.get(),
        Ok(_) => Status::ServerRejected,
        Err(e) => {
            let fault = Fault::classify(&e);
            if let Some(k) = caller.data().kernel.upgrade() {
                crate::terminate::terminate_shared(&k, server);
            }
            tracing::debug!(server = server.core.name, %fault, "server faulted during a call");
            fault.status()
        }
    }
}

/// The message-passing baseline: copy the A-stack into a message for the server's thread and
/// wait for its copy back (see `mailbox`, which also explains why a request owns its binding).
fn send_message(
    caller: &mut Caller<'_, DomainData>,
    b: &Binding,
    mailbox: &crate::mailbox::Mailbox,
    p: &Prepared,
    proc: u32,
    deadline: u64,
    args: EntryArgs,
) -> Status {
    use crate::mailbox::{Outcome, Request};
    let Some(client) = b.client.upgrade() else {
        return Status::StaleBinding;
    };
    // The binding's `Arc`, for the request to own (the call path's `Pinned` is valid only
    // while this thread waits, and the request may outlive that wait).
    let Some(binding) = lock(&client.core.book)
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
            proc: proc as usize,
            astack: args.0 as u32,
            rest: (args.1, args.2, args.3, args.4),
            deadline_tick: deadline,
            wait: b.deadline,
            payload: request,
            state,
            reply,
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

fn memory(caller: &mut Caller<'_, DomainData>) -> Option<Memory> {
    caller.get_export("memory").and_then(|e| e.into_memory())
}

fn read_guest(caller: &mut Caller<'_, DomainData>, ptr: i32, len: usize) -> Option<Vec<u8>> {
    let mem = memory(caller)?;
    let mut buf = vec![0; len];
    mem.read(&*caller, ptr as u32 as usize, &mut buf).ok()?;
    Some(buf)
}

fn write_guest(caller: &mut Caller<'_, DomainData>, ptr: i32, bytes: &[u8]) -> Result<(), Status> {
    let mem = memory(caller).ok_or(Status::BadPointer)?;
    mem.write(&mut *caller, ptr as u32 as usize, bytes)
        .map_err(|_| Status::BadPointer)
}

/// Unmaps the calling replica's windows whose revocation waited for it to stop reading them
/// (see `Replica::unmap_or_defer`): inside an import, its stubs are not reading an A-stack.
fn flush_own(caller: &Caller<'_, DomainData>) {
    let data = caller.data();
    if let Some(k) = data.kernel.upgrade()
        && let Some(d) = k.domain_by_id(data.core.id)
        && let Some(r) = d.replicas.get(usize::from(data.replica))
    {
        r.flush_deferred();
    }
}

fn kernel_of(caller: &Caller<'_, DomainData>) -> Result<Arc<KernelInner>, Status> {
    caller
        .data()
        .kernel
        .upgrade()
        .ok_or(Status::ResourceExhausted)
}

fn status_of(e: &Error) -> Status {
    e.status()
}

/// `lrpc.bind(name_ptr, name_len, fingerprint, desc_ptr, desc_cap) -> status`.
fn bind(
    mut caller: Caller<'_, DomainData>,
    name_ptr: i32,
    name_len: i32,
    fingerprint: i64,
    desc_ptr: i32,
    desc_cap: i32,
) -> HostResult<i32> {
    answer(bind_inner(
        &mut caller,
        name_ptr,
        name_len,
        fingerprint as u64,
        desc_ptr,
        desc_cap,
    ))
}

fn bind_inner(
    caller: &mut Caller<'_, DomainData>,
    name_ptr: i32,
    name_len: i32,
    fingerprint: u64,
    desc_ptr: i32,
    desc_cap: i32,
) -> Result<(), Status> {
    flush_own(caller);
    let len = usize::try_from(name_len).map_err(|_| Status::BadPointer)?;
    if len > MAX_NAME {
        return Err(Status::UnknownInterface);
    }
    let name = read_guest(caller, name_ptr, len).ok_or(Status::BadPointer)?;
    let name = String::from_utf8(name).map_err(|_| Status::UnknownInterface)?;
    let kernel = kernel_of(caller)?;
    let export = kernel.clerk.get(&name).ok_or(Status::UnknownInterface)?;
    if export.plan.fingerprint != fingerprint {
        return Err(Status::InterfaceMismatch);
    }
    let nprocs = export.plan.procs.len();
    let desc_len = desc::len(nprocs);
    if usize::try_from(desc_cap).map_or(true, |c| c < desc_len) {
        return Err(Status::BadPointer);
    }
    // Check the descriptor's place before allocating anything.
    write_guest(caller, desc_ptr, &vec![0; desc_len])?;
    let data = caller.data();
    let key = data.key();
    if export.server.core.id == key.domain {
        return Err(Status::SelfBinding);
    }
    if export.server.core.terminated.load(Ordering::Acquire) {
        return Err(Status::ServerTerminated);
    }
    let client = kernel
        .domain_by_id(key.domain)
        .ok_or(Status::ResourceExhausted)?;
    let client_presentation = client
        .core
        .presentations
        .iter()
        .find(|p| p.interface == export.plan.name)
        .cloned()
        .unwrap_or_else(|| SidePresentation::default_for(&export.plan.name, Side::Client));
    let combination =
        lrpc_presentation::combine(&export.plan, &client_presentation, &export.presentation)
            .map_err(|_| Status::InterfaceMismatch)?;
    let direct = combination.transport == lrpc_presentation::Transport::Direct;
    let mut flags = if combination.clear_residue {
        desc::FLAG_CLEAR_RESIDUE
    } else {
        0
    };
    // A free slot and the next generation for it.
    let slot = data
        .bindings
        .iter()
        .position(|s| s.live.is_none() && s.generation < u32::MAX)
        .unwrap_or(data.bindings.len());
    let slot16 = u16::try_from(slot).map_err(|_| Status::ResourceExhausted)?;
    let generation = data.bindings.get(slot).map_or(0, |s| s.generation) + 1;
    let raw = handle::pack(key.domain, slot16, generation);

    let sizes: Vec<(u32, u32)> = export
        .plan
        .procs
        .iter()
        .map(|p| (p.astack_size, p.astack_count))
        .collect();
    let (offs, total) = layout(&sizes).ok_or(Status::ResourceExhausted)?;
    let binding = Arc::new(Binding::new(
        raw,
        combination,
        export.clone(),
        &client,
        key,
        export.deadline,
        kernel.config.tick,
    ));
    // The client pays for the binding: the binding itself, an extent per procedure, the
    // segment's bytes and a mapping per memory it enters (its own, each server replica's,
    // and the server copy's on the direct path).
    binding
        .charge(Charge {
            bindings: 1,
            extents: nprocs as u64,
            astack_bytes: total as u64,
            mappings: 1 + export.server.replicas.len() as u64 + u64::from(direct),
            ..Charge::default()
        })
        .map_err(|e| status_of(&e))?;
    let (segment, at) = match binding.place(total, (key, caller.as_context_mut())) {
        Ok(placed) => placed,
        Err(e) => {
            // Nothing is mapped; revoking returns the charge.
            binding.revoke_with(crate::binding::RevokeReason::Unbound, None);
            return Err(status_of(&e));
        }
    };
    // The direct-linked path: a copy of the server in this client's store (see `direct`).
    // A client that can not be linked (no exported, growable function table) falls back to
    // the isolated path.
    let linked = if direct {
        match crate::direct::link(caller, &kernel.linker, &export, &segment) {
            Ok(d) => {
                flags |= desc::FLAG_DIRECT;
                binding.adopt_direct(d.range, d.offset, segment.len());
                Some(d)
            }
            Err(_) => None,
        }
    } else {
        None
    };
    let replicas = at.server.len();
    let mut procs = Vec::with_capacity(nprocs);
    let mut bytes = Vec::with_capacity(desc_len);
    bytes.extend_from_slice(
        &desc::Header {
            handle: raw,
            nprocs: nprocs as u32,
            flags,
        }
        .encode(),
    );
    for (i, &(size, count)) in sizes.iter().enumerate() {
        let client_base = (at.client + offs[i]) as u32;
        procs.push(ProcStacks {
            extents: vec![Extent {
                client_base,
                server_bases: at.server.iter().map(|s| (s + offs[i]) as u32).collect(),
                size,
                count,
                first: 0,
                busy: vec![false; count as usize],
                oob_in: vec![empty_oob(replicas); count as usize],
            }],
        });
        bytes.extend_from_slice(
            &desc::Extent {
                base: client_base,
                size,
                count,
            }
            .encode(),
        );
    }
    for (i, off) in offs.iter().enumerate() {
        let rec = match &linked {
            Some(d) => desc::Direct {
                index: d.entries[i],
                server_base: (d.offset + off) as u32,
                borrow: binding.borrow[i] as u32,
                fast: d.fast[i],
            },
            None => desc::Direct::default(),
        };
        bytes.extend_from_slice(&rec.encode());
    }
    binding
        .adopt_astacks(segment, at)
        .map_err(|e| status_of(&e))?;
    {
        let mut book = lock(&client.core.book);
        book.client.push(binding.clone());
        book.handles.insert(raw);
    }
    lock(&export.server.core.book)
        .server
        .push(Arc::downgrade(&binding));
    if export.server.core.terminated.load(Ordering::Acquire) {
        // Lost a race with the server's termination: do not hand out a binding the
        // terminator did not see.
        binding.revoke_with(crate::binding::RevokeReason::ServerTerminated, None);
        return Err(Status::ServerTerminated);
    }
    let data = caller.data_mut();
    if slot == data.bindings.len() {
        data.bindings.push(ClientSlot::default());
    }
    data.bindings[slot] = ClientSlot {
        generation,
        live: Some(ClientBinding {
            binding,
            procs: procs.into_boxed_slice(),
        }),
    };
    write_guest(caller, desc_ptr, &bytes)
}

fn empty_oob(replicas: usize) -> OobView {
    OobView {
        cap: 0,
        server: vec![0; replicas].into_boxed_slice(),
    }
}

/// `lrpc.unbind(handle) -> status`.
fn unbind(mut caller: Caller<'_, DomainData>, raw: i64) -> HostResult<i32> {
    let raw = raw as u64;
    let data = caller.data_mut();
    let (owner, slot, generation) = handle::unpack(raw);
    let ok = owner == data.core.id
        && data
            .bindings
            .get(usize::from(slot))
            .is_some_and(|s| s.generation == generation && s.live.is_some());
    if !ok {
        return Ok(bad_handle(data, raw) as i32);
    }
    let cb = data.bindings[usize::from(slot)]
        .live
        .take()
        .expect("checked above");
    cb.binding
        .revoke_with(crate::binding::RevokeReason::Unbound, None);
    if cb.any_busy() {
        // A call on it is still in flight further down this thread: keep it alive (see
        // `linkage::Pinned`) until that call releases its A-stack.
        data.retired.push(cb);
    } else {
        // Its windows waited for this replica (it is running: it called); in the kernel
        // now, it reads none of them, unless a call on it is still in flight further down.
        flush_own(&caller);
    }
    Ok(Status::Ok as i32)
}

/// `lrpc.astacks_more(handle, proc, extent_ptr) -> status`.
fn astacks_more(
    mut caller: Caller<'_, DomainData>,
    raw: i64,
    proc: i32,
    extent_ptr: i32,
) -> HostResult<i32> {
    answer(astacks_more_inner(
        &mut caller,
        raw as u64,
        proc,
        extent_ptr,
    ))
}

fn astacks_more_inner(
    caller: &mut Caller<'_, DomainData>,
    raw: u64,
    proc: i32,
    extent_ptr: i32,
) -> Result<(), Status> {
    flush_own(caller);
    write_guest(caller, extent_ptr, &[0; desc::EXTENT_LEN])?;
    let key = caller.data().key();
    let (binding, size, count, first) = {
        let cb = client_binding(caller.data_mut(), raw)?;
        let ps = usize::try_from(proc)
            .ok()
            .and_then(|p| cb.procs.get(p))
            .ok_or(Status::BadProcedure)?;
        if ps.extents.len() >= crate::binding::MAX_EXTENTS {
            return Err(Status::QuotaAStacks);
        }
        let last = ps.extents.last().expect("every procedure has an extent");
        (
            cb.binding.clone(),
            last.size,
            last.count,
            last.first + last.count,
        )
    };
    let bytes = (size as usize)
        .checked_mul(count as usize)
        .ok_or(Status::QuotaAStacks)?;
    let charge = Charge {
        extents: 1,
        astack_bytes: page_round(bytes).ok_or(Status::QuotaAStacks)? as u64,
        mappings: 1 + binding.server.replicas.len() as u64,
        ..Charge::default()
    };
    binding.charge(charge).map_err(|e| status_of(&e))?;
    let (segment, at) = match binding.place(bytes, (key, caller.as_context_mut())) {
        Ok(placed) => placed,
        Err(e) => {
            binding.refund(charge);
            return Err(status_of(&e));
        }
    };
    let extent = Extent {
        client_base: at.client as u32,
        server_bases: at.server.iter().map(|&s| s as u32).collect(),
        size,
        count,
        first,
        busy: vec![false; count as usize],
        oob_in: vec![empty_oob(at.server.len()); count as usize],
    };
    let client_base = at.client as u32;
    binding
        .adopt_astacks(segment, at)
        .map_err(|e| status_of(&e))?;
    let cb = client_binding(caller.data_mut(), raw)?;
    cb.procs[proc as usize].extents.push(extent);
    let rec = desc::Extent {
        base: client_base,
        size,
        count,
    };
    write_guest(caller, extent_ptr, &rec.encode())
}

/// Segment capacity for a request of `min` bytes: at least 64 KiB, powers of two.
fn oob_capacity(min: usize, max: usize) -> Result<usize, Status> {
    if min > max {
        return Err(Status::QuotaOutOfBand);
    }
    let cap = min
        .max(64 * 1024)
        .checked_next_power_of_two()
        .ok_or(Status::ResourceExhausted)?;
    page_round(cap.min(page_round(max).unwrap_or(max))).ok_or(Status::ResourceExhausted)
}

/// Makes a new out-of-band segment of at least `min` bytes for `okey`, replacing (and
/// unmapping) the one it had; `own` is the store of the replica asking.
fn new_oob(
    binding: &Binding,
    okey: crate::binding::OobKey,
    min: usize,
    kernel: &KernelInner,
    own: (ReplicaKey, wasmtime::StoreContextMut<'_, DomainData>),
) -> Result<(usize, crate::binding::Placement), Status> {
    let cap = oob_capacity(min, kernel.config.max_oob)?;
    let charge = Charge {
        oob_bytes: cap as u64,
        mappings: 1 + binding.server.replicas.len() as u64,
        ..Charge::default()
    };
    binding.charge(charge).map_err(|e| status_of(&e))?;
    let (segment, at) = match binding.place_lazily(cap, own) {
        Ok(placed) => placed,
        Err(e) => {
            binding.refund(charge);
            return Err(status_of(&e));
        }
    };
    let placed = at.clone();
    binding
        .replace_oob(okey, segment, at, charge)
        .map_err(|e| status_of(&e))?;
    Ok((cap, placed))
}

/// `lrpc.oob(handle, proc, astack, dir, min_len, seg_ptr) -> status`.
fn oob(
    mut caller: Caller<'_, DomainData>,
    raw: i64,
    proc: i32,
    astack: i32,
    dir: i32,
    min_len: i32,
    seg_ptr: i32,
) -> HostResult<i32> {
    answer(oob_inner(
        &mut caller,
        raw as u64,
        proc,
        astack,
        dir,
        min_len,
        seg_ptr,
    ))
}

fn oob_inner(
    caller: &mut Caller<'_, DomainData>,
    raw: u64,
    proc: i32,
    astack: i32,
    dir: i32,
    min_len: i32,
    seg_ptr: i32,
) -> Result<(), Status> {
    flush_own(caller);
    write_guest(caller, seg_ptr, &[0; lrpc_abi::segment::LEN])?;
    if dir != lrpc_abi::OOB_IN && dir != lrpc_abi::OOB_OUT {
        return Err(Status::BadPointer);
    }
    let min = usize::try_from(min_len).map_err(|_| Status::BadPointer)?;
    let kernel = kernel_of(caller)?;
    let key = caller.data().key();
    let (binding, ei, index, first) = {
        let cb = client_binding(caller.data_mut(), raw)?;
        let ps = usize::try_from(proc)
            .ok()
            .and_then(|p| cb.procs.get(p))
            .ok_or(Status::BadProcedure)?;
        let (ei, index) = ps.locate(astack as u32).ok_or(Status::BadAStack)?;
        (cb.binding.clone(), ei, index, ps.extents[ei].first + index)
    };
    let okey = (proc as u32, first, dir);
    let (cap, at) = match binding.oob(okey) {
        Some((cap, at)) if cap >= min => (cap, at),
        existing => {
            if min == 0 && existing.is_none() {
                // A request for 0 bytes only reports an existing segment.
                return Err(Status::BadReply);
            }
            new_oob(&binding, okey, min, &kernel, (key, caller.as_context_mut()))?
        }
    };
    let mut at = at;
    if at.client == crate::binding::UNMAPPED {
        // Made by a server thread that could not reach this client's store: map it here.
        at.client = binding
            .map_into_client(okey, caller.as_context_mut())
            .map_err(|e| status_of(&e))?;
    }
    if dir == lrpc_abi::OOB_IN {
        let cb = client_binding(caller.data_mut(), raw)?;
        cb.procs[proc as usize].extents[ei].oob_in[index as usize] = OobView {
            cap: cap as u32,
            server: at
                .server
                .iter()
                .map(|&s| u32::try_from(s).unwrap_or(u32::MAX))
                .collect(),
        };
    }
    let rec = lrpc_abi::segment::Segment {
        addr: at.client as u32,
        cap: cap as u32,
    };
    write_guest(caller, seg_ptr, &rec.encode())
}

/// `lrpc.reply_oob(min_len, seg_ptr) -> status`, called by a server inside a call.
fn reply_oob(mut caller: Caller<'_, DomainData>, min_len: i32, seg_ptr: i32) -> HostResult<i32> {
    answer(reply_oob_inner(&mut caller, min_len, seg_ptr))
}

fn reply_oob_inner(
    caller: &mut Caller<'_, DomainData>,
    min_len: i32,
    seg_ptr: i32,
) -> Result<(), Status> {
    write_guest(caller, seg_ptr, &[0; lrpc_abi::segment::LEN])?;
    let me = caller.data().key();
    let (_, server, pinned, proc, index) = linkage::current().ok_or(Status::NoCall)?;
    if server != me {
        return Err(Status::NoCall);
    }
    let binding = pinned.get();
    let min = usize::try_from(min_len).map_err(|_| Status::BadPointer)?;
    let kernel = kernel_of(caller)?;
    let okey = (proc, index, lrpc_abi::OOB_OUT);
    let (cap, at) = match binding.oob(okey) {
        Some((cap, at)) if cap >= min => (cap, at),
        _ => new_oob(binding, okey, min, &kernel, (me, caller.as_context_mut()))?,
    };
    let mut here = at.server[usize::from(me.replica)];
    if here == crate::binding::UNMAPPED {
        // The segment was made while another replica served this A-stack: map it here.
        here = binding
            .map_into(okey, usize::from(me.replica), caller.as_context_mut())
            .map_err(|e| status_of(&e))?;
    }
    let rec = lrpc_abi::segment::Segment {
        addr: here as u32,
        cap: cap as u32,
    };
    write_guest(caller, seg_ptr, &rec.encode())
}
