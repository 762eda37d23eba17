//! Flux sources and Program objects end to end: a GitRepository (test-only CRD, its
//! status.artifact written by the test playing source-controller, the artifact served on
//! loopback) and a Program drive Stacks; a new artifact or a changed Program runs them again;
//! a bad digest fails clearly; a Flux kind that is not installed stalls with a clear reason.

use pulumi_operator_api::Stack;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;
use test_support::{kubectl, repo_root, wait_for, FileServer, StackNamespace};

const T: Duration = Duration::from_secs(120);

fn program(greeting: &str) -> String {
    format!(
        "name: fluxed\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: {greeting}\noutputs:\n  value: ${{rec.value}}\n"
    )
}

/// Writes `app/Pulumi.yaml` into a tar.gz named `name` in `dir`; returns `sha256:<hex>`.
fn artifact(dir: &Path, name: &str, content: &str) -> String {
    let src = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(src.join("app")).unwrap();
    std::fs::write(src.join("app/Pulumi.yaml"), content).unwrap();
    let out = std::process::Command::new("tar")
        .args([
            "czf",
            dir.join(name).to_str().unwrap(),
            "-C",
            src.to_str().unwrap(),
            "app",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(dir.join(name)).unwrap();
    let hex: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

fn publish(ns: &str, url: &str, revision: &str, digest: &str) {
    let patch = serde_json::json!({"status": {"artifact": {
        "path": "gitrepository/x.tar.gz", "url": url, "revision": revision, "digest": digest,
        "lastUpdateTime": "2026-01-01T00:00:00Z"
    }}});
    kubectl(&[
        "-n",
        ns,
        "patch",
        "gitrepository",
        "repo",
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
}

async fn wait_stack(sn: &StackNamespace, what: &str, check: impl Fn(&Stack) -> bool) -> Stack {
    let stacks: kube::Api<Stack> = kube::Api::namespaced(sn.ns.client.clone(), &sn.ns.name);
    wait_for(T, what, || async {
        stacks.get("app").await.ok().filter(|s| check(s))
    })
    .await
}

fn last_commit(s: &Stack) -> Option<String> {
    s.status
        .as_ref()?
        .last_update
        .as_ref()?
        .last_successful_commit
        .clone()
}

fn value(s: &Stack) -> Option<String> {
    s.status
        .as_ref()?
        .outputs
        .as_ref()?
        .get("value")?
        .as_str()
        .map(str::to_string)
}

fn stack_common(sn: &StackNamespace) -> String {
    format!(
        "  stack: dev\n  backend: {}\n  serviceAccountName: pulumi\n  envRefs:\n    PULUMI_CONFIG_PASSPHRASE: {{type: Secret, secret: {{name: passphrase, key: passphrase}}}}\n",
        sn.backend_url
    )
}

#[tokio::test]
async fn flux_artifacts_drive_the_stack() {
    kubectl(&[
        "apply",
        "--server-side",
        "-f",
        repo_root()
            .join("tests/fixtures/flux-source-crds.yaml")
            .to_str()
            .unwrap(),
    ]);
    kubectl(&[
        "wait",
        "--for=condition=established",
        "crd/gitrepositories.source.toolkit.fluxcd.io",
        "--timeout=60s",
    ]);
    let sn = StackNamespace::new("flux").await;
    let ns = sn.ns.name.clone();
    let dir = std::env::temp_dir().join(format!("artifacts-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let server = FileServer::start(dir.clone());
    let d1 = artifact(&dir, "a1.tar.gz", &program("from-artifact-one"));
    sn.ns.apply("apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata: {name: repo}\nspec: {url: https://example.invalid/repo, interval: 1m}\n");
    publish(
        &ns,
        &format!("{}/a1.tar.gz", server.url),
        "main@sha1:1111111111111111111111111111111111111111",
        &d1,
    );
    sn.ns.apply(&format!(
        "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {{name: app}}\nspec:\n{}  fluxSource:\n    sourceRef: {{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: repo}}\n    dir: app\n",
        stack_common(&sn)
    ));
    let s = wait_stack(&sn, "the first artifact deployed", |s| {
        value(s).as_deref() == Some("from-artifact-one")
    })
    .await;
    assert_eq!(
        last_commit(&s).as_deref(),
        Some("main@sha1:1111111111111111111111111111111111111111")
    );

    // A new artifact: the stack runs again at once (event driven, no polling).
    let d2 = artifact(&dir, "a2.tar.gz", &program("from-artifact-two"));
    publish(
        &ns,
        &format!("{}/a2.tar.gz", server.url),
        "main@sha1:2222222222222222222222222222222222222222",
        &d2,
    );
    wait_stack(&sn, "the second artifact deployed", |s| {
        value(s).as_deref() == Some("from-artifact-two")
    })
    .await;

    // A digest that does not match the download fails clearly.
    artifact(&dir, "a3.tar.gz", &program("never"));
    let wrong = format!("sha256:{}", "0".repeat(64));
    publish(
        &ns,
        &format!("{}/a3.tar.gz", server.url),
        "main@sha1:3333333333333333333333333333333333333333",
        &wrong,
    );
    let s = wait_stack(&sn, "the bad digest to fail", |s| {
        s.status
            .as_ref()
            .and_then(|x| x.last_update.as_ref())
            .and_then(|l| l.last_attempted_commit.clone())
            .as_deref()
            == Some("main@sha1:3333333333333333333333333333333333333333")
            && s.status
                .as_ref()
                .and_then(|x| x.last_update.as_ref())
                .and_then(|l| l.state.clone())
                .map(|x| x.as_str().to_string())
                .as_deref()
                == Some("failed")
    })
    .await;
    let message = s
        .status
        .unwrap()
        .last_update
        .unwrap()
        .message
        .unwrap_or_default();
    assert!(message.contains("digest mismatch"), "{message}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn missing_flux_kind_stalls_with_a_clear_reason() {
    let sn = StackNamespace::new("fluxkind").await;
    sn.ns.apply(&format!(
        "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {{name: app}}\nspec:\n{}  fluxSource:\n    sourceRef: {{apiVersion: source.toolkit.fluxcd.io/v1, kind: OCIRepository, name: oci}}\n",
        stack_common(&sn)
    ));
    let s = wait_stack(&sn, "a Stalled condition", |s| {
        s.status
            .as_ref()
            .and_then(|x| x.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Stalled" && c.status == "True"))
    })
    .await;
    let stalled = s
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert_eq!(stalled.reason, "SourceUnavailable");
    assert!(
        stalled.message.contains("OCIRepository") && stalled.message.contains("not installed"),
        "{}",
        stalled.message
    );
}

#[tokio::test]
async fn a_program_change_runs_its_stack_again() {
    let sn = StackNamespace::new("program").await;
    sn.ns.apply(
        "apiVersion: pulumi.com/v1\nkind: Program\nmetadata: {name: prog}\nprogram:\n  resources:\n    rec:\n      type: standin:index:Record\n      properties: {value: first}\n  outputs:\n    value: ${rec.value}\n",
    );
    sn.ns.apply(&format!("apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {{name: app}}\nspec:\n{}  programRef: {{name: prog}}\n", stack_common(&sn)));
    let s = wait_stack(&sn, "the Program deployed", |s| {
        value(s).as_deref() == Some("first")
    })
    .await;
    let first = last_commit(&s).unwrap();
    assert!(
        first.starts_with("sha256:"),
        "the revision of a Program is its digest: {first}"
    );
    kubectl(&[
        "-n",
        &sn.ns.name,
        "patch",
        "program",
        "prog",
        "--type=merge",
        "-p",
        r#"{"program":{"resources":{"rec":{"properties":{"value":"second"}}}}}"#,
    ]);
    let s = wait_stack(&sn, "the changed Program deployed", |s| {
        value(s).as_deref() == Some("second")
    })
    .await;
    assert_ne!(last_commit(&s).unwrap(), first);
}
