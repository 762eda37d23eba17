//! `pulumi-runner`: see the library documentation.

use clap::{Parser, Subcommand};
use pulumi_operator_api::plan::{PLAN_FILE, RUNNER_BINARY};
use pulumi_runner::plan::{Layout, DEFAULT_SHARE};
use pulumi_runner::report::{self, DEFAULT_RESULT_FILE};
use pulumi_runner::{bootstrap, fetch, plan, policy, redact, run, signals};
use std::path::PathBuf;
use std::process::ExitCode;

mod workspace;

#[derive(Parser, Debug)]
#[command(
    name = "pulumi-runner",
    version,
    about = "Runs one Pulumi stack operation inside a Kubernetes Job"
)]
struct Cli {
    /// Where the result (termination message) is written.
    #[arg(long, default_value = DEFAULT_RESULT_FILE, global = true)]
    result_file: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug)]
struct Common {
    /// The plan (JSON RunPlan).
    #[arg(long, default_value = PLAN_FILE)]
    plan: PathBuf,
    /// The share volume.
    #[arg(long, default_value = DEFAULT_SHARE)]
    share: PathBuf,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Copy this executable to DEST (default /var/run/pulumi-operator/bin/pulumi-runner), mode 0755.
    Bootstrap { dest: Option<PathBuf> },
    /// Fetch the program into <share>/source and link <share>/workspace to it, then the
    /// plan's policy packs into their directory.
    Fetch(Common),
    /// Install the dependencies of the plan's policy packs (`pulumi install` in each), with
    /// the pulumi CLI found on PATH.
    Policy(Common),
    /// Run the operation with the pulumi CLI found on PATH.
    Run(Common),
    /// Retained workspace (workspaceReclaimPolicy: Retain): prepare the stack as `run` does
    /// (install, select, config), run no operation, and stay up until SIGTERM for kubectl exec.
    Workspace {
        /// Only report whether the workspace is prepared (exit 0) — the readiness probe.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Print the version.
    Version,
}

fn main() -> ExitCode {
    pulumi_runner::ensure_crypto_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Version => {
            println!("pulumi-runner {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Command::Bootstrap { dest } => {
            signals::exit_on_termination();
            let dest = dest.unwrap_or_else(|| PathBuf::from(RUNNER_BINARY));
            bootstrap::bootstrap(&dest).unwrap_or_else(|f| f.into_result())
        }
        Command::Fetch(common) => match plan::load(&common.plan) {
            Ok(p) => {
                install_redactor(Some(&p));
                signals::exit_on_termination();
                fetch_all(&p, &Layout::new(&common.share)).unwrap_or_else(|f| f.into_result())
            }
            Err(f) => {
                install_redactor(None);
                f.into_result()
            }
        },
        Command::Policy(common) => match plan::load(&common.plan) {
            Ok(p) => {
                install_redactor(Some(&p));
                with_runtime(|signals| async move {
                    let root = policy::default_root();
                    policy::install::install_packs(
                        &p.policy_packs,
                        &root,
                        std::path::Path::new("pulumi"),
                        signals,
                    )
                    .await
                    .unwrap_or_else(|f| f.into_result())
                })
            }
            Err(f) => {
                install_redactor(None);
                f.into_result()
            }
        },
        Command::Workspace { check, common } => {
            let layout = Layout::new(&common.share);
            if check {
                return workspace::check(&layout);
            }
            match workspace::load(&common.plan) {
                Ok(p) => {
                    install_redactor(Some(&p.plan));
                    workspace_async(&p, &layout)
                }
                Err(f) => {
                    install_redactor(None);
                    f.into_result()
                }
            }
        }
        Command::Run(common) => match plan::load(&common.plan) {
            Ok(p) => {
                install_redactor(Some(&p));
                run_async(&p, &Layout::new(&common.share))
            }
            Err(f) => {
                install_redactor(None);
                f.into_result()
            }
        },
    };
    report::finish(&cli.result_file, &result)
}

/// Masks the plan's secret values in everything the runner prints from here on, and says
/// which are too short to be masked.
fn install_redactor(plan: Option<&pulumi_operator_api::plan::RunPlan>) {
    let too_short = redact::install(plan);
    if !too_short.is_empty() {
        report::log(format!(
            "secret values shorter than {} characters cannot be masked in the output without \
             mangling it, and are not: {}",
            redact::MIN_SECRET_CHARS,
            too_short.join(", ")
        ));
    }
}

/// The program, then the policy packs (whose labels the message adds).
fn fetch_all(
    p: &pulumi_operator_api::plan::RunPlan,
    layout: &Layout,
) -> Result<pulumi_operator_api::plan::RunResult, pulumi_runner::error::Failure> {
    let mut result = fetch::fetch(p, layout)?;
    let labels = policy::fetch::fetch_packs(&p.policy_packs, &policy::default_root())?;
    if !labels.is_empty() {
        result.message = format!("{}; policy packs {}", result.message, labels.join(", "));
    }
    Ok(result)
}

fn run_async(
    p: &pulumi_operator_api::plan::RunPlan,
    layout: &Layout,
) -> pulumi_operator_api::plan::RunResult {
    let opts = run::RunOptions::default();
    with_runtime(|signals| async move { run::run(p, layout, &opts, signals).await })
}

fn workspace_async(
    p: &pulumi_operator_api::plan::WorkspacePlan,
    layout: &Layout,
) -> pulumi_operator_api::plan::RunResult {
    let opts = run::RunOptions::default();
    with_runtime(|signals| async move { workspace::serve(p, layout, &opts, signals).await })
}

/// Runs a step on a single-threaded runtime, with the signal handlers it forwards.
fn with_runtime<F, Fut>(step: F) -> pulumi_operator_api::plan::RunResult
where
    F: FnOnce(signals::Signals) -> Fut,
    Fut: std::future::Future<Output = pulumi_operator_api::plan::RunResult>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return pulumi_runner::error::Failure::new(
                pulumi_operator_api::plan::FailureReason::UpdateFailed,
                format!("cannot start the runtime: {e}"),
            )
            .into_result()
        }
    };
    runtime.block_on(async {
        let signals = match signals::Signals::install() {
            Ok(s) => s,
            Err(e) => {
                report::log(format!("cannot install signal handlers: {e}"));
                signals::Signals::none()
            }
        };
        step(signals).await
    })
}
