//! `spec.suspend` (an extension to PKO's API, Flux's convention), as pure functions: the
//! `Suspended` condition and its transitions, what a suspended Stack that runs nothing shows,
//! and why suspending and resuming is not a new generation.
//!
//! Toggling `spec.suspend` bumps `metadata.generation`, which PKO's decision reads as "the spec
//! changed, run again". Each result and each saved plan records the digest of the spec it ran
//! for with `suspend` left out (`StackSpec::digest`); when that digest is the current one, the
//! result is carried forward to the current generation, so that a resume with nothing new
//! starts nothing, and a resume after a change starts exactly one operation.

use crate::stack::status::{mark_not_ready, mark_result, set_condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pulumi_operator_api::{names, StackStatus};

/// The message of `Suspended=True`.
pub const SUSPENDED_MESSAGE: &str = "spec.suspend is true: no new operation starts (an \
     operation already running finishes); set it to false to resume";

/// A change of the `Suspended` condition, for its Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Suspended,
    Resumed,
}

/// Moves the last result and the pending plan to `generation` when they were made for the
/// same spec as the current one (`digest`, computed only when a record is of another
/// generation: it serializes the whole spec, and most reconciles have nothing to move).
pub fn carry_forward(status: &mut StackStatus, generation: i64, digest: impl FnOnce() -> String) {
    let behind = |g: Option<i64>, d: &Option<String>| d.is_some() && g != Some(generation);
    let last_behind = status
        .last_update
        .as_ref()
        .is_some_and(|l| behind(l.generation, &l.spec_digest));
    let plan_behind = status
        .approval
        .as_ref()
        .is_some_and(|a| behind(a.generation, &a.spec_digest));
    if !last_behind && !plan_behind {
        return;
    }
    let digest = Some(digest());
    if let Some(last) = status
        .last_update
        .as_mut()
        .filter(|l| l.spec_digest == digest)
    {
        last.generation = Some(generation);
    }
    if let Some(plan) = status.approval.as_mut().filter(|a| a.spec_digest == digest) {
        plan.generation = Some(generation);
    }
}

fn suspended_condition(status: &StackStatus) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == names::CONDITION_SUSPENDED && c.status == names::STATUS_TRUE)
}

/// Sets `Suspended=True` while `suspended`, removes it otherwise; the change, if any.
pub fn mark(
    status: &mut StackStatus,
    suspended: bool,
    generation: i64,
    now: &Time,
) -> Option<Transition> {
    let was = suspended_condition(status);
    if suspended {
        set_condition(
            status,
            names::CONDITION_SUSPENDED,
            names::STATUS_TRUE,
            names::REASON_SUSPENDED,
            SUSPENDED_MESSAGE,
            generation,
            now,
        );
    } else if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != names::CONDITION_SUSPENDED);
    }
    match (was, suspended) {
        (false, true) => Some(Transition::Suspended),
        (true, false) => Some(Transition::Resumed),
        _ => None,
    }
}

/// What waits for the resume, in words ("" when nothing is known to wait). The source is not
/// read while suspended, so a new commit shows only once resumed.
pub fn waiting(status: &StackStatus, generation: i64, request: &str) -> String {
    let Some(last) = status.last_update.as_ref() else {
        return "the first update waits for the resume".into();
    };
    let mut waits = Vec::new();
    if last.generation != Some(generation) {
        waits.push(format!("generation {generation}"));
    }
    if last.reconcile_request.as_deref().unwrap_or("") != request {
        waits.push(format!("sync request {request:?}"));
    }
    if waits.is_empty() {
        String::new()
    } else {
        format!("{} wait(s) for the resume", waits.join(" and "))
    }
}

/// The conditions of a suspended Stack that runs nothing: the last result as it stands
/// (`Ready` after a success, `Stalled` after too many failures), but never `Reconciling`:
/// nothing is in progress until the resume.
pub fn fold_idle(status: &mut StackStatus, generation: i64, request: &str, now: &Time) {
    // What waits depends on the last result only, which folding it does not change.
    let waits = waiting(status, generation, request);
    mark_result(status, generation, now);
    let reconciling = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == names::CONDITION_RECONCILING && c.status == names::STATUS_TRUE);
    if reconciling || status.last_update.is_none() {
        let message = if waits.is_empty() {
            "suspended".to_string()
        } else {
            format!("suspended; {waits}")
        };
        mark_not_ready(status, names::REASON_SUSPENDED, &message, generation, now);
    }
    let message = if waits.is_empty() {
        SUSPENDED_MESSAGE.to_string()
    } else {
        format!("{SUSPENDED_MESSAGE}; {waits}")
    };
    set_condition(
        status,
        names::CONDITION_SUSPENDED,
        names::STATUS_TRUE,
        names::REASON_SUSPENDED,
        &message,
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::{ApprovalStatus, StackUpdateState, StackUpdateStateMessage};

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000).expect("valid"))
    }

    fn succeeded(generation: i64, digest: &str) -> StackStatus {
        StackStatus {
            last_update: Some(StackUpdateState {
                state: Some(StackUpdateStateMessage::Succeeded),
                generation: Some(generation),
                reconcile_request: Some(String::new()),
                spec_digest: Some(digest.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn condition<'a>(status: &'a StackStatus, type_: &str) -> Option<&'a str> {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .map(|c| c.reason.as_str())
    }

    #[test]
    fn a_result_for_the_same_spec_moves_to_the_new_generation() {
        let mut status = succeeded(3, "sha256:a");
        status.approval = Some(Box::new(ApprovalStatus {
            generation: Some(3),
            spec_digest: Some("sha256:a".into()),
            ..Default::default()
        }));
        carry_forward(&mut status, 5, || "sha256:a".into());
        assert_eq!(
            status.last_update.as_ref().and_then(|l| l.generation),
            Some(5)
        );
        assert_eq!(status.approval.as_ref().and_then(|a| a.generation), Some(5));
    }

    #[test]
    fn a_result_for_another_spec_or_without_a_digest_stays() {
        let mut status = succeeded(3, "sha256:a");
        carry_forward(&mut status, 5, || "sha256:b".into());
        assert_eq!(
            status.last_update.as_ref().and_then(|l| l.generation),
            Some(3)
        );
        let mut old = succeeded(3, "x");
        if let Some(l) = old.last_update.as_mut() {
            l.spec_digest = None;
        }
        carry_forward(&mut old, 5, || "x".into());
        assert_eq!(old.last_update.as_ref().and_then(|l| l.generation), Some(3));
    }

    #[test]
    fn the_condition_appears_and_goes_with_one_transition_each() {
        let mut status = succeeded(1, "d");
        assert_eq!(
            mark(&mut status, true, 2, &now()),
            Some(Transition::Suspended)
        );
        assert_eq!(
            condition(&status, names::CONDITION_SUSPENDED),
            Some("Suspended")
        );
        assert_eq!(mark(&mut status, true, 2, &now()), None);
        assert_eq!(
            mark(&mut status, false, 3, &now()),
            Some(Transition::Resumed)
        );
        assert_eq!(condition(&status, names::CONDITION_SUSPENDED), None);
        assert_eq!(mark(&mut status, false, 3, &now()), None);
    }

    #[test]
    fn an_idle_suspended_stack_is_never_reconciling() {
        let mut failing = succeeded(1, "d");
        if let Some(l) = failing.last_update.as_mut() {
            l.state = Some(StackUpdateStateMessage::Failed);
            l.failures = Some(1);
        }
        fold_idle(&mut failing, 1, "", &now());
        assert_eq!(condition(&failing, names::CONDITION_RECONCILING), None);
        assert_eq!(
            condition(&failing, names::CONDITION_READY),
            Some("Suspended")
        );

        let mut ready = succeeded(1, "d");
        fold_idle(&mut ready, 2, "r1", &now());
        assert_eq!(
            condition(&ready, names::CONDITION_READY),
            Some(names::REASON_PROCESSING_COMPLETED)
        );
        let message = ready
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == names::CONDITION_SUSPENDED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(
            message.contains("generation 2 and sync request \"r1\""),
            "{message}"
        );

        let mut never = StackStatus::default();
        fold_idle(&mut never, 1, "", &now());
        assert_eq!(condition(&never, names::CONDITION_READY), Some("Suspended"));
    }
}
