//! Programs as users write them, end to end from git: a TypeScript program (npm dependencies,
//! compiled by the CLI), a Python program (pip dependencies in a virtualenv) and a Go program
//! (modules from the Go proxy, compiled by the Go host) deploy a
//! Deployment and a Service with the real Pulumi Kubernetes provider, into a namespace held to
//! the `restricted` Pod Security Standard, with the Stack's ServiceAccount bound only to what
//! PKO's documentation binds (`system:auth-delegator`, and `cluster-admin` through a
//! RoleBinding in the Stack's namespace). A failing install ends the Update with the first
//! lines of the real error.
//!
//! The programs live in tests/programs; the language hosts, the provider and the CLI are built
//! by tests/build-tools.sh. Each Stack names a `dependency-cache` volume in its workspace
//! template, so its later operations link the installed dependencies back instead of
//! installing them again (the first operation of each test installs from the registries); a
//! TypeScript program committed without a lockfile is cached too, under its package.json.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::ListParams;
use kube::Api;
use pulumi_operator_api::{Stack, StackUpdateStateMessage};
use std::time::Duration;
use test_support::{
    kubectl, last_update, program_files, stack_ready, wait_for, wait_until, StackFixture,
    DEPENDENCY_CACHE_TEMPLATE,
};

/// A first operation installs its dependencies from the registries (npm: about a minute;
/// pip: about two; Go: downloads and compiles the SDKs, about six on two cores) before the
/// provider waits for the Deployment.
const FIRST: Duration = Duration::from_secs(900);
/// A Go program's first operation compiles the Pulumi and Kubernetes SDKs: 329 CPU-seconds
/// measured alone, which on a new machine's CI run shares two cores with the tools' and the
/// release build (it once took over 900 s there).
const FIRST_GO: Duration = Duration::from_secs(1800);
const LATER: Duration = Duration::from_secs(420);
const TOKEN: &str = "tok-5b1e0c9a-never-in-logs";

/// PKO's documented rights for the program, the dependency cache claim, and the Stack's
/// token Secret.
fn prepare_namespace(f: &StackFixture) {
    f.sn.grant_program_rights();
    f.sn.ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: app-secrets}}\nstringData: {{token: {TOKEN}}}\n"
    ));
}

fn program_stack(f: &StackFixture, name: &str, sha: &str) -> String {
    f.stack_yaml(
        name,
        &format!("commit: {sha}"),
        &format!(
            r#"  destroyOnFinalize: true
  config:
    kubernetes:namespace: {ns}
  secretsRef:
    token:
      type: Secret
      secret: {{name: app-secrets, key: token}}
{DEPENDENCY_CACHE_TEMPLATE}"#,
            ns = f.ns()
        ),
    )
}

fn failed(s: &Stack) -> bool {
    last_update(s).state == Some(StackUpdateStateMessage::Failed)
}

fn job_logs(f: &StackFixture, s: &Stack) -> String {
    let update = last_update(s).name.unwrap_or_default();
    kubectl(&["-n", f.ns(), "logs", &format!("job/{update}")])
}

fn outputs(s: &Stack) -> serde_json::Value {
    serde_json::to_value(s.status.as_ref().and_then(|st| st.outputs.clone())).unwrap()
}

/// The program's Deployment: its pods run on the test node with the expected message, and
/// the provider wrote it with server-side apply under its own field manager.
async fn assert_deployed(f: &StackFixture, deployment: &str, message: &str) {
    let client = f.sn.ns.client.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), f.ns());
    let d = deployments.get(deployment).await.unwrap();
    let status = d.status.clone().unwrap_or_default();
    assert_eq!(status.ready_replicas, Some(1), "{status:?}");
    assert_eq!(status.updated_replicas, Some(1), "{status:?}");
    let env = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| serde_json::to_string(&s.containers[0].env).unwrap())
        .unwrap_or_default();
    assert!(env.contains(message), "{env}");
    let managers: Vec<(String, String)> = d
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers
            .iter()
            .any(|(m, op)| m.starts_with("pulumi-kubernetes") && op == "Apply"),
        "not written by server-side apply under the provider's field manager: {managers:?}"
    );
    // Its pod runs on the test node with that message.
    let pods: Api<Pod> = Api::namespaced(client, f.ns());
    let running: Vec<Pod> = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .collect();
    assert!(
        running.iter().any(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("local-node")
                && serde_json::to_string(&p.spec.as_ref().unwrap().containers[0].env)
                    .unwrap()
                    .contains(message)
        }),
        "no running pod of {deployment} with {message:?} on local-node"
    );
}

/// What the runner says when a later operation links the installed dependencies back.
const RESTORED: &str = "dependencies restored from the cache";

/// Deploys the program, checks what it deployed and reported, rolls it with a new commit, and
/// destroys it by deleting the Stack.
async fn deploy_roll_destroy(prefix: &str, program: &str, install_log: &str, cached_log: &str) {
    let f = StackFixture::new(prefix).await;
    prepare_namespace(&f);
    let mut files = program_files(program);
    let sha = f.repo.commit_files(&files, "v1");
    f.sn.ns.apply(&program_stack(&f, "web", &sha));
    let first = if program == "go" { FIRST_GO } else { FIRST };
    let s = f
        .wait_stack_for(first, "web", "the first update to end", |s| {
            stack_ready(s) || failed(s)
        })
        .await;
    let logs = job_logs(&f, &s);
    assert!(stack_ready(&s), "{:?}\n{logs}", last_update(&s).message);
    // The install is visible to whoever reads the Job's log, and the secret is not.
    for expected in [
        install_log,
        "dependencies installed",
        "kubernetes:apps/v1:Deployment",
        "kubernetes:core/v1:Service",
    ] {
        assert!(
            logs.contains(expected),
            "{expected:?} not in the logs:\n{logs}"
        );
    }
    assert!(!logs.contains(TOKEN), "the secret reached the log");

    let out = outputs(&s);
    assert_eq!(out["greeting"], "hello", "{out}");
    assert_eq!(out["apiToken"], "[secret]", "{out}");
    let deployment = out["deploymentName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let service = out["serviceName"].as_str().unwrap_or_default().to_string();
    assert!(deployment.starts_with("web-"), "{out}");
    assert!(service.starts_with("web-"), "{out}");
    assert_deployed(&f, &deployment, "hello").await;
    let services: Api<Service> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    assert!(services.get_opt(&service).await.unwrap().is_some());

    // A new commit rolls the Deployment; the installed dependencies come from the cache.
    let first_update = last_update(&s).name.unwrap_or_default();
    for (path, content) in files.iter_mut() {
        if matches!(path.as_str(), "index.ts" | "__main__.py" | "main.go") {
            *content = content.replace("\"hello\"", "\"hello again\"");
        }
    }
    let (s2, logs2) = second_update_succeeds(&f, &files, "v2", &first_update).await;
    assert!(
        logs2.contains(cached_log),
        "the second operation did not use the cache ({cached_log:?} not in the log):\n{logs2}"
    );
    assert_eq!(outputs(&s2)["greeting"], "hello again");
    assert_deployed(&f, &deployment, "hello again").await;

    // destroyOnFinalize: deleting the Stack removes both objects, then the Stack.
    kubectl(&["-n", f.ns(), "delete", "stack", "web", "--wait=false"]);
    let stacks = f.stacks();
    wait_until(LATER, "the Stack to be destroyed and gone", || async {
        stacks.get_opt("web").await.ok().flatten().is_none()
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    assert!(deployments.get_opt(&deployment).await.unwrap().is_none());
    assert!(services.get_opt(&service).await.unwrap().is_none());
}

#[tokio::test]
async fn a_typescript_program_from_git_deploys_rolls_and_is_destroyed() {
    deploy_roll_destroy("ts", "typescript", "npm", RESTORED).await;
}

/// How long the Job of `update` ran, from its creation to its completion, in seconds (the
/// Stack reports the result a moment before its Job completes).
async fn job_seconds(f: &StackFixture, update: &str) -> f64 {
    let at = |v: &serde_json::Value| v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
    wait_for(Duration::from_secs(60), "the Job's completion", || async {
        let job = kubectl(&["-n", f.ns(), "get", "job", update, "-o", "json"]);
        let job: serde_json::Value = serde_json::from_str(&job).ok()?;
        let created = at(&job["metadata"]["creationTimestamp"])?;
        let completed = at(&job["status"]["completionTime"])?;
        Some((completed.as_millisecond() - created.as_millisecond()) as f64 / 1000.0)
    })
    .await
}

/// Checks that the first operation's `logs` show an install without a lockfile kept in the
/// cache, and returns the short package.json digest the runner named the entry by.
fn assert_kept_without_lockfile(logs: &str) -> String {
    let at = logs
        .find("package.json digest ")
        .unwrap_or_else(|| panic!("no package.json digest in the logs:\n{logs}"));
    let digest: String = logs[at + "package.json digest ".len()..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    assert_eq!(digest.len(), 12, "{digest:?}\n{logs}");
    for expected in [
        format!(
            "no cached dependencies for package.json digest {digest}, no lockfile yet: installing"
        ),
        "dependencies installed in".to_string(),
        "node_modules kept in the dependency cache".to_string(),
    ] {
        assert!(
            logs.contains(&expected),
            "{expected:?} not in the logs:\n{logs}"
        );
    }
    digest
}

/// Without a lockfile, the first operation installs from package.json's ranges and keeps
/// node_modules (with the lock npm wrote) under package.json's digest; the next operation of
/// the same package.json, a day or less later, links it back and installs nothing. Before
/// such programs were cached, both operations installed ("installed dependencies are not
/// cached: the project has no lockfile"), and neither log says "no cached dependencies" or
/// "restored from the cache".
/// Commits `files` as `message`, points the Stack `web` at it and waits for the update after
/// `first_update` to succeed; returns the Stack and its Job's logs.
async fn second_update_succeeds(
    f: &StackFixture,
    files: &[(String, String)],
    message: &str,
    first_update: &str,
) -> (Stack, String) {
    let sha2 = f.repo.commit_files(files, message);
    f.sn.ns.apply(&program_stack(f, "web", &sha2));
    let s2 = f
        .wait_stack_for(LATER, "web", "the second update to end", |s| {
            last_update(s).name.as_deref() != Some(first_update) && (stack_ready(s) || failed(s))
        })
        .await;
    let logs2 = job_logs(f, &s2);
    assert!(stack_ready(&s2), "{:?}\n{logs2}", last_update(&s2).message);
    (s2, logs2)
}

#[tokio::test]
async fn a_typescript_program_without_a_lockfile_gets_its_dependencies_from_the_cache() {
    let f = StackFixture::new("tsnolock").await;
    prepare_namespace(&f);
    let mut files = program_files("typescript");
    files.retain(|(p, _)| p != "package-lock.json");
    assert!(files.iter().any(|(p, _)| p == "package.json"), "{files:?}");
    let sha = f.repo.commit_files(&files, "v1, no lockfile");
    f.sn.ns.apply(&program_stack(&f, "web", &sha));
    let s = f
        .wait_stack_for(FIRST, "web", "the first update to end", |s| {
            stack_ready(s) || failed(s)
        })
        .await;
    let logs = job_logs(&f, &s);
    assert!(stack_ready(&s), "{:?}\n{logs}", last_update(&s).message);
    let digest = assert_kept_without_lockfile(&logs);
    let first_update = last_update(&s).name.unwrap_or_default();
    let first_job = job_seconds(&f, &first_update).await;

    // A new commit of the same package.json: its dependencies come from the cache.
    for (path, content) in files.iter_mut() {
        if path == "index.ts" {
            *content = content.replace("\"hello\"", "\"hello again\"");
        }
    }
    let (s2, logs2) = second_update_succeeds(&f, &files, "v2, no lockfile", &first_update).await;
    let restored = format!(
        "{RESTORED} (node_modules of package.json digest {digest}, no lockfile): nothing to install"
    );
    assert!(
        logs2.contains(&restored),
        "the second operation did not use the cache ({restored:?} not in the log):\n{logs2}"
    );
    for unexpected in [
        "dependencies installed",
        "installed dependencies are not cached",
    ] {
        assert!(
            !logs2.contains(unexpected),
            "{unexpected:?} in the log:\n{logs2}"
        );
    }
    let out = outputs(&s2);
    assert_eq!(out["greeting"], "hello again", "{out}");
    let deployment = out["deploymentName"].as_str().unwrap_or_default();
    assert_deployed(&f, deployment, "hello again").await;
    let second_update = last_update(&s2).name.unwrap_or_default();
    let second_job = job_seconds(&f, &second_update).await;
    let installed = logs
        .lines()
        .find(|l| l.contains("dependencies installed in"));
    println!(
        "Jobs without a lockfile: {first_job:.1}s installing ({first_update}; {}), \
         {second_job:.1}s from the cache ({second_update})",
        installed.unwrap_or_default().trim()
    );
}

#[tokio::test]
async fn a_python_program_from_git_deploys_rolls_and_is_destroyed() {
    deploy_roll_destroy("py", "python", "pip", RESTORED).await;
}

#[tokio::test]
async fn a_go_program_from_git_deploys_rolls_and_is_destroyed() {
    // Go keeps no installed tree: the module and build caches live in the dependency cache,
    // so the second operation neither downloads nor compiles the SDKs again.
    deploy_roll_destroy(
        "go",
        "go",
        "go: downloading",
        "go programs keep their dependencies in the download caches",
    )
    .await;
}

/// A dependency that does not exist: the Update fails in the install step, and its message
/// carries the package manager's own first lines, not a wall of output.
#[tokio::test]
async fn a_failing_install_ends_the_update_with_the_real_error() {
    let f = StackFixture::new("badinstall").await;
    prepare_namespace(&f);
    let mut files = program_files("typescript");
    files.retain(|(p, _)| p != "package-lock.json");
    for (path, content) in files.iter_mut() {
        if path == "package.json" {
            *content = content.replace(
                "\"dependencies\": {",
                "\"dependencies\": {\n    \"@pulumi/no-such-package-e2e\": \"1.0.0\",",
            );
        }
    }
    let sha = f.repo.commit_files(&files, "broken dependency");
    f.sn.ns.apply(&program_stack(&f, "web", &sha));
    let s = f
        .wait_stack_for(LATER, "web", "the update to fail", failed)
        .await;
    let update = last_update(&s);
    let message = update.message.clone().unwrap_or_default();
    assert!(
        message.contains("no-such-package-e2e") && message.contains("404"),
        "{message}"
    );
    assert!(
        message.len() < 1200,
        "{} characters: {message}",
        message.len()
    );
    let reason = s
        .status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.reason.clone())
        .unwrap_or_default();
    assert!(!reason.is_empty(), "{s:?}");
}
