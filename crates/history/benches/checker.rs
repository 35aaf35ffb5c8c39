//! How fast the checker decides, on generated histories:
//!
//! * SER over a serial history of 10^6 transactions (1–4 reads/writes each over 10^5 keys,
//!   3 replicas, 2 per key, 1000 sessions);
//! * every criterion over a serial history of 10^5 transactions of the same shape;
//! * every criterion over 10^5 transactions of a snapshot-isolation engine (32 concurrent
//!   transactions over 300 keys), which is SI but not serializable, so that SER and US have
//!   cycles to find and SI, PSI and NMSI large strongly connected components to clear.
//!
//! `cargo bench -p ensemble-history --bench checker` prints one plain timed run of each case
//! first (the verdict line and the seconds), then criterion's measurements.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{serial_history, si_history, Shape};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion as Bench};
use ensemble_history::{check, check_all, Criterion, History};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn shape(transactions: usize, keys: usize) -> Shape {
    Shape {
        transactions,
        keys,
        max_ops: 4,
        replicas: 3,
        replication: 2,
        sessions: 1000,
        read_only: 0.3,
        abort: 0.02,
        values: true,
    }
}

fn generate(name: &str, make: impl FnOnce() -> History) -> History {
    let start = Instant::now();
    let h = make();
    println!(
        "history: {name}: {} transactions generated in {:.2} s",
        h.len(),
        start.elapsed().as_secs_f64()
    );
    h
}

/// One plain timed run, printed with the verdict.
fn timed(label: &str, h: &History, criterion: Criterion) {
    let start = Instant::now();
    let report = check(h, criterion);
    let secs = start.elapsed().as_secs_f64();
    let verdict = report.to_string();
    println!(
        "{label}: {} in {secs:.3} s: {}",
        criterion,
        verdict.lines().next().unwrap_or("")
    );
}

fn bench(c: &mut Bench) {
    let serial_1m = generate("serial 10^6", || {
        serial_history(
            &mut ChaCha8Rng::seed_from_u64(1),
            &shape(1_000_000, 100_000),
        )
    });
    timed("serial 10^6", &serial_1m, Criterion::Ser);
    let serial_100k = generate("serial 10^5", || {
        serial_history(&mut ChaCha8Rng::seed_from_u64(2), &shape(100_000, 10_000))
    });
    let mut si_shape = shape(100_000, 300);
    si_shape.sessions = 0;
    let si_100k = generate("SI engine 10^5", || {
        si_history(&mut ChaCha8Rng::seed_from_u64(3), &si_shape, 32)
    });
    for criterion in Criterion::ALL {
        timed("serial 10^5", &serial_100k, criterion);
    }
    for criterion in Criterion::ALL {
        timed("SI engine 10^5", &si_100k, criterion);
    }
    let start = Instant::now();
    black_box(check_all(&si_100k));
    println!(
        "SI engine 10^5: all six (one graph) in {:.3} s",
        start.elapsed().as_secs_f64()
    );

    let mut group = c.benchmark_group("history");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(20));
    group.bench_function("ser/serial_1m", |b| {
        b.iter(|| check(&serial_1m, Criterion::Ser))
    });
    group.measurement_time(Duration::from_secs(5));
    for criterion in Criterion::ALL {
        group.bench_with_input(
            BenchmarkId::new(criterion.name(), "serial_100k"),
            &serial_100k,
            |b, h| b.iter(|| check(h, criterion)),
        );
        group.bench_with_input(
            BenchmarkId::new(criterion.name(), "si_engine_100k"),
            &si_100k,
            |b, h| b.iter(|| check(h, criterion)),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
