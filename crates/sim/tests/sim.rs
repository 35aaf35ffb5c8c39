//! The simulator's model, checked on toy processes: determinism, network delays and FIFO links,
//! machines, cores and CPU queueing, charged work, timers, faults (drops, duplicates, reordering,
//! partitions, crashes with and without loss of state, stalls, random plans), and scale.
//!
//! The toy of `ensemble_sim::toy` covers most of it. The simulation owns its processes as
//! `Box<dyn Process>`, which cannot be downcast back to a `ToyNode`, so a test that reads what a
//! node saw keeps a [`Handle`] on it. Two test-local processes cover what the toy does not: a
//! [`TimerScript`] that sets and cancels timers, and a [`Counter`] protocol whose process keeps a
//! volatile count and checkpoints it in storage, for crashes that lose state.

use ensemble_core::topology::{Jitter, Topology};
use ensemble_core::{
    Client, ClientEffect, ClientEvent, ClientId, Completion, CompletionResult, Deployment, Done, Effect, Event, Machine,
    Outcome, Placement, Process, ProcessId, Protocol, Reply, ReplyBody, Request, Storage, Time, TimerId, WorkId,
};
use ensemble_sim::toy::{ClosedLoopClient, Seen, Toy, ToyMsg, ToyNode, ToyStorage};
use ensemble_sim::{Endpoint, FaultKind, FaultPlan, Links, RandomFaults, SimStats, Simulation, Window};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

type Sim = Simulation<Toy, ToyStorage>;

fn ms(x: f64) -> Time {
    Time((x * 1e6).round() as u64)
}

fn p(n: u32) -> ProcessId {
    ProcessId(n)
}

/// A LAN (0.1 ms one way) whose message handling is free, so arrival times are exact.
fn lan_free_messages() -> Topology {
    let mut t = Topology::lan();
    t.cpu.message_us = 0.0;
    t
}

/// A toy node both the simulation and the test hold.
#[derive(Clone)]
struct Handle(Rc<RefCell<ToyNode>>);

impl Handle {
    fn new(node: ToyNode) -> Handle {
        Handle(Rc::new(RefCell::new(node)))
    }
    fn pings(&self) -> Vec<(Time, ProcessId, u64)> {
        self.0.borrow().pings_received().collect()
    }
    fn seen(&self) -> Vec<(Time, Seen)> {
        self.0.borrow().seen.clone()
    }
    fn tokens_passed(&self) -> u64 {
        self.0.borrow().tokens_passed
    }
}

impl Process<Toy> for Handle {
    fn id(&self) -> ProcessId {
        self.0.borrow().id()
    }
    fn start(&mut self, now: Time, out: &mut Vec<Effect<Toy>>) {
        self.0.borrow_mut().start(now, out);
    }
    fn on_event(&mut self, now: Time, event: Event<Toy>, out: &mut Vec<Effect<Toy>>) {
        self.0.borrow_mut().on_event(now, event, out);
    }
}

/// One machine per node (node `n` at site `n % sites`, with the topology's cores), which is the
/// model of one instance per server the simulator had before deployments.
fn sim_with(topology: Topology, seed: u64, nodes: Vec<ToyNode>) -> (Sim, Vec<Handle>) {
    let sites: Vec<usize> = (0..nodes.len()).map(|n| n % topology.sites.len()).collect();
    let deployment = Deployment::one_per_machine(&sites, topology.cpu.cores, "toy");
    sim_deployed(topology, deployment, seed, nodes)
}

fn sim_deployed(topology: Topology, deployment: Deployment, seed: u64, nodes: Vec<ToyNode>) -> (Sim, Vec<Handle>) {
    let mut sim = Sim::new(topology, deployment, seed).expect("valid topology and deployment");
    let mut handles = Vec::new();
    for node in nodes {
        let id = node.id();
        let handle = Handle::new(node);
        sim.add_process(Box::new(handle.clone()), Some(ToyStorage::new(id))).expect("new process");
        handles.push(handle);
    }
    (sim, handles)
}

fn run<P: Protocol, S: Storage<Job = P::Job, Result = P::JobResult>>(
    sim: &mut Simulation<P, S>,
    until: Time,
) -> Vec<Completion<P::Evidence>> {
    let mut done = Vec::new();
    sim.run_until(until, &mut |_, c| done.push(c.clone()));
    done
}

fn placement(process: u32, machine: usize, pinned: Option<u32>) -> Placement {
    Placement { process: p(process), machine, pinned, os_process: None, kind: "toy".into() }
}

fn executed(sim: &Sim, id: ProcessId) -> u64 {
    sim.storage(id).expect("toy nodes have storage").executed
}

// ---------------------------------------------------------------------------------------------
// Determinism

/// Every event as `(time, rendering)`, every completion as `(time, client, seq)`, and the stats.
type Traces = (Vec<(Time, String)>, Vec<(Time, u64, u64)>, SimStats);

/// A busy little world on a jittery WAN: a ring with two tokens, pings, and clients, one link
/// losing a fifth of its messages, and, if `faults` is given, a fault plan drawn from `seed` too
/// (crashes that lose state bring a node back empty).
fn jittery_world(seed: u64, faults: Option<&RandomFaults>) -> Traces {
    let nodes = (0..6)
        .map(|n| {
            let node = ToyNode::new(p(n)).in_ring(6, if n == 0 { 2 } else { 0 }).recording();
            if n == 1 {
                node.pinging(vec![p(3), p(4)], Duration::from_millis(7), 100)
            } else {
                node
            }
        })
        .collect();
    let (mut sim, _) = sim_with(Topology::wan_normal50(3), seed, nodes);
    for c in 0..6u32 {
        let client = ClosedLoopClient::new(ClientId(u64::from(c)), p(c), "t").thinking(Duration::from_millis(3));
        sim.add_client(Box::new(client), (c as usize + 1) % 3).expect("new client");
    }
    let mut plan = match faults {
        Some(spec) => {
            // A node that lost its state comes back empty, the way a real one restarts.
            sim.set_recovery(Box::new(|id, _| Box::new(ToyNode::new(id).in_ring(6, 0).recording())));
            FaultPlan::random(&mut ChaCha8Rng::seed_from_u64(seed), spec)
        }
        None => FaultPlan::new(),
    };
    let pings_to_4 = Links::Directed { from: Endpoint::Process(p(1)), to: Endpoint::Process(p(4)) };
    plan.drop_messages(Window::always(), pings_to_4, 0.2);
    *sim.faults_mut() = plan;
    sim.enable_trace();
    let mut completions = Vec::new();
    sim.run_until(ms(3_000.0), &mut |now, c| completions.push((now, c.request.client.0, c.request.seq)));
    (sim.take_trace(), completions, sim.stats().clone())
}

#[test]
fn same_seed_gives_the_same_trace() {
    let (trace_a, done_a, _) = jittery_world(7, None);
    let (trace_b, done_b, _) = jittery_world(7, None);
    assert!(trace_a.len() > 1_000, "a busy run: {} events", trace_a.len());
    assert!(!done_a.is_empty());
    assert_eq!(trace_a, trace_b);
    assert_eq!(done_a, done_b);
}

#[test]
fn another_seed_with_jitter_gives_another_trace() {
    let (trace_a, ..) = jittery_world(7, None);
    let (trace_b, ..) = jittery_world(8, None);
    assert_ne!(trace_a, trace_b);
}

#[test]
fn a_random_fault_plan_replays_byte_for_byte() {
    let spec = RandomFaults {
        processes: (0..6).map(p).collect(),
        horizon: ms(2_000.0),
        message_rules: 8,
        max_probability: 0.2,
        max_extra: Duration::from_millis(20),
        partitions: 1,
        crashes: 2,
        crashes_lose_state: true,
        stalls: 0,
    };
    let (trace_a, done_a, stats_a) = jittery_world(2, Some(&spec));
    let (trace_b, done_b, stats_b) = jittery_world(2, Some(&spec));
    // The plan really did things: it lost, duplicated and cut off messages, and crashed two
    // processes, which the recovery rebuilt.
    assert!(trace_a.len() > 1_000, "a busy run: {} events", trace_a.len());
    assert!(stats_a.messages_dropped.rule > 0, "{stats_a:?}");
    assert!(stats_a.messages_dropped.partition > 0, "{stats_a:?}");
    assert!(stats_a.messages_duplicated > 0, "{stats_a:?}");
    let recoveries: u64 = stats_a.processes.iter().map(|s| s.recoveries).sum();
    assert_eq!(recoveries, 2, "{stats_a:?}");
    assert!(!done_a.is_empty());
    let bytes = |trace: &[(Time, String)]| trace.iter().map(|(t, e)| format!("{} {e}\n", t.0)).collect::<String>();
    assert_eq!(bytes(&trace_a), bytes(&trace_b));
    assert_eq!(done_a, done_b);
    assert_eq!(stats_a, stats_b);
    let (plain, ..) = jittery_world(2, None);
    assert_ne!(bytes(&plain), bytes(&trace_a));
}

#[test]
fn adding_a_drop_rule_does_not_shift_other_links_delays() {
    // Node 0 pings 1 and 2 over a jittery WAN. Losing every message to 1 must not change when 2's
    // pings arrive: delays come from the network stream, drop decisions from the faults stream.
    let run_with = |drop: bool| {
        let nodes = vec![
            ToyNode::new(p(0)).pinging(vec![p(1), p(2)], Duration::from_millis(1), 200),
            ToyNode::new(p(1)).recording(),
            ToyNode::new(p(2)).recording(),
        ];
        let (mut sim, nodes) = sim_with(Topology::wan_normal50(3), 11, nodes);
        if drop {
            let link = Links::Directed { from: Endpoint::Process(p(0)), to: Endpoint::Process(p(1)) };
            sim.faults_mut().drop_messages(Window::always(), link, 0.5);
        }
        run(&mut sim, ms(1_000.0));
        (nodes[2].pings(), nodes[1].pings().len())
    };
    let (plain, all_1) = run_with(false);
    let (with_drops, some_1) = run_with(true);
    assert_eq!(plain.len(), 200);
    assert_eq!(plain, with_drops);
    assert_eq!(all_1, 200);
    assert!(some_1 < 200);
}

// ---------------------------------------------------------------------------------------------
// Network

#[test]
fn a_message_takes_the_topologys_one_way_delay() {
    // wan5: Germany (site 0) to Japan (site 1) is half of 253 ms.
    let mut topology = Topology::wan5();
    topology.cpu.message_us = 0.0;
    let nodes = vec![ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_millis(1), 1), ToyNode::new(p(1)).recording()];
    let (mut sim, nodes) = sim_with(topology, 1, nodes);
    run(&mut sim, ms(1_000.0));
    assert_eq!(nodes[1].pings(), vec![(ms(126.5), p(0), 0)]);
}

#[test]
fn handling_a_message_adds_the_cpu_message_time() {
    let topology = Topology::wan5(); // message_us = 20
    let nodes = vec![ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_millis(1), 1), ToyNode::new(p(1)).recording()];
    let (mut sim, nodes) = sim_with(topology, 1, nodes);
    run(&mut sim, ms(1_000.0));
    assert_eq!(nodes[1].pings(), vec![(ms(126.52), p(0), 0)]);
}

#[test]
fn a_request_costs_a_round_trip_plus_execution() {
    // A client in Japan using the process in Germany: 253 ms round trip, 1 ms transaction.
    let mut topology = Topology::wan5();
    topology.cpu.message_us = 0.0;
    let (mut sim, _) = sim_with(topology, 1, vec![ToyNode::new(p(0)).job_cost(Duration::from_millis(1))]);
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(9), p(0), "t").limited_to(2)), 1).expect("client");
    let done = run(&mut sim, ms(10_000.0));
    assert_eq!(done.len(), 2);
    for c in &done {
        assert_eq!(c.completed.saturating_sub(c.issued), Duration::from_micros(254_000));
    }
    assert_eq!(executed(&sim, p(0)), 2);
    assert_eq!(sim.stats().messages_sent, 4);
    // The storage's tally comes with its process's counters.
    let reports = sim.process_reports();
    assert!(reports[0].1.contains(&("storage_executed", 2)), "{reports:?}");
}

#[test]
fn bandwidth_adds_the_transfer_time_of_the_postcard_size() {
    // 8 kbit/s is one byte per millisecond; a `Ping { seq: 0 }` is two bytes in postcard.
    let mut topology = Topology::wan5();
    topology.cpu.message_us = 0.0;
    topology.bandwidth_bps = Some(8_000.0);
    let nodes = vec![ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_millis(1), 1), ToyNode::new(p(1)).recording()];
    let (mut sim, nodes) = sim_with(topology, 1, nodes);
    run(&mut sim, ms(1_000.0));
    assert_eq!(nodes[1].pings(), vec![(ms(128.5), p(0), 0)]);
}

#[test]
fn a_sites_outgoing_link_sends_one_message_at_a_time() {
    // Three 2-byte pings 1 ms apart over 8 kbit/s: each takes 2 ms to go out, so the second and
    // third wait for the link and arrive 2 ms apart, not 1.
    let mut topology = Topology::wan5();
    topology.cpu.message_us = 0.0;
    topology.bandwidth_bps = Some(8_000.0);
    let nodes = vec![ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_millis(1), 3), ToyNode::new(p(1)).recording()];
    let (mut sim, nodes) = sim_with(topology, 1, nodes);
    run(&mut sim, ms(1_000.0));
    let at: Vec<Time> = nodes[1].pings().iter().map(|(t, _, _)| *t).collect();
    assert_eq!(at, vec![ms(128.5), ms(130.5), ms(132.5)]);
    assert_eq!(sim.stats().uplink_wait, Duration::from_millis(1 + 2));
}

#[test]
fn links_stay_fifo_under_jitter() {
    // Pings every 0.1 ms over a link whose delay varies by +-40 ms: without FIFO links most would
    // overtake each other. With two cores handling them, order must still hold end to end.
    let mut topology = Topology::wan_normal50(2);
    topology.jitter = Jitter::Uniform { half_width_ms: 40.0 };
    let nodes = vec![
        ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_micros(100), 2_000),
        ToyNode::new(p(1)).recording(),
    ];
    let (mut sim, nodes) = sim_with(topology, 3, nodes);
    run(&mut sim, ms(2_000.0));
    let got = nodes[1].pings();
    assert_eq!(got.len(), 2_000);
    for (k, (_, _, seq)) in got.iter().enumerate() {
        assert_eq!(*seq, k as u64, "ping {seq} arrived in place {k}");
    }
    assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
    // The jitter is there: pings 100 ms apart (more than the 80 ms the delay can vary, so no link
    // ever holds one back) see delays spread over tens of ms. Dense pings with such delays would
    // overtake each other all the time; in-order arrival above means the links held them back.
    let mut topology = Topology::wan_normal50(2);
    topology.jitter = Jitter::Uniform { half_width_ms: 40.0 };
    let nodes = vec![
        ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_millis(100), 100),
        ToyNode::new(p(1)).recording(),
    ];
    let (mut sim, nodes) = sim_with(topology, 3, nodes);
    run(&mut sim, ms(20_000.0));
    let delays: Vec<u64> = nodes[1].pings().iter().map(|(t, _, seq)| t.0 - seq * 100_000_000).collect();
    assert_eq!(delays.len(), 100);
    let spread = delays.iter().max().unwrap_or(&0) - delays.iter().min().unwrap_or(&0);
    assert!(spread > 60_000_000, "delays spread over only {spread} ns");
}

/// wan5 with free message handling and a 0.25 ms loopback hop. Machines 0 and 1 are in Germany,
/// machine 2 in Japan; p0 and p1 share machine 0, p2 is on machine 1, p3 on machine 2.
fn two_sites_three_machines() -> (Topology, Deployment) {
    let mut topology = Topology::wan5();
    topology.cpu.message_us = 0.0;
    topology.machine_local_ms = 0.25;
    let deployment = Deployment {
        machines: vec![Machine { site: 0, cores: 2 }, Machine { site: 0, cores: 2 }, Machine { site: 1, cores: 2 }],
        processes: vec![placement(0, 0, None), placement(1, 0, None), placement(2, 1, None), placement(3, 2, None)],
        groups: Vec::new(),
    };
    (topology, deployment)
}

#[test]
fn messages_inside_a_machine_take_the_machine_local_delay() {
    let (topology, deployment) = two_sites_three_machines();
    assert_eq!(topology.machine_local_delay(), Duration::from_micros(250));
    let nodes = vec![
        ToyNode::new(p(0)).pinging(vec![p(0), p(1), p(2), p(3)], Duration::from_secs(1), 2).recording(),
        ToyNode::new(p(1)).pinging(vec![p(0)], Duration::from_secs(1), 1).recording(),
        ToyNode::new(p(2)).recording(),
        ToyNode::new(p(3)).recording(),
    ];
    let (mut sim, nodes) = sim_deployed(topology, deployment, 1, nodes);
    run(&mut sim, ms(3_000.0));
    // To itself and to its machine-mate: the loopback hop, both ways.
    assert_eq!(
        nodes[0].pings(),
        vec![(ms(0.25), p(0), 0), (ms(0.25), p(1), 0), (ms(1_000.25), p(0), 1)]
    );
    assert_eq!(nodes[1].pings(), vec![(ms(0.25), p(0), 0), (ms(1_000.25), p(0), 1)]);
    // Another machine of the same site: the site's diagonal (a 20 ms round trip in wan5).
    assert_eq!(nodes[2].pings(), vec![(ms(10.0), p(0), 0), (ms(1_010.0), p(0), 1)]);
    // Another site: Germany to Japan.
    assert_eq!(nodes[3].pings(), vec![(ms(126.5), p(0), 0), (ms(1_126.5), p(0), 1)]);
}

#[test]
fn messages_inside_a_machine_draw_nothing_from_the_network() {
    // On a jittery WAN, p0's pings to p2 (another machine) arrive at the same jittered times
    // whether or not p0 also pings its machine-mate p1, whose pings arrive exactly on time.
    let run_with = |local: bool| {
        let (mut topology, deployment) = two_sites_three_machines();
        topology.jitter = Jitter::Uniform { half_width_ms: 5.0 };
        let targets = if local { vec![p(1), p(2)] } else { vec![p(2)] };
        let nodes = vec![
            ToyNode::new(p(0)).pinging(targets, Duration::from_millis(50), 20),
            ToyNode::new(p(1)).recording(),
            ToyNode::new(p(2)).recording(),
            ToyNode::new(p(3)),
        ];
        let (mut sim, nodes) = sim_deployed(topology, deployment, 5, nodes);
        run(&mut sim, ms(2_000.0));
        (nodes[1].pings(), nodes[2].pings())
    };
    let (local, remote_with) = run_with(true);
    let (none, remote_without) = run_with(false);
    assert!(none.is_empty());
    assert_eq!(local, (0..20).map(|k| (ms(50.0 * k as f64 + 0.25), p(0), k)).collect::<Vec<_>>());
    assert_eq!(remote_with.len(), 20);
    assert_eq!(remote_with, remote_without);
    // The remote delays are jittered, so equality above is not a coincidence of constant delays.
    assert!(remote_with.iter().any(|(t, _, k)| *t != ms(50.0 * *k as f64 + 10.0)));
}

// ---------------------------------------------------------------------------------------------
// Machines and cores

#[test]
fn pinned_processes_run_in_parallel_and_unpinned_ones_share_the_other_cores() {
    // One 5 ms request per process, all arriving at 0.1 ms; each reply arrives 0.1 ms after its job.
    let deployment = Deployment {
        machines: vec![
            Machine { site: 0, cores: 2 }, // p0 on core 0, p1 on core 1: in parallel
            Machine { site: 0, cores: 1 }, // p2 and p3 unpinned on one core: one after the other
            Machine { site: 0, cores: 3 }, // p4 on core 2; p5, p6, p7 share cores 0 and 1
            Machine { site: 0, cores: 2 }, // p8 and p9 both on core 1; core 0 idles
        ],
        processes: vec![
            placement(0, 0, Some(0)),
            placement(1, 0, Some(1)),
            placement(2, 1, None),
            placement(3, 1, None),
            placement(4, 2, Some(2)),
            placement(5, 2, None),
            placement(6, 2, None),
            placement(7, 2, None),
            placement(8, 3, Some(1)),
            placement(9, 3, Some(1)),
        ],
        groups: Vec::new(),
    };
    let nodes = (0..10).map(|n| ToyNode::new(p(n)).job_cost(Duration::from_millis(5))).collect();
    let (mut sim, _) = sim_deployed(lan_free_messages(), deployment, 1, nodes);
    for c in 0..10 {
        sim.add_client(Box::new(ClosedLoopClient::new(ClientId(c), p(c as u32), "t").limited_to(1)), 0).expect("client");
    }
    let done = run(&mut sim, ms(20.0));
    let completed: BTreeMap<u64, Time> = done.iter().map(|c| (c.request.client.0, c.completed)).collect();
    let expected = [5.2, 5.2, 5.2, 10.2, 5.2, 5.2, 5.2, 10.2, 5.2, 10.2];
    assert_eq!(completed, expected.iter().enumerate().map(|(c, t)| (c as u64, ms(*t))).collect());
    let cores: Vec<u32> = (0..10).map(|n| sim.stats().process(p(n)).expect("stats").cores).collect();
    assert_eq!(cores, [1, 1, 1, 1, 1, 2, 2, 2, 1, 1]);
    for n in 0..10 {
        assert_eq!(sim.stats().process(p(n)).map(|s| s.busy), Some(Duration::from_millis(5)), "p{n}");
    }
    // p5 kept one of its pool's two cores busy for 5 ms of 20.
    assert!((sim.cpu_utilisation(p(5)) - 0.125).abs() < 1e-9, "{}", sim.cpu_utilisation(p(5)));
}

/// Throughput (completions/s) and mean latency of `clients` closed-loop clients on one 2-core
/// process with 5 ms transactions, measured over 20 s after a 1 s warm-up.
fn saturation_point(clients: u64) -> (f64, Duration, Sim) {
    let mut topology = Topology::lan();
    topology.cpu.cores = 2;
    topology.cpu.message_us = 0.0;
    let (mut sim, _) = sim_with(topology, 5, vec![ToyNode::new(p(0)).job_cost(Duration::from_millis(5))]);
    for c in 0..clients {
        sim.add_client(Box::new(ClosedLoopClient::new(ClientId(c), p(0), "t")), 0).expect("client");
    }
    let (warm, end) = (ms(1_000.0), ms(21_000.0));
    let mut count = 0u64;
    let mut latency = Duration::ZERO;
    sim.run_until(end, &mut |now, c| {
        if now > warm {
            count += 1;
            latency += c.completed.saturating_sub(c.issued);
        }
    });
    let throughput = count as f64 / (end.as_secs_f64() - warm.as_secs_f64());
    (throughput, latency / count.max(1) as u32, sim)
}

#[test]
fn two_cores_of_five_ms_jobs_saturate_at_400_per_second() {
    // One client: 5 ms of work plus a 0.2 ms round trip per request.
    let (one, one_latency, _) = saturation_point(1);
    assert!((one - 1_000.0 / 5.2).abs() < 1.0, "1 client: {one}/s");
    assert_eq!(one_latency, Duration::from_micros(5_200));

    let mut previous = one_latency;
    for clients in [2u64, 4, 8, 16, 32] {
        // Two clients still find a free core each; from four on, requests queue.
        let (throughput, latency, sim) = saturation_point(clients);
        if clients >= 4 {
            assert!((throughput - 400.0).abs() < 4.0, "{clients} clients: {throughput}/s");
            assert!(sim.cpu_utilisation(p(0)) > 0.99, "{clients} clients: utilisation {}", sim.cpu_utilisation(p(0)));
        }
        if clients == 2 {
            assert_eq!(latency, one_latency);
        } else {
            assert!(latency > previous, "{clients} clients: latency {latency:?} not above {previous:?}");
        }
        previous = latency;
        if clients == 32 {
            // Little's law: 32 requests always in the system at 400/s take 80 ms each.
            let expected = 80.0;
            let got = latency.as_secs_f64() * 1e3;
            assert!((got - expected).abs() < 1.0, "32 clients: {got} ms");
            // 2 running, 30 waiting.
            assert_eq!(sim.stats().process(p(0)).map(|n| n.max_cpu_queue), Some(30));
        }
    }
}

#[test]
fn a_charge_holds_the_core_and_delays_the_handlers_effects() {
    // Handling a request charges 3 ms before its 1 ms storage job may start: the reply leaves
    // at 4.1 ms instead of 1.1 ms.
    let node = || ToyNode::new(p(0)).job_cost(Duration::from_millis(1)).charging(Duration::from_millis(3));
    let (mut sim, _) = sim_with(lan_free_messages(), 1, vec![node()]);
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(0), p(0), "t").limited_to(1)), 0).expect("client");
    let done = run(&mut sim, ms(20.0));
    assert_eq!(done.iter().map(|c| (c.issued, c.completed)).collect::<Vec<_>>(), vec![(ms(0.0), ms(4.2))]);
    assert_eq!(sim.stats().process(p(0)).map(|s| s.busy), Some(Duration::from_millis(4)));
    assert_eq!(sim.stats().process(p(0)).map(|s| s.handled), Some(1));

    // On one core, the second request's handling waits for the first one's charge (until 3.1 ms),
    // and the first one's storage job for the second one's charge (until 6.1 ms).
    let mut topology = lan_free_messages();
    topology.cpu.cores = 1;
    let (mut sim, _) = sim_with(topology, 1, vec![node().recording()]);
    for c in 0..2 {
        sim.add_client(Box::new(ClosedLoopClient::new(ClientId(c), p(0), "t").limited_to(1)), 0).expect("client");
    }
    let done = run(&mut sim, ms(20.0));
    let completed: Vec<(u64, Time)> = done.iter().map(|c| (c.request.client.0, c.completed)).collect();
    assert_eq!(completed, vec![(0, ms(7.2)), (1, ms(8.2))]);
    assert_eq!(sim.stats().process(p(0)).map(|s| s.busy), Some(Duration::from_millis(8)));
    assert_eq!(sim.stats().process(p(0)).map(|s| s.max_cpu_queue), Some(1));
}

#[test]
fn a_crash_during_a_charge_loses_the_handlers_effects_and_frees_the_core() {
    // The request is handled at 0.1 ms and charges 3 ms; the crash at 2 ms takes the charged
    // work with it: no storage job, no reply. After the restart the process serves at once.
    let node = ToyNode::new(p(0)).job_cost(Duration::from_millis(1)).charging(Duration::from_millis(3));
    let mut topology = lan_free_messages();
    topology.cpu.cores = 1;
    let (mut sim, _) = sim_with(topology, 1, vec![node]);
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(0), p(0), "t").limited_to(1)), 0).expect("client");
    sim.faults_mut().crash(p(0), ms(2.0), Some(ms(2.5)));
    assert!(run(&mut sim, ms(10.0)).is_empty());
    assert_eq!(executed(&sim, p(0)), 0);
    assert_eq!(sim.stats().process(p(0)).map(|s| s.jobs_lost_in_crash), Some(1));
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), p(0), "t").limited_to(1)), 0).expect("client");
    let done = run(&mut sim, ms(30.0));
    assert_eq!(done.iter().map(|c| (c.issued, c.completed)).collect::<Vec<_>>(), vec![(ms(10.0), ms(14.2))]);
}

// ---------------------------------------------------------------------------------------------
// Timers

/// What a [`TimerScript`] does: set timer `id` to fire `after` ms from now, or cancel it.
#[derive(Clone, Copy, Debug)]
enum Op {
    Set(u64, u64),
    Cancel(u64),
}

/// A process that runs a script of timer operations at start and when each timer fires, and
/// records the timers that fired.
struct TimerScript {
    at_start: Vec<Op>,
    on_fire: BTreeMap<u64, Vec<Op>>,
    fired: Rc<RefCell<Vec<(Time, u64)>>>,
}

impl TimerScript {
    fn push(ops: &[Op], out: &mut Vec<Effect<Toy>>) {
        for op in ops {
            out.push(match *op {
                Op::Set(id, after) => Effect::SetTimer { id: TimerId(id), after: Duration::from_millis(after) },
                Op::Cancel(id) => Effect::CancelTimer { id: TimerId(id) },
            });
        }
    }
}

impl Process<Toy> for TimerScript {
    fn id(&self) -> ProcessId {
        p(0)
    }
    fn start(&mut self, _now: Time, out: &mut Vec<Effect<Toy>>) {
        TimerScript::push(&self.at_start, out);
    }
    fn on_event(&mut self, now: Time, event: Event<Toy>, out: &mut Vec<Effect<Toy>>) {
        if let Event::Timer(TimerId(id)) = event {
            self.fired.borrow_mut().push((now, id));
            TimerScript::push(&self.on_fire.remove(&id).unwrap_or_default(), out);
        }
    }
}

/// Runs a [`TimerScript`] alone for a second; the timers that fired, as `(ms, id)`.
fn run_timer_script(at_start: Vec<Op>, on_fire: Vec<(u64, Vec<Op>)>) -> (Vec<(Time, u64)>, Sim) {
    let fired = Rc::new(RefCell::new(Vec::new()));
    let script = TimerScript { at_start, on_fire: on_fire.into_iter().collect(), fired: fired.clone() };
    let mut sim = Sim::new(lan_free_messages(), Deployment::one_per_machine(&[0], 1, "timers"), 1).expect("valid");
    sim.add_process(Box::new(script), None).expect("new process");
    run(&mut sim, ms(1_000.0));
    let fired = fired.borrow().clone();
    (fired, sim)
}

#[test]
fn a_cancelled_timer_never_fires_and_cancelling_a_fired_one_is_harmless() {
    let (fired, sim) = run_timer_script(
        // Timer 5 is cancelled by the handler that set it; 99 was never set.
        vec![Op::Set(1, 10), Op::Set(2, 20), Op::Set(3, 5), Op::Set(5, 1), Op::Cancel(5), Op::Cancel(99)],
        vec![
            (3, vec![Op::Cancel(2)]),
            // Timer 1 cancels itself while firing, and timer 3, which fired earlier.
            (1, vec![Op::Cancel(1), Op::Cancel(3), Op::Set(4, 1)]),
        ],
    );
    assert_eq!(fired, vec![(ms(5.0), 3), (ms(10.0), 1), (ms(11.0), 4)]);
    assert_eq!(sim.stats().timers_fired, 3);
    assert_eq!(sim.stats().timers_discarded, 0);
}

#[test]
fn a_timer_id_set_again_fires_only_at_its_latest_deadline() {
    // An election timeout's pattern: one id, reset again and again. Timer 1 is cancelled and set
    // again for later; timer 6 is set again for later without a cancel. Neither may fire at its
    // first deadline (10 ms), and each fires once.
    let (fired, sim) = run_timer_script(
        vec![Op::Set(1, 10), Op::Set(2, 3), Op::Set(6, 10), Op::Set(7, 10)],
        vec![(2, vec![Op::Cancel(1), Op::Set(1, 20), Op::Set(6, 20), Op::Set(7, 2)])],
    );
    assert_eq!(fired, vec![(ms(3.0), 2), (ms(5.0), 7), (ms(23.0), 1), (ms(23.0), 6)]);
    assert_eq!(sim.stats().timers_fired, 4);
}

// ---------------------------------------------------------------------------------------------
// Faults

/// Node 0 pings 1 and 2 every millisecond, 100 times, over a LAN with free message handling: the
/// ping sent at k ms arrives at k + 0.1 ms.
fn pinged_pair() -> (Sim, Vec<Handle>) {
    let nodes = vec![
        ToyNode::new(p(0)).pinging(vec![p(1), p(2)], Duration::from_millis(1), 100),
        ToyNode::new(p(1)).recording(),
        ToyNode::new(p(2)).recording(),
    ];
    sim_with(lan_free_messages(), 1, nodes)
}

fn seqs_from(nodes: &[Handle], at: ProcessId, from: ProcessId) -> Vec<u64> {
    nodes[at.0 as usize].pings().into_iter().filter(|(_, f, _)| *f == from).map(|(_, _, s)| s).collect()
}

fn directed(from: u32, to: u32) -> Links {
    Links::Directed { from: Endpoint::Process(p(from)), to: Endpoint::Process(p(to)) }
}

#[test]
fn a_certain_drop_rule_loses_exactly_its_window_on_its_link() {
    let (mut sim, nodes) = pinged_pair();
    sim.faults_mut().drop_messages(Window::new(ms(20.0), ms(40.0)), directed(0, 1), 1.0);
    run(&mut sim, ms(1_000.0));
    let expected: Vec<u64> = (0..100).filter(|k| !(20..40).contains(k)).collect();
    assert_eq!(seqs_from(&nodes, p(1), p(0)), expected);
    assert_eq!(seqs_from(&nodes, p(2), p(0)), (0..100).collect::<Vec<_>>());
    assert_eq!(sim.stats().messages_dropped.rule, 20);
    assert_eq!(sim.stats().messages_dropped.total(), 20);
    assert_eq!(sim.stats().messages_sent, 200);
}

#[test]
fn a_probable_drop_rule_loses_some_and_counts_them() {
    let outcome = |seed: u64| {
        let nodes = vec![
            ToyNode::new(p(0)).pinging(vec![p(1), p(2)], Duration::from_millis(1), 100),
            ToyNode::new(p(1)).recording(),
            ToyNode::new(p(2)).recording(),
        ];
        let (mut sim, nodes) = sim_with(lan_free_messages(), seed, nodes);
        sim.faults_mut().drop_messages(Window::always(), Links::Touching(Endpoint::Process(p(1))), 0.5);
        run(&mut sim, ms(1_000.0));
        let got = seqs_from(&nodes, p(1), p(0));
        assert_eq!(seqs_from(&nodes, p(2), p(0)).len(), 100);
        assert_eq!(got.len() as u64 + sim.stats().messages_dropped.rule, 100);
        assert!((25..75).contains(&got.len()), "kept {}", got.len());
        got
    };
    assert_eq!(outcome(1), outcome(1));
    assert_ne!(outcome(1), outcome(2));
}

#[test]
fn a_duplicate_rule_delivers_its_window_twice() {
    let (mut sim, nodes) = pinged_pair();
    sim.faults_mut().duplicate_messages(Window::new(ms(20.0), ms(40.0)), directed(0, 1), 1.0);
    run(&mut sim, ms(1_000.0));
    let mut copies: BTreeMap<u64, u32> = BTreeMap::new();
    for seq in seqs_from(&nodes, p(1), p(0)) {
        *copies.entry(seq).or_default() += 1;
    }
    let expected: BTreeMap<u64, u32> = (0..100).map(|k| (k, if (20..40).contains(&k) { 2 } else { 1 })).collect();
    assert_eq!(copies, expected);
    assert_eq!(seqs_from(&nodes, p(2), p(0)), (0..100).collect::<Vec<_>>());
    assert_eq!(sim.stats().messages_duplicated, 20);
    assert_eq!(sim.stats().messages_sent, 200);
    assert_eq!(sim.stats().messages_dropped.total(), 0);
    // A copy arrives no earlier than its original and at most one more delay (0.1 ms) later.
    for (t, _, seq) in nodes[1].pings() {
        let sent = ms(seq as f64);
        assert!(t >= ms(seq as f64 + 0.1) && t <= sent + Duration::from_nanos(200_001), "ping {seq} at {t}");
    }
}

/// Pings from 0 to 1 every 0.1 ms, 50 of them; the seqs in the order they arrived.
fn arrival_order(reorder: bool) -> Vec<u64> {
    let nodes = vec![ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_micros(100), 50), ToyNode::new(p(1)).recording()];
    let (mut sim, nodes) = sim_with(lan_free_messages(), 1, nodes);
    if reorder {
        // Only the first ping (sent at 0) is taken out of line, by up to 20 ms.
        let window = Window::new(ms(0.0), ms(0.05));
        sim.faults_mut().reorder_messages(window, directed(0, 1), 1.0, Duration::from_millis(20));
    }
    run(&mut sim, ms(100.0));
    seqs_from(&nodes, p(1), p(0))
}

#[test]
fn a_reorder_rule_lets_later_messages_overtake_and_a_plain_link_is_fifo() {
    assert_eq!(arrival_order(false), (0..50).collect::<Vec<_>>());
    let got = arrival_order(true);
    assert_eq!(got.len(), 50);
    assert_ne!(got, (0..50).collect::<Vec<_>>());
    let position_of_0 = got.iter().position(|s| *s == 0).expect("ping 0 arrived");
    assert!(position_of_0 > 0, "{got:?}");
    // The others were not reordered: they keep their order among themselves.
    let others: Vec<u64> = got.iter().copied().filter(|s| *s != 0).collect();
    assert_eq!(others, (1..50).collect::<Vec<_>>());
}

#[test]
fn a_partition_separates_its_groups_only_in_its_window() {
    let nodes = vec![
        ToyNode::new(p(0)).pinging(vec![p(1), p(2)], Duration::from_millis(1), 100).recording(),
        ToyNode::new(p(1)).pinging(vec![p(0), p(2)], Duration::from_millis(1), 100).recording(),
        ToyNode::new(p(2)).recording(),
    ];
    let (mut sim, nodes) = sim_with(lan_free_messages(), 1, nodes);
    sim.faults_mut().partition(Window::new(ms(10.0), ms(30.0)), [p(0)], [p(1), p(3)]);
    // A client of process 1 is not affected by a partition between processes.
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), p(1), "t").limited_to(50)), 0).expect("client");
    let done = run(&mut sim, ms(1_000.0));
    let cut: Vec<u64> = (0..100).filter(|k| !(10..30).contains(k)).collect();
    assert_eq!(seqs_from(&nodes, p(1), p(0)), cut);
    assert_eq!(seqs_from(&nodes, p(0), p(1)), cut);
    assert_eq!(seqs_from(&nodes, p(2), p(0)).len(), 100);
    assert_eq!(seqs_from(&nodes, p(2), p(1)).len(), 100);
    assert_eq!(sim.stats().messages_dropped.partition, 40);
    assert_eq!(sim.stats().messages_dropped.total(), 40);
    assert_eq!(done.len(), 50);
}

#[test]
fn a_delay_rule_slows_its_link_in_its_window() {
    let (mut sim, nodes) = pinged_pair();
    sim.faults_mut().delay_messages(Window::new(ms(50.0), ms(51.0)), directed(0, 2), Duration::from_millis(5));
    run(&mut sim, ms(1_000.0));
    let at_2 = nodes[2].pings();
    assert_eq!(at_2[49].0, ms(49.1));
    assert_eq!(at_2[50].0, ms(55.1)); // delayed ping 50
    // FIFO: pings 51..=54 queue behind the delayed one on the same link.
    for (t, _, seq) in &at_2[51..=54] {
        assert_eq!(*t, ms(55.1), "ping {seq}");
    }
    assert_eq!(at_2[55].0, ms(55.1));
    assert_eq!(at_2[56].0, ms(56.1));
    assert_eq!(nodes[1].pings()[50].0, ms(50.1));
}

#[test]
fn a_crashed_process_misses_messages_and_timers_then_resumes() {
    let nodes = vec![
        ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_millis(1), 100),
        // Process 1 pings 2 on its own timer chain.
        ToyNode::new(p(1)).pinging(vec![p(2)], Duration::from_millis(1), 100).recording(),
        ToyNode::new(p(2)).recording(),
    ];
    let (mut sim, nodes) = sim_with(lan_free_messages(), 1, nodes);
    sim.faults_mut().crash(p(1), ms(30.05), Some(ms(50.05)));
    run(&mut sim, ms(40.0));
    assert!(sim.is_down(p(1)));
    assert!(sim.process(p(1)).is_some(), "a pause keeps the process");
    run(&mut sim, ms(1_000.0));
    assert!(!sim.is_down(p(1)));
    // Pings reaching it at 30.1 .. 49.1 ms are lost; the rest arrive.
    let expected: Vec<u64> = (0..100).filter(|k| !(30..50).contains(k)).collect();
    assert_eq!(seqs_from(&nodes, p(1), p(0)), expected);
    assert_eq!(sim.stats().messages_dropped.crashed, 20);
    assert_eq!(sim.stats().messages_dropped.total(), 20);
    // Its timer due at 31 ms fired while it was down and was discarded, which ends its chain:
    // the pause-style crash keeps state but not the timers that came due meanwhile.
    assert_eq!(seqs_from(&nodes, p(2), p(1)), (0..=30).collect::<Vec<_>>());
    assert_eq!(sim.stats().timers_discarded, 1);
    assert!(nodes[1].seen().iter().all(|(t, _)| *t < ms(30.05) || *t >= ms(50.05)));
}

#[test]
fn a_crash_clears_the_cpu_queue_and_its_storage_work_never_runs() {
    let mut topology = lan_free_messages();
    topology.cpu.cores = 1;
    let (mut sim, nodes) = sim_with(topology, 1, vec![ToyNode::new(p(0)).job_cost(Duration::from_millis(5)).recording()]);
    for c in 0..3 {
        sim.add_client(Box::new(ClosedLoopClient::new(ClientId(c), p(0), "t").limited_to(1)), 0).expect("client");
    }
    // Requests arrive at 0.1 ms; one runs (until 5.1 ms), two wait. The crash takes all three.
    sim.faults_mut().crash(p(0), ms(2.0), Some(ms(3.0)));
    let done = run(&mut sim, ms(100.0));
    assert!(done.is_empty());
    assert_eq!(executed(&sim, p(0)), 0);
    assert_eq!(sim.stats().storage_jobs, 0);
    assert_eq!(sim.stats().process(p(0)).map(|n| n.jobs_lost_in_crash), Some(3));
    assert!(nodes[0].seen().iter().all(|(_, s)| !matches!(s, Seen::StorageDone(_))));
    // After the restart the process serves again; a client added now starts at the current time.
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(10), p(0), "t").limited_to(1)), 0).expect("client");
    let done = run(&mut sim, ms(200.0));
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].issued, ms(100.0));
    assert_eq!(done[0].completed, ms(105.2));
    assert_eq!(executed(&sim, p(0)), 1);
}

#[test]
fn a_crash_without_restart_is_forever() {
    let (mut sim, nodes) = pinged_pair();
    sim.faults_mut().crash(p(2), ms(10.05), None);
    run(&mut sim, ms(1_000.0));
    assert_eq!(seqs_from(&nodes, p(2), p(0)), (0..10).collect::<Vec<_>>());
    assert_eq!(sim.stats().messages_dropped.crashed, 90);
    assert_eq!(seqs_from(&nodes, p(1), p(0)).len(), 100);
}

#[test]
fn messages_to_nowhere_are_counted() {
    let nodes = vec![ToyNode::new(p(0)).pinging(vec![p(7)], Duration::from_millis(1), 3)];
    let (mut sim, _) = sim_with(lan_free_messages(), 1, nodes);
    run(&mut sim, ms(100.0));
    assert_eq!(sim.stats().messages_dropped.unknown_destination, 3);
}

// ---------------------------------------------------------------------------------------------
// Crashes that lose state

/// A protocol whose one process counts requests in memory, and checkpoints the count to storage
/// when asked (`save`): what a crash losing state leaves is the last checkpoint.
#[derive(Debug)]
struct Counter;

impl Protocol for Counter {
    type Msg = ();
    type Job = Save;
    type JobResult = u64;
    /// The count after the request.
    type Evidence = u64;
}

#[derive(Debug)]
struct Save(u64);

struct CounterStorage {
    saved: u64,
}

impl Storage for CounterStorage {
    type Job = Save;
    type Result = u64;
    fn run(&mut self, job: &Save) -> u64 {
        self.saved = job.0;
        job.0
    }
}

/// What the counter's incarnations did, kept by the test across crashes.
#[derive(Default)]
struct CounterLog {
    /// `(when, count)` at each `start`.
    starts: Vec<(Time, u64)>,
    timers: Vec<(Time, TimerId)>,
}

/// Counts `add` requests in memory (a volatile counter); `save` checkpoints the count. At start
/// it sets timer 1 to fire `timer_after` later.
struct CounterProcess {
    count: u64,
    timer_after: Duration,
    next_work: u64,
    pending: BTreeMap<WorkId, (ClientId, u64)>,
    log: Rc<RefCell<CounterLog>>,
}

impl CounterProcess {
    fn new(count: u64, timer_after: Duration, log: Rc<RefCell<CounterLog>>) -> CounterProcess {
        CounterProcess { count, timer_after, next_work: 0, pending: BTreeMap::new(), log }
    }
    fn reply(&self, client: ClientId, seq: u64) -> Effect<Counter> {
        let done = Done { outcome: Outcome::Committed(Vec::new()), evidence: self.count };
        Effect::Reply { to: client, reply: Reply { client, seq, body: ReplyBody::Done(done) } }
    }
}

impl Process<Counter> for CounterProcess {
    fn id(&self) -> ProcessId {
        p(0)
    }
    fn start(&mut self, now: Time, out: &mut Vec<Effect<Counter>>) {
        self.log.borrow_mut().starts.push((now, self.count));
        out.push(Effect::SetTimer { id: TimerId(1), after: self.timer_after });
    }
    fn on_event(&mut self, now: Time, event: Event<Counter>, out: &mut Vec<Effect<Counter>>) {
        match event {
            Event::Request(request) if request.txn == "save" => {
                let work = WorkId(self.next_work);
                self.next_work += 1;
                self.pending.insert(work, (request.client, request.seq));
                out.push(Effect::Storage { work, job: Save(self.count), cost: Duration::from_millis(1) });
            }
            Event::Request(request) => {
                self.count += 1;
                out.push(self.reply(request.client, request.seq));
            }
            Event::StorageDone { work, .. } => {
                let (client, seq) = self.pending.remove(&work).expect("a pending save");
                out.push(self.reply(client, seq));
            }
            Event::Timer(id) => self.log.borrow_mut().timers.push((now, id)),
            Event::Message { .. } => {}
        }
    }
}

/// Sends request `k` of its script at its time, whatever came back before; reports each reply.
struct ScriptClient {
    script: Vec<(Time, &'static str)>,
    sent: BTreeMap<u64, (Request, Time)>,
}

impl Client<u64> for ScriptClient {
    fn id(&self) -> ClientId {
        ClientId(1)
    }
    fn on_event(&mut self, now: Time, event: ClientEvent<u64>, out: &mut Vec<ClientEffect<u64>>) {
        match event {
            ClientEvent::Start => {
                for (k, (at, _)) in self.script.iter().enumerate() {
                    out.push(ClientEffect::SetTimer { id: TimerId(k as u64), after: at.saturating_sub(now) });
                }
            }
            ClientEvent::Timer(TimerId(k)) => {
                let txn = self.script[k as usize].1.to_string();
                let request = Request { client: ClientId(1), seq: k, txn, params: Vec::new() };
                self.sent.insert(k, (request.clone(), now));
                out.push(ClientEffect::Send { to: p(0), request });
            }
            ClientEvent::Reply { reply, .. } => {
                let (request, issued) = self.sent.remove(&reply.seq).expect("a reply to a sent request");
                let ReplyBody::Done(done) = reply.body else { panic!("the counter only answers") };
                let result = CompletionResult::Done(done);
                let completion = Completion { request, issued, completed: now, redirects: 0, result, interaction: None };
                out.push(ClientEffect::Completed(completion));
            }
        }
    }
}

/// What [`counter_run`] returns.
struct CounterRun {
    /// `(request seq, count the reply carried)`, in completion order.
    counts: Vec<(u64, u64)>,
    log: Rc<RefCell<CounterLog>>,
    sim: Simulation<Counter, CounterStorage>,
}

/// Two adds, a save (of 2), two more adds (4 in memory), a crash at 10 ms with a restart at
/// 20 ms, an add while down (lost), two adds after.
fn counter_run(loses_state: bool) -> CounterRun {
    let log = Rc::new(RefCell::new(CounterLog::default()));
    let deployment = Deployment::one_per_machine(&[0], 2, "counter");
    let mut sim = Simulation::<Counter, CounterStorage>::new(lan_free_messages(), deployment, 1).expect("valid");
    let first = CounterProcess::new(0, Duration::from_millis(30), log.clone());
    sim.add_process(Box::new(first), Some(CounterStorage { saved: 0 })).expect("new process");
    let recovered = log.clone();
    sim.set_recovery(Box::new(move |id, storage| {
        assert_eq!(id, p(0));
        let saved = storage.expect("the counter has storage").saved;
        Box::new(CounterProcess::new(saved, Duration::from_millis(40), recovered.clone()))
    }));
    let script = [
        (1.0, "add"),
        (2.0, "add"),
        (3.0, "save"),
        (5.0, "add"),
        (6.0, "add"),
        (15.0, "add"),
        (25.0, "add"),
        (26.0, "add"),
    ];
    let client = ScriptClient { script: script.iter().map(|(t, txn)| (ms(*t), *txn)).collect(), sent: BTreeMap::new() };
    sim.add_client(Box::new(client), 0).expect("client");
    if loses_state {
        sim.faults_mut().crash_losing_state(p(0), ms(10.0), Some(ms(20.0)));
    } else {
        sim.faults_mut().crash(p(0), ms(10.0), Some(ms(20.0)));
    }
    let mut done = run(&mut sim, ms(15.0));
    assert!(sim.is_down(p(0)));
    assert_eq!(sim.process(p(0)).is_none(), loses_state, "the process object is gone exactly when state is lost");
    done.extend(run(&mut sim, ms(100.0)));
    let counts = done
        .iter()
        .map(|c| match &c.result {
            CompletionResult::Done(d) => (c.request.seq, d.evidence),
            CompletionResult::Error(e) => panic!("{e}"),
        })
        .collect();
    CounterRun { counts, log, sim }
}

#[test]
fn a_crash_losing_state_restarts_from_storage_without_old_timers() {
    let CounterRun { counts, log, sim } = counter_run(true);
    // Requests 0..=4 before the crash; 5 reached the process while down; 6 and 7 count on from the
    // checkpoint (2), not from the 4 the lost incarnation had in memory.
    assert_eq!(counts, vec![(0, 1), (1, 2), (2, 2), (3, 3), (4, 4), (6, 3), (7, 4)]);
    // The recovery's process was started at the restart, with what storage kept.
    assert_eq!(log.borrow().starts, vec![(ms(0.0), 0), (ms(20.0), 2)]);
    // The first incarnation's timer (due at 30 ms) never fired, though the new incarnation has a
    // timer of the same id pending then; that one fires at 20 + 40 ms.
    assert_eq!(log.borrow().timers, vec![(ms(60.0), TimerId(1))]);
    let stats = sim.stats().process(p(0)).expect("stats").clone();
    assert_eq!((stats.crashes_losing_state, stats.recoveries), (1, 1));
    assert_eq!(sim.stats().messages_dropped.crashed, 1);
    assert_eq!(sim.stats().timers_discarded, 0);
    assert_eq!(sim.storage(p(0)).map(|s| s.saved), Some(2));
}

#[test]
fn a_pause_keeps_the_volatile_state_and_timers() {
    // The same run with a pause-style crash: the count goes on from memory, nothing restarts, and
    // the timer due at 30 ms (after the restart) fires.
    let CounterRun { counts, log, sim } = counter_run(false);
    assert_eq!(counts, vec![(0, 1), (1, 2), (2, 2), (3, 3), (4, 4), (6, 5), (7, 6)]);
    assert_eq!(log.borrow().starts, vec![(ms(0.0), 0)]);
    assert_eq!(log.borrow().timers, vec![(ms(30.0), TimerId(1))]);
    let stats = sim.stats().process(p(0)).expect("stats").clone();
    assert_eq!((stats.crashes_losing_state, stats.recoveries), (0, 0));
}

#[test]
fn a_stall_holds_the_timers_requests_and_job_completions_and_loses_none() {
    // The counter's script under a stall from 3.5 ms to 35 ms instead of a crash: five adds and
    // the timer due at 30 ms wait for 35 ms, then come in the order they reached the process;
    // the save's storage job (3.1 to 4.1 ms), stopped with its core at 3.5 ms, runs its last
    // 0.6 ms after the stall, so the adds are counted before its reply. Nothing is lost or
    // counted twice.
    let log = Rc::new(RefCell::new(CounterLog::default()));
    let deployment = Deployment::one_per_machine(&[0], 2, "counter");
    let mut sim = Simulation::<Counter, CounterStorage>::new(lan_free_messages(), deployment, 1).expect("valid");
    sim.add_process(Box::new(CounterProcess::new(0, Duration::from_millis(30), log.clone())), Some(CounterStorage { saved: 0 }))
        .expect("new process");
    let script = [1.0, 2.0, 3.0, 5.0, 6.0, 15.0, 25.0, 26.0].map(|t| (ms(t), if t == 3.0 { "save" } else { "add" }));
    sim.add_client(Box::new(ScriptClient { script: script.to_vec(), sent: BTreeMap::new() }), 0).expect("client");
    sim.faults_mut().stall(p(0), Window::new(ms(3.5), ms(35.0)));
    let mut done = run(&mut sim, ms(34.9));
    assert_eq!(done.len(), 2, "only what finished before the stall is answered during it");
    assert!(!sim.quiescent(), "what a stalled process holds is still to come");
    done.extend(run(&mut sim, ms(100.0)));
    let answered: Vec<(u64, u64, Time)> = done
        .iter()
        .map(|c| match &c.result {
            CompletionResult::Done(d) => (c.request.seq, d.evidence, c.completed),
            CompletionResult::Error(e) => panic!("{e}"),
        })
        .collect();
    let at_end = ms(35.1); // the stall's end and the reply's 0.1 ms
    let expected: Vec<(u64, u64, Time)> =
        [(0, 1, ms(1.2)), (1, 2, ms(2.2)), (3, 3, at_end), (4, 4, at_end), (5, 5, at_end), (6, 6, at_end), (7, 7, at_end), (2, 7, ms(35.7))]
            .to_vec();
    assert_eq!(answered, expected);
    assert_eq!(log.borrow().timers, vec![(ms(35.0), TimerId(1))], "the timer due during the stall fires at its end");
    assert_eq!(log.borrow().starts, vec![(ms(0.0), 0)], "a stall restarts nothing");
    assert_eq!(sim.storage(p(0)).map(|s| s.saved), Some(2));
    let stats = sim.stats();
    assert_eq!(stats.messages_dropped.total(), 0);
    assert_eq!((stats.timers_discarded, stats.events_held_in_stalls), (0, 7), "the job's completion, five adds, the timer");
    assert!(sim.quiescent());
}

#[test]
fn a_link_stays_fifo_across_a_stall_and_the_stall_touches_no_one_else() {
    // p0 pings p1 and p2 every millisecond; p1 stands still from 20 to 40 ms. Every ping reaches
    // p1, in order: those that arrived during the stall at 40 ms exactly, before any later one.
    let (mut sim, nodes) = pinged_pair();
    sim.faults_mut().stall(p(1), Window::new(ms(20.0), ms(40.0)));
    run(&mut sim, ms(1_000.0));
    assert_eq!(seqs_from(&nodes, p(1), p(0)), (0..100).collect::<Vec<_>>());
    assert_eq!(seqs_from(&nodes, p(2), p(0)), (0..100).collect::<Vec<_>>());
    let at_p1 = nodes[1].pings();
    let held: Vec<u64> = at_p1.iter().filter(|(t, _, _)| *t == ms(40.0)).map(|(_, _, s)| *s).collect();
    assert_eq!(held.len(), 20, "{at_p1:?}");
    assert!(at_p1.iter().all(|(t, _, _)| *t <= ms(20.0) || *t >= ms(40.0)), "p1 took nothing during the stall: {at_p1:?}");
    assert!(nodes[2].pings().iter().all(|(t, _, _)| *t != ms(40.0)), "p2 was not stalled");
    assert_eq!(sim.stats().messages_dropped.total(), 0);
}

/// Refuses a ping below 25 it has seen before (a copy; a later copy it takes in silence) and
/// every tenth ping (a refusal no fault explains).
struct Gatekeeper {
    seen: std::collections::BTreeSet<u64>,
}

impl Process<Toy> for Gatekeeper {
    fn id(&self) -> ProcessId {
        p(1)
    }
    fn start(&mut self, _: Time, _: &mut Vec<Effect<Toy>>) {}
    fn on_event(&mut self, _: Time, event: Event<Toy>, out: &mut Vec<Effect<Toy>>) {
        let Event::Message { from, msg: ToyMsg::Ping { seq } } = event else { return };
        if !self.seen.insert(seq) {
            if seq < 25 {
                out.push(Effect::Refuse { from, what: format!("ping {seq} again") });
            }
        } else if seq % 10 == 9 {
            out.push(Effect::Refuse { from, what: format!("ping {seq} is unwanted") });
        }
    }
}

#[test]
fn a_refusal_is_explained_by_a_duplicated_message_once() {
    // p0 pings p1 100 times, one a millisecond; every ping sent in the first 50 ms (0 to 49) is
    // delivered twice. A duplicated ping may be refused once: the copies of 0 to 24 (23 of them
    // alone), the first refusal of 9 and 19 and the unwanted 29, 39 and 49 are explained (28);
    // the copies of 9 and 19, refused a second time, and the unwanted 59 to 99 are not (7).
    // Comparing counts, 35 refusals against 50 copies, would have seen nothing wrong.
    let pinger = ToyNode::new(p(0)).pinging(vec![p(1)], Duration::from_millis(1), 100);
    let deployment = Deployment::one_per_machine(&[0, 0], 2, "toy");
    let mut sim = Sim::new(lan_free_messages(), deployment, 3).expect("valid");
    sim.add_process(Box::new(pinger), Some(ToyStorage::new(p(0)))).expect("p0");
    sim.add_process(Box::new(Gatekeeper { seen: Default::default() }), Some(ToyStorage::new(p(1)))).expect("p1");
    sim.faults_mut().duplicate_messages(Window::new(ms(0.0), ms(49.5)), directed(0, 1), 1.0);
    run(&mut sim, ms(1_000.0));
    let stats = sim.stats();
    assert_eq!(stats.messages_duplicated, 50);
    let p1 = stats.process(p(1)).expect("p1");
    assert_eq!(p1.messages_refused, 35);
    assert_eq!((stats.refusals_of_duplicates, p1.refusals_unexplained), (28, 7));
    let first = p1.first_unexplained_refusal.as_deref().expect("an unexplained refusal");
    assert_eq!(first, "p1 refused a message from p0: ping 9 again");
}

#[test]
#[should_panic(expected = "a crash of p1 loses its state, but the simulation has no recovery")]
fn a_crash_losing_state_without_a_recovery_panics_naming_the_process() {
    let (mut sim, _) = pinged_pair();
    sim.faults_mut().crash_losing_state(p(1), ms(10.0), Some(ms(20.0)));
    run(&mut sim, ms(100.0));
}

// ---------------------------------------------------------------------------------------------
// Random fault plans

#[test]
fn random_fault_plans_follow_the_seed_and_heal_by_the_horizon() {
    let spec = RandomFaults {
        processes: (0..5).map(p).collect(),
        horizon: ms(1_000.0),
        message_rules: 20,
        max_probability: 0.3,
        max_extra: Duration::from_millis(50),
        partitions: 3,
        crashes: 4,
        crashes_lose_state: true,
        stalls: 0,
    };
    let draw = |seed: u64, spec: &RandomFaults| FaultPlan::random(&mut ChaCha8Rng::seed_from_u64(seed), spec);
    let plans: Vec<FaultPlan> = (0..40).map(|seed| draw(seed, &spec)).collect();
    for (seed, plan) in plans.iter().enumerate() {
        assert_eq!(*plan, draw(seed as u64, &spec), "seed {seed} drew another plan the second time");
        for other in &plans[seed + 1..] {
            assert_ne!(plan, other, "seed {seed} drew the plan of another seed");
        }
        assert_eq!(plan.rules().len(), 23);
        assert_eq!(plan.crashes().len(), 4);
        for rule in plan.rules() {
            let w = rule.window;
            assert!(w.start < w.end && w.end <= spec.horizon, "seed {seed}: {rule:?}");
            match &rule.kind {
                FaultKind::Drop { probability, .. } | FaultKind::Duplicate { probability, .. } => {
                    assert!((0.0..=spec.max_probability).contains(probability), "seed {seed}: {rule:?}");
                }
                FaultKind::Reorder { probability, max_extra, .. } => {
                    assert!((0.0..=spec.max_probability).contains(probability), "seed {seed}: {rule:?}");
                    assert_eq!(*max_extra, spec.max_extra);
                }
                FaultKind::Delay { extra, .. } => assert!(*extra <= spec.max_extra, "seed {seed}: {rule:?}"),
                FaultKind::Partition { a, b } => {
                    assert!(a.is_disjoint(b));
                    assert_eq!(a.union(b).copied().collect::<Vec<_>>(), spec.processes);
                }
            }
        }
        for crash in plan.crashes() {
            assert!(crash.loses_state);
            assert!(spec.processes.contains(&crash.process));
            let restart = crash.restart.expect("random crashes restart");
            assert!(crash.at < restart && restart <= spec.horizon, "seed {seed}: {crash:?}");
        }
    }
    // Over the seeds, every kind of message rule turns up.
    let kinds: std::collections::BTreeSet<&str> = plans
        .iter()
        .flat_map(|plan| plan.rules())
        .map(|rule| match rule.kind {
            FaultKind::Drop { .. } => "drop",
            FaultKind::Duplicate { .. } => "duplicate",
            FaultKind::Delay { .. } => "delay",
            FaultKind::Reorder { .. } => "reorder",
            FaultKind::Partition { .. } => "partition",
        })
        .collect();
    assert_eq!(kinds.len(), 5, "{kinds:?}");
    // Nothing to fault, nothing drawn.
    assert!(draw(1, &RandomFaults { processes: Vec::new(), ..spec }).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Set-up

#[test]
fn setup_mistakes_are_errors() {
    use ensemble_core::DeploymentError;
    use ensemble_sim::SimError;
    let (mut sim, _) = sim_with(Topology::wan5(), 1, vec![ToyNode::new(p(0))]);
    let again = sim.add_process(Box::new(ToyNode::new(p(0))), Some(ToyStorage::new(p(0))));
    assert!(matches!(again, Err(SimError::DuplicateProcess(id)) if id == p(0)));
    let undeployed = sim.add_process(Box::new(ToyNode::new(p(1))), Some(ToyStorage::new(p(1))));
    assert!(matches!(undeployed, Err(SimError::NotDeployed(id)) if id == p(1)));
    assert!(sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), p(0), "t")), 1).is_ok());
    assert!(matches!(
        sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), p(0), "t")), 1),
        Err(SimError::DuplicateClient(ClientId(1)))
    ));
    assert!(matches!(
        sim.add_client(Box::new(ClosedLoopClient::new(ClientId(2), p(0), "t")), 5),
        Err(SimError::UnknownSite { site: 5, sites: 5, .. })
    ));
    let mut bad = Topology::lan();
    bad.cpu.cores = 0;
    assert!(matches!(Sim::new(bad, Deployment::one_per_machine(&[0], 1, "toy"), 1), Err(SimError::Topology(_))));
    // A process on a site the topology does not have.
    let off_the_map = Sim::new(Topology::wan5(), Deployment::one_per_machine(&[0, 5], 2, "toy"), 1);
    let unknown_site = DeploymentError::UnknownSite { machine: 1, site: 5, sites: 5 };
    assert!(matches!(off_the_map, Err(SimError::Deployment(e)) if e == unknown_site));
}

#[test]
#[should_panic(expected = "p1 is in the deployment but was not added to the simulation")]
fn a_deployed_process_left_out_panics_at_the_first_run() {
    let mut sim = Sim::new(Topology::lan(), Deployment::one_per_machine(&[0, 0], 2, "toy"), 1).expect("valid");
    sim.add_process(Box::new(ToyNode::new(p(0))), Some(ToyStorage::new(p(0)))).expect("new process");
    run(&mut sim, ms(1.0));
}

// ---------------------------------------------------------------------------------------------
// Scale

#[test]
fn a_ring_of_thirty_runs_a_million_events() {
    let nodes = (0..30).map(|n| ToyNode::new(p(n)).in_ring(30, if n == 0 { 10 } else { 0 })).collect();
    let (mut sim, nodes) = sim_with(Topology::lan(), 1, nodes);
    run(&mut sim, ms(10_000.0));
    let stats = sim.stats();
    assert!(stats.events >= 1_000_000, "{} events", stats.events);
    let passes: u64 = nodes.iter().map(Handle::tokens_passed).sum();
    // Every pass sends one message; each token was sent once more at start.
    assert_eq!(stats.messages_sent, passes + 10);
    // Each pass is two events (arrival, handling done); at most one per token is half-way.
    assert!(stats.events >= 2 * passes && stats.events <= 2 * passes + 10, "{} events, {passes} passes", stats.events);
    assert_eq!(stats.messages_dropped.total(), 0);
    assert!(stats.max_queue_len <= 10);
    let storages = sim.into_storages();
    assert_eq!(storages.len(), 30);
    assert_eq!(storages[29].as_ref().map(|s| s.process), Some(p(29)));
}

/// The middle process of [`a_charged_handlers_sends_are_not_overtaken_by_a_later_handlers`]:
/// p0 sends it two pings at start; it forwards each to p2, charging 5 ms for the first.
struct ChargedRelay {
    me: ProcessId,
    received: Rc<RefCell<Vec<(Time, u64)>>>,
}

impl Process<Toy> for ChargedRelay {
    fn id(&self) -> ProcessId {
        self.me
    }
    fn start(&mut self, _now: Time, out: &mut Vec<Effect<Toy>>) {
        if self.me == p(0) {
            for seq in [1, 2] {
                out.push(Effect::Send { to: p(1), msg: ToyMsg::Ping { seq } });
            }
        }
    }
    fn on_event(&mut self, now: Time, event: Event<Toy>, out: &mut Vec<Effect<Toy>>) {
        let Event::Message { msg: ToyMsg::Ping { seq }, .. } = event else { return };
        if self.me == p(1) {
            if seq == 1 {
                out.push(Effect::Charge(Duration::from_millis(5)));
            }
            out.push(Effect::Send { to: p(2), msg: ToyMsg::Ping { seq } });
        } else {
            self.received.borrow_mut().push((now, seq));
        }
    }
}

/// p1 has two cores: it handles the second ping on the second core while the first still
/// charges the first. Its forwards still leave in the order it wrote them, as from the real
/// runtime's one event loop; before, the uncharged second one went 5 ms ahead of the first.
#[test]
fn a_charged_handlers_sends_are_not_overtaken_by_a_later_handlers() {
    let (received, _) = relay_run(None);
    // Sent at 0.1 ms, both forwards leave when the first's 5 ms charge ends, in order.
    assert_eq!(received, vec![(ms(5.2), 1), (ms(5.2), 2)]);
}

/// The [`ChargedRelay`]s' run, p1 stalled in `stall` if any: what p2 received, when, and the
/// events the stall held back.
fn relay_run(stall: Option<Window>) -> (Vec<(Time, u64)>, u64) {
    let mut topology = lan_free_messages();
    topology.cpu.cores = 2;
    let received = Rc::new(RefCell::new(Vec::new()));
    let deployment = Deployment::one_per_machine(&[0, 0, 0], 2, "relay");
    let mut sim = Sim::new(topology, deployment, 1).expect("valid");
    for n in 0..3 {
        sim.add_process(Box::new(ChargedRelay { me: p(n), received: received.clone() }), None).expect("new process");
    }
    if let Some(window) = stall {
        sim.faults_mut().stall(p(1), window);
    }
    run(&mut sim, ms(100.0));
    let held = sim.stats().events_held_in_stalls;
    (received.take(), held)
}

/// The same relay with p1 stalled from 2 to 10 ms, 1.9 ms into the first ping's 5 ms charge:
/// the charge resumes at the stall's end with the 3.1 ms it had left, and both forwards leave
/// then, in order. A stall that ended the charge at once would let them leave at 10 ms.
#[test]
fn a_charge_a_stall_stops_resumes_with_what_it_had_left() {
    let (received, held) = relay_run(Some(Window::new(ms(2.0), ms(10.0))));
    assert_eq!(received, vec![(ms(13.2), 1), (ms(13.2), 2)]);
    assert_eq!(held, 1, "the charge's end");
}

/// Takes the one core of the machine it shares with a [`ChargedRelay`] for 5 ms: sends itself a
/// ping and the relay another at start, and charges 5 ms for its own.
struct CoreHog;

impl Process<Toy> for CoreHog {
    fn id(&self) -> ProcessId {
        p(0)
    }
    fn start(&mut self, _: Time, out: &mut Vec<Effect<Toy>>) {
        out.push(Effect::Send { to: p(0), msg: ToyMsg::Ping { seq: 0 } });
        out.push(Effect::Send { to: p(1), msg: ToyMsg::Ping { seq: 2 } });
    }
    fn on_event(&mut self, _: Time, _: Event<Toy>, out: &mut Vec<Effect<Toy>>) {
        out.push(Effect::Charge(Duration::from_millis(5)));
    }
}

/// p0 and p1 share one core; p1 is stalled from 2 to 20 ms, and its ping waits for the core
/// until p0's handler and charge free it, at about 6 ms, during the stall. The ping's handling
/// takes the core then, and runs its whole 1 ms after the stall's end, not the 5 ms from the
/// stall's start to its due time.
#[test]
fn a_job_that_gets_a_core_during_a_stall_runs_all_of_it_after() {
    let mut topology = lan_free_messages();
    topology.cpu.message_us = 1000.0;
    let received = Rc::new(RefCell::new(Vec::new()));
    let mut deployment = Deployment::one_per_machine(&[0, 0], 1, "relay");
    deployment.processes.insert(1, ensemble_core::Placement { process: p(1), machine: 0, pinned: None, os_process: None, kind: "relay".into() });
    deployment.processes[2].process = p(2);
    let mut sim = Sim::new(topology, deployment, 1).expect("valid");
    sim.add_process(Box::new(CoreHog), None).expect("new process");
    for n in 1..3 {
        sim.add_process(Box::new(ChargedRelay { me: p(n), received: received.clone() }), None).expect("new process");
    }
    sim.faults_mut().stall(p(1), Window::new(ms(2.0), ms(20.0)));
    run(&mut sim, ms(100.0));
    // 20 ms, the handling's 1 ms, the LAN's 0.1 ms to p2 and p2's own 1 ms handling.
    assert_eq!(*received.borrow(), vec![(ms(22.1), 2)]);
    assert_eq!(sim.stats().events_held_in_stalls, 1, "the handling's end");
}
