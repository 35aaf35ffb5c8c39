//! Comparison against an independent checker: the `adya` crate (0.1.0, crates.io, MIT OR
//! Apache-2.0; a native Rust take on Jepsen's Elle, built here with its database drivers off).
//!
//! Thousands of small seeded register histories — serial ones, serial ones with one or two
//! injected anomalies, ones from a snapshot-isolation engine (write skew), and arbitrary ones —
//! are checked by `ensemble-history` and, translated,
//! by adya's rw-register checker, and the verdicts must be equal for every criterion both have:
//!
//! | ours | adya model | why that one |
//! |---|---|---|
//! | SER | `strong-session-serializable` | our SER includes session order; adya adds it as process order |
//! | SI  | `strong-session-snapshot-isolation` | `(D ; RW?)` acyclic with `D = SO ∪ WR ∪ WW`, i.e. G-nonadjacent with process edges |
//! | RC  | `read-committed` | Adya PL-2 (G0, G1a, G1b, G1c), no session order on either side |
//!
//! US, PSI and NMSI have no adya counterpart (its `update-serializable` and
//! `parallel-snapshot-isolation` only forbid G1 / lost updates, not the cycles ours search for).
//!
//! **Translation.** A transaction becomes one `invoke` + `ok` (committed) or `fail` (aborted)
//! pair on its session's process (a process of its own when it has no session); its reads come
//! first, as `["r", key, value]` (`null` for the initial version), then its writes, as
//! `["w", key, value]`. Written values are unique per key, so adya recovers every `wr` edge from
//! the values alone.
//!
//! **What both are told, and the restrictions that keeps equal.** Register reads do not reveal
//! the version order (they do in list-append, not here), and ours takes it from install logs.
//! adya's only way to be given a version order for registers is a global white-box commit order
//! (`transaction_order`), from which it chains each key's writers. So each history's per-key
//! version orders are merged into one topological order of the committed writers and handed to
//! adya; histories whose per-key orders admit no common order (a cycle of `ww` through several
//! keys) cannot be expressed and are skipped and counted. Also, by construction: no transaction
//! reads a key twice or reads its own write (our format records reads and writes without their
//! interleaving; adya would judge those as `internal` reads), a single replica reports installs
//! (adya has no replicas, so replica divergence is not compared), and every read records its
//! value (ours detects G1b only from values, adya only has values).

use adya::{Opts, Valid, Workload};
use ensemble_history::{check, Criterion, History, Transaction, TxnId};
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

/// A read: key, writer (`None`: initial version), value read (`None`: initial).
#[derive(Clone, Debug)]
struct R {
    key: usize,
    writer: Option<TxnId>,
    value: Option<String>,
}

#[derive(Clone, Debug)]
struct T {
    id: TxnId,
    session: Option<u64>,
    committed: bool,
    reads: Vec<R>,
    /// In program order; a key written twice has an intermediate version.
    writes: Vec<(usize, String)>,
}

impl T {
    fn writes_key(&self, key: usize) -> bool {
        self.writes.iter().any(|w| w.0 == key)
    }
    fn final_value(&self, key: usize) -> Option<String> {
        self.writes
            .iter()
            .rev()
            .find(|w| w.0 == key)
            .map(|w| w.1.clone())
    }
    fn intermediate_value(&self, key: usize) -> Option<String> {
        let mine: Vec<&String> = self
            .writes
            .iter()
            .filter(|w| w.0 == key)
            .map(|w| &w.1)
            .collect();
        (mine.len() >= 2).then(|| mine[0].clone())
    }
}

/// A history in plain form: transactions in order of appearance, and each key's version order
/// (its committed writers).
#[derive(Clone, Debug)]
struct Spec {
    keys: usize,
    txns: Vec<T>,
    order: Vec<Vec<TxnId>>,
}

fn key(k: usize) -> String {
    format!("x{k}")
}

fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Random reads (distinct keys) and writes (possibly one key twice) for transaction `id`.
fn ops(r: &mut ChaCha8Rng, id: TxnId, keys: usize) -> (Vec<usize>, Vec<(usize, String)>) {
    let mut all: Vec<usize> = (0..keys).collect();
    all.shuffle(r);
    let reads: Vec<usize> = all[..r.random_range(0..=keys.min(3))].to_vec();
    all.shuffle(r);
    let mut writes: Vec<(usize, String)> = Vec::new();
    for &k in &all[..r.random_range(0..=keys.min(2))] {
        writes.push((k, String::new()));
        if r.random_bool(0.15) {
            writes.push((k, String::new()));
        }
    }
    if reads.is_empty() && writes.is_empty() {
        writes.push((all[0], String::new()));
    }
    for (n, w) in writes.iter_mut().enumerate() {
        w.1 = format!("{id}.{n}");
    }
    (reads, writes)
}

/// A serial execution: each transaction reads the latest committed versions.
fn serial(r: &mut ChaCha8Rng) -> Spec {
    let keys = r.random_range(1..=3);
    let n = r.random_range(2..=9);
    let sessions = r.random_range(0..=3u64);
    let mut order: Vec<Vec<TxnId>> = vec![Vec::new(); keys];
    let mut latest: Vec<Option<(TxnId, String)>> = vec![None; keys];
    let mut txns = Vec::new();
    for i in 0..n {
        let id = i as TxnId + 1;
        let (rk, writes) = ops(r, id, keys);
        let reads = rk
            .into_iter()
            .map(|k| R {
                key: k,
                writer: latest[k].as_ref().map(|l| l.0),
                value: latest[k].as_ref().map(|l| l.1.clone()),
            })
            .collect();
        let t = T {
            id,
            session: (sessions > 0).then(|| r.random_range(0..sessions)),
            committed: !r.random_bool(0.15),
            reads,
            writes,
        };
        if t.committed {
            for k in 0..keys {
                if let Some(v) = t.final_value(k) {
                    order[k].push(id);
                    latest[k] = Some((id, v));
                }
            }
        }
        txns.push(t);
    }
    Spec { keys, txns, order }
}

/// A snapshot-isolation engine without sessions: each transaction reads the versions committed
/// before its (random, recent) start and aborts if a key it writes was committed since (first
/// committer wins). SI by construction; write skew makes many not serializable.
fn snapshot(r: &mut ChaCha8Rng) -> Spec {
    let keys = r.random_range(1..=3);
    let n: usize = r.random_range(2..=9);
    let mut order: Vec<Vec<TxnId>> = vec![Vec::new(); keys];
    let mut txns: Vec<T> = Vec::new();
    for i in 0..n {
        let id = i as TxnId + 1;
        let start = r.random_range(i.saturating_sub(3)..=i); // sees txns[..start]
        let (rk, writes) = ops(r, id, keys);
        let seen = |k: usize| {
            txns[..start]
                .iter()
                .rev()
                .find(|t| t.committed && t.writes_key(k))
        };
        let reads = rk
            .into_iter()
            .map(|k| R {
                key: k,
                writer: seen(k).map(|t| t.id),
                value: seen(k).and_then(|t| t.final_value(k)),
            })
            .collect();
        let conflict = txns[start..]
            .iter()
            .any(|t| t.committed && writes.iter().any(|w| t.writes_key(w.0)));
        let t = T {
            id,
            session: None,
            committed: !conflict && !r.random_bool(0.1),
            reads,
            writes,
        };
        if t.committed {
            for (k, o) in order.iter_mut().enumerate() {
                if t.writes_key(k) {
                    o.push(id);
                }
            }
        }
        txns.push(t);
    }
    Spec { keys, txns, order }
}

/// Arbitrary: random operations, a random version order, and reads from any writer.
fn arbitrary(r: &mut ChaCha8Rng) -> Spec {
    let keys = r.random_range(1..=3);
    let n = r.random_range(2..=7);
    let sessions = r.random_range(0..=3u64);
    let mut txns: Vec<T> = (0..n)
        .map(|i| {
            let id = i as TxnId + 1;
            let (rk, writes) = ops(r, id, keys);
            T {
                id,
                session: (sessions > 0).then(|| r.random_range(0..sessions)),
                committed: !r.random_bool(0.1),
                reads: rk
                    .into_iter()
                    .map(|k| R {
                        key: k,
                        writer: None,
                        value: None,
                    })
                    .collect(),
                writes,
            }
        })
        .collect();
    // Version order: a random global order, with the odd adjacent swap in one key.
    let mut global: Vec<TxnId> = txns.iter().map(|t| t.id).collect();
    global.shuffle(r);
    let snapshot = txns.clone();
    let by_id: HashMap<TxnId, &T> = snapshot.iter().map(|t| (t.id, t)).collect();
    let mut order: Vec<Vec<TxnId>> = (0..keys)
        .map(|k| {
            global
                .iter()
                .copied()
                .filter(|id| by_id[id].committed && by_id[id].writes_key(k))
                .collect()
        })
        .collect();
    if r.random_bool(0.2) {
        let k = r.random_range(0..keys);
        if order[k].len() >= 2 {
            let p = r.random_range(0..order[k].len() - 1);
            order[k].swap(p, p + 1);
        }
    }
    for t in &mut txns {
        let me = t.id;
        for rd in &mut t.reads {
            let k = rd.key;
            let writers: Vec<&T> = snapshot
                .iter()
                .filter(|w| w.id != me && w.writes_key(k))
                .collect();
            let pick = if writers.is_empty() || r.random_bool(0.25) {
                None
            } else {
                Some(*writers.choose(r).unwrap())
            };
            match pick {
                None => {}
                Some(w) if !w.committed && r.random_bool(0.6) => {} // mostly avoid G1a
                Some(w) => {
                    rd.writer = Some(w.id);
                    rd.value = match w.intermediate_value(k) {
                        Some(v) if r.random_bool(0.2) => Some(v),
                        _ => w.final_value(k),
                    };
                }
            }
        }
    }
    txns.sort_by_key(|t| t.id);
    Spec { keys, txns, order }
}

/// Perturbs a serial history once; returns whether it changed anything.
fn inject(s: &mut Spec, r: &mut ChaCha8Rng) -> bool {
    let pos = |s: &Spec, k: usize, w: Option<TxnId>| -> usize {
        w.map_or(0, |w| 1 + s.order[k].iter().position(|&x| x == w).unwrap())
    };
    let idx = r.random_range(0..s.txns.len());
    let me = s.txns[idx].id;
    match r.random_range(0..6) {
        // Stale read: an earlier version of a key than the one read.
        0 => {
            let cands: Vec<usize> = (0..s.txns[idx].reads.len())
                .filter(|&j| {
                    let rd = &s.txns[idx].reads[j];
                    pos(s, rd.key, rd.writer) > 0
                })
                .collect();
            let Some(&j) = cands.choose(r) else {
                return false;
            };
            let k = s.txns[idx].reads[j].key;
            let p = r.random_range(0..pos(s, k, s.txns[idx].reads[j].writer));
            let w = (p > 0).then(|| s.order[k][p - 1]);
            let value = w.map(|w| {
                s.txns
                    .iter()
                    .find(|t| t.id == w)
                    .unwrap()
                    .final_value(k)
                    .unwrap()
            });
            s.txns[idx].reads[j] = R {
                key: k,
                writer: w,
                value,
            };
        }
        // Future read: a version installed by a later transaction.
        1 => {
            let cands: Vec<(usize, TxnId)> = (0..s.keys)
                .filter(|&k| !s.txns[idx].reads.iter().any(|rd| rd.key == k))
                .flat_map(|k| {
                    s.order[k]
                        .iter()
                        .filter(move |&&w| w > me)
                        .map(move |&w| (k, w))
                })
                .collect();
            let Some(&(k, w)) = cands.choose(r) else {
                return false;
            };
            let value = s.txns.iter().find(|t| t.id == w).unwrap().final_value(k);
            s.txns[idx].reads.push(R {
                key: k,
                writer: Some(w),
                value,
            });
        }
        // Aborted read (G1a) or intermediate read (G1b), of a key not yet read.
        2 | 3 => {
            let g1a = r.random_bool(0.5);
            let cands: Vec<(usize, TxnId, String)> = s
                .txns
                .iter()
                .filter(|w| w.id != me)
                .flat_map(|w| {
                    (0..s.keys).filter_map(move |k| {
                        let v = if g1a {
                            (!w.committed).then(|| w.final_value(k)).flatten()
                        } else {
                            w.intermediate_value(k)
                        };
                        v.map(|v| (k, w.id, v))
                    })
                })
                .filter(|(k, _, _)| !s.txns[idx].reads.iter().any(|rd| rd.key == *k))
                .collect();
            let Some((k, w, v)) = cands.choose(r).cloned() else {
                return false;
            };
            s.txns[idx].reads.push(R {
                key: k,
                writer: Some(w),
                value: Some(v),
            });
        }
        // Two adjacent versions of a key installed the other way round.
        4 => {
            let k = r.random_range(0..s.keys);
            if s.order[k].len() < 2 {
                return false;
            }
            let p = r.random_range(0..s.order[k].len() - 1);
            s.order[k].swap(p, p + 1);
        }
        // A transaction moved to another session (its order there may contradict the data).
        _ => {
            let sessions = s
                .txns
                .iter()
                .filter_map(|t| t.session)
                .max()
                .map_or(0, |m| m + 1);
            if sessions < 2 {
                return false;
            }
            let new = r.random_range(0..sessions);
            if s.txns[idx].session == Some(new) {
                return false;
            }
            s.txns[idx].session = Some(new);
        }
    }
    true
}

fn to_ours(s: &Spec) -> History {
    let mut h = History::new();
    for t in &s.txns {
        let mut x = if t.committed {
            Transaction::committed(t.id)
        } else {
            Transaction::aborted(t.id)
        };
        if let Some(sess) = t.session {
            x = x.in_session(sess);
        }
        for rd in &t.reads {
            x = match &rd.value {
                Some(v) => x.read_value(&key(rd.key), rd.writer, v),
                None => x.read(&key(rd.key), rd.writer),
            };
        }
        for (k, v) in &t.writes {
            x = x.write(&key(*k), v);
        }
        h.add_transaction(x);
    }
    for (k, ord) in s.order.iter().enumerate() {
        for &w in ord {
            h.add_install("r0", &key(k), w);
        }
    }
    h
}

/// One order of the committed writers that extends every key's version order, if there is one.
fn global_order(s: &Spec) -> Option<HashMap<TxnId, i64>> {
    let mut succ: BTreeMap<TxnId, Vec<TxnId>> = BTreeMap::new();
    let mut indeg: BTreeMap<TxnId, usize> = BTreeMap::new();
    for ord in &s.order {
        for &w in ord {
            indeg.entry(w).or_insert(0);
        }
        for p in ord.windows(2) {
            succ.entry(p[0]).or_default().push(p[1]);
            *indeg.get_mut(&p[1]).unwrap() += 1;
        }
    }
    let mut ready: Vec<TxnId> = indeg.iter().filter(|e| *e.1 == 0).map(|e| *e.0).collect();
    let mut out = HashMap::new();
    while let Some(t) = ready.pop() {
        out.insert(t, out.len() as i64);
        for &n in succ.get(&t).into_iter().flatten() {
            let d = indeg.get_mut(&n).unwrap();
            *d -= 1;
            if *d == 0 {
                ready.push(n);
            }
        }
    }
    (out.len() == indeg.len()).then_some(out)
}

/// The history in adya's JSON-lines format, and the commit order by completion index.
fn to_adya(s: &Spec, positions: &HashMap<TxnId, i64>) -> (adya::History, HashMap<u64, i64>) {
    let mut lines = Vec::new();
    let mut order = HashMap::new();
    for (i, t) in s.txns.iter().enumerate() {
        let process = t.session.map_or(1000 + i as i64, |s| s as i64);
        let mops = |done: bool| -> Vec<serde_json::Value> {
            let reads = t.reads.iter().map(|rd| {
                let v = if done { json!(rd.value) } else { json!(null) };
                json!(["r", key(rd.key), v])
            });
            let writes = t.writes.iter().map(|(k, v)| json!(["w", key(*k), v]));
            reads.chain(writes).collect()
        };
        let (inv, done) = (2 * i as u64, 2 * i as u64 + 1);
        lines.push(json!({"index": inv, "type": "invoke", "f": "txn", "process": process, "value": mops(false)}));
        let kind = if t.committed { "ok" } else { "fail" };
        lines.push(json!({"index": done, "type": kind, "f": "txn", "process": process, "value": mops(true)}));
        if let Some(&p) = positions.get(&t.id) {
            order.insert(done, p);
        }
    }
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    (
        adya::History::from_json(&text.join("\n")).expect("adya parses our translation"),
        order,
    )
}

const PAIRS: [(Criterion, &str); 3] = [
    (Criterion::Ser, "strong-session-serializable"),
    (Criterion::Si, "strong-session-snapshot-isolation"),
    (Criterion::Rc, "read-committed"),
];

#[derive(Default)]
struct Tally {
    histories: usize,
    inexpressible: usize,
    /// Per criterion: (both accept, both reject, adya unknown: no dependency at all).
    verdicts: [(usize, usize, usize); 3],
    /// Histories both call SI but not serializable (write skew and kin).
    si_not_ser: usize,
}

fn compare(s: &Spec, label: &str, tally: &mut Tally) {
    let Some(positions) = global_order(s) else {
        tally.inexpressible += 1;
        return;
    };
    tally.histories += 1;
    let ours = to_ours(s);
    let (theirs, order) = to_adya(s, &positions);
    let mut valid = [false; 3];
    for (c, (criterion, model)) in PAIRS.iter().enumerate() {
        let mine = check(&ours, *criterion);
        assert!(
            !mine.is_malformed(),
            "{label}: malformed:\n{mine}\n{}",
            ours.to_json_string()
        );
        let opts = Opts {
            models: vec![model.to_string()],
            transaction_order: Some(order.clone()),
            ..Opts::default()
        };
        let report = adya::check(&theirs, Workload::RwRegister, &opts);
        let agree = match report.valid {
            Valid::True => mine.ok(),
            Valid::False => !mine.ok(),
            Valid::Unknown => {
                // Only when adya found no dependency at all: nothing to compare, but ours must
                // then see no cycle either.
                assert_eq!(report.anomaly_types, ["empty-transaction-graph"], "{label}");
                assert!(
                    mine.ok(),
                    "{label}: adya saw no dependency, ours says\n{mine}"
                );
                tally.verdicts[c].2 += 1;
                continue;
            }
        };
        assert!(
            agree,
            "{label}: {criterion} — ours:\n{mine}\nadya ({model}): {:?} {:?}\n{}",
            report.valid,
            report.anomaly_types,
            ours.to_json_string()
        );
        valid[c] = mine.ok();
        if mine.ok() {
            tally.verdicts[c].0 += 1;
        } else {
            tally.verdicts[c].1 += 1;
        }
    }
    tally.si_not_ser += usize::from(valid[1] && !valid[0]);
}

#[test]
fn verdicts_agree_with_adya() {
    let mut tally = Tally::default();
    for seed in 0..1000 {
        compare(
            &serial(&mut rng(seed)),
            &format!("serial seed {seed}"),
            &mut tally,
        );
    }
    for seed in 0..2000 {
        let mut r = rng(seed + 10_000);
        let mut s = serial(&mut r);
        let mut changed = false;
        for _ in 0..r.random_range(1..=2) {
            changed |= inject(&mut s, &mut r);
        }
        if changed {
            compare(&s, &format!("injected seed {seed}"), &mut tally);
        }
    }
    for seed in 0..2000 {
        compare(
            &snapshot(&mut rng(seed + 30_000)),
            &format!("snapshot seed {seed}"),
            &mut tally,
        );
    }
    for seed in 0..3000 {
        compare(
            &arbitrary(&mut rng(seed + 20_000)),
            &format!("arbitrary seed {seed}"),
            &mut tally,
        );
    }
    eprintln!(
        "compared {} histories with adya ({} skipped: per-key version orders with no common order)",
        tally.histories, tally.inexpressible
    );
    for (c, (criterion, model)) in PAIRS.iter().enumerate() {
        let (yes, no, unknown) = tally.verdicts[c];
        eprintln!(
            "{criterion} vs adya {model}: {yes} both accept, {no} both reject, \
             {unknown} adya unknown (no dependency; ours accepts)"
        );
        assert!(
            yes > 300 && no > 300,
            "{criterion}: too lopsided: {yes} accept, {no} reject"
        );
    }
    eprintln!("SI but not SER, by both: {}", tally.si_not_ser);
    assert!(
        tally.si_not_ser > 50,
        "too few SI-but-not-SER histories: {}",
        tally.si_not_ser
    );
}
