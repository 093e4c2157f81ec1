//! The lrpc stub compiler, in three stages like Flick and wit-bindgen:
//!
//! 1. **front end** ([`front`]): WIT files parsed by `wit-parser` into a [`Wit`];
//! 2. **middle stage** ([`plan`]): an interface and a presentation become an
//!    [`InterfacePlan`] — per procedure its entry stub, whether its encodings are bounded, its
//!    A-stack size and count (the procedure descriptor list the kernel uses at bind time), and
//!    the interface fingerprint both sides check;
//! 3. **back end** ([`rust`]): Rust client and server stubs for guests, written against
//!    `lrpc-sdk`.
//!
//! The kernel links the first two stages to build procedure descriptor lists; guests' build
//! scripts run all three through [`build::generate`].

pub mod annot;
pub mod front;
pub mod plan;
pub mod rust;

pub use annot::{
    Combination, FunctionAnnotations, InMode, OutMode, ProcCombination, Side, SidePresentation,
    Transport, Trust, combine,
};
pub use front::Wit;
pub use plan::{Def, DefKind, Fast, InterfacePlan, Prim, ProcPlan, Ty, Word};
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

/// Build-script support for guests.
pub mod build {
    use crate::{Error, SidePresentation, Wit, generate_rust};
    use std::path::Path;

    /// Like [`generate`], with presentation files: for each interface, the client's and the
    /// server's presentation (a path, or `None` for the default). A presentation that does
    /// not check against the WIT fails the build with its file, line and reason.
    pub fn generate_presented(
        wit_dir: &Path,
        interfaces: &[(&str, Option<&Path>, Option<&Path>)],
        out_file: &Path,
    ) -> Result<(), Error> {
        println!("cargo:rerun-if-changed={}", wit_dir.display());
        let wit = Wit::load_dir(wit_dir)?;
        let load = |path: Option<&Path>| -> Result<Option<SidePresentation>, Error> {
            let Some(path) = path else { return Ok(None) };
            println!("cargo:rerun-if-changed={}", path.display());
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
            SidePresentation::parse(&path.display().to_string(), &text, |n| wit.interface(n))
                .map(Some)
        };
        let mut code = String::new();
        for (name, client, server) in interfaces {
            let plan = wit.interface(name)?;
            let (c, s) = (load(*client)?, load(*server)?);
            code.push_str(&crate::generate_rust_with(&plan, c.as_ref(), s.as_ref()));
        }
        std::fs::write(out_file, code).map_err(|source| Error::Io {
            path: out_file.display().to_string(),
            source,
        })
    }

    /// Linker arguments every guest needs, printed for cargo when the build script builds
    /// for wasm32 (elsewhere it prints nothing): the module's function table is exported and
    /// growable, because on a direct-linked binding the kernel appends the server copy's
    /// entries to it and the client stub calls them through it. Call it from `build.rs`.
    pub fn wasm_link_args() {
        if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
            println!("cargo::rustc-link-arg=--export-table");
            println!("cargo::rustc-link-arg=--growable-table");
        }
    }

    /// Loads every `.wit` file in `wit_dir`, generates stubs for `interfaces` and writes them
    /// to `out_file` (include it at the crate root with `include!`). Prints the
    /// `cargo:rerun-if-changed` lines for the WIT files.
    pub fn generate(wit_dir: &Path, interfaces: &[&str], out_file: &Path) -> Result<(), Error> {
        println!("cargo:rerun-if-changed={}", wit_dir.display());
        let wit = Wit::load_dir(wit_dir)?;
        let mut code = String::new();
        for name in interfaces {
            let plan = wit.interface(name)?;
            code.push_str(&generate_rust(&plan));
        }
        std::fs::write(out_file, code).map_err(|source| Error::Io {
            path: out_file.display().to_string(),
            source,
        })
    }
}
