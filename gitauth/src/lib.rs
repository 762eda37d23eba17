//! Git credentials as the Pulumi Kubernetes Operator defines them, shared by the operator (its
//! `ls-remote` for branch tracking) and the runner (the clone in each Job's `fetch` container),
//! so that both sides authenticate the same way:
//!
//! - HTTP(S) basic auth (`gitAuth.basicAuth`), a personal access token (`gitAuth.accessToken`,
//!   sent as basic auth with the user `git`, as PKO does), and a GitHub App
//!   (`gitAuth.githubApp`: a JWT signed with the app's key is exchanged for an installation token,
//!   sent as basic auth with the user `x-access-token`);
//! - SSH (`gitAuth.sshAuth`): gitoxide runs the `ssh` program; the key (and its passphrase, and
//!   the `known_hosts` of the same Secret) go into a private temporary directory (mode 0700,
//!   files 0600) that an `ssh_config` file points at — never into a process argument.
//!
//! Credential values never reach a message: [`Session::redact`] scrubs every error text.

pub mod clone;
pub mod github_app;
pub mod redact;
pub mod ssh;

use gix::credentials::helper::Action;
use gix::credentials::protocol;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The GitHub API used for GitHub App token exchanges unless configured otherwise.
pub const DEFAULT_GITHUB_API_URL: &str = "https://api.github.com";
/// The user name GitHub expects with an installation token.
pub const GITHUB_APP_USER: &str = "x-access-token";
/// The user name sent with a personal access token (PKO's choice).
pub const TOKEN_USER: &str = "git";
/// The key of an SSH credentials Secret that may hold the server's `known_hosts` lines.
pub const KNOWN_HOSTS_KEY: &str = "known_hosts";

/// Environment variables of the `fetch` container: PKO's names (its workspace pod's fetch
/// container), plus `GIT_SSH_KNOWN_HOSTS` and `GITHUB_API_URL`, which are ours.
pub mod env {
    pub const SSH_PRIVATE_KEY: &str = "GIT_SSH_PRIVATE_KEY";
    pub const SSH_KNOWN_HOSTS: &str = "GIT_SSH_KNOWN_HOSTS";
    pub const USERNAME: &str = "GIT_USERNAME";
    /// The HTTPS password, or the passphrase of the SSH key.
    pub const PASSWORD: &str = "GIT_PASSWORD";
    pub const TOKEN: &str = "GIT_TOKEN";
    pub const GITHUB_APP_ID: &str = "GIT_GITHUB_APP_ID";
    pub const GITHUB_APP_INSTALLATION_ID: &str = "GIT_GITHUB_APP_INSTALLATION_ID";
    pub const GITHUB_APP_PRIVATE_KEY: &str = "GIT_GITHUB_APP_PRIVATE_KEY";
    pub const GITHUB_API_URL: &str = "GITHUB_API_URL";
}

/// Why credentials cannot be read from the environment, or cannot work with a URL. URLs in
/// messages are shown without user info.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum CredentialsError {
    /// The names of the missing variables, comma-separated.
    #[error("GitHub App credentials are incomplete: {0} not set")]
    IncompleteGitHubApp(String),
    #[error("{} is set but {} is not", env::USERNAME, env::PASSWORD)]
    UsernameWithoutPassword,
    #[error(
        "an SSH key (gitAuth.sshAuth) needs an SSH repository URL (ssh://… or user@host:path), not {0}"
    )]
    SshKeyNeedsSshUrl(String),
    #[error(
        "{kind} credentials need an HTTP(S) repository URL; {url} is an SSH URL (use gitAuth.sshAuth)"
    )]
    NeedsHttpUrl { kind: &'static str, url: String },
}

/// Why a [`Session`] could not be prepared. The texts of the SSH and GitHub App failures are
/// redacted with the session's secrets.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum SessionError {
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// A redacted [`ssh::SshError`].
    #[error("{0}")]
    Ssh(String),
    /// A redacted [`github_app::GitHubAppError`].
    #[error("{0}")]
    GitHubApp(String),
}

/// Resolved git credentials (the values, not references to them).
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    /// Anonymous access.
    #[default]
    None,
    /// HTTP(S) basic auth; also a token (user `git`).
    Basic { username: String, password: String },
    /// An SSH private key (OpenSSH or PEM), its optional passphrase, and optional `known_hosts`
    /// lines for the server (without them the host key is accepted on first use).
    Ssh {
        private_key: String,
        passphrase: Option<String>,
        known_hosts: Option<String>,
    },
    /// A GitHub App installation; exchanged for an installation token for each session.
    GitHubApp {
        app_id: String,
        installation_id: String,
        private_key: String,
        api_url: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({})", self.kind())
    }
}

fn nonempty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

/// An error with its chain of sources, each cause once (gitoxide nests them deeply).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// A one-line value (user name, password, token, ID) as stored in a Secret: without the
/// trailing line break that `echo … > file` or `kubectl create secret --from-file` leave.
pub fn line(value: &str) -> String {
    value.trim_end_matches(['\r', '\n']).to_string()
}

impl Credentials {
    /// A personal access token, as PKO sends it.
    pub fn token(token: impl Into<String>) -> Credentials {
        Credentials::Basic {
            username: TOKEN_USER.into(),
            password: token.into(),
        }
    }

    /// From the `fetch` container's environment ([`env`]). Precedence as on the operator side
    /// (PKO's): an SSH key, then a token, then a GitHub App, then user name and password.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Credentials, CredentialsError> {
        let get = |k: &str| nonempty(get(k));
        if let Some(private_key) = get(env::SSH_PRIVATE_KEY) {
            return Ok(Credentials::Ssh {
                private_key,
                passphrase: get(env::PASSWORD).map(|p| line(&p)),
                known_hosts: get(env::SSH_KNOWN_HOSTS),
            });
        }
        if let Some(token) = get(env::TOKEN) {
            return Ok(Credentials::token(line(&token)));
        }
        let app = [
            env::GITHUB_APP_ID,
            env::GITHUB_APP_INSTALLATION_ID,
            env::GITHUB_APP_PRIVATE_KEY,
        ]
        .map(|k| (k, get(k)));
        if app.iter().any(|(_, v)| v.is_some()) {
            let missing: Vec<&str> = app
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(k, _)| *k)
                .collect();
            if !missing.is_empty() {
                return Err(CredentialsError::IncompleteGitHubApp(missing.join(", ")));
            }
            let [(_, id), (_, installation), (_, key)] = app;
            return Ok(Credentials::GitHubApp {
                app_id: id.unwrap_or_default().trim().to_string(),
                installation_id: installation.unwrap_or_default().trim().to_string(),
                private_key: key.unwrap_or_default(),
                api_url: get(env::GITHUB_API_URL)
                    .unwrap_or_else(|| DEFAULT_GITHUB_API_URL.to_string()),
            });
        }
        match (get(env::USERNAME), get(env::PASSWORD)) {
            (Some(username), Some(password)) => Ok(Credentials::Basic {
                username: line(&username),
                password: line(&password),
            }),
            (Some(_), None) => Err(CredentialsError::UsernameWithoutPassword),
            _ => Ok(Credentials::None),
        }
    }

    /// [`Credentials::from_lookup`] on this process's environment.
    pub fn from_env() -> Result<Credentials, CredentialsError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Credentials::None => "none",
            Credentials::Basic { username, .. } if username == TOKEN_USER => "token",
            Credentials::Basic { .. } => "basic auth",
            Credentials::Ssh { .. } => "SSH key",
            Credentials::GitHubApp { .. } => "GitHub App",
        }
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Credentials::None)
    }

    /// A digest of the credentials (empty for none): equal credentials share cache entries,
    /// different ones never do, and the digest reveals nothing about the values.
    pub fn fingerprint(&self) -> String {
        let fields: Vec<&str> = match self {
            Credentials::None => return String::new(),
            Credentials::Basic { username, password } => vec!["basic", username, password],
            Credentials::Ssh {
                private_key,
                passphrase,
                known_hosts,
            } => vec![
                "ssh",
                private_key,
                passphrase.as_deref().unwrap_or("\0"),
                known_hosts.as_deref().unwrap_or("\0"),
            ],
            Credentials::GitHubApp {
                app_id,
                installation_id,
                private_key,
                api_url,
            } => vec!["github-app", app_id, installation_id, private_key, api_url],
        };
        let mut h = Sha256::new();
        for f in fields {
            h.update((f.len() as u64).to_be_bytes());
            h.update(f.as_bytes());
        }
        h.finalize()
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The secret values, to be scrubbed from any message.
    pub fn secret_values(&self) -> Vec<&str> {
        match self {
            Credentials::None => vec![],
            Credentials::Basic { password, .. } => vec![password],
            Credentials::Ssh {
                private_key,
                passphrase,
                ..
            } => {
                let mut v = vec![private_key.as_str()];
                v.extend(passphrase.as_deref());
                v
            }
            Credentials::GitHubApp { private_key, .. } => vec![private_key],
        }
    }

    /// Refuses credentials that cannot work with the URL's transport, with a clear message
    /// (an SSH key for an `https://` URL, a password for an SSH URL).
    pub fn check_url(&self, url: &str) -> Result<(), CredentialsError> {
        let scheme = transport(url);
        match (self, scheme) {
            (Credentials::Ssh { .. }, Transport::Http) => {
                Err(CredentialsError::SshKeyNeedsSshUrl(redact::urls(url)))
            }
            (Credentials::Basic { .. } | Credentials::GitHubApp { .. }, Transport::Ssh) => {
                Err(CredentialsError::NeedsHttpUrl {
                    kind: self.kind(),
                    url: redact::urls(url),
                })
            }
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Ssh,
    Other,
}

/// The transport a repository URL uses (scp-like `user@host:path` is SSH, as in git).
pub fn transport(url: &str) -> Transport {
    let bytes: &[u8] = url.trim().as_bytes();
    match gix::url::parse(bytes) {
        Ok(u) => match u.scheme {
            gix::url::Scheme::Http | gix::url::Scheme::Https => Transport::Http,
            gix::url::Scheme::Ssh => Transport::Ssh,
            _ => Transport::Other,
        },
        Err(_) => Transport::Other,
    }
}

/// What the server said about authentication during one operation.
#[derive(Clone, Default, Debug)]
pub struct AuthFlags {
    asked: Arc<AtomicBool>,
    rejected: Arc<AtomicBool>,
}

impl AuthFlags {
    /// The server asked for credentials.
    pub fn asked(&self) -> bool {
        self.asked.load(Ordering::SeqCst)
    }
    /// The server refused the credentials we gave.
    pub fn rejected(&self) -> bool {
        self.rejected.load(Ordering::SeqCst)
    }
}

/// Credentials prepared for network operations: the HTTP identity (for a GitHub App, an
/// installation token obtained here) and the SSH files. Dropping it removes the files.
pub struct Session {
    kind: &'static str,
    /// `host[:port]` of the repository: credentials are given to that host only, never to
    /// one a redirect leads to.
    host: Option<String>,
    http: Option<(String, String)>,
    ssh: Option<ssh::SshFiles>,
    redactor: redact::Redactor,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session({})", self.kind)
    }
}

/// `host[:port]` of `url` (lower case, the port only when written), as git's credential
/// protocol names it.
pub fn authority_of(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?.to_ascii_lowercase();
    Some(match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

/// Whether a credential request for `asked` is for the repository's own host.
fn same_host(repository: Option<&str>, asked: Option<&str>) -> bool {
    match (repository, asked) {
        (Some(r), Some(a)) => r.eq_ignore_ascii_case(a),
        _ => false,
    }
}

impl Session {
    /// Prepares `creds` for `url` (blocking: a GitHub App exchange is an HTTP call, bounded by
    /// [`github_app::EXCHANGE_TIMEOUT`]).
    pub fn prepare(creds: &Credentials, url: &str) -> Result<Session, SessionError> {
        Session::prepare_within(creds, url, github_app::EXCHANGE_TIMEOUT)
    }

    /// [`Session::prepare`] with the network work (a GitHub App exchange) bounded by `within`.
    pub fn prepare_within(
        creds: &Credentials,
        url: &str,
        within: std::time::Duration,
    ) -> Result<Session, SessionError> {
        ensure_crypto_provider();
        let mut redactor = redact::Redactor::default();
        for v in creds.secret_values() {
            redactor.add(v);
        }
        creds.check_url(url)?;
        let mut session = Session {
            kind: creds.kind(),
            host: authority_of(url),
            http: None,
            ssh: None,
            redactor,
        };
        match creds {
            Credentials::None => {}
            Credentials::Basic { username, password } => {
                session.http = Some((username.clone(), password.clone()));
            }
            Credentials::Ssh {
                private_key,
                passphrase,
                known_hosts,
            } => {
                let files =
                    ssh::SshFiles::new(private_key, passphrase.as_deref(), known_hosts.as_deref())
                        .map_err(|e| SessionError::Ssh(session.redact(&e.to_string())))?;
                session.ssh = Some(files);
            }
            Credentials::GitHubApp {
                app_id,
                installation_id,
                private_key,
                api_url,
            } => {
                let token = github_app::installation_token_within(
                    api_url,
                    app_id,
                    installation_id,
                    private_key,
                    within,
                )
                .map_err(|e| SessionError::GitHubApp(session.redact(&e.to_string())))?;
                session.redactor.add(&token);
                session.http = Some((GITHUB_APP_USER.to_string(), token));
            }
        }
        Ok(session)
    }

    /// A session without credentials.
    pub fn anonymous() -> Session {
        Session {
            kind: "none",
            host: None,
            http: None,
            ssh: None,
            redactor: redact::Redactor::default(),
        }
    }

    /// gitoxide configuration for this session (`core.sshCommand` for SSH).
    pub fn config_overrides(&self) -> Vec<String> {
        match &self.ssh {
            Some(files) => vec![
                format!("core.sshCommand={}", files.command()),
                // Skips gitoxide's `ssh -G` probe: the command is OpenSSH.
                "ssh.variant=ssh".to_string(),
            ],
            None => vec![],
        }
    }

    /// Makes SSH connections of this session end within about `within` when the server hangs
    /// (see [`ssh::time_limits`]); no effect on other transports.
    pub fn bound_ssh(&mut self, within: std::time::Duration) {
        if let Some(files) = &mut self.ssh {
            files.bound(within);
        }
    }

    pub fn has_http_identity(&self) -> bool {
        self.http.is_some()
    }

    pub fn is_ssh(&self) -> bool {
        self.ssh.is_some()
    }

    /// The credentials callback for a gitoxide connection: answers with our identity (never
    /// prompts, never runs helpers) and records what the server asked for in `flags`.
    pub fn credentials_fn(
        &self,
        flags: &AuthFlags,
    ) -> impl FnMut(Action) -> gix::error::Result<Option<protocol::Outcome>>
           + Clone
           + Send
           + Sync
           + 'static {
        let identity = self.http.clone();
        let flags = flags.clone();
        let host = self.host.clone();
        move |action| match action {
            Action::Erase(_) => {
                flags.rejected.store(true, Ordering::SeqCst);
                Ok(None)
            }
            Action::Get(ctx) => {
                flags.asked.store(true, Ordering::SeqCst);
                // gitoxide may hand over only the URL: take the host from it then.
                let asked = ctx
                    .host
                    .clone()
                    .or_else(|| ctx.url.as_ref().and_then(|u| authority_of(&u.to_string())));
                if !same_host(host.as_deref(), asked.as_deref()) {
                    return Ok(None);
                }
                Ok(identity
                    .as_ref()
                    .map(|(username, password)| protocol::Outcome {
                        identity: gix::sec::identity::Account {
                            username: username.clone(),
                            password: password.clone(),
                            oauth_refresh_token: None,
                        },
                        next: ctx.into(),
                    }))
            }
            Action::Store(_) => Ok(None),
        }
    }

    /// `text` without credential values or URL user-info.
    pub fn redact(&self, text: &str) -> String {
        self.redactor.apply(&redact::urls(text))
    }

    /// A clear description of an authentication failure, or `None` when `message` (a git
    /// error) is not about authentication. The result is redacted.
    pub fn explain(&self, flags: &AuthFlags, message: &str) -> Option<String> {
        let mut message = self.redact(message);
        if let Some(files) = &self.ssh {
            let said = files.stderr();
            if !said.is_empty() {
                message = format!("{message} (ssh: {})", self.redact(&said));
            }
        }
        let denied = message.contains("Permission denied") || message.contains("permission denied");
        if let Some(files) = &self.ssh {
            if message.contains("Host key verification failed")
                || message.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
                || message.contains("host key for")
            {
                return Some(format!(
                    "the SSH server's host key does not match the known_hosts of the credentials \
                     Secret: {message}"
                ));
            }
            // gitoxide asks for credentials when ssh reports an authentication failure.
            if denied || flags.asked() || flags.rejected() {
                let hint = if files.has_passphrase() {
                    " (or the key's passphrase is wrong)"
                } else {
                    ""
                };
                return Some(format!("the SSH server rejected the key{hint}: {message}"));
            }
            if message.contains("timed out") {
                return Some(format!("the SSH server did not answer in time: {message}"));
            }
            if message.contains("ssh: not found") || message.contains("ssh: No such file") {
                return Some(format!(
                    "the ssh program is not installed in this image (SSH repositories need \
                     OpenSSH's client): {message}"
                ));
            }
            return None;
        }
        if flags.rejected() {
            return Some(format!(
                "the server rejected the credentials ({}): {message}",
                self.kind
            ));
        }
        if flags.asked() && self.http.is_none() {
            return Some(
                "the server requires authentication, and no credentials were given \
                 (set gitAuth, or gitAuthSecret, on the Stack)"
                    .to_string(),
            );
        }
        if denied {
            return Some(format!(
                "the SSH server refused access, and no SSH key was given \
                 (gitAuth.sshAuth): {message}"
            ));
        }
        None
    }
}

/// Installs ring as rustls' process-wide crypto provider (reqwest is built without one).
/// Idempotent.
pub fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_go_only_to_the_repository_host() {
        assert_eq!(
            authority_of("https://Git.Example.com/org/repo.git").as_deref(),
            Some("git.example.com")
        );
        assert_eq!(
            authority_of("http://127.0.0.1:8080/r.git").as_deref(),
            Some("127.0.0.1:8080")
        );
        let creds = Credentials::Basic {
            username: "u".into(),
            password: "canary-pw".into(),
        };
        let session = Session::prepare(&creds, "https://git.example.com/org/repo.git").unwrap();
        let flags = AuthFlags::default();
        let mut answer = session.credentials_fn(&flags);
        let ask = |host: &str| Action::get_for_url(format!("https://{host}/org/repo.git"));
        let given = answer(ask("git.example.com")).unwrap();
        assert_eq!(given.map(|o| o.identity.password), Some("canary-pw".into()));
        // A redirect to another host (or port) gets nothing.
        for other in ["evil.example.net", "git.example.com:8443", "127.0.0.1"] {
            assert!(answer(ask(other)).unwrap().is_none(), "{other}");
        }
    }

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn env_precedence_is_pkos() {
        let c = Credentials::from_lookup(lookup(&[("GIT_USERNAME", "u"), ("GIT_PASSWORD", "p")]))
            .unwrap();
        assert_eq!(
            c,
            Credentials::Basic {
                username: "u".into(),
                password: "p".into()
            }
        );
        // A token wins over user name and password (gitAuthSecret exposes every key).
        let c = Credentials::from_lookup(lookup(&[
            ("GIT_USERNAME", "u"),
            ("GIT_PASSWORD", "p"),
            ("GIT_TOKEN", "t"),
        ]))
        .unwrap();
        assert_eq!(c, Credentials::token("t"));
        // An SSH key wins over everything; GIT_PASSWORD is then its passphrase.
        let c = Credentials::from_lookup(lookup(&[
            ("GIT_SSH_PRIVATE_KEY", "KEY"),
            ("GIT_PASSWORD", "pp"),
            ("GIT_TOKEN", "t"),
            ("GIT_SSH_KNOWN_HOSTS", "h ssh-ed25519 AAAA"),
        ]))
        .unwrap();
        assert_eq!(
            c,
            Credentials::Ssh {
                private_key: "KEY".into(),
                passphrase: Some("pp".into()),
                known_hosts: Some("h ssh-ed25519 AAAA".into())
            }
        );
        let c = Credentials::from_lookup(lookup(&[
            ("GIT_GITHUB_APP_ID", "12"),
            ("GIT_GITHUB_APP_INSTALLATION_ID", " 34\n"),
            ("GIT_GITHUB_APP_PRIVATE_KEY", "PEM"),
            ("GIT_USERNAME", "u"),
            ("GIT_PASSWORD", "p"),
        ]))
        .unwrap();
        assert_eq!(
            c,
            Credentials::GitHubApp {
                app_id: "12".into(),
                installation_id: "34".into(),
                private_key: "PEM".into(),
                api_url: DEFAULT_GITHUB_API_URL.into()
            }
        );
        let e = Credentials::from_lookup(lookup(&[("GIT_GITHUB_APP_ID", "12")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("GIT_GITHUB_APP_PRIVATE_KEY"), "{e}");
        let e = Credentials::from_lookup(lookup(&[("GIT_USERNAME", "u")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("GIT_PASSWORD"), "{e}");
        // Empty values (optional secretKeyRefs of a gitAuthSecret) count as unset.
        let c =
            Credentials::from_lookup(lookup(&[("GIT_SSH_PRIVATE_KEY", ""), ("GIT_TOKEN", "t")]))
                .unwrap();
        assert_eq!(c, Credentials::token("t"));
        assert_eq!(
            Credentials::from_lookup(lookup(&[])).unwrap(),
            Credentials::None
        );
    }

    #[test]
    fn fingerprints_differ_by_value_and_hide_it() {
        let a = Credentials::token("secret-one");
        let b = Credentials::token("secret-two");
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(
            a.fingerprint(),
            Credentials::token("secret-one").fingerprint()
        );
        assert!(!a.fingerprint().contains("secret"));
        assert_eq!(Credentials::None.fingerprint(), "");
        // Field boundaries matter.
        let x = Credentials::Basic {
            username: "ab".into(),
            password: "c".into(),
        };
        let y = Credentials::Basic {
            username: "a".into(),
            password: "bc".into(),
        };
        assert_ne!(x.fingerprint(), y.fingerprint());
        assert_eq!(format!("{a:?}"), "Credentials(token)");
    }

    #[test]
    fn url_and_credential_kinds_must_match() {
        let ssh = Credentials::Ssh {
            private_key: "k".into(),
            passphrase: None,
            known_hosts: None,
        };
        assert!(ssh.check_url("git@github.com:org/repo.git").is_ok());
        assert!(ssh.check_url("ssh://git@host:2222/r.git").is_ok());
        let e = ssh
            .check_url("https://u:pw@github.com/org/repo")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("SSH repository URL") && !e.contains("pw@"),
            "{e}"
        );
        let tok = Credentials::token("t");
        assert!(tok.check_url("https://github.com/org/repo").is_ok());
        assert!(tok.check_url("file:///tmp/x").is_ok());
        assert!(tok
            .check_url("git@github.com:org/repo.git")
            .unwrap_err()
            .to_string()
            .contains("sshAuth"));
        assert_eq!(transport("http://127.0.0.1:1/x.git"), Transport::Http);
        assert_eq!(transport("/tmp/x.git"), Transport::Other);
    }

    #[test]
    fn explanations_are_clear_and_redacted() {
        let creds = Credentials::Basic {
            username: "alice".into(),
            password: "hunter2-pw".into(),
        };
        let s = Session::prepare(&creds, "https://h/r.git").unwrap();
        let flags = AuthFlags::default();
        assert_eq!(s.explain(&flags, "some network error"), None);
        flags.asked.store(true, Ordering::SeqCst);
        flags.rejected.store(true, Ordering::SeqCst);
        let m = s
            .explain(&flags, "HTTP 401 for https://alice:hunter2-pw@h/r.git")
            .unwrap();
        assert!(m.contains("rejected the credentials (basic auth)"), "{m}");
        assert!(!m.contains("hunter2-pw"), "{m}");
        let anon = Session::anonymous();
        let flags = AuthFlags::default();
        flags.asked.store(true, Ordering::SeqCst);
        assert!(anon
            .explain(&flags, "x")
            .unwrap()
            .contains("no credentials were given"));
        let m = anon
            .explain(
                &AuthFlags::default(),
                "git@h: Permission denied (publickey).",
            )
            .unwrap();
        assert!(m.contains("no SSH key was given"), "{m}");
    }

    #[test]
    fn the_callback_answers_with_the_identity_and_records_rejection() {
        let s = Session::prepare(&Credentials::token("tok-1"), "https://h/r").unwrap();
        let flags = AuthFlags::default();
        let mut cb = s.credentials_fn(&flags);
        let ctx = protocol::Context::from_url("https://h/r", Default::default());
        let out = cb(Action::Get(ctx.clone())).unwrap().unwrap();
        assert_eq!(out.identity.username, "git");
        assert_eq!(out.identity.password, "tok-1");
        assert!(flags.asked() && !flags.rejected());
        cb(Action::Erase(Default::default())).unwrap();
        assert!(flags.rejected());
        let mut anon = Session::anonymous().credentials_fn(&AuthFlags::default());
        assert!(anon(Action::Get(ctx)).unwrap().is_none());
    }
}
