//! A wake-up at an instant, to the microsecond, for a loop that waits on a tokio channel.
//!
//! The protocol loop and the client driver run on the same single-threaded tokio runtime as
//! their connections' readers and writers, so a message read or a reply written never crosses
//! a thread. But tokio's timers round up to the millisecond, and the agendas hold timers far
//! shorter than that (the belt's idle pause is half a millisecond, a client's think time is
//! drawn from an exponential). So the loop's next due time is kept by this alarm instead: a
//! thread of its own waits on a condition variable until the instant (as precisely as the old
//! `recv_deadline` on a channel did) and then rings, which sends the loop an input that wakes
//! it. [`wake_at`] does the same for the writers of frames held back by emulated delays.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::oneshot;

#[derive(Default)]
struct State {
    due: Option<Instant>,
    stop: bool,
}

pub(crate) struct Alarm {
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Alarm {
    /// Starts the alarm's thread; `ring` is called on it each time a due instant passes (once
    /// per [`Alarm::set`] to that instant). `ring` returns false when nobody listens any more.
    pub(crate) fn start(name: &str, ring: impl Fn() -> bool + Send + 'static) -> std::io::Result<Alarm> {
        let shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let theirs = shared.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            let (lock, cv) = &*theirs;
            let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if state.stop {
                    return;
                }
                match state.due {
                    None => state = cv.wait(state).unwrap_or_else(|e| e.into_inner()),
                    Some(due) => {
                        let now = Instant::now();
                        if now < due {
                            state = cv.wait_timeout(state, due - now).unwrap_or_else(|e| e.into_inner()).0;
                            continue;
                        }
                        state.due = None;
                        drop(state);
                        if !ring() {
                            return;
                        }
                        state = lock.lock().unwrap_or_else(|e| e.into_inner());
                    }
                }
            }
        })?;
        Ok(Alarm { shared, thread: Some(thread) })
    }

    /// Rings at `due` (none: not at all), replacing the instant set before. Cheap when the
    /// instant is unchanged, which is the common case: the loop calls it after every input.
    pub(crate) fn set(&self, due: Option<Instant>) {
        let (lock, cv) = &*self.shared;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        if state.due != due {
            state.due = due;
            cv.notify_one();
        }
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        {
            let (lock, cv) = &*self.shared;
            lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            cv.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The frames held back by emulated delays, by due instant (ties in the order they came), each
/// with whom to wake.
#[derive(Default)]
struct DelayLine {
    waiting: BTreeMap<(Instant, u64), oneshot::Sender<()>>,
    next: u64,
}

fn delay_line() -> &'static (Mutex<DelayLine>, Condvar) {
    static LINE: OnceLock<Arc<(Mutex<DelayLine>, Condvar)>> = OnceLock::new();
    LINE.get_or_init(|| {
        let shared = Arc::new((Mutex::new(DelayLine::default()), Condvar::new()));
        let theirs = shared.clone();
        // One thread for the process, for as long as it runs: it only waits.
        std::thread::Builder::new()
            .name("ensemble-delay-line".into())
            .spawn(move || {
                let (lock, cv) = &*theirs;
                let mut line = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let now = Instant::now();
                    while let Some(entry) = line.waiting.first_entry() {
                        if entry.key().0 > now {
                            break;
                        }
                        // A writer that is gone no longer waits; nothing to tell.
                        let _ = entry.remove().send(());
                    }
                    line = match line.waiting.keys().next() {
                        None => cv.wait(line).unwrap_or_else(|e| e.into_inner()),
                        Some(&(due, _)) => cv.wait_timeout(line, due - now).unwrap_or_else(|e| e.into_inner()).0,
                    };
                }
            })
            .expect("start the delay line's thread");
        shared
    })
}

/// Completes at `due`, to the microsecond as [`Alarm`] rings: the wait of a frame held back by
/// an emulated delay. Tokio's timers round up to the millisecond, which made a LAN's hop of
/// 0.1 ms last about 1.2 ms (RESULTS.md, "The LAN's emulated delay").
pub(crate) fn wake_at(due: Instant) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    let (lock, cv) = delay_line();
    let mut line = lock.lock().unwrap_or_else(|e| e.into_inner());
    let earliest = line.waiting.keys().next().is_none_or(|&(first, _)| due < first);
    let n = line.next;
    line.next += 1;
    line.waiting.insert((due, n), tx);
    if earliest {
        cv.notify_one();
    }
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_delayed_wake_comes_never_before_its_instant_and_in_the_order_of_the_instants() {
        let now = Instant::now();
        let (late, early) = (now + Duration::from_millis(3), now + Duration::from_micros(300));
        let (mut a, b) = (wake_at(late), wake_at(early));
        b.await.unwrap();
        assert!(Instant::now() >= early, "woke before its instant");
        if Instant::now() < late {
            assert!(a.try_recv().is_err(), "the later instant woke first");
        }
        a.await.unwrap();
        assert!(Instant::now() >= late, "woke before its instant");
        // An instant already past wakes at once.
        wake_at(now).await.unwrap();
    }

    #[test]
    fn rings_once_per_instant_set_never_before_it_and_not_after_being_cleared() {
        let (tx, rx) = std::sync::mpsc::channel();
        let alarm = Alarm::start("alarm-test", move || tx.send(Instant::now()).is_ok()).unwrap();
        let due = Instant::now() + Duration::from_millis(2);
        alarm.set(Some(due));
        let rang = rx.recv().unwrap();
        assert!(rang >= due, "rang {:?} early", due - rang);
        // Replaced before it is due, then cleared: no ring.
        alarm.set(Some(Instant::now() + Duration::from_secs(3600)));
        alarm.set(None);
        alarm.set(Some(Instant::now()));
        rx.recv().unwrap();
        alarm.set(None);
        drop(alarm);
        assert!(rx.recv().is_err(), "a cleared alarm rang, or the thread outlived its alarm");
    }
}
