//! `lrpc.multi_start`, `lrpc.multi_next`, `lrpc.multi_end`: MultiRPC from guests
//! (Satyanarayanan and Siegel): one call to many bindings, replies handled in arrival order.
//!
//! The guest's stub encodes the arguments once and lays them on each member's A-stack;
//! `multi_start` checks every member and sends the remote ones at once (each remote target
//! runs its call without holding this thread, see [`RemoteTarget::start`]). `multi_next`
//! reports the next event: a member refused at the start, a reply that has arrived (a
//! remote member's results are written onto its A-stack as a remote call's are), or — when
//! none is waiting — the next local member, called now on this thread through the ordinary
//! call path, with that call's semantics (its deadline, its failure, the thread migrating
//! into the server). Local members whose server has several replicas run in parallel: they
//! are prepared on this thread (checked, their A-stacks marked busy) and run by helper
//! threads, as many per server as it has replicas, each taking a free replica (see
//! `call::Detached`); such a server can not call back into the client during the call. With
//! nothing left to call here, `multi_next` waits for the other replies until the overall
//! timeout. `multi_end` drops what is left: local members not called yet are not called,
//! remote replies still out are never written anywhere, and it waits for the local members
//! running on helpers to return (a call that has migrated into a server can not be recalled;
//! each is bounded by its binding's deadline) before their A-stacks are free again.
//!
//! Every number the guest passes is untrusted: the member count and the open calls are
//! bounded, records are read from checked memory, and each member's handle, procedure and
//! A-stack are checked as `call` checks them.

use super::call::{self, Detached};
use super::translate::{AStack, read_request, write_result};
use super::{HostResult, live_binding, memory, read_guest, write_guest};
use crate::astack::Extent;
use crate::error::Interrupt;
use crate::state::binding::{Binding, ClientBinding};
use crate::state::domain::DomainData;
use crate::transport::RemoteTarget;
use lrpc_abi::Status;
use lrpc_abi::multi::{Kind, MAX_MEMBERS, MAX_OPEN, MEMBER_LEN, Member, NEXT_LEN, Next};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wasmtime::Caller;

/// Members for helper threads: each member's index and its prepared call.
type Jobs = Vec<(usize, Detached)>;

/// A member's outcome, arriving from another thread.
enum Arrived {
    /// A remote member's results, or its failure.
    Remote(usize, Result<Vec<u8>, Status>),
    /// A local member run by a helper thread: its status (its results are on its A-stack).
    Local(usize, Status),
}

/// One MultiRPC under way in a replica.
pub(crate) struct MultiCall {
    members: Vec<Member>,
    proc: i32,
    deadline: Instant,
    /// Members refused at the start, reported first.
    refused: VecDeque<(usize, Status)>,
    /// Local members not called yet, in member order.
    local: VecDeque<usize>,
    /// Members running elsewhere (remote, or on a helper) whose outcome has not arrived.
    out: usize,
    /// Members running on helpers, by index: their A-stacks stay busy until they return.
    on_helpers: Vec<usize>,
    replies: mpsc::Receiver<Arrived>,
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
        let open = calls(caller.data());
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
        on_helpers: Vec::new(),
        replies,
    };
    // Jobs for helper threads, per server domain.
    let mut parallel: Vec<(u16, usize, Jobs)> = Vec::new();
    for i in 0..call.members.len() {
        match route(caller, &call.members[i], proc) {
            Ok(Route::Here) => call.local.push_back(i),
            Ok(Route::Helper(job)) => {
                let server = &job.binding.server;
                let (id, n) = (server.core.id, server.replicas.len());
                match parallel.iter_mut().find(|p| p.0 == id) {
                    Some(p) => p.2.push((i, job)),
                    None => parallel.push((id, n, vec![(i, job)])),
                }
                call.on_helpers.push(i);
                call.out += 1;
            }
            Ok(Route::Remote(target, request)) => {
                let tx = tx.clone();
                target.start(
                    proc as usize,
                    request,
                    Box::new(move |r| {
                        // The call may have ended: then nobody listens, and that is fine.
                        let _ = tx.send(Arrived::Remote(i, r));
                    }),
                );
                call.out += 1;
            }
            Err(s) => call.refused.push_back((i, s)),
        }
    }
    for (_, replicas, jobs) in parallel {
        start_helpers(replicas, jobs, &tx);
    }
    let open = calls_mut(caller.data_mut());
    if slot == open.len() {
        open.push(Some(call));
    } else {
        open[slot] = Some(call);
    }
    Ok(slot as i32)
}

/// How a member's call is made.
enum Route {
    /// Through the ordinary call path, on this thread (`multi_next`).
    Here,
    /// On a helper thread: a local server with several replicas.
    Helper(Detached),
    /// By the remote target, with the request read off the member's A-stack.
    Remote(Arc<dyn RemoteTarget>, Vec<u8>),
}

/// A member, checked as `call` checks it (its binding, the procedure, its A-stack), and how
/// its call is made. A member for a helper has its A-stack marked busy here.
fn route(caller: &mut Caller<'_, DomainData>, m: &Member, proc: i32) -> Result<Route, Status> {
    let data = caller.data();
    let (cb, e, local) = lookup(data, m, proc)?;
    let b = &cb.binding;
    let remote = b.export.relay.as_ref().and_then(|d| d.remote());
    match (&b.export.relay, remote) {
        (_, Some(target)) => {
            let a = astack_of(m, proc, e, local);
            let (b, target) = (b.clone(), target.clone());
            let pp = b.export.plan.procs.get(a.proc as usize);
            let request = read_request(caller, &b, pp.ok_or(Status::BadProcedure)?, &a)?;
            Ok(Route::Remote(target, request))
        }
        (None, _) if b.server.replicas.len() > 1 => {
            let busy = e.busy.get(local as usize).ok_or(Status::BadAStack)?;
            if busy.replace(true) {
                return Err(Status::AStackBusy);
            }
            let borrow = call::borrow_mask(b, proc as u32);
            let args = (0..b.server.replicas.len())
                .map(|r| call::args_in(e, local, r, borrow))
                .collect();
            Ok(Route::Helper(Detached {
                binding: b.clone(),
                client_key: data.key(),
                proc: proc as u32,
                index: e.first + local,
                args,
                kernel: data.kernel.clone(),
                request: crate::state::reset::current_request(),
            }))
        }
        _ => Ok(Route::Here),
    }
}

/// The member's live binding, and the extent and index of its A-stack.
fn lookup<'a>(
    data: &'a DomainData,
    m: &Member,
    proc: i32,
) -> Result<(&'a ClientBinding, &'a Extent, u32), Status> {
    let cb = live_binding(data, m.handle)?;
    let (e, local) = crate::astack::astack(&cb.procs, proc, m.astack as i32)?;
    Ok((cb, e, local))
}

/// Where the member's A-stack is, as the translations take it.
fn astack_of(m: &Member, proc: i32, e: &Extent, local: u32) -> AStack {
    AStack {
        at: m.astack,
        cap: e.size,
        proc: proc as u32,
        index: e.first + local,
    }
}

/// Runs `jobs` (members of one server with `replicas` replicas) on at most that many helper
/// threads, each taking the next job when it is done with one.
fn start_helpers(replicas: usize, jobs: Jobs, tx: &mpsc::Sender<Arrived>) {
    let threads = replicas.min(jobs.len());
    let queue = Arc::new(std::sync::Mutex::new(VecDeque::from(jobs)));
    let mut started = 0;
    for _ in 0..threads {
        let (queue, tx) = (queue.clone(), tx.clone());
        let helper = move || {
            loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                let Some((i, job)) = next else { return };
                let _ = tx.send(Arrived::Local(i, job.run()));
            }
        };
        match std::thread::Builder::new()
            .name("lrpc-multi".into())
            .spawn(helper)
        {
            Ok(_) => started += 1,
            Err(e) => tracing::warn!("no helper thread for a MultiRPC: {e}"),
        }
    }
    if started == 0 {
        // No thread could be made: the members fail rather than hang the call.
        let left: Vec<_> = queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for (i, _) in left {
            let _ = tx.send(Arrived::Local(i, Status::ResourceExhausted));
        }
    }
}

/// The member's live binding and its A-stack, checked.
fn member_astack(
    data: &DomainData,
    m: &Member,
    proc: i32,
) -> Result<(Arc<Binding>, AStack), Status> {
    let (cb, e, local) = lookup(data, m, proc)?;
    Ok((cb.binding.clone(), astack_of(m, proc, e, local)))
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
    if calls(caller.data()).get(slot).is_none_or(Option::is_none) {
        return Ok(Status::BadPointer as i32);
    }
    // Checked before the event is taken: an event that could not be written would be lost.
    // (Linear memory never shrinks, so the range stays writable.)
    let end = (next_ptr as u32 as usize).checked_add(NEXT_LEN);
    let size = memory(&mut caller).map(|m| m.data_size(&caller));
    if end.zip(size).is_none_or(|(end, size)| end > size) {
        return Ok(Status::BadPointer as i32);
    }
    let next = next(&mut caller, slot)?;
    super::answer(write_guest(&mut caller, next_ptr, &next.encode()))
}

/// The replica's MultiRPCs under way, indexed by their id (kept in its feature tables).
fn calls(data: &DomainData) -> &[Option<MultiCall>] {
    data.features
        .get::<Vec<Option<MultiCall>>>()
        .map_or(&[], Vec::as_slice)
}

/// The replica's MultiRPCs under way, to change.
fn calls_mut(data: &mut DomainData) -> &mut Vec<Option<MultiCall>> {
    data.features.get_or_default()
}

/// The open call in `slot` (checked by the caller).
fn open<'a>(caller: &'a mut Caller<'_, DomainData>, slot: usize) -> &'a mut MultiCall {
    calls_mut(caller.data_mut())[slot]
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
        return Ok(arrived(caller, slot, r));
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
            Ok(r) => return Ok(arrived(caller, slot, r)),
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

/// The event of an outcome that arrived: a remote member's results are written onto its
/// A-stack (if its binding is still live); a helper's member has its A-stack freed.
fn arrived(caller: &mut Caller<'_, DomainData>, slot: usize, a: Arrived) -> Next {
    let call = open(caller, slot);
    call.out = call.out.saturating_sub(1);
    let proc = call.proc;
    match a {
        Arrived::Local(i, status) => {
            call.on_helpers.retain(|&k| k != i);
            let m = call.members[i];
            release(caller.data_mut(), &m, proc);
            reply(i, status)
        }
        Arrived::Remote(i, r) => {
            let m = call.members[i];
            let status = match r {
                Err(Status::Ok) => Status::ServerRejected,
                Err(s) => s,
                Ok(results) => match member_astack(caller.data(), &m, proc) {
                    Err(s) => s,
                    Ok((binding, a)) => match binding.export.plan.procs.get(a.proc as usize) {
                        None => Status::BadProcedure,
                        Some(pp) => write_result(caller, &binding, pp, &a, [&results, &[]]),
                    },
                },
            };
            reply(i, status)
        }
    }
}

/// Frees the A-stack of a member a helper ran: found in the binding's slot, or among the
/// bindings retired while the call was in flight (kept for as long as an A-stack of theirs is
/// busy, like a call's).
fn release(data: &mut DomainData, m: &Member, proc: i32) {
    let (_, slot, generation) = lrpc_abi::handle::unpack(m.handle);
    let in_slot = crate::slot::find(&data.bindings, usize::from(slot), generation)
        .ok()
        .filter(|cb| cb.binding.handle == m.handle);
    let cb = in_slot.or_else(|| data.retired.iter().find(|cb| cb.binding.handle == m.handle));
    if let Some(cb) = cb
        && let Ok((e, local)) = crate::astack::astack(&cb.procs, proc, m.astack as i32)
        && let Some(busy) = e.busy.get(local as usize)
    {
        busy.set(false);
    }
    call::drop_finished_retired(data);
}

/// `multi_end(id) -> status`.
pub(super) fn multi_end(mut caller: Caller<'_, DomainData>, id: i32) -> HostResult<i32> {
    let taken = usize::try_from(id)
        .ok()
        .and_then(|slot| calls_mut(caller.data_mut()).get_mut(slot))
        .and_then(Option::take);
    let Some(mut call) = taken else {
        return Ok(Status::BadPointer as i32);
    };
    // The members still running on helpers return before their A-stacks are free again.
    while !call.on_helpers.is_empty() {
        match call.replies.recv() {
            Ok(Arrived::Local(i, _)) => {
                call.on_helpers.retain(|&k| k != i);
                release(caller.data_mut(), &call.members[i], call.proc);
            }
            Ok(Arrived::Remote(..)) => {}
            Err(mpsc::RecvError) => break,
        }
    }
    Ok(Status::Ok as i32)
}
