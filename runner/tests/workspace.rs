//! `pulumi-runner workspace` (the main container of a retained workspace pod) end to end
//! against the Pulumi CLI stand-in: it prepares the stack like `run` (select or create, config),
//! runs no operation, reports ready, and stops cleanly on SIGTERM.

mod common;

use common::*;
use pulumi_operator_api::plan::{
    FailureReason, Operation, Outcome, RetainedWorkspace, RunResult, WorkspacePlan,
};
use pulumi_operator_api::workspace::ConfigItem;
use std::process::Child;
use std::time::{Duration, Instant};

const PROGRAM: &str = r#"name: proj
runtime: yaml
config:
  greeting: {type: string}
resources:
  rec:
    type: standin:index:Record
    properties:
      value: ${greeting}
outputs:
  value: ${rec.value}
"#;

const SECRET: &str = "workspace-secret-value-5521";

fn workspace_plan() -> WorkspacePlan {
    let mut plan = plan(Operation::Preview, None);
    plan.update_name.clear();
    plan.update_uid.clear();
    plan.outputs_secret.clear();
    plan.stack.config = vec![
        ConfigItem {
            key: "greeting".into(),
            value: Some("hello from the workspace".into()),
            ..Default::default()
        },
        ConfigItem {
            key: "token".into(),
            value: Some(SECRET.into()),
            secret: Some(true),
            ..Default::default()
        },
    ];
    WorkspacePlan {
        plan,
        workspace: RetainedWorkspace {
            name: "app".into(),
            revision: "abc123".into(),
        },
    }
}

/// Starts `workspace` with a workspace plan (in the background).
fn start(w: &World, wp: &WorkspacePlan) -> Child {
    let mut cmd = w.command("workspace", &wp.plan);
    std::fs::write(
        w.path("plan.json"),
        serde_json::to_string_pretty(wp).unwrap(),
    )
    .unwrap();
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the runner")
}

fn check(w: &World) -> Option<i32> {
    let mut cmd = w.command("workspace", &workspace_plan().plan);
    cmd.arg("--check").status().expect("check").code()
}

fn stop(w: &World, mut child: Child) -> (Option<i32>, RunResult, String) {
    // SAFETY: kill(2) on the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the workspace did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let ran = w.ran(out);
    (ran.code, ran.result, ran.stderr)
}

#[test]
fn prepares_the_stack_runs_nothing_and_waits_for_sigterm() {
    let w = World::new();
    w.fetch_program(PROGRAM);
    let wp = workspace_plan();
    let mut child = start(&w, &wp);
    let ready = w.share().join(".pulumi-runner/workspace-ready");
    let t = Instant::now();
    while !ready.is_file() {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the workspace exited ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(check(&w), Some(0));
    // Still running, and the stack is selected and configured as for an update.
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "it must stay up");
    let ls: serde_json::Value =
        serde_json::from_str(&w.pulumi(&["stack", "ls", "--json"])).unwrap();
    let current: Vec<&serde_json::Value> = ls
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["current"] == true)
        .collect();
    assert_eq!(current.len(), 1, "{ls}");
    assert_eq!(current[0]["name"], "dev");
    assert_eq!(
        w.pulumi(&["config", "get", "greeting"]).trim(),
        "hello from the workspace"
    );
    // No operation ran: the stack has no history.
    let history: serde_json::Value =
        serde_json::from_str(&w.pulumi(&["stack", "history", "--json"])).unwrap();
    assert_eq!(history, serde_json::json!([]));

    let (code, result, stderr) = stop(&w, child);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(result.outcome, Outcome::Succeeded);
    assert!(
        result.message.contains("workspace app ready") && result.message.contains("abc123"),
        "{}",
        result.message
    );
    assert_eq!(result.project.unwrap().name, "proj");
    assert!(!stderr.contains(SECRET), "a secret reached the log");
    assert!(!ready.exists(), "ready must be withdrawn when stopping");
    assert_eq!(check(&w), Some(1));
}

#[test]
fn a_failed_preparation_stays_up_unready_and_reports_at_the_end() {
    let w = World::new();
    // No fetch: there is no program.
    let child = start(&w, &workspace_plan());
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(check(&w), Some(1));
    let (code, result, stderr) = stop(&w, child);
    assert_eq!(code, Some(1));
    assert_eq!(result.reason, Some(FailureReason::SourceUnavailable));
    assert!(stderr.contains("stays up"), "{stderr}");
}

#[test]
fn an_update_plan_is_refused() {
    let w = World::new();
    let ran = w.run("workspace", &plan(Operation::Up, None), &[]);
    ran.assert_failed(FailureReason::ConfigInvalid);
    assert!(ran.result.message.contains("not a workspace plan"));
}
