//! Which of the machine's cores a real run's own processes run on: `--cpus`.
//!
//! On this machine the clients, the nodes and the database servers share two cores, and where
//! each runs moves the figures: the 2PC baseline ran RUBiS on MariaDB about 1.6 times faster
//! with the bench and its nodes on one core (RESULTS.md, "Gyro Figure 5"). `--cpus` makes such a
//! placement a flag of the command instead of a wrapper around it, and every real run records
//! where its processes could run (`Experiment::cpus`), whoever narrowed it (`--cpus`, `taskset`).
//!
//! The command pins itself before it starts any thread: every thread it starts (its clients,
//! an embedded host, the direct paths of the overhead figure) and every node it starts (a child
//! keeps its parent's CPU affinity across fork and exec) inherit the set. The database servers
//! are not its children and stay where they are (`scripts/split-cores.sh` moves them).

use std::collections::BTreeSet;

/// A set of cores as the command line names it: `0`, `0,1`, `0-3`, `0,2-3`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreList(pub Vec<u32>);

/// The highest core a list may name: one less than Linux's `CPU_SETSIZE`.
const MAX_CORE: u32 = 1023;

impl CoreList {
    pub fn parse(s: &str) -> Result<CoreList, String> {
        let mut cores = BTreeSet::new();
        for part in s.split(',') {
            let part = part.trim();
            let core = |c: &str| -> Result<u32, String> {
                let n: u32 = c.trim().parse().map_err(|_| format!("`{c}` in `{s}` is not a core number (cores are listed as 0, 0,1 or 0-3)"))?;
                if n > MAX_CORE {
                    return Err(format!("core {n} in `{s}` is past the last core Linux can name ({MAX_CORE})"));
                }
                Ok(n)
            };
            match part.split_once('-') {
                Some((lo, hi)) => {
                    let (lo, hi) = (core(lo)?, core(hi)?);
                    if lo > hi {
                        return Err(format!("the range `{part}` in `{s}` runs backwards"));
                    }
                    cores.extend(lo..=hi);
                }
                None => {
                    cores.insert(core(part)?);
                }
            }
        }
        Ok(CoreList(cores.into_iter().collect()))
    }

    /// `0-1,3`: ranges where the cores are consecutive.
    pub fn display(cores: &[u32]) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < cores.len() {
            let mut j = i;
            while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
                j += 1;
            }
            out.push(if j == i { cores[i].to_string() } else { format!("{}-{}", cores[i], cores[j]) });
            i = j + 1;
        }
        out.join(",")
    }
}

/// The cores this process may run on (its CPU affinity), in order.
#[cfg(target_os = "linux")]
pub fn allowed() -> std::io::Result<Vec<u32>> {
    // SAFETY: a zeroed cpu_set_t is the empty set; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((0..=MAX_CORE).filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) }).collect())
}

/// Where a run's clients and nodes could run, when narrower than the machine's online cores:
/// what a run records (`Experiment::cpus`). Empty when they could run anywhere, or where it
/// cannot be read.
pub fn narrowed() -> Vec<u32> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf reads a number.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        match allowed() {
            Ok(cores) if (cores.len() as i64) < online as i64 => cores,
            _ => Vec::new(),
        }
    }
    #[cfg(not(target_os = "linux"))]
    Vec::new()
}

/// Runs this process, and so every thread and child it starts after, on `cores` alone. Call
/// it before any thread starts: a thread already running keeps its own set.
pub fn pin_this_process(cores: &CoreList) -> anyhow::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let may = allowed().map_err(|e| anyhow::anyhow!("--cpus: reading which cores this process may run on: {e}"))?;
        if let Some(c) = cores.0.iter().find(|c| !may.contains(c)) {
            anyhow::bail!("--cpus: core {c} is not one this process may run on (it may run on {})", CoreList::display(&may));
        }
        // SAFETY: as in `allowed`; CPU_SET is given cores below CPU_SETSIZE (the parser's bound).
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in &cores.0 {
            unsafe { libc::CPU_SET(c as usize, &mut set) };
        }
        if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
            anyhow::bail!("--cpus {}: {}", CoreList::display(&cores.0), std::io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cores;
        anyhow::bail!("--cpus sets the CPU affinity of Linux processes; this is not Linux")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_list_is_single_cores_and_ranges() {
        assert_eq!(CoreList::parse("0").unwrap().0, vec![0]);
        assert_eq!(CoreList::parse("1,0").unwrap().0, vec![0, 1]);
        assert_eq!(CoreList::parse("0,2-4, 3").unwrap().0, vec![0, 2, 3, 4]);
        assert_eq!(CoreList::display(&[0, 2, 3, 4, 7]), "0,2-4,7");
        assert_eq!(CoreList::display(&[1]), "1");
    }

    #[test]
    fn a_bad_core_list_says_what_is_wrong() {
        assert!(CoreList::parse("").unwrap_err().contains("`` in `` is not a core number"));
        assert!(CoreList::parse("0,x").unwrap_err().contains("`x` in `0,x` is not a core number"));
        assert!(CoreList::parse("3-1").unwrap_err().contains("the range `3-1` in `3-1` runs backwards"));
        assert!(CoreList::parse("0,5000").unwrap_err().contains("core 5000 in `0,5000` is past the last core"));
        assert!(CoreList::parse("-1").unwrap_err().contains("is not a core number"));
    }

    /// In a thread of its own, so that narrowing its set leaves the test runner's threads alone.
    #[cfg(target_os = "linux")]
    #[test]
    fn pinning_narrows_what_the_process_may_run_on_and_refuses_a_core_it_may_not() {
        std::thread::spawn(|| {
            let before = allowed().unwrap();
            let first = before[0];
            let err = pin_this_process(&CoreList(vec![MAX_CORE])).unwrap_err().to_string();
            assert!(err.contains(&format!("core {MAX_CORE} is not one this process may run on")), "{err}");
            assert_eq!(allowed().unwrap(), before, "a refused list changes nothing");
            pin_this_process(&CoreList(vec![first])).unwrap();
            assert_eq!(allowed().unwrap(), vec![first]);
            // A thread started after inherits the set.
            assert_eq!(std::thread::spawn(|| allowed().unwrap()).join().unwrap(), vec![first]);
        })
        .join()
        .unwrap();
    }
}
