//! The WIT front end reads WIT as `wit-parser` does: packages split over several files, a
//! `deps/` folder with versioned packages, and files in any order.

use lrpc_presentation::{DefKind, Error, Prim, Ty, Wit, generate_rust};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Every `*.wit` file below `dir`, as `(path, text)`, sorted by path.
fn files_below(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "wit") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p.display().to_string(), text));
            }
        }
    }
    out.sort();
    out
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

const SPLIT_INTERFACES: [&str; 5] = [
    "fx:geometry/area@0.2.0",
    "fx:geometry/shapes@0.2.0",
    "fx:split/api",
    "fx:split/types",
    "fx:units/lengths@1.0.0",
];

#[test]
fn a_folder_with_a_split_package_and_versioned_deps_loads() {
    let wit = Wit::load_dir(&fixture("split")).expect("fixture loads");
    assert_eq!(sorted(wit.interface_names()), SPLIT_INTERFACES);

    // `api` uses a type of another file of its package, which uses a versioned dependency,
    // which uses a dependency listed after it in `deps/`.
    let plan = wit.interface("fx:split/api").unwrap();
    let [length] = &plan.procs[..] else {
        panic!("one procedure: {:?}", plan.procs)
    };
    assert_eq!(length.result, Some(Ty::Prim(Prim::F64)));
    let Ty::Named(segment) = length.params[0].1 else {
        panic!("a record: {:?}", length.params)
    };
    let DefKind::Record(fields) = &plan.defs[segment].kind else {
        panic!("a record: {:?}", plan.defs)
    };
    assert_eq!(fields.len(), 2);
    let Ty::Named(point) = fields[0].1 else {
        panic!("a record: {fields:?}")
    };
    assert_eq!(
        plan.defs[point].kind,
        DefKind::Record(vec![
            ("x".into(), Ty::Prim(Prim::F64)),
            ("y".into(), Ty::Prim(Prim::F64))
        ])
    );
    assert_eq!(length.in_bound, Some(32));

    // A versioned interface of a dependency is planned under its full name.
    let area = wit.interface("fx:geometry/area@0.2.0").unwrap();
    assert_eq!(area.name, "fx:geometry/area@0.2.0");
    assert!(
        area.canonical
            .starts_with("interface fx:geometry/area@0.2.0;")
    );
    assert!(
        wit.interface("fx:geometry/area").is_err(),
        "the version is part of the name"
    );
}

#[test]
fn sources_load_in_any_order() {
    let files = files_below(&fixture("split"));
    assert_eq!(files.len(), 6);
    let forward: Vec<(&str, &str)> = files.iter().map(|(p, t)| (&**p, &**t)).collect();
    let reverse: Vec<(&str, &str)> = forward.iter().rev().copied().collect();
    let a = Wit::load_sources(&forward).expect("in path order");
    let b = Wit::load_sources(&reverse).expect("in reverse order");
    assert_eq!(sorted(a.interface_names()), SPLIT_INTERFACES);
    assert_eq!(sorted(b.interface_names()), SPLIT_INTERFACES);
    for name in SPLIT_INTERFACES {
        assert_eq!(a.interface(name).unwrap(), b.interface(name).unwrap());
    }
}

#[test]
fn a_package_may_come_before_the_one_it_uses() {
    // `clocks` uses `io`, and comes first.
    let clocks = "package t:clocks@0.2.0;\n\
                  interface wall { use t:io/poll@0.2.0.{pollable}; now: func() -> pollable; }";
    let io = "/// I/O.\npackage t:io@0.2.0;\ninterface poll { type pollable = u32; }";
    let wit = Wit::load_sources(&[("clocks.wit", clocks), ("io.wit", io)]).unwrap();
    let plan = wit.interface("t:clocks/wall@0.2.0").unwrap();
    assert_eq!(plan.procs[0].result, Some(Ty::Prim(Prim::U32)));
}

#[test]
fn files_of_one_package_join_whatever_their_order() {
    let uses = "interface b { use a.{t}; f: func(x: t); }";
    let defines = "package t:one;\ninterface a { type t = u16; }";
    let wit = Wit::load_sources(&[("p/b.wit", uses), ("p/a.wit", defines)]).unwrap();
    assert_eq!(
        wit.interface("t:one/b").unwrap().procs[0].params[0].1,
        Ty::Prim(Prim::U16)
    );
}

#[test]
fn unresolvable_wit_fails_with_the_reason() {
    // A header-less file in a folder of two packages belongs to neither.
    let err = Wit::load_sources(&[
        ("w/a.wit", "package t:a;\ninterface a {}"),
        ("w/b.wit", "package t:b;\ninterface b {}"),
        ("w/c.wit", "interface c {}"),
    ])
    .err()
    .expect("ambiguous");
    assert!(
        matches!(&err, Error::Parse { path, message } if path == "w/c.wit" && message.contains("several packages")),
        "{err}"
    );

    // Two packages that use each other.
    let err = Wit::load_sources(&[
        (
            "a.wit",
            "package t:a;\ninterface a { use t:b/b.{y}; type x = y; }",
        ),
        (
            "b.wit",
            "package t:b;\ninterface b { use t:a/a.{x}; type y = u8; }",
        ),
    ])
    .err()
    .expect("a cycle");
    assert!(err.to_string().contains("cycle"), "{err}");

    // A dependency that is not there.
    let err = Wit::load_sources(&[("a.wit", "package t:a;\ninterface a { use t:gone/g.{x}; }")])
        .err()
        .expect("missing");
    assert!(err.to_string().contains("t:gone"), "{err}");

    // A syntax error names its file and line.
    let err = Wit::load_sources(&[("bad.wit", "package t:a;\ninterface a { f: func( }")])
        .err()
        .expect("syntax");
    assert!(err.to_string().contains("bad.wit:2"), "{err}");
}

#[test]
fn the_project_wit_loads_from_its_folder_and_from_sources() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let from_dir = Wit::load_dir(&dir).unwrap();
    let files = files_below(&dir);
    let reverse: Vec<(&str, &str)> = files.iter().rev().map(|(p, t)| (&**p, &**t)).collect();
    let from_sources = Wit::load_sources(&reverse).unwrap();
    assert_eq!(
        sorted(from_dir.interface_names()),
        sorted(from_sources.interface_names())
    );
    assert!(
        from_dir
            .interface_names()
            .contains(&"lrpc:bench/bench".into())
    );
}

#[test]
fn versioned_interfaces_plan_and_generate_under_their_full_name() {
    let wit = Wit::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/wit")).unwrap();
    let plan = wit.interface("lrpc:versioned/shapes@0.1.0").unwrap();
    assert_eq!(plan.name, "lrpc:versioned/shapes@0.1.0");
    assert_eq!(
        plan.procs[1].entry,
        "lrpc-entry:lrpc:versioned/shapes@0.1.0#twenty"
    );
    assert_eq!(plan.procs[1].params.len(), 20);
    let fast = plan.procs[1].register.as_ref().expect("twenty scalars");
    assert_eq!(fast.params.len(), 20);

    // The version is part of the fingerprint.
    let unversioned = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/wit/versioned.wit"),
    )
    .unwrap()
    .replace("@0.1.0;", ";");
    let other = Wit::load_sources(&[("v.wit", &unversioned)]).unwrap();
    let other = other.interface("lrpc:versioned/shapes").unwrap();
    assert_ne!(plan.fingerprint, other.fingerprint);
    assert_eq!(plan.procs.len(), other.procs.len());

    // The module is named after the interface, without the version.
    let code = generate_rust(&plan);
    assert!(code.contains("pub mod shapes {"), "{code}");
    assert!(code.contains("pub const INTERFACE: &str = \"lrpc:versioned/shapes@0.1.0\";"));
    assert!(!code.contains("mod shapes@"));
}

/// WASI's own WIT, where the local cargo registry has it: a real package tree with a
/// `deps/` folder of versioned, multi-file packages. The fixtures above cover the same shapes
/// when it is not there.
#[test]
fn wasi_http_wit_loads_when_present() {
    let Some(home) = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
    else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(home.join("registry/src")) else {
        return;
    };
    let dirs: Vec<PathBuf> = registries
        .filter_map(|r| r.ok())
        .map(|r| r.path().join("wasmtime-wasi-http-48.0.8/wit"))
        .filter(|p| p.is_dir())
        .collect();
    for dir in dirs {
        let wit = Wit::load_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let names = wit.interface_names();
        assert!(
            names.iter().any(|n| n.starts_with("wasi:http/types@")),
            "{names:?}"
        );
        assert!(names.iter().any(|n| n.starts_with("wasi:io/streams@")));
        // Interfaces without resources plan and generate under their versioned names.
        for prefix in ["wasi:random/random@", "wasi:clocks/wall-clock@"] {
            let name = names.iter().find(|n| n.starts_with(prefix)).unwrap();
            let plan = wit.interface(name).unwrap();
            assert!(!plan.procs.is_empty());
            let code = generate_rust(&plan);
            let module = lrpc_presentation::rust::module_name(name);
            assert!(code.contains(&format!("pub mod {module} {{")), "{code}");
        }
    }
}
