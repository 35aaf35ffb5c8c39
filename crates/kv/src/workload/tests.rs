use super::*;
use ensemble_app::InstanceId;
use ensemble_core::Value as V;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn ctx() -> ClientCtx {
    ClientCtx { client_index: 0, home: InstanceId(0), instances: 1 }
}

/// Runs a program against a map of values (absent keys hold `initial`), applying its writes
/// at commit, and returns what it committed with, or its abort reason.
fn run(p: &mut dyn Program, db: &mut std::collections::BTreeMap<Key, Value>, initial: Value) -> (Vec<Step>, Result<Rows, String>) {
    let mut steps = Vec::new();
    let mut buffered: Vec<(Key, Value)> = Vec::new();
    let mut read = None;
    for _ in 0..1000 {
        let s = p.step(read.take());
        steps.push(s.clone());
        match s {
            Step::Read(k) => {
                let v = buffered.iter().rev().find(|(x, _)| *x == k).map(|(_, v)| *v).or(db.get(&k).copied()).unwrap_or(initial);
                read = Some((k, v));
            }
            Step::Write(k, v) => buffered.push((k, v)),
            Step::Commit(rows) => {
                db.extend(buffered);
                return (steps, Ok(rows));
            }
            Step::Abort(why) => return (steps, Err(why)),
        }
    }
    panic!("the program did not end");
}

#[test]
fn tpcb_rows_live_in_their_branch_partition() {
    let s = KeySpace::tpcb(36, 4).unwrap();
    assert_eq!(s.partition(KeySpace::tpcb_key(Table::Branch, 5)), Ok(1));
    assert_eq!(s.partition(KeySpace::tpcb_key(Table::Teller, 59)), Ok(1), "teller 59 is branch 5's");
    assert_eq!(s.partition(KeySpace::tpcb_key(Table::Account, 599)), Ok(1), "account 599 is branch 5's");
    assert_eq!(s.partition(KeySpace::tpcb_key(Table::Account, 3599)), Ok(3));
    let err = s.partition(KeySpace::tpcb_key(Table::Account, 3600)).unwrap_err().to_string();
    assert!(err.contains("outside the key space") && err.contains("3600 accounts"), "{err}");
    assert!(s.partition(7).is_err(), "a key without a table");
    assert_eq!((0..4).map(|p| s.branches_in(p)).sum::<u64>(), 36);
}

#[test]
fn the_tpcb_preset_has_the_papers_sizes() {
    let spec = KvWorkloadSpec::preset(KvKind::Tpcb);
    let s = spec.key_space(4).unwrap();
    assert_eq!(s.describe(), "TPC-B: 3600 branches, 36000 tellers, 360000 accounts over 4 partitions");
    assert_eq!(s.initial_value().wire_len(), 100, "TPC-B's 100-byte records");
    let y = KvWorkloadSpec::preset(KvKind::YcsbA).key_space(4).unwrap();
    assert_eq!(y.describe(), "400000 objects of 1024 bytes over 4 partitions", "10^5 objects of 1 KB per partition");
}

#[test]
fn a_placement_spreads_partitions_over_consecutive_groups() {
    let p = Placement::spread(4, 4, 2).unwrap();
    assert_eq!(p.groups_of(3), &[0, 3]);
    assert_eq!(p.partitions_of_group(0), vec![0, 3]);
    assert!(Placement::spread(4, 4, 5).unwrap_err().to_string().contains("between 1 and the 4 groups"));
    assert!(Placement::spread(4, 4, 0).is_err());
}

#[test]
fn a_placement_that_leaves_keys_without_a_group_is_refused() {
    assert_eq!(Placement::parse("0=0,1; 1=1; 2=2,0", 3).unwrap().groups_of(2), &[0, 2]);
    let errors = [
        ("0=0; 1=", "partition 1 has no group"),
        ("0=0; 2=1", "partition 1 is not placed"),
        ("0=0; 1=7", "group 7 does not exist"),
        ("0=0; 0=1", "partition 0 is placed twice"),
        ("0=0; x=1", "`x` is not a partition number"),
        ("0:0", "is not `partition=group,group`"),
        ("", "places no partition"),
    ];
    for (text, expected) in errors {
        let err = Placement::parse(text, 3).unwrap_err().to_string();
        assert!(err.contains(expected), "{text:?}: {err}");
    }
}

#[test]
fn a_workload_file_overrides_its_preset_and_nonsense_is_named() {
    let spec = KvWorkloadSpec::from_toml("workload = \"tpcb\"\nglobal = 0.25\nscale = 0.01").unwrap();
    assert_eq!((spec.global, spec.scale, spec.read_only), (0.25, 0.01, 0.0));
    let errors = [
        ("workload = \"tpcb\"\nglobal = 1.5", "workload global: 1.5 is not a share"),
        ("workload = \"ycsb-a\"\nread_only = -0.1", "workload read_only"),
        ("workload = \"ycsb-a\"\nreads = 0", "workload reads"),
        ("workload = \"ycsb-b\"\nobject_bytes = 4", "object_bytes"),
        ("workload = \"tpcb\"\nglobl = 0.2", "globl"),
        ("workload = \"tpc-c\"", "is not one of tpcb"),
        ("global = 0.2", "names no workload"),
        ("workload = \"walk\"\nscale = 0", "workload scale"),
    ];
    for (text, expected) in errors {
        let err = KvWorkloadSpec::from_toml(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text:?}: {err}");
    }
}

#[test]
fn tpcb_clients_keep_teller_and_branch_home_and_send_the_global_share_elsewhere() {
    let spec = KvWorkloadSpec { scale: 0.01, ..KvWorkloadSpec::preset(KvKind::Tpcb) };
    let space = spec.key_space(4).unwrap();
    let mut client = spec.client(&space, 2);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (mut global, n) = (0, 4000);
    for _ in 0..n {
        let (txn, params) = client.next(&mut rng, &ctx());
        assert_eq!(txn, "tpcb");
        let key = |i: usize| match params[i] {
            V::Int(k) => k as u64,
            _ => panic!(),
        };
        assert_eq!(space.partition(key(1)), Ok(2), "the teller is the client's");
        assert_eq!(space.partition(key(2)), Ok(2), "the teller's branch");
        assert_eq!((key(1) & 0xffff_ffff) / TELLERS_PER_BRANCH, key(2) & 0xffff_ffff, "the teller belongs to the branch");
        global += usize::from(space.partition(key(0)) != Ok(2));
    }
    let share = global as f64 / n as f64;
    assert!((0.12..0.18).contains(&share), "global share {share}, asked 0.15");
}

#[test]
fn ycsb_clients_draw_distinct_keys_spanning_two_partitions() {
    for kind in [KvKind::YcsbA, KvKind::YcsbB, KvKind::YcsbC] {
        let spec = KvWorkloadSpec { scale: 0.01, ..KvWorkloadSpec::preset(kind) };
        let space = spec.key_space(4).unwrap();
        let mut client = spec.client(&space, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut read_only = 0;
        for _ in 0..1000 {
            let (txn, params) = client.next(&mut rng, &ctx());
            let keys: Vec<u64> = params.iter().skip(usize::from(txn == "ycsb-update")).map(|v| if let V::Int(k) = v { *k as u64 } else { panic!() }).collect();
            let expected = if txn == "ycsb-read" { spec.reads } else { spec.update_reads + spec.updates };
            assert_eq!(keys.len(), expected as usize, "{kind:?} {txn}");
            assert_eq!(space.partition(keys[0]), Ok(1), "the first key is home");
            assert!(keys[1..].iter().all(|k| space.partition(*k) != Ok(1)), "{kind:?}: every transaction is global");
            read_only += usize::from(txn == "ycsb-read");
            assert!(program(&txn, &params, &space).is_ok());
        }
        assert!((850..950).contains(&read_only), "{kind:?}: {read_only} of 1000 read-only, asked 90 %");
    }
}

#[test]
fn zipfian_keys_are_skewed_and_uniform_ones_are_not() {
    let hottest_share = |kind| {
        let spec = KvWorkloadSpec { scale: 0.01, global: 0.0, ..KvWorkloadSpec::preset(kind) };
        let space = spec.key_space(1).unwrap();
        let mut client = spec.client(&space, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut counts = std::collections::HashMap::<i64, u32>::new();
        for _ in 0..2000 {
            let (_, params) = client.next(&mut rng, &ctx());
            if let Some(V::Int(k)) = params.last() {
                *counts.entry(*k).or_default() += 1;
            }
        }
        f64::from(*counts.values().max().unwrap()) / 2000.0
    };
    assert!(hottest_share(KvKind::YcsbC) > 0.05, "θ = 0.99 over 1000 keys: the hottest is drawn ~13 % of the time");
    assert!(hottest_share(KvKind::YcsbA) < 0.02);
}

#[test]
fn a_tpcb_transfer_reads_and_updates_its_three_rows() {
    let space = KeySpace::tpcb(4, 2).unwrap();
    let (a, t, b) = (KeySpace::tpcb_key(Table::Account, 7), KeySpace::tpcb_key(Table::Teller, 1), KeySpace::tpcb_key(Table::Branch, 0));
    let mut p = program("tpcb", &[V::Int(a as i64), V::Int(t as i64), V::Int(b as i64), V::Int(5)], &space).unwrap();
    let mut db = Default::default();
    let (steps, rows) = run(p.as_mut(), &mut db, space.initial_value());
    let v = |int| Value { int, pad: TPCB_PAD };
    assert_eq!(
        steps[..6],
        [Step::Read(a), Step::Write(a, v(5)), Step::Read(t), Step::Write(t, v(5)), Step::Read(b), Step::Write(b, v(5))]
    );
    assert_eq!(rows, Ok(vec![vec![V::Int(5)]]));
}

#[test]
fn a_request_outside_the_key_space_or_malformed_is_refused_with_its_reason() {
    let space = KeySpace::tpcb(4, 2).unwrap();
    let account = KeySpace::tpcb_key(Table::Account, 400) as i64;
    let teller = KeySpace::tpcb_key(Table::Teller, 1) as i64;
    let branch = KeySpace::tpcb_key(Table::Branch, 0) as i64;
    let err = program("tpcb", &[V::Int(account), V::Int(teller), V::Int(branch), V::Int(1)], &space).unwrap_err().to_string();
    assert!(err.contains("`account`") && err.contains("outside the key space"), "{err}");
    let err = program("tpcb", &[V::Int(teller), V::Int(teller), V::Int(branch), V::Int(1)], &space).unwrap_err().to_string();
    assert!(err.contains("Account table"), "{err}");
    assert!(matches!(program("tpcb", &[V::Int(1)], &space), Err(RequestError::Arity { expected: 4, got: 1, .. })));
    assert!(matches!(program("tpcc", &[], &space), Err(RequestError::UnknownTransaction { .. })));
    let flat = KeySpace::flat(10, 2, 0).unwrap();
    assert!(program("ycsb-read", &[V::Int(20)], &flat).unwrap_err().to_string().contains("key 20 is outside"));
    assert!(program("ycsb-read", &[V::Int(-1)], &flat).is_err());
    assert!(program("ycsb-update", &[V::Int(2), V::Int(1), V::Int(2)], &flat).unwrap_err().to_string().contains("fewer than the 2 keys"));
    assert!(program("walk", &[V::Int(1), V::Int(3), V::Int(2)], &flat).unwrap_err().to_string().contains("partition"));
}

#[test]
fn a_ycsb_update_reads_then_writes_its_last_keys() {
    let space = KeySpace::flat(10, 2, 0).unwrap();
    let mut p = program("ycsb-update", &[V::Int(1), V::Int(3), V::Int(4), V::Int(6)], &space).unwrap();
    let mut db = Default::default();
    let (steps, _) = run(p.as_mut(), &mut db, Value::int(0));
    assert_eq!(steps[..5], [Step::Read(3), Step::Read(4), Step::Read(6), Step::Write(4, Value::int(1)), Step::Write(6, Value::int(1))]);
}

#[test]
fn a_walk_chooses_its_keys_from_what_it_reads_and_keeps_the_sum() {
    let space = KeySpace::flat(50, 2, 0).unwrap();
    let mut db = std::collections::BTreeMap::new();
    let mut paths = Vec::new();
    for start in [0u64, 2, 4, 0] {
        let mut p = program("walk", &[V::Int(start as i64), V::Int(4), V::Int(1)], &space).unwrap();
        let (steps, rows) = run(p.as_mut(), &mut db, Value::int(0));
        assert_eq!(rows, Ok(vec![vec![V::Int(4)]]));
        let reads: Vec<Key> = steps.iter().filter_map(|s| if let Step::Read(k) = s { Some(*k) } else { None }).collect();
        assert_eq!(reads.len(), 4);
        let parts: Vec<u32> = reads.iter().map(|k| space.partition(*k).unwrap()).collect();
        assert_eq!(parts, [0, 1, 0, 1], "a global walk alternates partitions");
        paths.push(reads);
    }
    assert_eq!(db.values().map(|v| v.int).sum::<i64>(), 0, "every walk moves one unit: the sum stays zero");
    assert_ne!(paths[0], paths[3], "the same start after other walks wrote takes another path: keys depend on values read");
}
