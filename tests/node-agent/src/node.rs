//! The Node object: registered Ready with the agent's kubelet endpoint, then kept fresh.

use crate::Config;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use std::time::Duration;
use tracing::warn;

fn status(cfg: &Config) -> serde_json::Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        serde_json::json!({"type": t, "status": s, "reason": reason, "message": msg,
                           "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    serde_json::json!({
        "capacity": {"cpu": cpus.to_string(), "memory": "16Gi", "pods": "250", "ephemeral-storage": "50Gi"},
        "allocatable": {"cpu": cpus.to_string(), "memory": "16Gi", "pods": "250", "ephemeral-storage": "50Gi"},
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "test node agent"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "test node agent"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "test node agent"),
            cond("Ready", "True", "KubeletReady", "test node agent (stand-in for the kubelet) is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": cfg.host_ip},
            {"type": "Hostname", "address": cfg.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": cfg.port}},
        // As a 1.36+ kubelet does: it serves exec/attach/port-forward over WebSockets itself,
        // so the apiserver proxies kubectl's WebSocket stream instead of translating it to SPDY.
        "declaredFeatures": ["ExtendWebSocketsToKubelet"],
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "",
            "kernelVersion": "", "osImage": "local processes (test node agent)",
            "containerRuntimeVersion": "local-process://0.1.0",
            "kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": std::env::consts::ARCH,
        },
    })
}

pub async fn register(client: &Client, cfg: &Config) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    if api.get_opt(&cfg.node_name).await?.is_none() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": cfg.node_name, "labels": {
                "kubernetes.io/hostname": cfg.node_name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "node-role.kubernetes.io/test-agent": ""}},
        }))?;
        api.create(&PostParams::default(), &node).await?;
    }
    update(&api, cfg).await
}

async fn update(api: &Api<Node>, cfg: &Config) -> anyhow::Result<()> {
    let patch = serde_json::json!({ "status": status(cfg) });
    api.patch_status(
        &cfg.node_name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Starts the heartbeat on a thread of its own, with its own runtime and client, as the kubelet's
/// status loop is independent of its pod work: on a loaded machine, the agent's pod work (process
/// starts, removing large pod directories) once kept the heartbeat from running for a minute, and
/// the node lifecycle controller evicted every pod.
pub fn spawn_heartbeat(cfg: Config) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("heartbeat".into())
        .spawn(move || {
            runtime.block_on(async move {
                match Client::try_default().await {
                    Ok(client) => heartbeat(client, cfg).await,
                    Err(e) => warn!("node heartbeat: no client: {e}"),
                }
            })
        })?;
    Ok(())
}

/// The node's status, posted every 5 s: the local cluster's node lifecycle controller marks the
/// node NotReady 20 s after the last one (`--node-monitor-grace-period`, tests/local-cluster.sh).
async fn heartbeat(client: Client, cfg: Config) {
    let api: Api<Node> = Api::all(client);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if let Err(e) = update(&api, &cfg).await {
            warn!("node heartbeat failed: {e}");
        }
    }
}
