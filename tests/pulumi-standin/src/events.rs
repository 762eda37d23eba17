//! The `--event-log` writer (JSON lines, `sequence` from 0, `timestamp` in Unix seconds) and
//! signal handling for engine operations.

use serde_json::{json, Value as J};
use std::io::Write;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

pub struct EventLog {
    file: Option<std::fs::File>,
    /// Also print every event on stdout (`--json` on up/refresh/destroy).
    pub to_stdout: bool,
    seq: u64,
}

impl EventLog {
    pub fn open(path: Option<&str>, to_stdout: bool) -> EventLog {
        // Like the CLI: truncate, and carry on without a log when the file cannot be opened.
        let file = path.and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(p)
                .ok()
        });
        EventLog {
            file,
            to_stdout,
            seq: 0,
        }
    }

    pub fn emit(&mut self, kind: &str, payload: J) {
        self.emit_raw(kind, &payload.to_string());
    }

    /// Emits an event whose payload is already serialized JSON.
    pub fn emit_raw(&mut self, kind: &str, payload: &str) {
        // The envelope keeps Go's field order: sequence, timestamp, then the event kind.
        let line = format!(
            "{{\"sequence\":{},\"timestamp\":{},{}:{}}}\n",
            self.seq,
            crate::util::now_unix(),
            json!(kind),
            payload
        );
        self.seq += 1;
        if let Some(f) = &mut self.file {
            let _ = f.write_all(line.as_bytes());
            let _ = f.flush();
        }
        if self.to_stdout {
            print!("{line}");
            let _ = std::io::stdout().flush();
        }
    }
}

static SIGNALS: AtomicUsize = AtomicUsize::new(0);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Installs the SIGINT/SIGTERM handler for the duration of an engine operation.
pub fn install_handlers() {
    // SAFETY: the handler only touches atomics, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// How many SIGINT/SIGTERM signals arrived so far.
pub fn signal_count() -> usize {
    SIGNALS.load(Ordering::SeqCst)
}

pub fn last_was_sigterm() -> bool {
    LAST_SIGNAL.load(Ordering::SeqCst) == libc::SIGTERM
}
