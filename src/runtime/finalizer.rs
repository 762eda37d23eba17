//! Releasing the finalizer a Stack keeps on its Updates (`finalizer.stack.pulumi.com`) once it
//! has folded their result into its status. The Stack releases it after absorbing; the Update
//! controller releases it when the owning Stack is gone.

use crate::runtime::error::{Error, Result};
use kube::api::{Api, Patch, PatchParams};
use kube::Resource;
use pulumi_operator_api::names;

/// Removes `finalizer.stack.pulumi.com` from an object by a JSON patch that tests the entry.
/// `seen` (the cached object) saves reading it first; when the cache was behind, the test
/// fails and the object is read.
pub async fn remove_finalizer<K>(api: &Api<K>, name: &str, seen: Option<&K>) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if let Some(obj) = seen {
        match patch_out_finalizer(api, name, obj).await {
            Ok(()) => return Ok(()),
            Err(Error::Kube(kube::Error::Api(e))) if e.code != 404 => {
                tracing::debug!(
                    "the cached finalizers were stale ({}); reading the object",
                    e.message
                );
            }
            Err(e) => return Err(e),
        }
    }
    let Some(current) = api.get_opt(name).await? else {
        return Ok(());
    };
    patch_out_finalizer(api, name, &current).await
}

async fn patch_out_finalizer<K>(api: &Api<K>, name: &str, obj: &K) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(index) = obj
        .meta()
        .finalizers
        .iter()
        .flatten()
        .position(|f| f == names::FINALIZER)
    else {
        return Ok(());
    };
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": names::FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]))?;
    match api
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
