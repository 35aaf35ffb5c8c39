//! Virtual or real time, as nanoseconds since the start of a run.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A point in time, in nanoseconds since the run started. The simulator advances it virtually;
/// the real runtime reads a monotonic clock. Protocol code only ever receives it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub fn from_duration(d: Duration) -> Time {
        Time(d.as_nanos() as u64)
    }
    pub fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    pub fn saturating_sub(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(self.0 + d.as_nanos() as u64)
    }
}

impl std::fmt::Display for Time {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.6}s", self.as_secs_f64())
    }
}
