//! `pulumi-runner run`: in the `pulumi` container, drive the CLI through one operation —
//! install, select (or create) the stack, add ESC environments, apply config, run the
//! operation, read outputs and summary — and report.

use crate::classify::classify;
use crate::config::{self, Process};
use crate::error::Failure;
use crate::eventlog::EventLog;
use crate::exec::{Outcome, Runner};
use crate::outputs::{self, StackOutputs};
use crate::plan::{project_info, read_project, Layout};
use crate::pulumi::{self, Invocation, OpContext, Version};
use crate::redact::Redactor;
use crate::report::{log, succeeded};
use crate::signals::Signals;
use pulumi_operator_api::backoff::Backoff;
use pulumi_operator_api::plan::{
    FailureReason, Operation, PolicyPackPlan, RunPlan, RunResult, Summary, POLICY_PACKS_DIR,
};
use pulumi_operator_api::policy::PolicyReport;
use pulumi_operator_api::{ProjectInfo, ResourceChange};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The first wait before an update conflict is retried, when the plan does not say.
pub const DEFAULT_CONFLICT_RETRY_DELAY: Duration = Duration::from_secs(5);

/// What a run keeps beside the plan.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The CLI (`pulumi`, found on PATH).
    pub pulumi: PathBuf,
    /// How many times an update conflict is retried (with `retryOnUpdateConflict`).
    pub conflict_retries: u32,
    /// Stale locks cleared during the run (reported in the result).
    pub cleared_locks: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Where the `fetch` step put the policy packs ([`POLICY_PACKS_DIR`]).
    pub policy_packs_dir: PathBuf,
    /// The operation's heartbeat, when the plan has one: every Pulumi command starts through
    /// it ([`crate::heartbeat`]). Set by [`run`].
    pub fence: Option<std::sync::Arc<crate::heartbeat::Fence>>,
    /// The PATH every Pulumi command gets, whatever `$PULUMI_ENV` says (an operation the
    /// policy packs cover: [`crate::policy::cli`]).
    pub pulumi_path: Option<std::ffi::OsString>,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            pulumi: PathBuf::from("pulumi"),
            conflict_retries: 5,
            cleared_locks: Default::default(),
            policy_packs_dir: PathBuf::from(POLICY_PACKS_DIR),
            fence: None,
            pulumi_path: None,
        }
    }
}

/// Runs the plan's operation; never panics on bad input, always returns a result.
pub async fn run(
    plan: &RunPlan,
    layout: &Layout,
    opts: &RunOptions,
    signals: Signals,
) -> RunResult {
    let mut redactor = Redactor::default();
    let workspace = layout.workspace_dir();
    let project = project_info(&workspace);
    // With a heartbeat, the Lease is held before any Pulumi command, and every command of the
    // operation runs under its watchdog until the result is known.
    let (heartbeat, opts) = match crate::token_proof::start(plan, &signals).await {
        Ok(heartbeat) => {
            let fence = heartbeat.as_ref().map(crate::heartbeat::Heartbeat::fence);
            let opts = RunOptions {
                fence,
                ..opts.clone()
            };
            (heartbeat, opts)
        }
        Err(f) => {
            let mut result = f.into_result();
            result.project = project;
            result.message = redactor.apply(&result.message);
            return result;
        }
    };
    let opts = &opts;
    // Filled once the operation ran, whether it then succeeds or fails.
    let mut after = AfterOperation::default();
    let mut result = match run_inner(plan, layout, opts, signals, &mut redactor, &mut after).await {
        Ok(r) => r,
        Err(f) => f.into_result(),
    };
    if let Some(heartbeat) = heartbeat {
        result = heartbeat.finish(result).await;
    }
    result.project = project;
    result.message = redactor.apply(&result.message);
    result.resources = after.resources;
    result.policy = after.policy.map(|mut report| {
        for v in &mut report.items {
            v.message = redactor.apply(&v.message);
            v.urn = redactor.apply(&v.urn);
        }
        report
    });
    if let Ok(cleared) = opts.cleared_locks.lock() {
        result.stale_locks_cleared = cleared.clone();
    }
    result
}

/// A workspace made ready for Pulumi commands: the project read, dependencies installed, the
/// stack selected (or created), ESC environments imported and the configuration applied.
/// Shared by `run` (before its operation) and `workspace` (a retained workspace pod).
pub struct Prepared {
    pub runner: Runner,
    pub project: ProjectInfo,
    /// Plaintext config left for the operation to set (`--config`), when the caller asked
    /// for it: one CLI process fewer than `config set-all`.
    pub operation_config: Vec<(String, String)>,
    /// The stack was not selected because the plan says it exists ([`on_stack`]).
    pub assumed: bool,
}

/// What `prepare` readies the workspace for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareFor {
    /// A retained workspace, where no operation follows and people `kubectl exec` in: the
    /// stack is selected and all of the configuration applied.
    Workspace,
    /// An operation: the plaintext values that can be set last ([`config::plaintext_last`])
    /// are left to the operation (`--config-path --config k=v`, in their order), and
    /// `stack select` is skipped when the plan says the stack exists (every command names it).
    Operation,
}

pub async fn prepare(
    plan: &RunPlan,
    layout: &Layout,
    opts: &RunOptions,
    signals: Signals,
    redactor: &mut Redactor,
    purpose: PrepareFor,
) -> Result<Prepared, Failure> {
    let workspace = layout.workspace_dir();
    let project = load_project(&workspace)?;
    let stack = plan.stack.name.as_str();
    if stack.is_empty() {
        return Err(Failure::config_invalid("the plan names no stack"));
    }
    clear_cut_short_writes(&project.name, stack, opts);
    let mut config_steps = resolve_config(plan, &project, redactor)?;
    if purpose == PrepareFor::Operation {
        config_steps = config::plaintext_last(config_steps);
    }
    let operation_config = take_operation_config(purpose, &mut config_steps);
    let (runner, cache) = workspace_runner(plan, opts, &workspace, signals);
    // Each CLI process is a Go start-up (and, with a passphrase, a key derivation), so
    // independent steps run side by side. `pulumi version` (logged for whoever reads the Job's
    // log) is waited for only when a step depends on the version.
    let version_task = spawn_version(&runner);
    let mut assumed = purpose == PrepareFor::Operation && plan.stack.exists;
    let (installed, selected) =
        install_and_select(&runner, plan, opts, &workspace, cache.as_deref(), assumed).await;
    let needs_version = !plan.stack.environment.is_empty()
        || config_steps
            .iter()
            .any(|step| matches!(step, config::Step::Json { .. }));
    let version = if needs_version {
        version_task.await.ok().flatten()
    } else {
        None
    };
    if let Some(install) = installed? {
        if !install.success() {
            return Err(install_failure(&install));
        }
    }
    selected?;
    let config_invocations = config::invocations(stack, &config_steps, version)?;
    add_environments(&mut assumed, &runner, plan, opts, version).await?;
    for inv in &config_invocations {
        let out = on_stack(&mut assumed, &runner, plan, opts, || runner.run(inv)).await?;
        check(&out, &inv.name())?;
    }
    Ok(Prepared {
        runner,
        project,
        operation_config,
        assumed,
    })
}

/// The project of the fetched program in `workspace`.
fn load_project(workspace: &Path) -> Result<ProjectInfo, Failure> {
    if !workspace.is_dir() {
        return Err(Failure::source_unavailable(format!(
            "no program at {}: the fetch step did not run or failed",
            workspace.display()
        )));
    }
    match read_project(workspace) {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(Failure::source_unavailable(format!(
            "no Pulumi.yaml in {}",
            workspace.display()
        ))),
        Err(e) => Err(Failure::new(
            FailureReason::CompileError,
            format!("invalid project file {e}"),
        )),
    }
}

/// The plan's config resolved (first: a missing variable or file fails before anything
/// runs) and grouped into CLI steps; its secret values are masked from here on.
fn resolve_config(
    plan: &RunPlan,
    project: &ProjectInfo,
    redactor: &mut Redactor,
) -> Result<Vec<config::Step>, Failure> {
    let resolved = config::resolve(&plan.stack.config, &project.name, &Process, redactor)?;
    // From here on, everything emitted (the config commands' output included) masks them.
    crate::redact::remember(redactor);
    if redactor.too_short() > 0 {
        log(format!(
            "{} secret config values are shorter than {} characters and are not masked in the \
             output",
            redactor.too_short(),
            crate::redact::MIN_SECRET_CHARS
        ));
    }
    Ok(config::steps(&resolved))
}

/// For an operation, the trailing run of plaintext values, taken out of `steps` (see
/// [`PrepareFor::Operation`]).
fn take_operation_config(
    purpose: PrepareFor,
    steps: &mut Vec<config::Step>,
) -> Vec<(String, String)> {
    match (purpose, steps.last()) {
        (PrepareFor::Operation, Some(config::Step::Plaintext(_))) => match steps.pop() {
            Some(config::Step::Plaintext(pairs)) => pairs,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// A runner in the workspace, downloading through the plan's dependency cache when it is
/// usable (returned too).
fn workspace_runner(
    plan: &RunPlan,
    opts: &RunOptions,
    workspace: &Path,
    signals: Signals,
) -> (Runner, Option<PathBuf>) {
    let mut runner = Runner::new(&opts.pulumi, workspace, signals);
    runner.fence = opts.fence.clone();
    runner.fixed_path = opts.pulumi_path.clone();
    let cache = plan
        .dependency_cache
        .as_deref()
        .and_then(|dir| usable_cache(Path::new(dir)));
    if let Some(cache) = &cache {
        runner.env = crate::deps::download_env(cache);
    }
    (runner, cache)
}

/// `pulumi version` in the background, logged; the version when it could be read.
fn spawn_version(runner: &Runner) -> tokio::task::JoinHandle<Option<Version>> {
    let runner = runner.clone();
    tokio::spawn(async move {
        let out = runner.run(&pulumi::version()).await.ok()?;
        let v = out
            .success()
            .then(|| Version::parse(&String::from_utf8_lossy(&out.stdout)))
            .flatten();
        match v {
            Some(v) => log(format!("pulumi CLI {v}")),
            None => log("cannot tell the pulumi CLI version; assuming a recent one"),
        }
        v
    })
}

/// Installs the dependencies (unless there is nothing to install) while the stack is
/// selected (unless `assumed`).
async fn install_and_select(
    runner: &Runner,
    plan: &RunPlan,
    opts: &RunOptions,
    workspace: &Path,
    cache: Option<&Path>,
    assumed: bool,
) -> (Result<Option<Outcome>, Failure>, Result<(), Failure>) {
    // A destroy without the source has only the project's name and runtime (the program does
    // not run): nothing to install.
    let source_only_project = matches!(
        plan.source,
        Some(pulumi_operator_api::plan::Source::ProjectInfo { .. })
    );
    let install_step = async {
        if !source_only_project && crate::plan::project_needs_install(workspace) {
            install_dependencies(runner, workspace, cache).await
        } else {
            Ok(None)
        }
    };
    let select_step = async {
        if assumed {
            Ok(())
        } else {
            select_stack(runner, plan, opts).await
        }
    };
    tokio::join!(install_step, select_step)
}

/// The failure of `pulumi install`.
fn install_failure(install: &Outcome) -> Failure {
    let mut f = failure(install, "install");
    if f.reason != FailureReason::Interrupted {
        f.reason = FailureReason::InstallationFailed;
        // The package manager's (or compiler's) own first lines say what is wrong;
        // Pulumi's closing line only says that the install failed.
        let cause = install.observed.tool_error_summary();
        if !cause.is_empty() {
            f.message = format!("pulumi install failed:\n{cause}");
        }
    }
    f
}

/// Imports the plan's ESC environments that the stack does not have yet.
async fn add_environments(
    assumed: &mut bool,
    runner: &Runner,
    plan: &RunPlan,
    opts: &RunOptions,
    version: Option<Version>,
) -> Result<(), Failure> {
    if plan.stack.environment.is_empty() {
        return Ok(());
    }
    let stack = plan.stack.name.as_str();
    let listed = if version.is_none_or(|v| v >= Version::ENVIRONMENTS_LS) {
        let ls = pulumi::config_env_ls(stack);
        let out = on_stack(assumed, runner, plan, opts, || runner.run(&ls)).await?;
        if out.success() {
            serde_json::from_slice::<Vec<String>>(&out.stdout).unwrap_or_default()
        } else {
            Vec::new()
        }
    } else {
        Vec::new()
    };
    let missing = missing_environments(&listed, &plan.stack.environment);
    if !missing.is_empty() {
        let add = pulumi::config_env_add(stack, &missing);
        let out = on_stack(assumed, runner, plan, opts, || runner.run(&add)).await?;
        check(&out, "config env add")?;
    }
    Ok(())
}

/// The dependency cache directory, created if needed; `None` (logged) when it cannot be
/// written, and the operation goes on without it.
fn usable_cache(dir: &Path) -> Option<PathBuf> {
    let probe = dir.join(format!(".probe-{}", crate::deps::unique_suffix()));
    let usable = std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&probe, b""));
    let _ = std::fs::remove_file(&probe);
    match usable {
        Ok(()) => Some(dir.to_path_buf()),
        Err(e) => {
            log(format!(
                "the dependency cache {} cannot be written ({e}); installing without it",
                dir.display()
            ));
            None
        }
    }
}

/// `pulumi install`, or the installed dependencies linked back from the cache when an earlier
/// operation installed the same lockfile (or, without one, the same package.json less than
/// [`crate::deps::LOCKLESS_MAX_AGE`] ago). `Ok(None)`: nothing was run.
async fn install_dependencies(
    runner: &Runner,
    workspace: &Path,
    cache: Option<&Path>,
) -> Result<Option<Outcome>, Failure> {
    let cached = match cache {
        Some(cache) => cache_entry(workspace, cache).await,
        None => None,
    };
    if let Some(entry) = &cached {
        if restore_entry(entry, workspace) {
            return Ok(None);
        }
    }
    let started = std::time::Instant::now();
    let out = runner.run(&pulumi::install()).await?;
    if out.success() {
        log(format!(
            "dependencies installed in {:.1}s",
            started.elapsed().as_secs_f64()
        ));
        if let Some(entry) = &cached {
            let started = std::time::Instant::now();
            let dir = &entry.dir;
            match entry.store(workspace, std::time::SystemTime::now()) {
                Ok(()) => log(format!(
                    "{dir} kept in the dependency cache in {:.1}s",
                    started.elapsed().as_secs_f64()
                )),
                Err(e) => log(format!("cannot keep {dir} in the dependency cache: {e}")),
            }
        }
    }
    Ok(Some(out))
}

/// Links the cached dependencies into the workspace (logged); false when they must be
/// installed.
fn restore_entry(entry: &crate::deps::Entry, workspace: &Path) -> bool {
    use crate::deps::{Restored, LOCKLESS_MAX_AGE};
    let (dir, of) = (&entry.dir, entry.describe());
    match entry.restore(workspace, std::time::SystemTime::now()) {
        Ok(Restored::Linked) => {
            log(format!(
                "dependencies restored from the cache ({dir} of {of}): nothing to install"
            ));
            return true;
        }
        Ok(Restored::Missing) => log(format!("no cached dependencies for {of} yet: installing")),
        Ok(Restored::Expired) => log(format!(
            "the cached dependencies for {of} are older than {} h: installing afresh",
            LOCKLESS_MAX_AGE.as_secs() / 3600
        )),
        Err(e) => log(format!("cannot restore the cached dependencies: {e}")),
    }
    // Never install into a link to an entry another operation may be reading.
    let link = workspace.join(dir);
    if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
        let _ = std::fs::remove_file(&link);
    }
    false
}

/// The cache entry of this project's installed dependencies.
async fn cache_entry(workspace: &Path, cache: &Path) -> Option<crate::deps::Entry> {
    let text =
        crate::plan::project_file(workspace).and_then(|f| std::fs::read_to_string(f).ok())?;
    let runtime = crate::deps::runtime_of(&text)?;
    let tool_version = match crate::deps::version_command(&runtime.name) {
        Some([tool, arg]) => tokio::process::Command::new(tool)
            .arg(arg)
            .output()
            .await
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default(),
        None => String::new(),
    };
    let real = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let read = |name: &str| std::fs::read(workspace.join(name)).ok();
    match crate::deps::plan(&runtime, &read, &tool_version, &real.to_string_lossy()) {
        crate::deps::CachePlan::Installed { key, dir, lockless } => Some(crate::deps::Entry {
            cache: cache.to_path_buf(),
            key,
            dir,
            lockless,
        }),
        crate::deps::CachePlan::DownloadsOnly { why } => {
            log(format!(
                "installed dependencies are not cached: {why}; downloads are"
            ));
            None
        }
    }
}

/// What is known once the operation ran, whether it then succeeded or failed.
#[derive(Default)]
struct AfterOperation {
    /// What the policy packs reported (when packs ran).
    policy: Option<PolicyReport>,
    /// The resources left in the stack's state ([`crate::state::count`]).
    resources: Option<i64>,
}

async fn run_inner(
    plan: &RunPlan,
    layout: &Layout,
    opts: &RunOptions,
    signals: Signals,
    redactor: &mut Redactor,
    after: &mut AfterOperation,
) -> Result<RunResult, Failure> {
    let op = plan.operation;
    let covered;
    let opts = if plan.policy_packs.is_empty() {
        opts
    } else {
        covered = covered_options(opts, &layout.workspace_dir())?;
        &covered
    };
    let packs = packs_run_by(plan);
    if !packs.is_empty() {
        crate::policy::check_before_run(packs, &opts.policy_packs_dir)?;
    }
    let Prepared {
        runner,
        operation_config,
        mut assumed,
        ..
    } = prepare(plan, layout, opts, signals, redactor, PrepareFor::Operation).await?;
    let stack = plan.stack.name.as_str();
    let scratch = layout.scratch_dir();
    let (ctx, event_log, plan_file) = operation_context(plan, opts, &scratch)?;
    let mut options = plan.options.clone();
    let retry = options.retry_on_update_conflict;
    if op == Operation::Up && options.refresh && options.expect_no_refresh_changes {
        let inv = pulumi::refresh_expecting_no_changes(stack, &options, &ctx)
            .with_config(&operation_config);
        let out = on_stack(&mut assumed, &runner, plan, opts, || {
            run_retrying_conflicts(&runner, &inv, opts, retry, plan)
        })
        .await?;
        if !out.success() {
            return Err(refresh_failure(&out));
        }
        options.refresh = false;
    }
    let inv = pulumi::operation(op, stack, &options, &ctx).with_config(&operation_config);
    let out = on_stack(&mut assumed, &runner, plan, opts, || {
        run_retrying_conflicts(&runner, &inv, opts, retry, plan)
    })
    .await?;
    // Read once, streaming: it holds a line for every line the program printed.
    let mut events = EventLog::read(&event_log);
    if !packs.is_empty() {
        let violations = std::mem::take(&mut events.violations);
        after.policy = Some(violations.report(packs.iter().map(|p| p.label()).collect()));
    }
    // Not after an interruption: the pod is being stopped, and the count can wait for the
    // next operation.
    let counted = crate::state::counted_after(op) && !out.interrupted;
    if !out.success() {
        if counted {
            after.resources = count_resources(&runner, stack).await;
        }
        return Err(operation_failure(&out, plan, opts, after.policy.as_ref()));
    }

    let mut result = succeeded(format!("{} succeeded", op.as_str()));
    result.permalink = out.observed.permalink.clone();
    // An update's event log holds the outputs (secret ones masked).
    let logged = (op == Operation::Up).then(|| events.outputs()).flatten();
    summarize(&runner, plan, events, &mut result).await;
    if let (Operation::Preview, Some(file)) = (op, plan_file.as_ref()) {
        hand_over_saved_plan(plan, file, &mut result)?;
    }
    let finished = finish_operation(&runner, plan, &options, logged, redactor, &mut result);
    let (resources, finished) = finished.await;
    after.resources = resources.filter(|_| counted);
    finished?;
    Ok(result)
}

/// The resources left in the stack's state, or `None` with a log line.
async fn count_resources(runner: &Runner, stack: &str) -> Option<i64> {
    let counted = match runner.run(&pulumi::stack_export(stack)).await {
        Ok(out) if out.success() => crate::state::count(&out.stdout),
        Ok(out) => {
            let f = failure(&out, "stack export");
            log(format!("cannot count the stack's resources: {}", f.message));
            return None;
        }
        Err(e) => {
            log(format!("cannot count the stack's resources: {}", e.message));
            return None;
        }
    };
    match counted {
        Some(n) => log(format!("the stack's state holds {n} resource(s)")),
        None => log("cannot count the stack's resources: the export is not a deployment"),
    }
    counted
}

/// The administrator's policy packs this operation runs (none for a refresh or a destroy).
/// An operation the administrator's packs cover (every one of a covered Stack, not only
/// `preview` and `up`: any Pulumi command has the stack's credentials): the image's CLI by
/// its absolute path, a PATH without the pod's volumes, and no analyzer or language host of
/// the project's own.
fn covered_options(opts: &RunOptions, workspace: &Path) -> Result<RunOptions, Failure> {
    crate::policy::cli::refuse_own_plugins(workspace)?;
    let volumes = std::env::var(pulumi_operator_api::plan::VOLUME_PATHS_ENV).ok();
    let cli =
        crate::policy::cli::trusted_cli(std::env::var_os("PATH").as_deref(), volumes.as_deref())?;
    log(format!(
        "policy packs apply: running {} with PATH {}{}",
        cli.pulumi.display(),
        cli.path.to_string_lossy(),
        if cli.left_out.is_empty() {
            String::new()
        } else {
            format!(
                " (left out, on the pod's volumes: {})",
                std::env::join_paths(&cli.left_out)
                    .unwrap_or_default()
                    .to_string_lossy()
            )
        }
    ));
    Ok(RunOptions {
        pulumi: cli.pulumi,
        pulumi_path: Some(cli.path),
        ..opts.clone()
    })
}

fn packs_run_by(plan: &RunPlan) -> &[PolicyPackPlan] {
    if crate::policy::runs_packs(plan.operation) {
        &plan.policy_packs
    } else {
        &[]
    }
}

/// What the runner adds to the operation (in `scratch`, created here): the context, the
/// event log, and the saved or approved plan's file.
fn operation_context(
    plan: &RunPlan,
    opts: &RunOptions,
    scratch: &Path,
) -> Result<(OpContext, PathBuf, Option<PathBuf>), Failure> {
    std::fs::create_dir_all(scratch).map_err(|e| {
        Failure::new(
            FailureReason::UpdateFailed,
            format!("cannot create {}: {e}", scratch.display()),
        )
    })?;
    let event_log = scratch.join(format!("events-{}.json", plan.operation.as_str()));
    let plan_file = saved_plan_file(plan, scratch)?;
    let ctx = OpContext {
        event_log: event_log.to_string_lossy().into_owned(),
        exec_agent: pulumi::exec_agent(),
        log_level: plan.pulumi_log_level,
        plan_file: plan_file.as_ref().map(|f| f.to_string_lossy().into_owned()),
        policy_packs: crate::policy::cli_args(packs_run_by(plan), &opts.policy_packs_dir),
    };
    Ok((ctx, event_log, plan_file))
}

/// After a successful up, refresh or destroy: the outputs handed over (those the outputs
/// Secret can hold; the result's message names the others), and the stack removed when the
/// destroy says so; beside them, the count of the resources left (when the operation is
/// counted): independent reads of the state, each a CLI start-up (the outputs' with a key
/// derivation), so they run side by side (the count before a `stack rm`).
async fn finish_operation(
    runner: &Runner,
    plan: &RunPlan,
    options: &pulumi_operator_api::plan::OperationOptions,
    logged: Option<StackOutputs>,
    redactor: &mut Redactor,
    result: &mut RunResult,
) -> (Option<i64>, Result<(), Failure>) {
    let op = plan.operation;
    let stack = plan.stack.name.as_str();
    let count = async {
        match crate::state::counted_after(op) {
            true => count_resources(runner, stack).await,
            false => None,
        }
    };
    let remove = op == Operation::Destroy && options.remove;
    let finish = async {
        if op != Operation::Preview && !remove {
            // The CLI is asked again only for secret values, or when the log has no outputs.
            let mut outputs = read_outputs(runner, stack, logged, redactor).await?;
            if let Some(note) = outputs.fit(outputs::SECRET_BUDGET).message() {
                log(&note);
                result.message = format!("{}; {note}", result.message);
            }
            deliver_outputs(plan, &outputs, result).await?;
        }
        if remove {
            check(&runner.run(&pulumi::stack_rm(stack)).await?, "stack rm")?;
        }
        Ok(())
    };
    if remove {
        // The count reads the stack that `stack rm` removes: first.
        let counted = count.await;
        return (counted, finish.await);
    }
    tokio::join!(count, finish)
}

/// The failure of the operation itself: a pack the CLI could not load (named when its line
/// shows its directory), the mandatory violations that refused the changes, or as classified.
fn operation_failure(
    out: &Outcome,
    plan: &RunPlan,
    opts: &RunOptions,
    policy: Option<&PolicyReport>,
) -> Failure {
    let mut f = failure(out, plan.operation.as_str());
    match (f.reason, out.observed.policy_pack_error(), policy) {
        (FailureReason::PolicyPackFailed, Some(line), _) => {
            let packs = packs_run_by(plan);
            f = match crate::policy::pack_in_line(packs, &opts.policy_packs_dir, line) {
                Some(pack) => crate::policy::pack_failed(pack, line),
                None => Failure::new(FailureReason::PolicyPackFailed, line),
            };
        }
        (FailureReason::Interrupted | FailureReason::PolicyPackFailed, _, _) => {}
        (_, _, Some(report)) if report.mandatory > 0 => {
            f = Failure::new(
                FailureReason::PolicyViolation,
                crate::policy::report::violation_message(report),
            );
        }
        _ => {}
    }
    f
}

/// The failure of the refresh before an update (`expectNoRefreshChanges`).
fn refresh_failure(out: &Outcome) -> Failure {
    let mut f = failure(out, "refresh");
    if f.reason == FailureReason::ExpectedNoChanges {
        f.message = format!(
            "the refresh before the update found changes (expectNoRefreshChanges): {}",
            f.message
        );
    }
    f
}

/// The operation's summary and, for a preview, the changes an `up` would make.
async fn summarize(runner: &Runner, plan: &RunPlan, mut events: EventLog, result: &mut RunResult) {
    let op = plan.operation;
    // The event log's summary is what `stack history` would record; the history is read
    // only when the log has none (a CLI that wrote no summary event).
    result.summary = match events.summary.take() {
        Some(summary) => Some(summary),
        None if op != Operation::Preview => history_summary(runner, plan.stack.name.as_str()).await,
        None => None,
    };
    if op == Operation::Preview {
        // What an `up` would change: a drift check's finding (src/stack/drift.rs).
        if events.found {
            let changes = events.changes();
            log(format!("{} resource(s) would change", changes.len()));
            result.changed = Some(changes.len() as i64);
            result.changes = changes
                .into_iter()
                .take(pulumi_operator_api::plan::MAX_REPORTED_CHANGES)
                .collect();
        }
    }
}

/// Hands the outputs to the operator: sealed in the log when the plan has a key, otherwise
/// written to the outputs Secret the plan names (if any).
async fn deliver_outputs(
    plan: &RunPlan,
    outputs: &StackOutputs,
    result: &mut RunResult,
) -> Result<(), Failure> {
    if outputs.is_empty() {
        log("the stack has no outputs");
    } else if let Some(key) = plan.outputs_key.as_deref() {
        // Sealed in the log for the operator, which writes the outputs Secret: this pod
        // needs no rights on Secrets.
        let sealed =
            pulumi_operator_api::sealed::seal(key, &outputs::payload(outputs)).map_err(|e| {
                Failure::new(
                    FailureReason::UpdateFailed,
                    format!("the operation succeeded, but its outputs cannot be sealed: {e}"),
                )
            })?;
        log(format!(
            "{} outputs, handed to the operator sealed",
            outputs.values.len()
        ));
        // Straight to the container's log, past the redactor: the line is ciphertext.
        eprintln!(
            "{}{sealed}",
            pulumi_operator_api::sealed::OUTPUTS_LINE_PREFIX
        );
        result.outputs = Some(plan.outputs_secret.clone());
        result.outputs_digest = Some(pulumi_operator_api::sealed::digest(&sealed));
    } else if plan.outputs_secret.is_empty() {
        log(format!(
            "{} outputs; the plan names no outputs Secret to write them to",
            outputs.values.len()
        ));
    } else {
        let client = kube::Client::try_default().await.map_err(|e| {
            Failure::new(
                FailureReason::UpdateFailed,
                format!(
                    "the operation succeeded, but no Kubernetes client for the outputs Secret: {e}"
                ),
            )
        })?;
        outputs::write_secret(client, plan, outputs).await?;
        log(format!(
            "wrote {} outputs to the Secret {}",
            outputs.values.len(),
            plan.outputs_secret
        ));
        result.outputs = Some(plan.outputs_secret.clone());
    }
    Ok(())
}

/// The file a preview saves its plan to, or the approved plan an up keeps to (written from
/// the run plan); none for other operations.
fn saved_plan_file(plan: &RunPlan, scratch: &Path) -> Result<Option<PathBuf>, Failure> {
    match plan.operation {
        Operation::Preview if plan.options.save_plan => Ok(Some(scratch.join("saved-plan.json"))),
        Operation::Up => {
            let Some(text) = plan.apply_plan.as_deref() else {
                return Ok(None);
            };
            let file = scratch.join("approved-plan.json");
            std::fs::write(&file, text).map_err(|e| {
                Failure::new(
                    FailureReason::UpdateFailed,
                    format!("cannot write the approved plan to {}: {e}", file.display()),
                )
            })?;
            log(format!(
                "the update keeps to the approved plan ({} bytes)",
                text.len()
            ));
            Ok(Some(file))
        }
        _ => Ok(None),
    }
}

/// Seals the plan a preview saved into the pod's log for the operator (as outputs are: this
/// pod needs no rights on Secrets, and the plan can only become its own Update's).
fn hand_over_saved_plan(
    plan: &RunPlan,
    file: &Path,
    result: &mut RunResult,
) -> Result<(), Failure> {
    use pulumi_operator_api::plan::MAX_SAVED_PLAN_BYTES;
    use pulumi_operator_api::sealed;
    let failed = |message: String| Failure::new(FailureReason::UpdateFailed, message);
    let text = std::fs::read_to_string(file).map_err(|e| {
        failed(format!(
            "the preview saved no plan at {}: {e}",
            file.display()
        ))
    })?;
    if text.len() > MAX_SAVED_PLAN_BYTES {
        return Err(failed(format!(
            "the saved plan is {} KiB, more than the {} KiB an approval can hold; split the stack \
             or turn spec.approval off",
            text.len() / 1024,
            MAX_SAVED_PLAN_BYTES / 1024
        )));
    }
    let Some(key) = plan.outputs_key.as_deref() else {
        return Err(failed(
            "the run plan has no key to seal the saved plan with".into(),
        ));
    };
    let payload = sealed::OutputsPayload {
        plan: Some(text),
        ..Default::default()
    };
    let line = sealed::seal(key, &payload)
        .map_err(|e| failed(format!("the saved plan cannot be sealed: {e}")))?;
    log("the plan, handed to the operator sealed");
    // Straight to the container's log, past the redactor: the line is ciphertext.
    eprintln!("{}{line}", sealed::OUTPUTS_LINE_PREFIX);
    result.outputs_digest = Some(sealed::digest(&line));
    Ok(())
}

/// Removes what a write cut short left of the stack on a local DIY backend
/// (`PULUMI_BACKEND_URL=file://...`): partial lock files (`locks::partial`: a full disk) and the
/// remains of a checkpoint write (`locks::cut_short_checkpoint_writes`: a Pulumi killed while
/// it saved the state), so that they do not fail every later operation. Each is reported like a
/// stale lock (Event `StaleLockCleared`).
fn clear_cut_short_writes(project: &str, stack: &str, opts: &RunOptions) {
    let Some(root) = std::env::var("PULUMI_BACKEND_URL")
        .ok()
        .and_then(|u| u.strip_prefix("file://").map(std::path::PathBuf::from))
    else {
        return;
    };
    let entries = |dir: &std::path::Path| -> Vec<(String, u64, Duration)> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let meta = e.metadata().ok()?;
                        let age = meta.modified().ok()?.elapsed().ok()?;
                        Some((
                            e.file_name().to_string_lossy().into_owned(),
                            meta.len(),
                            age,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let remove =
        |dir: &std::path::Path, name: &str, what: &str, why: &str| match std::fs::remove_file(
            dir.join(name),
        ) {
            Ok(()) => {
                log(format!("removed the {what} {name}, left by {why}"));
                if let Ok(mut c) = opts.cleared_locks.lock() {
                    c.push(format!("{what} {name}"));
                }
            }
            Err(e) => log(format!("could not remove the {what} {name}: {e}")),
        };
    for dir in crate::locks::lock_dirs(&root, project, stack) {
        for name in crate::locks::partial(&entries(&dir)) {
            let why = "a lock write that was cut short (a full disk?)";
            remove(&dir, &name, "partial lock file", why);
        }
    }
    for dir in crate::locks::checkpoint_dirs(&root, project) {
        for name in crate::locks::cut_short_checkpoint_writes(stack, &entries(&dir)) {
            let why =
                "a checkpoint write that was cut short (Pulumi killed while it saved the state)";
            remove(&dir, &name, "unfinished checkpoint file", why);
        }
    }
}

/// `stack select --create` (one process), or, when the Stack may not create its stack
/// (`useLocalStackOnly`), `stack select` with a message naming the field. The real CLI
/// refuses to create a stack whose lock another update holds (a DIY backend's lock files
/// outlive a deleted stack), so `retryOnUpdateConflict` waits here too.
async fn select_stack(runner: &Runner, plan: &RunPlan, opts: &RunOptions) -> Result<(), Failure> {
    let stack = plan.stack.name.as_str();
    if plan.stack.create {
        let select = pulumi::stack_select_or_create(stack, plan.stack.secrets_provider.as_deref());
        let out = run_retrying_conflicts(
            runner,
            &select,
            opts,
            plan.options.retry_on_update_conflict,
            plan,
        )
        .await?;
        // Another process (the retained workspace pod, a concurrent Job) may create the stack
        // between the CLI's lookup and its create ("already exists", or its creation lock):
        // when the stack exists now, a plain select takes it; otherwise the first error stands.
        if !out.success() && !out.interrupted {
            let again = runner.run(&pulumi::stack_select(stack)).await?;
            if again.success() {
                log(format!(
                    "the stack {stack} was created by another process meanwhile; selected it"
                ));
                return Ok(());
            }
        }
        return check(&out, "stack select");
    }
    let out = runner.run(&pulumi::stack_select(stack)).await?;
    if out.success() {
        return Ok(());
    }
    let f = failure(&out, "stack select");
    if f.reason != FailureReason::StackNotFound {
        return Err(f);
    }
    Err(Failure::new(
        FailureReason::StackNotFound,
        format!("the stack {stack} does not exist and may not be created (useLocalStackOnly)"),
    ))
}

/// Runs a command on the stack. While the stack is only assumed to exist (not selected, see
/// [`PrepareFor::Operation`]), a command that finds no such stack (renamed, or removed outside
/// the operator) has it selected or created as usual and runs once more; the first command
/// that runs settles the assumption either way.
async fn on_stack<F, Fut>(
    assumed: &mut bool,
    runner: &Runner,
    plan: &RunPlan,
    opts: &RunOptions,
    command: F,
) -> Result<Outcome, Failure>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Outcome, Failure>>,
{
    let out = command().await?;
    if !std::mem::replace(assumed, false)
        || out.success()
        || classify(out.code, &out.observed, out.interrupted) != FailureReason::StackNotFound
    {
        return Ok(out);
    }
    log(format!(
        "no stack {} although an earlier operation of this Stack succeeded (renamed, or removed \
         outside the operator): selecting it now",
        plan.stack.name
    ));
    select_stack(runner, plan, opts).await?;
    command().await
}

/// The wanted environments that are not imported yet, in order, without duplicates.
pub fn missing_environments(listed: &[String], wanted: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in wanted {
        if !listed.contains(w) && !out.contains(w) && !w.is_empty() {
            out.push(w.clone());
        }
    }
    out
}

/// Runs an operation. A conflict caused only by stale locks of this Stack's earlier operations
/// (`crate::locks`) is cleared with `pulumi cancel` and the operation runs again at once; with
/// `retry` (`retryOnUpdateConflict`), any other conflict is retried with backoff.
async fn run_retrying_conflicts(
    runner: &Runner,
    inv: &Invocation,
    opts: &RunOptions,
    retry: bool,
    plan: &RunPlan,
) -> Result<Outcome, Failure> {
    let first = plan
        .conflict_retry_delay_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_CONFLICT_RETRY_DELAY);
    let backoff = Backoff::new(first, 2.0, Duration::from_secs(60));
    let mut attempt = 0;
    let mut cleared = false;
    loop {
        let out = runner.run(inv).await?;
        if out.success()
            || classify(out.code, &out.observed, out.interrupted) != FailureReason::UpdateConflict
        {
            return Ok(out);
        }
        if !cleared {
            if let Some(stale) = plan
                .lock_holder
                .as_ref()
                .and_then(|me| crate::locks::stale(&out.observed.error_summary(), me))
            {
                cleared = true;
                log(format!(
                    "the stack is locked by an earlier operation of this Stack that is gone ({}); clearing the stale lock",
                    stale.join("; ")
                ));
                let cancel = runner
                    .run(&pulumi::cancel(plan.stack.name.as_str()))
                    .await?;
                if cancel.success() {
                    if let Ok(mut c) = opts.cleared_locks.lock() {
                        c.extend(stale);
                    }
                    continue;
                }
                log(format!(
                    "could not clear the stale lock: {}",
                    cancel.observed.error_summary()
                ));
            }
        }
        if !retry || attempt >= opts.conflict_retries {
            return Ok(out);
        }
        attempt += 1;
        let delay = backoff.after(attempt);
        log(format!(
            "another update holds the stack; retry {attempt} of {} in {:.1}s (retryOnUpdateConflict)",
            opts.conflict_retries,
            delay.as_secs_f64()
        ));
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = runner.signals.after(0) => {
                return Err(Failure::new(
                    FailureReason::Interrupted,
                    "interrupted while waiting to retry an update conflict",
                ));
            }
        }
    }
}

/// The failure of a command, classified.
fn failure(out: &Outcome, what: &str) -> Failure {
    let reason = classify(out.code, &out.observed, out.interrupted);
    let detail = out.observed.error_summary();
    let code = match out.code {
        Some(c) => format!("exit code {c}"),
        None => "killed by a signal".to_string(),
    };
    let message = match (reason, detail.is_empty()) {
        (FailureReason::Interrupted, true) => format!("pulumi {what} was interrupted ({code})"),
        (FailureReason::Interrupted, false) => format!("pulumi {what} was interrupted: {detail}"),
        (_, true) => format!("pulumi {what} failed ({code})"),
        (_, false) => format!("pulumi {what} failed: {detail}"),
    };
    Failure::new(reason, message)
}

fn check(out: &Outcome, what: &str) -> Result<(), Failure> {
    if out.success() {
        Ok(())
    } else {
        Err(failure(out, what))
    }
}

async fn read_outputs(
    runner: &Runner,
    stack: &str,
    logged: Option<StackOutputs>,
    redactor: &mut Redactor,
) -> Result<StackOutputs, Failure> {
    let in_failure = |e: outputs::OutputsError| {
        Failure::new(
            FailureReason::UpdateFailed,
            format!("the operation succeeded, but {e}"),
        )
    };
    let mut outputs = match logged {
        Some(outputs) if outputs.secret.is_empty() => outputs,
        Some(mut outputs) => {
            let revealed = runner.run(&pulumi::stack_output(stack, true)).await?;
            check(&revealed, "stack output --show-secrets")?;
            whole_capture(&revealed)?;
            outputs.reveal(&revealed.stdout).map_err(in_failure)?;
            outputs
        }
        None => {
            // Both reads at once: which outputs are secret comes from the masked document.
            let (masked_inv, revealed_inv) = (
                pulumi::stack_output(stack, false),
                pulumi::stack_output(stack, true),
            );
            let (masked, revealed) =
                tokio::join!(runner.run(&masked_inv), runner.run(&revealed_inv));
            let (masked, revealed) = (masked?, revealed?);
            check(&masked, "stack output")?;
            check(&revealed, "stack output --show-secrets")?;
            whole_capture(&masked).and(whole_capture(&revealed))?;
            StackOutputs::parse(&masked.stdout, &revealed.stdout).map_err(in_failure)?
        }
    };
    let large = remember_secret_outputs(&outputs, redactor);
    crate::redact::remember(redactor);
    // An output Pulumi does not consider secret may still hold a secret value (an environment
    // variable's, a config value's): it is reported as secret so that the operator never
    // copies it into the Stack's status.
    let leaking = outputs.mark_known_secrets(&crate::redact::current(), &large);
    if !leaking.is_empty() {
        log(format!(
            "outputs holding secret values are reported as secret: {}",
            leaking.join(", ")
        ));
    }
    Ok(outputs)
}

/// Remembers the secret outputs' values in `redactor`; returns those too long for it
/// ([`outputs::MAX_MASKED_SECRET`]).
fn remember_secret_outputs(outputs: &StackOutputs, redactor: &mut Redactor) -> Vec<String> {
    let mut large = Vec::new();
    for key in &outputs.secret {
        let Some(v) = outputs.values.get(key) else {
            continue;
        };
        for text in config::secret_texts(v) {
            if text.len() > outputs::MAX_MASKED_SECRET {
                large.push(text);
            } else {
                redactor.add(&text);
            }
        }
    }
    large
}

/// `stack output` printed more than the runner keeps ([`crate::exec::MAX_CAPTURE`]): the
/// document is cut, and the reason is its size, not its syntax.
fn whole_capture(out: &Outcome) -> Result<(), Failure> {
    if out.stdout.len() < crate::exec::MAX_CAPTURE {
        return Ok(());
    }
    Err(Failure::new(
        FailureReason::UpdateFailed,
        format!(
            "the operation succeeded, but the stack's outputs are over {} MiB, more than the \
             runner reads (the outputs Secret holds at most {} KiB of them): make the largest \
             outputs smaller",
            crate::exec::MAX_CAPTURE / (1024 * 1024),
            outputs::SECRET_BUDGET / 1024
        ),
    ))
}

/// The summary of the last update (`stack history`), or `None` with a log line.
async fn history_summary(runner: &Runner, stack: &str) -> Option<Summary> {
    let out = match runner.run(&pulumi::stack_history(stack)).await {
        Ok(out) if out.success() => out,
        Ok(out) => {
            log(format!(
                "cannot read the update summary: {}",
                failure(&out, "stack history").message
            ));
            return None;
        }
        Err(e) => {
            log(format!("cannot read the update summary: {}", e.message));
            return None;
        }
    };
    parse_history(&out.stdout)
}

/// The first entry of `stack history --json`.
pub fn parse_history(json: &[u8]) -> Option<Summary> {
    let entries: Vec<serde_json::Value> = serde_json::from_slice(json).ok()?;
    let first = entries.first()?;
    Some(Summary {
        result: first
            .get("result")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string),
        resource_changes: crate::eventlog::resource_changes(first.get("resourceChanges")),
    })
}

/// The `summaryEvent` of an event log.
pub fn summary_from_event_log(path: &Path) -> Option<Summary> {
    EventLog::read(path).summary
}

/// The resources a preview's event log says an `up` would change ([`EventLog::changes`]).
pub fn planned_changes(event_log: &str) -> Vec<ResourceChange> {
    EventLog::from_text(event_log).changes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planned_changes_are_one_per_resource_without_refresh_steps() {
        // The real CLI's event log of `preview --refresh` after a ConfigMap was edited by hand.
        let pre = |op: &str, urn: &str| {
            format!(
                r#"{{"sequence":1,"resourcePreEvent":{{"metadata":{{"op":"{op}","urn":"{urn}","type":"t"}}}}}}"#
            )
        };
        let cm = "urn:pulumi:dev::drift::kubernetes:core/v1:ConfigMap::cm";
        let stack = "urn:pulumi:dev::drift::pulumi:pulumi:Stack::drift-dev";
        let log = [
            pre("refresh", stack),
            pre("refresh", cm),
            pre("same", stack),
            pre("delete-replaced", cm),
            pre("replace", cm),
            pre("create-replacement", cm),
            pre("update", "urn:b"),
            pre("read", "urn:c"),
            pre("create", "urn:d"),
            "not json".into(),
            r#"{"summaryEvent":{"resourceChanges":{"replace":1}}}"#.into(),
        ]
        .join("\n");
        let got: Vec<(String, String)> = planned_changes(&log)
            .into_iter()
            .map(|c| (c.urn, c.operation))
            .collect();
        assert_eq!(
            got,
            vec![
                (cm.to_string(), "replace".to_string()),
                ("urn:b".to_string(), "update".to_string()),
                ("urn:d".to_string(), "create".to_string()),
            ]
        );
        assert!(planned_changes(&pre("same", stack)).is_empty());
    }

    fn pack_plan(op: Operation) -> RunPlan {
        let mut plan: RunPlan = serde_json::from_value(serde_json::json!({
            "namespace": "ns",
            "operation": op.as_str(),
            "stack": {"name": "dev", "create": true},
            "policyPacks": [{
                "name": "k8s-limits",
                "policy": "limits",
                "source": {"kind": "git", "url": "https://example.com/p.git",
                           "commit": "0123456789abcdef0123456789abcdef01234567"},
            }],
        }))
        .unwrap();
        plan.operation = op;
        plan
    }

    fn failed(stderr: &str, code: Option<i32>) -> Outcome {
        let mut observed = crate::classify::Observed::default();
        observed.text(crate::classify::Stream::Stderr, stderr);
        Outcome {
            code,
            observed,
            stdout: Vec::new(),
            interrupted: false,
        }
    }

    #[test]
    fn operation_failures_with_policy_packs() {
        let plan = pack_plan(Operation::Preview);
        let opts = RunOptions::default();
        let mandatory = crate::policy::report::from_event_log(
            r#"{"policyEvent":{"resourceUrn":"urn:a","message":"no limits","policyName":"limits","policyPackName":"k8s-limits","enforcementLevel":"mandatory"}}"#,
            vec!["k8s-limits@0123456789ab".into()],
        );
        let out = failed("error: preview failed\n", Some(1));
        let f = operation_failure(&out, &plan, &opts, Some(&mandatory));
        assert_eq!(f.reason, FailureReason::PolicyViolation);
        assert_eq!(
            f.message,
            "1 mandatory policy violation: k8s-limits/limits on urn:a: no limits"
        );
        // Advisory violations only: the failure is the CLI's.
        let advisory = PolicyReport {
            mandatory: 0,
            ..mandatory.clone()
        };
        let f = operation_failure(&out, &plan, &opts, Some(&advisory));
        assert_eq!(f.reason, FailureReason::UpdateFailed);
        // A pack the CLI cannot load: named, with the CLI's line.
        let line = format!(
            "policy pack \"{POLICY_PACKS_DIR}/limits/k8s-limits\" failed to start: exit status 1"
        );
        let out = failed(&format!("error: {line}\n"), Some(1));
        let f = operation_failure(&out, &plan, &opts, Some(&mandatory));
        assert_eq!(f.reason, FailureReason::PolicyPackFailed);
        assert_eq!(
            f.message,
            format!("policy pack \"k8s-limits\" of StackPolicy \"limits\": {line}")
        );
        // Interrupted stays interrupted.
        let f = operation_failure(&failed("", None), &plan, &opts, Some(&mandatory));
        assert_eq!(f.reason, FailureReason::Interrupted);
        // Refresh and destroy run no packs.
        assert!(packs_run_by(&pack_plan(Operation::Refresh)).is_empty());
        assert!(packs_run_by(&pack_plan(Operation::Destroy)).is_empty());
        assert_eq!(packs_run_by(&pack_plan(Operation::Up)).len(), 1);
    }

    #[test]
    fn outputs_cut_by_the_capture_cap_fail_for_their_size() {
        let mut out = failed("", Some(0));
        out.stdout = b"{\"a\": 1}".to_vec();
        assert!(whole_capture(&out).is_ok());
        out.stdout = vec![b' '; crate::exec::MAX_CAPTURE];
        let f = whole_capture(&out).unwrap_err();
        assert_eq!(f.reason, FailureReason::UpdateFailed);
        assert!(
            f.message.contains("outputs are over 64 MiB"),
            "{}",
            f.message
        );
    }

    #[test]
    fn environments_are_added_once() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            missing_environments(&s(&["p/a"]), &s(&["p/a", "p/b", "p/b", "p/c"])),
            s(&["p/b", "p/c"])
        );
        assert!(missing_environments(&s(&["p/a"]), &s(&["p/a"])).is_empty());
    }

    #[test]
    fn summaries() {
        let h = br#"[
  {
    "version": 7, "kind": "update", "startTime": "2026-08-21T10:00:00.000Z",
    "result": "succeeded", "endTime": "2026-08-21T10:01:02.000Z",
    "resourceChanges": {"create": 2, "same": 1}
  }
]"#;
        let s = parse_history(h).unwrap();
        assert_eq!(s.result.as_deref(), Some("succeeded"));
        assert_eq!(s.resource_changes["create"], 2);
        assert!(parse_history(b"[]").is_none());
        assert!(parse_history(b"oops").is_none());

        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.json");
        std::fs::write(
            &log,
            "{\"sequence\":0,\"timestamp\":1,\"preludeEvent\":{\"config\":{}}}\n\
             {\"sequence\":1,\"timestamp\":1,\"summaryEvent\":{\"maybeCorrupt\":false,\"durationSeconds\":1,\"resourceChanges\":{\"create\":1},\"PolicyPacks\":{},\"isPreview\":true}}\n\
             {\"sequence\":2,\"timestamp\":1,\"cancelEvent\":{}}\n",
        )
        .unwrap();
        let s = summary_from_event_log(&log).unwrap();
        assert_eq!(s.result.as_deref(), Some("succeeded"));
        assert_eq!(s.resource_changes["create"], 1);
        assert!(summary_from_event_log(&dir.path().join("none")).is_none());
    }
}
