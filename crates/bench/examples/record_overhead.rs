//! Wall time of a simulated run with and without recording row accesses, side by side.
//!
//! `cargo run --release -p ensemble-bench --example record_overhead [APP] [SYSTEM] [ROUNDS]`
//! (default: shop, ensemble, 3 rounds) with `ensemble bench`'s defaults: 3 instances on wan5,
//! 50 clients, 5 s of warm-up and 20 s measured, checked. Each round runs recording off, then
//! on; it prints the simulation and the check separately (the check is the replay, plus the
//! dependency-graph checker when recording) and the ratios of the medians.

use ensemble_bench::experiment::System;
use ensemble_bench::sim_run::simulate;
use ensemble_bench::systems::belt::BeltHarness;
use ensemble_bench::Experiment;
use ensemble_core::topology::Topology;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let app = args.first().map(String::as_str).unwrap_or("shop");
    let system = System::parse(args.get(1).map(String::as_str).unwrap_or("ensemble")).map_err(anyhow::Error::msg)?;
    let rounds: usize = args.get(2).map(|r| r.parse()).transpose()?.unwrap_or(3);
    // Optionally one mode only (`off` or `on`), for a profiler.
    let modes: Vec<bool> = match args.get(3).map(String::as_str) {
        Some("off") => vec![false],
        Some("on") => vec![true],
        _ => vec![false, true],
    };
    let mut e = Experiment::new(app, system, 3, Topology::wan5()).map_err(anyhow::Error::msg)?;
    e.clients = 50;
    let h = BeltHarness::new();
    // (simulate, check) per mode.
    let mut times: [Vec<(Duration, Duration)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for record in modes.iter().copied() {
            let mode = record as usize;
            e.record_access = record;
            let t0 = Instant::now();
            let s = simulate(&h, &e, false)?;
            let t1 = Instant::now();
            let r = s.check(&h, &e)?;
            let t2 = Instant::now();
            anyhow::ensure!(r.check_passed == Some(true), "{}", r.check.unwrap_or_default());
            println!(
                "round {round} record_access={record:5}: simulate {:7.3} s, check {:6.3} s, {:.0} ops/s in the window",
                (t1 - t0).as_secs_f64(),
                (t2 - t1).as_secs_f64(),
                r.summary.throughput
            );
            times[mode].push((t1 - t0, t2 - t1));
        }
    }
    if modes.len() < 2 {
        return Ok(());
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64()
    };
    let part = |mode: usize, f: fn(&(Duration, Duration)) -> Duration| times[mode].iter().map(f).collect::<Vec<_>>();
    let (sim_off, sim_on) = (median(&mut part(0, |t| t.0)), median(&mut part(1, |t| t.0)));
    let (all_off, all_on) = (median(&mut part(0, |t| t.0 + t.1)), median(&mut part(1, |t| t.0 + t.1)));
    println!("{app} {}: medians of {rounds}", system.name());
    println!("  simulate:          off {sim_off:.3} s, on {sim_on:.3} s, ratio {:.2}", sim_on / sim_off);
    println!("  simulate + check:  off {all_off:.3} s, on {all_on:.3} s, ratio {:.2}", all_on / all_off);
    Ok(())
}
