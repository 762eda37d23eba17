//! Policy packs in private repositories (`git.gitAuth`): the operator fetches them itself, with
//! credentials from its own namespace, and keeps a copy of the pack's directory (a tar.gz) that
//! every covered operation gets in its plan and checks by digest. The credentials never reach a
//! tenant's namespace; the pack's source does (the operation runs it), as for public packs.

use kube::ResourceExt;
use pulumi_operator_api::plan::{PolicyPackPlan, Source};
use pulumi_operator_api::policy::StackPolicy;
use sha2::Digest;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The largest copy of a pack the operator hands over: it travels in the plan Secret (1 MiB at
/// most, base64 adds a third). Larger packs belong in a Flux source or a packaged archive.
pub const MAX_ARCHIVE_BYTES: usize = 256 * 1024;
/// How many copies are kept (a few per pack: its commit before and after a branch moves).
const MAX_KEPT: usize = 64;

/// One pack at one commit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArchiveKey {
    pub url: String,
    pub commit: String,
    pub dir: Option<String>,
}

/// A pack's copy: its digest (`sha256:<hex>`) and the tar.gz in base64, as the plan carries it.
#[derive(Debug, PartialEq, Eq)]
pub struct Archive {
    pub digest: String,
    pub base64: String,
}

fn kept() -> &'static Mutex<HashMap<ArchiveKey, Arc<Archive>>> {
    static KEPT: OnceLock<Mutex<HashMap<ArchiveKey, Arc<Archive>>>> = OnceLock::new();
    KEPT.get_or_init(Default::default)
}

/// The copy of a pack, if the operator has made it (since it started).
pub fn get(key: &ArchiveKey) -> Option<Arc<Archive>> {
    kept()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(key)
        .cloned()
}

/// The copy of a pack, fetched now if the operator has none.
pub async fn ensure(
    key: &ArchiveKey,
    credentials: pulumi_gitauth::Credentials,
) -> Result<Arc<Archive>, String> {
    if let Some(archive) = get(key) {
        return Ok(archive);
    }
    let owned = key.clone();
    let made = tokio::task::spawn_blocking(move || fetch_and_pack(&owned, &credentials))
        .await
        .map_err(|e| format!("the fetch stopped: {e}"))??;
    let archive = Arc::new(made);
    let mut kept = kept().lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() >= MAX_KEPT {
        kept.clear();
    }
    kept.insert(key.clone(), archive.clone());
    Ok(archive)
}

/// The credentials of a pack's `gitAuth`, from the Secrets of the operator's namespace.
pub async fn credentials(
    client: &kube::Client,
    operator_namespace: &str,
    auth: &pulumi_operator_api::GitAuthConfig,
) -> Result<pulumi_gitauth::Credentials, String> {
    let refs =
        crate::source::auth::config_refs(auth, &crate::source::auth::default_github_api_url());
    crate::source::auth::read_credentials(client, operator_namespace, &refs)
        .await
        .map_err(|e| {
            format!(
                "{} (Secrets in the operator's namespace {operator_namespace:?})",
                e.message
            )
        })
}

/// The pack of a private repository that `plan` is, if it is one: where its copy is kept, and
/// its `gitAuth`, from the StackPolicy that names it.
fn private_pack(
    policies: &[Arc<StackPolicy>],
    plan: &PolicyPackPlan,
) -> Option<(ArchiveKey, pulumi_operator_api::GitAuthConfig)> {
    let Source::Git {
        url, commit, dir, ..
    } = &plan.source
    else {
        return None;
    };
    let policy = policies.iter().find(|p| p.name_any() == plan.policy)?;
    let spec = policy.spec.packs.iter().find(|p| p.name == plan.name)?;
    let auth = spec.git.as_ref()?.git_auth.as_deref()?.clone();
    let key = ArchiveKey {
        url: url.clone(),
        commit: commit.clone()?,
        dir: dir.clone(),
    };
    Some((key, auth))
}

/// Replaces each pack of a private repository in `packs` by the operator's copy of it (made
/// now if need be), so that the operation needs no credentials.
pub async fn hand_over(
    client: &kube::Client,
    operator_namespace: &str,
    policies: &[Arc<StackPolicy>],
    packs: &mut [PolicyPackPlan],
) -> Result<(), super::PackUnavailable> {
    for pack in packs.iter_mut() {
        let Some((key, auth)) = private_pack(policies, pack) else {
            continue;
        };
        let unavailable = |why: String| super::PackUnavailable {
            policy: pack.policy.clone(),
            pack: pack.name.clone(),
            why,
            pending: false,
        };
        let archive = match get(&key) {
            Some(archive) => archive,
            None => {
                let credentials = credentials(client, operator_namespace, &auth)
                    .await
                    .map_err(|e| {
                        unavailable(format!("has credentials that cannot be read: {e}"))
                    })?;
                ensure(&key, credentials)
                    .await
                    .map_err(|e| unavailable(format!("cannot be fetched: {e}")))?
            }
        };
        pack.source = Source::Inline {
            digest: archive.digest.clone(),
            archive: archive.base64.clone(),
        };
    }
    Ok(())
}

/// The pack's directory inside the checkout.
fn sub_dir(dir: Option<&str>) -> Result<PathBuf, String> {
    pulumi_gitauth::clone::sub_dir(dir)
}

fn fetch_and_pack(
    key: &ArchiveKey,
    credentials: &pulumi_gitauth::Credentials,
) -> Result<Archive, String> {
    let sub = sub_dir(key.dir.as_deref())?;
    let scratch = tempfile::tempdir().map_err(|e| format!("no scratch directory: {e}"))?;
    let checkout = scratch.path().join("checkout");
    let spec = pulumi_gitauth::clone::GitSpec {
        url: key.url.clone(),
        commit: Some(key.commit.clone()),
        reference: None,
        shallow: true,
    };
    pulumi_gitauth::clone::fetch(
        &spec,
        &checkout,
        credentials,
        &|m| tracing::info!(pack = %pulumi_gitauth::redact::urls(&key.url), "{m}"),
    )?;
    let pack = checkout.join(&sub);
    if !pack.join("PulumiPolicy.yaml").is_file() {
        return Err(format!(
            "no PulumiPolicy.yaml in {} at {}",
            match sub.as_os_str().is_empty() {
                true => "the repository's root".to_string(),
                false => format!("{:?}", sub.display().to_string()),
            },
            key.commit
        ));
    }
    let bytes = tar_gz(&pack).map_err(|e| format!("cannot pack it: {e}"))?;
    if bytes.len() > MAX_ARCHIVE_BYTES {
        return Err(format!(
            "its directory packs to {} bytes, more than the {MAX_ARCHIVE_BYTES} the operator \
             hands over in a plan; publish it as a Flux source or a packaged archive instead",
            bytes.len()
        ));
    }
    Ok(archive_of(&bytes))
}

/// The copy of `bytes` (a tar.gz) as the plan carries it.
pub fn archive_of(bytes: &[u8]) -> Archive {
    use base64::Engine;
    let hex: String = sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Archive {
        digest: format!("sha256:{hex}"),
        base64: base64::engine::general_purpose::STANDARD.encode(bytes),
    }
}

/// A tar.gz of `dir` (without `.git`), the same bytes for the same files: entries in name
/// order, no times or owners, modes 0644 or 0755.
pub fn tar_gz(dir: &Path) -> std::io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    append_dir(&mut tar, dir, Path::new(""))?;
    tar.into_inner()?.finish()
}

fn append_dir<W: std::io::Write>(
    tar: &mut tar::Builder<W>,
    root: &Path,
    rel: &Path,
) -> std::io::Result<()> {
    let mut entries: Vec<_> =
        std::fs::read_dir(root.join(rel))?.collect::<std::io::Result<Vec<_>>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = rel.join(entry.file_name());
        if name == Path::new(".git") {
            continue;
        }
        let kind = entry.file_type()?;
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(0);
        if kind.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            tar.append_data(&mut header, &name, std::io::empty())?;
            append_dir(tar, root, &name)?;
        } else if kind.is_symlink() {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            tar.append_link(&mut header, &name, std::fs::read_link(entry.path())?)?;
        } else if kind.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let data = std::fs::read(entry.path())?;
            let executable = entry.metadata()?.permissions().mode() & 0o111 != 0;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(if executable { 0o755 } else { 0o644 });
            header.set_size(data.len() as u64);
            tar.append_data(&mut header, &name, data.as_slice())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> Vec<(String, String)> {
        let bytes = tar_gz(dir).unwrap();
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        let mut out = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            out.push((entry.path().unwrap().display().to_string(), text));
        }
        out
    }

    #[test]
    fn a_pack_directory_packs_the_same_way_every_time_without_git() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/config"), "secret remote").unwrap();
        std::fs::write(dir.path().join("PulumiPolicy.yaml"), "runtime: nodejs\n").unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/index.ts"), "export {}\n").unwrap();
        let listed = files(dir.path());
        assert_eq!(
            listed,
            [
                (
                    "PulumiPolicy.yaml".to_string(),
                    "runtime: nodejs\n".to_string()
                ),
                ("src".to_string(), String::new()),
                ("src/index.ts".to_string(), "export {}\n".to_string()),
            ]
        );
        let a = archive_of(&tar_gz(dir.path()).unwrap());
        let b = archive_of(&tar_gz(dir.path()).unwrap());
        assert_eq!(a, b, "the same files give the same digest");
        assert!(a.digest.starts_with("sha256:") && a.digest.len() == 71);
    }

    #[test]
    fn only_packs_of_private_repositories_are_handed_over_as_copies() {
        use pulumi_operator_api::policy::{PolicyPackGitSource, PolicyPackSpec, StackPolicySpec};
        let git = |auth: bool| PolicyPackGitSource {
            url: "https://git.example/packs.git".into(),
            commit: Some("a".repeat(40)),
            dir: Some("limits".into()),
            git_auth: auth.then(|| Box::new(pulumi_operator_api::GitAuthConfig::default())),
            ..Default::default()
        };
        let policy = StackPolicy::new(
            "limits",
            StackPolicySpec {
                packs: vec![
                    PolicyPackSpec {
                        name: "private".into(),
                        git: Some(git(true)),
                        ..Default::default()
                    },
                    PolicyPackSpec {
                        name: "public".into(),
                        git: Some(git(false)),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        );
        let plan = |name: &str| PolicyPackPlan {
            name: name.into(),
            policy: "limits".into(),
            source: Source::Git {
                url: "https://git.example/packs.git".into(),
                commit: Some("a".repeat(40)),
                reference: None,
                shallow: false,
                dir: Some("limits".into()),
            },
            config: None,
        };
        let policies = [Arc::new(policy)];
        let (key, _) = private_pack(&policies, &plan("private")).expect("a private pack");
        assert_eq!(
            key,
            ArchiveKey {
                url: "https://git.example/packs.git".into(),
                commit: "a".repeat(40),
                dir: Some("limits".into()),
            }
        );
        assert!(private_pack(&policies, &plan("public")).is_none());
        // A pack of a policy that is gone is no private pack (the plan fails elsewhere).
        assert!(private_pack(&[], &plan("private")).is_none());
    }

    #[test]
    fn a_directory_outside_the_repository_is_refused() {
        assert_eq!(
            sub_dir(Some("packs/limits")).unwrap(),
            PathBuf::from("packs/limits")
        );
        assert!(sub_dir(Some("../etc"))
            .unwrap_err()
            .contains("must stay inside"));
    }
}
