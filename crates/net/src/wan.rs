//! WAN emulation on loopback: every message or reply between different machines of the
//! deployment (and every request from a client) is held back by a delay drawn from the topology,
//! as the simulator would delay it, so that a real run on one machine sees the same latencies as
//! the simulated deployment. Hops inside one machine are real and get no emulated delay (see
//! [`crate::host`]).

use ensemble_core::topology::Topology;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

/// Draws per-frame delays. One per OS process, owned by the single thread that sends (the host's
/// protocol loop, the client driver's thread), so a seeded run draws the same sequence of delays
/// for the same sequence of sends.
#[derive(Debug)]
pub struct WanEmulator {
    topology: Topology,
    rng: ChaCha8Rng,
}

impl WanEmulator {
    pub fn new(topology: Topology, seed: u64) -> WanEmulator {
        WanEmulator { topology, rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    pub fn sites(&self) -> usize {
        self.topology.sites.len()
    }

    /// The delay of one frame of `bytes` bytes. Sites out of range (which configuration
    /// validation rules out) get no delay rather than a panic.
    pub fn delay(&mut self, from_site: usize, to_site: usize, bytes: usize) -> Duration {
        let n = self.sites();
        if from_site >= n || to_site >= n {
            return Duration::ZERO;
        }
        self.topology.sample_delay(from_site, to_site, bytes, &mut self.rng)
    }
}

/// Keeps one connection FIFO under jittered delays: a frame is never due before the frame sent
/// ahead of it on the same connection, as on a real TCP link.
#[derive(Debug, Default)]
pub struct Pacer {
    last_due: Option<Instant>,
}

impl Pacer {
    /// When a frame handed over at `now` with drawn delay `delay` may be written:
    /// `max(previous due time, now + delay)`.
    pub fn due(&mut self, now: Instant, delay: Duration) -> Instant {
        let due = match self.last_due {
            Some(last) => last.max(now + delay),
            None => now + delay,
        };
        self.last_due = Some(due);
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ensemble_core::topology::Jitter;

    #[test]
    fn pacer_never_lets_a_frame_overtake_the_one_before() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        let a = p.due(t0, Duration::from_millis(50));
        let b = p.due(t0 + Duration::from_millis(1), Duration::from_millis(10));
        let c = p.due(t0 + Duration::from_millis(100), Duration::from_millis(10));
        assert_eq!(a, t0 + Duration::from_millis(50));
        assert_eq!(b, a, "a shorter delay waits for the frame ahead");
        assert_eq!(c, t0 + Duration::from_millis(110));
    }

    #[test]
    fn delays_come_from_the_topology_and_are_reproducible() {
        let mut t = Topology::wan_normal50(2);
        t.jitter = Jitter::Uniform { half_width_ms: 5.0 };
        let draw = |seed| {
            let mut w = WanEmulator::new(t.clone(), seed);
            (0..20).map(|_| w.delay(0, 1, 100)).collect::<Vec<_>>()
        };
        let xs = draw(3);
        assert_eq!(xs, draw(3));
        assert!(xs.iter().all(|d| *d >= Duration::from_millis(45) && *d <= Duration::from_millis(55)));
        let mut w = WanEmulator::new(t, 1);
        assert_eq!(w.delay(0, 9, 100), Duration::ZERO);
    }
}
