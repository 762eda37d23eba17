//! The annotations a Stack writes on the Updates it creates and the Update controller reads:
//! options PKO's Update spec has no field for, and the Workspace generation the Job is built
//! from.

/// Annotations through which a Stack passes options PKO's Update spec has no field for.
pub const RETRY_ON_CONFLICT_ANNOTATION: &str = "pulumi.com/retry-on-update-conflict";
pub const EXPECT_NO_REFRESH_CHANGES_ANNOTATION: &str = "pulumi.com/expect-no-refresh-changes";
/// An earlier operation of the Stack succeeded, so its Pulumi stack exists: the runner skips
/// `stack select` (one CLI process) and creates the stack only if it is gone after all.
pub const STACK_EXISTS_ANNOTATION: &str = "pulumi.com/stack-exists";
/// The generation of the Workspace an Update was created against: its Job is built from that
/// Workspace or a newer one, never from an older cached copy.
pub const WORKSPACE_GENERATION_ANNOTATION: &str = "pulumi.com/workspace-generation";
