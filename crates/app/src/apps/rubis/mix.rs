//! RUBiS's bidding mix: the web interactions a client walks through, the transition table that
//! picks the next one, and the write-share knob.
//!
//! # The table
//!
//! [`BIDDING_MIX`] is RUBiS's default transition table (the bidding mix, file
//! `default_transitions.txt` of the RUBiS client emulator), written here as data. As in that
//! file, a row is the interaction the client goes to and a column the one it is at; the two extra
//! rows are the probability of going back to the previous page and of ending the session. Some
//! columns of the file do not sum to one (from 0.97 for `Home` to 1.21 for the pages that also
//! have a back probability); each column is read as relative weights and normalized. A session
//! starts at `Home`, and a new one starts there when one ends.
//!
//! # The write-share knob
//!
//! The papers run RUBiS with 15 % writes (Eliá §7, Gyro §VII-A); walking the reference table gives
//! about 8 % writing transactions (about 7 % of the interactions are writing ones). The knob
//! multiplies by a factor `boost` every weight that leads *into* one of the steps toward a write —
//! the registration, buy-now, bid, comment and sell pages, and the storing interactions
//! themselves ([`Interaction::leads_to_write`]) — and then normalizes each column again, so the
//! walk keeps the table's shape and only spends more of its time in those funnels.
//! [`RubisMix::for_write_share`] finds the `boost` that gives a target share of writing
//! transactions by bisection over a fixed-seed walk of the table (the share grows with `boost`).
//! `boost = 1` is the reference table.
//!
//! Measured on SQLite over 10,000 transactions of one client (the test
//! `the_write_share_knob_moves_the_measured_share` in `tests/rubis.rs`): 7.9 % writing
//! transactions with the reference table, 14.7 % with the knob set to 15 % (`boost` ≈ 3.2).

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::sync::Mutex;

/// RUBiS's web interactions, in the order of the transition table's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Interaction {
    Home,
    Register,
    RegisterUser,
    Browse,
    BrowseCategories,
    SearchItemsInCategory,
    BrowseRegions,
    BrowseCategoriesInRegion,
    SearchItemsInRegion,
    ViewItem,
    ViewUserInfo,
    ViewBidHistory,
    BuyNowAuth,
    BuyNow,
    StoreBuyNow,
    PutBidAuth,
    PutBid,
    StoreBid,
    PutCommentAuth,
    PutComment,
    StoreComment,
    Sell,
    SelectCategoryToSellItem,
    SellItemForm,
    RegisterItem,
    AboutMeAuth,
    AboutMe,
}

pub const INTERACTIONS: usize = 27;
/// Outcomes of a step: an interaction, going back, or the end of the session.
pub const OUTCOMES: usize = INTERACTIONS + 2;
pub const BACK: usize = INTERACTIONS;
pub const END_OF_SESSION: usize = INTERACTIONS + 1;

impl Interaction {
    pub const ALL: [Interaction; INTERACTIONS] = [
        Interaction::Home,
        Interaction::Register,
        Interaction::RegisterUser,
        Interaction::Browse,
        Interaction::BrowseCategories,
        Interaction::SearchItemsInCategory,
        Interaction::BrowseRegions,
        Interaction::BrowseCategoriesInRegion,
        Interaction::SearchItemsInRegion,
        Interaction::ViewItem,
        Interaction::ViewUserInfo,
        Interaction::ViewBidHistory,
        Interaction::BuyNowAuth,
        Interaction::BuyNow,
        Interaction::StoreBuyNow,
        Interaction::PutBidAuth,
        Interaction::PutBid,
        Interaction::StoreBid,
        Interaction::PutCommentAuth,
        Interaction::PutComment,
        Interaction::StoreComment,
        Interaction::Sell,
        Interaction::SelectCategoryToSellItem,
        Interaction::SellItemForm,
        Interaction::RegisterItem,
        Interaction::AboutMeAuth,
        Interaction::AboutMe,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        use Interaction::*;
        match self {
            Home => "Home",
            Register => "Register",
            RegisterUser => "RegisterUser",
            Browse => "Browse",
            BrowseCategories => "BrowseCategories",
            SearchItemsInCategory => "SearchItemsInCategory",
            BrowseRegions => "BrowseRegions",
            BrowseCategoriesInRegion => "BrowseCategoriesInRegion",
            SearchItemsInRegion => "SearchItemsInRegion",
            ViewItem => "ViewItem",
            ViewUserInfo => "ViewUserInfo",
            ViewBidHistory => "ViewBidHistory",
            BuyNowAuth => "BuyNowAuth",
            BuyNow => "BuyNow",
            StoreBuyNow => "StoreBuyNow",
            PutBidAuth => "PutBidAuth",
            PutBid => "PutBid",
            StoreBid => "StoreBid",
            PutCommentAuth => "PutCommentAuth",
            PutComment => "PutComment",
            StoreComment => "StoreComment",
            Sell => "Sell",
            SelectCategoryToSellItem => "SelectCategoryToSellItem",
            SellItemForm => "SellItemForm",
            RegisterItem => "RegisterItem",
            AboutMeAuth => "AboutMeAuth",
            AboutMe => "AboutMe",
        }
    }

    /// The database transactions the interaction runs, in order. The static pages (home, the
    /// browse menu, the login and registration forms) run none. A page behind a login form runs
    /// the authentication first, named after the form that asked for the password.
    pub fn transactions(self) -> &'static [&'static str] {
        use Interaction::*;
        match self {
            Home | Register | Browse | BuyNowAuth | PutBidAuth | PutCommentAuth | Sell | AboutMeAuth => &[],
            RegisterUser => &["RegisterUser"],
            BrowseCategories => &["BrowseCategories"],
            SearchItemsInCategory => &["SearchItemsByCategory"],
            BrowseRegions => &["BrowseRegions"],
            BrowseCategoriesInRegion => &["BrowseCategoriesInRegion"],
            SearchItemsInRegion => &["SearchItemsByRegion"],
            ViewItem => &["ViewItem"],
            ViewUserInfo => &["ViewUserInfo"],
            ViewBidHistory => &["ViewBidHistory"],
            BuyNow => &["BuyNowAuth", "BuyNow"],
            StoreBuyNow => &["StoreBuyNow"],
            PutBid => &["PutBidAuth", "PutBid"],
            StoreBid => &["StoreBid"],
            PutComment => &["PutCommentAuth", "PutComment"],
            StoreComment => &["StoreComment"],
            SelectCategoryToSellItem => &["SelectCategoryToSellItem"],
            SellItemForm => &["SellItemForm"],
            RegisterItem => &["RegisterItem"],
            AboutMe => &["AboutMe", "AboutMeBids", "AboutMeWonItems", "AboutMeBoughtItems", "AboutMeItems"],
        }
    }

    /// Runs an updating transaction.
    pub fn writes(self) -> bool {
        use Interaction::*;
        matches!(self, RegisterUser | StoreBuyNow | StoreBid | StoreComment | RegisterItem)
    }

    /// A step toward a write: the pages the write-share knob makes more likely.
    pub fn leads_to_write(self) -> bool {
        use Interaction::*;
        self.writes()
            || matches!(
                self,
                Register | BuyNowAuth | BuyNow | PutBidAuth | PutBid | PutCommentAuth | PutComment | Sell | SelectCategoryToSellItem | SellItemForm
            )
    }

    /// The think time after the page, in milliseconds (the table's "transition waiting time").
    pub fn think_ms(self) -> u32 {
        THINK_MS[self.index()]
    }
}

/// What a step of the walk drew.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Next {
    To(Interaction),
    Back,
    EndOfSession,
}

impl Next {
    pub fn index(self) -> usize {
        match self {
            Next::To(i) => i.index(),
            Next::Back => BACK,
            Next::EndOfSession => END_OF_SESSION,
        }
    }

    pub fn from_index(i: usize) -> Next {
        match i {
            BACK => Next::Back,
            END_OF_SESSION => Next::EndOfSession,
            i => Next::To(Interaction::ALL[i.min(INTERACTIONS - 1)]),
        }
    }
}

/// RUBiS's default transition table (the bidding mix), from the RUBiS client emulator's
/// `default_transitions.txt`. Row: the interaction gone to (then back, then end of session);
/// column: the interaction the client is at, in [`Interaction::ALL`] order.
#[rustfmt::skip]
pub const BIDDING_MIX: [[f64; INTERACTIONS]; OUTCOMES] = [
    // Home
    [0.0, 0.0001, 0.01, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001, 0.01, 0.0001, 0.0001, 0.01, 0.0001, 0.0001, 0.01, 0.0001, 0.0001, 0.0001, 0.01, 0.0001, 0.002],
    // Register
    [0.07, 0.0, 0.0, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01],
    // RegisterUser
    [0.0, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // Browse
    [0.7, 0.0058, 0.58, 0.0, 0.0058, 0.0058, 0.0058, 0.0058, 0.0058, 0.0058, 0.0058, 0.0058, 0.0058, 0.0058, 0.58, 0.0058, 0.0058, 0.58, 0.0058, 0.0058, 0.58, 0.0058, 0.0058, 0.0058, 0.58, 0.0058, 0.116],
    // BrowseCategories
    [0.0, 0.0, 0.0, 0.7, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // SearchItemsInCategory
    [0.0, 0.0, 0.0, 0.0, 0.99, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // BrowseRegions
    [0.0, 0.0, 0.0, 0.29, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // BrowseCategoriesInRegion
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // SearchItemsInRegion
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // ViewItem
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.65],
    // ViewUserInfo
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.19, 0.19, 0.0, 0.0, 0.0, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05],
    // ViewBidHistory
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.15, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // BuyNowAuth
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // BuyNow
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // StoreBuyNow
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // PutBidAuth
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.09, 0.0, 0.0, 0.09, 0.22, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1],
    // PutBid
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // StoreBid
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.74, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // PutCommentAuth (no page leads here in the bidding mix)
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // PutComment
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.02, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05, 0.0, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // StoreComment
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // Sell
    [0.05, 0.0005, 0.05, 0.0005, 0.0005, 0.0005, 0.0005, 0.0005, 0.0005, 0.0005, 0.0005, 0.0005, 0.0005, 0.0005, 0.05, 0.0005, 0.0005, 0.05, 0.0005, 0.0005, 0.05, 0.0005, 0.0005, 0.0005, 0.05, 0.0005, 0.01],
    // SelectCategoryToSellItem
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0, 0.0, 0.0, 0.0, 0.0],
    // SellItemForm
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0, 0.0, 0.0, 0.0],
    // RegisterItem
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0, 0.0, 0.0],
    // AboutMeAuth
    [0.15, 0.0015, 0.15, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.0015, 0.15, 0.0015, 0.0015, 0.15, 0.0015, 0.0015, 0.15, 0.0015, 0.0015, 0.0015, 0.15, 0.0015, 0.03],
    // AboutMe
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.99, 0.0],
    // Back
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.8, 0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    // End of session
    [0.0, 0.0, 0.2, 0.0, 0.0, 0.2, 0.0, 0.0, 0.2, 0.2, 0.2, 0.0, 0.0, 0.0, 0.2, 0.0, 0.0, 0.2, 0.0, 0.0, 0.2, 0.0, 0.0, 0.0, 0.2, 0.0, 0.2],
];

/// The table's "transition waiting time" of each interaction, in milliseconds.
#[rustfmt::skip]
pub const THINK_MS: [u32; INTERACTIONS] = [
    3000, 10000, 3000, 2000, 3000, 7000, 3000, 3000, 7000, 7000, 7000, 7000, 5000, 5000, 2000, 5000, 5000, 2000, 5000, 5000,
    2000, 5000, 3000, 7000, 2000, 3000, 7000,
];

/// Interactions walked per evaluation when calibrating the knob. Every evaluation walks with
/// the same seed, so the estimate moves with `boost` alone.
const CALIBRATION_STEPS: u64 = 50_000;
const CALIBRATION_SEED: u64 = 0x0052_7542_6953;
/// Bounds of the knob's factor.
pub const MIN_BOOST: f64 = 1.0 / 64.0;
pub const MAX_BOOST: f64 = 64.0;

/// A transition table ready to draw from: the bidding mix, possibly reweighted by the knob.
#[derive(Clone, Debug, PartialEq)]
pub struct RubisMix {
    /// `probability[from][outcome]`, each row summing to one.
    probability: [[f64; OUTCOMES]; INTERACTIONS],
    write_boost: f64,
}

impl Default for RubisMix {
    fn default() -> Self {
        RubisMix::bidding()
    }
}

impl RubisMix {
    /// The reference bidding mix.
    pub fn bidding() -> RubisMix {
        RubisMix::with_write_boost(1.0)
    }

    /// The bidding mix with every weight into a step toward a write multiplied by `boost`
    /// (clamped to [`MIN_BOOST`]..=[`MAX_BOOST`]; not a number counts as 1).
    pub fn with_write_boost(boost: f64) -> RubisMix {
        let boost = if boost.is_nan() { 1.0 } else { boost.clamp(MIN_BOOST, MAX_BOOST) };
        let mut probability = [[0.0; OUTCOMES]; INTERACTIONS];
        for (from, row) in probability.iter_mut().enumerate() {
            for (to, p) in row.iter_mut().enumerate() {
                let w = BIDDING_MIX[to][from];
                let boosted = to < INTERACTIONS && Interaction::ALL[to].leads_to_write();
                *p = if boosted { w * boost } else { w };
            }
            let total: f64 = row.iter().sum();
            if total > 0.0 {
                row.iter_mut().for_each(|p| *p /= total);
            } else {
                row[END_OF_SESSION] = 1.0;
            }
        }
        RubisMix { probability, write_boost: boost }
    }

    /// The mix whose walk issues `target` writing transactions per transaction (clamped to what
    /// the knob's bounds reach). Calibrations are cached, since every client of a run asks.
    pub fn for_write_share(target: f64) -> RubisMix {
        static CACHE: Mutex<Vec<(u64, f64)>> = Mutex::new(Vec::new());
        let key = target.to_bits();
        let cached = CACHE.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(k, _)| *k == key).map(|(_, b)| *b);
        if let Some(boost) = cached {
            return RubisMix::with_write_boost(boost);
        }
        let share = |boost: f64| RubisMix::with_write_boost(boost).estimate_write_share(CALIBRATION_STEPS, CALIBRATION_SEED);
        let (mut lo, mut hi) = (MIN_BOOST.ln(), MAX_BOOST.ln());
        if target.is_nan() || target <= share(MIN_BOOST) {
            hi = lo;
        } else if target >= share(MAX_BOOST) {
            lo = hi;
        }
        for _ in 0..24 {
            if hi - lo < 1e-4 {
                break;
            }
            let mid = (lo + hi) / 2.0;
            if share(mid.exp()) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let boost = ((lo + hi) / 2.0).exp();
        CACHE.lock().unwrap_or_else(|e| e.into_inner()).push((key, boost));
        RubisMix::with_write_boost(boost)
    }

    pub fn write_boost(&self) -> f64 {
        self.write_boost
    }

    /// Probability that a client at `from` goes to `next`.
    pub fn probability(&self, from: Interaction, next: Next) -> f64 {
        self.probability[from.index()][next.index()]
    }

    /// Draws the outcome of a step from `from`.
    pub fn draw(&self, from: Interaction, rng: &mut dyn RngCore) -> Next {
        let x: f64 = rng.random();
        let mut acc = 0.0;
        let row = &self.probability[from.index()];
        for (i, p) in row.iter().enumerate() {
            acc += p;
            if x < acc && *p > 0.0 {
                return Next::from_index(i);
            }
        }
        // Rounding left a sliver above the last cumulative sum: the last possible outcome.
        Next::from_index(row.iter().rposition(|p| *p > 0.0).unwrap_or(END_OF_SESSION))
    }

    /// Writing transactions per transaction over a walk of `interactions` steps of the table alone
    /// (no database: each interaction counts the transactions it always runs).
    pub fn estimate_write_share(&self, interactions: u64, seed: u64) -> f64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut walk = Walk::default();
        let (mut txns, mut writes) = (0u64, 0u64);
        for _ in 0..interactions {
            txns += walk.state.transactions().len() as u64;
            writes += walk.state.writes() as u64;
            walk.step(self, &mut rng);
        }
        if txns == 0 {
            0.0
        } else {
            writes as f64 / txns as f64
        }
    }

    /// How often each transaction type is issued, as fractions of all transactions, over a walk
    /// of `interactions` steps of the table alone: the weights the analyzer's `--weights` wants.
    pub fn transaction_frequencies(&self, interactions: u64, seed: u64) -> Vec<(&'static str, f64)> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut walk = Walk::default();
        let mut visits = [0u64; INTERACTIONS];
        for _ in 0..interactions {
            visits[walk.state.index()] += 1;
            walk.step(self, &mut rng);
        }
        let mut counts: Vec<(&'static str, u64)> = Vec::new();
        for it in Interaction::ALL {
            for txn in it.transactions() {
                match counts.iter_mut().find(|(t, _)| t == txn) {
                    Some((_, n)) => *n += visits[it.index()],
                    None => counts.push((txn, visits[it.index()])),
                }
            }
        }
        let total = counts.iter().map(|(_, n)| n).sum::<u64>().max(1) as f64;
        counts.into_iter().map(|(t, n)| (t, n as f64 / total)).collect()
    }
}

/// Where a client is in the table, and the pages "back" returns to.
#[derive(Clone, Debug)]
pub struct Walk {
    pub state: Interaction,
    history: Vec<Interaction>,
}

/// Pages remembered for going back; older ones are forgotten.
const HISTORY: usize = 32;

impl Default for Walk {
    fn default() -> Self {
        Walk { state: Interaction::Home, history: Vec::new() }
    }
}

impl Walk {
    /// Draws and takes one step. Going back with no page to go back to, and ending the session,
    /// lead to `Home`.
    pub fn step(&mut self, mix: &RubisMix, rng: &mut dyn RngCore) -> Next {
        let next = mix.draw(self.state, rng);
        match next {
            Next::To(to) => {
                if self.history.len() == HISTORY {
                    self.history.remove(0);
                }
                self.history.push(self.state);
                self.state = to;
            }
            Next::Back => self.state = self.history.pop().unwrap_or(Interaction::Home),
            Next::EndOfSession => {
                self.history.clear();
                self.state = Interaction::Home;
            }
        }
        next
    }
}
