//! `kubectl pulumi plan <stack>`.

use crate::cli::PlanArgs;
use crate::cluster::{api_error, Cluster};
use crate::cmd::color;
use crate::view::format::structured;
use crate::view::plan::{changes_from_plan_file, plan_view, render, PlanView, PlannedChange};
use crate::view::rows::Viewed;
use crate::view::terminal::terminal_safe;
use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::Secret;
use pulumi_operator_api::names::{saved_plan_secret_name, SAVED_PLAN_KEY};
use pulumi_operator_api::ApprovalStatus;

/// The changes in the saved plan, when its Secret exists and may be read (`None`: use the
/// status' list; a missing right is said on stderr).
async fn saved_changes(cluster: &Cluster, plan: &str) -> Result<Option<Vec<PlannedChange>>> {
    let name = saved_plan_secret_name(plan);
    let secret = match cluster.api::<Secret>().get_opt(&name).await {
        Ok(s) => s,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            eprintln!(
                "note: you may not get secrets in namespace {:?}: the changes listed are those the \
                 Stack's status records (at most 20)",
                cluster.namespace
            );
            return Ok(None);
        }
        Err(e) => return Err(api_error(e, cluster.action("get", "secrets", Some(&name)))),
    };
    let Some(bytes) = secret
        .and_then(|s| s.data)
        .and_then(|d| d.get(SAVED_PLAN_KEY).cloned())
    else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes.0);
    changes_from_plan_file(&text)
        .map(Some)
        .map_err(|e| anyhow!("the Secret {name}: {e}"))
}

/// The Stack's plan (pending or last) as `plan` shows it.
pub fn approval_of<'a>(viewed: &'a Viewed, stack: &str) -> Result<&'a ApprovalStatus> {
    let required = viewed
        .stack
        .spec
        .approval
        .as_ref()
        .is_some_and(|a| a.required);
    match viewed.stack.status.as_ref().and_then(|s| s.approval.as_deref()) {
        Some(a) if a.plan.is_some() => Ok(a),
        _ if !required => bail!(
            "stack {stack:?} does not require approval (spec.approval.required is not set): it has no plans"
        ),
        _ => bail!(
            "stack {stack:?} has no plan yet: the operator saves one when an up is due \
             (`kubectl pulumi describe {stack}` shows what it is doing)"
        ),
    }
}

/// Reads the Stack's plan, with the saved plan's full list of changes when readable.
pub async fn load(cluster: &Cluster, stack: &str) -> Result<PlanView> {
    let viewed = cluster.stack(stack).await?;
    let approval = approval_of(&viewed, stack)?;
    let plan = approval.plan.clone().unwrap_or_default();
    let from_file = saved_changes(cluster, &plan).await?;
    Ok(plan_view(stack, &cluster.namespace, approval, from_file))
}

/// Prints the Stack's plan.
pub async fn run(cluster: &Cluster, args: &PlanArgs) -> Result<()> {
    let view = load(cluster, &args.stack).await?;
    match structured(&view, args.output)? {
        Some(text) => print!("{text}"),
        None => {
            print!("{}", render(&view, color()));
            if view.state == "AwaitingApproval" {
                println!(
                    "\nThe diff: kubectl pulumi logs {s} --update {p}\nApprove:  kubectl pulumi approve {s} --plan {p}",
                    s = args.stack,
                    p = terminal_safe(&view.plan)
                );
            }
        }
    }
    Ok(())
}
