//! The Helm chart with the real `helm` (built by tests/build-tools.sh) on the local cluster:
//! `helm lint`, `helm template | kubectl apply --dry-run=server`, and (ignored, run at the end
//! of tests/run.sh because it stops the kustomize-installed operator while it runs) `helm
//! install` → the operator Ready → a Stack deploys → `helm upgrade` to changed values → a new
//! commit deploys → `helm uninstall` leaves nothing running.

use std::time::Duration;
use test_support::helm::{chart, helm_ok, KustomizeOperatorAside};
use test_support::{
    kubectl, kubectl_result, kubectl_stdin, output_value, stack_ready, wait_until, StackFixture,
};

const RELEASE: &str = "helm-po";
const NAMESPACE: &str = "pulumi-operator-helm";
/// `<release>-<chart>`, the chart's full name for this release.
const FULLNAME: &str = "helm-po-pulumi-operator";

#[test]
fn the_chart_lints_and_renders_what_the_api_server_accepts() {
    let lint = helm_ok(&["lint", "--strict", &chart()]);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    // Defaults, and every optional part switched on.
    for extra in [
        vec![],
        vec![
            "--set",
            "controller.watchNamespaces={a,b}",
            "--set",
            "controller.deniedPodFields={hostNetwork,hostPID}",
            "--set",
            "rbac.extraRules[0].apiGroups[0]=example.com",
            "--set",
            "rbac.extraRules[0].resources[0]=things",
            "--set",
            "rbac.extraRules[0].verbs[0]=get",
            "--set",
            "extraEnv[0].name=EXTRA",
            "--set-string",
            "extraEnv[0].value=1",
            "--set",
            "podLabels.team=infra",
            "--set",
            "stackIdentityGuard.enabled=true",
            "--set",
            "stackIdentityGuard.serviceAccounts={pulumi,deployer}",
        ],
    ] {
        let chart = chart();
        let mut args = vec![
            "template",
            RELEASE,
            chart.as_str(),
            "--namespace",
            NAMESPACE,
        ];
        args.extend(extra.iter().copied());
        let rendered = helm_ok(&args);
        assert!(
            rendered.contains(&format!("name: {FULLNAME}\n")),
            "{rendered}"
        );
        // The release namespace need not exist for a server-side dry run of cluster objects;
        // namespaced ones are checked in the default namespace's stead.
        let rendered = rendered.replace(&format!("namespace: {NAMESPACE}"), "namespace: default");
        let (ok, out, err) = kubectl_stdin(
            &["apply", "--dry-run=server", "--server-side", "-f", "-"],
            &rendered,
        );
        assert!(
            ok,
            "the API server refuses the rendered chart:\n{out}\n{err}"
        );
        if extra.is_empty() {
            continue;
        }
        for expected in [
            "value: \"a,b\"",
            "value: \"hostNetwork,hostPID\"",
            "example.com",
            "name: EXTRA",
            "team: infra",
            "kind: ValidatingAdmissionPolicy\n",
            "serviceAccounts: \"pulumi,deployer\"",
            "request.userInfo.username == 'system:serviceaccount:pulumi-operator-helm:helm-po-pulumi-operator'",
        ] {
            assert!(rendered.contains(expected), "no {expected} in:\n{rendered}");
        }
    }
}

const PROGRAM: &str = r#"name: helm
runtime: yaml
resources:
  rec:
    type: standin:index:Record
    properties:
      value: VALUE
outputs:
  value: ${rec.value}
"#;

/// Commits the program with `value`, points the Stack `app` at it and waits until it is Ready
/// with that output.
async fn deploy(f: &StackFixture, value: &str, what: &str) {
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &PROGRAM.replace("VALUE", value))], value);
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    f.wait_stack_for(Duration::from_secs(180), "app", what, |s| {
        stack_ready(s) && output_value(s) == value
    })
    .await;
}

#[tokio::test]
#[ignore = "stops the kustomize-installed operator while it runs: tests/run.sh runs it last"]
async fn helm_install_upgrade_and_uninstall() {
    // One operator at a time: the kustomize one stands aside.
    let _aside = KustomizeOperatorAside::new(RELEASE, NAMESPACE).await;
    let chart = chart();
    helm_ok(&[
        "install",
        RELEASE,
        &chart,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--wait",
        "--timeout",
        "3m",
    ]);
    let available = kubectl(&[
        "-n",
        NAMESPACE,
        "get",
        "deployment",
        FULLNAME,
        "-o",
        "jsonpath={.status.availableReplicas}",
    ]);
    assert_eq!(available.trim(), "1", "the operator is not available");

    let f = StackFixture::create("helm", false).await;
    deploy(&f, "one", "Ready under the Helm-installed operator").await;

    // Changed values roll the operator, which goes on deploying.
    helm_ok(&[
        "upgrade",
        RELEASE,
        &chart,
        "--namespace",
        NAMESPACE,
        "--set",
        "controller.logLevel=debug",
        "--wait",
        "--timeout",
        "3m",
    ]);
    let env = kubectl(&[
        "-n",
        NAMESPACE,
        "get",
        "deployment",
        FULLNAME,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].env[?(@.name==\"LOG_LEVEL\")].value}",
    ]);
    assert_eq!(env.trim(), "debug");
    deploy(&f, "two", "Ready with the new commit after the upgrade").await;

    helm_ok(&["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"]);
    wait_until(
        Duration::from_secs(120),
        "nothing of the release left running",
        || async {
            kubectl(&[
                "-n",
                NAMESPACE,
                "get",
                "deployments,pods,services",
                "-o",
                "name",
            ])
            .trim()
            .is_empty()
        },
    )
    .await;
    let (found, _, _) = kubectl_result(&["get", "clusterrole", FULLNAME]);
    assert!(!found, "the ClusterRole outlived the release");
    // The Stack (and its CRDs, as Helm keeps them) stay: deleting them is the user's choice.
    drop(f);
}
