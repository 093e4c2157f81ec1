//! `lrpc.multi_start`, `lrpc.multi_next`, `lrpc.multi_end`: MultiRPC from guests
//! (Satyanarayanan and Siegel): one call to many bindings, replies handled in arrival order.
//!
//! The guest's stub encodes the arguments once and lays them on each member's A-stack;
//! `multi_start` checks every member and sends the remote ones at once (each remote target
//! runs its call without holding this thread, see [`RemoteTarget::start`]). `multi_next`
//! reports the next event: a member refused at the start, a remote reply that has arrived
//! (its results written onto the member's A-stack as a remote call's are), or — when none
//! is waiting — the next local member, called now on this thread through the ordinary call
//! path, with that call's semantics (its deadline, its failure, the thread migrating into the
//! server). With nothing local left it waits for the remote replies until the overall
//! timeout. `multi_end` drops what is left: local members not called yet are not called,
//! and remote replies still out are never written anywhere.
//!
//! Every number the guest passes is untrusted: the member count and the open calls are
//! bounded, records are read from checked memory, and each member's handle, procedure and
//! A-stack are checked as `call` checks them.

use super::mixed::{AStack, read_request, write_result};
use super::{HostResult, live_binding, read_guest, write_guest};
use crate::binding::Binding;
use crate::clerk::Detour;
use crate::domain::DomainData;
use crate::error::Interrupt;
use crate::remote::RemoteTarget;
use lrpc_abi::Status;
use lrpc_abi::multi::{Kind, MAX_MEMBERS, MAX_OPEN, MEMBER_LEN, Member, Next};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wasmtime::Caller;

/// A remote member's call, ready to go: its target and the request off its A-stack.
type Outgoing = (Arc<dyn RemoteTarget>, Vec<u8>);

/// A remote member's outcome, as its target reports it.
type Reply = (usize, Result<Vec<u8>, Status>);

/// One MultiRPC under way in a replica.
pub(crate) struct MultiCall {
    members: Vec<Member>,
    proc: i32,
    deadline: Instant,
    /// Members refused at the start, reported first.
    refused: VecDeque<(usize, Status)>,
    /// Local members not called yet, in member order.
    local: VecDeque<usize>,
    /// Remote members whose reply has not been reported.
    out: usize,
    replies: mpsc::Receiver<Reply>,
}

/// How long one wait for a remote reply lasts before the caller's termination is checked.
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// `multi_start(members_ptr, n, proc, timeout_ms) -> id or -status`.
pub(super) fn multi_start(
    mut caller: Caller<'_, DomainData>,
    members_ptr: i32,
    n: i32,
    proc: i32,
    timeout_ms: i32,
) -> HostResult<i32> {
    Ok(start(&mut caller, members_ptr, n, proc, timeout_ms).unwrap_or_else(|s| -(s as i32)))
}

fn start(
    caller: &mut Caller<'_, DomainData>,
    members_ptr: i32,
    n: i32,
    proc: i32,
    timeout_ms: i32,
) -> Result<i32, Status> {
    let n = usize::try_from(n).map_err(|_| Status::ResourceExhausted)?;
    if n > MAX_MEMBERS {
        return Err(Status::ResourceExhausted);
    }
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).map_err(|_| Status::BadPointer)?);
    let slot = {
        let open = &caller.data().multis;
        match open.iter().position(Option::is_none) {
            Some(i) => i,
            None if open.len() < MAX_OPEN => open.len(),
            None => return Err(Status::ResourceExhausted),
        }
    };
    let bytes = read_guest(caller, members_ptr, n * MEMBER_LEN).ok_or(Status::BadPointer)?;
    let members: Vec<Member> = bytes
        .chunks_exact(MEMBER_LEN)
        .filter_map(Member::decode)
        .collect();
    let (tx, replies) = mpsc::channel();
    let mut call = MultiCall {
        members,
        proc,
        deadline: Instant::now() + timeout,
        refused: VecDeque::new(),
        local: VecDeque::new(),
        out: 0,
        replies,
    };
    for i in 0..call.members.len() {
        match remote_member(caller, &call.members[i], proc) {
            Ok(None) => call.local.push_back(i),
            Ok(Some((target, request))) => {
                let tx = tx.clone();
                target.start(
                    proc as usize,
                    request,
                    Box::new(move |r| {
                        // The call may have ended: then nobody listens, and that is fine.
                        let _ = tx.send((i, r));
                    }),
                );
                call.out += 1;
            }
            Err(s) => call.refused.push_back((i, s)),
        }
    }
    let open = &mut caller.data_mut().multis;
    if slot == open.len() {
        open.push(Some(call));
    } else {
        open[slot] = Some(call);
    }
    Ok(slot as i32)
}

/// A member's binding, checked as `call` checks it: `None` for a local server (called later,
/// through `call`), or the remote target and the request read off its A-stack.
fn remote_member(
    caller: &mut Caller<'_, DomainData>,
    m: &Member,
    proc: i32,
) -> Result<Option<Outgoing>, Status> {
    let (binding, a) = member_astack(caller.data(), m, proc)?;
    let Some(Detour::Remote(target)) = &binding.export.detour else {
        return Ok(None);
    };
    let pp = binding
        .export
        .plan
        .procs
        .get(a.proc as usize)
        .ok_or(Status::BadProcedure)?;
    let request = read_request(caller, &binding, pp, &a)?;
    Ok(Some((target.clone(), request)))
}

/// The member's live binding and its A-stack, checked.
fn member_astack(
    data: &DomainData,
    m: &Member,
    proc: i32,
) -> Result<(Arc<Binding>, AStack), Status> {
    let cb = live_binding(data, m.handle)?;
    let (e, local) = crate::astack::astack(&cb.procs, proc, m.astack as i32)?;
    let a = AStack {
        at: m.astack,
        cap: e.size,
        proc: proc as u32,
        index: e.first + local,
    };
    Ok((cb.binding.clone(), a))
}

/// `multi_next(id, next_ptr) -> status`.
pub(super) fn multi_next(
    mut caller: Caller<'_, DomainData>,
    id: i32,
    next_ptr: i32,
) -> HostResult<i32> {
    let Some(slot) = usize::try_from(id).ok() else {
        return Ok(Status::BadPointer as i32);
    };
    if caller.data().multis.get(slot).is_none_or(Option::is_none) {
        return Ok(Status::BadPointer as i32);
    }
    let next = next(&mut caller, slot)?;
    super::answer(write_guest(&mut caller, next_ptr, &next.encode()))
}

/// The open call in `slot` (checked by the caller).
fn open<'a>(caller: &'a mut Caller<'_, DomainData>, slot: usize) -> &'a mut MultiCall {
    caller.data_mut().multis[slot]
        .as_mut()
        .expect("checked by multi_next")
}

fn reply(member: usize, s: Status) -> Next {
    Next {
        kind: Kind::Reply,
        member: member as u32,
        status: s as u32,
    }
}

fn event(kind: Kind) -> Next {
    Next {
        kind,
        member: 0,
        status: 0,
    }
}

fn next(caller: &mut Caller<'_, DomainData>, slot: usize) -> HostResult<Next> {
    if let Some((i, s)) = open(caller, slot).refused.pop_front() {
        return Ok(reply(i, s));
    }
    // A reply that has arrived goes before a local call.
    if let Ok(r) = open(caller, slot).replies.try_recv() {
        return Ok(remote_reply(caller, slot, r));
    }
    let call = open(caller, slot);
    if Instant::now() >= call.deadline {
        return Ok(event(Kind::Timeout));
    }
    if let Some(i) = call.local.pop_front() {
        let (m, proc) = (call.members[i], call.proc);
        let status = super::call::call_in(caller, m.handle, proc, m.astack as i32)?;
        let status = Status::try_from(status).unwrap_or(Status::ServerRejected);
        return Ok(reply(i, status));
    }
    while open(caller, slot).out > 0 {
        let call = open(caller, slot);
        let left = call.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(event(Kind::Timeout));
        }
        match call.replies.recv_timeout(left.min(WAIT_SLICE)) {
            Ok(r) => return Ok(remote_reply(caller, slot, r)),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Every target dropped its sender without answering: nothing more will come.
            Err(mpsc::RecvTimeoutError::Disconnected) => call.out = 0,
        }
        if caller.data().core.terminated.load(Ordering::Acquire) {
            return Err(wasmtime::Error::new(Interrupt::Terminated));
        }
    }
    Ok(event(Kind::Done))
}

/// Writes a remote member's results onto its A-stack (if its binding is still live); the
/// member's event.
fn remote_reply(caller: &mut Caller<'_, DomainData>, slot: usize, (i, r): Reply) -> Next {
    let call = open(caller, slot);
    call.out = call.out.saturating_sub(1);
    let (m, proc) = (call.members[i], call.proc);
    let status = match r {
        Err(Status::Ok) => Status::ServerRejected,
        Err(s) => s,
        Ok(results) => match member_astack(caller.data(), &m, proc) {
            Err(s) => s,
            Ok((binding, a)) => match binding.export.plan.procs.get(a.proc as usize) {
                None => Status::BadProcedure,
                Some(pp) => write_result(caller, &binding, pp, &a, &results),
            },
        },
    };
    reply(i, status)
}

/// `multi_end(id) -> status`.
pub(super) fn multi_end(mut caller: Caller<'_, DomainData>, id: i32) -> HostResult<i32> {
    let taken = usize::try_from(id)
        .ok()
        .and_then(|slot| caller.data_mut().multis.get_mut(slot))
        .and_then(Option::take);
    Ok(if taken.is_some() {
        Status::Ok
    } else {
        Status::BadPointer
    } as i32)
}
