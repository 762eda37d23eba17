//! Watches of Flux source objects (GitRepository, OCIRepository, Bucket), so that a new
//! artifact re-runs the Stacks that use it. The kinds are found through discovery, at the
//! version the cluster serves; while Flux is not installed the watch waits and looks again
//! every few minutes.

use futures::{Stream, StreamExt};
use kube::api::{Api, DynamicObject};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use std::time::Duration;

pub const FLUX_SOURCE_GROUP: &str = "source.toolkit.fluxcd.io";
pub const FLUX_SOURCE_KINDS: [&str; 3] = ["GitRepository", "OCIRepository", "Bucket"];
const LOOK_AGAIN: Duration = Duration::from_secs(300);

/// Wakes the watches that wait for Flux: a Stack just read a Flux source, so the kind exists.
static IN_USE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Called when a Stack has resolved a Flux source: watches still waiting for Flux to be
/// installed look again at once instead of at their next periodic check.
pub fn source_seen() {
    IN_USE.notify_waiters();
}

/// Every change of `kind` objects (in `ns`, or everywhere).
pub fn events(
    client: Client,
    ns: Option<String>,
    kind: &'static str,
) -> impl Stream<Item = DynamicObject> + Send + 'static {
    futures::stream::once(async move {
        loop {
            match kube::discovery::group(&client, FLUX_SOURCE_GROUP)
                .await
                .ok()
                .and_then(|g| g.recommended_kind(kind))
            {
                Some((resource, _)) => break (client, resource),
                None => {
                    tokio::select! {
                        _ = tokio::time::sleep(LOOK_AGAIN) => {}
                        _ = IN_USE.notified() => {}
                    }
                }
            }
        }
    })
    .flat_map(move |(client, resource)| {
        tracing::info!(kind, version = %resource.version, "watching Flux sources");
        let api: Api<DynamicObject> = match &ns {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        watcher(api, watcher::Config::default())
            .default_backoff()
            .touched_objects()
            .filter_map(|r| async move { r.ok() })
    })
}
