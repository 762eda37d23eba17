//! Why an Update cannot go on, as typed errors. Each message is what the Update's status, its
//! events and the operator's log show, word for word.

use pulumi_operator_api::sealed::SealError;

/// What is wrong with an Update or its Workspace, so that no plan can be built for it (the
/// Update fails with reason `InvalidUpdate`).
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum InvalidUpdate {
    #[error("unsupported update type {0:?}")]
    UnsupportedType(String),
    #[error("spec.type is required (preview, up, refresh or destroy)")]
    MissingType,
    #[error("spec.stackName is required")]
    MissingStackName,
    /// A name of the Workspace's `spec.env` that the operator sets itself.
    #[error("the Workspace's spec.env: {0}")]
    ReservedEnv(String),
    #[error("the Workspace's spec.git.url is empty")]
    EmptyGitUrl,
}

/// Why the outputs (or the saved plan) of an operation that succeeded cannot be had: the
/// Update fails with this after "the operation succeeded, but ".
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum OutputsUnavailable {
    #[error("its plan Secret is gone, so its outputs cannot be opened")]
    PlanSecretGone,
    #[error("its pod is gone, so its outputs cannot be read")]
    PodGone,
    #[error("its pod's log cannot be read: {0}")]
    LogUnreadable(String),
    #[error("its outputs are not in its pod's log as reported")]
    NotInLog,
    #[error("its outputs cannot be opened: {0}")]
    CannotOpen(SealError),
    #[error("its pod reported a plan that it was not asked for")]
    PlanNotAskedFor,
    #[error("its pod reported no saved plan")]
    NoSavedPlan,
    #[error("its saved plan is larger than a plan may be")]
    PlanTooLarge,
    /// A Secret of the name this Update writes, not this Update's.
    #[error("a Secret {0} that does not belong to this Update is in the way")]
    SecretInTheWay(String),
    /// The API server refused the `what` Secret ("outputs", "saved plan").
    #[error("its {what} Secret was refused: {message}")]
    SecretRefused { what: &'static str, message: String },
}

/// Why the approved plan an `up` applies cannot be had.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum PlanUnavailable {
    #[error("its preview Update is gone")]
    PreviewGone,
    #[error("it is not a plan of this Stack")]
    NotOfThisStack,
    #[error("its saved plan is gone")]
    SavedPlanGone,
}
