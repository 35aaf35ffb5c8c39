//! Classification (Eliá §3.2, Gyro Definition 1) and table placement, for a chosen partitioning.
//!
//! * **Commutative**: no operation reads from it and it reads from none (including operations of
//!   its own type); the only conflicts allowed are write–write with its own type, whose writes
//!   nobody reads. In practice this is a read-only type over data nobody writes: every INSERT,
//!   UPDATE and DELETE also reads (the row count, the key collision), so writers conflict.
//! * **Local**: no operation of another partition reads from it (Gyro Definition 1, Eliá (ii))
//!   and none writes what it writes (Eliá (i)). Read-only types are never read from, so they are
//!   local (or commutative) whatever they read: browsing items that global orders update is local.
//! * **Local/global**: would be local, but has several partitioning parameters: local when they
//!   all route to one instance, global otherwise.
//! * **Global**: everything else; the report names the conflict that makes it so.

use crate::conflict::{Conflict, ConflictKind};
use crate::extract::{AccessKind, RwSets};
use crate::search::{active, Threat};
use crate::spec::AppSpec;
use ensemble_app::{PlanClass, TablePlacement};

/// Types that conflict with nothing that matters.
pub fn commutative(n: usize, conflicts: &[Conflict]) -> Vec<bool> {
    let mut c = vec![true; n];
    for k in conflicts {
        match k.kind {
            ConflictKind::ReadsFrom => {
                c[k.a] = false;
                c[k.b] = false;
            }
            ConflictKind::WriteWrite if k.a != k.b => {
                c[k.a] = false;
                c[k.b] = false;
            }
            ConflictKind::WriteWrite => {}
        }
    }
    c
}

/// What keeps a type from being local.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// A conjunction of a conflict with `other` can hold for operations on different instances.
    Conflict {
        other: usize,
        /// Index into the conflict list.
        conflict: usize,
        /// Index into that conflict's clauses.
        clause: usize,
    },
    /// It writes a table that cannot be partitioned, so its writes must reach every copy
    /// ([`Replicas::Identical`](crate::Replicas)).
    Placement { table: String, why: String },
}

impl Reason {
    pub fn other(&self) -> Option<usize> {
        match self {
            Reason::Conflict { other, .. } => Some(*other),
            Reason::Placement { .. } => None,
        }
    }
}

pub fn classify(
    n: usize,
    commutative: &[bool],
    threats: &[Threat],
    conflicts: &[Conflict],
    choice: &[Vec<usize>],
) -> (Vec<PlanClass>, Vec<Vec<Reason>>) {
    let mut reasons: Vec<Vec<Reason>> = vec![Vec::new(); n];
    for (ci, c) in conflicts.iter().enumerate() {
        // (victim, other, whether the clause pairs are (victim, other) as stored or reversed)
        let pairs: Vec<(usize, usize, bool)> = match c.kind {
            ConflictKind::ReadsFrom => vec![(c.b, c.a, false)],
            ConflictKind::WriteWrite => vec![(c.b, c.a, false), (c.a, c.b, true)],
        };
        for (victim, other, reversed) in pairs {
            if commutative[victim] {
                continue;
            }
            for (k, cl) in c.clauses.iter().enumerate() {
                let eq: Vec<(usize, usize)> = if reversed { cl.equated.iter().map(|(x, y)| (*y, *x)).collect() } else { cl.equated.clone() };
                if active(&eq, &choice[other], &choice[victim]) {
                    if !reasons[victim].iter().any(|r| r.other() == Some(other)) {
                        reasons[victim].push(Reason::Conflict { other, conflict: ci, clause: k });
                    }
                    break;
                }
            }
        }
    }
    debug_assert!(threats.iter().all(|t| {
        let a = crate::search::threat_active(t, &choice[t.other], &choice[t.victim]);
        a == reasons[t.victim].iter().any(|r| r.other() == Some(t.other))
    }));
    let classes = (0..n)
        .map(|t| {
            if commutative[t] {
                PlanClass::Commutative
            } else if !reasons[t].is_empty() {
                PlanClass::Global
            } else if choice[t].len() >= 2 {
                PlanClass::LocalGlobal
            } else {
                PlanClass::Local
            }
        })
        .collect();
    (classes, reasons)
}

/// Where a table lives, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub table: String,
    pub placement: TablePlacement,
    pub why: String,
}

/// A table is partitioned by column `c` when some local operation writes it (otherwise there is
/// nothing to partition: data only global operations write is replicated, as Gyro's "the state
/// accessed by global requests is fully replicated") and every access to it, read or write, by
/// any type, is bound by `c = P[t][0]`, the parameter that routes the accessing operation: then
/// every operation finds the rows it touches at the instance it runs on. Otherwise it is
/// replicated, which is always correct.
pub fn placements(app: &AppSpec, sets: &[RwSets], classes: &[PlanClass], choice: &[Vec<usize>]) -> Vec<Placement> {
    let mut out = Vec::new();
    for table in &app.tables {
        let accesses: Vec<(usize, &crate::extract::Access)> = sets
            .iter()
            .enumerate()
            .flat_map(|(t, s)| s.reads.iter().chain(&s.writes).map(move |a| (t, a)))
            .filter(|(_, a)| a.table == table.name)
            .collect();
        let local_writer = accesses
            .iter()
            .find(|(t, a)| a.kind == AccessKind::Write && matches!(classes[*t], PlanClass::Local | PlanClass::LocalGlobal));
        let Some((lw, _)) = local_writer else {
            let writers: Vec<&str> = accesses
                .iter()
                .filter(|(_, a)| a.kind == AccessKind::Write)
                .map(|(t, _)| app.transactions[*t].name.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let why = if writers.is_empty() {
                "never written".to_string()
            } else {
                format!("written only by global operations ({})", writers.join(", "))
            };
            out.push(Placement { table: table.name.clone(), placement: TablePlacement::Replicated, why });
            continue;
        };
        // Candidate columns: the primary key's first, then the rest in schema order.
        let mut columns: Vec<&String> = table.primary_key.iter().collect();
        columns.extend(table.columns.iter().filter(|c| !table.primary_key.contains(c)));
        let mut chosen = None;
        let mut first_obstacle: Option<String> = None;
        for c in columns {
            let obstacle = accesses.iter().find(|(t, a)| {
                if a.condition.clauses.is_empty() {
                    return false; // accesses no row at all
                }
                let Some(k) = choice[*t].first() else { return true };
                let term = crate::cond::Term::Param(*k);
                !a.condition.clauses.iter().all(|cl| cl.binds(c, &term))
            });
            match obstacle {
                None => {
                    chosen = Some(c.clone());
                    break;
                }
                Some((t, a)) if first_obstacle.is_none() => {
                    first_obstacle = Some(format!(
                        "`{}` ({}) {} it where {}",
                        app.transactions[*t].name,
                        a.statement,
                        if a.kind == AccessKind::Read { "reads" } else { "writes" },
                        a.condition.render(&table.name, &|i| format!(":{}", app.transactions[*t].params[i].name))
                    ));
                }
                Some(_) => {}
            }
        }
        match chosen {
            Some(c) => out.push(Placement {
                table: table.name.clone(),
                placement: TablePlacement::Partitioned { column: c.clone() },
                why: format!(
                    "local `{}` writes it and every access is bound by {}.{c} = the accessing operation's routing parameter",
                    app.transactions[*lw].name, table.name
                ),
            }),
            None => out.push(Placement {
                table: table.name.clone(),
                placement: TablePlacement::Replicated,
                why: format!(
                    "no column binds every access to the routing parameter: {}",
                    first_obstacle.unwrap_or_else(|| "the table has no columns".into())
                ),
            }),
        }
    }
    out
}
