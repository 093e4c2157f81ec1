//! The kernel imports guests call, one module per job: binding (`bind`, `unbind`, and
//! `astacks_more`, which grows a binding's A-stacks), the call itself (`call`, the hot path),
//! out-of-band segments (`oob`, `reply_oob`) and asynchronous bindings (`channel_bind`,
//! `channel_wait`, `channel_unbind`) and MultiRPC (`multi_start`, `multi_next`, `multi_end`).
//! What they share — reading and writing guest
//! memory, finding the kernel, checking a Binding Object's handle, mapping errors to
//! statuses — lives here, below all of them, so that the job modules import no cycle.
//!
//! Every value a guest passes in is an untrusted integer; every failure is a status code
//! returned to the guest, which keeps running.

mod bind;
mod call;
mod channel;
mod multi;
mod oob;
mod translate;

use crate::error::Error;
use crate::state::binding::ClientBinding;
use crate::state::clerk::ExportEntry;
use crate::state::domain::DomainData;
use crate::state::kernel::KernelInner;
use crate::sync::lock;
use lrpc_abi::{Status, handle};
use std::sync::Arc;
use wasmtime::{Caller, Linker, Memory};

type HostResult<T> = wasmtime::Result<T>;

/// What an import returns for the outcome of its work.
fn answer(r: Result<(), Status>) -> HostResult<i32> {
    Ok(r.err().unwrap_or(Status::Ok) as i32)
}

/// Registers the kernel imports.
pub(crate) fn define(linker: &mut Linker<DomainData>) -> wasmtime::Result<()> {
    let m = lrpc_abi::IMPORT_MODULE;
    linker.func_wrap(m, lrpc_abi::import::CALL, call::call)?;
    linker.func_wrap(m, lrpc_abi::import::BIND, bind::bind)?;
    linker.func_wrap(m, lrpc_abi::import::UNBIND, bind::unbind)?;
    linker.func_wrap(m, lrpc_abi::import::ASTACKS_MORE, bind::astacks_more)?;
    linker.func_wrap(m, lrpc_abi::import::OOB, oob::oob)?;
    linker.func_wrap(m, lrpc_abi::import::REPLY_OOB, oob::reply_oob)?;
    linker.func_wrap(m, lrpc_abi::import::CHANNEL_BIND, channel::channel_bind)?;
    linker.func_wrap(m, lrpc_abi::import::CHANNEL_WAIT, channel::channel_wait)?;
    linker.func_wrap(m, lrpc_abi::import::CHANNEL_UNBIND, channel::channel_unbind)?;
    linker.func_wrap(m, lrpc_abi::import::MULTI_START, multi::multi_start)?;
    linker.func_wrap(m, lrpc_abi::import::MULTI_NEXT, multi::multi_next)?;
    linker.func_wrap(m, lrpc_abi::import::MULTI_END, multi::multi_end)?;
    Ok(())
}

fn memory(caller: &mut Caller<'_, DomainData>) -> Option<Memory> {
    let by_index = caller.data().memory_export;
    by_index
        .and_then(|e| caller.get_module_export(&e))
        .or_else(|| caller.get_export("memory"))
        .and_then(|e| e.into_memory())
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
    if !data.has_deferred.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    if let Some(k) = data.kernel.upgrade()
        && let Some(d) = k.domain_by_id(data.core.id)
        && let Some(r) = d.replicas.get(usize::from(data.replica))
    {
        r.flush_deferred();
    }
}

/// Longest interface name a bind import reads from a guest.
const MAX_NAME: usize = 512;

/// The length of an interface name a guest passes, checked before anything is read.
fn checked_name_len(name_len: i32) -> Result<usize, Status> {
    let len = usize::try_from(name_len).map_err(|_| Status::BadPointer)?;
    if len > MAX_NAME {
        return Err(Status::UnknownInterface);
    }
    Ok(len)
}

/// The interface name of `len` bytes (checked by `checked_name_len`) at `ptr` in the caller's memory.
fn read_name(caller: &mut Caller<'_, DomainData>, ptr: i32, len: usize) -> Result<String, Status> {
    let name = read_guest(caller, ptr, len).ok_or(Status::BadPointer)?;
    String::from_utf8(name).map_err(|_| Status::UnknownInterface)
}

/// Reads the interface name a guest passes and finds its export, checked against the
/// fingerprint the guest's stubs were generated for. With `stand_ins`, the core stand-in of a
/// component domain's export counts too (a mixed pair).
fn find_export(
    caller: &mut Caller<'_, DomainData>,
    named: bind::Named,
    stand_ins: bool,
) -> Result<(Arc<KernelInner>, Arc<ExportEntry>), Status> {
    let (name_ptr, len, fingerprint) = (named.ptr, named.len, named.fingerprint);
    let name = read_name(caller, name_ptr, len)?;
    let kernel = kernel_of(caller)?;
    let export = match kernel.clerk.get(&name) {
        Some(e) => e,
        None if stand_ins => kernel
            .clerk
            .component::<crate::component::ComponentExport>(&name)
            .and_then(|c| c.stand_in())
            .ok_or(Status::UnknownInterface)?,
        None => return Err(Status::UnknownInterface),
    };
    if export.plan.fingerprint != fingerprint {
        return Err(Status::InterfaceMismatch);
    }
    Ok((kernel, export))
}

/// Whether a domain (`client`) may bind to `server`: not to itself, not to a dead one.
fn bindable(server: &crate::state::domain::DomainShared, client: u16) -> Result<(), Status> {
    if server.core.id == client {
        return Err(Status::SelfBinding);
    }
    if server
        .core
        .terminated
        .load(std::sync::atomic::Ordering::Acquire)
    {
        return Err(Status::ServerTerminated);
    }
    Ok(())
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

/// Classifies a handle that does not name one of the caller's live bindings.
fn bad_handle(data: &DomainData, raw: u64) -> Status {
    let (owner, slot, generation) = handle::unpack(raw);
    if owner == data.core.id {
        return match crate::slot::find(&data.bindings, usize::from(slot), generation) {
            Err(crate::slot::Miss::Forged) => Status::ForgedBinding,
            _ => Status::StaleBinding,
        };
    }
    // Someone else's handle? Ask the domain it names (a slow path: refusals only).
    let foreign = data.kernel.upgrade().is_some_and(|k| {
        k.domain_by_id(owner)
            .is_some_and(|d| lock(&d.core.ties).handles.contains(&raw))
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
    live_binding(data, raw)?;
    let (_, slot, _) = handle::unpack(raw);
    data.bindings[usize::from(slot)]
        .live
        .as_mut()
        .ok_or(Status::ForgedBinding)
}

/// The caller's live binding for `raw`, shared (all the call path needs: the A-stacks' busy
/// flags are cells), or the refusal status.
#[inline]
fn live_binding(data: &DomainData, raw: u64) -> Result<&ClientBinding, Status> {
    let (_, slot, _) = handle::unpack(raw);
    match data.bindings.get(usize::from(slot)) {
        // A live slot's binding carries the handle issued for it, `pack(owner, slot,
        // generation)` of this domain, this slot and the slot's generation (`bind` sets the
        // slot and the binding together and nothing changes either while the slot is live):
        // one compare checks the owner and the generation (the slot picked the entry).
        Some(s @ crate::slot::Slot { live: Some(cb), .. }) if cb.binding.handle == raw => {
            debug_assert_eq!(
                raw,
                handle::pack(data.core.id, slot, s.generation),
                "a live slot's binding carries its handle"
            );
            if cb.binding.is_live() {
                Ok(cb)
            } else {
                Err(cb.binding.dead_status())
            }
        }
        _ => Err(bad_handle(data, raw)),
    }
}
