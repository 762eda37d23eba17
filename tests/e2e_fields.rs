//! The remaining Stack fields, each shown by its effect on the local cluster: prerequisites
//! (and re-running a stale one), the Update history limit, destroy without the source,
//! preview, targets, the per-operation deadline, useLocalStackOnly, a raw Update against a
//! user's Workspace, and $PULUMI_ENV written by a user init container.

use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use pulumi_operator_api::Stack;
use std::time::Duration;
use test_support::{kubectl, kubectl_result, wait_for, wait_until, StackFixture, TEST_PASSPHRASE};

const T: Duration = Duration::from_secs(120);

fn program(resources: &[&str]) -> String {
    let mut p = String::from("name: e2e\nruntime: yaml\nresources:\n");
    for r in resources {
        p.push_str(&format!(
            "  {r}:\n    type: standin:index:Record\n    properties:\n      value: {r}\n"
        ));
    }
    p
}

fn state(f: &StackFixture) -> String {
    std::fs::read_to_string(f.sn.backend_dir.join(".pulumi/stacks/e2e/dev.json"))
        .unwrap_or_default()
}

use test_support::{last_update as last, stack_ready as ready};

fn failed(s: &Stack) -> bool {
    last(s).state.map(|x| x.as_str().to_string()).as_deref() == Some("failed")
}

fn update_condition(f: &StackFixture, update: &str, kind: &str) -> String {
    kubectl(&[
        "-n",
        f.ns(),
        "get",
        "update",
        update,
        "-o",
        &format!("jsonpath={{.status.conditions[?(@.type==\"{kind}\")].reason}}"),
    ])
}

#[tokio::test]
async fn prerequisites_run_first_and_stale_ones_run_again() {
    let f = StackFixture::new("prereq").await;
    let sha = f.repo.commit(
        &[
            (
                "net/Pulumi.yaml",
                &program(&["net"]).replace("name: e2e", "name: net"),
            ),
            ("app/Pulumi.yaml", &program(&["app"])),
        ],
        "v1",
    );
    f.sn.ns.apply(
        &f.stack_yaml("network", &format!("commit: {sha}\n  repoDir: net"), "")
            .replace("stack: dev", "stack: net"),
    );
    let network = f
        .wait_stack("network", "the prerequisite Ready", ready)
        .await;
    let first_network_update = last(&network).name.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}\n  repoDir: app"),
        "  prerequisites:\n  - name: network\n    requirement:\n      succeededWithinDuration: 2s\n",
    ));
    // The prerequisite is out of date: it is asked to run again, then the dependent runs.
    let network = f
        .wait_stack("network", "the stale prerequisite to run again", |s| {
            ready(s) && last(s).name.as_deref() != Some(first_network_update.as_str())
        })
        .await;
    assert_eq!(
        network
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .get("pulumi.com/reconciliation-request")
            .map(String::as_str),
        Some(format!("after-{first_network_update}").as_str())
    );
    let app = f.wait_stack("app", "the dependent Ready", ready).await;
    let app_ran = last(&app).last_resync_time.unwrap().0;
    let network_ran = last(&network).last_resync_time.unwrap().0;
    assert!(
        app_ran >= network_ran,
        "the dependent ran before its prerequisite"
    );
}

#[tokio::test]
async fn only_the_last_updates_are_kept() {
    let f = StackFixture::new("history").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    f.wait_stack("app", "Ready", ready).await;
    for i in 1..=6 {
        kubectl(&[
            "-n",
            f.ns(),
            "annotate",
            "stack",
            "app",
            &format!("pulumi.com/reconciliation-request=run-{i}"),
            "--overwrite",
        ]);
        let want = format!("run-{i}");
        f.wait_stack("app", "the requested run", |s| {
            ready(s) && last(s).reconcile_request.as_deref() == Some(want.as_str())
        })
        .await;
    }
    let updates: Api<pulumi_operator_api::Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    wait_until(
        Duration::from_secs(30),
        "at most 5 Updates kept",
        || async {
            updates
                .list(&Default::default())
                .await
                .map(|l| l.items.len() <= 5)
                .unwrap_or(false)
        },
    )
    .await;
    let jobs = kubectl(&["-n", f.ns(), "get", "jobs", "-o", "name"]);
    assert!(jobs.lines().count() <= 5, "{jobs}");
}

/// Removes the Stack's repository, deletes the Stack, and waits for its destroy to empty the
/// state and release it.
async fn delete_without_the_source(f: &StackFixture) {
    std::fs::remove_dir_all(&f.repo.bare).unwrap();
    kubectl(&["-n", f.ns(), "delete", "stack", "app", "--wait=false"]);
    let stacks = f.stacks();
    wait_until(T, "the stack to be destroyed and gone", || async {
        stacks.get_opt("app").await.unwrap().is_none()
    })
    .await;
    assert!(!state(f).contains("standin:index:Record"), "{}", state(f));
}

#[tokio::test]
async fn destroy_works_after_the_source_is_gone() {
    let f = StackFixture::new("nosource").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  destroyOnFinalize: true\n",
    ));
    let s = f.wait_stack("app", "Ready", ready).await;
    assert_eq!(s.status.unwrap().project_info.unwrap().name, "e2e");
    assert!(state(&f).contains("standin:index:Record"));
    delete_without_the_source(&f).await;
}

/// A branch-tracking `destroyOnFinalize` Stack whose every update failed, but not before
/// deploying a resource, is destroyed once deleted although its git server is gone: the
/// project of a failed update is remembered as well (issue 30: such a Stack used to stall on
/// `SourceUnavailable` and hold its namespace in `Terminating`).
#[tokio::test]
async fn a_stack_that_only_failed_is_destroyed_after_its_source_is_gone() {
    let mut f = StackFixture::new("failnosource").await;
    let failing = format!(
        "{}  broken:\n    type: standin:index:Fail\n    properties:\n      message: fails on purpose\n    options:\n      dependsOn:\n        - ${{a}}\n",
        program(&["a"])
    );
    f.repo.commit(&[("Pulumi.yaml", &failing)], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        "branch: main",
        "  destroyOnFinalize: true\n  retryMaxBackoffDurationSeconds: 1\n",
    ));
    let s = f
        .wait_stack("app", "the first update to fail", |s| {
            last(s).state.map(|x| x.as_str().to_string()).as_deref() == Some("failed")
                && s.status
                    .as_ref()
                    .is_some_and(|st| st.current_update.is_none())
        })
        .await;
    assert_eq!(s.status.unwrap().project_info.unwrap().name, "e2e");
    assert!(
        state(&f).contains("standin:index:Record"),
        "the failed update deployed `a`: {}",
        state(&f)
    );
    // The git server goes away with the repository.
    let empty = f.repo.bare.parent().unwrap().join("nothing-here");
    std::fs::create_dir_all(&empty).unwrap();
    f.server = test_support::GitServer::start(&empty);
    delete_without_the_source(&f).await;
}

/// The operations recorded in the stack's history (one file per up, refresh or destroy).
fn history_entries(f: &StackFixture) -> usize {
    std::fs::read_dir(f.sn.backend_dir.join(".pulumi/history/e2e/dev"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".history.json"))
                .count()
        })
        .unwrap_or(0)
}

/// Applies a `destroyOnFinalize` Stack whose program fails before it creates anything, and
/// waits until its retries are spent (`Stalled`, so no operation runs any more), the last
/// update having counted an empty state.
async fn deploy_nothing(f: &StackFixture, sha: &str) {
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  destroyOnFinalize: true\n  retryMaxBackoffDurationSeconds: 1\n",
    ));
    f.wait_stack_for(
        Duration::from_secs(300),
        "app",
        "the updates to fail with an empty state",
        |s| {
            failed(s)
                && s.status.as_ref().is_some_and(|st| {
                    st.current_update.is_none()
                        && st.state_resources.as_ref().map(|r| r.count) == Some(0)
                        && st
                            .conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "Stalled" && c.status == "True")
                })
        },
    )
    .await;
}

/// A `destroyOnFinalize` Stack whose every update failed before creating anything has nothing
/// to destroy (issue 30 §6): deleted, it goes without a destroy (Event `NothingToDestroy`, no
/// operation in the stack's history), and deleting its namespace is not held up by it.
#[tokio::test]
async fn a_stack_that_deployed_nothing_goes_without_a_destroy() {
    let f = StackFixture::new("nothingdeployed").await;
    let failing = "name: e2e\nruntime: yaml\nresources:\n  broken:\n    type: standin:index:Fail\n    properties:\n      message: fails on purpose\n";
    let sha = f.repo.commit(&[("Pulumi.yaml", failing)], "v1");
    deploy_nothing(&f, &sha).await;
    assert!(
        !state(&f).contains("standin:index:Fail::broken"),
        "{}",
        state(&f)
    );
    // No operation may be running when the history is counted.
    let before = history_entries(&f);
    kubectl(&["-n", f.ns(), "delete", "stack", "app", "--wait=false"]);
    let stacks = f.stacks();
    wait_until(
        Duration::from_secs(30),
        "the Stack to go without a destroy",
        || async { stacks.get_opt("app").await.unwrap().is_none() },
    )
    .await;
    assert_eq!(
        history_entries(&f),
        before,
        "an operation ran for the deletion"
    );
    let events = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=app,reason=NothingToDestroy",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(events.contains("holds no resources"), "{events}");

    // Again, then the namespace deleted under it: nothing holds it Terminating.
    deploy_nothing(&f, &sha).await;
    kubectl(&["delete", "namespace", f.ns(), "--wait=false"]);
    wait_until(Duration::from_secs(60), "the namespace to go", || async {
        let (found, _, _) = kubectl_result(&["get", "namespace", f.ns()]);
        !found
    })
    .await;
}

#[tokio::test]
async fn preview_changes_nothing_and_targets_limit_the_update() {
    let f = StackFixture::new("preview").await;
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &program(&["a", "b"]))], "v1");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), "  preview: true\n"));
    let s = f.wait_stack("app", "the preview Ready", ready).await;
    assert_eq!(
        last(&s)
            .update_type
            .map(|t| t.as_str().to_string())
            .as_deref(),
        Some("preview")
    );
    assert!(
        !state(&f).contains("standin:index:Record"),
        "a preview created resources"
    );
    let logs = kubectl(&[
        "-n",
        f.ns(),
        "logs",
        &format!("job/{}", last(&s).name.unwrap()),
    ]);
    assert!(logs.contains("preview"), "{logs}");

    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  targets:\n  - \"urn:pulumi:dev::e2e::standin:index:Record::a\"\n",
    ));
    let s = f
        .wait_stack("app", "the targeted update Ready", |s| {
            ready(s)
                && last(s)
                    .update_type
                    .map(|t| t.as_str().to_string())
                    .as_deref()
                    == Some("up")
        })
        .await;
    let st = state(&f);
    assert!(st.contains("standin:index:Record::a"), "{st}");
    assert!(
        !st.contains("standin:index:Record::b"),
        "a resource outside the targets was created: {st}"
    );
    // The Job's shape: PKO's grace period and a default ephemeral-storage request.
    let jobs: Api<Job> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let job = serde_json::to_value(jobs.get(&last(&s).name.unwrap()).await.unwrap()).unwrap();
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 600);
    assert!(pod["containers"][0]["resources"]["requests"]["ephemeral-storage"].is_string());
}

#[tokio::test]
async fn an_operation_past_its_deadline_fails_with_deadline_exceeded() {
    let f = StackFixture::new("deadline").await;
    let slow = "name: e2e\nruntime: yaml\nresources:\n  nap:\n    type: standin:index:Sleep\n    properties:\n      seconds: 15\n";
    let sha = f.repo.commit(&[("Pulumi.yaml", slow)], "slow");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  operationTimeoutSeconds: 4\n",
    ));
    let s = f
        .wait_stack("app", "the deadline to stop the update", failed)
        .await;
    let l = last(&s);
    assert!(
        l.message.clone().unwrap_or_default().contains("deadline"),
        "{:?}",
        l.message
    );
    assert_eq!(
        update_condition(&f, l.name.as_deref().unwrap(), "Failed"),
        "DeadlineExceeded"
    );
}

#[tokio::test]
async fn use_local_stack_only_refuses_to_create_the_stack() {
    let f = StackFixture::new("localonly").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  useLocalStackOnly: true\n",
    ));
    let s = f.wait_stack("app", "the update to fail", failed).await;
    assert_eq!(
        update_condition(&f, last(&s).name.as_deref().unwrap(), "Failed"),
        "StackNotFound"
    );
    // Retrying cannot create the stack: stalled at once with PKO's WorkspaceFailed.
    f.wait_stack("app", "Stalled WorkspaceFailed", |s| {
        s.status
            .as_ref()
            .and_then(|x| x.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "Stalled"
                        && c.reason == "WorkspaceFailed"
                        && c.message.starts_with("StackNotFound: ")
                })
            })
    })
    .await;
    assert!(!state(&f).contains("standin:index:Record"));
}

#[tokio::test]
async fn a_raw_update_runs_against_a_users_workspace() {
    let f = StackFixture::new("rawupdate").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    f.sn.ns.apply(&format!(
        r#"apiVersion: auto.pulumi.com/v1alpha1
kind: Workspace
metadata: {{name: mine}}
spec:
  serviceAccountName: pulumi
  git: {{url: "{url}", ref: {sha}}}
  env:
  - {{name: PULUMI_BACKEND_URL, value: "{backend}"}}
  - name: PULUMI_CONFIG_PASSPHRASE
    valueFrom: {{secretKeyRef: {{name: passphrase, key: passphrase}}}}
  stacks: [{{name: dev, create: true}}]
---
apiVersion: auto.pulumi.com/v1alpha1
kind: Update
metadata: {{name: by-hand}}
spec: {{workspaceName: mine, stackName: dev, type: up}}
"#,
        url = f.url(),
        backend = f.sn.backend_url
    ));
    let updates: Api<pulumi_operator_api::Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    wait_for(T, "the Update to complete", || async {
        let u = updates.get("by-hand").await.ok()?;
        let c = u.status?.conditions?;
        c.iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
            .then_some(())
    })
    .await;
    assert_eq!(update_condition(&f, "by-hand", "Failed"), "UpdateSucceeded");
    assert!(state(&f).contains("standin:index:Record"));
    assert!(kubectl(&["-n", f.ns(), "logs", "job/by-hand"]).contains("created"));
}

#[tokio::test]
async fn pulumi_env_written_by_an_init_container_reaches_pulumi() {
    let f = StackFixture::new("pulumienv").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    // The passphrase comes only through $PULUMI_ENV: without it Pulumi cannot run.
    let yaml = format!(
        r#"apiVersion: pulumi.com/v1
kind: Stack
metadata: {{name: app}}
spec:
  stack: dev
  projectRepo: {url}
  commit: {sha}
  backend: {backend}
  serviceAccountName: pulumi
  workspaceTemplate:
    spec:
      podTemplate:
        spec:
          initContainers:
          - name: write-env
            image: busybox
            command: [sh, -c, 'echo "PULUMI_CONFIG_PASSPHRASE={TEST_PASSPHRASE}" >> "$PULUMI_ENV"']
            volumeMounts: [{{name: share, mountPath: /share}}]
            # The namespace enforces the restricted Pod Security Standard.
            securityContext:
              allowPrivilegeEscalation: false
              capabilities: {{drop: [ALL]}}
"#,
        url = f.url(),
        backend = f.sn.backend_url
    );
    f.sn.ns.apply(&yaml);
    f.wait_stack("app", "Ready with the passphrase from $PULUMI_ENV", ready)
        .await;
}

#[tokio::test]
async fn update_template_ttl_removes_finished_updates_and_expect_no_changes_guards() {
    let f = StackFixture::new("updtemplate").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", "name: e2e\nruntime: yaml\nconfig:\n  v:\n    type: string\n    default: one\nresources:\n  a:\n    type: standin:index:Record\n    properties:\n      value: ${v}\n")], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  updateTemplate:\n    spec:\n      ttlAfterCompleted: 3s\n",
    ));
    let s = f.wait_stack("app", "Ready", ready).await;
    let first = last(&s).name.unwrap();
    let updates: Api<pulumi_operator_api::Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    wait_until(
        Duration::from_secs(60),
        "the finished Update to expire",
        || async { updates.get_opt(&first).await.ok().flatten().is_none() },
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    wait_until(Duration::from_secs(60), "its Job to go with it", || async {
        jobs.get_opt(&first).await.ok().flatten().is_none()
    })
    .await;

    // expectNoChanges from the template: a change now fails the update.
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  config:\n    v: two\n  updateTemplate:\n    spec:\n      expectNoChanges: true\n",
    ));
    let s = f
        .wait_stack("app", "the unexpected change to fail the update", failed)
        .await;
    assert_eq!(
        update_condition(&f, last(&s).name.as_deref().unwrap(), "Failed"),
        "ExpectedNoChanges"
    );
}

#[tokio::test]
async fn target_dependents_widen_the_targets() {
    let f = StackFixture::new("targetdeps").await;
    let program = "name: e2e\nruntime: yaml\nresources:\n  a:\n    type: standin:index:Record\n    properties: {value: a}\n  b:\n    type: standin:index:Record\n    properties: {value: b}\n    options:\n      dependsOn: [\"${a}\"]\n  c:\n    type: standin:index:Record\n    properties: {value: c}\n";
    let sha = f.repo.commit(&[("Pulumi.yaml", program)], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  targets: [\"urn:pulumi:dev::e2e::standin:index:Record::a\"]\n  targetDependents: true\n",
    ));
    f.wait_stack("app", "Ready", ready).await;
    let st = state(&f);
    assert!(
        st.contains("standin:index:Record::a") && st.contains("standin:index:Record::b"),
        "{st}"
    );
    assert!(
        !st.contains("standin:index:Record::c"),
        "an unrelated resource was created: {st}"
    );
}

#[tokio::test]
async fn retry_on_update_conflict_waits_for_the_lock() {
    let f = StackFixture::new("conflict").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    // Another update (outside Kubernetes) holds the stack's lock.
    let locks = f.sn.backend_dir.join(".pulumi/locks/organization/e2e/dev");
    std::fs::create_dir_all(&locks).unwrap();
    let lock = locks.join("5b2f2f9e-0000-4000-8000-000000000001.json");
    std::fs::write(&lock, r#"{"pid":1,"username":"someone","hostname":"elsewhere","timestamp":"2026-01-01T00:00:00Z"}"#).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for dir in [
        f.sn.backend_dir.join(".pulumi"),
        f.sn.backend_dir.join(".pulumi/locks"),
        f.sn.backend_dir.join(".pulumi/locks/organization"),
        f.sn.backend_dir.join(".pulumi/locks/organization/e2e"),
        locks.clone(),
    ] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  retryOnUpdateConflict: true\n",
    ));
    // The runner meets the lock and waits to retry; then the lock goes away.
    wait_until(T, "the runner to wait for the lock", || async {
        let (_, logs, _) = f.sn.ns.kubectl_result(&[
            "logs",
            "-l",
            "pulumi.com/stack-name=app",
            "-c",
            "pulumi",
            "--tail=-1",
        ]);
        logs.contains("retryOnUpdateConflict")
    })
    .await;
    std::fs::remove_file(&lock).unwrap();
    let s = f
        .wait_stack("app", "Ready after the lock went away", ready)
        .await;
    let logs = kubectl(&[
        "-n",
        f.ns(),
        "logs",
        &format!("job/{}", last(&s).name.unwrap()),
    ]);
    assert!(
        logs.contains("another update holds the stack; retry 1 of 5"),
        "no sign of the wait in:\n{logs}"
    );
}

#[tokio::test]
async fn secrets_provider_and_environments_reach_pulumi() {
    let f = StackFixture::new("provider").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    // A provider the CLI does not know fails when the stack is created (without a network round trip,
    // which a KMS provider would make), which shows that the field reaches Pulumi when the
    // stack is created.
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  secretsProvider: \"e2e-bogus://alias/e2e-key\"\n",
    ));
    let s = f
        .wait_stack("app", "stack creation to fail on the provider", failed)
        .await;
    let message = last(&s).message.unwrap_or_default();
    // `stack select --create` says "no driver registered for \"e2e-bogus\"" (`stack init`
    // said "unknown secrets provider type 'e2e-bogus'").
    assert!(
        message.contains("e2e-bogus") && message.contains("secrets"),
        "{message}"
    );

    // ESC environments need Pulumi Cloud, which the real CLI cannot reach here: this Stack
    // runs the real CLI behind the Pulumi Cloud stand-in, which keeps the Cloud in a directory.
    let cloud = f.sn.backend_dir.join("cloud");
    std::fs::create_dir_all(&cloud).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cloud, std::fs::Permissions::from_mode(0o777)).unwrap();
    f.sn.ns.apply(&format!(
        r#"apiVersion: pulumi.com/v1
kind: Stack
metadata: {{name: esc}}
spec:
  stack: organization/e2e/dev
  projectRepo: {url}
  commit: {sha}
  backend: https://api.pulumi.com
  serviceAccountName: pulumi
  environment: [team/shared-settings]
  workspaceTemplate:
    spec:
      image: {image}
  envRefs:
    PULUMI_ACCESS_TOKEN: {{type: Literal, literal: {{value: e2e-token}}}}
    PULUMI_STANDIN_CLOUD_DIR: {{type: Literal, literal: {{value: "{cloud}"}}}}
"#,
        url = f.url(),
        cloud = cloud.display(),
        image = test_support::CLOUD_STANDIN_IMAGE
    ));
    let s = f
        .wait_stack("esc", "Ready with an ESC environment", ready)
        .await;
    let logs = kubectl(&[
        "-n",
        f.ns(),
        "logs",
        &format!("job/{}", last(&s).name.unwrap()),
    ]);
    assert!(
        logs.contains("config env add --yes --stack ") && logs.contains(" -- team/shared-settings"),
        "{logs}"
    );
    let _ = TEST_PASSPHRASE;
}

#[tokio::test]
async fn expect_no_refresh_changes_runs_a_guarded_refresh_first() {
    let f = StackFixture::new("refresh").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  refresh: true\n  expectNoRefreshChanges: true\n",
    ));
    let s = f.wait_stack("app", "Ready", ready).await;
    let logs = kubectl(&[
        "-n",
        f.ns(),
        "logs",
        &format!("job/{}", last(&s).name.unwrap()),
    ]);
    let refresh = logs
        .lines()
        .find(|l| l.contains("running pulumi") && l.contains(" refresh "))
        .unwrap_or_default();
    assert!(
        refresh.contains("--expect-no-changes"),
        "no guarded refresh in:\n{logs}"
    );
}

#[tokio::test]
async fn run_program_reaches_the_destroy() {
    let f = StackFixture::new("runprogram").await;
    // The delete of `nap` takes a few seconds, so the destroy can be watched while it runs.
    let slow_delete = "name: e2e\nruntime: yaml\nresources:\n  nap:\n    type: standin:index:Sleep\n    properties:\n      seconds: 0\n      deleteSeconds: 6\n";
    let sha = f.repo.commit(&[("Pulumi.yaml", slow_delete)], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  destroyOnFinalize: true\n  runProgram: true\n",
    ));
    f.wait_stack("app", "Ready", ready).await;
    kubectl(&["-n", f.ns(), "delete", "stack", "app", "--wait=false"]);
    let updates: Api<pulumi_operator_api::Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let destroy = wait_for(T, "the destroy Update", || async {
        let list = updates.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|u| u.spec.update_type.as_ref().map(|t| t.as_str()) == Some("destroy"))
    })
    .await;
    assert_eq!(destroy.spec.run_program, Some(true));
    let name = kube::ResourceExt::name_any(&destroy);
    let logs = wait_for(T, "the destroy's Pulumi command in its logs", || async {
        let (ok, out, _) =
            test_support::kubectl_result(&["-n", f.ns(), "logs", &format!("job/{name}")]);
        (ok && out.contains("running pulumi") && out.contains(" destroy ")).then_some(out)
    })
    .await;
    let line = logs
        .lines()
        .find(|l| l.contains("running pulumi") && l.contains(" destroy "))
        .unwrap_or_default();
    assert!(line.contains("--run-program"), "{line}");
}

#[tokio::test]
async fn a_failing_destroy_keeps_the_stack_and_says_how_to_let_it_go() {
    let f = StackFixture::new("faildestroy").await;
    let program = "name: e2e\nruntime: yaml\nresources:\n  stuck:\n    type: standin:index:Fail\n    properties:\n      phase: delete\n      message: this resource refuses to be deleted\n";
    let sha = f.repo.commit(&[("Pulumi.yaml", program)], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  destroyOnFinalize: true\n  retryMaxBackoffDurationSeconds: 1\n",
    ));
    f.wait_stack("app", "Ready", ready).await;
    kubectl(&["-n", f.ns(), "delete", "stack", "app", "--wait=false"]);
    let s = f
        .wait_stack("app", "the destroy to stall", |s| {
            s.status
                .as_ref()
                .and_then(|x| x.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c.type_ == "Stalled" && c.status == "True" && c.reason == "UpdateFailed"
                    })
                })
        })
        .await;
    assert!(s
        .metadata
        .finalizers
        .clone()
        .unwrap_or_default()
        .contains(&"finalizer.stack.pulumi.com".to_string()));
    let stalled = s
        .status
        .clone()
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert!(
        stalled.message.contains("kubectl patch stack app"),
        "{}",
        stalled.message
    );
    assert!(
        state(&f).contains("standin:index:Fail"),
        "the resource must still exist"
    );
    // The documented way out.
    kubectl(&[
        "-n",
        f.ns(),
        "patch",
        "stack",
        "app",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":[]}}"#,
    ]);
    let stacks = f.stacks();
    wait_until(T, "the stack to be gone", || async {
        stacks.get_opt("app").await.unwrap().is_none()
    })
    .await;
}

/// `maintenanceWindow` (extension): an `up` due outside the window waits, `Reconciling` with
/// reason `OutsideMaintenanceWindow` and the opening time, with no Update created; it starts
/// when the window opens.
#[tokio::test]
async fn an_up_outside_the_maintenance_window_waits_for_it() {
    let f = StackFixture::new("window").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program(&["a"]))], "v1");
    // A window opening every minute for 10 s: apply between seconds 15 and 40 of a minute, so
    // that it is closed and opens 20 to 45 s later.
    let second = || jiff::Timestamp::now().as_second().rem_euclid(60);
    while !(15..=40).contains(&second()) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let applied = jiff::Timestamp::now();
    let opens = applied.as_second() - applied.as_second().rem_euclid(60) + 60;
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  maintenanceWindow:\n    schedules: [\"* * * * *\"]\n    duration: 10s\n",
    ));
    let waiting = f
        .wait_stack_for(T, "app", "Reconciling OutsideMaintenanceWindow", |s| {
            s.status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Reconciling" && c.reason == "OutsideMaintenanceWindow")
                })
        })
        .await;
    let message = waiting
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Reconciling")
        .unwrap()
        .message;
    assert!(
        message.contains("up is due") && message.contains("maintenance window, which opens at"),
        "{message}"
    );
    if jiff::Timestamp::now().as_second() < opens {
        let updates = kubectl(&[
            "-n",
            f.ns(),
            "get",
            "updates",
            "-l",
            "pulumi.com/stack-name=app",
            "-o",
            "name",
        ]);
        assert!(
            updates.trim().is_empty(),
            "nothing starts before the window: {updates}"
        );
    }
    let s = f
        .wait_stack_for(T, "app", "Ready once the window opened", ready)
        .await;
    let update = last(&s).name.unwrap_or_default();
    let created = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "update",
        &update,
        "-o",
        "jsonpath={.metadata.creationTimestamp}",
    ]);
    let created: jiff::Timestamp = created.trim().parse().expect("a creation time");
    assert!(
        created.as_second() >= opens,
        "the Update was created at {created}, before the window opened at {opens}"
    );
}

/// A YAML program with the real kubernetes provider: a ConfigMap in `namespace`.
fn configmap_program(namespace: &str) -> String {
    format!(
        "name: e2e\nruntime: yaml\nresources:\n  proof:\n    type: kubernetes:core/v1:ConfigMap\n    properties:\n      metadata:\n        name: nsgone-proof\n        namespace: {namespace}\n      data:\n        value: deployed\n"
    )
}

/// Lets the ServiceAccount `pulumi` of `from` manage objects in `target`.
fn grant_rights_in(target: &test_support::TestNamespace, from: &str) {
    target.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: pulumi-from-{from}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: ServiceAccount, name: pulumi, namespace: {from}}}]\n"
    ));
}

fn proof_in(target: &test_support::TestNamespace) -> String {
    target.kubectl(&[
        "get",
        "configmaps",
        "--field-selector",
        "metadata.name=nsgone-proof",
        "-o",
        "jsonpath={.items[*].data.value}",
    ])
}

/// Issue 44 §6: a namespace deleted with a deployed `destroyOnFinalize` Stack in it. Kubernetes
/// admits no pod in a terminating namespace, so the destroy cannot run there: the Stack holds
/// the namespace and says so with the way forward, and following it destroys the resources
/// (the same Stack applied, suspended, in another namespace, then deleted there) and lets the
/// namespace go, with no lock left.
#[tokio::test]
async fn a_namespace_deleted_with_a_deployed_stack_says_how_to_destroy_it() {
    let f = StackFixture::new("nsgone").await;
    let target = test_support::TestNamespace::new("nsgone-target").await;
    let elsewhere = test_support::StackNamespace::new("nsgone-elsewhere").await;
    grant_rights_in(&target, f.ns());
    grant_rights_in(&target, &elsewhere.ns.name);
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &configmap_program(&target.name))], "v1");
    // One backend for both namespaces: the stack's state lives outside the deleted namespace.
    let stack = f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  destroyOnFinalize: true\n",
    );
    f.sn.ns.apply(&stack);
    f.wait_stack_for(Duration::from_secs(300), "app", "Ready", ready)
        .await;
    assert_eq!(proof_in(&target), "deployed");

    kubectl(&["delete", "namespace", f.ns(), "--wait=false"]);
    let held = f
        .wait_stack(
            "app",
            "the Stack to say the destroy cannot run in its namespace",
            |s| {
                s.status.as_ref().is_some_and(|st| {
                    st.conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "Stalled" && c.reason == "NamespaceTerminating")
                })
            },
        )
        .await;
    let message = held
        .status
        .unwrap()
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Stalled")
        .map(|c| c.message)
        .unwrap_or_default();
    for needle in [
        "cannot run here",
        "spec.suspend: true",
        "finalizers",
        "ServiceAccount pulumi",
    ] {
        assert!(message.contains(needle), "{needle:?} not in: {message}");
    }
    assert_eq!(proof_in(&target), "deployed", "nothing destroyed it yet");

    // The way forward, as the message gives it: the Stack suspended in another namespace,
    // then deleted there.
    let suspended = stack.replace("spec:\n", "spec:\n  suspend: true\n");
    elsewhere.ns.apply(&suspended);
    let there: kube::Api<Stack> =
        kube::Api::namespaced(elsewhere.ns.client.clone(), &elsewhere.ns.name);
    wait_until(T, "the suspended Stack to hold its finalizer", || async {
        there
            .get_opt("app")
            .await
            .ok()
            .flatten()
            .is_some_and(|s| !s.metadata.finalizers.unwrap_or_default().is_empty())
    })
    .await;
    elsewhere
        .ns
        .kubectl(&["delete", "stack", "app", "--wait=false"]);
    wait_until(Duration::from_secs(300), "the destroy there", || async {
        there.get_opt("app").await.ok().flatten().is_none()
    })
    .await;
    assert_eq!(proof_in(&target), "", "the ConfigMap survived the destroy");
    assert_eq!(f.lock_files(), 0, "a lock is left in the backend");

    f.sn.ns.kubectl(&[
        "patch",
        "stack",
        "app",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    wait_until(Duration::from_secs(90), "the namespace to go", || async {
        let (found, _, _) = kubectl_result(&["get", "namespace", f.ns()]);
        !found
    })
    .await;
}
