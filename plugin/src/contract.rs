//! The operator's strings this plugin depends on that are not in `pulumi-operator-api`
//! (they are defined in the operator's own crate, which a kubectl plugin does not link): the
//! approval gate's annotations and Secret names, and what an Update records about its trigger.
//! Each one names where the operator defines it; the end-to-end tests (tests/e2e_plugin.rs)
//! check them against a running operator.

/// On a Stack: the id of the plan a person approves (`src/stack/approval.rs`,
/// `APPROVE_ANNOTATION`).
pub const APPROVE_ANNOTATION: &str = "pulumi.com/approve-plan";
/// On an Update: a preview that saves a plan for approval (`src/update/plan.rs`).
pub const SAVES_PLAN_ANNOTATION: &str = "pulumi.com/saves-plan";
/// On an `up`: the id of the approved plan it applies (`src/update/plan.rs`).
pub const APPLIES_PLAN_ANNOTATION: &str = "pulumi.com/applies-plan";
/// The key of the plan in its Secret (`src/update/plan.rs`, `SAVED_PLAN_KEY`).
pub const SAVED_PLAN_KEY: &str = "plan.json";
/// On an Update: the source revision it runs with (`src/stack/objects.rs`).
pub const REVISION_ANNOTATION: &str = "pulumi.com/stack-revision";
/// The condition a suspended Stack shows (`spec.suspend`).
pub const CONDITION_SUSPENDED: &str = "Suspended";

/// The Secret that keeps the plan saved by the Update `plan` (`saved_plan_secret_name`).
pub fn saved_plan_secret_name(plan: &str) -> String {
    format!("{plan}-saved-plan")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_plan_secret_is_named_after_the_plan() {
        assert_eq!(
            saved_plan_secret_name("app-plan-1"),
            "app-plan-1-saved-plan"
        );
    }
}
