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

/// The plan of a one-interface source, or its error.
fn plan_of(body: &str) -> Result<lrpc_presentation::InterfacePlan, Error> {
    source(body).interface("t:t/i")
}

#[test]
fn every_type_has_its_encoded_bound() {
    let names = |prefix: &str, n: usize| {
        (0..n)
            .map(|i| format!("{prefix}{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let plan = plan_of(&format!(
        "enum few {{ a, b }}
         enum many {{ {} }}
         flags f3 {{ a, b, c }}
         flags f9 {{ {} }}
         flags f17 {{ {} }}
         flags f40 {{ {} }}
         flags f70 {{ {} }}
         variant v {{ none, small(u8), big(tuple<u64, u32>) }}
         record r {{ a: bool, b: s16, c: option<u32> }}
         scalars: func(a: bool, b: u8, c: s8, d: u16, e: s16, f: u32, g: s32, h: u64, i: s64, j: f32, k: f64, l: char);
         named: func(a: few, b: many, c: f3, d: f9, e: f17, f: f40, g: f70) -> v;
         wrapped: func(a: r, b: result, c: result<u16>, d: result<_, u64>, e: result<u8, u32>) -> option<tuple<r, v>>;
         unbounded-in: func(a: list<u32>) -> u8;
         unbounded-out: func() -> option<string>;
         huge: func(a: tuple<u64, u64, u64, u64, u64, u64, u64, u64, u64, u64>);",
        names("c", 300),
        names("x", 9),
        names("x", 17),
        names("x", 40),
        names("x", 70),
    ))
    .unwrap();
    let p = |n: &str| plan.procs.iter().find(|p| p.name == n).unwrap();
    // 1+1+1+2+2+4+4+8+8+4+8+4
    assert_eq!(p("scalars").in_bound, Some(47));
    assert_eq!(p("scalars").out_bound, Some(0));
    assert_eq!(p("scalars").astack_size, 48);
    // enums: 1 and 2 bytes; flags: 1, 2, 4, 8 and 12 bytes; variant: 1 + 12.
    assert_eq!(p("named").in_bound, Some(1 + 2 + 1 + 2 + 4 + 8 + 12));
    assert_eq!(p("named").out_bound, Some(13));
    assert_eq!(p("named").astack_size, 32);
    // r = 1 + 2 + 5; results: 1, 3, 9, 5; option<tuple<r, v>> = 1 + 8 + 13.
    assert_eq!(p("wrapped").in_bound, Some(8 + 1 + 3 + 9 + 5));
    assert_eq!(p("wrapped").out_bound, Some(22));
    assert_eq!(p("wrapped").astack_size, 32);
    for n in ["unbounded-in", "unbounded-out"] {
        assert!(!p(n).bounded, "{n}");
        assert_eq!(p(n).astack_size, lrpc_abi::DEFAULT_VARIABLE_ASTACK_SIZE);
    }
    assert_eq!(p("unbounded-in").out_bound, Some(1));
    assert_eq!(p("unbounded-out").in_bound, Some(0));
    // Bounded procedures never take the variable default, however large.
    assert_eq!(p("huge").astack_size, 80);
    assert!(
        plan.procs
            .iter()
            .all(|p| p.astack_count == lrpc_abi::DEFAULT_ASTACK_COUNT)
    );
    let ids: Vec<&str> = plan.procs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        ids,
        [
            "scalars",
            "named",
            "wrapped",
            "unbounded-in",
            "unbounded-out",
            "huge"
        ],
        "procedures are numbered in declaration order"
    );
}

#[test]
fn smallest_sizes_and_strings_follow_the_types() {
    let plan = plan_of(
        "variant v { none, name(string), pair(tuple<u64, u64>) }
         record r { a: u16, b: list<u8>, c: option<v> }
         f: func(a: v, b: r, c: list<r>, d: result<u32, string>, e: tuple<u8, list<string>>, g: option<list<u32>>);",
    )
    .unwrap();
    let params = &plan.procs[0].params;
    let min: Vec<usize> = params.iter().map(|(_, t)| plan.min_size(t)).collect();
    // A variant: its discriminant; a record: 2 + 4 + 1; a list: its length; a result or an
    // option: its tag; a tuple: 1 + 4.
    assert_eq!(min, [1, 7, 4, 1, 5, 1]);
    let strings: Vec<bool> = params.iter().map(|(_, t)| plan.has_string(t)).collect();
    assert_eq!(strings, [true, true, true, true, true, false]);
    assert_eq!(plan.bound(&params[0].1), None, "a string is unbounded");
}

#[test]
fn the_fingerprint_sees_every_structural_change() {
    let fp = |body: &str| plan_of(body).unwrap().fingerprint;
    let base = "enum e { a, b }
        flags f { x, y }
        variant v { p(u8), q }
        f1: func(a: e, b: f, c: v, d: option<u8>, e: tuple<u8, u16>) -> result<u8, string>;";
    let want = fp(base);
    // Type names and comments do not matter, structure does.
    assert_eq!(
        fp("enum renamed { a, b }
            flags f { x, y }
            /// docs
            variant v { p(u8), q }
            f1: func(a: renamed, b: f, c: v, d: option<u8>, e: tuple<u8, u16>) -> result<u8, string>;"),
        want
    );
    for (what, from, to) in [
        ("enum case", "enum e { a, b }", "enum e { a, c }"),
        ("enum order", "enum e { a, b }", "enum e { b, a }"),
        ("flag name", "flags f { x, y }", "flags f { x, z }"),
        ("variant payload", "p(u8)", "p(u16)"),
        ("variant case", "q }", "q, r }"),
        ("option payload", "option<u8>", "option<s8>"),
        ("tuple order", "tuple<u8, u16>", "tuple<u16, u8>"),
        ("result ok", "result<u8, string>", "result<_, string>"),
        ("result err", "result<u8, string>", "result<u8, list<u8>>"),
        ("param order", "a: e, b: f", "b: f, a: e"),
    ] {
        let changed = base.replacen(from, to, 1);
        assert_ne!(changed, base, "{what}: the edit applies");
        assert_ne!(fp(&changed), want, "{what}");
    }
    // The interface name is part of it too.
    let other = Wit::load_sources(&[(
        "t.wit",
        &format!("package t:t;\ninterface j {{\n{base}\n}}"),
    )])
    .unwrap()
    .interface("t:t/j")
    .unwrap();
    assert_ne!(other.fingerprint, want);
    assert!(other.canonical.starts_with("interface t:t/j;"));
}

#[test]
fn every_unsupported_type_is_refused_with_its_place() {
    for (body, place, what) in [
        ("f: func(x: future<u8>);", "parameter `x`", "future"),
        ("f: func(x: stream);", "parameter `x`", "stream"),
        ("f: func() -> error-context;", "result", "error-context"),
        (
            "resource r;\nf: func(x: borrow<r>);",
            "parameter `x`",
            "resource",
        ),
        (
            "resource r;\nrecord w { inner: r }\nf: func(a: u8, b: list<w>);",
            "parameter `b`",
            "resource",
        ),
        (
            "resource r { m: func(); }",
            "function `[method]r.m`",
            "freestanding",
        ),
    ] {
        let w = Wit::load_sources(&[(
            "t.wit",
            &format!("package t:t;\ninterface i {{\n{body}\n}}"),
        )])
        .unwrap_or_else(|e| panic!("{body}: {e}"));
        let msg = w.interface("t:t/i").unwrap_err().to_string();
        assert!(msg.contains("interface `t:t/i`"), "{body}: {msg}");
        assert!(msg.contains(place), "{body}: {msg}");
        assert!(msg.contains(what), "{body}: {msg}");
    }
    let e = plan_of(&format!(
        "flags f {{ {} }}\ng: func(x: f);",
        (0..129)
            .map(|i| format!("x{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("128 flags") && e.contains("function `g`"), "{e}");
}

#[test]
fn interfaces_are_listed_by_full_name() {
    let mut names = wit().interface_names();
    names.sort();
    assert_eq!(
        names,
        [
            "lrpc:bench/bench",
            "lrpc:http/plugin",
            "lrpc:http/plugin@0.2.0",
            "lrpc:kv/store",
            "lrpc:test/faulty",
            "lrpc:test/node"
        ]
    );
}

#[test]
fn register_entries_exist_for_scalar_procedures_only() {
    use lrpc_presentation::CoreType;
    let plan = plan_of(
        "flags f { a }\n\
         ints: func(a: bool, b: u8, c: s16, d: u32, e: s32) -> u64;\n\
         floats: func(a: f32, b: f64, c: s64);\n\
         nothing: func();\n\
         with-char: func(c: char);\n\
         char-out: func() -> char;\n\
         with-list: func(l: list<u8>) -> u32;\n\
         with-flags: func(f: f) -> u32;\n\
         with-tuple: func() -> tuple<u32>;",
    )
    .unwrap();
    let fast = |n: &str| {
        plan.procs
            .iter()
            .find(|p| p.name == n)
            .unwrap()
            .register
            .clone()
            .map(|f| (f.entry, f.params, f.result))
    };
    assert_eq!(
        fast("ints"),
        Some((
            "lrpc-fast:t:t/i#ints".to_string(),
            vec![CoreType::I32; 5],
            Some(CoreType::I64)
        ))
    );
    assert_eq!(
        fast("floats").map(|f| (f.1, f.2)),
        Some((vec![CoreType::F32, CoreType::F64, CoreType::I64], None))
    );
    assert_eq!(fast("nothing").map(|f| (f.1, f.2)), Some((vec![], None)));
    for n in [
        "with-char",
        "char-out",
        "with-list",
        "with-flags",
        "with-tuple",
    ] {
        assert_eq!(fast(n), None, "{n} must take the A-stack path");
    }
}
