//! Whether a reconcile request or an approval has been handled, read from the Stack: the
//! pure half of `kubectl pulumi reconcile` and `approve`, which poll the Stack until these
//! functions say it is done.

use crate::view::plan::count_line;
use crate::view::rows::Viewed;
use crate::view::state::condition;
use crate::view::terminal::{terminal_safe as e, terminal_safe_text};
use kube::ResourceExt;
use pulumi_operator_api::names;
use pulumi_operator_api::{ApprovalState, Stack, StackStatus, StackUpdateStateMessage};

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Not handled yet; the text says what it waits for.
    Waiting(String),
    /// Handled: `ok` says whether it went well, the message what happened.
    Done {
        /// Whether it went well (the exit status).
        ok: bool,
        /// What happened.
        message: String,
    },
}

fn done(ok: bool, message: String) -> Progress {
    Progress::Done { ok, message }
}

/// `up app-4 succeeded` / `up app-4 failed: <message>`.
fn last_result(status: &StackStatus) -> (bool, String) {
    let Some(last) = status.last_update.as_ref() else {
        return (false, "no operation has finished".into());
    };
    let ok = last.state == Some(StackUpdateStateMessage::Succeeded);
    let kind = last
        .update_type
        .as_ref()
        .map(|t| t.to_string())
        .unwrap_or_default();
    let name = last.name.clone().unwrap_or_default();
    let state = last
        .state
        .as_ref()
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut message = format!("{} {} {}", e(&kind), e(&name), e(&state));
    if let Some(m) = last.message.as_ref().filter(|m| !ok && !m.is_empty()) {
        message.push_str(&format!(": {}", terminal_safe_text(m)));
    }
    (ok, message)
}

fn stalled(stack: &Stack) -> Option<String> {
    condition(stack, names::CONDITION_STALLED)
        .filter(|c| c.status == names::STATUS_TRUE)
        .map(|c| {
            let message = terminal_safe_text(&c.message);
            format!("the Stack is Stalled ({}): {message}", e(&c.reason))
        })
}

fn waiting_reason(stack: &Stack) -> String {
    condition(stack, names::CONDITION_RECONCILING)
        .filter(|c| c.status == names::STATUS_TRUE)
        .map(|c| format!("{}: {}", e(&c.reason), e(&c.message)))
        .unwrap_or_else(|| "waiting for the operator".into())
}

fn awaiting_plan(stack: &Stack, request: &str) -> Option<Progress> {
    let a = stack.status.as_ref()?.approval.as_ref()?;
    let plan = e(a.plan.as_deref()?);
    (a.state == Some(ApprovalState::AwaitingApproval)
        && a.reconcile_request.as_deref() == Some(request))
    .then(|| {
        let name = stack.name_any();
        done(
            true,
            format!(
                "the plan {plan} ({}) awaits approval: review it with `kubectl pulumi plan {name}`, \
                 approve it with `kubectl pulumi approve {name} --plan {plan}`",
                count_line(&a.changes)
            ),
        )
    })
}

/// Whether the reconcile request `request` has been handled: the operation it asked for has
/// finished (or a gated Stack's plan for it waits for approval), or the Stack cannot run it.
pub fn reconcile_progress(viewed: &Viewed, request: &str) -> Progress {
    let stack = &viewed.stack;
    let status = stack.status.clone().unwrap_or_default();
    let current = status.current_update.as_ref();
    let last_request = status
        .last_update
        .as_ref()
        .and_then(|l| l.reconcile_request.as_deref());
    if last_request == Some(request) && current.is_none() {
        let (ok, message) = last_result(&status);
        return done(ok, message);
    }
    let runs_it = current.is_some_and(|c| c.reconcile_request.as_deref() == Some(request));
    if viewed.suspended && !runs_it {
        let name = stack.name_any();
        return done(false, format!(
            "the Stack is suspended: nothing runs until it is resumed (`kubectl pulumi resume {name}`), \
             then the request is handled"
        ));
    }
    if status.observed_reconcile_request.as_deref() != Some(request) {
        return Progress::Waiting("waiting for the operator to see the request".into());
    }
    if let Some(c) = current {
        return Progress::Waiting(format!(
            "operation {} runs",
            e(c.name.as_deref().unwrap_or("?"))
        ));
    }
    if let Some(p) = awaiting_plan(stack, request) {
        return p;
    }
    match stalled(stack) {
        Some(message) => done(false, message),
        None => Progress::Waiting(waiting_reason(stack)),
    }
}

/// Whether the approval of `plan` has been handled: the plan's `up` has finished (`wait_up`)
/// or started, or the approval was refused because another plan is pending.
pub fn approve_progress(viewed: &Viewed, plan: &str, wait_up: bool) -> Progress {
    let Some(status) = viewed.stack.status.as_ref() else {
        return done(false, "the Stack has no status".into());
    };
    let Some(a) = status.approval.as_ref() else {
        return done(
            false,
            "the Stack no longer has a plan (was spec.approval turned off?)".into(),
        );
    };
    let pending = a.plan.as_deref().unwrap_or("");
    let applied = a.last_applied.as_deref() == Some(plan);
    let (shown, name) = (e(plan), viewed.stack.name_any());
    if applied && status.current_update.is_none() {
        let (ok, message) = last_result(status);
        return done(ok, format!("the plan {shown} was applied: {message}"));
    }
    if pending != plan && !applied {
        return done(
            false,
            format!(
            "approval refused (ApprovalRefused): the pending plan is now \"{}\", not \"{shown}\"; \
             review it with `kubectl pulumi plan {name}`", e(pending)
        ),
        );
    }
    match a.state {
        Some(ApprovalState::Applying) | Some(ApprovalState::Applied) if !wait_up => done(
            true,
            format!("the plan {shown} was approved (PlanApproved): its up runs"),
        ),
        Some(ApprovalState::Applying) | Some(ApprovalState::Applied) => Progress::Waiting(format!(
            "the plan {shown} was approved (PlanApproved): its up runs"
        )),
        _ => Progress::Waiting(format!(
            "the plan {shown} waits for the operator to take the approval"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn viewed(status: serde_json::Value, suspend: bool) -> Viewed {
        Viewed::from_json(json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "app", "namespace": "ns", "generation": 1},
            "spec": {"stack": "dev", "suspend": suspend},
            "status": status,
        }))
        .expect("a Stack")
    }

    fn waiting(p: &Progress) -> bool {
        matches!(p, Progress::Waiting(_))
    }

    #[test]
    fn a_request_is_handled_when_its_operation_has_finished() {
        let unseen = viewed(json!({"observedReconcileRequest": "old"}), false);
        assert!(waiting(&reconcile_progress(&unseen, "r1")));
        let running = viewed(
            json!({"observedReconcileRequest": "r1",
            "currentUpdate": {"name": "app-2", "reconcileRequest": "r1"},
            "lastUpdate": {"reconcileRequest": "old", "state": "succeeded"}}),
            false,
        );
        assert_eq!(
            reconcile_progress(&running, "r1"),
            Progress::Waiting("operation app-2 runs".into())
        );
        let ok = viewed(
            json!({"observedReconcileRequest": "r1",
            "lastUpdate": {"name": "app-2", "type": "up", "reconcileRequest": "r1", "state": "succeeded"}}),
            false,
        );
        assert_eq!(
            reconcile_progress(&ok, "r1"),
            done(true, "up app-2 succeeded".into())
        );
        let failed = viewed(
            json!({"observedReconcileRequest": "r1",
            "lastUpdate": {"name": "app-2", "type": "up", "reconcileRequest": "r1", "state": "failed",
                           "message": "boom"}}),
            false,
        );
        assert_eq!(
            reconcile_progress(&failed, "r1"),
            done(false, "up app-2 failed: boom".into())
        );
    }

    #[test]
    fn a_request_that_cannot_run_ends_the_wait() {
        let suspended = viewed(json!({"observedReconcileRequest": "old"}), true);
        let Progress::Done { ok, message } = reconcile_progress(&suspended, "r1") else {
            panic!()
        };
        assert!(!ok && message.contains("suspended"), "{message}");
        let stalled = viewed(
            json!({"observedReconcileRequest": "r1", "conditions": [
            {"type": "Stalled", "status": "True", "reason": "SpecInvalid", "message": "bad",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
            false,
        );
        assert_eq!(
            reconcile_progress(&stalled, "r1"),
            done(false, "the Stack is Stalled (SpecInvalid): bad".into())
        );
        let gated = viewed(
            json!({"observedReconcileRequest": "r1", "approval": {
            "plan": "app-plan-1", "state": "AwaitingApproval", "reconcileRequest": "r1",
            "changes": {"create": 2}}}),
            false,
        );
        let Progress::Done { ok, message } = reconcile_progress(&gated, "r1") else {
            panic!()
        };
        assert!(
            ok && message.contains("app-plan-1 (2 to create) awaits approval"),
            "{message}"
        );
        let prereq = viewed(
            json!({"observedReconcileRequest": "r1", "conditions": [
            {"type": "Reconciling", "status": "True", "reason": "PrerequisiteNotSatisfied", "message": "net",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
            false,
        );
        assert_eq!(
            reconcile_progress(&prereq, "r1"),
            Progress::Waiting("PrerequisiteNotSatisfied: net".into())
        );
    }

    #[test]
    fn what_the_stack_says_is_escaped() {
        let hide = "\x1b[2K\r\x1b[1A";
        let failed = viewed(
            json!({"observedReconcileRequest": "r1",
            "lastUpdate": {"name": format!("app-2{hide}"), "type": "up", "reconcileRequest": "r1",
                           "state": "failed", "message": format!("boom\n  delete db{hide}")}}),
            false,
        );
        assert_eq!(
            reconcile_progress(&failed, "r1"),
            done(
                false,
                "up app-2\\x1b[2K\\r\\x1b[1A failed: boom\n  delete db\\x1b[2K\\r\\x1b[1A".into()
            )
        );
        let gated = viewed(
            json!({"observedReconcileRequest": "r1", "approval": {
            "plan": "p1\u{202e}\n", "state": "AwaitingApproval", "reconcileRequest": "r1"}}),
            false,
        );
        let Progress::Done { message, .. } = reconcile_progress(&gated, "r1") else {
            panic!()
        };
        assert!(message.contains("--plan p1\\u{202e}\\n`"), "{message}");
        let replaced = viewed(
            json!({"approval": {"plan": "p2\u{9b}2K", "state": "AwaitingApproval"}}),
            false,
        );
        let Progress::Done { message, .. } = approve_progress(&replaced, "p1", true) else {
            panic!()
        };
        assert!(message.contains("now \"p2\\u{9b}2K\""), "{message}");
    }

    #[test]
    fn an_approval_is_applied_or_refused() {
        let pending = viewed(
            json!({"approval": {"plan": "p1", "state": "AwaitingApproval"}}),
            false,
        );
        assert!(waiting(&approve_progress(&pending, "p1", true)));
        let applying = viewed(
            json!({"approval": {"plan": "p1", "state": "Applying"},
                                     "currentUpdate": {"name": "app-3"}}),
            false,
        );
        assert!(waiting(&approve_progress(&applying, "p1", true)));
        assert!(matches!(
            approve_progress(&applying, "p1", false),
            Progress::Done { ok: true, .. }
        ));
        let applied = viewed(
            json!({"approval": {"plan": "p1", "state": "Applied", "lastApplied": "p1"},
            "lastUpdate": {"name": "app-3", "type": "up", "state": "succeeded"}}),
            false,
        );
        assert_eq!(
            approve_progress(&applied, "p1", true),
            done(true, "the plan p1 was applied: up app-3 succeeded".into())
        );
        let replaced = viewed(
            json!({"approval": {"plan": "p2", "state": "AwaitingApproval", "refused": "p1"}}),
            false,
        );
        let Progress::Done { ok, message } = approve_progress(&replaced, "p1", true) else {
            panic!()
        };
        assert!(
            !ok && message.contains("the pending plan is now \"p2\""),
            "{message}"
        );
        let gone = viewed(json!({}), false);
        assert!(matches!(
            approve_progress(&gone, "p1", true),
            Progress::Done { ok: false, .. }
        ));
    }
}
