//! MultiRPC (Satyanarayanan and Siegel): one call to N bindings at once.
//!
//! The arguments are encoded once — the caller's A-stack encoding for local members, one
//! wire encoding shared by every remote member — and every member call keeps its ordinary
//! semantics (its own deadline, its own failure). A handler runs once per reply or failure,
//! in arrival order, and may end the whole call early; an overall timeout ends it too.
//! Members still out when the call ends are abandoned: a remote one's connection is closed,
//! a local one finishes on its worker and its result is dropped.

use crate::client::{RemoteBinding, encode_args};
use crate::error::RemoteError;
use crate::local::{LocalExport, LocalPool};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use lrpc_kernel::{Status, presentation::InterfacePlan};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

/// One member of a MultiRPC: a local export called through a driver pool, or a remote
/// binding.
#[derive(Clone)]
pub enum Member {
    /// A local export.
    Local(Arc<LocalPool>, LocalExport),
    /// A remote export.
    Remote(RemoteBinding),
}

impl Member {
    /// The local export `name` of `pool`.
    pub fn local(pool: &Arc<LocalPool>, name: &str) -> Option<Member> {
        Some(Member::Local(pool.clone(), pool.export(name)?.clone()))
    }

    fn plan(&self) -> &InterfacePlan {
        match self {
            Member::Local(_, e) => &e.plan,
            Member::Remote(b) => b.plan(),
        }
    }
}

/// How a MultiRPC ended.
#[derive(Debug)]
pub struct MultiOutcome {
    /// Per member, in member order: its A-stack encoded result or its failure. A member the
    /// call did not wait for has [`RemoteError::Abandoned`] (the handler stopped the call)
    /// or [`RemoteError::Timeout`] (the overall timeout passed).
    pub members: Vec<Result<Vec<u8>, RemoteError>>,
    /// The members the handler saw, in arrival order.
    pub arrival: Vec<usize>,
    /// The handler ended the call.
    pub stopped: bool,
    /// The overall timeout ended the call.
    pub timed_out: bool,
}

/// Calls procedure `proc` of every member with the A-stack encoded `args`. `handler` sees
/// each member's index and result as it arrives and returns [`ControlFlow::Break`] to end
/// the call. Members whose interface differs from the first member's fail with
/// `InterfaceMismatch`.
pub async fn multi_call<F>(
    members: &[Member],
    proc: usize,
    args: &[u8],
    timeout: Duration,
    mut handler: F,
) -> Result<MultiOutcome, RemoteError>
where
    F: FnMut(usize, &Result<Vec<u8>, RemoteError>) -> ControlFlow<()>,
{
    let n = members.len();
    let mut results: Vec<Option<Result<Vec<u8>, RemoteError>>> = (0..n).map(|_| None).collect();
    let Some(first) = members.first() else {
        return Ok(MultiOutcome {
            members: Vec::new(),
            arrival: Vec::new(),
            stopped: false,
            timed_out: false,
        });
    };
    let fingerprint = first.plan().fingerprint;
    // Encoded once for every remote member.
    let wire = if members.iter().any(|m| matches!(m, Member::Remote(_))) {
        Some(encode_args(first.plan(), proc, args)?)
    } else {
        None
    };
    let args: Arc<[u8]> = args.into();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut tasks = Vec::with_capacity(n);
    let mut pending = FuturesUnordered::new();
    for (i, m) in members.iter().enumerate() {
        if m.plan().fingerprint != fingerprint {
            results[i] = Some(Err(RemoteError::Status(Status::InterfaceMismatch)));
            continue;
        }
        let task = match m.clone() {
            Member::Local(pool, export) => {
                let args = args.clone();
                tokio::spawn(async move { pool.call(&export, proc, args.to_vec()).await })
            }
            Member::Remote(b) => {
                let wire = wire.clone().unwrap_or_default();
                tokio::spawn(async move { b.call_wire(proc, wire).await })
            }
        };
        tasks.push(task.abort_handle());
        pending.push(async move {
            let r = task
                .await
                .unwrap_or_else(|e| Err(RemoteError::PeerFailed(e.to_string())));
            (i, r)
        });
    }
    let mut arrival = Vec::with_capacity(n);
    let mut stopped = false;
    let mut timed_out = false;
    // Mismatched members are reported first.
    for (i, r) in results.iter().enumerate() {
        if let Some(r) = r {
            arrival.push(i);
            if handler(i, r).is_break() {
                stopped = true;
                break;
            }
        }
    }
    while !stopped {
        tokio::select! {
            next = pending.next() => match next {
                None => break,
                Some((i, r)) => {
                    arrival.push(i);
                    let flow = handler(i, &r);
                    results[i] = Some(r);
                    if flow.is_break() {
                        stopped = true;
                    }
                }
            },
            () = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                break;
            }
        }
    }
    for t in tasks {
        t.abort();
    }
    let members = results
        .into_iter()
        .map(|r| {
            r.unwrap_or(Err(if timed_out {
                RemoteError::Timeout(timeout)
            } else {
                RemoteError::Abandoned
            }))
        })
        .collect();
    Ok(MultiOutcome {
        members,
        arrival,
        stopped,
        timed_out,
    })
}
