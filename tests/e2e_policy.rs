//! The administrator's policy packs (`StackPolicy`, issue 28), end to end on the local cluster:
//! a policy selects namespaces by label, resolves its pack's branch to a commit with the
//! operator's view of the repository, and counts the Stacks it covers; a pack that cannot be
//! resolved stalls every covered Stack with the pack's name and nothing runs, while the same
//! Stack in an uncovered namespace deploys; tenants (the `edit` role) cannot write policies.
//! Each test's policies select only its own namespace (by a label unique to it).

use kube::api::{Api, DeleteParams};
use pulumi_operator_api::policy::StackPolicy;
use std::time::Duration;
use test_support::{kubectl, kubectl_result, last_update, stack_ready, StackFixture};

const T: Duration = Duration::from_secs(180);
const PROGRAM: &str = "name: e2e\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: guarded\n";

fn policy_yaml(name: &str, ns: &str, url: &str, source: &str) -> String {
    format!(
        r#"apiVersion: policy.pulumi-operator-rs.dev/v1alpha1
kind: StackPolicy
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels: {{policy-e2e: {ns}}}
  packs:
  - name: k8s-limits
    git: {{url: "{url}", {source}, dir: packs/limits}}
    config: {{deployment-resource-limits: mandatory}}
"#
    )
}

fn apply_cluster(yaml: &str) {
    let (ok, out, err) = test_support::kubectl_stdin(&["apply", "-f", "-"], yaml);
    assert!(ok, "kubectl apply: {out}{err}");
}

async fn wait_policy(
    api: &Api<StackPolicy>,
    name: &str,
    what: &str,
    check: impl Fn(&StackPolicy) -> bool,
) -> StackPolicy {
    test_support::wait_for(T, what, || async {
        api.get(name).await.ok().filter(|p| check(p))
    })
    .await
}

fn ready_reason(p: &StackPolicy) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| format!("{}/{}", c.status, c.reason))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_stack_policy_resolves_its_packs_and_covers_only_its_namespaces() {
    let f = StackFixture::new("policy").await;
    let ns = f.ns().to_string();
    let sha = f.repo.commit(
        &[
            ("Pulumi.yaml", PROGRAM),
            ("packs/limits/PulumiPolicy.yaml", "runtime: nodejs\n"),
        ],
        "program and pack",
    );
    let policies: Api<StackPolicy> = Api::all(f.sn.ns.client.clone());
    let name = format!("{ns}-limits");
    apply_cluster(&policy_yaml(&name, &ns, &f.url(), "branch: main"));

    // The branch resolves to the commit; the namespace is not labelled yet: nothing covered.
    let p = wait_policy(&policies, &name, "the pack's branch resolved", |p| {
        ready_reason(p) == "True/Resolved"
    })
    .await;
    let st = p.status.clone().unwrap();
    assert_eq!(
        st.packs[0].revision.as_deref(),
        Some(sha.as_str()),
        "{st:?}"
    );
    assert_eq!(st.pack_names, Some(format!("k8s-limits@{}", &sha[..12])));
    assert_eq!(st.covered_stacks, Some(0));
    let table = kubectl(&["get", "stackpolicy", &name]);
    assert!(
        table.contains(&format!("k8s-limits@{}", &sha[..12])),
        "{table}"
    );

    // Uncovered, the Stack deploys.
    f.sn.ns
        .apply(&f.stack_yaml("free", &format!("commit: {sha}"), ""));
    f.wait_stack_for(T, "free", "the uncovered Stack is Ready", stack_ready)
        .await;

    // Tenants may read policies, never write them.
    let (denied, _, err) = kubectl_result(&[
        "--as",
        &format!("system:serviceaccount:{ns}:pulumi"),
        "--as-group",
        "system:authenticated",
        "delete",
        "stackpolicy",
        &name,
    ]);
    assert!(!denied, "a tenant deleted a StackPolicy");
    assert!(err.contains("forbidden"), "{err}");
    let (read, _, err) = kubectl_result(&[
        "--as",
        &format!("system:serviceaccount:{ns}:pulumi"),
        "--as-group",
        "system:authenticated",
        "get",
        "stackpolicy",
        &name,
    ]);
    assert!(read, "a tenant cannot read StackPolicies: {err}");

    // A pack whose branch does not exist: the policy says so, and once the namespace is
    // labelled, its Stacks stall naming the pack, and no Job runs.
    apply_cluster(&policy_yaml(&name, &ns, &f.url(), "branch: no-such-branch"));
    wait_policy(&policies, &name, "the pack reported unavailable", |p| {
        ready_reason(p) == "False/PackUnavailable"
    })
    .await;
    kubectl(&["label", "namespace", &ns, &format!("policy-e2e={ns}")]);
    // Once the operator has seen the label (the policy counts the Stack already there), a new
    // operation in the namespace is covered.
    wait_policy(
        &policies,
        &name,
        "the policy covers the labelled namespace",
        |p| p.status.as_ref().and_then(|s| s.covered_stacks) == Some(1),
    )
    .await;
    f.sn.ns
        .apply(&f.stack_yaml("guarded", &format!("commit: {sha}"), ""));
    let s = f
        .wait_stack_for(T, "guarded", "the covered Stack stalled", |s| {
            s.status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Stalled" && c.reason == "PolicyPackFailed")
                })
        })
        .await;
    let message = last_update(&s).message.unwrap_or_default();
    assert!(
        message.contains("policy pack \"k8s-limits\" of StackPolicy")
            && message.contains("no-such-branch"),
        "{message}"
    );
    let jobs = kubectl(&["-n", &ns, "get", "jobs", "-o", "name"]);
    let guarded_jobs = jobs.lines().filter(|j| j.contains("guarded")).count();
    assert_eq!(
        guarded_jobs, 0,
        "a covered Stack ran without its pack: {jobs}"
    );
    wait_policy(
        &policies,
        &name,
        "the policy counts the covered Stacks",
        |p| p.status.as_ref().and_then(|s| s.covered_stacks) == Some(2),
    )
    .await;

    let _ = policies.delete(&name, &DeleteParams::default()).await;
}
