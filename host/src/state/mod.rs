//! The kernel's records: domains and their replicas, bindings and where their A-stacks are
//! placed, the clerk's registry of exports, the linkage stack, and the kernel's own record.
//!
//! They refer to each other (a replica's store holds its client bindings, a binding holds
//! its server domain, a domain's ties list its bindings), so they form one module. They
//! import only the helpers below them (`error`, `quota`, `sync`, `astack`'s lower half,
//! `ext`, `slot`, `transport`); the behaviour above them (call paths, termination, channels,
//! component domains, the kernel imports) and the facade (`kernel`) use them. A feature
//! that keeps state on a record does so in its own type, through the record's
//! [`Extensions`](crate::ext::Extensions), or through a trait the record defines
//! ([`clerk::Relay`], [`domain::Close`]).

pub(crate) mod binding;
pub(crate) mod clerk;
pub(crate) mod domain;
pub(crate) mod kernel;
pub(crate) mod linkage;
pub(crate) mod place;
pub(crate) mod reset;
pub(crate) mod window;
