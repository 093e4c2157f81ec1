//! `lrpc.oob` and `lrpc.reply_oob`: out-of-band segments, for arguments or results larger
//! than an A-stack (another window shared by the same pair, attached to one A-stack, grown on
//! demand and reused).

use super::{HostResult, answer, client_binding, flush_own, kernel_of, status_of, write_guest};
use crate::astack::astack_mut;
use crate::astack::page_round;
use crate::quota::Charge;
use crate::state::binding::Binding;
use crate::state::domain::DomainData;
use crate::state::kernel::KernelInner;
use crate::state::linkage::{self, ReplicaKey};
use lrpc_abi::Status;
use wasmtime::{AsContextMut, Caller};

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
    okey: crate::state::place::OobKey,
    min: usize,
    kernel: &KernelInner,
    own: (ReplicaKey, wasmtime::StoreContextMut<'_, DomainData>),
) -> Result<(usize, crate::astack::Placement), Status> {
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
pub(super) fn oob(
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
    // One look at the client's slot: the procedure and A-stack checked, and in the common
    // case (the segment exists, is big enough and is mapped here) the answer read and the
    // call path's view of an `in` segment refreshed under one lock of the binding.
    let (binding, okey, fast) = {
        let cb = client_binding(caller.data_mut(), raw)?;
        let (e, index) = astack_mut(&mut cb.procs, proc, astack)?;
        let okey = (proc as u32, e.first + index, dir);
        let view = &mut e.oob_in[index as usize];
        let fast = cb.binding.with_oob(okey, |at| {
            let usable = at.len >= min && at.client != crate::state::place::UNMAPPED;
            if usable && dir == lrpc_abi::OOB_IN {
                view.refresh(at);
            }
            (usable, at.len, at.client)
        });
        (cb.binding.clone(), okey, fast)
    };
    let (cap, client) = match fast {
        Some((true, cap, client)) => (cap, client),
        existing => {
            if min == 0 && existing.is_none() {
                // A request for 0 bytes only reports an existing segment.
                return Err(Status::BadReply);
            }
            let made = segment_slow(&binding, okey, min, &kernel, (key, Side::Client), caller)?;
            if dir == lrpc_abi::OOB_IN {
                refresh_view(caller, raw, proc, astack, &binding, okey)?;
            }
            made
        }
    };
    let rec = lrpc_abi::segment::Segment {
        addr: client as u32,
        cap: cap as u32,
    };
    write_guest(caller, seg_ptr, &rec.encode())
}

/// Brings the call path's view of an `in` segment up to date after it was made, grown or
/// mapped (the rare case of `oob`).
#[cold]
fn refresh_view(
    caller: &mut Caller<'_, DomainData>,
    raw: u64,
    proc: i32,
    astack: i32,
    binding: &Binding,
    okey: crate::state::place::OobKey,
) -> Result<(), Status> {
    let cb = client_binding(caller.data_mut(), raw)?;
    let (e, index) = astack_mut(&mut cb.procs, proc, astack)?;
    let view = &mut e.oob_in[index as usize];
    binding.with_oob(okey, |at| view.refresh(at));
    Ok(())
}

/// Which side asks for a segment: the client, or the server replica serving the call.
#[derive(Clone, Copy)]
pub(super) enum Side {
    Client,
    Server,
}

/// The rare half of `oob` and `reply_oob`: makes (or grows) the segment to `min` bytes, and
/// maps it into the asking replica (`key`, on `side`) when it was made where that replica's
/// store could not be reached; its capacity and address there.
#[cold]
pub(super) fn segment_slow(
    binding: &Binding,
    okey: crate::state::place::OobKey,
    min: usize,
    kernel: &KernelInner,
    (key, side): (ReplicaKey, Side),
    caller: &mut Caller<'_, DomainData>,
) -> Result<(usize, usize), Status> {
    let (cap, at) = match binding.oob(okey) {
        Some((cap, at)) if cap >= min => (cap, at),
        _ => new_oob(binding, okey, min, kernel, (key, caller.as_context_mut()))?,
    };
    let replica = usize::from(key.replica);
    let here = match side {
        Side::Client => at.client,
        Side::Server => at.server.get(replica).copied().ok_or(Status::NoCall)?,
    };
    if here != crate::state::place::UNMAPPED {
        return Ok((cap, here));
    }
    let mapped = match side {
        Side::Client => binding.map_into_client(okey, caller.as_context_mut()),
        Side::Server => binding.map_into(okey, replica, caller.as_context_mut()),
    };
    Ok((cap, mapped.map_err(|e| status_of(&e))?))
}

/// `lrpc.reply_oob(min_len, seg_ptr) -> status`, called by a server inside a call.
pub(super) fn reply_oob(
    mut caller: Caller<'_, DomainData>,
    min_len: i32,
    seg_ptr: i32,
) -> HostResult<i32> {
    answer(reply_oob_inner(&mut caller, min_len, seg_ptr))
}

fn reply_oob_inner(
    caller: &mut Caller<'_, DomainData>,
    min_len: i32,
    seg_ptr: i32,
) -> Result<(), Status> {
    write_guest(caller, seg_ptr, &[0; lrpc_abi::segment::LEN])?;
    let me = caller.data().key();
    let min = usize::try_from(min_len).map_err(|_| Status::BadPointer)?;
    let (pinned, proc, index) = match linkage::current() {
        Some(c) if c.server == me => (c.binding, c.proc, c.astack),
        // Not a core client's call: one a component client makes through the kernel?
        _ => {
            let (addr, cap) =
                crate::component::mixed::reply_window(me, caller.as_context_mut(), min)?;
            let rec = lrpc_abi::segment::Segment { addr, cap };
            return write_guest(caller, seg_ptr, &rec.encode());
        }
    };
    let binding = pinned.get();
    let kernel = kernel_of(caller)?;
    let okey = (proc, index, lrpc_abi::OOB_OUT);
    let r = usize::from(me.replica);
    let found = binding.with_oob(okey, |at| (at.len, at.server.get(r).copied()));
    let (cap, here) = match found {
        Some((cap, Some(here))) if cap >= min && here != crate::state::place::UNMAPPED => {
            (cap, here)
        }
        _ => segment_slow(binding, okey, min, &kernel, (me, Side::Server), caller)?,
    };
    let rec = lrpc_abi::segment::Segment {
        addr: here as u32,
        cap: cap as u32,
    };
    write_guest(caller, seg_ptr, &rec.encode())
}
