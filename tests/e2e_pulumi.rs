//! What only the real Pulumi CLI shows, end to end: Stacks whose programs deploy Kubernetes
//! objects into the test cluster with the Stack's own ServiceAccount (the canonical use of the
//! operator), a PKO documentation example adapted only in its program, drift found by a refresh
//! and by scheduled drift checks (`spec.driftDetection`, with and without automatic repair), the
//! plan-approval gate (`spec.approval`), the real provider's readiness waits and components, and
//! a provider's multi-line error as a user reads it in `kubectl get stack`.
//!
//! The `pulumi` container runs the real CLI, its YAML and Node.js language hosts and the real
//! Pulumi Kubernetes provider (tests/build-tools.sh), talking to the real apiserver. Drift and
//! approval run a TypeScript program (tests/programs/typescript-configmap) with its npm
//! dependencies, kept between operations in the namespace's dependency cache.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::Api;
use pulumi_operator_api::Stack;
use std::time::Duration;
use test_support::{
    kubectl, last_update, program_files, stack_ready, wait_for, wait_until, StackFixture,
    DEPENDENCY_CACHE_TEMPLATE,
};

const T: Duration = Duration::from_secs(180);

/// Lets the Stacks' ServiceAccount manage ConfigMaps in its namespace, as a user grants a
/// Stack the rights its program needs.
fn grant_config_maps(f: &StackFixture) {
    f.sn.ns.apply(&format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: manage-config-maps}}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: pulumi-manages-config-maps}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: manage-config-maps}}
subjects: [{{kind: ServiceAccount, name: pulumi, namespace: {ns}}}]
"#,
        ns = f.ns()
    ));
}

fn failed(s: &Stack) -> bool {
    last_update(s).state == Some(pulumi_operator_api::StackUpdateStateMessage::Failed)
}

fn job_logs(f: &StackFixture, s: &Stack) -> String {
    let update = last_update(s).name.unwrap_or_default();
    kubectl(&["-n", f.ns(), "logs", &format!("job/{update}")])
}

/// The Program and Stack of the PKO documentation's "Program" example
/// (`shared/seeds/004_*`, staticwebsite) with its S3 bucket program replaced by Kubernetes
/// objects; the Stack keeps its fields (programRef, destroyOnFinalize, config) and gains only
/// what this cluster needs instead of Pulumi Cloud: a file backend and a passphrase.
#[tokio::test]
async fn seed_program_deploys_kubernetes_objects_and_destroy_removes_them() {
    let f = StackFixture::new("seed").await;
    grant_config_maps(&f);
    f.sn.ns.apply(&format!(
        r#"apiVersion: pulumi.com/v1
kind: Program
metadata:
  name: staticwebsite
program:
  resources:
    my-bucket:
      type: kubernetes:core/v1:ConfigMap
      properties:
        data:
          purpose: bucket
    my-bucket-website:
      type: kubernetes:core/v1:ConfigMap
      properties:
        data:
          bucket: ${{my-bucket.metadata.name}}
          index.html: |
            # Hello, world!
      options:
        dependsOn:
          - ${{my-bucket}}
  outputs:
    bucketEndpoint: http://${{my-bucket-website.metadata.name}}
---
apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: staticwebsite
spec:
  serviceAccountName: pulumi
  stack: organization/staticwebsite/dev
  programRef:
    name: staticwebsite
  destroyOnFinalize: true
  config:
    aws:region: us-east-1
  backend: {backend}
  envRefs:
    PULUMI_CONFIG_PASSPHRASE:
      type: Secret
      secret: {{name: passphrase, key: passphrase}}
"#,
        backend = f.sn.backend_url
    ));
    let s = f
        .wait_stack_for(T, "staticwebsite", "the seed Stack Ready", stack_ready)
        .await;

    // The objects exist in the cluster, auto-named as Pulumi names them, wired together.
    let maps: Api<ConfigMap> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let deployed: Vec<ConfigMap> = maps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|m| {
            m.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("my-bucket-"))
        })
        .collect();
    assert_eq!(deployed.len(), 2, "{deployed:?}");
    let website = deployed
        .iter()
        .find(|m| {
            m.data
                .as_ref()
                .is_some_and(|d| d.contains_key("index.html"))
        })
        .expect("the website ConfigMap");
    let website_name = website.metadata.name.clone().unwrap_or_default();
    let bucket_name = website.data.as_ref().unwrap()["bucket"].clone();
    assert!(bucket_name.starts_with("my-bucket-") && bucket_name != website_name);
    let listed = kubectl(&["-n", f.ns(), "get", "configmaps", "-o", "name"]);
    assert!(listed.contains(&website_name), "{listed}");

    let outputs = s.status.as_ref().and_then(|st| st.outputs.clone());
    assert_eq!(
        outputs
            .as_ref()
            .and_then(|o| o.get("bucketEndpoint").cloned()),
        Some(serde_json::json!(format!("http://{website_name}"))),
        "{outputs:?}"
    );
    // `kubectl logs job/<update>` shows the real CLI at work.
    let logs = job_logs(&f, &s);
    for expected in [
        "kubernetes:core/v1:ConfigMap",
        "my-bucket-website",
        "created",
    ] {
        assert!(
            logs.contains(expected),
            "{expected} not in the logs:\n{logs}"
        );
    }

    // destroyOnFinalize: deleting the Stack destroys what it deployed, then lets it go.
    kubectl(&[
        "-n",
        f.ns(),
        "delete",
        "stack",
        "staticwebsite",
        "--wait=false",
    ]);
    let stacks = f.stacks();
    wait_until(T, "the Stack to be destroyed and gone", || async {
        stacks
            .get_opt("staticwebsite")
            .await
            .ok()
            .flatten()
            .is_none()
    })
    .await;
    for name in [&website_name, &bucket_name] {
        assert!(
            maps.get_opt(name).await.unwrap().is_none(),
            "{name} survived the destroy"
        );
    }
}

/// The TypeScript program of tests/programs/typescript-configmap (one ConfigMap named
/// `drift-target` with `greeting: hello`), its greeting replaced.
fn drift_program(greeting: &str) -> Vec<(String, String)> {
    let mut files = program_files("typescript-configmap");
    for (path, content) in files.iter_mut() {
        if path == "index.ts" {
            *content = content.replace("greeting: \"hello\"", &format!("greeting: \"{greeting}\""));
        }
    }
    files
}

/// A first operation of a TypeScript program installs its dependencies from npm.
const FIRST: Duration = Duration::from_secs(600);

/// The Stack fields a TypeScript program's Stack adds: the provider's namespace and the
/// namespace's dependency cache.
fn ts_stack(f: &StackFixture, source: &str, extra: &str) -> String {
    f.sn.grant_program_rights();
    f.stack_yaml(
        "app",
        source,
        &format!(
            "  config:\n    kubernetes:namespace: {}\n{DEPENDENCY_CACHE_TEMPLATE}{extra}",
            f.ns()
        ),
    )
}

/// `expectNoRefreshChanges`: the refresh before the update passes while the deployed object is
/// as Pulumi left it, fails once somebody changed it behind Pulumi's back (`kubectl patch`),
/// and passes again once the change is undone.
#[tokio::test]
async fn refresh_expecting_no_changes_catches_an_object_edited_with_kubectl() {
    let f = StackFixture::new("drift").await;
    let sha = f.repo.commit_files(&drift_program("hello"), "v1");
    f.sn.ns.apply(&ts_stack(
        &f,
        &format!("commit: {sha}"),
        "  refresh: true\n  expectNoRefreshChanges: true\n  continueResyncOnCommitMatch: true\n  resyncFrequencySeconds: 2\n  retryMaxBackoffDurationSeconds: 2\n",
    ));
    let first = f
        .wait_stack_for(FIRST, "app", "the first update Ready", stack_ready)
        .await;
    let first_update = last_update(&first).name.unwrap_or_default();
    let greeting = || {
        kubectl(&[
            "-n",
            f.ns(),
            "get",
            "configmap",
            "drift-target",
            "-o",
            "jsonpath={.data.greeting}",
        ])
    };
    assert_eq!(greeting(), "hello");

    // A resync with nothing changed passes its refresh.
    let stacks = f.stacks();
    let resynced = wait_for(T, "a later successful resync", || async {
        stacks.get("app").await.ok().filter(|s| {
            stack_ready(s) && last_update(s).name.as_deref() != Some(first_update.as_str())
        })
    })
    .await;
    assert!(job_logs(&f, &resynced).contains("refresh"));

    kubectl(&[
        "-n",
        f.ns(),
        "patch",
        "configmap",
        "drift-target",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"changed behind Pulumi's back"}}"#,
    ]);
    let drifted = f
        .wait_stack_for(T, "app", "the refresh to report the drift", failed)
        .await;
    let message = last_update(&drifted).message.unwrap_or_default();
    assert!(message.contains("no changes were expected"), "{message}");
    // Nothing was applied over the edit: the update did not run.
    assert_eq!(greeting(), "changed behind Pulumi's back");

    kubectl(&[
        "-n",
        f.ns(),
        "patch",
        "configmap",
        "drift-target",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"hello"}}"#,
    ]);
    f.wait_stack_for(T, "app", "Ready again once the edit is undone", stack_ready)
        .await;
}

fn drift_condition(s: &Stack) -> Option<(String, String, String)> {
    s.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DriftDetected")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn greeting(f: &StackFixture) -> String {
    kubectl(&[
        "-n",
        f.ns(),
        "get",
        "configmap",
        "drift-target",
        "-o",
        "jsonpath={.data.greeting}",
    ])
}

fn edit_greeting(f: &StackFixture) {
    kubectl(&[
        "-n",
        f.ns(),
        "patch",
        "configmap",
        "drift-target",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"changed behind Pulumi's back"}}"#,
    ]);
}

/// `spec.driftDetection` with a check every minute: an object edited with kubectl is found by
/// the next check (`DriftDetected=True` naming it, an Event, the diff in the check Job's log)
/// while the Stack stays Ready, its `lastUpdate` untouched and the edit left in place.
#[tokio::test]
async fn a_scheduled_drift_check_reports_an_object_edited_with_kubectl() {
    let f = StackFixture::new("driftcheck").await;
    let sha = f.repo.commit_files(&drift_program("hello"), "v1");
    f.sn.ns.apply(&ts_stack(
        &f,
        &format!("commit: {sha}"),
        "  driftDetection:\n    schedules: [\"* * * * *\"]\n",
    ));
    let first = f
        .wait_stack_for(FIRST, "app", "the first update Ready", stack_ready)
        .await;
    let deployed = last_update(&first).name.unwrap_or_default();
    assert_eq!(greeting(&f), "hello");
    edit_greeting(&f);
    let found = f
        .wait_stack_for(T, "app", "DriftDetected=True", |s| {
            drift_condition(s).is_some_and(|(status, _, _)| status == "True")
        })
        .await;
    let (_, reason, message) = drift_condition(&found).unwrap();
    assert_eq!(reason, "DriftDetected");
    assert!(message.contains("ConfigMap::settings"), "{message}");
    let drift = found.status.as_ref().unwrap().drift.clone().unwrap();
    assert_eq!(drift.drifted, Some(1), "{drift:?}");
    assert!(
        drift.resources[0].urn.ends_with("ConfigMap::settings"),
        "{drift:?}"
    );
    assert!(
        stack_ready(&found),
        "a drift check leaves Ready alone: {:?}",
        found.status
    );
    assert_eq!(
        last_update(&found).name.as_deref(),
        Some(deployed.as_str()),
        "a drift check is not the Stack's last update"
    );
    assert_eq!(
        greeting(&f),
        "changed behind Pulumi's back",
        "nothing is applied without autoRemediate"
    );
    let check = drift.last_check.unwrap_or_default();
    let logs = kubectl(&["-n", f.ns(), "logs", &format!("job/{check}")]);
    assert!(logs.contains("changed behind Pulumi's back"), "{logs}");
    let events = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=Stack,reason=DriftDetected",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(events.contains("ConfigMap::settings"), "{events}");
    let metrics = test_support::operator_metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("stacks_drifted{") && l.contains(f.ns()) && l.ends_with(" 1")),
        "{metrics}"
    );
}

/// `autoRemediate: true`: the check that finds the edit is followed by an `up` that puts the
/// object back, and the condition then says the drift was remediated.
#[tokio::test]
async fn auto_remediation_puts_a_drifted_object_back() {
    let f = StackFixture::new("driftheal").await;
    let sha = f.repo.commit_files(&drift_program("hello"), "v1");
    f.sn.ns.apply(&ts_stack(
        &f,
        &format!("commit: {sha}"),
        "  driftDetection:\n    schedules: [\"* * * * *\"]\n    timeZone: Europe/Paris\n    autoRemediate: true\n",
    ));
    let first = f
        .wait_stack_for(FIRST, "app", "the first update Ready", stack_ready)
        .await;
    let deployed = last_update(&first).name.unwrap_or_default();
    edit_greeting(&f);
    let healed = f
        .wait_stack_for(T, "app", "the drift remediated", |s| {
            drift_condition(s)
                .is_some_and(|(status, reason, _)| status == "False" && reason == "Remediated")
                && stack_ready(s)
        })
        .await;
    assert_eq!(greeting(&f), "hello");
    let repair = last_update(&healed);
    assert_ne!(repair.name.as_deref(), Some(deployed.as_str()));
    assert_eq!(
        repair.update_type,
        Some(pulumi_operator_api::UpdateType::Up)
    );
    let message = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "update",
        repair.name.as_deref().unwrap_or_default(),
        "-o",
        "jsonpath={.spec.message}",
    ]);
    assert!(
        message.starts_with("Drift detected: 1 resource"),
        "{message}"
    );
}

fn pending_plan(s: &Stack) -> Option<String> {
    let approval = s.status.as_ref()?.approval.as_ref()?;
    (approval.state == Some(pulumi_operator_api::ApprovalState::AwaitingApproval)
        && test_support::reconciling(s).is_some_and(|(r, _)| r == "AwaitingApproval"))
    .then(|| approval.plan.clone())
    .flatten()
}

fn events(f: &StackFixture, reason: &str) -> String {
    kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.kind=Stack,reason={reason}"),
        "-o",
        "jsonpath={.items[*].message}",
    ])
}

/// What the README tells a person to run to approve a plan.
fn approve(f: &StackFixture, plan: &str) {
    kubectl(&[
        "-n",
        f.ns(),
        "annotate",
        "stack",
        "app",
        &format!("pulumi.com/approve-plan={plan}"),
        "--overwrite",
    ]);
}

fn target_exists(f: &StackFixture) -> bool {
    !kubectl(&[
        "-n",
        f.ns(),
        "get",
        "configmaps",
        "--field-selector",
        "metadata.name=drift-target",
        "-o",
        "name",
    ])
    .trim()
    .is_empty()
}

/// `spec.approval`: the Stack saves a plan and waits (the diff in `kubectl logs job/<plan>`,
/// the counts in status, nothing deployed); a new commit makes a new plan; approving the
/// stale one is refused with an Event; approving the pending one applies exactly it.
#[tokio::test]
async fn a_gated_stack_applies_only_the_plan_a_person_approved() {
    let f = StackFixture::new("approval").await;
    let v1 = f.repo.commit_files(&drift_program("hello"), "v1");
    let gated = "  approval:\n    required: true\n";
    f.sn.ns
        .apply(&ts_stack(&f, &format!("commit: {v1}"), gated));
    let waiting = f
        .wait_stack_for(FIRST, "app", "a plan awaiting approval", |s| {
            pending_plan(s).is_some()
        })
        .await;
    let first = pending_plan(&waiting).unwrap();
    let approval = waiting.status.as_ref().unwrap().approval.clone().unwrap();
    assert!(
        approval.changes.get("create").is_some_and(|n| *n >= 1),
        "{approval:?}"
    );
    assert!(
        approval
            .resources
            .iter()
            .any(|r| r.urn.ends_with("ConfigMap::settings") && r.operation == "create"),
        "{approval:?}"
    );
    assert!(!stack_ready(&waiting));
    assert!(
        waiting.status.as_ref().unwrap().last_update.is_none(),
        "a plan is not an update: {:?}",
        waiting.status
    );
    assert!(!target_exists(&f), "nothing is deployed before approval");
    let diff = kubectl(&["-n", f.ns(), "logs", &format!("job/{first}")]);
    assert!(
        diff.contains("drift-target") && diff.contains("create"),
        "{diff}"
    );
    let (_, message) = test_support::reconciling(&waiting).unwrap();
    assert!(
        message.contains(&format!(
            "kubectl annotate stack app pulumi.com/approve-plan={first} --overwrite"
        )),
        "{message}"
    );
    assert!(events(&f, "AwaitingApproval").contains(&first));

    // A new commit: the pending plan is no longer valid, a new one waits.
    let v2 = f.repo.commit_files(&drift_program("approved"), "v2");
    f.sn.ns
        .apply(&ts_stack(&f, &format!("commit: {v2}"), gated));
    let replanned = f
        .wait_stack_for(T, "app", "a new plan for the new commit", |s| {
            pending_plan(s).is_some_and(|p| p != first)
        })
        .await;
    let second = pending_plan(&replanned).unwrap();

    // Approving the stale plan is refused, and applies nothing.
    approve(&f, &first);
    wait_until(T, "the stale approval refused", || async {
        events(&f, "ApprovalRefused").contains(&first)
    })
    .await;
    let refused = f.stack("app").await;
    assert_eq!(pending_plan(&refused).as_deref(), Some(second.as_str()));
    assert!(test_support::reconciling(&refused)
        .unwrap()
        .1
        .contains("refused"));
    assert!(!target_exists(&f));

    // The documented one-liner lists the Stacks awaiting approval.
    let listed = kubectl(&[
        "get",
        "stacks",
        "-A",
        "-o",
        r#"jsonpath={range .items[?(@.status.approval.state=="AwaitingApproval")]}{.metadata.namespace}/{.metadata.name} {.status.approval.plan}{"\n"}{end}"#,
    ]);
    assert!(
        listed.contains(&format!("{}/app {second}", f.ns())),
        "{listed}"
    );

    // Approving the pending plan applies it.
    approve(&f, &second);
    let applied = f
        .wait_stack_for(T, "app", "the approved plan applied", stack_ready)
        .await;
    assert_eq!(greeting(&f), "approved");
    let up = last_update(&applied);
    assert_eq!(up.update_type, Some(pulumi_operator_api::UpdateType::Up));
    let annotated = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "update",
        up.name.as_deref().unwrap_or_default(),
        "-o",
        r#"jsonpath={.metadata.annotations.pulumi\.com/applies-plan}"#,
    ]);
    assert_eq!(annotated, second);
    let logs = job_logs(&f, &applied);
    assert!(logs.contains("keeps to the approved plan"), "{logs}");
    let approval = applied.status.as_ref().unwrap().approval.clone().unwrap();
    assert_eq!(
        approval.state,
        Some(pulumi_operator_api::ApprovalState::Applied),
        "{approval:?}"
    );
    assert!(events(&f, "PlanApproved").contains(&second));
}

/// A provider error (the apiserver rejects an object for two reasons, which the real provider
/// reports on one line) reaches the Stack's `lastUpdate.message` and `kubectl describe` whole
/// and unescaped. A multi-line one is in the readiness test below.
#[tokio::test]
async fn a_provider_error_reaches_the_stack_readably() {
    let f = StackFixture::new("provider-error").await;
    grant_config_maps(&f);
    let program = r#"name: broken
runtime: yaml
resources:
  bad:
    type: kubernetes:core/v1:ConfigMap
    properties:
      metadata:
        name: Not_A_Valid_Name
      data:
        "not a valid key": x
"#;
    let sha = f.repo.commit(&[("Pulumi.yaml", program)], "v1");
    f.sn.ns
        .apply(&f.stack_yaml("app", &format!("commit: {sha}"), ""));
    let s = f
        .wait_stack_for(T, "app", "the update to fail", failed)
        .await;
    let message = last_update(&s).message.unwrap_or_default();
    assert!(message.contains("Not_A_Valid_Name"), "{message}");
    assert!(message.contains("not a valid key"), "{message}");
    assert!(!message.contains("\\\""), "escaped quotes: {message}");
    // `kubectl describe` shows the same text to the user.
    let described = kubectl(&["-n", f.ns(), "describe", "stack", "app"]);
    assert!(described.contains("Not_A_Valid_Name"), "{described}");
}

/// A program written for the real providers (`random`, `kubernetes`) with plain and secret
/// config: outputs reach the Stack, secrets stay `[secret]` there and in the Job's logs.
#[tokio::test]
async fn config_secrets_and_random_values_reach_the_program_and_its_outputs() {
    let f = StackFixture::new("random").await;
    grant_config_maps(&f);
    let program = r#"name: settings
runtime: yaml
config:
  greeting: {type: string}
  apiKey: {type: string, secret: true}
resources:
  pet:
    type: random:RandomPet
    properties:
      length: 2
  password:
    type: random:RandomPassword
    properties:
      length: 20
      special: false
  settings:
    type: kubernetes:core/v1:ConfigMap
    properties:
      data:
        greeting: ${greeting}
        owner: ${pet.id}
outputs:
  pet: ${pet.id}
  settingsName: ${settings.metadata.name}
  password: ${password.result}
  apiKey: ${apiKey}
"#;
    let sha = f.repo.commit(&[("Pulumi.yaml", program)], "v1");
    f.sn.ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: api}}\nstringData: {{key: e2e-api-key-5150}}\n---\n{}",
        f.stack_yaml(
            "app",
            &format!("commit: {sha}"),
            "  config:\n    greeting: hello\n  secretsRef:\n    apiKey:\n      type: Secret\n      secret: {name: api, key: key}\n",
        )
    ));
    let s = f.wait_stack_for(T, "app", "Ready", stack_ready).await;
    let outputs = s
        .status
        .as_ref()
        .and_then(|st| st.outputs.clone())
        .unwrap_or_default();
    let pet = outputs
        .get("pet")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    assert!(pet.contains('-') && pet.len() > 3, "{outputs:?}");
    assert_eq!(
        outputs.get("password"),
        Some(&serde_json::json!("[secret]")),
        "{outputs:?}"
    );
    assert_eq!(
        outputs.get("apiKey"),
        Some(&serde_json::json!("[secret]")),
        "{outputs:?}"
    );
    let name = outputs
        .get("settingsName")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let owner = kubectl(&[
        "-n",
        f.ns(),
        "get",
        "configmap",
        name,
        "-o",
        "jsonpath={.data.owner}",
    ]);
    assert_eq!(owner, pet);
    let logs = job_logs(&f, &s);
    assert!(
        !logs.contains("e2e-api-key-5150"),
        "the secret config leaked:\n{logs}"
    );
}

/// A project `name` with a Deployment whose pods fit no node, with its `pulumi.com/*` await
/// annotation.
fn unschedulable_deployment(name: &str, annotation: &str) -> String {
    format!(
        r#"name: {name}
runtime: yaml
resources:
  stuck:
    type: kubernetes:apps/v1:Deployment
    properties:
      metadata:
        annotations:
          {annotation}
      spec:
        selector: {{matchLabels: {{app: stuck}}}}
        template:
          metadata: {{labels: {{app: stuck}}}}
          spec:
            nodeSelector: {{no-such-label: "true"}}
            securityContext: {{runAsNonRoot: true, runAsUser: 1000, seccompProfile: {{type: RuntimeDefault}}}}
            containers:
            - name: app
              image: busybox
              command: [sleep, "86400"]
              securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
outputs:
  name: ${{stuck.metadata.name}}
"#
    )
}

/// The real provider's readiness wait: a Deployment that can never become ready fails its
/// Update once `pulumi.com/timeoutSeconds` has passed, with the provider's own reason in the
/// message; the same Deployment with `pulumi.com/skipAwait` succeeds at once.
#[tokio::test]
async fn the_provider_waits_for_readiness_unless_told_to_skip_it() {
    let f = StackFixture::new("await").await;
    f.sn.grant_program_rights();
    let sha = f.repo.commit(
        &[
            (
                "waits/Pulumi.yaml",
                &unschedulable_deployment("waits", "pulumi.com/timeoutSeconds: \"20\""),
            ),
            (
                "skips/Pulumi.yaml",
                &unschedulable_deployment("skips", "pulumi.com/skipAwait: \"true\""),
            ),
        ],
        "v1",
    );
    let config = format!("  config:\n    kubernetes:namespace: {}\n", f.ns());
    let started = std::time::Instant::now();
    for dir in ["waits", "skips"] {
        f.sn.ns
            .apply(&f.stack_yaml(dir, &format!("commit: {sha}\n  repoDir: {dir}"), &config));
    }
    let skipped = f
        .wait_stack_for(T, "skips", "the skipAwait Stack Ready", |s| {
            stack_ready(s) || failed(s)
        })
        .await;
    assert!(stack_ready(&skipped), "{:?}", last_update(&skipped).message);
    let waited = f
        .wait_stack_for(T, "waits", "the awaited Deployment to fail", failed)
        .await;
    let message = last_update(&waited).message.unwrap_or_default();
    // The provider's own words, on the lines it wrote them: what timed out, and why.
    assert!(
        message.contains("timed out waiting to be Ready")
            && message.contains("\n* Minimum number of live Pods was not attained"),
        "{message}"
    );
    assert!(!message.contains("\\n"), "escaped newlines: {message}");
    assert!(
        started.elapsed() < Duration::from_secs(170),
        "the 20 s timeout took {:?}",
        started.elapsed()
    );
}

/// `kubernetes:yaml/v2:ConfigFile`, a component of the real provider, deploys every document
/// of a multi-document manifest committed beside the program.
#[tokio::test]
async fn a_config_file_component_deploys_a_multi_document_manifest() {
    let f = StackFixture::new("configfile").await;
    f.sn.grant_program_rights();
    let program = r#"name: manifests
runtime: yaml
resources:
  app:
    type: kubernetes:yaml/v2:ConfigFile
    properties:
      file: ./manifest.yaml
"#;
    let manifest = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: first-document
data: {n: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: second-document
data: {n: "2"}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: third-document
"#;
    let sha = f.repo.commit(
        &[("Pulumi.yaml", program), ("manifest.yaml", manifest)],
        "v1",
    );
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        &format!("  config:\n    kubernetes:namespace: {}\n", f.ns()),
    ));
    let s = f
        .wait_stack_for(T, "app", "the update to end", |s| {
            stack_ready(s) || failed(s)
        })
        .await;
    assert!(stack_ready(&s), "{:?}", last_update(&s).message);
    for (kind, name) in [
        ("configmap", "first-document"),
        ("configmap", "second-document"),
        ("serviceaccount", "third-document"),
    ] {
        let found = kubectl(&["-n", f.ns(), "get", kind, name, "-o", "name"]);
        assert!(found.contains(name), "{kind}/{name} missing: {found}");
    }
    let logs = job_logs(&f, &s);
    assert!(logs.contains("kubernetes:yaml/v2:ConfigFile"), "{logs}");
}
