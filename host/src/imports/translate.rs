//! `lrpc.call` on a binding whose server is not a core domain: a component domain (a mixed
//! pair, see `component::mixed`) or a server on another machine (see `transport`). The kernel
//! is the server's entry stub: it reads the request off the client's A-stack (or its `in`
//! segment) once. For a component server it decodes the request by the plan into component
//! values — every length, tag and byte of it untrusted — and calls the component's export
//! under its deadline; the client can not run before the export is entered, so a byte list
//! is lowered into the component from where it lies, in one copy; a remote server's transport gets the request as it is and checks it
//! while translating it. The results go back onto the A-stack, or into the `out` segment
//! when they do not fit, as a core server's stub would put them.

use super::memory;
use super::oob::{Side, segment_slow};
use crate::bulk::copy_slice;
use crate::component::codec::{EncodedResult, LIST_PREFIX};
use crate::component::lent::{Lent, LiftedBytes, ResultRoom};
use crate::component::mixed::Target;
use crate::state::binding::Binding;
use crate::state::clerk::{Relay, RelayCall};
use crate::state::domain::DomainData;
use crate::state::linkage::{self, Pinned, ReplicaKey};
use crate::transport::{RemoteRelay, RemoteTarget};
use lrpc_abi::{Status, header};
use lrpc_presentation::ProcPlan;
use wasmtime::{Caller, Memory};

/// Where the call's A-stack is: client address, capacity, procedure, index among the
/// procedure's A-stacks.
pub(super) struct AStack {
    pub at: u32,
    pub cap: u32,
    pub proc: u32,
    pub index: u32,
}

impl AStack {
    /// The linkage record of a call on this A-stack from `client` over `binding`, served by
    /// the server domain's one replica (its core stand-in, or the remote target's stand-in).
    fn record(&self, client: ReplicaKey, binding: Pinned) -> linkage::Call {
        linkage::Call {
            caller: client,
            server: ReplicaKey {
                domain: binding.get().server.core.id,
                replica: 0,
            },
            binding,
            proc: self.proc,
            astack: self.index,
            // The kernel translates the request before the server runs: nothing is lent.
            lent: false,
        }
    }
}

/// Serves one call of a core client on a component server; the call's status.
pub(super) fn to_component(
    caller: &mut Caller<'_, DomainData>,
    client_key: ReplicaKey,
    binding: Pinned,
    target: &Target,
    a: &AStack,
) -> Status {
    let b = binding.get();
    let plan = &b.export.plan;
    let Some(pp) = plan.procs.get(a.proc as usize) else {
        return Status::BadProcedure;
    };
    // The client's memory, looked up once for the whole call.
    let Some(mem) = memory(caller) else {
        return Status::BadPointer;
    };
    let request = match locate_request(caller, &mem, b, pp, a) {
        Ok((at, len)) => Lent::in_memory(&mem, &*caller, at, len),
        Err(s) => return s,
    };
    let Some(request) = request else {
        return Status::ServerRejected;
    };
    // A byte list result lands in the client's `out` segment as it is lifted, when there is
    // one already (from an earlier call on this A-stack).
    let landing = if !pp.bounded && target.lands(a.proc as usize) {
        landing(caller, &mem, b, a)
    } else {
        None
    };
    let mut reply = EncodedResult::default();
    // On the thread's linkage stack like any call, so that the component may call back into
    // this client (A→B→A re-enters it). The request is lent: the client can not run before
    // the component's export is entered, and by then the request is lowered or copied.
    let ran = linkage::with_record(caller, a.record(client_key, binding), || {
        LiftedBytes::onto(landing.map(|l| l.1), || {
            target.serve_lent(a.proc as usize, plan, pp, request, &mut reply)
        })
    });
    if let Err(s) = ran {
        return s;
    }
    match (reply.landed, landing) {
        (Some(n), Some((segment, _))) => write_landed(caller, &mem, b, a, segment, &reply.head, n),
        _ => write_result_in(caller, &mem, b, pp, a, [&reply.head, &reply.tail]),
    }
}

/// The client's `out` segment for this A-stack (address and capacity), and the room in it
/// where a byte list result lands (after its length), if the segment exists.
fn landing(
    caller: &mut Caller<'_, DomainData>,
    mem: &Memory,
    b: &Binding,
    a: &AStack,
) -> Option<((usize, usize), ResultRoom)> {
    let (at, cap) = b.with_oob((a.proc, a.index, lrpc_abi::OOB_OUT), |p| (p.client, p.len))?;
    if at == crate::state::place::UNMAPPED {
        return None;
    }
    let room = ResultRoom::in_memory(
        mem,
        &mut *caller,
        at.checked_add(LIST_PREFIX)?,
        cap.checked_sub(LIST_PREFIX)?,
    )?;
    Some(((at, cap), room))
}

/// Completes a reply whose byte list landed `n` bytes into the `out` segment at `segment`:
/// `head` (its length) in front of them, and the A-stack's header. If the component's
/// call replaced or removed the segment meanwhile (the client, re-entered, grew it), the
/// bytes went to its old place and the call fails.
fn write_landed(
    caller: &mut Caller<'_, DomainData>,
    mem: &Memory,
    b: &Binding,
    a: &AStack,
    segment: (usize, usize),
    head: &[u8],
    n: usize,
) -> Status {
    let now = b.with_oob((a.proc, a.index, lrpc_abi::OOB_OUT), |p| (p.client, p.len));
    let total = head.len() + n;
    let (Some(now), Ok(len)) = (now, u32::try_from(total)) else {
        return Status::ResourceExhausted;
    };
    if now != segment || total > segment.1 {
        return Status::ResourceExhausted;
    }
    match write_at(caller, mem, segment.0, [head, &[]])
        .and_then(|()| write_header(caller, mem, a.at as usize, header::OOB, len))
    {
        Some(()) => Status::Ok,
        None => Status::ResourceExhausted,
    }
}

/// Serves one call of a core client on a remote export (see `transport`): the request goes to
/// the target as the client's stub laid it out; the target's answer is checked only for
/// fitting, as the client's stub decodes it as untrusted anyway.
pub(super) fn to_remote(
    caller: &mut Caller<'_, DomainData>,
    client_key: ReplicaKey,
    binding: Pinned,
    target: &dyn RemoteTarget,
    a: &AStack,
) -> Status {
    let b = binding.get();
    let Some(pp) = b.export.plan.procs.get(a.proc as usize) else {
        return Status::BadProcedure;
    };
    let request = match read_request(caller, b, pp, a) {
        Ok(r) => r,
        Err(s) => return s,
    };
    // On the linkage stack like any call: terminating the client while it waits marks it,
    // and the call unwinds the client when it returns.
    let ran = linkage::with_record(caller, a.record(client_key, binding), || {
        target.call(a.proc as usize, &request)
    });
    match ran {
        Ok(reply) => write_result(caller, b, pp, a, [&reply, &[]]),
        Err(Status::Ok) => Status::ServerRejected,
        Err(s) => s,
    }
}

/// The request of a call, as the client's stub laid it out: the A-stack's bound for a
/// procedure of bounded size, else the payload the header names, on the A-stack or in the
/// binding's `in` segment. Read once: the client may change it afterwards.
pub(super) fn read_request(
    caller: &mut Caller<'_, DomainData>,
    b: &Binding,
    pp: &ProcPlan,
    a: &AStack,
) -> Result<Vec<u8>, Status> {
    let mem = memory(caller).ok_or(Status::BadPointer)?;
    let (at, len) = locate_request(caller, &mem, b, pp, a)?;
    // Copied once, without zeroing a buffer first.
    let end = at.checked_add(len).ok_or(Status::ServerRejected)?;
    mem.data(&*caller)
        .get(at..end)
        .map(<[u8]>::to_vec)
        .ok_or(Status::ServerRejected)
}

/// Where [`read_request`] finds the request in the client's memory: its address and length
/// (not yet checked against the memory's size).
fn locate_request(
    caller: &mut Caller<'_, DomainData>,
    mem: &Memory,
    b: &Binding,
    pp: &ProcPlan,
    a: &AStack,
) -> Result<(usize, usize), Status> {
    let (base, cap) = (a.at as usize, a.cap as usize);
    if pp.bounded {
        return Ok((base, pp.in_bound.unwrap_or(0).min(cap)));
    }
    let end = base
        .checked_add(header::LEN)
        .ok_or(Status::ServerRejected)?;
    let h = mem
        .data(&*caller)
        .get(base..end)
        .ok_or(Status::ServerRejected)?;
    let flags = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    let (at, room) = if flags & header::OOB != 0 {
        b.with_oob((a.proc, a.index, lrpc_abi::OOB_IN), |at| {
            (at.client, at.len)
        })
        .ok_or(Status::ServerRejected)?
    } else {
        (base + header::LEN, cap.saturating_sub(header::LEN))
    };
    if len > room || at == crate::state::place::UNMAPPED {
        return Err(Status::ServerRejected);
    }
    Ok((at, len))
}

/// Writes a call's result, `reply[0]` then `reply[1]`, where the client's stub reads it: at
/// the A-stack's base for a procedure of bounded size, else as `write_reply` does.
pub(super) fn write_result(
    caller: &mut Caller<'_, DomainData>,
    b: &Binding,
    pp: &ProcPlan,
    a: &AStack,
    reply: [&[u8]; 2],
) -> Status {
    match memory(caller) {
        Some(mem) => write_result_in(caller, &mem, b, pp, a, reply),
        None => Status::ResourceExhausted,
    }
}

/// [`write_result`] into the client's memory `mem`.
fn write_result_in(
    caller: &mut Caller<'_, DomainData>,
    mem: &Memory,
    b: &Binding,
    pp: &ProcPlan,
    a: &AStack,
    reply: [&[u8]; 2],
) -> Status {
    let len = reply[0].len() + reply[1].len();
    let written = if pp.bounded {
        (len <= a.cap as usize)
            .then(|| write_at(caller, mem, a.at as usize, reply))
            .flatten()
    } else {
        write_reply(caller, mem, b, a, reply)
    };
    match written {
        Some(()) => Status::Ok,
        None => Status::ResourceExhausted,
    }
}

/// Writes an unbounded reply: header and payload on the A-stack, or the payload in the
/// binding's `out` segment for this A-stack (made or grown as the client's `oob` would).
fn write_reply(
    caller: &mut Caller<'_, DomainData>,
    mem: &Memory,
    b: &Binding,
    a: &AStack,
    reply: [&[u8]; 2],
) -> Option<()> {
    let n = reply[0].len() + reply[1].len();
    let len = u32::try_from(n).ok()?;
    let base = a.at as usize;
    let inline = n <= (a.cap as usize).saturating_sub(header::LEN);
    let flags = if inline {
        write_at(caller, mem, base + header::LEN, reply)?;
        0
    } else {
        let kernel = caller.data().kernel.upgrade()?;
        let key = caller.data().key();
        let okey = (a.proc, a.index, lrpc_abi::OOB_OUT);
        let (seg_cap, at) = segment_slow(b, okey, n, &kernel, (key, Side::Client), caller).ok()?;
        if seg_cap < n {
            return None;
        }
        write_at(caller, mem, at, reply)?;
        header::OOB
    };
    write_header(caller, mem, base, flags, len)
}

/// Writes a reply's header, `flags` and `len`, at the A-stack's base `base`.
fn write_header(
    caller: &mut Caller<'_, DomainData>,
    mem: &Memory,
    base: usize,
    flags: u32,
    len: u32,
) -> Option<()> {
    let mut h = [0u8; header::LEN];
    h[..4].copy_from_slice(&flags.to_le_bytes());
    h[4..].copy_from_slice(&len.to_le_bytes());
    write_at(caller, mem, base, [&h, &[]])
}

/// Writes `parts` one after the other at `at` in the client's memory, if they fit; with
/// `bulk::copy_slice`, which keeps clear of the host `memmove`'s slow placement (A-stacks and
/// segments are page aligned, the parts are not).
fn write_at(
    caller: &mut Caller<'_, DomainData>,
    mem: &Memory,
    at: usize,
    parts: [&[u8]; 2],
) -> Option<()> {
    let len = parts[0].len() + parts[1].len();
    let dst = mem.data_mut(&mut *caller).get_mut(at..)?.get_mut(..len)?;
    let (first, second) = dst.split_at_mut(parts[0].len());
    copy_slice(first, parts[0]);
    copy_slice(second, parts[1]);
    Some(())
}

/// The A-stack of a relayed call, as the translations read it.
fn astack_of(call: &RelayCall) -> AStack {
    AStack {
        at: call.client_astack,
        cap: call.size,
        proc: call.proc,
        index: call.index,
    }
}

impl Relay for Target {
    fn call(&self, caller: &mut Caller<'_, DomainData>, call: &RelayCall) -> Status {
        to_component(
            caller,
            call.client_key,
            call.binding,
            self,
            &astack_of(call),
        )
    }

    fn translates(&self) -> bool {
        true
    }
}

impl Relay for RemoteRelay {
    fn call(&self, caller: &mut Caller<'_, DomainData>, call: &RelayCall) -> Status {
        to_remote(
            caller,
            call.client_key,
            call.binding,
            &*self.0,
            &astack_of(call),
        )
    }

    fn translates(&self) -> bool {
        true
    }

    fn remote(&self) -> Option<&std::sync::Arc<dyn RemoteTarget>> {
        Some(&self.0)
    }
}
