//! Shared by the tests and the benchmark: a generator of serial histories (transactions run one
//! after another on a model key-value store, recorded exactly), and an independent check that
//! a reported cycle's edges are really in the history.
#![allow(dead_code)]

use ensemble_history::{Cycle, EdgeKind, History, Transaction, TxnId};
use rand::seq::SliceRandom;
use rand::Rng;
use std::collections::HashMap;

/// The shape of a generated serial history.
#[derive(Clone, Debug)]
pub struct Shape {
    pub transactions: usize,
    pub keys: usize,
    /// Operations per transaction, at least 1.
    pub max_ops: usize,
    /// Replicas in the system; each key is held by `replication` consecutive ones.
    pub replicas: usize,
    pub replication: usize,
    /// Sessions the transactions are spread over (0: no sessions recorded).
    pub sessions: u64,
    pub read_only: f64,
    pub abort: f64,
    /// Whether reads and writes record values.
    pub values: bool,
}

impl Shape {
    pub fn small(transactions: usize) -> Shape {
        Shape {
            transactions,
            keys: 6,
            max_ops: 4,
            replicas: 3,
            replication: 2,
            sessions: 3,
            read_only: 0.3,
            abort: 0.1,
            values: true,
        }
    }
}

/// The replica names holding `key`.
pub fn replicas_of(shape: &Shape, key: usize) -> impl Iterator<Item = String> + '_ {
    (0..shape.replication.min(shape.replicas))
        .map(move |i| format!("r{}", (key + i) % shape.replicas))
}

/// Runs random transactions one at a time on a model store and records exactly what each read
/// (writer and value) and wrote, and what each replica installed. Transaction ids are not dense
/// (to exercise the id mapping).
pub fn serial_history(rng: &mut impl Rng, shape: &Shape) -> History {
    let mut store: Vec<Option<(TxnId, String)>> = vec![None; shape.keys];
    let key_names: Vec<String> = (0..shape.keys).map(|k| format!("k{k}")).collect();
    let mut h = History::new();
    for i in 0..shape.transactions {
        let id = 3 * i as u64 + 11;
        let mut t = if rng.random_bool(shape.abort) {
            Transaction::aborted(id)
        } else {
            Transaction::committed(id)
        };
        if shape.sessions > 0 {
            t = t.in_session(rng.random_range(0..shape.sessions));
        }
        let read_only = rng.random_bool(shape.read_only);
        let mut own: HashMap<usize, String> = HashMap::new();
        let ops = rng.random_range(1..=shape.max_ops);
        for j in 0..ops {
            let k = rng.random_range(0..shape.keys);
            let name = &key_names[k];
            let read = |t: Transaction, own: &HashMap<usize, String>| match own.get(&k) {
                Some(v) => record_read(t, name, Some(id), Some(v), shape.values),
                None => {
                    let (w, v) = store[k]
                        .as_ref()
                        .map_or((None, None), |(w, v)| (Some(*w), Some(v.as_str())));
                    record_read(t, name, w, v, shape.values)
                }
            };
            if read_only || rng.random_bool(0.4) {
                t = read(t, &own);
            } else {
                if rng.random_bool(0.5) {
                    t = read(t, &own); // read-modify-write
                }
                let value = format!("{id}.{j}");
                t = if shape.values {
                    t.write(name, &value)
                } else {
                    t.write_key(name)
                };
                own.insert(k, value);
            }
        }
        if t.committed {
            for (&k, value) in &own {
                store[k] = Some((id, value.clone()));
            }
            // Install in key order so replicas see a deterministic sequence.
            let mut written: Vec<usize> = own.keys().copied().collect();
            written.sort_unstable();
            for k in written {
                for r in replicas_of(shape, k) {
                    h.add_install(&r, &key_names[k], id);
                }
            }
        }
        h.add_transaction(t);
    }
    h
}

fn record_read(
    t: Transaction,
    key: &str,
    writer: Option<TxnId>,
    value: Option<&str>,
    values: bool,
) -> Transaction {
    match (values, value) {
        (true, Some(v)) => t.read_value(key, writer, v),
        _ => t.read(key, writer),
    }
}

/// The version order of each key: the first install report of it, else the committed writers in
/// order of commit number.
pub fn version_orders(h: &History) -> HashMap<String, Vec<TxnId>> {
    let mut orders: HashMap<String, Vec<TxnId>> = HashMap::new();
    for i in h.installs() {
        orders
            .entry(i.key.clone())
            .or_insert_with(|| i.order.clone());
    }
    let txns: Vec<Transaction> = h.transactions().collect();
    let mut by_commit: HashMap<String, Vec<(u64, TxnId)>> = HashMap::new();
    for t in txns.iter().filter(|t| t.committed) {
        let mut keys: Vec<&str> = t.writes.iter().map(|w| w.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            if !orders.contains_key(k) {
                by_commit
                    .entry(k.to_owned())
                    .or_default()
                    .push((t.commit.unwrap_or(0), t.id));
            }
        }
    }
    for (k, mut v) in by_commit {
        v.sort_unstable();
        orders.insert(k, v.into_iter().map(|(_, t)| t).collect());
    }
    // Aborted writers are not versions.
    let committed: std::collections::HashSet<TxnId> =
        txns.iter().filter(|t| t.committed).map(|t| t.id).collect();
    for order in orders.values_mut() {
        order.retain(|t| committed.contains(t));
    }
    orders
}

/// Asserts that every edge of `cycle` is justified by the history, straight from the
/// definitions, and that the edges form a closed walk.
pub fn assert_cycle_is_real(h: &History, cycle: &Cycle) {
    let txns: HashMap<TxnId, Transaction> = h.transactions().map(|t| (t.id, t)).collect();
    let orders = version_orders(h);
    let n = cycle.edges.len();
    assert!(n >= 2, "cycle {cycle} too short");
    for (i, e) in cycle.edges.iter().enumerate() {
        assert_eq!(
            e.to,
            cycle.edges[(i + 1) % n].from,
            "cycle {cycle} is not closed"
        );
        assert_ne!(e.from, e.to, "self-loop in {cycle}");
        let from = &txns[&e.from];
        let to = &txns[&e.to];
        assert!(
            from.committed && to.committed,
            "aborted transaction on {cycle}"
        );
        let key = e.key.as_deref();
        let order = key.and_then(|k| orders.get(k)).cloned().unwrap_or_default();
        let pos =
            |t: Option<TxnId>| t.map_or(Some(usize::MAX), |t| order.iter().position(|&x| x == t));
        let next_after = |t: Option<TxnId>| match pos(t) {
            Some(usize::MAX) => order.first().copied(),
            Some(p) => order.get(p + 1).copied(),
            None => None,
        };
        let justified = match e.kind {
            EdgeKind::Ww => next_after(Some(e.from)) == Some(e.to),
            EdgeKind::Wr => to
                .reads
                .iter()
                .any(|r| Some(r.key.as_str()) == key && r.writer == Some(e.from)),
            EdgeKind::Rw => from.reads.iter().any(|r| {
                Some(r.key.as_str()) == key
                    && r.writer != Some(e.from)
                    && next_after(r.writer) == Some(e.to)
            }),
            EdgeKind::So => {
                let all: Vec<&Transaction> = h
                    .transactions()
                    .filter(|t| t.committed && t.session.is_some() && t.session == from.session)
                    .map(|t| txns.get(&t.id).unwrap())
                    .collect();
                let p = all.iter().position(|t| t.id == e.from);
                p.is_some_and(|p| all.get(p + 1).map(|t| t.id) == Some(e.to))
            }
        };
        assert!(justified, "edge {i} of {cycle} is not in the history");
    }
}

// ---------------------------------------------------------------------------------------------
// Small arbitrary histories and the brute-force serializability oracle.

/// A small arbitrary (not necessarily serial) history: random reads from random writers (or the
/// initial version, an aborted writer, an intermediate value), random version orders.
pub fn arbitrary_history(r: &mut impl Rng, max_txns: usize) -> History {
    let keys = ["a", "b", "c"];
    let n = r.random_range(2..=max_txns);
    let nkeys = r.random_range(1..=3usize);
    let sessions = r.random_bool(0.5);
    struct Plan {
        id: TxnId,
        committed: bool,
        writes: Vec<(usize, String)>,
    }
    let plans: Vec<Plan> = (0..n)
        .map(|i| {
            let id = (i as u64 + 1) * 10;
            let mut writes = Vec::new();
            for _ in 0..r.random_range(0..=2) {
                let k = r.random_range(0..nkeys);
                writes.push((k, format!("{id}{}", keys[k])));
                if r.random_bool(0.15) {
                    writes.push((k, format!("{id}{}'", keys[k]))); // overwritten later: intermediate
                    let last = writes.len() - 1;
                    writes.swap(last, last - 1);
                }
            }
            Plan {
                id,
                committed: i + 1 == n || r.random_bool(0.9),
                writes,
            }
        })
        .collect();
    let writers = |k: usize| -> Vec<&Plan> {
        plans
            .iter()
            .filter(|p| p.writes.iter().any(|w| w.0 == k))
            .collect()
    };
    let mut h = History::new();
    for p in &plans {
        let mut t = if p.committed {
            Transaction::committed(p.id)
        } else {
            Transaction::aborted(p.id)
        };
        if sessions {
            t = t.in_session(r.random_range(0..2));
        }
        for _ in 0..r.random_range(0..=3) {
            let k = r.random_range(0..nkeys);
            let ws = writers(k);
            let choice = r.random_range(0..=ws.len());
            if choice == ws.len() {
                t = t.read(keys[k], None);
            } else {
                let w = ws[choice];
                let values: Vec<&String> =
                    w.writes.iter().filter(|x| x.0 == k).map(|x| &x.1).collect();
                let v = if r.random_bool(0.2) {
                    values[0]
                } else {
                    values[values.len() - 1]
                };
                t = if r.random_bool(0.7) {
                    t.read_value(keys[k], Some(w.id), v)
                } else {
                    t.read(keys[k], Some(w.id))
                };
            }
        }
        for (k, v) in &p.writes {
            t = t.write(keys[*k], v);
        }
        h.add_transaction(t);
    }
    for (k, key) in keys.iter().enumerate().take(nkeys) {
        let mut order: Vec<TxnId> = writers(k)
            .iter()
            .filter(|p| p.committed)
            .map(|p| p.id)
            .collect();
        order.shuffle(r);
        for &t in &order {
            h.add_install("r0", key, t);
            h.add_install("r1", key, t);
        }
    }
    h
}

/// Serializable iff some order of the committed transactions, keeping each session's order,
/// replayed on a model store, gives every read the writer (and value) it recorded and installs
/// every key's versions in the recorded version order.
pub fn oracle_serializable(h: &History) -> bool {
    let txns: Vec<Transaction> = h.transactions().filter(|t| t.committed).collect();
    let orders = version_orders(h);
    let mut perm: Vec<usize> = (0..txns.len()).collect();
    permutations(&mut perm, 0, &mut |perm| {
        replays(&txns, perm, &orders, true)
    })
}

pub fn permutations(v: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&[usize]) -> bool) -> bool {
    if k == v.len() {
        return f(v);
    }
    for i in k..v.len() {
        v.swap(k, i);
        if permutations(v, k + 1, f) {
            v.swap(k, i);
            return true;
        }
        v.swap(k, i);
    }
    false
}

pub fn replays(
    txns: &[Transaction],
    perm: &[usize],
    orders: &HashMap<String, Vec<TxnId>>,
    sessions: bool,
) -> bool {
    // Session order: within a session, the permutation keeps order of appearance.
    let mut last_pos: HashMap<u64, usize> = HashMap::new();
    for &i in perm.iter().filter(|_| sessions) {
        if let Some(s) = txns[i].session {
            if last_pos.get(&s).is_some_and(|&p| p > i) {
                return false;
            }
            last_pos.insert(s, i);
        }
    }
    let mut store: HashMap<&str, (TxnId, Option<&str>)> = HashMap::new();
    let mut installed: HashMap<&str, Vec<TxnId>> = HashMap::new();
    for &i in perm {
        let t = &txns[i];
        for read in &t.reads {
            if read.writer == Some(t.id) {
                continue; // its own write
            }
            let current = store.get(read.key.as_str());
            if current.map(|c| c.0) != read.writer {
                return false;
            }
            if let (Some(v), Some((_, Some(cv)))) = (&read.value, current) {
                if v != cv {
                    return false;
                }
            }
        }
        for w in &t.writes {
            store.insert(&w.key, (t.id, w.value.as_deref()));
        }
        let mut keys: Vec<&str> = t.writes.iter().map(|w| w.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            installed.entry(k).or_default().push(t.id);
        }
    }
    orders.iter().all(|(k, order)| {
        installed
            .get(k.as_str())
            .map_or(order.is_empty(), |v| v == order)
    })
}

// ---------------------------------------------------------------------------------------------
// A snapshot-isolation engine.

/// Runs `shape.transactions` transactions, up to `concurrency` at a time, under snapshot
/// isolation: each reads the latest versions committed before it started (or its own writes),
/// and commits only if no transaction that committed after it started wrote a key it writes
/// (first committer wins). Transactions appear in the history when they finish; installs follow
/// commit order. Sessions are not recorded (concurrent transactions of one session would break
/// session order). The histories satisfy SI, hence PSI, NMSI and RC, and are often not
/// serializable (write skew).
pub fn si_history(rng: &mut impl Rng, shape: &Shape, concurrency: usize) -> History {
    struct Active {
        t: Transaction,
        snapshot: u64,
        own: HashMap<usize, String>,
        ops_left: usize,
        read_only: bool,
    }
    let key_names: Vec<String> = (0..shape.keys).map(|k| format!("k{k}")).collect();
    // Per key, committed versions (commit time, writer, value), oldest first.
    let mut versions: Vec<Vec<(u64, TxnId, String)>> = vec![Vec::new(); shape.keys];
    let mut clock = 0u64;
    let mut active: Vec<Active> = Vec::new();
    let mut started = 0usize;
    let mut h = History::new();
    while started < shape.transactions || !active.is_empty() {
        if started < shape.transactions
            && (active.len() < concurrency && rng.random_bool(0.5) || active.is_empty())
        {
            let id = 5 * started as u64 + 2;
            started += 1;
            active.push(Active {
                t: Transaction::committed(id),
                snapshot: clock,
                own: HashMap::new(),
                ops_left: rng.random_range(1..=shape.max_ops),
                read_only: rng.random_bool(shape.read_only),
            });
            continue;
        }
        let a = rng.random_range(0..active.len());
        let tx = &mut active[a];
        if tx.ops_left > 0 {
            tx.ops_left -= 1;
            let k = rng.random_range(0..shape.keys);
            let name = &key_names[k];
            let id = tx.t.id;
            let read =
                |t: Transaction, own: &HashMap<usize, String>, snapshot: u64| match own.get(&k) {
                    Some(v) => record_read(t, name, Some(id), Some(v), shape.values),
                    None => {
                        let seen = versions[k].iter().rev().find(|v| v.0 <= snapshot);
                        let (w, v) =
                            seen.map_or((None, None), |(_, w, v)| (Some(*w), Some(v.as_str())));
                        record_read(t, name, w, v, shape.values)
                    }
                };
            let t = std::mem::replace(&mut tx.t, Transaction::committed(0));
            tx.t = if tx.read_only || rng.random_bool(0.4) {
                read(t, &tx.own, tx.snapshot)
            } else {
                let t = if rng.random_bool(0.5) {
                    read(t, &tx.own, tx.snapshot)
                } else {
                    t
                };
                let value = format!("{id}.{}", tx.ops_left);
                tx.own.insert(k, value.clone());
                if shape.values {
                    t.write(name, &value)
                } else {
                    t.write_key(name)
                }
            };
            continue;
        }
        let mut tx = active.swap_remove(a);
        let conflict = tx
            .own
            .keys()
            .any(|&k| versions[k].last().is_some_and(|v| v.0 > tx.snapshot));
        if conflict || rng.random_bool(shape.abort) {
            tx.t.committed = false;
        } else {
            clock += 1;
            let mut written: Vec<usize> = tx.own.keys().copied().collect();
            written.sort_unstable();
            for k in written {
                versions[k].push((clock, tx.t.id, tx.own[&k].clone()));
                for r in replicas_of(shape, k) {
                    h.add_install(&r, &key_names[k], tx.t.id);
                }
            }
        }
        h.add_transaction(tx.t);
    }
    h
}
