//! SSH credentials for gitoxide, which runs the `ssh` program (OpenSSH) for `ssh://` and
//! `user@host:path` URLs. Everything ssh needs is written into a private temporary directory
//! (mode 0700; files 0600) and named by an `ssh_config` file, so that the command gitoxide runs
//! is `ssh -F <dir>/config` — the key never appears in a process argument or the environment of
//! the ssh process:
//!
//! - `id`: the private key (OpenSSH or PEM format);
//! - `known_hosts`: the `known_hosts` key of the credentials Secret when it has one — then the
//!   server's host key must match it (`StrictHostKeyChecking yes`); otherwise the file starts
//!   empty and the host key is accepted on first use (`StrictHostKeyChecking accept-new`), which
//!   protects against nothing on a first connection: set `known_hosts` in production;
//! - `passphrase` and `askpass`: when the key has a passphrase, ssh reads it through
//!   `SSH_ASKPASS` (a two-line shell script that prints the file; OpenSSH ≥ 8.4 with
//!   `SSH_ASKPASS_REQUIRE=force`).
//!
//! gitoxide runs the command through `/bin/sh` (it has arguments), so both `sh` and `ssh` must
//! be installed where this runs. Dropping [`SshFiles`] removes the directory.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub struct SshFiles {
    dir: tempfile::TempDir,
    /// Environment assignments before `ssh` (the askpass helper).
    env: String,
    /// `-o` options from [`SshFiles::bound`], before `-F` so they win over the config file.
    options: String,
    /// `-F <config> "$@"` and the stderr redirection.
    tail: String,
    passphrase: bool,
}

/// Pure: the ssh options that end a connection to a hung server within about `within`:
/// `ConnectTimeout` (covers the TCP connect and the SSH banner exchange) and keep-alive probes
/// (`ServerAliveInterval` × `ServerAliveCountMax`) once connected.
pub fn time_limits(within: std::time::Duration) -> Vec<(&'static str, u64)> {
    let secs = within.as_secs().max(1);
    vec![
        ("ConnectTimeout", secs.min(30)),
        ("ServerAliveInterval", (secs / 3).clamp(1, 15)),
        ("ServerAliveCountMax", 2),
    ]
}

impl std::fmt::Debug for SshFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SshFiles({})", self.dir.path().display())
    }
}

/// Why the SSH files could not be written. Messages never hold the key or its passphrase.
#[derive(thiserror::Error, Debug)]
pub enum SshError {
    #[error(
        "the SSH private key is not a PEM or OpenSSH private key (it should start with \
         -----BEGIN … PRIVATE KEY-----)"
    )]
    NotAKey,
    #[error("cannot create a temporary directory for the SSH key in {}: {source}", .dir.display())]
    TempDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create {}: {source}", .path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not UTF-8", .0.display())]
    NotUtf8(PathBuf),
    #[error("the temporary directory {0:?} has a quote in its path; set TMPDIR")]
    Quote(String),
}

fn write_private(path: &Path, contents: &[u8], mode: u32) -> Result<(), SshError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| SshError::Create {
            path: path.to_path_buf(),
            source,
        })?;
    f.write_all(contents).map_err(|source| SshError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// A path for a single-quoted shell word and a double-quoted ssh_config value.
fn quotable(path: &Path) -> Result<String, SshError> {
    let s = path
        .to_str()
        .ok_or_else(|| SshError::NotUtf8(path.to_path_buf()))?;
    if s.contains(['\'', '"', '\\', '\n']) {
        return Err(SshError::Quote(s.to_string()));
    }
    Ok(s.to_string())
}

/// OpenSSH wants LF line ends and a final newline in key files.
fn normalize(text: &str) -> String {
    let mut t = text.replace("\r\n", "\n").trim().to_string();
    t.push('\n');
    t
}

/// The private temporary directory (mode 0700) that holds one session's files.
fn private_dir() -> Result<tempfile::TempDir, SshError> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix("git-ssh-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|source| SshError::TempDir {
            dir: std::env::temp_dir(),
            source,
        })
}

/// Writes `known_hosts` (empty without lines) and returns the `StrictHostKeyChecking` value.
fn write_known_hosts(root: &Path, known_hosts: Option<&str>) -> Result<&'static str, SshError> {
    match known_hosts.map(str::trim).filter(|k| !k.is_empty()) {
        Some(k) => {
            write_private(&root.join("known_hosts"), normalize(k).as_bytes(), 0o600)?;
            Ok("yes")
        }
        None => {
            write_private(&root.join("known_hosts"), b"", 0o600)?;
            Ok("accept-new")
        }
    }
}

/// Writes the passphrase and the askpass script that prints it; returns the environment
/// assignments that make ssh use the script.
fn write_askpass(root: &Path, pass: &str) -> Result<String, SshError> {
    write_private(&root.join("passphrase"), pass.as_bytes(), 0o600)?;
    let script = format!(
        "#!/bin/sh\nexec cat '{}'\n",
        quotable(&root.join("passphrase"))?
    );
    write_private(&root.join("askpass"), script.as_bytes(), 0o700)?;
    Ok(format!(
        "SSH_ASKPASS='{}' SSH_ASKPASS_REQUIRE=force ",
        quotable(&root.join("askpass"))?
    ))
}

/// Writes the `ssh_config` naming the key and `known_hosts` of `root`.
fn write_config(root: &Path, strict: &str, batch: bool) -> Result<(), SshError> {
    let config = format!(
        "# One git operation's SSH settings (pulumi-gitauth); removed afterwards.\n\
         Host *\n\
         \x20 IdentityFile \"{id}\"\n\
         \x20 IdentitiesOnly yes\n\
         \x20 IdentityAgent none\n\
         \x20 UserKnownHostsFile \"{known}\"\n\
         \x20 GlobalKnownHostsFile /dev/null\n\
         \x20 StrictHostKeyChecking {strict}\n\
         \x20 HashKnownHosts no\n\
         \x20 UpdateHostKeys no\n\
         \x20 PreferredAuthentications publickey\n\
         \x20 PasswordAuthentication no\n\
         \x20 KbdInteractiveAuthentication no\n\
         \x20 BatchMode {batch}\n\
         \x20 NumberOfPasswordPrompts 1\n\
         \x20 ConnectTimeout 30\n\
         \x20 ServerAliveInterval 15\n\
         \x20 ServerAliveCountMax 4\n\
         \x20 LogLevel ERROR\n",
        id = quotable(&root.join("id"))?,
        known = quotable(&root.join("known_hosts"))?,
        batch = if batch { "yes" } else { "no" },
    );
    write_private(&root.join("config"), config.as_bytes(), 0o600)
}

impl SshFiles {
    pub fn new(
        private_key: &str,
        passphrase: Option<&str>,
        known_hosts: Option<&str>,
    ) -> Result<SshFiles, SshError> {
        if !private_key.contains("PRIVATE KEY-----") {
            return Err(SshError::NotAKey);
        }
        let dir = private_dir()?;
        let root = dir.path();
        write_private(&root.join("id"), normalize(private_key).as_bytes(), 0o600)?;
        let strict = write_known_hosts(root, known_hosts)?;
        let passphrase = passphrase.filter(|p| !p.is_empty());
        let env = match passphrase {
            Some(pass) => write_askpass(root, pass)?,
            None => String::new(),
        };
        write_config(root, strict, passphrase.is_none())?;
        // ssh's own messages go to a file of the session, read by `Session::explain` (gitoxide
        // would recognise only some of them and print the others on our stderr).
        let tail = format!(
            "-F '{}' \"$@\" 2>>'{}'",
            quotable(&root.join("config"))?,
            quotable(&root.join("ssh.log"))?
        );
        Ok(SshFiles {
            dir,
            env,
            options: String::new(),
            tail,
            passphrase: passphrase.is_some(),
        })
    }

    /// What ssh printed on its standard error (the last lines).
    pub fn stderr(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("ssh.log")).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        lines[lines.len().saturating_sub(5)..].join("; ")
    }

    pub fn has_passphrase(&self) -> bool {
        self.passphrase
    }

    /// The command for `core.sshCommand` (run through `sh`).
    pub fn command(&self) -> String {
        format!("{}ssh {}{}", self.env, self.options, self.tail)
    }

    /// Ends connections to a hung server within about `within` ([`time_limits`]); for calls
    /// with a deadline (ls-remote), not for clones, whose transfers may take long.
    pub fn bound(&mut self, within: std::time::Duration) {
        self.options = time_limits(within)
            .into_iter()
            .map(|(k, v)| format!("-o {k}={v} "))
            .collect();
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\r\nAAAAsecretbody\r\n-----END OPENSSH PRIVATE KEY-----";

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_are_private_and_the_command_names_no_secret() {
        let f = SshFiles::new(KEY, None, Some("h ssh-ed25519 AAAAhost")).unwrap();
        let dir = f.dir();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("id")), 0o600);
        assert_eq!(
            std::fs::read_to_string(dir.join("id")).unwrap(),
            "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAsecretbody\n-----END OPENSSH PRIVATE KEY-----\n"
        );
        let config = std::fs::read_to_string(dir.join("config")).unwrap();
        assert!(config.contains("StrictHostKeyChecking yes"), "{config}");
        assert!(config.contains("BatchMode yes"), "{config}");
        assert!(!f.command().contains("secretbody"));
        assert_eq!(
            f.command(),
            format!("ssh -F '{0}/config' \"$@\" 2>>'{0}/ssh.log'", dir.display())
        );
        drop(f);
        assert!(!dir.exists());
    }

    #[test]
    fn passphrase_goes_through_askpass_and_unknown_hosts_are_accepted_new() {
        let f = SshFiles::new(KEY, Some("pass phrase!"), None).unwrap();
        let dir = f.dir();
        let config = std::fs::read_to_string(dir.join("config")).unwrap();
        assert!(
            config.contains("StrictHostKeyChecking accept-new"),
            "{config}"
        );
        assert!(config.contains("BatchMode no"), "{config}");
        assert_eq!(mode(&dir.join("askpass")), 0o700);
        assert_eq!(mode(&dir.join("passphrase")), 0o600);
        assert!(f.command().starts_with("SSH_ASKPASS='"));
        assert!(!f.command().contains("pass phrase"));
        let out = std::process::Command::new(dir.join("askpass"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "pass phrase!");
    }

    #[test]
    fn bounded_connections_end_by_the_deadline() {
        use std::time::Duration;
        assert_eq!(
            time_limits(Duration::from_secs(60)),
            vec![
                ("ConnectTimeout", 30),
                ("ServerAliveInterval", 15),
                ("ServerAliveCountMax", 2)
            ]
        );
        assert_eq!(
            time_limits(Duration::from_millis(500)),
            vec![
                ("ConnectTimeout", 1),
                ("ServerAliveInterval", 1),
                ("ServerAliveCountMax", 2)
            ]
        );
        let mut f = SshFiles::new(KEY, None, None).unwrap();
        f.bound(Duration::from_secs(9));
        let dir = f.dir();
        assert_eq!(
            f.command(),
            format!(
                "ssh -o ConnectTimeout=9 -o ServerAliveInterval=3 -o ServerAliveCountMax=2 \
                 -F '{0}/config' \"$@\" 2>>'{0}/ssh.log'",
                dir.display()
            )
        );
    }

    #[test]
    fn not_a_key_is_refused_without_echoing_it() {
        let e = SshFiles::new("hunter2", None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a PEM or OpenSSH private key"), "{e}");
        assert!(!e.contains("hunter2"));
    }
}
