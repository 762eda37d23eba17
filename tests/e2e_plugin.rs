//! `kubectl pulumi` (plugin/) end to end: the built binary, run as a user would with the test
//! cluster's kubeconfig, against Stacks the operator deploys from git repositories on loopback.
//! Each command on a deployed Stack; `reconcile` waiting for its result; `suspend` while an
//! operation runs and `resume`; `approve` racing a new commit; and the errors for a missing
//! Stack and for a user bound to the aggregated `view` role only.

use pulumi_operator_api::Stack;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use test_support::{
    kubeconfig, kubectl, last_update, sleeping_program, stack_ready, wait_until, StackFixture,
    TEST_PASSPHRASE,
};

const T: Duration = Duration::from_secs(120);

const PROGRAM: &str = r#"name: e2e
runtime: yaml
config:
  greeting:
    type: string
    default: hello
resources:
  rec:
    type: standin:index:Record
    properties:
      value: ${greeting}
outputs:
  value: ${rec.value}
  password:
    fn::secret: plugin-secret-output-4b7
"#;

const FAILING: &str = r#"name: e2e
runtime: yaml
resources:
  broken:
    type: standin:index:Fail
    properties:
      message: this program fails on purpose
"#;

/// A program of Record resources named `names`.
fn records(names: &[&str]) -> String {
    let mut p = String::from("name: e2e\nruntime: yaml\nresources:\n");
    for n in names {
        p.push_str(&format!(
            "  {n}:\n    type: standin:index:Record\n    properties:\n      value: {n}\n"
        ));
    }
    p
}

/// The plugin binary, built beside this test.
fn plugin_binary() -> PathBuf {
    test_support::workspace_binary("kubectl-pulumi")
}

/// What one run of the plugin printed.
struct Run {
    code: i32,
    out: String,
    err: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.out, self.err
        )
    }
}

/// Runs `kubectl-pulumi -n <ns> <args>` with the test cluster's kubeconfig (not on a TTY:
/// no colour).
fn plugin(ns: &str, args: &[&str]) -> Run {
    let out = Command::new(plugin_binary())
        .args(["-n", ns])
        .args(args)
        .env("KUBECONFIG", kubeconfig())
        .output()
        .expect("run kubectl-pulumi");
    Run {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// As [`plugin`], asserting exit 0.
fn ok(ns: &str, args: &[&str]) -> Run {
    let run = plugin(ns, args);
    assert_eq!(run.code, 0, "kubectl pulumi {args:?}:\n{run}");
    run
}

fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{run}"))
}

/// A ServiceAccount bound to the aggregated `view` role in the namespace; its `--as` name.
fn viewer(f: &StackFixture) -> String {
    f.sn.ns.apply(&format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: viewer}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: viewer-view}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}}
subjects: [{{kind: ServiceAccount, name: viewer, namespace: {ns}}}]
"#,
        ns = f.ns()
    ));
    format!("system:serviceaccount:{}:viewer", f.ns())
}

async fn deployed(prefix: &str, program: &str) -> (StackFixture, Stack) {
    let f = StackFixture::new(prefix).await;
    let sha = f.repo.commit(&[("Pulumi.yaml", program)], "v1");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    let s = f.wait_stack("app", "the Stack Ready", stack_ready).await;
    (f, s)
}

/// get, describe, logs, history and outputs on a deployed Stack; completion and help.
#[tokio::test]
async fn read_commands_show_a_deployed_stack() {
    let (f, s) = deployed("plugin-read", PROGRAM).await;
    let ns = f.ns();
    let last = last_update(&s);
    let update = last.name.clone().unwrap_or_default();

    let get = ok(ns, &["get", "app"]);
    assert!(get.out.starts_with("NAME "), "{get}");
    assert!(
        get.out.contains("Ready") && get.out.contains("up succeeded"),
        "{get}"
    );
    let rows = json(&ok(ns, &["get", "-o", "json"]));
    assert_eq!(rows[0]["name"], "app");
    assert_eq!(rows[0]["state"], "Ready");
    assert_eq!(rows[0]["lastOperation"]["name"], update.as_str());
    let named = ok(ns, &["get", "app", "-A"]);
    assert!(named.out.contains(&format!("{ns} ")), "{named}");
    let all = ok(ns, &["get", "-A"]);
    assert!(all.out.starts_with("NAMESPACE "), "{all}");
    assert!(all.out.contains(&format!("{ns} ")), "{all}");

    kubectl(&[
        "-n",
        ns,
        "wait",
        "--for=condition=complete",
        &format!("job/{update}"),
        "--timeout=60s",
    ]);
    let describe = ok(ns, &["describe", "app"]);
    for want in [
        "State:       Ready".to_string(),
        format!("  {update} up Succeeded"),
        format!("    Job {update}: Succeeded"),
        "      pulumi: Terminated Completed (exit 0)".to_string(),
        "StackCreated".to_string(),
    ] {
        assert!(
            describe.out.contains(&want),
            "missing {want:?}:\n{describe}"
        );
    }
    let chain = json(&ok(ns, &["describe", "app", "-o", "json"]));
    assert_eq!(chain["updates"][0]["job"]["state"], "Succeeded");

    let logs = ok(ns, &["logs", "app"]);
    assert!(
        logs.out.contains("rec"),
        "the Pulumi output names the resource:\n{logs}"
    );
    assert!(!logs.out.contains(TEST_PASSPHRASE));
    let init = ok(
        ns,
        &["logs", "app", "--update", &update, "--all-containers"],
    );
    assert!(
        init.out.contains(&format!("==> {update} fetch <==")),
        "{init}"
    );
    assert!(
        init.out.contains(&format!("==> {update} pulumi <==")),
        "{init}"
    );

    let history = json(&ok(ns, &["history", "app", "-o", "json"]));
    assert_eq!(history[0]["name"], update.as_str());
    assert_eq!(history[0]["type"], "up");
    assert_eq!(history[0]["result"], "Succeeded");
    assert!(
        history[0]["durationSeconds"]
            .as_i64()
            .is_some_and(|d| d >= 0),
        "{history}"
    );
    assert_eq!(
        history[0]["revision"].as_str(),
        last.last_successful_commit.as_deref()
    );
    assert!(ok(ns, &["history", "app"]).out.contains("Succeeded"));

    let outputs = json(&ok(ns, &["outputs", "app", "-o", "json"]));
    assert_eq!(outputs["value"], "hello");
    assert_eq!(outputs["password"], "[secret]");
    let secret = json(&ok(ns, &["outputs", "app", "--show-secrets", "-o", "json"]));
    assert_eq!(secret["password"], "plugin-secret-output-4b7");
    assert!(ok(ns, &["outputs", "app"])
        .out
        .contains("password   [secret]"));

    // The kubeconfig and context named on the command line, without $KUBECONFIG.
    let context = kubectl(&["config", "current-context"]).trim().to_string();
    let explicit = Command::new(plugin_binary())
        .args([
            "--kubeconfig",
            &kubeconfig(),
            "--context",
            &context,
            "-n",
            ns,
            "get",
            "app",
        ])
        .env_remove("KUBECONFIG")
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run kubectl-pulumi");
    assert!(
        explicit.status.success() && String::from_utf8_lossy(&explicit.stdout).contains("Ready"),
        "{}",
        String::from_utf8_lossy(&explicit.stderr)
    );

    let bash = ok(ns, &["completion", "bash"]);
    assert!(bash.out.contains("kubectl-pulumi"), "{bash}");
    for command in [
        "get",
        "describe",
        "logs",
        "history",
        "reconcile",
        "suspend",
        "resume",
        "plan",
        "approve",
        "outputs",
        "completion",
    ] {
        let help = ok(ns, &[command, "--help"]);
        assert!(help.out.contains("Usage:"), "{help}");
    }
}

/// A missing Stack is named with its namespace; a `view` user reads everything but secret
/// values and is told which right each write lacks.
#[tokio::test]
async fn errors_name_the_missing_stack_and_the_missing_right() {
    let (f, _) = deployed("plugin-errors", PROGRAM).await;
    let ns = f.ns();
    for command in [
        "get",
        "describe",
        "logs",
        "history",
        "reconcile",
        "suspend",
        "plan",
        "approve",
        "outputs",
    ] {
        let run = plugin(ns, &[command, "nope"]);
        assert_eq!(run.code, 1, "{command}: {run}");
        assert!(
            run.err
                .contains(&format!("stack \"nope\" not found in namespace \"{ns}\"")),
            "{command}: {run}"
        );
    }

    let user = viewer(&f);
    let as_viewer = |args: &[&str]| {
        let mut all = vec!["--as", user.as_str()];
        all.extend_from_slice(args);
        plugin(ns, &all)
    };
    for args in [
        &["get", "app"][..],
        &["describe", "app"],
        &["logs", "app"],
        &["history", "app"],
        &["outputs", "app"],
    ] {
        let run = as_viewer(args);
        assert_eq!(run.code, 0, "{args:?} as a viewer:\n{run}");
    }
    let secrets = as_viewer(&["outputs", "app", "--show-secrets"]);
    assert_eq!(secrets.code, 1, "{secrets}");
    assert!(
        secrets.err.contains(&format!(
            "you are not allowed to get secrets in namespace \"{ns}\""
        )),
        "{secrets}"
    );
    for command in ["reconcile", "suspend", "resume"] {
        let run = as_viewer(&[command, "app"]);
        assert_eq!(run.code, 1, "{run}");
        assert!(
            run.err.contains(&format!(
                "you are not allowed to patch stacks.pulumi.com in namespace \"{ns}\""
            )),
            "{command}: {run}"
        );
    }
    let all = as_viewer(&["get", "-A"]);
    assert_eq!(all.code, 1, "{all}");
    assert!(
        all.err
            .contains("you are not allowed to list stacks.pulumi.com in all namespaces"),
        "{all}"
    );
}

/// `reconcile` runs the Stack once and waits: exit 0 with the result when it succeeds, 1 with
/// the failure's message when it fails.
#[tokio::test]
async fn reconcile_waits_for_the_run_it_asked_for() {
    let (f, s) = deployed("plugin-reconcile", PROGRAM).await;
    let ns = f.ns();
    let before = last_update(&s).name.unwrap_or_default();
    let run = ok(ns, &["reconcile", "app", "--timeout", "3m"]);
    let after = last_update(&f.stack("app").await);
    let name = after.name.clone().unwrap_or_default();
    assert_ne!(name, before);
    assert!(run.out.contains(&format!("up {name} succeeded")), "{run}");
    let request = after.reconcile_request.unwrap_or_default();
    assert!(request.starts_with("kubectl-pulumi-"), "{request}");
    assert!(run.err.contains(&request), "{run}");

    // A failing commit: the run it asks for fails, and says why.
    let sha = f.repo.commit(&[("Pulumi.yaml", FAILING)], "broken");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    f.wait_stack("app", "the failing commit tried", |s| {
        last_update(s).last_attempted_commit.as_deref() == Some(sha.as_str())
    })
    .await;
    let failed = plugin(ns, &["reconcile", "app", "--timeout", "3m"]);
    assert_eq!(failed.code, 1, "{failed}");
    assert!(
        failed.out.contains("failed") && failed.out.contains("fails on purpose"),
        "{failed}"
    );
    let state = json(&ok(ns, &["get", "app", "-o", "json"]));
    assert_eq!(state[0]["state"], "Failing", "{state}");
}

fn updates_of(f: &StackFixture) -> Vec<String> {
    kubectl(&[
        "-n",
        f.ns(),
        "get",
        "updates",
        "-l",
        "pulumi.com/stack-name=app",
        "-o",
        "name",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

/// `suspend` during an operation: it finishes, nothing new starts (a new commit, a reconcile
/// request); `resume` starts exactly one operation, which picks up both.
#[tokio::test]
async fn suspend_lets_the_running_operation_finish_and_resume_starts_one() {
    let f = StackFixture::new("plugin-suspend").await;
    let ns = f.ns();
    let v1 = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(15))], "v1");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {v1}"), ""));
    f.running_runner_pod("app").await;
    let running = f.stack("app").await;
    let first = running
        .status
        .and_then(|s| s.current_update)
        .and_then(|c| c.name)
        .expect("an operation runs");
    let suspend = ok(ns, &["suspend", "app"]);
    assert!(
        suspend
            .out
            .contains(&format!("the running operation {first} finishes")),
        "{suspend}"
    );
    assert_eq!(
        json(&ok(ns, &["get", "app", "-o", "json"]))[0]["state"],
        "Suspended"
    );
    // `logs -f` follows the running operation to its end.
    let followed = ok(ns, &["logs", "app", "-f"]);
    assert!(followed.out.contains("nap"), "{followed}");

    let done = f
        .wait_stack("app", "the running operation to finish", |s| {
            last_update(s).name.as_deref() == Some(first.as_str())
                && s.status
                    .as_ref()
                    .is_some_and(|x| x.current_update.is_none())
        })
        .await;
    assert_eq!(
        last_update(&done).state.map(|s| s.to_string()).as_deref(),
        Some("succeeded")
    );
    // Meanwhile: a new commit and a reconcile request. Neither runs.
    let v2 = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(1))], "v2");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {v2}"), "  suspend: true\n"));
    let refused = plugin(ns, &["reconcile", "app", "--timeout", "60s"]);
    assert_eq!(refused.code, 1, "{refused}");
    assert!(refused.out.contains("suspended"), "{refused}");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let kept = updates_of(&f);
    assert_eq!(
        kept.len(),
        1,
        "nothing new starts while suspended: {kept:?}"
    );

    let resume = ok(ns, &["resume", "app"]);
    assert!(resume.out.contains("resumed"), "{resume}");
    let after = f
        .wait_stack("app", "the resumed Stack Ready at v2", |s| {
            stack_ready(s) && last_update(s).last_successful_commit.as_deref() == Some(v2.as_str())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let kept = updates_of(&f);
    assert_eq!(
        kept.len(),
        2,
        "resume starts exactly one operation: {kept:?}"
    );
    assert_ne!(last_update(&after).name.as_deref(), Some(first.as_str()));
}

fn pending(s: &Stack) -> Option<String> {
    let a = s.status.as_ref()?.approval.as_ref()?;
    (a.state == Some(pulumi_operator_api::ApprovalState::AwaitingApproval))
        .then(|| a.plan.clone())
        .flatten()
}

/// A gated Stack: `plan` shows the pending plan; a new commit replaces it between `plan` and
/// `approve`, so approving the old id is refused (by the plugin and by the API server's test
/// of the pending plan); approving the new one applies it.
#[tokio::test]
async fn approve_refuses_a_plan_replaced_by_a_new_commit() {
    let f = StackFixture::new("plugin-approve").await;
    let ns = f.ns();
    let gated = "  approval:\n    required: true\n";
    let v1 = f
        .repo
        .commit(&[("Pulumi.yaml", &records(&["alpha", "beta"]))], "v1");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {v1}"), gated));
    let waiting = f
        .wait_stack("app", "a plan awaiting approval", |s| pending(s).is_some())
        .await;
    let first = pending(&waiting).unwrap_or_default();

    let shown = ok(ns, &["plan", "app"]);
    assert!(
        shown.out.contains(&format!("Plan:      {first}")),
        "{shown}"
    );
    assert!(
        shown.out.contains("standin:index:Record") && shown.out.contains("alpha"),
        "{shown}"
    );
    assert!(
        shown
            .out
            .contains(&format!("kubectl pulumi approve app --plan {first}")),
        "{shown}"
    );
    let view = json(&ok(ns, &["plan", "app", "-o", "json"]));
    assert_eq!(
        view["complete"], true,
        "an editor reads the saved plan: {view}"
    );
    let names: Vec<&str> = view["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        names.contains(&"alpha") && names.contains(&"beta"),
        "{view}"
    );
    let counted = waiting
        .status
        .as_ref()
        .and_then(|s| s.approval.as_ref())
        .map(|a| a.changes.clone());
    assert_eq!(
        view["counts"]["create"].as_i64(),
        counted.and_then(|c| c.get("create").copied()),
        "the saved plan counts what the operator counts (default providers left out): {view}"
    );
    let user = viewer(&f);
    let partial = plugin(ns, &["--as", &user, "plan", "app", "-o", "json"]);
    assert_eq!(partial.code, 0, "{partial}");
    assert_eq!(json(&partial)["complete"], false, "{partial}");
    assert!(partial.err.contains("you may not get secrets"), "{partial}");

    // A new commit arrives after `plan` was read.
    let v2 = f
        .repo
        .commit(&[("Pulumi.yaml", &records(&["alpha", "gamma"]))], "v2");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {v2}"), gated));
    let replanned = f
        .wait_stack("app", "a new plan for v2", |s| {
            pending(s).is_some_and(|p| p != first)
        })
        .await;
    let second = pending(&replanned).unwrap_or_default();
    let refused = plugin(ns, &["approve", "app", "--plan", &first]);
    assert_eq!(refused.code, 1, "{refused}");
    assert!(
        refused.err.contains("no longer pending") && refused.err.contains(&second),
        "{refused}"
    );
    let annotation = kubectl(&[
        "-n",
        ns,
        "get",
        "stack",
        "app",
        "-o",
        r"jsonpath={.metadata.annotations.pulumi\.com/approve-plan}",
    ]);
    assert_eq!(annotation, "", "nothing was approved");
    // The guard the plugin sends is enforced by the API server itself.
    let stale = format!(
        r#"[{{"op":"test","path":"/status/approval/plan","value":"{first}"}},{{"op":"add","path":"/metadata/annotations","value":{{"pulumi.com/approve-plan":"{first}"}}}}]"#
    );
    let (patched, _, err) = test_support::kubectl_result(&[
        "-n",
        ns,
        "patch",
        "stack",
        "app",
        "--type=json",
        "-p",
        &stale,
    ]);
    assert!(!patched, "the API server applied a patch whose test fails");
    assert!(err.contains("invalid"), "{err}");

    let applied = plugin(
        ns,
        &["approve", "app", "--plan", &second, "--timeout", "3m"],
    );
    assert_eq!(applied.code, 0, "{applied}");
    assert!(
        applied
            .out
            .contains(&format!("the plan {second} was applied: up")),
        "{applied}"
    );
    assert!(applied.out.contains("succeeded"), "{applied}");
    let s = f.stack("app").await;
    assert!(stack_ready(&s));
    assert_eq!(
        last_update(&s).last_successful_commit.as_deref(),
        Some(v2.as_str())
    );
    let history = ok(ns, &["history", "app"]);
    assert!(
        history.out.contains(&format!("applies {second}")),
        "{history}"
    );

    // A change, then `reconcile`: the run it asks for is a plan, which waits (exit 0); `approve`
    // without --plan shows that plan and applies it.
    let v3 = f
        .repo
        .commit(&[("Pulumi.yaml", &records(&["alpha", "delta"]))], "v3");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {v3}"), gated));
    let third = f
        .wait_stack("app", "a plan for v3", |s| {
            pending(s).is_some_and(|p| p != second)
        })
        .await;
    let third = pending(&third).unwrap_or_default();
    let reconciled = ok(ns, &["reconcile", "app", "--timeout", "3m"]);
    assert!(reconciled.out.contains("awaits approval"), "{reconciled}");
    let fourth = pending(&f.stack("app").await).unwrap_or_default();
    assert_ne!(fourth, third, "the request made a plan of its own");
    assert!(reconciled.out.contains(&fourth), "{reconciled}");
    let approved = ok(ns, &["approve", "app", "--timeout", "3m"]);
    assert!(
        approved.out.contains(&format!("Plan:      {fourth}")) && approved.out.contains("delta"),
        "{approved}"
    );
    assert!(
        approved
            .out
            .contains(&format!("the plan {fourth} was applied: up")),
        "{approved}"
    );
}

/// `get -w` prints the Stack again when its state changes.
#[tokio::test]
async fn get_watch_prints_changes() {
    let f = StackFixture::new("plugin-watch").await;
    let ns = f.ns().to_string();
    let sha = f.repo.commit(&[("Pulumi.yaml", &records(&["one"]))], "v1");
    let mut child = std::process::Command::new(plugin_binary())
        .args(["-n", &ns, "get", "-w", "-o", "json"])
        .env("KUBECONFIG", kubeconfig())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start get -w");
    let stdout = child.stdout.take().expect("stdout");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().map(|mut l| l.push(line)).ok();
        }
    });
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    wait_until(T, "get -w to print the Stack Ready", || async {
        lines
            .lock()
            .map(|l| l.iter().any(|x| x.contains("\"state\":\"Ready\"")))
            .unwrap_or(false)
    })
    .await;
    let seen = lines.lock().map(|l| l.clone()).unwrap_or_default();
    assert!(
        seen.iter().any(|x| x.contains("\"state\":\"Reconciling\"")),
        "{seen:?}"
    );
    let _ = child.kill();
    let _ = child.wait();
}
