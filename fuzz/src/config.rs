//! The deployment config parser (`lrpc_runtime::config::Config::parse`) on arbitrary text;
//! the seeds are the committed example configs (`guests/apps/*/*.toml`).
//!
//! The text is checked as `guests/apps/kv/lrpc.toml`, so that the relative paths of the
//! examples (`../../comp-wit`, modules, preopens) resolve as they do for the real files: the
//! parser looks at the file system (is a path a file or a folder, the first bytes of a
//! module) and the environment (`admin-token-env`), reading only.

use lrpc_remote::Endpoint;
use lrpc_runtime::config::Config;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The longest text looked at.
pub const MAX_INPUT: usize = 16 << 10;

/// The longest reason an error gives, in characters: `config.rs` cuts reasons at 240
/// characters and adds an ellipsis.
const MAX_REASON: usize = 241;

/// Where the text is said to come from.
fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| crate::repo_root().join("guests/apps/kv/lrpc.toml"))
}

/// Runs one input: the bytes as text (invalid UTF-8 replaced: `Config::load` refuses it
/// before parsing) through `Config::parse`. An error names the file, a line within the text
/// (1-based) and a non-empty reason of bounded length, and displays as `file:line: reason`.
/// The text's first lines are also parsed as remote endpoints (the `endpoint` and `listen`
/// values of a config): one accepted displays as a string that parses back into it.
pub fn run(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let text = String::from_utf8_lossy(data);
    let path = path();
    if let Err(e) = Config::parse(path, &text) {
        let file = path.display().to_string();
        assert_eq!(e.file, file);
        let lines = text.matches('\n').count() + 1;
        assert!(
            (1..=lines).contains(&e.line),
            "line {} of a text of {lines} lines: {e}",
            e.line
        );
        assert!(
            !e.reason.is_empty(),
            "an error without a reason at {}",
            e.line
        );
        assert!(
            e.reason.chars().count() <= MAX_REASON,
            "a reason of {} characters",
            e.reason.chars().count()
        );
        assert_eq!(e.to_string(), format!("{file}:{}: {}", e.line, e.reason));
    }
    for line in text.lines().take(4) {
        if let Ok(ep) = line.trim().parse::<Endpoint>() {
            let shown = ep.to_string();
            assert_eq!(
                shown.parse::<Endpoint>().as_ref(),
                Ok(&ep),
                "`{line}` displays as `{shown}`"
            );
        }
    }
}
