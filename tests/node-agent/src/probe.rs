//! Readiness probes (httpGet, tcpSocket, exec) with the kubelet's timing and thresholds.

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

pub struct Target {
    pub pid: i32,
    pub pod_ip: String,
    pub container: Container,
    pub uid_gid: Option<(u32, u32)>,
}

/// Probes until aborted, sending the readiness each time it changes (starting from not ready).
pub async fn run(p: Probe, t: Target, tx: mpsc::Sender<bool>) {
    let period = Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
    let timeout = Duration::from_secs(p.timeout_seconds.unwrap_or(1).max(1) as u64);
    let success_threshold = p.success_threshold.unwrap_or(1).max(1);
    let failure_threshold = p.failure_threshold.unwrap_or(3).max(1);
    tokio::time::sleep(Duration::from_secs(
        p.initial_delay_seconds.unwrap_or(0).max(0) as u64,
    ))
    .await;
    let (mut ready, mut successes, mut failures) = (false, 0, 0);
    loop {
        let ok = tokio::time::timeout(timeout, once(&p, &t))
            .await
            .unwrap_or(false);
        if ok {
            successes += 1;
            failures = 0;
        } else {
            failures += 1;
            successes = 0;
        }
        let next = if ok && successes >= success_threshold {
            true
        } else if !ok && failures >= failure_threshold {
            false
        } else {
            ready
        };
        if next != ready {
            ready = next;
            if tx.send(ready).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(period).await;
    }
}

fn port(t: &Target, port: &IntOrString) -> Option<u16> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).ok(),
        IntOrString::String(name) => t
            .container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

async fn once(p: &Probe, t: &Target) -> bool {
    if let Some(h) = &p.http_get {
        let Some(port) = port(t, &h.port) else {
            return false;
        };
        let host = h.host.clone().unwrap_or_else(|| t.pod_ip.clone());
        let path = h.path.clone().unwrap_or_else(|| "/".into());
        return http_get(&host, port, &path).await;
    }
    if let Some(tcp) = &p.tcp_socket {
        let Some(port) = port(t, &tcp.port) else {
            return false;
        };
        let host = tcp.host.clone().unwrap_or_else(|| t.pod_ip.clone());
        return TcpStream::connect((host.as_str(), port)).await.is_ok();
    }
    if let Some(e) = &p.exec {
        let command = e.command.clone().unwrap_or_default();
        if command.is_empty() {
            return false;
        }
        // Runs inside the container's mount namespace.
        let mut cmd = tokio::process::Command::new("nsenter");
        cmd.arg("--target").arg(t.pid.to_string()).arg("--mount");
        if let Some((uid, gid)) = t.uid_gid {
            cmd.arg(format!("--setuid={uid}"))
                .arg(format!("--setgid={gid}"));
        }
        cmd.arg("--")
            .args(&command)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        return cmd.status().await.map(|s| s.success()).unwrap_or(false);
    }
    false
}

/// A minimal HTTP/1.1 GET: success is a status code in 200..400, as for the kubelet.
async fn http_get(host: &str, port: u16, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect((host, port)).await else {
        return false;
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.20\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 16 {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    parse_status(&got).is_some_and(|c| (200..400).contains(&c))
}

fn parse_status(head: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(head).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_status_line() {
        assert_eq!(
            super::parse_status(b"HTTP/1.1 204 No Content\r\n"),
            Some(204)
        );
        assert_eq!(super::parse_status(b"garbage"), None);
    }
}
