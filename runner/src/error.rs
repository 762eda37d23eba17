//! The one error type of the runner: a failure with the reason the operator folds into the
//! Update's `Failed` condition. Messages never carry secret values.

use pulumi_operator_api::plan::{FailureReason, RunResult};

/// A classified failure of one runner step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason:?}: {message}")]
pub struct Failure {
    pub reason: FailureReason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
        }
    }

    pub fn source_unavailable(message: impl Into<String>) -> Failure {
        Failure::new(FailureReason::SourceUnavailable, message)
    }

    pub fn config_invalid(message: impl Into<String>) -> Failure {
        Failure::new(FailureReason::ConfigInvalid, message)
    }

    pub fn into_result(self) -> RunResult {
        RunResult::failed(self.reason, self.message)
    }
}

/// Formats an error with its chain of sources (`a: b: c`), skipping repeated parts.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}
