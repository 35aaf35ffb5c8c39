//! The properties that are about which processes deliver (and work on) a message, not in which
//! order: validity, uniform agreement, broadcast to all groups, genuineness. (Integrity is
//! decided while the index is built.)

use super::index::{Index, NONE};
use super::log::{MessageId, ProcessNo};
use super::report::{DeliveryReport, DeliveryViolation};
use std::collections::{HashMap, HashSet};

/// Validity: every message cast by a correct caster is delivered by every correct process of
/// its destination groups.
pub(super) fn validity(ix: &Index, report: &mut DeliveryReport) {
    let mut delivered = vec![NONE; ix.processes()];
    for m in 0..ix.messages() as u32 {
        if !ix.caster_correct[m as usize] {
            continue;
        }
        for &(p, _) in ix.delivered_by.row(m) {
            delivered[p as usize] = m;
        }
        for &p in ix.destination_processes.row(m) {
            if ix.correct(p) && delivered[p as usize] != m {
                report.push(DeliveryViolation::NotDelivered {
                    process: ix.process_no(p),
                    message: ix.message_id(m),
                    caster: ix.log.casts[m as usize].caster,
                });
            }
        }
    }
}

/// Uniform agreement: a message that any process delivered (correct or not, destination or
/// not) is delivered by every correct process of its destination groups.
pub(super) fn agreement(ix: &Index, report: &mut DeliveryReport) {
    let mut delivered = vec![NONE; ix.processes()];
    for m in 0..ix.messages() as u32 {
        let by = ix.delivered_by.row(m);
        let Some(&(witness, _)) = by.first() else {
            continue;
        };
        for &(p, _) in by {
            delivered[p as usize] = m;
        }
        for &p in ix.destination_processes.row(m) {
            if ix.correct(p) && delivered[p as usize] != m {
                report.push(DeliveryViolation::Disagreement {
                    process: ix.process_no(p),
                    message: ix.message_id(m),
                    by: ix.process_no(witness),
                });
            }
        }
    }
}

/// Broadcast: every cast is addressed to every group. One violation per message (its first
/// missing group, in log order).
pub(super) fn broadcast(ix: &Index, report: &mut DeliveryReport) {
    for cast in &ix.log.casts {
        if let Some(g) = ix
            .log
            .groups
            .iter()
            .find(|g| !cast.destinations.contains(&g.id))
        {
            report.push(DeliveryViolation::NotToAll {
                message: cast.message,
                group: g.id,
            });
        }
    }
}

/// The steps taken outside the caster and destinations of the message they were for: their
/// number, and one violation per (process, message), summed, in order of first appearance.
pub(super) struct OutsideSteps {
    pub(super) outside: u64,
    pub(super) offenders: Vec<DeliveryViolation>,
}

/// Genuineness, decided step by step. A step for message m is genuine when its process is m's
/// caster or a member of one of m.dst (a step for a message never cast is not). A step for no
/// message is judged by the letter of Guerraoui & Schiper's definition: genuine when its
/// process is the caster or a destination of *some* cast.
pub(super) fn outside_steps(ix: &Index) -> OutsideSteps {
    let mut outside = 0u64;
    let mut offenders: Vec<DeliveryViolation> = Vec::new();
    let mut slot: HashMap<(ProcessNo, Option<MessageId>), usize> = HashMap::new();
    // Built only if some step is for no message: who is a caster or destination of any cast.
    let mut involved: Option<HashSet<ProcessNo>> = None;
    for step in &ix.log.steps {
        let genuine = match step.message {
            Some(m) => ix.message_of.get(&m).is_some_and(|&mi| {
                ix.log.casts[mi as usize].caster == step.process
                    || ix
                        .process_of
                        .get(&step.process)
                        .is_some_and(|&p| ix.is_destination(p, mi))
            }),
            None => involved
                .get_or_insert_with(|| involved_processes(ix))
                .contains(&step.process),
        };
        if genuine || step.count == 0 {
            continue;
        }
        outside += step.count;
        let key = (step.process, step.message);
        match slot.get(&key) {
            Some(&i) => {
                if let DeliveryViolation::OutsideSteps { steps, .. } = &mut offenders[i] {
                    *steps += step.count;
                }
            }
            None => {
                slot.insert(key, offenders.len());
                let cast = step.message.and_then(|m| ix.message_of.get(&m)).map(|&mi| {
                    let c = &ix.log.casts[mi as usize];
                    (c.caster, c.destinations.clone())
                });
                offenders.push(DeliveryViolation::OutsideSteps {
                    process: step.process,
                    message: step.message,
                    steps: step.count,
                    cast,
                });
            }
        }
    }
    OutsideSteps { outside, offenders }
}

fn involved_processes(ix: &Index) -> HashSet<ProcessNo> {
    let mut set: HashSet<ProcessNo> = ix.log.casts.iter().map(|c| c.caster).collect();
    for m in 0..ix.messages() as u32 {
        set.extend(
            ix.destination_processes
                .row(m)
                .iter()
                .map(|&p| ix.process_no(p)),
        );
    }
    set
}
