//! An LRPC kernel for WebAssembly.
//!
//! Each guest instance is a protection domain with its own linear memory. A server domain
//! exports a WIT interface through the [`Kernel`]'s clerk; a client guest binds to it by
//! name and gets a Binding Object it can not forge, plus A-stacks: pages of one memfd mapped
//! into *both* memories and into no other. A call writes its arguments on an A-stack and
//! traps into the kernel, which validates the handle, procedure and A-stack and runs the
//! server's entry stub on the calling thread (thread migration); results come back on the
//! same A-stack. See `docs/src/architecture.md` for the path of a call.
//!
//! # The API
//!
//! The root holds what most embedders name: the [`Kernel`] and its [`KernelConfig`] (with
//! its [`InstancePool`]), the [`Domain`]s it creates ([`DomainOptions`]), exports
//! ([`ExportOptions`], [`Serving`]), a domain's [`Quotas`], the [`Error`] of the API and the
//! [`Status`] of a call, and [`ComponentDomain`] (`tests/layers.rs` checks that this
//! paragraph names every type the root re-exports, and no other). The rest is in modules:
//! [`domain`] (calling exports, bindings, usage), [`component`] (component domains: options,
//! WASI grants, limits, the codec), [`channel`] (URPC's asynchronous calls), [`transport`]
//! (the contract a remote transport implements), [`error`] (faults and quotas in errors),
//! [`presentation`] (WIT plans and presentations) and [`pace`] (hooks for a scheduler's
//! ticks and waits).
//!
//! # Modules, in layers
//!
//! Each module imports only modules below it (`tests/layers.rs` checks it), bottom to top:
//! - helpers: `bulk` (bulk copies), `error`, `pace`, `sync` (the lock helpers), `quota`, `tick` (the one epoch
//!   ticker thread of a kernel), `transport`, `ext` (feature tables), `slot` (handle
//!   tables), `isolate` (rewriting an isolated domain's module so that its state can be
//!   reset), and `astack` (memory files and their mappings, window space, extents);
//! - the records, `state`: domains and replicas, bindings and their placement, the clerk's
//!   registry, the linkage stack, the kernel's own record, an isolated replica's fresh
//!   state (its files in layers too: the records at the bottom, those that refer to each
//!   other in one file, what is done with them above);
//! - behaviour: `terminate`, `mailbox` (a server on a thread of its own), `direct` (direct
//!   linking), [`channel`], [`component`], and `imports` (the kernel imports: binding, the
//!   call path, out-of-band segments, MultiRPC, the translations for component and remote
//!   servers);
//! - the facade, `kernel`: the [`Kernel`]'s methods for core domains and exports.
//!
//! # Where `unsafe` lives
//!
//! The crate denies `unsafe_code`; these places opt back in, each block argued in a
//! `// SAFETY:` comment (`tests/layers.rs` checks that this list names every file that does):
//! - `astack/map.rs`: mapping memory-file pages over ranges of linear memories, zero pages
//!   over them on revocation, and an isolated domain's copy-on-write snapshot, its view and
//!   its revert (copies into written pages, or `madvise`) (`MemoryRange::new` is the
//!   `unsafe fn` every caller argues);
//! - `astack/scan.rs`: the `PAGEMAP_SCAN` ioctl that lists the pages a guest wrote;
//! - `state/replica.rs` and `direct.rs`: one block each making a `MemoryRange` of a memory
//!   they own;
//! - `channel/ring.rs`: the atomics and volatile copies of a URPC ring in shared pages
//!   (`SegmentView::new`, `Send`/`Sync` for the view), and `channel/open.rs`: the one place
//!   a channel's window is made;
//! - `state/linkage.rs`: the per-thread linkage stack (records pinned on the calling
//!   thread's stack), the caller of a kernel import reached through it, and the bindings
//!   and busy flags a call pins (the one file that reads through their pointers);
//! - `component/lent.rs`: lowering a core client's byte list into a component straight from
//!   the client's memory, and lifting a byte list result straight into it (raw views,
//!   `Send`/`Sync` for them, and wasmtime's `Lower` and `Lift`);
//! - `bulk.rs`: bulk copies through raw pointers, cut into pieces where the host
//!   `memmove`'s slow placement would otherwise take them.
#![deny(unsafe_code)]
#![warn(missing_docs)]

/// Builder methods for an option struct whose fields are public but which is
/// `#[non_exhaustive]` (so that it can grow): `setters!(Type { with_a => a: A, ... })` gives
/// `Type::with_a(self, a: A) -> Self` for each field.
macro_rules! setters {
    ($ty:ty { $($with:ident => $field:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets `", stringify!($field), "`.")]
                #[must_use]
                pub fn $with(mut self, $field: $t) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

mod astack;
mod bulk;
pub mod channel;
pub mod component;
mod direct;
pub mod error;
mod ext;
mod imports;
mod isolate;
mod kernel;
mod mailbox;
pub mod pace;
mod quota;
mod slot;
mod state;
mod sync;
mod terminate;
mod tick;
pub mod transport;

pub use component::ComponentDomain;
pub use error::Error;
pub use kernel::DomainOptions;
pub use lrpc_abi::Status;
pub use quota::Quotas;
pub use state::clerk::{ExportOptions, Serving};
pub use state::domain::Domain;
pub use state::kernel::{InstancePool, Kernel, KernelConfig};

/// Domains: calling their exports, their bindings, what they hold.
pub mod domain {
    pub use crate::kernel::{EMBEDDED_WIT, Isolation};
    pub use crate::quota::Usage;
    pub use crate::state::binding::BindingInfo;
    pub use crate::state::domain::DomainFunc;
}

/// WIT plans and presentations: how each side lays out and treats an interface's values.
pub mod presentation {
    pub use lrpc_presentation::{
        Combination, InterfacePlan, ProcCombination, ProcPlan, Side, SidePresentation, Transport,
        Trust, Ty, Wit,
    };
}
