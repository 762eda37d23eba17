//! `kubectl pulumi`: a kubectl plugin for the Stacks of pulumi-operator-rs. It reads Stacks,
//! Updates, Jobs, pods and logs, and writes annotations and `spec.suspend` on Stacks, with the
//! user's own kubeconfig and rights; it never talks to the operator itself.

mod cli;
mod cluster;
mod cmd;
mod view;

use clap::Parser;
use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cmd::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            // Errors may quote the cluster (an API message, a plan's id): shown escaped.
            eprintln!(
                "error: {}",
                view::terminal::terminal_safe_text(&format!("{err:#}"))
            );
            ExitCode::FAILURE
        }
    }
}
