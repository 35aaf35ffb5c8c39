//! `tpcw`, the TPC-W online bookstore that Eliá (§6, §7) and Gyro (§VII) scale out: ten tables,
//! the twenty database transactions of the reference implementation, a data generator following
//! the specification's population rules, and an emulated browser walking the Shopping Mix.
//!
//! Written from the specification's description of the schema, the transactions and the mix; no
//! code of the reference Java implementation is reused.
//!
//! Where this port departs from the reference, deliberately:
//! * Everything the reference takes from `MAX(id) + 1`, the clock or a random generator inside a
//!   transaction is a parameter chosen by the client ([`TpcwWorkload`]): new ids are minted with
//!   [`ClientCtx::home_id`](crate::ClientCtx::home_id) so they route to the client's home
//!   instance, `now` is the emulator's logical clock, and discounts, shipping types, authorisation
//!   ids and the random item an empty cart receives are drawn by the client. Every transaction is
//!   then a function of its parameters and the database state, which state-update replay needs.
//! * Times are `INTEGER` seconds since the Unix epoch; money is `INTEGER` cents and discounts are
//!   `INTEGER` percent, so that totals are exact and identical on every backend.
//! * "The most recent N orders" are the last N by `(o_date, o_id)`, not `o_id > MAX(o_id) - N`:
//!   minted ids are unique but not increasing in time.
//! * A new address is always inserted under the client's minted id; the reference first looks for
//!   an identical address, which would read the whole address table for no effect on generated
//!   data (its random streets never repeat).

mod data;
mod txns;
mod workload;

pub use data::{generate, Cardinalities};
pub use txns::{order_totals, stock_after, transactions};
pub use workload::{
    Interaction, TpcwWorkload, INTERACTIONS, SHOPPING_MIX, SPEC_SHOPPING_FREQUENCIES, THINK_SECONDS, WRITING_TRANSACTIONS,
};

use crate::model::Application;
use std::sync::Arc;

pub const SCHEMA: &[&str] = &[
    "CREATE TABLE country (co_id INTEGER PRIMARY KEY, co_name TEXT NOT NULL UNIQUE, co_exchange REAL NOT NULL, \
     co_currency TEXT NOT NULL)",
    "CREATE TABLE author (a_id INTEGER PRIMARY KEY, a_fname TEXT NOT NULL, a_lname TEXT NOT NULL, a_mname TEXT NOT NULL, \
     a_dob INTEGER NOT NULL, a_bio TEXT NOT NULL)",
    "CREATE TABLE item (i_id INTEGER PRIMARY KEY, i_title TEXT NOT NULL, i_a_id INTEGER NOT NULL, i_pub_date INTEGER NOT NULL, \
     i_publisher TEXT NOT NULL, i_subject TEXT NOT NULL, i_desc TEXT NOT NULL, i_related1 INTEGER NOT NULL, \
     i_related2 INTEGER NOT NULL, i_related3 INTEGER NOT NULL, i_related4 INTEGER NOT NULL, i_related5 INTEGER NOT NULL, \
     i_thumbnail TEXT NOT NULL, i_image TEXT NOT NULL, i_srp INTEGER NOT NULL, i_cost INTEGER NOT NULL, \
     i_avail INTEGER NOT NULL, i_stock INTEGER NOT NULL, i_isbn TEXT NOT NULL, i_page INTEGER NOT NULL, \
     i_backing TEXT NOT NULL, i_dimensions TEXT NOT NULL)",
    "CREATE TABLE address (addr_id INTEGER PRIMARY KEY, addr_street1 TEXT NOT NULL, addr_street2 TEXT NOT NULL, \
     addr_city TEXT NOT NULL, addr_state TEXT NOT NULL, addr_zip TEXT NOT NULL, addr_co_id INTEGER NOT NULL)",
    // c_uname is unique by construction (DIGSYL of the id); declaring it lets logins use an index.
    "CREATE TABLE customer (c_id INTEGER PRIMARY KEY, c_uname TEXT NOT NULL UNIQUE, c_passwd TEXT NOT NULL, \
     c_fname TEXT NOT NULL, c_lname TEXT NOT NULL, c_addr_id INTEGER NOT NULL, c_phone TEXT NOT NULL, c_email TEXT NOT NULL, \
     c_since INTEGER NOT NULL, c_last_login INTEGER NOT NULL, c_login INTEGER NOT NULL, c_expiration INTEGER NOT NULL, \
     c_discount INTEGER NOT NULL, c_balance INTEGER NOT NULL, c_ytd_pmt INTEGER NOT NULL, c_birthdate INTEGER NOT NULL, \
     c_data TEXT NOT NULL)",
    "CREATE TABLE orders (o_id INTEGER PRIMARY KEY, o_c_id INTEGER NOT NULL, o_date INTEGER NOT NULL, \
     o_sub_total INTEGER NOT NULL, o_tax INTEGER NOT NULL, o_total INTEGER NOT NULL, o_ship_type TEXT NOT NULL, \
     o_ship_date INTEGER NOT NULL, o_bill_addr_id INTEGER NOT NULL, o_ship_addr_id INTEGER NOT NULL, o_status TEXT NOT NULL)",
    "CREATE TABLE order_line (ol_id INTEGER NOT NULL, ol_o_id INTEGER NOT NULL, ol_i_id INTEGER NOT NULL, \
     ol_qty INTEGER NOT NULL, ol_discount INTEGER NOT NULL, ol_comments TEXT NOT NULL, PRIMARY KEY (ol_o_id, ol_id))",
    "CREATE TABLE cc_xacts (cx_o_id INTEGER PRIMARY KEY, cx_type TEXT NOT NULL, cx_num TEXT NOT NULL, cx_name TEXT NOT NULL, \
     cx_expire INTEGER NOT NULL, cx_auth_id TEXT NOT NULL, cx_xact_amt INTEGER NOT NULL, cx_xact_date INTEGER NOT NULL, \
     cx_co_id INTEGER NOT NULL)",
    "CREATE TABLE shopping_cart (sc_id INTEGER PRIMARY KEY, sc_time INTEGER NOT NULL)",
    "CREATE TABLE shopping_cart_line (scl_sc_id INTEGER NOT NULL, scl_i_id INTEGER NOT NULL, scl_qty INTEGER NOT NULL, \
     scl_cost INTEGER NOT NULL, scl_srp INTEGER NOT NULL, scl_title TEXT NOT NULL, scl_backing TEXT NOT NULL, \
     PRIMARY KEY (scl_sc_id, scl_i_id))",
];

/// Items in the store. TPC-W allows 1,000, 10,000, 100,000, 1 M or 10 M items; the smallest keeps a
/// scale-1 database loadable in a fraction of a second, and the item count does not grow with the
/// number of emulated browsers in the specification either.
pub const ITEMS: i64 = 1_000;
/// Customers per emulated browser (the specification's 2,880 × EBs).
pub const CUSTOMERS_PER_EB: i64 = 2_880;
/// The "present" of the generated database, 2024-01-01T00:00:00Z; the emulator's clock starts here.
pub const BASE_TIME: i64 = 1_704_067_200;
pub const DAY: i64 = 86_400;
/// How long a login lasts (the specification's two hours).
pub const SESSION_SECONDS: i64 = 7_200;
/// Sales tax in hundredths of a percent (8.25 %).
pub const TAX_BASIS_POINTS: i64 = 825;
/// How many recent orders the best-seller list and the related-item recomputation look at.
pub const BEST_SELLER_WINDOW: i64 = 3_333;
pub const RELATED_WINDOW: i64 = 10_000;
/// An item whose stock would fall below this is restocked by [`RESTOCK`] in the same order.
pub const RESTOCK_THRESHOLD: i64 = 10;
pub const RESTOCK: i64 = 21;

pub const SUBJECTS: [&str; 24] = [
    "ARTS",
    "BIOGRAPHIES",
    "BUSINESS",
    "CHILDREN",
    "COMPUTERS",
    "COOKING",
    "HEALTH",
    "HISTORY",
    "HOME",
    "HUMOR",
    "LITERATURE",
    "MYSTERY",
    "NON-FICTION",
    "PARENTING",
    "POLITICS",
    "REFERENCE",
    "RELIGION",
    "ROMANCE",
    "SELF-HELP",
    "SCIENCE-NATURE",
    "SCIENCE-FICTION",
    "SPORTS",
    "YOUTH",
    "TRAVEL",
];
pub const BACKINGS: [&str; 5] = ["HARDBACK", "PAPERBACK", "USED", "AUDIO", "LIMITED-EDITION"];
pub const SHIP_TYPES: [&str; 6] = ["AIR", "UPS", "FEDEX", "SHIP", "COURIER", "MAIL"];
pub const ORDER_STATUSES: [&str; 4] = ["PROCESSING", "SHIPPED", "PENDING", "DENIED"];
pub const CC_TYPES: [&str; 5] = ["VISA", "MASTERCARD", "DISCOVER", "AMEX", "DINERS"];

/// The 92 countries of the COUNTRY table with their currencies.
pub const COUNTRIES: [(&str, &str); 92] = [
    ("United States", "Dollars"),
    ("United Kingdom", "Pounds"),
    ("Canada", "Dollars"),
    ("Germany", "Deutsche Marks"),
    ("France", "Francs"),
    ("Japan", "Yen"),
    ("Netherlands", "Dutch Guilders"),
    ("Italy", "Lira"),
    ("Switzerland", "Francs"),
    ("Australia", "Dollars"),
    ("Algeria", "Dinars"),
    ("Argentina", "Pesos"),
    ("Armenia", "Dram"),
    ("Austria", "Schillings"),
    ("Azerbaijan", "Manat"),
    ("Bahamas", "Dollars"),
    ("Bahrain", "Dinar"),
    ("Bangla Desh", "Taka"),
    ("Barbados", "Dollars"),
    ("Belarus", "Rouble"),
    ("Belgium", "Francs"),
    ("Bermuda", "Dollars"),
    ("Bolivia", "Boliviano"),
    ("Botswana", "Pula"),
    ("Brazil", "Real"),
    ("Bulgaria", "Lev"),
    ("Cayman Islands", "Dollars"),
    ("Chad", "Franc"),
    ("Chile", "Pesos"),
    ("China", "Yuan Renmimbi"),
    ("Christmas Island", "Dollars"),
    ("Colombia", "Pesos"),
    ("Croatia", "Kuna"),
    ("Cuba", "Pesos"),
    ("Cyprus", "Pounds"),
    ("Czech Republic", "Koruna"),
    ("Denmark", "Kroner"),
    ("Dominican Republic", "Pesos"),
    ("Eastern Caribbean", "Dollars"),
    ("Ecuador", "Sucre"),
    ("Egypt", "Pounds"),
    ("El Salvador", "Colon"),
    ("Estonia", "Kroon"),
    ("Ethiopia", "Birr"),
    ("Falkland Island", "Pound"),
    ("Faroe Island", "Krone"),
    ("Fiji", "Dollars"),
    ("Finland", "Markka"),
    ("Gabon", "Franc"),
    ("Gibraltar", "Pound"),
    ("Greece", "Drachmas"),
    ("Guam", "Dollars"),
    ("Hong Kong", "Dollars"),
    ("Hungary", "Forint"),
    ("Iceland", "Krona"),
    ("India", "Rupees"),
    ("Indonesia", "Rupiah"),
    ("Iran", "Rial"),
    ("Iraq", "Dinar"),
    ("Ireland", "Punt"),
    ("Israel", "Shekels"),
    ("Jamaica", "Dollars"),
    ("Jordan", "Dinar"),
    ("Kazakhstan", "Tenge"),
    ("Kuwait", "Dinar"),
    ("Lebanon", "Pounds"),
    ("Luxembourg", "Francs"),
    ("Malaysia", "Ringgit"),
    ("Mexico", "Pesos"),
    ("Mauritius", "Rupees"),
    ("New Zealand", "Dollars"),
    ("Norway", "Kroner"),
    ("Pakistan", "Rupees"),
    ("Philippines", "Pesos"),
    ("Poland", "Zloty"),
    ("Portugal", "Escudo"),
    ("Romania", "Leu"),
    ("Russia", "Rubles"),
    ("Saudi Arabia", "Riyal"),
    ("Singapore", "Dollars"),
    ("Slovakia", "Koruna"),
    ("South Africa", "Rand"),
    ("South Korea", "Won"),
    ("Spain", "Pesetas"),
    ("Sudan", "Dinar"),
    ("Sweden", "Krona"),
    ("Taiwan", "Dollars"),
    ("Thailand", "Baht"),
    ("Trinidad", "Dollars"),
    ("Turkey", "Lira"),
    ("Venezuela", "Bolivar"),
    ("Zambia", "Kwacha"),
];

/// The syllables DIGSYL spells decimal digits with.
const SYLLABLES: [&str; 10] = ["BA", "OG", "AL", "RI", "RE", "SE", "AT", "UL", "IN", "NG"];

/// TPC-W's DIGSYL: each decimal digit of `n` (left-padded with zeros to `width` digits) becomes a
/// syllable. User names are `digsyl(c_id, 0)`, so a client that knows a customer id knows the
/// login, and every id has its own name.
pub fn digsyl(n: i64, width: usize) -> String {
    let digits = format!("{:0width$}", n.unsigned_abs(), width = width);
    digits.bytes().map(|d| SYLLABLES[(d - b'0') as usize]).collect()
}

/// The login of customer `c_id`.
pub fn user_name(c_id: i64) -> String {
    digsyl(c_id, 0)
}

/// The password of a customer: the specification's lower-cased user name.
pub fn password(c_uname: &str) -> String {
    c_uname.to_lowercase()
}

/// The words titles are made of (`digsyl(0..100, 2)`), so that a title search for one of them finds
/// a few percent of the items, and the same ones whether `LIKE` is case-sensitive or not.
pub fn title_word(k: usize) -> String {
    digsyl((k % TITLE_WORDS) as i64, 2)
}
pub const TITLE_WORDS: usize = 100;

/// Author last names are `digsyl(0..1000, 3)`; an author search uses a two-syllable prefix
/// (`digsyl(0..100, 2)`), which matches about one author in a hundred.
pub const AUTHOR_NAME_SPACE: i64 = 1_000;

pub fn application() -> Arc<Application> {
    Application::new("tpcw", SCHEMA, transactions(), generate).expect("the tpcw application is well-formed")
}
