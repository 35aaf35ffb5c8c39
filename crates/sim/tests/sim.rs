//! The simulator's model, checked on toy processes: determinism, network delays and FIFO links,
//! CPU queueing and saturation, faults, and scale.

use ensemble_core::topology::{Jitter, Topology};
use ensemble_core::{ClientId, Completion, InstanceId, Node, Time};
use ensemble_sim::toy::{ClosedLoopClient, ToyNode, ToyStorage};
use ensemble_sim::{Endpoint, Links, Simulation, Window};
use std::time::Duration;

type Sim = Simulation<ToyNode, ToyStorage>;

fn ms(x: f64) -> Time {
    Time((x * 1e6).round() as u64)
}

fn i(n: u32) -> InstanceId {
    InstanceId(n)
}

/// A LAN (0.1 ms one way) whose message handling is free, so arrival times are exact.
fn lan_free_messages() -> Topology {
    let mut t = Topology::lan();
    t.cpu.message_us = 0.0;
    t
}

fn sim_with(topology: Topology, seed: u64, nodes: Vec<ToyNode>) -> Sim {
    let sites = topology.sites.len();
    let mut sim = Sim::new(topology, seed).expect("valid topology");
    for node in nodes {
        let id = node.id();
        sim.add_node(node, id.0 as usize % sites, ToyStorage::new(id)).expect("new instance");
    }
    sim
}

fn run(sim: &mut Sim, until: Time) -> Vec<Completion> {
    let mut done = Vec::new();
    sim.run_until(until, &mut |_, c| done.push(c.clone()));
    done
}

// ---------------------------------------------------------------------------------------------
// Determinism

/// A busy little world on a jittery WAN: a ring with two tokens, pings, and clients.
/// Every event as `(time, rendering)`, and every completion as `(time, client, seq)`.
type Traces = (Vec<(Time, String)>, Vec<(Time, u64, u64)>);

fn jittery_world(seed: u64) -> Traces {
    let nodes = (0..6)
        .map(|n| {
            let node = ToyNode::new(i(n)).in_ring(6, if n == 0 { 2 } else { 0 }).recording();
            if n == 1 {
                node.pinging(vec![i(3), i(4)], Duration::from_millis(7), 100)
            } else {
                node
            }
        })
        .collect();
    let mut sim = sim_with(Topology::wan_normal50(3), seed, nodes);
    for c in 0..6u32 {
        let client = ClosedLoopClient::new(ClientId(u64::from(c)), i(c), "t").thinking(Duration::from_millis(3));
        sim.add_client(Box::new(client), (c as usize + 1) % 3).expect("new client");
    }
    let pings_to_4 = Links::Directed { from: Endpoint::Instance(i(1)), to: Endpoint::Instance(i(4)) };
    sim.faults_mut().drop_messages(Window::always(), pings_to_4, 0.2);
    sim.enable_trace();
    let mut completions = Vec::new();
    sim.run_until(ms(3_000.0), &mut |now, c| completions.push((now, c.request.client.0, c.request.seq)));
    (sim.take_trace(), completions)
}

#[test]
fn same_seed_gives_the_same_trace() {
    let (trace_a, done_a) = jittery_world(7);
    let (trace_b, done_b) = jittery_world(7);
    assert!(trace_a.len() > 1_000, "a busy run: {} events", trace_a.len());
    assert!(!done_a.is_empty());
    assert_eq!(trace_a, trace_b);
    assert_eq!(done_a, done_b);
}

#[test]
fn another_seed_with_jitter_gives_another_trace() {
    let (trace_a, _) = jittery_world(7);
    let (trace_b, _) = jittery_world(8);
    assert_ne!(trace_a, trace_b);
}

#[test]
fn adding_a_drop_rule_does_not_shift_other_links_delays() {
    // Node 0 pings 1 and 2 over a jittery WAN. Losing every message to 1 must not change when 2's
    // pings arrive: delays come from the network stream, drop decisions from the faults stream.
    let run_with = |drop: bool| {
        let nodes = vec![
            ToyNode::new(i(0)).pinging(vec![i(1), i(2)], Duration::from_millis(1), 200),
            ToyNode::new(i(1)).recording(),
            ToyNode::new(i(2)).recording(),
        ];
        let mut sim = sim_with(Topology::wan_normal50(3), 11, nodes);
        if drop {
            let link = Links::Directed { from: Endpoint::Instance(i(0)), to: Endpoint::Instance(i(1)) };
            sim.faults_mut().drop_messages(Window::always(), link, 0.5);
        }
        run(&mut sim, ms(1_000.0));
        let at_2: Vec<_> = sim.node(i(2)).pings_received().collect();
        let at_1 = sim.node(i(1)).pings_received().count();
        (at_2, at_1)
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
    let nodes = vec![ToyNode::new(i(0)).pinging(vec![i(1)], Duration::from_millis(1), 1), ToyNode::new(i(1)).recording()];
    let mut sim = sim_with(topology, 1, nodes);
    run(&mut sim, ms(1_000.0));
    let got: Vec<_> = sim.node(i(1)).pings_received().collect();
    assert_eq!(got, vec![(ms(126.5), i(0), 0)]);
}

#[test]
fn handling_a_message_adds_the_cpu_message_time() {
    let topology = Topology::wan5(); // message_us = 20
    let nodes = vec![ToyNode::new(i(0)).pinging(vec![i(1)], Duration::from_millis(1), 1), ToyNode::new(i(1)).recording()];
    let mut sim = sim_with(topology, 1, nodes);
    run(&mut sim, ms(1_000.0));
    let got: Vec<_> = sim.node(i(1)).pings_received().collect();
    assert_eq!(got, vec![(ms(126.52), i(0), 0)]);
}

#[test]
fn a_request_costs_a_round_trip_plus_execution() {
    // A client in Japan using the instance in Germany: 253 ms round trip, 1 ms transaction.
    let mut topology = Topology::wan5();
    topology.cpu.message_us = 0.0;
    topology.cpu.execute_us = 1_000.0;
    let mut sim = sim_with(topology, 1, vec![ToyNode::new(i(0))]);
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(9), i(0), "t").limited_to(2)), 1).expect("client");
    let done = run(&mut sim, ms(10_000.0));
    assert_eq!(done.len(), 2);
    for c in &done {
        assert_eq!(c.completed.saturating_sub(c.issued), Duration::from_micros(254_000));
    }
    assert_eq!(sim.storage(i(0)).executed, 2);
    assert_eq!(sim.stats().messages_sent, 4);
}

#[test]
fn bandwidth_adds_the_transfer_time_of_the_postcard_size() {
    // 8 kbit/s is one byte per millisecond; a `Ping { seq: 0 }` is two bytes in postcard.
    let mut topology = Topology::wan5();
    topology.cpu.message_us = 0.0;
    topology.bandwidth_bps = Some(8_000.0);
    let nodes = vec![ToyNode::new(i(0)).pinging(vec![i(1)], Duration::from_millis(1), 1), ToyNode::new(i(1)).recording()];
    let mut sim = sim_with(topology, 1, nodes);
    run(&mut sim, ms(1_000.0));
    let got: Vec<_> = sim.node(i(1)).pings_received().collect();
    assert_eq!(got, vec![(ms(128.5), i(0), 0)]);
}

#[test]
fn links_stay_fifo_under_jitter() {
    // Pings every 0.1 ms over a link whose delay varies by +-40 ms: without FIFO links most would
    // overtake each other. With two cores handling them, order must still hold end to end.
    let mut topology = Topology::wan_normal50(2);
    topology.jitter = Jitter::Uniform { half_width_ms: 40.0 };
    let nodes = vec![
        ToyNode::new(i(0)).pinging(vec![i(1)], Duration::from_micros(100), 2_000),
        ToyNode::new(i(1)).recording(),
    ];
    let mut sim = sim_with(topology, 3, nodes);
    run(&mut sim, ms(2_000.0));
    let got: Vec<_> = sim.node(i(1)).pings_received().collect();
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
        ToyNode::new(i(0)).pinging(vec![i(1)], Duration::from_millis(100), 100),
        ToyNode::new(i(1)).recording(),
    ];
    let mut sim = sim_with(topology, 3, nodes);
    run(&mut sim, ms(20_000.0));
    let delays: Vec<u64> = sim.node(i(1)).pings_received().map(|(t, _, seq)| t.0 - seq * 100_000_000).collect();
    assert_eq!(delays.len(), 100);
    let spread = delays.iter().max().unwrap_or(&0) - delays.iter().min().unwrap_or(&0);
    assert!(spread > 60_000_000, "delays spread over only {spread} ns");
}

// ---------------------------------------------------------------------------------------------
// CPU

/// Throughput (completions/s) and mean latency of `clients` closed-loop clients on one 2-core
/// instance with 5 ms transactions, measured over 20 s after a 1 s warm-up.
fn saturation_point(clients: u64) -> (f64, Duration, Sim) {
    let mut topology = Topology::lan();
    topology.cpu.cores = 2;
    topology.cpu.message_us = 0.0;
    topology.cpu.execute_us = 5_000.0;
    let mut sim = sim_with(topology, 5, vec![ToyNode::new(i(0))]);
    for c in 0..clients {
        sim.add_client(Box::new(ClosedLoopClient::new(ClientId(c), i(0), "t")), 0).expect("client");
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
            assert!(sim.cpu_utilisation(i(0)) > 0.99, "{clients} clients: utilisation {}", sim.cpu_utilisation(i(0)));
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
            assert_eq!(sim.stats().node(i(0)).map(|n| n.max_cpu_queue), Some(30));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Faults

/// Node 0 pings 1 and 2 every millisecond, 100 times, over a LAN with free message handling: the
/// ping sent at k ms arrives at k + 0.1 ms.
fn pinged_pair() -> Sim {
    let nodes = vec![
        ToyNode::new(i(0)).pinging(vec![i(1), i(2)], Duration::from_millis(1), 100),
        ToyNode::new(i(1)).recording(),
        ToyNode::new(i(2)).recording(),
    ];
    sim_with(lan_free_messages(), 1, nodes)
}

fn seqs_from(sim: &Sim, at: InstanceId, from: InstanceId) -> Vec<u64> {
    sim.node(at).pings_received().filter(|(_, f, _)| *f == from).map(|(_, _, s)| s).collect()
}

#[test]
fn a_certain_drop_rule_loses_exactly_its_window_on_its_link() {
    let mut sim = pinged_pair();
    let link = Links::Directed { from: Endpoint::Instance(i(0)), to: Endpoint::Instance(i(1)) };
    sim.faults_mut().drop_messages(Window::new(ms(20.0), ms(40.0)), link, 1.0);
    run(&mut sim, ms(1_000.0));
    let expected: Vec<u64> = (0..100).filter(|k| !(20..40).contains(k)).collect();
    assert_eq!(seqs_from(&sim, i(1), i(0)), expected);
    assert_eq!(seqs_from(&sim, i(2), i(0)), (0..100).collect::<Vec<_>>());
    assert_eq!(sim.stats().messages_dropped.rule, 20);
    assert_eq!(sim.stats().messages_dropped.total(), 20);
    assert_eq!(sim.stats().messages_sent, 200);
}

#[test]
fn a_probable_drop_rule_loses_some_and_counts_them() {
    let outcome = |seed: u64| {
        let nodes = vec![
            ToyNode::new(i(0)).pinging(vec![i(1), i(2)], Duration::from_millis(1), 100),
            ToyNode::new(i(1)).recording(),
            ToyNode::new(i(2)).recording(),
        ];
        let mut sim = sim_with(lan_free_messages(), seed, nodes);
        sim.faults_mut().drop_messages(Window::always(), Links::Touching(Endpoint::Instance(i(1))), 0.5);
        run(&mut sim, ms(1_000.0));
        let got = seqs_from(&sim, i(1), i(0));
        assert_eq!(seqs_from(&sim, i(2), i(0)).len(), 100);
        assert_eq!(got.len() as u64 + sim.stats().messages_dropped.rule, 100);
        assert!((25..75).contains(&got.len()), "kept {}", got.len());
        got
    };
    assert_eq!(outcome(1), outcome(1));
    assert_ne!(outcome(1), outcome(2));
}

#[test]
fn a_partition_separates_its_groups_only_in_its_window() {
    let nodes = vec![
        ToyNode::new(i(0)).pinging(vec![i(1), i(2)], Duration::from_millis(1), 100).recording(),
        ToyNode::new(i(1)).pinging(vec![i(0), i(2)], Duration::from_millis(1), 100).recording(),
        ToyNode::new(i(2)).recording(),
    ];
    let mut sim = sim_with(lan_free_messages(), 1, nodes);
    sim.faults_mut().partition(Window::new(ms(10.0), ms(30.0)), [i(0)], [i(1), i(3)]);
    // A client of instance 1 is not affected by a partition between instances.
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), i(1), "t").limited_to(50)), 0).expect("client");
    let done = run(&mut sim, ms(1_000.0));
    let cut: Vec<u64> = (0..100).filter(|k| !(10..30).contains(k)).collect();
    assert_eq!(seqs_from(&sim, i(1), i(0)), cut);
    assert_eq!(seqs_from(&sim, i(0), i(1)), cut);
    assert_eq!(seqs_from(&sim, i(2), i(0)).len(), 100);
    assert_eq!(seqs_from(&sim, i(2), i(1)).len(), 100);
    assert_eq!(sim.stats().messages_dropped.partition, 40);
    assert_eq!(sim.stats().messages_dropped.total(), 40);
    assert_eq!(done.len(), 50);
}

#[test]
fn a_delay_rule_slows_its_link_in_its_window() {
    let mut sim = pinged_pair();
    let link = Links::Directed { from: Endpoint::Instance(i(0)), to: Endpoint::Instance(i(2)) };
    sim.faults_mut().delay_messages(Window::new(ms(50.0), ms(51.0)), link, Duration::from_millis(5));
    run(&mut sim, ms(1_000.0));
    let at_2: Vec<_> = sim.node(i(2)).pings_received().collect();
    assert_eq!(at_2[49].0, ms(49.1));
    assert_eq!(at_2[50].0, ms(55.1)); // delayed ping 50
    // FIFO: pings 51..=54 queue behind the delayed one on the same link.
    for (t, _, seq) in &at_2[51..=54] {
        assert_eq!(*t, ms(55.1), "ping {seq}");
    }
    assert_eq!(at_2[55].0, ms(55.1));
    assert_eq!(at_2[56].0, ms(56.1));
    let at_1: Vec<_> = sim.node(i(1)).pings_received().collect();
    assert_eq!(at_1[50].0, ms(50.1));
}

#[test]
fn a_crashed_instance_misses_messages_and_timers_then_resumes() {
    let nodes = vec![
        ToyNode::new(i(0)).pinging(vec![i(1)], Duration::from_millis(1), 100),
        // Instance 1 pings 2 on its own timer chain.
        ToyNode::new(i(1)).pinging(vec![i(2)], Duration::from_millis(1), 100).recording(),
        ToyNode::new(i(2)).recording(),
    ];
    let mut sim = sim_with(lan_free_messages(), 1, nodes);
    sim.faults_mut().crash(i(1), ms(30.05), Some(ms(50.05)));
    run(&mut sim, ms(40.0));
    assert!(sim.is_down(i(1)));
    run(&mut sim, ms(1_000.0));
    assert!(!sim.is_down(i(1)));
    // Pings reaching it at 30.1 .. 49.1 ms are lost; the rest arrive.
    let expected: Vec<u64> = (0..100).filter(|k| !(30..50).contains(k)).collect();
    assert_eq!(seqs_from(&sim, i(1), i(0)), expected);
    assert_eq!(sim.stats().messages_dropped.crashed, 20);
    assert_eq!(sim.stats().messages_dropped.total(), 20);
    // Its timer due at 31 ms fired while it was down and was discarded, which ends its chain:
    // the pause-style crash keeps state but not the timers that came due meanwhile.
    assert_eq!(seqs_from(&sim, i(2), i(1)), (0..=30).collect::<Vec<_>>());
    assert_eq!(sim.stats().timers_discarded, 1);
    assert!(sim.node(i(1)).seen.iter().all(|(t, _)| *t < ms(30.05) || *t >= ms(50.05)));
}

#[test]
fn a_crash_clears_the_cpu_queue_and_its_storage_work_never_runs() {
    let mut topology = lan_free_messages();
    topology.cpu.cores = 1;
    topology.cpu.execute_us = 5_000.0;
    let mut sim = sim_with(topology, 1, vec![ToyNode::new(i(0)).recording()]);
    for c in 0..3 {
        sim.add_client(Box::new(ClosedLoopClient::new(ClientId(c), i(0), "t").limited_to(1)), 0).expect("client");
    }
    // Requests arrive at 0.1 ms; one runs (until 5.1 ms), two wait. The crash takes all three.
    sim.faults_mut().crash(i(0), ms(2.0), Some(ms(3.0)));
    let done = run(&mut sim, ms(100.0));
    assert!(done.is_empty());
    assert_eq!(sim.storage(i(0)).executed, 0);
    assert_eq!(sim.stats().storage_jobs, 0);
    assert_eq!(sim.stats().node(i(0)).map(|n| n.jobs_lost_in_crash), Some(3));
    assert!(sim.node(i(0)).seen.iter().all(|(_, s)| !matches!(s, ensemble_sim::toy::Seen::StorageDone(_))));
    // After the restart the instance serves again; a client added now starts at the current time.
    sim.add_client(Box::new(ClosedLoopClient::new(ClientId(10), i(0), "t").limited_to(1)), 0).expect("client");
    let done = run(&mut sim, ms(200.0));
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].issued, ms(100.0));
    assert_eq!(done[0].completed, ms(105.2));
    assert_eq!(sim.storage(i(0)).executed, 1);
}

#[test]
fn a_crash_without_restart_is_forever() {
    let mut sim = pinged_pair();
    sim.faults_mut().crash(i(2), ms(10.05), None);
    run(&mut sim, ms(1_000.0));
    assert_eq!(seqs_from(&sim, i(2), i(0)), (0..10).collect::<Vec<_>>());
    assert_eq!(sim.stats().messages_dropped.crashed, 90);
    assert_eq!(seqs_from(&sim, i(1), i(0)).len(), 100);
}

#[test]
fn messages_to_nowhere_are_counted() {
    let nodes = vec![ToyNode::new(i(0)).pinging(vec![i(7)], Duration::from_millis(1), 3)];
    let mut sim = sim_with(lan_free_messages(), 1, nodes);
    run(&mut sim, ms(100.0));
    assert_eq!(sim.stats().messages_dropped.unknown_destination, 3);
}

#[test]
fn setup_mistakes_are_errors() {
    let mut sim = sim_with(Topology::wan5(), 1, vec![ToyNode::new(i(0))]);
    assert!(sim.add_node(ToyNode::new(i(0)), 0, ToyStorage::new(i(0))).is_err());
    assert!(sim.add_node(ToyNode::new(i(1)), 5, ToyStorage::new(i(1))).is_err());
    assert!(sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), i(0), "t")), 1).is_ok());
    assert!(sim.add_client(Box::new(ClosedLoopClient::new(ClientId(1), i(0), "t")), 1).is_err());
    let mut bad = Topology::lan();
    bad.cpu.cores = 0;
    assert!(Sim::new(bad, 1).is_err());
}

// ---------------------------------------------------------------------------------------------
// Scale

#[test]
fn a_ring_of_thirty_runs_a_million_events() {
    let nodes = (0..30).map(|n| ToyNode::new(i(n)).in_ring(30, if n == 0 { 10 } else { 0 })).collect();
    let mut sim = sim_with(Topology::lan(), 1, nodes);
    run(&mut sim, ms(10_000.0));
    let stats = sim.stats();
    assert!(stats.events >= 1_000_000, "{} events", stats.events);
    let passes: u64 = (0..30).map(|n| sim.node(i(n)).tokens_passed).sum();
    // Every pass sends one message; each token was sent once more at start.
    assert_eq!(stats.messages_sent, passes + 10);
    // Each pass is two events (arrival, handling done); at most one per token is half-way.
    assert!(stats.events >= 2 * passes && stats.events <= 2 * passes + 10, "{} events, {passes} passes", stats.events);
    assert_eq!(stats.messages_dropped.total(), 0);
    assert!(stats.max_queue_len <= 10);
    let storages = sim.into_storages();
    assert_eq!(storages.len(), 30);
    assert_eq!(storages[29].instance, i(29));
}
