//! The runner: runs inside every update Job (DESIGN.md, "Flow of one operation", steps 5–6).
//!
//! - `bootstrap [DEST]` (init container, runner image): copies this static binary into `/share`.
//! - `fetch` (init container, runner image): materialises the program in `/share/workspace`.
//! - `run` (the `pulumi` container, the user's image): drives the `pulumi` CLI through the
//!   operation as pulumi-cli-contract.md describes, streams its output, writes the outputs
//!   Secret, and reports.
//!
//! Every subcommand reports a [`pulumi_operator_api::plan::RunResult`] in the termination
//! message and exits 0 on success, 1 on failure.

pub mod bootstrap;
pub mod classify;
pub mod config;
pub mod deps;
pub mod dotenv;
pub mod error;
pub mod exec;
pub mod fetch;
pub mod locks;
pub mod outputs;
pub mod plan;
pub mod pulumi;
pub mod redact;
pub mod report;
pub mod run;
pub mod signals;

/// Installs ring as rustls' process-wide crypto provider (reqwest is built without a
/// provider of its own so that no C crypto library is linked). Idempotent.
pub fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
