//! Extents: the A-stacks of one procedure of one binding, as the call path sees them from
//! the client's store data (LRPC 3.2, 5.2). A-stacks of an extent are contiguous and of one
//! size, so finding one from an address a guest passes is a subtraction, a multiplication
//! and a compare per extent.

use super::map::{PAGE, page_round};
use lrpc_abi::Status;
use std::cell::Cell;

/// Maximum extents of A-stacks per procedure (the first one plus growth, LRPC 5.2).
pub(crate) const MAX_EXTENTS: usize = 32;

/// Where one segment is mapped: client offset, and an offset per server replica.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    pub client: usize,
    pub server: Box<[usize]>,
    pub len: usize,
}

/// The A-stacks of one procedure of one binding.
pub(crate) struct ProcStacks {
    pub extents: Vec<Extent>,
}

/// A contiguous run of `count` A-stacks of `size` bytes.
pub(crate) struct Extent {
    /// Client address of the first A-stack.
    pub client_base: u32,
    /// Server address of the first A-stack, per server replica.
    pub server_bases: Box<[u32]>,
    /// `server_bases[0]` (0 if there is none), for the call path's common case (replica 0)
    /// without a bounds check. `server_bases` never changes once the extent is made.
    pub base0: u32,
    pub size: u32,
    /// `reciprocal(size)`: finds an A-stack's index without a division on the call path.
    pub recip: u64,
    pub count: u32,
    /// Index of the first A-stack of this extent among the procedure's A-stacks.
    pub first: u32,
    /// A-stacks in use by a call in flight (created with the extent, never resized: a call
    /// in flight clears its flag through a `linkage::BusyFlag`).
    pub busy: Box<[Cell<bool>]>,
    /// The `in` out-of-band segment of each A-stack: capacity and server addresses per
    /// replica (all zero when none).
    pub oob_in: Vec<OobView>,
}

/// The busy flags of an extent of `count` A-stacks, all clear.
pub(crate) fn idle(count: u32) -> Box<[Cell<bool>]> {
    (0..count).map(|_| Cell::new(false)).collect()
}

/// Where an out-of-band segment is, as the call path needs it.
#[derive(Clone, Default)]
pub(crate) struct OobView {
    pub cap: u32,
    pub server: Box<[u32]>,
    /// `server[0]` (0 if there is none), for the call path's common case (replica 0)
    /// without a bounds check; set with `server` (see `new`).
    pub first: u32,
}

impl OobView {
    /// A view of a segment of `cap` bytes at `server` in the server's replicas.
    pub fn new(cap: u32, server: Box<[u32]>) -> OobView {
        OobView {
            cap,
            first: server.first().copied().unwrap_or(0),
            server,
        }
    }

    /// Brings the view up to date with the segment's placement (rebuilt only if it moved).
    pub fn refresh(&mut self, at: &Placement) {
        let addr = |s: usize| u32::try_from(s).unwrap_or(u32::MAX);
        let same = self.cap as usize == at.len
            && self.server.len() == at.server.len()
            && self
                .server
                .iter()
                .zip(&at.server)
                .all(|(&v, &s)| v == addr(s));
        if !same {
            *self = OobView::new(
                u32::try_from(at.len).unwrap_or(u32::MAX),
                at.server.iter().map(|&s| addr(s)).collect(),
            );
        }
    }
}

impl ProcStacks {
    /// Finds the extent and index of the A-stack at client address `astack` (any `u32` a
    /// guest passes: refused unless it is exactly the start of one of the A-stacks).
    #[inline]
    pub fn locate(&self, astack: u32) -> Option<(usize, u32)> {
        self.extents
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.index_of(astack).map(|local| (i, local)))
    }
}

impl Extent {
    /// An extent of `count` idle A-stacks of `size` bytes at `client_base` in the client and
    /// at `server_bases` in each server replica, the first being the procedure's A-stack
    /// `first`; no out-of-band segments yet. What the call path derives (`base0`, `recip`)
    /// is computed here, once.
    pub fn new(
        client_base: u32,
        server_bases: Box<[u32]>,
        size: u32,
        count: u32,
        first: u32,
    ) -> Extent {
        let replicas = server_bases.len();
        Extent {
            client_base,
            base0: server_bases.first().copied().unwrap_or(0),
            server_bases,
            size,
            recip: reciprocal(size),
            count,
            first,
            busy: idle(count),
            oob_in: vec![OobView::new(0, vec![0; replicas].into_boxed_slice()); count as usize],
        }
    }

    /// The index in this extent of the A-stack at client address `astack`, if it is exactly
    /// the start of one of them.
    #[inline]
    fn index_of(&self, astack: u32) -> Option<u32> {
        let off = astack.wrapping_sub(self.client_base);
        let local = if self.recip == 0 {
            if self.size == 0 {
                return None;
            }
            off
        } else {
            ((u128::from(off) * u128::from(self.recip)) >> 64) as u32
        };
        (local < self.count && local.wrapping_mul(self.size) == off).then_some(local)
    }
}

/// Procedure `proc` (as a guest passed it) as an index into `procs`, or the refusal.
#[inline]
fn proc_index(procs: &[ProcStacks], proc: i32) -> Result<usize, Status> {
    usize::try_from(proc)
        .ok()
        .filter(|&p| p < procs.len())
        .ok_or(Status::BadProcedure)
}

/// Where A-stack `astack` of procedure `proc` (both as a guest passed them) lies:
/// `(procedure, extent, index in the extent)`, or the refusal.
#[inline]
fn find(procs: &[ProcStacks], proc: i32, astack: i32) -> Result<(usize, usize, u32), Status> {
    let p = proc_index(procs, proc)?;
    let (e, index) = procs[p].locate(astack as u32).ok_or(Status::BadAStack)?;
    Ok((p, e, index))
}

/// The extent holding A-stack `astack` of procedure `proc` (both as a guest passed them)
/// and the A-stack's index in it, or the refusal (as [`find`], without indexing again).
#[inline]
pub(crate) fn astack(
    procs: &[ProcStacks],
    proc: i32,
    astack: i32,
) -> Result<(&Extent, u32), Status> {
    procs[proc_index(procs, proc)?]
        .extents
        .iter()
        .find_map(|e| e.index_of(astack as u32).map(|local| (e, local)))
        .ok_or(Status::BadAStack)
}

/// [`astack`], for changing the extent.
pub(crate) fn astack_mut(
    procs: &mut [ProcStacks],
    proc: i32,
    astack: i32,
) -> Result<(&mut Extent, u32), Status> {
    let (p, e, index) = find(procs, proc, astack)?;
    Ok((&mut procs[p].extents[e], index))
}

/// The multiplier that divides a 32-bit offset by `size` (≥ 2): `(off · m) >> 64 = off / size`
/// for every `u32` offset when `m = ⌈2^64 / size⌉` (Lemire, Kaser, Kurz, "Faster remainder by
/// direct computation", 2019). 0 stands for `size` 1 (the offset is the index). A 32-bit
/// division costs tens of cycles; this is one multiplication, and `locate` checks the result
/// against the offset anyway.
pub(crate) fn reciprocal(size: u32) -> u64 {
    // (0 for 0 as well: `locate` refuses every address of an extent of empty A-stacks.)
    if size <= 1 {
        0
    } else {
        u64::MAX / u64::from(size) + 1
    }
}

/// [`layout`] for the procedures of `plan`: each procedure's offset, and the segment's size.
pub(crate) fn plan_layout(plan: &lrpc_presentation::InterfacePlan) -> Option<(Vec<usize>, usize)> {
    let sizes: Vec<(u32, u32)> = plan
        .procs
        .iter()
        .map(|p| (p.astack_size, p.astack_count))
        .collect();
    layout(&sizes)
}

/// Layout of a binding's first A-stack segment: per procedure, its offset in the segment,
/// A-stack size and count.
pub(crate) fn layout(sizes: &[(u32, u32)]) -> Option<(Vec<usize>, usize)> {
    let mut offs = Vec::with_capacity(sizes.len());
    let mut at = 0usize;
    for &(size, count) in sizes {
        offs.push(at);
        let bytes = usize::try_from(size)
            .ok()?
            .checked_mul(usize::try_from(count).ok()?)?;
        at = at.checked_add(bytes)?.checked_add(7)? & !7;
    }
    Some((offs, page_round(at.max(PAGE))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(base: u32, size: u32, count: u32) -> Extent {
        Extent::new(base, Box::new([0]), size, count, 0)
    }

    /// `locate` agrees with division for every size shape (1, powers of two, odd, large) at
    /// the edges of each extent and at offsets that overflow or wrap.
    #[test]
    fn locate_matches_division() {
        for size in [
            0,
            1,
            2,
            3,
            7,
            8,
            208,
            4096,
            4104,
            65_535,
            1 << 20,
            u32::MAX / 3,
        ] {
            for count in [1u32, 2, 5] {
                let base = 0x1_0000;
                let p = ProcStacks {
                    extents: vec![extent(base, size, count)],
                };
                let mut probes: Vec<u32> = vec![0, 1, u32::MAX, base - 1, base + 1];
                for k in 0..=count + 1 {
                    let at = base.wrapping_add(k.wrapping_mul(size));
                    probes.extend([at, at.wrapping_sub(1), at.wrapping_add(1)]);
                }
                for a in probes {
                    let off = a.wrapping_sub(base);
                    let want = (size != 0
                        && u64::from(off) < u64::from(size) * u64::from(count)
                        && off % size == 0)
                        .then(|| (0, off / size));
                    assert_eq!(
                        p.locate(a),
                        want,
                        "size {size} count {count} address {a:#x}"
                    );
                }
            }
        }
    }
}
