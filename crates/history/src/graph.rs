//! From a history to its dependency graph, exactly, with nothing inferred.
//!
//! * The **version order** of each key (what Adya calls `<<`) is given, not guessed: the install
//!   order of the first replica that reported installs for the key, else the writers' `commit`
//!   numbers, else the key must have a single committed writer. The writers in it are the
//!   committed transactions that wrote the key; a transaction's version is its last write.
//! * `ww`: each version to the next one of the same key.
//! * `wr`: the writer of the version read to the reader.
//! * `rw`: the reader to the writer of the version right after the one it read (or after the
//!   initial version). A read of one's own write is internal and adds no edge.
//! * `so`: each committed transaction of a session to the next committed one.
//!
//! Aborted transactions get no edges. Along the way the build records what makes the history
//! uncheckable ([`Malformation`]) and the anomalies that are not cycles: reads of aborted
//! versions (G1a), of intermediate versions (G1b) and installs of aborted versions.

use crate::hash::FastMap;
use crate::model::{History, TxnId, NO_VALUE};
use crate::replicas;
use crate::report::{EdgeCounts, EdgeKind, Malformation, Violation};
use crate::scc::{self, Components, Digraph, NONE};
use std::ops::Range;

/// The dependency graph over the dense indices of the history's transactions (their order of
/// appearance), in compressed sparse row form. Each edge carries its kind and key packed in one
/// `u32`, so an edge costs 8 bytes.
pub(crate) struct Graph {
    offsets: Vec<u32>,
    targets: Vec<u32>,
    labels: Vec<u32>,
}

const KIND_BITS: u32 = 2;

fn label(kind: EdgeKind, key: u32) -> u32 {
    (key << KIND_BITS) | kind as u32
}

impl Graph {
    pub(crate) fn node_count(&self) -> usize {
        self.offsets.len() - 1
    }

    pub(crate) fn edges(&self, v: u32) -> Range<u32> {
        self.offsets[v as usize]..self.offsets[v as usize + 1]
    }

    pub(crate) fn target(&self, slot: u32) -> u32 {
        self.targets[slot as usize]
    }

    pub(crate) fn kind(&self, slot: u32) -> EdgeKind {
        EdgeKind::ALL[(self.labels[slot as usize] & ((1 << KIND_BITS) - 1)) as usize]
    }

    pub(crate) fn key(&self, slot: u32) -> u32 {
        self.labels[slot as usize] >> KIND_BITS
    }

    /// Builds the rows from an edge list by counting sort on the source.
    fn from_edges(n: usize, edges: &[(u32, u32, u32)]) -> Graph {
        let mut offsets = vec![0u32; n + 1];
        for &(from, _, _) in edges {
            offsets[from as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; edges.len()];
        let mut labels = vec![0u32; edges.len()];
        for &(from, to, l) in edges {
            let at = fill[from as usize] as usize;
            fill[from as usize] += 1;
            targets[at] = to;
            labels[at] = l;
        }
        Graph {
            offsets,
            targets,
            labels,
        }
    }
}

/// The whole graph, every edge kind.
impl Digraph for Graph {
    fn node_count(&self) -> usize {
        Graph::node_count(self)
    }
    fn slots(&self, v: u32) -> Range<u32> {
        self.edges(v)
    }
    fn target(&self, _v: u32, slot: u32) -> Option<u32> {
        Some(Graph::target(self, slot))
    }
}

/// A history prepared for checking: its graph, its components, and the violations every
/// criterion shares.
pub(crate) struct Analysis<'h> {
    pub(crate) history: &'h History,
    /// Transaction id → dense index.
    pub(crate) index: FastMap<TxnId, u32>,
    pub(crate) graph: Graph,
    pub(crate) counts: EdgeCounts,
    pub(crate) committed: Vec<bool>,
    pub(crate) committed_count: usize,
    /// Non-empty: the history cannot be checked, and `graph` is empty.
    pub(crate) malformed: Vec<Malformation>,
    /// G1a, G1b, aborted installs and replica disagreements: violations under every criterion.
    pub(crate) shared: Vec<Violation>,
    /// Components of the whole graph. Every cycle any criterion forbids lies inside one of
    /// them, so the criteria search only `full.on_cycle` nodes.
    pub(crate) full: Components,
}

impl Analysis<'_> {
    pub(crate) fn id(&self, v: u32) -> TxnId {
        self.history.txns[v as usize].id
    }

    pub(crate) fn is_update(&self, v: u32) -> bool {
        let (s, e) = self.history.txns[v as usize].writes;
        s != e
    }
}

/// Builds the graph; see the module documentation for the rules.
pub(crate) fn analyze(h: &History) -> Analysis<'_> {
    let n = h.txns.len();
    assert!(
        h.key_count() < (1 << (32 - KIND_BITS)),
        "fewer than 2^30 distinct keys"
    );
    let mut malformed = Vec::new();
    let mut shared = Vec::new();

    let mut index: FastMap<TxnId, u32> = FastMap::default();
    index.reserve(n);
    for (i, t) in h.txns.iter().enumerate() {
        if index.insert(t.id, i as u32).is_some() {
            malformed.push(Malformation::DuplicateTransaction { id: t.id });
        }
    }
    let committed: Vec<bool> = h.txns.iter().map(|t| t.committed).collect();
    let committed_count = committed.iter().filter(|&&c| c).count();

    let orders = VersionOrders::build(h, &index, &committed, &mut malformed, &mut shared);
    replicas::check_agreement(h, &index, &mut shared);

    let mut edges: Vec<(u32, u32, u32)> = Vec::with_capacity(h.reads.len() * 2 + h.writes.len());
    let mut counts = EdgeCounts::default();
    let mut push = |from: u32, to: u32, kind: EdgeKind, key: u32| {
        counts.add(kind);
        edges.push((from, to, label(kind, key)));
    };

    // ww: consecutive versions.
    for key in 0..h.key_count() as u32 {
        for pair in orders.of(key).windows(2) {
            push(pair[0], pair[1], EdgeKind::Ww, key);
        }
    }

    // wr and rw, from every read of a committed transaction; reads of aborted transactions are
    // only checked for well-formedness.
    for r in 0..n as u32 {
        let reader = &h.txns[r as usize];
        for read in h.reads_of(r as usize) {
            let key = read.key;
            let key_name = || h.key_name(key).to_owned();
            // The position in the version order of the first version the reader did not see.
            let next_pos = match read.writer {
                None => 0,
                Some(wid) => {
                    let Some(&w) = index.get(&wid) else {
                        malformed.push(Malformation::UnknownWriter {
                            reader: reader.id,
                            key: key_name(),
                            writer: wid,
                        });
                        continue;
                    };
                    let Some(last) = last_write(h, w, key) else {
                        malformed.push(Malformation::WriterDidNotWriteKey {
                            reader: reader.id,
                            key: key_name(),
                            writer: wid,
                        });
                        continue;
                    };
                    if !reader.committed || w == r {
                        continue; // aborted readers take no part; reading one's own write is internal
                    }
                    if !committed[w as usize] {
                        shared.push(Violation::AbortedRead {
                            reader: reader.id,
                            key: key_name(),
                            writer: wid,
                        });
                        continue;
                    }
                    if read.value != NO_VALUE {
                        if let Some(v) = check_value(h, w, key, last, read.value) {
                            match v {
                                ValueCheck::Intermediate(value) => {
                                    shared.push(Violation::IntermediateRead {
                                        reader: reader.id,
                                        key: key_name(),
                                        writer: wid,
                                        value,
                                    })
                                }
                                ValueCheck::NeverWritten(value) => {
                                    malformed.push(Malformation::ValueNotWritten {
                                        reader: reader.id,
                                        key: key_name(),
                                        writer: wid,
                                        value,
                                    });
                                    continue;
                                }
                            }
                        }
                    }
                    push(w, r, EdgeKind::Wr, key);
                    match orders.position(last) {
                        Some(p) => p + 1,
                        None => continue, // no version order (already reported as malformed)
                    }
                }
            };
            if !reader.committed {
                continue;
            }
            if let Some(&next) = orders.of(key).get(next_pos as usize) {
                if next != r {
                    push(r, next, EdgeKind::Rw, key);
                }
            }
        }
    }

    // so: consecutive committed transactions of each session.
    let mut last_in_session: FastMap<u64, u32> = FastMap::default();
    for (i, t) in h.txns.iter().enumerate() {
        if let (Some(s), true) = (t.session, t.committed) {
            if let Some(prev) = last_in_session.insert(s, i as u32) {
                push(prev, i as u32, EdgeKind::So, 0);
            }
        }
    }

    if !malformed.is_empty() {
        edges.clear();
    }
    let graph = Graph::from_edges(n, &edges);
    drop(edges);
    let full = scc::components(&graph, 0..n as u32);
    Analysis {
        history: h,
        index,
        graph,
        counts,
        committed,
        committed_count,
        malformed,
        shared,
        full,
    }
}

/// The record index of transaction `t`'s last write to `key`: the version it installs.
pub(crate) fn last_write(h: &History, t: u32, key: u32) -> Option<u32> {
    let first = h.first_write(t as usize);
    h.writes_of(t as usize)
        .iter()
        .rposition(|w| w.key == key)
        .map(|j| first + j as u32)
}

enum ValueCheck {
    Intermediate(String),
    NeverWritten(String),
}

/// Compares a read's value with what its writer wrote to the key. `None`: it is the writer's
/// final value, or the writer's values were not recorded.
fn check_value(h: &History, w: u32, key: u32, last: u32, value: u32) -> Option<ValueCheck> {
    let read = h.values.get(value)?;
    let last_value = h.values.get(h.writes[last as usize].value)?;
    if read == last_value {
        return None;
    }
    let earlier = h
        .writes_of(w as usize)
        .iter()
        .any(|wr| wr.key == key && h.values.get(wr.value) == Some(read));
    Some(if earlier {
        ValueCheck::Intermediate(read.to_owned())
    } else {
        ValueCheck::NeverWritten(read.to_owned())
    })
}

/// The version order of every key, as committed transactions (dense indices), and the position
/// of each installed write in its key's order.
struct VersionOrders {
    start: Vec<u32>,
    order: Vec<u32>,
    /// Per write record: its position in its key's order (`NONE` for intermediate writes,
    /// aborted writers and keys without an order).
    position: Vec<u32>,
}

impl VersionOrders {
    fn of(&self, key: u32) -> &[u32] {
        &self.order[self.start[key as usize] as usize..self.start[key as usize + 1] as usize]
    }

    fn position(&self, write: u32) -> Option<u32> {
        let p = self.position[write as usize];
        (p != NONE).then_some(p)
    }

    fn build(
        h: &History,
        index: &FastMap<TxnId, u32>,
        committed: &[bool],
        malformed: &mut Vec<Malformation>,
        shared: &mut Vec<Violation>,
    ) -> VersionOrders {
        let keys = h.key_count();
        // The installed write of each committed transaction for each key it wrote, grouped by
        // key by a stable counting sort, so each key's writers are in order of appearance.
        let mut installed: Vec<(u32, u32, u32)> = Vec::new(); // (key, txn, write record)
        let mut stamp = vec![NONE; keys];
        for (t, rec) in h.txns.iter().enumerate() {
            if !rec.committed {
                continue;
            }
            let first = h.first_write(t);
            for (j, w) in h.writes_of(t).iter().enumerate().rev() {
                if stamp[w.key as usize] != t as u32 {
                    stamp[w.key as usize] = t as u32;
                    installed.push((w.key, t as u32, first + j as u32));
                }
            }
        }
        drop(stamp);
        let mut start = vec![0u32; keys + 1];
        for &(key, _, _) in &installed {
            start[key as usize + 1] += 1;
        }
        for k in 0..keys {
            start[k + 1] += start[k];
        }
        let mut fill = start.clone();
        let mut writes_by_key = vec![(0u32, 0u32); installed.len()];
        for &(key, txn, write) in &installed {
            writes_by_key[fill[key as usize] as usize] = (txn, write);
            fill[key as usize] += 1;
        }
        drop(installed);
        drop(fill);

        let mut position = vec![NONE; h.writes.len()];
        let mut order = vec![NONE; writes_by_key.len()];

        // The first install report of each key gives its order.
        let mut first_report = vec![NONE; keys];
        for (e, rec) in h.installs.iter().enumerate() {
            if first_report[rec.key as usize] == NONE {
                first_report[rec.key as usize] = e as u32;
            }
        }
        validate_installs(h, index, committed, malformed, shared);

        for key in 0..keys {
            let range = start[key] as usize..start[key + 1] as usize;
            let writes = &writes_by_key[range.clone()];
            let key_name = || h.key_name(key as u32).to_owned();
            let report = first_report[key];
            if report != NONE {
                let rec = &h.installs[report as usize];
                let replica = h.replicas.name(rec.replica);
                let mut p = 0u32;
                for id in &rec.order {
                    let Some(&t) = index.get(id) else { continue };
                    if !committed[t as usize] {
                        continue;
                    }
                    let Some(write) = last_write(h, t, key as u32) else {
                        continue;
                    };
                    if position[write as usize] != NONE || p as usize >= writes.len() {
                        continue; // duplicate (reported) or more entries than writers
                    }
                    position[write as usize] = p;
                    order[range.start + p as usize] = t;
                    p += 1;
                }
                for &(t, write) in writes {
                    if position[write as usize] == NONE {
                        malformed.push(Malformation::MissingFromVersionOrder {
                            replica: replica.to_owned(),
                            key: key_name(),
                            txn: h.txns[t as usize].id,
                        });
                    }
                }
            } else if writes.len() == 1
                || writes
                    .iter()
                    .all(|&(t, _)| h.txns[t as usize].commit.is_some())
            {
                let mut by_commit: Vec<(u64, u32, u32)> = writes
                    .iter()
                    .map(|&(t, w)| (h.txns[t as usize].commit.unwrap_or(0), t, w))
                    .collect();
                by_commit.sort_unstable();
                for pair in by_commit.windows(2) {
                    if pair[0].0 == pair[1].0 {
                        malformed.push(Malformation::AmbiguousCommitOrder {
                            key: key_name(),
                            first: h.txns[pair[0].1 as usize].id,
                            second: h.txns[pair[1].1 as usize].id,
                            commit: pair[0].0,
                        });
                    }
                }
                for (p, &(_, t, w)) in by_commit.iter().enumerate() {
                    position[w as usize] = p as u32;
                    order[range.start + p] = t;
                }
            } else {
                malformed.push(Malformation::NoVersionOrder {
                    key: key_name(),
                    writers: writes.iter().map(|&(t, _)| h.txns[t as usize].id).collect(),
                });
            }
        }
        // Keys whose order could not be completed keep `NONE` holes; they only exist in
        // malformed histories, whose graph is discarded. Drop the holes so slices stay valid.
        if !malformed.is_empty() {
            let mut compact_start = vec![0u32; keys + 1];
            let mut compact = Vec::with_capacity(order.len());
            for key in 0..keys {
                compact.extend(
                    order[start[key] as usize..start[key + 1] as usize]
                        .iter()
                        .filter(|&&t| t != NONE),
                );
                compact_start[key + 1] = compact.len() as u32;
            }
            return VersionOrders {
                start: compact_start,
                order: compact,
                position,
            };
        }
        VersionOrders {
            start,
            order,
            position,
        }
    }
}

/// Every install report must name known transactions that wrote the key, each once. Installing
/// an aborted transaction's version is a violation, not a malformation: it is what a buggy
/// protocol would do.
fn validate_installs(
    h: &History,
    index: &FastMap<TxnId, u32>,
    committed: &[bool],
    malformed: &mut Vec<Malformation>,
    shared: &mut Vec<Violation>,
) {
    let mut seen: FastMap<TxnId, ()> = FastMap::default();
    for rec in &h.installs {
        let replica = || h.replicas.name(rec.replica).to_owned();
        let key = || h.key_name(rec.key).to_owned();
        seen.clear();
        for &id in &rec.order {
            if seen.insert(id, ()).is_some() {
                malformed.push(Malformation::DuplicateInstall {
                    replica: replica(),
                    key: key(),
                    txn: id,
                });
                continue;
            }
            let Some(&t) = index.get(&id) else {
                malformed.push(Malformation::UnknownInstalledTransaction {
                    replica: replica(),
                    key: key(),
                    txn: id,
                });
                continue;
            };
            if last_write(h, t, rec.key).is_none() {
                malformed.push(Malformation::InstalledTransactionDidNotWriteKey {
                    replica: replica(),
                    key: key(),
                    txn: id,
                });
            } else if !committed[t as usize] {
                shared.push(Violation::AbortedInstall {
                    replica: replica(),
                    key: key(),
                    txn: id,
                });
            }
        }
    }
}
