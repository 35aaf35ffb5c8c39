//! The `xcast-latency` figure (issue 12, item 4): each primitive's latency to 1, 2, 4 and 8
//! groups in units of Δ, and its messages per cast, measured in fault-free simulations, beside
//! the costs the papers state (G-DUR §5.3, P-Store Table 1).
//!
//! How a point is measured ([`measure`]): one caster outside the groups casts to `k` groups of 3
//! (atomic broadcast: a deployment of `k` groups, cast to all), one cast every [`Net::every`],
//! far longer than a cast takes, so that no cast waits behind another: latency without
//! contention. The casts of the first [`WARMUP`] (leader elections) are left out. For each cast,
//! the latency to the first destination process that delivers it and to the last; the point is
//! their means over the casts. Messages per cast are every message sent in the measured window
//! (consensus, relays, acknowledgements) less what the same deployment sends in the same window
//! without casts (heartbeats), divided by the casts of the window.

use crate::sim::{CastPlan, Kind, Placement, Scenario, World};
use ensemble_core::topology::Topology;
use ensemble_core::{ProcessId, Time};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Destination group counts of the figure.
pub const GROUPS: [usize; 4] = [1, 2, 4, 8];
/// Casts measured per point, at least.
pub const CASTS: u64 = 50;
/// Casts made before this are not measured: the groups elect their leaders first.
pub const WARMUP: Duration = Duration::from_secs(2);

/// A network and a placement the figure measures in.
#[derive(Clone, Debug)]
pub struct Net {
    pub name: &'static str,
    pub topology: Topology,
    pub placement: Placement,
    pub caster_site: usize,
    /// The unit of the figure: the topology's one-way delay between two sites.
    pub delta: Duration,
    /// Time between two casts.
    pub every: Duration,
    /// Where everything is, for the table's title.
    pub describe: &'static str,
}

/// The figure's networks: wan-normal50 with every group across the sites (every consensus
/// round crosses the WAN), the LAN preset, and wan-normal50 with every group in a site of its
/// own (P-Store's setting: intra-group delays negligible).
pub fn nets() -> Vec<Net> {
    vec![
        Net {
            name: "wan-normal50",
            topology: Topology::wan_normal50(3),
            placement: Placement::MemberPerSite,
            caster_site: 0,
            delta: Duration::from_millis(50),
            every: Duration::from_secs(1),
            describe: "member i of every group at site i of 3 sites, the caster at site 0 (with member 0); 50 ms ± 5 ms between sites, 0.05 ms inside one",
        },
        Net {
            name: "lan",
            topology: Topology::lan(),
            placement: Placement::MemberPerSite,
            caster_site: 0,
            delta: Duration::from_micros(100),
            every: Duration::from_millis(200),
            describe: "every process on a machine of its own in one data centre, 0.1 ms apart; each message also costs 20 µs of handling (the preset's CPU)",
        },
        Net {
            name: "wan-normal50-dc",
            // The caster's site and one per group, for up to 8 groups.
            topology: Topology::wan_normal50(1 + GROUPS[GROUPS.len() - 1]),
            placement: Placement::GroupPerSite,
            caster_site: 0,
            delta: Duration::from_millis(50),
            every: Duration::from_secs(1),
            describe: "group g entirely at site g + 1 (its consensus inside a data centre, as P-Store assumes), the caster alone at site 0; 50 ms ± 5 ms between sites, 0.05 ms inside one",
        },
    ]
}

/// One point of the figure.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub net: String,
    pub delta_ms: f64,
    pub primitive: String,
    pub groups: usize,
    /// Casts measured.
    pub casts: usize,
    /// Mean latency from the cast to the first destination process's delivery.
    pub first_ms: f64,
    /// Mean latency from the cast to the last destination process's delivery.
    pub last_ms: f64,
    pub first_delta: f64,
    pub last_delta: f64,
    /// The slowest cast's latency to its last destination process (multicast only).
    pub last_max_ms: Option<f64>,
    /// Who delivered first most often: `m2 100%` (member 2 of its group, every time: the leader,
    /// for the primitives that order through consensus); for two-phase commit, the coordinator.
    pub first_at: String,
    pub first_member: Option<usize>,
    pub messages_per_cast: f64,
    /// Messages (copies, log entries, proposals) sent again by the periodic resend, included in
    /// `messages_per_cast` (multicast only).
    pub resent_per_cast: Option<f64>,
    /// What the deployment sends per second without casts (heartbeats), left out above
    /// (multicast only).
    pub idle_messages_per_s: Option<f64>,
}

/// The scenario of a point: `casts` casts by one caster outside the groups.
fn scenario(net: &Net, groups: usize, casts: u64) -> Scenario {
    Scenario {
        groups: groups as u32,
        topology: net.topology.clone(),
        placement: net.placement,
        clients: vec![net.caster_site],
        members_cast: false,
        plan: CastPlan { count: casts, every: net.every, groups: Some(groups) },
        faults: false,
        // The figure drives the run itself (`World`); these only bound it.
        horizon: Time::ZERO,
        limit: Time::ZERO,
    }
}

/// Runs `world` in slices until `done` says so (or a minute of virtual time passes).
fn run_while(world: &mut World, step: Duration, mut done: impl FnMut(&World) -> bool) -> Result<(), String> {
    let give_up = world.now() + Duration::from_secs(60);
    while !done(world) {
        if world.now() >= give_up {
            return Err(format!("stuck at {:?}", world.now().as_duration()));
        }
        let next = world.now() + step;
        world.run_until(next);
    }
    Ok(())
}

/// Everything the components sent again on their resend ticks, by their counters.
fn resent(world: &World) -> u64 {
    world.counters().iter().filter(|(name, _)| name.ends_with("resent")).map(|(_, n)| n).sum()
}

/// Measures one point: `kind` to `groups` groups in `net`, seeded.
pub fn measure(net: &Net, kind: Kind, groups: usize, seed: u64) -> Result<Row, String> {
    let what = format!("{} to {groups} groups in {}", kind.name(), net.name);
    // Casts start within 1.2 s of time zero (the node's start), one per `every` after that.
    let casts = CASTS + (WARMUP.as_nanos() / net.every.as_nanos()) as u64 + 1;
    let s = scenario(net, groups, casts);
    let mut world = World::new(kind, seed, &s, &mut ChaCha8Rng::seed_from_u64(seed));
    let step = net.every / 4;
    // The window opens between two casts, once the last one before the warm-up is over (a cast
    // takes far less than `every`), and closes as long after the last cast.
    world.run_until(Time::ZERO + WARMUP);
    let quiet = net.every * 3 / 4;
    let opens = match world.record().casts.last() {
        Some((_, _, at)) => (*at + quiet).max(world.now()),
        None => world.now(),
    };
    world.run_until(opens);
    let sent_before = world.messages_sent();
    let resent_before = resent(&world);
    run_while(&mut world, step, |w| w.record().casts.len() as u64 == casts).map_err(|e| format!("{what}: {e}"))?;
    let last_cast = world.record().casts.last().map(|c| c.2).expect("every cast made");
    let closes = last_cast + quiet;
    world.run_until(closes);
    let sent = world.messages_sent() - sent_before;
    let resent = resent(&world) - resent_before;

    let rec = world.record();
    let (mut first, mut last, mut last_max, mut measured) = (0.0, 0.0, 0.0f64, 0usize);
    let mut first_by_member = [0usize; 3];
    for (id, dst, at) in rec.casts.iter().filter(|c| c.2 >= opens) {
        // (latency in ms, member index in its group), over every destination process.
        let mut times: Vec<(f64, usize)> = Vec::new();
        for g in dst {
            for (i, m) in (3 * g.0..3 * g.0 + 3).enumerate() {
                match rec.delivered_at.get(&(ProcessId(m), *id)) {
                    Some(t) => times.push((t.saturating_sub(*at).as_secs_f64() * 1e3, i)),
                    None => return Err(format!("{what}: {id} not delivered at p{m} by {:?}", closes.as_duration())),
                }
            }
        }
        let lo = times.iter().copied().min_by(|a, b| a.0.total_cmp(&b.0)).expect("a destination");
        let hi = times.iter().map(|t| t.0).fold(0.0, f64::max);
        first += lo.0;
        first_by_member[lo.1] += 1;
        last += hi;
        last_max = last_max.max(hi);
        measured += 1;
    }
    let first_member = (0..3).max_by_key(|&i| (first_by_member[i], std::cmp::Reverse(i))).expect("three members");
    drop(rec);
    if measured == 0 {
        return Err(format!("{what}: no cast in the window"));
    }
    let out = world.finish(true);
    if !out.report.ok() || !out.failures.is_empty() || !out.refused.is_empty() {
        return Err(format!("{what}: {} {:?} {:?}", out.report, out.failures, out.refused));
    }

    // The same deployment without casts, over the same window: its heartbeats.
    let mut idle = World::new(kind, seed, &scenario(net, groups, 0), &mut ChaCha8Rng::seed_from_u64(seed));
    idle.run_until(opens);
    let idle_before = idle.messages_sent();
    idle.run_until(closes);
    let idle_sent = idle.messages_sent() - idle_before;
    let window = closes.saturating_sub(opens).as_secs_f64();

    let n = measured as f64;
    let delta_ms = net.delta.as_secs_f64() * 1e3;
    Ok(Row {
        net: net.name.to_string(),
        delta_ms,
        primitive: kind.name().to_string(),
        groups,
        casts: measured,
        first_ms: first / n,
        last_ms: last / n,
        first_delta: first / n / delta_ms,
        last_delta: last / n / delta_ms,
        last_max_ms: Some(last_max),
        first_at: format!("m{first_member} {:.0}%", first_by_member[first_member] as f64 / n * 100.0),
        first_member: Some(first_member),
        messages_per_cast: (sent as f64 - idle_sent as f64) / n,
        resent_per_cast: Some(resent as f64 / n),
        idle_messages_per_s: Some(idle_sent as f64 / window),
    })
}

/// Two-phase commit's point in `net` for a transaction on `groups` groups of 3: its
/// participants are the 3·`groups` members (2PC has no groups of its own: every replica votes),
/// one coordinator at site 0 and participant `i` at site `i mod sites`
/// (`crate::commit::run_fault_free`), one transaction at a time, every vote *yes*. First: the
/// coordinator's decision; last: the last participant's.
pub fn measure_commit(net: &Net, groups: usize, seed: u64) -> Result<Row, String> {
    let f = crate::commit::run_fault_free(3 * groups, net.topology.clone(), seed);
    let what = format!("commit on {groups} groups in {}", net.name);
    if !f.report.ok() || f.committed != f.txns || f.txns == 0 {
        return Err(format!("{what}: {} of {} committed; {}", f.committed, f.txns, f.report));
    }
    let delta_ms = net.delta.as_secs_f64() * 1e3;
    let (first, last) = (f.coordinator_latency.as_secs_f64() * 1e3, f.participant_latency.as_secs_f64() * 1e3);
    Ok(Row {
        net: net.name.to_string(),
        delta_ms,
        primitive: "commit".into(),
        groups,
        casts: f.txns,
        first_ms: first,
        last_ms: last,
        first_delta: first / delta_ms,
        last_delta: last / delta_ms,
        last_max_ms: None,
        first_at: "coordinator".into(),
        first_member: None,
        messages_per_cast: f.messages_per_txn,
        resent_per_cast: None,
        idle_messages_per_s: None,
    })
}

/// What a point measures.
#[derive(Clone, Copy, Debug)]
enum Subject {
    Multicast(Kind),
    /// Two-phase commit: only where its placement (participant `i` at site `i mod sites`) is the
    /// net's; not in `wan-normal50-dc`, whose groups each sit in a site of their own.
    Commit,
}

/// Every point of the figure, measured on `jobs` threads (each simulation stays on the thread
/// that built it); in the order of [`nets`], then [`Kind::WORKING`] and two-phase commit, then
/// [`GROUPS`].
pub fn measure_all(seed: u64, jobs: usize) -> Result<Vec<Row>, String> {
    let points: Vec<(Net, Subject, usize)> = nets()
        .into_iter()
        .flat_map(|net| {
            let mut subjects: Vec<Subject> = Kind::WORKING.into_iter().map(Subject::Multicast).collect();
            if net.placement == Placement::MemberPerSite {
                subjects.push(Subject::Commit);
            }
            subjects.into_iter().flat_map(move |k| GROUPS.map(|g| (net.clone(), k, g)))
        })
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<Result<Row, String>>> = vec![None; points.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs.clamp(1, points.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((net, subject, groups)) = points.get(i) else { break };
                        mine.push((
                            i,
                            match subject {
                                Subject::Multicast(kind) => measure(net, *kind, *groups, seed),
                                Subject::Commit => measure_commit(net, *groups, seed),
                            },
                        ));
                    }
                    mine
                })
            })
            .collect();
        for h in handles {
            for (i, r) in h.join().expect("a measuring thread does not panic") {
                results[i] = Some(r);
            }
        }
    });
    results.into_iter().map(|r| r.expect("every point measured")).collect()
}

/// What a paper states for a primitive to `groups` groups: latency and messages, as printed
/// beside ours.
#[derive(Clone, Debug, Serialize)]
pub struct Stated {
    pub gdur: String,
    pub pstore: String,
}

/// The papers' costs. G-DUR §5.3: 2PC 3 delays and Ω(r) messages, optimal atomic broadcast 3
/// and Ω(n), the best genuine fault-tolerant atomic multicast 6 and Ω(r²) (r: the replicas
/// involved, n: all). P-Store Table 1 (after its ref. [20]): genuine atomic multicast Δ to one
/// group and 2Δ to several, counting inter-group delays only, and O(x²) inter-group messages
/// (x: the destination sites). Neither states a cost for reliable multicast.
pub fn stated(primitive: &str, groups: usize) -> Stated {
    let (n, x) = (3 * groups, 3 * groups);
    match primitive {
        "broadcast" => Stated { gdur: format!("3Δ, Ω(n), n={n}"), pstore: "-".into() },
        "genuine" => Stated {
            gdur: format!("6Δ, Ω(r²), r²={}", x * x),
            pstore: format!("{}, O(x²), x²={}", if groups == 1 { "Δ" } else { "2Δ" }, x * x),
        },
        "commit" => Stated { gdur: format!("3Δ, Ω(r), r={n}"), pstore: "-".into() },
        _ => Stated { gdur: "-".into(), pstore: "-".into() },
    }
}

/// Draws the figure to `STEM.svg` and `STEM.png`: per net, latency to the last destination
/// (solid) and to the first (dashed) in Δ against the number of groups, one colour per
/// primitive; the papers' stated latencies as crosses (G-DUR §5.3) and triangles (P-Store
/// Table 1).
pub fn plot(rows: &[Row], stem: &Path) -> Result<[PathBuf; 2], String> {
    use ensemble_plot::{Chart, Key, Line, Marker, Panel, Series};
    let distinct = |field: fn(&Row) -> &String| {
        rows.iter().fold(Vec::<String>::new(), |mut v, r| {
            if !v.contains(field(r)) {
                v.push(field(r).clone());
            }
            v
        })
    };
    let (nets, primitives) = (distinct(|r| &r.net), distinct(|r| &r.primitive));
    // log2 of the group count on the x axis: 1, 2, 4, 8 evenly spaced.
    let x_of = |g: usize| (g as f64).log2();
    let panels = nets
        .iter()
        .map(|net| {
            let mine: Vec<&Row> = rows.iter().filter(|r| &r.net == net).collect();
            let delta = mine.first().map_or(0.0, |r| r.delta_ms);
            let mut series = Vec::new();
            for (colour, p) in primitives.iter().enumerate() {
                let points: Vec<&Row> = mine.iter().copied().filter(|r| &r.primitive == p).collect();
                if points.is_empty() {
                    continue;
                }
                let stated = |d: fn(&str, usize) -> Option<f64>| -> Vec<(f64, f64)> {
                    points.iter().filter_map(|r| d(p, r.groups).map(|d| (x_of(r.groups), d))).collect()
                };
                series.push(Series::line(p.as_str(), colour, points.iter().map(|r| (x_of(r.groups), r.last_delta)).collect()));
                series.push(Series {
                    label: None,
                    points: points.iter().map(|r| (x_of(r.groups), r.first_delta)).collect(),
                    colour,
                    line: Line::Dashed,
                    marker: Marker::None,
                });
                series.push(Series { label: None, ..Series::points("", colour, Marker::Cross, stated(gdur_delta)) });
                series.push(Series { label: None, ..Series::points("", colour, Marker::Triangle, stated(pstore_delta)) });
            }
            let key = |label: &str, line, marker| Key { label: label.into(), line, marker };
            Panel {
                title: format!("{net} (Δ = {delta} ms)"),
                x_label: "destination groups".into(),
                y_label: "latency (Δ)".into(),
                x_ticks: Some(GROUPS.iter().map(|&g| (x_of(g), g.to_string())).collect()),
                series,
                keys: vec![
                    key("solid: last destination", Line::Solid, Marker::None),
                    key("dashed: first destination", Line::Dashed, Marker::None),
                    key("×: G-DUR §5.3", Line::None, Marker::Cross),
                    key("▲: P-Store Table 1", Line::None, Marker::Triangle),
                ],
                ..Panel::default()
            }
        })
        .collect();
    let chart = Chart {
        caption: "xcast-latency: latency to the destination groups in Δ, fault-free simulations".into(),
        panels,
        panel_size: (480, 440),
    };
    ensemble_plot::render(&chart, stem)
}

/// G-DUR §5.3's latency, in delays, for the plot's crosses.
fn gdur_delta(primitive: &str, _groups: usize) -> Option<f64> {
    match primitive {
        "broadcast" | "commit" => Some(3.0),
        "genuine" => Some(6.0),
        _ => None,
    }
}

/// P-Store Table 1's latency (inter-group delays only), for the plot's triangles.
fn pstore_delta(primitive: &str, groups: usize) -> Option<f64> {
    (primitive == "genuine").then_some(if groups == 1 { 1.0 } else { 2.0 })
}

/// Why our latency and messages differ from the papers', for a primitive in a net: the hop
/// accounting of each component's documentation (`ensemble_group::multicast`) applied to the
/// net's placement. The numbers are the table's.
pub fn explain(net: &str, primitive: &str) -> &'static str {
    match (net, primitive) {
        ("wan-normal50", "reliable") => {
            "no paper states its cost; ours is 2Δ by design (the cast, then a peer's relay showing that a majority holds it). \
             Here member 0 shares site 0 with the caster: its relay reaches members 1 and 2 with the cast, so they deliver after Δ (first), \
             and member 0 waits Δ more for theirs (last). Messages O(n²): the caster's n copies, n(n-1) relays, acknowledgements, \
             and the 500 ms resend tick repeating a copy whose acknowledgement is still on its way (resent/cast)"
        }
        ("wan-normal50", "broadcast") => {
            "G-DUR's 3 holds at the sequencer's leader (first: cast Δ, AcceptDecide Δ, Accepted Δ); everyone else delivers Δ later (last): \
             OmniPaxos sends Accepted to the leader only, which then announces the decision and relays the entry, where G-DUR's optimal \
             broadcast has the acceptors tell every learner. Flat in k: the relay to other groups leaves with the decision. \
             Messages: every member of the sequencer group relays every entry to every process, which acknowledges it: O(|S|·n), not Ω(n)"
        }
        ("wan-normal50", "genuine") => {
            "one group is the fast path, a single consensus: 3Δ at the leader and 4Δ at the followers, as broadcast; neither paper's \
             structure (see wan-normal50-dc for P-Store's Δ). Several groups: cast Δ + Msg consensus 2Δ + leader-to-leader exchange + \
             Final consensus 2Δ = G-DUR's 6Δ (its ref. [45]); but every group elects member 2 (an unopposed OmniPaxos election goes to the \
             highest node id; `first at`), all at site 2, so the exchange is local and the leaders deliver at 5Δ; followers Δ later, \
             and the last of 3k processes waits for the slowest jitter. Messages: each member sends its proposal to every member of the \
             other groups, plus two consensus instances and their relays per group: a constant times P-Store's x². Nearly every \
             proposal goes out twice (resent/cast): a group answers Settled only to a proposal arriving after its Final is decided, \
             so the first copy, which arrives before, is answered only when the resend tick repeats it"
        }
        ("lan", "reliable") => {
            "every hop costs 0.1 ms plus 20 µs of handling at the receiver (the preset's CPU), 1.2Δ, so the 2 hops (cast, relay) read 2.4Δ; \
             with more groups a member handles more relays and acknowledgements per cast, queued on its 2 cores: the last delivery grows"
        }
        ("lan", "broadcast") => {
            "3 hops to the leader (G-DUR's 3) and 4 to everyone else, as on the WAN, each 1.2Δ with the 20 µs of handling; \
             no member shares the caster's machine, so no hop is free"
        }
        ("lan", "genuine") => {
            "one group: 3 hops to the leader, 4 to the followers, 1.2Δ each. Several: the 6 hops of G-DUR's count at the leaders and 7 at \
             the followers (no co-located leaders here: every machine is 0.1 ms from every other), plus the 20 µs per message of the \
             O(x²) proposals and Settled queued at every member, which grows with k. Proposals go out twice (resent/cast): \
             Settled answers only a proposal that arrives after the group's Final, which here is the resent copy"
        }
        ("wan-normal50-dc", "reliable") => {
            "Δ: the cast crosses the WAN once; the relay that makes delivery uniform stays inside the group's site. \
             The last destination waits for the slowest of k casts (jitter)"
        }
        ("wan-normal50-dc", "broadcast") => {
            "one group: Δ, the cast to the sequencer's site (its consensus is local). Several: 2Δ, the cast to the sequencer \
             group, then its relay to the other groups' sites: the price of a sequencer, where G-DUR's 3 counts consensus delays, local here"
        }
        ("wan-normal50-dc", "genuine") => {
            "P-Store's Δ and 2Δ, measured in its setting: the consensus rounds stay inside a site, and several groups add one exchange of \
             proposals between sites. The last destination waits for the slowest of k-1 proposals (jitter), so it creeps above 2Δ as k \
             grows. P-Store's O(x²) counts inter-group messages; ours counts every message, intra-group consensus and relays included"
        }
        ("wan-normal50", "streams") => {
            "P-DUR's per-partition streams (its §V: one Paxos broadcast per partition, in parallel; no delay stated): each destination \
             group orders the cast in its own log and delivers it there, with no exchange and no second consensus, so any k costs what \
             one group costs, 3Δ at the leaders and 4Δ at the followers (G-DUR's 3 per broadcast); the first of k leaders is the luckiest \
             jitter, so first falls with k. No order across groups, which P-DUR's stronger certification tolerates. Messages: members still \
             relay the cast to the other groups' members (what lets a caster crash after reaching one group): O(x²)"
        }
        ("lan", "streams") => {
            "one consensus per group in parallel: 3 hops to the leaders and 4 to the followers at any k, 1.2Δ each with the 20 µs of \
             handling; the relays to other groups' members queue a little at 8 groups"
        }
        ("wan-normal50-dc", "streams") => {
            "Δ at any k: the cast crosses the WAN once to each group, whose consensus is local, and no group waits for another; \
             the first and last destinations are the luckiest and unluckiest of k casts (jitter)"
        }
        ("wan-normal50", "commit") => {
            "G-DUR's 3 at the participants (PREPARE Δ, vote Δ, decision Δ); the coordinator decides at 2Δ (first), on the slowest \
             of r votes, which creeps up with r. No consensus and no groups: every replica votes, and a crashed one blocks the \
             transaction until it recovers (G-DUR §5.3). Messages: PREPARE, vote, decision and its acknowledgement per participant, \
             4r, G-DUR's Ω(r)"
        }
        ("lan", "commit") => {
            "2 hops to the coordinator's decision and 3 to the last participant, 1.2Δ each with the 20 µs of handling; the \
             coordinator handles r votes and r acknowledgements per transaction on 2 cores, which is what grows with r"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(name: &str) -> Net {
        nets().into_iter().find(|n| n.name == name).expect("a net of the figure")
    }

    #[test]
    fn a_point_is_a_function_of_its_seed() {
        let a = measure(&net("lan"), Kind::Genuine, 2, 5).unwrap();
        let b = measure(&net("lan"), Kind::Genuine, 2, 5).unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        assert!(a.casts >= CASTS as usize, "{a:?}");
    }

    /// What the explanations say, checked on the points they are about (virtual time).
    #[test]
    fn the_points_have_the_hop_counts_the_explanations_give() {
        // The sequencer's leader (member 2, site 2) at 3Δ, everybody else a Δ later.
        let ab = measure(&net("wan-normal50"), Kind::Broadcast, 2, 1).unwrap();
        assert_eq!(ab.first_member, Some(2));
        assert!((2.8..3.2).contains(&ab.first_delta) && (3.8..4.4).contains(&ab.last_delta), "{ab:?}");
        // Co-located leaders: the exchange between groups is free, 5Δ at the leaders.
        let gm = measure(&net("wan-normal50"), Kind::Genuine, 2, 1).unwrap();
        assert!((4.8..5.3).contains(&gm.first_delta), "{gm:?}");
        // P-Store's setting: Δ to one group, 2Δ to several.
        let one = measure(&net("wan-normal50-dc"), Kind::Genuine, 1, 1).unwrap();
        let two = measure(&net("wan-normal50-dc"), Kind::Genuine, 2, 1).unwrap();
        assert!((0.9..1.3).contains(&one.last_delta), "{one:?}");
        assert!((1.8..2.4).contains(&two.first_delta), "{two:?}");
        // Two-phase commit: the coordinator at 2Δ, the participants at G-DUR's 3Δ, 4 messages each.
        let tpc = measure_commit(&net("wan-normal50"), 1, 1).unwrap();
        assert!((1.9..2.4).contains(&tpc.first_delta) && (2.9..3.6).contains(&tpc.last_delta), "{tpc:?}");
        assert_eq!(tpc.messages_per_cast, 12.0);
    }

    #[test]
    fn the_plot_has_a_panel_per_net() {
        let rows: Vec<Row> = ["lan", "wan-normal50-dc"]
            .iter()
            .flat_map(|n| [1, 2].map(|g| measure(&net(n), Kind::Reliable, g, 1).unwrap()))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let [svg, png] = plot(&rows, &dir.path().join("x")).unwrap();
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("xcast-latency: latency") && svg.contains("lan (Δ = 0.1 ms)") && svg.contains("wan-normal50-dc (Δ = 50 ms)"));
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
    }
}
