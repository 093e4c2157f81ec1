//! The modules below the kernel's concept modules stay below them: they import nothing from
//! the concept modules, so every concept module may use them without an import cycle.

use std::path::Path;

/// Each helper module and the modules it may import (by their path in `crate::`).
const BELOW: &[(&str, &[&str])] = &[
    ("error.rs", &[]),
    ("pace.rs", &["error"]),
    // A thread about to wait for a Store tells its wait hook first.
    ("sync.rs", &["pace"]),
    ("quota.rs", &["error", "sync"]),
    ("tick.rs", &["sync"]),
    ("astack/map.rs", &[]),
    ("astack/alloc.rs", &[]),
    ("astack/extent.rs", &[]),
];

/// The lower half of the A-stack tree, which the modules above may use through `super::`.
const ASTACK_BELOW: &[&str] = &["map", "alloc", "extent"];

#[path = "layering/mod.rs"]
mod layering;

use layering::paths_after;

/// The first segment of every `crate::…` path in `src`, comments left out.
fn crate_paths(src: &str) -> Vec<String> {
    paths_after(src, "crate::")
}

#[test]
fn helper_modules_import_no_concept_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (file, allowed) in BELOW {
        let text = std::fs::read_to_string(src.join(file)).expect("read a helper module");
        for head in crate_paths(&text) {
            assert!(
                allowed.contains(&head.as_str()),
                "{file} imports crate::{head}, a module above it"
            );
        }
        if file.starts_with("astack/") {
            for head in paths_after(&text, "super::") {
                assert!(
                    ASTACK_BELOW.contains(&head.as_str()),
                    "{file} imports super::{head}, a module above it"
                );
            }
        }
    }
}
