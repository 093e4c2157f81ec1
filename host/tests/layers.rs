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
    ("astack/map.rs", &[]),
    ("astack/alloc.rs", &[]),
    ("astack/extent.rs", &[]),
];

/// The lower half of the A-stack tree, which the modules above may use through `super::`.
const ASTACK_BELOW: &[&str] = &["map", "alloc", "extent"];

/// The first segment of every `crate::…` path in `src`, comments left out (a `use
/// crate::{a, b}` group counts each of its members).
fn crate_paths(src: &str) -> Vec<String> {
    paths_after(src, "crate::")
}

/// The first segment of every path that starts with `prefix` in `src`, comments left out.
fn paths_after(src: &str, prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in src.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            rest = &rest[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for member in group[..end].split(',') {
                    let head = member.trim().split("::").next().unwrap_or("");
                    if !head.is_empty() {
                        found.push(head.to_string());
                    }
                }
            } else {
                let head: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // (`super::*` in a test module names the module itself.)
                if !head.is_empty() {
                    found.push(head);
                }
            }
        }
    }
    found
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

#[test]
fn crate_paths_finds_groups_and_skips_comments() {
    let src = "use crate::a::B;\nuse crate::{c, d::E};\n// crate::f\nlet x = crate::g::h();\n";
    assert_eq!(crate_paths(src), ["a", "c", "d", "g"]);
}
