//! The delivery checker on small hand-made logs: for every property, a log that satisfies it and
//! one that breaks it, caught with the message that names the processes and messages involved.

use ensemble_history::delivery::{
    check, check_primitive, Cast, DeliveryLog, DeliveryViolation, GroupId, LogMalformation,
    MessageId, Primitive, ProcessNo, Property,
};

/// A log from groups, casts `(message, caster, destinations)` at times 0, 1, 2, … in order, and
/// delivery sequences; every process is correct unless crashed later.
fn log(
    groups: &[(GroupId, &[ProcessNo])],
    casts: &[(MessageId, ProcessNo, &[GroupId])],
    deliveries: &[(ProcessNo, &[MessageId])],
) -> DeliveryLog {
    let mut l = DeliveryLog::new();
    for (g, members) in groups {
        l.add_group(*g, members.iter().copied());
    }
    for (i, (m, caster, dst)) in casts.iter().enumerate() {
        l.process_mut(*caster);
        l.add_cast(Cast::new(*m, *caster, dst.iter().copied()).at(i as u64));
    }
    for (p, seq) in deliveries {
        let entry = l.process_mut(*p);
        entry.delivered.extend_from_slice(seq);
    }
    l
}

/// The report's violations of one property, as text.
fn found(l: &DeliveryLog, property: Property) -> Vec<String> {
    let report = check(l, &[property]);
    assert!(!report.is_malformed(), "{report}");
    report.violations.iter().map(|v| v.to_string()).collect()
}

fn holds(l: &DeliveryLog, property: Property) {
    let report = check(l, &[property]);
    assert!(report.ok(), "{property} should hold: {report}");
    assert!(report.holds(property));
}

/// One group {p0, p1, p2}; p0 casts m1 and m2 to it.
fn one_group(deliveries: &[(ProcessNo, &[MessageId])]) -> DeliveryLog {
    log(
        &[(0, &[0, 1, 2])],
        &[(1, 0, &[0]), (2, 0, &[0])],
        deliveries,
    )
}

#[test]
fn integrity_holds_for_single_deliveries_to_destinations() {
    holds(
        &one_group(&[(0, &[1, 2]), (1, &[2, 1]), (2, &[])]),
        Property::Integrity,
    );
}

#[test]
fn integrity_catches_a_repeated_delivery() {
    let l = one_group(&[(0, &[1, 2, 1]), (1, &[1, 2]), (2, &[1, 2])]);
    assert_eq!(
        found(&l, Property::Integrity),
        ["uniform integrity: p0 delivered m1 twice (at indices 0 and 2 of its sequence)"]
    );
}

#[test]
fn integrity_catches_a_delivery_of_a_message_never_cast() {
    let l = one_group(&[(0, &[1, 2]), (1, &[1, 7, 2]), (2, &[1, 2])]);
    assert_eq!(
        found(&l, Property::Integrity),
        ["uniform integrity: p1 delivered m7 (at index 1 of its sequence), which was never cast"]
    );
}

#[test]
fn integrity_catches_a_delivery_outside_the_destination_groups() {
    let l = log(
        &[(0, &[0, 1]), (1, &[2, 3]), (2, &[4])],
        &[(1, 0, &[0, 2])],
        &[(0, &[1]), (1, &[1]), (4, &[1]), (3, &[1])],
    );
    assert_eq!(
        found(&l, Property::Integrity),
        ["uniform integrity: p3 delivered m1, but is in none of its destination groups (g0, g2)"]
    );
}

#[test]
fn validity_holds_when_every_correct_destination_delivers() {
    // p2 crashed and delivered nothing: validity asks nothing of it.
    let mut l = one_group(&[(0, &[1, 2]), (1, &[1, 2])]);
    l.crash(2);
    holds(&l, Property::Validity);
    // A crashed caster's messages need not be delivered at all.
    let mut l = one_group(&[]);
    l.crash(0);
    holds(&l, Property::Validity);
}

#[test]
fn validity_catches_a_correct_destination_that_never_delivered() {
    let l = one_group(&[(0, &[1, 2]), (1, &[1, 2]), (2, &[1])]);
    assert_eq!(
        found(&l, Property::Validity),
        ["validity: correct p0 cast m2, but correct p2, one of its destinations, never delivered it"]
    );
}

#[test]
fn agreement_holds_when_nobody_delivers_a_crashed_casters_message() {
    let mut l = one_group(&[(0, &[]), (1, &[]), (2, &[])]);
    l.crash(0);
    holds(&l, Property::Agreement);
}

#[test]
fn agreement_catches_a_delivery_by_a_crashed_process_that_correct_ones_miss() {
    // The caster crashed (validity is silent) and so did p1, after delivering m1: uniform
    // agreement still requires correct p2 to deliver m1.
    let mut l = one_group(&[(0, &[]), (1, &[1]), (2, &[])]);
    l.crash(0);
    l.crash(1);
    assert!(check(&l, &[Property::Validity]).ok());
    assert_eq!(
        found(&l, Property::Agreement),
        ["uniform agreement: p1 delivered m1, but correct p2, one of its destinations, never did"]
    );
}

#[test]
fn prefix_order_holds_for_prefixes_and_for_messages_with_no_common_destination() {
    // p2 crashed after a prefix of what the others delivered.
    let mut l = one_group(&[(0, &[1, 2]), (1, &[1, 2]), (2, &[1])]);
    l.crash(2);
    holds(&l, Property::PrefixOrder);
    // m1 to g0 and m2 to g1 share no destination: any order.
    let l = log(
        &[(0, &[0]), (1, &[1]), (2, &[0, 1])],
        &[(1, 0, &[0]), (2, 1, &[1]), (3, 0, &[0, 1])],
        &[(0, &[1, 3]), (1, &[3, 2]), (2, &[2, 1, 3])],
    );
    holds(&l, Property::PrefixOrder);
}

#[test]
fn prefix_order_catches_a_hole() {
    // p1 skips m1, which p0 delivered before m2: no order explains both.
    let mut l = one_group(&[(0, &[1, 2]), (1, &[2]), (2, &[])]);
    l.crash(1);
    l.crash(2);
    assert_eq!(
        found(&l, Property::PrefixOrder),
        ["uniform prefix order: p0 and p1 are destinations of both m1 and m2; p0 delivered m1 before m2, p1 delivered m2 but never m1"]
    );
    // Pairwise order does not see holes.
    holds(&l, Property::PairwiseOrder);
}

#[test]
fn prefix_order_catches_opposite_orders() {
    let l = one_group(&[(0, &[1, 2]), (1, &[1, 2]), (2, &[2, 1])]);
    assert_eq!(
        found(&l, Property::PrefixOrder),
        [
            "uniform prefix order: p0 and p2 are destinations of both m1 and m2; p0 delivered m1 before m2, p2 delivered m2 before m1",
            "uniform prefix order: p1 and p2 are destinations of both m1 and m2; p1 delivered m1 before m2, p2 delivered m2 before m1",
        ]
    );
}

/// Three groups of one process; m1 to g0,g1, m2 to g1,g2, m3 to g2,g0, each pair of processes
/// sharing exactly one message, delivered around a cycle.
fn three_way_cycle() -> DeliveryLog {
    log(
        &[(0, &[0]), (1, &[1]), (2, &[2])],
        &[(1, 0, &[0, 1]), (2, 1, &[1, 2]), (3, 2, &[2, 0])],
        &[(0, &[3, 1]), (1, &[1, 2]), (2, &[2, 3])],
    )
}

#[test]
fn acyclic_order_holds_when_deliveries_agree() {
    let l = log(
        &[(0, &[0]), (1, &[1]), (2, &[2])],
        &[(1, 0, &[0, 1]), (2, 1, &[1, 2]), (3, 2, &[2, 0])],
        &[(0, &[1, 3]), (1, &[1, 2]), (2, &[2, 3])],
    );
    holds(&l, Property::AcyclicOrder);
}

#[test]
fn acyclic_order_catches_the_cycle_that_prefix_and_pairwise_order_allow() {
    let l = three_way_cycle();
    holds(&l, Property::PrefixOrder);
    holds(&l, Property::PairwiseOrder);
    assert_eq!(
        found(&l, Property::AcyclicOrder),
        ["uniform acyclic order: cycle m1 -p1-> m2 -p2-> m3 -p0-> m1 (a -p-> b: p delivered a before b)"]
    );
    let report = check_primitive(&l, Primitive::GenuineAtomicMulticast);
    assert_eq!(report.cycle().unwrap().messages(), [1, 2, 3]);
    assert_eq!(report.count(Property::AcyclicOrder), 1);
}

#[test]
fn acyclic_order_reports_a_shortest_cycle_of_the_relation_not_of_consecutive_deliveries() {
    // Consecutive deliveries only close m1 → m5 → m6 → m2 → m1 (four edges), but p0 delivered
    // m1 before m2 too: the shortest cycle of < has two edges.
    let l = log(
        &[(0, &[0, 1])],
        &[(1, 0, &[0]), (2, 0, &[0]), (5, 0, &[0]), (6, 0, &[0])],
        &[(0, &[1, 5, 6, 2]), (1, &[2, 1, 5, 6])],
    );
    assert_eq!(
        check(&l, &[Property::AcyclicOrder])
            .cycle()
            .unwrap()
            .to_string(),
        "m1 -p0-> m2 -p1-> m1"
    );
}

#[test]
fn pairwise_order_holds_with_holes() {
    let l = one_group(&[(0, &[1, 2]), (1, &[2]), (2, &[1])]);
    holds(&l, Property::PairwiseOrder);
}

#[test]
fn pairwise_order_catches_two_processes_delivering_in_opposite_orders() {
    let l = log(
        &[(0, &[0, 1]), (1, &[2])],
        &[(1, 0, &[0, 1]), (2, 0, &[0, 1]), (3, 2, &[0])],
        // p1 misses m3 (a hole pairwise order allows); p2 inverts m1 and m2.
        &[(0, &[1, 3, 2]), (1, &[1, 2]), (2, &[2, 1])],
    );
    assert_eq!(
        found(&l, Property::PairwiseOrder),
        [
            "uniform pairwise order: p0 delivered m1 before m2, p2 delivered m2 before m1",
            "uniform pairwise order: p1 delivered m1 before m2, p2 delivered m2 before m1",
        ]
    );
}

/// Two groups of two, g0 = {p0, p1} and g1 = {p2, p3}; m1 and m2 to both, m3 to g0 only.
fn two_groups(deliveries: &[(ProcessNo, &[MessageId])]) -> DeliveryLog {
    log(
        &[(0, &[0, 1]), (1, &[2, 3])],
        &[(1, 0, &[0, 1]), (2, 2, &[0, 1]), (3, 0, &[0])],
        deliveries,
    )
}

#[test]
fn group_order_holds_when_each_group_agrees_within_itself() {
    // g0 delivers m1 before m2, g1 the opposite; p1 crashed after a prefix of g0's sequence.
    let mut l = two_groups(&[(0, &[1, 3, 2]), (1, &[1]), (2, &[2, 1]), (3, &[2, 1])]);
    l.crash(1);
    holds(&l, Property::GroupOrder);
    // The disagreement across groups is what prefix, acyclic and pairwise order forbid.
    assert_eq!(
        found(&l, Property::PrefixOrder)[0],
        "uniform prefix order: p0 and p2 are destinations of both m1 and m2; p0 delivered m1 before m2, p2 delivered m2 before m1"
    );
    assert_eq!(found(&l, Property::AcyclicOrder).len(), 1);
    assert_eq!(found(&l, Property::PairwiseOrder).len(), 2);
    assert!(check_primitive(&l, Primitive::PartitionStreams).ok());
    assert!(!check_primitive(&l, Primitive::GenuineAtomicMulticast).ok());
}

#[test]
fn group_order_catches_two_members_of_one_group_delivering_in_opposite_orders() {
    // In g0, p1 inverts m3 and m2; g1 agrees within itself.
    let l = two_groups(&[(0, &[1, 3, 2]), (1, &[1, 2, 3]), (2, &[2, 1]), (3, &[2, 1])]);
    assert_eq!(
        found(&l, Property::GroupOrder),
        ["uniform prefix order within each group: p0 and p1 are members of g0, a destination of both m3 and m2; p0 delivered m3 before m2, p1 delivered m2 before m3"]
    );
    let report = check_primitive(&l, Primitive::PartitionStreams);
    assert_eq!(report.count(Property::GroupOrder), 1);
    let Some(DeliveryViolation::GroupOrder { group, p, q, m, m_prime, .. }) =
        report.of(Property::GroupOrder).next()
    else {
        panic!("{report}")
    };
    assert_eq!((*group, *p, *q, *m, *m_prime), (0, 0, 1, 3, 2));
}

#[test]
fn group_order_catches_a_hole() {
    // p1 skips m1, which p0 delivered before m3.
    let mut l = two_groups(&[(0, &[1, 3]), (1, &[3]), (2, &[1]), (3, &[1])]);
    l.crash(1);
    assert_eq!(
        found(&l, Property::GroupOrder),
        ["uniform prefix order within each group: p0 and p1 are members of g0, a destination of both m1 and m3; p0 delivered m1 before m3, p1 delivered m3 but never m1"]
    );
}

#[test]
fn group_order_compares_only_the_messages_addressed_to_the_group() {
    // p0 is in g0 and g1, p1 in g0 only: m2 (to g1) is not g0's, so p0 may deliver it anywhere.
    let l = log(
        &[(0, &[0, 1]), (1, &[0])],
        &[(1, 0, &[0]), (2, 0, &[1]), (3, 0, &[0])],
        &[(0, &[1, 2, 3]), (1, &[1, 3])],
    );
    holds(&l, Property::GroupOrder);
}

#[test]
fn fifo_order_holds_in_cast_order_and_between_casters() {
    // p0 casts m1 then m2; p1 casts m3: m3 may go anywhere.
    let l = log(
        &[(0, &[0, 1, 2])],
        &[(1, 0, &[0]), (3, 1, &[0]), (2, 0, &[0])],
        &[(0, &[3, 1, 2]), (1, &[1, 3, 2]), (2, &[1, 2, 3])],
    );
    holds(&l, Property::FifoOrder);
}

#[test]
fn fifo_order_catches_a_later_cast_delivered_first_or_alone() {
    let l = one_group(&[(0, &[1, 2]), (1, &[2, 1]), (2, &[2])]);
    assert_eq!(
        found(&l, Property::FifoOrder),
        [
            "uniform FIFO order: p0 cast m1 before m2, but p1, a destination of both, delivered m2 before m1",
            "uniform FIFO order: p0 cast m1 before m2, but p2, a destination of both, delivered m2 and never m1",
        ]
    );
}

#[test]
fn fifo_order_follows_the_cast_times_then_the_log_order() {
    // m2 is logged first but cast later; m3 and m4 are cast at the same time, m3 logged first.
    let mut l = DeliveryLog::new();
    l.add_group(0, [0, 1]);
    l.add_cast(Cast::new(2, 0, [0]).at(20));
    l.add_cast(Cast::new(1, 0, [0]).at(10));
    l.add_cast(Cast::new(3, 0, [0]).at(30));
    l.add_cast(Cast::new(4, 0, [0]).at(30));
    for m in [1, 2, 3, 4] {
        l.deliver(0, m);
    }
    for m in [1, 2, 4, 3] {
        l.deliver(1, m);
    }
    assert_eq!(
        found(&l, Property::FifoOrder),
        ["uniform FIFO order: p0 cast m3 before m4, but p1, a destination of both, delivered m4 before m3"]
    );
}

#[test]
fn fifo_order_ignores_casts_not_addressed_to_the_process() {
    // p0 casts m1 to g1 only, then m2 to both: p1 (g0) owes nothing to m1.
    let l = log(
        &[(0, &[0, 1]), (1, &[2])],
        &[(1, 0, &[1]), (2, 0, &[0, 1])],
        &[(0, &[2]), (1, &[2]), (2, &[1, 2])],
    );
    holds(&l, Property::FifoOrder);
}

#[test]
fn broadcast_holds_when_every_cast_goes_to_every_group_and_catches_one_that_does_not() {
    let l = log(
        &[(0, &[0]), (1, &[1])],
        &[(1, 0, &[0, 1]), (2, 1, &[1, 0])],
        &[],
    );
    holds(&l, Property::Broadcast);
    let l = log(
        &[(0, &[0]), (1, &[1])],
        &[(1, 0, &[0, 1]), (2, 1, &[1])],
        &[],
    );
    assert_eq!(
        found(&l, Property::Broadcast),
        ["broadcast to all groups: m2 is not addressed to g0"]
    );
}

/// g0 = {p0, p1}, g1 = {p2, p3}, p9 outside every group; m1 from p0 to g0, m2 from client p8
/// to g1.
fn genuineness_log() -> DeliveryLog {
    let mut l = log(
        &[(0, &[0, 1]), (1, &[2, 3])],
        &[(1, 0, &[0])],
        &[(0, &[1]), (1, &[1])],
    );
    l.add_cast(Cast::new(2, 8, [1]).caster_correct(true));
    l.process_mut(2).delivered.push(2);
    l.process_mut(3).delivered.push(2);
    l.process_mut(9);
    l
}

#[test]
fn genuineness_holds_when_only_casters_and_destinations_take_steps() {
    let mut l = genuineness_log();
    l.add_steps(0, Some(1), 3); // the caster
    l.add_steps(1, Some(1), 2); // a destination
    l.add_steps(8, Some(2), 1); // a caster outside every group
    l.add_steps(2, None, 5); // background, by a destination of some cast
    holds(&l, Property::Genuineness);
    let report = check_primitive(&l, Primitive::GenuineAtomicMulticast);
    assert!(report.ok(), "{report}");
    assert_eq!((report.counts.steps, report.counts.outside_steps), (11, 0));
}

#[test]
fn genuineness_counts_outside_steps_and_names_each_offender() {
    let mut l = genuineness_log();
    l.add_steps(0, Some(1), 3);
    l.add_steps(2, Some(1), 2); // in g1, but m1 is for g0 only
    l.add_steps(9, None, 4); // involved in no cast at all
    l.add_steps(2, Some(1), 1);
    l.add_steps(1, Some(77), 1); // for a message never cast
    let report = check(&l, &[Property::Genuineness]);
    assert_eq!(report.counts.outside_steps, 2 + 4 + 1 + 1);
    let text: Vec<String> = report.violations.iter().map(|v| v.to_string()).collect();
    assert_eq!(
        text,
        [
            "genuineness: p2 took 3 steps for m1, but is neither its caster p0 nor in its destination groups (g0)",
            "genuineness: p9 took 4 steps for no message, and is neither the caster nor a destination of any cast",
            "genuineness: p1 took 1 step for m77, which was never cast",
        ]
    );
    // The count is there even when genuineness is not checked (atomic multicast need not be
    // genuine).
    let report = check_primitive(&l, Primitive::AtomicMulticast);
    assert!(report.ok(), "{report}");
    assert_eq!(report.counts.outside_steps, 8);
}

#[test]
fn malformed_logs_are_reported_and_not_checked() {
    let mut l = one_group(&[(0, &[1, 1])]);
    l.add_group(0, [5]);
    l.add_cast(Cast::new(1, 0, [0]));
    l.add_cast(Cast::new(3, 0, [4]));
    l.add_cast(Cast::new(4, 0, []));
    l.add_cast(Cast::new(5, 42, [0]));
    l.add_cast(Cast::new(6, 1, [0]).caster_correct(false));
    l.processes.push(l.processes[0].clone());
    l.groups[0].members.push(11);
    let report = check_primitive(&l, Primitive::AtomicMulticast);
    assert!(report.is_malformed() && !report.ok());
    let got: Vec<LogMalformation> = report
        .violations
        .iter()
        .map(|v| match v {
            DeliveryViolation::Malformed(m) => m.clone(),
            other => panic!("only malformations expected, got {other}"),
        })
        .collect();
    let expected = [
        LogMalformation::DuplicateGroup { group: 0 },
        LogMalformation::DuplicateProcess { process: 0 },
        LogMalformation::MemberWithoutLog {
            group: 0,
            process: 11,
        },
        LogMalformation::DuplicateCast { message: 1 },
        LogMalformation::UnknownDestination {
            message: 3,
            group: 4,
        },
        LogMalformation::NoDestination { message: 4 },
        LogMalformation::CasterCorrectnessUnknown {
            message: 5,
            caster: 42,
        },
        LogMalformation::CasterCorrectnessConflict {
            message: 6,
            caster: 1,
            cast_says: false,
        },
    ];
    assert_eq!(got, expected);
    let text = report.to_string();
    assert!(
        text.starts_with("atomic multicast: malformed delivery log, not checked — 8 problem(s)\n  malformed: group g0 is listed more than once"),
        "{text}"
    );
    for line in [
        "malformed: p11, a member of g0, has no process log (write an empty one if it delivered nothing)",
        "malformed: m3 is cast to g4, which is not in the log",
        "malformed: m4 is cast to no group",
        "malformed: m5's caster p42 has no process log and the cast does not say whether it was correct",
        "malformed: m6's cast says its caster p1 was not correct, but p1's process log says it was correct",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
}

#[test]
fn reports_print_a_verdict_then_the_violations_then_the_counts() {
    let mut l = one_group(&[(0, &[1, 2]), (1, &[1, 2]), (2, &[1, 2])]);
    l.add_steps(0, Some(1), 6);
    let ok = check_primitive(&l, Primitive::AtomicBroadcast);
    assert_eq!(
        ok.to_string(),
        "atomic broadcast: ok — 2 messages cast, 2 delivered (6 deliveries) by 3 processes (3 correct) in 1 groups; 0 of 6 steps outside the caster and destinations"
    );
    let l = one_group(&[(0, &[1, 2]), (1, &[2, 1]), (2, &[1])]);
    let bad = check(&l, &[Property::Validity, Property::AcyclicOrder]);
    assert_eq!(
        bad.to_string(),
        "validity + uniform acyclic order: VIOLATED — validity: correct p0 cast m2, but correct p2, one of its destinations, never delivered it\n  also: uniform acyclic order: cycle m1 -p0-> m2 -p1-> m1 (a -p-> b: p delivered a before b)\n  (2 messages cast, 2 delivered (5 deliveries) by 3 processes (3 correct) in 1 groups; 0 of 0 steps outside the caster and destinations)"
    );
    assert!(!bad.holds(Property::Validity) && !bad.holds(Property::AcyclicOrder));
    assert!(
        !bad.holds(Property::Integrity),
        "not checked, so not known to hold"
    );
}

#[test]
fn primitives_check_what_they_promise() {
    // Opposite orders: reliable multicast allows them, atomic and pairwise ones do not.
    let l = one_group(&[(0, &[1, 2]), (1, &[2, 1]), (2, &[1, 2])]);
    let verdicts: Vec<(Primitive, bool)> = Primitive::ALL
        .iter()
        .map(|&p| (p, check_primitive(&l, p).ok()))
        .collect();
    assert_eq!(
        verdicts,
        [
            (Primitive::ReliableMulticast, true),
            (Primitive::AtomicBroadcast, false),
            (Primitive::AtomicMulticast, false),
            (Primitive::GenuineAtomicMulticast, false),
            (Primitive::PairwiseMulticast, false),
            (Primitive::PartitionStreams, false),
        ]
    );
    // Properties are checked once each, in their canonical order.
    let r = check(
        &l,
        &[
            Property::Genuineness,
            Property::Integrity,
            Property::Genuineness,
        ],
    );
    assert_eq!(r.properties, [Property::Integrity, Property::Genuineness]);
}

#[test]
fn property_names_parse_and_unknown_ones_list_the_known() {
    for p in Property::ALL {
        assert_eq!(p.name().parse::<Property>(), Ok(p));
    }
    let err = "total".parse::<Property>().unwrap_err().to_string();
    assert!(
        err.contains("`total`") && err.contains("prefix-order, group-order, acyclic-order"),
        "{err}"
    );
}

#[test]
fn the_format_example_parses_and_passes_genuine_atomic_multicast() {
    let doc = include_str!("../FORMAT.md");
    let section = &doc[doc
        .find("# Delivery logs")
        .expect("FORMAT.md documents delivery logs")..];
    let start = section.find("```json\n").expect("with a JSON example") + 8;
    let end = start + section[start..].find("```").unwrap();
    let l = DeliveryLog::from_json_str(&section[start..end]).unwrap();
    assert_eq!(l.casts[2].correct, Some(true));
    assert!(!l.processes[2].correct && l.processes[0].correct);
    assert_eq!(l.steps[3].message, None);
    let report = check_primitive(&l, Primitive::GenuineAtomicMulticast);
    assert!(report.ok(), "{report}");
    assert_eq!(report.counts.steps, 17);
    // And survives a round trip.
    assert_eq!(DeliveryLog::from_json_str(&l.to_json_string()).unwrap(), l);
}

#[test]
fn json_errors_name_the_line_and_column_and_unknown_fields() {
    let text = "{\"groups\": [],\n \"casts\": [{\"message\": 1, \"caster\": 0, \"destinations\": [], \"corect\": true}],\n \"processes\": []}";
    let err = DeliveryLog::from_json_str(text).unwrap_err().to_string();
    assert!(err.starts_with("<input>:2:"), "{err}");
    assert!(err.contains("unknown field `corect`"), "{err}");
    let dir = std::env::temp_dir().join(format!("ensemble-delivery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log.json");
    let l = three_way_cycle();
    l.save(&path).unwrap();
    assert_eq!(DeliveryLog::load(&path).unwrap(), l);
    std::fs::remove_dir_all(&dir).unwrap();
}
