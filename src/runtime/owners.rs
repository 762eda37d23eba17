//! Which Stack controls an Update (controller owner reference, matched by UID).

use kube::ResourceExt;
use pulumi_operator_api::Update;

/// Whether `update` was created by (is controlled by) the Stack with this UID.
pub fn owned_by(update: &Update, stack_uid: &str) -> bool {
    update
        .owner_references()
        .iter()
        .any(|o| o.kind == "Stack" && o.controller == Some(true) && o.uid == stack_uid)
}
