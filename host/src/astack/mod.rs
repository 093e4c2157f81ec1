//! A-stacks (LRPC 3.2, 5.2): the argument stacks a client and a server share, and the pages
//! they live in. One tree, bottom to top:
//!
//! * [`map`] — memfd segments and the only code that maps them into a linear memory;
//! * [`extent`] — the A-stacks of one procedure as the call path finds them;
//! * [`place`] — a binding's segments placed into the client replica and every server
//!   replica, out-of-band segments, and revocation's unmapping.

pub(crate) mod extent;
pub(crate) mod map;
pub(crate) mod place;

pub(crate) use extent::{Extent, MAX_EXTENTS, OobView, ProcStacks, layout, reciprocal};
pub(crate) use map::{MemoryRange, PAGE, Segment, page_round};
pub(crate) use place::{Mappings, OobKey, Placement, UNMAPPED};
