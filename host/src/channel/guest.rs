//! Asynchronous bindings held by guest domains: the kernel's half of `lrpc.channel_bind`,
//! `lrpc.channel_wait` and `lrpc.channel_unbind` (the imports themselves, which check what
//! the guest passes, are in `imports::channel`).
//!
//! A guest client keeps its client side of the channel — request head, reply tail, its
//! slots and their sequence numbers — in its own memory, and reaches the segment through a
//! mapping in its own memory: the same memfd is mapped into the calling client replica and
//! into every replica of the server, and into nothing else. Publishing a request and taking
//! a reply are stores and loads in the client's memory; the host is entered only when the
//! client has nothing to run (`channel_wait`), to wake the server's processors, to run the
//! server's loop on the client's processor when the server has none free (URPC 5), or to
//! park until the reply head moves.
//!
//! The server side of such a channel is exactly the embedder's (`ChannelShared::serve`):
//! every value the client writes (request head, ring entries, reply tail, A-stacks) is
//! checked there as it is for any peer. The client's stores are plain wasm stores (aligned
//! words on x86-64, ordered by the guest compiler through its atomics, see the SDK's
//! `chan` module); the argument of the module docs of `channel` covers them unchanged.

use super::{CallError, ChannelOptions, ChannelShared, ProcShared};
use crate::error::Error;
use crate::quota::{Account, Charge};
use crate::slot::Slot;
use crate::state::clerk::ExportEntry;
use crate::state::domain::{DomainData, Replica};
use crate::state::kernel::KernelInner;
use crate::sync::lock;
use lrpc_abi::{Status, chan};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use wasmtime::StoreContextMut;

/// How long a waiting guest polls the reply head before it parks.
const GUEST_SPIN: Duration = Duration::from_micros(20);

/// Longest single park of a waiting guest (a safety net: the server side wakes it).
const GUEST_PARK: Duration = Duration::from_millis(1);

/// Longest `channel_wait` the kernel grants at once; the guest asks again.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(100);

/// Bit set in the slot part of a channel handle, so that channel handles and binding
/// handles of the same domain never coincide.
pub(crate) const HANDLE_BIT: u16 = 0x8000;

/// The replica's table of channels, indexed by the handle's slot (without [`HANDLE_BIT`]),
/// empty until the first.
pub(crate) fn table(data: &DomainData) -> &[Slot<GuestChannel>] {
    data.features
        .get::<Vec<Slot<GuestChannel>>>()
        .map_or(&[], Vec::as_slice)
}

/// The replica's table of channels, to change.
pub(crate) fn table_mut(data: &mut DomainData) -> &mut Vec<Slot<GuestChannel>> {
    data.features.get_or_default()
}

/// An asynchronous binding held by a guest replica. Dropping it closes the channel (the
/// server's mappings go at once) and gives back the client's charge; the client's own
/// mapping is taken out by `channel_unbind` (or goes with the client's memory).
pub(crate) struct GuestChannel {
    pub ch: Arc<ChannelShared>,
    /// The segment's offset in the client replica's memory.
    pub client_off: usize,
    charge: Charge,
    account: Arc<Account>,
}

impl GuestChannel {
    /// Bytes of the segment.
    pub(crate) fn len(&self) -> usize {
        self.ch.layout.len
    }
}

impl Drop for GuestChannel {
    fn drop(&mut self) {
        self.ch.close();
        self.account.refund(&self.charge);
    }
}

/// Makes a channel from the client replica `client` (running: `ctx` is its store) to
/// `export`, served by `procs`, and maps it into the client's memory too. Returns the
/// channel and the descriptor (handle 0: the caller numbers it).
pub(crate) fn bind(
    kernel: &KernelInner,
    procs: &Arc<ProcShared>,
    export: Arc<ExportEntry>,
    slots: u32,
    client: &Replica,
    mut ctx: StoreContextMut<'_, DomainData>,
) -> Result<(GuestChannel, chan::Desc), Error> {
    let nprocs = export.plan.procs.len() as u32;
    let (ch, segment) = ChannelShared::new(
        kernel,
        procs.clone(),
        export,
        ChannelOptions { slots },
        true,
    )?;
    // From here on, dropping `ch` closes it: the server's mappings and charge go back.
    let ch = Arc::new(ch);
    let len = ch.layout.len;
    let account = ctx.data().core.account.clone();
    let charge = Charge {
        bindings: 1,
        astack_bytes: len as u64,
        mappings: 1,
        ..Charge::default()
    };
    account.charge(&charge)?;
    let off = match client.alloc_window(&mut ctx, len) {
        Ok(off) => off,
        Err(e) => {
            account.refund(&charge);
            return Err(e);
        }
    };
    if let Err(source) = client.window_range().map(off, &segment) {
        client.free_window(off, len);
        account.refund(&charge);
        return Err(Error::Map {
            domain: account.domain.clone(),
            source,
        });
    }
    let (Ok(base), Ok(len32)) = (u32::try_from(off), u32::try_from(len)) else {
        client.unmap_free(off, len);
        account.refund(&charge);
        return Err(Error::Presentation("channel outside 32-bit memory".into()));
    };
    let desc = chan::Desc {
        handle: 0,
        base,
        len: len32,
        slots: ch.layout.slots,
        size: ch.layout.size,
        astacks: ch.layout.astacks as u32,
        nprocs,
    };
    procs.attach(&ch);
    Ok((
        GuestChannel {
            ch,
            client_off: off,
            charge,
            account,
        },
        desc,
    ))
}

impl ChannelShared {
    /// Why the channel failed, as the status a guest client sees; `None` while it works.
    pub(crate) fn failure_status(&self) -> Option<Status> {
        if !self.failed.load(Ordering::Acquire) && !self.is_closed() {
            return None;
        }
        let c = lock(&self.client);
        Some(match &c.failure {
            Some(CallError::Failed(s)) => *s,
            Some(CallError::Corrupt(_)) => Status::ChannelRefused,
            Some(CallError::BadProcedure(_)) => Status::BadProcedure,
            Some(CallError::Closed) | None => Status::StaleBinding,
            Some(_) => Status::ServerRejected,
        })
    }

    /// `channel_wait` for a guest client that has taken every reply up to `rep_tail`:
    /// returns when the reply head moves past it, the channel fails (its status), or about
    /// `timeout` passes. Wakes a parked server processor for requests the client published,
    /// and serves the channel on this thread when the server has no processor free.
    pub(crate) fn wait_guest(&self, rep_tail: u32, timeout: Duration) -> Result<(), Status> {
        let start = Instant::now();
        let procs = &self.procs;
        if self.pending() {
            procs.notify();
        }
        let moved = || self.window.load(chan::REP_HEAD) != rep_tail;
        loop {
            if !self.check_server() || self.failed.load(Ordering::Acquire) || self.is_closed() {
                return Err(self.failure_status().unwrap_or(Status::ServerTerminated));
            }
            if moved() {
                return Ok(());
            }
            let running = procs.running.load(Ordering::Acquire);
            let waited = start.elapsed();
            let underpowered = running == 0
                || (waited >= GUEST_SPIN && procs.busy.load(Ordering::Acquire) >= running);
            if underpowered && self.serve(false) > 0 {
                // Processor donation (URPC 5): this client processor ran the server's loop;
                // back to the client, which has replies now.
                continue;
            }
            if waited >= timeout {
                return Ok(());
            }
            if waited < GUEST_SPIN {
                std::hint::spin_loop();
                continue;
            }
            if running == 0 {
                // Nobody else serves this channel: look again soon (the server's replica
                // may be busy with another donor's requests).
                std::thread::yield_now();
                continue;
            }
            let g = lock(&self.guest_park);
            self.guest_sleepers.fetch_add(1, Ordering::SeqCst);
            if !moved() && !self.failed.load(Ordering::Acquire) {
                let left = timeout.saturating_sub(waited).min(GUEST_PARK);
                let _ = self.guest_wake.wait_timeout(g, left);
            }
            self.guest_sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
