//! Fuzzing the belt's message handling: a ring of three on SQLite runs random requests, moves the
//! genuine token and completes storage work in random orders, and in between receives crafted
//! tokens: the genuine one mutated, replays of old ones, tokens from the wrong sender or to an
//! instance holding the token. Each crafted token breaks an invariant of a genuine one, so each
//! must be refused with exactly one `Effect::Refuse` naming its claimed sender and change
//! nothing; no instance may panic; afterwards the replicas agree and the ring still serves.
//!
//! The named cases of `tests/tokens.rs` are the corpus, one per invariant; proptest keeps any
//! failing case it finds in `token_fuzz.proptest-regressions` beside this file. The run is seeded
//! (`PROPTEST_RNG_SEED` overrides the seed, `PROPTEST_CASES` the number of cases).

mod common;

use common::Ring;
use ensemble_app::{ChangeKind, InstanceId, RowChange, StateUpdate};
use ensemble_belt::*;
use ensemble_core::*;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

const N: u32 = 3;

#[derive(Clone, Debug)]
enum Step {
    /// A request of one of the shop's types, sent to instance `at` (redirects are followed).
    Request { at: u32, txn: u8, cart: u8, item: u8 },
    /// The genuine token reaches its next instance.
    Deliver,
    /// Instance `at`'s oldest storage job completes.
    Complete { at: u8 },
    /// A crafted token; `kind` picks the mutation, the others pick within it.
    Craft { kind: u8, pick: u16, from: u8, to: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..N, 0..5u8, 0..9u8, 1..30u8).prop_map(|(at, txn, cart, item)| Step::Request { at, txn, cart, item }),
        4 => Just(Step::Deliver),
        4 => (0..N as u8).prop_map(|at| Step::Complete { at }),
        3 => (0..14u8, any::<u16>(), any::<u8>(), any::<u8>()).prop_map(|(kind, pick, from, to)| Step::Craft { kind, pick, from, to }),
    ]
}

fn pred(r: u32) -> u32 {
    (r + N - 1) % N
}

fn succ(r: u32) -> u32 {
    (r + 1) % N
}

fn entry(seq: u64, origin: u32, changes: Vec<RowChange>) -> TokenEntry {
    TokenEntry { seq, origin: InstanceId(origin), update: StateUpdate { changes, writer: None } }
}

fn cols(c: &[(&str, Value)]) -> Vec<(String, Value)> {
    c.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
}

/// A row change no storage could apply by primary key.
fn bad_change(pick: u16) -> RowChange {
    let (table, kind) = match pick % 6 {
        0 => ("no_such_table", ChangeKind::Delete { key: cols(&[("id", Value::Int(1))]) }),
        1 => ("items", ChangeKind::Insert { row: cols(&[("item_id", Value::Int(9000))]) }),
        2 => ("items", ChangeKind::Update { key: cols(&[("name", Value::Text("x".into()))]), set: vec![] }),
        3 => ("items", ChangeKind::Update { key: cols(&[("item_id", Value::Int(7))]), set: cols(&[("colour", Value::Int(1))]) }),
        4 => ("carts", ChangeKind::Insert { row: cols(&[("cart_id", Value::Int(1)), ("cart_id", Value::Int(2))]) }),
        _ => ("cart_lines", ChangeKind::Delete { key: cols(&[("cart_id", Value::Int(3))]) }),
    };
    RowChange { table: table.into(), kind }
}

/// Whether instance `r` has let the token go at least once (instance 0 does at start).
fn has_passed(ring: &Ring, r: u32) -> bool {
    r == 0 || ring.delivered.iter().any(|(from, _, _)| from.0 == r)
}

/// A crafted token for the ring as it is: claimed sender, receiver, token, and the invariant it
/// breaks. Mutations of the genuine token go to its receiver from its sender, so that only the
/// mutation is wrong; when a mutation does not apply (no entry to duplicate), or the token is
/// not in flight, another that always does is used.
fn craft(ring: &Ring, kind: u8, pick: u16, from: u8, to: u8) -> (ProcessId, usize, Token, &'static str) {
    let genuine = ring.in_flight();
    let holder = (0..N).find(|i| ring.nodes[*i as usize].token().is_some());
    let any_token = || {
        genuine.as_ref().map(|g| g.2.clone()).or_else(|| ring.delivered.last().map(|d| d.2.clone())).unwrap_or(Token {
            hops: 0,
            globals: 0,
            entries: vec![],
        })
    };
    let crafted = match kind {
        0 => {
            let r = to as u32 % N;
            let senders: Vec<u32> = [0, 1, 2, 3, 7].into_iter().filter(|s| *s != pred(r)).collect();
            Some((ProcessId(senders[from as usize % senders.len()]), r as usize, any_token(), "sender"))
        }
        1 => holder.map(|h| (ProcessId(pred(h)), h as usize, any_token(), "second token")),
        2 if !ring.delivered.is_empty() => {
            let (f, t, tok) = ring.delivered[pick as usize % ring.delivered.len()].clone();
            Some((f, t.0 as usize, tok, "replay"))
        }
        _ => genuine.as_ref().and_then(|(f, t, g)| {
            let r = t.0;
            let mut tok = g.clone();
            let len = tok.entries.len();
            let i = pick as usize % len.max(1);
            let own = tok.entries.iter().take_while(|e| e.origin.0 == r).count();
            let what = match kind {
                3 => {
                    if len > 0 {
                        tok.entries[i].origin = InstanceId(N + u32::from(pick % 4));
                    } else {
                        tok.globals += 1;
                        tok.entries.push(entry(tok.globals, N, vec![]));
                    }
                    "origin outside the ring"
                }
                4 => {
                    tok.entries.push(entry(tok.globals + 1, succ(r), vec![]));
                    tok.entries.push(entry(tok.globals + 2, r, vec![]));
                    tok.globals += 2;
                    "own entry after others'"
                }
                5 => {
                    if len > 0 {
                        tok.entries[i].seq += 1 + u64::from(pick % 3);
                    } else {
                        tok.globals += 2;
                        tok.entries.push(entry(tok.globals, succ(r), vec![]));
                    }
                    "sequence gap"
                }
                6 => {
                    let delta = 1 + u64::from(pick % 3);
                    if pick & 1 == 1 && tok.globals >= delta {
                        tok.globals -= delta;
                    } else {
                        tok.globals += delta;
                    }
                    "globals"
                }
                7 => {
                    // A genuine token comes back exactly n − 1 hops after its receiver passed it.
                    tok.hops = if has_passed(ring, r) { u64::from(pick) % tok.hops } else { u64::MAX };
                    "hops"
                }
                8 if own > 0 => {
                    tok.entries.remove(pick as usize % own);
                    "lost own entry"
                }
                9 if len > 0 => {
                    let e = tok.entries[i].clone();
                    tok.entries.insert(i + 1, e);
                    "duplicated entry"
                }
                10 if len > 1 => {
                    tok.entries.swap(i % (len - 1), i % (len - 1) + 1);
                    "entries out of order"
                }
                11 | 12 => {
                    let c = if kind == 11 { bad_change(0) } else { bad_change(pick) };
                    if len > 0 {
                        tok.entries[i].update.changes.push(c);
                    } else {
                        tok.globals += 1;
                        tok.entries.push(entry(tok.globals, succ(r), vec![c]));
                    }
                    "row change"
                }
                13 => {
                    tok.entries.push(entry(tok.globals + 1, pred(r), vec![]));
                    tok.entries.push(entry(tok.globals + 2, succ(r), vec![]));
                    tok.globals += 2;
                    "ring order"
                }
                _ => return None,
            };
            Some((*f, r as usize, tok, what))
        }),
    };
    crafted.unwrap_or_else(|| match (&genuine, holder) {
        (Some((f, t, g)), _) => {
            let (f, t, mut g) = (*f, *t, g.clone());
            g.hops = u64::MAX;
            (f, t.0 as usize, g, "hop count at its maximum")
        }
        (None, Some(h)) => (ProcessId(pred(h)), h as usize, any_token(), "second token"),
        (None, None) => panic!("the token is neither in flight nor held"),
    })
}

fn request(ring: &mut Ring, at: u32, txn: u8, cart: u8, item: u8) {
    let (cart, item) = (Value::Int(i64::from(cart) + 3), Value::Int(i64::from(item)));
    let (name, params) = match txn {
        0 => ("create_cart", vec![cart]),
        1 => ("add_item", vec![cart, item, Value::Int(1)]),
        2 => ("order", vec![cart]),
        3 => ("get_cart", vec![cart]),
        _ => ("browse_items", vec![item, Value::Int(3)]),
    };
    ring.request(at, name, params);
}

/// What a refused token must leave as it was.
fn observed(n: &ConveyorBelt) -> (BeltStats, usize, Option<Token>, bool) {
    let mut stats = n.stats().clone();
    stats.tokens_refused = 0;
    (stats, n.queued(), n.token().cloned(), n.quiescent())
}

fn run(mode: GlobalExecution, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut ring = Ring::new(N, mode);
    let mut crafted = 0;
    for s in steps {
        match *s {
            Step::Request { at, txn, cart, item } => request(&mut ring, at, txn, cart, item),
            Step::Deliver => {
                ring.deliver();
            }
            Step::Complete { at } => {
                ring.complete(at as usize);
            }
            Step::Craft { kind, pick, from, to } => {
                let (from, to, token, what) = craft(&ring, kind, pick, from, to);
                let before = observed(&ring.nodes[to]);
                let out = ring.inject(from, to, token.clone());
                prop_assert!(
                    matches!(out.as_slice(), [Effect::Refuse { from: f, .. }] if *f == from),
                    "a crafted token ({what}) from {from} to instance {to} was not refused once: {token:?} gave {out:?}"
                );
                prop_assert_eq!(&observed(&ring.nodes[to]), &before, "a refused token ({}) changed instance {}", what, to);
                crafted += 1;
            }
        }
    }
    ring.settle();
    ring.assert_agree();
    prop_assert_eq!(ring.replies.len() as u64, ring.requests, "every request has its reply");
    let refused: u64 = ring.nodes.iter().map(|n| n.stats().tokens_refused).sum();
    prop_assert_eq!(refused, crafted);
    ring.assert_serves(1000);
    Ok(())
}

fn config() -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if matches!(c.rng_seed, RngSeed::Random) {
        c.rng_seed = RngSeed::Fixed(0x0e11_a0b1_7011);
    }
    c
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn crafted_tokens_are_refused_and_the_ring_serves_on(
        parallel in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let mode = if parallel { GlobalExecution::Parallel } else { GlobalExecution::Sequential };
        run(mode, &steps)?;
    }
}

/// Every kind of crafted token, at every state a short genuine run passes through (the token in
/// flight with and without the receiver's own entries, held while applying or executing): the
/// fuzz's oracle, that each crafted token breaks an invariant, checked on one whole schedule.
#[test]
fn every_kind_of_crafted_token_at_every_step_of_a_run() {
    let mut actions = vec![];
    for (txn, item) in [(0, 1), (1, 5), (2, 1)] {
        for cart in 0..N as u8 {
            actions.push(Step::Request { at: u32::from(cart), txn, cart, item });
        }
        actions.extend((0..N as u8).map(|at| Step::Complete { at }));
    }
    for round in 0..12u8 {
        actions.push(Step::Deliver);
        actions.extend((0..N as u8).map(|at| Step::Complete { at }));
        if round % 4 == 1 {
            // Another order at an instance while the token goes round: it waits in Q.
            actions.push(Step::Request { at: u32::from(round % 3), txn: 2, cart: round % 3 + 3, item: 1 });
        }
    }
    let mut script = vec![];
    for (k, a) in actions.into_iter().enumerate() {
        script.push(a);
        for kind in 0..14 {
            script.push(Step::Craft { kind, pick: (k * 7 + kind as usize) as u16, from: kind, to: k as u8 });
        }
    }
    for mode in [GlobalExecution::Parallel, GlobalExecution::Sequential] {
        run(mode, &script).unwrap();
    }
}
