//! The delivery checker against brute-force oracles on 2000 small random logs (at most four
//! processes, six messages, three groups): each oracle states its property by the definition,
//! quantifying over every pair of processes and messages (or closing `<` transitively), and the
//! checker's verdicts, and the witnesses it names, must agree with it.

use ensemble_history::delivery::{
    check, Cast, DeliveryLog, DeliveryViolation, MessageId, ProcessNo, Property,
};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

const LOGS: u64 = 2000;

/// A random log. Sequences follow one global order of the messages (the casts' order or a random
/// one) with holes, or are shuffled, or have one adjacent swap; some carry a repetition, a
/// message never cast or one addressed elsewhere, so that every property both holds and fails
/// often.
fn random_log(rng: &mut ChaCha8Rng) -> DeliveryLog {
    let processes = rng.random_range(1..=4u32);
    let groups = rng.random_range(1..=3u32);
    let mut log = DeliveryLog::new();
    for g in 0..groups {
        let mut members: Vec<u32> = (0..processes).filter(|_| rng.random_bool(0.5)).collect();
        if members.is_empty() {
            members.push(rng.random_range(0..processes));
        }
        log.add_group(g, members);
    }
    for p in 0..processes {
        log.process_mut(p).correct = rng.random_bool(0.75);
    }
    let messages = rng.random_range(0..=6u64);
    for m in 1..=messages {
        let mut dst: Vec<u32> = (0..groups).filter(|_| rng.random_bool(0.5)).collect();
        if dst.is_empty() {
            dst.push(rng.random_range(0..groups));
        }
        let caster = rng.random_range(0..processes);
        log.add_cast(Cast::new(m, caster, dst).at(rng.random_range(0..4)));
    }
    let mut global: Vec<MessageId> = if rng.random_bool(0.5) {
        let mut by_time: Vec<(u64, usize, MessageId)> = log
            .casts
            .iter()
            .enumerate()
            .map(|(i, c)| (c.at, i, c.message))
            .collect();
        by_time.sort();
        by_time.into_iter().map(|(_, _, m)| m).collect()
    } else {
        (1..=messages).collect()
    };
    if rng.random_bool(0.5) {
        global.shuffle(rng);
    }
    let addressed: Vec<Vec<MessageId>> = {
        let facts = Facts::new(&log);
        (0..processes)
            .map(|p| {
                global
                    .iter()
                    .copied()
                    .filter(|&m| facts.is_destination(p, m))
                    .collect()
            })
            .collect()
    };
    for (p, mine) in (0..processes).zip(addressed) {
        let mut seq: Vec<MessageId> = match rng.random_range(0..4) {
            0 | 1 => mine.into_iter().filter(|_| rng.random_bool(0.85)).collect(),
            2 => {
                let mut s = mine;
                s.shuffle(rng);
                s
            }
            _ => {
                let mut s = mine;
                if s.len() >= 2 {
                    let i = rng.random_range(0..s.len() - 1);
                    s.swap(i, i + 1);
                }
                s
            }
        };
        if rng.random_bool(0.08) && !seq.is_empty() {
            let again = seq[rng.random_range(0..seq.len())];
            seq.push(again);
        }
        if rng.random_bool(0.04) {
            seq.insert(rng.random_range(0..=seq.len()), 99);
        }
        if rng.random_bool(0.08) && messages > 0 {
            let m = rng.random_range(1..=messages);
            if !seq.contains(&m) {
                seq.insert(rng.random_range(0..=seq.len()), m);
            }
        }
        log.process_mut(p).delivered = seq;
    }
    log
}

/// What the oracles read off a log, by brute force.
struct Facts<'a> {
    log: &'a DeliveryLog,
    dst: HashMap<MessageId, BTreeSet<ProcessNo>>,
}

impl<'a> Facts<'a> {
    fn new(log: &'a DeliveryLog) -> Self {
        let dst = log
            .casts
            .iter()
            .map(|c| {
                let members = log
                    .groups
                    .iter()
                    .filter(|g| c.destinations.contains(&g.id))
                    .flat_map(|g| g.members.iter().copied())
                    .collect();
                (c.message, members)
            })
            .collect();
        Facts { log, dst }
    }

    fn is_destination(&self, p: ProcessNo, m: MessageId) -> bool {
        self.dst.get(&m).is_some_and(|d| d.contains(&p))
    }

    fn cast(&self, m: MessageId) -> bool {
        self.dst.contains_key(&m)
    }

    fn processes(&self) -> Vec<ProcessNo> {
        self.log.processes.iter().map(|l| l.process).collect()
    }

    fn messages(&self) -> Vec<MessageId> {
        self.log.casts.iter().map(|c| c.message).collect()
    }

    fn correct(&self, p: ProcessNo) -> bool {
        self.log
            .processes
            .iter()
            .any(|l| l.process == p && l.correct)
    }

    /// Where p first delivered m (the convention the order properties are stated in).
    fn position(&self, p: ProcessNo, m: MessageId) -> Option<usize> {
        let l = self.log.processes.iter().find(|l| l.process == p)?;
        l.delivered.iter().position(|&x| x == m)
    }

    fn delivers(&self, p: ProcessNo, m: MessageId) -> bool {
        self.position(p, m).is_some()
    }

    fn before(&self, p: ProcessNo, m: MessageId, m2: MessageId) -> bool {
        matches!((self.position(p, m), self.position(p, m2)), (Some(a), Some(b)) if a < b)
    }

    /// P-Store (iv), by its letter, for one quadruple.
    fn prefix_violated(&self, p: ProcessNo, q: ProcessNo, m: MessageId, m2: MessageId) -> bool {
        let both = |x| self.is_destination(p, x) && self.is_destination(q, x);
        m != m2
            && both(m)
            && both(m2)
            && self.delivers(p, m)
            && self.delivers(q, m2)
            && !self.before(p, m2, m)
            && !self.before(q, m, m2)
    }

    fn prefix_order(&self) -> bool {
        let (ps, ms) = (self.processes(), self.messages());
        !ps.iter().any(|&p| {
            ps.iter().any(|&q| {
                ms.iter()
                    .any(|&m| ms.iter().any(|&m2| self.prefix_violated(p, q, m, m2)))
            })
        })
    }

    /// Prefix order within group `g`, by its letter, for one quadruple: P-Store (iv) with p and
    /// q members of `g` and both messages addressed to `g`.
    fn group_violated(&self, g: u32, p: ProcessNo, q: ProcessNo, m: MessageId, m2: MessageId) -> bool {
        let member = |x| self.log.groups.iter().any(|gr| gr.id == g && gr.members.contains(&x));
        let addressed = |x| self.log.casts.iter().any(|c| c.message == x && c.destinations.contains(&g));
        m != m2
            && member(p)
            && member(q)
            && addressed(m)
            && addressed(m2)
            && self.delivers(p, m)
            && self.delivers(q, m2)
            && !self.before(p, m2, m)
            && !self.before(q, m, m2)
    }

    fn group_order(&self) -> bool {
        let (ps, ms) = (self.processes(), self.messages());
        !self.log.groups.iter().any(|g| {
            ps.iter().any(|&p| {
                ps.iter().any(|&q| {
                    ms.iter()
                        .any(|&m| ms.iter().any(|&m2| self.group_violated(g.id, p, q, m, m2)))
                })
            })
        })
    }

    /// `m < m'`: some process delivered m before m'.
    fn less(&self, m: MessageId, m2: MessageId) -> Option<ProcessNo> {
        self.processes()
            .into_iter()
            .find(|&p| self.before(p, m, m2))
    }

    /// The length of a shortest cycle of `<` (None: acyclic), by BFS from every message over
    /// the relation written out in full.
    fn shortest_cycle(&self) -> Option<usize> {
        let ms = self.messages();
        let succ: HashMap<MessageId, Vec<MessageId>> = ms
            .iter()
            .map(|&m| {
                let next = ms.iter().copied().filter(|&x| self.less(m, x).is_some());
                (m, next.collect())
            })
            .collect();
        let mut best: Option<usize> = None;
        for &s in &ms {
            let mut dist = HashMap::from([(s, 0usize)]);
            let mut queue = VecDeque::from([s]);
            'bfs: while let Some(v) = queue.pop_front() {
                for &w in &succ[&v] {
                    if w == s {
                        let len = dist[&v] + 1;
                        best = Some(best.map_or(len, |b| b.min(len)));
                        break 'bfs;
                    }
                    if !dist.contains_key(&w) {
                        dist.insert(w, dist[&v] + 1);
                        queue.push_back(w);
                    }
                }
            }
        }
        best
    }

    fn pairwise_violated(&self, p: ProcessNo, q: ProcessNo, m: MessageId, m2: MessageId) -> bool {
        self.before(p, m, m2) && self.before(q, m2, m)
    }

    fn pairwise_order(&self) -> bool {
        let (ps, ms) = (self.processes(), self.messages());
        !ps.iter().any(|&p| {
            ps.iter().any(|&q| {
                ms.iter()
                    .any(|&m| ms.iter().any(|&m2| self.pairwise_violated(p, q, m, m2)))
            })
        })
    }

    /// The processes that break FIFO order: some caster cast m before m', the process is a
    /// destination of both, delivered m' and had not delivered m before it.
    fn fifo_breakers(&self) -> BTreeSet<ProcessNo> {
        let casts = &self.log.casts;
        let mut out = BTreeSet::new();
        for (i, a) in casts.iter().enumerate() {
            for (j, b) in casts.iter().enumerate() {
                let earlier = (a.at, i) < (b.at, j);
                if a.caster != b.caster || !earlier {
                    continue;
                }
                for p in self.processes() {
                    if self.is_destination(p, a.message)
                        && self.is_destination(p, b.message)
                        && self.delivers(p, b.message)
                        && !self.before(p, a.message, b.message)
                    {
                        out.insert(p);
                    }
                }
            }
        }
        out
    }

    /// Integrity's offences as (process, message) pairs.
    fn integrity_offences(&self) -> BTreeSet<(ProcessNo, MessageId)> {
        let mut out = BTreeSet::new();
        for l in &self.log.processes {
            let mut seen = HashSet::new();
            for &m in &l.delivered {
                if !seen.insert(m) || !self.cast(m) || !self.is_destination(l.process, m) {
                    out.insert((l.process, m));
                }
            }
        }
        out
    }

    fn caster_correct(&self, m: MessageId) -> bool {
        let c = self.log.casts.iter().find(|c| c.message == m).unwrap();
        c.correct.unwrap_or_else(|| self.correct(c.caster))
    }

    /// (correct destination, message) pairs validity (`true`) or agreement requires and the
    /// log lacks.
    fn missing(&self, validity: bool) -> BTreeSet<(ProcessNo, MessageId)> {
        let mut out = BTreeSet::new();
        for m in self.messages() {
            let required = if validity {
                self.caster_correct(m)
            } else {
                self.processes().iter().any(|&p| self.delivers(p, m))
            };
            if !required {
                continue;
            }
            for &p in &self.dst[&m] {
                if self.correct(p) && !self.delivers(p, m) {
                    out.insert((p, m));
                }
            }
        }
        out
    }
}

/// Counts of verdicts, to show that both outcomes were exercised.
#[derive(Default, Debug)]
struct Tally {
    held: u32,
    failed: u32,
}

impl Tally {
    fn add(&mut self, ok: bool) {
        if ok {
            self.held += 1
        } else {
            self.failed += 1
        }
    }

    fn assert_both(&self, what: &str) {
        eprintln!("{what}: {self:?}");
        assert!(
            self.held >= 100 && self.failed >= 100,
            "{what}: too one-sided to test anything: {self:?}"
        );
    }
}

fn logs() -> impl Iterator<Item = (u64, DeliveryLog)> {
    (0..LOGS).map(|seed| (seed, random_log(&mut ChaCha8Rng::seed_from_u64(seed))))
}

#[test]
fn prefix_order_agrees_with_the_definition() {
    let mut tally = Tally::default();
    for (seed, log) in logs() {
        let facts = Facts::new(&log);
        let expected = facts.prefix_order();
        let report = check(&log, &[Property::PrefixOrder]);
        assert_eq!(report.ok(), expected, "seed {seed}: {report}\n{log:?}");
        for v in &report.violations {
            let DeliveryViolation::PrefixOrder {
                p,
                q,
                m,
                m_prime,
                p_delivered_m_prime_later,
                q_delivered_m_later,
            } = v
            else {
                panic!("seed {seed}: unexpected {v}");
            };
            assert!(
                facts.prefix_violated(*p, *q, *m, *m_prime),
                "seed {seed}: {v}"
            );
            assert_eq!(
                *p_delivered_m_prime_later,
                facts.before(*p, *m, *m_prime),
                "seed {seed}: {v}"
            );
            assert_eq!(
                *q_delivered_m_later,
                facts.before(*q, *m_prime, *m),
                "seed {seed}: {v}"
            );
        }
        tally.add(expected);
    }
    tally.assert_both("prefix order");
}

#[test]
fn group_order_agrees_with_the_definition() {
    let mut tally = Tally::default();
    for (seed, log) in logs() {
        let facts = Facts::new(&log);
        let expected = facts.group_order();
        let report = check(&log, &[Property::GroupOrder]);
        assert_eq!(report.ok(), expected, "seed {seed}: {report}\n{log:?}");
        for v in &report.violations {
            let DeliveryViolation::GroupOrder {
                group,
                p,
                q,
                m,
                m_prime,
                p_delivered_m_prime_later,
                q_delivered_m_later,
            } = v
            else {
                panic!("seed {seed}: unexpected {v}");
            };
            assert!(
                facts.group_violated(*group, *p, *q, *m, *m_prime),
                "seed {seed}: {v}"
            );
            assert_eq!(
                *p_delivered_m_prime_later,
                facts.before(*p, *m, *m_prime),
                "seed {seed}: {v}"
            );
            assert_eq!(
                *q_delivered_m_later,
                facts.before(*q, *m_prime, *m),
                "seed {seed}: {v}"
            );
        }
        tally.add(expected);
    }
    tally.assert_both("group order");
}

#[test]
fn acyclic_order_agrees_with_the_closure_of_the_relation_and_its_cycles_are_shortest() {
    let mut tally = Tally::default();
    for (seed, log) in logs() {
        let facts = Facts::new(&log);
        let shortest = facts.shortest_cycle();
        let report = check(&log, &[Property::AcyclicOrder]);
        assert_eq!(
            report.ok(),
            shortest.is_none(),
            "seed {seed}: {report}\n{log:?}"
        );
        if let Some(len) = shortest {
            let cycle = report.cycle().expect("a violation names its cycle");
            assert_eq!(cycle.len(), len, "seed {seed}: {cycle} is not shortest");
            for (i, e) in cycle.edges.iter().enumerate() {
                assert!(
                    facts.before(e.process, e.from, e.to),
                    "seed {seed}: edge {i} of {cycle}"
                );
                assert_eq!(
                    e.to,
                    cycle.edges[(i + 1) % len].from,
                    "seed {seed}: {cycle} is broken"
                );
            }
        }
        tally.add(shortest.is_none());
    }
    tally.assert_both("acyclic order");
}

#[test]
fn pairwise_order_agrees_with_the_definition() {
    let mut tally = Tally::default();
    for (seed, log) in logs() {
        let facts = Facts::new(&log);
        let expected = facts.pairwise_order();
        let report = check(&log, &[Property::PairwiseOrder]);
        assert_eq!(report.ok(), expected, "seed {seed}: {report}\n{log:?}");
        for v in &report.violations {
            let DeliveryViolation::PairwiseOrder { p, q, m, m_prime } = v else {
                panic!("seed {seed}: unexpected {v}");
            };
            assert!(
                facts.pairwise_violated(*p, *q, *m, *m_prime),
                "seed {seed}: {v}"
            );
        }
        tally.add(expected);
    }
    tally.assert_both("pairwise order");
}

#[test]
fn fifo_order_agrees_with_the_definition() {
    let mut tally = Tally::default();
    for (seed, log) in logs() {
        let facts = Facts::new(&log);
        let expected = facts.fifo_breakers();
        let report = check(&log, &[Property::FifoOrder]);
        let named: BTreeSet<ProcessNo> = report
            .violations
            .iter()
            .map(|v| match v {
                DeliveryViolation::Fifo {
                    process,
                    caster,
                    earlier,
                    later,
                    ..
                } => {
                    let casts: Vec<&Cast> = [earlier, later]
                        .iter()
                        .map(|&&m| log.casts.iter().find(|c| c.message == m).unwrap())
                        .collect();
                    assert!(
                        casts.iter().all(|c| c.caster == *caster),
                        "seed {seed}: {v}"
                    );
                    assert!(
                        facts.delivers(*process, *later)
                            && !facts.before(*process, *earlier, *later),
                        "seed {seed}: {v}"
                    );
                    *process
                }
                other => panic!("seed {seed}: unexpected {other}"),
            })
            .collect();
        assert_eq!(named, expected, "seed {seed}: {report}\n{log:?}");
        tally.add(expected.is_empty());
    }
    tally.assert_both("FIFO order");
}

#[test]
fn integrity_validity_and_agreement_agree_with_their_definitions() {
    let mut tallies = [Tally::default(), Tally::default(), Tally::default()];
    for (seed, log) in logs() {
        let facts = Facts::new(&log);
        let pairs = |property| -> BTreeSet<(ProcessNo, MessageId)> {
            check(&log, &[property])
                .violations
                .iter()
                .map(|v| match *v {
                    DeliveryViolation::DuplicateDelivery {
                        process, message, ..
                    }
                    | DeliveryViolation::UncastDelivery {
                        process, message, ..
                    }
                    | DeliveryViolation::OutsideDestination {
                        process, message, ..
                    }
                    | DeliveryViolation::NotDelivered {
                        process, message, ..
                    }
                    | DeliveryViolation::Disagreement {
                        process, message, ..
                    } => (process, message),
                    ref other => panic!("seed {seed}: unexpected {other}"),
                })
                .collect()
        };
        let cases = [
            (Property::Integrity, facts.integrity_offences()),
            (Property::Validity, facts.missing(true)),
            (Property::Agreement, facts.missing(false)),
        ];
        for (i, (property, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                pairs(property),
                expected,
                "seed {seed}: {property}\n{log:?}"
            );
            tallies[i].add(expected.is_empty());
        }
    }
    for (t, name) in tallies.iter().zip(["integrity", "validity", "agreement"]) {
        t.assert_both(name);
    }
}
