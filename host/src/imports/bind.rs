//! `lrpc.bind`, `lrpc.unbind` and `lrpc.astacks_more`: making a binding (clerk lookup,
//! presentations, A-stack placement, the descriptor), revoking it, and growing its A-stacks
//! when nested calls have used them all (LRPC 5.2).

use super::{
    HostResult, answer, bad_handle, bindable, checked_name_len, client_binding, find_export,
    flush_own, status_of, write_guest,
};
use crate::astack::page_round;
use crate::astack::{Extent, ProcStacks, plan_layout};
use crate::quota::Charge;
use crate::slot;
use crate::state::binding::{Binding, ClientBinding};
use crate::state::domain::DomainData;
use crate::sync::lock;
use lrpc_abi::{Status, desc, handle};
use lrpc_presentation::{Side, SidePresentation};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use wasmtime::{AsContextMut, Caller};

/// The export a bind import names: where the name is in the guest's memory (its length
/// checked by `checked_name_len`) and the fingerprint the guest's stubs were generated for.
#[derive(Clone, Copy)]
pub(super) struct Named {
    pub(super) ptr: i32,
    pub(super) len: usize,
    pub(super) fingerprint: u64,
}

impl Named {
    /// The name and fingerprint as the import's arguments give them; the name's length is
    /// checked before anything is read.
    pub(super) fn new(ptr: i32, len: i32, fingerprint: i64) -> Result<Named, Status> {
        let len = checked_name_len(len)?;
        Ok(Named {
            ptr,
            len,
            fingerprint: fingerprint as u64,
        })
    }
}

/// Where a guest wants a descriptor written: address and capacity in its memory.
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub(super) ptr: i32,
    cap: i32,
}

impl Place {
    /// Checks that a descriptor of `len` bytes fits and can be written here (zeroing it),
    /// before anything is allocated for it.
    pub(super) fn check(
        self,
        caller: &mut Caller<'_, DomainData>,
        len: usize,
    ) -> Result<(), Status> {
        if usize::try_from(self.cap).map_or(true, |c| c < len) {
            return Err(Status::BadPointer);
        }
        write_guest(caller, self.ptr, &vec![0; len])
    }
}

/// What both bind imports do first: drop the windows revoked meanwhile (see `flush_own`),
/// check the export's name (`name`: pointer, length, fingerprint) and take where the
/// descriptor goes (`out`: pointer, capacity); then `bind`, whose refusal is the status.
pub(super) fn bind_with(
    caller: &mut Caller<'_, DomainData>,
    (ptr, len, fingerprint): (i32, i32, i64),
    (out_ptr, out_cap): (i32, i32),
    bind: impl FnOnce(&mut Caller<'_, DomainData>, Named, Place) -> Result<(), Status>,
) -> HostResult<i32> {
    flush_own(caller);
    let out = Place {
        ptr: out_ptr,
        cap: out_cap,
    };
    answer(Named::new(ptr, len, fingerprint).and_then(|n| bind(caller, n, out)))
}

/// `lrpc.bind(name_ptr, name_len, fingerprint, desc_ptr, desc_cap) -> status`.
pub(super) fn bind(
    mut caller: Caller<'_, DomainData>,
    name_ptr: i32,
    name_len: i32,
    fingerprint: i64,
    desc_ptr: i32,
    desc_cap: i32,
) -> HostResult<i32> {
    let name = (name_ptr, name_len, fingerprint);
    bind_with(&mut caller, name, (desc_ptr, desc_cap), bind_inner)
}

fn bind_inner(caller: &mut Caller<'_, DomainData>, named: Named, out: Place) -> Result<(), Status> {
    // A core server's export, or the core stand-in of a component domain's (a mixed pair).
    let (kernel, export) = find_export(caller, named, true)?;
    let nprocs = export.plan.procs.len();
    let desc_len = desc::len(nprocs);
    out.check(caller, desc_len)?;
    let data = caller.data();
    let key = data.key();
    bindable(&export.server, key.domain)?;
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
    // A component or remote server has no module to link into the client: always the
    // isolated path.
    let direct = combination.transport == lrpc_presentation::Transport::Direct
        && !export.relay.as_ref().is_some_and(|d| d.translates());
    let mut flags = 0;
    // A free slot and the next generation for it.
    let (slot, generation) = slot::vacancy(&data.bindings);
    let slot16 = u16::try_from(slot).map_err(|_| Status::ResourceExhausted)?;
    let raw = handle::pack(key.domain, slot16, generation);

    let (offs, total) = plan_layout(&export.plan).ok_or(Status::ResourceExhausted)?;
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
            binding.revoke_with(crate::state::binding::RevokeReason::Unbound, None);
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
                binding.adopt_direct(crate::state::place::DirectWindow {
                    range: d.range,
                    windows: d.windows.clone(),
                    offset: d.offset,
                    len: segment.len(),
                });
                Some(d)
            }
            Err(_) => None,
        }
    } else {
        None
    };
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
    for (i, p) in export.plan.procs.iter().enumerate() {
        let (size, count) = (p.astack_size, p.astack_count);
        let client_base = (at.client + offs[i]) as u32;
        let server_bases: Box<[u32]> = at.server.iter().map(|s| (s + offs[i]) as u32).collect();
        procs.push(ProcStacks {
            extents: vec![Extent::new(client_base, server_bases, size, count, 0)],
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
                borrow: binding.masks[i].borrow as u32,
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
        let mut ties = lock(&client.core.ties);
        ties.client.push(binding.clone());
        ties.handles.insert(raw);
    }
    // After the push: a reachability answer computed from the old graph is stale now.
    crate::state::binding::graph_changed();
    lock(&export.server.core.ties)
        .server
        .push(Arc::downgrade(&binding));
    if export.server.core.terminated.load(Ordering::Acquire) {
        // Lost a race with the server's termination: do not hand out a binding the
        // terminator did not see.
        binding.revoke_with(crate::state::binding::RevokeReason::ServerTerminated, None);
        return Err(Status::ServerTerminated);
    }
    let cb = ClientBinding {
        binding,
        procs: procs.into_boxed_slice(),
    };
    slot::fill(&mut caller.data_mut().bindings, slot, generation, cb);
    write_guest(caller, out.ptr, &bytes)
}

/// `lrpc.unbind(handle) -> status`.
pub(super) fn unbind(mut caller: Caller<'_, DomainData>, raw: i64) -> HostResult<i32> {
    let raw = raw as u64;
    let data = caller.data_mut();
    let (owner, slot, generation) = handle::unpack(raw);
    let ok =
        owner == data.core.id && slot::find(&data.bindings, usize::from(slot), generation).is_ok();
    if !ok {
        return Ok(bad_handle(data, raw) as i32);
    }
    let cb = data.bindings[usize::from(slot)]
        .live
        .take()
        .expect("checked above");
    cb.binding
        .revoke_with(crate::state::binding::RevokeReason::Unbound, None);
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
pub(super) fn astacks_more(
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
        if ps.extents.len() >= crate::astack::MAX_EXTENTS {
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
    let server_bases: Box<[u32]> = at.server.iter().map(|&s| s as u32).collect();
    let extent = Extent::new(at.client as u32, server_bases, size, count, first);
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
