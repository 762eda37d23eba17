//! STAND-IN FOR A VOLUME PROVISIONER. The test cluster has no storage driver, so PVCs (e.g.
//! those a StatefulSet creates from its `volumeClaimTemplates`) would stay `Pending` forever.
//! The agent plays an external provisioner instead: for every unbound claim it creates a
//! `hostPath` PersistentVolume, pre-bound to the claim (`spec.claimRef`), whose path is the
//! directory the agent mounts for that claim (`<state>/pvc/<namespace>/<claim>`, volumes.rs).
//! Kubernetes' own PV controller (in kube-controller-manager) then binds the pair as it would
//! any other: the claim becomes `Bound` with the volume's capacity and access modes.
//!
//! Deletion follows the external-provisioner protocol too: the volume carries
//! `pv.kubernetes.io/provisioned-by` and `persistentVolumeReclaimPolicy: Delete`, so when its
//! claim is deleted the PV controller marks it `Released` and leaves the deletion to us; the
//! agent then removes the directory and the PersistentVolume.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tracing::{info, warn};

/// The provisioner name on the volumes we create (and delete).
pub const PROVISIONER: &str = "node-agent.test/hostpath";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Label on our volumes, so that the volume watch sees only them.
pub const PROVISIONED_LABEL: &str = "node-agent.test/provisioned";
/// The size of a claim that requests none.
const DEFAULT_SIZE: &str = "1Gi";

/// The directory that backs a claim (also what volumes.rs mounts for it).
pub fn claim_dir(state_dir: &Path, namespace: &str, claim: &str) -> PathBuf {
    state_dir.join("pvc").join(namespace).join(claim)
}

/// The volume for a claim that needs one; `None` when the claim is bound, being deleted, or
/// asks for a specific volume (`spec.volumeName`).
pub fn volume_for(claim: &PersistentVolumeClaim, state_dir: &Path) -> Option<PersistentVolume> {
    let spec = claim.spec.as_ref()?;
    if claim.metadata.deletion_timestamp.is_some()
        || spec.volume_name.as_deref().is_some_and(|v| !v.is_empty())
    {
        return None;
    }
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase.is_some_and(|p| p != "Pending") {
        return None;
    }
    let ns = claim.namespace()?;
    let name = claim.name_any();
    let uid = claim.uid()?;
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| DEFAULT_SIZE.into());
    let modes = spec
        .access_modes
        .clone()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| vec!["ReadWriteOnce".into()]);
    let dir = claim_dir(state_dir, &ns, &name);
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {
            "name": format!("pvc-{uid}"),
            "labels": {PROVISIONED_LABEL: "true"},
            "annotations": {PROVISIONED_BY: PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": modes,
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.storage_class_name.clone().unwrap_or_default(),
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": ns, "name": name, "uid": uid},
            "hostPath": {"path": dir.to_string_lossy(), "type": "DirectoryOrCreate"},
        }
    }))
    .ok()
}

async fn provision(client: &Client, claim: &PersistentVolumeClaim, state_dir: &Path) {
    let Some(pv) = volume_for(claim, state_dir) else {
        return;
    };
    let ns = claim.namespace().unwrap_or_default();
    let dir = claim_dir(state_dir, &ns, &claim.name_any());
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|_| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
    }) {
        warn!(claim = %format!("{ns}/{}", claim.name_any()), "cannot create {}: {e}", dir.display());
        return;
    }
    let api: Api<PersistentVolume> = Api::all(client.clone());
    match api.create(&PostParams::default(), &pv).await {
        Ok(_) => {
            info!(claim = %format!("{ns}/{}", claim.name_any()), volume = %pv.name_any(), "provisioned")
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            warn!(claim = %format!("{ns}/{}", claim.name_any()), "cannot create the volume: {e}")
        }
    }
}

/// A released volume of ours: remove its directory, then the object.
async fn reclaim(client: &Client, pv: &PersistentVolume, state_dir: &Path) {
    let ours = pv.annotations().get(PROVISIONED_BY).map(String::as_str) == Some(PROVISIONER);
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    if !ours || !released || pv.metadata.deletion_timestamp.is_some() {
        return;
    }
    let Some(path) = pv
        .spec
        .as_ref()
        .and_then(|s| s.host_path.as_ref())
        .map(|h| PathBuf::from(&h.path))
    else {
        return;
    };
    // Only ever a directory we created, under our state directory.
    if path.starts_with(state_dir.join("pvc")) && path.exists() {
        // Off the async workers: a dependency cache is a large tree.
        let removing = path.clone();
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(removing))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = removed {
            warn!(volume = %pv.name_any(), "cannot remove {}: {e}", path.display());
            return;
        }
    }
    let api: Api<PersistentVolume> = Api::all(client.clone());
    match api.delete(&pv.name_any(), &DeleteParams::default()).await {
        Ok(_) => info!(volume = %pv.name_any(), "released volume deleted"),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => warn!(volume = %pv.name_any(), "cannot delete the released volume: {e}"),
    }
}

/// Watches claims and our volumes until the process ends.
pub async fn run(client: Client, state_dir: PathBuf) {
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let mut claim_events = watcher(claims, watcher::Config::default()).boxed();
    let mut volume_events = watcher(
        volumes,
        watcher::Config::default().labels(&format!("{PROVISIONED_LABEL}=true")),
    )
    .boxed();
    loop {
        tokio::select! {
            ev = claim_events.next() => match ev {
                Some(Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))) => {
                    provision(&client, &c, &state_dir).await
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    warn!("claim watch: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => return,
            },
            ev = volume_events.next() => match ev {
                Some(Ok(watcher::Event::Apply(v) | watcher::Event::InitApply(v))) => {
                    reclaim(&client, &v, &state_dir).await
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    warn!("volume watch: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(extra: serde_json::Value) -> PersistentVolumeClaim {
        let mut v = serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "cache-ws-0", "namespace": "apps", "uid": "u-1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
            "status": {"phase": "Pending"},
        });
        if let (Some(base), Some(more)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in more {
                base.insert(k.clone(), x.clone());
            }
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_pending_claim_gets_a_prebound_hostpath_volume() {
        let pv = volume_for(&claim(serde_json::json!({})), Path::new("/state")).unwrap();
        let v = serde_json::to_value(&pv).unwrap();
        assert_eq!(v["metadata"]["name"], "pvc-u-1");
        assert_eq!(v["metadata"]["annotations"][PROVISIONED_BY], PROVISIONER);
        assert_eq!(v["spec"]["capacity"]["storage"], "2Gi");
        assert_eq!(v["spec"]["accessModes"][0], "ReadWriteOnce");
        assert_eq!(v["spec"]["storageClassName"], "");
        assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(v["spec"]["claimRef"]["uid"], "u-1");
        assert_eq!(v["spec"]["claimRef"]["namespace"], "apps");
        assert_eq!(v["spec"]["hostPath"]["path"], "/state/pvc/apps/cache-ws-0");
    }

    #[test]
    fn bound_or_prebound_claims_are_left_alone() {
        let bound = claim(serde_json::json!({"status": {"phase": "Bound"}}));
        assert!(volume_for(&bound, Path::new("/s")).is_none());
        let pre = claim(serde_json::json!({"spec": {"volumeName": "mine"}}));
        assert!(volume_for(&pre, Path::new("/s")).is_none());
        let no_size = claim(serde_json::json!({"spec": {}}));
        let v = serde_json::to_value(volume_for(&no_size, Path::new("/s")).unwrap()).unwrap();
        assert_eq!(v["spec"]["capacity"]["storage"], "1Gi");
        assert_eq!(v["spec"]["accessModes"][0], "ReadWriteOnce");
    }
}
