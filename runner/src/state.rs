//! How many resources a stack's state holds after an operation (`pulumi stack export`): what
//! lets the operator release a deleted `destroyOnFinalize` Stack at once when its state holds
//! nothing to destroy.

use pulumi_operator_api::plan::Operation;

/// Whether an operation of this kind is followed by a count: those that change the state
/// (a preview never does).
pub fn counted_after(op: Operation) -> bool {
    op != Operation::Preview
}

/// The resources in a `pulumi stack export` document that a destroy would delete: every
/// resource but the stack itself and its providers, plus each pending operation (a create
/// whose result the CLI never learned may have left a resource behind). `None` when the
/// document cannot be read.
pub fn count(export: &[u8]) -> Option<i64> {
    let doc: serde_json::Value = serde_json::from_slice(export).ok()?;
    let deployment = doc.get("deployment")?;
    let resources = match deployment.get("resources") {
        Some(serde_json::Value::Array(items)) => items.as_slice(),
        // A stack that never ran has no resources array.
        None | Some(serde_json::Value::Null) => &[],
        Some(_) => return None,
    };
    let destroyable = resources
        .iter()
        .filter(|r| {
            let kind = r
                .get("type")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("");
            kind != "pulumi:pulumi:Stack" && !kind.starts_with("pulumi:providers:")
        })
        .count();
    let pending = match deployment.get("pending_operations") {
        Some(serde_json::Value::Array(items)) => items.len(),
        _ => 0,
    };
    Some((destroyable + pending) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_and_its_providers_are_not_counted() {
        let export = br#"{"version":3,"deployment":{"manifest":{},"resources":[
            {"urn":"urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev","type":"pulumi:pulumi:Stack"},
            {"urn":"urn:pulumi:dev::p::pulumi:providers:kubernetes::default","type":"pulumi:providers:kubernetes"},
            {"urn":"urn:pulumi:dev::p::kubernetes:core/v1:ConfigMap::cm","type":"kubernetes:core/v1:ConfigMap"}]}}"#;
        assert_eq!(count(export), Some(1));
    }

    #[test]
    fn an_empty_or_new_stack_holds_nothing() {
        assert_eq!(
            count(br#"{"version":3,"deployment":{"manifest":{}}}"#),
            Some(0)
        );
        let only_root = br#"{"version":3,"deployment":{"resources":[
            {"urn":"urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev","type":"pulumi:pulumi:Stack"}]}}"#;
        assert_eq!(count(only_root), Some(0));
    }

    #[test]
    fn pending_operations_count_as_resources() {
        let export = br#"{"version":3,"deployment":{"resources":[],"pending_operations":[
            {"resource":{"urn":"urn:pulumi:dev::p::random:index:RandomPet::pet","type":"random:index:RandomPet"},"type":"creating"}]}}"#;
        assert_eq!(count(export), Some(1));
    }

    #[test]
    fn an_unreadable_export_is_unknown() {
        assert_eq!(count(b"error: no stack"), None);
        assert_eq!(count(br#"{"version":3}"#), None);
        assert_eq!(count(br#"{"deployment":{"resources":{}}}"#), None);
    }

    #[test]
    fn only_operations_that_change_the_state_are_counted() {
        assert!(!counted_after(Operation::Preview));
        for op in [Operation::Up, Operation::Refresh, Operation::Destroy] {
            assert!(counted_after(op));
        }
    }
}
