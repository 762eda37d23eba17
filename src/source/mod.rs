//! Program sources below the controllers: git (ls-remote of branch heads, on a bounded pool of
//! background calls shared by every Stack tracking a branch), Flux source artifacts, and git
//! credentials. The Stack controller resolves a Stack's source with them (`stack::source`).

pub mod auth;
pub mod flux;
pub mod git;
pub mod poll;
pub mod pool;

use pulumi_operator_api::names;

/// Why a source could not be resolved, with the `Stalled` reason: `SpecInvalid` (a missing
/// git credentials Secret or key, as in PKO), `NotAllowed` (a repository host the operator
/// does not contact) or `SourceUnavailable` (anything else).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveError {
    pub reason: &'static str,
    pub message: String,
}

impl ResolveError {
    pub fn unavailable(message: impl Into<String>) -> ResolveError {
        ResolveError {
            reason: names::REASON_SOURCE_UNAVAILABLE,
            message: message.into(),
        }
    }

    pub fn spec_invalid(message: impl Into<String>) -> ResolveError {
        ResolveError {
            reason: names::REASON_SPEC_INVALID,
            message: message.into(),
        }
    }

    /// The administrator's settings refuse the source (`NotAllowed`).
    pub fn not_allowed(message: impl Into<String>) -> ResolveError {
        ResolveError {
            reason: names::REASON_NOT_ALLOWED,
            message: message.into(),
        }
    }
}

impl From<RemoteError> for ResolveError {
    fn from(e: RemoteError) -> ResolveError {
        if e.not_allowed {
            ResolveError::not_allowed(e.message)
        } else {
            ResolveError::unavailable(e.message)
        }
    }
}

/// Why a git remote call gave no answer of its own (ls-remote failed, timed out or was
/// refused), already redacted: the message a user sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub message: String,
    /// The operator did not contact the remote: the administrator's settings refuse its host
    /// (`crate::runtime::remote_hosts`).
    pub not_allowed: bool,
}

impl RemoteError {
    pub fn not_allowed(e: crate::runtime::remote_hosts::Refused) -> RemoteError {
        RemoteError {
            message: e.0,
            not_allowed: true,
        }
    }
}

impl From<String> for RemoteError {
    fn from(message: String) -> RemoteError {
        RemoteError {
            message,
            not_allowed: false,
        }
    }
}

impl From<&str> for RemoteError {
    fn from(message: &str) -> RemoteError {
        RemoteError::from(message.to_string())
    }
}

impl From<pulumi_gitauth::SessionError> for RemoteError {
    fn from(e: pulumi_gitauth::SessionError) -> RemoteError {
        RemoteError::from(e.to_string())
    }
}

/// The message, as text.
impl std::ops::Deref for RemoteError {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}
