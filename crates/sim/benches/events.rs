//! How many events per second the simulator gets through: a 30-process token ring with 30 tokens
//! and 60 closed-loop clients (two per process), one process per 2-core machine, on the LAN
//! topology, for one virtual second. Each request is one toy storage job of 1 ms. This is the
//! workload the simulator was measured on before it ran any protocol's processes, with the same
//! printed line, so the two can be compared.
//!
//! `cargo bench -p ensemble-sim --bench events` prints `events/s` from a plain timed run first,
//! then criterion's measurement (its `thrpt` line is in events, "elem/s").

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ensemble_core::topology::Topology;
use ensemble_core::{ClientId, Deployment, ProcessId, Time};
use ensemble_sim::toy::{ClosedLoopClient, Toy, ToyNode, ToyStorage};
use ensemble_sim::Simulation;
use std::hint::black_box;
use std::time::{Duration, Instant};

const INSTANCES: u32 = 30;
const TOKENS: u32 = 30;
const CLIENTS_PER_INSTANCE: u64 = 2;
const VIRTUAL: Time = Time(1_000_000_000);
/// A request's storage job: the old simulator's default transaction time (`cpu.execute_us`).
const JOB: Duration = Duration::from_millis(1);

/// Runs the scenario and returns how many events it took.
fn ring_with_clients(seed: u64) -> u64 {
    let topology = Topology::lan();
    let deployment = Deployment::one_per_machine(&[0; INSTANCES as usize], topology.cpu.cores, "toy");
    let mut sim = Simulation::<Toy, ToyStorage>::new(topology, deployment, seed).expect("the LAN preset is valid");
    for n in 0..INSTANCES {
        let node = ToyNode::new(ProcessId(n)).in_ring(INSTANCES, if n == 0 { TOKENS } else { 0 }).job_cost(JOB);
        sim.add_process(Box::new(node), Some(ToyStorage::new(ProcessId(n)))).expect("fresh process");
    }
    for c in 0..u64::from(INSTANCES) * CLIENTS_PER_INSTANCE {
        let target = ProcessId((c % u64::from(INSTANCES)) as u32);
        let client = ClosedLoopClient::new(ClientId(c), target, "t").thinking(Duration::from_millis(1));
        sim.add_client(Box::new(client), 0).expect("fresh client");
    }
    let mut completions = 0u64;
    sim.run_until(VIRTUAL, &mut |_, _| completions += 1);
    black_box(completions);
    sim.stats().events
}

fn bench(c: &mut Criterion) {
    let events = ring_with_clients(1);
    let start = Instant::now();
    let runs = 3;
    for seed in 0..runs {
        black_box(ring_with_clients(seed));
    }
    let per_second = (events * runs) as f64 / start.elapsed().as_secs_f64();
    println!(
        "sim: {INSTANCES}-instance ring, {TOKENS} tokens, {} clients: {events} events per run, {:.2} M events/s",
        u64::from(INSTANCES) * CLIENTS_PER_INSTANCE,
        per_second / 1e6
    );

    let mut group = c.benchmark_group("sim");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(6));
    group.throughput(Throughput::Elements(events));
    group.bench_function("ring30_tokens30_clients60_1s", |b| b.iter(|| ring_with_clients(black_box(1))));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
