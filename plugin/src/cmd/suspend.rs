//! `kubectl pulumi suspend <stack>` and `resume <stack>`: a merge patch of `spec.suspend`.

use crate::cluster::{api_error, to_viewed, Cluster, STACKS};
use crate::cmd::FIELD_MANAGER;
use crate::view::terminal::terminal_safe;
use anyhow::{bail, Result};
use kube::api::{Patch, PatchParams};

/// Sets `spec.suspend` to `suspend` and says what it means now.
pub async fn run(cluster: &Cluster, stack: &str, suspend: bool) -> Result<()> {
    cluster.stack(stack).await?;
    let patch = serde_json::json!({"spec": {"suspend": suspend}});
    let raw = cluster
        .stacks(false)
        .patch(
            stack,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|e| api_error(e, cluster.action("patch", STACKS, Some(stack))))?;
    let viewed = to_viewed(raw)?;
    if viewed.suspended != suspend {
        bail!(
            "the Stack CRD in this cluster has no spec.suspend (the API server dropped it): \
             upgrade pulumi-operator-rs and its CRDs"
        );
    }
    let running = viewed
        .stack
        .status
        .as_ref()
        .and_then(|s| s.current_update.as_ref())
        .and_then(|c| c.name.as_deref().map(|n| terminal_safe(n).into_owned()));
    let ns = &cluster.namespace;
    match (suspend, running) {
        (true, Some(op)) => println!(
            "stack {ns}/{stack} suspended: the running operation {op} finishes, no new one starts"
        ),
        (true, None) => println!("stack {ns}/{stack} suspended: no operation starts until it is resumed"),
        (false, _) => println!(
            "stack {ns}/{stack} resumed: what changed while it was suspended runs now (one operation, if any)"
        ),
    }
    Ok(())
}
