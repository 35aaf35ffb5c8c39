//! The engine in the simulator over hand-written programs: transfers between accounts (reads
//! and writes across groups) and audits (read-only), checked for serializability, agreement,
//! lost commits, and the bank's invariant that transfers conserve the total.

use ensemble_app::{ClientCtx, ClosedLoopClient, InstanceId, ThinkTime, Workload};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, Completion, CompletionResult, Deployment, Group, Outcome, ProcessId, RequestError, Time};
use ensemble_gdur::protocols::{PStore, PStoreFull};
use ensemble_gdur::{check, Costs, Durable, Evidence, GDur, InstallLog, Layout, Realization, Replica, Setup, Timing};
use ensemble_group::multicast::Directory;
use ensemble_group::GroupId;
use ensemble_kv::workload::program::{Program, Step};
use ensemble_kv::{Key, Value};
use ensemble_sim::Simulation;
use rand::{Rng, RngCore};
use std::sync::Arc;
use std::time::Duration;

const KEYS: u64 = 8;

/// Moves `amount` from `from` to `to`, refusing to overdraw below -1000.
#[derive(Debug)]
struct Transfer {
    from: Key,
    to: Key,
    amount: i64,
    step: u8,
    balances: (i64, i64),
}

impl Program for Transfer {
    fn step(&mut self, read: Option<(Key, Value)>) -> Step {
        self.step += 1;
        match self.step {
            1 => Step::Read(self.from),
            2 => {
                self.balances.0 = read.expect("a value").1.int;
                Step::Read(self.to)
            }
            3 => {
                self.balances.1 = read.expect("a value").1.int;
                if self.balances.0 - self.amount < -1000 {
                    return Step::Abort("insufficient funds".into());
                }
                Step::Write(self.from, Value::int(self.balances.0 - self.amount))
            }
            4 => Step::Write(self.to, Value::int(self.balances.1 + self.amount)),
            _ => Step::Commit(vec![vec![ensemble_core::Value::Int(self.balances.0 - self.amount)]]),
        }
    }
}

/// Reads `keys` and returns their sum, which a serializable run keeps at zero when it reads
/// every account.
#[derive(Debug)]
struct Audit {
    keys: Vec<Key>,
    next: usize,
    sum: i64,
}

impl Program for Audit {
    fn step(&mut self, read: Option<(Key, Value)>) -> Step {
        if let Some((_, v)) = read {
            self.sum += v.int;
        }
        if self.next < self.keys.len() {
            self.next += 1;
            return Step::Read(self.keys[self.next - 1]);
        }
        Step::Commit(vec![vec![ensemble_core::Value::Int(self.sum)]])
    }
}

fn programs(txn: &str, params: &[ensemble_core::Value]) -> Result<Box<dyn Program>, RequestError> {
    let ints: Vec<i64> = params.iter().filter_map(|v| v.as_int()).collect();
    match txn {
        "transfer" => Ok(Box::new(Transfer { from: ints[0] as u64, to: ints[1] as u64, amount: ints[2], step: 0, balances: (0, 0) })),
        "audit" => Ok(Box::new(Audit { keys: ints.iter().map(|&k| k as u64).collect(), next: 0, sum: 0 })),
        other => Err(RequestError::UnknownTransaction { txn: other.into() }),
    }
}

/// Transfers between two random accounts (so across groups half the time), or audits of every
/// account. An audit reads the accounts of other groups remotely, one after the other, and
/// P-Store certifies it against every transfer that commits meanwhile: under a heavy transfer
/// load an audit never commits (P-Store's queries are not wait-free, G-DUR §8.2), so the tests
/// keep the transfer rate low enough for audits to get through.
struct Bank {
    audit_share: f64,
}

impl Workload for Bank {
    fn next(&mut self, rng: &mut dyn RngCore, _ctx: &ClientCtx) -> (String, Vec<ensemble_core::Value>) {
        if rng.random_bool(self.audit_share) {
            return ("audit".into(), (0..KEYS as i64).map(ensemble_core::Value::Int).collect());
        }
        let from = rng.random_range(0..KEYS) as i64;
        let mut to = rng.random_range(0..KEYS - 1) as i64;
        if to >= from {
            to += 1;
        }
        ("transfer".into(), vec![ensemble_core::Value::Int(from), ensemble_core::Value::Int(to), ensemble_core::Value::Int(rng.random_range(1..100))])
    }
}

struct Run {
    completions: Vec<Completion<Evidence>>,
    logs: Vec<Option<Vec<ensemble_gdur::Installed>>>,
    layout: Arc<Layout>,
    failures: Vec<String>,
}

/// The bank on `groups` groups of 3 (each account in one group, or in all if `full`):
/// `transfers` clients moving money with `think` between transactions, and `auditors` clients
/// auditing without a pause.
struct Bank2 {
    groups: u32,
    full: bool,
    transfers: u32,
    think: Duration,
    auditors: u32,
    seconds: u64,
    seed: u64,
}

fn run(realization: Arc<dyn Realization>, b: Bank2) -> Run {
    let Bank2 { groups, full, transfers, think, auditors, seconds, seed } = b;
    let members = 3;
    let directory = Directory::new((0..groups).map(|g| (GroupId(g), (0..members).map(|m| ProcessId(g * members + m)).collect())));
    let replicas: Vec<Vec<GroupId>> =
        (0..groups).map(|p| if full { (0..groups).map(GroupId).collect() } else { vec![GroupId(p)] }).collect();
    let layout = Arc::new(Layout::new(Arc::new(move |k: Key| (k % u64::from(groups)) as u32), replicas, directory).unwrap());
    let setup = Setup {
        realization,
        layout: layout.clone(),
        programs: Arc::new(programs),
        initial: Value::int(0),
        timing: Timing::data_centre_groups(),
        costs: Costs { read: Duration::from_micros(20), certify_key: Duration::from_micros(5), apply_write: Duration::from_micros(20) },
        sequencer: GroupId(0),
        seed,
    };
    // Group g at site g + 1 (a data centre each), as P-Store's clusters behind WAN emulation.
    let topology = Topology::wan_normal50(groups as usize + 1);
    let sites: Vec<usize> = (0..groups).flat_map(|g| std::iter::repeat_n(g as usize + 1, members as usize)).collect();
    let mut deployment = Deployment::one_per_machine(&sites, 4, "replica");
    for g in 0..groups {
        deployment.groups.push(Group { name: format!("g{g}"), members: layout.directory().members(GroupId(g)).to_vec() });
    }
    let mut sim: Simulation<GDur, InstallLog> = Simulation::new(topology, deployment, seed).unwrap();
    for p in 0..groups * members {
        let replica = Replica::new(setup.clone(), ProcessId(p), Durable::new(Value::int(0))).unwrap();
        sim.add_process(Box::new(replica), Some(InstallLog::new())).unwrap();
    }
    let end = Time::ZERO + Duration::from_secs(seconds);
    for c in 0..transfers + auditors {
        let home = ProcessId(c % (groups * members));
        let ctx = ClientCtx { client_index: u64::from(c), home: InstanceId::of(home), instances: groups * members };
        let (workload, think) = if c < auditors {
            (Bank { audit_share: 1.0 }, ThinkTime::None)
        } else {
            (Bank { audit_share: 0.0 }, ThinkTime::Exponential { mean: think })
        };
        let client = ClosedLoopClient::<Evidence>::new(ClientId(u64::from(c)), ctx, Box::new(workload), seed, think).stop_at(end);
        sim.add_client(Box::new(client), sites[home.0 as usize]).unwrap();
    }
    let mut completions = Vec::new();
    sim.run_until(end + Duration::from_secs(10), &mut |_, c: &Completion<Evidence>| completions.push(c.clone()));
    let failures = sim.process_reports().iter().filter_map(|(id, _, f)| f.as_ref().map(|m| format!("{id}: {m}"))).collect();
    let logs = sim.into_storages().into_iter().map(|s| s.map(|l| l.installed())).collect();
    Run { completions, logs, layout, failures }
}

fn verdict(r: &Run) -> ensemble_gdur::Checked {
    let layout = r.layout.clone();
    check(&r.completions, &r.logs, &move |p, k| layout.replicates(p, k), r.failures.clone())
}

fn committed<'a>(r: &'a Run, txn: &str) -> Vec<&'a Completion<Evidence>> {
    r.completions
        .iter()
        .filter(|c| c.request.txn == txn && matches!(&c.result, CompletionResult::Done(d) if d.outcome.committed()))
        .collect()
}

fn audits_balance(r: &Run) {
    for c in committed(r, "audit") {
        let CompletionResult::Done(d) = &c.result else { unreachable!() };
        let Outcome::Committed(rows) = &d.outcome else { unreachable!() };
        assert_eq!(rows[0][0], ensemble_core::Value::Int(0), "an audit saw money created or destroyed: {:?}", d.evidence);
    }
}

#[test]
fn p_store_keeps_the_bank_serializable_across_two_groups() {
    let bank = Bank2 { groups: 2, full: false, transfers: 6, think: Duration::from_millis(1500), auditors: 2, seconds: 30, seed: 1 };
    let r = run(Arc::new(PStore::a_ge_star(PStore::CERTIFIERS)), bank);
    let v = verdict(&r);
    assert!(v.passed(), "{}", v.summary("p-store"));
    let (transfers, audits) = (committed(&r, "transfer").len(), committed(&r, "audit").len());
    assert!(transfers > 50 && audits > 5, "only {transfers} transfers and {audits} audits committed");
    audits_balance(&r);
}

#[test]
fn sequential_certification_gdurs_realization_two_phase_commit_and_full_replication_are_serializable_too() {
    for (name, realization, full) in [
        ("p-store-ge", Arc::new(PStore::a_ge()) as Arc<dyn Realization>, false),
        ("p-store-gdur", Arc::new(PStore::gdur(PStore::CERTIFIERS)), false),
        ("p-store-2pc", Arc::new(PStore::two_phase()), false),
        ("p-store-full", Arc::new(PStoreFull { certifiers: PStore::CERTIFIERS }), true),
    ] {
        let bank = Bank2 { groups: 2, full, transfers: 6, think: Duration::from_millis(1500), auditors: 2, seconds: 30, seed: 2 };
        let r = run(realization, bank);
        let v = verdict(&r);
        assert!(v.passed(), "{}", v.summary(name));
        let (transfers, audits) = (committed(&r, "transfer").len(), committed(&r, "audit").len());
        assert!(transfers > 50 && audits > 5, "{name}: only {transfers} transfers and {audits} audits committed");
        audits_balance(&r);
    }
}


/// P-Store with its certification test removed: every transaction that reaches termination
/// commits, so concurrent transfers overwrite each other (lost updates).
#[derive(Debug)]
struct Uncertified(PStore);

impl Realization for Uncertified {
    fn name(&self) -> &'static str {
        "p-store-uncertified"
    }
    fn xcast(&self) -> ensemble_gdur::Xcast {
        self.0.xcast()
    }
    fn commitment(&self) -> ensemble_gdur::Commitment {
        self.0.commitment()
    }
    fn certifying_obj(&self, t: &ensemble_gdur::Term, local: bool) -> ensemble_gdur::Objects {
        self.0.certifying_obj(t, local)
    }
    fn vote_snd_obj(&self, t: &ensemble_gdur::Term, local: bool) -> ensemble_gdur::Objects {
        self.0.vote_snd_obj(t, local)
    }
    fn certify(&self, _: &ensemble_gdur::Term, _: &dyn ensemble_kv::store::VersionStore, _: &dyn Fn(Key) -> bool) -> bool {
        true
    }
    fn certifiers(&self) -> usize {
        self.0.certifiers()
    }
}

/// Under group communication and under 2PC (whose preemptive abort alone keeps only
/// concurrent conflicting transactions apart, not a stale read from a later commit).
#[test]
fn the_checker_catches_a_protocol_that_skips_certification() {
    for base in [PStore::a_ge_star(PStore::CERTIFIERS), PStore::two_phase()] {
        let bank = Bank2 { groups: 2, full: false, transfers: 8, think: Duration::from_millis(50), auditors: 0, seconds: 10, seed: 3 };
        let r = run(Arc::new(Uncertified(base)), bank);
        let v = verdict(&r);
        let summary = v.summary("p-store-uncertified");
        assert!(!v.passed(), "{base:?}: lost updates went unnoticed: {summary}");
        assert!(summary.contains("cycle") || summary.contains("not serializable"), "{base:?}: {summary}");
    }
}

/// A_full's choices over atomic broadcast (G-DUR's AB-Cast) instead of genuine multicast: the
/// engine's other xcast, which no shipped protocol uses, kept working.
#[derive(Debug)]
struct Broadcasting(PStoreFull);

impl Realization for Broadcasting {
    fn name(&self) -> &'static str {
        "p-store-full-broadcast"
    }
    fn xcast(&self) -> ensemble_gdur::Xcast {
        ensemble_gdur::Xcast::Broadcast
    }
    fn certifying_obj(&self, t: &ensemble_gdur::Term, local: bool) -> ensemble_gdur::Objects {
        self.0.certifying_obj(t, local)
    }
    fn vote_snd_obj(&self, t: &ensemble_gdur::Term, local: bool) -> ensemble_gdur::Objects {
        self.0.vote_snd_obj(t, local)
    }
    fn certify(&self, t: &ensemble_gdur::Term, store: &dyn ensemble_kv::store::VersionStore, local: &dyn Fn(Key) -> bool) -> bool {
        self.0.certify(t, store, local)
    }
    fn certifiers(&self) -> usize {
        self.0.certifiers()
    }
}

#[test]
fn full_replication_over_atomic_broadcast_is_serializable() {
    let bank = Bank2 { groups: 2, full: true, transfers: 6, think: Duration::from_millis(1500), auditors: 2, seconds: 30, seed: 4 };
    let r = run(Arc::new(Broadcasting(PStoreFull { certifiers: PStore::CERTIFIERS })), bank);
    let v = verdict(&r);
    assert!(v.passed(), "{}", v.summary("p-store-full-broadcast"));
    let (transfers, audits) = (committed(&r, "transfer").len(), committed(&r, "audit").len());
    assert!(transfers > 50 && audits > 5, "only {transfers} transfers and {audits} audits committed");
    audits_balance(&r);
}
