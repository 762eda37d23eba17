//! The administrator's policy packs (`StackPolicy`, issue 28): `fetch` puts each pack and its
//! configuration under [`POLICY_PACKS_DIR`] ([`fetch`]), the `policy` container installs their
//! dependencies with a clean environment ([`install`]), and `run` passes them to every
//! `preview` and `up` and reports what they found ([`report`]). The pure pieces shared by
//! these steps are here.

pub mod cli;
pub mod fetch;
pub mod install;
pub mod report;

use crate::error::Failure;
use pulumi_operator_api::plan::{FailureReason, Operation, PolicyPackPlan, POLICY_PACKS_DIR};
use std::path::{Path, PathBuf};

/// A pack's failure, naming the pack and the StackPolicy it comes from.
pub fn pack_failed(pack: &PolicyPackPlan, detail: impl std::fmt::Display) -> Failure {
    Failure::new(
        FailureReason::PolicyPackFailed,
        format!(
            "policy pack {:?} of StackPolicy {:?}: {detail}",
            pack.name, pack.policy
        ),
    )
}

/// A pack's directory and configuration file under `root`, `<root>/<policy>/<name>` and
/// `<root>/<policy>/<name>.config.json` (two StackPolicies may name packs alike): the plan's
/// [`PolicyPackPlan::dir`] and [`PolicyPackPlan::config_file`] when `root` is
/// [`POLICY_PACKS_DIR`] (tests use another).
pub fn pack_paths(root: &Path, pack: &PolicyPackPlan) -> (PathBuf, PathBuf) {
    let policy = root.join(&pack.policy);
    (
        policy.join(&pack.name),
        policy.join(format!("{}.config.json", pack.name)),
    )
}

/// The default root of the packs.
pub fn default_root() -> PathBuf {
    PathBuf::from(POLICY_PACKS_DIR)
}

/// Whether an operation runs the policy packs: `preview` (drift checks and saved plans
/// included) and `up`; a refresh or a destroy creates nothing for a policy to refuse.
pub fn runs_packs(op: Operation) -> bool {
    matches!(op, Operation::Preview | Operation::Up)
}

pub use pulumi_operator_api::policy::changes_how_packs_run;

/// The first of `names` that [`changes_how_packs_run`], as a failure.
pub fn refuse_env<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), Failure> {
    match names.into_iter().find(|n| changes_how_packs_run(n)) {
        None => Ok(()),
        Some(name) => Err(Failure::new(
            FailureReason::PolicyPackFailed,
            format!(
                "the environment variable {name} may not be set on a Stack the administrator's \
                 policy packs cover: it changes how the packs run"
            ),
        )),
    }
}

/// Before an operation that runs the packs: the environment the CLI gets (the container's
/// and `$PULUMI_ENV`'s, by name only) leaves the packs alone, and every pack was fetched.
pub fn check_before_run(packs: &[PolicyPackPlan], root: &Path) -> Result<(), Failure> {
    let own: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    let dotenv: Vec<String> = crate::dotenv::load().into_iter().map(|(k, _)| k).collect();
    refuse_env(own.iter().chain(dotenv.iter()).map(String::as_str))?;
    check_fetched(packs, root)
}

/// Every pack is in place with its configuration.
pub fn check_fetched(packs: &[PolicyPackPlan], root: &Path) -> Result<(), Failure> {
    for pack in packs {
        let (dir, config) = pack_paths(root, pack);
        if !dir.join("PulumiPolicy.yaml").is_file() || !config.is_file() {
            return Err(pack_failed(
                pack,
                format!(
                    "not found at {} (the fetch step did not run or failed)",
                    dir.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The `(directory, configuration file)` pairs the CLI gets, in the plan's order.
pub fn cli_args(packs: &[PolicyPackPlan], root: &Path) -> Vec<(String, String)> {
    packs
        .iter()
        .map(|p| {
            let (dir, config) = pack_paths(root, p);
            (
                dir.to_string_lossy().into_owned(),
                config.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// The pack the CLI's line names (by its directory, as the CLI prints it), if any.
pub fn pack_in_line<'a>(
    packs: &'a [PolicyPackPlan],
    root: &Path,
    line: &str,
) -> Option<&'a PolicyPackPlan> {
    packs.iter().find(|p| {
        let dir = pack_paths(root, p).0;
        let dir = dir.to_string_lossy();
        // The directory whole, not as the prefix of another pack's (`a` of `a-b`).
        line.match_indices(dir.as_ref()).any(|(i, _)| {
            !line[i + dir.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '-')
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::plan::Source;

    fn pack(name: &str) -> PolicyPackPlan {
        PolicyPackPlan {
            name: name.into(),
            policy: "limits".into(),
            source: Source::Git {
                url: "https://example.com/packs.git".into(),
                commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
                reference: None,
                shallow: true,
                dir: None,
            },
            config: None,
        }
    }

    #[test]
    fn the_variables_that_change_how_packs_run_are_refused_by_name() {
        for name in [
            "NODE_OPTIONS",
            "NODE_PATH",
            "PYTHONPATH",
            "PYTHONHOME",
            "PYTHONSTARTUP",
            "PULUMI_PYTHON_CMD",
            "PULUMI_POLICY_PACK",
            "npm_config_registry",
            "NPM_CONFIG_PREFIX",
            "PIP_INDEX_URL",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "PYTHONUSERBASE",
            "PYTHONPYCACHEPREFIX",
            "PYTHONWARNINGS",
            "BASH_ENV",
            "NODE_COMPILE_CACHE",
        ] {
            assert!(changes_how_packs_run(name), "{name}");
        }
        for name in [
            "HOME",
            "PATH",
            "PULUMI_CONFIG_PASSPHRASE",
            "NODE_ENV",
            "PYTHONUNBUFFERED",
            "PYTHONDONTWRITEBYTECODE",
            "PIPX_HOME",
            "NODE_EXTRA_CA_CERTS",
            "node_options",
        ] {
            assert!(!changes_how_packs_run(name), "{name}");
        }
        assert!(refuse_env(["HOME", "PATH"]).is_ok());
        let f = refuse_env(["HOME", "NODE_OPTIONS", "PIP_INDEX_URL"]).unwrap_err();
        assert_eq!(f.reason, FailureReason::PolicyPackFailed);
        assert_eq!(
            f.message,
            "the environment variable NODE_OPTIONS may not be set on a Stack the administrator's \
             policy packs cover: it changes how the packs run"
        );
    }

    #[test]
    fn paths_are_the_plan_s() {
        let p = pack("k8s-limits");
        let (dir, config) = pack_paths(&default_root(), &p);
        assert_eq!(dir.to_string_lossy(), p.dir());
        assert_eq!(config.to_string_lossy(), p.config_file());
        assert_eq!(
            cli_args(&[p.clone(), pack("b")], &default_root()),
            vec![
                (p.dir(), p.config_file()),
                (pack("b").dir(), pack("b").config_file())
            ]
        );
        assert!(runs_packs(Operation::Preview) && runs_packs(Operation::Up));
        assert!(!runs_packs(Operation::Refresh) && !runs_packs(Operation::Destroy));
        assert_eq!(
            pack_failed(&p, "boom").message,
            "policy pack \"k8s-limits\" of StackPolicy \"limits\": boom"
        );
    }

    #[test]
    fn the_pack_a_cli_line_names() {
        let packs = [pack("a-b"), pack("a")];
        let root = default_root();
        let line =
            format!("policy pack \"{POLICY_PACKS_DIR}/limits/a\" failed to start: exit status 1");
        assert_eq!(pack_in_line(&packs, &root, &line).unwrap().name, "a");
        let line = format!(
            "failed to load Pulumi policy project located at \"{POLICY_PACKS_DIR}/limits/a-b\": x"
        );
        assert_eq!(pack_in_line(&packs, &root, &line).unwrap().name, "a-b");
        assert!(pack_in_line(&packs, &root, "policy pack not found at \"/x\"").is_none());
    }

    #[test]
    fn unfetched_packs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = check_fetched(&[pack("a")], dir.path()).unwrap_err();
        assert_eq!(f.reason, FailureReason::PolicyPackFailed);
        assert!(f.message.contains("not found at"), "{}", f.message);
        std::fs::create_dir_all(dir.path().join("limits/a")).unwrap();
        std::fs::write(
            dir.path().join("limits/a/PulumiPolicy.yaml"),
            "runtime: nodejs\n",
        )
        .unwrap();
        assert!(check_fetched(&[pack("a")], dir.path()).is_err());
        std::fs::write(dir.path().join("limits/a.config.json"), "{}").unwrap();
        check_fetched(&[pack("a")], dir.path()).unwrap();
    }
}
