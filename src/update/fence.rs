//! The bounded way forward from a pod that cannot be confirmed stopped (a node cut off from
//! the API server), without a person: the runner's self-fencing heartbeat proven by the pod's
//! own token (runner/src/token_proof.rs), and the operator's matching bound.
//!
//! Every update pod mounts a projected token of its ServiceAccount and the cluster's CA
//! ([`volume`]), and its plan tells the runner to prove the pod alive with it
//! ([`heartbeat_plan`]). The API server rejects a pod-bound token once the pod was deleted more
//! than [`TOKEN_LEEWAY`] ago (its `deletionTimestamp` is the deletion time plus the grace
//! period), and caches a successful authentication for up to [`AUTH_CACHE`]. So the runner's
//! last successful review started before deletion + grace + leeway + cache, and the runner has
//! stopped Pulumi by that + `expireAfterSeconds` + `stopGraceSeconds` (+ its 250 ms tick).
//!
//! The operator counts from the moment it first saw the pod's deletion, on its own monotonic
//! clock ([`DeletionClock`]): that moment is after the deletion, so only the clocks' rates
//! matter, never wall-clock skew between the node, the API server and the operator. Once
//! [`bound`] has passed, a pod marked [`FENCED_ANNOTATION`] that still looks alive is taken
//! as stopped (`status::with_fence_verdicts`): its operation fails and the Stack's next one may start.
//! An operator restart forgets its observations, and so only waits longer.

use crate::runtime::cached::CachedPod;
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, KeyToPath, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume,
    VolumeMount, VolumeProjection,
};
use kube::ResourceExt;
use pulumi_operator_api::plan::HeartbeatPlan;
use std::time::Duration;

/// The pod annotation saying that its runner fences itself with its token.
pub const FENCED_ANNOTATION: &str = "auto.pulumi.com/fence";
const FENCED_BY_TOKEN: &str = "token";
const VOLUME: &str = "fence";
const DIR: &str = "/var/run/pulumi-operator/fence";
/// How long the token of a deleted pod is still accepted (Kubernetes' `jwt.DefaultLeeway`).
pub const TOKEN_LEEWAY: Duration = Duration::from_secs(60);
/// How long the API server may answer a token from its cache of successful authentications.
pub const AUTH_CACHE: Duration = Duration::from_secs(10);
/// On top of the sum: the runner's tick, a slow review's timeout, clock rates.
pub const MARGIN: Duration = Duration::from_secs(30);
/// The projected token's lifetime (the kubelet refreshes it at 80%).
const TOKEN_SECONDS: i64 = 3600;

/// The runner's heartbeat for an update pod.
pub fn heartbeat_plan() -> HeartbeatPlan {
    HeartbeatPlan::of_token(format!("{DIR}/token"), format!("{DIR}/ca.crt"))
}

/// The pod's token and the cluster's CA bundle (`kube-root-ca.crt`, in every namespace).
pub fn volume() -> Volume {
    Volume {
        name: VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".into(),
                        expiration_seconds: Some(TOKEN_SECONDS),
                        audience: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..Default::default()
                },
            ]),
            default_mode: None,
        }),
        ..Default::default()
    }
}

/// The `pulumi` container's mount of [`volume`].
pub fn mount() -> VolumeMount {
    VolumeMount {
        name: VOLUME.into(),
        mount_path: DIR.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The pod template annotations that say so.
pub fn annotation() -> (String, String) {
    (FENCED_ANNOTATION.into(), FENCED_BY_TOKEN.into())
}

/// How long after its deletion was first seen a fenced pod has surely stopped Pulumi.
pub fn bound(pod: &CachedPod) -> Duration {
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .and_then(|s| u64::try_from(s).ok())
        .unwrap_or(0);
    let hb = heartbeat_plan();
    Duration::from_secs(grace + hb.expire_after_seconds + hb.stop_grace_seconds)
        + TOKEN_LEEWAY
        + AUTH_CACHE
        + MARGIN
}

/// Whether `pod` fences itself and is being deleted: the bound applies to it.
pub fn fenced_and_deleted(pod: &CachedPod) -> bool {
    pod.annotations().get(FENCED_ANNOTATION).map(String::as_str) == Some(FENCED_BY_TOKEN)
        && pod.metadata.deletion_timestamp.is_some()
}

/// Whether `pod`, deleted and first seen so `seen_for` ago, is past its fence (pure).
pub fn stopped_by_fence(pod: &CachedPod, seen_for: Option<Duration>) -> bool {
    fenced_and_deleted(pod) && seen_for.is_some_and(|d| d >= bound(pod))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(fenced: bool, deleted: bool, grace: i64) -> CachedPod {
        let mut meta = serde_json::json!({"name": "p", "uid": "u1"});
        if fenced {
            meta["annotations"] = serde_json::json!({FENCED_ANNOTATION: "token"});
        }
        if deleted {
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            meta["deletionGracePeriodSeconds"] = grace.into();
        }
        serde_json::from_value(serde_json::json!({"metadata": meta,
            "status": {"phase": "Running"}}))
        .expect("pod")
    }

    #[test]
    fn the_bound_is_the_grace_the_leeway_the_cache_the_expiry_the_stop_and_a_margin() {
        // 30 + 60 + 10 + 60 + 20 + 30.
        assert_eq!(bound(&pod(true, true, 30)), Duration::from_secs(210));
    }

    #[test]
    fn only_a_deleted_fenced_pod_past_its_bound_is_taken_as_stopped() {
        let past = Some(Duration::from_secs(211));
        assert!(stopped_by_fence(&pod(true, true, 30), past));
        assert!(!stopped_by_fence(
            &pod(true, true, 30),
            Some(Duration::from_secs(209))
        ));
        // An older operator's pod (no fence), or a pod not deleted: never by time alone.
        assert!(!stopped_by_fence(&pod(false, true, 30), past));
        assert!(!stopped_by_fence(&pod(true, false, 30), past));
        assert!(!stopped_by_fence(&pod(true, true, 30), None));
    }

    #[test]
    fn the_clock_counts_from_the_first_sight_of_the_deletion() {
        let clock = crate::runtime::deletion_clock::DeletionClock::default();
        assert_eq!(clock.seen_for(&pod(true, false, 30)), None);
        let first = clock.seen_for(&pod(true, true, 30)).expect("seen");
        assert!(first < Duration::from_secs(1));
    }
}
