//! Stack status, as PKO writes it: folding a finished Update into `lastUpdate` and `outputs`,
//! and the Ready / Reconciling / Stalled conditions (pko-reference §2).

use crate::stack::objects::TRIGGER_SPEC_DIGEST_ANNOTATION;
use crate::update::status::{update_condition, update_failed};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::ByteString;
use kube::ResourceExt;
use pulumi_operator_api::names;
use pulumi_operator_api::{
    Stack, StackStatus, StackUpdateState, StackUpdateStateMessage, StateResources, Update,
    UpdateStatus, UpdateType,
};
use std::collections::{BTreeMap, BTreeSet};

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok {
            names::STATUS_TRUE
        } else {
            names::STATUS_FALSE
        }
        .into(),
        reason: reason.into(),
        // The message is never empty: the API rejects empty strings in lists on some servers.
        message: if message.is_empty() {
            reason.into()
        } else {
            message.into()
        },
        last_transition_time: now.clone(),
        observed_generation: Some(generation),
    }
}

/// Replaces the conditions, keeping `lastTransitionTime` of those whose status did not change.
fn set(conditions: &mut Vec<Condition>, wanted: Vec<Condition>, drop: &[&str]) {
    let old = std::mem::take(conditions);
    let keep_time = |c: Condition| match old
        .iter()
        .find(|o| o.type_ == c.type_ && o.status == c.status)
    {
        Some(o) => Condition {
            last_transition_time: o.last_transition_time.clone(),
            ..c
        },
        None => c,
    };
    let mut out: Vec<Condition> = old
        .iter()
        .filter(|o| !drop.contains(&o.type_.as_str()) && !wanted.iter().any(|w| w.type_ == o.type_))
        .cloned()
        .collect();
    out.extend(wanted.into_iter().map(keep_time));
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    *conditions = out;
}

/// Sets one condition (`status` is `True`, `False` or `Unknown`), leaving the others.
pub fn set_condition(
    status: &mut StackStatus,
    type_: &str,
    state: &str,
    reason: &str,
    message: &str,
    generation: i64,
    now: &Time,
) {
    let mut c = condition(type_, true, reason, message, generation, now);
    c.status = state.into();
    set(status.conditions.get_or_insert_with(Vec::new), vec![c], &[]);
}

/// `Ready=True` ProcessingCompleted; Reconciling and Stalled removed.
pub fn mark_ready(status: &mut StackStatus, generation: i64, now: &Time) {
    let c = status.conditions.get_or_insert_with(Vec::new);
    let ready = condition(
        names::CONDITION_READY,
        true,
        names::REASON_PROCESSING_COMPLETED,
        names::MESSAGE_PROCESSING_COMPLETED,
        generation,
        now,
    );
    set(
        c,
        vec![ready],
        &[names::CONDITION_RECONCILING, names::CONDITION_STALLED],
    );
}

/// `Reconciling=True` with `reason`; Ready=False NotReadyInProgress; Stalled removed.
/// Whether the Stack's `Reconciling` condition is true for this reason.
pub fn has_reason(status: &StackStatus, reason: &str) -> bool {
    status.conditions.iter().flatten().any(|c| {
        c.type_ == names::CONDITION_RECONCILING
            && c.status == names::STATUS_TRUE
            && c.reason == reason
    })
}

pub fn mark_reconciling(
    status: &mut StackStatus,
    reason: &str,
    message: &str,
    generation: i64,
    now: &Time,
) {
    let c = status.conditions.get_or_insert_with(Vec::new);
    let ready = condition(
        names::CONDITION_READY,
        false,
        names::REASON_NOT_READY_IN_PROGRESS,
        names::MESSAGE_NOT_READY_IN_PROGRESS,
        generation,
        now,
    );
    let rec = condition(
        names::CONDITION_RECONCILING,
        true,
        reason,
        message,
        generation,
        now,
    );
    set(c, vec![ready, rec], &[names::CONDITION_STALLED]);
}

/// `Ready=False` with `reason`; Reconciling and Stalled removed: not ready, and nothing in
/// progress (a suspended Stack).
pub fn mark_not_ready(
    status: &mut StackStatus,
    reason: &str,
    message: &str,
    generation: i64,
    now: &Time,
) {
    let c = status.conditions.get_or_insert_with(Vec::new);
    let ready = condition(
        names::CONDITION_READY,
        false,
        reason,
        message,
        generation,
        now,
    );
    set(
        c,
        vec![ready],
        &[names::CONDITION_RECONCILING, names::CONDITION_STALLED],
    );
}

/// `Stalled=True` with `reason`; Ready=False NotReadyStalled; Reconciling removed.
pub fn mark_stalled(
    status: &mut StackStatus,
    reason: &str,
    message: &str,
    generation: i64,
    now: &Time,
) {
    let c = status.conditions.get_or_insert_with(Vec::new);
    let ready = condition(
        names::CONDITION_READY,
        false,
        names::REASON_NOT_READY_STALLED,
        names::MESSAGE_NOT_READY_STALLED,
        generation,
        now,
    );
    let stalled = condition(
        names::CONDITION_STALLED,
        true,
        reason,
        message,
        generation,
        now,
    );
    set(c, vec![ready, stalled], &[names::CONDITION_RECONCILING]);
}

/// Whether the conditions already tell a settled state (`Ready=True` or `Stalled=True`), which
/// a background read of the branch head should not replace with `Reconciling`: a periodic
/// re-read must not flap a Ready Stack, nor each retry of a failing remote a Stalled one.
/// What a Stack says when its namespace is being deleted (the API server refused its
/// operation's objects). Kubernetes admits no new pod in a terminating namespace, so a destroy
/// it owes cannot run there: the message gives the way to run it elsewhere, and the way to let
/// the namespace go.
pub fn namespace_terminating_message(stack: &Stack, refusal: &str) -> String {
    let name = stack.name_any();
    let ns = stack.namespace().unwrap_or_default();
    let release = format!(
        "kubectl -n {ns} patch stack {name} --type=merge -p '{{\"metadata\":{{\"finalizers\":null}}}}'"
    );
    // Its namespace is being deleted: the Stack is deleted next, whether or not it is yet.
    let owes_destroy = stack.spec.destroy_on_finalize && !stack.spec.preview;
    if !owes_destroy {
        return format!(
            "namespace {ns} is being deleted, so no operation can start in it ({refusal}); if the \
             Stack holds the namespace, let it go: {release}"
        );
    }
    let account = stack
        .spec
        .service_account_name
        .as_deref()
        .unwrap_or("default");
    format!(
        "namespace {ns} is being deleted and Kubernetes starts no pod in it ({refusal}), so the \
         destroy this Stack owes (destroyOnFinalize) cannot run here: stack {stack} still has its \
         resources, recorded in its backend. To destroy them, apply this Stack unchanged in \
         another namespace that has what it uses (ServiceAccount {account} with the same rights, \
         and the Secrets and ConfigMaps it names), with spec.suspend: true, then delete it there: \
         the operator runs the destroy there. Then let this Stack go: {release} (that alone \
         keeps the resources and forgets them)",
        stack = stack.spec.stack,
    )
}

pub fn settled(status: &StackStatus) -> bool {
    status.conditions.iter().flatten().any(|c| {
        (c.type_ == names::CONDITION_READY || c.type_ == names::CONDITION_STALLED)
            && c.status == "True"
    })
}

/// The conditions that follow from the last finished update (PKO's `markStackResult`).
pub fn mark_result(status: &mut StackStatus, generation: i64, now: &Time) {
    let Some(last) = status.last_update.clone() else {
        return;
    };
    if last.state == Some(StackUpdateStateMessage::Succeeded) {
        mark_ready(status, generation, now);
        return;
    }
    let failures = last.failures.unwrap_or(0);
    let kind = last
        .update_type
        .as_ref()
        .map(|t| t.as_str().to_string())
        .unwrap_or_else(|| "update".into());
    let workspace_failure = last.message.as_deref().and_then(|m| {
        m.split_once(": ")
            .filter(|(r, _)| pulumi_operator_api::plan::FailureReason::workspace_failure(r))
            .map(|(r, _)| {
                (
                    pulumi_operator_api::plan::FailureReason::stalled_reason(r),
                    m.to_string(),
                )
            })
    });
    if let Some((reason, msg)) =
        workspace_failure.filter(|_| failures >= names::MAX_UPDATE_FAILURES)
    {
        mark_stalled(status, reason, &msg, generation, now);
    } else if failures >= names::MAX_UPDATE_FAILURES {
        let msg = format!(
            "{kind} failed {failures} times; not retrying until the spec or source changes"
        );
        mark_stalled(status, names::REASON_UPDATE_FAILED, &msg, generation, now);
    } else if last.update_type == Some(UpdateType::Preview) {
        mark_reconciling(
            status,
            names::REASON_PREVIEW_FAILED,
            &format!("preview failed ({failures} attempt(s))"),
            generation,
            now,
        );
    } else {
        mark_reconciling(
            status,
            names::REASON_RETRYING_AFTER_FAILURE,
            &format!("{failures} update failure(s)"),
            generation,
            now,
        );
    }
}

/// The outputs Secret as `status.outputs`: each value is the output's JSON, secret outputs
/// are the string `"[secret]"`.
pub fn outputs_from_secret(
    data: &BTreeMap<String, ByteString>,
    secret_keys: &BTreeSet<String>,
) -> BTreeMap<String, serde_json::Value> {
    data.iter()
        .map(|(k, v)| {
            let value = if secret_keys.contains(k) {
                serde_json::Value::String(names::SECRET_OUTPUT_PLACEHOLDER.into())
            } else {
                serde_json::from_slice(&v.0).unwrap_or_else(|_| {
                    serde_json::Value::String(String::from_utf8_lossy(&v.0).into())
                })
            };
            (k.clone(), value)
        })
        .collect()
}

/// Parses the `pulumi.com/secrets` annotation (a JSON array of keys).
pub fn secret_keys(annotation: Option<&str>) -> BTreeSet<String> {
    annotation
        .and_then(|a| serde_json::from_str::<Vec<String>>(a).ok())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// The most `status.outputs` holds, in bytes of JSON (each name counted twice, as the field
/// manager lists it too): whatever an outputs Secret holds (up to 1 MiB), the Stack stays far
/// below etcd's 1.5 MiB, and its status can always be written.
pub const MAX_STATUS_OUTPUTS_BYTES: usize = 512 * 1024;

/// The Event on a Stack whose outputs were not all kept (in the outputs Secret or in
/// `status.outputs`).
pub const REASON_OUTPUTS_LEFT_OUT: &str = "OutputsLeftOut";

/// Keeps the outputs `status.outputs` can hold within `budget` bytes, in name order (each that
/// still fits: a large one does not push out the smaller ones after it); returns the names of
/// the others.
pub fn fit_status_outputs(
    outputs: &mut BTreeMap<String, serde_json::Value>,
    budget: usize,
) -> Vec<String> {
    let mut used = 0usize;
    let mut left_out = Vec::new();
    outputs.retain(|name, value| {
        let cost = 2 * name.len() + value.to_string().len() + 8;
        if used + cost > budget {
            left_out.push(name.clone());
            return false;
        }
        used += cost;
        true
    });
    left_out
}

/// The note of [`REASON_OUTPUTS_LEFT_OUT`]: what the runner left out of the outputs Secret (the
/// part of the Update's `message` that says so), and what `status.outputs` leaves out of the
/// Secret `secret` (`total` outputs); `None` when nothing was left out. Names only, never values.
pub fn outputs_left_out_note(
    update_message: Option<&str>,
    secret: &str,
    left_out: &[String],
    total: usize,
) -> Option<String> {
    let runner = update_message
        .and_then(|m| m.split_once("; "))
        .map(|(_, rest)| rest)
        .filter(|rest| rest.contains(pulumi_operator_api::sealed::OUTPUTS_LEFT_OUT));
    let status = (!left_out.is_empty()).then(|| {
        let mut shown: Vec<String> = left_out
            .iter()
            .take(5)
            .map(|n| format!("{:?}", n.chars().take(64).collect::<String>()))
            .collect();
        if left_out.len() > 5 {
            shown.push(format!("and {} more", left_out.len() - 5));
        }
        format!(
            "{} of the {total} outputs in the Secret {secret} are left out of status.outputs, \
             which holds at most {} KiB: {}",
            left_out.len(),
            MAX_STATUS_OUTPUTS_BYTES / 1024,
            shown.join(", ")
        )
    });
    match (runner, status) {
        (None, None) => None,
        (Some(r), None) => Some(r.to_string()),
        (None, Some(s)) => Some(s),
        (Some(r), Some(s)) => Some(format!("{r}. {s}")),
    }
}

/// The project a finished operation ran (`status.projectInfo`, what a destroy without the
/// source needs). A success records it. A failure may still have deployed resources, so it
/// records the first project known, and a deleted `destroyOnFinalize` Stack whose every
/// operation failed is still destroyed without its source (whose repository may be gone); it
/// never replaces a known one (a renamed project that failed deployed nothing under its name).
fn remember_project(status: &mut StackStatus, update: &UpdateStatus, succeeded: bool) {
    if update.project_info.is_some() && (succeeded || status.project_info.is_none()) {
        status.project_info = update.project_info.clone().map(Box::new);
    }
}

/// The resources an operation left in the state (`status.stateResources`). An up, refresh or
/// destroy that counted them replaces the count; one that did not (it failed before it ran, or
/// the count failed) makes it unknown, as the state may have changed; a preview changes
/// nothing.
fn remember_resources(
    status: &mut StackStatus,
    update: &Update,
    update_status: &UpdateStatus,
    generation: Option<i64>,
) {
    if !matches!(
        update.spec.update_type,
        Some(UpdateType::Up | UpdateType::Refresh | UpdateType::Destroy)
    ) {
        return;
    }
    status.state_resources = match (update_status.resources, generation) {
        (Some(count), Some(generation)) => Some(Box::new(StateResources {
            count,
            generation,
            update: update.name_any(),
        })),
        _ => None,
    };
}

/// Whether a deleted `destroyOnFinalize` Stack has nothing to destroy: an operation of the
/// spec it was deleted at counted no resources in the state. The API server bumps
/// `metadata.generation` when it marks an object with finalizers for deletion, so that spec
/// is `generation - 1` (or `generation`); a count made under another spec may be of another
/// stack or backend, and a Stack that never counted (a new one, or one re-created without its
/// status) may own resources: both are destroyed.
pub fn nothing_to_destroy(status: &StackStatus, generation: i64) -> Option<&StateResources> {
    status
        .state_resources
        .as_deref()
        .filter(|s| s.count == 0 && (s.generation == generation || s.generation + 1 == generation))
}

/// Folds a finished Update into the status (PKO's `markStackFailed` / `markStackSucceeded`):
/// `lastUpdate`, `outputs` (success only; stale values are kept, as in PKO), `projectInfo`, and
/// clears `currentUpdate`. The failure count follows PKO: the previous count plus one when the
/// previous result was at the same generation and reconcile request, else 0; so a new
/// generation gets attempts at 0, 1, 2 and a fourth failure stalls it at 3.
pub fn absorb(
    status: &mut StackStatus,
    update: &Update,
    outputs: Option<BTreeMap<String, serde_json::Value>>,
    now: &Time,
) {
    let current = status.current_update.take().unwrap_or_default();
    let previous = status.last_update.clone().unwrap_or_default();
    let generation = current.generation;
    let request = current.reconcile_request.clone().unwrap_or_default();
    let commit = current.commit.clone().unwrap_or_default();
    let update_status = update.status.clone().unwrap_or_default();
    let kind = update.spec.update_type.clone();
    let base = StackUpdateState {
        name: update.metadata.name.clone(),
        update_type: kind,
        generation,
        reconcile_request: Some(request.clone()),
        last_attempted_commit: Some(commit.clone()),
        permalink: update_status.permalink.clone().filter(|p| !p.is_empty()),
        last_resync_time: Some(now.clone()),
        spec_digest: update
            .annotations()
            .get(TRIGGER_SPEC_DIGEST_ANNOTATION)
            .cloned(),
        ..Default::default()
    };
    if update_failed(update) {
        let same_trigger = previous.name.is_some()
            && previous.generation == generation
            && previous.reconcile_request.as_deref().unwrap_or("") == request;
        let mut failures = if same_trigger {
            previous.failures.unwrap_or(0) + 1
        } else {
            0
        };
        let mut message = update_status.message.clone().filter(|m| !m.is_empty());
        let reason = update_condition(update, names::CONDITION_FAILED)
            .map(|c| c.reason.clone())
            .unwrap_or_default();
        if pulumi_operator_api::plan::FailureReason::workspace_failure(&reason) {
            // Retrying the same spec and revision cannot fix it (PKO: `WorkspaceFailed`).
            failures = failures.max(names::MAX_UPDATE_FAILURES);
            message = Some(format!("{reason}: {}", message.unwrap_or_default()));
        }
        status.last_update = Some(StackUpdateState {
            state: Some(StackUpdateStateMessage::Failed),
            message,
            last_successful_commit: previous.last_successful_commit.clone(),
            failures: Some(failures),
            ..base
        });
        remember_project(status, &update_status, false);
    } else {
        status.last_update = Some(StackUpdateState {
            state: Some(StackUpdateStateMessage::Succeeded),
            last_successful_commit: Some(commit),
            failures: Some(0),
            ..base
        });
        if let Some(outputs) = outputs {
            status.outputs = Some(outputs);
        }
        remember_project(status, &update_status, true);
    }
    remember_resources(status, update, &update_status, generation);
    if matches!(
        update.spec.update_type,
        Some(UpdateType::Up | UpdateType::Preview)
    ) {
        // The packs that covered this operation (none: nothing to report any more).
        status.policy = update_status.policy.clone().map(|mut report| {
            // Only the operator records a failed policy check (see `policy_check`).
            report.check_failure = None;
            Box::new(report)
        });
        mark_policy_warnings(status, generation.unwrap_or(0), now, false);
    }
}

/// `PolicyWarnings=True` with this reason and message (cut to 1 KiB).
pub fn set_policy_warnings(
    status: &mut StackStatus,
    reason: &str,
    message: String,
    generation: i64,
    now: &Time,
) {
    let warn = condition(
        CONDITION_POLICY_WARNINGS,
        true,
        reason,
        &truncated(message),
        generation,
        now,
    );
    let c = status.conditions.get_or_insert_with(Vec::new);
    set(c, vec![warn], &[]);
}

/// A condition message cut to 1 KiB.
fn truncated(mut message: String) -> String {
    if message.len() > 1024 {
        let mut cut = 1021;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("...");
    }
    message
}

/// The condition listing advisory policy violations.
pub const CONDITION_POLICY_WARNINGS: &str = "PolicyWarnings";

/// `PolicyWarnings=True` listing the advisory violations of the last covered operation (and,
/// after a policy check, the mandatory ones the next `up` would be refused for), or no such
/// condition when there were none.
pub fn mark_policy_warnings(
    status: &mut StackStatus,
    generation: i64,
    now: &Time,
    with_mandatory: bool,
) {
    let listed: Vec<String> = status
        .policy
        .iter()
        .flat_map(|p| p.items.iter())
        .filter(|v| with_mandatory || !v.is_mandatory())
        .map(|v| {
            format!(
                "[{}] {}/{} on {}: {}",
                v.enforcement_level, v.pack, v.policy, v.urn, v.message
            )
        })
        .collect();
    let (count, mandatory) = status
        .policy
        .as_ref()
        .map(|p| (p.violations, p.mandatory))
        .unwrap_or((0, 0));
    let count = if with_mandatory {
        count
    } else {
        count - mandatory
    };
    let c = status.conditions.get_or_insert_with(Vec::new);
    if count <= 0 {
        set(c, vec![], &[CONDITION_POLICY_WARNINGS]);
        return;
    }
    let lead = if with_mandatory && mandatory > 0 {
        format!("{count} policy violation(s), {mandatory} mandatory (the next up will be refused)")
    } else {
        format!("{count} advisory policy violation(s)")
    };
    let message = format!("{lead}: {}", listed.join("; "));
    set_policy_warnings(status, "AdvisoryViolations", message, generation, now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::CurrentStackUpdate;

    #[test]
    fn ready_and_stalled_are_settled_states() {
        let now = Time(jiff::Timestamp::now());
        let mut s = StackStatus::default();
        assert!(!settled(&s));
        mark_reconciling(&mut s, "R", "m", 1, &now);
        assert!(!settled(&s));
        mark_stalled(&mut s, names::REASON_SOURCE_UNAVAILABLE, "m", 1, &now);
        assert!(settled(&s));
        mark_ready(&mut s, 1, &now);
        assert!(settled(&s));
    }

    fn now() -> Time {
        Time("2026-01-01T00:00:00Z".parse().unwrap())
    }

    fn finished(name: &str, failed: bool, message: &str) -> Update {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
            "metadata": {"name": name},
            "spec": {"type": "up", "stackName": "dev", "workspaceName": "s"},
            "status": {
                "message": message,
                "permalink": "https://app.pulumi.com/o/p/dev/updates/3",
                "projectInfo": {"name": "proj", "runtime": "yaml"},
                "conditions": [
                    {"type": "Complete", "status": "True", "reason": "Updated", "message": "done", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Failed", "status": if failed {"True"} else {"False"}, "reason": "x", "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ]
            }
        }))
        .unwrap()
    }

    /// `finished`, of `kind`, having counted `resources` in the state.
    fn counted(kind: &str, failed: bool, resources: Option<i64>) -> Update {
        let mut u = finished("s-1", failed, "m");
        u.spec.update_type = Some(serde_json::from_value(serde_json::json!(kind)).unwrap());
        if let Some(st) = u.status.as_mut() {
            st.resources = resources;
        }
        u
    }

    #[test]
    fn an_operation_that_ran_records_what_the_state_holds_failed_or_not() {
        for failed in [false, true] {
            let mut st = running("abc");
            absorb(&mut st, &counted("up", failed, Some(0)), None, &now());
            let recorded = st.state_resources.as_deref().unwrap();
            assert_eq!((recorded.count, recorded.generation), (0, 4));
            assert_eq!(recorded.update, "s-1");
        }
        // An up that did not count (it failed before it ran) makes the count unknown.
        let mut st = running("abc");
        absorb(&mut st, &counted("up", false, Some(3)), None, &now());
        st.current_update = running("abc").current_update;
        absorb(&mut st, &counted("up", true, None), None, &now());
        assert_eq!(st.state_resources, None);
        // A preview (a drift or policy check) never changes the state, nor the count.
        let mut st = running("abc");
        absorb(&mut st, &counted("destroy", false, Some(0)), None, &now());
        st.current_update = running("abc").current_update;
        absorb(&mut st, &counted("preview", false, None), None, &now());
        assert_eq!(st.state_resources.map(|s| s.count), Some(0));
    }

    #[test]
    fn only_an_empty_state_counted_at_the_deleted_spec_needs_no_destroy() {
        let with = |count: i64, generation: i64| StackStatus {
            state_resources: Some(Box::new(StateResources {
                count,
                generation,
                update: "s-1".into(),
            })),
            ..Default::default()
        };
        // Deletion bumps the generation by one.
        assert!(nothing_to_destroy(&with(0, 4), 5).is_some());
        assert!(nothing_to_destroy(&with(0, 5), 5).is_some());
        // Resources left, a count of another spec, or no count at all: destroy.
        assert!(nothing_to_destroy(&with(1, 4), 5).is_none());
        assert!(nothing_to_destroy(&with(0, 3), 5).is_none());
        assert!(nothing_to_destroy(&StackStatus::default(), 5).is_none());
    }

    fn running(commit: &str) -> StackStatus {
        StackStatus {
            current_update: Some(CurrentStackUpdate {
                name: Some("s-1".into()),
                generation: Some(4),
                reconcile_request: Some("r".into()),
                commit: Some(commit.into()),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn success_records_commit_outputs_and_project() {
        let mut st = running("abc");
        let outputs = [("url".to_string(), serde_json::json!("https://x"))].into();
        absorb(&mut st, &finished("s-1", false, ""), Some(outputs), &now());
        let last = st.last_update.as_ref().unwrap();
        assert_eq!(last.state, Some(StackUpdateStateMessage::Succeeded));
        assert_eq!(last.last_successful_commit.as_deref(), Some("abc"));
        assert_eq!(last.last_attempted_commit.as_deref(), Some("abc"));
        assert_eq!(last.generation, Some(4));
        assert_eq!(last.reconcile_request.as_deref(), Some("r"));
        assert_eq!(last.failures, Some(0));
        assert_eq!(last.message, None);
        assert!(st.current_update.is_none());
        assert_eq!(st.outputs.as_ref().unwrap()["url"], "https://x");
        assert_eq!(st.project_info.as_ref().unwrap().name, "proj");
        mark_result(&mut st, 4, &now());
        let ready = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "ProcessingCompleted")
        );
    }

    #[test]
    fn a_failure_records_the_first_project_known_and_never_replaces_one() {
        let mut st = running("abc");
        absorb(&mut st, &finished("s-1", true, "boom"), None, &now());
        assert_eq!(
            st.project_info.as_ref().map(|p| p.name.as_str()),
            Some("proj")
        );
        let mut known = running("abc");
        known.project_info = Some(Box::new(pulumi_operator_api::ProjectInfo {
            name: "old".into(),
            runtime: "yaml".into(),
        }));
        absorb(&mut known, &finished("s-1", true, "boom"), None, &now());
        assert_eq!(
            known.project_info.as_ref().map(|p| p.name.as_str()),
            Some("old")
        );
    }

    #[test]
    fn consecutive_failures_count_from_zero_and_stall_after_the_fourth() {
        let mut st = running("abc");
        st.last_update = Some(StackUpdateState {
            last_successful_commit: Some("old".into()),
            ..Default::default()
        });
        for n in 0..=3 {
            absorb(
                &mut st,
                &finished(&format!("s-{n}"), true, "boom"),
                None,
                &now(),
            );
            let last = st.last_update.as_ref().unwrap();
            assert_eq!(last.failures, Some(n));
            assert_eq!(last.message.as_deref(), Some("boom"));
            assert_eq!(last.last_successful_commit.as_deref(), Some("old"));
            mark_result(&mut st, 4, &now());
            st.current_update = running("abc").current_update;
        }
        let conds = st.conditions.as_ref().unwrap();
        let stalled = conds.iter().find(|c| c.type_ == "Stalled").unwrap();
        assert_eq!(stalled.reason, "UpdateFailed");
        assert_eq!(
            stalled.message,
            "up failed 3 times; not retrying until the spec or source changes"
        );
        assert!(!conds.iter().any(|c| c.type_ == "Reconciling"));
    }

    #[test]
    fn first_failures_retry_and_a_new_trigger_restarts_the_count() {
        let mut st = running("abc");
        absorb(&mut st, &finished("s-1", true, "boom"), None, &now());
        mark_result(&mut st, 4, &now());
        let rec = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Reconciling")
            .unwrap();
        assert_eq!(
            (rec.reason.as_str(), rec.message.as_str()),
            ("RetryingAfterFailure", "0 update failure(s)")
        );
        st.current_update = running("abc").current_update;
        absorb(&mut st, &finished("s-2", true, "boom"), None, &now());
        assert_eq!(st.last_update.as_ref().unwrap().failures, Some(1));
        let mut next = running("abc");
        next.current_update.as_mut().unwrap().generation = Some(5);
        st.current_update = next.current_update;
        absorb(&mut st, &finished("s-3", true, "boom"), None, &now());
        assert_eq!(st.last_update.as_ref().unwrap().failures, Some(0));
    }

    #[test]
    fn workspace_failures_stall_at_once_with_pkos_reason() {
        let mut st = running("abc");
        let mut u = finished("s-1", true, "no stack named dev found");
        if let Some(c) = u
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|c| c.iter_mut().find(|c| c.type_ == "Failed"))
        {
            c.reason = "StackNotFound".into();
        }
        absorb(&mut st, &u, None, &now());
        mark_result(&mut st, 4, &now());
        let stalled = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Stalled")
            .unwrap();
        assert_eq!(stalled.reason, "WorkspaceFailed");
        assert_eq!(stalled.message, "StackNotFound: no stack named dev found");
    }

    fn with_policy(mut u: Update, reason: &str, report: serde_json::Value) -> Update {
        let st = u.status.as_mut().unwrap();
        st.policy = Some(serde_json::from_value(report).unwrap());
        if let Some(c) = st
            .conditions
            .as_mut()
            .and_then(|c| c.iter_mut().find(|c| c.type_ == "Failed"))
        {
            c.reason = reason.into();
        }
        u
    }

    fn condition_of<'a>(st: &'a StackStatus, kind: &str) -> Option<&'a Condition> {
        st.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == kind)
    }

    #[test]
    fn a_mandatory_violation_stalls_at_once_and_lists_the_violations() {
        let mut st = running("abc");
        let u = with_policy(
            finished("s-1", true, "1 mandatory policy violation: k8s-limits/deployment-resource-limits on urn:d: no limits"),
            "PolicyViolation",
            serde_json::json!({"packs": ["limits@0123456789ab"], "violations": 1, "mandatory": 1, "items": [
                {"pack": "k8s-limits", "policy": "deployment-resource-limits", "urn": "urn:d", "message": "no limits", "enforcementLevel": "mandatory"}]}),
        );
        absorb(&mut st, &u, None, &now());
        mark_result(&mut st, 4, &now());
        let stalled = condition_of(&st, "Stalled").unwrap();
        assert_eq!(stalled.reason, "PolicyViolation");
        assert!(
            stalled
                .message
                .contains("deployment-resource-limits on urn:d"),
            "{}",
            stalled.message
        );
        assert_eq!(st.policy.as_ref().unwrap().items[0].urn, "urn:d");
        assert!(condition_of(&st, CONDITION_POLICY_WARNINGS).is_none());
    }

    #[test]
    fn advisory_violations_leave_the_stack_ready_with_policy_warnings() {
        let mut st = running("abc");
        let u = with_policy(
            finished("s-1", false, "succeeded"),
            "x",
            serde_json::json!({"violations": 1, "mandatory": 0, "items": [
                {"pack": "k8s-labels", "policy": "deployment-team-label", "urn": "urn:d", "message": "no team label", "enforcementLevel": "advisory"}]}),
        );
        absorb(&mut st, &u, None, &now());
        mark_result(&mut st, 4, &now());
        assert_eq!(condition_of(&st, "Ready").unwrap().status, "True");
        let warn = condition_of(&st, CONDITION_POLICY_WARNINGS).unwrap();
        assert_eq!(warn.message, "1 advisory policy violation(s): [advisory] k8s-labels/deployment-team-label on urn:d: no team label");
        // The next covered operation without violations clears it; one without packs too.
        st.current_update = running("abc").current_update;
        absorb(&mut st, &finished("s-2", false, "succeeded"), None, &now());
        assert!(condition_of(&st, CONDITION_POLICY_WARNINGS).is_none());
        assert!(st.policy.is_none());
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let mut st = StackStatus::default();
        let t0 = now();
        mark_ready(&mut st, 1, &t0);
        let later = Time("2026-01-02T00:00:00Z".parse().unwrap());
        mark_ready(&mut st, 1, &later);
        assert_eq!(st.conditions.as_ref().unwrap()[0].last_transition_time, t0);
        mark_reconciling(
            &mut st,
            "StackProcessing",
            "stack is being processed",
            1,
            &later,
        );
        let ready = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.last_transition_time, later);
    }

    #[test]
    fn secret_outputs_are_masked() {
        let data = [
            ("password".to_string(), ByteString(b"\"hunter2\"".to_vec())),
            ("count".to_string(), ByteString(b"3".to_vec())),
        ]
        .into();
        let keys = secret_keys(Some(r#"["password"]"#));
        let out = outputs_from_secret(&data, &keys);
        assert_eq!(out["password"], "[secret]");
        assert_eq!(out["count"], 3);
        assert!(secret_keys(Some("not json")).is_empty());
    }

    #[test]
    fn status_outputs_keep_what_fits_in_name_order() {
        // A Secret's worth of outputs: 10,000 of 100 bytes, and one of 900 KiB.
        let mut data: BTreeMap<String, ByteString> = (0..10_000)
            .map(|i| {
                let value = format!("\"{}\"", "v".repeat(98));
                (format!("o{i:05}"), ByteString(value.into_bytes()))
            })
            .collect();
        data.insert(
            "big".into(),
            ByteString(format!("\"{}\"", "b".repeat(900 * 1024)).into_bytes()),
        );
        data.insert("a-pw".into(), ByteString(b"\"hunter2\"".to_vec()));
        let mut out = outputs_from_secret(&data, &secret_keys(Some(r#"["a-pw"]"#)));
        let left = fit_status_outputs(&mut out, MAX_STATUS_OUTPUTS_BYTES);
        let json = serde_json::to_string(&out).unwrap();
        assert!(
            json.len() + out.keys().map(String::len).sum::<usize>() <= MAX_STATUS_OUTPUTS_BYTES
        );
        assert_eq!(left[0], "big");
        assert!(left.contains(&"o09999".to_string()));
        assert!(
            !left.contains(&"a-pw".to_string()),
            "a secret costs its placeholder"
        );
        assert_eq!(out["a-pw"], "[secret]");
        assert_eq!(out.len() + left.len(), 10_002);
        let kept = out.keys().filter(|k| k.starts_with('o')).count();
        assert!(
            out.contains_key(&format!("o{:05}", kept - 1)),
            "a prefix of the names"
        );

        let note = outputs_left_out_note(
            Some("up succeeded; 3 of 9 outputs were left out of the outputs Secret: 3 over its 960 KiB (\"a\", \"b\", \"c\")"),
            "s-up-1-stack-outputs",
            &left,
            10_002,
        )
        .unwrap();
        assert!(
            note.starts_with("3 of 9 outputs were left out of the outputs Secret: 3 over its 960 KiB (\"a\", \"b\", \"c\"). "),
            "{note}"
        );
        assert!(
            note.contains(&format!(
                "{} of the 10002 outputs in the Secret s-up-1-stack-outputs are left out of status.outputs, which holds at most 512 KiB: \"big\", \"o0",
                left.len()
            )),
            "{note}"
        );
        assert!(
            note.ends_with(&format!("and {} more", left.len() - 5)),
            "{note}"
        );
        assert_eq!(
            outputs_left_out_note(Some("up succeeded"), "s", &[], 1),
            None
        );
        assert_eq!(
            outputs_left_out_note(
                Some("up succeeded; 1 of 2 outputs were left out of the outputs Secret: x"),
                "s",
                &[],
                1
            )
            .as_deref(),
            Some("1 of 2 outputs were left out of the outputs Secret: x")
        );
    }
}
