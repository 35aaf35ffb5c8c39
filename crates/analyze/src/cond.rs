//! Conditions of read-set and write-set entries, in disjunctive normal form.
//!
//! A condition over-approximates the rows an entry accesses: an access touches only rows that
//! satisfy it. Only equalities between a column of the accessed row and a transaction parameter
//! or a constant are kept; everything else (ranges, LIKE, computed values, negation) is dropped
//! from its conjunction, which widens the condition. So nothing is ever narrowed to "no row" by
//! something the analysis did not understand.

use std::collections::BTreeSet;
use std::fmt;

/// Above this many conjunctions a condition is widened to "any row", so that a long IN list or
/// a chain of ORs cannot blow up conflict detection (which multiplies conditions).
pub const MAX_CLAUSES: usize = 64;

/// A constant a column is compared with.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Constant {
    Number(String),
    Text(String),
    Bool(bool),
}

impl Constant {
    /// Whether two constants can never be the same column value. Conservative: a number and a
    /// string may be equal after SQLite's type affinity, so only like-typed constants differ.
    pub fn differs_from(&self, other: &Constant) -> bool {
        match (self, other) {
            (Constant::Number(a), Constant::Number(b)) => match (a.parse::<f64>(), b.parse::<f64>()) {
                (Ok(x), Ok(y)) => x != y,
                _ => false,
            },
            (Constant::Text(a), Constant::Text(b)) => a != b,
            (Constant::Bool(a), Constant::Bool(b)) => a != b,
            _ => false,
        }
    }
}

impl fmt::Display for Constant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Constant::Number(n) => write!(f, "{n}"),
            Constant::Text(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Constant::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// What a column of the accessed row is bound to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Term {
    /// A parameter of the transaction, by index into its parameter list.
    Param(usize),
    Const(Constant),
}

/// A conjunction of `column = term` bindings over one accessed row. No bindings: any row.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Clause {
    /// Sorted and without duplicates; column names as the schema spells them.
    pub bindings: Vec<(String, Term)>,
}

impl Clause {
    pub fn new(mut bindings: Vec<(String, Term)>) -> Clause {
        bindings.sort();
        bindings.dedup();
        Clause { bindings }
    }

    pub fn is_any(&self) -> bool {
        self.bindings.is_empty()
    }

    /// Whether every row this clause admits is admitted by `other` too.
    pub fn implies(&self, other: &Clause) -> bool {
        other.bindings.iter().all(|b| self.bindings.binary_search(b).is_ok())
    }

    /// Whether the clause can hold for some row at all (no column equals two different
    /// constants, also through parameters).
    pub fn satisfiable(&self) -> bool {
        let mut uf = UnionFind::default();
        for (c, t) in &self.bindings {
            let a = uf.node(Node::Column(c.clone()));
            let b = uf.node(term_node(t, 0));
            uf.union(a, b);
        }
        uf.consistent()
    }

    pub fn binds(&self, column: &str, term: &Term) -> bool {
        self.bindings.iter().any(|(c, t)| c == column && t == term)
    }

    pub fn render(&self, table: &str, param_name: &dyn Fn(usize) -> String) -> String {
        if self.bindings.is_empty() {
            return "any row".into();
        }
        self.bindings
            .iter()
            .map(|(c, t)| match t {
                Term::Param(i) => format!("{table}.{c} = {}", param_name(*i)),
                Term::Const(k) => format!("{table}.{c} = {k}"),
            })
            .collect::<Vec<_>>()
            .join(" ∧ ")
    }
}

/// A disjunction of clauses. Never empty in practice: an entry that accesses no row at all is not
/// an entry. (An empty disjunction would mean "no row".)
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Condition {
    pub clauses: Vec<Clause>,
}

impl Condition {
    pub fn any() -> Condition {
        Condition { clauses: vec![Clause::default()] }
    }

    pub fn is_any(&self) -> bool {
        self.clauses.iter().any(Clause::is_any)
    }

    /// Drops unsatisfiable clauses and clauses implied by a more general one; widens to "any row"
    /// when too many remain.
    pub fn from_clauses(clauses: impl IntoIterator<Item = Clause>) -> Condition {
        let mut cs: Vec<Clause> = clauses.into_iter().filter(Clause::satisfiable).collect::<BTreeSet<_>>().into_iter().collect();
        cs.sort_by_key(|c| c.bindings.len());
        let mut kept: Vec<Clause> = Vec::new();
        for c in cs {
            if !kept.iter().any(|k| c.implies(k)) {
                kept.push(c);
            }
        }
        if kept.len() > MAX_CLAUSES {
            return Condition::any();
        }
        kept.sort();
        Condition { clauses: kept }
    }

    pub fn or(&self, other: &Condition) -> Condition {
        Condition::from_clauses(self.clauses.iter().chain(&other.clauses).cloned())
    }

    pub fn render(&self, table: &str, param_name: &dyn Fn(usize) -> String) -> String {
        if self.clauses.is_empty() {
            return "no row".into();
        }
        if self.is_any() {
            return "any row".into();
        }
        let parts: Vec<String> = self.clauses.iter().map(|c| c.render(table, param_name)).collect();
        if parts.len() == 1 {
            parts.into_iter().next().unwrap_or_default()
        } else {
            parts.iter().map(|p| format!("({p})")).collect::<Vec<_>>().join(" ∨ ")
        }
    }
}

/// A node of the equality graph of a conjunction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Node {
    Column(String),
    /// Parameter `index` of side `side` (0: the first transaction of a pair, 1: the second, which
    /// is a distinct copy even when both are the same transaction type).
    Param(u8, usize),
    Const(Constant),
}

pub(crate) fn term_node(t: &Term, side: u8) -> Node {
    match t {
        Term::Param(i) => Node::Param(side, *i),
        Term::Const(k) => Node::Const(k.clone()),
    }
}

/// Union-find over the terms of one conjunction, for the satisfiability test and to see which
/// parameters a conjunction forces equal.
#[derive(Default)]
pub(crate) struct UnionFind {
    nodes: Vec<Node>,
    parent: Vec<usize>,
}

impl UnionFind {
    pub fn node(&mut self, n: Node) -> usize {
        if let Some(i) = self.nodes.iter().position(|m| *m == n) {
            return i;
        }
        self.nodes.push(n);
        self.parent.push(self.parent.len());
        self.parent.len() - 1
    }

    pub fn find(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    pub fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[ra] = rb;
        }
    }

    pub fn lookup(&self, n: &Node) -> Option<usize> {
        self.nodes.iter().position(|m| m == n)
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// False when some class holds two constants that can never be equal.
    pub fn consistent(&mut self) -> bool {
        let consts: Vec<(usize, Constant)> =
            self.nodes.clone().into_iter().enumerate().filter_map(|(i, n)| if let Node::Const(k) = n { Some((i, k)) } else { None }).collect();
        for (x, (i, a)) in consts.iter().enumerate() {
            for (j, b) in &consts[x + 1..] {
                if a.differs_from(b) && self.find(*i) == self.find(*j) {
                    return false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(b: &[(&str, Term)]) -> Clause {
        Clause::new(b.iter().map(|(c, t)| (c.to_string(), t.clone())).collect())
    }

    #[test]
    fn subsumed_and_unsatisfiable_clauses_go() {
        let one = Term::Const(Constant::Number("1".into()));
        let two = Term::Const(Constant::Number("2.0".into()));
        let cond = Condition::from_clauses([
            c(&[("a", Term::Param(0))]),
            c(&[("a", Term::Param(0)), ("b", one.clone())]),
            c(&[("b", one.clone()), ("b", two.clone())]),
        ]);
        assert_eq!(cond.clauses, vec![c(&[("a", Term::Param(0))])]);
        // A number and a string may be equal under type affinity: not a contradiction.
        assert!(c(&[("b", one), ("b", Term::Const(Constant::Text("1".into())))]).satisfiable());
    }

    #[test]
    fn too_many_clauses_widen_to_any_row() {
        let cond = Condition::from_clauses((0..=MAX_CLAUSES).map(|i| c(&[("a", Term::Const(Constant::Number(i.to_string())))])));
        assert!(cond.is_any());
    }
}
