//! `[kernel]`: the default deadline of a call, the WIT folders beside the embedded WIT, and
//! the compile cache.

use super::raw::*;
use super::spec::*;
use super::text::{ConfigError, Ctx};
use std::time::Duration;

/// The `[kernel]` table, checked.
pub(super) struct KernelTable {
    pub(super) deadline: Option<Duration>,
    pub(super) wit: Vec<WitFolder>,
    pub(super) cache: CompileCache,
}

/// Checks the `[kernel]` table: every WIT folder exists; `cache-dir` is a folder, `true`
/// (the per-user cache, also the default) or `false`.
pub(super) fn kernel(cx: &Ctx<'_>, k: &RawKernel) -> Result<KernelTable, ConfigError> {
    let deadline = k.deadline.as_ref().map(|d| cx.duration(d)).transpose()?;
    let mut wit = Vec::new();
    for w in &k.wit {
        let dir = cx.path(w);
        if !dir.is_dir() {
            return Err(cx.err(w, format!("no WIT folder {}", dir.display())));
        }
        wit.push(WitFolder {
            path: dir,
            line: cx.line(w.span().start),
        });
    }
    let cache = match k.cache_dir.as_ref().map(|d| (d, d.get_ref())) {
        Some((_, RawCacheDir::On(false))) => CompileCache::Off,
        Some((d, RawCacheDir::Folder(f))) => {
            if f.is_empty() {
                return Err(cx.err(
                    d,
                    "`cache-dir` is an empty path: name a folder, or say `false`",
                ));
            }
            CompileCache::Folder(cx.dir.join(f))
        }
        None | Some((_, RawCacheDir::On(true))) => CompileCache::per_user(),
    };
    Ok(KernelTable {
        deadline,
        wit,
        cache,
    })
}
