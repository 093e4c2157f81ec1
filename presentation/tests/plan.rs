//! The middle stage: procedure descriptor lists, bounds, fingerprints, refusals.

use lrpc_presentation::{Error, Wit};
use std::path::Path;

fn wit() -> Wit {
    Wit::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit")).expect("project WIT")
}

#[test]
fn the_bench_interface_has_table_ivs_astack_sizes() {
    let plan = wit().interface("lrpc:bench/bench").unwrap();
    let rows: Vec<(&str, bool, u32, u32)> = plan
        .procs
        .iter()
        .map(|p| (p.name.as_str(), p.bounded, p.astack_size, p.astack_count))
        .collect();
    assert_eq!(
        rows,
        [
            ("null", true, 8, 5),
            ("add", true, 8, 5),
            ("big-in", false, 1500, 5),
            ("big-in-out", false, 1500, 5),
        ]
    );
    assert_eq!(plan.procs[1].in_bound, Some(8));
    assert_eq!(plan.procs[1].out_bound, Some(4));
    assert_eq!(plan.procs[1].entry, "lrpc-entry:lrpc:bench/bench#add");
}

#[test]
fn bounds_follow_the_types() {
    let plan = wit().interface("lrpc:kv/store").unwrap();
    let p = |n: &str| plan.procs.iter().find(|p| p.name == n).unwrap().clone();
    // measure: char (4) + s64 (8) + f64 (8) in, the same out.
    let m = p("measure");
    assert!(m.bounded);
    assert_eq!((m.in_bound, m.out_bound), (Some(20), Some(20)));
    assert_eq!(m.astack_size, 24);
    // rights: flags of three -> one byte; no params.
    assert_eq!(p("rights").out_bound, Some(1));
    assert_eq!(p("rights").astack_size, 8);
    // stats: tuple<u32, u64>.
    assert_eq!(p("stats").out_bound, Some(12));
    assert!(!p("get").bounded, "strings are unbounded");
}

fn source(body: &str) -> Wit {
    Wit::load_sources(&[(
        "t.wit",
        &format!("package t:t;\ninterface i {{\n{body}\n}}"),
    )])
    .unwrap()
}

#[test]
fn the_fingerprint_is_stable_and_changes_with_any_type() {
    let base = source("record r { a: u32 }\nf: func(x: r) -> string;");
    let fp = base.interface("t:t/i").unwrap().fingerprint;
    assert_eq!(
        fp,
        source("record r { a: u32 }\nf: func(x: r) -> string;")
            .interface("t:t/i")
            .unwrap()
            .fingerprint
    );
    // An alias is the same type.
    let aliased = source("record r { a: u32 }\ntype q = r;\nf: func(x: q) -> string;");
    assert_eq!(aliased.interface("t:t/i").unwrap().fingerprint, fp);
    for changed in [
        "record r { a: u64 }\nf: func(x: r) -> string;",
        "record r { b: u32 }\nf: func(x: r) -> string;",
        "record r { a: u32 }\nf: func(y: r) -> string;",
        "record r { a: u32 }\nf: func(x: r) -> list<u8>;",
        "record r { a: u32 }\nf: func(x: r);",
        "record r { a: u32 }\ng: func(x: r) -> string;",
        "record r { a: u32, b: u8 }\nf: func(x: r) -> string;",
    ] {
        let other = source(changed).interface("t:t/i").unwrap().fingerprint;
        assert_ne!(other, fp, "{changed}");
    }
}

#[test]
fn unsupported_types_are_refused_naming_the_place() {
    let w = source("resource file;\nopen: func(name: string) -> file;");
    match w.interface("t:t/i") {
        Err(Error::Unsupported { place, reason, .. }) => {
            assert!(place.contains("open"), "{place}");
            assert!(reason.contains("resource"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let w = source("f: func(s: stream<u8>);");
    let e = w.interface("t:t/i").unwrap_err().to_string();
    assert!(e.contains("parameter `s`") && e.contains("stream"), "{e}");
}

#[test]
fn syntax_errors_and_unknown_names_are_reported() {
    let e = Wit::load_sources(&[("broken.wit", "package t:t;\ninterface i {\n f: func(;\n}")])
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("broken.wit"), "{e}");
    assert!(e.contains(":3:"), "line number in {e}");
    let e = wit().interface("lrpc:bench/nope").unwrap_err().to_string();
    assert!(
        e.contains("lrpc:bench/bench"),
        "lists known interfaces: {e}"
    );
}
