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
    /// The jitter applies to messages between sites only (a WAN emulator on the inter-site
    /// links, as P-Store's); messages within a site take the mean delay.
    #[serde(default)]
    pub jitter_between_sites_only: bool,
    /// Bandwidth of each site's outgoing inter-site link in bits per second (a site's traffic
    /// to all other sites shares it, as traffic shaped on a group's interface does): a message
    /// waits for the ones sent before it, then takes its size over this to go out. `None`
    /// means unlimited.
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
    /// Key-value protocols (the DUR family): reading one version from the store, for a
    /// transaction's own read or to serve a remote one.
    #[serde(default = "default_read_us")]
    pub read_us: f64,
    /// Key-value protocols: certifying one read key (comparing the version read with the
    /// latest). Installing one written version costs `apply_change_us`.
    #[serde(default = "default_certify_key_us")]
    pub certify_key_us: f64,
}

fn default_read_us() -> f64 {
    20.0
}

fn default_certify_key_us() -> f64 {
    5.0
}

impl Default for Cpu {
    fn default() -> Self {
        // Two cores as in the papers' EC2 T2 Medium machines; a short OLTP transaction.
        Cpu {
            cores: 2,
            message_us: 20.0,
            execute_us: 1_000.0,
            apply_change_us: 50.0,
            execute_us_by_txn: BTreeMap::new(),
            read_us: default_read_us(),
            certify_key_us: default_certify_key_us(),
        }
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
    pub fn read_time(&self) -> Duration {
        micros(self.read_us)
    }
    pub fn certify_time(&self, keys: usize) -> Duration {
        micros(self.certify_key_us * keys as f64)
    }
}

fn micros(us: f64) -> Duration {
    Duration::from_nanos((us.max(0.0) * 1_000.0).round() as u64)
}

/// The longest time a topology may give anything (a delay, a service time): an hour, in ms.
pub const MAX_MS: f64 = 3_600_000.0;
/// The most cores a machine may have; far more than any machine the experiments model, so a
/// larger count is a typo.
pub const MAX_CORES: u32 = 1024;

/// `value` of `field` is finite and in `min..=max`; the error says which bound it misses.
fn in_range(field: &str, value: f64, min: f64, max: f64) -> Result<(), String> {
    // `Display` writes 1e300 with all its 301 digits.
    let value = Shown(value);
    if !value.0.is_finite() {
        Err(format!("{field} = {value} is not a finite number"))
    } else if value.0 < min {
        Err(format!("{field} = {value} must be >= {}", Shown(min)))
    } else if value.0 > max {
        Err(format!("{field} = {value} must be <= {}", Shown(max)))
    } else {
        Ok(())
    }
}

/// A number as a person wrote it: `-1000`, `0.5`, `1e300`.
struct Shown(f64);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = self.0.abs();
        if a.is_finite() && a != 0.0 && !(1e-6..1e16).contains(&a) {
            write!(f, "{:e}", self.0)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("unknown topology preset `{0}` (known: lan, wan5, wan-normal50, p-store)")]
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
            jitter_between_sites_only: false,
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
            jitter_between_sites_only: false,
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
            jitter_between_sites_only: false,
            bandwidth_bps: None,
            cpu: Cpu::default(),
            machine_local_ms: default_machine_local_ms(),
        }
    }

    /// P-Store's cluster (its §7.1), one site per group (the paper's 2 to 8 groups): delays as
    /// [`Topology::wan_normal50`] but with the jitter on the inter-site links only (the paper
    /// emulates its WAN between the groups' clusters), 10 Mb/s between sites (the paper's
    /// traffic shaping, "1.25Mbps (10 Mbps)"), and its machines' two dual-core Opterons: 4
    /// cores. The CPU costs are our choice, as the paper states none, for a Java server over
    /// BerkeleyDB on 2006 hardware: 100 µs to handle a message, 150 µs to read a version, 50
    /// µs to certify a read key, 250 µs to install a version. Chosen so that A_full is
    /// CPU-bound at 4 groups, as the paper's was, rather than bound by the 10 Mb/s links, and
    /// so that A_ge\* at 0 % global comes near the paper's 6.3 times A_full; the other points
    /// of the figures follow from them (RESULTS.md, "The model"). The costs of an earlier
    /// version, 20, 30, 5 and 30 µs, left most peaks of A_ge\* far from CPU-bound.
    pub fn pstore(sites: usize) -> Topology {
        let mut t = Topology::wan_normal50(sites);
        t.name = "p-store".into();
        t.bandwidth_bps = Some(10e6);
        t.jitter_between_sites_only = true;
        t.cpu = Cpu { cores: 4, message_us: 100.0, read_us: 150.0, certify_key_us: 50.0, apply_change_us: 250.0, ..Cpu::default() };
        t
    }

    pub fn preset(name: &str) -> Result<Topology, TopologyError> {
        match name {
            "lan" => Ok(Topology::lan()),
            "wan5" => Ok(Topology::wan5()),
            "wan-normal50" => Ok(Topology::wan_normal50(8)),
            "p-store" => Ok(Topology::pstore(8)),
            other => Err(TopologyError::UnknownPreset(other.into())),
        }
    }

    /// A preset name, or the path of a TOML file holding a topology. A name that looks like a
    /// path (it contains a `/` or ends in `.toml`) is a file, so that a mistyped file name is
    /// reported as a missing file, not as an unknown preset.
    pub fn load(name_or_path: &str) -> Result<Topology, TopologyError> {
        let path = std::path::Path::new(name_or_path);
        let file_err = |message: String| TopologyError::File { path: name_or_path.into(), message };
        if path.is_file() {
            let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
            let t: Topology = toml::from_str(&text).map_err(|e| file_err(e.to_string()))?;
            t.validate().map_err(|e| match e {
                TopologyError::Invalid { message, .. } => file_err(message),
                other => other,
            })?;
            Ok(t)
        } else if name_or_path.contains('/') || name_or_path.contains(std::path::MAIN_SEPARATOR) || name_or_path.ends_with(".toml") {
            Err(file_err(if path.exists() { "not a regular file".into() } else { "no such file".into() }))
        } else {
            Topology::preset(name_or_path)
        }
    }

    /// Checks every field a topology file can set. Times are bounded by an hour: nothing real
    /// takes longer, and the simulator's virtual clock (nanoseconds in a `u64`) must not
    /// overflow when it adds them up.
    pub fn validate(&self) -> Result<(), TopologyError> {
        self.check().map_err(|message| TopologyError::Invalid { name: self.name.clone(), message })
    }

    fn check(&self) -> Result<(), String> {
        let n = self.sites.len();
        if n == 0 {
            return Err("sites is empty: at least one site is needed".into());
        }
        if let Some((i, s)) = self.sites.iter().enumerate().find(|(i, s)| self.sites[..*i].contains(s)) {
            return Err(format!("sites[{i}] = \"{s}\" names a site twice"));
        }
        if self.one_way_ms.len() != n {
            return Err(format!("one_way_ms has {} rows for {n} sites: it must be a {n}x{n} matrix", self.one_way_ms.len()));
        }
        for (from, row) in self.one_way_ms.iter().enumerate() {
            if row.len() != n {
                return Err(format!("one_way_ms[{from}] has {} entries for {n} sites: it must be a {n}x{n} matrix", row.len()));
            }
            for (to, d) in row.iter().enumerate() {
                in_range(&format!("one_way_ms[{from}][{to}]"), *d, 0.0, MAX_MS)?;
            }
        }
        match self.jitter {
            Jitter::None => {}
            Jitter::Normal { sd_ms } => in_range("jitter.sd_ms", sd_ms, 0.0, MAX_MS)?,
            Jitter::Uniform { half_width_ms } => in_range("jitter.half_width_ms", half_width_ms, 0.0, MAX_MS)?,
            Jitter::Exponential { mean_extra_ms } => in_range("jitter.mean_extra_ms", mean_extra_ms, 0.0, MAX_MS)?,
        }
        if let Some(bps) = self.bandwidth_bps {
            // Below a bit per second one message's transfer time leaves the virtual clock's range.
            in_range("bandwidth_bps", bps, 1.0, f64::MAX)?;
        }
        in_range("machine_local_ms", self.machine_local_ms, 0.0, MAX_MS)?;
        let cpu = &self.cpu;
        if !(1..=MAX_CORES).contains(&cpu.cores) {
            return Err(format!("cpu.cores = {} must be between 1 and {MAX_CORES}", cpu.cores));
        }
        in_range("cpu.message_us", cpu.message_us, 0.0, MAX_MS * 1e3)?;
        in_range("cpu.execute_us", cpu.execute_us, 0.0, MAX_MS * 1e3)?;
        in_range("cpu.apply_change_us", cpu.apply_change_us, 0.0, MAX_MS * 1e3)?;
        in_range("cpu.read_us", cpu.read_us, 0.0, MAX_MS * 1e3)?;
        in_range("cpu.certify_key_us", cpu.certify_key_us, 0.0, MAX_MS * 1e3)?;
        for (txn, us) in &cpu.execute_us_by_txn {
            in_range(&format!("cpu.execute_us_by_txn.{txn}"), *us, 0.0, MAX_MS * 1e3)?;
        }
        Ok(())
    }

    /// The site instance `instance` sits at when `instances` instances are deployed.
    pub fn instance_site(&self, instance: u32) -> usize {
        instance as usize % self.sites.len()
    }

    /// The instance that serves the `nth` client sitting at `site`: one of the instances closest
    /// to it among the first `instances` (the papers direct each client to its closest server),
    /// and where several are as close (every instance of a one-site LAN, or two instances at one
    /// site) the site's clients take them in turn. Gyro's LAN testbed spreads its clients over
    /// all its servers; sending them all to the lowest-numbered one would leave the others only
    /// state updates (or 2PC branches) to apply, and adding instances would add no server to
    /// serve requests.
    pub fn instance_for_client(&self, site: usize, instances: u32, nth: u32) -> u32 {
        let delay = |i: u32| self.one_way_ms[site][self.instance_site(i)];
        let nearest = (0..instances).map(delay).min_by(f64::total_cmp).expect("at least one instance");
        let closest: Vec<u32> = (0..instances).filter(|i| delay(*i) == nearest).collect();
        closest[nth as usize % closest.len()]
    }

    pub fn machine_local_delay(&self) -> Duration {
        Duration::from_nanos((self.machine_local_ms * 1e6).round() as u64)
    }

    pub fn mean_delay(&self, from_site: usize, to_site: usize) -> Duration {
        Duration::from_nanos((self.one_way_ms[from_site][to_site] * 1e6).round() as u64)
    }

    /// How long `bytes` take to go out on an inter-site link (zero within a site or without a
    /// bandwidth).
    pub fn transfer_time(&self, from_site: usize, to_site: usize, bytes: usize) -> Duration {
        match self.bandwidth_bps {
            Some(bps) if from_site != to_site && bps > 0.0 => Duration::from_nanos((bytes as f64 * 8.0 / bps * 1e9).round() as u64),
            _ => Duration::ZERO,
        }
    }

    /// Draws the delay of one message of `bytes` bytes from `from_site` to `to_site`, on an
    /// idle link (the simulator adds the wait behind earlier messages).
    pub fn sample_delay<R: Rng + ?Sized>(&self, from_site: usize, to_site: usize, bytes: usize, rng: &mut R) -> Duration {
        let mean = self.one_way_ms[from_site][to_site];
        let ms = match &self.jitter {
            Jitter::None => mean,
            _ if self.jitter_between_sites_only && from_site == to_site => mean,
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
    fn p_stores_jitter_is_on_the_inter_site_links_only() {
        let t = Topology::pstore(4);
        t.validate().unwrap();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let within: Vec<Duration> = (0..50).map(|_| t.sample_delay(2, 2, 100, &mut rng)).collect();
        assert!(within.iter().all(|d| *d == Duration::from_micros(50)), "a site's own messages take the mean: {within:?}");
        let between: Vec<Duration> = (0..50).map(|_| t.sample_delay(0, 1, 0, &mut rng)).collect();
        assert!(between.iter().any(|d| *d != between[0]), "inter-site delays vary");
        let mean = between.iter().sum::<Duration>() / 50;
        assert!(mean > Duration::from_millis(45) && mean < Duration::from_millis(55), "{mean:?}");
        // 1 KB over the 10 Mb/s link adds 0.8 ms.
        let mut t = t;
        t.jitter = Jitter::None;
        assert_eq!(t.sample_delay(0, 1, 1000, &mut rng), Duration::from_micros(50_800));
    }

    #[test]
    fn a_client_goes_to_its_closest_instance() {
        let t = Topology::wan5();
        // Three instances: Germany, Japan, US east. Brazil's clients go to US east, Australia's
        // to Japan, whichever client they are.
        for nth in 0..4 {
            assert_eq!(t.instance_for_client(3, 3, nth), 2);
            assert_eq!(t.instance_for_client(4, 3, nth), 1);
            assert_eq!(t.instance_for_client(0, 1, nth), 0);
        }
    }

    #[test]
    fn clients_take_equally_close_instances_in_turn() {
        // A LAN: every instance as close as any other.
        let lan = Topology::lan();
        let homes: Vec<u32> = (0..7).map(|nth| lan.instance_for_client(0, 3, nth)).collect();
        assert_eq!(homes, [0, 1, 2, 0, 1, 2, 0]);
        // Seven instances over wan5's five sites: Germany holds instances 0 and 5, and its
        // clients alternate between them; Brazil holds instance 3 alone.
        let wan = Topology::wan5();
        assert_eq!((0..4).map(|nth| wan.instance_for_client(0, 7, nth)).collect::<Vec<_>>(), [0, 5, 0, 5]);
        assert_eq!((0..3).map(|nth| wan.instance_for_client(3, 7, nth)).collect::<Vec<_>>(), [3, 3, 3]);
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
    #[test]
    fn validate_rejects_each_bad_field() {
        type Spoil = fn(&mut Topology);
        let cases: &[(Spoil, &str)] = &[
            (|t| t.sites.clear(), "sites is empty"),
            (|t| t.sites[1] = t.sites[0].clone(), "sites[1] = \"germany\" names a site twice"),
            (|t| t.one_way_ms.truncate(4), "one_way_ms has 4 rows for 5 sites: it must be a 5x5 matrix"),
            (|t| t.one_way_ms[2].push(1.0), "one_way_ms[2] has 6 entries for 5 sites"),
            (|t| t.one_way_ms[0][1] = -1.0, "one_way_ms[0][1] = -1 must be >= 0"),
            (|t| t.one_way_ms[3][3] = f64::NAN, "one_way_ms[3][3] = NaN is not a finite number"),
            (|t| t.one_way_ms[4][0] = f64::INFINITY, "one_way_ms[4][0] = inf is not a finite number"),
            (|t| t.one_way_ms[1][2] = 1e300, "one_way_ms[1][2] = 1e300 must be <= 3600000"),
            (|t| t.jitter = Jitter::Normal { sd_ms: -5.0 }, "jitter.sd_ms = -5 must be >= 0"),
            (|t| t.jitter = Jitter::Uniform { half_width_ms: f64::NAN }, "jitter.half_width_ms = NaN is not a finite number"),
            (|t| t.jitter = Jitter::Exponential { mean_extra_ms: -1.0 }, "jitter.mean_extra_ms = -1 must be >= 0"),
            (|t| t.bandwidth_bps = Some(0.0), "bandwidth_bps = 0 must be >= 1"),
            (|t| t.bandwidth_bps = Some(f64::NAN), "bandwidth_bps = NaN is not a finite number"),
            (|t| t.machine_local_ms = -0.5, "machine_local_ms = -0.5 must be >= 0"),
            (|t| t.cpu.cores = 0, "cpu.cores = 0 must be between 1 and 1024"),
            (|t| t.cpu.cores = 1025, "cpu.cores = 1025 must be between 1 and 1024"),
            (|t| t.cpu.message_us = f64::NEG_INFINITY, "cpu.message_us = -inf is not a finite number"),
            (|t| t.cpu.execute_us = -1000.0, "cpu.execute_us = -1000 must be >= 0"),
            (|t| t.cpu.execute_us = 4e9, "cpu.execute_us = 4000000000 must be <= 3600000000"),
            (|t| t.cpu.apply_change_us = -0.1, "cpu.apply_change_us = -0.1 must be >= 0"),
            (|t| _ = t.cpu.execute_us_by_txn.insert("order".into(), f64::NAN), "cpu.execute_us_by_txn.order = NaN is not a finite number"),
        ];
        for (spoil, expected) in cases {
            let mut t = Topology::wan5();
            spoil(&mut t);
            let err = t.validate().expect_err(expected).to_string();
            assert!(err.contains(expected), "expected `{expected}` in `{err}`");
            assert!(err.starts_with("topology `wan5`: "), "{err}");
        }
        for ok in [Topology::lan(), Topology::wan5(), Topology::wan_normal50(8)] {
            ok.validate().unwrap();
        }
    }

    #[test]
    fn load_names_the_file_and_tells_a_missing_file_from_an_unknown_preset() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("ensemble-topology-test-{}.toml", std::process::id()));
        let mut t = Topology::lan();
        t.cpu.execute_us = -1000.0;
        std::fs::write(&path, toml::to_string(&t).unwrap()).unwrap();
        let shown = path.display().to_string();
        let err = Topology::load(&shown).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(err, format!("topology file {shown}: cpu.execute_us = -1000 must be >= 0"));

        let missing = dir.join("ensemble-no-such-topology.toml").display().to_string();
        assert_eq!(Topology::load(&missing).unwrap_err().to_string(), format!("topology file {missing}: no such file"));
        assert_eq!(Topology::load("missing.toml").unwrap_err().to_string(), "topology file missing.toml: no such file");
        let a_dir = dir.display().to_string();
        assert!(Topology::load(&a_dir).unwrap_err().to_string().contains("not a regular file"));
        assert!(Topology::load("wan6").unwrap_err().to_string().contains("unknown topology preset `wan6`"));
        assert_eq!(Topology::load("wan5").unwrap(), Topology::wan5());
    }
}
