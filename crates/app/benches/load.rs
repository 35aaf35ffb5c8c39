//! How long a fresh database of TPC-W and of RUBiS takes to make at scale 1: generating the data
//! (`Application::generate`) and loading it into an in-memory SQLite database (schema and rows).
//! Every simulated or real run does this once per instance before its clients start, so a slow or
//! quadratic loader shows here; the test suite checks only what is loaded, never how fast.
//!
//! `cargo bench -p ensemble-app --bench load` prints, per application, the rows and the time of
//! each step from a plain timed run first, then criterion's measurement of both steps together.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ensemble_app::{apps, Application, DataConfig, InstanceId};
use ensemble_sqlite::SqliteStorage;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCALE: u32 = 1;

/// Generates and loads `app` at [`SCALE`]; returns the rows loaded and the time each step took.
fn generate_and_load(app: &Arc<Application>) -> (u64, Duration, Duration) {
    let start = Instant::now();
    let data = (app.generate)(DataConfig { scale: SCALE, seed: 1 });
    let generated = start.elapsed();
    let db = SqliteStorage::open_in_memory(Arc::clone(app), InstanceId(0)).expect("an in-memory database");
    db.create_schema().expect("the schema");
    let rows = db.load(&data, |_, _, _| true).expect("the generated rows");
    black_box(&db);
    (rows, generated, start.elapsed() - generated)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("load");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(15));
    for app in [apps::tpcw::application(), apps::rubis::application()] {
        let (rows, generated, loaded) = generate_and_load(&app);
        println!(
            "{} scale {SCALE}: {rows} rows, generated in {:.1} ms, loaded in {:.1} ms, {:.1} ms in all",
            app.name,
            generated.as_secs_f64() * 1e3,
            loaded.as_secs_f64() * 1e3,
            (generated + loaded).as_secs_f64() * 1e3
        );
        group.throughput(Throughput::Elements(rows));
        group.bench_function(format!("{}_scale{SCALE}", app.name), |b| b.iter(|| generate_and_load(black_box(&app))));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
