//! What an embedder asks of a new component domain: its limits ([`ComponentLimits`]) and
//! its options ([`ComponentOptions`]: WASI grants, import bindings, full trust, isolation).

use crate::state::reset::Isolation;
use std::time::Duration;

use super::wasi::WasiGrants;

/// The limits of one component domain. `None`: no limit beyond the kernel's.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ComponentLimits {
    /// Bytes of each linear memory; growing past it fails (the guest's allocator sees an
    /// out-of-memory and, for Rust guests, traps: the call fails, the host does not).
    pub memory: Option<usize>,
    /// Fuel (roughly, wasm instructions) of each call into the domain; running out traps
    /// with `OutOfFuel`. Domains with fuel run on an engine that meters it.
    pub fuel: Option<u64>,
    /// Core instances in the domain's Store (a component is made of several).
    pub instances: Option<usize>,
    /// Tables in the domain's Store.
    pub tables: Option<usize>,
    /// How long one call into the domain may run; `None`: the kernel's default deadline.
    pub deadline: Option<Duration>,
}

setters!(ComponentLimits {
    with_memory => memory: Option<usize>,
    with_fuel => fuel: Option<u64>,
    with_instances => instances: Option<usize>,
    with_tables => tables: Option<usize>,
    with_deadline => deadline: Option<Duration>,
});

/// Options of a new component domain.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ComponentOptions {
    /// The WASI capabilities the domain is granted (none by default).
    pub wasi: WasiGrants,
    /// Its limits.
    pub limits: ComponentLimits,
    /// Imports bound to a named export rather than to the one registered under the
    /// interface's own name, as `(interface, export name)`.
    pub bind: Vec<(String, String)>,
    /// Imports whose servers this domain trusts fully (`leaky+unprotected`): each server is
    /// composed into this component when it is created (wasmtime's fused adapters, no host
    /// crossing). The copy of the server lives in this domain's Store with its own state, and
    /// a trap in it kills this domain too.
    pub trust_fully: Vec<String>,
    /// What the domain keeps from one request to the next: with [`Isolation::Request`], each
    /// request meets a fresh instance, and a fault replaces the instance instead of killing
    /// the domain (see [`Isolation`]).
    pub isolation: Isolation,
}

setters!(ComponentOptions {
    with_wasi => wasi: WasiGrants,
    with_limits => limits: ComponentLimits,
    with_bind => bind: Vec<(String, String)>,
    with_trust_fully => trust_fully: Vec<String>,
    with_isolation => isolation: Isolation,
});
