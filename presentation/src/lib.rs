//! The lrpc stub compiler, in three stages like Flick and wit-bindgen:
//!
//! 1. **front end** ([`front`]): WIT files parsed by `wit-parser` into a [`Wit`];
//! 2. **middle stage** ([`plan`]): an interface and a presentation become an
//!    [`InterfacePlan`] — per procedure its entry stub, whether its encodings are bounded, its
//!    A-stack size and count (the procedure descriptor list the kernel uses at bind time), and
//!    the interface fingerprint both sides check;
//! 3. **back end** ([`rust`]): Rust client and server stubs for guests, written against
//!    `lrpc-sdk`; and ([`host`]) the static Rust shapes of interfaces the kernel's typed
//!    path carries calls between core and component domains with.
//!
//! Beside them, [`layout`] is the one walker of the A-stack encoding of a type: the stub
//! back end, the kernel's component codec, the remote wire translation and the runtime's
//! value text all visit values through it.
//!
//! The kernel links the first two stages to build procedure descriptor lists and keeps what
//! [`host`] makes of the WIT it embeds; guests' build scripts run all three through
//! [`build::guest`].

#![warn(missing_docs)]

pub mod annot;
pub mod build;
pub mod front;
pub mod host;
pub mod layout;
pub mod plan;
pub mod rust;

pub use annot::{
    Combination, FunctionAnnotations, InMode, OutMode, ProcCombination, Side, SidePresentation,
    Transport, Trust, Types, combine,
};
pub use front::Wit;
pub use layout::{Layout, Node};
pub use plan::{CoreType, Def, DefKind, InterfacePlan, Prim, ProcPlan, RegisterEntry, Ty};
pub use rust::{generate_rust, generate_rust_with};

/// Errors of the stub compiler. Messages name the file or interface and the reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A WIT file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// WIT text did not parse or resolve.
    #[error("{path}: {message}")]
    Parse {
        /// The file (or source name).
        path: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A presentation file is malformed or contradicts the WIT.
    #[error("{file}:{line}: {reason}")]
    Presentation {
        /// The presentation file.
        file: String,
        /// 1-based line (0 when the problem is the file as a whole).
        line: usize,
        /// Why.
        reason: String,
    },
    /// No interface of that name is loaded.
    #[error("unknown interface `{0}` (known: {1})")]
    UnknownInterface(String, String),
    /// The interface uses something the kernel can not carry.
    #[error("interface `{interface}`, {place}: {reason}")]
    Unsupported {
        /// Interface name.
        interface: String,
        /// Function and parameter (or type) concerned.
        place: String,
        /// Why.
        reason: String,
    },
}
