//! Maintenance windows (`spec.maintenanceWindow`, an extension to PKO's API), as pure
//! functions: whether an operation that changes resources may start now, and if not, when.

use crate::stack::drift::{parse_schedules, ScheduleError, Schedules};
use jiff::Timestamp;
use pulumi_operator_api::{parse_duration, MaintenanceWindow, StackSpec, UpdateType};
use std::time::Duration;

/// The Reconciling reason (and Event reason) of an operation waiting for its window.
pub const REASON_OUTSIDE_MAINTENANCE_WINDOW: &str = "OutsideMaintenanceWindow";

/// A window's longest allowed duration: a window that never closes is no window.
const MAX_WINDOW: Duration = Duration::from_secs(31 * 24 * 3600);

/// A parsed `spec.maintenanceWindow`.
#[derive(Clone, Debug)]
pub struct Window {
    opens: Schedules,
    length: Duration,
}

/// Parses and checks `spec.maintenanceWindow`; the error is the message a user acts on.
pub fn parse(spec: &MaintenanceWindow) -> Result<Window, ScheduleError> {
    let opens = parse_schedules(
        "spec.maintenanceWindow",
        &spec.schedules,
        spec.time_zone.as_deref(),
    )?;
    let length = parse_duration(&spec.duration)
        .map_err(|e| ScheduleError(format!("spec.maintenanceWindow.duration: {e}")))?;
    if length.is_zero() || length > MAX_WINDOW {
        return Err(ScheduleError(format!(
            "spec.maintenanceWindow.duration {:?}: must be more than 0 and at most 31 days",
            spec.duration
        )));
    }
    Ok(Window { opens, length })
}

/// Whether an operation may start.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    Open,
    /// Closed; the next window opens at this time (`None`: never again).
    Closed {
        opens_at: Option<Timestamp>,
    },
}

impl Window {
    /// The gate at `now`: open when the last opening at or before `now` is less than the
    /// window's duration ago.
    pub fn at(&self, now: Timestamp) -> Gate {
        let open = self.opens.last_at_or_before(now).is_some_and(|opened| {
            now.duration_since(opened)
                .try_into()
                .is_ok_and(|since: Duration| since < self.length)
        });
        if open {
            Gate::Open
        } else {
            Gate::Closed {
                opens_at: self.opens.next_after(now),
            }
        }
    }
}

/// The gate for an operation of `kind`: only `up` and `destroy` wait for the window.
pub fn gate(spec: &StackSpec, kind: &UpdateType, now: Timestamp) -> Gate {
    if !matches!(kind, UpdateType::Up | UpdateType::Destroy) {
        return Gate::Open;
    }
    match spec.maintenance_window.as_deref().map(parse) {
        Some(Ok(window)) => window.at(now),
        // No window, or a bad one (validation stalls the Stack before this is asked).
        _ => Gate::Open,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn window(schedules: &[&str], duration: &str, zone: Option<&str>) -> MaintenanceWindow {
        MaintenanceWindow {
            schedules: schedules.iter().map(|s| s.to_string()).collect(),
            duration: duration.into(),
            time_zone: zone.map(str::to_string),
        }
    }

    #[test]
    fn the_window_is_open_for_its_duration_after_each_opening() {
        // Weeknights 22:00-02:00 in Paris; 2026-11-23 is a Monday (UTC+1).
        let w = parse(&window(&["0 22 * * 1-5"], "4h", Some("Europe/Paris"))).unwrap();
        assert_eq!(w.at(ts("2026-11-23T21:00:00Z")), Gate::Open, "22:00 Paris");
        assert_eq!(
            w.at(ts("2026-11-24T00:59:59Z")),
            Gate::Open,
            "01:59:59 Paris"
        );
        assert_eq!(
            w.at(ts("2026-11-24T01:00:00Z")),
            Gate::Closed {
                opens_at: Some(ts("2026-11-24T21:00:00Z"))
            },
            "02:00 Paris: closed until the next night"
        );
        assert_eq!(
            w.at(ts("2026-11-23T20:59:59Z")),
            Gate::Closed {
                opens_at: Some(ts("2026-11-23T21:00:00Z"))
            }
        );
        // Friday night's window runs into Saturday; none opens on the weekend.
        assert_eq!(w.at(ts("2026-11-28T00:30:00Z")), Gate::Open);
        assert_eq!(
            w.at(ts("2026-11-28T12:00:00Z")),
            Gate::Closed {
                opens_at: Some(ts("2026-11-30T21:00:00Z"))
            }
        );
        // Several openings: any of them.
        let two = parse(&window(&["0 6 * * *", "0 18 * * *"], "30m", None)).unwrap();
        assert_eq!(two.at(ts("2026-11-23T18:10:00Z")), Gate::Open);
        assert_eq!(two.at(ts("2026-11-23T06:29:00Z")), Gate::Open);
        assert!(matches!(
            two.at(ts("2026-11-23T12:00:00Z")),
            Gate::Closed { .. }
        ));
    }

    #[test]
    fn only_changes_wait_for_the_window_and_bad_windows_are_refused() {
        let mut spec: StackSpec =
            serde_json::from_value(serde_json::json!({"stack": "dev"})).unwrap();
        spec.maintenance_window = Some(Box::new(window(&["0 22 * * *"], "1h", None)));
        let noon = ts("2026-11-23T12:00:00Z");
        assert!(matches!(
            gate(&spec, &UpdateType::Up, noon),
            Gate::Closed { .. }
        ));
        assert!(matches!(
            gate(&spec, &UpdateType::Destroy, noon),
            Gate::Closed { .. }
        ));
        assert_eq!(gate(&spec, &UpdateType::Preview, noon), Gate::Open);
        spec.maintenance_window = None;
        assert_eq!(gate(&spec, &UpdateType::Up, noon), Gate::Open);

        let err = |w: MaintenanceWindow| parse(&w).unwrap_err().to_string();
        assert!(err(window(&["0 22 * * *"], "0s", None)).contains("duration"));
        assert!(err(window(&["0 22 * * *"], "soon", None)).contains("duration"));
        assert!(err(window(&["0 22 * * *"], "9999h", None)).contains("31 days"));
        assert!(err(window(&[], "1h", None)).contains("spec.maintenanceWindow.schedules"));
        assert!(err(window(&["0 22 * * *"], "1h", Some("Nowhere"))).contains("timeZone"));
    }
}
