//! `git ls-remote` through gitoxide: resolves a branch (or tag) to the commit it points at,
//! without cloning, with the Stack's git credentials (HTTP basic auth, token, GitHub App
//! installation token, or an SSH key through the `ssh` program). It is blocking: it runs on the
//! bounded pool of [`super::pool`], never on a reconcile worker, within the call's deadline
//! ([`Cancel`]): the HTTP transport's timeouts are set from it so a hung server ends the call by
//! itself, and the call stops between steps once cancelled; SSH gets `ConnectTimeout` and
//! keep-alive options from the same deadline (`Session::bound_ssh`). A tenant's repository goes
//! through [`tenant_ls_remote`], which does not contact internal hosts
//! ([`crate::runtime::remote_hosts`]).

use super::pool::Cancel;
use crate::runtime::remote_hosts::{self, AllowList};
use crate::source::RemoteError;
use pulumi_gitauth::{AuthFlags, Credentials, Session, Transport};
use std::net::{IpAddr, SocketAddr};
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
    allowed: Option<&AllowList>,
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
    let resolver = allowed.map(|allowed| CheckedResolver::new(url, allowed));
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder| {
            let builder = builder.connect_timeout(connect).timeout(total);
            Ok(match resolver.clone() {
                Some(r) => builder.dns_resolver(Arc::new(r)),
                None => builder,
            })
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
    allowed: Option<&AllowList>,
    cancel: &Cancel,
) -> Result<Box<dyn gix_transport::client::blocking_io::Transport + Send>, RemoteError> {
    use std::net::{TcpStream, ToSocketAddrs};
    let host = url.host().ok_or("the URL has no host")?;
    let port = url.port;
    let addrs: Vec<SocketAddr> = (host, port.unwrap_or(9418))
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    if let Some(allowed) = allowed {
        // The addresses connected to are the ones checked (a name may answer differently
        // each time it is asked).
        let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
        remote_hosts::check_addresses(host, port.unwrap_or(9418), &ips, allowed)
            .map_err(RemoteError::not_allowed)?;
    }
    let addr = *addrs
        .first()
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
/// by the deadline of `cancel`. Errors are clear and never contain a credential. Any host:
/// for the administrator's repositories (policy packs) and tests.
pub fn ls_remote(
    url: &str,
    reference: &str,
    credentials: &Credentials,
    cancel: &Cancel,
) -> Result<String, RemoteError> {
    ls_remote_within(url, reference, credentials, None, cancel)
}

/// [`ls_remote`] of a tenant's repository: refused before anything is sent to it when its host
/// is internal to the operator's network and `allowed` does not list it; a name's addresses are
/// checked once resolved. Then the git daemon transport connects only to addresses it checked,
/// and the HTTP client checks every name it resolves (a redirect's too) again, so a name that
/// changes its answer meanwhile (DNS rebinding) gains nothing; `ssh` resolves by itself, after
/// the check here.
pub fn tenant_ls_remote(
    url: &str,
    reference: &str,
    credentials: &Credentials,
    allowed: &AllowList,
    cancel: &Cancel,
) -> Result<String, RemoteError> {
    let names = remote_hosts::check_url(url, allowed).map_err(RemoteError::not_allowed)?;
    for (name, port) in names {
        let addrs = lookup(&name, port)?;
        remote_hosts::check_addresses(&name, port, &addrs, allowed)
            .map_err(RemoteError::not_allowed)?;
    }
    ls_remote_within(url, reference, credentials, Some(allowed), cancel)
}

/// The addresses of `name` (blocking: this runs on the pool's thread, within its deadline). A
/// name that cannot be resolved is not contacted: its addresses could not be checked.
fn lookup(name: &str, port: u16) -> Result<Vec<IpAddr>, RemoteError> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<IpAddr> = (name, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve repository host {name:?}: {e}"))?
        .map(|a| a.ip())
        .collect();
    if addrs.is_empty() {
        return Err(format!("repository host {name:?} has no address").into());
    }
    Ok(addrs)
}

/// reqwest's name resolution for a tenant's repository: every name the client connects to (the
/// repository's, or one a redirect leads to) is looked up and checked as [`tenant_ls_remote`]
/// checks the first.
#[derive(Clone)]
struct CheckedResolver {
    allowed: AllowList,
    /// The repository's port (an allow-list entry may name one).
    port: u16,
}

impl CheckedResolver {
    fn new(url: &str, allowed: &AllowList) -> CheckedResolver {
        let port = remote_hosts::remotes_of(url)
            .first()
            .map_or(443, |r| r.port);
        CheckedResolver {
            allowed: allowed.clone(),
            port,
        }
    }
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (allowed, port, name) = (self.allowed.clone(), self.port, name.as_str().to_string());
        Box::pin(async move {
            // A refused name (`localhost`, `*.svc`) is not even looked up.
            remote_hosts::check_addresses(&name, port, &[], &allowed)?;
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
                .await?
                .collect();
            let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
            remote_hosts::check_addresses(&name, port, &ips, &allowed)?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The oid `reference` names among `refs`: itself, else a branch, else a tag.
fn find_reference(refs: &[gix::protocol::handshake::Ref], reference: &str) -> Option<String> {
    let candidates = [
        reference.to_string(),
        format!("refs/heads/{reference}"),
        format!("refs/tags/{reference}"),
    ];
    candidates.iter().find_map(|wanted| {
        refs.iter().find_map(|r| {
            let (name, target, peeled) = r.unpack();
            (name == wanted.as_str())
                .then(|| peeled.or(target).map(|oid| oid.to_string()))
                .flatten()
        })
    })
}

fn ls_remote_within(
    url: &str,
    reference: &str,
    credentials: &Credentials,
    allowed: Option<&AllowList>,
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
        let transport = git_daemon(&sanitized, version, allowed, cancel)
            .map_err(|e| format!("ls-remote {shown}: {e}"))?;
        remote.to_connection_with_transport(transport)
    } else {
        remote
            .connect(gix::remote::Direction::Fetch)
            .map_err(|e| failed(&e))?
    };
    connection.set_credentials(session.credentials_fn(&flags));
    if pulumi_gitauth::transport(url) == Transport::Http {
        let options = http_options(&repo, url, allowed, cancel).map_err(|e| session.redact(&e))?;
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
    find_reference(&map.remote_refs, reference)
        .ok_or_else(|| format!("no commits found for ref {reference:?} in {shown}").into())
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
    fn a_tenants_internal_repository_is_refused_before_it_is_contacted() {
        let root = Scratch::new("tenant");
        let (_repo, sha) = repo_with_a_commit(root.path());
        let server = test_support::LoggedGitServer::start(root.path(), &[]);
        let cancel = || Cancel::new(std::time::Instant::now() + TIMEOUT);
        let port = server.port();
        let none = AllowList::default();
        for url in [
            format!("{}/app.git", server.url),
            format!("http://0x7f.1:{port}/app.git"),
            format!("http://[::ffff:127.0.0.1]:{port}/app.git"),
            format!("http://u:url-pw-777@localhost:{port}/app.git"),
        ] {
            let e =
                tenant_ls_remote(&url, "main", &Credentials::None, &none, &cancel()).unwrap_err();
            assert!(e.not_allowed, "{url}: {e}");
            assert!(e.contains(remote_hosts::SETTING), "{url}: {e}");
            assert!(!e.contains("url-pw-777"), "{e}");
        }
        let contacted = server.settled_requests();
        assert!(contacted.is_empty(), "{contacted:?}");
        // Listed by the administrator: contacted as before.
        let loopback = AllowList::parse(&["127.0.0.1"]).unwrap();
        let url = format!("{}/app.git", server.url);
        assert_eq!(
            tenant_ls_remote(&url, "main", &Credentials::None, &loopback, &cancel()).unwrap(),
            sha
        );
        let by_name = AllowList::parse(&["localhost"]).unwrap();
        let url = format!("http://localhost:{port}/app.git");
        assert_eq!(
            tenant_ls_remote(&url, "main", &Credentials::None, &by_name, &cancel()).unwrap(),
            sha
        );
        // An address is not a name: `localhost` stays refused with 127.0.0.1 allowed.
        let e =
            tenant_ls_remote(&url, "main", &Credentials::None, &loopback, &cancel()).unwrap_err();
        assert!(e.not_allowed && e.contains("loopback name"), "{e}");
        // Past the first check, the HTTP client checks the names it resolves itself (a name
        // that answers differently the second time, a redirect).
        let before = server.settled_requests().len();
        let e =
            ls_remote_within(&url, "main", &Credentials::None, Some(&none), &cancel()).unwrap_err();
        assert!(e.contains("is refused"), "{e}");
        assert_eq!(server.settled_requests().len(), before);
    }

    #[test]
    fn names_are_checked_by_the_addresses_they_resolve_to() {
        // What a name pointing at loopback resolves to is refused; the lookup is real.
        let addrs = lookup("localhost", 80).unwrap();
        let none = AllowList::default();
        let e = remote_hosts::check_addresses("git.example.test", 80, &addrs, &none).unwrap_err();
        assert!(e.0.contains("resolves to"), "{e}");
        assert!(lookup("does-not-exist.invalid", 80).is_err());
        // The HTTP client's resolver (redirects, rebinding) refuses the same.
        let resolver = CheckedResolver::new("https://git.example.test/x.git", &none);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        use reqwest::dns::Resolve;
        use std::str::FromStr;
        for name in ["localhost", "kubernetes.default.svc"] {
            let name = reqwest::dns::Name::from_str(name).unwrap();
            let e = runtime.block_on(resolver.resolve(name)).err().unwrap();
            assert!(e.to_string().contains("is refused"), "{e}");
        }
        let allowed = CheckedResolver::new(
            "http://x:80/",
            &AllowList::parse(&["::1", "127.0.0.1"]).unwrap(),
        );
        let name = reqwest::dns::Name::from_str("localhost").unwrap();
        // `localhost` is refused by name, whatever its addresses.
        assert!(runtime.block_on(allowed.resolve(name)).is_err());
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
