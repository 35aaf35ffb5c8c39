//! Searching the dependency graph for the cycles a criterion forbids, and for a shortest one.
//!
//! Each criterion forbids the cycles a small automaton over edge kinds accepts ([`Rule`]):
//! any cycle (SER), cycles without two consecutive anti-dependencies (SI), cycles with at most
//! one anti-dependency (PSI, NMSI). Deciding whether such a cycle exists is exact and cheap
//! (strongly connected components, of the graph or of its product with the automaton, plus
//! pruned reachability for "at most one"); finding a shortest one is a breadth-first search
//! over the product from every node that lies on a cycle, each bounded by the best length so
//! far. That search is quadratic in the worst case, so it has a budget of edge visits: when it
//! runs out, the shortest cycle found so far is reported and marked as such.

use crate::graph::{Analysis, Graph};
use crate::report::{Cycle, CycleEdge, EdgeKind};
use crate::scc::{self, Components, Digraph, NONE};
use std::ops::Range;

/// Edge visits the shortest-cycle refinement may spend per check (a few tenths of a second).
const REFINE_BUDGET: u64 = 100_000_000;

/// A set of edge kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KindSet(u8);

impl KindSet {
    pub(crate) const ALL: KindSet = KindSet(0b1111);

    pub(crate) fn of(kinds: &[EdgeKind]) -> KindSet {
        KindSet(kinds.iter().fold(0, |acc, &k| acc | 1 << k as u8))
    }

    pub(crate) fn has(self, kind: EdgeKind) -> bool {
        self.0 & (1 << kind as u8) != 0
    }

    pub(crate) fn without(self, kind: EdgeKind) -> KindSet {
        KindSet(self.0 & !(1 << kind as u8))
    }
}

/// Which cycles are forbidden, over which edge kinds. The automaton reads a cycle's edges from
/// a chosen first edge; a cycle is forbidden when some rotation of it is read to the end.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Rule {
    /// Every cycle.
    Any(KindSet),
    /// Cycles in which no two consecutive edges (cyclically) are both rw: the cycles of
    /// `(D ; RW?)` with D the non-rw kinds. Read from a non-rw edge; state 1 = the last edge
    /// was rw.
    NoAdjacentRw(KindSet),
    /// Cycles with at most one rw edge: the cycles of `D+ ; RW?`. State = rw edges so far.
    AtMostOneRw(KindSet),
}

impl Rule {
    fn kinds(self) -> KindSet {
        match self {
            Rule::Any(k) | Rule::NoAdjacentRw(k) | Rule::AtMostOneRw(k) => k,
        }
    }

    fn states(self) -> u32 {
        match self {
            Rule::Any(_) => 1,
            Rule::NoAdjacentRw(_) | Rule::AtMostOneRw(_) => 2,
        }
    }

    /// The state after reading `kind` as a cycle's first edge.
    fn first(self, kind: EdgeKind) -> Option<u8> {
        if !self.kinds().has(kind) {
            return None;
        }
        match self {
            Rule::Any(_) => Some(0),
            // Every cycle of (D ; RW?) has a D edge; start there.
            Rule::NoAdjacentRw(_) => (kind != EdgeKind::Rw).then_some(0),
            Rule::AtMostOneRw(_) => Some(u8::from(kind == EdgeKind::Rw)),
        }
    }

    /// The state after reading `kind` in `state`.
    fn next(self, state: u8, kind: EdgeKind) -> Option<u8> {
        if !self.kinds().has(kind) {
            return None;
        }
        match self {
            Rule::Any(_) => Some(0),
            Rule::NoAdjacentRw(_) => match (state, kind) {
                (1, EdgeKind::Rw) => None,
                (_, EdgeKind::Rw) => Some(1),
                _ => Some(0),
            },
            Rule::AtMostOneRw(_) => match (state, kind) {
                (1, EdgeKind::Rw) => None,
                (_, EdgeKind::Rw) => Some(1),
                (s, _) => Some(s),
            },
        }
    }

    /// Whether a whole cycle with these edge kinds is forbidden.
    fn accepts(self, kinds: &[EdgeKind]) -> bool {
        if kinds.is_empty() || !kinds.iter().all(|&k| self.kinds().has(k)) {
            return false;
        }
        let rw = |i: usize| kinds[i % kinds.len()] == EdgeKind::Rw;
        match self {
            Rule::Any(_) => true,
            Rule::NoAdjacentRw(_) => (0..kinds.len()).all(|i| !(rw(i) && rw(i + 1))),
            Rule::AtMostOneRw(_) => (0..kinds.len()).filter(|&i| rw(i)).count() <= 1,
        }
    }
}

/// The graph restricted to some edge kinds and to edges `keep` allows.
pub(crate) struct View<'a, F> {
    pub(crate) g: &'a Graph,
    pub(crate) kinds: KindSet,
    pub(crate) keep: F,
}

impl<F: Fn(u32, u32) -> bool> Digraph for View<'_, F> {
    fn node_count(&self) -> usize {
        self.g.node_count()
    }
    fn slots(&self, v: u32) -> Range<u32> {
        self.g.edges(v)
    }
    fn target(&self, v: u32, slot: u32) -> Option<u32> {
        let t = self.g.target(slot);
        (self.kinds.has(self.g.kind(slot)) && (self.keep)(v, t)).then_some(t)
    }
}

/// The product of the graph with a rule's automaton: node `v * states + s`. Its cycles are the
/// graph's cycles the automaton can read forever, which for [`Rule::NoAdjacentRw`] are exactly
/// the forbidden ones.
struct Product<'a, F> {
    g: &'a Graph,
    rule: Rule,
    keep: F,
}

impl<F: Fn(u32, u32) -> bool> Digraph for Product<'_, F> {
    fn node_count(&self) -> usize {
        self.g.node_count() * self.rule.states() as usize
    }
    fn slots(&self, p: u32) -> Range<u32> {
        self.g.edges(p / self.rule.states())
    }
    fn target(&self, p: u32, slot: u32) -> Option<u32> {
        let (v, s) = (p / self.rule.states(), (p % self.rule.states()) as u8);
        let t = self.g.target(slot);
        if !(self.keep)(v, t) {
            return None;
        }
        self.rule
            .next(s, self.g.kind(slot))
            .map(|s2| t * self.rule.states() + u32::from(s2))
    }
}

/// A cycle as edge slots, the first leaving `start`.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub(crate) start: u32,
    pub(crate) slots: Vec<u32>,
}

impl Found {
    fn len(&self) -> usize {
        self.slots.len()
    }

    /// The nodes the cycle leaves, in order.
    fn nodes(&self, g: &Graph) -> Vec<u32> {
        let mut nodes = vec![self.start];
        for &slot in &self.slots[..self.slots.len() - 1] {
            nodes.push(g.target(slot));
        }
        nodes
    }

    /// Splits the cycle at repeated nodes until it is simple, keeping a forbidden piece each
    /// time. For the rules here one piece always is: splitting a walk in two can only join an
    /// edge to a neighbour it already had on one side.
    fn simplify(mut self, g: &Graph, rule: Rule) -> Found {
        loop {
            let nodes = self.nodes(g);
            let mut first_seen = crate::hash::FastMap::default();
            let Some((i, j)) = nodes
                .iter()
                .enumerate()
                .find_map(|(j, &v)| first_seen.insert(v, j).map(|i| (i, j)))
            else {
                return self;
            };
            let inner = Found {
                start: nodes[i],
                slots: self.slots[i..j].to_vec(),
            };
            let outer_slots: Vec<u32> = self.slots[j..]
                .iter()
                .chain(&self.slots[..i])
                .copied()
                .collect();
            let outer = Found {
                start: nodes[j],
                slots: outer_slots,
            };
            let kinds = |f: &Found| f.slots.iter().map(|&s| g.kind(s)).collect::<Vec<_>>();
            self = if rule.accepts(&kinds(&inner)) {
                inner
            } else if rule.accepts(&kinds(&outer)) {
                outer
            } else {
                return self;
            };
        }
    }

    pub(crate) fn to_cycle(&self, a: &Analysis) -> Cycle {
        let g = &a.graph;
        let nodes = self.nodes(g);
        let edges = self
            .slots
            .iter()
            .zip(nodes)
            .map(|(&slot, from)| {
                let kind = g.kind(slot);
                CycleEdge {
                    from: a.id(from),
                    to: a.id(g.target(slot)),
                    kind,
                    key: (kind != EdgeKind::So).then(|| a.history.key_name(g.key(slot)).to_owned()),
                }
            })
            .collect();
        Cycle { edges }
    }
}

/// Breadth-first search over the product of the graph and a rule, from one start node back to
/// it. Scratch arrays are reused between starts (a stamp marks what this search visited).
struct Search<'a, F> {
    g: &'a Graph,
    rule: Rule,
    keep: F,
    stamp: Vec<u32>,
    parent_node: Vec<u32>,
    parent_slot: Vec<u32>,
    current: u32,
    budget: u64,
    exhausted: bool,
}

impl<'a, F: Fn(u32, u32) -> bool> Search<'a, F> {
    fn new(g: &'a Graph, rule: Rule, keep: F, budget: u64) -> Self {
        let n = g.node_count() * rule.states() as usize;
        Search {
            g,
            rule,
            keep,
            stamp: vec![0; n],
            parent_node: vec![NONE; n],
            parent_slot: vec![NONE; n],
            current: 0,
            budget,
            exhausted: false,
        }
    }

    /// A shortest forbidden cycle whose first edge leaves `start`, of at most `max_len` edges.
    fn shortest_from(&mut self, start: u32, max_len: usize) -> Option<Found> {
        let states = self.rule.states();
        self.current += 1;
        let mut frontier: Vec<u32> = Vec::new();
        let mut next: Vec<u32> = Vec::new();
        let visit = |this: &mut Self, from: u32, slot: u32, s: u8, frontier: &mut Vec<u32>| {
            let p = this.g.target(slot) * states + u32::from(s);
            if this.stamp[p as usize] != this.current {
                this.stamp[p as usize] = this.current;
                this.parent_node[p as usize] = from;
                this.parent_slot[p as usize] = slot;
                frontier.push(p);
            }
        };
        for slot in self.g.edges(start) {
            let t = self.g.target(slot);
            if let (true, Some(s)) = ((self.keep)(start, t), self.rule.first(self.g.kind(slot))) {
                visit(self, NONE, slot, s, &mut frontier);
            }
        }
        let mut depth = 1;
        while !frontier.is_empty() && depth < max_len {
            for &p in &frontier {
                let (v, s) = (p / states, (p % states) as u8);
                for slot in self.g.edges(v) {
                    if self.budget == 0 {
                        self.exhausted = true;
                        return None;
                    }
                    self.budget -= 1;
                    let t = self.g.target(slot);
                    if !(self.keep)(v, t) {
                        continue;
                    }
                    let Some(s2) = self.rule.next(s, self.g.kind(slot)) else {
                        continue;
                    };
                    if t == start {
                        return Some(self.path_to(start, p, slot));
                    }
                    visit(self, p, slot, s2, &mut next);
                }
            }
            std::mem::swap(&mut frontier, &mut next);
            next.clear();
            depth += 1;
        }
        None
    }

    fn path_to(&self, start: u32, mut p: u32, closing: u32) -> Found {
        let mut slots = vec![closing];
        while p != NONE {
            slots.push(self.parent_slot[p as usize]);
            p = self.parent_node[p as usize];
        }
        slots.reverse();
        Found { start, slots }
    }
}

/// The outcome of a search for forbidden cycles.
pub(crate) struct Outcome {
    pub(crate) found: Found,
    /// False when the refinement ran out of budget before proving the cycle shortest.
    pub(crate) shortest: bool,
}

/// Finds a shortest cycle `rule` forbids among the nodes `node_ok` admits, or proves there is
/// none. Only nodes on cycles of the whole graph are searched, and only edges inside one of its
/// components.
pub(crate) fn find(
    a: &Analysis,
    rule: Rule,
    node_ok: impl Fn(u32) -> bool + Copy,
) -> Option<Outcome> {
    let full = &a.full;
    let candidates: Vec<u32> = full
        .cyclic_nodes()
        .into_iter()
        .filter(|&v| node_ok(v))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let keep = |v: u32, t: u32| full.same(v, t) && node_ok(t);
    let g = &a.graph;
    let mut search = Search::new(g, rule, keep, u64::MAX);

    let witness = match rule {
        Rule::Any(kinds) => {
            let comps = scc::components(&View { g, kinds, keep }, candidates.iter().copied());
            let v = candidates.iter().copied().find(|&v| comps.on_cycle(v))?;
            search.shortest_from(v, usize::MAX)
        }
        Rule::NoAdjacentRw(_) => {
            let product = Product { g, rule, keep };
            let roots = candidates.iter().flat_map(|&v| [v * 2, v * 2 + 1]);
            let comps = scc::components(&product, roots);
            // The state only remembers whether the last edge was rw, so a product cycle
            // through (v, 1) leaves v by a non-rw edge and returns by an rw one: the search from
            // v, which must start with a non-rw edge, finds it. A product cycle that never
            // visits state 1 has no rw edge, and the search from any of its nodes finds it.
            // Trying (v, 1) nodes first therefore succeeds at the first try.
            let mut on_cycle: Vec<(bool, u32)> = candidates
                .iter()
                .filter(|&&v| comps.on_cycle(2 * v) || comps.on_cycle(2 * v + 1))
                .map(|&v| (!comps.on_cycle(2 * v + 1), v))
                .collect();
            on_cycle.sort_unstable();
            on_cycle
                .iter()
                .find_map(|&(_, v)| search.shortest_from(v, usize::MAX))
        }
        Rule::AtMostOneRw(kinds) => {
            at_most_one_rw_witness(a, kinds, keep, &candidates, &mut search)
        }
    }?;

    // Refinement: from every candidate, look for a shorter cycle than the best so far.
    let mut best = witness;
    search.budget = REFINE_BUDGET;
    for &v in &candidates {
        if best.len() <= 2 || search.exhausted {
            break;
        }
        if let Some(shorter) = search.shortest_from(v, best.len() - 1) {
            best = shorter;
        }
    }
    let shortest = !search.exhausted;
    Some(Outcome {
        found: best.simplify(g, rule),
        shortest,
    })
}

/// Existence for "at most one rw edge": a cycle of D alone, or an rw edge `b -> a` with a path
/// of D edges from `a` back to `b`. With D acyclic, a path `a ~> b` puts `a` before `b` in
/// every topological order of D; two different orders (Tarjan from the roots in two orders)
/// rule out most rw edges at once, and the rest get a breadth-first search confined to nodes
/// that both orders place between `a` and `b`.
fn at_most_one_rw_witness<F: Fn(u32, u32) -> bool + Copy>(
    a: &Analysis,
    kinds: KindSet,
    keep: F,
    candidates: &[u32],
    search: &mut Search<'_, F>,
) -> Option<Found> {
    let g = &a.graph;
    let d = View {
        g,
        kinds: kinds.without(EdgeKind::Rw),
        keep,
    };
    let forward = scc::components(&d, candidates.iter().copied());
    if let Some(v) = candidates.iter().copied().find(|&v| forward.on_cycle(v)) {
        return search.shortest_from(v, usize::MAX);
    }
    if !kinds.has(EdgeKind::Rw) {
        return None;
    }
    // Tarjan numbers components in reverse topological order: u ~> v implies comp[u] > comp[v].
    let backward = scc::components(&d, candidates.iter().rev().copied());
    let may_reach =
        |c: &Components, from: u32, to: u32| c.comp[from as usize] >= c.comp[to as usize];
    let mut reach = Reach::new(g.node_count());
    for &b in candidates {
        for slot in g.edges(b) {
            let t = g.target(slot);
            if g.kind(slot) != EdgeKind::Rw || !keep(b, t) {
                continue;
            }
            if !(may_reach(&forward, t, b) && may_reach(&backward, t, b)) {
                continue;
            }
            let follow = |v: u32, s: u32, x: u32| {
                d.kinds.has(g.kind(s))
                    && keep(v, x)
                    && may_reach(&forward, x, b)
                    && may_reach(&backward, x, b)
            };
            if let Some((_, path, _)) = reach.shortest(g, [t], |x| x == b, follow, usize::MAX) {
                let mut slots = vec![slot];
                slots.extend(path);
                return Some(Found { start: b, slots });
            }
        }
    }
    None
}

/// Multi-source breadth-first search for a shortest path, reusing its scratch arrays.
pub(crate) struct Reach {
    stamp: Vec<u32>,
    parent_node: Vec<u32>,
    parent_slot: Vec<u32>,
    current: u32,
}

impl Reach {
    pub(crate) fn new(n: usize) -> Self {
        Reach {
            stamp: vec![0; n],
            parent_node: vec![NONE; n],
            parent_slot: vec![NONE; n],
            current: 0,
        }
    }

    /// A shortest path (edge slots) from one of `sources` to a node `is_target` accepts, taking
    /// edges `follow(from, slot, to)` allows and at most `max_len` of them. Returns the source,
    /// the path and the target; a source that is a target gives an empty path.
    pub(crate) fn shortest(
        &mut self,
        g: &Graph,
        sources: impl IntoIterator<Item = u32>,
        is_target: impl Fn(u32) -> bool,
        follow: impl Fn(u32, u32, u32) -> bool,
        max_len: usize,
    ) -> Option<(u32, Vec<u32>, u32)> {
        self.current += 1;
        let mut frontier = Vec::new();
        for s in sources {
            if self.stamp[s as usize] != self.current {
                self.stamp[s as usize] = self.current;
                self.parent_node[s as usize] = NONE;
                frontier.push(s);
            }
        }
        let mut next = Vec::new();
        let mut depth = 0;
        loop {
            for &v in &frontier {
                if is_target(v) {
                    return Some(self.path_to(v));
                }
            }
            if frontier.is_empty() || depth >= max_len {
                return None;
            }
            for &v in &frontier {
                for slot in g.edges(v) {
                    let t = g.target(slot);
                    if self.stamp[t as usize] == self.current || !follow(v, slot, t) {
                        continue;
                    }
                    self.stamp[t as usize] = self.current;
                    self.parent_node[t as usize] = v;
                    self.parent_slot[t as usize] = slot;
                    next.push(t);
                }
            }
            std::mem::swap(&mut frontier, &mut next);
            next.clear();
            depth += 1;
        }
    }

    fn path_to(&self, end: u32) -> (u32, Vec<u32>, u32) {
        let mut slots = Vec::new();
        let mut v = end;
        while self.parent_node[v as usize] != NONE {
            slots.push(self.parent_slot[v as usize]);
            v = self.parent_node[v as usize];
        }
        slots.reverse();
        (v, slots, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EdgeKind::*;

    #[test]
    fn rules_accept_the_cycles_their_criteria_forbid() {
        let si = Rule::NoAdjacentRw(KindSet::ALL);
        let psi = Rule::AtMostOneRw(KindSet::ALL);
        let write_skew = [Rw, Rw];
        let long_fork = [Wr, Rw, Wr, Rw];
        let lost_update = [Rw, Ww];
        assert!(!si.accepts(&write_skew) && !psi.accepts(&write_skew));
        assert!(si.accepts(&long_fork) && !psi.accepts(&long_fork));
        assert!(si.accepts(&lost_update) && psi.accepts(&lost_update));
        // Adjacency wraps around: the last rw is followed by the first.
        assert!(!si.accepts(&[Rw, Wr, Rw]));
        let rc = Rule::Any(KindSet::of(&[Ww, Wr]));
        assert!(rc.accepts(&[Ww, Wr]) && !rc.accepts(&[Ww, Rw]));
        let nmsi = Rule::AtMostOneRw(KindSet::of(&[Ww, Wr, Rw]));
        assert!(!nmsi.accepts(&[So, Rw]));
    }

    #[test]
    fn the_automata_read_exactly_the_accepted_cycles() {
        // Every kind sequence up to length 5: some rotation is read by first/next iff accepts.
        let kinds = [Ww, Wr, Rw, So];
        let rules = [
            Rule::Any(KindSet::ALL),
            Rule::Any(KindSet::of(&[Ww, Wr])),
            Rule::NoAdjacentRw(KindSet::ALL),
            Rule::AtMostOneRw(KindSet::ALL),
            Rule::AtMostOneRw(KindSet::of(&[Ww, Wr, Rw])),
        ];
        for len in 2..=5u32 {
            for code in 0..4usize.pow(len) {
                let seq: Vec<EdgeKind> =
                    (0..len).map(|i| kinds[code / 4usize.pow(i) % 4]).collect();
                for rule in rules {
                    let read = (0..seq.len()).any(|r| {
                        let rot: Vec<EdgeKind> =
                            seq[r..].iter().chain(&seq[..r]).copied().collect();
                        let mut state = rule.first(rot[0]);
                        for &k in &rot[1..] {
                            state = state.and_then(|s| rule.next(s, k));
                        }
                        state.is_some()
                    });
                    assert_eq!(read, rule.accepts(&seq), "{rule:?} on {seq:?}");
                }
            }
        }
    }
}
