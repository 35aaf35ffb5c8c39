//! What a check says: the criterion, the size of the graph, and every violation found, with a
//! one-line verdict for people.

use crate::model::TxnId;
use std::fmt;
use std::str::FromStr;

/// The consistency criteria G-DUR compares (Saeida Ardekani, Sutra, Shapiro, §6 and §7).
/// The crate documentation states what each one checks and where the definition comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Criterion {
    Ser,
    Us,
    Si,
    Psi,
    Nmsi,
    Rc,
}

impl Criterion {
    pub const ALL: [Criterion; 6] = [
        Criterion::Ser,
        Criterion::Us,
        Criterion::Si,
        Criterion::Psi,
        Criterion::Nmsi,
        Criterion::Rc,
    ];

    /// The lower-case name used on the command line (`ser`, `us`, `si`, `psi`, `nmsi`, `rc`).
    pub fn name(self) -> &'static str {
        match self {
            Criterion::Ser => "ser",
            Criterion::Us => "us",
            Criterion::Si => "si",
            Criterion::Psi => "psi",
            Criterion::Nmsi => "nmsi",
            Criterion::Rc => "rc",
        }
    }

    /// What a history that satisfies the criterion is called.
    fn adjective(self) -> &'static str {
        match self {
            Criterion::Ser => "serializable",
            Criterion::Us => "update serializable",
            Criterion::Si => "snapshot isolated",
            Criterion::Psi => "parallel snapshot isolated",
            Criterion::Nmsi => "non-monotonic snapshot isolated",
            Criterion::Rc => "read committed",
        }
    }
}

impl fmt::Display for Criterion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name().to_uppercase())
    }
}

/// An unknown criterion name; its message lists the known ones.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown consistency criterion `{0}`; expected one of: ser, us, si, psi, nmsi, rc")]
pub struct UnknownCriterion(pub String);

impl FromStr for Criterion {
    type Err = UnknownCriterion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Criterion::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownCriterion(s.to_owned()))
    }
}

/// The kinds of dependency edge (Adya): `T1 -ww(x)-> T2` when T2 installs the version of x right
/// after T1's; `T1 -wr(x)-> T2` when T2 reads T1's version of x; `T1 -rw(x)-> T2` when T1 reads
/// the version of x that T2's overwrites (anti-dependency); `T1 -so-> T2` when T2 follows T1 in
/// a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeKind {
    Ww = 0,
    Wr = 1,
    Rw = 2,
    So = 3,
}

impl EdgeKind {
    pub(crate) const ALL: [EdgeKind; 4] = [EdgeKind::Ww, EdgeKind::Wr, EdgeKind::Rw, EdgeKind::So];

    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Ww => "ww",
            EdgeKind::Wr => "wr",
            EdgeKind::Rw => "rw",
            EdgeKind::So => "so",
        }
    }
}

/// How many edges of each kind the dependency graph has. One edge per key: two transactions
/// related through two keys count twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EdgeCounts {
    pub ww: u64,
    pub wr: u64,
    pub rw: u64,
    pub so: u64,
}

impl EdgeCounts {
    pub(crate) fn add(&mut self, kind: EdgeKind) {
        match kind {
            EdgeKind::Ww => self.ww += 1,
            EdgeKind::Wr => self.wr += 1,
            EdgeKind::Rw => self.rw += 1,
            EdgeKind::So => self.so += 1,
        }
    }
}

/// One edge of a reported cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleEdge {
    pub from: TxnId,
    pub to: TxnId,
    pub kind: EdgeKind,
    /// The key that produced the edge (`None` for session order).
    pub key: Option<String>,
}

/// A cycle of the dependency graph, as a list of edges, each starting where the last ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub edges: Vec<CycleEdge>,
}

impl Cycle {
    pub fn len(&self) -> usize {
        self.edges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.edges.is_empty()
    }

    /// The number of anti-dependency (rw) edges.
    pub fn rw_count(&self) -> usize {
        self.edges.iter().filter(|e| e.kind == EdgeKind::Rw).count()
    }

    /// The transactions on the cycle, in order.
    pub fn transactions(&self) -> Vec<TxnId> {
        self.edges.iter().map(|e| e.from).collect()
    }

    /// Adya's / Elle's name for the cycle's shape: `G0` (ww only), `G1c` (no rw), `G-single`
    /// (one rw), `G-nonadjacent` (several rw, no two consecutive), `G2` (two consecutive rw).
    pub fn anomaly(&self) -> &'static str {
        let kinds: Vec<EdgeKind> = self.edges.iter().map(|e| e.kind).collect();
        let rw = self.rw_count();
        if kinds.iter().all(|&k| k == EdgeKind::Ww) {
            "G0"
        } else if rw == 0 {
            "G1c"
        } else if rw == 1 {
            "G-single"
        } else if (0..kinds.len())
            .any(|i| kinds[i] == EdgeKind::Rw && kinds[(i + 1) % kinds.len()] == EdgeKind::Rw)
        {
            "G2"
        } else {
            "G-nonadjacent"
        }
    }
}

impl Cycle {
    /// Edges printed in full before a long cycle is elided (the rest are counted).
    const SHOWN_HEAD: usize = 16;
    const SHOWN_TAIL: usize = 4;
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let edge = |f: &mut fmt::Formatter<'_>, e: &CycleEdge| match &e.key {
            Some(key) => write!(f, " -{}({key})-> T{}", e.kind.name(), e.to),
            None => write!(f, " -{}-> T{}", e.kind.name(), e.to),
        };
        write_cycle(f, &self.edges, (Self::SHOWN_HEAD, Self::SHOWN_TAIL), |e| format!("T{}", e.from), edge)
    }
}

/// Writes a cycle as its first node and then each edge: every edge of a short cycle, both ends
/// of a long one (a cycle through a huge component can have thousands of edges) with the middle
/// counted. `from` names an edge's first node; `edge` writes an edge and the node it reaches.
pub(crate) fn write_cycle<E>(
    f: &mut fmt::Formatter<'_>,
    edges: &[E],
    (head, tail): (usize, usize),
    from: impl Fn(&E) -> String,
    edge: impl Fn(&mut fmt::Formatter<'_>, &E) -> fmt::Result,
) -> fmt::Result {
    let Some(first) = edges.first() else {
        return f.write_str("(empty cycle)");
    };
    f.write_str(&from(first))?;
    let n = edges.len();
    if n <= head + tail + 1 {
        return edges.iter().try_for_each(|e| edge(f, e));
    }
    edges[..head].iter().try_for_each(|e| edge(f, e))?;
    let rest = n - tail;
    write!(f, " … {} more edges … {}", rest - head, from(&edges[rest]))?;
    edges[rest..].iter().try_for_each(|e| edge(f, e))
}

/// A history that cannot be checked as it stands: the message names the transaction and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Malformation {
    DuplicateTransaction {
        id: TxnId,
    },
    UnknownWriter {
        reader: TxnId,
        key: String,
        writer: TxnId,
    },
    WriterDidNotWriteKey {
        reader: TxnId,
        key: String,
        writer: TxnId,
    },
    ValueNotWritten {
        reader: TxnId,
        key: String,
        writer: TxnId,
        value: String,
    },
    UnknownInstalledTransaction {
        replica: String,
        key: String,
        txn: TxnId,
    },
    InstalledTransactionDidNotWriteKey {
        replica: String,
        key: String,
        txn: TxnId,
    },
    DuplicateInstall {
        replica: String,
        key: String,
        txn: TxnId,
    },
    /// The version order of `key` comes from `replica`'s installs, which omit a committed writer.
    MissingFromVersionOrder {
        replica: String,
        key: String,
        txn: TxnId,
    },
    /// Two or more committed transactions wrote `key`, no replica reported installs for it and
    /// not every writer has a commit sequence number.
    NoVersionOrder {
        key: String,
        writers: Vec<TxnId>,
    },
    AmbiguousCommitOrder {
        key: String,
        first: TxnId,
        second: TxnId,
        commit: u64,
    },
}

impl fmt::Display for Malformation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformation::DuplicateTransaction { id } => {
                write!(f, "transaction id {id} appears more than once")
            }
            Malformation::UnknownWriter { reader, key, writer } => {
                write!(f, "T{reader} read `{key}` from T{writer}, which is not in the history")
            }
            Malformation::WriterDidNotWriteKey { reader, key, writer } => {
                write!(f, "T{reader} read `{key}` from T{writer}, which did not write `{key}`")
            }
            Malformation::ValueNotWritten { reader, key, writer, value } => write!(
                f,
                "T{reader} read `{key}` = {value:?} from T{writer}, which never wrote that value to `{key}`"
            ),
            Malformation::UnknownInstalledTransaction { replica, key, txn } => {
                write!(f, "replica {replica} installed T{txn}'s `{key}`, but T{txn} is not in the history")
            }
            Malformation::InstalledTransactionDidNotWriteKey { replica, key, txn } => {
                write!(f, "replica {replica} installed T{txn}'s `{key}`, but T{txn} did not write `{key}`")
            }
            Malformation::DuplicateInstall { replica, key, txn } => {
                write!(f, "replica {replica} installed T{txn}'s `{key}` twice")
            }
            Malformation::MissingFromVersionOrder { replica, key, txn } => write!(
                f,
                "key `{key}`: committed T{txn} wrote it, but the version order (the installs of replica {replica}) does not list it"
            ),
            Malformation::NoVersionOrder { key, writers } => {
                let list: Vec<String> = writers.iter().map(|w| format!("T{w}")).collect();
                write!(
                    f,
                    "key `{key}` has {} committed writers ({}) but no version order: report installs for it, or a `commit` number for every writer",
                    writers.len(),
                    list.join(", ")
                )
            }
            Malformation::AmbiguousCommitOrder { key, first, second, commit } => write!(
                f,
                "key `{key}`: writers T{first} and T{second} have the same commit number {commit}, so its version order is ambiguous"
            ),
        }
    }
}

/// One thing wrong with a history under a criterion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The history cannot be checked (no other check ran).
    Malformed(Malformation),
    /// A cycle the criterion forbids. `shortest` is false only when the search for a shorter
    /// one ran out of its budget (on very large strongly connected components).
    Cycle {
        cycle: Cycle,
        shortest: bool,
        /// For update serializability: the read-only transaction that closes the cycle.
        query: Option<TxnId>,
    },
    /// G1a: a committed transaction read a version written by an aborted one.
    AbortedRead {
        reader: TxnId,
        key: String,
        writer: TxnId,
    },
    /// G1b: a committed transaction read a version that its writer later overwrote itself.
    IntermediateRead {
        reader: TxnId,
        key: String,
        writer: TxnId,
        value: String,
    },
    /// A replica installed a version written by an aborted transaction.
    AbortedInstall {
        replica: String,
        key: String,
        txn: TxnId,
    },
    /// Two replicas of `key` installed different versions or in a different order. `position`
    /// is the first index at which their orders differ (`None` = that replica's order ended).
    ReplicaOrder {
        key: String,
        replica_a: String,
        replica_b: String,
        position: usize,
        a: Option<TxnId>,
        b: Option<TxnId>,
    },
    /// Two replicas of `key` ended with different values.
    ReplicaValue {
        key: String,
        replica_a: String,
        value_a: String,
        replica_b: String,
        value_b: String,
    },
    /// A replica's final value of `key` is not the value of the last version it installed.
    ReplicaFinalValue {
        key: String,
        replica: String,
        value: String,
        writer: TxnId,
        expected: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let txn = |t: &Option<TxnId>| t.map_or_else(|| "nothing".to_owned(), |t| format!("T{t}"));
        match self {
            Violation::Malformed(m) => write!(f, "malformed: {m}"),
            Violation::Cycle { cycle, shortest, query } => {
                write!(f, "cycle {cycle} ({}", cycle.anomaly())?;
                if let Some(q) = query {
                    write!(f, ", closed by read-only T{q}")?;
                }
                if !shortest {
                    write!(f, "; the search for a shorter one stopped at its budget")?;
                }
                f.write_str(")")
            }
            Violation::AbortedRead { reader, key, writer } => {
                write!(f, "aborted read (G1a): T{reader} read `{key}` from aborted T{writer}")
            }
            Violation::IntermediateRead { reader, key, writer, value } => write!(
                f,
                "intermediate read (G1b): T{reader} read `{key}` = {value:?}, which T{writer} overwrote before committing"
            ),
            Violation::AbortedInstall { replica, key, txn } => {
                write!(f, "replica {replica} installed `{key}` from aborted T{txn}")
            }
            Violation::ReplicaOrder { key, replica_a, replica_b, position, a, b } => write!(
                f,
                "replicas disagree on `{key}`: at install {position}, {replica_a} has {} and {replica_b} has {}",
                txn(a),
                txn(b)
            ),
            Violation::ReplicaValue { key, replica_a, value_a, replica_b, value_b } => write!(
                f,
                "replicas disagree on `{key}`: {replica_a} ends with {value_a:?}, {replica_b} with {value_b:?}"
            ),
            Violation::ReplicaFinalValue { key, replica, value, writer, expected } => write!(
                f,
                "replica {replica} ends `{key}` with {value:?}, but its last installed version (T{writer}'s) is {expected:?}"
            ),
        }
    }
}

/// The outcome of checking one history against one criterion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub criterion: Criterion,
    /// All transactions in the history, committed or not.
    pub transactions: usize,
    pub committed: usize,
    pub edges: EdgeCounts,
    /// Every violation found, up to [`Report::MAX_VIOLATIONS`]; the rest are counted in
    /// `omitted`.
    pub violations: Vec<Violation>,
    pub omitted: usize,
}

impl Report {
    /// Violations kept in full; more are only counted (a broken run of 10^6 transactions could
    /// otherwise produce millions).
    pub const MAX_VIOLATIONS: usize = 1000;
    /// Violations printed by `Display` after the verdict line.
    pub const SHOWN: usize = 10;

    /// True when the history satisfies the criterion (and its replicas agree).
    pub fn ok(&self) -> bool {
        self.violations.is_empty() && self.omitted == 0
    }

    /// The forbidden cycle, if one was found.
    pub fn cycle(&self) -> Option<&Cycle> {
        self.violations.iter().find_map(|v| match v {
            Violation::Cycle { cycle, .. } => Some(cycle),
            _ => None,
        })
    }

    pub fn is_malformed(&self) -> bool {
        self.violations
            .iter()
            .any(|v| matches!(v, Violation::Malformed(_)))
    }

    pub(crate) fn push(&mut self, violation: Violation) {
        if self.violations.len() < Self::MAX_VIOLATIONS {
            self.violations.push(violation);
        } else {
            self.omitted += 1;
        }
    }

    fn stats(&self) -> String {
        let e = &self.edges;
        let mut s = format!("{} committed transactions", self.committed);
        if self.committed != self.transactions {
            s += &format!(" ({} in the history)", self.transactions);
        }
        s += &format!(", {} ww / {} wr / {} rw", e.ww, e.wr, e.rw);
        if e.so > 0 {
            s += &format!(" / {} so", e.so);
        }
        s + " edges"
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.criterion;
        if self.ok() {
            return write!(
                f,
                "{name}: {} — {}",
                self.criterion.adjective(),
                self.stats()
            );
        }
        let total = self.violations.len() + self.omitted;
        if self.is_malformed() {
            write!(
                f,
                "{name}: malformed history, not checked — {total} problem(s)"
            )?;
            for v in self.violations.iter().take(Self::SHOWN) {
                write!(f, "\n  {v}")?;
            }
        } else {
            // The cycle first: it is the counterexample people look for.
            let mut order: Vec<&Violation> = self.violations.iter().collect();
            order.sort_by_key(|v| !matches!(v, Violation::Cycle { .. }));
            write!(
                f,
                "{name}: NOT {} — {}",
                self.criterion.adjective(),
                order[0]
            )?;
            for v in order.iter().skip(1).take(Self::SHOWN - 1) {
                write!(f, "\n  also: {v}")?;
            }
        }
        if total > Self::SHOWN {
            write!(f, "\n  … and {} more", total - Self::SHOWN)?;
        }
        write!(f, "\n  ({})", self.stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criterion_names_parse_and_unknown_lists_them() {
        for c in Criterion::ALL {
            assert_eq!(c.name().parse::<Criterion>(), Ok(c));
        }
        assert_eq!("SI".parse::<Criterion>(), Ok(Criterion::Si));
        let err = "strict".parse::<Criterion>().unwrap_err().to_string();
        assert!(
            err.contains("`strict`") && err.contains("ser, us, si, psi, nmsi, rc"),
            "{err}"
        );
    }

    fn edge(from: TxnId, to: TxnId, kind: EdgeKind, key: &str) -> CycleEdge {
        CycleEdge {
            from,
            to,
            kind,
            key: Some(key.to_owned()),
        }
    }

    #[test]
    fn cycles_print_and_are_classified() {
        let c = Cycle {
            edges: vec![edge(3, 5, EdgeKind::Rw, "x"), edge(5, 3, EdgeKind::Wr, "y")],
        };
        assert_eq!(c.to_string(), "T3 -rw(x)-> T5 -wr(y)-> T3");
        assert_eq!(c.anomaly(), "G-single");
        let skew = Cycle {
            edges: vec![edge(1, 2, EdgeKind::Rw, "x"), edge(2, 1, EdgeKind::Rw, "y")],
        };
        assert_eq!(skew.anomaly(), "G2");
        let fork = Cycle {
            edges: vec![
                edge(1, 3, EdgeKind::Wr, "x"),
                edge(3, 2, EdgeKind::Rw, "y"),
                edge(2, 4, EdgeKind::Wr, "y"),
                edge(4, 1, EdgeKind::Rw, "x"),
            ],
        };
        assert_eq!(fork.anomaly(), "G-nonadjacent");
        let g0 = Cycle {
            edges: vec![edge(1, 2, EdgeKind::Ww, "x"), edge(2, 1, EdgeKind::Ww, "y")],
        };
        assert_eq!(g0.anomaly(), "G0");
        let so = Cycle {
            edges: vec![
                edge(1, 2, EdgeKind::Wr, "x"),
                CycleEdge {
                    from: 2,
                    to: 1,
                    kind: EdgeKind::So,
                    key: None,
                },
            ],
        };
        assert_eq!(so.to_string(), "T1 -wr(x)-> T2 -so-> T1");
        assert_eq!(so.anomaly(), "G1c");
    }

    #[test]
    fn long_cycles_are_elided_in_the_middle() {
        let n = 1000u64;
        let c = Cycle {
            edges: (0..n)
                .map(|i| edge(i, (i + 1) % n, EdgeKind::Wr, "k"))
                .collect(),
        };
        let text = c.to_string();
        assert!(text.starts_with("T0 -wr(k)-> T1 -wr(k)-> T2"), "{text}");
        assert!(
            text.contains("-wr(k)-> T16 … 980 more edges … T996 -wr(k)-> T997"),
            "{text}"
        );
        assert!(text.ends_with("T999 -wr(k)-> T0"), "{text}");
        assert!(text.len() < 400);
    }

    #[test]
    fn report_lists_a_bounded_number_of_violations() {
        let mut r = Report {
            criterion: Criterion::Rc,
            transactions: 3,
            committed: 2,
            edges: EdgeCounts {
                ww: 1,
                wr: 2,
                rw: 0,
                so: 0,
            },
            violations: Vec::new(),
            omitted: 0,
        };
        assert_eq!(
            r.to_string(),
            "RC: read committed — 2 committed transactions (3 in the history), 1 ww / 2 wr / 0 rw edges"
        );
        for i in 0..15 {
            r.push(Violation::AbortedRead {
                reader: i,
                key: "x".into(),
                writer: 99,
            });
        }
        let text = r.to_string();
        assert!(
            text.starts_with(
                "RC: NOT read committed — aborted read (G1a): T0 read `x` from aborted T99"
            ),
            "{text}"
        );
        assert!(text.contains("… and 5 more"), "{text}");
        assert_eq!(text.lines().count(), 1 + 9 + 1 + 1, "{text}");
    }
}
