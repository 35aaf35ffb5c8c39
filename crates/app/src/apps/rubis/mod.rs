//! `rubis`, the RUBiS auction site (Eliá §6, Gyro §VII-A): users put items up for auction, bid
//! on them, buy them outright, and leave comments about each other. Written here from the shapes
//! of RUBiS's schema and web interactions; no code of the reference implementation is used.
//!
//! # Transactions
//!
//! A transaction is one database transaction. A web interaction that runs several of them (the
//! reference's servlets authenticate in one and show the page in another; its "About me" page
//! runs one per list it shows) contributes each; [`mix::Interaction::transactions`] says which
//! ones every interaction runs, in order. 26 transactions, 21 read-only and 5 updating:
//!
//! | transaction | | what it does |
//! | --- | --- | --- |
//! | `BrowseCategories` | read-only | every category |
//! | `BrowseRegions` | read-only | every region |
//! | `BrowseCategoriesInRegion` | read-only | checks the region, every category |
//! | `SearchItemsByCategory` | read-only | one page of the open items of a category, soonest end first |
//! | `SearchItemsByRegion` | read-only | the same, restricted to sellers of one region |
//! | `ViewItem` | read-only | an item (open or archived in `old_items`) and its seller's nickname |
//! | `ViewUserInfo` | read-only | a user's public profile and the comments about them |
//! | `ViewBidHistory` | read-only | an item's bids with the bidders' nicknames |
//! | `BuyNowAuth` | read-only | checks nickname and password before the buy-now page |
//! | `BuyNow` | read-only | the open item as the buy-now form shows it |
//! | `PutBidAuth` | read-only | checks nickname and password before the bid page |
//! | `PutBid` | read-only | the open item as the bid form shows it (current maximum, bid count) |
//! | `PutCommentAuth` | read-only | checks nickname and password before the comment page |
//! | `PutComment` | read-only | the item and the user the comment form is about |
//! | `SelectCategoryToSellItem` | read-only | checks nickname and password, every category |
//! | `SellItemForm` | read-only | the seller and the category the new-item form is for |
//! | `AboutMe` | read-only | checks nickname and password, the user's own profile and the comments about them |
//! | `AboutMeBids` | read-only | the open items the user bid on, with the user's best bid |
//! | `AboutMeWonItems` | read-only | the auctions the user won in the last 30 days |
//! | `AboutMeBoughtItems` | read-only | what the user bought outright in the last 30 days |
//! | `AboutMeItems` | read-only | what the user sells now and sold in the last 30 days |
//! | `RegisterUser` | update | inserts a user; refuses a nickname that is taken |
//! | `RegisterItem` | update | inserts an item for auction |
//! | `StoreBid` | update | inserts a bid; raises the item's `nb_of_bids` and `max_bid` |
//! | `StoreBuyNow` | update | inserts a purchase; takes the quantity from the item, closing it at 0 |
//! | `StoreComment` | update | inserts a comment; adds its rating to the rated user's `rating` |
//!
//! The papers count 26 transactions of which 17 are read-only (Eliá Table 1, Gyro Table I). Their
//! RUBiS ran the reference's request handlers, which "are not atomic and consist of invocations
//! of multiple operations" (Eliá §6): storing a bid there inserts the bid and updates the item in
//! separate operations, which is how a count of nine updating transactions comes about. Here each
//! storing interaction is one atomic transaction, so that no reader ever sees a bid its item does
//! not count; that leaves five updating transactions, and the split pages above make up the 26.
//!
//! # Determinism
//!
//! The reference takes new ids from auto-increment columns, reads the clock and draws random
//! values while it serves a request. Here every such value is a parameter the client emulator
//! chose: new ids are minted with [`crate::ClientCtx::home_id`] (unique in a run, routed to the
//! client's home instance), the current time is the emulator's logical clock (`now`, epoch
//! seconds), and random choices are made by the emulator. Every transaction is a function of its
//! parameters and the database state, so a replica, a replay or a checker gets the same answer.
//!
//! The double key stays visible: the transactions of bidding, buying and commenting take the
//! user's id and the item's id (`StoreComment` the ids of both users) as parameters, so a plan can
//! partition them by both and run them locally when both route to one instance.
//!
//! # Schema decisions
//!
//! Dates are INTEGER epoch seconds and prices are INTEGER cents, so that every backend compares
//! and adds them exactly. The schema can only hold `CREATE TABLE` statements, so the lookups the
//! pages need (bids by item and by user, items by category and by seller, comments about a user,
//! purchases by buyer) get their index from a `UNIQUE (column, id)` constraint, which `id` alone
//! already makes true. `users.nickname` is `UNIQUE` because RUBiS identifies users by it.

pub mod data;
pub mod mix;
pub mod txns;
pub mod workload;

pub use data::{generate, Cardinalities};
pub use mix::{Interaction, Next, RubisMix};
pub use txns::{transactions, SCHEMA};
pub use workload::RubisWorkload;

use crate::model::Application;
use std::sync::Arc;

pub fn application() -> Arc<Application> {
    Application::new("rubis", SCHEMA, transactions(), generate).expect("the rubis application is well-formed")
}
