//! What the update Jobs of a stack and its retained workspace (`workspaceReclaimPolicy:
//! Retain`) share: the names of the retained workspace's objects, and the cache claim that a
//! Job mounts at `PULUMI_HOME` next to the workspace pod. Both the Job builder
//! (`crate::update::job`) and the StatefulSet builder (`super::statefulset`) use it; neither
//! depends on the other's module for it.

use kube::ResourceExt;
use pulumi_operator_api::names;
use pulumi_operator_api::Workspace;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The cache volume (the volumeClaimTemplate's name) and where it is mounted: `PULUMI_HOME`.
pub const CACHE_VOLUME: &str = "cache";
pub const CACHE_MOUNT_PATH: &str = "/share/.pulumi";
/// The size requested for the cache (provider plugins are large: hundreds of MB each).
pub const CACHE_SIZE: &str = "4Gi";
/// `<ws>-workspace`, as PKO names it.
pub fn statefulset_name(ws: &str) -> String {
    format!("{ws}-workspace")
}

/// The workspace pod: `<ws>-workspace-0`.
pub fn pod_name(ws: &str) -> String {
    format!("{}-0", statefulset_name(ws))
}

/// The cache claim the StatefulSet controller creates: `cache-<ws>-workspace-0`.
pub fn cache_claim_name(ws: &str) -> String {
    format!("{CACHE_VOLUME}-{}", pod_name(ws))
}

/// PKO's selector labels of a workspace's StatefulSet and pod.
pub fn selector_labels(ws: &str) -> BTreeMap<String, String> {
    [
        (
            names::AUTO_COMPONENT_LABEL.to_string(),
            names::AUTO_COMPONENT_WORKSPACE.to_string(),
        ),
        (names::WORKSPACE_NAME_LABEL.to_string(), ws.to_string()),
    ]
    .into()
}

/// What an update Job of a Workspace adds when its stack keeps a retained workspace — known
/// from `status.address`, which the Workspace controller sets once the StatefulSet exists and
/// its cache claim is bound: the cache claim mounted at `PULUMI_HOME`, and a required affinity
/// to the workspace pod's node (the claim is usually ReadWriteOnce).
pub fn retained_cache(ws: &Workspace, pod_spec: &mut Value) {
    if ws
        .status
        .as_ref()
        .and_then(|s| s.address.as_deref())
        .is_none_or(str::is_empty)
    {
        return;
    }
    let name = ws.name_any();
    if let Some(volumes) = pod_spec["volumes"].as_array_mut() {
        volumes.push(json!({"name": CACHE_VOLUME,
                            "persistentVolumeClaim": {"claimName": cache_claim_name(&name)}}));
    }
    add_cache_mount(pod_spec);
    let term = json!({"labelSelector": {"matchLabels": selector_labels(&name)},
                      "topologyKey": "kubernetes.io/hostname"});
    crate::merge::merge(
        pod_spec,
        &json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}),
    );
}

pub fn add_cache_mount(pod_spec: &mut Value) {
    let mount = json!({"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT_PATH});
    if let Some(containers) = pod_spec["containers"].as_array_mut() {
        for c in containers
            .iter_mut()
            .filter(|c| c["name"] == names::PULUMI_CONTAINER)
        {
            match c["volumeMounts"].as_array_mut() {
                Some(m) if !m.iter().any(|x| x["mountPath"] == CACHE_MOUNT_PATH) => {
                    m.push(mount.clone())
                }
                Some(_) => {}
                None => c["volumeMounts"] = json!([mount.clone()]),
            }
        }
    }
}
