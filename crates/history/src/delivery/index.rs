//! The delivery log in dense form: groups, processes and messages numbered from 0, destination
//! groups as bit sets, each process's delivery sequence cleaned of what integrity forbids, and
//! for each message who delivered it where. Every property is checked on this form; building it
//! is where a log is found malformed, and where integrity is decided (it is a by-product of
//! cleaning the sequences).

use super::log::{DeliveryLog, GroupId, MessageId, ProcessNo};
use super::report::{DeliveryViolation, LogMalformation};
use std::collections::hash_map::Entry;
use std::collections::HashMap;

pub(super) const NONE: u32 = u32::MAX;

/// Rows of items, stored flat (compressed sparse rows): one allocation for 10^5 rows.
pub(super) struct Rows<T> {
    start: Vec<u32>,
    items: Vec<T>,
}

impl<T: Copy + Default> Rows<T> {
    /// Rows `0..rows` from `(row, item)` pairs, each row keeping its items in the pairs' order.
    pub(super) fn build(rows: usize, pairs: impl Iterator<Item = (u32, T)> + Clone) -> Rows<T> {
        let mut start = vec![0u32; rows + 1];
        for (r, _) in pairs.clone() {
            start[r as usize + 1] += 1;
        }
        for i in 0..rows {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut items = vec![T::default(); start[rows] as usize];
        for (r, item) in pairs {
            items[fill[r as usize] as usize] = item;
            fill[r as usize] += 1;
        }
        Rows { start, items }
    }

    pub(super) fn row(&self, r: u32) -> &[T] {
        &self.items[self.start[r as usize] as usize..self.start[r as usize + 1] as usize]
    }

    pub(super) fn rows(&self) -> usize {
        self.start.len() - 1
    }

    /// The slots of row `r` in the flat item array.
    pub(super) fn slots(&self, r: u32) -> std::ops::Range<u32> {
        self.start[r as usize]..self.start[r as usize + 1]
    }

    pub(super) fn item(&self, slot: u32) -> T {
        self.items[slot as usize]
    }
}

pub(super) struct Index<'a> {
    pub(super) log: &'a DeliveryLog,
    /// `u64` words per group bit set.
    words: usize,
    /// Per process (dense = position in `log.processes`): its groups, as a bit set.
    process_groups: Vec<u64>,
    /// Per message (dense = position in `log.casts`): its destination groups, as a bit set.
    destination_groups: Vec<u64>,
    /// Per message: the processes of its destination groups, each once.
    pub(super) destination_processes: Rows<u32>,
    pub(super) process_of: HashMap<ProcessNo, u32>,
    pub(super) message_of: HashMap<MessageId, u32>,
    /// Per message: whether its caster was correct.
    pub(super) caster_correct: Vec<bool>,
    /// Per process: its deliveries of cast messages, first delivery of each only, in order. The
    /// order properties are stated over these: a repeated or uncast delivery is an integrity
    /// violation, and counting it again as an order violation would only blur the report.
    pub(super) sequence: Vec<Vec<u32>>,
    /// Per message: `(process, index in that process's sequence)` of each of its deliveries.
    pub(super) delivered_by: Rows<(u32, u32)>,
    /// Integrity violations found while cleaning the sequences, in log order.
    pub(super) integrity: Vec<DeliveryViolation>,
}

impl<'a> Index<'a> {
    pub(super) fn build(log: &'a DeliveryLog) -> Result<Index<'a>, Vec<LogMalformation>> {
        let mut malformed = Vec::new();

        let mut group_of: HashMap<GroupId, u32> = HashMap::new();
        for (i, g) in log.groups.iter().enumerate() {
            if group_of.insert(g.id, i as u32).is_some() {
                malformed.push(LogMalformation::DuplicateGroup { group: g.id });
            }
        }
        let mut process_of: HashMap<ProcessNo, u32> = HashMap::new();
        for (i, l) in log.processes.iter().enumerate() {
            if process_of.insert(l.process, i as u32).is_some() {
                malformed.push(LogMalformation::DuplicateProcess { process: l.process });
            }
        }
        let words = log.groups.len().div_ceil(64).max(1);
        let mut process_groups = vec![0u64; log.processes.len() * words];
        for (gi, g) in log.groups.iter().enumerate() {
            for &p in &g.members {
                match process_of.get(&p) {
                    Some(&pi) => process_groups[pi as usize * words + gi / 64] |= 1 << (gi % 64),
                    None => malformed.push(LogMalformation::MemberWithoutLog {
                        group: g.id,
                        process: p,
                    }),
                }
            }
        }

        let mut message_of: HashMap<MessageId, u32> = HashMap::with_capacity(log.casts.len());
        let mut destination_groups = vec![0u64; log.casts.len() * words];
        let mut caster_correct = Vec::with_capacity(log.casts.len());
        for (mi, c) in log.casts.iter().enumerate() {
            match message_of.entry(c.message) {
                Entry::Occupied(_) => {
                    malformed.push(LogMalformation::DuplicateCast { message: c.message })
                }
                Entry::Vacant(v) => {
                    v.insert(mi as u32);
                }
            }
            if c.destinations.is_empty() {
                malformed.push(LogMalformation::NoDestination { message: c.message });
            }
            for g in &c.destinations {
                match group_of.get(g) {
                    Some(&gi) => {
                        let gi = gi as usize;
                        destination_groups[mi * words + gi / 64] |= 1 << (gi % 64);
                    }
                    None => malformed.push(LogMalformation::UnknownDestination {
                        message: c.message,
                        group: *g,
                    }),
                }
            }
            let logged = process_of
                .get(&c.caster)
                .map(|&pi| log.processes[pi as usize].correct);
            let correct = match (c.correct, logged) {
                (Some(said), Some(logged)) if said != logged => {
                    malformed.push(LogMalformation::CasterCorrectnessConflict {
                        message: c.message,
                        caster: c.caster,
                        cast_says: said,
                    });
                    said
                }
                (Some(said), _) => said,
                (None, Some(logged)) => logged,
                (None, None) => {
                    malformed.push(LogMalformation::CasterCorrectnessUnknown {
                        message: c.message,
                        caster: c.caster,
                    });
                    false
                }
            };
            caster_correct.push(correct);
        }
        if !malformed.is_empty() {
            return Err(malformed);
        }

        let messages = log.casts.len();
        let mut index = Index {
            log,
            words,
            process_groups,
            destination_groups,
            destination_processes: Rows {
                start: vec![0],
                items: Vec::new(),
            },
            process_of,
            message_of,
            caster_correct,
            sequence: Vec::with_capacity(log.processes.len()),
            delivered_by: Rows {
                start: vec![0],
                items: Vec::new(),
            },
            integrity: Vec::new(),
        };

        // Destination processes: a process in two destination groups is listed once.
        let mut seen = vec![NONE; log.processes.len()];
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for (mi, c) in log.casts.iter().enumerate() {
            for g in &c.destinations {
                for p in &log.groups[group_of[g] as usize].members {
                    let pi = index.process_of[p];
                    if seen[pi as usize] != mi as u32 {
                        seen[pi as usize] = mi as u32;
                        pairs.push((mi as u32, pi));
                    }
                }
            }
        }
        index.destination_processes = Rows::build(messages, pairs.iter().copied());

        // Clean each sequence, deciding integrity on the way. `last[m]` is the process that
        // last delivered m and where, so a repetition is found in one pass without a set per
        // process.
        let mut last: Vec<(u32, u32)> = vec![(NONE, 0); messages];
        for (pi, l) in log.processes.iter().enumerate() {
            let pi = pi as u32;
            let mut sequence = Vec::with_capacity(l.delivered.len());
            for (at, &m) in l.delivered.iter().enumerate() {
                let Some(&mi) = index.message_of.get(&m) else {
                    index.integrity.push(DeliveryViolation::UncastDelivery {
                        process: l.process,
                        message: m,
                        index: at,
                    });
                    continue;
                };
                let (who, first) = last[mi as usize];
                if who == pi {
                    index.integrity.push(DeliveryViolation::DuplicateDelivery {
                        process: l.process,
                        message: m,
                        first: first as usize,
                        again: at,
                    });
                    continue;
                }
                last[mi as usize] = (pi, at as u32);
                if !index.is_destination(pi, mi) {
                    index.integrity.push(DeliveryViolation::OutsideDestination {
                        process: l.process,
                        message: m,
                        destinations: log.casts[mi as usize].destinations.clone(),
                    });
                }
                sequence.push(mi);
            }
            index.sequence.push(sequence);
        }
        let deliveries = index.sequence.iter().enumerate().flat_map(|(p, s)| {
            s.iter()
                .enumerate()
                .map(move |(at, &m)| (m, (p as u32, at as u32)))
        });
        index.delivered_by = Rows::build(messages, deliveries);
        Ok(index)
    }

    pub(super) fn processes(&self) -> usize {
        self.log.processes.len()
    }

    pub(super) fn messages(&self) -> usize {
        self.log.casts.len()
    }

    /// The process number of dense process `p`.
    pub(super) fn process_no(&self, p: u32) -> ProcessNo {
        self.log.processes[p as usize].process
    }

    pub(super) fn correct(&self, p: u32) -> bool {
        self.log.processes[p as usize].correct
    }

    /// The message id of dense message `m`.
    pub(super) fn message_id(&self, m: u32) -> MessageId {
        self.log.casts[m as usize].message
    }

    pub(super) fn groups(&self) -> usize {
        self.log.groups.len()
    }

    /// The members of dense group `g` (its position in the log), as dense processes, sorted,
    /// each once.
    pub(super) fn members(&self, g: u32) -> Vec<u32> {
        let mut ms: Vec<u32> = self.log.groups[g as usize]
            .members
            .iter()
            .map(|p| self.process_of[p])
            .collect();
        ms.sort_unstable();
        ms.dedup();
        ms
    }

    /// Whether dense group `g` is one of dense message `m`'s destination groups.
    pub(super) fn addresses(&self, m: u32, g: u32) -> bool {
        let word = self.destination_groups[m as usize * self.words + g as usize / 64];
        word & (1 << (g % 64)) != 0
    }

    /// Whether dense process `p` is in one of dense message `m`'s destination groups.
    pub(super) fn is_destination(&self, p: u32, m: u32) -> bool {
        let w = self.words;
        let a = &self.process_groups[p as usize * w..(p as usize + 1) * w];
        let b = &self.destination_groups[m as usize * w..(m as usize + 1) * w];
        a.iter().zip(b).any(|(x, y)| x & y != 0)
    }
}
