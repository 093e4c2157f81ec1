//! `lrpc.channel_bind`, `lrpc.channel_wait` and `lrpc.channel_unbind`: asynchronous
//! bindings (URPC channels) held by guest clients. What the kernel does for them is in
//! `channel::guest`; this module checks what the guest passes and answers with statuses.

use super::bind::{Named, Place, bind_with};
use super::{
    HostResult, answer, bindable, find_export, flush_own, kernel_of, status_of, write_guest,
};
use crate::channel::{HANDLE_BIT, MAX_WAIT, ProcShared};
use crate::state::domain::DomainData;
use lrpc_abi::{Status, chan, handle};
use std::time::Duration;
use wasmtime::{AsContextMut, Caller};

/// `lrpc.channel_bind(name_ptr, name_len, fingerprint, slots, desc_ptr, desc_cap) -> status`.
pub(super) fn channel_bind(
    mut caller: Caller<'_, DomainData>,
    name_ptr: i32,
    name_len: i32,
    fingerprint: i64,
    slots: i32,
    desc_ptr: i32,
    desc_cap: i32,
) -> HostResult<i32> {
    let name = (name_ptr, name_len, fingerprint);
    bind_with(&mut caller, name, (desc_ptr, desc_cap), |c, n, o| {
        bind_inner(c, n, slots, o)
    })
}

fn bind_inner(
    caller: &mut Caller<'_, DomainData>,
    named: Named,
    slots: i32,
    out: Place,
) -> Result<(), Status> {
    let slots = match u32::try_from(slots) {
        Ok(0) => chan::DEFAULT_SLOTS,
        Ok(n) if n <= chan::MAX_SLOTS => n,
        _ => return Err(Status::ResourceExhausted),
    };
    out.check(caller, chan::DESC_LEN)?;
    let (kernel, export) = find_export(caller, named, false)?;
    let key = caller.data().key();
    bindable(&export.server, key.domain)?;
    let procs = ProcShared::of(&kernel, &export.server).ok_or(Status::NoProcessors)?;
    let client = kernel
        .domain_by_id(key.domain)
        .ok_or(Status::ResourceExhausted)?;
    let replica = client
        .replicas
        .get(usize::from(key.replica))
        .ok_or(Status::ResourceExhausted)?;
    let (slot, generation) = crate::slot::vacancy(crate::channel::guest::table(caller.data()));
    let slot16 = u16::try_from(slot)
        .ok()
        .filter(|s| s & HANDLE_BIT == 0)
        .ok_or(Status::QuotaBindings)?;
    let raw = handle::pack(key.domain, slot16 | HANDLE_BIT, generation);
    let (gc, mut desc) = crate::channel::guest::bind(
        &kernel,
        &procs,
        export,
        slots,
        replica,
        caller.as_context_mut(),
    )
    .map_err(|e| status_of(&e))?;
    desc.handle = raw;
    {
        let mut ties = crate::sync::lock(&client.core.ties);
        ties.closers.retain(|w| w.strong_count() > 0);
        let ch: std::sync::Arc<dyn crate::state::domain::Close> = gc.ch.clone();
        ties.closers.push(std::sync::Arc::downgrade(&ch));
    }
    let table = crate::channel::guest::table_mut(caller.data_mut());
    crate::slot::fill(table, slot, generation, gc);
    write_guest(caller, out.ptr, &desc.encode())
}

/// The table index of the caller's live channel `raw`, or the refusal status.
fn channel_slot(data: &DomainData, raw: u64) -> Result<usize, Status> {
    let (owner, slot, generation) = handle::unpack(raw);
    if owner != data.core.id {
        return Err(Status::ForeignBinding);
    }
    if slot & HANDLE_BIT == 0 {
        return Err(Status::ForgedBinding);
    }
    let i = usize::from(slot & !HANDLE_BIT);
    match crate::slot::find(crate::channel::guest::table(data), i, generation) {
        Ok(_) => Ok(i),
        Err(crate::slot::Miss::Stale) => Err(Status::StaleBinding),
        Err(crate::slot::Miss::Forged) => Err(Status::ForgedBinding),
    }
}

/// `lrpc.channel_wait(handle, rep_tail, timeout_us) -> status`.
pub(super) fn channel_wait(
    mut caller: Caller<'_, DomainData>,
    raw: i64,
    rep_tail: i32,
    timeout_us: i32,
) -> HostResult<i32> {
    flush_own(&caller);
    let data = caller.data_mut();
    let ch = match channel_slot(data, raw as u64) {
        Ok(i) => match &crate::channel::guest::table(data)[i].live {
            Some(gc) => gc.ch.clone(),
            None => return answer(Err(Status::StaleBinding)),
        },
        Err(s) => return answer(Err(s)),
    };
    let timeout = Duration::from_micros(u64::try_from(timeout_us).unwrap_or(0)).min(MAX_WAIT);
    answer(ch.wait_guest(rep_tail as u32, timeout))
}

/// `lrpc.channel_unbind(handle) -> status`.
pub(super) fn channel_unbind(mut caller: Caller<'_, DomainData>, raw: i64) -> HostResult<i32> {
    answer(unbind_inner(&mut caller, raw as u64))
}

fn unbind_inner(caller: &mut Caller<'_, DomainData>, raw: u64) -> Result<(), Status> {
    let key = caller.data().key();
    let i = channel_slot(caller.data(), raw)?;
    let gc = crate::channel::guest::table_mut(caller.data_mut())[i]
        .live
        .take()
        .ok_or(Status::StaleBinding)?;
    let (off, len) = (gc.client_off, gc.len());
    // Closing first takes the segment out of the server's memories; then out of this one
    // (running now, in this import: its stubs read none of it).
    drop(gc);
    let kernel = kernel_of(caller)?;
    if let Some(d) = kernel.domain_by_id(key.domain)
        && let Some(r) = d.replicas.get(usize::from(key.replica))
    {
        r.unmap_free(off, len);
    }
    flush_own(caller);
    Ok(())
}
