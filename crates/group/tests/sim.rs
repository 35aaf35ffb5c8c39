//! A group of three in the simulator, with the toy request log of `common`: agreement and
//! exactly-once delivery, byte-identical replays under random fault plans (with pauses, and with
//! crashes that lose state), a leader crash mid-proposal, and a process outside the group
//! sending forged and garbage messages.

mod common;

use common::{check, world, Command, Outcomes, RetryClient, World};
use ensemble_core::topology::Topology;
use ensemble_core::{Completion, Effect, Event, Process, ProcessId, Time, TimerId};
use ensemble_group::{GroupId, GroupMsg};
use ensemble_sim::{FaultPlan, RandomFaults, SimStats};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

fn secs(s: f64) -> Time {
    Time((s * 1e9) as u64)
}

/// 10 ms ticks: a heartbeat round every 50 ms, over a WAN of 50 ms one way with jitter.
const TICK: Duration = Duration::from_millis(10);

fn add_clients(w: &mut World, clients: u64, requests: u64) {
    let sites = w.sim.topology().sites.len();
    for c in 0..clients {
        let client = RetryClient::new(c, w.config.members.clone(), c as usize % 3, requests, Duration::from_millis(800));
        w.sim.add_client(Box::new(client), c as usize % sites).expect("new client");
    }
}

fn finish(mut w: World, until: Time) -> (Outcomes, Vec<(Time, String)>, SimStats) {
    let mut completions: Vec<Completion<u64>> = Vec::new();
    w.sim.run_until(until, &mut |_, c| completions.push(c.clone()));
    let mut stale = 0;
    for (id, counters, failure) in w.sim.process_reports() {
        assert_eq!(failure, None, "{id} failed");
        stale += counters.iter().filter(|(name, _)| *name == "stale").map(|(_, n)| n).sum::<u64>();
    }
    let trace = w.sim.take_trace();
    let stats = w.sim.stats().clone();
    let records = w.records.borrow().clone();
    (Outcomes { completions, records, stale }, trace, stats)
}

#[test]
fn three_members_deliver_one_log_in_one_order_each_entry_once() {
    let mut w = world(Topology::wan_normal50(3), 1, 3, TICK, Vec::new());
    add_clients(&mut w, 6, 40);
    let (out, _, stats) = finish(w, secs(60.0));
    assert_eq!(out.completions.len(), 240, "every request answered");
    let log = check(&out, &common::members(3));
    // No faults: nobody retried, so the log holds each request exactly once.
    assert_eq!(log.len(), 240);
    assert!(out.completions.iter().all(|c| c.redirects == 0));
    assert_eq!(stats.messages_dropped.total(), 0);
    // One leader, followed by all.
    let leaders: Vec<_> = out.records.iter().map(|r| r.leader).collect();
    assert!(leaders[0].is_some() && leaders.iter().all(|l| *l == leaders[0]), "{leaders:?}");
    assert_eq!(out.records.iter().filter(|r| r.leading).count(), 1);
}

/// A run under a fault plan drawn from `seed`: every message rule kind, a partition and crashes
/// of the members, all healed by 8 s; clients keep going until 40 s so the group converges.
fn faulty_run(seed: u64, crashes_lose_state: bool) -> (Outcomes, Vec<(Time, String)>, SimStats) {
    let mut w = world(Topology::wan_normal50(3), seed, 3, TICK, Vec::new());
    add_clients(&mut w, 6, 60);
    let spec = RandomFaults {
        processes: common::members(3),
        horizon: secs(8.0),
        message_rules: 10,
        max_probability: 0.3,
        max_extra: Duration::from_millis(60),
        partitions: 1,
        crashes: 2,
        crashes_lose_state,
        stalls: 0,
    };
    *w.sim.faults_mut() = FaultPlan::random(&mut ChaCha8Rng::seed_from_u64(seed), &spec);
    w.sim.enable_trace();
    finish(w, secs(60.0))
}

fn trace_bytes(trace: &[(Time, String)]) -> String {
    trace.iter().map(|(t, e)| format!("{} {e}\n", t.0)).collect()
}

fn assert_replays(seed: u64, crashes_lose_state: bool) -> SimStats {
    let (a, trace_a, stats_a) = faulty_run(seed, crashes_lose_state);
    let (b, trace_b, stats_b) = faulty_run(seed, crashes_lose_state);
    assert!(trace_a.len() > 10_000, "a busy run: {} events", trace_a.len());
    assert_eq!(trace_bytes(&trace_a), trace_bytes(&trace_b), "seed {seed}: the traces differ");
    assert_eq!(stats_a, stats_b);
    assert_eq!(a.delivery_bytes(), b.delivery_bytes());
    assert_eq!(a.completions.len(), 360, "seed {seed}: every request answered after the heal");
    check(&a, &common::members(3));
    // The link layer had work: duplicates and overtaken messages never reached the library.
    assert!(a.stale > 0, "seed {seed}: nothing stale");
    assert_eq!(a.stale, b.stale);
    stats_a
}

#[test]
fn same_seed_same_bytes_under_a_random_fault_plan() {
    let stats = assert_replays(0, false);
    // The plan really did things.
    assert!(stats.messages_dropped.rule > 0, "{stats:?}");
    assert!(stats.messages_dropped.partition > 0, "{stats:?}");
    assert!(stats.messages_duplicated > 0, "{stats:?}");
    assert!(stats.messages_dropped.crashed > 0, "{stats:?}");
}

#[test]
fn same_seed_same_bytes_with_crashes_losing_state() {
    let stats = assert_replays(8, true);
    let recoveries: u64 = stats.processes.iter().map(|s| s.recoveries).sum();
    assert_eq!(recoveries, 2, "{stats:?}");
    assert!(stats.messages_dropped.rule > 0 && stats.messages_duplicated > 0, "{stats:?}");
}

#[test]
fn another_seed_gives_another_run() {
    let (_, a, _) = faulty_run(3, false);
    let (_, b, _) = faulty_run(4, false);
    assert_ne!(trace_bytes(&a), trace_bytes(&b));
}

/// 32 seeds, half with crashes that lose state. Seed 163 is one that stalls the group without the
/// link layer (see `GroupMember::on_message`); with it, seeds 100 to 259 all pass.
#[test]
fn many_seeds_of_random_faults_keep_agreement_and_exactly_once() {
    for seed in 150..182 {
        let (out, _, _) = faulty_run(seed, seed % 2 == 0);
        assert_eq!(out.completions.len(), 360, "seed {seed}");
        check(&out, &common::members(3));
    }
}

/// Crashes the leader at 2 s, while clients have requests in flight, and (if `restart`) brings
/// it back at 5 s, rebuilt from its log.
fn leader_crash(restart: bool) {
    let mut w = world(Topology::wan_normal50(3), 11, 3, TICK, Vec::new());
    add_clients(&mut w, 6, 80);
    let mut completions: Vec<Completion<u64>> = Vec::new();
    let crash_at = secs(2.0);
    w.sim.run_until(crash_at, &mut |_, c| completions.push(c.clone()));
    let leader = {
        let records = w.records.borrow();
        let leading: Vec<ProcessId> =
            (0..3).filter(|&i| records[i].leading).map(|i| ProcessId(i as u32)).collect();
        assert_eq!(leading.len(), 1, "one leader at the crash");
        leading[0]
    };
    let before = completions.len();
    if restart {
        w.sim.faults_mut().crash_losing_state(leader, crash_at, Some(secs(5.0)));
    } else {
        w.sim.faults_mut().crash(leader, crash_at, None);
    }
    w.sim.run_until(secs(60.0), &mut |_, c| completions.push(c.clone()));
    let stats = w.sim.stats().clone();
    let records = w.records.borrow().clone();
    let out = Outcomes { completions, records, stale: 0 };
    // Requests were in flight at the crash: issued before it, answered after it.
    let in_flight = out.completions.iter().filter(|c| c.issued < crash_at && c.completed > crash_at).count();
    assert!(in_flight > 0, "no request was in flight at the crash");
    assert!(before > 0 && out.completions.len() == 480, "{before} before, {} in all", out.completions.len());
    // A new leader took over, and the survivors follow it.
    let survivors: Vec<ProcessId> = (0..3).map(ProcessId).filter(|&p| p != leader).collect();
    let new_leader = out.records[survivors[0].0 as usize].leader.expect("a leader after the crash");
    assert_ne!(new_leader, leader);
    for p in &survivors {
        assert_eq!(out.records[p.0 as usize].leader, Some(new_leader));
    }
    let live: Vec<ProcessId> = if restart { common::members(3) } else { survivors };
    let log = check(&out, &live);
    // Every request answered is in the log once after deduplication; a retried one may be in
    // the raw log twice, never applied twice.
    let distinct: std::collections::BTreeSet<&Command> = log.iter().collect();
    assert_eq!(distinct.len(), 480);
    if restart {
        assert_eq!(stats.processes[leader.0 as usize].recoveries, 1);
    }
}

#[test]
fn a_leader_crash_mid_proposal_elects_a_new_leader_and_loses_or_doubles_nothing() {
    leader_crash(false);
}

#[test]
fn a_leader_crash_losing_state_mid_proposal_recovers_from_its_log() {
    leader_crash(true);
}

/// A process outside the group that, every 100 ms, sends each member a message from a list of
/// bad ones.
struct Forger {
    id: ProcessId,
    bad: Vec<GroupMsg>,
    next: usize,
}

impl Process<common::ReqLog> for Forger {
    fn id(&self) -> ProcessId {
        self.id
    }
    fn start(&mut self, _now: Time, out: &mut Vec<Effect<common::ReqLog>>) {
        out.push(Effect::SetTimer { id: TimerId(0), after: Duration::from_millis(100) });
    }
    fn on_event(&mut self, _now: Time, event: Event<common::ReqLog>, out: &mut Vec<Effect<common::ReqLog>>) {
        if let Event::Timer(_) = event {
            if self.next < 30 {
                for to in 0..3 {
                    let msg = self.bad[self.next % self.bad.len()].clone();
                    out.push(Effect::Send { to: ProcessId(to), msg });
                }
                self.next += 1;
                out.push(Effect::SetTimer { id: TimerId(0), after: Duration::from_millis(100) });
            }
        }
    }
}

#[test]
fn a_process_outside_the_group_is_refused_by_name_and_the_group_keeps_serving() {
    let bad = vec![
        GroupMsg { group: GroupId(7), incarnation: 1, seq: 0, body: vec![0xff, 0xff, 0xff] },
        GroupMsg { group: GroupId(99), incarnation: 1, seq: 0, body: Vec::new() },
    ];
    let forger = Forger { id: ProcessId(3), bad, next: 0 };
    let mut w = world(Topology::wan_normal50(3), 2, 3, TICK, vec![Box::new(forger)]);
    add_clients(&mut w, 3, 30);
    let (out, _, stats) = finish(w, secs(30.0));
    assert_eq!(out.completions.len(), 90);
    check(&out, &common::members(3));
    for m in 0..3 {
        let s = &stats.processes[m];
        assert_eq!(s.messages_refused, 30, "p{m}: {s:?}");
        let first = s.first_refusal.as_deref().unwrap_or_default();
        assert!(first.contains("is not a member of group 7"), "p{m}: {first}");
    }
}
