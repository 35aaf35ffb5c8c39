//! P-DUR's per-partition broadcast streams (issue 12, item 2; genuine multicast in its per-group
//! mode, `ensemble_group::multicast::Ordering::PerGroup`) checked by the delivery-log checker
//! over seeded simulations with random fault plans, as `multicast.rs` checks the other
//! primitives: zero violations of what the streams promise, progress after the heal, and runs
//! whose groups do deliver common messages in different orders, which is what genuine atomic
//! multicast forbids and the checker tells apart.

use ensemble_xcast::sim::{run, Kind};

use ensemble_history::delivery::{check, Primitive, Property};

/// Seeds in the test suite, as for the other primitives; a sweep command runs 10^4 of them with
/// `run_seed`.
const SEEDS: u64 = 200;

#[test]
fn partition_streams_keep_their_properties_under_random_faults_and_only_those() {
    let (mut multi, mut disordered, mut cycles) = (0, 0, 0);
    for seed in 0..SEEDS {
        let out = run(Kind::Streams, seed);
        assert_eq!(out.report.primitive, Some(Primitive::PartitionStreams));
        assert!(out.report.ok(), "seed {seed}: {}", out.report);
        assert!(out.failures.is_empty(), "seed {seed}: {:?}", out.failures);
        assert!(out.refused.is_empty(), "seed {seed}: {:?}", out.refused);
        // Progress after the heal: every cast by a correct caster reached every correct
        // destination (validity, in the report) before the limit.
        assert!(out.settled, "seed {seed}: not settled by {:?}", out.ended);
        assert!(out.report.counts.delivered > 0);
        assert_eq!(out.report.counts.outside_steps, 0, "seed {seed}");
        multi += out.log.casts.iter().filter(|c| c.destinations.len() > 1).count();
        // What the streams do not promise: one order across groups.
        let across = check(&out.log, &[Property::PrefixOrder, Property::AcyclicOrder]);
        if !across.holds(Property::PrefixOrder) {
            disordered += 1;
        }
        if !across.holds(Property::AcyclicOrder) {
            cycles += 1;
        }
    }
    eprintln!("{SEEDS} seeds: {multi} casts to several groups; prefix order across groups broken in {disordered} runs, acyclic order in {cycles}");
    assert!(multi > 0);
    assert!(disordered > 0 && cycles > 0, "no run delivered common messages in different orders in two groups");
}
