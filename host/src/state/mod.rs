//! The kernel's records: domains and their replicas, bindings and where their A-stacks are
//! placed, the clerk's registry of exports, the linkage stack, and the kernel's own record.
//!
//! They import only the helpers below them (`error`, `quota`, `sync`, `astack`'s lower half,
//! `ext`, `slot`, `transport`); the behaviour above them (call paths, termination, channels,
//! component domains, the kernel imports) and the facade (`kernel`) use them. A feature
//! that keeps state on a record does so in its own type, through the record's
//! [`Extensions`](crate::ext::Extensions), or through a trait the record defines
//! ([`clerk::Relay`], [`domain::Close`]).
//!
//! Its files are in layers too (`tests/layers.rs` checks it). Bottom to top, each importing
//! only files listed before it:
//!
//! - Records that refer to no other record: [`config`] (the kernel's settings, the engines
//!   it compiles for, its cache of compiled code), [`window`] (a replica's window space,
//!   the segments a binding owns and where each is mapped) and [`fresh`] (an isolated
//!   replica's fresh state, request numbers).
//! - [`records`]: the records that refer to each other — a replica's store data holds its
//!   client bindings and its kernel, a binding holds its export and both its domains, a
//!   domain's ties list its bindings, the kernel's table lists its domains — so their
//!   types are defined together (with two one-line accessors, and no other behaviour).
//! - What is done with them: [`linkage`] (the per-thread stack of calls in flight, and the
//!   pinned bindings and busy flags of those calls: the unsafe code, fenced in one file),
//!   [`clerk`] (the registry of exports, an export's options), [`replica`] (a replica's
//!   store, its memory and its windows), [`reset`] (saving and putting back an isolated
//!   replica's fresh state), [`binding`] (a binding's accounting, masks and state),
//!   [`place`] (placing a binding's segments, and revocation), [`kernel`] (the kernel's
//!   engines, code and domain table) and [`domain`] (creating a replica, the embedder's
//!   [`Domain`](domain::Domain)).
//!
//! The files above [`records`] re-export the records they act on (`domain::DomainData`,
//! `binding::Binding`, `clerk::ExportEntry`, `kernel::KernelInner`, `linkage::Pinned`, ...),
//! so the rest of the crate names each record after what it is.

pub(crate) mod binding;
pub(crate) mod clerk;
pub(crate) mod config;
pub(crate) mod domain;
pub(crate) mod fresh;
pub(crate) mod kernel;
pub(crate) mod linkage;
pub(crate) mod place;
pub(crate) mod records;
pub(crate) mod replica;
pub(crate) mod reset;
pub(crate) mod window;
