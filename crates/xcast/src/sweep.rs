//! Many seeded runs of a primitive's simulation, in parallel, tallied (issue 12, item 3: ≥ 10^4
//! runs per primitive with faults, zero violations, progress after the heal). The `ensemble
//! sweep` command runs this; CI runs it with a count that fits its time.
//!
//! The subjects are every working multicast primitive (`Kind::WORKING`, [`sim::run`]) and
//! two-phase commit ([`commit::run`]). A primitive enters as a [`Subject`]: a name and a function from a seed to a [`Verdict`].
//! Each run is a function of its seed alone, so a failing seed is reproduced by running that
//! seed again, and the tallies do not depend on how many threads ran them.

use crate::commit::{self, CommitOutcome};
use crate::sim::{self, Kind, RunOutcome};
use serde::Serialize;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What one run says about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Property violations the checker found.
    pub violations: usize,
    /// Not every cast settled before the run's limit: no progress after the heal.
    pub unsettled: bool,
    /// Messages a process refused (none is expected between honest processes).
    pub refusals: usize,
    /// Processes that stopped on a broken invariant, and runs that panicked.
    pub failures: usize,
    /// Virtual time the run covered, if it says.
    pub simulated: Option<Duration>,
    /// What to show for a failing run.
    pub detail: String,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.violations == 0 && !self.unsettled && self.refusals == 0 && self.failures == 0
    }

    /// The verdict of a run that only says whether it passed and how to print itself.
    pub fn judged(ok: bool, run: &impl fmt::Display) -> Verdict {
        Verdict { violations: usize::from(!ok), detail: run.to_string(), ..Verdict::default() }
    }

    /// The verdict of a multicast run: the checker's report, refusals, failures, settlement.
    pub fn of_multicast(out: &RunOutcome) -> Verdict {
        let mut detail = out.report.to_string();
        if !out.settled {
            detail.push_str(&format!("\nnot settled by {:?}", out.ended.as_duration()));
        }
        for f in &out.failures {
            detail.push_str(&format!("\nfailure: {f}"));
        }
        const SHOWN: usize = 5;
        for r in out.refused.iter().take(SHOWN) {
            detail.push_str(&format!("\nrefused: {r}"));
        }
        if out.refused.len() > SHOWN {
            detail.push_str(&format!("\n... and {} more refusals", out.refused.len() - SHOWN));
        }
        Verdict {
            violations: out.report.violations.len() + out.report.omitted,
            unsettled: !out.settled,
            refusals: out.refused.len(),
            failures: out.failures.len(),
            simulated: Some(out.ended.as_duration()),
            detail,
        }
    }
}

impl Verdict {
    /// The verdict of a two-phase commit run: its checker's report, refusals, failures,
    /// settlement (every transaction decided by its coordinator and all its participants).
    pub fn of_commit(out: &CommitOutcome) -> Verdict {
        let mut detail = out.report.to_string();
        if !out.settled {
            detail.push_str(&format!("\nnot settled by {:?}", out.ended.as_duration()));
        }
        for f in &out.failures {
            detail.push_str(&format!("\nfailure: {f}"));
        }
        for r in out.refused.iter().take(5) {
            detail.push_str(&format!("\nrefused: {r}"));
        }
        Verdict {
            violations: out.report.violations.len(),
            unsettled: !out.settled,
            refusals: out.refused.len(),
            failures: out.failures.len(),
            simulated: Some(out.ended.as_duration()),
            detail,
        }
    }
}

/// A primitive the sweep runs: its name on the command line and its seeded run.
#[derive(Clone, Copy)]
pub struct Subject {
    pub name: &'static str,
    runner: Runner,
}

#[derive(Clone, Copy)]
enum Runner {
    /// [`sim::run`] of a multicast primitive.
    Multicast(Kind),
    /// Any other seeded run.
    Plain(fn(u64) -> Verdict),
}

impl Subject {
    pub fn multicast(kind: Kind) -> Subject {
        Subject { name: kind.name(), runner: Runner::Multicast(kind) }
    }

    pub fn plain(name: &'static str, run: fn(u64) -> Verdict) -> Subject {
        Subject { name, runner: Runner::Plain(run) }
    }

    pub fn run(&self, seed: u64) -> Verdict {
        match self.runner {
            Runner::Multicast(kind) => Verdict::of_multicast(&sim::run(kind, seed)),
            Runner::Plain(run) => run(seed),
        }
    }
}

/// Every primitive a sweep runs, in the order `all` runs them: the multicast primitives, then
/// two-phase commit.
pub fn subjects() -> Vec<Subject> {
    let mut all: Vec<Subject> = Kind::WORKING.iter().map(|&k| Subject::multicast(k)).collect();
    all.push(Subject::plain("commit", |seed| Verdict::of_commit(&commit::run(seed))));
    all
}

/// The subjects `name` stands for: one primitive, or `all`.
pub fn select(name: &str) -> Result<Vec<Subject>, String> {
    select_among(subjects(), name)
}

/// The subjects of `all` that `name` stands for: one of them, or `all`.
pub fn select_among(all: Vec<Subject>, name: &str) -> Result<Vec<Subject>, String> {
    if name == "all" {
        return Ok(all);
    }
    match all.iter().find(|s| s.name == name) {
        Some(s) => Ok(vec![*s]),
        None => {
            let known: Vec<&str> = all.iter().map(|s| s.name).collect();
            Err(format!("`{name}` is not a primitive the sweep runs (known: {}, all)", known.join(", ")))
        }
    }
}

/// A failing seed, with what its run showed.
#[derive(Clone, Debug, Serialize)]
pub struct Failing {
    pub seed: u64,
    pub detail: String,
}

/// One primitive's sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub primitive: String,
    /// Seeds `from..from + runs`.
    pub from: u64,
    pub runs: u64,
    /// Runs with anything wrong (a violation, no settlement, a refusal, a failure).
    pub failed_runs: u64,
    pub violations: u64,
    pub unsettled: u64,
    pub refusals: u64,
    pub failures: u64,
    /// Virtual time of every run, added up.
    pub simulated_s: f64,
    pub wall_s: f64,
    pub runs_per_s: f64,
    pub threads: usize,
    /// Every failing seed, in seed order.
    pub failing_seeds: Vec<u64>,
    /// The first [`Summary::DETAILED`] failing seeds with their runs' details.
    pub failing: Vec<Failing>,
}

impl Summary {
    /// Failing seeds kept in full: a broken build could fail all 10^4.
    pub const DETAILED: usize = 20;

    pub fn ok(&self) -> bool {
        self.failed_runs == 0
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} runs (seeds {}..{}), {} failed: {} violations, {} unsettled, {} refusals, {} failures; {:.0} s simulated in {:.1} s on {} threads, {:.1} runs/s — {}",
            self.primitive,
            self.runs,
            self.from,
            self.from.saturating_add(self.runs),
            self.failed_runs,
            self.violations,
            self.unsettled,
            self.refusals,
            self.failures,
            self.simulated_s,
            self.wall_s,
            self.threads,
            self.runs_per_s,
            if self.ok() { "ok" } else { "FAILED" },
        )
    }
}

/// How far a sweep got, for a progress line.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub done: u64,
    pub runs: u64,
    pub failed: u64,
    pub elapsed: Duration,
}

/// Runs seeds `from..from + runs` of `subject` on `jobs` threads. Each thread builds its own
/// simulations (they are single-threaded: `Rc` inside); results come back in completion order
/// and are tallied in sums and a seed-ordered list, so the summary does not depend on `jobs`
/// (but for the wall time). A run that panics counts as a failure of its seed.
pub fn sweep(subject: &Subject, from: u64, runs: u64, jobs: usize, progress: &mut dyn FnMut(&Progress)) -> Summary {
    let threads = jobs.clamp(1, runs.max(1).try_into().unwrap_or(usize::MAX));
    let start = Instant::now();
    let next = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel::<(u64, Verdict)>();
    let mut s = Summary {
        primitive: subject.name.to_string(),
        from,
        runs,
        failed_runs: 0,
        violations: 0,
        unsettled: 0,
        refusals: 0,
        failures: 0,
        simulated_s: 0.0,
        wall_s: 0.0,
        runs_per_s: 0.0,
        threads,
        failing_seeds: Vec::new(),
        failing: Vec::new(),
    };
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (tx, next) = (tx.clone(), &next);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= runs {
                    break;
                }
                let seed = from + i;
                let verdict = catch_unwind(AssertUnwindSafe(|| subject.run(seed))).unwrap_or_else(|panic| {
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a panic".into());
                    Verdict { failures: 1, detail: format!("panicked: {what}"), ..Verdict::default() }
                });
                if tx.send((seed, verdict)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut failing: Vec<Failing> = Vec::new();
        for (done, (seed, v)) in (1..).zip(rx.iter()) {
            s.violations += v.violations as u64;
            s.unsettled += u64::from(v.unsettled);
            s.refusals += v.refusals as u64;
            s.failures += v.failures as u64;
            s.simulated_s += v.simulated.unwrap_or_default().as_secs_f64();
            if !v.ok() {
                s.failed_runs += 1;
                s.failing_seeds.push(seed);
                failing.push(Failing { seed, detail: v.detail });
                // Keep the lowest seeds' details, whatever order they finished in.
                failing.sort_by_key(|f| f.seed);
                failing.truncate(Summary::DETAILED);
            }
            progress(&Progress { done, runs, failed: s.failed_runs, elapsed: start.elapsed() });
        }
        s.failing = failing;
    });
    s.failing_seeds.sort_unstable();
    s.wall_s = start.elapsed().as_secs_f64();
    s.runs_per_s = if s.wall_s > 0.0 { runs as f64 / s.wall_s } else { 0.0 };
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn odd_seeds_fail(seed: u64) -> Verdict {
        if seed % 2 == 1 {
            Verdict { violations: 2, detail: format!("seed {seed} is odd"), ..Verdict::default() }
        } else {
            Verdict { simulated: Some(Duration::from_secs(1)), ..Verdict::default() }
        }
    }

    fn seed_3_panics(seed: u64) -> Verdict {
        assert_ne!(seed, 3, "seed 3 panics");
        Verdict::default()
    }

    #[test]
    fn the_tally_is_the_same_on_any_number_of_threads() {
        let subject = Subject::plain("odd", odd_seeds_fail);
        let one = sweep(&subject, 10, 50, 1, &mut |_| {});
        let four = sweep(&subject, 10, 50, 4, &mut |_| {});
        assert_eq!(one.failed_runs, 25);
        assert_eq!(one.violations, 50);
        assert_eq!(one.simulated_s, 25.0);
        assert_eq!(one.failing_seeds, four.failing_seeds);
        assert_eq!(one.failing_seeds.first(), Some(&11));
        let details: Vec<u64> = four.failing.iter().map(|f| f.seed).collect();
        assert_eq!(details, (0..Summary::DETAILED as u64).map(|i| 11 + 2 * i).collect::<Vec<_>>());
        assert!(!one.ok());
    }

    #[test]
    fn a_panicking_run_is_a_failure_of_its_seed() {
        let subject = Subject::plain("panics", seed_3_panics);
        let mut last = None;
        let s = sweep(&subject, 0, 6, 2, &mut |p| last = Some(p.done));
        assert_eq!(s.failing_seeds, vec![3]);
        assert_eq!(s.failures, 1);
        assert!(s.failing[0].detail.contains("seed 3 panics"), "{}", s.failing[0].detail);
        assert_eq!(last, Some(6));
    }

    #[test]
    fn primitives_are_selected_by_name() {
        assert_eq!(select("all").unwrap().len(), Kind::WORKING.len() + 1);
        assert_eq!(select("commit").unwrap()[0].name, "commit");
        assert_eq!(select("genuine").unwrap()[0].name, "genuine");
        let e = select("gossip").err().unwrap();
        let known: Vec<&str> = Kind::WORKING.iter().map(|k| k.name()).collect();
        assert!(e.contains("`gossip` is not a primitive") && e.contains(&format!("{}, commit, all", known.join(", "))), "{e}");
    }

    /// A real multicast run through the sweep: clean, and its simulated time counted.
    #[test]
    fn a_multicast_seed_sweeps_clean() {
        let s = sweep(&select("reliable").unwrap()[0], 0, 1, 1, &mut |_| {});
        assert!(s.ok(), "{s}");
        assert!(s.simulated_s >= sim::HORIZON.as_duration().as_secs_f64());
    }
}
