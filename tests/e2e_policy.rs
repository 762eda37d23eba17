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

const TOKEN: &str = "tok-policy-never-in-logs";
const FIRST: Duration = Duration::from_secs(900);

/// PKO's documented rights for the program, the dependency cache and the program's Secret.
fn prepare(f: &StackFixture) {
    f.sn.grant_program_rights();
    f.sn.ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: app-secrets}}\nstringData: {{token: {TOKEN}}}\n"
    ));
}

fn program_stack(f: &StackFixture, name: &str, sha: &str, labels: &str, extra: &str) -> String {
    let yaml = f.stack_yaml(
        name,
        &format!("commit: {sha}"),
        &format!(
            r#"  config:
    kubernetes:namespace: {ns}
  secretsRef:
    token:
      type: Secret
      secret: {{name: app-secrets, key: token}}
{extra}{cache}"#,
            ns = f.ns(),
            cache = test_support::DEPENDENCY_CACHE_TEMPLATE,
        ),
    );
    // Each Stack is a Pulumi stack of its own (they share the namespace's backend).
    yaml.replacen(
        &format!("  name: {name}\n"),
        &format!("  name: {name}\n  labels: {{{labels}}}\n"),
        1,
    )
    .replacen("  stack: dev\n", &format!("  stack: {name}\n"), 1)
}

/// The TypeScript program of tests/programs, its Service not awaited (the local cluster's
/// pods have loopback addresses, which EndpointSlices refuse; the policies are about the
/// Deployment).
fn typescript_program() -> Vec<(String, String)> {
    let mut files = test_support::program_files("typescript");
    for (path, content) in files.iter_mut() {
        if path == "index.ts" {
            *content = content.replace(
                "const service = new k8s.core.v1.Service(\"web\", {\n    spec:",
                "const service = new k8s.core.v1.Service(\"web\", {\n    metadata: { annotations: { \"pulumi.com/skipAwait\": \"true\" } },\n    spec:",
            );
            assert!(
                content.contains("skipAwait"),
                "the program changed: {content}"
            );
        }
    }
    files
}

fn stalled_reason(s: &pulumi_operator_api::Stack) -> String {
    s.status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Stalled"))
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

fn finished(s: &pulumi_operator_api::Stack) -> bool {
    stack_ready(s) || !stalled_reason(s).is_empty()
}

fn condition<'a>(
    s: &'a pulumi_operator_api::Stack,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == kind))
}

fn limits_policy(name: &str, ns: &str, url: &str, sha: &str, level: &str) -> String {
    format!(
        r#"apiVersion: policy.pulumi-operator-rs.dev/v1alpha1
kind: StackPolicy
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels: {{policy-e2e: {ns}}}
  packs:
  - name: limits
    git: {{url: "{url}", commit: {sha}, dir: packs/typescript-limits}}
    config: {{deployment-resource-limits: {level}}}
"#
    )
}

fn labels_policy(name: &str, ns: &str, url: &str, sha: &str) -> String {
    format!(
        r#"apiVersion: policy.pulumi-operator-rs.dev/v1alpha1
kind: StackPolicy
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels: {{policy-e2e: {ns}}}
  stackSelector:
    matchLabels: {{advisory: "yes"}}
  packs:
  - name: labels
    git: {{url: "{url}", commit: {sha}, dir: packs/python-advisory}}
"#
    )
}

/// A TypeScript pack (mandatory: Deployments need resource limits) and a Python pack
/// (advisory: Deployments need a `team` label, for Stacks labelled `advisory: "yes"`), from
/// git, on a TypeScript program with the real Kubernetes provider: the violating commit fails
/// with the violation in the Stack's status and no Deployment reaches the cluster; the same
/// commit deploys in an uncovered namespace; the fixed commit deploys with `PolicyWarnings`;
/// turning the mandatory policy off lets the violating commit deploy at its next operation;
/// and a tenant's attempts to get around the packs are refused.
#[tokio::test]
async fn packs_refuse_warn_and_follow_their_configuration() {
    let f = StackFixture::new("pol-ts").await;
    let g = StackFixture::new("pol-free").await;
    prepare(&f);
    prepare(&g);
    let ns = f.ns().to_string();
    let mut files = typescript_program();
    let program_only = files.clone();
    files.extend(test_support::pack_files("typescript-limits"));
    files.extend(test_support::pack_files("python-advisory"));
    let bad = f.repo.commit_files(&files, "no limits");
    for (path, content) in files.iter_mut() {
        if path == "index.ts" {
            *content = content.replace(
                "ports: [{ containerPort: 8080, name: \"http\" }],",
                "ports: [{ containerPort: 8080, name: \"http\" }],\n                    resources: { limits: { cpu: \"100m\", memory: \"128Mi\" } },",
            );
            assert!(
                content.contains("limits: { cpu"),
                "the program changed: {content}"
            );
        }
    }
    let good = f.repo.commit_files(&files, "limits");
    let free = g.repo.commit_files(&program_only, "no limits, no policy");

    kubectl(&["label", "namespace", &ns, &format!("policy-e2e={ns}")]);
    let policies: Api<StackPolicy> = Api::all(f.sn.ns.client.clone());
    let (limits, labels) = (format!("{ns}-limits"), format!("{ns}-labels"));
    apply_cluster(&limits_policy(&limits, &ns, &f.url(), &good, "mandatory"));
    apply_cluster(&labels_policy(&labels, &ns, &f.url(), &good));
    for name in [&limits, &labels] {
        wait_policy(&policies, name, "the packs resolved", |p| {
            ready_reason(p) == "True/Resolved"
        })
        .await;
    }

    f.sn.ns.apply(&program_stack(
        &f,
        "bad",
        &bad,
        "",
        "  destroyOnFinalize: true\n",
    ));
    f.sn.ns.apply(&program_stack(
        &f,
        "good",
        &good,
        "advisory: \"yes\"",
        "  destroyOnFinalize: true\n",
    ));
    g.sn.ns.apply(&program_stack(&g, "free", &free, "", ""));

    // The violating commit: refused, the violation listed once, nothing deployed.
    let s = f
        .wait_stack_for(FIRST, "bad", "the violating Stack to end", finished)
        .await;
    let logs = kubectl(&[
        "-n",
        &ns,
        "logs",
        &format!("job/{}", last_update(&s).name.unwrap_or_default()),
    ]);
    assert_eq!(
        stalled_reason(&s),
        "PolicyViolation",
        "{:?}\n{logs}",
        last_update(&s).message
    );
    let report = s
        .status
        .as_ref()
        .and_then(|st| st.policy.clone())
        .expect("status.policy");
    assert_eq!((report.violations, report.mandatory), (1, 1), "{report:?}");
    let v = &report.items[0];
    assert_eq!(
        (
            v.pack.as_str(),
            v.policy.as_str(),
            v.enforcement_level.as_str()
        ),
        ("k8s-limits", "deployment-resource-limits", "mandatory")
    );
    assert!(
        v.urn.ends_with("kubernetes:apps/v1:Deployment::web"),
        "{}",
        v.urn
    );
    assert!(
        v.message.contains("no cpu or memory limit"),
        "{}",
        v.message
    );
    assert!(!logs.contains(TOKEN), "the secret reached the log");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(f.sn.ns.client.clone(), &ns);
    let present = deployments.list(&Default::default()).await.unwrap().items;
    // Only the compliant Stack's Deployment may exist.
    assert!(
        present.iter().all(|d| d
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .is_none()
            || d.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|p| p.containers.iter().all(|c| c
                    .resources
                    .as_ref()
                    .and_then(|r| r.limits.as_ref())
                    .is_some()))),
        "a Deployment without limits reached the cluster"
    );
    let table = kubectl(&["-n", &ns, "get", "stack", "bad"]);
    assert!(table.contains("VIOLATIONS"), "{table}");
    let events = kubectl(&[
        "-n",
        &ns,
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=bad,reason=PolicyViolation",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("k8s-limits/deployment-resource-limits"),
        "no PolicyViolation Event: {events}"
    );
    let metrics = test_support::operator_metrics();
    assert!(
        test_support::metric_total(&metrics, "pulumi_operator_policy_violations_total") >= 1,
        "{metrics}"
    );

    // The fixed commit: Ready, with the advisory pack's warning.
    let s = f
        .wait_stack_for(FIRST, "good", "the compliant Stack to end", finished)
        .await;
    assert!(stack_ready(&s), "{:?}", last_update(&s).message);
    let warn = condition(&s, "PolicyWarnings").expect("PolicyWarnings");
    assert!(
        warn.message.contains("k8s-labels/deployment-team-label"),
        "{}",
        warn.message
    );
    let report = s
        .status
        .as_ref()
        .and_then(|st| st.policy.clone())
        .expect("status.policy");
    assert_eq!((report.violations, report.mandatory), (1, 0), "{report:?}");

    // The same violating program in an uncovered namespace deploys.
    let s = g
        .wait_stack_for(FIRST, "free", "the uncovered Stack to end", finished)
        .await;
    assert!(stack_ready(&s), "{:?}", last_update(&s).message);
    assert!(s
        .status
        .as_ref()
        .and_then(|st| st.policy.as_ref())
        .is_none());

    // Escapes: variables that change how packs run, and a template replacing the runner.
    f.sn.ns.apply(&program_stack(
        &f,
        "sneaky",
        &bad,
        "",
        "  envRefs:\n    NODE_OPTIONS: {type: Literal, literal: {value: \"--require /tmp/skip.js\"}}\n",
    ));
    let s = f
        .wait_stack_for(T, "sneaky", "the Stack with NODE_OPTIONS to fail", |s| {
            last_update(s)
                .message
                .is_some_and(|m| m.contains("NODE_OPTIONS"))
        })
        .await;
    assert!(!stack_ready(&s));

    // A template that replaces the runner's command is refused before anything runs.
    f.sn.ns.apply(&f.stack_yaml(
        "swapped",
        &format!("commit: {bad}"),
        "  workspaceTemplate:\n    spec:\n      podTemplate:\n        spec:\n          containers:\n          - name: pulumi\n            command: [pulumi, up, --yes, --skip-preview]\n",
    ));
    f.wait_stack_for(
        T,
        "swapped",
        "the Stack with its own command to fail",
        |s| {
            last_update(s)
                .message
                .is_some_and(|m| m.contains("replaces the pulumi container's command"))
        },
    )
    .await;
    // An Update written by hand against the violating Stack's Workspace runs with the packs.
    f.sn.ns.apply(
        "apiVersion: auto.pulumi.com/v1alpha1\nkind: Update\nmetadata: {name: by-hand}\nspec: {workspaceName: bad, stackName: bad, type: up}\n",
    );
    let updates: Api<pulumi_operator_api::Update> = Api::namespaced(f.sn.ns.client.clone(), &ns);
    let u = test_support::wait_for(FIRST, "the hand-made Update to end", || async {
        let u = updates.get("by-hand").await.ok()?;
        let done = u
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        done.then_some(u)
    })
    .await;
    let st = u.status.clone().unwrap_or_default();
    let failed = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed")
        .cloned();
    assert_eq!(
        failed.map(|c| (c.status, c.reason)),
        Some(("True".into(), "PolicyViolation".into())),
        "{st:?}"
    );
    assert_eq!(st.policy.map(|p| p.mandatory), Some(1));
    // With the approval gate, the saved plan is checked first: nobody is asked to approve it.
    f.sn.ns.apply(&program_stack(
        &f,
        "gated",
        &bad,
        "",
        "  approval: {required: true}\n",
    ));
    let s = f
        .wait_stack_for(
            FIRST,
            "gated",
            "the gated Stack's plan to be refused",
            finished,
        )
        .await;
    assert_eq!(
        stalled_reason(&s),
        "PolicyViolation",
        "{:?}",
        last_update(&s).message
    );
    let waiting = s
        .status
        .as_ref()
        .and_then(|st| st.approval.as_ref())
        .and_then(|a| a.state.clone());
    assert!(
        waiting
            .as_ref()
            .is_none_or(|w| w.as_str() != "AwaitingApproval"),
        "{waiting:?}"
    );

    // The administrator turns the mandatory policy off: the covered Ready Stack previews
    // again with the packs as they are now (a policy check, not its lastUpdate), and the
    // violating commit deploys at its next operation.
    let before = f.stack("good").await;
    let old_digest = before
        .status
        .as_ref()
        .and_then(|st| st.policy.as_ref())
        .and_then(|p| p.digest.clone());
    assert!(
        old_digest.is_some(),
        "no digest recorded: {:?}",
        before.status
    );
    let last_good = last_update(&before).name;
    apply_cluster(&limits_policy(&limits, &ns, &f.url(), &good, "disabled"));
    let s = f
        .wait_stack_for(FIRST, "good", "the policy check of the Ready Stack", |s| {
            let digest = s
                .status
                .as_ref()
                .and_then(|st| st.policy.as_ref())
                .and_then(|p| p.digest.clone());
            digest.is_some()
                && digest != old_digest
                && s.status
                    .as_ref()
                    .is_some_and(|st| st.current_update.is_none())
        })
        .await;
    assert!(stack_ready(&s), "{:?}", s.status);
    assert_eq!(
        last_update(&s).name,
        last_good,
        "a policy check is not the Stack's lastUpdate"
    );
    let checks = kubectl(&[
        "-n",
        &ns,
        "get",
        "updates",
        "-o",
        "jsonpath={.items[*].metadata.annotations.pulumi-operator-rs\\.dev/policy-check}",
    ]);
    assert!(!checks.trim().is_empty(), "no policy check Update");
    assert!(
        condition(&s, "PolicyWarnings").is_some(),
        "the advisory pack still warns"
    );
    wait_policy(&policies, &limits, "the new configuration observed", |p| {
        p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation
    })
    .await;
    kubectl(&[
        "-n",
        &ns,
        "annotate",
        "stack",
        "bad",
        "pulumi.com/reconciliation-request=after-config",
        "--overwrite",
    ]);
    let s = f
        .wait_stack_for(FIRST, "bad", "the violating commit to deploy", |s| {
            stack_ready(s)
        })
        .await;
    let report = s
        .status
        .as_ref()
        .and_then(|st| st.policy.clone())
        .expect("status.policy");
    assert_eq!(report.violations, 0, "{report:?}");

    for name in [&limits, &labels] {
        let _ = policies.delete(name, &DeleteParams::default()).await;
    }
}

/// `tests/policy-packs/<name>` as `<dir>/<name>.tar.gz` (the pack at `<name>/` inside);
/// returns its `sha256:` digest.
fn packaged(dir: &std::path::Path, name: &str) -> String {
    let archive = dir.join(format!("{name}.tar.gz"));
    let out = std::process::Command::new("tar")
        .arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(test_support::repo_root().join("tests/policy-packs"))
        .arg(name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    use sha2::Digest;
    let bytes = std::fs::read(&archive).unwrap();
    let hex: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// A packaged pack (a `.tar.gz` at a URL with its digest) and a pack from a Flux source (a
/// GitRepository whose artifact the test publishes, playing source-controller) cover a
/// namespace: the policy shows both digests, and a violating Stack there fails with the
/// mandatory violation of the one and the advisory violation of the other.
#[tokio::test]
async fn packaged_and_flux_packs_run_at_their_digest() {
    kubectl(&[
        "apply",
        "--server-side",
        "-f",
        test_support::repo_root()
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
    let f = StackFixture::new("pol-pkg").await;
    prepare(&f);
    let ns = f.ns().to_string();
    let bad = f.repo.commit_files(&typescript_program(), "no limits");
    let dir = std::env::temp_dir().join(format!("packs-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let server = test_support::FileServer::start(dir.clone());
    let limits = packaged(&dir, "typescript-limits");
    let labels = packaged(&dir, "python-advisory");
    f.sn.ns.apply("apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata: {name: packs}\nspec: {url: https://example.invalid/packs, interval: 1m}\n");
    let artifact = serde_json::json!({"status": {"artifact": {
        "path": "gitrepository/packs.tar.gz", "url": format!("{}/python-advisory.tar.gz", server.url),
        "revision": "main@sha1:0123", "digest": labels, "lastUpdateTime": "2026-01-01T00:00:00Z"
    }}});
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "gitrepository",
        "packs",
        "--subresource=status",
        "--type=merge",
        "-p",
        &artifact.to_string(),
    ]);

    kubectl(&["label", "namespace", &ns, &format!("policy-e2e={ns}")]);
    let name = format!("{ns}-packaged");
    apply_cluster(&format!(
        r#"apiVersion: policy.pulumi-operator-rs.dev/v1alpha1
kind: StackPolicy
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels: {{policy-e2e: {ns}}}
  packs:
  - name: limits
    archive: {{url: "{url}/typescript-limits.tar.gz", digest: "{limits}", dir: typescript-limits}}
  - name: labels
    fluxSource:
      sourceRef: {{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: packs, namespace: {ns}}}
      dir: python-advisory
"#,
        url = server.url
    ));
    let policies: Api<StackPolicy> = Api::all(f.sn.ns.client.clone());
    let p = wait_policy(&policies, &name, "both packs resolved", |p| {
        ready_reason(p) == "True/Resolved"
    })
    .await;
    let names = p.status.and_then(|s| s.pack_names).unwrap_or_default();
    assert_eq!(
        names,
        format!("limits@{},labels@{}", &limits[7..19], &labels[7..19])
    );

    f.sn.ns.apply(&program_stack(&f, "bad", &bad, "", ""));
    let s = f
        .wait_stack_for(FIRST, "bad", "the violating Stack to end", finished)
        .await;
    assert_eq!(
        stalled_reason(&s),
        "PolicyViolation",
        "{:?}",
        last_update(&s).message
    );
    let report = s
        .status
        .as_ref()
        .and_then(|st| st.policy.clone())
        .expect("status.policy");
    assert_eq!((report.violations, report.mandatory), (2, 1), "{report:?}");
    let levels: Vec<(String, String)> = report
        .items
        .iter()
        .map(|v| (v.pack.clone(), v.enforcement_level.clone()))
        .collect();
    assert_eq!(
        levels,
        [
            ("k8s-limits".to_string(), "mandatory".to_string()),
            ("k8s-labels".to_string(), "advisory".to_string())
        ]
    );
    let _ = policies.delete(&name, &DeleteParams::default()).await;
    let _ = std::fs::remove_dir_all(dir);
}

const PACK_PASSWORD: &str = "pack-pw-e2e-never-in-a-tenant-namespace";

/// A pack in a private repository (`gitAuth`: basic auth from a Secret in the operator's
/// namespace), following a branch. The operator fetches it and hands each operation a copy, so
/// the password reaches nothing in the tenant's namespace. A violating Stack deploys while the
/// pack is advisory; when the branch moves to the mandatory pack, a policy check (a preview,
/// no `up`) reports the mandatory violation on the deployed Stack, which stays Ready.
#[tokio::test]
async fn a_private_pack_on_a_branch_is_fetched_by_the_operator_and_rechecked_when_it_moves() {
    let f = StackFixture::new("pol-priv").await;
    prepare(&f);
    let ns = f.ns().to_string();
    let root = std::env::temp_dir().join(format!("private-packs-{ns}"));
    std::fs::create_dir_all(&root).unwrap();
    let packs = test_support::GitRepo::new(&root, "packs");
    let server = test_support::LoggedGitServer::start(
        &root,
        &["--user", "admin", "--password", PACK_PASSWORD, "--quiet"],
    );
    let url = format!("{}/packs.git", server.url);
    let advisory: Vec<(String, String)> = test_support::pack_files("typescript-limits")
        .into_iter()
        .map(|(path, content)| match path.ends_with("index.ts") {
            true => {
                let text = content.replace(
                    r#"enforcementLevel: "mandatory""#,
                    r#"enforcementLevel: "advisory""#,
                );
                assert!(text.contains(r#""advisory""#), "the pack changed: {text}");
                (path, text)
            }
            false => (path, content),
        })
        .collect();
    let first = packs.commit_files(&advisory, "advisory");
    let secret = format!("{ns}-packs");
    let operator_ns = test_support::OPERATOR_NAMESPACE;
    apply_cluster(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {secret}, namespace: {operator_ns}}}\nstringData: {{username: admin, password: {PACK_PASSWORD}}}\n"
    ));
    kubectl(&["label", "namespace", &ns, &format!("policy-e2e={ns}")]);
    let name = format!("{ns}-private");
    apply_cluster(&format!(
        r#"apiVersion: policy.pulumi-operator-rs.dev/v1alpha1
kind: StackPolicy
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels: {{policy-e2e: {ns}}}
  packs:
  - name: limits
    git:
      url: "{url}"
      branch: main
      dir: packs/typescript-limits
      gitAuth:
        basicAuth:
          userName: {{type: Secret, secret: {{name: {secret}, key: username}}}}
          password: {{type: Secret, secret: {{name: {secret}, key: password}}}}
"#
    ));
    let policies: Api<StackPolicy> = Api::all(f.sn.ns.client.clone());
    let revision = |p: &StackPolicy| {
        p.status
            .as_ref()
            .and_then(|s| s.packs.first())
            .and_then(|p| p.revision.clone())
            .unwrap_or_default()
    };
    let p = wait_policy(&policies, &name, "the private pack resolved", |p| {
        ready_reason(p) == "True/Resolved"
    })
    .await;
    assert_eq!(revision(&p), first);

    let bad = f.repo.commit_files(&typescript_program(), "no limits");
    f.sn.ns.apply(&program_stack(&f, "bad", &bad, "", ""));
    let s = f
        .wait_stack_for(FIRST, "bad", "the Stack under the advisory pack", finished)
        .await;
    assert!(stack_ready(&s), "{:?}", last_update(&s).message);
    let report = s.status.as_ref().and_then(|st| st.policy.clone());
    let report = report.expect("status.policy");
    assert_eq!((report.violations, report.mandatory), (1, 0), "{report:?}");
    let deployed = last_update(&s).name;
    // Nothing in the tenant's namespace carries the password: not the plan Secrets (which hold
    // the operator's copy of the pack), not the Jobs or pods.
    for kind in ["secrets", "jobs", "pods", "updates"] {
        let all = kubectl(&["-n", &ns, "get", kind, "-o", "json"]);
        assert!(
            !all.contains(PACK_PASSWORD),
            "the password is in the {kind}"
        );
    }

    // A pack that cannot run: the check fails without the packs' verdict. That is said (not
    // taken for a clean report) and tried again; the deployed revision stays as it was.
    let broken: Vec<(String, String)> = advisory
        .iter()
        .map(|(path, content)| match path.ends_with("index.ts") {
            true => (
                path.clone(),
                format!("{content}\nthis is not ( typescript\n"),
            ),
            false => (path.clone(), content.clone()),
        })
        .collect();
    let broken_commit = packs.commit_files(&broken, "broken");
    wait_policy(&policies, &name, "the policy at the broken commit", |p| {
        revision(p) == broken_commit
    })
    .await;
    let s = f
        .wait_stack_for(FIRST, "bad", "the failed policy check said", |s| {
            condition(s, "PolicyWarnings").is_some_and(|c| c.reason == "PolicyCheckFailed")
        })
        .await;
    assert!(stack_ready(&s), "a failed policy check never changes Ready");
    assert_eq!(last_update(&s).name, deployed, "no up ran");
    let failure = s
        .status
        .as_ref()
        .and_then(|st| st.policy.as_ref())
        .and_then(|p| p.check_failure.clone())
        .expect("status.policy.checkFailure");
    assert!(failure.attempts >= 1, "{failure:?}");
    let events = kubectl(&["-n", &ns, "get", "events", "-o", "json"]);
    assert!(
        events.contains("PolicyCheckFailed"),
        "no PolicyCheckFailed Event"
    );

    let second = packs.commit_files(&test_support::pack_files("typescript-limits"), "mandatory");
    wait_policy(
        &policies,
        &name,
        "the policy at the branch's new commit",
        |p| revision(p) == second,
    )
    .await;
    let s = f
        .wait_stack_for(FIRST, "bad", "the policy check after the move", |s| {
            s.status
                .as_ref()
                .and_then(|st| st.policy.as_ref())
                .is_some_and(|r| r.mandatory == 1 && r.check_failure.is_none())
        })
        .await;
    assert!(stack_ready(&s), "a policy check never changes Ready");
    assert_eq!(last_update(&s).name, deployed, "no up ran");
    let warnings = condition(&s, "PolicyWarnings").expect("PolicyWarnings");
    assert!(
        warnings.message.contains("mandatory"),
        "{}",
        warnings.message
    );

    let _ = policies.delete(&name, &DeleteParams::default()).await;
    kubectl(&["-n", operator_ns, "delete", "secret", &secret]);
    drop(server);
    let _ = std::fs::remove_dir_all(root);
}

/// A tenant edits an Update's plan Secret before its pod starts (the pod waits at a scheduling
/// gate the tenant's workspace template set) to drop the policy packs, then lets the pod go:
/// the Job carries the digest of the plan the operator wrote, and the runner refuses the
/// edited plan, so nothing runs without the packs.
#[tokio::test]
async fn a_plan_secret_edited_before_the_pod_starts_is_refused() {
    let f = StackFixture::new("pol-plan").await;
    prepare(&f);
    let ns = f.ns().to_string();
    let mut files = vec![("Pulumi.yaml".to_string(), PROGRAM.to_string())];
    files.extend(test_support::pack_files("typescript-limits"));
    let sha = f.repo.commit_files(&files, "program and pack");
    kubectl(&["label", "namespace", &ns, &format!("policy-e2e={ns}")]);
    let name = format!("{ns}-limits");
    apply_cluster(&limits_policy(&name, &ns, &f.url(), &sha, "mandatory"));
    let policies: Api<StackPolicy> = Api::all(f.sn.ns.client.clone());
    wait_policy(&policies, &name, "the pack resolved", |p| {
        ready_reason(p) == "True/Resolved"
    })
    .await;
    let gated = "  workspaceTemplate:\n    spec:\n      podTemplate:\n        spec:\n          schedulingGates:\n          - name: e2e.example/hold\n";
    f.sn.ns
        .apply(&f.stack_yaml("gated", &format!("commit: {sha}"), gated));
    let pod: serde_json::Value = test_support::wait_for(T, "the gated pod", || async {
        let (ok, out, _) = kubectl_result(&[
            "-n",
            &ns,
            "get",
            "pods",
            "-l",
            "auto.pulumi.com/component=update",
            "-o",
            "json",
        ]);
        let list: serde_json::Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        list["items"].as_array()?.first().cloned()
    })
    .await;
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let update = pod["metadata"]["labels"]["auto.pulumi.com/update-name"]
        .as_str()
        .unwrap()
        .to_string();

    // The tenant's edit: the same plan without its packs.
    let secret = format!("{update}-plan");
    let stored: serde_json::Value = serde_json::from_str(&kubectl(&[
        "-n", &ns, "get", "secret", &secret, "-o", "json",
    ]))
    .unwrap();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let text = b64
        .decode(stored["data"]["plan.json"].as_str().unwrap())
        .unwrap();
    let mut plan: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let packs = plan.as_object_mut().unwrap().remove("policyPacks");
    assert!(packs.is_some(), "the plan listed no packs: {plan}");
    let edited = b64.encode(serde_json::to_vec(&plan).unwrap());
    let patch = serde_json::json!({"data": {"plan.json": edited}}).to_string();
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "secret",
        &secret,
        "--type=merge",
        "-p",
        &patch,
    ]);
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "pod",
        &pod_name,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
    ]);

    let refused = test_support::wait_for(FIRST, "the Update refused", || async {
        let out = kubectl(&["-n", &ns, "get", "update", &update, "-o", "json"]);
        out.contains("plan Secret was changed").then_some(out)
    })
    .await;
    assert!(refused.contains("\"Failed\""), "{refused}");
    let _ = policies.delete(&name, &DeleteParams::default()).await;
}
