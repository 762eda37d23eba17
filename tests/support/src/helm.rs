//! The real `helm` (built by tests/build-tools.sh) against the local cluster, and the
//! kustomize-installed operator set aside while a Helm-installed one runs (one operator at a
//! time reconciles the cluster's Stacks).

use crate::{kubectl, kubectl_result, repo_root, wait_until, OPERATOR_NAMESPACE};
use std::process::Command;
use std::time::Duration;

/// This checkout's chart.
pub fn chart() -> String {
    repo_root()
        .join("charts/pulumi-operator")
        .to_string_lossy()
        .into_owned()
}

/// Runs helm with the test cluster's kubeconfig; returns (success, stdout, stderr).
pub fn helm(args: &[&str]) -> (bool, String, String) {
    let home = std::env::temp_dir().join("helm-test-home");
    let out = Command::new(crate::tool("helm"))
        .args(args)
        .env("KUBECONFIG", crate::kubeconfig())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("run helm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs helm; panics with its output if it fails.
pub fn helm_ok(args: &[&str]) -> String {
    let (ok, out, err) = helm(args);
    assert!(ok, "helm {} failed:\n{out}\n{err}", args.join(" "));
    out
}

/// The kustomize-installed operator scaled to zero while a Helm release `release` in
/// `namespace` runs; when dropped, however the test ends, the release is uninstalled, its
/// namespace deleted and the kustomize operator scaled back up.
pub struct KustomizeOperatorAside {
    release: &'static str,
    namespace: &'static str,
}

impl KustomizeOperatorAside {
    pub async fn new(release: &'static str, namespace: &'static str) -> KustomizeOperatorAside {
        crate::install_operator().await;
        let aside = KustomizeOperatorAside { release, namespace };
        kubectl(&[
            "-n",
            OPERATOR_NAMESPACE,
            "scale",
            "deployment/pulumi-operator",
            "--replicas=0",
        ]);
        wait_until(
            Duration::from_secs(120),
            "the kustomize-installed operator to stop",
            || async {
                kubectl(&[
                    "-n",
                    OPERATOR_NAMESPACE,
                    "get",
                    "pods",
                    "-l",
                    "app.kubernetes.io/name=pulumi-operator",
                    "-o",
                    "name",
                ])
                .trim()
                .is_empty()
            },
        )
        .await;
        aside
    }
}

impl Drop for KustomizeOperatorAside {
    fn drop(&mut self) {
        let _ = helm(&[
            "uninstall",
            self.release,
            "--namespace",
            self.namespace,
            "--wait",
        ]);
        let _ = kubectl_result(&["delete", "namespace", self.namespace, "--wait=false"]);
        let _ = kubectl_result(&[
            "-n",
            OPERATOR_NAMESPACE,
            "scale",
            "deployment/pulumi-operator",
            "--replicas=1",
        ]);
    }
}
