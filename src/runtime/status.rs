//! The one way a controller writes an object's status: a server-side apply of the status
//! subresource under the controller's own field manager, forced (that manager owns the
//! status), with the apiVersion and kind of the object's type.

use kube::api::{Api, Patch, PatchParams};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Applies `status` to `name`, conditioned on `resource_version` when one is given (the API
/// server then refuses the write with a conflict if the object changed since it was read).
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    manager: &str,
    status: &impl Serialize,
    resource_version: Option<&str>,
) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = status_patch::<K>(name, status, resource_version);
    api.patch_status(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&patch),
    )
    .await
}

/// The apply configuration of a status write.
fn status_patch<K: Resource<DynamicType = ()>>(
    name: &str,
    status: &impl Serialize,
    resource_version: Option<&str>,
) -> serde_json::Value {
    let mut metadata = serde_json::json!({ "name": name });
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = rv.into();
    }
    serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": metadata,
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::policy::StackPolicy;
    use pulumi_operator_api::{Stack, Update, Workspace};
    use serde_json::json;

    #[test]
    fn the_patch_names_the_type_and_the_object() {
        let p = status_patch::<Stack>("s", &json!({"a": 1}), Some("42"));
        assert_eq!(
            p,
            json!({"apiVersion": "pulumi.com/v1", "kind": "Stack",
                   "metadata": {"name": "s", "resourceVersion": "42"}, "status": {"a": 1}})
        );
        let p = status_patch::<Update>("u", &json!({}), None);
        assert_eq!(p["apiVersion"], "auto.pulumi.com/v1alpha1");
        assert_eq!(p["kind"], "Update");
        assert_eq!(p["metadata"], json!({"name": "u"}));
        assert_eq!(
            status_patch::<Workspace>("w", &json!({}), None)["kind"],
            "Workspace"
        );
        assert_eq!(
            status_patch::<StackPolicy>("p", &json!({}), None)["apiVersion"],
            format!("{}/v1alpha1", pulumi_operator_api::policy::GROUP)
        );
    }
}
