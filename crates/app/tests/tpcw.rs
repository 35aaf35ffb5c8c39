//! TPC-W on SQLite: the generated database, each of the twenty transactions, determinism, and the
//! emulated browser (no refused requests, the Shopping Mix's frequencies, the write-share knob).

use ensemble_app::apps::tpcw::{self, Cardinalities, TpcwWorkload, INTERACTIONS, SPEC_SHOPPING_FREQUENCIES, WRITING_TRANSACTIONS};
use ensemble_app::{Application, ClientCtx, DataConfig, InstanceId, Workload};
use ensemble_core::{ClientId, Outcome, Request, Rows, Value};
use ensemble_sqlite::SqliteStorage;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const NOW: i64 = tpcw::BASE_TIME + 1_000;








mod common;
use common::{aborted, i, int, ok, t};

fn fresh() -> SqliteStorage {
    common::fresh(&tpcw::application())
}

fn txt(v: &Value) -> &str {
    v.as_text().unwrap()
}

/// Column `name` of `table`, by the schema's order (what `dump` returns).
fn col(app: &Application, table: &str, name: &str) -> usize {
    app.table(table).unwrap().columns.iter().position(|c| c.name == name).unwrap()
}

/// The rows of `table` keyed by their first column.
fn by_id(s: &SqliteStorage, table: &str) -> BTreeMap<i64, Vec<Value>> {
    s.dump(table).unwrap().into_iter().map(|r| (int(&r[0]), r)).collect()
}

fn all_tables(s: &SqliteStorage) -> Vec<(String, Rows)> {
    s.application().tables.iter().map(|t| (t.name.clone(), s.dump(&t.name).unwrap())).collect()
}

#[test]
fn registered_with_twenty_transactions_thirteen_read_only() {
    assert!(ensemble_app::APPLICATIONS.contains(&"tpcw"));
    let app = ensemble_app::model::application("tpcw").unwrap();
    let tables: Vec<&str> = app.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tables.len(), 10, "{tables:?}");
    assert_eq!(app.transactions.len(), 20);
    let writing: BTreeSet<&str> = app.transactions.iter().map(|t| t.name).filter(|n| !app.is_read_only(n)).collect();
    assert_eq!(writing, WRITING_TRANSACTIONS.into_iter().collect());
    assert_eq!(app.transactions.len() - writing.len(), 13);
    assert_eq!(app.table("order_line").unwrap().primary_key, ["ol_o_id", "ol_id"]);
    assert_eq!(app.table("shopping_cart_line").unwrap().primary_key, ["scl_sc_id", "scl_i_id"]);
}

#[test]
fn generated_database_has_the_specified_cardinalities() {
    // How long generating and loading take is measured by `cargo bench -p ensemble-app --bench load`.
    let app = tpcw::application();
    let data = (app.generate)(DataConfig { scale: 1, seed: 1 });
    let s = SqliteStorage::open_in_memory(app.clone(), InstanceId(0)).unwrap();
    s.create_schema().unwrap();
    s.load(&data, |_, _, _| true).unwrap();

    let n = Cardinalities::new(1);
    assert_eq!((n.items, n.authors, n.customers, n.addresses, n.orders, n.countries), (1000, 250, 2880, 5760, 2592, 92));
    let count = |t: &str| s.dump(t).unwrap().len() as i64;
    assert_eq!(count("country"), 92);
    assert_eq!(count("author"), 250);
    assert_eq!(count("item"), 1000);
    assert_eq!(count("customer"), 2880);
    assert_eq!(count("address"), 5760);
    assert_eq!(count("orders"), 2592);
    assert_eq!(count("cc_xacts"), 2592);
    assert_eq!(count("shopping_cart"), 0);
    assert_eq!(count("shopping_cart_line"), 0);
    let lines = s.dump("order_line").unwrap();
    let mut per_order: BTreeMap<i64, i64> = BTreeMap::new();
    for l in &lines {
        *per_order.entry(int(&l[1])).or_default() += 1;
    }
    assert_eq!(per_order.len(), 2592);
    assert!(per_order.values().all(|k| (1..=5).contains(k)));
    assert!(per_order.values().any(|k| *k == 1) && per_order.values().any(|k| *k == 5));

    let items = s.dump("item").unwrap();
    let subjects: BTreeSet<&str> = items.iter().map(|r| txt(&r[col(&app, "item", "i_subject")])).collect();
    assert_eq!(subjects.len(), 24);
    let authors: BTreeSet<i64> = items.iter().map(|r| int(&r[col(&app, "item", "i_a_id")])).collect();
    assert_eq!(authors.len(), 250, "every author wrote a book");
    for r in &items {
        let related: BTreeSet<i64> = (1..=5).map(|k| int(&r[col(&app, "item", &format!("i_related{k}"))])).collect();
        assert_eq!(related.len(), 5);
        assert!(!related.contains(&int(&r[0])));
    }
    for c in s.dump("customer").unwrap() {
        let uname = tpcw::user_name(int(&c[0]));
        assert_eq!(txt(&c[1]), uname);
        assert_eq!(txt(&c[2]), uname.to_lowercase());
    }

    // Same seed, same data; another seed, other data.
    let again = (app.generate)(DataConfig { scale: 1, seed: 1 });
    let other = (app.generate)(DataConfig { scale: 1, seed: 2 });
    for ((a, b), c) in data.tables.iter().zip(&again.tables).zip(&other.tables) {
        assert_eq!(a.rows, b.rows, "{}", a.table);
        if a.table != "country" && !a.rows.is_empty() {
            assert_ne!(a.rows, c.rows, "{}", a.table);
        }
    }
    let two = (app.generate)(DataConfig { scale: 2, seed: 1 });
    let customers = two.tables.iter().find(|t| t.table == "customer").unwrap();
    assert_eq!(customers.rows.len(), 5760);
}

#[test]
fn browsing_transactions_return_what_the_pages_show() {
    let s = fresh();
    let app = s.application().clone();
    let items = by_id(&s, "item");
    let authors = by_id(&s, "author");

    let name = ok(&s, "getName", vec![i(7)]);
    let c7 = &by_id(&s, "customer")[&7];
    assert_eq!(name, vec![vec![c7[3].clone(), c7[4].clone()]]);
    assert!(ok(&s, "getName", vec![i(999_999)]).is_empty());

    let book = ok(&s, "getBook", vec![i(12)]);
    assert_eq!(book.len(), 1);
    assert_eq!(book[0][0], i(12));
    assert_eq!(book[0][1], items[&12][1]);
    let a = &authors[&int(&items[&12][col(&app, "item", "i_a_id")])];
    assert_eq!((&book[0][2], &book[0][3]), (&a[1], &a[2]));

    let cust = ok(&s, "getCustomer", vec![t(&tpcw::user_name(7))]);
    assert_eq!(cust.len(), 1);
    assert_eq!(cust[0][0], i(7));
    assert!(ok(&s, "getCustomer", vec![t("NOBODY")]).is_empty());

    let subject = ok(&s, "doSubjectSearch", vec![t("HISTORY")]);
    assert!(!subject.is_empty() && subject.len() <= 50);
    let is = col(&app, "item", "i_subject");
    assert!(subject.iter().all(|r| txt(&items[&int(&r[0])][is]) == "HISTORY"));
    let titles: Vec<(&str, i64)> = subject.iter().map(|r| (txt(&r[1]), int(&r[0]))).collect();
    assert!(titles.windows(2).all(|w| w[0] <= w[1]), "ordered by title");

    let word = tpcw::title_word(17);
    let by_title = ok(&s, "doTitleSearch", vec![t(&word)]);
    let expected = items.values().filter(|r| txt(&r[1]).contains(&word)).count().min(50);
    assert_eq!(by_title.len(), expected);
    assert!(expected > 0 && by_title.iter().all(|r| txt(&r[1]).contains(&word)));

    let prefix = tpcw::digsyl(4, 2);
    let by_author = ok(&s, "doAuthorSearch", vec![t(&prefix)]);
    let expected = items.values().filter(|r| txt(&authors[&int(&r[2])][2]).starts_with(&prefix)).count().min(50);
    assert_eq!(by_author.len(), expected);
    assert!(expected > 0 && by_author.iter().all(|r| txt(&r[3]).starts_with(&prefix)));

    let new = ok(&s, "getNewProducts", vec![t("ARTS")]);
    let pd = col(&app, "item", "i_pub_date");
    let dates: Vec<i64> = new.iter().map(|r| int(&items[&int(&r[0])][pd])).collect();
    assert!(!dates.is_empty() && dates.windows(2).all(|w| w[0] >= w[1]));
    let mut newest: Vec<(i64, i64)> =
        items.values().filter(|r| txt(&r[is]) == "ARTS").map(|r| (-int(&r[pd]), int(&r[0]))).collect();
    newest.sort();
    assert_eq!(new.iter().map(|r| int(&r[0])).collect::<Vec<_>>(), newest.iter().take(50).map(|x| x.1).collect::<Vec<_>>());

    let related = ok(&s, "getRelated", vec![i(3)]);
    let want: Vec<i64> = (1..=5).map(|k| int(&items[&3][col(&app, "item", &format!("i_related{k}"))])).collect();
    assert_eq!(related.iter().map(|r| int(&r[0])).collect::<Vec<_>>(), want);
    let thumb = col(&app, "item", "i_thumbnail");
    assert!(related.iter().all(|r| r[1] == items[&int(&r[0])][thumb]));
    assert!(ok(&s, "getRelated", vec![i(5_000)]).is_empty());

    assert_eq!(ok(&s, "getUserName", vec![i(7)]), vec![vec![t(&tpcw::user_name(7))]]);
    assert_eq!(ok(&s, "getPassword", vec![t(&tpcw::user_name(7))]), vec![vec![t(&tpcw::user_name(7).to_lowercase())]]);
}

/// The best sellers of a subject computed from the tables: quantities over the last 3,333 orders.
fn expected_best_sellers(s: &SqliteStorage, subject: &str) -> Vec<i64> {
    let app = s.application().clone();
    let mut orders: Vec<(i64, i64)> = s.dump("orders").unwrap().iter().map(|o| (int(&o[2]), int(&o[0]))).collect();
    orders.sort_by(|a, b| b.cmp(a));
    let recent: BTreeSet<i64> = orders.iter().take(3333).map(|o| o.1).collect();
    let items = by_id(s, "item");
    let is = col(&app, "item", "i_subject");
    let mut sold: BTreeMap<i64, i64> = BTreeMap::new();
    for l in s.dump("order_line").unwrap() {
        let (o, item, qty) = (int(&l[1]), int(&l[2]), int(&l[3]));
        if recent.contains(&o) && txt(&items[&item][is]) == subject {
            *sold.entry(item).or_default() += qty;
        }
    }
    let mut ranked: Vec<(i64, i64)> = sold.into_iter().map(|(item, q)| (-q, item)).collect();
    ranked.sort();
    ranked.into_iter().take(50).map(|x| x.1).collect()
}

#[test]
fn best_sellers_rank_the_last_3333_orders() {
    let s = fresh();
    for subject in ["ARTS", "TRAVEL", "COMPUTERS"] {
        let got = ok(&s, "getBestSellers", vec![t(subject)]);
        assert!(!got.is_empty());
        assert_eq!(got.iter().map(|r| int(&r[0])).collect::<Vec<_>>(), expected_best_sellers(&s, subject), "{subject}");
    }
    // With more than 3,333 orders the window slides: buy a lot of one book now and it leads.
    let app = s.application().clone();
    let items = by_id(&s, "item");
    let book = *items.keys().find(|k| txt(&items[k][col(&app, "item", "i_subject")]) == "TRAVEL").unwrap();
    for k in 0..800 {
        let sc = 10_000_000 + k;
        ok(&s, "createEmptyCart", vec![i(sc), i(NOW)]);
        ok(&s, "doCart", vec![i(sc), i(book), t(&format!("{book}:9")), i(1), i(NOW)]);
        ok(&s, "doBuyConfirm", buy_params(sc, 1 + k % 2880, 20_000_000 + k, NOW + k));
    }
    let got = ok(&s, "getBestSellers", vec![t("TRAVEL")]);
    assert_eq!(got[0][0], i(book));
    assert_eq!(got.iter().map(|r| int(&r[0])).collect::<Vec<_>>(), expected_best_sellers(&s, "TRAVEL"));
}

#[test]
fn most_recent_order_shows_header_then_lines() {
    let s = fresh();
    let orders = s.dump("orders").unwrap();
    let c_id = int(&orders[0][1]);
    let latest = orders.iter().filter(|o| int(&o[1]) == c_id).max_by_key(|o| (int(&o[2]), int(&o[0]))).unwrap();
    let o_id = int(&latest[0]);
    let lines = s.dump("order_line").unwrap().into_iter().filter(|l| int(&l[1]) == o_id).count();
    let got = ok(&s, "getMostRecentOrder", vec![t(&tpcw::user_name(c_id))]);
    assert_eq!(got.len(), 1 + lines);
    assert_eq!(got[0][0], i(o_id));
    assert_eq!(got[0][8], latest[5], "o_total");
    // A customer who never ordered has no most recent order.
    let buyers: BTreeSet<i64> = orders.iter().map(|o| int(&o[1])).collect();
    let idle = (1..=2880).find(|c| !buyers.contains(c)).unwrap();
    assert!(ok(&s, "getMostRecentOrder", vec![t(&tpcw::user_name(idle))]).is_empty());
}

fn cart_of(rows: &Rows) -> Vec<(i64, i64)> {
    rows.iter().map(|r| (int(&r[0]), int(&r[1]))).collect()
}

#[test]
fn cart_round_trip() {
    let s = fresh();
    let app = s.application().clone();
    let items = by_id(&s, "item");
    let sc = 5_000_001;
    assert_eq!(ok(&s, "createEmptyCart", vec![i(sc), i(NOW)]), vec![vec![i(sc)]]);
    assert!(aborted(&s, "createEmptyCart", vec![i(sc), i(NOW)]).contains("exists"));
    assert!(ok(&s, "getCart", vec![i(sc)]).is_empty());

    let cart = |txn_rows: Rows| cart_of(&txn_rows);
    assert_eq!(cart(ok(&s, "doCart", vec![i(sc), i(7), t(""), i(500), i(NOW + 1)])), [(7, 1)]);
    assert_eq!(cart(ok(&s, "doCart", vec![i(sc), i(7), t(""), i(500), i(NOW + 2)])), [(7, 2)]);
    assert_eq!(cart(ok(&s, "doCart", vec![i(sc), i(9), t(""), i(500), i(NOW + 3)])), [(7, 2), (9, 1)]);
    let lines = ok(&s, "doCart", vec![i(sc), i(0), t("7:5, 9:0"), i(500), i(NOW + 4)]);
    assert_eq!(cart_of(&lines), [(7, 5)]);
    // The line copies the item's cost, list price, title and backing.
    let item7 = &items[&7];
    assert_eq!(lines[0][2], item7[col(&app, "item", "i_cost")]);
    assert_eq!(lines[0][3], item7[col(&app, "item", "i_srp")]);
    assert_eq!(lines[0][4], item7[1]);
    assert_eq!(lines[0][5], item7[col(&app, "item", "i_backing")]);
    assert_eq!(ok(&s, "getCart", vec![i(sc)]), lines);
    assert_eq!(by_id(&s, "shopping_cart")[&sc][1], i(NOW + 4), "sc_time is the last doCart's now");

    // Emptied by the shopper, the cart receives the client's random item.
    assert_eq!(cart(ok(&s, "doCart", vec![i(sc), i(0), t("7:0"), i(500), i(NOW + 5)])), [(500, 1)]);
    // Viewing a non-empty cart changes nothing but its time.
    assert_eq!(cart(ok(&s, "doCart", vec![i(sc), i(0), t(""), i(42), i(NOW + 6)])), [(500, 1)]);

    let before = all_tables(&s);
    assert!(aborted(&s, "doCart", vec![i(sc + 1), i(7), t(""), i(500), i(NOW)]).contains("no shopping cart"));
    assert!(aborted(&s, "doCart", vec![i(sc), i(7), t("seven"), i(500), i(NOW)]).contains("malformed"));
    assert!(aborted(&s, "doCart", vec![i(sc), i(4242), t(""), i(500), i(NOW)]).contains("no item"));
    assert_eq!(all_tables(&s), before, "aborted doCart writes nothing");
}

fn buy_params(sc: i64, c_id: i64, o_id: i64, now: i64) -> Vec<Value> {
    vec![
        i(sc),
        i(c_id),
        i(o_id),
        t("VISA"),
        t("1234567890123456"),
        t("Ada Lovelace"),
        i(now + 365 * tpcw::DAY),
        t("AUTH12345678901"),
        t("AIR"),
        i(now + 3 * tpcw::DAY),
        t("leave at the door"),
        i(now),
    ]
}

#[test]
fn buy_confirm_turns_the_cart_into_an_order() {
    let s = fresh();
    let app = s.application().clone();
    let items = by_id(&s, "item");
    let (stock, cost) = (col(&app, "item", "i_stock"), col(&app, "item", "i_cost"));
    // One item that will fall below 10 (restocked by 21), one that will not.
    let low = *items.keys().find(|k| int(&items[k][stock]) >= 12).unwrap();
    let high = *items.keys().find(|k| **k != low && int(&items[k][stock]) >= 11).unwrap();
    let (low_stock, high_stock) = (int(&items[&low][stock]), int(&items[&high][stock]));
    let low_qty = low_stock - 5;

    let (sc, c_id, o_id) = (6_000_001, 42, 7_000_001);
    ok(&s, "createEmptyCart", vec![i(sc), i(NOW)]);
    ok(&s, "doCart", vec![i(sc), i(low), t(""), i(1), i(NOW)]);
    ok(&s, "doCart", vec![i(sc), i(high), t(&format!("{low}:{low_qty}")), i(1), i(NOW)]);

    // An admin changes a price after the item went into the cart: the order uses the current cost.
    ok(&s, "adminUpdate", vec![i(high), i(777), t("img/x.gif"), t("img/x_t.gif"), i(NOW)]);
    let customer = by_id(&s, "customer")[&c_id].clone();
    let discount = int(&customer[col(&app, "customer", "c_discount")]);
    let addr = int(&customer[col(&app, "customer", "c_addr_id")]);
    let addr_co = int(&by_id(&s, "address")[&addr][6]);

    let got = ok(&s, "doBuyConfirm", buy_params(sc, c_id, o_id, NOW + 10));
    let mut sorted = [(low, int(&items[&low][cost]), low_qty), (high, 777, 1)];
    sorted.sort();
    let (sub, tax, total) = tpcw::order_totals(&sorted.iter().map(|(_, c, q)| (*c, *q)).collect::<Vec<_>>(), discount);
    assert_eq!(got, vec![vec![i(o_id), i(sub), i(tax), i(total)]]);

    let order = &by_id(&s, "orders")[&o_id];
    assert_eq!(
        order,
        &vec![
            i(o_id),
            i(c_id),
            i(NOW + 10),
            i(sub),
            i(tax),
            i(total),
            t("AIR"),
            i(NOW + 10 + 3 * tpcw::DAY),
            i(addr),
            i(addr),
            t("PENDING")
        ]
    );
    let lines: Vec<Vec<Value>> = s.dump("order_line").unwrap().into_iter().filter(|l| int(&l[1]) == o_id).collect();
    assert_eq!(lines.len(), 2);
    for (n, ((item, _, qty), line)) in sorted.iter().zip(&lines).enumerate() {
        assert_eq!(line, &vec![i(n as i64 + 1), i(o_id), i(*item), i(*qty), i(discount), t("leave at the door")]);
    }
    let cx = &by_id(&s, "cc_xacts")[&o_id];
    assert_eq!(
        cx,
        &vec![
            i(o_id),
            t("VISA"),
            t("1234567890123456"),
            t("Ada Lovelace"),
            i(NOW + 10 + 365 * tpcw::DAY),
            t("AUTH12345678901"),
            i(total),
            i(NOW + 10),
            i(addr_co)
        ]
    );
    let after = by_id(&s, "item");
    assert_eq!(int(&after[&low][stock]), 5 + 21, "restocked");
    assert_eq!(int(&after[&high][stock]), high_stock - 1);
    assert_eq!(int(&after[&low][stock]), tpcw::stock_after(low_stock, low_qty));
    assert!(ok(&s, "getCart", vec![i(sc)]).is_empty(), "the cart is emptied");
    assert!(by_id(&s, "shopping_cart").contains_key(&sc), "but kept for the session");

    // Nothing is written by a refused order.
    let before = all_tables(&s);
    assert!(aborted(&s, "doBuyConfirm", buy_params(sc, c_id, o_id, NOW)).contains("exists"));
    assert!(aborted(&s, "doBuyConfirm", buy_params(sc, c_id, o_id + 1, NOW)).contains("empty"));
    assert!(aborted(&s, "doBuyConfirm", buy_params(sc, 999_999, o_id + 1, NOW)).contains("no customer"));
    assert_eq!(all_tables(&s), before);
}

#[test]
fn buy_confirm_with_a_new_address_ships_there() {
    let s = fresh();
    let (sc, c_id, o_id, addr_id) = (6_000_002, 43, 7_000_002, 8_000_002);
    ok(&s, "createEmptyCart", vec![i(sc), i(NOW)]);
    ok(&s, "doCart", vec![i(sc), i(11), t(""), i(1), i(NOW)]);
    let mut params = buy_params(sc, c_id, o_id, NOW);
    params.extend([i(addr_id), t("1 Main St"), t("Apt 2"), t("Springfield"), t("IL"), t("62701"), t("Japan")]);
    let before = s.dump("cc_xacts").unwrap().len();
    ok(&s, "doBuyConfirmNewAddress", params.clone());
    let japan = int(&s.dump("country").unwrap().iter().find(|c| txt(&c[1]) == "Japan").unwrap()[0]);
    assert_eq!(
        by_id(&s, "address")[&addr_id],
        vec![i(addr_id), t("1 Main St"), t("Apt 2"), t("Springfield"), t("IL"), t("62701"), i(japan)]
    );
    let order = &by_id(&s, "orders")[&o_id];
    assert_eq!(order[9], i(addr_id), "shipped to the new address");
    assert_ne!(order[8], i(addr_id), "billed to the customer's own");
    assert_eq!(by_id(&s, "cc_xacts")[&o_id][8], i(japan));
    assert_eq!(s.dump("cc_xacts").unwrap().len(), before + 1);
    // An unknown country refuses the whole order.
    ok(&s, "doCart", vec![i(sc), i(11), t(""), i(1), i(NOW)]);
    params[2] = i(o_id + 1);
    params[12] = i(addr_id + 1);
    params[18] = t("Atlantis");
    assert!(aborted(&s, "doBuyConfirmNewAddress", params).contains("Atlantis"));
    assert!(!by_id(&s, "orders").contains_key(&(o_id + 1)));
}

fn new_customer_params(c_id: i64, addr_id: i64, country: &str) -> Vec<Value> {
    vec![
        i(c_id),
        i(addr_id),
        t("Grace"),
        t("Hopper"),
        t("12 Navy Rd"),
        t("Suite 3"),
        t("Arlington"),
        t("VA"),
        t("22201"),
        t(country),
        t("5551234567"),
        t("grace@hopper.com"),
        i(-2_000_000_000),
        t("some data"),
        i(12),
        i(NOW),
    ]
}

#[test]
fn customers_register_log_in_and_refresh_their_session() {
    let s = fresh();
    let app = s.application().clone();
    let (c_id, addr_id) = (9_000_001, 9_000_002);
    let uname = tpcw::user_name(c_id);
    assert_eq!(ok(&s, "createNewCustomer", new_customer_params(c_id, addr_id, "Canada")), vec![vec![
        i(c_id),
        t(&uname),
        t(&uname.to_lowercase()),
        i(12)
    ]]);
    let c = &by_id(&s, "customer")[&c_id];
    let get = |name: &str| c[col(&app, "customer", name)].clone();
    assert_eq!(get("c_addr_id"), i(addr_id));
    assert_eq!((get("c_since"), get("c_last_login"), get("c_login")), (i(NOW), i(NOW), i(NOW)));
    assert_eq!(get("c_expiration"), i(NOW + tpcw::SESSION_SECONDS));
    assert_eq!((get("c_balance"), get("c_ytd_pmt"), get("c_discount")), (i(0), i(0), i(12)));
    let canada = int(&s.dump("country").unwrap().iter().find(|c| txt(&c[1]) == "Canada").unwrap()[0]);
    assert_eq!(by_id(&s, "address")[&addr_id][6], i(canada));

    let login = ok(&s, "getCustomer", vec![t(&uname)]);
    assert_eq!(login[0][0], i(c_id));
    assert_eq!(login.last().unwrap().last().unwrap(), &t("Canada"));

    let before = all_tables(&s);
    assert!(aborted(&s, "createNewCustomer", new_customer_params(c_id, addr_id + 10, "Canada")).contains("exists"));
    assert!(aborted(&s, "createNewCustomer", new_customer_params(c_id + 10, addr_id, "Canada")).contains("exists"));
    assert!(aborted(&s, "createNewCustomer", new_customer_params(c_id + 10, addr_id + 10, "Atlantis")).contains("Atlantis"));
    assert_eq!(all_tables(&s), before);

    ok(&s, "refreshSession", vec![i(c_id), i(NOW + 500)]);
    let c = &by_id(&s, "customer")[&c_id];
    assert_eq!(c[col(&app, "customer", "c_login")], i(NOW + 500));
    assert_eq!(c[col(&app, "customer", "c_expiration")], i(NOW + 500 + tpcw::SESSION_SECONDS));
    assert!(aborted(&s, "refreshSession", vec![i(123_456_789), i(NOW)]).contains("no customer"));
}

#[test]
fn admin_update_sets_the_item_and_recomputes_related_items() {
    let s = fresh();
    let app = s.application().clone();
    let orders = by_id(&s, "orders");
    let lines = s.dump("order_line").unwrap();
    // At scale 1 all 2,592 orders are within the last 10,000.
    let bought_by: BTreeMap<i64, BTreeSet<i64>> = lines.iter().fold(BTreeMap::new(), |mut m, l| {
        m.entry(int(&l[2])).or_default().insert(int(&orders[&int(&l[1])][1]));
        m
    });
    let item = *bought_by.iter().max_by_key(|(k, v)| (v.len(), -**k)).unwrap().0;
    let customers = &bought_by[&item];
    let mut qty: BTreeMap<i64, i64> = BTreeMap::new();
    for l in &lines {
        if int(&l[2]) != item && customers.contains(&int(&orders[&int(&l[1])][1])) {
            *qty.entry(int(&l[2])).or_default() += int(&l[3]);
        }
    }
    let mut ranked: Vec<(i64, i64)> = qty.into_iter().map(|(i, q)| (-q, i)).collect();
    ranked.sort();
    let expected: Vec<i64> = ranked.iter().take(5).map(|x| x.1).collect();
    assert_eq!(expected.len(), 5);

    let got = ok(&s, "adminUpdate", vec![i(item), i(1234), t("img1/new.gif"), t("img1/new_t.gif"), i(NOW)]);
    assert_eq!(got, vec![expected.iter().map(|x| i(*x)).collect::<Vec<_>>()]);
    let row = &by_id(&s, "item")[&item];
    let get = |name: &str| row[col(&app, "item", name)].clone();
    assert_eq!((get("i_cost"), get("i_image"), get("i_thumbnail"), get("i_pub_date")), (
        i(1234),
        t("img1/new.gif"),
        t("img1/new_t.gif"),
        i(NOW)
    ));
    let related: Vec<i64> = (1..=5).map(|k| int(&get(&format!("i_related{k}")))).collect();
    assert_eq!(related, expected);

    // An item nobody bought keeps its related items (at scale 1 every item sold: unsell one).
    let unsold = 321;
    s.connection().execute("DELETE FROM order_line WHERE ol_i_id = ?1", [unsold]).unwrap();
    let items = by_id(&s, "item");
    let old: Vec<Value> = (1..=5).map(|k| items[&unsold][col(&app, "item", &format!("i_related{k}"))].clone()).collect();
    assert_eq!(ok(&s, "adminUpdate", vec![i(unsold), i(1), t("a"), t("b"), i(NOW)]), vec![old]);
    assert!(aborted(&s, "adminUpdate", vec![i(5_000), i(1), t("a"), t("b"), i(NOW)]).contains("no item"));
}

/// Runs `steps` requests of one emulated browser; returns the requests and their outcomes.
fn emulate(s: &SqliteStorage, w: &mut TpcwWorkload, ctx: &ClientCtx, seed: u64, steps: usize) -> Vec<(Request, Outcome)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut log = Vec::with_capacity(steps);
    for seq in 0..steps as u64 {
        let (txn, params) = w.next(&mut rng, ctx);
        let req = Request { client: ClientId(ctx.client_index), seq, txn, params };
        let outcome = s.execute_direct(&req).unwrap_or_else(|e| panic!("refused {req:?}: {e}"));
        w.observe(&req.txn, &outcome);
        log.push((req, outcome));
    }
    log
}

const CTX: ClientCtx = ClientCtx { client_index: 0, home: InstanceId(0), instances: 1 };

#[test]
fn same_parameters_same_outcomes_and_state() {
    let (a, b) = (fresh(), fresh());
    let log = emulate(&a, &mut TpcwWorkload::new(1).with_write_share(0.3), &CTX, 11, 3_000);
    for (req, outcome) in &log {
        assert_eq!(&b.execute_direct(req).unwrap(), outcome, "{req:?}");
    }
    assert_eq!(all_tables(&a), all_tables(&b));
    assert!(log.iter().any(|(r, _)| r.txn == "doBuyConfirm"));

    // The emulator itself is a function of its seed (and the outcomes, which are).
    let c = fresh();
    let again = emulate(&c, &mut TpcwWorkload::new(1).with_write_share(0.3), &CTX, 11, 3_000);
    assert_eq!(log, again);
    assert_eq!(all_tables(&a), all_tables(&c));
}

#[test]
fn emulator_follows_the_shopping_mix_without_refusals_or_aborts() {
    let s = fresh();
    let mut w = TpcwWorkload::new(1);
    let log = emulate(&s, &mut w, &CTX, 5, 20_000);
    let aborts: Vec<&(Request, Outcome)> = log.iter().filter(|(_, o)| matches!(o, Outcome::Aborted { .. })).collect();
    assert!(aborts.is_empty(), "{} aborts, first {:?}", aborts.len(), aborts.first());

    let counts = w.interaction_counts();
    let total: u64 = counts.iter().sum();
    println!("{total} interactions in 20,000 transactions");
    for (k, interaction) in INTERACTIONS.iter().enumerate() {
        let measured = 100.0 * counts[k] as f64 / total as f64;
        println!("{:>22}: {measured:6.2} % (specification {:5.2} %)", interaction.name(), SPEC_SHOPPING_FREQUENCIES[k]);
        assert!((measured - SPEC_SHOPPING_FREQUENCIES[k]).abs() < 1.5, "{}: {measured}", interaction.name());
        assert!(counts[k] > 0, "{} never visited", interaction.name());
    }
    let issued = w.transaction_counts();
    for t in &s.application().transactions {
        assert!(issued.get(t.name).copied().unwrap_or(0) > 0, "{} never issued", t.name);
    }
}

/// The customer id a user name spells.
fn undigsyl(uname: &str) -> i64 {
    let syllables = ["BA", "OG", "AL", "RI", "RE", "SE", "AT", "UL", "IN", "NG"];
    uname.as_bytes().chunks(2).fold(0, |n, s| {
        10 * n + syllables.iter().position(|x| x.as_bytes() == s).unwrap() as i64
    })
}

#[test]
fn minted_ids_and_logins_route_to_the_home_instance() {
    let s = fresh();
    let app: Arc<Application> = s.application().clone();
    let ctx = ClientCtx { client_index: 3, home: InstanceId(1), instances: 4 };
    let log = emulate(&s, &mut TpcwWorkload::new(1).with_write_share(0.3), &ctx, 9, 5_000);
    let mut checked = 0;
    for (req, _) in &log {
        let txn = app.txn(&req.txn).unwrap();
        for (p, v) in txn.params.iter().zip(&req.params) {
            if ["c_id", "sc_id", "o_id", "addr_id"].contains(&p.name) {
                assert_eq!(int(v).rem_euclid(4), 1, "{req:?}");
                checked += 1;
            }
            if p.name == "c_uname" {
                assert_eq!(undigsyl(txt(v)).rem_euclid(4), 1, "{req:?}");
                checked += 1;
            }
        }
    }
    assert!(checked > 1_000);
    let minted: Vec<i64> = log.iter().filter(|(r, _)| r.txn == "createEmptyCart").map(|(r, _)| int(&r.params[0])).collect();
    assert!(minted.iter().all(|id| *id > Cardinalities::new(1).id_ceiling()));
}

#[test]
fn write_share_knob_moves_the_measured_share() {
    let measure = |w: TpcwWorkload| {
        let s = fresh();
        let mut w = w;
        let planned = w.planned_writing_share();
        emulate(&s, &mut w, &CTX, 21, 10_000);
        (planned, w.writing_share(), w.write_boost())
    };
    let (planned_ref, reference, _) = measure(TpcwWorkload::new(1));
    let (planned_30, thirty, boost) = measure(TpcwWorkload::new(1).with_write_share(0.30));
    println!("reference Shopping Mix: writing transactions {:.1} % (planned {:.1} %)", 100.0 * reference, 100.0 * planned_ref);
    println!(
        "with_write_share(0.30): writing transactions {:.1} % (planned {:.1} %, boost ×{boost:.2})",
        100.0 * thirty,
        100.0 * planned_30
    );
    assert!((0.07..0.16).contains(&reference), "{reference}");
    assert!((thirty - 0.30).abs() < 0.03, "{thirty}");
    let (_, less, _) = measure(TpcwWorkload::new(1).with_write_share(0.05));
    println!("with_write_share(0.05): writing transactions {:.1} %", 100.0 * less);
    assert!((less - 0.05).abs() < 0.02, "{less}");
}
