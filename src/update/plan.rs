//! What an Update says about saved plans (the approval gate's contract between the Stack,
//! which creates plan and apply Updates, and the Update controller, which keeps the saved plan
//! in a Secret and hands an approved one to the runner).

use kube::ResourceExt;
use pulumi_operator_api::Update;

pub use pulumi_operator_api::names::{
    saved_plan_secret_name, APPLIES_PLAN_ANNOTATION, SAVED_PLAN_KEY, SAVES_PLAN_ANNOTATION,
};
/// An Update's failure reason when its saved or approved plan cannot be had.
pub const REASON_PLAN_UNAVAILABLE: &str = "PlanUnavailable";

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
