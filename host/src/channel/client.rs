//! The client side of a channel the host keeps for the embedder ([`ClientSide`]): publishing
//! a request on a free slot, taking the replies the server posted (each checked against the
//! calls in flight), reading a call's results off its A-stack, and failing every call in
//! flight when the channel is refused.

use super::ring::{REP_HEAD, REP_TAIL, REQ_HEAD};
use super::{CallError, ChannelShared};
use crate::sync::lock;
use lrpc_abi::Status;
use std::sync::atomic::Ordering;

/// Where the call on one slot is.
pub(super) enum SlotState {
    Free,
    Waiting {
        seq: u32,
    },
    Abandoned {
        seq: u32,
    },
    Done {
        seq: u32,
        result: Result<Vec<u8>, CallError>,
    },
}

pub(super) const WAITING: u8 = 1;
pub(super) const ABANDONED: u8 = 2;

impl SlotState {
    /// The state's kind and sequence number, to match on without borrowing.
    pub(super) fn key(&self) -> (u8, u32) {
        match *self {
            SlotState::Free => (0, 0),
            SlotState::Waiting { seq } => (WAITING, seq),
            SlotState::Abandoned { seq } => (ABANDONED, seq),
            SlotState::Done { seq, .. } => (3, seq),
        }
    }
}

/// The client side's own counters and its slots (never read back from the segment).
pub(super) struct ClientSide {
    pub(super) req_head: u32,
    pub(super) rep_tail: u32,
    pub(super) slots: Vec<SlotState>,
    pub(super) seqs: Vec<u32>,
    /// The procedure of each slot's call (for reading its results).
    pub(super) procs: Vec<usize>,
    pub(super) free: Vec<u32>,
    pub(super) failure: Option<CallError>,
}

impl ChannelShared {
    pub(super) fn fail_locked(&self, c: &mut ClientSide, err: CallError) {
        if c.failure.is_none() {
            c.failure = Some(err.clone());
        }
        self.failed.store(true, Ordering::Release);
        for (i, s) in c.slots.iter_mut().enumerate() {
            match s {
                SlotState::Waiting { seq } => {
                    *s = SlotState::Done {
                        seq: *seq,
                        result: Err(err.clone()),
                    };
                }
                SlotState::Abandoned { .. } => {
                    *s = SlotState::Free;
                    c.free.push(i as u32);
                }
                _ => {}
            }
        }
        for w in self.wakers.iter() {
            if let Some(w) = lock(w).take() {
                w.wake();
            }
        }
    }

    /// Takes the replies the server posted (at most one ring's worth), checking each
    /// against the calls in flight. Called with the client side locked.
    pub(super) fn harvest(&self, c: &mut ClientSide) {
        if c.failure.is_some() {
            return;
        }
        let slots = self.layout.slots;
        let head = self.window.load(REP_HEAD);
        let n = head.wrapping_sub(c.rep_tail);
        if n > slots {
            self.fail_locked(c, CallError::Corrupt("reply head out of range"));
            return;
        }
        for _ in 0..n {
            let e = self.layout.rep_entry(c.rep_tail);
            let (slot, seq, status) = (
                self.window.load(e),
                self.window.load(e + 4),
                self.window.load(e + 8) as i32,
            );
            let Some(&cur) = c.slots.get(slot as usize).map(SlotState::key).as_ref() else {
                self.fail_locked(c, CallError::Corrupt("reply names no slot"));
                return;
            };
            match cur {
                (WAITING, s) if s == seq => {
                    let result = match Status::try_from(status) {
                        Ok(Status::Ok) => self.results(slot, c.procs.get(slot as usize).copied()),
                        Ok(other) => Err(CallError::Failed(other)),
                        Err(_) => {
                            self.fail_locked(c, CallError::Corrupt("reply status unknown"));
                            return;
                        }
                    };
                    c.slots[slot as usize] = SlotState::Done { seq, result };
                }
                (ABANDONED, s) if s == seq => {
                    // A cancelled call's late reply: discarded, the slot is free again.
                    c.slots[slot as usize] = SlotState::Free;
                    c.free.push(slot);
                }
                _ => {
                    self.fail_locked(c, CallError::Corrupt("reply names no call in flight"));
                    return;
                }
            }
            c.rep_tail = c.rep_tail.wrapping_add(1);
        }
        if n > 0 {
            self.window.store(REP_TAIL, c.rep_tail);
        }
    }

    /// Reads a successful call's results off its slot's A-stack, checking their length.
    fn results(&self, slot: u32, proc: Option<usize>) -> Result<Vec<u8>, CallError> {
        let info = proc
            .and_then(|p| self.info.get(p))
            .ok_or(CallError::Corrupt("reply for an unknown procedure"))?;
        let at = self.layout.astack(slot);
        let cap = self.layout.size as usize;
        let (off, len) = if info.bounded {
            (0, info.out_bound)
        } else {
            let flags = self.window.load(at);
            let len = self.window.load(at + 4) as usize;
            if flags & lrpc_abi::header::OOB != 0 {
                return Err(CallError::Failed(Status::BadReply));
            }
            (lrpc_abi::header::LEN, len)
        };
        if off + len > cap {
            return Err(CallError::Failed(Status::BadReply));
        }
        let mut out = vec![0; len];
        self.window
            .read(at + off, &mut out)
            .ok_or(CallError::Corrupt("results outside the channel"))?;
        Ok(out)
    }

    /// Publishes a request; the slot it took and its sequence number.
    pub(super) fn submit(&self, proc: usize, args: &[u8]) -> Result<(u32, u32), CallError> {
        let info = self.info.get(proc).ok_or(CallError::BadProcedure(proc))?;
        let cap = self.layout.size as usize;
        let (off, need) = if info.bounded {
            (0, args.len())
        } else {
            (lrpc_abi::header::LEN, args.len() + lrpc_abi::header::LEN)
        };
        if need > cap {
            return Err(CallError::TooLarge {
                len: args.len(),
                cap: cap.saturating_sub(off),
            });
        }
        if self.is_closed() {
            return Err(CallError::Closed);
        }
        if !self.check_server() {
            return Err(CallError::Failed(Status::ServerTerminated));
        }
        let mut c = lock(&self.client);
        if let Some(f) = &c.failure {
            return Err(f.clone());
        }
        let slot = c.free.pop().ok_or(CallError::Full)?;
        let seq = c.seqs[slot as usize].wrapping_add(1);
        c.seqs[slot as usize] = seq;
        let at = self.layout.astack(slot);
        if !info.bounded {
            self.window.store(at, 0);
            self.window.store(at + 4, args.len() as u32);
        }
        self.window.write(at + off, args);
        let e = self.layout.req_entry(c.req_head);
        self.window.store(e, slot);
        self.window.store(e + 4, seq);
        self.window.store(e + 8, proc as u32);
        c.slots[slot as usize] = SlotState::Waiting { seq };
        c.req_head = c.req_head.wrapping_add(1);
        self.window.store(REQ_HEAD, c.req_head);
        c.procs[slot as usize] = proc;
        drop(c);
        self.procs.notify();
        Ok((slot, seq))
    }
}
