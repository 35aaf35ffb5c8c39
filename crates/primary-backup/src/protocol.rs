//! The protocol proper: one primary that orders and executes, backups that install in its order.
//!
//! Why the result is serializable: the primary runs one transaction at a time, in arrival order,
//! and starts the next only when every replica has installed the previous one's write. So each
//! transaction reads the versions of exactly the transactions the primary committed before it,
//! and the primary's commit order is a serial order that every read agrees with. Backups install
//! each key's versions in the order the primary sent them (one storage job at a time, so not even
//! a worker pool reorders them), which is that same order: the replicas agree.

use crate::request::{parse, Rw};
use crate::storage::{Installed, KvJob};
use crate::{Key, TxnId};
use ensemble_core::{ClientId, Done, Effect, Event, Outcome, Process, ProcessId, Protocol, Reply, ReplyBody, Rows, Time, Value, WorkId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The primary is process 0; processes 1..n are its backups.
pub const PRIMARY: ProcessId = ProcessId(0);

/// The protocol's types, for the drivers.
#[derive(Debug)]
pub struct PrimaryBackup;

impl Protocol for PrimaryBackup {
    type Msg = Msg;
    type Job = KvJob;
    type JobResult = Installed;
    type Evidence = Evidence;
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Primary → backup: install this version after the ones sent before it.
    Install(KvJob),
    /// Backup → primary: `txn`'s version is installed here.
    Ack { txn: TxnId },
}

/// What a committed transaction's reply says for the checker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub txn: TxnId,
    /// Each key read, with the transaction whose version was read (`None`: the initial 0).
    pub reads: Vec<(Key, Option<TxnId>)>,
    /// The key written; its new value is the transaction id.
    pub write: Key,
}

fn reply(client: ClientId, seq: u64, body: ReplyBody<Evidence>) -> Effect<PrimaryBackup> {
    Effect::Reply { to: client, reply: Reply { client, seq, body } }
}

/// The transaction the primary is replicating: its reply waits for `awaiting` installs (the
/// primary's own and one per backup).
struct Replicating {
    rw: Rw,
    rows: Rows,
    evidence: Evidence,
    awaiting: usize,
}

pub struct Primary {
    backups: Vec<ProcessId>,
    install_cost: Duration,
    /// The latest committed version of each key, `(value, writer)`; absent keys hold 0.
    latest: BTreeMap<Key, (i64, TxnId)>,
    last_txn: TxnId,
    waiting: VecDeque<Rw>,
    current: Option<Replicating>,
    committed: u64,
    failure: Option<String>,
}

impl Primary {
    /// The primary of `replicas` processes; each install costs `install_cost` of storage time.
    pub fn new(replicas: u32, install_cost: Duration) -> Primary {
        let backups = (1..replicas).map(ProcessId).collect();
        Primary { backups, install_cost, latest: BTreeMap::new(), last_txn: 0, waiting: VecDeque::new(), current: None, committed: 0, failure: None }
    }

    /// Runs the next waiting transaction, unless one is still replicating.
    fn run_next(&mut self, out: &mut Vec<Effect<PrimaryBackup>>) {
        if self.current.is_some() {
            return;
        }
        let Some(rw) = self.waiting.pop_front() else { return };
        self.last_txn += 1;
        let txn = self.last_txn;
        let version = |k: &Key| self.latest.get(k).copied();
        let rows = rw.reads.iter().map(|k| vec![Value::Int(version(k).map_or(0, |(v, _)| v))]).collect();
        let reads = rw.reads.iter().map(|k| (*k, version(k).map(|(_, w)| w))).collect();
        let job = KvJob { txn, key: rw.write, value: txn as i64 };
        // Nothing reads `latest` before this transaction commits: the next one waits for it.
        self.latest.insert(job.key, (job.value, txn));
        for &b in &self.backups {
            out.push(Effect::Send { to: b, msg: Msg::Install(job.clone()) });
        }
        let evidence = Evidence { txn, reads, write: rw.write };
        out.push(Effect::Storage { work: WorkId(txn), job, cost: self.install_cost });
        self.current = Some(Replicating { rw, rows, evidence, awaiting: self.backups.len() + 1 });
    }

    /// One more replica holds `txn`'s write; when all do, the transaction commits.
    fn installed(&mut self, txn: TxnId, by: ProcessId, out: &mut Vec<Effect<PrimaryBackup>>) {
        let Some(cur) = self.current.as_mut().filter(|c| c.evidence.txn == txn) else {
            self.failure.get_or_insert_with(|| format!("{by} installed T{txn}, which is not replicating"));
            return;
        };
        cur.awaiting -= 1;
        if cur.awaiting > 0 {
            return;
        }
        let Replicating { rw, rows, evidence, .. } = self.current.take().expect("checked above");
        out.push(reply(rw.client, rw.seq, ReplyBody::Done(Done { outcome: Outcome::Committed(rows), evidence })));
        self.committed += 1;
        self.run_next(out);
    }
}

impl Process<PrimaryBackup> for Primary {
    fn id(&self) -> ProcessId {
        PRIMARY
    }

    fn start(&mut self, _now: Time, _out: &mut Vec<Effect<PrimaryBackup>>) {}

    fn on_event(&mut self, _now: Time, event: Event<PrimaryBackup>, out: &mut Vec<Effect<PrimaryBackup>>) {
        match event {
            Event::Request(req) => match parse(&req) {
                Ok(rw) => {
                    self.waiting.push_back(rw);
                    self.run_next(out);
                }
                Err(e) => out.push(reply(req.client, req.seq, ReplyBody::Error(e))),
            },
            Event::Message { from, msg: Msg::Ack { txn } } => self.installed(txn, from, out),
            Event::StorageDone { result, .. } => self.installed(result.txn, PRIMARY, out),
            Event::Message { from, msg } => {
                self.failure.get_or_insert_with(|| format!("the primary got {msg:?} from {from}"));
            }
            Event::Timer(_) => {}
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("committed", self.committed)]
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }
}

pub struct Backup {
    id: ProcessId,
    install_cost: Duration,
    /// Installs received and not yet done, in the primary's order; the first is running.
    pending: VecDeque<KvJob>,
    installed: u64,
    failure: Option<String>,
}

impl Backup {
    pub fn new(id: ProcessId, install_cost: Duration) -> Backup {
        assert_ne!(id, PRIMARY, "process 0 is the primary");
        Backup { id, install_cost, pending: VecDeque::new(), installed: 0, failure: None }
    }

    fn start_install(&self, out: &mut Vec<Effect<PrimaryBackup>>) {
        if let Some(job) = self.pending.front() {
            out.push(Effect::Storage { work: WorkId(job.txn), job: job.clone(), cost: self.install_cost });
        }
    }
}

impl Process<PrimaryBackup> for Backup {
    fn id(&self) -> ProcessId {
        self.id
    }

    fn start(&mut self, _now: Time, _out: &mut Vec<Effect<PrimaryBackup>>) {}

    fn on_event(&mut self, _now: Time, event: Event<PrimaryBackup>, out: &mut Vec<Effect<PrimaryBackup>>) {
        match event {
            Event::Request(req) => out.push(reply(req.client, req.seq, ReplyBody::Redirect { to: PRIMARY })),
            Event::Message { from: PRIMARY, msg: Msg::Install(job) } => {
                self.pending.push_back(job);
                if self.pending.len() == 1 {
                    self.start_install(out);
                }
            }
            Event::StorageDone { result, .. } => {
                let done = self.pending.pop_front().map(|j| j.txn);
                assert_eq!(done, Some(result.txn), "{}: installs complete one at a time, in order", self.id);
                self.installed += 1;
                out.push(Effect::Send { to: PRIMARY, msg: Msg::Ack { txn: result.txn } });
                self.start_install(out);
            }
            Event::Message { from, msg } => {
                self.failure.get_or_insert_with(|| format!("{} got {msg:?} from {from}", self.id));
            }
            Event::Timer(_) => {}
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("installed", self.installed)]
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }
}
