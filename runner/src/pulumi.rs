//! The argv of every `pulumi` invocation, as pure functions (the real CLI v3.259 is the authority).
//!
//! Every command but `version` starts with `--non-interactive`, as the Go Automation API
//! prepends it. Stack-scoped commands (the operations, `stack history`) get
//! `PULUMI_DEBUG_COMMANDS=true` (required for `--event-log`) and end with `--stack S`.
//!
//! Whatever the user controls goes in as a flag's value (`--stack S`, `--target=U`,
//! `--plaintext k=v`), which the CLI's flag parser takes whatever it starts with, or after
//! `--`: a config key, stack or environment name such as `-h` or `--force` is never read as a
//! flag.

use pulumi_operator_api::plan::{Operation, OperationOptions};

/// One invocation of the CLI.
#[derive(Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Arguments after `pulumi`.
    pub args: Vec<String>,
    /// Extra environment on top of the runner's environment and [`BASE_ENV`].
    pub env: Vec<(String, String)>,
    /// Bytes for stdin (a secret config value); stdin is empty otherwise.
    pub stdin: Option<String>,
    /// Keep stdout to the runner instead of streaming it (it may hold secret values).
    pub capture_stdout: bool,
    /// The argv holds secret values: never log it.
    pub secret_args: bool,
}

impl std::fmt::Debug for Invocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("args", &self.display())
            .field("env", &self.env)
            .field("stdin", &self.stdin.as_ref().map(|_| "[secret]"))
            .field("capture_stdout", &self.capture_stdout)
            .finish()
    }
}

impl Invocation {
    fn new(args: &[&str]) -> Invocation {
        let mut all = vec!["--non-interactive".to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        Invocation {
            args: all,
            env: Vec::new(),
            stdin: None,
            capture_stdout: false,
            secret_args: false,
        }
    }

    fn arg(mut self, a: impl Into<String>) -> Invocation {
        self.args.push(a.into());
        self
    }

    fn stack_scoped(mut self, stack: &str) -> Invocation {
        self.args.push("--stack".into());
        self.args.push(stack.into());
        self.env
            .push(("PULUMI_DEBUG_COMMANDS".into(), "true".into()));
        self
    }

    /// Plaintext config for an operation to set before it runs (and save to the stack's
    /// config file), as `config set-all --path --plaintext` would: `--config-path
    /// --config=k=v…` (the `=` form, so that a value starting with `-` stays a value).
    pub fn with_config(mut self, pairs: &[(String, String)]) -> Invocation {
        if !pairs.is_empty() {
            self.args.push("--config-path".into());
            for (k, v) in pairs {
                self.args.push(format!("--config={k}={v}"));
            }
        }
        self
    }

    /// The command line as it may be logged (`pulumi …`, secret argv elided).
    pub fn display(&self) -> String {
        if self.secret_args {
            let visible: Vec<&str> = self
                .args
                .iter()
                .take_while(|a| *a != "--json")
                .map(String::as_str)
                .collect();
            format!("pulumi {} --json [secret]", visible.join(" "))
        } else {
            format!("pulumi {}", self.args.join(" "))
        }
    }

    /// The subcommand words (`stack select`, `up`…), for messages.
    pub fn name(&self) -> String {
        let words: Vec<&str> = self
            .args
            .iter()
            .map(String::as_str)
            .filter(|a| !a.starts_with('-'))
            .collect();
        match words.as_slice() {
            [first @ ("stack" | "config"), second, ..] => format!("{first} {second}"),
            [first, ..] => first.to_string(),
            [] => String::new(),
        }
    }
}

/// Environment for every invocation: no update check (a Job may have no network), mark the
/// call as automation (as every Automation API does), no colour codes in the logs.
pub const BASE_ENV: &[(&str, &str)] = &[
    ("PULUMI_SKIP_UPDATE_CHECK", "true"),
    ("PULUMI_AUTOMATION_API", "true"),
    ("NO_COLOR", "true"),
];

/// `pulumi version` (run without `--non-interactive`, as the SDK does).
pub fn version() -> Invocation {
    let mut inv = Invocation::new(&["version"]);
    inv.args.remove(0);
    inv.capture_stdout = true;
    inv
}

/// `pulumi install --no-plugins`: installs the program's dependencies (npm, pip, `packages:`)
/// (PKO runs it once per workspace pod; here every Job is a fresh pod). Provider plugins are
/// left to the operation itself, which uses a plugin on PATH (an "ambient" plugin baked into
/// the image, as air-gapped clusters do), then the plugin cache, and only then downloads one;
/// `pulumi install` would insist on downloading a plugin the program names without a version
/// even when the image has it on PATH.
pub fn install() -> Invocation {
    Invocation::new(&["install", "--no-plugins"])
}

/// `P stack select --stack S`.
pub fn stack_select(stack: &str) -> Invocation {
    Invocation::new(&["stack", "select", "--stack", stack])
}

/// `P cancel --yes --stack S`: removes the stack's locks (a DIY backend deletes every lock
/// file of the stack; only called when all of them are stale locks of this Stack).
pub fn cancel(stack: &str) -> Invocation {
    Invocation::new(&["cancel", "--yes", "--stack", stack])
}

/// `P stack select --create --stack S [--secrets-provider P]`: selects the stack, creating it
/// (with the secrets provider, which is used only then) when it does not exist — one CLI
/// process where the SDK's select, init, select takes three.
pub fn stack_select_or_create(stack: &str, secrets_provider: Option<&str>) -> Invocation {
    let mut inv = Invocation::new(&["stack", "select", "--create", "--stack", stack]);
    if let Some(p) = secrets_provider.filter(|p| !p.is_empty()) {
        inv = inv.arg("--secrets-provider").arg(p);
    }
    inv
}

/// `P config env add --yes --stack S -- E1 E2…`.
pub fn config_env_add(stack: &str, environments: &[String]) -> Invocation {
    let mut inv = Invocation::new(&["config", "env", "add", "--yes", "--stack", stack, "--"]);
    for e in environments {
        inv = inv.arg(e.as_str());
    }
    inv
}

/// `P config env ls --stack S --json` (CLI ≥ 3.99; stdout captured): the stack's ESC
/// environments, so that `add` does not import one twice.
pub fn config_env_ls(stack: &str) -> Invocation {
    let mut inv = Invocation::new(&["config", "env", "ls", "--stack", stack, "--json"]);
    inv.capture_stdout = true;
    inv
}

/// `P config set-all --stack S --path --plaintext k=v…` (keys already namespaced and, when not
/// paths, escaped as `ns:["key"]`, as PKO does).
pub fn config_set_all_plaintext(stack: &str, pairs: &[(String, String)]) -> Invocation {
    let mut inv = Invocation::new(&["config", "set-all", "--stack", stack, "--path"]);
    for (k, v) in pairs {
        inv = inv.arg("--plaintext").arg(format!("{k}={v}"));
    }
    inv
}

/// `P config set --stack S --path --secret -- KEY` with the value on stdin, so that it never
/// appears in an argv (the CLI reads the value from a non-terminal stdin and removes one
/// trailing newline, which is why one is appended).
pub fn config_set_secret(stack: &str, key: &str, value: &str) -> Invocation {
    let mut inv = Invocation::new(&[
        "config", "set", "--stack", stack, "--path", "--secret", "--", key,
    ]);
    inv.stdin = Some(format!("{value}\n"));
    inv
}

/// `P config set --stack S --path --plaintext -- KEY VALUE`: for a key that `set-all` and
/// `--config` cannot take, as they split `k=v` at the first `=` of the key.
pub fn config_set_plaintext(stack: &str, key: &str, value: &str) -> Invocation {
    Invocation::new(&[
        "config",
        "set",
        "--stack",
        stack,
        "--path",
        "--plaintext",
        "--",
        key,
        value,
    ])
}

/// `P config set-all --stack S --json DOC` (CLI ≥ 3.202.0) for structured values.
pub fn config_set_all_json(stack: &str, doc: &str, has_secrets: bool) -> Invocation {
    let mut inv = Invocation::new(&["config", "set-all", "--stack", stack, "--json", doc]);
    inv.secret_args = has_secrets;
    inv
}

/// What the runner adds to an operation besides the plan's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpContext {
    /// `--event-log` file.
    pub event_log: String,
    /// `--exec-agent` (recorded as `exec.agent` in the update's metadata).
    pub exec_agent: String,
    /// `-v=N` with `--logtostderr` when > 0.
    pub log_level: Option<u32>,
    /// A preview saves its plan to this file (`--save-plan`); an up keeps to the plan in it
    /// (`--plan`).
    pub plan_file: Option<String>,
    /// The administrator's policy packs, `(directory, configuration file)` in the plan's
    /// order: every `preview` and `up` runs with each (`--policy-pack D --policy-pack-config
    /// F`; the CLI wants a configuration for every pack once it has one for any).
    pub policy_packs: Vec<(String, String)>,
}

/// The default `--exec-agent`.
pub fn exec_agent() -> String {
    format!("pulumi-runner/{}", env!("CARGO_PKG_VERSION"))
}

fn debug_args(ctx: &OpContext) -> Vec<String> {
    match ctx.log_level {
        Some(n) if n > 0 => vec!["--logtostderr".into(), format!("-v={n}")],
        _ => Vec::new(),
    }
}

fn push_all(inv: &mut Invocation, args: impl IntoIterator<Item = String>) {
    inv.args.extend(args);
}

/// `--policy-pack D --policy-pack-config F` for each pack (preview and up only).
fn policy_pack_args(ctx: &OpContext) -> Vec<String> {
    ctx.policy_packs
        .iter()
        .flat_map(|(dir, config)| {
            [
                "--policy-pack".to_string(),
                dir.clone(),
                "--policy-pack-config".to_string(),
                config.clone(),
            ]
        })
        .collect()
}

/// The flags an operation may take, each in the form the CLI reads (empty when unset).
struct OpFlags {
    exec_kind: String,
    debug: Vec<String>,
    message: Option<String>,
    expect_no_changes: Option<String>,
    diff: String,
    replaces: Vec<String>,
    targets: Vec<String>,
    target_dependents: Option<String>,
    parallel: Option<String>,
    agent: String,
    refresh: Option<String>,
    continue_on_error: Option<String>,
    run_program: Option<String>,
    event_log: [String; 2],
    yes: [String; 2],
}

impl OpFlags {
    fn new(o: &OperationOptions, ctx: &OpContext) -> OpFlags {
        let flag = |on: bool, f: &str| on.then(|| f.to_string());
        OpFlags {
            exec_kind: "--exec-kind=auto.local".to_string(),
            debug: debug_args(ctx),
            message: o
                .message
                .as_deref()
                .filter(|m| !m.is_empty())
                .map(|m| format!("--message={m}")),
            expect_no_changes: flag(o.expect_no_changes, "--expect-no-changes"),
            diff: "--diff".to_string(),
            replaces: o.replace.iter().map(|t| format!("--replace={t}")).collect(),
            targets: o.target.iter().map(|t| format!("--target={t}")).collect(),
            target_dependents: flag(o.target_dependents, "--target-dependents"),
            parallel: o
                .parallel
                .filter(|n| *n > 0)
                .map(|n| format!("--parallel={n}")),
            agent: format!("--exec-agent={}", ctx.exec_agent),
            refresh: flag(o.refresh, "--refresh"),
            continue_on_error: flag(o.continue_on_error, "--continue-on-error"),
            run_program: o.run_program.map(|b| format!("--run-program={b}")),
            event_log: ["--event-log".to_string(), ctx.event_log.clone()],
            yes: ["--yes".to_string(), "--skip-preview".to_string()],
        }
    }
}

/// The operation, with flags in the order PKO's agent produces them (contract §2.5), but
/// without `--suppress-progress` on `up` (see [`up_flags`]).
pub fn operation(op: Operation, stack: &str, o: &OperationOptions, ctx: &OpContext) -> Invocation {
    let f = OpFlags::new(o, ctx);
    let mut inv = Invocation::new(&[op.as_str()]);
    match op {
        Operation::Preview => preview_flags(&mut inv, f, ctx),
        Operation::Up => up_flags(&mut inv, f, ctx),
        Operation::Refresh => refresh_flags(&mut inv, f),
        Operation::Destroy => destroy_flags(&mut inv, f),
    }
    inv.stack_scoped(stack)
}

fn preview_flags(inv: &mut Invocation, f: OpFlags, ctx: &OpContext) {
    push_all(inv, [f.exec_kind]);
    push_all(inv, f.debug);
    push_all(inv, f.message);
    push_all(inv, f.expect_no_changes);
    push_all(inv, [f.diff]);
    push_all(inv, f.replaces);
    push_all(inv, f.targets);
    push_all(inv, f.target_dependents);
    push_all(inv, f.parallel);
    push_all(inv, [f.agent]);
    push_all(inv, f.refresh);
    push_all(inv, f.run_program);
    push_all(inv, f.event_log);
    push_all(
        inv,
        ctx.plan_file.as_ref().map(|f| format!("--save-plan={f}")),
    );
    push_all(inv, policy_pack_args(ctx));
}

fn up_flags(inv: &mut Invocation, f: OpFlags, ctx: &OpContext) {
    push_all(inv, f.yes);
    push_all(inv, f.debug);
    push_all(inv, [f.exec_kind]);
    push_all(inv, f.event_log);
    push_all(inv, f.message);
    push_all(inv, f.expect_no_changes);
    push_all(inv, [f.diff]);
    push_all(inv, f.replaces);
    push_all(inv, f.targets);
    push_all(inv, f.target_dependents);
    push_all(inv, f.parallel);
    push_all(inv, [f.agent]);
    push_all(inv, f.refresh);
    // PKO adds --suppress-progress here; it is left out on purpose: the real CLI's
    // non-interactive display has no progress ticker anyway, and without the flag
    // every resource step line reaches `kubectl logs` (the test stand-in drops them
    // with it).
    push_all(inv, f.continue_on_error);
    push_all(inv, f.run_program);
    push_all(inv, ctx.plan_file.as_ref().map(|f| format!("--plan={f}")));
    push_all(inv, policy_pack_args(ctx));
}

fn refresh_flags(inv: &mut Invocation, f: OpFlags) {
    push_all(inv, f.debug);
    push_all(inv, f.yes);
    push_all(inv, f.message);
    push_all(inv, f.expect_no_changes);
    push_all(inv, f.targets);
    push_all(inv, f.target_dependents);
    push_all(inv, f.parallel);
    push_all(inv, [f.agent]);
    push_all(inv, f.run_program);
    push_all(inv, [f.exec_kind]);
    push_all(inv, f.event_log);
}

fn destroy_flags(inv: &mut Invocation, f: OpFlags) {
    push_all(inv, f.debug);
    push_all(inv, f.message);
    push_all(inv, f.targets);
    push_all(inv, f.target_dependents);
    push_all(inv, f.parallel);
    push_all(inv, [f.agent]);
    push_all(inv, f.refresh);
    push_all(inv, f.continue_on_error);
    push_all(inv, f.run_program);
    push_all(inv, [f.exec_kind]);
    push_all(inv, f.yes);
    push_all(inv, f.event_log);
}

/// The refresh that runs before `up` when both `refresh` and `expectNoRefreshChanges` are set:
/// `P refresh … --expect-no-changes …` with the up's message, targets and parallelism (the
/// `up` then runs without `--refresh`).
pub fn refresh_expecting_no_changes(
    stack: &str,
    o: &OperationOptions,
    ctx: &OpContext,
) -> Invocation {
    let refresh = OperationOptions {
        expect_no_changes: true,
        ..o.clone()
    };
    operation(Operation::Refresh, stack, &refresh, ctx)
}

/// `P stack output --json [--show-secrets] --stack S` (stdout captured).
pub fn stack_output(stack: &str, show_secrets: bool) -> Invocation {
    let mut inv = Invocation::new(&["stack", "output", "--json"]);
    if show_secrets {
        inv = inv.arg("--show-secrets");
    }
    let mut inv = inv.arg("--stack").arg(stack);
    inv.capture_stdout = true;
    inv
}

/// `P stack history --json --page-size 1 --page 1 --stack S` (stdout captured). Without
/// `--show-secrets`: the summary needs no config values, and so needs no decryption.
pub fn stack_history(stack: &str) -> Invocation {
    let mut inv = Invocation::new(&[
        "stack",
        "history",
        "--json",
        "--page-size",
        "1",
        "--page",
        "1",
    ])
    .stack_scoped(stack);
    inv.capture_stdout = true;
    inv
}

/// `P stack export --stack S` (stdout captured, never logged: it holds the state): what
/// [`crate::state::count`] counts.
pub fn stack_export(stack: &str) -> Invocation {
    let mut inv = Invocation::new(&["stack", "export"]).stack_scoped(stack);
    inv.capture_stdout = true;
    inv
}

/// `P stack rm --yes -- S` (after a destroy with `remove`, as the SDK does; a stack named
/// `-h` would otherwise print the help and exit 0, leaving the stack).
pub fn stack_rm(stack: &str) -> Invocation {
    Invocation::new(&["stack", "rm", "--yes", "--", stack])
}

/// A CLI version (`vX.Y.Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u64, pub u64, pub u64);

impl Version {
    /// `set-all --json` for structured config.
    pub const JSON_CONFIG: Version = Version(3, 202, 0);
    /// `config env add`.
    pub const ENVIRONMENTS: Version = Version(3, 95, 0);
    /// `config env ls --json`.
    pub const ENVIRONMENTS_LS: Version = Version(3, 99, 0);

    /// Parses `pulumi version` output tolerantly (`v3.259.0`, `3.100.0-alpha.x`).
    pub fn parse(text: &str) -> Option<Version> {
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.splitn(3, '.');
        let num = |s: Option<&str>| -> Option<u64> {
            let s = s?;
            let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse().ok()
        };
        Some(Version(
            num(parts.next())?,
            num(parts.next())?,
            num(parts.next()).unwrap_or(0),
        ))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> OpContext {
        OpContext {
            event_log: "/share/.pulumi-runner/events.json".into(),
            exec_agent: "pulumi-runner/0.1.0".into(),
            log_level: None,
            plan_file: None,
            policy_packs: Vec::new(),
        }
    }

    fn argv(inv: &Invocation) -> String {
        inv.args.join(" ")
    }

    fn debug_env(inv: &Invocation) -> bool {
        inv.env
            .iter()
            .any(|(k, v)| k == "PULUMI_DEBUG_COMMANDS" && v == "true")
    }

    #[test]
    fn stack_commands() {
        assert_eq!(argv(&version()), "version");
        assert_eq!(argv(&install()), "--non-interactive install --no-plugins");
        assert_eq!(
            argv(&stack_select("o/p/dev")),
            "--non-interactive stack select --stack o/p/dev"
        );
        assert!(!debug_env(&stack_select("dev")));
        assert_eq!(
            argv(&stack_select_or_create("dev", None)),
            "--non-interactive stack select --create --stack dev"
        );
        assert_eq!(
            argv(&stack_select_or_create("dev", Some("passphrase"))),
            "--non-interactive stack select --create --stack dev --secrets-provider passphrase"
        );
        assert_eq!(
            argv(&config_env_add("dev", &["proj/a".into(), "proj/b".into()])),
            "--non-interactive config env add --yes --stack dev -- proj/a proj/b"
        );
        assert_eq!(
            argv(&config_env_ls("dev")),
            "--non-interactive config env ls --stack dev --json"
        );
        assert_eq!(
            argv(&stack_output("dev", true)),
            "--non-interactive stack output --json --show-secrets --stack dev"
        );
        assert!(stack_output("dev", false).capture_stdout);
        let h = stack_history("dev");
        assert_eq!(
            argv(&h),
            "--non-interactive stack history --json --page-size 1 --page 1 --stack dev"
        );
        assert!(debug_env(&h) && h.capture_stdout);
        assert_eq!(
            argv(&stack_rm("dev")),
            "--non-interactive stack rm --yes -- dev"
        );
    }

    #[test]
    fn plaintext_config_rides_on_the_operation() {
        let up = operation(Operation::Up, "dev", &OperationOptions::default(), &ctx());
        assert_eq!(up.clone().with_config(&[]), up);
        let with = up.clone().with_config(&[
            ("p:[\"a\"]".into(), "-x=1".into()),
            ("p:b.c[0]".into(), "2".into()),
        ]);
        assert_eq!(
            &with.args[up.args.len()..],
            [
                "--config-path",
                "--config=p:[\"a\"]=-x=1",
                "--config=p:b.c[0]=2"
            ]
        );
    }

    #[test]
    fn config_commands_keep_secrets_out_of_argv() {
        let plain = config_set_all_plaintext(
            "dev",
            &[
                ("p:[\"a.b\"]".into(), "x=y".into()),
                ("p:c.d[0]".into(), "1".into()),
            ],
        );
        assert_eq!(
            argv(&plain),
            "--non-interactive config set-all --stack dev --path --plaintext p:[\"a.b\"]=x=y --plaintext p:c.d[0]=1"
        );
        let secret = config_set_secret("dev", "p:[\"pw\"]", "hunter2");
        assert_eq!(
            argv(&secret),
            "--non-interactive config set --stack dev --path --secret -- p:[\"pw\"]"
        );
        assert_eq!(secret.stdin.as_deref(), Some("hunter2\n"));
        assert!(!format!("{secret:?}").contains("hunter2"));
        let json = config_set_all_json(
            "dev",
            r#"{"p:o":{"value":"{}","objectValue":{},"secret":true}}"#,
            true,
        );
        assert_eq!(
            json.args[..6].join(" "),
            "--non-interactive config set-all --stack dev --json"
        );
        assert_eq!(
            json.display(),
            "pulumi --non-interactive config set-all --stack dev --json [secret]"
        );
        assert!(!format!("{json:?}").contains("objectValue"));
    }

    #[test]
    fn option_shaped_names_are_never_flags() {
        // Every user-controlled word is after `--` or glued to its flag (`--flag=v`), or is
        // the value of a flag that takes one (`--stack S`, `--plaintext k=v`).
        let after_dash_dash = |inv: &Invocation, word: &str| {
            let dd = inv.args.iter().position(|a| a == "--");
            let at = inv.args.iter().position(|a| a == word);
            assert!(
                matches!((dd, at), (Some(d), Some(w)) if d < w),
                "{word} is not after --: {}",
                argv(inv)
            );
        };
        let secret = config_set_secret("dev", "-h:[\"k\"]", "v");
        after_dash_dash(&secret, "-h:[\"k\"]");
        let plain = config_set_plaintext("dev", "p:[\"a=b\"]", "--force");
        assert_eq!(
            argv(&plain),
            "--non-interactive config set --stack dev --path --plaintext -- p:[\"a=b\"] --force"
        );
        after_dash_dash(&config_env_add("dev", &["-x".into()]), "-x");
        after_dash_dash(&stack_rm("-h"), "-h");
        // Flag values, in whichever form the flag takes them.
        assert_eq!(
            argv(&stack_select_or_create("--yes", None)),
            "--non-interactive stack select --create --stack --yes"
        );
        assert!(argv(&config_set_all_plaintext(
            "dev",
            &[("--secret:[\"k\"]".into(), "-v".into())]
        ))
        .ends_with("--plaintext --secret:[\"k\"]=-v"));
        let o = OperationOptions {
            target: vec!["--help".into()],
            replace: vec!["-h".into()],
            message: Some("--yes".into()),
            ..Default::default()
        };
        let up = operation(Operation::Up, "-s", &o, &ctx());
        for glued in ["--target=--help", "--replace=-h", "--message=--yes"] {
            assert!(up.args.iter().any(|a| a == glued), "{}", argv(&up));
        }
        assert!(argv(&up).ends_with("--stack -s"));
    }

    #[test]
    fn operations_match_the_contract() {
        let all = OperationOptions {
            parallel: Some(4),
            message: Some("deploy 42".into()),
            expect_no_changes: true,
            replace: vec!["urn:r".into()],
            target: vec!["urn:a".into(), "urn:b".into()],
            target_dependents: true,
            refresh: true,
            continue_on_error: true,
            run_program: Some(true),
            ..Default::default()
        };
        let none = OperationOptions::default();
        let c = ctx();
        let ev = "--event-log /share/.pulumi-runner/events.json";
        let ua = "--exec-agent=pulumi-runner/0.1.0";

        assert_eq!(
            argv(&operation(Operation::Up, "dev", &none, &c)),
            format!("--non-interactive up --yes --skip-preview --exec-kind=auto.local {ev} --diff {ua} --stack dev")
        );
        assert_eq!(
            argv(&operation(Operation::Up, "dev", &all, &c)),
            format!("--non-interactive up --yes --skip-preview --exec-kind=auto.local {ev} --message=deploy 42 --expect-no-changes --diff --replace=urn:r --target=urn:a --target=urn:b --target-dependents --parallel=4 {ua} --refresh --continue-on-error --run-program=true --stack dev")
        );
        assert_eq!(
            argv(&operation(Operation::Preview, "dev", &none, &c)),
            format!(
                "--non-interactive preview --exec-kind=auto.local --diff {ua} {ev} --stack dev"
            )
        );
        assert_eq!(
            argv(&operation(Operation::Preview, "dev", &all, &c)),
            format!("--non-interactive preview --exec-kind=auto.local --message=deploy 42 --expect-no-changes --diff --replace=urn:r --target=urn:a --target=urn:b --target-dependents --parallel=4 {ua} --refresh --run-program=true {ev} --stack dev")
        );
        assert_eq!(
            argv(&operation(Operation::Refresh, "dev", &none, &c)),
            format!("--non-interactive refresh --yes --skip-preview {ua} --exec-kind=auto.local {ev} --stack dev")
        );
        assert_eq!(
            argv(&operation(Operation::Refresh, "dev", &all, &c)),
            format!("--non-interactive refresh --yes --skip-preview --message=deploy 42 --expect-no-changes --target=urn:a --target=urn:b --target-dependents --parallel=4 {ua} --run-program=true --exec-kind=auto.local {ev} --stack dev")
        );
        assert_eq!(
            argv(&operation(Operation::Destroy, "dev", &none, &c)),
            format!("--non-interactive destroy {ua} --exec-kind=auto.local --yes --skip-preview {ev} --stack dev")
        );
        assert_eq!(
            argv(&operation(Operation::Destroy, "dev", &all, &c)),
            format!("--non-interactive destroy --message=deploy 42 --target=urn:a --target=urn:b --target-dependents --parallel=4 {ua} --refresh --continue-on-error --run-program=true --exec-kind=auto.local --yes --skip-preview {ev} --stack dev")
        );
        for op in [
            Operation::Preview,
            Operation::Up,
            Operation::Refresh,
            Operation::Destroy,
        ] {
            assert!(debug_env(&operation(op, "dev", &none, &c)));
        }
        let verbose = OpContext {
            log_level: Some(3),
            ..ctx()
        };
        assert_eq!(
            argv(&operation(Operation::Up, "dev", &none, &verbose))
                .split(' ')
                .take(6)
                .collect::<Vec<_>>()
                .join(" "),
            "--non-interactive up --yes --skip-preview --logtostderr -v=3"
        );
        // A Stack with spec.approval: the preview saves its plan, the up keeps to it.
        let planned = OpContext {
            plan_file: Some("/share/.pulumi-runner/p.json".into()),
            ..ctx()
        };
        assert!(argv(&operation(Operation::Preview, "dev", &none, &planned))
            .contains(" --save-plan=/share/.pulumi-runner/p.json "));
        assert!(argv(&operation(Operation::Up, "dev", &none, &planned))
            .contains(" --plan=/share/.pulumi-runner/p.json "));
        assert!(!argv(&operation(Operation::Destroy, "dev", &none, &planned)).contains("plan"));
        let r = refresh_expecting_no_changes(
            "dev",
            &OperationOptions {
                refresh: true,
                expect_no_refresh_changes: true,
                ..none.clone()
            },
            &c,
        );
        assert_eq!(
            argv(&r),
            format!("--non-interactive refresh --yes --skip-preview --expect-no-changes {ua} --exec-kind=auto.local {ev} --stack dev")
        );
    }

    #[test]
    fn policy_packs_ride_on_preview_and_up_only() {
        let packs = OpContext {
            policy_packs: vec![
                ("/pp/a".into(), "/pp/a.config.json".into()),
                ("/pp/b".into(), "/pp/b.config.json".into()),
            ],
            plan_file: Some("/s/p.json".into()),
            ..ctx()
        };
        let flags = "--policy-pack /pp/a --policy-pack-config /pp/a.config.json \
                     --policy-pack /pp/b --policy-pack-config /pp/b.config.json";
        let none = OperationOptions::default();
        // A saved-plan preview and an up that keeps to an approved plan get them too.
        assert!(argv(&operation(Operation::Preview, "dev", &none, &packs))
            .ends_with(&format!("--save-plan=/s/p.json {flags} --stack dev")));
        assert!(argv(&operation(Operation::Up, "dev", &none, &packs))
            .ends_with(&format!("--plan=/s/p.json {flags} --stack dev")));
        for op in [Operation::Refresh, Operation::Destroy] {
            assert!(!argv(&operation(op, "dev", &none, &packs)).contains("policy"));
        }
        let expecting = OperationOptions {
            refresh: true,
            expect_no_refresh_changes: true,
            ..none.clone()
        };
        assert!(!argv(&refresh_expecting_no_changes("dev", &expecting, &packs)).contains("policy"));
        assert!(!argv(&operation(Operation::Up, "dev", &none, &ctx())).contains("policy"));
    }

    #[test]
    fn versions() {
        assert_eq!(Version::parse("v3.259.0\n"), Some(Version(3, 259, 0)));
        assert_eq!(Version::parse("3.100.1-alpha.5"), Some(Version(3, 100, 1)));
        assert_eq!(Version::parse("garbage"), None);
        assert!(Version(3, 201, 9) < Version::JSON_CONFIG);
        assert!(Version(3, 202, 0) >= Version::JSON_CONFIG);
    }
}
