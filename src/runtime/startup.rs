//! Start-up checks against the API server: the CRDs are installed, and whether watches can
//! stream their initial lists.

use futures::StreamExt;
use kube::{Api, Resource};
use pulumi_operator_api::{Program, Stack, Update, Workspace};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::time::Duration;

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
        probe::<pulumi_operator_api::policy::StackPolicy>(client).await,
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
