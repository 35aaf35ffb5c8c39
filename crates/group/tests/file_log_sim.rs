//! A group of three whose members keep their log in a [`FileLog`], in the simulator, under
//! random fault plans with crashes that lose the process's state: a crashed member is dropped
//! (its file closed) and rebuilt from its reopened file. The run must pass the checks the
//! `MemoryLog` runs of `sim.rs` pass (`common::check`: one log, in one order, each entry once per
//! incarnation, every request applied once), and more: since the file log hands out the same
//! incarnations as `MemoryLog` (1 at the first open, one more per reopen), a run on files is byte
//! for byte the run on memory of the same seed.
//!
//! The replica, the clients, the delivery records and the checks are `common`'s; this file has
//! its own world builder, whose replicas keep their log in a file.

mod common;

use common::{check, Command, Outcomes, Records, Replica, ReqLog, RetryClient};
use ensemble_core::topology::Topology;
use ensemble_core::{Completion, Deployment, Group, ProcessId, Storage, Time};
use ensemble_group::{FileLog, GroupConfig, GroupId};
use ensemble_sim::{FaultPlan, RandomFaults, Simulation};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

const TICK: Duration = Duration::from_millis(10);

fn secs(s: f64) -> Time {
    Time((s * 1e9) as u64)
}

/// The process's storage in the simulator: where its log file is. It survives a crash; the
/// open file does not (it belongs to the member, dropped with the process).
struct LogFile(PathBuf);

impl Storage for LogFile {
    type Job = ();
    type Result = ();
    fn run(&mut self, _job: &()) {}
}


type FileSim = Simulation<ReqLog, LogFile>;

/// `common::world` with three members on file logs in `dir`, and clients as in `sim.rs`.
fn file_world(dir: &std::path::Path, seed: u64) -> (FileSim, Records, GroupConfig) {
    let topology = Topology::wan_normal50(3);
    let n = 3u32;
    let sites: Vec<usize> = (0..n as usize).map(|i| i % topology.sites.len()).collect();
    let mut deployment = Deployment::one_per_machine(&sites, 2, "member");
    deployment.groups.push(Group { name: "g".into(), members: common::members(n) });
    let config = GroupConfig::new(GroupId(7), common::members(n)).timing(25, 50);
    let records: Records = Rc::new(RefCell::new(vec![common::Record::default(); n as usize]));
    let mut sim = FileSim::new(topology, deployment, seed).expect("valid world");
    for i in 0..n {
        let path = dir.join(format!("p{i}.log"));
        let log = FileLog::open(&path).expect("a new log file");
        let replica = Replica::new(config.clone(), ProcessId(i), log, seed, TICK, records.clone());
        sim.add_process(Box::new(replica), Some(LogFile(path))).expect("new member");
    }
    let (c, r) = (config.clone(), records.clone());
    sim.set_recovery(Box::new(move |id, slot: Option<&mut LogFile>| {
        // The crashed process, and its open file with it, is gone: reopen the file.
        let path = &slot.expect("members have a log file").0;
        let log = FileLog::<Command>::open(path).unwrap_or_else(|e| panic!("{id} cannot recover: {e}"));
        Box::new(Replica::new(c.clone(), id, log, seed, TICK, r.clone()))
    }));
    (sim, records, config)
}

fn fault_spec(crashes: u32) -> RandomFaults {
    RandomFaults {
        processes: common::members(3),
        horizon: secs(8.0),
        message_rules: 10,
        max_probability: 0.3,
        max_extra: Duration::from_millis(60),
        partitions: 1,
        crashes,
        crashes_lose_state: true,
        stalls: 0,
    }
}

/// What a run left: outcomes, trace, and recoveries.
struct Run {
    outcomes: Outcomes,
    trace: String,
    recoveries: u64,
}

/// The random-fault run of `sim.rs` (6 clients x 60 requests, faults until 8 s, run to 60 s),
/// on file logs.
fn file_run(seed: u64, crashes: u32) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let (mut sim, records, config) = file_world(dir.path(), seed);
    for c in 0..6u64 {
        let client = RetryClient::new(c, config.members.clone(), c as usize % 3, 60, Duration::from_millis(800));
        sim.add_client(Box::new(client), c as usize % 3).expect("new client");
    }
    *sim.faults_mut() = FaultPlan::random(&mut ChaCha8Rng::seed_from_u64(seed), &fault_spec(crashes));
    sim.enable_trace();
    let mut completions: Vec<Completion<u64>> = Vec::new();
    sim.run_until(secs(60.0), &mut |_, c| completions.push(c.clone()));
    let mut stale = 0;
    for (id, counters, failure) in sim.process_reports() {
        assert_eq!(failure, None, "{id} failed");
        stale += counters.iter().filter(|(name, _)| *name == "stale").map(|(_, n)| n).sum::<u64>();
    }
    let trace = sim.take_trace().iter().map(|(t, e)| format!("{} {e}\n", t.0)).collect();
    let recoveries = sim.stats().processes.iter().map(|s| s.recoveries).sum();
    let records = records.borrow().clone();
    Run { outcomes: Outcomes { completions, records, stale }, trace, recoveries }
}

/// The same run on `MemoryLog`, built by `common::world` exactly as `sim.rs` builds it.
fn memory_run(seed: u64, crashes: u32) -> Run {
    let mut w = common::world(Topology::wan_normal50(3), seed, 3, TICK, Vec::new());
    for c in 0..6u64 {
        let client = RetryClient::new(c, w.config.members.clone(), c as usize % 3, 60, Duration::from_millis(800));
        w.sim.add_client(Box::new(client), c as usize % 3).expect("new client");
    }
    *w.sim.faults_mut() = FaultPlan::random(&mut ChaCha8Rng::seed_from_u64(seed), &fault_spec(crashes));
    w.sim.enable_trace();
    let mut completions: Vec<Completion<u64>> = Vec::new();
    w.sim.run_until(secs(60.0), &mut |_, c| completions.push(c.clone()));
    let trace = w.sim.take_trace().iter().map(|(t, e)| format!("{} {e}\n", t.0)).collect();
    let recoveries = w.sim.stats().processes.iter().map(|s| s.recoveries).sum();
    let records = w.records.borrow().clone();
    Run { outcomes: Outcomes { completions, records, stale: 0 }, trace, recoveries }
}

#[test]
fn a_group_on_file_logs_recovers_from_crashes_losing_state_with_one_log_each_entry_once() {
    // Seed 8 is `sim.rs`'s crash-losing-state seed; the others add crashes of more members.
    for (seed, crashes) in [(8, 2), (150, 3), (152, 3), (154, 4)] {
        let run = file_run(seed, crashes);
        assert!(run.recoveries >= 2, "seed {seed}: {} recoveries", run.recoveries);
        assert_eq!(run.outcomes.completions.len(), 360, "seed {seed}: every request answered after the heal");
        let log = check(&run.outcomes, &common::members(3));
        let distinct: BTreeSet<&Command> = log.iter().collect();
        assert_eq!(distinct.len(), 360, "seed {seed}");
        // A rebuilt member delivered the whole decided log again, from its file, in a new
        // incarnation: the file gave it back its log.
        let rebuilt = run.outcomes.records.iter().filter(|r| r.log.iter().any(|(inc, ..)| *inc > 1)).count();
        assert!(rebuilt > 0, "seed {seed}: no member delivered in a second incarnation");
    }
}

#[test]
fn a_run_on_file_logs_is_byte_for_byte_the_run_on_memory_logs() {
    let file = file_run(8, 2);
    let memory = memory_run(8, 2);
    assert_eq!(file.recoveries, 2);
    assert_eq!(file.recoveries, memory.recoveries);
    assert!(file.trace.len() > 100_000, "a busy run");
    assert!(file.trace == memory.trace, "seed 8: the traces differ");
    assert_eq!(file.outcomes.delivery_bytes(), memory.outcomes.delivery_bytes());
}
