//! Conflict detection, Algorithm 1 lines 1–10 (Eliá §3.1, Gyro Algorithm 2).
//!
//! For every pair of transaction types (a type with itself too), every read entry of one against
//! every write entry of the other, and every pair of write entries, on the same table with
//! intersecting attributes, gives the conjunction of the two conditions, in DNF. A conjunction is
//! kept when it is satisfiable: no column is forced equal to two different constants. The two
//! operations are distinct copies, so `cart_id` of one and `cart_id'` of the other are distinct
//! variables even for a type conflicting with itself.
//!
//! Unlike the papers' `C_{t,t'}`, the direction is kept: "a reads from b" and "a and b write the
//! same rows" have different consequences for classification (a read-from makes only the writer
//! non-local).

use crate::cond::{term_node, Clause, Node, UnionFind};
use crate::extract::{Access, RwSets};
use crate::spec::AppSpec;
use std::collections::BTreeSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConflictKind {
    /// `a` reads what `b` writes.
    ReadsFrom,
    /// `a` and `b` write the same attributes of the same rows.
    WriteWrite,
}

/// One satisfiable conjunction of a conflict condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConflictClause {
    /// The clause of `a`'s entry (its parameters) and of `b`'s entry (the other copy's).
    pub a: Clause,
    pub b: Clause,
    /// Pairs (parameter of `a`, parameter of `b`) this conjunction forces equal, through a column
    /// (`k = A ∧ k' = A`) or a constant (`k = 3 ∧ k' = 3`). A pair of partitioning parameters in
    /// this list makes the conjunction local: Algorithm 1 line 17.
    pub equated: Vec<(usize, usize)>,
}

/// A conflict between an entry of `a` and an entry of `b`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub kind: ConflictKind,
    pub a: usize,
    pub b: usize,
    /// Index into `a`'s read set (reads-from) or write set (write–write).
    pub a_entry: usize,
    /// Index into `b`'s write set.
    pub b_entry: usize,
    pub table: String,
    pub attributes: BTreeSet<String>,
    pub clauses: Vec<ConflictClause>,
}

/// Every conflict between the transaction types of `app`.
pub fn detect(app: &AppSpec, sets: &[RwSets]) -> Vec<Conflict> {
    let mut out = Vec::new();
    let n = sets.len();
    for a in 0..n {
        for b in 0..n {
            for (i, r) in sets[a].reads.iter().enumerate() {
                for (j, w) in sets[b].writes.iter().enumerate() {
                    if let Some(c) = conflict(app, ConflictKind::ReadsFrom, (a, i, r), (b, j, w)) {
                        out.push(c);
                    }
                }
            }
            if b < a {
                continue;
            }
            for (i, w1) in sets[a].writes.iter().enumerate() {
                for (j, w2) in sets[b].writes.iter().enumerate() {
                    // A type with itself: entry pairs are unordered.
                    if a == b && j < i {
                        continue;
                    }
                    if let Some(c) = conflict(app, ConflictKind::WriteWrite, (a, i, w1), (b, j, w2)) {
                        out.push(c);
                    }
                }
            }
        }
    }
    out
}

fn conflict(app: &AppSpec, kind: ConflictKind, (a, i, ea): (usize, usize, &Access), (b, j, eb): (usize, usize, &Access)) -> Option<Conflict> {
    if ea.table != eb.table {
        return None;
    }
    let attributes: BTreeSet<String> = ea.attributes.intersection(&eb.attributes).cloned().collect();
    if attributes.is_empty() {
        return None;
    }
    let mut clauses = Vec::new();
    for ca in &ea.condition.clauses {
        for cb in &eb.condition.clauses {
            if let Some(equated) = conjoin(app, a, b, ca, cb) {
                clauses.push(ConflictClause { a: ca.clone(), b: cb.clone(), equated });
            }
        }
    }
    if clauses.is_empty() {
        return None;
    }
    Some(Conflict { kind, a, b, a_entry: i, b_entry: j, table: ea.table.clone(), attributes, clauses })
}

/// `None` when the conjunction of the two clauses (over one row) is unsatisfiable; otherwise the
/// parameter pairs it forces equal. Pairs of differently typed parameters are left out: equal
/// column values do not make them route alike.
fn conjoin(app: &AppSpec, a: usize, b: usize, ca: &Clause, cb: &Clause) -> Option<Vec<(usize, usize)>> {
    let mut uf = UnionFind::default();
    for (side, clause) in [(0u8, ca), (1u8, cb)] {
        for (col, t) in &clause.bindings {
            let x = uf.node(Node::Column(col.clone()));
            let y = uf.node(term_node(t, side));
            uf.union(x, y);
        }
    }
    if !uf.consistent() {
        return None;
    }
    let pa = &app.transactions[a].params;
    let pb = &app.transactions[b].params;
    let mut equated = Vec::new();
    for (x, p) in pa.iter().enumerate() {
        let Some(nx) = uf.lookup(&Node::Param(0, x)) else { continue };
        for (y, q) in pb.iter().enumerate() {
            let Some(ny) = uf.lookup(&Node::Param(1, y)) else { continue };
            let typed_alike = match (p.ty, q.ty) {
                (Some(s), Some(t)) => s == t,
                _ => true,
            };
            if typed_alike && uf.find(nx) == uf.find(ny) {
                equated.push((x, y));
            }
        }
    }
    Some(equated)
}
