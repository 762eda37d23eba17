//! Scheduled drift detection (`spec.driftDetection`, an extension to PKO's API), as pure
//! functions: the schedules, when a check is due, the Update that runs it, what its result
//! means for the Stack's status, and when an `up` repairs the drift.
//!
//! A check is a `preview --refresh` Update marked with [`DRIFT_CHECK_ANNOTATION`]. It goes
//! through the same claim as every other operation (one at a time per Stack), but it is not the
//! Stack's `lastUpdate`: it never changes the sync decision, the failure count or `Ready`.

use crate::stack::objects::{build_update, short_hash};
use chrono::TimeZone as _;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use pulumi_operator_api::names;
use pulumi_operator_api::{
    DriftDetection, DriftStatus, ResourceChange, Stack, StackSpec, StackStatus,
    StackUpdateStateMessage, Update, UpdateType,
};
use std::str::FromStr;

/// Marks an Update as a drift check; the value is the scheduled time it answers.
pub const DRIFT_CHECK_ANNOTATION: &str = "pulumi.com/drift-check";
/// The Stack condition a drift check sets.
pub const CONDITION_DRIFT_DETECTED: &str = "DriftDetected";
/// `DriftDetected=True`, and the Warning Event of a check that found drift.
pub const REASON_DRIFT_DETECTED: &str = "DriftDetected";
/// `DriftDetected=False`: the last check found nothing.
pub const REASON_NO_DRIFT: &str = "NoDrift";
/// `DriftDetected=False` after an `up` following drift.
pub const REASON_REMEDIATED: &str = "Remediated";
/// `DriftDetected=Unknown`, and the Warning Event of a check that failed.
pub const REASON_CHECK_FAILED: &str = "DriftCheckFailed";
/// The Normal Event of a check that no longer finds the drift an earlier one found.
pub const EVENT_DRIFT_RESOLVED: &str = "DriftResolved";
/// The `--message` of a check.
pub const CHECK_MESSAGE: &str = "Drift check";

const MAX_SCHEDULES: usize = 16;
const MAX_EXPRESSION_BYTES: usize = 200;

/// Parsed `spec.driftDetection` schedules.
#[derive(Clone, Debug)]
pub struct Schedules {
    crons: Vec<cron::Schedule>,
    zone: TimeZone,
}

/// A schedule (`spec.driftDetection`, `spec.maintenanceWindow`) that cannot be used: the
/// message names the field and says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

/// A five-field cron expression (`minute hour day-of-month month day-of-week`, days of week
/// 0–7 with Sunday 0 or 7) in the `cron` crate's form (leading seconds; Sunday is 1 there, so
/// numeric days become names).
fn normalize(expression: &str) -> Result<String, ScheduleError> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    match fields.len() {
        5 => {
            const DAYS: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
            let mut dow = String::new();
            let mut number = String::new();
            let flush = |number: &mut String, dow: &mut String| -> Result<(), ScheduleError> {
                if number.is_empty() {
                    return Ok(());
                }
                let day: usize = number
                    .parse()
                    .ok()
                    .filter(|d| *d <= 7)
                    .ok_or_else(|| ScheduleError(format!("day of week {number} is not 0-7")))?;
                dow.push_str(DAYS[day]);
                number.clear();
                Ok(())
            };
            let mut after_slash = false;
            for ch in fields[4].chars() {
                if ch.is_ascii_digit() && !after_slash {
                    number.push(ch);
                    continue;
                }
                flush(&mut number, &mut dow)?;
                // A step (`*/2`) is a count, not a day.
                after_slash = ch == '/' || (after_slash && ch.is_ascii_digit());
                dow.push(ch);
            }
            flush(&mut number, &mut dow)?;
            Ok(format!(
                "0 {} {} {} {} {dow}",
                fields[0], fields[1], fields[2], fields[3]
            ))
        }
        6 | 7 => Ok(fields.join(" ")),
        n => Err(ScheduleError(format!(
            "{n} fields; expected 5 (minute hour day-of-month month day-of-week) or 6 with \
             leading seconds"
        ))),
    }
}

/// Parses and checks `spec.driftDetection`; the error is the message a user acts on.
pub fn parse(spec: &DriftDetection) -> Result<Schedules, ScheduleError> {
    parse_schedules(
        "spec.driftDetection",
        &spec.schedules,
        spec.time_zone.as_deref(),
    )
}

/// Parses the cron `expressions` of the field `field` (`schedules`, `timeZone` under it).
pub fn parse_schedules(
    field: &str,
    expressions: &[String],
    time_zone: Option<&str>,
) -> Result<Schedules, ScheduleError> {
    if expressions.is_empty() {
        return Err(ScheduleError(format!(
            "{field}.schedules: at least one cron expression is required"
        )));
    }
    if expressions.len() > MAX_SCHEDULES {
        return Err(ScheduleError(format!(
            "{field}.schedules: at most {MAX_SCHEDULES} expressions"
        )));
    }
    let mut crons = Vec::with_capacity(expressions.len());
    for (i, expression) in expressions.iter().enumerate() {
        let bad = |why: &dyn std::fmt::Display| {
            let shown: String = expression.chars().take(MAX_EXPRESSION_BYTES).collect();
            ScheduleError(format!("{field}.schedules[{i}] {shown:?}: {why}"))
        };
        if expression.len() > MAX_EXPRESSION_BYTES {
            return Err(bad(&format!("longer than {MAX_EXPRESSION_BYTES} bytes")));
        }
        let normalized = normalize(expression).map_err(|e| bad(&e))?;
        let schedule =
            cron::Schedule::from_str(&normalized).map_err(|e| bad(&format!("invalid: {e}")))?;
        crons.push(schedule);
    }
    let name = time_zone.unwrap_or("UTC");
    let zone = TimeZone::get(name).map_err(|_| {
        ScheduleError(format!(
            "{field}.timeZone {name:?}: not an IANA time zone (e.g. UTC, Europe/Paris)"
        ))
    })?;
    Ok(Schedules { crons, zone })
}

impl Schedules {
    /// `t` on the zone's wall clock, as if it were UTC: cron steps through civil times, and the
    /// zone then says which instant each one is.
    fn wall_clock(&self, t: Timestamp) -> Option<chrono::DateTime<chrono::Utc>> {
        let local = t.to_zoned(self.zone.clone()).datetime();
        let wall = chrono::NaiveDate::from_ymd_opt(
            i32::from(local.year()),
            u32::try_from(local.month()).ok()?,
            u32::try_from(local.day()).ok()?,
        )?
        .and_hms_opt(
            u32::try_from(local.hour()).ok()?,
            u32::try_from(local.minute()).ok()?,
            u32::try_from(local.second()).ok()?,
        )?;
        Some(chrono::Utc.from_utc_datetime(&wall))
    }

    /// The instant of a civil time produced by cron (a time skipped by a DST change is the
    /// next valid instant; a repeated one, the first).
    fn instant(&self, fire: &chrono::DateTime<chrono::Utc>) -> Option<Timestamp> {
        let civil = jiff::civil::date(
            i16::try_from(chrono::Datelike::year(fire)).ok()?,
            i8::try_from(chrono::Datelike::month(fire)).ok()?,
            i8::try_from(chrono::Datelike::day(fire)).ok()?,
        )
        .at(
            i8::try_from(chrono::Timelike::hour(fire)).ok()?,
            i8::try_from(chrono::Timelike::minute(fire)).ok()?,
            i8::try_from(chrono::Timelike::second(fire)).ok()?,
            0,
        );
        Some(
            self.zone
                .to_ambiguous_zoned(civil)
                .compatible()
                .ok()?
                .timestamp(),
        )
    }

    /// The first scheduled time strictly after `t`, if any.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let wall = self.wall_clock(t)?;
        self.crons
            .iter()
            .filter_map(|schedule| {
                schedule
                    .after(&wall)
                    .take(4)
                    .find_map(|fire| self.instant(&fire).filter(|i| *i > t))
            })
            .min()
    }

    /// The last scheduled time at or before `t`, if any.
    pub fn last_at_or_before(&self, t: Timestamp) -> Option<Timestamp> {
        let wall = self.wall_clock(t)? + chrono::Duration::seconds(1);
        self.crons
            .iter()
            .filter_map(|schedule| {
                let mut earlier = schedule.after(&wall);
                (0..4).find_map(|_| {
                    let fire = earlier.next_back()?;
                    self.instant(&fire).filter(|i| *i <= t)
                })
            })
            .max()
    }
}

/// Whether a drift check is due.
#[derive(Clone, Debug, PartialEq)]
pub enum Due {
    /// No drift detection, or nothing deployed yet to compare with.
    Never,
    /// Due now; `slot` is the scheduled time it answers.
    Now { slot: Timestamp },
    /// The next check, later.
    At(Timestamp),
}

/// When the next drift check runs: the first scheduled time after the later of the last check
/// and the last successful operation (a check right after an `up` would find nothing). Only a
/// Stack whose last operation succeeded is checked; missed times run once.
pub fn check_due(status: &StackStatus, schedules: &Schedules, now: Timestamp) -> Due {
    let Some(last) = status.last_update.as_ref() else {
        return Due::Never;
    };
    if last.state != Some(StackUpdateStateMessage::Succeeded)
        || last.update_type == Some(UpdateType::Destroy)
    {
        return Due::Never;
    }
    let checked = status
        .drift
        .as_ref()
        .and_then(|d| d.last_check_time.as_ref());
    let Some(since) = [checked, last.last_resync_time.as_ref()]
        .into_iter()
        .flatten()
        .map(|t| t.0)
        .max()
    else {
        return Due::Never;
    };
    match schedules.next_after(since) {
        None => Due::Never,
        Some(next) if next <= now => Due::Now { slot: next },
        Some(next) => Due::At(next),
    }
}

/// The reason of an `up` that repairs drift, when one is due: `autoRemediate`, a non-preview
/// Stack, and a check that found drift after the last successful operation.
pub fn remediation_due(spec: &StackSpec, status: &StackStatus) -> Option<String> {
    let auto = spec.drift_detection.as_ref()?.auto_remediate;
    if !auto || spec.preview {
        return None;
    }
    let drift = status.drift.as_ref()?;
    let last = status.last_update.as_ref()?;
    let drifted = drift.drifted.unwrap_or(0);
    let newer = match (&drift.last_check_time, &last.last_resync_time) {
        (Some(check), Some(update)) => check.0 > update.0,
        (Some(_), None) => true,
        _ => false,
    };
    (drifted > 0 && newer && last.state == Some(StackUpdateStateMessage::Succeeded))
        .then(|| format!("Drift detected: {drifted} resource(s) differ from the program"))
}

/// Whether an Update is a drift check.
pub fn is_check(update: &Update) -> bool {
    update.annotations().contains_key(DRIFT_CHECK_ANNOTATION)
}

/// The Update of the drift check that answers `slot`: a `preview --refresh` of the deployed
/// revision, with the Stack's targets, under a name of its own (one per scheduled time).
pub fn build_check(stack: &Stack, revision: &str, slot: Timestamp) -> Update {
    let mut update = build_update(stack, UpdateType::Preview, CHECK_MESSAGE, revision);
    let slot = slot.to_string();
    update.metadata.name = Some(format!(
        "{}-{}",
        stack.name_any(),
        short_hash(&[
            stack.uid().unwrap_or_default().as_str(),
            "drift-check",
            revision,
            &slot,
        ])
    ));
    update.spec.refresh = Some(true);
    // Drift is the finding, not a failure of the check.
    update.spec.expect_no_changes = None;
    update
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DRIFT_CHECK_ANNOTATION.to_string(), slot);
    update
}

/// The `up` that repairs drift: `--refresh`, because the state Pulumi holds still says what
/// the program deployed (a check's refresh is a preview and is not saved), so a plain `up`
/// would find nothing to do.
pub fn build_remediation(stack: &Stack, reason: &str, revision: &str) -> Update {
    let mut update = build_update(stack, UpdateType::Up, reason, revision);
    update.spec.refresh = Some(true);
    update
}

/// What a finished check found.
#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    /// Drift: the message lists the resources; `new` unless the last check found the same.
    Drifted {
        count: i64,
        message: String,
        new: bool,
    },
    /// No drift; `resolved` when an earlier check had found some.
    Clean { resolved: bool },
    /// The check itself failed.
    Failed { message: String },
}

fn describe(changes: &[ResourceChange], count: i64) -> String {
    let listed: Vec<String> = changes
        .iter()
        .map(|c| format!("{} ({})", c.urn, c.operation))
        .collect();
    let more = count - changes.len() as i64;
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "{count} resource(s) differ from the program: {}{tail}",
        listed.join(", ")
    )
}

/// Folds a finished drift check into the status: `drift`, the `DriftDetected` condition; the
/// claim is released. `lastUpdate` is untouched.
pub fn absorb_check(
    status: &mut StackStatus,
    update: &Update,
    generation: i64,
    now: &Time,
) -> Finding {
    status.current_update = None;
    let name = update.name_any();
    let was_drifted = drifted(status);
    let result = update.status.clone().unwrap_or_default();
    let revision = update
        .annotations()
        .get(crate::stack::objects::TRIGGER_REVISION_ANNOTATION)
        .cloned();
    if crate::update::status::update_failed(update) {
        let message = format!(
            "the drift check {name} failed: {}; kubectl logs job/{name}",
            result.message.unwrap_or_default()
        );
        status.drift = Some(Box::new(DriftStatus {
            last_check_time: Some(now.clone()),
            last_check: Some(name),
            revision,
            ..Default::default()
        }));
        let condition = (names_unknown(), REASON_CHECK_FAILED, message.as_str());
        set_drift_condition(status, condition, generation, now);
        return Finding::Failed { message };
    }
    let count = result.changed.unwrap_or(result.changes.len() as i64);
    let same_as_before = was_drifted
        && status
            .drift
            .as_ref()
            .is_some_and(|d| d.drifted == Some(count) && d.resources == result.changes);
    status.drift = Some(Box::new(DriftStatus {
        last_check_time: Some(now.clone()),
        last_check: Some(name.clone()),
        revision,
        drifted: Some(count),
        resources: result.changes.clone(),
        next_check_time: None,
    }));
    if count == 0 {
        let message = format!("no drift found by {name}");
        let condition = (names::STATUS_FALSE, REASON_NO_DRIFT, message.as_str());
        set_drift_condition(status, condition, generation, now);
        return Finding::Clean {
            resolved: was_drifted,
        };
    }
    let message = format!(
        "{}; found by {name} (kubectl logs job/{name})",
        describe(&result.changes, count)
    );
    let condition = (names::STATUS_TRUE, REASON_DRIFT_DETECTED, message.as_str());
    set_drift_condition(status, condition, generation, now);
    Finding::Drifted {
        count,
        message,
        new: !same_as_before,
    }
}

/// Sets `DriftDetected` to (status, reason, message).
fn set_drift_condition(
    status: &mut StackStatus,
    (condition_status, reason, message): (&str, &str, &str),
    generation: i64,
    now: &Time,
) {
    crate::stack::status::set_condition(
        status,
        CONDITION_DRIFT_DETECTED,
        condition_status,
        reason,
        message,
        generation,
        now,
    );
}

fn names_unknown() -> &'static str {
    "Unknown"
}

/// Whether the status says the deployed resources have drifted.
pub fn drifted(status: &StackStatus) -> bool {
    status.conditions.iter().flatten().any(|c| {
        c.type_ == CONDITION_DRIFT_DETECTED && c.status == pulumi_operator_api::names::STATUS_TRUE
    })
}

/// Removes what drift detection wrote (it was turned off).
pub fn forget(status: &mut StackStatus) {
    status.drift = None;
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != CONDITION_DRIFT_DETECTED);
    }
}

/// After a successful `up` (or a successful operation that replaced the stack's resources):
/// drift found earlier is gone.
pub fn mark_remediated(status: &mut StackStatus, update: &str, generation: i64, now: &Time) {
    if drifted(status) {
        crate::stack::status::set_condition(
            status,
            CONDITION_DRIFT_DETECTED,
            pulumi_operator_api::names::STATUS_FALSE,
            REASON_REMEDIATED,
            &format!("the update {update} put the program's state back"),
            generation,
            now,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::{StackUpdateState, UpdateStatus};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn schedules(exprs: &[&str], zone: Option<&str>) -> Schedules {
        parse(&DriftDetection {
            schedules: exprs.iter().map(|s| s.to_string()).collect(),
            time_zone: zone.map(str::to_string),
            auto_remediate: false,
        })
        .unwrap()
    }

    #[test]
    fn five_field_expressions_use_cron_days_of_week() {
        // 2026-11-23 is a Monday.
        let weekdays = schedules(&["0 6 * * 1-5"], None);
        assert_eq!(
            weekdays.next_after(ts("2026-11-21T10:00:00Z")),
            Some(ts("2026-11-23T06:00:00Z")),
            "Saturday → Monday 06:00"
        );
        let sunday = schedules(&["30 2 * * 0"], None);
        assert_eq!(
            sunday.next_after(ts("2026-11-23T00:00:00Z")),
            Some(ts("2026-11-29T02:30:00Z"))
        );
        assert_eq!(
            schedules(&["30 2 * * 7"], None).next_after(ts("2026-11-23T00:00:00Z")),
            Some(ts("2026-11-29T02:30:00Z")),
            "7 is Sunday too"
        );
        let every_minute = schedules(&["* * * * *"], None);
        assert_eq!(
            every_minute.next_after(ts("2026-11-23T10:00:30Z")),
            Some(ts("2026-11-23T10:01:00Z"))
        );
        let steps = schedules(&["*/15 * * * */2"], None);
        assert!(steps.next_after(ts("2026-11-23T10:00:30Z")).is_some());
        let six = schedules(&["*/10 * * * * *"], None);
        assert_eq!(
            six.next_after(ts("2026-11-23T10:00:01Z")),
            Some(ts("2026-11-23T10:00:10Z"))
        );
    }

    #[test]
    fn the_earliest_schedule_wins_and_time_zones_are_explicit() {
        let two = schedules(&["0 12 * * *", "0 8 * * *"], None);
        assert_eq!(
            two.next_after(ts("2026-11-23T09:00:00Z")),
            Some(ts("2026-11-23T12:00:00Z"))
        );
        let paris = schedules(&["0 8 * * *"], Some("Europe/Paris"));
        assert_eq!(
            paris.next_after(ts("2026-11-23T00:00:00Z")),
            Some(ts("2026-11-23T07:00:00Z")),
            "08:00 in Paris is 07:00 UTC in winter"
        );
        assert_eq!(
            paris.next_after(ts("2026-07-01T00:00:00Z")),
            Some(ts("2026-07-01T06:00:00Z")),
            "and 06:00 UTC in summer"
        );
        // 2026-03-29 02:30 does not exist in Paris: the check runs at the next valid instant.
        let gap = schedules(&["30 2 29 3 *"], Some("Europe/Paris"));
        assert_eq!(
            gap.next_after(ts("2026-03-28T00:00:00Z")),
            Some(ts("2026-03-29T01:30:00Z"))
        );
    }

    #[test]
    fn bad_schedules_are_refused_with_the_field_named() {
        let err = |exprs: &[&str], zone: Option<&str>| {
            parse(&DriftDetection {
                schedules: exprs.iter().map(|s| s.to_string()).collect(),
                time_zone: zone.map(str::to_string),
                auto_remediate: false,
            })
            .unwrap_err()
            .to_string()
        };
        assert!(err(&[], None).contains("at least one"));
        assert!(err(&["* * *"], None).contains("schedules[0]"));
        assert!(err(&["0 6 * * 9"], None).contains("day of week 9"));
        assert!(err(&["61 * * * *"], None).contains("invalid"));
        assert!(err(&["* * * * *"], Some("Mars/Olympus")).contains("timeZone"));
        assert!(err(&[&"1 ".repeat(500)], None).contains("longer than"));
        // A date that never comes is accepted and never fires.
        let never = schedules(&["0 0 30 2 *"], None);
        assert_eq!(never.next_after(ts("2026-01-01T00:00:00Z")), None);
    }

    fn synced(at: &str) -> StackStatus {
        StackStatus {
            last_update: Some(StackUpdateState {
                name: Some("s-1".into()),
                update_type: Some(UpdateType::Up),
                state: Some(StackUpdateStateMessage::Succeeded),
                last_resync_time: Some(Time(ts(at))),
                last_successful_commit: Some("c".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_check_is_due_after_the_later_of_the_last_check_and_the_last_update() {
        let hourly = schedules(&["0 * * * *"], None);
        let status = synced("2026-11-23T10:30:00Z");
        assert_eq!(
            check_due(&status, &hourly, ts("2026-11-23T10:59:00Z")),
            Due::At(ts("2026-11-23T11:00:00Z"))
        );
        assert_eq!(
            check_due(&status, &hourly, ts("2026-11-23T13:10:00Z")),
            Due::Now {
                slot: ts("2026-11-23T11:00:00Z")
            },
            "missed checks run once"
        );
        let mut checked = status.clone();
        checked.drift = Some(Box::new(DriftStatus {
            last_check_time: Some(Time(ts("2026-11-23T13:10:05Z"))),
            ..Default::default()
        }));
        assert_eq!(
            check_due(&checked, &hourly, ts("2026-11-23T13:20:00Z")),
            Due::At(ts("2026-11-23T14:00:00Z"))
        );
        let mut failed = status.clone();
        failed.last_update.as_mut().unwrap().state = Some(StackUpdateStateMessage::Failed);
        assert_eq!(
            check_due(&failed, &hourly, ts("2026-11-24T00:00:00Z")),
            Due::Never
        );
        assert_eq!(
            check_due(&StackStatus::default(), &hourly, ts("2026-11-24T00:00:00Z")),
            Due::Never
        );
    }

    fn stack() -> Stack {
        let mut s = Stack::new(
            "web",
            serde_json::from_value(serde_json::json!({
                "stack": "dev", "projectRepo": "r", "commit": "c",
                "updateTemplate": {"spec": {"expectNoChanges": true}},
                "driftDetection": {"schedules": ["* * * * *"], "autoRemediate": true}
            }))
            .unwrap(),
        );
        s.metadata.namespace = Some("ns".into());
        s.metadata.uid = Some("u1".into());
        s
    }

    fn finished_check(stack: &Stack, failed: bool, changes: Vec<ResourceChange>) -> Update {
        let mut u = build_check(stack, "c", ts("2026-11-23T11:00:00Z"));
        let cond =
            |type_: &str, status: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: type_.into(),
                status: status.into(),
                reason: "r".into(),
                message: "m".into(),
                last_transition_time: Time(ts("2026-11-23T11:00:30Z")),
                observed_generation: None,
            };
        u.status = Some(UpdateStatus {
            message: Some(if failed { "boom".into() } else { "ok".into() }),
            changed: Some(changes.len() as i64),
            changes,
            conditions: Some(vec![
                cond("Complete", "True"),
                cond("Failed", if failed { "True" } else { "False" }),
            ]),
            ..Default::default()
        });
        u
    }

    #[test]
    fn a_check_is_a_refresh_preview_under_its_own_name() {
        let s = stack();
        let a = build_check(&s, "c", ts("2026-11-23T11:00:00Z"));
        let b = build_check(&s, "c", ts("2026-11-23T11:01:00Z"));
        assert_ne!(a.metadata.name, b.metadata.name);
        assert_eq!(
            a.metadata.name,
            build_check(&s, "c", ts("2026-11-23T11:00:00Z"))
                .metadata
                .name
        );
        assert!(a.metadata.name.as_ref().unwrap().starts_with("web-"));
        assert_eq!(a.spec.update_type, Some(UpdateType::Preview));
        assert_eq!(a.spec.refresh, Some(true));
        assert_eq!(
            a.spec.expect_no_changes, None,
            "drift is a finding, not a failure"
        );
        assert!(is_check(&a));
        assert!(!is_check(&build_update(&s, UpdateType::Up, "x", "c")));
    }

    #[test]
    fn findings_set_the_condition_without_touching_the_last_update() {
        let s = stack();
        let now = Time(ts("2026-11-23T11:00:40Z"));
        let mut status = synced("2026-11-23T10:30:00Z");
        let before = status.last_update.clone();
        let change = ResourceChange {
            urn: "urn:pulumi:dev::p::kubernetes:core/v1:ConfigMap::cm".into(),
            operation: "replace".into(),
        };
        let finding = absorb_check(
            &mut status,
            &finished_check(&s, false, vec![change]),
            1,
            &now,
        );
        assert!(
            matches!(finding, Finding::Drifted { count: 1, ref message, new: true } if message.contains("ConfigMap::cm (replace)")),
            "{finding:?}"
        );
        let same = ResourceChange {
            urn: "urn:pulumi:dev::p::kubernetes:core/v1:ConfigMap::cm".into(),
            operation: "replace".into(),
        };
        let again = absorb_check(
            &mut status.clone(),
            &finished_check(&s, false, vec![same]),
            1,
            &now,
        );
        assert!(
            matches!(again, Finding::Drifted { new: false, .. }),
            "the same drift is not news: {again:?}"
        );
        assert_eq!(status.last_update, before);
        assert!(drifted(&status));
        assert_eq!(
            remediation_due(&s.spec, &status).as_deref(),
            Some("Drift detected: 1 resource(s) differ from the program")
        );
        let repair = build_remediation(&s, "Drift detected", "c");
        assert_eq!(repair.spec.update_type, Some(UpdateType::Up));
        assert_eq!(
            repair.spec.refresh,
            Some(true),
            "the repair must see the drift"
        );
        let mut preview = s.spec.clone();
        preview.preview = true;
        assert_eq!(remediation_due(&preview, &status), None);

        // The remediation succeeded: the condition says so and no further up is due.
        status.last_update.as_mut().unwrap().last_resync_time =
            Some(Time(ts("2026-11-23T11:02:00Z")));
        mark_remediated(&mut status, "web-up", 1, &now);
        assert!(!drifted(&status));
        assert_eq!(remediation_due(&s.spec, &status), None);

        let mut status = synced("2026-11-23T10:30:00Z");
        absorb_check(&mut status, &finished_check(&s, false, vec![]), 1, &now);
        assert!(!drifted(&status));
        let failed = absorb_check(&mut status, &finished_check(&s, true, vec![]), 1, &now);
        assert!(matches!(failed, Finding::Failed { ref message } if message.contains("boom")));
        let c = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == CONDITION_DRIFT_DETECTED)
            .unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", REASON_CHECK_FAILED)
        );
    }
}
