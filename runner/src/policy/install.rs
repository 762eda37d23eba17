//! `pulumi-runner policy` (the `policy` init container: the Workspace's image, with a clean
//! environment the operator sets): installs each pack's dependencies with `pulumi install`
//! in its directory (npm for a TypeScript pack, the virtualenv of `PulumiPolicy.yaml` for a
//! Python one), before the `pulumi` container, which mounts the packs read-only, runs.

use crate::classify::classify;
use crate::error::Failure;
use crate::exec::{Outcome, Runner};
use crate::policy::{pack_failed, pack_paths};
use crate::report::{log, succeeded};
use crate::signals::Signals;
use pulumi_operator_api::plan::{FailureReason, PolicyPackPlan, RunResult};
use std::path::Path;

/// Installs every pack's dependencies, in the plan's order; stops at the first failure.
pub async fn install_packs(
    packs: &[PolicyPackPlan],
    root: &Path,
    pulumi: &Path,
    signals: Signals,
) -> Result<RunResult, Failure> {
    let mut labels = Vec::new();
    for pack in packs {
        let (dir, _) = pack_paths(root, pack);
        if !dir.join("PulumiPolicy.yaml").is_file() {
            return Err(pack_failed(
                pack,
                format!(
                    "not found at {} (the fetch step did not run or failed)",
                    dir.display()
                ),
            ));
        }
        let started = std::time::Instant::now();
        let runner = Runner::new(pulumi, &dir, signals.clone());
        // In a directory with PulumiPolicy.yaml the CLI installs the pack's dependencies
        // (and never plugins, whatever `--no-plugins` says).
        let out = runner.run(&crate::pulumi::install()).await?;
        if !out.success() {
            return Err(install_failure(pack, &out));
        }
        log(format!(
            "policy pack {} installed in {:.1}s",
            pack.label(),
            started.elapsed().as_secs_f64()
        ));
        labels.push(pack.label());
    }
    Ok(succeeded(if labels.is_empty() {
        "no policy packs to install".to_string()
    } else {
        format!("policy packs installed: {}", labels.join(", "))
    }))
}

/// The failure of a pack's `pulumi install`, with the package manager's own first lines.
pub fn install_failure(pack: &PolicyPackPlan, out: &Outcome) -> Failure {
    if classify(out.code, &out.observed, out.interrupted) == FailureReason::Interrupted {
        return Failure::new(
            FailureReason::Interrupted,
            format!(
                "pulumi install of policy pack {:?} was interrupted",
                pack.name
            ),
        );
    }
    let cause = match out.observed.tool_error_summary() {
        tool if !tool.is_empty() => tool,
        _ => out.observed.error_summary(),
    };
    let code = match out.code {
        Some(c) => format!("exit code {c}"),
        None => "killed by a signal".to_string(),
    };
    if cause.is_empty() {
        pack_failed(pack, format!("pulumi install failed ({code})"))
    } else {
        pack_failed(pack, format!("pulumi install failed:\n{cause}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Observed, Stream};
    use pulumi_operator_api::plan::Source;

    fn pack() -> PolicyPackPlan {
        PolicyPackPlan {
            name: "k8s-limits".into(),
            policy: "limits".into(),
            source: Source::Git {
                url: "https://example.com/p.git".into(),
                commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
                reference: None,
                shallow: true,
                dir: None,
            },
            config: None,
        }
    }

    fn outcome(code: Option<i32>, stderr: &str) -> Outcome {
        let mut observed = Observed::default();
        observed.text(Stream::Stderr, stderr);
        Outcome {
            code,
            observed,
            stdout: Vec::new(),
            interrupted: false,
        }
    }

    #[test]
    fn install_failures_name_the_pack_and_the_real_error() {
        let f = install_failure(
            &pack(),
            &outcome(
                Some(1),
                "npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/@pulumi%2fnope\nerror: installing dependencies: npm install failed: exit status 1\n",
            ),
        );
        assert_eq!(f.reason, FailureReason::PolicyPackFailed);
        assert_eq!(
            f.message,
            "policy pack \"k8s-limits\" of StackPolicy \"limits\": pulumi install failed:\n\
             npm error 404 Not Found - GET https://registry.npmjs.org/@pulumi%2fnope"
        );
        let f = install_failure(&pack(), &outcome(Some(1), "error: no runtime\n"));
        assert!(
            f.message.ends_with("pulumi install failed:\nno runtime"),
            "{}",
            f.message
        );
        let f = install_failure(&pack(), &outcome(Some(2), ""));
        assert!(
            f.message.ends_with("pulumi install failed (exit code 2)"),
            "{}",
            f.message
        );
        assert_eq!(
            install_failure(&pack(), &outcome(None, "")).reason,
            FailureReason::Interrupted
        );
    }

    #[tokio::test]
    async fn a_pack_that_was_not_fetched_fails_before_any_install() {
        let dir = tempfile::tempdir().unwrap();
        let f = install_packs(
            &[pack()],
            dir.path(),
            Path::new("/nonexistent/pulumi"),
            Signals::none(),
        )
        .await
        .unwrap_err();
        assert_eq!(f.reason, FailureReason::PolicyPackFailed);
        assert!(f.message.contains("not found at"), "{}", f.message);
    }
}
