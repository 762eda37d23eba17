//! `kubectl exec` as the kubelet serves it: the apiserver proxies the client's WebSocket to
//! `/exec/{ns}/{pod}/{container}?command=…&input=1&output=1&error=1[&tty=1]`, and each binary
//! message carries one channel byte — 0 stdin, 1 stdout, 2 stderr, 3 the final `Status` (JSON),
//! 4 terminal resize — followed by data. Subprotocol `v5.channel.k8s.io` adds channel 255
//! ("close": the client's stdin ended); `v4.channel.k8s.io` is accepted too.
//!
//! The command runs inside the container: it joins the container's mount namespace
//! (`setns` on `/proc/<pid>/ns/mnt`, what `nsenter --target <pid> --mount` does), takes the
//! container's uid/gid, environment and working directory, and gets its own session so that
//! it (and what it starts) can be stopped with the container. With `tty=1` it runs on a
//! pseudo-terminal (stdout carries the terminal output, channel 4 resizes it).

use crate::pods::{Agent, PodHandle};
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::info;

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const STATUS: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5.channel.k8s.io: `[255, n]` closes channel n (the client's stdin reached its end).
pub const CLOSE: u8 = 255;

/// Subprotocols we speak, preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// How a container's processes run, recorded when it starts: what an exec'd command inherits.
#[derive(Debug, Clone)]
pub struct ExecContext {
    /// The container's main process (its mount namespace is the container's).
    pub pid: i32,
    pub env: Vec<(String, String)>,
    pub uid: u32,
    pub gid: u32,
    pub working_dir: Option<String>,
}

/// The query of an exec request.
#[derive(Debug, Default, PartialEq)]
pub struct ExecQuery {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

fn truthy(v: &str) -> bool {
    matches!(v, "1" | "true" | "True" | "TRUE")
}

/// Parses the query string the apiserver forwards (Go's `url.Values` encoding: repeated
/// `command` keys, `+` for spaces, percent escapes).
pub fn parse_query(raw: &str) -> ExecQuery {
    let mut q = ExecQuery::default();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k), decode(v));
        match k.as_str() {
            "command" => q.command.push(v),
            "input" | "stdin" => q.stdin = truthy(&v),
            "output" | "stdout" => q.stdout = truthy(&v),
            "error" | "stderr" => q.stderr = truthy(&v),
            "tty" => q.tty = truthy(&v),
            _ => {}
        }
    }
    q
}

fn decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `Status` sent on channel 3 when the command ends.
pub fn status_json(exit_code: i32, command: &[String]) -> String {
    if exit_code == 0 {
        return r#"{"metadata":{},"status":"Success"}"#.to_string();
    }
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {exit_code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": exit_code.to_string()}]},
    })
    .to_string()
}

/// A close frame with status 1000: client-go reads a close without a status (1005) as an error.
fn normal_close() -> Message {
    Message::Close(Some(axum::extract::ws::CloseFrame {
        code: axum::extract::ws::close_code::NORMAL,
        reason: "".into(),
    }))
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(Bytes::from(v))
}

/// The HTTP handler: checks the pod and container, then upgrades to a WebSocket.
pub async fn handler(
    State(agent): State<Arc<Agent>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    RawQuery(raw): RawQuery,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let q = parse_query(raw.as_deref().unwrap_or(""));
    let Ok(ws) = ws else {
        return (
            StatusCode::BAD_REQUEST,
            "the test node agent serves exec over WebSocket only (v5.channel.k8s.io or v4.channel.k8s.io)",
        )
            .into_response();
    };
    if q.command.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 command",
        )
            .into_response();
    }
    let Some(handle) = agent.find(&ns, &pod) else {
        return (
            StatusCode::NOT_FOUND,
            format!("pod {ns}/{pod} is not running on this node"),
        )
            .into_response();
    };
    let Some(ctx) = handle.exec_context(&container) else {
        return (
            StatusCode::BAD_REQUEST,
            format!("container {container} is not running in pod {pod}"),
        )
            .into_response();
    };
    info!(pod = %format!("{ns}/{pod}"), container, command = ?q.command, tty = q.tty, "exec");
    ws.protocols(PROTOCOLS)
        .on_upgrade(move |socket| session(socket, handle, container, ctx, q))
}

/// Whether the container still runs the process the exec joined.
fn container_alive(handle: &PodHandle, container: &str, pid: i32) -> bool {
    handle.exec_context(container).is_some_and(|c| c.pid == pid)
}

async fn session(
    socket: WebSocket,
    handle: Arc<PodHandle>,
    container: String,
    ctx: Arc<ExecContext>,
    q: ExecQuery,
) {
    use futures::{SinkExt, StreamExt};
    let (mut sink, mut stream) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(64);
    // One writer task owns the socket's sink.
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            let close = matches!(m, Message::Close(_));
            if sink.send(m).await.is_err() || close {
                break;
            }
        }
        let _ = sink.close().await;
    });

    let spawned = if q.tty {
        spawn_tty(&ctx, &q.command)
    } else {
        spawn_piped(&ctx, &q.command, &q)
    };
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let msg = format!(
                "exec: {:?}: {}\n",
                q.command[0],
                if code == 127 {
                    "executable file not found in $PATH".to_string()
                } else {
                    e.to_string()
                }
            );
            let _ = out_tx
                .send(frame(if q.tty { STDOUT } else { STDERR }, msg.as_bytes()))
                .await;
            let _ = out_tx
                .send(frame(STATUS, status_json(code, &q.command).as_bytes()))
                .await;
            let _ = out_tx.send(normal_close()).await;
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    };
    let pgid = child.pid;

    // Output pumps.
    let mut pumps = Vec::new();
    for (channel, reader) in child.outputs.drain(..) {
        let tx = out_tx.clone();
        pumps.push(tokio::spawn(pump(reader, channel, tx)));
    }

    // Input: stdin data, close, resize.
    let mut stdin = child.stdin.take();
    let resize_fd = child.pty_master;
    let input = tokio::spawn(async move {
        while let Some(Ok(msg)) = stream.next().await {
            let data: Bytes = match msg {
                Message::Binary(b) => b,
                Message::Text(t) => Bytes::copy_from_slice(t.as_str().as_bytes()),
                Message::Close(_) => break,
                _ => continue,
            };
            let Some((&channel, rest)) = data.split_first() else {
                continue;
            };
            match channel {
                STDIN => {
                    if let Some(w) = stdin.as_mut() {
                        if w.write_all(rest).await.is_err() || w.flush().await.is_err() {
                            stdin = None;
                        }
                    }
                }
                RESIZE => {
                    if let Some(fd) = resize_fd {
                        resize(fd, rest);
                    }
                }
                CLOSE if rest.first() == Some(&STDIN) => {
                    if let Some(mut w) = stdin.take() {
                        let _ = w.shutdown().await;
                    }
                }
                _ => {}
            }
        }
        // The client went away or closed: no more input.
        drop(stdin);
    });
    let client_gone = {
        let input = &input;
        async move {
            while !input.is_finished() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    tokio::pin!(client_gone);
    let mut gone = false;

    // Wait for the command, or for the container to stop (its exec'd processes stop with it).
    let pid = ctx.pid;
    let status = loop {
        tokio::select! {
            s = child.process.wait() => break s.ok(),
            // The client disconnected (e.g. ^C in kubectl): stop the command.
            _ = &mut client_gone, if !gone => {
                gone = true;
                crate::process::signal(pgid, libc::SIGKILL, true);
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                if !container_alive(&handle, &container, pid) {
                    crate::process::signal(pgid, libc::SIGKILL, true);
                }
            }
        }
    };
    let exit_code = match status {
        Some(s) => {
            use std::os::unix::process::ExitStatusExt;
            s.code()
                .or_else(|| s.signal().map(|sig| 128 + sig))
                .unwrap_or(255)
        }
        None => 255,
    };
    // Drain what the command wrote (a process it left behind may hold the pipe: bounded wait).
    for p in pumps {
        let _ = tokio::time::timeout(Duration::from_secs(2), p).await;
    }
    let _ = out_tx
        .send(frame(STATUS, status_json(exit_code, &q.command).as_bytes()))
        .await;
    let _ = out_tx.send(normal_close()).await;
    drop(out_tx);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    input.abort();
    if let Some(fd) = child.pty_master {
        // SAFETY: the master fd is ours and no longer used by the pumps.
        unsafe { libc::close(fd) };
    }
    // Nothing the command started outlives its session.
    crate::process::signal(pgid, libc::SIGKILL, true);
}

async fn pump(
    mut reader: Box<dyn AsyncRead + Send + Unpin>,
    channel: u8,
    tx: mpsc::Sender<Message>,
) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(frame(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A `{"Width":W,"Height":H}` resize message applied to the terminal.
fn resize(master: i32, data: &[u8]) {
    #[derive(serde::Deserialize)]
    struct Size {
        #[serde(rename = "Width")]
        width: u16,
        #[serde(rename = "Height")]
        height: u16,
    }
    let Ok(size) = serde_json::from_slice::<Size>(data) else {
        return;
    };
    let ws = libc::winsize {
        ws_row: size.height,
        ws_col: size.width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ with a valid winsize on a pty master we own.
    unsafe {
        libc::ioctl(master, libc::TIOCSWINSZ, &ws);
    }
}

struct Spawned {
    process: tokio::process::Child,
    /// The session (and process group) id of the command.
    pid: i32,
    stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    outputs: Vec<(u8, Box<dyn AsyncRead + Send + Unpin>)>,
    pty_master: Option<i32>,
}

fn cstr(s: &str) -> std::io::Result<CString> {
    CString::new(s).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

/// A command that enters the container (mount namespace, credentials, working directory) in
/// its own session before it executes.
fn command(
    ctx: &ExecContext,
    argv: &[String],
    tty: bool,
) -> std::io::Result<tokio::process::Command> {
    let ns = std::fs::File::open(format!("/proc/{}/ns/mnt", ctx.pid))?;
    let ns_fd = ns.as_raw_fd();
    let dir = cstr(ctx.working_dir.as_deref().unwrap_or("/"))?;
    let root = cstr("/")?;
    let (uid, gid) = (ctx.uid, ctx.gid);
    // The program is looked up on the container's PATH, inside its mount namespace.
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(ctx.env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(false);
    let keep = ns;
    // SAFETY: only async-signal-safe system calls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let _ = &keep;
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if tty && libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setns(ns_fd, libc::CLONE_NEWNS) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::chdir(dir.as_ptr()) == -1 && libc::chdir(root.as_ptr()) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setgroups(0, std::ptr::null()) == -1
                || libc::setgid(gid) == -1
                || libc::setuid(uid) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(cmd)
}

fn spawn_piped(ctx: &ExecContext, argv: &[String], q: &ExecQuery) -> std::io::Result<Spawned> {
    let mut cmd = command(ctx, argv, false)?;
    let pipe = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
    cmd.stdin(pipe(q.stdin))
        .stdout(pipe(q.stdout))
        .stderr(pipe(q.stderr));
    let mut process = cmd.spawn()?;
    let pid = process.id().map(|p| p as i32).unwrap_or(-1);
    let stdin = process
        .stdin
        .take()
        .map(|s| Box::new(s) as Box<dyn AsyncWrite + Send + Unpin>);
    let mut outputs: Vec<(u8, Box<dyn AsyncRead + Send + Unpin>)> = Vec::new();
    if let Some(o) = process.stdout.take() {
        outputs.push((STDOUT, Box::new(o)));
    }
    if let Some(e) = process.stderr.take() {
        outputs.push((STDERR, Box::new(e)));
    }
    Ok(Spawned {
        process,
        pid,
        stdin,
        outputs,
        pty_master: None,
    })
}

/// A pseudo-terminal pair: (master, slave).
fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: plain libc calls; every returned descriptor is checked and owned once.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if master < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let master = OwnedFd::from_raw_fd(master);
        if libc::grantpt(master.as_raw_fd()) != 0 || libc::unlockpt(master.as_raw_fd()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let slave = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if slave < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((master, OwnedFd::from_raw_fd(slave)))
    }
}

fn spawn_tty(ctx: &ExecContext, argv: &[String]) -> std::io::Result<Spawned> {
    let (master, slave) = open_pty()?;
    let mut cmd = command(ctx, argv, true)?;
    cmd.stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    let process = cmd.spawn()?;
    let pid = process.id().map(|p| p as i32).unwrap_or(-1);
    // The command's copies of the slave are gone with `cmd`; reads of the master end (EIO)
    // once every process on the terminal has closed it.
    drop(cmd);
    let raw = master.as_raw_fd();
    // SAFETY: duplicating a valid descriptor we own.
    let dup = unsafe { libc::dup(raw) };
    if dup < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let reader = tokio::fs::File::from_std(std::fs::File::from(master));
    // SAFETY: `dup` is a fresh descriptor owned only by this File.
    let writer = tokio::fs::File::from_std(unsafe { std::fs::File::from_raw_fd(dup) });
    // A separate descriptor for resizes (closed at the end of the session).
    // SAFETY: as above.
    let resize_fd = unsafe { libc::dup(dup) };
    Ok(Spawned {
        process,
        pid,
        stdin: Some(Box::new(writer)),
        outputs: vec![(STDOUT, Box::new(reader))],
        pty_master: (resize_fd >= 0).then_some(resize_fd),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubectl_queries() {
        let q =
            parse_query("command=sh&command=-c&command=echo+hi%3B+exit+3&input=1&output=1&error=1");
        assert_eq!(q.command, ["sh", "-c", "echo hi; exit 3"]);
        assert!(q.stdin && q.stdout && q.stderr && !q.tty);
        let q = parse_query("command=cat&output=1&tty=true&bad=%zz");
        assert_eq!(q.command, ["cat"]);
        assert!(q.tty && !q.stdin && !q.stderr);
        assert_eq!(decode("100%25+done%"), "100% done%");
    }

    #[test]
    fn status_carries_the_exit_code() {
        assert_eq!(status_json(0, &[]), r#"{"metadata":{},"status":"Success"}"#);
        let v: serde_json::Value = serde_json::from_str(&status_json(3, &["sh".into()])).unwrap();
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "3");
    }
}
