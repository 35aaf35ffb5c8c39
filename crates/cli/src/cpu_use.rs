//! Where the CPU time of a measurement window went, by who spent it, read from Linux's `/proc`
//! at the window's start and end: for the overhead figure's question of where the time goes.
//! With every core of the machine busy (four closed-loop clients, their server and a node on two
//! cores), a closed loop runs as fast as the CPU time an operation costs, so the CPU time per
//! operation of each component, and how often its threads were switched out, is what a path's
//! added latency is made of. What of it the kernel spent for the component's threads (their system
//! time) is kept apart: a hop over loopback TCP costs mostly there, in the system calls and in
//! the delivery to the receiving socket that a send runs on the sender's account.
//!
//! The components are told apart by process: the server's processes (PostgreSQL's backends and
//! its background processes; MariaDB's one process), this process (the direct path's client
//! threads with their database client library; or the node path's client driver), a node (a
//! child of this process): its storage workers (`ensemble-storage-*` threads) and the rest of
//! its threads (its protocol loop with all its socket i/o, its timer thread), or a host
//! embedded in this process (its loop's thread and its storage workers, read thread by thread
//! and taken out of this process's whole), and everything
//! else on the machine (the kernel's threads among them, the disk's flushes). This
//! process is read as a whole (`/proc/self/stat` and `getrusage` keep what its exited threads
//! spent); other processes thread by thread, so a process that exits inside the window loses its
//! time (none of the measured ones do: the windows end before connections close).

use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    Server,
    Clients,
    NodeLoop,
    NodeStorage,
    Other,
}

impl Component {
    pub const ALL: [Component; 5] = [Component::Server, Component::Clients, Component::NodeLoop, Component::NodeStorage, Component::Other];

    pub fn name(self) -> &'static str {
        match self {
            Component::Server => "server",
            Component::Clients => "clients",
            Component::NodeLoop => "node loop",
            Component::NodeStorage => "node storage",
            Component::Other => "other",
        }
    }
}

/// One thread's (or, for this process, the whole process's) counters.
#[derive(Clone, Copy, Default)]
struct Counters {
    /// User and system time, in clock ticks.
    ticks: u64,
    /// System time alone: the kernel working for the task (its system calls, the network stack
    /// they run, its page faults).
    kernel_ticks: u64,
    voluntary: u64,
    involuntary: u64,
}

/// Every task's counters at one instant, and the machine's.
pub struct Snapshot {
    taken: Instant,
    tasks: BTreeMap<(u32, u32), (Component, Counters)>,
    /// The machine's ticks over all cores, busy and idle, and idle alone (`/proc/stat`).
    machine_ticks: u64,
    idle_ticks: u64,
}

/// CPU time per operation, in microseconds, and switches per operation, by component, summed
/// over windows.
#[derive(Clone, Default)]
pub struct CpuUse {
    pub ops: u64,
    /// What each component spent.
    spent: BTreeMap<Component, Counters>,
    idle_ticks: u64,
    machine_ticks: u64,
    /// Wall seconds of the windows, times the cores.
    core_seconds: f64,
}

fn cores() -> f64 {
    std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0)
}

/// The fields after a task's `(comm)` in its `stat` file, and its comm.
fn stat_fields(text: &str) -> Option<(String, Vec<&str>)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_string();
    Some((comm, text[close + 1..].split_whitespace().collect()))
}

/// User plus system ticks, and system ticks alone, from a `stat` file's fields after the comm
/// (fields 14 and 15 of proc(5), counted from 1 with the pid and comm as 1 and 2).
fn ticks_of(fields: &[&str]) -> Option<(u64, u64)> {
    let system = fields.get(12)?.parse::<u64>().ok()?;
    Some((fields.get(11)?.parse::<u64>().ok()? + system, system))
}

fn switches_of(status: &str) -> (u64, u64) {
    let get = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    (get("voluntary_ctxt_switches:"), get("nonvoluntary_ctxt_switches:"))
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

impl Snapshot {
    /// `None` where there is no `/proc` to read (not Linux).
    pub fn take() -> Option<Snapshot> {
        let stat = read("/proc/stat")?;
        let cpu: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal (guest time is counted in user already).
        let machine_ticks = cpu.iter().take(8).sum();
        let idle_ticks = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
        let me = std::process::id();
        let mut tasks = BTreeMap::new();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if pid == me {
                let Some(text) = read("/proc/self/stat") else { continue };
                let Some((ticks, kernel_ticks)) = stat_fields(&text).and_then(|(_, fields)| ticks_of(&fields)) else { continue };
                let (voluntary, involuntary) = own_switches();
                let mut clients = Counters { ticks, kernel_ticks, voluntary, involuntary };
                // A host embedded in this process (`Experiment::embedded`): its threads are the
                // node's, the rest is the clients'.
                for (tid, component, node) in embedded_host_threads() {
                    clients.ticks = clients.ticks.saturating_sub(node.ticks);
                    clients.kernel_ticks = clients.kernel_ticks.saturating_sub(node.kernel_ticks);
                    clients.voluntary = clients.voluntary.saturating_sub(node.voluntary);
                    clients.involuntary = clients.involuntary.saturating_sub(node.involuntary);
                    tasks.insert((pid, tid), (component, node));
                }
                tasks.insert((pid, 0), (Component::Clients, clients));
                continue;
            }
            let Some(process_comm) = read(&format!("/proc/{pid}/comm")) else { continue };
            let process_comm = process_comm.trim();
            // A node is a child of this process (`crate::real`), whatever its binary is called.
            let parent = read(&format!("/proc/{pid}/stat")).as_deref().and_then(stat_fields).and_then(|(_, f)| f.get(1).and_then(|p| p.parse::<u32>().ok()));
            let node = parent == Some(me);
            for (tid, comm, counters) in threads_of(&format!("/proc/{pid}")) {
                let component = match process_comm {
                    _ if node && is_storage_worker(&comm) => Component::NodeStorage,
                    _ if node => Component::NodeLoop,
                    "postgres" | "mariadbd" | "mysqld" => Component::Server,
                    _ => Component::Other,
                };
                tasks.insert((pid, tid), (component, counters));
            }
        }
        Some(Snapshot { taken: Instant::now(), tasks, machine_ticks, idle_ticks })
    }
}

/// Every thread of the process whose `/proc` directory is `dir`: its id, its name and what it
/// spent.
fn threads_of(dir: &str) -> Vec<(u32, String, Counters)> {
    let Ok(threads) = std::fs::read_dir(format!("{dir}/task")) else { return Vec::new() };
    let mut found = Vec::new();
    for t in threads.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Some(text) = read(&format!("{dir}/task/{tid}/stat")) else { continue };
        let Some((comm, fields)) = stat_fields(&text) else { continue };
        let Some((ticks, kernel_ticks)) = ticks_of(&fields) else { continue };
        let (voluntary, involuntary) = read(&format!("{dir}/task/{tid}/status")).map(|s| switches_of(&s)).unwrap_or_default();
        found.push((tid, comm, Counters { ticks, kernel_ticks, voluntary, involuntary }));
    }
    found
}

/// A storage worker's thread (`ensemble-storage-*`, cut to the kernel's 15 characters).
fn is_storage_worker(comm: &str) -> bool {
    comm.starts_with("ensemble-storag")
}

/// The threads of a host embedded in this process: its loop's thread
/// ([`crate::real::EMBEDDED_HOST_THREAD`]) and its storage workers, with what each spent.
fn embedded_host_threads() -> Vec<(u32, Component, Counters)> {
    threads_of("/proc/self")
        .into_iter()
        .filter_map(|(tid, comm, counters)| {
            let component = if is_storage_worker(&comm) {
                Component::NodeStorage
            } else if comm == crate::real::EMBEDDED_HOST_THREAD {
                Component::NodeLoop
            } else {
                return None;
            };
            Some((tid, component, counters))
        })
        .collect()
}

/// This process's switches, its threads' that have exited included (`getrusage(2)`).
fn own_switches() -> (u64, u64) {
    // SAFETY: getrusage only writes the struct it is given, which is plain old data.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (0, 0);
    }
    (usage.ru_nvcsw.max(0) as u64, usage.ru_nivcsw.max(0) as u64)
}

impl CpuUse {
    /// Adds the window from `start` to `end`, in which `ops` operations completed.
    pub fn add(&mut self, start: &Snapshot, end: &Snapshot, ops: u64) {
        self.ops += ops;
        for (key, (component, after)) in &end.tasks {
            // A task born inside the window counts from zero.
            let before = start.tasks.get(key).map(|(_, c)| *c).unwrap_or_default();
            let spent = self.spent.entry(*component).or_default();
            spent.ticks += after.ticks.saturating_sub(before.ticks);
            spent.kernel_ticks += after.kernel_ticks.saturating_sub(before.kernel_ticks);
            spent.voluntary += after.voluntary.saturating_sub(before.voluntary);
            spent.involuntary += after.involuntary.saturating_sub(before.involuntary);
        }
        self.idle_ticks += end.idle_ticks.saturating_sub(start.idle_ticks);
        self.machine_ticks += end.machine_ticks.saturating_sub(start.machine_ticks);
        self.core_seconds += end.taken.duration_since(start.taken).as_secs_f64() * cores();
    }

    /// Microseconds of CPU per operation for `ticks`: ticks are a share of the machine's ticks
    /// over the windows, which are the windows' wall time on every core (so no tick length is
    /// assumed).
    fn us_per_op(&self, ticks: u64) -> f64 {
        if self.machine_ticks == 0 || self.ops == 0 {
            return 0.0;
        }
        ticks as f64 / self.machine_ticks as f64 * self.core_seconds * 1e6 / self.ops as f64
    }

    pub fn us(&self, c: Component) -> f64 {
        self.us_per_op(self.spent.get(&c).map_or(0, |s| s.ticks))
    }

    /// What of [`Self::us`] the kernel spent working for `c`'s threads (their system time).
    pub fn kernel_us(&self, c: Component) -> f64 {
        self.us_per_op(self.spent.get(&c).map_or(0, |s| s.kernel_ticks))
    }

    pub fn idle_us(&self) -> f64 {
        self.us_per_op(self.idle_ticks)
    }

    /// Every component's time per operation: the machine busy.
    pub fn busy_us(&self) -> f64 {
        Component::ALL.iter().map(|&c| self.us(c)).sum()
    }

    /// What of [`Self::busy_us`] the kernel spent.
    pub fn kernel_busy_us(&self) -> f64 {
        Component::ALL.iter().map(|&c| self.kernel_us(c)).sum()
    }

    /// The machine's time per operation, busy and idle.
    pub fn machine_us(&self) -> f64 {
        self.busy_us() + self.idle_us()
    }

    /// Voluntary and involuntary switches of `c`'s threads per operation.
    pub fn switches(&self, c: Component) -> (f64, f64) {
        let s = self.spent.get(&c).copied().unwrap_or_default();
        let per = |n: u64| if self.ops == 0 { 0.0 } else { n as f64 / self.ops as f64 };
        (per(s.voluntary), per(s.involuntary))
    }

    /// Adds another's windows to these.
    pub fn merge(&mut self, other: &CpuUse) {
        self.ops += other.ops;
        for (c, o) in &other.spent {
            let s = self.spent.entry(*c).or_default();
            s.ticks += o.ticks;
            s.kernel_ticks += o.kernel_ticks;
            s.voluntary += o.voluntary;
            s.involuntary += o.involuntary;
        }
        self.idle_ticks += other.idle_ticks;
        self.machine_ticks += other.machine_ticks;
        self.core_seconds += other.core_seconds;
    }

    pub fn measured(&self) -> bool {
        self.ops > 0 && self.machine_ticks > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_comm_and_ticks_even_with_spaces_and_parentheses_in_the_comm() {
        let line = "4242 (ensemble (x) 1) S 1 2 3 4 5 6 7 8 9 10 17 25 0 0 20 0 4 0 100";
        let (comm, fields) = stat_fields(line).unwrap();
        assert_eq!(comm, "ensemble (x) 1");
        assert_eq!(ticks_of(&fields), Some((42, 25)));
    }

    /// This process's user time, from `getrusage` (not from `/proc`, which the snapshot reads).
    fn user_ms() -> u64 {
        // SAFETY: as in `own_switches`.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
        usage.ru_utime.tv_sec as u64 * 1000 + usage.ru_utime.tv_usec as u64 / 1000
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_window_in_which_this_process_burns_cpu_charges_it_to_the_clients() {
        let start = Snapshot::take().expect("Linux has /proc");
        // Work until the kernel has charged this process 50 ms more, by its own account.
        let from = user_ms();
        let mut x = 0u64;
        while user_ms() < from + 50 {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
        }
        std::hint::black_box(x);
        let end = Snapshot::take().unwrap();
        let mut u = CpuUse::default();
        u.add(&start, &end, 1);
        assert!(u.measured());
        assert!(u.us(Component::Clients) > 0.0, "50 ms of this process's CPU time, not seen in /proc");
        assert_eq!(u.us(Component::NodeLoop), 0.0, "no node runs here");
    }

    #[test]
    fn time_per_operation_is_the_share_of_the_machines_ticks_over_the_windows_wall_time() {
        let mut tasks = BTreeMap::new();
        tasks.insert((1, 1), (Component::Server, Counters { ticks: 10, kernel_ticks: 4, voluntary: 0, involuntary: 0 }));
        let t0 = Instant::now();
        let start = Snapshot { taken: t0, tasks: tasks.clone(), machine_ticks: 1000, idle_ticks: 500 };
        tasks.insert((1, 1), (Component::Server, Counters { ticks: 60, kernel_ticks: 24, voluntary: 40, involuntary: 4 }));
        tasks.insert((2, 2), (Component::NodeLoop, Counters { ticks: 25, kernel_ticks: 15, voluntary: 20, involuntary: 0 }));
        let end = Snapshot { taken: t0 + std::time::Duration::from_secs(1), tasks, machine_ticks: 1200, idle_ticks: 525 };
        let mut u = CpuUse::default();
        u.add(&start, &end, 20);
        let core_us = cores() * 1e6;
        // The server spent 50 of the window's 200 ticks: a quarter of the cores' second, over 20 operations.
        assert!((u.us(Component::Server) - core_us * 0.25 / 20.0).abs() < 1e-6);
        // A thread born in the window counts from zero.
        assert!((u.us(Component::NodeLoop) - core_us * 0.125 / 20.0).abs() < 1e-6);
        assert!((u.idle_us() - core_us * 0.125 / 20.0).abs() < 1e-6);
        // Of which in the kernel: the server 20 of its 50 ticks, the new thread 15 of its 25.
        assert!((u.kernel_us(Component::Server) - core_us * 0.1 / 20.0).abs() < 1e-6);
        assert!((u.kernel_us(Component::NodeLoop) - core_us * 0.075 / 20.0).abs() < 1e-6);
        // Busy (50 + 25 ticks, 35 of them in the kernel) and idle (25): half the cores' second.
        assert!((u.busy_us() - core_us * 0.375 / 20.0).abs() < 1e-6);
        assert!((u.kernel_busy_us() - core_us * 0.175 / 20.0).abs() < 1e-6);
        assert!((u.machine_us() - core_us * 0.5 / 20.0).abs() < 1e-6);
        assert_eq!(u.switches(Component::Server), (2.0, 0.2));
        assert_eq!(u.us(Component::Other), 0.0);
    }
}
