//! The window records: the window space of one replica's memory (through the one
//! [`WindowAlloc`]) with the windows waiting to be unmapped, and the segments a binding
//! owns with where each is mapped ([`Mappings`]). What places, maps and unmaps them is
//! above the records (`replica`, `place`).

use crate::astack::alloc::WindowAlloc;
use crate::astack::extent::Placement;
use crate::astack::map::{MemoryRange, Segment};
use crate::quota::Charge;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// The window space of one replica's memory.
pub(crate) struct WindowSpace {
    pub(super) alloc: Mutex<WindowAlloc>,
    /// Windows revoked while this replica was running (see `Replica::unmap_or_defer`).
    pub(super) deferred: Mutex<Vec<(usize, usize)>>,
    /// Set while `deferred` is not empty (shared with the replica's store data).
    pub(super) has_deferred: Arc<AtomicBool>,
}

impl WindowSpace {
    /// No windows yet; `has_deferred` is the flag the replica's store data reads too.
    pub(crate) fn new(has_deferred: Arc<AtomicBool>) -> WindowSpace {
        WindowSpace {
            alloc: Mutex::new(WindowAlloc::default()),
            deferred: Mutex::new(Vec::new()),
            has_deferred,
        }
    }
}

/// A mapped segment owned by a binding. Its memory file stays open only while some server
/// replica still waits for a lazy mapping ([`UNMAPPED`]); mapped pages need no open file.
pub(super) struct Mapped {
    pub(super) segment: Option<Segment>,
    pub(super) at: Placement,
}

impl Mapped {
    /// Keeps the memory file only while a replica still needs it mapped; returns the charge
    /// to give back when the file was closed.
    pub(super) fn new(segment: Segment, at: Placement) -> (Mapped, Charge) {
        let mut m = Mapped {
            segment: Some(segment),
            at,
        };
        let freed = m.close_if_mapped();
        (m, freed)
    }

    pub(super) fn close_if_mapped(&mut self) -> Charge {
        if self.segment.is_some()
            && !self.at.server.contains(&UNMAPPED)
            && self.at.client != UNMAPPED
        {
            self.segment = None;
            return Charge {
                memfds: 1,
                ..Charge::default()
            };
        }
        Charge::default()
    }
}

/// Which out-of-band segment: procedure, A-stack index, direction.
pub(crate) type OobKey = (u32, u32, i32);

/// Where a binding's A-stacks are mapped into a direct-linked server copy, which lives in
/// the client's store, and the copy's window space the pages go back to.
pub(crate) struct DirectWindow {
    pub range: MemoryRange,
    pub windows: Arc<Mutex<WindowAlloc>>,
    pub offset: usize,
    pub len: usize,
}

/// A server replica a segment is not (yet) mapped into.
pub(crate) const UNMAPPED: usize = usize::MAX;

/// The segments a binding owns, and where each is mapped.
#[derive(Default)]
pub(crate) struct Mappings {
    /// A-stack extents.
    pub(super) astacks: Vec<Mapped>,
    /// Out-of-band segments.
    pub(super) oob: HashMap<OobKey, Mapped>,
}

impl Mappings {
    /// The windows as `BindingInfo` shows them: A-stack windows, then out-of-band windows,
    /// each as client offset, server offsets per replica and length.
    pub(crate) fn views(&self) -> (Vec<WindowOffsets>, Vec<WindowOffsets>) {
        let view = |x: &Mapped| (x.at.client, x.at.server.to_vec(), x.at.len);
        (
            self.astacks.iter().map(view).collect(),
            self.oob.values().map(view).collect(),
        )
    }
}

/// A window as the embedder sees it: client offset, server offsets per replica, length.
pub(crate) type WindowOffsets = (usize, Vec<usize>, usize);

/// What an out-of-band segment placed at `at` is charged: its bytes, a mapping per place
/// it may be mapped, and its memory file while `open`.
pub(crate) fn oob_charge(at: &Placement, open: bool) -> Charge {
    Charge {
        oob_bytes: at.len as u64,
        mappings: 1 + at.server.len() as u64,
        memfds: u64::from(open),
        ..Charge::default()
    }
}
