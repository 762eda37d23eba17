//! `kubectl pulumi reconcile <stack>`.

use crate::cli::ReconcileArgs;
use crate::cluster::{api_error, Cluster, STACKS};
use crate::cmd::{wait_for, FIELD_MANAGER};
use crate::view::wait::reconcile_progress;
use anyhow::Result;
use kube::api::{Patch, PatchParams};
use pulumi_operator_api::names;
use std::process::ExitCode;

/// Asks for a run (a new reconcile-request value) and waits until the Stack shows it handled.
pub async fn run(cluster: &Cluster, args: &ReconcileArgs) -> Result<ExitCode> {
    // A clear error for a missing Stack before anything is written.
    cluster.stack(&args.stack).await?;
    let request = format!("kubectl-pulumi-{}", jiff::Timestamp::now());
    let patch = serde_json::json!({
        "metadata": {"annotations": {names::RECONCILIATION_REQUEST_ANNOTATION: request}}
    });
    cluster
        .stacks(false)
        .patch(
            &args.stack,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|e| api_error(e, cluster.action("patch", STACKS, Some(&args.stack))))?;
    eprintln!(
        "asked stack {}/{} to reconcile ({}={request})",
        cluster.namespace,
        args.stack,
        names::RECONCILIATION_REQUEST_ANNOTATION
    );
    if args.no_wait {
        return Ok(ExitCode::SUCCESS);
    }
    wait_for(cluster, &args.stack, args.timeout, |v| {
        reconcile_progress(v, &request)
    })
    .await
}
