//! Pacing of long guest computations by the thread that runs them.
//!
//! A call migrates the calling thread into the server, so the thread, not the domain, knows
//! what kind of work it is doing: an embedder that runs short requests beside long
//! computations can have the threads of the long ones give way. A thread installs a hook
//! with [`set_tick_hook`]; while that thread runs guest code, in any domain it has migrated
//! into, the hook runs at every epoch tick (see [`KernelConfig::tick`]), after the deadline
//! and termination checks. It may sleep: the guest's computation pauses where it is, and the
//! call's deadline keeps counting.
//!
//! [`KernelConfig::tick`]: crate::KernelConfig::tick

use std::cell::RefCell;

/// A hook run at epoch ticks (see the module docs). Its argument, `wanted`, says whether
/// another thread is waiting for the `Store` this thread is executing in: a pause then
/// holds that thread up too, so a hook that pauses for others' sake should not.
pub type TickHook = Box<dyn FnMut(bool)>;

thread_local! {
    static HOOK: RefCell<Option<TickHook>> = const { RefCell::new(None) };
}

/// Installs `hook` for the calling thread (`None` removes it); answers the hook it replaces.
pub fn set_tick_hook(hook: Option<TickHook>) -> Option<TickHook> {
    HOOK.with(|h| std::mem::replace(&mut *h.borrow_mut(), hook))
}

/// Runs this thread's hook, if it has one (from a Store's epoch callback; `wanted`: another
/// thread waits for that Store). A hook that runs guest code, and so reaches a tick inside
/// itself, is not run again from there.
pub(crate) fn on_tick(wanted: bool) {
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
}
