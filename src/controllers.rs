//! The wiring: one kube-runtime `Controller` per kind and watched namespace, each built by its
//! own function from the shared watches (`runtime::watch`), with what triggers it. How one
//! reconcile runs (its turn at the gate, its span, its backoff) is `runtime::turns`.

use crate::runtime::cached::{CachedJob, CachedPod};
use crate::runtime::context::{Context, Stores};
use crate::runtime::index;
use crate::runtime::metrics::fleet::FleetSource;
use crate::runtime::metrics::Metrics;
use crate::runtime::turns::{error_policy, instrumented};
use crate::runtime::watch::{api, Running, SharedWatch};
use crate::{policy, program, stack, update, workspace};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolumeClaim};
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::{Resource, ResourceExt};
use pulumi_operator_api::names;
use pulumi_operator_api::policy::StackPolicy;
use pulumi_operator_api::{Program, Stack, Update, Workspace};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// What the controllers are started with.
#[derive(Clone)]
pub struct Scope {
    pub client: kube::Client,
    pub config: crate::runtime::config::Config,
    pub metrics: Arc<crate::runtime::metrics::Metrics>,
    /// Initial lists come as streamed watch events (see [`crate::runtime::startup::streaming_lists_supported`]).
    pub streaming_lists: bool,
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
    let mut fleet = FleetSource::default();
    let mut cluster = ClusterWatches::new(&scope.client, scope.streaming_lists);
    for ns in scopes {
        let (futures, caches) = run_in(&scope, ns.as_deref(), &mut cluster, shutdown.clone());
        all.extend(futures);
        fleet.stacks.extend(caches.stacks);
        fleet.programs.extend(caches.programs);
        fleet.updates.extend(caches.updates);
    }
    all.push(policy_controller(
        &mut cluster,
        &scope,
        fleet.stacks.clone(),
        &shutdown,
    ));
    all.push(cluster.drive(shutdown.clone(), &scope.metrics));
    // The fleet's metrics (stacks_active, Stacks by state, ...) are read from the caches at
    // each scrape, and `pulumi_operator_leader` is 1, until this ends or is dropped.
    let _leading = scope.metrics.lead(fleet);
    futures::future::join_all(all).await;
}

/// How every watch lists and watches: streamed initial lists where the API server has them,
/// else pages, which bound a list's memory where the API server honours them (lists it does not
/// serve from its watch cache).
fn watch_config(streaming: bool) -> watcher::Config {
    let cfg = watcher::Config::default().any_semantic();
    if streaming {
        cfg.streaming_lists()
    } else {
        cfg.page_size(100)
    }
}

/// Runs `drivers` (the watches) until they end or `shutdown` is cancelled.
fn until_shutdown(
    drivers: impl std::future::Future<Output = ()> + Send + 'static,
    shutdown: CancellationToken,
) -> Running {
    async move {
        tokio::select! {
            _ = drivers => {}
            _ = shutdown.cancelled() => {}
        }
    }
    .boxed()
}

/// The watches of cluster-scoped kinds, shared by every watched namespace: the
/// administrator's StackPolicies and the namespaces' labels they select by.
struct ClusterWatches {
    policies: SharedWatch<StackPolicy>,
    namespaces: SharedWatch<Namespace>,
}

impl ClusterWatches {
    fn new(client: &kube::Client, streaming: bool) -> ClusterWatches {
        let wc = move || watch_config(streaming);
        ClusterWatches {
            policies: SharedWatch::new(kube::Api::all(client.clone()), wc(), vec![]),
            namespaces: SharedWatch::new(kube::Api::all(client.clone()), wc(), vec![]),
        }
    }

    fn filled(&self) -> Running {
        futures::future::join(self.policies.filled(), self.namespaces.filled())
            .map(|_| ())
            .boxed()
    }

    fn drive(self, shutdown: CancellationToken, metrics: &Metrics) -> Running {
        let drivers = futures::future::join(
            self.policies
                .drive(metrics.watch_restarts_of("StackPolicy")),
            self.namespaces
                .drive(metrics.watch_restarts_of("Namespace")),
        );
        until_shutdown(drivers.map(|_| ()), shutdown)
    }
}

/// The StackPolicy controller (cluster-wide, once): resolves each pack's revision and writes
/// the policy's status. Starts once the StackPolicy, namespace and Stack caches are filled.
fn policy_controller(
    cluster: &mut ClusterWatches,
    scope: &Scope,
    stacks: Vec<Store<Stack>>,
    shutdown: &CancellationToken,
) -> Running {
    let ctx = Arc::new(policy::reconcile::PolicyContext {
        client: scope.client.clone(),
        namespaces: cluster.namespaces.store(),
        stacks: stacks.clone(),
        metrics: scope.metrics.clone(),
        operator_namespace: scope.config.lease_namespace.clone(),
    });
    let filled = futures::future::join(
        cluster.filled(),
        futures::future::join_all(stacks.into_iter().map(|s| async move {
            let _ = s.wait_until_ready().await;
        })),
    );
    let controller =
        Controller::for_shared_stream(cluster.policies.subscribe(), cluster.policies.store())
            .with_config(controller_config())
            .graceful_shutdown_on(cancelled(shutdown.clone()))
            .run(
                policy::reconcile::reconcile,
                policy::reconcile::error_policy,
                ctx,
            )
            .for_each(|_| async {});
    let stop = shutdown.clone();
    async move {
        tokio::select! {
            _ = filled => controller.await,
            _ = stop.cancelled() => {}
        }
    }
    .boxed()
}

/// Every watch of one namespace (or all), with the indexes the reconciles read.
struct Watches {
    stacks: SharedWatch<Stack>,
    updates: SharedWatch<Update>,
    programs: SharedWatch<Program>,
    workspaces: SharedWatch<Workspace>,
    jobs: SharedWatch<CachedJob>,
    pods: SharedWatch<CachedPod>,
    statefulsets: SharedWatch<StatefulSet>,
    claims: SharedWatch<PersistentVolumeClaim>,
    pods_by_update: Arc<index::Index<CachedPod>>,
    pods_by_stack: Arc<index::Index<CachedPod>>,
    updates_by_stack: Arc<index::Index<Update>>,
    updates_by_workspace: Arc<index::Index<Update>>,
}

impl Watches {
    fn new(client: &kube::Client, ns: Option<&str>, streaming: bool) -> Watches {
        let wc = move || watch_config(streaming);
        // Update Jobs and pods, and retained workspaces' StatefulSets and claims: ours only,
        // by label.
        let ours = move || wc().labels(names::UPDATE_NAME_LABEL);
        let workspace_parts = move || {
            wc().labels(&format!(
                "{}={}",
                names::AUTO_COMPONENT_LABEL,
                names::AUTO_COMPONENT_WORKSPACE
            ))
        };
        let pods_by_update = index::Index::new(index::label::<CachedPod, { index::UPDATE_NAME }>);
        let pods_by_stack = index::Index::new(index::label::<CachedPod, { index::STACK_NAME }>);
        let updates_by_stack = index::Index::new(index::label::<Update, { index::STACK_NAME }>);
        let updates_by_workspace = index::Index::new(|u: &Update| u.spec.workspace_name.as_deref());
        let update_indexes = vec![updates_by_stack.clone(), updates_by_workspace.clone()];
        Watches {
            stacks: SharedWatch::new(api(client, ns), wc(), vec![]),
            updates: SharedWatch::new(api(client, ns), wc(), update_indexes),
            programs: SharedWatch::new(api(client, ns), wc(), vec![]),
            workspaces: SharedWatch::new(api(client, ns), wc(), vec![]),
            jobs: SharedWatch::new(api(client, ns), ours(), vec![]),
            pods: SharedWatch::new(
                api(client, ns),
                ours(),
                vec![pods_by_update.clone(), pods_by_stack.clone()],
            ),
            statefulsets: SharedWatch::new(api(client, ns), workspace_parts(), vec![]),
            claims: SharedWatch::new(api(client, ns), workspace_parts(), vec![]),
            pods_by_update,
            pods_by_stack,
            updates_by_stack,
            updates_by_workspace,
        }
    }

    fn stores(&self, cluster: &ClusterWatches) -> Stores {
        Stores {
            policies: cluster.policies.store(),
            namespaces: cluster.namespaces.store(),
            stacks: self.stacks.store(),
            updates: self.updates.store(),
            programs: self.programs.store(),
            workspaces: self.workspaces.store(),
            jobs: self.jobs.store(),
            pods: self.pods.store(),
            pods_by_update: self.pods_by_update.clone(),
            pods_by_stack: self.pods_by_stack.clone(),
            updates_by_stack: self.updates_by_stack.clone(),
        }
    }

    /// Resolves when every cache has been filled by its first list.
    fn filled(&self) -> Running {
        futures::future::join_all([
            self.stacks.filled(),
            self.updates.filled(),
            self.programs.filled(),
            self.workspaces.filled(),
            self.jobs.filled(),
            self.pods.filled(),
            self.statefulsets.filled(),
            self.claims.filled(),
        ])
        .map(|_| ())
        .boxed()
    }

    /// The watches themselves, until shutdown.
    fn drive(self, shutdown: CancellationToken, metrics: &Metrics) -> Running {
        let restarts = |kind: &str| metrics.watch_restarts_of(kind);
        let drivers = futures::future::join_all([
            self.stacks.drive(restarts("Stack")),
            self.updates.drive(restarts("Update")),
            self.programs.drive(restarts("Program")),
            self.workspaces.drive(restarts("Workspace")),
            self.jobs.drive(restarts("Job")),
            self.pods.drive(restarts("Pod")),
            self.statefulsets.drive(restarts("StatefulSet")),
            self.claims.drive(restarts("PersistentVolumeClaim")),
        ]);
        until_shutdown(drivers.map(|_| ()), shutdown)
    }
}

/// The controllers of one namespace (or all), and the caches the fleet's metrics read.
fn run_in(
    scope: &Scope,
    ns: Option<&str>,
    cluster: &mut ClusterWatches,
    shutdown: CancellationToken,
) -> (Vec<Running>, FleetSource) {
    let mut watches = Watches::new(&scope.client, ns, scope.streaming_lists);
    let ctx = Arc::new(Context::new(
        scope.client.clone(),
        scope.config.clone(),
        scope.metrics.clone(),
        watches.stores(cluster),
        &shutdown,
    ));
    let controllers = [
        stack_controller(&mut watches, &ctx, ns, cluster, &shutdown),
        update_controller(&mut watches, &ctx, ns, &shutdown),
        workspace_controller(&mut watches, &ctx, &shutdown),
        program_controller(&mut watches, &ctx, &shutdown),
    ];
    // No controller acts before every cache it reads has been filled by its first list: an
    // empty cache would look like "the Stack is gone" or "no Job exists" and lead to deletions
    // and duplicate operations after every restart.
    let filled = futures::future::join(watches.filled(), cluster.filled());
    let ns_label = ns.unwrap_or("all namespaces").to_string();
    let stop = shutdown.clone();
    let controllers = async move {
        tokio::select! {
            _ = filled => {
                tracing::info!(namespace = %ns_label, "watch caches filled; controllers start");
                futures::future::join_all(controllers).await;
            }
            _ = stop.cancelled() => {}
        }
    }
    .boxed();
    let caches = FleetSource {
        stacks: vec![watches.stacks.store()],
        programs: vec![watches.programs.store()],
        updates: vec![watches.updates.store()],
    };
    // The watch drivers end with the controllers.
    (
        vec![controllers, watches.drive(shutdown, &scope.metrics)],
        caches,
    )
}

/// No limit here: every scheduled reconcile waits for its turn at its controller's gate, first
/// come, first served (see `gate`), within `--concurrency`.
fn controller_config() -> ControllerConfig {
    ControllerConfig::default()
}

/// The Stack controller. A Stack is reconciled when what it asks for changes, not when its own
/// status does (as PKO's predicates): a reconcile's status write never triggers the next one,
/// so an error after a write backs off instead of looping. It is also reconciled when a Stack
/// it needs changes, when its Program or Flux source has a new artifact, when a branch head it
/// waited for was read, and when one of its Updates changes.
fn stack_controller(
    w: &mut Watches,
    ctx: &Arc<Context>,
    ns: Option<&str>,
    cluster: &mut ClusterWatches,
    shutdown: &CancellationToken,
) -> Running {
    let stacks = w.stacks.store();
    let mut seen = SpecChanges::default();
    let mut stack_alive = alive(stacks.clone(), ctx.clone(), "stack");
    let primary = w.stacks.subscribe().filter(move |s| {
        let pass = if stack_alive(s) {
            seen.changed(s)
        } else {
            seen.forget(s);
            false
        };
        futures::future::ready(pass)
    });
    Controller::for_shared_stream(primary, stacks.clone())
        .with_config(controller_config())
        .watches_shared_stream(w.stacks.subscribe(), stacks_needing(stacks.clone()))
        .reconcile_on(flux_triggers(&ctx.client, ns, stacks.clone()))
        .reconcile_on(branch_answers(ns.map(str::to_string)))
        .reconcile_on(stacks_of_policies(
            cluster.policies.subscribe(),
            stacks.clone(),
            cluster.namespaces.store(),
        ))
        .reconcile_on(stacks_of_terminating_namespaces(
            cluster.namespaces.subscribe(),
            stacks.clone(),
        ))
        .owns_shared_stream(w.updates.subscribe())
        .watches_shared_stream(w.programs.subscribe(), stacks_using_program(stacks))
        .graceful_shutdown_on(cancelled(shutdown.clone()))
        .run(
            |o, c| instrumented("stack", o, c, stack::reconcile::reconcile_guarded),
            error_policy::<Stack>("stack"),
            ctx.clone(),
        )
        .for_each(|_| async {})
        .boxed()
}

/// A StackPolicy that changes (its packs, their revisions, configuration or selectors)
/// reconciles the Stacks it covers and those its packs covered before (their status reports
/// packs), which then check again with the packs they now have.
fn stacks_of_policies(
    policies: crate::runtime::watch::Feed<StackPolicy>,
    stacks: Store<Stack>,
    namespaces: Store<Namespace>,
) -> impl futures::Stream<Item = ObjectRef<Stack>> {
    policies.flat_map(move |policy| {
        let empty = Default::default();
        let refs: Vec<ObjectRef<Stack>> = stacks
            .state_filter(|s| {
                if s.status.as_ref().is_some_and(|st| st.policy.is_some()) {
                    return true;
                }
                let ns = s.metadata.namespace.clone().unwrap_or_default();
                let ns_labels = namespaces
                    .get(&ObjectRef::new(&ns))
                    .and_then(|n| n.metadata.labels.clone())
                    .unwrap_or_default();
                policy::covers(
                    &policy,
                    &policy::Subject {
                        namespace_labels: &ns_labels,
                        stack_labels: Some(s.metadata.labels.as_ref().unwrap_or(&empty)),
                    },
                )
            })
            .iter()
            .map(|s| ObjectRef::from(s.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
}

/// A namespace being deleted reconciles its Stacks at once: each starts nothing more, lets go of
/// an operation that never started and releases its finalizer (or destroys), so that the
/// namespace controller finds them ready to go when it reaches them.
fn stacks_of_terminating_namespaces(
    namespaces: crate::runtime::watch::Feed<Namespace>,
    stacks: Store<Stack>,
) -> impl futures::Stream<Item = ObjectRef<Stack>> {
    namespaces.flat_map(move |namespace| {
        let refs: Vec<ObjectRef<Stack>> = match namespace.metadata.deletion_timestamp {
            Some(_) => stacks
                .state_filter(|s| s.metadata.namespace == namespace.metadata.name)
                .iter()
                .map(|s| ObjectRef::from(s.as_ref()))
                .collect(),
            None => Vec::new(),
        };
        futures::stream::iter(refs)
    })
}

/// A Stack that changes (e.g. becomes Ready) lets the Stacks that need it go on.
fn stacks_needing(stacks: Store<Stack>) -> impl Fn(Arc<Stack>) -> Vec<ObjectRef<Stack>> {
    move |p: Arc<Stack>| {
        // In place: this runs over every Stack for each Stack event.
        stacks
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
            .collect()
    }
}

/// Program changes re-run the Stacks that use them.
fn stacks_using_program(stacks: Store<Stack>) -> impl Fn(Arc<Program>) -> Vec<ObjectRef<Stack>> {
    move |p: Arc<Program>| {
        stacks
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
            .collect()
    }
}

/// A new Flux artifact re-runs the Stacks that use the source.
fn flux_triggers(
    client: &kube::Client,
    ns: Option<&str>,
    stacks: Store<Stack>,
) -> impl futures::Stream<Item = ObjectRef<Stack>> {
    crate::source::flux::events(client.clone(), ns.map(str::to_string)).flat_map(move |obj| {
        let kind = obj
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let refs: Vec<ObjectRef<Stack>> = stacks
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
    })
}

/// The Update controller: reconciled when its Job, its pod or a Warning Event about them
/// changes, and when the Workspace an unfinished Update runs against changes.
fn update_controller(
    w: &mut Watches,
    ctx: &Arc<Context>,
    ns: Option<&str>,
    shutdown: &CancellationToken,
) -> Running {
    let updates = w.updates.store();
    let mut update_alive = alive(updates.clone(), ctx.clone(), "update");
    let primary = w
        .updates
        .subscribe()
        .filter(move |u| futures::future::ready(update_alive(u)));
    let by_label = |o: &dyn ResourceLike| -> Option<ObjectRef<Update>> {
        let name = o.label(names::UPDATE_NAME_LABEL)?;
        Some(ObjectRef::new(name).within(o.ns()?))
    };
    let job_triggers = w
        .jobs
        .subscribe()
        .filter_map(move |j: Arc<CachedJob>| async move { by_label(j.as_ref()) });
    let pod_triggers = w
        .pods
        .subscribe()
        .filter_map(move |p: Arc<CachedPod>| async move { by_label(p.as_ref()) });
    let by_workspace = w.updates_by_workspace.clone();
    let unfinished_updates_of = move |ws: Arc<Workspace>| {
        by_workspace
            .lookup(
                &updates,
                ws.metadata.namespace.as_deref().unwrap_or_default(),
                &ws.name_any(),
            )
            .iter()
            .filter(|u| !crate::update::status::update_complete(u))
            .map(|u| ObjectRef::from(u.as_ref()))
            .collect::<Vec<_>>()
    };
    Controller::for_shared_stream(primary, w.updates.store())
        .with_config(controller_config())
        .reconcile_on(job_triggers)
        .reconcile_on(pod_triggers)
        .reconcile_on(warning_triggers(ctx, ns))
        .watches_shared_stream(w.workspaces.subscribe(), unfinished_updates_of)
        .graceful_shutdown_on(cancelled(shutdown.clone()))
        .run(
            |o, c| instrumented("update", o, c, update::reconcile::reconcile),
            error_policy::<Update>("update"),
            ctx.clone(),
        )
        .for_each(|_| async {})
        .boxed()
}

/// Warning Events of update Jobs and pods: kept in the context, and each new one triggers its
/// Update.
fn warning_triggers(
    ctx: &Arc<Context>,
    ns: Option<&str>,
) -> impl futures::Stream<Item = ObjectRef<Update>> {
    let ctx = ctx.clone();
    let cfg = watcher::Config::default()
        .any_semantic()
        .fields("type=Warning");
    watcher(api::<Event>(&ctx.client, ns), cfg)
        .default_backoff()
        .filter_map(move |event| {
            let ctx = ctx.clone();
            async move {
                match event {
                    Ok(event) => ctx.warnings.observe(event),
                    Err(e) => {
                        warn!("watching Warning Events: {e}");
                        None
                    }
                }
            }
        })
}

/// The Workspace controller (retained workspaces, `workspaceReclaimPolicy: Retain`): its
/// StatefulSets and cache claims (ours only, by label) trigger their Workspace, and so does a
/// change of the owning Stack (same name), e.g. of its reclaim policy.
fn workspace_controller(
    w: &mut Watches,
    ctx: &Arc<Context>,
    shutdown: &CancellationToken,
) -> Running {
    let workspaces = w.workspaces.store();
    let mut ws_alive = alive(workspaces.clone(), ctx.clone(), "workspace");
    let primary = w
        .workspaces
        .subscribe()
        .filter(move |ws| futures::future::ready(ws_alive(ws)));
    let by_workspace = |o: &dyn ResourceLike| -> Option<ObjectRef<Workspace>> {
        let name = o.label(names::WORKSPACE_NAME_LABEL)?;
        Some(ObjectRef::new(name).within(o.ns()?))
    };
    let sts_triggers = w
        .statefulsets
        .subscribe()
        .filter_map(move |s: Arc<StatefulSet>| async move { by_workspace(s.as_ref()) });
    let claim_triggers = w
        .claims
        .subscribe()
        .filter_map(move |c: Arc<PersistentVolumeClaim>| async move { by_workspace(c.as_ref()) });
    let retained = Arc::new(workspace::reconcile::RetainedStores {
        statefulsets: w.statefulsets.store(),
        claims: w.claims.store(),
    });
    Controller::for_shared_stream(primary, workspaces)
        .with_config(controller_config())
        .reconcile_on(sts_triggers)
        .reconcile_on(claim_triggers)
        .watches_shared_stream(w.stacks.subscribe(), |s: Arc<Stack>| {
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
        .boxed()
}

/// The Program controller.
fn program_controller(
    w: &mut Watches,
    ctx: &Arc<Context>,
    shutdown: &CancellationToken,
) -> Running {
    let programs = w.programs.store();
    let mut program_alive = alive(programs.clone(), ctx.clone(), "program");
    let primary = w
        .programs
        .subscribe()
        .filter(move |p| futures::future::ready(program_alive(p)));
    Controller::for_shared_stream(primary, programs)
        .with_config(controller_config())
        .graceful_shutdown_on(cancelled(shutdown.clone()))
        .run(
            |o, c| instrumented("program", o, c, program::reconcile::reconcile),
            error_policy::<Program>("program"),
            ctx.clone(),
        )
        .for_each(|_| async {})
        .boxed()
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

async fn cancelled(token: CancellationToken) {
    token.cancelled().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use std::time::Duration;

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
                pods_by_stack: index::Index::new(|_| None),
                updates_by_stack: index::Index::new(|_| None),
                policies: reflector::store().0,
                namespaces: reflector::store().0,
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
        let _ = crate::runtime::requeue(Duration::from_secs(u64::MAX));
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
