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
