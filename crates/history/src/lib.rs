//! History checking by dependency graph: does a recorded run of a transactional protocol satisfy
//! the consistency criterion it claims?
//!
//! A **history** lists every transaction with what it read (each read names the transaction
//! whose version it returned, or the initial version) and what it wrote, whether it committed,
//! and optionally its session and a commit number; each replica may report the order in which
//! it installed the versions of each key. The JSON form is in `FORMAT.md`; protocols can build
//! one in memory with [`History::add_transaction`] and [`History::add_install`].
//!
//! From it the checker builds the dependency graph of Adya (Adya, Liskov, O'Neil, "Generalized
//! Isolation Level Definitions", ICDE 2000) **exactly**, inferring nothing: the version order
//! `<<` of a key is the install order of the first replica that reported it (else the writers'
//! commit numbers, else the key must have a single committed writer), and
//!
//! * `Ti -ww(x)-> Tj`: Tj installs the version of x right after Ti's;
//! * `Ti -wr(x)-> Tj`: Tj reads Ti's version of x;
//! * `Ti -rw(x)-> Tj`: Ti reads the version of x right before Tj's (anti-dependency);
//! * `Ti -so-> Tj`: Tj is the next committed transaction of Ti's session.
//!
//! Aborted transactions appear in the history, so that reading them is caught, but take no
//! other part. A transaction's version of a key is its last write to it; a read of an earlier
//! one (when values are recorded) is an intermediate read.
//!
//! # The criteria
//!
//! These are the six criteria G-DUR compares (Saeida Ardekani, Sutra, Shapiro, "G-DUR: A
//! Middleware for Assembling, Analyzing, and Improving Transactional Protocols", Middleware
//! 2014, §6 and §7). Every criterion rejects a malformed history (a read naming a transaction
//! that does not exist or did not write the key, duplicate ids, a key with several writers and
//! no version order, …), G1a (a committed read of an aborted write), G1b (a read of an
//! intermediate write) and any disagreement between replicas. Then, with `D = SO ∪ WR ∪ WW`:
//!
//! | criterion | forbidden | source of the characterisation |
//! |---|---|---|
//! | [`Criterion::Ser`] | any cycle of `D ∪ RW` | Adya PL-3; `GraphSER` of Cerone & Gotsman |
//! | [`Criterion::Us`] | a cycle among update transactions plus any one read-only transaction (`WW ∪ WR ∪ RW`) | Garcia-Molina & Wiederhold (TODS 1982); Hansdah & Patnaik |
//! | [`Criterion::Si`] | a cycle without two adjacent `rw` edges: `(D ; RW?)` cyclic | Cerone & Gotsman, "Analysing Snapshot Isolation", PODC 2016 / JACM 2018 |
//! | [`Criterion::Psi`] | a cycle with at most one `rw` edge: `(D+ ; RW?)` reflexive | Cerone, Gotsman & Yang (DISC 2015) and Cerone & Gotsman (JACM 2018), for the PSI of Cerone, Bernardi & Gotsman (CONCUR 2015) |
//! | [`Criterion::Nmsi`] | a cycle of `WW ∪ WR ∪ RW` with at most one `rw` edge | Saeida Ardekani, Sutra & Shapiro (SRDS 2013), dependency read as `(WR ∪ WW)+` |
//! | [`Criterion::Rc`] | G0 (cycle of `ww`), G1c (cycle of `ww ∪ wr`) | Adya PL-2 |
//!
//! Each criterion's module documents its definition; in short:
//!
//! * **SER** — a history is serializable iff the graph is acyclic (Adya's theorem: the version
//!   order is given, so conflict and view equivalence coincide). Session order is included so
//!   that a session's transactions serialize in the order it ran them.
//! * **US** — checked as: updates alone acyclic, then for each read-only transaction `q`, no
//!   path through update transactions from a writer that overwrote something `q` read to a
//!   writer `q` read from. No session order (US allows a session to go back in time).
//! * **SI** — Cerone & Gotsman prove that a history is SI iff some dependency graph of it has
//!   `(D ; RW?)` acyclic, i.e. every cycle has two *adjacent* `rw` edges. With the version
//!   order given, there is one graph, so this is a decision procedure. Write skew passes; lost
//!   update, fractured reads and the long fork do not.
//! * **PSI** — `(D+ ; RW?)` irreflexive: every cycle has at least two `rw` edges. The long fork
//!   passes; lost update and fractured reads do not.
//! * **NMSI** — the SRDS 2013 definition is ACA ∧ CONS ∧ WCF over a "depends on" relation
//!   built from reads-from. Taking dependency as `(WR ∪ WW)+` (as Jessy's certification
//!   enforces), it becomes: no G1a/G1b and every cycle of `WW ∪ WR ∪ RW` has at least two `rw`
//!   edges — the PSI condition without session order, so it accepts non-monotonic snapshots
//!   (a session reading older data than it read or wrote before) that SI and PSI reject, and
//!   rejects lost updates and fractured reads. It equals the paper's definition on histories
//!   without blind writes; with blind writes it is **more permissive** than the paper's letter
//!   (its WCF would reject two blind writers that no reads relate even when they ran one after
//!   the other). The argument is in `src/criteria/nmsi.rs`.
//! * **RC** — Adya's PL-2: no G0, G1a, G1b, G1c.
//!
//! The atomicity every criterion but RC requires needs no separate rule: a fractured read
//! (seeing one of a transaction's writes but not another) is the cycle `T2 -rw-> T1 -wr-> T2`,
//! and a lost update is `T2 -rw-> T1 -ww-> T2`, each with one `rw` edge.
//!
//! # Counterexamples
//!
//! A violation names a **shortest** forbidden cycle (transactions, edge kinds and keys), e.g.
//! `SER: NOT serializable — cycle T3 -rw(x)-> T5 -wr(y)-> T3 (G-single)`. Whether a forbidden
//! cycle exists is always decided exactly, in time linear in the graph for SER, SI and RC (one
//! pass of Tarjan's algorithm over the graph, or its product with a two-state automaton) and
//! with pruned searches for PSI, NMSI and US; a shortest one is found by a breadth-first search
//! from every node on a cycle, which has a budget: on a huge strongly connected component it may
//! stop early, and the report then says the cycle is the shortest found rather than the
//! shortest. A recorded run is mostly acyclic, and then the single Tarjan pass over the whole
//! graph is all the cycle work there is.
//!
//! ```
//! use ensemble_history::{check, Criterion, History, Transaction};
//!
//! // Write skew: both read x and y initially, one writes x, the other y.
//! let mut h = History::new();
//! h.add_transaction(Transaction::committed(1).read("x", None).read("y", None).write("x", "1"));
//! h.add_transaction(Transaction::committed(2).read("x", None).read("y", None).write("y", "2"));
//! assert!(check(&h, Criterion::Si).ok());
//! let ser = check(&h, Criterion::Ser);
//! assert!(!ser.ok());
//! assert_eq!(ser.cycle().unwrap().to_string(), "T1 -rw(y)-> T2 -rw(x)-> T1");
//! ```
//!
//! # Delivery logs
//!
//! [`delivery`] checks the other kind of run this project records: the delivery logs of a
//! group-communication primitive (reliable, atomic and pairwise-ordered multicast, atomic
//! broadcast) against P-Store's atomic multicast properties, FIFO order and genuineness.

pub mod commitment;
mod criteria;
mod cycle;
pub mod delivery;
mod graph;
mod hash;
mod json;
mod model;
mod replicas;
mod report;
mod scc;

pub use json::HistoryError;
pub use model::{History, Install, Read, Transaction, TxnId, Write};
pub use report::{
    Criterion, Cycle, CycleEdge, EdgeCounts, EdgeKind, Malformation, Report, UnknownCriterion,
    Violation,
};

/// Checks `history` against `criterion`.
pub fn check(history: &History, criterion: Criterion) -> Report {
    criteria::report(&graph::analyze(history), criterion)
}

/// Checks `history` against every criterion, building its graph once. In the order of
/// [`Criterion::ALL`]: SER, US, SI, PSI, NMSI, RC.
pub fn check_all(history: &History) -> Vec<Report> {
    let analysis = graph::analyze(history);
    Criterion::ALL
        .iter()
        .map(|&c| criteria::report(&analysis, c))
        .collect()
}
