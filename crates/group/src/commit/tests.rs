//! The component alone, driven message by message: the protocol's paths, recovery from the log
//! at the points that matter, and refusals. Seeded runs under random faults are in
//! `crates/xcast/tests/two_phase.rs`.

use super::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A transaction touching some keys; two commute when their key sets are disjoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Keys(Vec<u32>);

impl Commute for Keys {
    fn commutes(&self, other: &Self) -> bool {
        self.0.iter().all(|k| !other.0.contains(k))
    }
}

type C = TwoPhaseCommit<Keys, MemoryCommitLog<Keys>>;

fn p(i: u32) -> ProcessId {
    ProcessId(i)
}

fn config() -> CommitConfig {
    CommitConfig::new(3)
}

/// A few components and a FIFO network between them; votes are answered by `certify`, or held
/// when it says `None`.
struct Net {
    nodes: BTreeMap<ProcessId, C>,
    logs: BTreeMap<ProcessId, MemoryCommitLog<Keys>>,
    queue: VecDeque<(ProcessId, ProcessId, CommitMsg<Keys>)>,
    certify: fn(ProcessId, TxnId) -> Option<bool>,
    decided: Vec<(ProcessId, Decided)>,
    voted: Vec<(ProcessId, Voted)>,
    held: Vec<(ProcessId, TxnId)>,
    sent: usize,
}

impl Net {
    fn new(n: u32, certify: fn(ProcessId, TxnId) -> Option<bool>) -> Net {
        let mut net = Net {
            nodes: BTreeMap::new(),
            logs: BTreeMap::new(),
            queue: VecDeque::new(),
            certify,
            decided: Vec::new(),
            voted: Vec::new(),
            held: Vec::new(),
            sent: 0,
        };
        for i in 0..n {
            let log = MemoryCommitLog::new();
            let (c, out) = C::open(p(i), config(), log.clone()).unwrap();
            assert!(out.is_empty());
            net.nodes.insert(p(i), c);
            net.logs.insert(p(i), log);
        }
        net
    }

    fn absorb(&mut self, at: ProcessId, out: CommitOutput<Keys>) {
        self.voted.extend(out.voted.iter().map(|v| (at, *v)));
        self.decided.extend(out.decided.iter().map(|d| (at, *d)));
        for (to, m) in out.sends {
            self.sent += 1;
            self.queue.push_back((at, to, m));
        }
        for r in out.vote_requests {
            match (self.certify)(at, r.txn) {
                Some(yes) => {
                    let o = self.node(at).vote(r.txn, yes).unwrap();
                    self.absorb(at, o);
                }
                None => self.held.push((at, r.txn)),
            }
        }
    }

    fn node(&mut self, q: ProcessId) -> &mut C {
        self.nodes.get_mut(&q).unwrap()
    }

    fn begin(&mut self, c: ProcessId, keys: &[u32], participants: &[u32]) -> TxnId {
        let (txn, out) = self.node(c).begin(Keys(keys.to_vec()), participants.iter().map(|&i| p(i)).collect()).unwrap();
        self.absorb(c, out);
        txn
    }

    /// Delivers everything in flight, and whatever that sends, in FIFO order.
    fn run(&mut self) {
        while let Some((from, to, m)) = self.queue.pop_front() {
            let out = self.node(to).on_message(from, m).unwrap();
            self.absorb(to, out);
        }
    }

    /// Delivers the next message only.
    fn step(&mut self) -> (ProcessId, ProcessId, CommitMsg<Keys>) {
        let (from, to, m) = self.queue.pop_front().unwrap();
        let out = self.node(to).on_message(from, m.clone()).unwrap();
        self.absorb(to, out);
        (from, to, m)
    }

    fn tick(&mut self, q: ProcessId) {
        let out = self.node(q).tick().unwrap();
        self.absorb(q, out);
    }

    /// Crash losing volatile state, then restart from the log.
    fn restart(&mut self, q: ProcessId) {
        let (c, out) = C::open(q, config(), self.logs[&q].clone()).unwrap();
        self.nodes.insert(q, c);
        self.absorb(q, out);
    }

    fn decisions(&self, txn: TxnId) -> Vec<(ProcessId, Role, bool)> {
        self.decided.iter().filter(|(_, d)| d.txn == txn).map(|(q, d)| (*q, d.role, d.commit)).collect()
    }
}

fn yes(_: ProcessId, _: TxnId) -> Option<bool> {
    Some(true)
}

#[test]
fn commits_in_four_messages_per_participant_when_everyone_votes_yes() {
    let mut net = Net::new(4, yes);
    let t = net.begin(p(0), &[1], &[3, 1, 2]);
    net.run();
    let mut d = net.decisions(t);
    d.sort();
    assert_eq!(
        d,
        vec![
            (p(0), Role::Coordinator, true),
            (p(1), Role::Participant, true),
            (p(2), Role::Participant, true),
            (p(3), Role::Participant, true)
        ]
    );
    // PREPARE, vote, decision, ack: 3r + r.
    assert_eq!(net.sent, 12);
    let kinds: Vec<&str> = net.logs[&p(0)]
        .records()
        .iter()
        .map(|r| match r {
            CommitRecord::Begin { .. } => "begin",
            CommitRecord::Decision { .. } => "decision",
            CommitRecord::End { .. } => "end",
            CommitRecord::Vote { .. } => "vote",
        })
        .collect();
    assert_eq!(kinds, ["begin", "decision", "end"]);
    assert!(net.nodes.values().all(|c| c.pending() == 0));
    // Nothing is resent once everything is acknowledged.
    for _ in 0..10 {
        for i in 0..4 {
            net.tick(p(i));
        }
    }
    assert!(net.queue.is_empty());
}

#[test]
fn one_no_vote_aborts_everywhere() {
    let mut net = Net::new(4, |q, _| Some(q != p(2)));
    let t = net.begin(p(0), &[1], &[1, 2, 3]);
    net.run();
    assert!(net.decisions(t).iter().all(|&(_, _, commit)| !commit));
    assert_eq!(net.decisions(t).len(), 4);
}

#[test]
fn preemptive_abort_against_a_pending_predecessor() {
    // Participant 1 holds its certification of T1: T1 is pending (line 3's Q).
    let mut net = Net::new(2, |_, t| (t.seq != 0).then_some(true));
    let t1 = net.begin(p(0), &[1, 2], &[1]);
    net.run();
    assert_eq!(net.held, vec![(p(1), t1)]);
    // T2 touches key 2: preempted at once, no certification asked.
    let t2 = net.begin(p(0), &[2], &[1]);
    net.run();
    assert_eq!(net.voted.last().unwrap(), &(p(1), Voted { txn: t2, yes: false, preemptive: true }));
    assert_eq!(net.decisions(t2), vec![(p(0), Role::Coordinator, false), (p(1), Role::Participant, false)]);
    assert_eq!(net.nodes[&p(1)].counters().preemptive_aborts, 1);
    // T3 commutes with T1: certified and committed while T1 is still pending.
    let t3 = net.begin(p(0), &[3], &[1]);
    net.run();
    assert_eq!(net.decisions(t3).len(), 2);
    assert!(net.decisions(t3).iter().all(|d| d.2));
    // T1 voted yes and not yet decided at 1 preempts as well: T4's PREPARE reaches 1 before
    // T1's decision does.
    let out = net.node(p(1)).vote(t1, true).unwrap();
    net.absorb(p(1), out);
    let t4 = net.begin(p(0), &[1], &[1]);
    net.run();
    assert!(net.decisions(t1).iter().all(|d| d.2));
    assert!(net.decisions(t4).iter().all(|d| !d.2));
    assert_eq!(net.nodes[&p(1)].counters().preemptive_aborts, 2);
    // Once T1 is decided, it preempts nothing.
    let t5 = net.begin(p(0), &[1], &[1]);
    net.run();
    assert_eq!(net.decisions(t5).len(), 2);
    assert!(net.decisions(t5).iter().all(|d| d.2));
}

#[test]
fn a_yes_voter_blocks_while_the_coordinator_is_down_between_logging_and_sending_its_decision() {
    let mut net = Net::new(3, yes);
    let t = net.begin(p(0), &[1], &[1, 2]);
    // PREPAREs, then both votes reach the coordinator, except that the sends of its decision
    // are lost: it crashes right after logging it.
    net.step();
    net.step();
    net.step();
    let (from, to, m) = net.queue.pop_front().unwrap();
    let out = net.node(to).on_message(from, m).unwrap();
    assert_eq!(out.decided, vec![Decided { txn: t, role: Role::Coordinator, commit: true }]);
    assert!(out.sends.iter().all(|(_, m)| matches!(m, CommitMsg::Decision { .. })));
    net.decided.push((p(0), out.decided[0]));
    // Blocked: the participants voted yes and keep asking; nobody answers.
    for _ in 0..9 {
        net.tick(p(1));
        net.tick(p(2));
    }
    let asks = net.queue.drain(..).filter(|(_, to, m)| *to == p(0) && matches!(m, CommitMsg::Vote { yes: true, .. })).count();
    assert_eq!(asks, 6);
    assert_eq!(net.nodes[&p(1)].decision(t, Role::Participant), None);
    // Recovery: the logged decision is resent, not taken again.
    net.restart(p(0));
    assert_eq!(net.queue.len(), 2);
    net.run();
    let mut d = net.decisions(t);
    d.sort();
    assert_eq!(d, vec![(p(0), Role::Coordinator, true), (p(1), Role::Participant, true), (p(2), Role::Participant, true)]);
    assert_eq!(net.nodes[&p(0)].pending(), 0);
}

#[test]
fn a_recovered_coordinator_aborts_what_it_had_not_decided() {
    let mut net = Net::new(3, yes);
    let t = net.begin(p(0), &[1], &[1, 2]);
    net.step();
    net.step();
    // The votes are lost with the coordinator.
    net.queue.clear();
    net.restart(p(0));
    assert_eq!(net.decisions(t), vec![(p(0), Role::Coordinator, false)]);
    assert_eq!(net.nodes[&p(0)].counters().recovery_aborts, 1);
    net.run();
    assert_eq!(net.decisions(t).len(), 3);
    assert!(net.decisions(t).iter().all(|d| !d.2));
    // The id is not reused.
    assert_eq!(net.nodes[&p(0)].next_seq(), 1);
}

#[test]
fn a_recovered_participant_keeps_its_vote_and_asks() {
    let mut net = Net::new(2, yes);
    let t = net.begin(p(0), &[1], &[1]);
    net.step(); // PREPARE: 1 votes yes
    net.queue.clear();
    net.restart(p(1));
    // It asks at once.
    assert!(matches!(net.queue.front(), Some((_, to, CommitMsg::Vote { yes: true, .. })) if *to == p(0)));
    net.queue.clear();
    // A repeated PREPARE is answered with the logged vote: no new certification, no new vote.
    let votes = net.voted.len();
    for _ in 0..3 {
        net.tick(p(0));
    }
    net.run();
    assert_eq!(net.voted.len(), votes);
    assert!(net.decisions(t).iter().all(|d| d.2));
    assert_eq!(net.decisions(t).len(), 2);
}

#[test]
fn duplicates_and_reordering_change_nothing() {
    let mut net = Net::new(4, yes);
    let t = net.begin(p(0), &[1], &[1, 2, 3]);
    // Every message delivered twice, latest first.
    while !net.queue.is_empty() {
        let batch: Vec<_> = net.queue.drain(..).rev().collect();
        for (from, to, m) in batch {
            for _ in 0..2 {
                let out = net.node(to).on_message(from, m.clone()).unwrap();
                net.absorb(to, out);
            }
        }
    }
    assert_eq!(net.decisions(t).len(), 4);
    assert_eq!(net.voted.len(), 3);
}

#[test]
fn an_abort_that_overtakes_its_prepare_is_taken() {
    let mut net = Net::new(3, |q, _| Some(q != p(1)));
    let t = net.begin(p(0), &[1], &[1, 2]);
    // 2's PREPARE is delayed past everything else; 1 votes no.
    let late = net.queue.pop_back().unwrap();
    assert_eq!(late.1, p(2));
    net.run();
    assert_eq!(net.nodes[&p(2)].decision(t, Role::Participant), Some(false));
    let out = net.node(p(2)).on_message(late.0, late.2).unwrap();
    assert!(out.is_empty());
    assert_eq!(net.decisions(t).len(), 3);
}

#[test]
fn a_silent_participant_is_suspected_after_the_vote_timeout() {
    let mut net = Net::new(3, yes);
    let cfg = config().vote_timeout(5);
    let (c, _) = C::open(p(0), cfg, net.logs[&p(0)].clone()).unwrap();
    net.nodes.insert(p(0), c);
    let t = net.begin(p(0), &[1], &[1, 2]);
    net.queue.retain(|(_, to, _)| *to != p(2));
    net.run();
    for _ in 0..4 {
        net.tick(p(0));
    }
    assert_eq!(net.nodes[&p(0)].decision(t, Role::Coordinator), None);
    net.queue.clear(); // 2 stays silent
    net.tick(p(0));
    assert_eq!(net.nodes[&p(0)].decision(t, Role::Coordinator), Some(false));
    assert_eq!(net.nodes[&p(0)].counters().timeout_aborts, 1);
}

#[test]
fn refused_messages_change_nothing_and_the_component_keeps_serving() {
    let mut net = Net::new(4, |q, _| (q != p(3)).then_some(true));
    let t = net.begin(p(0), &[1], &[1, 2]);
    let t3 = net.begin(p(0), &[9], &[3]);
    net.step();
    net.step(); // 1 and 2 voted yes; their votes are in flight
    let never = TxnId { coordinator: p(0), seq: 99 };
    let of_1 = TxnId { coordinator: p(1), seq: 0 };
    let ps = vec![p(1), p(2)];
    let cases: Vec<(u32, u32, CommitMsg<Keys>, &str)> = vec![
        (3, 0, CommitMsg::Vote { txn: t, yes: true }, "not one of its participants"),
        (1, 0, CommitMsg::Vote { txn: never, yes: true }, "never began"),
        (2, 1, CommitMsg::Vote { txn: t, yes: true }, "not its coordinator"),
        (1, 0, CommitMsg::Ack { txn: t }, "not decided"),
        (3, 1, CommitMsg::Decision { txn: t, participants: ps.clone(), commit: false }, "not its coordinator"),
        (3, 2, CommitMsg::Prepare { txn: t, participants: ps.clone(), payload: Keys(vec![1]) }, "not its coordinator"),
        (0, 1, CommitMsg::Decision { txn: t, participants: vec![p(1), p(3)], commit: false }, "but they are"),
        (0, 1, CommitMsg::Decision { txn: t, participants: vec![p(2), p(1)], commit: false }, "not sorted"),
        (0, 3, CommitMsg::Decision { txn: t, participants: ps.clone(), commit: false }, "not one of"),
        (1, 1, CommitMsg::Decision { txn: of_1, participants: vec![p(1)], commit: true }, "did not vote yes"),
        (0, 3, CommitMsg::Decision { txn: t3, participants: vec![p(3)], commit: true }, "did not vote yes"),
    ];
    for (from, to, m, what) in cases {
        let before = format!("{:?}", net.nodes[&p(to)]);
        let logged = net.logs[&p(to)].len();
        match net.node(p(to)).on_message(p(from), m.clone()) {
            Err(CommitError::Refused(r)) => assert!(r.to_string().contains(what), "{m:?}: {r}"),
            other => panic!("{m:?} from {from} to {to} was not refused: {other:?}"),
        }
        assert_eq!(format!("{:?}", net.nodes[&p(to)]), before, "{m:?}");
        assert_eq!(net.logs[&p(to)].len(), logged);
    }
    // 3 is still certifying T3 (held): a commit for it is refused too.
    net.run();
    assert!(net.decisions(t).iter().all(|d| d.2));
    // A contradicting decision and a changed vote, once decided.
    let contra = net.node(p(1)).on_message(p(0), CommitMsg::Decision { txn: t, participants: ps.clone(), commit: false });
    assert!(matches!(contra, Err(CommitError::Refused(CommitRefusal::ContradictsDecision { .. }))));
    let changed = net.node(p(0)).on_message(p(1), CommitMsg::Vote { txn: t, yes: false });
    assert!(matches!(changed, Err(CommitError::Refused(CommitRefusal::ChangedVote { .. }))), "{changed:?}");
    // And it keeps serving.
    let t2 = net.begin(p(0), &[2], &[1, 2]);
    net.run();
    assert_eq!(net.decisions(t2).len(), 3);
}

#[test]
fn a_log_that_does_not_replay_is_named() {
    let log = MemoryCommitLog::<Keys>::new();
    let mut l = log.clone();
    let t = TxnId { coordinator: p(0), seq: 0 };
    l.append(&CommitRecord::Decision { txn: t, role: Role::Coordinator, participants: vec![p(1)], commit: true }).unwrap();
    match C::open(p(0), config(), log) {
        Err(CommitError::BadLog { index: 0, reason }) => assert!(reason.contains("never begun"), "{reason}"),
        other => panic!("{other:?}"),
    }
}
