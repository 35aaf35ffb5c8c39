//! A group's decided log as one process learns it: from its own consensus member and from its
//! peers' relays, so out of order and more than once. Atomic broadcast and genuine multicast
//! both deliver from it.

use std::collections::BTreeMap;
use std::fmt::Debug;

/// Entries taken at their positions and handed out in position order, each once, as soon as
/// the prefix before them is complete. Two different entries at one position mean the group's
/// log forked: an error, never a choice.
pub(crate) struct DecidedLog<E> {
    /// The contiguous prefix, kept for relaying it to peers (`None`: only its length is kept).
    kept: Option<Vec<E>>,
    /// Length of the contiguous prefix.
    len: u64,
    /// Entries that came ahead of the prefix.
    early: BTreeMap<u64, E>,
}

impl<E: Clone + PartialEq + Debug> DecidedLog<E> {
    /// A log that keeps its prefix, for a process that relays it.
    pub(crate) fn keeping() -> Self {
        DecidedLog { kept: Some(Vec::new()), len: 0, early: BTreeMap::new() }
    }

    /// A log that counts its prefix from `len` (what is below was applied by an earlier
    /// incarnation) and keeps none of it, for a process that only delivers.
    pub(crate) fn counting_from(len: u64) -> Self {
        DecidedLog { kept: None, len, early: BTreeMap::new() }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Up to `n` kept entries from position `from` (none if the log only counts).
    pub(crate) fn kept_from(&self, from: u64, n: usize) -> Vec<E> {
        let kept = self.kept.as_deref().unwrap_or(&[]);
        let from = (from as usize).min(kept.len());
        kept[from..(from + n).min(kept.len())].to_vec()
    }

    /// Takes the entry decided at `index`; returns the entries that it made contiguous, with
    /// their positions, in order.
    pub(crate) fn learn(&mut self, index: u64, entry: E) -> Result<Vec<(u64, E)>, String> {
        let fork = |had: &E| Err(format!("decided position {index} holds {had:?} and {entry:?}"));
        if index < self.len {
            return match self.kept.as_ref().and_then(|k| k.get(index as usize)) {
                Some(had) if *had != entry => fork(had),
                _ => Ok(Vec::new()),
            };
        }
        match self.early.get(&index) {
            Some(had) if *had != entry => return fork(had),
            Some(_) => return Ok(Vec::new()),
            None => {
                self.early.insert(index, entry);
            }
        }
        let mut ready = Vec::new();
        while let Some(e) = self.early.remove(&self.len) {
            if let Some(k) = self.kept.as_mut() {
                k.push(e.clone());
            }
            ready.push((self.len, e));
            self.len += 1;
        }
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_out_once_in_order_and_a_fork_is_an_error() {
        let mut log = DecidedLog::keeping();
        assert_eq!(log.learn(1, 'b'), Ok(vec![]));
        assert_eq!(log.learn(1, 'b'), Ok(vec![]), "a relay of an early entry again");
        assert_eq!(log.learn(0, 'a'), Ok(vec![(0, 'a'), (1, 'b')]));
        assert_eq!(log.learn(0, 'a'), Ok(vec![]), "a replay below the prefix");
        assert!(log.learn(0, 'x').unwrap_err().contains("decided position 0 holds 'a' and 'x'"));
        assert_eq!(log.learn(3, 'd'), Ok(vec![]));
        assert!(log.learn(3, 'y').unwrap_err().contains("position 3"));
        assert_eq!(log.kept_from(1, 5), vec!['b']);
        let mut counting = DecidedLog::counting_from(2);
        assert_eq!(counting.learn(1, 'z'), Ok(vec![]), "applied by an earlier incarnation");
        assert_eq!(counting.learn(2, 'c'), Ok(vec![(2, 'c')]));
        assert_eq!((counting.len(), counting.kept_from(0, 9)), (3, vec![]));
    }
}
