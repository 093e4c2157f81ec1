//! The kernel's modules form layers: each imports only modules below it, so no import
//! circle can come back. Bottom to top: helpers, the A-stack pages, the records (`state`),
//! behaviour, and the facade (`kernel`).

use std::path::Path;

#[path = "layering/mod.rs"]
mod layering;

use layering::{paths_after, root_reexports};

/// Every top-level module of the kernel, bottom to top.
const ORDER: &[&str] = &[
    // Helpers: bulk copies, errors, the wait hook, locks, quotas, the ticker, the remote
    // contract, feature tables, handle tables.
    "bulk",
    "error",
    "pace",
    "sync",
    "quota",
    "tick",
    "transport",
    "ext",
    "slot",
    // Rewriting a module for in-place resets.
    "isolate",
    // The A-stacks' pages: memory files and mappings, window space, extents.
    "astack",
    // The records: domains, replicas, bindings and their placement, exports, linkage.
    "state",
    // Behaviour: termination, the server thread, direct linking, channels, component
    // domains, the kernel imports (the call path).
    "terminate",
    "mailbox",
    "direct",
    "channel",
    "component",
    "imports",
    // The facade.
    "kernel",
];

/// The A-stack tree bottom to top: its files import only files before them (`super::`).
const ASTACK: &[&str] = &["scan", "map", "alloc", "extent"];

/// The records' tree (`state`) bottom to top: its files import only files before them
/// (`super::`, or `crate::state::`). At the bottom the records that refer to no other
/// record: the kernel's settings and code cache, window space and what a binding has
/// mapped, an isolated replica's fresh state; then the records that refer to each other,
/// defined in one file; then what is done with them: the linkage stack (the fenced unsafe
/// code), the clerk's registry, a replica's store and memory, resets, bindings, their
/// placement and revocation, the kernel's record, and domains.
const STATE: &[&str] = &[
    "config", "window", "fresh", "records", "linkage", "clerk", "replica", "reset", "binding",
    "place", "kernel", "domain",
];

/// Checks that `order` lists every file of the module tree `module` (a folder of `src`
/// with a `mod.rs`) and that each file imports only files listed before it.
fn check_tree(module: &str, order: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(module);
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("read the module's folder")
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let stem = p.file_stem()?.to_str()?.to_owned();
            (p.extension().is_some_and(|x| x == "rs") && stem != "mod").then_some(stem)
        })
        .collect();
    present.sort();
    let mut listed: Vec<String> = order.iter().map(|f| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        present, listed,
        "the order of {module}/ must list every file in it (and only those)"
    );
    let mut wrong = Vec::new();
    for (i, file) in order.iter().enumerate() {
        let text = std::fs::read_to_string(dir.join(format!("{file}.rs"))).expect("read");
        let heads = paths_after(&text, "super::")
            .into_iter()
            .chain(paths_after(&text, &format!("crate::{module}::")));
        for head in heads {
            if !order[..i].contains(&head.as_str()) {
                wrong.push(format!(
                    "{module}/{file}.rs imports {head}, a file not below it"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_module_imports_only_modules_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    layering::check(&src, ORDER);
}

#[test]
fn the_astack_tree_is_layered_too() {
    check_tree("astack", ASTACK);
}

#[test]
fn the_records_are_layered_too() {
    check_tree("state", STATE);
}

/// The `.rs` files under `dir`, as paths relative to `src`.
fn rust_files(src: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir)
        .expect("read a source folder")
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            rust_files(src, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(src).expect("under src");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn the_crate_docs_name_every_file_with_unsafe_code() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let section = lib
        .split("# Where `unsafe` lives")
        .nth(1)
        .expect("lib.rs has a section on unsafe code");
    let section: String = section
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let named: Vec<&str> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".rs") && !s.starts_with("tests/"))
        .collect();
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    let mut with_unsafe: Vec<String> = files
        .into_iter()
        .filter(|f| f != "lib.rs")
        .filter(|f| {
            let text = std::fs::read_to_string(src.join(f)).expect("read a module");
            let code: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            ["unsafe {", "unsafe fn", "unsafe impl"]
                .iter()
                .any(|k| code.contains(k))
        })
        .collect();
    with_unsafe.sort();
    let mut named_sorted: Vec<String> = named.iter().map(|s| s.to_string()).collect();
    named_sorted.sort();
    named_sorted.dedup();
    assert_eq!(
        named_sorted, with_unsafe,
        "the files lib.rs lists under \"Where `unsafe` lives\" (left) must be the files with \
         unsafe code (right)"
    );
}

#[test]
fn the_crate_docs_name_every_root_reexport() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    // The first paragraph of "# The API": the root's types, linked as [`Name`] (the modules
    // it names are lowercase).
    let paragraph: String = lib
        .split("# The API")
        .nth(1)
        .expect("lib.rs has a section on the API")
        .lines()
        .skip(1)
        .map(|l| l.trim_start_matches("//!").trim())
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut named: Vec<&str> = paragraph
        .split("[`")
        .skip(1)
        .filter_map(|s| s.split_once("`]").map(|(name, _)| name))
        .filter(|name| name.starts_with(|c: char| c.is_ascii_uppercase()))
        .collect();
    named.sort();
    named.dedup();
    let root = root_reexports(&src, ORDER);
    let reexported: Vec<&str> = root.keys().map(String::as_str).collect();
    assert_eq!(
        named, reexported,
        "the types lib.rs's \"# The API\" names (left) must be the names its `pub use` lines \
         re-export (right): a name added at the root is named there too"
    );
}
