//! Component domains: WebAssembly components (wit-bindgen, componentize-py, …) as protection
//! domains beside the core-module domains, under the same clerk and failure rules.
//!
//! * **One Store per domain.** A trap anywhere in a component poisons its whole Store ("cannot
//!   enter component instance"), so every component domain has a Store of its own, behind its
//!   own lock, with its own limits: linear memory, instances and tables through
//!   [`wasmtime::StoreLimits`] (counting the memory held, [`MeteredLimits`]), optional fuel (per call), and the per-call deadline through epoch
//!   interruption, like core domains.
//! * **WASI as capabilities.** A domain gets WASI p2 only as [`WasiGrants`] say: preopened
//!   directories (read-only or read-write), environment variables, arguments, standard
//!   output and error (discarded, inherited or captured), socket addresses. Nothing granted,
//!   nothing reachable.
//! * **Exports through the clerk.** [`Kernel::export_component`] registers an exported
//!   interface under its WIT name, after checking every function against the WIT the kernel
//!   knows; a mismatch is refused with the function and the reason.
//! * **Imports bound at instantiation.** Each non-WASI import of a component is bound, when
//!   the domain is created, to the domain exporting that interface (the one registered under
//!   the interface's name, or the export named in [`ComponentOptions::bind`]); the import's
//!   types are checked against the export's. The server may be a component or a core
//!   (A-stack) domain, and core clients may bind to a component's export: see `mixed`. Each
//!   import is a Binding Object ([`ComponentBindingInfo`]): checked on every call, revoked
//!   when either side is terminated. A call runs on the calling thread: the import's host
//!   function locks the server's Store and calls its export (the thread migrates; nothing is
//!   queued).
//!
//! **Full trust.** Imports named in [`ComponentOptions::trust_fully`] are not bound through
//! the kernel: their server is composed into the client when it is created (`fuse`), the
//! component analog of the direct-linked path.
//!
//! **Failure.** A server that traps, passes its deadline or runs out of fuel is *dead*: its
//! Store is poisoned, so every later call to it fails at once, without entering it, until the
//! embedder [restarts](Kernel::restart_component) it; bindings to it survive and reach the
//! fresh instance. The client is never trapped by its server's failure (that would poison the
//! client's Store too). Instead the failed call returns, and what the client sees depends on
//! whether the WIT function has an error channel:
//!
//! * a function returning `result<T, E>` returns `err(e)`, where `e` is E's case named
//!   `call-failed` when E is a variant or enum that has one (its payload the failure's text if
//!   it is a string, else its zero value), the failure's text when E is `string`, and E's zero
//!   value otherwise;
//! * any other function returns the zero value of its result type (0, false, "", empty list,
//!   `none`, the first case of an enum or variant, no flags; for a resource, a handle with
//!   nothing behind it, which every later call fails as stale).
//!
//! Either way the kernel records the failure in the client domain
//! ([`ComponentDomain::take_failures`]), so the embedder, which supervises its plugins, learns
//! of it, and the client domain stays usable. Interfaces that must tell failure from a real
//! answer should have an error channel.
//!
//! A call back into a domain that is itself waiting in an outgoing call (A→B→A) is not
//! re-entered (its Store is held by the waiting call): it waits for the deadline and fails
//! as `ServerBusy`.
//!
//! **Resources.** Between two component domains, functions pass resource handles (`own<T>`,
//! `borrow<T>`; constructors, methods and static functions are functions like the others):
//! the client's import defines each resource of the interface as a host resource of the
//! binding, and the binding keeps a table from the client's handles to the server's (see
//! `handles`). Such functions take the dynamic path, their handles translated in both
//! directions; both sides' types are checked against the kernel's WIT (the resource types of
//! two components never compare equal). The client dropping a handle drops the server's;
//! handles into a restarted or terminated server are stale and calls with them fail (as
//! above, `StaleBinding`); the handles of a client that goes away are dropped in its
//! servers. A core (A-stack) domain can not carry handles: an interface with resources has
//! no plan, so it gets no core stand-in and a component's import of it can not bind to a core
//! export (`mixed`). Futures and streams can not cross component domains yet; an import
//! whose functions carry them is refused at bind time, naming the function.
//!
//! # Files
//!
//! * `options`: what an embedder asks of a new domain ([`ComponentOptions`],
//!   [`ComponentLimits`]); `wasi`: the WASI grants; `limits`: the Store limits that count
//!   the memory held.
//! * `record`: the domain record (`Shared`), its live instance and its Store's data;
//!   `domain`: the domain as the embedder holds it ([`ComponentDomain`], [`AnyDomain`]).
//! * `lifecycle`: creating a domain (with `fuse` composing fully trusted servers in),
//!   restarting and terminating it; `instantiate`: a fresh instance in a fresh Store.
//! * `enter`: how a call enters a domain's Store (deadline, fuel, faults, isolation).
//! * `export`: exporting an interface through the clerk, checked by `typecheck`.
//! * `bind`: binding a new instance's imports; `binding`: the Binding Object of one import;
//!   `handles`: resource handles across a binding; `typed`: the typed path of a call, with
//!   `values` (static values in the A-stack layout) and `generated` (the shapes of the
//!   embedded WIT's functions, written at build time by the stub compiler); `failure`: what
//!   a failed call answers and how it is recorded.
//! * `mixed`, `codec`, `lent`: mixed pairs of component and core domains, the A-stack
//!   encoding of component values, byte lists lent straight from a core client's memory.

mod bind;
mod binding;
pub mod codec;
mod domain;
mod enter;
mod export;
mod failure;
mod fuse;
mod generated;
mod handles;
mod instantiate;
pub(crate) mod lent;
mod lifecycle;
mod limits;
pub(crate) mod mixed;
mod options;
mod record;
mod typecheck;
mod typed;
mod values;
mod wasi;

pub use crate::state::kernel::EngineKind;
pub use binding::ComponentBindingInfo;
pub use domain::{AnyDomain, ComponentDomain};
pub use failure::CallFailure;
pub use limits::MeteredLimits;
pub use options::{ComponentLimits, ComponentOptions};
pub use wasi::{CapturedOutput, Preopen, Stdio, WasiGrants};

pub(crate) use export::ComponentExport;

/// Whether `wasm` is a component binary (as opposed to a core module): the preamble's
/// version field says so (`\0asm`, then layer 1).
pub fn is_component(wasm: &[u8]) -> bool {
    wasm.len() >= 8 && wasm[..4] == *b"\0asm" && wasm[6..8] == [1, 0]
}
