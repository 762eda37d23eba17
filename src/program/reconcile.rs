//! The Program controller's reconcile: publishes the rendered program's digest as the
//! Program's `status.artifact` (server-side apply of the status), once per generation.

use super::project::{artifact, render_project, status_current};
use crate::runtime::context::Context;
use crate::runtime::error::{Error, Result};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::ResourceExt;
use pulumi_operator_api::{Program, ProgramStatus};
use std::sync::Arc;
use tracing::info;

pub async fn reconcile(program: Arc<Program>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = program
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = program.name_any();
    let generation = program.metadata.generation.unwrap_or(0);
    let rendered = render_project(&name, program.spec.program.as_ref())?;
    let artifact = artifact(
        &namespace,
        &name,
        generation,
        &rendered,
        jiff::Timestamp::now(),
    );
    let digest = artifact.digest.clone().unwrap_or_default();
    if status_current(program.status.as_ref(), generation, &digest) {
        return Ok(Action::await_change());
    }
    let status = ProgramStatus {
        observed_generation: Some(generation),
        artifact: Some(artifact),
    };
    let api: Api<Program> = Api::namespaced(ctx.client.clone(), &namespace);
    crate::runtime::status::apply_status(
        &api,
        &name,
        pulumi_operator_api::names::FIELD_MANAGER_PROGRAM_STATUS,
        &status,
        None,
    )
    .await?;
    info!(%digest, generation, "program artifact published");
    Ok(Action::await_change())
}
