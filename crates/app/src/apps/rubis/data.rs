//! The generated auction site.
//!
//! Per unit of scale: 1,000 users, 1,000 open items and 5,000 closed items (in `old_items`),
//! each item with 0 to 20 bids (10 on average, so about 60,000 bids), one comment from the
//! winner to the seller of every closed item that had bids (about 4,750), and a buy-now purchase
//! for one closed item in ten (about 500). There are always 20 categories and 62 regions, as in
//! RUBiS. RUBiS's own default database is far larger (a million users, 33,000 open and 500,000
//! closed items); these proportions keep its shape (5 closed items per open one, 10 bids per
//! item) at a size that loads in a fraction of a second at scale 1.
//!
//! Sellers live in 62 regions, so a search by region and category finds less than one open item
//! per page at scale 1 (the emulator then goes to a random item, see its docs); larger scales
//! fill those pages.
//!
//! Ids start at 1 in every table; closed items continue the ids of the open ones, so an item id
//! names one item whether it is open or closed. Everything is drawn from `SmallRng` seeded with
//! the configuration's seed.

use super::txns::DAY;
use crate::model::{DataConfig, Dataset, TableRows};
use ensemble_core::{Row, Value};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub const USERS_PER_SCALE: i64 = 1_000;
pub const ITEMS_PER_SCALE: i64 = 1_000;
pub const OLD_ITEMS_PER_SCALE: i64 = 5_000;
pub const MAX_BIDS_PER_ITEM: i64 = 20;
pub const CATEGORIES: i64 = 20;
pub const REGIONS: i64 = 62;
/// Larger scales are generated as this one: ids the clients mint start at [`MINT_BASE`], and
/// every generated id must stay below it (at most 120,000 bids per unit of scale).
pub const MAX_SCALE: u32 = 64;
/// The first `k` a client passes to [`crate::ClientCtx::home_id`]: client 0 mints
/// `k * instances + home`, so `k` starting here keeps minted ids above every generated one.
pub const MINT_BASE: u64 = 1 << 23;
/// The site's clock when the generated database was taken (2010-01-01T00:00:00Z); the client
/// emulator's logical clock starts here.
pub const DATA_NOW: i64 = 1_262_304_000;

/// The eBay top-level categories RUBiS's database uses.
pub const CATEGORY_NAMES: [&str; CATEGORIES as usize] = [
    "Antiques & Art",
    "Books",
    "Business, Office & Industrial",
    "Clothing & Accessories",
    "Coins",
    "Collectibles",
    "Computers",
    "Consumer Electronics",
    "Dolls & Bears",
    "Home & Garden",
    "Jewelry, Gems & Watches",
    "Movies & Television",
    "Music",
    "Photo",
    "Pottery & Glass",
    "Sports",
    "Stamps",
    "Tickets & Travel",
    "Toys & Hobbies",
    "Everything Else",
];

const ADJECTIVES: [&str; 12] =
    ["vintage", "rare", "new", "used", "signed", "boxed", "antique", "mint", "large", "small", "classic", "restored"];
const NOUNS: [&str; 12] = ["lamp", "book", "watch", "camera", "guitar", "coin", "stamp", "poster", "chair", "radio", "vase", "doll"];
const COMMENTS: [&str; 6] =
    ["great seller", "fast shipping", "as described", "slow shipping", "item damaged", "would buy again"];

/// How many rows of each kind a scale generates; the id ranges follow from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cardinalities {
    pub users: i64,
    /// Open items, ids `1..=items`.
    pub items: i64,
    /// Closed items, ids `items + 1..=items + old_items`.
    pub old_items: i64,
}

impl Cardinalities {
    pub fn for_scale(scale: u32) -> Cardinalities {
        let s = scale.clamp(1, MAX_SCALE) as i64;
        Cardinalities { users: USERS_PER_SCALE * s, items: ITEMS_PER_SCALE * s, old_items: OLD_ITEMS_PER_SCALE * s }
    }
}

/// A user's nickname and password as generated (and as the emulator mints them).
pub fn nickname(user_id: i64) -> String {
    format!("user{user_id}")
}

pub fn password(user_id: i64) -> String {
    format!("password{user_id}")
}

pub fn region_name(region_id: i64) -> String {
    format!("region-{region_id:02}")
}

/// A short item name and description from a small vocabulary.
pub fn item_text(rng: &mut (impl Rng + ?Sized)) -> (String, String) {
    let name = format!("{} {}", ADJECTIVES[rng.random_range(0..ADJECTIVES.len())], NOUNS[rng.random_range(0..NOUNS.len())]);
    let words = rng.random_range(4..=12);
    let description = (0..words)
        .map(|i| if i % 2 == 0 { ADJECTIVES[rng.random_range(0..ADJECTIVES.len())] } else { NOUNS[rng.random_range(0..NOUNS.len())] })
        .collect::<Vec<_>>()
        .join(" ");
    (name, description)
}

pub fn comment_text(rng: &mut (impl Rng + ?Sized)) -> String {
    COMMENTS[rng.random_range(0..COMMENTS.len())].to_string()
}

fn table(name: &str, columns: &[&str], rows: Vec<Row>) -> TableRows {
    TableRows { table: name.into(), columns: columns.iter().map(|c| c.to_string()).collect(), rows }
}

const ITEM_COLUMNS: [&str; 13] = [
    "id",
    "name",
    "description",
    "initial_price",
    "quantity",
    "reserve_price",
    "buy_now",
    "nb_of_bids",
    "max_bid",
    "start_date",
    "end_date",
    "seller",
    "category",
];

struct Gen {
    rng: SmallRng,
    card: Cardinalities,
    bids: Vec<Row>,
    ratings: Vec<i64>,
}

impl Gen {
    fn user(&mut self) -> i64 {
        self.rng.random_range(1..=self.card.users)
    }

    fn user_other_than(&mut self, seller: i64) -> i64 {
        let u = self.user();
        if u == seller && self.card.users > 1 {
            u % self.card.users + 1
        } else {
            u
        }
    }

    /// One item with its bids (dated within `[start, bids_until]`), its seller and its last
    /// bidder, if any.
    fn item(&mut self, id: i64, start: i64, end: i64, bids_until: i64) -> (Row, i64, Option<i64>) {
        let rng = &mut self.rng;
        let (name, description) = item_text(rng);
        let initial_price = rng.random_range(100..=100_000);
        let reserve_price = if rng.random_bool(0.3) { initial_price + rng.random_range(0..=initial_price) } else { 0 };
        let buy_now = initial_price * 2 + rng.random_range(0..=initial_price);
        let quantity = rng.random_range(1..=5);
        let seller = self.user();
        let category = self.rng.random_range(1..=CATEGORIES);
        let nb = self.rng.random_range(0..=MAX_BIDS_PER_ITEM);
        let (mut price, mut date, mut last) = (initial_price, start, None);
        for k in 0..nb {
            if k > 0 {
                price += self.rng.random_range(1..=1_000);
            }
            date = (date + self.rng.random_range(0..=(bids_until - start) / (MAX_BIDS_PER_ITEM + 1))).min(bids_until);
            let bidder = self.user_other_than(seller);
            let max_bid = price + self.rng.random_range(0..=1_000);
            let id_bid = self.bids.len() as i64 + 1;
            self.bids.push(vec![id_bid, bidder, id, 1, price, max_bid, date].into_iter().map(Value::Int).collect());
            last = Some(bidder);
        }
        let max_bid = if nb > 0 { price } else { 0 };
        let row = vec![
            Value::Int(id),
            Value::Text(name),
            Value::Text(description),
            Value::Int(initial_price),
            Value::Int(quantity),
            Value::Int(reserve_price),
            Value::Int(buy_now),
            Value::Int(nb),
            Value::Int(max_bid),
            Value::Int(start),
            Value::Int(end),
            Value::Int(seller),
            Value::Int(category),
        ];
        (row, seller, last)
    }
}

/// See the module docs for what a unit of scale holds.
pub fn generate(cfg: DataConfig) -> Dataset {
    let card = Cardinalities::for_scale(cfg.scale);
    let mut g = Gen { rng: SmallRng::seed_from_u64(cfg.seed), card, bids: Vec::new(), ratings: vec![0; card.users as usize + 1] };

    let categories = CATEGORY_NAMES.iter().zip(1..).map(|(n, id)| vec![Value::Int(id), Value::Text(n.to_string())]).collect();
    let regions = (1..=REGIONS).map(|id| vec![Value::Int(id), Value::Text(region_name(id))]).collect();

    let mut items = Vec::with_capacity(card.items as usize);
    for id in 1..=card.items {
        let start = DATA_NOW - g.rng.random_range(0..=6 * DAY);
        let end = DATA_NOW + g.rng.random_range(3_600..=7 * DAY);
        items.push(g.item(id, start, end, DATA_NOW).0);
    }

    let mut old_items = Vec::with_capacity(card.old_items as usize);
    let mut comments = Vec::new();
    let mut buy_now = Vec::new();
    for id in card.items + 1..=card.items + card.old_items {
        let end = DATA_NOW - g.rng.random_range(3_600..=60 * DAY);
        let start = end - g.rng.random_range(DAY..=7 * DAY);
        let (row, seller, winner) = g.item(id, start, end, end);
        if let Some(winner) = winner {
            let rating = g.rng.random_range(-2..=5);
            let date = (end + g.rng.random_range(0..=3 * DAY)).min(DATA_NOW);
            let text = comment_text(&mut g.rng);
            comments.push(vec![
                Value::Int(comments.len() as i64 + 1),
                Value::Int(winner),
                Value::Int(seller),
                Value::Int(id),
                Value::Int(rating),
                Value::Int(date),
                Value::Text(text),
            ]);
            g.ratings[seller as usize] += rating;
        }
        if g.rng.random_bool(0.1) {
            let buyer = g.user_other_than(seller);
            let date = g.rng.random_range(start..=end);
            buy_now.push(vec![buy_now.len() as i64 + 1, buyer, id, 1, date].into_iter().map(Value::Int).collect());
        }
        old_items.push(row);
    }

    let users = (1..=card.users)
        .map(|id| {
            let created = DATA_NOW - g.rng.random_range(60 * DAY..=730 * DAY);
            let region = g.rng.random_range(1..=REGIONS);
            vec![
                Value::Int(id),
                Value::Text(format!("First{id}")),
                Value::Text(format!("Last{id}")),
                Value::Text(nickname(id)),
                Value::Text(password(id)),
                Value::Text(format!("{}@rubis.example", nickname(id))),
                Value::Int(g.ratings[id as usize]),
                Value::Int(0),
                Value::Int(created),
                Value::Int(region),
            ]
        })
        .collect();

    Dataset {
        tables: vec![
            table("categories", &["id", "name"], categories),
            table("regions", &["id", "name"], regions),
            table(
                "users",
                &["id", "firstname", "lastname", "nickname", "password", "email", "rating", "balance", "creation_date", "region"],
                users,
            ),
            table("items", &ITEM_COLUMNS, items),
            table("old_items", &ITEM_COLUMNS, old_items),
            table("bids", &["id", "user_id", "item_id", "qty", "bid", "max_bid", "date"], g.bids),
            table("comments", &["id", "from_user_id", "to_user_id", "item_id", "rating", "date", "comment"], comments),
            table("buy_now", &["id", "buyer_id", "item_id", "qty", "date"], buy_now),
        ],
    }
}
