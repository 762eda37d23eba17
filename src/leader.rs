//! Lease-based leader election: only the holder of the Lease reconciles. Losing the Lease stops
//! every reconcile at once and campaigns again (see `lead` in main.rs), so two replicas never reconcile at once.

use crate::runtime::config::Config;
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tracing::info;

pub struct Leadership {
    /// `true` while this replica holds the Lease. Dropping it releases the Lease.
    pub is_leader: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
}

impl Leadership {
    /// Gives the Lease up so that a standby takes over at once instead of after expiry.
    pub async fn release(self) {
        drop(self.is_leader);
        match tokio::time::timeout(std::time::Duration::from_secs(5), self.task).await {
            Ok(Ok(Ok(_))) => info!("leader lease released"),
            _ => tracing::warn!("could not release the leader lease; it expires by itself"),
        }
    }
}

pub async fn campaign(client: Client, config: &Config) -> anyhow::Result<Leadership> {
    let identity = config.identity();
    let duration = config.lease_seconds.max(2);
    let manager = LeaseManagerBuilder::new(client, &config.lease_name)
        .with_namespace(&config.lease_namespace)
        .with_identity(&identity)
        .with_duration(duration)
        .with_grace((duration / 3).max(1))
        .with_field_manager(crate::runtime::context::REPORTER)
        .build()
        .await?;
    info!(lease = %format!("{}/{}", config.lease_namespace, config.lease_name), %identity, "waiting for leadership");
    let (is_leader, task) = manager.watch().await;
    Ok(Leadership { is_leader, task })
}
