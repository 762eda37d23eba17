//! Real state in S3: a Stack whose `backend` is an `s3://` bucket of SeaweedFS (a real
//! S3-compatible server, built by tests/build-tools.sh and started on loopback by the test),
//! with the credentials from a Secret through `envRefs`, as PKO's documentation shows for S3.
//! Its lock lives in the bucket: a `pulumi up` killed mid-operation leaves it there and the next
//! operation of the same Stack clears it; the bucket unreachable for a while fails the Update
//! with a readable reason and the next attempt succeeds; deleting the Stack destroys what it
//! deployed.

use std::time::Duration;
use test_support::{
    kill_pulumi_up_soon, kubectl, last_update, output_value, stack_ready, wait_until, S3Server,
    StackFixture,
};

const T: Duration = Duration::from_secs(300);

/// A YAML program that sleeps in one resource (the test-only `standin` plugin: an operation
/// that holds its lock long enough to be killed), deploys a ConfigMap, and exports `value`.
fn program(value: &str, seconds: u32) -> String {
    format!(
        r#"name: s3state
runtime: yaml
resources:
  nap:
    type: standin:index:Sleep
    properties:
      seconds: {seconds}
  proof:
    type: kubernetes:core/v1:ConfigMap
    properties:
      metadata:
        name: s3-state-proof
      data:
        value: {value}
  rec:
    type: standin:index:Record
    properties:
      value: {value}
outputs:
  value: ${{rec.value}}
"#
    )
}

fn stack_yaml(f: &StackFixture, s3: &S3Server, sha: &str) -> String {
    format!(
        r#"apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: app
spec:
  stack: dev
  projectRepo: {url}
  commit: {sha}
  backend: "{backend}"
  serviceAccountName: pulumi
  destroyOnFinalize: true
  retryMaxBackoffDurationSeconds: 10
  config:
    kubernetes:namespace: {ns}
  envRefs:
    PULUMI_CONFIG_PASSPHRASE:
      type: Secret
      secret: {{name: passphrase, key: passphrase}}
    AWS_ACCESS_KEY_ID:
      type: Secret
      secret: {{name: s3-credentials, key: AWS_ACCESS_KEY_ID}}
    AWS_SECRET_ACCESS_KEY:
      type: Secret
      secret: {{name: s3-credentials, key: AWS_SECRET_ACCESS_KEY}}
"#,
        url = f.url(),
        backend = s3.backend_url(),
        ns = f.ns(),
    )
}

fn proof(f: &StackFixture) -> String {
    kubectl(&[
        "-n",
        f.ns(),
        "get",
        "configmaps",
        "--field-selector",
        "metadata.name=s3-state-proof",
        "-o",
        "jsonpath={.items[*].data.value}",
    ])
}

#[tokio::test]
async fn a_stack_keeps_its_state_and_lock_in_s3_through_a_kill_an_outage_and_a_destroy() {
    let f = StackFixture::new("s3").await;
    f.sn.grant_program_rights();
    let mut s3 = S3Server::start(std::env::temp_dir().join(format!("e2e-s3-{}", f.ns())));
    f.sn.ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: s3-credentials}}\nstringData: {{AWS_ACCESS_KEY_ID: {}, AWS_SECRET_ACCESS_KEY: {}}}\n",
        s3.access_key, s3.secret_key
    ));

    // An update whose CLI is killed while it holds the lock in the bucket.
    let v1 = f
        .repo
        .commit(&[("Pulumi.yaml", &program("first", 30))], "v1");
    f.sn.ns.apply(&stack_yaml(&f, &s3, &v1));
    f.running_runner_pod("app").await;
    wait_until(
        Duration::from_secs(120),
        "the lock in the bucket",
        || async { !s3.keys(".pulumi/locks/").is_empty() },
    )
    .await;
    // Not at the instant the lock's key appears: a CLI killed then (1 run in 4 here) leaves no
    // lock for the next operation to find. The operation holds the lock for 30 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let needle = format!("127.0.0.1:{}", s3.port());
    assert!(
        kill_pulumi_up_soon(&needle).await > 0,
        "no pulumi up of this Stack to kill"
    );
    let s = f
        .wait_stack_for(T, "app", "Ready after the stale lock was cleared", |s| {
            stack_ready(s) && last_update(s).last_successful_commit.as_deref() == Some(v1.as_str())
        })
        .await;
    assert_eq!(output_value(&s), "first");
    assert_eq!(proof(&f), "first");
    assert!(
        s3.keys(".pulumi/locks/").is_empty(),
        "a lock is left: {:?}",
        s3.keys(".pulumi/locks/")
    );
    let stacks = s3.keys(".pulumi/stacks/");
    assert!(
        stacks.iter().any(|k| k.contains("s3state/dev")),
        "no state in the bucket: {stacks:?}"
    );
    let reasons = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(reasons.contains("StaleLockCleared"), "{reasons}");

    // The bucket unreachable: the update fails saying so; once it is back, the retry succeeds.
    s3.stop();
    let v2 = f
        .repo
        .commit(&[("Pulumi.yaml", &program("second", 1))], "v2");
    f.sn.ns.apply(&stack_yaml(&f, &s3, &v2));
    let failed = f
        .wait_stack_for(T, "app", "the update to fail while S3 is down", |s| {
            last_update(s).state == Some(pulumi_operator_api::StackUpdateStateMessage::Failed)
        })
        .await;
    let message = last_update(&failed).message.unwrap_or_default();
    assert!(
        message.contains("connection refused") && message.contains(&needle),
        "{message}"
    );
    assert!(message.len() < 2000, "{message}");
    s3.resume();
    let s = f
        .wait_stack_for(T, "app", "Ready once S3 is back", |s| {
            stack_ready(s) && last_update(s).last_successful_commit.as_deref() == Some(v2.as_str())
        })
        .await;
    assert_eq!(output_value(&s), "second");
    assert_eq!(proof(&f), "second");

    // Deleting the Stack destroys what it deployed, through the state in the bucket.
    kubectl(&["-n", f.ns(), "delete", "stack", "app", "--wait=false"]);
    let api = f.stacks();
    wait_until(T, "the Stack destroyed and gone", || async {
        api.get_opt("app").await.ok().flatten().is_none()
    })
    .await;
    assert_eq!(proof(&f), "", "the ConfigMap survived the destroy");
}
