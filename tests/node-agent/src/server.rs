//! The kubelet's HTTPS endpoint as far as the apiserver needs it: `/containerLogs` (so that
//! `kubectl logs` works), `/exec` (so that `kubectl exec` works, see `exec.rs`) and `/healthz`.

use crate::pods::{Agent, PodHandle};
use crate::process::parse_record;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;
use tracing::warn;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LogQuery {
    follow: Option<bool>,
    previous: Option<bool>,
    timestamps: Option<bool>,
    tail_lines: Option<i64>,
    limit_bytes: Option<i64>,
    since_seconds: Option<i64>,
    since_time: Option<String>,
}

pub async fn serve(
    agent: Arc<Agent>,
    listener: TcpListener,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<()> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("no private key in {}: {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let app = Router::new()
        .route("/containerLogs/{ns}/{pod}/{container}", get(logs))
        .route("/exec/{ns}/{pod}/{container}", get(crate::exec::handler))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(agent);
    loop {
        let (tcp, _) = listener.accept().await?;
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    warn!("TLS handshake failed: {e}");
                    return;
                }
            };
            let service = TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

fn error(code: StatusCode, message: String) -> Response {
    (code, message).into_response()
}

async fn logs(
    State(agent): State<Arc<Agent>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(q): Query<LogQuery>,
) -> Response {
    let Some(handle) = agent.find(&ns, &pod) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("pod {ns}/{pod} is not running on this node"),
        );
    };
    let Some((restart, running)) = handle.container_log(&container) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("container {container} is not valid for pod {pod}"),
        );
    };
    let previous = q.previous == Some(true);
    let n = if previous {
        if restart == 0 {
            return error(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container \"{container}\" in pod \"{pod}\" not found"),
            );
        }
        restart - 1
    } else {
        restart
    };
    let path = handle.log_path(&container, n);
    let data = std::fs::read(&path).unwrap_or_default();
    let since = since_cutoff(&q);
    let timestamps = q.timestamps == Some(true);
    let complete = data.rfind_newline();
    let mut records: Vec<Vec<u8>> = data[..complete]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| render(l, timestamps, since.as_deref()))
        .collect();
    if let Some(tail) = q.tail_lines.filter(|t| *t >= 0) {
        let skip = records.len().saturating_sub(tail as usize);
        records.drain(..skip);
    }
    let mut first: Vec<u8> = records.concat();
    let follow = q.follow == Some(true) && !previous && running;
    if !follow {
        if let Some(limit) = q.limit_bytes.filter(|l| *l >= 0) {
            first.truncate(limit as usize);
        }
        return Response::new(Body::from(first));
    }
    let state = Follow {
        handle,
        container,
        restart: n,
        path,
        offset: complete as u64,
        partial: Vec::new(),
        timestamps,
        first: Some(first),
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        let chunk = s.next().await?;
        Some((Ok::<_, std::io::Error>(chunk), s))
    });
    Response::new(Body::from_stream(stream))
}

trait RfindNewline {
    fn rfind_newline(&self) -> usize;
}
impl RfindNewline for Vec<u8> {
    /// Length of the prefix that ends with the last complete line.
    fn rfind_newline(&self) -> usize {
        self.iter()
            .rposition(|b| *b == b'\n')
            .map(|i| i + 1)
            .unwrap_or(0)
    }
}

fn since_cutoff(q: &LogQuery) -> Option<String> {
    if let Some(t) = &q.since_time {
        return Some(t.clone());
    }
    q.since_seconds.map(|s| {
        (chrono::Utc::now() - chrono::Duration::seconds(s))
            .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
    })
}

fn render(line: &[u8], timestamps: bool, since: Option<&str>) -> Option<Vec<u8>> {
    let r = parse_record(line)?;
    if let Some(since) = since {
        let ts = chrono::DateTime::parse_from_rfc3339(r.timestamp).ok()?;
        let cut = chrono::DateTime::parse_from_rfc3339(since).ok()?;
        if ts < cut {
            return None;
        }
    }
    let mut out = Vec::with_capacity(r.content.len() + 40);
    if timestamps {
        out.extend_from_slice(r.timestamp.as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(r.content);
    out.push(b'\n');
    Some(out)
}

struct Follow {
    handle: Arc<PodHandle>,
    container: String,
    restart: i32,
    path: std::path::PathBuf,
    offset: u64,
    partial: Vec<u8>,
    timestamps: bool,
    first: Option<Vec<u8>>,
    done: bool,
}

impl Follow {
    fn still_running(&self) -> bool {
        matches!(self.handle.container_log(&self.container), Some((r, true)) if r == self.restart)
    }

    fn read_new(&mut self) -> Vec<u8> {
        use std::io::{Read, Seek, SeekFrom};
        let mut buf = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&self.path) {
            if f.seek(SeekFrom::Start(self.offset)).is_ok() {
                let _ = f.read_to_end(&mut buf);
            }
        }
        self.offset += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let complete = self.partial.rfind_newline();
        let lines: Vec<u8> = self.partial[..complete]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| render(l, self.timestamps, None))
            .collect::<Vec<_>>()
            .concat();
        self.partial.drain(..complete);
        lines
    }

    async fn next(&mut self) -> Option<Vec<u8>> {
        if let Some(first) = self.first.take() {
            if !first.is_empty() {
                return Some(first);
            }
        }
        loop {
            if self.done {
                return None;
            }
            let running = self.still_running();
            let chunk = self.read_new();
            if !running {
                self.done = true;
            }
            if !chunk.is_empty() {
                return Some(chunk);
            }
            if !self.done {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
