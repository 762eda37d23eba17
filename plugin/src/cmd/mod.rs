//! The commands: each reads what it needs through [`crate::cluster`], computes what to show
//! with [`crate::view`], and prints it. Thin on purpose: the logic is in `view`.

pub mod approve;
pub mod completion;
pub mod describe;
pub mod get;
pub mod history;
pub mod logs;
pub mod outputs;
pub mod plan;
pub mod reconcile;
pub mod suspend;

use crate::cli::{Cli, Command};
use crate::cluster::{connect, Cluster};
use crate::view::terminal::{terminal_safe, terminal_safe_text};
use anyhow::Result;
use std::io::IsTerminal;
use std::process::ExitCode;

/// Whether to colour what goes to stdout: only on a terminal, and not with `NO_COLOR`.
pub fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Exit status of a wait that timed out.
pub const EXIT_TIMEOUT: u8 = 2;

/// Runs the command line; the exit status says how it went.
pub async fn run(cli: Cli) -> Result<ExitCode> {
    if let Command::Completion(args) = &cli.command {
        completion::run(args);
        return Ok(ExitCode::SUCCESS);
    }
    let cluster: Cluster = connect(&cli.global).await?;
    match cli.command {
        Command::Get(args) => get::run(&cluster, &args).await.map(|_| ExitCode::SUCCESS),
        Command::Describe(args) => describe::run(&cluster, &args)
            .await
            .map(|_| ExitCode::SUCCESS),
        Command::Logs(args) => logs::run(&cluster, &args).await.map(|_| ExitCode::SUCCESS),
        Command::History(args) => history::run(&cluster, &args)
            .await
            .map(|_| ExitCode::SUCCESS),
        Command::Reconcile(args) => reconcile::run(&cluster, &args).await,
        Command::Suspend(args) => suspend::run(&cluster, &args.stack, true)
            .await
            .map(|_| ExitCode::SUCCESS),
        Command::Resume(args) => suspend::run(&cluster, &args.stack, false)
            .await
            .map(|_| ExitCode::SUCCESS),
        Command::Plan(args) => plan::run(&cluster, &args).await.map(|_| ExitCode::SUCCESS),
        Command::Approve(args) => approve::run(&cluster, &args).await,
        Command::Outputs(args) => outputs::run(&cluster, &args)
            .await
            .map(|_| ExitCode::SUCCESS),
        Command::Completion(_) => Ok(ExitCode::SUCCESS),
    }
}

/// Polls the Stack until `progress` says it is done (exit 0 when it went well, 1 when not),
/// printing each new waiting state on stderr; exit [`EXIT_TIMEOUT`] after `timeout`.
pub async fn wait_for(
    cluster: &Cluster,
    stack: &str,
    timeout: std::time::Duration,
    progress: impl Fn(&crate::view::rows::Viewed) -> crate::view::wait::Progress,
) -> Result<ExitCode> {
    use crate::view::wait::Progress;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut said = String::new();
    loop {
        let viewed = cluster.stack(stack).await?;
        match progress(&viewed) {
            Progress::Done { ok, message } => {
                println!("{}", terminal_safe_text(&message));
                return Ok(if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
            Progress::Waiting(text) if text != said => {
                eprintln!("{}", terminal_safe(&text));
                said = text;
            }
            Progress::Waiting(_) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            eprintln!(
                "timed out after {}s; still {}. Follow it with `kubectl pulumi logs {stack} -f` \
                 or `kubectl pulumi get {stack} -w`",
                timeout.as_secs(),
                terminal_safe(&said)
            );
            return Ok(ExitCode::from(EXIT_TIMEOUT));
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}

/// The field manager of the plugin's writes.
pub const FIELD_MANAGER: &str = "kubectl-pulumi";
