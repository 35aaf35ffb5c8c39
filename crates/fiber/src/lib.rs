//! Synchronous code that waits on an event loop instead of blocking a thread of its own.
//!
//! A storage is synchronous: a transaction's body calls the database and reads the answer in the
//! same Rust call (`ensemble_app::model::Body`). The real runtime therefore gives each storage a
//! thread (`ensemble_net::workers`), and every job crosses from the node's loop to that thread
//! and its result back, a wake-up each way. A [`Fiber`] runs the same synchronous code on a
//! coroutine (a stack of its own, `corosensei`) on the loop's thread instead: where the code
//! would block on a future (a PostgreSQL request, a back-off), [`wait`] suspends the fiber and
//! hands the future to [`Fiber::run`], a task of the loop's runtime, which awaits it and resumes
//! the fiber with its output. A job then starts and ends on the thread that reads requests and
//! writes replies.
//!
//! Only code that waits through [`wait`] belongs on a fiber: anything that blocks the thread (a
//! synchronous database client, `std::thread::sleep`) stalls the whole loop while it blocks.
//! Code that may run either way asks [`on_fiber`].

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use std::any::Any;
use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;

/// What a suspended fiber waits on, its output type erased.
type Waiting = Pin<Box<dyn Future<Output = Box<dyn Any>>>>;
/// What a fiber is resumed with: its future's output.
type Resumed = Box<dyn Any>;
type FiberYielder = Yielder<Resumed, Waiting>;

/// Room for a storage's deepest calls (a SQL parser recurses); the pages are mapped when first
/// touched, so a fiber that never needs them does not pay for them.
const STACK_BYTES: usize = 8 << 20;

thread_local! {
    /// The yielder of the fiber running on this thread; null when no fiber is.
    static RUNNING: Cell<*const FiberYielder> = const { Cell::new(std::ptr::null()) };
}

/// Whether the calling code runs on a fiber, where it must wait with [`wait`], never block.
pub fn on_fiber() -> bool {
    !RUNNING.with(Cell::get).is_null()
}

/// Suspends the calling fiber until its driver ([`Fiber::run`]) has awaited `future`, and
/// returns the output. Off a fiber, gives `future` back untouched: the caller waits its own way.
///
/// `future` may borrow from the caller (a session, a statement's text): the fiber's stack, where
/// those live, stays put while the fiber is suspended, and the driver polls the future only then.
pub fn wait<'a, F>(future: F) -> Result<F::Output, F>
where
    F: Future + 'a,
    F::Output: 'static,
{
    let yielder = RUNNING.with(Cell::get);
    if yielder.is_null() {
        return Err(future);
    }
    let waiting: Pin<Box<dyn Future<Output = Box<dyn Any>> + 'a>> = Box::pin(async move { Box::new(future.await) as Box<dyn Any> });
    // SAFETY: only the lifetime changes. What `waiting` borrows outlives its use: the driver
    // polls it only while this fiber is suspended in `suspend` below (this frame, and every
    // frame the borrows point into, cannot return or move meanwhile), and drops it before it
    // resumes the fiber, or before the fiber's stack is unwound when a suspended fiber is
    // dropped ([`Fiber`] drops its waiting future first).
    let waiting: Waiting = unsafe { std::mem::transmute::<Pin<Box<dyn Future<Output = Box<dyn Any>> + 'a>>, Waiting>(waiting) };
    RUNNING.with(|r| r.set(std::ptr::null()));
    // SAFETY: `yielder` is the running fiber's own (set when it started or was last resumed,
    // cleared whenever it stops running), and lives as long as the fiber.
    let resumed = unsafe { &*yielder }.suspend(waiting);
    RUNNING.with(|r| r.set(yielder));
    Ok(*resumed.downcast::<F::Output>().expect("a fiber is resumed with the output of the future it waited on"))
}

/// Marks a fiber as running on this thread for as long as it runs its code; a fiber that ends,
/// panics or is unwound leaves no trace.
struct Running;

impl Running {
    fn enter(yielder: &FiberYielder) -> Running {
        RUNNING.with(|r| r.set(yielder));
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(std::ptr::null()));
    }
}

/// Synchronous code on a stack of its own, which [`Fiber::run`] drives on the caller's executor.
pub struct Fiber {
    /// What the fiber waits on while suspended. Declared before `coroutine` so that it is
    /// dropped first: it may borrow from the coroutine's stack, which dropping the coroutine
    /// unwinds.
    waiting: Option<Waiting>,
    coroutine: Coroutine<Resumed, Waiting, (), DefaultStack>,
}

impl Fiber {
    /// A fiber that will run `code` when driven. Code that may be dropped while suspended (its
    /// driver cancelled) is unwound then, so it must not catch panics it did not raise.
    pub fn new(code: impl FnOnce() + 'static) -> std::io::Result<Fiber> {
        let stack = DefaultStack::new(STACK_BYTES)?;
        let coroutine = Coroutine::with_stack(stack, move |yielder: &FiberYielder, _start: Resumed| {
            let _running = Running::enter(yielder);
            code();
        });
        Ok(Fiber { waiting: None, coroutine })
    }

    /// Runs the fiber's code to its end: it runs inside this future's polls, on the polling
    /// thread, and each future it [`wait`]s on is awaited here. A panic in the code ends the
    /// fiber and is returned (its payload), not raised.
    pub async fn run(mut self) -> Result<(), Box<dyn Any + Send>> {
        let mut resumed: Resumed = Box::new(());
        loop {
            let step = catch_unwind(AssertUnwindSafe(|| self.coroutine.resume(resumed)))?;
            match step {
                CoroutineResult::Return(()) => return Ok(()),
                CoroutineResult::Yield(waiting) => {
                    resumed = self.waiting.insert(waiting).as_mut().await;
                    self.waiting = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn off_a_fiber_the_future_is_given_back() {
        assert!(!on_fiber());
        let back = wait(std::future::ready(7));
        assert!(back.is_err(), "wait ran a future off a fiber");
    }

    #[test]
    fn a_fiber_waits_on_futures_that_borrow_its_stack_and_gets_their_outputs_in_order() {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let log = seen.clone();
        let fiber = Fiber::new(move || {
            assert!(on_fiber());
            let text = String::from("borrowed from the fiber's stack");
            for i in 0..3u64 {
                // A future that is pending at first, borrows `text`, and returns an owned value.
                let len = wait(async {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    text.len() as u64 + i
                })
                .unwrap_or_else(|_| panic!("not on a fiber"));
                log.borrow_mut().push(len);
            }
        })
        .unwrap();
        let local = tokio::task::LocalSet::new();
        let outcome = local.block_on(&runtime(), fiber.run());
        assert!(outcome.is_ok());
        assert!(!on_fiber(), "a finished fiber left itself marked as running");
        let n = "borrowed from the fiber's stack".len() as u64;
        assert_eq!(*seen.borrow(), vec![n, n + 1, n + 2]);
    }

    #[test]
    fn fibers_on_one_thread_interleave_where_they_wait() {
        let order = Rc::new(RefCell::new(Vec::new()));
        let local = tokio::task::LocalSet::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<&'static str>();
        let tx = Rc::new(RefCell::new(Some(tx)));
        // The first fiber waits for what the second sends: if waiting blocked the thread, the
        // second would never run.
        let a = {
            let order = order.clone();
            Fiber::new(move || {
                order.borrow_mut().push("a waits");
                let got = wait(rx).unwrap_or_else(|_| panic!("not on a fiber")).unwrap();
                order.borrow_mut().push(got);
            })
            .unwrap()
        };
        let b = {
            let order = order.clone();
            Fiber::new(move || {
                order.borrow_mut().push("b sends");
                let _ = tx.borrow_mut().take().unwrap().send("a resumed");
            })
            .unwrap()
        };
        local.block_on(&runtime(), async {
            let a = tokio::task::spawn_local(a.run());
            let b = tokio::task::spawn_local(b.run());
            assert!(a.await.unwrap().is_ok());
            assert!(b.await.unwrap().is_ok());
        });
        assert_eq!(*order.borrow(), vec!["a waits", "b sends", "a resumed"]);
    }

    #[test]
    fn a_panic_in_a_fiber_is_returned_to_its_driver() {
        let fiber = Fiber::new(|| {
            let _ = wait(std::future::ready(()));
            panic!("the storage broke");
        })
        .unwrap();
        let local = tokio::task::LocalSet::new();
        let outcome = local.block_on(&runtime(), fiber.run());
        let payload = outcome.expect_err("the panic was lost");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the storage broke"));
        assert!(!on_fiber());
    }

    #[test]
    fn a_suspended_fiber_dropped_drops_its_future_before_unwinding_its_stack() {
        /// Records when it is dropped.
        struct Noted(&'static str, Rc<RefCell<Vec<&'static str>>>);
        impl Drop for Noted {
            fn drop(&mut self) {
                self.1.borrow_mut().push(self.0);
            }
        }
        let dropped = Rc::new(RefCell::new(Vec::new()));
        let log = dropped.clone();
        let fiber = Fiber::new(move || {
            let on_stack = Noted("the fiber's stack", log.clone());
            let held = Noted("the future", log.clone());
            let _ = wait(async move {
                let _held = held;
                std::future::pending::<()>().await
            });
            drop(on_stack);
            unreachable!("a fiber waiting forever was resumed");
        })
        .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime(), async {
            let mut run = Box::pin(fiber.run());
            // One poll: the fiber starts and suspends on its pending future.
            assert!(futures_poll_once(run.as_mut()).await.is_none());
        });
        assert_eq!(*dropped.borrow(), vec!["the future", "the fiber's stack"]);
        assert!(!on_fiber());
    }

    /// Polls `f` once; `None` if it is pending. `f` is dropped by the caller.
    async fn futures_poll_once<F: Future + ?Sized>(mut f: Pin<&mut F>) -> Option<F::Output> {
        std::future::poll_fn(|cx| std::task::Poll::Ready(match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }))
        .await
    }
}
