//! Cloning a git source through gitoxide (pure Rust): HTTP(S) via reqwest + rustls, `git://`,
//! and `file://` or plain paths (these two spawn `git-upload-pack`, so they work where git is
//! installed — tests and custom images; the runner image itself has no git). Shared by the
//! runner (programs, public policy packs) and the operator (policy packs with credentials).
//!
//! A spec's `commit` is checked out exactly (detached `HEAD`), fetched by its SHA — with depth 1
//! when `shallow` — and, when the server refuses to serve a bare SHA, by a full fetch of every
//! branch and tag. A `reference` alone checks out the head of that branch or tag.
//!
//! Submodules and Git LFS content are never fetched (gitoxide's clone does neither, so no
//! submodule URL is contacted and no `ext::` command runs); the runner says so when a checkout
//! has them (`runner/src/fetch/checkout.rs`).

use crate::redact;
use crate::{AuthFlags, Credentials, Session};
use gix::remote::fetch::Shallow;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A directory inside a checkout or artifact: relative, without `..` (a leading `/` is
/// dropped). The error names the directory.
pub fn sub_dir(dir: Option<&str>) -> Result<std::path::PathBuf, String> {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in Path::new(dir.unwrap_or("")).components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!(
                    "the directory {:?} must stay inside the source",
                    dir.unwrap_or_default()
                ))
            }
        }
    }
    Ok(out)
}

/// What to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitSpec {
    pub url: String,
    pub commit: Option<String>,
    pub reference: Option<String>,
    pub shallow: bool,
}

/// How many times a network fetch is tried.
const ATTEMPTS: u32 = 3;

#[derive(Debug, Clone)]
enum Strategy {
    /// Fetch only this commit (by SHA) and check it out.
    Revision(gix::ObjectId),
    /// Fetch every branch and tag, then check out this commit.
    Everything(gix::ObjectId),
    /// Fetch this branch or tag and check out its head.
    Reference(String),
    /// Fetch the remote's default branch and check out its head.
    RemoteHead,
}

/// Clones `spec` into `dest` (which must be empty or absent) and returns the SHA checked out.
/// The error is a message with no credential in it; `log` gets what happens on the way.
pub fn fetch(
    spec: &GitSpec,
    dest: &Path,
    credentials: &Credentials,
    log: &dyn Fn(String),
) -> Result<String, String> {
    let shown_url = redact::urls(&spec.url);
    let target = match (&spec.commit, &spec.reference) {
        (Some(c), _) => format!("commit {c}"),
        (None, Some(r)) => format!("reference {r}"),
        (None, None) => "the default branch".to_string(),
    };
    let fail =
        |detail: String| redact::urls(&format!("cannot fetch {shown_url} at {target}: {detail}"));
    let commit = match spec.commit.as_deref().map(str::trim) {
        Some(c) => Some(
            gix::ObjectId::from_hex(c.as_bytes())
                .map_err(|_| fail(format!("{c:?} is not a full commit SHA")))?,
        ),
        None => None,
    };
    if !credentials.is_none() {
        log(format!(
            "fetching {shown_url} at {target} with credentials ({})",
            credentials.kind()
        ));
    } else {
        log(format!("fetching {shown_url} at {target}"));
    }
    // For a GitHub App this exchanges the app's key for an installation token; for SSH it
    // writes the key into a private temporary directory (removed when `auth` is dropped).
    let auth = Session::prepare(credentials, &spec.url).map_err(|e| fail(e.to_string()))?;
    let auth = &auth;
    let head = match commit {
        Some(id) => match clone_once(spec, dest, &Strategy::Revision(id), auth) {
            Ok(head) => head,
            Err(first) if !first.retry => return Err(fail(first.message)),
            Err(first) => {
                log(format!(
                    "fetching commit {id} by its SHA failed ({}); fetching every branch and tag instead",
                    redact::urls(&first.message)
                ));
                with_retries(log, || {
                    clone_once(spec, dest, &Strategy::Everything(id), auth)
                })
                .map_err(|e| fail(e.message))?
            }
        },
        None => {
            let strategy = match &spec.reference {
                Some(r) => Strategy::Reference(r.clone()),
                None => Strategy::RemoteHead,
            };
            with_retries(log, || clone_once(spec, dest, &strategy, auth))
                .map_err(|e| fail(e.message))?
        }
    };
    if let Some(id) = commit {
        let expected = id.to_string();
        if head != expected {
            return Err(fail(format!("checked out {head} instead")));
        }
    }
    log(format!("checked out {head}"));
    Ok(head)
}

/// Runs `attempt` until it succeeds, fails for good or has failed [`ATTEMPTS`] times; the
/// error is the last attempt's.
fn with_retries(
    log: &dyn Fn(String),
    mut attempt: impl FnMut() -> Result<String, CloneError>,
) -> Result<String, CloneError> {
    let mut n = 1;
    loop {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if n >= ATTEMPTS || !e.retry => return Err(e),
            Err(e) => {
                // 1 s, then 2 s: three attempts within seconds.
                let delay = Duration::from_secs(1 << (n - 1).min(4));
                log(format!(
                    "git fetch attempt {n} of {ATTEMPTS} failed ({}); retrying in {}s",
                    redact::urls(&e.message),
                    delay.as_secs()
                ));
                std::thread::sleep(delay);
                n += 1;
            }
        }
    }
}

const NOT_FOUND: &str = "is not in the repository";

/// Why one clone attempt failed; authentication problems are not worth a retry.
#[derive(Debug)]
struct CloneError {
    message: String,
    retry: bool,
}

/// Why one clone attempt failed, before [`Session::explain`] and redaction.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("cannot clean {}: {source}", .dir.display())]
    Clean {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create {}: {source}", .dir.display())]
    Create {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A gitoxide error, shown with its chain of sources.
    #[error("{}", crate::error_chain(.0.as_ref()))]
    Git(Box<dyn std::error::Error + Send + Sync>),
    #[error("commit {0} {NOT_FOUND}")]
    NotFound(gix::ObjectId),
}

impl AttemptError {
    fn git(e: impl std::error::Error + Send + Sync + 'static) -> AttemptError {
        AttemptError::Git(Box::new(e))
    }
}

fn clone_once(
    spec: &GitSpec,
    dest: &Path,
    strategy: &Strategy,
    auth: &Session,
) -> Result<String, CloneError> {
    let flags = AuthFlags::default();
    let result = clone_attempt(spec, dest, strategy, auth, &flags);
    result.map_err(|e| {
        let message = e.to_string();
        match auth.explain(&flags, &message) {
            // Authentication problems are not worth a retry.
            Some(message) => CloneError {
                message,
                retry: false,
            },
            None => CloneError {
                retry: !message.contains(NOT_FOUND),
                message: auth.redact(&message),
            },
        }
    })
}

fn clone_attempt(
    spec: &GitSpec,
    dest: &Path,
    strategy: &Strategy,
    auth: &Session,
    flags: &AuthFlags,
) -> Result<String, AttemptError> {
    empty_dir(dest)?;
    let mut prepare = prepare_clone(spec, dest, strategy, auth, flags)?;
    let interrupt = AtomicBool::new(false);
    let (mut checkout, _) = prepare
        .fetch_then_checkout(gix::progress::Discard, &interrupt)
        .map_err(AttemptError::git)?;
    if let Strategy::Everything(id) = strategy {
        point_head_at(checkout.repo(), *id)?;
    }
    let (repo, _) = checkout
        .main_worktree(gix::progress::Discard, &interrupt)
        .map_err(AttemptError::git)?;
    let head = repo.head_id().map_err(AttemptError::git)?;
    Ok(head.to_string())
}

/// Every attempt starts from an empty directory (a failed one may leave files behind).
fn empty_dir(dest: &Path) -> Result<(), AttemptError> {
    if dest.exists() {
        std::fs::remove_dir_all(dest).map_err(|source| AttemptError::Clean {
            dir: dest.to_path_buf(),
            source,
        })?;
    }
    std::fs::create_dir_all(dest).map_err(|source| AttemptError::Create {
        dir: dest.to_path_buf(),
        source,
    })
}

/// The clone of `spec.url` into `dest` as `strategy` wants it (revision or reference, depth
/// one when shallow), with the session's configuration and credentials.
fn prepare_clone(
    spec: &GitSpec,
    dest: &Path,
    strategy: &Strategy,
    auth: &Session,
    flags: &AuthFlags,
) -> Result<gix::clone::PrepareFetch, AttemptError> {
    let prepare = gix::clone::PrepareFetch::new(
        spec.url.as_str(),
        dest,
        gix::create::Kind::WithWorktree,
        gix::create::Options::default(),
        gix::open::Options::isolated().config_overrides(auth.config_overrides()),
    )
    .map_err(AttemptError::git)?;
    let prepare = match strategy {
        Strategy::Revision(id) => prepare
            .with_revision(Some(id.to_string()))
            .map_err(AttemptError::git)?,
        Strategy::Everything(_) => return Ok(with_credentials(prepare, auth, flags)),
        Strategy::Reference(name) => prepare
            .with_ref_name(Some(name.as_str()))
            .map_err(AttemptError::git)?,
        Strategy::RemoteHead => prepare,
    };
    let prepare = if spec.shallow {
        prepare.with_shallow(Shallow::DepthAtRemote(NonZeroU32::MIN))
    } else {
        prepare
    };
    Ok(with_credentials(prepare, auth, flags))
}

fn with_credentials(
    prepare: gix::clone::PrepareFetch,
    auth: &Session,
    flags: &AuthFlags,
) -> gix::clone::PrepareFetch {
    let credentials = auth.credentials_fn(flags);
    prepare.configure_connection(move |connection| {
        connection.set_credentials(credentials.clone());
        Ok(())
    })
}

/// Checks that `id` is a commit of the fetched repository and detaches `HEAD` at it.
fn point_head_at(repo: &gix::Repository, id: gix::ObjectId) -> Result<(), AttemptError> {
    let is_commit = repo
        .find_object(id)
        .map(|o| o.kind == gix::object::Kind::Commit)
        .unwrap_or(false);
    if !is_commit {
        return Err(AttemptError::NotFound(id));
    }
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit};
    repo.edit_reference(RefEdit {
        change: Change::Update {
            log: LogChange::default(),
            expected: PreviousValue::Any,
            new: gix::refs::Target::Object(id),
        },
        name: "HEAD".try_into().map_err(AttemptError::git)?,
        deref: false,
    })
    .map_err(AttemptError::git)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_sha_is_rejected_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let spec = GitSpec {
            url: "https://user:secret@example.invalid/r.git".into(),
            commit: Some("abc123".into()),
            reference: None,
            shallow: false,
        };
        let e = fetch(&spec, &dir.path().join("src"), &Credentials::None, &|_| {}).unwrap_err();
        assert!(e.contains("not a full commit SHA"), "{e}");
        assert!(e.contains("example.invalid"), "{e}");
        assert!(!e.contains("secret"), "{e}");
    }

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(["-c", "init.defaultBranch=main"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// gitoxide's clone fetches no submodule: a `file://` one stays empty and an `ext::` one
    /// runs no command (with git itself, `protocol.ext.allow` would let it run).
    #[test]
    fn submodules_are_not_fetched_and_ext_urls_run_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (lib, work) = (dir.path().join("lib"), dir.path().join("work"));
        let marker = dir.path().join("pwned-ext");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        git(&lib, &["init", "-q"]);
        std::fs::write(lib.join("f"), "lib").unwrap();
        git(&lib, &["add", "f"]);
        git(&lib, &["commit", "-q", "-m", "lib"]);
        let lib_head = std::process::Command::new("git")
            .current_dir(&lib)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        let lib_head = String::from_utf8_lossy(&lib_head.stdout).trim().to_string();
        let gitmodules = format!(
            "[submodule \"lib\"]\n\tpath = lib\n\turl = file://{}\n[submodule \"tool\"]\n\tpath = tool\n\turl = ext::sh -c touch% {}\n",
            lib.display(),
            marker.display()
        );
        git(&work, &["init", "-q"]);
        std::fs::write(work.join(".gitmodules"), gitmodules).unwrap();
        git(&work, &["add", ".gitmodules"]);
        for path in ["lib", "tool"] {
            let info = format!("160000,{lib_head},{path}");
            git(&work, &["update-index", "--add", "--cacheinfo", &info]);
        }
        git(&work, &["commit", "-q", "-m", "submodules"]);
        let spec = GitSpec {
            url: format!("file://{}", work.display()),
            commit: None,
            reference: None,
            shallow: false,
        };
        let dest = dir.path().join("clone");
        fetch(&spec, &dest, &Credentials::None, &|_| {}).unwrap();
        assert!(dest.join(".gitmodules").is_file());
        for path in ["lib", "tool"] {
            let empty = std::fs::read_dir(dest.join(path)).map_or(true, |mut d| d.next().is_none());
            assert!(empty, "{path} was fetched");
        }
        assert!(!dest.join(".git/modules").exists());
        assert!(!marker.exists(), "the ext:: command ran");
    }
}
