//! Git sources: the clone itself is [`pulumi_gitauth::clone`] (shared with the operator, which
//! fetches policy packs that need credentials); here its errors become the runner's failures.
//!
//! Credentials come from the `fetch` container's environment, under the names PKO's fetch
//! container uses (see [`pulumi_gitauth::env`] and [`Credentials::from_env`]): `GIT_USERNAME` +
//! `GIT_PASSWORD`, `GIT_TOKEN`, `GIT_SSH_PRIVATE_KEY` (+ `GIT_PASSWORD` as its passphrase, and
//! our `GIT_SSH_KNOWN_HOSTS`), or `GIT_GITHUB_APP_ID` + `GIT_GITHUB_APP_INSTALLATION_ID` +
//! `GIT_GITHUB_APP_PRIVATE_KEY` (and our `GITHUB_API_URL`).

use crate::error::Failure;
use crate::report::log;
pub use pulumi_gitauth::clone::GitSpec;
pub use pulumi_gitauth::Credentials;
use std::path::Path;

/// Clones `spec` into `dest` (which must be empty or absent) and returns the SHA checked out.
pub fn fetch(spec: &GitSpec, dest: &Path, credentials: &Credentials) -> Result<String, Failure> {
    pulumi_gitauth::clone::fetch(spec, dest, credentials, &|m| log(m))
        .map_err(Failure::source_unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_from_env_names() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let a = Credentials::from_lookup(env(&[("GIT_USERNAME", "u"), ("GIT_PASSWORD", "p")]));
        assert_eq!(
            a.unwrap(),
            Credentials::Basic {
                username: "u".into(),
                password: "p".into()
            }
        );
        let a = Credentials::from_lookup(env(&[("GIT_TOKEN", "t")])).unwrap();
        assert_eq!(a, Credentials::token("t"));
        assert_eq!(
            Credentials::from_lookup(env(&[])).unwrap(),
            Credentials::None
        );
        assert!(!format!("{a:?}").contains("\"t\""));
    }

    #[test]
    fn a_short_sha_is_a_source_failure_without_the_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let spec = GitSpec {
            url: "https://user:secret@example.invalid/r.git".into(),
            commit: Some("abc123".into()),
            reference: None,
            shallow: false,
        };
        let e = fetch(&spec, &dir.path().join("src"), &Credentials::None).unwrap_err();
        assert_eq!(
            e.reason,
            pulumi_operator_api::plan::FailureReason::SourceUnavailable
        );
        assert!(e.message.contains("not a full commit SHA"), "{}", e.message);
        assert!(!e.message.contains("secret"), "{}", e.message);
    }
}
