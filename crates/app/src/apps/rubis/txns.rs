//! The schema and the 26 transactions (see the module docs of [`super`] for the list).
//!
//! Pages made of several lists return rows whose first column is a text tag naming the list
//! (`"user"`, `"comment"`, `"item"`, `"bid"`, `"selling"`, `"sold"`); the other pages return
//! plain rows. The layouts are the `*_COLUMNS` constants, so the emulator and the tests read
//! results by name.

use crate::model::{Db, Param, ParamType, Statement, TxnError, TxnType};
use ensemble_core::{Row, Rows, Value};

pub const SCHEMA: &[&str] = &[
    "CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
    "CREATE TABLE regions (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
    "CREATE TABLE users (id INTEGER PRIMARY KEY, firstname TEXT NOT NULL, lastname TEXT NOT NULL, \
     nickname TEXT NOT NULL UNIQUE, password TEXT NOT NULL, email TEXT NOT NULL, rating INTEGER NOT NULL, \
     balance INTEGER NOT NULL, creation_date INTEGER NOT NULL, region INTEGER NOT NULL)",
    "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL, \
     initial_price INTEGER NOT NULL, quantity INTEGER NOT NULL, reserve_price INTEGER NOT NULL, buy_now INTEGER NOT NULL, \
     nb_of_bids INTEGER NOT NULL, max_bid INTEGER NOT NULL, start_date INTEGER NOT NULL, end_date INTEGER NOT NULL, \
     seller INTEGER NOT NULL, category INTEGER NOT NULL, UNIQUE (category, id), UNIQUE (seller, id))",
    "CREATE TABLE old_items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL, \
     initial_price INTEGER NOT NULL, quantity INTEGER NOT NULL, reserve_price INTEGER NOT NULL, buy_now INTEGER NOT NULL, \
     nb_of_bids INTEGER NOT NULL, max_bid INTEGER NOT NULL, start_date INTEGER NOT NULL, end_date INTEGER NOT NULL, \
     seller INTEGER NOT NULL, category INTEGER NOT NULL, UNIQUE (seller, id))",
    "CREATE TABLE bids (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, item_id INTEGER NOT NULL, qty INTEGER NOT NULL, \
     bid INTEGER NOT NULL, max_bid INTEGER NOT NULL, date INTEGER NOT NULL, UNIQUE (item_id, id), UNIQUE (user_id, id))",
    "CREATE TABLE comments (id INTEGER PRIMARY KEY, from_user_id INTEGER NOT NULL, to_user_id INTEGER NOT NULL, \
     item_id INTEGER NOT NULL, rating INTEGER NOT NULL, date INTEGER NOT NULL, comment TEXT NOT NULL, UNIQUE (to_user_id, id))",
    "CREATE TABLE buy_now (id INTEGER PRIMARY KEY, buyer_id INTEGER NOT NULL, item_id INTEGER NOT NULL, qty INTEGER NOT NULL, \
     date INTEGER NOT NULL, UNIQUE (buyer_id, id))",
];

/// Items on one page of search results.
pub const ITEMS_PER_PAGE: i64 = 20;
pub const DAY: i64 = 86_400;
/// How far back the "About me" lists look (RUBiS shows the last 30 days).
pub const ABOUT_ME_WINDOW: i64 = 30 * DAY;
/// Ratings a comment may give.
pub const RATINGS: std::ops::RangeInclusive<i64> = -5..=5;

/// The columns of an item as `ViewItem`, `PutBid` and `BuyNow` return it: the table's columns in
/// schema order, then the seller's nickname, then 1 when the item is archived in `old_items`.
pub mod item_col {
    pub const ID: usize = 0;
    pub const NAME: usize = 1;
    pub const DESCRIPTION: usize = 2;
    pub const INITIAL_PRICE: usize = 3;
    pub const QUANTITY: usize = 4;
    pub const RESERVE_PRICE: usize = 5;
    pub const BUY_NOW: usize = 6;
    pub const NB_OF_BIDS: usize = 7;
    pub const MAX_BID: usize = 8;
    pub const START_DATE: usize = 9;
    pub const END_DATE: usize = 10;
    pub const SELLER: usize = 11;
    pub const CATEGORY: usize = 12;
    pub const SELLER_NICKNAME: usize = 13;
    pub const ARCHIVED: usize = 14;
}

/// The columns of a search result row.
pub mod search_col {
    pub const ID: usize = 0;
    pub const NAME: usize = 1;
    pub const INITIAL_PRICE: usize = 2;
    pub const MAX_BID: usize = 3;
    pub const NB_OF_BIDS: usize = 4;
    pub const END_DATE: usize = 5;
    pub const SELLER: usize = 6;
}

/// The lowest bid an item accepts: its initial price before the first bid, one cent above the
/// highest bid after.
pub fn min_bid(initial_price: i64, nb_of_bids: i64, max_bid: i64) -> i64 {
    if nb_of_bids == 0 {
        initial_price
    } else {
        initial_price.max(max_bid + 1)
    }
}

fn int(v: &Value) -> i64 {
    v.as_int().expect("checked parameter")
}

fn abort<T>(message: String) -> Result<T, TxnError> {
    Err(TxnError::Abort(message))
}

/// An integer column the schema declares NOT NULL; anything else means the database is not the
/// one this application created, which the transaction reports rather than trusting.
fn col_int(row: &Row, i: usize) -> Result<i64, TxnError> {
    match row.get(i) {
        Some(Value::Int(v)) => Ok(*v),
        other => abort(format!("column {i} holds {other:?}, not an integer")),
    }
}

fn one(v: &Value) -> &[Value] {
    std::slice::from_ref(v)
}

fn first(rows: Rows) -> Option<Row> {
    rows.into_iter().next()
}

fn tagged(tag: &str, rows: Rows) -> impl Iterator<Item = Row> + '_ {
    rows.into_iter().map(move |mut r| {
        r.insert(0, Value::Text(tag.into()));
        r
    })
}

const AUTHENTICATE: Statement =
    Statement { name: "authenticate", sql: "SELECT id FROM users WHERE nickname = :nickname AND password = :password" };
const CATEGORIES: Statement = Statement { name: "categories", sql: "SELECT id, name FROM categories ORDER BY id" };
const REGIONS: Statement = Statement { name: "regions", sql: "SELECT id, name FROM regions ORDER BY id" };
const REGION: Statement = Statement { name: "region", sql: "SELECT name FROM regions WHERE id = :region_id" };
const CATEGORY: Statement = Statement { name: "category", sql: "SELECT name FROM categories WHERE id = :category_id" };
const OPEN_ITEM: Statement = Statement {
    name: "item",
    sql: "SELECT id, name, description, initial_price, quantity, reserve_price, buy_now, nb_of_bids, max_bid, start_date, \
          end_date, seller, category FROM items WHERE id = :item_id",
};
const OLD_ITEM: Statement = Statement {
    name: "old_item",
    sql: "SELECT id, name, description, initial_price, quantity, reserve_price, buy_now, nb_of_bids, max_bid, start_date, \
          end_date, seller, category FROM old_items WHERE id = :item_id",
};
const SELLER_NICKNAME: Statement = Statement { name: "seller_nickname", sql: "SELECT nickname FROM users WHERE id = :seller" };
const USER_NICKNAME: Statement = Statement { name: "user_nickname", sql: "SELECT nickname FROM users WHERE id = :user_id" };
const COMMENTS_ABOUT: Statement = Statement {
    name: "comments_about",
    sql: "SELECT c.id, c.from_user_id, u.nickname, c.item_id, c.rating, c.date, c.comment FROM comments c \
          JOIN users u ON u.id = c.from_user_id WHERE c.to_user_id = :user_id ORDER BY c.date DESC, c.id DESC",
};

/// Checks a nickname and password; the user's id.
fn authenticate(db: &mut dyn Db, nickname: &Value, password: &Value) -> Result<Value, TxnError> {
    match first(db.query("authenticate", &[nickname.clone(), password.clone()])?) {
        Some(mut r) if !r.is_empty() => Ok(r.swap_remove(0)),
        _ => abort(format!("wrong nickname or password for {nickname}")),
    }
}

fn auth(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(vec![vec![authenticate(db, &p[0], &p[1])?]])
}

fn browse_categories(db: &mut dyn Db, _p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("categories", &[])?)
}

fn browse_regions(db: &mut dyn Db, _p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("regions", &[])?)
}

fn browse_categories_in_region(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    if db.query("region", &[p[0].clone()])?.is_empty() {
        return abort(format!("no region {}", int(&p[0])));
    }
    Ok(db.query("categories", &[])?)
}

fn page_bounds(page: &Value) -> Result<[Value; 2], TxnError> {
    let page = int(page);
    if !(0..=1_000_000).contains(&page) {
        return abort(format!("no page {page}"));
    }
    Ok([Value::Int(ITEMS_PER_PAGE), Value::Int(page * ITEMS_PER_PAGE)])
}

fn search_items_by_category(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let [limit, offset] = page_bounds(&p[1])?;
    Ok(db.query("items_in_category", &[p[0].clone(), p[2].clone(), limit, offset])?)
}

fn search_items_by_region(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let [limit, offset] = page_bounds(&p[2])?;
    Ok(db.query("items_in_region", &[p[1].clone(), p[0].clone(), p[3].clone(), limit, offset])?)
}

/// The item's row (open or archived) with its seller's nickname and the archived flag.
fn item_page(db: &mut dyn Db, item: &Value, open_only: bool) -> Result<Row, TxnError> {
    let (mut row, archived) = match first(db.query("item", one(item))?) {
        Some(r) => (r, 0),
        None if open_only => return abort(format!("item {} is not open", int(item))),
        None => match first(db.query("old_item", one(item))?) {
            Some(r) => (r, 1),
            None => return abort(format!("no item {}", int(item))),
        },
    };
    let seller = row.get(item_col::SELLER).cloned().unwrap_or(Value::Null);
    let nickname = first(db.query("seller_nickname", &[seller])?).and_then(|r| r.into_iter().next()).unwrap_or(Value::Null);
    row.push(nickname);
    row.push(Value::Int(archived));
    Ok(row)
}

fn view_item(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(vec![item_page(db, &p[0], false)?])
}

fn view_user_info(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let Some(user) = first(db.query("user", &[p[0].clone()])?) else {
        return abort(format!("no user {}", int(&p[0])));
    };
    let comments = db.query("comments_about", &[p[0].clone()])?;
    Ok(tagged("user", vec![user]).chain(tagged("comment", comments)).collect())
}

fn view_bid_history(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let item = p[0].clone();
    let name = match first(db.query("item_name", one(&item))?) {
        Some(r) => r,
        None => match first(db.query("old_item_name", one(&item))?) {
            Some(r) => r,
            None => return abort(format!("no item {}", int(&item))),
        },
    };
    let bids = db.query("bids", &[item])?;
    Ok(tagged("item", vec![name]).chain(tagged("bid", bids)).collect())
}

/// `PutBid` and `BuyNow`: the form for an open item, for a user who exists.
fn item_form(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    if db.query("user_nickname", &[p[0].clone()])?.is_empty() {
        return abort(format!("no user {}", int(&p[0])));
    }
    Ok(vec![item_page(db, &p[1], true)?])
}

fn put_comment(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (from, to, item) = (p[0].clone(), p[1].clone(), p[2].clone());
    if db.query("from_user", one(&from))?.is_empty() {
        return abort(format!("no user {}", int(&from)));
    }
    let Some(to_nickname) = first(db.query("to_user", one(&to))?).and_then(|r| r.into_iter().next()) else {
        return abort(format!("no user {}", int(&to)));
    };
    let name = match first(db.query("item_name", one(&item))?) {
        Some(r) => r,
        None => match first(db.query("old_item_name", one(&item))?) {
            Some(r) => r,
            None => return abort(format!("no item {}", int(&item))),
        },
    };
    let mut row = name;
    row.push(to);
    row.push(to_nickname);
    Ok(vec![row])
}

fn select_category_to_sell_item(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    authenticate(db, &p[0], &p[1])?;
    Ok(db.query("categories", &[])?)
}

fn sell_item_form(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let Some(nickname) = first(db.query("user_nickname", &[p[0].clone()])?).and_then(|r| r.into_iter().next()) else {
        return abort(format!("no user {}", int(&p[0])));
    };
    let Some(category) = first(db.query("category", &[p[1].clone()])?).and_then(|r| r.into_iter().next()) else {
        return abort(format!("no category {}", int(&p[1])));
    };
    Ok(vec![vec![p[0].clone(), nickname, p[1].clone(), category]])
}

fn about_me(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let id = authenticate(db, &p[0], &p[1])?;
    let Some(user) = first(db.query("user", one(&id))?) else {
        return abort(format!("no user {id}"));
    };
    let comments = db.query("comments_about", &[id])?;
    Ok(tagged("user", vec![user]).chain(tagged("comment", comments)).collect())
}

fn since(now: &Value) -> Value {
    Value::Int(int(now) - ABOUT_ME_WINDOW)
}

fn about_me_bids(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("bids_on_open_items", &[p[0].clone(), p[1].clone()])?)
}

fn about_me_won_items(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (user, now) = (p[0].clone(), p[1].clone());
    let mut rows = db.query("won_in_items", &[user.clone(), now.clone(), since(&now)])?;
    rows.extend(db.query("won_in_old_items", &[user, since(&now)])?);
    Ok(rows)
}

fn about_me_bought_items(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (user, now) = (p[0].clone(), p[1].clone());
    let mut rows = db.query("bought_in_items", &[user.clone(), since(&now)])?;
    rows.extend(db.query("bought_in_old_items", &[user, since(&now)])?);
    Ok(rows)
}

fn about_me_items(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (user, now) = (p[0].clone(), p[1].clone());
    let selling = db.query("selling", &[user.clone(), now.clone()])?;
    let mut sold = db.query("sold_in_items", &[user.clone(), now.clone(), since(&now)])?;
    sold.extend(db.query("sold_in_old_items", &[user, since(&now)])?);
    Ok(tagged("selling", selling).chain(tagged("sold", sold)).collect())
}

fn register_user(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let [user, firstname, lastname, nickname, password, email, region, now] = p else {
        return abort("RegisterUser takes 8 parameters".into());
    };
    if nickname.as_text().is_none_or(str::is_empty) || password.as_text().is_none_or(str::is_empty) {
        return abort("nickname and password must not be empty".into());
    }
    if db.query("region", one(region))?.is_empty() {
        return abort(format!("no region {}", int(region)));
    }
    if !db.query("nickname_taken", one(nickname))?.is_empty() {
        return abort(format!("nickname {nickname} is taken"));
    }
    if !db.query("user_exists", one(user))?.is_empty() {
        return abort(format!("user {} exists", int(user)));
    }
    let args = [user, firstname, lastname, nickname, password, email, now, region].map(Value::clone);
    db.write("insert_user", &args)?;
    Ok(vec![vec![user.clone()]])
}

fn register_item(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let [item, user, category, name, description, initial_price, quantity, reserve_price, buy_now, now, end_date] = p else {
        return abort("RegisterItem takes 11 parameters".into());
    };
    if int(quantity) < 1 {
        return abort("quantity must be at least 1".into());
    }
    if int(initial_price) < 0 || int(reserve_price) < 0 || int(buy_now) < 0 {
        return abort("prices must not be negative".into());
    }
    if int(end_date) <= int(now) {
        return abort("the auction must end after it starts".into());
    }
    if db.query("user_nickname", one(user))?.is_empty() {
        return abort(format!("no user {}", int(user)));
    }
    if db.query("category", one(category))?.is_empty() {
        return abort(format!("no category {}", int(category)));
    }
    if !db.query("item_exists", one(item))?.is_empty() || !db.query("old_item_exists", one(item))?.is_empty() {
        return abort(format!("item {} exists", int(item)));
    }
    let args = [item, name, description, initial_price, quantity, reserve_price, buy_now, now, end_date, user, category].map(Value::clone);
    db.write("insert_item", &args)?;
    Ok(vec![vec![item.clone()]])
}

fn store_bid(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let [user, item, bid_id, qty, bid, max_bid, now] = p else {
        return abort("StoreBid takes 7 parameters".into());
    };
    if db.query("user_nickname", one(user))?.is_empty() {
        return abort(format!("no user {}", int(user)));
    }
    let Some(row) = first(db.query("bid_item", one(item))?) else {
        return abort(format!("item {} is not open for bidding", int(item)));
    };
    let (quantity, initial_price, nb_of_bids, current_max, end_date) =
        (col_int(&row, 0)?, col_int(&row, 1)?, col_int(&row, 2)?, col_int(&row, 3)?, col_int(&row, 4)?);
    if end_date < int(now) {
        return abort(format!("the auction of item {} has ended", int(item)));
    }
    if int(qty) < 1 || int(qty) > quantity {
        return abort(format!("cannot bid for {} of {quantity}", int(qty)));
    }
    let least = min_bid(initial_price, nb_of_bids, current_max);
    if int(bid) < least {
        return abort(format!("bid {} is below the minimum {least}", int(bid)));
    }
    if int(max_bid) < int(bid) {
        return abort(format!("maximum bid {} is below the bid {}", int(max_bid), int(bid)));
    }
    db.write("insert_bid", &[bid_id, user, item, qty, bid, max_bid, now].map(Value::clone))?;
    db.write("update_item", &[bid.clone(), item.clone()])?;
    Ok(vec![vec![bid_id.clone(), Value::Int(nb_of_bids + 1), bid.clone()]])
}

fn store_buy_now(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let [user, item, buy_now_id, qty, now] = p else {
        return abort("StoreBuyNow takes 5 parameters".into());
    };
    if db.query("user_nickname", one(user))?.is_empty() {
        return abort(format!("no user {}", int(user)));
    }
    let Some(row) = first(db.query("buy_item", one(item))?) else {
        return abort(format!("item {} is not for sale", int(item)));
    };
    let (quantity, price, end_date) = (col_int(&row, 0)?, col_int(&row, 1)?, col_int(&row, 2)?);
    if end_date < int(now) {
        return abort(format!("the auction of item {} has ended", int(item)));
    }
    if price <= 0 {
        return abort(format!("item {} has no buy-now price", int(item)));
    }
    if int(qty) < 1 || int(qty) > quantity {
        return abort(format!("cannot buy {} of {quantity}", int(qty)));
    }
    let left = quantity - int(qty);
    if left == 0 {
        db.write("close_item", &[now.clone(), item.clone()])?;
    } else {
        db.write("take_quantity", &[qty.clone(), item.clone()])?;
    }
    db.write("insert_buy_now", &[buy_now_id, user, item, qty, now].map(Value::clone))?;
    Ok(vec![vec![buy_now_id.clone(), Value::Int(left)]])
}

fn store_comment(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let [from, to, item, comment_id, rating, comment, now] = p else {
        return abort("StoreComment takes 7 parameters".into());
    };
    if !RATINGS.contains(&int(rating)) {
        return abort(format!("rating {} is not in {RATINGS:?}", int(rating)));
    }
    if db.query("from_user", one(from))?.is_empty() {
        return abort(format!("no user {}", int(from)));
    }
    let Some(row) = first(db.query("to_user_rating", one(to))?) else {
        return abort(format!("no user {}", int(to)));
    };
    let old = col_int(&row, 0)?;
    if db.query("item_name", one(item))?.is_empty() && db.query("old_item_name", one(item))?.is_empty() {
        return abort(format!("no item {}", int(item)));
    }
    db.write("insert_comment", &[comment_id, from, to, item, rating, now, comment].map(Value::clone))?;
    db.write("update_rating", &[rating.clone(), to.clone()])?;
    Ok(vec![vec![comment_id.clone(), Value::Int(old + int(rating))]])
}

fn params(names: &[(&'static str, ParamType)]) -> Vec<Param> {
    names.iter().map(|(name, ty)| Param { name, ty: *ty }).collect()
}

fn stmt(name: &'static str, sql: &'static str) -> Statement {
    Statement { name, sql }
}

pub fn transactions() -> Vec<TxnType> {
    use ParamType::*;
    let auth_txn = |name: &'static str| TxnType {
        name,
        params: params(&[("nickname", Text), ("password", Text)]),
        statements: vec![AUTHENTICATE],
        body: auth,
    };
    let item_name = stmt("item_name", "SELECT id, name FROM items WHERE id = :item_id");
    let old_item_name = stmt("old_item_name", "SELECT id, name FROM old_items WHERE id = :item_id");
    let public_user = stmt(
        "user",
        "SELECT id, nickname, firstname, lastname, rating, creation_date, region FROM users WHERE id = :user_id",
    );
    vec![
        TxnType { name: "BrowseCategories", params: vec![], statements: vec![CATEGORIES], body: browse_categories },
        TxnType { name: "BrowseRegions", params: vec![], statements: vec![REGIONS], body: browse_regions },
        TxnType {
            name: "BrowseCategoriesInRegion",
            params: params(&[("region_id", Int)]),
            statements: vec![REGION, CATEGORIES],
            body: browse_categories_in_region,
        },
        TxnType {
            name: "SearchItemsByCategory",
            params: params(&[("category_id", Int), ("page", Int), ("now", Int)]),
            statements: vec![stmt(
                "items_in_category",
                "SELECT id, name, initial_price, max_bid, nb_of_bids, end_date, seller FROM items \
                 WHERE category = :category_id AND end_date >= :now ORDER BY end_date, id LIMIT :limit OFFSET :offset",
            )],
            body: search_items_by_category,
        },
        TxnType {
            name: "SearchItemsByRegion",
            params: params(&[("region_id", Int), ("category_id", Int), ("page", Int), ("now", Int)]),
            statements: vec![stmt(
                "items_in_region",
                "SELECT i.id, i.name, i.initial_price, i.max_bid, i.nb_of_bids, i.end_date, i.seller FROM items i \
                 JOIN users u ON u.id = i.seller WHERE i.category = :category_id AND u.region = :region_id \
                 AND i.end_date >= :now ORDER BY i.end_date, i.id LIMIT :limit OFFSET :offset",
            )],
            body: search_items_by_region,
        },
        TxnType {
            name: "ViewItem",
            params: params(&[("item_id", Int)]),
            statements: vec![OPEN_ITEM, OLD_ITEM, SELLER_NICKNAME],
            body: view_item,
        },
        TxnType {
            name: "ViewUserInfo",
            params: params(&[("user_id", Int)]),
            statements: vec![public_user.clone(), COMMENTS_ABOUT],
            body: view_user_info,
        },
        TxnType {
            name: "ViewBidHistory",
            params: params(&[("item_id", Int)]),
            statements: vec![
                item_name.clone(),
                old_item_name.clone(),
                stmt(
                    "bids",
                    "SELECT b.id, b.user_id, u.nickname, b.qty, b.bid, b.date FROM bids b JOIN users u ON u.id = b.user_id \
                     WHERE b.item_id = :item_id ORDER BY b.bid DESC, b.id DESC",
                ),
            ],
            body: view_bid_history,
        },
        auth_txn("BuyNowAuth"),
        TxnType {
            name: "BuyNow",
            params: params(&[("user_id", Int), ("item_id", Int)]),
            statements: vec![USER_NICKNAME, OPEN_ITEM, SELLER_NICKNAME],
            body: item_form,
        },
        auth_txn("PutBidAuth"),
        TxnType {
            name: "PutBid",
            params: params(&[("user_id", Int), ("item_id", Int)]),
            statements: vec![USER_NICKNAME, OPEN_ITEM, SELLER_NICKNAME],
            body: item_form,
        },
        auth_txn("PutCommentAuth"),
        TxnType {
            name: "PutComment",
            params: params(&[("from_user_id", Int), ("to_user_id", Int), ("item_id", Int)]),
            statements: vec![
                stmt("from_user", "SELECT nickname FROM users WHERE id = :from_user_id"),
                stmt("to_user", "SELECT nickname FROM users WHERE id = :to_user_id"),
                item_name.clone(),
                old_item_name.clone(),
            ],
            body: put_comment,
        },
        TxnType {
            name: "SelectCategoryToSellItem",
            params: params(&[("nickname", Text), ("password", Text)]),
            statements: vec![AUTHENTICATE, CATEGORIES],
            body: select_category_to_sell_item,
        },
        TxnType {
            name: "SellItemForm",
            params: params(&[("user_id", Int), ("category_id", Int)]),
            statements: vec![USER_NICKNAME, CATEGORY],
            body: sell_item_form,
        },
        TxnType {
            name: "AboutMe",
            params: params(&[("nickname", Text), ("password", Text)]),
            statements: vec![
                AUTHENTICATE,
                stmt(
                    "user",
                    "SELECT id, nickname, firstname, lastname, rating, creation_date, region, email, balance FROM users \
                     WHERE id = :user_id",
                ),
                COMMENTS_ABOUT,
            ],
            body: about_me,
        },
        TxnType {
            name: "AboutMeBids",
            params: params(&[("user_id", Int), ("now", Int)]),
            statements: vec![stmt(
                "bids_on_open_items",
                "SELECT i.id, i.name, i.initial_price, i.max_bid, i.nb_of_bids, i.quantity, i.end_date, i.seller, \
                 MAX(b.bid), MAX(b.max_bid) FROM bids b JOIN items i ON i.id = b.item_id \
                 WHERE b.user_id = :user_id AND i.end_date >= :now \
                 GROUP BY i.id, i.name, i.initial_price, i.max_bid, i.nb_of_bids, i.quantity, i.end_date, i.seller \
                 ORDER BY i.end_date, i.id",
            )],
            body: about_me_bids,
        },
        TxnType {
            name: "AboutMeWonItems",
            params: params(&[("user_id", Int), ("now", Int)]),
            statements: vec![
                stmt(
                    "won_in_items",
                    "SELECT i.id, i.name, i.max_bid, i.end_date, i.seller FROM items i JOIN bids b ON b.item_id = i.id \
                     WHERE b.user_id = :user_id AND b.bid = i.max_bid AND i.end_date < :now AND i.end_date >= :since \
                     ORDER BY i.end_date DESC, i.id",
                ),
                stmt(
                    "won_in_old_items",
                    "SELECT o.id, o.name, o.max_bid, o.end_date, o.seller FROM old_items o JOIN bids b ON b.item_id = o.id \
                     WHERE b.user_id = :user_id AND b.bid = o.max_bid AND o.end_date >= :since \
                     ORDER BY o.end_date DESC, o.id",
                ),
            ],
            body: about_me_won_items,
        },
        TxnType {
            name: "AboutMeBoughtItems",
            params: params(&[("user_id", Int), ("now", Int)]),
            statements: vec![
                stmt(
                    "bought_in_items",
                    "SELECT n.id, n.item_id, i.name, n.qty, i.buy_now, n.date, i.seller FROM buy_now n \
                     JOIN items i ON i.id = n.item_id WHERE n.buyer_id = :user_id AND n.date >= :since \
                     ORDER BY n.date DESC, n.id DESC",
                ),
                stmt(
                    "bought_in_old_items",
                    "SELECT n.id, n.item_id, o.name, n.qty, o.buy_now, n.date, o.seller FROM buy_now n \
                     JOIN old_items o ON o.id = n.item_id WHERE n.buyer_id = :user_id AND n.date >= :since \
                     ORDER BY n.date DESC, n.id DESC",
                ),
            ],
            body: about_me_bought_items,
        },
        TxnType {
            name: "AboutMeItems",
            params: params(&[("user_id", Int), ("now", Int)]),
            statements: vec![
                stmt(
                    "selling",
                    "SELECT id, name, initial_price, max_bid, nb_of_bids, quantity, end_date FROM items \
                     WHERE seller = :user_id AND end_date >= :now ORDER BY end_date, id",
                ),
                stmt(
                    "sold_in_items",
                    "SELECT id, name, initial_price, max_bid, nb_of_bids, quantity, end_date FROM items \
                     WHERE seller = :user_id AND end_date < :now AND end_date >= :since ORDER BY end_date DESC, id",
                ),
                stmt(
                    "sold_in_old_items",
                    "SELECT id, name, initial_price, max_bid, nb_of_bids, quantity, end_date FROM old_items \
                     WHERE seller = :user_id AND end_date >= :since ORDER BY end_date DESC, id",
                ),
            ],
            body: about_me_items,
        },
        TxnType {
            name: "RegisterUser",
            params: params(&[
                ("user_id", Int),
                ("firstname", Text),
                ("lastname", Text),
                ("nickname", Text),
                ("password", Text),
                ("email", Text),
                ("region_id", Int),
                ("now", Int),
            ]),
            statements: vec![
                REGION,
                stmt("nickname_taken", "SELECT id FROM users WHERE nickname = :nickname"),
                stmt("user_exists", "SELECT id FROM users WHERE id = :user_id"),
                stmt(
                    "insert_user",
                    "INSERT INTO users (id, firstname, lastname, nickname, password, email, rating, balance, creation_date, region) \
                     VALUES (:user_id, :firstname, :lastname, :nickname, :password, :email, 0, 0, :now, :region_id)",
                ),
            ],
            body: register_user,
        },
        TxnType {
            name: "RegisterItem",
            params: params(&[
                ("item_id", Int),
                ("user_id", Int),
                ("category_id", Int),
                ("name", Text),
                ("description", Text),
                ("initial_price", Int),
                ("quantity", Int),
                ("reserve_price", Int),
                ("buy_now", Int),
                ("now", Int),
                ("end_date", Int),
            ]),
            statements: vec![
                USER_NICKNAME,
                CATEGORY,
                stmt("item_exists", "SELECT id FROM items WHERE id = :item_id"),
                stmt("old_item_exists", "SELECT id FROM old_items WHERE id = :item_id"),
                stmt(
                    "insert_item",
                    "INSERT INTO items (id, name, description, initial_price, quantity, reserve_price, buy_now, nb_of_bids, \
                     max_bid, start_date, end_date, seller, category) VALUES (:item_id, :name, :description, :initial_price, \
                     :quantity, :reserve_price, :buy_now, 0, 0, :now, :end_date, :user_id, :category_id)",
                ),
            ],
            body: register_item,
        },
        TxnType {
            name: "StoreBid",
            params: params(&[
                ("user_id", Int),
                ("item_id", Int),
                ("bid_id", Int),
                ("qty", Int),
                ("bid", Int),
                ("max_bid", Int),
                ("now", Int),
            ]),
            statements: vec![
                USER_NICKNAME,
                stmt("bid_item", "SELECT quantity, initial_price, nb_of_bids, max_bid, end_date FROM items WHERE id = :item_id"),
                stmt(
                    "insert_bid",
                    "INSERT INTO bids (id, user_id, item_id, qty, bid, max_bid, date) \
                     VALUES (:bid_id, :user_id, :item_id, :qty, :bid, :max_bid, :now)",
                ),
                stmt("update_item", "UPDATE items SET nb_of_bids = nb_of_bids + 1, max_bid = :bid WHERE id = :item_id"),
            ],
            body: store_bid,
        },
        TxnType {
            name: "StoreBuyNow",
            params: params(&[("user_id", Int), ("item_id", Int), ("buy_now_id", Int), ("qty", Int), ("now", Int)]),
            statements: vec![
                USER_NICKNAME,
                stmt("buy_item", "SELECT quantity, buy_now, end_date FROM items WHERE id = :item_id"),
                stmt("take_quantity", "UPDATE items SET quantity = quantity - :qty WHERE id = :item_id"),
                stmt("close_item", "UPDATE items SET quantity = 0, end_date = :now WHERE id = :item_id"),
                stmt(
                    "insert_buy_now",
                    "INSERT INTO buy_now (id, buyer_id, item_id, qty, date) VALUES (:buy_now_id, :user_id, :item_id, :qty, :now)",
                ),
            ],
            body: store_buy_now,
        },
        TxnType {
            name: "StoreComment",
            params: params(&[
                ("from_user_id", Int),
                ("to_user_id", Int),
                ("item_id", Int),
                ("comment_id", Int),
                ("rating", Int),
                ("comment", Text),
                ("now", Int),
            ]),
            statements: vec![
                stmt("from_user", "SELECT nickname FROM users WHERE id = :from_user_id"),
                stmt("to_user_rating", "SELECT rating FROM users WHERE id = :to_user_id"),
                item_name,
                old_item_name,
                stmt(
                    "insert_comment",
                    "INSERT INTO comments (id, from_user_id, to_user_id, item_id, rating, date, comment) \
                     VALUES (:comment_id, :from_user_id, :to_user_id, :item_id, :rating, :now, :comment)",
                ),
                stmt("update_rating", "UPDATE users SET rating = rating + :rating WHERE id = :to_user_id"),
            ],
            body: store_comment,
        },
    ]
}
