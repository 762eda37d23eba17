//! `kubectl pulumi get`: one row per Stack (state, last operation, age, reason).

use crate::view::format::{age, age_between, short, Cell, Color};
use crate::view::state::{summarize, State};
use kube::ResourceExt;
use pulumi_operator_api::{Stack, StackUpdateStateMessage};
use serde::Serialize;

/// A Stack as read from the cluster, with its `spec.suspend` read from the raw object (so that
/// the plugin works whether or not its API types know the field).
#[derive(Clone, Debug)]
pub struct Viewed {
    /// The typed Stack.
    pub stack: Stack,
    /// `spec.suspend`.
    pub suspended: bool,
}

impl Viewed {
    /// Splits a raw Stack object (JSON) into the typed Stack and `spec.suspend`.
    pub fn from_json(value: serde_json::Value) -> Result<Viewed, serde_json::Error> {
        let suspended = value
            .pointer("/spec/suspend")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        Ok(Viewed {
            stack: serde_json::from_value(value)?,
            suspended,
        })
    }
}

/// The last finished operation of a Stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// The Update's name.
    pub name: String,
    /// `up`, `preview`, `destroy` or `refresh`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `succeeded` or `failed`.
    pub state: String,
    /// When its result was recorded (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// One Stack in `get`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StackRow {
    /// The Stack's namespace.
    pub namespace: String,
    /// The Stack's name.
    pub name: String,
    /// Ready, Failing, Stalled, Reconciling or Suspended.
    pub state: State,
    /// The reason behind the state.
    pub reason: String,
    /// What it means.
    pub message: String,
    /// The last finished operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// The operation running now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_operation: Option<String>,
    /// When the Stack was created (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(skip)]
    last_time: Option<jiff::Timestamp>,
    #[serde(skip)]
    created_time: Option<jiff::Timestamp>,
}

fn last_operation(stack: &Stack) -> (Option<LastOperation>, Option<jiff::Timestamp>) {
    let Some(last) = stack.status.as_ref().and_then(|s| s.last_update.as_ref()) else {
        return (None, None);
    };
    let time = last.last_resync_time.as_ref().map(|t| t.0);
    let op = LastOperation {
        name: last.name.clone().unwrap_or_default(),
        kind: last
            .update_type
            .as_ref()
            .map(|t| t.to_string())
            .unwrap_or_default(),
        state: last
            .state
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default(),
        time: time.map(|t| t.to_string()),
    };
    (Some(op), time)
}

/// The row of one Stack.
pub fn row(viewed: &Viewed) -> StackRow {
    let stack = &viewed.stack;
    let summary = summarize(stack, viewed.suspended);
    let (last, last_time) = last_operation(stack);
    let created_time = stack.metadata.creation_timestamp.as_ref().map(|t| t.0);
    StackRow {
        namespace: stack.namespace().unwrap_or_default(),
        name: stack.name_any(),
        state: summary.state,
        reason: summary.reason,
        message: summary.message,
        last_operation: last,
        current_operation: stack
            .status
            .as_ref()
            .and_then(|s| s.current_update.as_ref())
            .and_then(|c| c.name.clone()),
        created: created_time.map(|t| t.to_string()),
        last_time,
        created_time,
    }
}

fn last_cell(row: &StackRow, now: jiff::Timestamp) -> Cell {
    let Some(last) = &row.last_operation else {
        return Cell::plain("");
    };
    let color = match last.state.as_str() {
        s if s == StackUpdateStateMessage::Succeeded.as_str() => Some(Color::Green),
        s if s == StackUpdateStateMessage::Failed.as_str() => Some(Color::Red),
        _ => None,
    };
    let when = match row.last_time {
        Some(t) => format!(" {} ago", age(now.as_second() - t.as_second())),
        None => String::new(),
    };
    Cell::colored(format!("{} {}{when}", last.kind, last.state), color)
}

/// The table headers of `get` (`all`: with the NAMESPACE column).
pub fn headers(all: bool) -> Vec<&'static str> {
    let mut h = vec!["NAME", "STATE", "LAST OPERATION", "AGE", "REASON"];
    if all {
        h.insert(0, "NAMESPACE");
    }
    h
}

/// The table cells of one row.
pub fn cells(row: &StackRow, all: bool, now: jiff::Timestamp) -> Vec<Cell> {
    let reason = match (&row.current_operation, row.reason.as_str()) {
        (Some(op), "") => format!("running {op}"),
        (_, r) => short(r, 40),
    };
    let mut c = vec![
        Cell::plain(&row.name),
        Cell::colored(row.state.as_str(), Some(row.state.color())),
        last_cell(row, now),
        Cell::plain(age_between(row.created_time, Some(now))),
        Cell::plain(reason),
    ];
    if all {
        c.insert(0, Cell::plain(&row.namespace));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::format::table;
    use serde_json::json;

    fn viewed(status: serde_json::Value, suspend: bool) -> Viewed {
        Viewed::from_json(json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "app", "namespace": "team", "generation": 1,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"stack": "dev", "suspend": suspend},
            "status": status,
        }))
        .expect("a Stack")
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T01:00:00Z".parse().expect("a time")
    }

    #[test]
    fn a_ready_stack_shows_its_last_operation() {
        let v = viewed(
            json!({"observedGeneration": 1,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "ProcessingCompleted",
                                   "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                   "lastUpdate": {"name": "app-1", "type": "up", "state": "succeeded",
                                  "lastResyncTime": "2026-01-01T00:55:00Z"}}),
            false,
        );
        let r = row(&v);
        assert_eq!(r.state, State::Ready);
        let text = table(&headers(true), &[cells(&r, true, now())], false);
        let want = "NAMESPACE   NAME   STATE   LAST OPERATION        AGE   REASON\n\
                    team        app    Ready   up succeeded 5m ago   60m   -\n";
        assert_eq!(text, want);
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["lastOperation"]["name"], "app-1");
        assert_eq!(json["state"], "Ready");
    }

    #[test]
    fn suspend_is_read_from_the_raw_object() {
        let v = viewed(json!({"currentUpdate": {"name": "app-2"}}), true);
        assert!(v.suspended);
        let r = row(&v);
        assert_eq!(r.state, State::Suspended);
        assert_eq!(r.current_operation.as_deref(), Some("app-2"));
        let c = cells(&r, false, now());
        assert_eq!(c[2].text, "-");
    }
}
