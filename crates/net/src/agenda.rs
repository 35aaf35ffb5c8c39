//! What is due when, for a thread that owns state machines: timers, and messages held back by WAN
//! emulation between processes of one host.
//!
//! The thread that owns the processes keeps this itself and sleeps on its input channel only
//! until the earliest due time ([`Agenda::next_due`]), rather than spawning a task per timer that
//! sends an input when it wakes. That is what makes cancelling exact and cheap: a cancelled entry
//! is forgotten on the spot, and no event for it is ever in flight. Entries fire in (due time,
//! order scheduled) order, so two with the same due time keep the order they were set in.
//!
//! Cancelling leaves the entry's heap slot behind (removing from the middle of a binary heap is
//! costly); the slot is skipped when it reaches the top, and the heap is rebuilt without such
//! slots once they outnumber the live entries, so memory stays proportional to what is pending.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;
use std::time::Instant;

/// Extra heap slots tolerated before a rebuild, so a small agenda is not rebuilt at every cancel.
const SLACK: usize = 64;

#[derive(Debug)]
pub(crate) struct Agenda<K, T> {
    /// (due, sequence number); the sequence number names the entry and breaks ties in order.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    entries: HashMap<u64, (Option<K>, T)>,
    /// Keyed entries that are pending, to cancel or replace them by key.
    keyed: HashMap<K, u64>,
    next: u64,
}

impl<K: Hash + Eq + Clone, T> Agenda<K, T> {
    pub(crate) fn new() -> Agenda<K, T> {
        Agenda { heap: BinaryHeap::new(), entries: HashMap::new(), keyed: HashMap::new(), next: 0 }
    }

    /// Schedules `item` at `due`. With a key, any entry pending under that key is cancelled
    /// first (setting a timer again moves it); returns whether that happened.
    pub(crate) fn schedule(&mut self, due: Instant, key: Option<K>, item: T) -> bool {
        let replaced = key.as_ref().is_some_and(|k| self.cancel(k));
        let seq = self.next;
        self.next += 1;
        if let Some(k) = &key {
            self.keyed.insert(k.clone(), seq);
        }
        self.entries.insert(seq, (key, item));
        self.heap.push(Reverse((due, seq)));
        replaced
    }

    /// Forgets the entry pending under `key`; false if there is none (it fired, or never was).
    pub(crate) fn cancel(&mut self, key: &K) -> bool {
        let Some(seq) = self.keyed.remove(key) else { return false };
        self.entries.remove(&seq);
        if self.heap.len() > 2 * self.entries.len() + SLACK {
            let entries = &self.entries;
            self.heap.retain(|Reverse((_, seq))| entries.contains_key(seq));
        }
        true
    }

    /// When the earliest pending entry is due.
    pub(crate) fn next_due(&mut self) -> Option<Instant> {
        self.drop_cancelled_top();
        self.heap.peek().map(|Reverse((due, _))| *due)
    }

    /// The earliest entry due at or before `now`, removed.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<T> {
        self.drop_cancelled_top();
        let Reverse((due, seq)) = *self.heap.peek()?;
        if due > now {
            return None;
        }
        self.heap.pop();
        let (key, item) = self.entries.remove(&seq).expect("the top of the heap is live");
        if let Some(k) = key {
            self.keyed.remove(&k);
        }
        Some(item)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    fn drop_cancelled_top(&mut self) {
        while let Some(Reverse((_, seq))) = self.heap.peek() {
            if self.entries.contains_key(seq) {
                return;
            }
            self.heap.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn drain(a: &mut Agenda<u32, &'static str>, now: Instant) -> Vec<&'static str> {
        std::iter::from_fn(|| a.pop_due(now)).collect()
    }

    #[test]
    fn fires_in_due_order_then_set_order() {
        let t0 = Instant::now();
        let mut a = Agenda::new();
        a.schedule(t0 + ms(5), None, "late");
        a.schedule(t0 + ms(1), None, "first");
        a.schedule(t0 + ms(1), None, "second");
        assert_eq!(a.next_due(), Some(t0 + ms(1)));
        assert_eq!(drain(&mut a, t0), Vec::<&str>::new());
        assert_eq!(drain(&mut a, t0 + ms(1)), ["first", "second"]);
        assert_eq!(drain(&mut a, t0 + ms(9)), ["late"]);
        assert_eq!(a.next_due(), None);
    }

    #[test]
    fn a_cancelled_entry_never_fires_and_a_reset_one_fires_once_at_its_new_time() {
        let t0 = Instant::now();
        let mut a = Agenda::new();
        a.schedule(t0 + ms(1), Some(1), "cancelled");
        a.schedule(t0 + ms(2), Some(2), "moved");
        a.schedule(t0 + ms(3), Some(3), "kept");
        assert!(a.cancel(&1));
        assert!(!a.cancel(&1), "cancelling twice is a no-op");
        assert!(a.schedule(t0 + ms(4), Some(2), "moved"));
        assert_eq!(a.next_due(), Some(t0 + ms(3)), "cancelled slots are skipped");
        assert_eq!(drain(&mut a, t0 + ms(10)), ["kept", "moved"]);
        assert!(!a.cancel(&3), "a fired entry cannot be cancelled");
        // Its key is free again.
        assert!(!a.schedule(t0, Some(3), "again"));
        assert_eq!(drain(&mut a, t0), ["again"]);
    }

    #[test]
    fn cancelled_slots_do_not_accumulate() {
        let t0 = Instant::now();
        let mut a = Agenda::new();
        a.schedule(t0 + ms(1), Some(u32::MAX), "live");
        for i in 0..10_000 {
            a.schedule(t0 + ms(1000), Some(i), "x");
            a.cancel(&i);
        }
        assert_eq!(a.len(), 1);
        assert!(a.heap.len() <= 2 + SLACK, "{} heap slots for one live entry", a.heap.len());
        assert_eq!(drain(&mut a, t0 + ms(2000)), ["live"]);
    }
}
