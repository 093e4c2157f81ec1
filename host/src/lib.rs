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
//! One module per LRPC concept: [`domain`](crate::Domain), `clerk`, `binding`, `astack`
//! (A-stacks: extents, placement and the memory mappings), `linkage`, `imports` (the kernel
//! imports: binding, the call path, out-of-band segments), `terminate`, and [`channel`]:
//! URPC's asynchronous calls over pairwise shared-memory rings, served by a server's own
//! processors (with a tokio-friendly future; the `tokio` feature adds timeouts).
//!
//! # Where `unsafe` lives
//!
//! The crate denies `unsafe_code`; these places opt back in, each block argued in a
//! `// SAFETY:` comment:
//! - `astack::map`: mapping memory-file pages over ranges of linear memories, and zero pages
//!   over them on revocation (`MemoryRange::new` is the `unsafe fn` every caller argues);
//! - `domain` and `direct`: one block each making a `MemoryRange` of a memory they own;
//! - `channel::ring`: the atomics and volatile copies of a URPC ring in shared pages
//!   (`Window::new`, `Send`/`Sync` for the window), and `channel` (`mod.rs`): the one place
//!   a channel's window is made;
//! - `linkage`: the per-thread linkage stack (records pinned on the calling thread's stack)
//!   and the caller of a kernel import reached through it.
//!
//! Helpers that many of them use live below them and import none of them: `error` (errors,
//! faults and the interrupt a deadline raises), `quota` (accounts and charges), `sync` (the
//! lock helpers), `tick` (the one epoch ticker thread of a kernel), `remote` (the contract a remote transport implements), and the lower half
//! of `astack` (`map`, `alloc`, `extent`). What still ties the concept modules into one
//! import cycle, and what undoing it takes, is in `docs/src/architecture.md` ("Module graph").
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod astack;
mod binding;
pub mod channel;
mod clerk;
mod component;
mod direct;
mod domain;
mod error;
mod imports;
mod kernel;
mod linkage;
mod mailbox;
pub mod pace;
mod quota;
mod remote;
mod sync;
mod terminate;
mod tick;

pub use binding::BindingInfo;
pub use clerk::{ExportOptions, Serving};
pub use component::codec;
pub use component::{
    AnyDomain, CallFailure, CapturedOutput, ComponentBindingInfo, ComponentDomain, ComponentLimits,
    ComponentOptions, MeteredLimits, Preopen, Stdio, WasiGrants, is_component,
};
pub use domain::{Domain, DomainData, DomainFunc};
pub use error::{BoxError, Error, Fault, Quota};
pub use kernel::{DomainOptions, EMBEDDED_WIT, Kernel, KernelConfig};
pub use lrpc_abi::Status;
pub use lrpc_presentation::{
    Combination, InterfacePlan, ProcCombination, ProcPlan, Side, SidePresentation, Transport,
    Trust, Ty, Wit,
};
pub use quota::{Quotas, Usage};
pub use remote::{RemoteDone, RemoteTarget};
