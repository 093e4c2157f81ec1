//! `lrpc new`: starts a crate from a template that builds and serves as it is.
//!
//! `lrpc new plugin NAME` writes an HTTP plugin crate (`lrpc:http/plugin@0.2.0`, header values
//! as bytes) into the folder
//! `NAME`: a core module built with the guest SDK, or with `--component` a `wasm32-wasip2`
//! component built with wit-bindgen, each with an `lrpc.toml` that serves it. The template
//! files are real files under `host/runtime/templates/`, embedded here, with placeholders:
//! `@NAME@` (the package name), `@CRATE@` (its Rust name, with `_` for `-`) and `@ROOT@`
//! (this lrpc checkout, which the core plugin's path dependencies point into).

use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};

/// `lrpc new`'s arguments.
#[derive(Debug, clap::Args)]
pub struct New {
    /// What to start.
    #[command(subcommand)]
    pub template: Template,
}

/// The template `lrpc new` starts from.
#[derive(Debug, clap::Subcommand)]
pub enum Template {
    /// An HTTP plugin crate (`lrpc:http/plugin@0.2.0`) with an `lrpc.toml` that serves it.
    Plugin(Plugin),
}

/// `lrpc new plugin`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Plugin {
    /// The crate's name: lowercase letters, digits and `-`, starting with a letter.
    pub name: String,
    /// Make a component (wit-bindgen, `wasm32-wasip2`) instead of a core module.
    #[arg(long)]
    pub component: bool,
    /// The folder to write the crate into (default: NAME, in the current folder). It must
    /// not exist, or be empty.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The lrpc checkout whose guest SDK the plugin uses (default: the environment variable
    /// LRPC_ROOT, else the checkout this command was built from).
    #[arg(long)]
    pub root: Option<PathBuf>,
}

/// The lrpc checkout this command was built from (`host/runtime` → `../..`).
pub const BUILT_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// `lrpc:http/plugin@0.2.0`'s WIT, which the component template carries in its `wit/` folder.
const HTTP_WIT: &str = include_str!("../../../wit/http-bytes.wit");

/// The core plugin's files: path in the crate, text with placeholders.
const CORE: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../templates/plugin-core/Cargo.toml"),
    ),
    (
        ".cargo/config.toml",
        include_str!("../templates/plugin-core/.cargo/config.toml"),
    ),
    (
        ".gitignore",
        include_str!("../templates/plugin-core/.gitignore"),
    ),
    (
        "build.rs",
        include_str!("../templates/plugin-core/build.rs"),
    ),
    (
        "src/lib.rs",
        include_str!("../templates/plugin-core/src/lib.rs"),
    ),
    (
        "lrpc.toml",
        include_str!("../templates/plugin-core/lrpc.toml"),
    ),
];

/// The component plugin's files.
const COMPONENT: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../templates/plugin-component/Cargo.toml"),
    ),
    (
        ".cargo/config.toml",
        include_str!("../templates/plugin-component/.cargo/config.toml"),
    ),
    (
        ".gitignore",
        include_str!("../templates/plugin-component/.gitignore"),
    ),
    (
        "src/lib.rs",
        include_str!("../templates/plugin-component/src/lib.rs"),
    ),
    (
        "lrpc.toml",
        include_str!("../templates/plugin-component/lrpc.toml"),
    ),
    ("wit/http-bytes.wit", HTTP_WIT),
];

/// Names the generated crate can not take: Rust's keywords and reserved crate names (its
/// library would not compile), its own dependencies, and the other domain of its `lrpc.toml`.
const RESERVED: &[&str] = &[
    "abstract",
    "alloc",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "build",
    "const",
    "continue",
    "core",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "greeter",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "lrpc-abi",
    "lrpc-presentation",
    "lrpc-sdk",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "proc-macro",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "std",
    "struct",
    "super",
    "test",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "wit-bindgen",
    "yield",
];

/// Checks a crate name: a cargo package name made of lowercase letters, digits and `-`,
/// starting with a letter, that is not reserved.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    const HINT: &str = "a plugin's name is lowercase letters, digits and `-`, starting with a \
                        letter, e.g. `hello-plugin`";
    let Some(first) = name.chars().next() else {
        bail!("the plugin's name is empty: {HINT}");
    };
    if !first.is_ascii_lowercase() {
        bail!("`{name}` does not start with a lowercase letter: {HINT}");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        bail!("`{name}` has the character {c:?}: {HINT}");
    }
    if name.ends_with('-') {
        bail!("`{name}` ends with `-`: {HINT}");
    }
    if name.len() > 64 {
        bail!("`{name}` is longer than 64 characters: {HINT}");
    }
    if RESERVED.contains(&name) {
        bail!(
            "`{name}` is reserved (a Rust keyword, a standard crate, a dependency of the \
             plugin, or the generated lrpc.toml's other domain): choose another name"
        );
    }
    Ok(())
}

/// A crate written by [`plugin`].
#[derive(Debug)]
pub struct Created {
    /// The crate's folder.
    pub dir: PathBuf,
    /// The files written, relative to `dir`.
    pub files: Vec<&'static str>,
    /// The module `cargo build --release` makes, relative to `dir`; `lrpc.toml` loads it.
    pub wasm: String,
}

/// Writes a plugin crate as `args` asks; what it wrote. Refuses a bad name, a folder that
/// exists and is not empty, and (for a core plugin) a root that is not an lrpc checkout.
pub fn plugin(args: &Plugin) -> anyhow::Result<Created> {
    check_name(&args.name)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    check_dir(&dir)?;
    let krate = args.name.replace('-', "_");
    let (files, target, root) = if args.component {
        (COMPONENT, "wasm32-wasip2", String::new())
    } else {
        let root = find_root(args.root.clone())?;
        (CORE, "wasm32-unknown-unknown", toml_escape(&root))
    };
    for (path, text) in files {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating the folder {}", parent.display()))?;
        }
        let text = text
            .replace("@NAME@", &args.name)
            .replace("@CRATE@", &krate)
            .replace("@ROOT@", &root);
        // `create_new`: a file that appeared meanwhile is an error, never overwritten.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(Created {
        dir,
        files: files.iter().map(|(p, _)| *p).collect(),
        wasm: format!("target/{target}/release/{krate}.wasm"),
    })
}

/// Refuses a folder that exists and is not empty, or a path that is not a folder.
fn check_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.as_os_str().is_empty() {
        bail!("the folder's path is empty: give a folder with --dir, or leave --dir out");
    }
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "the folder {} exists and is not empty: give another name, or another \
                     folder with --dir",
                    dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if dir.exists() => bail!(
            "{} exists and is not a folder: give another name, or another folder with --dir",
            dir.display()
        ),
        Err(e) => Err(e).with_context(|| format!("reading the folder {}", dir.display())),
    }
}

/// The lrpc checkout: `--root`, else `LRPC_ROOT`, else [`BUILT_ROOT`]; absolute, and checked
/// to hold the guest SDK and the stub generator.
fn find_root(given: Option<PathBuf>) -> anyhow::Result<String> {
    let (root, from) = match (given, std::env::var_os("LRPC_ROOT")) {
        (Some(r), _) => (r, "--root"),
        (None, Some(r)) if !r.is_empty() => (PathBuf::from(r), "LRPC_ROOT"),
        _ => (
            PathBuf::from(BUILT_ROOT),
            "the checkout `lrpc` was built from",
        ),
    };
    let fix = "give the lrpc checkout's folder with --root DIR (or the environment variable \
               LRPC_ROOT)";
    let Ok(abs) = std::fs::canonicalize(&root) else {
        bail!("no lrpc checkout at {} ({from}): {fix}", root.display());
    };
    for needed in [
        "guests/sdk/Cargo.toml",
        "presentation/Cargo.toml",
        "wit/http-bytes.wit",
    ] {
        if !abs.join(needed).is_file() {
            bail!(
                "{} ({from}) is not an lrpc checkout: it has no {needed}; {fix}",
                abs.display()
            );
        }
    }
    abs.into_os_string().into_string().map_err(|p| {
        anyhow::anyhow!(
            "the lrpc checkout's path {} is not UTF-8: cargo's config can not name it; move \
             the checkout, or {fix}",
            Path::new(&p).display()
        )
    })
}

/// `s` escaped for a TOML basic string (between `"`).
fn toml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `lrpc new`: writes the crate and prints what to do next.
pub fn run(new: &New) -> anyhow::Result<()> {
    let Template::Plugin(args) = &new.template;
    let made = plugin(args)?;
    let kind = if args.component {
        "a component (wasm32-wasip2)"
    } else {
        "a core module (wasm32-unknown-unknown)"
    };
    let dir = made.dir.display().to_string();
    let cd = if dir.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
        format!("'{}'", dir.replace('\'', r"'\''"))
    } else {
        dir.clone()
    };
    println!(
        "created {dir}: the HTTP plugin `{}`, {kind}\n\
         \n\
         next:\n\
         \x20   cd {cd}\n\
         \x20   cargo build --release          # builds {}\n\
         \x20   lrpc serve lrpc.toml           # serves it on http://127.0.0.1:8080\n\
         \x20   curl localhost:8080/hi         # in another terminal: the plugin answers\n\
         \x20   curl localhost:8080/pass/hi    # the plugin passes it on, and greeter answers\n\
         \n\
         Without an installed lrpc, serve it from the lrpc checkout:\n\
         \x20   cargo run --release -p lrpc-runtime -- serve {}",
        args.name,
        made.wasm,
        std::path::absolute(made.dir.join("lrpc.toml"))
            .unwrap_or_else(|_| made.dir.join("lrpc.toml"))
            .display(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["hello-plugin", "a", "p2", "my-plugin-3"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "", "Hello", "1st", "-a", "a-", "a_b", "a b", "a.b", "héllo", "fn", "std", "greeter",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"a".repeat(65)).is_err());
    }

    #[test]
    fn an_empty_folder_path_is_refused() {
        let args = Plugin {
            name: "x".into(),
            component: true,
            dir: Some(PathBuf::new()),
            root: None,
        };
        let e = plugin(&args).expect_err("an empty path");
        assert!(e.to_string().contains("--dir"), "{e}");
    }

    #[test]
    fn escapes() {
        assert_eq!(toml_escape(r#"C:\a "b""#), r#"C:\\a \"b\""#);
        assert_eq!(toml_escape("a\nb"), "a\\u000Ab");
    }

    /// Every placeholder in the templates is one `plugin` fills in.
    #[test]
    fn placeholders() {
        for (path, text) in CORE.iter().chain(COMPONENT) {
            let filled = text
                .replace("@NAME@", "")
                .replace("@CRATE@", "")
                .replace("@ROOT@", "");
            // A placeholder is `@` and capitals then `@`; other `@`s are text (versions).
            let unknown = filled.split('@').skip(1).any(|rest| {
                let caps = rest.len()
                    - rest
                        .trim_start_matches(|c: char| c.is_ascii_uppercase() || c == '_')
                        .len();
                caps > 0 && rest[caps..].starts_with('@')
            });
            assert!(!unknown, "{path}: an unknown placeholder");
            assert!(!filled.contains("@@"), "{path}: an empty placeholder");
        }
    }
}
