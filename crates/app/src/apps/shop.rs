//! `shop`, the online store of the Gyro paper's section IV (Eliá §3.2): carts are created,
//! filled with items after a stock check, and ordered after a second stock check that decrements
//! the stock. Items can be browsed.

use crate::model::{Application, DataConfig, Dataset, Db, Param, ParamType, Statement, TableRows, TxnError, TxnType};
use crate::workload::{ClientCtx, Workload};
use ensemble_core::{Outcome, Rows, Value};
use rand::{Rng, RngCore, SeedableRng};
use std::sync::Arc;

pub const SCHEMA: &[&str] = &[
    "CREATE TABLE items (item_id INTEGER PRIMARY KEY, name TEXT NOT NULL, price INTEGER NOT NULL, stock INTEGER NOT NULL)",
    "CREATE TABLE carts (cart_id INTEGER PRIMARY KEY, status TEXT NOT NULL)",
    "CREATE TABLE cart_lines (cart_id INTEGER NOT NULL, item_id INTEGER NOT NULL, qty INTEGER NOT NULL, PRIMARY KEY (cart_id, item_id))",
    "CREATE TABLE orders (cart_id INTEGER PRIMARY KEY, total INTEGER NOT NULL, lines INTEGER NOT NULL)",
];

/// Items per unit of scale.
pub const ITEMS_PER_SCALE: i64 = 1_000;

fn int(v: &Value) -> i64 {
    v.as_int().expect("checked parameter")
}

fn one_int(rows: &Rows) -> Option<i64> {
    rows.first().and_then(|r| r.first()).and_then(Value::as_int)
}

fn create_cart(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    if !db.query("cart_status", std::slice::from_ref(&p[0]))?.is_empty() {
        return Err(TxnError::Abort(format!("cart {} exists", int(&p[0]))));
    }
    db.write("insert_cart", std::slice::from_ref(&p[0]))?;
    Ok(vec![])
}

fn add_item(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let (cart, item, qty) = (p[0].clone(), p[1].clone(), int(&p[2]));
    if qty <= 0 {
        return Err(TxnError::Abort("quantity must be positive".into()));
    }
    match db.query("cart_status", std::slice::from_ref(&cart))?.first().and_then(|r| r[0].as_text().map(str::to_owned)) {
        None => return Err(TxnError::Abort(format!("no cart {}", int(&cart)))),
        Some(s) if s != "open" => return Err(TxnError::Abort(format!("cart {} is {s}", int(&cart)))),
        Some(_) => {}
    }
    let Some(stock) = one_int(&db.query("item_stock", std::slice::from_ref(&item))?) else {
        return Err(TxnError::Abort(format!("no item {}", int(&item))));
    };
    let already = one_int(&db.query("line_qty", &[cart.clone(), item.clone()])?);
    if stock < qty + already.unwrap_or(0) {
        return Err(TxnError::Abort(format!("item {} out of stock", int(&item))));
    }
    match already {
        Some(q) => db.write("update_line", &[Value::Int(q + qty), cart, item])?,
        None => db.write("insert_line", &[cart, item, Value::Int(qty)])?,
    };
    Ok(vec![vec![Value::Int(stock)]])
}

fn order(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    let cart = p[0].clone();
    match db.query("cart_status", std::slice::from_ref(&cart))?.first().and_then(|r| r[0].as_text().map(str::to_owned)) {
        None => return Err(TxnError::Abort(format!("no cart {}", int(&cart)))),
        Some(s) if s != "open" => return Err(TxnError::Abort(format!("cart {} is {s}", int(&cart)))),
        Some(_) => {}
    }
    let lines = db.query("cart_contents", std::slice::from_ref(&cart))?;
    if lines.is_empty() {
        return Err(TxnError::Abort(format!("cart {} is empty", int(&cart))));
    }
    let mut total = 0;
    for l in &lines {
        let (item, qty, stock, price) = (l[0].clone(), int(&l[1]), int(&l[2]), int(&l[3]));
        if stock < qty {
            return Err(TxnError::Abort(format!("item {} out of stock", int(&item))));
        }
        total += qty * price;
    }
    for l in &lines {
        db.write("take_stock", &[l[1].clone(), l[0].clone()])?;
    }
    db.write("insert_order", &[cart.clone(), Value::Int(total), Value::Int(lines.len() as i64)])?;
    db.write("close_cart", &[cart])?;
    Ok(vec![vec![Value::Int(total)]])
}

fn browse_items(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("items_from", &[p[0].clone(), p[1].clone()])?)
}

fn get_cart(db: &mut dyn Db, p: &[Value]) -> Result<Rows, TxnError> {
    Ok(db.query("cart_lines", &[p[0].clone()])?)
}

const CART_STATUS: Statement = Statement { name: "cart_status", sql: "SELECT status FROM carts WHERE cart_id = :cart_id" };

pub fn transactions() -> Vec<TxnType> {
    use ParamType::*;
    vec![
        TxnType {
            name: "create_cart",
            params: vec![Param { name: "cart_id", ty: Int }],
            statements: vec![
                CART_STATUS,
                Statement { name: "insert_cart", sql: "INSERT INTO carts (cart_id, status) VALUES (:cart_id, 'open')" },
            ],
            body: create_cart,
        },
        TxnType {
            name: "add_item",
            params: vec![Param { name: "cart_id", ty: Int }, Param { name: "item_id", ty: Int }, Param { name: "qty", ty: Int }],
            statements: vec![
                CART_STATUS,
                Statement { name: "item_stock", sql: "SELECT stock FROM items WHERE item_id = :item_id" },
                Statement { name: "line_qty", sql: "SELECT qty FROM cart_lines WHERE cart_id = :cart_id AND item_id = :item_id" },
                Statement {
                    name: "update_line",
                    sql: "UPDATE cart_lines SET qty = :new_qty WHERE cart_id = :cart_id AND item_id = :item_id",
                },
                Statement {
                    name: "insert_line",
                    sql: "INSERT INTO cart_lines (cart_id, item_id, qty) VALUES (:cart_id, :item_id, :qty)",
                },
            ],
            body: add_item,
        },
        TxnType {
            name: "order",
            params: vec![Param { name: "cart_id", ty: Int }],
            statements: vec![
                CART_STATUS,
                Statement {
                    name: "cart_contents",
                    sql: "SELECT l.item_id, l.qty, i.stock, i.price FROM cart_lines l JOIN items i ON i.item_id = l.item_id \
                          WHERE l.cart_id = :cart_id ORDER BY l.item_id",
                },
                Statement { name: "take_stock", sql: "UPDATE items SET stock = stock - :qty WHERE item_id = :item_id" },
                Statement {
                    name: "insert_order",
                    sql: "INSERT INTO orders (cart_id, total, lines) VALUES (:cart_id, :total, :lines)",
                },
                Statement { name: "close_cart", sql: "UPDATE carts SET status = 'ordered' WHERE cart_id = :cart_id" },
            ],
            body: order,
        },
        TxnType {
            name: "browse_items",
            params: vec![Param { name: "first_item", ty: Int }, Param { name: "count", ty: Int }],
            statements: vec![Statement {
                name: "items_from",
                sql: "SELECT item_id, name, price, stock FROM items WHERE item_id >= :first_item ORDER BY item_id LIMIT :count",
            }],
            body: browse_items,
        },
        TxnType {
            name: "get_cart",
            params: vec![Param { name: "cart_id", ty: Int }],
            statements: vec![Statement {
                name: "cart_lines",
                sql: "SELECT item_id, qty FROM cart_lines WHERE cart_id = :cart_id ORDER BY item_id",
            }],
            body: get_cart,
        },
    ]
}

/// `items = 1000 × scale`, each with a name, a price and a stock large enough that a run of
/// minutes rarely sells out.
pub fn generate(cfg: DataConfig) -> Dataset {
    let mut rng = rand_chacha_like(cfg.seed);
    let n = ITEMS_PER_SCALE * cfg.scale.max(1) as i64;
    let rows = (0..n)
        .map(|i| {
            vec![
                Value::Int(i),
                Value::Text(format!("item-{i}")),
                Value::Int(rng.random_range(1..=100)),
                Value::Int(rng.random_range(50_000..=100_000)),
            ]
        })
        .collect();
    Dataset {
        tables: vec![TableRows {
            table: "items".into(),
            columns: ["item_id", "name", "price", "stock"].map(String::from).to_vec(),
            rows,
        }],
    }
}

fn rand_chacha_like(seed: u64) -> rand::rngs::SmallRng {
    rand::rngs::SmallRng::seed_from_u64(seed)
}

pub fn application() -> Arc<Application> {
    Application::new("shop", SCHEMA, transactions(), generate).expect("the shop application is well-formed")
}

/// A shopper: browses, creates a cart, adds 1..=`max_lines` items, orders it, starts again.
#[derive(Clone, Debug)]
pub struct ShopWorkload {
    pub items: i64,
    /// Probability that the next request is a browse instead of the next step of the cart.
    pub browse_fraction: f64,
    pub max_lines: u32,
    minted: u64,
    cart: Option<i64>,
    lines_left: u32,
}

impl ShopWorkload {
    pub fn new(scale: u32, browse_fraction: f64, max_lines: u32) -> Self {
        ShopWorkload { items: ITEMS_PER_SCALE * scale.max(1) as i64, browse_fraction, max_lines: max_lines.max(1), minted: 0, cart: None, lines_left: 0 }
    }
}

impl Workload for ShopWorkload {
    fn next(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> (String, Vec<Value>) {
        if rng.random_bool(self.browse_fraction.clamp(0.0, 1.0)) {
            let first = rng.random_range(0..self.items);
            return ("browse_items".into(), vec![Value::Int(first), Value::Int(10)]);
        }
        match self.cart {
            None => {
                let id = ctx.home_id(self.minted);
                self.minted += 1;
                self.cart = Some(id);
                self.lines_left = rng.random_range(1..=self.max_lines);
                ("create_cart".into(), vec![Value::Int(id)])
            }
            Some(cart) if self.lines_left > 0 => {
                self.lines_left -= 1;
                let item = rng.random_range(0..self.items);
                ("add_item".into(), vec![Value::Int(cart), Value::Int(item), Value::Int(rng.random_range(1..=3))])
            }
            Some(cart) => {
                self.cart = None;
                ("order".into(), vec![Value::Int(cart)])
            }
        }
    }

    fn observe(&mut self, txn: &str, outcome: &Outcome) {
        // A cart that could not be created is abandoned.
        if txn == "create_cart" && matches!(outcome, Outcome::Aborted { .. }) {
            self.cart = None;
        }
    }
}
