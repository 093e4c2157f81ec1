//! Build-script support for guests: a guest's `build.rs` is one call,
//!
//! ```no_run
//! lrpc_presentation::build::guest(&["lrpc:bench/bench"]);
//! ```
//!
//! which writes the interface's stubs to `$OUT_DIR/stubs.rs` (included at the crate root with
//! `include!(concat!(env!("OUT_DIR"), "/stubs.rs"))`) and prints the linker arguments every
//! guest needs. [`guest_presented`] does the same under presentation files.

use crate::{Error, SidePresentation, Wit};
use std::path::{Path, PathBuf};

/// An interface to generate stubs for, with the client's and the server's presentation file
/// (`None` for the default presentation).
pub type Presented<'a> = (&'a str, Option<&'a Path>, Option<&'a Path>);

/// The project's WIT folder (`wit/` beside this crate), which the kernel embeds.
pub fn project_wit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit")
}

/// The whole build script of a guest using `interfaces` of the project's WIT under the
/// default presentation: see [`guest_presented`].
pub fn guest(interfaces: &[&str]) {
    let presented: Vec<Presented<'_>> = interfaces.iter().map(|n| (*n, None, None)).collect();
    guest_presented(&presented);
}

/// The whole build script of a guest using `interfaces` of the project's WIT, each under the
/// given presentation files (paths relative to the guest's manifest folder): prints
/// [`wasm_link_args`] and writes the stubs to `$OUT_DIR/stubs.rs`.
///
/// # Panics
///
/// When `OUT_DIR` is not set (it is, in a build script) or the stubs can not be generated,
/// with the reason: a build script fails by panicking.
pub fn guest_presented(interfaces: &[Presented<'_>]) {
    wasm_link_args();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    if let Err(e) = generate_presented(&project_wit_dir(), interfaces, &out.join("stubs.rs")) {
        panic!("generating stubs: {e}");
    }
}

/// Like [`generate`], with presentation files: for each interface, the client's and the
/// server's presentation (a path, or `None` for the default). A presentation that does not
/// check against the WIT fails the build with its file, line and reason.
pub fn generate_presented(
    wit_dir: &Path,
    interfaces: &[Presented<'_>],
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
        SidePresentation::parse(&path.display().to_string(), &text, |n| wit.interface(n)).map(Some)
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

/// Linker arguments every guest needs, printed for cargo when the build script builds for
/// wasm32 (elsewhere it prints nothing): the module's function table is exported and
/// growable, because on a direct-linked binding the kernel appends the server copy's entries
/// to it and the client stub calls them through it. Call it from `build.rs`.
pub fn wasm_link_args() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo::rustc-link-arg=--export-table");
        println!("cargo::rustc-link-arg=--growable-table");
    }
}

/// Loads the WIT packages of `wit_dir` (see [`Wit::load_dir`]), generates stubs for
/// `interfaces` under the default presentation and writes them to `out_file` (include it at
/// the crate root with `include!`). Prints the `cargo:rerun-if-changed` lines for the WIT.
pub fn generate(wit_dir: &Path, interfaces: &[&str], out_file: &Path) -> Result<(), Error> {
    let presented: Vec<Presented<'_>> = interfaces.iter().map(|n| (*n, None, None)).collect();
    generate_presented(wit_dir, &presented, out_file)
}
