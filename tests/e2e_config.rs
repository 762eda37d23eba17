//! Configuration and environment from every kind of reference a Stack has — `config`,
//! `configRef`, `secrets`, `secretsRef`, `envRefs`, the deprecated `envs`, `envSecrets` and
//! `accessTokenSecret` — and the scheduling fields `continueResyncOnCommitMatch` and
//! `retryMaxBackoffDurationSeconds`, each shown by its effect.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use std::time::Duration;
use test_support::{kubectl, StackFixture, TEST_PASSPHRASE};

const PROGRAM: &str = r#"name: e2e
runtime: yaml
config:
  plain: {type: string}
  fromMap: {type: string}
  literalSecret: {type: string, secret: true}
  refSecret: {type: string, secret: true}
resources:
  rec:
    type: standin:index:Record
    properties:
      plain: ${plain}
      fromMap: ${fromMap}
outputs:
  plain: ${plain}
  fromMap: ${fromMap}
  literalSecret: ${literalSecret}
  refSecret: ${refSecret}
"#;

use test_support::{last_update as last, stack_ready as ready};

#[tokio::test]
async fn config_and_environment_from_every_kind_of_reference() {
    let f = StackFixture::new("config").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "v1");
    f.sn.ns.apply(&format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: settings}}
data: {{region: eu-north}}
---
apiVersion: v1
kind: Secret
metadata: {{name: creds}}
stringData: {{token: ref-secret-value-41}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: env-cm}}
data: {{PULUMI_CONFIG_PASSPHRASE: "{TEST_PASSPHRASE}"}}
---
apiVersion: pulumi.com/v1
kind: Stack
metadata: {{name: app}}
spec:
  stack: dev
  projectRepo: {url}
  commit: {sha}
  backend: {backend}
  serviceAccountName: pulumi
  envs: [env-cm]
  config:
    plain: hello
  configRef:
    fromMap: {{name: settings, key: region}}
  secrets:
    literalSecret: literal-secret-value-17
  secretsRef:
    refSecret: {{type: Secret, secret: {{name: creds, key: token}}}}
"#,
        url = f.url(),
        backend = f.sn.backend_url
    ));
    let s = f
        .wait_stack("app", "Ready with config from every reference", ready)
        .await;
    let outputs = s.status.clone().unwrap().outputs.unwrap();
    assert_eq!(outputs["plain"], "hello");
    assert_eq!(outputs["fromMap"], "eu-north");
    assert_eq!(outputs["literalSecret"], "[secret]");
    assert_eq!(outputs["refSecret"], "[secret]");
    let secrets: Api<Secret> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let out = secrets
        .get(&format!("{}-stack-outputs", last(&s).name.unwrap()))
        .await
        .unwrap();
    let data = out.data.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&data["refSecret"].0),
        "\"ref-secret-value-41\""
    );
    assert_eq!(
        String::from_utf8_lossy(&data["literalSecret"].0),
        "\"literal-secret-value-17\""
    );
    let logs = kubectl(&[
        "-n",
        f.ns(),
        "logs",
        &format!("job/{}", last(&s).name.unwrap()),
    ]);
    assert!(
        !logs.contains("ref-secret-value-41") && !logs.contains("literal-secret-value-17"),
        "{logs}"
    );
    // Secret values are never in the Job spec: only references (the plan is a Secret).
    let job = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "job",
        &last(&s).name.unwrap(),
        "-o",
        "json",
    ]);
    assert!(!job.contains("ref-secret-value-41") && !job.contains("literal-secret-value-17"));
}

#[tokio::test]
async fn env_secrets_and_the_access_token_secret_reach_pulumi() {
    let f = StackFixture::new("envsecret").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", "name: e2e\nruntime: yaml\nresources:\n  a:\n    type: standin:index:Record\n    properties: {value: x}\n")], "v1");
    let cloud = f.sn.backend_dir.join("cloud");
    std::fs::create_dir_all(&cloud).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cloud, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Pulumi Cloud cannot be reached from here: this Stack runs the real CLI behind the Cloud
    // stand-in (tests/pulumi-cloud-shim). It refuses to work without PULUMI_ACCESS_TOKEN,
    // which comes only from `accessTokenSecret`; the stand-in's directory comes from a Secret
    // named in `envSecrets`.
    f.sn.ns.apply(&format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: pulumi-api-secret}}
stringData: {{accessToken: pul-e2e-token-0042}}
---
apiVersion: v1
kind: Secret
metadata: {{name: env-sec}}
stringData: {{PULUMI_STANDIN_CLOUD_DIR: "{cloud}"}}
---
apiVersion: pulumi.com/v1
kind: Stack
metadata: {{name: app}}
spec:
  stack: organization/e2e/dev
  projectRepo: {url}
  commit: {sha}
  backend: https://api.pulumi.com
  serviceAccountName: pulumi
  accessTokenSecret: pulumi-api-secret
  envSecrets: [env-sec]
  workspaceTemplate:
    spec:
      image: {image}
"#,
        url = f.url(),
        cloud = cloud.display(),
        image = test_support::CLOUD_STANDIN_IMAGE
    ));
    let s = f
        .wait_stack("app", "Ready on the simulated Pulumi Cloud", ready)
        .await;
    assert!(
        last(&s)
            .permalink
            .unwrap_or_default()
            .starts_with("https://app.pulumi.com/"),
        "{:?}",
        last(&s).permalink
    );
    let job = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "job",
        &last(&s).name.unwrap(),
        "-o",
        "json",
    ]);
    assert!(!job.contains("pul-e2e-token-0042"));
}

#[tokio::test]
async fn continuous_resync_runs_again_without_a_new_commit() {
    let f = StackFixture::new("resync").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", "name: e2e\nruntime: yaml\nresources:\n  a:\n    type: standin:index:Record\n    properties: {value: x}\n")], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  continueResyncOnCommitMatch: true\n  resyncFrequencySeconds: 3\n",
    ));
    let first = last(&f.wait_stack("app", "Ready", ready).await)
        .name
        .unwrap();
    let s = f
        .wait_stack("app", "a resync with the same commit", |s| {
            ready(s) && last(s).name.as_deref() != Some(first.as_str())
        })
        .await;
    assert_eq!(
        last(&s).last_successful_commit.as_deref(),
        Some(sha.as_str())
    );
}

#[tokio::test]
async fn retry_max_backoff_caps_the_wait_between_retries() {
    let f = StackFixture::new("backoffcap").await;
    f.repo.commit(
        &[(
            "Pulumi.yaml",
            "name: e2e\nruntime: yaml\nresources:\n  broken:\n    type: standin:index:Fail\n",
        )],
        "broken",
    );
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        "branch: main",
        "  retryMaxBackoffDurationSeconds: 2\n",
    ));
    // Without the cap the second attempt would wait 10 s after the first failed, and the third
    // 30 s. The waits are measured, not the attempts: on a busy machine an attempt's Job alone
    // can take longer than that.
    f.wait_stack_for(Duration::from_secs(300), "app", "three failures", |s| {
        last(s).failures.unwrap_or(0) >= 3
    })
    .await;
    let updates: Api<pulumi_operator_api::Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let mut attempts: Vec<(jiff::Timestamp, Option<jiff::Timestamp>)> = updates
        .list(&kube::api::ListParams::default().labels("pulumi.com/stack-name=app"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|u| {
            let created = u.metadata.creation_timestamp.as_ref()?.0;
            Some((created, u.status.and_then(|s| s.end_time).map(|t| t.0)))
        })
        .collect();
    attempts.sort_by_key(|(created, _)| *created);
    assert!(attempts.len() >= 3, "three attempts: {attempts:?}");
    for pair in attempts.windows(2).take(2) {
        let ended = pair[0]
            .1
            .unwrap_or_else(|| panic!("an attempt without an end: {attempts:?}"));
        let wait = pair[1].0.duration_since(ended).as_secs_f64();
        assert!(
            wait < 8.0,
            "retries were not capped at 2 s: {wait:.1} s between attempts ({attempts:?})"
        );
    }
}
