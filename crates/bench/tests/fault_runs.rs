//! The Conveyor Belt's fault runs (`ensemble sweep --primitive belt`): a handful of seeds pass,
//! and the verdict sees what the belt cannot survive (a lost token, an instance that never
//! comes back), what it must wait out (a stalled instance) and what it must refuse (a second
//! token). CI runs 5,000 seeds of the sweep in release.

use ensemble_bench::fault_runs::{run, run_under, HEAL};
use ensemble_core::{ProcessId, Time};
use ensemble_sim::{FaultPlan, Links, Window};
use std::time::Duration;

#[test]
fn seeds_of_every_shape_pass() {
    // A seed below 16 modulo 64 duplicates messages between instances; bit 3 runs the globals
    // one after the other, bit 6 the read-only system. Together these cover both applications,
    // both systems, 2 to 4 instances, and both ways of running globals, with and without copies;
    // about half of them stall instances.
    let (mut stalled, mut held) = (0, 0);
    for seed in (0..6).chain(8..14).chain(16..20).chain(24..28).chain(64..67).chain(72..75) {
        let r = run(seed).unwrap();
        assert!(r.ok(), "{r}");
        assert!(r.check.contains("replies and final state match") && r.check.contains("SER: serializable"), "{}", r.check);
        stalled += usize::from(r.scenario.contains("stalled"));
        held += r.ending.held_in_stalls;
    }
    assert!((6..=20).contains(&stalled) && held > 0, "{stalled} of 26 seeds stalled an instance, {held} events held");
}

#[test]
fn a_token_lost_is_a_run_that_does_not_drain() {
    // The belt assumes TCP: a message lost between instances is the token lost, and the ring
    // stops for good. The sweep never does this to it; the verdict must still see it.
    let mut plan = FaultPlan::new();
    plan.drop_messages(Window::new(Time::ZERO + Duration::from_secs(1), Time::ZERO + HEAL), Links::Between { a: ProcessId(0).into(), b: ProcessId(1).into() }, 1.0);
    let r = run_under("shop", 0, 2, plan, "every message between p0 and p1 dropped in [1, 6) s").unwrap();
    assert!(!r.ok());
    assert!(!r.ending.drained && !r.settled(), "{r}");
    assert!(!r.ending.unanswered.is_empty(), "{r}");
    assert_eq!(r.committed_after_heal, 0, "{r}");
    assert!(r.to_string().contains("not drained") && r.to_string().contains("unanswered: "), "{r}");
}

#[test]
fn a_duplicated_token_is_refused_and_the_ring_goes_on() {
    let mut plan = FaultPlan::new();
    plan.duplicate_messages(Window::new(Time::ZERO, Time::ZERO + HEAL), Links::Between { a: ProcessId(0).into(), b: ProcessId(1).into() }, 1.0);
    let r = run_under("shop", 16, 3, plan, "every message between p0 and p1 duplicated until the heal").unwrap();
    assert!(r.ending.duplicated > 0 && r.ending.refused > 0, "{r}");
    assert!(r.ending.refused <= r.ending.duplicated && r.ending.unexplained_refusals == 0, "{r}");
    assert!(r.ending.first_refusals.iter().any(|f| f.contains("token")), "{:?}", r.ending.first_refusals);
    assert!(r.ok(), "{r}");
}

#[test]
fn a_stalled_instance_costs_time_only() {
    // An instance of three stands still for two seconds; the token reaches it meanwhile and
    // waits with everything else: the ring waits for it, and the run ends whole and checked.
    let mut plan = FaultPlan::new();
    plan.stall(ProcessId(1), Window::new(Time::ZERO + Duration::from_secs(1), Time::ZERO + Duration::from_secs(3)));
    let r = run_under("shop", 0, 3, plan, "p1 stalled in [1, 3) s").unwrap();
    assert!(r.ending.held_in_stalls > 0, "{r}");
    assert!(r.ok(), "{r}");
}

#[test]
fn an_instance_stalled_for_good_is_a_run_that_does_not_drain() {
    // A stall that never ends is a crash the ring cannot see: what waits for p1 never comes.
    let mut plan = FaultPlan::new();
    plan.stall(ProcessId(1), Window::from(Time::ZERO + Duration::from_secs(1)));
    let r = run_under("shop", 0, 3, plan, "p1 stalled from 1 s on").unwrap();
    assert!(!r.ok());
    assert!(!r.ending.drained && !r.ending.unanswered.is_empty(), "{r}");
    assert!(r.to_string().contains("not drained"), "{r}");
}
