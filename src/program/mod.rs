//! The Program controller: renders each Program into the Pulumi.yaml that its Stacks run
//! (`project`, pure), and publishes its sha256 digest as a Flux-style `status.artifact`, as PKO
//! does (`reconcile`).

pub mod project;
pub mod reconcile;

pub use project::{digest, render_project, too_large};

/// Program sources are referenced from the Workspace with this URL scheme.
pub const PROGRAM_SCHEME: &str = "program://";
