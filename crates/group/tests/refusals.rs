//! Malformed and forged consensus messages, fed to the members of a group wired by hand (no
//! simulator: a FIFO queue and rounds of ticks), so each message reaches exactly the member and
//! the state it is aimed at. Each is refused with an error naming it, and the group keeps serving.

use ensemble_core::ProcessId;
use ensemble_group::omnipaxos::ballot_leader_election::Ballot;
use ensemble_group::omnipaxos::messages::ballot_leader_election::{BLEMessage, HeartbeatMsg, HeartbeatRequest};
use ensemble_group::omnipaxos::messages::sequence_paxos::{
    AcceptDecide, AcceptSync, Accepted, Compaction, Decide, PaxosMessage, PaxosMsg, Prepare, Promise,
};
use ensemble_group::omnipaxos::messages::Message;
use ensemble_group::omnipaxos::util::{LogSync, SequenceNumber};
use ensemble_group::{
    GroupConfig, GroupId, GroupMember, GroupMsg, GroupOutput, LogItem, MemoryLog, Refusal, ROUND_CEILING,
};
use std::collections::VecDeque;

const GROUP: GroupId = GroupId(4);

struct Net {
    members: Vec<GroupMember<u64>>,
    queue: VecDeque<(ProcessId, ProcessId, GroupMsg)>,
    committed: Vec<Vec<(u64, u64)>>,
}

impl Net {
    fn new() -> Net {
        let config = GroupConfig::new(GROUP, (0..3).map(ProcessId).collect());
        let members = (0..3)
            .map(|i| GroupMember::new(config.clone(), ProcessId(i), MemoryLog::new(), 0).expect("member"))
            .collect();
        Net { members, queue: VecDeque::new(), committed: vec![Vec::new(); 3] }
    }

    fn absorb(&mut self, at: usize, out: GroupOutput<u64>) {
        let from = self.members[at].id();
        for (to, msg) in out.sends {
            self.queue.push_back((from, to, msg));
        }
        self.committed[at].extend(out.committed.into_iter().map(|c| (c.index, c.entry)));
    }

    fn deliver_all(&mut self) {
        while let Some((from, to, msg)) = self.queue.pop_front() {
            let out = self.members[to.0 as usize].on_message(from, msg).expect("honest messages are taken");
            self.absorb(to.0 as usize, out);
        }
    }

    fn rounds(&mut self, n: usize) {
        for _ in 0..n {
            for i in 0..3 {
                let out = self.members[i].tick();
                self.absorb(i, out);
            }
            self.deliver_all();
        }
    }

    fn propose(&mut self, at: usize, entry: u64) {
        let out = self.members[at].propose(entry);
        self.absorb(at, out);
        self.deliver_all();
    }

    fn leader(&self) -> usize {
        let leaders: Vec<usize> = (0..3).filter(|&i| self.members[i].is_leader()).collect();
        assert_eq!(leaders.len(), 1, "one leader");
        leaders[0]
    }

    /// Hands `m`, as if `from` sent it, to member `to`; the link sequence number is far ahead so
    /// that the link layer never takes it for a stale copy.
    fn forge(&mut self, from: usize, to: usize, m: &Message<LogItem<u64>>) -> Result<(), Refusal> {
        let body = postcard::to_stdvec(m).unwrap();
        let msg = GroupMsg { group: GROUP, incarnation: 1, seq: 1 << 40, body };
        self.send_raw(ProcessId(from as u32), to, msg)
    }

    fn send_raw(&mut self, from: ProcessId, to: usize, msg: GroupMsg) -> Result<(), Refusal> {
        let out = self.members[to].on_message(from, msg)?;
        self.absorb(to, out);
        self.deliver_all();
        Ok(())
    }
}

fn node(i: usize) -> u64 {
    i as u64 + 1
}

fn paxos(from: usize, to: usize, msg: PaxosMsg<LogItem<u64>>) -> Message<LogItem<u64>> {
    Message::SequencePaxos(PaxosMessage { from: node(from), to: node(to), msg })
}

fn started() -> (Net, usize, usize, usize) {
    let mut net = Net::new();
    net.rounds(20);
    let l = net.leader();
    for e in 0..5 {
        net.propose(l, e);
    }
    net.rounds(2);
    for c in &net.committed {
        assert_eq!(c.iter().map(|(_, e)| *e).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    }
    let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    (net, l, others[0], others[1])
}

/// The group still serves: a proposal at a follower is forwarded, decided, and every member
/// delivers the same log, each entry once.
fn still_serves(net: &mut Net, f: usize) {
    for e in 100..105 {
        net.propose(f, e);
    }
    net.rounds(5);
    let first = net.committed[0].clone();
    assert_eq!(first.len(), 10, "{first:?}");
    for c in &net.committed {
        assert_eq!(*c, first);
    }
    let indices: Vec<u64> = first.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, (0..10).collect::<Vec<_>>());
}

fn refused(r: Result<(), Refusal>, names: &str) -> Refusal {
    let e = r.expect_err("refused");
    assert!(e.to_string().contains(names), "`{e}` does not name `{names}`");
    e
}

#[test]
fn malformed_and_forged_messages_are_refused_by_name_and_the_group_keeps_serving() {
    let (mut net, l, f, g) = started();
    let promise = net.members[f].promise();
    assert_eq!(promise.pid, node(l));

    // Garbage bytes.
    let garbage = GroupMsg { group: GROUP, incarnation: 1, seq: 1 << 40, body: vec![0xde, 0xad, 0xbe, 0xef, 0xff] };
    assert!(matches!(refused(net.send_raw(ProcessId(l as u32), f, garbage), "undecodable"), Refusal::Undecodable { .. }));
    // Another group; a sender outside the group.
    let other = GroupMsg { group: GroupId(5), incarnation: 1, seq: 0, body: Vec::new() };
    assert!(matches!(refused(net.send_raw(ProcessId(l as u32), f, other), "group 5"), Refusal::UnknownGroup { .. }));
    let hb = Message::BLE(BLEMessage { from: node(l), to: node(f), msg: HeartbeatMsg::Request(HeartbeatRequest { round: 1 }) });
    let body = postcard::to_stdvec(&hb).unwrap();
    let stranger = GroupMsg { group: GROUP, incarnation: 1, seq: 0, body };
    assert!(matches!(refused(net.send_raw(ProcessId(9), f, stranger), "p9"), Refusal::UnknownMember { .. }));
    // A library message whose sender or addressee contradicts the transport.
    assert!(matches!(refused(net.forge(g, f, &hb), "HeartbeatRequest"), Refusal::ForgedSender { .. }));
    let misaddressed = paxos(l, g, PaxosMsg::Decide(Decide { n: promise, seq_num: SequenceNumber::default(), decided_idx: 5 }));
    assert!(matches!(refused(net.forge(l, f, &misaddressed), "Decide"), Refusal::Misaddressed { .. }));
    // A round far in the future.
    let far = Ballot { n: ROUND_CEILING + 1, ..promise };
    let decide = paxos(l, f, PaxosMsg::Decide(Decide { n: far, seq_num: SequenceNumber::default(), decided_idx: 5 }));
    assert!(matches!(refused(net.forge(l, f, &decide), "Decide"), Refusal::RoundTooFar { .. }));
    // A ballot of no member; a ballot of another configuration; a leader's ballot that is not
    // the sender's.
    let prepare = |n: Ballot| {
        paxos(l, f, PaxosMsg::Prepare(Prepare { n, decided_idx: 5, n_accepted: promise, accepted_idx: 5 }))
    };
    let nobody = Ballot { pid: 7, n: promise.n + 1, ..promise };
    assert!(matches!(refused(net.forge(l, f, &prepare(nobody)), "Prepare"), Refusal::UnknownBallotOwner { .. }));
    let foreign = Ballot { config_id: 9, n: promise.n + 1, ..promise };
    assert!(matches!(refused(net.forge(l, f, &prepare(foreign)), "Prepare"), Refusal::WrongConfiguration { .. }));
    let stolen = Ballot { pid: node(g), ..promise };
    let accdec = paxos(l, f, PaxosMsg::AcceptDecide(AcceptDecide { n: stolen, seq_num: SequenceNumber::default(), decided_idx: 5, entries: vec![] }));
    assert!(matches!(refused(net.forge(l, f, &accdec), "AcceptDecide"), Refusal::ForgedBallot { .. }));
    // Out-of-range indices: a log sync from beyond the follower's log, an `Accepted` beyond the
    // leader's log, a `Prepare` deciding beyond its own log, a `Promise` whose sync does not end
    // where it says the log ends.
    let sync = LogSync { decided_snapshot: None, suffix: vec![LogItem(9)], sync_idx: 1_000_000, stopsign: None };
    let accsync = paxos(l, f, PaxosMsg::AcceptSync(AcceptSync { n: promise, seq_num: SequenceNumber::default(), decided_idx: 5, log_sync: sync }));
    let e = refused(net.forge(l, f, &accsync), "AcceptSync");
    assert!(matches!(e, Refusal::IndexOutOfRange { .. }) && e.to_string().contains("1000000"), "{e}");
    let accepted = paxos(f, l, PaxosMsg::Accepted(Accepted { n: promise, accepted_idx: 1_000_000 }));
    assert!(matches!(refused(net.forge(f, l, &accepted), "Accepted"), Refusal::IndexOutOfRange { .. }));
    let overdecided = paxos(l, f, PaxosMsg::Prepare(Prepare { n: promise, decided_idx: 50, n_accepted: promise, accepted_idx: 5 }));
    assert!(matches!(refused(net.forge(l, f, &overdecided), "Prepare"), Refusal::IndexOutOfRange { .. }));
    let sync = LogSync { decided_snapshot: None, suffix: vec![LogItem(9)], sync_idx: 2, stopsign: None };
    let promise_msg = paxos(f, l, PaxosMsg::Promise(Promise { n: promise, n_accepted: promise, decided_idx: 5, accepted_idx: 5, log_sync: Some(sync) }));
    assert!(matches!(refused(net.forge(f, l, &promise_msg), "Promise"), Refusal::IndexOutOfRange { .. }));
    // What this group never sends.
    let trim = paxos(l, f, PaxosMsg::Compaction(Compaction::Trim(3)));
    assert!(matches!(refused(net.forge(l, f, &trim), "Compaction"), Refusal::Unsupported { .. }));

    // Nothing refused changed anything: same leader, same promise, same log.
    assert_eq!(net.leader(), l);
    assert_eq!(net.members[f].promise(), promise);
    assert_eq!(net.members[f].counters().refused, 12);
    assert_eq!(net.members[l].counters().refused, 2);
    still_serves(&mut net, f);
}

/// A higher round from a member, within the ceiling, is how Paxos changes leaders: it cannot be
/// refused at this layer, and the library adopts it. Forged (the member does not hold it), it
/// costs the receiver its place in the quorum until a real round passes it, which may be never;
/// it never costs agreement, and the other two keep deciding.
#[test]
fn a_higher_round_from_a_member_is_adopted_by_design_and_costs_no_agreement() {
    let (mut net, l, f, g) = started();
    let promise = net.members[f].promise();
    let higher = Ballot { n: promise.n + 5, pid: node(g), ..promise };
    let prepare = paxos(g, f, PaxosMsg::Prepare(Prepare { n: higher, decided_idx: 5, n_accepted: promise, accepted_idx: 5 }));
    net.forge(g, f, &prepare).expect("a higher round from a member is taken");
    assert_eq!(net.members[f].promise(), higher);
    for e in 100..105 {
        net.propose(l, e);
    }
    net.rounds(200);
    // The leader and the other follower are a quorum: they keep deciding.
    assert_eq!(net.committed[l].len(), 10);
    assert_eq!(net.committed[g], net.committed[l]);
    // The member that took the forged round agrees with them on what it has, and is left
    // behind: ballot leader election sees a happy leader and never takes over, so no real round
    // passes the forged one. The defence is the transport's authentication of the sender.
    assert_eq!(net.members[f].promise(), higher);
    assert_eq!(net.committed[f][..], net.committed[l][..net.committed[f].len()]);
    assert_eq!(net.committed[f].len(), 5);
}
