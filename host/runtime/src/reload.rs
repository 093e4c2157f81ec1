//! Hot reload from files: a plugin (or a `wasi:http` handler) whose module is a file is
//! reloaded when the file
//! changes (written in place or replaced by a rename). The directories holding the files are
//! watched (a rename replaces the file's inode, which a watch on the file itself would lose);
//! events are debounced and a reload happens only when the bytes really changed.

use crate::deploy::{DeployError, Plugin};
use crate::wasi_http::HttpHandler;
use notify::{RecursiveMode, Watcher as _};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

/// How long a file must stay quiet before it is reloaded.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// A domain the edge can swap for a fresh one from its file.
pub trait Reloadable: Send + Sync {
    /// The domain's name.
    fn name(&self) -> &str;
    /// The file it comes from, if any.
    fn file(&self) -> Option<&std::path::Path>;
    /// Swaps in a fresh generation from the file's bytes; its number.
    fn reload(&self) -> Result<u64, DeployError>;
}

impl Reloadable for Plugin {
    fn name(&self) -> &str {
        &self.name
    }
    fn file(&self) -> Option<&std::path::Path> {
        Plugin::file(self)
    }
    fn reload(&self) -> Result<u64, DeployError> {
        Plugin::reload(self)
    }
}

impl Reloadable for HttpHandler {
    fn name(&self) -> &str {
        &self.name
    }
    fn file(&self) -> Option<&std::path::Path> {
        HttpHandler::file(self)
    }
    fn reload(&self) -> Result<u64, DeployError> {
        HttpHandler::reload(self)
    }
}

/// The plugins and `wasi:http` handlers of a deployment, for [`watch`].
pub fn reloadable(dep: &crate::deploy::Deployment) -> Vec<Arc<dyn Reloadable>> {
    let plugins = dep
        .plugins
        .values()
        .map(|p| p.clone() as Arc<dyn Reloadable>);
    let handlers = dep
        .handlers
        .values()
        .map(|h| h.clone() as Arc<dyn Reloadable>);
    plugins.chain(handlers).collect()
}

/// Watches the plugins' files until dropped.
pub struct FileWatcher {
    _watcher: notify::RecommendedWatcher,
}

/// Starts watching the files of `plugins` (those that come from files); `None` when there
/// is nothing to watch.
pub fn watch<P: Reloadable + ?Sized>(plugins: &[Arc<P>]) -> notify::Result<Option<FileWatcher>>
where
    Arc<P>: Send + 'static,
{
    let mut files: BTreeMap<PathBuf, (Arc<P>, u64)> = BTreeMap::new();
    let mut dirs = BTreeSet::new();
    for p in plugins {
        if let Some(f) = p.file() {
            let f = f.canonicalize().unwrap_or_else(|_| f.to_path_buf());
            let hash = std::fs::read(&f).map_or(0, |b| lrpc_abi_hash(&b));
            if let Some(d) = f.parent() {
                dirs.insert(d.to_path_buf());
            }
            files.insert(f, (p.clone(), hash));
        }
    }
    if files.is_empty() {
        return Ok(None);
    }
    let (tx, rx) = mpsc::channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if let Ok(ev) = ev {
            for p in ev.paths {
                let _ = tx.send(p);
            }
        }
    })?;
    for d in &dirs {
        watcher.watch(d, RecursiveMode::NonRecursive)?;
    }
    std::thread::Builder::new()
        .name("lrpc-reload".into())
        .spawn(move || reloader(files, &rx))
        .map_err(|e| notify::Error::generic(&e.to_string()))?;
    Ok(Some(FileWatcher { _watcher: watcher }))
}

fn lrpc_abi_hash(b: &[u8]) -> u64 {
    // FNV-1a, as the kernel keys its module cache.
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    }) ^ (b.len() as u64).rotate_left(32)
}

fn reloader<P: Reloadable + ?Sized>(
    mut files: BTreeMap<PathBuf, (Arc<P>, u64)>,
    rx: &mpsc::Receiver<PathBuf>,
) {
    let mut pending: BTreeSet<PathBuf> = BTreeSet::new();
    loop {
        let next = if pending.is_empty() {
            rx.recv().ok()
        } else {
            match rx.recv_timeout(DEBOUNCE) {
                Ok(p) => Some(p),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    for p in std::mem::take(&mut pending) {
                        let Some((plugin, hash)) = files.get_mut(&p) else {
                            continue;
                        };
                        let Ok(bytes) = std::fs::read(&p) else {
                            continue;
                        };
                        let h = lrpc_abi_hash(&bytes);
                        if h == *hash {
                            continue;
                        }
                        match plugin.reload() {
                            Ok(_) => *hash = h,
                            Err(e) => tracing::error!(
                                plugin = plugin.name(),
                                "reload from {} failed: {e}",
                                p.display()
                            ),
                        }
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        };
        let Some(p) = next else { return };
        let p = p.canonicalize().unwrap_or(p);
        if files.contains_key(&p) {
            pending.insert(p);
        }
    }
}
