//! Seeded fault runs of the Conveyor Belt (`ensemble sweep --primitive belt`): many small
//! simulations of the belt under faults of timing, each checked by replay and by the
//! dependency-graph checker, and for progress once the faults heal.
//!
//! What the belt assumes of its network decides which faults are fair. Its instances talk over
//! TCP connections (reliable, FIFO) and it has no failure handling of its own, as in Eliá and
//! Gyro: a lost token stops the ring for good, and a crashed instance's partition is gone. So
//! these runs lose no message and crash no process; what they do is everything TCP over a WAN
//! can do to timing, which is where a token protocol's mistakes hide:
//! * message delays (up to 600 ms) on one link of the ring, on every message one
//!   instance sends or receives (a slow network interface: its clients' requests and its token
//!   both wait, its cores go on), or on every message;
//! * a partition that heals, as TCP sees one: every message across the cut sent during it
//!   arrives after the heal, in order;
//! * on half of the seeds, one or two instances stalled for up to 2 s each (a paused
//!   machine: what reaches it and its timers wait for the stall's end, its storage work
//!   resumes then, and nothing is lost, [`ensemble_sim::Stall`]), which a ring without
//!   failure detection must simply wait out;
//! * on a quarter of the seeds, duplicated messages between instances, which TCP never makes:
//!   a copy of the token is a second token, and the belt must refuse it and go on (a message
//!   delivered twice may be refused once, the original or the copy; any other refusal fails
//!   the run).
//!
//! What [`run`] is, for seed `s` (bit 0, bit 3, bits 4 and 5, bit 6 each choose one knob below;
//! the instance count is `2 + (s >> 1) % 3`): `shop` or `micro`
//! (whose operations are mostly global) under the analyzer's plan (`ensemble`) or with every
//! writer global (`read-only`), 2 to 4 instances at their sites of Gyro's WAN (`wan5`), the
//! token holder's globals in parallel or one after the other, 8 closed-loop clients spread
//! over the five sites that issue until 10 s, faults until 6 s, then the run goes on until
//! nothing has completed for 3 s and every instance is quiescent. A run passes when both checks
//! pass, it drained with every request answered, no process failed, and an operation issued
//! after the heal committed.

use crate::experiment::{Experiment, System};
use crate::sim_run::{simulate_under, Ending};
use crate::systems::belt::BeltHarness;
use ensemble_belt::GlobalExecution;
use ensemble_core::topology::Topology;
use ensemble_core::{CompletionResult, ProcessId, Time};
use ensemble_sim::{FaultPlan, Links, Window};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Every fault of [`run`]'s plans ends by then.
pub const HEAL: Duration = Duration::from_secs(6);
const CLIENTS_STOP: Duration = Duration::from_secs(10);
const CLIENTS: u32 = 8;
const MAX_DELAY: Duration = Duration::from_millis(600);

/// What one fault run found.
#[derive(Debug)]
pub struct BeltFaultRun {
    /// What the seed chose.
    pub scenario: String,
    /// The run's checks passed (replay, dependency graph, no process failed).
    pub checked: bool,
    /// The checks' summary, one line per check.
    pub check: String,
    pub ending: Ending,
    /// Operations answered, in all and of those issued after the heal, committed.
    pub answered: usize,
    pub committed_after_heal: usize,
    /// Process failures (a belt instance that halted).
    pub failures: Vec<String>,
    /// Virtual time at the end of the run.
    pub ended: Duration,
}

impl BeltFaultRun {
    /// Refusals no duplicated message explains: the simulator allows one refusal per message
    /// it delivered twice, of either delivery ([`ensemble_sim::SimStats::refusals_of_duplicates`]).
    pub fn unexplained_refusals(&self) -> u64 {
        self.ending.unexplained_refusals
    }

    pub fn ok(&self) -> bool {
        self.checked && self.settled() && self.committed_after_heal > 0 && self.failures.is_empty() && self.unexplained_refusals() == 0
    }

    /// Drained, with every request answered.
    pub fn settled(&self) -> bool {
        self.ending.drained && self.ending.unanswered.is_empty()
    }
}

impl std::fmt::Display for BeltFaultRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.scenario)?;
        write!(f, "{}", self.check)?;
        if !self.ending.drained {
            write!(f, "\nnot drained: an instance not quiescent, or still answering, at {:?}", self.ended)?;
        }
        if let Some((c, seq)) = self.ending.unanswered.first() {
            write!(f, "\nunanswered: {} request(s), the first request {seq} of client {}", self.ending.unanswered.len(), c.0)?;
        }
        if self.committed_after_heal == 0 {
            write!(f, "\nno progress: nothing issued after the heal committed ({} answered in all)", self.answered)?;
        }
        for r in &self.failures {
            write!(f, "\nfailed: {r}")?;
        }
        if self.unexplained_refusals() > 0 {
            write!(
                f,
                "\n{} messages refused, {} of them no duplicated message explains ({} duplicated):",
                self.ending.refused,
                self.unexplained_refusals(),
                self.ending.duplicated
            )?;
            for r in self.ending.first_unexplained_refusals.iter().take(5) {
                write!(f, "\n  {r}")?;
            }
        }
        Ok(())
    }
}

/// The fault run of the belt for `seed`: `shop` on even seeds, `micro` on odd ones.
pub fn run(seed: u64) -> anyhow::Result<BeltFaultRun> {
    run_of(if seed & 1 == 0 { "shop" } else { "micro" }, seed)
}

/// The fault run of the belt for `seed` on application `app` (TPC-W and RUBiS are each a
/// subject of their own: a run of theirs takes 5 to 11 times as long as one of shop).
pub fn run_of(app: &str, seed: u64) -> anyhow::Result<BeltFaultRun> {
    let instances = 2 + ((seed >> 1) % 3) as u32;
    let duplicates = (seed >> 4) & 3 == 0;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6265_6c74_6661_756c);
    let (plan, said) = faults(&mut rng, instances, duplicates);
    run_under(app, seed, instances, plan, &said.join("; "))
}

/// The run of `app` with `seed`'s settings over `instances`, under `plan` (said in words by
/// `faults`), checked.
pub fn run_under(app: &str, seed: u64, instances: u32, plan: FaultPlan, faults: &str) -> anyhow::Result<BeltFaultRun> {
    let parallel = (seed >> 3) & 1 == 0;
    let system = if (seed >> 6) & 1 == 0 { System::Ensemble } else { System::ReadOnly };
    let mut exp = Experiment::new(app, system, instances, Topology::wan5()).map_err(anyhow::Error::msg)?;
    exp.label = format!("belt-faults-{seed}");
    exp.seed = seed;
    exp.clients = CLIENTS;
    exp.warmup_s = 0.0;
    exp.measure_s = CLIENTS_STOP.as_secs_f64();
    exp.global_execution = if parallel { GlobalExecution::Parallel } else { GlobalExecution::Sequential };
    exp.record_access = true;
    let scenario = format!(
        "seed {seed}: {app} under {} over {instances} instances in wan5, globals {}, {CLIENTS} clients; faults until {HEAL:?}: {faults}",
        system.name(),
        if parallel { "in parallel" } else { "one after the other" },
    );
    let h = BeltHarness::new();
    let simulated = simulate_under(&h, &exp, plan, false)?;
    let heal = Time::ZERO + HEAL;
    let answered = simulated.history.len();
    let committed_after_heal = simulated
        .history
        .iter()
        .filter(|c| c.issued >= heal && matches!(&c.result, CompletionResult::Done(d) if d.outcome.committed()))
        .count();
    let failures = simulated.failures.clone();
    let ending = simulated.ending.clone();
    let ended = Duration::from_secs_f64(simulated.result.sim.as_ref().map_or(0.0, |s| s.virtual_s));
    let result = simulated.check(&h, &exp)?;
    Ok(BeltFaultRun {
        scenario,
        checked: result.check_passed == Some(true),
        check: result.check.unwrap_or_default(),
        ending,
        answered,
        committed_after_heal,
        failures,
        ended,
    })
}

/// A random plan of timing faults among `n` instances (processes `0..n`), before the heal, and
/// what it holds in words.
fn faults(rng: &mut ChaCha8Rng, n: u32, duplicates: bool) -> (FaultPlan, Vec<String>) {
    let mut plan = FaultPlan::new();
    let mut said = Vec::new();
    let horizon = HEAL.as_nanos() as u64;
    let window = |rng: &mut ChaCha8Rng| {
        let start = rng.random_range(0..horizon);
        let len = rng.random_range(horizon / 50..=horizon / 3);
        Window::new(Time(start), Time((start + len).min(horizon)))
    };
    let ms = |t: Time| t.0 / 1_000_000;
    let instance = |rng: &mut ChaCha8Rng| ProcessId(rng.random_range(0..n));
    for _ in 0..rng.random_range(1..=6) {
        let w = window(rng);
        let extra = Duration::from_millis(rng.random_range(1..=MAX_DELAY.as_millis() as u64));
        let (links, what) = match rng.random_range(0..3u8) {
            0 => {
                // A link the token crosses: from an instance to its successor on the ring.
                let a = instance(rng);
                let b = ProcessId((a.0 + 1) % n);
                (Links::Between { a: a.into(), b: b.into() }, format!("{a}-{b}"))
            }
            1 => {
                let a = instance(rng);
                (Links::Touching(a.into()), format!("all of {a}'s"))
            }
            _ => (Links::All, "every link".to_string()),
        };
        plan.delay_messages(w, links, extra);
        said.push(format!("{what} +{} ms in [{}, {}) ms", extra.as_millis(), ms(w.start), ms(w.end)));
    }
    if rng.random_bool(0.5) {
        // A cut that heals: what crosses it waits for the heal, as TCP's retransmissions would.
        let w = window(rng);
        let side: Vec<ProcessId> = (0..n).map(ProcessId).filter(|_| rng.random_bool(0.5)).collect();
        if !side.is_empty() && side.len() < n as usize {
            let wait = Duration::from_nanos(w.end.0 - w.start.0);
            for &a in &side {
                for b in (0..n).map(ProcessId).filter(|b| !side.contains(b)) {
                    plan.delay_messages(w, Links::Between { a: a.into(), b: b.into() }, wait);
                }
            }
            let names: Vec<String> = side.iter().map(ToString::to_string).collect();
            said.push(format!("{{{}}} cut from the rest in [{}, {}) ms", names.join(", "), ms(w.start), ms(w.end)));
        }
    }
    if duplicates {
        let w = window(rng);
        let p = rng.random_range(0.2..=1.0);
        for a in 0..n {
            for b in (a + 1)..n {
                plan.duplicate_messages(w, Links::Between { a: ProcessId(a).into(), b: ProcessId(b).into() }, p);
            }
        }
        said.push(format!("messages between instances duplicated with probability {p:.2} in [{}, {}) ms", ms(w.start), ms(w.end)));
    }
    // Drawn last, so that the faults above are the ones each seed drew before stalls existed.
    if rng.random_bool(0.5) {
        for _ in 0..rng.random_range(1..=2) {
            let (a, w) = (instance(rng), window(rng));
            plan.stall(a, w);
            said.push(format!("{a} stalled in [{}, {}) ms", ms(w.start), ms(w.end)));
        }
    }
    (plan, said)
}
