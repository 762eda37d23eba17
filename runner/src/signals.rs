//! SIGTERM (pod deletion, Job deadline) and SIGINT handling: the runner counts them; the
//! command runner forwards each one to Pulumi as SIGINT (the first asks Pulumi to cancel
//! gracefully and release the stack lock, a second one makes it stop at once).

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// The number of termination signals received so far.
#[derive(Clone, Debug)]
pub struct Signals {
    rx: watch::Receiver<usize>,
}

impl Signals {
    /// Installs the handlers (must run inside a tokio runtime).
    pub fn install() -> std::io::Result<Signals> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let (tx, rx) = watch::channel(0usize);
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    s = term.recv() => { if s.is_none() { break; } "SIGTERM" }
                    s = int.recv() => { if s.is_none() { break; } "SIGINT" }
                };
                let n = *tx.borrow() + 1;
                crate::report::log(format!("received {name} ({n})"));
                if tx.send(n).is_err() {
                    break;
                }
            }
        });
        Ok(Signals { rx })
    }

    /// Signals that never fire (tests).
    pub fn none() -> Signals {
        let (tx, rx) = watch::channel(0usize);
        std::mem::forget(tx);
        Signals { rx }
    }

    /// How many signals were received.
    pub fn count(&self) -> usize {
        *self.rx.borrow()
    }

    /// Waits until the count exceeds `seen`; returns the new count.
    pub async fn after(&self, seen: usize) -> usize {
        let mut rx = self.rx.clone();
        loop {
            let n = *rx.borrow_and_update();
            if n > seen {
                return n;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Sends SIGINT to a process.
pub fn interrupt(pid: u32) {
    // SAFETY: kill(2) with a pid we spawned; no memory is involved.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGINT);
    }
}

/// Reaps exited orphans when the runner is PID 1 of its container (Pulumi's plugins may
/// outlive it and get re-parented to us). Call only when no child of ours is running.
pub fn reap_orphans() {
    if std::process::id() != 1 {
        return;
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG on any child; status is a valid pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            break;
        }
    }
}

extern "C" fn exit_on_signal(signal: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(128 + signal) }
}

/// For the short, stateless stages (bootstrap, fetch): exit at once on SIGTERM or SIGINT. As PID
/// 1 of a container the runner would otherwise ignore SIGTERM, and a pod being deleted would
/// wait out its whole grace period.
pub fn exit_on_termination() {
    let handler: extern "C" fn(libc::c_int) = exit_on_signal;
    // SAFETY: installs a handler that only calls an async-signal-safe function.
    unsafe {
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
    }
}
