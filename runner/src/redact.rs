//! Keeping credentials and secret values out of messages: the same rules as the operator's
//! (one implementation, in the shared `pulumi-gitauth` crate).

pub use pulumi_gitauth::redact::{urls, Redactor};
