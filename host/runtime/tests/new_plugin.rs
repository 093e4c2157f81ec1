//! `lrpc new plugin`, used as `docs/src/write-a-plugin.md` tells a user to: the real binary
//! writes a crate into an empty folder, the real cargo builds it, `lrpc serve` serves the
//! crate's own `lrpc.toml`, and requests over loopback get the plugin's answers. Both kinds:
//! a core module and a component. Then the mistakes: bad names, a folder in the way, a root
//! that is not an lrpc checkout.
//!
//! The generated crates build into one shared target folder, `target/plugin-template` (their
//! dependencies are built once, so a rerun takes seconds), and the built module is copied to
//! where the generated `lrpc.toml` expects cargo's default target folder to put it.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

mod common;
use common::{Reply, request};

const LRPC: &str = env!("CARGO_BIN_EXE_lrpc");

/// The workspace's root folder.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh folder for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("lrpc-new-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch folder");
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `lrpc ARGS` in `dir`, with the default project root.
fn lrpc(dir: &Path, args: &[&str]) -> Output {
    Command::new(LRPC)
        .args(args)
        .current_dir(dir)
        .env_remove("LRPC_ROOT")
        .output()
        .expect("run lrpc")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `lrpc ARGS` in `dir` fails, saying `what`; its error message.
fn fails(dir: &Path, args: &[&str], what: &str) -> String {
    let out = lrpc(dir, args);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "lrpc {args:?} succeeded: {out:?}");
    assert!(
        err.starts_with("error: ") && err.contains(what),
        "lrpc {args:?}: {err:?} does not say {what:?}"
    );
    assert!(!err.contains("panicked"), "lrpc {args:?} panicked: {err}");
    err
}

/// The files under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).expect("under root");
                out.push(rel.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// `cargo build --release` in `krate` as a user runs it (the crate's `.cargo/config.toml`
/// picks the target), into the shared target folder; then the module is copied to `wasm`,
/// the path (relative to the crate) where the crate's `lrpc.toml` loads it from.
fn cargo_build(krate: &Path, target: &str, wasm: &str) {
    let target_dir = workspace().join("target/plugin-template");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--release"]).current_dir(krate);
    // After the scrub, which would remove it when this test's own environment has one.
    scrub_env(&mut cmd);
    cmd.env("CARGO_TARGET_DIR", &target_dir);
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build --release in {} failed:\n{}",
        krate.display(),
        text(&out.stderr)
    );
    let file = Path::new(wasm).file_name().expect("a file name");
    let built = target_dir.join(target).join("release").join(file);
    let to = krate.join(wasm);
    std::fs::create_dir_all(to.parent().expect("a folder")).expect("create the target folder");
    std::fs::copy(&built, &to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", built.display(), to.display()));
}

/// The nested cargo must not inherit this test's cargo settings, flags or wrappers (as
/// `host/artifacts/build.rs` keeps its nested build apart).
fn scrub_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let keep = matches!(k, "CARGO_HOME" | "CARGO_NET_OFFLINE")
            || k.starts_with("CARGO_REGISTRIES_")
            || k.starts_with("CARGO_HTTP_")
            || k.starts_with("CARGO_NET_");
        let drop = (k.starts_with("CARGO_") && !keep)
            || matches!(
                k,
                "RUSTFLAGS"
                    | "RUSTDOCFLAGS"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "MAKEFLAGS"
                    | "MFLAGS"
            );
        if drop {
            cmd.env_remove(k);
        }
    }
}

/// The `wasm` path of domain `name` in the config `file`.
fn configured_wasm(file: &Path, name: &str) -> String {
    let config: toml::Table = std::fs::read_to_string(file)
        .expect("read lrpc.toml")
        .parse()
        .expect("lrpc.toml is TOML");
    config["domains"][name]["wasm"]
        .as_str()
        .expect("the plugin's domain names a wasm file")
        .to_string()
}

/// A running `lrpc serve lrpc.toml` in a crate's folder, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    /// Serves `dir`'s `lrpc.toml` as the chapter does, on a free port (`--listen`): the
    /// server prints the address it bound.
    fn start(dir: &Path) -> Server {
        let mut child = Command::new(LRPC)
            .args(["serve", "lrpc.toml", "--listen", "127.0.0.1:0"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lrpc serve");
        let stdout = child.stdout.take().expect("stdout");
        // The guard exists before the first read, so a server that fails is still reaped.
        let mut server = Server {
            child,
            addr: String::new(),
        };
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the address");
        server.addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("lrpc serve did not start (first line {line:?})"))
            .to_string();
        server
    }

    fn get(&self, path: &str) -> Reply {
        request(&self.addr, "GET", path, &[], b"")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chapter's steps for one kind of plugin: `lrpc new plugin NAME ARGS` in a folder,
/// `cd`, `cargo build --release`, `lrpc serve lrpc.toml`, then `curl /hi` (the plugin answers)
/// and `curl /pass/hi` (it passes the request on, and the built-in greeter answers).
fn new_build_serve(name: &str, args: &[&str], folder: &str, target: &str) {
    let scratch = Scratch::new(name);
    let mut cmd = vec!["new", "plugin", name];
    cmd.extend_from_slice(args);
    let out = lrpc(&scratch.0, &cmd);
    let said = text(&out.stdout);
    assert!(out.status.success(), "lrpc {cmd:?}: {}", text(&out.stderr));
    for next in [
        format!("cd {folder}\n"),
        "cargo build --release".into(),
        "lrpc serve lrpc.toml".into(),
        "curl localhost:8080/hi".into(),
    ] {
        assert!(
            said.contains(&next),
            "the next steps lack {next:?}:\n{said}"
        );
    }
    let krate = scratch.0.join(folder);

    let lib = name.replace('-', "_");
    let wasm = configured_wasm(&krate.join("lrpc.toml"), name);
    assert_eq!(
        wasm,
        format!("target/{target}/release/{lib}.wasm"),
        "lrpc.toml loads the module from where `cargo build --release` puts it"
    );
    cargo_build(&krate, target, &wasm);

    let server = Server::start(&krate);
    let hi = server.get("/hi");
    assert_eq!(hi.status, 200, "{hi:?}");
    assert_eq!(hi.text(), format!("hello from {name} at GET /hi\n"));
    assert_eq!(hi.header("x-plugin"), Some(name));
    assert_eq!(hi.header("content-type"), Some("text/plain"));

    let passed = server.get("/pass/hi?x=1");
    assert_eq!(passed.status, 200, "{passed:?}");
    assert_eq!(passed.text(), "hello anonymous at GET /hi?x=1\n");
    assert_eq!(passed.header("x-plugin"), Some("hello"));

    // `/pass` alone is not under `/pass/`: the plugin answers it.
    let pass = server.get("/pass");
    assert_eq!(pass.text(), format!("hello from {name} at GET /pass\n"));
}

#[test]
fn core_plugin_builds_and_serves() {
    new_build_serve(
        "hello-plugin",
        &[],
        "hello-plugin",
        "wasm32-unknown-unknown",
    );
}

#[test]
fn component_plugin_builds_and_serves() {
    new_build_serve(
        "hello-component",
        &["--component", "--dir", "comp"],
        "comp",
        "wasm32-wasip2",
    );
}

/// The body of the first code block in `text` that opens with the line `fence`.
fn fenced(text: &str, fence: &str) -> Option<String> {
    let start = text.find(&format!("{fence}\n"))? + fence.len() + 1;
    let len = text[start..].find("\n```")?;
    Some(text[start..=start + len].to_owned())
}

/// The chapter's "Unit test the handler": its test module, added to a new core plugin, passes
/// on the host with the command the chapter shows, run as a shell runs it.
#[test]
fn the_chapter_s_unit_tests_pass_natively() {
    let chapter = std::fs::read_to_string(workspace().join("docs/src/write-a-plugin.md"))
        .expect("read docs/src/write-a-plugin.md");
    let (_, section) = chapter
        .split_once("### Unit test the handler")
        .expect("the chapter has the section \"Unit test the handler\"");
    let tests = fenced(section, "```rust,ignore").expect("the section shows a Rust block");
    let command = fenced(section, "```sh").expect("the section shows a command");
    assert!(tests.starts_with("#[cfg(test)]"), "{tests}");
    assert!(command.starts_with("cargo test --target "), "{command}");

    let scratch = Scratch::new("unit");
    let out = lrpc(&scratch.0, &["new", "plugin", "hello-plugin"]);
    assert!(
        out.status.success(),
        "lrpc new plugin: {}",
        text(&out.stderr)
    );
    let krate = scratch.0.join("hello-plugin");
    let lib = krate.join("src/lib.rs");
    let code = std::fs::read_to_string(&lib).expect("read src/lib.rs");
    std::fs::write(&lib, format!("{code}\n{tests}")).expect("write src/lib.rs");

    let mut cmd = Command::new("sh");
    cmd.args(["-c", command.trim()]).current_dir(&krate);
    scrub_env(&mut cmd);
    // The shared target folder, and the cargo that runs this test first on the PATH.
    cmd.env(
        "CARGO_TARGET_DIR",
        workspace().join("target/plugin-template"),
    );
    let cargo_dir = Path::new(env!("CARGO")).parent().expect("cargo's folder");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(cargo_dir.to_path_buf()).chain(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(paths).expect("a PATH"));
    let out = cmd.output().expect("run sh");
    let said = text(&out.stdout);
    assert!(
        out.status.success(),
        "`{}` failed:\n{said}\n{}",
        command.trim(),
        text(&out.stderr)
    );
    for test in ["answers_a_request", "passes_on_what_is_under_pass"] {
        assert!(
            said.contains(&format!("test tests::{test} ... ok")),
            "{test} did not pass:\n{said}"
        );
    }
}

#[test]
fn bad_names_are_refused() {
    let scratch = Scratch::new("names");
    for (name, what) in [
        ("Hello", "does not start with a lowercase letter"),
        ("1st", "does not start with a lowercase letter"),
        ("-x", "does not start with a lowercase letter"),
        ("my_plugin", "has the character '_'"),
        ("my plugin", "has the character ' '"),
        ("x-", "ends with `-`"),
        ("fn", "is reserved"),
        ("greeter", "is reserved"),
        ("lrpc-sdk", "is reserved"),
    ] {
        let err = fails(&scratch.0, &["new", "plugin", "--", name], what);
        assert!(err.contains("lowercase letters, digits and `-`") || err.contains("another name"));
    }
    fails(
        &scratch.0,
        &["new", "plugin", ""],
        "the plugin's name is empty",
    );
    assert_eq!(files(&scratch.0), Vec::<String>::new(), "nothing written");
}

#[test]
fn an_existing_folder_is_never_overwritten() {
    let scratch = Scratch::new("existing");
    let taken = scratch.0.join("taken");
    std::fs::create_dir_all(&taken).expect("create");
    std::fs::write(taken.join("Cargo.toml"), "mine\n").expect("write");
    for args in [
        &["new", "plugin", "taken"][..],
        &["new", "plugin", "taken", "--component"],
        &["new", "plugin", "other", "--dir", "taken"],
    ] {
        fails(&scratch.0, args, "exists and is not empty");
    }
    assert_eq!(files(&taken), vec!["Cargo.toml".to_string()]);
    assert_eq!(
        std::fs::read_to_string(taken.join("Cargo.toml")).expect("read"),
        "mine\n"
    );
    fails(
        &scratch.0,
        &["new", "plugin", "x", "--dir", ""],
        "a value is required for '--dir",
    );
    std::fs::write(scratch.0.join("file"), "").expect("write");
    fails(
        &scratch.0,
        &["new", "plugin", "x", "--dir", "file"],
        "is not a folder",
    );

    // An empty folder is fine.
    std::fs::create_dir_all(scratch.0.join("empty")).expect("create");
    let out = lrpc(&scratch.0, &["new", "plugin", "fresh", "--dir", "empty"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(files(&scratch.0.join("empty")).contains(&"src/lib.rs".to_string()));
}

#[test]
fn a_root_that_is_not_a_checkout_is_refused() {
    let scratch = Scratch::new("root");
    fails(
        &scratch.0,
        &["new", "plugin", "x", "--root", "nowhere"],
        "no lrpc checkout at nowhere (--root)",
    );
    fails(
        &scratch.0,
        &["new", "plugin", "x", "--root", "."],
        "is not an lrpc checkout: it has no guests/sdk/Cargo.toml",
    );
    let out = Command::new(LRPC)
        .args(["new", "plugin", "x"])
        .current_dir(&scratch.0)
        .env("LRPC_ROOT", "nowhere")
        .output()
        .expect("run lrpc");
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("(LRPC_ROOT)"), "{out:?}");
    assert_eq!(files(&scratch.0), Vec::<String>::new(), "nothing written");

    // Given explicitly, the checkout lands in the crate's manifest as an absolute path.
    let root = workspace().canonicalize().expect("the workspace");
    let root = root.to_str().expect("a UTF-8 path");
    let out = lrpc(&scratch.0, &["new", "plugin", "x", "--root", root]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let manifest = std::fs::read_to_string(scratch.0.join("x/Cargo.toml")).expect("read");
    assert!(manifest.contains(&format!("path = \"{root}/guests/sdk\"")));
}
