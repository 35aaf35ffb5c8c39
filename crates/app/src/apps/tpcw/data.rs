//! The initial database, following the population rules of the TPC-W specification (clause 4.7)
//! in shape and cardinality: 92 countries, `ITEMS` items by `ITEMS / 4` authors, 2,880 customers
//! per emulated browser (`scale`) with two addresses each, 0.9 orders per customer with 1–5 lines
//! and one credit-card transaction each, and no shopping carts.
//!
//! Text the transactions search (titles, author last names) is built from DIGSYL syllables in
//! upper case, so searches find a predictable share of the items whether `LIKE` is case-sensitive
//! or not; other text is random letters of the lengths the specification gives.

use super::{
    digsyl, password, title_word, user_name, AUTHOR_NAME_SPACE, BACKINGS, BASE_TIME, CC_TYPES, COUNTRIES, CUSTOMERS_PER_EB, DAY,
    ITEMS, ORDER_STATUSES, SESSION_SECONDS, SHIP_TYPES, SUBJECTS, TITLE_WORDS,
};
use super::txns::order_totals;
use crate::model::{DataConfig, Dataset, TableRows};
use ensemble_core::{Row, Value};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Cardinalities of a database of `scale` emulated browsers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cardinalities {
    pub items: i64,
    pub authors: i64,
    pub customers: i64,
    pub addresses: i64,
    pub orders: i64,
    pub countries: i64,
}

impl Cardinalities {
    pub fn new(scale: u32) -> Self {
        let customers = CUSTOMERS_PER_EB * scale.max(1) as i64;
        Cardinalities {
            items: ITEMS,
            authors: ITEMS / 4,
            customers,
            addresses: 2 * customers,
            orders: customers * 9 / 10,
            countries: COUNTRIES.len() as i64,
        }
    }

    /// One more than the largest id any generated table uses; ids minted by clients start above.
    pub fn id_ceiling(&self) -> i64 {
        self.addresses.max(self.orders).max(self.customers).max(self.items) + 1
    }
}

const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const DIGITS: &[u8] = b"0123456789";

/// A random string of `min..=max` characters from `alphabet` (the specification's a-string and
/// n-string). One 64-bit draw serves eight characters: a database holds millions of them, and the
/// slight bias of `byte % len` is irrelevant to filler text.
pub(crate) fn random_string(rng: &mut (impl Rng + ?Sized), min: usize, max: usize, alphabet: &[u8]) -> String {
    let n = rng.random_range(min..=max);
    let mut s = String::with_capacity(n);
    let mut bits = 0u64;
    for k in 0..n {
        if k % 8 == 0 {
            bits = rng.next_u64();
        }
        s.push(alphabet[(bits & 0xff) as usize % alphabet.len()] as char);
        bits >>= 8;
    }
    s
}

pub(crate) fn a_string(rng: &mut (impl Rng + ?Sized), min: usize, max: usize) -> String {
    random_string(rng, min, max, LETTERS)
}

pub(crate) fn n_string(rng: &mut (impl Rng + ?Sized), min: usize, max: usize) -> String {
    random_string(rng, min, max, DIGITS)
}

/// A title of 3–8 words from the title vocabulary.
fn title(rng: &mut (impl Rng + ?Sized)) -> String {
    let words = rng.random_range(3..=8);
    (0..words).map(|_| title_word(rng.random_range(0..TITLE_WORDS))).collect::<Vec<_>>().join(" ")
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

fn text(s: impl Into<String>) -> Value {
    Value::Text(s.into())
}

fn table(name: &str, columns: &[&str], rows: Vec<Row>) -> TableRows {
    TableRows { table: name.into(), columns: columns.iter().map(|c| c.to_string()).collect(), rows }
}

/// 1800-01-01, 1880-01-01, 1930-01-01 and 1990-01-01 as epoch seconds: the date ranges of author
/// births, customer births and publication.
const Y1800: i64 = -5_364_662_400;
const Y1880: i64 = -2_840_140_800;
const Y1930: i64 = -1_262_304_000;
const Y1990: i64 = 631_152_000;

pub fn generate(cfg: DataConfig) -> Dataset {
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let n = Cardinalities::new(cfg.scale);

    let countries = COUNTRIES
        .iter()
        .enumerate()
        .map(|(i, (name, currency))| {
            // Any fixed rates do; the application only displays them.
            let exchange = if i == 0 { 1.0 } else { 0.25 + ((i as i64 * 37) % 400) as f64 / 100.0 };
            vec![int(i as i64 + 1), text(*name), Value::Real(exchange), text(*currency)]
        })
        .collect();

    let authors = (1..=n.authors)
        .map(|a_id| {
            vec![
                int(a_id),
                text(a_string(&mut rng, 3, 20)),
                text(digsyl(rng.random_range(0..AUTHOR_NAME_SPACE), 3)),
                text(a_string(&mut rng, 1, 20)),
                int(rng.random_range(Y1800..Y1990)),
                text(a_string(&mut rng, 125, 500)),
            ]
        })
        .collect();

    let items = (1..=n.items)
        .map(|i_id| {
            // Every author writes at least one book: the first quarter of the items, one each.
            let a_id = if i_id <= n.authors { i_id } else { rng.random_range(1..=n.authors) };
            let pub_date = rng.random_range(Y1930..BASE_TIME);
            let mut related: Vec<i64> = Vec::with_capacity(5);
            while related.len() < 5 {
                let r = rng.random_range(1..=n.items);
                if r != i_id && !related.contains(&r) {
                    related.push(r);
                }
            }
            let srp = rng.random_range(100..=999_999);
            let cost = srp * (100 - rng.random_range(0..=50)) / 100;
            let mut row = vec![
                int(i_id),
                text(title(&mut rng)),
                int(a_id),
                int(pub_date),
                text(a_string(&mut rng, 14, 60)),
                text(SUBJECTS[rng.random_range(0..SUBJECTS.len())]),
                text(a_string(&mut rng, 100, 500)),
            ];
            row.extend(related.into_iter().map(int));
            row.extend([
                text(format!("img{}/thumb_{i_id}.gif", i_id % 100)),
                text(format!("img{}/image_{i_id}.gif", i_id % 100)),
                int(srp),
                int(cost),
                int(pub_date + rng.random_range(1..=30) * DAY),
                int(rng.random_range(10..=30)),
                text(a_string(&mut rng, 13, 13)),
                int(rng.random_range(20..=9_999)),
                text(BACKINGS[rng.random_range(0..BACKINGS.len())]),
                text(format!("{}x{}x{}", rng.random_range(1..=99), rng.random_range(1..=99), rng.random_range(1..=99))),
            ]);
            row
        })
        .collect();

    let addresses = (1..=n.addresses)
        .map(|addr_id| {
            vec![
                int(addr_id),
                text(a_string(&mut rng, 15, 40)),
                text(a_string(&mut rng, 15, 40)),
                text(a_string(&mut rng, 4, 30)),
                text(a_string(&mut rng, 2, 20)),
                text(a_string(&mut rng, 5, 10)),
                int(rng.random_range(1..=n.countries)),
            ]
        })
        .collect();

    let mut discounts = Vec::with_capacity(n.customers as usize);
    let mut names = Vec::with_capacity(n.customers as usize);
    let customers = (1..=n.customers)
        .map(|c_id| {
            let uname = user_name(c_id);
            let since = BASE_TIME - rng.random_range(1..=730) * DAY;
            let last_login = (since + rng.random_range(0..=60) * DAY).min(BASE_TIME);
            let discount = rng.random_range(0..=50);
            let (fname, lname) = (a_string(&mut rng, 8, 15), a_string(&mut rng, 8, 15));
            discounts.push(discount);
            names.push(format!("{fname} {lname}"));
            vec![
                int(c_id),
                text(uname.clone()),
                text(password(&uname)),
                text(fname),
                text(lname),
                int(rng.random_range(1..=n.addresses)),
                text(n_string(&mut rng, 9, 16)),
                text(format!("{uname}@{}.com", a_string(&mut rng, 3, 10))),
                int(since),
                int(last_login),
                int(BASE_TIME),
                int(BASE_TIME + SESSION_SECONDS),
                int(discount),
                int(0),
                int(rng.random_range(0..=99_999)),
                int(rng.random_range(Y1880..BASE_TIME)),
                text(a_string(&mut rng, 100, 500)),
            ]
        })
        .collect();

    let mut orders = Vec::with_capacity(n.orders as usize);
    let mut lines = Vec::with_capacity(3 * n.orders as usize);
    let mut xacts = Vec::with_capacity(n.orders as usize);
    for o_id in 1..=n.orders {
        let c_id = rng.random_range(1..=n.customers);
        let discount = discounts[(c_id - 1) as usize];
        let date = BASE_TIME - rng.random_range(1..=60 * DAY);
        let mut priced = Vec::new();
        for ol_id in 1..=rng.random_range(1..=5) {
            let (i_id, qty) = (rng.random_range(1..=n.items), rng.random_range(1..=300));
            // The specification prices generated lines at a random cost; any positive one does.
            priced.push((rng.random_range(100..=99_999), qty));
            lines.push(vec![
                int(ol_id),
                int(o_id),
                int(i_id),
                int(qty),
                int(rng.random_range(0..=3)),
                text(a_string(&mut rng, 20, 100)),
            ]);
        }
        let (sub_total, tax, total) = order_totals(&priced, discount);
        let ship_addr = rng.random_range(1..=n.addresses);
        orders.push(vec![
            int(o_id),
            int(c_id),
            int(date),
            int(sub_total),
            int(tax),
            int(total),
            text(SHIP_TYPES[rng.random_range(0..SHIP_TYPES.len())]),
            int(date + rng.random_range(0..=7) * DAY),
            int(rng.random_range(1..=n.addresses)),
            int(ship_addr),
            text(ORDER_STATUSES[rng.random_range(0..ORDER_STATUSES.len())]),
        ]);
        xacts.push(vec![
            int(o_id),
            text(CC_TYPES[rng.random_range(0..CC_TYPES.len())]),
            text(n_string(&mut rng, 16, 16)),
            text(names[(c_id - 1) as usize].clone()),
            int(BASE_TIME + rng.random_range(10..=730) * DAY),
            text(a_string(&mut rng, 15, 15)),
            int(total),
            int(date),
            int(rng.random_range(1..=n.countries)),
        ]);
    }

    Dataset {
        tables: vec![
            table("country", &["co_id", "co_name", "co_exchange", "co_currency"], countries),
            table("author", &["a_id", "a_fname", "a_lname", "a_mname", "a_dob", "a_bio"], authors),
            table(
                "item",
                &[
                    "i_id",
                    "i_title",
                    "i_a_id",
                    "i_pub_date",
                    "i_publisher",
                    "i_subject",
                    "i_desc",
                    "i_related1",
                    "i_related2",
                    "i_related3",
                    "i_related4",
                    "i_related5",
                    "i_thumbnail",
                    "i_image",
                    "i_srp",
                    "i_cost",
                    "i_avail",
                    "i_stock",
                    "i_isbn",
                    "i_page",
                    "i_backing",
                    "i_dimensions",
                ],
                items,
            ),
            table(
                "address",
                &["addr_id", "addr_street1", "addr_street2", "addr_city", "addr_state", "addr_zip", "addr_co_id"],
                addresses,
            ),
            table(
                "customer",
                &[
                    "c_id",
                    "c_uname",
                    "c_passwd",
                    "c_fname",
                    "c_lname",
                    "c_addr_id",
                    "c_phone",
                    "c_email",
                    "c_since",
                    "c_last_login",
                    "c_login",
                    "c_expiration",
                    "c_discount",
                    "c_balance",
                    "c_ytd_pmt",
                    "c_birthdate",
                    "c_data",
                ],
                customers,
            ),
            table(
                "orders",
                &[
                    "o_id",
                    "o_c_id",
                    "o_date",
                    "o_sub_total",
                    "o_tax",
                    "o_total",
                    "o_ship_type",
                    "o_ship_date",
                    "o_bill_addr_id",
                    "o_ship_addr_id",
                    "o_status",
                ],
                orders,
            ),
            table("order_line", &["ol_id", "ol_o_id", "ol_i_id", "ol_qty", "ol_discount", "ol_comments"], lines),
            table(
                "cc_xacts",
                &[
                    "cx_o_id",
                    "cx_type",
                    "cx_num",
                    "cx_name",
                    "cx_expire",
                    "cx_auth_id",
                    "cx_xact_amt",
                    "cx_xact_date",
                    "cx_co_id",
                ],
                xacts,
            ),
            // Carts exist only while clients shop.
            table("shopping_cart", &["sc_id", "sc_time"], vec![]),
            table(
                "shopping_cart_line",
                &["scl_sc_id", "scl_i_id", "scl_qty", "scl_cost", "scl_srp", "scl_title", "scl_backing"],
                vec![],
            ),
        ],
    }
}
