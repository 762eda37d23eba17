//! The wiring: the controllers and how they run: one kube-runtime `Controller` per kind (per watched
//! namespace), bounded concurrency, errors backed off per object, graceful shutdown.

use crate::runtime::cached::{CachedJob, CachedPod};
use crate::runtime::context::{Context, Stores};
use crate::runtime::error::{backoff, Error};
use crate::runtime::{gate, index, requeue};
use crate::{program, stack, update, workspace};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use pulumi_operator_api::{Program, Stack, Update, Workspace};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

/// Why the operator cannot start yet.
#[derive(Debug)]
pub enum StartCheck {
    /// A CRD is missing: only an administrator can fix it.
    Missing(String),
    /// The API server did not answer as expected (starting, overloaded, network): try again.
    Unreachable(String),
}

/// Every kind the operator serves, with a short explanation for the install check.
pub async fn check_crds_installed(client: &kube::Client) -> Result<(), StartCheck> {
    async fn probe<K>(client: &kube::Client) -> Result<(), StartCheck>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let api: Api<K> = Api::all(client.clone());
        match api
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Err(StartCheck::Missing(format!(
                "the CustomResourceDefinition for {}.{}/{} is not installed",
                K::plural(&()),
                K::group(&()),
                K::version(&())
            ))),
            Err(e) => Err(StartCheck::Unreachable(format!(
                "cannot list {}: {e}",
                K::plural(&())
            ))),
        }
    }
    let mut missing = Vec::new();
    for result in [
        probe::<Stack>(client).await,
        probe::<Program>(client).await,
        probe::<Workspace>(client).await,
        probe::<Update>(client).await,
    ] {
        match result {
            Ok(()) => {}
            Err(StartCheck::Missing(m)) => missing.push(m),
            Err(unreachable) => return Err(unreachable),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(StartCheck::Missing(missing.join("; ")))
    }
}

/// Whether the API server streams a watch's initial objects (`sendInitialEvents`, the
/// WatchList feature, on by default in Kubernetes 1.32 and from 1.34 on). A streamed initial
/// list arrives one object at a time; a list response is read whole and decoded at once, which
/// at start-up with thousands of Stacks is the operator's memory peak (the API server answers a
/// list served from its watch cache in one piece, whatever the page size). Asked with a watch
/// that selects nothing: a server without the feature either refuses the parameter or ignores
/// it and never sends the bookmark that ends the initial events.
pub async fn streaming_lists_supported(
    client: &kube::Client,
    config: &crate::runtime::config::Config,
) -> bool {
    use kube::api::{WatchEvent, WatchParams};
    let namespaces = config.watched_namespaces();
    let api: Api<Stack> = match namespaces.first() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let params = WatchParams::default()
        .labels("pulumi.com/watch-list-probe=none")
        .timeout(5)
        .initial_events();
    let probe = async {
        let mut events = match api.watch(&params, "0").await {
            Ok(events) => events.boxed(),
            Err(e) => {
                tracing::debug!("streaming lists refused: {e}");
                return false;
            }
        };
        while let Some(event) = events.next().await {
            match event {
                Ok(WatchEvent::Bookmark(b)) => {
                    return b
                        .metadata
                        .annotations
                        .contains_key("k8s.io/initial-events-end")
                }
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
        false
    };
    tokio::time::timeout(Duration::from_secs(10), probe)
        .await
        .unwrap_or(false)
}

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
fn instrumented<K, F, Fut>(
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
struct OwnTask(tokio::task::JoinHandle<Result<Action, Error>>);

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
    let Some(turn) = ctx.gates.of(controller).enter(lane).await else {
        return Ok(Action::await_change()); // shutting down
    };
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

fn error_policy<K: Resource + ResourceExt>(
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

/// What the controllers are started with.
#[derive(Clone)]
pub struct Scope {
    pub client: kube::Client,
    pub config: crate::runtime::config::Config,
    pub metrics: Arc<crate::runtime::metrics::Metrics>,
    /// Initial lists come as streamed watch events (see [`streaming_lists_supported`]).
    pub streaming_lists: bool,
}

fn api<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs every controller until `shutdown` is cancelled; in-flight reconciles finish first.
pub async fn run(scope: Scope, shutdown: CancellationToken) {
    let namespaces = scope.config.watched_namespaces();
    let scopes: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.into_iter().map(Some).collect()
    };
    let mut all = Vec::new();
    let mut stack_stores = Vec::new();
    let mut program_stores = Vec::new();
    for ns in scopes {
        let (futures, stacks, programs) = run_in(&scope, ns.as_deref(), shutdown.clone());
        all.extend(futures);
        stack_stores.push(stacks);
        program_stores.push(programs);
    }
    // stacks_active and programs_active follow the watch caches.
    let metrics = scope.metrics.clone();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            metrics
                .stacks_active
                .set(stack_stores.iter().map(|s| s.state().len() as i64).sum());
            metrics
                .programs_active
                .set(program_stores.iter().map(|s| s.state().len() as i64).sum());
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
    futures::future::join_all(all).await;
}

type Running = futures::future::BoxFuture<'static, ()>;

/// What a watch hands to one of its consumers: every object it saw change or go.
type Feed<K> = futures::channel::mpsc::UnboundedReceiver<Arc<K>>;

/// One watch feeding one store and several consumers. Every consumer sees an object only after
/// the store has it (the reflector writes first), so a reconcile never reads an older version
/// than its trigger; deletions are passed on too. The watch is driven by its own task and never
/// waits for a consumer (kube-runtime's shared `ReflectHandle` can stall for good when an object
/// is deleted before a consumer reads it, which froze the pod cache under Job churn).
fn shared<K>(
    api: Api<K>,
    cfg: watcher::Config,
    consumers: usize,
    indexes: Vec<Arc<index::Index<K>>>,
) -> (Store<K>, Vec<Feed<K>>, Running)
where
    K: Resource<DynamicType = ()> + Trim + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..consumers)
        .map(|_| futures::channel::mpsc::unbounded::<Arc<K>>())
        .unzip();
    let filled = reader.clone();
    let driver = watcher(api, cfg)
        .default_backoff()
        .modify(Trim::trim)
        .reflect(writer)
        .for_each(move |event| {
            let send = |o: Arc<K>| {
                for s in &senders {
                    let _ = s.unbounded_send(o.clone());
                }
            };
            // The index first: the reconciles these events trigger read it.
            match event {
                Ok(watcher::Event::Apply(o)) => {
                    indexes.iter().for_each(|i| i.apply(&o));
                    send(Arc::new(o))
                }
                Ok(watcher::Event::Delete(o)) => {
                    indexes.iter().for_each(|i| i.delete(&o));
                    send(Arc::new(o))
                }
                // A (re)list is in the store only once it is complete: then every object.
                Ok(watcher::Event::InitDone) => {
                    let all = filled.state();
                    indexes.iter().for_each(|i| i.rebuild(&all));
                    all.into_iter().for_each(send)
                }
                Ok(_) => {}
                Err(e) => warn!(kind = %K::kind(&()), "watch failed (retrying with backoff): {e}"),
            }
            futures::future::ready(())
        })
        .boxed();
    (reader, receivers, driver)
}

/// What the watch caches keep of an object: only what the operator reads, so that memory
/// stays flat with many Stacks. Never read: managedFields, client-side apply's copy of the
/// last manifest, and a Job's or pod's containers (only claim volumes are, by the Workspace
/// controller, to know whether a cache claim is still mounted).
pub trait Trim {
    fn trim(&mut self);
}

fn trim_metadata(meta: &mut kube::core::ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Update Jobs and pods keep one label, the Update's name: nothing else of their labels is
/// read, and every Update reconcile looks its pods up by it.
macro_rules! trim_to_update_label {
    ($($kind:ty),*) => {
        $(impl Trim for $kind {
            fn trim(&mut self) {
                trim_metadata(&mut self.metadata);
                if let Some(labels) = self.metadata.labels.as_mut() {
                    labels.retain(|k, _| k == pulumi_operator_api::names::UPDATE_NAME_LABEL);
                }
            }
        })*
    };
}
trim_to_update_label!(CachedJob, CachedPod);

macro_rules! trim_metadata_only {
    ($($kind:ty),*) => {
        $(impl Trim for $kind {
            fn trim(&mut self) {
                trim_metadata(&mut self.metadata);
            }
        })*
    };
}
trim_metadata_only!(
    Stack,
    Update,
    Program,
    Workspace,
    StatefulSet,
    PersistentVolumeClaim
);

fn run_in(
    scope: &Scope,
    ns: Option<&str>,
    shutdown: CancellationToken,
) -> (Vec<Running>, Store<Stack>, Store<Program>) {
    let client = &scope.client;
    // No limit here: every scheduled reconcile waits for its turn at its controller's gate,
    // first come, first served (see `gate`), within `--concurrency`.
    let config = ControllerConfig::default();
    let streaming = scope.streaming_lists;
    let wc = move || {
        let cfg = watcher::Config::default().any_semantic();
        if streaming {
            cfg.streaming_lists()
        } else {
            // Pages bound a list's memory where the API server honours them (lists it does not
            // serve from its watch cache).
            cfg.page_size(100)
        }
    };
    let ours = move || wc().labels(pulumi_operator_api::names::UPDATE_NAME_LABEL);

    let pods_by_update = index::Index::new(index::label::<CachedPod, { index::UPDATE_NAME }>);
    let updates_by_stack = index::Index::new(index::label::<Update, { index::STACK_NAME }>);
    let updates_by_workspace = index::Index::new(|u: &Update| u.spec.workspace_name.as_deref());
    let (jobs, mut job_subs, job_driver) = shared(api::<CachedJob>(client, ns), ours(), 1, vec![]);
    let (pods, mut pod_subs, pod_driver) = shared(
        api::<CachedPod>(client, ns),
        ours(),
        1,
        vec![pods_by_update.clone()],
    );
    let (updates, mut update_subs, update_driver) = shared(
        api::<Update>(client, ns),
        wc(),
        2,
        vec![updates_by_stack.clone(), updates_by_workspace.clone()],
    );
    let (programs, mut program_subs, program_driver) =
        shared(api::<Program>(client, ns), wc(), 2, vec![]);
    let (workspaces, mut workspace_subs, workspace_driver) =
        shared(api::<Workspace>(client, ns), wc(), 2, vec![]);
    let (
        Some(update_primary),
        Some(update_owned),
        Some(program_primary),
        Some(program_users),
        Some(ws_primary),
        Some(ws_users),
        Some(job_events),
        Some(pod_events),
    ) = (
        update_subs.pop(),
        update_subs.pop(),
        program_subs.pop(),
        program_subs.pop(),
        workspace_subs.pop(),
        workspace_subs.pop(),
        job_subs.pop(),
        pod_subs.pop(),
    )
    else {
        tracing::error!("shared watch streams gave no subscription; controllers not started");
        return (Vec::new(), reflector::store().0, programs);
    };

    let (stacks, mut stack_subs, stack_driver) = shared(api::<Stack>(client, ns), wc(), 3, vec![]);
    let (Some(stack_primary), Some(stack_dependents), Some(stack_workspaces)) =
        (stack_subs.pop(), stack_subs.pop(), stack_subs.pop())
    else {
        tracing::error!("shared watch streams gave no subscription; controllers not started");
        return (Vec::new(), stacks, programs);
    };
    // A Stack is reconciled when what it asks for changes, not when its own status does (as
    // PKO's predicates): a reconcile's status write never triggers the next one, so an error
    // after a write backs off instead of looping.
    let ctx = Arc::new(Context::new(
        client.clone(),
        scope.config.clone(),
        scope.metrics.clone(),
        Stores {
            stacks: stacks.clone(),
            updates: updates.clone(),
            programs: programs.clone(),
            workspaces: workspaces.clone(),
            jobs: jobs.clone(),
            pods: pods.clone(),
            pods_by_update,
            updates_by_stack,
        },
        &shutdown,
    ));
    let mut seen = SpecChanges::default();
    let mut stack_alive = alive(stacks.clone(), ctx.clone(), "stack");
    let stack_primary = stack_primary.filter(move |s| {
        let pass = if stack_alive(s) {
            seen.changed(s)
        } else {
            seen.forget(s);
            false
        };
        futures::future::ready(pass)
    });
    let stack_ctrl =
        Controller::for_shared_stream(stack_primary, stacks.clone()).with_config(config.clone());
    let mut update_alive = alive(updates.clone(), ctx.clone(), "update");
    let update_primary = update_primary.filter(move |u| futures::future::ready(update_alive(u)));
    let mut ws_alive = alive(workspaces.clone(), ctx.clone(), "workspace");
    let ws_primary = ws_primary.filter(move |w| futures::future::ready(ws_alive(w)));
    let mut program_alive = alive(programs.clone(), ctx.clone(), "program");
    let program_primary = program_primary.filter(move |p| futures::future::ready(program_alive(p)));

    // Program changes re-run the Stacks that use them.
    let stacks_for_programs = stacks.clone();
    // A new Flux artifact re-runs the Stacks that use the source.
    let stacks_for_flux = stacks.clone();
    let flux_triggers =
        futures::stream::select_all(crate::source::flux::FLUX_SOURCE_KINDS.map(|kind| {
            crate::source::flux::events(client.clone(), ns.map(str::to_string), kind).boxed()
        }))
        .flat_map(move |obj| {
            let kind = obj
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            let refs: Vec<ObjectRef<Stack>> = stacks_for_flux
                .state_filter(|s| {
                    // Cheapest test first: this runs over every Stack.
                    s.spec.flux_source.as_ref().is_some_and(|f| {
                        f.source_ref.kind == kind
                            && Some(&f.source_ref.name) == obj.metadata.name.as_ref()
                    }) && s.metadata.namespace == obj.metadata.namespace
                })
                .iter()
                .map(|s| ObjectRef::from(s.as_ref()))
                .collect();
            futures::stream::iter(refs)
        });
    // A branch head read in the background re-runs the Stacks that waited for it.
    let branch_answers = branch_answers(ns.map(str::to_string));
    // A Stack that changes (e.g. becomes Ready) lets the Stacks that need it go on.
    let stacks_for_dependents = stacks.clone();
    let stack_run = stack_ctrl
        .watches_shared_stream(stack_dependents, move |p: Arc<Stack>| {
            // In place: this runs over every Stack for each Stack event.
            stacks_for_dependents
                .state_filter(|s| {
                    // Cheapest test first: most Stacks have no prerequisites.
                    s.spec
                        .prerequisites
                        .iter()
                        .flatten()
                        .any(|r| Some(&r.name) == p.metadata.name.as_ref())
                        && s.metadata.namespace == p.metadata.namespace
                })
                .iter()
                .map(|s| ObjectRef::from(s.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(flux_triggers)
        .reconcile_on(branch_answers)
        .owns_shared_stream(update_owned)
        .watches_shared_stream(program_users, move |p: Arc<Program>| {
            stacks_for_programs
                .state_filter(|s| {
                    // Cheapest test first: most Stacks use no Program.
                    s.spec
                        .program_ref
                        .as_ref()
                        .is_some_and(|r| Some(&r.name) == p.metadata.name.as_ref())
                        && s.metadata.namespace == p.metadata.namespace
                })
                .iter()
                .map(|s| ObjectRef::from(s.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(cancelled(shutdown.clone()))
        .run(
            |o, c| instrumented("stack", o, c, stack::reconcile::reconcile_guarded),
            error_policy::<Stack>("stack"),
            ctx.clone(),
        )
        .for_each(|_| async {})
        .boxed();

    let by_label = |o: &dyn ResourceLike| -> Option<ObjectRef<Update>> {
        let name = o.label(pulumi_operator_api::names::UPDATE_NAME_LABEL)?;
        Some(ObjectRef::new(name).within(o.ns()?))
    };
    let job_triggers =
        job_events.filter_map(move |j: Arc<CachedJob>| async move { by_label(j.as_ref()) });
    let pod_triggers =
        pod_events.filter_map(move |p: Arc<CachedPod>| async move { by_label(p.as_ref()) });
    // Warning Events of update Jobs and pods: kept in the context, and each new one triggers
    // its Update.
    let warnings_ctx = ctx.clone();
    let warning_triggers = watcher(
        api::<k8s_openapi::api::core::v1::Event>(client, ns),
        wc().fields("type=Warning"),
    )
    .default_backoff()
    .filter_map(move |event| {
        let ctx = warnings_ctx.clone();
        async move {
            match event {
                Ok(event) => ctx.warnings.observe(event),
                Err(e) => {
                    warn!("watching Warning Events: {e}");
                    None
                }
            }
        }
    });
    let updates_for_workspaces = updates.clone();
    let updates_filled = updates.clone();
    let update_run = Controller::for_shared_stream(update_primary, updates)
        .with_config(config.clone())
        .reconcile_on(job_triggers)
        .reconcile_on(pod_triggers)
        .reconcile_on(warning_triggers)
        .watches_shared_stream(ws_users, move |w: Arc<Workspace>| {
            updates_by_workspace
                .lookup(
                    &updates_for_workspaces,
                    w.metadata.namespace.as_deref().unwrap_or_default(),
                    &w.name_any(),
                )
                .iter()
                .filter(|u| !crate::update::status::update_complete(u))
                .map(|u| ObjectRef::from(u.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(cancelled(shutdown.clone()))
        .run(
            |o, c| instrumented("update", o, c, update::reconcile::reconcile),
            error_policy::<Update>("update"),
            ctx.clone(),
        )
        .for_each(|_| async {})
        .boxed();

    // Retained workspaces (workspaceReclaimPolicy Retain): their StatefulSets and cache claims
    // (ours only, by label) trigger their Workspace, and so does a change of the owning Stack
    // (same name), e.g. of its reclaim policy.
    let workspace_parts = || {
        wc().labels(&format!(
            "{}={}",
            pulumi_operator_api::names::AUTO_COMPONENT_LABEL,
            pulumi_operator_api::names::AUTO_COMPONENT_WORKSPACE
        ))
    };
    let (statefulsets, mut sts_subs, sts_driver) =
        shared(api::<StatefulSet>(client, ns), workspace_parts(), 1, vec![]);
    let (claims, mut claim_subs, claim_driver) = shared(
        api::<PersistentVolumeClaim>(client, ns),
        workspace_parts(),
        1,
        vec![],
    );
    let (Some(sts_events), Some(claim_events)) = (sts_subs.pop(), claim_subs.pop()) else {
        tracing::error!("shared watch streams gave no subscription; controllers not started");
        return (Vec::new(), stacks, programs);
    };
    let by_workspace = |o: &dyn ResourceLike| -> Option<ObjectRef<Workspace>> {
        let name = o.label(pulumi_operator_api::names::WORKSPACE_NAME_LABEL)?;
        Some(ObjectRef::new(name).within(o.ns()?))
    };
    let sts_triggers =
        sts_events.filter_map(move |s: Arc<StatefulSet>| async move { by_workspace(s.as_ref()) });
    let claim_triggers = claim_events
        .filter_map(move |c: Arc<PersistentVolumeClaim>| async move { by_workspace(c.as_ref()) });
    let retained = Arc::new(workspace::reconcile::RetainedStores {
        statefulsets: statefulsets.clone(),
        claims: claims.clone(),
    });
    let workspaces_filled = workspaces.clone();
    let workspace_run = Controller::for_shared_stream(ws_primary, workspaces)
        .with_config(config.clone())
        .reconcile_on(sts_triggers)
        .reconcile_on(claim_triggers)
        .watches_shared_stream(stack_workspaces, |s: Arc<Stack>| {
            s.namespace()
                .map(|ns| ObjectRef::<Workspace>::new(&s.name_any()).within(&ns))
        })
        .graceful_shutdown_on(cancelled(shutdown.clone()))
        .run(
            move |o, c| {
                let retained = retained.clone();
                instrumented("workspace", o, c, move |o, c| {
                    workspace::reconcile::reconcile(o, c, retained)
                })
            },
            error_policy::<Workspace>("workspace"),
            ctx.clone(),
        )
        .for_each(|_| async {})
        .boxed();

    let program_run = Controller::for_shared_stream(program_primary, programs.clone())
        .with_config(config)
        .graceful_shutdown_on(cancelled(shutdown.clone()))
        .run(
            |o, c| instrumented("program", o, c, program::reconcile::reconcile),
            error_policy::<Program>("program"),
            ctx,
        )
        .for_each(|_| async {})
        .boxed();

    // No controller acts before every cache it reads has been filled by its first list: an
    // empty cache would look like "the Stack is gone" or "no Job exists" and lead to deletions
    // and duplicate operations after every restart.
    let filled = [
        wait_filled(stacks.clone()),
        wait_filled(updates_filled),
        wait_filled(programs.clone()),
        wait_filled(workspaces_filled),
        wait_filled(jobs),
        wait_filled(pods),
        wait_filled(statefulsets),
        wait_filled(claims),
    ];
    let ns_label = ns.unwrap_or("all namespaces").to_string();
    let stop = shutdown.clone();
    let controllers = async move {
        tokio::select! {
            _ = futures::future::join_all(filled) => {
                tracing::info!(namespace = %ns_label, "watch caches filled; controllers start");
                futures::future::join_all([stack_run, update_run, workspace_run, program_run]).await;
            }
            _ = stop.cancelled() => {}
        }
    }
    .boxed();

    // The watch drivers end with the controllers.
    let drivers = futures::future::join_all([
        stack_driver,
        update_driver,
        program_driver,
        workspace_driver,
        job_driver,
        pod_driver,
        sts_driver,
        claim_driver,
    ]);
    let drivers = async move {
        tokio::select! {
            _ = drivers => {}
            _ = shutdown.cancelled() => {}
        }
    }
    .boxed();
    (vec![controllers, drivers], stacks, programs)
}

/// A filter for a controller's own watch feed: passes the objects still in `store`, and
/// forgets what is kept about the ones that are gone (failure counts, metric series). The
/// reflector writes before the feed sends, so a deletion is already out of the store.
fn alive<K>(
    store: Store<K>,
    ctx: Arc<Context>,
    controller: &'static str,
) -> impl FnMut(&Arc<K>) -> bool
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    move |obj| {
        let stored = store.get(&ObjectRef::from_obj(obj.as_ref()));
        // A new object of the same name keeps its own series.
        if stored.is_none() {
            ctx.forget(
                controller,
                &obj.namespace().unwrap_or_default(),
                &obj.name_any(),
            );
        }
        stored.is_some_and(|o| o.uid() == obj.uid())
    }
}

/// The Stacks (in namespace `ns`, or all) that waited for a branch head that was just read.
fn branch_answers(ns: Option<String>) -> impl futures::Stream<Item = ObjectRef<Stack>> {
    use tokio::sync::broadcast::error::RecvError;
    let answers = crate::source::poll::Poller::shared().answers();
    futures::stream::unfold(answers, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(waiters) => return Some((waiters, rx)),
                // The missed Stacks are reconciled by their requeue.
                Err(RecvError::Lagged(n)) => warn!(missed = n, "branch answers lagged"),
                Err(RecvError::Closed) => return None,
            }
        }
    })
    .flat_map(move |waiters| {
        let refs: Vec<ObjectRef<Stack>> = waiters
            .iter()
            .filter(|(n, _)| ns.as_deref().is_none_or(|ns| ns == n))
            .map(|(n, name)| ObjectRef::new(name).within(n))
            .collect();
        futures::stream::iter(refs)
    })
}

/// Remembers, per Stack, what a reconcile acts on besides its status: the generation (spec
/// and deletion), the `pulumi.com/reconciliation-request` and `pulumi.com/approve-plan`
/// annotations.
#[derive(Default)]
struct SpecChanges(std::collections::HashMap<String, String>);

impl SpecChanges {
    /// Whether this version of the Stack differs from the last one seen in what it asks for.
    fn forget(&mut self, stack: &Stack) {
        self.0.remove(&stack.uid().unwrap_or_default());
    }

    fn changed(&mut self, stack: &Stack) -> bool {
        let uid = stack.uid().unwrap_or_default();
        if stack.metadata.deletion_timestamp.is_some() && stack.finalizers().is_empty() {
            // Gone (or going without us): nothing to reconcile, nothing to remember.
            self.0.remove(&uid);
            return false;
        }
        // Not the finalizers: adding ours would trigger a second reconcile of every new Stack
        // (the first goes on after adding it), and removing ours ends the Stack's reconciles.
        let key = format!(
            "{:?}|{:?}|{:?}|{:?}",
            stack.metadata.generation,
            stack
                .annotations()
                .get(pulumi_operator_api::names::RECONCILIATION_REQUEST_ANNOTATION),
            stack.metadata.deletion_timestamp.is_some(),
            // An approval (spec.approval) lets a waiting plan go.
            stack
                .annotations()
                .get(crate::stack::approval::APPROVE_ANNOTATION),
        );
        self.0.insert(uid, key.clone()).as_deref() != Some(key.as_str())
    }
}

/// The few things the trigger mappers read from Jobs and Pods.
trait ResourceLike {
    fn label(&self, key: &str) -> Option<&String>;
    fn ns(&self) -> Option<&str>;
}

impl<K: Resource> ResourceLike for K {
    fn label(&self, key: &str) -> Option<&String> {
        self.meta().labels.as_ref()?.get(key)
    }
    fn ns(&self) -> Option<&str> {
        self.meta().namespace.as_deref()
    }
}

/// Resolves once the store holds its first complete list (a store that is never filled, because
/// its watch keeps failing, keeps the controllers waiting: the watch's errors are logged).
fn wait_filled<K>(store: Store<K>) -> Running
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    async move {
        let _ = store.wait_until_ready().await;
    }
    .boxed()
}

async fn cancelled(token: CancellationToken) {
    token.cancelled().await
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn caches_keep_what_decisions_read() {
        let mut job: CachedJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "u", "namespace": "n", "labels": {"a": "b", "auto.pulumi.com/update-name": "u"}, "ownerReferences": [{"apiVersion": "v1",
                "kind": "Update", "name": "u", "uid": "1"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "1"},
                "managedFields": [{"manager": "x"}]},
            "spec": {"parallelism": 1, "activeDeadlineSeconds": 60, "template": {
                "metadata": {"labels": {"x": "y"}},
                "spec": {"containers": [{"name": "pulumi", "env": [{"name": "A", "value": "1"}]}],
                    "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "ws-cache"}},
                                {"name": "plan", "secret": {"secretName": "s"}}]}}},
            "status": {"active": 1}
        }))
        .unwrap();
        job.trim();
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.parallelism, Some(1));
        assert_eq!(spec.active_deadline_seconds, Some(60));
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.volumes.as_ref().unwrap().len(), 1);
        assert!(crate::workspace::reconcile::jobs_mount_claim(
            &[Arc::new(job.clone())],
            "n",
            "ws-cache"
        ));
        assert_eq!(job.status.as_ref().unwrap().active, Some(1));
        assert!(job.metadata.managed_fields.is_none());
        let annotations = job.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        assert!(annotations.contains_key("keep"));
        assert_eq!(job.owner_references().len(), 1);
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.len(), 1, "only the Update's name: {labels:?}");
        assert_eq!(labels[pulumi_operator_api::names::UPDATE_NAME_LABEL], "u");
    }

    #[tokio::test]
    async fn the_last_written_update_status_wins_over_an_older_cache() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let cfg = <crate::runtime::config::Config as clap::Parser>::try_parse_from(["op"]).unwrap();
        let ctx = Context::new(
            client,
            cfg,
            Arc::new(crate::runtime::metrics::Metrics::default()),
            Stores {
                stacks: reflector::store().0,
                updates: reflector::store().0,
                programs: reflector::store().0,
                workspaces: reflector::store().0,
                jobs: reflector::store().0,
                pods: reflector::store().0,
                pods_by_update: index::Index::new(|_| None),
                updates_by_stack: index::Index::new(|_| None),
            },
            &CancellationToken::new(),
        );
        let update: Update = serde_json::from_value(serde_json::json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
            "metadata": {"name": "u", "namespace": "ns", "uid": "1"}, "spec": {}
        }))
        .unwrap();
        let cached = Arc::new(update.clone());
        assert!(ctx.with_written_status(cached.clone()).status.is_none());
        let written = pulumi_operator_api::UpdateStatus {
            message: Some("running".into()),
            ..Default::default()
        };
        ctx.wrote_update_status(&update, &written);
        assert_eq!(
            ctx.with_written_status(cached.clone()).status.as_ref(),
            Some(&written)
        );
        // Another Update of the same name (a new uid) starts afresh.
        let mut other = update.clone();
        other.metadata.uid = Some("2".into());
        assert!(ctx.with_written_status(Arc::new(other)).status.is_none());
        ctx.forget("update", "ns", "u");
        assert!(ctx.with_written_status(cached.clone()).status.is_none());
        // Once the cache shows what was written (times to the second, as the API server
        // returns them), only the cache is kept.
        let written = pulumi_operator_api::UpdateStatus {
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-25T10:00:00.123456789Z".parse().unwrap(),
            )),
            ..written
        };
        ctx.wrote_update_status(&update, &written);
        let stored: pulumi_operator_api::UpdateStatus =
            serde_json::from_value(serde_json::to_value(&written).unwrap()).unwrap();
        assert_ne!(stored, written);
        let mut caught_up = update.clone();
        caught_up.status = Some(stored.clone());
        let seen = ctx.with_written_status(Arc::new(caught_up));
        assert_eq!(seen.status.as_ref(), Some(&stored));
        assert!(ctx.with_written_status(cached).status.is_none());
    }

    #[tokio::test]
    async fn what_is_kept_about_a_gone_object_is_forgotten() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (reader, mut writer) = reflector::store::<Stack>();
        let cfg = <crate::runtime::config::Config as clap::Parser>::try_parse_from(["op"]).unwrap();
        let ctx = Arc::new(Context::new(
            client,
            cfg,
            Arc::new(crate::runtime::metrics::Metrics::default()),
            Stores {
                stacks: reader.clone(),
                updates: reflector::store().0,
                programs: reflector::store().0,
                workspaces: reflector::store().0,
                jobs: reflector::store().0,
                pods: reflector::store().0,
                pods_by_update: index::Index::new(|_| None),
                updates_by_stack: index::Index::new(|_| None),
            },
            &CancellationToken::new(),
        ));
        let s = Arc::new(stack(1, "", 1));
        writer.apply_watcher_event(&watcher::Event::Apply((*s).clone()));
        ctx.failed("stack/ns/s");
        ctx.metrics
            .stacks_failing
            .get_or_create(&crate::runtime::metrics::StackLabels {
                namespace: "ns".into(),
                name: "s".into(),
            })
            .set(1);
        let mut filter = alive(reader, ctx.clone(), "stack");
        assert!(filter(&s), "a Stack in the store passes");
        assert_eq!(ctx.failed("stack/ns/s"), 1, "and keeps its count");
        writer.apply_watcher_event(&watcher::Event::Delete((*s).clone()));
        assert!(!filter(&s), "a deleted Stack does not");
        assert_eq!(ctx.failed("stack/ns/s"), 0, "its failure count is gone");
        assert!(
            !ctx.metrics.encode().contains("name=\"s\""),
            "and its series"
        );
        // Bounded requeues: far-away times become a daily check.
        let _ = requeue(Duration::from_secs(u64::MAX));
        assert!(crate::runtime::MAX_REQUEUE <= Duration::from_secs(86_400));
    }

    fn stack(generation: i64, request: &str, status_generation: i64) -> Stack {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u", "generation": generation,
                         "annotations": {"pulumi.com/reconciliation-request": request},
                         "finalizers": ["finalizer.stack.pulumi.com"]},
            "spec": {"stack": "dev"},
            "status": {"observedGeneration": status_generation}
        }))
        .unwrap()
    }

    #[test]
    fn only_what_a_stack_asks_for_triggers_its_reconcile() {
        let mut seen = SpecChanges::default();
        let mut new = stack(1, "", 0);
        new.metadata.finalizers = None;
        assert!(seen.changed(&new), "first sight");
        assert!(!seen.changed(&stack(1, "", 0)), "its finalizer added");
        assert!(!seen.changed(&stack(1, "", 1)), "its own status write");
        assert!(seen.changed(&stack(2, "", 1)), "a spec change");
        assert!(
            seen.changed(&stack(2, "now", 1)),
            "a reconciliation request"
        );
        let mut deleting = stack(2, "now", 1);
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert!(seen.changed(&deleting), "deletion");
        deleting.metadata.finalizers = None;
        assert!(!seen.changed(&deleting), "gone");
        assert!(seen.0.is_empty(), "forgotten");
    }
}
