//! Which `pulumi` an operation the administrator's packs cover runs, and the PATH it gets
//! (issue 45). The tenant writes the pod's volumes (an init container fills `share`, a
//! ConfigMap or a claim is mounted where the template says) and may set PATH: a `pulumi`, a
//! `pulumi-analyzer-policy`, a `node` or a `python3` found there would run instead of the
//! image's and ignore the packs. So the CLI comes from a PATH directory that is not on any of
//! the `pulumi` container's volumes (the operator names their mount paths in
//! [`VOLUME_PATHS_ENV`]), is run by its absolute path, and Pulumi gets a PATH of the CLI's
//! own directory (where its bundled analyzers and language hosts are) followed by the other
//! such directories only.

use crate::error::Failure;
use pulumi_operator_api::plan::{FailureReason, VOLUME_PATHS_ENV};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The CLI a covered operation runs and the PATH Pulumi gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedCli {
    pub pulumi: PathBuf,
    pub path: OsString,
    /// PATH directories left out because they are on the pod's volumes (for the log).
    pub left_out: Vec<PathBuf>,
}

fn refused(detail: String) -> Failure {
    Failure::new(FailureReason::PolicyPackFailed, detail)
}

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The CLI and PATH of a covered operation, from the runner's PATH and the operator's list
/// of volume mount paths.
pub fn trusted_cli(
    path_var: Option<&OsStr>,
    volume_paths: Option<&str>,
) -> Result<TrustedCli, Failure> {
    let volumes: Vec<PathBuf> = volume_paths
        .ok_or_else(|| {
            refused(format!(
                "the pod does not say where its volumes are ({VOLUME_PATHS_ENV}, which the \
                 operator sets on every operation its policy packs cover)"
            ))
        })?
        .split(':')
        .filter(|p| p.starts_with('/'))
        .map(|p| real(Path::new(p)))
        .collect();
    // Both sides without their symlinks (where they exist): a link cannot hide a volume.
    let on_volume = |p: &Path| volumes.iter().any(|v| p.starts_with(v));
    let mut kept: Vec<PathBuf> = Vec::new();
    let mut left_out = Vec::new();
    for dir in std::env::split_paths(path_var.unwrap_or_default()) {
        // A relative entry would be looked up from the program's directory, on a volume.
        if !dir.is_absolute() {
            left_out.push(dir);
            continue;
        }
        let resolved = real(&dir);
        if on_volume(&resolved) {
            left_out.push(dir);
        } else if !kept.contains(&resolved) {
            kept.push(resolved);
        }
    }
    let pulumi = kept
        .iter()
        .map(|d| d.join("pulumi"))
        .find(|p| executable(p) && !on_volume(&real(p)))
        .ok_or_else(|| {
            refused(format!(
                "no pulumi CLI in the image's directories on PATH: when the administrator's \
                 policy packs apply, PATH directories on the pod's volumes are not searched{}",
                shown(&left_out)
            ))
        })?;
    let cli_dir = real(&pulumi).parent().map(Path::to_path_buf);
    let ordered = cli_dir
        .iter()
        .chain(kept.iter().filter(|d| Some(*d) != cli_dir.as_ref()));
    let path = std::env::join_paths(ordered)
        .map_err(|e| refused(format!("cannot build the PATH for pulumi: {e}")))?;
    Ok(TrustedCli {
        pulumi,
        path,
        left_out,
    })
}

/// A project that brings its own analyzers or language hosts (`plugins:` in its project
/// file; the CLI looks there first) could have its own code judge it: refused when packs
/// apply. Its own providers are left alone: they are the program's code, like the program.
pub fn refuse_own_plugins(workspace: &Path) -> Result<(), Failure> {
    let Some(file) = crate::plan::project_file(workspace) else {
        return Ok(());
    };
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let doc: serde_norway::Value = serde_norway::from_str(&text).unwrap_or_default();
    for kind in ["analyzers", "languages"] {
        let declared = doc
            .get("plugins")
            .and_then(|p| p.get(kind))
            .is_some_and(|v| !v.is_null() && v.as_sequence().is_none_or(|s| !s.is_empty()));
        if declared {
            return Err(refused(format!(
                "the project file declares its own {kind} (plugins.{kind}), which the \
                 administrator's policy packs do not allow: Pulumi would run them instead of \
                 the image's; remove plugins.{kind} from {}",
                file.file_name().unwrap_or_default().to_string_lossy()
            )));
        }
    }
    Ok(())
}

fn shown(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return String::new();
    }
    let list: Vec<String> = dirs.iter().map(|d| format!("{}", d.display())).collect();
    format!(" (left out: {})", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, name: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_pulumi_on_a_volume_never_runs_and_leaves_the_path() {
        let t = tempfile::tempdir().unwrap();
        let (share, image) = (t.path().join("share"), t.path().join("image/bin"));
        script(&share.join("bin"), "pulumi");
        script(&share.join("bin"), "pulumi-analyzer-policy");
        script(&image, "pulumi");
        let path =
            std::env::join_paths([share.join("bin"), PathBuf::from("rel"), image.clone()]).unwrap();
        let volumes = format!("{}:/var/run/pulumi-operator/bin", share.display());
        let cli = trusted_cli(Some(&path), Some(&volumes)).unwrap();
        assert_eq!(cli.pulumi, real(&image).join("pulumi"));
        assert_eq!(cli.path, real(&image).into_os_string());
        assert_eq!(cli.left_out, [share.join("bin"), PathBuf::from("rel")]);
    }

    #[test]
    fn a_link_from_the_image_into_a_volume_is_not_the_image() {
        let t = tempfile::tempdir().unwrap();
        let (share, image) = (t.path().join("share"), t.path().join("image"));
        script(&share, "pulumi");
        std::fs::create_dir_all(&image).unwrap();
        std::os::unix::fs::symlink(share.join("pulumi"), image.join("pulumi")).unwrap();
        // And a PATH entry that is a link to a volume.
        std::os::unix::fs::symlink(&share, t.path().join("alias")).unwrap();
        let path = std::env::join_paths([image, t.path().join("alias")]).unwrap();
        let err = trusted_cli(Some(&path), Some(&share.display().to_string())).unwrap_err();
        assert_eq!(err.reason, FailureReason::PolicyPackFailed);
        assert!(err.message.contains("no pulumi CLI"), "{}", err.message);
        assert!(err.message.contains("alias"), "{}", err.message);
    }

    #[test]
    fn a_project_with_its_own_analyzer_or_language_host_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let write = |text: &str| std::fs::write(t.path().join("Pulumi.yaml"), text).unwrap();
        write("name: p\nruntime: nodejs\nplugins:\n  providers:\n    - name: random\n      path: ./bin\n");
        assert!(refuse_own_plugins(t.path()).is_ok());
        write("name: p\nruntime: nodejs\nplugins:\n  analyzers:\n    - name: policy\n      path: ./fake\n");
        let err = refuse_own_plugins(t.path()).unwrap_err();
        assert!(err.message.contains("plugins.analyzers"), "{}", err.message);
        write("name: p\nruntime: nodejs\nplugins:\n  languages:\n    - name: nodejs\n      path: ./fake\n");
        let err = refuse_own_plugins(t.path()).unwrap_err();
        assert!(err.message.contains("plugins.languages"), "{}", err.message);
    }

    #[test]
    fn without_the_operators_list_of_volumes_nothing_runs() {
        let err = trusted_cli(Some(OsStr::new("/usr/bin")), None).unwrap_err();
        assert!(err.message.contains(VOLUME_PATHS_ENV), "{}", err.message);
    }
}
