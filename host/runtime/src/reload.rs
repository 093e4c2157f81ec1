//! Hot reload from files: a plugin (or a `wasi:http` handler) whose module is a file is
//! reloaded when the file
//! changes (written in place or replaced by a rename). The directories holding the files are
//! watched (a rename replaces the file's inode, which a watch on the file itself would lose);
//! events are debounced and a reload happens only when the bytes really changed.
//!
//! Only changes count: opening or reading a file (by anyone, the watcher's own reads
//! included) is no event here, and a file whose size and modification time are those last
//! seen is not read again. A file that failed to load is tried again only once its content
//! changes, not on every event.

use crate::deploy::{DeployError, Plugin};
use crate::wasi_http::HttpHandler;
use notify::{RecursiveMode, Watcher as _};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

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
    reads: Arc<AtomicU64>,
}

impl FileWatcher {
    /// How many times the watcher has read a watched file's bytes since it started.
    pub fn files_read(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

/// What the watcher last saw of a file: its size and modification time, and a hash of the
/// bytes it last read (loaded or not).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Seen {
    stamp: Option<(u64, SystemTime)>,
    hash: u64,
}

/// The size and modification time of `p`, if it can be read.
fn stamp(p: &std::path::Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(p).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// Starts watching the files of `plugins` (those that come from files); `None` when there
/// is nothing to watch.
pub fn watch<P: Reloadable + ?Sized>(plugins: &[Arc<P>]) -> notify::Result<Option<FileWatcher>>
where
    Arc<P>: Send + 'static,
{
    let mut files: BTreeMap<PathBuf, (Arc<P>, Seen)> = BTreeMap::new();
    let mut dirs = BTreeSet::new();
    for p in plugins {
        if let Some(f) = p.file() {
            let f = f.canonicalize().unwrap_or_else(|_| f.to_path_buf());
            let seen = Seen {
                stamp: stamp(&f),
                hash: std::fs::read(&f).map_or(0, |b| lrpc_abi_hash(&b)),
            };
            if let Some(d) = f.parent() {
                dirs.insert(d.to_path_buf());
            }
            files.insert(f, (p.clone(), seen));
        }
    }
    if files.is_empty() {
        return Ok(None);
    }
    let (tx, rx) = mpsc::channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        // Opening, reading and closing a file unchanged are accesses, not changes.
        if let Ok(ev) = ev
            && !matches!(ev.kind, notify::EventKind::Access(_))
        {
            for p in ev.paths {
                let _ = tx.send(p);
            }
        }
    })?;
    for d in &dirs {
        watcher.watch(d, RecursiveMode::NonRecursive)?;
    }
    let reads = Arc::new(AtomicU64::new(0));
    let counted = reads.clone();
    std::thread::Builder::new()
        .name("lrpc-reload".into())
        .spawn(move || reloader(files, &rx, &counted))
        .map_err(|e| notify::Error::generic(&e.to_string()))?;
    Ok(Some(FileWatcher {
        _watcher: watcher,
        reads,
    }))
}

fn lrpc_abi_hash(b: &[u8]) -> u64 {
    // FNV-1a, as the kernel keys its module cache.
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    }) ^ (b.len() as u64).rotate_left(32)
}

/// Reloads `plugin` from `p` if the file changed since `seen`, which it then updates: a
/// file whose size and modification time are unchanged is not read, and bytes that failed
/// to load are not tried again until they change.
fn check<P: Reloadable + ?Sized>(
    p: &std::path::Path,
    plugin: &P,
    seen: &mut Seen,
    reads: &AtomicU64,
) {
    let now = stamp(p);
    if now.is_none() || now == seen.stamp {
        return;
    }
    let Ok(bytes) = std::fs::read(p) else {
        return;
    };
    reads.fetch_add(1, Ordering::Relaxed);
    let hash = lrpc_abi_hash(&bytes);
    let changed = hash != seen.hash;
    *seen = Seen { stamp: now, hash };
    if !changed {
        return;
    }
    if let Err(e) = plugin.reload() {
        tracing::error!(
            plugin = plugin.name(),
            "reload from {} failed (tried again when the file changes): {e}",
            p.display()
        );
    }
}

fn reloader<P: Reloadable + ?Sized>(
    mut files: BTreeMap<PathBuf, (Arc<P>, Seen)>,
    rx: &mpsc::Receiver<PathBuf>,
    reads: &AtomicU64,
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
                        if let Some((plugin, seen)) = files.get_mut(&p) {
                            check(&p, &**plugin, seen, reads);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A domain whose reloads are counted, and fail while `broken` is set.
    struct Counted {
        file: PathBuf,
        reloads: AtomicUsize,
        broken: std::sync::atomic::AtomicBool,
    }

    impl Reloadable for Counted {
        fn name(&self) -> &str {
            "counted"
        }
        fn file(&self) -> Option<&std::path::Path> {
            Some(&self.file)
        }
        fn reload(&self) -> Result<u64, DeployError> {
            self.reloads.fetch_add(1, Ordering::SeqCst);
            if self.broken.load(Ordering::SeqCst) {
                return Err(DeployError::Unknown("broken".into()));
            }
            Ok(1)
        }
    }

    /// Waits until `f` holds, for at most 10 s (a loaded machine's watcher may lag).
    fn eventually(f: impl Fn() -> bool) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < until {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        f()
    }

    /// Reads `file` now and then for `span`, as `cat` would.
    fn read_for(file: &std::path::Path, span: Duration) {
        let until = std::time::Instant::now() + span;
        while std::time::Instant::now() < until {
            let _ = std::fs::read(file).expect("read the file");
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    #[test]
    fn reading_a_file_reloads_nothing_and_a_broken_file_is_tried_once_per_change() {
        let dir = std::env::temp_dir().join(format!("lrpc-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let file = dir.join("plugin.wasm");
        std::fs::write(&file, b"version 1").expect("write");
        let plugin = Arc::new(Counted {
            file: file.clone(),
            reloads: AtomicUsize::new(0),
            broken: true.into(),
        });
        let watcher = watch(std::slice::from_ref(&plugin))
            .expect("watch")
            .expect("a file to watch");

        // Reading the file is no change: nothing is read back, nothing reloaded.
        read_for(&file, Duration::from_millis(600));
        std::thread::sleep(DEBOUNCE * 3);
        assert_eq!(watcher.files_read(), 0);
        assert_eq!(plugin.reloads.load(Ordering::SeqCst), 0);

        // A broken version is tried once, and not again while it stays in place and is read.
        std::fs::write(&file, b"version 2, broken").expect("write");
        assert!(eventually(|| plugin.reloads.load(Ordering::SeqCst) == 1));
        read_for(&file, Duration::from_millis(600));
        std::thread::sleep(DEBOUNCE * 3);
        assert_eq!(plugin.reloads.load(Ordering::SeqCst), 1);
        let reads = watcher.files_read();
        assert!(reads >= 1);
        read_for(&file, Duration::from_millis(300));
        std::thread::sleep(DEBOUNCE * 3);
        assert_eq!(
            watcher.files_read(),
            reads,
            "the watcher read an unchanged file"
        );

        // A fixed version is loaded.
        plugin.broken.store(false, Ordering::SeqCst);
        std::fs::write(&file, b"version 3, fixed").expect("write");
        assert!(eventually(|| plugin.reloads.load(Ordering::SeqCst) == 2));
        drop(watcher);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
