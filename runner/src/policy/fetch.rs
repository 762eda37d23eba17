//! `pulumi-runner fetch`, after the program: each policy pack cloned at its exact commit, its
//! directory put at `<root>/<name>` and its configuration written beside it (`{}` when the
//! StackPolicy configures none: the CLI wants one `--policy-pack-config` per pack once any
//! pack has one).

use crate::error::Failure;
use crate::fetch::git::{self, Credentials, GitSpec};
use crate::policy::{pack_failed, pack_paths};
use crate::report::log;
use pulumi_operator_api::plan::{PolicyPackPlan, Source};
use std::path::Path;

/// Fetches every pack under `root`; returns their labels (`name@revision`).
pub fn fetch_packs(packs: &[PolicyPackPlan], root: &Path) -> Result<Vec<String>, Failure> {
    if packs.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(root).map_err(|e| {
        Failure::new(
            pulumi_operator_api::plan::FailureReason::PolicyPackFailed,
            format!("cannot create {}: {e}", root.display()),
        )
    })?;
    let mut labels = Vec::new();
    for pack in packs {
        fetch_pack(pack, root)?;
        log(format!(
            "policy pack {} of StackPolicy {} fetched",
            pack.label(),
            pack.policy
        ));
        labels.push(pack.label());
    }
    Ok(labels)
}

/// One pack: downloaded next to its place (a public git repository at its commit, or an
/// artifact checked against its digest), then its directory moved there.
fn fetch_pack(pack: &PolicyPackPlan, root: &Path) -> Result<(), Failure> {
    let dir = match &pack.source {
        Source::Git { dir, .. } | Source::Flux { dir, .. } => dir.clone(),
        _ => None,
    };
    let sub = crate::fetch::sub_dir(dir.as_deref()).map_err(|_| {
        pack_failed(
            pack,
            format!(
                "its directory {:?} must stay inside the repository",
                dir.as_deref().unwrap_or_default()
            ),
        )
    })?;
    let (target, config_file) = pack_paths(root, pack);
    let policy_dir = root.join(&pack.policy);
    // Pack names are DNS labels: no pack is named like this.
    let clone = policy_dir.join(format!(".clone-{}", pack.name));
    let io = |what: &str, path: &Path, e: std::io::Error| {
        pack_failed(pack, format!("cannot {what} {}: {e}", path.display()))
    };
    std::fs::create_dir_all(&policy_dir).map_err(|e| io("create", &policy_dir, e))?;
    remove(&clone).map_err(|e| io("remove", &clone, e))?;
    remove(&target).map_err(|e| io("remove", &target, e))?;
    let revision = download(pack, &clone, &policy_dir)?;
    let source = clone.join(&sub);
    if !source.join("PulumiPolicy.yaml").is_file() {
        let _ = remove(&clone);
        let place = match sub.as_os_str().is_empty() {
            true => "the repository's root".to_string(),
            false => format!("{:?}", sub.display().to_string()),
        };
        return Err(pack_failed(
            pack,
            format!("no PulumiPolicy.yaml in {place} at {revision}"),
        ));
    }
    std::fs::rename(&source, &target).map_err(|e| io("move the pack to", &target, e))?;
    remove(&clone).map_err(|e| io("remove", &clone, e))?;
    write_config(pack, &config_file)
}

/// Puts the pack's source in `dest`; returns the revision it is at.
fn download(pack: &PolicyPackPlan, dest: &Path, policy_dir: &Path) -> Result<String, Failure> {
    match &pack.source {
        Source::Git {
            url,
            commit: Some(commit),
            ..
        } => {
            let spec = GitSpec {
                url: url.clone(),
                commit: Some(commit.clone()),
                reference: None,
                shallow: true,
            };
            git::fetch(&spec, dest, &Credentials::None)
                .map_err(|e| pack_failed(pack, e.message))?;
            Ok(commit.clone())
        }
        Source::Flux { url, digest, .. } => {
            let scratch = policy_dir.join(format!(".scratch-{}", pack.name));
            // The download goes to the scratch directory, the unpacking into `dest`: both exist.
            for dir in [dest, scratch.as_path()] {
                std::fs::create_dir_all(dir).map_err(|e| {
                    pack_failed(pack, format!("cannot create {}: {e}", dir.display()))
                })?;
            }
            let fetched = crate::fetch::flux::fetch(
                url,
                digest,
                dest,
                &scratch,
                crate::fetch::flux::DEFAULT_MAX_BYTES,
            );
            let _ = remove(&scratch);
            fetched.map_err(|e| pack_failed(pack, e.message))?;
            Ok(digest.clone())
        }
        Source::Inline { digest, archive } => {
            crate::fetch::flux::unpack_inline(digest, archive, dest)
                .map_err(|e| pack_failed(pack, format!("cannot unpack its copy: {e}")))?;
            Ok(digest.clone())
        }
        _ => Err(pack_failed(
            pack,
            "the plan gives no git commit or artifact digest to fetch",
        )),
    }
}

/// The pack's `--policy-pack-config` document: the StackPolicy's, or `{}`.
fn write_config(pack: &PolicyPackPlan, file: &Path) -> Result<(), Failure> {
    let doc = pack
        .config
        .clone()
        .unwrap_or_else(|| serde_json::Value::Object(Default::default()));
    let bytes = serde_json::to_vec_pretty(&doc)
        .map_err(|e| pack_failed(pack, format!("cannot write its configuration: {e}")))?;
    std::fs::write(file, bytes)
        .map_err(|e| pack_failed(pack, format!("cannot write {}: {e}", file.display())))
}

/// Removes a file, symlink or directory tree if it exists.
fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::plan::FailureReason;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// A repository with a pack in `packs/limits`; its URL and commit.
    fn repository(dir: &Path) -> Option<(String, String)> {
        Command::new("git").arg("--version").output().ok()?;
        let repo = dir.join("repo");
        std::fs::create_dir_all(repo.join("packs/limits")).unwrap();
        std::fs::write(
            repo.join("packs/limits/PulumiPolicy.yaml"),
            "runtime: nodejs\n",
        )
        .unwrap();
        std::fs::write(repo.join("packs/limits/index.ts"), "// pack\n").unwrap();
        std::fs::write(repo.join("README.md"), "packs\n").unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "packs"]);
        let commit = git(&repo, &["rev-parse", "HEAD"]);
        Some((format!("file://{}", repo.display()), commit))
    }

    fn pack(name: &str, url: &str, commit: &str, dir: Option<&str>) -> PolicyPackPlan {
        PolicyPackPlan {
            name: name.into(),
            policy: "limits".into(),
            source: Source::Git {
                url: url.into(),
                commit: Some(commit.into()),
                reference: None,
                shallow: true,
                dir: dir.map(str::to_string),
            },
            config: None,
        }
    }

    #[test]
    fn packs_are_put_in_place_with_their_configuration() {
        let tmp = tempfile::tempdir().unwrap();
        let Some((url, commit)) = repository(tmp.path()) else {
            eprintln!("git is not installed: skipped");
            return;
        };
        let root = tmp.path().join("packs");
        let mut configured = pack("k8s-limits", &url, &commit, Some("packs/limits"));
        configured.config = Some(serde_json::json!({"deployment-resource-limits": "advisory"}));
        let plain = pack("other", &url, &commit, Some("/packs/limits/"));
        let labels = fetch_packs(&[configured.clone(), plain], &root).unwrap();
        assert_eq!(
            labels,
            vec![
                format!("k8s-limits@{}", &commit[..12]),
                format!("other@{}", &commit[..12])
            ]
        );
        assert!(root.join("limits/k8s-limits/PulumiPolicy.yaml").is_file());
        assert!(!root.join("limits/k8s-limits/README.md").exists());
        let config: serde_json::Value = serde_json::from_slice(
            &std::fs::read(root.join("limits/k8s-limits.config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(Some(config), configured.config);
        assert_eq!(
            std::fs::read_to_string(root.join("limits/other.config.json")).unwrap(),
            "{}"
        );
        assert!(!root.join("limits/.clone-k8s-limits").exists());
        // Fetched again (a retried pod): the same result.
        fetch_packs(&[configured], &root).unwrap();
        assert!(root.join("limits/k8s-limits/index.ts").is_file());
    }

    #[test]
    fn failures_name_the_pack_and_its_policy() {
        let tmp = tempfile::tempdir().unwrap();
        let Some((url, commit)) = repository(tmp.path()) else {
            eprintln!("git is not installed: skipped");
            return;
        };
        let root = tmp.path().join("packs");
        let check = |p: PolicyPackPlan, wanted: &str| {
            let f = fetch_packs(&[p], &root).unwrap_err();
            assert_eq!(f.reason, FailureReason::PolicyPackFailed);
            assert!(f
                .message
                .starts_with("policy pack \"p\" of StackPolicy \"limits\": "));
            assert!(f.message.contains(wanted), "{}", f.message);
        };
        check(
            pack("p", &url, &commit, None),
            "no PulumiPolicy.yaml in the repository's root",
        );
        check(
            pack("p", &url, &commit, Some("../x")),
            "must stay inside the repository",
        );
        let missing = "1111111111111111111111111111111111111111";
        check(
            pack("p", &url, missing, Some("packs/limits")),
            &format!("cannot fetch {url} at commit {missing}"),
        );
        let mut branch = pack("p", &url, &commit, None);
        branch.source = Source::Git {
            url: url.clone(),
            commit: None,
            reference: Some("main".into()),
            shallow: true,
            dir: None,
        };
        check(branch, "no git commit");
        assert!(fetch_packs(&[], &tmp.path().join("none"))
            .unwrap()
            .is_empty());
        assert!(!tmp.path().join("none").exists());
    }
}
