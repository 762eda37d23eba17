//! Reporting: the runner's own log lines (few, prefixed `pulumi-runner: `) and the result in
//! the container's termination message.

use pulumi_operator_api::plan::{Outcome, RunResult};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// The default termination-message file of a Kubernetes container.
pub const DEFAULT_RESULT_FILE: &str = "/dev/termination-log";

/// Prints one line of the runner's own on stderr, with known secret values masked.
pub fn log(message: impl AsRef<str>) {
    let line = crate::redact::mask(message.as_ref());
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "pulumi-runner: {line}");
    let _ = err.flush();
}

/// The result with known secret values masked in every text it carries (the operator copies
/// them into statuses and Events).
pub fn masked(result: &RunResult) -> RunResult {
    let mask = crate::redact::mask;
    let mut r = result.clone();
    r.message = mask(&r.message);
    r.permalink = r.permalink.as_deref().map(mask);
    r.outputs = r.outputs.as_deref().map(mask);
    for lock in &mut r.stale_locks_cleared {
        *lock = mask(lock);
    }
    // A policy's message may quote a resource's inputs.
    if let Some(policy) = r.policy.as_mut() {
        for v in &mut policy.items {
            v.message = mask(&v.message);
            v.urn = mask(&v.urn);
        }
    }
    r
}

/// Writes the result (masked, and cut to what a termination message may hold) to the
/// termination-message file, logs it, and returns the exit code: 0 on success, 1 on failure.
pub fn finish(result_file: &Path, result: &RunResult) -> ExitCode {
    let result = &masked(result);
    let text = result.to_termination_message();
    if let Err(e) = std::fs::write(result_file, text.as_bytes()) {
        log(format!(
            "cannot write the result to {}: {e}",
            result_file.display()
        ));
    }
    match result.outcome {
        Outcome::Succeeded => {
            if result.message.is_empty() {
                log("succeeded");
            } else {
                log(format!("succeeded: {}", result.message));
            }
            ExitCode::SUCCESS
        }
        Outcome::Failed => {
            let reason = result.reason.map(|r| r.as_str()).unwrap_or("Failed");
            log(format!("failed ({reason}): {}", result.message));
            ExitCode::from(1)
        }
    }
}

/// A successful result with a message.
pub fn succeeded(message: impl Into<String>) -> RunResult {
    RunResult {
        outcome: Outcome::Succeeded,
        reason: None,
        message: message.into(),
        permalink: None,
        summary: None,
        project: None,
        outputs: None,
        outputs_digest: None,
        stale_locks_cleared: Vec::new(),
        resources: None,
        changed: None,
        changes: Vec::new(),
        policy: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::plan::{FailureReason, Summary, MAX_RESULT_BYTES};

    #[test]
    fn result_file_is_written_and_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("termination-log");
        let mut r = RunResult::failed(FailureReason::UpdateFailed, "é".repeat(5000));
        r.summary = Some(Summary::default());
        r.permalink = Some("https://app.pulumi.com/o/p/s/updates/1".into());
        let code = finish(&file, &r);
        assert_eq!(code, ExitCode::from(1));
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.len() <= MAX_RESULT_BYTES, "{}", text.len());
        let back = RunResult::from_termination_message(&text).unwrap();
        assert_eq!(back.reason, Some(FailureReason::UpdateFailed));
        assert!(back.message.ends_with("..."));

        let ok = succeeded("up succeeded");
        assert_eq!(finish(&file, &ok), ExitCode::SUCCESS);
        let back =
            RunResult::from_termination_message(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(back.outcome, Outcome::Succeeded);
    }

    #[test]
    fn the_result_is_masked_before_it_is_written() {
        let mut r = crate::redact::Redactor::default();
        r.add("canary-report-secret");
        crate::redact::remember(&r);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("termination-log");
        let mut result = RunResult::failed(
            FailureReason::UpdateFailed,
            format!(
                "pulumi up failed: {} {}",
                "canary-report-secret",
                "y".repeat(6000)
            ),
        );
        result.stale_locks_cleared = vec!["canary-report-secret@h (pid 1)".into()];
        finish(&file, &result);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains("canary-report-secret"), "{text}");
        assert!(text.len() <= MAX_RESULT_BYTES);
        let back = RunResult::from_termination_message(&text).unwrap();
        assert!(back.message.starts_with("pulumi up failed: [secret] yyy"));
    }

    #[test]
    fn a_full_policy_report_fits_and_is_masked() {
        use pulumi_operator_api::policy::{PolicyReport, PolicyViolation};
        let mut r = crate::redact::Redactor::default();
        r.add("canary-policy-secret");
        crate::redact::remember(&r);
        let item = |i: usize| PolicyViolation {
            pack: "k8s-limits".into(),
            policy: "deployment-resource-limits".into(),
            urn: format!("urn:pulumi:dev::app::kubernetes:apps/v1:Deployment::app-{i}"),
            message: format!("canary-policy-secret {}", "m".repeat(280)),
            enforcement_level: "mandatory".into(),
        };
        let mut result = RunResult::failed(FailureReason::PolicyViolation, "x".repeat(2000));
        result.policy = Some(PolicyReport {
            packs: vec!["k8s-limits@0123456789ab".into()],
            violations: 40,
            mandatory: 40,
            items: (0..20).map(item).collect(),
            digest: None,
            check_failure: None,
        });
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("termination-log");
        finish(&file, &result);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.len() <= MAX_RESULT_BYTES, "{}", text.len());
        assert!(!text.contains("canary-policy-secret"), "{text}");
        let back = RunResult::from_termination_message(&text).unwrap();
        let policy = back.policy.unwrap();
        assert_eq!((policy.violations, policy.mandatory), (40, 40));
        assert!(!policy.items.is_empty());
    }

    #[test]
    fn unwritable_result_file_does_not_change_the_exit_code() {
        let code = finish(
            Path::new("/nonexistent-dir/x/termination-log"),
            &succeeded(""),
        );
        assert_eq!(code, ExitCode::SUCCESS);
    }
}
