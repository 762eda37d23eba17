//! Every wait that grows with consecutive failures, from one builder: backon's exponential
//! backoff, without jitter, so that a wait is a pure function of the failure count (unit-tested
//! here and where it is used). Used by the operator's requeues and start-up loops and by the
//! runner's retries.

use backon::{BackoffBuilder, ExponentialBuilder};
use std::time::Duration;

/// `first`, then each wait `factor` times the one before, never more than `max` (from the
/// first on: a `max` below `first` caps it too).
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    first: Duration,
    factor: f32,
    max: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, factor: f32, max: Duration) -> Backoff {
        Backoff { first, factor, max }
    }

    /// The waits, one per failure, without end.
    pub fn waits(&self) -> impl Iterator<Item = Duration> {
        let max = self.max;
        ExponentialBuilder::new()
            .with_min_delay(self.first)
            .with_factor(self.factor)
            .with_max_delay(self.max)
            .without_max_times()
            .build()
            .map(move |d| d.min(max))
    }

    /// The wait after the `failures`-th consecutive failure (1 → `first`); none before any.
    pub fn after(&self, failures: u32) -> Duration {
        match failures {
            0 => Duration::ZERO,
            // Past 64 doublings every wait is long since capped.
            n => self.waits().nth(n.min(64) as usize - 1).unwrap_or(self.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_by_the_factor_up_to_the_cap() {
        let b = Backoff::new(Duration::from_secs(10), 3.0, Duration::from_secs(3600));
        let secs: Vec<u64> = b.waits().take(7).map(|d| d.as_secs()).collect();
        assert_eq!(secs, [10, 30, 90, 270, 810, 2430, 3600]);
        assert_eq!(b.after(0), Duration::ZERO);
        assert_eq!(b.after(1), Duration::from_secs(10));
        assert_eq!(b.after(4), Duration::from_secs(270));
        assert_eq!(b.after(u32::MAX), Duration::from_secs(3600));
    }

    #[test]
    fn a_cap_below_the_first_wait_caps_it() {
        let b = Backoff::new(Duration::from_secs(10), 3.0, Duration::from_secs(2));
        assert_eq!(b.after(1), Duration::from_secs(2));
        assert_eq!(b.after(9), Duration::from_secs(2));
    }

    #[test]
    fn sub_second_waits_double_exactly() {
        let b = Backoff::new(Duration::from_millis(500), 2.0, Duration::from_secs(8));
        let ms: Vec<u128> = b.waits().take(6).map(|d| d.as_millis()).collect();
        assert_eq!(ms, [500, 1000, 2000, 4000, 8000, 8000]);
    }
}
