//! The Update controller's I/O loop: an Update becomes a plan Secret and a Job (built by pure
//! functions), and the Job and its pod are folded back into the Update's status. Finished
//! Updates are deleted after `ttlAfterCompleted`.

use crate::context::{Context, FIELD_MANAGER};
use crate::controller::program::render_project;
use crate::error::{Error, Result};
use crate::stack::objects::PROGRAM_SCHEME;
use crate::update::job::{build_job, build_plan, build_plan_secret, job_labels, JobConfig};
use crate::update::status::{progress, should_stop_job, status_for, Progress, STUCK_AFTER_SECONDS};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use pulumi_operator_api::plan::{program_config_map_name, Source};
use pulumi_operator_api::{names, parse_duration, Update, UpdateStatus};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

async fn publish(ctx: &Context, update: &Update, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Run".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &update.object_ref(&())).await {
        warn!("cannot record event {reason}: {e}");
    }
}

async fn write_status(api: &Api<Update>, name: &str, status: &UpdateStatus) -> Result<()> {
    let patch = serde_json::json!({"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update", "status": status});
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Creates an object unless it exists (names are deterministic, so it is ours).
async fn create_once<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: Resource + Clone + Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn verb(kind: &str, past: bool) -> &'static str {
    match (kind, past) {
        ("preview", true) => "Previewed",
        ("refresh", true) => "Refreshed",
        ("destroy", true) => "Destroyed",
        (_, true) => "Updated",
        ("preview", false) => "preview",
        ("refresh", false) => "refresh",
        ("destroy", false) => "destroy",
        _ => "update",
    }
}

fn completed_at(update: &Update) -> Option<Time> {
    update
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == names::CONDITION_COMPLETE && c.status == names::STATUS_TRUE)
        .map(|c| c.last_transition_time.clone())
}

/// A finished Update: stop a Job that might still start pods, and delete the Update once its
/// TTL has passed.
async fn finished(update: &Update, ctx: &Context, ns: &str) -> Result<Action> {
    let name = update.name_any();
    if let Some(job) = ctx.stores.jobs.get(&ObjectRef::new(&name).within(ns)) {
        if job.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0 {
            stop_job(ctx, ns, &job).await?;
        }
    }
    let Some(ttl) = update
        .spec
        .ttl_after_completed
        .as_deref()
        .filter(|t| !t.is_empty())
    else {
        return Ok(Action::await_change());
    };
    let ttl = match parse_duration(ttl) {
        Ok(d) => d,
        Err(e) => {
            warn!("invalid spec.ttlAfterCompleted {ttl:?}: {e}");
            return Ok(Action::await_change());
        }
    };
    let Some(done) = completed_at(update) else {
        return Ok(Action::await_change());
    };
    let age = Duration::try_from(jiff::Timestamp::now().duration_since(done.0)).unwrap_or_default();
    if age >= ttl {
        publish(
            ctx,
            update,
            EventType::Normal,
            names::EVENT_UPDATE_EXPIRED,
            "ttl expired and was deleted".into(),
        )
        .await;
        let api: Api<Update> = Api::namespaced(ctx.client.clone(), ns);
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(ttl - age + Duration::from_secs(1)))
}

/// Tells a Job to start no further pod (Kubernetes 1.20 replaces a deleted Job pod at once;
/// the operation is over) and stops the ones it still runs.
async fn stop_job(ctx: &Context, ns: &str, job: &Job) -> Result<()> {
    if job.spec.as_ref().and_then(|s| s.parallelism) == Some(0) {
        return Ok(());
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"spec": {"parallelism": 0}});
    jobs.patch(
        &job.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    info!(job = %job.name_any(), "job stopped: no further pod");
    Ok(())
}

/// Ends an Update that cannot even start, with the reason in its status and an event.
async fn fail_before_start(
    ctx: &Context,
    api: &Api<Update>,
    update: &Update,
    reason: &str,
    message: String,
    now: &Time,
) -> Result<Action> {
    let failed = Progress::Failed {
        reason: reason.into(),
        message: message.clone(),
        result: None,
        end: None,
    };
    write_status(
        api,
        &update.name_any(),
        &status_for(update, &failed, None, now),
    )
    .await?;
    publish(
        ctx,
        update,
        EventType::Warning,
        names::EVENT_UPDATE_FAILED,
        message,
    )
    .await;
    Ok(Action::await_change())
}

pub async fn reconcile(update: Arc<Update>, ctx: Arc<Context>) -> Result<Action> {
    let ns = update
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = update.name_any();
    if update.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if crate::stack::status::update_complete(&update) {
        return finished(&update, &ctx, &ns).await;
    }
    let api: Api<Update> = Api::namespaced(ctx.client.clone(), &ns);
    let now = Time(jiff::Timestamp::now());
    let before = update.status.clone().unwrap_or_default();
    let ws_name = update.spec.workspace_name.clone().unwrap_or_default();
    let Some(ws) = ctx
        .stores
        .workspaces
        .get(&ObjectRef::new(&ws_name).within(&ns))
    else {
        let progress = Progress::Running {
            message: format!("waiting for the Workspace {ws_name:?}"),
        };
        let mut status = status_for(&update, &progress, None, &now);
        if let Some(c) = status.conditions.as_mut().and_then(|c| c.first_mut()) {
            c.status = names::STATUS_FALSE.into();
            c.reason = names::UPDATE_REASON_WORKSPACE_NOT_FOUND.into();
        }
        if status != before {
            write_status(&api, &name, &status).await?;
        }
        return Ok(Action::await_change());
    };

    let job = ctx.stores.jobs.get(&ObjectRef::new(&name).within(&ns));
    let wanted_generation = update
        .annotations()
        .get(crate::stack::objects::WORKSPACE_GENERATION_ANNOTATION)
        .and_then(|g| g.parse::<i64>().ok())
        .unwrap_or(0);
    if job.is_none() && ws.metadata.generation.unwrap_or(0) < wanted_generation {
        // The cache has not seen the Workspace this Update was made for yet; its watch event
        // triggers this reconcile again.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if job.is_none() {
        let plan = match build_plan(&update, &ws) {
            Ok(p) => p,
            Err(message) => {
                warn!(%message, "invalid update");
                return fail_before_start(&ctx, &api, &update, "InvalidUpdate", message, &now)
                    .await;
            }
        };
        let program = matches!(plan.source, Some(Source::Program { .. }));
        if program {
            let url = ws
                .spec
                .flux
                .as_ref()
                .and_then(|f| f.url.clone())
                .unwrap_or_default();
            let program_name = url
                .trim_start_matches(PROGRAM_SCHEME)
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            let Some(p) = ctx
                .stores
                .programs
                .get(&ObjectRef::new(&program_name).within(&ns))
            else {
                let message = format!("the Program {program_name:?} does not exist");
                return fail_before_start(&ctx, &api, &update, "SourceUnavailable", message, &now)
                    .await;
            };
            let rendered = render_project(&p.name_any(), p.spec.program.as_ref())?;
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": program_config_map_name(&name), "namespace": ns, "labels": job_labels(&update),
                             "ownerReferences": [update.controller_owner_ref(&())]},
                "immutable": true,
                "data": {"Pulumi.yaml": rendered},
            }))?;
            create_once(&Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns), &cm).await?;
        }
        create_once(
            &Api::<Secret>::namespaced(ctx.client.clone(), &ns),
            &build_plan_secret(&update, &plan)?,
        )
        .await?;
        let cfg = JobConfig {
            runner_image: ctx.config.runner_image.clone(),
            runner_pull_policy: ctx.config.runner_image_pull_policy.clone(),
        };
        let job = build_job(&update, &ws, &cfg, program)?;
        create_once(&Api::<Job>::namespaced(ctx.client.clone(), &ns), &job).await?;
        info!(job = %name, "job created");
    }

    let pods: Vec<Arc<Pod>> = ctx
        .stores
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.labels().get(names::UPDATE_NAME_LABEL) == Some(&name)
        })
        .collect();
    let pod_refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let start = job
        .as_ref()
        .and_then(|j| j.status.as_ref())
        .and_then(|s| s.start_time.clone());
    if let Some(job) = job.as_deref().filter(|j| should_stop_job(j, &pod_refs)) {
        stop_job(&ctx, &ns, job).await?;
    }
    let progress = progress(job.as_deref(), &pod_refs, now.0);
    let status = status_for(&update, &progress, start, &now);
    let changed = status != before;
    if changed {
        write_status(&api, &name, &status).await?;
    }
    let kind = update
        .spec
        .update_type
        .as_ref()
        .map(|t| t.as_str().to_string())
        .unwrap_or_default();
    let stack = update.spec.stack_name.clone().unwrap_or_default();
    match &progress {
        Progress::Succeeded { .. } if changed => {
            publish(
                &ctx,
                &update,
                EventType::Normal,
                names::EVENT_UPDATE_SUCCEEDED,
                format!("{} stack {stack:?}", verb(&kind, true)),
            )
            .await;
            Ok(Action::await_change())
        }
        Progress::Failed { message, .. } if changed => {
            publish(
                &ctx,
                &update,
                EventType::Warning,
                names::EVENT_UPDATE_FAILED,
                format!(
                    "Failed to {} stack {stack:?}: {message}",
                    verb(&kind, false)
                ),
            )
            .await;
            Ok(Action::await_change())
        }
        Progress::Succeeded { .. } | Progress::Failed { .. } => Ok(Action::await_change()),
        // Re-check waiting pods (image pulls) even without an event.
        Progress::Running { .. } => Ok(Action::requeue(Duration::from_secs(
            STUCK_AFTER_SECONDS as u64 / 4,
        ))),
    }
}
