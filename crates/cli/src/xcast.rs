//! `ensemble sweep` (many seeded faulty runs of each group-communication primitive, checked)
//! and `ensemble figure xcast-latency` (their latency and messages per cast beside the papers'),
//! both over `ensemble_xcast`'s simulations.

use anyhow::{bail, Context};
use clap::Args;
use ensemble_bench::report::render;
use ensemble_bench::write_json;
use ensemble_xcast::latency::{self, Row};
use ensemble_xcast::node::Kind;
use ensemble_xcast::real::{self, RealRun};
use ensemble_xcast::sweep::{self, Progress, Subject, Verdict};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most runs one sweep makes per primitive: 10^9 runs at the ~100 runs/s of a machine is
/// months; more is a typo.
const MAX_RUNS: u64 = 1_000_000_000;

#[derive(Args)]
pub struct SweepArgs {
    /// A primitive (reliable, broadcast, genuine, streams; commit: two-phase commit), a G-DUR
    /// system (p-store, p-store-ge, p-store-gdur, p-store-2pc, p-store-full: fault runs of the
    /// whole engine), the Conveyor Belt (belt: shop and micro under timing faults, checked by
    /// replay; belt-tpcw, belt-rubis: the same on TPC-W or RUBiS, slower), or in turn:
    /// all primitives (`primitives`), all G-DUR systems (`g-dur`), everything (`all`).
    #[arg(long, default_value = "all", value_parser = primitive)]
    primitive: String,
    /// Seeded runs per primitive; 1 to 1000000000.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_RUNS))]
    runs: u64,
    /// The first seed: the sweep runs seeds FROM to FROM + RUNS - 1.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Threads; 1 to 256. Default: the machine's cores.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=crate::MAX_THREADS as u64))]
    jobs: Option<usize>,
    /// Also write the summaries (with every failing seed) here as JSON; its directory must exist.
    #[arg(long, value_parser = crate::file_to_write)]
    out: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

fn primitive(s: &str) -> Result<String, String> {
    select(s).map(|_| s.to_owned())
}

/// What `--primitive` names: one subject, or a set of them.
fn select(name: &str) -> Result<Vec<Subject>, String> {
    match name {
        "primitives" => Ok(sweep::subjects()),
        "g-dur" => Ok(gdur_subjects()),
        _ => sweep::select_among(subjects(), name).map_err(|e| format!("{e}, primitives, g-dur")),
    }
}

/// The group-communication primitives, then the G-DUR systems, then the belt.
fn subjects() -> Vec<Subject> {
    let mut all = sweep::subjects();
    all.extend(gdur_subjects());
    all.push(Subject::plain("belt", |seed| belt_verdict(ensemble_bench::fault_runs::run(seed), seed)));
    all.push(Subject::plain("belt-tpcw", |seed| belt_verdict(ensemble_bench::fault_runs::run_of("tpcw", seed), seed)));
    all.push(Subject::plain("belt-rubis", |seed| belt_verdict(ensemble_bench::fault_runs::run_of("rubis", seed), seed)));
    all
}

/// A Conveyor Belt fault run (`ensemble_bench::fault_runs`) as the sweep tallies it: a failed
/// check is a violation; a run that did not drain, left a request unanswered, or committed
/// nothing issued after the heal made no progress; a refusal no duplicated message explains is
/// a refusal; a halted instance, or a run that could not be set up at all, is a failure.
fn belt_verdict(run: anyhow::Result<ensemble_bench::fault_runs::BeltFaultRun>, seed: u64) -> Verdict {
    match run {
        Ok(r) => Verdict {
            violations: usize::from(!r.checked),
            unsettled: !r.settled() || r.committed_after_heal == 0,
            refusals: r.unexplained_refusals() as usize,
            failures: r.failures.len(),
            simulated: Some(r.ended),
            detail: r.to_string(),
        },
        Err(e) => Verdict { violations: 0, unsettled: false, refusals: 0, failures: 1, simulated: None, detail: format!("seed {seed}: the run failed: {e:#}") },
    }
}

/// The G-DUR systems' fault runs (`ensemble_gdur::sweep`).
fn gdur_subjects() -> Vec<Subject> {
    Vec::from([
        Subject::plain("p-store", |seed| dur_verdict(&ensemble_gdur::sweep::run("p-store", seed))),
        Subject::plain("p-store-ge", |seed| dur_verdict(&ensemble_gdur::sweep::run("p-store-ge", seed))),
        Subject::plain("p-store-gdur", |seed| dur_verdict(&ensemble_gdur::sweep::run("p-store-gdur", seed))),
        Subject::plain("p-store-2pc", |seed| dur_verdict(&ensemble_gdur::sweep::run("p-store-2pc", seed))),
        Subject::plain("p-store-full", |seed| dur_verdict(&ensemble_gdur::sweep::run("p-store-full", seed))),
    ])
}

/// A G-DUR fault run as the sweep tallies it: a check that failed (serializability, agreement,
/// lost commits) is a violation; no quiescence or no commit after the heal is no progress.
fn dur_verdict(r: &ensemble_gdur::sweep::FaultRun) -> Verdict {
    Verdict {
        violations: usize::from(!r.checked.report.ok()) + r.checked.lost.len(),
        unsettled: !r.settled || r.committed_after_heal == 0,
        refusals: r.refusals.len(),
        failures: r.checked.failures.len(),
        simulated: Some(r.ended.as_duration()),
        detail: r.to_string(),
    }
}

pub fn sweep(a: SweepArgs) -> anyhow::Result<()> {
    if a.from.checked_add(a.runs - 1).is_none() {
        bail!("--from {} --runs {}: the last seed would pass {}", a.from, a.runs, u64::MAX);
    }
    let subjects = select(&a.primitive).map_err(|e| anyhow::anyhow!("--primitive: {e}"))?;
    let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut summaries = Vec::new();
    for subject in &subjects {
        let mut report = progress_printer(subject.name, a.quiet);
        let s = sweep::sweep(subject, a.from, a.runs, jobs, &mut report);
        println!("{s}");
        for f in &s.failing {
            println!("\n{} seed {} failed:\n{}", s.primitive, f.seed, f.detail);
            println!("reproduce: ensemble sweep --primitive {} --from {} --runs 1", s.primitive, f.seed);
        }
        if s.failing_seeds.len() > s.failing.len() {
            const LISTED: usize = 100;
            let seeds: Vec<String> = s.failing_seeds.iter().take(LISTED).map(u64::to_string).collect();
            let more = s.failing_seeds.len().saturating_sub(LISTED);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            println!("\n{} failing seeds: {}{more}", s.primitive, seeds.join(" "));
        }
        summaries.push(s);
    }
    if let Some(path) = &a.out {
        write_json(path, &summaries)?;
        eprintln!("wrote {}", path.display());
    }
    let failed: u64 = summaries.iter().map(|s| s.failed_runs).sum();
    if failed > 0 {
        let total: u64 = summaries.iter().map(|s| s.runs).sum();
        bail!("{failed} of {total} runs failed");
    }
    Ok(())
}

/// Prints a line at every tenth of the runs, and at least once a minute.
fn progress_printer(name: &'static str, quiet: bool) -> impl FnMut(&Progress) {
    let mut shown = (0u64, Instant::now());
    move |p: &Progress| {
        let tenth = p.done * 10 / p.runs.max(1);
        if quiet || (tenth == shown.0 && shown.1.elapsed() < Duration::from_secs(60)) || p.done == p.runs {
            return;
        }
        shown = (tenth, Instant::now());
        let rate = p.done as f64 / p.elapsed.as_secs_f64().max(1e-9);
        eprintln!("{name}: {}/{} runs, {} failed, {rate:.1} runs/s", p.done, p.runs, p.failed);
    }
}

/// `ensemble figure xcast-latency`: measures every point, prints a table per network with the
/// papers' costs and why ours differ, and writes the points (JSON) and the plot (SVG) to `out`.
pub fn latency_figure(seed: u64, jobs: Option<usize>, real: bool, out: &Path) -> anyhow::Result<()> {
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let started = Instant::now();
    let mut rows = latency::measure_all(seed, jobs).map_err(anyhow::Error::msg)?;
    let mut throughput = Vec::new();
    more_rows(&mut rows, &mut throughput);
    let real_rows = if real { real_throughput(seed)? } else { Vec::new() };
    if !real_rows.is_empty() {
        let mut t = vec![["primitive", "offered casts/s", "casts/s", "p50 ms", "p99 ms", "deliveries", "check"].map(String::from).to_vec()];
        for r in &real_rows {
            t.push(vec![
                r.primitive.clone(),
                format!("{:.0}", r.offered),
                format!("{:.1}", r.throughput),
                format!("{:.1}", r.p50_ms),
                format!("{:.1}", r.p99_ms),
                r.deliveries.to_string(),
                r.check.clone(),
            ]);
        }
        throughput = t;
    }
    for net in latency::nets() {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.net == net.name).collect();
        println!("{}", table(&net, &mine));
    }
    if !throughput.is_empty() {
        println!("{}", render(&throughput));
    }
    println!(
        "fault-free simulations, seed {seed}, one caster outside the groups, one cast every {} ms on the WANs and {} ms on the LAN (latency without contention); \
         at least {} casts per point after a {} s warm-up; first/last: mean latency to the first and the last destination process to deliver (max: the slowest cast's last); \
         first at: the member of its group that delivered first most often (a leader, where consensus orders); msgs/cast: every message of the measured window (consensus, relays, acknowledgements) less the same deployment's heartbeats in that window, per cast; resent/cast: of those, copies, entries and proposals the periodic resend (every 500 ms) sent again; \
         commit: two-phase commit of one transaction at a time on the 3k members of k groups as participants, every vote yes, the coordinator at site 0 and participant i at site i modulo the sites (no such placement in wan-normal50-dc), \
         first: the coordinator's decision, last: the last participant's, msgs/cast: per transaction",
        latency::nets()[0].every.as_millis(),
        latency::nets()[1].every.as_millis(),
        latency::CASTS,
        latency::WARMUP.as_secs(),
    );
    println!("measured in {:.1} s", started.elapsed().as_secs_f64());
    let json = out.join(format!("figure-xcast-latency-seed{seed}.json"));
    write_json(&json, &rows)?;
    eprintln!("wrote {}", json.display());
    if real {
        println!(
            "real runtime: {REAL_GROUPS} groups of 3 and {REAL_OUTSIDE} casters outside them, one OS process each over loopback (authenticated TCP, \
             every delivery and cast fsync'd before the messages that depend on it), every caster casting {REAL_CASTS} times, one every {REAL_EVERY_MS} ms \
             (offered: casters x 1000 / {REAL_EVERY_MS}); casts/s: casts completed (delivered by every destination) per second from the first cast to the last delivery; \
             p50/p99: from a cast to its last destination's delivery; check: the delivery checker on every process's records (genuineness not counted for real)"
        );
        let path = out.join(format!("figure-xcast-throughput-real-seed{seed}.json"));
        write_json(&path, &real_rows)?;
        eprintln!("wrote {}", path.display());
    }
    for path in latency::plot(&rows, &out.join(format!("figure-xcast-latency-seed{seed}"))).map_err(anyhow::Error::msg)? {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Where the rows the simulations do not give plug in: throughput under load on the real
/// runtime over loopback (`ensemble_xcast::real::run`, a table of its own: a header row, then
/// one row per primitive), and any further latency [`Row`] (`latency::stated` and
/// `latency::explain` know the primitive names).
fn more_rows(_latency: &mut Vec<Row>, _throughput: &mut Vec<Vec<String>>) {}

const REAL_GROUPS: u32 = 3;
const REAL_OUTSIDE: u32 = 2;
const REAL_CASTS: u64 = 400;
const REAL_EVERY_MS: u64 = 5;

/// One primitive under load on the real runtime.
#[derive(serde::Serialize)]
struct RealRow {
    primitive: String,
    offered: f64,
    throughput: f64,
    p50_ms: f64,
    p99_ms: f64,
    deliveries: usize,
    check: String,
}

/// Throughput under load on the real runtime over loopback: every working primitive in turn,
/// as OS processes (`ensemble xcast node`), checked.
fn real_throughput(seed: u64) -> anyhow::Result<Vec<RealRow>> {
    let exe = std::env::current_exe().context("finding the ensemble binary")?;
    let exe = vec![exe.to_string_lossy().into_owned(), "xcast".into(), "node".into()];
    let mut rows = Vec::new();
    for kind in Kind::WORKING {
        let run = RealRun {
            kind,
            groups: REAL_GROUPS,
            outside_casters: REAL_OUTSIDE,
            casts: REAL_CASTS,
            every_ms: REAL_EVERY_MS,
            dst_groups: None,
            seed,
            kill: false,
        };
        eprintln!("real runtime: {} ...", kind.name());
        let out = real::run(&run, &exe, Duration::from_secs(300), &mut |line| eprintln!("{line}"))?;
        let casters = f64::from(REAL_GROUPS + REAL_OUTSIDE);
        rows.push(RealRow {
            primitive: kind.name().to_string(),
            offered: casters * 1000.0 / REAL_EVERY_MS as f64,
            throughput: out.throughput(),
            p50_ms: out.latency(0.5).as_secs_f64() * 1e3,
            p99_ms: out.latency(0.99).as_secs_f64() * 1e3,
            deliveries: out.deliveries,
            check: if out.settled && out.report.ok() { "ok".into() } else { format!("FAILED: {}", out.report) },
        });
        anyhow::ensure!(out.settled && out.report.ok(), "{}: {}", kind.name(), out.report);
    }
    Ok(rows)
}

fn table(net: &latency::Net, rows: &[&Row]) -> String {
    let mut t = vec![[
        "primitive",
        "groups",
        "first Δ",
        "last Δ",
        "first ms",
        "last ms",
        "max ms",
        "first at",
        "msgs/cast",
        "resent/cast",
        "G-DUR §5.3",
        "P-Store Table 1",
    ]
    .map(String::from)
    .to_vec()];
    for r in rows {
        let stated = latency::stated(&r.primitive, r.groups);
        t.push(vec![
            r.primitive.clone(),
            r.groups.to_string(),
            format!("{:.2}", r.first_delta),
            format!("{:.2}", r.last_delta),
            format!("{:.1}", r.first_ms),
            format!("{:.1}", r.last_ms),
            r.last_max_ms.map_or("-".into(), |v| format!("{v:.1}")),
            r.first_at.clone(),
            format!("{:.1}", r.messages_per_cast),
            r.resent_per_cast.map_or("-".into(), |v| format!("{v:.1}")),
            stated.gdur,
            stated.pstore,
        ]);
    }
    let mut text = format!("{} (Δ = {} ms): {}\n{}", net.name, fmt_ms(net.delta), net.describe, render(&t));
    let mut seen: Vec<&str> = Vec::new();
    for r in rows {
        if !seen.contains(&r.primitive.as_str()) {
            seen.push(&r.primitive);
            text.push_str(&format!("  {}: {}\n", r.primitive, latency::explain(net.name, &r.primitive)));
        }
    }
    text
}

fn fmt_ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 1.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms}")
    }
}
