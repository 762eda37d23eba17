//! `git ls-remote` through gitoxide: resolves a branch (or tag) to the commit it points at,
//! without cloning, with the Stack's git credentials (HTTP basic auth, token, GitHub App
//! installation token, or an SSH key through the `ssh` program). It is blocking: it runs on the
//! bounded pool of [`super::pool`], never on a reconcile worker, within the call's deadline
//! ([`Cancel`]): the HTTP transport's timeouts are set from it so a hung server ends the call by
//! itself, and the call stops between steps once cancelled; SSH gets `ConnectTimeout` and
//! keep-alive options from the same deadline (`Session::bound_ssh`).

use super::pool::Cancel;
use crate::source::RemoteError;
use pulumi_gitauth::{AuthFlags, Credentials, Session, Transport};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long one ls-remote of the tests may take.
#[cfg(test)]
const TIMEOUT: Duration = Duration::from_secs(60);

/// The longest a connection attempt may take (shorter than the deadline when that is long).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A bare repository used only as a context for anonymous remotes (nothing is fetched into it).
fn scratch_repo() -> Result<PathBuf, RemoteError> {
    static DIR: OnceLock<Result<PathBuf, RemoteError>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("pulumi-operator-ls-remote-{}", std::process::id()));
        if !dir.join("HEAD").exists() {
            gix::init_bare(&dir).map_err(|e| {
                format!(
                    "cannot create a scratch repository in {}: {e}",
                    dir.display()
                )
            })?;
        }
        Ok(dir)
    })
    .clone()
}

/// [`ls_remote`] with the tests' deadline, [`TIMEOUT`].
#[cfg(test)]
fn ls_remote_blocking(
    url: &str,
    reference: &str,
    credentials: &Credentials,
) -> Result<String, RemoteError> {
    ls_remote(
        url,
        reference,
        credentials,
        &Cancel::new(std::time::Instant::now() + TIMEOUT),
    )
}

/// HTTP transport options whose timeouts end the call by its deadline: reqwest's `timeout`
/// bounds each request, headers and body, so a server that accepts and never answers cannot
/// hold the thread past the deadline (gitoxide's reqwest backend does not read
/// `http.lowSpeedLimit`/`http.lowSpeedTime`, hence its client hook).
fn http_options(
    repo: &gix::Repository,
    url: &str,
    cancel: &Cancel,
) -> Result<Box<dyn std::any::Any>, RemoteError> {
    use gix_transport::client::blocking_io::http;
    let mut options = repo
        .transport_options(url, None)
        .map_err(|e| format!("HTTP options: {e}"))?
        .and_then(|o| o.downcast::<http::Options>().ok())
        .unwrap_or_default();
    let total = cancel.remaining();
    let connect = total.min(CONNECT_TIMEOUT);
    options.connect_timeout = Some(connect);
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder| {
            Ok(builder.connect_timeout(connect).timeout(total))
        })),
        configure_request: None,
    };
    options.backend = Some(Arc::new(Mutex::new(backend)));
    Ok(options)
}

/// A `git://` (git daemon) transport whose socket times out by the deadline: gitoxide's own
/// has a connect timeout only, and a daemon that accepts and never answers would hold the
/// thread for good.
fn git_daemon(
    url: &gix::Url,
    version: gix_transport::Protocol,
    cancel: &Cancel,
) -> Result<Box<dyn gix_transport::client::blocking_io::Transport + Send>, RemoteError> {
    use std::net::{TcpStream, ToSocketAddrs};
    let host = url.host().ok_or("the URL has no host")?;
    let port = url.port;
    let addr = (host, port.unwrap_or(9418))
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))?;
    let read = TcpStream::connect_timeout(&addr, cancel.remaining().min(CONNECT_TIMEOUT))
        .map_err(|e| format!("cannot connect to {host}: {e}"))?;
    let timeouts = read
        .set_read_timeout(Some(cancel.remaining()))
        .and_then(|()| read.set_write_timeout(Some(cancel.remaining())));
    let write = timeouts
        .and_then(|()| read.try_clone())
        .map_err(|e| format!("connection to {host}: {e}"))?;
    Ok(Box::new(
        gix_transport::client::git::blocking_io::Connection::new(
            read,
            write,
            version,
            url.path.clone(),
            Some((host.to_string(), port)),
            gix_transport::client::git::ConnectMode::Daemon,
            false,
        ),
    ))
}

/// The commit `reference` (short `main`, `refs/heads/main`, or a tag name) points at on `url`,
/// by the deadline of `cancel`. Errors are clear and never contain a credential.
pub fn ls_remote(
    url: &str,
    reference: &str,
    credentials: &Credentials,
    cancel: &Cancel,
) -> Result<String, RemoteError> {
    // A GitHub App token exchange happens here: bounded by the same deadline.
    let mut session = Session::prepare_within(credentials, url, cancel.remaining())?;
    session.bound_ssh(cancel.remaining());
    let shown = session.redact(url);
    let stopped = || format!("ls-remote {shown}: stopped at its deadline");
    if cancel.is_cancelled() {
        return Err(stopped().into());
    }
    let dir = scratch_repo()?;
    let options = gix::open::Options::default().config_overrides(session.config_overrides());
    let repo =
        gix::open_opts(&dir, options).map_err(|e| format!("opening scratch repository: {e}"))?;
    let remote = repo
        .remote_at(url)
        .map_err(|e| session.redact(&format!("invalid repository URL {shown:?}: {e}")))?
        .with_refspecs(
            [
                "+refs/heads/*:refs/remotes/origin/*",
                "+refs/tags/*:refs/tags/*",
            ],
            gix::remote::Direction::Fetch,
        )
        .map_err(|e| format!("refspecs: {e}"))?;
    let flags = AuthFlags::default();
    let failed = |e: &dyn std::error::Error| {
        let detail = pulumi_gitauth::error_chain(e);
        match session.explain(&flags, &detail) {
            Some(explained) => format!("ls-remote {shown}: {explained}"),
            None => session.redact(&format!("ls-remote {shown}: {detail}")),
        }
    };
    let (sanitized, version) = remote
        .sanitized_url_and_version(gix::remote::Direction::Fetch)
        .map_err(|e| failed(&e))?;
    let mut connection = if sanitized.scheme == gix::url::Scheme::Git {
        let transport = git_daemon(&sanitized, version, cancel)
            .map_err(|e| format!("ls-remote {shown}: {e}"))?;
        remote.to_connection_with_transport(transport)
    } else {
        remote
            .connect(gix::remote::Direction::Fetch)
            .map_err(|e| failed(&e))?
    };
    connection.set_credentials(session.credentials_fn(&flags));
    if pulumi_gitauth::transport(url) == Transport::Http {
        let options = http_options(&repo, url, cancel).map_err(|e| session.redact(&e))?;
        connection.set_transport_options(options);
    }
    let (map, _) = connection
        .ref_map(gix::progress::Discard, Default::default())
        .map_err(|e| {
            if cancel.is_cancelled() {
                format!("{}: {}", stopped(), failed(&e))
            } else {
                failed(&e)
            }
        })?;
    let candidates = [
        reference.to_string(),
        format!("refs/heads/{reference}"),
        format!("refs/tags/{reference}"),
    ];
    for wanted in &candidates {
        for r in &map.remote_refs {
            let (name, target, peeled) = r.unpack();
            if name == wanted.as_str() {
                if let Some(oid) = peeled.or(target) {
                    return Ok(oid.to_string());
                }
            }
        }
    }
    Err(format!("no commits found for ref {reference:?} in {shown}").into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &std::path::Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn resolves_branches_and_tags_of_a_local_repository() {
        let dir = std::env::temp_dir().join(format!("ls-remote-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        git(&dir, &["init", "-q", "-b", "main"]);
        std::fs::write(dir.join("f"), "1").unwrap();
        git(&dir, &["add", "f"]);
        git(
            &dir,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "-m",
                "one",
            ],
        );
        let first = git(&dir, &["rev-parse", "HEAD"]);
        git(&dir, &["tag", "v1"]);
        std::fs::write(dir.join("f"), "2").unwrap();
        git(
            &dir,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "-am",
                "two",
            ],
        );
        let second = git(&dir, &["rev-parse", "HEAD"]);
        let url = format!("file://{}", dir.display());
        assert_eq!(
            ls_remote_blocking(&url, "main", &Credentials::None).unwrap(),
            second
        );
        assert_eq!(
            ls_remote_blocking(&url, "refs/heads/main", &Credentials::None).unwrap(),
            second
        );
        assert_eq!(
            ls_remote_blocking(&url, "v1", &Credentials::None).unwrap(),
            first
        );
        assert!(ls_remote_blocking(&url, "nope", &Credentials::None)
            .unwrap_err()
            .contains("no commits found"));
        assert!(ls_remote_blocking("file:///does/not/exist", "main", &Credentials::None).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    struct Scratch(std::path::PathBuf);
    impl Scratch {
        fn new(name: &str) -> Scratch {
            let p = std::env::temp_dir().join(format!("ls-remote-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn repo_with_a_commit(root: &std::path::Path) -> (test_support::GitRepo, String) {
        let repo = test_support::GitRepo::new(root, "app");
        let sha = repo.commit(&[("Pulumi.yaml", "name: app\nruntime: yaml\n")], "one");
        (repo, sha)
    }

    #[test]
    fn http_basic_auth_and_tokens() {
        let root = Scratch::new("http");
        let (_repo, sha) = repo_with_a_commit(root.path());
        let server = test_support::LoggedGitServer::start(
            root.path(),
            &[
                "--user",
                "alice",
                "--password",
                "pw-123456",
                "--token",
                "tok-abcdef",
            ],
        );
        let url = format!("{}/app.git", server.url);
        let basic = |u: &str, p: &str| Credentials::Basic {
            username: u.into(),
            password: p.into(),
        };
        assert_eq!(
            ls_remote_blocking(&url, "main", &basic("alice", "pw-123456")).unwrap(),
            sha
        );
        assert_eq!(
            ls_remote_blocking(&url, "main", &Credentials::token("tok-abcdef")).unwrap(),
            sha
        );
        let e = ls_remote_blocking(&url, "main", &basic("alice", "wrong-pw-999")).unwrap_err();
        assert!(e.contains("rejected the credentials (basic auth)"), "{e}");
        assert!(e.contains(&url), "{e}");
        assert!(!e.contains("wrong-pw-999"), "{e}");
        let e = ls_remote_blocking(&url, "main", &Credentials::None).unwrap_err();
        assert!(e.contains("requires authentication"), "{e}");
        // Credentials in the URL never reach the message.
        let with_creds = url.replace("http://", "http://alice:url-pw-777@");
        let e = ls_remote_blocking(&with_creds, "nope", &Credentials::None).unwrap_err();
        assert!(!e.contains("url-pw-777"), "{e}");
    }

    #[test]
    fn ssh_keys_known_hosts_and_passphrases() {
        let root = Scratch::new("ssh");
        let (repo, sha) = repo_with_a_commit(root.path());
        let sshd = test_support::SshServer::start(&root.path().join("sshd"));
        let keys = root.path().join("keys");
        let (private, public) = test_support::ssh_key_pair(&keys, "deploy", "");
        let (locked, locked_pub) = test_support::ssh_key_pair(&keys, "locked", "open sesame");
        let (stranger, _) = test_support::ssh_key_pair(&keys, "stranger", "");
        sshd.authorize(&public);
        sshd.authorize(&locked_pub);
        let url = sshd.url(&repo.bare);
        let ssh = |key: &str, pass: Option<&str>, hosts: Option<String>| Credentials::Ssh {
            private_key: key.into(),
            passphrase: pass.map(Into::into),
            known_hosts: hosts,
        };
        // With the server's known_hosts, and accepting a new host key without it.
        assert_eq!(
            ls_remote_blocking(&url, "main", &ssh(&private, None, Some(sshd.known_hosts())))
                .unwrap(),
            sha,
            "{}",
            sshd.log()
        );
        assert_eq!(
            ls_remote_blocking(&url, "main", &ssh(&private, None, None)).unwrap(),
            sha
        );
        // A passphrase-protected key.
        assert_eq!(
            ls_remote_blocking(&url, "main", &ssh(&locked, Some("open sesame"), None)).unwrap(),
            sha,
            "{}",
            sshd.log()
        );
        // A key the server does not know.
        let e = ls_remote_blocking(&url, "main", &ssh(&stranger, None, None)).unwrap_err();
        assert!(e.contains("rejected the key"), "{e}");
        let body: Vec<&str> = stranger
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        assert!(body.iter().all(|l| !e.contains(l)), "{e}");
        // A different host key in known_hosts.
        let wrong_hosts = format!(
            "[127.0.0.1]:{} {}",
            sshd.port,
            public
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        );
        let e =
            ls_remote_blocking(&url, "main", &ssh(&private, None, Some(wrong_hosts))).unwrap_err();
        assert!(e.contains("host key"), "{e}");
        // A wrong passphrase.
        let e = ls_remote_blocking(&url, "main", &ssh(&locked, Some("wrong-pass-1"), None))
            .unwrap_err();
        assert!(!e.contains("wrong-pass-1"), "{e}");
        // No key for an SSH URL: refused, clearly.
        let e = ls_remote_blocking(&url, "main", &Credentials::token("t")).unwrap_err();
        assert!(e.contains("SSH URL"), "{e}");
    }
}
