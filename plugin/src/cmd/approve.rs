//! `kubectl pulumi approve <stack> [--plan ID]`.

use crate::cli::ApproveArgs;
use crate::cluster::{api_error, Cluster, STACKS};
use crate::cmd::{color, wait_for, FIELD_MANAGER};
use crate::view::approval::{approval_patch, check, pending_plan};
use crate::view::plan::render;
use crate::view::terminal::terminal_safe;
use crate::view::wait::approve_progress;
use anyhow::{anyhow, Result};
use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use std::process::ExitCode;

/// Approves the pending plan (only if it is the one given), then waits for its `up`.
pub async fn run(cluster: &Cluster, args: &ApproveArgs) -> Result<ExitCode> {
    let viewed = cluster.stack(&args.stack).await?;
    let pending = pending_plan(&viewed);
    let mut plan =
        check(&args.stack, pending.as_deref(), args.plan.as_deref()).map_err(|e| anyhow!(e))?;
    if args.plan.is_none() {
        // Approving what is pending now: show it, and approve exactly what was shown.
        let view = crate::cmd::plan::load(cluster, &args.stack).await?;
        print!("{}", render(&view, color()));
        let shown = (view.state == "AwaitingApproval").then_some(view.plan.as_str());
        plan = check(&args.stack, shown, None).map_err(|e| anyhow!(e))?;
    }
    let has_annotations = viewed.stack.metadata.annotations.is_some();
    let rv = viewed.stack.resource_version().unwrap_or_default();
    let ops: json_patch::Patch =
        serde_json::from_value(approval_patch(&plan, has_annotations, &rv))?;
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    if let Err(e) = cluster
        .stacks(false)
        .patch(&args.stack, &params, &Patch::<()>::Json(ops))
        .await
    {
        return Err(refusal(cluster, &args.stack, &plan, e).await);
    }
    eprintln!(
        "approved plan {} of stack {}/{}",
        terminal_safe(&plan),
        cluster.namespace,
        args.stack
    );
    let wait_up = !args.no_wait;
    wait_for(cluster, &args.stack, args.timeout, |v| {
        approve_progress(v, &plan, wait_up)
    })
    .await
}

/// Why the approval patch failed: a test op that no longer holds means the plan changed.
async fn refusal(cluster: &Cluster, stack: &str, plan: &str, err: kube::Error) -> anyhow::Error {
    let changed = matches!(&err, kube::Error::Api(s) if s.code == 422 || s.code == 409
        || s.message.contains("test operation") || s.message.contains("testing value"));
    if !changed {
        return api_error(err, cluster.action("patch", STACKS, Some(stack)));
    }
    match cluster.stack(stack).await {
        Ok(now) => match check(stack, pending_plan(&now).as_deref(), Some(plan)) {
            Err(message) => anyhow!(message),
            // Still pending: the object changed otherwise (a new annotation); try again.
            Ok(_) => {
                anyhow!("the Stack changed while approving (not its plan): run the command again")
            }
        },
        Err(e) => e,
    }
}
