//! A server domain's processors ([`Processors`]): S OS threads running the server's loop
//! over its channels, parking when idle; the registry through which guests find them; and
//! the embedder's way to bind a channel to them.

use super::{AsyncBinding, ChannelOptions, ChannelShared, IDLE_SPIN, Lines};
use crate::error::Error;
use crate::state::domain::{Domain, DomainShared};
use crate::state::kernel::{Kernel, KernelInner};
use crate::sync::lock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a parked processor sleeps before it looks again on its own (a safety net: a
/// client wakes it when it publishes a request).
const PARK: Duration = Duration::from_millis(10);

/// A server domain's processors: S OS threads running its dispatch loop over its channels
/// (S may be 0: then the clients' idle processors run it, see the module docs). Dropping it
/// stops the threads; bindings made through it keep working by donation.
pub struct Processors {
    shared: Arc<ProcShared>,
    threads: Vec<JoinHandle<()>>,
}

/// What a server's processors share with the channels they serve and with those
/// channels' clients.
pub(crate) struct ProcShared {
    pub(super) kernel: Weak<KernelInner>,
    pub(crate) server: Arc<DomainShared>,
    pub(super) channels: Mutex<Vec<Weak<ChannelShared>>>,
    /// Bumped whenever `channels` changes, so processors refresh their copy.
    pub(super) version: AtomicU64,
    /// Processors running (0 once stopped: clients donate).
    pub(super) running: AtomicUsize,
    /// Processors running requests now (when all are, idle clients donate). Written twice
    /// per batch a processor serves; clients read `running` on every poll.
    pub(super) busy: Lines<AtomicUsize>,
    /// The status of the fault that terminated the server while it served one of these
    /// processors' channels (0: none).
    pub(super) fault: AtomicI32,
    pub(super) stop: AtomicBool,
    pub(super) sleepers: AtomicUsize,
    pub(super) park: Mutex<()>,
    pub(super) wake: Condvar,
}

impl ProcShared {
    /// Wakes a parked processor, if one is parked. The caller published its request before.
    pub(super) fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.park);
            self.wake.notify_one();
        }
    }
}

impl Processors {
    /// Starts `threads` processors for `server`.
    pub fn start(kernel: &Kernel, server: &Domain, threads: usize) -> Result<Processors, Error> {
        if !cfg!(target_arch = "x86_64") {
            return Err(Error::Presentation(
                "asynchronous channels need an x86-64 host (see the `channel` module docs)".into(),
            ));
        }
        let shared = Arc::new(ProcShared {
            kernel: Arc::downgrade(&kernel.inner),
            server: server.shared.clone(),
            channels: Mutex::new(Vec::new()),
            version: AtomicU64::new(0),
            running: AtomicUsize::new(threads),
            busy: Lines(AtomicUsize::new(0)),
            fault: AtomicI32::new(0),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
        });
        {
            // The registry through which guests' `channel_bind` finds these processors.
            let mut features = lock(&kernel.inner.features);
            let all = &mut features.get_or_default::<Registry>().0;
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&shared));
        }
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("lrpc-cpu-{}-{i}", server.name()))
                .spawn(move || processor(&s));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let _ = Processors {
                        shared,
                        threads: handles,
                    };
                    return Err(Error::Thread(e));
                }
            }
        }
        Ok(Processors {
            shared,
            threads: handles,
        })
    }

    /// How many processors the server has (S).
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// How many of them are running requests right now.
    pub fn busy(&self) -> usize {
        self.shared.busy.load(Ordering::Acquire)
    }

    /// Makes an asynchronous binding from the embedder to the interface exported under
    /// `name` by this server domain.
    pub fn bind(&self, name: &str, options: ChannelOptions) -> Result<AsyncBinding, Error> {
        let p = &self.shared;
        let kernel = p.kernel.upgrade().ok_or(Error::KernelGone)?;
        let export = kernel
            .clerk
            .get(name)
            .ok_or_else(|| Error::UnknownInterface(name.to_string()))?;
        if !Arc::ptr_eq(&export.server, &p.server) {
            return Err(Error::Presentation(format!(
                "`{name}` is not exported by `{}`",
                p.server.core.name
            )));
        }
        if p.server.core.terminated.load(Ordering::Acquire) {
            return Err(Error::Terminated(p.server.core.name.clone()));
        }
        let (ch, _segment) = ChannelShared::new(&kernel, p.clone(), export, options, false)?;
        let ch = Arc::new(ch);
        p.attach(&ch);
        Ok(AsyncBinding { ch })
    }
}

impl ProcShared {
    /// Puts a new channel on the processors' list.
    pub(super) fn attach(&self, ch: &Arc<ChannelShared>) {
        lock(&self.channels).push(Arc::downgrade(ch));
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The live processors registered for `server` (see [`Processors::start`]), the latest
    /// started first.
    pub(crate) fn of(kernel: &KernelInner, server: &Arc<DomainShared>) -> Option<Arc<ProcShared>> {
        lock(&kernel.features)
            .get::<Registry>()?
            .0
            .iter()
            .rev()
            .filter_map(Weak::upgrade)
            .find(|p| Arc::ptr_eq(&p.server, server) && !p.stop.load(Ordering::Acquire))
    }
}

/// Every server's processors (kept in the kernel's feature tables), so that a guest's
/// `channel_bind` finds the processors of the server it binds to.
#[derive(Default)]
struct Registry(Vec<Weak<ProcShared>>);

impl Drop for Processors {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _g = lock(&self.shared.park);
            self.shared.wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.shared.running.store(0, Ordering::Release);
    }
}

/// One processor: poll every channel of the server, run what is pending, park when idle.
fn processor(p: &ProcShared) {
    let mut seen = u64::MAX;
    let mut list: Vec<Arc<ChannelShared>> = Vec::new();
    let mut idle: Option<Instant> = None;
    while !p.stop.load(Ordering::Acquire) {
        let v = p.version.load(Ordering::Acquire);
        if v != seen {
            seen = v;
            let mut chans = lock(&p.channels);
            chans.retain(|w| w.upgrade().is_some_and(|c| !c.is_closed()));
            list = chans.iter().filter_map(Weak::upgrade).collect();
        }
        let mut did = 0;
        for ch in &list {
            did += ch.serve(true);
        }
        if did > 0 {
            idle = None;
            continue;
        }
        let since = *idle.get_or_insert_with(Instant::now);
        if since.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
            continue;
        }
        let g = lock(&p.park);
        p.sleepers.fetch_add(1, Ordering::SeqCst);
        let pending = list.iter().any(|c| c.pending());
        if !pending && !p.stop.load(Ordering::Acquire) && p.version.load(Ordering::Acquire) == seen
        {
            let _ = p.wake.wait_timeout(g, PARK);
        }
        p.sleepers.fetch_sub(1, Ordering::SeqCst);
        idle = None;
    }
}

/// Counts a processor as busy while it lives.
pub(super) struct BusyMark<'a>(&'a AtomicUsize);

impl<'a> BusyMark<'a> {
    pub(super) fn new(busy: &'a AtomicUsize) -> BusyMark<'a> {
        busy.fetch_add(1, Ordering::AcqRel);
        BusyMark(busy)
    }
}

impl Drop for BusyMark<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
