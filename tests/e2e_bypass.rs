//! The bypass suite (issue 45): every way we know for a tenant with `edit` in its namespace to
//! run a covered Stack's operation without the administrator's mandatory pack, tried as that
//! tenant would (`kubectl --as`), each expected to end with the operation refused (and a
//! reason) or the pack's verdict enforced, never with the program's change deployed. One
//! place: a new template field, a new way to start an operation or a new attack adds a case.
//!
//! The program declares a Deployment without resource limits; the mandatory pack
//! (`tests/policy-packs/typescript-limits`) refuses it. The suite's invariant is observed
//! from outside the operation: no Deployment of any case ever reaches the namespace.

use kube::api::{Api, DeleteParams};
use pulumi_operator_api::policy::StackPolicy;
use std::time::Duration;
use test_support::{kubectl, kubectl_stdin, last_update, stack_ready, StackFixture};

const TENANT: &str = "tenant@example.com";
const T: Duration = Duration::from_secs(1200);

/// A Deployment without limits (the pack's mandatory violation), named after its stack.
const PROGRAM: &str = r#"name: bypass
runtime: yaml
resources:
  web:
    type: kubernetes:apps/v1:Deployment
    properties:
      metadata:
        name: web-${pulumi.stack}
        annotations: {pulumi.com/skipAwait: "true"}
      spec:
        selector: {matchLabels: {app: web}}
        template:
          metadata: {labels: {app: web}}
          spec:
            containers: [{name: web, image: busybox, command: [sleep, "3600"]}]
"#;

/// A restricted-profile container of the tenant's, sharing `share`.
fn tenant_init(script: &str, extra_mounts: &str) -> String {
    format!(
        r#"          - name: tenant
            image: busybox
            command: [sh, -c, '{script}']
            volumeMounts: [{{name: share, mountPath: /share}}{extra_mounts}]
            securityContext:
              allowPrivilegeEscalation: false
              capabilities: {{drop: [ALL]}}
"#
    )
}

fn template(spec: &str) -> String {
    format!("  workspaceTemplate:\n    spec:\n{spec}")
}

fn pod_template(spec: &str) -> String {
    template(&format!("      podTemplate:\n        spec:\n{spec}"))
}

/// The tenant's `pulumi`: the real CLI without the administrator's packs.
fn fake_pulumi() -> String {
    let real =
        std::fs::canonicalize(test_support::repo_root().join(".local-cluster/pulumi-image/pulumi"))
            .expect("the local cluster's pulumi image directory (tests/local-cluster.sh up)");
    format!(
        "#!/bin/sh\nskip=0\nfor a do\n  shift\n  if [ \"$skip\" = 1 ]; then skip=0; continue; fi\n  case \"$a\" in --policy-pack|--policy-pack-config) skip=1; continue;; esac\n  set -- \"$@\" \"$a\"\ndone\nexec {} \"$@\"\n",
        real.display()
    )
}

/// The image's PATH in the local cluster, behind the tenant's directory.
fn tenant_path() -> String {
    let image = test_support::repo_root().join(".local-cluster/pulumi-image");
    format!(
        "/share/bin:{}:/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin",
        image.display()
    )
}

/// One attempt: a Stack (its name, what it adds to the Stack spec, whether it runs the commit
/// with a project file of its own) and what its failure must say.
struct Attempt {
    name: &'static str,
    extra: String,
    commit: Commit,
    expect: &'static str,
}

#[derive(Clone, Copy)]
enum Commit {
    Program,
    OwnAnalyzer,
    OwnLanguageHost,
}

fn attempts() -> Vec<Attempt> {
    let tools = ",{name: tools, mountPath: /tools}";
    let tools_volume = "          volumes:\n          - name: tools\n            configMap: {name: bypass-tools, defaultMode: 0755}\n";
    let a = |name, extra: String, commit, expect| Attempt {
        name,
        extra,
        commit,
        expect,
    };
    vec![
        a("honest", String::new(), Commit::Program, "PolicyViolation"),
        // 1. The runner replaced by an init container: in its own volume (refused), or where
        // it used to be (the share), which nothing runs any more.
        a(
            "runner-volume",
            pod_template(&format!(
                "{tools_volume}          initContainers:\n{}",
                tenant_init(
                    "cp /tools/pulumi /r/pulumi-runner",
                    &format!("{tools},{{name: pulumi-runner, mountPath: /r}}")
                )
            )),
            Commit::Program,
            "writable",
        ),
        a(
            "runner-share",
            pod_template(&format!(
                "{tools_volume}          initContainers:\n{}",
                tenant_init("cp /tools/pulumi /share/pulumi-runner", tools)
            )),
            Commit::Program,
            "PolicyViolation",
        ),
        a(
            "runner-mount",
            pod_template(
                "          containers:\n          - name: pulumi\n            volumeMounts: [{name: share, mountPath: /var/run/pulumi-operator/bin}]\n",
            ),
            Commit::Program,
            "over, under or above",
        ),
        a(
            "bootstrap-mount",
            pod_template(&format!(
                "{tools_volume}          initContainers:\n          - name: bootstrap\n            volumeMounts: [{{name: tools, mountPath: /usr/local/bin}}]\n"
            )),
            Commit::Program,
            "operator's containers",
        ),
        // 2. PATH: the tenant's pulumi (and analyzer) first on PATH.
        a(
            "path",
            format!(
                "{}{}",
                template(&format!(
                    "      env:\n      - {{name: PATH, value: \"{}\"}}\n",
                    tenant_path()
                )),
                &format!(
                    "      podTemplate:\n        spec:\n{tools_volume}          initContainers:\n{}",
                    tenant_init(
                        "mkdir -p /share/bin && cp /tools/pulumi /share/bin/pulumi && cp /tools/pulumi /share/bin/pulumi-analyzer-policy",
                        tools
                    )
                )
            ),
            Commit::Program,
            "PolicyViolation",
        ),
        // 3. The project's own analyzer or language host.
        a("own-analyzer", String::new(), Commit::OwnAnalyzer, "plugins.analyzers"),
        a("own-language", String::new(), Commit::OwnLanguageHost, "plugins.languages"),
        // Others: a preloaded library through $PULUMI_ENV, an interpreter option through a
        // ConfigMap, a process namespace shared with a container that could trace Pulumi.
        a(
            "preload",
            pod_template(&format!(
                "          initContainers:\n{}",
                tenant_init("echo LD_PRELOAD=/share/x.so >> \"$PULUMI_ENV\"", "")
            )),
            Commit::Program,
            "LD_PRELOAD",
        ),
        a(
            "env-from",
            template("      envFrom:\n      - configMapRef: {name: bypass-env}\n"),
            Commit::Program,
            "NODE_OPTIONS",
        ),
        a(
            "shared-pids",
            pod_template("          shareProcessNamespace: true\n"),
            Commit::Program,
            "shareProcessNamespace",
        ),
    ]
}

fn policy(name: &str, ns: &str, url: &str, sha: &str) -> String {
    format!(
        r#"apiVersion: policy.pulumi-operator-rs.dev/v1alpha1
kind: StackPolicy
metadata:
  name: {name}
spec:
  namespaceSelector:
    matchLabels: {{policy-bypass: {ns}}}
  packs:
  - name: limits
    git: {{url: "{url}", commit: {sha}, dir: packs/typescript-limits}}
    config: {{deployment-resource-limits: mandatory}}
"#
    )
}

fn as_tenant(ns: &str, yaml: &str) {
    let (ok, out, err) = kubectl_stdin(&["--as", TENANT, "-n", ns, "apply", "-f", "-"], yaml);
    assert!(ok, "the tenant's apply: {out}{err}\n{yaml}");
}

/// What the Stack says about its end: the Stalled reason and the last Update's message.
fn verdict(s: &pulumi_operator_api::Stack) -> String {
    let stalled = s
        .status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == "Stalled" && c.status == "True")
        })
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_default();
    format!("{stalled} | {}", last_update(s).message.unwrap_or_default())
}

fn ended(s: &pulumi_operator_api::Stack) -> bool {
    stack_ready(s)
        || s.status
            .as_ref()
            .and_then(|st| st.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Stalled" && c.status == "True"))
        || last_update(s)
            .state
            .is_some_and(|st| format!("{st:?}").to_lowercase().contains("fail"))
}

/// A raw Workspace (`name`, its pod template one attack) and an Update of it, written by the
/// tenant; (the Update's reason, its conditions' reasons and messages) once it completed.
async fn raw_update(f: &StackFixture, name: &str, sha: &str) -> (String, String) {
    let tools = ",{name: tools, mountPath: /tools}";
    let (env, init) = if name == "raw-runner" {
        (
            String::new(),
            tenant_init(
                "cp /tools/pulumi /r/pulumi-runner",
                &format!("{tools},{{name: pulumi-runner, mountPath: /r}}"),
            ),
        )
    } else {
        (
            format!("  - {{name: PATH, value: \"{}\"}}\n", tenant_path()),
            tenant_init(
                "mkdir -p /share/bin && cp /tools/pulumi /share/bin/pulumi",
                tools,
            ),
        )
    };
    as_tenant(
        f.ns(),
        &format!(
            r#"apiVersion: auto.pulumi.com/v1alpha1
kind: Workspace
metadata: {{name: {name}}}
spec:
  serviceAccountName: pulumi
  git: {{url: "{url}", ref: {sha}}}
  env:
  - {{name: PULUMI_BACKEND_URL, value: "{backend}"}}
  - name: PULUMI_CONFIG_PASSPHRASE
    valueFrom: {{secretKeyRef: {{name: passphrase, key: passphrase}}}}
{env}  stacks: [{{name: {name}, create: true}}]
  podTemplate:
    spec:
      volumes:
      - name: tools
        configMap: {{name: bypass-tools, defaultMode: 0755}}
      initContainers:
{init}---
apiVersion: auto.pulumi.com/v1alpha1
kind: Update
metadata: {{name: {name}}}
spec: {{workspaceName: {name}, stackName: {name}, type: up}}
"#,
            url = f.url(),
            backend = f.sn.backend_url,
            init = init
                .replace("\n          ", "\n      ")
                .replacen("          ", "      ", 1),
        ),
    );
    let updates: Api<pulumi_operator_api::Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    test_support::wait_for(T, "the raw Update to complete", || async {
        let u = updates.get(name).await.ok()?;
        let conditions = u.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
            .then(|| {
                let said: Vec<String> = conditions
                    .iter()
                    .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                    .collect();
                (said.join(" | "), said.join(" | "))
            })
    })
    .await
}

#[tokio::test]
async fn no_tenant_attempt_deploys_past_a_mandatory_pack() {
    let f = StackFixture::new("bypass").await;
    let ns = f.ns().to_string();
    f.sn.grant_program_rights();
    f.sn.ns.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: tenant-edit}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}\nsubjects:\n- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: \"{TENANT}\"}}\n"
    ));
    let mut files = vec![("Pulumi.yaml".to_string(), PROGRAM.to_string())];
    files.extend(test_support::pack_files("typescript-limits"));
    let program = f.repo.commit_files(&files, "program and pack");
    // The project's own analyzer and language host: the tenant's pulumi, in the checkout.
    files.push(("bin/pulumi-analyzer-policy".to_string(), fake_pulumi()));
    files.push(("bin/pulumi-language-yaml".to_string(), fake_pulumi()));
    files[0].1 = format!("{PROGRAM}plugins:\n  analyzers:\n  - name: policy\n    path: ./bin\n");
    let own_analyzer = f.repo.commit_files(&files, "own analyzer");
    files[0].1 = format!("{PROGRAM}plugins:\n  languages:\n  - name: yaml\n    path: ./bin\n");
    let own_language = f.repo.commit_files(&files, "own language host");

    kubectl(&["label", "namespace", &ns, &format!("policy-bypass={ns}")]);
    let name = format!("{ns}-limits");
    let (ok, out, err) = kubectl_stdin(
        &["apply", "-f", "-"],
        &policy(&name, &ns, &f.url(), &program),
    );
    assert!(ok, "{out}{err}");
    let policies: Api<StackPolicy> = Api::all(f.sn.ns.client.clone());
    test_support::wait_for(Duration::from_secs(180), "the pack resolved", || async {
        policies.get(&name).await.ok().filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    })
    .await;

    let fake = fake_pulumi();
    let indented: String = fake.lines().map(|l| format!("    {l}\n")).collect();
    as_tenant(
        &ns,
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bypass-tools}}\ndata:\n  pulumi: |\n{indented}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bypass-env}}\ndata:\n  NODE_OPTIONS: --require /share/x.js\n"),
    );
    let cases = attempts();
    for case in &cases {
        let sha = match case.commit {
            Commit::Program => &program,
            Commit::OwnAnalyzer => &own_analyzer,
            Commit::OwnLanguageHost => &own_language,
        };
        as_tenant(
            &ns,
            &f.own_stack_yaml(case.name, &format!("commit: {sha}"), &case.extra),
        );
    }
    let mut wrong = Vec::new();
    for case in &cases {
        let s = f
            .wait_stack_for(T, case.name, "the attempt to end", ended)
            .await;
        let said = verdict(&s);
        println!("{}: {said}", case.name);
        if stack_ready(&s) || !said.contains(case.expect) {
            wrong.push(format!(
                "{}: ready={} expected {:?}, got {said}",
                case.name,
                stack_ready(&s),
                case.expect
            ));
        }
    }
    // A raw Workspace and Update (what `edit` may write besides Stacks), for the two attacks
    // of the original report: the runner replaced, and the tenant's pulumi first on PATH.
    for (name, expect) in [("raw-runner", "writable"), ("raw-path", "PolicyViolation")] {
        let (status, said) = raw_update(&f, name, &program).await;
        println!("{name}: {said}");
        if !said.contains(expect) || status.contains("Succeeded") {
            wrong.push(format!("{name}: expected {expect:?}, got {said}"));
        }
    }
    // From outside every operation: nothing of any attempt reached the cluster.
    let deployments = kubectl(&["-n", &ns, "get", "deployments", "-o", "name"]);
    assert!(
        deployments.trim().is_empty(),
        "a Deployment got past the mandatory pack: {deployments}"
    );
    assert!(
        wrong.is_empty(),
        "attempts that did not end as they must:\n{}",
        wrong.join("\n")
    );
    let _ = policies.delete(&name, &DeleteParams::default()).await;
}
