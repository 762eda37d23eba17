//! The Update controller's I/O loop: an Update becomes a plan Secret and a Job (built by pure
//! functions), and the Job and its pod are folded back into the Update's status. Finished
//! Updates are deleted after `ttlAfterCompleted`.

use crate::program::render_project;
use crate::program::PROGRAM_SCHEME;
use crate::runtime::cached::{CachedJob, CachedPod};
use crate::runtime::context::Context;
use crate::runtime::error::{Error, Result};
use crate::update::errors::{OutputsUnavailable, PlanUnavailable};
use crate::update::job::{build_job, build_plan, build_plan_secret, JobConfig, JobShape};
use crate::update::objects::{outputs_secret, saved_plan_secret};
use crate::update::status::{
    job_finished, not_started, pod_ended, pod_start_problem, progress, recheck_after,
    should_stop_job, start_failure, status_for, NotStarted, Progress,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use pulumi_operator_api::plan::{
    plan_digest, plan_secret_name, FailureReason, PolicyPackPlan, RunPlan, PLAN_KEY,
};
use pulumi_operator_api::{names, parse_duration, Update, UpdateStatus, Workspace};
use serde::Serialize;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

async fn publish(ctx: &Context, update: &Update, type_: EventType, reason: &str, note: String) {
    ctx.publish(&update.object_ref(&()), type_, reason, "Run", note)
        .await;
}

async fn write_status(
    ctx: &Context,
    api: &Api<Update>,
    update: &Update,
    status: &UpdateStatus,
) -> Result<()> {
    crate::runtime::status::apply_status(
        api,
        &update.name_any(),
        names::FIELD_MANAGER_UPDATE_STATUS,
        status,
        None,
    )
    .await?;
    ctx.wrote_update_status(update, status);
    Ok(())
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
    crate::update::status::update_condition(update, names::CONDITION_COMPLETE)
        .filter(|c| c.status == names::STATUS_TRUE)
        .map(|c| c.last_transition_time.clone())
}

/// A finished Update: stop a Job that might still start pods, release it when its Stack is
/// gone, and delete it once its TTL has passed (the Stack's finalizer holds it until the Stack
/// has absorbed the result).
async fn finished(update: &Update, ctx: &Context, ns: &str) -> Result<Action> {
    let name = update.name_any();
    if let Some(job) = own_job(ctx, update, ns) {
        // A Job with an ended pod ends by itself (one completion, no retries); stopping it
        // then would let the Job controller delete a pod it still counts as active, and with
        // it the logs `kubectl logs job/<update>` shows.
        let a_pod_ended = ctx
            .stores
            .pods_of_update(ns, &name)
            .iter()
            .any(|p| owned_by_job(p, &job) && pod_ended(p));
        if !job_finished(&job) && !a_pod_ended {
            stop_job(ctx, ns, &job).await?;
        }
    }
    if update.metadata.deletion_timestamp.is_some() {
        if update.finalizers().iter().any(|f| f == names::FINALIZER)
            && ctx.owning_stack(update).await?.is_none()
        {
            // Nobody is left to absorb it (the Stack was removed without its finalizer).
            let api: Api<Update> = Api::namespaced(ctx.client.clone(), ns);
            crate::runtime::finalizer::remove_finalizer(&api, &name, Some(update)).await?;
            info!("released an Update whose Stack is gone");
        }
        return Ok(Action::await_change());
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
    Ok(crate::runtime::requeue(ttl - age + Duration::from_secs(1)))
}

/// Whether an object is controlled by this Update (its UID, not only its name: an earlier
/// Update of the same name may have left objects that are still being garbage-collected).
fn owned_by_update<K: Resource>(obj: &K, update: &Update) -> bool {
    let uid = update.uid().unwrap_or_default();
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

/// The Update's Job from the cache, if it is this Update's own.
fn own_job(ctx: &Context, update: &Update, ns: &str) -> Option<Arc<CachedJob>> {
    ctx.stores
        .jobs
        .get(&ObjectRef::new(&update.name_any()).within(ns))
        .filter(|j| owned_by_update(j.as_ref(), update))
}

/// Tells a Job to start no further pod (the operation is over, or must never start: a pod
/// created later would run an operation nobody waits for). The Job controller stops the
/// pods it still runs.
async fn stop_job(ctx: &Context, ns: &str, job: &CachedJob) -> Result<()> {
    if job.spec.as_ref().and_then(|s| s.parallelism) == Some(0) {
        return Ok(());
    }
    let jobs: Api<CachedJob> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"spec": {"parallelism": 0}});
    match jobs
        .patch(
            &job.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
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
    warn!(%reason, %message, "the operation cannot start");
    let failed = Progress::Failed {
        reason: reason.into(),
        message: message.clone(),
        result: None,
        end: None,
    };
    write_status(ctx, api, update, &status_for(update, &failed, None, now)).await?;
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

/// Creates an object of this Update unless it exists. One left by an earlier Update of the
/// same name (not ours by UID) is waited for: the garbage collector removes it with that
/// Update; it is never adopted. Anything else of that name is not the operator's to touch:
/// the Update fails with a clear message.
async fn create_owned<K>(api: &Api<K>, obj: &K, update: &Update) -> Result<Created>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Ok(create_or_find(api, obj, update).await?.0)
}

/// [`create_owned`], with the object as stored when it is this Update's.
async fn create_or_find<K>(api: &Api<K>, obj: &K, update: &Update) -> Result<(Created, Option<K>)>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let created: Result<Created> = match api.create(&PostParams::default(), obj).await {
        Ok(stored) => return Ok((Created::Ready, Some(stored))),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let name = obj.meta().name.clone().unwrap_or_default();
            match api.get_opt(&name).await? {
                Some(existing) if owned_by_update(&existing, update) => {
                    return Ok((Created::Ready, Some(existing)))
                }
                Some(existing) if left_by_namesake(&existing, update) => {
                    info!(object = %name, "waiting for a leftover of an earlier Update of the same name to be collected");
                    Ok(Created::Blocked(name))
                }
                Some(_) => Ok(Created::Rejected(format!(
                    "a {} named {name:?} already exists and does not belong to this Update; \
                     delete or rename it",
                    K::kind(&())
                ))),
                None => Ok(Created::Blocked(name)),
            }
        }
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => Ok(Created::Rejected(
            format!("{} (HTTP {})", e.message, e.code),
        )),
        Err(e) => Err(e.into()),
    };
    Ok((created?, None))
}

/// Whether `obj` belongs to an earlier Update of the same name (another UID).
fn left_by_namesake<K: Resource>(obj: &K, update: &Update) -> bool {
    obj.meta().owner_references.iter().flatten().any(|o| {
        o.kind == "Update"
            && o.api_version.starts_with("auto.pulumi.com/")
            && o.name == update.name_any()
    })
}

enum Created {
    Ready,
    /// A leftover of the same name is on its way out: try again shortly.
    Blocked(String),
    /// The API server refused it for good.
    Rejected(String),
}

/// Event when the runner cleared a stale lock of an earlier operation of the same Stack.
const EVENT_STALE_LOCK_CLEARED: &str = "StaleLockCleared";

/// How long an Update waits for its Workspace before failing (the Stack retries, re-creating
/// the Workspace).
const WORKSPACE_WAIT_SECONDS: i64 = 60;
const LEFTOVER_RETRY: Duration = Duration::from_secs(2);
/// How soon an Update waiting for a policy pack being resolved looks again (the Update
/// controller does not watch StackPolicies).
const POLICY_PACK_WAIT: Duration = Duration::from_secs(5);

/// `?` for a phase of a reconcile: the phase's value when the reconcile goes on, else return
/// what ends it.
macro_rules! go_on {
    ($phase:expr) => {
        match $phase {
            ControlFlow::Continue(value) => value,
            ControlFlow::Break(end) => return Ok(end.into()),
        }
    };
}

/// One look at an Update: a finished one is [`finished`]; else its Job (started if need be),
/// followed into a progress, its outputs handed over on success, and the status written (with
/// its events) when it changed.
pub async fn reconcile(update: Arc<Update>, ctx: Arc<Context>) -> Result<Action> {
    let update = ctx.with_written_status(update);
    let ns = update
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    if crate::update::status::update_complete(&update) {
        return finished(&update, &ctx, &ns).await;
    }
    if crate::update::admission::cancelled(&update) {
        // Its Stack cancelled it before it started and deletes it: nothing to run or report.
        return Ok(Action::await_change());
    }
    let api: Api<Update> = Api::namespaced(ctx.client.clone(), &ns);
    let now = Time(jiff::Timestamp::now());
    let job = go_on!(job_or_start(&update, &ctx, &ns, &api, &now).await?);
    if update.metadata.deletion_timestamp.is_some() {
        // `kubectl delete update` of a running operation cancels it: the runner gets SIGTERM
        // and Pulumi stops cleanly; the result is absorbed by the Stack, then the Update goes.
        stop_job(&ctx, &ns, &job).await?;
    }
    let mut pods = ctx.stores.pods_of_update(&ns, &update.name_any());
    pods.retain(|p| owned_by_job(p, &job));
    let cached: Vec<&CachedPod> = pods.iter().map(|p| p.as_ref()).collect();
    // A pod past its fence's bound reads as stopped (see `fence`).
    let judged = crate::update::status::with_fence_verdicts(&cached, &ctx.deletions);
    let fence_due = crate::update::status::fence_due(&cached, &ctx.deletions);
    let pod_refs: Vec<&CachedPod> = judged.iter().collect();
    let at_gate = crate::update::admission::admit(&ctx, &ns, &update, &pod_refs).await?;
    let (progress, recheck) = match (at_gate, follow(&ctx, &ns, &job, &pod_refs, &now).await?) {
        // The Stack's other pod's end triggers its own Update: look again shortly.
        (Some(message), (Progress::Running { .. }, recheck)) => (
            Progress::Running { message },
            recheck.min(crate::update::status::AT_GATE_RECHECK),
        ),
        (_, followed) => followed,
    };
    let (progress, recheck) =
        match with_outputs(&ctx, &ns, &update, &pod_refs, progress, &now).await? {
            (progress, Some(soon)) => (progress, soon),
            (progress, None) => (progress, recheck),
        };
    // Never without a start once the Job exists (see `start`).
    let start = job
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .or_else(|| job.metadata.creation_timestamp.clone());
    let status = status_for(&update, &progress, start, &now);
    let changed = status != update.status.clone().unwrap_or_default();
    if changed {
        write_status(&ctx, &api, &update, &status).await?;
        announce(&ctx, &update, &progress).await;
    }
    Ok(match progress {
        Progress::Succeeded { .. } | Progress::Failed { .. } => Action::await_change(),
        // Waits that end by time alone (pods that do not start, image pulls) are looked at
        // again when due, even without an event.
        Progress::Running { .. } | Progress::Unconfirmed { .. } => {
            crate::runtime::requeue(fence_due.map_or(recheck, |due| recheck.min(due)))
        }
    })
}

/// The Update's Job; else, before a first start, the Job started now (its events trigger the
/// next reconcile). An Update whose Job is gone ends (see `job_gone`).
async fn job_or_start(
    update: &Update,
    ctx: &Context,
    ns: &str,
    api: &Api<Update>,
    now: &Time,
) -> Result<ControlFlow<Action, Arc<CachedJob>>> {
    let deleting = update.metadata.deletion_timestamp.is_some();
    let started = update
        .status
        .as_ref()
        .is_some_and(|s| s.start_time.is_some());
    if let Some(job) = own_job(ctx, update, ns) {
        return Ok(ControlFlow::Continue(job));
    }
    if !deleting && !started {
        return Ok(ControlFlow::Break(
            match start(update, ctx, ns, api, now).await? {
                // The Job's events trigger the next reconcile.
                Started::Job => Action::await_change(),
                Started::Done(action) => action,
            },
        ));
    }
    // The cache may not have a Job created a moment ago: ask before concluding it is gone.
    // (Not before a first start: creating a Job that exists is answered with a conflict,
    // and `create_owned` then reads it.)
    let job = Api::<CachedJob>::namespaced(ctx.client.clone(), ns)
        .get_opt(&update.name_any())
        .await?
        .filter(|j| owned_by_update(j, update));
    match job {
        Some(job) => Ok(ControlFlow::Continue(Arc::new(job))),
        None => job_gone(update, ctx, ns, api, now, started)
            .await
            .map(ControlFlow::Break),
    }
}

/// An Update (started, or being deleted) whose Job is gone. Never a second Job for one
/// Update: once its pods are gone, it ends here and the Stack decides whether to run the
/// operation again.
async fn job_gone(
    update: &Update,
    ctx: &Context,
    ns: &str,
    api: &Api<Update>,
    now: &Time,
    started: bool,
) -> Result<Action> {
    if let Some(pod) = ctx
        .stores
        .pods_of_update(ns, &update.name_any())
        .into_iter()
        .find(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
    {
        let progress = Progress::Running {
            message: format!(
                "the operation's Job was deleted; waiting for pod {} to stop",
                pod.name_any()
            ),
        };
        let status = status_for(update, &progress, None, now);
        if Some(&status) != update.status.as_ref() {
            write_status(ctx, api, update, &status).await?;
        }
        return Ok(crate::runtime::requeue(LEFTOVER_RETRY));
    }
    let message = if started {
        "the operation's Job was deleted before it finished; the stack runs the operation again"
    } else {
        "the Update was deleted before its operation started"
    };
    fail_before_start(
        ctx,
        api,
        update,
        names::UPDATE_REASON_UPDATE_FAILED,
        message.into(),
        now,
    )
    .await
}

/// The operation's progress from its Job and pods, and when to look again without an event.
/// A Job that must start no further pod is told so.
async fn follow(
    ctx: &Context,
    ns: &str,
    job: &CachedJob,
    pods: &[&CachedPod],
    now: &Time,
) -> Result<(Progress, Duration)> {
    if should_stop_job(job, pods) {
        stop_job(ctx, ns, job).await?;
    }
    let progress = progress(Some(job), pods, now.0);
    let recheck = recheck_after(None, None, pods, now.0);
    if !matches!(progress, Progress::Running { .. }) {
        // Ended, or held open by a pod on an unreachable node (it started long ago).
        return Ok((progress, recheck));
    }
    match not_started(job, pods, now.0) {
        Some(waiting) => waiting_to_start(ctx, ns, job, pods, &waiting, now, progress).await,
        None => Ok((progress, recheck)),
    }
}

/// An operation that has not started: why, from the pod's own status first, then the newest
/// Warning Event (from the watch); it fails once it has waited too long for that reason.
async fn waiting_to_start(
    ctx: &Context,
    ns: &str,
    job: &CachedJob,
    pods: &[&CachedPod],
    waiting: &NotStarted,
    now: &Time,
    running: Progress,
) -> Result<(Progress, Duration)> {
    let said = waiting
        .pod
        .as_ref()
        .and_then(|n| pods.iter().find(|p| p.metadata.name.as_ref() == Some(n)))
        .and_then(|p| pod_start_problem(p));
    let warning = said.or_else(|| latest_warning(ctx, waiting, job, pods));
    let mut recheck = recheck_after(
        Some(waiting),
        warning.as_ref().map(|(reason, _)| reason.as_str()),
        pods,
        now.0,
    );
    // "Kubernetes gave no reason" is a fact only once the Warning Events are listed.
    let knows_why = warning.is_some() || ctx.warnings.filled();
    if !knows_why {
        recheck = recheck.min(Duration::from_secs(5));
    }
    let progress =
        if let Some(failed) = start_failure(waiting, warning.clone()).filter(|_| knows_why) {
            // The Job must not start the pod later, when nobody waits for it any more.
            stop_job(ctx, ns, job).await?;
            failed
        } else if let Some((reason, message)) = warning {
            Progress::Running {
                message: format!("waiting for the operation to start: {reason}: {message}"),
            }
        } else {
            running
        };
    Ok((progress, recheck))
}

/// A success hands its outputs (or a preview's saved plan) over; when they cannot be had,
/// the operation fails after all. Outputs not yet in a log that may still be arriving are
/// looked for again shortly (the returned recheck).
async fn with_outputs(
    ctx: &Context,
    ns: &str,
    update: &Update,
    pods: &[&CachedPod],
    progress: Progress,
    now: &Time,
) -> Result<(Progress, Option<Duration>)> {
    let Progress::Succeeded { result, end } = &progress else {
        return Ok((progress, None));
    };
    let saves_plan = crate::update::plan::saves_plan(update);
    let collected = match result.outputs_digest.as_deref() {
        Some(digest) => collect_outputs(ctx, ns, update, pods, digest).await?,
        None if saves_plan => Err(OutputsUnavailable::NoSavedPlan),
        None => Ok(()),
    };
    let Err(why) = collected else {
        return Ok((progress, None));
    };
    let ended = end.as_ref().map(|t| t.0);
    if why == OutputsUnavailable::NotInLog {
        if let Some(soon) = crate::update::status::outputs_log_recheck(ended, now.0) {
            info!("the outputs are not in the pod's log yet; looking again shortly");
            let message = "the operation succeeded; waiting for its outputs in its pod's log";
            let waiting = Progress::Running {
                message: message.into(),
            };
            return Ok((waiting, Some(soon)));
        }
    }
    warn!(%why, "outputs unavailable");
    let reason = if saves_plan {
        crate::update::plan::REASON_PLAN_UNAVAILABLE
    } else {
        names::UPDATE_REASON_OUTPUTS_UNAVAILABLE
    };
    Ok((
        Progress::Failed {
            reason: reason.into(),
            message: format!("the operation succeeded, but {why}"),
            result: Some(result.clone()),
            end: end.clone(),
        },
        None,
    ))
}

/// The events of a status just written: a stale lock the runner cleared, the operation's end.
async fn announce(ctx: &Context, update: &Update, progress: &Progress) {
    let cleared = match progress {
        Progress::Succeeded { result, .. }
        | Progress::Failed {
            result: Some(result),
            ..
        } => result.stale_locks_cleared.clone(),
        _ => Vec::new(),
    };
    if !cleared.is_empty() {
        publish(
            ctx,
            update,
            EventType::Normal,
            EVENT_STALE_LOCK_CLEARED,
            format!(
                "cleared the stack's lock left by an earlier operation of this Stack whose pod is gone: {}",
                cleared.join("; ")
            ),
        )
        .await;
    }
    let kind = update
        .spec
        .update_type
        .as_ref()
        .map(|t| t.as_str().to_string())
        .unwrap_or_default();
    let stack = update.spec.stack_name.clone().unwrap_or_default();
    match progress {
        Progress::Succeeded { .. } => {
            publish(
                ctx,
                update,
                EventType::Normal,
                names::EVENT_UPDATE_SUCCEEDED,
                format!("{} stack {stack:?}", verb(&kind, true)),
            )
            .await;
        }
        Progress::Failed { message, .. } => {
            publish(
                ctx,
                update,
                EventType::Warning,
                names::EVENT_UPDATE_FAILED,
                format!(
                    "Failed to {} stack {stack:?}: {message}",
                    verb(&kind, false)
                ),
            )
            .await;
        }
        Progress::Unconfirmed { message } => {
            publish(
                ctx,
                update,
                EventType::Warning,
                crate::update::status::REASON_NODE_UNREACHABLE,
                message.clone(),
            )
            .await;
        }
        Progress::Running { .. } => {}
    }
}

/// The text of the plan `approved` that the `up` `update` applies: from the Secret the
/// operator wrote when that plan's preview ended, which must belong to that preview, itself
/// an Update of the same Stack. `Ok(Err(why))`: the plan cannot be had.
async fn approved_plan(
    ctx: &Context,
    ns: &str,
    update: &Update,
    approved: &str,
) -> Result<std::result::Result<String, PlanUnavailable>> {
    use crate::update::plan::{saved_plan_secret_name, saves_plan, SAVED_PLAN_KEY};
    let stack_of = |u: &Update| {
        u.owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone())
    };
    let preview = match ctx.stores.updates.get(&ObjectRef::new(approved).within(ns)) {
        Some(p) => Some((*p).clone()),
        None => {
            Api::<Update>::namespaced(ctx.client.clone(), ns)
                .get_opt(approved)
                .await?
        }
    };
    let Some(preview) = preview else {
        return Ok(Err(PlanUnavailable::PreviewGone));
    };
    if !saves_plan(&preview)
        || stack_of(&preview).is_none()
        || stack_of(&preview) != stack_of(update)
    {
        return Ok(Err(PlanUnavailable::NotOfThisStack));
    }
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(&saved_plan_secret_name(approved))
        .await?
        .filter(|s| owned_by_update(s, &preview));
    let text = secret
        .and_then(|s| s.data)
        .and_then(|d| d.get(SAVED_PLAN_KEY).cloned())
        .and_then(|b| String::from_utf8(b.0).ok());
    Ok(text.ok_or(PlanUnavailable::SavedPlanGone))
}

/// Keeps the plan a preview saved (`spec.approval`) in the Secret `<update>-saved-plan`, owned
/// by the preview, until its `up` reads it. `Ok(Err(why))`: the plan cannot be kept.
async fn keep_saved_plan(
    secrets: &Api<Secret>,
    ns: &str,
    update: &Update,
    plan: Option<String>,
) -> Result<std::result::Result<(), OutputsUnavailable>> {
    let Some(plan) = plan else {
        return Ok(Err(OutputsUnavailable::NoSavedPlan));
    };
    if plan.len() > pulumi_operator_api::plan::MAX_SAVED_PLAN_BYTES {
        return Ok(Err(OutputsUnavailable::PlanTooLarge));
    }
    let secret = saved_plan_secret(update, ns, plan);
    create_secret_once(secrets, &secret, update, "saved plan").await
}

/// Writes the outputs Secret `<update>-stack-outputs` from the sealed line in the succeeded
/// pod's log, opened with the key of this Update's plan Secret (PKO's operator writes it too;
/// the pod needs no rights on Secrets). `Ok(Err(why))`: the outputs cannot be had.
async fn collect_outputs(
    ctx: &Context,
    ns: &str,
    update: &Update,
    pods: &[&CachedPod],
    digest: &str,
) -> Result<std::result::Result<(), OutputsUnavailable>> {
    use pulumi_operator_api::sealed;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let Some((plan, key)) = plan_with_key(&secrets, update).await? else {
        return Ok(Err(OutputsUnavailable::PlanSecretGone));
    };
    let Some(pod) = pods.iter().copied().find(|p| pulumi_ended_well(p)) else {
        return Ok(Err(OutputsUnavailable::PodGone));
    };
    let log = match pod_log(ctx, ns, pod).await? {
        Ok(log) => log,
        Err(why) => return Ok(Err(why)),
    };
    let Some(line) = sealed::find_line(&log).filter(|l| sealed::digest(l) == digest) else {
        return Ok(Err(OutputsUnavailable::NotInLog));
    };
    let payload = match sealed::open(&key, line) {
        Ok(p) => p,
        Err(e) => return Ok(Err(OutputsUnavailable::CannotOpen(e))),
    };
    if crate::update::plan::saves_plan(update) {
        return keep_saved_plan(&secrets, ns, update, payload.plan).await;
    }
    if payload.plan.is_some() {
        return Ok(Err(OutputsUnavailable::PlanNotAskedFor));
    }
    let secret = outputs_secret(update, ns, &plan.outputs_labels, payload)?;
    create_secret_once(&secrets, &secret, update, "outputs").await
}

/// This Update's plan (from its own plan Secret) and the key its outputs are sealed with.
async fn plan_with_key(
    secrets: &Api<Secret>,
    update: &Update,
) -> Result<Option<(RunPlan, String)>> {
    let plan: Option<RunPlan> = secrets
        .get_opt(&plan_secret_name(&update.name_any()))
        .await?
        .filter(|s| owned_by_update(s, update))
        .and_then(|s| s.data)
        .and_then(|d| d.get(PLAN_KEY).cloned())
        .and_then(|b| serde_json::from_slice(&b.0).ok());
    Ok(plan.and_then(|p| p.outputs_key.clone().map(|k| (p, k))))
}

/// Whether the pod's `pulumi` container ended well (its phase may not say so yet).
fn pulumi_ended_well(p: &CachedPod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.name == names::PULUMI_CONTAINER
                && c.state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == 0)
        })
}

/// How much of the end of the log is searched for the sealed outputs: the runner writes them
/// last but one line, with room for what plugins that outlive Pulumi may still print.
const OUTPUTS_LOG_TAIL_LINES: i64 = 200;

/// The end of the `pulumi` container's log, where the runner writes the sealed outputs.
async fn pod_log(
    ctx: &Context,
    ns: &str,
    pod: &CachedPod,
) -> Result<std::result::Result<String, OutputsUnavailable>> {
    let params = kube::api::LogParams {
        container: Some(names::PULUMI_CONTAINER.into()),
        tail_lines: Some(OUTPUTS_LOG_TAIL_LINES),
        ..Default::default()
    };
    match Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .logs(&pod.name_any(), &params)
        .await
    {
        Ok(log) => Ok(Ok(log)),
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 404) => {
            Ok(Err(OutputsUnavailable::LogUnreadable(e.message)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Creates a Secret of this Update's (outputs, saved plan) once: a Secret written by a
/// reconcile just before this one is fine, somebody else's in the way is not.
async fn create_secret_once(
    secrets: &Api<Secret>,
    secret: &Secret,
    update: &Update,
    what: &'static str,
) -> Result<std::result::Result<(), OutputsUnavailable>> {
    let name = secret.name_any();
    match secrets.create(&PostParams::default(), secret).await {
        Ok(_) => {
            info!(secret = %name, "wrote the {what} Secret");
            Ok(Ok(()))
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(match secrets.get_opt(&name).await? {
            Some(existing) if !owned_by_update(&existing, update) => {
                Err(OutputsUnavailable::SecretInTheWay(name))
            }
            _ => Ok(()),
        }),
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
            Ok(Err(OutputsUnavailable::SecretRefused {
                what,
                message: e.message,
            }))
        }
        Err(e) => Err(e.into()),
    }
}

fn owned_by_job(pod: &CachedPod, job: &CachedJob) -> bool {
    let uid = job.uid().unwrap_or_default();
    pod.owner_references().iter().any(|o| o.uid == uid)
}

/// The newest Warning Event about what keeps the operation from starting: the Job's when it
/// has no pod (FailedCreate: a missing ServiceAccount, a quota, Pod Security), else the pod's
/// (FailedMount, FailedScheduling, ...), from the watch of Warning Events.
fn latest_warning(
    ctx: &Context,
    waiting: &NotStarted,
    job: &CachedJob,
    pods: &[&CachedPod],
) -> Option<(String, String)> {
    let uid = match &waiting.pod {
        None => job.uid(),
        Some(name) => pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|p| p.uid()),
    }?;
    let (reason, message) = ctx.warnings.latest(&uid)?;
    // The scheduler's Event says what the pod's condition says a moment later: one wording,
    // so that the condition's arrival is not one more status write.
    let reason = if reason == "FailedScheduling" {
        "Unschedulable".to_string()
    } else {
        reason
    };
    Some((reason, message))
}

enum Started {
    /// The Job exists now.
    Job,
    /// Nothing more to do in this reconcile.
    Done(Action),
}

impl From<Action> for Started {
    fn from(action: Action) -> Self {
        Started::Done(action)
    }
}

/// Creates the operation's objects (program ConfigMap, plan Secret, Job) from its Workspace.
async fn start(
    update: &Update,
    ctx: &Context,
    ns: &str,
    api: &Api<Update>,
    now: &Time,
) -> Result<Started> {
    let ws = go_on!(ready_workspace(update, ctx, ns, api, now).await?);
    let plan = go_on!(run_plan(update, ctx, ns, api, now, &ws).await?);
    let shape = JobShape::of(&plan);
    let mut objects: Vec<Created> = Vec::new();
    if shape.program {
        objects.push(go_on!(
            create_program_config_map(update, ctx, ns, api, now, &ws).await?
        ));
    }
    let (created, stored) = create_or_find(
        &Api::<Secret>::namespaced(ctx.client.clone(), ns),
        &build_plan_secret(update, &plan)?,
        update,
    )
    .await?;
    objects.push(created);
    if let Some(done) = blocked_or_rejected(ctx, api, update, &objects, now).await? {
        return Ok(Started::Done(done));
    }
    let job = JobInputs {
        shape,
        // The plan as stored (an earlier reconcile may have written it, with another outputs
        // key): the Job's runner refuses any other.
        plan_digest: stored.as_ref().and_then(stored_plan_digest),
    };
    go_on!(create_job(update, ctx, ns, api, now, &ws, job).await?);
    // `startTime` records that this Update has had a Job: it never gets a second one.
    let starting = Progress::Running {
        message: crate::update::status::RUNNING_MESSAGE.into(),
    };
    write_status(
        ctx,
        api,
        update,
        &status_for(update, &starting, Some(now.clone()), now),
    )
    .await?;
    Ok(Started::Job)
}

/// The Workspace the operation runs in, once the cache has the generation this Update was
/// made for. One that does not come is waited for a while, then the Update fails.
async fn ready_workspace(
    update: &Update,
    ctx: &Context,
    ns: &str,
    api: &Api<Update>,
    now: &Time,
) -> Result<ControlFlow<Action, Arc<Workspace>>> {
    let ws_name = update.spec.workspace_name.clone().unwrap_or_default();
    let Some(ws) = ctx
        .stores
        .workspaces
        .get(&ObjectRef::new(&ws_name).within(ns))
        .filter(|w| w.metadata.deletion_timestamp.is_none())
    else {
        return no_workspace(update, ctx, api, now, &ws_name)
            .await
            .map(ControlFlow::Break);
    };
    let wanted_generation = update
        .annotations()
        .get(crate::update::annotations::WORKSPACE_GENERATION_ANNOTATION)
        .and_then(|g| g.parse::<i64>().ok())
        .unwrap_or(0);
    if ws.metadata.generation.unwrap_or(0) < wanted_generation {
        // The cache has not seen the Workspace this Update was made for yet; its watch event
        // triggers this reconcile again.
        return Ok(ControlFlow::Break(crate::runtime::requeue(
            Duration::from_secs(1),
        )));
    }
    Ok(ControlFlow::Continue(ws))
}

/// No Workspace `ws_name` (yet): waited for [`WORKSPACE_WAIT_SECONDS`] after the Update's
/// creation, then the Update fails.
async fn no_workspace(
    update: &Update,
    ctx: &Context,
    api: &Api<Update>,
    now: &Time,
    ws_name: &str,
) -> Result<Action> {
    let waited = jiff::Timestamp::now()
        .duration_since(
            update
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .unwrap_or_else(jiff::Timestamp::now),
        )
        .as_secs();
    if waited >= WORKSPACE_WAIT_SECONDS {
        let message = format!(
            "the Workspace {ws_name:?} does not exist (deleted before the operation started); \
             the stack re-creates it and runs the operation again"
        );
        return fail_before_start(
            ctx,
            api,
            update,
            names::UPDATE_REASON_WORKSPACE_NOT_FOUND,
            message,
            now,
        )
        .await;
    }
    let progress = Progress::Running {
        message: format!("waiting for the Workspace {ws_name:?}"),
    };
    let mut status = status_for(update, &progress, None, now);
    if let Some(c) = status.conditions.as_mut().and_then(|c| c.first_mut()) {
        c.status = names::STATUS_FALSE.into();
        c.reason = names::UPDATE_REASON_WORKSPACE_NOT_FOUND.into();
    }
    if Some(&status) != update.status.as_ref() {
        write_status(ctx, api, update, &status).await?;
    }
    Ok(crate::runtime::requeue(Duration::from_secs(10)))
}

/// The policy packs the Update must run with (the operator's copies of private ones). A pack
/// still being resolved is waited for (that ends by itself); one that is unavailable fails the
/// Update (`PolicyPackFailed`).
async fn policy_packs(
    update: &Update,
    ctx: &Context,
    api: &Api<Update>,
    now: &Time,
) -> Result<ControlFlow<Action, Vec<PolicyPackPlan>>> {
    let packs = match crate::policy::packs_for_update(update, &ctx.stores) {
        Ok(Some(mut packs)) => {
            // Packs of private repositories: the operator's copy, not the credentials.
            crate::policy::archive::hand_over(
                &ctx.client,
                &ctx.config.lease_namespace,
                &ctx.stores.policies.state(),
                &mut packs,
            )
            .await
            .map(|()| Some(packs))
        }
        other => other,
    };
    match packs {
        Ok(Some(packs)) => Ok(ControlFlow::Continue(packs)),
        Ok(None) => {
            info!("namespace not in the cache yet: its policies are decided once it is");
            Ok(ControlFlow::Break(Action::requeue(Duration::from_secs(2))))
        }
        Err(unavailable) if unavailable.pending => {
            // Not resolved yet (e.g. the policy changed after the Stack created this Update):
            // that ends by itself, so the Update waits for it instead of failing.
            info!(%unavailable, "waiting for a policy pack being resolved");
            Ok(ControlFlow::Break(Action::requeue(POLICY_PACK_WAIT)))
        }
        Err(unavailable) => {
            warn!(%unavailable, "operation refused: a policy pack is unavailable");
            fail_before_start(
                ctx,
                api,
                update,
                FailureReason::PolicyPackFailed.as_str(),
                format!("{unavailable}; the operation does not run without it"),
                now,
            )
            .await
            .map(ControlFlow::Break)
        }
    }
}

/// The runner's plan, with a new key to seal the outputs with and the approved plan an `up`
/// applies. An Update that cannot have one fails.
async fn run_plan(
    update: &Update,
    ctx: &Context,
    ns: &str,
    api: &Api<Update>,
    now: &Time,
    ws: &Workspace,
) -> Result<ControlFlow<Action, RunPlan>> {
    let mut plan = match build_plan(update, ws) {
        Ok(p) => p,
        Err(invalid) => {
            return fail_before_start(ctx, api, update, "InvalidUpdate", invalid.to_string(), now)
                .await
                .map(ControlFlow::Break);
        }
    };
    // The administrator's policy packs: never run without them.
    plan.policy_packs = match policy_packs(update, ctx, api, now).await? {
        ControlFlow::Continue(packs) => packs,
        ControlFlow::Break(end) => return Ok(ControlFlow::Break(end)),
    };
    // The outputs come back sealed with this key in the pod's log (see `sealed`).
    plan.outputs_key = Some(pulumi_operator_api::sealed::new_key()?);
    let Some(approved) = crate::update::plan::applied_plan(update) else {
        return Ok(ControlFlow::Continue(plan));
    };
    match approved_plan(ctx, ns, update, approved).await? {
        Ok(text) => {
            plan.apply_plan = Some(text);
            Ok(ControlFlow::Continue(plan))
        }
        Err(why) => {
            let message = format!(
                "the approved plan {approved} cannot be applied: {why}; the Stack saves a new \
                 plan for approval"
            );
            fail_before_start(
                ctx,
                api,
                update,
                crate::update::plan::REASON_PLAN_UNAVAILABLE,
                message,
                now,
            )
            .await
            .map(ControlFlow::Break)
        }
    }
}

/// Creates the ConfigMap with the rendered Pulumi.yaml of the Workspace's Program. A missing
/// Program fails the Update.
async fn create_program_config_map(
    update: &Update,
    ctx: &Context,
    ns: &str,
    api: &Api<Update>,
    now: &Time,
    ws: &Workspace,
) -> Result<ControlFlow<Action, Created>> {
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
    let found = match ctx
        .stores
        .programs
        .get(&ObjectRef::new(&program_name).within(ns))
    {
        Some(p) => Some((*p).clone()),
        // The cache may not have a Program created a moment ago: ask before failing.
        None => {
            Api::<pulumi_operator_api::Program>::namespaced(ctx.client.clone(), ns)
                .get_opt(&program_name)
                .await?
        }
    };
    let Some(p) = found else {
        let message = format!("the Program {program_name:?} does not exist");
        return fail_before_start(ctx, api, update, "SourceUnavailable", message, now)
            .await
            .map(ControlFlow::Break);
    };
    let rendered = render_project(&p.name_any(), p.spec.program.as_ref())?;
    let cm = crate::update::objects::program_config_map(update, ns, rendered);
    let api_cm = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
    Ok(ControlFlow::Continue(
        create_owned(&api_cm, &cm, update).await?,
    ))
}

/// The digest of the plan a plan Secret holds (`data` as the API server returns it,
/// `stringData` as written).
fn stored_plan_digest(secret: &Secret) -> Option<String> {
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(PLAN_KEY))
        .map(|b| b.0.as_slice());
    let text = secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(PLAN_KEY))
        .map(String::as_bytes);
    data.or(text).map(plan_digest)
}

/// What the Job is built from besides its Workspace.
struct JobInputs {
    shape: JobShape,
    plan_digest: Option<String>,
}

/// Creates the Job, if the operator's policy allows its pod.
async fn create_job(
    update: &Update,
    ctx: &Context,
    ns: &str,
    api: &Api<Update>,
    now: &Time,
    ws: &Workspace,
    inputs: JobInputs,
) -> Result<ControlFlow<Action>> {
    let JobInputs { shape, plan_digest } = inputs;
    let cfg = JobConfig {
        runner_image: ctx.config.runner_image.clone(),
        runner_pull_policy: ctx.config.runner_image_pull_policy.clone(),
        plan_digest,
    };
    let job = build_job(update, ws, &cfg, shape)?;
    let pod_spec = serde_json::to_value(job.spec.as_ref().and_then(|s| s.template.spec.as_ref()))?;
    let checked = crate::runtime::limits::check_pod(ns, &pod_spec, &ctx.limits).and_then(|()| {
        if shape.policy_packs {
            crate::update::policy_job::check_untouched(
                &pod_spec,
                &cfg.runner_image,
                cfg.plan_digest.as_deref(),
                crate::policy::guarded(&ctx.stores, ns),
            )
        } else {
            Ok(())
        }
    });
    if let Err(why) = checked {
        warn!(%why, "operation not allowed");
        return fail_before_start(
            ctx,
            api,
            update,
            names::REASON_NOT_ALLOWED,
            why.to_string(),
            now,
        )
        .await
        .map(ControlFlow::Break);
    }
    let created = create_owned(
        &Api::<Job>::namespaced(ctx.client.clone(), ns),
        &job,
        update,
    )
    .await?;
    if let Some(done) = blocked_or_rejected(ctx, api, update, &[created], now).await? {
        return Ok(ControlFlow::Break(done));
    }
    info!(job = %update.name_any(), "job created");
    Ok(ControlFlow::Continue(()))
}

/// Ends this reconcile when an object could not be created: a leftover is waited for, a
/// refusal fails the Update with the API server's message.
async fn blocked_or_rejected(
    ctx: &Context,
    api: &Api<Update>,
    update: &Update,
    created: &[Created],
    now: &Time,
) -> Result<Option<Action>> {
    for c in created {
        match c {
            Created::Ready => {}
            Created::Blocked(name) => {
                info!(object = %name, "waiting for a leftover of an earlier Update to be deleted");
                return Ok(Some(crate::runtime::requeue(LEFTOVER_RETRY)));
            }
            Created::Rejected(message) => {
                let message = format!(
                    "the API server refused the operation's objects: {message}; fix the Stack's \
                     spec (often spec.workspaceTemplate or spec.updateTemplate)"
                );
                return fail_before_start(ctx, api, update, "InvalidUpdate", message, now)
                    .await
                    .map(Some);
            }
        }
    }
    Ok(None)
}
