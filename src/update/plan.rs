//! What an Update says about saved plans (the approval gate's contract between the Stack,
//! which creates plan and apply Updates, and the Update controller, which keeps the saved plan
//! in a Secret and hands an approved one to the runner).

use kube::ResourceExt;
use pulumi_operator_api::Update;

/// Marks an Update as a preview that saves a plan for approval.
pub const SAVES_PLAN_ANNOTATION: &str = "pulumi.com/saves-plan";
/// On an `up`: the id of the approved plan it applies.
pub const APPLIES_PLAN_ANNOTATION: &str = "pulumi.com/applies-plan";
/// An Update's failure reason when its saved or approved plan cannot be had.
pub const REASON_PLAN_UNAVAILABLE: &str = "PlanUnavailable";
/// The key of the plan in its Secret.
pub const SAVED_PLAN_KEY: &str = "plan.json";

/// The Secret that keeps the plan saved by the Update `plan`.
pub fn saved_plan_secret_name(plan: &str) -> String {
    format!("{plan}-saved-plan")
}

/// Whether an Update is a preview that saves a plan for approval.
pub fn saves_plan(update: &Update) -> bool {
    update.annotations().contains_key(SAVES_PLAN_ANNOTATION)
}

/// The plan an `up` applies, if it applies one.
pub fn applied_plan(update: &Update) -> Option<&str> {
    update
        .annotations()
        .get(APPLIES_PLAN_ANNOTATION)
        .map(String::as_str)
        .filter(|p| !p.is_empty())
}
