//! The Stack controller's I/O loop: read (caches) → validate → decide → apply → write status.
//! It never waits for a Pulumi run: it creates an Update and returns; the Update's completion
//! triggers the next reconcile.

use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, Result};
use crate::metrics::{StackLabels, UpdateLabels};
use crate::source::{self, ResolveError};
use crate::stack::decide::{decide, Decision, Limits, Observed};
use crate::stack::objects::{build_update, build_workspace, ResolvedSource};
use crate::stack::prereq;
use crate::stack::status::{self, absorb, mark_reconciling, mark_result, mark_stalled};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use pulumi_operator_api::names;
use pulumi_operator_api::validation::{join_errors, validate_stack};
use pulumi_operator_api::{
    CurrentStackUpdate, Stack, StackStatus, StackUpdateStateMessage, Update, UpdateType, Workspace,
};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

const SOURCE_UNAVAILABLE_REQUEUE: Duration = Duration::from_secs(30);

async fn publish(ctx: &Context, stack: &Stack, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &stack.object_ref(&())).await {
        warn!("cannot record event {reason}: {e}");
    }
}

async fn write_status(api: &Api<Stack>, name: &str, status: &StackStatus) -> Result<()> {
    let patch =
        serde_json::json!({"apiVersion": "pulumi.com/v1", "kind": "Stack", "status": status});
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Adds or removes our finalizer, guarded by the resourceVersion (a concurrent change fails
/// with a conflict and is retried, rather than being overwritten).
async fn set_finalizer(api: &Api<Stack>, stack: &Stack, present: bool) -> Result<()> {
    let mut finalizers: Vec<String> = stack
        .finalizers()
        .iter()
        .filter(|f| *f != names::FINALIZER)
        .cloned()
        .collect();
    if present {
        finalizers.push(names::FINALIZER.into());
    }
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": stack.resource_version()}});
    api.patch(
        &stack.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

fn update_metrics(ctx: &Context, stack: &Stack, status: &StackStatus) {
    let labels = StackLabels {
        namespace: stack.namespace().unwrap_or_default(),
        name: stack.name_any(),
    };
    let failing = status.last_update.as_ref().and_then(|l| l.state.clone())
        == Some(StackUpdateStateMessage::Failed);
    ctx.metrics
        .stacks_failing
        .get_or_create(&labels)
        .set(failing as i64);
    let reconciling = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == names::CONDITION_RECONCILING && c.status == names::STATUS_TRUE);
    ctx.metrics
        .stacks_reconciling
        .get_or_create(&labels)
        .set(reconciling as i64);
}

/// Reads the outputs Secret of a successful Update (a missing Secret means no outputs).
async fn read_outputs(
    ctx: &Context,
    ns: &str,
    update: &Update,
) -> Option<std::collections::BTreeMap<String, serde_json::Value>> {
    let name = update
        .status
        .as_ref()?
        .outputs
        .clone()
        .filter(|o| !o.is_empty())?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match secrets.get_opt(&name).await {
        Ok(Some(s)) => {
            let keys = status::secret_keys(
                s.annotations()
                    .get(names::SECRETS_ANNOTATION)
                    .map(String::as_str),
            );
            Some(status::outputs_from_secret(
                &s.data.unwrap_or_default(),
                &keys,
            ))
        }
        Ok(None) => None,
        Err(e) => {
            warn!("cannot read outputs Secret {name}: {e}");
            None
        }
    }
}

fn record_finished_update(ctx: &Context, update: &Update) {
    let kind = update
        .spec
        .update_type
        .as_ref()
        .map(|t| t.as_str().to_string())
        .unwrap_or_default();
    let result = if status::update_failed(update) {
        "failed"
    } else {
        "succeeded"
    };
    let labels = UpdateLabels {
        r#type: kind,
        result: result.into(),
    };
    ctx.metrics.updates.get_or_create(&labels).inc();
    let st = update.status.as_ref();
    if let (Some(start), Some(end)) = (
        st.and_then(|s| s.start_time.as_ref()),
        st.and_then(|s| s.end_time.as_ref()),
    ) {
        let secs = end.0.duration_since(start.0).as_secs_f64().max(0.0);
        ctx.metrics
            .update_duration
            .get_or_create(&labels)
            .observe(secs);
    }
}

pub async fn reconcile(stack: Arc<Stack>, ctx: Arc<Context>) -> Result<Action> {
    let ns = stack
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = stack.name_any();
    let api: Api<Stack> = Api::namespaced(ctx.client.clone(), &ns);
    let deleting = stack.metadata.deletion_timestamp.is_some();
    let has_finalizer = stack.finalizers().iter().any(|f| f == names::FINALIZER);
    if deleting && !has_finalizer {
        return Ok(Action::await_change());
    }
    if !deleting && !has_finalizer {
        // Then go on in this reconcile: waiting for the watch to show the finalizer would
        // add a round trip before the first operation.
        set_finalizer(&api, &stack, true).await?;
    }
    let generation = stack.metadata.generation.unwrap_or(0);
    let request = stack
        .annotations()
        .get(names::RECONCILIATION_REQUEST_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let now = Time(jiff::Timestamp::now());
    let before = stack.status.clone().unwrap_or_default();
    let mut status = before.clone();
    status.observed_generation = Some(generation);
    status.observed_reconcile_request = Some(request.clone());

    // Validate: a bad spec stalls with a clear reason, an event and a log line, and waits
    // for the spec to change.
    let errors = validate_stack(&stack);
    if !errors.is_empty() {
        let mut message = join_errors(&errors);
        if deleting {
            message.push_str(&format!(
                "; the stack cannot be destroyed with this spec: fix it, or remove the finalizer with \
                 kubectl patch stack {name} --type=merge -p '{{\"metadata\":{{\"finalizers\":[]}}}}'"
            ));
        }
        warn!(%message, "invalid stack spec");
        let was_stalled = before
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == names::CONDITION_STALLED && c.message == message);
        mark_stalled(
            &mut status,
            names::REASON_SPEC_INVALID,
            &message,
            generation,
            &now,
        );
        if !was_stalled {
            publish(
                &ctx,
                &stack,
                EventType::Warning,
                names::EVENT_STACK_CONFIG_INVALID,
                message,
            )
            .await;
        }
        if status != before {
            write_status(&api, &name, &status).await?;
        }
        update_metrics(&ctx, &stack, &status);
        return Ok(Action::await_change());
    }

    // Absorb the Update in flight once it has finished.
    if let Some(current) = status.current_update.clone().and_then(|c| c.name) {
        let cached = ctx
            .stores
            .updates
            .get(&ObjectRef::new(&current).within(&ns));
        let update = match cached {
            Some(u) => Some((*u).clone()),
            None => {
                Api::<Update>::namespaced(ctx.client.clone(), &ns)
                    .get_opt(&current)
                    .await?
            }
        };
        match update {
            Some(u) if status::update_complete(&u) => {
                let outputs = if status::update_failed(&u) {
                    None
                } else {
                    read_outputs(&ctx, &ns, &u).await
                };
                absorb(&mut status, &u, outputs, &now);
                prune_history(&ctx, &stack, &ns, &status).await;
                record_finished_update(&ctx, &u);
                if status::update_failed(&u) {
                    let msg = u
                        .status
                        .as_ref()
                        .and_then(|s| s.message.clone())
                        .unwrap_or_default();
                    publish(
                        &ctx,
                        &stack,
                        EventType::Warning,
                        names::EVENT_STACK_UPDATE_FAILURE,
                        format!("Failed to update stack: {msg}"),
                    )
                    .await;
                } else {
                    publish(
                        &ctx,
                        &stack,
                        EventType::Normal,
                        names::EVENT_STACK_UPDATE_SUCCESSFUL,
                        "Successfully updated stack".into(),
                    )
                    .await;
                }
                info!(update = %current, failed = status::update_failed(&u), "update finished");
            }
            Some(_) => {
                mark_reconciling(
                    &mut status,
                    names::REASON_STACK_PROCESSING,
                    names::MESSAGE_STACK_BEING_PROCESSED,
                    generation,
                    &now,
                );
                if status != before {
                    write_status(&api, &name, &status).await?;
                }
                update_metrics(&ctx, &stack, &status);
                return Ok(Action::await_change());
            }
            // Lost (deleted by hand): forget it; the decision below creates the next one.
            None => {
                warn!(update = %current, "the Update in flight no longer exists");
                status.current_update = None;
            }
        }
    }

    // Deletion without destroy: done.
    if deleting && (!stack.spec.destroy_on_finalize || stack.spec.preview) {
        status::mark_ready(&mut status, generation, &now);
        if status != before {
            write_status(&api, &name, &status).await?;
        }
        set_finalizer(&api, &stack, false).await?;
        return Ok(Action::await_change());
    }

    // Destroy without the source (pko-reference §3.5): the recorded project is enough, so a
    // deleted repository, Program or Flux source cannot block the deletion.
    let bypass = deleting
        && stack.spec.destroy_on_finalize
        && !stack.spec.preview
        && !stack.spec.run_program;
    let recorded = status.project_info.clone().filter(|_| bypass);
    let resolved = match recorded {
        Some(p) => Ok(ResolvedSource::ProjectInfo {
            name: p.name,
            runtime: p.runtime,
        }),
        None => {
            // A tracked branch is re-read when the answer shared by all Stacks tracking it is
            // older than this Stack's resync period (src/source/poll.rs).
            let limits = Limits {
                min_resync: Duration::from_secs(ctx.config.min_resync_seconds),
            };
            let resync = crate::stack::decide::resync_period(&stack.spec, &limits);
            source::resolve_source(&stack, &ctx, resync).await
        }
    };
    let source = match resolved {
        Ok(s) => s,
        Err(ResolveError { reason, message }) => {
            warn!(%message, %reason, "source unavailable");
            // A missing git credentials Secret or key is an invalid spec (PKO): say so once
            // with an event. Secrets are not watched, so both cases are re-checked later.
            let repeated = before.conditions.iter().flatten().any(|c| {
                c.type_ == names::CONDITION_STALLED && c.reason == reason && c.message == message
            });
            if reason == names::REASON_SPEC_INVALID && !repeated {
                publish(
                    &ctx,
                    &stack,
                    EventType::Warning,
                    names::EVENT_STACK_CONFIG_INVALID,
                    message.clone(),
                )
                .await;
            }
            mark_stalled(&mut status, reason, &message, generation, &now);
            if status != before {
                write_status(&api, &name, &status).await?;
            }
            update_metrics(&ctx, &stack, &status);
            return Ok(Action::requeue(SOURCE_UNAVAILABLE_REQUEUE));
        }
    };
    let revision = source.revision().to_string();
    let observed = Observed {
        generation,
        reconcile_request: &request,
        deleting,
        revision: &revision,
        polled: stack.spec.git.branch.is_some() && stack.spec.git.commit.is_none(),
        now: now.0,
    };
    let limits = Limits {
        min_resync: Duration::from_secs(ctx.config.min_resync_seconds),
    };
    let decision = decide(&stack.spec, Some(&status), &observed, &limits);
    // Prerequisites are checked only when an operation is due, and not for a destroy.
    let problems = match &decision {
        Decision::Run { .. } if !deleting => prerequisites_ready(&ctx, &stack, &ns, &now).await?,
        _ => Vec::new(),
    };
    let action = match decision {
        Decision::Synced { requeue } => {
            mark_result(&mut status, generation, &now);
            let destroyed = status.last_update.as_ref().is_some_and(|l| {
                l.update_type == Some(UpdateType::Destroy)
                    && l.state == Some(StackUpdateStateMessage::Succeeded)
            });
            if deleting && !destroyed {
                // A destroy that keeps failing holds the Stack: say how to let it go.
                let hint = format!(
                    "; to delete the Stack without destroying its resources: kubectl patch stack {name} --type=merge -p '{{\"metadata\":{{\"finalizers\":[]}}}}'"
                );
                for c in status.conditions.iter_mut().flatten() {
                    if c.type_ == names::CONDITION_STALLED && !c.message.contains("finalizers") {
                        c.message.push_str(&hint);
                    }
                }
            }
            if deleting && destroyed {
                if status != before {
                    write_status(&api, &name, &status).await?;
                }
                set_finalizer(&api, &stack, false).await?;
                return Ok(Action::await_change());
            }
            requeue
                .map(Action::requeue)
                .unwrap_or_else(Action::await_change)
        }
        Decision::Run { reason, .. } if !problems.is_empty() => {
            let message = prereq::message(&problems);
            info!(%message, %reason, "waiting for prerequisites");
            mark_reconciling(
                &mut status,
                names::REASON_PREREQUISITE_NOT_SATISFIED,
                &message,
                generation,
                &now,
            );
            Action::await_change()
        }
        Decision::Run { kind, reason } => {
            // Names derive from the status as this reconcile sees it (after absorbing).
            let mut view = (*stack).clone();
            view.status = Some(status.clone());
            let update_name = start_update(&ctx, &view, &source, kind, &reason, &revision).await?;
            status.current_update = Some(CurrentStackUpdate {
                name: Some(update_name),
                generation: Some(generation),
                reconcile_request: Some(request.clone()),
                commit: Some(revision.clone()),
            });
            mark_reconciling(
                &mut status,
                names::REASON_STACK_PROCESSING,
                names::MESSAGE_STACK_BEING_PROCESSED,
                generation,
                &now,
            );
            publish(
                &ctx,
                &stack,
                EventType::Normal,
                names::EVENT_STACK_UPDATE_DETECTED,
                reason,
            )
            .await;
            Action::await_change()
        }
    };
    if status != before {
        write_status(&api, &name, &status).await?;
    }
    update_metrics(&ctx, &stack, &status);
    Ok(action)
}

/// Unsatisfied prerequisites (none: the stack may run). Out-of-date ones are asked to run
/// again with the annotation `pulumi.com/reconciliation-request: after-<their last update>`.
async fn prerequisites_ready(
    ctx: &Context,
    stack: &Stack,
    ns: &str,
    now: &Time,
) -> Result<Vec<(String, prereq::Unsatisfied)>> {
    let mut problems = Vec::new();
    for requirement in stack.spec.prerequisites.iter().flatten() {
        let other = ctx
            .stores
            .stacks
            .get(&ObjectRef::new(&requirement.name).within(ns));
        let Some(why) = prereq::check(requirement, other.as_deref(), now.0) else {
            continue;
        };
        if let (prereq::Unsatisfied::OutOfDate { last_update }, Some(other)) = (&why, &other) {
            let value = prereq::rerun_request(last_update);
            if other
                .annotations()
                .get(names::RECONCILIATION_REQUEST_ANNOTATION)
                != Some(&value)
            {
                let api: Api<Stack> = Api::namespaced(ctx.client.clone(), ns);
                let patch = serde_json::json!({
                    "apiVersion": "pulumi.com/v1", "kind": "Stack",
                    "metadata": {"name": requirement.name, "annotations": {names::RECONCILIATION_REQUEST_ANNOTATION: value}},
                });
                let params = PatchParams::apply(names::FIELD_MANAGER_PREREQUISITE_REQUEST).force();
                api.patch(&requirement.name, &params, &Patch::Apply(&patch))
                    .await?;
                info!(prerequisite = %requirement.name, "asked an out-of-date prerequisite to run again");
            }
        }
        problems.push((requirement.name.clone(), why));
    }
    Ok(problems)
}

/// Deletes finished Updates beyond the history limit (their Jobs and Secrets go with them).
async fn prune_history(ctx: &Context, stack: &Stack, ns: &str, status: &StackStatus) {
    let name = stack.name_any();
    let mine: Vec<Arc<Update>> = ctx
        .stores
        .updates
        .state()
        .into_iter()
        .filter(|u| {
            u.namespace().as_deref() == Some(ns)
                && u.labels().get(names::STACK_NAME_LABEL) == Some(&name)
        })
        .collect();
    let refs: Vec<&Update> = mine.iter().map(|u| u.as_ref()).collect();
    let last = status
        .last_update
        .as_ref()
        .and_then(|l| l.name.clone())
        .unwrap_or_default();
    let current = status
        .current_update
        .as_ref()
        .and_then(|c| c.name.clone())
        .unwrap_or_default();
    let api: Api<Update> = Api::namespaced(ctx.client.clone(), ns);
    for old in prereq::prune(&refs, ctx.config.update_history_limit, &[&last, &current]) {
        match api
            .delete(&old, &kube::api::DeleteParams::background())
            .await
        {
            Ok(_) => info!(update = %old, "deleted an old update (history limit)"),
            Err(e) => warn!(update = %old, "cannot delete an old update: {e}"),
        }
    }
}

/// Applies the Workspace (the Job template) and creates the Update. An Update that already
/// exists under the same deterministic name is the one a previous run of this reconcile
/// created: it is re-attached, not duplicated.
async fn start_update(
    ctx: &Context,
    stack: &Stack,
    source: &ResolvedSource,
    kind: UpdateType,
    reason: &str,
    revision: &str,
) -> Result<String> {
    let ns = stack.namespace().unwrap_or_default();
    let workspace = build_workspace(stack, source);
    let workspaces: Api<Workspace> = Api::namespaced(ctx.client.clone(), &ns);
    let mut ws_value = serde_json::to_value(&workspace)?;
    ws_value["apiVersion"] = "auto.pulumi.com/v1alpha1".into();
    ws_value["kind"] = "Workspace".into();
    let applied = workspaces
        .patch(
            &stack.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&ws_value),
        )
        .await?;
    // Server-side apply on this apiserver does not always drop a source the Workspace no
    // longer has (e.g. git, when a destroy runs from the recorded project): remove it.
    let stale: Vec<&str> = [
        (
            "git",
            workspace.spec.git.is_none(),
            applied.spec.git.is_some(),
        ),
        (
            "flux",
            workspace.spec.flux.is_none(),
            applied.spec.flux.is_some(),
        ),
        (
            "local",
            workspace.spec.local.is_none(),
            applied.spec.local.is_some(),
        ),
        (
            "projectInfo",
            workspace.spec.project_info.is_none(),
            applied.spec.project_info.is_some(),
        ),
    ]
    .into_iter()
    .filter(|(_, unwanted, present)| *unwanted && *present)
    .map(|(field, _, _)| field)
    .collect();
    let applied = if stale.is_empty() {
        applied
    } else {
        let spec: serde_json::Map<String, serde_json::Value> = stale
            .iter()
            .map(|f| (f.to_string(), serde_json::Value::Null))
            .collect();
        let patch = serde_json::json!({ "spec": spec });
        workspaces
            .patch(
                &stack.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?
    };
    let mut update = build_update(stack, kind, reason, revision);
    // The Update controller must build the Job from this Workspace, not an older cached one.
    update
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            crate::stack::objects::WORKSPACE_GENERATION_ANNOTATION.to_string(),
            applied.metadata.generation.unwrap_or(0).to_string(),
        );
    let updates: Api<Update> = Api::namespaced(ctx.client.clone(), &ns);
    match updates.create(&PostParams::default(), &update).await {
        Ok(_) => info!(update = %update.name_any(), %reason, "update created"),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            info!(update = %update.name_any(), "update already exists; re-attaching")
        }
        Err(e) => return Err(e.into()),
    }
    Ok(update.name_any())
}
