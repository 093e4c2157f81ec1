//! The book's CLI reference (`docs/src/cli.md`) shows every command's `--help` as the `lrpc`
//! binary prints it. This test makes that part of the page from the binary and compares:
//! a flag added, renamed or reworded without the page fails here.
//!
//! `LRPC_BLESS=1 cargo test -p lrpc-runtime --test cli_reference` rewrites the page's
//! generated part instead.

use std::path::Path;
use std::process::Command;

const LRPC: &str = env!("CARGO_BIN_EXE_lrpc");

/// The line after which the page is generated; what is above it is written by hand.
const MARK: &str = "<!-- Generated from `lrpc --help` by host/runtime/tests/cli_reference.rs: \
                    do not edit below. -->";

/// `lrpc ARGS --help`, as it prints it.
fn help(args: &[&str]) -> String {
    let out = Command::new(LRPC)
        .args(args)
        .arg("--help")
        .output()
        .expect("run lrpc --help");
    assert!(out.status.success(), "lrpc {args:?} --help failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// The generated part: `lrpc`, then each command (and its own commands), depth first.
fn generated() -> String {
    let mut out = String::new();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        let title = if path.is_empty() {
            "lrpc".to_string()
        } else {
            format!("lrpc {}", path.join(" "))
        };
        out.push_str(&format!(
            "\n## `{title}`\n\n```text\n{}\n```\n",
            text.trim_end()
        ));
        for c in commands(&text).into_iter().rev() {
            let mut next = path.clone();
            next.push(c);
            todo.push(next);
        }
    }
    out
}

#[test]
fn the_cli_reference_shows_every_command_s_help() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/cli.md");
    let text = std::fs::read_to_string(&page).expect("read docs/src/cli.md");
    let (hand, written) = text
        .split_once(MARK)
        .unwrap_or_else(|| panic!("docs/src/cli.md lacks the line {MARK}"));
    let made = generated();
    assert!(made.contains("## `lrpc serve`") && made.contains("## `lrpc new plugin`"));
    if std::env::var_os("LRPC_BLESS").is_some() {
        std::fs::write(&page, format!("{hand}{MARK}\n{made}")).expect("write docs/src/cli.md");
        return;
    }
    assert!(
        written.trim() == made.trim(),
        "docs/src/cli.md does not show what `lrpc --help` prints; rerun this test with \
         LRPC_BLESS=1 to rewrite its generated part, and read the difference"
    );
}
