//! Middleware overhead: the same shop operations, in the same run, through one Ensemble instance
//! (a node process, clients over loopback TCP) and directly on SQLite (client threads, one
//! connection each, no middleware), both on this machine. Reported as ratios.

use ensemble_app::{apps::shop, ClientCtx, DataConfig, Workload};
use ensemble_bench::report::render;
use ensemble_bench::{Experiment, System};
use ensemble_core::topology::Topology;
use ensemble_app::InstanceId;
use ensemble_core::{ClientId, Request};
use ensemble_sqlite::SqliteStorage;
type Histogram = hdr::Histogram<u64>;
use rand::SeedableRng;
use std::time::{Duration, Instant};

mod hdr {
    pub use ensemble_bench::metrics::Histogram;
}

struct Measured {
    ops: u64,
    secs: f64,
    hist: Histogram,
}

/// Runs the shop workload directly on one SQLite database with `threads` closed-loop threads.
fn direct(threads: u32, measure_s: f64, seed: u64) -> anyhow::Result<Measured> {
    let app = shop::application();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("direct.db");
    {
        let db = SqliteStorage::open_file(&path, app.clone(), InstanceId(0))?;
        db.create_schema()?;
        db.load(&(app.generate)(DataConfig { scale: 1, seed }), |_, _, _| true)?;
    }
    let start = Instant::now();
    let stop = start + Duration::from_secs_f64(measure_s);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (app, path) = (app.clone(), path.clone());
            std::thread::spawn(move || -> anyhow::Result<Histogram> {
                let db = SqliteStorage::open_file(&path, app, InstanceId(0))?;
                let mut w = shop::ShopWorkload::new(1, 0.5, 4);
                let ctx = ClientCtx { client_index: t as u64, home: InstanceId(0), instances: 1 };
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ t as u64);
                let mut hist = ensemble_bench::metrics::new_histogram();
                let mut seq = 0;
                while Instant::now() < stop {
                    let (txn, params) = w.next(&mut rng, &ctx);
                    seq += 1;
                    let t0 = Instant::now();
                    let outcome = db.execute_direct(&Request { client: ClientId(t as u64), seq, txn: txn.clone(), params })?;
                    hist.saturating_record(t0.elapsed().as_micros().max(1) as u64);
                    w.observe(&txn, &outcome);
                }
                Ok(hist)
            })
        })
        .collect();
    let mut hist = ensemble_bench::metrics::new_histogram();
    for h in handles {
        hist.add(h.join().expect("a client thread panicked")?)?;
    }
    Ok(Measured { ops: hist.len(), secs: start.elapsed().as_secs_f64().min(measure_s + 1.0), hist })
}

pub fn run(threads: u32, measure_s: f64, seed: u64, progress: bool) -> anyhow::Result<String> {
    let mut e = Experiment::new("shop", System::Centralized, 1, Topology::lan()).map_err(anyhow::Error::msg)?;
    // Loopback as it is: no emulated delay.
    e.topology.one_way_ms = vec![vec![0.0]];
    e.clients = threads;
    e.warmup_s = 0.0;
    e.measure_s = measure_s;
    e.seed = seed;
    e.idle_pause_us = 500;
    e.label = "overhead-ensemble".into();
    e.runtime = ensemble_bench::Runtime::Real;
    let d = direct(threads, measure_s, seed)?;
    let r = crate::real::run_real(&ensemble_bench::systems::belt::BeltHarness::new(), &e, progress)?;
    let all = &r.summary.classes["all"];
    let d_tput = d.ops as f64 / d.secs;
    let d_mean = d.hist.mean() / 1e3;
    let rows = vec![
        ["path", "ops/s", "mean ms", "p50 ms", "p99 ms"].map(String::from).to_vec(),
        vec![
            "directly on SQLite".into(),
            format!("{d_tput:.0}"),
            format!("{d_mean:.3}"),
            format!("{:.3}", d.hist.value_at_quantile(0.5) as f64 / 1e3),
            format!("{:.3}", d.hist.value_at_quantile(0.99) as f64 / 1e3),
        ],
        vec![
            "through one Ensemble instance".into(),
            format!("{:.0}", r.summary.throughput),
            format!("{:.3}", all.mean_ms),
            format!("{:.3}", all.p50_ms),
            format!("{:.3}", all.p99_ms),
        ],
    ];
    Ok(format!(
        "Middleware overhead: shop (50% browse), {threads} closed-loop clients, {measure_s} s each, measured one after the other in this run\n\n{}\nthroughput ratio (Ensemble / direct): {:.2}\nmean latency ratio (Ensemble / direct): {:.2}\ncheck of the Ensemble run: {}",
        render(&rows),
        r.summary.throughput / d_tput,
        all.mean_ms / d_mean,
        r.check.unwrap_or_default()
    ))
}
