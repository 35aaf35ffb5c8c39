//! `ensemble xcast real` and `ensemble xcast node`: a group-communication primitive on real
//! processes over TCP on this machine (`ensemble_xcast::real`), with the `kill -9` fault of
//! issue 12 and the delivery checker's verdict.

use anyhow::Context;
use clap::{Args, Subcommand};
use ensemble_xcast::node::Kind;
use ensemble_xcast::real::{self, NodeArgs, RealRun};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand)]
pub enum XcastCommand {
    /// Run a multicast load on one OS process per group member and caster, optionally
    /// `kill -9` one member of every group in the middle of it and start it again, wait until
    /// everything cast is delivered, and check the deliveries.
    Real(RealArgs),
    /// One process of a real multicast run (started by `xcast real`, not by hand).
    #[command(hide = true)]
    Node(NodeCmd),
}

#[derive(Args)]
pub struct RealArgs {
    /// reliable, broadcast or genuine.
    #[arg(long, default_value = "genuine", value_parser = Kind::parse)]
    primitive: Kind,
    /// Groups of three processes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    groups: u32,
    /// Casters outside every group (the first member of every group casts as well).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=16))]
    outside_casters: u32,
    /// Casts per caster.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    casts: u64,
    /// Milliseconds between two casts of a caster.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    every_ms: u64,
    /// Groups each cast goes to (default: the primitive's own random choice; broadcast: all).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16))]
    dst_groups: Option<u64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// `kill -9` one member of every group once a third of the casts are made; start it again
    /// once two thirds are.
    #[arg(long)]
    kill: bool,
    /// Give up waiting for deliveries after this many seconds.
    #[arg(long, default_value_t = 180, value_parser = clap::value_parser!(u64).range(1..=3600))]
    limit_s: u64,
    /// Also write the outcome here (JSON).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the run's delivery log here (for `ensemble check FILE --delivery ...`).
    #[arg(long)]
    delivery_log: Option<PathBuf>,
}

#[derive(Args)]
pub struct NodeCmd {
    #[arg(long)]
    run: PathBuf,
    #[arg(long)]
    cluster: PathBuf,
    #[arg(long)]
    host: u32,
    #[arg(long)]
    dir: PathBuf,
}

pub fn run(command: XcastCommand) -> anyhow::Result<()> {
    match command {
        XcastCommand::Node(a) => real::serve(&NodeArgs { run: a.run, cluster: a.cluster, host: a.host, dir: a.dir }),
        XcastCommand::Real(a) => run_real(a),
    }
}

fn run_real(a: RealArgs) -> anyhow::Result<()> {
    let spec = RealRun {
        kind: a.primitive,
        groups: a.groups,
        outside_casters: a.outside_casters,
        casts: a.casts,
        every_ms: a.every_ms,
        dst_groups: a.dst_groups.map(|k| k as usize),
        seed: a.seed,
        kill: a.kill,
    };
    spec.validate().map_err(|e| anyhow::anyhow!("--{e}"))?;
    let exe = std::env::current_exe().context("finding the ensemble binary")?;
    let exe = vec![exe.to_string_lossy().into_owned(), "xcast".into(), "node".into()];
    let out = real::run(&spec, &exe, Duration::from_secs(a.limit_s), &mut |line| eprintln!("{line}"))?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{} on {} groups of 3 + {} outside casters, real processes over loopback: {} casts, {} deliveries, {} killed and restarted",
        a.primitive.name(),
        a.groups,
        a.outside_casters,
        out.casts,
        out.deliveries,
        out.killed.len()
    );
    println!(
        "throughput {:.1} casts/s (first cast to last delivery, {:.2} s); latency to the last destination p50 {:.1} ms, p99 {:.1} ms",
        out.throughput(),
        out.span.as_secs_f64(),
        ms(out.latency(0.5)),
        ms(out.latency(0.99))
    );
    println!("{}", out.report);
    if let Some(path) = &a.out {
        let json = serde_json::json!({
            "run": spec,
            "casts": out.casts,
            "deliveries": out.deliveries,
            "killed": out.killed.iter().map(|p| p.0).collect::<Vec<_>>(),
            "settled": out.settled,
            "passed": out.report.ok(),
            "throughput_casts_per_s": out.throughput(),
            "latency_p50_ms": ms(out.latency(0.5)),
            "latency_p99_ms": ms(out.latency(0.99)),
            "report": out.report.to_string(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.delivery_log {
        out.log.save(path).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &out.kept {
        eprintln!("the run's files are kept in {}", dir.display());
    }
    anyhow::ensure!(out.settled, "not everything cast was delivered everywhere within {} s", a.limit_s);
    anyhow::ensure!(out.report.ok(), "the deliveries break the primitive's properties");
    Ok(())
}
