//! Previews again when the administrator's policy packs covering a Stack change (a pack, its
//! revision, its configuration or the selectors), as pure functions. Each operation records
//! the digest of the packs it ran with (`status.policy.digest`); a synced Stack whose covering
//! packs now have another digest gets a policy check: a `preview` marked with
//! [`POLICY_CHECK_ANNOTATION`] that, like a drift check, is not the Stack's `lastUpdate` and
//! never changes `Ready`: it reports what the packs now say (`status.policy`,
//! `PolicyWarnings`). At most [`MAX_IN_FLIGHT`] checks run at once in the operator, so a change
//! covering 1,000 Stacks does not start 1,000 operations together.

use crate::stack::objects::{build_update, short_hash};
use crate::stack::status::mark_policy_warnings;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use pulumi_operator_api::policy::PolicyReport;
use pulumi_operator_api::{Stack, StackStatus, Update, UpdateType};
use std::sync::Arc;

/// Marks an Update as a policy check; the value is the digest of the packs it checks.
pub const POLICY_CHECK_ANNOTATION: &str = "pulumi-operator-rs.dev/policy-check";
/// The digest of the packs covering the Stack when it created an Update.
pub const POLICY_DIGEST_ANNOTATION: &str = "pulumi-operator-rs.dev/policy-digest";
/// The `--message` of a check.
pub const CHECK_MESSAGE: &str = "Policy check";
/// The most policy checks running at once.
pub const MAX_IN_FLIGHT: usize = 10;

pub fn is_check(update: &Update) -> bool {
    update.annotations().contains_key(POLICY_CHECK_ANNOTATION)
}

/// What a synced Stack needs because of its policy packs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The packs are the ones its last operation ran with.
    Nothing,
    /// No pack covers it any more: forget what the last ones said.
    Forget,
    /// Preview with the packs of this digest.
    Check(String),
    /// A check is due but [`MAX_IN_FLIGHT`] run already.
    Wait,
}

/// The step for the digest recorded in the status and the current one.
pub fn step(status: &StackStatus, current: Option<&str>, in_flight: usize) -> Step {
    let recorded = status.policy.as_ref().and_then(|p| p.digest.as_deref());
    match (recorded, current) {
        (r, c) if r == c => Step::Nothing,
        (_, None) if status.policy.is_some() => Step::Forget,
        (_, None) => Step::Nothing,
        _ if in_flight >= MAX_IN_FLIGHT => Step::Wait,
        (_, Some(c)) => Step::Check(c.to_string()),
    }
}

/// Policy checks not finished yet, among `updates`.
pub fn in_flight(updates: &[Arc<Update>]) -> usize {
    updates
        .iter()
        .filter(|u| is_check(u) && !crate::update::status::update_complete(u))
        .count()
}

/// The Update of a policy check of the deployed revision, named after the digest it checks.
pub fn build_check(stack: &Stack, revision: &str, digest: &str) -> Update {
    let mut update = build_update(stack, UpdateType::Preview, CHECK_MESSAGE, revision);
    update.metadata.name = Some(format!(
        "{}-{}",
        stack.name_any(),
        short_hash(&[
            stack.uid().unwrap_or_default().as_str(),
            "policy-check",
            revision,
            digest,
        ])
    ));
    update.spec.expect_no_changes = None;
    update
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(POLICY_CHECK_ANNOTATION.to_string(), digest.to_string());
    update
}

/// Marks `update` with the digest of the packs covering its Stack now.
pub fn mark_digest(update: &mut Update, digest: Option<&str>) {
    if let Some(d) = digest {
        update
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(POLICY_DIGEST_ANNOTATION.to_string(), d.to_string());
    }
}

/// After an operation's result is in the status: the digest it ran with, beside its report.
pub fn record_digest(status: &mut StackStatus, update: &Update) {
    let digest = update.annotations().get(POLICY_DIGEST_ANNOTATION).cloned();
    if let (Some(policy), Some(d)) = (status.policy.as_mut(), digest) {
        policy.digest = Some(d);
    }
}

/// A finished check: what the packs say now, with its digest (also when the preview failed
/// for another reason: the check is not repeated for the same packs).
pub fn absorb_check(status: &mut StackStatus, update: &Update, generation: i64, now: &Time) {
    // The check is over: the Stack is free for its next operation.
    status.current_update = None;
    let digest = update.annotations().get(POLICY_CHECK_ANNOTATION).cloned();
    let mut report: PolicyReport = update
        .status
        .as_ref()
        .and_then(|s| s.policy.clone())
        .unwrap_or_default();
    report.digest = digest;
    status.policy = Some(Box::new(report));
    mark_policy_warnings(status, generation, now, true);
}

/// No pack covers the Stack any more.
pub fn forget(status: &mut StackStatus, generation: i64, now: &Time) {
    status.policy = None;
    mark_policy_warnings(status, generation, now, false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::policy::PolicyViolation;

    fn recorded(digest: Option<&str>) -> StackStatus {
        StackStatus {
            policy: Some(Box::new(PolicyReport {
                digest: digest.map(str::to_string),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn a_check_runs_when_the_covering_packs_change_and_not_too_many_at_once() {
        assert_eq!(step(&recorded(Some("a")), Some("a"), 0), Step::Nothing);
        assert_eq!(
            step(&recorded(Some("a")), Some("b"), 0),
            Step::Check("b".into())
        );
        assert_eq!(
            step(&recorded(Some("a")), Some("b"), MAX_IN_FLIGHT),
            Step::Wait
        );
        // Newly covered, never checked.
        assert_eq!(
            step(&StackStatus::default(), Some("b"), 0),
            Step::Check("b".into())
        );
        // Not covered any more: nothing to run, the report goes.
        assert_eq!(
            step(&recorded(Some("a")), None, MAX_IN_FLIGHT),
            Step::Forget
        );
        assert_eq!(step(&StackStatus::default(), None, 0), Step::Nothing);
    }

    fn stack() -> Stack {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "web", "namespace": "apps", "uid": "u-1"},
            "spec": {"stack": "dev"}
        }))
        .unwrap()
    }

    #[test]
    fn a_check_is_a_preview_that_reports_what_the_packs_say_now() {
        let now = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let mut check = build_check(&stack(), "abc", "d1");
        assert!(is_check(&check));
        assert_eq!(check.spec.update_type, Some(UpdateType::Preview));
        assert_ne!(
            check.name_any(),
            build_check(&stack(), "abc", "d2").name_any()
        );
        check.status = Some(pulumi_operator_api::UpdateStatus {
            policy: Some(PolicyReport {
                violations: 1,
                mandatory: 1,
                items: vec![PolicyViolation {
                    pack: "k8s-limits".into(),
                    policy: "deployment-resource-limits".into(),
                    urn: "urn:d".into(),
                    message: "no limits".into(),
                    enforcement_level: "mandatory".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut st = recorded(Some("d0"));
        st.current_update = Some(Default::default());
        absorb_check(&mut st, &check, 3, &now);
        assert_eq!(st.policy.as_ref().unwrap().digest.as_deref(), Some("d1"));
        assert!(
            st.current_update.is_none(),
            "the check still holds the Stack"
        );
        let warn = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "PolicyWarnings")
            .unwrap();
        assert!(warn.message.contains("mandatory"), "{}", warn.message);
        forget(&mut st, 3, &now);
        assert!(st.policy.is_none());
        assert!(st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .all(|c| c.type_ != "PolicyWarnings"));
        // An ordinary Update carries the digest into the status with its report.
        let mut up = build_update(&stack(), UpdateType::Up, "x", "abc");
        mark_digest(&mut up, Some("d2"));
        let mut st = recorded(None);
        record_digest(&mut st, &up);
        assert_eq!(st.policy.unwrap().digest.as_deref(), Some("d2"));
    }
}
