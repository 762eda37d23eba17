//! A Stack's Updates (its operations) as history rows: type, result, start, duration and
//! source revision, oldest first.

use crate::view::format::{age, duration, short, Cell, Color};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use pulumi_operator_api::names;
use pulumi_operator_api::names::{
    APPLIES_PLAN_ANNOTATION, SAVES_PLAN_ANNOTATION,
    TRIGGER_REVISION_ANNOTATION as REVISION_ANNOTATION,
};
use pulumi_operator_api::Update;
use serde::Serialize;

/// How an operation ended, or where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Not started yet (no condition).
    Pending,
    /// Running (`Progressing=True`).
    Running,
    /// Ended well (`Complete=True`, `Failed` not true).
    Succeeded,
    /// Ended badly (`Failed=True`).
    Failed,
}

impl Outcome {
    /// The word shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pending => "Pending",
            Outcome::Running => "Running",
            Outcome::Succeeded => "Succeeded",
            Outcome::Failed => "Failed",
        }
    }

    /// Its colour on a terminal.
    pub fn color(self) -> Option<Color> {
        match self {
            Outcome::Pending => None,
            Outcome::Running => Some(Color::Yellow),
            Outcome::Succeeded => Some(Color::Green),
            Outcome::Failed => Some(Color::Red),
        }
    }
}

fn update_condition<'a>(update: &'a Update, kind: &str) -> Option<&'a Condition> {
    update
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == names::STATUS_TRUE)
}

/// An Update's outcome and the reason of the condition that says so.
pub fn outcome(update: &Update) -> (Outcome, String) {
    if let Some(c) = update_condition(update, names::CONDITION_FAILED) {
        return (Outcome::Failed, c.reason.clone());
    }
    if update_condition(update, names::CONDITION_COMPLETE).is_some() {
        return (Outcome::Succeeded, String::new());
    }
    if update_condition(update, names::CONDITION_PROGRESSING).is_some() {
        return (Outcome::Running, String::new());
    }
    (Outcome::Pending, String::new())
}

/// One operation of a Stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRow {
    /// The Update (and Job) name.
    pub name: String,
    /// `up`, `preview`, `destroy` or `refresh`.
    #[serde(rename = "type")]
    pub kind: String,
    /// How it ended.
    pub result: Outcome,
    /// The failure's reason (e.g. `UpdateFailed`, `DeadlineExceeded`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The result message (on failure: what went wrong).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When it started (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// Its length in seconds (end − start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i64>,
    /// The source revision it ran with.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// `plan` for a plan awaiting approval, `applies <plan>` for the `up` of an approved plan.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
    #[serde(skip)]
    start: Option<jiff::Timestamp>,
    #[serde(skip)]
    created: Option<jiff::Timestamp>,
}

fn note(update: &Update) -> String {
    let a = update.annotations();
    if a.contains_key(SAVES_PLAN_ANNOTATION) {
        return "plan".into();
    }
    match a.get(APPLIES_PLAN_ANNOTATION).filter(|p| !p.is_empty()) {
        Some(plan) => format!("applies {plan}"),
        None => String::new(),
    }
}

/// The history row of one Update.
pub fn history_row(update: &Update) -> HistoryRow {
    let status = update.status.clone().unwrap_or_default();
    let (result, reason) = outcome(update);
    let start = status.start_time.as_ref().map(|t| t.0);
    let end = status.end_time.as_ref().map(|t| t.0);
    HistoryRow {
        name: update.name_any(),
        kind: update
            .spec
            .update_type
            .as_ref()
            .map(|t| t.to_string())
            .unwrap_or_default(),
        result,
        reason,
        message: status.message.unwrap_or_default(),
        start_time: start.map(|t| t.to_string()),
        end_time: end.map(|t| t.to_string()),
        duration_seconds: start.zip(end).map(|(s, e)| e.as_second() - s.as_second()),
        revision: update
            .annotations()
            .get(REVISION_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        note: note(update),
        start,
        created: update.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// Whether the Update belongs to the Stack with this uid (its controller owner).
pub fn owned_by(update: &Update, stack_uid: &str) -> bool {
    update.owner_references().iter().any(|o| o.uid == stack_uid)
}

/// The history of a Stack: the Updates it owns, oldest first (by start, then creation).
pub fn history(updates: &[Update], stack_uid: &str) -> Vec<HistoryRow> {
    let mut rows: Vec<HistoryRow> = updates
        .iter()
        .filter(|u| owned_by(u, stack_uid))
        .map(history_row)
        .collect();
    rows.sort_by_key(|r| (r.start.or(r.created), r.name.clone()));
    rows
}

/// The Update whose log `logs` shows: the one asked for, else the Stack's running one, else
/// its last finished one, else the newest one kept.
pub fn log_target(
    asked: Option<&str>,
    status: Option<&pulumi_operator_api::StackStatus>,
    rows: &[HistoryRow],
) -> Option<String> {
    if let Some(a) = asked {
        return Some(a.to_string());
    }
    let current = status
        .and_then(|s| s.current_update.as_ref())
        .and_then(|c| c.name.clone());
    let last = status
        .and_then(|s| s.last_update.as_ref())
        .and_then(|l| l.name.clone());
    current
        .or(last)
        .or_else(|| rows.last().map(|r| r.name.clone()))
}

/// The table headers of `history`.
pub const HEADERS: [&str; 7] = [
    "NAME", "TYPE", "RESULT", "STARTED", "DURATION", "REVISION", "NOTE",
];

/// The table cells of one history row.
pub fn cells(row: &HistoryRow, now: jiff::Timestamp) -> Vec<Cell> {
    let result = match row.reason.as_str() {
        "" => row.result.as_str().to_string(),
        r => format!("{} ({r})", row.result.as_str()),
    };
    let started = row
        .start
        .map(|s| format!("{} ago", age(now.as_second() - s.as_second())))
        .unwrap_or_default();
    let revision: String = row.revision.chars().take(12).collect();
    let note = match (row.note.as_str(), row.result) {
        (n, Outcome::Failed) if !row.message.is_empty() && n.is_empty() => short(&row.message, 60),
        (n, _) => n.to_string(),
    };
    vec![
        Cell::plain(&row.name),
        Cell::plain(&row.kind),
        Cell::colored(result, row.result.color()),
        Cell::plain(started),
        Cell::plain(row.duration_seconds.map(duration).unwrap_or_default()),
        Cell::plain(revision),
        Cell::plain(note),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(
        name: &str,
        kind: &str,
        status: serde_json::Value,
        annotations: serde_json::Value,
    ) -> Update {
        serde_json::from_value(json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
            "metadata": {"name": name, "namespace": "ns", "annotations": annotations,
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "pulumi.com/v1", "kind": "Stack",
                                              "name": "app", "uid": "u-1", "controller": true}]},
            "spec": {"type": kind},
            "status": status,
        }))
        .expect("an Update")
    }

    fn cond(kind: &str, status: &str, reason: &str) -> serde_json::Value {
        json!({"type": kind, "status": status, "reason": reason, "message": reason,
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn outcomes_follow_the_update_conditions() {
        let ok = update(
            "a",
            "up",
            json!({"conditions": [
            cond("Progressing", "False", "Complete"), cond("Complete", "True", "Updated"),
            cond("Failed", "False", "UpdateSucceeded")]}),
            json!({}),
        );
        assert_eq!(outcome(&ok), (Outcome::Succeeded, String::new()));
        let bad = update(
            "b",
            "up",
            json!({"conditions": [
            cond("Complete", "True", "Updated"), cond("Failed", "True", "DeadlineExceeded")]}),
            json!({}),
        );
        assert_eq!(outcome(&bad), (Outcome::Failed, "DeadlineExceeded".into()));
        let running = update(
            "c",
            "up",
            json!({"conditions": [cond("Progressing", "True", "Progressing")]}),
            json!({}),
        );
        assert_eq!(outcome(&running).0, Outcome::Running);
        assert_eq!(
            outcome(&update("d", "up", json!({}), json!({}))).0,
            Outcome::Pending
        );
    }

    #[test]
    fn history_is_oldest_first_with_durations_revisions_and_plans() {
        let newer = update(
            "app-2",
            "up",
            json!({
            "startTime": "2026-01-01T00:10:00Z", "endTime": "2026-01-01T00:11:05Z",
            "conditions": [cond("Complete", "True", "Updated")]}),
            json!({"pulumi.com/stack-revision": "0123456789abcdef", "pulumi.com/applies-plan": "app-plan-1"}),
        );
        let plan = update(
            "app-plan-1",
            "preview",
            json!({
            "startTime": "2026-01-01T00:05:00Z", "endTime": "2026-01-01T00:05:12Z",
            "conditions": [cond("Complete", "True", "Updated")]}),
            json!({"pulumi.com/saves-plan": "true"}),
        );
        let mut foreign = update("other", "up", json!({}), json!({}));
        foreign.metadata.owner_references = None;
        let rows = history(&[newer, foreign, plan], "u-1");
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["app-plan-1", "app-2"]);
        assert_eq!(rows[0].note, "plan");
        assert_eq!(rows[1].note, "applies app-plan-1");
        assert_eq!(rows[1].duration_seconds, Some(65));
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().expect("time");
        let c = cells(&rows[1], now);
        let texts: Vec<&str> = c.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "app-2",
                "up",
                "Succeeded",
                "50m ago",
                "1m5s",
                "0123456789ab",
                "applies app-plan-1"
            ]
        );
    }

    #[test]
    fn logs_show_the_asked_then_running_then_last_operation() {
        let rows = history(&[update("app-1", "up", json!({}), json!({}))], "u-1");
        let status: pulumi_operator_api::StackStatus = serde_json::from_value(json!({
            "currentUpdate": {"name": "app-3"}, "lastUpdate": {"name": "app-2"}}))
        .expect("status");
        assert_eq!(
            log_target(Some("x"), Some(&status), &rows).as_deref(),
            Some("x")
        );
        assert_eq!(
            log_target(None, Some(&status), &rows).as_deref(),
            Some("app-3")
        );
        let finished = pulumi_operator_api::StackStatus {
            current_update: None,
            ..status
        };
        assert_eq!(
            log_target(None, Some(&finished), &rows).as_deref(),
            Some("app-2")
        );
        assert_eq!(log_target(None, None, &rows).as_deref(), Some("app-1"));
        assert_eq!(log_target(None, None, &[]), None);
    }

    #[test]
    fn a_failure_shows_its_reason_and_message() {
        let failed = update(
            "app-3",
            "up",
            json!({"message": "the program failed\ndetails",
            "conditions": [cond("Failed", "True", "UpdateFailed")]}),
            json!({}),
        );
        let row = history_row(&failed);
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().expect("time");
        let c = cells(&row, now);
        assert_eq!(c[2].text, "Failed (UpdateFailed)");
        assert_eq!(c[6].text, "the program failed…");
        assert_eq!(c[4].text, "-");
    }
}
