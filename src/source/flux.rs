//! Watches of Flux source objects (GitRepository, OCIRepository, Bucket), so that a new
//! artifact re-runs the Stacks that use it. The kinds are found through discovery, at the
//! version the cluster serves; while Flux is not installed the watch waits and looks again
//! every few minutes.

use crate::source::ResolveError;
use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
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

/// A Flux source's current artifact.
pub struct Artifact {
    pub url: String,
    /// `sha256:<hex>` (empty when the source reports none).
    pub digest: String,
    pub revision: String,
}

/// The current artifact of the Flux source `kind`/`name` in `ns` (a Stack's or a policy
/// pack's), with errors that say what to fix.
pub async fn artifact(
    api_version: &str,
    kind: &str,
    name: &str,
    ns: &str,
    client: &Client,
) -> Result<Artifact, ResolveError> {
    let obj = read_source(api_version, kind, name, ns, client).await?;
    source_seen();
    let artifact = &obj.data["status"]["artifact"];
    let (Some(url), Some(revision)) = (artifact["url"].as_str(), artifact["revision"].as_str())
    else {
        return Err(ResolveError::unavailable("Flux source has no artifact"));
    };
    Ok(Artifact {
        url: url.to_string(),
        digest: artifact["digest"].as_str().unwrap_or_default().to_string(),
        revision: revision.to_string(),
    })
}

async fn read_source(
    api_version: &str,
    kind: &str,
    name: &str,
    ns: &str,
    client: &Client,
) -> Result<DynamicObject, ResolveError> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, kind);
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    match api.get_opt(name).await {
        Ok(Some(o)) => Ok(o),
        Ok(None) => Err(ResolveError::unavailable(format!(
            "could not resolve sourceRef: {} {:?} not found",
            kind, name
        ))),
        Err(kube::Error::Api(e)) if e.code == 404 => Err(ResolveError::unavailable(format!(
            "could not resolve sourceRef: the kind {} ({}) is not installed in the cluster",
            kind, api_version
        ))),
        Err(kube::Error::Api(e)) if e.code == 403 => Err(ResolveError::unavailable(format!(
            "could not resolve sourceRef: the operator may not read {} objects (group {group}); \
             grant its ClusterRole get, list and watch on them",
            kind
        ))),
        Err(e) => Err(ResolveError::unavailable(format!(
            "could not resolve sourceRef: {e}"
        ))),
    }
}

/// Every change of Flux source objects of the kinds the cluster serves (in `ns`, or
/// everywhere). One discovery serves all the kinds: separate lookups of the same group at the
/// same moment read, to a throttling API server, like a client that retries too soon.
pub fn events(
    client: Client,
    ns: Option<String>,
) -> impl Stream<Item = DynamicObject> + Send + 'static {
    futures::stream::once(async move {
        loop {
            let served: Vec<ApiResource> = match kube::discovery::group(&client, FLUX_SOURCE_GROUP)
                .await
            {
                Ok(group) => FLUX_SOURCE_KINDS
                    .iter()
                    .filter_map(|kind| group.recommended_kind(kind).map(|(r, _)| r))
                    .collect(),
                Err(_) => Vec::new(),
            };
            if !served.is_empty() {
                break (client, served);
            }
            tokio::select! {
                _ = tokio::time::sleep(LOOK_AGAIN) => {}
                _ = IN_USE.notified() => {}
            }
        }
    })
    .flat_map(move |(client, served)| {
        let ns = ns.clone();
        futures::stream::select_all(served.into_iter().map(move |resource| {
            tracing::info!(kind = %resource.kind, version = %resource.version, "watching Flux sources");
            let api: Api<DynamicObject> = match &ns {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            watcher(api, watcher::Config::default())
                .default_backoff()
                .touched_objects()
                .filter_map(|r| async move { r.ok() })
                .boxed()
        }))
    })
}
