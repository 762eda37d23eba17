//! Previews again when the administrator's policy packs covering a Stack change (a pack, its
//! revision, its configuration or the selectors), as pure functions. Each operation records
//! the digest of the packs it ran with (`status.policy.digest`); a synced Stack whose covering
//! packs now have another digest gets a policy check: a `preview` marked with
//! [`POLICY_CHECK_ANNOTATION`] that, like a drift check, is not the Stack's `lastUpdate` and
//! never changes `Ready`: it reports what the packs now say (`status.policy`,
//! `PolicyWarnings`). At most [`MAX_IN_FLIGHT`] checks run at once in the operator, so a change
//! covering 1,000 Stacks does not start 1,000 operations together. A check that ends without
//! the packs' verdict (its preview failed for another reason: the pack could not be fetched,
//! its dependencies not installed, the pod was lost) says so in `PolicyWarnings` and an Event,
//! and is tried again after a backoff: it is never taken for a clean report.
//!
//! An operation due while a pack covering the Stack is still being resolved by the StackPolicy
//! controller waits for it ([`pack_wait`]): `Reconciling` with [`REASON_WAITING_FOR_POLICY_PACK`],
//! never `Stalled`, since it ends by itself; the policy's status change reconciles the Stack
//! again. Only a pack that failed to resolve (or cannot be fetched or loaded) stalls the Stack,
//! through the operation it fails (`PolicyPackFailed`): then a person must act.

use crate::policy::PackUnavailable;
use crate::stack::objects::{build_update, short_hash};
use crate::stack::status::{mark_policy_warnings, mark_reconciling, set_policy_warnings};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use pulumi_operator_api::backoff::Backoff;
use pulumi_operator_api::names;
use pulumi_operator_api::plan::PolicyPackPlan;
use pulumi_operator_api::policy::{PolicyCheckFailure, PolicyReport};
use pulumi_operator_api::{Stack, StackStatus, Update, UpdateType};
use std::sync::Arc;
use std::time::Duration;

/// Marks an Update as a policy check; the value is the digest of the packs it checks.
pub const POLICY_CHECK_ANNOTATION: &str = "pulumi-operator-rs.dev/policy-check";
/// The digest of the packs covering the Stack when it created an Update.
pub const POLICY_DIGEST_ANNOTATION: &str = "pulumi-operator-rs.dev/policy-digest";
/// The `--message` of a check.
pub const CHECK_MESSAGE: &str = "Policy check";
/// The most policy checks running at once.
pub const MAX_IN_FLIGHT: usize = 10;
/// The longest wait between failed checks.
const RETRY_MAX: Duration = Duration::from_secs(600);
/// The wait before a failed check is tried again: 30 s, doubled with each failure in a row.
const RETRY: Backoff = Backoff::new(Duration::from_secs(30), 2.0, RETRY_MAX);
/// The reason of `PolicyWarnings` and of the Event when a check ended without a verdict.
pub const REASON_CHECK_FAILED: &str = "PolicyCheckFailed";
/// The most lines of a failed check's error the status keeps.
const FAILURE_LINES: usize = 5;
/// The reason of `Reconciling` (and of the Normal Event) while an operation waits for a pack
/// the StackPolicy controller has not resolved yet: it ends by itself.
pub const REASON_WAITING_FOR_POLICY_PACK: &str = "WaitingForPolicyPack";

pub fn is_check(update: &Update) -> bool {
    update.annotations().contains_key(POLICY_CHECK_ANNOTATION)
}

/// What a due operation does about the packs covering its Stack (as
/// [`crate::policy::packs_for_stack`] gives them): `Some(message)`, naming the StackPolicy and
/// the pack, to wait for a pack still being resolved; `None` to go on. A pack that failed to
/// resolve does not wait: the operation fails for it (`PolicyPackFailed`) and the Stack stalls.
pub fn pack_wait(packs: &Result<Option<Vec<PolicyPackPlan>>, PackUnavailable>) -> Option<String> {
    match packs {
        Err(unavailable) if unavailable.pending => Some(format!(
            "{unavailable}: the operation waits for it and starts once the StackPolicy has \
             resolved it"
        )),
        _ => None,
    }
}

/// The Stack waits for a pack: `Reconciling` with [`REASON_WAITING_FOR_POLICY_PACK`] (Stalled
/// removed). `true` when the wait is new to `written` (the status as last written), so that it
/// is announced once, not at every reconcile.
pub fn mark_waiting(
    status: &mut StackStatus,
    written: &StackStatus,
    message: &str,
    generation: i64,
    now: &Time,
) -> bool {
    let already = written.conditions.iter().flatten().any(|c| {
        c.type_ == names::CONDITION_RECONCILING
            && c.status == names::STATUS_TRUE
            && c.reason == REASON_WAITING_FOR_POLICY_PACK
            && c.message == message
    });
    mark_reconciling(
        status,
        REASON_WAITING_FOR_POLICY_PACK,
        message,
        generation,
        now,
    );
    !already
}

/// What a synced Stack needs because of its policy packs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The packs are the ones its last operation ran with.
    Nothing,
    /// No pack covers it any more: forget what the last ones said.
    Forget,
    /// Preview with the packs of this digest; `attempt` counts the checks of them that failed
    /// before (it names the Update, so a retry is a new one).
    Check { digest: String, attempt: i64 },
    /// A check is due but [`MAX_IN_FLIGHT`] run already.
    Wait,
    /// The last check of these packs failed: the next is due after this wait.
    RetryIn(Duration),
}

/// The step for the digest recorded in the status and the current one, at `now`.
pub fn step(
    status: &StackStatus,
    current: Option<&str>,
    in_flight: usize,
    now: jiff::Timestamp,
) -> Step {
    let recorded = status.policy.as_ref().and_then(|p| p.digest.as_deref());
    let Some(current) = current else {
        return match recorded {
            Some(_) => Step::Forget,
            None => Step::Nothing,
        };
    };
    let attempt = if recorded == Some(current) {
        // Checked with these packs: again only when that check failed, after its backoff.
        let Some(failure) = status
            .policy
            .as_ref()
            .and_then(|p| p.check_failure.as_ref())
        else {
            return Step::Nothing;
        };
        let wait = retry_due(failure, now);
        if !wait.is_zero() {
            return Step::RetryIn(wait);
        }
        failure.attempts
    } else {
        0
    };
    if in_flight >= MAX_IN_FLIGHT {
        return Step::Wait;
    }
    Step::Check {
        digest: current.to_string(),
        attempt,
    }
}

/// How long until the check after `failure` is due (zero: now).
fn retry_due(failure: &PolicyCheckFailure, now: jiff::Timestamp) -> Duration {
    let backoff = RETRY.after(u32::try_from(failure.attempts.max(1)).unwrap_or(u32::MAX));
    // A last attempt in the future (a clock that went back) counts as just now.
    let since = match now < failure.last_attempt.0 {
        true => Duration::ZERO,
        false => now.duration_since(failure.last_attempt.0).unsigned_abs(),
    };
    backoff.saturating_sub(since)
}

/// Policy checks not finished yet, among `updates`.
pub fn in_flight(updates: &[Arc<Update>]) -> usize {
    updates
        .iter()
        .filter(|u| is_check(u) && !crate::update::status::update_complete(u))
        .count()
}

/// The Update of a policy check of the deployed revision, named after the digest it checks and
/// the attempt.
pub fn build_check(stack: &Stack, revision: &str, digest: &str, attempt: i64) -> Update {
    let mut update = build_update(stack, UpdateType::Preview, CHECK_MESSAGE, revision);
    let uid = stack.uid().unwrap_or_default();
    let retry = attempt.to_string();
    let mut parts = vec![uid.as_str(), "policy-check", revision, digest];
    // The first attempt keeps the name it always had.
    if attempt > 0 {
        parts.push(&retry);
    }
    update.metadata.name = Some(format!("{}-{}", stack.name_any(), short_hash(&parts)));
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

/// A finished check: what the packs say now, with its digest. A check that failed without a
/// mandatory violation to explain it did not hear the packs out: it is recorded as failed
/// (counted, with the first lines of its error) and returned, so that it is said and retried.
pub fn absorb_check(
    status: &mut StackStatus,
    update: &Update,
    generation: i64,
    now: &Time,
) -> Option<PolicyCheckFailure> {
    // The check is over: the Stack is free for its next operation.
    status.current_update = None;
    let digest = update.annotations().get(POLICY_CHECK_ANNOTATION).cloned();
    let mut report: PolicyReport = update
        .status
        .as_ref()
        .and_then(|s| s.policy.clone())
        .unwrap_or_default();
    // Only the operator says a check failed; whatever the pod wrote there is not kept.
    report.check_failure = None;
    let failed = crate::update::status::update_failed(update) && report.mandatory <= 0;
    if failed {
        let before = status
            .policy
            .as_ref()
            .filter(|p| p.digest == digest)
            .and_then(|p| p.check_failure.as_ref())
            .map_or(0, |f| f.attempts);
        let message = update
            .status
            .as_ref()
            .and_then(|s| s.message.as_deref())
            .unwrap_or("the preview failed without a message");
        report.check_failure = Some(PolicyCheckFailure {
            message: first_lines(message),
            update: update.name_any(),
            attempts: before + 1,
            // The end the Update reports, never later than now.
            last_attempt: update
                .status
                .as_ref()
                .and_then(|s| s.end_time.clone())
                .filter(|end| end.0 <= now.0)
                .unwrap_or_else(|| now.clone()),
        });
    }
    report.digest = digest;
    let failure = report.check_failure.clone();
    status.policy = Some(Box::new(report));
    match &failure {
        Some(f) => set_policy_warnings(
            status,
            REASON_CHECK_FAILED,
            failure_note(f),
            generation,
            now,
        ),
        None => mark_policy_warnings(status, generation, now, true),
    }
    failure
}

/// The first lines of an error, for the status.
fn first_lines(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let mut kept = lines[..lines.len().min(FAILURE_LINES)].join("\n");
    if lines.len() > FAILURE_LINES {
        kept.push_str("\n...");
    }
    kept
}

/// What is said of a failed check (the condition's message and the Event's note).
pub fn failure_note(failure: &PolicyCheckFailure) -> String {
    let next = retry_due(failure, failure.last_attempt.0);
    format!(
        "the policy check with the packs now covering the Stack failed ({} in a row, Update {}), \
         so they have not been heard; it is tried again in {}s: {}",
        failure.attempts,
        failure.update,
        next.as_secs(),
        failure.message
    )
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
        let now = at(0);
        let check = |d: &str| Step::Check {
            digest: d.into(),
            attempt: 0,
        };
        assert_eq!(step(&recorded(Some("a")), Some("a"), 0, now), Step::Nothing);
        assert_eq!(step(&recorded(Some("a")), Some("b"), 0, now), check("b"));
        assert_eq!(
            step(&recorded(Some("a")), Some("b"), MAX_IN_FLIGHT, now),
            Step::Wait
        );
        // Newly covered, never checked.
        assert_eq!(step(&StackStatus::default(), Some("b"), 0, now), check("b"));
        // Not covered any more: nothing to run, the report goes.
        assert_eq!(
            step(&recorded(Some("a")), None, MAX_IN_FLIGHT, now),
            Step::Forget
        );
        assert_eq!(step(&StackStatus::default(), None, 0, now), Step::Nothing);
    }

    fn policy_warnings(
        st: &StackStatus,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        st.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PolicyWarnings")
            .cloned()
            .expect("PolicyWarnings")
    }

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    /// A check of `digest` that ended at `end` (seconds from `at(0)`), failed without a verdict.
    fn failed_check(digest: &str, attempt: i64, end: i64) -> Update {
        let mut check = build_check(&stack(), "abc", digest, attempt);
        check.status = Some(pulumi_operator_api::UpdateStatus {
            message: Some(format!(
                "policy pack \"limits\" could not be installed:\nnpm ERR! code E404\n{}",
                "npm ERR! more\n".repeat(10)
            )),
            end_time: Some(Time(at(end))),
            conditions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                    type_: "Failed".into(),
                    status: "True".into(),
                    reason: "UpdateFailed".into(),
                    message: String::new(),
                    last_transition_time: Time(at(end)),
                    observed_generation: None,
                },
            ]),
            ..Default::default()
        });
        check
    }

    #[test]
    fn a_check_that_failed_without_a_verdict_is_said_and_tried_again_with_backoff() {
        let mut st = recorded(Some("d0"));
        let first = failed_check("d1", 0, 0);
        let failure = absorb_check(&mut st, &first, 3, &Time(at(1))).expect("a failure");
        assert_eq!(failure.attempts, 1);
        assert_eq!(failure.update, first.name_any());
        assert!(
            failure.message.starts_with("policy pack"),
            "{}",
            failure.message
        );
        assert!(failure.message.ends_with("..."), "cut to its first lines");
        let report = st.policy.as_ref().unwrap();
        assert_eq!(report.digest.as_deref(), Some("d1"));
        let warn = policy_warnings(&st);
        assert_eq!(warn.reason, REASON_CHECK_FAILED);
        assert!(warn.message.contains("E404"), "{}", warn.message);
        assert!(
            warn.message.contains("tried again in 30s"),
            "{}",
            warn.message
        );

        // Not before its backoff; then again, under another name.
        assert_eq!(
            step(&st, Some("d1"), 0, at(10)),
            Step::RetryIn(std::time::Duration::from_secs(20))
        );
        let again = Step::Check {
            digest: "d1".into(),
            attempt: 1,
        };
        assert_eq!(step(&st, Some("d1"), 0, at(30)), again);
        assert_eq!(step(&st, Some("d1"), MAX_IN_FLIGHT, at(30)), Step::Wait);
        let second = failed_check("d1", 1, 40);
        assert_ne!(second.name_any(), first.name_any());
        let failure = absorb_check(&mut st, &second, 3, &Time(at(41))).unwrap();
        assert_eq!(failure.attempts, 2, "counted in a row");
        assert_eq!(
            step(&st, Some("d1"), 0, at(50)),
            Step::RetryIn(std::time::Duration::from_secs(50)),
            "the wait doubles"
        );
        // Other packs meanwhile: checked at once, counted afresh.
        assert_eq!(
            step(&st, Some("d2"), 0, at(50)),
            Step::Check {
                digest: "d2".into(),
                attempt: 0
            }
        );
        // Many failures: never more than 10 minutes apart.
        st.policy
            .as_mut()
            .unwrap()
            .check_failure
            .as_mut()
            .unwrap()
            .attempts = 40;
        assert_eq!(step(&st, Some("d1"), 0, at(40)), Step::RetryIn(RETRY_MAX));
        // A check that failed on a mandatory violation is the packs' verdict.
        let mut refused = failed_check("d1", 2, 700);
        refused.status.as_mut().unwrap().policy = Some(PolicyReport {
            violations: 1,
            mandatory: 1,
            ..Default::default()
        });
        assert_eq!(absorb_check(&mut st, &refused, 3, &Time(at(701))), None);
        assert_eq!(step(&st, Some("d1"), 0, at(701)), Step::Nothing);
        // A failure the pod claims in its report is not taken.
        let mut claimed = build_check(&stack(), "abc", "d3", 0);
        claimed.status = Some(pulumi_operator_api::UpdateStatus {
            policy: Some(PolicyReport {
                check_failure: failure.clone().into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(absorb_check(&mut st, &claimed, 3, &Time(at(702))), None);
        assert_eq!(step(&st, Some("d3"), 0, at(702)), Step::Nothing);
    }

    fn unavailable(pending: bool) -> PackUnavailable {
        PackUnavailable {
            policy: "limits".into(),
            pack: "k8s-limits".into(),
            why: match pending {
                true => "is still being resolved".into(),
                false => "cannot read branch \"main\": repository not found".into(),
            },
            pending,
        }
    }

    fn condition<'a>(
        st: &'a StackStatus,
        kind: &str,
    ) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        st.conditions.iter().flatten().find(|c| c.type_ == kind)
    }

    #[test]
    fn a_pack_still_being_resolved_is_waited_for_reconciling_and_announced_once() {
        let now = Time(at(0));
        let message = pack_wait(&Err(unavailable(true))).expect("a wait");
        assert!(
            message.starts_with(
                "policy pack \"k8s-limits\" of StackPolicy \"limits\" is still being resolved"
            ),
            "{message}"
        );
        // A Stack that had stalled before (e.g. on something since fixed) waits, not stalls.
        let mut st = StackStatus::default();
        crate::stack::status::mark_stalled(&mut st, "SourceUnavailable", "x", 3, &now);
        let written = st.clone();
        assert!(
            mark_waiting(&mut st, &written, &message, 3, &now),
            "a new wait"
        );
        let rec = condition(&st, names::CONDITION_RECONCILING).expect("Reconciling");
        assert_eq!(
            (rec.status.as_str(), rec.reason.as_str()),
            ("True", REASON_WAITING_FOR_POLICY_PACK)
        );
        assert_eq!(rec.message, message);
        assert_eq!(
            condition(&st, names::CONDITION_READY).unwrap().status,
            "False"
        );
        assert!(condition(&st, names::CONDITION_STALLED).is_none());
        // Once written, the same wait is not announced again.
        let written = st.clone();
        assert!(!mark_waiting(&mut st, &written, &message, 3, &now));
        assert_eq!(st, written);
    }

    #[test]
    fn a_pack_that_failed_to_resolve_is_not_waited_for() {
        // The operation runs and fails for it (`PolicyPackFailed`): that stalls the Stack.
        assert_eq!(pack_wait(&Err(unavailable(false))), None);
        assert_eq!(pack_wait(&Ok(Some(vec![]))), None);
        assert_eq!(pack_wait(&Ok(None)), None);
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
        let mut check = build_check(&stack(), "abc", "d1", 0);
        assert!(is_check(&check));
        assert_eq!(check.spec.update_type, Some(UpdateType::Preview));
        assert_ne!(
            check.name_any(),
            build_check(&stack(), "abc", "d2", 0).name_any()
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
        let warn = policy_warnings(&st);
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
