//! Wake-ups at instants, to the microsecond, for loops that wait on tokio channels.
//!
//! The protocol loop and the client driver run on the same single-threaded tokio runtime as
//! their connections' readers and writers, so a message read or a reply written never crosses
//! a thread. But tokio's timers round up to the millisecond, and the agendas hold timers far
//! shorter than that (the belt's idle pause is half a millisecond, a client's think time is
//! drawn from an exponential), as do the emulated delays (a LAN's hop is 0.1 ms; on tokio's
//! timer it lasted about 1.2 ms, RESULTS.md, "The LAN's emulated delay"). So every such instant
//! is kept by one thread per process, the delay line, which waits on a condition variable for
//! the earliest of them and wakes whoever waits for it: a loop's [`Alarm`], which sends the loop
//! an input, or a writer of a frame held back by an emulated delay ([`wake_at`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;
use tokio::sync::oneshot;

/// What an alarm calls when its instant passes. A loop that has ended no longer listens, and
/// drops its alarm as it goes, so a ring has nothing to report.
type Ring = Arc<dyn Fn() + Send + Sync>;

/// Whom an instant wakes.
enum Waiter {
    /// The writer of a frame held back by an emulated delay.
    Frame(oneshot::Sender<()>),
    /// An [`Alarm`], by its number.
    Alarm(u64, Ring),
}

/// The instants waited for, in order (ties in the order they were set).
#[derive(Default)]
struct DelayLine {
    waiting: BTreeMap<(Instant, u64), Waiter>,
    /// The key of each alarm's instant in `waiting`, while it is set and has not rung.
    alarms: HashMap<u64, (Instant, u64)>,
    next: u64,
}

impl DelayLine {
    fn insert(&mut self, due: Instant, waiter: Waiter) -> (Instant, u64) {
        let key = (due, self.next);
        self.next += 1;
        self.waiting.insert(key, waiter);
        key
    }
}

fn delay_line() -> &'static (Mutex<DelayLine>, Condvar) {
    static LINE: OnceLock<Arc<(Mutex<DelayLine>, Condvar)>> = OnceLock::new();
    LINE.get_or_init(|| {
        let shared = Arc::new((Mutex::new(DelayLine::default()), Condvar::new()));
        let theirs = shared.clone();
        // One thread for the process, for as long as it runs: it only waits and wakes.
        std::thread::Builder::new()
            .name("ensemble-delay-line".into())
            .spawn(move || {
                let (lock, cv) = &*theirs;
                let mut line = lock.lock().unwrap_or_else(|e| e.into_inner());
                let mut rings = Vec::new();
                loop {
                    let now = Instant::now();
                    while let Some(entry) = line.waiting.first_entry() {
                        if entry.key().0 > now {
                            break;
                        }
                        match entry.remove() {
                            // A writer that is gone no longer waits; nothing to tell.
                            Waiter::Frame(tx) => drop(tx.send(())),
                            Waiter::Alarm(n, ring) => {
                                line.alarms.remove(&n);
                                rings.push(ring);
                            }
                        }
                    }
                    if !rings.is_empty() {
                        // Rung without the lock: a ring may take its time, and others set instants.
                        drop(line);
                        for ring in rings.drain(..) {
                            ring();
                        }
                        line = lock.lock().unwrap_or_else(|e| e.into_inner());
                        continue;
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

/// Locks the delay line, to change what it waits for; `notify` after an insert that may be the
/// earliest.
fn line() -> (MutexGuard<'static, DelayLine>, &'static Condvar) {
    let (lock, cv) = delay_line();
    (lock.lock().unwrap_or_else(|e| e.into_inner()), cv)
}

/// Completes at `due`: the wait of a frame held back by an emulated delay.
pub(crate) fn wake_at(due: Instant) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    let (mut line, cv) = line();
    let earliest = line.waiting.keys().next().is_none_or(|&(first, _)| due < first);
    line.insert(due, Waiter::Frame(tx));
    if earliest {
        cv.notify_one();
    }
    rx
}

/// A loop's next due instant: it rings (calls its `ring`, on the delay line's thread) once per
/// [`Alarm::set`] to an instant, when that instant has passed.
pub(crate) struct Alarm {
    n: u64,
    ring: Ring,
}

impl Alarm {
    pub(crate) fn new(ring: impl Fn() + Send + Sync + 'static) -> Alarm {
        let (mut line, _) = line();
        let n = line.next;
        line.next += 1;
        Alarm { n, ring: Arc::new(ring) }
    }

    /// Rings at `due` (none: not at all), replacing the instant set before. Cheap when the
    /// instant is unchanged, which is the common case: the loop calls it after every input.
    pub(crate) fn set(&self, due: Option<Instant>) {
        let (mut line, cv) = line();
        let set = line.alarms.get(&self.n).copied();
        if set.map(|(at, _)| at) == due {
            return;
        }
        if let Some(key) = set {
            line.waiting.remove(&key);
            line.alarms.remove(&self.n);
        }
        let Some(due) = due else { return };
        let earliest = line.waiting.keys().next().is_none_or(|&(first, _)| due < first);
        let key = line.insert(due, Waiter::Alarm(self.n, Arc::clone(&self.ring)));
        line.alarms.insert(self.n, key);
        if earliest {
            cv.notify_one();
        }
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        self.set(None);
    }
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
        let alarm = Alarm::new(move || {
            let _ = tx.send(Instant::now());
        });
        let due = Instant::now() + Duration::from_millis(2);
        alarm.set(Some(due));
        let rang = rx.recv().unwrap();
        assert!(rang >= due, "rang {:?} early", due - rang);
        // The same instant again, after it rang: it rings again.
        alarm.set(Some(due));
        rx.recv().unwrap();
        // Replaced before it is due, then cleared: no ring.
        alarm.set(Some(Instant::now() + Duration::from_secs(3600)));
        alarm.set(None);
        alarm.set(Some(Instant::now()));
        rx.recv().unwrap();
        alarm.set(None);
        drop(alarm);
        assert!(rx.recv().is_err(), "a cleared alarm rang, or the line kept its ring after the alarm was dropped");
    }

    #[test]
    fn alarms_and_delayed_frames_share_the_line_without_waking_one_another() {
        let (tx, rx) = std::sync::mpsc::channel();
        let alarm = Alarm::new(move || {
            let _ = tx.send(Instant::now());
        });
        let now = Instant::now();
        let frame = wake_at(now + Duration::from_millis(1));
        let due = now + Duration::from_millis(5);
        alarm.set(Some(due));
        futures::executor::block_on(frame).unwrap();
        // Checked only while the alarm's instant is ahead: a slow machine may pass it.
        if Instant::now() < due {
            assert!(rx.try_recv().is_err(), "the alarm rang at a frame's instant");
        }
        let rang = rx.recv().unwrap();
        assert!(rang >= due, "rang {:?} early", due - rang);
    }
}
