//! An operation's pod as `logs` needs it: the newest pod of the Job, its containers in the
//! order they run, and whether a container has started (so that its log can be read).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;

/// Where a container stands, for reading its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Running or finished: it has a log.
    Started,
    /// Not started yet, with the kubelet's reason (`PodInitializing`, `ImagePullBackOff`).
    Waiting(String),
    /// The pod has no such container.
    Missing,
}

/// The newest pod (by creation; the Job may have made more than one).
pub fn newest(pods: &[Pod]) -> Option<&Pod> {
    pods.iter().max_by_key(|p| {
        (
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.name_any(),
        )
    })
}

/// The pod's containers in the order they run: init containers first.
pub fn containers(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.name.clone())
        .collect()
}

fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let status = pod.status.as_ref();
    let init = status.and_then(|s| s.init_container_statuses.as_ref());
    let main = status.and_then(|s| s.container_statuses.as_ref());
    init.into_iter().flatten().chain(main.into_iter().flatten())
}

/// Whether the container `name` has started.
pub fn phase(pod: &Pod, name: &str) -> Phase {
    if !containers(pod).iter().any(|c| c == name) {
        return Phase::Missing;
    }
    let Some(state) = statuses(pod)
        .find(|c| c.name == name)
        .and_then(|c| c.state.as_ref())
    else {
        return Phase::Waiting("Pending".into());
    };
    if state.running.is_some() || state.terminated.is_some() {
        return Phase::Started;
    }
    let reason = state
        .waiting
        .as_ref()
        .and_then(|w| w.reason.clone())
        .unwrap_or_default();
    Phase::Waiting(if reason.is_empty() {
        "Pending".into()
    } else {
        reason
    })
}

/// Whether the pod has ended (Succeeded or Failed): nothing more will start.
pub fn ended(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, created: &str, statuses: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"initContainers": [{"name": "bootstrap"}, {"name": "fetch"}],
                     "containers": [{"name": "pulumi"}]},
            "status": statuses,
        }))
        .expect("a pod")
    }

    #[test]
    fn containers_run_in_order_and_start_one_by_one() {
        let p = pod(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"phase": "Pending",
            "initContainerStatuses": [
                {"name": "bootstrap", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0}}},
                {"name": "fetch", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"running": {}}}],
            "containerStatuses": [{"name": "pulumi", "image": "", "imageID": "", "ready": false,
                 "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}),
        );
        assert_eq!(containers(&p), ["bootstrap", "fetch", "pulumi"]);
        assert_eq!(phase(&p, "bootstrap"), Phase::Started);
        assert_eq!(phase(&p, "fetch"), Phase::Started);
        assert_eq!(
            phase(&p, "pulumi"),
            Phase::Waiting("PodInitializing".into())
        );
        assert_eq!(phase(&p, "nope"), Phase::Missing);
        assert!(!ended(&p));
    }

    #[test]
    fn the_newest_pod_is_read() {
        let old = pod("old", "2026-01-01T00:00:00Z", json!({"phase": "Failed"}));
        let new = pod("new", "2026-01-01T00:01:00Z", json!({}));
        assert_eq!(
            newest(&[old.clone(), new]).map(|p| p.name_any()).as_deref(),
            Some("new")
        );
        assert!(ended(&old));
        assert_eq!(phase(&old, "pulumi"), Phase::Waiting("Pending".into()));
        assert!(newest(&[]).is_none());
    }
}
