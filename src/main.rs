//! pulumi-operator: deploys Pulumi stacks declared as Kubernetes objects (the Pulumi
//! Kubernetes Operator's API), running every stack operation as a Kubernetes Job.

mod controllers;
mod http;
mod leader;
mod memory;
mod policy;
mod program;
mod runtime;
mod source;
mod stack;
mod telemetry;
mod update;
mod workspace;

use anyhow::Context as _;
use clap::Parser;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

fn main() -> ExitCode {
    // Before the runtime's threads exist.
    memory::limit_arenas();
    let config = runtime::config::Config::parse();
    if let Err(e) = telemetry::init(&config) {
        eprintln!("pulumi-operator: {e:#}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pulumi-operator: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: runtime::config::Config) -> anyhow::Result<()> {
    info!(
        version = env!("CARGO_PKG_VERSION"),
        "starting pulumi-operator"
    );
    configure_git_remote_pool(&config);
    let client = kube::Client::try_default()
        .await
        .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let metrics = Arc::new(runtime::metrics::Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone());
    let http_state = http::HttpState {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let http = tokio::spawn(http::serve(config.http_addr, http_state, shutdown.clone()));
    tokio::spawn(memory::trim_periodically(shutdown.clone()));

    if !wait_for_crds(&client, &shutdown).await? {
        return Ok(());
    }
    let mut config = config;
    config.runner_image = resolve_runner_image(&client, &config).await;
    info!(runner_image = %config.runner_image, "runner image");
    ready.store(true, Ordering::Relaxed);
    let streaming_lists = runtime::startup::streaming_lists_supported(&client, &config).await;
    info!(
        streaming_lists,
        "initial lists of the watches are {}",
        if streaming_lists {
            "streamed (one object at a time)"
        } else {
            "paginated"
        }
    );
    let scope = controllers::Scope {
        client: client.clone(),
        config: config.clone(),
        metrics,
        streaming_lists,
    };

    if config.leader_elect {
        lead(client, &config, scope, &shutdown).await;
    } else {
        controllers::run(scope, shutdown.clone()).await;
    }
    shutdown.cancel();
    let _ = http.await;
    info!("stopped");
    Ok(())
}

/// The bounded pool git remote calls (tracked branches) run on, sized by the flags.
fn configure_git_remote_pool(config: &runtime::config::Config) {
    let limits = config.git_remote_limits();
    if source::poll::Poller::configure(limits).is_err() {
        warn!("the git remote pool was configured before start-up; flags ignored");
    }
    info!(
        concurrency = limits.total,
        per_host = limits.per_host,
        timeout = ?limits.deadline,
        "git remote calls (tracked branches) run on a bounded pool"
    );
}

/// Waits until the CRDs are known to be installed (true), or shutdown (false). An API server
/// that does not answer yet is waited for (with backoff), not a reason to exit: a restart loop
/// would only add CrashLoopBackOff's minutes to the outage. Missing CRDs are an error.
async fn wait_for_crds(
    client: &kube::Client,
    shutdown: &CancellationToken,
) -> anyhow::Result<bool> {
    let mut failures = 0;
    loop {
        match runtime::startup::check_crds_installed(client).await {
            Ok(()) => return Ok(true),
            Err(runtime::startup::StartCheck::Missing(missing)) => {
                shutdown.cancel();
                anyhow::bail!(
                    "{missing}. Install the operator's CRDs first: `kubectl apply --server-side -k kustomize/base` \
                     installs everything, `kubectl apply --server-side -f crds/` only the CRDs."
                );
            }
            Err(runtime::startup::StartCheck::Unreachable(why)) => {
                failures += 1;
                let wait = STARTUP_BACKOFF.after(failures);
                tracing::warn!(retry_in = ?wait, "the API server is not answering yet: {why}");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => return Ok(false),
                }
            }
        }
    }
}

/// Waits between attempts to reach the API server or the leader Lease: 1 s, doubling, 30 s at
/// most.
const STARTUP_BACKOFF: pulumi_operator_api::backoff::Backoff =
    pulumi_operator_api::backoff::Backoff::new(
        Duration::from_secs(1),
        2.0,
        Duration::from_secs(30),
    );

/// Reconciles while this replica holds the Lease. Losing it stops every reconcile at once
/// (another replica may already be reconciling) and campaigns again, in the same process: no
/// restart, so no CrashLoopBackOff delay before this replica can lead again.
async fn lead(
    client: kube::Client,
    config: &runtime::config::Config,
    scope: controllers::Scope,
    shutdown: &CancellationToken,
) {
    let mut failures = 0;
    while !shutdown.is_cancelled() {
        let mut leadership = match leader::campaign(client.clone(), config).await {
            Ok(l) => l,
            Err(e) => {
                failures += 1;
                let wait = STARTUP_BACKOFF.after(failures);
                tracing::warn!(retry_in = ?wait, "cannot campaign for the leader lease: {e}");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => return,
                }
                continue;
            }
        };
        failures = 0;
        loop {
            // Wait to lead.
            let stopped = loop {
                if *leadership.is_leader.borrow_and_update() {
                    break false;
                }
                tokio::select! {
                    changed = leadership.is_leader.changed() => if changed.is_err() { break true },
                    _ = shutdown.cancelled() => {
                        leadership.release().await;
                        return;
                    }
                }
            };
            if stopped {
                tracing::warn!("leader election stopped; campaigning again");
                break;
            }
            info!("became the leader: reconciling");
            let term = shutdown.child_token();
            let mut controllers = Box::pin(controllers::run(scope.clone(), term.clone()));
            let lost = loop {
                tokio::select! {
                    _ = &mut controllers => break false,
                    changed = leadership.is_leader.changed() => {
                        if changed.is_err() || !*leadership.is_leader.borrow_and_update() {
                            break true;
                        }
                    }
                }
            };
            if !lost {
                leadership.release().await;
                return;
            }
            // Dropping the controllers ends every reconcile at its next await.
            term.cancel();
            drop(controllers);
            error!("lost the leader lease: stopped reconciling; campaigning again");
            if leadership.is_leader.has_changed().is_err() {
                break;
            }
        }
    }
}

/// The runner image: the flag, else the image of the `runner` init container of the operator's
/// own pod (so kustomize's `images:` sets both images in one place), else the built-in default.
async fn resolve_runner_image(client: &kube::Client, config: &runtime::config::Config) -> String {
    if !config.runner_image.is_empty() {
        return config.runner_image.clone();
    }
    let pod_name = std::env::var("POD_NAME").unwrap_or_default();
    if !pod_name.is_empty() {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client.clone(), &config.lease_namespace);
        match pods.get(&pod_name).await {
            Ok(pod) => {
                let image = pod
                    .spec
                    .and_then(|s| s.init_containers)
                    .into_iter()
                    .flatten()
                    .find(|c| c.name == runtime::config::RUNNER_INIT_CONTAINER)
                    .and_then(|c| c.image);
                if let Some(image) = image {
                    return image;
                }
            }
            Err(e) => {
                tracing::warn!("cannot read the operator's own pod to find the runner image: {e}")
            }
        }
    }
    runtime::config::DEFAULT_RUNNER_IMAGE.to_string()
}

/// SIGTERM or SIGINT starts a graceful shutdown: reconciles in flight finish, the lease is
/// released, the process exits.
fn spawn_signal_handler(shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    error!("cannot listen for SIGTERM: {e}");
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
        }
        shutdown.cancel();
    });
}
