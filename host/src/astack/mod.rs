//! A-stacks (LRPC 3.2, 5.2): the argument stacks a client and a server share, and the pages
//! they live in. One tree, bottom to top:
//!
//! * [`scan`] — which pages of a range the guest wrote (`PAGEMAP_SCAN`);
//! * [`map`] — memfd segments and the only code that maps them into a linear memory;
//! * [`alloc`] — the window allocator: where windows go in a memory, for a domain replica
//!   and for a direct-linked server copy alike;
//! * [`extent`] — the A-stacks of one procedure as the call path finds them, and where a
//!   segment is placed.
//!
//! A replica's window space and a binding's placement are records of the domains and
//! bindings they belong to, so they live in `state` (`state::window`, `state::place`).

pub(crate) mod alloc;
pub(crate) mod extent;
pub(crate) mod map;
pub(crate) mod scan;

pub(crate) use alloc::{WindowAlloc, grown_offset};
pub(crate) use extent::{
    Extent, MAX_EXTENTS, Placement, ProcStacks, astack, astack_mut, plan_layout,
};
pub(crate) use map::{MemoryRange, Segment, Snapshot, page_round};
