//! Pacing of long guest computations by the thread that runs them.
//!
//! A call migrates the calling thread into the server, so the thread, not the domain, knows
//! what kind of work it is doing: an embedder that runs short requests beside long
//! computations can have the threads of the long ones give way. A thread installs a hook
//! with [`set_tick_hook`]; while that thread runs guest code, in any domain it has migrated
//! into, the hook runs at every epoch tick (see [`KernelConfig::tick`]), after the deadline
//! and termination checks. It may sleep: the guest's computation pauses where it is, and the
//! call's deadline keeps counting. `at_tick` is what every Store, core replica or component,
//! does at an epoch tick: the termination and deadline checks, then the hook.
//!
//! A second hook, [`set_wait_hook`], runs when the thread is about to wait for a `Store`
//! another thread holds (after a short spin): an embedder that runs calls on a thread which
//! must not block for long (an async reactor's) learns that it is about to.
//!
//! [`KernelConfig::tick`]: crate::KernelConfig::tick

use crate::error::Interrupt;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use wasmtime::UpdateDeadline;

/// A hook run at epoch ticks (see the module docs). Its argument, `wanted`, says whether
/// another thread is waiting for the `Store` this thread is executing in: a pause then
/// holds that thread up too, so a hook that pauses for others' sake should not.
pub type TickHook = Box<dyn FnMut(bool)>;

/// A hook run when this thread is about to wait for a `Store` another thread holds (see
/// the module docs).
pub type WaitHook = Box<dyn FnMut()>;

thread_local! {
    static HOOK: RefCell<Option<TickHook>> = const { RefCell::new(None) };
    static WAIT_HOOK: RefCell<Option<WaitHook>> = const { RefCell::new(None) };
}

/// Installs `hook` for the calling thread (`None` removes it); answers the hook it replaces.
pub fn set_tick_hook(hook: Option<TickHook>) -> Option<TickHook> {
    HOOK.with(|h| std::mem::replace(&mut *h.borrow_mut(), hook))
}

/// Installs the calling thread's wait hook (`None` removes it); answers the one it replaces.
pub fn set_wait_hook(hook: Option<WaitHook>) -> Option<WaitHook> {
    WAIT_HOOK.with(|h| std::mem::replace(&mut *h.borrow_mut(), hook))
}

/// Tells this thread's wait hook that the thread is about to wait for something else than a
/// `Store` (an embedder's own wait, such as for a domain it restarts), as the kernel does
/// before it waits for a `Store`.
pub fn about_to_wait() {
    on_wait();
}

/// Runs this thread's wait hook, if it has one: the thread is about to wait for a `Store`.
pub(crate) fn on_wait() {
    WAIT_HOOK.with(|h| {
        if let Ok(mut h) = h.try_borrow_mut()
            && let Some(f) = h.as_mut()
        {
            f();
        }
    });
}

/// What a Store (core replica or component) does at an epoch tick: interrupts guest code
/// whose domain was `terminated` or whose call has passed its `deadline_tick` (0: none) at
/// tick `now`, and otherwise runs this thread's hook (told whether any thread is `waiting`
/// for the Store) and lets the guest go on to the next tick.
#[inline]
pub(crate) fn at_tick(
    terminated: &AtomicBool,
    deadline_tick: u64,
    now: u64,
    waiting: &AtomicU32,
) -> wasmtime::Result<UpdateDeadline> {
    if terminated.load(Ordering::Relaxed) {
        return Err(wasmtime::Error::new(Interrupt::Terminated));
    }
    if deadline_tick != 0 && now >= deadline_tick {
        return Err(wasmtime::Error::new(Interrupt::Deadline));
    }
    on_tick(waiting.load(Ordering::Relaxed) != 0);
    Ok(UpdateDeadline::Continue(1))
}

/// Runs this thread's hook, if it has one (`wanted`: another thread waits for the Store it
/// is in). A hook that runs guest code, and so reaches a tick inside itself, is not run
/// again from there.
fn on_tick(wanted: bool) {
    HOOK.with(|h| {
        if let Ok(mut h) = h.try_borrow_mut()
            && let Some(f) = h.as_mut()
        {
            f(wanted);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn a_hook_runs_on_its_own_thread_only_until_removed() {
        let n = Rc::new(Cell::new(0));
        let m = n.clone();
        let hook = move |wanted: bool| m.set(m.get() + if wanted { 10 } else { 1 });
        assert!(set_tick_hook(Some(Box::new(hook))).is_none());
        on_tick(false);
        on_tick(true);
        std::thread::spawn(|| on_tick(false))
            .join()
            .expect("another thread");
        assert_eq!(n.get(), 11);
        assert!(set_tick_hook(None).is_some());
        on_tick(false);
        assert_eq!(n.get(), 11);
    }

    #[test]
    fn a_wait_hook_runs_on_its_own_thread_only_until_removed() {
        let n = Rc::new(Cell::new(0));
        let m = n.clone();
        assert!(set_wait_hook(Some(Box::new(move || m.set(m.get() + 1)))).is_none());
        on_wait();
        on_tick(false);
        std::thread::spawn(on_wait).join().expect("another thread");
        assert_eq!(n.get(), 1);
        assert!(set_wait_hook(None).is_some());
        on_wait();
        assert_eq!(n.get(), 1);
    }
}
