//! The runtime's modules form layers: each imports only modules below it.

#[path = "../../tests/layering/mod.rs"]
mod layering;

/// Bottom to top: TLS; a request body's clock; the HTTP listener and its budgets; the
/// config; trace export; value text; metrics; the HTTP records; supervision and the deployment's error;
/// serving to the network and `wasi:http` handlers; the deployment; reload and the edge
/// server on top; the command's own parts.
const ORDER: &[&str] = &[
    "tls",
    "body_rate",
    "listener",
    "config",
    "telemetry",
    "value",
    "metrics",
    "http",
    "supervise",
    "network",
    "wasi_http",
    "deploy",
    "reload",
    "edge",
    "demo",
    "template",
];

#[test]
fn every_module_imports_only_modules_below_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // `driver` is the root's re-export of the `lrpc-driver` crate.
    layering::check(&src, ORDER);
}

/// The files of the edge (`edge/`), bottom to top, as a request's path runs through them:
/// the records it passes and its answers; its body and route; a seat at work on the chain;
/// serving on the reactor, or on the route's pool; the way in; the edge's own endpoints and
/// its stopping. `mod.rs` (the `Edge` facade, the records every file shares, the module doc
/// that draws the path) is on top.
const EDGE: &[&str] = &[
    "codec",
    "response",
    "body",
    "router",
    "access",
    "chain",
    "reactor",
    "pool",
    "admission",
    "admin",
    "health",
    "shutdown",
];

/// The files of `wasi_http/`, bottom to top: the handler's outgoing HTTP, its response
/// bodies, the request it gets, the response heads held back, WASI 0.2 instances between
/// requests; WASI 0.3 instances, the supervised handler, a WASI 0.2 request's task. `mod.rs`
/// is on top.
const WASI_HTTP: &[&str] = &[
    "outgoing",
    "body",
    "request",
    "heads",
    "instances",
    "p3",
    "handler",
    "p2",
];

/// The one import against the order: a WASI 0.3 instance's service holds its handler
/// (weakly, to serve through it), and the handler keeps its WASI 0.3 limits.
const WASI_HTTP_BACK: &[(&str, &str)] = &[("p3", "handler")];

/// The files of `config/`, bottom to top: how values are read (and the error every parser
/// gives); the checked records; the file as written; one parser per table (`[kernel]`,
/// `[serve]`, `[telemetry]`, `[network]`/`[remotes]`, `[domains]`); what ties the domains
/// together; the `[[routes]]`. `mod.rs` (`Config::parse`, `[run]`) is on top.
const CONFIG: &[&str] = &[
    "text",
    "spec",
    "raw",
    "kernel",
    "serve",
    "telemetry",
    "network",
    "domains",
    "binds",
    "routes",
];

/// Checks that the folder `dir` holds `mod.rs` and exactly the files of `order`, that its
/// `mod.rs` names each file in its doc, and that each file imports (as `super::file`) only
/// files before it in `order`, but for `back` (importer, imported). Items of `mod.rs`
/// (`super::Name`) may be used anywhere.
fn check_folder(dir: &std::path::Path, order: &[&str], back: &[(&str, &str)]) {
    let mut present: Vec<String> = std::fs::read_dir(dir)
        .expect("read the folder")
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let rs = p.extension().is_some_and(|x| x == "rs");
            rs.then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .filter(|n| n != "mod")
        .collect();
    present.sort();
    let mut listed: Vec<String> = order.iter().map(|f| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        present,
        listed,
        "{} must hold exactly the files listed",
        dir.display()
    );
    let doc: String = std::fs::read_to_string(dir.join("mod.rs"))
        .expect("read mod.rs")
        .lines()
        .filter(|l| l.starts_with("//!"))
        .collect();
    let mut wrong = Vec::new();
    for (i, file) in order.iter().enumerate() {
        if !doc.contains(&format!("{file}.rs")) {
            wrong.push(format!("mod.rs's doc does not name {file}.rs"));
        }
        let text = std::fs::read_to_string(dir.join(format!("{file}.rs"))).expect("read a file");
        // Unit tests import their own file (`super::*`), not the folder's.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        // A glob would reach every file through `mod.rs`'s own imports.
        if code.contains("use super::*") {
            wrong.push(format!("{file}.rs imports `super::*`"));
        }
        for h in layering::paths_after(code, "super::") {
            let sibling = order.contains(&h.as_str());
            let below = order[..i].contains(&h.as_str());
            if sibling && !below && !back.contains(&(*file, h.as_str())) {
                wrong.push(format!("{file}.rs imports {h}.rs"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}: files import only files below them (order: {order:?}):\n{}",
        dir.display(),
        wrong.join("\n")
    );
}

#[test]
fn the_edge_and_wasi_http_files_follow_a_request_s_path() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    check_folder(&src.join("edge"), EDGE, &[]);
    check_folder(&src.join("wasi_http"), WASI_HTTP, WASI_HTTP_BACK);
}

#[test]
fn the_config_files_import_only_files_below_them() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    check_folder(&src.join("config"), CONFIG, &[]);
}
