//! Durations in messages, written by one crate (jiff's friendly format, compact and without
//! spaces, close to Go's `Duration.String` that PKO's messages use): `30s`, `1m1s`, `2h5m`.

use jiff::fmt::friendly::{Designator, Spacing, SpanPrinter};
use std::time::Duration;

static PRINTER: SpanPrinter = SpanPrinter::new()
    .designator(Designator::Compact)
    .spacing(Spacing::None)
    .hours_minutes_seconds(false);

/// `d` in whole seconds, e.g. `1h2m3s` (`0s` for less than a second).
pub fn human(d: Duration) -> String {
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    PRINTER.duration_to_string(&jiff::SignedDuration::from_secs(secs))
}

/// [`human`] of a count of seconds (a negative count is 0).
pub fn human_secs(secs: i64) -> String {
    human(Duration::from_secs(secs.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_go_durations() {
        assert_eq!(human(Duration::from_millis(400)), "0s");
        assert_eq!(human(Duration::from_secs(30)), "30s");
        assert_eq!(human(Duration::from_secs(61)), "1m1s");
        assert_eq!(human(Duration::from_secs(3600)), "1h");
        assert_eq!(human(Duration::from_secs(3 * 3600 + 120 + 5)), "3h2m5s");
        assert_eq!(human(Duration::from_secs(50 * 3600)), "50h");
        assert_eq!(
            human(Duration::MAX),
            human(Duration::from_secs(i64::MAX as u64))
        );
        assert_eq!(human_secs(-5), "0s");
        assert_eq!(human_secs(180), "3m");
    }
}
