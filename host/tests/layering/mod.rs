//! The layering check the crates' tests share: which top-level modules of a crate each
//! module imports (`crate::…` paths), and a check that every module imports only modules
//! below it in a declared order. Included by path from each crate's layering test.
#![allow(
    dead_code,
    reason = "the kernel's test uses only the path finder while its concept modules are one circle"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source with `//` comments removed (line by line; enough for this code base, whose
/// string literals do not hold `//` before a `crate::` path).
fn code(src: &str) -> String {
    src.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every path in `src` that starts with `prefix` (comments left out);
/// a group `prefix{a::{b, c}, d}` counts each of its top-level members (`a`, `d`).
pub fn paths_after(src: &str, prefix: &str) -> Vec<String> {
    let code = code(src);
    let mut found = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut member = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.extend(head(&member));
                        member.clear();
                        continue;
                    }
                    _ => {}
                }
                member.push(c);
            }
            found.extend(head(&member));
        } else {
            found.extend(head(rest));
        }
    }
    found
}

/// The identifier that starts `s` (after blanks), if any.
fn head(s: &str) -> Option<String> {
    let h: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!h.is_empty()).then_some(h)
}

/// The top-level modules of the crate in `src` (files and folders), the root and binaries
/// left out.
pub fn modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("read the source folder")
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let name = p.file_stem()?.to_str()?.to_owned();
            let module = p.is_dir() || p.extension().is_some_and(|x| x == "rs");
            (module && !matches!(name.as_str(), "lib" | "main" | "bin")).then_some(name)
        })
        .collect()
}

/// The `.rs` files of module `name` in `src`.
fn files(src: &Path, name: &str) -> Vec<PathBuf> {
    let file = src.join(format!("{name}.rs"));
    let mut out = vec![];
    if file.is_file() {
        out.push(file);
    }
    let mut dirs = vec![src.join(name)];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out
}

/// The names the crate root re-exports (`pub use a::b::{C, D};` at the top of `lib.rs`),
/// each with the top-level module it comes from; `None` for another crate's items.
pub fn root_reexports(src: &Path, order: &[&str]) -> BTreeMap<String, Option<String>> {
    let lib = code(&std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs"));
    let mut out = BTreeMap::new();
    let mut rest = lib.as_str();
    while let Some(at) = rest.find("\npub use ") {
        rest = &rest[at + "\npub use ".len()..];
        let end = rest.find(';').expect("a `pub use` ends with `;`");
        let stmt: String = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        let path = stmt.trim_start_matches("crate::");
        let first = path.split("::").next().unwrap_or("").to_string();
        let from = order.contains(&first.as_str()).then_some(first);
        // The names it brings: the last segment, or a group's members; `x as y` is `y`.
        let names = match (path.find('{'), path.rfind('}')) {
            (Some(a), Some(b)) => path[a + 1..b].to_string(),
            _ => path.rsplit("::").next().unwrap_or("").to_string(),
        };
        for n in names.split(',') {
            let n = n.rsplit(" as ").next().unwrap_or("").trim();
            let n = n.rsplit("::").next().unwrap_or("").trim();
            if !n.is_empty() {
                out.insert(n.to_string(), from.clone());
            }
        }
    }
    out
}

/// Checks that `order` lists every top-level module of the crate in `src`, and that each
/// module imports (through `crate::`) only modules listed before it. A name the root
/// re-exports counts as an import of the module it comes from; another crate's items the
/// root re-exports may be used anywhere. Any other `crate::` name is refused. Panics with
/// every wrong import found.
pub fn check(src: &Path, order: &[&str]) {
    let root = root_reexports(src, order);
    let present = modules(src);
    let listed: BTreeSet<String> = order.iter().map(|m| m.to_string()).collect();
    assert_eq!(
        present,
        listed,
        "the layer order must list every module of {} (and only those)",
        src.display()
    );
    let mut wrong = Vec::new();
    for (i, m) in order.iter().enumerate() {
        for file in files(src, m) {
            let text = std::fs::read_to_string(&file).expect("read a module");
            for h in paths_after(&text, "crate::") {
                let module = match root.get(&h) {
                    _ if order.contains(&h.as_str()) => h.clone(),
                    Some(Some(from)) => from.clone(),
                    Some(None) => continue,
                    None => {
                        wrong.push(format!(
                            "{} imports crate::{h}, which is no module",
                            file.display()
                        ));
                        continue;
                    }
                };
                if module != *m && !order[..i].contains(&module.as_str()) {
                    wrong.push(format!(
                        "{} imports crate::{h} (module {module})",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports of modules not below the importer (order: {order:?}):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn paths_after_finds_nested_groups_and_skips_comments() {
    let src =
        "use crate::a::B;\nuse crate::{c, d::{E, F},\n  g};\n// crate::f\nlet x = crate::h::i();\n";
    assert_eq!(paths_after(src, "crate::"), ["a", "c", "d", "g", "h"]);
}
