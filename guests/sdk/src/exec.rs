//! A small executor of user-level threads (futures) for one domain, after URPC's user-level
//! thread package: a thread that awaits an asynchronous call ([`crate::chan::Reply`]) parks
//! only itself, the others run; when none can run, the executor looks for replies on the
//! domain's channels and only then enters the kernel ([`crate::chan::idle`]: wait, or run
//! the server's loop on this processor when the server has none free).
//!
//! Single threaded, like the domain: [`spawn`] queues a thread on this (wasm) thread's
//! executor, [`block_on`] runs until the future it is given completes. It is not re-entrant
//! (a thread must not call `block_on`).

use core::cell::{Cell, RefCell};
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::collections::VecDeque;
use std::rc::Rc;

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// The id of the future given to `block_on` (spawned threads count from 0).
const MAIN: usize = usize::MAX;

thread_local! {
    static TASKS: RefCell<Vec<Option<Task>>> = const { RefCell::new(Vec::new()) };
    static FREE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static READY: RefCell<VecDeque<usize>> = const { RefCell::new(VecDeque::new()) };
    static MAIN_WOKEN: Cell<bool> = const { Cell::new(false) };
}

/// `block_on` found nothing runnable and no call in flight: its future can never complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalled;

fn wake_id(id: usize) {
    if id == MAIN {
        MAIN_WOKEN.with(|m| m.set(true));
    } else {
        READY.with(|r| r.borrow_mut().push_back(id));
    }
}

const VTABLE: RawWakerVTable = RawWakerVTable::new(
    |p| RawWaker::new(p, &VTABLE),
    |p| wake_id(p as usize),
    |p| wake_id(p as usize),
    |_| {},
);

fn waker(id: usize) -> Waker {
    // SAFETY: the data pointer is a plain integer (a thread id), never dereferenced; the
    // vtable's functions copy it, push it on this thread's ready queue, or do nothing, which
    // is sound from any thread (a wake from another OS thread, possible only natively,
    // queues the id on that thread's executor: a lost wake-up, not undefined behaviour).
    unsafe { Waker::from_raw(RawWaker::new(id as *const (), &VTABLE)) }
}

/// The result of a spawned thread, as a future.
pub struct JoinHandle<T> {
    slot: Rc<RefCell<Join<T>>>,
}

struct Join<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut j = self.slot.borrow_mut();
        match j.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                j.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Starts a user-level thread running `f`; it runs when the executor next looks for work
/// (inside [`block_on`]).
pub fn spawn<T: 'static>(f: impl Future<Output = T> + 'static) -> JoinHandle<T> {
    let slot = Rc::new(RefCell::new(Join {
        value: None,
        waker: None,
    }));
    let done = slot.clone();
    let task: Task = Box::pin(async move {
        let v = f.await;
        let w = {
            let mut j = done.borrow_mut();
            j.value = Some(v);
            j.waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    });
    let id = match FREE.with(|f| f.borrow_mut().pop()) {
        Some(id) => {
            TASKS.with(|t| t.borrow_mut()[id] = Some(task));
            id
        }
        None => TASKS.with(|t| {
            let mut t = t.borrow_mut();
            t.push(Some(task));
            t.len() - 1
        }),
    };
    wake_id(id);
    JoinHandle { slot }
}

/// Runs spawned threads until `f` completes; `Err(Stalled)` when nothing can run and no
/// call is in flight (then `f` could never complete).
pub fn block_on<T>(f: impl Future<Output = T>) -> Result<T, Stalled> {
    let mut f = core::pin::pin!(f);
    let main_waker = waker(MAIN);
    MAIN_WOKEN.with(|m| m.set(true));
    loop {
        if MAIN_WOKEN.with(|m| m.replace(false))
            && let Poll::Ready(v) = f.as_mut().poll(&mut Context::from_waker(&main_waker))
        {
            return Ok(v);
        }
        let mut ran = false;
        while let Some(id) = READY.with(|r| r.borrow_mut().pop_front()) {
            ran = true;
            // Out of the table while it runs, so that it may spawn.
            let Some(mut task) = TASKS.with(|t| t.borrow_mut().get_mut(id).and_then(Option::take))
            else {
                continue;
            };
            let w = waker(id);
            match task.as_mut().poll(&mut Context::from_waker(&w)) {
                Poll::Ready(()) => FREE.with(|f| f.borrow_mut().push(id)),
                Poll::Pending => TASKS.with(|t| t.borrow_mut()[id] = Some(task)),
            }
            if MAIN_WOKEN.with(Cell::get) {
                break;
            }
        }
        if ran || MAIN_WOKEN.with(Cell::get) {
            continue;
        }
        // Nothing runnable: replies, or the kernel.
        if !crate::chan::idle() {
            return Err(Stalled);
        }
    }
}

/// Lets the other user-level threads run before this one continues.
pub async fn yield_now() {
    let mut yielded = false;
    core::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_interleave_at_their_yields_and_join() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let r = block_on({
            let log = log.clone();
            async move {
                let hs: Vec<_> = (0..3u32)
                    .map(|t| {
                        let log = log.clone();
                        spawn(async move {
                            for i in 0..2u32 {
                                log.borrow_mut().push((t, i));
                                yield_now().await;
                            }
                            t * 10
                        })
                    })
                    .collect();
                let mut sum = 0;
                for h in hs {
                    sum += h.await;
                }
                sum
            }
        });
        assert_eq!(r, Ok(30));
        assert_eq!(
            *log.borrow(),
            [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)],
            "each yield lets the others run"
        );
    }

    #[test]
    fn a_future_nothing_can_wake_stalls() {
        assert_eq!(block_on(core::future::pending::<()>()), Err(Stalled));
    }
}
