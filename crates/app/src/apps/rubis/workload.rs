//! The client emulator: one RUBiS session after another, walking the bidding mix.
//!
//! Each web interaction the walk enters queues the transactions it runs
//! ([`Interaction::transactions`]); `next` hands them out one at a time and walks on when the
//! queue is empty, so static pages cost nothing but their think time. What a page showed (the
//! items of a search, the seller of an item, the bidders of a history) comes back through
//! `observe` and is what the following interaction picks from, as a person clicking a link
//! would. A page behind a login runs its authentication first; when that fails, the page's other
//! transactions are dropped. A form that could not be shown (the item is closed) is not
//! submitted: its storing interaction runs no transaction.
//!
//! Every value the reference would take from the server is chosen here: new ids are minted with
//! [`ClientCtx::home_id`] (from [`MINT_BASE`] on, above every generated id), `now` is a logical
//! clock that starts at [`DATA_NOW`] and advances by each page's think time from the table, and
//! the random choices come from the generator `next` is handed.
//!
//! Clients are directed to their closest instance, as in the papers: a session logs in as a
//! generated user whose id routes to the client's home instance, and an item picked from a page
//! is one that routes home when the page shows any; when it shows none, the client goes to a
//! random open item of its home. `remote_items` is the fraction of picks that ignore the
//! preference and take any item the page shows.

use super::data::{comment_text, item_text, nickname, password, Cardinalities, CATEGORIES, DATA_NOW, MINT_BASE, REGIONS};
use super::mix::{Interaction, Next, RubisMix, Walk, INTERACTIONS, OUTCOMES};
use super::txns::{item_col, min_bid, search_col, DAY, ITEMS_PER_PAGE, RATINGS};
use crate::workload::{ClientCtx, InteractionProgress, Workload};
use ensemble_core::{Outcome, Row, Value};
use rand::{Rng, RngCore};
use std::collections::VecDeque;
use std::sync::Arc;

/// What the client last saw of the item it is looking at.
#[derive(Clone, Debug, PartialEq)]
struct ItemSeen {
    id: i64,
    seller: Option<i64>,
    quantity: i64,
    initial_price: i64,
    nb_of_bids: i64,
    max_bid: i64,
    /// Shown by a page that lists only open items, or by a form for it.
    open: bool,
}

impl ItemSeen {
    fn unknown(id: i64) -> ItemSeen {
        ItemSeen { id, seller: None, quantity: 1, initial_price: 0, nb_of_bids: 0, max_bid: 0, open: true }
    }

    fn from_page(row: &Row) -> Option<ItemSeen> {
        let int = |i: usize| row.get(i).and_then(Value::as_int);
        Some(ItemSeen {
            id: int(item_col::ID)?,
            seller: int(item_col::SELLER),
            quantity: int(item_col::QUANTITY)?,
            initial_price: int(item_col::INITIAL_PRICE)?,
            nb_of_bids: int(item_col::NB_OF_BIDS)?,
            max_bid: int(item_col::MAX_BID)?,
            open: int(item_col::ARCHIVED) == Some(0),
        })
    }
}

/// A RUBiS client following the bidding mix (or the mix the write-share knob made of it).
#[derive(Clone, Debug)]
pub struct RubisWorkload {
    mix: Arc<RubisMix>,
    card: Cardinalities,
    /// Fraction of item picks that ignore the home preference (see the module docs).
    pub remote_items: f64,
    walk: Walk,
    /// The interaction `walk.state` names has been entered (its transactions queued).
    entered: bool,
    came_from: Option<Interaction>,
    now: i64,
    minted: u64,
    pending: VecDeque<(String, Vec<Value>)>,
    // Session state: who is logged in and what the pages showed.
    user: Option<i64>,
    item: Option<ItemSeen>,
    /// The storing interaction after a form may submit it: the form was shown for `item`.
    form_shown: bool,
    viewed_user: Option<i64>,
    category: i64,
    region: i64,
    page: i64,
    last_page_len: usize,
    sell_category: i64,
    /// Items the last list page showed, with whether the page lists only open items.
    items_seen: Vec<(i64, bool)>,
    users_seen: Vec<i64>,
    visits: [u64; INTERACTIONS],
    transitions: Box<[[u64; OUTCOMES]; INTERACTIONS]>,
}

impl RubisWorkload {
    pub fn new(scale: u32, mix: Arc<RubisMix>, remote_items: f64) -> RubisWorkload {
        RubisWorkload {
            mix,
            card: Cardinalities::for_scale(scale),
            remote_items,
            walk: Walk::default(),
            entered: false,
            came_from: None,
            now: DATA_NOW,
            minted: 0,
            pending: VecDeque::new(),
            user: None,
            item: None,
            form_shown: false,
            viewed_user: None,
            category: 1,
            region: 1,
            page: 0,
            last_page_len: 0,
            sell_category: 1,
            items_seen: Vec::new(),
            users_seen: Vec::new(),
            visits: [0; INTERACTIONS],
            transitions: Box::new([[0; OUTCOMES]; INTERACTIONS]),
        }
    }

    /// The reference bidding mix, items of the client's home only.
    pub fn bidding(scale: u32) -> RubisWorkload {
        RubisWorkload::new(scale, Arc::new(RubisMix::bidding()), 0.0)
    }

    /// The bidding mix reweighted to issue `share` writing transactions per transaction.
    pub fn with_write_share(scale: u32, share: f64) -> RubisWorkload {
        RubisWorkload::new(scale, Arc::new(RubisMix::for_write_share(share)), 0.0)
    }

    pub fn mix(&self) -> &RubisMix {
        &self.mix
    }

    /// The interaction the client is at.
    pub fn interaction(&self) -> Interaction {
        self.walk.state
    }

    /// The logical clock, epoch seconds.
    pub fn now(&self) -> i64 {
        self.now
    }

    /// How often each interaction was entered.
    pub fn visits(&self) -> &[u64; INTERACTIONS] {
        &self.visits
    }

    /// How often each outcome was drawn from each interaction: `[from][next.index()]`.
    pub fn transitions(&self) -> &[[u64; OUTCOMES]; INTERACTIONS] {
        &self.transitions
    }

    fn mint(&mut self, ctx: &ClientCtx) -> i64 {
        let id = ctx.home_id(MINT_BASE + self.minted);
        self.minted += 1;
        id
    }

    /// A uniformly drawn id in `1..=max` that routes to the client's home instance (any id when
    /// none does).
    fn routed_home(rng: &mut dyn RngCore, ctx: &ClientCtx, max: i64) -> i64 {
        let n = ctx.instances.max(1) as i64;
        let home = ctx.home.0 as i64 % n;
        let first = if home == 0 { n } else { home };
        if first > max {
            return rng.random_range(1..=max.max(1));
        }
        first + n * rng.random_range(0..=(max - first) / n)
    }

    fn routes_home(id: i64, ctx: &ClientCtx) -> bool {
        id.rem_euclid(ctx.instances.max(1) as i64) == ctx.home.0 as i64
    }

    fn session_user(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> i64 {
        match self.user {
            Some(u) => u,
            None => {
                let u = Self::routed_home(rng, ctx, self.card.users);
                self.user = Some(u);
                u
            }
        }
    }

    /// Picks the item to look at from the last list page (open ones only for a form).
    fn pick_item(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx, open_only: bool) {
        let shown: Vec<(i64, bool)> = self.items_seen.iter().copied().filter(|(_, open)| *open || !open_only).collect();
        let remote = rng.random_bool(self.remote_items.clamp(0.0, 1.0));
        let home: Vec<(i64, bool)> = shown.iter().copied().filter(|(id, _)| Self::routes_home(*id, ctx)).collect();
        let pool = if remote { &shown } else { &home };
        let (id, open) = if pool.is_empty() {
            (Self::routed_home(rng, ctx, self.card.items), true)
        } else {
            pool[rng.random_range(0..pool.len())]
        };
        self.item = Some(ItemSeen { open, ..ItemSeen::unknown(id) });
    }

    fn current_item(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> ItemSeen {
        if self.item.is_none() {
            self.pick_item(rng, ctx, true);
        }
        self.item.clone().unwrap_or_else(|| ItemSeen::unknown(1))
    }

    fn follows_list(&self) -> bool {
        matches!(
            self.came_from,
            Some(Interaction::SearchItemsInCategory | Interaction::SearchItemsInRegion | Interaction::AboutMe)
        )
    }

    fn push(&mut self, txn: &str, params: Vec<Value>) {
        self.pending.push_back((txn.to_string(), params));
    }

    fn credentials(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> (i64, Vec<Value>) {
        let u = self.session_user(rng, ctx);
        (u, vec![Value::Text(nickname(u)), Value::Text(password(u))])
    }

    /// Queues the transactions of the interaction the walk is at.
    fn enter(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) {
        use Interaction::*;
        let state = self.walk.state;
        self.visits[state.index()] += 1;
        let now = Value::Int(self.now);
        match state {
            Home | Register | Browse | Sell | AboutMeAuth | PutCommentAuth => {}
            BuyNowAuth | PutBidAuth => {
                if self.follows_list() {
                    self.pick_item(rng, ctx, true);
                }
            }
            RegisterUser => {
                let id = self.mint(ctx);
                let region = rng.random_range(1..=REGIONS);
                let params = vec![
                    Value::Int(id),
                    Value::Text(format!("First{id}")),
                    Value::Text(format!("Last{id}")),
                    Value::Text(nickname(id)),
                    Value::Text(password(id)),
                    Value::Text(format!("{}@rubis.example", nickname(id))),
                    Value::Int(region),
                    now,
                ];
                self.push("RegisterUser", params);
            }
            BrowseCategories => self.push("BrowseCategories", vec![]),
            BrowseRegions => self.push("BrowseRegions", vec![]),
            BrowseCategoriesInRegion => {
                if self.came_from == Some(BrowseRegions) {
                    self.region = rng.random_range(1..=REGIONS);
                }
                self.push("BrowseCategoriesInRegion", vec![Value::Int(self.region)]);
            }
            SearchItemsInCategory | SearchItemsInRegion => {
                if self.came_from == Some(state) {
                    // The next page, or the first again after the last one.
                    self.page = if self.last_page_len < ITEMS_PER_PAGE as usize { 0 } else { self.page + 1 };
                } else if matches!(self.came_from, Some(BrowseCategories | BrowseCategoriesInRegion)) {
                    self.category = rng.random_range(1..=CATEGORIES);
                    self.page = 0;
                }
                let (c, p) = (Value::Int(self.category), Value::Int(self.page));
                if state == SearchItemsInCategory {
                    self.push("SearchItemsByCategory", vec![c, p, now]);
                } else {
                    self.push("SearchItemsByRegion", vec![Value::Int(self.region), c, p, now]);
                }
            }
            ViewItem => {
                if self.follows_list() || self.item.is_none() {
                    self.pick_item(rng, ctx, false);
                }
                let item = self.current_item(rng, ctx);
                self.push("ViewItem", vec![Value::Int(item.id)]);
            }
            ViewUserInfo => {
                let seller = self.item.as_ref().and_then(|i| i.seller);
                let from_page = matches!(self.came_from, Some(ViewBidHistory | ViewUserInfo | AboutMe)) && !self.users_seen.is_empty();
                let user = if from_page {
                    self.users_seen[rng.random_range(0..self.users_seen.len())]
                } else if let Some(s) = seller {
                    s
                } else if let Some(v) = self.viewed_user {
                    v
                } else {
                    rng.random_range(1..=self.card.users)
                };
                self.viewed_user = Some(user);
                self.push("ViewUserInfo", vec![Value::Int(user)]);
            }
            ViewBidHistory => {
                let item = self.current_item(rng, ctx);
                self.push("ViewBidHistory", vec![Value::Int(item.id)]);
            }
            BuyNow | PutBid => {
                let item = self.current_item(rng, ctx);
                let (u, cred) = self.credentials(rng, ctx);
                self.form_shown = false;
                let (auth, form) = if state == BuyNow { ("BuyNowAuth", "BuyNow") } else { ("PutBidAuth", "PutBid") };
                self.push(auth, cred);
                self.push(form, vec![Value::Int(u), Value::Int(item.id)]);
            }
            PutComment => {
                let item = self.current_item(rng, ctx);
                let (u, cred) = self.credentials(rng, ctx);
                let to = item.seller.unwrap_or(u);
                self.form_shown = false;
                self.viewed_user = Some(to);
                self.push("PutCommentAuth", cred);
                self.push("PutComment", vec![Value::Int(u), Value::Int(to), Value::Int(item.id)]);
            }
            StoreBuyNow | StoreBid | StoreComment if !self.form_shown => {}
            StoreBuyNow => {
                let item = self.current_item(rng, ctx);
                let u = self.session_user(rng, ctx);
                let id = self.mint(ctx);
                let qty = rng.random_range(1..=item.quantity.clamp(1, 2));
                self.form_shown = false;
                self.push("StoreBuyNow", vec![Value::Int(u), Value::Int(item.id), Value::Int(id), Value::Int(qty), now]);
            }
            StoreBid => {
                let item = self.current_item(rng, ctx);
                let u = self.session_user(rng, ctx);
                let id = self.mint(ctx);
                let bid = min_bid(item.initial_price, item.nb_of_bids, item.max_bid) + 100 * rng.random_range(0..=5);
                let max_bid = bid + 100 * rng.random_range(0..=10);
                self.form_shown = false;
                let params = vec![Value::Int(u), Value::Int(item.id), Value::Int(id), Value::Int(1), Value::Int(bid), Value::Int(max_bid), now];
                self.push("StoreBid", params);
            }
            StoreComment => {
                let item = self.current_item(rng, ctx);
                let u = self.session_user(rng, ctx);
                let to = self.viewed_user.or(item.seller).unwrap_or(u);
                let id = self.mint(ctx);
                let rating = rng.random_range(RATINGS);
                let text = comment_text(rng);
                self.form_shown = false;
                let params = vec![Value::Int(u), Value::Int(to), Value::Int(item.id), Value::Int(id), Value::Int(rating), Value::Text(text), now];
                self.push("StoreComment", params);
            }
            SelectCategoryToSellItem => {
                let (_, cred) = self.credentials(rng, ctx);
                self.push("SelectCategoryToSellItem", cred);
            }
            SellItemForm => {
                let u = self.session_user(rng, ctx);
                self.sell_category = rng.random_range(1..=CATEGORIES);
                self.push("SellItemForm", vec![Value::Int(u), Value::Int(self.sell_category)]);
            }
            RegisterItem => {
                let u = self.session_user(rng, ctx);
                let id = self.mint(ctx);
                let (name, description) = item_text(rng);
                let initial_price = rng.random_range(100..=100_000);
                let reserve_price = if rng.random_bool(0.3) { initial_price + rng.random_range(0..=initial_price) } else { 0 };
                let buy_now = initial_price * 2 + rng.random_range(0..=initial_price);
                let quantity = rng.random_range(1..=5);
                let end_date = self.now + DAY * rng.random_range(1..=7);
                let params = vec![
                    Value::Int(id),
                    Value::Int(u),
                    Value::Int(self.sell_category),
                    Value::Text(name),
                    Value::Text(description),
                    Value::Int(initial_price),
                    Value::Int(quantity),
                    Value::Int(reserve_price),
                    Value::Int(buy_now),
                    now,
                    Value::Int(end_date),
                ];
                self.push("RegisterItem", params);
            }
            AboutMe => {
                let (u, cred) = self.credentials(rng, ctx);
                self.push("AboutMe", cred);
                for txn in ["AboutMeBids", "AboutMeWonItems", "AboutMeBoughtItems", "AboutMeItems"] {
                    self.push(txn, vec![Value::Int(u), now.clone()]);
                }
            }
        }
    }

    /// Leaves the current interaction: its think time passes and the table draws the next one.
    fn leave(&mut self, rng: &mut dyn RngCore) {
        let from = self.walk.state;
        self.now += (from.think_ms() as i64 + 999) / 1000;
        let next = self.walk.step(&self.mix, rng);
        self.transitions[from.index()][next.index()] += 1;
        self.came_from = Some(from);
        if next == Next::EndOfSession {
            self.came_from = None;
            self.user = None;
            self.item = None;
            self.form_shown = false;
            self.viewed_user = None;
            self.items_seen.clear();
            self.users_seen.clear();
        }
    }
}

fn int_at(row: &Row, i: usize) -> Option<i64> {
    row.get(i).and_then(Value::as_int)
}

fn tag(row: &Row) -> Option<&str> {
    row.first().and_then(Value::as_text)
}

impl Workload for RubisWorkload {
    fn next(&mut self, rng: &mut dyn RngCore, ctx: &ClientCtx) -> (String, Vec<Value>) {
        // Every session reaches a page that runs a transaction within a few steps; the bound
        // only keeps a malformed mix from looping for ever.
        for _ in 0..10_000 {
            if let Some(req) = self.pending.pop_front() {
                return req;
            }
            if self.entered {
                self.leave(rng);
            }
            self.entered = true;
            self.enter(rng, ctx);
        }
        ("BrowseCategories".into(), vec![])
    }

    fn interaction(&self) -> InteractionProgress {
        if self.pending.is_empty() {
            InteractionProgress::Ended(self.walk.state.name())
        } else {
            InteractionProgress::Continues
        }
    }

    fn observe(&mut self, txn: &str, outcome: &Outcome) {
        let rows = match outcome {
            Outcome::Committed(rows) => rows,
            Outcome::Aborted { .. } => {
                // A failed login shows an error page instead of the rest.
                if matches!(txn, "BuyNowAuth" | "PutBidAuth" | "PutCommentAuth" | "AboutMe") {
                    self.pending.clear();
                }
                if matches!(txn, "BuyNow" | "PutBid") {
                    if let Some(i) = self.item.as_mut() {
                        i.open = false;
                    }
                }
                return;
            }
        };
        match txn {
            "SearchItemsByCategory" | "SearchItemsByRegion" => {
                self.last_page_len = rows.len();
                self.items_seen = rows.iter().filter_map(|r| int_at(r, search_col::ID)).map(|id| (id, true)).collect();
            }
            "ViewItem" | "BuyNow" | "PutBid" => {
                self.item = rows.first().and_then(ItemSeen::from_page).or(self.item.take());
                self.form_shown = txn != "ViewItem" && self.item.as_ref().is_some_and(|i| i.open);
            }
            "PutComment" => self.form_shown = true,
            "ViewUserInfo" | "AboutMe" => {
                self.users_seen = rows.iter().filter(|r| tag(r) == Some("comment")).filter_map(|r| int_at(r, 2)).collect();
                if txn == "AboutMe" {
                    self.items_seen.clear();
                }
            }
            "ViewBidHistory" => {
                self.users_seen = rows.iter().filter(|r| tag(r) == Some("bid")).filter_map(|r| int_at(r, 2)).collect();
            }
            "AboutMeBids" => self.items_seen.extend(rows.iter().filter_map(|r| int_at(r, 0)).map(|id| (id, true))),
            "AboutMeWonItems" => self.items_seen.extend(rows.iter().filter_map(|r| int_at(r, 0)).map(|id| (id, false))),
            "AboutMeBoughtItems" => self.items_seen.extend(rows.iter().filter_map(|r| int_at(r, 1)).map(|id| (id, false))),
            "AboutMeItems" => {
                self.items_seen.extend(rows.iter().filter_map(|r| Some((int_at(r, 1)?, tag(r) == Some("selling")))));
            }
            "StoreBid" => {
                if let (Some(i), Some(r)) = (self.item.as_mut(), rows.first()) {
                    i.nb_of_bids = int_at(r, 1).unwrap_or(i.nb_of_bids);
                    i.max_bid = int_at(r, 2).unwrap_or(i.max_bid);
                }
            }
            "StoreBuyNow" => {
                if let (Some(i), Some(r)) = (self.item.as_mut(), rows.first()) {
                    i.quantity = int_at(r, 1).unwrap_or(i.quantity);
                    i.open &= i.quantity > 0;
                }
            }
            _ => {}
        }
    }
}
