//! The RUBiS application on SQLite: generated data, every transaction, determinism, and the
//! client emulator walking the bidding mix.

use ensemble_app::apps::rubis::data::{self, Cardinalities, DATA_NOW, MINT_BASE};
use ensemble_app::apps::rubis::mix::{Interaction, Next, RubisMix, INTERACTIONS, OUTCOMES};
use ensemble_app::apps::rubis::txns::{item_col, DAY};
use ensemble_app::apps::rubis::{self, RubisWorkload};
use ensemble_app::{Application, ClientCtx, DataConfig, InstanceId, Workload};
use ensemble_core::{ClientId, Outcome, Request, Value};
use ensemble_sqlite::SqliteStorage;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::sync::Arc;

const TABLES: [&str; 8] = ["categories", "regions", "users", "items", "old_items", "bids", "comments", "buy_now"];

mod common;
use common::{aborted, fresh, i, int, ok, t};

fn app() -> Arc<Application> {
    rubis::application()
}








fn item_row(db: &SqliteStorage, item: i64) -> Vec<Value> {
    ok(db, "ViewItem", vec![i(item)]).remove(0)
}

#[test]
fn twenty_six_transactions_of_which_twenty_one_read_only() {
    let app = app();
    assert_eq!(app.transactions.len(), 26);
    let updating: Vec<&str> = app.transactions.iter().map(|t| t.name).filter(|n| !app.is_read_only(n)).collect();
    assert_eq!(updating, ["RegisterUser", "RegisterItem", "StoreBid", "StoreBuyNow", "StoreComment"]);
    // Every interaction's transactions exist; exactly the storing interactions write.
    for it in Interaction::ALL {
        for txn in it.transactions() {
            assert!(app.txn(txn).is_some(), "{txn}");
        }
        assert_eq!(it.writes(), it.transactions().iter().any(|t| !app.is_read_only(t)), "{it:?}");
    }
    assert_eq!(ensemble_app::application("rubis").unwrap().fingerprint(), app.fingerprint());
}

#[test]
fn generated_data_has_the_documented_cardinalities() {
    let app = app();
    // How long generating and loading take is measured by `cargo bench -p ensemble-app --bench load`.
    let data = (app.generate)(DataConfig { scale: 1, seed: 1 });
    let db = SqliteStorage::open_in_memory(Arc::clone(&app), InstanceId(0)).unwrap();
    db.create_schema().unwrap();
    let loaded = db.load(&data, |_, _, _| true).unwrap();

    let count = |t: &str| db.dump(t).unwrap().len() as i64;
    let card = Cardinalities::for_scale(1);
    assert_eq!((count("categories"), count("regions")), (20, 62));
    assert_eq!((count("users"), count("items"), count("old_items")), (1_000, 1_000, 5_000));
    assert_eq!(card, Cardinalities { users: 1_000, items: 1_000, old_items: 5_000 });
    let bids = count("bids");
    assert!((50_000..=70_000).contains(&bids), "{bids} bids");
    let comments = count("comments");
    assert!((4_500..=5_000).contains(&comments), "{comments} comments");
    let buy_now = count("buy_now");
    assert!((350..=650).contains(&buy_now), "{buy_now} purchases");
    assert_eq!(loaded as i64, 20 + 62 + 1_000 + 1_000 + 5_000 + bids + comments + buy_now);

    // Items count their bids and carry the highest; open items end after the data's clock,
    // closed ones before; every generated id stays below the first minted one.
    let mut per_item: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for b in db.dump("bids").unwrap() {
        let e = per_item.entry(int(&b[2])).or_default();
        e.0 += 1;
        e.1 = e.1.max(int(&b[4]));
        assert!(int(&b[0]) < MINT_BASE as i64);
    }
    for (table, open) in [("items", true), ("old_items", false)] {
        for r in db.dump(table).unwrap() {
            let (n, max) = per_item.get(&int(&r[0])).copied().unwrap_or((0, 0));
            assert_eq!((int(&r[item_col::NB_OF_BIDS]), int(&r[item_col::MAX_BID])), (n, max));
            assert!(n <= data::MAX_BIDS_PER_ITEM);
            assert_eq!(int(&r[item_col::END_DATE]) > DATA_NOW, open);
        }
    }
    // A user's rating is the sum of the comments about them.
    let mut ratings: BTreeMap<i64, i64> = BTreeMap::new();
    for c in db.dump("comments").unwrap() {
        *ratings.entry(int(&c[2])).or_default() += int(&c[4]);
    }
    for u in db.dump("users").unwrap() {
        assert_eq!(int(&u[6]), ratings.get(&int(&u[0])).copied().unwrap_or(0));
    }
}

#[test]
fn generation_is_deterministic_from_the_seed() {
    let rows = |seed| {
        (rubis::generate(DataConfig { scale: 1, seed }))
            .tables
            .into_iter()
            .map(|t| (t.table, t.rows))
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(7), rows(7));
    assert_ne!(rows(7), rows(8));
    let big = rubis::generate(DataConfig { scale: 2, seed: 7 });
    let users = big.tables.iter().find(|t| t.table == "users").unwrap();
    assert_eq!(users.rows.len(), 2_000);
}

#[test]
fn every_transaction_runs() {
    let app = app();
    let db = fresh(&app);
    let (user, nick, pw) = (5, t(&data::nickname(5)), t(&data::password(5)));
    let open = 1;
    let closed = Cardinalities::for_scale(1).items + 1;
    let now = i(DATA_NOW);
    let seller = int(&item_row(&db, open)[item_col::SELLER]);

    assert_eq!(ok(&db, "BrowseCategories", vec![]).len(), 20);
    assert_eq!(ok(&db, "BrowseRegions", vec![]).len(), 62);
    assert_eq!(ok(&db, "BrowseCategoriesInRegion", vec![i(3)]).len(), 20);
    let page = ok(&db, "SearchItemsByCategory", vec![i(2), i(0), now.clone()]);
    assert!(!page.is_empty() && page.len() <= 20);
    let ends: Vec<i64> = page.iter().map(|r| int(&r[5])).collect();
    assert!(ends.windows(2).all(|w| w[0] <= w[1]) && ends[0] >= DATA_NOW);
    let everywhere: usize = (1..=62).map(|r| ok(&db, "SearchItemsByRegion", vec![i(r), i(2), i(0), now.clone()]).len()).sum();
    assert!(everywhere >= page.len());
    let item = item_row(&db, open);
    assert_eq!((int(&item[item_col::ID]), int(&item[item_col::ARCHIVED])), (open, 0));
    assert_eq!(int(&item_row(&db, closed)[item_col::ARCHIVED]), 1);
    let info = ok(&db, "ViewUserInfo", vec![i(seller)]);
    assert_eq!(info[0][0], t("user"));
    assert!(ok(&db, "ViewBidHistory", vec![i(open)])[0][0] == t("item"));
    for auth in ["BuyNowAuth", "PutBidAuth", "PutCommentAuth"] {
        assert_eq!(ok(&db, auth, vec![nick.clone(), pw.clone()]), vec![vec![i(user)]]);
        assert!(aborted(&db, auth, vec![nick.clone(), t("wrong")]).contains("wrong nickname or password"));
    }
    assert_eq!(ok(&db, "BuyNow", vec![i(user), i(open)])[0][item_col::ID], i(open));
    assert_eq!(ok(&db, "PutBid", vec![i(user), i(open)])[0][item_col::ID], i(open));
    assert!(aborted(&db, "PutBid", vec![i(user), i(closed)]).contains("not open"));
    assert_eq!(ok(&db, "PutComment", vec![i(user), i(seller), i(open)])[0][2], i(seller));
    assert_eq!(ok(&db, "SelectCategoryToSellItem", vec![nick.clone(), pw.clone()]).len(), 20);
    assert_eq!(ok(&db, "SellItemForm", vec![i(user), i(6)])[0][3], t("Collectibles"));
    let me = ok(&db, "AboutMe", vec![nick.clone(), pw.clone()]);
    assert_eq!((me[0][0].clone(), me[0][1].clone()), (t("user"), i(user)));
    for txn in ["AboutMeBids", "AboutMeWonItems", "AboutMeBoughtItems", "AboutMeItems"] {
        ok(&db, txn, vec![i(user), now.clone()]);
    }
    // Over all users, every "About me" list shows something.
    for (txn, at) in [("AboutMeBids", 0), ("AboutMeWonItems", 0), ("AboutMeBoughtItems", 1), ("AboutMeItems", 1)] {
        let any = (1..=200).any(|u| !ok(&db, txn, vec![i(u), now.clone()]).is_empty());
        assert!(any, "{txn} (column {at}) is empty for every user");
    }
}

#[test]
fn store_bid_counts_the_bid_and_raises_the_maximum() {
    let app = app();
    let db = fresh(&app);
    let item = item_row(&db, 3);
    let (nb, max, initial) = (int(&item[item_col::NB_OF_BIDS]), int(&item[item_col::MAX_BID]), int(&item[item_col::INITIAL_PRICE]));
    let least = rubis::txns::min_bid(initial, nb, max);
    let now = DATA_NOW + 10;
    let low = aborted(&db, "StoreBid", vec![i(7), i(3), i(900_001), i(1), i(least - 1), i(least), i(now)]);
    assert!(low.contains("below the minimum"), "{low}");
    let rows = ok(&db, "StoreBid", vec![i(7), i(3), i(900_001), i(1), i(least + 50), i(least + 500), i(now)]);
    assert_eq!(rows, vec![vec![i(900_001), i(nb + 1), i(least + 50)]]);
    let after = item_row(&db, 3);
    assert_eq!((int(&after[item_col::NB_OF_BIDS]), int(&after[item_col::MAX_BID])), (nb + 1, least + 50));
    let bid = db.dump("bids").unwrap().into_iter().find(|b| b[0] == i(900_001)).unwrap();
    assert_eq!(bid, vec![i(900_001), i(7), i(3), i(1), i(least + 50), i(least + 500), i(now)]);
    // The same bid again is below the new minimum; a closed auction takes no bid.
    assert!(aborted(&db, "StoreBid", vec![i(7), i(3), i(900_002), i(1), i(least + 50), i(least + 50), i(now)]).contains("below"));
    let end = int(&after[item_col::END_DATE]);
    assert!(aborted(&db, "StoreBid", vec![i(7), i(3), i(900_002), i(1), i(least + 99), i(least + 99), i(end + 1)]).contains("ended"));
    assert!(aborted(&db, "StoreBid", vec![i(7), i(1_001), i(900_002), i(1), i(1_000_000), i(1_000_000), i(now)]).contains("not open"));
}

#[test]
fn store_buy_now_takes_the_quantity_and_closes_the_item_at_zero() {
    let app = app();
    let db = fresh(&app);
    let item = item_row(&db, 4);
    let quantity = int(&item[item_col::QUANTITY]);
    let now = DATA_NOW + 20;
    assert!(aborted(&db, "StoreBuyNow", vec![i(8), i(4), i(900_001), i(quantity + 1), i(now)]).contains("cannot buy"));
    let mut left = quantity;
    let mut id = 900_001;
    while left > 1 {
        assert_eq!(ok(&db, "StoreBuyNow", vec![i(8), i(4), i(id), i(1), i(now)]), vec![vec![i(id), i(left - 1)]]);
        left -= 1;
        id += 1;
        assert_eq!(int(&item_row(&db, 4)[item_col::QUANTITY]), left);
    }
    assert_eq!(ok(&db, "StoreBuyNow", vec![i(8), i(4), i(id), i(1), i(now)]), vec![vec![i(id), i(0)]]);
    let closed = item_row(&db, 4);
    assert_eq!((int(&closed[item_col::QUANTITY]), int(&closed[item_col::END_DATE])), (0, now));
    assert!(aborted(&db, "StoreBuyNow", vec![i(8), i(4), i(id + 1), i(1), i(now + 1)]).contains("ended"));
    let bought: Vec<_> = db.dump("buy_now").unwrap().into_iter().filter(|r| r[2] == i(4)).collect();
    assert_eq!(bought.len() as i64, quantity);
    assert!(bought.iter().all(|r| r[1] == i(8) && r[3] == i(1) && r[4] == i(now)));
    let mine = ok(&db, "AboutMeBoughtItems", vec![i(8), i(now)]);
    assert!(mine.iter().filter(|r| r[1] == i(4)).count() as i64 == quantity);
}

#[test]
fn store_comment_adds_its_rating_to_the_rated_user() {
    let app = app();
    let db = fresh(&app);
    let rating_of = |u: i64| int(&ok(&db, "ViewUserInfo", vec![i(u)])[0][5]);
    let before = rating_of(12);
    let now = DATA_NOW + 30;
    let params = |id: i64, rating: i64| vec![i(11), i(12), i(2), i(id), i(rating), t("fast shipping"), i(now)];
    assert_eq!(ok(&db, "StoreComment", params(900_001, 4)), vec![vec![i(900_001), i(before + 4)]]);
    assert_eq!(ok(&db, "StoreComment", params(900_002, -5)), vec![vec![i(900_002), i(before - 1)]]);
    assert_eq!(rating_of(12), before - 1);
    assert!(aborted(&db, "StoreComment", params(900_003, 6)).contains("rating"));
    let page = ok(&db, "ViewUserInfo", vec![i(12)]);
    assert!(page.iter().any(|r| r[0] == t("comment") && r[1] == i(900_001) && r[2] == i(11)));
    assert!(aborted(&db, "StoreComment", vec![i(11), i(999_999), i(2), i(900_004), i(1), t("x"), i(now)]).contains("no user"));
}

#[test]
fn register_user_refuses_a_taken_nickname() {
    let app = app();
    let db = fresh(&app);
    let user = |id: i64, nick: &str| {
        vec![i(id), t("Ada"), t("Lovelace"), t(nick), t("secret"), t("ada@example.org"), i(3), i(DATA_NOW)]
    };
    assert_eq!(ok(&db, "RegisterUser", user(900_001, "ada")), vec![vec![i(900_001)]]);
    assert!(aborted(&db, "RegisterUser", user(900_002, "ada")).contains("taken"));
    assert!(aborted(&db, "RegisterUser", user(900_003, "user1")).contains("taken"));
    assert!(aborted(&db, "RegisterUser", user(900_001, "other")).contains("exists"));
    let mut bad_region = user(900_004, "grace");
    bad_region[6] = i(63);
    assert!(aborted(&db, "RegisterUser", bad_region).contains("region"));
    assert_eq!(ok(&db, "PutBidAuth", vec![t("ada"), t("secret")]), vec![vec![i(900_001)]]);
    assert_eq!(db.dump("users").unwrap().len(), 1_001);
}

#[test]
fn register_item_puts_an_item_up_for_auction() {
    let app = app();
    let db = fresh(&app);
    let now = DATA_NOW + 40;
    let item = |id: i64, end: i64| {
        vec![i(id), i(6), i(9), t("vintage lamp"), t("rare lamp"), i(1_000), i(2), i(0), i(5_000), i(now), i(end)]
    };
    assert_eq!(ok(&db, "RegisterItem", item(900_001, now + DAY)), vec![vec![i(900_001)]]);
    assert!(aborted(&db, "RegisterItem", item(900_001, now + DAY)).contains("exists"));
    assert!(aborted(&db, "RegisterItem", item(1_001, now + DAY)).contains("exists"));
    assert!(aborted(&db, "RegisterItem", item(900_002, now)).contains("end after"));
    let row = item_row(&db, 900_001);
    assert_eq!(row[..13], [i(900_001), t("vintage lamp"), t("rare lamp"), i(1_000), i(2), i(0), i(5_000), i(0), i(0), i(now), i(now + DAY), i(6), i(9)]);
    let selling = ok(&db, "AboutMeItems", vec![i(6), i(now)]);
    assert!(selling.iter().any(|r| r[0] == t("selling") && r[1] == i(900_001)));
    let search = ok(&db, "SearchItemsByCategory", vec![i(9), i(0), i(now + DAY - 1)]);
    assert!(search.iter().any(|r| r[0] == i(900_001)));
}

/// One client's requests over `steps` transactions against `db`, with what became of them.
fn drive(db: &SqliteStorage, w: &mut RubisWorkload, ctx: &ClientCtx, seed: u64, steps: usize) -> Vec<(Request, Outcome)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(steps);
    for seq in 0..steps as u64 {
        let (txn, params) = w.next(&mut rng, ctx);
        let req = Request { client: ClientId(ctx.client_index), seq, txn, params };
        let outcome = db.execute_direct(&req).unwrap_or_else(|e| panic!("request {req:?} refused: {e}"));
        w.observe(&req.txn, &outcome);
        out.push((req, outcome));
    }
    out
}

#[test]
fn same_parameters_on_fresh_databases_give_the_same_outcomes_and_state() {
    let app = app();
    let (a, b) = (fresh(&app), fresh(&app));
    let ctx = ClientCtx { client_index: 3, home: InstanceId(1), instances: 2 };
    let history = drive(&a, &mut RubisWorkload::bidding(1), &ctx, 42, 1_500);
    let writes = history.iter().filter(|(r, o)| !app.is_read_only(&r.txn) && matches!(o, Outcome::Committed(_))).count();
    assert!(writes > 50, "only {writes} committed writes");
    for (req, outcome) in &history {
        assert_eq!(&b.execute_direct(req).unwrap(), outcome, "{req:?}");
    }
    for table in TABLES {
        assert_eq!(a.dump(table).unwrap(), b.dump(table).unwrap(), "{table}");
    }
    // The emulator itself is deterministic given its generator.
    let again = drive(&fresh(&app), &mut RubisWorkload::bidding(1), &ctx, 42, 1_500);
    assert_eq!(again, history);
}

#[test]
fn the_emulator_follows_the_bidding_mix_and_is_never_refused() {
    let app = app();
    let db = fresh(&app);
    let instances = 3;
    let clients: Vec<ClientCtx> =
        (0..instances as u64).map(|c| ClientCtx { client_index: c, home: InstanceId(c as u32), instances }).collect();
    let mut workloads: Vec<RubisWorkload> = clients.iter().map(|_| RubisWorkload::bidding(1)).collect();
    let mut rngs: Vec<SmallRng> = (0..clients.len()).map(|c| SmallRng::seed_from_u64(100 + c as u64)).collect();
    let mut per_txn: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut remote_items, mut items) = (0u64, 0u64);
    let steps = 4_000;
    for step in 0..steps {
        for (c, ctx) in clients.iter().enumerate() {
            let (txn, params) = workloads[c].next(&mut rngs[c], ctx);
            let req = Request { client: ClientId(c as u64), seq: step, txn, params };
            let outcome = db.execute_direct(&req).unwrap_or_else(|e| panic!("request {req:?} refused: {e}"));
            workloads[c].observe(&req.txn, &outcome);
            let e = per_txn.entry(req.txn.clone()).or_default();
            e.0 += 1;
            e.1 += matches!(outcome, Outcome::Aborted { .. }) as u64;
            let t = app.txn(&req.txn).unwrap();
            let home = |v: &Value| int(v).rem_euclid(instances as i64) == ctx.home.0 as i64;
            // The logged-in user and every minted id route home.
            for (p, v) in t.params.iter().zip(&req.params) {
                match p.name {
                    "user_id" | "from_user_id" if req.txn != "ViewUserInfo" => assert!(home(v), "{req:?}"),
                    "bid_id" | "buy_now_id" | "comment_id" => assert!(home(v) && int(v) >= MINT_BASE as i64, "{req:?}"),
                    "item_id" if req.txn == "RegisterItem" => assert!(home(v), "{req:?}"),
                    "item_id" => {
                        items += 1;
                        remote_items += !home(v) as u64;
                    }
                    "nickname" if req.txn != "RegisterUser" => {
                        let id: i64 = v.as_text().unwrap().trim_start_matches("user").parse().unwrap();
                        assert!(home(&i(id)), "{req:?}");
                    }
                    _ => {}
                }
            }
        }
    }
    let total: u64 = per_txn.values().map(|(n, _)| n).sum();
    let aborts: u64 = per_txn.values().map(|(_, a)| a).sum();
    eprintln!("{total} transactions, {aborts} aborted; per transaction (issued, aborted): {per_txn:?}");
    eprintln!("{remote_items} of {items} item ids route away from the client's home");
    assert_eq!(per_txn.len(), 26, "every transaction type is issued: {:?}", per_txn.keys());
    assert!((aborts as f64) < 0.02 * total as f64, "{aborts} of {total} aborted");
    assert!((remote_items as f64) < 0.05 * items as f64);

    // Each interaction's next step follows its column of the table.
    let mix = RubisMix::bidding();
    let mut counts = [[0u64; OUTCOMES]; INTERACTIONS];
    for w in &workloads {
        for (from, row) in w.transitions().iter().enumerate() {
            for (next, n) in row.iter().enumerate() {
                counts[from][next] += n;
            }
        }
    }
    let mut checked = 0;
    for from in Interaction::ALL {
        let row = counts[from.index()];
        let n: u64 = row.iter().sum();
        if n < 200 {
            continue;
        }
        checked += 1;
        for (k, seen) in row.iter().enumerate() {
            let expected = mix.probability(from, Next::from_index(k));
            let got = *seen as f64 / n as f64;
            let tolerance = 4.0 * (expected * (1.0 - expected) / n as f64).sqrt() + 0.005;
            assert!((got - expected).abs() <= tolerance, "{from:?} -> {:?}: {got:.4} vs {expected:.4} over {n}", Next::from_index(k));
        }
    }
    assert!(checked >= 15, "only {checked} interactions were visited often enough");
    // Visit frequencies are those of a long walk of the table alone.
    let visits: Vec<u64> = (0..INTERACTIONS).map(|k| workloads.iter().map(|w| w.visits()[k]).sum()).collect();
    let n: u64 = visits.iter().sum();
    let reference = table_walk_frequencies(&mix, 400_000);
    for it in Interaction::ALL {
        let got = visits[it.index()] as f64 / n as f64;
        let expected = reference[it.index()];
        assert!((got - expected).abs() < 0.012, "{it:?}: visited {got:.4}, table walk {expected:.4}");
    }
}

/// Visit frequencies of a walk of the table with no database.
fn table_walk_frequencies(mix: &RubisMix, steps: u64) -> Vec<f64> {
    let mut rng = SmallRng::seed_from_u64(9);
    let mut walk = ensemble_app::apps::rubis::mix::Walk::default();
    let mut visits = vec![0u64; INTERACTIONS];
    for _ in 0..steps {
        visits[walk.state.index()] += 1;
        walk.step(mix, &mut rng);
    }
    visits.into_iter().map(|v| v as f64 / steps as f64).collect()
}

/// Share of writing transactions over `steps` transactions of one client on a fresh database.
fn measured_write_share(app: &Arc<Application>, mut w: RubisWorkload, steps: usize) -> f64 {
    let db = fresh(app);
    let ctx = ClientCtx { client_index: 0, home: InstanceId(0), instances: 1 };
    let history = drive(&db, &mut w, &ctx, 5, steps);
    history.iter().filter(|(r, _)| !app.is_read_only(&r.txn)).count() as f64 / steps as f64
}

#[test]
fn the_write_share_knob_moves_the_measured_share() {
    let app = app();
    let default = measured_write_share(&app, RubisWorkload::bidding(1), 10_000);
    let knob = RubisWorkload::with_write_share(1, 0.15);
    let boost = knob.mix().write_boost();
    let tuned = measured_write_share(&app, knob, 10_000);
    eprintln!("writing transactions over 10,000 steps: reference mix {default:.4}, knob at 0.15 {tuned:.4} (boost {boost:.3})");
    assert!((0.06..=0.10).contains(&default), "reference mix: {default}");
    assert!((tuned - 0.15).abs() <= 0.02, "knob at 0.15: {tuned}");
    assert!(boost > 1.0);
    // The knob is monotone and the reference is its identity.
    assert_eq!(RubisMix::with_write_boost(1.0), RubisMix::bidding());
    let low = RubisMix::for_write_share(0.05).estimate_write_share(50_000, 3);
    let high = RubisMix::for_write_share(0.20).estimate_write_share(50_000, 3);
    assert!((low - 0.05).abs() < 0.01 && (high - 0.20).abs() < 0.01, "{low} {high}");
}

#[test]
fn remote_items_knob_sends_item_picks_away_from_home() {
    let app = app();
    let ctx = ClientCtx { client_index: 1, home: InstanceId(2), instances: 4 };
    let remote_share = |remote: f64| {
        let db = fresh(&app);
        let mut w = RubisWorkload::new(1, Arc::new(RubisMix::bidding()), remote);
        let history = drive(&db, &mut w, &ctx, 11, 3_000);
        let picks: Vec<i64> = history
            .iter()
            .filter(|(r, _)| matches!(r.txn.as_str(), "ViewItem" | "PutBid" | "BuyNow"))
            .map(|(r, _)| int(&r.params[if r.txn == "ViewItem" { 0 } else { 1 }]))
            .collect();
        picks.iter().filter(|id| id.rem_euclid(4) != 2).count() as f64 / picks.len() as f64
    };
    let (none, half) = (remote_share(0.0), remote_share(0.5));
    eprintln!("remote item picks: {none:.3} with the knob at 0, {half:.3} at 0.5");
    assert_eq!(none, 0.0);
    // Half the picks ignore the preference; three quarters of a page's items are remote.
    assert!((0.2..=0.5).contains(&half), "{half}");
}

#[test]
fn transaction_frequencies_cover_every_type() {
    let freq = RubisMix::bidding().transaction_frequencies(100_000, 1);
    assert_eq!(freq.len(), 26);
    let total: f64 = freq.iter().map(|(_, f)| f).sum();
    assert!((total - 1.0).abs() < 1e-9);
    let app = app();
    let writes: f64 = freq.iter().filter(|(t, _)| !app.is_read_only(t)).map(|(_, f)| f).sum();
    let estimate = RubisMix::bidding().estimate_write_share(100_000, 1);
    assert!((writes - estimate).abs() < 1e-9, "{writes} {estimate}");
    // PutCommentAuth is also the page that PutComment authenticates with, so it is issued.
    assert!(freq.iter().all(|(_, f)| *f > 0.0), "{freq:?}");
}
