//! The runner: runs inside every update Job (docs/architecture.md, the flow of one operation).
//!
//! - `bootstrap [DEST]` (init container, runner image): copies this static binary into `/share`.
//! - `fetch` (init container, runner image): materialises the program in `/share/workspace`
//!   (and the administrator's policy packs in their own volume).
//! - `policy` (init container, the Workspace's image, only with the administrator's policy
//!   packs): installs the packs' dependencies (`crate::policy`).
//! - `run` (the `pulumi` container, the user's image): drives the `pulumi` CLI through the
//!   operation (`pulumi install`, `stack select`, config, then `up`, `preview`, `refresh` or
//!   `destroy`), streams its output, hands the outputs over sealed, and reports. With a
//!   heartbeat in the plan it proves its pod alive meanwhile (with the pod's token,
//!   `token_proof`, or a Lease), and stops Pulumi itself when it cannot (`heartbeat`).
//!
//! Every subcommand reports a [`pulumi_operator_api::plan::RunResult`] in the termination
//! message and exits 0 on success, 1 on failure.

pub mod bootstrap;
pub mod classify;
pub mod config;
pub mod deps;
pub mod dotenv;
pub mod error;
pub mod eventlog;
pub mod exec;
pub mod fetch;
pub mod heartbeat;
pub mod locks;
pub mod outputs;
pub mod plan;
pub mod policy;
pub mod pulumi;
pub mod redact;
pub mod report;
pub mod run;
pub mod signals;
pub mod state;
pub mod token_proof;

/// Installs ring as rustls' process-wide crypto provider (reqwest is built without a
/// provider of its own so that no C crypto library is linked). Idempotent.
pub fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
