//! The PKO-compatible API of the operator: the custom resources `pulumi.com/v1` `Stack` and
//! `Program` (plus the deprecated `pulumi.com/v1alpha1` view of `Stack`),
//! `auto.pulumi.com/v1alpha1` `Workspace` and `Update`, the compatibility strings in
//! [`names`], CRD generation in [`crd`], and pure helpers on stack specs in [`validation`].

pub mod backoff;
pub mod common;
pub mod crd;
pub mod names;
pub mod plan;
pub mod policy;
pub mod program;
pub mod reference;
pub mod sealed;
pub mod stack;
pub mod update;
pub mod validation;
pub mod workspace;

pub use common::{
    parse_duration, DurationError, EmbeddedObjectMeta, ProjectInfo, TemplateObjectMeta,
};
pub use program::{
    Artifact, ConfigType, Configuration, CustomTimeouts, Getter, Program, ProgramDefinition,
    ProgramSpec, ProgramStatus, Resource, ResourceOptions,
};
pub use stack::{
    Approval, ApprovalState, ApprovalStatus, BasicAuth, ConfigMapRef, CurrentStackUpdate,
    DriftDetection, DriftStatus, EnvSelector, FluxSource, FluxSourceReference, FsSelector,
    GitAuthConfig, GitHubAppAuth, GitSource, LiteralRef, MaintenanceWindow, PrerequisiteRef,
    ProgramReference, RequirementSpec, ResourceChange, ResourceRef, ResourceSelectorType,
    SecretSelector, SshAuth, Stack, StackSpec, StackStatus, StackUpdateState,
    StackUpdateStateMessage, StateResources, UpdateTemplate, WorkspaceReclaimPolicy,
    WorkspaceTemplate,
};
pub use update::{Update, UpdateSpec, UpdateStatus, UpdateType};
pub use validation::{
    validate_stack, validate_stack_spec, GitRevision, SourceKind, SpecError, StackSource,
};
pub use workspace::{
    ConfigItem, ConfigValueFrom, EmbeddedPodTemplateSpec, EmbeddedServiceTemplateSpec, LocalSource,
    SecurityProfile, Workspace, WorkspaceFluxSource, WorkspaceGitAuth, WorkspaceGitHubAppAuth,
    WorkspaceGitSource, WorkspaceSpec, WorkspaceStack, WorkspaceStatus,
};
