//! Genuine multicast's proposals on the wire: the first send and the first resend carry only the
//! timestamp, later resends carry the message too (for a group the caster never reached), and
//! the wait between resends doubles up to `MAX_BACKOFF` periods.

use ensemble_core::ProcessId;
use ensemble_group::multicast::{GenuineConfig, GmMsg, GmOutput, MAX_BACKOFF};
use ensemble_group::{Directory, GenuineMulticast, GroupId, MemoryLog};
use std::collections::VecDeque;

const RESEND: u64 = 10;

/// Three groups of two: g is p{g} and p{g+3}.
fn members() -> Vec<GenuineMulticast<u64>> {
    let directory = Directory::new((0..3).map(|g| (GroupId(g), vec![ProcessId(g), ProcessId(g + 3)])));
    (0..6)
        .map(|p| {
            let config = GenuineConfig::new(directory.clone(), (2, 4), RESEND);
            GenuineMulticast::new(ProcessId(p), config, MemoryLog::new(), 0, Default::default()).expect("a member")
        })
        .collect()
}

/// p0 casts to all three groups. Its cast to g2 is lost, and nothing g0 sends g1 but the cast
/// arrives: g1 never learns g0's proposal, so it never settles, and g0 resends to g1 and g2 for
/// as long as the run goes. Every proposal p0 sends p2 is recorded with the tick it left at.
#[test]
fn proposals_carry_the_message_from_their_second_resend_on_and_back_off() {
    let mut gm = members();
    let mut wire: VecDeque<(ProcessId, ProcessId, GmMsg<u64>)> = VecDeque::new();
    let mut to_p2: Vec<(u64, Option<u64>)> = Vec::new();
    let mut to_p1: Vec<(u64, Option<u64>)> = Vec::new();
    let mut delivered_at_p2 = Vec::new();
    let mut tick = 0u64;
    let mut cast_done = false;
    let push = |from: u32, out: GmOutput<u64>, wire: &mut VecDeque<_>| {
        for (to, m) in out.sends {
            wire.push_back((ProcessId(from), to, m));
        }
    };
    while tick < 2_000 {
        if tick == 100 {
            let (_, out) = gm[0].cast(7, vec![GroupId(0), GroupId(1), GroupId(2)]);
            push(0, out, &mut wire);
            cast_done = true;
        }
        while let Some((from, to, m)) = wire.pop_front() {
            let cast = matches!(m, GmMsg::Cast { .. });
            let (g_from, g_to) = (from.0 % 3, to.0 % 3);
            if from == ProcessId(0) && cast && g_to == 2 {
                continue; // the lost cast
            }
            if from == ProcessId(0) && to == ProcessId(2) {
                if let GmMsg::Proposal { payload, .. } = &m {
                    to_p2.push((tick, *payload));
                }
            }
            if from == ProcessId(0) && to == ProcessId(1) {
                if let GmMsg::Proposal { payload, .. } = &m {
                    to_p1.push((tick, *payload));
                }
            }
            if cast_done && g_from == 0 && g_to == 1 && !cast {
                continue;
            }
            let out = gm[to.0 as usize].on_message(from, m).expect("nothing refused");
            if to == ProcessId(2) {
                delivered_at_p2.extend(out.delivered.iter().map(|d| (tick, d.payload)));
            }
            push(to.0, out, &mut wire);
        }
        for (p, member) in gm.iter_mut().enumerate() {
            let out = member.tick();
            push(p as u32, out, &mut wire);
        }
        tick += 1;
    }
    // To g1, which never settles: the same pattern, for as long as the run goes.
    let payloads: Vec<Option<u64>> = to_p1.iter().map(|(_, p)| *p).collect();
    assert!(payloads.len() >= 8, "{to_p1:?}");
    assert_eq!(payloads[..3], [None, None, Some(7)], "first send and first resend without the message: {to_p1:?}");
    assert!(payloads[2..].iter().all(|p| *p == Some(7)), "{to_p1:?}");
    let gaps: Vec<u64> = to_p1.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert_eq!(gaps[0], RESEND, "{gaps:?}");
    let cap = RESEND * MAX_BACKOFF;
    for w in gaps.windows(2) {
        assert!(w[1] == (w[0] * 2).min(cap), "the wait doubles up to {cap} ticks: {gaps:?}");
    }
    assert_eq!(*gaps.last().unwrap(), cap, "{gaps:?}");
    // To g2, which the caster never reached: it orders the message from the first resend that
    // carries it, delivers (g1's proposals reach it too), and says it settled.
    let payloads: Vec<Option<u64>> = to_p2.iter().map(|(_, p)| *p).collect();
    assert_eq!(payloads, [None, None, Some(7), Some(7)], "{to_p2:?}");
    let (first_with_message, _) = to_p2[2];
    assert_eq!(delivered_at_p2.len(), 1, "{delivered_at_p2:?}");
    assert!(delivered_at_p2[0].0 >= first_with_message && delivered_at_p2[0].1 == 7, "{delivered_at_p2:?}");
}
