//! Running `pulumi`: its stdout and stderr pass through to the runner's, byte for byte and at
//! once, while every line is observed for classification (and the permalink); signals to the
//! runner are forwarded to Pulumi as SIGINT.

use crate::classify::{Observed, Stream};
use crate::error::Failure;
use crate::pulumi::{Invocation, BASE_ENV};
use crate::report::log;
use crate::signals::{self, Signals};
use pulumi_operator_api::plan::FailureReason;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Cap on captured stdout (`stack output`, `stack history`).
const MAX_CAPTURE: usize = 64 * 1024 * 1024;
/// Lines longer than this are observed in pieces.
const MAX_LINE: usize = 64 * 1024;

/// How one invocation ended.
#[derive(Debug)]
pub struct Outcome {
    /// The exit code; `None` when Pulumi was killed by a signal.
    pub code: Option<i32>,
    pub observed: Observed,
    /// Stdout, when the invocation captures it.
    pub stdout: Vec<u8>,
    /// The runner forwarded at least one signal while it ran.
    pub interrupted: bool,
}

impl Outcome {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs invocations of one `pulumi` binary in one directory.
#[derive(Debug, Clone)]
pub struct Runner {
    pub pulumi: PathBuf,
    pub cwd: PathBuf,
    pub signals: Signals,
}

impl Runner {
    pub fn new(pulumi: impl Into<PathBuf>, cwd: impl Into<PathBuf>, signals: Signals) -> Runner {
        Runner {
            pulumi: pulumi.into(),
            cwd: cwd.into(),
            signals,
        }
    }

    /// Runs one invocation to its end. Fails only when Pulumi cannot be started or when a
    /// signal arrived before it started.
    pub async fn run(&self, inv: &Invocation) -> Result<Outcome, Failure> {
        let seen_before = self.signals.count();
        if seen_before > 0 {
            return Err(Failure::new(
                FailureReason::Interrupted,
                format!("interrupted before {}", inv.display()),
            ));
        }
        log(format!("running {}", inv.display()));
        let mut cmd = tokio::process::Command::new(&self.pulumi);
        cmd.args(&inv.args)
            .current_dir(&self.cwd)
            .stdin(if inv.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C in a terminal reaches only the runner, which
            // forwards it once (otherwise Pulumi would see two and stop hard).
            .process_group(0)
            .kill_on_drop(false);
        for (k, v) in BASE_ENV {
            cmd.env(k, v);
        }
        // What user init containers wrote to $PULUMI_ENV; never logged (it may hold secrets).
        for (k, v) in crate::dotenv::load() {
            cmd.env(k, v);
        }
        for (k, v) in &inv.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| {
            Failure::new(
                FailureReason::UpdateFailed,
                format!("cannot run {}: {e}", self.pulumi.display()),
            )
        })?;
        let pid = child.id().unwrap_or(0);
        if let (Some(mut stdin), Some(text)) = (child.stdin.take(), inv.stdin.clone()) {
            tokio::spawn(async move {
                let _ = stdin.write_all(text.as_bytes()).await;
                let _ = stdin.shutdown().await;
            });
        }
        let out = child.stdout.take().map(|r| {
            let sink = (!inv.capture_stdout).then(tokio::io::stdout);
            tokio::spawn(pump(r, Stream::Stdout, sink, inv.capture_stdout))
        });
        let err = child
            .stderr
            .take()
            .map(|r| tokio::spawn(pump(r, Stream::Stderr, Some(tokio::io::stderr()), false)));

        let mut forwarded = 0usize;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                n = self.signals.after(forwarded) => {
                    forwarded = n;
                    if pid != 0 {
                        log(format!("sending SIGINT to pulumi (pid {pid}) and waiting for it to stop"));
                        signals::interrupt(pid);
                    }
                }
            }
        };
        let code = match status {
            Ok(s) => s.code(),
            Err(e) => {
                log(format!("cannot wait for pulumi: {e}"));
                None
            }
        };
        // Plugins that inherited the pipes may outlive Pulumi: do not wait for them forever.
        let mut observed = Observed::default();
        let mut stdout = Vec::new();
        for (i, task) in [out, err].into_iter().enumerate() {
            let Some(task) = task else { continue };
            let abort = task.abort_handle();
            match tokio::time::timeout(Duration::from_secs(10), task).await {
                Ok(Ok((seen, captured))) => {
                    observed.merge(seen);
                    if i == 0 {
                        stdout = captured;
                    }
                }
                _ => abort.abort(),
            }
        }
        signals::reap_orphans();
        Ok(Outcome {
            code,
            observed,
            stdout,
            interrupted: forwarded > 0,
        })
    }
}

/// Copies `src` to `sink` chunk by chunk (flushing each), observing lines; keeps the bytes
/// when `capture`.
async fn pump<R, W>(
    mut src: R,
    stream: Stream,
    mut sink: Option<W>,
    capture: bool,
) -> (Observed, Vec<u8>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut observed = Observed::default();
    let mut captured = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match src.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if let Some(w) = sink.as_mut() {
            if w.write_all(chunk).await.is_err() || w.flush().await.is_err() {
                // Our own stdout is gone; keep draining so that Pulumi does not block.
                sink = None;
            }
        }
        if capture && captured.len() < MAX_CAPTURE {
            captured.extend_from_slice(chunk);
        }
        for &b in chunk {
            if b == b'\n' || line.len() >= MAX_LINE {
                observed.line(stream, &String::from_utf8_lossy(&line));
                line.clear();
                if b == b'\n' {
                    continue;
                }
            }
            line.push(b);
        }
    }
    if !line.is_empty() {
        observed.line(stream, &String::from_utf8_lossy(&line));
    }
    (observed, captured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pump_passes_bytes_through_and_observes_lines() {
        let input: &[u8] = b"View Live: https://x/1\n\x1b[31merror:\x1b[0m boom\r\npartial";
        let mut sink: Vec<u8> = Vec::new();
        let (seen, captured) = pump(input, Stream::Stdout, Some(&mut sink), true).await;
        assert_eq!(sink, input);
        assert_eq!(captured, input);
        assert_eq!(seen.permalink.as_deref(), Some("https://x/1"));
        assert_eq!(seen.error_summary(), "boom");
    }
}
