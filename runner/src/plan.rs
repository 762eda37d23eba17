//! Loading the plan and the layout of the share volume.

use crate::error::Failure;
use pulumi_operator_api::common::ProjectInfo;
use pulumi_operator_api::plan::RunPlan;
use std::path::{Path, PathBuf};

/// Why a project file's text is not a usable project.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error("{0}")]
    Syntax(serde_norway::Error),
    #[error("project is missing a 'name' attribute")]
    NoName,
}

/// Why the project file of a directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProjectFileError {
    #[error("cannot read {}: {source}", .file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", .file.display())]
    Invalid { file: PathBuf, source: ProjectError },
}

/// The default share volume mount.
pub const DEFAULT_SHARE: &str = "/share";

/// Reads and parses the plan file.
pub fn load(path: &Path) -> Result<RunPlan, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::config_invalid(format!("cannot read the plan {}: {e}", path.display()))
    })?;
    let expected = std::env::var(pulumi_operator_api::plan::PLAN_DIGEST_ENV).ok();
    check_digest(&text, expected.as_deref())?;
    serde_json::from_str(&text).map_err(|e| {
        Failure::config_invalid(format!("cannot parse the plan {}: {e}", path.display()))
    })
}

/// The plan must be the one the operator wrote when the Job says which that was: the plan
/// Secret can be edited after the Job exists, the Job's pod spec cannot.
pub fn check_digest(text: &str, expected: Option<&str>) -> Result<(), Failure> {
    let Some(expected) = expected.map(str::trim).filter(|e| !e.is_empty()) else {
        return Ok(());
    };
    if pulumi_operator_api::plan::plan_digest(text.as_bytes()) == expected {
        return Ok(());
    }
    Err(Failure::new(
        pulumi_operator_api::plan::FailureReason::UpdateFailed,
        "the plan Secret was changed after the operator wrote it (its digest is not the one \
         in the Job); the operation does not run",
    ))
}

/// Paths inside the share volume (`/share` in a Job, a temp dir in tests).
#[derive(Debug, Clone)]
pub struct Layout {
    pub share: PathBuf,
}

impl Layout {
    pub fn new(share: impl Into<PathBuf>) -> Layout {
        Layout {
            share: share.into(),
        }
    }

    /// The checkout (git clone, unpacked artifact, Program): `<share>/source`.
    pub fn source_dir(&self) -> PathBuf {
        self.share.join("source")
    }

    /// The project directory, a symlink: `<share>/workspace`.
    pub fn workspace_dir(&self) -> PathBuf {
        self.share.join("workspace")
    }

    /// Scratch space of the runner (event logs, downloads): `<share>/.pulumi-runner`.
    pub fn scratch_dir(&self) -> PathBuf {
        self.share.join(".pulumi-runner")
    }
}

/// The project file of a directory: `Pulumi.yaml`, `Pulumi.yml` or `Pulumi.json`.
pub fn project_file(dir: &Path) -> Option<PathBuf> {
    ["Pulumi.yaml", "Pulumi.yml", "Pulumi.json"]
        .iter()
        .map(|name| dir.join(name))
        .find(|p| p.is_file())
}

/// Name and runtime of the project in `dir`, when its project file can be read.
pub fn project_info(dir: &Path) -> Option<ProjectInfo> {
    read_project(dir).ok().flatten()
}

/// Reads the project file of `dir`: `Ok(None)` when there is none, `Err` when it cannot be
/// read or parsed (or has no `name`).
pub fn read_project(dir: &Path) -> Result<Option<ProjectInfo>, ProjectFileError> {
    let Some(file) = project_file(dir) else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(source) => return Err(ProjectFileError::Read { file, source }),
    };
    match parse_project(&text) {
        Ok(info) => Ok(Some(info)),
        Err(source) => Err(ProjectFileError::Invalid { file, source }),
    }
}

/// Parses `name` and `runtime` (a string or `{name, options}`) of a project file (YAML or JSON).
pub fn parse_project(text: &str) -> Result<ProjectInfo, ProjectError> {
    let doc: serde_norway::Value = serde_norway::from_str(text).map_err(ProjectError::Syntax)?;
    let name = doc
        .get("name")
        .and_then(serde_norway::Value::as_str)
        .ok_or(ProjectError::NoName)?
        .to_string();
    let runtime = match doc.get("runtime") {
        Some(serde_norway::Value::String(s)) => s.clone(),
        Some(v) => v
            .get("name")
            .and_then(serde_norway::Value::as_str)
            .unwrap_or_default()
            .to_string(),
        None => String::new(),
    };
    Ok(ProjectInfo { name, runtime })
}

/// Whether `pulumi install` has anything to do for the project file `text`: a YAML program
/// has no dependencies to install unless it declares `packages:` (parameterized providers);
/// every other runtime installs its language's dependencies (npm, pip, go mod…). An
/// unreadable file says yes: `install` then reports what is wrong with it.
pub fn needs_install(text: &str) -> bool {
    let Ok(doc) = serde_norway::from_str::<serde_norway::Value>(text) else {
        return true;
    };
    let runtime = match doc.get("runtime") {
        Some(serde_norway::Value::String(s)) => s.as_str(),
        Some(v) => v
            .get("name")
            .and_then(serde_norway::Value::as_str)
            .unwrap_or_default(),
        None => "",
    };
    runtime != "yaml" || doc.get("packages").is_some()
}

/// [`needs_install`] for the project file of `dir` (no file: yes).
pub fn project_needs_install(dir: &Path) -> bool {
    project_file(dir)
        .and_then(|f| std::fs::read_to_string(f).ok())
        .is_none_or(|text| needs_install(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_programs_with_dependencies_are_installed() {
        assert!(!needs_install("name: a\nruntime: yaml\nresources: {}\n"));
        assert!(!needs_install("name: a\nruntime: {name: yaml}\n"));
        assert!(needs_install(
            "name: a\nruntime: yaml\npackages:\n  x: github.com/o/x@v1\n"
        ));
        assert!(needs_install("name: a\nruntime: nodejs\n"));
        assert!(needs_install(r#"{"name": "j", "runtime": "go"}"#));
        assert!(needs_install("name: [unclosed"));
    }

    #[test]
    fn project_runtime_forms() {
        let p = parse_project("name: app\nruntime: yaml\n").unwrap();
        assert_eq!((p.name.as_str(), p.runtime.as_str()), ("app", "yaml"));
        let p =
            parse_project("name: app\nruntime:\n  name: nodejs\n  options: {typescript: false}\n")
                .unwrap();
        assert_eq!(p.runtime, "nodejs");
        let p = parse_project(r#"{"name": "j", "runtime": "go"}"#).unwrap();
        assert_eq!((p.name.as_str(), p.runtime.as_str()), ("j", "go"));
        assert!(parse_project("runtime: yaml")
            .unwrap_err()
            .to_string()
            .contains("missing a 'name'"));
        assert!(parse_project("a: [${x}]").is_err());
    }

    #[test]
    fn missing_plan_is_config_invalid() {
        let e = load(Path::new("/nonexistent/plan.json")).unwrap_err();
        assert_eq!(
            e.reason,
            pulumi_operator_api::plan::FailureReason::ConfigInvalid
        );
        assert!(e.message.contains("/nonexistent/plan.json"));
    }

    #[test]
    fn a_plan_changed_after_the_operator_wrote_it_is_refused() {
        let text = r#"{"operation":"up"}"#;
        let digest = pulumi_operator_api::plan::plan_digest(text.as_bytes());
        assert!(check_digest(text, Some(&digest)).is_ok());
        // No digest in the Job (a retained workspace, a hand-run runner): nothing to compare.
        assert!(check_digest(text, None).is_ok());
        let edited = r#"{"operation":"up","policyPacks":[]}"#;
        let e = check_digest(edited, Some(&digest)).unwrap_err();
        assert!(
            e.message.contains("plan Secret was changed"),
            "{}",
            e.message
        );
    }
}
