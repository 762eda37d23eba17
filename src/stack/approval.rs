//! The plan-approval gate (`spec.approval`, an extension to PKO's API), as pure functions:
//! what a due `up` of a gated Stack does next (save a plan, wait for a person, apply the
//! approved plan), the Updates that do it, and how their results fold into `status.approval`.
//!
//! A plan is a `preview --save-plan` Update marked with [`SAVES_PLAN_ANNOTATION`]; its name is
//! the plan's id, so that `kubectl logs job/<plan>` shows the diff a person approves. The
//! operator keeps the saved plan in the Secret [`saved_plan_secret_name`], owned by that
//! Update; the `up` that applies it carries [`APPLIES_PLAN_ANNOTATION`] and gets the plan in
//! its run plan (`pulumi up --plan`). Like a drift check, a successful plan is not the Stack's
//! `lastUpdate` (it deployed nothing); a failed one is, so that the usual backoff applies.

use crate::stack::objects::{
    build_update, short_hash, TRIGGER_GENERATION_ANNOTATION, TRIGGER_REQUEST_ANNOTATION,
    TRIGGER_REVISION_ANNOTATION, TRIGGER_SPEC_DIGEST_ANNOTATION,
};
pub use crate::update::plan::{
    applied_plan, saves_plan, APPLIES_PLAN_ANNOTATION, SAVES_PLAN_ANNOTATION,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use pulumi_operator_api::{
    ApprovalState, ApprovalStatus, Stack, StackSpec, StackStatus, Update, UpdateType,
};
use std::collections::BTreeMap;

/// On a Stack: the id of the plan a person approves.
pub const APPROVE_ANNOTATION: &str = pulumi_operator_api::names::APPROVE_PLAN_ANNOTATION;
/// `Reconciling` while a plan waits for approval, and its Normal Event.
pub const REASON_AWAITING_APPROVAL: &str = "AwaitingApproval";
/// The Warning Event of an approval that names another plan than the pending one.
pub const EVENT_APPROVAL_REFUSED: &str = "ApprovalRefused";
/// The Normal Event of an approved plan whose `up` starts.
pub const EVENT_PLAN_APPROVED: &str = "PlanApproved";
/// The `--message` of a plan.
pub const PLAN_MESSAGE: &str = "Plan for approval";

/// Whether the Stack's `up`s wait for approval.
pub fn required(spec: &StackSpec) -> bool {
    spec.approval.as_ref().is_some_and(|a| a.required) && !spec.preview
}

/// What an operation is due for: plans are valid only for what they were made for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Due<'a> {
    pub generation: i64,
    pub revision: &'a str,
    pub request: &'a str,
}

/// Who let a plan through.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ApprovedBy {
    /// A person, through the annotation.
    Person,
    /// Nobody needed to: the plan changes nothing.
    NoChanges,
}

/// What a due `up` of a gated Stack does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// No plan for what is due: save one.
    Plan,
    /// The plan waits for approval; `refused` is an approval that names another plan.
    Wait {
        plan: String,
        refused: Option<String>,
    },
    /// Apply this plan.
    Apply { plan: String, by: ApprovedBy },
}

fn made_for(a: &ApprovalStatus, due: &Due<'_>) -> bool {
    a.generation == Some(due.generation)
        && a.revision.as_deref().unwrap_or("") == due.revision
        && a.reconcile_request.as_deref().unwrap_or("") == due.request
}

const OPERATIONS: [&str; 4] = pulumi_operator_api::names::PLAN_OPERATIONS;

fn changes_nothing(a: &ApprovalStatus) -> bool {
    OPERATIONS
        .iter()
        .all(|op| a.changes.get(*op).copied().unwrap_or(0) <= 0)
}

/// The next step of a due `up` of a gated Stack, given the Stack's status and its
/// [`APPROVE_ANNOTATION`].
pub fn step(status: &StackStatus, approved: Option<&str>, due: &Due<'_>) -> Step {
    let Some(pending) = status
        .approval
        .as_ref()
        .filter(|a| a.plan.is_some() && made_for(a, due))
    else {
        return Step::Plan;
    };
    let plan = pending.plan.clone().unwrap_or_default();
    match pending.state {
        Some(ApprovalState::AwaitingApproval) => {}
        // Approved, and its `up` was claimed but may not have been created (an API error):
        // the same `up` again (its name is deterministic: found if it exists).
        Some(ApprovalState::Applying) => {
            return Step::Apply {
                plan,
                by: ApprovedBy::Person,
            }
        }
        _ => return Step::Plan,
    }
    if changes_nothing(pending) {
        return Step::Apply {
            plan,
            by: ApprovedBy::NoChanges,
        };
    }
    match approved.map(str::trim).filter(|a| !a.is_empty()) {
        Some(a) if a == plan => Step::Apply {
            plan,
            by: ApprovedBy::Person,
        },
        // The approval of the plan applied last is not a new approval: it is just still there.
        Some(a) if Some(a) != pending.last_applied.as_deref() => Step::Wait {
            plan,
            // An object name is at most 253 characters; anything longer is cut for messages.
            refused: Some(a.chars().take(253).collect()),
        },
        _ => Step::Wait {
            plan,
            refused: None,
        },
    }
}

/// `1 to create, 2 to update` (nothing: `no changes`).
pub fn summary(changes: &BTreeMap<String, i64>) -> String {
    pulumi_operator_api::names::change_summary(changes)
}

/// The condition message of a Stack whose plan waits.
pub fn waiting_message(stack: &str, status: &StackStatus, refused: Option<&str>) -> String {
    let a = status.approval.clone().unwrap_or_default();
    let plan = a.plan.unwrap_or_default();
    let mut message = format!(
        "the plan {plan} ({}) awaits approval; its diff: kubectl logs job/{plan}; approve it: \
         kubectl annotate stack {stack} {APPROVE_ANNOTATION}={plan} --overwrite",
        summary(&a.changes)
    );
    if let Some(r) = refused {
        message.push_str(&format!(
            "; the approval of {r:?} was refused: it names a stale or unknown plan, not the pending one"
        ));
    }
    message
}

/// The preview that saves a plan for the due `up`: a name of its own, derived from what it is
/// for and from the plan before it (a restarted operator computes the same name; a new plan
/// for the same trigger, after a failed `up`, gets a new one).
pub fn build_plan(stack: &Stack, reason: &str, revision: &str) -> Update {
    let mut update = build_update(stack, UpdateType::Preview, reason, revision);
    let status = stack.status.as_ref();
    let last = status
        .and_then(|s| s.last_update.as_ref())
        .and_then(|l| l.name.clone())
        .unwrap_or_default();
    let previous = status
        .and_then(|s| s.approval.as_ref())
        .and_then(|a| a.plan.clone())
        .unwrap_or_default();
    let request = update
        .annotations()
        .get(TRIGGER_REQUEST_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    update.metadata.name = Some(format!(
        "{}-plan-{}",
        stack.name_any(),
        short_hash(&[
            stack.uid().unwrap_or_default().as_str(),
            &stack.metadata.generation.unwrap_or(0).to_string(),
            &request,
            revision,
            &last,
            &previous,
        ])
    ));
    update.spec.message = Some(format!("{PLAN_MESSAGE}: {reason}"));
    update.spec.expect_no_changes = None;
    // Kept until the history limit removes it (never while it is the pending plan): a plan
    // may wait for a person longer than a day.
    update.spec.ttl_after_completed = None;
    update
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(SAVES_PLAN_ANNOTATION.to_string(), "true".to_string());
    update
}

/// The `up` that applies the plan `plan`.
pub fn build_apply(
    stack: &Stack,
    kind: UpdateType,
    reason: &str,
    revision: &str,
    plan: &str,
) -> Update {
    let mut update = build_update(stack, kind, reason, revision);
    update
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(APPLIES_PLAN_ANNOTATION.to_string(), plan.to_string());
    update
}

/// Folds a successful plan into the status: it waits for approval. The claim is released;
/// `lastUpdate` is untouched. Returns the plan's id.
pub fn absorb_plan(status: &mut StackStatus, update: &Update, now: &Time) -> String {
    status.current_update = None;
    let name = update.name_any();
    let result = update.status.clone().unwrap_or_default();
    let get = |k: &str| update.annotations().get(k).cloned();
    let last_applied = status
        .approval
        .as_ref()
        .and_then(|a| a.last_applied.clone());
    status.approval = Some(Box::new(ApprovalStatus {
        plan: Some(name.clone()),
        state: Some(ApprovalState::AwaitingApproval),
        planned_time: Some(now.clone()),
        generation: get(TRIGGER_GENERATION_ANNOTATION).and_then(|g| g.parse().ok()),
        revision: get(TRIGGER_REVISION_ANNOTATION),
        reconcile_request: get(TRIGGER_REQUEST_ANNOTATION),
        changes: result.change_counts.clone(),
        resources: result.changes.clone(),
        refused: None,
        last_applied,
        spec_digest: get(TRIGGER_SPEC_DIGEST_ANNOTATION),
    }));
    name
}

/// The approved plan's `up` was started.
pub fn mark_applying(status: &mut StackStatus, plan: &str) {
    if let Some(a) = status
        .approval
        .as_mut()
        .filter(|a| a.plan.as_deref() == Some(plan))
    {
        a.state = Some(ApprovalState::Applying);
    }
}

/// The `up` of a plan ended: whatever its result, the plan is used up (a retry needs a new
/// plan and a new approval).
pub fn mark_applied(status: &mut StackStatus, plan: &str) {
    let a = status.approval.get_or_insert_with(Default::default);
    if a.plan.as_deref() == Some(plan) {
        a.state = Some(ApprovalState::Applied);
    }
    a.last_applied = Some(plan.to_string());
}

/// The plan a gated Stack must keep (history pruning leaves it): the pending or applying one.
pub fn protected_plan(status: &StackStatus) -> Option<&str> {
    status
        .approval
        .as_ref()
        .filter(|a| a.state != Some(ApprovalState::Applied))
        .and_then(|a| a.plan.as_deref())
}

/// Removes what the gate wrote (it was turned off).
pub fn forget(status: &mut StackStatus) {
    status.approval = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stack(status: serde_json::Value) -> Stack {
        serde_json::from_value(json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "app", "namespace": "ns", "uid": "u-1", "generation": 3,
                         "annotations": {"pulumi.com/reconciliation-request": "r1"}},
            "spec": {"stack": "dev", "approval": {"required": true}},
            "status": status,
        }))
        .unwrap()
    }

    fn due() -> Due<'static> {
        Due {
            generation: 3,
            revision: "abc",
            request: "r1",
        }
    }

    fn finished_plan(stack: &Stack, counts: serde_json::Value) -> Update {
        let mut plan = build_plan(stack, "New stack generation: 3", "abc");
        plan.status = Some(
            serde_json::from_value(json!({
                "changeCounts": counts,
                "changes": [{"urn": "urn:pulumi:dev::p::random:index/randomString:RandomString::pw", "operation": "create"}],
            }))
            .unwrap(),
        );
        plan
    }

    #[test]
    fn a_plan_is_saved_then_waits_then_is_applied_once_approved() {
        let s = stack(json!({}));
        let mut status = StackStatus::default();
        assert_eq!(step(&status, None, &due()), Step::Plan);

        let plan = finished_plan(&s, json!({"create": 1, "same": 2}));
        let plan_name = plan.name_any();
        assert!(plan_name.starts_with("app-plan-"));
        assert!(saves_plan(&plan));
        assert_eq!(plan.spec.ttl_after_completed, None);
        assert_eq!(plan.spec.update_type, Some(UpdateType::Preview));
        status.current_update = Some(Default::default());
        let now = Time(jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(absorb_plan(&mut status, &plan, &now), plan_name);
        assert!(status.current_update.is_none());
        assert_eq!(protected_plan(&status), Some(plan_name.as_str()));

        // Waiting, with or without a stale approval.
        assert_eq!(
            step(&status, None, &due()),
            Step::Wait {
                plan: plan_name.clone(),
                refused: None
            }
        );
        assert_eq!(
            step(&status, Some("app-plan-0000000000"), &due()),
            Step::Wait {
                plan: plan_name.clone(),
                refused: Some("app-plan-0000000000".into())
            }
        );
        let message = waiting_message("app", &status, None);
        assert!(message.contains("1 to create"), "{message}");
        assert!(message.contains(&format!(
            "kubectl annotate stack app pulumi.com/approve-plan={plan_name} --overwrite"
        )));
        assert!(message.contains(&format!("kubectl logs job/{plan_name}")));

        // Approved: applied, by an up that names it.
        assert_eq!(
            step(&status, Some(&format!(" {plan_name} ")), &due()),
            Step::Apply {
                plan: plan_name.clone(),
                by: ApprovedBy::Person
            }
        );
        let up = build_apply(
            &s,
            UpdateType::Up,
            "New stack generation: 3",
            "abc",
            &plan_name,
        );
        assert_eq!(applied_plan(&up), Some(plan_name.as_str()));
        assert!(!saves_plan(&up));
        mark_applying(&mut status, &plan_name);
        assert_eq!(protected_plan(&status), Some(plan_name.as_str()));
        // Claimed but perhaps never created: applied again, whatever the annotation says now.
        assert_eq!(
            step(&status, None, &due()),
            Step::Apply {
                plan: plan_name.clone(),
                by: ApprovedBy::Person
            }
        );

        // Used up: a retry of the same trigger saves a new plan, under a new name.
        mark_applied(&mut status, &plan_name);
        assert_eq!(protected_plan(&status), None);
        assert_eq!(step(&status, Some(&plan_name), &due()), Step::Plan);
        let mut after = s.clone();
        after.status = Some(status.clone());
        assert_ne!(build_plan(&after, "r", "abc").name_any(), plan_name);
        // The old approval still on the Stack is not refused against the next plan.
        let next = finished_plan(&after, json!({"update": 1}));
        absorb_plan(&mut status, &next, &now);
        assert_eq!(
            step(&status, Some(&plan_name), &due()),
            Step::Wait {
                plan: next.name_any(),
                refused: None
            }
        );
    }

    #[test]
    fn a_plan_is_only_for_what_it_was_made_for() {
        let s = stack(json!({}));
        let mut status = StackStatus::default();
        let plan = finished_plan(&s, json!({"update": 2}));
        let name = plan.name_any();
        absorb_plan(&mut status, &plan, &Time(jiff::Timestamp::UNIX_EPOCH));
        let approved = Some(name.as_str());
        assert!(matches!(
            step(&status, approved, &due()),
            Step::Apply { .. }
        ));
        for other in [
            Due {
                generation: 4,
                ..due()
            },
            Due {
                revision: "def",
                ..due()
            },
            Due {
                request: "r2",
                ..due()
            },
        ] {
            assert_eq!(step(&status, approved, &other), Step::Plan, "{other:?}");
        }
        // Deterministic: the same trigger computes the same plan name (re-attached after a
        // restart), another trigger another one.
        assert_eq!(build_plan(&s, "x", "abc").name_any(), name);
        assert_ne!(build_plan(&s, "x", "def").name_any(), name);
    }

    #[test]
    fn a_plan_that_changes_nothing_needs_no_approval() {
        let s = stack(json!({}));
        let mut status = StackStatus::default();
        let plan = finished_plan(&s, json!({"same": 4}));
        absorb_plan(&mut status, &plan, &Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            step(&status, None, &due()),
            Step::Apply {
                plan: plan.name_any(),
                by: ApprovedBy::NoChanges
            }
        );
        assert_eq!(summary(&BTreeMap::new()), "no changes");
        assert_eq!(
            summary(&BTreeMap::from([
                ("delete".to_string(), 1),
                ("create".to_string(), 2),
                ("same".to_string(), 9)
            ])),
            "2 to create, 1 to delete"
        );
    }

    #[test]
    fn only_gated_non_preview_stacks_are_gated() {
        let mut spec = stack(json!({})).spec;
        assert!(required(&spec));
        spec.preview = true;
        assert!(!required(&spec));
        spec.preview = false;
        spec.approval = None;
        assert!(!required(&spec));
    }
}
