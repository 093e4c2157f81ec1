//! Opening a channel — its layout, its segment mapped into every replica of the server
//! (charged to the server), the window through which the host reaches it — and closing
//! it: calls in flight failed, the segment unmapped, the charge given back, and its pages
//! returned to the replicas when the last user is gone.

use super::client::{ClientSide, SlotState};
use super::processors::ProcShared;
use super::ring::{self, Layout, SegmentView};
use super::serve::ServerSide;
use super::{CallError, ChannelOptions, ChannelShared, Lines, ProcInfo};
use crate::error::Error;
use crate::quota::Charge;
use crate::state::clerk::ExportEntry;
use crate::state::domain::DomainShared;
use crate::state::kernel::KernelInner;
use crate::sync::lock;
use lrpc_lock::TryLock;
use lrpc_presentation::{Side, SidePresentation};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

impl ChannelShared {
    /// A new channel with `options` from `procs`' server to the client of `export`
    /// (a guest domain when `guest`): its segment is mapped into every server replica
    /// (the caller maps it into a guest client), its charge taken from the server.
    pub(super) fn new(
        kernel: &KernelInner,
        procs: Arc<ProcShared>,
        export: Arc<ExportEntry>,
        options: ChannelOptions,
        guest: bool,
    ) -> Result<(ChannelShared, crate::astack::Segment), Error> {
        let server = procs.server.clone();
        if options.slots == 0 || options.slots > ring::MAX_SLOTS {
            return Err(Error::Presentation(format!(
                "a channel has 1 to {} slots, not {}",
                ring::MAX_SLOTS,
                options.slots
            )));
        }
        let info = proc_info(&export)?;
        let layout = layout(&export, options.slots)?;
        let charge = Charge {
            mappings: server.replicas.len() as u64,
            astack_bytes: layout.len as u64,
            ..Charge::default()
        };
        server.core.account.charge(&charge)?;
        let placed = place(kernel, &server, &export, &layout);
        let (offsets, base, segment) = match placed {
            Ok(p) => p,
            Err(e) => {
                server.core.account.refund(&charge);
                return Err(e);
            }
        };
        #[allow(
            unsafe_code,
            reason = "the one place a channel's window is made; argued above"
        )]
        // SAFETY: `base` is replica 0's mapping of the segment: `layout.len` bytes inside
        // that replica's linear memory, page aligned. The memory's Store lives as long as
        // `server` (held by `procs`, which this channel holds), its 4 GiB reservation never
        // moves, and the window's pages stay allocated to this channel until `Drop` (after
        // every user of the `SegmentView`, all of which hold the channel).
        let window = unsafe { SegmentView::new(base, layout.len) };
        window.store(0, ring::MAGIC);
        window.store(4, layout.slots);
        window.store(8, layout.size);
        let n = options.slots as usize;
        let ch = ChannelShared {
            kernel: Arc::downgrade(&procs.kernel.upgrade().ok_or(Error::KernelGone)?),
            procs,
            export,
            info,
            layout,
            window,
            offsets,
            serving: Lines(TryLock::new(ServerSide {
                req_tail: 0,
                rep_head: 0,
                rep_tail: 0,
            })),
            client: Lines(Mutex::new(ClientSide {
                req_head: 0,
                rep_tail: 0,
                slots: (0..n).map(|_| SlotState::Free).collect(),
                seqs: vec![0; n],
                procs: vec![0; n],
                free: (0..options.slots).rev().collect(),
                failure: None,
            })),
            wakers: (0..n).map(|_| Mutex::new(None)).collect(),
            armed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            failed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            charge,
            guest,
            guest_park: Mutex::new(()),
            guest_wake: Condvar::new(),
            guest_sleepers: AtomicUsize::new(0),
        };
        Ok((ch, segment))
    }

    /// Closes the channel: fails calls in flight, takes the segment out of the server's
    /// memories and gives back its charge. Its pages return to the replicas' window
    /// allocators when the last user of the channel is gone (`Drop`).
    pub(crate) fn close(&self) {
        crate::state::domain::Close::close(self);
    }
}

/// Per procedure of the export's interface: how its arguments and results sit on an
/// A-stack, as the client's default presentation combines with the server's.
fn proc_info(export: &ExportEntry) -> Result<Box<[ProcInfo]>, Error> {
    let client = SidePresentation::default_for(&export.plan.name, Side::Client);
    let combination = lrpc_presentation::combine(&export.plan, &client, &export.presentation)?;
    Ok(export
        .plan
        .procs
        .iter()
        .zip(&combination.procs)
        .map(|(p, c)| ProcInfo {
            bounded: p.bounded,
            out_bound: p.out_bound.unwrap_or(0),
            borrow: c.borrow_mask() as i32,
        })
        .collect())
}

/// The layout of a channel of `slots` slots for the export's interface: each slot's
/// A-stack fits the largest procedure's (at least the ABI's least), in whole cache lines.
fn layout(export: &ExportEntry, slots: u32) -> Result<Layout, Error> {
    let bad = |why: String| Error::Presentation(why);
    let size = export
        .plan
        .procs
        .iter()
        .map(|p| p.astack_size)
        .max()
        .unwrap_or(lrpc_abi::MIN_ASTACK_SIZE)
        .max(lrpc_abi::MIN_ASTACK_SIZE)
        .checked_next_multiple_of(64)
        .ok_or_else(|| bad("A-stack size overflows".into()))?;
    Layout::new(slots, size).ok_or_else(|| bad("channel too large".into()))
}

impl crate::state::domain::Close for ChannelShared {
    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.fail(CallError::Closed);
        for (r, &off) in self.procs.server.replicas.iter().zip(self.offsets.iter()) {
            if let Err(e) = r.window_range().unmap(off, self.layout.len) {
                tracing::error!(
                    domain = r.key.domain,
                    off,
                    "unmapping a channel failed: {e}"
                );
            }
        }
        self.procs.server.core.account.refund(&self.charge);
        self.procs.version.fetch_add(1, Ordering::Release);
        let _g = lock(&self.procs.park);
        self.procs.wake.notify_all();
    }
}

impl Drop for ChannelShared {
    fn drop(&mut self) {
        self.close();
        // Nobody can touch the window any more: its pages go back to the replicas.
        for (r, &off) in self.procs.server.replicas.iter().zip(self.offsets.iter()) {
            r.free_window(off, self.layout.len);
        }
    }
}

/// Maps a new segment for `layout` into every replica of `server`: its offset in each, and
/// the host address of replica 0's mapping.
fn place(
    kernel: &KernelInner,
    server: &DomainShared,
    export: &ExportEntry,
    layout: &Layout,
) -> Result<(Box<[usize]>, *mut u8, crate::astack::Segment), Error> {
    let _ = kernel;
    let segment = crate::astack::Segment::new(layout.len).map_err(Error::Memfd)?;
    let len = segment.len();
    let mut offsets: Vec<usize> = Vec::with_capacity(server.replicas.len());
    let mut base0 = std::ptr::null_mut();
    let undo = |offsets: &[usize]| {
        for (r, &off) in server.replicas.iter().zip(offsets) {
            r.unmap_free(off, len);
        }
    };
    for (i, r) in server.replicas.iter().enumerate() {
        let got = r.with_store(export.deadline, |mut ctx| {
            let off = r.alloc_window(&mut ctx, len)?;
            Ok::<_, Error>((off, r.memory.data_ptr(&ctx) as usize))
        });
        let (off, base) = match got {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                undo(&offsets);
                return Err(e);
            }
            Err(_) => {
                undo(&offsets);
                return Err(Error::Busy);
            }
        };
        if let Err(source) = r.window_range().map(off, &segment) {
            r.free_window(off, len);
            undo(&offsets);
            return Err(Error::Map {
                domain: server.core.name.clone(),
                source,
            });
        }
        if i == 0 {
            base0 = (base + off) as *mut u8;
        }
        offsets.push(off);
    }
    Ok((offsets.into_boxed_slice(), base0, segment))
}
