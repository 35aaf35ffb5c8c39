//! One module per criterion. Each turns the shared dependency graph into the one cycle search
//! its definition calls for; everything else (malformed histories, G1a, G1b, replica
//! agreement) is common to all and handled here.

mod nmsi;
mod psi;
mod rc;
mod ser;
mod si;
mod us;

use crate::cycle::Outcome;
use crate::graph::Analysis;
use crate::report::{Criterion, Report, Violation};

/// Checks the analysed history against one criterion.
pub(crate) fn report(a: &Analysis, criterion: Criterion) -> Report {
    let mut report = Report {
        criterion,
        transactions: a.history.len(),
        committed: a.committed_count,
        edges: a.counts,
        violations: Vec::new(),
        omitted: 0,
    };
    if !a.malformed.is_empty() {
        for m in &a.malformed {
            report.push(Violation::Malformed(m.clone()));
        }
        return report;
    }
    let cycle = match criterion {
        Criterion::Ser => ser::check(a),
        Criterion::Us => us::check(a),
        Criterion::Si => si::check(a),
        Criterion::Psi => psi::check(a),
        Criterion::Nmsi => nmsi::check(a),
        Criterion::Rc => rc::check(a),
    };
    if let Some(v) = cycle {
        report.push(v);
    }
    for v in &a.shared {
        report.push(v.clone());
    }
    report
}

fn violation(a: &Analysis, outcome: Outcome) -> Violation {
    Violation::Cycle {
        cycle: outcome.found.to_cycle(a),
        shortest: outcome.shortest,
        query: None,
    }
}
