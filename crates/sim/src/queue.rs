//! The discrete-event queue.
//!
//! Events are ordered by `(time, seq)`, where `seq` is the insertion number: two events at the
//! same virtual instant run in the order they were scheduled, which is what makes a run a pure
//! function of its seed. The heap holds only `(time, seq, slot)`; payloads sit in a slab that is
//! reused, so sifting moves 24 bytes whatever the protocol's message type, and a steady-state run
//! allocates nothing per event.

use ensemble_core::Time;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub(crate) struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(Time, u64, u32)>>,
    slots: Vec<Option<E>>,
    free: Vec<u32>,
    next_seq: u64,
}

impl<E> EventQueue<E> {
    pub(crate) fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), slots: Vec::new(), free: Vec::new(), next_seq: 0 }
    }

    pub(crate) fn push(&mut self, at: Time, event: E) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(event);
                slot
            }
            None => {
                let slot = u32::try_from(self.slots.len()).expect("more than 2^32 pending events");
                self.slots.push(Some(event));
                slot
            }
        };
        self.heap.push(Reverse((at, self.next_seq, slot)));
        self.next_seq += 1;
    }

    pub(crate) fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    pub(crate) fn pop(&mut self) -> Option<(Time, E)> {
        let Reverse((at, _, slot)) = self.heap.pop()?;
        let event = self.slots[slot as usize].take().expect("queued slot holds its event");
        self.free.push(slot);
        Some((at, event))
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_run_in_insertion_order() {
        let mut q = EventQueue::new();
        q.push(Time(5), "b");
        q.push(Time(1), "a");
        q.push(Time(5), "c");
        q.push(Time(5), "d");
        assert_eq!(q.pop(), Some((Time(1), "a")));
        q.push(Time(5), "e"); // reuses a's slot but still sorts last among the ties
        let rest: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(rest, vec![(Time(5), "b"), (Time(5), "c"), (Time(5), "d"), (Time(5), "e")]);
        assert_eq!(q.len(), 0);
    }
}
