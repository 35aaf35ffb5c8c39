//! The emulated browser: a walk over the fourteen web interactions by the Shopping Mix, each
//! interaction issuing its database transactions one `next()` at a time.
//!
//! Session state (the customer, the cart, the item on screen, the links of the last listing) lives
//! here and is learnt from outcomes in `observe()`. Everything the reference implementation would
//! have decided inside a transaction (new ids, the time, random choices) is decided here and sent
//! as a parameter: ids are minted with [`ClientCtx::home_id`], above every id of the generated
//! database, and `now` is a logical clock that advances by the mean think time per interaction.

use super::data::{a_string, n_string, Cardinalities};
use super::{
    digsyl, title_word, user_name, BASE_TIME, CC_TYPES, COUNTRIES, DAY, ITEMS, SHIP_TYPES, SUBJECTS, TITLE_WORDS,
};
use crate::workload::{ClientCtx, InteractionProgress, Workload};
use ensemble_core::{Outcome, Rows, Value};
use rand::{Rng, RngCore};
use std::collections::{BTreeMap, VecDeque};

/// The fourteen web interactions of TPC-W.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Interaction {
    Home,
    NewProducts,
    BestSellers,
    ProductDetail,
    SearchRequest,
    SearchResults,
    ShoppingCart,
    CustomerRegistration,
    BuyRequest,
    BuyConfirm,
    OrderInquiry,
    OrderDisplay,
    AdminRequest,
    AdminConfirm,
}

pub const INTERACTIONS: [Interaction; 14] = {
    use Interaction::*;
    [
        Home,
        NewProducts,
        BestSellers,
        ProductDetail,
        SearchRequest,
        SearchResults,
        ShoppingCart,
        CustomerRegistration,
        BuyRequest,
        BuyConfirm,
        OrderInquiry,
        OrderDisplay,
        AdminRequest,
        AdminConfirm,
    ]
};

impl Interaction {
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        use Interaction::*;
        match self {
            Home => "Home",
            NewProducts => "New Products",
            BestSellers => "Best Sellers",
            ProductDetail => "Product Detail",
            SearchRequest => "Search Request",
            SearchResults => "Search Results",
            ShoppingCart => "Shopping Cart",
            CustomerRegistration => "Customer Registration",
            BuyRequest => "Buy Request",
            BuyConfirm => "Buy Confirm",
            OrderInquiry => "Order Inquiry",
            OrderDisplay => "Order Display",
            AdminRequest => "Admin Request",
            AdminConfirm => "Admin Confirm",
        }
    }

    /// The interactions the write-share knob steers toward: those issuing a writing transaction
    /// (Shopping Cart, Buy Request, Buy Confirm, Admin Confirm) and Customer Registration, the only
    /// way into Buy Request.
    pub fn leads_to_writes(self) -> bool {
        use Interaction::*;
        matches!(self, ShoppingCart | CustomerRegistration | BuyRequest | BuyConfirm | AdminConfirm)
    }
}

/// The Shopping Mix of the TPC-W specification (clause 5.2, the Shopping Mix transition table of
/// the customer behaviour model graph): `SHOPPING_MIX[from][to]` is the probability, in units of
/// 1/9999, that interaction `to` follows `from`. Rows and columns are in [`INTERACTIONS`] order.
/// The specification tabulates cumulative thresholds with the columns in alphabetical order
/// (Admin Confirm … Shopping Cart); these are the differences of consecutive thresholds. Their
/// stationary distribution is the specification's Shopping Mix frequencies
/// ([`SPEC_SHOPPING_FREQUENCIES`]), which a test checks.
#[rustfmt::skip]
pub const SHOPPING_MIX: [[u16; 14]; 14] = [
    //  HOME   NEWP  BESS   PROD  SREQ  SRES  SHOP  CREG  BUYR  BUYC  ORDI  ORDD  ADMR  ADMC
    [     0, 3125, 3124,     0,  308,    0, 2973,    0,    0,    0,  469,    0,    0,    0], // Home
    [   156,    0,    0,  9579,   49,    0,  215,    0,    0,    0,    0,    0,    0,    0], // New Products
    [   167,    0,    0,   305, 9455,    0,   72,    0,    0,    0,    0,    0,    0,    0], // Best Sellers
    [   774,    0,    0,   456, 7315,    0, 1396,    0,    0,    0,    0,    0,   58,    0], // Product Detail
    [   635,    0,    0,     0,    0, 8500,  864,    0,    0,    0,    0,    0,    0,    0], // Search Request
    [  2657,    0,    0,  6637,   10,    0,  695,    0,    0,    0,    0,    0,    0,    0], // Search Results
    [  6967,    0,    0,     0,    0,    0,  447, 2585,    0,    0,    0,    0,    0,    0], // Shopping Cart
    [    94,    0,    0,     0, 1239,    0,    0,    0, 8666,    0,    0,    0,    0,    0], // Customer Registration
    [  1931,    0,    0,     0,    0,    0, 3454,    0,    0, 4614,    0,    0,    0,    0], // Buy Request
    [    84,    0,    0,     0, 9915,    0,    0,    0,    0,    0,    0,    0,    0,    0], // Buy Confirm
    [    72,    0,    0,     0, 1127,    0,    0,    0,    0,    0,    0, 8800,    0,    0], // Order Inquiry
    [    69,    0,    0,     0, 9930,    0,    0,    0,    0,    0,    0,    0,    0,    0], // Order Display
    [  1000,    0,    0,     0,    0,    0,    0,    0,    0,    0,    0,    0,    0, 8999], // Admin Request
    [  9952,    0,    0,     0,   47,    0,    0,    0,    0,    0,    0,    0,    0,    0], // Admin Confirm
];

/// The Shopping Mix's share of each interaction in percent, as the specification lists it.
pub const SPEC_SHOPPING_FREQUENCIES: [f64; 14] = [16.00, 5.00, 5.00, 17.00, 20.00, 17.00, 11.60, 3.00, 2.60, 1.20, 0.75, 0.66, 0.10, 0.09];

/// Transactions an interaction issues, and how many of them write, in the typical case: what
/// [`TpcwWorkload::with_write_share`] plans with. It assumes the customer is known 95 % of the
/// time (80 % of sessions start with a returning customer, and new ones register at their first
/// Buy Request, early in a session of about 125 interactions; runs measure 95–97 %) and ignores
/// the one `createEmptyCart` per session.
const NOMINAL_TXNS: [(f64, f64); 14] = [
    (1.95, 0.0), // Home: getName if known, getRelated
    (2.0, 0.0),  // New Products: getNewProducts, getRelated
    (2.0, 0.0),  // Best Sellers: getBestSellers, getRelated
    (1.0, 0.0),  // Product Detail: getBook
    (1.0, 0.0),  // Search Request: getRelated
    (2.0, 0.0),  // Search Results: a search, getRelated
    (2.0, 1.0),  // Shopping Cart: doCart, getRelated (and createEmptyCart once)
    (0.95, 0.0), // Customer Registration: getUserName if known
    (2.95, 1.0), // Buy Request: getCustomer, refreshSession, getCart | createNewCustomer, getCart
    (1.0, 1.0),  // Buy Confirm: doBuyConfirm(NewAddress)
    (0.95, 0.0), // Order Inquiry: getUserName if known
    (2.0, 0.0),  // Order Display: getPassword, getMostRecentOrder
    (1.0, 0.0),  // Admin Request: getBook
    (2.0, 1.0),  // Admin Confirm: adminUpdate, getBook
];

/// The transaction types that write.
pub const WRITING_TRANSACTIONS: [&str; 7] =
    ["adminUpdate", "createEmptyCart", "doCart", "refreshSession", "createNewCustomer", "doBuyConfirm", "doBuyConfirmNewAddress"];

/// The specification's mean think time, by which the logical clock advances per interaction.
pub const THINK_SECONDS: i64 = 7;

#[derive(Clone, Debug)]
struct Customer {
    c_id: i64,
    uname: String,
    name: String,
}

/// One emulated browser on the Shopping Mix.
#[derive(Clone, Debug)]
pub struct TpcwWorkload {
    customers: i64,
    items: i64,
    /// Minted ids are `home_id(id_ceiling + k)`, above every generated id. `home_id` keeps
    /// clients apart while `k < 2^24`, so ids stay unique up to about 2,900 emulated browsers
    /// (5.8 M generated addresses), with millions of ids left per client at the usual scales.
    id_ceiling: i64,
    /// Probability that a visit to Home begins a new session (new customer, no cart). The
    /// specification's sessions last 15 minutes on average, about 125 interactions at 7 s each,
    /// of which a sixth are Home: one in twenty Home visits ends a session.
    pub session_end_at_home: f64,
    /// Share of sessions whose customer is a returning one (the rest register when buying).
    pub returning_share: f64,
    /// Share of Buy Confirms that ship to a newly entered address.
    pub new_address_share: f64,
    weights: [[f64; 14]; 14],
    boost: f64,

    minted: u64,
    clock: i64,
    current: Option<Interaction>,
    previous: Option<Interaction>,
    queue: VecDeque<(&'static str, Vec<Value>)>,
    customer: Option<Customer>,
    cart: Option<i64>,
    cart_lines: Vec<(i64, i64)>,
    links: Vec<i64>,
    item: i64,
    item_srp: Option<i64>,

    interactions: [u64; 14],
    issued: BTreeMap<&'static str, u64>,
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

fn text(s: impl Into<String>) -> Value {
    Value::Text(s.into())
}

fn pick<'a, T>(rng: &mut dyn RngCore, xs: &'a [T]) -> &'a T {
    &xs[rng.random_range(0..xs.len())]
}

fn ints_of_column(rows: &Rows, col: usize) -> Vec<i64> {
    rows.iter().filter_map(|r| r.get(col).and_then(Value::as_int)).collect()
}

/// The mix with every transition into an interaction that leads to writes weighted by `boost`,
/// rows renormalised to 1.
fn weights(boost: f64) -> [[f64; 14]; 14] {
    let mut w = [[0.0; 14]; 14];
    for (from, row) in SHOPPING_MIX.iter().enumerate() {
        for (to, p) in row.iter().enumerate() {
            let factor = if INTERACTIONS[to].leads_to_writes() { boost } else { 1.0 };
            w[from][to] = *p as f64 * factor;
        }
        let sum: f64 = w[from].iter().sum();
        for x in &mut w[from] {
            *x /= sum;
        }
    }
    w
}

/// The long-run share of each interaction under transition matrix `w`.
pub(crate) fn stationary(w: &[[f64; 14]; 14]) -> [f64; 14] {
    let mut pi = [1.0 / 14.0; 14];
    for _ in 0..100_000 {
        let mut next = [0.0; 14];
        for (from, row) in w.iter().enumerate() {
            for (to, p) in row.iter().enumerate() {
                next[to] += pi[from] * p;
            }
        }
        let delta: f64 = pi.iter().zip(&next).map(|(a, b)| (a - b).abs()).sum();
        pi = next;
        if delta < 1e-13 {
            break;
        }
    }
    pi
}

/// Writing transactions over all transactions, for interaction shares `pi`, by the nominal counts.
fn nominal_writing_share(pi: &[f64; 14]) -> f64 {
    let (txns, writes) = pi.iter().zip(NOMINAL_TXNS).fold((0.0, 0.0), |(t, w), (p, (n, k))| (t + p * n, w + p * k));
    writes / txns
}

impl TpcwWorkload {
    /// A browser on a database generated with `scale` emulated browsers, on the reference mix.
    pub fn new(scale: u32) -> Self {
        let n = Cardinalities::new(scale);
        TpcwWorkload {
            customers: n.customers,
            items: ITEMS,
            id_ceiling: n.id_ceiling(),
            session_end_at_home: 0.05,
            returning_share: 0.8,
            new_address_share: 0.05,
            weights: weights(1.0),
            boost: 1.0,
            minted: 0,
            clock: BASE_TIME,
            current: None,
            previous: None,
            queue: VecDeque::new(),
            customer: None,
            cart: None,
            cart_lines: Vec::new(),
            links: Vec::new(),
            item: 1,
            item_srp: None,
            interactions: [0; 14],
            issued: BTreeMap::new(),
        }
    }

    /// Steers the mix toward a `target` share of writing transactions (the papers run TPC-W with
    /// 30 % writes; the reference Shopping Mix gives fewer). Every transition into Shopping Cart,
    /// Customer Registration, Buy Request, Buy Confirm or Admin Confirm is multiplied by one
    /// factor and each row renormalised, so the walk keeps the specification's graph and only
    /// visits the buying path more (factor > 1) or less (< 1). The factor is found by bisection so
    /// that the stationary distribution, weighted by the nominal transactions per interaction,
    /// gives `target`; targets beyond what any factor reaches are clamped to the nearest reachable
    /// share (about 0 % to 37 %). [`writing_share`](Self::writing_share) reports what a run got.
    pub fn with_write_share(mut self, target: f64) -> Self {
        let share = |ln_boost: f64| nominal_writing_share(&stationary(&weights(ln_boost.exp())));
        let (mut lo, mut hi) = (-12.0_f64, 12.0_f64);
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if share(mid) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.boost = ((lo + hi) / 2.0).exp();
        self.weights = weights(self.boost);
        self
    }

    /// The factor on transitions toward writes (1 for the reference mix).
    pub fn write_boost(&self) -> f64 {
        self.boost
    }

    /// The long-run share of each interaction under the mix in use, in [`INTERACTIONS`] order.
    pub fn mix_frequencies(&self) -> [f64; 14] {
        stationary(&self.weights)
    }

    /// The writing share the mix in use is planned for (nominal transactions per interaction).
    pub fn planned_writing_share(&self) -> f64 {
        nominal_writing_share(&self.mix_frequencies())
    }

    /// Writing transactions over all transactions issued so far.
    pub fn writing_share(&self) -> f64 {
        let total: u64 = self.issued.values().sum();
        let writes: u64 = WRITING_TRANSACTIONS.iter().map(|t| self.issued.get(t).copied().unwrap_or(0)).sum();
        if total == 0 {
            0.0
        } else {
            writes as f64 / total as f64
        }
    }

    /// How many times each interaction was entered, in [`INTERACTIONS`] order.
    pub fn interaction_counts(&self) -> [u64; 14] {
        self.interactions
    }

    /// How many requests of each transaction type were issued.
    pub fn transaction_counts(&self) -> &BTreeMap<&'static str, u64> {
        &self.issued
    }

    fn mint(&mut self, ctx: &ClientCtx) -> i64 {
        let id = ctx.home_id(self.id_ceiling as u64 + self.minted);
        self.minted += 1;
        id
    }

    /// A generated customer whose id routes to this client's home instance.
    fn home_customer(&self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> Option<i64> {
        let n = ctx.instances.max(1) as i64;
        let home = ctx.home.0 as i64 % n;
        let first = if home == 0 { n } else { home };
        if first > self.customers {
            return None;
        }
        Some(first + rng.random_range(0..=(self.customers - first) / n) * n)
    }

    fn random_item(&self, rng: &mut dyn RngCore) -> i64 {
        rng.random_range(1..=self.items)
    }

    fn push(&mut self, txn: &'static str, params: Vec<Value>) {
        self.queue.push_back((txn, params));
    }

    /// Promotional processing: the related items of a random item.
    fn promotion(&mut self, rng: &mut dyn RngCore) {
        let i = self.random_item(rng);
        self.push("getRelated", vec![int(i)]);
    }

    fn start_session(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) {
        self.cart = None;
        self.cart_lines.clear();
        self.links.clear();
        self.customer = None;
        if rng.random_bool(self.returning_share.clamp(0.0, 1.0)) {
            if let Some(c_id) = self.home_customer(rng, ctx) {
                // The generated customers' names are unknown until login; the card holder name is
                // whatever the browser typed.
                self.customer = Some(Customer { c_id, uname: user_name(c_id), name: String::new() });
            }
        }
    }

    fn choose_next(&self, rng: &mut dyn RngCore, from: Interaction) -> Interaction {
        let row = &self.weights[from.index()];
        let mut u = rng.random::<f64>() * row.iter().sum::<f64>();
        let mut last = Interaction::Home;
        for (to, p) in row.iter().enumerate() {
            if *p > 0.0 {
                last = INTERACTIONS[to];
                if u < *p {
                    return last;
                }
                u -= p;
            }
        }
        last
    }

    /// Moves to the next interaction and queues its transactions.
    fn advance(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) {
        let next = match self.current {
            None => Interaction::Home,
            Some(cur) => self.choose_next(rng, cur),
        };
        self.previous = self.current;
        self.current = Some(next);
        self.interactions[next.index()] += 1;
        self.clock += THINK_SECONDS;
        let now = self.clock;
        use Interaction::*;
        match next {
            Home => {
                if self.previous.is_none() || rng.random_bool(self.session_end_at_home.clamp(0.0, 1.0)) {
                    self.start_session(rng, ctx);
                }
                if let Some(c) = &self.customer {
                    let c_id = c.c_id;
                    self.push("getName", vec![int(c_id)]);
                }
                self.promotion(rng);
            }
            NewProducts | BestSellers => {
                let subject = *pick(rng, &SUBJECTS);
                self.push(if next == NewProducts { "getNewProducts" } else { "getBestSellers" }, vec![text(subject)]);
                self.promotion(rng);
            }
            ProductDetail => {
                self.item = if self.links.is_empty() { self.random_item(rng) } else { *pick(rng, &self.links) };
                self.push("getBook", vec![int(self.item)]);
            }
            SearchRequest => self.promotion(rng),
            SearchResults => {
                match rng.random_range(0..3) {
                    0 => self.push("doAuthorSearch", vec![text(digsyl(rng.random_range(0..100), 2))]),
                    1 => self.push("doTitleSearch", vec![text(title_word(rng.random_range(0..TITLE_WORDS)))]),
                    _ => self.push("doSubjectSearch", vec![text(*pick(rng, &SUBJECTS))]),
                }
                self.promotion(rng);
            }
            ShoppingCart => {
                let sc_id = match self.cart {
                    Some(sc) => sc,
                    None => {
                        let sc = self.mint(ctx);
                        self.cart = Some(sc);
                        self.push("createEmptyCart", vec![int(sc), int(now)]);
                        sc
                    }
                };
                // Coming from a product page is the "add to cart" button; staying on the cart page
                // is the "update" button with some quantities retyped (0 removes the line).
                let add = if self.previous == Some(ProductDetail) { self.item } else { 0 };
                let mut updates = Vec::new();
                if self.previous == Some(ShoppingCart) {
                    for (i_id, _) in &self.cart_lines {
                        if rng.random_bool(0.5) {
                            updates.push(format!("{i_id}:{}", rng.random_range(0..=5)));
                        }
                    }
                }
                let random_item = self.random_item(rng);
                self.push("doCart", vec![int(sc_id), int(add), text(updates.join(",")), int(random_item), int(now)]);
                self.promotion(rng);
            }
            CustomerRegistration | OrderInquiry => {
                // The form is pre-filled with a known customer's user name.
                if let Some(c) = &self.customer {
                    let c_id = c.c_id;
                    self.push("getUserName", vec![int(c_id)]);
                }
            }
            BuyRequest => {
                match self.customer.clone() {
                    Some(c) => {
                        self.push("getCustomer", vec![text(c.uname)]);
                        self.push("refreshSession", vec![int(c.c_id), int(now)]);
                    }
                    None => self.register(rng, ctx, now),
                }
                if let Some(sc) = self.cart {
                    self.push("getCart", vec![int(sc)]);
                }
            }
            BuyConfirm => self.buy(rng, ctx, now),
            OrderDisplay => {
                let uname = match &self.customer {
                    Some(c) => Some(c.uname.clone()),
                    None => self.home_customer(rng, ctx).map(user_name),
                };
                if let Some(u) = uname {
                    self.push("getPassword", vec![text(u.clone())]);
                    self.push("getMostRecentOrder", vec![text(u)]);
                }
            }
            AdminRequest => self.push("getBook", vec![int(self.item)]),
            AdminConfirm => {
                // The specification's new cost: the list price less 0–50 %.
                let srp = self.item_srp.unwrap_or_else(|| rng.random_range(100..=999_999));
                let cost = srp * (100 - rng.random_range(0..=50)) / 100;
                let pic = self.random_item(rng);
                let (item, image, thumb) =
                    (self.item, format!("img{}/image_{pic}.gif", pic % 100), format!("img{}/thumb_{pic}.gif", pic % 100));
                self.push("adminUpdate", vec![int(item), int(cost), text(image), text(thumb), int(now)]);
                self.push("getBook", vec![int(item)]);
            }
        }
    }

    fn register(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx, now: i64) {
        let (c_id, addr_id) = (self.mint(ctx), self.mint(ctx));
        let (fname, lname) = (a_string(rng, 8, 15), a_string(rng, 8, 15));
        let email = format!("{fname}@{lname}.com");
        let params = vec![
            int(c_id),
            int(addr_id),
            text(fname.clone()),
            text(lname.clone()),
            text(a_string(rng, 15, 40)),
            text(a_string(rng, 15, 40)),
            text(a_string(rng, 4, 30)),
            text(a_string(rng, 2, 20)),
            text(a_string(rng, 5, 10)),
            text(pick(rng, &COUNTRIES).0),
            text(n_string(rng, 9, 16)),
            text(email),
            // Born 18 to 90 years before now.
            int(now - rng.random_range(18 * 365..=90 * 365) * DAY),
            text(a_string(rng, 100, 500)),
            int(rng.random_range(0..=50)),
            int(now),
        ];
        self.customer = Some(Customer { c_id, uname: user_name(c_id), name: format!("{fname} {lname}") });
        self.push("createNewCustomer", params);
    }

    fn buy(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx, now: i64) {
        let (Some(c), Some(sc)) = (self.customer.clone(), self.cart) else { return };
        if self.cart_lines.is_empty() {
            return;
        }
        let o_id = self.mint(ctx);
        let cx_name = if c.name.is_empty() { c.uname.clone() } else { c.name.clone() };
        let mut params = vec![
            int(sc),
            int(c.c_id),
            int(o_id),
            text(*pick(rng, &CC_TYPES)),
            text(n_string(rng, 16, 16)),
            text(cx_name),
            int(now + rng.random_range(1..=730) * DAY),
            text(a_string(rng, 15, 15)),
            text(*pick(rng, &SHIP_TYPES)),
            int(now + rng.random_range(1..=7) * DAY),
            text(a_string(rng, 20, 100)),
            int(now),
        ];
        if rng.random_bool(self.new_address_share.clamp(0.0, 1.0)) {
            let addr_id = self.mint(ctx);
            params.extend([
                int(addr_id),
                text(a_string(rng, 15, 40)),
                text(a_string(rng, 15, 40)),
                text(a_string(rng, 4, 30)),
                text(a_string(rng, 2, 20)),
                text(a_string(rng, 5, 10)),
                text(pick(rng, &COUNTRIES).0),
            ]);
            self.push("doBuyConfirmNewAddress", params);
        } else {
            self.push("doBuyConfirm", params);
        }
    }
}

impl Workload for TpcwWorkload {
    fn next(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> (String, Vec<Value>) {
        // Interactions that issue nothing (a registration form for an unknown customer) are
        // walked through; Home always issues one, so this ends within a few steps.
        for _ in 0..10_000 {
            if let Some((txn, params)) = self.queue.pop_front() {
                *self.issued.entry(txn).or_insert(0) += 1;
                return (txn.to_string(), params);
            }
            self.advance(rng, ctx);
        }
        let i = self.random_item(rng);
        *self.issued.entry("getRelated").or_insert(0) += 1;
        ("getRelated".into(), vec![int(i)])
    }

    fn interaction(&self) -> InteractionProgress {
        match (self.queue.is_empty(), self.current) {
            (true, Some(i)) => InteractionProgress::Ended(i.name()),
            _ => InteractionProgress::Continues,
        }
    }

    fn observe(&mut self, txn: &str, outcome: &Outcome) {
        let rows = match outcome {
            Outcome::Committed(rows) => rows,
            Outcome::Aborted { .. } => {
                // The page failed: its remaining transactions would act on state that is not there.
                self.queue.clear();
                match txn {
                    "createEmptyCart" => {
                        self.cart = None;
                        self.cart_lines.clear();
                    }
                    "createNewCustomer" => self.customer = None,
                    _ => {}
                }
                return;
            }
        };
        match txn {
            "getNewProducts" | "getBestSellers" | "doSubjectSearch" | "doTitleSearch" | "doAuthorSearch" => {
                self.links = ints_of_column(rows, 0);
            }
            "getBook" => {
                // A product page links to its related items (columns i_related1..5).
                if let Some(r) = rows.first() {
                    self.links = (8..13).filter_map(|i| r.get(i).and_then(Value::as_int)).collect();
                    self.item_srp = r.get(15).and_then(Value::as_int);
                }
            }
            "doCart" | "getCart" => {
                self.cart_lines =
                    rows.iter().filter_map(|r| Some((r.first()?.as_int()?, r.get(1)?.as_int()?))).collect();
            }
            "doBuyConfirm" | "doBuyConfirmNewAddress" => self.cart_lines.clear(),
            "getCustomer" => match rows.first() {
                Some(r) => {
                    if let (Some(c), Some(f), Some(l)) =
                        (self.customer.as_mut(), r.get(3).and_then(Value::as_text), r.get(4).and_then(Value::as_text))
                    {
                        c.name = format!("{f} {l}");
                    }
                }
                None => {
                    // Unknown login: the browser continues as a new customer.
                    self.queue.retain(|(t, _)| *t != "refreshSession");
                    self.customer = None;
                }
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_distributions_and_the_mix_is_the_specifications() {
        for (i, row) in SHOPPING_MIX.iter().enumerate() {
            assert_eq!(row.iter().map(|p| *p as u32).sum::<u32>(), 9999, "row {}", INTERACTIONS[i].name());
        }
        let pi = stationary(&weights(1.0));
        for (i, f) in pi.iter().enumerate() {
            assert!((100.0 * f - SPEC_SHOPPING_FREQUENCIES[i]).abs() < 0.01, "{}: {}", INTERACTIONS[i].name(), 100.0 * f);
        }
    }

    #[test]
    fn the_knob_is_monotone_and_reaches_thirty_percent() {
        let base = TpcwWorkload::new(1);
        let w30 = TpcwWorkload::new(1).with_write_share(0.30);
        assert!((w30.planned_writing_share() - 0.30).abs() < 1e-6);
        assert!(w30.write_boost() > 1.0);
        assert!(base.planned_writing_share() < 0.30);
        let w05 = TpcwWorkload::new(1).with_write_share(0.05);
        assert!(w05.write_boost() < 1.0);
    }
}
