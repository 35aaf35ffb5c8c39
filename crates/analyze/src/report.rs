//! The analyzer's report: Table 1 of the papers for this application, the plan per type and per
//! table, what the search cost, and with `explain` the read and write sets and the conflicts
//! behind every class.

use crate::classify::Reason;
use crate::cond::Clause;
use crate::conflict::{Conflict, ConflictKind};
use crate::extract::Access;
use crate::Analysis;
use ensemble_app::{PlanClass, TablePlacement};
use std::fmt::Write;

fn pct(x: f64, total: f64) -> String {
    if total <= 0.0 {
        "-".into()
    } else {
        format!("{:.0}%", 100.0 * x / total)
    }
}

fn class_label(c: PlanClass) -> &'static str {
    match c {
        PlanClass::Commutative => "commutative",
        PlanClass::Local => "local",
        PlanClass::Global => "global",
        PlanClass::LocalGlobal => "local/global",
    }
}

fn weight(w: f64) -> String {
    if w.fract() == 0.0 {
        format!("{w:.0}")
    } else {
        format!("{w}")
    }
}

pub fn report(a: &Analysis, explain: bool) -> String {
    let mut s = String::new();
    let n = a.spec.transactions.len();
    let _ = writeln!(
        s,
        "Partition plan for `{}`: {n} transaction types, {} tables; dialect {}; weights {}",
        a.spec.name,
        a.spec.tables.len(),
        a.options.dialect,
        a.options.weights.source.as_deref().unwrap_or("1 each (no --weights)")
    );
    let _ = writeln!(s);

    // Table 1.
    let count = |c: PlanClass| a.classes.iter().filter(|x| **x == c).count();
    let ro: Vec<bool> = a.sets.iter().map(|x| x.read_only()).collect();
    let total_w: f64 = a.weights.iter().sum();
    // `+ 0.0`: an empty f64 sum is -0.0, which would print as "-0%".
    let freq = |c: PlanClass| (0..n).filter(|i| a.classes[*i] == c).map(|i| a.weights[i]).sum::<f64>() + 0.0;
    let ro_w: f64 = (0..n).filter(|i| ro[*i]).map(|i| a.weights[i]).sum::<f64>() + 0.0;
    let _ = writeln!(s, "{:<12} {:^30} {:>5}   {:^38}", "Application", "Transaction classification", "Total", "Operation frequencies");
    let _ = writeln!(s, "{:<12} {:>4} {:>4} {:>4} {:>4} {:>10} {:>5}   {:>6} {:>6} {:>6} {:>6} {:>10}", "", "L", "G", "C", "L/G", "Read-only", "", "L", "G", "C", "L/G", "Read-only");
    let _ = writeln!(
        s,
        "{:<12} {:>4} {:>4} {:>4} {:>4} {:>10} {:>5}   {:>6} {:>6} {:>6} {:>6} {:>10}",
        a.spec.name,
        count(PlanClass::Local),
        count(PlanClass::Global),
        count(PlanClass::Commutative),
        count(PlanClass::LocalGlobal),
        ro.iter().filter(|x| **x).count(),
        n,
        pct(freq(PlanClass::Local), total_w),
        pct(freq(PlanClass::Global), total_w),
        pct(freq(PlanClass::Commutative), total_w),
        pct(freq(PlanClass::LocalGlobal), total_w),
        pct(ro_w, total_w),
    );
    let _ = writeln!(s, "(Read-only types are counted in their class too; frequencies are weighted by the workload mix.)");
    let _ = writeln!(s);

    // Per type.
    let name_w = a.spec.transactions.iter().map(|t| t.name.len()).max().unwrap_or(4).max(11);
    let _ = writeln!(s, "{:<name_w$}  {:<12}  {:<20}  {:<9}  {:>6}", "Transaction", "Class", "Partition by", "Read-only", "Weight");
    for (i, t) in a.spec.transactions.iter().enumerate() {
        let by = a.plan.transactions.get(&t.name).map(|p| p.partition_by.join(", ")).unwrap_or_default();
        let by = if by.is_empty() { "(any instance)".to_string() } else { by };
        let by = if a.options.weights.partition_by.contains_key(&t.name) { format!("{by} (pinned)") } else { by };
        let _ = writeln!(
            s,
            "{:<name_w$}  {:<12}  {:<20}  {:<9}  {:>6}",
            t.name,
            class_label(a.classes[i]),
            by,
            if ro[i] { "yes" } else { "no" },
            weight(a.weights[i])
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Tables:");
    let tw = a.placements.iter().map(|p| p.table.len()).max().unwrap_or(5);
    for p in &a.placements {
        let place = match &p.placement {
            TablePlacement::Replicated => "replicated".to_string(),
            TablePlacement::Partitioned { column } => format!("partitioned by {column}"),
        };
        let _ = writeln!(s, "  {:<tw$}  {:<24}  {}", p.table, place, if explain { p.why.as_str() } else { "" });
    }
    let _ = writeln!(s);

    if !a.warnings.is_empty() {
        let _ = writeln!(s, "Warnings:");
        for w in &a.warnings {
            let _ = writeln!(s, "  {w}");
        }
        let _ = writeln!(s);
    }

    // Why each global type is global: always, it is short.
    let globals: Vec<usize> = (0..n).filter(|i| a.classes[*i] == PlanClass::Global).collect();
    if !globals.is_empty() {
        let _ = writeln!(s, "Global types, and the conflict that makes each one global:");
        for &g in &globals {
            for r in &a.reasons[g] {
                let _ = writeln!(s, "  {}", reason_line(a, g, r));
            }
        }
        let _ = writeln!(s);
    }

    let o = &a.search;
    let _ = writeln!(
        s,
        "Search: {} complete choices over {} independent component(s) (largest: {} types); branch and bound visited {} nodes; {}.",
        space(o.space),
        o.components,
        o.largest_component,
        o.nodes,
        if o.proven_minimal {
            "the global volume is minimal"
        } else {
            "NODE BUDGET EXHAUSTED: the plan is sound but its global volume is not proven minimal"
        }
    );
    let _ = writeln!(
        s,
        "Cost: weighted global volume {} (of {}); then, by local search, Algorithm 1 conflict cost {} and {} partitioning parameter(s).",
        weight(o.cost.global),
        weight(total_w),
        weight(o.cost.conflicts),
        o.cost.params
    );
    let _ = writeln!(
        s,
        "Search cost: Σ over components of Π_t c_t choices, c_t = 1 + m_t (+ m_t(m_t − 1) with double keys) for m_t candidate \
         parameters of type t; types global whatever is chosen split components. Exponential in the largest component, linear in their number."
    );

    if explain {
        let _ = writeln!(s);
        explain_all(a, &mut s);
    }
    s
}

fn param_namer<'a>(a: &'a Analysis, t: usize, prime: bool) -> impl Fn(usize) -> String + 'a {
    move |i| format!("{}{}.{}", a.spec.transactions[t].name, if prime { "'" } else { "" }, a.spec.transactions[t].params[i].name)
}

fn entry<'a>(a: &'a Analysis, c: &Conflict, side_a: bool) -> &'a Access {
    if side_a {
        match c.kind {
            ConflictKind::ReadsFrom => &a.sets[c.a].reads[c.a_entry],
            ConflictKind::WriteWrite => &a.sets[c.a].writes[c.a_entry],
        }
    } else {
        &a.sets[c.b].writes[c.b_entry]
    }
}

/// The conjunction of both sides' bindings, with the second copy's parameters primed when a type
/// conflicts with itself.
fn render_conjunction(a: &Analysis, c: &Conflict, ca: &Clause, cb: &Clause) -> String {
    let prime = c.a == c.b;
    let mut parts = Vec::new();
    for (col, t) in &ca.bindings {
        parts.push(format!("{}.{} = {}", c.table, col, term(a, c.a, t, false)));
    }
    for (col, t) in &cb.bindings {
        parts.push(format!("{}.{} = {}", c.table, col, term(a, c.b, t, prime)));
    }
    if parts.is_empty() {
        format!("any row of {}", c.table)
    } else {
        parts.join(" ∧ ")
    }
}

fn term(a: &Analysis, t: usize, term: &crate::cond::Term, prime: bool) -> String {
    match term {
        crate::cond::Term::Param(i) => param_namer(a, t, prime)(*i),
        crate::cond::Term::Const(k) => k.to_string(),
    }
}

fn routing(a: &Analysis, t: usize) -> String {
    match a.choice[t].as_slice() {
        [] => format!("`{}` runs on any instance", a.spec.transactions[t].name),
        ps => format!(
            "`{}` is routed by {}",
            a.spec.transactions[t].name,
            ps.iter().map(|p| a.spec.transactions[t].params[*p].name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The columns through which the conflicts between `victim` and `other` equate `other`'s
/// routing parameter with one of `victim`'s partitioning parameters.
fn shared_columns(a: &Analysis, victim: usize, other: usize) -> Vec<String> {
    let (Some(ko), pv) = (a.choice[other].first(), &a.choice[victim]) else { return vec![] };
    let mut out: Vec<String> = Vec::new();
    for c in &a.conflicts {
        // (clause side of `other`, clause side of `victim`)
        let sides: Vec<(bool, bool)> = match c.kind {
            ConflictKind::ReadsFrom if c.a == other && c.b == victim => vec![(true, false)],
            ConflictKind::WriteWrite if c.a == other && c.b == victim => vec![(true, false)],
            ConflictKind::WriteWrite if c.a == victim && c.b == other => vec![(false, true)],
            _ => vec![],
        };
        for (other_is_a, _) in sides {
            for cl in &c.clauses {
                let (co, cv) = if other_is_a { (&cl.a, &cl.b) } else { (&cl.b, &cl.a) };
                for (col, t) in &co.bindings {
                    let crate::cond::Term::Param(p) = t else { continue };
                    if p != ko {
                        continue;
                    }
                    if cv.bindings.iter().any(|(c2, t2)| c2 == col && matches!(t2, crate::cond::Term::Param(q) if pv.contains(q))) {
                        let name = format!("{}.{col}", c.table);
                        if !out.contains(&name) {
                            out.push(name);
                        }
                    }
                }
            }
        }
    }
    out
}

fn space(x: f64) -> String {
    if x < 1e9 {
        format!("{x:.0}")
    } else {
        format!("{x:.1e}")
    }
}

fn reason_line(a: &Analysis, victim: usize, r: &Reason) -> String {
    let (other, conflict, clause) = match r {
        Reason::Conflict { other, conflict, clause } => (*other, *conflict, *clause),
        Reason::Placement { table, why } => {
            return format!(
                "{}: it writes `{table}`, which cannot be partitioned ({why}); a local write would reach only one copy",
                a.spec.transactions[victim].name
            )
        }
    };
    let r = (other, conflict, clause);
    let c = &a.conflicts[r.1];
    let cl = &c.clauses[r.2];
    let vname = &a.spec.transactions[victim].name;
    let oname = &a.spec.transactions[r.0].name;
    let attrs = c.attributes.iter().cloned().collect::<Vec<_>>().join(", ");
    let (ea, eb) = (entry(a, c, true), entry(a, c, false));
    let what = match c.kind {
        ConflictKind::ReadsFrom => format!(
            "`{}` ({}) reads from `{}` ({})",
            a.spec.transactions[c.a].name, ea.statement, a.spec.transactions[c.b].name, eb.statement
        ),
        ConflictKind::WriteWrite => format!(
            "`{}` ({}) and `{}` ({}) write the same rows",
            a.spec.transactions[c.a].name, ea.statement, a.spec.transactions[c.b].name, eb.statement
        ),
    };
    let same = if victim == r.0 { format!("two `{vname}` operations") } else { format!("`{oname}` and `{vname}`") };
    format!(
        "{vname}: {what} on {}.{{{attrs}}} when {}; {} and {}, so {same} can run on different instances",
        c.table,
        render_conjunction(a, c, &cl.a, &cl.b),
        routing(a, r.0),
        if victim == r.0 { "no partitioning parameter is forced equal".to_string() } else { routing(a, victim) },
    )
}

fn explain_all(a: &Analysis, s: &mut String) {
    let _ = writeln!(s, "Explanation");
    let _ = writeln!(s, "===========");
    let _ = writeln!(
        s,
        "Attributes are columns; `*` is the existence of the row (inserts and deletes write it, every read reads it). \
         Conditions over-approximate the rows an entry touches; \"any row\" is what an unexpressible predicate widens to."
    );
    for (i, t) in a.spec.transactions.iter().enumerate() {
        let _ = writeln!(s);
        let by = if a.choice[i].is_empty() {
            "no partitioning parameter".to_string()
        } else {
            format!("partitioned by {}", a.choice[i].iter().map(|p| t.params[*p].name.as_str()).collect::<Vec<_>>().join(", "))
        };
        let _ = writeln!(
            s,
            "{}({}): {}, {}",
            t.name,
            t.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
            class_label(a.classes[i]),
            by
        );
        let namer = |p: usize| format!(":{}", t.params[p].name);
        for (label, entries) in [("read set", &a.sets[i].reads), ("write set", &a.sets[i].writes)] {
            let _ = writeln!(s, "  {label}:");
            if entries.is_empty() {
                let _ = writeln!(s, "    (empty)");
            }
            for e in entries.iter() {
                let _ = writeln!(
                    s,
                    "    {}.{{{}}} where {}   [{}: {}]",
                    e.table,
                    e.attributes.iter().cloned().collect::<Vec<_>>().join(", "),
                    e.condition.render(&e.table, &namer),
                    e.statement,
                    e.what
                );
            }
        }
        if !a.sets[i].free_values.is_empty() {
            let _ = writeln!(
                s,
                "  free values (placeholders that are not parameters, computed by the body, bound to nothing): {}",
                a.sets[i]
                    .free_values
                    .iter()
                    .map(|(v, st)| format!(":{v} ({})", st.iter().cloned().collect::<Vec<_>>().join(", ")))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let _ = write!(s, "  class: ");
        match a.classes[i] {
            PlanClass::Commutative => {
                let _ = writeln!(s, "commutative: nothing reads from it, it reads from nothing, and it writes nothing another type writes.");
            }
            PlanClass::Global => {
                let _ = writeln!(s, "global:");
                for r in &a.reasons[i] {
                    let _ = writeln!(s, "    {}", reason_line(a, i, r));
                }
            }
            PlanClass::Local | PlanClass::LocalGlobal => {
                let threats: Vec<_> = a.threats.iter().filter(|th| th.victim == i).collect();
                if a.sets[i].read_only() {
                    let _ = writeln!(
                        s,
                        "{}: it writes nothing, so nothing reads from it or writes over it (Gyro Definition 1, Eliá §3.2); \
                         it reads what others write, which only constrains the writers.",
                        class_label(a.classes[i])
                    );
                } else {
                    let _ = writeln!(
                        s,
                        "{}: every conflict that could read from it or write over it is forced onto its own instance:",
                        class_label(a.classes[i])
                    );
                    for th in threats {
                        let via = shared_columns(a, i, th.other);
                        let _ = writeln!(
                            s,
                            "    with `{}`: every conflict condition equates {}'s routing parameter with one of {}'s{}",
                            a.spec.transactions[th.other].name,
                            a.spec.transactions[th.other].name,
                            t.name,
                            if via.is_empty() { String::new() } else { format!(" (through {})", via.join(", ")) }
                        );
                    }
                    if a.classes[i] == PlanClass::LocalGlobal {
                        let _ = writeln!(s, "    (local when all its partitioning parameters route to one instance, global otherwise)");
                    }
                }
            }
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Conflicts (Algorithm 1, with direction):");
    if a.conflicts.is_empty() {
        let _ = writeln!(s, "  (none)");
    }
    for c in &a.conflicts {
        let (ea, eb) = (entry(a, c, true), entry(a, c, false));
        let verb = match c.kind {
            ConflictKind::ReadsFrom => "reads from",
            ConflictKind::WriteWrite => "write-write with",
        };
        let conds: Vec<String> = c.clauses.iter().map(|cl| render_conjunction(a, c, &cl.a, &cl.b)).collect();
        let _ = writeln!(
            s,
            "  {} ({}) {} {} ({}) on {}.{{{}}} when {}",
            a.spec.transactions[c.a].name,
            ea.statement,
            verb,
            a.spec.transactions[c.b].name,
            eb.statement,
            c.table,
            c.attributes.iter().cloned().collect::<Vec<_>>().join(", "),
            if conds.len() == 1 { conds[0].clone() } else { conds.iter().map(|c| format!("({c})")).collect::<Vec<_>>().join(" ∨ ") }
        );
    }
}
