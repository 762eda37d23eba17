//! `git ls-remote` through gitoxide: resolves a branch (or tag) to the commit it points at,
//! without cloning, with the Stack's git credentials (HTTP basic auth, token, GitHub App
//! installation token, or an SSH key through the `ssh` program). Blocking network I/O runs on
//! its own thread, never on a reconcile worker, and is abandoned after [`TIMEOUT`].

use pulumi_gitauth::{AuthFlags, Credentials, Session};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// How long one ls-remote may take (including a GitHub App token exchange).
pub const TIMEOUT: Duration = Duration::from_secs(90);

/// A bare repository used only as a context for anonymous remotes (nothing is fetched into it).
fn scratch_repo() -> Result<PathBuf, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
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

/// The commit `reference` (short `main`, `refs/heads/main`, or a tag name) points at on `url`.
/// Errors are clear and never contain a credential.
pub fn ls_remote_blocking(
    url: &str,
    reference: &str,
    credentials: &Credentials,
) -> Result<String, String> {
    let session = Session::prepare(credentials, url)?;
    let shown = session.redact(url);
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
        let detail = chain_of(e);
        match session.explain(&flags, &detail) {
            Some(explained) => format!("ls-remote {shown}: {explained}"),
            None => session.redact(&format!("ls-remote {shown}: {detail}")),
        }
    };
    let mut connection = remote
        .connect(gix::remote::Direction::Fetch)
        .map_err(|e| failed(&e))?;
    connection.set_credentials(session.credentials_fn(&flags));
    let (map, _) = connection
        .ref_map(gix::progress::Discard, Default::default())
        .map_err(|e| failed(&e))?;
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
    Err(format!("no commits found for ref {reference:?} in {shown}"))
}

fn chain_of(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
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

/// [`ls_remote_blocking`] on a dedicated thread, abandoned after [`TIMEOUT`].
pub async fn ls_remote(
    url: &str,
    reference: &str,
    credentials: Credentials,
) -> Result<String, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (url, reference) = (url.to_string(), reference.to_string());
    let shown = pulumi_gitauth::redact::urls(&url);
    std::thread::Builder::new()
        .name("ls-remote".into())
        .spawn(move || {
            let _ = tx.send(ls_remote_blocking(&url, &reference, &credentials));
        })
        .map_err(|e| format!("cannot start ls-remote: {e}"))?;
    match tokio::time::timeout(TIMEOUT, rx).await {
        Ok(answer) => answer.map_err(|_| "ls-remote thread ended without an answer".to_string())?,
        Err(_) => Err(format!(
            "ls-remote {shown}: no answer within {}s",
            TIMEOUT.as_secs()
        )),
    }
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
}
