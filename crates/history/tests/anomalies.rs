//! The classic anomalies, each as a tiny history, with the verdict every criterion must give.

use ensemble_history::{
    check, check_all, Criterion, EdgeKind, History, Malformation, Transaction as T, Violation,
};

/// Expected verdicts in the order SER, US, SI, PSI, NMSI, RC (true = accepted).
type Verdicts = [bool; 6];

fn history(txns: Vec<T>, installs: &[(&str, &str, &[u64])]) -> History {
    let mut h = History::new();
    for t in txns {
        h.add_transaction(t);
    }
    for (replica, key, order) in installs {
        for &t in *order {
            h.add_install(replica, key, t);
        }
    }
    h
}

/// T1 writes x; T2 reads it and writes y; T3 reads both.
fn serializable() -> History {
    history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(2).read("x", Some(1)).write("y", "2"),
            T::committed(3).read("y", Some(2)).read("x", Some(1)),
        ],
        &[],
    )
}

/// Both read x and y initially; T1 writes x, T2 writes y.
fn write_skew() -> History {
    history(
        vec![
            T::committed(1)
                .read("x", None)
                .read("y", None)
                .write("x", "1"),
            T::committed(2)
                .read("x", None)
                .read("y", None)
                .write("y", "2"),
        ],
        &[],
    )
}

/// Both read the initial x and write it; T2's version is installed after T1's.
fn lost_update() -> History {
    history(
        vec![
            T::committed(1).read("x", None).write("x", "1"),
            T::committed(2).read("x", None).write("x", "2"),
        ],
        &[("r0", "x", &[1, 2]), ("r1", "x", &[1, 2])],
    )
}

/// Two independent writes seen in opposite orders by two read-only transactions.
fn long_fork() -> History {
    history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(2).write("y", "2"),
            T::committed(3).read("x", Some(1)).read("y", None),
            T::committed(4).read("x", None).read("y", Some(2)),
        ],
        &[],
    )
}

/// The same fork, observed by update transactions (so US rejects it too).
fn long_fork_of_updates() -> History {
    history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(2).write("y", "2"),
            T::committed(3)
                .read("x", Some(1))
                .read("y", None)
                .write("z", "3"),
            T::committed(4)
                .read("x", None)
                .read("y", Some(2))
                .write("u", "4"),
        ],
        &[],
    )
}

/// T1 writes x and y; T2 sees its x but the initial y.
fn fractured_read() -> History {
    history(
        vec![
            T::committed(1).write("x", "1").write("y", "1"),
            T::committed(2)
                .read("x", Some(1))
                .read("y", None)
                .write("z", "2"),
        ],
        &[],
    )
}

/// The same, by a read-only transaction: a read-only anomaly US rejects.
fn fractured_query() -> History {
    history(
        vec![
            T::committed(1).write("x", "1").write("y", "1"),
            T::committed(2).read("x", Some(1)).read("y", None),
        ],
        &[],
    )
}

/// Fekete, O'Neil & O'Neil's read-only anomaly under SI (SIGMOD Record 2004): T2 reads x, y
/// and writes x; T1 writes y; read-only T3 sees T1 but not T2. Allowed by SI (the cycle
/// T2 -rw-> T1 -wr-> T3 -rw-> T2 has two adjacent rw edges), not by US.
fn read_only_anomaly() -> History {
    history(
        vec![
            T::committed(1).read("y", None).write("y", "20"),
            T::committed(2)
                .read("x", None)
                .read("y", None)
                .write("x", "-11"),
            T::committed(3).read("x", None).read("y", Some(1)),
        ],
        &[],
    )
}

fn aborted_read() -> History {
    history(
        vec![
            T::aborted(1).write("x", "1"),
            T::committed(2).read("x", Some(1)),
        ],
        &[],
    )
}

fn intermediate_read() -> History {
    history(
        vec![
            T::committed(1).write("x", "1a").write("x", "1b"),
            T::committed(2).read_value("x", Some(1), "1a"),
        ],
        &[],
    )
}

/// A session reads T1's x, then the initial x: its snapshots go back in time. Each snapshot
/// is consistent, so NMSI (and US) accept; SI and PSI keep sessions monotonic.
fn non_monotonic_session() -> History {
    history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(2).in_session(5).read("x", Some(1)),
            T::committed(3).in_session(5).read("x", None),
        ],
        &[],
    )
}

/// T1 and T2 both write x and y, installed in opposite orders.
fn write_cycle() -> History {
    history(
        vec![
            T::committed(1).write("x", "1").write("y", "1"),
            T::committed(2).write("x", "2").write("y", "2"),
        ],
        &[("r0", "x", &[1, 2]), ("r0", "y", &[2, 1])],
    )
}

/// Each reads the other's write: circular information flow, no ww edge.
fn circular_reads() -> History {
    history(
        vec![
            T::committed(1).read("y", Some(2)).write("x", "1"),
            T::committed(2).read("x", Some(1)).write("y", "2"),
        ],
        &[],
    )
}

fn table() -> Vec<(&'static str, History, Verdicts)> {
    //                                           SER    US     SI     PSI    NMSI   RC
    vec![
        (
            "serializable",
            serializable(),
            [true, true, true, true, true, true],
        ),
        (
            "write skew",
            write_skew(),
            [false, false, true, true, true, true],
        ),
        (
            "lost update",
            lost_update(),
            [false, false, false, false, false, true],
        ),
        (
            "long fork",
            long_fork(),
            [false, true, false, true, true, true],
        ),
        (
            "long fork of updates",
            long_fork_of_updates(),
            [false, false, false, true, true, true],
        ),
        (
            "fractured read",
            fractured_read(),
            [false, false, false, false, false, true],
        ),
        (
            "fractured read-only",
            fractured_query(),
            [false, false, false, false, false, true],
        ),
        (
            "read-only anomaly",
            read_only_anomaly(),
            [false, false, true, true, true, true],
        ),
        ("aborted read (G1a)", aborted_read(), [false; 6]),
        ("intermediate read (G1b)", intermediate_read(), [false; 6]),
        (
            "non-monotonic session",
            non_monotonic_session(),
            [false, true, false, false, true, true],
        ),
        ("write cycle (G0)", write_cycle(), [false; 6]),
        ("circular reads (G1c)", circular_reads(), [false; 6]),
    ]
}

#[test]
fn every_anomaly_gets_the_expected_verdict_under_every_criterion() {
    let mut failures = Vec::new();
    for (name, h, expected) in table() {
        let reports = check_all(&h);
        for (report, &want) in reports.iter().zip(&expected) {
            if report.ok() != want {
                failures.push(format!(
                    "{name}: expected {} {}, got\n{report}",
                    report.criterion, want
                ));
            }
            // check() and check_all() agree.
            assert_eq!(&check(&h, report.criterion), report);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn counterexamples_name_transactions_keys_and_edge_kinds() {
    let ser = check(&write_skew(), Criterion::Ser);
    assert_eq!(
        ser.cycle().unwrap().to_string(),
        "T1 -rw(y)-> T2 -rw(x)-> T1"
    );
    assert_eq!(
        ser.to_string().lines().next().unwrap(),
        "SER: NOT serializable — cycle T1 -rw(y)-> T2 -rw(x)-> T1 (G2)"
    );

    let si = check(&lost_update(), Criterion::Si);
    let cycle = si.cycle().unwrap();
    assert_eq!(cycle.anomaly(), "G-single");
    let mut kinds: Vec<EdgeKind> = cycle.edges.iter().map(|e| e.kind).collect();
    kinds.sort();
    assert_eq!(kinds, vec![EdgeKind::Ww, EdgeKind::Rw]);
    assert!(cycle.edges.iter().all(|e| e.key.as_deref() == Some("x")));

    let si = check(&long_fork(), Criterion::Si);
    let cycle = si.cycle().unwrap();
    assert_eq!(cycle.len(), 4);
    assert_eq!(cycle.anomaly(), "G-nonadjacent");
    let mut txns = cycle.transactions();
    txns.sort();
    assert_eq!(txns, vec![1, 2, 3, 4]);

    let psi = check(&non_monotonic_session(), Criterion::Psi);
    let text = psi.cycle().unwrap().to_string();
    assert!(
        text.contains("-so->") && text.contains("-rw(x)->"),
        "{text}"
    );

    let us = check(&read_only_anomaly(), Criterion::Us);
    match &us.violations[0] {
        Violation::Cycle {
            cycle,
            query,
            shortest,
        } => {
            assert_eq!(*query, Some(3));
            assert!(*shortest);
            assert_eq!(cycle.to_string(), "T3 -rw(x)-> T2 -rw(y)-> T1 -wr(y)-> T3");
        }
        other => panic!("expected a cycle, got {other}"),
    }

    let rc = check(&write_cycle(), Criterion::Rc);
    assert_eq!(rc.cycle().unwrap().anomaly(), "G0");
    let rc = check(&circular_reads(), Criterion::Rc);
    assert_eq!(rc.cycle().unwrap().anomaly(), "G1c");
}

#[test]
fn read_anomalies_are_named() {
    let r = check(&aborted_read(), Criterion::Rc);
    assert_eq!(
        r.violations,
        vec![Violation::AbortedRead {
            reader: 2,
            key: "x".into(),
            writer: 1
        }]
    );
    assert!(
        r.to_string()
            .contains("aborted read (G1a): T2 read `x` from aborted T1"),
        "{r}"
    );
    let r = check(&intermediate_read(), Criterion::Rc);
    assert_eq!(
        r.violations,
        vec![Violation::IntermediateRead {
            reader: 2,
            key: "x".into(),
            writer: 1,
            value: "1a".into()
        }]
    );
    // Reading the final write is fine.
    let h = history(
        vec![
            T::committed(1).write("x", "1a").write("x", "1b"),
            T::committed(2).read_value("x", Some(1), "1b"),
        ],
        &[],
    );
    assert!(check(&h, Criterion::Ser).ok());
}

#[test]
fn serializable_report_prints_the_graph_size() {
    let r = check(&serializable(), Criterion::Ser);
    assert_eq!(
        r.to_string(),
        "SER: serializable — 3 committed transactions, 0 ww / 3 wr / 0 rw edges"
    );
    let r = check(&lost_update(), Criterion::Rc);
    assert_eq!(r.edges.ww, 1);
    assert_eq!(
        r.edges.rw, 1,
        "T2 read x0, overwritten first by T1; T1's own rw would be a self-loop"
    );
}

#[test]
fn replicas_must_agree() {
    let mut h = serializable();
    for (replica, order) in [("r0", [1u64]), ("r1", [1])] {
        h.add_install(replica, "x", order[0]);
    }
    h.set_final_value("r0", "x", "1");
    h.set_final_value("r1", "x", "1");
    assert!(check_all(&h).iter().all(|r| r.ok()));

    let mut h = lost_update();
    // Same history, lost update aside, with r2 installing the two versions the other way round.
    h.add_install("r2", "x", 2);
    h.add_install("r2", "x", 1);
    let r = check(&h, Criterion::Rc);
    assert_eq!(
        r.violations,
        vec![Violation::ReplicaOrder {
            key: "x".into(),
            replica_a: "r0".into(),
            replica_b: "r2".into(),
            position: 0,
            a: Some(1),
            b: Some(2)
        }]
    );
    assert!(
        r.to_string()
            .contains("replicas disagree on `x`: at install 0, r0 has T1 and r2 has T2"),
        "{r}"
    );

    // A replica that missed the last version, and one that ends with the wrong value.
    let mut h = history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(2).read("x", Some(1)).write("x", "2"),
        ],
        &[("r0", "x", &[1, 2]), ("r1", "x", &[1])],
    );
    h.set_final_value("r0", "x", "2");
    h.set_final_value("r1", "x", "2");
    let r = check(&h, Criterion::Ser);
    assert!(r.violations.contains(&Violation::ReplicaOrder {
        key: "x".into(),
        replica_a: "r0".into(),
        replica_b: "r1".into(),
        position: 1,
        a: Some(2),
        b: None
    }));
    assert!(r.violations.contains(&Violation::ReplicaFinalValue {
        key: "x".into(),
        replica: "r1".into(),
        value: "2".into(),
        writer: 1,
        expected: "1".into()
    }));
}

#[test]
fn aborted_installs_are_violations() {
    let h = history(
        vec![
            T::committed(1).write("x", "1"),
            T::aborted(2).write("x", "2"),
        ],
        &[("r0", "x", &[1, 2])],
    );
    let r = check(&h, Criterion::Rc);
    assert_eq!(
        r.violations,
        vec![Violation::AbortedInstall {
            replica: "r0".into(),
            key: "x".into(),
            txn: 2
        }]
    );
}

#[test]
fn commit_numbers_order_versions_when_no_replica_reports() {
    // Appearance order is T1, T2, but T2 committed first: T3 read the last version, T1's.
    let h = history(
        vec![
            T::committed(1).commit_seq(20).write("x", "1"),
            T::committed(2).commit_seq(10).write("x", "2"),
            T::committed(3).read("x", Some(1)),
        ],
        &[],
    );
    let r = check(&h, Criterion::Ser);
    assert!(r.ok(), "{r}");
    assert_eq!((r.edges.ww, r.edges.wr, r.edges.rw), (1, 1, 0));
    // Reading T2's version (the first) makes T3 -rw-> T1 and is still serializable (T2 T3 T1).
    let h = history(
        vec![
            T::committed(1).commit_seq(20).write("x", "1"),
            T::committed(2).commit_seq(10).write("x", "2"),
            T::committed(3).read("x", Some(2)).write("y", "3"),
            T::committed(4).read("y", Some(3)).read("x", Some(2)),
        ],
        &[],
    );
    assert!(check(&h, Criterion::Ser).ok());
}

fn malformed(h: &History) -> Vec<Malformation> {
    let r = check(h, Criterion::Ser);
    assert!(!r.ok() && r.is_malformed(), "{r}");
    assert!(
        r.to_string()
            .starts_with("SER: malformed history, not checked"),
        "{r}"
    );
    r.violations
        .into_iter()
        .map(|v| match v {
            Violation::Malformed(m) => m,
            other => panic!("only malformations expected, got {other}"),
        })
        .collect()
}

#[test]
fn malformed_histories_are_reported_with_names() {
    let h = history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(1).read("x", None),
        ],
        &[],
    );
    assert_eq!(
        malformed(&h),
        vec![Malformation::DuplicateTransaction { id: 1 }]
    );

    let h = history(vec![T::committed(2).read("x", Some(9))], &[]);
    let m = malformed(&h);
    assert_eq!(
        m,
        vec![Malformation::UnknownWriter {
            reader: 2,
            key: "x".into(),
            writer: 9
        }]
    );
    assert_eq!(
        m[0].to_string(),
        "T2 read `x` from T9, which is not in the history"
    );

    let h = history(
        vec![
            T::committed(1).write("y", "1"),
            T::committed(2).read("x", Some(1)),
        ],
        &[],
    );
    let m = malformed(&h);
    assert_eq!(
        m[0].to_string(),
        "T2 read `x` from T1, which did not write `x`"
    );

    let h = history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(2).read_value("x", Some(1), "7"),
        ],
        &[],
    );
    assert_eq!(
        malformed(&h)[0].to_string(),
        "T2 read `x` = \"7\" from T1, which never wrote that value to `x`"
    );

    let h = history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(2).write("x", "2"),
        ],
        &[],
    );
    let m = malformed(&h);
    assert_eq!(
        m,
        vec![Malformation::NoVersionOrder {
            key: "x".into(),
            writers: vec![1, 2]
        }]
    );
    assert!(m[0]
        .to_string()
        .starts_with("key `x` has 2 committed writers (T1, T2) but no version order"));

    let h = history(
        vec![
            T::committed(1).commit_seq(4).write("x", "1"),
            T::committed(2).commit_seq(4).write("x", "2"),
        ],
        &[],
    );
    assert_eq!(
        malformed(&h),
        vec![Malformation::AmbiguousCommitOrder {
            key: "x".into(),
            first: 1,
            second: 2,
            commit: 4
        }]
    );

    let h = history(
        vec![
            T::committed(1).write("x", "1"),
            T::committed(2).write("x", "2"),
            T::committed(3).write("y", "3"),
        ],
        &[("r0", "x", &[1, 7, 3, 1])],
    );
    let m = malformed(&h);
    assert!(m.contains(&Malformation::UnknownInstalledTransaction {
        replica: "r0".into(),
        key: "x".into(),
        txn: 7
    }));
    assert!(
        m.contains(&Malformation::InstalledTransactionDidNotWriteKey {
            replica: "r0".into(),
            key: "x".into(),
            txn: 3
        })
    );
    assert!(m.contains(&Malformation::DuplicateInstall {
        replica: "r0".into(),
        key: "x".into(),
        txn: 1
    }));
    assert!(m.contains(&Malformation::MissingFromVersionOrder {
        replica: "r0".into(),
        key: "x".into(),
        txn: 2
    }));
    let text: Vec<String> = m.iter().map(|m| m.to_string()).collect();
    assert!(
        text.contains(&"key `x`: committed T2 wrote it, but the version order (the installs of replica r0) does not list it".to_owned()),
        "{text:?}"
    );
}

#[test]
fn reading_ones_own_write_adds_no_edge() {
    let h = history(
        vec![T::committed(1).write("x", "1").read("x", Some(1))],
        &[],
    );
    let r = check(&h, Criterion::Ser);
    assert!(r.ok(), "{r}");
    assert_eq!((r.edges.ww, r.edges.wr, r.edges.rw), (0, 0, 0));
}

#[test]
fn aborted_transactions_take_no_part_in_the_graph() {
    // The aborted T2 read stale data and wrote x; it must neither create edges nor need a
    // version order with T1.
    let h = history(
        vec![
            T::committed(1).write("x", "1"),
            T::aborted(2).read("x", None).write("x", "2"),
            T::committed(3).read("x", Some(1)),
        ],
        &[],
    );
    let r = check(&h, Criterion::Ser);
    assert!(r.ok(), "{r}");
    assert_eq!((r.committed, r.transactions), (2, 3));
    assert_eq!((r.edges.ww, r.edges.wr, r.edges.rw), (0, 1, 0));
}
