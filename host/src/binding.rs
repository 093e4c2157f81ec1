//! Bindings (LRPC 3.1): the Binding Object a client holds, the A-stacks allocated for it and
//! the pages they live in.
//!
//! A binding's state is split by who touches it:
//!
//! * [`ClientSlot`]s live in the client replica's store data. The call path reads them while
//!   it holds that store (it runs inside the client's `lrpc.call` import), so validating a
//!   handle, a procedure and an A-stack takes no lock: a generation compare and, per extent
//!   of A-stacks, one range check (A-stacks of an extent are contiguous).
//! * [`Binding`] is shared (`Arc`) between the client's slot, the linkage records of calls in
//!   flight and the domains' books. It owns the memfd segments and knows where each is mapped,
//!   so it can be revoked from any thread (termination) without the client's store.

use crate::astack::{MemoryRange, PAGE, Segment, page_round};
use crate::clerk::ExportEntry;
use crate::domain::{DomainData, DomainShared, lock};
use crate::error::Error;
use crate::linkage::ReplicaKey;
use crate::quota::{Account, Charge};
use lrpc_presentation::Combination;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use wasmtime::{AsContextMut, StoreContextMut};

/// Binding state values.
pub(crate) const LIVE: u8 = 0;
const UNBOUND: u8 = 1;
const SERVER_TERMINATED: u8 = 2;
const CLIENT_TERMINATED: u8 = 3;

/// Why a binding is revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RevokeReason {
    /// The client unbound it.
    Unbound,
    /// The server domain was terminated.
    ServerTerminated,
    /// The client domain was terminated (or dropped).
    ClientTerminated,
}

/// Maximum extents of A-stacks per procedure (the first one plus growth, LRPC 5.2).
pub(crate) const MAX_EXTENTS: usize = 32;

/// One client slot of a replica's binding table.
#[derive(Default)]
pub(crate) struct ClientSlot {
    /// Generation of the handle issued for this slot most recently (0: never issued).
    pub generation: u32,
    /// The live binding, when the slot is in use.
    pub live: Option<ClientBinding>,
}

/// A client's view of one live binding.
pub(crate) struct ClientBinding {
    pub binding: Arc<Binding>,
    pub procs: Box<[ProcStacks]>,
}

impl ClientBinding {
    /// Whether a call on this binding is in flight.
    pub fn any_busy(&self) -> bool {
        self.procs
            .iter()
            .any(|p| p.extents.iter().any(|e| e.busy.iter().any(Cell::get)))
    }
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
}

impl OobView {
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
            *self = OobView {
                cap: u32::try_from(at.len).unwrap_or(u32::MAX),
                server: at.server.iter().map(|&s| addr(s)).collect(),
            };
        }
    }
}

impl ProcStacks {
    /// Finds the extent and index of the A-stack at client address `astack` (any `u32` a
    /// guest passes: refused unless it is exactly the start of one of the A-stacks).
    #[inline]
    pub fn locate(&self, astack: u32) -> Option<(usize, u32)> {
        for (i, e) in self.extents.iter().enumerate() {
            let off = astack.wrapping_sub(e.client_base);
            let local = if e.recip == 0 {
                if e.size == 0 {
                    continue;
                }
                off
            } else {
                ((u128::from(off) * u128::from(e.recip)) >> 64) as u32
            };
            if local < e.count && local.wrapping_mul(e.size) == off {
                return Some((i, local));
            }
        }
        None
    }
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

/// Where one segment is mapped: client offset, and an offset per server replica.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    pub client: usize,
    pub server: Box<[usize]>,
    pub len: usize,
}

/// A mapped segment owned by a binding. Its memory file stays open only while some server
/// replica still waits for a lazy mapping ([`UNMAPPED`]); mapped pages need no open file.
struct Mapped {
    segment: Option<Segment>,
    at: Placement,
}

impl Mapped {
    /// Keeps the memory file only while a replica still needs it mapped; returns the charge
    /// to give back when the file was closed.
    fn new(segment: Segment, at: Placement) -> (Mapped, Charge) {
        let mut m = Mapped {
            segment: Some(segment),
            at,
        };
        let freed = m.close_if_mapped();
        (m, freed)
    }

    fn close_if_mapped(&mut self) -> Charge {
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

/// A server replica a segment is not (yet) mapped into.
pub(crate) const UNMAPPED: usize = usize::MAX;

#[derive(Default)]
struct Mappings {
    /// A-stack extents.
    astacks: Vec<Mapped>,
    /// Out-of-band segments.
    oob: HashMap<OobKey, Mapped>,
}

/// A binding between one client replica and a server domain.
pub(crate) struct Binding {
    pub handle: u64,
    /// The combination signature of both sides' presentations.
    pub combination: Combination,
    /// Per procedure, the borrow mask passed to the server's entry.
    pub borrow: Box<[i32]>,
    pub export: Arc<ExportEntry>,
    pub server: Arc<DomainShared>,
    pub client: Weak<DomainShared>,
    pub client_key: ReplicaKey,
    pub state: AtomicU8,
    pub deadline: Duration,
    pub deadline_ticks: u64,
    mappings: Mutex<Mappings>,
    /// Where the A-stacks are mapped into a direct-linked server copy (in the client's store).
    direct: Mutex<Option<(MemoryRange, usize, usize)>>,
    /// The client domain's quota account, and what this binding has charged to it.
    account: Arc<Account>,
    charged: Mutex<Charge>,
}

/// What the embedder can see of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingInfo {
    /// The Binding Object's handle as the client holds it.
    pub handle: u64,
    /// The name the interface was bound under.
    pub name: String,
    /// The interface.
    pub interface: String,
    /// Client domain id and replica.
    pub client: (u16, u16),
    /// Server domain id.
    pub server: u16,
    /// Whether the binding is live.
    pub live: bool,
    /// The A-stack windows: client offset, server offsets per replica, length.
    pub windows: Vec<(usize, Vec<usize>, usize)>,
    /// The out-of-band windows, in the same form.
    pub oob_windows: Vec<(usize, Vec<usize>, usize)>,
    /// The combination signature: per procedure the copy/borrow and buffer decisions, the
    /// trust settings and the transport.
    pub combination: Combination,
}

impl Binding {
    #[allow(clippy::too_many_arguments, reason = "a binding has this many parts")]
    pub(crate) fn new(
        handle: u64,
        combination: Combination,
        export: Arc<ExportEntry>,
        client: &Arc<DomainShared>,
        client_key: ReplicaKey,
        deadline: Duration,
        tick: Duration,
    ) -> Binding {
        let ticks = deadline.as_nanos().div_ceil(tick.as_nanos().max(1)) + 1;
        let borrow = combination
            .procs
            .iter()
            .map(|p| p.borrow_mask() as i32)
            .collect();
        Binding {
            handle,
            combination,
            borrow,
            server: export.server.clone(),
            export,
            client: Arc::downgrade(client),
            client_key,
            state: AtomicU8::new(LIVE),
            deadline,
            deadline_ticks: u64::try_from(ticks).unwrap_or(u64::MAX),
            mappings: Mutex::new(Mappings::default()),
            direct: Mutex::new(None),
            account: client.core.account.clone(),
            charged: Mutex::new(Charge::default()),
        }
    }

    /// Charges `c` to the client domain's quotas on this binding's behalf (returned when the
    /// binding is revoked), or refuses with the quota it would exceed.
    pub(crate) fn charge(&self, c: Charge) -> Result<(), Error> {
        let mut charged = lock(&self.charged);
        if !self.is_live() {
            return Err(Error::Terminated(self.server.core.name.clone()));
        }
        self.account.charge(&c)?;
        charged.add(&c);
        Ok(())
    }

    /// Gives back part of what this binding charged.
    pub(crate) fn refund(&self, c: Charge) {
        let mut charged = lock(&self.charged);
        let give = c.at_most(&charged);
        charged.sub(&give);
        self.account.refund(&give);
    }

    /// Runs `f` (a host-side copy into or out of this binding's windows) only while the
    /// binding is live, and keeps it live until `f` returns: revocation unmaps and frees the
    /// windows under the same lock, so a window can not change hands during the copy.
    pub(crate) fn while_live<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let _m = lock(&self.mappings);
        self.is_live().then(f)
    }

    pub(crate) fn is_live(&self) -> bool {
        self.state.load(Ordering::Acquire) == LIVE
    }

    /// The status a call on this binding gets when it is no longer live.
    pub(crate) fn dead_status(&self) -> lrpc_abi::Status {
        match self.state.load(Ordering::Acquire) {
            UNBOUND => lrpc_abi::Status::StaleBinding,
            SERVER_TERMINATED => lrpc_abi::Status::ServerTerminated,
            CLIENT_TERMINATED => lrpc_abi::Status::StaleBinding,
            _ => lrpc_abi::Status::Ok,
        }
    }

    pub(crate) fn info(&self) -> BindingInfo {
        let m = lock(&self.mappings);
        let view = |x: &Mapped| (x.at.client, x.at.server.to_vec(), x.at.len);
        BindingInfo {
            handle: self.handle,
            name: self.export.name.clone(),
            interface: self.export.plan.name.clone(),
            client: (self.client_key.domain, self.client_key.replica),
            server: self.server.core.id,
            live: self.is_live(),
            windows: m.astacks.iter().map(view).collect(),
            oob_windows: m.oob.values().map(view).collect(),
            combination: self.combination.clone(),
        }
    }

    /// Creates a segment of `len` bytes and maps it into the client replica and every server
    /// replica. `own` is the store of the replica making the request (client or server),
    /// which can not be locked again; other replicas are locked or re-entered.
    pub(crate) fn place(
        &self,
        len: usize,
        own: (ReplicaKey, StoreContextMut<'_, DomainData>),
    ) -> Result<(Segment, Placement), Error> {
        self.place_with(len, own, true)
    }

    /// Like [`place`](Self::place) for an out-of-band segment: server replicas that are busy
    /// are skipped (left [`UNMAPPED`]) instead of waited for — a thread that waits for one
    /// replica while holding another could deadlock with a thread doing the reverse. The
    /// call path maps a skipped segment into the replica that serves the call
    /// ([`map_into`](Self::map_into)).
    pub(crate) fn place_lazily(
        &self,
        len: usize,
        own: (ReplicaKey, StoreContextMut<'_, DomainData>),
    ) -> Result<(Segment, Placement), Error> {
        self.place_with(len, own, false)
    }

    fn place_with(
        &self,
        len: usize,
        own: (ReplicaKey, StoreContextMut<'_, DomainData>),
        wait: bool,
    ) -> Result<(Segment, Placement), Error> {
        let client = self.client.upgrade().ok_or(Error::KernelGone)?;
        // The memory file is open until the segment is mapped everywhere (see `Mapped`).
        self.charge(Charge {
            memfds: 1,
            ..Charge::default()
        })?;
        let segment = match Segment::new(len) {
            Ok(s) => s,
            Err(e) => {
                self.refund(Charge {
                    memfds: 1,
                    ..Charge::default()
                });
                return Err(Error::Memfd(e));
            }
        };
        let len = segment.len();
        let (own_key, mut own_ctx) = own;
        let mut done: Vec<(ReplicaKey, usize)> = Vec::new();
        let mut place_in = |domain: &DomainShared, replica: u16| -> Result<usize, Error> {
            let r = &domain.replicas[usize::from(replica)];
            let off = if r.key == own_key {
                r.alloc_window(own_ctx.as_context_mut(), len)?
            } else if wait {
                r.with_store(self.deadline, |ctx| r.alloc_window(ctx, len))
                    .map_err(|_| Error::Busy)??
            } else {
                match r.with_store(std::time::Duration::ZERO, |ctx| r.alloc_window(ctx, len)) {
                    Ok(off) => off?,
                    Err(_) => return Ok(UNMAPPED),
                }
            };
            let mapped = r.window_range().map(off, &segment);
            if let Err(source) = mapped {
                r.free_window(off, len);
                return Err(Error::Map {
                    domain: domain.core.name.clone(),
                    source,
                });
            }
            done.push((r.key, off));
            Ok(off)
        };
        let result = (|| {
            let c = place_in(&client, self.client_key.replica)?;
            let mut s = Vec::with_capacity(self.server.replicas.len());
            for i in 0..self.server.replicas.len() {
                s.push(place_in(&self.server, i as u16)?);
            }
            Ok(Placement {
                client: c,
                server: s.into_boxed_slice(),
                len,
            })
        })();
        match result {
            Ok(at) => Ok((segment, at)),
            Err(e) => {
                for (key, off) in done.into_iter().filter(|&(_, off)| off != UNMAPPED) {
                    let d = if key.domain == client.core.id {
                        &client
                    } else {
                        &self.server
                    };
                    unmap_free(d, key.replica, off, len);
                }
                self.refund(Charge {
                    memfds: 1,
                    ..Charge::default()
                });
                Err(e)
            }
        }
    }

    /// Records where the A-stacks are mapped into a direct-linked server copy, to unmap them
    /// on revocation.
    pub(crate) fn adopt_direct(&self, range: MemoryRange, offset: usize, len: usize) {
        *lock(&self.direct) = Some((range, offset, len));
    }

    /// Records an A-stack segment as owned by this binding (or unmaps it at once if the
    /// binding was revoked meanwhile).
    pub(crate) fn adopt_astacks(&self, segment: Segment, at: Placement) -> Result<(), Error> {
        let mut m = lock(&self.mappings);
        if !self.is_live() {
            drop(m);
            self.unmap(&at);
            self.refund(Charge {
                memfds: 1,
                ..Charge::default()
            });
            return Err(Error::Terminated(self.server.core.name.clone()));
        }
        let (mapped, closed) = Mapped::new(segment, at);
        m.astacks.push(mapped);
        drop(m);
        self.refund(closed);
        Ok(())
    }

    /// Maps an out-of-band segment into server replica `replica` if it is not mapped there
    /// yet, through that replica's store (held by the caller). Returns the server address.
    pub(crate) fn map_into(
        &self,
        key: OobKey,
        replica: usize,
        ctx: StoreContextMut<'_, DomainData>,
    ) -> Result<usize, Error> {
        let mut m = lock(&self.mappings);
        if !self.is_live() {
            return Err(Error::Terminated(self.server.core.name.clone()));
        }
        let x = m.oob.get_mut(&key).ok_or(Error::NoSegment)?;
        let at = *x.at.server.get(replica).ok_or(Error::NoSegment)?;
        if at != UNMAPPED {
            return Ok(at);
        }
        let segment = x.segment.as_ref().ok_or(Error::NoSegment)?;
        let r = &self.server.replicas[replica];
        let len = segment.len();
        let off = r.alloc_window(ctx, len)?;
        if let Err(source) = r.window_range().map(off, segment) {
            r.free_window(off, len);
            return Err(Error::Map {
                domain: self.server.core.name.clone(),
                source,
            });
        }
        x.at.server[replica] = off;
        let closed = x.close_if_mapped();
        drop(m);
        self.refund(closed);
        Ok(off)
    }

    /// Maps an out-of-band segment into the client replica if it is not mapped there yet,
    /// through the client's store (held by the caller). Returns the client address.
    pub(crate) fn map_into_client(
        &self,
        key: OobKey,
        ctx: StoreContextMut<'_, DomainData>,
    ) -> Result<usize, Error> {
        let client = self.client.upgrade().ok_or(Error::KernelGone)?;
        let mut m = lock(&self.mappings);
        if !self.is_live() {
            return Err(Error::Terminated(self.server.core.name.clone()));
        }
        let x = m.oob.get_mut(&key).ok_or(Error::NoSegment)?;
        if x.at.client != UNMAPPED {
            return Ok(x.at.client);
        }
        let segment = x.segment.as_ref().ok_or(Error::NoSegment)?;
        let r = &client.replicas[usize::from(self.client_key.replica)];
        let len = segment.len();
        let off = r.alloc_window(ctx, len)?;
        if let Err(source) = r.window_range().map(off, segment) {
            r.free_window(off, len);
            return Err(Error::Map {
                domain: client.core.name.clone(),
                source,
            });
        }
        x.at.client = off;
        let closed = x.close_if_mapped();
        drop(m);
        self.refund(closed);
        Ok(off)
    }

    /// Capacity and placement of an out-of-band segment, if it exists.
    pub(crate) fn oob(&self, key: OobKey) -> Option<(usize, Placement)> {
        self.with_oob(key, |at| (at.len, at.clone()))
    }

    /// Runs `f` on the placement of an out-of-band segment, if it exists (without copying
    /// it: the call path asks on every call that uses a segment).
    pub(crate) fn with_oob<R>(&self, key: OobKey, f: impl FnOnce(&Placement) -> R) -> Option<R> {
        let m = lock(&self.mappings);
        m.oob.get(&key).map(|x| f(&x.at))
    }

    /// Installs a (larger) out-of-band segment, unmapping the one it replaces and giving
    /// back what that one was charged (`charge`: what the new one was charged).
    pub(crate) fn replace_oob(
        &self,
        key: OobKey,
        segment: Segment,
        at: Placement,
        charge: Charge,
    ) -> Result<(), Error> {
        let mut m = lock(&self.mappings);
        if !self.is_live() {
            drop(m);
            self.unmap(&at);
            self.refund(charge);
            self.refund(Charge {
                memfds: 1,
                ..Charge::default()
            });
            return Err(Error::Terminated(self.server.core.name.clone()));
        }
        let (mapped, closed) = Mapped::new(segment, at);
        let old = m.oob.insert(key, mapped);
        drop(m);
        self.refund(closed);
        if let Some(old) = old {
            self.unmap(&old.at);
            self.refund(oob_charge(&old.at, old.segment.is_some()));
        }
        Ok(())
    }

    /// Revokes the binding once: marks it dead, takes its pages out of both domains and
    /// removes it from the domains' books. `dropping` is a domain being dropped (its strong
    /// count is already zero, but its stores are still alive).
    pub(crate) fn revoke_with(&self, reason: RevokeReason, dropping: Option<&DomainShared>) {
        let state = match reason {
            RevokeReason::Unbound => UNBOUND,
            RevokeReason::ServerTerminated => SERVER_TERMINATED,
            RevokeReason::ClientTerminated => CLIENT_TERMINATED,
        };
        if self
            .state
            .compare_exchange(LIVE, state, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let client = self.client.upgrade();
        let client_ref: Option<&DomainShared> = client.as_deref().or(dropping);
        {
            // Unmapped under the lock that host-side copies hold (`while_live`): no copy is
            // running in these windows, and none starts once the state is not live.
            let mut m = lock(&self.mappings);
            let mut all: Vec<Mapped> = std::mem::take(&mut m.astacks);
            all.extend(std::mem::take(&mut m.oob).into_values());
            for x in &all {
                if let Some(c) = client_ref
                    && x.at.client != UNMAPPED
                {
                    // The server side goes now; the client's may have to wait until the
                    // client is not reading a reply off it.
                    c.replicas[usize::from(self.client_key.replica)]
                        .unmap_or_defer(x.at.client, x.at.len);
                }
                for (i, &off) in x.at.server.iter().enumerate() {
                    if off != UNMAPPED {
                        unmap_free(&self.server, i as u16, off, x.at.len);
                    }
                }
            }
        }
        // Everything this binding charged to its client goes back.
        let charged = std::mem::take(&mut *lock(&self.charged));
        self.account.refund(&charged);
        // The direct copy lives in the client's store: unmap only while the client lives.
        if let (Some(_), Some((range, off, len))) = (client_ref, lock(&self.direct).take()) {
            let _ = range.unmap(off, len);
        }
        if let Some(c) = client_ref {
            let mut book = lock(&c.core.book);
            book.client.retain(|b| b.handle != self.handle);
            book.handles.remove(&self.handle);
        }
        let mut book = lock(&self.server.core.book);
        book.server
            .retain(|w| w.upgrade().is_some_and(|b| b.is_live()));
    }

    fn unmap(&self, at: &Placement) {
        if let Some(c) = self.client.upgrade()
            && at.client != UNMAPPED
        {
            unmap_free(&c, self.client_key.replica, at.client, at.len);
        }
        for (i, &off) in at.server.iter().enumerate() {
            if off != UNMAPPED {
                unmap_free(&self.server, i as u16, off, at.len);
            }
        }
    }
}

/// Takes a window out of a replica's memory and returns its pages to the replica's window
/// allocator (see [`Replica::unmap_free`](crate::domain::Replica::unmap_free)).
fn unmap_free(domain: &DomainShared, replica: u16, off: usize, len: usize) {
    domain.replicas[usize::from(replica)].unmap_free(off, len);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(base: u32, size: u32, count: u32) -> Extent {
        Extent {
            client_base: base,
            server_bases: Box::new([0]),
            size,
            recip: reciprocal(size),
            count,
            first: 0,
            busy: crate::binding::idle(count),
            oob_in: Vec::new(),
        }
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
