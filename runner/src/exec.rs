//! Running `pulumi`: its stdout and stderr pass through to the runner's line by line, with
//! known secret values masked (`crate::redact`), while every line is observed for
//! classification (and the permalink); signals to the runner are forwarded to Pulumi as
//! SIGINT.

use crate::classify::{Observed, Stream};
use crate::error::Failure;
use crate::heartbeat::Fence;
use crate::pulumi::{Invocation, BASE_ENV};
use crate::redact::{mask_bytes, Redactor};
use crate::report::log;
use crate::signals::{self, Signals};
use pulumi_operator_api::plan::FailureReason;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Cap on captured stdout (`stack output`, `stack history`).
pub const MAX_CAPTURE: usize = 64 * 1024 * 1024;
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
    /// Environment for every invocation (the dependency cache's download directories); the
    /// user's `$PULUMI_ENV` and the invocation's own variables come after it.
    pub env: Vec<(String, String)>,
    /// The operation's heartbeat (`crate::heartbeat`): commands start through it, so that its
    /// watchdog can stop them, and none starts once it stopped Pulumi.
    pub fence: Option<Arc<Fence>>,
    /// The PATH of every invocation, over `$PULUMI_ENV`'s (see [`crate::policy::cli`]).
    pub fixed_path: Option<std::ffi::OsString>,
}

impl Runner {
    pub fn new(pulumi: impl Into<PathBuf>, cwd: impl Into<PathBuf>, signals: Signals) -> Runner {
        Runner {
            pulumi: pulumi.into(),
            cwd: cwd.into(),
            signals,
            env: Vec::new(),
            fence: None,
            fixed_path: None,
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
        let mut child = self.spawn(inv)?;
        let pid = child.id().unwrap_or(0);
        if let (Some(mut stdin), Some(text)) = (child.stdin.take(), inv.stdin.clone()) {
            tokio::spawn(async move {
                let _ = stdin.write_all(text.as_bytes()).await;
                let _ = stdin.shutdown().await;
            });
        }
        let pumps = start_pumps(&mut child, inv);
        let (code, forwarded) = self.wait_forwarding_signals(&mut child, pid).await;
        // Stopped by the heartbeat's watchdog (`crate::heartbeat`): interrupted too.
        let fenced = self.fence.as_ref().is_some_and(|fence| {
            fence.exited(pid);
            fence.fenced().is_some()
        });
        let (observed, stdout) = finish_pumps(pumps).await;
        signals::reap_orphans();
        Ok(Outcome {
            code,
            observed,
            stdout,
            interrupted: forwarded > 0 || fenced,
        })
    }

    /// Starts `inv` (through the heartbeat's fence when the operation has one).
    fn spawn(&self, inv: &Invocation) -> Result<tokio::process::Child, Failure> {
        let start = || {
            self.command(inv).spawn().map_err(|e| {
                Failure::new(
                    FailureReason::UpdateFailed,
                    format!("cannot run {}: {e}", self.pulumi.display()),
                )
            })
        };
        match &self.fence {
            Some(fence) => fence.spawn(start, tokio::process::Child::id),
            None => start(),
        }
    }

    /// The command for `inv`: in the runner's directory, its own process group, piped
    /// output, and the environment in layers ([`BASE_ENV`], the runner's, `$PULUMI_ENV`, the
    /// invocation's).
    fn command(&self, inv: &Invocation) -> tokio::process::Command {
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
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // What user init containers wrote to $PULUMI_ENV; never logged (it may hold secrets).
        for (k, v) in crate::dotenv::load() {
            cmd.env(k, v);
        }
        for (k, v) in &inv.env {
            cmd.env(k, v);
        }
        if let Some(path) = &self.fixed_path {
            cmd.env("PATH", path);
        }
        cmd
    }

    /// Waits for Pulumi to exit, forwarding each signal the runner gets as SIGINT; returns
    /// its exit code and how many signals were forwarded.
    async fn wait_forwarding_signals(
        &self,
        child: &mut tokio::process::Child,
        pid: u32,
    ) -> (Option<i32>, usize) {
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
        (code, forwarded)
    }
}

type Pump = tokio::task::JoinHandle<(Observed, Vec<u8>)>;

/// Starts the tasks that pass Pulumi's stdout and stderr through the current redactor.
fn start_pumps(child: &mut tokio::process::Child, inv: &Invocation) -> [Option<Pump>; 2] {
    let redactor = crate::redact::current();
    let out = child.stdout.take().map(|r| {
        let sink = (!inv.capture_stdout).then(tokio::io::stdout);
        tokio::spawn(pump(
            r,
            Stream::Stdout,
            sink,
            inv.capture_stdout,
            Arc::clone(&redactor),
        ))
    });
    let err = child.stderr.take().map(|r| {
        tokio::spawn(pump(
            r,
            Stream::Stderr,
            Some(tokio::io::stderr()),
            false,
            Arc::clone(&redactor),
        ))
    });
    [out, err]
}

/// What the pumps observed, and the captured stdout. Plugins that inherited the pipes may
/// outlive Pulumi: a pump is not waited for more than 10 seconds.
async fn finish_pumps(pumps: [Option<Pump>; 2]) -> (Observed, Vec<u8>) {
    let mut observed = Observed::default();
    let mut stdout = Vec::new();
    for (i, task) in pumps.into_iter().enumerate() {
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
    (observed, stdout)
}

/// Copies `src` to `sink` line by line, masked with `redactor` (flushing after each read),
/// observing the masked lines; keeps the raw bytes when `capture` (captured stdout is parsed,
/// never printed). Masking works on complete lines so that a secret split across two reads is
/// still recognised; a line longer than [`MAX_LINE`] is let go in pieces cut where no secret
/// can be split ([`Redactor::safe_prefix`]).
async fn pump<R, W>(
    mut src: R,
    stream: Stream,
    mut sink: Option<W>,
    capture: bool,
    redactor: Arc<Redactor>,
) -> (Observed, Vec<u8>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut observed = Observed::default();
    let mut captured = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match src.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if capture && captured.len() < MAX_CAPTURE {
            captured.extend_from_slice(chunk);
        }
        // Only the new bytes can end a line: the pending ones were searched before.
        let mut searched = pending.len();
        pending.extend_from_slice(chunk);
        let mut ready: Vec<u8> = Vec::new();
        let mut line_start = 0;
        while let Some(offset) = pending[searched..].iter().position(|&b| b == b'\n') {
            let end = searched + offset;
            let line = mask_bytes(&redactor, &pending[line_start..end]);
            observed.line(stream, &String::from_utf8_lossy(&line));
            ready.extend_from_slice(&line);
            ready.push(b'\n');
            line_start = end + 1;
            searched = line_start;
        }
        pending.drain(..line_start);
        if pending.len() >= MAX_LINE {
            let cut = redactor.safe_prefix(&pending);
            if cut > 0 {
                let piece = mask_bytes(&redactor, &pending[..cut]);
                observed.line(stream, &String::from_utf8_lossy(&piece));
                ready.extend_from_slice(&piece);
                pending.drain(..cut);
            }
        }
        if let Some(w) = sink.as_mut() {
            if !ready.is_empty() && (w.write_all(&ready).await.is_err() || w.flush().await.is_err())
            {
                // Our own stdout is gone; keep draining so that Pulumi does not block.
                sink = None;
            }
        }
    }
    if !pending.is_empty() {
        let line = mask_bytes(&redactor, &pending);
        observed.line(stream, &String::from_utf8_lossy(&line));
        if let Some(w) = sink.as_mut() {
            let _ = w.write_all(&line).await;
            let _ = w.flush().await;
        }
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
        let (seen, captured) = pump(
            input,
            Stream::Stdout,
            Some(&mut sink),
            true,
            Arc::new(Redactor::default()),
        )
        .await;
        assert_eq!(sink, input);
        assert_eq!(captured, input);
        assert_eq!(seen.permalink.as_deref(), Some("https://x/1"));
        assert_eq!(seen.error_summary(), "boom");
    }

    /// Reads one byte at a time: every secret spans read boundaries.
    struct Trickle<'a>(&'a [u8]);

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some((first, rest)) = self.0.split_first() {
                buf.put_slice(&[*first]);
                self.0 = rest;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn pump_masks_secrets_split_across_reads_and_in_long_lines() {
        let mut r = Redactor::default();
        r.add("canary-pump-secret");
        let r = Arc::new(r);
        let mut input = b"error: canary-pump-secret rejected\n".to_vec();
        // A line longer than MAX_LINE with the secret around the point where it is cut.
        input.extend(std::iter::repeat_n(b'x', MAX_LINE - 5));
        input.extend_from_slice(b"canary-pump-secret and more\n");
        input.extend_from_slice(b"last canary-pump-secret");
        let mut sink: Vec<u8> = Vec::new();
        let (seen, captured) =
            pump(Trickle(&input), Stream::Stderr, Some(&mut sink), false, r).await;
        assert!(captured.is_empty());
        let out = String::from_utf8(sink).unwrap();
        assert!(!out.contains("canary-pump-secret"), "leaked");
        assert_eq!(out.matches(MASK_TEXT).count(), 3);
        assert!(out.starts_with("error: [secret] rejected\n"));
        assert!(out.ends_with("last [secret]"));
        assert!(!seen.error_summary().contains("canary-pump-secret"));
    }

    const MASK_TEXT: &str = crate::redact::MASK;
}
