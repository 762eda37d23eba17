//! Exactly-once operations on the local cluster (issue 10): an operator killed with SIGKILL,
//! Updates and Workspaces deleted mid-flight, operations that cannot start, a stale lock left by
//! a runner killed hard. Each converges without a person's help and never runs two operations
//! of one Stack at once.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use pulumi_operator_api::Stack;
use std::time::Duration;
use test_support::{
    kill_operator, kubectl, kubectl_result, last_update, output_value, sleeping_program,
    stack_ready, wait_until, StackFixture,
};

const PROGRAM: &str = r#"name: e2e
runtime: yaml
resources:
  rec:
    type: standin:index:Record
    properties:
      value: hello
outputs:
  value: ${rec.value}
"#;

fn stalled(s: &Stack) -> Option<(String, String)> {
    s.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Stalled" && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

/// The operator killed with SIGKILL while a retained workspace exists keeps it: after the
/// restart, no controller acts on a cache that is still empty (before, the StatefulSet and
/// its cache claim were deleted "per reclaim policy Delete" and re-created).
#[tokio::test]
async fn an_operator_kill_keeps_the_retained_workspace_and_its_cache() {
    let f = StackFixture::new("eo-retain").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "init");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  workspaceReclaimPolicy: Retain\n",
    ));
    f.wait_stack_for(Duration::from_secs(240), "app", "Ready", stack_ready)
        .await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let uids = || async {
        let sts = statefulsets.get_opt("app-workspace").await.ok().flatten();
        let claims = claims
            .list(&kube::api::ListParams::default().labels("auto.pulumi.com/workspace-name=app"))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        (
            sts.and_then(|s| s.metadata.uid),
            claims
                .into_iter()
                .filter_map(|c| c.metadata.uid)
                .collect::<Vec<_>>(),
        )
    };
    wait_until(
        Duration::from_secs(120),
        "the retained workspace and its cache claim",
        || async { matches!(uids().await, (Some(_), c) if !c.is_empty()) },
    )
    .await;
    let before = uids().await;
    for _ in 0..3 {
        kill_operator().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    // Give the restarted operator time to reconcile everything it watches.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        uids().await,
        before,
        "the retained StatefulSet and cache claim survive operator kills"
    );
    let events = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        !events.contains("deleted per reclaim policy"),
        "nothing was reclaimed: {events}"
    );
    assert!(stack_ready(&f.stack("app").await));
}

/// A ServiceAccount typo is named on the Stack at once (no Job is created), and the corrected
/// spec runs.
#[tokio::test]
async fn a_service_account_typo_is_named_and_the_fix_runs() {
    let f = StackFixture::new("eo-satypo").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "init");
    let yaml = f.stack_yaml("app", &format!("commit: {sha}"), "").replace(
        "serviceAccountName: pulumi",
        "serviceAccountName: pulumi-typo",
    );
    f.sn.ns.apply(&yaml);
    let s = f
        .wait_stack_for(
            Duration::from_secs(60),
            "app",
            "Stalled on the missing ServiceAccount",
            |s| stalled(s).is_some(),
        )
        .await;
    let (reason, message) = stalled(&s).unwrap();
    assert_eq!(reason, "ReferenceNotFound");
    assert!(
        message.contains("ServiceAccount \"pulumi-typo\" not found"),
        "{message}"
    );
    assert!(f.stack_jobs("app").is_empty(), "no operation started");
    let events = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=app",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(
        events.contains("ReferenceNotFound"),
        "an Event says so: {events}"
    );
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    let s = f
        .wait_stack_for(
            Duration::from_secs(120),
            "app",
            "Ready after the fix",
            stack_ready,
        )
        .await;
    assert_eq!(output_value(&s), "hello");
}

/// A `configRef` ConfigMap that does not exist yet: the Stack says which, and runs by itself
/// once it is created.
#[tokio::test]
async fn a_missing_config_map_created_later_converges() {
    let f = StackFixture::new("eo-cm").await;
    let program = "name: e2e\nruntime: yaml\nconfig:\n  greeting:\n    type: string\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: ${greeting}\noutputs:\n  value: ${rec.value}\n";
    let sha = f.repo.commit(&[("Pulumi.yaml", program)], "init");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  configRef:\n    greeting: {name: settings, key: greeting}\n",
    ));
    let s = f
        .wait_stack_for(
            Duration::from_secs(60),
            "app",
            "Stalled on the missing ConfigMap",
            |s| stalled(s).is_some(),
        )
        .await;
    let (reason, message) = stalled(&s).unwrap();
    assert_eq!(reason, "ReferenceNotFound");
    assert!(
        message.contains("ConfigMap \"settings\" not found"),
        "{message}"
    );
    f.sn.ns.apply("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {greeting: created-later}\n");
    let s = f
        .wait_stack_for(
            Duration::from_secs(150),
            "app",
            "Ready once the ConfigMap exists",
            stack_ready,
        )
        .await;
    assert_eq!(output_value(&s), "created-later");
}

/// A pod that cannot be created (a ResourceQuota allows no pods): the Update fails within the
/// documented bound with the reason Kubernetes gave, the Job never starts a pod later, and the
/// Stack retries by itself once the quota is gone.
#[tokio::test]
async fn a_pod_that_cannot_be_created_fails_with_the_reason_and_recovers() {
    let f = StackFixture::new("eo-quota").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "init");
    f.sn.ns.apply("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: no-pods}\nspec: {hard: {pods: \"0\"}}\n");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    let s = f
        .wait_stack_for(
            Duration::from_secs(240),
            "app",
            "the first attempt to fail",
            |s| {
                last_update(s)
                    .state
                    .map(|x| x.as_str().to_string())
                    .as_deref()
                    == Some("failed")
            },
        )
        .await;
    let message = last_update(&s).message.unwrap_or_default();
    assert!(
        message.contains("could not be created") && message.contains("quota"),
        "the reason names the quota: {message}"
    );
    kubectl(&["-n", f.ns(), "delete", "resourcequota", "no-pods"]);
    let s = f
        .wait_stack_for(
            Duration::from_secs(180),
            "app",
            "Ready after the quota is gone",
            stack_ready,
        )
        .await;
    assert_eq!(output_value(&s), "hello");
}

/// Deleting the Workspace while an operation runs: the operation finishes and is absorbed (the
/// Update no longer freezes in WorkspaceNotFound); the next operation re-creates the Workspace.
#[tokio::test]
async fn deleting_the_workspace_mid_operation_converges() {
    let f = StackFixture::new("eo-wsdel").await;
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(6))], "slow");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    f.running_runner_pod("app").await;
    kubectl(&["-n", f.ns(), "delete", "workspace", "app", "--wait=false"]);
    let s = f
        .wait_stack_for(
            Duration::from_secs(120),
            "app",
            "Ready after the Workspace was deleted",
            stack_ready,
        )
        .await;
    assert_eq!(output_value(&s), "rested");
    let sha2 = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "next");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha2}"), ""));
    let s = f
        .wait_stack_for(Duration::from_secs(120), "app", "the next commit", |s| {
            stack_ready(s)
                && last_update(s).last_successful_commit.as_deref() == Some(sha2.as_str())
        })
        .await;
    assert_eq!(output_value(&s), "hello");
    kubectl(&["-n", f.ns(), "get", "workspace", "app"]);
}

/// Updates deleted early: a 1-second TTL removes each Update only after the Stack absorbed it
/// (outputs arrive, no operation runs twice); `kubectl delete update` of a running operation
/// cancels it, and the Stack retries and converges.
#[tokio::test]
async fn updates_go_only_after_they_were_absorbed() {
    let f = StackFixture::new("eo-ttl").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "init");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  updateTemplate:\n    spec:\n      ttlAfterCompleted: 1s\n",
    ));
    let s = f
        .wait_stack_for(
            Duration::from_secs(120),
            "app",
            "Ready with outputs",
            stack_ready,
        )
        .await;
    assert_eq!(
        output_value(&s),
        "hello",
        "the result was absorbed before the Update went"
    );
    let first = last_update(&s).name.unwrap_or_default();
    wait_until(
        Duration::from_secs(60),
        "the absorbed Update to expire",
        || async {
            kubectl(&["-n", f.ns(), "get", "updates", "-o", "name"])
                .trim()
                .is_empty()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        kubectl(&["-n", f.ns(), "get", "updates", "-o", "name"])
            .trim()
            .is_empty(),
        "no Update was re-created after the first expired"
    );
    assert_eq!(
        last_update(&f.stack("app").await).name.unwrap_or_default(),
        first
    );

    // Cancel a running operation by deleting its Update.
    let slow = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(20))], "slow");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {slow}"),
        "  updateTemplate:\n    spec:\n      ttlAfterCompleted: 1s\n",
    ));
    let pod = f.running_runner_pod("app").await;
    let update = pod.metadata.labels.unwrap_or_default()["auto.pulumi.com/update-name"].clone();
    kubectl(&["-n", f.ns(), "delete", "update", &update, "--wait=false"]);
    let s = f
        .wait_stack_for(
            Duration::from_secs(180),
            "app",
            "Ready after the cancelled operation",
            |s| {
                stack_ready(s)
                    && last_update(s).last_successful_commit.as_deref() == Some(slow.as_str())
            },
        )
        .await;
    assert_eq!(output_value(&s), "rested");
    assert_eq!(f.lock_files(), 0, "no lock left");
}

/// The command lines of every process whose program is named `pulumi*`, for a failure
/// message.
fn pulumi_processes() -> Vec<String> {
    test_support::processes()
        .into_iter()
        .filter(|p| {
            p.argv
                .first()
                .and_then(|a| a.rsplit('/').next())
                .is_some_and(|name| name.starts_with("pulumi"))
        })
        .map(|p| p.argv.join(" "))
        .collect()
}

/// The Pulumi process killed with SIGKILL mid-update leaves the backend's lock behind; the
/// next operation of the same Stack finds the lock's holder gone, clears it with an Event, and
/// succeeds. A lock held by anyone else is never touched (unit-tested in runner/src/locks.rs).
#[tokio::test]
async fn a_lock_left_by_a_killed_pulumi_is_cleared_by_the_next_operation() {
    let f = StackFixture::new("eo-lock").await;
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(30))], "slow");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    let pod = f.running_runner_pod("app").await;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    wait_until(
        Duration::from_secs(60),
        "the stack to be locked",
        || async { f.lock_files() > 0 },
    )
    .await;
    // SIGKILL the Pulumi CLI of this operation (found by its backend, unique to this test's
    // namespace): it dies at once without releasing its lock, as on an OOM kill of the CLI.
    // The lock can be seen a moment before `pulumi up` is visible in /proc on a loaded
    // machine (CI runs this file's tests side by side), so look for it for a while.
    let backend = f.sn.backend_dir.to_string_lossy().to_string();
    let killed = test_support::kill_pulumi_up_soon(&backend).await;
    assert!(
        killed > 0,
        "no pulumi process of this test to kill (pod {pod_name}); pulumi processes: {:?}",
        pulumi_processes()
    );
    let s = f
        .wait_stack_for(
            Duration::from_secs(240),
            "app",
            "Ready after the stale lock was cleared",
            stack_ready,
        )
        .await;
    assert_eq!(output_value(&s), "rested");
    assert_eq!(f.lock_files(), 0, "no lock left");
    let reasons = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(
        reasons.contains("StaleLockCleared"),
        "an Event says a stale lock was cleared: {reasons}"
    );

    // A Pulumi killed while it saved the state (seen in CI) leaves the last whole checkpoint
    // with an emptied attributes file beside it, and the unfinished write: every operation then
    // failed with "failed to load checkpoint: EOF". The next operation removes both.
    let stacks = f.sn.backend_dir.join(".pulumi/stacks/e2e");
    let attrs = stacks.join("dev.json.attrs");
    let unfinished = stacks.join("dev.json.18ec4f8ba3587483.tmp");
    std::fs::write(&attrs, b"").expect("empty the checkpoint's attributes");
    std::fs::write(&unfinished, b"{\"version\": 3, \"checkpoint\"").expect("an unfinished write");
    // Older than a write in progress can be.
    let aged = std::process::Command::new("touch")
        .args(["-d", "1 minute ago"])
        .args([&attrs, &unfinished])
        .status()
        .expect("touch");
    assert!(aged.success());
    let next = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(1))], "after the kill");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {next}"), ""));
    let s = f
        .wait_stack_for(
            Duration::from_secs(240),
            "app",
            "Ready at the next commit after a checkpoint write was cut short",
            |s| {
                stack_ready(s)
                    && last_update(s).last_successful_commit.as_deref() == Some(next.as_str())
            },
        )
        .await;
    assert_eq!(output_value(&s), "rested");
    assert!(!unfinished.exists(), "the unfinished write is removed");
    let messages = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        messages.contains("unfinished checkpoint file dev.json.attrs"),
        "an Event names the files removed: {messages}"
    );
}

/// `kubectl delete job` of a running operation: the pod goes with its Job, the Update ends
/// Failed saying so (the operator asks the API server before concluding the Job is gone, not
/// only its cache), and the Stack runs the operation again to a success.
#[tokio::test]
async fn a_job_deleted_mid_operation_fails_its_update_and_the_stack_runs_again() {
    let f = StackFixture::new("eo-job").await;
    let pulumis = test_support::processes::ProcessObserver::start();
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(20))], "slow");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  retryMaxBackoffDurationSeconds: 5\n",
    ));
    let pod = f.running_runner_pod("app").await;
    let update = pod.metadata.labels.unwrap_or_default()["auto.pulumi.com/update-name"].clone();
    kubectl(&["-n", f.ns(), "delete", "job", &update, "--wait=false"]);
    let s = f
        .wait_stack_for(
            Duration::from_secs(240),
            "app",
            "Ready after the deleted Job's operation ran again",
            |s| stack_ready(s) && last_update(s).name.as_deref() != Some(update.as_str()),
        )
        .await;
    assert_eq!(output_value(&s), "rested");
    let message = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "update",
        &update,
        "-o",
        "jsonpath={.status.message}",
    ]);
    assert!(
        message.contains("Job was deleted"),
        "the deleted Job's Update says why it ended: {message:?}"
    );
    assert_eq!(f.lock_files(), 0, "no lock left");
    // The pod of the deleted Job ran on until its Pulumi stopped: the next operation waited.
    assert_eq!(
        pulumis.overlaps_in(&f.sn.backend_url),
        Vec::<String>::new(),
        "the next operation ran beside the deleted Job's Pulumi"
    );
}

/// A pod template that no node takes: the operation's pod is admitted past its gate and waits
/// for a node that never comes, so its operation never starts.
const NO_NODE: &str = "  workspaceTemplate:\n    spec:\n      podTemplate:\n        spec:\n          nodeSelector: {no-such-label: \"true\"}\n";

/// Whether every operation pod of the Stack `stack` is past its gate and waits for a node.
fn waiting_for_a_node(f: &StackFixture, stack: &str) -> bool {
    let selector = format!("pulumi.com/stack-name={stack},auto.pulumi.com/update-name");
    let (_, out, _) = f.sn.ns.kubectl_result(&[
        "get",
        "pods",
        "-l",
        &selector,
        "-o",
        "jsonpath={range .items[*]}{.spec.schedulingGates}|{.spec.nodeName}|{.status.conditions[?(@.type==\"PodScheduled\")].reason}{\"\\n\"}{end}",
    ]);
    let pods: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    !pods.is_empty() && pods.iter().all(|p| *p == "||Unschedulable")
}

/// Deleting a Stack whose operation never started (its pod, admitted, waits for a node) lets it
/// go at once: the pod, never bound to a node, is deleted on that condition, and the Update,
/// Job and pod go with the Stack. Then a namespace of such Stacks is deleted as fast. (Before,
/// each Stack waited for its operation to end: the pod's start bound, ten minutes.)
#[tokio::test]
async fn a_deleted_stack_whose_operation_never_started_goes_at_once() {
    let f = StackFixture::new("eo-unstarted").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "init");
    for name in ["app", "b1", "b2", "b3"] {
        f.sn.ns
            .apply(&f.stack_yaml(name, &format!("commit: {sha}"), NO_NODE));
    }
    for name in ["app", "b1", "b2", "b3"] {
        wait_until(
            Duration::from_secs(120),
            "the operation's pod to wait for a node",
            || async { waiting_for_a_node(&f, name) },
        )
        .await;
    }
    let started = std::time::Instant::now();
    f.sn.ns.kubectl(&["delete", "stack", "app", "--wait=false"]);
    wait_until(Duration::from_secs(30), "the Stack to be gone", || async {
        f.stacks().get_opt("app").await.ok().flatten().is_none()
    })
    .await;
    eprintln!("the Stack went {:?} after its deletion", started.elapsed());
    wait_until(
        Duration::from_secs(30),
        "its Update, Job and pods to be gone",
        || async {
            f.sn.ns
                .kubectl(&[
                    "get",
                    "updates,jobs,pods",
                    "-l",
                    "pulumi.com/stack-name=app",
                    "-o",
                    "name",
                ])
                .trim()
                .is_empty()
        },
    )
    .await;
    // The others are untouched: still waiting for a node.
    assert!(
        waiting_for_a_node(&f, "b1"),
        "another Stack's operation is left alone"
    );
    let started = std::time::Instant::now();
    kubectl(&["delete", "namespace", f.ns(), "--wait=false"]);
    wait_until(
        Duration::from_secs(60),
        "the namespace of pending Stacks to be gone",
        || async { !kubectl_result(&["get", "namespace", f.ns()]).0 },
    )
    .await;
    eprintln!(
        "the namespace of 3 pending Stacks went {:?} after its deletion",
        started.elapsed()
    );
}
