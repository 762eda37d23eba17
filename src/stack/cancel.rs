//! A deleted Stack does not wait for an operation that never started. Two things prove that
//! an operation never ran, and nothing else lets it go (anything else is waited for as before):
//! - no pod of it was admitted past the one-operation gate, and its Job makes every pod behind
//!   that gate: the Update is marked cancelled, conditioned on the Update as read (as the
//!   admission's choice of a pod is), so that no pod of it is ever admitted;
//! - its admitted pod was never bound to a node, and is deleted on that condition (the API
//!   server removes an unbound pod at once, and refuses the delete if the scheduler bound it
//!   meanwhile); no other pod of the Update is ever admitted.
//!
//! The Update is then released and deleted (its Job and pods go with it), and the deletion of
//! the Stack goes on at once.

use crate::runtime::cached::{CachedJob, CachedPod};
use crate::runtime::context::Context;
use crate::runtime::error::Result;
use crate::update::admission::{never_admitted, ADMITTED_POD_ANNOTATION, CANCELLED_ANNOTATION};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use pulumi_operator_api::{names, Update, UpdateType};
use tracing::info;

/// Why the Update was cancelled (its annotation's value).
const CANCELLED_BECAUSE: &str = "the Stack was deleted before this operation started";

/// Whether an operation of a Stack may be cancelled if it never started: only while the Stack
/// (or its namespace) is being deleted, and never the destroy that deletion itself runs.
pub fn cancellable(stack_deleting: bool, update: &Update) -> bool {
    stack_deleting && update.spec.update_type != Some(UpdateType::Destroy)
}

/// Cancels `update` if its operation never started; says whether it did. After a conflict (the
/// Update or its pod changed since it was read: a pod may have been admitted or bound
/// meanwhile) it did not, and the look that change triggers decides again.
pub async fn cancel_if_unstarted(ctx: &Context, ns: &str, update: &Update) -> Result<bool> {
    let name = update.name_any();
    let proven = match update.annotations().get(ADMITTED_POD_ANNOTATION) {
        Some(uid) => delete_if_unbound(ctx, ns, &name, uid).await?,
        None => {
            let job = job_of(ctx, ns, &name).await?;
            never_admitted(update, job.as_deref())
        }
    };
    if !proven {
        return Ok(false);
    }
    // Without an admitted pod, conditioned on the Update as read: of a choice and a cancel,
    // only the one written first is. With one, its pod is gone unbound: nothing can run.
    let condition = match update.annotations().contains_key(ADMITTED_POD_ANNOTATION) {
        true => None,
        false => update.resource_version(),
    };
    if !mark_cancelled(ctx, ns, update, condition).await? {
        return Ok(false);
    }
    if ctx.stores.namespace_terminating(ns) {
        // The namespace controller deletes it (and its Job and pods) anyway.
        info!(update = %name, "cancelled an operation that never started (its namespace is deleted)");
        return Ok(true);
    }
    let api: Api<Update> = Api::namespaced(ctx.client.clone(), ns);
    // Its Job and the Job's pods (behind their gate) go with it.
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    info!(update = %name, "cancelled an operation that never started (the stack is deleted)");
    Ok(true)
}

/// The Update's Job: from the cache, else (it may not have a Job created a moment ago) from
/// the API server.
async fn job_of(ctx: &Context, ns: &str, name: &str) -> Result<Option<std::sync::Arc<CachedJob>>> {
    if let Some(job) = ctx.stores.jobs.get(&ObjectRef::new(name).within(ns)) {
        return Ok(Some(job));
    }
    Ok(Api::<CachedJob>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?
        .map(std::sync::Arc::new))
}

/// Deletes the Update's admitted pod (UID `uid`) if it was never bound to a node, on the
/// condition that it is still as read; says whether it did.
async fn delete_if_unbound(ctx: &Context, ns: &str, update: &str, uid: &str) -> Result<bool> {
    let cached = ctx.stores.pods_of_update(ns, update);
    let Some(pod) = cached
        .iter()
        .find(|p| p.metadata.uid.as_deref() == Some(uid))
    else {
        return Ok(false);
    };
    let api: Api<CachedPod> = Api::namespaced(ctx.client.clone(), ns);
    // The cached copy first; when the cache was behind (the precondition failed), as it is now.
    if delete_unbound(&api, pod).await? {
        return Ok(true);
    }
    match api.get_opt(&pod.name_any()).await? {
        Some(pod) if pod.metadata.uid.as_deref() == Some(uid) => delete_unbound(&api, &pod).await,
        _ => Ok(false),
    }
}

/// Deletes `pod` if it is unbound, on the condition that it is still this copy.
async fn delete_unbound(api: &Api<CachedPod>, pod: &CachedPod) -> Result<bool> {
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
    {
        return Ok(false);
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: pod.resource_version(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Marks the Update cancelled and releases it (our finalizer off), conditioned on
/// `resource_version` if given; says whether it was written.
async fn mark_cancelled(
    ctx: &Context,
    ns: &str,
    update: &Update,
    resource_version: Option<String>,
) -> Result<bool> {
    let api: Api<Update> = Api::namespaced(ctx.client.clone(), ns);
    let finalizers: Vec<&String> = update
        .finalizers()
        .iter()
        .filter(|f| *f != names::FINALIZER)
        .collect();
    let mut metadata = serde_json::json!({
        "annotations": {CANCELLED_ANNOTATION: CANCELLED_BECAUSE},
        "finalizers": finalizers,
    });
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = rv.into();
    }
    let patch = serde_json::json!({ "metadata": metadata });
    match api
        .patch(
            &update.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(true),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::UpdateSpec;

    fn update(kind: Option<UpdateType>) -> Update {
        Update::new(
            "s-1",
            UpdateSpec {
                update_type: kind,
                ..Default::default()
            },
        )
    }

    #[test]
    fn only_a_deleted_stacks_operations_other_than_its_destroy_are_cancellable() {
        for kind in [
            Some(UpdateType::Up),
            Some(UpdateType::Preview),
            Some(UpdateType::Refresh),
            None,
        ] {
            assert!(cancellable(true, &update(kind.clone())), "{kind:?}");
            assert!(!cancellable(false, &update(kind.clone())), "{kind:?}");
        }
        assert!(!cancellable(true, &update(Some(UpdateType::Destroy))));
        assert!(!cancellable(false, &update(Some(UpdateType::Destroy))));
    }
}
