//! TEST STAND-IN for the real Pulumi CLI — for tests only, never for real deployments.
//!
//! This binary is named `pulumi` and follows the CLI contract in
//! `shared/pulumi-cli-contract.md` (flags, argv the Go Automation API builds, environment
//! variables, JSON output shapes, event log, exit codes, error texts, signals and locks), so that
//! the operator's runner can drive it exactly like the real CLI. It supports the file (DIY)
//! backend, the passphrase secrets provider (with a stand-in cipher, not the real format), and
//! runs Pulumi YAML programs with a few built-in resource types (`standin:index:Record`,
//! `standin:index:Fail`, `standin:index:Sleep`, `time:Sleep`). See README.md.

mod backend;
mod cli;
mod commands;
mod crypto;
mod engine;
mod events;
mod program;
mod project;
mod session;
mod util;
mod value;

use util::{Failure, Res};

/// The version this stand-in reports (`PULUMI_STANDIN_VERSION` overrides it).
pub const DEFAULT_VERSION: &str = "3.259.0";

pub fn version_string() -> String {
    std::env::var("PULUMI_STANDIN_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.trim_start_matches('v').to_string())
        .unwrap_or_else(|| DEFAULT_VERSION.to_string())
}

/// `vX.Y.Z`, as release builds print it.
pub fn version_tag() -> String {
    format!("v{}", version_string())
}

fn version_parts() -> (u64, u64, u64) {
    let v = version_string();
    let core = v.split(['-', '+']).next().unwrap_or_default().to_string();
    let mut it = core.split('.').map(|x| x.parse::<u64>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

pub fn version_at_least(major: u64, minor: u64, patch: u64) -> bool {
    version_parts() >= (major, minor, patch)
}

fn help(path: &[&str]) {
    let cmd = if path.is_empty() {
        "pulumi".to_string()
    } else {
        format!("pulumi {}", path.join(" "))
    };
    println!("{cmd}: a TEST STAND-IN for the Pulumi CLI (see tests/pulumi-standin/README.md).");
    println!();
    println!("Usage:");
    println!("  {cmd} [flags]");
    println!();
    println!("Commands: version, whoami, about, login, logout, stack (init|select|ls|rm|output|history|export|import),");
    println!("          config (get|set|set-all|rm|rm-all|refresh|env), preview, up, refresh, destroy, cancel, install, plugin");
}

fn dispatch(p: &cli::Parsed) -> Res<()> {
    let path = p.cmd();
    if p.bool("help") {
        help(&path);
        return Ok(());
    }
    if let Some(dir) = p.str("cwd").filter(|d| !d.is_empty()) {
        std::env::set_current_dir(&dir).map_err(|e| {
            Failure::new(
                util::exit::ERROR,
                format!(
                    "chdir {dir}: {}",
                    if e.kind() == std::io::ErrorKind::NotFound {
                        "no such file or directory".to_string()
                    } else {
                        e.to_string()
                    }
                ),
            )
        })?;
    }
    if let Some(c) = p.str("color") {
        if !matches!(c.as_str(), "auto" | "always" | "never" | "raw") {
            return util::err(format!(
                "unsupported color option: '{c}'.  Supported values are: auto, always, never, raw"
            ));
        }
    }
    let no_args = |p: &cli::Parsed, name: &str| -> Res<()> {
        if let Some(a) = p.args.first() {
            return Err(Failure::new(
                util::exit::CONFIGURATION,
                format!("unknown command \"{a}\" for \"pulumi {name}\""),
            ));
        }
        Ok(())
    };
    match path.as_slice() {
        [] => {
            help(&path);
            Ok(())
        }
        ["version"] => commands::version(),
        ["whoami"] => commands::whoami(p),
        ["about"] => commands::about(p),
        ["login"] => commands::login(p),
        ["logout"] => commands::logout(p),
        ["preview"] => engine::run_op(p, engine::Op::Preview),
        ["up"] => engine::run_op(p, engine::Op::Update),
        ["refresh"] => engine::run_op(p, engine::Op::Refresh),
        ["destroy"] => engine::run_op(p, engine::Op::Destroy),
        ["cancel"] => commands::cancel(p),
        ["install"] => commands::install(p),
        ["plugin"] => {
            help(&path);
            Ok(())
        }
        ["plugin", sub] => commands::plugin(p, sub),
        ["stack"] => {
            no_args(p, "stack")?;
            commands::stack_show(p)
        }
        ["stack", "init"] => commands::stack_init(p),
        ["stack", "select"] => commands::stack_select(p),
        ["stack", "ls"] => commands::stack_ls(p),
        ["stack", "rm"] => commands::stack_rm(p),
        ["stack", "output"] => commands::stack_output(p),
        ["stack", "history"] => commands::stack_history(p),
        ["stack", "export"] => commands::stack_export(p),
        ["stack", "import"] => commands::stack_import(p),
        ["config"] => {
            no_args(p, "config")?;
            commands::config_list(p)
        }
        ["config", "get"] => commands::config_get(p),
        ["config", "set"] => commands::config_set(p),
        ["config", "set-all"] => commands::config_set_all(p),
        ["config", "rm"] => commands::config_rm(p, false),
        ["config", "rm-all"] => commands::config_rm(p, true),
        ["config", "refresh"] => commands::config_refresh(p),
        ["config", "env"] => {
            help(&path);
            Ok(())
        }
        ["config", "env", sub] => commands::config_env(p, sub),
        other => util::err(format!("unknown command \"{}\"", other.join(" "))),
    }
}

/// Exit status for a failure: the ≥ 3.227 code table, or 255 for everything in legacy mode
/// (`PULUMI_STANDIN_LEGACY_EXIT_CODES=1`, or a reported version older than 3.227.0).
fn exit_status(code: i32) -> i32 {
    if util::env_truthy("PULUMI_STANDIN_LEGACY_EXIT_CODES") || !version_at_least(3, 227, 0) {
        255
    } else {
        code
    }
}

fn main() {
    // Like a Go program writing to a closed stdout: die of SIGPIPE instead of panicking.
    // SAFETY: resetting a signal disposition to its default is always sound.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let result = cli::parse(&argv).and_then(|p| dispatch(&p));
    if let Err(f) = result {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        if let Some(m) = &f.message {
            eprintln!("error: {m}");
        }
        std::process::exit(exit_status(f.code));
    }
}
