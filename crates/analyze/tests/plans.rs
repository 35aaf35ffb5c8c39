//! The plans the analyzer derives for the shipped applications, against the papers and against
//! the hand-written plans in `plans/`.

mod common;

use ensemble_analyze::{analyze, analyze_spec, report, Dialect, Options, Replicas, Weights};
use ensemble_app::{PartitionPlan, PlanClass, TablePlacement};
use std::path::PathBuf;

fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

fn hand_plan(name: &str) -> PartitionPlan {
    let text = std::fs::read_to_string(repo_file(&format!("plans/{name}.toml"))).expect("hand-written plan exists");
    toml::from_str(&text).expect("hand-written plan parses")
}

#[test]
fn shop_matches_the_papers_online_store() {
    let app = ensemble_app::application("shop").unwrap();
    let a = analyze(&app, &Options::default()).unwrap();
    // Gyro §IV / Eliá §3.2: create_cart and add_item local, order global, partitioned by cart id.
    for (t, class, by) in [
        ("create_cart", PlanClass::Local, vec!["cart_id"]),
        ("add_item", PlanClass::Local, vec!["cart_id"]),
        ("order", PlanClass::Global, vec!["cart_id"]),
        // Read-only: nobody reads from it, so by Definition 1 it is local. It reads items that
        // orders of every partition write, but that only constrains the writer (order, global
        // anyway); items are replicated, so any instance may serve it.
        ("browse_items", PlanClass::Local, vec![]),
        // Read-only too, but it reads cart lines local add_item writes: it must run at the cart's
        // instance, or add_item would be read from by another partition and become global.
        ("get_cart", PlanClass::Local, vec!["cart_id"]),
    ] {
        assert_eq!(a.class_of(t), Some(class), "{t}");
        assert_eq!(a.partition_by(t).unwrap(), by, "{t}");
    }
    assert_eq!(a.read_only("browse_items"), Some(true));
    assert_eq!(a.read_only("get_cart"), Some(true));
    assert_eq!(a.read_only("order"), Some(false));
    let placement = |t: &str| a.plan.tables.get(t).cloned().unwrap();
    assert_eq!(placement("carts"), TablePlacement::Partitioned { column: "cart_id".into() });
    assert_eq!(placement("cart_lines"), TablePlacement::Partitioned { column: "cart_id".into() });
    assert_eq!(placement("items"), TablePlacement::Replicated);
    assert_eq!(placement("orders"), TablePlacement::Replicated);
    assert!(a.search.proven_minimal);

    // The pair and condition that make order global are named.
    let text = report(&a, false);
    assert!(text.contains("order: `add_item` (item_stock) reads from `order` (take_stock) on items.{stock}"), "{text}");
    assert!(text.contains("two `order` operations can run on different instances"), "{text}");
}

#[test]
fn shop_plan_is_the_hand_written_one() {
    let app = ensemble_app::application("shop").unwrap();
    let a = analyze(&app, &Options::default()).unwrap();
    let hand = hand_plan("shop");
    hand.validate(&app).expect("the hand-written plan is for this definition");
    a.plan.validate(&app).expect("the derived plan is valid");
    assert_eq!(a.plan.application, hand.application);
    assert_eq!(a.plan.fingerprint, hand.fingerprint);
    assert_eq!(a.plan.tables, hand.tables);
    assert_eq!(a.plan.transactions, hand.transactions);
    assert_eq!(a.plan.max_instances, hand.max_instances);
    assert!(a.plan.origin.contains("ensemble-analyze"), "{}", a.plan.origin);
    // And it survives the file format.
    let back: PartitionPlan = toml::from_str(&a.plan.to_toml()).unwrap();
    assert_eq!(back, a.plan);
}

#[test]
fn micro_matches_the_hand_written_plan() {
    let app = ensemble_app::application("micro").unwrap();
    let a = analyze(&app, &Options::default()).unwrap();
    assert_eq!(a.class_of("local_op"), Some(PlanClass::Local));
    assert_eq!(a.partition_by("local_op").unwrap(), vec!["part"]);
    // global_op sums the shared counters that every partition's global_op writes: global
    // whatever it is routed by; routed by `part` because it also reads its partition's counter.
    assert_eq!(a.class_of("global_op"), Some(PlanClass::Global));
    assert_eq!(a.partition_by("global_op").unwrap(), vec!["part"]);
    let hand = hand_plan("micro");
    assert_eq!(a.plan.fingerprint, hand.fingerprint);
    assert_eq!(a.plan.tables, hand.tables);
    assert_eq!(a.plan.transactions, hand.transactions);

    // Pinning still works, and says so in the report.
    let weights = Weights::parse("[partition_by]\nglobal_op = [\"part\"]\n", Some("pins")).unwrap();
    let pinned = analyze(&app, &Options { weights, ..Options::default() }).unwrap();
    assert_eq!(pinned.plan.transactions, hand.transactions);
    assert!(report(&pinned, false).contains("part (pinned)"));
}

#[test]
fn every_dialect_gives_the_same_analysis() {
    for name in ["shop", "micro"] {
        let app = ensemble_app::application(name).unwrap();
        let base = analyze(&app, &Options::default()).unwrap();
        for d in [Dialect::Postgres, Dialect::Mysql] {
            let a = analyze(&app, &Options { dialect: d, ..Options::default() }).unwrap();
            assert_eq!(a.sets, base.sets, "{name} in {d}");
            assert_eq!(a.conflicts, base.conflicts, "{name} in {d}");
            assert_eq!(a.plan.transactions, base.plan.transactions, "{name} in {d}");
            assert_eq!(a.plan.tables, base.plan.tables, "{name} in {d}");
        }
    }
}

#[test]
fn report_has_table_1_and_explains() {
    let app = ensemble_app::application("shop").unwrap();
    let a = analyze(&app, &Options::default()).unwrap();
    let short = report(&a, false);
    let row = short.lines().find(|l| l.starts_with("shop ")).expect("a Table 1 row for shop");
    let cols: Vec<&str> = row.split_whitespace().collect();
    // Application, L, G, C, L/G, Read-only, Total, then frequencies.
    assert_eq!(&cols[..7], &["shop", "4", "1", "0", "0", "2", "5"], "{row}");
    assert_eq!(&cols[7..], &["80%", "20%", "0%", "0%", "40%"], "{row}");
    assert!(short.contains("the global volume is minimal"));
    assert!(!short.contains("Explanation"));
    let long = report(&a, true);
    assert!(long.contains("Explanation"));
    assert!(long.contains("browse_items(first_item, count): local, no partitioning parameter"));
    assert!(long.contains("free values"));
    assert!(long.contains("Conflicts (Algorithm 1, with direction):"));
    assert!(long.contains("add_item (item_stock) reads from order (take_stock) on items.{stock} when items.item_id = add_item.item_id"));
}

#[test]
fn weights_change_which_writer_stays_local() {
    // `bridge` reads a row of t1 by `a` and a row of t2 by `b`: whichever parameter routes it,
    // the writer of the other table is read from by another partition and becomes global.
    let spec = common::spec(
        "bridge",
        &["CREATE TABLE t1 (a INTEGER PRIMARY KEY, v INTEGER)", "CREATE TABLE t2 (b INTEGER PRIMARY KEY, v INTEGER)"],
        &[
            ("w1", &["a"], &[("s", "UPDATE t1 SET v = v + 1 WHERE a = :a")]),
            ("w2", &["b"], &[("s", "UPDATE t2 SET v = v + 1 WHERE b = :b")]),
            ("bridge", &["a", "b"], &[("r1", "SELECT v FROM t1 WHERE a = :a"), ("r2", "SELECT v FROM t2 WHERE b = :b")]),
        ],
    );
    let with = |w1: f64, w2: f64| {
        let weights = Weights { by_txn: [("w1".to_string(), w1), ("w2".to_string(), w2)].into(), ..Weights::default() };
        analyze_spec(&spec, &Options { weights, ..Options::default() }).unwrap()
    };
    let a = with(5.0, 1.0);
    assert_eq!(a.class_of("w1"), Some(PlanClass::Local));
    assert_eq!(a.class_of("w2"), Some(PlanClass::Global));
    assert_eq!(a.partition_by("bridge").unwrap(), vec!["a"]);
    let b = with(1.0, 5.0);
    assert_eq!(b.class_of("w1"), Some(PlanClass::Global));
    assert_eq!(b.class_of("w2"), Some(PlanClass::Local));
    assert_eq!(b.partition_by("bridge").unwrap(), vec!["b"]);
    assert!(report(&b, false).contains("weighted global volume 1 (of 7)"));
}

#[test]
fn double_key_makes_a_local_global_type() {
    // RUBiS-like: a bid reads its item (which local `update_item` writes, routed by item) and
    // records a bid that the bidder's `user_bids` reads (routed by user). Routed by item first
    // and user second, a bid is local when both keys meet on one instance, global otherwise.
    let spec = common::spec(
        "auction",
        &[
            "CREATE TABLE items (item_id INTEGER PRIMARY KEY, max_bid INTEGER)",
            "CREATE TABLE bids (item_id INTEGER, user_id INTEGER, amount INTEGER, PRIMARY KEY (item_id, user_id))",
        ],
        &[
            (
                "bid",
                &["item_id", "user_id", "amount"],
                &[
                    ("max", "SELECT max_bid FROM items WHERE item_id = :item_id"),
                    ("record", "INSERT INTO bids (item_id, user_id, amount) VALUES (:item_id, :user_id, :amount)"),
                ],
            ),
            ("update_item", &["item_id", "max"], &[("u", "UPDATE items SET max_bid = :max WHERE item_id = :item_id")]),
            ("user_bids", &["user_id"], &[("q", "SELECT item_id, amount FROM bids WHERE user_id = :user_id")]),
        ],
    );
    let partial = analyze_spec(&spec, &Options { replicas: Replicas::Partial, ..Options::default() }).unwrap();
    assert_eq!(partial.class_of("bid"), Some(PlanClass::LocalGlobal));
    assert_eq!(partial.partition_by("bid").unwrap(), vec!["item_id", "user_id"]);
    assert_eq!(partial.class_of("update_item"), Some(PlanClass::Local));
    assert_eq!(partial.partition_by("update_item").unwrap(), vec!["item_id"]);
    assert_eq!(partial.partition_by("user_bids").unwrap(), vec!["user_id"]);
    // bids cannot be partitioned (bid runs at its item's instance, user_bids at its user's), so
    // it is replicated with copies that differ in rows local bids wrote: reported.
    assert_eq!(partial.plan.tables["bids"], TablePlacement::Replicated);
    assert!(partial.warnings.iter().any(|w| w.contains("`bids`") && w.contains("local-global `bid`")), "{:?}", partial.warnings);
    let text = report(&partial, false);
    let row = text.lines().find(|l| l.starts_with("auction ")).unwrap().to_string();
    assert_eq!(&row.split_whitespace().collect::<Vec<_>>()[..7], &["auction", "2", "0", "0", "1", "1", "3"], "{row}");
    assert!(text.contains("Warnings:"));

    // With identical replicas (what the runtime checks), no double key: one writer is global.
    let identical = analyze_spec(&spec, &Options::default()).unwrap();
    assert!(identical.classes.iter().all(|c| *c != PlanClass::LocalGlobal));
    let globals = ["bid", "update_item"].iter().filter(|t| identical.class_of(t) == Some(PlanClass::Global)).count();
    assert_eq!(globals, 1);
    assert!(identical.warnings.is_empty());
}

#[test]
fn a_local_writer_of_an_unpartitionable_table_is_made_global() {
    // Conflicts alone leave `touch` local: each reader binds one of the columns `touch` binds to
    // the same parameter. But `mine` binds owner and `one` binds id, so no single column
    // partitions the table, and a local write to a replicated table reaches only one copy.
    let spec = common::spec(
        "labels",
        &["CREATE TABLE labels (id INTEGER PRIMARY KEY, owner INTEGER NOT NULL, v INTEGER)"],
        &[
            // Writes the row whose id AND owner are :u.
            ("touch", &["u"], &[("w", "UPDATE labels SET v = v + 1 WHERE id = :u AND owner = :u")]),
            // Reads by owner only.
            ("mine", &["u"], &[("r", "SELECT v FROM labels WHERE owner = :u")]),
            // Reads by id only.
            ("one", &["u"], &[("r", "SELECT v FROM labels WHERE id = :u")]),
        ],
    );
    let a = analyze_spec(&spec, &Options::default()).unwrap();
    // Every conflict with touch forces equal routing values, so by conflicts alone it is local;
    // but `mine` binds owner and `one` binds id, so no single column partitions the table.
    assert_eq!(a.plan.tables["labels"], TablePlacement::Replicated);
    assert_eq!(a.class_of("touch"), Some(PlanClass::Global));
    assert!(report(&a, false).contains("touch: it writes `labels`, which cannot be partitioned"));
    let partial = analyze_spec(&spec, &Options { replicas: Replicas::Partial, ..Options::default() }).unwrap();
    assert_eq!(partial.class_of("touch"), Some(PlanClass::Local));
    assert_eq!(partial.warnings.len(), 1);
}

#[test]
fn a_type_reading_immutable_data_is_commutative() {
    let spec = common::spec(
        "catalog",
        &["CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT)", "CREATE TABLE hits (id INTEGER PRIMARY KEY, n INTEGER)"],
        &[
            ("list", &[], &[("q", "SELECT id, name FROM categories ORDER BY name")]),
            ("hit", &["id"], &[("q", "UPDATE hits SET n = n + 1 WHERE id = :id")]),
        ],
    );
    let a = analyze_spec(&spec, &Options::default()).unwrap();
    assert_eq!(a.class_of("list"), Some(PlanClass::Commutative));
    assert_eq!(a.plan.transactions["list"].partition_by, Vec::<String>::new());
    assert_eq!(a.class_of("hit"), Some(PlanClass::Local));
    assert_eq!(a.plan.tables["categories"], TablePlacement::Replicated);
    assert_eq!(a.plan.tables["hits"], TablePlacement::Partitioned { column: "id".into() });
}

#[test]
fn an_exhausted_search_is_reported_and_still_classifies_exactly() {
    let app = ensemble_app::application("shop").unwrap();
    let a = analyze(&app, &Options { node_budget: 1, ..Options::default() }).unwrap();
    assert!(!a.search.proven_minimal);
    assert!(report(&a, false).contains("NODE BUDGET EXHAUSTED"));
    // Whatever was chosen, order writes stock every partition reads: global.
    assert_eq!(a.class_of("order"), Some(PlanClass::Global));
    a.plan.validate(&app).unwrap();
}

#[test]
fn run_writes_the_plan_file() {
    let dir = std::env::temp_dir().join(format!("ensemble-analyze-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("shop.toml");
    let weights = dir.join("weights.toml");
    std::fs::write(&weights, "order = 2\nbrowse_items = 10\n").unwrap();
    let text = ensemble_analyze::run(&ensemble_analyze::Command {
        app: "shop".into(),
        weights: Some(weights.clone()),
        explain: true,
        out: Some(out.clone()),
        dialect: Dialect::Sqlite,
    })
    .unwrap();
    assert!(text.contains("Plan written to"));
    assert!(text.contains(&weights.display().to_string()));
    let app = ensemble_app::application("shop").unwrap();
    let plan = PartitionPlan::load(&out, &app).unwrap();
    assert_eq!(plan.transactions, hand_plan("shop").transactions);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_generated_thirty_type_application_is_searched_to_the_end() {
    for replicas in [Replicas::Identical, Replicas::Partial] {
        for seed in 1..=3 {
            let app = ensemble_analyze::synthetic::application(30, seed);
            let start = std::time::Instant::now();
            let a = analyze_spec(&app, &Options { replicas, ..Options::default() }).unwrap();
            println!(
                "seed {seed} {replicas:?}: {} conflicts, space {}, {} components (largest {}), {} nodes, {:?} (debug build)",
                a.conflicts.len(),
                a.search.space,
                a.search.components,
                a.search.largest_component,
                a.search.nodes,
                start.elapsed()
            );
            assert!(a.search.proven_minimal, "seed {seed}");
            assert_eq!(a.classes.len(), 30);
        }
    }
}

#[test]
fn read_only_types_over_replicated_tables_run_anywhere() {
    // getBook reads only `item`, which only global operations write: routing it by i_id would
    // only send it across the network.
    let app = ensemble_app::application("tpcw").unwrap();
    let a = analyze(&app, &Options::default()).unwrap();
    for t in ["getBook", "getBestSellers", "getCustomer"] {
        assert_eq!(a.class_of(t), Some(PlanClass::Local), "{t}");
        assert!(a.partition_by(t).unwrap().is_empty(), "{t}: {:?}", a.partition_by(t));
    }
    // A read of a partitioned table keeps its routing.
    assert_eq!(a.partition_by("getCart").unwrap(), vec!["sc_id"]);
    assert_eq!(a.partition_by("doCart").unwrap(), vec!["sc_id"]);
}
