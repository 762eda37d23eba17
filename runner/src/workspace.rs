//! `pulumi-runner workspace`: the `pulumi` container of a retained workspace pod
//! (`workspaceReclaimPolicy: Retain`). It prepares the workspace exactly as `run` prepares a
//! Job's — `pulumi install`, select (or create) the stack, add ESC environments, apply the
//! configuration — and then runs **no operation**: it stays up until SIGTERM so that a user can
//! `kubectl exec` into the pod and run `pulumi` there (imports, state surgery), with the program
//! at the deployed revision, its dependencies installed and the stack selected.
//!
//! Readiness: once prepared it writes `<share>/.pulumi-runner/workspace-ready`;
//! `pulumi-runner workspace --check` (the pod's readiness probe) succeeds only then. A failed
//! preparation is logged (`kubectl logs`), and the pod stays up, unready, so that the failure
//! can be inspected from inside; the failure is also the container's termination message when
//! the pod stops.

use pulumi_operator_api::plan::{FailureReason, RunResult, WorkspacePlan};
use pulumi_runner::error::Failure;
use pulumi_runner::plan::Layout;
use pulumi_runner::redact::Redactor;
use pulumi_runner::report::{log, succeeded};
use pulumi_runner::run;
use pulumi_runner::signals::{self, Signals};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The file that marks a prepared workspace (in the runner's scratch directory).
pub fn ready_file(layout: &Layout) -> PathBuf {
    layout.scratch_dir().join("workspace-ready")
}

/// Reads a workspace plan; an Update's plan (no `workspace`) is refused.
pub fn load(path: &Path) -> Result<WorkspacePlan, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::config_invalid(format!("cannot read the plan {}: {e}", path.display()))
    })?;
    serde_json::from_str(&text).map_err(|e| {
        Failure::config_invalid(format!(
            "{} is not a workspace plan (written by the Workspace controller for \
             workspaceReclaimPolicy: Retain): {e}",
            path.display()
        ))
    })
}

/// The readiness probe: exit 0 when the workspace is prepared.
pub fn check(layout: &Layout) -> ExitCode {
    if ready_file(layout).is_file() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Prepares the workspace, marks it ready, and waits for SIGTERM or SIGINT; the result
/// describes the preparation.
pub async fn serve(
    plan: &WorkspacePlan,
    layout: &Layout,
    opts: &run::RunOptions,
    signals: Signals,
) -> RunResult {
    let ready = ready_file(layout);
    let _ = std::fs::remove_file(&ready);
    let mut redactor = Redactor::default();
    let mut result = match prepare(plan, layout, opts, signals.clone(), &mut redactor).await {
        Ok(message) => {
            let marked = std::fs::create_dir_all(layout.scratch_dir())
                .and_then(|_| std::fs::write(&ready, message.as_bytes()));
            match marked {
                Ok(()) => {
                    log(format!(
                        "{message}; no operation runs here: `kubectl exec -it <this pod> -c pulumi -- sh` \
                         and run pulumi in {}",
                        layout.workspace_dir().display()
                    ));
                    succeeded(message)
                }
                Err(e) => Failure::new(
                    FailureReason::UpdateFailed,
                    format!("cannot write {}: {e}", ready.display()),
                )
                .into_result(),
            }
        }
        Err(f) => {
            let mut r = f.into_result();
            r.message = redactor.apply(&r.message);
            log(format!(
                "the workspace could not be prepared ({}): {}; the pod stays up (not ready) so \
                 that you can look inside with kubectl exec",
                r.reason.map(|r| r.as_str()).unwrap_or("Failed"),
                r.message
            ));
            r
        }
    };
    result.project = pulumi_runner::plan::project_info(&layout.workspace_dir());
    // Idle until stopped. As PID 1 the runner also reaps what `kubectl exec` sessions leave
    // behind (their orphans are re-parented to it).
    loop {
        tokio::select! {
            _ = signals.after(0) => break,
            _ = tokio::time::sleep(Duration::from_secs(5)) => signals::reap_orphans(),
        }
    }
    log("stopping the workspace");
    let _ = std::fs::remove_file(&ready);
    result
}

async fn prepare(
    wp: &WorkspacePlan,
    layout: &Layout,
    opts: &run::RunOptions,
    signals: Signals,
    redactor: &mut Redactor,
) -> Result<String, Failure> {
    let prepared = run::prepare(
        &wp.plan,
        layout,
        opts,
        signals,
        redactor,
        run::PrepareFor::Workspace,
    )
    .await?;
    let revision = if wp.workspace.revision.is_empty() {
        String::new()
    } else {
        format!(" at {}", wp.workspace.revision)
    };
    Ok(format!(
        "workspace {} ready: project {}{revision}, stack {} selected",
        wp.workspace.name, prepared.project.name, wp.plan.stack.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_plans_are_not_workspace_plans() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plan.json");
        std::fs::write(
            &file,
            r#"{"updateName":"u","namespace":"n","updateUid":"x","operation":"up",
                "stack":{"name":"dev","create":true},"outputsSecret":"u-stack-outputs"}"#,
        )
        .unwrap();
        let e = load(&file).unwrap_err();
        assert_eq!(e.reason, FailureReason::ConfigInvalid);
        assert!(e.message.contains("not a workspace plan"), "{}", e.message);
        std::fs::write(
            &file,
            r#"{"namespace":"n","operation":"preview","stack":{"name":"dev","create":true},
                "workspace":{"name":"app","revision":"abc"}}"#,
        )
        .unwrap();
        let p = load(&file).unwrap();
        assert_eq!(p.workspace.name, "app");
        assert_eq!(p.plan.stack.name, "dev");
    }

    #[test]
    fn check_follows_the_ready_file() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert_eq!(check(&layout), ExitCode::from(1));
        std::fs::create_dir_all(layout.scratch_dir()).unwrap();
        std::fs::write(ready_file(&layout), "ok").unwrap();
        assert_eq!(check(&layout), ExitCode::SUCCESS);
    }
}
