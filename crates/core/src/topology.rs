//! Where things are and what they cost: sites, one-way delays between them, and each instance's
//! CPU. The simulator draws every message delay and service time from here; the real runtime uses
//! the same delays to emulate a WAN on loopback.

use rand::Rng;
use rand_distr::{Distribution, Exp, Normal};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub name: String,
    /// Site names, in the order instances are added to them (instance `i` sits at site
    /// `i % sites.len()`).
    pub sites: Vec<String>,
    /// Mean one-way delay in milliseconds, `one_way_ms[from][to]`; the diagonal is the delay
    /// between two machines of the same site.
    pub one_way_ms: Vec<Vec<f64>>,
    /// How a message's delay varies around the mean.
    #[serde(default)]
    pub jitter: Jitter,
    /// Bandwidth of every inter-site link in bits per second; `None` means unlimited.
    #[serde(default)]
    pub bandwidth_bps: Option<f64>,
    /// The machine every instance runs on.
    #[serde(default)]
    pub cpu: Cpu,
    /// One-way delay in milliseconds between two processes of one machine, and of a message a
    /// process sends itself (a loopback hop, not the network).
    #[serde(default = "default_machine_local_ms")]
    pub machine_local_ms: f64,
}

fn default_machine_local_ms() -> f64 {
    0.01
}

/// The named distribution a message delay is drawn from. The mean is the link's `one_way_ms`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Jitter {
    /// Every message takes exactly the mean.
    #[default]
    None,
    /// Normal around the mean, truncated at zero.
    Normal { sd_ms: f64 },
    /// Uniform in `[mean - half_width, mean + half_width]`, truncated at zero.
    Uniform { half_width_ms: f64 },
    /// The mean plus an exponentially distributed extra delay with this mean.
    Exponential { mean_extra_ms: f64 },
}

/// An instance's machine: `cores` run work in parallel; everything else queues (FIFO).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    pub cores: u32,
    /// Service time of handling one message or request (protocol code, not storage).
    pub message_us: f64,
    /// Service time of one transaction, unless the experiment names one for its type.
    pub execute_us: f64,
    /// Service time of applying one row change of a state update.
    pub apply_change_us: f64,
    /// Per-transaction-type service times in microseconds, overriding `execute_us`.
    #[serde(default)]
    pub execute_us_by_txn: BTreeMap<String, f64>,
}

impl Default for Cpu {
    fn default() -> Self {
        // Two cores as in the papers' EC2 T2 Medium machines; a short OLTP transaction.
        Cpu { cores: 2, message_us: 20.0, execute_us: 1_000.0, apply_change_us: 50.0, execute_us_by_txn: BTreeMap::new() }
    }
}

impl Cpu {
    pub fn execute_time(&self, txn: &str) -> Duration {
        micros(*self.execute_us_by_txn.get(txn).unwrap_or(&self.execute_us))
    }
    pub fn apply_time(&self, changes: usize) -> Duration {
        micros(self.apply_change_us * changes as f64)
    }
    pub fn message_time(&self) -> Duration {
        micros(self.message_us)
    }
}

fn micros(us: f64) -> Duration {
    Duration::from_nanos((us.max(0.0) * 1_000.0).round() as u64)
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("unknown topology preset `{0}` (known: lan, wan5, wan-normal50)")]
    UnknownPreset(String),
    #[error("topology file {path}: {message}")]
    File { path: String, message: String },
    #[error("topology `{name}`: {message}")]
    Invalid { name: String, message: String },
}

impl Topology {
    /// One data centre: 0.1 ms between machines.
    pub fn lan() -> Topology {
        Topology {
            name: "lan".into(),
            sites: vec!["dc".into()],
            one_way_ms: vec![vec![0.1]],
            jitter: Jitter::None,
            bandwidth_bps: None,
            cpu: Cpu::default(),
            machine_local_ms: default_machine_local_ms(),
        }
    }

    /// The five sites of the Gyro paper's Table II (Eliá's Table 2) in the order the papers add
    /// them: Germany, Japan, US east, Brazil, Australia. The tables give round-trip times, so the
    /// one-way delay is half; the intra-site round trip is about 20 ms.
    pub fn wan5() -> Topology {
        // Round-trip times in ms, upper triangle of Table II; the matrix is symmetric.
        const RTT: [[f64; 5]; 5] = [
            [20.0, 253.0, 92.0, 193.0, 314.0],
            [253.0, 20.0, 153.0, 282.0, 188.0],
            [92.0, 153.0, 20.0, 145.0, 229.0],
            [193.0, 282.0, 145.0, 20.0, 322.0],
            [314.0, 188.0, 229.0, 322.0, 20.0],
        ];
        Topology {
            name: "wan5".into(),
            sites: ["germany", "japan", "us-east", "brazil", "australia"].map(String::from).to_vec(),
            one_way_ms: RTT.iter().map(|row| row.iter().map(|rtt| rtt / 2.0).collect()).collect(),
            jitter: Jitter::None,
            bandwidth_bps: None,
            cpu: Cpu::default(),
            machine_local_ms: default_machine_local_ms(),
        }
    }

    /// The P-Store evaluation's emulated WAN: between any two sites the one-way delay is normal
    /// with mean 50 ms and standard deviation 5 ms; inside a site it is 0.05 ms.
    pub fn wan_normal50(sites: usize) -> Topology {
        let one_way_ms =
            (0..sites).map(|a| (0..sites).map(|b| if a == b { 0.05 } else { 50.0 }).collect()).collect();
        Topology {
            name: "wan-normal50".into(),
            sites: (0..sites).map(|s| format!("site{s}")).collect(),
            one_way_ms,
            jitter: Jitter::Normal { sd_ms: 5.0 },
            bandwidth_bps: None,
            cpu: Cpu::default(),
            machine_local_ms: default_machine_local_ms(),
        }
    }

    pub fn preset(name: &str) -> Result<Topology, TopologyError> {
        match name {
            "lan" => Ok(Topology::lan()),
            "wan5" => Ok(Topology::wan5()),
            "wan-normal50" => Ok(Topology::wan_normal50(8)),
            other => Err(TopologyError::UnknownPreset(other.into())),
        }
    }

    /// A preset name, or the path of a TOML file holding a topology.
    pub fn load(name_or_path: &str) -> Result<Topology, TopologyError> {
        if std::path::Path::new(name_or_path).is_file() {
            let text = std::fs::read_to_string(name_or_path)
                .map_err(|e| TopologyError::File { path: name_or_path.into(), message: e.to_string() })?;
            let t: Topology = toml::from_str(&text)
                .map_err(|e| TopologyError::File { path: name_or_path.into(), message: e.to_string() })?;
            t.validate()?;
            Ok(t)
        } else {
            Topology::preset(name_or_path)
        }
    }

    pub fn validate(&self) -> Result<(), TopologyError> {
        let bad = |message: String| TopologyError::Invalid { name: self.name.clone(), message };
        if self.sites.is_empty() {
            return Err(bad("no sites".into()));
        }
        if self.one_way_ms.len() != self.sites.len() || self.one_way_ms.iter().any(|r| r.len() != self.sites.len()) {
            return Err(bad(format!("one_way_ms must be a {n}x{n} matrix", n = self.sites.len())));
        }
        if self.one_way_ms.iter().flatten().any(|d| !d.is_finite() || *d < 0.0) {
            return Err(bad("delays must be finite and non-negative".into()));
        }
        if !self.machine_local_ms.is_finite() || self.machine_local_ms < 0.0 {
            return Err(bad("machine_local_ms must be finite and non-negative".into()));
        }
        if self.cpu.cores == 0 {
            return Err(bad("cpu.cores must be at least 1".into()));
        }
        Ok(())
    }

    /// The site instance `instance` sits at when `instances` instances are deployed.
    pub fn instance_site(&self, instance: u32) -> usize {
        instance as usize % self.sites.len()
    }

    /// The instance closest to `site` among the first `instances` (the papers direct each client
    /// to its closest server). Ties go to the lower instance number.
    pub fn closest_instance(&self, site: usize, instances: u32) -> u32 {
        (0..instances)
            .min_by(|a, b| {
                let da = self.one_way_ms[site][self.instance_site(*a)];
                let db = self.one_way_ms[site][self.instance_site(*b)];
                da.total_cmp(&db).then(a.cmp(b))
            })
            .expect("at least one instance")
    }

    pub fn machine_local_delay(&self) -> Duration {
        Duration::from_nanos((self.machine_local_ms * 1e6).round() as u64)
    }

    pub fn mean_delay(&self, from_site: usize, to_site: usize) -> Duration {
        Duration::from_nanos((self.one_way_ms[from_site][to_site] * 1e6).round() as u64)
    }

    /// Draws the delay of one message of `bytes` bytes from `from_site` to `to_site`.
    pub fn sample_delay<R: Rng + ?Sized>(&self, from_site: usize, to_site: usize, bytes: usize, rng: &mut R) -> Duration {
        let mean = self.one_way_ms[from_site][to_site];
        let ms = match &self.jitter {
            Jitter::None => mean,
            Jitter::Normal { sd_ms } => match Normal::new(mean, *sd_ms) {
                Ok(n) => n.sample(rng),
                Err(_) => mean,
            },
            Jitter::Uniform { half_width_ms } if *half_width_ms > 0.0 => {
                rng.random_range(mean - half_width_ms..=mean + half_width_ms)
            }
            Jitter::Uniform { .. } => mean,
            Jitter::Exponential { mean_extra_ms } => match Exp::new(1.0 / mean_extra_ms) {
                Ok(e) => mean + e.sample(rng),
                Err(_) => mean,
            },
        };
        let transfer_ms = match self.bandwidth_bps {
            Some(bps) if from_site != to_site && bps > 0.0 => bytes as f64 * 8.0 / bps * 1e3,
            _ => 0.0,
        };
        Duration::from_nanos(((ms.max(0.0) + transfer_ms) * 1e6).round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn wan5_is_half_the_papers_round_trips() {
        let t = Topology::wan5();
        t.validate().unwrap();
        assert_eq!(t.mean_delay(0, 1), Duration::from_micros(126_500)); // Germany-Japan 253 ms RTT
        assert_eq!(t.mean_delay(3, 4), Duration::from_micros(161_000)); // Brazil-Australia 322 ms RTT
        for a in 0..5 {
            for b in 0..5 {
                assert_eq!(t.one_way_ms[a][b], t.one_way_ms[b][a]);
            }
        }
    }

    #[test]
    fn closest_instance_prefers_own_site() {
        let t = Topology::wan5();
        // Three instances: Germany, Japan, US east. Brazil's clients go to US east, Australia's to Japan.
        assert_eq!(t.closest_instance(3, 3), 2);
        assert_eq!(t.closest_instance(4, 3), 1);
        assert_eq!(t.closest_instance(0, 1), 0);
    }

    #[test]
    fn normal_jitter_has_the_requested_spread() {
        let t = Topology::wan_normal50(3);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| t.sample_delay(0, 1, 100, &mut rng).as_secs_f64() * 1e3).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!((mean - 50.0).abs() < 0.2, "mean {mean}");
        assert!((sd - 5.0).abs() < 0.2, "sd {sd}");
    }

    #[test]
    fn topology_file_round_trips_and_rejects_bad_matrix() {
        let t = Topology::wan5();
        let text = toml::to_string(&t).unwrap();
        let back: Topology = toml::from_str(&text).unwrap();
        assert_eq!(back, t);
        let mut bad = t.clone();
        bad.one_way_ms.pop();
        assert!(bad.validate().unwrap_err().to_string().contains("5x5"));
    }
}
