//! Partitioning optimization, Algorithm 1 lines 11–20: choose the partitioning parameters
//! `P[t]` of every transaction type.
//!
//! # What a choice does
//! An operation of type `t` runs at the instance its first partitioning parameter `P[t][0]`
//! routes to (with several parameters, it is local only when all of them route there: RUBiS's
//! double key, [`PlanClass::LocalGlobal`](ensemble_app::PlanClass)). With no parameter it runs
//! wherever it is received. A conflict conjunction between `o` and a local operation `l` is
//! harmless when it forces `P[o][0]` equal to one of `P[l]`: then both run at one instance
//! (Algorithm 1 line 17). Otherwise `l` is not local (Eliá §3.2: no write conflict with, and no
//! read from, another partition; Gyro Definition 1).
//!
//! # Cost
//! Lexicographic, most important first:
//! 1. the weighted volume of operations that are global: `Σ weight(t)` over global types, plus
//!    `local_global_fraction · weight(t)` over local/global ones (the share of their operations
//!    whose keys disagree). This is what the Conveyor Belt pays for: every global operation waits
//!    for the token, and a conflict only costs when it makes some operation global.
//! 2. Algorithm 1's own cost, `Σ weight(t) + weight(t')` over the conflicts left between
//!    partitions, which also counts conflicts whose types are global anyway;
//! 3. the number of partitioning parameters (fewer: fewer redirections).
//!
//! # What the search costs
//! With `m_t` relevant parameters of type `t` (those some conflict conjunction binds), `t` has
//! `c_t = 1 + m_t + m_t(m_t − 1)` candidate choices (none, one, or an ordered pair; pairs only
//! for types some conflict could make non-local). Types that share no conflict are searched
//! separately, so the search space is `Σ_components Π_{t ∈ component} c_t` rather than
//! `Π_t c_t`: exponential in the size of the largest connected component of the conflict graph.
//! Each node costs `O(conflicts of t)`. The search is depth-first branch and bound, started
//! from a coordinate-descent solution and pruned by a lower bound (the cost already forced by
//! the types assigned so far), so typical applications (tens of types, one or two candidate keys
//! each) explore a few thousand nodes. A node budget bounds the worst case; when it runs out the
//! best plan found so far is used and the report says it is not proven minimal. That never
//! affects soundness: classification is computed exactly for whatever choice is made.

use crate::conflict::{Conflict, ConflictKind};

/// Relative tolerance when comparing costs made of floating-point weights.
const EPS: f64 = 1e-9;

/// One way an operation `other` can break the locality of an operation `victim`: the conjunctions
/// of their conflicts, each as the parameter pairs (of `other`, of `victim`) it forces equal.
#[derive(Clone, Debug)]
pub struct Threat {
    pub victim: usize,
    pub other: usize,
    /// Index of the unordered pair {victim, other} (for Algorithm 1's cost).
    pub pair: usize,
    pub clauses: Vec<Vec<(usize, usize)>>,
}

/// Whether a conjunction between `other` (choice `po`) and `victim` (choice `pv`) can happen
/// across instances.
pub fn active(clause: &[(usize, usize)], po: &[usize], pv: &[usize]) -> bool {
    let Some(k) = po.first() else { return true };
    !pv.iter().any(|kv| clause.contains(&(*k, *kv)))
}

pub fn threat_active(t: &Threat, po: &[usize], pv: &[usize]) -> bool {
    t.clauses.iter().any(|c| active(c, po, pv))
}

/// Derives the threats from the conflicts: a read-from threatens the writer; a write–write
/// threatens both writers. Threats against commutative types are left out (they have no
/// conflicts that matter; see `classify`).
pub fn threats(conflicts: &[Conflict], n: usize, commutative: &[bool]) -> Vec<Threat> {
    let mut out: Vec<Threat> = Vec::new();
    let pair_index = |a: usize, b: usize| a.min(b) * n + a.max(b);
    let mut add = |victim: usize, other: usize, clauses: Vec<Vec<(usize, usize)>>| {
        if commutative[victim] {
            return;
        }
        let pair = pair_index(victim, other);
        match out.iter_mut().find(|t| t.victim == victim && t.other == other) {
            Some(t) => {
                for c in clauses {
                    if !t.clauses.contains(&c) {
                        t.clauses.push(c);
                    }
                }
            }
            None => out.push(Threat { victim, other, pair, clauses }),
        }
    };
    for c in conflicts {
        // Pairs as (parameter of a, parameter of b).
        let ab: Vec<Vec<(usize, usize)>> = c.clauses.iter().map(|cl| cl.equated.clone()).collect();
        let ba: Vec<Vec<(usize, usize)>> = ab.iter().map(|v| v.iter().map(|(x, y)| (*y, *x)).collect()).collect();
        match c.kind {
            // a reads from b: b is the victim, a the other.
            ConflictKind::ReadsFrom => add(c.b, c.a, ab),
            ConflictKind::WriteWrite => {
                add(c.b, c.a, ab.clone());
                add(c.a, c.b, ba);
            }
        }
    }
    for t in &mut out {
        t.clauses.sort();
        t.clauses.dedup();
    }
    out
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// Weighted volume of global operations.
    pub global: f64,
    /// Algorithm 1's cost: Σ weight(t) + weight(t') over conflicts left between partitions.
    pub conflicts: f64,
    /// Number of partitioning parameters.
    pub params: usize,
}

impl Cost {
    fn less(&self, o: &Cost) -> bool {
        let tol = |a: f64, b: f64| EPS * (1.0 + a.abs().max(b.abs()));
        if self.global < o.global - tol(self.global, o.global) {
            return true;
        }
        if self.global > o.global + tol(self.global, o.global) {
            return false;
        }
        if self.conflicts < o.conflicts - tol(self.conflicts, o.conflicts) {
            return true;
        }
        if self.conflicts > o.conflicts + tol(self.conflicts, o.conflicts) {
            return false;
        }
        self.params < o.params
    }

    fn add(&mut self, o: &Cost) {
        self.global += o.global;
        self.conflicts += o.conflicts;
        self.params += o.params;
    }
}

pub struct Problem<'a> {
    pub n: usize,
    pub weights: &'a [f64],
    pub commutative: &'a [bool],
    pub threats: &'a [Threat],
    /// Candidate choices per type.
    pub candidates: Vec<Vec<Vec<usize>>>,
    pub local_global_fraction: f64,
    pub node_budget: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub choice: Vec<Vec<usize>>,
    pub cost: Cost,
    /// Nodes the branch and bound visited.
    pub nodes: u64,
    /// Number of complete choices (Σ over components of Π c_t).
    pub space: f64,
    pub components: usize,
    pub largest_component: usize,
    /// False when the node budget ran out before the search finished.
    pub proven_minimal: bool,
}

/// The candidate choices of each type: none, each parameter some conjunction binds, and ordered
/// pairs of those when some conflict could make the type non-local (a pair helps only a victim).
pub fn candidates(n: usize, params: &[usize], threats: &[Threat]) -> Vec<Vec<Vec<usize>>> {
    let mut relevant: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut victim = vec![false; n];
    for t in threats {
        victim[t.victim] = true;
        for c in &t.clauses {
            for (o, v) in c {
                relevant[t.other].push(*o);
                relevant[t.victim].push(*v);
            }
        }
    }
    (0..n)
        .map(|t| {
            let mut r = relevant[t].clone();
            r.sort();
            r.dedup();
            r.retain(|p| *p < params[t]);
            let mut c: Vec<Vec<usize>> = r.iter().map(|p| vec![*p]).collect();
            c.push(vec![]);
            if victim[t] {
                for a in &r {
                    for b in &r {
                        if a != b {
                            c.push(vec![*a, *b]);
                        }
                    }
                }
            }
            c
        })
        .collect()
}

struct Component {
    members: Vec<usize>,
    threats: Vec<usize>,
}

fn components(p: &Problem) -> Vec<Component> {
    let mut parent: Vec<usize> = (0..p.n).collect();
    fn find(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for t in p.threats {
        let (a, b) = (find(&mut parent, t.victim), find(&mut parent, t.other));
        parent[a] = b;
    }
    let mut comps: Vec<Component> = Vec::new();
    let mut root_of: Vec<Option<usize>> = vec![None; p.n];
    for t in 0..p.n {
        let r = find(&mut parent, t);
        let ci = match root_of[r] {
            Some(ci) => ci,
            None => {
                comps.push(Component { members: Vec::new(), threats: Vec::new() });
                root_of[r] = Some(comps.len() - 1);
                comps.len() - 1
            }
        };
        comps[ci].members.push(t);
    }
    for (h, t) in p.threats.iter().enumerate() {
        let r = find(&mut parent, t.victim);
        if let Some(ci) = root_of[r] {
            comps[ci].threats.push(h);
        }
    }
    comps
}

/// The cost of a complete choice restricted to one component.
fn evaluate(p: &Problem, comp: &Component, choice: &[Vec<usize>]) -> Cost {
    let mut global = vec![false; p.n];
    let mut pairs: Vec<usize> = Vec::new();
    for h in &comp.threats {
        let t = &p.threats[*h];
        if threat_active(t, &choice[t.other], &choice[t.victim]) {
            global[t.victim] = true;
            if !pairs.contains(&t.pair) {
                pairs.push(t.pair);
            }
        }
    }
    let mut cost = Cost::default();
    for &t in &comp.members {
        cost.params += choice[t].len();
        if p.commutative[t] {
            continue;
        }
        if global[t] {
            cost.global += p.weights[t];
        } else if choice[t].len() >= 2 {
            cost.global += p.local_global_fraction * p.weights[t];
        }
    }
    for pair in pairs {
        let (a, b) = (pair / p.n, pair % p.n);
        cost.conflicts += p.weights[a] + p.weights[b];
    }
    cost
}

pub fn search(p: &Problem) -> Outcome {
    let mut choice: Vec<Vec<usize>> = vec![Vec::new(); p.n];
    let comps = components(p);
    let mut total = Cost::default();
    let mut nodes = 0u64;
    let mut proven = true;
    let mut space = 0f64;
    let mut largest = 0;
    for comp in &comps {
        largest = largest.max(comp.members.len());
        space += comp.members.iter().map(|t| p.candidates[*t].len() as f64).product::<f64>();
        let (cost, n, done) = search_component(p, comp, &mut choice);
        total.add(&cost);
        nodes += n;
        proven &= done;
    }
    Outcome { choice, cost: total, nodes, space, components: comps.len(), largest_component: largest, proven_minimal: proven }
}

/// Greedy coordinate descent, then branch and bound. Writes the best choice into `choice`.
fn search_component(p: &Problem, comp: &Component, choice: &mut [Vec<usize>]) -> (Cost, u64, bool) {
    for &t in &comp.members {
        choice[t] = p.candidates[t][0].clone();
    }
    let mut best = evaluate(p, comp, choice);
    // Coordinate descent: a good incumbent makes the bound prune early.
    for _round in 0..16 {
        let mut improved = false;
        for &t in &comp.members {
            for c in &p.candidates[t] {
                let old = std::mem::replace(&mut choice[t], c.clone());
                let cost = evaluate(p, comp, choice);
                if cost.less(&best) {
                    best = cost;
                    improved = true;
                } else {
                    choice[t] = old;
                }
            }
        }
        if !improved {
            break;
        }
    }
    if comp.members.len() == 1 && p.candidates[comp.members[0]].len() <= 1 {
        return (best, 1, true);
    }
    // Most-constrained first: the bound tightens sooner.
    let mut order = comp.members.clone();
    let degree = |t: usize| comp.threats.iter().filter(|h| p.threats[**h].victim == t || p.threats[**h].other == t).count();
    order.sort_by_key(|t| std::cmp::Reverse(degree(*t)));
    let mut bb = BranchAndBound {
        p,
        order: &order,
        position: vec![usize::MAX; p.n],
        by_type: (0..p.n).map(|t| comp.threats.iter().copied().filter(|h| p.threats[*h].victim == t || p.threats[*h].other == t).collect()).collect(),
        current: vec![Vec::new(); p.n],
        active_against: vec![0; p.n],
        pair_active: vec![0; p.n * p.n],
        bound: Cost::default(),
        best,
        best_choice: comp.members.iter().map(|t| (*t, choice[*t].clone())).collect(),
        nodes: 0,
        exhausted: false,
    };
    for (i, t) in order.iter().enumerate() {
        bb.position[*t] = i;
    }
    bb.dfs(0);
    for (t, c) in &bb.best_choice {
        choice[*t] = c.clone();
    }
    (bb.best, bb.nodes, !bb.exhausted)
}

struct BranchAndBound<'a> {
    p: &'a Problem<'a>,
    order: &'a [usize],
    position: Vec<usize>,
    by_type: Vec<Vec<usize>>,
    current: Vec<Vec<usize>>,
    /// Active threats against each type among assigned pairs.
    active_against: Vec<u32>,
    pair_active: Vec<u32>,
    /// Cost already forced by the assigned types: a lower bound for every completion.
    bound: Cost,
    best: Cost,
    best_choice: Vec<(usize, Vec<usize>)>,
    nodes: u64,
    exhausted: bool,
}

impl BranchAndBound<'_> {
    /// What type `t` adds to the bound once the first `depth + 1` types of the order are assigned.
    fn contribution(&self, t: usize, depth: usize) -> f64 {
        if self.p.commutative[t] || self.position[t] > depth {
            return 0.0;
        }
        if self.active_against[t] > 0 {
            self.p.weights[t]
        } else if self.current[t].len() >= 2 {
            self.p.local_global_fraction * self.p.weights[t]
        } else {
            0.0
        }
    }

    fn pair_weight(&self, pair: usize) -> f64 {
        self.p.weights[pair / self.p.n] + self.p.weights[pair % self.p.n]
    }

    fn dfs(&mut self, depth: usize) {
        if self.exhausted {
            return;
        }
        if depth == self.order.len() {
            if self.bound.less(&self.best) {
                self.best = self.bound;
                self.best_choice = self.order.iter().map(|t| (*t, self.current[*t].clone())).collect();
            }
            return;
        }
        let t = self.order[depth];
        let cands = self.p.candidates[t].clone();
        for c in cands {
            self.nodes += 1;
            if self.nodes > self.p.node_budget {
                self.exhausted = true;
                return;
            }
            let saved_bound = self.bound;
            let mut touched: Vec<usize> = Vec::new();
            let mut pairs_touched: Vec<usize> = Vec::new();
            self.current[t] = c.clone();
            self.bound.params += c.len();
            // t is assigned at `depth`; threats whose other end is assigned earlier (or t itself)
            // are decided now.
            let mut newly: Vec<usize> = Vec::new();
            for &h in &self.by_type[t] {
                let th = &self.p.threats[h];
                let other_end = if th.victim == t { th.other } else { th.victim };
                if self.position[other_end] > depth {
                    continue;
                }
                if threat_active(th, &self.current[th.other], &self.current[th.victim]) {
                    newly.push(h);
                }
            }
            let mut before: Vec<(usize, f64)> = Vec::new();
            let affected: Vec<usize> = std::iter::once(t).chain(newly.iter().map(|h| self.p.threats[*h].victim)).collect();
            for &v in &affected {
                if !before.iter().any(|(x, _)| *x == v) {
                    before.push((v, if v == t { 0.0 } else { self.contribution(v, depth) }));
                }
            }
            for &h in &newly {
                let th = &self.p.threats[h];
                self.active_against[th.victim] += 1;
                touched.push(th.victim);
                if self.pair_active[th.pair] == 0 {
                    self.bound.conflicts += self.pair_weight(th.pair);
                }
                self.pair_active[th.pair] += 1;
                pairs_touched.push(th.pair);
            }
            for (v, old) in &before {
                self.bound.global += self.contribution(*v, depth) - old;
            }
            if self.bound.less(&self.best) {
                self.dfs(depth + 1);
            }
            for v in touched {
                self.active_against[v] -= 1;
            }
            for pr in pairs_touched {
                self.pair_active[pr] -= 1;
            }
            self.bound = saved_bound;
            self.current[t] = Vec::new();
            if self.exhausted {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force over every complete choice, to check the branch and bound against.
    fn brute(p: &Problem) -> Cost {
        let comp = Component { members: (0..p.n).collect(), threats: (0..p.threats.len()).collect() };
        let mut best: Option<Cost> = None;
        let mut idx = vec![0usize; p.n];
        loop {
            let choice: Vec<Vec<usize>> = (0..p.n).map(|t| p.candidates[t][idx[t]].clone()).collect();
            let c = evaluate(p, &comp, &choice);
            if best.as_ref().is_none_or(|b| c.less(b)) {
                best = Some(c);
            }
            let mut i = 0;
            loop {
                if i == p.n {
                    return best.unwrap_or_default();
                }
                idx[i] += 1;
                if idx[i] < p.candidates[i].len() {
                    break;
                }
                idx[i] = 0;
                i += 1;
            }
        }
    }

    #[test]
    fn branch_and_bound_matches_brute_force_on_random_problems() {
        // A small deterministic generator; no dependency needed.
        let mut s = 0x9e3779b97f4a7c15u64;
        let mut next = move |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        for _case in 0..200 {
            let n = 2 + next(4) as usize;
            let params: Vec<usize> = (0..n).map(|_| 1 + next(3) as usize).collect();
            let mut threats = Vec::new();
            for _ in 0..(1 + next(8)) {
                let victim = next(n as u64) as usize;
                let other = next(n as u64) as usize;
                let clauses = (0..(1 + next(2)))
                    .map(|_| {
                        (0..next(3)).map(|_| (next(params[other] as u64) as usize, next(params[victim] as u64) as usize)).collect()
                    })
                    .collect();
                threats.push(Threat { victim, other, pair: victim.min(other) * n + victim.max(other), clauses });
            }
            let weights: Vec<f64> = (0..n).map(|_| 1.0 + next(3) as f64).collect();
            let commutative = vec![false; n];
            let cands = candidates(n, &params, &threats);
            let p = Problem {
                n,
                weights: &weights,
                commutative: &commutative,
                threats: &threats,
                candidates: cands,
                local_global_fraction: 0.5,
                node_budget: u64::MAX,
            };
            let got = search(&p);
            let want = brute(&p);
            assert!(!got.cost.less(&want) && !want.less(&got.cost), "bb {:?} brute {:?}", got.cost, want);
            assert!(got.proven_minimal);
        }
    }
}
