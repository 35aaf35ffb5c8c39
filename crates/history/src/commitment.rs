//! Checking the commit log of an atomic-commitment run (two-phase commit, issue 12): did the
//! processes' votes and decisions keep the properties of atomic commitment, and Algorithm 4's
//! preemptive abort?
//!
//! A [`CommitmentLog`] is the transactions begun (each with its coordinator and participants),
//! every process's sequence of events in the order it took them, across its incarnations (votes,
//! decisions with the role they were taken in, crashes and recoveries), optionally the pairs of
//! transactions that do not commute, and whether the run was free of failures. [`check`] decides
//! every property of [`CommitProperty`] that applies.
//!
//! # The properties
//!
//! From Bernstein, Hadzilacos and Goodman (*Concurrency Control and Recovery in Database
//! Systems*, ch. 7, AC1–AC5), for every transaction of the log:
//!
//! * [`CommitProperty::Agreement`] (AC1) — all processes that decide reach the same decision:
//!   no transaction is decided commit by some process (in either role) and abort by another
//!   (each decider's first decision; a later, different one is a reversal).
//! * [`CommitProperty::NoReversal`] (AC2) — a process cannot reverse its decision: no process
//!   decides a transaction in one role twice with different outcomes, across its incarnations.
//! * [`CommitProperty::Validity`] (AC3) — the commit decision can only be reached if all
//!   processes voted yes: if any process decides commit, every participant voted *yes* (at some
//!   point of its sequence), and a participant that decides commit voted *yes* before it.
//! * [`CommitProperty::NonTriviality`] (AC4) — if there are no failures and all processes voted
//!   yes, the decision is commit. Checked only on logs marked failure-free
//!   ([`CommitmentLog::failure_free`]: no crash, no lost message, no suspicion), where every
//!   transaction whose participants all voted *yes* must have no abort decision.
//! * [`CommitProperty::Termination`] (AC5) — once failures are repaired, all processes
//!   eventually decide. Checked at the end of the run: the coordinator (as coordinator) and every
//!   participant (as participant) of every transaction decided it, except processes *crashed for
//!   good* (whose last crash has no recovery after it). A harness checks it only on runs that went
//!   on until their faults healed.
//!
//! And two more:
//!
//! * [`CommitProperty::Integrity`] — each process votes at most once on a transaction and
//!   decides it at most once per role, across its incarnations (a recovered process must not
//!   vote or decide again what its log says it did); only participants vote or decide as
//!   participants, only the coordinator decides as coordinator; every transaction named was
//!   begun.
//! * [`CommitProperty::Preemption`] — G-DUR's Algorithm 4, line 3: a participant votes *no* on
//!   a transaction when a pending one that precedes it does not commute with it. The checked
//!   rule: **no participant votes *yes* on a transaction T while it has voted *yes* on a
//!   transaction T′ that does not commute with T and has not yet decided T′ (as participant)**,
//!   in the order of its own sequence. So no participant ever holds two non-commuting
//!   transactions both voted *yes* and undecided. Crashes do not end a pending vote: votes are
//!   logged. Checked only when the log says which transactions conflict
//!   ([`CommitmentLog::conflicts`]).
//!
//! # Cost
//!
//! Linear in the log, but for preemption: each *yes* vote is compared with the participant's
//! pending transactions.
//!
//! ```
//! use ensemble_history::commitment::{check, CommitProperty, CommitmentLog, Role};
//!
//! let mut log = CommitmentLog::new();
//! log.begin(1, 0, [1, 2]);
//! log.vote(1, 1, true);
//! log.vote(2, 1, false);
//! log.decide(0, 1, Role::Coordinator, true); // commit despite a no
//! log.decide(1, 1, Role::Participant, true);
//! log.decide(2, 1, Role::Participant, true);
//! let report = check(&log);
//! assert!(!report.holds(CommitProperty::Validity));
//! assert!(report.to_string().contains("AC3 validity: T1 decided commit by p0 (coordinator)"));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A transaction's number in the log.
pub type TxnNo = u64;
/// A process's number in the log.
pub type ProcessNo = u32;

/// The role a decision was taken in: a process may coordinate a transaction and take part in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Coordinator,
    Participant,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Coordinator => "coordinator",
            Role::Participant => "participant",
        })
    }
}

/// Something a process did, in the order it did it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitEvent {
    Vote { txn: TxnNo, yes: bool },
    Decide { txn: TxnNo, role: Role, commit: bool },
    /// The process crashed (pause or loss of volatile state).
    Crash,
    /// The process came back.
    Recover,
}

/// A transaction begun: its coordinator and participants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnInfo {
    pub coordinator: ProcessNo,
    pub participants: BTreeSet<ProcessNo>,
}

/// The commit log of a run. Build it with the methods, or fill the fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitmentLog {
    pub transactions: BTreeMap<TxnNo, TxnInfo>,
    /// Every process's events in order. A process with no events may be absent.
    pub processes: BTreeMap<ProcessNo, Vec<CommitEvent>>,
    /// Pairs of transactions that do not commute, smaller number first. `None`: not known, and
    /// preemption is not checked; `Some` of an empty set: every pair commutes.
    pub conflicts: Option<BTreeSet<(TxnNo, TxnNo)>>,
    /// No crash, no lost message, no suspicion in the run: AC4 applies.
    pub failure_free: bool,
}

impl CommitmentLog {
    pub fn new() -> CommitmentLog {
        CommitmentLog::default()
    }

    /// `txn` was begun by `coordinator` on `participants`.
    pub fn begin(&mut self, txn: TxnNo, coordinator: ProcessNo, participants: impl IntoIterator<Item = ProcessNo>) {
        let participants = participants.into_iter().collect();
        self.transactions.insert(txn, TxnInfo { coordinator, participants });
        self.processes.entry(coordinator).or_default();
    }

    pub fn vote(&mut self, process: ProcessNo, txn: TxnNo, yes: bool) {
        self.processes.entry(process).or_default().push(CommitEvent::Vote { txn, yes });
    }

    pub fn decide(&mut self, process: ProcessNo, txn: TxnNo, role: Role, commit: bool) {
        self.processes.entry(process).or_default().push(CommitEvent::Decide { txn, role, commit });
    }

    pub fn crash(&mut self, process: ProcessNo) {
        self.processes.entry(process).or_default().push(CommitEvent::Crash);
    }

    pub fn recover(&mut self, process: ProcessNo) {
        self.processes.entry(process).or_default().push(CommitEvent::Recover);
    }

    /// `a` and `b` do not commute (and the log now says which pairs conflict).
    pub fn conflict(&mut self, a: TxnNo, b: TxnNo) {
        self.conflicts.get_or_insert_with(BTreeSet::new).insert((a.min(b), a.max(b)));
    }

    /// The log says which pairs conflict, even if none does.
    pub fn conflicts_known(&mut self) {
        self.conflicts.get_or_insert_with(BTreeSet::new);
    }

    fn conflicting(&self, a: TxnNo, b: TxnNo) -> bool {
        self.conflicts.as_ref().is_some_and(|c| c.contains(&(a.min(b), a.max(b))))
    }

    /// Whether `process`'s last crash has no recovery after it.
    pub fn crashed_for_good(&self, process: ProcessNo) -> bool {
        self.processes.get(&process).is_some_and(|es| {
            es.iter().rev().find(|e| matches!(e, CommitEvent::Crash | CommitEvent::Recover)) == Some(&CommitEvent::Crash)
        })
    }
}

/// What [`check`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommitProperty {
    Agreement,
    NoReversal,
    Validity,
    NonTriviality,
    Termination,
    Integrity,
    Preemption,
}

impl CommitProperty {
    pub const ALL: [CommitProperty; 7] = [
        CommitProperty::Agreement,
        CommitProperty::NoReversal,
        CommitProperty::Validity,
        CommitProperty::NonTriviality,
        CommitProperty::Termination,
        CommitProperty::Integrity,
        CommitProperty::Preemption,
    ];
}

impl fmt::Display for CommitProperty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CommitProperty::Agreement => "AC1 agreement",
            CommitProperty::NoReversal => "AC2 no reversal",
            CommitProperty::Validity => "AC3 validity",
            CommitProperty::NonTriviality => "AC4 non-triviality",
            CommitProperty::Termination => "AC5 termination",
            CommitProperty::Integrity => "integrity",
            CommitProperty::Preemption => "preemption",
        })
    }
}

/// A decider: a process and the role it decided in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Decider {
    pub process: ProcessNo,
    pub role: Role,
}

impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{} ({})", self.process, self.role)
    }
}

/// One violation, naming the property, the transaction and the processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitViolation {
    /// AC1.
    Disagreement { txn: TxnNo, commit: Vec<Decider>, abort: Vec<Decider> },
    /// AC2: `first` then the opposite.
    Reversal { txn: TxnNo, by: Decider, first: bool },
    /// AC3: commit decided although these participants did not vote *yes* (`no`: voted *no*;
    /// `silent`: never voted).
    CommitWithoutYes { txn: TxnNo, by: Decider, no: Vec<ProcessNo>, silent: Vec<ProcessNo> },
    /// AC3: a participant decided commit before its own *yes*.
    CommitBeforeYes { txn: TxnNo, process: ProcessNo },
    /// AC4: every participant voted *yes* in a failure-free run, and the decision was abort.
    TrivialAbort { txn: TxnNo, by: Vec<Decider> },
    /// AC5: these processes never decided.
    Undecided { txn: TxnNo, missing: Vec<Decider> },
    /// Integrity: a transaction never begun.
    UnknownTransaction { txn: TxnNo, process: ProcessNo },
    /// Integrity: a vote or participant decision by a process that is not a participant.
    NotAParticipant { txn: TxnNo, process: ProcessNo, what: &'static str },
    /// Integrity: a coordinator decision by a process that is not the coordinator.
    NotTheCoordinator { txn: TxnNo, process: ProcessNo, coordinator: ProcessNo },
    /// Integrity: the same decision twice.
    DecidedTwice { txn: TxnNo, by: Decider },
    /// Integrity: a second vote (`changed`: a different one).
    VotedTwice { txn: TxnNo, process: ProcessNo, changed: bool },
    /// Preemption: `process` voted *yes* on `second` while `first`, which does not commute with
    /// it, was voted *yes* and undecided there.
    BothPending { process: ProcessNo, first: TxnNo, second: TxnNo },
}

impl CommitViolation {
    pub fn property(&self) -> CommitProperty {
        match self {
            CommitViolation::Disagreement { .. } => CommitProperty::Agreement,
            CommitViolation::Reversal { .. } => CommitProperty::NoReversal,
            CommitViolation::CommitWithoutYes { .. } | CommitViolation::CommitBeforeYes { .. } => CommitProperty::Validity,
            CommitViolation::TrivialAbort { .. } => CommitProperty::NonTriviality,
            CommitViolation::Undecided { .. } => CommitProperty::Termination,
            CommitViolation::UnknownTransaction { .. }
            | CommitViolation::NotAParticipant { .. }
            | CommitViolation::NotTheCoordinator { .. }
            | CommitViolation::DecidedTwice { .. }
            | CommitViolation::VotedTwice { .. } => CommitProperty::Integrity,
            CommitViolation::BothPending { .. } => CommitProperty::Preemption,
        }
    }
}

/// `p0, p3 (participant)` from a list of deciders or processes.
fn list<D: fmt::Display>(items: &[D]) -> String {
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn ps(items: &[ProcessNo]) -> String {
    items.iter().map(|p| format!("p{p}")).collect::<Vec<_>>().join(", ")
}

fn outcome(commit: bool) -> &'static str {
    if commit {
        "commit"
    } else {
        "abort"
    }
}

impl fmt::Display for CommitViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.property())?;
        match self {
            CommitViolation::Disagreement { txn, commit, abort } => {
                write!(f, "T{txn} decided commit by {} and abort by {}", list(commit), list(abort))
            }
            CommitViolation::Reversal { txn, by, first } => {
                write!(f, "T{txn} decided {} then {} by {by}", outcome(*first), outcome(!*first))
            }
            CommitViolation::CommitWithoutYes { txn, by, no, silent } => {
                write!(f, "T{txn} decided commit by {by}")?;
                if !no.is_empty() {
                    write!(f, "; {} voted no", ps(no))?;
                }
                if !silent.is_empty() {
                    write!(f, "; {} never voted", ps(silent))?;
                }
                Ok(())
            }
            CommitViolation::CommitBeforeYes { txn, process } => {
                write!(f, "T{txn} decided commit by p{process} (participant) before its yes vote")
            }
            CommitViolation::TrivialAbort { txn, by } => {
                write!(f, "T{txn} decided abort by {} in a failure-free run where every participant voted yes", list(by))
            }
            CommitViolation::Undecided { txn, missing } => write!(f, "T{txn} never decided by {}", list(missing)),
            CommitViolation::UnknownTransaction { txn, process } => write!(f, "p{process} names T{txn}, never begun"),
            CommitViolation::NotAParticipant { txn, process, what } => {
                write!(f, "{what} on T{txn} by p{process}, not one of its participants")
            }
            CommitViolation::NotTheCoordinator { txn, process, coordinator } => {
                write!(f, "coordinator decision on T{txn} by p{process}; its coordinator is p{coordinator}")
            }
            CommitViolation::DecidedTwice { txn, by } => write!(f, "T{txn} decided twice by {by}"),
            CommitViolation::VotedTwice { txn, process, changed } => {
                write!(f, "T{txn} voted on twice by p{process}{}", if *changed { ", differently" } else { "" })
            }
            CommitViolation::BothPending { process, first, second } => write!(
                f,
                "p{process} voted yes on T{second} while T{first}, which does not commute with it, was voted yes and \
                 undecided there"
            ),
        }
    }
}

/// Sizes of what was checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitCounts {
    pub transactions: usize,
    /// Transactions some process decided commit (or abort).
    pub committed: usize,
    pub aborted: usize,
    pub votes: usize,
    pub no_votes: usize,
    pub decisions: usize,
    pub crashes: usize,
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitmentReport {
    pub violations: Vec<CommitViolation>,
    pub counts: CommitCounts,
    /// Properties that were not checked, because the log does not say enough (AC4 on a run
    /// with failures, preemption without conflicts).
    pub not_checked: Vec<CommitProperty>,
}

impl CommitmentReport {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The property was checked and holds.
    pub fn holds(&self, property: CommitProperty) -> bool {
        !self.not_checked.contains(&property) && self.violations.iter().all(|v| v.property() != property)
    }

    /// The first violation of `property`, if any.
    pub fn violation(&self, property: CommitProperty) -> Option<&CommitViolation> {
        self.violations.iter().find(|v| v.property() == property)
    }
}

impl fmt::Display for CommitmentReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counts;
        let sizes = format!(
            "{} transactions ({} committed, {} aborted), {} votes ({} no), {} decisions, {} crashes",
            c.transactions, c.committed, c.aborted, c.votes, c.no_votes, c.decisions, c.crashes
        );
        if self.ok() {
            write!(f, "atomic commitment: ok, {sizes}")?;
        } else {
            write!(f, "atomic commitment: {} violation(s), {sizes}", self.violations.len())?;
            for v in &self.violations {
                write!(f, "\n  {v}")?;
            }
        }
        if !self.not_checked.is_empty() {
            write!(f, "\n  not checked: {}", list(&self.not_checked))?;
        }
        Ok(())
    }
}

/// Checks `log` against every property that applies to it.
pub fn check(log: &CommitmentLog) -> CommitmentReport {
    let mut report = CommitmentReport::default();
    let mut v = Vec::new();
    // Per transaction: first decision of each decider, and each participant's first vote.
    let mut decisions: BTreeMap<TxnNo, BTreeMap<Decider, bool>> = BTreeMap::new();
    let mut votes: BTreeMap<TxnNo, BTreeMap<ProcessNo, bool>> = BTreeMap::new();

    for (&p, events) in &log.processes {
        let mut pending: BTreeSet<TxnNo> = BTreeSet::new();
        let mut voted: BTreeMap<TxnNo, bool> = BTreeMap::new();
        for e in events {
            match *e {
                CommitEvent::Crash => report.counts.crashes += 1,
                CommitEvent::Recover => {}
                CommitEvent::Vote { txn, yes } => {
                    report.counts.votes += 1;
                    report.counts.no_votes += usize::from(!yes);
                    let Some(info) = log.transactions.get(&txn) else {
                        v.push(CommitViolation::UnknownTransaction { txn, process: p });
                        continue;
                    };
                    if !info.participants.contains(&p) {
                        v.push(CommitViolation::NotAParticipant { txn, process: p, what: "vote" });
                        continue;
                    }
                    if let Some(&earlier) = voted.get(&txn) {
                        v.push(CommitViolation::VotedTwice { txn, process: p, changed: earlier != yes });
                        continue;
                    }
                    voted.insert(txn, yes);
                    votes.entry(txn).or_default().insert(p, yes);
                    if yes {
                        for &other in &pending {
                            if log.conflicting(txn, other) {
                                v.push(CommitViolation::BothPending { process: p, first: other, second: txn });
                            }
                        }
                        pending.insert(txn);
                    }
                }
                CommitEvent::Decide { txn, role, commit } => {
                    report.counts.decisions += 1;
                    let Some(info) = log.transactions.get(&txn) else {
                        v.push(CommitViolation::UnknownTransaction { txn, process: p });
                        continue;
                    };
                    match role {
                        Role::Coordinator if info.coordinator != p => {
                            v.push(CommitViolation::NotTheCoordinator { txn, process: p, coordinator: info.coordinator });
                            continue;
                        }
                        Role::Participant if !info.participants.contains(&p) => {
                            v.push(CommitViolation::NotAParticipant { txn, process: p, what: "participant decision" });
                            continue;
                        }
                        _ => {}
                    }
                    let by = Decider { process: p, role };
                    let mine = decisions.entry(txn).or_default();
                    if let Some(&first) = mine.get(&by) {
                        v.push(if first == commit {
                            CommitViolation::DecidedTwice { txn, by }
                        } else {
                            CommitViolation::Reversal { txn, by, first }
                        });
                        continue;
                    }
                    mine.insert(by, commit);
                    if role == Role::Participant {
                        if commit && voted.get(&txn) != Some(&true) {
                            v.push(CommitViolation::CommitBeforeYes { txn, process: p });
                        }
                        pending.remove(&txn);
                    }
                }
            }
        }
    }

    for (&txn, info) in &log.transactions {
        let decided = decisions.get(&txn);
        let (commit, abort): (Vec<Decider>, Vec<Decider>) = match decided {
            Some(d) => {
                let commit = d.iter().filter(|(_, &c)| c).map(|(by, _)| *by).collect();
                let abort = d.iter().filter(|(_, &c)| !c).map(|(by, _)| *by).collect();
                (commit, abort)
            }
            None => (Vec::new(), Vec::new()),
        };
        report.counts.committed += usize::from(!commit.is_empty());
        report.counts.aborted += usize::from(commit.is_empty() && !abort.is_empty());
        if !commit.is_empty() && !abort.is_empty() {
            v.push(CommitViolation::Disagreement { txn, commit: commit.clone(), abort: abort.clone() });
        }
        let empty = BTreeMap::new();
        let vs = votes.get(&txn).unwrap_or(&empty);
        if let Some(&by) = commit.first() {
            let no: Vec<ProcessNo> = info.participants.iter().copied().filter(|p| vs.get(p) == Some(&false)).collect();
            let silent: Vec<ProcessNo> = info.participants.iter().copied().filter(|p| !vs.contains_key(p)).collect();
            if !no.is_empty() || !silent.is_empty() {
                v.push(CommitViolation::CommitWithoutYes { txn, by, no, silent });
            }
        }
        if log.failure_free && !abort.is_empty() && info.participants.iter().all(|p| vs.get(p) == Some(&true)) {
            v.push(CommitViolation::TrivialAbort { txn, by: abort.clone() });
        }
        let deciders = std::iter::once(Decider { process: info.coordinator, role: Role::Coordinator })
            .chain(info.participants.iter().map(|&p| Decider { process: p, role: Role::Participant }));
        let missing: Vec<Decider> = deciders
            .filter(|d| !log.crashed_for_good(d.process) && !decided.is_some_and(|m| m.contains_key(d)))
            .collect();
        if !missing.is_empty() {
            v.push(CommitViolation::Undecided { txn, missing });
        }
    }

    report.counts.transactions = log.transactions.len();
    if !log.failure_free {
        report.not_checked.push(CommitProperty::NonTriviality);
    }
    if log.conflicts.is_none() {
        report.not_checked.push(CommitProperty::Preemption);
    }
    v.sort_by_key(|x| x.property());
    report.violations = v;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T1 on p1, p2 by p0, committed; T2 on p2 by p0, aborted by a no.
    fn clean() -> CommitmentLog {
        let mut log = CommitmentLog::new();
        log.begin(1, 0, [1, 2]);
        log.begin(2, 0, [2]);
        log.conflict(1, 2);
        log.vote(1, 1, true);
        log.vote(2, 1, true);
        log.vote(2, 2, false);
        log.decide(0, 1, Role::Coordinator, true);
        log.decide(0, 2, Role::Coordinator, false);
        log.decide(1, 1, Role::Participant, true);
        log.decide(2, 1, Role::Participant, true);
        log.decide(2, 2, Role::Participant, false);
        log
    }

    /// Checks `log`, asserts the only violated property is `property`, and that the report
    /// names it and `names`.
    fn caught(log: &CommitmentLog, property: CommitProperty, names: &str) {
        let r = check(log);
        assert!(!r.ok(), "{r}");
        assert!(r.violations.iter().all(|v| v.property() == property), "{r}");
        let text = r.to_string();
        assert!(text.contains(&property.to_string()), "{text}");
        assert!(text.contains(names), "{text} lacks {names}");
    }

    #[test]
    fn a_clean_log_passes_every_checked_property() {
        let mut log = clean();
        let r = check(&log);
        assert!(r.ok(), "{r}");
        assert_eq!(r.not_checked, vec![CommitProperty::NonTriviality]);
        assert_eq!((r.counts.committed, r.counts.aborted, r.counts.no_votes), (1, 1, 1));
        log.failure_free = true;
        let r = check(&log);
        assert!(CommitProperty::ALL.iter().all(|&p| r.holds(p)), "{r}");
    }

    #[test]
    fn agreement_catches_a_commit_and_an_abort() {
        let mut log = clean();
        log.processes.get_mut(&2).unwrap().retain(|e| *e != CommitEvent::Decide { txn: 1, role: Role::Participant, commit: true });
        log.decide(2, 1, Role::Participant, false);
        caught(
            &log,
            CommitProperty::Agreement,
            "AC1 agreement: T1 decided commit by p0 (coordinator), p1 (participant) and abort by p2 (participant)",
        );
    }

    #[test]
    fn no_reversal_catches_a_decision_changed_after_a_crash() {
        let mut log = clean();
        log.crash(1);
        log.recover(1);
        log.decide(1, 1, Role::Participant, false);
        let r = check(&log);
        let v = r.violation(CommitProperty::NoReversal).expect("caught");
        assert_eq!(v.to_string(), "AC2 no reversal: T1 decided commit then abort by p1 (participant)");
        // Reported once: agreement compares each decider's first decision.
        assert!(r.holds(CommitProperty::Agreement), "{r}");
    }

    #[test]
    fn validity_catches_a_commit_without_every_yes() {
        let mut log = CommitmentLog::new();
        log.begin(7, 0, [1, 2, 3]);
        log.vote(1, 7, true);
        log.vote(2, 7, false);
        log.decide(0, 7, Role::Coordinator, true);
        log.decide(1, 7, Role::Participant, true);
        log.crash(2);
        log.crash(3);
        log.conflicts_known();
        caught(&log, CommitProperty::Validity, "T7 decided commit by p0 (coordinator); p2 voted no; p3 never voted");
        // And a participant committing before its own yes.
        let mut log = CommitmentLog::new();
        log.begin(8, 0, [1]);
        log.decide(0, 8, Role::Coordinator, true);
        log.decide(1, 8, Role::Participant, true);
        log.vote(1, 8, true);
        caught(&log, CommitProperty::Validity, "T8 decided commit by p1 (participant) before its yes vote");
    }

    #[test]
    fn non_triviality_catches_an_abort_of_all_yes_in_a_failure_free_run() {
        let mut log = CommitmentLog::new();
        log.begin(3, 0, [1]);
        log.vote(1, 3, true);
        log.decide(0, 3, Role::Coordinator, false);
        log.decide(1, 3, Role::Participant, false);
        assert!(check(&log).ok(), "with failures, an abort is allowed");
        log.failure_free = true;
        caught(&log, CommitProperty::NonTriviality, "T3 decided abort by p0 (coordinator), p1 (participant)");
    }

    #[test]
    fn termination_catches_the_undecided_but_not_the_crashed_for_good() {
        let mut log = clean();
        log.begin(4, 0, [1, 2]);
        log.vote(1, 4, true);
        log.vote(2, 4, true);
        log.decide(0, 4, Role::Coordinator, true);
        log.decide(1, 4, Role::Participant, true);
        log.crash(2);
        log.recover(2);
        caught(&log, CommitProperty::Termination, "T4 never decided by p2 (participant)");
        log.crash(2);
        assert!(check(&log).ok(), "p2 crashed for good");
    }

    #[test]
    fn integrity_catches_repeats_strangers_and_unknown_transactions() {
        let mut log = clean();
        log.decide(1, 1, Role::Participant, true);
        caught(&log, CommitProperty::Integrity, "T1 decided twice by p1 (participant)");
        let mut log = clean();
        log.vote(1, 1, true);
        caught(&log, CommitProperty::Integrity, "T1 voted on twice by p1");
        let mut log = clean();
        log.vote(3, 1, true);
        caught(&log, CommitProperty::Integrity, "vote on T1 by p3, not one of its participants");
        let mut log = clean();
        log.decide(1, 1, Role::Coordinator, true);
        caught(&log, CommitProperty::Integrity, "coordinator decision on T1 by p1; its coordinator is p0");
        let mut log = clean();
        log.vote(1, 9, true);
        caught(&log, CommitProperty::Integrity, "p1 names T9, never begun");
    }

    #[test]
    fn preemption_catches_two_conflicting_yes_votes_pending_together() {
        let mut log = CommitmentLog::new();
        log.begin(1, 0, [1]);
        log.begin(2, 5, [1]);
        log.conflict(2, 1);
        log.vote(1, 1, true);
        log.crash(1); // a crash does not end a pending vote
        log.recover(1);
        log.vote(1, 2, true);
        for (t, c) in [(1, 0), (2, 5)] {
            log.decide(c, t, Role::Coordinator, true);
            log.decide(1, t, Role::Participant, true);
        }
        caught(
            &log,
            CommitProperty::Preemption,
            "p1 voted yes on T2 while T1, which does not commute with it, was voted yes and undecided there",
        );
        // Deciding T1 first makes the second yes legal.
        let events = log.processes.get_mut(&1).unwrap();
        let d1 = events.iter().position(|e| matches!(e, CommitEvent::Decide { txn: 1, .. })).unwrap();
        let e = events.remove(d1);
        events.insert(1, e);
        assert!(check(&log).ok());
        // Unknown conflicts: not checked.
        log.conflicts = None;
        let r = check(&log);
        assert!(r.ok() && !r.holds(CommitProperty::Preemption));
    }
}
