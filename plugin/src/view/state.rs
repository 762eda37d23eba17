//! A Stack's state in one word (Ready, Failing, Stalled, Reconciling, Suspended), from its
//! status conditions, `lastUpdate` and `spec.suspend`, with the reason and message behind it.

use crate::view::format::Color;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use pulumi_operator_api::names;
use pulumi_operator_api::names::CONDITION_SUSPENDED;
use pulumi_operator_api::{Stack, StackUpdateStateMessage};
use serde::Serialize;

/// Where a Stack stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum State {
    /// Deployed and up to date (`Ready=True` for the current generation).
    Ready,
    /// The last operation failed and the operator retries it.
    Failing,
    /// Nothing happens without outside help (`Stalled=True`): fix the spec or the source, or
    /// ask for a new run.
    Stalled,
    /// Work is under way or due (`Reconciling=True`, or not yet looked at).
    Reconciling,
    /// `spec.suspend` is set: no new operation starts.
    Suspended,
}

impl State {
    /// The word shown.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ready => "Ready",
            State::Failing => "Failing",
            State::Stalled => "Stalled",
            State::Reconciling => "Reconciling",
            State::Suspended => "Suspended",
        }
    }

    /// Its colour on a terminal.
    pub fn color(self) -> Color {
        match self {
            State::Ready => Color::Green,
            State::Failing | State::Stalled => Color::Red,
            State::Reconciling => Color::Yellow,
            State::Suspended => Color::Blue,
        }
    }
}

/// A Stack's state with the reason and message behind it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The state.
    pub state: State,
    /// The reason of the condition that decided it ("" when Ready).
    pub reason: String,
    /// What it means, from the condition or the last operation.
    pub message: String,
}

/// The condition of this type, if the status has it.
pub fn condition<'a>(stack: &'a Stack, kind: &str) -> Option<&'a Condition> {
    stack
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

fn is_true<'a>(stack: &'a Stack, kind: &str) -> Option<&'a Condition> {
    condition(stack, kind).filter(|c| c.status == names::STATUS_TRUE)
}

fn summary(state: State, reason: &str, message: &str) -> Summary {
    Summary {
        state,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

fn suspended_summary(stack: &Stack) -> Summary {
    let running = stack
        .status
        .as_ref()
        .and_then(|s| s.current_update.as_ref())
        .and_then(|c| c.name.clone());
    let message = match running {
        Some(name) => format!("the running operation {name} finishes; no new one starts"),
        None => "no operation starts until the Stack is resumed".to_string(),
    };
    let reason = is_true(stack, CONDITION_SUSPENDED)
        .map(|c| c.reason.clone())
        .unwrap_or_else(|| "Suspended".into());
    summary(State::Suspended, &reason, &message)
}

/// Reconciling reasons that mean "retrying after a failure".
const RETRY_REASONS: [&str; 2] = [
    names::REASON_RETRYING_AFTER_FAILURE,
    names::REASON_PREVIEW_FAILED,
];

/// The state of a Stack; `suspended` is its `spec.suspend`.
pub fn summarize(stack: &Stack, suspended: bool) -> Summary {
    if suspended || is_true(stack, CONDITION_SUSPENDED).is_some() {
        return suspended_summary(stack);
    }
    if let Some(c) = is_true(stack, names::CONDITION_STALLED) {
        return summary(State::Stalled, &c.reason, &c.message);
    }
    let Some(status) = stack.status.as_ref() else {
        return summary(
            State::Reconciling,
            "Pending",
            "the operator has not processed this Stack yet",
        );
    };
    let reconciling = is_true(stack, names::CONDITION_RECONCILING);
    let last = status.last_update.as_ref();
    let failed = last.is_some_and(|l| l.state == Some(StackUpdateStateMessage::Failed));
    let retrying = reconciling.is_some_and(|c| RETRY_REASONS.contains(&c.reason.as_str()));
    if failed && (status.current_update.is_none() || retrying) {
        let message = last.and_then(|l| l.message.clone()).unwrap_or_default();
        let reason = reconciling.map_or(names::REASON_UPDATE_FAILED, |c| c.reason.as_str());
        return summary(State::Failing, reason, &message);
    }
    let current = status.observed_generation == stack.metadata.generation;
    if current
        && is_true(stack, names::CONDITION_READY).is_some()
        && status.current_update.is_none()
    {
        return summary(State::Ready, "", "");
    }
    match reconciling {
        Some(c) => summary(State::Reconciling, &c.reason, &c.message),
        None => summary(
            State::Reconciling,
            names::REASON_NOT_READY_IN_PROGRESS,
            names::MESSAGE_NOT_READY_IN_PROGRESS,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stack(status: serde_json::Value) -> Stack {
        serde_json::from_value(json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "app", "namespace": "ns", "generation": 2},
            "spec": {"stack": "dev"},
            "status": status,
        }))
        .expect("a Stack")
    }

    fn cond(kind: &str, status: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn ready_needs_the_current_generation() {
        let ready = stack(json!({
            "observedGeneration": 2,
            "conditions": [cond("Ready", "True", "ProcessingCompleted", "ok")],
            "lastUpdate": {"state": "succeeded", "type": "up"},
        }));
        assert_eq!(summarize(&ready, false).state, State::Ready);
        let mut old = ready.clone();
        old.metadata.generation = Some(3);
        let s = summarize(&old, false);
        assert_eq!(s.state, State::Reconciling);
        assert_eq!(s.reason, "NotReadyInProgress");
    }

    #[test]
    fn stalled_wins_over_everything_but_suspend() {
        let st = stack(json!({
            "observedGeneration": 2,
            "conditions": [cond("Stalled", "True", "SpecInvalid", "bad spec"),
                           cond("Ready", "False", "NotReadyStalled", "stalled")],
            "lastUpdate": {"state": "failed", "message": "boom"},
        }));
        let s = summarize(&st, false);
        assert_eq!(
            (s.state, s.reason.as_str(), s.message.as_str()),
            (State::Stalled, "SpecInvalid", "bad spec")
        );
        let s = summarize(&st, true);
        assert_eq!(s.state, State::Suspended);
        assert_eq!(s.message, "no operation starts until the Stack is resumed");
    }

    #[test]
    fn a_failed_last_operation_is_failing_until_something_else_runs() {
        let failing = stack(json!({
            "observedGeneration": 2,
            "conditions": [cond("Reconciling", "True", "RetryingAfterFailure", "1 update failure(s)")],
            "lastUpdate": {"state": "failed", "message": "the program failed"},
        }));
        let s = summarize(&failing, false);
        assert_eq!(
            (s.state, s.reason.as_str(), s.message.as_str()),
            (State::Failing, "RetryingAfterFailure", "the program failed")
        );
        // A retry in flight is still failing; a run for a new commit is reconciling.
        let retry = stack(json!({
            "conditions": [cond("Reconciling", "True", "RetryingAfterFailure", "1")],
            "lastUpdate": {"state": "failed"}, "currentUpdate": {"name": "app-2"},
        }));
        assert_eq!(summarize(&retry, false).state, State::Failing);
        let fresh = stack(json!({
            "conditions": [cond("Reconciling", "True", "StackProcessing", "stack is being processed")],
            "lastUpdate": {"state": "failed"}, "currentUpdate": {"name": "app-2"},
        }));
        let s = summarize(&fresh, false);
        assert_eq!(
            (s.state, s.reason.as_str()),
            (State::Reconciling, "StackProcessing")
        );
    }

    #[test]
    fn suspended_names_the_operation_that_still_finishes() {
        let running = stack(json!({"currentUpdate": {"name": "app-7"}}));
        let s = summarize(&running, true);
        assert_eq!(s.state, State::Suspended);
        assert!(s.message.contains("app-7 finishes"), "{}", s.message);
        // The operator's condition alone also says so.
        let by_condition =
            stack(json!({"conditions": [cond("Suspended", "True", "Suspended", "x")]}));
        assert_eq!(summarize(&by_condition, false).state, State::Suspended);
    }

    #[test]
    fn a_new_stack_is_pending() {
        let mut s = stack(json!({}));
        s.status = None;
        let sum = summarize(&s, false);
        assert_eq!(
            (sum.state, sum.reason.as_str()),
            (State::Reconciling, "Pending")
        );
        assert_eq!(State::Failing.color(), Color::Red);
    }
}
