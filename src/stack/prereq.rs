//! Prerequisites (pko-reference §3.7) and the bounded history of finished Updates, as pure
//! functions.

use crate::update::status::update_complete;
use kube::ResourceExt;
use pulumi_operator_api::names;
use pulumi_operator_api::{
    parse_duration, PrerequisiteRef, Stack, StackUpdateStateMessage, Update,
};
use std::time::Duration;

/// Why a prerequisite does not allow its dependent to run yet.
#[derive(Clone, Debug, PartialEq)]
pub enum Unsatisfied {
    Missing,
    NotRun,
    Failed,
    /// It succeeded too long ago; re-run it with `after-<its last update>`.
    OutOfDate {
        last_update: String,
    },
}

impl Unsatisfied {
    pub fn message(&self) -> &'static str {
        match self {
            Unsatisfied::Missing => "prerequisite not found",
            Unsatisfied::NotRun => "prerequisite has not run to completion",
            Unsatisfied::Failed => "prerequisite failed",
            Unsatisfied::OutOfDate { .. } => "prerequisite is out of date",
        }
    }
}

/// Whether `prereq` (the Stack named by `requirement`, if it exists) allows a dependent to run.
pub fn check(
    requirement: &PrerequisiteRef,
    prereq: Option<&Stack>,
    now: jiff::Timestamp,
) -> Option<Unsatisfied> {
    let Some(p) = prereq else {
        return Some(Unsatisfied::Missing);
    };
    let Some(last) = p.status.as_ref().and_then(|s| s.last_update.as_ref()) else {
        return Some(Unsatisfied::NotRun);
    };
    let request = p
        .annotations()
        .get(names::RECONCILIATION_REQUEST_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    if last.generation != p.metadata.generation
        || last.reconcile_request.as_deref().unwrap_or("") != request
    {
        return Some(Unsatisfied::NotRun);
    }
    if last.state != Some(StackUpdateStateMessage::Succeeded) {
        return Some(Unsatisfied::Failed);
    }
    let within = requirement
        .requirement
        .as_ref()
        .and_then(|r| r.succeeded_within_duration.as_deref())
        .and_then(|d| parse_duration(d).ok());
    if let (Some(within), Some(at)) = (within, last.last_resync_time.as_ref()) {
        let age = Duration::try_from(now.duration_since(at.0)).unwrap_or_default();
        if age > within {
            return Some(Unsatisfied::OutOfDate {
                last_update: last.name.clone().unwrap_or_default(),
            });
        }
    }
    None
}

/// The reconciliation-request value that makes an out-of-date prerequisite run again.
pub fn rerun_request(last_update: &str) -> String {
    format!(
        "{}{last_update}",
        names::RECONCILIATION_REQUEST_AFTER_PREFIX
    )
}

/// PKO's Reconciling message for unsatisfied prerequisites.
pub fn message(problems: &[(String, Unsatisfied)]) -> String {
    match problems {
        [(name, why)] => format!("prerequisite not satisfied for {name:?}: {}", why.message()),
        many => format!(
            "multiple prerequisites were not satisfied {}",
            many.iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Finished Updates beyond the newest `keep` (never one of `protect`): to be deleted, with
/// their Jobs and Secrets (owned by the Update).
pub fn prune(updates: &[&Update], keep: usize, protect: &[&str]) -> Vec<String> {
    let mut finished: Vec<&&Update> = updates.iter().filter(|u| update_complete(u)).collect();
    finished
        .sort_by_key(|u| std::cmp::Reverse(u.metadata.creation_timestamp.as_ref().map(|t| t.0)));
    finished
        .into_iter()
        .skip(keep)
        .map(|u| u.name_any())
        .filter(|n| !protect.contains(&n.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> jiff::Timestamp {
        "2026-01-01T01:00:00Z".parse().unwrap()
    }

    fn prereq(state: &str, generation: i64, last_generation: i64, at: &str) -> Stack {
        serde_json::from_value(json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "network", "namespace": "ns", "generation": generation},
            "spec": {"stack": "net"},
            "status": {"lastUpdate": {"name": "network-1", "state": state, "generation": last_generation,
                                      "reconcileRequest": "", "lastResyncTime": at}}
        }))
        .unwrap()
    }

    fn req(within: Option<&str>) -> PrerequisiteRef {
        serde_json::from_value(json!({"name": "network", "requirement": within.map(|w| json!({"succeededWithinDuration": w}))})).unwrap()
    }

    #[test]
    fn requirement_table() {
        let fresh = prereq("succeeded", 1, 1, "2026-01-01T00:50:00Z");
        assert_eq!(check(&req(None), Some(&fresh), now()), None);
        assert_eq!(check(&req(Some("1h")), Some(&fresh), now()), None);
        assert_eq!(
            check(&req(Some("5m")), Some(&fresh), now()),
            Some(Unsatisfied::OutOfDate {
                last_update: "network-1".into()
            })
        );
        assert_eq!(check(&req(None), None, now()), Some(Unsatisfied::Missing));
        assert_eq!(
            check(
                &req(None),
                Some(&prereq("failed", 1, 1, "2026-01-01T00:50:00Z")),
                now()
            ),
            Some(Unsatisfied::Failed)
        );
        assert_eq!(
            check(
                &req(None),
                Some(&prereq("succeeded", 2, 1, "2026-01-01T00:50:00Z")),
                now()
            ),
            Some(Unsatisfied::NotRun)
        );
        assert_eq!(rerun_request("network-1"), "after-network-1");
        assert_eq!(
            message(&[("network".into(), Unsatisfied::Failed)]),
            "prerequisite not satisfied for \"network\": prerequisite failed"
        );
        assert_eq!(
            message(&[
                ("a".into(), Unsatisfied::Failed),
                ("b".into(), Unsatisfied::NotRun)
            ]),
            "multiple prerequisites were not satisfied a, b"
        );
    }

    #[test]
    fn prune_keeps_the_newest_finished_and_protected_updates() {
        let update = |name: &str, minute: u32, complete: bool| -> Update {
            serde_json::from_value(json!({
                "metadata": {"name": name, "creationTimestamp": format!("2026-01-01T00:{minute:02}:00Z")},
                "spec": {"type": "up"},
                "status": {"conditions": [{"type": "Complete", "status": if complete {"True"} else {"False"},
                    "reason": "x", "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
            }))
            .unwrap()
        };
        let all = [
            update("u1", 1, true),
            update("u2", 2, true),
            update("u3", 3, true),
            update("u4", 4, true),
            update("u5", 5, false),
        ];
        let refs: Vec<&Update> = all.iter().collect();
        assert_eq!(
            prune(&refs, 2, &[]),
            vec!["u2".to_string(), "u1".to_string()]
        );
        assert_eq!(prune(&refs, 2, &["u1"]), vec!["u2".to_string()]);
        assert!(prune(&refs, 10, &[]).is_empty());
    }
}
