//! Remotes that accept a connection and never answer ("black holes") must not hold reconciles,
//! take the whole pool, or keep their slot past the deadline.

use crate::runtime::remote_hosts::AllowList;
use crate::source::git;
use crate::source::poll::{Answer, Need, Poller};
use crate::source::pool::{Cancel, Limits};
use crate::source::RemoteError;
use crate::stack::source::{branch_head, Branch};
use pulumi_gitauth::Credentials;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A loopback listener that accepts every connection and never writes (nor closes) it.
fn black_hole() -> String {
    black_hole_counted().0
}

/// [`black_hole`], with the number of connections it accepted.
fn black_hole_counted() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    (format!("http://127.0.0.1:{port}"), accepted)
}

struct Scratch(std::path::PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A working remote on another "host": a local bare repository over `file://`.
fn working_remote(name: &str) -> (Scratch, String, String) {
    let root = std::env::temp_dir().join(format!("blackhole-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("scratch dir");
    let repo = test_support::GitRepo::new(&root, "app");
    let sha = repo.commit(&[("Pulumi.yaml", "name: app\nruntime: yaml\n")], "one");
    let url = format!("file://{}", repo.bare.display());
    (Scratch(root), url, sha)
}

const FRESH: Need = Need::MaxAge(Duration::from_secs(60));

fn ask(poller: &Poller, url: &str, branch: &str, creds: &Credentials) -> Answer {
    // The black holes listen on loopback, which tenants' repositories may not use by default.
    let allowed = AllowList::parse(&["127.0.0.1"]).expect("allow-list");
    let branch = Branch {
        url,
        branch,
        credentials: creds.clone(),
        allowed: &allowed,
    };
    branch_head(poller, branch, FRESH, None, None)
}

/// Asks until the answer is ready, as the re-triggered reconciles do.
async fn settle(
    poller: &Poller,
    url: &str,
    branch: &str,
    creds: &Credentials,
    within: Duration,
) -> Result<String, RemoteError> {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Answer::Ready(r) = ask(poller, url, branch, creds) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no answer for {url} {branch} within {within:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_never_waits_for_a_hung_remote() {
    let poller = Poller::new(Limits {
        total: 8,
        per_host: 2,
        deadline: Duration::from_secs(2),
    });
    let url = format!("{}/app.git", black_hole());
    let creds = Credentials::Basic {
        username: "alice".into(),
        password: "pw-secret-4242".into(),
    };
    for _ in 0..5 {
        let started = Instant::now();
        assert_eq!(ask(&poller, &url, "main", &creds), Answer::Pending);
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
    }
    // The call ends by its deadline, with a clear, credential-free error.
    let started = Instant::now();
    let e = settle(&poller, &url, "main", &creds, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(e.contains("127.0.0.1"), "{e}");
    assert!(!e.contains("pw-secret-4242"), "{e}");
    // Then the key backs off: the failure is the answer, no new call.
    assert_eq!(ask(&poller, &url, "main", &creds), Answer::Ready(Err(e)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hung_host_does_not_take_the_pool() {
    let poller = Poller::new(Limits {
        total: 4,
        per_host: 2,
        deadline: Duration::from_secs(10),
    });
    let hole = black_hole();
    let none = Credentials::None;
    for i in 0..30 {
        let url = format!("{hole}/r{i}.git");
        assert_eq!(ask(&poller, &url, "main", &none), Answer::Pending);
    }
    let (_scratch, url, sha) = working_remote("fair");
    let started = Instant::now();
    assert_eq!(ask(&poller, &url, "main", &none), Answer::Pending);
    assert_eq!(
        settle(&poller, &url, "main", &none, Duration::from_secs(5)).await,
        Ok(sha)
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_call_ends_and_frees_its_slot_by_the_deadline() {
    let deadline = Duration::from_secs(1);
    // One slot in all: the working remote can only run once the hung call gave it back.
    let poller = Poller::new(Limits {
        total: 1,
        per_host: 1,
        deadline,
    });
    let (hole, accepted) = black_hole_counted();
    let hung = format!("{hole}/app.git");
    let (_scratch, url, sha) = working_remote("slot");
    let none = Credentials::None;
    let started = Instant::now();
    assert_eq!(ask(&poller, &hung, "main", &none), Answer::Pending);
    // The hung call holds the slot before the working remote asks for it.
    while accepted.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < deadline,
            "the hung call never connected"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(ask(&poller, &url, "main", &none), Answer::Pending);
    assert_eq!(
        settle(&poller, &url, "main", &none, Duration::from_secs(5)).await,
        Ok(sha)
    );
    let took = started.elapsed();
    assert!(took >= deadline && took < deadline * 3, "{took:?}");
    let e = settle(&poller, &hung, "main", &none, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(e.contains("ls-remote http://127.0.0.1:"), "{e}");
    // The hung call's thread ended by itself (transport timeout from the deadline), it was
    // not left running.
    let waited = Instant::now();
    while poller.pool().lingering() > 0 && waited.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(poller.pool().lingering(), 0);
}

#[test]
fn the_http_transport_ends_a_hung_call_by_its_deadline() {
    let url = format!("{}/app.git", black_hole());
    let started = Instant::now();
    let cancel = Cancel::new(Instant::now() + Duration::from_millis(800));
    let e = git::ls_remote(&url, "main", &Credentials::None, &cancel).unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}: {e}");
    assert!(e.contains("ls-remote http://127.0.0.1:"), "{e}");
}

#[test]
fn ssh_ends_a_hung_call_by_its_deadline() {
    let hole = black_hole().replace("http://", "ssh://git@");
    let url = format!("{hole}/app.git");
    let keys = std::env::temp_dir().join(format!("blackhole-ssh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&keys);
    std::fs::create_dir_all(&keys).expect("scratch dir");
    let _scratch = Scratch(keys.clone());
    let (private_key, _) = test_support::ssh_key_pair(&keys, "deploy", "");
    let creds = Credentials::Ssh {
        private_key,
        passphrase: None,
        known_hosts: None,
    };
    let started = Instant::now();
    let cancel = Cancel::new(Instant::now() + Duration::from_secs(2));
    let e = git::ls_remote(&url, "main", &creds, &cancel).unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}: {e}");
    assert!(e.contains("did not answer in time"), "{e}");
    assert!(e.contains("timed out"), "{e}");
}

#[test]
fn git_daemon_ends_a_hung_call_by_its_deadline() {
    let url = format!("{}/app.git", black_hole().replace("http://", "git://"));
    let started = Instant::now();
    let cancel = Cancel::new(Instant::now() + Duration::from_millis(800));
    let e = git::ls_remote(&url, "main", &Credentials::None, &cancel).unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}: {e}");
    assert!(e.contains("ls-remote git://127.0.0.1:"), "{e}");
}

#[test]
fn git_daemon_remotes_resolve() {
    // The daemon program itself (`git daemon` would leave it running as its child when killed).
    let Some(exec_path) = std::process::Command::new("git")
        .arg("--exec-path")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    else {
        return;
    };
    let program = std::path::Path::new(&exec_path).join("git-daemon");
    if !program.exists() {
        eprintln!("git-daemon is not installed; skipped");
        return;
    }
    let (scratch, _, sha) = working_remote("daemon");
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut daemon = std::process::Command::new(program)
        .args([
            "--reuseaddr",
            "--export-all",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
            &format!("--base-path={}", scratch.0.display()),
        ])
        .arg(&scratch.0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("git daemon");
    let url = format!("git://127.0.0.1:{port}/app.git");
    let mut answer = Err(RemoteError::from(String::new()));
    for _ in 0..50 {
        let cancel = Cancel::new(Instant::now() + Duration::from_secs(5));
        answer = git::ls_remote(&url, "main", &Credentials::None, &cancel);
        if answer.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(answer, Ok(sha));
}
