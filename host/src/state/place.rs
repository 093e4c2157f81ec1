//! Placement: creating a binding's segments and mapping each into the client replica and
//! every server replica (pairwise allocation, LRPC 3.2), the out-of-band segments beside the
//! A-stacks, and revocation: marking a binding dead and taking them all out again. What a
//! binding owns and where each segment is mapped are records below (`window`).

use super::binding::{
    CLIENT_TERMINATED, LIVE, RevokeReason, SERVER_TERMINATED, UNBOUND, graph_changed,
};
use super::records::{Binding, DomainData, DomainShared, ReplicaKey};
use super::window::{Mapped, oob_charge};
use crate::astack::extent::Placement;
use crate::astack::map::Segment;
use crate::error::Error;
use crate::quota::Charge;
use crate::sync::lock;
use std::sync::atomic::Ordering;
use wasmtime::{AsContextMut, StoreContextMut};

pub(crate) use super::window::{DirectWindow, OobKey, UNMAPPED};

impl Binding {
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
    pub(crate) fn adopt_direct(&self, window: DirectWindow) {
        *lock(&self.direct) = Some(window);
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
        graph_changed();
        let client = self.client.upgrade();
        let client_ref: Option<&DomainShared> = client.as_deref().or(dropping);
        self.unmap_all(client_ref);
        // Everything this binding charged to its client goes back.
        let charged = std::mem::take(&mut *lock(&self.charged));
        self.account.refund(&charged);
        self.unmap_direct(client_ref);
        if let Some(c) = client_ref {
            let mut ties = lock(&c.core.ties);
            ties.client.retain(|b| b.handle != self.handle);
            ties.handles.remove(&self.handle);
        }
        let mut ties = lock(&self.server.core.ties);
        ties.server
            .retain(|w| w.upgrade().is_some_and(|b| b.is_live()));
    }

    /// Takes every segment of this binding out of both domains (revocation). `client` is the
    /// client domain while its stores are alive.
    pub(crate) fn unmap_all(&self, client: Option<&DomainShared>) {
        // Unmapped under the lock that host-side copies hold (`while_live`): no copy is
        // running in these windows, and none starts once the state is not live.
        let mut m = lock(&self.mappings);
        let mut all: Vec<Mapped> = std::mem::take(&mut m.astacks);
        all.extend(std::mem::take(&mut m.oob).into_values());
        for x in &all {
            if let Some(c) = client
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

    /// Takes the A-stacks out of a direct-linked server copy. The copy lives in the client's
    /// store: unmapped only while the client (`client`) lives.
    pub(crate) fn unmap_direct(&self, client: Option<&DomainShared>) {
        if let (Some(_), Some(w)) = (client, lock(&self.direct).take())
            && w.range.unmap(w.offset, w.len).is_ok()
        {
            lock(&w.windows).give_back(w.offset, w.len);
        }
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
/// allocator (see `Replica::unmap_free`).
fn unmap_free(domain: &DomainShared, replica: u16, off: usize, len: usize) {
    domain.replicas[usize::from(replica)].unmap_free(off, len);
}
