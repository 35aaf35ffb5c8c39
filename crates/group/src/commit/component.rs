//! [`TwoPhaseCommit`]: both roles of Algorithm 4 over one log. The protocol, what is logged and
//! why, and what is refused are documented on the module (`commit/mod.rs`).

use super::{
    CommitConfig, CommitError, CommitLog, CommitMsg, CommitOutput, CommitRecord, CommitRefusal, Commute, Decided, Role,
    TxnId, VoteRequest, Voted,
};
use crate::storage::Payload;
use ensemble_core::ProcessId;
use std::collections::{BTreeMap, BTreeSet};

/// A transaction this process coordinates.
#[derive(Debug)]
struct Coordinated<T> {
    participants: Vec<ProcessId>,
    /// Kept to resend PREPARE; absent after recovery, when only decided transactions remain
    /// (undecided ones are aborted by `open`).
    payload: Option<T>,
    /// Votes received in this incarnation (not logged: see "presumed abort").
    votes: BTreeMap<ProcessId, bool>,
    decision: Option<bool>,
    acked: BTreeSet<ProcessId>,
    /// The tick it began at, for the vote timeout.
    begun: u64,
    /// The tick of the last PREPARE or decision sent for it, for resends.
    last_sent: u64,
}

/// Where a participant stands on a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stand {
    /// The embedder is certifying it (volatile: lost in a crash, asked again on the next PREPARE).
    Certifying,
    Voted { yes: bool },
    Decided { commit: bool },
}

/// A transaction this process takes part in.
#[derive(Debug)]
struct Participation<T> {
    participants: Vec<ProcessId>,
    /// Known while certifying and after a *yes*: what preemption compares.
    payload: Option<T>,
    stand: Stand,
    /// The tick of the last vote sent, for a blocked participant's inquiries.
    last_sent: u64,
}

/// Counters, for the embedder's reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitCounters {
    /// Votes *no* by Algorithm 4's line 4 (a pending predecessor does not commute).
    pub preemptive_aborts: u64,
    pub prepares_resent: u64,
    pub decisions_resent: u64,
    /// Votes resent: a blocked participant asking, or an answer to a repeated PREPARE.
    pub votes_resent: u64,
    /// Transactions a recovered coordinator found undecided and aborted (presumed abort).
    pub recovery_aborts: u64,
    /// Transactions aborted because a participant stayed silent past the vote timeout.
    pub timeout_aborts: u64,
}

/// One process's share of two-phase commit: coordinator of the transactions it begins,
/// participant in those it is sent. See the module documentation.
#[derive(Debug)]
pub struct TwoPhaseCommit<T, L> {
    me: ProcessId,
    config: CommitConfig,
    log: L,
    next_seq: u64,
    /// Ticks since this incarnation started: the component's only notion of time.
    clock: u64,
    coordinating: BTreeMap<TxnId, Coordinated<T>>,
    /// Coordinated transactions not yet acknowledged by every participant.
    open: BTreeSet<TxnId>,
    participating: BTreeMap<TxnId, Participation<T>>,
    /// Participations being certified or voted *yes* and undecided: Algorithm 4's `Q`, less
    /// the *no* votes, which cannot commit.
    pending: BTreeSet<TxnId>,
    counters: CommitCounters,
    failure: Option<String>,
}

impl<T: Payload + Commute, L: CommitLog<T>> TwoPhaseCommit<T, L> {
    /// Builds the component from its log (empty at the first start) and resumes: coordinated
    /// transactions without a decision are aborted, decisions not acknowledged are resent,
    /// blocked participations ask their coordinators. Act on the output as on any other.
    pub fn open(me: ProcessId, config: CommitConfig, log: L) -> Result<(Self, CommitOutput<T>), CommitError> {
        let mut c = TwoPhaseCommit {
            me,
            config,
            log,
            next_seq: 0,
            clock: 0,
            coordinating: BTreeMap::new(),
            open: BTreeSet::new(),
            participating: BTreeMap::new(),
            pending: BTreeSet::new(),
            counters: CommitCounters::default(),
            failure: None,
        };
        for (index, record) in c.log.records().into_iter().enumerate() {
            c.replay(record).map_err(|reason| CommitError::BadLog { index, reason })?;
        }
        let mut out = CommitOutput::default();
        let open: Vec<TxnId> = c.open.iter().copied().collect();
        for txn in open {
            if c.coordinating[&txn].decision.is_none() {
                // Presumed abort: no decision was logged, so none was sent.
                c.counters.recovery_aborts += 1;
                c.decide_as_coordinator(txn, false, &mut out)?;
            } else {
                c.send_decision(txn, &mut out);
            }
        }
        for &txn in &c.pending {
            let p = &c.participating[&txn];
            if p.stand == (Stand::Voted { yes: true }) {
                out.sends.push((txn.coordinator, CommitMsg::Vote { txn, yes: true }));
                c.counters.votes_resent += 1;
            }
        }
        Ok((c, out))
    }

    /// Applies one record of an earlier incarnation, or says why it cannot follow the others.
    fn replay(&mut self, record: CommitRecord<T>) -> Result<(), String> {
        match record {
            CommitRecord::Begin { txn, participants } => {
                if txn.coordinator != self.me {
                    return Err(format!("begin of {txn}, which {} does not coordinate", self.me));
                }
                if self.coordinating.contains_key(&txn) {
                    return Err(format!("{txn} begun twice"));
                }
                self.next_seq = self.next_seq.max(txn.seq + 1);
                self.open.insert(txn);
                self.coordinating.insert(
                    txn,
                    Coordinated {
                        participants,
                        payload: None,
                        votes: BTreeMap::new(),
                        decision: None,
                        acked: BTreeSet::new(),
                        begun: 0,
                        last_sent: 0,
                    },
                );
            }
            CommitRecord::Vote { txn, participants, yes, payload } => {
                if self.participating.contains_key(&txn) {
                    return Err(format!("a second vote on {txn}"));
                }
                if yes {
                    self.pending.insert(txn);
                }
                self.participating
                    .insert(txn, Participation { participants, payload, stand: Stand::Voted { yes }, last_sent: 0 });
            }
            CommitRecord::Decision { txn, role: Role::Coordinator, commit, .. } => {
                let c = self.coordinating.get_mut(&txn).ok_or(format!("decision on {txn}, never begun"))?;
                if c.decision.is_some() {
                    return Err(format!("a second coordinator decision on {txn}"));
                }
                c.decision = Some(commit);
            }
            CommitRecord::Decision { txn, role: Role::Participant, participants, commit } => {
                let p = self.participating.entry(txn).or_insert(Participation {
                    participants,
                    payload: None,
                    stand: Stand::Certifying,
                    last_sent: 0,
                });
                match p.stand {
                    Stand::Decided { .. } => return Err(format!("a second participant decision on {txn}")),
                    Stand::Voted { yes: true } => {}
                    _ if commit => return Err(format!("commit of {txn} without a yes vote")),
                    _ => {}
                }
                p.stand = Stand::Decided { commit };
                self.pending.remove(&txn);
            }
            CommitRecord::End { txn } => {
                let c = self.coordinating.get(&txn).ok_or(format!("end of {txn}, never begun"))?;
                if c.decision.is_none() {
                    return Err(format!("end of {txn}, undecided"));
                }
                self.open.remove(&txn);
            }
        }
        Ok(())
    }

    pub fn id(&self) -> ProcessId {
        self.me
    }

    /// The next transaction counter of this coordinator.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The decision this process took on `txn` in `role`, if any (from its log, whatever the
    /// incarnation).
    pub fn decision(&self, txn: TxnId, role: Role) -> Option<bool> {
        match role {
            Role::Coordinator => self.coordinating.get(&txn).and_then(|c| c.decision),
            Role::Participant => match self.participating.get(&txn)?.stand {
                Stand::Decided { commit } => Some(commit),
                _ => None,
            },
        }
    }

    /// Transactions this process still works for: coordinated and not acknowledged by every
    /// participant, or taken part in and undecided (certifying or voted *yes*).
    pub fn pending(&self) -> usize {
        self.open.len() + self.pending.len()
    }

    pub fn counters(&self) -> &CommitCounters {
        &self.counters
    }

    /// Why the component stopped (a log write failed), if it did.
    pub fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn running(&self) -> Result<(), CommitError> {
        match &self.failure {
            Some(f) => Err(CommitError::Stopped(f.clone())),
            None => Ok(()),
        }
    }

    /// Appends `record`; a failure stops the component, so nothing that depends on the record
    /// is ever sent.
    fn append(&mut self, record: CommitRecord<T>) -> Result<(), CommitError> {
        self.log.append(&record).map_err(|e| {
            self.failure = Some(e.to_string());
            CommitError::Log(e)
        })
    }

    /// Coordinator: begins a transaction with `payload` on `participants` (sorted and deduplicated
    /// here) and sends them PREPARE.
    pub fn begin(
        &mut self,
        payload: T,
        mut participants: Vec<ProcessId>,
    ) -> Result<(TxnId, CommitOutput<T>), CommitError> {
        self.running()?;
        participants.sort();
        participants.dedup();
        if participants.is_empty() {
            return Err(CommitError::NoParticipants);
        }
        let txn = TxnId { coordinator: self.me, seq: self.next_seq };
        self.append(CommitRecord::Begin { txn, participants: participants.clone() })?;
        self.next_seq += 1;
        let mut out = CommitOutput::default();
        for &p in &participants {
            out.sends.push((p, CommitMsg::Prepare { txn, participants: participants.clone(), payload: payload.clone() }));
        }
        self.open.insert(txn);
        self.coordinating.insert(
            txn,
            Coordinated {
                participants,
                payload: Some(payload),
                votes: BTreeMap::new(),
                decision: None,
                acked: BTreeSet::new(),
                begun: self.clock,
                last_sent: self.clock,
            },
        );
        Ok((txn, out))
    }

    /// Participant: the embedder's certification of `txn` (asked by a [`VoteRequest`]). A vote
    /// on a transaction decided meanwhile (an abort overtook the certification) is ignored.
    pub fn vote(&mut self, txn: TxnId, yes: bool) -> Result<CommitOutput<T>, CommitError> {
        self.running()?;
        let mut out = CommitOutput::default();
        match self.participating.get(&txn).map(|p| p.stand) {
            Some(Stand::Certifying) => {
                let p = &self.participating[&txn];
                let (participants, payload) = (p.participants.clone(), p.payload.clone());
                self.cast_vote(txn, participants, payload, yes, false, &mut out)?;
                Ok(out)
            }
            Some(Stand::Decided { .. }) => Ok(out),
            _ => Err(CommitError::NotRequested(txn)),
        }
    }

    /// Handles `msg` from `from`. A [`CommitError::Refused`] changed nothing.
    pub fn on_message(&mut self, from: ProcessId, msg: CommitMsg<T>) -> Result<CommitOutput<T>, CommitError> {
        self.running()?;
        let mut out = CommitOutput::default();
        match msg {
            CommitMsg::Prepare { txn, participants, payload } => self.on_prepare(from, txn, participants, payload, &mut out)?,
            CommitMsg::Vote { txn, yes } => self.on_vote(from, txn, yes, &mut out)?,
            CommitMsg::Decision { txn, participants, commit } => self.on_decision(from, txn, participants, commit, &mut out)?,
            CommitMsg::Ack { txn } => self.on_ack(from, txn)?,
        }
        Ok(out)
    }

    /// Resends what is unanswered and applies the vote timeout. Call it from a timer.
    pub fn tick(&mut self) -> Result<CommitOutput<T>, CommitError> {
        self.running()?;
        self.clock += 1;
        let mut out = CommitOutput::default();
        let now = self.clock;
        let every = self.config.resend_ticks;
        let mut timed_out = Vec::new();
        for &txn in &self.open {
            let c = self.coordinating.get_mut(&txn).expect("open transactions are coordinated");
            match c.decision {
                None if self.config.vote_timeout_ticks.is_some_and(|t| now - c.begun >= t) => timed_out.push(txn),
                None if now - c.last_sent >= every => {
                    c.last_sent = now;
                    let payload = c.payload.as_ref().expect("undecided transactions were begun in this incarnation");
                    for &p in c.participants.iter().filter(|p| !c.votes.contains_key(p)) {
                        out.sends.push((
                            p,
                            CommitMsg::Prepare { txn, participants: c.participants.clone(), payload: payload.clone() },
                        ));
                        self.counters.prepares_resent += 1;
                    }
                }
                Some(commit) if now - c.last_sent >= every => {
                    c.last_sent = now;
                    for &p in c.participants.iter().filter(|p| !c.acked.contains(p)) {
                        out.sends.push((p, CommitMsg::Decision { txn, participants: c.participants.clone(), commit }));
                        self.counters.decisions_resent += 1;
                    }
                }
                _ => {}
            }
        }
        for &txn in &self.pending {
            let p = self.participating.get_mut(&txn).expect("pending transactions are taken part in");
            if p.stand == (Stand::Voted { yes: true }) && now - p.last_sent >= every {
                // Blocked: only the coordinator may decide, so keep asking it.
                p.last_sent = now;
                out.sends.push((txn.coordinator, CommitMsg::Vote { txn, yes: true }));
                self.counters.votes_resent += 1;
            }
        }
        for txn in timed_out {
            self.counters.timeout_aborts += 1;
            self.decide_as_coordinator(txn, false, &mut out)?;
        }
        Ok(out)
    }

    /// Refuses participants that are not sorted and distinct or do not include this process.
    fn addressed(&self, kind: &'static str, txn: TxnId, participants: &[ProcessId]) -> Result<(), CommitRefusal> {
        if participants.is_empty() || participants.windows(2).any(|w| w[0] >= w[1]) {
            return Err(CommitRefusal::MalformedParticipants { kind, txn, participants: participants.to_vec() });
        }
        if participants.binary_search(&self.me).is_err() {
            return Err(CommitRefusal::NotAddressed { kind, txn, me: self.me, participants: participants.to_vec() });
        }
        if let Some(p) = self.participating.get(&txn) {
            if p.participants != participants {
                return Err(CommitRefusal::OtherParticipants {
                    kind,
                    txn,
                    found: participants.to_vec(),
                    known: p.participants.clone(),
                });
            }
        }
        Ok(())
    }

    fn on_prepare(
        &mut self,
        from: ProcessId,
        txn: TxnId,
        participants: Vec<ProcessId>,
        payload: T,
        out: &mut CommitOutput<T>,
    ) -> Result<(), CommitError> {
        if from != txn.coordinator {
            return Err(CommitRefusal::NotTheCoordinator { kind: "prepare", txn, from }.into());
        }
        self.addressed("prepare", txn, &participants)?;
        if let Some(p) = self.participating.get_mut(&txn) {
            // A repeated PREPARE: the coordinator lacks our vote. Answer with the logged one.
            if let Stand::Voted { yes } = p.stand {
                p.last_sent = self.clock;
                out.sends.push((txn.coordinator, CommitMsg::Vote { txn, yes }));
                self.counters.votes_resent += 1;
            }
            return Ok(());
        }
        // Algorithm 4, line 3: every pending transaction precedes this one in Q.
        let preempted = self.pending.iter().any(|t| {
            self.participating[t].payload.as_ref().is_some_and(|other| !payload.commutes(other))
        });
        if preempted {
            self.counters.preemptive_aborts += 1;
            return self.cast_vote(txn, participants, None, false, true, out);
        }
        self.participating
            .insert(txn, Participation { participants, payload: Some(payload.clone()), stand: Stand::Certifying, last_sent: 0 });
        self.pending.insert(txn);
        out.vote_requests.push(VoteRequest { txn, payload });
        Ok(())
    }

    /// Logs the vote, then sends it to the coordinator.
    fn cast_vote(
        &mut self,
        txn: TxnId,
        participants: Vec<ProcessId>,
        payload: Option<T>,
        yes: bool,
        preemptive: bool,
        out: &mut CommitOutput<T>,
    ) -> Result<(), CommitError> {
        let payload = if yes { payload } else { None };
        self.append(CommitRecord::Vote { txn, participants: participants.clone(), yes, payload: payload.clone() })?;
        if yes {
            self.pending.insert(txn);
        } else {
            self.pending.remove(&txn);
        }
        self.participating
            .insert(txn, Participation { participants, payload, stand: Stand::Voted { yes }, last_sent: self.clock });
        out.voted.push(Voted { txn, yes, preemptive });
        out.sends.push((txn.coordinator, CommitMsg::Vote { txn, yes }));
        Ok(())
    }

    /// The coordinator's checks of a vote or acknowledgement: its own, begun, from a participant.
    fn coordinated(&self, kind: &'static str, from: ProcessId, txn: TxnId) -> Result<&Coordinated<T>, CommitRefusal> {
        if txn.coordinator != self.me {
            return Err(CommitRefusal::NotCoordinating { kind, txn, me: self.me });
        }
        let c = self.coordinating.get(&txn).ok_or(CommitRefusal::UnknownTransaction { kind, txn, me: self.me })?;
        if c.participants.binary_search(&from).is_err() {
            return Err(CommitRefusal::NotAParticipant { kind, txn, from, participants: c.participants.clone() });
        }
        Ok(c)
    }

    fn on_vote(&mut self, from: ProcessId, txn: TxnId, yes: bool, out: &mut CommitOutput<T>) -> Result<(), CommitError> {
        let c = self.coordinated("vote", from, txn)?;
        if let Some(&earlier) = c.votes.get(&from) {
            if earlier != yes {
                return Err(CommitRefusal::ChangedVote { txn, from, yes, earlier }.into());
            }
        }
        if let Some(commit) = c.decision {
            // A late vote, or a blocked participant asking: tell it the outcome.
            let participants = c.participants.clone();
            out.sends.push((from, CommitMsg::Decision { txn, participants, commit }));
            self.counters.decisions_resent += 1;
            return Ok(());
        }
        let c = self.coordinating.get_mut(&txn).expect("checked above");
        c.votes.insert(from, yes);
        let all_yes = c.votes.len() == c.participants.len() && c.votes.values().all(|&v| v);
        if !yes {
            self.decide_as_coordinator(txn, false, out)?;
        } else if all_yes || self.config.broken_commit_on_first_yes {
            self.decide_as_coordinator(txn, true, out)?;
        }
        Ok(())
    }

    /// Logs the decision, then sends it to every participant.
    fn decide_as_coordinator(&mut self, txn: TxnId, commit: bool, out: &mut CommitOutput<T>) -> Result<(), CommitError> {
        let participants = self.coordinating[&txn].participants.clone();
        self.append(CommitRecord::Decision { txn, role: Role::Coordinator, participants, commit })?;
        let c = self.coordinating.get_mut(&txn).expect("decided transactions are coordinated");
        c.decision = Some(commit);
        // Votes are no longer needed, nor the payload (no PREPARE is resent once decided).
        c.payload = None;
        out.decided.push(Decided { txn, role: Role::Coordinator, commit });
        self.send_decision(txn, out);
        Ok(())
    }

    fn send_decision(&mut self, txn: TxnId, out: &mut CommitOutput<T>) {
        let c = self.coordinating.get_mut(&txn).expect("decided transactions are coordinated");
        let commit = c.decision.expect("sent only once decided");
        c.last_sent = self.clock;
        for &p in c.participants.iter().filter(|p| !c.acked.contains(p)) {
            out.sends.push((p, CommitMsg::Decision { txn, participants: c.participants.clone(), commit }));
        }
    }

    fn on_ack(&mut self, from: ProcessId, txn: TxnId) -> Result<(), CommitError> {
        let c = self.coordinated("ack", from, txn)?;
        if c.decision.is_none() {
            return Err(CommitRefusal::AckBeforeDecision { txn, from }.into());
        }
        let done = c.acked.len() + usize::from(!c.acked.contains(&from)) == c.participants.len();
        if done && self.open.contains(&txn) {
            self.append(CommitRecord::End { txn })?;
            self.open.remove(&txn);
        }
        self.coordinating.get_mut(&txn).expect("checked above").acked.insert(from);
        Ok(())
    }

    fn on_decision(
        &mut self,
        from: ProcessId,
        txn: TxnId,
        participants: Vec<ProcessId>,
        commit: bool,
        out: &mut CommitOutput<T>,
    ) -> Result<(), CommitError> {
        if from != txn.coordinator {
            return Err(CommitRefusal::NotTheCoordinator { kind: "decision", txn, from }.into());
        }
        self.addressed("decision", txn, &participants)?;
        let stand = self.participating.get(&txn).map(|p| p.stand);
        match stand {
            Some(Stand::Decided { commit: logged }) if logged == commit => {
                // A resent decision: our acknowledgement was lost.
                out.sends.push((from, CommitMsg::Ack { txn }));
                return Ok(());
            }
            Some(Stand::Decided { commit: logged }) => {
                return Err(CommitRefusal::ContradictsDecision { txn, from, me: self.me, commit, logged }.into());
            }
            Some(Stand::Voted { yes: true }) => {}
            // Presumed abort covers a participant that never voted (nor logged anything).
            _ if commit => return Err(CommitRefusal::CommitWithoutYes { txn, from, me: self.me }.into()),
            _ => {}
        }
        self.append(CommitRecord::Decision { txn, role: Role::Participant, participants: participants.clone(), commit })?;
        let p = self.participating.entry(txn).or_insert(Participation {
            participants,
            payload: None,
            stand: Stand::Certifying,
            last_sent: 0,
        });
        p.stand = Stand::Decided { commit };
        self.pending.remove(&txn);
        out.decided.push(Decided { txn, role: Role::Participant, commit });
        out.sends.push((from, CommitMsg::Ack { txn }));
        Ok(())
    }
}
