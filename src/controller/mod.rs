//! The controllers and how they run: one kube-runtime `Controller` per kind (per watched
//! namespace), bounded concurrency, errors backed off per object, graceful shutdown.

pub mod program;

use crate::context::Context;
use crate::error::{backoff, Error};
use futures::{FutureExt, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use pulumi_operator_api::{Program, Stack, Update, Workspace};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info_span, warn, Instrument};

/// Every kind the operator serves, with a short explanation for the install check.
pub async fn check_crds_installed(client: &kube::Client) -> Result<(), String> {
    async fn probe<K>(client: &kube::Client) -> Result<(), String>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let api: Api<K> = Api::all(client.clone());
        match api
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Err(format!(
                "the CustomResourceDefinition for {}.{}/{} is not installed",
                K::plural(&()),
                K::group(&()),
                K::version(&())
            )),
            Err(e) => Err(format!("cannot list {}: {e}", K::plural(&()))),
        }
    }
    let mut missing = Vec::new();
    for result in [
        probe::<Stack>(client).await,
        probe::<Program>(client).await,
        probe::<Workspace>(client).await,
        probe::<Update>(client).await,
    ] {
        if let Err(e) = result {
            missing.push(e);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("; "))
    }
}

/// Wraps a reconcile with a tracing span naming the object, the reconcile metrics, and the
/// per-object failure count used by `error_policy`.
async fn instrumented<K, F, Fut>(
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    f: F,
) -> Result<Action, Error>
where
    K: Resource + ResourceExt,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
{
    let key = format!(
        "{controller}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    let span = info_span!("reconcile", controller, object = %format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()));
    let timer = ctx.metrics.reconcile_started(controller);
    let result = f(obj, ctx.clone()).instrument(span).await;
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
        warn!(controller, namespace = %obj.namespace().unwrap_or_default(), name = %obj.name_any(),
              retry_in = ?delay, "reconcile failed: {error}");
        Action::requeue(delay)
    }
}

fn apis<K>(client: &kube::Client, namespaces: &[String]) -> Vec<Api<K>>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    if namespaces.is_empty() {
        vec![Api::all(client.clone())]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect()
    }
}

/// Runs every controller until `shutdown` is cancelled; in-flight reconciles finish first.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    let namespaces = ctx.config.watched_namespaces();
    let config = ControllerConfig::default().concurrency(ctx.config.concurrency);
    let mut all = Vec::new();
    for api in apis::<Program>(&ctx.client, &namespaces) {
        let controller = Controller::new(api, watcher::Config::default().any_semantic())
            .with_config(config.clone())
            .graceful_shutdown_on(cancelled(shutdown.clone()));
        let store = controller.store();
        let metrics = ctx.metrics.clone();
        let stop = shutdown.clone();
        // programs_active follows the watch cache.
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                metrics.programs_active.set(store.state().len() as i64);
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
        all.push(
            controller
                .run(
                    |o, c| instrumented("program", o, c, program::reconcile),
                    error_policy::<Program>("program"),
                    ctx.clone(),
                )
                .for_each(|_| async {})
                .boxed(),
        );
    }
    futures::future::join_all(all).await;
}

async fn cancelled(token: CancellationToken) {
    token.cancelled().await
}
