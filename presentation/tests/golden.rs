//! Generated stubs are checked against golden files; `BLESS=1 cargo test` regenerates them.

use lrpc_presentation::{Wit, generate_rust};
use std::path::Path;

#[test]
fn generated_stubs_match_the_golden_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wit = Wit::load_dir(&root.join("../wit")).expect("project WIT");
    let bless = std::env::var_os("BLESS").is_some();
    let mut names = wit.interface_names();
    names.sort();
    assert!(!names.is_empty());
    for name in names {
        let code = generate_rust(&wit.interface(&name).unwrap());
        let file = root
            .join("tests/golden")
            .join(format!("{}.rs.txt", name.replace([':', '/'], "_")));
        if bless {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &code).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e} (run with BLESS=1 to create it)", file.display()));
        assert!(
            want == code,
            "stubs for {name} differ from {} (run with BLESS=1 to accept)",
            file.display()
        );
    }
}
