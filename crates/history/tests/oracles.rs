//! Independent oracles for every criterion on tiny histories (at most four committed
//! transactions), compared with the checker's verdicts.
//!
//! * SER, SI, PSI: the axiomatic definitions of Cerone, Bernardi & Gotsman (CONCUR 2015), by
//!   enumerating abstract executions: an arbitration order AR (a total order of the committed
//!   transactions that installs every key's versions in the recorded version order) and a
//!   visibility relation VIS ⊆ AR, checking EXT (each read returns the AR-last visible write),
//!   SESSION (SO ⊆ VIS), NOCONFLICT (writers of a common key see one another), and PREFIX (SI:
//!   AR ; VIS ⊆ VIS), TRANSVIS (PSI), or VIS = AR (SER). This tests the graph characterisations
//!   the checker relies on, not just their implementation.
//! * US: updates alone, and updates plus each read-only transaction, replayed in every order.
//! * NMSI: the SRDS 2013 definition read literally, with "depends on" = (WR ∪ WW)+: ACA (reads
//!   of committed, final versions; reads-from and version order acyclic) and CONS.
//! * RC: Adya's PL-2 by its definition (no G1a, G1b; WW ∪ WR acyclic).

mod common;

use common::{arbitrary_history, permutations, replays, version_orders};
use ensemble_history::{check_all, Criterion, History, Transaction, TxnId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

/// The committed transactions, with dense indices, and the facts the oracles need.
struct Tiny {
    txns: Vec<Transaction>,
    orders: HashMap<String, Vec<TxnId>>,
    /// Every read is of a committed transaction's final write, or of the initial version.
    reads_committed_finals: bool,
    /// (reader, key, writer index or None) for external reads.
    reads: Vec<(usize, String, Option<usize>)>,
    /// Session order pairs (transitive).
    so: Vec<(usize, usize)>,
}

impl Tiny {
    fn new(h: &History) -> Tiny {
        let all: Vec<Transaction> = h.transactions().collect();
        let txns: Vec<Transaction> = all.iter().filter(|t| t.committed).cloned().collect();
        let index: HashMap<TxnId, usize> =
            txns.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        let by_id: HashMap<TxnId, &Transaction> = all.iter().map(|t| (t.id, t)).collect();
        let mut reads_committed_finals = true;
        let mut reads = Vec::new();
        for (i, t) in txns.iter().enumerate() {
            for r in &t.reads {
                if r.writer == Some(t.id) {
                    continue;
                }
                match r.writer {
                    None => reads.push((i, r.key.clone(), None)),
                    Some(w) => {
                        let writer = by_id[&w];
                        let last = writer.writes.iter().rev().find(|x| x.key == r.key).unwrap();
                        let fresh =
                            r.value.is_none() || last.value.is_none() || r.value == last.value;
                        if !writer.committed || !fresh {
                            reads_committed_finals = false;
                        } else {
                            reads.push((i, r.key.clone(), Some(index[&w])));
                        }
                    }
                }
            }
        }
        let mut so = Vec::new();
        for a in 0..txns.len() {
            for b in a + 1..txns.len() {
                if txns[a].session.is_some() && txns[a].session == txns[b].session {
                    so.push((a, b));
                }
            }
        }
        Tiny {
            orders: version_orders(h),
            txns,
            reads_committed_finals,
            reads,
            so,
        }
    }

    fn writes(&self, i: usize, key: &str) -> bool {
        self.txns[i].writes.iter().any(|w| w.key == key)
    }

    fn is_update(&self, i: usize) -> bool {
        !self.txns[i].writes.is_empty()
    }

    /// Position of transaction `i`'s version in the key's order.
    fn version(&self, key: &str, i: usize) -> Option<usize> {
        self.orders
            .get(key)?
            .iter()
            .position(|&t| t == self.txns[i].id)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Axioms {
    Ser,
    Si,
    Psi,
}

/// Is there an abstract execution (AR, VIS) satisfying the axioms?
fn axiomatic(t: &Tiny, axioms: Axioms) -> bool {
    if !t.reads_committed_finals {
        return false;
    }
    let n = t.txns.len();
    let mut perm: Vec<usize> = (0..n).collect();
    permutations(&mut perm, 0, &mut |ar| {
        let mut rank = vec![0; n];
        for (p, &i) in ar.iter().enumerate() {
            rank[i] = p;
        }
        // AR installs each key's versions in the recorded order.
        for (key, order) in &t.orders {
            let writers: Vec<TxnId> = ar
                .iter()
                .filter(|&&i| t.writes(i, key))
                .map(|&i| t.txns[i].id)
                .collect();
            if &writers != order {
                return false;
            }
        }
        let pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|&(a, b)| rank[a] < rank[b])
            .collect();
        let choices: Vec<u32> = if axioms == Axioms::Ser {
            vec![(1u32 << pairs.len()) - 1]
        } else {
            (0..1u32 << pairs.len()).collect()
        };
        choices.into_iter().any(|mask| {
            let mut vis = vec![vec![false; n]; n];
            for (bit, &(a, b)) in pairs.iter().enumerate() {
                vis[a][b] = mask & (1 << bit) != 0;
            }
            execution_ok(t, &rank, &vis, axioms)
        })
    })
}

fn execution_ok(t: &Tiny, rank: &[usize], vis: &[Vec<bool>], axioms: Axioms) -> bool {
    let n = t.txns.len();
    // SESSION
    if t.so.iter().any(|&(a, b)| !vis[a][b]) {
        return false;
    }
    // NOCONFLICT
    let pairs = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b)));
    let conflicting =
        |&(a, b): &(usize, usize)| t.txns[a].writes.iter().any(|w| t.writes(b, &w.key));
    if pairs
        .filter(conflicting)
        .any(|(a, b)| !vis[a][b] && !vis[b][a])
    {
        return false;
    }
    // EXT
    for (reader, key, writer) in &t.reads {
        let last = (0..n)
            .filter(|&s| vis[s][*reader] && t.writes(s, key))
            .max_by_key(|&s| rank[s]);
        if last != *writer {
            return false;
        }
    }
    match axioms {
        Axioms::Ser => true,
        // PREFIX: AR ; VIS ⊆ VIS
        Axioms::Si => (0..n)
            .all(|a| (0..n).all(|b| rank[a] >= rank[b] || (0..n).all(|c| !vis[b][c] || vis[a][c]))),
        // TRANSVIS
        Axioms::Psi => {
            (0..n).all(|a| (0..n).all(|b| !vis[a][b] || (0..n).all(|c| !vis[b][c] || vis[a][c])))
        }
    }
}

/// Updates alone, and updates plus each read-only transaction, each serializable (no sessions).
fn us_oracle(t: &Tiny) -> bool {
    if !t.reads_committed_finals {
        return false;
    }
    let serial = |members: Vec<usize>| {
        let txns: Vec<Transaction> = members.iter().map(|&i| t.txns[i].clone()).collect();
        let mut perm: Vec<usize> = (0..txns.len()).collect();
        permutations(&mut perm, 0, &mut |p| replays(&txns, p, &t.orders, false))
    };
    let updates: Vec<usize> = (0..t.txns.len()).filter(|&i| t.is_update(i)).collect();
    serial(updates.clone())
        && (0..t.txns.len()).filter(|&q| !t.is_update(q)).all(|q| {
            let mut members = updates.clone();
            members.push(q);
            members.sort_unstable();
            serial(members)
        })
}

/// `reach[a][b]`: a path of length ≥ 1 from a to b over `edges`.
fn closure(n: usize, edges: &[(usize, usize)]) -> Vec<Vec<bool>> {
    let mut reach = vec![vec![false; n]; n];
    for &(a, b) in edges {
        reach[a][b] = true;
    }
    for k in 0..n {
        for a in 0..n {
            for b in 0..n {
                if reach[a][k] && reach[k][b] {
                    reach[a][b] = true;
                }
            }
        }
    }
    reach
}

/// WR ∪ WW edges between committed transactions (ww: any earlier version to a later one).
fn wr_ww(t: &Tiny) -> Vec<(usize, usize)> {
    let n = t.txns.len();
    let mut edges: Vec<(usize, usize)> = t
        .reads
        .iter()
        .filter_map(|(r, _, w)| w.map(|w| (w, *r)))
        .collect();
    for key in t.orders.keys() {
        for a in 0..n {
            for b in 0..n {
                if let (Some(va), Some(vb)) = (t.version(key, a), t.version(key, b)) {
                    if va < vb {
                        edges.push((a, b));
                    }
                }
            }
        }
    }
    edges
}

fn nmsi_oracle(t: &Tiny) -> bool {
    if !t.reads_committed_finals {
        return false; // ACA
    }
    let n = t.txns.len();
    let depends = closure(n, &wr_ww(t)); // depends[k][i]: Ti depends on Tk
    if (0..n).any(|i| depends[i][i]) {
        return false; // ACA: a transaction cannot read, directly or not, from its own future
    }
    // CONS: Ti reads x_j; every Tk that Ti depends on and that writes x has x_k ≤ x_j.
    t.reads.iter().all(|(i, key, j)| {
        (0..n).all(|k| {
            !depends[k][*i]
                || t.version(key, k)
                    .is_none_or(|vk| j.and_then(|j| t.version(key, j)).is_some_and(|vj| vk <= vj))
        })
    })
}

fn rc_oracle(t: &Tiny) -> bool {
    let n = t.txns.len();
    let reach = closure(n, &wr_ww(t));
    t.reads_committed_finals && (0..n).all(|i| !reach[i][i])
}

/// Two update transactions and two read-only ones over two keys, each read from a random writer
/// or the initial version: rich in long forks and write skews, which arbitrary histories
/// rarely produce without also containing a simpler anomaly.
fn forky(r: &mut ChaCha8Rng) -> History {
    let mut h = History::new();
    let keys = ["a", "b"];
    let mut writers: Vec<Vec<TxnId>> = vec![Vec::new(); 2];
    let mut txns = Vec::new();
    for id in 1..=4u64 {
        let mut t = Transaction::committed(id);
        if r.random_bool(0.3) {
            t = t.in_session(r.random_range(0..2));
        }
        if id <= 2 {
            for (k, key) in keys.iter().enumerate() {
                // Mostly T1 writes a and T2 writes b: independent writes a fork can split.
                if r.random_bool(if k + 1 == id as usize { 0.9 } else { 0.2 }) {
                    t = t.write(key, &format!("{id}{key}"));
                    writers[k].push(id);
                }
            }
        }
        txns.push(t);
    }
    for t in &mut txns {
        let p = if t.writes.is_empty() { 0.9 } else { 0.3 };
        for (k, key) in keys.iter().enumerate() {
            if r.random_bool(p) {
                let choice = r.random_range(0..=writers[k].len());
                let writer = writers[k].get(choice).copied();
                *t = t.clone().read(key, writer);
            }
        }
    }
    for t in txns {
        h.add_transaction(t);
    }
    for (k, key) in keys.iter().enumerate() {
        let mut order = writers[k].clone();
        if r.random_bool(0.5) {
            order.reverse();
        }
        for id in order {
            h.add_install("r0", key, id);
        }
    }
    h
}

#[test]
fn every_criterion_agrees_with_its_oracle_on_tiny_histories() {
    let mut accepted: HashMap<Criterion, usize> = HashMap::new();
    let mut tested = 0;
    let mut si_psi_differ = 0;
    for seed in 0..8000u64 {
        let mut r = ChaCha8Rng::seed_from_u64(seed + 7_000_000);
        let h = if seed % 2 == 0 {
            arbitrary_history(&mut r, 5)
        } else {
            forky(&mut r)
        };
        let t = Tiny::new(&h);
        if t.txns.len() > 4 {
            continue;
        }
        tested += 1;
        for report in check_all(&h) {
            assert!(!report.is_malformed(), "seed {seed}: {report}");
            let oracle = match report.criterion {
                Criterion::Ser => axiomatic(&t, Axioms::Ser),
                Criterion::Si => axiomatic(&t, Axioms::Si),
                Criterion::Psi => axiomatic(&t, Axioms::Psi),
                Criterion::Us => us_oracle(&t),
                Criterion::Nmsi => nmsi_oracle(&t),
                Criterion::Rc => rc_oracle(&t),
            };
            assert_eq!(
                report.ok(),
                oracle,
                "seed {seed}: checker says\n{report}\noracle says {oracle}\n{}",
                h.to_json_string()
            );
            *accepted.entry(report.criterion).or_default() += usize::from(oracle);
        }
        si_psi_differ += usize::from(axiomatic(&t, Axioms::Psi) && !axiomatic(&t, Axioms::Si));
    }
    eprintln!("{tested} histories; accepted: {accepted:?}; PSI but not SI: {si_psi_differ}");
    assert!(
        si_psi_differ > 20,
        "too few long forks to tell SI from PSI: {si_psi_differ}"
    );
    assert!(tested > 2000);
    for c in Criterion::ALL {
        let a = accepted.get(&c).copied().unwrap_or(0);
        assert!(
            a > tested / 10 && a < tested * 9 / 10,
            "{c}: {a} of {tested} accepted, too lopsided"
        );
    }
}
