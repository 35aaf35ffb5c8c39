//! How fast the delivery checker decides, on generated logs of a genuine atomic multicast:
//! 8 groups of 3 processes, each message cast by a random process to 1–3 random groups, every
//! destination delivering in one global order (as Skeen's timestamps would), with the steps of
//! the caster and each destination recorded.
//!
//! * 10^5 deliveries that satisfy every property but "broadcast to all groups" (the log is a
//!   multicast's; atomic broadcast is timed on it too, and fails on that property alone): each
//!   primitive's properties, every property alone, and the eight others together;
//! * the same log with two adjacent deliveries of one process swapped near its end, so that
//!   prefix, acyclic and pairwise order fail and a shortest cycle is searched for;
//! * 10^6 deliveries, genuine atomic multicast, one plain timed run.
//!
//! `cargo bench -p ensemble-history --bench delivery` prints one plain timed run of each case
//! first (the verdict line and the seconds), then criterion's measurements.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion as Bench};
use ensemble_history::delivery::{check, check_primitive, Cast, DeliveryLog, Primitive, Property};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

const GROUPS: u32 = 8;
const PER_GROUP: u32 = 3;

/// A log with about `deliveries` deliveries.
fn generate(seed: u64, deliveries: usize) -> DeliveryLog {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut log = DeliveryLog::new();
    for g in 0..GROUPS {
        log.add_group(g, (0..PER_GROUP).map(|i| g * PER_GROUP + i));
    }
    let processes = (GROUPS * PER_GROUP) as usize;
    let mut sequences: Vec<Vec<u64>> = vec![Vec::new(); processes];
    let mut total = 0;
    let mut m = 0u64;
    while total < deliveries {
        m += 1;
        let caster = rng.random_range(0..GROUPS * PER_GROUP);
        let mut dst: Vec<u32> = Vec::new();
        while dst.len() < rng.random_range(1..=3) {
            let g = rng.random_range(0..GROUPS);
            if !dst.contains(&g) {
                dst.push(g);
            }
        }
        log.add_steps(caster, Some(m), 1);
        for &g in &dst {
            for p in g * PER_GROUP..(g + 1) * PER_GROUP {
                sequences[p as usize].push(m);
                log.add_steps(p, Some(m), 2);
                total += 1;
            }
        }
        log.add_cast(Cast::new(m, caster, dst).at(m));
    }
    for (p, seq) in sequences.into_iter().enumerate() {
        log.process_mut(p as u32).delivered = seq;
    }
    log
}

/// Swaps two adjacent deliveries of process 0, 100 from the end of its sequence.
fn with_inversion(log: &DeliveryLog) -> DeliveryLog {
    let mut bad = log.clone();
    let seq = &mut bad.process_mut(0).delivered;
    let i = seq.len() - 100;
    seq.swap(i, i + 1);
    bad
}

fn all_but_broadcast() -> Vec<Property> {
    Property::ALL
        .into_iter()
        .filter(|&p| p != Property::Broadcast)
        .collect()
}

fn deliveries(log: &DeliveryLog) -> usize {
    log.processes.iter().map(|p| p.delivered.len()).sum()
}

/// One plain timed run, printed with the verdict's first line.
fn timed(label: &str, log: &DeliveryLog, what: &str, run: impl FnOnce() -> String) {
    let start = Instant::now();
    let verdict = run();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{label} ({} deliveries, {} casts): {what} in {secs:.3} s: {}",
        deliveries(log),
        log.casts.len(),
        verdict.lines().next().unwrap_or("")
    );
}

fn bench(c: &mut Bench) {
    let good = generate(1, 100_000);
    let bad = with_inversion(&good);
    let big = generate(2, 1_000_000);
    for primitive in Primitive::ALL {
        timed("10^5 good", &good, primitive.name(), || {
            check_primitive(&good, primitive).to_string()
        });
    }
    timed("10^5 good", &good, "all but broadcast", || {
        check(&good, &all_but_broadcast()).to_string()
    });
    for property in Property::ALL {
        timed("10^5 good", &good, property.name(), || {
            check(&good, &[property]).to_string()
        });
    }
    timed("10^5 inverted", &bad, "all but broadcast", || {
        check(&bad, &all_but_broadcast()).to_string()
    });
    timed("10^5 inverted", &bad, "acyclic-order", || {
        check(&bad, &[Property::AcyclicOrder]).to_string()
    });
    timed("10^6 good", &big, "genuine atomic multicast", || {
        check_primitive(&big, Primitive::GenuineAtomicMulticast).to_string()
    });

    let mut group = c.benchmark_group("delivery");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for primitive in [
        Primitive::GenuineAtomicMulticast,
        Primitive::PairwiseMulticast,
    ] {
        let id = primitive.name().replace(' ', "_");
        group.bench_with_input(BenchmarkId::new(id, "good_100k"), &good, |b, log| {
            b.iter(|| check_primitive(log, primitive))
        });
    }
    let all = all_but_broadcast();
    group.bench_with_input(
        BenchmarkId::new("all_but_broadcast", "good_100k"),
        &good,
        |b, log| b.iter(|| check(log, &all)),
    );
    group.bench_with_input(
        BenchmarkId::new("all_but_broadcast", "inverted_100k"),
        &bad,
        |b, log| b.iter(|| check(log, &all)),
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
