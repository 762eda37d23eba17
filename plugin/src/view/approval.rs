//! Approving exactly one plan: which plan is pending, the refusal when the user reviewed
//! another one, and the JSON patch that lets the API server refuse the approval when the
//! pending plan changes between the read and the write.

use crate::view::rows::Viewed;
use crate::view::terminal::terminal_safe;
use pulumi_operator_api::names::APPROVE_PLAN_ANNOTATION as APPROVE_ANNOTATION;
use pulumi_operator_api::ApprovalState;
use serde_json::json;

/// The plan awaiting approval, if any.
pub fn pending_plan(viewed: &Viewed) -> Option<String> {
    let a = viewed.stack.status.as_ref()?.approval.as_ref()?;
    (a.state == Some(ApprovalState::AwaitingApproval))
        .then(|| a.plan.clone())
        .flatten()
}

/// Refuses when the plan the user reviewed (`expected`) is not the pending one.
/// The plans are named escaped ([`terminal_safe`]): the pending one comes from the cluster.
pub fn check(stack: &str, pending: Option<&str>, expected: Option<&str>) -> Result<String, String> {
    match (pending, expected) {
        (None, _) => Err(format!(
            "stack {stack:?} has no plan awaiting approval (`kubectl pulumi plan {stack}` shows its last plan)"
        )),
        (Some(p), Some(e)) if p != e => Err(format!(
            "refused: the plan \"{e}\" is no longer pending, the pending plan is now \"{p}\" (a new \
             commit, spec change or reconcile request replaced it). Review it with `kubectl pulumi \
             plan {stack}`, then `kubectl pulumi approve {stack} --plan {p}`",
            e = terminal_safe(e),
            p = terminal_safe(p),
        )),
        (Some(p), _) => Ok(p.to_string()),
    }
}

/// `a/b` as a JSON pointer token (`a~1b`).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that sets the approval annotation to `plan` only while `plan` is the pending
/// plan. Without annotations on the object, the whole map is added, guarded by the
/// resourceVersion so that no annotation written meanwhile is lost.
pub fn approval_patch(
    plan: &str,
    has_annotations: bool,
    resource_version: &str,
) -> serde_json::Value {
    let mut ops = vec![
        json!({"op": "test", "path": "/status/approval/plan", "value": plan}),
        json!({"op": "test", "path": "/status/approval/state", "value": ApprovalState::AwaitingApproval.as_str()}),
    ];
    if has_annotations {
        let path = format!(
            "/metadata/annotations/{}",
            pointer_token(APPROVE_ANNOTATION)
        );
        ops.push(json!({"op": "add", "path": path, "value": plan}));
    } else {
        ops.push(
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}),
        );
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {APPROVE_ANNOTATION: plan}}));
    }
    serde_json::Value::Array(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_reviewed_plan_is_approved() {
        assert_eq!(check("app", Some("p1"), Some("p1")), Ok("p1".into()));
        assert_eq!(check("app", Some("p1"), None), Ok("p1".into()));
        let refused = check("app", Some("p2"), Some("p1")).unwrap_err();
        assert!(
            refused.contains("the pending plan is now \"p2\""),
            "{refused}"
        );
        assert!(check("app", None, Some("p1"))
            .unwrap_err()
            .contains("no plan awaiting approval"));
    }

    #[test]
    fn a_refusal_names_the_pending_plan_escaped() {
        let refused = check("app", Some("p2\x1b[2K\r\n"), Some("p1")).unwrap_err();
        assert!(
            refused.contains("now \"p2\\x1b[2K\\r\\n\"")
                && refused.contains("--plan p2\\x1b[2K\\r\\n"),
            "{refused}"
        );
        // What is approved is the plan as it is, not as it is shown.
        assert_eq!(check("app", Some("p\x1b"), None), Ok("p\x1b".into()));
    }

    #[test]
    fn the_patch_tests_the_pending_plan() {
        let p = approval_patch("p1", true, "7");
        assert_eq!(
            p[0],
            json!({"op": "test", "path": "/status/approval/plan", "value": "p1"})
        );
        assert_eq!(p[1]["value"], "AwaitingApproval");
        assert_eq!(
            p[2],
            json!({"op": "add", "path": "/metadata/annotations/pulumi.com~1approve-plan", "value": "p1"})
        );
        let bare = approval_patch("p1", false, "7");
        assert_eq!(
            bare[2],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
        );
        assert_eq!(bare[3]["value"]["pulumi.com/approve-plan"], "p1");
        // It is a valid JSON patch.
        let _: json_patch::Patch = serde_json::from_value(p).expect("a JSON patch");
    }

    #[test]
    fn the_pending_plan_is_read_from_the_status() {
        let v = Viewed::from_json(json!({"apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "app"}, "spec": {"stack": "dev"},
            "status": {"approval": {"plan": "p1", "state": "AwaitingApproval"}}}))
        .expect("stack");
        assert_eq!(pending_plan(&v).as_deref(), Some("p1"));
        let applied = Viewed::from_json(json!({"apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "app"}, "spec": {"stack": "dev"},
            "status": {"approval": {"plan": "p1", "state": "Applied"}}}))
        .expect("stack");
        assert_eq!(pending_plan(&applied), None);
    }
}
