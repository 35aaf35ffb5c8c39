//! Strongly connected components (Tarjan), iteratively, over any view of a graph.
//!
//! Every cycle lies inside one strongly connected component, so the checker first finds the
//! components and then searches for forbidden cycles only inside the non-trivial ones. A
//! recorded run is mostly acyclic: this pass is usually the whole of the cycle work. The DFS
//! keeps its own stack because a history of 10^6 transactions makes paths far deeper than the
//! thread's stack.

use std::ops::Range;

pub(crate) const NONE: u32 = u32::MAX;

/// A directed graph as the searches see it: each node has a range of edge slots, and a slot has
/// a target unless the view hides it (an edge kind the criterion ignores, a node outside the
/// part being searched, a product state the automaton forbids).
pub(crate) trait Digraph {
    fn node_count(&self) -> usize;
    fn slots(&self, v: u32) -> Range<u32>;
    fn target(&self, v: u32, slot: u32) -> Option<u32>;
}

/// The components of the nodes reached from the roots. `comp[v]` is `NONE` for nodes never
/// reached. Components are numbered in the order Tarjan completes them, which is a reverse
/// topological order of the condensation.
pub(crate) struct Components {
    pub(crate) comp: Vec<u32>,
    pub(crate) size: Vec<u32>,
}

impl Components {
    /// True when `v` lies on some cycle of the view.
    pub(crate) fn on_cycle(&self, v: u32) -> bool {
        let c = self.comp[v as usize];
        c != NONE && self.size[c as usize] > 1
    }

    #[cfg(test)]
    pub(crate) fn has_cycle(&self) -> bool {
        self.size.iter().any(|&s| s > 1)
    }

    /// The nodes that lie on some cycle, in increasing order.
    pub(crate) fn cyclic_nodes(&self) -> Vec<u32> {
        (0..self.comp.len() as u32)
            .filter(|&v| self.on_cycle(v))
            .collect()
    }

    pub(crate) fn same(&self, a: u32, b: u32) -> bool {
        self.comp[a as usize] == self.comp[b as usize]
    }
}

/// Tarjan's algorithm from each root in turn. Views never contain self-loops (a transaction
/// does not depend on itself), so a component is cyclic exactly when it has two or more nodes.
pub(crate) fn components(g: &impl Digraph, roots: impl IntoIterator<Item = u32>) -> Components {
    let n = g.node_count();
    let mut index = vec![NONE; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut comp = vec![NONE; n];
    let mut size: Vec<u32> = Vec::new();
    let mut stack: Vec<u32> = Vec::new();
    // Call stack: (node, next slot to look at, end of its slots).
    let mut calls: Vec<(u32, u32, u32)> = Vec::new();
    let mut counter = 0u32;

    for root in roots {
        if index[root as usize] != NONE {
            continue;
        }
        let enter = |v: u32,
                     index: &mut [u32],
                     low: &mut [u32],
                     on_stack: &mut [bool],
                     counter: &mut u32| {
            index[v as usize] = *counter;
            low[v as usize] = *counter;
            *counter += 1;
            on_stack[v as usize] = true;
        };
        enter(root, &mut index, &mut low, &mut on_stack, &mut counter);
        stack.push(root);
        let r = g.slots(root);
        calls.push((root, r.start, r.end));

        while let Some(&mut (v, ref mut next, end)) = calls.last_mut() {
            if *next < end {
                let slot = *next;
                *next += 1;
                let Some(t) = g.target(v, slot) else { continue };
                if index[t as usize] == NONE {
                    enter(t, &mut index, &mut low, &mut on_stack, &mut counter);
                    stack.push(t);
                    let r = g.slots(t);
                    calls.push((t, r.start, r.end));
                } else if on_stack[t as usize] {
                    low[v as usize] = low[v as usize].min(index[t as usize]);
                }
                continue;
            }
            calls.pop();
            if low[v as usize] == index[v as usize] {
                let id = size.len() as u32;
                let mut members = 0;
                loop {
                    let w = stack.pop().expect("the component's nodes are on the stack");
                    on_stack[w as usize] = false;
                    comp[w as usize] = id;
                    members += 1;
                    if w == v {
                        break;
                    }
                }
                size.push(members);
            }
            if let Some(&(parent, _, _)) = calls.last() {
                low[parent as usize] = low[parent as usize].min(low[v as usize]);
            }
        }
    }
    Components { comp, size }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An adjacency-list graph for tests.
    pub(crate) struct Adj(pub(crate) Vec<Vec<u32>>);

    impl Digraph for Adj {
        fn node_count(&self) -> usize {
            self.0.len()
        }
        fn slots(&self, v: u32) -> Range<u32> {
            0..self.0[v as usize].len() as u32
        }
        fn target(&self, v: u32, slot: u32) -> Option<u32> {
            Some(self.0[v as usize][slot as usize])
        }
    }

    #[test]
    fn finds_cycles_and_only_cycles() {
        // 0 → 1 → 2 → 0, 2 → 3 → 4, 4 → 3, 5 alone.
        let g = Adj(vec![vec![1], vec![2], vec![0, 3], vec![4], vec![3], vec![]]);
        let c = components(&g, 0..6);
        assert!(c.same(0, 1) && c.same(1, 2) && !c.same(2, 3) && c.same(3, 4));
        assert_eq!(c.cyclic_nodes(), vec![0, 1, 2, 3, 4]);
        assert!(!c.on_cycle(5));
        // Reverse topological numbering: {3,4} completes before {0,1,2}.
        assert!(c.comp[3] < c.comp[0]);
    }

    #[test]
    fn deep_paths_do_not_overflow_the_stack() {
        let n = 1_000_000u32;
        let mut adj: Vec<Vec<u32>> = (0..n)
            .map(|v| if v + 1 < n { vec![v + 1] } else { vec![0] })
            .collect();
        let c = components(&Adj(adj.clone()), [0]);
        assert_eq!(c.size, vec![n]);
        adj[(n - 1) as usize].clear();
        let c = components(&Adj(adj), [0]);
        assert!(!c.has_cycle());
    }
}
