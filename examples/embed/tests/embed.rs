//! The embedding example runs on the project's key-value guests, and the README shows its
//! code as it is.

use std::path::Path;
use std::process::Command;

#[test]
fn the_example_runs_the_client_self_test_against_the_server() {
    let dir = std::env::temp_dir().join(format!("lrpc-embed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let server = dir.join("kv_server.wasm");
    let client = dir.join("kv_client.wasm");
    std::fs::write(&server, lrpc_artifacts::KV_SERVER).expect("write the server");
    std::fs::write(&client, lrpc_artifacts::KV_CLIENT).expect("write the client");
    let out = Command::new(env!("CARGO_BIN_EXE_embed"))
        .arg(&server)
        .arg(&client)
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("self-test passed"), "{stdout}");

    // A client without its server fails its bind check, and the example says so.
    let out = Command::new(env!("CARGO_BIN_EXE_embed"))
        .arg(&client)
        .arg(&client)
        .output()
        .expect("run the example");
    assert!(!out.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_argument_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_embed"))
        .output()
        .expect("run the example");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
}

/// Every line of the README's embedding snippet is a line of the example.
#[test]
fn the_readme_snippet_is_the_example_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let main = std::fs::read_to_string(root.join("examples/embed/src/main.rs")).expect("main.rs");
    let snippet = readme
        .split("```rust")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README.md has a ```rust block");
    let code: Vec<&str> = main.lines().map(str::trim).collect();
    let lines: Vec<&str> = snippet
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(!lines.is_empty());
    for line in lines {
        assert!(
            code.contains(&line),
            "README line not in the example: {line}"
        );
    }
}
