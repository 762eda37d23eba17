//! How one reconcile runs: on its own task, after its turn at its controller's gate (urgent or
//! routine lane), in a tracing span, with a panic turned into its error, and with errors backed
//! off per object.

use crate::runtime::context::{Context, Stores};
use crate::runtime::error::{backoff, Error};
use crate::runtime::{gate, requeue};
use futures::FutureExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use pulumi_operator_api::{Program, Stack, Update, Workspace};
use std::future::Future;
use std::sync::Arc;
use tracing::{info, info_span, warn, Instrument};

/// What the gate needs of a reconciled object: its newest cached copy, and whether it waits
/// in the urgent lane.
pub trait Latest: Sized + Resource<DynamicType = ()> {
    fn latest(stores: &Stores, obj: &ObjectRef<Self>) -> Option<Arc<Self>>;
    fn lane(&self) -> gate::Lane;
}

macro_rules! latest_from {
    ($($kind:ty => $store:ident, $lane:path),*) => {
        $(impl Latest for $kind {
            fn latest(stores: &Stores, obj: &ObjectRef<Self>) -> Option<Arc<Self>> {
                stores.$store.get(obj)
            }
            fn lane(&self) -> gate::Lane {
                $lane(self)
            }
        })*
    };
}
latest_from!(
    Stack => stacks, stack_lane,
    Update => updates, update_lane,
    Workspace => workspaces, workspace_lane,
    Program => programs, program_lane
);

fn lane_if(urgent: bool) -> gate::Lane {
    if urgent {
        gate::Lane::Urgent
    } else {
        gate::Lane::Routine
    }
}

/// A Stack whose spec, reconcile request or deletion the operator has not acted on yet.
fn stack_lane(stack: &Stack) -> gate::Lane {
    let status = stack.status.as_ref();
    let request = stack
        .annotations()
        .get(pulumi_operator_api::names::RECONCILIATION_REQUEST_ANNOTATION);
    lane_if(
        stack.metadata.deletion_timestamp.is_some()
            || status.and_then(|s| s.observed_generation) != stack.metadata.generation
            || request.is_some_and(|r| {
                status.and_then(|s| s.observed_reconcile_request.as_ref()) != Some(r)
            }),
    )
}

/// An Update whose operation has not started yet, or that is being deleted (a cancel).
fn update_lane(update: &Update) -> gate::Lane {
    lane_if(
        update.metadata.deletion_timestamp.is_some()
            || update
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .is_none(),
    )
}

/// A Workspace not reconciled yet, changed, or being deleted.
fn workspace_lane(workspace: &Workspace) -> gate::Lane {
    lane_if(
        workspace.metadata.deletion_timestamp.is_some()
            || workspace
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                != workspace.metadata.generation,
    )
}

fn program_lane(_: &Program) -> gate::Lane {
    gate::Lane::Routine
}

/// Runs a scheduled reconcile on a task of its own: it waits there for its turn at its
/// controller's gate, then runs (see [`wait_then_run`]).
///
/// kube-runtime polls every running reconcile of a controller from one task, and all of them
/// whenever any one of them wakes: with thousands waiting at the gate (a restart with 10,000
/// Stacks) that scan took 40 % of the operator's CPU, and the reconciles doing work shared one
/// thread. On their own tasks they run on every core, and kube-runtime sees only the handles,
/// which wake it once, when the reconcile ends. Dropping the handle (the controller stopped,
/// the leader lease lost) aborts the task at its next await, as dropping the reconcile did.
pub fn instrumented<K, F, Fut>(
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    f: F,
) -> OwnTask
where
    K: Resource<DynamicType = ()> + ResourceExt + Latest + Send + Sync + 'static,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    OwnTask(tokio::spawn(wait_then_run(controller, obj, ctx, f)))
}

/// A reconcile running on its own task; aborted when dropped.
pub struct OwnTask(tokio::task::JoinHandle<Result<Action, Error>>);

impl Future for OwnTask {
    type Output = Result<Action, Error>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|ended| match ended {
                Ok(result) => result,
                // Panics are caught inside (`run_turn`); an aborted task is being shut down.
                Err(e) if e.is_panic() => Err(Error::Panicked(crate::runtime::error::panic_text(
                    e.into_panic().as_ref(),
                ))),
                Err(_) => Ok(Action::await_change()),
            })
    }
}

impl Drop for OwnTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for the reconcile's turn at its controller's gate, then runs it (see [`run_turn`]).
/// Thousands wait here at once after a restart or under a burst: while waiting, the task holds
/// the object's name and the gate's queue entry, a few hundred bytes; the reconcile's own
/// state is allocated once its turn comes.
async fn wait_then_run<K, F, Fut>(
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    f: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + ResourceExt + Latest,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
{
    // Not the object itself: the cache may replace it while this waits.
    let lane = obj.lane();
    let object = ObjectRef::from_obj(obj.as_ref());
    drop(obj);
    let waiting = ctx.metrics.reconcile_waiting(controller);
    let Some(turn) = ctx.gates.of(controller).enter(lane).await else {
        return Ok(Action::await_change()); // shutting down
    };
    drop(waiting);
    Box::pin(run_turn(controller, object, ctx, f, turn)).await
}

/// Runs a reconcile with a tracing span naming the object, the reconcile metrics, and the
/// per-object failure count used by `error_policy`.
async fn run_turn<K, F, Fut>(
    controller: &'static str,
    object: ObjectRef<K>,
    ctx: Arc<Context>,
    f: F,
    _turn: gate::Turn,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + ResourceExt + Latest,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
{
    // The object may have changed, or gone, while this reconcile waited for its turn.
    let Some(obj) = K::latest(&ctx.stores, &object) else {
        return Ok(Action::await_change());
    };
    let key = format!(
        "{controller}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    let span = info_span!("reconcile", controller, object = %format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()));
    let timer = ctx.metrics.reconcile_started(controller);
    let object = obj.object_ref(&());
    // A bug triggered by one object's content stays with that object: the panic becomes this
    // reconcile's error (backed off, reported on the object), never the end of the process.
    let result = match std::panic::AssertUnwindSafe(f(obj, ctx.clone()).instrument(span))
        .catch_unwind()
        .await
    {
        Ok(result) => result,
        Err(panic) => {
            let what = crate::runtime::error::panic_text(panic.as_ref());
            tracing::error!(controller, namespace = %object.namespace.clone().unwrap_or_default(),
                            name = %object.name.clone().unwrap_or_default(),
                            "reconcile panicked: {what}");
            ctx.publish(
                &object,
                kube::runtime::events::EventType::Warning,
                pulumi_operator_api::names::REASON_INTERNAL_ERROR,
                "Reconcile",
                format!("the operator hit an internal error on this object and will retry with backoff: {what}"),
            )
            .await;
            Err(Error::Panicked(what))
        }
    };
    timer.finish(result.is_ok());
    if result.is_ok() {
        ctx.succeeded(&key);
    }
    result
}

pub fn error_policy<K: Resource + ResourceExt>(
    controller: &'static str,
) -> impl Fn(Arc<K>, &Error, Arc<Context>) -> Action {
    move |obj, error, ctx| {
        let key = format!(
            "{controller}/{}/{}",
            obj.namespace().unwrap_or_default(),
            obj.name_any()
        );
        let delay = backoff(ctx.failed(&key));
        if is_conflict(error) {
            // Optimistic concurrency doing its job (a write based on an older copy than the
            // API server's): expected under load, and the newer copy's event comes anyway.
            info!(controller, namespace = %obj.namespace().unwrap_or_default(), name = %obj.name_any(),
                  retry_in = ?delay, "the object changed while it was reconciled; reconciling again");
        } else {
            warn!(controller, namespace = %obj.namespace().unwrap_or_default(), name = %obj.name_any(),
                  retry_in = ?delay, "reconcile failed: {error}");
        }
        requeue(delay)
    }
}

/// A write refused because the object changed since it was read (HTTP 409 Conflict).
fn is_conflict(error: &Error) -> bool {
    matches!(error, Error::Kube(kube::Error::Api(e)) if e.code == 409 && e.reason == "Conflict")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{program, stack, update};

    /// A lost leader lease drops the controllers: a reconcile on its own task must stop then,
    /// not go on writing as a non-leader.
    #[tokio::test]
    async fn dropping_a_reconcile_on_its_own_task_stops_it() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let went_on = Arc::new(AtomicBool::new(false));
        let flag = went_on.clone();
        let task = OwnTask(tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
            Ok(Action::await_change())
        }));
        drop(task);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!went_on.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_reconcile_on_its_own_task_hands_back_its_result_or_its_panic() {
        let requeue = Action::requeue(std::time::Duration::from_secs(7));
        let wanted = requeue.clone();
        let done = OwnTask(tokio::spawn(async move { Ok(wanted) })).await;
        assert_eq!(done.ok(), Some(requeue));
        let panicked = OwnTask(tokio::spawn(async {
            if std::hint::black_box(true) {
                panic!("boom in a reconcile");
            }
            Ok(Action::await_change())
        }))
        .await;
        match panicked {
            Err(Error::Panicked(what)) => assert!(what.contains("boom"), "{what}"),
            other => panic!("expected the panic as an error, got {other:?}"),
        }
    }

    /// Thousands of reconciles wait at a gate at once (a restart with 10,000 Stacks): each is
    /// a task holding this future.
    #[test]
    fn a_reconcile_waiting_for_its_turn_is_small() {
        fn future_size<A, B, Fut>(_: impl Fn(A, B) -> Fut) -> usize {
            std::mem::size_of::<Fut>()
        }
        let sizes = [
            future_size(|o: Arc<Stack>, c: Arc<Context>| {
                wait_then_run("stack", o, c, stack::reconcile::reconcile_guarded)
            }),
            future_size(|o: Arc<Update>, c: Arc<Context>| {
                wait_then_run("update", o, c, update::reconcile::reconcile)
            }),
            future_size(|o: Arc<Program>, c: Arc<Context>| {
                wait_then_run("program", o, c, program::reconcile::reconcile)
            }),
        ];
        eprintln!("waiting reconcile sizes: {sizes:?}");
        assert!(sizes.iter().all(|s| *s <= 512), "{sizes:?}");
    }

    #[test]
    fn what_a_person_asked_for_waits_in_the_urgent_lane() {
        use gate::Lane::{Routine, Urgent};
        let stack = |meta: serde_json::Value, status: serde_json::Value| -> Stack {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": meta,
                "spec": {"stack": "s"}, "status": status,
            }))
            .expect("a Stack")
        };
        let acted_on =
            serde_json::json!({"observedGeneration": 2, "observedReconcileRequest": "r1"});
        let meta = serde_json::json!({"name": "a", "namespace": "n", "generation": 2,
            "annotations": {"pulumi.com/reconciliation-request": "r1"}});
        assert_eq!(stack_lane(&stack(meta.clone(), acted_on.clone())), Routine);
        // New, edited, asked again, deleted.
        assert_eq!(
            stack_lane(&stack(meta.clone(), serde_json::json!(null))),
            Urgent
        );
        let mut edited = meta.clone();
        edited["generation"] = 3.into();
        assert_eq!(stack_lane(&stack(edited, acted_on.clone())), Urgent);
        let mut asked = meta.clone();
        asked["annotations"]["pulumi.com/reconciliation-request"] = "r2".into();
        assert_eq!(stack_lane(&stack(asked, acted_on.clone())), Urgent);
        let mut deleted = meta;
        deleted["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        assert_eq!(stack_lane(&stack(deleted, acted_on)), Urgent);

        let update = |status: serde_json::Value| -> Update {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
                "metadata": {"name": "u", "namespace": "n"},
                "spec": {"stackName": "s", "type": "up"}, "status": status,
            }))
            .expect("an Update")
        };
        assert_eq!(update_lane(&update(serde_json::json!(null))), Urgent);
        assert_eq!(
            update_lane(&update(
                serde_json::json!({"startTime": "2026-01-01T00:00:00Z"})
            )),
            Routine
        );
    }

    #[test]
    fn only_a_changed_object_counts_as_a_conflict() {
        let api = |message: &str, reason: &str, code: u16| {
            Error::Kube(kube::Error::Api(Box::new(
                kube::core::Status::failure(message, reason).with_code(code),
            )))
        };
        assert!(is_conflict(&api(
            "the object has been modified",
            "Conflict",
            409
        )));
        assert!(!is_conflict(&api("already exists", "AlreadyExists", 409)));
        assert!(!is_conflict(&api("forbidden", "Forbidden", 403)));
    }
}
