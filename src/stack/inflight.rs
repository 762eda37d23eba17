//! "At most one operation per Stack" and "a result is absorbed before its Update goes", decided
//! from the Updates themselves (pure; the Stack controller feeds it from its caches).
//!
//! Every Update the Stack creates is owned by it (controller reference with the Stack's UID)
//! and carries the finalizer `finalizer.stack.pulumi.com` until the Stack has folded its
//! result into `status.lastUpdate`. So:
//! - an unfinished Update owned by the Stack is the operation in flight, whatever
//!   `status.currentUpdate` says (a status write may have been lost to a crash or a stale
//!   cache): no second one starts;
//! - a finished Update named by `status.currentUpdate` is absorbed, then its finalizer is
//!   released; TTL, history pruning and `kubectl delete` cannot remove it earlier.

pub use crate::runtime::owners::owned_by;
use kube::ResourceExt;
use pulumi_operator_api::{names, Update};

/// What the Stack must do about operations already started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InFlight {
    /// Nothing started is unfinished or unabsorbed: a new operation may be claimed.
    Free,
    /// This Update has not finished: wait for it. `adopt` says that `status.currentUpdate`
    /// does not name it yet and must be set to it.
    Busy { name: String, adopt: bool },
    /// This finished Update (the current one) must be folded into the status now.
    Absorb { name: String },
}

/// The decision. `current` is the Update `status.currentUpdate` names, if it exists (looked
/// up in the cache, else on the API server); `owned` are the Stack's Updates from the cache.
pub fn in_flight(current: Option<&Update>, owned: &[&Update]) -> InFlight {
    if let Some(u) = current {
        return if crate::update::status::update_complete(u) {
            InFlight::Absorb { name: u.name_any() }
        } else {
            InFlight::Busy {
                name: u.name_any(),
                adopt: false,
            }
        };
    }
    let mut unfinished: Vec<&&Update> = owned
        .iter()
        .filter(|u| !crate::update::status::update_complete(u))
        .collect();
    // There is never more than one; if there were, the oldest is the one to wait for first.
    unfinished.sort_by_key(|u| {
        (
            u.metadata.creation_timestamp.clone().map(|t| t.0),
            u.name_any(),
        )
    });
    match unfinished.first() {
        Some(u) => InFlight::Busy {
            name: u.name_any(),
            adopt: true,
        },
        None => InFlight::Free,
    }
}

/// What an unfinished Update says while its pod may still run on a node that stopped
/// answering (its `Progressing` message), if that is why it has not finished.
pub fn node_unreachable(update: &Update) -> Option<String> {
    crate::update::status::update_condition(update, names::CONDITION_PROGRESSING)
        .filter(|c| c.reason == crate::update::status::REASON_NODE_UNREACHABLE)
        .map(|c| c.message.clone())
}

/// The finished Updates whose finalizer the Stack may release: every finished one it owns
/// except the one still to be absorbed (`keep`).
pub fn releasable(owned: &[&Update], keep: Option<&str>) -> Vec<String> {
    owned
        .iter()
        .filter(|u| crate::update::status::update_complete(u))
        .filter(|u| u.finalizers().iter().any(|f| f == names::FINALIZER))
        .map(|u| u.name_any())
        .filter(|n| Some(n.as_str()) != keep)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(name: &str, complete: Option<bool>, finalizer: bool, created: &str) -> Update {
        let conditions = match complete {
            None => serde_json::json!([]),
            Some(done) => serde_json::json!([{
                "type": "Complete", "status": if done { "True" } else { "False" },
                "reason": "x", "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]),
        };
        serde_json::from_value(serde_json::json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
            "metadata": {
                "name": name, "namespace": "ns", "creationTimestamp": created,
                "finalizers": if finalizer { vec![names::FINALIZER] } else { vec![] },
                "ownerReferences": [{"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "s",
                                     "uid": "stack-uid", "controller": true}]
            },
            "spec": {"type": "up"},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn the_current_update_is_waited_for_then_absorbed() {
        let running = update("s-1", Some(false), true, "2026-01-01T00:00:00Z");
        let done = update("s-1", Some(true), true, "2026-01-01T00:00:00Z");
        assert_eq!(
            in_flight(Some(&running), &[&running]),
            InFlight::Busy {
                name: "s-1".into(),
                adopt: false
            }
        );
        assert_eq!(
            in_flight(Some(&done), &[&done]),
            InFlight::Absorb { name: "s-1".into() }
        );
    }

    #[test]
    fn an_unfinished_update_blocks_a_new_one_even_when_the_status_forgot_it() {
        // A crash between creating the Update and writing currentUpdate, or a status read
        // from a stale cache: the Update itself says an operation is in flight.
        let finished = update("s-0", Some(true), false, "2026-01-01T00:00:00Z");
        let fresh = update("s-2", None, true, "2026-01-01T00:02:00Z");
        let older = update("s-1", Some(false), true, "2026-01-01T00:01:00Z");
        assert_eq!(
            in_flight(None, &[&finished, &fresh, &older]),
            InFlight::Busy {
                name: "s-1".into(),
                adopt: true
            }
        );
        assert_eq!(in_flight(None, &[&finished]), InFlight::Free);
        assert_eq!(in_flight(None, &[]), InFlight::Free);
    }

    #[test]
    fn only_finished_updates_other_than_the_one_to_absorb_are_released() {
        let absorbed = update("s-0", Some(true), true, "2026-01-01T00:00:00Z");
        let released = update("s-1", Some(true), false, "2026-01-01T00:01:00Z");
        let to_absorb = update("s-2", Some(true), true, "2026-01-01T00:02:00Z");
        let running = update("s-3", Some(false), true, "2026-01-01T00:03:00Z");
        assert_eq!(
            releasable(&[&absorbed, &released, &to_absorb, &running], Some("s-2")),
            vec!["s-0".to_string()]
        );
        assert_eq!(
            releasable(&[&absorbed, &to_absorb], None),
            vec!["s-0".to_string(), "s-2".to_string()]
        );
    }

    #[test]
    fn ownership_is_by_uid() {
        let u = update("s-1", None, true, "2026-01-01T00:00:00Z");
        assert!(owned_by(&u, "stack-uid"));
        assert!(!owned_by(&u, "an-earlier-stack-of-the-same-name"));
    }
}
