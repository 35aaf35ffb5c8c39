//! Update serializability (US): update transactions are serialized, and each read-only
//! transaction sees a consistent (but not necessarily monotonic) snapshot: Garcia-Molina &
//! Wiederhold, "Read-only transactions in a distributed database" (TODS 1982), extended to
//! aborted transactions by Hansdah & Patnaik (1986); G-DUR §6.2.
//!
//! Graph form: the dependency graph restricted to the update transactions plus any ONE
//! read-only transaction is acyclic. Checked in two steps:
//!
//! 1. the update transactions alone (`WW ∪ WR ∪ RW` among them) are acyclic;
//! 2. then a read-only transaction `q` closes a cycle only through its own edges: it has no
//!    `ww` edges, only `wr` edges in (from the writers it read) and `rw` edges out (to the
//!    writers that overwrote what it read), so it closes a cycle iff some overwriter `o`
//!    reaches some writer `i` it read from through update transactions: `q -rw-> o ~> i -wr->
//!    q`. One breadth-first search per read-only transaction on a cycle of the whole graph,
//!    pruned with two topological orders of the update graph, decides this and gives the
//!    shortest such cycle.
//!
//! Session order plays no part: US makes no promise across a session (its read-only
//! transactions may go back in time).

use crate::cycle::{self, KindSet, Reach, Rule};
use crate::graph::Analysis;
use crate::report::{EdgeKind, Violation};
use crate::scc::{self, Components};

pub(super) fn check(a: &Analysis) -> Option<Violation> {
    let kinds = KindSet::of(&[EdgeKind::Ww, EdgeKind::Wr, EdgeKind::Rw]);
    if let Some(o) = cycle::find(a, Rule::Any(kinds), |v| a.is_update(v)) {
        return Some(super::violation(a, o));
    }
    let g = &a.graph;
    let full = &a.full;
    let queries: Vec<u32> = full
        .cyclic_nodes()
        .into_iter()
        .filter(|&v| a.committed[v as usize] && !a.is_update(v))
        .collect();
    if queries.is_empty() {
        return None;
    }
    // The update graph is acyclic now; Tarjan numbers its nodes in reverse topological order,
    // so u ~> v implies comp[u] >= comp[v] in both numberings.
    let updates: Vec<u32> = full
        .cyclic_nodes()
        .into_iter()
        .filter(|&v| a.is_update(v))
        .collect();
    let view = cycle::View {
        g,
        kinds,
        keep: |v: u32, t: u32| full.same(v, t) && a.is_update(t),
    };
    let forward = scc::components(&view, updates.iter().copied());
    let backward = scc::components(&view, updates.iter().rev().copied());
    let may_reach =
        |c: &Components, from: u32, to: u32| c.comp[from as usize] >= c.comp[to as usize];

    let mut reach = Reach::new(g.node_count());
    let mut best: Option<(u32, Vec<u32>)> = None; // (query, cycle slots starting at the query)
    for q in queries {
        let out: Vec<u32> = g
            .edges(q)
            .filter(|&s| g.kind(s) == EdgeKind::Rw && full.same(q, g.target(s)))
            .map(|s| g.target(s))
            .collect();
        let read_from: Vec<u32> = a
            .history
            .reads_of(q as usize)
            .iter()
            .filter_map(|r| r.writer.and_then(|w| a.index.get(&w).copied()))
            .filter(|&w| w != q && full.same(q, w))
            .collect();
        if out.is_empty() || read_from.is_empty() {
            continue;
        }
        let reachable = |x: u32| {
            read_from
                .iter()
                .any(|&i| may_reach(&forward, x, i) && may_reach(&backward, x, i))
        };
        if best.as_ref().is_some_and(|(_, c)| c.len() <= 2) {
            break; // nothing is shorter than q -rw-> o -wr-> q
        }
        // A shorter cycle than the best needs a path of at most best - 3 edges.
        let bound = best.as_ref().map_or(usize::MAX, |(_, c)| c.len() - 3);
        let follow = |v: u32, s: u32, x: u32| {
            kinds.has(g.kind(s)) && full.same(v, x) && a.is_update(x) && reachable(x)
        };
        let sources = out.iter().copied().filter(|&o| reachable(o));
        if let Some((o, path, i)) =
            reach.shortest(g, sources, |x| read_from.contains(&x), follow, bound)
        {
            let rw = g
                .edges(q)
                .find(|&s| g.kind(s) == EdgeKind::Rw && g.target(s) == o);
            let wr = g
                .edges(i)
                .find(|&s| g.kind(s) == EdgeKind::Wr && g.target(s) == q);
            let (Some(rw), Some(wr)) = (rw, wr) else {
                continue;
            };
            let mut slots = vec![rw];
            slots.extend(path);
            slots.push(wr);
            best = Some((q, slots));
        }
    }
    best.map(|(q, slots)| Violation::Cycle {
        cycle: cycle::Found { start: q, slots }.to_cycle(a),
        shortest: true,
        query: Some(a.id(q)),
    })
}
