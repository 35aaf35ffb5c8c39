//! Tokens that no genuine ring makes, one per invariant of `check_token`: each is refused with
//! exactly one `Effect::Refuse` naming its sender, the instance changes nothing, and the ring
//! goes on serving. These are the fuzz test's corpus, kept as named regression cases. Then
//! `quiescent()`, which says when every state update has been applied everywhere.

mod common;

use common::Ring;
use ensemble_app::{ChangeKind, InstanceId, RowChange, StateUpdate};
use ensemble_belt::*;
use ensemble_core::*;

/// A ring of three after one global at each instance, with the genuine token on its way from
/// 0 to 1: hop 4, 3 globals, entries ⟨1 from i1⟩ ⟨2 from i2⟩ ⟨3 from i0⟩. Instance 1 passed
/// it last at hop 2 with globals 1 and its one entry.
fn busy() -> Ring {
    let mut ring = Ring::new(3, GlobalExecution::Parallel);
    for cart in [3, 4, 5] {
        let home = (cart % 3) as u32;
        ring.request(home, "create_cart", vec![Value::Int(cart)]);
        ring.request(home, "add_item", vec![Value::Int(cart), Value::Int(7), Value::Int(2)]);
    }
    ring.run_jobs();
    for cart in [3, 4, 5] {
        ring.request((cart % 3) as u32, "order", vec![Value::Int(cart)]);
    }
    for _ in 0..3 {
        ring.deliver();
        ring.run_jobs();
    }
    let (from, to, token) = ring.in_flight().expect("the token is on its way");
    assert_eq!((from, to), (ProcessId(0), ProcessId(1)));
    let origins: Vec<(u64, u32)> = token.entries.iter().map(|e| (e.seq, e.origin.0)).collect();
    assert_eq!((token.hops, token.globals, origins), (4, 3, vec![(1, 1), (2, 2), (3, 0)]));
    ring
}

/// What a refused message must leave as it was.
fn observed(n: &ConveyorBelt) -> (BeltStats, usize, Option<Token>, bool, Option<String>) {
    let mut stats = n.stats().clone();
    stats.tokens_refused = 0;
    (stats, n.queued(), n.token().cloned(), n.quiescent(), n.failure())
}

/// `token` from `from` to instance `to` is refused, for a reason that says `why`.
fn refused(ring: &mut Ring, from: ProcessId, to: usize, token: Token, why: &str) {
    let before = observed(&ring.nodes[to]);
    let refusals = ring.nodes[to].stats().tokens_refused;
    let out = ring.inject(from, to, token);
    match out.as_slice() {
        [Effect::Refuse { from: f, what }] => {
            assert_eq!(*f, from, "{what}");
            assert!(what.contains(why), "refused for another reason than `{why}`: {what}");
        }
        other => panic!("expected one refusal of a token from {from} ({why}), got {other:?}"),
    }
    assert_eq!(observed(&ring.nodes[to]), before, "a refused token changed instance {to}");
    assert_eq!(ring.nodes[to].stats().tokens_refused, refusals + 1);
    assert!(ring.nodes[to].counters().contains(&("tokens_refused", refusals + 1)));
}

/// The genuine token still goes round, and a new global reaches every instance.
fn still_serves(mut ring: Ring, cart: i64) {
    ring.settle();
    ring.assert_agree();
    ring.assert_serves(cart);
}

/// The token on its way from 0 to 1 in [`busy`], changed by `f`, is refused by instance 1.
fn mutated(f: impl FnOnce(&mut Token), why: &str) {
    let mut ring = busy();
    let (from, _, mut token) = ring.in_flight().unwrap();
    f(&mut token);
    refused(&mut ring, from, 1, token, why);
    still_serves(ring, 301);
}

fn change(table: &str, kind: ChangeKind) -> RowChange {
    RowChange { table: table.into(), kind }
}

fn cols(c: &[(&str, Value)]) -> Vec<(String, Value)> {
    c.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
}

/// A change added to the state update of global 2 (from instance 2).
fn with_change(c: RowChange, why: &str) {
    mutated(|t| t.entries[1].update.changes.push(c), why);
}

#[test]
fn the_corpus_ring_is_genuine() {
    still_serves(busy(), 301);
}

#[test]
fn refuses_a_token_not_from_the_ring_predecessor() {
    for from in [ProcessId(2), ProcessId(1), ProcessId(9)] {
        let mut ring = busy();
        let (_, _, token) = ring.in_flight().unwrap();
        refused(&mut ring, from, 1, token, "not by the ring predecessor p0");
        still_serves(ring, 301);
    }
}

#[test]
fn refuses_a_second_token() {
    let mut ring = busy();
    let (from, _, token) = ring.in_flight().unwrap();
    ring.deliver();
    assert!(ring.nodes[1].token().is_some(), "instance 1 applies the others' updates, holding the token");
    refused(&mut ring, from, 1, token, "a second token");
    still_serves(ring, 301);
}

#[test]
fn refuses_a_replayed_token() {
    let mut ring = busy();
    // Instance 1's first token (hop 1) and instance 2's (hop 2, global 1 to apply).
    for i in 0..2 {
        let (from, to, token) = ring.delivered[i].clone();
        refused(&mut ring, from, to.0 as usize, token, "a round takes 2 more");
    }
    still_serves(ring, 301);
}

#[test]
fn refuses_a_token_whose_hop_count_cannot_grow() {
    mutated(|t| t.hops = u64::MAX, "hop count cannot grow");
}

#[test]
fn refuses_an_entry_from_outside_the_ring() {
    mutated(|t| t.entries[2].origin = InstanceId(3), "outside the ring of 3");
}

#[test]
fn refuses_own_entries_after_others() {
    mutated(|t| t.entries.rotate_left(1), "this instance's entry for global 1 comes after others'");
}

#[test]
fn refuses_others_entries_out_of_ring_order() {
    // Instance 0's entry before instance 2's: 0 comes after 2 on the way from 1.
    mutated(
        |t| {
            t.entries[1].origin = InstanceId(0);
            t.entries[2].origin = InstanceId(2);
        },
        "against the ring order",
    );
}

#[test]
fn refuses_a_gap_in_sequence_numbers() {
    mutated(
        |t| {
            t.entries[2].seq = 4;
            t.globals = 4;
        },
        "global 4 follows global 2",
    );
}

#[test]
fn refuses_a_duplicated_entry() {
    mutated(|t| t.entries.insert(2, t.entries[1].clone()), "global 2 follows global 2");
}

#[test]
fn refuses_globals_that_disagree_with_the_newest_entry() {
    mutated(|t| t.globals = 5, "the newest entry is global 3, but the token counts 5");
}

#[test]
fn refuses_globals_going_back() {
    mutated(
        |t| {
            t.entries.clear();
            t.globals = 0;
        },
        "0 globals, fewer than the 1 of this instance's last turn",
    );
}

#[test]
fn refuses_a_token_that_lost_an_own_entry() {
    mutated(|t| { t.entries.remove(0); }, "0 entries of this instance, which appended 1");
}

#[test]
fn refuses_a_token_whose_count_outruns_its_state_updates() {
    // Instance 1 has seen no global yet: the first token it gets cannot count any that it
    // does not bring.
    let mut ring = Ring::new(3, GlobalExecution::Parallel);
    let (from, to, mut token) = ring.in_flight().unwrap();
    assert_eq!(to, ProcessId(1));
    token.globals = 2;
    refused(&mut ring, from, 1, token.clone(), "2 globals, 2 since this instance's last turn at 0, but 0 state updates");
    token.entries.push(TokenEntry { seq: 2, origin: InstanceId(0), update: StateUpdate::default() });
    refused(&mut ring, from, 1, token, "but 1 state updates");
    still_serves(ring, 300);
}

#[test]
fn refuses_a_change_to_an_unknown_table() {
    with_change(change("no_such_table", ChangeKind::Delete { key: cols(&[("id", Value::Int(1))]) }), "no table `no_such_table`");
}

#[test]
fn refuses_an_insert_without_every_column() {
    let row = cols(&[("item_id", Value::Int(5000)), ("name", Value::Text("x".into()))]);
    with_change(change("items", ChangeKind::Insert { row }), "insert of 2 columns into `items`, which has 4");
}

#[test]
fn refuses_a_change_to_an_unknown_column() {
    let key = cols(&[("item_id", Value::Int(7))]);
    let set = cols(&[("colour", Value::Text("red".into()))]);
    with_change(change("items", ChangeKind::Update { key, set }), "table `items` has no column `colour`");
}

#[test]
fn refuses_a_column_named_twice() {
    let row = cols(&[("item_id", Value::Int(5000)), ("name", Value::Text("x".into())), ("price", Value::Int(1)), ("item_id", Value::Int(5001))]);
    with_change(change("items", ChangeKind::Insert { row }), "column `item_id` named twice");
}

#[test]
fn refuses_an_update_or_delete_not_by_primary_key() {
    let by_name = cols(&[("name", Value::Text("x".into()))]);
    with_change(change("items", ChangeKind::Update { key: by_name, set: vec![] }), "update by (name), not by the primary key (item_id)");
    // Half a composite key could delete many lines.
    let half = cols(&[("cart_id", Value::Int(3))]);
    with_change(change("cart_lines", ChangeKind::Delete { key: half }), "delete by (cart_id), not by the primary key (cart_id, item_id)");
}

#[test]
fn a_ring_of_one_refuses_any_token() {
    let mut ring = Ring::new(1, GlobalExecution::Sequential);
    let token = ring.nodes[0].token().cloned().expect("a ring of one keeps its token");
    refused(&mut ring, ProcessId(0), 0, token, "a ring of one never passes its token");
    still_serves(ring, 300);
}

#[test]
fn quiescent_once_every_state_update_went_round() {
    let mut ring = Ring::new(3, GlobalExecution::Sequential);
    assert!(ring.nodes.iter().all(|n| n.quiescent()), "nothing happened yet");
    ring.request(0, "create_cart", vec![Value::Int(3)]);
    assert!(!ring.nodes[0].quiescent(), "storage work pending");
    ring.run_jobs();
    ring.request(0, "add_item", vec![Value::Int(3), Value::Int(7), Value::Int(2)]);
    ring.run_jobs();
    assert!(ring.nodes[0].quiescent());
    ring.request(0, "order", vec![Value::Int(3)]);
    assert!(!ring.nodes[0].quiescent(), "a global waits in Q");
    let what = ring.nodes[0].in_flight().expect("not quiescent, so something is in flight");
    assert!(what.contains("1 global request(s) queued"), "a stalled run says what waits: {what}");
    // 1 and 2 pass the token on empty; 0 runs the order and passes it with its update.
    for _ in 0..3 {
        ring.deliver();
        ring.run_jobs();
    }
    assert!(matches!(ring.replies.values().last(), Some(ReplyBody::Done(_))), "the order ran");
    assert!(!ring.nodes[0].quiescent(), "its update is on its way to 1 and 2");
    ring.deliver();
    assert!(!ring.nodes[1].quiescent(), "1 holds the token, applying");
    ring.run_jobs();
    assert!(!ring.nodes[1].quiescent(), "1 passed the update on to 2, which has not applied it");
    ring.deliver();
    ring.run_jobs();
    assert!(!ring.nodes[0].quiescent(), "2 applied it, but 0 cannot know before it sees the update again");
    assert!(ring.dbs.iter().all(|d| d.counters().unwrap().0 == 1), "applied everywhere");
    ring.deliver();
    assert!(ring.nodes[0].quiescent(), "0 dropped its entry and passed an empty token");
    assert!(!ring.nodes[1].quiescent() && !ring.nodes[2].quiescent(), "they passed the update on last");
    ring.settle();
    assert!(ring.nodes.iter().all(|n| n.in_flight().is_none()), "settled, nothing in flight");
    ring.assert_agree();
}

#[test]
fn a_ring_of_one_drops_its_entries_and_is_quiescent_between_requests() {
    let mut ring = Ring::new(1, GlobalExecution::Parallel);
    for cart in [5, 6] {
        ring.request(0, "create_cart", vec![Value::Int(cart)]);
        ring.request(0, "add_item", vec![Value::Int(cart), Value::Int(1), Value::Int(1)]);
        ring.run_jobs();
        ring.request(0, "order", vec![Value::Int(cart)]);
        assert!(!ring.nodes[0].quiescent());
        ring.run_jobs();
        assert!(ring.nodes[0].quiescent());
        let token = ring.nodes[0].token().expect("kept");
        assert!(token.entries.is_empty(), "nobody else to apply them: {token:?}");
    }
    assert_eq!(ring.nodes[0].token().unwrap().globals, 2);
    assert!(ring.wire.is_empty());
}

#[test]
fn a_database_that_numbers_a_global_out_of_token_order_halts_the_instance() {
    let mut ring = Ring::new(3, GlobalExecution::Sequential);
    ring.request(0, "create_cart", vec![Value::Int(3)]);
    ring.request(0, "add_item", vec![Value::Int(3), Value::Int(7), Value::Int(2)]);
    ring.run_jobs();
    let order = ring.request(0, "order", vec![Value::Int(3)]);
    for _ in 0..3 {
        ring.deliver();
    }
    // Instance 0 runs the order; its database says it is global 2 where the token is at 0.
    let (work, job) = ring.jobs[0].pop_front().expect("the order");
    let result = match ring.dbs[0].run(&job) {
        ensemble_app::StorageResult::Executed { outcome, update, access, position: ensemble_app::Position::Global { seq }, retries } => {
            ensemble_app::StorageResult::Executed { outcome, update, access, position: ensemble_app::Position::Global { seq: seq + 1 }, retries }
        }
        other => panic!("{other:?}"),
    };
    let mut out = vec![];
    ring.nodes[0].on_event(Time::ZERO, Event::StorageDone { work, result }, &mut out);
    assert!(matches!(out.as_slice(), [Effect::Reply { reply, .. }] if reply.seq == order), "replied, passed nothing on: {out:?}");
    let why = ring.nodes[0].failure().expect("halted");
    assert_eq!(why, "instance i0: the database serialized global 2 but the token is at 0");
    assert!(ring.nodes[0].token().is_some(), "it keeps the token, so no instance builds on the damage");
    let next = ring.request(0, "order", vec![Value::Int(3)]);
    match ring.replies.get(&next) {
        Some(ReplyBody::Error(RequestError::Storage { message, .. })) => assert_eq!(message, &format!("the belt is halted: {why}")),
        other => panic!("{other:?}"),
    }
    let local = ring.request(0, "create_cart", vec![Value::Int(6)]);
    ring.run_jobs();
    assert!(matches!(ring.replies.get(&local), Some(ReplyBody::Done(_))), "locals are still served");
    assert!(!ring.nodes[0].quiescent());
}
