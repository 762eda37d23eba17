//! `kubectl pulumi completion <shell>`.

use crate::cli::{Cli, CompletionArgs};
use clap::CommandFactory;

/// Prints the completion script of the shell.
pub fn run(args: &CompletionArgs) {
    let mut command = Cli::command();
    clap_complete::generate(
        args.shell,
        &mut command,
        "kubectl-pulumi",
        &mut std::io::stdout(),
    );
}
