//! The operator's one error type, and the backoff that keeps a failing object from hot-looping.

use pulumi_operator_api::backoff::Backoff;
use std::time::Duration;

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    #[error("encoding: {0}")]
    Json(#[from] serde_json::Error),

    #[error("rendering YAML: {0}")]
    Yaml(#[from] serde_norway::Error),

    #[error("object has no {0}")]
    MissingField(&'static str),

    #[error("internal error (a bug, please report it): {0}")]
    Panicked(String),

    #[error("sealing outputs: {0}")]
    Sealing(#[from] pulumi_operator_api::sealed::SealError),
}

impl Error {
    /// Whether retrying cannot help by itself (the object or the cluster must change): the
    /// object then shows the error instead of only the operator's log.
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::Kube(kube::Error::Api(e)) => {
                (400..500).contains(&e.code) && !matches!(e.code, 404 | 409 | 429)
            }
            Error::Kube(kube::Error::BuildRequest(_)) => true,
            Error::Kube(_) => false,
            Error::Json(_) | Error::Yaml(_) | Error::MissingField(_) | Error::Panicked(_) => true,
            Error::Sealing(_) => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The message of a caught panic.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Requeue delay after a failed reconcile: grows with consecutive failures of the same object,
/// capped, so an API outage neither hot-loops nor leaves objects waiting for long.
pub fn backoff(failures: u32) -> Duration {
    const REQUEUE: Backoff = Backoff::new(Duration::from_secs(1), 2.0, Duration::from_secs(256));
    REQUEUE.after(failures.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(8), Duration::from_secs(256));
        assert_eq!(backoff(50), Duration::from_secs(256));
    }
}
