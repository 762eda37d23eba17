//! The Workspace controller. With `workspaceReclaimPolicy: Delete` a Workspace is only the
//! template of its stack's Jobs: nothing runs for it, and it is Ready as soon as it is seen.

use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, Result};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use pulumi_operator_api::{names, Workspace, WorkspaceStatus};
use std::sync::Arc;

pub fn desired_status(ws: &Workspace, now: &Time) -> WorkspaceStatus {
    let old = ws.status.clone().unwrap_or_default();
    let keep = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == names::CONDITION_READY && c.status == names::STATUS_TRUE)
        .map(|c| c.last_transition_time.clone());
    WorkspaceStatus {
        observed_generation: ws.metadata.generation,
        conditions: Some(vec![Condition {
            type_: names::CONDITION_READY.into(),
            status: names::STATUS_TRUE.into(),
            reason: names::WS_REASON_SUCCEEDED.into(),
            message: "ready: each operation runs as a Job built from this workspace".into(),
            last_transition_time: keep.unwrap_or_else(|| now.clone()),
            observed_generation: ws.metadata.generation,
        }]),
        ..old
    }
}

pub async fn reconcile(ws: Arc<Workspace>, ctx: Arc<Context>) -> Result<Action> {
    let ns = ws
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let status = desired_status(&ws, &Time(jiff::Timestamp::now()));
    if ws.status.as_ref() != Some(&status) {
        let api: Api<Workspace> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = serde_json::json!({"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "status": status});
        api.patch_status(
            &ws.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    }
    Ok(Action::await_change())
}
