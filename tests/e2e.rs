//! The core loop end to end, driven with kubectl as a user would: the operator installed with
//! `kubectl apply -k kustomize/quickstart` runs in-cluster; Stacks point at git repositories
//! served on loopback by git's own http-backend; every operation is a Job whose runner drives
//! the real Pulumi CLI (with the test provider plugins of tests/tools) against a file backend.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::ListParams;
use kube::Api;
use pulumi_operator_api::Stack;
use std::time::{Duration, Instant};
use test_support::{kubectl, sleeping_program, wait_until, StackFixture, TEST_PASSPHRASE};

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
    fn::secret: top-secret-output-9d1
"#;

const FAILING: &str = r#"name: e2e
runtime: yaml
resources:
  broken:
    type: standin:index:Fail
    properties:
      message: this program fails on purpose
"#;

type Fixture = StackFixture;

fn condition(s: &Stack, kind: &str) -> Option<(String, String)> {
    s.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn ready(s: &Stack) -> bool {
    condition(s, "Ready").is_some_and(|(st, _)| st == "True")
        && s.status.as_ref().and_then(|x| x.observed_generation) == s.metadata.generation
}

fn last_update_name(s: &Stack) -> String {
    s.status
        .as_ref()
        .and_then(|x| x.last_update.as_ref())
        .and_then(|l| l.name.clone())
        .unwrap_or_default()
}

/// a) A commit-pinned Stack becomes Ready; outputs reach status (secret masked) and the
/// outputs Secret; `kubectl logs job/<update>` shows the Pulumi output; nothing keeps running.
#[tokio::test]
async fn commit_pinned_stack_becomes_ready_with_outputs_and_logs() {
    let f = Fixture::new("commit").await;
    let sha = f
        .repo
        .commit(&[("infra/Pulumi.yaml", PROGRAM)], "initial program");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}\n  repoDir: infra"),
        "  config:\n    greeting: hi from the stack\n",
    ));
    let s = f.wait_stack("app", "the stack to be Ready", ready).await;
    let st = s.status.clone().unwrap();
    let last = st.last_update.clone().unwrap();
    assert_eq!(last.last_successful_commit.as_deref(), Some(sha.as_str()));
    assert_eq!(last.state.as_ref().map(|s| s.as_str()), Some("succeeded"));
    let outputs = st.outputs.clone().unwrap();
    assert_eq!(outputs["value"], "hi from the stack");
    assert_eq!(outputs["password"], "[secret]");

    let update = last.name.unwrap();
    let secrets: Api<Secret> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let out = secrets
        .get(&format!("{update}-stack-outputs"))
        .await
        .unwrap();
    let keys = out.metadata.annotations.unwrap()["pulumi.com/secrets"].clone();
    assert!(keys.contains("password"), "{keys}");
    assert_eq!(
        String::from_utf8_lossy(&out.data.unwrap()["password"].0),
        "\"top-secret-output-9d1\""
    );

    let logs = kubectl(&["-n", f.ns(), "logs", &format!("job/{update}")]);
    assert!(
        logs.contains("rec"),
        "the Pulumi output should name the resource:\n{logs}"
    );
    assert!(
        !logs.contains(TEST_PASSPHRASE),
        "the passphrase leaked into the logs"
    );

    // Nothing of the stack runs any more.
    let pods: Api<Pod> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    wait_until(
        Duration::from_secs(30),
        "no running pod of the stack",
        || async {
            let list = pods
                .list(&ListParams::default().labels("pulumi.com/stack-name=app"))
                .await
                .unwrap();
            list.items.iter().all(|p| {
                !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Running" | "Pending")
                )
            })
        },
    )
    .await;
    // The Job spec carries only references to secrets.
    let jobs: Api<Job> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let job = serde_json::to_string(&jobs.get(&update).await.unwrap()).unwrap();
    assert!(!job.contains(TEST_PASSPHRASE));
    let events = kubectl(&["-n", f.ns(), "get", "events", "-o", "json"]);
    assert!(
        events.contains("StackUpdateDetected") && events.contains("StackCreated"),
        "{events}"
    );
    assert!(!events.contains(TEST_PASSPHRASE) && !events.contains("top-secret-output-9d1"));
    let operator_logs = kubectl(&[
        "-n",
        "pulumi-operator",
        "logs",
        "deployment/pulumi-operator",
        "--all-containers",
    ]);
    assert!(
        !operator_logs.contains(TEST_PASSPHRASE)
            && !operator_logs.contains("top-secret-output-9d1")
    );
    // This cluster (v1.37) streams initial lists, and the operator found that out at start.
    assert!(
        operator_logs.contains("initial lists of the watches are streamed"),
        "the operator does not say it streams its initial lists"
    );
    let status = kubectl(&["-n", f.ns(), "get", "stack,update", "-o", "json"]);
    assert!(!status.contains(TEST_PASSPHRASE) && !status.contains("top-secret-output-9d1"));
}

/// b) Branch tracking: a pushed commit produces a new Update within the resync interval.
#[tokio::test]
async fn branch_tracking_follows_pushed_commits() {
    let f = Fixture::new("branch").await;
    let first = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "v1");
    f.sn.ns
        .apply(&f.stack_yaml("app", "branch: main\n  resyncFrequencySeconds: 3", ""));
    let s = f.wait_stack("app", "the first deployment", ready).await;
    assert_eq!(
        s.status
            .unwrap()
            .last_update
            .unwrap()
            .last_successful_commit
            .as_deref(),
        Some(first.as_str())
    );
    let second = f.repo.commit(
        &[(
            "Pulumi.yaml",
            &PROGRAM.replace("default: hello", "default: hello again"),
        )],
        "v2",
    );
    let started = Instant::now();
    let s = f
        .wait_stack("app", "the pushed commit to be deployed", |s| {
            s.status
                .as_ref()
                .and_then(|x| x.last_update.as_ref())
                .and_then(|l| l.last_successful_commit.clone())
                .as_deref()
                == Some(second.as_str())
        })
        .await;
    eprintln!("new commit deployed {:?} after the push", started.elapsed());
    assert_eq!(s.status.unwrap().outputs.unwrap()["value"], "hello again");
}

/// c) A failing program retries with growing backoff, stalls after 3 failures, and a fixing
/// commit makes it Ready.
#[tokio::test]
async fn failures_back_off_then_stall_and_a_fix_recovers() {
    let f = Fixture::new("failing").await;
    f.repo.commit(&[("Pulumi.yaml", FAILING)], "broken");
    f.sn.ns
        .apply(&f.stack_yaml("app", "branch: main\n  resyncFrequencySeconds: 3", ""));
    // The backoff is the wait between a failure and the next attempt, so it is measured from
    // the moment the failure shows in the status to the moment the next Job appears: how long
    // each Job takes to run (long on a loaded machine) is not part of it.
    let mut seen: Vec<(i64, Instant)> = Vec::new();
    let mut job_names: Vec<String> = Vec::new();
    let mut job_seen: Vec<Instant> = Vec::new();
    let stacks = f.stacks();
    let jobs: Api<Job> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let by_stack = ListParams::default().labels("pulumi.com/stack-name=app");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        for job in jobs.list(&by_stack).await.unwrap() {
            let name = job.metadata.name.unwrap_or_default();
            if !job_names.contains(&name) {
                job_names.push(name);
                job_seen.push(Instant::now());
            }
        }
        let s = stacks.get("app").await.unwrap();
        let last = s.status.as_ref().and_then(|x| x.last_update.clone());
        let failed = last
            .as_ref()
            .and_then(|l| l.state.clone())
            .map(|x| x.as_str().to_string())
            == Some("failed".into());
        let failures = last.and_then(|l| l.failures).unwrap_or(0);
        if failed && seen.last().map(|l| l.0) != Some(failures) {
            seen.push((failures, Instant::now()));
        }
        if condition(&s, "Stalled").is_some_and(|(st, r)| st == "True" && r == "UpdateFailed") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never stalled; failures seen: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // PKO's counting: four attempts (failures 0, 1, 2, 3), 10 s × 3^failures apart.
    let counts: Vec<i64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(counts, [0, 1, 2, 3], "each failure is counted once");
    assert_eq!(job_seen.len(), 4, "one Job per attempt: {job_names:?}");
    // Both instants come from the same 250 ms poll (half a second), and the failure's time in
    // the status (`lastResyncTime`, which the backoff counts from) has a resolution of one
    // second: it may read up to a second before the status was written.
    let tolerance = Duration::from_millis(1500);
    for (retry, expected) in [(1, 10), (2, 30), (3, 90)] {
        let waited = job_seen[retry].saturating_duration_since(seen[retry - 1].1);
        eprintln!(
            "retry {retry} started {waited:?} after failure {}",
            retry - 1
        );
        assert!(
            waited + tolerance >= Duration::from_secs(expected),
            "retry {retry} started {waited:?} after failure {}, expected ≥ {expected} s",
            retry - 1
        );
    }
    let s = f.stack("app").await;
    let last = s.status.as_ref().unwrap().last_update.clone().unwrap();
    assert!(last
        .message
        .unwrap_or_default()
        .contains("fails on purpose"));
    // Stalled means no more attempts.
    let jobs_before = f.stack_jobs("app").len();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        f.stack_jobs("app").len(),
        jobs_before,
        "a stalled stack must not retry"
    );

    let fix = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "fixed");
    let s = f
        .wait_stack("app", "the fixing commit to make it Ready", ready)
        .await;
    assert_eq!(
        s.status
            .unwrap()
            .last_update
            .unwrap()
            .last_successful_commit
            .as_deref(),
        Some(fix.as_str())
    );
}

/// d) A new reconciliation-request value runs the stack again at once.
#[tokio::test]
async fn reconciliation_request_runs_again_at_once() {
    let f = Fixture::new("request").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "v1");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    let first = last_update_name(&f.wait_stack("app", "Ready", ready).await);
    kubectl(&[
        "-n",
        f.ns(),
        "annotate",
        "stack",
        "app",
        "pulumi.com/reconciliation-request=now-1",
        "--overwrite",
    ]);
    let s = f
        .wait_stack("app", "a run for the request", |s| {
            ready(s)
                && s.status
                    .as_ref()
                    .and_then(|x| x.last_update.as_ref())
                    .and_then(|l| l.reconcile_request.clone())
                    .as_deref()
                    == Some("now-1")
        })
        .await;
    assert_ne!(last_update_name(&s), first);
    assert_eq!(
        s.status.unwrap().observed_reconcile_request.as_deref(),
        Some("now-1")
    );
}

/// e) Deleting a destroyOnFinalize Stack destroys its resources and removes the finalizer.
#[tokio::test]
async fn destroy_on_finalize_destroys_and_releases_the_stack() {
    let f = Fixture::new("destroy").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  destroyOnFinalize: true\n",
    ));
    let s = f.wait_stack("app", "Ready", ready).await;
    assert!(s
        .metadata
        .finalizers
        .unwrap_or_default()
        .contains(&"finalizer.stack.pulumi.com".to_string()));
    let state = f.sn.backend_dir.join(".pulumi/stacks/e2e/dev.json");
    let before = std::fs::read_to_string(&state).unwrap();
    assert!(before.contains("standin:index:Record"), "{before}");
    kubectl(&["-n", f.ns(), "delete", "stack", "app", "--wait=false"]);
    let stacks = f.stacks();
    wait_until(T, "the stack to be gone", || async {
        stacks.get_opt("app").await.unwrap().is_none()
    })
    .await;
    let after = std::fs::read_to_string(&state).unwrap();
    assert!(
        !after.contains("standin:index:Record"),
        "resources left after destroy:\n{after}"
    );
}

/// f) Deleting the runner pod mid-update leaves no lock; the Update fails with a reason and
/// the next attempt succeeds.
#[tokio::test]
async fn deleting_the_runner_pod_mid_update_leaves_no_lock() {
    let f = Fixture::new("podkill").await;
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(8))], "slow");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    let pod = f.running_runner_pod("app").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    kubectl(&[
        "-n",
        f.ns(),
        "delete",
        "pod",
        pod.metadata.name.as_deref().unwrap(),
        "--wait=false",
    ]);
    let s = f
        .wait_stack("app", "the interrupted update to be recorded", |s| {
            s.status
                .as_ref()
                .and_then(|x| x.last_update.as_ref())
                .and_then(|l| l.state.clone())
                .map(|x| x.as_str().to_string())
                .as_deref()
                == Some("failed")
        })
        .await;
    let last = s.status.unwrap().last_update.unwrap();
    let message = last.message.unwrap_or_default();
    assert!(!message.is_empty(), "the failure has a reason");
    let updates = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "update",
        last.name.as_deref().unwrap(),
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}",
    ]);
    assert!(
        !updates.is_empty(),
        "the Update's Failed condition has a reason"
    );
    assert_eq!(f.lock_files(), 0, "the stack was left locked");
    let s = f.wait_stack("app", "the retry to succeed", ready).await;
    assert_eq!(s.status.unwrap().outputs.unwrap()["value"], "rested");
}

/// g) Killing the operator pod mid-update: the new operator re-attaches; exactly one Job ran.
#[tokio::test]
async fn operator_restart_mid_update_reattaches() {
    let f = Fixture::new("opkill").await;
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(10))], "slow");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    f.running_runner_pod("app").await;
    kubectl(&[
        "-n",
        "pulumi-operator",
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=pulumi-operator",
        "--wait=false",
    ]);
    let s = f
        .wait_stack("app", "Ready after the operator restart", ready)
        .await;
    assert_eq!(f.stack_jobs("app").len(), 1, "exactly one Job ran");
    assert_eq!(s.status.unwrap().outputs.unwrap()["value"], "rested");
}
