//! Generated stubs are checked against golden files; `BLESS=1 cargo test` regenerates them.

use lrpc_presentation::{Wit, generate_rust};
use std::path::Path;

/// Compares `code` with golden file `tests/golden/{name}.rs.txt`, or with `BLESS` set
/// rewrites the file.
fn check(name: &str, code: &str) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.rs.txt"));
    if std::env::var_os("BLESS").is_some() {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, code).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (run with BLESS=1 to create it)", file.display()));
    assert!(
        want == code,
        "{name} differs from {} (run with BLESS=1 to accept)",
        file.display()
    );
}

/// Checks the stubs of every interface in `wit_dir` against their golden files, named after
/// the interface (`a:b/c@1.0.0` as `a_b_c_1_0_0`).
fn check_dir(wit_dir: &Path) {
    let wit = Wit::load_dir(wit_dir).expect("WIT loads");
    let mut names = wit.interface_names();
    names.sort();
    assert!(!names.is_empty());
    for name in names {
        let code = generate_rust(&wit.interface(&name).unwrap());
        check(&name.replace([':', '/', '@', '.'], "_"), &code);
    }
}

#[test]
fn generated_stubs_match_the_golden_files() {
    check_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit"));
}

/// `tests/wit/kitchen.wit` uses every supported type; its stubs are also compiled against
/// the guest SDK by `guests/sdk/tests/kitchen.rs`.
#[test]
fn stubs_for_every_type_match_the_golden_file() {
    check_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/wit"));
}

#[test]
fn presentation_driven_stubs_match_the_golden_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wit = Wit::load_dir(&root.join("../wit")).expect("project WIT");
    let load = |name: &str| {
        let path = root.join("examples").join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&path).unwrap();
        lrpc_presentation::SidePresentation::parse(&path.display().to_string(), &text, |n| {
            wit.interface(n)
        })
        .unwrap()
    };
    let plan = wit.interface("lrpc:bench/bench").unwrap();
    let cases = [
        (
            "bench-into-inplace",
            Some(load("bench-client-into")),
            Some(load("bench-server-inplace")),
        ),
        ("bench-static", None, Some(load("bench-server-static"))),
    ];
    for (name, client, server) in &cases {
        let code = lrpc_presentation::generate_rust_with(&plan, client.as_ref(), server.as_ref());
        check(name, &code);
    }
    // The presentations show in the API.
    let (_, c, s) = &cases[0];
    let code = lrpc_presentation::generate_rust_with(&plan, c.as_ref(), s.as_ref());
    assert!(code.contains(
        "pub fn big_in_out(&self, data: &[u8], out: &mut [u8]) -> Result<usize, CallError>"
    ));
    assert!(
        code.contains("fn big_in_out(&self, data: &[u8], out: &mut ::lrpc_sdk::rt::OutBuf<'_>);")
    );
    // `special` parameters: the client passes its own marshaler, the server gets raw bytes.
    assert!(code.contains("pub fn big_in(&self, data: &impl ::lrpc_sdk::rt::Marshal)"));
    assert!(code.contains("fn big_in(&self, data: ::lrpc_sdk::rt::Raw<'_>) -> u32;"));
    let code = lrpc_presentation::generate_rust_with(&plan, None, cases[1].2.as_ref());
    assert!(code.contains("fn big_in_out(&self, data: &[u8]) -> &[u8];"));
}

/// A request holding strings beside a byte list (`lrpc:http/plugin#handle`: the head, then
/// the body): the server stub marks the byte list as one a borrow spares a copy of and reads
/// it through `list_u8_arg`, which is a view of shared memory when the binding lends it; the
/// head is decoded as before (from a private copy).
#[test]
fn a_byte_list_beside_strings_may_be_lent_to_the_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wit = Wit::load_dir(&root.join("../wit")).expect("project WIT");
    let code = generate_rust(&wit.interface("lrpc:http/plugin").unwrap());
    assert!(
        code.contains("Shape { in_mask: 0x2, strings: true,"),
        "{code}"
    );
    assert!(code.contains("let head = __dec_head(__r)?;"));
    assert!(code.contains("let body = __r.list_u8_arg(1)?;"));
    assert!(code.contains("fn handle(&self, head: Head, body: &[u8]) -> Action;"));
    // Without strings the whole request may be read in place, as before.
    let code = generate_rust(&wit.interface("lrpc:bench/bench").unwrap());
    assert!(code.contains("strings: false"));
    assert!(!code.contains("strings: true"));
}

/// The stubs of interface `name` of `wit` under the server presentation `types = "borrowed"`.
fn borrowed(wit: &Wit, name: &str) -> String {
    let text = format!("interface = {name:?}\nside = \"server\"\ntypes = \"borrowed\"\n");
    let server =
        lrpc_presentation::SidePresentation::parse("borrowed.toml", &text, |n| wit.interface(n))
            .expect("presentation");
    assert_eq!(server.types, lrpc_presentation::Types::Borrowed);
    lrpc_presentation::generate_rust_with(&wit.interface(name).unwrap(), None, Some(&server))
}

/// Under borrowed types every kind of type holding a string or a byte list carries a
/// lifetime; the stubs are also compiled against the guest SDK, with a server using them, by
/// `guests/sdk/tests/kitchen_borrowed.rs`.
#[test]
fn borrowed_stubs_for_every_type_match_the_golden_file() {
    let wit =
        Wit::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/wit")).expect("WIT loads");
    let name = "lrpc:kitchen/sink";
    let code = borrowed(&wit, name);
    check("lrpc_kitchen_sink_borrowed", &code);
    check(
        "lrpc_versioned_shapes_borrowed",
        &borrowed(&wit, "lrpc:versioned/shapes@0.1.0"),
    );
    // Types without strings or byte lists keep their plain names.
    assert!(code.contains("pub struct Point {"), "{code}");
    assert!(code.contains("pub struct Everything<'a> {"));
    assert!(code.contains("pub enum Shape<'a> {"));
    assert!(code.contains("fn echo_text<'a>(&self, s: &'a str) -> ::std::borrow::Cow<'a, str>;"));
    assert!(
        code.contains("fn scalars(&self, a: bool,"),
        "no lifetime where nothing borrows"
    );
}

/// `lrpc:http/plugin` under borrowed types: the handler is lent the head from the stub's
/// private copy of the request and may hand it back in its action; a client passes its head
/// by reference and receives actions it owns. The wire is the same as under owned types.
#[test]
fn a_plugin_with_borrowed_types_is_lent_its_head() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wit = Wit::load_dir(&root.join("../wit")).expect("project WIT");
    let name = "lrpc:http/plugin";
    let plan = wit.interface(name).unwrap();
    let code = borrowed(&wit, name);
    assert!(
        code.contains("pub name: ::std::borrow::Cow<'a, str>,"),
        "{code}"
    );
    assert!(code.contains("fn handle<'a>(&self, head: Head<'a>, body: &'a [u8]) -> Action<'a>;"));
    assert!(code.contains("let head = __lend_head(__r)?;"));
    assert!(code.contains("let body = __r.list_u8_arg(1)?;"));
    assert!(code.contains(
        "pub fn handle(&self, head: &Head<'_>, body: &[u8]) -> Result<Action<'static>, CallError>"
    ));
    // Still never read in place whole: the strings are validated on a private copy.
    assert!(code.contains("Shape { in_mask: 0x2, strings: true,"));
    // The wire functions are the owned ones' (same encoding, same framing checks).
    let owned = generate_rust(&plan);
    let skip = |c: &str| -> Vec<String> {
        c.lines()
            .filter(|l| l.contains("fn __skip_"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(skip(&code), skip(&owned));
    assert!(code.contains(&format!("FINGERPRINT: u64 = {:#018x};", plan.fingerprint)));
}

/// Under borrowed types, a byte list inside another parameter would be lent from the
/// request: such a request is not read in place whole, even without strings, so that only
/// the byte-list parameters the binding lends are views of shared memory.
#[test]
fn borrowed_byte_lists_inside_parameters_are_lent_from_a_private_copy() {
    let wit = Wit::load_sources(&[(
        "blobs.wit",
        "package lrpc:blobs;\ninterface store {\n  record blob { id: u32, data: list<u8> }\n  \
         put: func(b: blob, extra: list<u8>) -> u32;\n  raw: func(extra: list<u8>) -> u32;\n}\n",
    )])
    .expect("WIT loads");
    let name = "lrpc:blobs/store";
    let plan = wit.interface(name).unwrap();
    let shape = |code: &str, f: &str| -> String {
        let at = code.find(&format!("pub fn __serve_{f}")).expect("the stub");
        code[at..].lines().take(3).collect()
    };
    let owned = generate_rust(&plan);
    assert!(shape(&owned, "put").contains("in_mask: 0x2, strings: false"));
    let code = borrowed(&wit, name);
    assert!(
        shape(&code, "put").contains("in_mask: 0x2, strings: true"),
        "{code}"
    );
    assert!(code.contains("fn put<'a>(&self, b: Blob<'a>, extra: &'a [u8]) -> u32;"));
    // A byte list alone may still be read in place whole.
    assert!(shape(&code, "raw").contains("in_mask: 0x1, strings: false"));
}
