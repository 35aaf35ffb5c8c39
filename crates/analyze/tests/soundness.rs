//! The dynamic soundness check: random operations on SQLite, the rows they really touched, and
//! the plan's promises about them.

use ensemble_analyze::check::{check_plan, CheckConfig};
use ensemble_analyze::{analyze, Options, Weights};
use ensemble_app::{PartitionPlan, PlanClass, TablePlacement, TxnPlan};
use std::path::PathBuf;

fn hand_plan(name: &str) -> PartitionPlan {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../plans/{name}.toml"));
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn derived(name: &str, options: &Options) -> PartitionPlan {
    let app = ensemble_app::application(name).unwrap();
    analyze(&app, options).unwrap().plan
}

#[test]
fn shop_plan_holds_on_thousands_of_random_operations() {
    let app = ensemble_app::application("shop").unwrap();
    let plan = derived("shop", &Options::default());
    let cfg = CheckConfig::default();
    let r = check_plan(&app, &plan, &cfg).unwrap();
    println!("shop, derived plan: {}", r.summary());
    assert!(r.ok(), "{}", r.summary());
    assert_eq!(r.operations, 3000);
    // The run must have exercised something: commits, and conflicts across instances (orders
    // against browsing, adds and each other) that the plan had to allow.
    assert!(r.committed > 500, "{}", r.summary());
    assert!(r.writes > 200, "{}", r.summary());
    assert!(r.cross_instance_conflicts.values().all(|c| *c > 100), "{}", r.summary());
    // The hand-written plan holds too (it is the same plan).
    let hand = check_plan(&app, &hand_plan("shop"), &cfg).unwrap();
    assert!(hand.ok(), "{}", hand.summary());
}

#[test]
fn micro_plans_hold() {
    let app = ensemble_app::application("micro").unwrap();
    let cfg = CheckConfig { operations: 2000, ..CheckConfig::default() };
    for (label, plan) in [
        ("derived", derived("micro", &Options::default())),
        (
            "derived with global_op pinned to part",
            derived("micro", &Options { weights: Weights::parse("[partition_by]\nglobal_op = [\"part\"]", None).unwrap(), ..Options::default() }),
        ),
        ("hand-written", hand_plan("micro")),
    ] {
        let r = check_plan(&app, &plan, &cfg).unwrap();
        println!("micro, {label}: {}", r.summary());
        assert!(r.ok(), "{label}: {}", r.summary());
        assert!(r.committed > 1000, "{label}: {}", r.summary());
    }
}

#[test]
fn the_check_is_deterministic() {
    let app = ensemble_app::application("shop").unwrap();
    let plan = derived("shop", &Options::default());
    let cfg = CheckConfig { operations: 500, seed: 7, ..CheckConfig::default() };
    assert_eq!(check_plan(&app, &plan, &cfg).unwrap(), check_plan(&app, &plan, &cfg).unwrap());
}

/// The check must catch plans that are wrong; otherwise passing it means nothing.
#[test]
fn wrong_plans_are_caught() {
    let app = ensemble_app::application("shop").unwrap();
    let good = derived("shop", &Options::default());
    let cfg = CheckConfig { operations: 1500, ..CheckConfig::default() };
    let with = |f: &dyn Fn(&mut PartitionPlan)| {
        let mut p = good.clone();
        f(&mut p);
        check_plan(&app, &p, &cfg).unwrap()
    };
    // order claimed local: it writes stock others read on other instances.
    let r = with(&|p| p.transactions.insert("order".into(), TxnPlan { class: PlanClass::Local, partition_by: vec!["cart_id".into()] }).map(drop).unwrap_or(()));
    assert!(r.violations.iter().any(|v| v.contains("local #") && v.contains("order(") && v.contains("items(")), "{}", r.summary());
    // add_item routed by item: its cart lines are read by get_cart and order on the cart's instance.
    let r = with(&|p| p.transactions.insert("add_item".into(), TxnPlan { class: PlanClass::Local, partition_by: vec!["item_id".into()] }).map(drop).unwrap_or(()));
    assert!(r.violations.iter().any(|v| v.contains("add_item(") && v.contains("cart_lines(")), "{}", r.summary());
    // items partitioned: browse runs anywhere and order reads every item.
    let r = with(&|p| p.tables.insert("items".into(), TablePlacement::Partitioned { column: "item_id".into() }).map(drop).unwrap_or(()));
    assert!(r.violations.iter().any(|v| v.contains("touches items(") && v.contains("which lives on instance")), "{}", r.summary());
    // browse claimed commutative: it reads what order writes.
    let r = with(&|p| p.transactions.insert("browse_items".into(), TxnPlan { class: PlanClass::Commutative, partition_by: vec![] }).map(drop).unwrap_or(()));
    assert!(r.violations.iter().any(|v| v.starts_with("commutative #") && v.contains("browse_items(")), "{}", r.summary());

    let micro = ensemble_app::application("micro").unwrap();
    let mut p = hand_plan("micro");
    p.transactions.insert("global_op".into(), TxnPlan { class: PlanClass::Local, partition_by: vec!["part".into()] });
    let r = check_plan(&micro, &p, &cfg).unwrap();
    assert!(r.violations.iter().any(|v| v.contains("local #") && v.contains("global_op(") && v.contains("global_counters(")), "{}", r.summary());
}

#[test]
fn tpcw_and_rubis_derived_plans_hold() {
    for name in ["tpcw", "rubis"] {
        let app = ensemble_app::application(name).unwrap();
        let cfg = CheckConfig { operations: 1500, ..CheckConfig::default() };
        let plan = derived(name, &Options::default());
        let r = check_plan(&app, &plan, &cfg).unwrap();
        assert!(r.ok(), "{name}: {}", r.summary());
        // The shipped plan is the derived one.
        let shipped = ensemble_app::PartitionPlan::load(std::path::Path::new(&format!("{}/../../plans/{name}.toml", env!("CARGO_MANIFEST_DIR"))), &app).unwrap();
        assert_eq!(shipped.transactions, plan.transactions, "{name}");
        assert_eq!(shipped.tables, plan.tables, "{name}");
    }
}
