//! The twenty database transactions of the TPC-W reference implementation, under its names.
//!
//! Placeholders named like a parameter carry that parameter, and only it: a statement that the
//! body runs with other values (the lines of a cart, the related items) uses a placeholder of its
//! own name (`:line_i_id`), so that the analyzer never takes a computed value for the parameter.
//! Arguments are passed in the order the placeholder names first appear.

use super::{password, user_name, RESTOCK, RESTOCK_THRESHOLD, TAX_BASIS_POINTS};
use crate::model::{Db, Param, ParamType, Statement, TxnError, TxnType};
use ensemble_core::{Row, Rows, Value};

fn param(p: &[Value], i: usize) -> Result<&Value, TxnError> {
    p.get(i).ok_or_else(|| TxnError::Abort(format!("missing parameter {i}")))
}

fn p_int(p: &[Value], i: usize) -> Result<i64, TxnError> {
    param(p, i)?.as_int().ok_or_else(|| TxnError::Abort(format!("parameter {i} must be an integer")))
}

fn p_text(p: &[Value], i: usize) -> Result<&str, TxnError> {
    param(p, i)?.as_text().ok_or_else(|| TxnError::Abort(format!("parameter {i} must be text")))
}

/// An integer column of a row the database returned; the schema makes these NOT NULL, so a miss
/// means the row is not what the statement promised.
fn col_int(row: &[Value], i: usize) -> Result<i64, TxnError> {
    row.get(i).and_then(Value::as_int).ok_or_else(|| TxnError::Abort(format!("column {i} is not an integer")))
}

fn first_row(rows: Rows) -> Option<Row> {
    rows.into_iter().next()
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

fn text(s: impl Into<String>) -> Value {
    Value::Text(s.into())
}

/// `(o_date, o_id)` of the `window`-th most recent order, or the smallest key when there are
/// fewer orders: everything at or after it is "the last `window` orders".
fn recent_cutoff(db: &mut dyn Db, stmt: &str) -> Result<(i64, i64), TxnError> {
    match first_row(db.query(stmt, &[])?) {
        Some(r) => Ok((col_int(&r, 0)?, col_int(&r, 1)?)),
        None => Ok((i64::MIN, i64::MIN)),
    }
}

// ---------------------------------------------------------------------------------------------
// Browsing.

fn get_name(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("name", &[param(p, 0)?.clone()])?)
}

fn get_book(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("book", &[param(p, 0)?.clone()])?)
}

fn get_customer(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("customer", &[param(p, 0)?.clone()])?)
}

fn do_subject_search(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("by_subject", &[param(p, 0)?.clone()])?)
}

fn do_title_search(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    // The pattern is built here: `||` is not concatenation on every backend.
    let pattern = format!("%{}%", p_text(p, 0)?);
    Ok(db.query("by_title", &[text(pattern)])?)
}

fn do_author_search(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let pattern = format!("{}%", p_text(p, 0)?);
    Ok(db.query("by_author", &[text(pattern)])?)
}

fn get_new_products(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("new_products", &[param(p, 0)?.clone()])?)
}

fn get_best_sellers(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (date, id) = recent_cutoff(db, "recent_cutoff")?;
    Ok(db.query("best_sellers", &[param(p, 0)?.clone(), int(date), int(id)])?)
}

/// The thumbnails of the five related items, in `i_related1..5` order.
fn get_related(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let Some(row) = first_row(db.query("related_ids", &[param(p, 0)?.clone()])?) else {
        return Ok(vec![]);
    };
    let ids = (0..5).map(|i| col_int(&row, i)).collect::<Result<Vec<_>, _>>()?;
    let found = db.query("thumbnails", &ids.iter().map(|i| int(*i)).collect::<Vec<_>>())?;
    Ok(ids.iter().filter_map(|id| found.iter().find(|r| r.first().and_then(Value::as_int) == Some(*id)).cloned()).collect())
}

fn get_user_name(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("user_name", &[param(p, 0)?.clone()])?)
}

fn get_password(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("password", &[param(p, 0)?.clone()])?)
}

/// The customer's latest order: its header row (customer, addresses, payment) followed by one row
/// per order line; no rows when the customer never ordered.
fn get_most_recent_order(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let Some(row) = first_row(db.query("latest_order_id", &[param(p, 0)?.clone()])?) else {
        return Ok(vec![]);
    };
    let o_id = int(col_int(&row, 0)?);
    let mut rows = db.query("order_header", std::slice::from_ref(&o_id))?;
    rows.extend(db.query("order_lines", &[o_id])?);
    Ok(rows)
}

fn get_cart(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("cart_lines", &[param(p, 0)?.clone()])?)
}

// ---------------------------------------------------------------------------------------------
// Shopping.

fn create_empty_cart(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (sc_id, now) = (p_int(p, 0)?, p_int(p, 1)?);
    if !db.query("cart_exists", &[int(sc_id)])?.is_empty() {
        return Err(TxnError::Abort(format!("shopping cart {sc_id} exists")));
    }
    db.write("insert_cart", &[int(sc_id), int(now)])?;
    Ok(vec![vec![int(sc_id)]])
}

/// `"i_id:qty,i_id:qty"`, the quantities the shopper typed into the cart page.
fn parse_qty_updates(s: &str) -> Result<Vec<(i64, i64)>, TxnError> {
    let bad = || TxnError::Abort(format!("malformed quantity updates `{s}` (expected `i_id:qty,...`)"));
    s.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (i, q) = part.split_once(':').ok_or_else(bad)?;
            Ok((i.trim().parse().map_err(|_| bad())?, q.trim().parse().map_err(|_| bad())?))
        })
        .collect()
}

/// One more of `i_id` in the cart; a new line copies the item's price, title and backing.
fn add_item(db: &mut dyn Db, sc_id: i64, i_id: i64) -> Result<(), TxnError> {
    if let Some(r) = first_row(db.query("line_qty", &[int(sc_id), int(i_id)])?) {
        db.write("set_line_qty", &[int(col_int(&r, 0)? + 1), int(sc_id), int(i_id)])?;
        return Ok(());
    }
    let Some(item) = first_row(db.query("item_for_cart", &[int(i_id)])?) else {
        return Err(TxnError::Abort(format!("no item {i_id}")));
    };
    let mut args = vec![int(sc_id), int(i_id), int(1)];
    args.extend(item);
    db.write("insert_line", &args)?;
    Ok(())
}

/// Adds `i_id` when positive, applies the quantity updates (0 removes the line), puts
/// `random_i_id` into a cart left empty (the specification's promotional item, drawn by the
/// client), stamps the cart with `now` and returns its lines.
fn do_cart(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (sc_id, add, updates, random_item, now) = (p_int(p, 0)?, p_int(p, 1)?, parse_qty_updates(p_text(p, 2)?)?, p_int(p, 3)?, p_int(p, 4)?);
    if db.query("cart_exists", &[int(sc_id)])?.is_empty() {
        return Err(TxnError::Abort(format!("no shopping cart {sc_id}")));
    }
    if add > 0 {
        add_item(db, sc_id, add)?;
    }
    for (i_id, qty) in updates {
        if qty > 0 {
            db.write("set_line_qty", &[int(qty), int(sc_id), int(i_id)])?;
        } else {
            db.write("delete_line", &[int(sc_id), int(i_id)])?;
        }
    }
    let lines = first_row(db.query("count_lines", &[int(sc_id)])?).map(|r| col_int(&r, 0)).transpose()?.unwrap_or(0);
    if lines == 0 {
        add_item(db, sc_id, random_item)?;
    }
    db.write("touch_cart", &[int(now), int(sc_id)])?;
    Ok(db.query("cart_lines", &[int(sc_id)])?)
}

// ---------------------------------------------------------------------------------------------
// Customers.

fn refresh_session(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (c_id, now) = (p_int(p, 0)?, p_int(p, 1)?);
    if db.execute("refresh", &[int(now), int(c_id)])? == 0 {
        return Err(TxnError::Abort(format!("no customer {c_id}")));
    }
    Ok(vec![])
}

fn country_id(db: &mut dyn Db, co_name: &str) -> Result<i64, TxnError> {
    match first_row(db.query("country_id", &[text(co_name)])?) {
        Some(r) => col_int(&r, 0),
        None => Err(TxnError::Abort(format!("no country `{co_name}`"))),
    }
}

/// Inserts address `addr_id` from six consecutive parameters (street1, street2, city, state, zip,
/// country name) starting at `first`; returns its country id.
fn enter_address(db: &mut dyn Db, addr_id: i64, p: &[Value], first: usize) -> Result<i64, TxnError> {
    let co_id = country_id(db, p_text(p, first + 5)?)?;
    if !db.query("address_exists", &[int(addr_id)])?.is_empty() {
        return Err(TxnError::Abort(format!("address {addr_id} exists")));
    }
    let mut args = vec![int(addr_id)];
    for i in first..first + 5 {
        args.push(text(p_text(p, i)?));
    }
    args.push(int(co_id));
    db.write("insert_address", &args)?;
    Ok(co_id)
}

/// Registers a customer under the client's minted `c_id` with a new address `addr_id`; the user
/// name and password follow from the id. Returns `(c_id, c_uname, c_passwd, c_discount)`.
fn create_new_customer(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (c_id, addr_id) = (p_int(p, 0)?, p_int(p, 1)?);
    if !db.query("customer_exists", &[int(c_id)])?.is_empty() {
        return Err(TxnError::Abort(format!("customer {c_id} exists")));
    }
    // Parameters 4..=9: street1, street2, city, state, zip, country name.
    enter_address(db, addr_id, p, 4)?;
    let uname = user_name(c_id);
    let passwd = password(&uname);
    let (fname, lname) = (p_text(p, 2)?, p_text(p, 3)?);
    let (phone, email, birthdate, data, discount, now) =
        (p_text(p, 10)?, p_text(p, 11)?, p_int(p, 12)?, p_text(p, 13)?, p_int(p, 14)?, p_int(p, 15)?);
    if !(0..=100).contains(&discount) {
        return Err(TxnError::Abort(format!("discount {discount}% out of range")));
    }
    db.write(
        "insert_customer",
        &[
            int(c_id),
            text(uname.clone()),
            text(passwd.clone()),
            text(fname),
            text(lname),
            int(addr_id),
            text(phone),
            text(email),
            int(now),
            int(discount),
            int(birthdate),
            text(data),
        ],
    )?;
    Ok(vec![vec![int(c_id), text(uname), text(passwd), int(discount)]])
}

// ---------------------------------------------------------------------------------------------
// Ordering.

/// Totals of a cart in cents, as the specification computes them: the customer's discount off the
/// items, 8.25 % tax on that, and $3.00 plus $1.00 per book shipping. Rounding is down, once per
/// step.
pub fn order_totals(lines: &[(i64, i64)], discount_percent: i64) -> (i64, i64, i64) {
    let gross: i64 = lines.iter().map(|(cost, qty)| cost * qty).sum();
    let books: i64 = lines.iter().map(|(_, qty)| qty).sum();
    let sub_total = gross * (100 - discount_percent) / 100;
    let tax = sub_total * TAX_BASIS_POINTS / 10_000;
    let total = sub_total + tax + 300 + 100 * books;
    (sub_total, tax, total)
}

/// The stock after selling `qty`: the specification restocks by 21 when it would fall below 10.
pub fn stock_after(stock: i64, qty: i64) -> i64 {
    if stock - qty < RESTOCK_THRESHOLD {
        stock - qty + RESTOCK
    } else {
        stock - qty
    }
}

/// Parameters shared by both variants, in this order.
const BUY_PARAMS: [(&str, ParamType); 12] = [
    ("sc_id", ParamType::Int),
    ("c_id", ParamType::Int),
    ("o_id", ParamType::Int),
    ("cx_type", ParamType::Text),
    ("cx_num", ParamType::Text),
    ("cx_name", ParamType::Text),
    ("cx_expire", ParamType::Int),
    ("cx_auth_id", ParamType::Text),
    ("o_ship_type", ParamType::Text),
    ("o_ship_date", ParamType::Int),
    ("ol_comments", ParamType::Text),
    ("now", ParamType::Int),
];

/// Turns cart `sc_id` into order `o_id` of customer `c_id`: the order, one line per cart line at
/// the item's current cost, the stock taken (and restocked), the credit-card transaction, and an
/// empty cart. `new_address` ships to an address entered first (parameters 12..=18: addr_id,
/// street1, street2, city, state, zip, country name), otherwise to the customer's own.
/// Returns `(o_id, o_sub_total, o_tax, o_total)`.
fn buy_confirm(db: &mut dyn Db, p: &[Value], new_address: bool) -> Result<Rows, TxnError> {
    let (sc_id, c_id, o_id) = (p_int(p, 0)?, p_int(p, 1)?, p_int(p, 2)?);
    let (ship_date, comments, now) = (p_int(p, 9)?, p_text(p, 10)?, p_int(p, 11)?);
    let Some(cust) = first_row(db.query("customer_for_order", &[int(c_id)])?) else {
        return Err(TxnError::Abort(format!("no customer {c_id}")));
    };
    let (discount, bill_addr, bill_co) = (col_int(&cust, 0)?, col_int(&cust, 1)?, col_int(&cust, 2)?);
    if !db.query("order_exists", &[int(o_id)])?.is_empty() {
        return Err(TxnError::Abort(format!("order {o_id} exists")));
    }
    let lines = db.query("cart_for_order", &[int(sc_id)])?;
    if lines.is_empty() {
        return Err(TxnError::Abort(format!("shopping cart {sc_id} is empty or missing")));
    }
    // (i_id, qty, cost, stock)
    let lines = lines
        .iter()
        .map(|r| Ok((col_int(r, 0)?, col_int(r, 1)?, col_int(r, 2)?, col_int(r, 3)?)))
        .collect::<Result<Vec<_>, TxnError>>()?;
    let (ship_addr, ship_co) = if new_address {
        let addr_id = p_int(p, 12)?;
        (addr_id, enter_address(db, addr_id, p, 13)?)
    } else {
        (bill_addr, bill_co)
    };
    let priced: Vec<(i64, i64)> = lines.iter().map(|(_, qty, cost, _)| (*cost, *qty)).collect();
    let (sub_total, tax, total) = order_totals(&priced, discount);
    db.write(
        "insert_order",
        &[
            int(o_id),
            int(c_id),
            int(now),
            int(sub_total),
            int(tax),
            int(total),
            param(p, 8)?.clone(),
            int(ship_date),
            int(bill_addr),
            int(ship_addr),
        ],
    )?;
    for (n, (i_id, qty, _, stock)) in lines.iter().enumerate() {
        db.write("insert_order_line", &[int(n as i64 + 1), int(o_id), int(*i_id), int(*qty), int(discount), text(comments)])?;
        db.write("set_stock", &[int(stock_after(*stock, *qty)), int(*i_id)])?;
    }
    db.write(
        "insert_cc_xact",
        &[
            int(o_id),
            param(p, 3)?.clone(),
            param(p, 4)?.clone(),
            param(p, 5)?.clone(),
            param(p, 6)?.clone(),
            param(p, 7)?.clone(),
            int(total),
            int(now),
            int(ship_co),
        ],
    )?;
    db.write("clear_cart", &[int(sc_id)])?;
    Ok(vec![vec![int(o_id), int(sub_total), int(tax), int(total)]])
}

fn do_buy_confirm(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    buy_confirm(db, p, false)
}

fn do_buy_confirm_new_address(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    buy_confirm(db, p, true)
}

// ---------------------------------------------------------------------------------------------
// Administration.

/// Sets an item's cost, image and thumbnail, dates it `now`, and makes its related items the five
/// most bought (by quantity) in the last 10,000 orders of the customers who bought it in them.
/// Too few such items leave the remaining slots to the previous related items, in order.
fn admin_update(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let i_id = p_int(p, 0)?;
    let Some(old) = first_row(db.query("related_ids", &[int(i_id)])?) else {
        return Err(TxnError::Abort(format!("no item {i_id}")));
    };
    let (date, id) = recent_cutoff(db, "recent_cutoff")?;
    let mut related = Vec::with_capacity(5);
    for r in db.query("bought_together", &[int(i_id), int(date), int(id)])? {
        related.push(col_int(&r, 0)?);
    }
    for i in 0..5 {
        let o = col_int(&old, i)?;
        if related.len() < 5 && o != i_id && !related.contains(&o) {
            related.push(o);
        }
    }
    // Only when the old list itself repeated ids: keep its slots as they were.
    for i in related.len()..5 {
        related.push(col_int(&old, i)?);
    }
    let mut args = vec![param(p, 1)?.clone(), param(p, 2)?.clone(), param(p, 3)?.clone(), param(p, 4)?.clone()];
    args.extend(related.iter().map(|r| int(*r)));
    args.push(int(i_id));
    db.write("update_item", &args)?;
    Ok(vec![related.into_iter().map(int).collect()])
}

// ---------------------------------------------------------------------------------------------
// Declarations.

fn params(list: &[(&'static str, ParamType)]) -> Vec<Param> {
    list.iter().map(|(name, ty)| Param { name, ty: *ty }).collect()
}

const fn stmt(name: &'static str, sql: &'static str) -> Statement {
    Statement { name, sql }
}

const CART_EXISTS: Statement = stmt("cart_exists", "SELECT sc_id FROM shopping_cart WHERE sc_id = :sc_id");
const CART_LINES: Statement = stmt(
    "cart_lines",
    "SELECT scl_i_id, scl_qty, scl_cost, scl_srp, scl_title, scl_backing FROM shopping_cart_line \
     WHERE scl_sc_id = :sc_id ORDER BY scl_i_id",
);
const RELATED_IDS: Statement =
    stmt("related_ids", "SELECT i_related1, i_related2, i_related3, i_related4, i_related5 FROM item WHERE i_id = :i_id");
const COUNTRY_ID: Statement = stmt("country_id", "SELECT co_id FROM country WHERE co_name = :co_name");
const ADDRESS_EXISTS: Statement = stmt("address_exists", "SELECT addr_id FROM address WHERE addr_id = :addr_id");
const INSERT_ADDRESS: Statement = stmt(
    "insert_address",
    "INSERT INTO address (addr_id, addr_street1, addr_street2, addr_city, addr_state, addr_zip, addr_co_id) \
     VALUES (:addr_id, :addr_street1, :addr_street2, :addr_city, :addr_state, :addr_zip, :addr_co_id)",
);

fn buy_confirm_statements() -> Vec<Statement> {
    vec![
        stmt(
            "customer_for_order",
            "SELECT c_discount, c_addr_id, addr_co_id FROM customer JOIN address ON addr_id = c_addr_id WHERE c_id = :c_id",
        ),
        stmt("order_exists", "SELECT o_id FROM orders WHERE o_id = :o_id"),
        stmt(
            "cart_for_order",
            "SELECT scl_i_id, scl_qty, i_cost, i_stock FROM shopping_cart_line JOIN item ON i_id = scl_i_id \
             WHERE scl_sc_id = :sc_id ORDER BY scl_i_id",
        ),
        stmt(
            "insert_order",
            "INSERT INTO orders (o_id, o_c_id, o_date, o_sub_total, o_tax, o_total, o_ship_type, o_ship_date, \
             o_bill_addr_id, o_ship_addr_id, o_status) VALUES (:o_id, :c_id, :now, :o_sub_total, :o_tax, :o_total, \
             :o_ship_type, :o_ship_date, :o_bill_addr_id, :o_ship_addr_id, 'PENDING')",
        ),
        stmt(
            "insert_order_line",
            "INSERT INTO order_line (ol_id, ol_o_id, ol_i_id, ol_qty, ol_discount, ol_comments) \
             VALUES (:ol_id, :o_id, :line_i_id, :ol_qty, :ol_discount, :ol_comments)",
        ),
        stmt("set_stock", "UPDATE item SET i_stock = :new_stock WHERE i_id = :line_i_id"),
        stmt(
            "insert_cc_xact",
            "INSERT INTO cc_xacts (cx_o_id, cx_type, cx_num, cx_name, cx_expire, cx_auth_id, cx_xact_amt, cx_xact_date, \
             cx_co_id) VALUES (:o_id, :cx_type, :cx_num, :cx_name, :cx_expire, :cx_auth_id, :cx_xact_amt, :now, :cx_co_id)",
        ),
        stmt("clear_cart", "DELETE FROM shopping_cart_line WHERE scl_sc_id = :sc_id"),
    ]
}

/// The `(o_date, o_id)` key of the 3,333rd and the 10,000th most recent order (the literals are
/// BEST_SELLER_WINDOW − 1 and RELATED_WINDOW − 1, checked by a test).
const BEST_SELLER_CUTOFF: Statement =
    stmt("recent_cutoff", "SELECT o_date, o_id FROM orders ORDER BY o_date DESC, o_id DESC LIMIT 1 OFFSET 3332");
const RELATED_CUTOFF: Statement =
    stmt("recent_cutoff", "SELECT o_date, o_id FROM orders ORDER BY o_date DESC, o_id DESC LIMIT 1 OFFSET 9999");

pub fn transactions() -> Vec<TxnType> {
    use ParamType::*;
    let mut buy_new_params = BUY_PARAMS.to_vec();
    buy_new_params.extend([
        ("addr_id", Int),
        ("addr_street1", Text),
        ("addr_street2", Text),
        ("addr_city", Text),
        ("addr_state", Text),
        ("addr_zip", Text),
        ("co_name", Text),
    ]);
    let mut buy_new_statements = buy_confirm_statements();
    buy_new_statements.extend([COUNTRY_ID, ADDRESS_EXISTS, INSERT_ADDRESS]);
    vec![
        TxnType {
            name: "getName",
            params: params(&[("c_id", Int)]),
            statements: vec![stmt("name", "SELECT c_fname, c_lname FROM customer WHERE c_id = :c_id")],
            body: get_name,
        },
        TxnType {
            name: "getBook",
            params: params(&[("i_id", Int)]),
            statements: vec![stmt(
                "book",
                "SELECT i_id, i_title, a_fname, a_lname, i_pub_date, i_publisher, i_subject, i_desc, i_related1, \
                 i_related2, i_related3, i_related4, i_related5, i_thumbnail, i_image, i_srp, i_cost, i_avail, i_stock, \
                 i_isbn, i_page, i_backing, i_dimensions FROM item JOIN author ON a_id = i_a_id WHERE i_id = :i_id",
            )],
            body: get_book,
        },
        TxnType {
            name: "getCustomer",
            params: params(&[("c_uname", Text)]),
            statements: vec![stmt(
                "customer",
                "SELECT c_id, c_uname, c_passwd, c_fname, c_lname, c_phone, c_email, c_since, c_last_login, c_login, \
                 c_expiration, c_discount, c_balance, c_ytd_pmt, c_birthdate, c_data, addr_id, addr_street1, addr_street2, \
                 addr_city, addr_state, addr_zip, co_id, co_name FROM customer JOIN address ON addr_id = c_addr_id \
                 JOIN country ON co_id = addr_co_id WHERE c_uname = :c_uname",
            )],
            body: get_customer,
        },
        TxnType {
            name: "doSubjectSearch",
            params: params(&[("i_subject", Text)]),
            statements: vec![stmt(
                "by_subject",
                "SELECT i_id, i_title, a_fname, a_lname FROM item JOIN author ON a_id = i_a_id \
                 WHERE i_subject = :i_subject ORDER BY i_title, i_id LIMIT 50",
            )],
            body: do_subject_search,
        },
        TxnType {
            name: "doTitleSearch",
            params: params(&[("search_key", Text)]),
            statements: vec![stmt(
                "by_title",
                "SELECT i_id, i_title, a_fname, a_lname FROM item JOIN author ON a_id = i_a_id \
                 WHERE i_title LIKE :title_pattern ORDER BY i_title, i_id LIMIT 50",
            )],
            body: do_title_search,
        },
        TxnType {
            name: "doAuthorSearch",
            params: params(&[("search_key", Text)]),
            statements: vec![stmt(
                "by_author",
                "SELECT i_id, i_title, a_fname, a_lname FROM item JOIN author ON a_id = i_a_id \
                 WHERE a_lname LIKE :author_pattern ORDER BY i_title, i_id LIMIT 50",
            )],
            body: do_author_search,
        },
        TxnType {
            name: "getNewProducts",
            params: params(&[("i_subject", Text)]),
            statements: vec![stmt(
                "new_products",
                "SELECT i_id, i_title, a_fname, a_lname FROM item JOIN author ON a_id = i_a_id \
                 WHERE i_subject = :i_subject ORDER BY i_pub_date DESC, i_title, i_id LIMIT 50",
            )],
            body: get_new_products,
        },
        TxnType {
            name: "getBestSellers",
            params: params(&[("i_subject", Text)]),
            statements: vec![
                BEST_SELLER_CUTOFF,
                stmt(
                    "best_sellers",
                    "SELECT i_id, i_title, a_fname, a_lname, SUM(ol_qty) AS sold FROM orders \
                     JOIN order_line ON ol_o_id = o_id JOIN item ON i_id = ol_i_id JOIN author ON a_id = i_a_id \
                     WHERE i_subject = :i_subject AND (o_date > :cutoff_date OR (o_date = :cutoff_date AND o_id >= :cutoff_id)) \
                     GROUP BY i_id, i_title, a_fname, a_lname ORDER BY sold DESC, i_id LIMIT 50",
                ),
            ],
            body: get_best_sellers,
        },
        TxnType {
            name: "getRelated",
            params: params(&[("i_id", Int)]),
            statements: vec![
                RELATED_IDS,
                stmt(
                    "thumbnails",
                    "SELECT i_id, i_thumbnail FROM item WHERE i_id IN (:related1, :related2, :related3, :related4, :related5)",
                ),
            ],
            body: get_related,
        },
        TxnType {
            name: "adminUpdate",
            params: params(&[("i_id", Int), ("i_cost", Int), ("i_image", Text), ("i_thumbnail", Text), ("now", Int)]),
            statements: vec![
                RELATED_IDS,
                RELATED_CUTOFF,
                stmt(
                    "bought_together",
                    "SELECT l.ol_i_id FROM orders o JOIN order_line l ON l.ol_o_id = o.o_id \
                     WHERE l.ol_i_id <> :i_id \
                     AND (o.o_date > :cutoff_date OR (o.o_date = :cutoff_date AND o.o_id >= :cutoff_id)) \
                     AND o.o_c_id IN (SELECT o2.o_c_id FROM orders o2 JOIN order_line l2 ON l2.ol_o_id = o2.o_id \
                     WHERE l2.ol_i_id = :i_id \
                     AND (o2.o_date > :cutoff_date OR (o2.o_date = :cutoff_date AND o2.o_id >= :cutoff_id))) \
                     GROUP BY l.ol_i_id ORDER BY SUM(l.ol_qty) DESC, l.ol_i_id LIMIT 5",
                ),
                stmt(
                    "update_item",
                    "UPDATE item SET i_cost = :i_cost, i_image = :i_image, i_thumbnail = :i_thumbnail, i_pub_date = :now, \
                     i_related1 = :related1, i_related2 = :related2, i_related3 = :related3, i_related4 = :related4, \
                     i_related5 = :related5 WHERE i_id = :i_id",
                ),
            ],
            body: admin_update,
        },
        TxnType {
            name: "getUserName",
            params: params(&[("c_id", Int)]),
            statements: vec![stmt("user_name", "SELECT c_uname FROM customer WHERE c_id = :c_id")],
            body: get_user_name,
        },
        TxnType {
            name: "getPassword",
            params: params(&[("c_uname", Text)]),
            statements: vec![stmt("password", "SELECT c_passwd FROM customer WHERE c_uname = :c_uname")],
            body: get_password,
        },
        TxnType {
            name: "getMostRecentOrder",
            params: params(&[("c_uname", Text)]),
            statements: vec![
                stmt(
                    "latest_order_id",
                    "SELECT o_id FROM customer JOIN orders ON o_c_id = c_id WHERE c_uname = :c_uname \
                     ORDER BY o_date DESC, o_id DESC LIMIT 1",
                ),
                stmt(
                    "order_header",
                    "SELECT o_id, c_fname, c_lname, c_phone, c_email, o_date, o_sub_total, o_tax, o_total, o_ship_type, \
                     o_ship_date, o_status, bill.addr_street1, bill.addr_street2, bill.addr_city, bill.addr_state, \
                     bill.addr_zip, bill_co.co_name, ship.addr_street1, ship.addr_street2, ship.addr_city, ship.addr_state, \
                     ship.addr_zip, ship_co.co_name, cx_type FROM orders JOIN customer ON c_id = o_c_id \
                     JOIN address bill ON bill.addr_id = o_bill_addr_id JOIN country bill_co ON bill_co.co_id = bill.addr_co_id \
                     JOIN address ship ON ship.addr_id = o_ship_addr_id JOIN country ship_co ON ship_co.co_id = ship.addr_co_id \
                     JOIN cc_xacts ON cx_o_id = o_id WHERE o_id = :found_o_id",
                ),
                stmt(
                    "order_lines",
                    "SELECT ol_i_id, i_title, i_publisher, i_cost, ol_qty, ol_discount, ol_comments FROM order_line \
                     JOIN item ON i_id = ol_i_id WHERE ol_o_id = :found_o_id ORDER BY ol_id",
                ),
            ],
            body: get_most_recent_order,
        },
        TxnType {
            name: "createEmptyCart",
            params: params(&[("sc_id", Int), ("now", Int)]),
            statements: vec![CART_EXISTS, stmt("insert_cart", "INSERT INTO shopping_cart (sc_id, sc_time) VALUES (:sc_id, :now)")],
            body: create_empty_cart,
        },
        TxnType {
            name: "doCart",
            params: params(&[("sc_id", Int), ("i_id", Int), ("qty_updates", Text), ("random_i_id", Int), ("now", Int)]),
            statements: vec![
                CART_EXISTS,
                stmt("line_qty", "SELECT scl_qty FROM shopping_cart_line WHERE scl_sc_id = :sc_id AND scl_i_id = :line_i_id"),
                stmt(
                    "set_line_qty",
                    "UPDATE shopping_cart_line SET scl_qty = :scl_qty WHERE scl_sc_id = :sc_id AND scl_i_id = :line_i_id",
                ),
                stmt("delete_line", "DELETE FROM shopping_cart_line WHERE scl_sc_id = :sc_id AND scl_i_id = :line_i_id"),
                stmt("item_for_cart", "SELECT i_cost, i_srp, i_title, i_backing FROM item WHERE i_id = :line_i_id"),
                stmt(
                    "insert_line",
                    "INSERT INTO shopping_cart_line (scl_sc_id, scl_i_id, scl_qty, scl_cost, scl_srp, scl_title, scl_backing) \
                     VALUES (:sc_id, :line_i_id, :scl_qty, :scl_cost, :scl_srp, :scl_title, :scl_backing)",
                ),
                stmt("count_lines", "SELECT COUNT(*) FROM shopping_cart_line WHERE scl_sc_id = :sc_id"),
                stmt("touch_cart", "UPDATE shopping_cart SET sc_time = :now WHERE sc_id = :sc_id"),
                CART_LINES,
            ],
            body: do_cart,
        },
        TxnType { name: "getCart", params: params(&[("sc_id", Int)]), statements: vec![CART_LINES], body: get_cart },
        TxnType {
            name: "refreshSession",
            params: params(&[("c_id", Int), ("now", Int)]),
            statements: vec![stmt(
                "refresh",
                // The literal is SESSION_SECONDS (checked by a test).
                "UPDATE customer SET c_login = :now, c_expiration = :now + 7200 WHERE c_id = :c_id",
            )],
            body: refresh_session,
        },
        TxnType {
            name: "createNewCustomer",
            params: params(&[
                ("c_id", Int),
                ("addr_id", Int),
                ("c_fname", Text),
                ("c_lname", Text),
                ("addr_street1", Text),
                ("addr_street2", Text),
                ("addr_city", Text),
                ("addr_state", Text),
                ("addr_zip", Text),
                ("co_name", Text),
                ("c_phone", Text),
                ("c_email", Text),
                ("c_birthdate", Int),
                ("c_data", Text),
                ("c_discount", Int),
                ("now", Int),
            ]),
            statements: vec![
                stmt("customer_exists", "SELECT c_id FROM customer WHERE c_id = :c_id"),
                COUNTRY_ID,
                ADDRESS_EXISTS,
                INSERT_ADDRESS,
                stmt(
                    "insert_customer",
                    "INSERT INTO customer (c_id, c_uname, c_passwd, c_fname, c_lname, c_addr_id, c_phone, c_email, c_since, \
                     c_last_login, c_login, c_expiration, c_discount, c_balance, c_ytd_pmt, c_birthdate, c_data) \
                     VALUES (:c_id, :c_uname, :c_passwd, :c_fname, :c_lname, :addr_id, :c_phone, :c_email, :now, :now, :now, \
                     :now + 7200, :c_discount, 0, 0, :c_birthdate, :c_data)",
                ),
            ],
            body: create_new_customer,
        },
        TxnType { name: "doBuyConfirm", params: params(&BUY_PARAMS), statements: buy_confirm_statements(), body: do_buy_confirm },
        TxnType {
            name: "doBuyConfirmNewAddress",
            params: params(&buy_new_params),
            statements: buy_new_statements,
            body: do_buy_confirm_new_address,
        },
    ]
}

/// Checks that the literals in the SQL agree with the constants the emulator and tests use.
#[cfg(test)]
mod tests {
    use super::super::{BEST_SELLER_WINDOW, RELATED_WINDOW, SESSION_SECONDS};
    use super::*;

    #[test]
    fn sql_literals_match_constants() {
        let all = transactions();
        let sql = |t: &str, s: &str| all.iter().find(|x| x.name == t).and_then(|x| x.statement(s)).map(|s| s.sql).unwrap_or("");
        assert!(sql("refreshSession", "refresh").contains(&format!("+ {SESSION_SECONDS}")));
        assert!(sql("createNewCustomer", "insert_customer").contains(&format!("+ {SESSION_SECONDS}")));
        assert!(sql("getBestSellers", "recent_cutoff").ends_with(&format!("OFFSET {}", BEST_SELLER_WINDOW - 1)));
        assert!(sql("adminUpdate", "recent_cutoff").ends_with(&format!("OFFSET {}", RELATED_WINDOW - 1)));
    }

    #[test]
    fn totals_and_restock() {
        // 2 × $10.00 + 1 × $5.00 at 10 % off: 2250 cents, tax 185, shipping 300 + 3 × 100.
        assert_eq!(order_totals(&[(1000, 2), (500, 1)], 10), (2250, 185, 2250 + 185 + 600));
        assert_eq!(stock_after(30, 5), 25);
        assert_eq!(stock_after(12, 5), 28);
    }

    #[test]
    fn quantity_updates_parse() {
        assert_eq!(parse_qty_updates("").unwrap_or_default(), vec![]);
        assert_eq!(parse_qty_updates("3:2, 5:0").unwrap_or_default(), vec![(3, 2), (5, 0)]);
        assert!(parse_qty_updates("3-2").is_err());
    }
}
