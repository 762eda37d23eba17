//! The command line: global connection flags (as kubectl's) and one subcommand per task.

use crate::view::format::Output;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const ABOUT: &str = "See and drive the Pulumi Stacks of pulumi-operator-rs (pulumi.com/v1 Stack).";

const LONG_ABOUT: &str = "\
See and drive the Pulumi Stacks of pulumi-operator-rs (pulumi.com/v1 Stack).

Every stack operation (up, preview, destroy) runs as an Update and a Kubernetes Job of the \
same name. This plugin reads Stacks, Updates, Jobs, pods and their logs, and writes only \
annotations and spec.suspend on Stacks: it acts with your kubeconfig and your rights only \
(the aggregated `view` role is enough for get, describe, logs, history, outputs and plan; \
`edit` for reconcile, suspend, resume, approve and `outputs --show-secrets`).";

const EXAMPLES: &str = "\
Examples:
  kubectl pulumi get -A                      # every Stack, with its state
  kubectl pulumi describe my-stack           # Stack → Updates → Jobs → pods
  kubectl pulumi logs my-stack -f            # the Pulumi output of the running operation
  kubectl pulumi history my-stack            # past operations
  kubectl pulumi reconcile my-stack          # run it now and wait for the result
  kubectl pulumi plan my-stack               # the plan awaiting approval
  kubectl pulumi approve my-stack --plan my-stack-plan-1a2b3c4d5e
  kubectl pulumi outputs my-stack -o json";

/// `kubectl pulumi`: the command line.
#[derive(Debug, Parser)]
#[command(name = "kubectl-pulumi", bin_name = "kubectl pulumi", version, about = ABOUT,
          long_about = LONG_ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    /// Where and as whom to connect.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The connection flags, as kubectl's.
#[derive(Debug, Args, Clone, Default)]
pub struct Global {
    /// The namespace of the Stack (default: the current context's namespace, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig file to use (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Act as this user (impersonation, e.g. `system:serviceaccount:team:ci`), as kubectl's --as.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// With --as: act in this group too (repeatable), as kubectl's --as-group.
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List Stacks with their state, last operation, age and reason.
    #[command(
        long_about = "\
List Stacks with their state, last operation, age and reason.

STATE is one word: Ready (deployed, up to date), Reconciling (an operation runs or is due), \
Failing (the last operation failed; the operator retries with backoff), Stalled (nothing \
happens without you: fix the spec or source, or `kubectl pulumi reconcile`), Suspended \
(spec.suspend: no new operation starts). REASON is the reason of the condition behind it.",
        after_help = "Examples:\n  kubectl pulumi get\n  kubectl pulumi get my-stack -w\n  kubectl pulumi get -A -o json | jq '.[] | select(.state != \"Ready\")'"
    )]
    Get(GetArgs),
    /// Show a Stack and the chain of its operations: Updates, their Jobs and pods, Events.
    #[command(after_help = "Example:\n  kubectl pulumi describe my-stack")]
    Describe(DescribeArgs),
    /// Print the Pulumi output (the Job's log) of the running or last operation.
    #[command(
        long_about = "\
Print the Pulumi output (the Job's log) of the running or last operation.

The operation is the Stack's running Update, else its last finished one, else its newest \
Update; --update picks another (see `kubectl pulumi history`). The log is the `pulumi` \
container's; --container picks an init container (`bootstrap`, `fetch`, `policy`) and \
--all-containers prints them all in order. Finished Jobs are deleted with their Update \
(after 24 hours by default): older logs are gone.",
        after_help = "Examples:\n  kubectl pulumi logs my-stack -f\n  kubectl pulumi logs my-stack --update my-stack-1a2b3c4d5e --all-containers"
    )]
    Logs(LogsArgs),
    /// List the kept operations (Updates) of a Stack: type, result, start, duration, revision.
    #[command(
        after_help = "Examples:\n  kubectl pulumi history my-stack\n  kubectl pulumi history my-stack -o json"
    )]
    History(HistoryArgs),
    /// Run a Stack now (a new `pulumi.com/reconciliation-request`) and wait for the result.
    #[command(
        long_about = "\
Run a Stack now and wait for the result.

Sets the annotation pulumi.com/reconciliation-request to a new value: the operator runs the \
Stack's operation (`up`, or `preview` for preview Stacks) even when nothing changed, and \
records the value in status.lastUpdate.reconcileRequest when it has finished. This command \
waits for that and prints the result. Exit status: 0 when the operation succeeded (or, for a \
Stack with spec.approval, when its plan awaits approval), 1 when it failed or cannot run \
(Stalled, suspended), 2 on --timeout.",
        after_help = "Examples:\n  kubectl pulumi reconcile my-stack\n  kubectl pulumi reconcile my-stack --timeout 1h\n  kubectl pulumi reconcile my-stack --no-wait"
    )]
    Reconcile(ReconcileArgs),
    /// Stop new operations of a Stack (spec.suspend: true); a running one finishes.
    #[command(
        long_about = "\
Stop new operations of a Stack: sets spec.suspend to true.

Nothing new starts (resyncs, new commits, drift checks, retries, plans, reconcile requests); \
an operation already running finishes. Deleting a suspended Stack still destroys it when \
destroyOnFinalize is set. Undo with `kubectl pulumi resume`.",
        after_help = "Example:\n  kubectl pulumi suspend my-stack"
    )]
    Suspend(StackArg),
    /// Let a suspended Stack run again (spec.suspend: false).
    #[command(
        long_about = "\
Let a suspended Stack run again: sets spec.suspend to false.

What changed meanwhile (a commit, the spec, a reconcile request) is picked up by one \
operation; if nothing changed, none starts.",
        after_help = "Example:\n  kubectl pulumi resume my-stack"
    )]
    Resume(StackArg),
    /// Show the plan of a Stack with spec.approval that awaits approval.
    #[command(
        long_about = "\
Show the plan of a Stack with spec.approval: per resource, what its approved `up` would do \
(create, update, replace, delete), with the resource's type and name.

The plan is a `preview --save-plan` Update; its name is the plan's id, which `kubectl pulumi \
approve --plan` takes. The full list is read from the saved plan (the Secret \
<plan>-saved-plan, which needs `get secrets`, as the `edit` role gives); without that right \
the first 20 changes recorded in the Stack's status are shown. The diff itself: `kubectl \
pulumi logs <stack> --update <plan>`.",
        after_help = "Examples:\n  kubectl pulumi plan my-stack\n  kubectl pulumi plan my-stack -o json | jq -r .plan"
    )]
    Plan(PlanArgs),
    /// Approve exactly the pending plan of a Stack (pulumi.com/approve-plan) and wait for its up.
    #[command(
        long_about = "\
Approve the pending plan of a Stack with spec.approval, and wait for its `up`.

With --plan, the approval is refused (exit 1) unless that plan is still the pending one: a \
new commit or spec change made since you read it replaces the plan, and the new one must be \
read and approved. The check is made by the API server with the annotation (a JSON patch \
that tests status.approval.plan), so a plan replaced at the same moment is never approved \
by mistake. Without --plan, the pending plan is shown and approved as it is.",
        after_help = "Examples:\n  kubectl pulumi plan my-stack\n  kubectl pulumi approve my-stack --plan my-stack-plan-1a2b3c4d5e\n  kubectl pulumi approve my-stack --plan my-stack-plan-1a2b3c4d5e --no-wait"
    )]
    Approve(ApproveArgs),
    /// Print a Stack's outputs; secret ones as [secret] unless --show-secrets.
    #[command(
        long_about = "\
Print a Stack's outputs (status.outputs, from its last successful `up`).

Secret outputs are shown as [secret]. With --show-secrets their values are read from the \
outputs Secret <update>-stack-outputs of the `up` that produced them, which needs `get \
secrets` in the namespace (the `edit` role gives it); it is gone once that Update has been \
deleted (24 hours after it finished, by default).",
        after_help = "Examples:\n  kubectl pulumi outputs my-stack\n  kubectl pulumi outputs my-stack --show-secrets -o json"
    )]
    Outputs(OutputsArgs),
    /// Print a shell completion script.
    #[command(long_about = "\
Print a shell completion script for kubectl-pulumi.

bash:  kubectl pulumi completion bash > /etc/bash_completion.d/kubectl-pulumi
zsh:   kubectl pulumi completion zsh > \"${fpath[1]}/_kubectl-pulumi\"
fish:  kubectl pulumi completion fish > ~/.config/fish/completions/kubectl-pulumi.fish

The scripts complete the `kubectl-pulumi` command; kubectl itself completes plugins from \
an executable named kubectl_complete-pulumi.")]
    Completion(CompletionArgs),
}

/// A Stack's name.
#[derive(Debug, Args)]
pub struct StackArg {
    /// The Stack's name.
    pub stack: String,
}

/// `get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// Only this Stack.
    pub stack: Option<String>,
    /// Stacks of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// After listing, print each change as it happens (Ctrl-C to stop).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

/// `describe`.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// The Stack's name.
    pub stack: String,
    /// Output format (json and yaml print the same chain as data).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

/// `logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The Stack's name.
    pub stack: String,
    /// Keep printing the log as it is written, until the operation ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The Update (operation) whose log to print (default: the running or last one).
    #[arg(long, value_name = "NAME")]
    pub update: Option<String>,
    /// The container whose log to print.
    #[arg(
        short = 'c',
        long,
        default_value = "pulumi",
        conflicts_with = "all_containers"
    )]
    pub container: String,
    /// Print every container's log, init containers first.
    #[arg(long)]
    pub all_containers: bool,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<i64>,
}

/// `history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The Stack's name.
    pub stack: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

/// `reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The Stack's name.
    pub stack: String,
    /// How long to wait for the result (e.g. 90s, 30m, 2h).
    #[arg(long, default_value = "30m", value_parser = parse_timeout)]
    pub timeout: std::time::Duration,
    /// Only ask; do not wait for the result.
    #[arg(long)]
    pub no_wait: bool,
}

/// `plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The Stack's name.
    pub stack: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

/// `approve`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The Stack's name.
    pub stack: String,
    /// The plan you reviewed (from `kubectl pulumi plan`); refused if it is no longer pending.
    #[arg(long, value_name = "ID")]
    pub plan: Option<String>,
    /// How long to wait for the plan's up (e.g. 90s, 30m, 2h).
    #[arg(long, default_value = "30m", value_parser = parse_timeout)]
    pub timeout: std::time::Duration,
    /// Return once the operator has taken the approval, without waiting for the up.
    #[arg(long)]
    pub no_wait: bool,
}

/// `outputs`.
#[derive(Debug, Args)]
pub struct OutputsArgs {
    /// The Stack's name.
    pub stack: String,
    /// Show the values of secret outputs (needs `get secrets` in the namespace).
    #[arg(long)]
    pub show_secrets: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

/// `completion`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `90s`, `30m`, `2h`, `1h30m` or plain seconds.
pub fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(std::time::Duration::from_secs(secs));
    }
    let mut total = 0u64;
    let mut number = String::new();
    for ch in t.chars() {
        if ch.is_ascii_digit() {
            number.push(ch);
            continue;
        }
        let unit = match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(format!("{text:?}: use a duration like 90s, 30m or 2h")),
        };
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{text:?}: a number must come before {ch:?}"))?;
        total += n * unit;
        number.clear();
    }
    if !number.is_empty() || t.is_empty() {
        return Err(format!("{text:?}: use a duration like 90s, 30m or 2h"));
    }
    Ok(std::time::Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn timeouts_parse() {
        assert_eq!(parse_timeout("90").unwrap().as_secs(), 90);
        assert_eq!(parse_timeout("90s").unwrap().as_secs(), 90);
        assert_eq!(parse_timeout("1h30m").unwrap().as_secs(), 5400);
        assert!(parse_timeout("5x").is_err());
        assert!(parse_timeout("m").is_err());
        assert!(parse_timeout("5m3").is_err());
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = Cli::try_parse_from([
            "kubectl-pulumi",
            "get",
            "-n",
            "team",
            "-A",
            "--context",
            "c",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("team"));
        assert_eq!(cli.global.context.as_deref(), Some("c"));
        let cli =
            Cli::try_parse_from(["kubectl-pulumi", "--as", "u", "logs", "app", "-f"]).unwrap();
        assert_eq!(cli.global.as_user.as_deref(), Some("u"));
        assert!(matches!(
            cli.command,
            Command::Logs(LogsArgs { follow: true, .. })
        ));
    }
}
