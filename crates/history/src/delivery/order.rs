//! The order properties: uniform prefix order (across groups, and within each group), uniform
//! acyclic order, pairwise order and FIFO order, each decided in time near-linear in the log
//! (times the number of processes for those that compare processes pairwise), on the cleaned
//! sequences of the index.

use super::index::{Index, Rows, NONE};
use super::report::{DeliveryReport, DeliveryViolation, OrderCycle, OrderEdge};
use crate::scc::{self, Components, Digraph};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;

/// Uniform prefix order, pair of processes by pair.
///
/// The definition quantifies over pairs of messages; for one pair of processes p, q it is
/// equivalent to: *p's and q's sequences, restricted to the messages whose destinations contain
/// both, are prefixes one of the other.* If they are, take m delivered by p and m' ≠ m delivered
/// by q (both in the restricted set): if p delivered m' before m, done; otherwise m' is not in
/// p's prefix up to m, which is also q's prefix up to that length, so q has m at the same place
/// and m' after it: q delivered m before m'. If they are not, let i be the first index where
/// both have an entry and the entries differ, m at p and m' at q: the common prefix before i
/// holds neither (no message is delivered twice), so p did not deliver m' before m and q did not
/// deliver m before m' — a violation, and the one reported. So each pair costs one merge-like
/// walk over the two sequences, O(P · deliveries) in all instead of O(P² · M²).
pub(super) fn prefix_order(ix: &Index, report: &mut DeliveryReport) {
    let n = ix.processes() as u32;
    for p in 0..n {
        for q in p + 1..n {
            let both = |m: &&u32| ix.is_destination(p, **m) && ix.is_destination(q, **m);
            let a = ix.sequence[p as usize].iter().filter(both);
            let b = ix.sequence[q as usize].iter().filter(both);
            if let Some(d) = first_divergence(a, b) {
                report.push(DeliveryViolation::PrefixOrder {
                    p: ix.process_no(p),
                    q: ix.process_no(q),
                    m: ix.message_id(d.m),
                    m_prime: ix.message_id(d.m_prime),
                    p_delivered_m_prime_later: d.a_later,
                    q_delivered_m_later: d.b_later,
                });
            }
        }
    }
}

/// Where two delivery sequences, each restricted to the messages compared, first differ: `m` in
/// the first, `m_prime` in the second, and whether each delivers the other's message later.
struct Divergence {
    m: u32,
    m_prime: u32,
    a_later: bool,
    b_later: bool,
}

fn first_divergence<'a>(mut a: impl Iterator<Item = &'a u32>, mut b: impl Iterator<Item = &'a u32>) -> Option<Divergence> {
    while let (Some(&m), Some(&m_prime)) = (a.next(), b.next()) {
        if m != m_prime {
            let a_later = a.any(|&x| x == m_prime);
            let b_later = b.any(|&x| x == m);
            return Some(Divergence { m, m_prime, a_later, b_later });
        }
    }
    None
}

/// Uniform prefix order within each group: prefix order (above) with "destinations of both"
/// narrowed to "members of one group that both messages are addressed to". Per group, each
/// pair of its members is walked over the messages addressed to the group, as above; the
/// pair's first divergence is the violation reported. Members of different groups are not
/// compared, nor messages of other groups, so a cross-group disagreement is no violation.
/// O(Σ_g |g| · deliveries).
pub(super) fn group_order(ix: &Index, report: &mut DeliveryReport) {
    for g in 0..ix.groups() as u32 {
        let group = ix.log.groups[g as usize].id;
        let members = ix.members(g);
        for (i, &p) in members.iter().enumerate() {
            for &q in &members[i + 1..] {
                let mine = |m: &&u32| ix.addresses(**m, g);
                let a = ix.sequence[p as usize].iter().filter(mine);
                let b = ix.sequence[q as usize].iter().filter(mine);
                if let Some(d) = first_divergence(a, b) {
                    report.push(DeliveryViolation::GroupOrder {
                        group,
                        p: ix.process_no(p),
                        q: ix.process_no(q),
                        m: ix.message_id(d.m),
                        m_prime: ix.message_id(d.m_prime),
                        p_delivered_m_prime_later: d.a_later,
                        q_delivered_m_later: d.b_later,
                    });
                }
            }
        }
    }
}

/// Pairwise order: for each pair of processes, their sequences restricted to the messages both
/// delivered must be equal. The first index where they differ, m at p and m' at q, is a pair
/// delivered in opposite orders (the common prefix before it holds neither, and both delivered
/// both). Membership is a stamp per message, so each pair costs the lengths of its sequences.
pub(super) fn pairwise_order(ix: &Index, report: &mut DeliveryReport) {
    let n = ix.processes() as u32;
    let mut in_p = vec![NONE; ix.messages()];
    let mut in_q = vec![NONE; ix.messages()];
    for p in 0..n {
        for &m in &ix.sequence[p as usize] {
            in_p[m as usize] = p;
        }
        for q in p + 1..n {
            for &m in &ix.sequence[q as usize] {
                in_q[m as usize] = q;
            }
            let a = ix.sequence[p as usize].iter().filter(|&&m| in_q[m as usize] == q);
            let b = ix.sequence[q as usize].iter().filter(|&&m| in_p[m as usize] == p);
            if let Some(d) = first_divergence(a, b) {
                report.push(DeliveryViolation::PairwiseOrder {
                    p: ix.process_no(p),
                    q: ix.process_no(q),
                    m: ix.message_id(d.m),
                    m_prime: ix.message_id(d.m_prime),
                });
            }
        }
    }
}

/// Uniform FIFO order: if a process casts m before m', a destination of both that delivers m'
/// has delivered m before it. Per process, the casts addressed to it are laid out caster by
/// caster in cast order, and a cursor per caster marks the first one it has not delivered yet:
/// delivering a cast beyond the cursor skips one. Reports the first skip of each process.
pub(super) fn fifo_order(ix: &Index, report: &mut DeliveryReport) {
    let casts = &ix.log.casts;
    let mut caster_index: HashMap<u32, u32> = HashMap::new();
    let caster: Vec<u32> = casts
        .iter()
        .map(|c| {
            let next = caster_index.len() as u32;
            *caster_index.entry(c.caster).or_insert(next)
        })
        .collect();
    // Cast order: by caster, then `at`, then position in the log.
    let mut order: Vec<u32> = (0..casts.len() as u32).collect();
    order.sort_by_key(|&m| (caster[m as usize], casts[m as usize].at, m));

    let mut position = vec![NONE; ix.messages()];
    let mut delivered = vec![NONE; ix.messages()];
    let mut cursor = vec![NONE; caster_index.len()];
    let mut mine: Vec<u32> = Vec::new();
    for p in 0..ix.processes() as u32 {
        mine.clear();
        for &m in &order {
            if ix.is_destination(p, m) {
                let c = caster[m as usize] as usize;
                if cursor[c] == NONE {
                    // `order` keeps a caster's casts together: this is the start of its run.
                    cursor[c] = mine.len() as u32;
                }
                position[m as usize] = mine.len() as u32;
                mine.push(m);
            }
        }
        for &m in &ix.sequence[p as usize] {
            if !ix.is_destination(p, m) {
                continue; // an integrity violation, not a FIFO one
            }
            let c = caster[m as usize] as usize;
            let cur = &mut cursor[c];
            while (*cur as usize) < mine.len()
                && caster[mine[*cur as usize] as usize] as usize == c
                && delivered[mine[*cur as usize] as usize] == p
            {
                *cur += 1;
            }
            if *cur < position[m as usize] {
                let skipped = mine[*cur as usize];
                report.push(DeliveryViolation::Fifo {
                    process: ix.process_no(p),
                    caster: casts[m as usize].caster,
                    earlier: ix.message_id(skipped),
                    later: ix.message_id(m),
                    earlier_delivered_after: ix
                        .delivered_by
                        .row(skipped)
                        .iter()
                        .any(|&(by, _)| by == p),
                });
                break;
            }
            delivered[m as usize] = p;
        }
        // Cursors of casters with nothing for the next process must not leak into it.
        for &m in &mine {
            cursor[caster[m as usize] as usize] = NONE;
        }
    }
}

/// The graph of consecutive deliveries: an edge m → m' for every process that delivered m' right
/// after m. Its transitive closure is that of `<` ("some process delivers m before m'"): every
/// edge of `<` is a path of consecutive edges of the one process that delivered both, and every
/// consecutive edge is an edge of `<`. A relation is acyclic iff its transitive closure is
/// irreflexive, so `<` is acyclic iff this graph is — and it has one edge per delivery, not one
/// per pair of deliveries.
struct Consecutive(Rows<u32>);

impl Digraph for Consecutive {
    fn node_count(&self) -> usize {
        self.0.rows()
    }
    fn slots(&self, v: u32) -> Range<u32> {
        self.0.slots(v)
    }
    fn target(&self, _v: u32, slot: u32) -> Option<u32> {
        Some(self.0.item(slot))
    }
}

/// Scanned deliveries the search for a *shortest* cycle may spend (one breadth-first search per
/// message on a cycle, each linear in the log); past it the shortest cycle found so far is
/// reported as such.
const CYCLE_SEARCH_BUDGET: u64 = 20_000_000;

/// Uniform acyclic order: Tarjan over the consecutive-delivery graph decides it in linear time
/// (a cycle exists iff some component has two messages; no self-loops, as a message appears once
/// per cleaned sequence). When it fails, the cycle reported is a shortest cycle of `<` itself,
/// whose edges may jump over deliveries, so it can be shorter than any consecutive one.
pub(super) fn acyclic_order(ix: &Index, report: &mut DeliveryReport) {
    acyclic_order_within(ix, report, CYCLE_SEARCH_BUDGET);
}

fn acyclic_order_within(ix: &Index, report: &mut DeliveryReport, budget: u64) {
    let edges = ix
        .sequence
        .iter()
        .flat_map(|s| s.windows(2).map(|w| (w[0], w[1])));
    let graph = Consecutive(Rows::build(ix.messages(), edges));
    let comps = scc::components(&graph, 0..ix.messages() as u32);
    let cyclic = comps.cyclic_nodes();
    let Some(&first) = cyclic.first() else {
        return;
    };
    // A cycle is known to exist; find one of the consecutive graph first (linear), so that a
    // cycle is reported even if the search for a shortest one runs out of budget.
    let mut best = consecutive_cycle(ix, &graph, &comps, first);
    let mut shortest = true;
    let mut search = ShortestCycle::new(ix, &comps, budget);
    for &s in &cyclic {
        if best.len() == 2 {
            break; // `<` has no self-loops: 2 is the least possible
        }
        match search.through(s, best.len()) {
            Ok(Some(cycle)) => best = cycle,
            Ok(None) => {}
            Err(OutOfBudget) => {
                shortest = false;
                break;
            }
        }
    }
    report.push(DeliveryViolation::OrderCycle {
        cycle: OrderCycle {
            edges: best
                .iter()
                .map(|&(from, to, p)| OrderEdge {
                    from: ix.message_id(from),
                    to: ix.message_id(to),
                    process: ix.process_no(p),
                })
                .collect(),
        },
        shortest,
    });
}

/// A cycle edge in dense numbers: (from, to, process that delivered `from` before `to`).
type Edge = (u32, u32, u32);

/// A cycle through `s` in the consecutive graph, by breadth-first search inside its component.
fn consecutive_cycle(ix: &Index, graph: &Consecutive, comps: &Components, s: u32) -> Vec<Edge> {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    let mut queue = VecDeque::from([s]);
    while let Some(v) = queue.pop_front() {
        for slot in graph.slots(v) {
            let w = graph.0.item(slot);
            if !comps.same(w, s) {
                continue;
            }
            if w == s {
                let mut path = vec![v];
                while let Some(&u) = parent.get(path.last().expect("non-empty")) {
                    path.push(u);
                }
                path.reverse(); // s … v
                path.push(s);
                return path
                    .windows(2)
                    .map(|w| (w[0], w[1], consecutive_witness(ix, w[0], w[1])))
                    .collect();
            }
            if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("every message of a cyclic component lies on a cycle through it")
}

/// A process that delivered `b` right after `a`.
fn consecutive_witness(ix: &Index, a: u32, b: u32) -> u32 {
    ix.delivered_by
        .row(a)
        .iter()
        .find(|&&(p, at)| ix.sequence[p as usize].get(at as usize + 1) == Some(&b))
        .map(|&(p, _)| p)
        .expect("a consecutive edge has a witness")
}

struct OutOfBudget;

/// Breadth-first searches over `<` itself, one per source, sharing their arrays (stamped with
/// the source, so nothing is cleared between searches).
struct ShortestCycle<'i, 'a> {
    ix: &'i Index<'a>,
    comps: &'i Components,
    seen: Vec<u32>,
    dist: Vec<u32>,
    parent: Vec<(u32, u32)>,
    /// Per process: the earliest index of its sequence already scanned by this search, and the
    /// source it belongs to. The successors of m through p are everything p delivered after m;
    /// once the search has scanned p's sequence from index i on, a later node delivered at
    /// j ≥ i by p adds nothing (its successors through p were found at a distance no larger),
    /// so each sequence is scanned at most once per search: a search is linear in the log.
    scanned_from: Vec<(u32, u32)>,
    queue: VecDeque<u32>,
    spent: u64,
    budget: u64,
}

impl<'i, 'a> ShortestCycle<'i, 'a> {
    fn new(ix: &'i Index<'a>, comps: &'i Components, budget: u64) -> Self {
        ShortestCycle {
            ix,
            comps,
            seen: vec![NONE; ix.messages()],
            dist: vec![0; ix.messages()],
            parent: vec![(NONE, NONE); ix.messages()],
            scanned_from: vec![(NONE, 0); ix.processes()],
            queue: VecDeque::new(),
            spent: 0,
            budget,
        }
    }

    /// A shortest cycle of `<` through `s`, if it is shorter than `bound` edges.
    fn through(&mut self, s: u32, bound: usize) -> Result<Option<Vec<Edge>>, OutOfBudget> {
        let ix = self.ix;
        self.queue.clear();
        self.queue.push_back(s);
        self.seen[s as usize] = s;
        self.dist[s as usize] = 0;
        while let Some(v) = self.queue.pop_front() {
            if self.dist[v as usize] as usize + 1 >= bound {
                return Ok(None); // BFS order: nothing further can close a shorter cycle
            }
            for &(p, at) in ix.delivered_by.row(v) {
                let seq = &ix.sequence[p as usize];
                let end = match self.scanned_from[p as usize] {
                    (src, from) if src == s => from as usize,
                    _ => seq.len(),
                };
                let begin = at as usize + 1;
                if begin >= end {
                    continue;
                }
                self.scanned_from[p as usize] = (s, begin as u32);
                self.spent += (end - begin) as u64;
                if self.spent > self.budget {
                    return Err(OutOfBudget);
                }
                for &w in &seq[begin..end] {
                    if w == s {
                        return Ok(Some(self.path(s, v, p)));
                    }
                    if self.seen[w as usize] != s && self.comps.same(w, s) {
                        self.seen[w as usize] = s;
                        self.dist[w as usize] = self.dist[v as usize] + 1;
                        self.parent[w as usize] = (v, p);
                        self.queue.push_back(w);
                    }
                }
            }
        }
        Ok(None)
    }

    /// The cycle s → … → v -p-> s from the search's parent links.
    fn path(&self, s: u32, v: u32, p: u32) -> Vec<Edge> {
        let mut edges = vec![(v, s, p)];
        let mut node = v;
        while node != s {
            let (from, by) = self.parent[node as usize];
            edges.push((from, node, by));
            node = from;
        }
        edges.reverse();
        edges
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::{Cast, DeliveryLog, Property};

    /// p0 delivers m0 … m(n-1); p1 delivers m(n-1) first, then the rest: every message is on a
    /// cycle, the shortest has two edges (m0 -p0-> m(n-1) -p1-> m0).
    fn rotated(n: u64) -> DeliveryLog {
        let mut log = DeliveryLog::new();
        log.add_group(0, [0, 1]);
        for m in 0..n {
            log.add_cast(Cast::new(m, 0, [0]));
            log.deliver(0, m);
        }
        log.deliver(1, n - 1);
        for m in 0..n - 1 {
            log.deliver(1, m);
        }
        log
    }

    fn cycle_of(log: &DeliveryLog, budget: u64) -> DeliveryViolation {
        let ix = Index::build(log).unwrap();
        let mut report = DeliveryReport::new(None, vec![Property::AcyclicOrder]);
        acyclic_order_within(&ix, &mut report, budget);
        report.violations.pop().expect("a cycle")
    }

    #[test]
    fn a_search_out_of_budget_still_reports_a_real_cycle_and_says_so() {
        let log = rotated(50);
        let DeliveryViolation::OrderCycle { cycle, shortest } = cycle_of(&log, u64::MAX) else {
            panic!("not a cycle")
        };
        assert!(shortest);
        assert_eq!(cycle.to_string(), "m0 -p0-> m49 -p1-> m0");
        let DeliveryViolation::OrderCycle { cycle, shortest } = cycle_of(&log, 10) else {
            panic!("not a cycle")
        };
        assert!(!shortest);
        // The consecutive-graph cycle: all the way round p0's sequence, back through p1.
        assert_eq!(cycle.len(), 50);
        assert!(
            cycle.to_string().starts_with("m0 -p0-> m1 -p0-> m2"),
            "{cycle}"
        );
        assert!(
            cycle.to_string().ends_with("m48 -p0-> m49 -p1-> m0"),
            "{cycle}"
        );
        assert!(cycle.to_string().contains("… 30 more edges …"), "{cycle}");
    }

    #[test]
    fn long_logs_do_not_overflow_the_stack() {
        let log = rotated(100_000);
        let DeliveryViolation::OrderCycle { cycle, shortest } = cycle_of(&log, u64::MAX) else {
            panic!("not a cycle")
        };
        assert!(shortest);
        assert_eq!(cycle.len(), 2);
    }
}
