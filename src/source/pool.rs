//! The bounded pool that runs blocking network calls to git remotes (ls-remote, with the GitHub
//! App token exchange it may need), away from the reconcile workers.
//!
//! At most `total` calls run at once, and at most `per_host` of them against one host, so one
//! slow or hung host queues behind its own cap while other hosts' calls proceed. A call has a
//! deadline: when it passes, the caller gets an error and both permits are released at once;
//! the call's thread sees its [`Cancel`] flag set and its transport timeouts (derived from the
//! same deadline, see `git.rs`) end it by itself shortly after.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tracing::warn;

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

pub use crate::runtime::config::GitRemoteLimits as Limits;

/// Why a call gave no answer of its own.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoolError {
    #[error("no answer within {}s", .0.as_secs_f32())]
    Deadline(Duration),
    #[error("cannot start a thread for the call: {0}")]
    Spawn(String),
    #[error("the call ended without an answer")]
    Lost,
}

/// Handed to a call: its deadline, and a flag set when the caller stopped waiting.
#[derive(Clone, Debug)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    deadline: Instant,
}

impl Cancel {
    pub fn new(deadline: Instant) -> Cancel {
        Cancel {
            flag: Arc::default(),
            deadline,
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst) || Instant::now() >= self.deadline
    }

    /// Time left before the deadline (at least a millisecond: zero means "no timeout" to some
    /// transports).
    pub fn remaining(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }
}

/// Pure: the host a repository URL's calls count against (lowercase, without port or
/// user-info); local repositories (`file://`, paths) share the host `""`.
pub fn host_of(url: &str) -> String {
    let bytes: &[u8] = url.trim().as_bytes();
    match gix::url::parse(bytes) {
        // With the port: two servers on one address are two remotes.
        Ok(u) => {
            let host = u.host().unwrap_or_default().to_ascii_lowercase();
            match u.port {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        }
        Err(_) => String::new(),
    }
}

pub struct Pool {
    limits: Limits,
    total: Arc<Semaphore>,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Threads still running after their caller stopped waiting (they end on their transport
    /// timeouts).
    lingering: Arc<AtomicUsize>,
}

impl Pool {
    pub fn new(limits: Limits) -> Pool {
        let limits = Limits {
            total: limits.total.max(1),
            per_host: limits.per_host.max(1),
            ..limits
        };
        Pool {
            limits,
            total: Arc::new(Semaphore::new(limits.total)),
            hosts: Mutex::default(),
            lingering: Arc::default(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Calls whose deadline passed and whose thread has not ended yet.
    pub fn lingering(&self) -> usize {
        self.lingering.load(Ordering::SeqCst)
    }

    fn host(&self, host: &str) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        // Forget idle hosts (no permit taken, nobody queued).
        let per_host = self.limits.per_host;
        hosts.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < per_host);
        hosts
            .entry(host.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(per_host)))
            .clone()
    }

    /// Runs the blocking `call` on its own thread once a slot for `host` and a slot in the
    /// pool are free; gives up at the deadline (counted from the start of the call, not from
    /// the queueing).
    pub async fn run<T, F>(&self, host: &str, call: F) -> Result<T, PoolError>
    where
        T: Send + 'static,
        F: FnOnce(&Cancel) -> T + Send + 'static,
    {
        // The host's permit first: calls to a slow host wait for their host without holding
        // one of the pool's slots.
        let host_permit = self.host(host).acquire_owned().await;
        let pool_permit = self.total.clone().acquire_owned().await;
        let (Ok(_host_permit), Ok(_pool_permit)) = (host_permit, pool_permit) else {
            return Err(PoolError::Lost); // semaphores are never closed
        };
        let deadline = self.limits.deadline;
        let cancel = Cancel::new(Instant::now() + deadline);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let theirs = cancel.clone();
        let lingering = self.lingering.clone();
        // RUNNING → DONE (the thread ended) or → ABANDONED (the caller stopped waiting): whoever
        // comes second knows whether the thread was counted as lingering.
        let state = Arc::new(AtomicU8::new(RUNNING));
        let thread_state = state.clone();
        std::thread::Builder::new()
            .name("git-remote".into())
            .spawn(move || {
                let answer = call(&theirs);
                if thread_state.swap(DONE, Ordering::SeqCst) == ABANDONED {
                    lingering.fetch_sub(1, Ordering::SeqCst);
                }
                let _ = tx.send(answer);
            })
            .map_err(|e| PoolError::Spawn(e.to_string()))?;
        match tokio::time::timeout(deadline, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(PoolError::Lost),
            Err(_) => {
                self.lingering.fetch_add(1, Ordering::SeqCst);
                if state
                    .compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    // It ended just now.
                    self.lingering.fetch_sub(1, Ordering::SeqCst);
                }
                cancel.cancel();
                warn!(
                    host,
                    ?deadline,
                    lingering = self.lingering(),
                    "git remote call passed its deadline; its slot is freed and its transport \
                     timeouts end it"
                );
                Err(PoolError::Deadline(deadline))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_urls() {
        assert_eq!(host_of("https://GitHub.com/o/r.git"), "github.com");
        assert_eq!(
            host_of("https://user:pw@example.com:8443/r"),
            "example.com:8443"
        );
        assert_eq!(host_of("git@github.com:o/r.git"), "github.com");
        assert_eq!(host_of("ssh://git@10.0.0.1:2222/r"), "10.0.0.1:2222");
        assert_eq!(host_of("file:///srv/r.git"), "");
        assert_eq!(host_of("not a url"), "");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn caps_per_host_and_in_all() {
        use std::sync::atomic::AtomicUsize;
        let pool = Arc::new(Pool::new(Limits {
            total: 3,
            per_host: 2,
            deadline: Duration::from_secs(10),
        }));
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (slow_now, slow_peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut tasks = Vec::new();
        for i in 0..12 {
            let host = if i % 2 == 0 { "slow" } else { "other" };
            let (pool, now, peak) = (pool.clone(), now.clone(), peak.clone());
            let (slow_now, slow_peak) = (slow_now.clone(), slow_peak.clone());
            tasks.push(tokio::spawn(async move {
                pool.run(host, move |_| {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    if host == "slow" {
                        let s = slow_now.fetch_add(1, Ordering::SeqCst) + 1;
                        slow_peak.fetch_max(s, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(30));
                    if host == "slow" {
                        slow_now.fetch_sub(1, Ordering::SeqCst);
                    }
                    now.fetch_sub(1, Ordering::SeqCst);
                    i
                })
                .await
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap(), Ok(i));
        }
        assert!(peak.load(Ordering::SeqCst) <= 3);
        assert!(slow_peak.load(Ordering::SeqCst) <= 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_call_frees_its_slot_at_the_deadline() {
        let pool = Pool::new(Limits {
            total: 1,
            per_host: 1,
            deadline: Duration::from_millis(200),
        });
        let started = Instant::now();
        // Ends only when cancelled, as a transport timeout would.
        let hung = pool
            .run("h", |c: &Cancel| {
                while !c.flag.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                "late"
            })
            .await;
        assert_eq!(hung, Err(PoolError::Deadline(Duration::from_millis(200))));
        assert!(started.elapsed() < Duration::from_secs(1));
        // The only slot is free again.
        assert_eq!(pool.run("h", |_| "next").await, Ok("next"));
        let waited = Instant::now();
        while pool.lingering() > 0 && waited.elapsed() < Duration::from_secs(2) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(pool.lingering(), 0, "the cancelled thread ended");
    }
}
