//! Quotas: what one domain may hold of the host's resources.
//!
//! A hostile or buggy guest can ask the kernel for bindings, A-stacks and out-of-band
//! segments without end, and each of those costs the host memory, mappings (the process has
//! a bounded number of them) and, while a segment is being set up, a file descriptor. Every
//! such request is charged to the **client domain** that made it (the binding's owner: it
//! asked for the binding, so it pays for all of the binding's windows, in its own memory and
//! in the server's), and refused with a typed status naming the quota once the domain's
//! limit is reached. Other domains keep their own budgets and are not affected.
//!
//! Charges are taken before anything is allocated and returned when the binding is revoked
//! (unbind, termination of either side, the client's drop), so a refused or revoked binding
//! leaves nothing charged. Bookkeeping happens at bind time and on growth, never on the call
//! path.

use crate::error::{Error, Quota};
use std::sync::Mutex;

/// Limits per domain. [`KernelConfig::quotas`](crate::KernelConfig::quotas) holds the
/// kernel-wide defaults; [`DomainOptions::quotas`](crate::DomainOptions::quotas) overrides
/// them for one domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quotas {
    /// Live bindings the domain may hold as client.
    pub bindings: u32,
    /// A-stack extents over all its bindings (one per procedure at bind time, one per
    /// growth through `astacks_more`).
    pub astack_extents: u32,
    /// Bytes of A-stack segments over all its bindings.
    pub astack_bytes: u64,
    /// Bytes of out-of-band segments over all its bindings (both directions).
    pub oob_bytes: u64,
    /// Windows mapped into linear memories for its bindings (its own and its servers').
    pub mappings: u32,
    /// Memory files held open for its bindings at one time. A mapped window needs no open
    /// file: one is held only while a segment is being placed, or while an out-of-band
    /// segment waits to be mapped into a busy server replica.
    pub memfds: u32,
    /// Instances (replicas) of the domain.
    pub replicas: u32,
    /// Bytes one linear memory of the domain may grow to: the guest's own heap plus the
    /// windows the host maps into it.
    pub memory: u64,
    /// Instances in one of the domain's stores: its own, plus the copies of servers it
    /// binds to on the direct-linked path.
    pub instances: u32,
}

setters!(Quotas {
    with_bindings => bindings: u32,
    with_astack_extents => astack_extents: u32,
    with_astack_bytes => astack_bytes: u64,
    with_oob_bytes => oob_bytes: u64,
    with_mappings => mappings: u32,
    with_memfds => memfds: u32,
    with_replicas => replicas: u32,
    with_memory => memory: u64,
    with_instances => instances: u32,
});

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            bindings: 256,
            astack_extents: 2048,
            astack_bytes: 64 << 20,
            oob_bytes: 512 << 20,
            mappings: 4096,
            memfds: 64,
            replicas: 64,
            memory: 4 << 30,
            instances: 16,
        }
    }
}

/// Amounts of each charged resource.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Charge {
    pub bindings: u64,
    pub extents: u64,
    pub astack_bytes: u64,
    pub oob_bytes: u64,
    pub mappings: u64,
    pub memfds: u64,
}

impl Charge {
    /// The parts of a charge with their quota, for checking and messages.
    fn parts(&self) -> [(Quota, u64); 6] {
        [
            (Quota::Bindings, self.bindings),
            (Quota::AStackExtents, self.extents),
            (Quota::AStackBytes, self.astack_bytes),
            (Quota::OutOfBandBytes, self.oob_bytes),
            (Quota::Mappings, self.mappings),
            (Quota::Memfds, self.memfds),
        ]
    }

    pub(crate) fn add(&mut self, o: &Charge) {
        self.bindings += o.bindings;
        self.extents += o.extents;
        self.astack_bytes += o.astack_bytes;
        self.oob_bytes += o.oob_bytes;
        self.mappings += o.mappings;
        self.memfds += o.memfds;
    }

    /// Each part at most what `o` has.
    pub(crate) fn at_most(&self, o: &Charge) -> Charge {
        Charge {
            bindings: self.bindings.min(o.bindings),
            extents: self.extents.min(o.extents),
            astack_bytes: self.astack_bytes.min(o.astack_bytes),
            oob_bytes: self.oob_bytes.min(o.oob_bytes),
            mappings: self.mappings.min(o.mappings),
            memfds: self.memfds.min(o.memfds),
        }
    }

    /// Subtracts `o`, never below zero.
    pub(crate) fn sub(&mut self, o: &Charge) {
        self.bindings = self.bindings.saturating_sub(o.bindings);
        self.extents = self.extents.saturating_sub(o.extents);
        self.astack_bytes = self.astack_bytes.saturating_sub(o.astack_bytes);
        self.oob_bytes = self.oob_bytes.saturating_sub(o.oob_bytes);
        self.mappings = self.mappings.saturating_sub(o.mappings);
        self.memfds = self.memfds.saturating_sub(o.memfds);
    }
}

/// One domain's limits and what it uses now.
#[derive(Debug)]
pub(crate) struct Account {
    pub domain: String,
    pub limits: Quotas,
    used: Mutex<Charge>,
}

impl Account {
    pub(crate) fn new(domain: &str, limits: Quotas) -> Account {
        Account {
            domain: domain.to_string(),
            limits,
            used: Mutex::new(Charge::default()),
        }
    }

    fn limit(&self, q: Quota) -> u64 {
        let l = &self.limits;
        match q {
            Quota::Bindings => l.bindings.into(),
            Quota::AStackExtents => l.astack_extents.into(),
            Quota::AStackBytes => l.astack_bytes,
            Quota::OutOfBandBytes => l.oob_bytes,
            Quota::Mappings => l.mappings.into(),
            Quota::Memfds => l.memfds.into(),
            Quota::Replicas => l.replicas.into(),
            Quota::Memory => l.memory,
        }
    }

    /// Charges `c` in full, or nothing and the first quota it would exceed.
    pub(crate) fn charge(&self, c: &Charge) -> Result<(), Error> {
        let mut used = crate::sync::lock(&self.used);
        for ((q, want), (_, have)) in c.parts().into_iter().zip(used.parts()) {
            let limit = self.limit(q);
            if want > 0 && have.saturating_add(want) > limit {
                return Err(Error::QuotaExceeded {
                    domain: self.domain.clone(),
                    quota: q,
                    limit,
                    in_use: have,
                    requested: want,
                });
            }
        }
        used.add(c);
        Ok(())
    }

    /// Returns a charge.
    pub(crate) fn refund(&self, c: &Charge) {
        crate::sync::lock(&self.used).sub(c);
    }

    /// What the domain uses now.
    pub(crate) fn used(&self) -> Charge {
        *crate::sync::lock(&self.used)
    }

    /// Checks a whole-domain quota that is not a running count (replicas, memory size).
    pub(crate) fn check(&self, q: Quota, requested: u64) -> Result<(), Error> {
        let limit = self.limit(q);
        if requested > limit {
            return Err(Error::QuotaExceeded {
                domain: self.domain.clone(),
                quota: q,
                limit,
                in_use: 0,
                requested,
            });
        }
        Ok(())
    }
}

/// What a domain holds now, as [`Domain::usage`](crate::Domain::usage) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Live bindings held as client.
    pub bindings: u64,
    /// A-stack extents over those bindings.
    pub astack_extents: u64,
    /// Bytes of A-stack segments.
    pub astack_bytes: u64,
    /// Bytes of out-of-band segments.
    pub oob_bytes: u64,
    /// Windows mapped for those bindings.
    pub mappings: u64,
    /// Memory files held open for them.
    pub memfds: u64,
}

impl From<Charge> for Usage {
    fn from(c: Charge) -> Usage {
        Usage {
            bindings: c.bindings,
            astack_extents: c.extents,
            astack_bytes: c.astack_bytes,
            oob_bytes: c.oob_bytes,
            mappings: c.mappings,
            memfds: c.memfds,
        }
    }
}

/// Store limits that also count the linear memory a Store's instances hold. A component has
/// no `Memory` handle an embedder could ask for its size, and a core domain's replicas are
/// locked while they run, but every linear memory is created and grown through the Store's
/// resource limiter, which sees each size change.
mod metered {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use wasmtime::{ResourceLimiter, StoreLimits};

    /// [`StoreLimits`] that keep the total bytes of linear memory allowed so far (memories only
    /// grow) in a counter the embedder reads without entering the Store.
    #[derive(Debug)]
    pub struct MeteredLimits {
        limits: StoreLimits,
        bytes: Arc<AtomicUsize>,
    }

    impl MeteredLimits {
        /// `limits`, counting into `bytes` (added to: a fresh Store's count starts where
        /// `bytes` stands, so reset it when the Store it counted is dropped).
        pub fn new(limits: StoreLimits, bytes: Arc<AtomicUsize>) -> MeteredLimits {
            MeteredLimits { limits, bytes }
        }
    }

    impl ResourceLimiter for MeteredLimits {
        fn memory_growing(
            &mut self,
            current: usize,
            desired: usize,
            maximum: Option<usize>,
        ) -> wasmtime::Result<bool> {
            let allowed = self.limits.memory_growing(current, desired, maximum)?;
            if allowed {
                self.bytes
                    .fetch_add(desired.saturating_sub(current), Ordering::Relaxed);
            }
            Ok(allowed)
        }

        fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
            self.limits.memory_grow_failed(error)
        }

        fn table_growing(
            &mut self,
            current: usize,
            desired: usize,
            maximum: Option<usize>,
        ) -> wasmtime::Result<bool> {
            self.limits.table_growing(current, desired, maximum)
        }

        fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
            self.limits.table_grow_failed(error)
        }

        fn instances(&self) -> usize {
            self.limits.instances()
        }

        fn tables(&self) -> usize {
            self.limits.tables()
        }

        fn memories(&self) -> usize {
            self.limits.memories()
        }
    }
}
pub use metered::MeteredLimits;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_is_taken_whole_or_not_at_all_and_refunds_return_it() {
        let a = Account::new(
            "d",
            Quotas {
                bindings: 2,
                mappings: 5,
                ..Quotas::default()
            },
        );
        let one = Charge {
            bindings: 1,
            mappings: 2,
            ..Charge::default()
        };
        a.charge(&one).unwrap();
        a.charge(&one).unwrap();
        // A third binding exceeds `bindings`, and nothing of it is charged.
        let e = a.charge(&one).unwrap_err();
        assert!(
            matches!(
                e,
                Error::QuotaExceeded {
                    quota: Quota::Bindings,
                    limit: 2,
                    in_use: 2,
                    requested: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(a.used().mappings, 4);
        // Mappings alone: 4 + 2 > 5.
        let e = a
            .charge(&Charge {
                mappings: 2,
                ..Charge::default()
            })
            .unwrap_err();
        assert!(matches!(
            e,
            Error::QuotaExceeded {
                quota: Quota::Mappings,
                ..
            }
        ));
        a.refund(&one);
        a.refund(&one);
        assert_eq!(a.used(), Charge::default());
        // Refunds never go below zero.
        a.refund(&one);
        assert_eq!(a.used(), Charge::default());
    }

    #[test]
    fn every_quota_maps_to_a_quota_status() {
        for q in [
            Quota::Bindings,
            Quota::AStackExtents,
            Quota::AStackBytes,
            Quota::OutOfBandBytes,
            Quota::Mappings,
            Quota::Memfds,
            Quota::Replicas,
            Quota::Memory,
        ] {
            assert!(q.status().is_quota(), "{q}");
        }
    }
}
