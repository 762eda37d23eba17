//! What the watch caches keep of update Jobs and their pods: only the fields the operator's
//! decisions read. These types deserialize the API server's Jobs and Pods and drop the rest
//! while decoding, so a cached Job costs a few hundred bytes instead of a full pod template
//! (k8s-openapi's `Job` is 2.6 KiB before any of its strings). Objects the operator creates
//! are still built with k8s-openapi's full types.

use k8s_openapi::api::batch::v1::JobStatus;
use k8s_openapi::api::core::v1::{ContainerState, PersistentVolumeClaimVolumeSource, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, NamespaceResourceScope, Resource};
use serde::{Deserialize, Serialize};

/// A Job as the operator reads it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CachedJob {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<CachedJobSpec>,
    pub status: Option<JobStatus>,
}

/// The parts of a Job's spec the operator reads.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedJobSpec {
    /// The operation's deadline (named in the failure message).
    pub active_deadline_seconds: Option<i64>,
    /// 0 once the operator stopped the Job.
    pub parallelism: Option<i32>,
    /// Only the claim volumes of the pod template (a retained workspace's cache).
    #[serde(default)]
    pub template: CachedPodTemplate,
}

/// A Job's pod template, reduced to its claim volumes.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CachedPodTemplate {
    pub spec: Option<CachedPodSpec>,
}

/// A pod spec reduced to the volumes that mount a claim, the node it was placed on and its
/// scheduling gates.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CachedPodSpec {
    #[serde(default, deserialize_with = "claim_volumes")]
    pub volumes: Option<Vec<ClaimVolume>>,
    /// Named when the pod is lost with its node.
    #[serde(rename = "nodeName", default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// What still holds the pod back from the scheduler (the operator's one-pod gate).
    #[serde(
        rename = "schedulingGates",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub scheduling_gates: Option<Vec<k8s_openapi::api::core::v1::PodSchedulingGate>>,
}

/// A volume that may mount a claim; other volume sources are not kept.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimVolume {
    pub name: String,
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

/// Keeps only the volumes that mount a claim.
fn claim_volumes<'de, D>(d: D) -> Result<Option<Vec<ClaimVolume>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let volumes: Option<Vec<ClaimVolume>> = Option::deserialize(d)?;
    Ok(volumes.map(|v| {
        v.into_iter()
            .filter(|v| v.persistent_volume_claim.is_some())
            .collect()
    }))
}

/// A pod as the operator reads it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct CachedPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<CachedPodSpec>,
    pub status: Option<CachedPodStatus>,
}

/// The parts of a pod's status the operator reads (why it has not started, how its
/// containers ended); addresses, QoS class, times and resource details are dropped.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    pub phase: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub conditions: Option<Vec<PodCondition>>,
    pub container_statuses: Option<Vec<CachedContainerStatus>>,
    pub init_container_statuses: Option<Vec<CachedContainerStatus>>,
}

/// A container's state as the operator reads it (k8s-openapi's `ContainerStatus` is 752
/// bytes before its strings: image, resources, mounts, user).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainerStatus {
    pub name: String,
    pub state: Option<ContainerState>,
    pub last_state: Option<Box<ContainerState>>,
}

/// The API identity of a cached type: that of the kind it decodes.
macro_rules! decodes_kind {
    ($cached:ty, $group:literal, $version:literal, $kind:literal, $plural:literal) => {
        impl Resource for $cached {
            const API_VERSION: &'static str = if $group.is_empty() {
                $version
            } else {
                concat!($group, "/", $version)
            };
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = NamespaceResourceScope;
        }

        impl Metadata for $cached {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
decodes_kind!(CachedJob, "batch", "v1", "Job", "jobs");
decodes_kind!(CachedPod, "", "v1", "Pod", "pods");

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_keeps_what_decisions_read_and_only_claim_volumes() {
        let job: CachedJob = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "u", "namespace": "n", "labels": {"a": "b"}},
            "spec": {"activeDeadlineSeconds": 60, "parallelism": 1, "backoffLimit": 0,
                     "template": {"metadata": {"labels": {"x": "y"}}, "spec": {
                         "containers": [{"name": "pulumi", "image": "runner", "env": [{"name": "A", "value": "B"}]}],
                         "volumes": [{"name": "share", "emptyDir": {}},
                                     {"name": "cache", "persistentVolumeClaim": {"claimName": "c"}}]}}},
            "status": {"active": 1}
        }))
        .unwrap();
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.active_deadline_seconds, Some(60));
        assert_eq!(spec.parallelism, Some(1));
        let volumes = spec
            .template
            .spec
            .as_ref()
            .unwrap()
            .volumes
            .as_ref()
            .unwrap();
        assert_eq!(volumes.len(), 1);
        assert_eq!(volumes[0].name, "cache");
        assert_eq!(job.status.unwrap().active, Some(1));
        assert_eq!(job.metadata.labels.unwrap()["a"], "b");
        assert_eq!(<CachedJob as Resource>::API_VERSION, "batch/v1");
        assert_eq!(<CachedPod as Resource>::API_VERSION, "v1");
        // Far smaller than k8s-openapi's Job, which holds a whole pod template inline.
        assert!(
            std::mem::size_of::<CachedJob>() * 2
                < std::mem::size_of::<k8s_openapi::api::batch::v1::Job>()
        );
    }

    #[test]
    fn a_pod_keeps_its_status() {
        let pod: CachedPod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "pulumi"}], "volumes": [{"name": "t", "emptyDir": {}}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "pulumi", "ready": true,
                        "restartCount": 0, "image": "i", "imageID": "", "state": {"running": {}}}]}
        }))
        .unwrap();
        assert_eq!(pod.spec.unwrap().volumes, Some(vec![]));
        let status = pod.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let pulumi = &status.container_statuses.unwrap()[0];
        assert_eq!(pulumi.name, "pulumi");
        assert!(pulumi.state.as_ref().unwrap().running.is_some());
        // Addresses, QoS class, images and resources are not kept.
        assert!(
            std::mem::size_of::<CachedPodStatus>() * 2
                < std::mem::size_of::<k8s_openapi::api::core::v1::PodStatus>()
        );
        assert!(
            std::mem::size_of::<CachedContainerStatus>() * 2
                < std::mem::size_of::<k8s_openapi::api::core::v1::ContainerStatus>()
        );
    }
}
