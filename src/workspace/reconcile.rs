//! The Workspace controller. A Workspace is the template of its stack's Jobs; what else exists
//! for it follows the owning Stack's `workspaceReclaimPolicy`:
//!
//! - `Delete` (the default): nothing runs between operations. A StatefulSet left from
//!   `Retain` is deleted once the stack has no operation in flight and no unfinished update
//!   Job mounts the cache (a Job built just before the switch may use it), its cache claim
//!   once no pod references it any more
//!   (Kubernetes keeps a claim that even a finished pod references; finished update pods go
//!   with their Updates' `ttlAfterCompleted`).
//! - `Retain`: a StatefulSet `<ws>-workspace` keeps a warm workspace pod at the Workspace's
//!   revision (the last one the Stack deployed), with its plan Secret and a cache claim that
//!   update Jobs mount too (`crate::workspace::statefulset`). `status.address` names the pod
//!   once the StatefulSet exists and its cache claim is bound: from then on update Jobs mount
//!   the cache. The workspace is kept after failed operations too, for debugging.
//!
//! A Workspace without an owning Stack is a template only (as with `Delete`). Everything is
//! read from watch caches; a write happens only when something must change.

use crate::runtime::cached::{CachedJob, CachedPod, CachedPodSpec};
use crate::runtime::context::Context;
use crate::runtime::error::{Error, Result};
use crate::update::job::JobConfig;
use crate::update::status::job_finished;
use crate::workspace::statefulset::{
    self as retained, cache_claim_name, pod_name, statefulset_name, APPLIED_HASH_ANNOTATION,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use pulumi_operator_api::{names, Stack, Workspace, WorkspaceReclaimPolicy, WorkspaceStatus};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// While an unfinished update Job still mounts the cache of a workspace being reclaimed.
const RECLAIM_RETRY: Duration = Duration::from_secs(10);
/// While pods of finished update Jobs still reference the cache claim.
const CLAIM_RETRY: Duration = Duration::from_secs(30);
/// After a StatefulSet was deleted to be recreated (an immutable field changed).
const MIGRATE_RETRY: Duration = Duration::from_secs(5);
/// When a Program source cannot be rendered yet.
const PROGRAM_RETRY: Duration = Duration::from_secs(30);

/// The watch caches of what retained workspaces are made of (label-selected: ours only).
#[derive(Clone)]
pub struct RetainedStores {
    pub statefulsets: Store<StatefulSet>,
    pub claims: Store<PersistentVolumeClaim>,
}

/// What the Workspace controller observed, for its status.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    /// Only the Jobs' template (`Delete`, or no owning Stack).
    Template,
    /// A retained workspace.
    Retained {
        /// The StatefulSet exists and its cache claim is bound: Jobs may mount the cache.
        cache_bound: bool,
        /// The StatefulSet has rolled out the current template.
        rolled_out: bool,
        /// A pod of the current template is ready.
        ready: bool,
        /// Why it cannot be built, if so.
        problem: Option<String>,
    },
}

/// The reclaim policy of the Workspace's owning Stack (`Delete` without one).
pub fn policy(stack: Option<&Stack>) -> WorkspaceReclaimPolicy {
    stack
        .map(|s| s.spec.reclaim_policy())
        .unwrap_or(WorkspaceReclaimPolicy::Delete)
}

/// Whether the Stack has an operation in flight, or a spec change its controller has not acted
/// on yet (which may start one): its Job may have been built with the cache of the retained
/// workspace (`status.address` is what the Update controller saw), so the workspace stays
/// until the operation is over.
pub fn operation_pending(stack: Option<&Stack>) -> bool {
    let Some(s) = stack else { return false };
    let st = s.status.as_ref();
    st.and_then(|st| st.current_update.as_ref()).is_some()
        || st.and_then(|st| st.observed_generation) < s.metadata.generation
}

pub fn desired_status(ws: &Workspace, observed: &Observed, now: &Time) -> WorkspaceStatus {
    let old = ws.status.clone().unwrap_or_default();
    let Readiness {
        ok,
        reason,
        message,
        address,
    } = readiness(&ws.name_any(), observed);
    let status = if ok {
        names::STATUS_TRUE
    } else {
        names::STATUS_FALSE
    };
    let keep = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == names::CONDITION_READY && c.status == status)
        .map(|c| c.last_transition_time.clone());
    WorkspaceStatus {
        observed_generation: ws.metadata.generation,
        address,
        conditions: Some(vec![Condition {
            type_: names::CONDITION_READY.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            last_transition_time: keep.unwrap_or_else(|| now.clone()),
            observed_generation: ws.metadata.generation,
        }]),
        ..old
    }
}

/// The Workspace's `Ready` condition and `status.address`, from what was observed.
struct Readiness {
    ok: bool,
    reason: &'static str,
    message: String,
    address: Option<String>,
}

fn readiness(name: &str, observed: &Observed) -> Readiness {
    match observed {
        Observed::Template => Readiness {
            ok: true,
            reason: names::WS_REASON_SUCCEEDED,
            message: "ready: each operation runs as a Job built from this workspace".to_string(),
            address: None,
        },
        Observed::Retained {
            problem: Some(p), ..
        } => Readiness {
            ok: false,
            reason: names::WS_REASON_INITIALIZATION_FAILED,
            message: p.clone(),
            address: None,
        },
        Observed::Retained {
            cache_bound,
            rolled_out,
            ready,
            problem: None,
        } => retained_readiness(name, *cache_bound, *rolled_out, *ready),
    }
}

/// A retained workspace is ready once its cache claim is bound (then Jobs mount the cache: the
/// address is set), the StatefulSet has rolled out and its pod is ready.
fn retained_readiness(name: &str, cache_bound: bool, rolled_out: bool, ready: bool) -> Readiness {
    let pod = pod_name(name);
    let address = cache_bound.then(|| pod.clone());
    let (ok, reason, message) = if !cache_bound {
        (
            false,
            names::WS_REASON_WAITING_FOR_REPLICAS,
            format!(
                "waiting for the cache volume claim {} to be bound (workspaceReclaimPolicy Retain \
                 needs a default StorageClass)",
                cache_claim_name(name)
            ),
        )
    } else if !rolled_out {
        (
            false,
            names::WS_REASON_ROLLING_UPDATE,
            "Waiting for the statefulset to be updated".to_string(),
        )
    } else if !ready {
        (
            false,
            names::WS_REASON_WAITING_FOR_REPLICAS,
            format!("Waiting for the workspace pod to be available (kubectl logs {pod} -c pulumi)"),
        )
    } else {
        (
            true,
            names::WS_REASON_SUCCEEDED,
            format!(
                "the retained workspace pod {pod} is ready: kubectl exec -it {pod} -c pulumi -- sh"
            ),
        )
    };
    Readiness {
        ok,
        reason,
        message,
        address,
    }
}

/// Whether a StatefulSet has rolled out its current template, and has a ready pod of it.
pub fn rollout(sts: &StatefulSet) -> (bool, bool) {
    let Some(st) = sts.status.as_ref() else {
        return (false, false);
    };
    let observed = st.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(0);
    let rolled =
        observed && st.update_revision.is_some() && st.current_revision == st.update_revision;
    (rolled, rolled && st.ready_replicas.unwrap_or(0) >= 1)
}

/// Whether an unfinished Job in `ns` mounts `claim`.
pub fn jobs_mount_claim(jobs: &[Arc<CachedJob>], ns: &str, claim: &str) -> bool {
    jobs.iter().any(|j| {
        j.metadata.namespace.as_deref() == Some(ns)
            && !job_finished(j)
            && j.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|p| spec_mounts(p, claim))
    })
}

/// Whether a pod in `ns` (in any phase) references `claim`.
pub fn pods_mount_claim(pods: &[Arc<CachedPod>], ns: &str, claim: &str) -> bool {
    pods.iter().any(|p| {
        p.metadata.namespace.as_deref() == Some(ns)
            && p.spec.as_ref().is_some_and(|s| spec_mounts(s, claim))
    })
}

fn spec_mounts(spec: &CachedPodSpec, claim: &str) -> bool {
    spec.volumes.iter().flatten().any(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == claim)
    })
}

async fn publish(ctx: &Context, ws: &Workspace, reason: &str, note: String) {
    ctx.publish(
        &ws.object_ref(&()),
        EventType::Normal,
        reason,
        "Reconcile",
        note,
    )
    .await;
}

pub async fn reconcile(
    ws: Arc<Workspace>,
    ctx: Arc<Context>,
    stores: Arc<RetainedStores>,
) -> Result<Action> {
    let ns = ws
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    if ws.metadata.deletion_timestamp.is_some() {
        // The garbage collector removes the StatefulSet, its Secret and the claim.
        return Ok(Action::await_change());
    }
    let name = ws.name_any();
    let sts = stores
        .statefulsets
        .get(&ObjectRef::new(&statefulset_name(&name)).within(&ns));
    let claim = stores
        .claims
        .get(&ObjectRef::new(&cache_claim_name(&name)).within(&ns));
    // Reclaiming deletes the retained workspace and its cache: "no owner" must be a fact.
    let stack = ctx.owning_stack(ws.as_ref()).await?;
    let (observed, action) = match policy(stack.as_deref()) {
        WorkspaceReclaimPolicy::Retain => retain(&ws, &ctx, &ns, sts, claim).await?,
        _ => (
            Observed::Template,
            reclaim(
                &ws,
                &ctx,
                &ns,
                sts,
                claim,
                operation_pending(stack.as_deref()),
            )
            .await?,
        ),
    };
    let status = desired_status(&ws, &observed, &Time(jiff::Timestamp::now()));
    if ws.status.as_ref() != Some(&status) {
        let api: Api<Workspace> = Api::namespaced(ctx.client.clone(), &ns);
        crate::runtime::status::apply_status(
            &api,
            &name,
            names::FIELD_MANAGER_WORKSPACE_STATUS,
            &status,
            None,
        )
        .await?;
        // A field left out of an apply is not removed from a status on every apiserver
        // (Kubernetes 1.20 keeps it): clear the address explicitly.
        let had_address = ws.status.as_ref().is_some_and(|s| s.address.is_some());
        if had_address && status.address.is_none() {
            let clear = serde_json::json!({"status": {"address": null}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&clear))
                .await?;
        }
    }
    Ok(action)
}

/// `Delete`: no StatefulSet, no cache claim. The StatefulSet goes once no unfinished update
/// Job mounts the cache (such a Job needs the workspace pod's node); the claim goes once no
/// pod mounts it any more — Kubernetes keeps a claim that any pod references, even a finished
/// one, in `Terminating`, and a `Terminating` claim would block a switch back to `Retain`.
/// Finished update pods go with their Updates (`ttlAfterCompleted`).
async fn reclaim(
    ws: &Workspace,
    ctx: &Context,
    ns: &str,
    sts: Option<Arc<StatefulSet>>,
    claim: Option<Arc<PersistentVolumeClaim>>,
    operation_pending: bool,
) -> Result<Action> {
    let claim = claim.filter(|c| c.metadata.deletion_timestamp.is_none());
    let sts = sts.filter(|s| s.metadata.deletion_timestamp.is_none());
    if sts.is_none() && claim.is_none() {
        return Ok(Action::await_change());
    }
    if operation_pending {
        // The Stack's next status change (the operation's end) triggers us again.
        info!("an operation of the stack is in flight; the retained workspace goes after it");
        return Ok(crate::runtime::requeue(RECLAIM_RETRY));
    }
    let claim_name = cache_claim_name(&ws.name_any());
    let mut action = Action::await_change();
    if let Some(sts) = sts {
        if jobs_mount_claim(&ctx.stores.jobs.state(), ns, &claim_name) {
            info!(claim = %claim_name, "an update Job still mounts the cache; the workspace goes after it");
            return Ok(crate::runtime::requeue(RECLAIM_RETRY));
        }
        let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
        match api
            .delete(&sts.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        info!(statefulset = %sts.name_any(), "retained workspace deleted (workspaceReclaimPolicy Delete)");
        publish(
            ctx,
            ws,
            names::EVENT_WORKSPACE_DELETED,
            format!(
                "StatefulSet {} deleted per reclaim policy Delete",
                sts.name_any()
            ),
        )
        .await;
    }
    if claim.is_some() {
        if pods_mount_claim(&ctx.stores.pods.state(), ns, &claim_name) {
            info!(claim = %claim_name, "finished update pods still reference the cache claim; deleting it once they are gone");
            action = crate::runtime::requeue(CLAIM_RETRY);
        } else {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
            match api.delete(&claim_name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            info!(claim = %claim_name, "cache claim deleted (workspaceReclaimPolicy Delete)");
        }
    }
    Ok(action)
}

/// Why the Program of a Workspace whose source is a Program cannot be had.
#[derive(thiserror::Error, Debug)]
enum ProgramError {
    #[error("the Program {0:?} does not exist")]
    Missing(String),
    #[error("cannot render the Program {program:?}: {error}")]
    Unrenderable { program: String, error: Error },
}

/// The rendered Pulumi.yaml when the Workspace's source is a Program.
fn program(
    ws: &Workspace,
    ctx: &Context,
    ns: &str,
) -> std::result::Result<Option<String>, ProgramError> {
    let Some(url) = ws.spec.flux.as_ref().and_then(|f| f.url.as_deref()) else {
        return Ok(None);
    };
    let Some(rest) = url.strip_prefix(crate::program::PROGRAM_SCHEME) else {
        return Ok(None);
    };
    let program = rest.rsplit('/').next().unwrap_or_default();
    let p = ctx
        .stores
        .programs
        .get(&ObjectRef::new(program).within(ns))
        .ok_or_else(|| ProgramError::Missing(program.to_string()))?;
    crate::program::render_project(&p.name_any(), p.spec.program.as_ref())
        .map(Some)
        .map_err(|error| ProgramError::Unrenderable {
            program: program.to_string(),
            error,
        })
}

/// `Retain`: apply the StatefulSet and its plan Secret when they changed.
async fn retain(
    ws: &Workspace,
    ctx: &Context,
    ns: &str,
    sts: Option<Arc<StatefulSet>>,
    claim: Option<Arc<PersistentVolumeClaim>>,
) -> Result<(Observed, Action)> {
    let desired = match build(ws, ctx, ns) {
        ControlFlow::Continue(desired) => desired,
        ControlFlow::Break(end) => return Ok(end),
    };
    let live = sts.filter(|s| s.metadata.deletion_timestamp.is_none());
    let current = match apply(ws, ctx, ns, live.as_deref(), &desired).await? {
        ControlFlow::Continue(current) => current,
        ControlFlow::Break(end) => return Ok(end),
    };
    let cache_bound = current.is_some()
        && claim.is_some_and(|c| {
            c.metadata.deletion_timestamp.is_none()
                && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        });
    let (rolled_out, ready) = current.as_ref().map(rollout).unwrap_or((false, false));
    Ok((
        Observed::Retained {
            cache_bound,
            rolled_out,
            ready,
            problem: None,
        },
        Action::await_change(),
    ))
}

/// What a retained workspace is made of, or, when it cannot be built, the problem to show.
fn build(
    ws: &Workspace,
    ctx: &Context,
    ns: &str,
) -> ControlFlow<(Observed, Action), retained::Desired> {
    let program = match program(ws, ctx, ns) {
        Ok(p) => p,
        Err(e) => return ControlFlow::Break(cannot_build(e.to_string(), Some(PROGRAM_RETRY))),
    };
    let cfg = JobConfig {
        runner_image: ctx.config.runner_image.clone(),
        runner_pull_policy: ctx.config.runner_image_pull_policy.clone(),
        // The retained pod's plan Secret is patched in place as the Workspace changes.
        plan_digest: None,
    };
    match retained::desired(ws, &cfg, program) {
        Ok(d) => ControlFlow::Continue(d),
        Err(e) => ControlFlow::Break(cannot_build(e.to_string(), None)),
    }
}

/// A retained workspace that cannot be built: its problem, looked at again after `retry`
/// (else on the next change).
fn cannot_build(message: String, retry: Option<Duration>) -> (Observed, Action) {
    warn!(%message, "cannot build the retained workspace");
    let action = retry.map_or_else(Action::await_change, crate::runtime::requeue);
    (
        Observed::Retained {
            cache_bound: false,
            rolled_out: false,
            ready: false,
            problem: Some(message),
        },
        action,
    )
}

/// Applies the StatefulSet and its plan Secret unless the live StatefulSet carries the
/// desired hash: the StatefulSet as it is now, or the end of this reconcile when it had to be
/// deleted to be recreated.
async fn apply(
    ws: &Workspace,
    ctx: &Context,
    ns: &str,
    live: Option<&StatefulSet>,
    desired: &retained::Desired,
) -> Result<ControlFlow<(Observed, Action), Option<StatefulSet>>> {
    let applied = live.and_then(|s| s.annotations().get(APPLIED_HASH_ANNOTATION));
    if applied.map(String::as_str) == Some(desired.hash.as_str()) {
        return Ok(ControlFlow::Continue(live.cloned()));
    }
    let sts_api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    let pp = PatchParams::apply(names::FIELD_MANAGER).force();
    let sts_name = statefulset_name(&ws.name_any());
    // The plan first when the StatefulSet exists (a rolled pod reads the new plan);
    // a new StatefulSet first (the Secret is owned by it; its pod waits for the Secret).
    if let Some(existing) = live {
        apply_plan_secret(ws, ctx, ns, desired, existing).await?;
    }
    match sts_api
        .patch(&sts_name, &pp, &Patch::Apply(&desired.statefulset))
        .await
    {
        Ok(s) => {
            if live.is_none() {
                apply_plan_secret(ws, ctx, ns, desired, &s).await?;
            }
            info!(statefulset = %sts_name, revision = %desired.plan.workspace.revision, "retained workspace applied");
            Ok(ControlFlow::Continue(Some(s)))
        }
        // An immutable field changed (e.g. a StatefulSet PKO created): recreate it, as PKO
        // does. Orphaning keeps the plan Secret and the pod for the new StatefulSet.
        Err(kube::Error::Api(e)) if e.code == 422 => {
            warn!(statefulset = %sts_name, "cannot update the StatefulSet ({}); recreating it", e.message);
            sts_api
                .delete(
                    &sts_name,
                    &DeleteParams {
                        propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
                        ..Default::default()
                    },
                )
                .await?;
            publish(
                ctx,
                ws,
                names::EVENT_MIGRATED,
                format!("StatefulSet {sts_name} recreated: {}", e.message),
            )
            .await;
            let recreating = Observed::Retained {
                cache_bound: false,
                rolled_out: false,
                ready: false,
                problem: None,
            };
            Ok(ControlFlow::Break((
                recreating,
                crate::runtime::requeue(MIGRATE_RETRY),
            )))
        }
        Err(e) => Err(e.into()),
    }
}

/// Applies the plan Secret, owned by the StatefulSet `owner`.
async fn apply_plan_secret(
    ws: &Workspace,
    ctx: &Context,
    ns: &str,
    desired: &retained::Desired,
    owner: &StatefulSet,
) -> Result<()> {
    let secret = retained::build_plan_secret(ws, desired, owner)?;
    Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .patch(
            &secret.name_any(),
            &PatchParams::apply(names::FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ws() -> Workspace {
        serde_json::from_value(json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "web", "namespace": "apps", "generation": 2},
            "spec": {},
        }))
        .unwrap()
    }

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_800_000_000).unwrap())
    }

    fn ready_of(s: &WorkspaceStatus) -> (String, String, String) {
        let c = &s.conditions.as_ref().unwrap()[0];
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn reclaim_waits_for_the_operation_in_flight() {
        let stack = |status: serde_json::Value| -> Stack {
            serde_json::from_value(json!({
                "apiVersion": "pulumi.com/v1", "kind": "Stack",
                "metadata": {"name": "web", "namespace": "apps", "generation": 4},
                "spec": {"stack": "dev", "workspaceReclaimPolicy": "Delete"},
                "status": status,
            }))
            .unwrap()
        };
        assert!(!operation_pending(None));
        assert!(!operation_pending(Some(&stack(
            json!({"observedGeneration": 4})
        ))));
        assert!(operation_pending(Some(&stack(
            json!({"observedGeneration": 3})
        ))));
        assert!(operation_pending(Some(&stack(
            json!({"observedGeneration": 4, "currentUpdate": {"name": "web-1"}})
        ))));
        assert_eq!(
            policy(Some(&stack(json!({})))),
            WorkspaceReclaimPolicy::Delete
        );
        assert_eq!(policy(None), WorkspaceReclaimPolicy::Delete);
    }

    #[test]
    fn template_only_is_ready_without_an_address() {
        let s = desired_status(&ws(), &Observed::Template, &now());
        assert_eq!(ready_of(&s).0, "True");
        assert_eq!(ready_of(&s).1, "Succeeded");
        assert_eq!(s.address, None);
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn retained_status_follows_the_statefulset() {
        let r = |cache_bound, rolled_out, ready| Observed::Retained {
            cache_bound,
            rolled_out,
            ready,
            problem: None,
        };
        let s = desired_status(&ws(), &r(false, false, false), &now());
        assert_eq!(ready_of(&s).1, "WaitingForReplicas");
        assert!(ready_of(&s).2.contains("cache-web-workspace-0"));
        assert_eq!(
            s.address, None,
            "no cache for Jobs before the claim is bound"
        );
        let s = desired_status(&ws(), &r(true, false, false), &now());
        assert_eq!(ready_of(&s).1, "RollingUpdate");
        assert_eq!(s.address.as_deref(), Some("web-workspace-0"));
        let s = desired_status(&ws(), &r(true, true, false), &now());
        assert_eq!(
            (ready_of(&s).0.as_str(), ready_of(&s).1.as_str()),
            ("False", "WaitingForReplicas")
        );
        let s = desired_status(&ws(), &r(true, true, true), &now());
        assert_eq!(ready_of(&s).0, "True");
        assert!(ready_of(&s)
            .2
            .contains("kubectl exec -it web-workspace-0 -c pulumi"));
        let bad = Observed::Retained {
            cache_bound: true,
            rolled_out: true,
            ready: true,
            problem: Some("the Program \"p\" does not exist".into()),
        };
        let s = desired_status(&ws(), &bad, &now());
        assert_eq!(ready_of(&s).1, "InitializationFailed");
        assert_eq!(s.address, None);
    }

    #[test]
    fn transition_time_is_kept_while_the_status_holds() {
        let mut w = ws();
        let first = desired_status(&w, &Observed::Template, &now());
        w.status = Some(first.clone());
        let later = Time(jiff::Timestamp::from_second(1_900_000_000).unwrap());
        let again = desired_status(&w, &Observed::Template, &later);
        assert_eq!(first, again, "no write when nothing changed");
    }

    fn sts(status: serde_json::Value) -> StatefulSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web-workspace", "generation": 3},
            "spec": {"selector": {}, "serviceName": "web-workspace", "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn rollout_needs_the_current_revision_and_a_ready_pod() {
        let done = json!({"replicas": 1, "observedGeneration": 3, "currentRevision": "a", "updateRevision": "a", "readyReplicas": 1});
        assert_eq!(rollout(&sts(done)), (true, true));
        let rolling = json!({"replicas": 1, "observedGeneration": 3, "currentRevision": "a", "updateRevision": "b", "readyReplicas": 1});
        assert_eq!(rollout(&sts(rolling)), (false, false));
        let stale = json!({"replicas": 1, "observedGeneration": 2, "currentRevision": "a", "updateRevision": "a", "readyReplicas": 1});
        assert_eq!(rollout(&sts(stale)), (false, false));
        let unready = json!({"replicas": 1, "observedGeneration": 3, "currentRevision": "a", "updateRevision": "a"});
        assert_eq!(rollout(&sts(unready)), (true, false));
    }

    #[test]
    fn the_cache_is_in_use_while_an_unfinished_job_mounts_it() {
        let job = |finished: bool, claim: &str| -> Arc<CachedJob> {
            let conditions = if finished {
                json!([{"type": "Complete", "status": "True"}])
            } else {
                json!([])
            };
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": "u", "namespace": "apps"},
                    "spec": {"template": {"spec": {"containers": [],
                        "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": claim}}]}}},
                    "status": {"conditions": conditions},
                }))
                .unwrap(),
            )
        };
        let claim = "cache-web-workspace-0";
        assert!(jobs_mount_claim(&[job(false, claim)], "apps", claim));
        assert!(!jobs_mount_claim(&[job(true, claim)], "apps", claim));
        assert!(!jobs_mount_claim(&[job(false, "other")], "apps", claim));
        assert!(!jobs_mount_claim(&[job(false, claim)], "elsewhere", claim));
        let pod: Arc<CachedPod> = Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "u-abc", "namespace": "apps"},
                "spec": {"containers": [],
                         "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": claim}}]},
                "status": {"phase": "Succeeded"},
            }))
            .unwrap(),
        );
        assert!(pods_mount_claim(std::slice::from_ref(&pod), "apps", claim));
        assert!(!pods_mount_claim(&[pod], "apps", "cache-other-workspace-0"));
    }
}
