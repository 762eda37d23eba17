//! `pulumi-runner fetch`: materialises the program in the share volume — `<share>/source`
//! holds the checkout and `<share>/workspace` is a symlink to the project directory in it
//! (or to a `Local` directory of the image), as PKO lays it out.

pub mod checkout;
pub mod flux;
pub mod git;

use crate::error::Failure;
use crate::plan::{project_info, Layout};
use crate::report::{log, succeeded};
use pulumi_operator_api::plan::{RunPlan, RunResult, Source};
use std::path::{Path, PathBuf};

/// Fetches the plan's source; returns the result to report.
pub fn fetch(plan: &RunPlan, layout: &Layout) -> Result<RunResult, Failure> {
    crate::ensure_crypto_provider();
    let source_dir = layout.source_dir();
    let workspace = layout.workspace_dir();
    std::fs::create_dir_all(&layout.share).map_err(|e| {
        Failure::source_unavailable(format!("cannot create {}: {e}", layout.share.display()))
    })?;
    remove_path(&workspace)?;
    let message = match &plan.source {
        None => {
            log("the plan has no source; nothing to fetch");
            return Ok(succeeded("no source to fetch"));
        }
        Some(Source::Local { dir }) => {
            // The directory lives in the `pulumi` container's image, not in this one.
            link(Path::new(dir), &workspace)?;
            return Ok(succeeded(format!("using the program in {dir}")));
        }
        Some(Source::Git {
            url,
            commit,
            reference,
            shallow,
            dir,
        }) => {
            let sub = sub_dir(dir.as_deref())?;
            fresh_dir(&source_dir)?;
            let spec = git::GitSpec {
                url: url.clone(),
                commit: commit.clone(),
                reference: reference.clone(),
                shallow: *shallow,
            };
            let head = clone_git(&spec, &source_dir)?;
            link_project(&source_dir, &sub, &workspace, Fetched::Git)?;
            format!("fetched {} at {head}", crate::redact::urls(url))
        }
        Some(Source::Flux { url, digest, dir }) => {
            let sub = sub_dir(dir.as_deref())?;
            fresh_dir(&source_dir)?;
            std::fs::create_dir_all(layout.scratch_dir()).map_err(|e| {
                Failure::source_unavailable(format!(
                    "cannot create {}: {e}",
                    layout.scratch_dir().display()
                ))
            })?;
            flux::fetch(
                url,
                digest,
                &source_dir,
                &layout.scratch_dir(),
                flux::DEFAULT_MAX_BYTES,
            )?;
            link_project(&source_dir, &sub, &workspace, Fetched::Artifact)?;
            format!("fetched the artifact {digest}")
        }
        Some(Source::Inline { .. }) => {
            return Err(Failure::source_unavailable(
                "a program cannot be handed over in the plan; only policy packs are",
            ))
        }
        Some(Source::Program { file }) => copy_program(file, &source_dir, &workspace)?,
        Some(Source::ProjectInfo { name, runtime }) => {
            fresh_dir(&source_dir)?;
            write_file(
                &source_dir.join("Pulumi.yaml"),
                minimal_project(name, runtime).as_bytes(),
            )?;
            link(&source_dir, &workspace)?;
            format!("wrote a minimal project {name} ({runtime})")
        }
    };
    let mut result = succeeded(message);
    result.project = project_info(&workspace);
    Ok(result)
}

/// A Program's rendered Pulumi.yaml, as the source.
fn copy_program(file: &str, source_dir: &Path, workspace: &Path) -> Result<String, Failure> {
    fresh_dir(source_dir)?;
    let text = std::fs::read(file)
        .map_err(|e| Failure::source_unavailable(format!("cannot read the program {file}: {e}")))?;
    write_file(&source_dir.join("Pulumi.yaml"), &text)?;
    link(source_dir, workspace)?;
    Ok(format!("copied the program {file}"))
}

/// Clones a git source with the credentials of the container's environment.
fn clone_git(spec: &git::GitSpec, dest: &Path) -> Result<String, Failure> {
    let credentials =
        git::Credentials::from_env().map_err(|e| Failure::source_unavailable(e.to_string()))?;
    git::fetch(spec, dest, &credentials)
}

/// A minimal `Pulumi.yaml` (name and runtime, quoted as YAML needs).
pub fn minimal_project(name: &str, runtime: &str) -> String {
    let mut doc = serde_norway::Mapping::new();
    doc.insert("name".into(), name.into());
    doc.insert("runtime".into(), runtime.into());
    serde_norway::to_string(&doc).unwrap_or_else(|_| format!("name: {name}\nruntime: {runtime}\n"))
}

/// The project directory inside the checkout: relative, without `..` (a leading `/` is
/// dropped, as `ln -s /share/source/$DIR` does in PKO).
pub fn sub_dir(dir: Option<&str>) -> Result<PathBuf, Failure> {
    pulumi_gitauth::clone::sub_dir(dir).map_err(Failure::source_unavailable)
}

/// Where a checkout came from: only a git clone leaves submodules out (an artifact holds what
/// its producer put in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetched {
    Git,
    Artifact,
}

/// Links the workspace to the project directory `sub` of the checkout, once the checkout is
/// found fit to be read on the stack's behalf ([`checkout`]).
fn link_project(
    source_dir: &Path,
    sub: &Path,
    workspace: &Path,
    fetched: Fetched,
) -> Result<(), Failure> {
    let root = std::fs::canonicalize(source_dir).map_err(|e| {
        Failure::source_unavailable(format!("cannot resolve {}: {e}", source_dir.display()))
    })?;
    let submodules = match fetched {
        Fetched::Git => checkout::submodule_paths(&root),
        Fetched::Artifact => Vec::new(),
    };
    checkout::log_submodules(&submodules);
    let project = checkout::project_dir(&root, sub, &submodules)?;
    checkout::check_project_files(&root, &project)?;
    checkout::check_lfs(&root, &project)?;
    link(&source_dir.join(sub), workspace)
}

fn link(target: &Path, link: &Path) -> Result<(), Failure> {
    remove_path(link)?;
    std::os::unix::fs::symlink(target, link).map_err(|e| {
        Failure::source_unavailable(format!(
            "cannot link {} to {}: {e}",
            link.display(),
            target.display()
        ))
    })
}

/// Removes a file, symlink or directory tree if it exists.
fn remove_path(path: &Path) -> Result<(), Failure> {
    let result = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => Ok(()),
    };
    result
        .map_err(|e| Failure::source_unavailable(format!("cannot remove {}: {e}", path.display())))
}

fn fresh_dir(dir: &Path) -> Result<(), Failure> {
    remove_path(dir)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::source_unavailable(format!("cannot create {}: {e}", dir.display())))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    std::fs::write(path, bytes)
        .map_err(|e| Failure::source_unavailable(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_dirs_stay_inside() {
        assert_eq!(sub_dir(None).unwrap(), PathBuf::new());
        assert_eq!(sub_dir(Some("app/")).unwrap(), PathBuf::from("app"));
        assert_eq!(sub_dir(Some("/a/./b")).unwrap(), PathBuf::from("a/b"));
        assert!(sub_dir(Some("../etc")).is_err());
        assert!(sub_dir(Some("a/../../b")).is_err());
    }

    #[test]
    fn minimal_project_quotes() {
        let text = minimal_project("my: proj", "yaml");
        let info = crate::plan::parse_project(&text).unwrap();
        assert!(
            text.contains("'my: proj'") || text.contains("\"my: proj\""),
            "{text}"
        );
        assert_eq!(info.name, "my: proj");
        assert_eq!(info.runtime, "yaml");
    }
}
