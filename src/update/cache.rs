//! What the update Jobs of a stack and its retained workspace (`workspaceReclaimPolicy:
//! Retain`) share: the names of the retained workspace's objects, and the cache claim that a
//! Job mounts at `PULUMI_HOME` next to the workspace pod. Both the Job builder
//! (`crate::update::job`) and the StatefulSet builder (`super::statefulset`) use it; neither
//! depends on the other's module for it.

use k8s_openapi::api::core::v1::{
    Affinity, PersistentVolumeClaimVolumeSource, PodAffinity, PodAffinityTerm, PodSpec, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use pulumi_operator_api::names;
use pulumi_operator_api::Workspace;
use serde_json::Value;
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
pub fn retained_cache(ws: &Workspace, pod_spec: &mut PodSpec) {
    if !mounts_retained_cache(ws) {
        return;
    }
    let name = ws.name_any();
    if let Some(volumes) = pod_spec.volumes.as_mut() {
        volumes.push(Volume {
            name: CACHE_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: cache_claim_name(&name),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    add_cache_mount(pod_spec);
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(selector_labels(&name)),
            match_expressions: None,
        }),
        topology_key: "kubernetes.io/hostname".into(),
        ..Default::default()
    };
    let affinity = pod_spec.affinity.get_or_insert_with(Affinity::default);
    affinity
        .pod_affinity
        .get_or_insert_with(PodAffinity::default)
        .required_during_scheduling_ignored_during_execution = Some(vec![term]);
}

pub fn add_cache_mount(pod_spec: &mut PodSpec) {
    add_pulumi_mount(pod_spec, CACHE_VOLUME, CACHE_MOUNT_PATH);
}

/// Mounts volume `name` at `path` in the `pulumi` container, unless something is mounted there.
fn add_pulumi_mount(pod_spec: &mut PodSpec, name: &str, path: &str) {
    for c in pod_spec
        .containers
        .iter_mut()
        .filter(|c| c.name == names::PULUMI_CONTAINER)
    {
        let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
        if !mounts.iter().any(|m| m.mount_path == path) {
            mounts.push(VolumeMount {
                name: name.into(),
                mount_path: path.into(),
                ..Default::default()
            });
        }
    }
}

/// A volume of this name in the workspace template (`podTemplate.spec.volumes`), usually a
/// PersistentVolumeClaim the administrator provides, holds the program's installed
/// dependencies and the package managers' downloads for every operation of the Stack: it is
/// mounted at [`DEPENDENCY_CACHE_MOUNT_PATH`] in the `pulumi` container.
pub const DEPENDENCY_CACHE_VOLUME: &str = "dependency-cache";
pub const DEPENDENCY_CACHE_MOUNT_PATH: &str = "/dependency-cache";
/// Where a retained workspace's cache claim keeps them when no such volume is named.
pub const RETAINED_DEPENDENCY_CACHE: &str = "/share/.pulumi/dependencies";

fn names_dependency_cache_volume(ws: &Workspace) -> bool {
    ws.spec
        .pod_template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v["name"] == DEPENDENCY_CACHE_VOLUME))
}

/// Where an operation of this Workspace keeps dependencies between operations, if anywhere:
/// the workspace template's `dependency-cache` volume, else a retained workspace's cache
/// (`retained`: the Job mounts the cache claim, see [`retained_cache`]).
pub fn dependency_cache_dir(ws: &Workspace, retained: bool) -> Option<String> {
    if names_dependency_cache_volume(ws) {
        Some(DEPENDENCY_CACHE_MOUNT_PATH.to_string())
    } else if retained {
        Some(RETAINED_DEPENDENCY_CACHE.to_string())
    } else {
        None
    }
}

/// Whether a Job of this Workspace mounts the retained workspace's cache claim.
pub fn mounts_retained_cache(ws: &Workspace) -> bool {
    ws.status
        .as_ref()
        .and_then(|s| s.address.as_deref())
        .is_some_and(|a| !a.is_empty())
}

/// Mounts the pod's `dependency-cache` volume, when it has one, in the `pulumi` container.
pub fn add_dependency_cache_mount(pod_spec: &mut PodSpec) {
    let named = pod_spec
        .volumes
        .iter()
        .flatten()
        .any(|v| v.name == DEPENDENCY_CACHE_VOLUME);
    if named {
        add_pulumi_mount(
            pod_spec,
            DEPENDENCY_CACHE_VOLUME,
            DEPENDENCY_CACHE_MOUNT_PATH,
        );
    }
}
