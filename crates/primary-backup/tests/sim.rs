//! Primary-backup in the simulator, checked by the history checker: correct runs pass, and a
//! faulty backup or a forged lost update fails the check.

use ensemble_app::{ClientCtx, ClosedLoopClient, InstanceId, ThinkTime};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, Completion, CompletionResult, Effect, Event, Outcome, Process, ProcessId, Time, Value, WorkId};
use ensemble_app::apps::kv::KvWorkload;
use ensemble_primary_backup::{self as pb, Evidence, KvJob, KvLog, KvStorage, Msg, PrimaryBackup, PRIMARY};
use ensemble_sim::Simulation;
use std::time::Duration;

struct Run {
    completions: Vec<Completion<Evidence>>,
    logs: Vec<Option<KvLog>>,
    failures: Vec<String>,
}

impl Run {
    fn check(&self) -> pb::Checked {
        pb::check(&self.completions, &self.logs, self.failures.clone())
    }
}

/// `replicas` replicas built by `make`, `clients` clients spread over the sites issuing for
/// `seconds` of virtual time over `keys` keys; runs until every request has its reply.
fn simulate(
    topology: Topology,
    replicas: u32,
    clients: u32,
    keys: u64,
    seconds: u64,
    make: impl Fn(ProcessId) -> Box<dyn Process<PrimaryBackup>>,
) -> Run {
    let seed = 7;
    let mut sim = Simulation::<PrimaryBackup, KvStorage>::new(topology.clone(), pb::deployment(&topology, replicas), seed).unwrap();
    for i in 0..replicas {
        sim.add_process(make(ProcessId(i)), Some(KvStorage::new())).unwrap();
    }
    let stop = Time::ZERO + Duration::from_secs(seconds);
    for c in 0..clients {
        let client = pb::client(c, replicas, Box::new(KvWorkload { keys, reads: 2 }), seed, ThinkTime::None, stop);
        sim.add_client(Box::new(client), c as usize % topology.sites.len()).unwrap();
    }
    let mut completions = Vec::new();
    // Clients stop at `stop` and set no timers, so the queue empties once the last reply is in.
    sim.run_until(stop + Duration::from_secs(600), &mut |_, c| completions.push(c.clone()));
    assert_eq!(sim.pending_events(), 0, "the run drained");
    let failures = sim.process_reports().into_iter().filter_map(|(id, _, f)| f.map(|f| format!("{id}: {f}"))).collect();
    let logs = sim.into_storages().iter().map(|s| s.as_ref().map(KvStorage::snapshot)).collect();
    Run { completions, logs, failures }
}

fn correct(topology: &Topology, replicas: u32) -> impl Fn(ProcessId) -> Box<dyn Process<PrimaryBackup>> + '_ {
    move |id| pb::process(id, replicas, &topology.cpu)
}

fn evidence(c: &Completion<Evidence>) -> &Evidence {
    match &c.result {
        CompletionResult::Done(done) => {
            assert!(matches!(done.outcome, Outcome::Committed(_)), "{c:?}");
            &done.evidence
        }
        CompletionResult::Error(e) => panic!("request refused: {e}"),
    }
}

/// The checks every correct run passes: all committed, ids dense in commit order, SER, and every
/// replica's install log equal to the primary's, with one version per transaction.
fn assert_correct(run: &Run, replicas: usize) {
    let mut ids: Vec<u64> = run.completions.iter().map(|c| evidence(c).txn).collect();
    ids.sort();
    assert_eq!(ids, (1..=run.completions.len() as u64).collect::<Vec<_>>());
    let checked = run.check();
    assert!(checked.passed(), "{}", checked.summary());
    assert_eq!(checked.logs, replicas);
    let summary = checked.summary();
    let head = format!("primary-backup: {} transactions: SER: serializable", run.completions.len());
    assert!(summary.starts_with(&head), "{summary}");
    let primary = run.logs[0].as_ref().unwrap();
    assert_eq!(primary.len(), run.completions.len());
    for log in &run.logs[1..] {
        assert_eq!(log.as_ref(), Some(primary), "a backup's install log differs from the primary's");
    }
}

#[test]
fn three_replicas_twenty_clients_are_serializable_and_agree() {
    let lan = Topology::lan();
    let run = simulate(lan.clone(), 3, 20, 1000, 2, correct(&lan, 3));
    assert!(run.completions.len() > 1_000, "only {} transactions", run.completions.len());
    assert!(run.completions.iter().all(|c| c.redirects == 0));
    assert_correct(&run, 3);
    // A real test of the checker: many transactions read versions others wrote.
    let checked = run.check();
    assert!(checked.report.edges.wr > 1_000 && checked.report.edges.rw > 1_000, "{:?}", checked.report.edges);
}

#[test]
fn across_the_wan_with_contention_the_run_is_serializable() {
    let wan = Topology::wan5();
    let run = simulate(wan.clone(), 5, 20, 20, 30, correct(&wan, 5));
    // One transaction at a time, each waiting for the farthest backup (Australia, 314 ms).
    assert!(run.completions.len() > 50, "only {} transactions", run.completions.len());
    assert_correct(&run, 5);
}

#[test]
fn the_same_seed_gives_the_same_history() {
    let lan = Topology::lan();
    let a = simulate(lan.clone(), 3, 5, 50, 1, correct(&lan, 3));
    let b = simulate(lan.clone(), 3, 5, 50, 1, correct(&lan, 3));
    assert_eq!(a.completions, b.completions);
    assert_eq!(a.logs, b.logs);
}

#[test]
fn a_client_homed_at_a_backup_is_redirected_to_the_primary() {
    let lan = Topology::lan();
    let mut sim = Simulation::<PrimaryBackup, KvStorage>::new(lan.clone(), pb::deployment(&lan, 2), 1).unwrap();
    for i in 0..2 {
        sim.add_process(pb::process(ProcessId(i), 2, &lan.cpu), Some(KvStorage::new())).unwrap();
    }
    let ctx = ClientCtx { client_index: 0, home: InstanceId(1), instances: 2 };
    let stop = Time::ZERO + Duration::from_millis(10);
    let client = ClosedLoopClient::<Evidence>::new(ClientId(0), ctx, Box::new(KvWorkload { keys: 1000, reads: 2 }), 1, ThinkTime::None).stop_at(stop);
    sim.add_client(Box::new(client), 0).unwrap();
    let mut completions = Vec::new();
    sim.run_until(stop + Duration::from_secs(1), &mut |_, c| completions.push(c.clone()));
    assert!(!completions.is_empty());
    assert!(completions.iter().all(|c| c.redirects == 1 && matches!(c.result, CompletionResult::Done(_))));
}

/// The injected bug: a backup that acknowledges a write as soon as it arrives, before installing
/// it, and installs each pair of writes in reverse order.
struct HastyBackup {
    id: ProcessId,
    held: Option<KvJob>,
}

impl Process<PrimaryBackup> for HastyBackup {
    fn id(&self) -> ProcessId {
        self.id
    }
    fn start(&mut self, _now: Time, _out: &mut Vec<Effect<PrimaryBackup>>) {}
    fn on_event(&mut self, _now: Time, event: Event<PrimaryBackup>, out: &mut Vec<Effect<PrimaryBackup>>) {
        let Event::Message { msg: Msg::Install(job), .. } = event else { return };
        out.push(Effect::Send { to: PRIMARY, msg: Msg::Ack { txn: job.txn } });
        let Some(first) = self.held.take() else {
            self.held = Some(job);
            return;
        };
        for j in [job, first] {
            out.push(Effect::Storage { work: WorkId(j.txn), job: j, cost: Duration::from_micros(50) });
        }
    }
}

#[test]
fn a_backup_that_installs_out_of_order_fails_the_check() {
    let lan = Topology::lan();
    let run = simulate(lan.clone(), 3, 20, 5, 1, |id| {
        if id == ProcessId(2) {
            Box::new(HastyBackup { id, held: None })
        } else {
            pb::process(id, 3, &lan.cpu)
        }
    });
    let checked = run.check();
    assert!(!checked.passed(), "{}", checked.summary());
    // The primary's log is the version order, so the history itself is serializable; what
    // fails is p2's disagreement with it.
    let summary = checked.summary();
    assert!(summary.contains("replicas disagree on `") && summary.contains("p2 has T"), "{summary}");
}

#[test]
fn a_lost_update_fails_the_check() {
    let lan = Topology::lan();
    let mut run = simulate(lan.clone(), 3, 20, 5, 1, correct(&lan, 3));
    assert!(run.check().passed());
    // Forge a lost update: T2 read key k from T1 and wrote k; make it read the version before
    // T1's instead. Then T2 -rw(k)-> T1 (T1 overwrote what T2 read) and T1 -ww(k)-> … T2.
    let versions = run.logs[0].clone().unwrap().versions;
    let (c, i, t1) = run
        .completions
        .iter()
        .enumerate()
        .find_map(|(c, comp)| {
            let e = evidence(comp);
            e.reads.iter().position(|(k, w)| *k == e.write && w.is_some()).map(|i| (c, i, e.reads[i].1.unwrap()))
        })
        .expect("with 5 keys some transaction reads and writes the same key");
    let CompletionResult::Done(done) = &mut run.completions[c].result else { unreachable!() };
    let t2 = done.evidence.txn;
    let key = done.evidence.reads[i].0;
    let at = versions[&key].iter().position(|(w, _)| *w == t1).unwrap();
    let before = at.checked_sub(1).map(|p| versions[&key][p]);
    done.evidence.reads[i].1 = before.map(|(w, _)| w);
    let Outcome::Committed(rows) = &mut done.outcome else { unreachable!() };
    rows[i] = vec![Value::Int(before.map_or(0, |(_, v)| v))];

    let checked = run.check();
    assert!(!checked.passed());
    let cycle = checked.report.cycle().unwrap_or_else(|| panic!("no cycle: {}", checked.summary())).transactions();
    assert!(cycle.contains(&t1) && cycle.contains(&t2), "{cycle:?} should go through T{t1} and T{t2}");
    assert!(checked.summary().contains("SER: NOT serializable"), "{}", checked.summary());
}
