//! TEST STAND-IN FOR THE KUBELET. Never shipped: it exists so that the project's tests run
//! against a real kube-apiserver, etcd and kube-controller-manager on machines without a
//! container runtime.
//!
//! It registers one Ready Node, binds every unscheduled pod to it, and runs each pod's
//! containers as local processes (own session and private mount namespace, volumes
//! bind-mounted at their real paths, the pod's uid/gid), publishes pod status as the kubelet
//! does, and serves `/containerLogs` and `/exec` over TLS so that `kubectl logs` and
//! `kubectl exec` work. It also stands in for a volume provisioner: PersistentVolumeClaims get a
//! hostPath PersistentVolume under its state directory (see `pvc.rs`).

mod cgroup;
mod env;
mod exec;
mod images;
mod node;
mod pods;
mod probe;
mod process;
mod pvc;
mod server;
mod volumes;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::Arc;
use tracing::{error, info};

#[derive(Parser, Debug, Clone)]
#[command(about = "Test stand-in for the kubelet: runs pods as local processes")]
pub struct Config {
    /// Name of the Node object to register.
    #[arg(long, default_value = "local-node")]
    pub node_name: String,
    /// Address the node reports (InternalIP) and serves on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host_ip: String,
    /// Port of the kubelet endpoint (logs).
    #[arg(long)]
    pub port: u16,
    #[arg(long)]
    pub tls_cert: PathBuf,
    #[arg(long)]
    pub tls_key: PathBuf,
    /// Where pod volumes, logs and termination messages live.
    #[arg(long)]
    pub state_dir: PathBuf,
    /// JSON file mapping images to local executables (read at every container start).
    #[arg(long, env = "NODE_AGENT_IMAGE_MAP")]
    pub image_map: Option<PathBuf>,
    /// KUBERNETES_SERVICE_HOST given to pods.
    #[arg(long, default_value = "127.0.0.1")]
    pub api_host: String,
    /// KUBERNETES_SERVICE_PORT given to pods.
    #[arg(long)]
    pub api_port: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cfg = Config::parse();
    std::fs::create_dir_all(&cfg.state_dir)?;
    let client = Client::try_default().await?;
    node::register(&client, &cfg).await?;
    info!(node = %cfg.node_name, port = cfg.port, "node registered");
    node::spawn_heartbeat(cfg.clone())?;
    tokio::spawn(pvc::run(client.clone(), cfg.state_dir.clone()));

    let agent = Arc::new(pods::Agent::new(client.clone(), cfg.clone()));
    let listener = tokio::net::TcpListener::bind((cfg.host_ip.as_str(), cfg.port)).await?;
    let server_agent = agent.clone();
    let server = tokio::spawn(async move {
        if let Err(e) = server::serve(server_agent, listener, &cfg.tls_cert, &cfg.tls_key).await {
            error!("kubelet endpoint failed: {e}");
        }
    });

    let pods: Api<Pod> = Api::all(client);
    let mut events = watcher(pods, watcher::Config::default()).boxed();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => agent.observe(pod),
                Some(Ok(watcher::Event::Delete(pod))) => agent.forget(&pod),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    error!("pod watch: {e}");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                None => break,
            },
            _ = term.recv() => {
                info!("SIGTERM: stopping");
                break;
            }
        }
    }
    agent.kill_all();
    server.abort();
    Ok(())
}
