//! The outputs Secret against the local test cluster (needs KUBECONFIG: see test-support).

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use pulumi_operator_api::plan::{FailureReason, Operation, RunPlan, StackPlan};
use pulumi_runner::outputs::{write_secret, StackOutputs, SECRETS_ANNOTATION};
use std::collections::BTreeMap;

fn plan(ns: &str, uid: &str) -> RunPlan {
    RunPlan {
        update_name: "outputs-up".into(),
        namespace: ns.into(),
        update_uid: uid.into(),
        operation: Operation::Up,
        source: None,
        stack: StackPlan {
            name: "dev".into(),
            create: true,
            ..Default::default()
        },
        options: Default::default(),
        outputs_secret: "outputs-up-stack-outputs".into(),
        outputs_labels: BTreeMap::from([("pulumi.com/stack-name".into(), "outputs".into())]),
        outputs_key: None,
        apply_plan: None,
        pulumi_log_level: None,
        lock_holder: None,
        secret_env: Vec::new(),
        secret_env_dirs: Vec::new(),
        dependency_cache: None,
        conflict_retry_delay_ms: None,
        policy_packs: Vec::new(),
        heartbeat: None,
    }
}

#[tokio::test]
async fn outputs_secret_written_on_cluster() {
    // The Update kind must exist (this test may run before any other installs the operator).
    test_support::install_operator().await;
    let ns = test_support::TestNamespace::new("runner").await;
    ns.apply(
        "apiVersion: auto.pulumi.com/v1alpha1\nkind: Update\nmetadata: {name: outputs-up}\nspec: {workspaceName: x, stackName: dev, type: up}\n",
    );
    let uid = ns.kubectl(&[
        "get",
        "update",
        "outputs-up",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let uid = uid.trim().to_string();
    assert!(!uid.is_empty());
    let plan = plan(&ns.name, &uid);

    let masked = br#"{"url": "http://x", "db pass": "[secret]", "conn": {"host": "h", "token": "[secret]"}}"#;
    let revealed =
        br#"{"url": "http://x", "db pass": "hunter2", "conn": {"host": "h", "token": "t0k"}}"#;
    let outputs = StackOutputs::parse(masked, revealed).unwrap();
    write_secret(ns.client.clone(), &plan, &outputs)
        .await
        .unwrap();

    let api: Api<Secret> = Api::namespaced(ns.client.clone(), &ns.name);
    let s = api.get("outputs-up-stack-outputs").await.unwrap();
    let data = s.data.clone().unwrap();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(keys, ["conn", "db_pass", "url"]);
    assert_eq!(data["db_pass"].0, br#""hunter2""#);
    assert_eq!(data["conn"].0, br#"{"host":"h","token":"t0k"}"#);
    assert_eq!(data["url"].0, br#""http://x""#);
    let annotations = s.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[SECRETS_ANNOTATION], r#"["conn","db_pass"]"#);
    let labels = s.metadata.labels.clone().unwrap();
    assert_eq!(labels["auto.pulumi.com/component"], "update");
    assert_eq!(labels["auto.pulumi.com/update-name"], "outputs-up");
    assert_eq!(labels["pulumi.com/stack-name"], "outputs");
    let owners = s.metadata.owner_references.clone().unwrap();
    assert_eq!(owners.len(), 1);
    let o = &owners[0];
    assert_eq!(o.api_version, "auto.pulumi.com/v1alpha1");
    assert_eq!(o.kind, "Update");
    assert_eq!(o.name, "outputs-up");
    assert_eq!(o.uid, uid);
    assert_eq!(o.controller, Some(false));
    assert_eq!(o.block_owner_deletion, Some(false));
    assert_eq!(s.immutable, Some(true));

    // Written again (a re-run): replaced.
    let outputs =
        StackOutputs::parse(br#"{"url": "http://y"}"#, br#"{"url": "http://y"}"#).unwrap();
    write_secret(ns.client.clone(), &plan, &outputs)
        .await
        .unwrap();
    let s = api.get("outputs-up-stack-outputs").await.unwrap();
    let data = s.data.unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["url"]);
    assert_eq!(data["url"].0, br#""http://y""#);
    assert_eq!(s.metadata.annotations.unwrap()[SECRETS_ANNOTATION], "[]");
}

#[tokio::test]
async fn outputs_secret_forbidden_names_the_missing_permission() {
    let ns = test_support::TestNamespace::new("runner-rbac").await;
    // A ServiceAccount without any rights, and a client that uses its token.
    ns.apply("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: no-rights}\n");
    // A short-lived token from the TokenRequest API, as pods get them (no token Secrets since
    // Kubernetes 1.24).
    let token = ns
        .kubectl(&["create", "token", "no-rights"])
        .trim()
        .to_string();
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let client = kube::Client::try_from(config).unwrap();
    let plan = plan(&ns.name, "00000000-0000-0000-0000-000000000000");
    let outputs = StackOutputs::parse(br#"{"a": 1}"#, br#"{"a": 1}"#).unwrap();
    let err = write_secret(client, &plan, &outputs).await.unwrap_err();
    assert_eq!(err.reason, FailureReason::PermissionDenied);
    let want = format!(
        "create secrets in namespace {} for serviceaccount {}/no-rights",
        ns.name, ns.name
    );
    assert!(err.message.contains(&want), "{}", err.message);
}
