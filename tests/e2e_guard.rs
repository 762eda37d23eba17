//! The stack identity guard (`kustomize/components/stack-identity-guard`, issue 45 §3) on the
//! local cluster: a ValidatingAdmissionPolicy that, in namespaces labelled
//! `pulumi-operator-rs.dev/stack-identity-guard: enforced`, lets only the operator's operations
//! run as a Stack ServiceAccount (`pulumi`), so that a tenant cannot run Pulumi with its identity
//! without the administrator's policy packs.
//!
//! The test installs the component as an administrator would (`kubectl kustomize | kubectl
//! apply`), labels a fresh Stack namespace, gives `tenant@example.com` the `edit` role there and
//! acts as that user (`kubectl --as`). Refused, each with the guard's message naming the
//! ServiceAccount and the label: a Pod, Job, CronJob, Deployment, StatefulSet, DaemonSet,
//! ReplicaSet (deprecated `serviceAccount` field) and ReplicationController running as `pulumi`;
//! a token for `pulumi` (TokenRequest and a legacy token Secret); exec into any pod, including
//! the retained workspace pod; an ephemeral container in, or an update of, a pod running as
//! `pulumi`; a change to the operator's workspace StatefulSet. Allowed: a Pod running as another
//! ServiceAccount (and exec into it by a cluster administrator), an ephemeral container in it, a
//! token for `default`; the same Pod as `pulumi` and a token for `pulumi` in a namespace without
//! the label (the guard is opt-in). And the tenant's Stacks still deploy: one whose operation is
//! a Job (the operator creates it, the job controller its pod, the node agent its projected
//! token) and one with a retained workspace (a StatefulSet and the StatefulSet controller's pod).
//!
//! Every check is made and the failures reported together, so that one run with the guard
//! removed shows that each refusal check can fail. The namespaces go at the end; the component
//! (cluster-scoped policy and binding, and its parameter ConfigMap in the operator's namespace)
//! stays installed: it matches labelled namespaces only, which no other test makes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use test_support::{
    kubectl, kubectl_result, kubectl_stdin, repo_root, stack_ready, StackFixture, TestNamespace,
    OPERATOR_NAMESPACE,
};

const COMPONENT: &str = "kustomize/components/stack-identity-guard";
const LABEL: &str = "pulumi-operator-rs.dev/stack-identity-guard";
const TENANT: &str = "tenant@example.com";
/// The guard's name for the request (the component's policy and binding).
const GUARD: &str = "pulumi-operator-stack-identity-guard";
const T: Duration = Duration::from_secs(240);

const PROGRAM: &str = "name: guard\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: guarded\noutputs:\n  value: ${rec.value}\n";

/// `a` relative to `b` (both absolute): kustomize refuses absolute component paths.
fn relative_to(a: &Path, b: &Path) -> PathBuf {
    let (a, b): (Vec<_>, Vec<_>) = (a.components().collect(), b.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out: PathBuf = b[common..].iter().map(|_| "..").collect();
    out.extend(&a[common..]);
    out
}

/// `kubectl kustomize` of an overlay holding `resources` (paths from the repository root) and
/// the component.
fn build(name: &str, resources: &[&str]) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("overlay dir");
    let dir = dir.canonicalize().expect("canonical");
    let repo = relative_to(&repo_root().canonicalize().expect("canonical root"), &dir);
    let resources: Vec<String> = resources
        .iter()
        .map(|r| format!("{}/{r}", repo.display()))
        .collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources: [{}]\ncomponents: [{}/{COMPONENT}]\n",
            resources.join(", "),
            repo.display()
        ),
    )
    .expect("write overlay");
    // Not test_support::kubectl: building needs no cluster, nor KUBECONFIG.
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", &dir.to_string_lossy()])
        .output()
        .expect("kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn documents(text: &str) -> Vec<serde_json::Value> {
    text.split("\n---\n")
        .filter_map(|doc| serde_norway::from_str::<serde_json::Value>(doc).ok())
        .filter(|v| !v.is_null())
        .collect()
}

/// With the base, the component adds its policy, binding and parameter ConfigMap; the operator
/// it exempts is the base's ServiceAccount. No cluster needed.
#[test]
fn the_component_builds_on_the_base() {
    let docs = documents(&build("guard-on-base", &["kustomize/base"]));
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == GUARD)
            .unwrap_or_else(|| panic!("no {kind} {GUARD}"))
            .clone()
    };
    let policy = find("ValidatingAdmissionPolicy");
    let binding = find("ValidatingAdmissionPolicyBinding");
    let params = find("ConfigMap");
    assert_eq!(params["metadata"]["namespace"], OPERATOR_NAMESPACE);
    assert_eq!(params["data"]["serviceAccounts"], "pulumi");
    assert_eq!(binding["spec"]["paramRef"]["name"], GUARD);
    assert_eq!(binding["spec"]["paramRef"]["namespace"], OPERATOR_NAMESPACE);
    assert_eq!(binding["spec"]["validationActions"][0], "Deny");
    for selector in [
        &binding["spec"]["matchResources"]["namespaceSelector"],
        &policy["spec"]["matchConstraints"]["namespaceSelector"],
    ] {
        assert_eq!(selector["matchLabels"][LABEL], "enforced", "{selector}");
    }
    let account = docs
        .iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .expect("the operator's ServiceAccount");
    let operator = format!(
        "system:serviceaccount:{}:{}",
        account["metadata"]["namespace"]
            .as_str()
            .expect("namespace"),
        account["metadata"]["name"].as_str().expect("name")
    );
    assert_eq!(
        policy["spec"]["variables"][0]["expression"],
        format!("request.userInfo.username == '{operator}'")
    );
}

/// A pod the `restricted` Pod Security Standard admits (the Stack namespace enforces it), so
/// that what refuses it is the guard.
fn pod_spec(sa_field: &str, sa: &str, indent: usize) -> String {
    let spec = format!(
        "{sa_field}: {sa}\nsecurityContext: {{runAsNonRoot: true, runAsUser: 1000, seccompProfile: {{type: RuntimeDefault}}}}\n\
         restartPolicy: RESTART\ncontainers:\n- name: main\n  image: pulumi/pulumi:latest-nonroot\n  command: [sleep, \"600\"]\n  \
         securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}\n"
    );
    spec.lines()
        .map(|l| format!("{}{l}\n", " ".repeat(indent)))
        .collect()
}

fn pod(name: &str, sa: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{}",
        pod_spec("serviceAccountName", sa, 2).replace("RESTART", "Always")
    )
}

/// A workload of `kind` whose pod template runs as `sa` (in `field`).
fn workload(kind: &str, name: &str, field: &str, sa: &str) -> String {
    let selector = format!("selector: {{matchLabels: {{app: {name}}}}}");
    let template = |indent: usize, restart: &str| {
        let pad = " ".repeat(indent);
        format!(
            "{pad}template:\n{pad}  metadata: {{labels: {{app: {name}}}}}\n{pad}  spec:\n{}",
            pod_spec(field, sa, indent + 4).replace("RESTART", restart)
        )
    };
    let (api, spec) = match kind {
        "Job" => ("batch/v1", template(2, "Never")),
        "CronJob" => (
            "batch/v1",
            format!(
                "  schedule: \"0 0 1 1 *\"\n  jobTemplate:\n    spec:\n{}",
                template(6, "Never")
            ),
        ),
        "StatefulSet" => (
            "apps/v1",
            format!(
                "  serviceName: {name}\n  {selector}\n{}",
                template(2, "Always")
            ),
        ),
        "ReplicationController" => (
            "v1",
            format!("  selector: {{app: {name}}}\n{}", template(2, "Always")),
        ),
        _ => (
            "apps/v1",
            format!("  {selector}\n{}", template(2, "Always")),
        ),
    };
    format!("apiVersion: {api}\nkind: {kind}\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

/// kubectl as the tenant in `ns`.
fn as_tenant(ns: &str, args: &[&str]) -> (bool, String, String) {
    kubectl_result(&[&["--as", TENANT, "-n", ns], args].concat())
}

fn create_as_tenant(ns: &str, yaml: &str, extra: &[&str]) -> (bool, String, String) {
    kubectl_stdin(
        &[&["--as", TENANT, "-n", ns, "create", "-f", "-"], extra].concat(),
        yaml,
    )
}

/// What failed, reported together at the end.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    /// The request must be refused by the guard, with a message that names `needles` (the
    /// ServiceAccount or the pod) and the label.
    fn refused(&mut self, what: &str, (ok, out, err): (bool, String, String), needles: &[&str]) {
        let message = format!("{out}{err}");
        if ok {
            self.0.push(format!(
                "{what}: allowed, the guard should refuse it\n{message}"
            ));
            return;
        }
        let expected: Vec<String> = [
            "stack identity guard: refused to".to_string(),
            format!("{LABEL}=enforced"),
        ]
        .into_iter()
        .chain(needles.iter().map(|n| n.to_string()))
        .collect();
        let missing: Vec<&String> = expected.iter().filter(|n| !message.contains(*n)).collect();
        if missing.is_empty() {
            eprintln!("refused as expected: {what}:\n  {}", message.trim());
        } else {
            self.0.push(format!(
                "{what}: refused, but not by the guard's message (no {missing:?}):\n{message}"
            ));
        }
    }

    fn allowed(&mut self, what: &str, (ok, out, err): (bool, String, String)) {
        if ok {
            eprintln!("allowed as expected: {what}");
        } else {
            self.0.push(format!(
                "{what}: refused, the guard should allow it\n{out}{err}"
            ));
        }
    }
}

/// The tenant may edit in `ns` (the `edit` ClusterRole, which the operator's aggregated roles
/// extend to Stacks), and `pulumi` exists there.
fn make_tenant_namespace(ns: &TestNamespace) {
    ns.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: tenant-edit}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}\n\
         subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: \"{TENANT}\"}}]\n"
    ));
    if !ns.kubectl_result(&["get", "serviceaccount", "pulumi"]).0 {
        ns.kubectl(&["create", "serviceaccount", "pulumi"]);
    }
}

/// Installs the component as an administrator would and waits until the API server enforces
/// it in `ns` (a server-side dry run of a pod running as `pulumi`, as the tenant, is refused).
/// False when it never does (reported by the checks that follow).
async fn install_guard(ns: &str) -> bool {
    let manifests = build("stack-identity-guard", &[]);
    let (ok, out, err) = kubectl_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &manifests,
    );
    assert!(ok, "applying the component:\n{out}{err}");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        let (ok, _, err) = create_as_tenant(ns, &pod("probe", "pulumi"), &["--dry-run=server"]);
        if !ok && err.contains("stack identity guard") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    false
}

fn stack_pod_service_account(ns: &str, selector: &str) -> String {
    kubectl(&[
        "-n",
        ns,
        "get",
        "pods",
        "-l",
        selector,
        "-o",
        "jsonpath={range .items[*]}{.spec.serviceAccountName}{\"\\n\"}{end}",
    ])
}

#[tokio::test]
async fn the_guard_keeps_stack_service_accounts_to_the_operator_in_labelled_namespaces() {
    let f = StackFixture::new("guard").await;
    let ns = f.ns().to_string();
    make_tenant_namespace(&f.sn.ns);
    kubectl(&["label", "namespace", &ns, &format!("{LABEL}=enforced")]);
    let mut findings = Findings::default();
    if !install_guard(&ns).await {
        findings
            .0
            .push("the guard never refused the probe pod (is the binding there?)".into());
    }

    // The tenant's Stacks, written by the tenant: an operation Job, and a retained workspace.
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "program");
    for (name, extra) in [("app", ""), ("kept", "  workspaceReclaimPolicy: Retain\n")] {
        let (ok, out, err) = kubectl_stdin(
            &["--as", TENANT, "-n", &ns, "apply", "-f", "-"],
            &f.own_stack_yaml(name, &format!("commit: {sha}"), extra),
        );
        assert!(ok, "the tenant cannot write a Stack:\n{out}{err}");
    }

    // Pods and workloads of the tenant's own that run as the Stack ServiceAccount.
    findings.refused(
        "a Pod running as pulumi",
        create_as_tenant(&ns, &pod("own-pod", "pulumi"), &[]),
        &["Pod own-pod", "\"pulumi\""],
    );
    for (kind, field) in [
        ("Job", "serviceAccountName"),
        ("CronJob", "serviceAccountName"),
        ("Deployment", "serviceAccountName"),
        ("StatefulSet", "serviceAccountName"),
        ("DaemonSet", "serviceAccountName"),
        ("ReplicaSet", "serviceAccount"),
        ("ReplicationController", "serviceAccountName"),
    ] {
        let name = format!("own-{}", kind.to_lowercase());
        findings.refused(
            &format!("a {kind} running as pulumi ({field})"),
            create_as_tenant(&ns, &workload(kind, &name, field, "pulumi"), &[]),
            &[&format!("{kind} {name}"), "\"pulumi\""],
        );
    }
    // Tokens for it.
    findings.refused(
        "kubectl create token pulumi",
        as_tenant(&ns, &["create", "token", "pulumi"]),
        &["token for ServiceAccount \"pulumi\""],
    );
    findings.refused(
        "a legacy token Secret for pulumi",
        create_as_tenant(
            &ns,
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: own-token\n  annotations: {kubernetes.io/service-account.name: pulumi}\ntype: kubernetes.io/service-account-token\n",
            &[],
        ),
        &["token Secret for ServiceAccount \"pulumi\""],
    );
    findings.allowed(
        "kubectl create token default",
        as_tenant(&ns, &["create", "token", "default"]),
    );

    // A pod of another ServiceAccount is the tenant's to run, not to exec into.
    findings.allowed(
        "a Pod running as default",
        create_as_tenant(&ns, &pod("other", "default"), &[]),
    );
    // A pod running as pulumi that a cluster administrator made (system:masters may).
    f.sn.ns.apply(&pod("admins", "pulumi"));
    for name in ["other", "admins"] {
        kubectl(&[
            "-n",
            &ns,
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=120s",
        ]);
    }
    findings.refused(
        "kubectl exec into a pod running as default",
        as_tenant(&ns, &["exec", "other", "--", "true"]),
        &["exec into pod other", "system:masters"],
    );
    findings.allowed(
        "kubectl exec by a cluster administrator",
        kubectl_result(&["-n", &ns, "exec", "other", "--", "true"]),
    );
    findings.refused(
        "an update of a pod running as pulumi",
        as_tenant(&ns, &["label", "pod", "admins", "tenant=was-here"]),
        &["Pod admins", "\"pulumi\""],
    );
    // Ephemeral containers: `edit` has no right to add them; a Role that does is still refused
    // for a pod running as pulumi.
    f.sn.ns.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: debugger}}\n\
         rules: [{{apiGroups: [\"\"], resources: [pods/ephemeralcontainers], verbs: [patch, update]}}]\n\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: tenant-debugger}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: debugger}}\n\
         subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: \"{TENANT}\"}}]\n"
    ));
    let debug = |pod: &str| {
        as_tenant(
            &ns,
            &[
                "debug",
                pod,
                "--profile=restricted",
                "--image=pulumi/pulumi:latest-nonroot",
                "--",
                "true",
            ],
        )
    };
    findings.refused(
        "an ephemeral container in a pod running as pulumi",
        debug("admins"),
        &["ephemeral container to pod admins", "\"pulumi\""],
    );
    findings.allowed(
        "an ephemeral container in a pod running as default",
        debug("other"),
    );

    // The tenant's Stacks deploy through the guard: the operator's Job, the job controller's
    // pod and its projected token; the retained workspace's StatefulSet and its pod.
    for name in ["app", "kept"] {
        f.wait_stack_for(T, name, &format!("{name} to be Ready"), stack_ready)
            .await;
    }
    let workspace_pod = "kept-workspace-0";
    kubectl(&[
        "-n",
        &ns,
        "wait",
        "--for=condition=Ready",
        &format!("pod/{workspace_pod}"),
        "--timeout=120s",
    ]);
    for (what, selector) in [
        ("the operation pods", "pulumi.com/stack-name=app"),
        ("the retained workspace pod", "pulumi.com/stack-name=kept"),
    ] {
        let accounts = stack_pod_service_account(&ns, selector);
        assert!(
            !accounts.trim().is_empty() && accounts.lines().all(|a| a == "pulumi"),
            "{what} run as {accounts:?}, not as pulumi: the guard checked nothing"
        );
    }
    let events = kubectl(&["-n", &ns, "get", "events", "-o", "json"]);
    assert!(
        !events.contains("stack identity guard: refused"),
        "the guard refused something of the operator's:\n{events}"
    );
    // What the operator made is out of the tenant's reach too.
    findings.refused(
        "kubectl exec into the retained workspace pod",
        as_tenant(&ns, &["exec", workspace_pod, "-c", "pulumi", "--", "true"]),
        &[&format!("exec into pod {workspace_pod}")],
    );
    findings.refused(
        "a new image for the retained workspace's StatefulSet",
        as_tenant(
            &ns,
            &[
                "set",
                "image",
                "statefulset/kept-workspace",
                "pulumi=pulumi/pulumi:evil",
            ],
        ),
        &["StatefulSet kept-workspace", "\"pulumi\""],
    );

    // Opt-in: a namespace without the label is not guarded.
    let free = TestNamespace::new("guard-off").await;
    make_tenant_namespace(&free);
    findings.allowed(
        "a Pod running as pulumi in a namespace without the label",
        create_as_tenant(&free.name, &pod("own-pod", "pulumi"), &[]),
    );
    findings.allowed(
        "kubectl create token pulumi in a namespace without the label",
        as_tenant(&free.name, &["create", "token", "pulumi"]),
    );

    assert!(
        findings.0.is_empty(),
        "{} check(s) of the stack identity guard failed:\n\n{}",
        findings.0.len(),
        findings.0.join("\n\n")
    );
}
